#include "sto_test.h"

#include <CUnit/Basic.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int64_t sto_now = 1700000000000LL;

int64_t sto_clock(void *opaque)
{
    (void)opaque;
    return sto_now;
}

char *sto_tmpdir(void)
{
    char tmpl[] = "/tmp/kbsto-XXXXXX";
    char *d = mkdtemp(tmpl);
    CU_ASSERT_FATAL(d != NULL);
    return strdup(d);
}

void sto_rmrf(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *de;
    char p[4096];
    if (!d) {
        unlink(path);
        return;
    }
    while ((de = readdir(d))) {
        struct stat st;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
        if (!lstat(p, &st) && S_ISDIR(st.st_mode))
            sto_rmrf(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(path);
}

kb_log_t *sto_open(const char *dir, const kb_log_config_t *cfg, int clean, int64_t rp)
{
    kb_log_open_opts_t o;
    char err[256] = "";
    kb_log_t *log;
    kb_log_open_opts_init(&o);
    o.clock = sto_clock;
    o.clean_shutdown = clean;
    o.recovery_point = rp;
    log = kb_log_open(dir, cfg, &o, err, sizeof(err));
    if (!log)
        fprintf(stderr, "open %s: %s\n", dir, err);
    CU_ASSERT_FATAL(log != NULL);
    return log;
}

void sto_cfg(kb_log_config_t *cfg, int64_t segment_bytes, int32_t interval)
{
    kb_log_config_defaults(cfg);
    cfg->segment_bytes = segment_bytes;
    cfg->index_interval_bytes = interval;
    cfg->message_ts_after_max_ms = INT64_MAX;
}

void sto_batch(kp_writer_t *wr, int64_t base, int32_t epoch, int n, int keybase, int tag,
               int64_t pid, int16_t pepoch, int32_t seq, int txn, int64_t ts)
{
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    int i;
    kp_batch_opts_init(&o);
    o.baseOffset = base;
    o.partitionLeaderEpoch = epoch;
    o.producerId = pid;
    o.producerEpoch = pid >= 0 ? pepoch : -1;
    o.baseSequence = pid >= 0 ? seq : -1;
    o.transactional = txn != 0;
    kp_batch_builder_init(&bb, &o);
    for (i = 0; i < n; i++) {
        char k[32], v[64];
        int kl = snprintf(k, sizeof(k), "k%d", keybase + i);
        int vl = snprintf(v, sizeof(v), "v%d@%d", i, tag);
        kp_batch_builder_add(&bb, ts + i, (kp_bytes_t){(const uint8_t *)k, kl},
                             (kp_bytes_t){(const uint8_t *)v, vl}, NULL, 0);
    }
    CU_ASSERT_FATAL(kp_batch_builder_finish(&bb, wr) == 0);
    kp_batch_builder_free(&bb);
}

void sto_kv(kp_writer_t *wr, int64_t base, const char *key, const char *value, int64_t ts)
{
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    kp_batch_opts_init(&o);
    o.baseOffset = base;
    o.partitionLeaderEpoch = 0;
    kp_batch_builder_init(&bb, &o);
    kp_batch_builder_add(&bb, ts, (kp_bytes_t){(const uint8_t *)key, (int32_t)strlen(key)},
                         value ? (kp_bytes_t){(const uint8_t *)value, (int32_t)strlen(value)}
                               : (kp_bytes_t){NULL, -1},
                         NULL, 0);
    CU_ASSERT_FATAL(kp_batch_builder_finish(&bb, wr) == 0);
    kp_batch_builder_free(&bb);
}

void sto_ctrl(kp_writer_t *wr, int64_t base, int32_t epoch, int16_t type, int64_t pid,
              int16_t pepoch, int64_t ts)
{
    kp_batch_opts_t o;
    kp_batch_opts_init(&o);
    if (type == KP_CONTROL_TYPE_MIRROR_PID_RESET) {
        kp_batch_opts_mirror_pid_reset(&o, base, epoch);
    } else {
        o.baseOffset = base;
        o.partitionLeaderEpoch = epoch;
        o.producerId = pid;
        o.producerEpoch = pepoch;
        o.transactional = true;
    }
    CU_ASSERT_FATAL(kp_batch_build_control(wr, &o, type, 0, ts) == 0);
}

int64_t sto_append(kb_log_t *log, int n, int keybase, int tag, int64_t ts)
{
    kp_writer_t wr;
    kb_append_info_t info;
    int rc;
    kp_writer_init(&wr);
    sto_batch(&wr, 0, 0, n, keybase, tag, -1, -1, -1, 0, ts);
    rc = kb_log_append_leader(log, wr.buf, wr.len, 1, KB_ORIGIN_CLIENT, 0, &info);
    CU_ASSERT_EQUAL(rc, 0);
    kp_writer_free(&wr);
    return rc ? -1 : info.first_offset;
}

uint8_t *sto_read_all(kb_log_t *log, int64_t from, int isolation, size_t *len)
{
    kp_writer_t acc;
    int64_t off = from;
    kp_writer_init(&acc);
    for (;;) {
        uint8_t *buf;
        size_t n;
        kb_log_read_t meta;
        int rc = kb_log_read_copy(log, off, 1 << 20, isolation, 1, &buf, &n, &meta);
        CU_ASSERT_EQUAL(rc, 0);
        if (rc || n == 0) {
            free(buf);
            break;
        }
        kp_write_raw(&acc, buf, n);
        free(buf);
        off = meta.next_offset;
    }
    *len = acc.len;
    if (acc.len == 0) {
        kp_writer_free(&acc);
        return calloc(1, 1);
    }
    return kp_writer_steal(&acc, len);
}

int sto_for_records(const uint8_t *buf, size_t len, sto_rec_cb cb, void *opaque)
{
    kp_batch_iter_t it;
    kp_batch_t b;
    int n = 0;
    kp_batch_iter_init(&it, buf, len, 0, 0);
    while (kp_batch_iter_next(&it, &b) == 1) {
        kp_record_iter_t ri;
        kp_record_t r;
        kp_writer_t scratch;
        kp_writer_init(&scratch);
        if (kp_record_iter_init(&ri, &b, &scratch, 1 << 26) == 0)
            while (kp_record_iter_next(&ri, &r) == 1) {
                cb(opaque, &b, &r);
                n++;
            }
        kp_writer_free(&scratch);
    }
    CU_ASSERT_EQUAL(it.err, 0);
    return n;
}

int main(int argc, char **argv)
{
    unsigned fails;
    (void)argc;
    (void)argv;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    sto_register_log_tests();
    sto_register_txn_tests();
    sto_register_recovery_tests();
    sto_register_cleaner_tests();
    sto_register_mgr_tests();
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
