/*
 * kc_client.c -- the client object: options, nodes and bootstrap addresses, request
 * submission and cancellation, the poll loop that drives I/O and runs callbacks, the resolver
 * thread, metrics, and the Metadata refresh helper. Connection work is in kc_conn.c.
 */
#include "kc_client_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "kp_arena.h"
#include "kp_msgs.h"

#define KC_WAKE_KEY UINT64_MAX

/* A stale or foreign pointer fails clearly instead of corrupting memory (STYLE.md point 16). */
static bool kc_client_ok(const kc_client_t *c)
{
    return c && c->magic == KC_CLIENT_MAGIC;
}

/* ---- errors ------------------------------------------------------------------------------ */

const char *kc_err_str(int err)
{
    switch (err) {
#define KC_ERR_STR_(name, val, retr, desc)                                                         \
    case val:                                                                                      \
        return desc;
        KC_ERRNO_MAP(KC_ERR_STR_)
#undef KC_ERR_STR_
    }
    return "unknown error";
}

const char *kc_err_name(int err)
{
    switch (err) {
#define KC_ERR_NAME_(name, val, retr, desc)                                                        \
    case val:                                                                                      \
        return #name;
        KC_ERRNO_MAP(KC_ERR_NAME_)
#undef KC_ERR_NAME_
    }
    return "UNKNOWN";
}

bool kc_err_retriable(int err)
{
    switch (err) {
#define KC_ERR_RETR_(name, val, retr, desc)                                                        \
    case val:                                                                                      \
        return retr;
        KC_ERRNO_MAP(KC_ERR_RETR_)
#undef KC_ERR_RETR_
    }
    return false;
}

/* ---- small helpers ----------------------------------------------------------------------- */

int64_t kc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void kc_log(kc_client_t *c, int level, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    if (!c->o.log_cb || level > c->o.log_level)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    c->o.log_cb(c->o.log_opaque, level, buf);
}

void kc_reqq_push(kc_reqq_t *q, kc_req_t *req)
{
    req->next = NULL;
    if (q->tail)
        q->tail->next = req;
    else
        q->head = req;
    q->tail = req;
    q->cnt++;
}

kc_req_t *kc_reqq_pop(kc_reqq_t *q)
{
    kc_req_t *req = q->head;
    if (!req)
        return NULL;
    q->head = req->next;
    if (!q->head)
        q->tail = NULL;
    q->cnt--;
    req->next = NULL;
    return req;
}

static void kc_req_free(kc_req_t *req)
{
    free(req->raw);
    free(req->resp);
    free(req);
}

void kc_req_unwire(kc_req_t *req)
{
    req->in_wire = false;
    if (req->cb_done)
        kc_req_free(req);
}

void kc_req_finish(kc_client_t *c, kc_req_t *req, int err, uint8_t *resp, size_t off, size_t len)
{
    req->done = true;
    req->err = err;
    req->resp = resp;
    req->resp_off = off;
    req->resp_len = len;
    if (err != KC_E_OK)
        c->m.errors++;
    if (err == KC_E_TIMED_OUT)
        c->m.timeouts++;
    req->dnext = NULL;
    if (c->done_tail)
        c->done_tail->dnext = req;
    else
        c->done_head = req;
    c->done_tail = req;
}

kc_node_t *kc_node_find(kc_client_t *c, int32_t id)
{
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i]->id == id)
            return c->nodes[i];
    return NULL;
}

static void kc_client_wake(kc_client_t *c)
{
    uint64_t one = 1;
    ssize_t r = write(c->evfd, &one, sizeof(one));
    (void)r; /* EAGAIN: the counter is already non-zero, which is all we need */
}

void kc_client_wakeup(kc_client_t *client)
{
    if (kc_client_ok(client))
        kc_client_wake(client);
}

/* ---- options and lifecycle ---------------------------------------------------------------- */

void kc_opts_init(kc_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->struct_size = sizeof(*o);
    o->client_id = "kc";
    o->connect_timeout_ms = 10000;
    o->request_timeout_ms = 30000;
    o->reconnect_backoff_ms = 100;
    o->reconnect_backoff_max_ms = 10000;
    o->max_in_flight = 100;
    o->max_response_size = 100 << 20;
    o->log_level = KC_LOG_INFO;
    o->software_name = "kmirror-kc";
    o->software_version = "1.0";
    o->handshake_version = KC_APIV_MAX;
}

