/*
 * kb_gh_join.c -- the membership APIs of the classic group protocol: JoinGroup 0-9 and
 * SyncGroup 0-5 (deferred until the rebalance step completes), Heartbeat 0-4, LeaveGroup 0-5.
 */
#include <stdlib.h>
#include <string.h>

#include "kb_gco_int.h"
#include "kb_glog.h"
#include "kp_errcode.h"

/* ---- results of deferred requests --------------------------------------------------------------
 */

void kb_gh_join_result(kb_gwait_t *w, const kb_gjoin_res_t *r)
{
    kp_JoinGroupResponse_t resp;
    kp_JoinGroupResponse_JoinGroupResponseMember_t *mv = NULL;
    kb_resp_t *out;
    kp_JoinGroupResponse_init(&resp);
    resp.ErrorCode = r->err;
    resp.GenerationId = r->generation;
    resp.ProtocolType = kb_gh_view(r->protocol_type);
    /* v0-6 cannot carry a null protocol name */
    resp.ProtocolName =
        r->protocol_name || w->version >= 7 ? kb_gh_view(r->protocol_name) : kp_str("");
    resp.Leader = kb_gh_view(r->leader ? r->leader : "");
    resp.SkipAssignment = r->skip_assignment;
    resp.MemberId = kb_gh_view(r->member_id ? r->member_id : "");
    if (r->member_cnt && (mv = calloc(r->member_cnt, sizeof(*mv)))) {
        for (size_t i = 0; i < r->member_cnt; i++) {
            kp_JoinGroupResponse_JoinGroupResponseMember_init(&mv[i]);
            mv[i].MemberId = kb_gh_view(r->members[i].member_id);
            mv[i].GroupInstanceId = kb_gh_view(r->members[i].instance_id);
            mv[i].Metadata = (kp_bytes_t){r->members[i].meta, r->members[i].meta_len};
        }
        resp.Members.cnt = (int32_t)r->member_cnt;
        resp.Members.v = mv;
    } else {
        resp.Members.cnt = 0;
    }
    out = kb_gh_encode(&kp_JoinGroupResponse_desc, &resp, w->version);
    free(mv);
    kb_gco_wait_complete(w, out);
}

void kb_gh_sync_result(kb_gwait_t *w, const kb_gsync_res_t *r)
{
    kp_SyncGroupResponse_t resp;
    kp_SyncGroupResponse_init(&resp);
    resp.ErrorCode = r->err;
    resp.ProtocolType = kb_gh_view(r->protocol_type);
    resp.ProtocolName = kb_gh_view(r->protocol_name);
    resp.Assignment = (kp_bytes_t){r->assignment, r->assignment ? r->assignment_len : 0};
    kb_gco_wait_complete(w, kb_gh_encode(&kp_SyncGroupResponse_desc, &resp, w->version));
}

/* ---- JoinGroup
 * ------------------------------------------------------------------------------------ */

static kb_api_result_t kb_gh_join_error(kb_reqctx_t *ctx, int16_t err, kp_str_t member_id,
                                        kb_resp_t **respp)
{
    kp_JoinGroupResponse_t resp;
    kp_JoinGroupResponse_init(&resp);
    resp.ErrorCode = err;
    resp.GenerationId = -1;
    resp.ProtocolName = ctx->api_version >= 7 ? KP_STR_NULL : kp_str("");
    resp.Leader = kp_str("");
    resp.MemberId = member_id.len >= 0 ? member_id : kp_str("");
    resp.Members.cnt = 0;
    return kb_gh_respond(ctx, &kp_JoinGroupResponse_desc, &resp, respp);
}

