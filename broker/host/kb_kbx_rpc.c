/*
 * kb_kbx_rpc.c -- kbx RPC handlers on kbroker's handler registry (broker/net kb_api.h) and the
 * deferred-response tokens.
 *
 * rpc_register -> kb_api_register(key, min..max, the wrapper below): the API is then served on
 * every listener and advertised by ApiVersions like any other. The network layer writes the
 * response header from the codec's header version, so the plugin's first_flexible_version must
 * agree with the codec's for every registered version (else KBX_ERR_INVALID).
 *
 * The wrapper defers the request (kb_req_defer with a cancel shim) *before* calling the
 * plugin's handle, passes a token, and returns KB_API_DEFERRED whatever the plugin does:
 * complete_response -> kb_req_complete, a negative result -> kb_req_complete_close.
 *
 * Token state machine (one mutex per token):
 *
 *   HANDLING --complete_response--> COMPLETED          (response sent)
 *   HANDLING --handle returns PENDING--> PENDING
 *   HANDLING --client gone (network thread)--> CANCEL_WAIT   (plugin's cancel runs after handle)
 *   PENDING  --complete_response--> COMPLETED
 *   PENDING / CANCEL_WAIT --client gone, ops.cancel--> CANCELLING --cancel returned--> CANCELLED
 *   PENDING / CANCEL_WAIT --client gone, no cancel op--> ABANDONED --complete_response--> gone
 *
 * complete_response in CANCEL_WAIT, CANCELLING or ABANDONED returns KBX_ERR_CANCELLED and sends
 * nothing (the network layer may already have freed the request). A token reaches a final state
 * and is retired once its handler has returned: its magic becomes KB_TOKEN_DEAD and it is kept
 * in a ring of the last 256 retired tokens, so a plugin touching it afterwards (completing twice,
 * or after its cancel returned) is caught and logged instead of corrupting a reused request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_err.h"
#include "kb_host_int.h"
#include "kb_net.h"
#include "kp_msgs.h"

enum {
    KB_TK_HANDLING = 0,
    KB_TK_PENDING,
    KB_TK_COMPLETED,
    KB_TK_CANCEL_WAIT,
    KB_TK_CANCELLING,
    KB_TK_CANCELLED,
    KB_TK_ABANDONED,
    KB_TK_CLOSED,
};

struct kbx_rpc_reg {
    uint32_t magic;
    kbx_host_t *host;
    kbx_rpc_ops_t ops;
    void *plugin_ctx;
    /* A config resource type of a kbroker API (ops.config_resource_type): the handler it took
     * the key over from (kbroker's, or the controller module's forwarding) and its range. */
    kb_api_handler_fn *prev_fn;
    void *prev_opaque;
    kb_api_range_t prev_range;
};

struct kbx_token {
    uint32_t magic;
    int state;
    bool cancelled_final; /**< retired after a cancellation (for the misuse message) */
    pthread_mutex_t mu;
    kb_req_t *req;
    kbx_host_t *host;
    void (*cancel)(void *plugin_ctx, kbx_token_t *token, void *token_ctx);
    void *plugin_ctx;
    void *token_ctx;
    int16_t api_key;
};

static void kb_kbx_token_free(struct kbx_token *tok)
{
    pthread_mutex_destroy(&tok->mu);
    free(tok);
}

/* The token is in a final state and its handler returned: nobody of ours touches it again. */
static void kb_kbx_token_retire(struct kbx_token *tok, bool cancelled)
{
    kb_host_t *h = tok->host->h;
    void *old;

    tok->cancelled_final = cancelled;
    tok->req = NULL;
    atomic_fetch_sub(&tok->host->n_tokens, 1);
    tok->magic = KB_TOKEN_DEAD;
    pthread_mutex_lock(&h->tok_mu);
    old = h->tok_ring[h->tok_pos];
    h->tok_ring[h->tok_pos] = tok;
    h->tok_pos = (h->tok_pos + 1) % (sizeof(h->tok_ring) / sizeof(h->tok_ring[0]));
    pthread_mutex_unlock(&h->tok_mu);
    if (old)
        kb_kbx_token_free(old);
}

