/*
 * kb_h_configs.c -- DescribeConfigs v1-4, AlterConfigs v0-2, IncrementalAlterConfigs v0-1 for
 * TOPIC and BROKER resources.
 *
 * DescribeConfigs, topics: every topic key kbroker knows except mirror.name (hidden), with its
 * effective value and source (topic override > dynamic broker > dynamic default > static
 * broker config > default), synonyms when asked, config types and documentation (v3+).
 * Brokers: this node's id (every broker key; read-only unless Kafka can change it at run time;
 * passwords are sensitive and never shown) or "" (the dynamic cluster defaults).
 * Alter: topic overrides (AlterConfigs replaces the set, keeping mirror.name; Incremental
 * applies SET/DELETE/APPEND/SUBTRACT), dynamic broker configs of this node or the cluster
 * default. mirror.name is refused from clients (only the internal path may set it). Other
 * resource types get INVALID_REQUEST.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kb_api_int.h"
#include "kb_apilog.h"
#include "kp_errcode.h"

static bool kb_cfg_wanted(const kp_DescribeConfigsRequest_DescribeConfigsResource_t *r,
                          const char *key)
{
    if (r->ConfigurationKeys.cnt < 0)
        return true;
    for (int32_t i = 0; i < r->ConfigurationKeys.cnt; i++) {
        kp_str_t k = r->ConfigurationKeys.v[i];
        if (k.len >= 0 && (size_t)k.len == strlen(key) && !memcmp(k.ptr, key, (size_t)k.len))
            return true;
    }
    return false;
}

static bool kb_cfg_secret(const char *key)
{
    return strstr(key, "password") || strstr(key, "secret") || strstr(key, "jaas");
}

typedef struct kb_cfg_list_s {
    kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *v;
    size_t n, cap;
} kb_cfg_list_t;

static kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *kb_cfg_add(kp_arena_t *ar,
                                                                              kb_cfg_list_t *l)
{
    kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *e;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *nv =
            kp_arena_calloc(ar, nc, sizeof(*nv));
        if (!nv)
            return NULL;
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(*nv));
        l->v = nv;
        l->cap = nc;
    }
    e = &l->v[l->n++];
    kp_DescribeConfigsResponse_DescribeConfigsResourceResult_init(e);
    e->Synonyms.cnt = 0;
    return e;
}

static int kb_cfg_synonyms(kp_arena_t *ar,
                           kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *e,
                           const kb_tconf_synval_t *syn, size_t n)
{
    e->Synonyms.v = kp_arena_calloc(ar, n + 1, sizeof(*e->Synonyms.v));
    if (!e->Synonyms.v)
        return -1;
    for (size_t i = 0; i < n; i++) {
        kp_DescribeConfigsResponse_DescribeConfigsSynonym_t *s = &e->Synonyms.v[i];
        kp_DescribeConfigsResponse_DescribeConfigsSynonym_init(s);
        s->Name = kb_h_view(syn[i].name);
        s->Value = syn[i].is_null ? KP_STR_NULL : kb_h_dup(ar, syn[i].value);
        s->Source = (int8_t)syn[i].source;
    }
    e->Synonyms.cnt = (int32_t)n;
    return 0;
}

static int16_t kb_cfg_describe_topic(kb_apisvc_t *svc, kb_reqctx_t *ctx,
                                     const kp_DescribeConfigsRequest_t *rq,
                                     const kp_DescribeConfigsRequest_DescribeConfigsResource_t *r,
                                     const char *name, const kb_dyncfg_t *dyn, kb_cfg_list_t *l)
{
    kb_kv_t *ov = NULL;
    size_t ovn = 0;
    kb_tconf_synval_t syn[KB_TCONF_SYN_ROOM];
    if (kb_meta_topic_configs(svc->meta, name, &ov, &ovn) != 0)
        return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    for (size_t i = 0; i < kb_tconf_defs_cnt; i++) {
        const kb_tconf_def_t *d = &kb_tconf_defs[i];
        kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *e;
        kb_tconf_val_t v;
        size_t ns = 0;
        if ((d->flags & KB_TCF_HIDDEN) || !kb_cfg_wanted(r, d->name))
            continue;
        kb_tconf_effective(d, ov, ovn, svc->cfg, dyn, &v, syn, &ns);
        e = kb_cfg_add(ctx->arena, l);
        if (!e)
            goto nomem;
        e->Name = kb_h_view(d->name);
        e->Value = v.is_null ? KP_STR_NULL : kb_h_dup(ctx->arena, v.value);
        e->ReadOnly = false;
        e->ConfigSource = (int8_t)v.source;
        e->IsSensitive = false;
        e->ConfigType = (int8_t)d->type;
        if (rq->IncludeDocumentation)
            e->Documentation = kb_h_view(d->doc);
        if (rq->IncludeSynonyms && kb_cfg_synonyms(ctx->arena, e, syn, ns) != 0)
            goto nomem;
    }
    kb_kv_free(ov, ovn);
    return 0;
nomem:
    kb_kv_free(ov, ovn);
    return KP_ERR_UNKNOWN_SERVER_ERROR;
}

static int16_t kb_cfg_describe_broker(kb_apisvc_t *svc, kb_reqctx_t *ctx,
                                      const kp_DescribeConfigsRequest_t *rq,
                                      const kp_DescribeConfigsRequest_DescribeConfigsResource_t *r,
                                      const char *name, const kb_dyncfg_t *dyn, kb_cfg_list_t *l)
{
    const kb_config_t *cfg = svc->cfg;
    bool node = name[0] != '\0';
    char self[16];
    snprintf(self, sizeof(self), "%" PRId32, kb_meta_node_id(svc->meta));
    if (node && strcmp(name, self))
        return KP_ERR_INVALID_REQUEST;
    if (!node) {
        /* The cluster-wide dynamic defaults only. */
        for (size_t i = 0; i < dyn->dflt_cnt; i++) {
            const kb_conf_def_t *d = kb_config_def(dyn->dflt[i].key);
            kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *e;
            bool secret = (d && d->type == KB_CT_PASSWORD) || kb_cfg_secret(dyn->dflt[i].key);
            if (!kb_cfg_wanted(r, dyn->dflt[i].key))
                continue;
            e = kb_cfg_add(ctx->arena, l);
            if (!e)
                return KP_ERR_UNKNOWN_SERVER_ERROR;
            e->Name = kb_h_dup(ctx->arena, dyn->dflt[i].key);
            e->Value = secret ? KP_STR_NULL : kb_h_dup(ctx->arena, dyn->dflt[i].value);
            e->ReadOnly = false;
            e->ConfigSource = KB_CS_DYNAMIC_DEFAULT_BROKER_CONFIG;
            e->IsSensitive = secret;
            e->ConfigType = (int8_t)(d ? kb_tconf_broker_type(d) : KB_TC_STRING);
            if (rq->IncludeDocumentation && d)
                e->Documentation = kb_h_view(d->doc);
        }
        return 0;
    }
    for (size_t i = 0; i < kb_config_defs_cnt; i++) {
        const kb_conf_def_t *d = &kb_config_defs[i];
        kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *e;
        kb_tconf_synval_t syn[4];
        size_t ns = 0;
        const char *dn = kb_kv_get(dyn->node, dyn->node_cnt, d->name);
        const char *dd = kb_kv_get(dyn->dflt, dyn->dflt_cnt, d->name);
        bool secret = d->type == KB_CT_PASSWORD;
        char sv[1024];
        bool have_static = kb_config_is_set(cfg, d->name);
        if (!kb_cfg_wanted(r, d->name))
            continue;
        e = kb_cfg_add(ctx->arena, l);
        if (!e)
            return KP_ERR_UNKNOWN_SERVER_ERROR;
        e->Name = kb_h_view(d->name);
        e->ReadOnly = !(d->flags & KB_CF_DYNAMIC);
        e->IsSensitive = secret;
        e->ConfigType = (int8_t)kb_tconf_broker_type(d);
        if (rq->IncludeDocumentation)
            e->Documentation = kb_h_view(d->doc);
        if (dn) {
            syn[ns++] = (kb_tconf_synval_t){.name = d->name, .source = KB_CS_DYNAMIC_BROKER_CONFIG};
            snprintf(syn[ns - 1].value, sizeof(syn[0].value), "%s", dn);
        }
        if (dd) {
            syn[ns++] =
                (kb_tconf_synval_t){.name = d->name, .source = KB_CS_DYNAMIC_DEFAULT_BROKER_CONFIG};
            snprintf(syn[ns - 1].value, sizeof(syn[0].value), "%s", dd);
        }
        if (have_static) {
            syn[ns++] = (kb_tconf_synval_t){.name = d->name, .source = KB_CS_STATIC_BROKER_CONFIG};
            syn[ns - 1].is_null = !kb_tconf_broker_static(cfg, d, sv, sizeof(sv));
            snprintf(syn[ns - 1].value, sizeof(syn[0].value), "%s", sv);
        }
        syn[ns++] = (kb_tconf_synval_t){.name = d->name, .source = KB_CS_DEFAULT_CONFIG};
        syn[ns - 1].is_null = !d->dflt;
        snprintf(syn[ns - 1].value, sizeof(syn[0].value), "%s", d->dflt ? d->dflt : "");
        if (!have_static && !dn && !dd) {
            /* Defaults as the broker resolved them (derived keys such as log.dirs). */
            bool nonnull = kb_tconf_broker_static(cfg, d, sv, sizeof(sv));
            syn[ns - 1].is_null = !nonnull;
            snprintf(syn[ns - 1].value, sizeof(syn[0].value), "%s", sv);
        }
        e->Value = secret || syn[0].is_null ? KP_STR_NULL : kb_h_dup(ctx->arena, syn[0].value);
        e->ConfigSource = (int8_t)syn[0].source;
        for (size_t k = 0; secret && k < ns; k++)
            syn[k].is_null = true;
        if (rq->IncludeSynonyms && kb_cfg_synonyms(ctx->arena, e, syn, ns) != 0)
            return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
    /* Dynamic plugin keys (mirror.*) that the table does not know. */
    for (size_t i = 0; i < dyn->node_cnt + dyn->dflt_cnt; i++) {
        const kb_kv_t *kv = i < dyn->node_cnt ? &dyn->node[i] : &dyn->dflt[i - dyn->node_cnt];
        kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *e;
        bool secret = kb_cfg_secret(kv->key);
        if (kb_config_def(kv->key) || !kb_cfg_wanted(r, kv->key) ||
            (i >= dyn->node_cnt && kb_kv_get(dyn->node, dyn->node_cnt, kv->key)))
            continue;
        e = kb_cfg_add(ctx->arena, l);
        if (!e)
            return KP_ERR_UNKNOWN_SERVER_ERROR;
        e->Name = kb_h_dup(ctx->arena, kv->key);
        e->Value = secret ? KP_STR_NULL : kb_h_dup(ctx->arena, kv->value);
        e->ConfigSource =
            i < dyn->node_cnt ? KB_CS_DYNAMIC_BROKER_CONFIG : KB_CS_DYNAMIC_DEFAULT_BROKER_CONFIG;
        e->IsSensitive = secret;
        e->ConfigType = KB_TC_STRING;
    }
    return 0;
}

