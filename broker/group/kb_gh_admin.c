/*
 * kb_gh_admin.c -- FindCoordinator 0-6 (group and transaction keys, batched keys v4+),
 * ListGroups 0-5 (state filter v4+, type filter v5+), DescribeGroups 0-6, DeleteGroups 0-3.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kb_gco_int.h"
#include "kb_grec.h"
#include "kb_glog.h"
#include "kp_errcode.h"

#define KB_GH_KEY_GROUP       0
#define KB_GH_KEY_TRANSACTION 1

/* ACL operations a group supports (READ, DELETE, DESCRIBE), for DescribeGroups v3+. */
#define KB_GH_GROUP_OPS ((1 << 3) | (1 << 6) | (1 << 8))

/* ---- FindCoordinator ---------------------------------------------------------------------- */

/* The ErrorMessage Kafka 4.4 answers: v1-3 the error's description ("NONE" for success, the
 * name of Errors.NONE); v4+ (per key) an empty string, except for a request it cannot serve at
 * all (an unknown key type: INVALID_REQUEST, with its description). */
static kp_str_t kb_gh_errmsg(int16_t ec, int16_t ver)
{
    const char *m;
    if (ec == KP_ERR_NONE)
        m = ver >= 4 ? "" : "NONE";
    else if (ver >= 4 && ec != KP_ERR_INVALID_REQUEST)
        m = "";
    else
        m = kp_errcode_msg(ec);
    return kb_gh_view(m);
}

/* The leader of partition @p p of topic @p ti as FindCoordinator names it (Kafka: from the
 * metadata image): this node with the endpoint of the request's listener, or another broker
 * through the node resolver. COORDINATOR_NOT_AVAILABLE when the partition has no leader or the
 * leader cannot be reached on the request's listener. */
static int16_t kb_gh_leader_of(kb_gco_t *co, kb_reqctx_t *ctx, const kb_topic_info_t *ti, int32_t p,
                               int32_t *node, const char **host, int32_t *port)
{
    kb_meta_part_state_t st;
    int32_t self = kb_meta_node_id(co->meta);
    char buf[256];
    int rc;
    if (kb_meta_part_state(co->meta, &ti->id, p, &st) != KB_META_OK || st.leader < 0)
        return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    if (st.leader == self) {
        *node = self;
        kb_gh_endpoint(co, ctx->listener, host, port);
        return 0;
    }
    pthread_mutex_lock(&co->mu);
    rc = co->resolve
             ? co->resolve(co->resolve_opaque, st.leader, ctx->listener, buf, sizeof(buf), port)
             : -1;
    pthread_mutex_unlock(&co->mu);
    if (rc != 0) {
        /* The registered, unfenced brokers with an endpoint on the request's listener. */
        kb_cluster_node_t *v = NULL;
        size_t n = 0;
        int32_t ctrl;
        if (kb_apisvc_cluster(co->svc, ctx->listener, false, &v, &n, &ctrl) == 0) {
            for (size_t i = 0; i < n; i++)
                if (v[i].id == st.leader) {
                    snprintf(buf, sizeof(buf), "%s", v[i].host);
                    *port = v[i].port;
                    rc = 0;
                    break;
                }
            free(v);
        }
    }
    if (rc != 0 || !(*host = kb_gh_cstr(ctx->arena, kb_gh_view(buf))))
        return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    *node = st.leader;
    return 0;
}

static int16_t kb_gh_find_one(kb_gco_t *co, kb_reqctx_t *ctx, int8_t type, kp_str_t key,
                              int32_t *node, const char **host, int32_t *port)
{
    kb_topic_info_t ti;
    const char *topic;
    int32_t p;
    int16_t err;
    *node = -1;
    *host = "";
    *port = -1;
    switch (type) {
    case KB_GH_KEY_GROUP:
        if (kb_gco_ensure_topic(co) != 0)
            return KP_ERR_COORDINATOR_NOT_AVAILABLE;
        topic = KB_TOPIC_CONSUMER_OFFSETS;
        break;
    case KB_GH_KEY_TRANSACTION:
        /* Any key maps to a partition, the empty one included (group ids too): Kafka 4.4
         * answers it. */
        if (kb_meta_ensure_internal_topic(co->meta, KB_TOPIC_TRANSACTION_STATE, NULL) != 0)
            return KP_ERR_COORDINATOR_NOT_AVAILABLE;
        topic = KB_TOPIC_TRANSACTION_STATE;
        break;
    default:
        /* share groups (2) and unknown types */
        return KP_ERR_INVALID_REQUEST;
    }
    if (kb_meta_topic_by_name(co->meta, topic, &ti) != 0 || ti.partitions <= 0)
        return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    p = kb_grec_partition_for(key.len > 0 ? key.ptr : "", key.len > 0 ? (size_t)key.len : 0,
                              ti.partitions);
    err = kb_gh_leader_of(co, ctx, &ti, p, node, host, port);
    if (err) {
        *node = -1;
        *host = "";
        *port = -1;
    }
    return err;
}

