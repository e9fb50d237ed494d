/*
 * km_rpc_mconf.c - DescribeConfigs (32) and IncrementalAlterConfigs (44) on the MIRROR config
 * resource (type KP_CONFIG_RESOURCE_TYPE_MIRROR, named after the mirror; design M114, M115).
 *
 * The host hands over requests whose resources are all of that type (kbx 1.2
 * config_resource_type), on the broker that received them. Describe: every mirror key with its
 * effective value from the catalog's definition (km_mconf_describe: secrets never carry one).
 * Alter: the operations applied to the stored key list (km_mconf_alter: validated as CreateMirror
 * does), then the definition written again (same mirror id, creation time and source cluster id,
 * the new keys) with controller_write; every broker's catalog applies the new version, the
 * fetchers reconnect when a connection key changed (km_fetch_mirror_set) and the next discovery
 * and sync runs read the new filters and intervals. Resources are altered one after the other.
 */
#include <stdio.h>
#include <string.h>

#include "catalog/km_catalog.h"
#include "catalog/km_mconf.h"
#include "core/km_plugin_types.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "rpc/km_rpc_int.h"
#include "util/km_log.h"
#include "util/km_mem.h"

/* Kafka AclOperation codes, on the cluster (as CreateMirror and DescribeMirrors check). */
#define KM_MCONF_OP_ACL_ALTER    7
#define KM_MCONF_OP_ACL_DESCRIBE 8

/* Kafka's DescribeConfigs ConfigSource values used here. */
#define KM_MCONF_SOURCE_SET     1 /* set on this resource (as a topic override is) */
#define KM_MCONF_SOURCE_DEFAULT 5

/* Kafka's ConfigType of a table entry (DescribeConfigs v3+). */
static int8_t km_mconf_kafka_type(km_config_type_t t)
{
    switch (t) {
    case KM_CT_BOOL:
        return 1;
    case KM_CT_INT:
        return 3;
    case KM_CT_LONG:
        return 5;
    case KM_CT_DOUBLE:
        return 6;
    case KM_CT_LIST:
    case KM_CT_HOSTPORT_LIST:
        return 7;
    case KM_CT_PASSWORD:
        return 9;
    default:
        return 2;
    }
}

static kp_str_t km_mconf_view(const char *s)
{
    return s != NULL ? (kp_str_t){s, (int32_t)strlen(s)} : KP_STR_NULL;
}

/* ---- answers with one error for every resource ------------------------------------------- */

void km_rpc_mconf_fail(km_rpc_req_t *req, int16_t error_code, const char *msg)
{
    if (req->api_key == 32) {
        const kp_DescribeConfigsRequest_t *rq = req->rq_ok ? req->rq : NULL;
        kp_DescribeConfigsResponse_t resp;
        int32_t n = rq != NULL && rq->Resources.cnt > 0 ? rq->Resources.cnt : 0;

        kp_DescribeConfigsResponse_init(&resp);
        resp.Results.v = kp_arena_calloc(&req->ar, (size_t)n + 1, sizeof(*resp.Results.v));
        resp.Results.cnt = resp.Results.v != NULL ? n : 0;
        for (int32_t i = 0; i < resp.Results.cnt; i++) {
            kp_DescribeConfigsResponse_DescribeConfigsResult_t *r = &resp.Results.v[i];
            kp_DescribeConfigsResponse_DescribeConfigsResult_init(r);
            r->ErrorCode = error_code;
            r->ErrorMessage = km_rpc_str(req, msg);
            r->ResourceType = rq->Resources.v[i].ResourceType;
            r->ResourceName = rq->Resources.v[i].ResourceName;
            r->Configs.cnt = 0;
        }
        km_rpc_complete(req, &resp);
    } else {
        const kp_IncrementalAlterConfigsRequest_t *rq = req->rq_ok ? req->rq : NULL;
        kp_IncrementalAlterConfigsResponse_t resp;
        int32_t n = rq != NULL && rq->Resources.cnt > 0 ? rq->Resources.cnt : 0;

        kp_IncrementalAlterConfigsResponse_init(&resp);
        resp.Responses.v = kp_arena_calloc(&req->ar, (size_t)n + 1, sizeof(*resp.Responses.v));
        resp.Responses.cnt = resp.Responses.v != NULL ? n : 0;
        for (int32_t i = 0; i < resp.Responses.cnt; i++) {
            kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_t *r =
                &resp.Responses.v[i];
            kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_init(r);
            r->ErrorCode = error_code;
            r->ErrorMessage = km_rpc_str(req, msg);
            r->ResourceType = rq->Resources.v[i].ResourceType;
            r->ResourceName = rq->Resources.v[i].ResourceName;
        }
        km_rpc_complete(req, &resp);
    }
}

