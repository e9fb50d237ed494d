/* Log cleaner: latest value per key at its original offset, tombstones and markers after the
 * delete horizon, aborted data, MIRROR_PID_RESET kept, gaps, empty producer batches,
 * compressed batches, crash at every step of the swap. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sto_test.h"

#define STO_KEYS 12

typedef struct sto_kv_model_s {
    int64_t latest[STO_KEYS]; /* offset of the latest record per key, -1 none */
    int tomb[STO_KEYS];       /* latest is a tombstone */
    char val[4096][24];       /* value written at offset (small logs) */
} sto_kv_model_t;

typedef struct sto_seen_s {
    const sto_kv_model_t *m;
    int64_t cleaned_end;
    int64_t last_off;
    int errors;
    int records;
    int tombstones;
    int found_latest[STO_KEYS];
    int ctrl7;
    int markers;
} sto_seen_t;

static void sto_seen_cb(void *opaque, const kp_batch_t *b, const kp_record_t *r)
{
    sto_seen_t *s = opaque;
    int k;
    if (kp_batch_hdr_is_control(&b->hdr)) {
        kp_control_t c;
        if (kp_control_parse(r, &c, NULL) == 0) {
            if (c.type == KP_CONTROL_TYPE_MIRROR_PID_RESET)
                s->ctrl7++;
            else
                s->markers++;
        }
        return;
    }
    s->records++;
    if (r->offset <= s->last_off)
        s->errors++;
    s->last_off = r->offset;
    if (r->key.len < 2 || sscanf((const char *)r->key.ptr + 1, "%d", &k) != 1 || k < 0 ||
        k >= STO_KEYS) {
        s->errors++;
        return;
    }
    if (r->value.len < 0)
        s->tombstones++;
    /* the value found at this offset is the one written there */
    if (r->offset < 4096 && r->value.len >= 0 &&
        (r->value.len != (int32_t)strlen(s->m->val[r->offset]) ||
         memcmp(r->value.ptr, s->m->val[r->offset], (size_t)r->value.len))) {
        s->errors++;
        fprintf(stderr, "offset %lld: wrong value\n", (long long)r->offset);
    }
    if (s->m->latest[k] == r->offset)
        s->found_latest[k] = 1;
    else if (r->offset < s->cleaned_end && s->m->latest[k] < s->cleaned_end) {
        /* an older version inside the cleaned range survived */
        s->errors++;
        fprintf(stderr, "offset %lld: stale version of key %d survived\n", (long long)r->offset, k);
    }
}

static void sto_kv_put(kb_log_t *log, sto_kv_model_t *m, int key, int version, int tombstone)
{
    kp_writer_t wr;
    kb_append_info_t info;
    char k[16], v[24];
    snprintf(k, sizeof(k), "k%d", key);
    snprintf(v, sizeof(v), "k%d-v%d", key, version);
    kp_writer_init(&wr);
    sto_kv(&wr, 0, k, tombstone ? NULL : v, sto_now);
    CU_ASSERT_EQUAL_FATAL(kb_log_append_leader(log, wr.buf, wr.len, 0, KB_ORIGIN_CLIENT, 0, &info),
                          0);
    kp_writer_free(&wr);
    m->latest[key] = info.first_offset;
    m->tomb[key] = tombstone;
    if (info.first_offset < 4096)
        snprintf(m->val[info.first_offset], sizeof(m->val[0]), "%s", v);
}

static sto_seen_t sto_scan(kb_log_t *log, const sto_kv_model_t *m, int64_t cleaned_end)
{
    sto_seen_t s;
    uint8_t *buf;
    size_t n;
    memset(&s, 0, sizeof(s));
    s.m = m;
    s.cleaned_end = cleaned_end;
    s.last_off = -1;
    buf = sto_read_all(log, 0, KB_ISOLATION_LEO, &n);
    sto_for_records(buf, n, sto_seen_cb, &s);
    free(buf);
    return s;
}

static kb_log_t *sto_compacted(const char *dir, kb_log_config_t *cfg)
{
    sto_cfg(cfg, 600, 64);
    cfg->cleanup_policy = KB_CLEANUP_COMPACT;
    cfg->delete_retention_ms = 1000;
    return sto_open(dir, cfg, 0, -1);
}

static void sto_check_all_latest(const sto_seen_t *s, const sto_kv_model_t *m)
{
    int k;
    for (k = 0; k < STO_KEYS; k++)
        if (m->latest[k] >= 0 && !(m->tomb[k] && !s->found_latest[k]))
            CU_ASSERT(s->found_latest[k]);
    CU_ASSERT_EQUAL(s->errors, 0);
}

