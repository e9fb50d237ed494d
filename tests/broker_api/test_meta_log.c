/*
 * test_meta_log.c -- CUnit tests of the metadata records and the metadata log behind kb_meta:
 * the record codec (every type round trip, Kafka's byte layout of a TopicRecord, every
 * truncation, bad frames), apply of every record type through kb_meta_apply_records (image,
 * local partitions, listeners, errors naming the offset), replay of many changes across
 * restarts (the whole image compared), an undecodable and an inapplicable record stopping the
 * start with their offsets, the migration of an old `kbroker-metadata` snapshot, image snapshots
 * and records with random bytes changed. Label: unit.
 */
#include <CUnit/Basic.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kb_err.h"
#include "kb_log.h"
#include "kb_meta.h"
#include "kb_meta_rec.h"
#include "kb_part.h"
#include "kb_tconf.h"
#include "kbat.h"
#include "kp_batch.h"
#include "kp_crc32c.h"
#include "kp_errcode.h"
#include "kp_mrec.h"

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

typedef struct mstack_s {
    kb_config_t *cfg;
    kb_meta_t *meta;
    kb_partmgr_t *pm;
} mstack_t;

/* Open the metadata (and, with @p logs, the partitions). 0, or -1 with the message in @p err. */
static int mstack_open(mstack_t *s, const char *dir, bool logs, const char *const *kv, char *err,
                       size_t err_size)
{
    kb_partmgr_opts_t po;
    memset(s, 0, sizeof(*s));
    s->cfg = mkcfg(dir, kv);
    s->meta = kb_meta_open(s->cfg, err, err_size);
    if (!s->meta) {
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
    s->pm = kb_partmgr_open(&po, err, err_size);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s->pm);
    CU_ASSERT_EQUAL(kb_meta_attach(s->meta, s->pm, err, err_size), 0);
    return 0;
}

static void mstack_close(mstack_t *s)
{
    kb_meta_close(s->meta);
    kb_partmgr_close(s->pm);
    kb_config_free(s->cfg);
}

/* ---- the record codec -------------------------------------------------------------------- */

static int32_t g_one[] = {1}, g_three[] = {1, 2, 3};

static void fill(kb_mrec_t *r, int16_t type)
{
    kb_mrec_init(r, type);
    kb_uuid_random(&r->topic_id);
    switch (type) {
    case KB_MREC_TOPIC:
        r->name = strdup("topic-a");
        break;
    case KB_MREC_PARTITION:
        r->partition = 7;
        r->replicas = malloc(sizeof(g_three));
        memcpy(r->replicas, g_three, sizeof(g_three));
        r->nreplicas = 3;
        r->isr = malloc(sizeof(g_one));
        memcpy(r->isr, g_one, sizeof(g_one));
        r->nisr = 1;
        r->leader = 1;
        r->leader_epoch = 4;
        r->partition_epoch = 9;
        break;
    case KB_MREC_CONFIG:
        r->resource_type = KB_RES_TOPIC;
        r->resource_name = strdup("topic-a");
        r->key = strdup("retention.ms");
        r->value = strdup("1000");
        break;
    case KB_MREC_PARTITION_CHANGE:
        r->partition = 2;
        r->leader = 3;
        r->leader_epoch = 12;
        r->isr = malloc(sizeof(g_three));
        memcpy(r->isr, g_three, sizeof(g_three));
        r->nisr = 3;
        break;
    case KB_MREC_PRODUCER_IDS:
        r->broker_id = 1;
        r->broker_epoch = 5;
        r->next_producer_id = 123456789012LL;
        break;
    default:
        break;
    }
}

static bool ints_eq(const int32_t *a, int32_t na, const int32_t *b, int32_t nb)
{
    return na == nb && (na <= 0 || !memcmp(a, b, (size_t)na * sizeof(*a)));
}

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static void t_codec(void)
{
    int16_t types[] = {KB_MREC_TOPIC,        KB_MREC_PARTITION,
                       KB_MREC_CONFIG,       KB_MREC_PARTITION_CHANGE,
                       KB_MREC_REMOVE_TOPIC, KB_MREC_PRODUCER_IDS};
    char err[256];
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        kb_mrec_t r, d;
        kp_writer_t wr;
        fill(&r, types[k]);
        kp_writer_init(&wr);
        CU_ASSERT_EQUAL_FATAL(kb_mrec_encode(&r, &wr), 0);
        CU_ASSERT_EQUAL_FATAL(kb_mrec_decode(&d, wr.buf, wr.len, err, sizeof(err)), 0);
        CU_ASSERT_EQUAL(d.type, r.type);
        CU_ASSERT(!memcmp(d.topic_id.b, r.topic_id.b, 16) || r.type == KB_MREC_CONFIG ||
                  r.type == KB_MREC_PRODUCER_IDS);
        CU_ASSERT(str_eq(d.name, r.name));
        CU_ASSERT_EQUAL(d.partition, r.partition);
        CU_ASSERT(ints_eq(d.replicas, d.nreplicas, r.replicas, r.nreplicas));
        CU_ASSERT(ints_eq(d.isr, d.nisr, r.isr, r.nisr));
        CU_ASSERT_EQUAL(d.leader, r.leader);
        CU_ASSERT_EQUAL(d.leader_epoch, r.leader_epoch);
        CU_ASSERT_EQUAL(d.partition_epoch, r.partition_epoch);
        CU_ASSERT_EQUAL(d.resource_type, r.resource_type);
        CU_ASSERT(str_eq(d.resource_name, r.resource_name));
        CU_ASSERT(str_eq(d.key, r.key));
        CU_ASSERT(str_eq(d.value, r.value));
        CU_ASSERT_EQUAL(d.broker_id, r.broker_id);
        CU_ASSERT_EQUAL(d.broker_epoch, r.broker_epoch);
        CU_ASSERT_EQUAL(d.next_producer_id, r.next_producer_id);
        kb_mrec_clear(&d);
        /* every truncation fails cleanly, and so does a trailing byte */
        for (size_t n = 0; n < wr.len; n++) {
            CU_ASSERT_NOT_EQUAL(kb_mrec_decode(&d, wr.buf, n, err, sizeof(err)), 0);
            kb_mrec_clear(&d);
        }
        kp_write_int8(&wr, 0);
        CU_ASSERT_NOT_EQUAL(kb_mrec_decode(&d, wr.buf, wr.len, err, sizeof(err)), 0);
        kb_mrec_clear(&d);
        kp_writer_free(&wr);
        kb_mrec_clear(&r);
    }
    /* Kafka's framing: frame version 1, type 2, version 0, compact name, uuid, no tags */
    {
        kb_mrec_t r, d;
        kp_writer_t wr;
        static const uint8_t frame[] = {1, 2, 0, 2, 'x'};
        kb_mrec_init(&r, KB_MREC_TOPIC);
        r.name = strdup("x");
        memset(r.topic_id.b, 0xab, 16);
        kp_writer_init(&wr);
        CU_ASSERT_EQUAL(kb_mrec_encode(&r, &wr), 0);
        CU_ASSERT_EQUAL_FATAL(wr.len, sizeof(frame) + 16 + 1);
        CU_ASSERT(!memcmp(wr.buf, frame, sizeof(frame)));
        CU_ASSERT_EQUAL(wr.buf[wr.len - 1], 0);
        wr.buf[0] = 0; /* frame version 0 */
        CU_ASSERT_NOT_EQUAL(kb_mrec_decode(&d, wr.buf, wr.len, err, sizeof(err)), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "frame version"));
        wr.buf[0] = 1;
        wr.buf[1] = 99; /* unknown type */
        CU_ASSERT_NOT_EQUAL(kb_mrec_decode(&d, wr.buf, wr.len, err, sizeof(err)), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown record type"));
        kp_writer_free(&wr);
        kb_mrec_clear(&r);
    }
}