/* Whether @p name names a mirror this broker does not know (yet): a mirror created through
 * another broker reaches this one's catalog through the metadata log. */
static bool km_mconf_unknown(km_rpc_req_t *req, kp_str_t name)
{
    char *s = km_rpc_cstr(req, name);
    return s != NULL && km_catalog_mirror_find(&req->cm->catalog, s) == NULL;
}

/* ---- DescribeConfigs ------------------------------------------------------------------------ */

/* Whether the request asked for def (null key list: every key; a key by its name or alias). */
static bool km_mconf_wanted(km_rpc_req_t *req,
                            const kp_DescribeConfigsRequest_DescribeConfigsResource_t *res,
                            const km_config_def_t *def)
{
    if (res->ConfigurationKeys.cnt < 0)
        return true;
    for (int32_t k = 0; k < res->ConfigurationKeys.cnt; k++) {
        char *key = km_rpc_cstr(req, res->ConfigurationKeys.v[k]);
        if (key != NULL && km_config_find(&km_config_mirror_scope, key) == def)
            return true;
    }
    return false;
}

static void km_mconf_describe_one(km_rpc_req_t *req,
                                  const kp_DescribeConfigsRequest_DescribeConfigsResource_t *res,
                                  kp_DescribeConfigsResponse_DescribeConfigsResult_t *r)
{
    km_plugin_t *cm = req->cm;
    char *name = km_rpc_cstr(req, res->ResourceName);
    const km_mirror_def_t *def;
    km_mconf_entry_t *e;
    size_t n;

    r->Configs.cnt = 0;
    if (name == NULL || (int32_t)strlen(name) != res->ResourceName.len) {
        r->ErrorCode = KP_ERR_INVALID_REQUEST;
        r->ErrorMessage = km_rpc_str(req, "The mirror name is null or not a valid string");
        return;
    }
    def = km_catalog_mirror_find(&cm->catalog, name);
    if (def == NULL) {
        char msg[320];
        snprintf(msg, sizeof(msg), "Mirror %s does not exist", name);
        r->ErrorCode = KP_ERR_UNKNOWN_CLUSTER_MIRROR;
        r->ErrorMessage = km_rpc_str(req, msg);
        return;
    }
    e = kp_arena_calloc(&req->ar, km_config_mirror_scope.ndefs + 1, sizeof(*e));
    r->Configs.v =
        kp_arena_calloc(&req->ar, km_config_mirror_scope.ndefs + 1, sizeof(*r->Configs.v));
    if (e == NULL || r->Configs.v == NULL) {
        r->ErrorCode = KP_ERR_UNKNOWN_SERVER_ERROR;
        r->ErrorMessage = km_rpc_str(req, "out of memory");
        return;
    }
    n = km_mconf_describe((const char *const *)def->keys, (const char *const *)def->values,
                          def->nconfig, e, km_config_mirror_scope.ndefs);
    for (size_t i = 0; i < n; i++) {
        kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *c;
        if (!km_mconf_wanted(req, res, e[i].def))
            continue;
        c = &r->Configs.v[r->Configs.cnt++];
        kp_DescribeConfigsResponse_DescribeConfigsResourceResult_init(c);
        c->Name = km_mconf_view(e[i].def->name);
        c->Value = e[i].value != NULL ? km_rpc_str(req, e[i].value) : KP_STR_NULL;
        c->ReadOnly = false;
        c->ConfigSource = e[i].is_default ? KM_MCONF_SOURCE_DEFAULT : KM_MCONF_SOURCE_SET;
        c->IsSensitive = e[i].sensitive;
        c->Synonyms.cnt = 0;
        c->ConfigType = km_mconf_kafka_type(e[i].def->type);
        c->Documentation = km_mconf_view(e[i].def->doc);
    }
}

