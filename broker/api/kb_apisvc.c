/*
 * kb_apisvc.c -- the API service: wiring of metadata, partitions, delayed operations, fetch
 * sessions and handlers; the kbroker module; helpers shared by the handler files.
 */
#include "kb_apisvc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_api_int.h"
#include "kb_apimod.h"
#include "kb_err.h"
#include "kb_fsess.h"
#include "kb_apilog.h"
#include "kp_errcode.h"

/* ---- helpers for the handlers --------------------------------------------------------------- */

int32_t kb_h_topic_ops(void)
{
    return (1 << KB_ACL_READ) | (1 << KB_ACL_WRITE) | (1 << KB_ACL_CREATE) | (1 << KB_ACL_DELETE) |
           (1 << KB_ACL_ALTER) | (1 << KB_ACL_DESCRIBE) | (1 << KB_ACL_DESCRIBE_CONFIGS) |
           (1 << KB_ACL_ALTER_CONFIGS);
}

int32_t kb_h_cluster_ops(void)
{
    return (1 << KB_ACL_CREATE) | (1 << KB_ACL_ALTER) | (1 << KB_ACL_DESCRIBE) |
           (1 << KB_ACL_CLUSTER_ACTION) | (1 << KB_ACL_DESCRIBE_CONFIGS) |
           (1 << KB_ACL_ALTER_CONFIGS) | (1 << KB_ACL_IDEMPOTENT_WRITE) |
           (1 << KB_ACL_CREATE_TOKENS) | (1 << KB_ACL_DESCRIBE_TOKENS);
}

int kb_h_register(kb_apisvc_t *svc, int16_t key, int16_t min, int16_t max, kb_api_handler_fn *fn,
                  unsigned flags)
{
    const kp_api_info_t *info = kp_api_lookup(key);
    int rc;
    if (!info)
        return KB_E_NOT_FOUND;
    if (min < info->min_ver)
        min = info->min_ver;
    if (max > info->max_ver)
        max = info->max_ver;
    rc = kb_api_register(svc->reg, key, min, max, fn, svc, flags);
    if (rc == 0 && svc->registered_cnt < sizeof(svc->registered) / sizeof(svc->registered[0]))
        svc->registered[svc->registered_cnt++] = key;
    return rc;
}

char *kb_h_str(kp_arena_t *ar, kp_str_t s)
{
    char *p;
    if (s.len < 0)
        return NULL;
    p = kp_arena_alloc(ar, (size_t)s.len + 1);
    if (!p)
        return NULL;
    if (s.len)
        memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = '\0';
    return p;
}

kp_str_t kb_h_view(const char *s)
{
    kp_str_t v = {s, s ? (int32_t)strlen(s) : -1};
    return v;
}

kp_str_t kb_h_dup(kp_arena_t *ar, const char *s)
{
    size_t n;
    char *p;
    if (!s)
        return KP_STR_NULL;
    n = strlen(s);
    p = kp_arena_alloc(ar, n + 1);
    if (!p)
        return KP_STR_NULL;
    memcpy(p, s, n + 1);
    return (kp_str_t){p, (int32_t)n};
}

kp_str_t kb_h_fmt(kp_arena_t *ar, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return kb_h_dup(ar, buf);
}

kb_api_result_t kb_h_respond(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, const void *msg,
                             kb_resp_t **respp)
{
    kp_writer_t wr;
    kp_writer_init(&wr);
    if (kp_msg_encode(desc, &wr, msg, ctx->api_version) != 0) {
        kb_log_error("api", "cannot encode %s v%d: %s", desc->name, ctx->api_version,
                     kp_err_str(wr.err));
        kp_writer_free(&wr);
        return KB_API_CLOSE;
    }
    *respp = kb_resp_from_writer(&wr);
    kp_writer_free(&wr);
    return *respp ? KB_API_RESPOND : KB_API_CLOSE;
}

kb_api_result_t kb_h_big_response(void *opaque, kb_reqctx_t *ctx, const void *rq, kb_resp_t **respp,
                                  kb_h_build_fn *fn)
{
    kp_arena_t big, *req_ar = ctx->arena;
    kb_api_result_t res;
    kp_arena_init(&big, 0);
    ctx->arena = &big;
    res = fn(opaque, ctx, rq, respp);
    ctx->arena = req_ar;
    kp_arena_free(&big); /* the response was encoded into its own buffer */
    return res;
}

