/*
 * kb_h_fetch.c -- Fetch v4-19.
 *
 *  - Sessions (v7+, KIP-227): epoch -1 = sessionless full fetch (closing the named session),
 *    0 = new session with a full fetch, >0 = incremental fetch of an existing session (request
 *    partitions update it, forgotten topics leave it, the response lists only partitions with
 *    records, errors or a changed HW / LSO / log start). FETCH_SESSION_ID_NOT_FOUND,
 *    INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR at the top level.
 *  - Topic ids from v13 (UNKNOWN_TOPIC_ID per partition).
 *  - read_uncommitted up to the HW, read_committed up to the LSO with AbortedTransactions;
 *    followers (replica id >= 0) up to the LEO. A replica fetch must come from a follower in
 *    the partition's replica list to its leader (NOT_LEADER_OR_FOLLOWER otherwise); it records
 *    the follower's fetch offset (kb_part_replica_fetched: HW, ISR expansion) and answers with
 *    the HW after that. A follower partition answers consumers from v11 (up to its HW) and
 *    NOT_LEADER_OR_FOLLOWER to older versions.
 *  - MaxBytes / PartitionMaxBytes with the first batch allowed to exceed them (until some
 *    partition returned data), one segment per partition per response (as Kafka).
 *  - Long poll: not enough bytes for MinBytes -> the request waits in the delayed operations
 *    (kb_dq) until an append on one of its partitions or MaxWaitMs.
 *  - Records go out as file ranges of the segment files (sendfile), not copied.
 *  - CurrentLeaderEpoch (v9+) -> FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH; LastFetchedEpoch
 *    (v12+) -> DivergingEpoch; CurrentLeader and NodeEndpoints (v16+) with leadership errors;
 *    PreferredReadReplica -1; LogStartOffset. v19's MirrorLeaderEpoch is accepted and ignored.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "kb_api_int.h"
#include "kb_fsess.h"
#include "kb_apilog.h"
#include "kb_time.h"
#include "kp_errcode.h"

#define KB_FETCH_SESSIONLESS 0
#define KB_FETCH_FULL        1 /* new session */
#define KB_FETCH_INCR        2

/* One partition of a fetch. */
typedef struct kb_fentry_s {
    char *topic; /* name (v<13) or NULL */
    kp_uuid_t topic_id;
    int32_t partition;
    int64_t fetch_offset;
    int32_t max_bytes;
    int32_t current_leader_epoch;
    int32_t last_fetched_epoch;
    int64_t replica_log_start; /* the follower's LogStartOffset (replica fetches) */
    kb_fsess_part_t *sp;       /* session partition or NULL */
    /* result of the last attempt */
    kb_part_t *part;
    uint64_t seq;
    int16_t err;
    int64_t hw, lso, log_start;
    int32_t leader_epoch;
    int32_t leader_id; /* for CurrentLeader */
    bool diverging;
    int32_t div_epoch;
    int64_t div_end;
    kb_log_read_t rd; /* rd.len > 0: records */
    kb_aborted_txn_t *aborted;
    size_t aborted_cnt;
    bool include;
} kb_fentry_t;

typedef struct kb_fetch_op_s {
    kb_dq_op_t dq; /* first */
    kb_apisvc_t *svc;
    int16_t ver;
    int32_t replica_id;
    int32_t max_wait_ms;
    int32_t min_bytes;
    int32_t max_bytes;
    int8_t isolation;
    char listener[64];
    int mode;
    kb_fsess_t *sess;
    kb_fentry_t *e;
    size_t n;
    kp_arena_t ar; /* topic names */
} kb_fetch_op_t;

static void kb_fetch_release_results(kb_fetch_op_t *op, bool parts)
{
    for (size_t i = 0; i < op->n; i++) {
        kb_fentry_t *e = &op->e[i];
        kb_log_read_release(&e->rd);
        memset(&e->rd, 0, sizeof(e->rd));
        e->rd.fd = -1;
        free(e->aborted);
        e->aborted = NULL;
        e->aborted_cnt = 0;
        if (parts && e->part) {
            kb_part_release(e->part);
            e->part = NULL;
        }
    }
}

