#define KM_LOG_COMPONENT "kmirror.srcadm"
#include "rpc/km_srcadm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/km_coord.h"
#include "core/km_plugin_types.h"
#include "kc_client.h"
#include "kp_msgs.h"
#include "util/km_log.h"
#include "util/km_mem.h"

#define KM_SRCADM_MAGIC   0x4b4d5341u /* "KMSA" */
#define KM_SRCADM_Q_MAGIC 0x4b4d5351u /* "KMSQ" */
/** kc_ node ids of the queries: far above any real broker id, one per attempt. */
#define KM_SRCADM_NODE_BASE (1 << 24)
/** Longest Metadata answer decoded (arena limit). */
#define KM_SRCADM_ARENA_LIMIT (64u << 20)

struct km_srcadm {
    uint32_t magic;
    km_plugin_t *cm;
    kc_client_t *kc;
    kbx_thread_t *thread;
    kbx_latch_t *latch;
    atomic_int stop;
    atomic_int active; /* queries in progress */
    atomic_int next_node;
    pthread_mutex_t lock; /* submission vs stop: kc is destroyed under it */
    bool stopped;         /* under lock */
};

typedef struct km_srcadm_query {
    uint32_t magic;
    km_srcadm_t *sa;
    size_t naddr, next;
    char **hosts;
    int *ports;
    int32_t node;
    int64_t deadline_ns;
    bool with_topics;
    kp_MetadataRequest_t rq;
    km_srcadm_cb cb;
    void *arg;
    km_srcadm_result_t res;
    /* km_srcadm_request: the message to send instead of Metadata, and the raw answer. */
    const kp_msg_desc_t *desc;
    int16_t max_ver;
    const void *msg;
    km_srcadm_raw_cb raw_cb;
    uint8_t *raw;
    size_t raw_len;
} km_srcadm_query_t;

static void km_srcadm_kc_log(void *opaque, int level, const char *msg)
{
    km_srcadm_t *sa = opaque;
    int32_t lvl = level <= KC_LOG_ERROR  ? KBX_LOG_WARN
                  : level <= KC_LOG_WARN ? KBX_LOG_INFO
                                         : KBX_LOG_DEBUG;

    km_log(sa->cm, lvl, "source client: %s", msg);
}

static int32_t km_srcadm_loop(void *arg)
{
    km_srcadm_t *sa = arg;
    km_plugin_t *cm = sa->cm;

    if (atomic_load(&sa->stop))
        return KBX_THREAD_EXIT;
    if (atomic_load(&sa->active) == 0) {
        /* Nothing to drive: park until a query arrives (the latch) or the stop flag. */
        cm->ref.api->latch_wait(cm->ref.host, sa->latch, 1000);
        return KBX_THREAD_CONTINUE;
    }
    kc_client_poll(sa->kc, 100);
    return KBX_THREAD_CONTINUE;
}

km_err_t km_srcadm_start(km_plugin_t *cm, km_srcadm_t **out, char *errstr, size_t errstr_size)
{
    const kbx_api_t *api = cm->ref.api;
    km_srcadm_t *sa;
    kc_opts_t o;
    char id[64];

    *out = NULL;
    sa = km_calloc(cm, 1, sizeof(*sa));
    if (sa == NULL) {
        snprintf(errstr, errstr_size, "out of memory");
        return KM_ERR_NOMEM;
    }
    sa->magic = KM_SRCADM_MAGIC;
    sa->cm = cm;
    atomic_init(&sa->stop, 0);
    atomic_init(&sa->active, 0);
    atomic_init(&sa->next_node, KM_SRCADM_NODE_BASE);
    if (pthread_mutex_init(&sa->lock, NULL) != 0) {
        km_free(cm, sa);
        snprintf(errstr, errstr_size, "cannot create the source admin client's lock");
        return KM_ERR_HOST;
    }
    snprintf(id, sizeof(id), "kmirror-admin-%d", (int)cm->broker_id);
    kc_opts_init(&o);
    o.client_id = id;
    o.software_name = "kmirror";
    o.log_cb = km_srcadm_kc_log;
    o.log_opaque = sa;
    o.reconnect_backoff_max_ms = 1000;
    sa->kc = kc_client_new(&o, errstr, errstr_size);
    if (sa->kc == NULL)
        goto fail;
    if (api->latch_create(cm->ref.host, &sa->latch) != KBX_OK) {
        snprintf(errstr, errstr_size, "cannot create the source admin client's latch");
        goto fail;
    }
    if (api->thread_start(cm->ref.host, "kmirror-srcadm", km_srcadm_loop, sa, &sa->thread) !=
        KBX_OK) {
        snprintf(errstr, errstr_size, "cannot start the source admin client's thread");
        goto fail;
    }
    *out = sa;
    return KM_OK;

fail:
    if (sa->latch != NULL)
        api->latch_destroy(cm->ref.host, sa->latch);
    if (sa->kc != NULL)
        kc_client_destroy(sa->kc);
    pthread_mutex_destroy(&sa->lock);
    sa->magic = 0;
    km_free(cm, sa);
    return KM_ERR_HOST;
}

