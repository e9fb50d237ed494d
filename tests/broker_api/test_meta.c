/*
 * test_meta.c -- CUnit tests of the broker/api building blocks without a network server:
 * the topic config table (validation, effective values, sources, synonyms, storage config),
 * dynamic broker config validation, the metadata store (create / delete / grow / configs /
 * epochs / producer ids, persistence across reopen, node id mismatch, listeners with
 * snapshot, orphan partition directories; the metadata log itself: test_meta_log.c), fetch sessions
 * and the delayed operation queue. Label: unit.
 */
#include <CUnit/Basic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb_dq.h"
#include "kb_fsess.h"
#include "kb_meta.h"
#include "kb_part.h"
#include "kb_tconf.h"
#include "kb_time.h"
#include "kbat.h"
#include "kp_errcode.h"

static kb_config_t *mkcfg(const char *dir, const char *const *kv)
{
    kb_config_t *cfg = kb_config_new();
    char logs[600];
    snprintf(logs, sizeof(logs), "%s/logs", dir);
    kb_config_set(cfg, "node.id", "1", "test");
    kb_config_set(cfg, "listeners", "PLAINTEXT://127.0.0.1:0", "test");
    kb_config_set(cfg, "log.dirs", logs, "test");
    for (size_t i = 0; kv && kv[i]; i++)
        kb_config_set_kv(cfg, kv[i], "test");
    CU_ASSERT_EQUAL_FATAL(kb_config_finalize(cfg), 0);
    return cfg;
}

/* ---- topic configs ----------------------------------------------------------------------------
 */

