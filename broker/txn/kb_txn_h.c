/*
 * kb_txn_h.c -- the transaction APIs of kbroker:
 *
 *   InitProducerId 0-6, AddPartitionsToTxn 0-5 (v4+ batched broker form, VerifyOnly),
 *   AddOffsetsToTxn 0-4, EndTxn 0-5, WriteTxnMarkers 1-2, TxnOffsetCommit 0-6 (through the group
 *   hook), DescribeProducers 0 (partition leader), FindCoordinator 0-6 (only when no other
 *   component registered it), DescribeTransactions 0, ListTransactions 0-2.
 *
 * Error codes follow Kafka 4.x per version: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for
 * InitProducerId v0-3 and AddPartitionsToTxn / AddOffsetsToTxn / EndTxn v0-1.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "kb_apilog.h"
#include "kb_err.h"
#include "kb_txn_int.h"
#include "kp_errcode.h"
#include "kp_msgs.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static int kb_txn_h_decode(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, void *msg)
{
    kp_msg_init(desc, msg);
    if (kp_msg_decode(desc, &ctx->body, ctx->arena, msg, ctx->api_version) != 0) {
        kb_log_debug("txn", "%s: malformed %s v%d: %s", ctx->peer, desc->name, ctx->api_version,
                     ctx->body.errstr ? ctx->body.errstr : "?");
        return -1;
    }
    return 0;
}

static kb_api_result_t kb_txn_h_respond(kb_reqctx_t *ctx, const kp_msg_desc_t *desc,
                                        const void *msg, kb_resp_t **respp)
{
    kp_writer_t wr;
    kp_writer_init(&wr);
    if (kp_msg_encode(desc, &wr, msg, ctx->api_version) != 0) {
        kb_log_error("txn", "cannot encode %s v%d", desc->name, ctx->api_version);
        kp_writer_free(&wr);
        return KB_API_CLOSE;
    }
    *respp = kb_resp_from_writer(&wr);
    kp_writer_free(&wr);
    return *respp ? KB_API_RESPOND : KB_API_CLOSE;
}

/* NUL-terminated copy of @p s in the request arena; NULL for a null string. */
static char *kb_txn_h_str(kp_arena_t *ar, kp_str_t s)
{
    char *p;
    if (s.len < 0)
        return NULL;
    p = kp_arena_alloc(ar, (size_t)s.len + 1);
    if (!p)
        return NULL;
    memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = '\0';
    return p;
}

/* A view of a copy of @p s in the request arena. */
static kp_str_t kb_txn_h_dupstr(kp_arena_t *ar, const char *s)
{
    size_t n = strlen(s);
    char *p = kp_arena_alloc(ar, n + 1);
    if (!p)
        return (kp_str_t){"", 0};
    memcpy(p, s, n + 1);
    return (kp_str_t){p, (int32_t)n};
}

/* Kafka's answer to old clients that do not know PRODUCER_FENCED. */
static int16_t kb_txn_h_fenced(int16_t ec, bool old)
{
    return old && ec == KP_ERR_PRODUCER_FENCED ? KP_ERR_INVALID_PRODUCER_EPOCH : ec;
}

static int kb_txn_h_reg(kb_txn_t *c, kb_api_registry_t *reg, int16_t key, int16_t min, int16_t max,
                        kb_api_handler_fn *fn, unsigned flags)
{
    const kp_api_info_t *info = kp_api_lookup(key);
    int rc;
    if (!info)
        return KB_E_NOT_FOUND;
    if (min < info->min_ver)
        min = info->min_ver;
    if (max > info->max_ver)
        max = info->max_ver;
    rc = kb_api_register(reg, key, min, max, fn, c, flags);
    if (rc == 0 && c->registered_cnt < sizeof(c->registered) / sizeof(c->registered[0]))
        c->registered[c->registered_cnt++] = key;
    return rc;
}

/* Whether partition @p topic / @p partition exists. Without @p write (WriteTxnMarkers): a replica
 * here. With @p write (AddPartitionsToTxn, on the coordinator, which need not hold a replica):
 * the partition is in the metadata image. Either way, where this broker leads the partition it
 * must accept client writes by its write mode (kb_part_write_refusal: mirrored read-only or
 * pending partitions refuse them, ARCHITECTURE §4; Produce gets the same rule). A follower's
 * write mode is not kept (the plugin sets it where it leads), so a follower replica is not
 * asked: the leader refuses the writes themselves. NONE or an error code. */
static int16_t kb_txn_h_part_check(kb_txn_t *c, const char *topic, int32_t partition, bool write)
{
    kb_part_t *part;
    kb_topic_info_t ti;
    int16_t ec = KP_ERR_NONE;
    int rc = kb_meta_part(c->meta, topic ? topic : "", partition, &part);
    if (rc != KB_META_OK) {
        if (rc == KB_META_OFFLINE)
            return KP_ERR_KAFKA_STORAGE_ERROR;
        if (write && kb_meta_topic_by_name(c->meta, topic ? topic : "", &ti) == 0 &&
            partition >= 0 && partition < ti.partitions)
            return KP_ERR_NONE; /* led and held by other brokers */
        return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    }
    if (kb_part_role(part) == KB_PART_LEADER) {
        const char *why;
        ec = kb_part_write_refusal(part, &why);
    }
    kb_part_release(part);
    return ec;
}

/* ---- InitProducerId -------------------------------------------------------------------------- */