/* ---- apply of every record type ---------------------------------------------------------- */

typedef struct evlog_s {
    int created, deleted, parts, configs, epochs;
    int32_t last_partitions, last_epoch;
    bool last_mirror, last_value_null;
    char last_key[64];
} evlog_t;

static void evlog_fn(void *opaque, const kb_meta_event_t *ev)
{
    evlog_t *l = opaque;
    if (ev->topic) {
        l->last_partitions = ev->topic->partitions;
        l->last_mirror = ev->topic->mirror;
    }
    switch (ev->type) {
    case KB_META_EV_TOPIC:
        l->created += !!(ev->flags & KB_META_TOPIC_CREATED);
        l->deleted += !!(ev->flags & KB_META_TOPIC_DELETED);
        l->parts += !!(ev->flags & KB_META_TOPIC_PARTITIONS);
        break;
    case KB_META_EV_CONFIG:
        l->configs++;
        l->last_value_null = !ev->value;
        snprintf(l->last_key, sizeof(l->last_key), "%s", ev->key);
        break;
    case KB_META_EV_EPOCH:
        l->epochs++;
        l->last_epoch = ev->leader_epoch;
        break;
    }
}

/* The next offset of the "remote controller's" log: every batch takes its offsets whether it
 * applies or not (it is appended before it is applied). */
static int64_t g_next;

/* One batch of @p n records at the next offset, through kb_meta_apply_records. */
static int apply(kb_meta_t *meta, kb_mrec_t *recs, size_t n, char *err, size_t err_size)
{
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    kp_writer_t out, val;
    int rc;
    kp_batch_opts_init(&o);
    o.baseOffset = g_next;
    g_next += (int64_t)n;
    kp_batch_builder_init(&bb, &o);
    kp_writer_init(&val);
    for (size_t i = 0; i < n; i++) {
        kp_bytes_t key = {NULL, -1}, v;
        kp_writer_reset(&val);
        CU_ASSERT_EQUAL(kb_mrec_encode(&recs[i], &val), 0);
        v.ptr = val.buf;
        v.len = (int32_t)val.len;
        CU_ASSERT_EQUAL(kp_batch_builder_add(&bb, 1000, key, v, NULL, 0), 0);
        kb_mrec_clear(&recs[i]);
    }
    kp_writer_init(&out);
    CU_ASSERT_EQUAL(kp_batch_builder_finish(&bb, &out), 0);
    rc = kb_meta_apply_records(meta, out.buf, out.len, err, err_size);
    kp_batch_builder_free(&bb);
    kp_writer_free(&val);
    kp_writer_free(&out);
    return rc;
}

static void part_rec(kb_mrec_t *r, const kp_uuid_t *id, int32_t p)
{
    kb_mrec_init(r, KB_MREC_PARTITION);
    r->topic_id = *id;
    r->partition = p;
    r->replicas = malloc(sizeof(int32_t));
    r->isr = malloc(sizeof(int32_t));
    r->replicas[0] = r->isr[0] = 1;
    r->nreplicas = r->nisr = 1;
    r->leader = 1;
    r->leader_epoch = 0;
    r->partition_epoch = 0;
}

static void cfg_rec(kb_mrec_t *r, int8_t rtype, const char *rname, const char *k, const char *v)
{
    kb_mrec_init(r, KB_MREC_CONFIG);
    r->resource_type = rtype;
    r->resource_name = strdup(rname);
    r->key = strdup(k);
    r->value = v ? strdup(v) : NULL;
}

