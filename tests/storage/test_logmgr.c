/* Retention, DeleteRecords, flush policy, and the log manager (several log.dirs, checkpoints,
 * clean shutdown, deletion, cleaner threads). */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kb_logmgr.h"
#include "sto_test.h"

static void test_retention_time_and_size(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    kb_retention_stats_t st;
    int i, nseg;
    int64_t t0 = sto_now, start;
    sto_cfg(&cfg, 1024, 128);
    cfg.retention_ms = 10000;
    log = sto_open(dir, &cfg, 0, -1);
    for (i = 0; i < 100; i++)
        sto_append(log, 3, i, i, t0 + i * 1000); /* one batch per second of record time */
    nseg = kb_log_segment_count(log);
    CU_ASSERT(nseg > 5);
    /* nothing above the HW goes */
    sto_now = t0 + 1000000;
    CU_ASSERT_EQUAL(kb_log_retention_run(log, sto_now, &st), 0);
    CU_ASSERT_EQUAL(st.segments_deleted, 0);
    kb_log_set_hw(log, 150);
    CU_ASSERT_EQUAL(kb_log_retention_run(log, sto_now, &st), 0);
    CU_ASSERT(st.segments_deleted > 0);
    start = kb_log_start_offset(log);
    CU_ASSERT(start > 0 && start <= 150);
    /* all data is old, HW at the end: everything but the active segment goes */
    kb_log_set_hw(log, kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_retention_run(log, sto_now, &st), 0);
    CU_ASSERT_EQUAL(kb_log_segment_count(log), 1);
    start = kb_log_start_offset(log);
    {
        kb_log_read_t r;
        int64_t off, ts;
        CU_ASSERT_EQUAL(kb_log_read(log, start - 1, 100, KB_ISOLATION_HW, 1, &r),
                        KB_STO_OFFSET_OUT_OF_RANGE);
        CU_ASSERT_EQUAL(kb_log_read(log, start, 100, KB_ISOLATION_HW, 1, &r), 0);
        CU_ASSERT_EQUAL(r.first_offset, start);
        kb_log_read_release(&r);
        CU_ASSERT_EQUAL(kb_log_offset_for_timestamp(log, KB_TS_EARLIEST, &off, &ts, NULL), 0);
        CU_ASSERT_EQUAL(off, start);
    }
    kb_log_close(log, 1);
    sto_rmrf(dir);
    free(dir);

    /* by size */
    dir = sto_tmpdir();
    sto_cfg(&cfg, 1024, 128);
    cfg.retention_ms = -1;
    cfg.retention_bytes = 3000;
    log = sto_open(dir, &cfg, 0, -1);
    for (i = 0; i < 100; i++)
        sto_append(log, 3, i, i, sto_now);
    kb_log_set_hw(log, kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_retention_run(log, sto_now, &st), 0);
    CU_ASSERT(st.segments_deleted > 0);
    CU_ASSERT(kb_log_size_bytes(log) >= 3000 - 1024 && kb_log_size_bytes(log) <= 3000 + 1024);
    /* compact-only topics are never deleted by retention */
    cfg.cleanup_policy = KB_CLEANUP_COMPACT;
    cfg.retention_bytes = 0;
    kb_log_set_config(log, &cfg);
    nseg = kb_log_segment_count(log);
    CU_ASSERT_EQUAL(kb_log_retention_run(log, sto_now, &st), 0);
    CU_ASSERT_EQUAL(kb_log_segment_count(log), nseg);
    kb_log_close(log, 1);
    sto_rmrf(dir);
    free(dir);
}

