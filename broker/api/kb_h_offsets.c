/*
 * kb_h_offsets.c -- ListOffsets v1-11 and OffsetForLeaderEpoch v2-4.
 *
 * ListOffsets, per partition: CurrentLeaderEpoch (v4+) checked; EARLIEST (-2) and
 * EARLIEST_LOCAL (-4) = log start; LATEST (-1) = the last fetchable offset of the isolation
 * level (HW for read_uncommitted, LSO for read_committed, LEO for replicas) with the current
 * leader epoch; MAX_TIMESTAMP (-3) and timestamps = the first record at or after it, only if
 * below the last fetchable offset (else offset -1); LATEST_TIERED (-5) and EARLIEST_PENDING
 * (-6): -1 (no tiered storage). Duplicate partitions in one request get INVALID_REQUEST.
 *
 * OffsetForLeaderEpoch: the epoch cache lookup, as Kafka answers it (kb_log_epoch_end_offset).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kb_api_int.h"
#include "kb_apilog.h"
#include "kp_errcode.h"

static void kb_offsets_one(kb_part_t *part, int8_t isolation, int32_t replica_id, int64_t ts,
                           kp_ListOffsetsResponse_ListOffsetsPartitionResponse_t *pr)
{
    kb_log_t *log = part->log;
    int64_t bound, off = -1, found = -1;
    int32_t epoch = -1;
    if (replica_id >= 0)
        bound = kb_log_leo(log);
    else if (isolation == 1)
        bound = kb_log_lso(log);
    else
        bound = kb_log_hw(log);
    pr->Timestamp = -1;
    pr->Offset = -1;
    pr->LeaderEpoch = -1;
    switch (ts) {
    case KB_TS_LATEST:
        pr->Offset = bound;
        pr->LeaderEpoch = kb_part_epoch(part);
        return;
    case KB_TS_EARLIEST:
    case KB_TS_EARLIEST_LOCAL:
        kb_log_offset_for_timestamp(log, KB_TS_EARLIEST, &off, &found, &epoch);
        pr->Offset = off;
        pr->LeaderEpoch = epoch;
        return;
    case -5: /* LATEST_TIERED_TIMESTAMP */
    case -6: /* EARLIEST_PENDING_UPLOAD_TIMESTAMP */
        return;
    default:
        if (ts < 0 && ts != KB_TS_MAX_TIMESTAMP)
            return;
        if (kb_log_offset_for_timestamp(log, ts, &off, &found, &epoch) != 0 || off < 0 ||
            off >= bound)
            return;
        pr->Offset = off;
        pr->Timestamp = found;
        pr->LeaderEpoch = epoch;
    }
}