/* ApiVersions v3+ software names must match [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])? or
 * brokers refuse the handshake with INVALID_REQUEST: check them up front. */
static bool kc_software_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 255)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        bool alnum =
            (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (!alnum && ((ch != '-' && ch != '.') || i == 0 || i == n - 1))
            return false;
    }
    return true;
}

static void kc_errstr(char *errstr, size_t size, const char *msg)
{
    if (errstr && size)
        snprintf(errstr, size, "%s", msg);
}

kc_client_t *kc_client_new(const kc_opts_t *opts, char *errstr, size_t errstr_size)
{
    kc_opts_t o, def;
    kc_client_t *c;
    struct epoll_event ev = {.events = EPOLLIN};

    kc_opts_init(&def);
    o = def;
    if (opts) {
        size_t n = opts->struct_size < sizeof(o) ? opts->struct_size : sizeof(o);
        if (n < sizeof(uint32_t)) {
            kc_errstr(errstr, errstr_size, "kc_opts_t.struct_size is not set");
            return NULL;
        }
        memcpy(&o, opts, n);
        o.struct_size = sizeof(o);
    }
#define KC_DEF_(m)                                                                                 \
    if (o.m <= 0)                                                                                  \
    o.m = def.m
    KC_DEF_(connect_timeout_ms);
    KC_DEF_(request_timeout_ms);
    KC_DEF_(reconnect_backoff_ms);
    KC_DEF_(reconnect_backoff_max_ms);
    KC_DEF_(max_in_flight);
    KC_DEF_(max_response_size);
    KC_DEF_(log_level);
#undef KC_DEF_
    if (o.handshake_version < 0 || o.handshake_version > INT16_MAX)
        o.handshake_version = def.handshake_version;
    if (o.max_response_size < 8) {
        kc_errstr(errstr, errstr_size, "max_response_size must be at least 8");
        return NULL;
    }
    if (o.reconnect_backoff_max_ms < o.reconnect_backoff_ms)
        o.reconnect_backoff_max_ms = o.reconnect_backoff_ms;
    if (!o.client_id)
        o.client_id = def.client_id;
    if (!o.software_name)
        o.software_name = def.software_name;
    if (!o.software_version)
        o.software_version = def.software_version;
    if (!kc_software_name_ok(o.software_name) || !kc_software_name_ok(o.software_version)) {
        kc_errstr(errstr, errstr_size,
                  "software_name/software_version: letters, digits, '-' and '.' only, "
                  "starting and ending with a letter or digit");
        return NULL;
    }

    c = calloc(1, sizeof(*c));
    if (!c) {
        kc_errstr(errstr, errstr_size, "out of memory");
        return NULL;
    }
    c->o = o;
    c->epfd = c->evfd = -1;
    c->client_id = strdup(o.client_id);
    c->sw_name = strdup(o.software_name);
    c->sw_ver = strdup(o.software_version);
    if (!c->client_id || !c->sw_name || !c->sw_ver) {
        kc_errstr(errstr, errstr_size, "out of memory");
        goto free_strings;
    }
    c->o.client_id = c->client_id;
    c->o.software_name = c->sw_name;
    c->o.software_version = c->sw_ver;
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    c->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ev.data.u64 = KC_WAKE_KEY;
    if (c->epfd < 0 || c->evfd < 0 || epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->evfd, &ev) != 0) {
        kc_errstr(errstr, errstr_size, strerror(errno));
        goto close_fds;
    }
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        kc_errstr(errstr, errstr_size, "pthread_mutex_init failed");
        goto close_fds;
    }
    if (pthread_cond_init(&c->rcond, NULL) != 0) {
        kc_errstr(errstr, errstr_size, "pthread_cond_init failed");
        goto destroy_lock;
    }
    c->rng = (uint64_t)kc_now_ms() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)c;
    if (!c->rng)
        c->rng = 1;
    c->next_id = 1;
    c->m.struct_size = sizeof(c->m);
    c->magic = KC_CLIENT_MAGIC;
    return c;

destroy_lock:
    pthread_mutex_destroy(&c->lock);
close_fds:
    if (c->epfd >= 0)
        close(c->epfd);
    if (c->evfd >= 0)
        close(c->evfd);
free_strings:
    free(c->client_id);
    free(c->sw_name);
    free(c->sw_ver);
    free(c);
    return NULL;
}