static void test_delete_records_and_flush(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    int i;
    int64_t ns;
    sto_cfg(&cfg, 1024, 128);
    cfg.flush_ms = 5000;
    log = sto_open(dir, &cfg, 0, -1);
    for (i = 0; i < 50; i++)
        sto_append(log, 2, i, i, sto_now);
    kb_log_set_hw(log, 60);
    CU_ASSERT_EQUAL(kb_log_delete_records(log, 61, &ns), KB_STO_OFFSET_OUT_OF_RANGE);
    CU_ASSERT_EQUAL(kb_log_delete_records(log, 33, &ns), 0);
    CU_ASSERT_EQUAL(ns, 33);
    CU_ASSERT_EQUAL(kb_log_start_offset(log), 33);
    {
        kb_log_read_t r;
        CU_ASSERT_EQUAL(kb_log_read(log, 32, 100, KB_ISOLATION_HW, 1, &r),
                        KB_STO_OFFSET_OUT_OF_RANGE);
    }
    CU_ASSERT_EQUAL(kb_log_delete_records(log, -1, &ns), 0); /* -1 = up to the HW */
    CU_ASSERT_EQUAL(ns, 60);
    /* a source log start beyond our end (mirror): the log restarts there */
    CU_ASSERT_EQUAL(kb_log_set_start_offset(log, 500), 0);
    CU_ASSERT_EQUAL(kb_log_leo(log), 500);
    CU_ASSERT_EQUAL(kb_log_start_offset(log), 500);
    /* flush.ms */
    sto_append(log, 2, 0, 0, sto_now);
    CU_ASSERT(kb_log_recovery_point(log) < kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_flush_if_due(log, sto_now + 1000), 0);
    CU_ASSERT(kb_log_recovery_point(log) < kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_flush_if_due(log, sto_now + 6000), 0);
    CU_ASSERT_EQUAL(kb_log_recovery_point(log), kb_log_leo(log));
    kb_log_close(log, 1);
    sto_rmrf(dir);
    free(dir);
}

static int sto_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static int sto_count_delete_dirs(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 7 && !strcmp(de->d_name + l - 7, "-delete"))
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

static kb_logmgr_t *sto_mgr(const char *const *dirs, size_t n)
{
    kb_logmgr_opts_t o;
    char err[256] = "";
    kb_logmgr_t *mgr;
    kb_logmgr_opts_init(&o);
    o.log_dirs = dirs;
    o.ndirs = n;
    o.clock = sto_clock;
    o.recovery_threads = 2;
    o.default_cfg.segment_bytes = 2048;
    o.default_cfg.message_ts_after_max_ms = INT64_MAX;
    o.cleaner.backoff_ms = 3600000;
    mgr = kb_logmgr_open(&o, err, sizeof(err));
    if (!mgr)
        fprintf(stderr, "logmgr: %s\n", err);
    CU_ASSERT_FATAL(mgr != NULL);
    return mgr;
}