static void test_compaction_basic(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    sto_kv_model_t *m = calloc(1, sizeof(*m));
    kb_clean_stats_t st;
    sto_seen_t s;
    int i;
    int64_t leo, sz0;
    for (i = 0; i < STO_KEYS; i++)
        m->latest[i] = -1;
    log = sto_compacted(dir, &cfg);
    for (i = 0; i < 400; i++)
        sto_kv_put(log, m, (i * 7) % STO_KEYS, i, 0);
    leo = kb_log_leo(log);
    kb_log_set_hw(log, leo);
    CU_ASSERT(kb_log_segment_count(log) > 5);
    CU_ASSERT(kb_log_dirty_ratio(log, sto_now) > 0.9);
    sz0 = kb_log_size_bytes(log);
    CU_ASSERT_EQUAL(kb_log_clean(log, NULL, sto_now, 0, &st), 0);
    CU_ASSERT(st.segments_out > 0);
    CU_ASSERT(st.records_removed > 300);
    CU_ASSERT(kb_log_size_bytes(log) < sz0 / 3);
    CU_ASSERT_EQUAL(kb_log_leo(log), leo);
    CU_ASSERT_EQUAL(kb_log_cleaner_offset(log), st.end_offset);
    CU_ASSERT_EQUAL(kb_log_dirty_ratio(log, sto_now), 0.0);
    s = sto_scan(log, m, st.end_offset);
    sto_check_all_latest(&s, m);
    /* every remaining offset is still found by reads (indexes of the cleaned segments) */
    {
        int64_t off;
        for (off = 0; off < leo; off++) {
            kb_log_read_t r;
            CU_ASSERT_EQUAL(kb_log_read(log, off, 1, KB_ISOLATION_LEO, 1, &r), 0);
            CU_ASSERT(r.len > 0 && r.next_offset > off);
            kb_log_read_release(&r);
        }
    }
    /* more updates; a second pass with the earlier clean part */
    for (i = 0; i < 100; i++)
        sto_kv_put(log, m, i % 3, 1000 + i, 0);
    kb_log_set_hw(log, kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_clean(log, NULL, sto_now, 1, &st), 0);
    s = sto_scan(log, m, st.end_offset);
    sto_check_all_latest(&s, m);
    /* reopen (clean and recovered) sees the same */
    kb_log_close(log, 1);
    log = sto_open(dir, &cfg, 1, -1);
    s = sto_scan(log, m, st.end_offset);
    sto_check_all_latest(&s, m);
    kb_log_close(log, 0);
    log = sto_open(dir, &cfg, 0, -1);
    s = sto_scan(log, m, st.end_offset);
    sto_check_all_latest(&s, m);
    kb_log_close(log, 1);
    free(m);
    sto_rmrf(dir);
    free(dir);
}

static void test_tombstones(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    sto_kv_model_t *m = calloc(1, sizeof(*m));
    kb_clean_stats_t st;
    sto_seen_t s;
    int i;
    for (i = 0; i < STO_KEYS; i++)
        m->latest[i] = -1;
    log = sto_compacted(dir, &cfg);
    for (i = 0; i < 200; i++)
        sto_kv_put(log, m, i % STO_KEYS, i, 0);
    sto_kv_put(log, m, 3, 999, 1);
    sto_kv_put(log, m, 5, 999, 1);
    for (i = 0; i < 40; i++) /* push the tombstones out of the active segment */
        sto_kv_put(log, m, 0, 2000 + i, 0);
    kb_log_set_hw(log, kb_log_leo(log));
    /* pass 1: tombstones kept, their batches get a delete horizon */
    CU_ASSERT_EQUAL(kb_log_clean(log, NULL, sto_now, 1, &st), 0);
    s = sto_scan(log, m, st.end_offset);
    CU_ASSERT_EQUAL(s.tombstones, 2);
    CU_ASSERT(s.found_latest[3] && s.found_latest[5]);
    CU_ASSERT_EQUAL(s.errors, 0);
    /* before the horizon: still kept */
    sto_now += 500;
    CU_ASSERT_EQUAL(kb_log_clean(log, NULL, sto_now, 1, &st), 0);
    s = sto_scan(log, m, st.end_offset);
    CU_ASSERT_EQUAL(s.tombstones, 2);
    /* after delete.retention.ms: removed; other keys untouched */
    sto_now += 1000;
    CU_ASSERT_EQUAL(kb_log_clean(log, NULL, sto_now, 1, &st), 0);
    CU_ASSERT_EQUAL(st.tombstones_removed, 2);
    s = sto_scan(log, m, st.end_offset);
    CU_ASSERT_EQUAL(s.tombstones, 0);
    CU_ASSERT(!s.found_latest[3] && !s.found_latest[5]);
    m->latest[3] = m->latest[5] = -1;
    sto_check_all_latest(&s, m);
    kb_log_close(log, 1);
    free(m);
    sto_rmrf(dir);
    free(dir);
}