/* Run the callbacks of a detached done list (lock not held); returns how many ran. */
static int kc_client_run_callbacks(kc_client_t *c, kc_req_t *list)
{
    int n = 0;
    for (kc_req_t *req = list; req; req = req->dnext) {
        const uint8_t *body = req->err == KC_E_OK && req->resp ? req->resp + req->resp_off : NULL;
        size_t len = body ? req->resp_len : 0;
        req->cb(c, req->err, req->ver, body, len, req->opaque);
        n++;
    }
    pthread_mutex_lock(&c->lock);
    for (kc_req_t *req = list, *nx; req; req = nx) {
        nx = req->dnext;
        free(req->resp);
        req->resp = NULL;
        req->cb_done = true;
        if (!req->in_wire)
            kc_req_free(req);
    }
    pthread_mutex_unlock(&c->lock);
    return n;
}

static kc_req_t *kc_client_take_done(kc_client_t *c)
{
    kc_req_t *list = c->done_head;
    c->done_head = c->done_tail = NULL;
    return list;
}

static void kc_node_fail_all(kc_client_t *c, kc_node_t *node, int err)
{
    kc_req_t *req;
    while ((req = kc_reqq_pop(&node->sendq))) {
        c->m.queued--;
        kc_req_finish(c, req, err, NULL, 0, 0);
    }
    if (node->state != KC_CS_DOWN)
        kc_conn_close(c, node, err, err, kc_err_str(err));
}

static void kc_node_free(kc_node_t *node)
{
    kc_conn_free(node);
    free(node->vers);
    free(node->host);
    free(node);
}

void kc_client_destroy(kc_client_t *client)
{
    kc_client_t *c = client;
    kc_req_t *list;
    if (!kc_client_ok(c))
        return;
    pthread_mutex_lock(&c->lock);
    if (c->polling && pthread_equal(c->poll_thread, pthread_self())) {
        /* from a callback: freeing now would pull the client from under kc_client_poll() */
        kc_log(c, KC_LOG_ERROR, "kc_client_destroy() called from a callback: ignored");
        pthread_mutex_unlock(&c->lock);
        return;
    }
    c->stopping = true;
    pthread_cond_broadcast(&c->rcond);
    pthread_mutex_unlock(&c->lock);
    if (c->rthr_started)
        pthread_join(c->rthr, NULL);

    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->nnodes; i++)
        kc_node_fail_all(c, c->nodes[i], KC_E_DESTROYED);
    list = kc_client_take_done(c);
    pthread_mutex_unlock(&c->lock);
    kc_client_run_callbacks(c, list);

    for (size_t i = 0; i < c->nnodes; i++)
        kc_node_free(c->nodes[i]);
    free(c->nodes);
    while (c->rjobs) {
        kc_rjob_t *j = c->rjobs;
        c->rjobs = j->next;
        free(j->host);
        free(j);
    }
    close(c->epfd);
    close(c->evfd);
    pthread_cond_destroy(&c->rcond);
    pthread_mutex_destroy(&c->lock);
    free(c->client_id);
    free(c->sw_name);
    free(c->sw_ver);
    c->magic = 0;
    free(c);
}

/* ---- resolver ----------------------------------------------------------------------------- */

/* Numeric addresses need no lookup; returns true if @p host was one (addresses filled). */
static bool kc_resolve_numeric(kc_node_t *node)
{
    struct sockaddr_in *sin = (struct sockaddr_in *)(void *)&node->addrs[0];
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)(void *)&node->addrs[0];
    memset(&node->addrs[0], 0, sizeof(node->addrs[0]));
    if (inet_pton(AF_INET, node->host, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)node->port);
        node->addrlens[0] = sizeof(*sin);
    } else if (inet_pton(AF_INET6, node->host, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)node->port);
        node->addrlens[0] = sizeof(*sin6);
    } else {
        return false;
    }
    node->naddrs = 1;
    return true;
}

