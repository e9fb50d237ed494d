/*
 * test_txn_coord.c -- CUnit: the transaction coordinator (kb_txn) on an in-process broker
 * service (tests/broker_api's kbat harness), driven through its C functions with a manual
 * clock and no timer thread: records in __transaction_state, markers in the partitions (LSO,
 * aborted-transaction index, producer state), the Produce verification hook, timeouts with the
 * fencing epoch, transactional-id expiration with tombstones, reload after a restart
 * (ongoing transactions kept, Prepare states completed at start), the group hook, marker
 * retries.
 */
#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb_err.h"
#include "kb_apiversions.h"
#include "kb_meta_rec.h"
#include "kb_txn.h"
#include "kbat.h"
#include "kp_batch.h"
#include "kp_errcode.h"

static int64_t g_now = 1800000000000LL;

static int64_t test_clock(void *o)
{
    (void)o;
    return g_now;
}

/* A broker key for the group hook registry (the coordinator only compares the pointer). */
static const kb_broker_t *const g_fake_kb = (const kb_broker_t *)&g_now;

typedef struct env_s {
    char dir[512];
    kbat_broker_t b;
    kb_txn_t *c;
} env_t;

static const char *const g_kv[] = {"transaction.state.log.num.partitions=3",
                                   "transactional.id.expiration.ms=3600000",
                                   "offsets.topic.num.partitions=4", NULL};

static int32_t g_marker_timeout_ms;

static void coord_open(env_t *e)
{
    kb_txn_opts_t o;
    char err[256];
    memset(&o, 0, sizeof(o));
    o.svc = e->b.svc;
    o.kb = g_fake_kb;
    o.clock = test_clock;
    o.no_threads = true;
    o.marker_timeout_ms = g_marker_timeout_ms;
    e->c = kb_txn_new(&o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(e->c);
    CU_ASSERT_EQUAL(kb_txn_start(e->c), 0);
}

static void env_start(env_t *e, bool fresh)
{
    if (fresh)
        CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(e->dir, sizeof(e->dir)), 0);
    CU_ASSERT_EQUAL_FATAL(kbat_broker_start(&e->b, e->dir, g_kv), 0);
    coord_open(e);
}

static void env_stop(env_t *e, bool remove)
{
    kb_txn_free(e->c);
    e->c = NULL;
    kbat_broker_stop(&e->b);
    if (remove)
        kbat_rmrf(e->dir);
}

static void mk_topic(env_t *e, const char *name, int32_t parts)
{
    kb_topic_spec_t spec = {.name = name, .partitions = parts};
    char msg[256];
    CU_ASSERT_EQUAL_FATAL(
        kb_meta_create_topic(e->b.svc->meta, &spec, false, NULL, msg, sizeof(msg)), 0);
}

static kb_part_t *part_of(env_t *e, const char *topic, int32_t p)
{
    kb_part_t *part = NULL;
    CU_ASSERT_EQUAL_FATAL(kb_meta_part(e->b.svc->meta, topic, p, &part), KB_META_OK);
    return part;
}

/* Append @p n transactional records of @p pid / @p epoch to topic/p as Produce would (after
 * the verification hook). Returns the verification error or the storage result. */
static int produce(env_t *e, const char *txn, const char *topic, int32_t p, int64_t pid,
                   int16_t epoch, int32_t seq, int n)
{
    kp_writer_t w;
    kb_append_info_t info;
    kb_part_t *part;
    int16_t ec = kb_txn_produce_verify(e->c, txn, pid, epoch, topic, p, 11);
    int rc;
    if (ec)
        return ec;
    kp_writer_init(&w);
    kbat_batch(&w, KP_CODEC_NONE, n, "v", pid, epoch, seq, true, false);
    part = part_of(e, topic, p);
    rc = kb_log_append_leader(part->log, w.buf, w.len, kb_part_epoch(part), KB_ORIGIN_CLIENT, 0,
                              &info);
    if (rc == 0)
        kb_part_advance_hw(part);
    kb_part_release(part);
    kp_writer_free(&w);
    return rc;
}

static int64_t lso(env_t *e, const char *topic, int32_t p)
{
    kb_part_t *part = part_of(e, topic, p);
    int64_t v = kb_log_lso(part->log);
    kb_part_release(part);
    return v;
}

static int64_t leo(env_t *e, const char *topic, int32_t p)
{
    kb_part_t *part = part_of(e, topic, p);
    int64_t v = kb_log_leo(part->log);
    kb_part_release(part);
    return v;
}

static size_t aborted(env_t *e, const char *topic, int32_t p, int64_t *first)
{
    kb_part_t *part = part_of(e, topic, p);
    kb_aborted_txn_t *a = NULL;
    size_t n = 0;
    kb_log_aborted_txns(part->log, 0, kb_log_leo(part->log), &a, &n);
    if (n && first)
        *first = a[n - 1].first_offset;
    free(a);
    kb_part_release(part);
    return n;
}

static void producer_of(env_t *e, const char *topic, int32_t p, int64_t pid,
                        kb_producer_info_t *out)
{
    kb_part_t *part = part_of(e, topic, p);
    memset(out, 0, sizeof(*out));
    out->producer_epoch = -99;
    kb_log_producer_get(part->log, pid, out);
    kb_part_release(part);
}

static void state_of(env_t *e, const char *txn, kb_txnmeta_t *m, bool *pending)
{
    CU_ASSERT_EQUAL_FATAL(kb_txn_describe(e->c, txn, m, pending), 0);
}

static int16_t init_pid(env_t *e, const char *txn, int32_t timeout, int64_t *pid, int16_t *epoch)
{
    return kb_txn_init_producer_id(e->c, txn, timeout, -1, -1, pid, epoch);
}

static int16_t add1(env_t *e, const char *txn, int64_t pid, int16_t epoch, const char *topic,
                    int32_t p)
{
    kb_txn_tp_t tp = {(char *)topic, p};
    return kb_txn_add_partitions(e->c, txn, pid, epoch, &tp, 1, 0);
}

