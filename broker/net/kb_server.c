/*
 * kb_server.c -- acceptor, network threads, request queue and handler threads.
 *
 * Ownership: a network thread owns its connections (all fields of kb_conn_t except the
 * reference count) and the in-flight list of each. Requests are reference counted; whoever
 * finishes with a request drops its reference, and the last one frees it, from any thread.
 * Handler threads and deferred owners never touch a connection: they hand the request back
 * to its network thread through the thread's event list and wake it with an eventfd.
 */
#include "kb_net.h"

#include <errno.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kb_err.h"
#include "kb_log.h"
#include "kb_net_int.h"
#include "kb_netrec.h"
#include "kb_sock.h"
#include "kb_time.h"
#include "kp_msgs.h"

#define KB_CONN_RBUF         (64 * 1024) /* read buffer per connection */
#define KB_OUT_HIGH_WATER    (4 << 20)   /* unsent bytes above which a connection is not read */
#define KB_READ_BUDGET       (1 << 20)   /* bytes read from one connection per wake-up */
#define KB_IO_EVENTS         64
#define KB_IOV_MAX           64
#define KB_API_METRIC_KEYS   1024
#define KB_ACCEPT_BACKOFF_MS 100

static const char *const kb_principal_anonymous = "User:ANONYMOUS";

struct kb_conn_s {
    _Atomic int refcnt; /* the network thread's + one per live request */
    uint64_t id;
    int fd;
    kb_io_t *io;
    kb_server_t *srv;
    const char *listener;
    char peer[64];
    bool closed;
    bool muted;
    bool want_out;
    bool touched;                  /* on the network thread's "process after events" list */
    struct kb_conn_s *prev, *next; /* the network thread's connection list */
    struct kb_conn_s *work_next;   /* touched list / dead list */
    /* reading */
    uint8_t *rbuf;
    size_t rpos, rlen;
    uint8_t *fbuf; /* a frame too big for rbuf, read in place */
    size_t flen, fgot;
    /* requests, in arrival order */
    kb_req_t *inf_head, *inf_tail, *next_dispatch;
    int n_inflight;
    int n_exec;        /* requests in a handler */
    int n_exec_serial; /* of which barriers (not KB_API_CONCURRENT) */
    /* response bytes not yet written */
    kb_seg_t *out_head, *out_tail;
    size_t out_bytes;
    int64_t last_active_ms;
    kb_netrec_t rec; /* request recorder (KM_RECORD_DIR) */
};

struct kb_io_s {
    kb_server_t *srv;
    int idx;
    pthread_t thr;
    int epfd;
    int wake_fd;
    _Atomic int wake_pending;
    pthread_mutex_t mu; /* protects ev_head/ev_tail and new_conns */
    kb_ev_t *ev_head, *ev_tail;
    kb_conn_t *new_conns; /* linked by work_next */
    /* network thread only */
    kb_conn_t *conns;
    kb_conn_t *dead; /* closed, the thread's reference still to drop */
    int phase_done;  /* highest phase acted on */
    int64_t last_sweep_ms;
};

typedef struct kb_lst_s {
    char *name;
    char *host;
    int port;
    int fd;
} kb_lst_t;

typedef struct kb_api_metrics_s {
    _Atomic(kb_counter_t *) requests;
    _Atomic(kb_counter_t *) bytes;
    _Atomic(kb_histo_t *) latency;
    _Atomic(kb_counter_t *) resp_bytes;
} kb_api_metrics_t;

struct kb_server_s {
    kb_server_conf_t conf;
    kb_api_registry_t *reg;
    kb_metrics_t *metrics;
    kb_lst_t *lst;
    size_t nlst;
    /* acceptor */
    pthread_t acc_thr;
    int acc_epfd;
    int acc_wake;
    unsigned rr;
    /* network threads */
    kb_io_t *io;
    int nio;
    /* handler threads and their queue */
    pthread_t *workers;
    int nworkers;
    pthread_mutex_t q_mu;
    pthread_cond_t q_nonempty, q_nonfull;
    kb_req_t **q;
    size_t q_cap, q_head, q_cnt;
    bool q_closed;
    /* state */
    bool started;
    _Atomic int phase;
    _Atomic uint64_t next_conn_id;
    _Atomic int64_t n_inflight;  /* requests in in-flight lists */
    _Atomic int64_t n_out_bytes; /* response bytes not yet written */
    _Atomic int64_t n_live_reqs; /* allocated requests */
    _Atomic int n_io_closed;     /* network threads done with KB_PH_CLOSE */
    pthread_mutex_t st_mu;
    pthread_cond_t st_cv; /* CLOCK_MONOTONIC; the main thread waits on it while stopping */
    /* metrics */
    kb_counter_t *m_bytes_in, *m_bytes_out, *m_accepted, *m_replica_fetch_bytes;
    kb_counter_t *m_closed_peer, *m_closed_idle, *m_closed_protocol, *m_closed_error,
        *m_closed_shutdown;
    kb_counter_t *m_rej_too_large, *m_rej_unsupported, *m_rej_malformed;
    kb_gauge_t *m_conns, *m_queue, *m_inflight;
    kb_api_metrics_t api_m[KB_API_METRIC_KEYS];
    /* request recorder: KM_RECORD_DIR at start (NULL: off), KM_RECORD_MAX_BYTES */
    char *rec_dir;
    uint64_t rec_limit;
};

typedef enum kb_close_why_e {
    KB_CLOSE_PEER,
    KB_CLOSE_IDLE,
    KB_CLOSE_PROTOCOL,
    KB_CLOSE_ERROR,
    KB_CLOSE_SHUTDOWN,
} kb_close_why_t;

