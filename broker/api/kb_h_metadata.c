/*
 * kb_h_metadata.c -- Metadata v0-13 and DescribeCluster v0-2.
 *
 * Metadata: the cluster's live brokers (kb_apisvc_cluster: the advertised endpoint of the
 * listener the request came in on; this broker alone without broker/ctrl), cluster id (v2+),
 * controller id = a live broker (as KRaft brokers answer),
 * topics: all (null list, or empty in v0), or the named ones (by id from v10 when the name is
 * null: UNKNOWN_TOPIC_ID), with topic ids (v10+), internal flags, leader epochs (v7+), replica
 * and ISR lists, offline replicas (v5+). A missing topic is created when
 * auto.create.topics.enable and the request allows it (always below v4), with num.partitions
 * (INVALID_REPLICATION_FACTOR if default.replication.factor is above 1: one broker);
 * __consumer_offsets / __transaction_state are created with their own settings. Invalid names
 * answer INVALID_TOPIC_EXCEPTION, unknown ones UNKNOWN_TOPIC_OR_PARTITION. Authorized
 * operations (v8+) are INT32_MIN unless asked for; then every operation (no authorizer).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kb_api_int.h"
#include "kb_err.h"
#include "kb_apilog.h"
#include "kp_errcode.h"

static int kb_metadata_fill_topic(kb_apisvc_t *svc, kb_reqctx_t *ctx,
                                  const kp_MetadataRequest_t *rq, const kb_topic_info_t *ti,
                                  kp_MetadataResponse_MetadataResponseTopic_t *mt)
{
    int32_t *epochs = NULL, n = 0;
    int32_t node = kb_meta_node_id(svc->meta);
    int32_t *one = kp_arena_alloc(ctx->arena, sizeof(*one));
    if (!one)
        return -1;
    *one = node;
    mt->Name = kb_h_dup(ctx->arena, ti->name);
    mt->TopicId = ti->id;
    mt->IsInternal = ti->internal;
    mt->TopicAuthorizedOperations = ctx->api_version >= 8 && rq->IncludeTopicAuthorizedOperations
                                        ? kb_h_topic_ops()
                                        : INT32_MIN;
    if (kb_meta_topic_epochs(svc->meta, ti->name, &epochs, &n) != 0) {
        /* deleted meanwhile */
        mt->ErrorCode = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
        mt->Partitions.cnt = 0;
        return 0;
    }
    mt->Partitions.v = kp_arena_calloc(ctx->arena, (size_t)n + 1, sizeof(*mt->Partitions.v));
    if (!mt->Partitions.v) {
        free(epochs);
        return -1;
    }
    mt->Partitions.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        kp_MetadataResponse_MetadataResponsePartition_t *p = &mt->Partitions.v[i];
        kb_meta_part_state_t st;
        kb_part_t *part = NULL;
        int rc = kb_meta_part(svc->meta, ti->name, i, &part);
        kp_MetadataResponse_MetadataResponsePartition_init(p);
        p->PartitionIndex = i;
        p->LeaderEpoch = epochs[i];
        if (part)
            kb_part_release(part);
        if (kb_meta_part_state(svc->meta, &ti->id, i, &st) == KB_META_OK && st.nreplicas > 0) {
            /* The image's replicas, ISR and leader (a cluster: replicas on other brokers). */
            int32_t *rv = kp_arena_calloc(ctx->arena, (size_t)st.nreplicas + 1, sizeof(*rv));
            int32_t *iv = kp_arena_calloc(ctx->arena, (size_t)st.nisr + 1, sizeof(*iv));
            if (!rv || !iv) {
                free(epochs);
                return -1;
            }
            memcpy(rv, st.replicas, (size_t)st.nreplicas * sizeof(*rv));
            memcpy(iv, st.isr, (size_t)st.nisr * sizeof(*iv));
            p->ReplicaNodes.v = rv;
            p->ReplicaNodes.cnt = st.nreplicas;
            p->IsrNodes.v = iv;
            p->IsrNodes.cnt = st.nisr;
            p->LeaderId = st.leader;
            p->LeaderEpoch = st.leader_epoch;
            p->OfflineReplicas.cnt = 0;
            /* A leader here without its local log, or no leader at all. */
            if (st.leader < 0 || (st.leader == node && rc != KB_META_OK))
                p->ErrorCode = KP_ERR_LEADER_NOT_AVAILABLE;
            if (st.leader == node && rc != KB_META_OK) {
                p->LeaderId = -1;
                p->OfflineReplicas.v = one;
                p->OfflineReplicas.cnt = 1;
            }
            continue;
        }
        p->ReplicaNodes.v = one;
        p->ReplicaNodes.cnt = 1;
        if (rc == KB_META_OK) {
            p->LeaderId = node;
            p->IsrNodes.v = one;
            p->IsrNodes.cnt = 1;
            p->OfflineReplicas.cnt = 0;
        } else {
            p->ErrorCode = KP_ERR_LEADER_NOT_AVAILABLE;
            p->LeaderId = -1;
            p->IsrNodes.cnt = 0;
            p->OfflineReplicas.v = one;
            p->OfflineReplicas.cnt = 1;
        }
    }
    free(epochs);
    return 0;
}

