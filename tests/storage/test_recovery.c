/* Crash recovery: torn tails, flipped bytes, missing / corrupt indexes, snapshots and epoch
 * checkpoints. KB_STO_SLOW=1 runs many more random iterations. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sto_test.h"

typedef struct sto_model_s {
    kp_writer_t bytes; /* every batch as stored, concatenated */
    int64_t *starts;   /* byte start of batch i in bytes */
    int64_t *next;     /* offset after batch i */
    size_t n, cap;
} sto_model_t;

static void sto_model_add(sto_model_t *m, const uint8_t *b, size_t len, int64_t next)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 64;
        m->starts = realloc(m->starts, m->cap * sizeof(*m->starts));
        m->next = realloc(m->next, m->cap * sizeof(*m->next));
    }
    m->starts[m->n] = (int64_t)m->bytes.len;
    m->next[m->n] = next;
    m->n++;
    kp_write_raw(&m->bytes, b, len);
}

static void sto_model_free(sto_model_t *m)
{
    kp_writer_free(&m->bytes);
    free(m->starts);
    free(m->next);
    memset(m, 0, sizeof(*m));
}

/* Build a log of @p nb batches (mixed producers) and mirror it in @p m. */
static kb_log_t *sto_build(const char *dir, kb_log_config_t *cfg, int nb, unsigned *seed,
                           sto_model_t *m)
{
    kb_log_t *log = sto_open(dir, cfg, 0, -1);
    int i;
    int32_t seq[4] = {0, 0, 0, 0};
    memset(m, 0, sizeof(*m));
    kp_writer_init(&m->bytes);
    for (i = 0; i < nb; i++) {
        kp_writer_t wr;
        kb_append_info_t info;
        int n = 1 + (int)(rand_r(seed) % 5);
        int p = (int)(rand_r(seed) % 5); /* 4 = no producer */
        kp_writer_init(&wr);
        if (p < 4) {
            sto_batch(&wr, 0, 0, n, i, i, 1000 + p, 0, seq[p], 0, sto_now + i);
            seq[p] += n;
        } else {
            sto_batch(&wr, 0, 0, n, i, i, -1, -1, -1, 0, sto_now + i);
        }
        CU_ASSERT_EQUAL_FATAL(
            kb_log_append_leader(log, wr.buf, wr.len, 1 + i / 50, KB_ORIGIN_CLIENT, 0, &info), 0);
        sto_model_add(m, wr.buf, wr.len, info.last_offset + 1);
        kp_writer_free(&wr);
    }
    return log;
}

/* After recovery the log must be exactly the model's first k batches, for some k ≥ @p min_k. */
static size_t sto_check_prefix(kb_log_t *log, const sto_model_t *m, size_t min_k)
{
    uint8_t *got;
    size_t n, k;
    int64_t leo = kb_log_leo(log);
    got = sto_read_all(log, 0, KB_ISOLATION_LEO, &n);
    for (k = 0; k < m->n && (k + 1 < m->n ? m->starts[k + 1] : (int64_t)m->bytes.len) <= (int64_t)n;
         k++)
        ;
    CU_ASSERT(k >= min_k);
    CU_ASSERT_EQUAL(n, k < m->n ? (size_t)m->starts[k] : m->bytes.len);
    CU_ASSERT(memcmp(got, m->bytes.buf, n) == 0);
    CU_ASSERT_EQUAL(leo, k ? m->next[k - 1] : 0);
    free(got);
    return k;
}

/* Segment .log files in order. */
static int sto_list_logs(const char *dir, char names[][64], int max)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0, i, j;
    while (d && (de = readdir(d)) && n < max) {
        size_t l = strlen(de->d_name);
        if (l == 24 && !strcmp(de->d_name + 20, ".log"))
            snprintf(names[n++], 64, "%s", de->d_name);
    }
    if (d)
        closedir(d);
    for (i = 0; i < n; i++)
        for (j = i + 1; j < n; j++)
            if (strcmp(names[i], names[j]) > 0) {
                char t[64];
                memcpy(t, names[i], 64);
                memcpy(names[i], names[j], 64);
                memcpy(names[j], t, 64);
            }
    return n;
}

static int64_t sto_file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) ? -1 : st.st_size;
}

static int sto_iterations(int base)
{
    const char *s = getenv("KB_STO_SLOW");
    return s && *s == '1' ? base * 20 : base;
}

/* Torn tail at a random point of a random segment (crash without fsync): recovery keeps every
 * whole valid batch before the cut and nothing after it. */