/* Apply a PartitionChangeRecord to partition @p p of @p topic as a remote controller's record
 * (kb_meta_apply_records): replicas {this node, 2}, the ISR given, leader @p leader (a new
 * leader epoch); the apply path makes the local partition leader or follower. */
static void change_leader(env_t *e, const char *topic, int32_t p, int32_t leader,
                          const int32_t *isr, int32_t nisr)
{
    kb_topic_info_t ti;
    kb_mrec_t r;
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    kp_writer_t out, val;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(kb_meta_topic_by_name(e->b.svc->meta, topic, &ti), 0);
    kb_mrec_init(&r, KB_MREC_PARTITION_CHANGE);
    r.topic_id = ti.id;
    r.partition = p;
    r.leader = leader;
    r.replicas = malloc(2 * sizeof(int32_t));
    r.isr = malloc((size_t)nisr * sizeof(int32_t));
    CU_ASSERT_FATAL(r.replicas && r.isr);
    r.replicas[0] = kb_meta_node_id(e->b.svc->meta);
    r.replicas[1] = 2;
    r.nreplicas = 2;
    memcpy(r.isr, isr, (size_t)nisr * sizeof(int32_t));
    r.nisr = nisr;
    kp_batch_opts_init(&o);
    o.baseOffset = kb_meta_offset(e->b.svc->meta) + 1;
    kp_batch_builder_init(&bb, &o);
    kp_writer_init(&val);
    kp_writer_init(&out);
    CU_ASSERT_EQUAL_FATAL(kb_mrec_encode(&r, &val), 0);
    CU_ASSERT_EQUAL_FATAL(kp_batch_builder_add(&bb, 1000, (kp_bytes_t){NULL, -1},
                                               (kp_bytes_t){val.buf, (int32_t)val.len}, NULL, 0),
                          0);
    CU_ASSERT_EQUAL_FATAL(kp_batch_builder_finish(&bb, &out), 0);
    CU_ASSERT_EQUAL_FATAL(kb_meta_apply_records(e->b.svc->meta, out.buf, out.len, err, sizeof(err)),
                          0);
    kb_mrec_clear(&r);
    kp_batch_builder_free(&bb);
    kp_writer_free(&val);
    kp_writer_free(&out);
}

/* Ownership follows the leadership of __transaction_state: a followed partition's ids answer
 * NOT_COORDINATOR (other partitions keep working); leadership back at a newer epoch reloads
 * them from the log with their ongoing transaction, and markers carry the new coordinator
 * epoch. */
static void test_ownership(void)
{
    env_t e;
    int64_t pid, pid2, rpid;
    int16_t epoch, epoch2, rep;
    int32_t p, self, reps[2], isr1[1];
    char other[32];
    kb_txnmeta_t m;
    kb_producer_info_t pi;
    kb_part_t *part;

    env_start(&e, true);
    mk_topic(&e, "t", 1);
    self = kb_meta_node_id(e.b.svc->meta);
    CU_ASSERT_EQUAL(init_pid(&e, "own-a", 60000, &pid, &epoch), KP_ERR_NONE);
    p = kb_txnlog_partition_for("own-a", 5, 3);
    for (int i = 0;; i++) {
        CU_ASSERT_FATAL(i < 100);
        snprintf(other, sizeof(other), "own-b%d", i);
        if (kb_txnlog_partition_for(other, strlen(other), 3) != p)
            break;
    }
    CU_ASSERT_EQUAL(init_pid(&e, other, 60000, &pid2, &epoch2), KP_ERR_NONE);
    CU_ASSERT_EQUAL(add1(&e, "own-a", pid, epoch, "t", 0), KP_ERR_NONE);
    CU_ASSERT_EQUAL(produce(&e, "own-a", "t", 0, pid, epoch, 0, 2), 0);

    reps[0] = self;
    reps[1] = 2;
    change_leader(&e, "__transaction_state", p, 2, reps, 2);
    kb_txn_tick(e.c);
    CU_ASSERT_EQUAL(init_pid(&e, "own-a", 60000, &rpid, &rep), KP_ERR_NOT_COORDINATOR);
    CU_ASSERT_EQUAL(add1(&e, "own-a", pid, epoch, "t", 0), KP_ERR_NOT_COORDINATOR);
    CU_ASSERT_EQUAL(kb_txn_describe(e.c, "own-a", &m, NULL), KP_ERR_NOT_COORDINATOR);
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "own-a", pid, epoch, true, false, &rpid, &rep),
                    KP_ERR_NOT_COORDINATOR);
    /* Produce's verification of an id another broker coordinates: accepted unverified (as a
     * Kafka leader without partition verification) */
    CU_ASSERT_EQUAL(kb_txn_produce_verify(e.c, "own-a", pid, epoch, "t", 0, 11), KP_ERR_NONE);
    /* the other partition is still coordinated here */
    CU_ASSERT_EQUAL(kb_txn_describe(e.c, other, &m, NULL), 0);
    kb_txnmeta_free(&m);

    isr1[0] = self;
    change_leader(&e, "__transaction_state", p, self, isr1, 1);
    kb_txn_tick(e.c);
    state_of(&e, "own-a", &m, NULL);
    CU_ASSERT_EQUAL(m.state, KB_TXN_ONGOING);
    CU_ASSERT_EQUAL(m.producer_id, pid);
    CU_ASSERT_EQUAL(m.producer_epoch, epoch);
    kb_txnmeta_free(&m);
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "own-a", pid, epoch, true, false, &rpid, &rep), KP_ERR_NONE);
    CU_ASSERT_EQUAL(lso(&e, "t", 0), leo(&e, "t", 0));
    /* the marker carries the coordinator epoch: the new leader epoch of the state partition */
    part = part_of(&e, "__transaction_state", p);
    producer_of(&e, "t", 0, pid, &pi);
    CU_ASSERT_EQUAL(pi.coordinator_epoch, kb_part_epoch(part));
    CU_ASSERT(kb_part_epoch(part) >= 2);
    kb_part_release(part);
    env_stop(&e, true);
}

/* Broker list of broker A for the marker test: itself and broker B (node 2) at g_b_port. */
static int g_b_port;