/* Run the plugin's cancel op (token lock not held) and retire the token. */
static void kb_kbx_token_run_cancel(struct kbx_token *tok)
{
    if (!atomic_load(&tok->host->dead))
        tok->cancel(tok->plugin_ctx, tok, tok->token_ctx);
    pthread_mutex_lock(&tok->mu);
    tok->state = KB_TK_CANCELLED;
    pthread_mutex_unlock(&tok->mu);
    kb_kbx_token_retire(tok, true);
}

/* The client went away (network thread). After we return, the request is gone. */
static void kb_kbx_rpc_cancel_shim(void *opaque, kb_req_t *req)
{
    struct kbx_token *tok = opaque;
    (void)req;

    pthread_mutex_lock(&tok->mu);
    switch (tok->state) {
    case KB_TK_HANDLING:
        tok->state = KB_TK_CANCEL_WAIT; /* handle still runs: cancel after it returns */
        break;
    case KB_TK_PENDING:
        if (tok->cancel) {
            tok->state = KB_TK_CANCELLING;
            pthread_mutex_unlock(&tok->mu);
            kb_kbx_token_run_cancel(tok);
            return;
        }
        tok->state = KB_TK_ABANDONED; /* retired by complete_response */
        break;
    default:
        break; /* already answered */
    }
    pthread_mutex_unlock(&tok->mu);
}

static kb_api_result_t kb_kbx_rpc_handler(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    struct kbx_rpc_reg *r = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kbx_rpc_request_t kr;
    struct kbx_token *tok;
    char *client_id = NULL;
    int32_t rc;
    bool retire = false, cancelled = false, run_cancel = false;

    (void)respp;
    tok = calloc(1, sizeof(*tok));
    if (!tok)
        return KB_API_CLOSE;
    tok->magic = KB_TOKEN_MAGIC;
    tok->state = KB_TK_HANDLING;
    pthread_mutex_init(&tok->mu, NULL);
    tok->req = req;
    tok->host = r->host;
    tok->cancel = r->ops.cancel;
    tok->plugin_ctx = r->plugin_ctx;
    tok->api_key = ctx->api_key;
    if (kb_req_defer(req, kb_kbx_rpc_cancel_shim, tok) != 0) {
        /* The client is already gone: the plugin never sees the request. */
        kb_kbx_token_free(tok);
        return KB_API_NO_RESPONSE;
    }
    atomic_fetch_add(&r->host->n_tokens, 1);

    if (ctx->client_id.len >= 0) {
        client_id = kp_arena_alloc(ctx->arena, (size_t)ctx->client_id.len + 1);
        if (client_id) {
            memcpy(client_id, ctx->client_id.ptr, (size_t)ctx->client_id.len);
            client_id[ctx->client_id.len] = '\0';
        }
    }
    memset(&kr, 0, sizeof(kr));
    kr.struct_size = sizeof(kr);
    kr.api_key = ctx->api_key;
    kr.api_version = ctx->api_version;
    kr.correlation_id = ctx->correlation_id;
    kr.client_id = client_id;
    kr.principal = ctx->principal;
    kr.client_host = ctx->peer;
    kr.listener = ctx->listener;
    kr.body = ctx->body.buf + ctx->body.pos;
    kr.body_len = ctx->body.len - ctx->body.pos;

    rc = r->ops.handle(r->plugin_ctx, &kr, tok, &tok->token_ctx);

    pthread_mutex_lock(&tok->mu);
    if (rc == KBX_RPC_PENDING) {
        switch (tok->state) {
        case KB_TK_HANDLING:
            tok->state = KB_TK_PENDING;
            break;
        case KB_TK_CANCEL_WAIT:
            if (tok->cancel) {
                tok->state = KB_TK_CANCELLING;
                run_cancel = true;
            } else {
                tok->state = KB_TK_ABANDONED;
            }
            break;
        default: /* COMPLETED from another thread while handle ran */
            retire = true;
            break;
        }
    } else {
        if (tok->state == KB_TK_HANDLING) {
            if (rc == KBX_RPC_DONE)
                kb_host_misuse(r->host,
                               "handler of API %d returned DONE without complete_response; "
                               "closing the connection",
                               (int)ctx->api_key);
            else
                kb_hlog(KB_HLOG_DEBUG,
                        "plugin %s: handler of API %d failed (%d): closing the "
                        "connection",
                        r->host->name, (int)ctx->api_key, (int)rc);
            kb_req_complete_close(req);
            tok->state = KB_TK_CLOSED;
        }
        cancelled = tok->state == KB_TK_CANCEL_WAIT;
        retire = true;
    }
    pthread_mutex_unlock(&tok->mu);
    if (run_cancel)
        kb_kbx_token_run_cancel(tok);
    else if (retire)
        kb_kbx_token_retire(tok, cancelled);
    return KB_API_DEFERRED;
}