static void kb_conn_close(kb_conn_t *conn, kb_close_why_t why, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void kb_conn_parse(kb_conn_t *conn);
static void kb_conn_write(kb_conn_t *conn);

/* ------------------------------------------------------------------ reference counting */

static void kb_conn_unref(kb_conn_t *conn)
{
    if (atomic_fetch_sub(&conn->refcnt, 1) == 1)
        free(conn);
}

static void kb_req_free(kb_req_t *req)
{
    req->magic = 0;
    kb_resp_free(req->resp);
    req->resp = NULL;
    kp_arena_free(&req->arena);
    free(req->buf);
    req->buf = NULL;
    if (req->conn) {
        atomic_fetch_sub(&req->conn->srv->n_live_reqs, 1);
        kb_conn_unref(req->conn);
        req->conn = NULL;
    } else {
        kb_req_local_free(req);
    }
    free(req);
}

void kb_req_unref(kb_req_t *req)
{
    if (atomic_fetch_sub(&req->refcnt, 1) == 1)
        kb_req_free(req);
}

/* ------------------------------------------------------------------ metrics */

static void kb_server_metrics_init(kb_server_t *srv)
{
    kb_metrics_t *m = srv->metrics;
    static const char *const l_peer[] = {"reason", "peer", NULL};
    static const char *const l_idle[] = {"reason", "idle", NULL};
    static const char *const l_proto[] = {"reason", "protocol", NULL};
    static const char *const l_err[] = {"reason", "error", NULL};
    static const char *const l_shut[] = {"reason", "shutdown", NULL};
    static const char *const l_large[] = {"reason", "too_large", NULL};
    static const char *const l_unsup[] = {"reason", "unsupported", NULL};
    static const char *const l_malf[] = {"reason", "malformed", NULL};
    const char *closed_help = "Connections closed, by reason.";
    const char *rej_help = "Requests refused by the network layer (the connection is closed).";

    if (!m)
        return;
    srv->m_bytes_in = kb_metrics_counter(m, "kbroker_network_received_bytes_total",
                                         "Bytes read from client connections.", NULL);
    srv->m_bytes_out = kb_metrics_counter(m, "kbroker_network_sent_bytes_total",
                                          "Bytes written to client connections.", NULL);
    srv->m_replica_fetch_bytes =
        kb_metrics_counter(m, "kbroker_replica_fetch_response_bytes_total",
                           "Response bytes of follower replicas' Fetch requests (also in "
                           "kbroker_response_bytes_total{api=\"Fetch\"}).",
                           NULL);
    srv->m_accepted =
        kb_metrics_counter(m, "kbroker_connections_accepted_total", "Connections accepted.", NULL);
    srv->m_closed_peer =
        kb_metrics_counter(m, "kbroker_connections_closed_total", closed_help, l_peer);
    srv->m_closed_idle =
        kb_metrics_counter(m, "kbroker_connections_closed_total", closed_help, l_idle);
    srv->m_closed_protocol =
        kb_metrics_counter(m, "kbroker_connections_closed_total", closed_help, l_proto);
    srv->m_closed_error =
        kb_metrics_counter(m, "kbroker_connections_closed_total", closed_help, l_err);
    srv->m_closed_shutdown =
        kb_metrics_counter(m, "kbroker_connections_closed_total", closed_help, l_shut);
    srv->m_rej_too_large =
        kb_metrics_counter(m, "kbroker_requests_refused_total", rej_help, l_large);
    srv->m_rej_unsupported =
        kb_metrics_counter(m, "kbroker_requests_refused_total", rej_help, l_unsup);
    srv->m_rej_malformed =
        kb_metrics_counter(m, "kbroker_requests_refused_total", rej_help, l_malf);
    srv->m_conns = kb_metrics_gauge(m, "kbroker_connections", "Open client connections.", NULL);
    srv->m_queue = kb_metrics_gauge(m, "kbroker_request_queue_size",
                                    "Requests waiting for a handler thread.", NULL);
    srv->m_inflight = kb_metrics_gauge(m, "kbroker_requests_inflight",
                                       "Requests read and not yet answered.", NULL);
}

static const char *kb_server_api_name(int16_t key)
{
    const kp_api_info_t *info = kp_api_lookup(key);
    return info ? info->name : "unknown";
}

static kb_api_metrics_t *kb_server_api_metrics(kb_server_t *srv, int16_t key)
{
    kb_api_metrics_t *am;
    if (!srv->metrics || key < 0 || key >= KB_API_METRIC_KEYS)
        return NULL;
    am = &srv->api_m[key];
    if (!atomic_load_explicit(&am->latency, memory_order_acquire)) {
        /* Get-or-create is idempotent, so two threads racing here store the same handles. */
        const char *labels[] = {"api", kb_server_api_name(key), NULL};
        kb_counter_t *c = kb_metrics_counter(srv->metrics, "kbroker_requests_total",
                                             "Requests answered (or completed without an "
                                             "answer), by API.",
                                             labels);
        kb_counter_t *qb =
            kb_metrics_counter(srv->metrics, "kbroker_request_bytes_total",
                               "Bytes of the requests counted in kbroker_requests_total (header "
                               "and body; the 4-byte size prefix not counted), by API.",
                               labels);
        kb_histo_t *h = kb_metrics_histogram(
            srv->metrics, "kbroker_request_duration_seconds",
            "Time from reading a request to queueing its response, by API.",
            kb_metrics_latency_buckets, kb_metrics_latency_buckets_cnt, labels);
        kb_counter_t *b = kb_metrics_counter(srv->metrics, "kbroker_response_bytes_total",
                                             "Response bytes queued to connections (size "
                                             "prefix, header and body), by API.",
                                             labels);
        atomic_store_explicit(&am->resp_bytes, b, memory_order_release);
        atomic_store_explicit(&am->requests, c, memory_order_release);
        atomic_store_explicit(&am->bytes, qb, memory_order_release);
        atomic_store_explicit(&am->latency, h, memory_order_release);
    }
    return am;
}

/* ------------------------------------------------------------------ request queue */

static int kb_rq_push(kb_server_t *srv, kb_req_t *req)
{
    pthread_mutex_lock(&srv->q_mu);
    while (srv->q_cnt == srv->q_cap && !srv->q_closed)
        pthread_cond_wait(&srv->q_nonfull, &srv->q_mu);
    if (srv->q_closed) {
        pthread_mutex_unlock(&srv->q_mu);
        return KB_E_CLOSED;
    }
    srv->q[(srv->q_head + srv->q_cnt) % srv->q_cap] = req;
    srv->q_cnt++;
    kb_gauge_set(srv->m_queue, (int64_t)srv->q_cnt);
    pthread_cond_signal(&srv->q_nonempty);
    pthread_mutex_unlock(&srv->q_mu);
    return 0;
}

static kb_req_t *kb_rq_pop(kb_server_t *srv)
{
    kb_req_t *req = NULL;
    pthread_mutex_lock(&srv->q_mu);
    while (srv->q_cnt == 0 && !srv->q_closed)
        pthread_cond_wait(&srv->q_nonempty, &srv->q_mu);
    if (srv->q_cnt > 0) {
        req = srv->q[srv->q_head];
        srv->q_head = (srv->q_head + 1) % srv->q_cap;
        srv->q_cnt--;
        kb_gauge_set(srv->m_queue, (int64_t)srv->q_cnt);
        pthread_cond_signal(&srv->q_nonfull);
    }
    pthread_mutex_unlock(&srv->q_mu);
    return req;
}

static void kb_rq_close(kb_server_t *srv)
{
    pthread_mutex_lock(&srv->q_mu);
    srv->q_closed = true;
    pthread_cond_broadcast(&srv->q_nonempty);
    pthread_cond_broadcast(&srv->q_nonfull);
    pthread_mutex_unlock(&srv->q_mu);
}

/* ------------------------------------------------------------------ waking network threads */

static void kb_io_wake(kb_io_t *io)
{
    uint64_t one = 1;
    if (atomic_exchange(&io->wake_pending, 1) == 0) {
        /* The counter cannot overflow in practice; a failed write only delays the wake-up
         * until the next epoll timeout. */
        if (write(io->wake_fd, &one, sizeof(one)) < 0)
            kb_log_debug("net", "eventfd write: %s", strerror(errno));
    }
}

/* Hand @p ev (carrying one reference on its request) to the request's network thread. */
static void kb_io_push_event(kb_req_t *req, kb_ev_t *ev)
{
    kb_io_t *io = req->conn->io;
    ev->next = NULL;
    ev->req = req;
    pthread_mutex_lock(&io->mu);
    if (io->ev_tail)
        io->ev_tail->next = ev;
    else
        io->ev_head = ev;
    io->ev_tail = ev;
    pthread_mutex_unlock(&io->mu);
    kb_io_wake(io);
}

static void kb_server_signal_main(kb_server_t *srv)
{
    pthread_mutex_lock(&srv->st_mu);
    pthread_cond_broadcast(&srv->st_cv);
    pthread_mutex_unlock(&srv->st_mu);
}

/* ------------------------------------------------------------------ request API */

kb_reqctx_t *kb_req_ctx(kb_req_t *req)
{
    return &req->ctx;
}

int kb_req_defer(kb_req_t *req, kb_req_cancel_fn *cancel, void *cancel_opaque)
{
    int exp = KB_RS_RUNNING;
    if (req->magic != KB_REQ_MAGIC)
        return KB_E_INVALID;
    req->cancel = cancel;
    req->cancel_opaque = cancel_opaque;
    /* The owner's reference; taken before the state change so that a completion racing in
     * from another thread always has one to give away. */
    atomic_fetch_add(&req->refcnt, 1);
    if (!atomic_compare_exchange_strong(&req->state, &exp, KB_RS_DEFERRED)) {
        atomic_fetch_sub(&req->refcnt, 1); /* the handler still holds one: never the last */
        return exp == KB_RS_CANCELLED ? KB_E_CANCELLED : KB_E_STATE;
    }
    return 0;
}

static int kb_req_finish_deferred(kb_req_t *req, kb_resp_t *resp, bool close_conn)
{
    int exp = KB_RS_DEFERRED;
    if (req->magic != KB_REQ_MAGIC) {
        kb_resp_free(resp);
        kb_log_error("net", "kb_req_complete: not a live request (%p)", (void *)req);
        return KB_E_INVALID;
    }
    if (!req->conn)
        return kb_req_local_complete(req, resp, close_conn);
    /* Publish the result before the state change; only this owner writes them while the
     * request is DEFERRED, and the network thread reads them only after the event. */
    req->resp = resp;
    req->close_conn = close_conn;
    if (atomic_compare_exchange_strong(&req->state, &exp, KB_RS_DONE)) {
        kb_io_push_event(req, &req->ev_ready); /* gives the owner's reference away */
        return 0;
    }
    req->resp = NULL;
    kb_resp_free(resp);
    if (exp == KB_RS_CANCELLED) {
        /* With a cancel callback the network thread drops the owner's reference after the
         * callback; without one, dropping it is this call's job. */
        if (!req->cancel)
            kb_req_unref(req);
        return KB_E_CANCELLED;
    }
    kb_log_error("net", "kb_req_complete on a request that is not deferred (state %d)", exp);
    return KB_E_STATE;
}

int kb_req_complete(kb_req_t *req, kb_resp_t *resp)
{
    return kb_req_finish_deferred(req, resp, false);
}

int kb_req_complete_close(kb_req_t *req)
{
    return kb_req_finish_deferred(req, NULL, true);
}

/* ------------------------------------------------------------------ handler threads */

static void kb_worker_run(kb_server_t *srv, kb_req_t *req)
{
    kb_api_result_t res = KB_API_CLOSE;
    kb_resp_t *resp = NULL;
    kb_api_call_t call;
    int exp;

    if (atomic_load(&req->state) == KB_RS_RUNNING) {
        if (kb_api_call_begin(srv->reg, req->ctx.api_key, &call) == 0) {
            res = call.fn(call.opaque, req, &resp);
            kb_api_call_end(srv->reg, &call);
        } else {
            kb_log_warn("net", "%s: API %d was unregistered while the request waited",
                        req->ctx.peer, req->ctx.api_key);
        }
    }

    switch (res) {
    case KB_API_DEFERRED:
        if (atomic_load(&req->state) != KB_RS_RUNNING)
            break; /* deferred (maybe already completed or cancelled): nothing to do here */
        kb_log_error("net", "handler of %s returned DEFERRED without kb_req_defer()",
                     kb_server_api_name(req->ctx.api_key));
        res = KB_API_CLOSE;
        /* fall through */
    case KB_API_RESPOND:
    case KB_API_NO_RESPONSE:
    case KB_API_CLOSE:
    default:
        if (res == KB_API_RESPOND && !resp) {
            kb_log_error("net", "handler of %s returned RESPOND without a response",
                         kb_server_api_name(req->ctx.api_key));
            res = KB_API_CLOSE;
        }
        if (res != KB_API_RESPOND) {
            kb_resp_free(resp);
            resp = NULL;
        }
        if (atomic_load(&req->state) == KB_RS_DEFERRED) {
            /* The handler deferred and then answered anyway: the deferral wins. */
            kb_log_error("net", "handler of %s deferred its request and also returned a result",
                         kb_server_api_name(req->ctx.api_key));
            kb_resp_free(resp);
            break;
        }
        req->resp = resp;
        req->close_conn = res == KB_API_CLOSE;
        exp = KB_RS_RUNNING;
        if (atomic_compare_exchange_strong(&req->state, &exp, KB_RS_DONE)) {
            req->exec_ready = true;
        } else {
            req->resp = NULL;
            kb_resp_free(resp);
        }
        break;
    }
    kb_io_push_event(req, &req->ev_exec); /* gives the handler's reference away */
}

static void *kb_worker_main(void *arg)
{
    kb_server_t *srv = arg;
    kb_req_t *req;
    while ((req = kb_rq_pop(srv)) != NULL)
        kb_worker_run(srv, req);
    return NULL;
}

/* ------------------------------------------------------------------ connections */

static void kb_conn_epoll_update(kb_conn_t *conn)
{
    /* EPOLLRDHUP always: a client that goes away while its connection is muted must still
     * cancel its deferred requests promptly (Kafka closes on end of stream, too). */
    struct epoll_event ev = {.events = (uint32_t)EPOLLRDHUP |
                                       (conn->muted ? 0u : (uint32_t)EPOLLIN) |
                                       (conn->want_out ? (uint32_t)EPOLLOUT : 0u),
                             .data.ptr = conn};
    if (epoll_ctl(conn->io->epfd, EPOLL_CTL_MOD, conn->fd, &ev) != 0)
        kb_log_error("net", "epoll_ctl(%s): %s", conn->peer, strerror(errno));
}

static bool kb_conn_should_mute(const kb_conn_t *conn)
{
    return conn->n_inflight >= conn->srv->conf.max_inflight_per_conn ||
           conn->out_bytes >= KB_OUT_HIGH_WATER || atomic_load(&conn->srv->phase) >= KB_PH_DRAIN;
}

static void kb_conn_set_muted(kb_conn_t *conn, bool muted)
{
    if (conn->muted == muted || conn->closed)
        return;
    conn->muted = muted;
    kb_conn_epoll_update(conn);
}

/* Cancel one request of a closing connection and drop the in-flight list's reference. */
static void kb_conn_cancel_req(kb_req_t *req)
{
    int exp = KB_RS_RUNNING;
    if (!atomic_compare_exchange_strong(&req->state, &exp, KB_RS_CANCELLED) &&
        exp == KB_RS_DEFERRED) {
        if (atomic_compare_exchange_strong(&req->state, &exp, KB_RS_CANCELLED) && req->cancel) {
            req->cancel(req->cancel_opaque, req);
            kb_req_unref(req); /* the owner's reference */
        }
    }
    kb_req_unref(req);
}

static void kb_conn_close(kb_conn_t *conn, kb_close_why_t why, const char *fmt, ...)
{
    kb_server_t *srv = conn->srv;
    kb_io_t *io = conn->io;
    kb_log_level_t lvl = why == KB_CLOSE_PROTOCOL ? KB_LOG_WARN : KB_LOG_DEBUG;
    kb_counter_t *ctr[] = {srv->m_closed_peer, srv->m_closed_idle, srv->m_closed_protocol,
                           srv->m_closed_error, srv->m_closed_shutdown};
    va_list ap;

    if (conn->closed)
        return;
    conn->closed = true;
    if (kb_log_enabled(lvl)) {
        char reason[512];
        va_start(ap, fmt);
        vsnprintf(reason, sizeof(reason), fmt, ap);
        va_end(ap);
        kb_log(lvl, "net", "closing connection %llu from %s (%s): %s", (unsigned long long)conn->id,
               conn->peer, conn->listener, reason);
    }
    kb_counter_add(ctr[why], 1);
    kb_gauge_add(srv->m_conns, -1);
    epoll_ctl(io->epfd, EPOLL_CTL_DEL, conn->fd, NULL);
    close(conn->fd);
    conn->fd = -1;
    kb_netrec_close(&conn->rec);
    free(conn->rbuf);
    conn->rbuf = NULL;
    free(conn->fbuf);
    conn->fbuf = NULL;
    for (kb_seg_t *s = conn->out_head, *n; s; s = n) {
        n = s->next;
        kb_seg_free(s);
    }
    conn->out_head = conn->out_tail = NULL;
    atomic_fetch_sub(&srv->n_out_bytes, (int64_t)conn->out_bytes);
    conn->out_bytes = 0;
    atomic_fetch_sub(&srv->n_inflight, conn->n_inflight);
    kb_gauge_add(srv->m_inflight, -conn->n_inflight);
    for (kb_req_t *req = conn->inf_head, *n; req; req = n) {
        n = req->next;
        req->next = NULL;
        kb_conn_cancel_req(req);
    }
    conn->inf_head = conn->inf_tail = conn->next_dispatch = NULL;
    conn->n_inflight = 0;
    /* Unlink; the network thread's reference is dropped after the current event batch. */
    if (conn->prev)
        conn->prev->next = conn->next;
    else
        io->conns = conn->next;
    if (conn->next)
        conn->next->prev = conn->prev;
    conn->prev = conn->next = NULL;
    if (!conn->touched) {
        conn->work_next = io->dead;
        io->dead = conn;
    }
}

/* Start handlers for the requests that the ordering rules allow (kb_api.h). */
static void kb_conn_dispatch(kb_conn_t *conn)
{
    kb_req_t *req;
    while (!conn->closed && (req = conn->next_dispatch) != NULL) {
        bool serial = !(req->api_flags & KB_API_CONCURRENT);
        if (serial ? conn->n_exec > 0 : conn->n_exec_serial > 0)
            break;
        conn->next_dispatch = req->next;
        req->dispatched = true;
        conn->n_exec++;
        if (serial)
            conn->n_exec_serial++;
        atomic_fetch_add(&req->refcnt, 1); /* the handler's reference */
        if (kb_rq_push(conn->srv, req) != 0) {
            atomic_fetch_sub(&req->refcnt, 1);
            kb_conn_close(conn, KB_CLOSE_SHUTDOWN, "server shutting down");
            return;
        }
    }
}

static void kb_conn_refuse(kb_conn_t *conn, kb_counter_t *ctr, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void kb_conn_refuse(kb_conn_t *conn, kb_counter_t *ctr, const char *fmt, ...)
{
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    kb_counter_add(ctr, 1);
    kb_conn_close(conn, KB_CLOSE_PROTOCOL, "%s", reason);
}

/* A complete frame @p buf (owned) of @p len bytes arrived on @p conn. */
static void kb_conn_frame(kb_conn_t *conn, uint8_t *buf, size_t len)
{
    kb_server_t *srv = conn->srv;
    kb_api_range_t range;
    kp_RequestHeader_t hdr;
    kp_reader_t rd;
    kb_req_t *req;
    int16_t key, ver, hv;
    int32_t corr;
    bool apiv_too_new;

    if (srv->rec_dir)
        kb_netrec_frame(&conn->rec, srv->rec_dir, srv->rec_limit, conn->id, buf, len);
    kp_reader_init(&rd, buf, len);
    key = kp_read_int16(&rd);
    ver = kp_read_int16(&rd);
    corr = kp_read_int32(&rd);
    if (rd.err) {
        free(buf);
        kb_conn_refuse(conn, srv->m_rej_malformed, "request of %zu bytes is too short", len);
        return;
    }
    hv = kp_request_header_version(key, ver);
    if (hv < 0 || kb_api_get(srv->reg, key, &range) != 0) {
        free(buf);
        kb_conn_refuse(conn, srv->m_rej_unsupported,
                       "unsupported API key %d (version %d, correlation id %d)", key, ver, corr);
        return;
    }
    /* A too-new ApiVersions gets an answer (v0 format, UNSUPPORTED_VERSION, with the key
     * list) so the client can retry with a version we have; any other version out of range
     * closes the connection, as Kafka does. */
    apiv_too_new = key == KP_APIKEY_ApiVersions && ver > range.max_ver;
    if (!apiv_too_new && (ver < range.min_ver || ver > range.max_ver)) {
        free(buf);
        kb_conn_refuse(conn, srv->m_rej_unsupported,
                       "unsupported %s version %d (we serve %d..%d; correlation id %d)", range.name,
                       ver, range.min_ver, range.max_ver, corr);
        return;
    }

    req = calloc(1, sizeof(*req));
    if (!req) {
        free(buf);
        kb_conn_close(conn, KB_CLOSE_ERROR, "out of memory");
        return;
    }
    req->magic = KB_REQ_MAGIC;
    atomic_init(&req->refcnt, 1); /* the in-flight list's */
    atomic_init(&req->state, KB_RS_RUNNING);
    req->conn = conn;
    atomic_fetch_add(&conn->refcnt, 1);
    atomic_fetch_add(&srv->n_live_reqs, 1);
    req->buf = buf;
    req->len = len;
    req->api_flags = range.flags;
    /* Decoded messages may be larger than their wire form; the limit only stops abuse. */
    kp_arena_init(&req->arena, len * 32 + (1u << 20));

    kp_reader_init(&rd, buf, len);
    if (kp_RequestHeader_decode(&rd, &req->arena, &hdr, hv) != 0) {
        kb_log_debug("net", "%s: bad header: %s", conn->peer, rd.errstr ? rd.errstr : "?");
        kb_req_unref(req);
        kb_conn_refuse(conn, srv->m_rej_malformed,
                       "malformed v%d request header (%s v%d, correlation id %d)", hv, range.name,
                       ver, corr);
        return;
    }
    req->ctx.conn_id = conn->id;
    req->ctx.listener = conn->listener;
    req->ctx.peer = conn->peer;
    req->ctx.principal = kb_principal_anonymous;
    req->ctx.api_key = key;
    req->ctx.api_version = ver;
    req->ctx.correlation_id = corr;
    req->ctx.client_id = hdr.ClientId;
    req->ctx.hdr_version = hv;
    req->ctx.resp_hdr_version = kp_response_header_version(key, ver);
    req->ctx.flexible = kp_api_flexible(kp_api_lookup(key), ver);
    kp_reader_init(&req->ctx.body, buf + rd.pos, len - rd.pos);
    req->ctx.arena = &req->arena;
    req->ctx.frame = buf;
    req->ctx.frame_len = len;
    req->ctx.recv_ns = kb_time_mono_ns();

    kb_log_trace("net", "%s: %s v%d correlation id %d client id '%.*s' (%zu bytes)", conn->peer,
                 range.name, ver, corr, hdr.ClientId.len > 0 ? (int)hdr.ClientId.len : 0,
                 hdr.ClientId.len > 0 ? hdr.ClientId.ptr : "", len);

    if (conn->inf_tail)
        conn->inf_tail->next = req;
    else
        conn->inf_head = req;
    conn->inf_tail = req;
    if (!conn->next_dispatch)
        conn->next_dispatch = req;
    conn->n_inflight++;
    atomic_fetch_add(&srv->n_inflight, 1);
    kb_gauge_add(srv->m_inflight, 1);
    kb_conn_dispatch(conn);
}

/* Cut complete frames out of the read buffer. */
static void kb_conn_parse(kb_conn_t *conn)
{
    kb_server_t *srv = conn->srv;
    while (!conn->closed && !conn->fbuf) {
        size_t avail = conn->rlen - conn->rpos;
        const uint8_t *p = conn->rbuf + conn->rpos;
        int32_t size;
        uint8_t *buf;

        if (kb_conn_should_mute(conn)) {
            kb_conn_set_muted(conn, true);
            break;
        }
        if (avail < 4)
            break;
        size = (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                         (uint32_t)p[3]);
        if (size < 0 || size > srv->conf.socket_request_max_bytes) {
            kb_counter_add(srv->m_rej_too_large, 1);
            kb_conn_close(conn, KB_CLOSE_PROTOCOL,
                          "request size %d is larger than socket.request.max.bytes %d (or "
                          "negative)",
                          size, srv->conf.socket_request_max_bytes);
            return;
        }
        if (avail - 4 >= (size_t)size) {
            buf = malloc(size ? (size_t)size : 1);
            if (!buf) {
                kb_conn_close(conn, KB_CLOSE_ERROR, "out of memory for a %d-byte request", size);
                return;
            }
            memcpy(buf, p + 4, (size_t)size);
            conn->rpos += 4 + (size_t)size;
            kb_conn_frame(conn, buf, (size_t)size);
            continue;
        }
        if (4 + (size_t)size <= KB_CONN_RBUF)
            break; /* fits the read buffer: wait for the rest */
        /* Too big for the read buffer: read the rest straight into its own buffer. */
        conn->fbuf = malloc((size_t)size);
        if (!conn->fbuf) {
            kb_conn_close(conn, KB_CLOSE_ERROR, "out of memory for a %d-byte request", size);
            return;
        }
        conn->flen = (size_t)size;
        conn->fgot = avail - 4;
        memcpy(conn->fbuf, p + 4, conn->fgot);
        conn->rpos = conn->rlen;
    }
    if (conn->closed)
        return;
    if (conn->rpos > 0) {
        memmove(conn->rbuf, conn->rbuf + conn->rpos, conn->rlen - conn->rpos);
        conn->rlen -= conn->rpos;
        conn->rpos = 0;
    }
}

static void kb_conn_readable(kb_conn_t *conn)
{
    kb_server_t *srv = conn->srv;
    size_t budget = KB_READ_BUDGET;

    while (!conn->closed && !conn->muted && budget > 0) {
        ssize_t n;
        if (conn->fbuf)
            n = recv(conn->fd, conn->fbuf + conn->fgot, conn->flen - conn->fgot, 0);
        else
            n = recv(conn->fd, conn->rbuf + conn->rlen, KB_CONN_RBUF - conn->rlen, 0);
        if (n == 0) {
            kb_conn_close(conn, KB_CLOSE_PEER, "closed by the client");
            return;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            if (errno == EINTR)
                continue;
            kb_conn_close(conn, KB_CLOSE_PEER, "read: %s", strerror(errno));
            return;
        }
        budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
        kb_counter_add(srv->m_bytes_in, (uint64_t)n);
        conn->last_active_ms = kb_time_mono_ms();
        if (conn->fbuf) {
            conn->fgot += (size_t)n;
            if (conn->fgot == conn->flen) {
                uint8_t *buf = conn->fbuf;
                conn->fbuf = NULL;
                kb_conn_frame(conn, buf, conn->flen);
                kb_conn_parse(conn); /* mute if needed */
            }
        } else {
            conn->rlen += (size_t)n;
            kb_conn_parse(conn);
        }
    }
}

/* Move the responses that are next in order to the output queue. */
static void kb_conn_flush_ready(kb_conn_t *conn)
{
    kb_server_t *srv = conn->srv;
    kb_req_t *req;
    int64_t now_ns = kb_time_mono_ns();

    while (!conn->closed && (req = conn->inf_head) != NULL && req->ready) {
        kb_api_metrics_t *am;
        uint64_t resp_bytes = 0;
        conn->inf_head = req->next;
        if (!conn->inf_head)
            conn->inf_tail = NULL;
        req->next = NULL;
        conn->n_inflight--;
        atomic_fetch_sub(&srv->n_inflight, 1);
        kb_gauge_add(srv->m_inflight, -1);

        if (req->close_conn) {
            int16_t key = req->ctx.api_key, ver = req->ctx.api_version;
            int32_t corr = req->ctx.correlation_id;
            kb_req_unref(req);
            kb_counter_add(srv->m_rej_malformed, 1);
            kb_conn_close(conn, KB_CLOSE_PROTOCOL,
                          "the %s v%d handler refused the request (correlation id %d)",
                          kb_server_api_name(key), ver, corr);
            return;
        }
        if (req->resp) {
            kb_resp_t *resp = req->resp;
            size_t hlen = req->ctx.resp_hdr_version >= 1 ? 5 : 4;
            kb_seg_t *h;
            uint64_t total = (uint64_t)hlen + resp->len;
            uint32_t corr = (uint32_t)req->ctx.correlation_id;

            if (total > INT32_MAX) {
                kb_req_unref(req);
                kb_conn_close(conn, KB_CLOSE_ERROR, "response of %llu bytes is too large",
                              (unsigned long long)total);
                return;
            }
            h = calloc(1, sizeof(*h));
            if (h)
                h->owned = malloc(4 + hlen);
            if (!h || !h->owned) {
                free(h);
                kb_req_unref(req);
                kb_conn_close(conn, KB_CLOSE_ERROR, "out of memory");
                return;
            }
            h->kind = KB_SEG_MEM;
            h->fd = -1;
            h->owned[0] = (uint8_t)(total >> 24);
            h->owned[1] = (uint8_t)(total >> 16);
            h->owned[2] = (uint8_t)(total >> 8);
            h->owned[3] = (uint8_t)total;
            h->owned[4] = (uint8_t)(corr >> 24);
            h->owned[5] = (uint8_t)(corr >> 16);
            h->owned[6] = (uint8_t)(corr >> 8);
            h->owned[7] = (uint8_t)corr;
            if (hlen == 5)
                h->owned[8] = 0; /* no tagged fields */
            h->ptr = h->owned;
            h->len = 4 + hlen;
            h->next = resp->head;
            if (conn->out_tail)
                conn->out_tail->next = h;
            else
                conn->out_head = h;
            conn->out_tail = resp->tail ? resp->tail : h;
            conn->out_bytes += 4 + total;
            atomic_fetch_add(&srv->n_out_bytes, (int64_t)(4 + total));
            resp_bytes = 4 + total;
            if (req->ctx.replica_fetch)
                kb_counter_add(srv->m_replica_fetch_bytes, resp_bytes);
            resp->head = resp->tail = NULL;
            kb_resp_free(resp);
            req->resp = NULL;
        }
        am = kb_server_api_metrics(srv, req->ctx.api_key);
        if (am) {
            kb_counter_add(atomic_load_explicit(&am->requests, memory_order_acquire), 1);
            if (resp_bytes > 0)
                kb_counter_add(atomic_load_explicit(&am->resp_bytes, memory_order_acquire),
                               resp_bytes);
            kb_counter_add(atomic_load_explicit(&am->bytes, memory_order_acquire),
                           (uint64_t)req->len);
            kb_histo_observe(atomic_load_explicit(&am->latency, memory_order_acquire),
                             (double)(now_ns - req->ctx.recv_ns) / 1e9);
        }
        kb_req_unref(req);
    }
    if (conn->closed)
        return;
    if (conn->out_head)
        kb_conn_write(conn);
    if (!conn->closed && conn->muted && !kb_conn_should_mute(conn)) {
        kb_conn_set_muted(conn, false);
        kb_conn_parse(conn); /* frames that arrived while muted */
    }
}

/* Write what the output queue holds until the socket is full. */
static void kb_conn_write(kb_conn_t *conn)
{
    kb_server_t *srv = conn->srv;

    while (!conn->closed && conn->out_head) {
        kb_seg_t *seg = conn->out_head;
        ssize_t n;

        if (seg->len == 0) {
            conn->out_head = seg->next;
            if (!conn->out_head)
                conn->out_tail = NULL;
            kb_seg_free(seg);
            continue;
        }
        if (seg->kind == KB_SEG_FILE) {
            off_t off = seg->off;
            size_t chunk = seg->len > (1u << 30) ? (1u << 30) : seg->len;
            n = sendfile(conn->fd, seg->fd, &off, chunk);
            if (n < 0 && (errno == EINVAL || errno == ENOSYS)) {
                /* Not sendfile-able (e.g. a pipe): copy through a small buffer. */
                uint8_t tmp[64 * 1024];
                ssize_t r =
                    pread(seg->fd, tmp, chunk < sizeof(tmp) ? chunk : sizeof(tmp), seg->off);
                if (r <= 0) {
                    kb_conn_close(conn, KB_CLOSE_ERROR, "reading a response file: %s",
                                  r == 0 ? "file shorter than the response" : strerror(errno));
                    return;
                }
                n = send(conn->fd, tmp, (size_t)r, MSG_NOSIGNAL);
            } else if (n == 0) {
                kb_conn_close(conn, KB_CLOSE_ERROR, "response file shorter than its range");
                return;
            }
        } else {
            struct iovec iov[KB_IOV_MAX];
            struct msghdr msg;
            int cnt = 0;
            for (kb_seg_t *s = seg; s && s->kind == KB_SEG_MEM && cnt < KB_IOV_MAX; s = s->next) {
                if (s->len == 0)
                    continue;
                iov[cnt].iov_base = (void *)(uintptr_t)s->ptr;
                iov[cnt].iov_len = s->len;
                cnt++;
            }
            memset(&msg, 0, sizeof(msg));
            msg.msg_iov = iov;
            msg.msg_iovlen = (size_t)cnt;
            n = sendmsg(conn->fd, &msg, MSG_NOSIGNAL);
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (!conn->want_out) {
                    conn->want_out = true;
                    kb_conn_epoll_update(conn);
                }
                return;
            }
            if (errno == EINTR)
                continue;
            kb_conn_close(conn, KB_CLOSE_PEER, "write: %s", strerror(errno));
            return;
        }
        kb_counter_add(srv->m_bytes_out, (uint64_t)n);
        conn->out_bytes -= (size_t)n;
        atomic_fetch_sub(&srv->n_out_bytes, n);
        conn->last_active_ms = kb_time_mono_ms();
        /* Consume n bytes from the front of the queue. */
        size_t left = (size_t)n;
        while (left > 0 && conn->out_head) {
            kb_seg_t *s = conn->out_head;
            size_t k = left < s->len ? left : s->len;
            if (s->kind == KB_SEG_FILE)
                s->off += (off_t)k;
            else
                s->ptr += k;
            s->len -= k;
            left -= k;
            if (s->len == 0) {
                conn->out_head = s->next;
                if (!conn->out_head)
                    conn->out_tail = NULL;
                kb_seg_free(s);
            }
        }
    }
    if (!conn->closed && conn->want_out && !conn->out_head) {
        conn->want_out = false;
        kb_conn_epoll_update(conn);
    }
}

/* ------------------------------------------------------------------ network threads */

static void kb_io_touch(kb_io_t *io, kb_conn_t *conn, kb_conn_t **touched)
{
    (void)io;
    if (conn->touched)
        return;
    conn->touched = true;
    conn->work_next = *touched;
    *touched = conn;
}

static void kb_io_add_conn(kb_io_t *io, kb_conn_t *conn)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = conn};
    conn->io = io;
    conn->rbuf = malloc(KB_CONN_RBUF);
    conn->last_active_ms = kb_time_mono_ms();
    conn->next = io->conns;
    if (io->conns)
        io->conns->prev = conn;
    io->conns = conn;
    kb_gauge_add(io->srv->m_conns, 1);
    if (!conn->rbuf || epoll_ctl(io->epfd, EPOLL_CTL_ADD, conn->fd, &ev) != 0) {
        kb_conn_close(conn, KB_CLOSE_ERROR, "cannot register the connection: %s",
                      conn->rbuf ? strerror(errno) : "out of memory");
        return;
    }
    kb_log_debug("net", "connection %llu from %s on %s", (unsigned long long)conn->id, conn->peer,
                 conn->listener);
    if (atomic_load(&io->srv->phase) >= KB_PH_DRAIN)
        kb_conn_close(conn, KB_CLOSE_SHUTDOWN, "server shutting down");
}