void km_srcadm_stop(km_srcadm_t *sa)
{
    km_plugin_t *cm;

    if (sa == NULL || sa->thread == NULL)
        return;
    cm = sa->cm;
    atomic_store(&sa->stop, 1);
    cm->ref.api->latch_set(cm->ref.host, sa->latch);
    kc_client_wakeup(sa->kc);
    cm->ref.api->thread_join(cm->ref.host, sa->thread);
    sa->thread = NULL;
    /* This thread drives the client now: pending queries fail with KC_E_DESTROYED here and
     * post their (failed) results to the loop. Under the lock, so that the loop never submits
     * to a client being destroyed. */
    pthread_mutex_lock(&sa->lock);
    sa->stopped = true;
    kc_client_destroy(sa->kc);
    sa->kc = NULL;
    pthread_mutex_unlock(&sa->lock);
}

void km_srcadm_destroy(km_srcadm_t *sa)
{
    km_plugin_t *cm;

    if (sa == NULL)
        return;
    cm = sa->cm;
    km_srcadm_stop(sa);
    cm->ref.api->latch_destroy(cm->ref.host, sa->latch);
    pthread_mutex_destroy(&sa->lock);
    sa->magic = 0;
    km_free(cm, sa);
}

static void km_srcadm_query_free(km_plugin_t *cm, km_srcadm_query_t *q)
{
    for (size_t i = 0; i < q->naddr; i++)
        km_free(cm, q->hosts[i]);
    km_free(cm, q->hosts);
    km_free(cm, q->ports);
    for (size_t i = 0; i < q->res.ntopics; i++)
        km_free(cm, q->res.topics[i].name);
    km_free(cm, q->res.topics);
    km_free(cm, q->raw);
    q->magic = 0;
    km_free(cm, q);
}

static void km_srcadm_deliver_run(km_plugin_t *cm, void *arg)
{
    km_srcadm_query_t *q = arg;

    if (q->raw_cb != NULL)
        q->raw_cb(cm, q->arg, &q->res, q->raw, q->raw_len);
    else
        q->cb(cm, q->arg, &q->res);
    km_srcadm_query_free(cm, q);
}

static void km_srcadm_deliver_drop(km_plugin_t *cm, void *arg)
{
    km_srcadm_query_t *q = arg;

    q->res.err = KM_ERR_SHUTDOWN;
    snprintf(q->res.errmsg, sizeof(q->res.errmsg), "the broker is shutting down");
    if (q->raw_cb != NULL)
        q->raw_cb(cm, q->arg, &q->res, NULL, 0);
    else
        q->cb(cm, q->arg, &q->res);
    km_srcadm_query_free(cm, q);
}

/* Hand the finished query to the loop. @thread the client's driving thread */
static void km_srcadm_finish(km_srcadm_query_t *q)
{
    km_srcadm_t *sa = q->sa;
    km_plugin_t *cm = sa->cm;
    km_err_t err;

    atomic_fetch_sub(&sa->active, 1);
    err = km_coord_post(&cm->coord, km_srcadm_deliver_run, km_srcadm_deliver_drop, q);
    if (err == KM_ERR_NOMEM) {
        km_log_error(cm, "out of memory delivering a source query's result");
        km_srcadm_deliver_drop(cm, q);
    }
}