/* ---- config resources (kbx 1.2: ops.config_resource_type) ---------------------------------- */

/* Whether every resource of the DescribeConfigs / IncrementalAlterConfigs request is of @p type
 * (and there is at least one); a request that does not decode is kbroker's to answer. */
static bool kb_kbx_cfg_all_of(kb_reqctx_t *ctx, int32_t type)
{
    kp_reader_t rd;
    int32_t n = 0;
    bool all = true;

    kp_reader_init(&rd, ctx->body.buf + ctx->body.pos, ctx->body.len - ctx->body.pos);
    if (ctx->api_key == KP_APIKEY_DescribeConfigs) {
        kp_DescribeConfigsRequest_t rq;
        kp_DescribeConfigsRequest_init(&rq);
        if (kp_DescribeConfigsRequest_decode(&rd, ctx->arena, &rq, ctx->api_version) != 0)
            return false;
        n = rq.Resources.cnt;
        for (int32_t i = 0; i < n; i++)
            all = all && rq.Resources.v[i].ResourceType == type;
    } else {
        kp_IncrementalAlterConfigsRequest_t rq;
        kp_IncrementalAlterConfigsRequest_init(&rq);
        if (kp_IncrementalAlterConfigsRequest_decode(&rd, ctx->arena, &rq, ctx->api_version) != 0)
            return false;
        n = rq.Resources.cnt;
        for (int32_t i = 0; i < n; i++)
            all = all && rq.Resources.v[i].ResourceType == type;
    }
    return n > 0 && all;
}

static kb_api_result_t kb_kbx_cfg_handler(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    struct kbx_rpc_reg *r = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);

    if (ctx->api_version >= r->ops.min_version && ctx->api_version <= r->ops.max_version &&
        kb_kbx_cfg_all_of(ctx, r->ops.config_resource_type))
        return kb_kbx_rpc_handler(r, req, respp);
    return r->prev_fn(r->prev_opaque, req, respp);
}

/* Take @p key over for one config resource type: the current handler (kbroker's, or the
 * controller module's forwarding, which it installs before the host loads plugins) keeps the
 * rest. At init, like the controller module's own take-over. */