int kb_h_decode(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, void *msg)
{
    kp_msg_init(desc, msg);
    if (kp_msg_decode(desc, &ctx->body, ctx->arena, msg, ctx->api_version) != 0) {
        kb_log_debug("api", "%s: malformed %s v%d: %s", ctx->peer, desc->name, ctx->api_version,
                     ctx->body.errstr ? ctx->body.errstr : "?");
        return -1;
    }
    return 0;
}

typedef struct kb_h_key_s {
    kp_str_t name;
    int32_t num;
    size_t idx;
} kb_h_key_t;

static int kb_h_key_cmp(const void *a, const void *b)
{
    const kb_h_key_t *x = a, *y = b;
    int32_t n = x->name.len < y->name.len ? x->name.len : y->name.len;
    int c = n > 0 ? memcmp(x->name.ptr, y->name.ptr, (size_t)n) : 0;
    if (c)
        return c;
    if (x->name.len != y->name.len)
        return x->name.len < y->name.len ? -1 : 1;
    return x->num < y->num ? -1 : x->num > y->num;
}

static bool *kb_h_dups_impl(kp_arena_t *ar, const kp_str_t *names, const int32_t *nums, size_t n,
                            bool later)
{
    bool *dup = kp_arena_calloc(ar, n + 1, sizeof(*dup));
    kb_h_key_t *k = kp_arena_calloc(ar, n + 1, sizeof(*k));
    if (!dup || !k)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        k[i].name = names[i];
        k[i].num = nums ? nums[i] : 0;
        k[i].idx = i;
    }
    qsort(k, n, sizeof(*k), kb_h_key_cmp);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1, first = k[i].idx;
        while (j < n && !kb_h_key_cmp(&k[i], &k[j])) {
            if (k[j].idx < first)
                first = k[j].idx;
            j++;
        }
        for (size_t m = i; j - i > 1 && m < j; m++)
            dup[k[m].idx] = !later || k[m].idx != first;
        i = j;
    }
    return dup;
}

bool *kb_h_dups(kp_arena_t *ar, const kp_str_t *names, const int32_t *nums, size_t n)
{
    return kb_h_dups_impl(ar, names, nums, n, false);
}

bool *kb_h_dups_later(kp_arena_t *ar, const kp_str_t *names, const int32_t *nums, size_t n)
{
    return kb_h_dups_impl(ar, names, nums, n, true);
}