static void t_apply(void)
{
    char dir[512], err[512], path[800];
    mstack_t s;
    evlog_t ev = {0};
    kb_meta_listener_t *l;
    kb_mrec_t recs[4];
    kp_uuid_t id;
    kb_topic_info_t ti;
    kb_meta_part_state_t ps;
    kb_part_t *part;
    kb_kv_t *kv;
    size_t nkv;
    int64_t off;

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true, NULL, err, sizeof(err)), 0);
    l = kb_meta_listen(s.meta, evlog_fn, &ev, false);
    CU_ASSERT_EQUAL(kb_meta_offset(s.meta), -1);
    g_next = 0;

    /* TopicRecord, two PartitionRecords, a ConfigRecord: one CREATED event with both
     * partitions and the mirror flag its config gives */
    kb_uuid_random(&id);
    kb_mrec_init(&recs[0], KB_MREC_TOPIC);
    recs[0].name = strdup("ap");
    recs[0].topic_id = id;
    part_rec(&recs[1], &id, 0);
    part_rec(&recs[2], &id, 1);
    cfg_rec(&recs[3], KB_RES_TOPIC, "ap", KB_TCONF_MIRROR_NAME, "m1");
    CU_ASSERT_EQUAL_FATAL(apply(s.meta, recs, 4, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(kb_meta_offset(s.meta), 3);
    CU_ASSERT_EQUAL(ev.created, 1);
    CU_ASSERT_EQUAL(ev.parts, 0);
    CU_ASSERT_EQUAL(ev.configs, 1);
    CU_ASSERT_EQUAL(ev.last_partitions, 2);
    CU_ASSERT(ev.last_mirror);
    CU_ASSERT_EQUAL(kb_meta_topic_by_id(s.meta, &id, &ti), 0);
    CU_ASSERT_STRING_EQUAL(ti.name, "ap");
    CU_ASSERT_EQUAL(ti.partitions, 2);
    CU_ASSERT(!ti.internal);
    CU_ASSERT_EQUAL(kb_meta_part(s.meta, "ap", 1, &part), KB_META_OK); /* the log was opened */
    CU_ASSERT_EQUAL(kb_part_write_mode(part), KB_WRITE_PENDING);
    kb_part_release(part);
    CU_ASSERT_EQUAL(kb_meta_part_state(s.meta, &id, 1, &ps), KB_META_OK);
    CU_ASSERT_EQUAL(ps.leader, 1);
    CU_ASSERT_EQUAL(ps.nreplicas, 1);
    CU_ASSERT_EQUAL(ps.nisr, 1);
    CU_ASSERT_EQUAL(ps.leader_epoch, 0);
    CU_ASSERT_EQUAL(kb_meta_part_state(s.meta, &id, 2, &ps), KB_META_UNKNOWN_PARTITION);

    /* a third PartitionRecord later: PARTITIONS */
    part_rec(&recs[0], &id, 2);
    CU_ASSERT_EQUAL(apply(s.meta, recs, 1, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(ev.parts, 1);
    CU_ASSERT_EQUAL(ev.last_partitions, 3);

    /* PartitionChangeRecord: the same leader = the next epoch; kbroker's tag jumps; an ISR
     * change alone moves only the partition epoch */
    kb_mrec_init(&recs[0], KB_MREC_PARTITION_CHANGE);
    recs[0].topic_id = id;
    recs[0].partition = 1;
    recs[0].leader = 1;
    CU_ASSERT_EQUAL(apply(s.meta, recs, 1, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(ev.epochs, 1);
    CU_ASSERT_EQUAL(ev.last_epoch, 1);
    kb_mrec_init(&recs[0], KB_MREC_PARTITION_CHANGE);
    recs[0].topic_id = id;
    recs[0].partition = 1;
    recs[0].leader = 1;
    recs[0].leader_epoch = 10;
    CU_ASSERT_EQUAL(apply(s.meta, recs, 1, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(ev.last_epoch, 10);
    CU_ASSERT_EQUAL(kb_meta_part(s.meta, "ap", 1, &part), KB_META_OK);
    CU_ASSERT_EQUAL(kb_part_epoch(part), 10);
    kb_part_release(part);
    kb_mrec_init(&recs[0], KB_MREC_PARTITION_CHANGE);
    recs[0].topic_id = id;
    recs[0].partition = 1;
    recs[0].isr = malloc(2 * sizeof(int32_t));
    recs[0].isr[0] = 1;
    recs[0].isr[1] = 2;
    recs[0].nisr = 2;
    recs[0].replicas = malloc(2 * sizeof(int32_t));
    recs[0].replicas[0] = 1;
    recs[0].replicas[1] = 2;
    recs[0].nreplicas = 2;
    CU_ASSERT_EQUAL(apply(s.meta, recs, 1, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(ev.epochs, 2);
    CU_ASSERT_EQUAL(kb_meta_part_state(s.meta, &id, 1, &ps), KB_META_OK);
    CU_ASSERT_EQUAL(ps.leader_epoch, 10);
    CU_ASSERT_EQUAL(ps.partition_epoch, 3);
    CU_ASSERT_EQUAL(ps.nisr, 2);
    CU_ASSERT_EQUAL(ps.isr[1], 2);
    CU_ASSERT_EQUAL(ps.nreplicas, 2);
    /* the local partition got the image's replica set, ISR and epochs */
    CU_ASSERT_EQUAL(kb_meta_part(s.meta, "ap", 1, &part), KB_META_OK);
    {
        int32_t isr[4], pe = -1, leader = -1;
        bool pending = true;
        CU_ASSERT_EQUAL(kb_part_isr(part, isr, 4), 2);
        kb_part_repl_info(part, &pe, &leader, &pending);
        CU_ASSERT_EQUAL(pe, 3);
        CU_ASSERT_EQUAL(leader, 1);
        CU_ASSERT_EQUAL(kb_part_role(part), KB_PART_LEADER);
    }
    kb_part_release(part);
    /* another leader: this node follows it */
    kb_mrec_init(&recs[0], KB_MREC_PARTITION_CHANGE);
    recs[0].topic_id = id;
    recs[0].partition = 1;
    recs[0].leader = 2;
    CU_ASSERT_EQUAL(apply(s.meta, recs, 1, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(ev.last_epoch, 11);
    CU_ASSERT_EQUAL(kb_meta_part(s.meta, "ap", 1, &part), KB_META_OK);
    CU_ASSERT_EQUAL(kb_part_role(part), KB_PART_FOLLOWER);
    CU_ASSERT_EQUAL(kb_part_epoch(part), 11);
    kb_part_release(part);
    kb_mrec_init(&recs[0], KB_MREC_PARTITION_CHANGE);
    recs[0].topic_id = id;
    recs[0].partition = 1;
    recs[0].leader = 1;
    CU_ASSERT_EQUAL(apply(s.meta, recs, 1, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(kb_meta_part(s.meta, "ap", 1, &part), KB_META_OK);
    CU_ASSERT_EQUAL(kb_part_role(part), KB_PART_LEADER);
    CU_ASSERT_EQUAL(kb_part_epoch(part), 12);
    kb_part_release(part);
    /* a record type kbroker does not apply is refused by name */
    {
        kp_writer_t wr;
        kp_RegisterBrokerRecord_t rb;
        kb_mrec_t d;
        char e[256];
        kp_RegisterBrokerRecord_init(&rb);
        rb.BrokerId = 2;
        kp_writer_init(&wr);
        CU_ASSERT_EQUAL(kp_mrec_encode(&wr, KP_RECTYPE_RegisterBrokerRecord, 0, &rb), 0);
        CU_ASSERT_EQUAL(kb_mrec_decode(&d, wr.buf, wr.len, e, sizeof(e)), 0);
        CU_ASSERT_EQUAL(d.type, KP_RECTYPE_RegisterBrokerRecord);
        kb_mrec_clear(&d);
        kp_writer_free(&wr);
    }
    /* ConfigRecord with a null value removes the key; broker configs of this node and the
     * cluster default; another node's are not kept */
    cfg_rec(&recs[0], KB_RES_TOPIC, "ap", KB_TCONF_MIRROR_NAME, NULL);
    cfg_rec(&recs[1], KB_RES_BROKER, "1", "log.retention.bytes", "5000");
    cfg_rec(&recs[2], KB_RES_BROKER, "", "log.retention.ms", "6000");
    cfg_rec(&recs[3], KB_RES_BROKER, "2", "log.retention.ms", "7000");
    CU_ASSERT_EQUAL(apply(s.meta, recs, 4, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(ev.configs, 4);
    CU_ASSERT_EQUAL(kb_meta_topic_configs(s.meta, "ap", &kv, &nkv), 0);
    CU_ASSERT_EQUAL(nkv, 0);
    kb_kv_free(kv, nkv);
    CU_ASSERT_EQUAL(kb_meta_part(s.meta, "ap", 0, &part), KB_META_OK);
    CU_ASSERT_EQUAL(kb_part_write_mode(part), KB_WRITE_WRITABLE); /* no longer a mirror */
    kb_part_release(part);
    {
        char buf[64];
        CU_ASSERT_EQUAL(kb_meta_broker_config_get(s.meta, "log.retention.bytes", buf, sizeof(buf)),
                        4);
        CU_ASSERT_STRING_EQUAL(buf, "5000");
        CU_ASSERT(kb_meta_broker_config_get(s.meta, "log.retention.ms", buf, sizeof(buf)) > 0);
        CU_ASSERT_STRING_EQUAL(buf, "6000");
    }

    /* ProducerIdsRecord: forward only */
    kb_mrec_init(&recs[0], KB_MREC_PRODUCER_IDS);
    recs[0].next_producer_id = 5000;
    CU_ASSERT_EQUAL(apply(s.meta, recs, 1, err, sizeof(err)), 0);
    /* RemoveTopicRecord: gone from the image and from disk, DELETED */
    kb_mrec_init(&recs[0], KB_MREC_REMOVE_TOPIC);
    recs[0].topic_id = id;
    CU_ASSERT_EQUAL(apply(s.meta, recs, 1, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(ev.deleted, 1);
    CU_ASSERT_NOT_EQUAL(kb_meta_topic_by_name(s.meta, "ap", NULL), 0);
    kb_partmgr_tick(s.pm);
    snprintf(path, sizeof(path), "%s/logs/ap-0", dir);
    CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
    /* records at or below the metadata offset are skipped (a batch seen twice) */
    off = kb_meta_offset(s.meta);
    {
        kp_batch_opts_t o;
        kp_batch_builder_t bb;
        kp_writer_t out, val;
        kp_bytes_t key = {NULL, -1}, v;
        kb_mrec_init(&recs[0], KB_MREC_TOPIC);
        recs[0].name = strdup("old");
        kb_uuid_random(&recs[0].topic_id);
        kp_batch_opts_init(&o);
        o.baseOffset = 0;
        kp_batch_builder_init(&bb, &o);
        kp_writer_init(&val);
        kb_mrec_encode(&recs[0], &val);
        v.ptr = val.buf;
        v.len = (int32_t)val.len;
        kp_batch_builder_add(&bb, 1, key, v, NULL, 0);
        kp_writer_init(&out);
        kp_batch_builder_finish(&bb, &out);
        CU_ASSERT_EQUAL(kb_meta_apply_records(s.meta, out.buf, out.len, err, sizeof(err)), 0);
        CU_ASSERT_NOT_EQUAL(kb_meta_topic_by_name(s.meta, "old", NULL), 0);
        CU_ASSERT_EQUAL(kb_meta_offset(s.meta), off);
        kb_mrec_clear(&recs[0]);
        kp_batch_builder_free(&bb);
        kp_writer_free(&val);
        kp_writer_free(&out);
    }
    kb_meta_unlisten(s.meta, l);
    mstack_close(&s);

    /* the applied records were kept in this node's metadata log: a restart has them */
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true, NULL, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(kb_meta_offset(s.meta), off);
    CU_ASSERT_NOT_EQUAL(kb_meta_topic_by_name(s.meta, "ap", NULL), 0);
    {
        char buf[64];
        CU_ASSERT_EQUAL(kb_meta_broker_config_get(s.meta, "log.retention.bytes", buf, sizeof(buf)),
                        4);
    }
    /* a batch that does not continue the log is refused */
    g_next += 5;
    kb_mrec_init(&recs[0], KB_MREC_PRODUCER_IDS);
    recs[0].next_producer_id = 9000;
    CU_ASSERT_EQUAL(apply(s.meta, recs, 1, err, sizeof(err)), KB_E_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "does not continue"));
    g_next = kb_meta_offset(s.meta) + 1;

    /* records the image cannot take are refused, naming their offset (they are in the log
     * already: the next start refuses too) */
    kb_uuid_random(&id);
    kb_mrec_init(&recs[0], KB_MREC_TOPIC);
    recs[0].name = strdup("ap2");
    recs[0].topic_id = id;
    part_rec(&recs[1], &id, 0);
    part_rec(&recs[2], &id, 1);
    CU_ASSERT_EQUAL(apply(s.meta, recs, 3, err, sizeof(err)), 0);
    /* an epoch that does not move forward is refused, naming the offset */
    kb_mrec_init(&recs[0], KB_MREC_PARTITION_CHANGE);
    recs[0].topic_id = id;
    recs[0].partition = 1;
    recs[0].leader = 1;
    recs[0].leader_epoch = 0;
    off = kb_meta_offset(s.meta) + 1;
    CU_ASSERT_NOT_EQUAL(apply(s.meta, recs, 1, err, sizeof(err)), 0);
    {
        char want[64];
        snprintf(want, sizeof(want), "offset %" PRId64 ":", off);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    }

    kb_mrec_init(&recs[0], KB_MREC_PRODUCER_IDS);
    recs[0].next_producer_id = 4000;
    CU_ASSERT_NOT_EQUAL(apply(s.meta, recs, 1, err, sizeof(err)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "ProducerIdsRecord"));
    /* records of an unknown topic are refused */
    kb_uuid_random(&recs[0].topic_id);
    part_rec(&recs[0], &recs[0].topic_id, 0);
    CU_ASSERT_NOT_EQUAL(apply(s.meta, recs, 1, err, sizeof(err)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown topic"));

    mstack_close(&s);
    CU_ASSERT_NOT_EQUAL(mstack_open(&s, dir, false, NULL, err, sizeof(err)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "PartitionChangeRecord"));
    kbat_rmrf(dir);
}

/* ---- replay across restarts -------------------------------------------------------------- */

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const kb_kv_t *)a)->key, ((const kb_kv_t *)b)->key);
}

static void dump_kv(FILE *f, kb_kv_t *kv, size_t n)
{
    qsort(kv, n, sizeof(*kv), kv_cmp);
    for (size_t i = 0; i < n; i++)
        fprintf(f, " %s=%s", kv[i].key, kv[i].value);
    kb_kv_free(kv, n);
}

/* The whole image as text (topics sorted by name). malloc'd. */
static char *dump(kb_meta_t *meta)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    kb_topic_info_t *ts;
    size_t n;
    kb_kv_t *a, *b;
    size_t na, nb;
    CU_ASSERT_EQUAL_FATAL(kb_meta_topics(meta, &ts, &n), 0);
    for (size_t i = 0; i < n; i++) {
        char id[23];
        kb_kv_t *kv;
        size_t nkv;
        kb_uuid_str(&ts[i].id, id);
        fprintf(f, "%s %s p=%d i=%d m=%d:", ts[i].name, id, ts[i].partitions, ts[i].internal,
                ts[i].mirror);
        for (int32_t p = 0; p < ts[i].partitions; p++) {
            kb_meta_part_state_t ps;
            CU_ASSERT_EQUAL(kb_meta_part_state(meta, &ts[i].id, p, &ps), KB_META_OK);
            fprintf(f, " [%d %d %d %d/%d]", ps.leader, ps.leader_epoch, ps.partition_epoch,
                    ps.nreplicas, ps.nisr);
        }
        if (kb_meta_topic_configs(meta, ts[i].name, &kv, &nkv) == 0)
            dump_kv(f, kv, nkv);
        fprintf(f, "\n");
    }
    free(ts);
    CU_ASSERT_EQUAL(kb_meta_broker_dyncfg(meta, &a, &na, &b, &nb), 0);
    fprintf(f, "node:");
    dump_kv(f, a, na);
    fprintf(f, "\ndefault:");
    dump_kv(f, b, nb);
    fprintf(f, "\noffset %" PRId64 "\n", kb_meta_offset(meta));
    fclose(f);
    return buf;
}

static void t_replay(void)
{
    char dir[512], err[512], msg[512], name[64], val[32];
    mstack_t s;
    char *before, *after;
    int64_t pid_last = -1, pid;
    unsigned seed = 12345;

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    /* Without partition logs (the fsyncs of creating them would dominate), except in the
     * last round, whose restart opens every partition of the replayed image. */
    for (int round = 0; round < 3; round++) {
        CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, false, NULL, err, sizeof(err)), 0);
        for (int i = 0; i < 60; i++) {
            int what = (int)(rand_r(&seed) % 8);
            int k = (int)(rand_r(&seed) % 40);
            snprintf(name, sizeof(name), "r%d", k);
            snprintf(val, sizeof(val), "%d", 1000 + (int)(rand_r(&seed) % 100000));
            switch (what) {
            case 0:
            case 1: {
                kb_kv_t cfg[] = {{"retention.ms", val}};
                kb_topic_spec_t spec = {.name = name,
                                        .partitions = 1 + (int32_t)(rand_r(&seed) % 4),
                                        .configs = cfg,
                                        .config_cnt = 1};
                kb_meta_create_topic(s.meta, &spec, false, NULL, msg, sizeof(msg));
                break;
            }
            case 2:
                kb_meta_delete_topic(s.meta, name, NULL, msg, sizeof(msg));
                break;
            case 3: {
                kb_topic_info_t ti;
                if (kb_meta_topic_by_name(s.meta, name, &ti) == 0)
                    CU_ASSERT_EQUAL(kb_meta_create_partitions(s.meta, name, ti.partitions + 1,
                                                              false, msg, sizeof(msg)),
                                    0);
                break;
            }
            case 4: {
                kb_cfg_op_t ops[] = {{"segment.ms", KB_CFGOP_SET, val},
                                     {"retention.ms", KB_CFGOP_DELETE, NULL}};
                kb_meta_alter_topic_configs(s.meta, name, ops, 2, false, false, false, msg,
                                            sizeof(msg));
                break;
            }
            case 5: {
                kb_topic_info_t ti;
                int32_t ne;
                if (kb_meta_topic_by_name(s.meta, name, &ti) == 0)
                    CU_ASSERT_EQUAL(
                        kb_meta_bump_epoch(s.meta, &ti.id, 0, (int32_t)(rand_r(&seed) % 20), &ne),
                        0);
                break;
            }
            case 6: {
                kb_cfg_op_t op = {k % 2 ? "log.retention.bytes" : "log.segment.bytes",
                                  k % 3 ? KB_CFGOP_SET : KB_CFGOP_DELETE, "2000000"};
                CU_ASSERT_EQUAL(kb_meta_alter_broker_configs(s.meta, k % 2 ? "1" : "", &op, 1,
                                                             false, false, msg, sizeof(msg)),
                                0);
                break;
            }
            case 7:
                CU_ASSERT_EQUAL(kb_meta_alloc_producer_ids(s.meta, 1 + k * 50, &pid), 0);
                CU_ASSERT(pid > pid_last);
                pid_last = pid + k * 50;
                break;
            }
        }
        before = dump(s.meta);
        mstack_close(&s);
        CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, round == 2, NULL, err, sizeof(err)), 0);
        after = dump(s.meta);
        CU_ASSERT_STRING_EQUAL(after, before);
        if (round == 2) { /* the opened partitions carry the image's epochs */
            kb_topic_info_t *ts;
            size_t nt;
            CU_ASSERT_EQUAL_FATAL(kb_meta_topics(s.meta, &ts, &nt), 0);
            for (size_t i = 0; i < nt; i++) {
                kb_meta_part_state_t ps;
                kb_part_t *part;
                int32_t pe = -1, leader = -1;
                bool pending;
                CU_ASSERT_EQUAL(kb_meta_part_state(s.meta, &ts[i].id, 0, &ps), KB_META_OK);
                CU_ASSERT_EQUAL_FATAL(kb_meta_part(s.meta, ts[i].name, 0, &part), KB_META_OK);
                kb_part_repl_info(part, &pe, &leader, &pending);
                CU_ASSERT_EQUAL(kb_part_epoch(part), ps.leader_epoch);
                CU_ASSERT_EQUAL(pe, ps.partition_epoch);
                CU_ASSERT_EQUAL(leader, 1);
                kb_part_release(part);
            }
            free(ts);
        }
        if (strcmp(after, before))
            fprintf(stderr, "before:\n%s\nafter:\n%s\n", before, after);
        /* producer ids are never handed out twice across the restart */
        CU_ASSERT_EQUAL(kb_meta_alloc_producer_ids(s.meta, 1, &pid), 0);
        CU_ASSERT(pid > pid_last);
        pid_last = pid;
        free(before);
        free(after);
        mstack_close(&s);
    }
    kbat_rmrf(dir);
}

/* Remove the metadata snapshots of @p dir; the number removed. */
static int rm_snapshots(const char *dir)
{
    char path[800];
    DIR *d;
    struct dirent *de;
    int n = 0;
    snprintf(path, sizeof(path), "%s/logs/__cluster_metadata-0", dir);
    d = opendir(path);
    while (d && (de = readdir(d))) {
        char p[1200];
        if (!strstr(de->d_name, ".checkpoint"))
            continue;
        snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
        n += unlink(p) == 0;
    }
    if (d)
        closedir(d);
    return n;
}

/* The snapshot file names of @p dir, newest last, into @p names (up to 8). */
static int list_snapshots(const char *dir, char names[][64])
{
    char path[800];
    DIR *d;
    struct dirent *de;
    int n = 0;
    snprintf(path, sizeof(path), "%s/logs/__cluster_metadata-0", dir);
    d = opendir(path);
    while (d && (de = readdir(d)) && n < 8) {
        size_t l = strlen(de->d_name);
        if (l > 11 && !strcmp(de->d_name + l - 11, ".checkpoint"))
            snprintf(names[n++], 64, "%s", de->d_name);
    }
    if (d)
        closedir(d);
    qsort(names, (size_t)n, 64, (int (*)(const void *, const void *))strcmp);
    return n;
}

/* ---- a record the image cannot take stops the start -------------------------------------- */

/* Append one batch holding @p value as the record value to the metadata log of @p dir. The
 * offset of the record goes to @p at. */
static void append_raw_record(const char *dir, const uint8_t *value, size_t len, int64_t *at)
{
    char path[800], err[256];
    kb_log_config_t lc;
    kb_log_open_opts_t o;
    kb_log_t *log;
    kp_batch_opts_t bo;
    kp_batch_builder_t bb;
    kp_writer_t out;
    kp_bytes_t key = {NULL, -1}, v = {value, (int32_t)len};
    snprintf(path, sizeof(path), "%s/logs/__cluster_metadata-0", dir);
    kb_log_config_defaults(&lc);
    kb_log_open_opts_init(&o);
    log = kb_log_open(path, &lc, &o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(log);
    *at = kb_log_leo(log);
    kp_batch_opts_init(&bo);
    kp_batch_builder_init(&bb, &bo);
    kp_batch_builder_add(&bb, 1, key, v, NULL, 0);
    kp_writer_init(&out);
    CU_ASSERT_EQUAL(kp_batch_builder_finish(&bb, &out), 0);
    CU_ASSERT_EQUAL(kb_log_append_leader(log, out.buf, out.len, 1, KB_ORIGIN_COORDINATOR, 0, NULL),
                    0);
    kb_log_close(log, 1);
    kp_batch_builder_free(&bb);
    kp_writer_free(&out);
}

static void t_corrupt(void)
{
    char dir[512], err[512], want[64];
    mstack_t s;
    kb_topic_spec_t spec = {.name = "t", .partitions = 1};
    static const uint8_t garbage[] = {1, 3, 0, 0xff, 0xff};
    int64_t at;
    kb_mrec_t r;
    kp_writer_t wr;

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, false, NULL, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, err, sizeof(err)), 0);
    mstack_close(&s);
    /* an undecodable record (a truncated PartitionRecord) */
    append_raw_record(dir, garbage, sizeof(garbage), &at);
    CU_ASSERT_NOT_EQUAL(mstack_open(&s, dir, false, NULL, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "offset %" PRId64 ": undecodable", at);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "__cluster_metadata-0"));
    kbat_rmrf(dir);

    /* a well-formed record the image cannot take (a second topic named "t") */
    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, false, NULL, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, err, sizeof(err)), 0);
    mstack_close(&s);
    kb_mrec_init(&r, KB_MREC_TOPIC);
    r.name = strdup("t");
    kb_uuid_random(&r.topic_id);
    kp_writer_init(&wr);
    kb_mrec_encode(&r, &wr);
    append_raw_record(dir, wr.buf, wr.len, &at);
    kp_writer_free(&wr);
    kb_mrec_clear(&r);
    CU_ASSERT_NOT_EQUAL(mstack_open(&s, dir, false, NULL, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "offset %" PRId64 ": TopicRecord", at);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    kbat_rmrf(dir);

    /* a bad CRC in the middle of the log: refused (the storage engine's recovery would cut
     * the log there and lose the topics after it); a torn tail: cut, the rest kept */
    for (int torn = 0; torn < 2; torn++) {
        char seg[800];
        const char *names[] = {"a", "b", "c"};
        uint8_t *buf;
        size_t pos[3], len = 0;
        kp_batch_iter_t it;
        kp_batch_t b;
        FILE *f;
        int nb = 0;
        CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
        CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, false, NULL, err, sizeof(err)), 0);
        for (int i = 0; i < 3; i++) {
            spec.name = names[i];
            CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, err, sizeof(err)), 0);
        }
        mstack_close(&s);
        snprintf(seg, sizeof(seg), "%s/logs/__cluster_metadata-0/00000000000000000000.log", dir);
        f = fopen(seg, "rb");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        buf = malloc(1 << 16);
        len = fread(buf, 1, 1 << 16, f);
        fclose(f);
        kp_batch_iter_init(&it, buf, len, 0, 0);
        while (nb < 3 && kp_batch_iter_next(&it, &b) == 1)
            pos[nb++] = (size_t)(b.buf - buf);
        CU_ASSERT_EQUAL_FATAL(nb, 3);
        if (!torn) {
            buf[pos[1] + 70] ^= 0xff; /* inside the second batch's records */
            f = fopen(seg, "wb");
            CU_ASSERT_EQUAL(fwrite(buf, 1, len, f), len);
            fclose(f);
            CU_ASSERT_NOT_EQUAL(mstack_open(&s, dir, false, NULL, err, sizeof(err)), 0);
            CU_ASSERT_PTR_NOT_NULL(strstr(err, "followed by more data"));
        } else {
            /* as after a crash: no snapshot written at close */
            rm_snapshots(dir);
            CU_ASSERT_EQUAL(truncate(seg, (off_t)(pos[2] + 20)), 0);
            CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, false, NULL, err, sizeof(err)), 0);
            CU_ASSERT_EQUAL(kb_meta_topic_by_name(s.meta, "b", NULL), 0);
            CU_ASSERT_NOT_EQUAL(kb_meta_topic_by_name(s.meta, "c", NULL), 0);
            /* and the log takes new commits after the cut */
            spec.name = "d";
            CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, err, sizeof(err)), 0);
            mstack_close(&s);
            CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, false, NULL, err, sizeof(err)), 0);
            CU_ASSERT_EQUAL(kb_meta_topic_by_name(s.meta, "d", NULL), 0);
            mstack_close(&s);
        }
        free(buf);
        kbat_rmrf(dir);
    }
    spec.name = "t";
}