static int32_t kb_kbx_cfg_install(kbx_host_t *host, struct kbx_rpc_reg *r)
{
    kb_api_registry_t *reg = host->h->kb->reg;
    int16_t key = r->ops.api_key;
    kb_api_call_t call;

    if (key != KP_APIKEY_DescribeConfigs && key != KP_APIKEY_IncrementalAlterConfigs) {
        kb_host_misuse(host,
                       "rpc_register: config_resource_type is for DescribeConfigs (32) and "
                       "IncrementalAlterConfigs (44), not API key %d",
                       (int)key);
        return KBX_ERR_INVALID;
    }
    if (kb_api_get(reg, key, &r->prev_range) != 0 || kb_api_call_begin(reg, key, &call) != 0)
        return KBX_ERR_INVALID;
    r->prev_fn = call.fn;
    r->prev_opaque = call.opaque;
    kb_api_call_end(reg, &call);
    if (r->prev_fn == kb_kbx_cfg_handler)
        return KBX_ERR_EXISTS; /* another registration holds the key: one type per API */
    kb_api_unregister(reg, key);
    if (kb_api_register(reg, key, r->prev_range.min_ver, r->prev_range.max_ver, kb_kbx_cfg_handler,
                        r, r->prev_range.flags) != 0) {
        (void)kb_api_register(reg, key, r->prev_range.min_ver, r->prev_range.max_ver, r->prev_fn,
                              r->prev_opaque, r->prev_range.flags);
        return KBX_ERR_NOMEM;
    }
    kb_hlog(KB_HLOG_INFO, "plugin %s serves config resource type %d of %s (key %d) v%d..%d",
            host->name, (int)r->ops.config_resource_type, r->prev_range.name, (int)key,
            (int)r->ops.min_version, (int)r->ops.max_version);
    return KBX_OK;
}

/* Give the key back to the handler it was taken from. */
static void kb_kbx_cfg_uninstall(kbx_host_t *host, struct kbx_rpc_reg *r)
{
    kb_api_registry_t *reg = host->h->kb->reg;
    kb_api_unregister(reg, r->ops.api_key);
    (void)kb_api_register(reg, r->ops.api_key, r->prev_range.min_ver, r->prev_range.max_ver,
                          r->prev_fn, r->prev_opaque, r->prev_range.flags);
}

static int32_t kb_kbx_complete_response(kbx_host_t *host, kbx_token_t *tok, const uint8_t *bytes,
                                        size_t len)
{
    kb_resp_t *resp;
    int32_t rc = KBX_OK;
    bool retire = false, cancelled = false;

    if (!kb_host_from(host, "complete_response") || !tok || (!bytes && len))
        return KBX_ERR_INVALID;
    if (tok->magic == KB_TOKEN_DEAD) {
        kb_host_misuse(host, "complete_response on a token that was %s",
                       tok->cancelled_final ? "cancelled (its cancel callback had returned)"
                                            : "already completed");
        return tok->cancelled_final ? KBX_ERR_CANCELLED : KBX_ERR_INVALID;
    }
    if (!kb_host_check(host, tok, KB_TOKEN_MAGIC, "token"))
        return KBX_ERR_INVALID;
    pthread_mutex_lock(&tok->mu);
    switch (tok->state) {
    case KB_TK_HANDLING:
    case KB_TK_PENDING:
        retire = tok->state == KB_TK_PENDING;
        resp = kb_resp_new();
        if (!resp || (len && kb_resp_append_copy(resp, bytes, len) != 0)) {
            kb_resp_free(resp);
            pthread_mutex_unlock(&tok->mu);
            return KBX_ERR_NOMEM;
        }
        tok->state = KB_TK_COMPLETED;
        if (kb_req_complete(tok->req, resp) != 0)
            rc = KBX_ERR_CANCELLED; /* raced with the disconnect; our cancel shim does nothing */
        break;
    case KB_TK_CANCEL_WAIT:
        tok->state = KB_TK_COMPLETED; /* consumed: no cancel callback will follow */
        rc = KBX_ERR_CANCELLED;
        break;
    case KB_TK_CANCELLING:
        rc = KBX_ERR_CANCELLED; /* the documented race; the token goes when cancel returns */
        break;
    case KB_TK_ABANDONED:
        tok->state = KB_TK_CANCELLED;
        retire = cancelled = true;
        rc = KBX_ERR_CANCELLED;
        break;
    default:
        kb_host_misuse(host, "complete_response twice on one token (API %d)", (int)tok->api_key);
        rc = KBX_ERR_INVALID;
        break;
    }
    pthread_mutex_unlock(&tok->mu);
    if (retire)
        kb_kbx_token_retire(tok, cancelled);
    return rc;
}