int16_t kb_h_sto_err(int sto_err)
{
    switch (sto_err) {
    case KB_STO_OK:
        return KP_ERR_NONE;
    case KB_STO_OFFSET_OUT_OF_RANGE:
        return KP_ERR_OFFSET_OUT_OF_RANGE;
    case KB_STO_CORRUPT_MESSAGE:
        return KP_ERR_CORRUPT_MESSAGE;
    case KB_STO_UNSUPPORTED_FORMAT:
        return KP_ERR_INVALID_RECORD; /* Produce v3+ requires magic 2 (Kafka: InvalidRecord) */
    case KB_STO_RECORD_TOO_LARGE:
        return KP_ERR_MESSAGE_TOO_LARGE;
    case KB_STO_INVALID_RECORD:
        return KP_ERR_INVALID_RECORD;
    case KB_STO_INVALID_TIMESTAMP:
        return KP_ERR_INVALID_TIMESTAMP;
    case KB_STO_DUPLICATE_SEQUENCE:
        return KP_ERR_DUPLICATE_SEQUENCE_NUMBER;
    case KB_STO_OUT_OF_ORDER_SEQUENCE:
        return KP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER;
    case KB_STO_INVALID_PRODUCER_EPOCH:
        return KP_ERR_INVALID_PRODUCER_EPOCH;
    case KB_STO_COORDINATOR_FENCED:
        return KP_ERR_TRANSACTION_COORDINATOR_FENCED;
    case KB_STO_CLOSED:
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    case KB_STO_IO:
    case KB_STO_CORRUPT_LOG:
        return KP_ERR_KAFKA_STORAGE_ERROR;
    default:
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
}

int16_t kb_h_lookup_err(int rc, bool by_id)
{
    switch (rc) {
    case KB_META_OK:
        return KP_ERR_NONE;
    case KB_META_UNKNOWN_TOPIC:
        return by_id ? KP_ERR_UNKNOWN_TOPIC_ID : KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    case KB_META_UNKNOWN_PARTITION:
        return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    case KB_META_NOT_REPLICA:
    case KB_META_NOT_READY: /* Kafka: in the metadata, not (yet) hosted by this broker */
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    default:
        return KP_ERR_KAFKA_STORAGE_ERROR;
    }
}

int16_t kb_h_epoch_check(int32_t current_leader_epoch, int32_t ours)
{
    if (current_leader_epoch < 0 || current_leader_epoch == ours)
        return KP_ERR_NONE;
    return current_leader_epoch < ours ? KP_ERR_FENCED_LEADER_EPOCH : KP_ERR_UNKNOWN_LEADER_EPOCH;
}

void kb_h_endpoint(kb_apisvc_t *svc, const char *listener, const char **host, int32_t *port)
{
    const kb_config_t *cfg = svc->cfg;
    const kb_config_listener_t *a = NULL;
    for (size_t i = 0; i < cfg->adv_cnt; i++) {
        if (listener && !strcasecmp(cfg->adv[i].name, listener)) {
            a = &cfg->adv[i];
            break;
        }
    }
    if (!a && cfg->adv_cnt)
        a = &cfg->adv[0];
    if (!a) {
        *host = "localhost";
        *port = 9092;
        return;
    }
    *host = a->host[0] ? a->host : "localhost";
    *port = a->port;
    if (*port == 0 && svc->srv) {
        int p = kb_server_listener_port(svc->srv, a->name);
        if (p < 0 && listener)
            p = kb_server_listener_port(svc->srv, listener);
        *port = p;
    }
}

/* ---- the service ---------------------------------------------------------------------------- */

bool kb_apisvc_privileged(const kb_reqctx_t *ctx)
{
    return ctx->principal && !strcmp(ctx->principal, KB_PRINCIPAL_INTERNAL);
}

void kb_apisvc_set_txn_verify(kb_apisvc_t *svc, kb_txn_verify_fn *fn, void *opaque)
{
    pthread_rwlock_wrlock(&svc->hook_rw);
    svc->txn_verify = fn;
    svc->txn_verify_opaque = opaque;
    pthread_rwlock_unlock(&svc->hook_rw);
}

void kb_apisvc_set_cluster(kb_apisvc_t *svc, kb_cluster_fn *fn, void *opaque)
{
    pthread_rwlock_wrlock(&svc->hook_rw);
    svc->cluster = fn;
    svc->cluster_opaque = opaque;
    pthread_rwlock_unlock(&svc->hook_rw);
}

void kb_apisvc_set_meta_fetch(kb_apisvc_t *svc, kb_meta_fetch_fn *fn, void *opaque)
{
    pthread_rwlock_wrlock(&svc->hook_rw);
    svc->meta_fetch = fn;
    svc->meta_fetch_opaque = opaque;
    pthread_rwlock_unlock(&svc->hook_rw);
}

void kb_apisvc_set_ctrl_send(kb_apisvc_t *svc, kb_ctrl_send_fn *fn, void *opaque)
{
    pthread_rwlock_wrlock(&svc->hook_rw);
    svc->ctrl_send = fn;
    svc->ctrl_send_opaque = opaque;
    pthread_rwlock_unlock(&svc->hook_rw);
}

int kb_apisvc_ctrl_send(kb_apisvc_t *svc, int16_t api_key, int16_t ver, const uint8_t *body,
                        size_t len, int32_t timeout_ms, kb_ctrl_resp_fn *cb, void *arg)
{
    int rc = KB_E_UNSUPPORTED;
    pthread_rwlock_rdlock(&svc->hook_rw);
    if (svc->ctrl_send)
        rc = svc->ctrl_send(svc->ctrl_send_opaque, api_key, ver, body, len, timeout_ms, cb, arg);
    pthread_rwlock_unlock(&svc->hook_rw);
    return rc;
}

int kb_apisvc_cluster(kb_apisvc_t *svc, const char *listener, bool include_fenced,
                      kb_cluster_node_t **out, size_t *cnt, int32_t *controller_id)
{
    const char *host;
    int rc = -1;

    pthread_rwlock_rdlock(&svc->hook_rw);
    if (svc->cluster)
        rc = svc->cluster(svc->cluster_opaque, listener, include_fenced, out, cnt, controller_id);
    pthread_rwlock_unlock(&svc->hook_rw);
    if (rc == 0)
        return 0;
    *out = calloc(1, sizeof(**out));
    if (!*out)
        return -1;
    kb_h_endpoint(svc, listener, &host, &(*out)->port);
    snprintf((*out)->host, sizeof((*out)->host), "%s", host);
    (*out)->id = kb_meta_node_id(svc->meta);
    *cnt = 1;
    *controller_id = (*out)->id;
    return 0;
}

/* At every scrape (registry mutex held): the fetch session cache's size. */
static void kb_apisvc_collect(void *opaque, kb_metrics_emit_t *em)
{
    kb_apisvc_t *svc = opaque;
    size_t sessions, parts;
    kb_fsess_stats(svc->fsess, &sessions, &parts);
    kb_metrics_emit(em, "kbroker_fetch_sessions", "Incremental fetch sessions in the cache.",
                    KB_METRIC_GAUGE, NULL, (double)sessions);
    kb_metrics_emit(em, "kbroker_fetch_session_partitions",
                    "Partitions held by the cached fetch sessions, summed.", KB_METRIC_GAUGE, NULL,
                    (double)parts);
}

static void kb_apisvc_metrics_init(kb_apisvc_t *svc)
{
    kb_metrics_t *m = svc->kb ? svc->kb->metrics : NULL;
    static const char *const l_full[] = {"kind", "full", NULL};
    static const char *const l_incr[] = {"kind", "incremental", NULL};
    static const char *const l_none[] = {"kind", "sessionless", NULL};
    static const char *const l_err[] = {"kind", "session_error", NULL};
    const char *help = "Fetch requests by session handling: full (a new session), incremental "
                       "(accepted with the session's next epoch), sessionless, session_error "
                       "(refused: unknown session or wrong epoch).";
    if (!m)
        return;
    svc->m_fetch_full = kb_metrics_counter(m, "kbroker_fetch_requests_total", help, l_full);
    svc->m_fetch_incr = kb_metrics_counter(m, "kbroker_fetch_requests_total", help, l_incr);
    svc->m_fetch_nosess = kb_metrics_counter(m, "kbroker_fetch_requests_total", help, l_none);
    svc->m_fetch_sesserr = kb_metrics_counter(m, "kbroker_fetch_requests_total", help, l_err);
    help = "Bytes of the Fetch requests counted in kbroker_fetch_requests_total (header and "
           "body), by session handling.";
    svc->m_fbytes_full = kb_metrics_counter(m, "kbroker_fetch_request_bytes_total", help, l_full);
    svc->m_fbytes_incr = kb_metrics_counter(m, "kbroker_fetch_request_bytes_total", help, l_incr);
    svc->m_fbytes_nosess = kb_metrics_counter(m, "kbroker_fetch_request_bytes_total", help, l_none);
    svc->m_collector = kb_metrics_collector_add(m, kb_apisvc_collect, svc);
}

kb_apisvc_t *kb_apisvc_new(const kb_apisvc_opts_t *o, char *errstr, size_t errstr_size)
{
    kb_apisvc_t *svc = calloc(1, sizeof(*svc));
    kb_partmgr_opts_t po;
    int (*regs[])(kb_apisvc_t *) = {kb_h_metadata_register, kb_h_produce_register,
                                    kb_h_fetch_register,    kb_h_offsets_register,
                                    kb_h_topics_register,   kb_h_configs_register};

    if (!svc) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    svc->cfg = o->cfg;
    svc->kb = o->kb;
    svc->reg = o->reg;
    pthread_rwlock_init(&svc->hook_rw, NULL);
    svc->meta = kb_meta_open(o->cfg, errstr, errstr_size);
    if (!svc->meta)
        goto fail;
    svc->dq = kb_dq_new();
    svc->fsess = kb_fsess_cache_new(KB_FSESS_MAX_SESSIONS);
    if (!svc->dq || !svc->fsess) {
        snprintf(errstr, errstr_size, "out of memory");
        goto fail;
    }
    memset(&po, 0, sizeof(po));
    po.cfg = o->cfg;
    po.dq = svc->dq;
    po.config_for = kb_meta_log_config_for;
    po.config_opaque = svc->meta;
    po.clock = o->clock;
    po.clock_opaque = o->clock_opaque;
    po.no_threads = o->no_threads;
    svc->pm = kb_partmgr_open(&po, errstr, errstr_size);
    if (!svc->pm)
        goto fail;
    if (kb_meta_attach(svc->meta, svc->pm, errstr, errstr_size) != 0)
        goto fail;
    for (size_t i = 0; i < sizeof(regs) / sizeof(regs[0]); i++) {
        int rc = regs[i](svc);
        if (rc != 0) {
            snprintf(errstr, errstr_size, "cannot register the API handlers: %s", kb_err_str(rc));
            goto fail;
        }
    }
    kb_apisvc_metrics_init(svc);
    kb_log_info("api", "cluster %s, node %d: metadata and logs loaded",
                kb_meta_cluster_id(svc->meta), kb_meta_node_id(svc->meta));
    return svc;
fail:
    kb_apisvc_free(svc);
    return NULL;
}

int kb_apisvc_start(kb_apisvc_t *svc, kb_server_t *srv)
{
    kb_api_range_t r;
    svc->srv = srv;
    if (kb_partmgr_start(svc->pm) != 0)
        return KB_E_NOMEM;
    /* InitProducerId belongs to the transaction coordinator; until one registers it, idempotent
     * producers get their ids here. */
    if (kb_api_get(svc->reg, KP_APIKEY_InitProducerId, &r) == KB_E_NOT_FOUND &&
        kb_h_initpid_register(svc) == 0)
        svc->initpid_registered = true;
    return 0;
}

void kb_apisvc_free(kb_apisvc_t *svc)
{
    if (!svc)
        return;
    for (size_t i = 0; i < svc->registered_cnt; i++)
        kb_api_unregister(svc->reg, svc->registered[i]);
    svc->registered_cnt = 0;
    if (svc->m_collector)
        kb_metrics_collector_remove(svc->kb->metrics, svc->m_collector);
    svc->m_collector = NULL;
    /* Partitions first: closing one closes its watch list in the dq. */
    kb_meta_close(svc->meta);
    kb_dq_free(svc->dq);
    svc->dq = NULL;
    kb_fsess_cache_free(svc->fsess);
    kb_partmgr_close(svc->pm);
    pthread_rwlock_destroy(&svc->hook_rw);
    free(svc);
}

/* ---- the kbroker module --------------------------------------------------------------------- */

static pthread_mutex_t kb_apisvc_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const kb_broker_t *kb;
    kb_apisvc_t *svc;
} kb_apisvc_reg[16];