static void *kc_resolve_thread(void *arg)
{
    kc_client_t *c = arg;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        kc_rjob_t *j;
        struct addrinfo hints, *res = NULL;
        char port[16];
        int r;
        kc_node_t *node;
        while (!c->stopping && !c->rjobs)
            pthread_cond_wait(&c->rcond, &c->lock);
        if (c->stopping)
            break;
        j = c->rjobs;
        c->rjobs = j->next;
        pthread_mutex_unlock(&c->lock);

        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_ADDRCONFIG;
        snprintf(port, sizeof(port), "%d", j->port);
        r = getaddrinfo(j->host, port, &hints, &res);

        pthread_mutex_lock(&c->lock);
        node = kc_node_find(c, j->node_id);
        if (node && node->resolve_gen == j->gen && node->state == KC_CS_RESOLVING) {
            node->naddrs = 0;
            for (struct addrinfo *ai = r == 0 ? res : NULL; ai && node->naddrs < KC_MAX_ADDRS;
                 ai = ai->ai_next) {
                if (ai->ai_addrlen > sizeof(node->addrs[0]))
                    continue;
                memcpy(&node->addrs[node->naddrs], ai->ai_addr, ai->ai_addrlen);
                node->addrlens[node->naddrs++] = ai->ai_addrlen;
            }
            node->addr_next = 0;
            node->resolve_done = node->naddrs > 0 ? 1 : -1;
            if (r != 0)
                kc_log(c, KC_LOG_WARN, "node %d: cannot resolve %s: %s", node->id, j->host,
                       gai_strerror(r));
            kc_client_wake(c);
        }
        if (res)
            freeaddrinfo(res);
        free(j->host);
        free(j);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int kc_resolve_start(kc_client_t *c, kc_node_t *node)
{
    kc_rjob_t *j, **pp;
    node->resolve_gen++;
    if (kc_resolve_numeric(node)) {
        node->resolve_done = 1;
        return 0;
    }
    j = calloc(1, sizeof(*j));
    if (!j || !(j->host = strdup(node->host))) {
        free(j);
        return KC_E_NOMEM;
    }
    if (!c->rthr_started) {
        if (pthread_create(&c->rthr, NULL, kc_resolve_thread, c) != 0) {
            free(j->host);
            free(j);
            return KC_E_NOMEM;
        }
        c->rthr_started = true;
    }
    j->node_id = node->id;
    j->gen = node->resolve_gen;
    j->port = node->port;
    for (pp = &c->rjobs; *pp; pp = &(*pp)->next)
        ;
    *pp = j;
    node->resolve_done = 0;
    pthread_cond_signal(&c->rcond);
    return 0;
}

/* ---- nodes -------------------------------------------------------------------------------- */

static void kc_node_name(kc_node_t *node)
{
    snprintf(node->name, sizeof(node->name), strchr(node->host, ':') ? "[%s]:%d" : "%s:%d",
             node->host, node->port);
}

/* Set (creating if needed) node @p id's address; lock held. */
static int kc_node_set_locked(kc_client_t *c, int32_t id, const char *host, int port)
{
    kc_node_t *node = kc_node_find(c, id);
    char *h;
    if (node && node->port == port && strcmp(node->host, host) == 0)
        return 0;
    h = strdup(host);
    if (!h)
        return KC_E_NOMEM;
    if (!node) {
        if (c->nnodes == c->capnodes) {
            size_t cap = c->capnodes ? c->capnodes * 2 : 8;
            kc_node_t **nv = realloc(c->nodes, cap * sizeof(*nv));
            if (!nv) {
                free(h);
                return KC_E_NOMEM;
            }
            c->nodes = nv;
            c->capnodes = cap;
        }
        node = calloc(1, sizeof(*node));
        if (!node) {
            free(h);
            return KC_E_NOMEM;
        }
        node->id = id;
        node->fd = -1;
        node->next_corr = 1;
        kp_writer_init(&node->out);
        c->nodes[c->nnodes++] = node;
        c->m.nodes++;
    } else {
        if (node->state != KC_CS_DOWN)
            kc_conn_close(c, node, KC_E_TRANSPORT, KC_E_TRANSPORT, "node address changed");
        node->backoff_until = 0;
        node->failures = 0;
    }
    free(node->host);
    node->host = h;
    node->port = port;
    node->naddrs = node->addr_next = 0;
    node->resolve_gen++;
    kc_node_name(node);
    kc_log(c, KC_LOG_DEBUG, "node %d is %s", id, node->name);
    return 0;
}

static bool kc_port_ok(int port)
{
    return port > 0 && port <= 65535;
}

int kc_client_node_set(kc_client_t *client, int32_t node_id, const char *host, int port)
{
    int r;
    if (!kc_client_ok(client) || node_id < 0 || !host || !*host || strlen(host) > 255 ||
        !kc_port_ok(port))
        return KC_E_INVALID;
    pthread_mutex_lock(&client->lock);
    r = kc_node_set_locked(client, node_id, host, port);
    pthread_mutex_unlock(&client->lock);
    kc_client_wake(client);
    return r;
}

int kc_client_node_remove(kc_client_t *client, int32_t node_id)
{
    kc_client_t *c = client;
    kc_node_t *node;
    if (!kc_client_ok(c))
        return KC_E_INVALID;
    pthread_mutex_lock(&c->lock);
    node = kc_node_find(c, node_id);
    if (!node) {
        pthread_mutex_unlock(&c->lock);
        return KC_E_NO_NODE;
    }
    kc_node_fail_all(c, node, KC_E_NO_NODE);
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i] == node) {
            c->nodes[i] = c->nodes[--c->nnodes];
            break;
        }
    c->m.nodes--;
    kc_node_free(node);
    pthread_mutex_unlock(&c->lock);
    kc_client_wake(c);
    return 0;
}