static int two_brokers(void *opaque, const char *listener, bool include_fenced,
                       kb_cluster_node_t **out, size_t *cnt, int32_t *controller_id)
{
    kb_cluster_node_t *v = calloc(2, sizeof(*v));
    (void)opaque;
    (void)listener;
    (void)include_fenced;
    if (!v)
        return -1;
    v[0].id = 1;
    snprintf(v[0].host, sizeof(v[0].host), "127.0.0.1");
    v[0].port = 1; /* never used: the coordinator does not send itself markers */
    v[1].id = 2;
    snprintf(v[1].host, sizeof(v[1].host), "127.0.0.1");
    v[1].port = g_b_port;
    *out = v;
    *cnt = 2;
    *controller_id = 1;
    return 0;
}

/* A marker of a partition led by another broker goes there in WriteTxnMarkers: broker A (node
 * 1) coordinates the transaction; t-0 is led by broker B (node 2), another in-process broker
 * whose transaction coordinator serves WriteTxnMarkers. The COMMIT marker lands in B's log with
 * A's coordinator epoch and releases B's LSO; while B is unreachable the marker is retried. */
static void test_remote_marker(void)
{
    static const char *const kv_b[] = {"node.id=2", NULL};
    env_t a;
    kbat_broker_t b;
    kb_txn_t *cb;
    kb_txn_opts_t o;
    char dir_b[512], err[256];
    int64_t pid, rpid;
    int16_t epoch, rep;
    int32_t reps[2] = {1, 2};
    kp_writer_t w;
    kb_append_info_t info;
    kb_part_t *pb;
    kb_producer_info_t pi;
    kb_topic_spec_t spec = {.name = "t", .partitions = 1};
    kb_topic_info_t ti;
    kb_txnmeta_t m;
    bool pending;

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir_b, sizeof(dir_b)), 0);
    CU_ASSERT_EQUAL_FATAL(kbat_broker_start(&b, dir_b, kv_b), 0);
    memset(&o, 0, sizeof(o));
    o.svc = b.svc;
    o.no_threads = true;
    cb = kb_txn_new(&o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(cb);
    CU_ASSERT_EQUAL_FATAL(kb_txn_register(cb, b.reg), 0);
    CU_ASSERT_EQUAL_FATAL(kb_apiversions_register(b.reg), 0); /* the client's handshake */
    CU_ASSERT_EQUAL_FATAL(kb_meta_create_topic(b.svc->meta, &spec, false, NULL, err, sizeof(err)),
                          0);
    g_b_port = b.port;

    g_marker_timeout_ms = 300; /* the unreachable broker below */
    env_start(&a, true);
    g_marker_timeout_ms = 0;
    kb_apisvc_set_cluster(a.b.svc, two_brokers, NULL);
    mk_topic(&a, "t", 1);
    CU_ASSERT_EQUAL_FATAL(kb_meta_topic_by_name(a.b.svc->meta, "t", &ti), 0);
    change_leader(&a, "t", 0, 2, reps, 2); /* A follows t-0, B leads it */
    CU_ASSERT_EQUAL(init_pid(&a, "rx", 60000, &pid, &epoch), KP_ERR_NONE);
    {
        /* AddPartitionsToTxn v3 through A's handler: a partition A only follows is fine */
        kp_AddPartitionsToTxnRequest_t rq;
        kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic_t t;
        kp_AddPartitionsToTxnResponse_t r;
        kp_arena_t ar;
        int32_t p0 = 0;
        int fd;
        CU_ASSERT_EQUAL_FATAL(kb_txn_register(a.c, a.b.reg), 0);
        kp_arena_init(&ar, 1 << 20);
        kp_AddPartitionsToTxnRequest_init(&rq);
        kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic_init(&t);
        t.Name = kp_str("t");
        t.Partitions.cnt = 1;
        t.Partitions.v = &p0;
        rq.V3AndBelowTransactionalId = kp_str("rx");
        rq.V3AndBelowProducerId = pid;
        rq.V3AndBelowProducerEpoch = epoch;
        rq.V3AndBelowTopics.cnt = 1;
        rq.V3AndBelowTopics.v = &t;
        fd = kbat_connect(a.b.port);
        CU_ASSERT_FATAL(fd >= 0);
        CU_ASSERT_EQUAL_FATAL(kbat_call(fd, KP_APIKEY_AddPartitionsToTxn, 3, &rq, &r, &ar), 0);
        CU_ASSERT_FATAL(r.ResultsByTopicV3AndBelow.cnt == 1 &&
                        r.ResultsByTopicV3AndBelow.v[0].ResultsByPartition.cnt == 1);
        CU_ASSERT_EQUAL(r.ResultsByTopicV3AndBelow.v[0].ResultsByPartition.v[0].PartitionErrorCode,
                        KP_ERR_NONE);
        close(fd);
        kp_arena_free(&ar);
        kb_txn_unregister(a.c);
    }
    /* the producer's records on B, the leader (B knows nothing of the transaction) */
    kp_writer_init(&w);
    kbat_batch(&w, KP_CODEC_NONE, 3, "v", pid, epoch, 0, true, false);
    CU_ASSERT_EQUAL_FATAL(kb_meta_part(b.svc->meta, "t", 0, &pb), KB_META_OK);
    CU_ASSERT_EQUAL_FATAL(kb_part_append_leader(pb, w.buf, w.len, KB_ORIGIN_CLIENT, 0, &info), 0);
    kp_writer_free(&w);
    CU_ASSERT(kb_log_lso(pb->log) < kb_log_leo(pb->log));

    CU_ASSERT_EQUAL(kb_txn_end(a.c, "rx", pid, epoch, true, false, &rpid, &rep), KP_ERR_NONE);
    state_of(&a, "rx", &m, &pending);
    CU_ASSERT_EQUAL(m.state, KB_TXN_COMPLETE_COMMIT);
    CU_ASSERT_FALSE(pending);
    kb_txnmeta_free(&m);
    CU_ASSERT_EQUAL(kb_log_lso(pb->log), kb_log_leo(pb->log));
    memset(&pi, 0, sizeof(pi));
    CU_ASSERT_EQUAL(kb_log_producer_get(pb->log, pid, &pi), 0);
    CU_ASSERT_EQUAL(pi.coordinator_epoch, 0);
    CU_ASSERT_EQUAL(pi.producer_epoch, epoch);

    /* B gone: the next transaction's marker waits in PrepareCommit and the timer retries it */
    CU_ASSERT_EQUAL(add1(&a, "rx", pid, epoch, "t", 0), KP_ERR_NONE);
    g_b_port = 1; /* nothing listens there */
    CU_ASSERT_EQUAL(kb_txn_end(a.c, "rx", pid, epoch, false, false, &rpid, &rep), KP_ERR_NONE);
    state_of(&a, "rx", &m, &pending);
    CU_ASSERT_EQUAL(m.state, KB_TXN_PREPARE_ABORT);
    CU_ASSERT_TRUE(pending);
    kb_txnmeta_free(&m);
    g_b_port = b.port; /* back: the timer delivers it */
    kb_txn_tick(a.c);
    state_of(&a, "rx", &m, &pending);
    CU_ASSERT_EQUAL(m.state, KB_TXN_COMPLETE_ABORT);
    CU_ASSERT_FALSE(pending);
    kb_txnmeta_free(&m);

    kb_part_release(pb);
    env_stop(&a, true);
    kb_txn_unregister(cb);
    kb_txn_free(cb);
    kbat_broker_stop(&b);
    kbat_rmrf(dir_b);
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_commit_abort_markers(void)
{
    env_t e;
    int64_t pid, pid2, rpid, first = -1;
    int16_t epoch, epoch2, rep;
    kb_txnmeta_t m;
    bool pending;
    kb_producer_info_t pi;

    env_start(&e, true);
    mk_topic(&e, "t", 2);
    CU_ASSERT_EQUAL(init_pid(&e, NULL, 0, &pid, &epoch), KP_ERR_NONE); /* idempotent */
    CU_ASSERT(pid >= 0 && epoch == 0);
    CU_ASSERT_EQUAL(kb_txn_count(e.c), 0);
    CU_ASSERT_EQUAL(init_pid(&e, "a", 60000, &pid, &epoch), KP_ERR_NONE);
    CU_ASSERT_EQUAL(init_pid(&e, "b", 60000, &pid2, &epoch2), KP_ERR_NONE);
    CU_ASSERT(pid2 != pid && epoch == 0);
    CU_ASSERT_EQUAL(kb_txn_count(e.c), 2);

    /* verification of Produce: what Kafka's partition leaders answer clients */
    /* not in the transaction: TRANSACTION_ABORTABLE for Produce v11+, INVALID_TXN_STATE below */
    CU_ASSERT_EQUAL(kb_txn_produce_verify(e.c, "a", pid, epoch, "t", 0, 3),
                    KP_ERR_INVALID_TXN_STATE);
    CU_ASSERT_EQUAL(kb_txn_produce_verify(e.c, "a", pid, epoch, "t", 0, 10),
                    KP_ERR_INVALID_TXN_STATE);
    CU_ASSERT_EQUAL(kb_txn_produce_verify(e.c, "a", pid, epoch, "t", 0, 11),
                    KP_ERR_TRANSACTION_ABORTABLE);
    CU_ASSERT_EQUAL(kb_txn_produce_verify(e.c, "a", pid, epoch, "t", 0, 13),
                    KP_ERR_TRANSACTION_ABORTABLE);
    CU_ASSERT_EQUAL(kb_txn_produce_verify(e.c, "zz", pid, epoch, "t", 0, 10),
                    KP_ERR_INVALID_PRODUCER_ID_MAPPING);
    CU_ASSERT_EQUAL(kb_txn_produce_verify(e.c, "zz", pid, epoch, "t", 0, 11),
                    KP_ERR_INVALID_PRODUCER_ID_MAPPING);
    CU_ASSERT_EQUAL(add1(&e, "a", pid, epoch, "t", 0), KP_ERR_NONE);
    CU_ASSERT_EQUAL(add1(&e, "a", pid, epoch, "t", 1), KP_ERR_NONE);
    /* fenced: INVALID_PRODUCER_EPOCH for every version */
    CU_ASSERT_EQUAL(kb_txn_produce_verify(e.c, "a", pid, (int16_t)(epoch + 1), "t", 0, 10),
                    KP_ERR_INVALID_PRODUCER_EPOCH);
    CU_ASSERT_EQUAL(kb_txn_produce_verify(e.c, "a", pid, (int16_t)(epoch + 1), "t", 0, 11),
                    KP_ERR_INVALID_PRODUCER_EPOCH);
    CU_ASSERT_EQUAL(produce(&e, "a", "t", 0, pid, epoch, 0, 3), 0);
    CU_ASSERT_EQUAL(produce(&e, "a", "t", 1, pid, epoch, 0, 2), 0);
    CU_ASSERT_EQUAL(lso(&e, "t", 0), 0);
    CU_ASSERT_EQUAL(lso(&e, "t", 1), 0);

    /* commit: a COMMIT marker on both partitions, LSO past it */
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "a", pid, epoch, true, false, &rpid, &rep), KP_ERR_NONE);
    CU_ASSERT(rpid == pid && rep == epoch);
    CU_ASSERT_EQUAL(leo(&e, "t", 0), 4);
    CU_ASSERT_EQUAL(lso(&e, "t", 0), 4);
    CU_ASSERT_EQUAL(lso(&e, "t", 1), 3);
    CU_ASSERT_EQUAL(aborted(&e, "t", 0, NULL), 0);
    producer_of(&e, "t", 0, pid, &pi);
    CU_ASSERT(pi.producer_epoch == epoch && pi.txn_first_offset == -1);
    state_of(&e, "a", &m, &pending);
    CU_ASSERT(m.state == KB_TXN_COMPLETE_COMMIT && !pending && m.tps.cnt == 0);
    kb_txnmeta_free(&m);

    /* abort: an ABORT marker and an aborted-transaction index entry */
    CU_ASSERT_EQUAL(add1(&e, "a", pid, epoch, "t", 0), KP_ERR_NONE);
    CU_ASSERT_EQUAL(produce(&e, "a", "t", 0, pid, epoch, 3, 2), 0);
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "a", pid, epoch, false, false, &rpid, &rep), KP_ERR_NONE);
    CU_ASSERT_EQUAL(lso(&e, "t", 0), 7);
    CU_ASSERT_EQUAL(aborted(&e, "t", 0, &first), 1);
    CU_ASSERT_EQUAL(first, 4);
    CU_ASSERT_EQUAL(leo(&e, "t", 1), 3); /* not in this transaction */

    /* interleaved transactions of two producers */
    CU_ASSERT_EQUAL(add1(&e, "a", pid, epoch, "t", 1), KP_ERR_NONE);
    CU_ASSERT_EQUAL(add1(&e, "b", pid2, epoch2, "t", 1), KP_ERR_NONE);
    CU_ASSERT_EQUAL(produce(&e, "a", "t", 1, pid, epoch, 2, 1), 0);   /* offset 3 */
    CU_ASSERT_EQUAL(produce(&e, "b", "t", 1, pid2, epoch2, 0, 1), 0); /* offset 4 */
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "b", pid2, epoch2, true, false, &rpid, &rep), KP_ERR_NONE);
    CU_ASSERT_EQUAL(lso(&e, "t", 1), 3); /* still held by a */
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "a", pid, epoch, false, false, &rpid, &rep), KP_ERR_NONE);
    CU_ASSERT_EQUAL(lso(&e, "t", 1), leo(&e, "t", 1));
    CU_ASSERT_EQUAL(aborted(&e, "t", 1, &first), 1);
    CU_ASSERT_EQUAL(first, 3);

    /* TV2: EndTxn v5 bumps the epoch, markers carry it */
    CU_ASSERT_EQUAL(add1(&e, "b", pid2, epoch2, "t", 0), KP_ERR_NONE);
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "b", pid2, epoch2, true, true, &rpid, &rep), KP_ERR_NONE);
    CU_ASSERT(rpid == pid2 && rep == epoch2 + 1);
    producer_of(&e, "t", 0, pid2, &pi);
    CU_ASSERT_EQUAL(pi.producer_epoch, epoch2 + 1);
    env_stop(&e, true);
}