static void kb_fetch_op_free(kb_fetch_op_t *op)
{
    if (!op)
        return;
    kb_fetch_release_results(op, true);
    if (op->sess) {
        pthread_mutex_lock(&op->sess->mu);
        op->sess->busy = false;
        pthread_mutex_unlock(&op->sess->mu);
        kb_fsess_release(op->sess);
    }
    free(op->e);
    kp_arena_free(&op->ar);
    kb_dq_op_fini(&op->dq);
    free(op);
}

static void kb_fetch_dq_free(kb_dq_op_t *dq)
{
    kb_fetch_op_free((kb_fetch_op_t *)(void *)dq);
}

/* ---- reading -------------------------------------------------------------------------------- */

/* One attempt over every partition. Returns true when the response can be sent. */
static bool kb_fetch_attempt(kb_fetch_op_t *op, bool final)
{
    kb_apisvc_t *svc = op->svc;
    int64_t total = 0;
    bool any_data = false, urgent = false;
    int iso = op->replica_id >= 0  ? KB_ISOLATION_LEO
              : op->isolation == 1 ? KB_ISOLATION_COMMITTED
                                   : KB_ISOLATION_HW;
    size_t start = 0;

    kb_fetch_release_results(op, true);
    if (op->mode == KB_FETCH_INCR && op->n)
        start = op->sess->rr_start % op->n;
    for (size_t k = 0; k < op->n; k++) {
        kb_fentry_t *e = &op->e[(start + k) % op->n];
        kb_part_t *part = NULL;
        int rc;
        int32_t maxb;

        e->err = 0;
        e->hw = e->lso = e->log_start = -1;
        e->diverging = false;
        e->include = true;
        e->leader_id = kb_meta_node_id(svc->meta);
        rc = op->ver >= 13 ? kb_meta_part_by_id(svc->meta, &e->topic_id, e->partition, &part)
                           : kb_meta_part(svc->meta, e->topic ? e->topic : "", e->partition, &part);
        if (rc != KB_META_OK) {
            e->err = kb_h_lookup_err(rc, op->ver >= 13);
            urgent = true;
            continue;
        }
        e->part = part;
        e->seq = kb_dq_watch_seq(&part->watch);
        e->leader_epoch = kb_part_epoch(part);
        if (kb_part_role(part) != KB_PART_LEADER)
            kb_part_repl_info(part, NULL, &e->leader_id, NULL);
        e->err = kb_h_epoch_check(e->current_leader_epoch, e->leader_epoch);
        /* Followers are not read by replicas, nor by consumers before v11 (which carry no
         * client metadata for fetching from a follower, KIP-392). */
        if (!e->err && kb_part_role(part) != KB_PART_LEADER &&
            (op->replica_id >= 0 || op->ver < 11))
            e->err = KP_ERR_NOT_LEADER_OR_FOLLOWER;
        if (!e->err && op->replica_id >= 0)
            e->err = kb_part_replica_check(part, op->replica_id);
        if (e->err) {
            urgent = true;
            continue;
        }
        if (op->ver >= 12 && e->last_fetched_epoch >= 0) {
            int32_t ee;
            int64_t eo;
            kb_log_epoch_end_offset(part->log, e->last_fetched_epoch, &ee, &eo);
            if (ee < 0 || eo < 0) {
                e->err = KP_ERR_OFFSET_OUT_OF_RANGE;
                urgent = true;
                continue;
            }
            if (ee < e->last_fetched_epoch || eo < e->fetch_offset) {
                e->diverging = true;
                e->div_epoch = ee;
                e->div_end = eo;
                e->hw = kb_log_hw(part->log);
                e->lso = kb_log_lso(part->log);
                e->log_start = kb_log_start_offset(part->log);
                urgent = true;
                continue;
            }
        }
        maxb = e->max_bytes;
        if (op->max_bytes - total < maxb)
            maxb = (int32_t)(op->max_bytes - total);
        if (maxb < 0)
            maxb = 0;
        rc = kb_log_read(part->log, e->fetch_offset, maxb, iso, !any_data, &e->rd);
        if (rc != 0) {
            e->err = kb_h_sto_err(rc);
            urgent = true;
            continue;
        }
        e->hw = e->rd.hw;
        e->lso = e->rd.lso;
        e->log_start = e->rd.log_start;
        if (op->replica_id >= 0) {
            /* The follower has everything below its fetch offset: record it (the HW may
             * move) and answer with the HW as it is now. */
            kb_part_replica_fetched(part, op->replica_id, e->fetch_offset, e->replica_log_start,
                                    e->rd.leo, kb_time_mono_ms());
            e->hw = kb_log_hw(part->log);
            e->lso = kb_log_lso(part->log);
        }
        if (e->rd.len > 0) {
            total += e->rd.len;
            any_data = true;
            if (iso == KB_ISOLATION_COMMITTED)
                kb_log_aborted_txns(part->log, e->fetch_offset, e->rd.next_offset, &e->aborted,
                                    &e->aborted_cnt);
        }
    }
    return final || urgent || total >= op->min_bytes || op->max_wait_ms <= 0;
}