kb_apisvc_t *kb_apisvc_of(const kb_broker_t *kb)
{
    kb_apisvc_t *svc = NULL;
    pthread_mutex_lock(&kb_apisvc_reg_mu);
    for (size_t i = 0; i < sizeof(kb_apisvc_reg) / sizeof(kb_apisvc_reg[0]); i++)
        if (kb_apisvc_reg[i].kb == kb)
            svc = kb_apisvc_reg[i].svc;
    pthread_mutex_unlock(&kb_apisvc_reg_mu);
    return svc;
}

static void kb_apisvc_reg_set(const kb_broker_t *kb, kb_apisvc_t *svc)
{
    pthread_mutex_lock(&kb_apisvc_reg_mu);
    for (size_t i = 0; i < sizeof(kb_apisvc_reg) / sizeof(kb_apisvc_reg[0]); i++) {
        if (svc ? kb_apisvc_reg[i].kb == NULL : kb_apisvc_reg[i].kb == kb) {
            kb_apisvc_reg[i].kb = svc ? kb : NULL;
            kb_apisvc_reg[i].svc = svc;
            break;
        }
    }
    pthread_mutex_unlock(&kb_apisvc_reg_mu);
}

static int kb_module_api_init(kb_broker_t *kb, void **statep, char *errstr, size_t errstr_size)
{
    kb_apisvc_opts_t o = {.cfg = kb->cfg, .reg = kb->reg, .kb = kb};
    kb_apisvc_t *svc = kb_apisvc_new(&o, errstr, errstr_size);
    if (!svc)
        return -1;
    kb_apisvc_reg_set(kb, svc);
    *statep = svc;
    return 0;
}

static int kb_module_api_start(kb_broker_t *kb, void *state)
{
    return kb_apisvc_start(state, kb->srv);
}

static void kb_module_api_fini(kb_broker_t *kb, void *state)
{
    kb_apisvc_reg_set(kb, NULL);
    kb_apisvc_free(state);
}

const kb_module_t kb_module_api = {
    .name = "api",
    .init = kb_module_api_init,
    .start = kb_module_api_start,
    .fini = kb_module_api_fini,
};
