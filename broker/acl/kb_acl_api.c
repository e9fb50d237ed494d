/*
 * kb_acl_api.c -- DescribeAcls, CreateAcls and DeleteAcls (kb_acl_api.h).
 */
#include "kb_acl_api.h"

#include <stdio.h>
#include <string.h>

#include "kb_err.h"
#include "kb_log.h"
#include "kb_net.h"
#include "kb_resp.h"
#include "kp_errcode.h"
#include "kp_msgs.h"

#define KB_ACL_NO_AUTHORIZER_DESCRIBE "No Authorizer is configured on the broker"
#define KB_ACL_NO_AUTHORIZER          "No Authorizer is configured."

/* ---- helpers --------------------------------------------------------------------------------- */

static int kb_acl_api_decode(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, void *msg)
{
    kp_msg_init(desc, msg);
    if (kp_msg_decode(desc, &ctx->body, ctx->arena, msg, ctx->api_version) != 0) {
        kb_log_debug("acl", "%s: malformed %s v%d: %s", ctx->peer, desc->name, ctx->api_version,
                     ctx->body.errstr ? ctx->body.errstr : "?");
        return -1;
    }
    return 0;
}

static kb_api_result_t kb_acl_api_respond(kb_reqctx_t *ctx, const kp_msg_desc_t *desc,
                                          const void *msg, kb_resp_t **respp)
{
    kp_writer_t wr;
    kp_writer_init(&wr);
    if (kp_msg_encode(desc, &wr, msg, ctx->api_version) != 0) {
        kb_log_error("acl", "cannot encode %s v%d", desc->name, ctx->api_version);
        kp_writer_free(&wr);
        return KB_API_CLOSE;
    }
    *respp = kb_resp_from_writer(&wr);
    kp_writer_free(&wr);
    return *respp ? KB_API_RESPOND : KB_API_CLOSE;
}

/* A NUL-terminated arena copy of @p s; NULL for a null string or out of memory (*oom set). A
 * string with a NUL byte sets *nul (no binding can contain one). */
static char *kb_acl_api_cstr(kp_arena_t *ar, kp_str_t s, bool *nul, bool *oom)
{
    char *p;
    if (s.len < 0)
        return NULL;
    if (s.len > 0 && memchr(s.ptr, '\0', (size_t)s.len))
        *nul = true;
    p = kp_arena_alloc(ar, (size_t)s.len + 1);
    if (!p) {
        *oom = true;
        return NULL;
    }
    if (s.len > 0)
        memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = '\0';
    return p;
}

/* The codec's init leaves nullable strings empty; Kafka answers null where nothing is to say. */
#define KB_ACL_NULL_STR ((kp_str_t){NULL, -1})

static kp_str_t kb_acl_api_view(const char *s)
{
    return (kp_str_t){s, (int32_t)strlen(s)};
}

/* An arena copy of @p s as a view (messages built on the stack). */
static kp_str_t kb_acl_api_dup(kp_arena_t *ar, const char *s)
{
    size_t n = strlen(s);
    char *p = kp_arena_alloc(ar, n + 1);
    if (!p)
        return (kp_str_t){"", 0};
    memcpy(p, s, n + 1);
    return (kp_str_t){p, (int32_t)n};
}

/* ---- DescribeAcls ---------------------------------------------------------------------------- */