/* ---- migration of the old snapshot -------------------------------------------------------- */

static void old_str(kp_writer_t *wr, const char *s)
{
    kp_write_int32(wr, (int32_t)strlen(s));
    kp_write_raw(wr, s, strlen(s));
}

static void t_migrate(void)
{
    char dir[512], err[512], path[800], logs[700];
    kp_writer_t pl, wr;
    kp_uuid_t id1, id2;
    mstack_t s;
    kb_topic_info_t ti;
    int32_t *ep, nep;
    kb_kv_t *kv;
    size_t nkv;
    char buf[64];
    int64_t pid;
    FILE *f;

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    snprintf(logs, sizeof(logs), "%s/logs", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(logs, 0755), 0);
    snprintf(path, sizeof(path), "%s/meta.properties", logs);
    f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "cluster.id=OLDCLUSTERidAAAAAAAAAA\nnode.id=1\nversion=1\n");
    fclose(f);
    /* the old format, version 1 */
    kb_uuid_random(&id1);
    kb_uuid_random(&id2);
    kp_writer_init(&pl);
    old_str(&pl, "OLDCLUSTERidAAAAAAAAAA");
    kp_write_int32(&pl, 1);
    kp_write_int64(&pl, 17);
    kp_write_int64(&pl, 3000);
    kp_write_int32(&pl, 1); /* this node's dynamic configs */
    old_str(&pl, "log.retention.bytes");
    old_str(&pl, "4242");
    kp_write_int32(&pl, 0); /* cluster default */
    kp_write_int32(&pl, 2);
    old_str(&pl, "old1");
    kp_write_uuid(&pl, &id1);
    kp_write_int8(&pl, 0);
    kp_write_int32(&pl, 2);
    kp_write_int32(&pl, 3);
    kp_write_int32(&pl, 7);
    kp_write_int32(&pl, 1);
    old_str(&pl, "retention.ms");
    old_str(&pl, "1234");
    old_str(&pl, KB_TOPIC_CONSUMER_OFFSETS);
    kp_write_uuid(&pl, &id2);
    kp_write_int8(&pl, 1);
    kp_write_int32(&pl, 1);
    kp_write_int32(&pl, 0);
    kp_write_int32(&pl, 0);
    kp_writer_init(&wr);
    kp_write_raw(&wr, "KBMD", 4);
    kp_write_int16(&wr, 1);
    kp_write_uint32(&wr, kp_crc32c(0, pl.buf, pl.len));
    kp_write_int32(&wr, (int32_t)pl.len);
    kp_write_raw(&wr, pl.buf, pl.len);
    snprintf(path, sizeof(path), "%s/kbroker-metadata", logs);
    f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(wr.buf, 1, wr.len, f), wr.len);
    fclose(f);
    kp_writer_free(&pl);

    for (int round = 0; round < 2; round++) {
        CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true, NULL, err, sizeof(err)), 0);
        CU_ASSERT_STRING_EQUAL(kb_meta_cluster_id(s.meta), "OLDCLUSTERidAAAAAAAAAA");
        CU_ASSERT_EQUAL(kb_meta_topic_by_name(s.meta, "old1", &ti), 0);
        CU_ASSERT(!memcmp(ti.id.b, id1.b, 16));
        CU_ASSERT_EQUAL(ti.partitions, 2);
        CU_ASSERT_EQUAL(kb_meta_topic_epochs(s.meta, "old1", &ep, &nep), 0);
        CU_ASSERT_EQUAL(nep, 2);
        if (nep == 2) {
            CU_ASSERT_EQUAL(ep[0], 3);
            CU_ASSERT_EQUAL(ep[1], 7);
        }
        free(ep);
        CU_ASSERT_EQUAL(kb_meta_topic_configs(s.meta, "old1", &kv, &nkv), 0);
        CU_ASSERT_EQUAL(nkv, 1);
        CU_ASSERT_STRING_EQUAL(kb_kv_get(kv, nkv, "retention.ms"), "1234");
        kb_kv_free(kv, nkv);
        CU_ASSERT_EQUAL(kb_meta_topic_by_name(s.meta, KB_TOPIC_CONSUMER_OFFSETS, &ti), 0);
        CU_ASSERT(ti.internal);
        CU_ASSERT_EQUAL(kb_meta_broker_config_get(s.meta, "log.retention.bytes", buf, sizeof(buf)),
                        4);
        CU_ASSERT_EQUAL(kb_meta_alloc_producer_ids(s.meta, 1, &pid), 0);
        CU_ASSERT(pid >= 3000);
        /* once: the old file is renamed */
        CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
        mstack_close(&s);
    }
    /* a corrupt old snapshot refuses the start instead of losing topics */
    kbat_rmrf(dir);
    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    snprintf(logs, sizeof(logs), "%s/logs", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(logs, 0755), 0);
    snprintf(path, sizeof(path), "%s/kbroker-metadata", logs);
    wr.buf[30] = (uint8_t)~wr.buf[30];
    f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(wr.buf, 1, wr.len, f), wr.len);
    fclose(f);
    kp_writer_free(&wr);
    snprintf(path, sizeof(path), "%s/meta.properties", logs);
    f = fopen(path, "w");
    fprintf(f, "cluster.id=OLDCLUSTERidAAAAAAAAAA\nnode.id=1\nversion=1\n");
    fclose(f);
    CU_ASSERT_NOT_EQUAL(mstack_open(&s, dir, false, NULL, err, sizeof(err)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "checksum"));
    kbat_rmrf(dir);
}