/* Parse one "host:port" or "[v6]:port" of length @p n into @p host (size 256) and @p port. */
static bool kc_parse_hostport(const char *s, size_t n, char *host, int *port)
{
    const char *colon;
    size_t hl;
    char *end;
    long p;
    char pbuf[8];
    while (n && (*s == ' ' || *s == '\t')) {
        s++;
        n--;
    }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 0)
        return false;
    if (*s == '[') {
        const char *rb = memchr(s, ']', n);
        if (!rb || rb + 1 >= s + n || rb[1] != ':')
            return false;
        hl = (size_t)(rb - s - 1);
        memcpy(host, s + 1, hl < 256 ? hl : 0);
        colon = rb + 1;
    } else {
        colon = NULL;
        for (size_t i = 0; i < n; i++)
            if (s[i] == ':')
                colon = s + i;
        if (!colon)
            return false;
        hl = (size_t)(colon - s);
        if (memchr(s, ':', hl))
            return false; /* an IPv6 literal needs brackets */
        memcpy(host, s, hl < 256 ? hl : 0);
    }
    if (hl == 0 || hl >= 256)
        return false;
    host[hl] = '\0';
    n -= (size_t)(colon + 1 - s);
    if (n == 0 || n >= sizeof(pbuf))
        return false;
    memcpy(pbuf, colon + 1, n);
    pbuf[n] = '\0';
    errno = 0;
    p = strtol(pbuf, &end, 10);
    if (errno || *end || !kc_port_ok((int)p) || p > 65535)
        return false;
    *port = (int)p;
    return true;
}

int kc_client_add_bootstrap(kc_client_t *client, const char *list)
{
    kc_client_t *c = client;
    char host[256];
    int port, r = 0;
    int32_t cnt = 0;
    if (!kc_client_ok(c) || !list)
        return KC_E_INVALID;
    /* validate everything first so that a bad entry adds nothing */
    for (const char *s = list;;) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (!kc_parse_hostport(s, n, host, &port))
            return KC_E_INVALID;
        cnt++;
        if (!e)
            break;
        s = e + 1;
    }
    pthread_mutex_lock(&c->lock);
    for (const char *s = list; r == 0;) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        kc_parse_hostport(s, n, host, &port);
        r = kc_node_set_locked(c, KC_NODE_BOOTSTRAP(c->nboot), host, port);
        if (r == 0)
            c->nboot++;
        if (!e)
            break;
        s = e + 1;
    }
    pthread_mutex_unlock(&c->lock);
    (void)cnt;
    return r;
}

int kc_client_api_range(kc_client_t *client, int32_t node_id, int16_t api_key, int16_t *min_ver,
                        int16_t *max_ver)
{
    kc_node_t *node;
    int r = KC_E_NO_VERSION;
    if (!kc_client_ok(client) || !min_ver || !max_ver)
        return KC_E_INVALID;
    pthread_mutex_lock(&client->lock);
    node = kc_node_find(client, node_id);
    if (!node)
        r = KC_E_NO_NODE;
    else
        for (uint32_t i = 0; i < node->nvers; i++)
            if (node->vers[i].key == api_key) {
                *min_ver = node->vers[i].min_ver;
                *max_ver = node->vers[i].max_ver;
                r = 0;
                break;
            }
    pthread_mutex_unlock(&client->lock);
    return r;
}

/* ---- requests ----------------------------------------------------------------------------- */

/* KC_NODE_ANY: a ready node, else one connecting, else the idle node with the fewest failed
 * attempts (bootstrap addresses first, in order), so that a dead first bootstrap address does
 * not catch every request. */