void km_rpc_describe_configs(km_rpc_req_t *req)
{
    const kp_DescribeConfigsRequest_t *rq = req->rq;
    kp_DescribeConfigsResponse_t resp;
    int32_t n = rq->Resources.cnt > 0 ? rq->Resources.cnt : 0;

    if (!km_rpc_authorized(req, KM_MCONF_OP_ACL_DESCRIBE)) {
        km_rpc_fail(req, KP_ERR_CLUSTER_MIRROR_AUTHORIZATION_FAILED,
                    "%s may not describe mirrors (DESCRIBE on the cluster)", req->principal);
        return;
    }
    /* As the other mirror RPCs: an unknown mirror is looked up again for a while (M17). */
    for (int32_t i = 0; i < n; i++)
        if (km_mconf_unknown(req, rq->Resources.v[i].ResourceName)) {
            if (km_rpc_mirror_grace(req, km_rpc_describe_configs))
                return;
            break;
        }
    kp_DescribeConfigsResponse_init(&resp);
    resp.Results.v = kp_arena_calloc(&req->ar, (size_t)n + 1, sizeof(*resp.Results.v));
    if (resp.Results.v == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    resp.Results.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        kp_DescribeConfigsResponse_DescribeConfigsResult_t *r = &resp.Results.v[i];
        kp_DescribeConfigsResponse_DescribeConfigsResult_init(r);
        r->ResourceType = rq->Resources.v[i].ResourceType;
        r->ResourceName = rq->Resources.v[i].ResourceName;
        km_mconf_describe_one(req, &rq->Resources.v[i], r);
    }
    km_rpc_complete(req, &resp);
}

/* ---- IncrementalAlterConfigs ---------------------------------------------------------------- */

typedef struct km_alter_st {
    int32_t next; /* the resource to alter next */
    kp_IncrementalAlterConfigsResponse_t resp;
    char *name; /* the resource being written */
} km_alter_st_t;

static void km_alter_next(km_rpc_req_t *req);

static void km_alter_set(km_rpc_req_t *req, int32_t i, int16_t ec, const char *msg)
{
    km_alter_st_t *st = req->st;
    st->resp.Responses.v[i].ErrorCode = ec;
    st->resp.Responses.v[i].ErrorMessage = ec != 0 ? km_rpc_str(req, msg) : KP_STR_NULL;
}

static void km_alter_written(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                             int32_t tag)
{
    km_alter_st_t *st = req->st;
    char msg[256];

    (void)body;
    (void)len;
    if (status != KBX_OK) {
        snprintf(msg, sizeof(msg),
                 "The configuration of mirror %s was not changed: the controller write failed "
                 "(%s)",
                 st->name, km_rpc_host_errstr(status));
        km_log_warn(req->cm, "%s", msg);
        km_alter_set(req, tag, km_rpc_host_error(status), msg);
    } else {
        km_log_info(req->cm, "mirror %s: configuration changed by %s", st->name, req->principal);
    }
    km_alter_next(req);
}

