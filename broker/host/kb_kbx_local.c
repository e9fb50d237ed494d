/*
 * kb_kbx_local.c -- local_request and broker_request: a plugin's encoded Kafka request handed
 * to this broker's own handler registry, without a socket, as the broker's internal principal
 * (KB_PRINCIPAL_INTERNAL, which the API handlers treat as privileged: mirror.name in
 * CreateTopics/AlterConfigs, CreateTopics MirrorInfo, internal topics).
 *
 * Every API is served, those whose handlers wait included (long-poll Fetch, JoinGroup,
 * SyncGroup, acks=all Produce): a request is a connection-less request of broker/net
 * (kb_req_local_new, kb_net.h) whose completion callback hands the flattened response back
 * here. The host writes the request header (v1 or v2 from the codec, client id
 * "kbx-<plugin>", its own correlation ids) and the request claims the listener named by
 * inter.broker.listener.name (else the first listener).
 *
 * One host thread, "kb-kbx-local", does everything else, in this order of priority:
 *   1. delivers finished requests to the plugins' callbacks (never from inside the starting
 *      call, never on the thread that completed a deferred request -- that thread may hold the
 *      handler owner's locks);
 *   2. cancels waiting requests whose deadline (timeout_ms) passed (KBX_ERR_TIMEOUT) or whose
 *      plugin is being unloaded (KBX_ERR_SHUTDOWN): kb_req_local_cancel, which runs the
 *      handler owner's cancel callback as when a client goes away;
 *   3. starts submitted requests: the handler runs on this thread; one that answers at once
 *      is delivered next, one that defers stays in the live list and does not hold up the
 *      requests behind it (a long-poll Fetch does not delay the plugin's next CreateTopics).
 * Requests are independent of each other: a deferred one may finish after a later one.
 *
 * Locks: l->mu protects the lists and the per-request cancel fields. It is never held while
 * calling into broker/net or a plugin; the completion callback (any thread, possibly under a
 * handler owner's lock) takes it only to move the request to the done list. A request is
 * freed only by this thread (after delivery), so this thread may use one without l->mu.
 *
 * broker_request: to this broker itself it is served like local_request. To another broker it
 * goes over a kc_ client (proto/client) driven by its own thread, "kb-kbx-peer": the address is
 * the broker's registered endpoint (kb_meta_brokers) on the listener local requests claim
 * (inter.broker.listener.name, else the first; a broker that registered no such endpoint is
 * reached on its first one), looked up at each request; a broker the image does not know is
 * KBX_ERR_NOT_FOUND at start. The body is sent at exactly the plugin's version (a broker that
 * does not support it answers KBX_ERR_UNSUPPORTED). The client's callback copies the answer and
 * moves the request to the done list, so the plugin is called back on "kb-kbx-local" like any
 * other request. Timeouts are the client's (timeout_ms; < 0: its default request timeout);
 * unloading a plugin cancels its remote requests (kc_cancel, KBX_ERR_SHUTDOWN). At stop the
 * client is destroyed first (what is pending fails KBX_ERR_SHUTDOWN), then the local thread.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_err.h"
#include "kb_meta.h"
#include "kb_host_int.h"
#include "kb_net.h"
#include "kb_time.h"
#include "kc_client.h"

struct kb_lreq_s {
    kb_lreq_t *next, *prev; /* in / done list (next only) or the live list; under l->mu */
    kbx_host_t *host;
    int16_t api_key, api_version;
    uint8_t *body;
    size_t len;
    int64_t deadline_ms; /* monotonic; -1: none */
    kbx_response_fn cb;
    void *arg;
    kb_req_t *req;      /* the broker/net request while started; the creator's reference */
    int32_t cancel_why; /* l->mu: KBX_ERR_TIMEOUT / KBX_ERR_SHUTDOWN once decided */
    bool cancel_sent;   /* l->mu: kb_req_local_cancel called */
    int32_t status;     /* the result, set when it moves to the done list */
    uint8_t *resp;
    size_t resp_len;
    bool remote;   /* broker_request to another broker: in l->remote until answered */
    int64_t kc_id; /* its kc_ request id (for kc_cancel) */
};

