/*
 * test_reqlocal.c -- CUnit tests of connection-less requests (kb_req_local_*, kb_net.h): the
 * handler answering at once (memory + file segments flattened), no response, refusal,
 * deferral completed from another thread, completion inside the handler, cancellation of a
 * deferred request (with and without a cancel callback) and of a running one, an API
 * unregistered before the run, argument errors, and a race between completions and
 * cancellations in which every done callback must run exactly once. Label: unit.
 *
 * No server is started: a local request needs only the handler registry. Waiting is on
 * condition variables with deadlines.
 */
#include <CUnit/Basic.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kb_err.h"
#include "kb_log.h"
#include "kb_net.h"

#define WAIT_MS 10000
#define TKEY    16 /* ListGroups: v0-2 classic headers, v3+ flexible */
#define NRACE   200

/* ------------------------------------------------------------------ the done recorder */

typedef struct rec_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    int status;
    uint8_t *body;
    size_t len;
    pthread_t thread;
    kb_req_t *release_in_done; /* release this request inside the callback */
} rec_t;

static void rec_init(rec_t *r)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->status = 1;
}

static void rec_free(rec_t *r)
{
    free(r->body);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
}

static void rec_done(void *opaque, int status, uint8_t *body, size_t len)
{
    rec_t *r = opaque;
    kb_req_t *rel;
    pthread_mutex_lock(&r->mu);
    r->calls++;
    r->status = status;
    free(r->body);
    r->body = body; /* ours now */
    r->len = len;
    r->thread = pthread_self();
    rel = r->release_in_done;
    r->release_in_done = NULL;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (rel)
        kb_req_local_release(rel);
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

/* Wait until the callback ran; returns its call count. */
static int rec_wait(rec_t *r)
{
    struct timespec dl = deadline_in(WAIT_MS);
    int n;
    pthread_mutex_lock(&r->mu);
    while (r->calls == 0 && pthread_cond_timedwait(&r->cv, &r->mu, &dl) != ETIMEDOUT)
        ;
    n = r->calls;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* ------------------------------------------------------------------ the test handler */

/* The first body byte is the command:
 *   R  answer at once: "HEAD" + 5000 bytes of a file + "TAIL"
 *   N  no response          C  refuse (close)
 *   D  defer with a cancel callback          d  defer without one
 *   K  cancel itself (kb_req_local_cancel) first, then try to defer
 *   E  defer and complete inside the handler
 *   X  defer and also return a response (a handler bug) */

typedef struct owner_s {
    pthread_mutex_t mu;
    kb_req_t *held[NRACE + 8];
    int n;
    int cancels;
    int defer_rc;     /* what kb_req_defer returned last */
    kb_reqctx_t seen; /* a copy of the last context */
    char seen_client[64], seen_principal[64], seen_listener[64], seen_peer[64];
} owner_t;

static owner_t own = {.mu = PTHREAD_MUTEX_INITIALIZER};
static int file_fd = -1;
static atomic_int file_released;
static uint8_t file_bytes[5000];

static void owner_reset(void)
{
    pthread_mutex_lock(&own.mu);
    own.n = own.cancels = 0;
    own.defer_rc = 1;
    pthread_mutex_unlock(&own.mu);
}

static void h_cancel(void *opaque, kb_req_t *req)
{
    (void)opaque;
    pthread_mutex_lock(&own.mu);
    for (int i = 0; i < own.n; i++) {
        if (own.held[i] == req) {
            own.held[i] = own.held[--own.n];
            break;
        }
    }
    own.cancels++;
    pthread_mutex_unlock(&own.mu);
}

static void file_release(void *opaque)
{
    (void)opaque;
    atomic_fetch_add(&file_released, 1);
}

static void copy_str(char *dst, size_t size, const char *s, int32_t len)
{
    snprintf(dst, size, "%.*s", len < 0 ? 0 : (int)len, len < 0 ? "" : s);
}

static kb_api_result_t h_test(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_reqctx_t *ctx = kb_req_ctx(req);
    uint8_t cmd = ctx->body.len > 0 ? ctx->body.buf[0] : 'R';
    kb_resp_t *resp;
    int rc;
    (void)opaque;

    pthread_mutex_lock(&own.mu);
    own.seen = *ctx;
    copy_str(own.seen_client, sizeof(own.seen_client), ctx->client_id.ptr, ctx->client_id.len);
    snprintf(own.seen_principal, sizeof(own.seen_principal), "%s", ctx->principal);
    snprintf(own.seen_listener, sizeof(own.seen_listener), "%s", ctx->listener);
    snprintf(own.seen_peer, sizeof(own.seen_peer), "%s", ctx->peer);
    pthread_mutex_unlock(&own.mu);

    switch (cmd) {
    case 'R':
        resp = kb_resp_new();
        kb_resp_append_copy(resp, "HEAD", 4);
        kb_resp_append_file(resp, file_fd, 0, sizeof(file_bytes), file_release, NULL);
        kb_resp_append_copy(resp, "TAIL", 4);
        *respp = resp;
        return KB_API_RESPOND;
    case 'N':
        return KB_API_NO_RESPONSE;
    case 'C':
        return KB_API_CLOSE;
    case 'K':
        kb_req_local_cancel(req, KB_E_CANCELLED);
        /* fall through */
    case 'D':
    case 'd':
    case 'E':
    case 'X':
        pthread_mutex_lock(&own.mu);
        rc = kb_req_defer(req, cmd == 'd' ? NULL : h_cancel, NULL);
        own.defer_rc = rc;
        if (rc == 0 && cmd != 'E')
            own.held[own.n++] = req;
        if (rc == 0 && cmd == 'E') {
            resp = kb_resp_new();
            kb_resp_append_copy(resp, "early", 5);
            kb_req_complete(req, resp);
        }
        pthread_mutex_unlock(&own.mu);
        if (rc != 0)
            return KB_API_NO_RESPONSE;
        if (cmd == 'X') {
            *respp = kb_resp_new();
            kb_resp_append_copy(*respp, "bug", 3);
            return KB_API_RESPOND;
        }
        return KB_API_DEFERRED;
    default:
        return KB_API_CLOSE;
    }
}

/* Take the one held (deferred) request. */
static kb_req_t *owner_take(void)
{
    kb_req_t *req = NULL;
    pthread_mutex_lock(&own.mu);
    if (own.n > 0)
        req = own.held[--own.n];
    pthread_mutex_unlock(&own.mu);
    return req;
}

/* ------------------------------------------------------------------ helpers */

static kb_api_registry_t *reg_new(void)
{
    kb_api_registry_t *reg = kb_api_registry_new();
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    CU_ASSERT_EQUAL_FATAL(kb_api_register(reg, TKEY, 0, 4, h_test, NULL, KB_API_CONCURRENT), 0);
    owner_reset();
    return reg;
}

static kb_req_t *mk(kb_api_registry_t *reg, rec_t *r, int16_t ver, const char *cmd, int *errp)
{
    kb_req_local_conf_t c = {.api_key = TKEY,
                             .api_version = ver,
                             .correlation_id = 77,
                             .client_id = "kbx-test",
                             .listener = "INTERNAL",
                             .peer = "kbx:test",
                             .principal = "User:__kbroker",
                             .done = rec_done,
                             .done_opaque = r};
    return kb_req_local_new(reg, &c, (const uint8_t *)cmd, strlen(cmd), errp);
}

/* ------------------------------------------------------------------ tests */

static void test_immediate(void)
{
    kb_api_registry_t *reg = reg_new();
    rec_t r;
    kb_req_t *req;
    int err = 1;

    for (int16_t ver = 0; ver <= 4; ver += 3) { /* v0: header v1; v3: flexible, header v2 */
        rec_init(&r);
        atomic_store(&file_released, 0);
        req = mk(reg, &r, ver, "R", &err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(req);
        CU_ASSERT_EQUAL(err, 0);
        kb_req_local_run(req);
        /* answered at once: the callback ran on this thread before run returned */
        CU_ASSERT_EQUAL(r.calls, 1);
        CU_ASSERT_EQUAL(r.status, 0);
        CU_ASSERT(pthread_equal(r.thread, pthread_self()));
        CU_ASSERT_EQUAL_FATAL(r.len, 4 + sizeof(file_bytes) + 4);
        CU_ASSERT(memcmp(r.body, "HEAD", 4) == 0);
        CU_ASSERT(memcmp(r.body + 4, file_bytes, sizeof(file_bytes)) == 0);
        CU_ASSERT(memcmp(r.body + 4 + sizeof(file_bytes), "TAIL", 4) == 0);
        /* the file segment was released when the response was copied, not later */
        CU_ASSERT_EQUAL(atomic_load(&file_released), 1);
        pthread_mutex_lock(&own.mu);
        CU_ASSERT_EQUAL(own.seen.conn_id, 0);
        CU_ASSERT_EQUAL(own.seen.api_key, TKEY);
        CU_ASSERT_EQUAL(own.seen.api_version, ver);
        CU_ASSERT_EQUAL(own.seen.correlation_id, 77);
        CU_ASSERT_EQUAL(own.seen.flexible, ver >= 3);
        CU_ASSERT_EQUAL(own.seen.hdr_version, ver >= 3 ? 2 : 1);
        CU_ASSERT_EQUAL(own.seen.body.len, 1);
        CU_ASSERT_STRING_EQUAL(own.seen_client, "kbx-test");
        CU_ASSERT_STRING_EQUAL(own.seen_principal, "User:__kbroker");
        CU_ASSERT_STRING_EQUAL(own.seen_listener, "INTERNAL");
        CU_ASSERT_STRING_EQUAL(own.seen_peer, "kbx:test");
        pthread_mutex_unlock(&own.mu);
        /* finished: a cancel is too late */
        CU_ASSERT_EQUAL(kb_req_local_cancel(req, KB_E_TIMEOUT), KB_E_STATE);
        kb_req_local_release(req);
        CU_ASSERT_EQUAL(r.calls, 1);
        rec_free(&r);
    }
    kb_api_registry_free(reg);
}

static void test_no_response_and_refusal(void)
{
    kb_api_registry_t *reg = reg_new();
    rec_t r;
    kb_req_t *req;

    rec_init(&r);
    req = mk(reg, &r, 1, "N", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(req);
    kb_req_local_run(req);
    CU_ASSERT_EQUAL(r.calls, 1);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NULL(r.body);
    CU_ASSERT_EQUAL(r.len, 0);
    kb_req_local_release(req);
    rec_free(&r);

    rec_init(&r);
    req = mk(reg, &r, 1, "C", NULL);
    kb_req_local_run(req);
    CU_ASSERT_EQUAL(r.calls, 1);
    CU_ASSERT_EQUAL(r.status, KB_E_PARSE);
    CU_ASSERT_PTR_NULL(r.body);
    kb_req_local_release(req);
    rec_free(&r);

    /* a handler that defers and also answers: the deferral wins, the answer is dropped */
    rec_init(&r);
    req = mk(reg, &r, 1, "X", NULL);
    kb_req_local_run(req);
    CU_ASSERT_EQUAL(r.calls, 0);
    CU_ASSERT_EQUAL(kb_req_complete_close(owner_take()), 0);
    CU_ASSERT_EQUAL(r.calls, 1);
    CU_ASSERT_EQUAL(r.status, KB_E_PARSE);
    kb_req_local_release(req);
    rec_free(&r);
    kb_api_registry_free(reg);
}

static void test_errors(void)
{
    kb_api_registry_t *reg = reg_new();
    kb_req_local_conf_t c = {.api_key = TKEY, .api_version = 0};
    rec_t r;
    kb_req_t *req;
    int err = 0;

    rec_init(&r);
    /* no callback */
    CU_ASSERT_PTR_NULL(kb_req_local_new(reg, &c, NULL, 0, &err));
    CU_ASSERT_EQUAL(err, KB_E_INVALID);
    c.done = rec_done;
    c.done_opaque = &r;
    CU_ASSERT_PTR_NULL(kb_req_local_new(reg, &c, NULL, 5, &err));
    CU_ASSERT_EQUAL(err, KB_E_INVALID);
    /* a version outside the registered range, an API nobody serves */
    c.api_version = 5;
    CU_ASSERT_PTR_NULL(kb_req_local_new(reg, &c, NULL, 0, &err));
    CU_ASSERT_EQUAL(err, KB_E_UNSUPPORTED);
    c.api_key = 3;
    c.api_version = 0;
    CU_ASSERT_PTR_NULL(kb_req_local_new(reg, &c, NULL, 0, &err));
    CU_ASSERT_EQUAL(err, KB_E_UNSUPPORTED);
    CU_ASSERT_EQUAL(r.calls, 0);

    /* a request created and released without running: no callback, nothing leaks */
    req = mk(reg, &r, 0, "R", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(req);
    CU_ASSERT_EQUAL(kb_req_local_cancel(req, 0), KB_E_INVALID);
    kb_req_local_release(req);
    CU_ASSERT_EQUAL(r.calls, 0);

    /* unregistered between creation and run */
    req = mk(reg, &r, 0, "R", NULL);
    CU_ASSERT_EQUAL(kb_api_unregister(reg, TKEY), 0);
    kb_req_local_run(req);
    CU_ASSERT_EQUAL(r.calls, 1);
    CU_ASSERT_EQUAL(r.status, KB_E_UNSUPPORTED);
    kb_req_local_release(req);
    rec_free(&r);
    kb_api_registry_free(reg);
}

typedef struct completer_s {
    kb_req_t *req;
    bool close;
    int rc;
    pthread_t thr;
} completer_t;

static void *completer_main(void *arg)
{
    completer_t *c = arg;
    kb_resp_t *resp = kb_resp_new();
    kb_resp_append_copy(resp, "later", 5);
    pthread_mutex_lock(&own.mu); /* serialised with the cancel callback, as owners do */
    if (c->close) {
        kb_resp_free(resp);
        c->rc = kb_req_complete_close(c->req);
    } else {
        c->rc = kb_req_complete(c->req, resp);
    }
    pthread_mutex_unlock(&own.mu);
    return NULL;
}

static void test_deferred_completed_elsewhere(void)
{
    kb_api_registry_t *reg = reg_new();

    for (int close = 0; close <= 1; close++) {
        rec_t r;
        kb_req_t *req;
        completer_t c = {.close = close};
        rec_init(&r);
        req = mk(reg, &r, 3, "D", NULL);
        kb_req_local_run(req);
        CU_ASSERT_EQUAL(own.defer_rc, 0);
        CU_ASSERT_EQUAL(r.calls, 0); /* waiting */
        c.req = owner_take();
        CU_ASSERT_PTR_EQUAL_FATAL(c.req, req);
        if (!close)
            r.release_in_done = req; /* the creator may let go inside the callback */
        pthread_create(&c.thr, NULL, completer_main, &c);
        CU_ASSERT_EQUAL(rec_wait(&r), 1);
        pthread_join(c.thr, NULL);
        CU_ASSERT_EQUAL(c.rc, 0);
        CU_ASSERT(pthread_equal(r.thread, c.thr));
        if (close) {
            CU_ASSERT_EQUAL(r.status, KB_E_PARSE);
            kb_req_local_release(req);
        } else {
            CU_ASSERT_EQUAL(r.status, 0);
            CU_ASSERT(r.len == 5 && memcmp(r.body, "later", 5) == 0);
        }
        CU_ASSERT_EQUAL(r.calls, 1);
        CU_ASSERT_EQUAL(own.cancels, 0);
        rec_free(&r);
    }

    /* completed inside the handler, right after the deferral */
    {
        rec_t r;
        kb_req_t *req;
        rec_init(&r);
        req = mk(reg, &r, 0, "E", NULL);
        kb_req_local_run(req);
        CU_ASSERT_EQUAL(r.calls, 1);
        CU_ASSERT_EQUAL(r.status, 0);
        CU_ASSERT(r.len == 5 && memcmp(r.body, "early", 5) == 0);
        kb_req_local_release(req);
        rec_free(&r);
    }
    kb_api_registry_free(reg);
}

static void test_cancel(void)
{
    kb_api_registry_t *reg = reg_new();
    rec_t r;
    kb_req_t *req, *held;

    /* deferred, with a cancel callback: it runs once, done gets the cancel's status */
    rec_init(&r);
    req = mk(reg, &r, 2, "D", NULL);
    kb_req_local_run(req);
    CU_ASSERT_EQUAL(r.calls, 0);
    CU_ASSERT_EQUAL(kb_req_local_cancel(req, KB_E_TIMEOUT), 0);
    CU_ASSERT_EQUAL(own.cancels, 1);
    CU_ASSERT_EQUAL(own.n, 0); /* the owner forgot it */
    CU_ASSERT_EQUAL(r.calls, 1);
    CU_ASSERT_EQUAL(r.status, KB_E_TIMEOUT);
    CU_ASSERT_PTR_NULL(r.body);
    CU_ASSERT_EQUAL(kb_req_local_cancel(req, KB_E_CANCELLED), KB_E_STATE);
    CU_ASSERT_EQUAL(own.cancels, 1);
    kb_req_local_release(req);
    CU_ASSERT_EQUAL(r.calls, 1);
    rec_free(&r);

    /* deferred, no cancel callback: done at once; the owner's late completion is refused
     * and releases the owner's reference (ASan: no leak) */
    owner_reset();
    rec_init(&r);
    req = mk(reg, &r, 2, "d", NULL);
    kb_req_local_run(req);
    held = owner_take();
    CU_ASSERT_PTR_EQUAL(held, req);
    CU_ASSERT_EQUAL(kb_req_local_cancel(req, KB_E_CANCELLED), 0);
    CU_ASSERT_EQUAL(r.calls, 1);
    CU_ASSERT_EQUAL(r.status, KB_E_CANCELLED);
    kb_req_local_release(req);
    {
        kb_resp_t *resp = kb_resp_new();
        kb_resp_append_copy(resp, "x", 1);
        CU_ASSERT_EQUAL(kb_req_complete(held, resp), KB_E_CANCELLED);
    }
    CU_ASSERT_EQUAL(r.calls, 1);
    rec_free(&r);

    /* cancelled while its handler runs: the deferral is refused, done follows the handler */
    owner_reset();
    rec_init(&r);
    req = mk(reg, &r, 0, "K", NULL);
    kb_req_local_run(req);
    CU_ASSERT_EQUAL(own.defer_rc, KB_E_CANCELLED);
    CU_ASSERT_EQUAL(own.cancels, 0); /* never deferred: no cancel callback */
    CU_ASSERT_EQUAL(r.calls, 1);
    CU_ASSERT_EQUAL(r.status, KB_E_CANCELLED);
    kb_req_local_release(req);
    rec_free(&r);

    /* cancelled before it ran */
    rec_init(&r);
    req = mk(reg, &r, 0, "R", NULL);
    CU_ASSERT_EQUAL(kb_req_local_cancel(req, KB_E_TIMEOUT), 0);
    CU_ASSERT_EQUAL(r.calls, 0);
    kb_req_local_run(req);
    CU_ASSERT_EQUAL(r.calls, 1);
    CU_ASSERT_EQUAL(r.status, KB_E_TIMEOUT);
    kb_req_local_release(req);
    rec_free(&r);
    kb_api_registry_free(reg);
}

/* ---- completions racing cancellations ---- */

typedef struct race_s {
    kb_req_t *req[NRACE];
    rec_t rec[NRACE];
    int cancel_rc[NRACE];
    atomic_int completed_ok;
} race_t;

static void *race_completer(void *arg)
{
    race_t *rc = arg;
    for (;;) {
        kb_req_t *req;
        pthread_mutex_lock(&own.mu);
        if (own.n == 0) {
            pthread_mutex_unlock(&own.mu);
            break;
        }
        req = own.held[--own.n];
        {
            kb_resp_t *resp = kb_resp_new();
            kb_resp_append_copy(resp, "ok", 2);
            if (kb_req_complete(req, resp) == 0)
                atomic_fetch_add(&rc->completed_ok, 1);
        }
        pthread_mutex_unlock(&own.mu);
    }
    return NULL;
}

static void *race_canceller(void *arg)
{
    race_t *rc = arg;
    for (int i = NRACE - 1; i >= 0; i--)
        rc->cancel_rc[i] = kb_req_local_cancel(rc->req[i], KB_E_TIMEOUT);
    return NULL;
}

static void test_race(void)
{
    kb_api_registry_t *reg = reg_new();
    race_t *rc = calloc(1, sizeof(*rc));
    pthread_t a, b;
    int ok = 0, timeouts = 0, cancelled_ok = 0;

    for (int i = 0; i < NRACE; i++) {
        rec_init(&rc->rec[i]);
        rc->req[i] = mk(reg, &rc->rec[i], 1, "D", NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(rc->req[i]);
        kb_req_local_run(rc->req[i]);
    }
    CU_ASSERT_EQUAL(own.n, NRACE);
    pthread_create(&a, NULL, race_completer, rc);
    pthread_create(&b, NULL, race_canceller, rc);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    for (int i = 0; i < NRACE; i++) {
        rec_t *r = &rc->rec[i];
        CU_ASSERT_EQUAL(r->calls, 1);
        if (r->status == 0) {
            ok++;
            CU_ASSERT(r->len == 2 && memcmp(r->body, "ok", 2) == 0);
            CU_ASSERT_EQUAL(rc->cancel_rc[i], KB_E_STATE);
        } else {
            timeouts += r->status == KB_E_TIMEOUT;
            cancelled_ok += rc->cancel_rc[i] == 0;
        }
        kb_req_local_release(rc->req[i]);
        rec_free(r);
    }
    CU_ASSERT_EQUAL(ok, atomic_load(&rc->completed_ok));
    CU_ASSERT_EQUAL(ok + timeouts, NRACE);
    CU_ASSERT_EQUAL(cancelled_ok, timeouts);
    CU_ASSERT_EQUAL(own.cancels, timeouts);
    free(rc);
    kb_api_registry_free(reg);
}

int main(void)
{
    CU_pSuite s;
    char path[] = "/tmp/kbt_local_XXXXXX";
    int failed;

    kb_log_set_level(KB_LOG_ERROR);
    for (size_t i = 0; i < sizeof(file_bytes); i++)
        file_bytes[i] = (uint8_t)(i * 13 + 5);
    file_fd = mkstemp(path);
    if (file_fd < 0 || write(file_fd, file_bytes, sizeof(file_bytes)) != sizeof(file_bytes))
        return 1;
    unlink(path);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("kb_req_local", NULL, NULL);
    CU_add_test(s, "answered at once: memory + file segments flattened", test_immediate);
    CU_add_test(s, "no response, refusal, defer-and-answer", test_no_response_and_refusal);
    CU_add_test(s, "argument errors, unregistered API", test_errors);
    CU_add_test(s, "deferred, completed on another thread", test_deferred_completed_elsewhere);
    CU_add_test(s, "cancel: deferred, without callback, running, before run", test_cancel);
    CU_add_test(s, "completions racing cancellations: done exactly once", test_race);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = (int)CU_get_number_of_failures();
    CU_cleanup_registry();
    close(file_fd);
    return failed ? 1 : 0;
}