static kc_node_t *kc_node_pick(kc_client_t *c)
{
    kc_node_t *best = NULL;
    int64_t best_rank = INT64_MAX;
    for (size_t i = 0; i < c->nnodes; i++) {
        kc_node_t *node = c->nodes[i];
        int64_t rank;
        if (node->state == KC_CS_READY)
            rank = 0;
        else if (node->state != KC_CS_DOWN)
            rank = 1;
        else
            rank = 2 + (int64_t)node->failures * 4 + (node->id < 0 ? 0 : 2);
        /* bootstrap ids count down from -2: earlier entries win ties */
        rank = rank * 65536 + (node->id < 0 ? -2 - node->id : 0);
        if (rank < best_rank) {
            best = node;
            best_rank = rank;
        }
    }
    return best;
}

static int64_t kc_submit(kc_client_t *c, int32_t node_id, kc_req_t *req, int32_t timeout_ms)
{
    kc_node_t *node;
    int64_t id;
    pthread_mutex_lock(&c->lock);
    node = node_id == KC_NODE_ANY ? kc_node_pick(c) : kc_node_find(c, node_id);
    if (!node) {
        pthread_mutex_unlock(&c->lock);
        kc_req_free(req);
        return KC_E_NO_NODE;
    }
    id = c->next_id++;
    req->id = id;
    req->node_id = node->id;
    req->ver = -1;
    req->deadline = kc_now_ms() + (timeout_ms > 0 ? timeout_ms : c->o.request_timeout_ms);
    kc_reqq_push(&node->sendq, req);
    c->m.queued++;
    pthread_mutex_unlock(&c->lock);
    kc_client_wake(c);
    return id;
}

int64_t kc_request(kc_client_t *client, int32_t node_id, int16_t api_key, int16_t min_ver,
                   int16_t max_ver, kc_encode_cb_t *encode, int32_t timeout_ms, unsigned flags,
                   kc_resp_cb_t *cb, void *opaque)
{
    kc_req_t *req;
    if (!kc_client_ok(client) || !encode || !cb || min_ver < 0 || max_ver < min_ver ||
        kp_request_header_version(api_key, min_ver) < 0 || (flags & ~KC_REQ_NO_RESPONSE))
        return KC_E_INVALID;
    req = calloc(1, sizeof(*req));
    if (!req)
        return KC_E_NOMEM;
    req->api_key = api_key;
    req->min_ver = min_ver;
    req->max_ver = max_ver;
    req->encode = encode;
    req->enc_opaque = opaque;
    req->flags = flags;
    req->cb = cb;
    req->opaque = opaque;
    return kc_submit(client, node_id, req, timeout_ms);
}

static int kc_encode_msg(kp_writer_t *wr, int16_t ver, void *opaque)
{
    kc_req_t *req = opaque;
    return kp_msg_encode(req->desc, wr, req->msg, ver);
}

int64_t kc_request_msg(kc_client_t *client, int32_t node_id, const kp_msg_desc_t *req_desc,
                       int16_t max_ver, const void *msg, int32_t timeout_ms, unsigned flags,
                       kc_resp_cb_t *cb, void *opaque)
{
    kc_req_t *req;
    int16_t hi;
    if (!kc_client_ok(client) || !req_desc || req_desc->api_key < 0 || !msg || !cb ||
        (flags & ~KC_REQ_NO_RESPONSE))
        return KC_E_INVALID;
    hi = max_ver >= 0 && max_ver < req_desc->max_ver ? max_ver : req_desc->max_ver;
    if (hi < req_desc->min_ver)
        return KC_E_INVALID;
    req = calloc(1, sizeof(*req));
    if (!req)
        return KC_E_NOMEM;
    req->api_key = req_desc->api_key;
    req->min_ver = req_desc->min_ver;
    req->max_ver = hi;
    req->encode = kc_encode_msg;
    req->enc_opaque = req;
    req->desc = req_desc;
    req->msg = msg;
    req->flags = flags;
    req->cb = cb;
    req->opaque = opaque;
    return kc_submit(client, node_id, req, timeout_ms);
}

static int kc_encode_raw(kp_writer_t *wr, int16_t ver, void *opaque)
{
    kc_req_t *req = opaque;
    (void)ver;
    kp_write_raw(wr, req->raw, req->raw_len);
    return wr->err;
}

