/*
 * kb_ctrl_fwerr.c -- the error answer of a forwarded request (kb_ctrl_fwerr.h).
 */
#include "kb_ctrl_fwerr.h"

#include <string.h>

#include "kb_apilog.h"
#include "kb_resp.h"
#include "kp_msgs.h"

/* The arrays of the answers live in the request's arena. */
#define KB_FWE_ALLOC(ctx, n, type)                                                                 \
    ((type *)kp_arena_calloc((ctx)->arena, (size_t)(n) + 1, sizeof(type)))

static kb_resp_t *kb_fwe_encode(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, const void *msg)
{
    kp_writer_t wr;
    kb_resp_t *r = NULL;
    kp_writer_init(&wr);
    if (kp_msg_encode(desc, &wr, msg, ctx->api_version) == 0)
        r = kb_resp_from_writer(&wr);
    else
        kb_log_error("ctrl", "cannot encode %s v%d", desc->name, ctx->api_version);
    kp_writer_free(&wr);
    return r;
}

static int kb_fwe_decode(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, void *msg)
{
    kp_reader_t rd = ctx->body; /* a copy: the body stays unread for anyone else */
    kp_msg_init(desc, msg);
    return kp_msg_decode(desc, &rd, ctx->arena, msg, ctx->api_version);
}

static kb_resp_t *kb_fwe_create_topics(kb_reqctx_t *ctx, int16_t err, kp_str_t msg)
{
    kp_CreateTopicsRequest_t rq;
    kp_CreateTopicsResponse_t resp;
    int32_t n;
    if (kb_fwe_decode(ctx, &kp_CreateTopicsRequest_desc, &rq) != 0)
        return NULL;
    n = rq.Topics.cnt > 0 ? rq.Topics.cnt : 0;
    kp_CreateTopicsResponse_init(&resp);
    resp.Topics.v = KB_FWE_ALLOC(ctx, n, kp_CreateTopicsResponse_CreatableTopicResult_t);
    if (!resp.Topics.v)
        return NULL;
    resp.Topics.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        kp_CreateTopicsResponse_CreatableTopicResult_t *t = &resp.Topics.v[i];
        kp_CreateTopicsResponse_CreatableTopicResult_init(t);
        t->Name = rq.Topics.v[i].Name;
        t->ErrorCode = err;
        t->ErrorMessage = msg;
        t->Configs.cnt = -1;
    }
    return kb_fwe_encode(ctx, &kp_CreateTopicsResponse_desc, &resp);
}

static kb_resp_t *kb_fwe_delete_topics(kb_reqctx_t *ctx, int16_t err, kp_str_t msg)
{
    kp_DeleteTopicsRequest_t rq;
    kp_DeleteTopicsResponse_t resp;
    int32_t nt, nn;
    if (kb_fwe_decode(ctx, &kp_DeleteTopicsRequest_desc, &rq) != 0)
        return NULL;
    nt = rq.Topics.cnt > 0 ? rq.Topics.cnt : 0;         /* v6+ */
    nn = rq.TopicNames.cnt > 0 ? rq.TopicNames.cnt : 0; /* v0-5 */
    kp_DeleteTopicsResponse_init(&resp);
    resp.Responses.v = KB_FWE_ALLOC(ctx, nt + nn, kp_DeleteTopicsResponse_DeletableTopicResult_t);
    if (!resp.Responses.v)
        return NULL;
    resp.Responses.cnt = nt + nn;
    for (int32_t i = 0; i < nt + nn; i++) {
        kp_DeleteTopicsResponse_DeletableTopicResult_t *t = &resp.Responses.v[i];
        kp_DeleteTopicsResponse_DeletableTopicResult_init(t);
        if (i < nt) {
            t->Name = rq.Topics.v[i].Name;
            t->TopicId = rq.Topics.v[i].TopicId;
        } else {
            t->Name = rq.TopicNames.v[i - nt];
        }
        t->ErrorCode = err;
        t->ErrorMessage = msg;
    }
    return kb_fwe_encode(ctx, &kp_DeleteTopicsResponse_desc, &resp);
}

