/*
 * kb_h_topics.c -- CreateTopics v2-8, DeleteTopics v1-6, CreatePartitions v0-3,
 * DeleteRecords v0-2.
 *
 * CreateTopics: Kafka's name rules; -1 partitions / replication factor = num.partitions /
 * default.replication.factor; the replication factor is kb_meta's to check (a single node: 1
 * only; a cluster's controller: at most the usable brokers, INVALID_REPLICATION_FACTOR);
 * explicit assignments (both counts -1) are checked by kb_meta as Kafka's controller does
 * (registered brokers, none twice, one replica count, partitions 0..n-1); configs validated
 * (unknown keys, types, ranges; mirror.name refused); internal topic names refused;
 * ValidateOnly; random topic ids; v5+ results carry partitions, replication factor and every
 * config with its source; v7+ the topic id. CreateTopics v8's
 * MirrorInfo (provisional) is accepted only on the broker's internal path
 * (KB_PRINCIPAL_INTERNAL): it gives the topic the source's topic id and mirror.name; from
 * clients it is INVALID_REQUEST.
 *
 * DeleteTopics by name or (v6) by id; delete.topic.enable; internal topics only internally.
 * CreatePartitions: grow only, assignments as CreateTopics' (one per new partition, partition
 * 0's replica count); a mirror topic (mirror.name not .stopped/.removed) only on the internal path
 * (clients: READ_ONLY_TOPIC naming the mirror). DeleteRecords: up to the HW (-1 = HW), refused on
 * read-only / pending (mirror) partitions like Produce.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kb_api_int.h"
#include "kb_apilog.h"
#include "kp_errcode.h"

/* ---- CreateTopics -----------------------------------------------------------------------------
 */

/* The resulting configs (v5+): every visible topic key with its value and source. */
static int kb_ct_configs(kb_apisvc_t *svc, kb_reqctx_t *ctx, const kb_kv_t *kv, size_t cnt,
                         kp_CreateTopicsResponse_CreatableTopicResult_t *r)
{
    kb_kv_t *dn = NULL, *dd = NULL;
    size_t dnc = 0, ddc = 0, n = 0;
    kb_dyncfg_t dyn;
    if (kb_meta_broker_dyncfg(svc->meta, &dn, &dnc, &dd, &ddc) != 0)
        return -1;
    dyn = (kb_dyncfg_t){dn, dnc, dd, ddc};
    r->Configs.v = kp_arena_calloc(ctx->arena, kb_tconf_defs_cnt, sizeof(*r->Configs.v));
    if (!r->Configs.v) {
        kb_kv_free(dn, dnc);
        kb_kv_free(dd, ddc);
        return -1;
    }
    for (size_t i = 0; i < kb_tconf_defs_cnt; i++) {
        const kb_tconf_def_t *d = &kb_tconf_defs[i];
        kp_CreateTopicsResponse_CreatableTopicConfigs_t *c = &r->Configs.v[n];
        kb_tconf_val_t v;
        if (d->flags & KB_TCF_HIDDEN)
            continue;
        kb_tconf_effective(d, kv, cnt, svc->cfg, &dyn, &v, NULL, NULL);
        kp_CreateTopicsResponse_CreatableTopicConfigs_init(c);
        c->Name = kb_h_view(d->name);
        c->Value = v.is_null ? KP_STR_NULL : kb_h_dup(ctx->arena, v.value);
        c->ReadOnly = false;
        c->ConfigSource = (int8_t)v.source;
        c->IsSensitive = false;
        n++;
    }
    r->Configs.cnt = (int32_t)n;
    kb_kv_free(dn, dnc);
    kb_kv_free(dd, ddc);
    return 0;
}

