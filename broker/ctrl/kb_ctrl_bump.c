/*
 * kb_ctrl_bump.c -- BumpLeaderEpochs (105, provisional, proto/schema/bump_leader_epochs.kps) on
 * the controller, and the raw controller channel a broker-only node's plugin host uses for it
 * (kb_apisvc_ctrl_send). See kb_ctrl_bump.h.
 *
 * The request names partitions by topic name (the KIP prototype's layout); the controller
 * resolves the name in its image, so a topic recreated under the same name is bumped as the
 * new topic (the broker's host waits for its own topic id, and a deleted topic ends its wait).
 */
#include "kb_ctrl_bump.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kb_apilog.h"
#include "kb_err.h"
#include "kp_errcode.h"
#include "kp_msgs.h"

kb_api_result_t kb_ctrl_bump_handle(kb_meta_t *meta, kb_req_t *req, kb_resp_t **respp)
{
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_BumpLeaderEpochsRequest_t rq;
    kp_BumpLeaderEpochsResponse_t resp;
    kp_writer_t wr;
    char name[KB_TOPIC_NAME_MAX + 1];

    kp_BumpLeaderEpochsRequest_init(&rq);
    if (kp_msg_decode(&kp_BumpLeaderEpochsRequest_desc, &ctx->body, ctx->arena, &rq,
                      ctx->api_version) != 0) {
        kb_log_info("ctrl", "%s: malformed BumpLeaderEpochs v%d", ctx->peer, ctx->api_version);
        return KB_API_CLOSE;
    }
    kp_BumpLeaderEpochsResponse_init(&resp);
    resp.Topics.cnt = rq.Topics.cnt > 0 ? rq.Topics.cnt : 0;
    resp.Topics.v =
        kp_arena_calloc(ctx->arena, (size_t)resp.Topics.cnt + 1, sizeof(*resp.Topics.v));
    if (!resp.Topics.v)
        return KB_API_CLOSE;
    for (int32_t i = 0; i < resp.Topics.cnt; i++) {
        const kp_BumpLeaderEpochsRequest_TopicState_t *t = &rq.Topics.v[i];
        kp_BumpLeaderEpochsResponse_TopicPartitions_t *rt = &resp.Topics.v[i];
        kb_topic_info_t info;
        bool known;

        kp_BumpLeaderEpochsResponse_TopicPartitions_init(rt);
        rt->TopicName = t->TopicName;
        known = t->TopicName.len > 0 && t->TopicName.len <= KB_TOPIC_NAME_MAX;
        if (known) {
            memcpy(name, t->TopicName.ptr, (size_t)t->TopicName.len);
            name[t->TopicName.len] = '\0';
            known = kb_meta_topic_by_name(meta, name, &info) == 0;
        }
        rt->Partitions.cnt = t->Partitions.cnt > 0 ? t->Partitions.cnt : 0;
        rt->Partitions.v =
            kp_arena_calloc(ctx->arena, (size_t)rt->Partitions.cnt + 1, sizeof(*rt->Partitions.v));
        if (!rt->Partitions.v)
            return KB_API_CLOSE;
        for (int32_t k = 0; k < rt->Partitions.cnt; k++) {
            const kp_BumpLeaderEpochsRequest_LeaderEpochState_t *p = &t->Partitions.v[k];
            kp_BumpLeaderEpochsResponse_PartitionDetail_t *rp = &rt->Partitions.v[k];
            int32_t ne = -1;
            kp_BumpLeaderEpochsResponse_PartitionDetail_init(rp);
            rp->PartitionIndex = p->PartitionIndex;
            rp->ErrorCode = known ? kb_meta_bump_epoch(meta, &info.id, p->PartitionIndex,
                                                       p->MinLeaderEpoch, &ne)
                                  : KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
            if (rp->ErrorCode == KP_ERR_UNKNOWN_TOPIC_ID)
                rp->ErrorCode = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
            if (rp->ErrorCode)
                kb_log_info("ctrl", "%s: BumpLeaderEpochs of %.*s-%" PRId32 " refused (error %d)",
                            ctx->peer, (int)t->TopicName.len,
                            t->TopicName.ptr ? t->TopicName.ptr : "", p->PartitionIndex,
                            (int)rp->ErrorCode);
            else
                kb_log_info("ctrl",
                            "%s: leader epoch of %s-%" PRId32 " raised to %" PRId32
                            " (at least %" PRId32 " asked)",
                            ctx->peer, info.name, p->PartitionIndex, ne, p->MinLeaderEpoch);
        }
    }
    kp_writer_init(&wr);
    if (kp_msg_encode(&kp_BumpLeaderEpochsResponse_desc, &wr, &resp, ctx->api_version) != 0) {
        kp_writer_free(&wr);
        return KB_API_CLOSE;
    }
    *respp = kb_resp_from_writer(&wr);
    kp_writer_free(&wr);
    return *respp ? KB_API_RESPOND : KB_API_CLOSE;
}

/* ---- WritePluginRecords --------------------------------------------------------------------- */