/* Take new connections and completion events from other threads and act on them. */
static void kb_io_process_queues(kb_io_t *io)
{
    kb_conn_t *newc, *touched = NULL;
    kb_ev_t *ev;

    pthread_mutex_lock(&io->mu);
    newc = io->new_conns;
    io->new_conns = NULL;
    ev = io->ev_head;
    io->ev_head = io->ev_tail = NULL;
    pthread_mutex_unlock(&io->mu);

    while (newc) {
        kb_conn_t *n = newc->work_next;
        newc->work_next = NULL;
        kb_io_add_conn(io, newc);
        newc = n;
    }
    while (ev) {
        kb_ev_t *next = ev->next;
        kb_req_t *req = ev->req;
        kb_conn_t *conn = req->conn;
        if (ev == &req->ev_exec) {
            conn->n_exec--;
            if (!(req->api_flags & KB_API_CONCURRENT))
                conn->n_exec_serial--;
            if (req->exec_ready)
                req->ready = true;
        } else {
            req->ready = true;
        }
        if (!conn->closed)
            kb_io_touch(io, conn, &touched);
        kb_req_unref(req); /* the event's reference; the in-flight list still holds one */
        ev = next;
    }
    while (touched) {
        kb_conn_t *conn = touched;
        touched = conn->work_next;
        conn->work_next = NULL;
        conn->touched = false;
        if (conn->closed) {
            /* closed while on this list: kb_conn_close() left the dead-list insertion to us */
            conn->work_next = io->dead;
            io->dead = conn;
            continue;
        }
        /* Not on any list now, so a close below puts it on the dead list itself. */
        kb_conn_dispatch(conn);
        kb_conn_flush_ready(conn);
    }
}