static void kb_ct_one(kb_apisvc_t *svc, kb_reqctx_t *ctx, const kp_CreateTopicsRequest_t *rq,
                      const kp_CreateTopicsRequest_CreatableTopic_t *t,
                      kp_CreateTopicsResponse_CreatableTopicResult_t *r)
{
    const kb_config_t *cfg = svc->cfg;
    bool privileged = kb_apisvc_privileged(ctx);
    char *name = kb_h_str(ctx->arena, t->Name);
    char msg[512];
    int32_t parts = t->NumPartitions;
    int32_t rf = t->ReplicationFactor;
    kb_meta_assignment_t *asg = NULL;
    kb_kv_t *kv;
    size_t nkv = 0;
    kb_topic_spec_t spec;
    kp_uuid_t id = {{0}};
    int16_t ec;

    msg[0] = '\0';
    r->NumPartitions = -1;
    r->ReplicationFactor = -1;
    r->Configs.cnt = -1;
    if (!name) {
        r->ErrorCode = KP_ERR_INVALID_REQUEST;
        r->ErrorMessage = kb_h_view("Topic name is null");
        return;
    }
    if (kb_meta_topic_is_internal_name(name) && !privileged) {
        r->ErrorCode = KP_ERR_INVALID_REQUEST;
        r->ErrorMessage =
            kb_h_fmt(ctx->arena, "Creation of internal topic %s is prohibited.", name);
        return;
    }
    if (ctx->api_version >= KP_CREATE_TOPICS_MIRROR_INFO_VERSION && !t->MirrorInfo_null &&
        !privileged) {
        r->ErrorCode = KP_ERR_INVALID_REQUEST;
        r->ErrorMessage = kb_h_view("MirrorInfo can only be set by cluster mirroring");
        return;
    }
    if (t->Assignments.cnt > 0) {
        /* Kafka's controller: both counts -1; the lists are kb_meta's to check against the
         * registered brokers (kb_meta_manual_plan). */
        if (rf != -1) {
            r->ErrorCode = KP_ERR_INVALID_REQUEST;
            r->ErrorMessage = kb_h_view("A manual partition assignment was specified, but "
                                        "replication factor was not set to -1.");
            return;
        }
        if (parts != -1) {
            r->ErrorCode = KP_ERR_INVALID_REQUEST;
            r->ErrorMessage = kb_h_view("A manual partition assignment was specified, but "
                                        "numPartitions was not set to -1.");
            return;
        }
        asg = kp_arena_calloc(ctx->arena, (size_t)t->Assignments.cnt, sizeof(*asg));
        if (!asg) {
            r->ErrorCode = KP_ERR_UNKNOWN_SERVER_ERROR;
            return;
        }
        for (int32_t i = 0; i < t->Assignments.cnt; i++) {
            const kp_CreateTopicsRequest_CreatableReplicaAssignment_t *a = &t->Assignments.v[i];
            asg[i].partition = a->PartitionIndex;
            asg[i].brokers = a->BrokerIds.v;
            asg[i].nbrokers = a->BrokerIds.cnt > 0 ? a->BrokerIds.cnt : 0;
        }
        parts = t->Assignments.cnt;
        rf = asg[0].nbrokers; /* every list has as many once kb_meta accepted them */
    } else {
        if (parts == -1)
            parts = cfg->num_partitions;
        if (rf == -1)
            rf = cfg->default_replication_factor;
        if (parts <= 0) {
            r->ErrorCode = KP_ERR_INVALID_PARTITIONS;
            r->ErrorMessage = kb_h_view("Number of partitions must be larger than 0, or -1 to use "
                                        "the default value.");
            return;
        }
        if (rf <= 0) {
            r->ErrorCode = KP_ERR_INVALID_REPLICATION_FACTOR;
            r->ErrorMessage = kb_h_view("Replication factor must be larger than 0, or -1 to use "
                                        "the default value.");
            return;
        }
    }
    kv = kp_arena_calloc(ctx->arena, (size_t)(t->Configs.cnt > 0 ? t->Configs.cnt : 0) + 1,
                         sizeof(*kv));
    if (!kv) {
        r->ErrorCode = KP_ERR_UNKNOWN_SERVER_ERROR;
        return;
    }
    for (int32_t i = 0; i < t->Configs.cnt; i++) {
        const kp_CreateTopicsRequest_CreatableTopicConfig_t *c = &t->Configs.v[i];
        char *k = kb_h_str(ctx->arena, c->Name), *v = kb_h_str(ctx->arena, c->Value);
        size_t j;
        if (!k) {
            r->ErrorCode = KP_ERR_INVALID_REQUEST;
            r->ErrorMessage = kb_h_view("Config name is null");
            return;
        }
        if (!v) {
            r->ErrorCode = KP_ERR_INVALID_CONFIG;
            r->ErrorMessage =
                kb_h_fmt(ctx->arena, "Null value not supported for topic configs: %s", k);
            return;
        }
        for (j = 0; j < nkv && strcmp(kv[j].key, k); j++)
            ;
        kv[j].key = k;
        kv[j].value = v;
        if (j == nkv)
            nkv++;
    }
    memset(&spec, 0, sizeof(spec));
    spec.name = name;
    spec.partitions = parts;
    spec.replication_factor = rf; /* kb_meta checks it against the brokers there are */
    spec.privileged = privileged;
    spec.assignments = asg;
    spec.nassignments = asg ? (size_t)parts : 0;
    if (ctx->api_version >= KP_CREATE_TOPICS_MIRROR_INFO_VERSION && !t->MirrorInfo_null) {
        char *mname = kb_h_str(ctx->arena, t->MirrorInfo.MirrorName);
        spec.id = &t->MirrorInfo.TopicId;
        if (mname && !kb_kv_get(kv, nkv, KB_TCONF_MIRROR_NAME)) {
            kb_kv_t *nv = kp_arena_calloc(ctx->arena, nkv + 1, sizeof(*nv));
            if (!nv) {
                r->ErrorCode = KP_ERR_UNKNOWN_SERVER_ERROR;
                return;
            }
            memcpy(nv, kv, nkv * sizeof(*nv));
            nv[nkv].key = KB_TCONF_MIRROR_NAME;
            nv[nkv].value = mname;
            kv = nv;
            nkv++;
        }
    }
    spec.configs = kv;
    spec.config_cnt = nkv;
    ec = kb_meta_create_topic(svc->meta, &spec, rq->ValidateOnly, &id, msg, sizeof(msg));
    r->ErrorCode = ec;
    if (ec) {
        r->ErrorMessage = kb_h_dup(ctx->arena, msg);
        return;
    }
    if (!rq->ValidateOnly)
        r->TopicId = id;
    r->NumPartitions = parts;
    r->ReplicationFactor = (int16_t)rf;
    if (ctx->api_version >= 5 && kb_ct_configs(svc, ctx, kv, nkv, r) != 0)
        r->Configs.cnt = -1;
}