/* A mirrored compacted source: raw batches with offset gaps, transactions, and the reset. */
static void test_gaps_txn_and_reset(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    kp_writer_t wr;
    kb_clean_stats_t st;
    sto_seen_t s;
    sto_kv_model_t *m = calloc(1, sizeof(*m));
    int64_t off = 10;
    int i;
    uint8_t *buf;
    size_t n;
    for (i = 0; i < STO_KEYS; i++)
        m->latest[i] = -1;
    log = sto_compacted(dir, &cfg);
    kp_writer_init(&wr);
    for (i = 0; i < 60; i++) {
        char k[16], v[24];
        int key = i % 4;
        snprintf(k, sizeof(k), "k%d", key);
        snprintf(v, sizeof(v), "k%d-v%d", key, i);
        sto_kv(&wr, off, k, v, sto_now);
        m->latest[key] = off;
        snprintf(m->val[off], sizeof(m->val[0]), "%s", v);
        off += 3; /* gaps of 2 */
    }
    /* an aborted transaction on key 9 and a committed one on key 10 */
    sto_batch(&wr, off, 0, 1, 9, 0, 77, 0, 0, 1, sto_now);
    sto_ctrl(&wr, off + 1, 0, KP_CONTROL_TYPE_ABORT, 77, 0, sto_now);
    sto_batch(&wr, off + 2, 0, 1, 10, 0, 78, 0, 0, 1, sto_now);
    snprintf(m->val[off + 2], sizeof(m->val[0]), "v0@0");
    m->latest[10] = off + 2;
    sto_ctrl(&wr, off + 3, 0, KP_CONTROL_TYPE_COMMIT, 78, 0, sto_now);
    sto_ctrl(&wr, off + 4, 0, KP_CONTROL_TYPE_MIRROR_PID_RESET, -1, -1, sto_now);
    off += 5;
    CU_ASSERT_EQUAL_FATAL(kb_log_append_raw(log, wr.buf, wr.len, NULL), 0);
    kp_writer_reset(&wr);
    for (i = 0; i < 20; i++) { /* roll past everything above */
        sto_kv(&wr, off, "k11", "x", sto_now);
        snprintf(m->val[off], sizeof(m->val[0]), "x");
        m->latest[11] = off;
        off += 1;
    }
    CU_ASSERT_EQUAL_FATAL(kb_log_append_raw(log, wr.buf, wr.len, NULL), 0);
    kp_writer_free(&wr);
    kb_log_set_hw(log, kb_log_leo(log));
    for (i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(kb_log_clean(log, NULL, sto_now, 1, &st), 0);
        sto_now += 2000;
    }
    buf = sto_read_all(log, 0, KB_ISOLATION_LEO, &n);
    memset(&s, 0, sizeof(s));
    s.m = m;
    s.cleaned_end = st.end_offset;
    s.last_off = -1;
    sto_for_records(buf, n, sto_seen_cb, &s);
    free(buf);
    /* keys 0..3 latest kept at their original (gapped) offsets; aborted key 9 gone; committed
     * key 10 kept with its marker; the reset kept whatever happens */
    CU_ASSERT(s.found_latest[0] && s.found_latest[1] && s.found_latest[2] && s.found_latest[3]);
    CU_ASSERT(s.found_latest[10]);
    CU_ASSERT_EQUAL(s.ctrl7, 1);
    CU_ASSERT_EQUAL(s.markers, 1); /* the commit (data kept); the abort went after its horizon */
    CU_ASSERT_EQUAL(s.errors, 0);
    /* keys 0-3, key 10, and the k11 records of the active (uncleaned) segment */
    CU_ASSERT(s.records >= 4 + 1 + 1 && s.records < 4 + 1 + 20);
    CU_ASSERT(s.found_latest[11]);
    kb_log_close(log, 1);
    free(m);
    sto_rmrf(dir);
    free(dir);
}

