/*
 * test_repl.c -- CUnit tests of the partition-level replication of kbroker (docs/design.md C4):
 * a leader with replicas {1,2,3} driven by replica Fetch requests through the generated codec
 * (HW rule, acks=all delayed produce, timeouts, min.insync.replicas, ISR shrink after
 * replica.lag.time.max.ms and expansion on catch-up through the proposal callback, pending ISR
 * and the maximal-ISR HW, fetch errors for non-replicas and stale epochs, leadership loss while a
 * produce waits), and a follower fed with the batches of a second in-process broker's Fetch
 * responses (segment bytes identical, truncation and re-fetch converge). Label: unit. Waiting is
 * by poll() and condition polling with deadlines only.
 */
#include <CUnit/Basic.h>
#include <stdatomic.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb_apisvc.h"
#include "kb_err.h"
#include "kb_meta.h"
#include "kb_part.h"
#include "kbat.h"
#include "kp_batch.h"
#include "kp_errcode.h"

#define LAG_MS 300

static kp_str_t S(const char *s)
{
    return (kp_str_t){s, s ? (int32_t)strlen(s) : -1};
}

/* ---- a broker with one connection ------------------------------------------------------------ */

typedef struct node_s {
    char dir[512];
    kbat_broker_t b;
    int fd;  /* replica fetches (one connection per follower in Kafka; order is per connection) */
    int pfd; /* produce requests */
    kp_arena_t ar;
} node_t;

static void node_up(node_t *n, int32_t id)
{
    char idkv[32], lag[64];
    const char *kv[] = {idkv, lag, NULL};
    snprintf(idkv, sizeof(idkv), "node.id=%d", (int)id);
    snprintf(lag, sizeof(lag), "replica.lag.time.max.ms=%d", LAG_MS);
    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(n->dir, sizeof(n->dir)), 0);
    CU_ASSERT_EQUAL_FATAL(kbat_broker_start(&n->b, n->dir, kv), 0);
    n->fd = kbat_connect(n->b.port);
    n->pfd = kbat_connect(n->b.port);
    CU_ASSERT_FATAL(n->fd >= 0 && n->pfd >= 0);
    kp_arena_init(&n->ar, 0);
}

static void node_down(node_t *n)
{
    if (n->fd >= 0)
        close(n->fd);
    if (n->pfd >= 0)
        close(n->pfd);
    n->fd = n->pfd = -1;
    kbat_broker_stop(&n->b);
    kp_arena_free(&n->ar);
    kbat_rmrf(n->dir);
}

static kb_part_t *node_part(node_t *n, const char *topic)
{
    kb_part_t *part = NULL;
    CU_ASSERT_EQUAL_FATAL(kb_meta_part(n->b.svc->meta, topic, 0, &part), KB_META_OK);
    return part;
}

/* ---- ISR proposals recorded by the callback ------------------------------------------------ */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_nprop;
static int32_t g_prop[8];
static size_t g_prop_n;
static int32_t g_prop_pe;

static void isr_cb(void *opaque, kb_part_t *part, int32_t leader_epoch, int32_t partition_epoch,
                   const int32_t *isr, size_t n)
{
    (void)opaque;
    (void)part;
    (void)leader_epoch;
    pthread_mutex_lock(&g_mu);
    g_nprop++;
    g_prop_n = n < 8 ? n : 8;
    memcpy(g_prop, isr, g_prop_n * sizeof(*isr));
    g_prop_pe = partition_epoch;
    pthread_mutex_unlock(&g_mu);
}