static int km_srcadm_submit(km_srcadm_query_t *q);

static void km_srcadm_copy(km_srcadm_query_t *q, const kp_MetadataResponse_t *resp)
{
    km_plugin_t *cm = q->sa->cm;
    int32_t n = resp->Topics.cnt > 0 ? resp->Topics.cnt : 0;

    if (resp->ClusterId.len > 0)
        snprintf(q->res.cluster_id, sizeof(q->res.cluster_id), "%.*s", (int)resp->ClusterId.len,
                 resp->ClusterId.ptr);
    if (!q->with_topics || n == 0)
        return;
    q->res.topics = km_calloc(cm, (size_t)n, sizeof(*q->res.topics));
    if (q->res.topics == NULL) {
        q->res.err = KM_ERR_NOMEM;
        snprintf(q->res.errmsg, sizeof(q->res.errmsg), "out of memory");
        return;
    }
    for (int32_t i = 0; i < n; i++) {
        const kp_MetadataResponse_MetadataResponseTopic_t *t = &resp->Topics.v[i];
        km_srcadm_topic_t *o = &q->res.topics[q->res.ntopics];
        if (t->Name.len <= 0 || memchr(t->Name.ptr, '\0', (size_t)t->Name.len) != NULL)
            continue;
        o->name = km_strndup(cm, t->Name.ptr, (size_t)t->Name.len);
        if (o->name == NULL) {
            q->res.err = KM_ERR_NOMEM;
            snprintf(q->res.errmsg, sizeof(q->res.errmsg), "out of memory");
            return;
        }
        memcpy(o->id.bytes, t->TopicId.b, 16);
        o->partitions = t->Partitions.cnt > 0 ? t->Partitions.cnt : 0;
        o->error_code = t->ErrorCode;
        o->internal = t->IsInternal;
        q->res.ntopics++;
    }
}

static void km_srcadm_on_metadata(kc_client_t *kc, int err, int16_t ver, const uint8_t *body,
                                  size_t len, void *opaque)
{
    km_srcadm_query_t *q = opaque;
    km_srcadm_t *sa = q->sa;
    kp_MetadataResponse_t resp;
    kp_reader_t rd;
    kp_arena_t ar;

    if (err == KC_E_NO_VERSION) {
        /* Name the API and both version ranges (design M93): a source too old (or too new)
         * for a request kmirror sends. */
        const kp_msg_desc_t *d = q->desc != NULL ? q->desc : &kp_MetadataRequest_desc;
        int16_t cap = q->desc != NULL ? q->max_ver : 12, lo = -1, hi = -1;
        char served[48];
        if (cap < 0 || cap > d->max_ver)
            cap = d->max_ver;
        if (kc_client_api_range(kc, q->node, d->api_key, &lo, &hi) == KC_E_OK)
            snprintf(served, sizeof(served), "serves API %d v%d..%d", (int)d->api_key, (int)lo,
                     (int)hi);
        else
            snprintf(served, sizeof(served), "does not serve API %d", (int)d->api_key);
        kc_client_node_remove(kc, q->node);
        snprintf(q->res.errmsg, sizeof(q->res.errmsg),
                 "%s:%d: the source broker %s (%s); kmirror sends v%d..%d: no version in common",
                 q->hosts[q->next - 1], q->ports[q->next - 1], served, d->name, (int)d->min_ver,
                 (int)cap);
        q->res.err = KM_ERR_HOST;
        km_log_warn(sa->cm, "%s", q->res.errmsg);
        km_srcadm_finish(q);
        return;
    }
    kc_client_node_remove(kc, q->node);
    if (err != KC_E_OK) {
        snprintf(q->res.errmsg, sizeof(q->res.errmsg), "%s:%d: %s", q->hosts[q->next - 1],
                 q->ports[q->next - 1], kc_err_str(err));
        /* Try the next bootstrap address while time is left. */
        if (err != KC_E_DESTROYED && !atomic_load(&sa->stop) && q->next < q->naddr &&
            km_srcadm_submit(q) == 0)
            return;
        q->res.err = err == KC_E_DESTROYED ? KM_ERR_SHUTDOWN : KM_ERR_HOST;
        km_srcadm_finish(q);
        return;
    }
    if (q->raw_cb != NULL) {
        /* km_srcadm_request: the caller decodes; keep a copy for the loop. */
        q->res.version = ver;
        q->raw = len > 0 ? km_malloc(sa->cm, len) : NULL;
        if (len > 0 && q->raw == NULL) {
            q->res.err = KM_ERR_NOMEM;
            snprintf(q->res.errmsg, sizeof(q->res.errmsg), "out of memory");
        } else if (len > 0) {
            memcpy(q->raw, body, len);
            q->raw_len = len;
        }
        km_srcadm_finish(q);
        return;
    }
    kp_arena_init(&ar, KM_SRCADM_ARENA_LIMIT);
    kp_reader_init(&rd, body, len);
    kp_MetadataResponse_init(&resp);
    if (kp_MetadataResponse_decode(&rd, &ar, &resp, ver) != 0) {
        q->res.err = KM_ERR_HOST;
        snprintf(q->res.errmsg, sizeof(q->res.errmsg),
                 "%s:%d: undecodable Metadata v%d answer (%s)", q->hosts[q->next - 1],
                 q->ports[q->next - 1], (int)ver, rd.errstr != NULL ? rd.errstr : "bad bytes");
    } else {
        q->res.version = ver;
        km_srcadm_copy(q, &resp);
    }
    kp_arena_free(&ar);
    km_srcadm_finish(q);
}