static kb_api_result_t kb_acl_api_describe(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_acl_t *acl = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    kp_DescribeAclsRequest_t rq;
    kp_DescribeAclsResponse_t resp;
    kb_acl_filter_t f;
    kb_acl_list_t l = {0};
    const char *what;
    bool nul = false, oom = false;
    kb_api_result_t res;
    size_t ngroups = 0;

    if (kb_acl_api_decode(ctx, &kp_DescribeAclsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_DescribeAclsResponse_init(&resp);
    resp.ErrorMessage = KB_ACL_NULL_STR;
    resp.Resources.cnt = 0;
    if (!kb_acl_enabled(acl)) {
        resp.ErrorCode = KP_ERR_SECURITY_DISABLED;
        resp.ErrorMessage = kb_acl_api_view(KB_ACL_NO_AUTHORIZER_DESCRIBE);
        return kb_acl_api_respond(ctx, &kp_DescribeAclsResponse_desc, &resp, respp);
    }
    f = (kb_acl_filter_t){
        .restype = rq.ResourceTypeFilter,
        .pattern = rq.PatternTypeFilter,
        .op = rq.Operation,
        .perm = rq.PermissionType,
        .name = kb_acl_api_cstr(ar, rq.ResourceNameFilter, &nul, &oom),
        .principal = kb_acl_api_cstr(ar, rq.PrincipalFilter, &nul, &oom),
        .host = kb_acl_api_cstr(ar, rq.HostFilter, &nul, &oom),
    };
    f.none = nul;
    if (oom)
        return KB_API_CLOSE;
    if (kb_acl_filter_unknown(&f, &what)) {
        /* Kafka refuses such a request while parsing it; we answer it. */
        char msg[64];
        snprintf(msg, sizeof(msg), "Unknown %s.", what);
        resp.ErrorCode = KP_ERR_INVALID_REQUEST;
        resp.ErrorMessage = kb_acl_api_dup(ar, msg);
        return kb_acl_api_respond(ctx, &kp_DescribeAclsResponse_desc, &resp, respp);
    }
    if (kb_acl_describe(acl, &f, &l) != 0)
        return KB_API_CLOSE;
    /* l is sorted by resource: one response resource per run of equal resources. */
    for (size_t i = 0; i < l.cnt; i++)
        if (i == 0 || l.v[i].restype != l.v[i - 1].restype ||
            l.v[i].pattern != l.v[i - 1].pattern || strcmp(l.v[i].name, l.v[i - 1].name))
            ngroups++;
    resp.Resources.v = kp_arena_calloc(ar, ngroups + 1, sizeof(*resp.Resources.v));
    if (!resp.Resources.v) {
        kb_acl_list_free(&l);
        return KB_API_CLOSE;
    }
    for (size_t i = 0, j; i < l.cnt; i = j) {
        kp_DescribeAclsResponse_DescribeAclsResource_t *r = &resp.Resources.v[resp.Resources.cnt++];
        for (j = i; j < l.cnt && l.v[j].restype == l.v[i].restype &&
                    l.v[j].pattern == l.v[i].pattern && !strcmp(l.v[j].name, l.v[i].name);
             j++)
            ;
        kp_DescribeAclsResponse_DescribeAclsResource_init(r);
        r->ResourceType = l.v[i].restype;
        r->ResourceName = kb_acl_api_dup(ar, l.v[i].name);
        r->PatternType = l.v[i].pattern;
        r->Acls.v = kp_arena_calloc(ar, j - i + 1, sizeof(*r->Acls.v));
        if (!r->Acls.v) {
            kb_acl_list_free(&l);
            return KB_API_CLOSE;
        }
        r->Acls.cnt = 0;
        for (size_t k = i; k < j; k++) {
            kp_DescribeAclsResponse_AclDescription_t *d = &r->Acls.v[r->Acls.cnt++];
            kp_DescribeAclsResponse_AclDescription_init(d);
            d->Principal = kb_acl_api_dup(ar, l.v[k].principal);
            d->Host = kb_acl_api_dup(ar, l.v[k].host);
            d->Operation = l.v[k].op;
            d->PermissionType = l.v[k].perm;
        }
    }
    kb_acl_list_free(&l);
    res = kb_acl_api_respond(ctx, &kp_DescribeAclsResponse_desc, &resp, respp);
    return res;
}

/* ---- CreateAcls ------------------------------------------------------------------------------ */

static kb_api_result_t kb_acl_api_create(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_acl_t *acl = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    kp_CreateAclsRequest_t rq;
    kp_CreateAclsResponse_t resp;
    kb_acl_binding_t *valid;
    int32_t *valid_idx;
    size_t nvalid = 0;
    int32_t n;
    int rc;

    if (kb_acl_api_decode(ctx, &kp_CreateAclsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_CreateAclsResponse_init(&resp);
    n = rq.Creations.cnt > 0 ? rq.Creations.cnt : 0;
    resp.Results.v = kp_arena_calloc(ar, (size_t)n + 1, sizeof(*resp.Results.v));
    valid = kp_arena_calloc(ar, (size_t)n + 1, sizeof(*valid));
    valid_idx = kp_arena_calloc(ar, (size_t)n + 1, sizeof(*valid_idx));
    if (!resp.Results.v || !valid || !valid_idx)
        return KB_API_CLOSE;
    resp.Results.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        const kp_CreateAclsRequest_AclCreation_t *c = &rq.Creations.v[i];
        kp_CreateAclsResponse_AclCreationResult_t *r = &resp.Results.v[i];
        kb_acl_binding_t b = {0};
        bool nul = false, oom = false;
        char msg[300];

        kp_CreateAclsResponse_AclCreationResult_init(r);
        r->ErrorMessage = KB_ACL_NULL_STR;
        if (!kb_acl_enabled(acl)) {
            r->ErrorCode = KP_ERR_SECURITY_DISABLED;
            r->ErrorMessage = kb_acl_api_view(KB_ACL_NO_AUTHORIZER);
            continue;
        }
        b.restype = c->ResourceType;
        b.pattern = c->ResourcePatternType;
        b.op = c->Operation;
        b.perm = c->PermissionType;
        b.name = kb_acl_api_cstr(ar, c->ResourceName, &nul, &oom);
        b.principal = kb_acl_api_cstr(ar, c->Principal, &nul, &oom);
        b.host = kb_acl_api_cstr(ar, c->Host, &nul, &oom);
        if (oom || !b.name || !b.principal || !b.host)
            return KB_API_CLOSE; /* out of memory (the fields are not nullable) */
        if (nul) {
            r->ErrorCode = KP_ERR_INVALID_REQUEST;
            r->ErrorMessage = kb_acl_api_view("ACL strings must not contain NUL characters");
            continue;
        }
        r->ErrorCode = kb_acl_validate(&b, msg, sizeof(msg));
        if (r->ErrorCode != KP_ERR_NONE) {
            r->ErrorMessage = kb_acl_api_dup(ar, msg);
            continue;
        }
        valid[nvalid] = b;
        valid_idx[nvalid++] = i;
    }
    if (nvalid) {
        rc = kb_acl_create(acl, valid, nvalid);
        if (rc != 0) {
            for (size_t k = 0; k < nvalid; k++) {
                kp_CreateAclsResponse_AclCreationResult_t *r = &resp.Results.v[valid_idx[k]];
                r->ErrorCode =
                    rc == KB_E_STATE ? KP_ERR_NOT_CONTROLLER : KP_ERR_UNKNOWN_SERVER_ERROR;
                r->ErrorMessage =
                    kb_acl_api_view(rc == KB_E_STATE ? "this broker is not the controller"
                                    : rc == KB_E_IO  ? "the ACLs could not be stored (" KB_ACL_FILE
                                                      " or the metadata log)"
                                                    : "out of memory while storing the ACLs");
            }
        } else {
            kb_log_info("acl", "%s: created %zu ACL binding(s), %zu in all", ctx->principal, nvalid,
                        kb_acl_count(acl));
        }
    }
    return kb_acl_api_respond(ctx, &kp_CreateAclsResponse_desc, &resp, respp);
}

/* ---- DeleteAcls ------------------------------------------------------------------------------ */

static kb_api_result_t kb_acl_api_delete(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_acl_t *acl = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    kp_DeleteAclsRequest_t rq;
    kp_DeleteAclsResponse_t resp;
    kb_acl_filter_t *fv;
    int32_t *fidx;
    kb_acl_list_t *lists;
    size_t nf = 0, removed = 0;
    int32_t n;
    int rc = 0;
    kb_api_result_t res = KB_API_CLOSE;

    if (kb_acl_api_decode(ctx, &kp_DeleteAclsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_DeleteAclsResponse_init(&resp);
    n = rq.Filters.cnt > 0 ? rq.Filters.cnt : 0;
    resp.FilterResults.v = kp_arena_calloc(ar, (size_t)n + 1, sizeof(*resp.FilterResults.v));
    fv = kp_arena_calloc(ar, (size_t)n + 1, sizeof(*fv));
    fidx = kp_arena_calloc(ar, (size_t)n + 1, sizeof(*fidx));
    lists = kp_arena_calloc(ar, (size_t)n + 1, sizeof(*lists));
    if (!resp.FilterResults.v || !fv || !fidx || !lists)
        return KB_API_CLOSE;
    resp.FilterResults.cnt = n;
    for (int32_t i = 0; i < n; i++) {
        const kp_DeleteAclsRequest_DeleteAclsFilter_t *q = &rq.Filters.v[i];
        kp_DeleteAclsResponse_DeleteAclsFilterResult_t *r = &resp.FilterResults.v[i];
        bool nul = false, oom = false;
        kb_acl_filter_t f;
        const char *what;
        char msg[64];

        kp_DeleteAclsResponse_DeleteAclsFilterResult_init(r);
        r->ErrorMessage = KB_ACL_NULL_STR;
        r->MatchingAcls.cnt = 0;
        if (!kb_acl_enabled(acl)) {
            r->ErrorCode = KP_ERR_SECURITY_DISABLED;
            r->ErrorMessage = kb_acl_api_view(KB_ACL_NO_AUTHORIZER);
            continue;
        }
        f = (kb_acl_filter_t){
            .restype = q->ResourceTypeFilter,
            .pattern = q->PatternTypeFilter,
            .op = q->Operation,
            .perm = q->PermissionType,
            .name = kb_acl_api_cstr(ar, q->ResourceNameFilter, &nul, &oom),
            .principal = kb_acl_api_cstr(ar, q->PrincipalFilter, &nul, &oom),
            .host = kb_acl_api_cstr(ar, q->HostFilter, &nul, &oom),
        };
        f.none = nul;
        if (oom)
            return KB_API_CLOSE;
        if (kb_acl_filter_unknown(&f, &what)) {
            snprintf(msg, sizeof(msg), "Unknown %s.", what);
            r->ErrorCode = KP_ERR_INVALID_REQUEST;
            r->ErrorMessage = kb_acl_api_dup(ar, msg);
            continue;
        }
        fv[nf] = f;
        fidx[nf++] = i;
    }
    if (nf)
        rc = kb_acl_delete(acl, fv, nf, lists);
    for (size_t k = 0; k < nf; k++) {
        kp_DeleteAclsResponse_DeleteAclsFilterResult_t *r = &resp.FilterResults.v[fidx[k]];
        const kb_acl_list_t *l = &lists[k];
        if (rc != 0) {
            r->ErrorCode = rc == KB_E_STATE ? KP_ERR_NOT_CONTROLLER : KP_ERR_UNKNOWN_SERVER_ERROR;
            r->ErrorMessage =
                kb_acl_api_view(rc == KB_E_STATE ? "this broker is not the controller"
                                : rc == KB_E_IO  ? "the ACLs could not be stored (" KB_ACL_FILE
                                                  " or the metadata log)"
                                                : "out of memory while removing the ACLs");
            continue;
        }
        r->MatchingAcls.v = kp_arena_calloc(ar, l->cnt + 1, sizeof(*r->MatchingAcls.v));
        if (!r->MatchingAcls.v)
            goto out;
        for (size_t x = 0; x < l->cnt; x++) {
            kp_DeleteAclsResponse_DeleteAclsMatchingAcl_t *m = &r->MatchingAcls.v[x];
            kp_DeleteAclsResponse_DeleteAclsMatchingAcl_init(m);
            m->ErrorMessage = KB_ACL_NULL_STR;
            m->ResourceType = l->v[x].restype;
            m->ResourceName = kb_acl_api_dup(ar, l->v[x].name);
            m->PatternType = l->v[x].pattern;
            m->Principal = kb_acl_api_dup(ar, l->v[x].principal);
            m->Host = kb_acl_api_dup(ar, l->v[x].host);
            m->Operation = l->v[x].op;
            m->PermissionType = l->v[x].perm;
        }
        r->MatchingAcls.cnt = (int32_t)l->cnt;
        removed += l->cnt;
    }
    if (rc == 0 && removed)
        kb_log_info("acl", "%s: removed ACL bindings (%zu matches), %zu left", ctx->principal,
                    removed, kb_acl_count(acl));
    res = kb_acl_api_respond(ctx, &kp_DeleteAclsResponse_desc, &resp, respp);
out:
    for (size_t k = 0; k < nf; k++)
        kb_acl_list_free(&lists[k]);
    return res;
}

/* ---- registration ---------------------------------------------------------------------------- */

static const struct {
    int16_t key;
    kb_api_handler_fn *fn;
    unsigned flags;
} kb_acl_apis[] = {
    {KP_APIKEY_DescribeAcls, kb_acl_api_describe, KB_API_CONCURRENT},
    {KP_APIKEY_CreateAcls, kb_acl_api_create, 0},
    {KP_APIKEY_DeleteAcls, kb_acl_api_delete, 0},
};

int kb_acl_api_register(kb_acl_t *acl, kb_api_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(kb_acl_apis) / sizeof(kb_acl_apis[0]); i++) {
        const kp_api_info_t *info = kp_api_lookup(kb_acl_apis[i].key);
        int rc = info ? kb_api_register(reg, kb_acl_apis[i].key, info->min_ver, info->max_ver,
                                        kb_acl_apis[i].fn, acl, kb_acl_apis[i].flags)
                      : KB_E_NOT_FOUND;
        if (rc != 0) {
            while (i-- > 0)
                kb_api_unregister(reg, kb_acl_apis[i].key);
            return rc;
        }
    }
    return 0;
}

void kb_acl_api_unregister(kb_api_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(kb_acl_apis) / sizeof(kb_acl_apis[0]); i++)
        kb_api_unregister(reg, kb_acl_apis[i].key);
}