int64_t kc_request_raw(kc_client_t *client, int32_t node_id, int16_t api_key, int16_t ver,
                       const void *body, size_t len, int32_t timeout_ms, unsigned flags,
                       kc_resp_cb_t *cb, void *opaque)
{
    kc_req_t *req;
    if (!kc_client_ok(client) || (!body && len) || len > INT32_MAX || !cb || ver < 0 ||
        kp_request_header_version(api_key, ver) < 0 || (flags & ~KC_REQ_NO_RESPONSE))
        return KC_E_INVALID;
    req = calloc(1, sizeof(*req));
    if (!req)
        return KC_E_NOMEM;
    req->raw = malloc(len ? len : 1);
    if (!req->raw) {
        free(req);
        return KC_E_NOMEM;
    }
    if (len)
        memcpy(req->raw, body, len);
    req->raw_len = len;
    req->api_key = api_key;
    req->min_ver = req->max_ver = ver;
    req->encode = kc_encode_raw;
    req->enc_opaque = req;
    req->flags = flags;
    req->cb = cb;
    req->opaque = opaque;
    return kc_submit(client, node_id, req, timeout_ms);
}

int kc_cancel(kc_client_t *client, int64_t id)
{
    kc_client_t *c = client;
    int r = KC_E_INVALID;
    if (!kc_client_ok(c) || id <= 0)
        return KC_E_INVALID;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->nnodes && r != 0; i++) {
        kc_node_t *node = c->nodes[i];
        kc_req_t **pp = &node->sendq.head, *prev = NULL, *req;
        for (; (req = *pp); prev = req, pp = &req->next) {
            if (req->id != id)
                continue;
            *pp = req->next;
            if (node->sendq.tail == req)
                node->sendq.tail = prev;
            node->sendq.cnt--;
            c->m.queued--;
            req->next = NULL;
            kc_req_finish(c, req, KC_E_CANCELLED, NULL, 0, 0);
            r = 0;
            break;
        }
        /* on the wire: finished now, stays as a tombstone until its answer is read */
        for (req = node->inflight.head; req && r != 0; req = req->next)
            if (req->id == id && !req->done) {
                kc_req_finish(c, req, KC_E_CANCELLED, NULL, 0, 0);
                r = 0;
            }
        for (req = node->sending.head; req && r != 0; req = req->next)
            if (req->id == id && !req->done) {
                kc_req_finish(c, req, KC_E_CANCELLED, NULL, 0, 0);
                r = 0;
            }
    }
    pthread_mutex_unlock(&c->lock);
    if (r == 0)
        kc_client_wake(c);
    return r;
}

/* ---- the poll loop ------------------------------------------------------------------------ */

static void kc_client_service(kc_client_t *c, int64_t now)
{
    /* kc_conn_service never adds or removes nodes */
    for (size_t i = 0; i < c->nnodes; i++)
        kc_conn_service(c, c->nodes[i], now);
}

int kc_client_flush(kc_client_t *client)
{
    kc_client_t *c = client;

    if (!kc_client_ok(c))
        return KC_E_INVALID;
    pthread_mutex_lock(&c->lock);
    if (c->polling && !pthread_equal(c->poll_thread, pthread_self())) {
        pthread_mutex_unlock(&c->lock);
        return KC_E_BUSY;
    }
    kc_client_service(c, kc_now_ms());
    pthread_mutex_unlock(&c->lock);
    return 0;
}