static int nprop(void)
{
    int n;
    pthread_mutex_lock(&g_mu);
    n = g_nprop;
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* Wait (deadline, polling) for proposal number @p want; true with it in g_prop. */
static bool wait_prop(int want, int ms)
{
    int64_t end = kbat_now_ms() + ms;
    while (kbat_now_ms() < end) {
        if (nprop() >= want)
            return true;
        poll(NULL, 0, 5);
    }
    return nprop() >= want;
}

static bool prop_is(const int32_t *ids, size_t n)
{
    bool ok;
    pthread_mutex_lock(&g_mu);
    ok = g_prop_n == n && !memcmp(g_prop, ids, n * sizeof(*ids));
    pthread_mutex_unlock(&g_mu);
    return ok;
}

/* ---- requests -------------------------------------------------------------------------------- */

typedef struct rfetch_s {
    int16_t err;
    int64_t hw, log_start;
    kp_bytes_t records;
    int32_t div_epoch;
    int64_t div_end;
    int32_t cur_leader, cur_leader_epoch; /* CurrentLeader (v12+) */
} rfetch_t;

/* Send a replica fetch of @p topic-0 at @p offset by @p replica (v12: ReplicaId, v15+:
 * ReplicaState) on @p fd, waiting up to @p max_wait for one byte. */
static void rfetch_send(node_t *n, int fd, int16_t ver, int32_t replica, const char *topic,
                        int64_t offset, int32_t cur_epoch, int32_t last_epoch, int32_t max_wait,
                        int32_t corr)
{
    kp_FetchRequest_t rq;
    kp_FetchRequest_FetchTopic_t t;
    kp_FetchRequest_FetchPartition_t p;
    kp_FetchRequest_init(&rq);
    kp_FetchRequest_FetchTopic_init(&t);
    kp_FetchRequest_FetchPartition_init(&p);
    if (ver >= 15)
        rq.ReplicaState.ReplicaId = replica;
    else
        rq.ReplicaId = replica;
    rq.MaxWaitMs = max_wait;
    rq.MinBytes = 1;
    rq.MaxBytes = 1 << 20;
    rq.SessionEpoch = -1;
    t.Topic = S(topic);
    if (ver >= 13) {
        kb_topic_info_t ti;
        CU_ASSERT_EQUAL_FATAL(kb_meta_topic_by_name(n->b.svc->meta, topic, &ti), 0);
        t.TopicId = ti.id;
        t.Topic = (kp_str_t){NULL, 0};
    }
    p.Partition = 0;
    p.FetchOffset = offset;
    p.PartitionMaxBytes = 1 << 20;
    p.CurrentLeaderEpoch = cur_epoch;
    p.LastFetchedEpoch = last_epoch;
    p.LogStartOffset = 0;
    t.Partitions.v = &p;
    t.Partitions.cnt = 1;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    CU_ASSERT_EQUAL_FATAL(kbat_send(fd, KP_APIKEY_Fetch, ver, corr, NULL, &rq), 0);
}

/* The answer of rfetch_send() (err -2: none within @p ms). */
static rfetch_t rfetch_recv(node_t *n, int fd, int16_t ver, int32_t corr, int ms)
{
    kp_FetchResponse_t resp;
    rfetch_t r = {.err = -100, .hw = -1, .div_epoch = -1};
    int rc;
    kp_FetchResponse_init(&resp);
    rc = kbat_recv(fd, KP_APIKEY_Fetch, ver, corr, &resp, &n->ar, ms);
    if (rc != 0) {
        r.err = (int16_t)(rc == -2 ? -2 : -100);
        return r;
    }
    if (resp.Responses.cnt == 1 && resp.Responses.v[0].Partitions.cnt == 1) {
        kp_FetchResponse_PartitionData_t *pd = &resp.Responses.v[0].Partitions.v[0];
        r.err = pd->ErrorCode;
        r.hw = pd->HighWatermark;
        r.log_start = pd->LogStartOffset;
        r.records = pd->Records;
        r.div_epoch = pd->DivergingEpoch.Epoch;
        r.div_end = pd->DivergingEpoch.EndOffset;
        r.cur_leader = pd->CurrentLeader.LeaderId;
        r.cur_leader_epoch = pd->CurrentLeader.LeaderEpoch;
    }
    return r;
}

static rfetch_t replica_fetch(node_t *n, int16_t ver, int32_t replica, const char *topic,
                              int64_t offset, int32_t cur_epoch, int32_t last_epoch)
{
    static int32_t corr = 5000;
    rfetch_send(n, n->fd, ver, replica, topic, offset, cur_epoch, last_epoch, 0, ++corr);
    return rfetch_recv(n, n->fd, ver, corr, KBAT_WAIT_MS);
}

static void produce_req(kp_ProduceRequest_t *rq, kp_ProduceRequest_TopicProduceData_t *td,
                        kp_ProduceRequest_PartitionProduceData_t *pd, const char *topic,
                        int16_t acks, int32_t timeout_ms, const kp_writer_t *batch)
{
    kp_ProduceRequest_init(rq);
    kp_ProduceRequest_TopicProduceData_init(td);
    kp_ProduceRequest_PartitionProduceData_init(pd);
    rq->Acks = acks;
    rq->TimeoutMs = timeout_ms;
    td->Name = S(topic);
    pd->Index = 0;
    pd->Records = (kp_bytes_t){batch->buf, (int32_t)batch->len};
    td->PartitionData.v = pd;
    td->PartitionData.cnt = 1;
    rq->TopicData.v = td;
    rq->TopicData.cnt = 1;
}

/* Send an acks=@p acks produce of @p nrec records without waiting for the answer. */
static void produce_send(node_t *n, const char *topic, int16_t acks, int32_t timeout_ms, int nrec,
                         int32_t corr)
{
    kp_ProduceRequest_t rq;
    kp_ProduceRequest_TopicProduceData_t td;
    kp_ProduceRequest_PartitionProduceData_t pd;
    kp_writer_t wr;
    kp_writer_init(&wr);
    CU_ASSERT_EQUAL(kbat_batch(&wr, KP_CODEC_NONE, nrec, "r", -1, -1, -1, false, false), 0);
    produce_req(&rq, &td, &pd, topic, acks, timeout_ms, &wr);
    CU_ASSERT_EQUAL_FATAL(kbat_send(n->pfd, KP_APIKEY_Produce, 9, corr, NULL, &rq), 0);
    kp_writer_free(&wr);
}

/* The answer of produce_send(): error code (-2: none within @p ms), base offset. */
static int16_t produce_recv(node_t *n, int32_t corr, int ms, int64_t *base)
{
    kp_ProduceResponse_t resp;
    int rc;
    kp_ProduceResponse_init(&resp);
    rc = kbat_recv(n->pfd, KP_APIKEY_Produce, 9, corr, &resp, &n->ar, ms);
    if (rc != 0)
        return (int16_t)(rc == -2 ? -2 : -100);
    if (resp.Responses.cnt != 1 || resp.Responses.v[0].PartitionResponses.cnt != 1)
        return -100;
    if (base)
        *base = resp.Responses.v[0].PartitionResponses.v[0].BaseOffset;
    return resp.Responses.v[0].PartitionResponses.v[0].ErrorCode;
}

static int16_t produce(node_t *n, const char *topic, int16_t acks, int32_t timeout_ms, int nrec,
                       int64_t *base)
{
    static int32_t corr = 1000;
    produce_send(n, topic, acks, timeout_ms, nrec, ++corr);
    return produce_recv(n, corr, KBAT_WAIT_MS, base);
}

/* Leader of "topic" with replicas {1,2,3} and ISR @p isr at leader epoch 1. */
static kb_part_t *leader3(node_t *n, const char *topic, const char *const *cfg, const int32_t *isr,
                          size_t nisr)
{
    static const int32_t reps[] = {1, 2, 3};
    kb_part_t *part;
    CU_ASSERT_EQUAL_FATAL(kbat_create_topic(n->fd, topic, 1, cfg), 0);
    part = node_part(n, topic);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(part, 1, 1, reps, 3, isr, nisr), 0);
    CU_ASSERT_EQUAL(kb_part_role(part), KB_PART_LEADER);
    CU_ASSERT_EQUAL(kb_part_epoch(part), 1);
    return part;
}

static const int32_t ISR3[] = {1, 2, 3};

/* Delayed operations are freed just after their response is sent: wait for it. */
static bool dq_empty(node_t *n)
{
    int64_t end = kbat_now_ms() + KBAT_WAIT_MS;
    while (kb_dq_count(n->b.svc->dq) != 0 && kbat_now_ms() < end)
        poll(NULL, 0, 2);
    return kb_dq_count(n->b.svc->dq) == 0;
}

/* ---- tests -------------------------------------------------------------------------------------
 */