static void t_tconf_validate(void)
{
    char msg[512];
    CU_ASSERT_EQUAL(kb_tconf_validate("retention.ms", "1000", false, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_tconf_validate("retention.ms", "-1", false, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_tconf_validate("retention.ms", "-2", false, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(kb_tconf_validate("retention.ms", "abc", false, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "retention.ms"));
    CU_ASSERT_EQUAL(kb_tconf_validate("no.such.key", "1", false, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "Unknown topic config name"));
    CU_ASSERT_EQUAL(kb_tconf_validate("cleanup.policy", "compact,delete", false, msg, sizeof(msg)),
                    0);
    CU_ASSERT_EQUAL(kb_tconf_validate("cleanup.policy", "compact,bogus", false, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(kb_tconf_validate("compression.type", "zstd", false, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_tconf_validate("compression.type", "brotli", false, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(kb_tconf_validate("min.cleanable.dirty.ratio", "1.5", false, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(
        kb_tconf_validate("unclean.leader.election.enable", "TRUE", false, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_tconf_validate("preallocate", "yes", false, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(kb_tconf_validate("remote.storage.enable", "true", false, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(kb_tconf_validate("compression.gzip.level", "0", false, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(kb_tconf_validate("compression.gzip.level", "-1", false, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_tconf_validate("segment.bytes", "10", false, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(kb_tconf_validate("max.message.bytes", NULL, false, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    /* mirror.name: clients never, the internal path with a valid mirror name */
    CU_ASSERT_EQUAL(kb_tconf_validate("mirror.name", "m1", false, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(kb_tconf_validate("mirror.name", "m1", true, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_tconf_validate("mirror.name", "m1.paused", true, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_tconf_validate("mirror.name", "bad name", true, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT(kb_tconf_mirror_name_valid("m.x", false));
    CU_ASSERT(!kb_tconf_mirror_name_valid("m.stopped", false));
    CU_ASSERT(kb_tconf_mirror_name_valid("m.stopped", true));
}

static void t_tconf_effective(void)
{
    char dir[512];
    kb_config_t *cfg;
    const char *kv[] = {"log.retention.hours=24", "log.cleanup.policy=compact", NULL};
    kb_kv_t ov[] = {{"segment.bytes", "100000"}};
    kb_kv_t dn[] = {{"log.retention.ms", "5000"}};
    kb_tconf_val_t v;
    kb_tconf_synval_t syn[KB_TCONF_SYN_ROOM];
    size_t ns = 0;
    kb_dyncfg_t dyn = {0};
    kb_log_config_t lc;
    kb_tconf_extra_t ex;

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    cfg = mkcfg(dir, kv);
    kb_tconf_effective(kb_tconf_def("retention.ms"), NULL, 0, cfg, NULL, &v, syn, &ns);
    CU_ASSERT_STRING_EQUAL(v.value, "86400000");
    CU_ASSERT_EQUAL(v.source, KB_CS_STATIC_BROKER_CONFIG);
    CU_ASSERT(ns >= 2);
    CU_ASSERT_STRING_EQUAL(syn[0].name, "log.retention.hours");
    CU_ASSERT_EQUAL(syn[0].source, KB_CS_STATIC_BROKER_CONFIG);
    /* a dynamic default of log.retention.ms wins over the static hours */
    dyn.dflt = dn;
    dyn.dflt_cnt = 1;
    kb_tconf_effective(kb_tconf_def("retention.ms"), NULL, 0, cfg, &dyn, &v, syn, &ns);
    CU_ASSERT_STRING_EQUAL(v.value, "5000");
    CU_ASSERT_EQUAL(v.source, KB_CS_DYNAMIC_DEFAULT_BROKER_CONFIG);
    kb_tconf_effective(kb_tconf_def("segment.bytes"), ov, 1, cfg, &dyn, &v, syn, &ns);
    CU_ASSERT_STRING_EQUAL(v.value, "100000");
    CU_ASSERT_EQUAL(v.source, KB_CS_TOPIC_CONFIG);
    CU_ASSERT_EQUAL(syn[0].source, KB_CS_TOPIC_CONFIG);
    kb_tconf_effective(kb_tconf_def("flush.ms"), NULL, 0, cfg, NULL, &v, NULL, NULL);
    CU_ASSERT_STRING_EQUAL(v.value, "9223372036854775807");
    CU_ASSERT_EQUAL(v.source, KB_CS_DEFAULT_CONFIG);
    kb_tconf_build(ov, 1, cfg, &dyn, &lc, &ex);
    CU_ASSERT_EQUAL(lc.retention_ms, 5000);
    CU_ASSERT_EQUAL(lc.segment_bytes, 100000);
    CU_ASSERT_EQUAL(lc.cleanup_policy, KB_CLEANUP_COMPACT);
    CU_ASSERT_EQUAL(ex.compression, -1);
    CU_ASSERT_EQUAL(ex.min_insync_replicas, 1);
    kb_config_free(cfg);
    kbat_rmrf(dir);
}

static void t_tconf_broker(void)
{
    char msg[256];
    CU_ASSERT_EQUAL(kb_tconf_broker_validate("log.retention.ms", "1000", msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_tconf_broker_validate("log.retention.ms", "x", msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(kb_tconf_broker_validate("node.id", "2", msg, sizeof(msg)),
                    KP_ERR_INVALID_REQUEST);
    CU_ASSERT_EQUAL(kb_tconf_broker_validate("no.such", "2", msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(kb_tconf_broker_validate("mirror.something", "x", msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_tconf_broker_validate("log.cleanup.policy", "compact", msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_tconf_broker_validate("log.cleanup.policy", "nope", msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
}

/* ---- metadata -----------------------------------------------------------------------------------
 */

typedef struct evlog_s {
    int topics_created, topics_deleted, parts, configs, epochs, snapshot;
    char last_key[64];
    char last_value[64];
    bool last_value_null;
} evlog_t;

static void evlog_fn(void *opaque, const kb_meta_event_t *ev)
{
    evlog_t *l = opaque;
    if (ev->snapshot)
        l->snapshot++;
    switch (ev->type) {
    case KB_META_EV_TOPIC:
        if (ev->flags & KB_META_TOPIC_CREATED)
            l->topics_created++;
        if (ev->flags & KB_META_TOPIC_DELETED)
            l->topics_deleted++;
        if (ev->flags & KB_META_TOPIC_PARTITIONS)
            l->parts++;
        break;
    case KB_META_EV_CONFIG:
        l->configs++;
        snprintf(l->last_key, sizeof(l->last_key), "%s", ev->key);
        l->last_value_null = !ev->value;
        snprintf(l->last_value, sizeof(l->last_value), "%s", ev->value ? ev->value : "");
        break;
    case KB_META_EV_EPOCH:
        l->epochs++;
        break;
    }
}

typedef struct mstack_s {
    kb_config_t *cfg;
    kb_meta_t *meta;
    kb_partmgr_t *pm;
} mstack_t;

static int mstack_open(mstack_t *s, const char *dir, bool logs)
{
    char err[512];
    kb_partmgr_opts_t po;
    memset(s, 0, sizeof(*s));
    s->cfg = mkcfg(dir, NULL);
    s->meta = kb_meta_open(s->cfg, err, sizeof(err));
    if (!s->meta) {
        fprintf(stderr, "kb_meta_open: %s\n", err);
        kb_config_free(s->cfg);
        return -1;
    }
    if (!logs)
        return 0;
    memset(&po, 0, sizeof(po));
    po.cfg = s->cfg;
    po.config_for = kb_meta_log_config_for;
    po.config_opaque = s->meta;
    po.no_threads = true;
    s->pm = kb_partmgr_open(&po, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s->pm);
    CU_ASSERT_EQUAL(kb_meta_attach(s->meta, s->pm, err, sizeof(err)), 0);
    return 0;
}

static void mstack_close(mstack_t *s)
{
    kb_meta_close(s->meta);
    kb_partmgr_close(s->pm);
    kb_config_free(s->cfg);
}

static void t_meta_topics(void)
{
    char dir[512], msg[512], cid[64];
    mstack_t s;
    kb_topic_info_t ti;
    kp_uuid_t id, id2;
    kb_kv_t cfgs[] = {{"retention.ms", "1000"}};
    kb_topic_spec_t spec = {.name = "t1", .partitions = 3, .configs = cfgs, .config_cnt = 1};
    evlog_t ev = {0};
    kb_meta_listener_t *l;
    kb_cfg_op_t op = {"retention.ms", KB_CFGOP_SET, "2000"};
    kb_part_t *part;
    int64_t pid1, pid2;
    int32_t ne = -1;
    kb_kv_t *kv;
    size_t nkv;

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true), 0);
    snprintf(cid, sizeof(cid), "%s", kb_meta_cluster_id(s.meta));
    CU_ASSERT_EQUAL(strlen(cid), 22);
    l = kb_meta_listen(s.meta, evlog_fn, &ev, true);
    CU_ASSERT_PTR_NOT_NULL(l);
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, &id, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(ev.topics_created, 1);
    CU_ASSERT_EQUAL(ev.configs, 1);
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, msg, sizeof(msg)),
                    KP_ERR_TOPIC_ALREADY_EXISTS);
    spec.name = "t.x";
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, msg, sizeof(msg)), 0);
    spec.name = "t_x";
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, msg, sizeof(msg)),
                    KP_ERR_INVALID_TOPIC_EXCEPTION);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "collides"));
    spec.name = "bad/name";
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, msg, sizeof(msg)),
                    KP_ERR_INVALID_TOPIC_EXCEPTION);
    spec.name = "vo";
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, true, NULL, msg, sizeof(msg)), 0);
    CU_ASSERT_NOT_EQUAL(kb_meta_topic_by_name(s.meta, "vo", NULL), 0);
    CU_ASSERT_EQUAL(kb_meta_topic_by_name(s.meta, "t1", &ti), 0);
    CU_ASSERT_EQUAL(ti.partitions, 3);
    CU_ASSERT(!memcmp(ti.id.b, id.b, 16));
    CU_ASSERT_EQUAL(kb_meta_part(s.meta, "t1", 2, &part), KB_META_OK);
    kb_part_release(part);
    CU_ASSERT_EQUAL(kb_meta_part(s.meta, "t1", 3, &part), KB_META_UNKNOWN_PARTITION);
    CU_ASSERT_EQUAL(kb_meta_part(s.meta, "nope", 0, &part), KB_META_UNKNOWN_TOPIC);
    CU_ASSERT_EQUAL(kb_meta_part_by_id(s.meta, &id, 1, &part), KB_META_OK);
    kb_part_release(part);
    /* configs */
    CU_ASSERT_EQUAL(
        kb_meta_alter_topic_configs(s.meta, "t1", &op, 1, false, false, false, msg, sizeof(msg)),
        0);
    CU_ASSERT_STRING_EQUAL(ev.last_key, "retention.ms");
    CU_ASSERT_STRING_EQUAL(ev.last_value, "2000");
    op.key = "mirror.name";
    op.value = "m1";
    CU_ASSERT_EQUAL(
        kb_meta_alter_topic_configs(s.meta, "t1", &op, 1, false, false, false, msg, sizeof(msg)),
        KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(
        kb_meta_alter_topic_configs(s.meta, "t1", &op, 1, false, true, false, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_meta_topic_by_name(s.meta, "t1", &ti), 0);
    CU_ASSERT(ti.mirror);
    CU_ASSERT_EQUAL(kb_meta_part(s.meta, "t1", 0, &part), KB_META_OK);
    CU_ASSERT_EQUAL(kb_part_write_mode(part), KB_WRITE_PENDING);
    kb_part_release(part);
    /* a client's full replacement keeps the hidden key */
    op.key = "segment.ms";
    op.value = "100000";
    CU_ASSERT_EQUAL(
        kb_meta_alter_topic_configs(s.meta, "t1", &op, 1, true, false, false, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_meta_topic_configs(s.meta, "t1", &kv, &nkv), 0);
    CU_ASSERT_EQUAL(nkv, 2);
    CU_ASSERT_PTR_NOT_NULL(kb_kv_get(kv, nkv, "mirror.name"));
    CU_ASSERT_PTR_NULL(kb_kv_get(kv, nkv, "retention.ms"));
    kb_kv_free(kv, nkv);
    /* partitions, epochs, producer ids */
    CU_ASSERT_EQUAL(kb_meta_create_partitions(s.meta, "t1", 2, false, msg, sizeof(msg)),
                    KP_ERR_INVALID_PARTITIONS);
    CU_ASSERT_EQUAL(kb_meta_create_partitions(s.meta, "t1", 5, false, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(ev.parts, 1);
    CU_ASSERT_EQUAL(kb_meta_bump_epoch(s.meta, &id, 4, 7, &ne), 0);
    CU_ASSERT_EQUAL(ne, 7);
    CU_ASSERT_EQUAL(kb_meta_bump_epoch(s.meta, &id, 4, 0, &ne), 0);
    CU_ASSERT_EQUAL(ne, 8);
    CU_ASSERT_EQUAL(ev.epochs, 2);
    CU_ASSERT_EQUAL(kb_meta_alloc_producer_ids(s.meta, 1, &pid1), 0);
    CU_ASSERT_EQUAL(kb_meta_alloc_producer_ids(s.meta, 1, &pid2), 0);
    CU_ASSERT_EQUAL(pid2, pid1 + 1);
    /* delete */
    CU_ASSERT_EQUAL(kb_meta_delete_topic(s.meta, "t.x", NULL, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(ev.topics_deleted, 1);
    CU_ASSERT_EQUAL(kb_meta_delete_topic(s.meta, "t.x", NULL, msg, sizeof(msg)),
                    KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
    kb_meta_unlisten(s.meta, l);
    mstack_close(&s);

    /* reopen: everything is back, ids never handed out twice */
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true), 0);
    CU_ASSERT_STRING_EQUAL(kb_meta_cluster_id(s.meta), cid);
    CU_ASSERT_EQUAL(kb_meta_topic_by_name(s.meta, "t1", &ti), 0);
    CU_ASSERT_EQUAL(ti.partitions, 5);
    CU_ASSERT(!memcmp(ti.id.b, id.b, 16));
    CU_ASSERT(ti.mirror);
    CU_ASSERT_NOT_EQUAL(kb_meta_topic_by_name(s.meta, "t.x", NULL), 0);
    CU_ASSERT_EQUAL(kb_meta_part(s.meta, "t1", 4, &part), KB_META_OK);
    CU_ASSERT_EQUAL(kb_part_epoch(part), 8);
    CU_ASSERT_EQUAL(kb_part_write_mode(part), KB_WRITE_PENDING);
    kb_part_release(part);
    CU_ASSERT_EQUAL(kb_meta_alloc_producer_ids(s.meta, 1, &pid2), 0);
    CU_ASSERT(pid2 > pid1);
    memset(&ev, 0, sizeof(ev));
    l = kb_meta_listen(s.meta, evlog_fn, &ev, true);
    CU_ASSERT_EQUAL(ev.topics_created, 1);
    CU_ASSERT(ev.snapshot >= 3); /* topic + 2 configs */
    kb_meta_unlisten(s.meta, l);
    /* a topic id given by the privileged path is kept */
    kb_uuid_random(&id2);
    spec.name = "withid";
    spec.id = &id2;
    spec.privileged = true;
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, &id, msg, sizeof(msg)), 0);
    CU_ASSERT(!memcmp(id.b, id2.b, 16));
    spec.name = "withid2";
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, msg, sizeof(msg)),
                    KP_ERR_INVALID_REQUEST);
    CU_ASSERT_EQUAL(kb_meta_ensure_internal_topic(s.meta, KB_TOPIC_CONSUMER_OFFSETS, &ti), 0);
    CU_ASSERT(ti.internal);
    CU_ASSERT_EQUAL(ti.partitions, 50);
    mstack_close(&s);
    kbat_rmrf(dir);
}

static void t_meta_node_id(void)
{
    char dir[512], err[512];
    mstack_t s;
    kb_config_t *cfg;
    kb_topic_spec_t spec = {.name = "t", .partitions = 1};
    const char *kv[] = {"node.id=2", NULL};

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, false), 0);
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, err, sizeof(err)), 0);
    mstack_close(&s);
    /* another node id in meta.properties (corrupt metadata logs: test_meta_log.c) */
    cfg = mkcfg(dir, kv);
    CU_ASSERT_PTR_NULL(kb_meta_open(cfg, err, sizeof(err)));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "node.id"));
    kb_config_free(cfg);
    kbat_rmrf(dir);
}

static void t_meta_orphans(void)
{
    char dir[512], err[512], path[700];
    mstack_t s;
    kb_topic_spec_t spec = {.name = "keep", .partitions = 1};
    kb_log_t *log;
    kb_log_config_t lc;

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true), 0);
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, err, sizeof(err)), 0);
    /* a log no topic claims (as after a crash between creating logs and the metadata) */
    kb_log_config_defaults(&lc);
    log = kb_logmgr_create(kb_partmgr_logmgr(s.pm), "orphan", 0, &lc, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL(log);
    mstack_close(&s);
    snprintf(path, sizeof(path), "%s/logs/orphan-0", dir);
    CU_ASSERT_EQUAL(access(path, F_OK), 0);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true), 0);
    kb_partmgr_tick(s.pm); /* removes renamed "-delete" dirs */
    CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/logs/keep-0/partition.metadata", dir);
    CU_ASSERT_EQUAL(access(path, F_OK), 0);
    mstack_close(&s);
    kbat_rmrf(dir);
}

/* ---- fetch sessions -----------------------------------------------------------------------------
 */

static void t_fsess(void)
{
    kb_fsess_cache_t *c = kb_fsess_cache_new(2);
    kb_fsess_t *a, *b, *x;
    kp_uuid_t z = {{0}};
    a = kb_fsess_create(c, false, 3, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT(a->id > 0);
    CU_ASSERT_EQUAL(a->epoch, 1);
    CU_ASSERT_PTR_NOT_NULL(kb_fsess_upsert(a, "t", &z, 0));
    CU_ASSERT_PTR_NOT_NULL(kb_fsess_upsert(a, "t", &z, 1));
    CU_ASSERT_PTR_NOT_NULL(kb_fsess_upsert(a, "u", &z, 0));
    CU_ASSERT_EQUAL(a->nparts, 3);
    CU_ASSERT_PTR_EQUAL(kb_fsess_upsert(a, "t", &z, 1), kb_fsess_find(a, "t", &z, 1));
    kb_fsess_forget(a, "t", &z, 0);
    CU_ASSERT_EQUAL(a->nparts, 2);
    CU_ASSERT_PTR_NULL(kb_fsess_find(a, "t", &z, 0));
    b = kb_fsess_create(c, true, 1, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_PTR_NOT_NULL(kb_fsess_upsert(b, NULL, &z, 0));
    /* full: a new small session cannot evict fresh ones; an idle one goes */
    CU_ASSERT_PTR_NULL(kb_fsess_create(c, false, 1, 1000));
    x = kb_fsess_create(c, false, 1, KB_FSESS_EVICT_MS + 10);
    CU_ASSERT_PTR_NOT_NULL(x);
    CU_ASSERT_EQUAL(kb_fsess_count(c), 2);
    CU_ASSERT_EQUAL(kb_fsess_next_epoch(INT32_MAX), 1);
    kb_fsess_remove(c, x->id);
    CU_ASSERT_PTR_NULL(kb_fsess_get(c, x->id));
    kb_fsess_release(a);
    kb_fsess_release(b);
    kb_fsess_release(x);
    kb_fsess_cache_free(c);
}

/* ---- delayed operations
 * -------------------------------------------------------------------------- */

typedef struct top_s {
    kb_dq_op_t dq;
    _Atomic int tries, freed;
    _Atomic bool done_expired;
    int need; /* finish on the n-th try */
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
} top_t;

static bool top_try(kb_dq_op_t *op, bool expired)
{
    top_t *t = (top_t *)(void *)op;
    int n = atomic_fetch_add(&t->tries, 1) + 1;
    if (expired)
        atomic_store(&t->done_expired, true);
    return expired || n >= t->need;
}

static void top_free(kb_dq_op_t *op)
{
    top_t *t = (top_t *)(void *)op;
    kb_dq_op_fini(op);
    pthread_mutex_lock(t->mu);
    atomic_store(&t->freed, 1);
    pthread_cond_broadcast(t->cv);
    pthread_mutex_unlock(t->mu);
}

static bool top_wait_freed(top_t *t, int ms)
{
    int64_t deadline = kbat_now_ms() + ms;
    bool ok;
    pthread_mutex_lock(t->mu);
    while (!atomic_load(&t->freed) && kbat_now_ms() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(t->cv, t->mu, &ts);
    }
    ok = atomic_load(&t->freed);
    pthread_mutex_unlock(t->mu);
    return ok;
}

static void t_dq(void)
{
    kb_dq_t *dq = kb_dq_new();
    kb_dq_watch_t w1 = {0}, w2 = {0};
    kb_dq_watch_t *ws[] = {&w1, &w2};
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    top_t a = {.need = 2, .mu = &mu, .cv = &cv}, b = {.need = 100, .mu = &mu, .cv = &cv};
    top_t c = {.need = 1, .mu = &mu, .cv = &cv}, d = {.need = 100, .mu = &mu, .cv = &cv};
    uint64_t seq[2];
    int64_t t0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(dq);
    /* woken by notifications, finishes on the second one */
    CU_ASSERT_EQUAL(kb_dq_op_init(dq, &a.dq, 2), 0);
    a.dq.try_fn = top_try;
    a.dq.free_fn = top_free;
    kb_dq_op_add(dq, &a.dq, kb_time_mono_ns() + 60000000000LL, ws, NULL, 2);
    CU_ASSERT_EQUAL(kb_dq_count(dq), 1);
    kb_dq_notify(dq, &w1);
    kb_dq_notify(dq, &w2);
    {
        int64_t deadline = kbat_now_ms() + 5000;
        while (atomic_load(&a.tries) < 1 && kbat_now_ms() < deadline)
            kb_dq_notify(dq, &w2);
    }
    kb_dq_notify(dq, &w1);
    CU_ASSERT(top_wait_freed(&a, 5000));
    CU_ASSERT(!atomic_load(&a.done_expired));
    CU_ASSERT_EQUAL(atomic_load(&w1.nwatchers), 0);
    /* expires by its deadline */
    CU_ASSERT_EQUAL(kb_dq_op_init(dq, &b.dq, 1), 0);
    b.dq.try_fn = top_try;
    b.dq.free_fn = top_free;
    t0 = kbat_now_ms();
    kb_dq_op_add(dq, &b.dq, kb_time_mono_ns() + 200000000LL, ws, NULL, 1);
    CU_ASSERT(top_wait_freed(&b, 5000));
    CU_ASSERT(atomic_load(&b.done_expired));
    CU_ASSERT(kbat_now_ms() - t0 >= 190);
    /* a notification between the snapshot and the add is not lost */
    seq[0] = kb_dq_watch_seq(&w1);
    seq[1] = kb_dq_watch_seq(&w2);
    kb_dq_notify(dq, &w2);
    CU_ASSERT_EQUAL(kb_dq_op_init(dq, &c.dq, 2), 0);
    c.dq.try_fn = top_try;
    c.dq.free_fn = top_free;
    kb_dq_op_add(dq, &c.dq, kb_time_mono_ns() + 60000000000LL, ws, seq, 2);
    CU_ASSERT(top_wait_freed(&c, 5000));
    /* cancelled while waiting: freed at once, never tried; a closed watch wakes */
    CU_ASSERT_EQUAL(kb_dq_op_init(dq, &d.dq, 1), 0);
    d.dq.try_fn = top_try;
    d.dq.free_fn = top_free;
    kb_dq_op_add(dq, &d.dq, kb_time_mono_ns() + 60000000000LL, ws, NULL, 1);
    kb_dq_op_cancel(&d.dq, NULL);
    CU_ASSERT(atomic_load(&d.freed));
    CU_ASSERT_EQUAL(atomic_load(&d.tries), 0);
    kb_dq_watch_close(dq, &w1);
    CU_ASSERT(w1.closed);
    CU_ASSERT_EQUAL(kb_dq_count(dq), 0);
    kb_dq_free(dq);
}

int main(void)
{
    CU_pSuite s;
    unsigned fails;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("broker_api_meta", NULL, NULL);
    CU_add_test(s, "tconf validate", t_tconf_validate);
    CU_add_test(s, "tconf effective values and synonyms", t_tconf_effective);
    CU_add_test(s, "dynamic broker config validation", t_tconf_broker);
    CU_add_test(s, "metadata topics, configs, epochs, ids, reopen", t_meta_topics);
    CU_add_test(s, "metadata node id mismatch", t_meta_node_id);
    CU_add_test(s, "orphan partition directories", t_meta_orphans);
    CU_add_test(s, "fetch sessions", t_fsess);
    CU_add_test(s, "delayed operations", t_dq);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