static kb_resp_t *kb_fwe_create_partitions(kb_reqctx_t *ctx, int16_t err, kp_str_t msg)
{
    kp_CreatePartitionsRequest_t rq;
    kp_CreatePartitionsResponse_t resp;
    int32_t n;
    if (kb_fwe_decode(ctx, &kp_CreatePartitionsRequest_desc, &rq) != 0)
        return NULL;
    n = rq.Topics.cnt > 0 ? rq.Topics.cnt : 0;
    kp_CreatePartitionsResponse_init(&resp);
    resp.Results.v =
        KB_FWE_ALLOC(ctx, n, kp_CreatePartitionsResponse_CreatePartitionsTopicResult_t);
    if (!resp.Results.v)
        return NULL;
    resp.Results.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        kp_CreatePartitionsResponse_CreatePartitionsTopicResult_t *t = &resp.Results.v[i];
        kp_CreatePartitionsResponse_CreatePartitionsTopicResult_init(t);
        t->Name = rq.Topics.v[i].Name;
        t->ErrorCode = err;
        t->ErrorMessage = msg;
    }
    return kb_fwe_encode(ctx, &kp_CreatePartitionsResponse_desc, &resp);
}

static kb_resp_t *kb_fwe_alter_configs(kb_reqctx_t *ctx, int16_t err, kp_str_t msg)
{
    kp_AlterConfigsRequest_t rq;
    kp_AlterConfigsResponse_t resp;
    int32_t n;
    if (kb_fwe_decode(ctx, &kp_AlterConfigsRequest_desc, &rq) != 0)
        return NULL;
    n = rq.Resources.cnt > 0 ? rq.Resources.cnt : 0;
    kp_AlterConfigsResponse_init(&resp);
    resp.Responses.v = KB_FWE_ALLOC(ctx, n, kp_AlterConfigsResponse_AlterConfigsResourceResponse_t);
    if (!resp.Responses.v)
        return NULL;
    resp.Responses.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        kp_AlterConfigsResponse_AlterConfigsResourceResponse_t *t = &resp.Responses.v[i];
        kp_AlterConfigsResponse_AlterConfigsResourceResponse_init(t);
        t->ResourceType = rq.Resources.v[i].ResourceType;
        t->ResourceName = rq.Resources.v[i].ResourceName;
        t->ErrorCode = err;
        t->ErrorMessage = msg;
    }
    return kb_fwe_encode(ctx, &kp_AlterConfigsResponse_desc, &resp);
}

static kb_resp_t *kb_fwe_incremental_alter_configs(kb_reqctx_t *ctx, int16_t err, kp_str_t msg)
{
    kp_IncrementalAlterConfigsRequest_t rq;
    kp_IncrementalAlterConfigsResponse_t resp;
    int32_t n;
    if (kb_fwe_decode(ctx, &kp_IncrementalAlterConfigsRequest_desc, &rq) != 0)
        return NULL;
    n = rq.Resources.cnt > 0 ? rq.Resources.cnt : 0;
    kp_IncrementalAlterConfigsResponse_init(&resp);
    resp.Responses.v =
        KB_FWE_ALLOC(ctx, n, kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_t);
    if (!resp.Responses.v)
        return NULL;
    resp.Responses.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_t *t = &resp.Responses.v[i];
        kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_init(t);
        t->ResourceType = rq.Resources.v[i].ResourceType;
        t->ResourceName = rq.Resources.v[i].ResourceName;
        t->ErrorCode = err;
        t->ErrorMessage = msg;
    }
    return kb_fwe_encode(ctx, &kp_IncrementalAlterConfigsResponse_desc, &resp);
}

static kb_resp_t *kb_fwe_create_acls(kb_reqctx_t *ctx, int16_t err, kp_str_t msg)
{
    kp_CreateAclsRequest_t rq;
    kp_CreateAclsResponse_t resp;
    int32_t n;
    if (kb_fwe_decode(ctx, &kp_CreateAclsRequest_desc, &rq) != 0)
        return NULL;
    n = rq.Creations.cnt > 0 ? rq.Creations.cnt : 0;
    kp_CreateAclsResponse_init(&resp);
    resp.Results.v = KB_FWE_ALLOC(ctx, n, kp_CreateAclsResponse_AclCreationResult_t);
    if (!resp.Results.v)
        return NULL;
    resp.Results.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        kp_CreateAclsResponse_AclCreationResult_init(&resp.Results.v[i]);
        resp.Results.v[i].ErrorCode = err;
        resp.Results.v[i].ErrorMessage = msg;
    }
    return kb_fwe_encode(ctx, &kp_CreateAclsResponse_desc, &resp);
}