static void kb_io_drop_dead(kb_io_t *io)
{
    while (io->dead) {
        kb_conn_t *conn = io->dead;
        io->dead = conn->work_next;
        kb_conn_unref(conn);
    }
}

static void kb_io_sweep_idle(kb_io_t *io, int64_t now)
{
    int64_t idle = io->srv->conf.connections_max_idle_ms;
    if (idle < 0 || now - io->last_sweep_ms < 1000)
        return;
    io->last_sweep_ms = now;
    for (kb_conn_t *conn = io->conns, *n; conn; conn = n) {
        n = conn->next;
        if (conn->n_inflight == 0 && !conn->out_head && now - conn->last_active_ms > idle)
            kb_conn_close(conn, KB_CLOSE_IDLE, "idle for more than %lld ms", (long long)idle);
    }
}

static void kb_io_phase(kb_io_t *io)
{
    kb_server_t *srv = io->srv;
    int phase = atomic_load(&srv->phase);

    if (phase >= KB_PH_DRAIN && io->phase_done < KB_PH_DRAIN) {
        io->phase_done = KB_PH_DRAIN;
        for (kb_conn_t *conn = io->conns; conn; conn = conn->next)
            kb_conn_set_muted(conn, true);
    }
    if (phase >= KB_PH_CLOSE && io->phase_done < KB_PH_CLOSE) {
        io->phase_done = KB_PH_CLOSE;
        while (io->conns)
            kb_conn_close(io->conns, KB_CLOSE_SHUTDOWN, "server shutting down");
        atomic_fetch_add(&srv->n_io_closed, 1);
        kb_server_signal_main(srv);
    }
    if (phase == KB_PH_DRAIN && atomic_load(&srv->n_inflight) == 0 &&
        atomic_load(&srv->n_out_bytes) == 0)
        kb_server_signal_main(srv);
}