/* ---- snapshots ------------------------------------------------------------------------- */

static void some_changes(kb_meta_t *meta, int round)
{
    char name[32], val[32], msg[256];
    kb_topic_info_t ti;
    int32_t ne;
    int64_t pid;
    for (int i = 0; i < 5; i++) {
        kb_kv_t cfg[] = {{"retention.ms", val}};
        kb_topic_spec_t spec = {.name = name, .partitions = 2, .configs = cfg, .config_cnt = 1};
        snprintf(name, sizeof(name), "s%d-%d", round, i);
        snprintf(val, sizeof(val), "%d", 5000 + round * 10 + i);
        CU_ASSERT_EQUAL(kb_meta_create_topic(meta, &spec, false, NULL, msg, sizeof(msg)), 0);
    }
    snprintf(name, sizeof(name), "s%d-1", round);
    CU_ASSERT_EQUAL(kb_meta_delete_topic(meta, name, NULL, msg, sizeof(msg)), 0);
    snprintf(name, sizeof(name), "s%d-2", round);
    CU_ASSERT_EQUAL(kb_meta_topic_by_name(meta, name, &ti), 0);
    CU_ASSERT_EQUAL(kb_meta_bump_epoch(meta, &ti.id, 1, 7 + round, &ne), 0);
    CU_ASSERT_EQUAL(kb_meta_alloc_producer_ids(meta, 1500, &pid), 0);
    {
        kb_cfg_op_t op = {"log.retention.bytes", KB_CFGOP_SET, val};
        CU_ASSERT_EQUAL(
            kb_meta_alter_broker_configs(meta, "1", &op, 1, false, false, msg, sizeof(msg)), 0);
    }
}