static void test_logmgr(void)
{
    char *root = sto_tmpdir();
    char d1[4200], d2[4200], p[4300];
    const char *dirs[2] = {d1, d2};
    kb_logmgr_t *mgr;
    kb_log_t *log;
    kb_logmgr_part_t *parts;
    size_t n, i;
    char err[256];
    int per_dir[2] = {0, 0};
    int64_t leo[4];
    snprintf(d1, sizeof(d1), "%s/a", root);
    snprintf(d2, sizeof(d2), "%s/b", root);
    mgr = sto_mgr(dirs, 2);
    for (i = 0; i < 4; i++) {
        int j;
        log = kb_logmgr_create(mgr, "orders.v1-x", (int32_t)i, NULL, err, sizeof(err));
        CU_ASSERT_FATAL(log != NULL);
        CU_ASSERT_PTR_EQUAL(kb_logmgr_get(mgr, "orders.v1-x", (int32_t)i), log);
        for (j = 0; j < 20 + (int)i * 10; j++)
            sto_append(log, 2, j, j, sto_now);
        leo[i] = kb_log_leo(log);
        kb_log_set_hw(log, leo[i] - 1);
    }
    CU_ASSERT_EQUAL(kb_log_delete_records(kb_logmgr_get(mgr, "orders.v1-x", 3), 10, NULL), 0);
    CU_ASSERT_EQUAL(kb_logmgr_list(mgr, &parts, &n), 0);
    CU_ASSERT_EQUAL(n, 4);
    for (i = 0; i < n; i++) {
        per_dir[parts[i].dir_index]++;
        CU_ASSERT(parts[i].size_bytes > 0);
        CU_ASSERT_EQUAL(parts[i].leo, leo[parts[i].partition]);
    }
    free(parts);
    CU_ASSERT(per_dir[0] == 2 && per_dir[1] == 2); /* spread over the log dirs */
    kb_logmgr_close(mgr);
    snprintf(p, sizeof(p), "%s/.kafka_cleanshutdown", d1);
    CU_ASSERT(sto_exists(p));
    snprintf(p, sizeof(p), "%s/replication-offset-checkpoint", d2);
    CU_ASSERT(sto_exists(p));

    /* reopen: everything back, checkpointed HW and log start applied, marker consumed */
    mgr = sto_mgr(dirs, 2);
    snprintf(p, sizeof(p), "%s/.kafka_cleanshutdown", d1);
    CU_ASSERT(!sto_exists(p));
    for (i = 0; i < 4; i++) {
        log = kb_logmgr_get(mgr, "orders.v1-x", (int32_t)i);
        CU_ASSERT_FATAL(log != NULL);
        CU_ASSERT_EQUAL(kb_log_leo(log), leo[i]);
        CU_ASSERT_EQUAL(kb_log_hw(log), leo[i] - 1);
    }
    CU_ASSERT_EQUAL(kb_log_start_offset(kb_logmgr_get(mgr, "orders.v1-x", 3)), 10);
    /* delete: renamed at once, removed by the next tick */
    CU_ASSERT_EQUAL(kb_logmgr_delete(mgr, "orders.v1-x", 1), 0);
    CU_ASSERT_PTR_NULL(kb_logmgr_get(mgr, "orders.v1-x", 1));
    CU_ASSERT_EQUAL(sto_count_delete_dirs(d1) + sto_count_delete_dirs(d2), 1);
    CU_ASSERT_EQUAL(kb_logmgr_tick(mgr, sto_now), 0);
    CU_ASSERT_EQUAL(sto_count_delete_dirs(d1) + sto_count_delete_dirs(d2), 0);
    CU_ASSERT_EQUAL(kb_logmgr_delete(mgr, "orders.v1-x", 1), KB_STO_INVALID);
    /* a re-created partition starts empty */
    log = kb_logmgr_create(mgr, "orders.v1-x", 1, NULL, err, sizeof(err));
    CU_ASSERT_FATAL(log != NULL);
    CU_ASSERT_EQUAL(kb_log_leo(log), 0);
    /* cleaner threads start, are woken and stop (joined) */
    CU_ASSERT_EQUAL(kb_logmgr_start_cleaner(mgr), 0);
    kb_logmgr_wake_cleaner(mgr);
    kb_logmgr_close(mgr);

    /* a crashed broker (no clean-shutdown marker): logs are recovered from the checkpoints */
    snprintf(p, sizeof(p), "%s/.kafka_cleanshutdown", d1);
    unlink(p);
    snprintf(p, sizeof(p), "%s/.kafka_cleanshutdown", d2);
    unlink(p);
    mgr = sto_mgr(dirs, 2);
    CU_ASSERT_EQUAL(kb_log_leo(kb_logmgr_get(mgr, "orders.v1-x", 2)), leo[2]);
    CU_ASSERT_EQUAL(kb_log_leo(kb_logmgr_get(mgr, "orders.v1-x", 1)), 0);
    kb_logmgr_close(mgr);
    sto_rmrf(root);
    free(root);
}