static kb_api_result_t kb_create_topics_build(kb_apisvc_t *svc, kb_reqctx_t *ctx, const void *rqp,
                                              kb_resp_t **respp)
{
    const kp_CreateTopicsRequest_t rq = *(const kp_CreateTopicsRequest_t *)rqp;
    kp_CreateTopicsResponse_t resp;
    int32_t n = 0;
    kp_str_t *names;
    bool *dups = NULL;

    names = kp_arena_calloc(ctx->arena, (size_t)(rq.Topics.cnt > 0 ? rq.Topics.cnt : 0) + 1,
                            sizeof(*names));
    if (!names)
        return KB_API_CLOSE;
    for (int32_t i = 0; i < rq.Topics.cnt; i++)
        names[i] = rq.Topics.v[i].Name;
    if (rq.Topics.cnt > 0)
        dups = kb_h_dups(ctx->arena, names, NULL, (size_t)rq.Topics.cnt);
    kp_CreateTopicsResponse_init(&resp);
    resp.Topics.v = kp_arena_calloc(ctx->arena, (size_t)(rq.Topics.cnt > 0 ? rq.Topics.cnt : 0) + 1,
                                    sizeof(*resp.Topics.v));
    if (!resp.Topics.v)
        return KB_API_CLOSE;
    for (int32_t i = 0; i < rq.Topics.cnt; i++) {
        const kp_CreateTopicsRequest_CreatableTopic_t *t = &rq.Topics.v[i];
        kp_CreateTopicsResponse_CreatableTopicResult_t *r;
        bool dup = dups && dups[i];
        r = &resp.Topics.v[n++];
        kp_CreateTopicsResponse_CreatableTopicResult_init(r);
        r->Name = t->Name;
        if (dup) {
            r->ErrorCode = KP_ERR_INVALID_REQUEST;
            r->ErrorMessage = kb_h_fmt(
                ctx->arena,
                "Create topics request from client `%.*s` contains multiple entries for the "
                "following topics: %.*s",
                ctx->client_id.len > 0 ? (int)ctx->client_id.len : 0,
                ctx->client_id.ptr ? ctx->client_id.ptr : "",
                t->Name.len > 0 ? (int)t->Name.len : 0, t->Name.ptr ? t->Name.ptr : "");
            r->NumPartitions = -1;
            r->ReplicationFactor = -1;
            r->Configs.cnt = -1;
            continue;
        }
        kb_ct_one(svc, ctx, &rq, t, r);
    }
    resp.Topics.cnt = n;
    return kb_h_respond(ctx, &kp_CreateTopicsResponse_desc, &resp, respp);
}