static kb_api_result_t kb_gh_join(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_gco_t *co = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    int16_t ver = ctx->api_version;
    kp_JoinGroupRequest_t rq;
    kb_gjoin_in_t in;
    kb_gproto_in_t *protos = NULL;
    kb_gwait_t *w;
    bool gone;
    int16_t err = 0;

    if (kb_gh_decode(ctx, &kp_JoinGroupRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    memset(&in, 0, sizeof(in));
    in.group_id = kb_gh_cstr(ar, rq.GroupId);
    in.member_id = kb_gh_cstr(ar, rq.MemberId);
    in.instance_id = ver >= 5 ? kb_gh_cstr(ar, rq.GroupInstanceId) : NULL;
    in.protocol_type = kb_gh_cstr(ar, rq.ProtocolType);
    in.session_ms = rq.SessionTimeoutMs;
    /* v0 has no rebalance timeout: the session timeout serves as one */
    in.rebalance_ms = ver >= 1 ? rq.RebalanceTimeoutMs : rq.SessionTimeoutMs;
    in.client_id = kb_gh_cstr(ar, ctx->client_id);
    in.client_host = kb_gh_client_host(ar, ctx->peer);
    in.require_known_member_id = ver >= 4;
    in.supports_skip_assignment = ver >= 9;
    in.reason = ver >= 8 ? kb_gh_cstr(ar, rq.Reason) : NULL;
    if (rq.Protocols.cnt > 0) {
        protos = kp_arena_alloc(ar, (size_t)rq.Protocols.cnt * sizeof(*protos));
        if (!protos)
            return kb_gh_join_error(ctx, KP_ERR_UNKNOWN_SERVER_ERROR, rq.MemberId, respp);
        for (int32_t i = 0; i < rq.Protocols.cnt; i++) {
            const kp_JoinGroupRequest_JoinGroupRequestProtocol_t *p = &rq.Protocols.v[i];
            protos[i].name = kb_gh_cstr(ar, p->Name);
            protos[i].meta = p->Metadata.ptr;
            protos[i].meta_len = p->Metadata.len > 0 ? p->Metadata.len : 0;
            if (!protos[i].name)
                return kb_gh_join_error(ctx, KP_ERR_UNKNOWN_SERVER_ERROR, rq.MemberId, respp);
        }
        in.nprotos = (size_t)rq.Protocols.cnt;
    }
    in.protos = protos;
    if (!in.group_id || !in.member_id || !in.protocol_type || !in.client_id)
        err = KP_ERR_UNKNOWN_SERVER_ERROR;
    else if (in.group_id[0] && (err = kb_gco_ensure_topic(co)))
        err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
    if (err)
        return kb_gh_join_error(ctx, err, rq.MemberId, respp);

    pthread_mutex_lock(&co->mu);
    if (in.group_id[0] && (err = kb_gco_owner_err(co, in.group_id))) {
        pthread_mutex_unlock(&co->mu);
        return kb_gh_join_error(ctx, err, rq.MemberId, respp);
    }
    w = kb_gco_wait_new(co, req, &gone);
    if (!w) {
        pthread_mutex_unlock(&co->mu);
        if (gone)
            return KB_API_NO_RESPONSE;
        return kb_gh_join_error(ctx, KP_ERR_UNKNOWN_SERVER_ERROR, rq.MemberId, respp);
    }
    kb_gsm_join(co->gsm, &in, w);
    kb_gco_wait_release(w);
    pthread_mutex_unlock(&co->mu);
    kb_gco_forget_writes(); /* group records: answers do not wait for replication (docs) */
    return KB_API_DEFERRED;
}

/* ---- SyncGroup
 * ------------------------------------------------------------------------------------ */

static kb_api_result_t kb_gh_sync_error(kb_reqctx_t *ctx, int16_t err, kb_resp_t **respp)
{
    kp_SyncGroupResponse_t resp;
    kp_SyncGroupResponse_init(&resp);
    resp.ErrorCode = err;
    resp.Assignment = (kp_bytes_t){NULL, 0};
    return kb_gh_respond(ctx, &kp_SyncGroupResponse_desc, &resp, respp);
}

static kb_api_result_t kb_gh_sync(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_gco_t *co = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    int16_t ver = ctx->api_version;
    kp_SyncGroupRequest_t rq;
    kb_gsync_in_t in;
    kb_gassign_in_t *as = NULL;
    kb_gwait_t *w;
    int16_t err;
    bool gone;

    if (kb_gh_decode(ctx, &kp_SyncGroupRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    memset(&in, 0, sizeof(in));
    in.group_id = kb_gh_cstr(ar, rq.GroupId);
    in.member_id = kb_gh_cstr(ar, rq.MemberId);
    in.instance_id = ver >= 3 ? kb_gh_cstr(ar, rq.GroupInstanceId) : NULL;
    in.generation = rq.GenerationId;
    in.protocol_type = ver >= 5 ? kb_gh_cstr(ar, rq.ProtocolType) : NULL;
    in.protocol_name = ver >= 5 ? kb_gh_cstr(ar, rq.ProtocolName) : NULL;
    if (rq.Assignments.cnt > 0) {
        if (!(as = kp_arena_alloc(ar, (size_t)rq.Assignments.cnt * sizeof(*as))))
            return kb_gh_sync_error(ctx, KP_ERR_UNKNOWN_SERVER_ERROR, respp);
        for (int32_t i = 0; i < rq.Assignments.cnt; i++) {
            as[i].member_id = kb_gh_cstr(ar, rq.Assignments.v[i].MemberId);
            as[i].data = rq.Assignments.v[i].Assignment.ptr;
            as[i].len =
                rq.Assignments.v[i].Assignment.len > 0 ? rq.Assignments.v[i].Assignment.len : 0;
        }
        in.nassignments = (size_t)rq.Assignments.cnt;
    }
    in.assignments = as;
    if (!in.group_id || !in.member_id)
        return kb_gh_sync_error(ctx, KP_ERR_UNKNOWN_SERVER_ERROR, respp);

    pthread_mutex_lock(&co->mu);
    if (in.group_id[0] && (err = kb_gco_owner_err(co, in.group_id))) {
        pthread_mutex_unlock(&co->mu);
        return kb_gh_sync_error(ctx, err, respp);
    }
    w = kb_gco_wait_new(co, req, &gone);
    if (!w) {
        pthread_mutex_unlock(&co->mu);
        return gone ? KB_API_NO_RESPONSE
                    : kb_gh_sync_error(ctx, KP_ERR_UNKNOWN_SERVER_ERROR, respp);
    }
    kb_gsm_sync(co->gsm, &in, w);
    kb_gco_wait_release(w);
    pthread_mutex_unlock(&co->mu);
    kb_gco_forget_writes();
    return KB_API_DEFERRED;
}

/* ---- Heartbeat
 * ------------------------------------------------------------------------------------ */

static kb_api_result_t kb_gh_heartbeat(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_gco_t *co = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    kp_HeartbeatRequest_t rq;
    kp_HeartbeatResponse_t resp;
    const char *group, *member, *instance;

    if (kb_gh_decode(ctx, &kp_HeartbeatRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_HeartbeatResponse_init(&resp);
    group = kb_gh_cstr(ar, rq.GroupId);
    member = kb_gh_cstr(ar, rq.MemberId);
    instance = ctx->api_version >= 3 ? kb_gh_cstr(ar, rq.GroupInstanceId) : NULL;
    if (!group || !member) {
        resp.ErrorCode = KP_ERR_UNKNOWN_SERVER_ERROR;
    } else {
        pthread_mutex_lock(&co->mu);
        if (!group[0] || !(resp.ErrorCode = kb_gco_owner_err(co, group)))
            resp.ErrorCode = kb_gsm_heartbeat(co->gsm, group, member, instance, rq.GenerationId);
        pthread_mutex_unlock(&co->mu);
    }
    return kb_gh_respond(ctx, &kp_HeartbeatResponse_desc, &resp, respp);
}

/* ---- LeaveGroup
 * ----------------------------------------------------------------------------------- */

static kb_api_result_t kb_gh_leave(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_gco_t *co = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    int16_t ver = ctx->api_version;
    kp_LeaveGroupRequest_t rq;
    kp_LeaveGroupResponse_t resp;
    kp_LeaveGroupResponse_MemberResponse_t *mr;
    kb_gleave_in_t *in;
    int16_t *errs;
    const char *group;
    size_t n;

    if (kb_gh_decode(ctx, &kp_LeaveGroupRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_LeaveGroupResponse_init(&resp);
    n = ver >= 3 ? (size_t)(rq.Members.cnt > 0 ? rq.Members.cnt : 0) : 1;
    in = kp_arena_alloc(ar, (n ? n : 1) * sizeof(*in));
    errs = kp_arena_alloc(ar, (n ? n : 1) * sizeof(*errs));
    mr = kp_arena_alloc(ar, (n ? n : 1) * sizeof(*mr));
    group = kb_gh_cstr(ar, rq.GroupId);
    if (!in || !errs || !mr || !group) {
        resp.ErrorCode = KP_ERR_UNKNOWN_SERVER_ERROR;
        return kb_gh_respond(ctx, &kp_LeaveGroupResponse_desc, &resp, respp);
    }
    if (ver >= 3) {
        for (size_t i = 0; i < n; i++) {
            in[i].member_id = kb_gh_cstr(ar, rq.Members.v[i].MemberId);
            in[i].instance_id = kb_gh_cstr(ar, rq.Members.v[i].GroupInstanceId);
            in[i].reason = ver >= 5 ? kb_gh_cstr(ar, rq.Members.v[i].Reason) : NULL;
        }
    } else {
        in[0].member_id = kb_gh_cstr(ar, rq.MemberId);
        in[0].instance_id = NULL;
        in[0].reason = NULL;
    }
    pthread_mutex_lock(&co->mu);
    if (!group[0] || !(resp.ErrorCode = kb_gco_owner_err(co, group)))
        resp.ErrorCode = kb_gsm_leave(co->gsm, group, in, n, errs);
    pthread_mutex_unlock(&co->mu);
    kb_gco_forget_writes();
    if (ver < 3) {
        /* one member, its error at the top */
        if (!resp.ErrorCode)
            resp.ErrorCode = errs[0];
    } else if (!resp.ErrorCode) {
        for (size_t i = 0; i < n; i++) {
            kp_LeaveGroupResponse_MemberResponse_init(&mr[i]);
            mr[i].MemberId = rq.Members.v[i].MemberId;
            mr[i].GroupInstanceId = rq.Members.v[i].GroupInstanceId;
            mr[i].ErrorCode = errs[i];
        }
        resp.Members.cnt = (int32_t)n;
        resp.Members.v = mr;
    } else {
        resp.Members.cnt = 0;
    }
    return kb_gh_respond(ctx, &kp_LeaveGroupResponse_desc, &resp, respp);
}

int kb_gh_join_register(kb_gco_t *co)
{
    int rc;
    if ((rc = kb_gh_register(co, KP_APIKEY_JoinGroup, 0, INT16_MAX, kb_gh_join, 0)) ||
        (rc = kb_gh_register(co, KP_APIKEY_SyncGroup, 0, INT16_MAX, kb_gh_sync, 0)) ||
        (rc = kb_gh_register(co, KP_APIKEY_Heartbeat, 0, INT16_MAX, kb_gh_heartbeat, 0)) ||
        (rc = kb_gh_register(co, KP_APIKEY_LeaveGroup, 0, INT16_MAX, kb_gh_leave, 0)))
        return rc;
    return 0;
}