static void t_snapshot(void)
{
    char dir[512], err[512], names[8][64], path[900];
    mstack_t s;
    char *want, *got;
    int n;
    int64_t pid;

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true, NULL, err, sizeof(err)), 0);
    some_changes(s.meta, 0);
    CU_ASSERT_EQUAL(kb_meta_checkpoint(s.meta), 0);
    n = list_snapshots(dir, names);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    {
        char exp[64];
        snprintf(exp, sizeof(exp), "%020" PRId64 "-0000000001.checkpoint",
                 kb_meta_offset(s.meta) + 1);
        CU_ASSERT_STRING_EQUAL(names[0], exp);
    }
    some_changes(s.meta, 1);
    want = dump(s.meta);
    mstack_close(&s); /* a second snapshot at close */
    CU_ASSERT_EQUAL(list_snapshots(dir, names), 2);
    /* the newest snapshot (and no log replay) gives the image back */
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true, NULL, err, sizeof(err)), 0);
    got = dump(s.meta);
    CU_ASSERT_STRING_EQUAL(got, want);
    free(got);
    /* producer ids stay unique over a snapshot */
    CU_ASSERT_EQUAL(kb_meta_alloc_producer_ids(s.meta, 1, &pid), 0);
    CU_ASSERT(pid >= 3000);
    free(want);
    some_changes(s.meta, 2);
    CU_ASSERT_EQUAL(kb_meta_checkpoint(s.meta), 0);
    some_changes(s.meta, 3);
    want = dump(s.meta);
    mstack_close(&s);
    CU_ASSERT_EQUAL(list_snapshots(dir, names), 2); /* the older ones went */
    /* a damaged newest snapshot: the older one and the log after it */
    n = list_snapshots(dir, names);
    snprintf(path, sizeof(path), "%s/logs/__cluster_metadata-0/%s", dir, names[n - 1]);
    {
        FILE *f = fopen(path, "r+b");
        unsigned char c;
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fseek(f, 80, SEEK_SET);
        CU_ASSERT_EQUAL(fread(&c, 1, 1, f), 1);
        c = (unsigned char)~c;
        fseek(f, 80, SEEK_SET);
        fwrite(&c, 1, 1, f);
        fclose(f);
    }
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, false, NULL, err, sizeof(err)), 0);
    got = dump(s.meta);
    CU_ASSERT_STRING_EQUAL(got, want);
    free(got);
    kb_meta_close(s.meta);
    kb_config_free(s.cfg);
    /* no snapshot at all: the whole log */
    CU_ASSERT(rm_snapshots(dir) >= 1);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true, NULL, err, sizeof(err)), 0);
    got = dump(s.meta);
    CU_ASSERT_STRING_EQUAL(got, want);
    free(got);
    free(want);
    mstack_close(&s);
    kbat_rmrf(dir);
}