/* ---- the response -----------------------------------------------------------------------------
 */

typedef struct kb_fetch_file_s {
    kb_log_read_t rd;
} kb_fetch_file_t;

static void kb_fetch_file_release(void *opaque)
{
    kb_fetch_file_t *f = opaque;
    kb_log_read_release(&f->rd);
    free(f);
}

#define KB_FETCH_MARKER_LEN 16

/* Decide which partitions go into the response and update the session's view. */
static void kb_fetch_select(kb_fetch_op_t *op)
{
    if (!op->sess)
        return;
    pthread_mutex_lock(&op->sess->mu);
    for (size_t i = 0; i < op->n; i++) {
        kb_fentry_t *e = &op->e[i];
        kb_fsess_part_t *sp = e->sp;
        if (!sp)
            continue;
        if (op->mode == KB_FETCH_INCR)
            e->include = e->err || e->rd.len > 0 || e->diverging || sp->hw != e->hw ||
                         sp->lso != e->lso || sp->log_start != e->log_start;
        sp->hw = e->hw;
        sp->lso = e->lso;
        sp->log_start = e->log_start;
    }
    if (op->mode == KB_FETCH_INCR && op->n)
        op->sess->rr_start = (op->sess->rr_start + 1) % op->n;
    op->sess->last_used_ms = kb_time_mono_ms();
    op->sess->busy = false;
    pthread_mutex_unlock(&op->sess->mu);
}

/* Build the response: the generated encoder writes everything, with a 16-byte marker in place
 * of each partition's records; the output is then cut at the markers and the segment file
 * ranges are put in their place with the right length prefixes. */