static kb_api_result_t kb_gh_findcoord(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_gco_t *co = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    int16_t ver = ctx->api_version;
    kp_FindCoordinatorRequest_t rq;
    kp_FindCoordinatorResponse_t resp;
    int8_t type;

    if (kb_gh_decode(ctx, &kp_FindCoordinatorRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_FindCoordinatorResponse_init(&resp);
    type = ver >= 1 ? rq.KeyType : KB_GH_KEY_GROUP;
    if (ver < 4) {
        const char *host;
        int32_t node, port;
        int16_t ec = kb_gh_find_one(co, ctx, type, rq.Key, &node, &host, &port);
        resp.ErrorCode = ec;
        resp.ErrorMessage = kb_gh_errmsg(ec, ver);
        resp.NodeId = node;
        resp.Host = kb_gh_view(host);
        resp.Port = port;
    } else {
        int32_t n = rq.CoordinatorKeys.cnt > 0 ? rq.CoordinatorKeys.cnt : 0;
        kp_FindCoordinatorResponse_Coordinator_t *cs =
            kp_arena_alloc(ar, (n ? (size_t)n : 1) * sizeof(*cs));
        if (!cs)
            return KB_API_CLOSE;
        for (int32_t i = 0; i < n; i++) {
            const char *host;
            int32_t node, port;
            int16_t ec =
                kb_gh_find_one(co, ctx, type, rq.CoordinatorKeys.v[i], &node, &host, &port);
            kp_FindCoordinatorResponse_Coordinator_init(&cs[i]);
            cs[i].Key = rq.CoordinatorKeys.v[i];
            cs[i].NodeId = node;
            cs[i].Host = kb_gh_view(host);
            cs[i].Port = port;
            cs[i].ErrorCode = ec;
            cs[i].ErrorMessage = kb_gh_errmsg(ec, ver);
        }
        resp.Coordinators.cnt = n;
        resp.Coordinators.v = cs;
    }
    return kb_gh_respond(ctx, &kp_FindCoordinatorResponse_desc, &resp, respp);
}

/* ---- ListGroups ----------------------------------------------------------------------------- */

typedef struct kb_gh_list_s {
    kp_arena_t *ar;
    const kp_ListGroupsRequest_t *rq;
    int16_t ver;
    kp_ListGroupsResponse_ListedGroup_t *v;
    size_t n;
    size_t cap;
    int err;
} kb_gh_list_t;

static bool kb_gh_filter(kp_str_t *v, int32_t n, const char *value)
{
    if (n <= 0)
        return true;
    for (int32_t i = 0; i < n; i++)
        if (v[i].len >= 0 && (size_t)v[i].len == strlen(value) &&
            !strncasecmp(v[i].ptr, value, (size_t)v[i].len))
            return true;
    return false;
}

static int kb_gh_list_one(void *arg, const kb_group_t *g)
{
    kb_gh_list_t *l = arg;
    kp_ListGroupsResponse_ListedGroup_t *e;
    const char *state = kb_gsm_state_name(g->state);
    if (g->state == KB_GS_DEAD)
        return 0;
    if (l->ver >= 4 && !kb_gh_filter(l->rq->StatesFilter.v, l->rq->StatesFilter.cnt, state))
        return 0;
    if (l->ver >= 5 && !kb_gh_filter(l->rq->TypesFilter.v, l->rq->TypesFilter.cnt, "classic"))
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        kp_ListGroupsResponse_ListedGroup_t *v = kp_arena_alloc(l->ar, cap * sizeof(*v));
        if (!v) {
            l->err = -1;
            return 1;
        }
        if (l->n)
            memcpy(v, l->v, l->n * sizeof(*v));
        l->v = v;
        l->cap = cap;
    }
    e = &l->v[l->n++];
    kp_ListGroupsResponse_ListedGroup_init(e);
    /* copies: the response is encoded after the lock is released */
    e->GroupId = kb_gh_view(kb_gh_cstr(l->ar, kb_gh_view(g->id)));
    e->ProtocolType =
        kb_gh_view(kb_gh_cstr(l->ar, kb_gh_view(g->protocol_type ? g->protocol_type : "")));
    e->GroupState = kb_gh_view(state);
    e->GroupType = kp_str("classic");
    if (!e->GroupId.ptr || !e->ProtocolType.ptr)
        l->err = -1;
    return l->err;
}

static kb_api_result_t kb_gh_listgroups(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_gco_t *co = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_ListGroupsRequest_t rq;
    kp_ListGroupsResponse_t resp;
    kb_gh_list_t l = {.ar = ctx->arena, .rq = &rq, .ver = ctx->api_version};

    if (kb_gh_decode(ctx, &kp_ListGroupsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_ListGroupsResponse_init(&resp);
    pthread_mutex_lock(&co->mu);
    kb_gsm_foreach_group(co->gsm, kb_gh_list_one, &l);
    /* as Kafka: the groups it has, and LOAD_IN_PROGRESS while some partition is loading */
    for (int32_t p = 0; p < co->nown; p++)
        if (co->own[p].state == KB_GCO_P_LOADING)
            resp.ErrorCode = KP_ERR_COORDINATOR_LOAD_IN_PROGRESS;
    pthread_mutex_unlock(&co->mu);
    if (l.err) {
        resp.ErrorCode = KP_ERR_UNKNOWN_SERVER_ERROR;
        resp.Groups.cnt = 0;
    } else {
        resp.Groups.cnt = (int32_t)l.n;
        resp.Groups.v = l.v;
    }
    return kb_gh_respond(ctx, &kp_ListGroupsResponse_desc, &resp, respp);
}

/* ---- DescribeGroups ------------------------------------------------------------------------- */

static kp_str_t kb_gh_copy(kp_arena_t *ar, const char *s)
{
    return s ? kb_gh_view(kb_gh_cstr(ar, kb_gh_view(s))) : KP_STR_NULL;
}

static kp_bytes_t kb_gh_copy_bytes(kp_arena_t *ar, const uint8_t *p, int32_t len)
{
    uint8_t *c;
    if (len <= 0 || !(c = kp_arena_alloc(ar, (size_t)len)))
        return (kp_bytes_t){NULL, 0};
    memcpy(c, p, (size_t)len);
    return (kp_bytes_t){c, len};
}

static void kb_gh_describe_one(kb_gco_t *co, kb_reqctx_t *ctx, kp_str_t id, bool ops,
                               kp_DescribeGroupsResponse_DescribedGroup_t *d)
{
    kp_arena_t *ar = ctx->arena;
    int16_t ver = ctx->api_version;
    char *gid = kb_gh_cstr(ar, id);
    kb_group_t *g;
    kp_DescribeGroupsResponse_DescribedGroup_init(d);
    d->GroupId = id;
    d->GroupState = kp_str("");
    d->ProtocolType = kp_str("");
    d->ProtocolData = kp_str("");
    d->Members.cnt = 0;
    d->AuthorizedOperations = ops ? KB_GH_GROUP_OPS : INT32_MIN;
    if (!gid || !gid[0]) {
        d->ErrorCode = KP_ERR_INVALID_GROUP_ID;
        return;
    }
    pthread_mutex_lock(&co->mu);
    if ((d->ErrorCode = kb_gco_owner_err(co, gid))) {
        pthread_mutex_unlock(&co->mu);
        return;
    }
    g = kb_gsm_group(co->gsm, gid);
    if (!g || g->state == KB_GS_DEAD) {
        pthread_mutex_unlock(&co->mu);
        /* KIP-1043: v6 names the missing group; older versions describe it as Dead */
        d->GroupState = kp_str("Dead");
        if (ver >= 6) {
            char msg[300];
            snprintf(msg, sizeof(msg), "Group %.255s not found.", gid);
            d->ErrorCode = KP_ERR_GROUP_ID_NOT_FOUND;
            d->ErrorMessage = kb_gh_copy(ar, msg);
        }
        return;
    }
    d->GroupState = kb_gh_view(kb_gsm_state_name(g->state));
    d->ProtocolType = kb_gh_copy(ar, g->protocol_type ? g->protocol_type : "");
    /* Kafka shows the protocol, the member metadata and the assignments of Stable groups only */
    d->ProtocolData =
        kb_gh_copy(ar, g->state == KB_GS_STABLE && g->protocol_name ? g->protocol_name : "");
    if (g->nmembers) {
        size_t i = 0;
        d->Members.v = kp_arena_alloc(ar, g->nmembers * sizeof(*d->Members.v));
        if (!d->Members.v) {
            pthread_mutex_unlock(&co->mu);
            d->ErrorCode = KP_ERR_UNKNOWN_SERVER_ERROR;
            return;
        }
        for (const kb_gmember_t *m = g->members; m; m = m->next, i++) {
            kp_DescribeGroupsResponse_DescribedGroupMember_t *dm = &d->Members.v[i];
            kp_DescribeGroupsResponse_DescribedGroupMember_init(dm);
            dm->MemberId = kb_gh_copy(ar, m->id);
            dm->GroupInstanceId = kb_gh_copy(ar, m->instance_id);
            dm->ClientId = kb_gh_copy(ar, m->client_id);
            dm->ClientHost = kb_gh_copy(ar, m->client_host);
            dm->MemberMetadata = (kp_bytes_t){NULL, 0};
            dm->MemberAssignment = (kp_bytes_t){NULL, 0};
            if (g->state == KB_GS_STABLE) {
                for (size_t k = 0; k < m->nprotos; k++)
                    if (g->protocol_name && !strcmp(m->protos[k].name, g->protocol_name))
                        dm->MemberMetadata =
                            kb_gh_copy_bytes(ar, m->protos[k].meta, m->protos[k].meta_len);
                dm->MemberAssignment = kb_gh_copy_bytes(ar, m->assignment, m->assignment_len);
            }
        }
        d->Members.cnt = (int32_t)i;
    }
    pthread_mutex_unlock(&co->mu);
}

static kb_api_result_t kb_gh_describe(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_gco_t *co = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_DescribeGroupsRequest_t rq;
    kp_DescribeGroupsResponse_t resp;
    int32_t n;

    if (kb_gh_decode(ctx, &kp_DescribeGroupsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_DescribeGroupsResponse_init(&resp);
    n = rq.Groups.cnt > 0 ? rq.Groups.cnt : 0;
    resp.Groups.v = kp_arena_alloc(ctx->arena, (n ? (size_t)n : 1) * sizeof(*resp.Groups.v));
    if (!resp.Groups.v)
        return KB_API_CLOSE;
    for (int32_t i = 0; i < n; i++)
        kb_gh_describe_one(co, ctx, rq.Groups.v[i],
                           ctx->api_version >= 3 && rq.IncludeAuthorizedOperations,
                           &resp.Groups.v[i]);
    resp.Groups.cnt = n;
    return kb_gh_respond(ctx, &kp_DescribeGroupsResponse_desc, &resp, respp);
}

/* ---- DeleteGroups --------------------------------------------------------------------------- */

static kb_api_result_t kb_gh_deletegroups(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_gco_t *co = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_DeleteGroupsRequest_t rq;
    kp_DeleteGroupsResponse_t resp;
    int32_t n;

    if (kb_gh_decode(ctx, &kp_DeleteGroupsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_DeleteGroupsResponse_init(&resp);
    n = rq.GroupsNames.cnt > 0 ? rq.GroupsNames.cnt : 0;
    resp.Results.v = kp_arena_alloc(ctx->arena, (n ? (size_t)n : 1) * sizeof(*resp.Results.v));
    if (!resp.Results.v)
        return KB_API_CLOSE;
    for (int32_t i = 0; i < n; i++) {
        kp_DeleteGroupsResponse_DeletableGroupResult_t *r = &resp.Results.v[i];
        char *gid = kb_gh_cstr(ctx->arena, rq.GroupsNames.v[i]);
        kp_DeleteGroupsResponse_DeletableGroupResult_init(r);
        r->GroupId = rq.GroupsNames.v[i];
        if (!gid || !gid[0]) {
            r->ErrorCode = KP_ERR_INVALID_GROUP_ID;
            continue;
        }
        pthread_mutex_lock(&co->mu);
        if (!(r->ErrorCode = kb_gco_owner_err(co, gid)))
            r->ErrorCode = kb_gsm_delete_group(co->gsm, gid);
        pthread_mutex_unlock(&co->mu);
        if (!r->ErrorCode)
            r->ErrorCode = kb_gco_await_writes(co);
        else
            kb_gco_forget_writes();
    }
    resp.Results.cnt = n;
    return kb_gh_respond(ctx, &kp_DeleteGroupsResponse_desc, &resp, respp);
}

int kb_gh_admin_register(kb_gco_t *co)
{
    int rc;
    if ((rc = kb_gh_register(co, KP_APIKEY_FindCoordinator, 0, INT16_MAX, kb_gh_findcoord,
                             KB_API_CONCURRENT)) ||
        (rc = kb_gh_register(co, KP_APIKEY_ListGroups, 0, INT16_MAX, kb_gh_listgroups,
                             KB_API_CONCURRENT)) ||
        (rc = kb_gh_register(co, KP_APIKEY_DescribeGroups, 0, INT16_MAX, kb_gh_describe,
                             KB_API_CONCURRENT)) ||
        (rc = kb_gh_register(co, KP_APIKEY_DeleteGroups, 0, INT16_MAX, kb_gh_deletegroups, 0)))
        return rc;
    return 0;
}