/* An idempotent producer's last batch keeps its header when all its records are removed. */
static void test_empty_producer_batch_kept(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    kp_writer_t wr;
    kb_clean_stats_t st;
    kb_append_info_t info;
    uint8_t *buf;
    size_t n;
    int i, empty = 0;
    log = sto_compacted(dir, &cfg);
    kp_writer_init(&wr);
    sto_batch(&wr, 0, 0, 2, 0, 0, 55, 0, 0, 0, sto_now); /* keys k0,k1 seq 0-1 */
    CU_ASSERT_EQUAL(kb_log_append_leader(log, wr.buf, wr.len, 0, KB_ORIGIN_CLIENT, 0, NULL), 0);
    for (i = 0; i < 40; i++) {
        kp_writer_reset(&wr);
        sto_batch(&wr, 0, 0, 2, 0, i, -1, -1, -1, 0, sto_now); /* keys k0,k1 again */
        CU_ASSERT_EQUAL(kb_log_append_leader(log, wr.buf, wr.len, 0, KB_ORIGIN_CLIENT, 0, NULL), 0);
    }
    kp_writer_free(&wr);
    kb_log_set_hw(log, kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_clean(log, NULL, sto_now, 1, &st), 0);
    buf = sto_read_all(log, 0, KB_ISOLATION_LEO, &n);
    {
        kp_batch_iter_t it;
        kp_batch_t b;
        kp_batch_iter_init(&it, buf, n, 0, 0);
        while (kp_batch_iter_next(&it, &b) == 1)
            if (b.hdr.producerId == 55) {
                empty++;
                CU_ASSERT_EQUAL(b.hdr.recordCount, 0);
                CU_ASSERT_EQUAL(b.hdr.baseOffset, 0);
                CU_ASSERT_EQUAL(b.hdr.lastOffsetDelta, 1);
                CU_ASSERT_EQUAL(b.hdr.baseSequence, 0);
            }
        CU_ASSERT_EQUAL(it.err, 0);
    }
    free(buf);
    CU_ASSERT_EQUAL(empty, 1);
    /* its sequence state survives a full rebuild */
    kb_log_close(log, 0);
    {
        char p[4200];
        DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d)))
            if (strstr(de->d_name, ".snapshot")) {
                snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
                unlink(p);
            }
        if (d)
            closedir(d);
    }
    log = sto_open(dir, &cfg, 0, -1);
    kp_writer_init(&wr);
    sto_batch(&wr, 0, 0, 2, 0, 0, 55, 0, 0, 0, sto_now);
    CU_ASSERT_EQUAL(kb_log_append_leader(log, wr.buf, wr.len, 0, KB_ORIGIN_CLIENT, 0, &info),
                    KB_STO_DUPLICATE_SEQUENCE);
    CU_ASSERT_EQUAL(info.first_offset, 0);
    kp_writer_free(&wr);
    kb_log_close(log, 1);
    sto_rmrf(dir);
    free(dir);
}

static void test_compressed_batches(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    kb_clean_stats_t st;
    uint8_t *buf;
    size_t n;
    int i, batches = 0, records = 0;
    log = sto_compacted(dir, &cfg);
    for (i = 0; i < 30; i++) {
        kp_batch_opts_t o;
        kp_batch_builder_t bb;
        kp_writer_t wr;
        char k[16], v[32];
        int j;
        kp_batch_opts_init(&o);
        o.codec = (i % 2) ? KP_CODEC_ZSTD : KP_CODEC_LZ4;
        kp_batch_builder_init(&bb, &o);
        for (j = 0; j < 4; j++) {
            int kl = snprintf(k, sizeof(k), "k%d", j + (i == 29 ? 10 : 0));
            int vl = snprintf(v, sizeof(v), "value-%d-%d", i, j);
            kp_batch_builder_add(&bb, sto_now, (kp_bytes_t){(const uint8_t *)k, kl},
                                 (kp_bytes_t){(const uint8_t *)v, vl}, NULL, 0);
        }
        kp_writer_init(&wr);
        kp_batch_builder_finish(&bb, &wr);
        kp_batch_builder_free(&bb);
        CU_ASSERT_EQUAL(kb_log_append_leader(log, wr.buf, wr.len, 0, KB_ORIGIN_CLIENT, 0, NULL), 0);
        kp_writer_free(&wr);
    }
    /* roll so everything but the last batch is cleanable */
    kb_log_set_hw(log, kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_clean(log, NULL, sto_now, 1, &st), 0);
    buf = sto_read_all(log, 0, KB_ISOLATION_LEO, &n);
    {
        kp_batch_iter_t it;
        kp_batch_t b;
        kp_batch_iter_init(&it, buf, n, 0, 0); /* CRCs verified */
        while (kp_batch_iter_next(&it, &b) == 1) {
            batches++;
            records += b.hdr.recordCount;
            CU_ASSERT(kp_batch_hdr_codec(&b.hdr) != KP_CODEC_NONE);
        }
        CU_ASSERT_EQUAL(it.err, 0);
    }
    free(buf);
    CU_ASSERT(batches < 30);
    CU_ASSERT(records < 30 * 4);
    CU_ASSERT(st.records_removed > 0);
    kb_log_close(log, 1);
    sto_rmrf(dir);
    free(dir);
}