static const uint8_t kb_lreq_empty[1];

static void kb_lreq_free(kb_lreq_t *lr)
{
    free(lr->resp);
    free(lr->body);
    free(lr);
}

/* Call the plugin back (unless it is gone) and free @p lr. @thread kb-kbx-local */
static void kb_lreq_deliver(kb_lreq_t *lr)
{
    kbx_host_t *host = lr->host;

    if (lr->req)
        kb_req_local_release(lr->req);
    lr->req = NULL;
    if (!atomic_load(&host->dead)) {
        if (lr->status == KBX_OK)
            lr->cb(lr->arg, KBX_OK, lr->resp ? lr->resp : kb_lreq_empty, lr->resp_len);
        else
            lr->cb(lr->arg, lr->status, NULL, 0);
    }
    atomic_fetch_sub(&host->n_ops, 1);
    kb_lreq_free(lr);
}

/* broker/net's completion: move the request from the live list to the done list.
 * @thread any (see kb_req_done_fn) */
static void kb_lreq_done(void *opaque, int status, uint8_t *body, size_t len)
{
    kb_lreq_t *lr = opaque;
    kb_hlocal_t *l = &lr->host->h->local;
    int32_t st;

    switch (status) {
    case 0:
        st = KBX_OK;
        break;
    case KB_E_TIMEOUT:
        st = KBX_ERR_TIMEOUT;
        break;
    case KB_E_CANCELLED:
        st = KBX_ERR_SHUTDOWN;
        break;
    case KB_E_PARSE:
        st = KBX_ERR_INVALID; /* malformed or refused: a client's connection would close */
        break;
    case KB_E_UNSUPPORTED:
        st = KBX_ERR_UNSUPPORTED;
        break;
    case KB_E_NOMEM:
        st = KBX_ERR_NOMEM;
        break;
    default:
        st = KBX_ERR_IO;
        break;
    }
    pthread_mutex_lock(&l->mu);
    lr->status = st;
    lr->resp = body;
    lr->resp_len = len;
    /* unlink from the live list */
    if (lr->prev)
        lr->prev->next = lr->next;
    else
        l->live = lr->next;
    if (lr->next)
        lr->next->prev = lr->prev;
    lr->prev = lr->next = NULL;
    if (l->done_tail)
        l->done_tail->next = lr;
    else
        l->done_head = lr;
    l->done_tail = lr;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* ---- remote requests (broker_request to another broker) ------------------------------------- */

/* kc_resp_cb_t: copy the answer, move the request from l->remote to the done list.
 * @thread kb-kbx-peer (or the stopping thread, from kc_client_destroy) */
static void kb_rreq_done(kc_client_t *kc, int err, int16_t ver, const uint8_t *body, size_t len,
                         void *opaque)
{
    kb_lreq_t *lr = opaque;
    kb_hlocal_t *l = &lr->host->h->local;
    int32_t st;
    uint8_t *copy = NULL;

    (void)kc;
    (void)ver;
    switch (err) {
    case KC_E_OK:
        st = KBX_OK;
        if (len && !(copy = malloc(len)))
            st = KBX_ERR_NOMEM;
        else if (len)
            memcpy(copy, body, len);
        break;
    case KC_E_TIMED_OUT:
        st = KBX_ERR_TIMEOUT;
        break;
    case KC_E_CANCELLED:
    case KC_E_DESTROYED:
        st = KBX_ERR_SHUTDOWN;
        break;
    case KC_E_NO_VERSION:
        st = KBX_ERR_UNSUPPORTED;
        break;
    case KC_E_NOMEM:
        st = KBX_ERR_NOMEM;
        break;
    case KC_E_NO_NODE:
        st = KBX_ERR_NOT_FOUND;
        break;
    default:
        st = KBX_ERR_IO;
        break;
    }
    pthread_mutex_lock(&l->mu);
    lr->status = st;
    lr->resp = copy;
    lr->resp_len = copy ? len : 0;
    if (lr->prev)
        lr->prev->next = lr->next;
    else
        l->remote = lr->next;
    if (lr->next)
        lr->next->prev = lr->prev;
    lr->prev = lr->next = NULL;
    if (l->done_tail)
        l->done_tail->next = lr;
    else
        l->done_head = lr;
    l->done_tail = lr;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static void *kb_hpeer_main(void *arg)
{
    kb_hlocal_t *l = arg;

    pthread_setname_np(pthread_self(), "kb-kbx-peer");
    while (!atomic_load(&l->peer_stop))
        kc_client_poll(l->kc, 200);
    return NULL;
}

/* The address of broker @p id on @p listener (else its first endpoint). 0 or KBX_ERR_*. */
static int32_t kb_hpeer_addr(kb_host_t *h, int32_t id, char *host, size_t hsize, int *port)
{
    kb_meta_broker_t *v = NULL;
    size_t n = 0;
    int32_t rc = KBX_ERR_NOT_FOUND;

    if (kb_meta_brokers(h->meta, &v, &n) != 0)
        return KBX_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        const kb_mendpoint_t *ep = NULL;
        if (v[i].id != id || v[i].nendpoints <= 0)
            continue;
        for (int32_t j = 0; j < v[i].nendpoints && j < KB_MREC_MAX_ENDPOINTS; j++)
            if (!strcmp(v[i].endpoints[j].name, h->local_listener))
                ep = &v[i].endpoints[j];
        if (!ep)
            ep = &v[i].endpoints[0];
        if (ep->port > 0 && ep->port <= 65535 && ep->host[0]) {
            snprintf(host, hsize, "%s", ep->host);
            *port = ep->port;
            rc = KBX_OK;
        }
        break;
    }
    free(v);
    return rc;
}

/* Send @p lr (owned: freed here on error) to broker @p id. KBX_OK: its callback follows. */
static int32_t kb_hpeer_send(kb_host_t *h, kb_lreq_t *lr, int32_t id)
{
    kb_hlocal_t *l = &h->local;
    char addr[256];
    int port = 0;
    int32_t rc;
    int32_t tmo;
    int64_t kid;

    if ((rc = kb_hpeer_addr(h, id, addr, sizeof(addr), &port)) != KBX_OK)
        goto fail;
    tmo = lr->deadline_ms < 0 ? 0
          : lr->deadline_ms - kb_time_mono_ms() > INT32_MAX
              ? INT32_MAX
              : (int32_t)(lr->deadline_ms - kb_time_mono_ms());
    if (lr->deadline_ms >= 0 && tmo <= 0)
        tmo = 1;
    pthread_mutex_lock(&l->mu);
    if (l->peer_closed || !l->kc) {
        pthread_mutex_unlock(&l->mu);
        rc = KBX_ERR_SHUTDOWN;
        goto fail;
    }
    if (kc_client_node_set(l->kc, id, addr, port) != 0) {
        pthread_mutex_unlock(&l->mu);
        rc = KBX_ERR_NOMEM;
        goto fail;
    }
    /* Listed before it is sent: the callback (another thread) unlinks it. l->mu is held, so
     * the callback waits for the id to be stored. */
    lr->remote = true;
    lr->prev = NULL;
    lr->next = l->remote;
    if (l->remote)
        l->remote->prev = lr;
    l->remote = lr;
    atomic_fetch_add(&lr->host->n_ops, 1);
    kid = kc_request_raw(l->kc, id, lr->api_key, lr->api_version, lr->body, lr->len, tmo, 0,
                         kb_rreq_done, lr);
    if (kid < 0) {
        l->remote = lr->next;
        if (lr->next)
            lr->next->prev = NULL;
        atomic_fetch_sub(&lr->host->n_ops, 1);
        pthread_mutex_unlock(&l->mu);
        rc = kid == KC_E_NOMEM ? KBX_ERR_NOMEM : KBX_ERR_INVALID;
        goto fail;
    }
    lr->kc_id = kid;
    pthread_mutex_unlock(&l->mu);
    return KBX_OK;
fail:
    kb_lreq_free(lr);
    return rc;
}

/* Start one request: build it, list it as live, run its handler. A request that cannot start
 * is delivered at once with its error. @thread kb-kbx-local */
static void kb_lreq_start(kb_host_t *h, kb_lreq_t *lr)
{
    kb_hlocal_t *l = &h->local;
    kbx_host_t *host = lr->host;
    char peer[96], client_id[96];
    kb_req_local_conf_t conf;
    int err = 0;

    if (atomic_load(&host->dead) || atomic_load(&host->stopping)) {
        lr->status = KBX_ERR_SHUTDOWN;
        kb_lreq_deliver(lr);
        return;
    }
    if (lr->deadline_ms >= 0 && kb_time_mono_ms() > lr->deadline_ms) {
        lr->status = KBX_ERR_TIMEOUT;
        kb_lreq_deliver(lr);
        return;
    }
    snprintf(peer, sizeof(peer), "kbx:%s", host->name);
    snprintf(client_id, sizeof(client_id), "kbx-%s", host->name);
    memset(&conf, 0, sizeof(conf));
    conf.api_key = lr->api_key;
    conf.api_version = lr->api_version;
    conf.correlation_id = atomic_fetch_add(&h->local_corr, 1);
    conf.client_id = client_id;
    conf.listener = h->local_listener;
    conf.peer = peer;
    conf.principal = KB_PRINCIPAL_INTERNAL;
    conf.done = kb_lreq_done;
    conf.done_opaque = lr;
    lr->req = kb_req_local_new(h->kb->reg, &conf, lr->body, lr->len, &err);
    if (!lr->req) {
        lr->status = err == KB_E_UNSUPPORTED ? KBX_ERR_UNSUPPORTED
                     : err == KB_E_NOMEM     ? KBX_ERR_NOMEM
                                             : KBX_ERR_INVALID;
        kb_lreq_deliver(lr);
        return;
    }
    pthread_mutex_lock(&l->mu);
    lr->prev = NULL;
    lr->next = l->live;
    if (l->live)
        l->live->prev = lr;
    l->live = lr;
    pthread_mutex_unlock(&l->mu);
    /* The handler answers here (kb_lreq_done runs now) or defers (it runs later elsewhere). */
    kb_req_local_run(lr->req);
}

/* The first live request to cancel now, marked as being cancelled; *next_ms: the nearest
 * deadline of the others. l->mu held. */
static kb_lreq_t *kb_hlocal_due(kb_hlocal_t *l, int64_t now, int64_t *next_ms)
{
    *next_ms = INT64_MAX;
    for (kb_lreq_t *lr = l->live; lr; lr = lr->next) {
        if (lr->cancel_sent)
            continue;
        if (!lr->cancel_why) {
            if (l->stop || atomic_load(&lr->host->stopping) || atomic_load(&lr->host->dead))
                lr->cancel_why = KBX_ERR_SHUTDOWN;
            else if (lr->deadline_ms >= 0 && lr->deadline_ms <= now)
                lr->cancel_why = KBX_ERR_TIMEOUT;
        }
        if (lr->cancel_why) {
            lr->cancel_sent = true;
            return lr;
        }
        if (lr->deadline_ms >= 0 && lr->deadline_ms < *next_ms)
            *next_ms = lr->deadline_ms;
    }
    return NULL;
}

static void *kb_hlocal_main(void *arg)
{
    kb_host_t *h = arg;
    kb_hlocal_t *l = &h->local;

    pthread_setname_np(pthread_self(), "kb-kbx-local");
    pthread_mutex_lock(&l->mu);
    for (;;) {
        kb_lreq_t *lr;
        int64_t next_ms;

        if ((lr = l->done_head) != NULL) {
            l->done_head = lr->next;
            if (!l->done_head)
                l->done_tail = NULL;
            lr->next = NULL;
            pthread_mutex_unlock(&l->mu);
            kb_lreq_deliver(lr);
            pthread_mutex_lock(&l->mu);
            continue;
        }
        if ((lr = kb_hlocal_due(l, kb_time_mono_ms(), &next_ms)) != NULL) {
            int why = lr->cancel_why == KBX_ERR_TIMEOUT ? KB_E_TIMEOUT : KB_E_CANCELLED;
            pthread_mutex_unlock(&l->mu);
            /* The cancel callback runs here; then kb_lreq_done queues the result. A request
             * that finished meanwhile is on the done list already (KB_E_STATE). */
            kb_req_local_cancel(lr->req, why);
            pthread_mutex_lock(&l->mu);
            continue;
        }
        if ((lr = l->in_head) != NULL) {
            l->in_head = lr->next;
            if (!l->in_head)
                l->in_tail = NULL;
            lr->next = NULL;
            pthread_mutex_unlock(&l->mu);
            kb_lreq_start(h, lr);
            pthread_mutex_lock(&l->mu);
            continue;
        }
        if (l->stop && !l->live)
            break; /* everything delivered */
        if (next_ms == INT64_MAX) {
            pthread_cond_wait(&l->cv, &l->mu);
        } else {
            struct timespec ts = {.tv_sec = next_ms / 1000, .tv_nsec = (next_ms % 1000) * 1000000};
            pthread_cond_timedwait(&l->cv, &l->mu, &ts);
        }
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int kb_hlocal_init(kb_hlocal_t *l)
{
    pthread_condattr_t ca;
    memset(l, 0, sizeof(*l));
    if (pthread_mutex_init(&l->mu, NULL) != 0)
        return -1;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    return 0;
}

static kc_client_t *kb_hpeer_client(kb_host_t *h)
{
    kc_opts_t o;
    char cid[64], err[256];
    kc_client_t *kc;

    snprintf(cid, sizeof(cid), "kbroker-%" PRId32 "-kbx", kb_meta_node_id(h->meta));
    kc_opts_init(&o);
    o.client_id = cid;
    o.reconnect_backoff_max_ms = 1000;
    if (!(kc = kc_client_new(&o, err, sizeof(err))))
        kb_hlog(KB_HLOG_ERROR, "cannot create the inter-broker client: %s", err);
    return kc;
}

/* Fail what is still sent to other brokers (KBX_ERR_SHUTDOWN through the done list) and close
 * the channel. @thread main */
static void kb_hpeer_stop(kb_hlocal_t *l)
{
    pthread_mutex_lock(&l->mu);
    l->peer_closed = true;
    pthread_mutex_unlock(&l->mu);
    atomic_store(&l->peer_stop, true);
    if (l->peer_started) {
        kc_client_wakeup(l->kc);
        pthread_join(l->peer_thr, NULL);
        l->peer_started = false;
    }
    if (l->kc)
        kc_client_destroy(l->kc); /* the callbacks run here */
    l->kc = NULL;
}

int kb_hlocal_start(kb_host_t *h)
{
    kb_hlocal_t *l = &h->local;
    sigset_t all, old;
    int rc;

    /* Host threads take no signals: the main thread waits for SIGTERM/SIGINT. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&l->thr, NULL, kb_hlocal_main, h);
    if (rc == 0) {
        l->started = true;
        l->kc = kb_hpeer_client(h);
        if (l->kc && pthread_create(&l->peer_thr, NULL, kb_hpeer_main, l) == 0)
            l->peer_started = true;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return -1;
    if (!l->peer_started)
        kb_hlog(KB_HLOG_WARN, "broker_request to other brokers is unavailable (no client)");
    return 0;
}

void kb_hlocal_stop(kb_host_t *h)
{
    kb_hlocal_t *l = &h->local;
    kb_lreq_t *lr;

    kb_hpeer_stop(l);
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (l->started)
        pthread_join(l->thr, NULL);
    l->started = false;
    /* Never started (a failed module init): what was submitted gets its answer here. */
    pthread_mutex_lock(&l->mu);
    lr = l->in_head;
    l->in_head = l->in_tail = NULL;
    pthread_mutex_unlock(&l->mu);
    while (lr) {
        kb_lreq_t *n = lr->next;
        lr->status = KBX_ERR_SHUTDOWN;
        kb_lreq_deliver(lr);
        lr = n;
    }
}

void kb_hlocal_destroy(kb_hlocal_t *l)
{
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
}

void kb_hlocal_cancel_plugin(kb_host_t *h, kbx_host_t *host)
{
    kb_hlocal_t *l = &h->local;
    int64_t ids[64];
    size_t n;

    atomic_store(&host->stopping, true);
    do {
        n = 0;
        pthread_mutex_lock(&l->mu);
        for (kb_lreq_t *lr = l->remote; lr && n < 64; lr = lr->next)
            if (lr->host == host && !lr->cancel_sent && l->kc) {
                lr->cancel_sent = true;
                ids[n++] = lr->kc_id;
            }
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        /* A request answered meanwhile is unknown to the client by now: KC_E_INVALID. */
        for (size_t i = 0; i < n; i++)
            kc_cancel(l->kc, ids[i]);
    } while (n == 64);
}

/* ---- the kbx functions ----------------------------------------------------------------------- */

/* A request copied from the plugin's arguments, or NULL with *rc set. */
static kb_lreq_t *kb_lreq_make(kbx_host_t *host, int16_t api_key, int16_t api_version,
                               const uint8_t *body, size_t len, int64_t timeout_ms,
                               kbx_response_fn cb, void *arg, int32_t *rc)
{
    kb_lreq_t *lr;

    *rc = KBX_ERR_INVALID;
    if (!cb || (!body && len) || api_key < 0 || api_version < 0)
        return NULL;
    *rc = KBX_ERR_SHUTDOWN;
    if (atomic_load(&host->dead))
        return NULL;
    *rc = KBX_ERR_NOMEM;
    lr = calloc(1, sizeof(*lr));
    if (!lr)
        return NULL;
    lr->body = malloc(len ? len : 1);
    if (!lr->body) {
        free(lr);
        return NULL;
    }
    if (len)
        memcpy(lr->body, body, len);
    lr->len = len;
    lr->host = host;
    lr->api_key = api_key;
    lr->api_version = api_version;
    lr->deadline_ms = timeout_ms < 0 ? -1 : kb_time_mono_ms() + timeout_ms;
    lr->cb = cb;
    lr->arg = arg;
    *rc = KBX_OK;
    return lr;
}

static int32_t kb_kbx_request(kbx_host_t *host, int16_t api_key, int16_t api_version,
                              const uint8_t *body, size_t len, int64_t timeout_ms,
                              kbx_response_fn cb, void *arg)
{
    kb_hlocal_t *l = &host->h->local;
    kb_lreq_t *lr;
    bool stopped;
    int32_t rc;

    if (!(lr = kb_lreq_make(host, api_key, api_version, body, len, timeout_ms, cb, arg, &rc)))
        return rc;
    pthread_mutex_lock(&l->mu);
    stopped = l->stop;
    if (!stopped) {
        atomic_fetch_add(&host->n_ops, 1);
        if (l->in_tail)
            l->in_tail->next = lr;
        else
            l->in_head = lr;
        l->in_tail = lr;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    if (stopped) {
        kb_lreq_free(lr);
        return KBX_ERR_SHUTDOWN;
    }
    return KBX_OK;
}

static int32_t kb_kbx_local_request(kbx_host_t *host, int16_t api_key, int16_t api_version,
                                    const uint8_t *body, size_t len, int64_t timeout_ms,
                                    kbx_response_fn cb, void *arg)
{
    if (!kb_host_from(host, "local_request"))
        return KBX_ERR_INVALID;
    return kb_kbx_request(host, api_key, api_version, body, len, timeout_ms, cb, arg);
}

static int32_t kb_kbx_broker_request(kbx_host_t *host, int32_t broker_id, int16_t api_key,
                                     int16_t api_version, const uint8_t *body, size_t len,
                                     int64_t timeout_ms, kbx_response_fn cb, void *arg)
{
    kb_lreq_t *lr;
    int32_t rc;

    if (!kb_host_from(host, "broker_request"))
        return KBX_ERR_INVALID;
    if (broker_id == kb_meta_node_id(host->h->meta))
        return kb_kbx_request(host, api_key, api_version, body, len, timeout_ms, cb, arg);
    if (broker_id < 0)
        return KBX_ERR_NOT_FOUND;
    if (!(lr = kb_lreq_make(host, api_key, api_version, body, len, timeout_ms, cb, arg, &rc)))
        return rc;
    return kb_hpeer_send(host->h, lr, broker_id);
}

void kb_kbx_local_fill(kbx_api_t *t)
{
    t->local_request = kb_kbx_local_request;
    t->broker_request = kb_kbx_broker_request;
}