static void test_fence_and_timeout(void)
{
    env_t e;
    int64_t pid, pid2, rpid;
    int16_t epoch, epoch2, rep;
    kb_txnmeta_t m;
    kb_producer_info_t pi;

    env_start(&e, true);
    mk_topic(&e, "t", 1);
    /* a second instance fences the first and aborts its transaction */
    CU_ASSERT_EQUAL(init_pid(&e, "f", 60000, &pid, &epoch), KP_ERR_NONE);
    CU_ASSERT_EQUAL(add1(&e, "f", pid, epoch, "t", 0), KP_ERR_NONE);
    CU_ASSERT_EQUAL(produce(&e, "f", "t", 0, pid, epoch, 0, 2), 0);
    CU_ASSERT_EQUAL(init_pid(&e, "f", 60000, &pid2, &epoch2), KP_ERR_CONCURRENT_TRANSACTIONS);
    state_of(&e, "f", &m, NULL);
    CU_ASSERT(m.state == KB_TXN_COMPLETE_ABORT && m.producer_epoch == epoch + 1);
    kb_txnmeta_free(&m);
    producer_of(&e, "t", 0, pid, &pi);
    CU_ASSERT(pi.producer_epoch == epoch + 1 && pi.txn_first_offset == -1);
    CU_ASSERT_EQUAL(lso(&e, "t", 0), 3);
    CU_ASSERT_EQUAL(aborted(&e, "t", 0, NULL), 1);
    CU_ASSERT_EQUAL(init_pid(&e, "f", 60000, &pid2, &epoch2), KP_ERR_NONE);
    CU_ASSERT(pid2 == pid && epoch2 == epoch + 2);
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "f", pid, epoch, true, false, &rpid, &rep),
                    KP_ERR_PRODUCER_FENCED);
    CU_ASSERT_EQUAL(produce(&e, "f", "t", 0, pid, epoch, 2, 1), KP_ERR_INVALID_PRODUCER_EPOCH);

    /* the timeout: aborted by the timer with a fencing epoch */
    CU_ASSERT_EQUAL(init_pid(&e, "to", 1000, &pid, &epoch), KP_ERR_NONE);
    CU_ASSERT_EQUAL(add1(&e, "to", pid, epoch, "t", 0), KP_ERR_NONE);
    CU_ASSERT_EQUAL(produce(&e, "to", "t", 0, pid, epoch, 0, 1), 0);
    g_now += 1000;
    kb_txn_tick(e.c); /* start + timeout == now: not yet */
    state_of(&e, "to", &m, NULL);
    CU_ASSERT_EQUAL(m.state, KB_TXN_ONGOING);
    kb_txnmeta_free(&m);
    g_now += 1;
    kb_txn_tick(e.c);
    state_of(&e, "to", &m, NULL);
    CU_ASSERT(m.state == KB_TXN_COMPLETE_ABORT && m.producer_epoch == epoch + 1);
    kb_txnmeta_free(&m);
    CU_ASSERT_EQUAL(lso(&e, "t", 0), leo(&e, "t", 0));
    CU_ASSERT_EQUAL(aborted(&e, "t", 0, NULL), 2);
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "to", pid, epoch, true, false, &rpid, &rep),
                    KP_ERR_PRODUCER_FENCED);
    CU_ASSERT_EQUAL(add1(&e, "to", pid, epoch, "t", 0), KP_ERR_PRODUCER_FENCED);

    /* limits */
    CU_ASSERT_EQUAL(init_pid(&e, "to", 900001, &pid, &epoch), KP_ERR_INVALID_TRANSACTION_TIMEOUT);
    CU_ASSERT_EQUAL(init_pid(&e, "", 1000, &pid, &epoch), KP_ERR_INVALID_REQUEST);
    env_stop(&e, true);
}