static void t_single_default(void)
{
    node_t a;
    kb_part_t *part;
    int32_t isr[4];
    int64_t base;
    node_up(&a, 1);
    CU_ASSERT_EQUAL(kbat_create_topic(a.fd, "s", 1, NULL), 0);
    part = node_part(&a, "s");
    CU_ASSERT_EQUAL(kb_part_role(part), KB_PART_LEADER);
    CU_ASSERT_EQUAL(kb_part_isr(part, isr, 4), 1);
    CU_ASSERT_EQUAL(isr[0], 1);
    /* acks=all answers at once, HW = LEO */
    CU_ASSERT_EQUAL(produce(&a, "s", -1, 100, 3, &base), 0);
    CU_ASSERT_EQUAL(base, 0);
    CU_ASSERT_EQUAL(kb_log_hw(part->log), 3);
    /* this node is no follower of itself; others are not in the replica list */
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 1, "s", 0, -1, -1).err, KP_ERR_NOT_LEADER_OR_FOLLOWER);
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 2, "s", 0, -1, -1).err, KP_ERR_NOT_LEADER_OR_FOLLOWER);
    /* bad replica sets are refused and change nothing */
    {
        const int32_t no_self[] = {2, 3}, dup[] = {1, 1}, one[] = {1}, two[] = {1, 2};
        CU_ASSERT_EQUAL(kb_part_become_leader(part, 1, 1, no_self, 2, no_self, 2), KB_E_INVALID);
        CU_ASSERT_EQUAL(kb_part_become_leader(part, 1, 1, dup, 2, one, 1), KB_E_INVALID);
        CU_ASSERT_EQUAL(kb_part_become_leader(part, 1, 1, one, 1, two, 2), KB_E_INVALID);
        CU_ASSERT_EQUAL(kb_part_become_leader(part, 1, 1, two, 2, two + 1, 1), KB_E_INVALID);
        CU_ASSERT_EQUAL(kb_part_become_leader(part, -5, 0, one, 1, one, 1), KB_E_STATE);
    }
    kb_part_release(part);
    node_down(&a);
}

static void t_hw_and_acks_all(void)
{
    node_t a;
    kb_part_t *part;
    rfetch_t r;
    int64_t base = -1;
    node_up(&a, 1);
    part = leader3(&a, "r", NULL, ISR3, 3);
    /* followers unknown: an acks=1 append does not move the HW */
    CU_ASSERT_EQUAL(produce(&a, "r", 1, 1000, 2, &base), 0);
    CU_ASSERT_EQUAL(kb_log_leo(part->log), 2);
    CU_ASSERT_EQUAL(kb_log_hw(part->log), 0);
    /* follower 2 fetches everything: the HW waits for 3 */
    r = replica_fetch(&a, 12, 2, "r", 0, 1, -1);
    CU_ASSERT_EQUAL(r.err, 0);
    CU_ASSERT(r.records.len > 0);
    r = replica_fetch(&a, 12, 2, "r", 2, 1, 1);
    CU_ASSERT_EQUAL(r.err, 0);
    CU_ASSERT_EQUAL(r.hw, 0);
    /* follower 3 at offset 1 (v15, ReplicaState): HW = min(2, 2, 1) */
    r = replica_fetch(&a, 15, 3, "r", 1, 1, 1);
    CU_ASSERT_EQUAL(r.err, 0);
    CU_ASSERT_EQUAL(r.hw, 1);
    CU_ASSERT_EQUAL(kb_log_hw(part->log), 1);
    r = replica_fetch(&a, 15, 3, "r", 2, 1, 1);
    CU_ASSERT_EQUAL(r.hw, 2);
    /* never backwards: a follower fetching an older offset again */
    r = replica_fetch(&a, 12, 3, "r", 0, 1, -1);
    CU_ASSERT_EQUAL(r.hw, 2);
    CU_ASSERT_EQUAL(kb_log_hw(part->log), 2);
    /* rewind it to 2 for the rest */
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 3, "r", 2, 1, 1).err, 0);

    /* acks=all waits exactly until both followers fetched past the batch */
    produce_send(&a, "r", -1, 10000, 3, 77);
    CU_ASSERT_EQUAL(produce_recv(&a, 77, 100, NULL), -2);
    CU_ASSERT_EQUAL(kb_log_leo(part->log), 5);
    r = replica_fetch(&a, 12, 2, "r", 5, 1, 1);
    CU_ASSERT_EQUAL(r.hw, 2);
    CU_ASSERT_EQUAL(produce_recv(&a, 77, 100, NULL), -2);
    r = replica_fetch(&a, 12, 3, "r", 4, 1, 1); /* not past the last offset (4) yet */
    CU_ASSERT_EQUAL(r.hw, 4);
    CU_ASSERT_EQUAL(produce_recv(&a, 77, 100, NULL), -2);
    r = replica_fetch(&a, 12, 3, "r", 5, 1, 1);
    CU_ASSERT_EQUAL(r.hw, 5);
    CU_ASSERT_EQUAL(produce_recv(&a, 77, KBAT_WAIT_MS, &base), 0);
    CU_ASSERT_EQUAL(base, 2);
    /* a consumer (read_uncommitted) sees up to the HW */
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, -1, "r", 0, -1, -1).hw, 5);

    /* timeout: nobody fetches -> REQUEST_TIMED_OUT; the records stay appended */
    CU_ASSERT_EQUAL(produce(&a, "r", -1, 200, 1, &base), KP_ERR_REQUEST_TIMED_OUT);
    CU_ASSERT_EQUAL(base, 5);
    CU_ASSERT_EQUAL(kb_log_leo(part->log), 6);
    CU_ASSERT_EQUAL(kb_log_hw(part->log), 5);
    CU_ASSERT(dq_empty(&a));
    kb_part_release(part);
    node_down(&a);
}

/* Followers as they run: long-poll fetches on their own connections, woken by the append; their
 * next fetches move the HW and complete the acks=all produce. */
static void t_long_poll_followers(void)
{
    node_t a;
    kb_part_t *part;
    int f2, f3;
    rfetch_t r2, r3;
    int64_t base = -1;
    node_up(&a, 1);
    part = leader3(&a, "lp", NULL, ISR3, 3);
    f2 = kbat_connect(a.b.port);
    f3 = kbat_connect(a.b.port);
    CU_ASSERT_FATAL(f2 >= 0 && f3 >= 0);
    rfetch_send(&a, f2, 12, 2, "lp", 0, 1, -1, 10000, 1);
    rfetch_send(&a, f3, 15, 3, "lp", 0, 1, -1, 10000, 1);
    CU_ASSERT_EQUAL(rfetch_recv(&a, f2, 12, 1, 100).err, -2); /* nothing to read: waiting */
    produce_send(&a, "lp", -1, 10000, 4, 9);
    r2 = rfetch_recv(&a, f2, 12, 1, KBAT_WAIT_MS);
    r3 = rfetch_recv(&a, f3, 15, 1, KBAT_WAIT_MS);
    CU_ASSERT_EQUAL(r2.err, 0);
    CU_ASSERT_EQUAL(r3.err, 0);
    CU_ASSERT_EQUAL(kbat_count_records(r2.records, NULL, NULL), 4);
    CU_ASSERT_EQUAL(kbat_count_records(r3.records, NULL, NULL), 4);
    CU_ASSERT_EQUAL(produce_recv(&a, 9, 50, NULL), -2);
    /* the next fetches (waiting again at the LEO) record the followers' progress */
    rfetch_send(&a, f2, 12, 2, "lp", 4, 1, 1, 10000, 2);
    rfetch_send(&a, f3, 15, 3, "lp", 4, 1, 1, 10000, 2);
    CU_ASSERT_EQUAL(produce_recv(&a, 9, KBAT_WAIT_MS, &base), 0);
    CU_ASSERT_EQUAL(base, 0);
    CU_ASSERT_EQUAL(kb_log_hw(part->log), 4);
    /* the waiting fetches answer on the next append */
    CU_ASSERT_EQUAL(produce(&a, "lp", 1, 1000, 1, NULL), 0);
    CU_ASSERT_EQUAL(rfetch_recv(&a, f2, 12, 2, KBAT_WAIT_MS).err, 0);
    CU_ASSERT_EQUAL(rfetch_recv(&a, f3, 15, 2, KBAT_WAIT_MS).err, 0);
    close(f2);
    close(f3);
    kb_part_release(part);
    node_down(&a);
}