/* Alter resource @p i; true when a write is in flight (km_alter_written continues). */
static bool km_alter_one(km_rpc_req_t *req, int32_t i)
{
    const kp_IncrementalAlterConfigsRequest_t *rq = req->rq;
    const kp_IncrementalAlterConfigsRequest_AlterConfigsResource_t *res = &rq->Resources.v[i];
    km_plugin_t *cm = req->cm;
    km_alter_st_t *st = req->st;
    char *name = km_rpc_cstr(req, res->ResourceName);
    int32_t nc = res->Configs.cnt > 0 ? res->Configs.cnt : 0;
    const km_mirror_def_t *def;
    km_mconf_op_t *ops;
    km_mconf_result_t out;
    uint8_t *val = NULL;
    size_t len = 0;
    kbx_record_t rec;
    const kbx_record_t *recs[1] = {&rec};
    char msg[512];
    int16_t ec;
    int32_t rc;

    if (name == NULL || (int32_t)strlen(name) != res->ResourceName.len) {
        km_alter_set(req, i, KP_ERR_INVALID_REQUEST, "The mirror name is null or not valid");
        return false;
    }
    def = km_catalog_mirror_find(&cm->catalog, name);
    if (def == NULL) {
        snprintf(msg, sizeof(msg), "Mirror %s does not exist", name);
        km_alter_set(req, i, KP_ERR_UNKNOWN_CLUSTER_MIRROR, msg);
        return false;
    }
    ops = kp_arena_calloc(&req->ar, (size_t)nc + 1, sizeof(*ops));
    if (ops == NULL) {
        km_alter_set(req, i, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return false;
    }
    for (int32_t k = 0; k < nc; k++) {
        const kp_IncrementalAlterConfigsRequest_AlterableConfig_t *c = &res->Configs.v[k];
        ops[k].key = km_rpc_cstr(req, c->Name);
        ops[k].value = km_rpc_cstr(req, c->Value);
        ops[k].op = c->ConfigOperation;
        if ((ops[k].key != NULL && (int32_t)strlen(ops[k].key) != c->Name.len) ||
            (ops[k].value != NULL && (int32_t)strlen(ops[k].value) != c->Value.len)) {
            km_alter_set(req, i, KP_ERR_INVALID_REQUEST, "A config name or value is not valid");
            return false;
        }
    }
    ec = km_mconf_alter(cm, (const char *const *)def->keys, (const char *const *)def->values,
                        def->nconfig, ops, (size_t)nc, &out, msg, sizeof(msg));
    if (ec != 0) {
        km_alter_set(req, i, ec, msg);
        return false;
    }
    if (rq->ValidateOnly || !out.changed) {
        km_mconf_result_free(cm, &out);
        return false;
    }
    if (km_catalog_def_encode(cm, def->mirror_id, def->creation_time_ms, def->source_cluster_id,
                              (const char *const *)out.keys, (const char *const *)out.values, out.n,
                              &val, &len) != KM_OK) {
        km_mconf_result_free(cm, &out);
        km_alter_set(req, i, KP_ERR_INVALID_CONFIG, "The new definition cannot be encoded");
        return false;
    }
    if (out.reconnect)
        km_log_info(cm, "mirror %s: connection settings change: its fetchers will reconnect", name);
    km_mconf_result_free(cm, &out);
    memset(&rec, 0, sizeof(rec));
    rec.struct_size = sizeof(rec);
    rec.record_type = KM_CATALOG_RECORD_MIRROR;
    rec.key = (const uint8_t *)name;
    rec.key_len = strlen(name);
    rec.value = val;
    rec.value_len = len;
    st->name = name;
    rc = km_rpc_controller_write(req, recs, 1, km_alter_written, i);
    km_free(cm, val);
    if (rc != KBX_OK) {
        snprintf(msg, sizeof(msg), "The configuration of mirror %s was not changed: %s", name,
                 km_rpc_host_errstr(rc));
        km_alter_set(req, i, km_rpc_host_error(rc), msg);
        return false;
    }
    return true;
}

static void km_alter_next(km_rpc_req_t *req)
{
    km_alter_st_t *st = req->st;

    if (km_rpc_req_done(req))
        return;
    while (st->next < st->resp.Responses.cnt) {
        int32_t i = st->next++;
        if (km_alter_one(req, i))
            return;
    }
    km_rpc_complete(req, &st->resp);
}

void km_rpc_alter_configs(km_rpc_req_t *req)
{
    const kp_IncrementalAlterConfigsRequest_t *rq = req->rq;
    int32_t n = rq->Resources.cnt > 0 ? rq->Resources.cnt : 0;
    km_alter_st_t *st;

    if (!km_rpc_authorized(req, KM_MCONF_OP_ACL_ALTER)) {
        km_rpc_fail(req, KP_ERR_CLUSTER_MIRROR_AUTHORIZATION_FAILED,
                    "%s may not alter mirrors (ALTER on the cluster)", req->principal);
        return;
    }
    for (int32_t i = 0; i < n; i++)
        if (km_mconf_unknown(req, rq->Resources.v[i].ResourceName)) {
            if (km_rpc_mirror_grace(req, km_rpc_alter_configs))
                return;
            break;
        }
    st = kp_arena_calloc(&req->ar, 1, sizeof(*st));
    if (st == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    kp_IncrementalAlterConfigsResponse_init(&st->resp);
    st->resp.Responses.v = kp_arena_calloc(&req->ar, (size_t)n + 1, sizeof(*st->resp.Responses.v));
    if (st->resp.Responses.v == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    st->resp.Responses.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_t *r =
            &st->resp.Responses.v[i];
        kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_init(r);
        r->ResourceType = rq->Resources.v[i].ResourceType;
        r->ResourceName = rq->Resources.v[i].ResourceName;
    }
    req->st = st; /* in the arena: no st_free */
    km_alter_next(req);
}