static kb_resp_t *kb_fwe_delete_acls(kb_reqctx_t *ctx, int16_t err, kp_str_t msg)
{
    kp_DeleteAclsRequest_t rq;
    kp_DeleteAclsResponse_t resp;
    int32_t n;
    if (kb_fwe_decode(ctx, &kp_DeleteAclsRequest_desc, &rq) != 0)
        return NULL;
    n = rq.Filters.cnt > 0 ? rq.Filters.cnt : 0;
    kp_DeleteAclsResponse_init(&resp);
    resp.FilterResults.v = KB_FWE_ALLOC(ctx, n, kp_DeleteAclsResponse_DeleteAclsFilterResult_t);
    if (!resp.FilterResults.v)
        return NULL;
    resp.FilterResults.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        kp_DeleteAclsResponse_DeleteAclsFilterResult_init(&resp.FilterResults.v[i]);
        resp.FilterResults.v[i].ErrorCode = err;
        resp.FilterResults.v[i].ErrorMessage = msg;
        resp.FilterResults.v[i].MatchingAcls.cnt = 0;
    }
    return kb_fwe_encode(ctx, &kp_DeleteAclsResponse_desc, &resp);
}

static kb_resp_t *kb_fwe_elect_leaders(kb_reqctx_t *ctx, int16_t err, kp_str_t msg)
{
    kp_ElectLeadersRequest_t rq;
    kp_ElectLeadersResponse_t resp;
    int32_t n;
    if (kb_fwe_decode(ctx, &kp_ElectLeadersRequest_desc, &rq) != 0)
        return NULL;
    n = rq.TopicPartitions.cnt > 0 ? rq.TopicPartitions.cnt : 0; /* null: all, none named */
    kp_ElectLeadersResponse_init(&resp);
    resp.ErrorCode = err; /* v1+ */
    resp.ReplicaElectionResults.v =
        KB_FWE_ALLOC(ctx, n, kp_ElectLeadersResponse_ReplicaElectionResult_t);
    if (!resp.ReplicaElectionResults.v)
        return NULL;
    resp.ReplicaElectionResults.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        const kp_ElectLeadersRequest_ElectLeadersTopic_t *t = &rq.TopicPartitions.v[i];
        kp_ElectLeadersResponse_ReplicaElectionResult_t *r = &resp.ReplicaElectionResults.v[i];
        int32_t np = t->Partitions.cnt > 0 ? t->Partitions.cnt : 0;
        kp_ElectLeadersResponse_ReplicaElectionResult_init(r);
        r->Topic = t->Topic;
        r->PartitionResult.v = KB_FWE_ALLOC(ctx, np, kp_ElectLeadersResponse_PartitionResult_t);
        if (!r->PartitionResult.v)
            return NULL;
        r->PartitionResult.cnt = np;
        for (int32_t k = 0; k < np; k++) {
            kp_ElectLeadersResponse_PartitionResult_init(&r->PartitionResult.v[k]);
            r->PartitionResult.v[k].PartitionId = t->Partitions.v[k];
            r->PartitionResult.v[k].ErrorCode = err;
            r->PartitionResult.v[k].ErrorMessage = msg;
        }
    }
    return kb_fwe_encode(ctx, &kp_ElectLeadersResponse_desc, &resp);
}

kb_resp_t *kb_ctrl_fw_error_response(kb_reqctx_t *ctx, int16_t err, const char *msg)
{
    kp_str_t m = {.ptr = msg, .len = msg ? (int32_t)strlen(msg) : -1};
    switch (ctx->api_key) {
    case KP_APIKEY_CreateTopics:
        return kb_fwe_create_topics(ctx, err, m);
    case KP_APIKEY_DeleteTopics:
        return kb_fwe_delete_topics(ctx, err, m);
    case KP_APIKEY_CreatePartitions:
        return kb_fwe_create_partitions(ctx, err, m);
    case KP_APIKEY_AlterConfigs:
        return kb_fwe_alter_configs(ctx, err, m);
    case KP_APIKEY_IncrementalAlterConfigs:
        return kb_fwe_incremental_alter_configs(ctx, err, m);
    case KP_APIKEY_CreateAcls:
        return kb_fwe_create_acls(ctx, err, m);
    case KP_APIKEY_DeleteAcls:
        return kb_fwe_delete_acls(ctx, err, m);
    case KP_APIKEY_ElectLeaders:
        return kb_fwe_elect_leaders(ctx, err, m);
    default:
        return NULL;
    }
}