static void t_min_insync(void)
{
    node_t a;
    kb_part_t *part;
    const char *cfg[] = {"min.insync.replicas", "3", NULL};
    const int32_t isr2[] = {1, 2};
    int32_t pe;
    int64_t base;
    node_up(&a, 1);
    part = leader3(&a, "m", cfg, isr2, 2);
    CU_ASSERT_EQUAL(produce(&a, "m", -1, 1000, 1, &base), KP_ERR_NOT_ENOUGH_REPLICAS);
    CU_ASSERT_EQUAL(kb_log_leo(part->log), 0); /* refused before the append */
    CU_ASSERT_EQUAL(produce(&a, "m", 1, 1000, 1, &base), 0);
    CU_ASSERT_EQUAL(kb_log_leo(part->log), 1);
    /* the full ISR: acks=all waits; the ISR shrinks meanwhile -> ..._AFTER_APPEND */
    kb_part_repl_info(part, &pe, NULL, NULL);
    CU_ASSERT_EQUAL(kb_part_set_isr(part, pe + 1, ISR3, 3), 0);
    CU_ASSERT_EQUAL(kb_part_set_isr(part, pe + 1, ISR3, 3), KB_E_STATE); /* stale epoch */
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 2, "m", 1, 1, -1).err, 0);
    produce_send(&a, "m", -1, 10000, 1, 91);
    CU_ASSERT_EQUAL(produce_recv(&a, 91, 100, NULL), -2);
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 2, "m", 2, 1, 1).err, 0);
    CU_ASSERT_EQUAL(kb_part_set_isr(part, pe + 2, isr2, 2), 0);
    CU_ASSERT_EQUAL(produce_recv(&a, 91, KBAT_WAIT_MS, &base),
                    KP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND);
    CU_ASSERT_EQUAL(base, 1);
    CU_ASSERT_EQUAL(kb_log_hw(part->log), 2);
    kb_part_release(part);
    node_down(&a);
}

static void t_isr_shrink_expand(void)
{
    node_t a;
    kb_part_t *part;
    const int32_t isr12[] = {1, 2};
    int32_t pe, isr[4];
    bool pending;
    int64_t t0;
    rfetch_t r;
    node_up(&a, 1);
    pthread_mutex_lock(&g_mu);
    g_nprop = 0;
    pthread_mutex_unlock(&g_mu);
    kb_partmgr_set_isr_fn(a.b.svc->pm, isr_cb, NULL);
    t0 = kbat_now_ms();
    part = leader3(&a, "i", NULL, ISR3, 3);
    /* 2 fetches to the LEO (0) and is in sync; 3 never fetches */
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 2, "i", 0, 1, -1).err, 0);
    CU_ASSERT_FATAL(wait_prop(1, 5000));
    CU_ASSERT(kbat_now_ms() - t0 >= LAG_MS); /* not before the lag time */
    CU_ASSERT(prop_is(isr12, 2));
    kb_part_repl_info(part, &pe, NULL, &pending);
    CU_ASSERT(pending);
    CU_ASSERT_EQUAL(g_prop_pe, pe);
    CU_ASSERT_EQUAL(kb_part_isr(part, NULL, 0), 3); /* not applied before it is confirmed */
    /* pending shrink: the HW still waits for 3 (the maximal ISR) */
    CU_ASSERT_EQUAL(produce(&a, "i", 1, 1000, 2, NULL), 0);
    r = replica_fetch(&a, 12, 2, "i", 2, 1, 1);
    CU_ASSERT_EQUAL(r.hw, 0);
    /* no second proposal while one is pending */
    kb_partmgr_isr_check(a.b.svc->pm);
    CU_ASSERT_EQUAL(nprop(), 1);
    /* confirmed: ISR {1,2}, the HW moves */
    CU_ASSERT_EQUAL(kb_part_set_isr(part, pe + 1, isr12, 2), 0);
    CU_ASSERT_EQUAL(kb_part_isr(part, isr, 4), 2);
    CU_ASSERT_EQUAL(kb_log_hw(part->log), 2);
    kb_part_repl_info(part, NULL, NULL, &pending);
    CU_ASSERT(!pending);

    /* 3 catches up: below the HW nothing happens, at the HW it is proposed back */
    r = replica_fetch(&a, 12, 3, "i", 0, 1, -1);
    CU_ASSERT_EQUAL(r.err, 0);
    CU_ASSERT_EQUAL(nprop(), 1);
    r = replica_fetch(&a, 12, 3, "i", 2, 1, 1);
    CU_ASSERT_EQUAL(r.err, 0);
    CU_ASSERT_FATAL(wait_prop(2, 5000));
    CU_ASSERT(prop_is(ISR3, 3));
    /* the callback is told the partition epoch the proposal is based on */
    CU_ASSERT_EQUAL(g_prop_pe, pe + 1);
    CU_ASSERT_EQUAL(kb_part_set_isr(part, pe + 2, ISR3, 3), 0);
    CU_ASSERT_EQUAL(kb_part_isr(part, NULL, 0), 3);
    /* an aborted proposal (AlterPartition failed) can be made again */
    produce(&a, "i", 1, 1000, 1, NULL);
    CU_ASSERT_FATAL(wait_prop(3, 5000)); /* both followers behind now: shrink to {1} */
    {
        const int32_t only1[] = {1};
        CU_ASSERT(prop_is(only1, 1));
    }
    kb_part_isr_abort(part);
    kb_part_repl_info(part, NULL, NULL, &pending);
    CU_ASSERT(!pending);
    CU_ASSERT_FATAL(wait_prop(4, 5000));
    kb_partmgr_set_isr_fn(a.b.svc->pm, NULL, NULL);
    kb_part_isr_abort(part);
    kb_part_release(part);
    node_down(&a);
}