static kb_api_result_t kb_describe_configs_build(kb_apisvc_t *svc, kb_reqctx_t *ctx,
                                                 const void *rqp, kb_resp_t **respp)
{
    const kp_DescribeConfigsRequest_t rq = *(const kp_DescribeConfigsRequest_t *)rqp;
    kp_DescribeConfigsResponse_t resp;
    kb_kv_t *dn = NULL, *dd = NULL;
    size_t dnc = 0, ddc = 0;
    kb_dyncfg_t dyn;
    int32_t n;

    if (kb_meta_broker_dyncfg(svc->meta, &dn, &dnc, &dd, &ddc) != 0)
        return KB_API_CLOSE;
    dyn = (kb_dyncfg_t){dn, dnc, dd, ddc};
    kp_DescribeConfigsResponse_init(&resp);
    n = rq.Resources.cnt > 0 ? rq.Resources.cnt : 0;
    resp.Results.v = kp_arena_calloc(ctx->arena, (size_t)n + 1, sizeof(*resp.Results.v));
    if (!resp.Results.v)
        goto fail;
    resp.Results.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        const kp_DescribeConfigsRequest_DescribeConfigsResource_t *r = &rq.Resources.v[i];
        kp_DescribeConfigsResponse_DescribeConfigsResult_t *res = &resp.Results.v[i];
        char *name = kb_h_str(ctx->arena, r->ResourceName);
        kb_cfg_list_t l = {0};
        kp_DescribeConfigsResponse_DescribeConfigsResult_init(res);
        res->ResourceType = r->ResourceType;
        res->ResourceName = r->ResourceName;
        if (!name) {
            res->ErrorCode = KP_ERR_INVALID_REQUEST;
        } else if (r->ResourceType == KB_RES_TOPIC) {
            res->ErrorCode = kb_cfg_describe_topic(svc, ctx, &rq, r, name, &dyn, &l);
            if (res->ErrorCode == KP_ERR_UNKNOWN_TOPIC_OR_PARTITION)
                res->ErrorMessage = kb_h_fmt(ctx->arena, "Topic %s does not exist", name);
        } else if (r->ResourceType == KB_RES_BROKER) {
            res->ErrorCode = kb_cfg_describe_broker(svc, ctx, &rq, r, name, &dyn, &l);
            if (res->ErrorCode == KP_ERR_INVALID_REQUEST)
                res->ErrorMessage = kb_h_fmt(ctx->arena,
                                             "Unexpected broker id, expected %" PRId32
                                             " or empty string, but received %s",
                                             kb_meta_node_id(svc->meta), name);
        } else {
            res->ErrorCode = KP_ERR_INVALID_REQUEST;
            res->ErrorMessage =
                kb_h_fmt(ctx->arena, "Unsupported resource type %d", (int)r->ResourceType);
        }
        if (res->ErrorCode) {
            res->Configs.cnt = 0;
        } else {
            res->Configs.v = l.v;
            res->Configs.cnt = (int32_t)l.n;
        }
    }
    kb_kv_free(dn, dnc);
    kb_kv_free(dd, ddc);
    return kb_h_respond(ctx, &kp_DescribeConfigsResponse_desc, &resp, respp);