static int sto_count_suffix(const char *dir, const char *sfx)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    size_t sl = strlen(sfx);
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > sl && !strcmp(de->d_name + l - sl, sfx))
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

static void test_crash_mid_swap(void)
{
    int point;
    for (point = 1; point <= 3; point++) {
        char *dir = sto_tmpdir();
        kb_log_config_t cfg;
        kb_log_t *log;
        sto_kv_model_t *m = calloc(1, sizeof(*m));
        kb_cleaner_config_t cc;
        kb_clean_stats_t st;
        sto_seen_t s;
        int i, k;
        int64_t leo;
        for (i = 0; i < STO_KEYS; i++)
            m->latest[i] = -1;
        log = sto_compacted(dir, &cfg);
        for (i = 0; i < 300; i++)
            sto_kv_put(log, m, (i * 5) % STO_KEYS, i, 0);
        leo = kb_log_leo(log);
        kb_log_set_hw(log, leo);
        kb_cleaner_config_defaults(&cc);
        cc.test_crash_point = point;
        CU_ASSERT_EQUAL(kb_log_clean(log, &cc, sto_now, 1, &st), KB_STO_ABORTED);
        if (point == 1)
            CU_ASSERT(sto_count_suffix(dir, ".cleaned") > 0);
        if (point == 2)
            CU_ASSERT(sto_count_suffix(dir, ".log.swap") == 1);
        if (point == 3)
            CU_ASSERT(sto_count_suffix(dir, ".deleted") > 0);
        kb_log_close(log, 0); /* the process "died" */
        log = sto_open(dir, &cfg, 0, -1);
        CU_ASSERT_EQUAL(sto_count_suffix(dir, ".cleaned"), 0);
        CU_ASSERT_EQUAL(sto_count_suffix(dir, ".swap"), 0);
        CU_ASSERT_EQUAL(sto_count_suffix(dir, ".deleted"), 0);
        CU_ASSERT_EQUAL(sto_count_suffix(dir, ".swapend"), 0);
        CU_ASSERT_EQUAL(kb_log_leo(log), leo);
        /* no data lost whichever side of the commit point we crashed on */
        s = sto_scan(log, m, point == 1 ? 0 : 0);
        for (k = 0; k < STO_KEYS; k++)
            CU_ASSERT(s.found_latest[k]);
        CU_ASSERT_EQUAL(s.errors, 0);
        if (point >= 2) {
            CU_ASSERT(s.records < 300); /* the swap was completed by recovery */
        } else {
            CU_ASSERT_EQUAL(s.records, 300);
        }
        /* and cleaning works again afterwards */
        kb_log_set_hw(log, leo);
        CU_ASSERT_EQUAL(kb_log_clean(log, NULL, sto_now, 1, &st), 0);
        s = sto_scan(log, m, st.end_offset);
        sto_check_all_latest(&s, m);
        kb_log_close(log, 1);
        free(m);
        sto_rmrf(dir);
        free(dir);
    }
}

void sto_register_cleaner_tests(void)
{
    CU_pSuite s = CU_add_suite("cleaner", NULL, NULL);
    CU_add_test(s, "latest value per key at its offset", test_compaction_basic);
    CU_add_test(s, "tombstones after delete.retention.ms", test_tombstones);
    CU_add_test(s, "gaps, transactions, MIRROR_PID_RESET", test_gaps_txn_and_reset);
    CU_add_test(s, "empty producer batch kept", test_empty_producer_batch_kept);
    CU_add_test(s, "compressed batches", test_compressed_batches);
    CU_add_test(s, "crash mid-swap", test_crash_mid_swap);
}