/* Write a record for @p txn to its __transaction_state partition behind the coordinator's
 * back (what a crash after the Prepare record leaves). */
static void write_raw_state(env_t *e, const char *txn, const kb_txnmeta_t *m)
{
    kp_writer_t kw, vw, bw;
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    kb_txnlog_value_t v;
    kb_append_info_t info;
    kb_part_t *part;
    kp_writer_init(&kw);
    kp_writer_init(&vw);
    kp_writer_init(&bw);
    kb_txnlog_key_encode(&kw, txn, strlen(txn));
    kb_txnmeta_to_value(m, &v);
    kb_txnlog_value_encode(&vw, &v, 1);
    kp_batch_opts_init(&o);
    kp_batch_builder_init(&bb, &o);
    kp_batch_builder_add(&bb, g_now, (kp_bytes_t){kw.buf, (int32_t)kw.len},
                         (kp_bytes_t){vw.buf, (int32_t)vw.len}, NULL, 0);
    CU_ASSERT_EQUAL_FATAL(kp_batch_builder_finish(&bb, &bw), 0);
    part = part_of(e, KB_TOPIC_TRANSACTION_STATE, kb_txnlog_partition_for(txn, strlen(txn), 3));
    CU_ASSERT_EQUAL(kb_log_append_leader(part->log, bw.buf, bw.len, kb_part_epoch(part),
                                         KB_ORIGIN_COORDINATOR, 0, &info),
                    0);
    kb_part_advance_hw(part);
    kb_part_release(part);
    kp_batch_builder_free(&bb);
    kp_writer_free(&kw);
    kp_writer_free(&vw);
    kp_writer_free(&bw);
}