static void test_logmgr_cleaner_pass(void)
{
    char *root = sto_tmpdir();
    const char *dirs[1] = {root};
    kb_logmgr_t *mgr = sto_mgr(dirs, 1);
    kb_log_config_t cfg;
    kb_log_t *log;
    char err[256];
    int i;
    int64_t before;
    kb_log_config_defaults(&cfg);
    cfg.segment_bytes = 1024;
    cfg.cleanup_policy = KB_CLEANUP_COMPACT | KB_CLEANUP_DELETE;
    cfg.message_ts_after_max_ms = INT64_MAX;
    log = kb_logmgr_create(mgr, "__consumer_offsets", 7, &cfg, err, sizeof(err));
    CU_ASSERT_FATAL(log != NULL);
    for (i = 0; i < 200; i++) {
        kp_writer_t wr;
        kp_writer_init(&wr);
        sto_kv(&wr, 0, (i % 2) ? "group-a" : "group-b", "offset", sto_now);
        CU_ASSERT_EQUAL(kb_log_append_leader(log, wr.buf, wr.len, 0, KB_ORIGIN_CLIENT, 0, NULL), 0);
        kp_writer_free(&wr);
    }
    kb_log_set_hw(log, kb_log_leo(log));
    before = kb_log_size_bytes(log);
    CU_ASSERT_EQUAL(kb_logmgr_clean_once(mgr, sto_now), 1);
    CU_ASSERT(kb_log_size_bytes(log) < before / 4);
    kb_logmgr_close(mgr);
    sto_rmrf(root);
    free(root);
}

/* Partitions deleted while the cleaner and the tick run over them (a CreateTopics that unstages
 * what it opened, a topic deletion): a pass never works on a closed log (under ASan this raced to
 * a use-after-free in kb_clean_plan before the passes held their logs). */
typedef struct {
    kb_logmgr_t *mgr;
    atomic_int stop;
    int passes;
} race_arg_t;

static void *race_cleaner(void *arg)
{
    race_arg_t *ra = arg;
    while (!atomic_load(&ra->stop)) {
        kb_logmgr_clean_once(ra->mgr, sto_now);
        kb_logmgr_tick(ra->mgr, sto_now);
        ra->passes++;
    }
    return NULL;
}

static void test_logmgr_delete_during_maintenance(void)
{
    char *root = sto_tmpdir();
    const char *dirs[1] = {root};
    race_arg_t ra = {.mgr = sto_mgr(dirs, 1)};
    kb_log_config_t cfg;
    pthread_t thr;
    char err[256];
    int round, i, part;
    kb_log_config_defaults(&cfg);
    cfg.segment_bytes = 1024;
    cfg.cleanup_policy = KB_CLEANUP_COMPACT;
    cfg.message_ts_after_max_ms = INT64_MAX;
    CU_ASSERT_FATAL(pthread_create(&thr, NULL, race_cleaner, &ra) == 0);
    for (round = 0; round < 60; round++) {
        for (part = 0; part < 4; part++) {
            kb_log_t *log = kb_logmgr_create(ra.mgr, "race", part, &cfg, err, sizeof(err));
            CU_ASSERT_FATAL(log != NULL);
            for (i = 0; i < 40; i++) {
                kp_writer_t wr;
                kp_writer_init(&wr);
                sto_kv(&wr, 0, (i % 2) ? "k1" : "k2", "value", sto_now);
                CU_ASSERT(kb_log_append_leader(log, wr.buf, wr.len, 0, KB_ORIGIN_CLIENT, 0, NULL) ==
                          0);
                kp_writer_free(&wr);
            }
            kb_log_set_hw(log, kb_log_leo(log));
        }
        for (part = 0; part < 4; part++)
            CU_ASSERT_EQUAL(kb_logmgr_delete(ra.mgr, "race", part), 0);
    }
    atomic_store(&ra.stop, 1);
    pthread_join(thr, NULL);
    CU_ASSERT(ra.passes > 0);
    kb_logmgr_close(ra.mgr);
    sto_rmrf(root);
    free(root);
}

void sto_register_mgr_tests(void)
{
    CU_pSuite s = CU_add_suite("maintenance", NULL, NULL);
    CU_add_test(s, "retention by time and size", test_retention_time_and_size);
    CU_add_test(s, "DeleteRecords, log start, flush.ms", test_delete_records_and_flush);
    CU_add_test(s, "log manager", test_logmgr);
    CU_add_test(s, "log manager cleaner pass", test_logmgr_cleaner_pass);
    CU_add_test(s, "partitions deleted during maintenance", test_logmgr_delete_during_maintenance);
}