static int32_t kb_kbx_rpc_register(kbx_host_t *host, const kbx_rpc_ops_t *ops, void *plugin_ctx,
                                   kbx_rpc_reg_t **out)
{
    const kp_api_info_t *info;
    struct kbx_rpc_reg *r;
    kbx_rpc_ops_t o;
    int rc;

    if (!kb_host_from(host, "rpc_register") || !ops || !out)
        return KBX_ERR_INVALID;
    kbx_ops_copy(&o, sizeof(o), ops);
    if (!o.handle || o.api_key < 0 || o.min_version < 0 || o.max_version < o.min_version)
        return KBX_ERR_INVALID;
    info = kp_api_lookup(o.api_key);
    if (!info) {
        kb_host_misuse(host, "rpc_register: API key %d is unknown to kbroker's protocol codec",
                       (int)o.api_key);
        return KBX_ERR_INVALID;
    }
    for (int v = o.min_version; v <= o.max_version; v++) {
        bool ours = o.first_flexible_version >= 0 && v >= o.first_flexible_version;
        if (v >= info->min_ver && v <= info->max_ver && ours != kp_api_flexible(info, (int16_t)v)) {
            kb_host_misuse(host,
                           "rpc_register: %s v%d is %sflexible for the plugin but %sflexible "
                           "in kbroker's codec",
                           info->name, v, ours ? "" : "not ", ours ? "not " : "");
            return KBX_ERR_INVALID;
        }
    }
    r = calloc(1, sizeof(*r));
    if (!r)
        return KBX_ERR_NOMEM;
    r->magic = KB_RPCREG_MAGIC;
    r->host = host;
    r->ops = o;
    r->plugin_ctx = plugin_ctx;
    if (o.config_resource_type != 0) {
        int32_t xrc = kb_kbx_cfg_install(host, r);
        if (xrc != KBX_OK) {
            free(r);
            return xrc;
        }
        atomic_fetch_add(&host->n_rpcs, 1);
        *out = r;
        return KBX_OK;
    }
    rc = kb_api_register(host->h->kb->reg, o.api_key, o.min_version, o.max_version,
                         kb_kbx_rpc_handler, r, 0);
    if (rc != 0) {
        free(r);
        if (rc == KB_E_EXISTS)
            return KBX_ERR_EXISTS;
        if (rc == KB_E_NOMEM)
            return KBX_ERR_NOMEM;
        kb_host_misuse(host,
                       "rpc_register: %s versions %d..%d are outside what kbroker's codec "
                       "knows (%d..%d)",
                       info->name, (int)o.min_version, (int)o.max_version, (int)info->min_ver,
                       (int)info->max_ver);
        return KBX_ERR_INVALID;
    }
    atomic_fetch_add(&host->n_rpcs, 1);
    kb_hlog(KB_HLOG_INFO, "plugin %s serves %s (key %d) v%d..%d", host->name, info->name,
            (int)o.api_key, (int)o.min_version, (int)o.max_version);
    *out = r;
    return KBX_OK;
}

static void kb_kbx_rpc_unregister(kbx_host_t *host, kbx_rpc_reg_t *r)
{
    if (!kb_host_from(host, "rpc_unregister") || !kb_host_check(host, r, KB_RPCREG_MAGIC, "rpc"))
        return;
    /* Waits until no handler of the key runs; pending tokens keep their own copies. */
    if (r->ops.config_resource_type != 0)
        kb_kbx_cfg_uninstall(host, r);
    else
        kb_api_unregister(host->h->kb->reg, r->ops.api_key);
    r->magic = KB_DEAD_MAGIC;
    atomic_fetch_sub(&host->n_rpcs, 1);
    free(r);
}

void kb_kbx_rpc_fill(kbx_api_t *t)
{
    t->rpc_register = kb_kbx_rpc_register;
    t->rpc_unregister = kb_kbx_rpc_unregister;
    t->complete_response = kb_kbx_complete_response;
}