int kc_client_poll(kc_client_t *client, int timeout_ms)
{
    kc_client_t *c = client;
    struct epoll_event evs[32];
    int64_t now, next = INT64_MAX;
    int n, wait;
    kc_req_t *list;

    if (!kc_client_ok(c))
        return KC_E_INVALID;
    pthread_mutex_lock(&c->lock);
    if (c->polling) {
        pthread_mutex_unlock(&c->lock);
        return KC_E_BUSY;
    }
    c->polling = true;
    c->poll_thread = pthread_self();
    now = kc_now_ms();
    kc_client_service(c, now);
    for (size_t i = 0; i < c->nnodes; i++) {
        int64_t t = kc_conn_next_timer(c, c->nodes[i]);
        if (t < next)
            next = t;
    }
    if (c->done_head)
        wait = 0;
    else if (next == INT64_MAX)
        wait = timeout_ms;
    else {
        int64_t d = next > now ? next - now : 0;
        wait =
            timeout_ms >= 0 && timeout_ms < d ? timeout_ms : (int)(d > INT32_MAX ? INT32_MAX : d);
    }
    pthread_mutex_unlock(&c->lock);

    n = epoll_wait(c->epfd, evs, (int)(sizeof(evs) / sizeof(evs[0])), wait);

    pthread_mutex_lock(&c->lock);
    now = kc_now_ms();
    for (int i = 0; i < n; i++) {
        kc_node_t *node;
        if (evs[i].data.u64 == KC_WAKE_KEY) {
            uint64_t v;
            ssize_t r = read(c->evfd, &v, sizeof(v));
            (void)r;
            continue;
        }
        node = kc_node_find(c, (int32_t)(uint32_t)evs[i].data.u64);
        if (!node || node->conn_gen != (uint32_t)(evs[i].data.u64 >> 32) || node->fd < 0)
            continue; /* the connection this event was for is gone */
        kc_conn_event(c, node, evs[i].events, now);
    }
    kc_client_service(c, now);
    list = kc_client_take_done(c);
    pthread_mutex_unlock(&c->lock);

    n = kc_client_run_callbacks(c, list);

    pthread_mutex_lock(&c->lock);
    c->polling = false;
    pthread_mutex_unlock(&c->lock);
    return n;
}

/* ---- metrics ------------------------------------------------------------------------------ */

void kc_client_metrics(kc_client_t *client, kc_metrics_t *out)
{
    kc_metrics_t m;
    size_t n = out->struct_size < sizeof(m) ? out->struct_size : sizeof(m);
    uint32_t size = out->struct_size;
    if (!kc_client_ok(client))
        return;
    pthread_mutex_lock(&client->lock);
    m = client->m;
    pthread_mutex_unlock(&client->lock);
    memcpy(out, &m, n);
    out->struct_size = size;
}

/* ---- Metadata refresh ----------------------------------------------------------------------- */

typedef struct kc_mdref_s {
    kc_resp_cb_t *cb;
    void *opaque;
} kc_mdref_t;

static int kc_mdref_encode(kp_writer_t *wr, int16_t ver, void *opaque)
{
    kp_MetadataRequest_t rq;
    (void)opaque;
    kp_MetadataRequest_init(&rq);
    rq.Topics.cnt = 0; /* v1+: an empty list asks for brokers only */
    return kp_MetadataRequest_encode(wr, &rq, ver);
}

static void kc_mdref_done(kc_client_t *client, int err, int16_t ver, const uint8_t *body,
                          size_t len, void *opaque)
{
    kc_mdref_t *mr = opaque;
    if (err == KC_E_OK) {
        kp_reader_t rd;
        kp_arena_t ar;
        kp_MetadataResponse_t resp;
        kp_arena_init(&ar, 16u << 20);
        kp_MetadataResponse_init(&resp);
        kp_reader_init(&rd, body, len);
        if (kp_MetadataResponse_decode(&rd, &ar, &resp, ver) == 0) {
            for (int32_t i = 0; i < resp.Brokers.cnt; i++) {
                const kp_MetadataResponse_MetadataResponseBroker_t *b = &resp.Brokers.v[i];
                char host[256];
                if (b->NodeId < 0 || b->Host.len <= 0 || b->Host.len >= (int32_t)sizeof(host) ||
                    memchr(b->Host.ptr, '\0', (size_t)b->Host.len) || !kc_port_ok(b->Port))
                    continue;
                memcpy(host, b->Host.ptr, (size_t)b->Host.len);
                host[b->Host.len] = '\0';
                (void)kc_client_node_set(client, b->NodeId, host, b->Port);
            }
        } else {
            kc_log(client, KC_LOG_WARN, "Metadata v%d response does not decode: %s", ver,
                   rd.errstr ? rd.errstr : kp_err_str(rd.err));
        }
        kp_arena_free(&ar);
    }
    if (mr->cb)
        mr->cb(client, err, ver, body, len, mr->opaque);
    free(mr);
}

int64_t kc_metadata_refresh(kc_client_t *client, int32_t node_id, kc_resp_cb_t *cb, void *opaque)
{
    kc_mdref_t *mr = calloc(1, sizeof(*mr));
    int64_t id;
    if (!mr)
        return KC_E_NOMEM;
    mr->cb = cb;
    mr->opaque = opaque;
    id = kc_request(client, node_id, KP_APIKEY_Metadata, 1, 12, kc_mdref_encode, 0, 0,
                    kc_mdref_done, mr);
    if (id < 0)
        free(mr);
    return id;
}