fail:
    kb_kv_free(dn, dnc);
    kb_kv_free(dd, ddc);
    return KB_API_CLOSE;
}

static kb_api_result_t kb_describe_configs_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_DescribeConfigsRequest_t rq;
    if (kb_h_decode(ctx, &kp_DescribeConfigsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    return kb_h_big_response(opaque, ctx, &rq, respp, kb_describe_configs_build);
}

/* ---- alter ------------------------------------------------------------------------------------
 */

/* Apply one resource's operations; the error code, message in @p msg. */
static int16_t kb_cfg_alter(kb_apisvc_t *svc, kb_reqctx_t *ctx, int8_t type, const char *name,
                            const kb_cfg_op_t *ops, size_t n, bool replace_all, bool validate_only,
                            char *msg, size_t msg_size)
{
    if (!name) {
        snprintf(msg, msg_size, "Resource name is null");
        return KP_ERR_INVALID_REQUEST;
    }
    if (type == KB_RES_TOPIC) {
        if (kb_meta_topic_by_name(svc->meta, name, NULL) != 0) {
            snprintf(msg, msg_size, "Topic %s does not exist", name);
            return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
        }
        return kb_meta_alter_topic_configs(svc->meta, name, ops, n, replace_all,
                                           kb_apisvc_privileged(ctx), validate_only, msg, msg_size);
    }
    if (type == KB_RES_BROKER)
        return kb_meta_alter_broker_configs(svc->meta, name, ops, n, replace_all, validate_only,
                                            msg, msg_size);
    snprintf(msg, msg_size, "Unsupported resource type %d", (int)type);
    return KP_ERR_INVALID_REQUEST;
}

static kb_api_result_t kb_alter_configs_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_apisvc_t *svc = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_AlterConfigsRequest_t rq;
    kp_AlterConfigsResponse_t resp;
    int32_t n;

    if (kb_h_decode(ctx, &kp_AlterConfigsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_AlterConfigsResponse_init(&resp);
    n = rq.Resources.cnt > 0 ? rq.Resources.cnt : 0;
    resp.Responses.v = kp_arena_calloc(ctx->arena, (size_t)n + 1, sizeof(*resp.Responses.v));
    if (!resp.Responses.v)
        return KB_API_CLOSE;
    resp.Responses.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        const kp_AlterConfigsRequest_AlterConfigsResource_t *r = &rq.Resources.v[i];
        kp_AlterConfigsResponse_AlterConfigsResourceResponse_t *res = &resp.Responses.v[i];
        int32_t nc = r->Configs.cnt > 0 ? r->Configs.cnt : 0;
        kb_cfg_op_t *ops = kp_arena_calloc(ctx->arena, (size_t)nc + 1, sizeof(*ops));
        char msg[512] = "";
        kp_AlterConfigsResponse_AlterConfigsResourceResponse_init(res);
        res->ResourceType = r->ResourceType;
        res->ResourceName = r->ResourceName;
        if (!ops)
            return KB_API_CLOSE;
        for (int32_t k = 0; k < nc; k++) {
            ops[k].key = kb_h_str(ctx->arena, r->Configs.v[k].Name);
            ops[k].value = kb_h_str(ctx->arena, r->Configs.v[k].Value);
            ops[k].op = KB_CFGOP_SET;
            if (!ops[k].key || (!ops[k].value && r->ResourceType == KB_RES_TOPIC)) {
                res->ErrorCode = KP_ERR_INVALID_CONFIG;
                snprintf(msg, sizeof(msg), "Null value not supported for topic configs: %s",
                         ops[k].key ? ops[k].key : "(null)");
                break;
            }
            if (!ops[k].value)
                ops[k].op = KB_CFGOP_DELETE;
        }
        if (!res->ErrorCode)
            res->ErrorCode =
                kb_cfg_alter(svc, ctx, r->ResourceType, kb_h_str(ctx->arena, r->ResourceName), ops,
                             (size_t)nc, true, rq.ValidateOnly, msg, sizeof(msg));
        if (res->ErrorCode)
            res->ErrorMessage = kb_h_dup(ctx->arena, msg);
    }
    return kb_h_respond(ctx, &kp_AlterConfigsResponse_desc, &resp, respp);
}

static kb_api_result_t kb_incr_alter_configs_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_apisvc_t *svc = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_IncrementalAlterConfigsRequest_t rq;
    kp_IncrementalAlterConfigsResponse_t resp;
    int32_t n;

    if (kb_h_decode(ctx, &kp_IncrementalAlterConfigsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_IncrementalAlterConfigsResponse_init(&resp);
    n = rq.Resources.cnt > 0 ? rq.Resources.cnt : 0;
    resp.Responses.v = kp_arena_calloc(ctx->arena, (size_t)n + 1, sizeof(*resp.Responses.v));
    if (!resp.Responses.v)
        return KB_API_CLOSE;
    resp.Responses.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        const kp_IncrementalAlterConfigsRequest_AlterConfigsResource_t *r = &rq.Resources.v[i];
        kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_t *res =
            &resp.Responses.v[i];
        int32_t nc = r->Configs.cnt > 0 ? r->Configs.cnt : 0;
        kb_cfg_op_t *ops = kp_arena_calloc(ctx->arena, (size_t)nc + 1, sizeof(*ops));
        char msg[512] = "";
        kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_init(res);
        res->ResourceType = r->ResourceType;
        res->ResourceName = r->ResourceName;
        if (!ops)
            return KB_API_CLOSE;
        for (int32_t k = 0; k < nc; k++) {
            const kp_IncrementalAlterConfigsRequest_AlterableConfig_t *c = &r->Configs.v[k];
            ops[k].key = kb_h_str(ctx->arena, c->Name);
            ops[k].value = kb_h_str(ctx->arena, c->Value);
            ops[k].op = c->ConfigOperation;
            if (!ops[k].key || c->ConfigOperation < 0 || c->ConfigOperation > 3 ||
                (c->ConfigOperation != KB_CFGOP_DELETE && !ops[k].value)) {
                res->ErrorCode = !ops[k].key || (c->ConfigOperation < 0 || c->ConfigOperation > 3)
                                     ? KP_ERR_INVALID_REQUEST
                                     : KP_ERR_INVALID_CONFIG;
                snprintf(msg, sizeof(msg), "Invalid config operation or null value for %s",
                         ops[k].key ? ops[k].key : "(null)");
                break;
            }
        }
        if (!res->ErrorCode)
            res->ErrorCode =
                kb_cfg_alter(svc, ctx, r->ResourceType, kb_h_str(ctx->arena, r->ResourceName), ops,
                             (size_t)nc, false, rq.ValidateOnly, msg, sizeof(msg));
        if (res->ErrorCode)
            res->ErrorMessage = kb_h_dup(ctx->arena, msg);
    }
    return kb_h_respond(ctx, &kp_IncrementalAlterConfigsResponse_desc, &resp, respp);
}

int kb_h_configs_register(kb_apisvc_t *svc)
{
    int rc = kb_h_register(svc, KP_APIKEY_DescribeConfigs, 1, 4, kb_describe_configs_handle,
                           KB_API_CONCURRENT);
    if (!rc)
        rc = kb_h_register(svc, KP_APIKEY_AlterConfigs, 0, 2, kb_alter_configs_handle, 0);
    if (!rc)
        rc = kb_h_register(svc, KP_APIKEY_IncrementalAlterConfigs, 0, 1,
                           kb_incr_alter_configs_handle, 0);
    return rc;
}