static void *kb_io_main(void *arg)
{
    kb_io_t *io = arg;
    struct epoll_event evs[KB_IO_EVENTS];

    for (;;) {
        int n = epoll_wait(io->epfd, evs, KB_IO_EVENTS, 1000);
        if (n < 0 && errno != EINTR) {
            kb_log_error("net", "epoll_wait: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            kb_conn_t *conn = evs[i].data.ptr;
            if (!conn) {
                uint64_t v;
                if (read(io->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                    kb_log_debug("net", "eventfd read: %s", strerror(errno));
                atomic_store(&io->wake_pending, 0);
                continue;
            }
            if (conn->closed)
                continue;
            if (evs[i].events & (EPOLLERR | EPOLLHUP)) {
                kb_conn_close(conn, KB_CLOSE_PEER, "connection reset or hung up");
                continue;
            }
            if (evs[i].events & EPOLLIN)
                kb_conn_readable(conn);
            if (!conn->closed && (evs[i].events & EPOLLRDHUP) && conn->muted) {
                /* Not reading, so the end of stream cannot be seen by recv(). */
                kb_conn_close(conn, KB_CLOSE_PEER, "closed by the client (while not read)");
                continue;
            }
            if (!conn->closed && (evs[i].events & EPOLLOUT))
                kb_conn_write(conn);
            if (!conn->closed && !conn->out_head && conn->muted && !kb_conn_should_mute(conn)) {
                kb_conn_set_muted(conn, false);
                kb_conn_parse(conn);
            }
        }
        kb_io_process_queues(io);
        kb_io_phase(io);
        kb_io_sweep_idle(io, kb_time_mono_ms());
        kb_io_drop_dead(io);
        if (io->phase_done >= KB_PH_CLOSE && atomic_load(&io->srv->phase) == KB_PH_EXIT) {
            /* The handler threads have been joined: no event can arrive any more. */
            kb_io_process_queues(io);
            kb_io_drop_dead(io);
            break;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------ acceptor */

static void kb_acceptor_accept(kb_server_t *srv, kb_lst_t *l, int64_t *backoff_until)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t slen = sizeof(ss);
        int one = 1, fd;
        kb_conn_t *conn;
        kb_io_t *io;

        fd = accept4(l->fd, (struct sockaddr *)&ss, &slen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EINTR)
                return;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                kb_log_warn("net", "accept on %s: %s; pausing accepts for %d ms", l->name,
                            strerror(errno), KB_ACCEPT_BACKOFF_MS);
                *backoff_until = kb_time_mono_ms() + KB_ACCEPT_BACKOFF_MS;
                return;
            }
            kb_log_error("net", "accept on %s: %s", l->name, strerror(errno));
            return;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        if (srv->conf.socket_send_buffer_bytes > 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &srv->conf.socket_send_buffer_bytes, sizeof(int));
        if (srv->conf.socket_receive_buffer_bytes > 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &srv->conf.socket_receive_buffer_bytes,
                       sizeof(int));
        conn = calloc(1, sizeof(*conn));
        if (!conn) {
            close(fd);
            continue;
        }
        atomic_init(&conn->refcnt, 1);
        kb_netrec_init(&conn->rec);
        conn->fd = fd;
        conn->srv = srv;
        conn->listener = l->name;
        conn->id = atomic_fetch_add(&srv->next_conn_id, 1) + 1;
        kb_sock_addr_str((struct sockaddr *)&ss, conn->peer, sizeof(conn->peer));
        kb_counter_add(srv->m_accepted, 1);
        io = &srv->io[srv->rr++ % (unsigned)srv->nio];
        pthread_mutex_lock(&io->mu);
        conn->work_next = io->new_conns;
        io->new_conns = conn;
        pthread_mutex_unlock(&io->mu);
        kb_io_wake(io);
    }
}

static void kb_acceptor_enable(kb_server_t *srv, bool on)
{
    for (size_t i = 0; i < srv->nlst; i++) {
        struct epoll_event ev = {.events = on ? (uint32_t)EPOLLIN : 0u, .data.u64 = i};
        epoll_ctl(srv->acc_epfd, EPOLL_CTL_MOD, srv->lst[i].fd, &ev);
    }
}

static void *kb_acceptor_main(void *arg)
{
    kb_server_t *srv = arg;
    struct epoll_event evs[16];
    int64_t backoff_until = 0;
    bool paused = false;

    while (atomic_load(&srv->phase) == KB_PH_RUN) {
        int timeout = paused ? KB_ACCEPT_BACKOFF_MS : -1;
        int n = epoll_wait(srv->acc_epfd, evs, 16, timeout);
        if (n < 0 && errno != EINTR) {
            kb_log_error("net", "acceptor epoll_wait: %s", strerror(errno));
            break;
        }
        if (paused && kb_time_mono_ms() >= backoff_until) {
            kb_acceptor_enable(srv, true);
            paused = false;
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 == UINT64_MAX)
                continue; /* woken to stop */
            kb_acceptor_accept(srv, &srv->lst[evs[i].data.u64], &backoff_until);
        }
        if (!paused && backoff_until > kb_time_mono_ms()) {
            kb_acceptor_enable(srv, false);
            paused = true;
        }
    }
    for (size_t i = 0; i < srv->nlst; i++) {
        close(srv->lst[i].fd);
        srv->lst[i].fd = -1;
    }
    return NULL;
}

/* ------------------------------------------------------------------ life cycle */

void kb_server_conf_defaults(kb_server_conf_t *conf)
{
    memset(conf, 0, sizeof(*conf));
    conf->num_network_threads = 3;
    conf->num_io_threads = 8;
    conf->queued_max_requests = 500;
    conf->socket_request_max_bytes = 104857600;
    conf->max_inflight_per_conn = 32;
    conf->connections_max_idle_ms = 600000;
    conf->socket_send_buffer_bytes = 102400;
    conf->socket_receive_buffer_bytes = 102400;
    conf->listen_backlog = 50;
}

kb_server_t *kb_server_new(const kb_server_conf_t *conf, kb_api_registry_t *reg,
                           kb_metrics_t *metrics, char *errstr, size_t errstr_size)
{
    kb_server_t *srv;
    pthread_condattr_t ca;

    if (conf->listener_cnt == 0 || conf->num_network_threads < 1 || conf->num_io_threads < 1 ||
        conf->queued_max_requests < 1 || conf->max_inflight_per_conn < 1) {
        snprintf(errstr, errstr_size, "invalid server configuration");
        return NULL;
    }
    srv = calloc(1, sizeof(*srv));
    if (!srv)
        goto nomem;
    srv->conf = *conf;
    srv->conf.listeners = NULL;
    srv->reg = reg;
    srv->metrics = metrics;
    srv->acc_epfd = -1;
    srv->acc_wake = -1;
    pthread_mutex_init(&srv->q_mu, NULL);
    pthread_cond_init(&srv->q_nonempty, NULL);
    pthread_cond_init(&srv->q_nonfull, NULL);
    pthread_mutex_init(&srv->st_mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->st_cv, &ca);
    pthread_condattr_destroy(&ca);
    srv->q_cap = (size_t)conf->queued_max_requests;
    srv->q = calloc(srv->q_cap, sizeof(*srv->q));
    srv->lst = calloc(conf->listener_cnt, sizeof(*srv->lst));
    if (!srv->q || !srv->lst)
        goto nomem_srv;
    for (size_t i = 0; i < conf->listener_cnt; i++) {
        const kb_net_listener_t *cl = &conf->listeners[i];
        kb_lst_t *l = &srv->lst[i];
        l->fd = -1;
        l->name = strdup(cl->name);
        l->host = strdup(cl->host ? cl->host : "");
        srv->nlst++;
        if (!l->name || !l->host)
            goto nomem_srv;
        l->fd = kb_sock_listen(l->host, cl->port, conf->listen_backlog, errstr, errstr_size);
        if (l->fd < 0) {
            char tmp[512];
            snprintf(tmp, sizeof(tmp), "listener %s: %s", l->name, errstr);
            snprintf(errstr, errstr_size, "%s", tmp);
            kb_server_free(srv);
            return NULL;
        }
        l->port = kb_sock_local_port(l->fd);
    }
    kb_server_metrics_init(srv);
    srv->rec_dir = kb_netrec_dir_from_env(&srv->rec_limit);
    if (srv->rec_dir)
        kb_log_info("net",
                    "recording every request frame under %s (KM_RECORD_DIR, at most %llu "
                    "bytes per connection)",
                    srv->rec_dir, (unsigned long long)srv->rec_limit);
    return srv;
nomem_srv:
    kb_server_free(srv);
nomem:
    snprintf(errstr, errstr_size, "out of memory");
    return NULL;
}

int kb_server_listener_port(const kb_server_t *srv, const char *name)
{
    for (size_t i = 0; i < srv->nlst; i++)
        if (strcasecmp(srv->lst[i].name, name) == 0)
            return srv->lst[i].port;
    return -1;
}

kb_api_registry_t *kb_server_registry(kb_server_t *srv)
{
    return srv->reg;
}

int kb_server_start(kb_server_t *srv)
{
    struct epoll_event ev;
    int nio = srv->conf.num_network_threads;

    if (srv->started)
        return KB_E_STATE;
    srv->acc_epfd = epoll_create1(EPOLL_CLOEXEC);
    srv->acc_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (srv->acc_epfd < 0 || srv->acc_wake < 0)
        return KB_E_IO;
    for (size_t i = 0; i < srv->nlst; i++) {
        ev.events = EPOLLIN;
        ev.data.u64 = i;
        if (epoll_ctl(srv->acc_epfd, EPOLL_CTL_ADD, srv->lst[i].fd, &ev) != 0)
            return KB_E_IO;
    }
    ev.events = EPOLLIN;
    ev.data.u64 = UINT64_MAX;
    if (epoll_ctl(srv->acc_epfd, EPOLL_CTL_ADD, srv->acc_wake, &ev) != 0)
        return KB_E_IO;

    srv->io = calloc((size_t)nio, sizeof(*srv->io));
    srv->workers = calloc((size_t)srv->conf.num_io_threads, sizeof(*srv->workers));
    if (!srv->io || !srv->workers)
        return KB_E_NOMEM;
    for (int i = 0; i < nio; i++) {
        kb_io_t *io = &srv->io[i];
        io->srv = srv;
        io->idx = i;
        io->epfd = epoll_create1(EPOLL_CLOEXEC);
        io->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        pthread_mutex_init(&io->mu, NULL);
        if (io->epfd < 0 || io->wake_fd < 0)
            return KB_E_IO;
        ev.events = EPOLLIN;
        ev.data.ptr = NULL;
        if (epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->wake_fd, &ev) != 0)
            return KB_E_IO;
    }
    /* From here on a failure would leave threads running; treat thread creation failure as
     * fatal for the caller (it exits). */
    srv->started = true;
    for (int i = 0; i < srv->conf.num_io_threads; i++) {
        if (pthread_create(&srv->workers[i], NULL, kb_worker_main, srv) != 0)
            return KB_E_NOMEM;
        srv->nworkers++;
    }
    for (int i = 0; i < nio; i++) {
        if (pthread_create(&srv->io[i].thr, NULL, kb_io_main, &srv->io[i]) != 0)
            return KB_E_NOMEM;
        srv->nio++;
    }
    if (pthread_create(&srv->acc_thr, NULL, kb_acceptor_main, srv) != 0)
        return KB_E_NOMEM;
    for (size_t i = 0; i < srv->nlst; i++)
        kb_log_info("net", "listening on %s://%s:%d", srv->lst[i].name,
                    srv->lst[i].host[0] ? srv->lst[i].host : "*", srv->lst[i].port);
    return 0;
}

static void kb_server_wake_io(kb_server_t *srv)
{
    for (int i = 0; i < srv->nio; i++)
        kb_io_wake(&srv->io[i]);
}

int kb_server_stop(kb_server_t *srv, int64_t timeout_ms)
{
    uint64_t one = 1;
    struct timespec dl;
    int r = 0;

    if (!srv->started || atomic_load(&srv->phase) != KB_PH_RUN)
        return 0;
    /* 1. Stop accepting and reading. */
    atomic_store(&srv->phase, KB_PH_DRAIN);
    if (write(srv->acc_wake, &one, sizeof(one)) < 0)
        kb_log_warn("net", "cannot wake the acceptor: %s", strerror(errno));
    pthread_join(srv->acc_thr, NULL);
    kb_server_wake_io(srv);

    /* 2. Let what was read finish and be written. */
    dl = kb_time_mono_deadline(timeout_ms);
    pthread_mutex_lock(&srv->st_mu);
    while (atomic_load(&srv->n_inflight) > 0 || atomic_load(&srv->n_out_bytes) > 0) {
        if (pthread_cond_timedwait(&srv->st_cv, &srv->st_mu, &dl) == ETIMEDOUT) {
            r = KB_E_TIMEOUT;
            break;
        }
    }
    pthread_mutex_unlock(&srv->st_mu);
    if (r)
        kb_log_warn("net",
                    "shutdown: %lld request(s) and %lld response byte(s) still pending after "
                    "%lld ms; closing connections",
                    (long long)atomic_load(&srv->n_inflight),
                    (long long)atomic_load(&srv->n_out_bytes), (long long)timeout_ms);

    /* 3. Close every connection (cancelling what is left). */
    atomic_store(&srv->phase, KB_PH_CLOSE);
    kb_server_wake_io(srv);
    pthread_mutex_lock(&srv->st_mu);
    while (atomic_load(&srv->n_io_closed) < srv->nio)
        pthread_cond_wait(&srv->st_cv, &srv->st_mu);
    pthread_mutex_unlock(&srv->st_mu);

    /* 4. Handler threads finish the call they are in; queued requests are cancelled. */
    kb_rq_close(srv);
    for (int i = 0; i < srv->nworkers; i++)
        pthread_join(srv->workers[i], NULL);

    /* 5. Network threads take the last events and exit. */
    atomic_store(&srv->phase, KB_PH_EXIT);
    kb_server_wake_io(srv);
    for (int i = 0; i < srv->nio; i++)
        pthread_join(srv->io[i].thr, NULL);

    if (atomic_load(&srv->n_live_reqs) > 0)
        kb_log_warn("net",
                    "shutdown: %lld cancelled deferred request(s) not yet released by "
                    "their owners",
                    (long long)atomic_load(&srv->n_live_reqs));
    return r;
}

void kb_server_free(kb_server_t *srv)
{
    if (!srv)
        return;
    if (srv->started && atomic_load(&srv->phase) != KB_PH_EXIT)
        kb_server_stop(srv, 0);
    for (size_t i = 0; i < srv->nlst; i++) {
        if (srv->lst[i].fd >= 0)
            close(srv->lst[i].fd);
        free(srv->lst[i].name);
        free(srv->lst[i].host);
    }
    free(srv->lst);
    if (srv->io) {
        for (int i = 0; i < srv->conf.num_network_threads; i++) {
            kb_io_t *io = &srv->io[i];
            if (io->epfd > 0)
                close(io->epfd);
            if (io->wake_fd > 0)
                close(io->wake_fd);
            if (io->srv)
                pthread_mutex_destroy(&io->mu);
        }
    }
    free(srv->io);
    free(srv->workers);
    if (srv->acc_epfd >= 0)
        close(srv->acc_epfd);
    if (srv->acc_wake >= 0)
        close(srv->acc_wake);
    free(srv->q);
    free(srv->rec_dir);
    pthread_mutex_destroy(&srv->q_mu);
    pthread_cond_destroy(&srv->q_nonempty);
    pthread_cond_destroy(&srv->q_nonfull);
    pthread_mutex_destroy(&srv->st_mu);
    pthread_cond_destroy(&srv->st_cv);
    free(srv);
}
