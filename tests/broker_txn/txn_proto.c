/*
 * txn_proto.c -- transaction protocol conformance: raw requests (InitProducerId,
 * AddPartitionsToTxn v3/v4 verify-only, AddOffsetsToTxn, transactional Produce, EndTxn v1/v4/v5,
 * WriteTxnMarkers, FindCoordinator, DescribeProducers, DescribeTransactions, ListTransactions,
 * ListOffsets/Fetch in both isolation levels) with the error codes and epochs Apache Kafka 4.x
 * answers, version by version.
 *
 *   txn_proto                 in-process broker (kbat harness + the transaction coordinator)
 *   txn_proto --port P        any broker on 127.0.0.1:P (kbroker, or Apache Kafka 4.x to check
 *                             that the expectations here are Kafka's)
 *   txn_proto --port P --kafka  the same against Apache Kafka: the few checks where kbroker
 *                             differs are adjusted (g_kafka)
 *   --skip-find-coordinator   leave FindCoordinator out (kbroker serves it from broker/group
 *                             when that component is linked; its answers are checked there)
 *   --groups                  the broker has a group coordinator (TxnOffsetCommit succeeds)
 *
 * Every wait polls with a deadline. Closing line: "N passed, N failed"; exit 1 on failure.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kbat.h"
#include "kp_batch.h"
#include "kp_errcode.h"
#include "kb_txn.h"

static int g_pass, g_fail;
static bool g_kafka;   /* the peer is Apache Kafka */
static bool g_skip_fc; /* FindCoordinator is served by another component (broker/group) */
static bool g_groups;  /* the broker has a group coordinator */
static int g_port;
static char g_sfx[64];

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            g_pass++;                                                                              \
        } else {                                                                                   \
            g_fail++;                                                                              \
            printf("FAIL %s:%d: ", __func__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

#define CHECK_EC(got, want, what)                                                                  \
    do {                                                                                           \
        int16_t got_ = (got), want_ = (want);                                                      \
        CHECK(got_ == want_, "%s: got %s (%d), want %s", what, kp_errcode_name(got_), (int)got_,   \
              kp_errcode_name(want_));                                                             \
    } while (0)

static kp_str_t S(const char *s)
{
    return s ? (kp_str_t){s, (int32_t)strlen(s)} : KP_STR_NULL;
}

static const char *uniq(char *buf, size_t size, const char *base)
{
    snprintf(buf, size, "%s-%s", base, g_sfx);
    return buf;
}

/* ---- request helpers ------------------------------------------------------------------------- */

static int64_t latest(int fd, const char *topic, int32_t part, int8_t isolation);

static int16_t initpid(int fd, int16_t ver, const char *txn, int32_t timeout, int64_t exp_pid,
                       int16_t exp_epoch, int64_t *pid, int16_t *epoch)
{
    kp_InitProducerIdRequest_t rq;
    kp_InitProducerIdResponse_t resp;
    kp_arena_t ar;
    int16_t ec = -100;
    kp_InitProducerIdRequest_init(&rq);
    rq.TransactionalId = S(txn);
    rq.TransactionTimeoutMs = timeout;
    rq.ProducerId = exp_pid;
    rq.ProducerEpoch = exp_epoch;
    kp_arena_init(&ar, 0);
    kp_InitProducerIdResponse_init(&resp);
    if (kbat_call(fd, KP_APIKEY_InitProducerId, ver, &rq, &resp, &ar) == 0) {
        ec = resp.ErrorCode;
        if (pid)
            *pid = resp.ProducerId;
        if (epoch)
            *epoch = resp.ProducerEpoch;
    }
    kp_arena_free(&ar);
    return ec;
}

/* InitProducerId, retrying the retriable answers (CONCURRENT_TRANSACTIONS while an abort
 * completes, COORDINATOR_* while Kafka loads) until a deadline. *first gets the first answer. */
static int16_t initpid_retry(int fd, int16_t ver, const char *txn, int32_t timeout, int64_t exp_pid,
                             int16_t exp_epoch, int64_t *pid, int16_t *epoch, int16_t *first)
{
    int64_t deadline = kbat_now_ms() + 30000;
    int16_t ec;
    bool got_first = false;
    for (;;) {
        ec = initpid(fd, ver, txn, timeout, exp_pid, exp_epoch, pid, epoch);
        if (!got_first && first)
            *first = ec;
        got_first = true;
        if ((ec != KP_ERR_CONCURRENT_TRANSACTIONS && ec != KP_ERR_COORDINATOR_NOT_AVAILABLE &&
             ec != KP_ERR_COORDINATOR_LOAD_IN_PROGRESS && ec != KP_ERR_NOT_COORDINATOR) ||
            kbat_now_ms() > deadline)
            return ec;
        kbat_silent(fd, 50); /* back off (poll on the idle socket, not a sleep) */
    }
}

static int16_t find_coord(int fd, int16_t ver, int8_t type, const char *key, int32_t *node,
                          char *msg, size_t msg_size)
{
    int64_t deadline = kbat_now_ms() + 30000;
    for (;;) {
        kp_FindCoordinatorRequest_t rq;
        kp_FindCoordinatorResponse_t resp;
        kp_arena_t ar;
        kp_str_t keys[1];
        int16_t ec = -100;
        kp_FindCoordinatorRequest_init(&rq);
        rq.KeyType = type;
        snprintf(msg, msg_size, "-");
        if (ver >= 4) {
            keys[0] = S(key);
            rq.CoordinatorKeys.v = keys;
            rq.CoordinatorKeys.cnt = 1;
        } else {
            rq.Key = S(key);
        }
        kp_arena_init(&ar, 0);
        kp_FindCoordinatorResponse_init(&resp);
        if (kbat_call(fd, KP_APIKEY_FindCoordinator, ver, &rq, &resp, &ar) == 0) {
            if (ver >= 4 && resp.Coordinators.cnt == 1) {
                ec = resp.Coordinators.v[0].ErrorCode;
                *node = resp.Coordinators.v[0].NodeId;
                snprintf(msg, msg_size, "%.*s",
                         resp.Coordinators.v[0].ErrorMessage.len > 0
                             ? (int)resp.Coordinators.v[0].ErrorMessage.len
                             : 0,
                         resp.Coordinators.v[0].ErrorMessage.ptr
                             ? resp.Coordinators.v[0].ErrorMessage.ptr
                             : "");
                if (resp.Coordinators.v[0].ErrorMessage.len < 0)
                    snprintf(msg, msg_size, "(null)");
            } else if (ver < 4) {
                ec = resp.ErrorCode;
                *node = resp.NodeId;
                if (resp.ErrorMessage.len < 0)
                    snprintf(msg, msg_size, "(null)");
                else
                    snprintf(msg, msg_size, "%.*s", (int)resp.ErrorMessage.len,
                             resp.ErrorMessage.ptr);
            }
        }
        kp_arena_free(&ar);
        if (ec != KP_ERR_COORDINATOR_NOT_AVAILABLE || kbat_now_ms() > deadline)
            return ec;
        kbat_silent(fd, 100);
    }
}

/* AddPartitionsToTxn v0-3 for partitions of one or two topics; per-partition errors to errs[]
 * in request order. Returns the first partition's error (or -100). */
static int16_t add_parts(int fd, int16_t ver, const char *txn, int64_t pid, int16_t epoch,
                         const char *topic, const int32_t *parts, int n, const char *topic2,
                         const int32_t *parts2, int n2, int16_t *errs)
{
    kp_AddPartitionsToTxnRequest_t rq;
    kp_AddPartitionsToTxnResponse_t resp;
    kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic_t t[2];
    kp_arena_t ar;
    int16_t ec = -100;
    int k = 0;
    kp_AddPartitionsToTxnRequest_init(&rq);
    rq.V3AndBelowTransactionalId = S(txn);
    rq.V3AndBelowProducerId = pid;
    rq.V3AndBelowProducerEpoch = epoch;
    kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic_init(&t[0]);
    kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic_init(&t[1]);
    t[0].Name = S(topic);
    t[0].Partitions.v = (int32_t *)parts;
    t[0].Partitions.cnt = n;
    t[1].Name = S(topic2);
    t[1].Partitions.v = (int32_t *)parts2;
    t[1].Partitions.cnt = n2;
    rq.V3AndBelowTopics.v = t;
    rq.V3AndBelowTopics.cnt = topic2 ? 2 : 1;
    kp_arena_init(&ar, 0);
    kp_AddPartitionsToTxnResponse_init(&resp);
    if (kbat_call(fd, KP_APIKEY_AddPartitionsToTxn, ver, &rq, &resp, &ar) == 0) {
        for (int32_t i = 0; i < resp.ResultsByTopicV3AndBelow.cnt; i++) {
            kp_AddPartitionsToTxnResponse_AddPartitionsToTxnTopicResult_t *tr =
                &resp.ResultsByTopicV3AndBelow.v[i];
            bool second = topic2 && tr->Name.len == (int32_t)strlen(topic2) &&
                          !memcmp(tr->Name.ptr, topic2, strlen(topic2));
            for (int32_t j = 0; j < tr->ResultsByPartition.cnt; j++) {
                int32_t pi = tr->ResultsByPartition.v[j].PartitionIndex;
                const int32_t *pv = second ? parts2 : parts;
                int pn = second ? n2 : n;
                for (int x = 0; x < pn; x++)
                    if (pv[x] == pi && errs)
                        errs[(second ? n : 0) + x] = tr->ResultsByPartition.v[j].PartitionErrorCode;
                k++;
            }
        }
        if (k == n + (topic2 ? n2 : 0))
            ec = errs ? errs[0] : 0;
    }
    kp_arena_free(&ar);
    return ec;
}

static int16_t add_part1(int fd, int16_t ver, const char *txn, int64_t pid, int16_t epoch,
                         const char *topic, int32_t part)
{
    int16_t e[1] = {-100};
    add_parts(fd, ver, txn, pid, epoch, topic, &part, 1, NULL, NULL, 0, e);
    return e[0];
}

/* AddPartitionsToTxn v4/v5 batched form, one transaction; per-partition errors to errs[]. */
static int add_parts_batched(int fd, int16_t ver, const char *txn, int64_t pid, int16_t epoch,
                             bool verify, const char *topic, const int32_t *parts, int n,
                             int16_t *top_err, int16_t *errs)
{
    kp_AddPartitionsToTxnRequest_t rq;
    kp_AddPartitionsToTxnResponse_t resp;
    kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTransaction_t tx;
    kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic_t t;
    kp_arena_t ar;
    int rc = -1;
    kp_AddPartitionsToTxnRequest_init(&rq);
    kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTransaction_init(&tx);
    kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic_init(&t);
    tx.TransactionalId = S(txn);
    tx.ProducerId = pid;
    tx.ProducerEpoch = epoch;
    tx.VerifyOnly = verify;
    t.Name = S(topic);
    t.Partitions.v = (int32_t *)parts;
    t.Partitions.cnt = n;
    tx.Topics.v = &t;
    tx.Topics.cnt = 1;
    rq.Transactions.v = &tx;
    rq.Transactions.cnt = 1;
    kp_arena_init(&ar, 0);
    kp_AddPartitionsToTxnResponse_init(&resp);
    for (int i = 0; i < n; i++)
        errs[i] = -100;
    if (kbat_call(fd, KP_APIKEY_AddPartitionsToTxn, ver, &rq, &resp, &ar) == 0) {
        *top_err = resp.ErrorCode;
        rc = 0;
        for (int32_t x = 0; x < resp.ResultsByTransaction.cnt; x++) {
            kp_AddPartitionsToTxnResponse_AddPartitionsToTxnResult_t *r =
                &resp.ResultsByTransaction.v[x];
            for (int32_t i = 0; i < r->TopicResults.cnt; i++)
                for (int32_t j = 0; j < r->TopicResults.v[i].ResultsByPartition.cnt; j++)
                    for (int k = 0; k < n; k++)
                        if (parts[k] == r->TopicResults.v[i].ResultsByPartition.v[j].PartitionIndex)
                            errs[k] =
                                r->TopicResults.v[i].ResultsByPartition.v[j].PartitionErrorCode;
        }
    }
    kp_arena_free(&ar);
    return rc;
}

static int16_t add_offsets(int fd, int16_t ver, const char *txn, int64_t pid, int16_t epoch,
                           const char *group)
{
    kp_AddOffsetsToTxnRequest_t rq;
    kp_AddOffsetsToTxnResponse_t resp;
    kp_arena_t ar;
    int16_t ec = -100;
    kp_AddOffsetsToTxnRequest_init(&rq);
    rq.TransactionalId = S(txn);
    rq.ProducerId = pid;
    rq.ProducerEpoch = epoch;
    rq.GroupId = S(group);
    kp_arena_init(&ar, 0);
    kp_AddOffsetsToTxnResponse_init(&resp);
    if (kbat_call(fd, KP_APIKEY_AddOffsetsToTxn, ver, &rq, &resp, &ar) == 0)
        ec = resp.ErrorCode;
    kp_arena_free(&ar);
    return ec;
}

static int16_t end_txn(int fd, int16_t ver, const char *txn, int64_t pid, int16_t epoch,
                       bool commit, int64_t *rpid, int16_t *repoch)
{
    kp_EndTxnRequest_t rq;
    kp_EndTxnResponse_t resp;
    kp_arena_t ar;
    int16_t ec = -100;
    kp_EndTxnRequest_init(&rq);
    rq.TransactionalId = S(txn);
    rq.ProducerId = pid;
    rq.ProducerEpoch = epoch;
    rq.Committed = commit;
    kp_arena_init(&ar, 0);
    kp_EndTxnResponse_init(&resp);
    if (kbat_call(fd, KP_APIKEY_EndTxn, ver, &rq, &resp, &ar) == 0) {
        ec = resp.ErrorCode;
        if (rpid)
            *rpid = resp.ProducerId;
        if (repoch)
            *repoch = resp.ProducerEpoch;
    }
    kp_arena_free(&ar);
    return ec;
}

/* EndTxn retrying CONCURRENT_TRANSACTIONS (Kafka answers it while the previous transaction's
 * markers are still being written). */
static int16_t end_txn_retry(int fd, int16_t ver, const char *txn, int64_t pid, int16_t epoch,
                             bool commit, int64_t *rpid, int16_t *repoch)
{
    int64_t deadline = kbat_now_ms() + 30000;
    int16_t ec;
    while ((ec = end_txn(fd, ver, txn, pid, epoch, commit, rpid, repoch)) ==
               KP_ERR_CONCURRENT_TRANSACTIONS &&
           kbat_now_ms() < deadline)
        kbat_silent(fd, 50);
    return ec;
}

static int16_t produce_txn_v(int fd, int16_t ver, const char *txn, const char *topic, int32_t part,
                             int64_t pid, int16_t epoch, int32_t seq, int n, int64_t *base)
{
    kp_writer_t w;
    int16_t ec;
    kp_writer_init(&w);
    kbat_batch(&w, KP_CODEC_NONE, n, "txn", pid, epoch, seq, true, false);
    ec = kbat_produce(fd, ver, topic, part, -1, &w, base, txn);
    kp_writer_free(&w);
    return ec;
}

/* Produce v11: what the Java 4.x producer sends when transaction version 2 is not offered. */
static int16_t produce_txn(int fd, const char *txn, const char *topic, int32_t part, int64_t pid,
                           int16_t epoch, int32_t seq, int n, int64_t *base)
{
    return produce_txn_v(fd, 11, txn, topic, part, pid, epoch, seq, n, base);
}

/* ListOffsets LATEST in @p isolation (0 uncommitted: HW, 1 committed: LSO). */
static int64_t latest(int fd, const char *topic, int32_t part, int8_t isolation)
{
    kp_ListOffsetsRequest_t rq;
    kp_ListOffsetsResponse_t resp;
    kp_ListOffsetsRequest_ListOffsetsTopic_t t;
    kp_ListOffsetsRequest_ListOffsetsPartition_t p;
    kp_arena_t ar;
    int64_t off = -100;
    kp_ListOffsetsRequest_init(&rq);
    kp_ListOffsetsRequest_ListOffsetsTopic_init(&t);
    kp_ListOffsetsRequest_ListOffsetsPartition_init(&p);
    rq.ReplicaId = -1;
    rq.IsolationLevel = isolation;
    t.Name = S(topic);
    p.PartitionIndex = part;
    p.Timestamp = -1;
    t.Partitions.v = &p;
    t.Partitions.cnt = 1;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    kp_arena_init(&ar, 0);
    kp_ListOffsetsResponse_init(&resp);
    if (kbat_call(fd, KP_APIKEY_ListOffsets, 7, &rq, &resp, &ar) == 0 && resp.Topics.cnt == 1 &&
        resp.Topics.v[0].Partitions.cnt == 1 && resp.Topics.v[0].Partitions.v[0].ErrorCode == 0)
        off = resp.Topics.v[0].Partitions.v[0].Offset;
    kp_arena_free(&ar);
    return off;
}

/* Poll until the LSO of @p topic / @p part is @p want (Kafka writes markers after EndTxn
 * returns). Returns the last value seen. */
static int64_t wait_lso(int fd, const char *topic, int32_t part, int64_t want)
{
    int64_t deadline = kbat_now_ms() + 30000, v;
    while ((v = latest(fd, topic, part, 1)) != want && kbat_now_ms() < deadline)
        kbat_silent(fd, 50);
    return v;
}

typedef struct fetch_res_s {
    int16_t err;
    int64_t hw, lso;
    int records;         /* data records */
    int32_t aborted_cnt; /* AbortedTransactions entries */
    int64_t aborted_pid, aborted_first;
} fetch_res_t;

static void fetch(int fd, const char *topic, int32_t part, int64_t offset, int8_t isolation,
                  fetch_res_t *out)
{
    kp_FetchRequest_t rq;
    kp_FetchResponse_t resp;
    kp_FetchRequest_FetchTopic_t t;
    kp_FetchRequest_FetchPartition_t p;
    kp_arena_t ar;
    memset(out, 0, sizeof(*out));
    out->err = -100;
    kp_FetchRequest_init(&rq);
    kp_FetchRequest_FetchTopic_init(&t);
    kp_FetchRequest_FetchPartition_init(&p);
    rq.ReplicaId = -1;
    rq.MaxWaitMs = 0;
    rq.MinBytes = 0;
    rq.MaxBytes = 1 << 20;
    rq.IsolationLevel = isolation;
    rq.SessionEpoch = -1;
    t.Topic = S(topic);
    p.Partition = part;
    p.FetchOffset = offset;
    p.PartitionMaxBytes = 1 << 20;
    p.CurrentLeaderEpoch = -1;
    t.Partitions.v = &p;
    t.Partitions.cnt = 1;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    kp_arena_init(&ar, 0);
    kp_FetchResponse_init(&resp);
    if (kbat_call(fd, KP_APIKEY_Fetch, 11, &rq, &resp, &ar) == 0 && resp.Responses.cnt == 1 &&
        resp.Responses.v[0].Partitions.cnt == 1) {
        kp_FetchResponse_PartitionData_t *pd = &resp.Responses.v[0].Partitions.v[0];
        kp_batch_iter_t it;
        kp_batch_t b;
        out->err = pd->ErrorCode;
        out->hw = pd->HighWatermark;
        out->lso = pd->LastStableOffset;
        out->aborted_cnt = pd->AbortedTransactions.cnt;
        if (pd->AbortedTransactions.cnt > 0) {
            out->aborted_pid = pd->AbortedTransactions.v[0].ProducerId;
            out->aborted_first = pd->AbortedTransactions.v[0].FirstOffset;
        }
        if (pd->Records.len > 0) {
            kp_batch_iter_init(&it, pd->Records.ptr, (size_t)pd->Records.len, 0, 0);
            while (kp_batch_iter_next(&it, &b) == 1)
                if (!kp_batch_hdr_is_control(&b.hdr))
                    out->records += b.hdr.recordCount;
        }
    }
    kp_arena_free(&ar);
}

typedef struct producer_st_s {
    int16_t err;
    int n;
    int64_t pid;
    int32_t epoch;
    int64_t txn_start;
    int32_t coord_epoch;
} producer_st_t;

/* DescribeProducers of one partition; the entry of @p pid (or the first). */
static void describe_producers(int fd, const char *topic, int32_t part, int64_t pid,
                               producer_st_t *out)
{
    kp_DescribeProducersRequest_t rq;
    kp_DescribeProducersResponse_t resp;
    kp_DescribeProducersRequest_TopicRequest_t t;
    kp_arena_t ar;
    memset(out, 0, sizeof(*out));
    out->err = -100;
    out->pid = -1;
    kp_DescribeProducersRequest_init(&rq);
    kp_DescribeProducersRequest_TopicRequest_init(&t);
    t.Name = S(topic);
    t.PartitionIndexes.v = &part;
    t.PartitionIndexes.cnt = 1;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    kp_arena_init(&ar, 0);
    kp_DescribeProducersResponse_init(&resp);
    if (kbat_call(fd, KP_APIKEY_DescribeProducers, 0, &rq, &resp, &ar) == 0 &&
        resp.Topics.cnt == 1 && resp.Topics.v[0].Partitions.cnt == 1) {
        kp_DescribeProducersResponse_PartitionResponse_t *pr = &resp.Topics.v[0].Partitions.v[0];
        out->err = pr->ErrorCode;
        out->n = pr->ActiveProducers.cnt;
        for (int32_t i = 0; i < pr->ActiveProducers.cnt; i++) {
            if (i == 0 || pr->ActiveProducers.v[i].ProducerId == pid) {
                out->pid = pr->ActiveProducers.v[i].ProducerId;
                out->epoch = pr->ActiveProducers.v[i].ProducerEpoch;
                out->txn_start = pr->ActiveProducers.v[i].CurrentTxnStartOffset;
                out->coord_epoch = pr->ActiveProducers.v[i].CoordinatorEpoch;
            }
        }
    }
    kp_arena_free(&ar);
}

static int16_t write_marker(int fd, int64_t pid, int16_t epoch, bool commit, int32_t coord_epoch,
                            const char *topic, int32_t part)
{
    kp_WriteTxnMarkersRequest_t rq;
    kp_WriteTxnMarkersResponse_t resp;
    kp_WriteTxnMarkersRequest_WritableTxnMarker_t m;
    kp_WriteTxnMarkersRequest_WritableTxnMarkerTopic_t t;
    kp_arena_t ar;
    int16_t ec = -100;
    kp_WriteTxnMarkersRequest_init(&rq);
    kp_WriteTxnMarkersRequest_WritableTxnMarker_init(&m);
    kp_WriteTxnMarkersRequest_WritableTxnMarkerTopic_init(&t);
    m.ProducerId = pid;
    m.ProducerEpoch = epoch;
    m.TransactionResult = commit;
    m.CoordinatorEpoch = coord_epoch;
    t.Name = S(topic);
    t.PartitionIndexes.v = &part;
    t.PartitionIndexes.cnt = 1;
    m.Topics.v = &t;
    m.Topics.cnt = 1;
    rq.Markers.v = &m;
    rq.Markers.cnt = 1;
    kp_arena_init(&ar, 0);
    kp_WriteTxnMarkersResponse_init(&resp);
    if (kbat_call(fd, KP_APIKEY_WriteTxnMarkers, 1, &rq, &resp, &ar) == 0 &&
        resp.Markers.cnt == 1 && resp.Markers.v[0].Topics.cnt == 1 &&
        resp.Markers.v[0].Topics.v[0].Partitions.cnt == 1)
        ec = resp.Markers.v[0].Topics.v[0].Partitions.v[0].ErrorCode;
    kp_arena_free(&ar);
    return ec;
}

/* Create a topic and wait until every partition answers ListOffsets (Kafka elects leaders
 * asynchronously). */
static void create_topic(int fd, const char *name, int32_t parts)
{
    int16_t ec = kbat_create_topic(fd, name, parts, NULL);
    CHECK(ec == 0, "create topic %s: %s", name, kp_errcode_name(ec));
    for (int32_t p = 0; p < parts; p++) {
        int64_t deadline = kbat_now_ms() + 30000;
        while (latest(fd, name, p, 0) < 0 && kbat_now_ms() < deadline)
            kbat_silent(fd, 50);
    }
}

/* ---- scenarios ------------------------------------------------------------------------------- */

static void scen_find_coordinator(int fd)
{
    char txn[128], msg[256];
    int32_t node = -2;
    int16_t ec;
    uniq(txn, sizeof(txn), "tp-fc");
    ec = find_coord(fd, 3, 1, txn, &node, msg, sizeof(msg));
    CHECK_EC(ec, KP_ERR_NONE, "FindCoordinator v3 transaction key");
    CHECK(node >= 0, "coordinator node %d", node);
    CHECK(!strcmp(msg, "NONE"), "v3 ErrorMessage '%s', want 'NONE'", msg);
    ec = find_coord(fd, 4, 1, txn, &node, msg, sizeof(msg));
    CHECK_EC(ec, KP_ERR_NONE, "FindCoordinator v4 transaction key");
    CHECK(!strcmp(msg, ""), "v4 ErrorMessage '%s', want ''", msg);
    ec = find_coord(fd, 6, 1, "", &node, msg, sizeof(msg));
    CHECK_EC(ec, KP_ERR_NONE, "FindCoordinator v6 empty transaction key");
    CHECK(node >= 0, "coordinator node %d", node);
    /* An unknown key type: INVALID_REQUEST with Kafka's description, no node. */
    ec = find_coord(fd, 3, 5, txn, &node, msg, sizeof(msg));
    CHECK_EC(ec, KP_ERR_INVALID_REQUEST, "FindCoordinator v3 key type 5");
    CHECK(node == -1 && msg[0], "v3 key type 5: node %d message '%s'", node, msg);
    ec = find_coord(fd, 4, 5, txn, &node, msg, sizeof(msg));
    CHECK_EC(ec, KP_ERR_INVALID_REQUEST, "FindCoordinator v4 key type 5");
    CHECK(node == -1 && msg[0] && strcmp(msg, "(null)"), "v4 key type 5: node %d message '%s'",
          node, msg);
}

static void scen_init_pid(int fd)
{
    char txn[128];
    int64_t pid = -1, pid2 = -1;
    int16_t epoch = -1, ec;

    /* Kafka 4.4 serves InitProducerId 0-5 (6 only with two-phase commit enabled); kbroker
     * serves 0-6. */
    for (int16_t v = 0; v <= (g_kafka ? 5 : 6); v++) {
        ec = initpid(fd, v, NULL, 60000, -1, -1, &pid, &epoch);
        CHECK_EC(ec, KP_ERR_NONE, "idempotent InitProducerId");
        CHECK(pid >= 0 && epoch == 0, "v%d idempotent: pid %" PRId64 " epoch %d", v, pid, epoch);
    }
    ec = initpid(fd, 4, "", 60000, -1, -1, NULL, NULL);
    CHECK_EC(ec, KP_ERR_INVALID_REQUEST, "empty transactional id");
    uniq(txn, sizeof(txn), "tp-init");
    ec = initpid(fd, 4, txn, 0, -1, -1, NULL, NULL);
    CHECK_EC(ec, KP_ERR_INVALID_TRANSACTION_TIMEOUT, "timeout 0");
    ec = initpid(fd, 4, txn, 900001, -1, -1, NULL, NULL);
    CHECK_EC(ec, KP_ERR_INVALID_TRANSACTION_TIMEOUT, "timeout above transaction.max.timeout.ms");
    ec = initpid(fd, 3, txn, 60000, 5, -1, NULL, NULL);
    CHECK_EC(ec, KP_ERR_INVALID_REQUEST, "v3 producer id without epoch");

    ec = initpid_retry(fd, 4, txn, 60000, -1, -1, &pid, &epoch, NULL);
    CHECK_EC(ec, KP_ERR_NONE, "first InitProducerId");
    CHECK(pid >= 0 && epoch == 0, "first: pid %" PRId64 " epoch %d", pid, epoch);
    ec = initpid(fd, 4, txn, 60000, -1, -1, &pid2, &epoch);
    CHECK_EC(ec, KP_ERR_NONE, "second InitProducerId");
    CHECK(pid2 == pid && epoch == 1, "second: pid %" PRId64 " epoch %d", pid2, epoch);
    /* KIP-360: the producer names its current id and epoch. */
    ec = initpid(fd, 4, txn, 60000, pid, 1, &pid2, &epoch);
    CHECK_EC(ec, KP_ERR_NONE, "InitProducerId with the current epoch");
    CHECK(pid2 == pid && epoch == 2, "bump: pid %" PRId64 " epoch %d", pid2, epoch);
    ec = initpid(fd, 4, txn, 60000, pid, 1, &pid2, &epoch);
    CHECK_EC(ec, KP_ERR_NONE, "retry of that InitProducerId");
    CHECK(pid2 == pid && epoch == 2, "retry: pid %" PRId64 " epoch %d (no second bump)", pid2,
          epoch);
    ec = initpid(fd, 4, txn, 60000, pid, 0, NULL, NULL);
    CHECK_EC(ec, KP_ERR_PRODUCER_FENCED, "v4 with an old epoch");
    ec = initpid(fd, 3, txn, 60000, pid, 0, NULL, NULL);
    CHECK_EC(ec, KP_ERR_INVALID_PRODUCER_EPOCH, "v3 with an old epoch");
    ec = initpid(fd, 5, txn, 60000, pid + 100000, 2, NULL, NULL);
    CHECK_EC(ec, KP_ERR_PRODUCER_FENCED, "another producer id");
    if (!g_kafka) {
        /* v6 (KIP-939): two-phase commit refused as Kafka does while it is disabled. */
        kp_InitProducerIdRequest_t rq;
        kp_InitProducerIdResponse_t resp;
        kp_arena_t ar;
        kp_InitProducerIdRequest_init(&rq);
        rq.TransactionalId = S(txn);
        rq.TransactionTimeoutMs = 60000;
        rq.Enable2Pc = true;
        kp_arena_init(&ar, 0);
        kp_InitProducerIdResponse_init(&resp);
        CHECK(kbat_call(fd, KP_APIKEY_InitProducerId, 6, &rq, &resp, &ar) == 0, "v6 call");
        CHECK_EC(resp.ErrorCode, KP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "v6 Enable2Pc");
        rq.Enable2Pc = false;
        rq.KeepPreparedTxn = true;
        CHECK(kbat_call(fd, KP_APIKEY_InitProducerId, 6, &rq, &resp, &ar) == 0, "v6 call");
        CHECK_EC(resp.ErrorCode, KP_ERR_UNSUPPORTED_VERSION, "v6 KeepPreparedTxn");
        rq.KeepPreparedTxn = false;
        CHECK(kbat_call(fd, KP_APIKEY_InitProducerId, 6, &rq, &resp, &ar) == 0, "v6 call");
        CHECK_EC(resp.ErrorCode, KP_ERR_NONE, "v6 plain");
        CHECK(resp.ProducerEpoch == 3 && resp.OngoingTxnProducerId == -1 &&
                  resp.OngoingTxnProducerEpoch == -1,
              "v6: epoch %d, ongoing %" PRId64 "/%d", resp.ProducerEpoch, resp.OngoingTxnProducerId,
              resp.OngoingTxnProducerEpoch);
        kp_arena_free(&ar);
    }
}

static void scen_txn_tv1(int fd)
{
    char txn[128], topic[128], other[128];
    int64_t pid, rpid, base = -1;
    int16_t epoch, rep, ec, errs[4], top;
    int32_t p01[2] = {0, 1}, p5[1] = {5};
    fetch_res_t fr;
    producer_st_t ps;

    uniq(txn, sizeof(txn), "tp-tv1");
    uniq(topic, sizeof(topic), "tp-tv1-topic");
    uniq(other, sizeof(other), "tp-no-such-topic");
    create_topic(fd, topic, 2);
    ec = initpid_retry(fd, 4, txn, 60000, -1, -1, &pid, &epoch, NULL);
    CHECK_EC(ec, KP_ERR_NONE, "InitProducerId");

    /* AddPartitionsToTxn, client form */
    ec = add_part1(fd, 3, "tp-never-initialised-id", pid, epoch, topic, 0);
    CHECK_EC(ec, KP_ERR_INVALID_PRODUCER_ID_MAPPING, "unknown transactional id");
    ec = add_part1(fd, 3, txn, pid + 100000, epoch, topic, 0);
    CHECK_EC(ec, KP_ERR_INVALID_PRODUCER_ID_MAPPING, "other producer id");
    ec = add_part1(fd, 3, txn, pid, (int16_t)(epoch + 1), topic, 0);
    CHECK_EC(ec, KP_ERR_PRODUCER_FENCED, "v3 wrong epoch");
    ec = add_part1(fd, 1, txn, pid, (int16_t)(epoch + 1), topic, 0);
    CHECK_EC(ec, KP_ERR_INVALID_PRODUCER_EPOCH, "v1 wrong epoch");
    add_parts(fd, 3, txn, pid, epoch, topic, p01, 1, other, p01, 1, errs);
    CHECK_EC(errs[0], KP_ERR_OPERATION_NOT_ATTEMPTED, "existing partition next to a missing one");
    CHECK_EC(errs[1], KP_ERR_UNKNOWN_TOPIC_OR_PARTITION, "missing topic");
    ec = add_parts(fd, 3, txn, pid, epoch, topic, p5, 1, NULL, NULL, 0, errs);
    CHECK_EC(ec, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION, "missing partition");
    ec = add_part1(fd, 3, txn, pid, epoch, topic, 0);
    CHECK_EC(ec, KP_ERR_NONE, "add partition 0");
    ec = add_part1(fd, 3, txn, pid, epoch, topic, 0);
    CHECK_EC(ec, KP_ERR_NONE, "add partition 0 again");

    /* v4 verify-only (what a Kafka partition leader sends its coordinator) */
    add_parts_batched(fd, 4, txn, pid, epoch, true, topic, p01, 2, &top, errs);
    CHECK_EC(top, KP_ERR_NONE, "v4 verify top-level");
    CHECK_EC(errs[0], KP_ERR_NONE, "v4 verify added partition");
    CHECK_EC(errs[1], KP_ERR_TRANSACTION_ABORTABLE, "v4 verify partition not added");
    add_parts_batched(fd, 4, txn, pid, (int16_t)(epoch + 1), true, topic, p01, 2, &top, errs);
    CHECK_EC(errs[0], KP_ERR_PRODUCER_FENCED, "v4 verify wrong epoch");
    add_parts_batched(fd, 4, "tp-never-initialised-id", pid, epoch, true, topic, p01, 1, &top,
                      errs);
    CHECK_EC(errs[0], KP_ERR_INVALID_PRODUCER_ID_MAPPING, "v4 verify unknown id");

    /* transactional Produce */
    ec = produce_txn_v(fd, 10, txn, topic, 1, pid, epoch, 0, 3, NULL);
    CHECK_EC(ec, KP_ERR_INVALID_TXN_STATE, "produce v10 to a partition not added");
    /* Kafka 4.4 answers TRANSACTION_ABORTABLE from Produce v11 on (clients that know it). */
    ec = produce_txn_v(fd, 11, txn, topic, 1, pid, epoch, 0, 3, NULL);
    CHECK_EC(ec, KP_ERR_TRANSACTION_ABORTABLE, "produce v11 to a partition not added");
    ec = produce_txn(fd, txn, topic, 0, pid, epoch, 0, 3, &base);
    CHECK_EC(ec, KP_ERR_NONE, "transactional produce");
    CHECK(base == 0, "base offset %" PRId64, base);
    CHECK(latest(fd, topic, 0, 0) == 3, "high watermark 3");
    CHECK(latest(fd, topic, 0, 1) == 0, "last stable offset held at 0 by the open transaction");
    describe_producers(fd, topic, 0, pid, &ps);
    CHECK(ps.err == 0 && ps.n == 1 && ps.pid == pid && ps.epoch == epoch && ps.txn_start == 0,
          "DescribeProducers: err %d n %d pid %" PRId64 " epoch %d txn start %" PRId64, ps.err,
          ps.n, ps.pid, ps.epoch, ps.txn_start);
    fetch(fd, topic, 0, 0, 1, &fr);
    CHECK(fr.err == 0 && fr.records == 0 && fr.lso == 0,
          "read_committed fetch of the open transaction: err %d records %d lso %" PRId64, fr.err,
          fr.records, fr.lso);

    /* EndTxn */
    ec = end_txn(fd, 4, txn, pid, (int16_t)(epoch + 1), true, NULL, NULL);
    CHECK_EC(ec, KP_ERR_PRODUCER_FENCED, "EndTxn v4 wrong epoch");
    ec = end_txn(fd, 1, txn, pid, (int16_t)(epoch + 1), true, NULL, NULL);
    CHECK_EC(ec, KP_ERR_INVALID_PRODUCER_EPOCH, "EndTxn v1 wrong epoch");
    ec = end_txn(fd, 4, "tp-never-initialised-id", pid, epoch, true, NULL, NULL);
    CHECK_EC(ec, KP_ERR_INVALID_PRODUCER_ID_MAPPING, "EndTxn unknown id");
    ec = end_txn(fd, 4, txn, pid, epoch, true, NULL, NULL);
    CHECK_EC(ec, KP_ERR_NONE, "commit");
    CHECK(wait_lso(fd, topic, 0, 4) == 4, "LSO after the COMMIT marker is 4");
    ec = end_txn_retry(fd, 4, txn, pid, epoch, true, NULL, NULL);
    CHECK_EC(ec, KP_ERR_NONE, "commit retried");
    ec = end_txn(fd, 4, txn, pid, epoch, false, NULL, NULL);
    CHECK_EC(ec, KP_ERR_INVALID_TXN_STATE, "abort after commit");
    fetch(fd, topic, 0, 0, 1, &fr);
    CHECK(fr.records == 3 && fr.aborted_cnt == 0, "read_committed: %d records, %d aborted",
          fr.records, fr.aborted_cnt);
    describe_producers(fd, topic, 0, pid, &ps);
    CHECK(ps.txn_start == -1, "no open transaction after the commit (%" PRId64 ")", ps.txn_start);

    /* an aborted transaction */
    ec = add_part1(fd, 3, txn, pid, epoch, topic, 0);
    CHECK_EC(ec, KP_ERR_NONE, "add partition for the second transaction");
    ec = produce_txn(fd, txn, topic, 0, pid, epoch, 3, 2, &base);
    CHECK_EC(ec, KP_ERR_NONE, "produce in the second transaction");
    CHECK(base == 4, "base offset %" PRId64, base);
    ec = end_txn_retry(fd, 4, txn, pid, epoch, false, NULL, NULL);
    CHECK_EC(ec, KP_ERR_NONE, "abort");
    CHECK(wait_lso(fd, topic, 0, 7) == 7, "LSO after the ABORT marker is 7");
    fetch(fd, topic, 0, 0, 1, &fr);
    CHECK(fr.records == 5 && fr.aborted_cnt == 1 && fr.aborted_pid == pid && fr.aborted_first == 4,
          "read_committed fetch: %d records, %d aborted (pid %" PRId64 ", first %" PRId64 ")",
          fr.records, fr.aborted_cnt, fr.aborted_pid, fr.aborted_first);
    fetch(fd, topic, 0, 0, 0, &fr);
    CHECK(fr.records == 5 && fr.aborted_cnt <= 0, "read_uncommitted fetch: %d records", fr.records);
    ec = end_txn(fd, 4, txn, pid, epoch, false, NULL, NULL);
    CHECK_EC(ec, KP_ERR_NONE, "abort retried");
    ec = end_txn(fd, 4, txn, pid, epoch, true, NULL, NULL);
    CHECK_EC(ec, KP_ERR_INVALID_TXN_STATE, "commit after abort");

    /* AddOffsetsToTxn */
    ec = add_offsets(fd, 3, txn, pid, (int16_t)(epoch + 1), "tp-group");
    CHECK_EC(ec, KP_ERR_PRODUCER_FENCED, "AddOffsetsToTxn v3 wrong epoch");
    ec = add_offsets(fd, 1, txn, pid, (int16_t)(epoch + 1), "tp-group");
    CHECK_EC(ec, KP_ERR_INVALID_PRODUCER_EPOCH, "AddOffsetsToTxn v1 wrong epoch");
    ec = add_offsets(fd, 3, txn, pid, epoch, "tp-group");
    CHECK_EC(ec, KP_ERR_NONE, "AddOffsetsToTxn");
    ec = end_txn_retry(fd, 3, txn, pid, epoch, false, &rpid, &rep);
    CHECK_EC(ec, KP_ERR_NONE, "abort the offsets-only transaction");

    /* EndTxn on a fresh id (Empty) */
    uniq(txn, sizeof(txn), "tp-tv1-empty");
    ec = initpid_retry(fd, 4, txn, 60000, -1, -1, &pid, &epoch, NULL);
    CHECK_EC(ec, KP_ERR_NONE, "InitProducerId");
    ec = end_txn(fd, 4, txn, pid, epoch, true, NULL, NULL);
    CHECK_EC(ec, KP_ERR_INVALID_TXN_STATE, "commit without a transaction");
    ec = end_txn(fd, 4, txn, pid, epoch, false, NULL, NULL);
    CHECK_EC(ec, KP_ERR_INVALID_TXN_STATE, "TV1 abort without a transaction");
}

static void scen_fencing(int fd)
{
    char txn[128], topic[128];
    int64_t pid, pid2, base;
    int16_t epoch, epoch2, ec, first = -1;
    fetch_res_t fr;
    producer_st_t ps;

    uniq(txn, sizeof(txn), "tp-fence");
    uniq(topic, sizeof(topic), "tp-fence-topic");
    create_topic(fd, topic, 1);
    ec = initpid_retry(fd, 4, txn, 60000, -1, -1, &pid, &epoch, NULL);
    CHECK_EC(ec, KP_ERR_NONE, "first producer");
    CHECK_EC(add_part1(fd, 3, txn, pid, epoch, topic, 0), KP_ERR_NONE, "add partition");
    CHECK_EC(produce_txn(fd, txn, topic, 0, pid, epoch, 0, 2, &base), KP_ERR_NONE, "produce");
    /* a second instance: the first one's transaction is aborted first */
    ec = initpid_retry(fd, 4, txn, 60000, -1, -1, &pid2, &epoch2, &first);
    CHECK_EC(first, KP_ERR_CONCURRENT_TRANSACTIONS, "InitProducerId on an ongoing transaction");
    CHECK_EC(ec, KP_ERR_NONE, "InitProducerId retried");
    CHECK(pid2 == pid && epoch2 == epoch + 2, "new instance: pid %" PRId64 " epoch %d (old %d)",
          pid2, epoch2, epoch);
    CHECK(wait_lso(fd, topic, 0, 3) == 3, "the fenced transaction was aborted (LSO 3)");
    fetch(fd, topic, 0, 0, 1, &fr);
    CHECK(fr.aborted_cnt == 1 && fr.aborted_pid == pid && fr.aborted_first == 0,
          "aborted transaction listed: %d", fr.aborted_cnt);
    describe_producers(fd, topic, 0, pid, &ps);
    CHECK(ps.epoch == epoch + 1, "the ABORT marker carries the fencing epoch %d (got %d)",
          epoch + 1, ps.epoch);
    /* the old instance */
    ec = end_txn(fd, 4, txn, pid, epoch, true, NULL, NULL);
    CHECK_EC(ec, KP_ERR_PRODUCER_FENCED, "old instance's commit");
    ec = add_part1(fd, 3, txn, pid, epoch, topic, 0);
    CHECK_EC(ec, KP_ERR_PRODUCER_FENCED, "old instance's AddPartitionsToTxn");
    ec = produce_txn(fd, txn, topic, 0, pid, epoch, 2, 1, NULL);
    CHECK_EC(ec, KP_ERR_INVALID_PRODUCER_EPOCH, "old instance's produce");
    /* the new instance works */
    CHECK_EC(add_part1(fd, 3, txn, pid2, epoch2, topic, 0), KP_ERR_NONE, "new instance adds");
    CHECK_EC(produce_txn(fd, txn, topic, 0, pid2, epoch2, 0, 1, &base), KP_ERR_NONE,
             "new instance produces");
    CHECK_EC(end_txn_retry(fd, 4, txn, pid2, epoch2, true, NULL, NULL), KP_ERR_NONE,
             "new instance commits");
    CHECK(wait_lso(fd, topic, 0, 5) == 5, "LSO 5 after the commit");
}

static void scen_tv2(int fd)
{
    char txn[128], topic[128];
    int64_t pid, rpid = -1;
    int16_t epoch, rep = -1, ec;

    uniq(txn, sizeof(txn), "tp-tv2");
    uniq(topic, sizeof(topic), "tp-tv2-topic");
    create_topic(fd, topic, 1);
    ec = initpid_retry(fd, 5, txn, 60000, -1, -1, &pid, &epoch, NULL);
    CHECK_EC(ec, KP_ERR_NONE, "InitProducerId");
    CHECK_EC(add_part1(fd, 3, txn, pid, epoch, topic, 0), KP_ERR_NONE, "add partition");
    CHECK_EC(produce_txn(fd, txn, topic, 0, pid, epoch, 0, 2, NULL), KP_ERR_NONE, "produce");
    ec = end_txn(fd, 5, txn, pid, epoch, true, &rpid, &rep);
    CHECK_EC(ec, KP_ERR_NONE, "EndTxn v5 commit");
    CHECK(rpid == pid && rep == epoch + 1, "EndTxn v5 bumps the epoch: pid %" PRId64 " epoch %d",
          rpid, rep);
    CHECK(wait_lso(fd, topic, 0, 3) == 3, "LSO 3 after the commit");
    ec = end_txn_retry(fd, 5, txn, pid, epoch, true, &rpid, &rep);
    CHECK_EC(ec, KP_ERR_NONE, "EndTxn v5 retried with the old epoch");
    CHECK(rpid == pid && rep == epoch + 1, "retry answers the bumped epoch %d", rep);
    ec = end_txn(fd, 5, txn, pid, (int16_t)(epoch + 1), true, &rpid, &rep);
    CHECK_EC(ec, KP_ERR_INVALID_TXN_STATE, "EndTxn v5 commit without a transaction");
    ec = end_txn(fd, 5, txn, pid, (int16_t)(epoch + 1), false, &rpid, &rep);
    CHECK_EC(ec, KP_ERR_NONE, "EndTxn v5 abort without a transaction (allowed with TV2)");
    CHECK(rep == epoch + 2, "epoch after the empty abort %d", rep);
    ec = end_txn_retry(fd, 5, txn, pid, epoch, true, &rpid, &rep);
    CHECK_EC(ec, KP_ERR_PRODUCER_FENCED, "EndTxn v5 with a stale epoch");
}

static void scen_markers(int fd)
{
    char txn[128], topic[128];
    int64_t pid;
    int16_t epoch, ec;
    producer_st_t ps;

    uniq(txn, sizeof(txn), "tp-wtm");
    uniq(topic, sizeof(topic), "tp-wtm-topic");
    create_topic(fd, topic, 1);
    ec = initpid_retry(fd, 4, txn, 60000, -1, -1, &pid, &epoch, NULL);
    CHECK_EC(ec, KP_ERR_NONE, "InitProducerId");
    CHECK_EC(add_part1(fd, 3, txn, pid, epoch, topic, 0), KP_ERR_NONE, "add partition");
    CHECK_EC(produce_txn(fd, txn, topic, 0, pid, epoch, 0, 2, NULL), KP_ERR_NONE, "produce");
    ec = write_marker(fd, pid, epoch, true, 0, topic, 7);
    CHECK_EC(ec, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION, "WriteTxnMarkers to a missing partition");
    ec = write_marker(fd, pid, epoch, true, 0, topic, 0);
    CHECK_EC(ec, KP_ERR_NONE, "WriteTxnMarkers COMMIT");
    CHECK(latest(fd, topic, 0, 1) == 3, "LSO after the marker");
    describe_producers(fd, topic, 0, pid, &ps);
    CHECK(ps.txn_start == -1, "transaction closed by the marker");
    ec = write_marker(fd, pid, (int16_t)(epoch - 1), false, 0, topic, 0);
    if (epoch > 0)
        CHECK_EC(ec, KP_ERR_INVALID_PRODUCER_EPOCH, "marker with an older producer epoch");
    /* let the coordinator finish its own transaction */
    CHECK_EC(end_txn_retry(fd, 4, txn, pid, epoch, true, NULL, NULL), KP_ERR_NONE, "EndTxn");
}

static void scen_timeout(int fd)
{
    char txn[128], topic[128];
    int64_t pid, pid2;
    int16_t epoch, epoch2, ec;

    uniq(txn, sizeof(txn), "tp-timeout");
    uniq(topic, sizeof(topic), "tp-timeout-topic");
    create_topic(fd, topic, 1);
    ec = initpid_retry(fd, 4, txn, 1000, -1, -1, &pid, &epoch, NULL);
    CHECK_EC(ec, KP_ERR_NONE, "InitProducerId with a 1 s timeout");
    CHECK_EC(add_part1(fd, 3, txn, pid, epoch, topic, 0), KP_ERR_NONE, "add partition");
    CHECK_EC(produce_txn(fd, txn, topic, 0, pid, epoch, 0, 2, NULL), KP_ERR_NONE, "produce");
    /* Kafka checks every transaction.abort.timed.out.transaction.cleanup.interval.ms (10 s by
     * default); kbroker every second. */
    CHECK(wait_lso(fd, topic, 0, 3) == 3, "the timed-out transaction was aborted (LSO 3)");
    ec = end_txn(fd, 4, txn, pid, epoch, true, NULL, NULL);
    CHECK_EC(ec, KP_ERR_PRODUCER_FENCED, "commit after the timeout");
    ec = initpid_retry(fd, 4, txn, 60000, -1, -1, &pid2, &epoch2, NULL);
    CHECK_EC(ec, KP_ERR_NONE, "a new instance");
    CHECK(pid2 == pid && epoch2 == epoch + 2, "epoch %d after the timeout abort (was %d)", epoch2,
          epoch);
}

/* TxnOffsetCommit of one partition @p part of @p topic; the partition's error (or -100). */
static int16_t txn_offset_commit(int fd, int16_t ver, const char *txn, int64_t pid, int16_t epoch,
                                 const char *group, const char *topic, int32_t part)
{
    kp_TxnOffsetCommitRequest_t rq;
    kp_TxnOffsetCommitResponse_t resp;
    kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestTopic_t t;
    kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestPartition_t p;
    kp_arena_t ar;
    int16_t ec = -100;
    kp_TxnOffsetCommitRequest_init(&rq);
    kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestTopic_init(&t);
    kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestPartition_init(&p);
    rq.TransactionalId = S(txn);
    rq.GroupId = S(group);
    rq.ProducerId = pid;
    rq.ProducerEpoch = epoch;
    rq.MemberId = S("");
    t.Name = S(topic);
    p.PartitionIndex = part;
    p.CommittedOffset = 1;
    p.CommittedMetadata = S("");
    t.Partitions.v = &p;
    t.Partitions.cnt = 1;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    kp_arena_init(&ar, 0);
    kp_TxnOffsetCommitResponse_init(&resp);
    if (kbat_call(fd, KP_APIKEY_TxnOffsetCommit, ver, &rq, &resp, &ar) == 0 &&
        resp.Topics.cnt == 1 && resp.Topics.v[0].Partitions.cnt == 1)
        ec = resp.Topics.v[0].Partitions.v[0].ErrorCode;
    kp_arena_free(&ar);
    return ec;
}

static void scen_txn_offsets(int fd)
{
    char txn[128], txn2[128], topic[128], group[128];
    int64_t pid, pid2;
    int16_t epoch, epoch2, ec, ok_ec;

    uniq(txn, sizeof(txn), "tp-toc");
    uniq(txn2, sizeof(txn2), "tp-toc2");
    uniq(topic, sizeof(topic), "tp-toc-topic");
    uniq(group, sizeof(group), "tp-toc-group");
    create_topic(fd, topic, 1);
    CHECK_EC(initpid_retry(fd, 4, txn, 60000, -1, -1, &pid, &epoch, NULL), KP_ERR_NONE, "init");
    CHECK_EC(initpid_retry(fd, 4, txn2, 60000, -1, -1, &pid2, &epoch2, NULL), KP_ERR_NONE,
             "init 2");
    CHECK_EC(add_offsets(fd, 3, txn, pid, epoch, group), KP_ERR_NONE, "AddOffsetsToTxn");
    ec = txn_offset_commit(fd, 3, txn, pid, epoch, group, "tp-no-such-topic", 0);
    CHECK_EC(ec, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION, "TxnOffsetCommit unknown topic");
    ec = txn_offset_commit(fd, 3, txn, pid, epoch, group, topic, 9);
    CHECK_EC(ec, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION, "TxnOffsetCommit unknown partition");
    /* the group coordinator's part: kbroker without one answers COORDINATOR_NOT_AVAILABLE */
    ok_ec = g_kafka || g_groups ? KP_ERR_NONE : KP_ERR_COORDINATOR_NOT_AVAILABLE;
    ec = txn_offset_commit(fd, 3, txn, pid, epoch, group, topic, 0);
    CHECK_EC(ec, ok_ec, "TxnOffsetCommit v3");
    ec = txn_offset_commit(fd, 3, txn, pid, (int16_t)(epoch + 1), group, topic, 0);
    CHECK_EC(ec, KP_ERR_INVALID_PRODUCER_EPOCH, "TxnOffsetCommit wrong epoch");
    /* the group's offsets partition is not in txn2's transaction */
    CHECK_EC(add_part1(fd, 3, txn2, pid2, epoch2, topic, 0), KP_ERR_NONE, "txn2 add partition");
    ec = txn_offset_commit(fd, 3, txn2, pid2, epoch2, group, topic, 0);
    CHECK_EC(ec, KP_ERR_INVALID_TXN_STATE, "TxnOffsetCommit v3 without AddOffsetsToTxn");
    /* v5+ is transaction version 2: the offsets partition is added implicitly */
    ec = txn_offset_commit(fd, 5, txn2, pid2, (int16_t)(epoch2 + 1), group, topic, 0);
    CHECK_EC(ec, g_kafka || g_groups ? KP_ERR_INVALID_PRODUCER_EPOCH : ok_ec,
             "TxnOffsetCommit v5 wrong epoch");
    ec = txn_offset_commit(fd, 5, txn2, pid2, epoch2, group, topic, 0);
    CHECK_EC(ec, ok_ec, "TxnOffsetCommit v5 without AddOffsetsToTxn");
    CHECK_EC(end_txn_retry(fd, 4, txn, pid, epoch, true, NULL, NULL), KP_ERR_NONE, "commit");
    CHECK_EC(end_txn_retry(fd, 4, txn2, pid2, epoch2, false, NULL, NULL), KP_ERR_NONE, "abort");
}

/* DescribeTransactions / ListTransactions. */
typedef struct desc_s {
    int16_t err;
    char state[32];
    int64_t pid, start;
    int32_t timeout, ntopics, nparts;
} desc_t;

static void describe_txn(int fd, const char *txn, desc_t *d)
{
    kp_DescribeTransactionsRequest_t rq;
    kp_DescribeTransactionsResponse_t resp;
    kp_arena_t ar;
    kp_str_t ids[1] = {S(txn)};
    memset(d, 0, sizeof(*d));
    d->err = -100;
    kp_DescribeTransactionsRequest_init(&rq);
    rq.TransactionalIds.v = ids;
    rq.TransactionalIds.cnt = 1;
    kp_arena_init(&ar, 0);
    kp_DescribeTransactionsResponse_init(&resp);
    if (kbat_call(fd, KP_APIKEY_DescribeTransactions, 0, &rq, &resp, &ar) == 0 &&
        resp.TransactionStates.cnt == 1) {
        kp_DescribeTransactionsResponse_TransactionState_t *t = &resp.TransactionStates.v[0];
        d->err = t->ErrorCode;
        snprintf(d->state, sizeof(d->state), "%.*s", (int)t->TransactionState.len,
                 t->TransactionState.ptr);
        d->pid = t->ProducerId;
        d->start = t->TransactionStartTimeMs;
        d->timeout = t->TransactionTimeoutMs;
        d->ntopics = t->Topics.cnt;
        for (int32_t i = 0; i < t->Topics.cnt; i++)
            d->nparts += t->Topics.v[i].Partitions.cnt;
    }
    kp_arena_free(&ar);
}

/* ListTransactions: whether @p txn is listed (with @p state), unknown filters count. */
static int16_t list_txns(int fd, int16_t ver, const char *state_filter, int64_t pid_filter,
                         const char *pattern, const char *txn, bool *found, char *state,
                         int32_t *unknown)
{
    kp_ListTransactionsRequest_t rq;
    kp_ListTransactionsResponse_t resp;
    kp_arena_t ar;
    kp_str_t sf[1] = {S(state_filter)};
    int64_t pf[1] = {pid_filter};
    int16_t ec = -100;
    *found = false;
    kp_ListTransactionsRequest_init(&rq);
    if (state_filter) {
        rq.StateFilters.v = sf;
        rq.StateFilters.cnt = 1;
    }
    if (pid_filter >= 0) {
        rq.ProducerIdFilters.v = pf;
        rq.ProducerIdFilters.cnt = 1;
    }
    if (pattern)
        rq.TransactionalIdPattern = S(pattern);
    kp_arena_init(&ar, 0);
    kp_ListTransactionsResponse_init(&resp);
    if (kbat_call(fd, KP_APIKEY_ListTransactions, ver, &rq, &resp, &ar) == 0) {
        ec = resp.ErrorCode;
        *unknown = resp.UnknownStateFilters.cnt;
        for (int32_t i = 0; i < resp.TransactionStates.cnt; i++) {
            kp_ListTransactionsResponse_TransactionState_t *t = &resp.TransactionStates.v[i];
            if (t->TransactionalId.len == (int32_t)strlen(txn) &&
                !memcmp(t->TransactionalId.ptr, txn, strlen(txn))) {
                *found = true;
                snprintf(state, 32, "%.*s", (int)t->TransactionState.len, t->TransactionState.ptr);
            }
        }
    }
    kp_arena_free(&ar);
    return ec;
}

static void scen_describe_list(int fd)
{
    char txn[128], topic[128], state[32] = "", pat[160];
    int64_t pid;
    int16_t epoch, ec;
    int32_t unknown = -1;
    bool found;
    desc_t d;

    uniq(txn, sizeof(txn), "tp-desc");
    uniq(topic, sizeof(topic), "tp-desc-topic");
    create_topic(fd, topic, 2);
    CHECK_EC(initpid_retry(fd, 4, txn, 45000, -1, -1, &pid, &epoch, NULL), KP_ERR_NONE,
             "InitProducerId");
    describe_txn(fd, txn, &d);
    CHECK(d.err == 0 && !strcmp(d.state, "Empty") && d.pid == pid && d.timeout == 45000 &&
              d.start == -1 && d.ntopics == 0,
          "Empty: err %d state %s start %" PRId64, d.err, d.state, d.start);
    CHECK_EC(add_part1(fd, 3, txn, pid, epoch, topic, 0), KP_ERR_NONE, "add 0");
    CHECK_EC(add_part1(fd, 3, txn, pid, epoch, topic, 1), KP_ERR_NONE, "add 1");
    describe_txn(fd, txn, &d);
    CHECK(d.err == 0 && !strcmp(d.state, "Ongoing") && d.ntopics == 1 && d.nparts == 2 &&
              d.start > 0,
          "Ongoing: err %d state %s topics %d partitions %d", d.err, d.state, d.ntopics, d.nparts);
    ec = list_txns(fd, 0, "Ongoing", -1, NULL, txn, &found, state, &unknown);
    CHECK(ec == 0 && found && !strcmp(state, "Ongoing") && unknown == 0,
          "ListTransactions Ongoing: err %d found %d", ec, found);
    ec = list_txns(fd, 0, "CompleteAbort", -1, NULL, txn, &found, state, &unknown);
    CHECK(ec == 0 && !found, "ListTransactions CompleteAbort filter lists it: %d", found);
    ec = list_txns(fd, 0, "Bogus", -1, NULL, txn, &found, state, &unknown);
    CHECK(ec == 0 && unknown == 1, "unknown state filter: err %d unknown %d", ec, unknown);
    ec = list_txns(fd, 0, NULL, pid, NULL, txn, &found, state, &unknown);
    CHECK(ec == 0 && found, "producer id filter");
    ec = list_txns(fd, 0, NULL, pid + 100000, NULL, txn, &found, state, &unknown);
    CHECK(ec == 0 && !found, "other producer id filter");
    snprintf(pat, sizeof(pat), "tp-desc-.*");
    ec = list_txns(fd, 2, NULL, -1, pat, txn, &found, state, &unknown);
    CHECK(ec == 0 && found, "v2 pattern %s: err %d found %d", pat, ec, found);
    ec = list_txns(fd, 2, NULL, -1, "desc", txn, &found, state, &unknown);
    CHECK(ec == 0 && !found, "v2 pattern must match the whole id");
    ec = list_txns(fd, 2, NULL, -1, "(", txn, &found, state, &unknown);
    CHECK_EC(ec, KP_ERR_INVALID_REGULAR_EXPRESSION, "v2 invalid pattern");
    CHECK_EC(end_txn_retry(fd, 4, txn, pid, epoch, true, NULL, NULL), KP_ERR_NONE, "commit");
    {
        int64_t deadline = kbat_now_ms() + 30000;
        for (;;) {
            describe_txn(fd, txn, &d);
            if (!strcmp(d.state, "CompleteCommit") || kbat_now_ms() > deadline)
                break;
            kbat_silent(fd, 50);
        }
    }
    CHECK(d.err == 0 && !strcmp(d.state, "CompleteCommit") && d.ntopics == 0,
          "CompleteCommit: state %s topics %d", d.state, d.ntopics);
    describe_txn(fd, "tp-never-initialised-id", &d);
    CHECK_EC(d.err, KP_ERR_TRANSACTIONAL_ID_NOT_FOUND, "DescribeTransactions unknown id");
    describe_txn(fd, "", &d);
    CHECK_EC(d.err, KP_ERR_INVALID_REQUEST, "DescribeTransactions empty id");
}

/* ---- main ------------------------------------------------------------------------------------ */

static void run_one(void (*fn)(int fd))
{
    int fd = kbat_connect(g_port);
    CHECK(fd >= 0, "connect to port %d", g_port);
    if (fd < 0)
        return;
    fn(fd);
    close(fd);
}

static void run_all(void)
{
    if (!g_skip_fc)
        run_one(scen_find_coordinator);
    run_one(scen_init_pid);
    run_one(scen_txn_tv1);
    run_one(scen_fencing);
    run_one(scen_tv2);
    run_one(scen_markers);
    run_one(scen_timeout);
    run_one(scen_txn_offsets);
    run_one(scen_describe_list);
}

int main(int argc, char **argv)
{
    snprintf(g_sfx, sizeof(g_sfx), "%lld-%d", (long long)kbat_now_ms(), (int)getpid());
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            g_port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kafka"))
            g_kafka = true;
        else if (!strcmp(argv[i], "--skip-find-coordinator"))
            g_skip_fc = true;
        else if (!strcmp(argv[i], "--groups"))
            g_groups = true;
    }
    if (g_port) {
        run_all();
    } else {
        kbat_broker_t b;
        char dir[512], err[256];
        kb_txn_t *c;
        kb_txn_opts_t o;
        const char *kv[] = {"num.io.threads=4", "transaction.state.log.num.partitions=5", NULL};
        if (kbat_tmpdir(dir, sizeof(dir)) != 0 || kbat_broker_start(&b, dir, kv) != 0) {
            printf("cannot start the in-process broker\n");
            return 1;
        }
        memset(&o, 0, sizeof(o));
        o.svc = b.svc;
        o.tick_ms = 100;
        /* The api service registered its provisional InitProducerId; the coordinator takes
         * over, as kbroker's module order arranges. */
        kb_api_unregister(b.reg, KP_APIKEY_InitProducerId);
        c = kb_txn_new(&o, err, sizeof(err));
        if (!c || kb_txn_register(c, b.reg) != 0 ||
            kb_txn_register_find_coordinator(c, b.reg) != 0 || kb_txn_start(c) != 0) {
            printf("cannot start the transaction coordinator: %s\n", c ? "register" : err);
            return 1;
        }
        g_port = b.port;
        run_all();
        kb_txn_stop(c);
        kb_txn_unregister(c);
        kb_txn_free(c);
        kbat_broker_stop(&b);
        kbat_rmrf(dir);
    }
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