/* Send the Metadata request to the next address. 0 or -1 (nothing left / submit failed). */
static int km_srcadm_submit(km_srcadm_query_t *q)
{
    km_srcadm_t *sa = q->sa;
    km_plugin_t *cm = sa->cm;
    int64_t now = cm->ref.api->clock_monotonic_ns(cm->ref.host);
    int64_t left_ms = (q->deadline_ns - now) / 1000000;
    int64_t per;

    while (q->next < q->naddr) {
        size_t i = q->next++;
        int64_t id;
        if (left_ms <= 0)
            return -1;
        /* Share what is left between the addresses not tried yet, at least 1 s each. */
        per = left_ms / (int64_t)(q->naddr - i);
        if (per < 1000)
            per = left_ms;
        q->node = atomic_fetch_add(&sa->next_node, 1);
        if (kc_client_node_set(sa->kc, q->node, q->hosts[i], q->ports[i]) != 0)
            continue;
        if (q->desc != NULL)
            id = kc_request_msg(sa->kc, q->node, q->desc, q->max_ver, q->msg, (int32_t)per, 0,
                                km_srcadm_on_metadata, q);
        else
            id = kc_request_msg(sa->kc, q->node, &kp_MetadataRequest_desc, 12, &q->rq, (int32_t)per,
                                0, km_srcadm_on_metadata, q);
        if (id > 0)
            return 0;
        kc_client_node_remove(sa->kc, q->node);
    }
    return -1;
}

/* "host:port" or "[v6]:port" into a copied host and a port. */
static bool km_srcadm_parse_addr(km_plugin_t *cm, const char *e, char **host, int *port)
{
    const char *colon, *h = e;
    size_t hl;
    char *end;
    long p;

    if (e[0] == '[') {
        const char *rb = strchr(e, ']');
        if (rb == NULL || rb[1] != ':')
            return false;
        h = e + 1;
        hl = (size_t)(rb - h);
        colon = rb + 1;
    } else {
        colon = strrchr(e, ':');
        if (colon == NULL)
            return false;
        hl = (size_t)(colon - e);
    }
    p = strtol(colon + 1, &end, 10);
    if (hl == 0 || *end != '\0' || p <= 0 || p > 65535)
        return false;
    *host = km_strndup(cm, h, hl);
    *port = (int)p;
    return *host != NULL;
}

static km_err_t km_srcadm_start_query(km_srcadm_t *sa, km_srcadm_query_t *q,
                                      const km_strlist_t *bootstrap, int32_t timeout_ms);