static void t_fetch_errors(void)
{
    node_t a;
    kb_part_t *part;
    node_up(&a, 1);
    part = leader3(&a, "e", NULL, ISR3, 3);
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 7, "e", 0, 1, -1).err, KP_ERR_NOT_LEADER_OR_FOLLOWER);
    CU_ASSERT_EQUAL(replica_fetch(&a, 15, 7, "e", 0, 1, -1).err, KP_ERR_NOT_LEADER_OR_FOLLOWER);
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 2, "e", 0, 0, -1).err, KP_ERR_FENCED_LEADER_EPOCH);
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 2, "e", 0, 2, -1).err, KP_ERR_UNKNOWN_LEADER_EPOCH);
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 2, "e", 0, 1, -1).err, 0);
    /* an error records nothing */
    {
        kb_replica_t rs;
        CU_ASSERT_EQUAL(kb_part_replica_get(part, 3, &rs), 0);
        CU_ASSERT_EQUAL(rs.leo, -1);
        CU_ASSERT_EQUAL(kb_part_replica_get(part, 2, &rs), 0);
        CU_ASSERT_EQUAL(rs.leo, 0);
        CU_ASSERT(rs.last_caught_up_ms > 0);
    }
    /* a follower: replicas and old consumers are refused, produce too */
    {
        const int32_t reps[] = {1, 2, 3};
        int64_t base;
        rfetch_t r;
        CU_ASSERT_EQUAL(kb_part_become_follower(part, 2, 2, 2, reps, 3, reps, 3), 0);
        r = replica_fetch(&a, 12, 3, "e", 0, 2, -1);
        CU_ASSERT_EQUAL(r.err, KP_ERR_NOT_LEADER_OR_FOLLOWER);
        CU_ASSERT_EQUAL(r.cur_leader, 2); /* where to go instead */
        CU_ASSERT_EQUAL(r.cur_leader_epoch, 2);
        CU_ASSERT_EQUAL(replica_fetch(&a, 10, -1, "e", 0, -1, -1).err,
                        KP_ERR_NOT_LEADER_OR_FOLLOWER);
        CU_ASSERT_EQUAL(replica_fetch(&a, 12, -1, "e", 0, 2, -1).err, 0);
        CU_ASSERT_EQUAL(produce(&a, "e", 1, 1000, 1, &base), KP_ERR_NOT_LEADER_OR_FOLLOWER);
        CU_ASSERT_EQUAL(kb_part_become_leader(part, 1, 9, reps, 3, reps, 3), KB_E_STATE);
    }
    kb_part_release(part);
    node_down(&a);
}

static void t_follower_while_waiting(void)
{
    node_t a;
    kb_part_t *part;
    int64_t t0;
    node_up(&a, 1);
    part = leader3(&a, "w", NULL, ISR3, 3);
    produce_send(&a, "w", -1, 20000, 2, 55);
    CU_ASSERT_EQUAL(produce_recv(&a, 55, 100, NULL), -2);
    t0 = kbat_now_ms();
    CU_ASSERT_EQUAL(kb_part_become_follower(part, 2, 2, 2, ISR3, 3, ISR3, 3), 0);
    CU_ASSERT_EQUAL(produce_recv(&a, 55, KBAT_WAIT_MS, NULL), KP_ERR_NOT_LEADER_OR_FOLLOWER);
    CU_ASSERT(kbat_now_ms() - t0 < 5000); /* at once, not at the timeout */
    CU_ASSERT(dq_empty(&a));
    kb_part_release(part);
    node_down(&a);
}

/* The branches of the divergence rule on a follower log with epochs 2@0 and 4@3 (LEO 6). */
static void t_diverging_rule(void)
{
    node_t a;
    kb_part_t *part;
    int64_t to = -1;
    bool done = false;
    node_up(&a, 1);
    CU_ASSERT_EQUAL_FATAL(kbat_create_topic(a.fd, "d", 1, NULL), 0);
    part = node_part(&a, "d");
    /* build the log as a leader at epochs 2 and 4, then become a follower */
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(part, 2, 1, ISR3, 1, ISR3, 1), 0);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(produce(&a, "d", 1, 1000, 1, NULL), 0); /* batch boundaries 0..3 */
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(part, 4, 2, ISR3, 1, ISR3, 1), 0);
    CU_ASSERT_EQUAL(produce(&a, "d", 1, 1000, 1, NULL), 0);
    CU_ASSERT_EQUAL(produce(&a, "d", 1, 1000, 1, NULL), 0);
    CU_ASSERT_EQUAL(produce(&a, "d", 1, 1000, 1, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(part, 2, 6, 3, ISR3, 3, ISR3, 3), 0);
    CU_ASSERT_EQUAL(kb_log_leo(part->log), 6);
    CU_ASSERT_EQUAL(kb_log_hw(part->log), 6);
    /* the leader's epoch 3 is unknown here: back to the end of 2 (offset 3), not done */
    CU_ASSERT_EQUAL(kb_part_follower_diverging(part, 3, 5, &to, &done), 0);
    CU_ASSERT_EQUAL(to, 3);
    CU_ASSERT(!done);
    CU_ASSERT_EQUAL(kb_log_latest_epoch(part->log), 2);
    /* same epoch: the smaller end offset (the leader's) */
    CU_ASSERT_EQUAL(kb_part_follower_diverging(part, 2, 2, &to, &done), 0);
    CU_ASSERT_EQUAL(to, 2);
    CU_ASSERT(done);
    /* a leader end above the LEO cuts nothing */
    CU_ASSERT_EQUAL(kb_part_follower_diverging(part, 2, 9, &to, &done), 0);
    CU_ASSERT_EQUAL(to, 2);
    /* no end offset: the HW (followed the truncation down to 2) */
    CU_ASSERT_EQUAL(kb_part_follower_diverging(part, 2, -1, &to, &done), 0);
    CU_ASSERT_EQUAL(to, 2);
    /* no epoch at or below the leader's (epoch 1 is older than the first, 2@0): (1, 0) */
    CU_ASSERT_EQUAL(kb_part_follower_diverging(part, 1, 1, &to, &done), 0);
    CU_ASSERT_EQUAL(to, 0);
    CU_ASSERT(done);
    kb_part_release(part);
    node_down(&a);
}