static void test_torn_tail(void)
{
    unsigned seed = 12345;
    int it, iters = sto_iterations(6);
    for (it = 0; it < iters; it++) {
        char *dir = sto_tmpdir();
        kb_log_config_t cfg;
        sto_model_t m;
        kb_log_t *log;
        char names[256][64], p[4200];
        int nseg, s;
        int64_t size, cut, seg_start_bytes = 0;
        size_t i, min_k = 0;
        sto_cfg(&cfg, 1500 + (int)(rand_r(&seed) % 3000), 128);
        log = sto_build(dir, &cfg, 120, &seed, &m);
        kb_log_close(log, 0); /* crash: no clean shutdown, no final snapshot */
        nseg = sto_list_logs(dir, names, 256);
        CU_ASSERT_FATAL(nseg > 1);
        s = (int)(rand_r(&seed) % (unsigned)nseg);
        snprintf(p, sizeof(p), "%s/%.63s", dir, names[s]);
        size = sto_file_size(p);
        cut = size > 0 ? (int64_t)(rand_r(&seed) % (unsigned)size) : 0;
        /* whole batches kept: those before the segment, plus those ending ≤ cut in it */
        for (i = 0; i < (size_t)s; i++) {
            char q[4200];
            snprintf(q, sizeof(q), "%s/%.63s", dir, names[i]);
            seg_start_bytes += sto_file_size(q);
        }
        /* A cut exactly between two batches of an older segment is indistinguishable from an
         * offset gap (compacted or mirrored logs have them) and later segments legitimately
         * survive it; crashes tear only the unflushed tail, so cut inside a batch there. */
        if (s + 1 < nseg) {
            for (i = 0; i < m.n; i++)
                if (m.starts[i] == seg_start_bytes + cut)
                    cut++;
        }
        CU_ASSERT_EQUAL_FATAL(truncate(p, cut), 0);
        while (min_k < m.n && (min_k + 1 < m.n ? m.starts[min_k + 1] : (int64_t)m.bytes.len) <=
                                  seg_start_bytes + cut)
            min_k++;
        log = sto_open(dir, &cfg, 0, -1);
        CU_ASSERT_EQUAL(sto_check_prefix(log, &m, min_k), min_k);
        /* the log keeps working: append, reopen cleanly */
        sto_append(log, 2, 0, 0, sto_now);
        kb_log_close(log, 1);
        log = sto_open(dir, &cfg, 1, -1);
        CU_ASSERT_EQUAL(kb_log_leo(log), (min_k ? m.next[min_k - 1] : 0) + 2);
        kb_log_close(log, 1);
        sto_model_free(&m);
        sto_rmrf(dir);
        free(dir);
    }
}

/* A flipped byte in the unflushed tail: everything before the damaged batch survives. */
static void test_flipped_bytes(void)
{
    unsigned seed = 777;
    int it, iters = sto_iterations(6);
    for (it = 0; it < iters; it++) {
        char *dir = sto_tmpdir();
        kb_log_config_t cfg;
        sto_model_t m;
        kb_log_t *log;
        char names[256][64], p[4200];
        int nseg, fd;
        int64_t size, pos, before = 0;
        size_t i, k, dmg;
        uint8_t b;
        sto_cfg(&cfg, 4096, 128);
        log = sto_build(dir, &cfg, 100, &seed, &m);
        kb_log_close(log, 0);
        nseg = sto_list_logs(dir, names, 256);
        for (i = 0; i + 1 < (size_t)nseg; i++) {
            char q[4200];
            snprintf(q, sizeof(q), "%s/%.63s", dir, names[i]);
            before += sto_file_size(q);
        }
        snprintf(p, sizeof(p), "%s/%.63s", dir, names[nseg - 1]);
        size = sto_file_size(p);
        CU_ASSERT_FATAL(size > 0);
        pos = (int64_t)(rand_r(&seed) % (unsigned)size);
        /* the damaged batch; baseOffset and partitionLeaderEpoch lie outside the CRC (by the
         * format's design), so flip elsewhere in the batch */
        for (dmg = 0; dmg + 1 < m.n && m.starts[dmg + 1] <= before + pos; dmg++)
            ;
        {
            int64_t rel = before + pos - m.starts[dmg];
            if (rel < 8 || (rel >= 12 && rel < 16))
                pos += 16 - rel;
        }
        fd = open(p, O_RDWR);
        CU_ASSERT_FATAL(fd >= 0);
        CU_ASSERT_EQUAL(pread(fd, &b, 1, pos), 1);
        b ^= (uint8_t)(1u << (rand_r(&seed) % 8));
        CU_ASSERT_EQUAL(pwrite(fd, &b, 1, pos), 1);
        close(fd);
        /* recovery from a recovery point before the last segment (as a crash would leave) */
        log = sto_open(dir, &cfg, 0, -1);
        k = sto_check_prefix(log, &m, 0);
        /* everything before the damaged batch is kept, nothing from it on */
        CU_ASSERT_EQUAL(k, dmg);
        if (k < dmg)
            fprintf(stderr, "flip at %lld (batch %zu) kept only %zu batches\n", (long long)pos, dmg,
                    k);
        kb_log_close(log, 1);
        sto_model_free(&m);
        sto_rmrf(dir);
        free(dir);
    }
}

static void sto_unlink_ext(const char *dir, const char *ext)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[4200];
    size_t el = strlen(ext);
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > el && !strcmp(de->d_name + l - el, ext)) {
            snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
            unlink(p);
        }
    }
    if (d)
        closedir(d);
}