static kb_api_result_t kb_create_topics_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_CreateTopicsRequest_t rq;
    if (kb_h_decode(ctx, &kp_CreateTopicsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    return kb_h_big_response(opaque, ctx, &rq, respp, kb_create_topics_build);
}

/* ---- DeleteTopics -----------------------------------------------------------------------------
 */

static void kb_dt_one(kb_apisvc_t *svc, kb_reqctx_t *ctx, kp_str_t sname, const kp_uuid_t *id,
                      kp_DeleteTopicsResponse_DeletableTopicResult_t *r)
{
    char *name = kb_h_str(ctx->arena, sname);
    kb_topic_info_t ti;
    char msg[512];
    bool by_id;

    if (name && !name[0] && id && !kb_uuid_is_zero(id))
        name = NULL; /* an empty name beside an id: by id */
    by_id = !name;

    r->Name = sname;
    if (id)
        r->TopicId = *id;
    if (!svc->cfg->delete_topic_enable) {
        r->ErrorCode = KP_ERR_TOPIC_DELETION_DISABLED;
        r->ErrorMessage = kb_h_view("Topic deletion is disabled.");
        return;
    }
    if (name && id && !kb_uuid_is_zero(id)) {
        r->ErrorCode = KP_ERR_INVALID_REQUEST;
        r->ErrorMessage = kb_h_view("Topic name and topic id cannot both be set");
        return;
    }
    if (by_id) {
        if (!id || kb_uuid_is_zero(id)) {
            r->ErrorCode = KP_ERR_INVALID_REQUEST;
            r->ErrorMessage = kb_h_view("Neither topic name nor topic id is set");
            return;
        }
        if (kb_meta_topic_by_id(svc->meta, id, &ti) != 0) {
            r->ErrorCode = KP_ERR_UNKNOWN_TOPIC_ID;
            return;
        }
    } else if (kb_meta_topic_by_name(svc->meta, name, &ti) != 0) {
        r->ErrorCode = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
        return;
    }
    r->Name = kb_h_dup(ctx->arena, ti.name);
    r->TopicId = ti.id;
    if (ti.internal && !kb_apisvc_privileged(ctx)) {
        r->ErrorCode = KP_ERR_INVALID_REQUEST;
        r->ErrorMessage =
            kb_h_fmt(ctx->arena, "Deletion of internal topic %s is prohibited.", ti.name);
        return;
    }
    r->ErrorCode = kb_meta_delete_topic(svc->meta, ti.name, NULL, msg, sizeof(msg));
    if (r->ErrorCode)
        r->ErrorMessage = kb_h_dup(ctx->arena, msg);
}

static kb_api_result_t kb_delete_topics_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_apisvc_t *svc = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_DeleteTopicsRequest_t rq;
    kp_DeleteTopicsResponse_t resp;
    int32_t n;

    if (kb_h_decode(ctx, &kp_DeleteTopicsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_DeleteTopicsResponse_init(&resp);
    n = ctx->api_version >= 6 ? rq.Topics.cnt : rq.TopicNames.cnt;
    if (n < 0)
        n = 0;
    resp.Responses.v = kp_arena_calloc(ctx->arena, (size_t)n + 1, sizeof(*resp.Responses.v));
    if (!resp.Responses.v)
        return KB_API_CLOSE;
    resp.Responses.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        kp_DeleteTopicsResponse_DeletableTopicResult_t *r = &resp.Responses.v[i];
        kp_DeleteTopicsResponse_DeletableTopicResult_init(r);
        if (ctx->api_version >= 6)
            kb_dt_one(svc, ctx, rq.Topics.v[i].Name, &rq.Topics.v[i].TopicId, r);
        else
            kb_dt_one(svc, ctx, rq.TopicNames.v[i], NULL, r);
    }
    return kb_h_respond(ctx, &kp_DeleteTopicsResponse_desc, &resp, respp);
}

/* ---- CreatePartitions -------------------------------------------------------------------------
 */

/* A client's CreatePartitions on a mirror topic: refused unless the topic is stopped (the same
 * rule as Produce's read-only check, by the desired state in mirror.name). Its partition count is
 * the source topic's; the plugin's topic discovery grows it on the internal path (design M113).
 * @return true (with the error and message set) when refused. */
static bool kb_h_cp_mirror_refusal(kb_apisvc_t *svc, kb_reqctx_t *ctx, const char *name,
                                   int16_t *err, kp_str_t *msg)
{
    char mirror[KB_TOPIC_NAME_MAX + 1];
    bool stopped = false;
    if (!kb_meta_topic_mirror(svc->meta, name, mirror, sizeof(mirror), &stopped) || stopped)
        return false;
    *err = KP_ERR_READ_ONLY_TOPIC;
    *msg = kb_h_fmt(ctx->arena,
                    "Topic '%s' is a mirror topic of cluster mirror '%s': its partitions follow "
                    "the source topic's and cannot be added here. Stop mirroring the topic first "
                    "(kafka-mirrors --stop --mirror %s --topic '%s').",
                    name, mirror, mirror, name);
    return true;
}

static kb_api_result_t kb_create_partitions_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_apisvc_t *svc = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    bool privileged = kb_apisvc_privileged(ctx);
    kp_CreatePartitionsRequest_t rq;
    kp_CreatePartitionsResponse_t resp;
    int32_t n;
    kp_str_t *names;
    bool *dups = NULL;

    if (kb_h_decode(ctx, &kp_CreatePartitionsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_CreatePartitionsResponse_init(&resp);
    n = rq.Topics.cnt > 0 ? rq.Topics.cnt : 0;
    names = kp_arena_calloc(ctx->arena, (size_t)n + 1, sizeof(*names));
    if (!names)
        return KB_API_CLOSE;
    for (int32_t i = 0; i < n; i++)
        names[i] = rq.Topics.v[i].Name;
    dups = kb_h_dups(ctx->arena, names, NULL, (size_t)n);
    resp.Results.v = kp_arena_calloc(ctx->arena, (size_t)n + 1, sizeof(*resp.Results.v));
    if (!resp.Results.v)
        return KB_API_CLOSE;
    resp.Results.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        const kp_CreatePartitionsRequest_CreatePartitionsTopic_t *t = &rq.Topics.v[i];
        kp_CreatePartitionsResponse_CreatePartitionsTopicResult_t *r = &resp.Results.v[i];
        char *name = kb_h_str(ctx->arena, t->Name);
        kb_topic_info_t ti;
        kb_meta_assignment_t *asg = NULL;
        int32_t nasg = -1;
        char msg[512];
        bool dup = dups && dups[i];
        kp_CreatePartitionsResponse_CreatePartitionsTopicResult_init(r);
        r->Name = t->Name;
        if (dup || !name) {
            r->ErrorCode = KP_ERR_INVALID_REQUEST;
            r->ErrorMessage = kb_h_view("Duplicate topic in request.");
            continue;
        }
        if (kb_meta_topic_by_name(svc->meta, name, &ti) != 0) {
            r->ErrorCode = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
            r->ErrorMessage = kb_h_fmt(ctx->arena, "The topic '%s' does not exist.", name);
            continue;
        }
        if (ti.mirror && !privileged &&
            kb_h_cp_mirror_refusal(svc, ctx, name, &r->ErrorCode, &r->ErrorMessage))
            continue;
        if (t->Assignments.cnt >= 0 && t->Count > ti.partitions) {
            asg = kp_arena_calloc(ctx->arena, (size_t)t->Assignments.cnt + 1, sizeof(*asg));
            if (!asg)
                return KB_API_CLOSE;
            for (int32_t k = 0; k < t->Assignments.cnt; k++) {
                asg[k].partition = ti.partitions + k;
                asg[k].brokers = t->Assignments.v[k].BrokerIds.v;
                asg[k].nbrokers =
                    t->Assignments.v[k].BrokerIds.cnt > 0 ? t->Assignments.v[k].BrokerIds.cnt : 0;
            }
            nasg = t->Assignments.cnt;
        }
        r->ErrorCode = kb_meta_create_partitions_assigned(svc->meta, name, t->Count, asg, nasg,
                                                          rq.ValidateOnly, msg, sizeof(msg));
        if (r->ErrorCode)
            r->ErrorMessage = kb_h_dup(ctx->arena, msg);
    }
    return kb_h_respond(ctx, &kp_CreatePartitionsResponse_desc, &resp, respp);
}

/* ---- DeleteRecords ----------------------------------------------------------------------------
 */

static kb_api_result_t kb_delete_records_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_apisvc_t *svc = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_DeleteRecordsRequest_t rq;
    kp_DeleteRecordsResponse_t resp;
    int32_t n;

    if (kb_h_decode(ctx, &kp_DeleteRecordsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_DeleteRecordsResponse_init(&resp);
    n = rq.Topics.cnt > 0 ? rq.Topics.cnt : 0;
    resp.Topics.v = kp_arena_calloc(ctx->arena, (size_t)n + 1, sizeof(*resp.Topics.v));
    if (!resp.Topics.v)
        return KB_API_CLOSE;
    resp.Topics.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        const kp_DeleteRecordsRequest_DeleteRecordsTopic_t *t = &rq.Topics.v[i];
        kp_DeleteRecordsResponse_DeleteRecordsTopicResult_t *tr = &resp.Topics.v[i];
        char *name = kb_h_str(ctx->arena, t->Name);
        kp_DeleteRecordsResponse_DeleteRecordsTopicResult_init(tr);
        tr->Name = t->Name;
        tr->Partitions.cnt = t->Partitions.cnt > 0 ? t->Partitions.cnt : 0;
        tr->Partitions.v =
            kp_arena_calloc(ctx->arena, (size_t)tr->Partitions.cnt + 1, sizeof(*tr->Partitions.v));
        if (!tr->Partitions.v)
            return KB_API_CLOSE;
        for (int32_t k = 0; k < tr->Partitions.cnt; k++) {
            const kp_DeleteRecordsRequest_DeleteRecordsPartition_t *p = &t->Partitions.v[k];
            kp_DeleteRecordsResponse_DeleteRecordsPartitionResult_t *pr = &tr->Partitions.v[k];
            kb_part_t *part = NULL;
            const char *why;
            int64_t start = -1;
            int rc;
            kp_DeleteRecordsResponse_DeleteRecordsPartitionResult_init(pr);
            pr->PartitionIndex = p->PartitionIndex;
            pr->LowWatermark = -1;
            rc = kb_meta_part(svc->meta, name ? name : "", p->PartitionIndex, &part);
            if (rc != KB_META_OK) {
                pr->ErrorCode = kb_h_lookup_err(rc, false);
                continue;
            }
            if (part->internal && !kb_apisvc_privileged(ctx)) {
                pr->ErrorCode = KP_ERR_INVALID_TOPIC_EXCEPTION;
            } else if ((pr->ErrorCode = kb_part_write_check(part, &why)) == 0) {
                if (p->Offset < -1) {
                    pr->ErrorCode = KP_ERR_OFFSET_OUT_OF_RANGE;
                } else {
                    rc = kb_log_delete_records(part->log, p->Offset, &start);
                    pr->ErrorCode = kb_h_sto_err(rc);
                    if (!rc)
                        pr->LowWatermark = start;
                }
            }
            kb_part_release(part);
        }
    }
    return kb_h_respond(ctx, &kp_DeleteRecordsResponse_desc, &resp, respp);
}

int kb_h_topics_register(kb_apisvc_t *svc)
{
    int rc = kb_h_register(svc, KP_APIKEY_CreateTopics, 2, 8, kb_create_topics_handle, 0);
    if (!rc)
        rc = kb_h_register(svc, KP_APIKEY_DeleteTopics, 1, 6, kb_delete_topics_handle, 0);
    if (!rc)
        rc = kb_h_register(svc, KP_APIKEY_CreatePartitions, 0, 3, kb_create_partitions_handle, 0);
    if (!rc)
        rc = kb_h_register(svc, KP_APIKEY_DeleteRecords, 0, 2, kb_delete_records_handle, 0);
    return rc;
}