km_err_t km_srcadm_metadata(km_srcadm_t *sa, const km_strlist_t *bootstrap, bool with_topics,
                            int32_t timeout_ms, km_srcadm_cb cb, void *arg)
{
    km_srcadm_query_t *q;

    if (bootstrap == NULL || bootstrap->n == 0)
        return KM_ERR_INVALID;
    if (atomic_load(&sa->stop))
        return KM_ERR_SHUTDOWN;
    q = km_calloc(sa->cm, 1, sizeof(*q));
    if (q == NULL)
        return KM_ERR_NOMEM;
    q->magic = KM_SRCADM_Q_MAGIC;
    q->sa = sa;
    q->cb = cb;
    q->arg = arg;
    q->with_topics = with_topics;
    kp_MetadataRequest_init(&q->rq);
    /* Null topics: every topic (v1+); an empty array: none, brokers and cluster id only. */
    q->rq.Topics.cnt = with_topics ? -1 : 0;
    q->rq.AllowAutoTopicCreation = false;
    return km_srcadm_start_query(sa, q, bootstrap, timeout_ms);
}

km_err_t km_srcadm_request(km_srcadm_t *sa, const km_strlist_t *bootstrap,
                           const kp_msg_desc_t *desc, int16_t max_ver, const void *msg,
                           int32_t timeout_ms, km_srcadm_raw_cb cb, void *arg)
{
    km_srcadm_query_t *q;

    if (bootstrap == NULL || bootstrap->n == 0 || desc == NULL || msg == NULL || cb == NULL)
        return KM_ERR_INVALID;
    if (atomic_load(&sa->stop))
        return KM_ERR_SHUTDOWN;
    q = km_calloc(sa->cm, 1, sizeof(*q));
    if (q == NULL)
        return KM_ERR_NOMEM;
    q->magic = KM_SRCADM_Q_MAGIC;
    q->sa = sa;
    q->desc = desc;
    q->max_ver = max_ver;
    q->msg = msg;
    q->raw_cb = cb;
    q->arg = arg;
    return km_srcadm_start_query(sa, q, bootstrap, timeout_ms);
}

/* Resolve the addresses and submit q (freed on an error). */
static km_err_t km_srcadm_start_query(km_srcadm_t *sa, km_srcadm_query_t *q,
                                      const km_strlist_t *bootstrap, int32_t timeout_ms)
{
    km_plugin_t *cm = sa->cm;

    q->hosts = km_calloc(cm, bootstrap->n, sizeof(*q->hosts));
    q->ports = km_calloc(cm, bootstrap->n, sizeof(*q->ports));
    if (q->hosts == NULL || q->ports == NULL) {
        km_srcadm_query_free(cm, q);
        return KM_ERR_NOMEM;
    }
    for (size_t i = 0; i < bootstrap->n; i++) {
        if (km_srcadm_parse_addr(cm, bootstrap->v[i], &q->hosts[q->naddr], &q->ports[q->naddr]))
            q->naddr++;
    }
    if (q->naddr == 0) {
        km_srcadm_query_free(cm, q);
        return KM_ERR_INVALID;
    }
    q->deadline_ns = cm->ref.api->clock_monotonic_ns(cm->ref.host) +
                     (int64_t)(timeout_ms > 0 ? timeout_ms : 30000) * 1000000;
    pthread_mutex_lock(&sa->lock);
    if (sa->stopped) {
        pthread_mutex_unlock(&sa->lock);
        km_srcadm_query_free(cm, q);
        return KM_ERR_SHUTDOWN;
    }
    atomic_fetch_add(&sa->active, 1);
    if (km_srcadm_submit(q) != 0) {
        atomic_fetch_sub(&sa->active, 1);
        pthread_mutex_unlock(&sa->lock);
        km_srcadm_query_free(cm, q);
        return KM_ERR_NOMEM;
    }
    cm->ref.api->latch_set(cm->ref.host, sa->latch);
    kc_client_wakeup(sa->kc);
    pthread_mutex_unlock(&sa->lock);
    return KM_OK;
}