/* A follower that led an epoch without appending in it keeps that epoch's entry at its LEO and
 * sends it as LastFetchedEpoch; the leader (which never had that epoch) answers DivergingEpoch
 * (its older epoch, end = this LEO). Nothing is cut, but the entry must go, or the next fetch
 * gets the same answer: found as a __mirror_state follower looping forever after kill -9 of
 * its leader (tests/mirror_e2e leader-moves). */
static void t_diverging_at_leo_drops_empty_epoch(void)
{
    node_t a;
    kb_part_t *part;
    int64_t to = -1;
    bool done = false;
    int32_t e;
    int64_t o;
    node_up(&a, 1);
    CU_ASSERT_EQUAL_FATAL(kbat_create_topic(a.fd, "z", 1, NULL), 0);
    part = node_part(&a, "z");
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(part, 2, 1, ISR3, 1, ISR3, 1), 0);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(produce(&a, "z", 1, 1000, 1, NULL), 0);
    /* leader at epoch 4, nothing appended: the cache holds 2@0 and 4@3 with LEO 3 */
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(part, 4, 2, ISR3, 1, ISR3, 1), 0);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(part, 2, 5, 3, ISR3, 3, ISR3, 3), 0);
    CU_ASSERT_EQUAL(kb_log_leo(part->log), 3);
    CU_ASSERT_EQUAL(kb_log_latest_epoch(part->log), 4);
    /* the leader knows 2@0 and 5@3: for epoch 4 it answers (2, 3) */
    CU_ASSERT_EQUAL(kb_part_follower_diverging(part, 2, 3, &to, &done), 0);
    CU_ASSERT_EQUAL(to, 3);
    CU_ASSERT(done);
    CU_ASSERT_EQUAL(kb_log_leo(part->log), 3);
    CU_ASSERT_EQUAL(kb_log_latest_epoch(part->log), 2); /* the next fetch sends 2: consistent */
    kb_log_epoch_end_offset(part->log, 2, &e, &o);
    CU_ASSERT(e == 2 && o == 3);
    kb_part_release(part);
    node_down(&a);
}

static void t_hw_checkpoint(void)
{
    node_t a;
    kb_part_t *part;
    char idkv[32] = "node.id=1";
    const char *kv[] = {idkv, NULL};
    node_up(&a, 1);
    part = leader3(&a, "c", NULL, ISR3, 3);
    CU_ASSERT_EQUAL(produce(&a, "c", 1, 1000, 2, NULL), 0);
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 2, "c", 2, 1, 1).err, 0);
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 3, "c", 2, 1, 1).err, 0);
    CU_ASSERT_EQUAL(produce(&a, "c", 1, 1000, 3, NULL), 0);
    CU_ASSERT_EQUAL(kb_log_hw(part->log), 2);
    CU_ASSERT_EQUAL(kb_log_leo(part->log), 5);
    kb_part_release(part);
    /* clean restart: the storage writes replication-offset-checkpoint at close */
    close(a.fd);
    close(a.pfd);
    kbat_broker_stop(&a.b);
    CU_ASSERT_EQUAL_FATAL(kbat_broker_start(&a.b, a.dir, kv), 0);
    a.fd = kbat_connect(a.b.port);
    a.pfd = kbat_connect(a.b.port);
    part = node_part(&a, "c");
    CU_ASSERT_EQUAL(kb_log_hw(part->log), 5); /* the single-broker state it opens in */
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(part, 2, 2, ISR3, 3, ISR3, 3), 0);
    CU_ASSERT_EQUAL(kb_log_hw(part->log), 2); /* from the checkpoint */
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 2, "c", 5, 2, 1).err, 0);
    CU_ASSERT_EQUAL(replica_fetch(&a, 12, 3, "c", 5, 2, 1).hw, 5);
    kb_part_release(part);
    node_down(&a);
}

typedef struct spam_s {
    node_t *n;
    int fd;
    _Atomic bool stop;
    int ok, refused, other;
} spam_t;

/* Produce acks=1 batches on its own connection until told to stop. */
static void *spam_thread(void *arg)
{
    spam_t *sp = arg;
    int32_t corr = 1;
    while (!atomic_load(&sp->stop)) {
        kp_ProduceRequest_t rq;
        kp_ProduceRequest_TopicProduceData_t td;
        kp_ProduceRequest_PartitionProduceData_t pd;
        kp_ProduceResponse_t resp;
        kp_arena_t ar;
        kp_writer_t wr;
        kp_writer_init(&wr);
        kbat_batch(&wr, KP_CODEC_NONE, 2, "x", -1, -1, -1, false, false);
        produce_req(&rq, &td, &pd, "rc", 1, 1000, &wr);
        kp_arena_init(&ar, 0);
        kp_ProduceResponse_init(&resp);
        if (kbat_send(sp->fd, KP_APIKEY_Produce, 9, ++corr, NULL, &rq) != 0 ||
            kbat_recv(sp->fd, KP_APIKEY_Produce, 9, corr, &resp, &ar, KBAT_WAIT_MS) != 0) {
            sp->other++;
        } else {
            int16_t ec = resp.Responses.v[0].PartitionResponses.v[0].ErrorCode;
            if (ec == 0)
                sp->ok++;
            else if (ec == KP_ERR_NOT_LEADER_OR_FOLLOWER)
                sp->refused++;
            else
                sp->other++;
        }
        kp_arena_free(&ar);
        kp_writer_free(&wr);
    }
    return NULL;
}

/* Role changes against a stream of appends: a follower's log never moves, and every batch is
 * written at the epoch of the leadership it was appended under. */