static kb_api_result_t kb_txn_h_initpid(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_txn_t *c = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_InitProducerIdRequest_t rq;
    kp_InitProducerIdResponse_t resp;
    int16_t ver = ctx->api_version, ec, epoch;
    int64_t pid;
    char *txn_id;

    if (kb_txn_h_decode(ctx, &kp_InitProducerIdRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_InitProducerIdResponse_init(&resp);
    resp.ProducerId = KB_TXN_NO_PID;
    resp.ProducerEpoch = KB_TXN_NO_EPOCH;
    txn_id = kb_txn_h_str(ctx->arena, rq.TransactionalId);
    if ((rq.ProducerId == KB_TXN_NO_PID) != (rq.ProducerEpoch == KB_TXN_NO_EPOCH)) {
        ec = KP_ERR_INVALID_REQUEST;
    } else if (txn_id && *txn_id && rq.Enable2Pc) {
        /* KIP-939 two-phase commit is not offered: Kafka's answer while
         * transaction.two.phase.commit.enable is off (its default). */
        ec = KP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
    } else if (txn_id && *txn_id && rq.KeepPreparedTxn) {
        ec = KP_ERR_UNSUPPORTED_VERSION; /* as Kafka 4.4 */
    } else {
        ec = kb_txn_init_producer_id(c, txn_id, rq.TransactionTimeoutMs, rq.ProducerId,
                                     rq.ProducerEpoch, &pid, &epoch);
        if (ec == KP_ERR_NONE) {
            resp.ProducerId = pid;
            resp.ProducerEpoch = epoch;
        }
    }
    resp.ErrorCode = kb_txn_h_fenced(ec, ver < 4);
    if (ec)
        kb_log_debug("txn", "%s: InitProducerId v%d for %s: %s", ctx->peer, ver,
                     txn_id ? txn_id : "(idempotent)", kp_errcode_name(resp.ErrorCode));
    return kb_txn_h_respond(ctx, &kp_InitProducerIdResponse_desc, &resp, respp);
}

/* ---- AddPartitionsToTxn ---------------------------------------------------------------------- */

typedef kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic_t kb_txn_h_aptopic_t;
typedef kp_AddPartitionsToTxnResponse_AddPartitionsToTxnTopicResult_t kb_txn_h_aptres_t;
typedef kp_AddPartitionsToTxnResponse_AddPartitionsToTxnPartitionResult_t kb_txn_h_apres_t;

/* One transaction of AddPartitionsToTxn: results per partition into @p *res / @p *res_cnt. */
static int kb_txn_h_add_one(kb_txn_t *c, kb_reqctx_t *ctx, kp_str_t txn_id_s, int64_t pid,
                            int16_t epoch, bool verify_only, const kb_txn_h_aptopic_t *topics,
                            int32_t topic_cnt, kb_txn_h_aptres_t **res, int32_t *res_cnt)
{
    kp_arena_t *ar = ctx->arena;
    int16_t ver = ctx->api_version;
    char *txn_id = kb_txn_h_str(ar, txn_id_s);
    kb_txn_h_aptres_t *tr;
    kb_txn_tp_t *tps;
    size_t ntp = 0, k = 0;
    bool missing = false;

    topic_cnt = topic_cnt > 0 ? topic_cnt : 0;
    tr = kp_arena_calloc(ar, (size_t)topic_cnt + 1, sizeof(*tr));
    if (!tr)
        return -1;
    for (int32_t t = 0; t < topic_cnt; t++)
        ntp += topics[t].Partitions.cnt > 0 ? (size_t)topics[t].Partitions.cnt : 0;
    tps = kp_arena_calloc(ar, ntp + 1, sizeof(*tps));
    if (!tps)
        return -1;
    /* Partitions that do not exist (or refuse client writes) get their error, the others
     * OPERATION_NOT_ATTEMPTED, as Kafka does. */
    for (int32_t t = 0; t < topic_cnt; t++) {
        const kb_txn_h_aptopic_t *rt = &topics[t];
        int32_t np = rt->Partitions.cnt > 0 ? rt->Partitions.cnt : 0;
        char *name = kb_txn_h_str(ar, rt->Name);
        kp_AddPartitionsToTxnResponse_AddPartitionsToTxnTopicResult_init(&tr[t]);
        tr[t].Name = rt->Name;
        tr[t].ResultsByPartition.cnt = np;
        tr[t].ResultsByPartition.v =
            kp_arena_calloc(ar, (size_t)np + 1, sizeof(*tr[t].ResultsByPartition.v));
        if (!tr[t].ResultsByPartition.v)
            return -1;
        for (int32_t i = 0; i < np; i++) {
            kb_txn_h_apres_t *pr = &tr[t].ResultsByPartition.v[i];
            kp_AddPartitionsToTxnResponse_AddPartitionsToTxnPartitionResult_init(pr);
            pr->PartitionIndex = rt->Partitions.v[i];
            pr->PartitionErrorCode = kb_txn_h_part_check(c, name, rt->Partitions.v[i], true);
            if (pr->PartitionErrorCode)
                missing = true;
            tps[k].topic = name ? name : (char *)"";
            tps[k].partition = rt->Partitions.v[i];
            k++;
        }
    }
    k = 0;
    if (missing) {
        for (int32_t t = 0; t < topic_cnt; t++)
            for (int32_t i = 0; i < tr[t].ResultsByPartition.cnt; i++)
                if (!tr[t].ResultsByPartition.v[i].PartitionErrorCode)
                    tr[t].ResultsByPartition.v[i].PartitionErrorCode =
                        KP_ERR_OPERATION_NOT_ATTEMPTED;
    } else if (verify_only) {
        for (int32_t t = 0; t < topic_cnt; t++)
            for (int32_t i = 0; i < tr[t].ResultsByPartition.cnt; i++, k++)
                tr[t].ResultsByPartition.v[i].PartitionErrorCode =
                    kb_txn_verify(c, txn_id, pid, epoch, tps[k].topic, tps[k].partition);
    } else {
        int16_t ec = ntp ? kb_txn_add_partitions(c, txn_id, pid, epoch, tps, ntp, ver >= 5 ? 2 : 0)
                         : KP_ERR_NONE;
        ec = kb_txn_h_fenced(ec, ver < 2);
        for (int32_t t = 0; t < topic_cnt; t++)
            for (int32_t i = 0; i < tr[t].ResultsByPartition.cnt; i++)
                tr[t].ResultsByPartition.v[i].PartitionErrorCode = ec;
        if (ec)
            kb_log_debug("txn", "%s: AddPartitionsToTxn v%d for %s: %s", ctx->peer, ver,
                         txn_id ? txn_id : "(null)", kp_errcode_name(ec));
    }
    *res = tr;
    *res_cnt = topic_cnt;
    return 0;
}

static kb_api_result_t kb_txn_h_addparts(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_txn_t *c = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_AddPartitionsToTxnRequest_t rq;
    kp_AddPartitionsToTxnResponse_t resp;

    if (kb_txn_h_decode(ctx, &kp_AddPartitionsToTxnRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_AddPartitionsToTxnResponse_init(&resp);
    if (ctx->api_version <= 3) {
        if (kb_txn_h_add_one(c, ctx, rq.V3AndBelowTransactionalId, rq.V3AndBelowProducerId,
                             rq.V3AndBelowProducerEpoch, false, rq.V3AndBelowTopics.v,
                             rq.V3AndBelowTopics.cnt, &resp.ResultsByTopicV3AndBelow.v,
                             &resp.ResultsByTopicV3AndBelow.cnt) != 0)
            return KB_API_CLOSE;
    } else {
        int32_t n = rq.Transactions.cnt > 0 ? rq.Transactions.cnt : 0;
        resp.ResultsByTransaction.cnt = n;
        resp.ResultsByTransaction.v =
            kp_arena_calloc(ctx->arena, (size_t)n + 1, sizeof(*resp.ResultsByTransaction.v));
        if (!resp.ResultsByTransaction.v)
            return KB_API_CLOSE;
        for (int32_t i = 0; i < n; i++) {
            const kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTransaction_t *t =
                &rq.Transactions.v[i];
            kp_AddPartitionsToTxnResponse_AddPartitionsToTxnResult_t *r =
                &resp.ResultsByTransaction.v[i];
            kp_AddPartitionsToTxnResponse_AddPartitionsToTxnResult_init(r);
            r->TransactionalId = t->TransactionalId;
            if (kb_txn_h_add_one(c, ctx, t->TransactionalId, t->ProducerId, t->ProducerEpoch,
                                 t->VerifyOnly, t->Topics.v, t->Topics.cnt, &r->TopicResults.v,
                                 &r->TopicResults.cnt) != 0)
                return KB_API_CLOSE;
        }
    }
    return kb_txn_h_respond(ctx, &kp_AddPartitionsToTxnResponse_desc, &resp, respp);
}

/* ---- AddOffsetsToTxn, EndTxn ----------------------------------------------------------------- */

static kb_api_result_t kb_txn_h_addoffsets(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_txn_t *c = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_AddOffsetsToTxnRequest_t rq;
    kp_AddOffsetsToTxnResponse_t resp;
    char *txn_id, *group;
    int16_t ec;

    if (kb_txn_h_decode(ctx, &kp_AddOffsetsToTxnRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_AddOffsetsToTxnResponse_init(&resp);
    txn_id = kb_txn_h_str(ctx->arena, rq.TransactionalId);
    group = kb_txn_h_str(ctx->arena, rq.GroupId);
    if (!group) {
        ec = KP_ERR_INVALID_REQUEST;
    } else {
        /* Kafka creates __consumer_offsets when the group's coordinator is looked up; a client
         * may get here first (its FindCoordinator went to the transaction coordinator). */
        kb_meta_ensure_internal_topic(c->meta, KB_TOPIC_CONSUMER_OFFSETS, NULL);
        ec = kb_txn_add_offsets(c, txn_id, rq.ProducerId, rq.ProducerEpoch, group);
    }
    resp.ErrorCode = kb_txn_h_fenced(ec, ctx->api_version < 2);
    return kb_txn_h_respond(ctx, &kp_AddOffsetsToTxnResponse_desc, &resp, respp);
}

static kb_api_result_t kb_txn_h_endtxn(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_txn_t *c = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_EndTxnRequest_t rq;
    kp_EndTxnResponse_t resp;
    int64_t pid;
    int16_t epoch, ec;
    char *txn_id;

    if (kb_txn_h_decode(ctx, &kp_EndTxnRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_EndTxnResponse_init(&resp);
    txn_id = kb_txn_h_str(ctx->arena, rq.TransactionalId);
    ec = kb_txn_end(c, txn_id, rq.ProducerId, rq.ProducerEpoch, rq.Committed, ctx->api_version >= 5,
                    &pid, &epoch);
    resp.ErrorCode = kb_txn_h_fenced(ec, ctx->api_version < 2);
    resp.ProducerId = pid;
    resp.ProducerEpoch = epoch;
    if (ec)
        kb_log_debug("txn", "%s: EndTxn v%d (%s) for %s: %s", ctx->peer, ctx->api_version,
                     rq.Committed ? "commit" : "abort", txn_id ? txn_id : "(null)",
                     kp_errcode_name(ec));
    return kb_txn_h_respond(ctx, &kp_EndTxnResponse_desc, &resp, respp);
}

/* ---- WriteTxnMarkers ------------------------------------------------------------------------- */

static kb_api_result_t kb_txn_h_markers(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_txn_t *c = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    kp_WriteTxnMarkersRequest_t rq;
    kp_WriteTxnMarkersResponse_t resp;
    int32_t nm;

    if (kb_txn_h_decode(ctx, &kp_WriteTxnMarkersRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_WriteTxnMarkersResponse_init(&resp);
    nm = rq.Markers.cnt > 0 ? rq.Markers.cnt : 0;
    resp.Markers.cnt = nm;
    resp.Markers.v = kp_arena_calloc(ar, (size_t)nm + 1, sizeof(*resp.Markers.v));
    if (!resp.Markers.v)
        return KB_API_CLOSE;
    for (int32_t m = 0; m < nm; m++) {
        const kp_WriteTxnMarkersRequest_WritableTxnMarker_t *mk = &rq.Markers.v[m];
        kp_WriteTxnMarkersResponse_WritableTxnMarkerResult_t *mr = &resp.Markers.v[m];
        int32_t nt = mk->Topics.cnt > 0 ? mk->Topics.cnt : 0;
        kp_WriteTxnMarkersResponse_WritableTxnMarkerResult_init(mr);
        mr->ProducerId = mk->ProducerId;
        mr->Topics.cnt = nt;
        mr->Topics.v = kp_arena_calloc(ar, (size_t)nt + 1, sizeof(*mr->Topics.v));
        if (!mr->Topics.v)
            return KB_API_CLOSE;
        for (int32_t t = 0; t < nt; t++) {
            const kp_WriteTxnMarkersRequest_WritableTxnMarkerTopic_t *rt = &mk->Topics.v[t];
            kp_WriteTxnMarkersResponse_WritableTxnMarkerTopicResult_t *tr = &mr->Topics.v[t];
            int32_t np = rt->PartitionIndexes.cnt > 0 ? rt->PartitionIndexes.cnt : 0;
            char *name = kb_txn_h_str(ar, rt->Name);
            kp_WriteTxnMarkersResponse_WritableTxnMarkerTopicResult_init(tr);
            tr->Name = rt->Name;
            tr->Partitions.cnt = np;
            tr->Partitions.v = kp_arena_calloc(ar, (size_t)np + 1, sizeof(*tr->Partitions.v));
            if (!tr->Partitions.v)
                return KB_API_CLOSE;
            for (int32_t i = 0; i < np; i++) {
                kp_WriteTxnMarkersResponse_WritableTxnMarkerPartitionResult_t *pr =
                    &tr->Partitions.v[i];
                int32_t p = rt->PartitionIndexes.v[i];
                int16_t ec;
                kp_WriteTxnMarkersResponse_WritableTxnMarkerPartitionResult_init(pr);
                pr->PartitionIndex = p;
                ec = kb_txn_h_part_check(c, name, p, false);
                if (ec == KP_ERR_NONE)
                    ec = kb_txn_write_marker(c, name, p, mk->ProducerId, mk->ProducerEpoch,
                                             mk->CoordinatorEpoch, mk->TransactionResult);
                pr->ErrorCode = ec;
            }
        }
    }
    return kb_txn_h_respond(ctx, &kp_WriteTxnMarkersResponse_desc, &resp, respp);
}

/* ---- TxnOffsetCommit ------------------------------------------------------------------------- */

/* The error a Kafka 4.x group coordinator answers when the transaction check of a
 * TxnOffsetCommit fails (verification through AddPartitionsToTxnManager, then the group
 * coordinator's exception mapping). */
static int16_t kb_txn_h_toc_err(int16_t ec, int16_t ver)
{
    switch (ec) {
    case KP_ERR_PRODUCER_FENCED:
        return KP_ERR_INVALID_PRODUCER_EPOCH;
    case KP_ERR_TRANSACTION_ABORTABLE:
        return ver >= 5 ? KP_ERR_TRANSACTION_ABORTABLE : KP_ERR_INVALID_TXN_STATE;
    case KP_ERR_CONCURRENT_TRANSACTIONS:
    case KP_ERR_COORDINATOR_LOAD_IN_PROGRESS:
    case KP_ERR_NOT_COORDINATOR:
        return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    default:
        return ec;
    }
}

typedef kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestTopic_t kb_txn_h_toctopic_t;
typedef kp_TxnOffsetCommitResponse_TxnOffsetCommitResponseTopic_t kb_txn_h_tocres_t;

/* Kafka's answer for a partition that does not exist (v6 names topics by id). */
static int16_t kb_txn_h_toc_exists(kb_txn_t *c, kp_arena_t *ar, int16_t ver,
                                   const kb_txn_h_toctopic_t *rt, int32_t partition)
{
    kb_part_t *part = NULL;
    int rc;
    if (ver >= 6)
        rc = kb_meta_part_by_id(c->meta, &rt->TopicId, partition, &part);
    else
        rc = kb_meta_part(c->meta, kb_txn_h_str(ar, rt->Name) ?: "", partition, &part);
    if (part)
        kb_part_release(part);
    if (rc == KB_META_OK)
        return KP_ERR_NONE;
    return ver >= 6 && rc == KB_META_UNKNOWN_TOPIC ? KP_ERR_UNKNOWN_TOPIC_ID
                                                   : KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
}

static kb_api_result_t kb_txn_h_txnoffsets(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_txn_t *c = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    int16_t ver = ctx->api_version;
    kp_TxnOffsetCommitRequest_t rq, frq;
    kp_TxnOffsetCommitResponse_t resp, fresp;
    int32_t nt, nvalid = 0;
    int16_t ec;

    if (kb_txn_h_decode(ctx, &kp_TxnOffsetCommitRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_TxnOffsetCommitResponse_init(&resp);
    nt = rq.Topics.cnt > 0 ? rq.Topics.cnt : 0;
    resp.Topics.cnt = nt;
    resp.Topics.v = kp_arena_calloc(ar, (size_t)nt + 1, sizeof(*resp.Topics.v));
    /* The partitions that exist go to the group coordinator (frq / fresp); the others get
     * UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID by id), as Kafka's KafkaApis answers. */
    frq = rq;
    frq.Topics.cnt = 0;
    frq.Topics.v = kp_arena_calloc(ar, (size_t)nt + 1, sizeof(*frq.Topics.v));
    kp_TxnOffsetCommitResponse_init(&fresp);
    fresp.Topics.v = kp_arena_calloc(ar, (size_t)nt + 1, sizeof(*fresp.Topics.v));
    if (!resp.Topics.v || !frq.Topics.v || !fresp.Topics.v)
        return KB_API_CLOSE;
    for (int32_t t = 0; t < nt; t++) {
        const kb_txn_h_toctopic_t *rt = &rq.Topics.v[t];
        kb_txn_h_tocres_t *tr = &resp.Topics.v[t];
        kb_txn_h_toctopic_t *ft = &frq.Topics.v[frq.Topics.cnt];
        kb_txn_h_tocres_t *fr = &fresp.Topics.v[fresp.Topics.cnt];
        int32_t np = rt->Partitions.cnt > 0 ? rt->Partitions.cnt : 0;
        kp_TxnOffsetCommitResponse_TxnOffsetCommitResponseTopic_init(tr);
        tr->Name = rt->Name;
        tr->TopicId = rt->TopicId;
        tr->Partitions.cnt = np;
        tr->Partitions.v = kp_arena_calloc(ar, (size_t)np + 1, sizeof(*tr->Partitions.v));
        *ft = *rt;
        ft->Partitions.cnt = 0;
        ft->Partitions.v = kp_arena_calloc(ar, (size_t)np + 1, sizeof(*ft->Partitions.v));
        kp_TxnOffsetCommitResponse_TxnOffsetCommitResponseTopic_init(fr);
        fr->Name = rt->Name;
        fr->TopicId = rt->TopicId;
        fr->Partitions.v = kp_arena_calloc(ar, (size_t)np + 1, sizeof(*fr->Partitions.v));
        if (!tr->Partitions.v || !ft->Partitions.v || !fr->Partitions.v)
            return KB_API_CLOSE;
        for (int32_t i = 0; i < np; i++) {
            kp_TxnOffsetCommitResponse_TxnOffsetCommitResponsePartition_t *pr =
                &tr->Partitions.v[i];
            kp_TxnOffsetCommitResponse_TxnOffsetCommitResponsePartition_init(pr);
            pr->PartitionIndex = rt->Partitions.v[i].PartitionIndex;
            pr->ErrorCode = kb_txn_h_toc_exists(c, ar, ver, rt, pr->PartitionIndex);
            if (pr->ErrorCode)
                continue;
            ft->Partitions.v[ft->Partitions.cnt++] = rt->Partitions.v[i];
            kp_TxnOffsetCommitResponse_TxnOffsetCommitResponsePartition_init(
                &fr->Partitions.v[fr->Partitions.cnt]);
            fr->Partitions.v[fr->Partitions.cnt++].PartitionIndex = pr->PartitionIndex;
            nvalid++;
        }
        if (ft->Partitions.cnt) {
            frq.Topics.cnt++;
            fresp.Topics.cnt++;
        }
    }
    if (nvalid) {
        ec = kb_txn_offset_commit(c, ctx, &frq, &fresp, ver >= 5);
        if (ec) {
            ec = kb_txn_h_toc_err(ec, ver);
            kb_log_debug("txn", "%s: TxnOffsetCommit v%d: %s", ctx->peer, ver, kp_errcode_name(ec));
        }
        /* Copy the answers back in request order. */
        for (int32_t t = 0, f = 0; t < nt && f < fresp.Topics.cnt; t++) {
            kb_txn_h_tocres_t *tr = &resp.Topics.v[t];
            int32_t k = 0;
            bool any = false;
            for (int32_t i = 0; i < tr->Partitions.cnt; i++) {
                if (tr->Partitions.v[i].ErrorCode)
                    continue;
                any = true;
                if (k < fresp.Topics.v[f].Partitions.cnt)
                    tr->Partitions.v[i].ErrorCode =
                        ec ? ec : fresp.Topics.v[f].Partitions.v[k].ErrorCode;
                k++;
            }
            if (any)
                f++;
        }
    }
    return kb_txn_h_respond(ctx, &kp_TxnOffsetCommitResponse_desc, &resp, respp);
}

/* ---- DescribeProducers ----------------------------------------------------------------------- */

static kb_api_result_t kb_txn_h_descproducers(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_txn_t *c = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    kp_DescribeProducersRequest_t rq;
    kp_DescribeProducersResponse_t resp;
    int32_t nt;

    if (kb_txn_h_decode(ctx, &kp_DescribeProducersRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_DescribeProducersResponse_init(&resp);
    nt = rq.Topics.cnt > 0 ? rq.Topics.cnt : 0;
    resp.Topics.cnt = nt;
    resp.Topics.v = kp_arena_calloc(ar, (size_t)nt + 1, sizeof(*resp.Topics.v));
    if (!resp.Topics.v)
        return KB_API_CLOSE;
    for (int32_t t = 0; t < nt; t++) {
        const kp_DescribeProducersRequest_TopicRequest_t *rt = &rq.Topics.v[t];
        kp_DescribeProducersResponse_TopicResponse_t *tr = &resp.Topics.v[t];
        int32_t np = rt->PartitionIndexes.cnt > 0 ? rt->PartitionIndexes.cnt : 0;
        char *name = kb_txn_h_str(ar, rt->Name);
        kp_DescribeProducersResponse_TopicResponse_init(tr);
        tr->Name = rt->Name;
        tr->Partitions.cnt = np;
        tr->Partitions.v = kp_arena_calloc(ar, (size_t)np + 1, sizeof(*tr->Partitions.v));
        if (!tr->Partitions.v)
            return KB_API_CLOSE;
        for (int32_t i = 0; i < np; i++) {
            kp_DescribeProducersResponse_PartitionResponse_t *pr = &tr->Partitions.v[i];
            kb_part_t *part = NULL;
            kb_producer_info_t *ps = NULL;
            size_t cnt = 0;
            int rc;
            kp_DescribeProducersResponse_PartitionResponse_init(pr);
            pr->PartitionIndex = rt->PartitionIndexes.v[i];
            rc = kb_meta_part(c->meta, name ? name : "", pr->PartitionIndex, &part);
            if (rc != KB_META_OK) {
                pr->ErrorCode = rc == KB_META_OFFLINE ? KP_ERR_KAFKA_STORAGE_ERROR
                                                      : KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
                continue;
            }
            if (kb_log_producers(part->log, &ps, &cnt) != 0) {
                pr->ErrorCode = KP_ERR_KAFKA_STORAGE_ERROR;
                kb_part_release(part);
                continue;
            }
            kb_part_release(part);
            pr->ActiveProducers.cnt = (int32_t)cnt;
            pr->ActiveProducers.v = kp_arena_calloc(ar, cnt + 1, sizeof(*pr->ActiveProducers.v));
            if (!pr->ActiveProducers.v) {
                free(ps);
                return KB_API_CLOSE;
            }
            for (size_t k = 0; k < cnt; k++) {
                kp_DescribeProducersResponse_ProducerState_t *st = &pr->ActiveProducers.v[k];
                kp_DescribeProducersResponse_ProducerState_init(st);
                st->ProducerId = ps[k].producer_id;
                st->ProducerEpoch = ps[k].producer_epoch;
                st->LastSequence = ps[k].last_sequence;
                st->LastTimestamp = ps[k].last_timestamp;
                st->CoordinatorEpoch = ps[k].coordinator_epoch;
                st->CurrentTxnStartOffset = ps[k].txn_first_offset;
            }
            free(ps);
        }
    }
    return kb_txn_h_respond(ctx, &kp_DescribeProducersResponse_desc, &resp, respp);
}

/* ---- DescribeTransactions, ListTransactions -------------------------------------------------- */

static kb_api_result_t kb_txn_h_desctxns(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_txn_t *c = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    kp_DescribeTransactionsRequest_t rq;
    kp_DescribeTransactionsResponse_t resp;
    int32_t n;

    if (kb_txn_h_decode(ctx, &kp_DescribeTransactionsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_DescribeTransactionsResponse_init(&resp);
    n = rq.TransactionalIds.cnt > 0 ? rq.TransactionalIds.cnt : 0;
    resp.TransactionStates.cnt = n;
    resp.TransactionStates.v =
        kp_arena_calloc(ar, (size_t)n + 1, sizeof(*resp.TransactionStates.v));
    if (!resp.TransactionStates.v)
        return KB_API_CLOSE;
    for (int32_t i = 0; i < n; i++) {
        kp_DescribeTransactionsResponse_TransactionState_t *ts = &resp.TransactionStates.v[i];
        char *id = kb_txn_h_str(ar, rq.TransactionalIds.v[i]);
        const char *st;
        kb_txnmeta_t m;
        size_t ntop = 0;
        int rc;
        kp_DescribeTransactionsResponse_TransactionState_init(ts);
        ts->TransactionalId = rq.TransactionalIds.v[i];
        ts->TransactionState = (kp_str_t){"", 0};
        ts->ProducerId = -1;
        ts->ProducerEpoch = -1;
        ts->TransactionStartTimeMs = -1;
        if (!id || !*id) {
            ts->ErrorCode = KP_ERR_INVALID_REQUEST;
            continue;
        }
        if ((rc = kb_txn_describe(c, id, &m, NULL)) != 0) {
            /* KB_E_NOT_FOUND, or the Kafka error of an id this node does not coordinate */
            ts->ErrorCode = rc > 0 ? (int16_t)rc : KP_ERR_TRANSACTIONAL_ID_NOT_FOUND;
            continue;
        }
        st = kb_txnlog_state_name(m.state);
        ts->TransactionState = (kp_str_t){st, (int32_t)strlen(st)};
        ts->TransactionTimeoutMs = m.timeout_ms;
        ts->TransactionStartTimeMs = m.start_ms;
        ts->ProducerId = m.producer_id;
        ts->ProducerEpoch = m.producer_epoch;
        for (size_t k = 0; k < m.tps.cnt; k++)
            if (k == 0 || strcmp(m.tps.v[k].topic, m.tps.v[k - 1].topic))
                ntop++;
        ts->Topics.v = kp_arena_calloc(ar, ntop + 1, sizeof(*ts->Topics.v));
        if (!ts->Topics.v) {
            kb_txnmeta_free(&m);
            return KB_API_CLOSE;
        }
        for (size_t k = 0, j; k < m.tps.cnt; k = j) {
            kp_DescribeTransactionsResponse_TopicData_t *td = &ts->Topics.v[ts->Topics.cnt++];
            for (j = k; j < m.tps.cnt && !strcmp(m.tps.v[j].topic, m.tps.v[k].topic); j++)
                ;
            kp_DescribeTransactionsResponse_TopicData_init(td);
            td->Topic = kb_txn_h_dupstr(ar, m.tps.v[k].topic);
            td->Partitions.v = kp_arena_calloc(ar, j - k + 1, sizeof(int32_t));
            if (!td->Partitions.v) {
                kb_txnmeta_free(&m);
                return KB_API_CLOSE;
            }
            for (size_t x = k; x < j; x++)
                td->Partitions.v[td->Partitions.cnt++] = m.tps.v[x].partition;
        }
        kb_txnmeta_free(&m);
    }
    return kb_txn_h_respond(ctx, &kp_DescribeTransactionsResponse_desc, &resp, respp);
}

static int kb_txn_h_state_by_name(kp_str_t name)
{
    for (int st = KB_TXN_EMPTY; st <= KB_TXN_PREPARE_EPOCH_FENCE; st++) {
        const char *n = kb_txnlog_state_name(st);
        if ((size_t)name.len == strlen(n) && !memcmp(name.ptr, n, (size_t)name.len))
            return st;
    }
    return -1;
}

static kb_api_result_t kb_txn_h_listtxns(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_txn_t *c = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    kp_ListTransactionsRequest_t rq;
    kp_ListTransactionsResponse_t resp;
    kb_txn_listing_t *l = NULL;
    size_t n = 0;
    uint32_t states = 0;
    pcre2_code *re = NULL;
    pcre2_match_data *md = NULL;
    int64_t now = kb_txn_now(c);
    int32_t nsf;

    if (kb_txn_h_decode(ctx, &kp_ListTransactionsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_ListTransactionsResponse_init(&resp);
    nsf = rq.StateFilters.cnt > 0 ? rq.StateFilters.cnt : 0;
    resp.UnknownStateFilters.v = kp_arena_calloc(ar, (size_t)nsf + 1, sizeof(kp_str_t));
    if (!resp.UnknownStateFilters.v)
        return KB_API_CLOSE;
    for (int32_t i = 0; i < nsf; i++) {
        int st = kb_txn_h_state_by_name(rq.StateFilters.v[i]);
        if (st < 0)
            resp.UnknownStateFilters.v[resp.UnknownStateFilters.cnt++] = rq.StateFilters.v[i];
        else
            states |= 1u << st;
    }
    if (rq.TransactionalIdPattern.len > 0) {
        /* Java's Pattern.matches(): the whole id must match. */
        int errc;
        PCRE2_SIZE erro;
        re = pcre2_compile((PCRE2_SPTR)rq.TransactionalIdPattern.ptr,
                           (PCRE2_SIZE)rq.TransactionalIdPattern.len,
                           PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF, &errc, &erro, NULL);
        if (!re) {
            resp.ErrorCode = KP_ERR_INVALID_REGULAR_EXPRESSION;
            return kb_txn_h_respond(ctx, &kp_ListTransactionsResponse_desc, &resp, respp);
        }
        md = pcre2_match_data_create_from_pattern(re, NULL);
    }
    if (kb_txn_list(c, &l, &n) != 0) {
        resp.ErrorCode = KP_ERR_UNKNOWN_SERVER_ERROR;
        n = 0;
    }
    resp.TransactionStates.v = kp_arena_calloc(ar, n + 1, sizeof(*resp.TransactionStates.v));
    for (size_t i = 0; resp.TransactionStates.v && i < n; i++) {
        kp_ListTransactionsResponse_TransactionState_t *ts;
        bool pid_ok = rq.ProducerIdFilters.cnt <= 0;
        const char *st;
        for (int32_t k = 0; !pid_ok && k < rq.ProducerIdFilters.cnt; k++)
            pid_ok = rq.ProducerIdFilters.v[k] == l[i].producer_id;
        if (l[i].state == KB_TXN_DEAD || !pid_ok || (states && !(states & (1u << l[i].state))))
            continue;
        if (rq.DurationFilter >= 0 && now - l[i].start_ms <= rq.DurationFilter)
            continue;
        if (re &&
            (!md || pcre2_match(re, (PCRE2_SPTR)l[i].id, strlen(l[i].id), 0, 0, md, NULL) < 0))
            continue;
        ts = &resp.TransactionStates.v[resp.TransactionStates.cnt++];
        kp_ListTransactionsResponse_TransactionState_init(ts);
        ts->TransactionalId = kb_txn_h_dupstr(ar, l[i].id);
        ts->ProducerId = l[i].producer_id;
        st = kb_txnlog_state_name(l[i].state);
        ts->TransactionState = (kp_str_t){st, (int32_t)strlen(st)};
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    kb_txn_listing_free(l, n);
    if (!resp.TransactionStates.v)
        return KB_API_CLOSE;
    return kb_txn_h_respond(ctx, &kp_ListTransactionsResponse_desc, &resp, respp);
}

/* ---- FindCoordinator ------------------------------------------------------------------------- */

#define KB_TXN_KEY_GROUP       0
#define KB_TXN_KEY_TRANSACTION 1

/* This node's advertised endpoint for listener @p listener (bound port for port 0). */
static void kb_txn_h_endpoint(kb_txn_t *c, const char *listener, const char **host, int32_t *port)
{
    const kb_config_t *cfg = c->cfg;
    const kb_config_listener_t *a = NULL;
    for (size_t i = 0; i < cfg->adv_cnt; i++) {
        if (listener && !strcasecmp(cfg->adv[i].name, listener)) {
            a = &cfg->adv[i];
            break;
        }
    }
    if (!a && cfg->adv_cnt)
        a = &cfg->adv[0];
    if (!a) {
        *host = "localhost";
        *port = 9092;
        return;
    }
    *host = a->host[0] ? a->host : "localhost";
    *port = a->port;
    if (*port == 0 && c->svc->srv) {
        int p = kb_server_listener_port(c->svc->srv, a->name);
        if (p < 0 && listener)
            p = kb_server_listener_port(c->svc->srv, listener);
        *port = p;
    }
}

/* Whether a group coordinator serves requests here. */
static bool kb_txn_h_have_groups(kb_txn_t *c)
{
    kb_api_range_t r;
    return kb_api_get(c->reg, KP_APIKEY_JoinGroup, &r) == 0 ||
           kb_api_get(c->reg, KP_APIKEY_OffsetCommit, &r) == 0;
}

static int16_t kb_txn_h_find_one(kb_txn_t *c, kb_reqctx_t *ctx, int8_t type, int32_t *node,
                                 const char **host, int32_t *port)
{
    *node = -1;
    *host = "";
    *port = -1;
    if (type == KB_TXN_KEY_TRANSACTION) {
        /* Any key, the empty one included, maps to a partition (as Kafka). */
        if (kb_txn_ensure_topic(c) != KP_ERR_NONE)
            return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    } else if (type == KB_TXN_KEY_GROUP) {
        if (!kb_txn_h_have_groups(c))
            return KP_ERR_COORDINATOR_NOT_AVAILABLE;
        if (kb_meta_ensure_internal_topic(c->meta, KB_TOPIC_CONSUMER_OFFSETS, NULL) != 0)
            return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    } else {
        return KP_ERR_INVALID_REQUEST;
    }
    *node = kb_meta_node_id(c->meta);
    kb_txn_h_endpoint(c, ctx->listener, host, port);
    return KP_ERR_NONE;
}

/* The ErrorMessage Kafka 4.x puts in FindCoordinator answers: v1-3 the error's description
 * ("NONE" for success); v4+ an empty string, except for a request it cannot serve at all
 * (an unknown key type: INVALID_REQUEST with its description). */
static kp_str_t kb_txn_h_errmsg(int16_t ec, int16_t ver)
{
    const kp_errcode_info_t *ei = kp_errcode_lookup(ec);
    const char *m;
    if (ec == KP_ERR_NONE)
        m = ver >= 4 ? "" : "NONE";
    else if (ver >= 4 && ec != KP_ERR_INVALID_REQUEST)
        m = "";
    else
        m = ei && ei->msg ? ei->msg : "";
    return (kp_str_t){m, (int32_t)strlen(m)};
}

static kb_api_result_t kb_txn_h_findcoord(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_txn_t *c = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    kp_FindCoordinatorRequest_t rq;
    kp_FindCoordinatorResponse_t resp;
    int16_t ver = ctx->api_version;
    const char *host;
    int32_t node, port;

    if (kb_txn_h_decode(ctx, &kp_FindCoordinatorRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_FindCoordinatorResponse_init(&resp);
    if (ver <= 3) {
        int16_t ec = kb_txn_h_find_one(c, ctx, ver >= 1 ? rq.KeyType : KB_TXN_KEY_GROUP, &node,
                                       &host, &port);
        resp.ErrorCode = ec;
        resp.ErrorMessage = kb_txn_h_errmsg(ec, ver);
        resp.NodeId = node;
        resp.Host = (kp_str_t){host, (int32_t)strlen(host)};
        resp.Port = port;
    } else {
        int32_t n = rq.CoordinatorKeys.cnt > 0 ? rq.CoordinatorKeys.cnt : 0;
        resp.Coordinators.cnt = n;
        resp.Coordinators.v = kp_arena_calloc(ar, (size_t)n + 1, sizeof(*resp.Coordinators.v));
        if (!resp.Coordinators.v)
            return KB_API_CLOSE;
        for (int32_t i = 0; i < n; i++) {
            kp_FindCoordinatorResponse_Coordinator_t *co = &resp.Coordinators.v[i];
            int16_t ec = kb_txn_h_find_one(c, ctx, rq.KeyType, &node, &host, &port);
            kp_FindCoordinatorResponse_Coordinator_init(co);
            co->Key = rq.CoordinatorKeys.v[i];
            co->NodeId = node;
            co->Host = (kp_str_t){host, (int32_t)strlen(host)};
            co->Port = port;
            co->ErrorCode = ec;
            co->ErrorMessage = kb_txn_h_errmsg(ec, ver);
        }
    }
    return kb_txn_h_respond(ctx, &kp_FindCoordinatorResponse_desc, &resp, respp);
}

/* ---- registration ---------------------------------------------------------------------------- */

int kb_txn_h_register(kb_txn_t *c, kb_api_registry_t *reg)
{
    kb_api_range_t r;
    int rc = 0;

    /* Transaction APIs are barriers: one connection's requests take effect in order. */
    if (kb_api_get(reg, KP_APIKEY_InitProducerId, &r) == KB_E_NOT_FOUND)
        rc = kb_txn_h_reg(c, reg, KP_APIKEY_InitProducerId, 0, 6, kb_txn_h_initpid, 0);
    else
        kb_log_warn("txn", "InitProducerId is already registered by another component; "
                           "transactional producers will not get their ids from here");
    if (!rc)
        rc = kb_txn_h_reg(c, reg, KP_APIKEY_AddPartitionsToTxn, 0, 5, kb_txn_h_addparts, 0);
    if (!rc)
        rc = kb_txn_h_reg(c, reg, KP_APIKEY_AddOffsetsToTxn, 0, 4, kb_txn_h_addoffsets, 0);
    if (!rc)
        rc = kb_txn_h_reg(c, reg, KP_APIKEY_EndTxn, 0, 5, kb_txn_h_endtxn, 0);
    if (!rc)
        rc = kb_txn_h_reg(c, reg, KP_APIKEY_WriteTxnMarkers, 1, 2, kb_txn_h_markers, 0);
    if (!rc)
        rc = kb_txn_h_reg(c, reg, KP_APIKEY_TxnOffsetCommit, 0, 6, kb_txn_h_txnoffsets, 0);
    if (!rc && kb_api_get(reg, KP_APIKEY_DescribeProducers, &r) == KB_E_NOT_FOUND)
        rc = kb_txn_h_reg(c, reg, KP_APIKEY_DescribeProducers, 0, 0, kb_txn_h_descproducers,
                          KB_API_CONCURRENT);
    if (!rc)
        rc = kb_txn_h_reg(c, reg, KP_APIKEY_DescribeTransactions, 0, 0, kb_txn_h_desctxns,
                          KB_API_CONCURRENT);
    if (!rc)
        rc = kb_txn_h_reg(c, reg, KP_APIKEY_ListTransactions, 0, 2, kb_txn_h_listtxns,
                          KB_API_CONCURRENT);
    return rc;
}

int kb_txn_h_register_find_coordinator(kb_txn_t *c, kb_api_registry_t *reg)
{
    kb_api_range_t r;
    if (kb_api_get(reg, KP_APIKEY_FindCoordinator, &r) != KB_E_NOT_FOUND) {
        kb_log_info("txn", "FindCoordinator is served by another component (transaction keys "
                           "included)");
        return 0;
    }
    return kb_txn_h_reg(c, reg, KP_APIKEY_FindCoordinator, 0, 6, kb_txn_h_findcoord,
                        KB_API_CONCURRENT);
}