static void test_reload(void)
{
    env_t e;
    int64_t pa, pb, pc, pd, rpid;
    int16_t ea, eb, ec_, ed, rep;
    kb_txnmeta_t m;
    bool pending;
    kb_producer_info_t pi;

    env_start(&e, true);
    mk_topic(&e, "t", 2);
    /* a: committed; b: ongoing; c: prepared (crash before the markers); d: expires */
    CU_ASSERT_EQUAL(init_pid(&e, "a", 60000, &pa, &ea), KP_ERR_NONE);
    CU_ASSERT_EQUAL(add1(&e, "a", pa, ea, "t", 0), KP_ERR_NONE);
    CU_ASSERT_EQUAL(produce(&e, "a", "t", 0, pa, ea, 0, 1), 0);
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "a", pa, ea, true, false, &rpid, &rep), KP_ERR_NONE);
    CU_ASSERT_EQUAL(init_pid(&e, "b", 5000, &pb, &eb), KP_ERR_NONE);
    CU_ASSERT_EQUAL(add1(&e, "b", pb, eb, "t", 1), KP_ERR_NONE);
    CU_ASSERT_EQUAL(produce(&e, "b", "t", 1, pb, eb, 0, 2), 0);
    CU_ASSERT_EQUAL(init_pid(&e, "c", 60000, &pc, &ec_), KP_ERR_NONE);
    CU_ASSERT_EQUAL(add1(&e, "c", pc, ec_, "t", 0), KP_ERR_NONE);
    CU_ASSERT_EQUAL(produce(&e, "c", "t", 0, pc, ec_, 0, 2), 0);
    state_of(&e, "c", &m, NULL);
    m.state = KB_TXN_PREPARE_COMMIT;
    write_raw_state(&e, "c", &m);
    kb_txnmeta_free(&m);
    CU_ASSERT_EQUAL(init_pid(&e, "d", 60000, &pd, &ed), KP_ERR_NONE);
    CU_ASSERT_EQUAL(lso(&e, "t", 0), 2); /* held by c */

    /* restart the broker (service, logs, coordinator) */
    env_stop(&e, false);
    g_now += 1000;
    env_start(&e, false);
    CU_ASSERT_EQUAL(kb_txn_count(e.c), 4);
    state_of(&e, "a", &m, &pending);
    CU_ASSERT(m.state == KB_TXN_COMPLETE_COMMIT && m.producer_id == pa && !pending);
    kb_txnmeta_free(&m);
    state_of(&e, "b", &m, &pending);
    CU_ASSERT(m.state == KB_TXN_ONGOING && m.tps.cnt == 1 && m.timeout_ms == 5000);
    kb_txnmeta_free(&m);
    /* c was completed at start: COMMIT marker, LSO released */
    state_of(&e, "c", &m, &pending);
    CU_ASSERT(m.state == KB_TXN_COMPLETE_COMMIT && !pending);
    kb_txnmeta_free(&m);
    CU_ASSERT_EQUAL(lso(&e, "t", 0), leo(&e, "t", 0));
    producer_of(&e, "t", 0, pc, &pi);
    CU_ASSERT_EQUAL(pi.txn_first_offset, -1);
    /* b goes on after the restart, then times out */
    CU_ASSERT_EQUAL(kb_txn_produce_verify(e.c, "b", pb, eb, "t", 1, 11), KP_ERR_NONE);
    CU_ASSERT_EQUAL(lso(&e, "t", 1), 0);
    g_now += 5000;
    kb_txn_tick(e.c);
    state_of(&e, "b", &m, NULL);
    CU_ASSERT(m.state == KB_TXN_COMPLETE_ABORT && m.producer_epoch == eb + 1);
    kb_txnmeta_free(&m);
    CU_ASSERT_EQUAL(lso(&e, "t", 1), leo(&e, "t", 1));

    /* expiration: a, c, d unused for transactional.id.expiration.ms; b was just updated */
    g_now += 3600000 - 5000;
    kb_txn_tick(e.c);
    CU_ASSERT_EQUAL(kb_txn_count(e.c), 1);
    CU_ASSERT_EQUAL(kb_txn_describe(e.c, "a", &m, NULL), KB_E_NOT_FOUND);
    env_stop(&e, false);
    env_start(&e, false); /* the tombstones survive a reload */
    CU_ASSERT_EQUAL(kb_txn_count(e.c), 1);
    CU_ASSERT_EQUAL(kb_txn_describe(e.c, "d", &m, NULL), KB_E_NOT_FOUND);
    /* an expired id starts afresh with a new producer id */
    CU_ASSERT_EQUAL(init_pid(&e, "a", 60000, &rpid, &rep), KP_ERR_NONE);
    CU_ASSERT(rpid != pa && rep == 0);
    env_stop(&e, true);
}