static void sto_garble_ext(const char *dir, const char *ext, unsigned *seed)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[4200];
    size_t el = strlen(ext);
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > el && !strcmp(de->d_name + l - el, ext)) {
            int fd, i;
            int64_t sz;
            snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
            sz = sto_file_size(p);
            fd = open(p, O_RDWR);
            for (i = 0; fd >= 0 && sz > 0 && i < 3; i++) {
                uint8_t b = (uint8_t)rand_r(seed);
                CU_ASSERT_EQUAL(pwrite(fd, &b, 1, (int64_t)(rand_r(seed) % (unsigned)sz)), 1);
            }
            if (fd >= 0)
                close(fd);
        }
    }
    if (d)
        closedir(d);
}

/* Indexes, snapshots, the epoch checkpoint: missing or garbage, never trusted. */
static void test_missing_and_corrupt_side_files(void)
{
    static const char *const exts[] = {".index", ".timeindex", ".txnindex", ".snapshot",
                                       "leader-epoch-checkpoint"};
    unsigned seed = 99;
    size_t e;
    int garble;
    for (garble = 0; garble < 2; garble++) {
        for (e = 0; e < sizeof(exts) / sizeof(exts[0]); e++) {
            char *dir = sto_tmpdir();
            kb_log_config_t cfg;
            sto_model_t m;
            kb_log_t *log;
            int32_t *eps1, *eps2;
            int64_t *st1, *st2;
            size_t ne1, ne2;
            int64_t o1, o2, t1, t2;
            kb_producer_info_t pi1, pi2;
            sto_cfg(&cfg, 2048, 100);
            log = sto_build(dir, &cfg, 150, &seed, &m);
            kb_log_epoch_entries(log, &eps1, &st1, &ne1);
            kb_log_offset_for_timestamp(log, sto_now + 77, &o1, &t1, NULL);
            CU_ASSERT_EQUAL(kb_log_producer_get(log, 1001, &pi1), 0);
            kb_log_close(log, 1);
            if (garble)
                sto_garble_ext(dir, exts[e], &seed);
            else
                sto_unlink_ext(dir, exts[e]);
            log = sto_open(dir, &cfg, 1, -1); /* even after a clean shutdown */
            sto_check_prefix(log, &m, m.n);
            kb_log_epoch_entries(log, &eps2, &st2, &ne2);
            CU_ASSERT_EQUAL(ne1, ne2);
            CU_ASSERT(ne1 == ne2 && !memcmp(eps1, eps2, ne1 * sizeof(*eps1)) &&
                      !memcmp(st1, st2, ne1 * sizeof(*st1)));
            kb_log_offset_for_timestamp(log, sto_now + 77, &o2, &t2, NULL);
            CU_ASSERT_EQUAL(o1, o2);
            CU_ASSERT_EQUAL(kb_log_producer_get(log, 1001, &pi2), 0);
            CU_ASSERT_EQUAL(pi1.last_sequence, pi2.last_sequence);
            CU_ASSERT_EQUAL(pi1.last_offset, pi2.last_offset);
            {
                int64_t off;
                for (off = 0; off < kb_log_leo(log); off += 7) {
                    kb_log_read_t r;
                    CU_ASSERT_EQUAL(kb_log_read(log, off, 1, KB_ISOLATION_LEO, 1, &r), 0);
                    CU_ASSERT(r.first_offset >= 0 && r.first_offset <= off && r.next_offset > off);
                    kb_log_read_release(&r);
                }
            }
            free(eps1);
            free(eps2);
            free(st1);
            free(st2);
            kb_log_close(log, 1);
            sto_model_free(&m);
            sto_rmrf(dir);
            free(dir);
        }
    }
}

/* The recovery point from before the crash: only the tail is scanned, the result is the same. */
static void test_recovery_point(void)
{
    unsigned seed = 4242;
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    sto_model_t m;
    kb_log_t *log;
    int64_t rp;
    sto_cfg(&cfg, 2048, 100);
    cfg.flush_messages = 50; /* fsync every 50 records: the recovery point moves */
    log = sto_build(dir, &cfg, 120, &seed, &m);
    rp = kb_log_recovery_point(log);
    CU_ASSERT(rp > 0);
    kb_log_close(log, 0);
    log = sto_open(dir, &cfg, 0, rp);
    sto_check_prefix(log, &m, m.n);
    kb_log_close(log, 1);
    sto_model_free(&m);
    sto_rmrf(dir);
    free(dir);
}

void sto_register_recovery_tests(void)
{
    CU_pSuite s = CU_add_suite("recovery", NULL, NULL);
    CU_add_test(s, "torn tail at random points", test_torn_tail);
    CU_add_test(s, "flipped bytes", test_flipped_bytes);
    CU_add_test(s, "missing and corrupt side files", test_missing_and_corrupt_side_files);
    CU_add_test(s, "recovery point", test_recovery_point);
}