/* Create a topic asked for by a Metadata request; 0 or the error for the response. */
static int16_t kb_metadata_autocreate(kb_apisvc_t *svc, const char *name)
{
    char msg[512];
    int16_t ec;
    kb_topic_spec_t spec = {.name = name,
                            .partitions = svc->cfg->num_partitions,
                            .replication_factor = svc->cfg->default_replication_factor};
    if (kb_meta_topic_is_internal_name(name)) {
        /* Not created yet (a cluster without enough brokers, or asked of the controller):
         * Kafka's answer for a topic being created. */
        ec = kb_meta_ensure_internal_topic(svc->meta, name, NULL);
        return ec == KP_ERR_COORDINATOR_NOT_AVAILABLE ? KP_ERR_LEADER_NOT_AVAILABLE : ec;
    }
    /* A broker-only node has the controller create it (as Kafka's brokers do); the client
     * gets Kafka's answer for a topic being created and asks again. */
    if (kb_meta_create_remote(svc->meta, name))
        return KP_ERR_LEADER_NOT_AVAILABLE;
    ec = kb_meta_create_topic(svc->meta, &spec, false, NULL, msg, sizeof(msg));
    if (ec == KP_ERR_TOPIC_ALREADY_EXISTS)
        ec = 0; /* created by someone else meanwhile */
    if (ec)
        kb_log_info("api", "auto-creating topic %s: %s", name, msg);
    return ec;
}

