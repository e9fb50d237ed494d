/*
 * test_net.c -- CUnit tests of the network layer with an in-process server and test
 * handlers: ApiVersions, in-order responses with out-of-order deferred completion, barrier
 * ordering, no-response requests, cancellation on disconnect, request limits, garbage,
 * backpressure, large requests, file-range responses and graceful stop. Label: unit.
 *
 * Synchronisation is by condition variables with deadlines and by polling sockets; the only
 * sleeps are inside handlers to make overlaps likely, never to wait for something.
 */
#include <CUnit/Basic.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kb_apiversions.h"
#include "kb_err.h"
#include "kb_log.h"
#include "kb_net.h"
#include "kbt_client.h"

#define WAIT_MS 10000

/* ------------------------------------------------------------------ harness */

typedef struct tsrv_s {
    kb_api_registry_t *reg;
    kb_metrics_t *metrics;
    kb_server_t *srv;
    int port;
} tsrv_t;

static void tsrv_start(tsrv_t *t, void (*tweak)(kb_server_conf_t *))
{
    kb_server_conf_t sc;
    kb_net_listener_t l = {.name = "PLAINTEXT", .host = "127.0.0.1", .port = 0};
    char err[256];
    memset(t, 0, sizeof(*t));
    t->reg = kb_api_registry_new();
    t->metrics = kb_metrics_new();
    CU_ASSERT_EQUAL_FATAL(kb_apiversions_register(t->reg), 0);
    kb_server_conf_defaults(&sc);
    sc.listeners = &l;
    sc.listener_cnt = 1;
    sc.num_network_threads = 2;
    sc.num_io_threads = 4;
    sc.queued_max_requests = 16;
    if (tweak)
        tweak(&sc);
    t->srv = kb_server_new(&sc, t->reg, t->metrics, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(t->srv);
    t->port = kb_server_listener_port(t->srv, "plaintext");
    CU_ASSERT_FATAL(t->port > 0);
}

static void tsrv_run(tsrv_t *t)
{
    CU_ASSERT_EQUAL_FATAL(kb_server_start(t->srv), 0);
}

static int tsrv_stop(tsrv_t *t, int64_t timeout_ms)
{
    int r = kb_server_stop(t->srv, timeout_ms);
    kb_server_free(t->srv);
    kb_api_registry_free(t->reg);
    kb_metrics_free(t->metrics);
    return r;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timespec deadline_in(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

/* Append a request frame for (key, ver) with @p body to @p wr. */
static void build_req(kp_writer_t *wr, int16_t key, int16_t ver, int32_t corr, const void *body,
                      size_t blen)
{
    kp_RequestHeader_t hdr;
    size_t at = wr->len;
    kp_RequestHeader_init(&hdr);
    hdr.RequestApiKey = key;
    hdr.RequestApiVersion = ver;
    hdr.CorrelationId = corr;
    hdr.ClientId = kp_str("kbt");
    kp_write_int32(wr, 0);
    kp_RequestHeader_encode(wr, &hdr, kp_request_header_version(key, ver));
    kp_write_raw(wr, body, blen);
    kp_writer_patch_int32(wr, at, (int32_t)(wr->len - at - 4));
}

static int send_req(int fd, int16_t key, int16_t ver, int32_t corr, const void *body, size_t blen)
{
    kp_writer_t wr;
    int r;
    kp_writer_init(&wr);
    build_req(&wr, key, ver, corr, body, blen);
    r = kbt_send_all(fd, wr.buf, wr.len);
    kp_writer_free(&wr);
    return r;
}

/* Read one response; returns its correlation id (header v0) or INT32_MIN; body in *bodyp. */
static int32_t recv_resp(int fd, uint8_t **bodyp, size_t *blenp)
{
    uint8_t *buf;
    size_t len;
    int32_t corr;
    if (kbt_recv_frame(fd, &buf, &len, WAIT_MS) != 0 || len < 4)
        return INT32_MIN;
    corr = (int32_t)(((uint32_t)buf[0] << 24) | ((uint32_t)buf[1] << 16) | ((uint32_t)buf[2] << 8) |
                     buf[3]);
    if (bodyp) {
        *blenp = len - 4;
        *bodyp = malloc(len - 4 + 1);
        memcpy(*bodyp, buf + 4, len - 4);
    }
    free(buf);
    return corr;
}

/* A response body: "<tag>:<corr>". */
static kb_resp_t *tag_resp(const char *tag, int32_t corr)
{
    char b[64];
    kb_resp_t *resp = kb_resp_new();
    int n = snprintf(b, sizeof(b), "%s:%d", tag, corr);
    kb_resp_append_copy(resp, b, (size_t)n);
    return resp;
}

/* ListGroups v0 (non-flexible, header v1, response header v0) is our test vehicle. */
#define TKEY 16
#define TVER 0

/* ------------------------------------------------------------------ ApiVersions */

static kb_api_result_t h_echo(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    *respp = tag_resp(opaque ? opaque : "echo", kb_req_ctx(req)->correlation_id);
    return KB_API_RESPOND;
}

static const kp_ApiVersionsResponse_ApiVersion_t *find_key(const kp_ApiVersionsResponse_t *r,
                                                           int16_t key)
{
    for (int32_t i = 0; i < r->ApiKeys.cnt; i++)
        if (r->ApiKeys.v[i].ApiKey == key)
            return &r->ApiKeys.v[i];
    return NULL;
}

static void apiversions_roundtrip(int fd, int16_t ver, int16_t parse_ver, int32_t corr,
                                  const char *swname, int16_t want_err, int want_keys)
{
    kp_writer_t wr;
    kp_arena_t ar;
    kp_ApiVersionsResponse_t resp;
    uint8_t *buf;
    size_t len;
    int32_t rcorr;
    kp_writer_init(&wr);
    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL_FATAL(kbt_build_apiversions(&wr, ver, corr, "kbt", swname, "1.0"), 0);
    CU_ASSERT_EQUAL_FATAL(kbt_send_all(fd, wr.buf, wr.len), 0);
    CU_ASSERT_EQUAL_FATAL(kbt_recv_frame(fd, &buf, &len, WAIT_MS), 0);
    CU_ASSERT_EQUAL(kbt_parse_apiversions(buf, len, parse_ver, &ar, &rcorr, &resp), 0);
    CU_ASSERT_EQUAL(rcorr, corr);
    CU_ASSERT_EQUAL(resp.ErrorCode, want_err);
    if (want_keys) {
        const kp_ApiVersionsResponse_ApiVersion_t *av = find_key(&resp, 18);
        CU_ASSERT_PTR_NOT_NULL_FATAL(av);
        CU_ASSERT_EQUAL(av->MinVersion, 0);
        CU_ASSERT_EQUAL(av->MaxVersion, 5);
        av = find_key(&resp, 3);
        CU_ASSERT_PTR_NOT_NULL_FATAL(av);
        CU_ASSERT_EQUAL(av->MinVersion, 1);
        CU_ASSERT_EQUAL(av->MaxVersion, 12);
        av = find_key(&resp, 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(av);
        CU_ASSERT_EQUAL(av->MinVersion, 0); /* KAFKA-18659 quirk: registered 3..13 */
        CU_ASSERT_EQUAL(av->MaxVersion, 13);
        CU_ASSERT_EQUAL(resp.ApiKeys.cnt, 3); /* exactly the registered client APIs */
        CU_ASSERT_PTR_NULL(find_key(&resp, 1));
        CU_ASSERT_PTR_NULL(find_key(&resp, 62)); /* controller-only, not a controller listener */
    } else {
        CU_ASSERT_EQUAL(resp.ApiKeys.cnt, 0);
    }
    free(buf);
    kp_arena_free(&ar);
    kp_writer_free(&wr);
}

static void test_apiversions(void)
{
    tsrv_t t;
    int fd;
    tsrv_start(&t, NULL);
    CU_ASSERT_EQUAL(kb_api_register(t.reg, 3, 1, 12, h_echo, NULL, 0), 0);
    CU_ASSERT_EQUAL(kb_api_register(t.reg, 0, 3, 13, h_echo, NULL, 0), 0);
    CU_ASSERT_EQUAL(kb_api_register(t.reg, 62, 0, 4, h_echo, NULL, KB_API_CONTROLLER_ONLY), 0);
    tsrv_run(&t);
    fd = kbt_connect(t.port);
    CU_ASSERT_FATAL(fd >= 0);
    for (int16_t v = 0; v <= 5; v++)
        apiversions_roundtrip(fd, v, v, 100 + v, "kbt", 0, 1);
    /* too new: v0 layout, UNSUPPORTED_VERSION, with the keys; connection stays usable */
    apiversions_roundtrip(fd, 9, 0, 200, "kbt", 35, 1);
    apiversions_roundtrip(fd, 3, 3, 201, "kbt", 0, 1);
    /* a bad ClientSoftwareName: INVALID_REQUEST without keys */
    apiversions_roundtrip(fd, 3, 3, 202, "bad name!", 42, 0);
    apiversions_roundtrip(fd, 4, 4, 203, "-lead", 42, 0);
    close(fd);
    tsrv_stop(&t, 1000);
}

static void test_register_errors(void)
{
    kb_api_registry_t *reg = kb_api_registry_new();
    kb_api_range_t list[8];
    CU_ASSERT_EQUAL(kb_api_register(reg, 9999, 0, 0, h_echo, NULL, 0), KB_E_NOT_FOUND);
    CU_ASSERT_EQUAL(kb_api_register(reg, 3, 0, 99, h_echo, NULL, 0), KB_E_RANGE);
    CU_ASSERT_EQUAL(kb_api_register(reg, 3, 5, 4, h_echo, NULL, 0), KB_E_RANGE);
    CU_ASSERT_EQUAL(kb_api_register(reg, 3, 0, 13, h_echo, NULL, 0), 0);
    CU_ASSERT_EQUAL(kb_api_register(reg, 3, 0, 13, h_echo, NULL, 0), KB_E_EXISTS);
    CU_ASSERT_EQUAL(kb_api_list(reg, list, 8), 1);
    CU_ASSERT_STRING_EQUAL(list[0].name, "Metadata");
    CU_ASSERT_EQUAL(list[0].flex_min, 9);
    /* Controller-only APIs: advertised on the named controller listeners only. */
    {
        kb_api_range_t ctl = {.api_key = 62, .flags = KB_API_CONTROLLER_ONLY};
        CU_ASSERT_TRUE(kb_api_advertised_on(reg, &list[0], "PLAINTEXT"));
        CU_ASSERT_FALSE(kb_api_advertised_on(reg, &ctl, "PLAINTEXT")); /* none named */
        CU_ASSERT_EQUAL(kb_api_set_controller_listeners(reg, "INTERNAL,CONTROLLER"), 0);
        CU_ASSERT_TRUE(kb_api_advertised_on(reg, &ctl, "controller"));
        CU_ASSERT_TRUE(kb_api_advertised_on(reg, &ctl, "INTERNAL"));
        CU_ASSERT_FALSE(kb_api_advertised_on(reg, &ctl, "PLAINTEXT"));
        CU_ASSERT_FALSE(kb_api_advertised_on(reg, &ctl, "CONTROL"));
        CU_ASSERT_FALSE(kb_api_advertised_on(reg, &ctl, NULL));
        CU_ASSERT_EQUAL(kb_api_set_controller_listeners(reg, ""), 0);
        CU_ASSERT_FALSE(kb_api_advertised_on(reg, &ctl, "CONTROLLER"));
    }
    CU_ASSERT_EQUAL(kb_api_unregister(reg, 3), 0);
    CU_ASSERT_EQUAL(kb_api_unregister(reg, 3), KB_E_NOT_FOUND);
    CU_ASSERT_EQUAL(kb_api_list(reg, list, 8), 0);
    kb_api_registry_free(reg);
}

/* ------------------------------------------------------------------ deferred, reverse order */

typedef struct defq_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kb_req_t *reqs[256];
    int n;         /* deferred and not yet completed */
    int total;     /* ever deferred */
    int max_out;   /* largest n seen */
    int cancelled; /* cancel callbacks run */
    int no_cancel_cb;
} defq_t;

static defq_t dq = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void dq_reset(void)
{
    pthread_mutex_lock(&dq.mu);
    dq.n = dq.total = dq.max_out = dq.cancelled = dq.no_cancel_cb = 0;
    pthread_mutex_unlock(&dq.mu);
}

static void h_cancel(void *opaque, kb_req_t *req)
{
    (void)opaque;
    pthread_mutex_lock(&dq.mu);
    for (int i = 0; i < dq.n; i++) {
        if (dq.reqs[i] == req) {
            dq.reqs[i] = dq.reqs[--dq.n];
            break;
        }
    }
    dq.cancelled++;
    pthread_cond_broadcast(&dq.cv);
    pthread_mutex_unlock(&dq.mu);
}

static kb_api_result_t h_defer(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    (void)opaque;
    (void)respp;
    pthread_mutex_lock(&dq.mu);
    if (kb_req_defer(req, dq.no_cancel_cb ? NULL : h_cancel, NULL) != 0) {
        pthread_mutex_unlock(&dq.mu);
        return KB_API_NO_RESPONSE;
    }
    dq.reqs[dq.n++] = req;
    dq.total++;
    if (dq.n > dq.max_out)
        dq.max_out = dq.n;
    pthread_cond_broadcast(&dq.cv);
    pthread_mutex_unlock(&dq.mu);
    return KB_API_DEFERRED;
}

/* Wait until pred() holds (dq.mu held). */
static int dq_wait(int (*pred)(void *), void *arg)
{
    struct timespec dl = deadline_in(WAIT_MS);
    int ok = 1;
    pthread_mutex_lock(&dq.mu);
    while (!pred(arg)) {
        if (pthread_cond_timedwait(&dq.cv, &dq.mu, &dl) == ETIMEDOUT) {
            ok = pred(arg);
            break;
        }
    }
    pthread_mutex_unlock(&dq.mu);
    return ok;
}

static int pred_n_at_least(void *arg)
{
    return dq.n >= *(int *)arg;
}

static int pred_cancelled_at_least(void *arg)
{
    return dq.cancelled >= *(int *)arg;
}

/* Complete every outstanding request, newest first. */
static void dq_complete_reverse(void)
{
    pthread_mutex_lock(&dq.mu);
    while (dq.n > 0) {
        kb_req_t *req = dq.reqs[--dq.n];
        CU_ASSERT_EQUAL(kb_req_complete(req, tag_resp("d", kb_req_ctx(req)->correlation_id)), 0);
    }
    pthread_mutex_unlock(&dq.mu);
}

static void test_deferred_reverse_order(void)
{
    tsrv_t t;
    int fd, want = 32; /* = the default per-connection limit: all are read at once */
    kp_writer_t wr;
    tsrv_start(&t, NULL);
    dq_reset();
    CU_ASSERT_EQUAL(kb_api_register(t.reg, TKEY, 0, 4, h_defer, NULL, KB_API_CONCURRENT), 0);
    tsrv_run(&t);
    fd = kbt_connect(t.port);
    /* 32 requests in one write: all are read and deferred concurrently */
    kp_writer_init(&wr);
    for (int i = 0; i < want; i++)
        build_req(&wr, TKEY, TVER, 1000 + i, "", 0);
    CU_ASSERT_EQUAL(kbt_send_all(fd, wr.buf, wr.len), 0);
    kp_writer_free(&wr);
    CU_ASSERT_FATAL(dq_wait(pred_n_at_least, &want));
    dq_complete_reverse();
    for (int i = 0; i < want; i++) {
        uint8_t *body;
        size_t blen;
        char exp[32];
        CU_ASSERT_EQUAL(recv_resp(fd, &body, &blen), 1000 + i);
        snprintf(exp, sizeof(exp), "d:%d", 1000 + i);
        CU_ASSERT(blen == strlen(exp) && memcmp(body, exp, blen) == 0);
        free(body);
    }
    close(fd);
    tsrv_stop(&t, 1000);
}

/* ------------------------------------------------------------------ barriers */

static _Atomic int bar_running, bar_max, conc_running, conc_max;

static void track_max(_Atomic int *running, _Atomic int *max)
{
    int now = atomic_fetch_add(running, 1) + 1, m = atomic_load(max);
    while (now > m && !atomic_compare_exchange_weak(max, &m, now))
        ;
}

static kb_api_result_t h_serial(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    struct timespec ts = {0, 200000};
    track_max(&bar_running, &bar_max);
    /* Any request of the connection running now would break the barrier. */
    if (atomic_load(&conc_running) > 0)
        atomic_store(&bar_max, 99);
    nanosleep(&ts, NULL); /* widen the window for an overlap; not a synchronisation */
    atomic_fetch_sub(&bar_running, 1);
    *respp = tag_resp("s", kb_req_ctx(req)->correlation_id);
    return KB_API_RESPOND;
}

static kb_api_result_t h_concurrent(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    struct timespec ts = {0, 200000};
    track_max(&conc_running, &conc_max);
    if (atomic_load(&bar_running) > 0)
        atomic_store(&bar_max, 99);
    nanosleep(&ts, NULL);
    atomic_fetch_sub(&conc_running, 1);
    *respp = tag_resp("c", kb_req_ctx(req)->correlation_id);
    return KB_API_RESPOND;
}

static void test_barriers(void)
{
    tsrv_t t;
    int fd, n = 120;
    kp_writer_t wr;
    tsrv_start(&t, NULL);
    atomic_store(&bar_max, 0);
    atomic_store(&conc_max, 0);
    /* Heartbeat: a barrier; ListGroups: concurrent */
    CU_ASSERT_EQUAL(kb_api_register(t.reg, 12, 0, 4, h_serial, NULL, 0), 0);
    CU_ASSERT_EQUAL(kb_api_register(t.reg, TKEY, 0, 4, h_concurrent, NULL, KB_API_CONCURRENT), 0);
    tsrv_run(&t);
    fd = kbt_connect(t.port);
    kp_writer_init(&wr);
    for (int i = 0; i < n; i++) {
        /* runs of concurrent requests separated by barriers */
        if (i % 10 == 9)
            build_req(&wr, 12, 0, i, "", 0);
        else
            build_req(&wr, TKEY, TVER, i, "", 0);
    }
    CU_ASSERT_EQUAL(kbt_send_all(fd, wr.buf, wr.len), 0);
    kp_writer_free(&wr);
    for (int i = 0; i < n; i++)
        CU_ASSERT_EQUAL(recv_resp(fd, NULL, NULL), i);
    CU_ASSERT_EQUAL(atomic_load(&bar_max), 1); /* never two barriers, never a barrier + other */
    CU_ASSERT(atomic_load(&conc_max) >= 1);
    close(fd);
    tsrv_stop(&t, 1000);
}

/* ------------------------------------------------------------------ no response */

static kb_api_result_t h_odd_silent(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    int32_t corr = kb_req_ctx(req)->correlation_id;
    if (corr % 2)
        return KB_API_NO_RESPONSE;
    *respp = tag_resp("e", corr);
    return KB_API_RESPOND;
}

static void test_no_response(void)
{
    tsrv_t t;
    int fd;
    kp_writer_t wr;
    tsrv_start(&t, NULL);
    CU_ASSERT_EQUAL(kb_api_register(t.reg, TKEY, 0, 4, h_odd_silent, NULL, KB_API_CONCURRENT), 0);
    tsrv_run(&t);
    fd = kbt_connect(t.port);
    kp_writer_init(&wr);
    for (int i = 0; i < 60; i++)
        build_req(&wr, TKEY, TVER, i, "", 0);
    CU_ASSERT_EQUAL(kbt_send_all(fd, wr.buf, wr.len), 0);
    kp_writer_free(&wr);
    for (int i = 0; i < 60; i += 2)
        CU_ASSERT_EQUAL(recv_resp(fd, NULL, NULL), i);
    close(fd);
    tsrv_stop(&t, 1000);
}

/* ------------------------------------------------------------------ cancellation */

static void test_cancel_on_disconnect(void)
{
    tsrv_t t;
    int fd, one = 1, three = 3;
    tsrv_start(&t, NULL);
    dq_reset();
    CU_ASSERT_EQUAL(kb_api_register(t.reg, TKEY, 0, 4, h_defer, NULL, KB_API_CONCURRENT), 0);
    tsrv_run(&t);

    /* with a cancel callback: the network layer calls it and drops the request */
    fd = kbt_connect(t.port);
    for (int i = 0; i < 3; i++)
        send_req(fd, TKEY, TVER, i, "", 0);
    CU_ASSERT_FATAL(dq_wait(pred_n_at_least, &three));
    close(fd);
    CU_ASSERT(dq_wait(pred_cancelled_at_least, &three));
    pthread_mutex_lock(&dq.mu);
    CU_ASSERT_EQUAL(dq.n, 0);
    pthread_mutex_unlock(&dq.mu);

    /* without one: completing after the disconnect reports CANCELLED and frees it */
    dq_reset();
    dq.no_cancel_cb = 1;
    fd = kbt_connect(t.port);
    send_req(fd, TKEY, TVER, 7, "", 0);
    CU_ASSERT_FATAL(dq_wait(pred_n_at_least, &one));
    close(fd);
    {
        /* wait until the server saw the close: its connection gauge returns to 0 */
        int64_t dl = now_ms() + WAIT_MS;
        char *txt = NULL;
        for (;;) {
            txt = kb_metrics_render(t.metrics, NULL);
            if (strstr(txt, "\nkbroker_connections 0\n") || now_ms() > dl)
                break;
            free(txt);
            txt = NULL;
            sched_yield();
        }
        CU_ASSERT_PTR_NOT_NULL(txt);
        free(txt);
    }
    pthread_mutex_lock(&dq.mu);
    CU_ASSERT_EQUAL(kb_req_complete(dq.reqs[0], tag_resp("late", 7)), KB_E_CANCELLED);
    dq.n = 0;
    pthread_mutex_unlock(&dq.mu);
    tsrv_stop(&t, 1000);
}

/* A client that leaves while its connection is not being read (at the in-flight limit) still
 * has its deferred requests cancelled at once. */
static void inflight2(kb_server_conf_t *sc)
{
    sc->max_inflight_per_conn = 2;
}

static void test_cancel_while_muted(void)
{
    tsrv_t t;
    int fd, two = 2;
    tsrv_start(&t, inflight2);
    dq_reset();
    CU_ASSERT_EQUAL(kb_api_register(t.reg, TKEY, 0, 4, h_defer, NULL, KB_API_CONCURRENT), 0);
    tsrv_run(&t);
    fd = kbt_connect(t.port);
    for (int i = 0; i < 5; i++)
        send_req(fd, TKEY, TVER, i, "", 0);
    CU_ASSERT_FATAL(dq_wait(pred_n_at_least, &two));
    close(fd);
    CU_ASSERT(dq_wait(pred_cancelled_at_least, &two));
    pthread_mutex_lock(&dq.mu);
    CU_ASSERT_EQUAL(dq.total, 2); /* the three unread requests never reached the handler */
    pthread_mutex_unlock(&dq.mu);
    tsrv_stop(&t, 1000);
}

/* ------------------------------------------------------------------ limits and garbage */

static void small_limit(kb_server_conf_t *sc)
{
    sc->socket_request_max_bytes = 1000;
}

static void apiv_ok(int port)
{
    int fd = kbt_connect(port);
    CU_ASSERT_FATAL(fd >= 0);
    apiversions_roundtrip(fd, 3, 3, 77, "kbt", 0, 1);
    close(fd);
}

static void test_limits_and_garbage(void)
{
    tsrv_t t;
    int fd, fd2;
    tsrv_start(&t, small_limit);
    CU_ASSERT_EQUAL(kb_api_register(t.reg, 3, 1, 12, h_echo, NULL, 0), 0);
    CU_ASSERT_EQUAL(kb_api_register(t.reg, 0, 3, 13, h_echo, NULL, 0), 0);
    tsrv_run(&t);

    /* a second client connected before the bad ones keeps working throughout */
    fd2 = kbt_connect(t.port);
    CU_ASSERT_FATAL(fd2 >= 0);
    {
        static const struct {
            const char *what;
            uint8_t bytes[16];
            size_t len;
        } bad[] = {
            {"size above socket.request.max.bytes", {0, 0, 0x13, 0x88, 0, 18}, 6},
            {"negative size", {0xff, 0xff, 0xff, 0xf0}, 4},
            {"frame shorter than a header", {0, 0, 0, 4, 'a', 'b', 'c', 'd'}, 8},
            {"unknown api key", {0, 0, 0, 10, 0x03, 0xe7, 0, 0, 0, 0, 0, 1, 0xff, 0xff}, 14},
            {"unsupported Metadata version",
             {0, 0, 0, 10, 0, 3, 0, 99, 0, 0, 0, 1, 0xff, 0xff},
             14},
            {"Metadata below min", {0, 0, 0, 10, 0, 3, 0, 0, 0, 0, 0, 1, 0xff, 0xff}, 14},
            {"Produce v0 (advertised, not served)",
             {0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff},
             14},
            {"client id longer than the frame", {0, 0, 0, 10, 0, 3, 0, 1, 0, 0, 0, 1, 0x7f, 0}, 14},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            fd = kbt_connect(t.port);
            CU_ASSERT_FATAL(fd >= 0);
            kbt_send_all(fd, bad[i].bytes, bad[i].len);
            if (!kbt_wait_closed(fd, WAIT_MS)) {
                fprintf(stderr, "\n  not closed: %s\n", bad[i].what);
                CU_FAIL("connection not closed");
            }
            close(fd);
            apiversions_roundtrip(fd2, 3, 3, 300 + (int32_t)i, "kbt", 0, 1);
        }
    }
    /* exactly at the limit is fine (body ignored by h_echo) */
    {
        uint8_t body[1000];
        uint8_t *rb;
        size_t rl;
        memset(body, 'x', sizeof(body));
        fd = kbt_connect(t.port);
        /* header v1 of Metadata v1 with client id "kbt" is 2+2+4+2+3 = 13 bytes */
        send_req(fd, 3, 1, 5, body, 1000 - 13);
        CU_ASSERT_EQUAL(recv_resp(fd, &rb, &rl), 5);
        free(rb);
        close(fd);
    }
    close(fd2);
    apiv_ok(t.port);
    tsrv_stop(&t, 1000);
}

/* ------------------------------------------------------------------ backpressure */

static void inflight4(kb_server_conf_t *sc)
{
    sc->max_inflight_per_conn = 4;
}

typedef struct completer_s {
    int total;
} completer_t;

static int pred_batch(void *arg)
{
    completer_t *c = arg;
    return dq.n >= 4 || (dq.total == c->total && dq.n > 0);
}

static void *completer_main(void *arg)
{
    completer_t *c = arg;
    int done = 0;
    while (done < c->total) {
        int k;
        if (!dq_wait(pred_batch, c))
            break;
        pthread_mutex_lock(&dq.mu);
        k = dq.n;
        pthread_mutex_unlock(&dq.mu);
        dq_complete_reverse();
        done += k;
    }
    return NULL;
}

static void test_backpressure(void)
{
    tsrv_t t;
    int fd;
    kp_writer_t wr;
    pthread_t thr;
    completer_t c = {.total = 30};
    tsrv_start(&t, inflight4);
    dq_reset();
    CU_ASSERT_EQUAL(kb_api_register(t.reg, TKEY, 0, 4, h_defer, NULL, KB_API_CONCURRENT), 0);
    tsrv_run(&t);
    fd = kbt_connect(t.port);
    pthread_create(&thr, NULL, completer_main, &c);
    kp_writer_init(&wr);
    for (int i = 0; i < c.total; i++)
        build_req(&wr, TKEY, TVER, i, "", 0);
    CU_ASSERT_EQUAL(kbt_send_all(fd, wr.buf, wr.len), 0);
    kp_writer_free(&wr);
    for (int i = 0; i < c.total; i++)
        CU_ASSERT_EQUAL(recv_resp(fd, NULL, NULL), i);
    pthread_join(thr, NULL);
    CU_ASSERT_EQUAL(dq.total, c.total);
    CU_ASSERT_EQUAL(dq.max_out, 4); /* never more than the per-connection limit */
    close(fd);
    tsrv_stop(&t, 1000);
}

/* ------------------------------------------------------------------ big frames, files */

static kb_api_result_t h_len(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_reqctx_t *ctx = kb_req_ctx(req);
    size_t n = kp_reader_remaining(&ctx->body);
    const uint8_t *p = kp_read_raw(&ctx->body, n);
    uint32_t sum = 0;
    char b[64];
    for (size_t i = 0; i < n; i++)
        sum = sum * 31 + p[i];
    snprintf(b, sizeof(b), "%zu/%u", n, sum);
    *respp = kb_resp_new();
    kb_resp_append_copy(*respp, b, strlen(b));
    return KB_API_RESPOND;
}

static int file_fd = -1;
static _Atomic int file_released;

static void file_release(void *opaque)
{
    (void)opaque;
    atomic_fetch_add(&file_released, 1);
}

static kb_api_result_t h_file(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_resp_t *resp = kb_resp_new();
    static const char head[] = "HEAD";
    kb_resp_append_mem(resp, head, 4, NULL, NULL);
    kb_resp_append_file(resp, file_fd, 100, 300000, file_release, NULL);
    kb_resp_append_copy(resp, "TAIL", 4);
    *respp = resp;
    return KB_API_RESPOND;
}

static void test_big_request_and_file_response(void)
{
    tsrv_t t;
    int fd;
    size_t big = 300 * 1024;
    uint8_t *body = malloc(big), *rb;
    size_t rl;
    uint32_t sum = 0;
    char exp[64], path[] = "/tmp/kbt_file_XXXXXX";
    tsrv_start(&t, NULL);
    CU_ASSERT_EQUAL(kb_api_register(t.reg, TKEY, 0, 4, h_len, NULL, 0), 0);
    CU_ASSERT_EQUAL(kb_api_register(t.reg, 12, 0, 4, h_file, NULL, 0), 0);
    tsrv_run(&t);
    for (size_t i = 0; i < big; i++) {
        body[i] = (uint8_t)(i * 7 + (i >> 9));
        sum = sum * 31 + body[i];
    }
    fd = kbt_connect(t.port);
    /* larger than the 64 KiB read buffer, pipelined with a small one behind it */
    send_req(fd, TKEY, TVER, 1, body, big);
    send_req(fd, TKEY, TVER, 2, "ab", 2);
    CU_ASSERT_EQUAL(recv_resp(fd, &rb, &rl), 1);
    snprintf(exp, sizeof(exp), "%zu/%u", big, sum);
    CU_ASSERT(rl == strlen(exp) && memcmp(rb, exp, rl) == 0);
    free(rb);
    CU_ASSERT_EQUAL(recv_resp(fd, &rb, &rl), 2);
    free(rb);

    /* a response made of memory + a 300000-byte file range (sendfile) + memory */
    file_fd = mkstemp(path);
    CU_ASSERT_FATAL(file_fd >= 0);
    unlink(path);
    CU_ASSERT_EQUAL((size_t)write(file_fd, body, big), big);
    send_req(fd, 12, 0, 3, "", 0);
    CU_ASSERT_EQUAL(recv_resp(fd, &rb, &rl), 3);
    CU_ASSERT_EQUAL_FATAL(rl, 4 + 300000 + 4);
    CU_ASSERT(memcmp(rb, "HEAD", 4) == 0);
    CU_ASSERT(memcmp(rb + 4, body + 100, 300000) == 0);
    CU_ASSERT(memcmp(rb + 4 + 300000, "TAIL", 4) == 0);
    free(rb);
    close(fd);
    tsrv_stop(&t, 1000);
    CU_ASSERT_EQUAL(atomic_load(&file_released), 1);
    close(file_fd);
    free(body);
}

/* ------------------------------------------------------------------ graceful stop */

typedef struct stopper_s {
    tsrv_t *t;
    int64_t timeout;
    int result;
} stopper_t;

static void *stopper_main(void *arg)
{
    stopper_t *s = arg;
    s->result = kb_server_stop(s->t->srv, s->timeout);
    return NULL;
}

static void test_graceful_stop(void)
{
    tsrv_t t;
    int fd, one = 1;
    pthread_t thr;
    stopper_t st;
    tsrv_start(&t, NULL);
    dq_reset();
    CU_ASSERT_EQUAL(kb_api_register(t.reg, TKEY, 0, 4, h_defer, NULL, KB_API_CONCURRENT), 0);
    tsrv_run(&t);

    /* a deferred request completed after stop began still gets its response */
    fd = kbt_connect(t.port);
    send_req(fd, TKEY, TVER, 42, "", 0);
    CU_ASSERT_FATAL(dq_wait(pred_n_at_least, &one));
    st.t = &t;
    st.timeout = WAIT_MS;
    pthread_create(&thr, NULL, stopper_main, &st);
    /* new connections are refused or closed once stopping; the old one still answers */
    dq_complete_reverse();
    CU_ASSERT_EQUAL(recv_resp(fd, NULL, NULL), 42);
    pthread_join(thr, NULL);
    CU_ASSERT_EQUAL(st.result, 0);
    CU_ASSERT(kbt_wait_closed(fd, WAIT_MS));
    close(fd);
    kb_server_free(t.srv);
    kb_api_registry_free(t.reg);
    kb_metrics_free(t.metrics);

    /* a deferred request never completed: stop times out and cancels it */
    tsrv_start(&t, NULL);
    dq_reset();
    CU_ASSERT_EQUAL(kb_api_register(t.reg, TKEY, 0, 4, h_defer, NULL, KB_API_CONCURRENT), 0);
    tsrv_run(&t);
    fd = kbt_connect(t.port);
    send_req(fd, TKEY, TVER, 43, "", 0);
    CU_ASSERT_FATAL(dq_wait(pred_n_at_least, &one));
    CU_ASSERT_EQUAL(tsrv_stop(&t, 100), KB_E_TIMEOUT);
    CU_ASSERT_EQUAL(dq.cancelled, 1);
    close(fd);
}

int main(void)
{
    CU_pSuite s;
    unsigned failed;
    const char *lvl = getenv("KBT_LOG");
    kb_log_level_t l;
    kb_log_set_level(KB_LOG_ERROR);
    if (lvl && kb_log_level_parse(lvl, &l) == 0)
        kb_log_set_level(l);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("net", NULL, NULL);
    CU_add_test(s, "ApiVersions v0-v5, too new, invalid names", test_apiversions);
    CU_add_test(s, "registry errors", test_register_errors);
    CU_add_test(s, "deferred completed in reverse, answered in order", test_deferred_reverse_order);
    CU_add_test(s, "barrier ordering", test_barriers);
    CU_add_test(s, "no-response requests keep order", test_no_response);
    CU_add_test(s, "cancel on disconnect", test_cancel_on_disconnect);
    CU_add_test(s, "cancel on disconnect while not read", test_cancel_while_muted);
    CU_add_test(s, "limits and garbage close only that connection", test_limits_and_garbage);
    CU_add_test(s, "backpressure per connection", test_backpressure);
    CU_add_test(s, "big request, file-range response", test_big_request_and_file_response);
    CU_add_test(s, "graceful stop", test_graceful_stop);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