static kb_resp_t *kb_fetch_build(kb_fetch_op_t *op, int16_t top_err)
{
    kp_FetchResponse_t resp;
    kp_arena_t ar;
    kp_writer_t wr;
    kb_resp_t *out = NULL;
    uint8_t(*markers)[KB_FETCH_MARKER_LEN] = NULL;
    uint8_t prefix[12];
    size_t nt = 0, nmark = 0, pos = 0;
    bool leader_info = false;
    kb_fentry_t **rec = NULL;

    kp_arena_init(&ar, 0);
    kp_FetchResponse_init(&resp);
    resp.ErrorCode = top_err;
    resp.SessionId = op->sess && !top_err ? op->sess->id : 0;
    if (getrandom(prefix, sizeof(prefix), 0) != (ssize_t)sizeof(prefix))
        memset(prefix, 0xa5, sizeof(prefix));
    for (size_t i = 0; i < sizeof(prefix); i++)
        prefix[i] |= 0x80; /* never text: the rest of the response is names and numbers */

    if (!top_err) {
        kp_FetchResponse_FetchableTopicResponse_t *tv;
        markers = calloc(op->n ? op->n : 1, sizeof(*markers));
        rec = calloc(op->n ? op->n : 1, sizeof(*rec));
        tv = kp_arena_calloc(&ar, op->n ? op->n : 1, sizeof(*tv));
        if (!markers || !rec || !tv)
            goto out;
        for (size_t i = 0; i < op->n; i++) {
            kb_fentry_t *e = &op->e[i];
            kp_FetchResponse_FetchableTopicResponse_t *t;
            kp_FetchResponse_PartitionData_t *pd;
            if (!e->include)
                continue;
            t = nt ? &tv[nt - 1] : NULL;
            if (!t || (op->ver >= 13 ? memcmp(t->TopicId.b, e->topic_id.b, 16)
                                     : (t->Topic.len != (int32_t)strlen(e->topic) ||
                                        memcmp(t->Topic.ptr, e->topic, (size_t)t->Topic.len)))) {
                t = &tv[nt++];
                kp_FetchResponse_FetchableTopicResponse_init(t);
                if (op->ver >= 13)
                    t->TopicId = e->topic_id;
                else
                    t->Topic = kb_h_view(e->topic);
                t->Partitions.v = kp_arena_calloc(&ar, op->n - i, sizeof(*t->Partitions.v));
                if (!t->Partitions.v)
                    goto out;
                t->Partitions.cnt = 0;
            }
            pd = &t->Partitions.v[t->Partitions.cnt++];
            kp_FetchResponse_PartitionData_init(pd);
            pd->PartitionIndex = e->partition;
            pd->ErrorCode = e->err;
            pd->HighWatermark = e->hw;
            pd->LastStableOffset = e->lso;
            pd->LogStartOffset = e->log_start;
            pd->PreferredReadReplica = -1;
            if (e->diverging) {
                pd->DivergingEpoch.Epoch = e->div_epoch;
                pd->DivergingEpoch.EndOffset = e->div_end;
            }
            if (op->ver >= 12 &&
                (e->err == KP_ERR_FENCED_LEADER_EPOCH || e->err == KP_ERR_NOT_LEADER_OR_FOLLOWER)) {
                pd->CurrentLeader.LeaderId = e->leader_id;
                pd->CurrentLeader.LeaderEpoch = e->leader_epoch;
                /* Only this node's endpoint is known here (the leader's comes with the
                 * cluster metadata image). */
                leader_info |= e->leader_id == kb_meta_node_id(op->svc->meta);
            }
            if (op->isolation == 1 && op->replica_id < 0 && !e->err) {
                pd->AbortedTransactions.cnt = (int32_t)e->aborted_cnt;
                pd->AbortedTransactions.v = kp_arena_calloc(
                    &ar, e->aborted_cnt ? e->aborted_cnt : 1, sizeof(*pd->AbortedTransactions.v));
                if (!pd->AbortedTransactions.v)
                    goto out;
                for (size_t k = 0; k < e->aborted_cnt; k++) {
                    kp_FetchResponse_AbortedTransaction_init(&pd->AbortedTransactions.v[k]);
                    pd->AbortedTransactions.v[k].ProducerId = e->aborted[k].producer_id;
                    pd->AbortedTransactions.v[k].FirstOffset = e->aborted[k].first_offset;
                }
            } else {
                pd->AbortedTransactions.cnt = -1;
            }
            if (e->rd.len > 0 && !e->err && !e->diverging) {
                uint32_t idx = (uint32_t)nmark;
                memcpy(markers[nmark], prefix, sizeof(prefix));
                memcpy(markers[nmark] + sizeof(prefix), &idx, sizeof(idx));
                pd->Records.ptr = markers[nmark];
                pd->Records.len = KB_FETCH_MARKER_LEN;
                rec[nmark++] = e;
            } else {
                pd->Records.ptr = (const uint8_t *)"";
                pd->Records.len = 0;
            }
        }
        resp.Responses.v = tv;
        resp.Responses.cnt = (int32_t)nt;
        if (leader_info && op->ver >= 16) {
            const char *host;
            int32_t port;
            resp.NodeEndpoints.v = kp_arena_calloc(&ar, 1, sizeof(*resp.NodeEndpoints.v));
            if (!resp.NodeEndpoints.v)
                goto out;
            kp_FetchResponse_NodeEndpoint_init(&resp.NodeEndpoints.v[0]);
            kb_h_endpoint(op->svc, op->listener, &host, &port);
            resp.NodeEndpoints.v[0].NodeId = kb_meta_node_id(op->svc->meta);
            resp.NodeEndpoints.v[0].Host = kb_h_view(host);
            resp.NodeEndpoints.v[0].Port = port;
            resp.NodeEndpoints.cnt = 1;
        }
    }

    kp_writer_init(&wr);
    if (kp_FetchResponse_encode(&wr, &resp, op->ver) != 0) {
        kb_log_error("api", "cannot encode Fetch v%d: %s", op->ver, kp_err_str(wr.err));
        kp_writer_free(&wr);
        goto out;
    }
    out = kb_resp_new();
    if (!out) {
        kp_writer_free(&wr);
        goto out;
    }
    for (size_t m = 0; m < nmark; m++) {
        kb_fentry_t *e = rec[m];
        size_t plen = op->ver >= 12 ? 1 : 4; /* uvarint(16 + 1) or int32 */
        uint8_t *hit = memmem(wr.buf + pos, wr.len - pos, markers[m], KB_FETCH_MARKER_LEN);
        size_t at;
        kp_writer_t lp;
        uint8_t lbuf[8];
        kb_fetch_file_t *f;
        if (!hit || (size_t)(hit - wr.buf) < pos + plen) {
            kb_log_error("api", "Fetch response: records marker not found");
            kb_resp_free(out);
            out = NULL;
            break;
        }
        at = (size_t)(hit - wr.buf) - plen;
        kb_resp_append_copy(out, wr.buf + pos, at - pos);
        kp_writer_init_fixed(&lp, lbuf, sizeof(lbuf));
        if (op->ver >= 12)
            kp_write_uvarint(&lp, (uint32_t)e->rd.len + 1);
        else
            kp_write_int32(&lp, (int32_t)e->rd.len);
        kb_resp_append_copy(out, lbuf, lp.len);
        f = malloc(sizeof(*f));
        if (!f) {
            kb_resp_free(out);
            out = NULL;
            break;
        }
        f->rd = e->rd; /* the file slice moves into the response */
        memset(&e->rd, 0, sizeof(e->rd));
        e->rd.fd = -1;
        kb_resp_append_file(out, f->rd.fd, (off_t)f->rd.pos, (size_t)f->rd.len,
                            kb_fetch_file_release, f);
        pos = (size_t)(hit - wr.buf) + KB_FETCH_MARKER_LEN;
    }
    if (out) {
        kb_resp_append_copy(out, wr.buf + pos, wr.len - pos);
        if (out->err) {
            kb_resp_free(out);
            out = NULL;
        }
    }
    kp_writer_free(&wr);
out:
    free(markers);
    free(rec);
    kp_arena_free(&ar);
    return out;
}