/* ---- the group hook -------------------------------------------------------------------------- */

typedef struct fake_group_s {
    int commits, markers, fail_markers;
    int32_t last_partition;
    bool last_commit;
    int64_t last_pid;
    int16_t last_epoch;
    bool write_marker; /* do what the group coordinator does: append the marker */
    env_t *e;
} fake_group_t;

static fake_group_t g_fg;

static int16_t fg_commit(void *o, kb_reqctx_t *ctx, int32_t partition,
                         const kp_TxnOffsetCommitRequest_t *rq, kp_TxnOffsetCommitResponse_t *resp)
{
    fake_group_t *g = o;
    (void)ctx;
    (void)rq;
    g->commits++;
    g->last_partition = partition;
    if (resp->Topics.cnt > 0 && resp->Topics.v[0].Partitions.cnt > 0)
        resp->Topics.v[0].Partitions.v[0].ErrorCode = KP_ERR_UNKNOWN_MEMBER_ID;
    return 0;
}

static int16_t fg_marker(void *o, int32_t partition, int64_t pid, int16_t epoch,
                         int32_t coord_epoch, bool commit)
{
    fake_group_t *g = o;
    g->markers++;
    g->last_partition = partition;
    g->last_pid = pid;
    g->last_epoch = epoch;
    g->last_commit = commit;
    if (g->fail_markers > 0) {
        g->fail_markers--;
        return KP_ERR_COORDINATOR_LOAD_IN_PROGRESS;
    }
    if (g->write_marker) {
        kb_part_t *part = part_of(g->e, KB_TOPIC_CONSUMER_OFFSETS, partition);
        kb_append_info_t info;
        int rc =
            kb_part_append_control(part, commit ? KP_CONTROL_TYPE_COMMIT : KP_CONTROL_TYPE_ABORT,
                                   pid, epoch, coord_epoch, kb_part_epoch(part), &info);
        kb_part_release(part);
        return rc ? KP_ERR_KAFKA_STORAGE_ERROR : 0;
    }
    return 0;
}

static void txn_offset_commit(env_t *e, const char *txn, int64_t pid, int16_t epoch,
                              const char *group, bool implicit, int16_t *ec, int16_t *perr)
{
    kp_TxnOffsetCommitRequest_t rq;
    kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestTopic_t t;
    kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestPartition_t p;
    kp_TxnOffsetCommitResponse_t resp;
    kp_TxnOffsetCommitResponse_TxnOffsetCommitResponseTopic_t rt;
    kp_TxnOffsetCommitResponse_TxnOffsetCommitResponsePartition_t rp;
    kp_TxnOffsetCommitRequest_init(&rq);
    kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestTopic_init(&t);
    kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestPartition_init(&p);
    kp_TxnOffsetCommitResponse_init(&resp);
    kp_TxnOffsetCommitResponse_TxnOffsetCommitResponseTopic_init(&rt);
    kp_TxnOffsetCommitResponse_TxnOffsetCommitResponsePartition_init(&rp);
    rq.TransactionalId = (kp_str_t){txn, (int32_t)strlen(txn)};
    rq.GroupId = (kp_str_t){group, (int32_t)strlen(group)};
    rq.ProducerId = pid;
    rq.ProducerEpoch = epoch;
    t.Name = (kp_str_t){"t", 1};
    p.PartitionIndex = 0;
    p.CommittedOffset = 5;
    t.Partitions.v = &p;
    t.Partitions.cnt = 1;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    rt.Partitions.v = &rp;
    rt.Partitions.cnt = 1;
    resp.Topics.v = &rt;
    resp.Topics.cnt = 1;
    *ec = kb_txn_offset_commit(e->c, NULL, &rq, &resp, implicit);
    *perr = rp.ErrorCode;
}