static kb_api_result_t kb_list_offsets_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_apisvc_t *svc = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_ListOffsetsRequest_t rq;
    kp_ListOffsetsResponse_t resp;
    kp_str_t *keys;
    int32_t *nums;
    bool *dup = NULL;
    size_t nk = 0, at = 0;

    if (kb_h_decode(ctx, &kp_ListOffsetsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    /* Partitions asked for twice get INVALID_REQUEST, as in Kafka. */
    for (int32_t i = 0; i < rq.Topics.cnt; i++)
        nk += rq.Topics.v[i].Partitions.cnt > 0 ? (size_t)rq.Topics.v[i].Partitions.cnt : 0;
    keys = kp_arena_calloc(ctx->arena, nk + 1, sizeof(*keys));
    nums = kp_arena_calloc(ctx->arena, nk + 1, sizeof(*nums));
    if (keys && nums) {
        for (int32_t i = 0; i < rq.Topics.cnt; i++)
            for (int32_t k = 0; k < rq.Topics.v[i].Partitions.cnt; k++, at++) {
                keys[at] = rq.Topics.v[i].Name;
                nums[at] = rq.Topics.v[i].Partitions.v[k].PartitionIndex;
            }
        dup = kb_h_dups(ctx->arena, keys, nums, nk);
    }
    at = 0;
    kp_ListOffsetsResponse_init(&resp);
    resp.Topics.cnt = rq.Topics.cnt > 0 ? rq.Topics.cnt : 0;
    resp.Topics.v =
        kp_arena_calloc(ctx->arena, (size_t)resp.Topics.cnt + 1, sizeof(*resp.Topics.v));
    if (!resp.Topics.v)
        return KB_API_CLOSE;
    for (int32_t i = 0; i < resp.Topics.cnt; i++) {
        const kp_ListOffsetsRequest_ListOffsetsTopic_t *t = &rq.Topics.v[i];
        kp_ListOffsetsResponse_ListOffsetsTopicResponse_t *tr = &resp.Topics.v[i];
        char *name = kb_h_str(ctx->arena, t->Name);
        kp_ListOffsetsResponse_ListOffsetsTopicResponse_init(tr);
        tr->Name = t->Name;
        tr->Partitions.cnt = t->Partitions.cnt > 0 ? t->Partitions.cnt : 0;
        tr->Partitions.v =
            kp_arena_calloc(ctx->arena, (size_t)tr->Partitions.cnt + 1, sizeof(*tr->Partitions.v));
        if (!tr->Partitions.v)
            return KB_API_CLOSE;
        for (int32_t k = 0; k < tr->Partitions.cnt; k++) {
            const kp_ListOffsetsRequest_ListOffsetsPartition_t *p = &t->Partitions.v[k];
            kp_ListOffsetsResponse_ListOffsetsPartitionResponse_t *pr = &tr->Partitions.v[k];
            kb_part_t *part = NULL;
            int rc;
            kp_ListOffsetsResponse_ListOffsetsPartitionResponse_init(pr);
            pr->PartitionIndex = p->PartitionIndex;
            if (dup && dup[at]) {
                at++;
                pr->ErrorCode = KP_ERR_INVALID_REQUEST;
                continue;
            }
            at++;
            rc = kb_meta_part(svc->meta, name ? name : "", p->PartitionIndex, &part);
            if (rc != KB_META_OK) {
                pr->ErrorCode = kb_h_lookup_err(rc, false);
                continue;
            }
            pr->ErrorCode = kb_h_epoch_check(p->CurrentLeaderEpoch, kb_part_epoch(part));
            if (!pr->ErrorCode)
                kb_offsets_one(part, rq.IsolationLevel, rq.ReplicaId, p->Timestamp, pr);
            if (ctx->api_version < 4)
                pr->LeaderEpoch = -1; /* not in these versions */
            kb_part_release(part);
        }
    }
    return kb_h_respond(ctx, &kp_ListOffsetsResponse_desc, &resp, respp);
}

static kb_api_result_t kb_ofle_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_apisvc_t *svc = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_OffsetForLeaderEpochRequest_t rq;
    kp_OffsetForLeaderEpochResponse_t resp;

    if (kb_h_decode(ctx, &kp_OffsetForLeaderEpochRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_OffsetForLeaderEpochResponse_init(&resp);
    resp.Topics.cnt = rq.Topics.cnt > 0 ? rq.Topics.cnt : 0;
    resp.Topics.v =
        kp_arena_calloc(ctx->arena, (size_t)resp.Topics.cnt + 1, sizeof(*resp.Topics.v));
    if (!resp.Topics.v)
        return KB_API_CLOSE;
    for (int32_t i = 0; i < resp.Topics.cnt; i++) {
        const kp_OffsetForLeaderEpochRequest_OffsetForLeaderTopic_t *t = &rq.Topics.v[i];
        kp_OffsetForLeaderEpochResponse_OffsetForLeaderTopicResult_t *tr = &resp.Topics.v[i];
        char *name = kb_h_str(ctx->arena, t->Topic);
        kp_OffsetForLeaderEpochResponse_OffsetForLeaderTopicResult_init(tr);
        tr->Topic = t->Topic;
        tr->Partitions.cnt = t->Partitions.cnt > 0 ? t->Partitions.cnt : 0;
        tr->Partitions.v =
            kp_arena_calloc(ctx->arena, (size_t)tr->Partitions.cnt + 1, sizeof(*tr->Partitions.v));
        if (!tr->Partitions.v)
            return KB_API_CLOSE;
        for (int32_t k = 0; k < tr->Partitions.cnt; k++) {
            const kp_OffsetForLeaderEpochRequest_OffsetForLeaderPartition_t *p =
                &t->Partitions.v[k];
            kp_OffsetForLeaderEpochResponse_EpochEndOffset_t *pr = &tr->Partitions.v[k];
            kb_part_t *part = NULL;
            int rc;
            kp_OffsetForLeaderEpochResponse_EpochEndOffset_init(pr);
            pr->Partition = p->Partition;
            pr->LeaderEpoch = -1;
            pr->EndOffset = -1;
            rc = kb_meta_part(svc->meta, name ? name : "", p->Partition, &part);
            if (rc != KB_META_OK) {
                pr->ErrorCode = kb_h_lookup_err(rc, false);
                continue;
            }
            pr->ErrorCode = kb_h_epoch_check(p->CurrentLeaderEpoch, kb_part_epoch(part));
            if (!pr->ErrorCode)
                kb_log_epoch_end_offset(part->log, p->LeaderEpoch, &pr->LeaderEpoch,
                                        &pr->EndOffset);
            kb_part_release(part);
        }
    }
    return kb_h_respond(ctx, &kp_OffsetForLeaderEpochResponse_desc, &resp, respp);
}

int kb_h_offsets_register(kb_apisvc_t *svc)
{
    int rc =
        kb_h_register(svc, KP_APIKEY_ListOffsets, 1, 11, kb_list_offsets_handle, KB_API_CONCURRENT);
    if (rc == 0)
        rc = kb_h_register(svc, KP_APIKEY_OffsetForLeaderEpoch, 2, 4, kb_ofle_handle,
                           KB_API_CONCURRENT);
    return rc;
}