static kb_api_result_t kb_metadata_build(kb_apisvc_t *svc, kb_reqctx_t *ctx,
                                         const kp_MetadataRequest_t *rqp, kb_resp_t **respp)
{
    int16_t ver = ctx->api_version;
    kp_MetadataRequest_t rq = *rqp;
    kp_MetadataResponse_t resp;
    kb_cluster_node_t *nodes = NULL;
    size_t nnodes = 0;
    bool all, autocreate;
    kb_topic_info_t *list = NULL;
    size_t nlist = 0, nt = 0;

    kp_MetadataResponse_init(&resp);
    if (kb_apisvc_cluster(svc, ctx->listener, false, &nodes, &nnodes, &resp.ControllerId) != 0)
        return KB_API_CLOSE;
    resp.Brokers.v = kp_arena_calloc(ctx->arena, nnodes + 1, sizeof(*resp.Brokers.v));
    if (!resp.Brokers.v) {
        free(nodes);
        return KB_API_CLOSE;
    }
    for (size_t i = 0; i < nnodes; i++) {
        kp_MetadataResponse_MetadataResponseBroker_t *b = &resp.Brokers.v[i];
        kp_MetadataResponse_MetadataResponseBroker_init(b);
        b->NodeId = nodes[i].id;
        b->Host = kb_h_fmt(ctx->arena, "%s", nodes[i].host);
        b->Port = nodes[i].port;
        if (nodes[i].has_rack)
            b->Rack = kb_h_fmt(ctx->arena, "%s", nodes[i].rack);
    }
    resp.Brokers.cnt = (int32_t)nnodes;
    free(nodes);
    resp.ClusterId = kb_h_view(kb_meta_cluster_id(svc->meta));
    resp.ClusterAuthorizedOperations =
        ver >= 8 && ver <= 10 && rq.IncludeClusterAuthorizedOperations ? kb_h_cluster_ops()
                                                                       : INT32_MIN;

    all = rq.Topics.cnt < 0 || (ver == 0 && rq.Topics.cnt == 0);
    autocreate = svc->cfg->auto_create_topics_enable && (ver < 4 || rq.AllowAutoTopicCreation);
    if (all) {
        if (kb_meta_topics(svc->meta, &list, &nlist) != 0)
            return KB_API_CLOSE;
        resp.Topics.v = kp_arena_calloc(ctx->arena, nlist + 1, sizeof(*resp.Topics.v));
        if (!resp.Topics.v) {
            free(list);
            return KB_API_CLOSE;
        }
        for (size_t i = 0; i < nlist; i++) {
            kp_MetadataResponse_MetadataResponseTopic_t *mt = &resp.Topics.v[nt++];
            kp_MetadataResponse_MetadataResponseTopic_init(mt);
            if (kb_metadata_fill_topic(svc, ctx, &rq, &list[i], mt) != 0) {
                free(list);
                return KB_API_CLOSE;
            }
        }
        free(list);
    } else {
        kp_str_t *names = kp_arena_calloc(ctx->arena, (size_t)rq.Topics.cnt + 1, sizeof(*names));
        bool *later;
        resp.Topics.v =
            kp_arena_calloc(ctx->arena, (size_t)rq.Topics.cnt + 1, sizeof(*resp.Topics.v));
        if (!resp.Topics.v || !names)
            return KB_API_CLOSE;
        /* Kafka answers each named topic once (by-id entries are keyed apart). */
        for (int32_t i = 0; i < rq.Topics.cnt; i++)
            names[i] = ver >= 10 && !kb_uuid_is_zero(&rq.Topics.v[i].TopicId)
                           ? (kp_str_t){(const char *)rq.Topics.v[i].TopicId.b, 16}
                           : rq.Topics.v[i].Name;
        later = kb_h_dups_later(ctx->arena, names, NULL, (size_t)rq.Topics.cnt);
        for (int32_t i = 0; i < rq.Topics.cnt; i++) {
            const kp_MetadataRequest_MetadataRequestTopic_t *t = &rq.Topics.v[i];
            kp_MetadataResponse_MetadataResponseTopic_t *mt;
            kb_topic_info_t ti;
            /* Kafka names a topic by id whenever the id is set (the Java client leaves the
             * name "" then), else by name. */
            bool by_id = ver >= 10 && !kb_uuid_is_zero(&t->TopicId);
            char *name = by_id ? NULL : kb_h_str(ctx->arena, t->Name);
            char msg[512];

            if (later && later[i])
                continue;
            mt = &resp.Topics.v[nt++];
            kp_MetadataResponse_MetadataResponseTopic_init(mt);
            mt->TopicAuthorizedOperations = INT32_MIN;
            if (by_id || !name) {
                /* by topic id (v10+) */
                mt->TopicId = t->TopicId;
                if (kb_meta_topic_by_id(svc->meta, &t->TopicId, &ti) == 0) {
                    if (kb_metadata_fill_topic(svc, ctx, &rq, &ti, mt) != 0)
                        return KB_API_CLOSE;
                } else {
                    mt->ErrorCode = KP_ERR_UNKNOWN_TOPIC_ID;
                    mt->Name = ver >= 12 ? KP_STR_NULL : kb_h_view("");
                }
                continue;
            }
            mt->Name = kb_h_dup(ctx->arena, name);
            if (!kb_meta_topic_name_valid(name, msg, sizeof(msg))) {
                mt->ErrorCode = KP_ERR_INVALID_TOPIC_EXCEPTION;
                continue;
            }
            if (kb_meta_topic_by_name(svc->meta, name, &ti) != 0) {
                int16_t ec = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
                if (autocreate || kb_meta_topic_is_internal_name(name)) {
                    ec = kb_metadata_autocreate(svc, name);
                    if (!ec && kb_meta_topic_by_name(svc->meta, name, &ti) != 0)
                        ec = KP_ERR_LEADER_NOT_AVAILABLE;
                }
                if (ec) {
                    mt->ErrorCode = ec;
                    continue;
                }
            }
            if (kb_metadata_fill_topic(svc, ctx, &rq, &ti, mt) != 0)
                return KB_API_CLOSE;
        }
    }
    resp.Topics.cnt = (int32_t)nt;
    return kb_h_respond(ctx, &kp_MetadataResponse_desc, &resp, respp);
}