static void t_role_change_vs_appends(void)
{
    node_t a;
    kb_part_t *part;
    spam_t sp = {0};
    pthread_t thr;
    int32_t epoch = 1;
    node_up(&a, 1);
    part = leader3(&a, "rc", NULL, ISR3, 1);
    sp.n = &a;
    sp.fd = kbat_connect(a.b.port);
    CU_ASSERT_FATAL(sp.fd >= 0);
    atomic_init(&sp.stop, false);
    CU_ASSERT_EQUAL_FATAL(pthread_create(&thr, NULL, spam_thread, &sp), 0);
    for (int round = 0; round < 5; round++) {
        int64_t leo, end, grow = kb_log_leo(part->log) + 4;
        /* let some appends through as leader */
        end = kbat_now_ms() + KBAT_WAIT_MS;
        while (kb_log_leo(part->log) < grow && kbat_now_ms() < end)
            poll(NULL, 0, 1);
        CU_ASSERT(kb_log_leo(part->log) >= grow);
        epoch++;
        CU_ASSERT_EQUAL(kb_part_become_follower(part, 2, epoch, epoch, ISR3, 3, ISR3, 3), 0);
        leo = kb_log_leo(part->log);
        /* a window in which the producer keeps trying: nothing may be appended */
        end = kbat_now_ms() + 40;
        while (kbat_now_ms() < end)
            poll(NULL, 0, 2);
        CU_ASSERT_EQUAL(kb_log_leo(part->log), leo);
        epoch++;
        CU_ASSERT_EQUAL(kb_part_become_leader(part, epoch, epoch, ISR3, 3, ISR3, 1), 0);
    }
    atomic_store(&sp.stop, true);
    pthread_join(thr, NULL);
    close(sp.fd);
    CU_ASSERT(sp.ok > 0);
    CU_ASSERT_EQUAL(sp.other, 0);
    /* every batch carries a leader epoch of this node's leaderships (odd ones) */
    {
        int32_t *ep = NULL;
        int64_t *st = NULL;
        size_t n = 0;
        CU_ASSERT_EQUAL(kb_log_epoch_entries(part->log, &ep, &st, &n), 0);
        for (size_t i = 0; i < n; i++)
            CU_ASSERT(ep[i] == 0 || ep[i] % 2 == 1);
        free(ep);
        free(st);
    }
    kb_part_release(part);
    node_down(&a);
}

/* ---- follower: batches of a real leader ------------------------------------------------------ */

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return buf;
}

static bool same_segment(kb_part_t *x, kb_part_t *y)
{
    char px[4200], py[4200];
    size_t lx = 0, ly = 0;
    uint8_t *bx, *by;
    bool same;
    snprintf(px, sizeof(px), "%s/00000000000000000000.log", kb_log_dir(x->log));
    snprintf(py, sizeof(py), "%s/00000000000000000000.log", kb_log_dir(y->log));
    bx = slurp(px, &lx);
    by = slurp(py, &ly);
    same = bx && by && lx == ly && lx > 0 && !memcmp(bx, by, lx);
    free(bx);
    free(by);
    return same;
}

static bool same_epochs(kb_part_t *x, kb_part_t *y)
{
    int32_t *ex = NULL, *ey = NULL;
    int64_t *sx = NULL, *sy = NULL;
    size_t nx = 0, ny = 0;
    bool same;
    kb_log_epoch_entries(x->log, &ex, &sx, &nx);
    kb_log_epoch_entries(y->log, &ey, &sy, &ny);
    same = nx == ny && nx > 0 && !memcmp(ex, ey, nx * sizeof(*ex)) &&
           !memcmp(sx, sy, nx * sizeof(*sx));
    free(ex);
    free(ey);
    free(sx);
    free(sy);
    return same;
}

/* The follower's fetch loop: fetch from @p leader as replica 2 at the follower's LEO and append
 * until it has the leader's LEO and HW. */
static void follow(node_t *leader, kb_part_t *lp, kb_part_t *fp)
{
    for (int i = 0; i < 100; i++) {
        int64_t leo = -1, ls = -1;
        int32_t last = -2, lid = -2, lepoch = -2;
        rfetch_t r;
        CU_ASSERT_EQUAL_FATAL(kb_part_follower_position(fp, &lid, &lepoch, &leo, &last, &ls), 0);
        CU_ASSERT_EQUAL(lid, 1);
        CU_ASSERT_EQUAL(lepoch, kb_part_epoch(lp));
        CU_ASSERT_EQUAL(leo, kb_log_leo(fp->log));
        CU_ASSERT_EQUAL(ls, 0);
        r = replica_fetch(leader, 12, 2, "f", leo, lepoch, last);
        CU_ASSERT_EQUAL_FATAL(r.err, 0);
        CU_ASSERT_EQUAL_FATAL(r.div_epoch, -1);
        int rc = kb_part_follower_append(fp, r.records.ptr, (size_t)r.records.len, r.hw,
                                         r.log_start, NULL);
        if (rc != 0)
            fprintf(stderr, "follower append at %lld (%d bytes): %d\n", (long long)leo,
                    (int)r.records.len, rc);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        if (r.records.len == 0 && kb_log_leo(fp->log) == kb_log_leo(lp->log) &&
            kb_log_hw(fp->log) == kb_log_hw(lp->log))
            return;
    }
    CU_FAIL("the follower did not converge");
}