static kb_resp_t *kb_fetch_finish(kb_fetch_op_t *op)
{
    kb_fetch_select(op);
    return kb_fetch_build(op, KP_ERR_NONE);
}

static bool kb_fetch_try(kb_dq_op_t *dq, bool expired)
{
    kb_fetch_op_t *op = (kb_fetch_op_t *)(void *)dq;
    kb_resp_t *resp;
    if (!kb_fetch_attempt(op, expired)) {
        kb_fetch_release_results(op, true);
        return false;
    }
    resp = kb_fetch_finish(op);
    kb_fetch_release_results(op, true);
    if (resp)
        kb_dq_op_complete(dq, resp);
    else
        kb_dq_op_complete(dq, NULL); /* nothing sensible to send; keep the order */
    return true;
}

/* ---- the request ------------------------------------------------------------------------------
 */

static kb_api_result_t kb_fetch_top_error(kb_reqctx_t *ctx, kb_fetch_op_t *op, int16_t err,
                                          kb_resp_t **respp)
{
    *respp = kb_fetch_build(op, err);
    kb_fetch_op_free(op);
    (void)ctx;
    return *respp ? KB_API_RESPOND : KB_API_CLOSE;
}

/* Fill entry @p e from request partition @p p of topic @p t. */
static int kb_fetch_entry_from_req(kb_fetch_op_t *op, kb_fentry_t *e,
                                   const kp_FetchRequest_FetchTopic_t *t,
                                   const kp_FetchRequest_FetchPartition_t *p)
{
    memset(e, 0, sizeof(*e));
    e->rd.fd = -1;
    if (op->ver >= 13) {
        e->topic_id = t->TopicId;
    } else {
        e->topic = kb_h_str(&op->ar, t->Topic);
        if (!e->topic)
            return -1;
    }
    e->partition = p->Partition;
    e->fetch_offset = p->FetchOffset;
    e->max_bytes = p->PartitionMaxBytes;
    e->current_leader_epoch = p->CurrentLeaderEpoch;
    e->last_fetched_epoch = p->LastFetchedEpoch;
    e->replica_log_start = p->LogStartOffset;
    return 0;
}