kb_api_result_t kb_ctrl_precs_handle(kb_meta_t *meta, kb_ctrl_reg_t *reg, kb_req_t *req,
                                     kb_resp_t **respp)
{
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_WritePluginRecordsRequest_t rq;
    kp_WritePluginRecordsResponse_t resp;
    kb_ctrl_broker_t b;
    kb_mrec_t *v = NULL;
    kp_writer_t wr;
    char msg[256] = "";

    kp_WritePluginRecordsRequest_init(&rq);
    if (kp_msg_decode(&kp_WritePluginRecordsRequest_desc, &ctx->body, ctx->arena, &rq,
                      ctx->api_version) != 0) {
        kb_log_info("ctrl", "%s: malformed WritePluginRecords v%d", ctx->peer, ctx->api_version);
        return KB_API_CLOSE;
    }
    kp_WritePluginRecordsResponse_init(&resp);
    if (kb_ctrl_reg_get(reg, rq.BrokerId, &b) != 0 || b.epoch != rq.BrokerEpoch) {
        resp.ErrorCode = KP_ERR_STALE_BROKER_EPOCH;
    } else if (rq.Records.cnt <= 0) {
        resp.ErrorCode = KP_ERR_INVALID_REQUEST;
    } else if (!(v = kp_arena_calloc(ctx->arena, (size_t)rq.Records.cnt, sizeof(*v)))) {
        return KB_API_CLOSE;
    } else {
        for (int32_t i = 0; i < rq.Records.cnt && !resp.ErrorCode; i++) {
            const kp_WritePluginRecordsRequest_PluginRecord_t *x = &rq.Records.v[i];
            if (x->Key.len < 0 || x->Key.len > KB_MREC_PLUGIN_MAX ||
                x->Value.len > KB_MREC_PLUGIN_MAX) {
                resp.ErrorCode = KP_ERR_INVALID_REQUEST;
                break;
            }
            /* borrowed from the request: never kb_mrec_clear'd */
            kb_mrec_init(&v[i], KB_MREC_PLUGIN);
            v[i].plugin_type = x->RecordType;
            v[i].pkey = (uint8_t *)x->Key.ptr;
            v[i].pkey_len = (size_t)x->Key.len;
            v[i].has_pvalue = x->Value.len >= 0;
            v[i].pvalue = v[i].has_pvalue ? (uint8_t *)x->Value.ptr : NULL;
            v[i].pvalue_len = v[i].has_pvalue ? (size_t)x->Value.len : 0;
        }
        if (!resp.ErrorCode)
            resp.ErrorCode = kb_meta_commit_records_at(meta, v, (size_t)rq.Records.cnt,
                                                       &resp.MetadataOffset, msg, sizeof(msg));
        if (resp.ErrorCode)
            kb_log_warn("ctrl",
                        "%s: plugin records of broker %" PRId32 " not committed (error %d%s%s)",
                        ctx->peer, rq.BrokerId, (int)resp.ErrorCode, msg[0] ? ": " : "", msg);
    }
    kp_writer_init(&wr);
    if (kp_msg_encode(&kp_WritePluginRecordsResponse_desc, &wr, &resp, ctx->api_version) != 0) {
        kp_writer_free(&wr);
        return KB_API_CLOSE;
    }
    *respp = kb_resp_from_writer(&wr);
    kp_writer_free(&wr);
    return *respp ? KB_API_RESPOND : KB_API_CLOSE;
}

/* ---- a broker-only node's raw channel ---------------------------------------------------- */

typedef struct kb_ctrl_raw_s {
    kb_ctrl_resp_fn *cb;
    void *arg;
} kb_ctrl_raw_t;

static void kb_ctrl_raw_done(kc_client_t *kc, int err, int16_t ver, const uint8_t *body, size_t len,
                             void *opaque)
{
    kb_ctrl_raw_t *r = opaque;
    int status;
    (void)kc;
    (void)ver;
    switch (err) {
    case KC_E_OK:
        status = 0;
        break;
    case KC_E_TIMED_OUT:
        status = KB_E_TIMEOUT;
        break;
    case KC_E_NO_VERSION:
        status = KB_E_UNSUPPORTED;
        break;
    case KC_E_DESTROYED:
    case KC_E_CANCELLED:
        status = KB_E_CLOSED;
        break;
    default:
        status = KB_E_IO;
        break;
    }
    r->cb(r->arg, status, status == 0 ? body : NULL, status == 0 ? len : 0);
    free(r);
}

int kb_ctrl_send_raw(kc_client_t *kc, int32_t node, int16_t api_key, int16_t ver,
                     const uint8_t *body, size_t len, int32_t timeout_ms, kb_ctrl_resp_fn *cb,
                     void *arg)
{
    kb_ctrl_raw_t *r;
    if (!kc || !cb)
        return KB_E_INVALID;
    r = malloc(sizeof(*r));
    if (!r)
        return KB_E_NOMEM;
    r->cb = cb;
    r->arg = arg;
    if (kc_request_raw(kc, node, api_key, ver, body, len, timeout_ms > 0 ? timeout_ms : 1, 0,
                       kb_ctrl_raw_done, r) <= 0) {
        free(r);
        return KB_E_IO;
    }
    return 0;
}