static void t_follower_append(void)
{
    node_t a, b;
    kb_part_t *lp, *fp;
    const int32_t reps[] = {1, 2};
    kp_writer_t wr;
    int64_t base, cut;
    node_up(&a, 1);
    node_up(&b, 2);
    CU_ASSERT_EQUAL_FATAL(kbat_create_topic(a.fd, "f", 1, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(kbat_create_topic(b.fd, "f", 1, NULL), 0);
    lp = node_part(&a, "f");
    fp = node_part(&b, "f");
    /* not a follower yet: the follower path is refused */
    CU_ASSERT_EQUAL(kb_part_follower_append(fp, NULL, 0, 0, -1, NULL), KB_E_STATE);
    CU_ASSERT_EQUAL(kb_part_truncate_to(fp, 0), KB_E_STATE);
    CU_ASSERT_EQUAL(kb_part_follower_position(fp, NULL, NULL, NULL, NULL, NULL), KB_E_STATE);
    CU_ASSERT_EQUAL(kb_part_follower_diverging(fp, 0, 0, NULL, NULL), KB_E_STATE);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 3, 1, reps, 2, reps, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 3, 1, reps, 2, reps, 2), 0);
    /* leader data: plain, compressed, idempotent batches */
    CU_ASSERT_EQUAL(produce(&a, "f", 1, 1000, 5, &base), 0);
    kp_writer_init(&wr);
    kbat_batch(&wr, KP_CODEC_GZIP, 4, "g", -1, -1, -1, false, false);
    CU_ASSERT_EQUAL(kbat_produce(a.fd, 9, "f", 0, 1, &wr, &base, NULL), 0);
    kp_writer_free(&wr);
    kp_writer_init(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, 3, "p", 4000, 0, 0, false, false);
    CU_ASSERT_EQUAL(kbat_produce(a.fd, 9, "f", 0, 1, &wr, &base, NULL), 0);
    kp_writer_free(&wr);
    CU_ASSERT_EQUAL(kb_log_leo(lp->log), 12);
    follow(&a, lp, fp);
    CU_ASSERT_EQUAL(kb_log_leo(fp->log), 12);
    CU_ASSERT_EQUAL(kb_log_hw(lp->log), 12);
    CU_ASSERT_EQUAL(kb_log_hw(fp->log), 12);
    CU_ASSERT(same_segment(lp, fp));
    CU_ASSERT(same_epochs(lp, fp));
    {
        kb_producer_info_t pi;
        CU_ASSERT_EQUAL(kb_log_producer_get(fp->log, 4000, &pi), 0);
        CU_ASSERT_EQUAL(pi.last_sequence, 2);
    }
    /* a follower refuses client writes; a leader the follower path */
    {
        int64_t b2;
        CU_ASSERT_EQUAL(produce(&b, "f", 1, 1000, 1, &b2), KP_ERR_NOT_LEADER_OR_FOLLOWER);
        CU_ASSERT_EQUAL(kb_part_follower_append(lp, NULL, 0, 12, -1, NULL), KB_E_STATE);
    }

    /* truncate the follower into the middle (at the gzip batch) and converge again */
    cut = 7;
    CU_ASSERT_EQUAL(kb_part_truncate_to(fp, cut), 0);
    CU_ASSERT_EQUAL(kb_log_leo(fp->log), 5); /* the start of the gzip batch holding 7 */
    CU_ASSERT(kb_log_hw(fp->log) <= kb_log_leo(fp->log));
    {
        kb_producer_info_t pi;
        CU_ASSERT_NOT_EQUAL(kb_log_producer_get(fp->log, 4000, &pi), 0); /* its batch is gone */
    }
    /* the leader meanwhile moves on under a new epoch */
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 4, 2, reps, 2, reps, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 4, 2, reps, 2, reps, 2), 0);
    CU_ASSERT_EQUAL(produce(&a, "f", 1, 1000, 2, &base), 0);
    CU_ASSERT_EQUAL(base, 12);
    follow(&a, lp, fp);
    CU_ASSERT_EQUAL(kb_log_leo(fp->log), 14);
    CU_ASSERT(same_segment(lp, fp));
    CU_ASSERT(same_epochs(lp, fp));
    CU_ASSERT_EQUAL(kb_log_epoch_for_offset(fp->log, 13), 4);

    /* divergence: the follower has records the leader does not (a deposed leader's tail) */
    {
        rfetch_t r;
        int32_t ee;
        int64_t eo, to = -1;
        bool done = false;
        CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(fp, 5, 3, reps, 2, reps, 2), 0);
        CU_ASSERT_EQUAL(produce(&b, "f", 1, 1000, 3, &base), 0); /* 14..16 at epoch 5 on b */
        CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 6, 4, reps, 2, reps, 2), 0);
        CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 6, 4, reps, 2, reps, 2), 0);
        CU_ASSERT_EQUAL(produce(&a, "f", 1, 1000, 1, &base), 0); /* 14 at epoch 6 on a */
        r = replica_fetch(&a, 12, 2, "f", kb_log_leo(fp->log), 6, kb_log_latest_epoch(fp->log));
        CU_ASSERT_EQUAL(r.err, 0);
        CU_ASSERT_EQUAL(r.div_epoch, 4);
        CU_ASSERT_EQUAL(r.div_end, 14);
        kb_log_epoch_end_offset(lp->log, 5, &ee, &eo);
        CU_ASSERT_EQUAL(ee, 4);
        CU_ASSERT_EQUAL(eo, 14);
        CU_ASSERT_EQUAL(kb_part_follower_diverging(fp, r.div_epoch, r.div_end, &to, &done), 0);
        CU_ASSERT_EQUAL(to, 14);
        CU_ASSERT(done);
        CU_ASSERT_EQUAL(kb_log_leo(fp->log), 14);
        CU_ASSERT_EQUAL(kb_log_latest_epoch(fp->log), 4);
        /* nothing more to cut when asked again */
        CU_ASSERT_EQUAL(kb_part_follower_diverging(fp, 4, 14, &to, &done), 0);
        CU_ASSERT_EQUAL(to, 14);
        CU_ASSERT(done);
        follow(&a, lp, fp);
        CU_ASSERT_EQUAL(kb_log_leo(fp->log), 15);
        CU_ASSERT(same_segment(lp, fp));
        CU_ASSERT(same_epochs(lp, fp));
    }
    /* the leader's log start inside a batch (DeleteRecords to 7, inside the gzip batch 5..8); a
     * follower restarted empty at 7 (out of range) gets that whole batch: it restarts at 5 and
     * takes the leader's log start 7 */
    {
        rfetch_t r;
        CU_ASSERT_EQUAL_FATAL(kb_log_set_start_offset(lp->log, 7), 0);
        CU_ASSERT_EQUAL_FATAL(kb_part_truncate_fully(fp, 7), 0);
        r = replica_fetch(&a, 12, 2, "f", 7, kb_part_epoch(lp), -1);
        CU_ASSERT_EQUAL_FATAL(r.err, 0);
        CU_ASSERT_EQUAL(r.log_start, 7);
        CU_ASSERT_EQUAL(kb_part_follower_append(fp, r.records.ptr, (size_t)r.records.len, r.hw,
                                                r.log_start, NULL),
                        0);
        CU_ASSERT_EQUAL(kb_log_start_offset(fp->log), 7);
        CU_ASSERT_EQUAL(kb_log_leo(fp->log), 15);
        /* a non-empty follower still refuses a batch below its end */
        CU_ASSERT_NOT_EQUAL(kb_part_follower_append(fp, r.records.ptr, (size_t)r.records.len, r.hw,
                                                    r.log_start, NULL),
                            0);
        CU_ASSERT_EQUAL(kb_log_leo(fp->log), 15);
    }
    kb_part_release(lp);
    kb_part_release(fp);
    node_down(&b);
    node_down(&a);
}

int main(void)
{
    CU_pSuite s;
    unsigned fails;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("broker_repl", NULL, NULL);
    CU_add_test(s, "single-broker default", t_single_default);
    CU_add_test(s, "HW from replica fetches, acks=all, timeout", t_hw_and_acks_all);
    CU_add_test(s, "long-poll followers", t_long_poll_followers);
    CU_add_test(s, "min.insync.replicas", t_min_insync);
    CU_add_test(s, "ISR shrink / expand proposals", t_isr_shrink_expand);
    CU_add_test(s, "replica fetch errors, follower role", t_fetch_errors);
    CU_add_test(s, "leadership lost while a produce waits", t_follower_while_waiting);
    CU_add_test(s, "HW from the checkpoint after a restart", t_hw_checkpoint);
    CU_add_test(s, "divergence truncation rule", t_diverging_rule);
    CU_add_test(s, "divergence at the LEO drops an empty epoch",
                t_diverging_at_leo_drops_empty_epoch);
    CU_add_test(s, "role changes against appends", t_role_change_vs_appends);
    CU_add_test(s, "follower append and truncation", t_follower_append);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