static void kb_fetch_sp_update(kb_fsess_part_t *sp, const kp_FetchRequest_FetchPartition_t *p)
{
    sp->fetch_offset = p->FetchOffset;
    sp->max_bytes = p->PartitionMaxBytes;
    sp->current_leader_epoch = p->CurrentLeaderEpoch;
    sp->last_fetched_epoch = p->LastFetchedEpoch;
    sp->log_start_offset = p->LogStartOffset;
}

static kb_api_result_t kb_fetch_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_apisvc_t *svc = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_FetchRequest_t rq;
    kb_fetch_op_t *op;
    int32_t sid = 0, sepoch = -1;
    size_t n = 0;
    bool uses_ids = ctx->api_version >= 13;
    int64_t now = kb_time_mono_ms();

    if (kb_h_decode(ctx, &kp_FetchRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    if (rq.Topics.cnt == 1) {
        /* The metadata log, fetched by the controller's brokers (broker/ctrl serves it). */
        static const kp_uuid_t mid = KB_META_TOPIC_ID_INIT;
        const kp_FetchRequest_FetchTopic_t *t = &rq.Topics.v[0];
        kb_meta_fetch_fn *mf;
        void *mo;
        pthread_rwlock_rdlock(&svc->hook_rw);
        mf = svc->meta_fetch;
        mo = svc->meta_fetch_opaque;
        pthread_rwlock_unlock(&svc->hook_rw);
        if (mf && (uses_ids ? !memcmp(&t->TopicId, &mid, sizeof(mid))
                            : t->Topic.len == (int32_t)strlen(KB_TOPIC_CLUSTER_METADATA) &&
                                  !memcmp(t->Topic.ptr, KB_TOPIC_CLUSTER_METADATA,
                                          strlen(KB_TOPIC_CLUSTER_METADATA))))
            return mf(mo, req, &rq, respp);
    }
    op = calloc(1, sizeof(*op));
    if (!op)
        return KB_API_CLOSE;
    kp_arena_init(&op->ar, 0);
    op->svc = svc;
    op->ver = ctx->api_version;
    op->replica_id = op->ver >= 15 ? rq.ReplicaState.ReplicaId : rq.ReplicaId;
    ctx->replica_fetch = op->replica_id >= 0; /* metrics: follower traffic counted apart */
    op->max_wait_ms = rq.MaxWaitMs;
    op->min_bytes = rq.MinBytes;
    op->max_bytes = rq.MaxBytes > 0 ? rq.MaxBytes : INT32_MAX;
    op->isolation = rq.IsolationLevel;
    snprintf(op->listener, sizeof(op->listener), "%s", ctx->listener ? ctx->listener : "");
    if (op->ver >= 7) {
        sid = rq.SessionId;
        sepoch = rq.SessionEpoch;
    }
    for (int32_t i = 0; i < rq.Topics.cnt; i++)
        n += rq.Topics.v[i].Partitions.cnt > 0 ? (size_t)rq.Topics.v[i].Partitions.cnt : 0;

    if (sepoch == -1 || sepoch == 0) {
        /* Full fetch; a named session is closed (-1) or replaced by a new one (0). */
        if (sid != 0)
            kb_fsess_remove(svc->fsess, sid);
        op->mode = KB_FETCH_SESSIONLESS;
        if (sepoch == 0) {
            op->sess = kb_fsess_create(svc->fsess, uses_ids, n, now);
            if (op->sess)
                op->mode = KB_FETCH_FULL;
        }
        op->e = calloc(n ? n : 1, sizeof(*op->e));
        if (!op->e)
            goto fail;
        if (op->sess)
            pthread_mutex_lock(&op->sess->mu);
        for (int32_t i = 0; i < rq.Topics.cnt; i++) {
            const kp_FetchRequest_FetchTopic_t *t = &rq.Topics.v[i];
            for (int32_t k = 0; k < t->Partitions.cnt; k++) {
                kb_fentry_t *e = &op->e[op->n];
                if (kb_fetch_entry_from_req(op, e, t, &t->Partitions.v[k]) != 0)
                    goto fail_unlock;
                op->n++;
                if (op->sess) {
                    e->sp = kb_fsess_upsert(op->sess, e->topic, &e->topic_id, e->partition);
                    if (!e->sp)
                        goto fail_unlock;
                    kb_fetch_sp_update(e->sp, &t->Partitions.v[k]);
                }
            }
        }
        if (op->sess)
            pthread_mutex_unlock(&op->sess->mu);
        kb_counter_add(op->sess ? svc->m_fetch_full : svc->m_fetch_nosess, 1);
        kb_counter_add(op->sess ? svc->m_fbytes_full : svc->m_fbytes_nosess, ctx->frame_len);
    } else {
        kb_fsess_t *s = kb_fsess_get(svc->fsess, sid);
        int16_t err = 0;
        if (!s) {
            kb_counter_add(svc->m_fetch_sesserr, 1);
            return kb_fetch_top_error(ctx, op, KP_ERR_FETCH_SESSION_ID_NOT_FOUND, respp);
        }
        pthread_mutex_lock(&s->mu);
        if (s->busy || s->epoch != sepoch)
            err = KP_ERR_INVALID_FETCH_SESSION_EPOCH;
        else if (s->uses_ids != uses_ids)
            err = KP_ERR_FETCH_SESSION_TOPIC_ID_ERROR;
        if (err) {
            pthread_mutex_unlock(&s->mu);
            kb_fsess_release(s);
            kb_counter_add(svc->m_fetch_sesserr, 1);
            return kb_fetch_top_error(ctx, op, err, respp);
        }
        s->busy = true;
        s->epoch = kb_fsess_next_epoch(s->epoch);
        kb_counter_add(svc->m_fetch_incr, 1);
        kb_counter_add(svc->m_fbytes_incr, ctx->frame_len);
        s->last_used_ms = now;
        op->sess = s;
        op->mode = KB_FETCH_INCR;
        for (int32_t i = 0; i < rq.Topics.cnt; i++) {
            const kp_FetchRequest_FetchTopic_t *t = &rq.Topics.v[i];
            char *name = uses_ids ? NULL : kb_h_str(&op->ar, t->Topic);
            for (int32_t k = 0; k < t->Partitions.cnt; k++) {
                kb_fsess_part_t *sp =
                    kb_fsess_upsert(s, name, &t->TopicId, t->Partitions.v[k].Partition);
                if (!sp) {
                    pthread_mutex_unlock(&s->mu);
                    goto fail;
                }
                kb_fetch_sp_update(sp, &t->Partitions.v[k]);
            }
        }
        for (int32_t i = 0; i < rq.ForgottenTopicsData.cnt; i++) {
            const kp_FetchRequest_ForgottenTopic_t *f = &rq.ForgottenTopicsData.v[i];
            char *name = uses_ids ? NULL : kb_h_str(&op->ar, f->Topic);
            for (int32_t k = 0; k < f->Partitions.cnt; k++)
                kb_fsess_forget(s, name, &f->TopicId, f->Partitions.v[k]);
        }
        op->e = calloc(s->nparts ? s->nparts : 1, sizeof(*op->e));
        if (!op->e) {
            pthread_mutex_unlock(&s->mu);
            goto fail;
        }
        for (size_t i = 0; i < s->nparts; i++) {
            kb_fsess_part_t *sp = s->parts[i];
            kb_fentry_t *e = &op->e[op->n++];
            e->rd.fd = -1;
            e->sp = sp;
            e->topic = sp->topic ? kb_h_str(&op->ar, kb_h_view(sp->topic)) : NULL;
            e->topic_id = sp->topic_id;
            e->partition = sp->partition;
            e->fetch_offset = sp->fetch_offset;
            e->max_bytes = sp->max_bytes;
            e->current_leader_epoch = sp->current_leader_epoch;
            e->last_fetched_epoch = sp->last_fetched_epoch;
            e->replica_log_start = sp->log_start_offset;
        }
        pthread_mutex_unlock(&s->mu);
    }

    if (kb_fetch_attempt(op, false)) {
        *respp = kb_fetch_finish(op);
        kb_fetch_op_free(op);
        return *respp ? KB_API_RESPOND : KB_API_CLOSE;
    }

    /* Wait for appends or MaxWaitMs. The partitions' references and notification counts are
     * moved out first: once the op is in the dq its thread owns it. */
    {
        kb_dq_watch_t **w = calloc(op->n ? op->n : 1, sizeof(*w));
        kb_part_t **refs = calloc(op->n ? op->n : 1, sizeof(*refs));
        uint64_t *seq = calloc(op->n ? op->n : 1, sizeof(*seq));
        size_t nw = 0;
        int rc;
        if (!w || !refs || !seq || kb_dq_op_init(svc->dq, &op->dq, op->n) != 0) {
            free(w);
            free(refs);
            free(seq);
            goto fail;
        }
        kb_fetch_release_results(op, false);
        for (size_t i = 0; i < op->n; i++) {
            if (!op->e[i].part)
                continue;
            refs[nw] = op->e[i].part;
            w[nw] = &op->e[i].part->watch;
            seq[nw] = op->e[i].seq;
            op->e[i].part = NULL;
            nw++;
        }
        op->dq.try_fn = kb_fetch_try;
        op->dq.free_fn = kb_fetch_dq_free;
        op->dq.req = req;
        rc = kb_req_defer(req, kb_dq_op_cancel, &op->dq);
        if (rc != 0) {
            for (size_t i = 0; i < nw; i++)
                kb_part_release(refs[i]);
            free(w);
            free(refs);
            free(seq);
            kb_fetch_op_free(op);
            return KB_API_NO_RESPONSE; /* the client is gone; nothing is sent */
        }
        kb_dq_op_add(svc->dq, &op->dq, kb_time_mono_ns() + (int64_t)op->max_wait_ms * 1000000, w,
                     seq, nw);
        for (size_t i = 0; i < nw; i++)
            kb_part_release(refs[i]);
        free(w);
        free(refs);
        free(seq);
        return KB_API_DEFERRED;
    }
fail_unlock:
    if (op->sess)
        pthread_mutex_unlock(&op->sess->mu);
fail:
    kb_fetch_op_free(op);
    return KB_API_CLOSE;
}

int kb_h_fetch_register(kb_apisvc_t *svc)
{
    return kb_h_register(svc, KP_APIKEY_Fetch, 4, 19, kb_fetch_handle, KB_API_CONCURRENT);
}