/* ---- plugin records (KbrokerPluginRecord, kbx controller_write) ------------------------------ */

/* A plugin record borrowing @p key / @p value ("-": delete); never kb_mrec_clear'd. */
static kb_mrec_t prec(int32_t type, const char *key, const char *value)
{
    kb_mrec_t r;
    kb_mrec_init(&r, KB_MREC_PLUGIN);
    r.plugin_type = type;
    r.pkey = (uint8_t *)key;
    r.pkey_len = strlen(key);
    r.has_pvalue = strcmp(value, "-") != 0;
    r.pvalue = r.has_pvalue ? (uint8_t *)value : NULL;
    r.pvalue_len = r.has_pvalue ? strlen(value) : 0;
    return r;
}

/* The image's plugin records as "type:key=value;" in image order. */
static void precs_dump(kb_meta_t *meta, char *out, size_t size)
{
    kb_mrec_t *v;
    size_t n, o = 0;
    out[0] = '\0';
    CU_ASSERT_EQUAL_FATAL(kb_meta_plugin_records(meta, &v, &n), 0);
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(out + o, size - o, "%d:%.*s=%.*s;", (int)v[i].plugin_type,
                         (int)v[i].pkey_len, (const char *)v[i].pkey, (int)v[i].pvalue_len,
                         v[i].pvalue ? (const char *)v[i].pvalue : "");
        if (w > 0 && (size_t)w < size - o)
            o += (size_t)w;
        kb_mrec_clear(&v[i]);
    }
    free(v);
}

static int g_prec_events, g_prec_snap;

static void prec_listener(void *opaque, const kb_meta_event_t *ev)
{
    (void)opaque;
    if (ev->type != KB_META_EV_PLUGIN || !ev->acl || ev->acl->type != KB_MREC_PLUGIN)
        return;
    if (ev->snapshot)
        g_prec_snap++;
    else
        g_prec_events++;
}

/* Latest value per (type, key), deletes, events (live and in a listener's snapshot), image
 * snapshots and log replay; a broker-only node cannot commit them. */