static void test_group_hook(void)
{
    env_t e;
    int64_t pid, rpid;
    int16_t epoch, rep, ec, perr;
    kb_txnmeta_t m;
    bool pending;
    kb_txn_group_hook_t hook = {.txn_offset_commit = fg_commit, .txn_marker = fg_marker};
    int32_t gp;

    env_start(&e, true);
    mk_topic(&e, "t", 1);
    memset(&g_fg, 0, sizeof(g_fg));
    g_fg.e = &e;
    CU_ASSERT_EQUAL(init_pid(&e, "g", 60000, &pid, &epoch), KP_ERR_NONE);

    /* no hook: TxnOffsetCommit cannot be served */
    CU_ASSERT_EQUAL(kb_txn_add_offsets(e.c, "g", pid, epoch, "grp"), KP_ERR_NONE);
    txn_offset_commit(&e, "g", pid, epoch, "grp", false, &ec, &perr);
    CU_ASSERT_EQUAL(ec, KP_ERR_COORDINATOR_NOT_AVAILABLE);
    /* ... and the coordinator writes the __consumer_offsets marker itself (the topic exists:
     * created by kb_meta_ensure_internal_topic as the handler does) */
    CU_ASSERT_EQUAL(kb_meta_ensure_internal_topic(e.b.svc->meta, KB_TOPIC_CONSUMER_OFFSETS, NULL),
                    0);
    gp = kb_txn_offsets_partition(e.c, "grp");
    CU_ASSERT_EQUAL(gp, kb_txnlog_partition_for("grp", 3, 4));
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "g", pid, epoch, false, false, &rpid, &rep), KP_ERR_NONE);
    CU_ASSERT_EQUAL(leo(&e, KB_TOPIC_CONSUMER_OFFSETS, gp), 1);

    /* with the hook */
    CU_ASSERT_EQUAL(kb_txn_group_hook_install(g_fake_kb, &hook, &g_fg), 0);
    txn_offset_commit(&e, "g", pid, epoch, "grp", false, &ec, &perr);
    CU_ASSERT_EQUAL(ec, KP_ERR_TRANSACTION_ABORTABLE); /* the offsets partition is not added */
    CU_ASSERT_EQUAL(g_fg.commits, 0);
    CU_ASSERT_EQUAL(kb_txn_add_offsets(e.c, "g", pid, epoch, "grp"), KP_ERR_NONE);
    txn_offset_commit(&e, "g", pid, (int16_t)(epoch + 1), "grp", false, &ec, &perr);
    CU_ASSERT_EQUAL(ec, KP_ERR_PRODUCER_FENCED);
    txn_offset_commit(&e, "g", pid, epoch, "grp", false, &ec, &perr);
    CU_ASSERT(ec == 0 && perr == KP_ERR_UNKNOWN_MEMBER_ID && g_fg.commits == 1 &&
              g_fg.last_partition == gp);
    CU_ASSERT_EQUAL(add1(&e, "g", pid, epoch, "t", 0), KP_ERR_NONE);

    /* the group coordinator cannot take the marker yet: the transaction stays prepared */
    g_fg.fail_markers = 2;
    g_fg.write_marker = true;
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "g", pid, epoch, true, false, &rpid, &rep), KP_ERR_NONE);
    state_of(&e, "g", &m, &pending);
    CU_ASSERT(m.state == KB_TXN_PREPARE_COMMIT && pending);
    kb_txnmeta_free(&m);
    CU_ASSERT_EQUAL(leo(&e, "t", 0), 1); /* the data partition got its marker already */
    CU_ASSERT_EQUAL(init_pid(&e, "g", 60000, &rpid, &rep), KP_ERR_CONCURRENT_TRANSACTIONS);
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "g", pid, epoch, true, false, &rpid, &rep),
                    KP_ERR_CONCURRENT_TRANSACTIONS);
    kb_txn_tick(e.c); /* fails once more */
    kb_txn_tick(e.c);
    state_of(&e, "g", &m, &pending);
    CU_ASSERT(m.state == KB_TXN_COMPLETE_COMMIT && !pending);
    kb_txnmeta_free(&m);
    CU_ASSERT(g_fg.markers == 3 && g_fg.last_commit && g_fg.last_pid == pid &&
              g_fg.last_epoch == epoch && g_fg.last_partition == gp);
    CU_ASSERT_EQUAL(leo(&e, "t", 0), 1); /* not written twice */
    CU_ASSERT_EQUAL(leo(&e, KB_TOPIC_CONSUMER_OFFSETS, gp), 2);

    /* WriteTxnMarkers for __consumer_offsets goes through the hook too */
    CU_ASSERT_EQUAL(kb_txn_write_marker(e.c, KB_TOPIC_CONSUMER_OFFSETS, gp, pid, epoch, 0, false),
                    0);
    CU_ASSERT_EQUAL(g_fg.markers, 4);
    CU_ASSERT_EQUAL(kb_txn_write_marker(e.c, "nope", 0, pid, epoch, 0, false),
                    KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);

    /* TxnOffsetCommit v5+ (transaction version 2) adds the offsets partition itself */
    CU_ASSERT_EQUAL(init_pid(&e, "g2", 60000, &pid, &epoch), KP_ERR_NONE);
    txn_offset_commit(&e, "g2", pid, epoch, "grp", true, &ec, &perr);
    CU_ASSERT(ec == 0 && g_fg.commits == 2);
    state_of(&e, "g2", &m, &pending);
    CU_ASSERT(m.state == KB_TXN_ONGOING && m.tps.cnt == 1 && m.client_tv == 2 &&
              kb_txn_tpset_has(&m.tps, KB_TOPIC_CONSUMER_OFFSETS, gp));
    kb_txnmeta_free(&m);
    txn_offset_commit(&e, "g2", pid, (int16_t)(epoch + 1), "grp", true, &ec, &perr);
    CU_ASSERT_EQUAL(ec, KP_ERR_PRODUCER_FENCED);
    CU_ASSERT_EQUAL(kb_txn_end(e.c, "g2", pid, epoch, true, true, &rpid, &rep), KP_ERR_NONE);
    CU_ASSERT(g_fg.markers == 5 && g_fg.last_commit && g_fg.last_epoch == epoch + 1);
    {
        /* the transaction coordinator of "g" moves to broker 2: this node, still the group
         * coordinator, takes TxnOffsetCommit v0-4 unverified and refuses the v5+ form (the
         * implicit add needs the transaction coordinator) */
        int32_t reps[2] = {kb_meta_node_id(e.b.svc->meta), 2};
        int commits = g_fg.commits;
        change_leader(&e, KB_TOPIC_TRANSACTION_STATE, kb_txnlog_partition_for("g", 1, 3), 2, reps,
                      2);
        kb_txn_tick(e.c);
        txn_offset_commit(&e, "g", pid, epoch, "grp", false, &ec, &perr);
        CU_ASSERT(ec == 0 && g_fg.commits == commits + 1);
        txn_offset_commit(&e, "g", pid, epoch, "grp", true, &ec, &perr);
        CU_ASSERT_EQUAL(ec, KP_ERR_NOT_COORDINATOR);
        CU_ASSERT_EQUAL(g_fg.commits, commits + 1);
    }
    kb_txn_group_hook_remove(g_fake_kb);
    env_stop(&e, true);
}

int main(void)
{
    CU_pSuite s;
    unsigned fails;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("broker_txn_coord", NULL, NULL);
    CU_add_test(s, "commit/abort markers, LSO, aborted index, interleaving, TV2 epochs",
                test_commit_abort_markers);
    CU_add_test(s, "fencing by a new instance, timeout abort with the fencing epoch",
                test_fence_and_timeout);
    CU_add_test(s, "reload: ongoing kept, prepared completed, timeout after restart, expiry",
                test_reload);
    CU_add_test(s, "ownership follows the leadership of __transaction_state", test_ownership);
    CU_add_test(s, "markers of partitions led by another broker: WriteTxnMarkers",
                test_remote_marker);
    CU_add_test(s, "group hook: TxnOffsetCommit, __consumer_offsets markers, retries",
                test_group_hook);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