static kb_api_result_t kb_metadata_build_v(kb_apisvc_t *svc, kb_reqctx_t *ctx, const void *rq,
                                           kb_resp_t **respp)
{
    return kb_metadata_build(svc, ctx, rq, respp);
}

static kb_api_result_t kb_metadata_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_MetadataRequest_t rq;
    if (kb_h_decode(ctx, &kp_MetadataRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    return kb_h_big_response(opaque, ctx, &rq, respp, kb_metadata_build_v);
}

static kb_api_result_t kb_describe_cluster_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_apisvc_t *svc = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_DescribeClusterRequest_t rq;
    kp_DescribeClusterResponse_t resp;
    kb_cluster_node_t *nodes = NULL;
    size_t nnodes = 0;

    if (kb_h_decode(ctx, &kp_DescribeClusterRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_DescribeClusterResponse_init(&resp);
    resp.EndpointType = 1;
    resp.ClusterId = kb_h_view(kb_meta_cluster_id(svc->meta));
    if (ctx->api_version >= 1 && rq.EndpointType != 1) {
        resp.ErrorCode = KP_ERR_MISMATCHED_ENDPOINT_TYPE;
        resp.ErrorMessage = kb_h_fmt(ctx->arena,
                                     "The request was sent to an endpoint of type BROKER, but "
                                     "we wanted an endpoint of type %s",
                                     rq.EndpointType == 2 ? "CONTROLLER" : "UNKNOWN");
        resp.ControllerId = -1;
        return kb_h_respond(ctx, &kp_DescribeClusterResponse_desc, &resp, respp);
    }
    if (kb_apisvc_cluster(svc, ctx->listener, ctx->api_version >= 2 && rq.IncludeFencedBrokers,
                          &nodes, &nnodes, &resp.ControllerId) != 0)
        return KB_API_CLOSE;
    resp.Brokers.v = kp_arena_calloc(ctx->arena, nnodes + 1, sizeof(*resp.Brokers.v));
    if (!resp.Brokers.v) {
        free(nodes);
        return KB_API_CLOSE;
    }
    for (size_t i = 0; i < nnodes; i++) {
        kp_DescribeClusterResponse_DescribeClusterBroker_t *b = &resp.Brokers.v[i];
        kp_DescribeClusterResponse_DescribeClusterBroker_init(b);
        b->BrokerId = nodes[i].id;
        b->Host = kb_h_fmt(ctx->arena, "%s", nodes[i].host);
        b->Port = nodes[i].port;
        if (nodes[i].has_rack)
            b->Rack = kb_h_fmt(ctx->arena, "%s", nodes[i].rack);
        b->IsFenced = nodes[i].fenced;
    }
    resp.Brokers.cnt = (int32_t)nnodes;
    free(nodes);
    resp.ClusterAuthorizedOperations =
        rq.IncludeClusterAuthorizedOperations ? kb_h_cluster_ops() : INT32_MIN;
    return kb_h_respond(ctx, &kp_DescribeClusterResponse_desc, &resp, respp);
}

int kb_h_metadata_register(kb_apisvc_t *svc)
{
    int rc = kb_h_register(svc, KP_APIKEY_Metadata, 0, 13, kb_metadata_handle, KB_API_CONCURRENT);
    if (rc == 0)
        rc = kb_h_register(svc, KP_APIKEY_DescribeCluster, 0, 2, kb_describe_cluster_handle,
                           KB_API_CONCURRENT);
    return rc;
}