static void t_plugin_records(void)
{
    char dir[512], err[512], msg[256], want[512], got[512];
    kb_mrec_t b1[] = {prec(7, "k1", "v1"), prec(7, "k2", "v2"), prec(8, "k1", "other")};
    kb_mrec_t b2[] = {prec(7, "k2", "-"), prec(7, "k1", "v1b"), prec(7, "k3", ""),
                      prec(7, "nokey", "-")};
    kb_meta_listener_t *l;
    int64_t off = -2;
    mstack_t s;

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true, NULL, err, sizeof(err)), 0);
    g_prec_events = g_prec_snap = 0;
    l = kb_meta_listen(s.meta, prec_listener, NULL, false);
    CU_ASSERT_EQUAL(kb_meta_commit_records_at(s.meta, b1, 3, &off, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(off, kb_meta_offset(s.meta));
    CU_ASSERT_EQUAL(kb_meta_commit_records(s.meta, b2, 4, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(g_prec_events, 7); /* every record as written, deletes of absent keys too */
    kb_meta_unlisten(s.meta, l);
    precs_dump(s.meta, want, sizeof(want));
    CU_ASSERT_STRING_EQUAL(want, "7:k1=v1b;8:k1=other;7:k3=;");
    l = kb_meta_listen(s.meta, prec_listener, NULL, true);
    CU_ASSERT_EQUAL(g_prec_snap, 3); /* the live keys */
    kb_meta_unlisten(s.meta, l);
    /* image snapshot at close, then no snapshot (the log alone) */
    mstack_close(&s);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true, NULL, err, sizeof(err)), 0);
    precs_dump(s.meta, got, sizeof(got));
    CU_ASSERT_STRING_EQUAL(got, want);
    mstack_close(&s);
    CU_ASSERT(rm_snapshots(dir) >= 1);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true, NULL, err, sizeof(err)), 0);
    precs_dump(s.meta, got, sizeof(got));
    CU_ASSERT_STRING_EQUAL(got, want);
    /* a broker-only node's image is the controller's copy */
    kb_meta_set_remote(s.meta, 9);
    CU_ASSERT_EQUAL(kb_meta_commit_records(s.meta, b1, 1, msg, sizeof(msg)), KP_ERR_NOT_CONTROLLER);
    mstack_close(&s);
    kbat_rmrf(dir);
}

/* ---- damaged records from the wire --------------------------------------------------------- */

/* Records with random bytes changed (and valid batch CRCs, so they reach the decoder and the
 * image) are refused or applied, never crash; the image stays usable. */
static void t_garbage(void)
{
    char dir[512], err[512], msg[256];
    mstack_t s;
    unsigned seed = 4242;
    int16_t types[] = {KB_MREC_TOPIC,       KB_MREC_PARTITION,        KB_MREC_CONFIG,
                       KB_MREC_CONFIG,      KB_MREC_PARTITION_CHANGE, KB_MREC_REMOVE_TOPIC,
                       KB_MREC_PRODUCER_IDS};
    kb_topic_info_t ti;
    int applied = 0, refused = 0;
    int64_t next;
    kb_topic_spec_t spec = {.name = "g", .partitions = 2};

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true, NULL, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_meta_topic_by_name(s.meta, "g", &ti), 0);
    next = kb_meta_offset(s.meta) + 1;
    for (int i = 0; i < 80; i++) {
        kb_mrec_t r;
        kp_writer_t val, out;
        kp_batch_opts_t o;
        kp_batch_builder_t bb;
        kp_bytes_t key = {NULL, -1}, v;
        int flips = 1 + (int)(rand_r(&seed) % 3), rc;
        fill(&r, types[rand_r(&seed) % (sizeof(types) / sizeof(types[0]))]);
        if (rand_r(&seed) % 2) { /* aim at the existing topic */
            r.topic_id = ti.id;
            if (r.type == KB_MREC_CONFIG) {
                free(r.resource_name);
                r.resource_name = strdup("g");
            }
        }
        kp_writer_init(&val);
        CU_ASSERT_EQUAL(kb_mrec_encode(&r, &val), 0);
        kb_mrec_clear(&r);
        for (int f = 0; f < flips && val.len > 0; f++)
            val.buf[rand_r(&seed) % val.len] ^= (uint8_t)(1u << (rand_r(&seed) % 8));
        kp_batch_opts_init(&o);
        o.baseOffset = next;
        kp_batch_builder_init(&bb, &o);
        v.ptr = val.buf;
        v.len = (int32_t)val.len;
        kp_batch_builder_add(&bb, 1, key, v, NULL, 0);
        kp_writer_init(&out);
        CU_ASSERT_EQUAL(kp_batch_builder_finish(&bb, &out), 0);
        rc = kb_meta_apply_records(s.meta, out.buf, out.len, err, sizeof(err));
        if (rc == 0)
            applied++;
        else
            refused++;
        CU_ASSERT(rc == 0 || rc == KB_E_INVALID);
        next++; /* appended before it was applied, refused or not */
        kp_batch_builder_free(&bb);
        kp_writer_free(&val);
        kp_writer_free(&out);
    }
    CU_ASSERT(refused > 0);
    CU_ASSERT(applied > 0);
    /* still a working image */
    {
        kb_topic_info_t *ts;
        size_t n;
        CU_ASSERT_EQUAL(kb_meta_topics(s.meta, &ts, &n), 0);
        free(ts);
    }
    mstack_close(&s);
    kbat_rmrf(dir);
}

/* ---- metadata.log.dir ----------------------------------------------------------------------- */

static void t_metadata_dir(void)
{
    char dir[512], err[512], kvbuf[700], path[800];
    const char *kv[] = {kvbuf, NULL};
    mstack_t s;
    kb_topic_spec_t spec = {.name = "md", .partitions = 2};

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    snprintf(kvbuf, sizeof(kvbuf), "metadata.log.dir=%s/meta", dir);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true, kv, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, err, sizeof(err)), 0);
    mstack_close(&s);
    snprintf(path, sizeof(path), "%s/meta/__cluster_metadata-0", dir);
    CU_ASSERT_EQUAL(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/meta/meta.properties", dir);
    CU_ASSERT_EQUAL(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/logs/__cluster_metadata-0", dir);
    CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
    CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true, kv, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(kb_meta_topic_by_name(s.meta, "md", NULL), 0);
    /* a client may not create the metadata topic */
    spec.name = KB_TOPIC_CLUSTER_METADATA;
    CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, err, sizeof(err)),
                    KP_ERR_INVALID_REQUEST);
    mstack_close(&s);
    /* the default place (the first log dir) survives the partition manager's orphan sweep */
    kbat_rmrf(dir);
    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    spec.name = "md";
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL_FATAL(mstack_open(&s, dir, true, NULL, err, sizeof(err)), 0);
        if (i == 0)
            CU_ASSERT_EQUAL(kb_meta_create_topic(s.meta, &spec, false, NULL, err, sizeof(err)), 0);
        kb_partmgr_tick(s.pm);
        CU_ASSERT_EQUAL(kb_meta_topic_by_name(s.meta, "md", NULL), 0);
        mstack_close(&s);
    }
    snprintf(path, sizeof(path), "%s/logs/__cluster_metadata-0", dir);
    CU_ASSERT_EQUAL(access(path, F_OK), 0);
    kbat_rmrf(dir);
}

int main(void)
{
    CU_pSuite s;
    unsigned fails;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("broker_api_meta_log", NULL, NULL);
    CU_add_test(s, "metadata record codec", t_codec);
    CU_add_test(s, "apply of every record type", t_apply);
    CU_add_test(s, "replay of many changes across restarts", t_replay);
    CU_add_test(s, "undecodable / inapplicable record stops the start", t_corrupt);
    CU_add_test(s, "migration of the old snapshot", t_migrate);
    CU_add_test(s, "image snapshots", t_snapshot);
    CU_add_test(s, "plugin records", t_plugin_records);
    CU_add_test(s, "damaged records from the wire", t_garbage);
    CU_add_test(s, "metadata.log.dir", t_metadata_dir);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
