/*
 * fakehost_test.c - the fake host behaves as its header promises (it is the ground every
 * plugin unit test stands on).
 */
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "fakehost.h"
#include "fh_cunit.h"

static const kbx_uuid_t T1 = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};

/* --- timers and tasks ------------------------------------------------------------------- */

static void fh_test_count_cb(void *arg)
{
    (*(int *)arg)++;
}

static void fh_test_timers(void)
{
    fakehost_t *fh = fakehost_new(NULL);
    const kbx_api_t *api = fakehost_api(fh);
    kbx_timer_t *once, *every;
    int n_once = 0, n_every = 0;

    CU_ASSERT_EQUAL(api->timer_start(fh, 100, 0, fh_test_count_cb, &n_once, &once), KBX_OK);
    CU_ASSERT_EQUAL(api->timer_start(fh, 50, 50, fh_test_count_cb, &n_every, &every), KBX_OK);
    fakehost_run_until_idle(fh);
    CU_ASSERT_EQUAL(n_once + n_every, 0);
    fakehost_advance_ms(fh, 99);
    CU_ASSERT_EQUAL(n_once, 0);
    CU_ASSERT_EQUAL(n_every, 1);
    fakehost_advance_ms(fh, 1);
    CU_ASSERT_EQUAL(n_once, 1);
    CU_ASSERT_EQUAL(n_every, 2);
    fakehost_advance_ms(fh, 1000);
    CU_ASSERT_EQUAL(n_once, 1);
    CU_ASSERT_EQUAL(n_every, 22);
    api->timer_cancel(fh, every);
    fakehost_advance_ms(fh, 1000);
    CU_ASSERT_EQUAL(n_every, 22);
    CU_ASSERT_NOT_EQUAL(fakehost_check_clean(fh, NULL, 0), 0); /* `once` still owned */
    api->timer_cancel(fh, once);
    CU_ASSERT_EQUAL(fakehost_check_clean(fh, NULL, 0), 0);
    fakehost_free(fh);
}

typedef struct fh_test_worker {
    fakehost_t *fh;
    kbx_latch_t *latch;
    int stop;
    int wakeups;
    int timeouts;
} fh_test_worker_t;

static int32_t fh_test_worker_fn(void *arg)
{
    fh_test_worker_t *w = arg;
    const kbx_api_t *api = fakehost_api(w->fh);

    if (w->stop)
        return KBX_THREAD_EXIT;
    if (api->latch_wait(w->fh, w->latch, 1000) == KBX_OK)
        w->wakeups++;
    else
        w->timeouts++;
    return KBX_THREAD_CONTINUE;
}

static void fh_test_tasks(void)
{
    fakehost_t *fh = fakehost_new(NULL);
    const kbx_api_t *api = fakehost_api(fh);
    fh_test_worker_t w = {.fh = fh};
    kbx_thread_t *t;

    CU_ASSERT_EQUAL(api->latch_create(fh, &w.latch), KBX_OK);
    CU_ASSERT_EQUAL(api->thread_start(fh, "worker", fh_test_worker_fn, &w, &t), KBX_OK);
    CU_ASSERT_EQUAL(fakehost_thread_count(fh), 1);
    fakehost_run_until_idle(fh);
    /* First step waited and parked (the fake's wait returns at once inside a task). */
    CU_ASSERT_EQUAL(w.timeouts, 1);
    CU_ASSERT_EQUAL(fakehost_run_until_idle(fh), 0);
    api->latch_set(fh, w.latch);
    fakehost_run_until_idle(fh);
    CU_ASSERT_EQUAL(w.wakeups, 1);
    fakehost_advance_ms(fh, 999);
    CU_ASSERT_EQUAL(w.timeouts, 1 + 1); /* resumed once at its deadline, parked again */
    fakehost_advance_ms(fh, 1000);
    CU_ASSERT_EQUAL(w.timeouts, 3);
    w.stop = 1;
    api->latch_set(fh, w.latch);
    CU_ASSERT_EQUAL(api->thread_join(fh, t), KBX_OK);
    CU_ASSERT_EQUAL(fakehost_thread_count(fh), 0);
    /* The exiting step did not consume the wake-up; a poll does. */
    CU_ASSERT_EQUAL(api->latch_wait(fh, w.latch, 0), KBX_OK);
    CU_ASSERT_EQUAL(api->latch_wait(fh, w.latch, 0), KBX_ERR_TIMEOUT);
    /* A blocking wait on the test thread times out in simulated time. */
    CU_ASSERT_EQUAL(api->latch_wait(fh, w.latch, 250), KBX_ERR_TIMEOUT);
    CU_ASSERT_EQUAL(fakehost_now_ms(fh), 1999 + 250);
    api->latch_destroy(fh, w.latch);
    CU_ASSERT_EQUAL(fakehost_check_clean(fh, NULL, 0), 0);
    fakehost_free(fh);
}

/* --- memory ------------------------------------------------------------------------------ */

static jmp_buf fh_test_jmp;
static char fh_test_fatal_msg[256];

static void fh_test_fatal(void *arg, const char *file, int line, const char *msg)
{
    strncpy(fh_test_fatal_msg, msg, sizeof(fh_test_fatal_msg) - 1);
    longjmp(fh_test_jmp, 1);
}

static void fh_test_memory(void)
{
    fakehost_t *a = fakehost_new(NULL), *b = fakehost_new(NULL);
    const kbx_api_t *api = fakehost_api(a);
    void *p, *q, *r;
    char buf[256];

    fakehost_fail_alloc(a, 1, false);
    p = api->mem_alloc(a, 10);
    CU_ASSERT_PTR_NOT_NULL(p);
    CU_ASSERT_PTR_NULL(api->mem_alloc(a, 10));
    q = api->mem_calloc(a, 2, 8);
    CU_ASSERT_PTR_NOT_NULL(q);
    CU_ASSERT_EQUAL(fakehost_alloc_failures(a), 1);
    CU_ASSERT_PTR_NULL(api->mem_calloc(a, SIZE_MAX, 2));
    fakehost_fail_alloc(a, 0, true);
    CU_ASSERT_PTR_NULL(api->mem_realloc(a, p, 100));
    CU_ASSERT_PTR_NULL(api->mem_alloc(a, 1));
    fakehost_fail_alloc(a, -1, false);
    r = api->mem_realloc(a, p, 100);
    CU_ASSERT_PTR_NOT_NULL(r);
    CU_ASSERT_EQUAL(fakehost_live_allocs(a), 2);
    CU_ASSERT_EQUAL(fakehost_check_clean(a, buf, sizeof(buf)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "2 allocations"));

    /* Freeing memory of another host is caught. */
    fakehost_set_fatal(b, fh_test_fatal, NULL);
    if (setjmp(fh_test_jmp) == 0) {
        api->mem_free(b, q);
        CU_FAIL("foreign free not detected");
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(fh_test_fatal_msg, "not memory from this host"));
    api->mem_free(a, q);
    api->mem_free(a, r);
    CU_ASSERT_EQUAL(fakehost_check_clean(a, NULL, 0), 0);
    fakehost_free(a);
    fakehost_free(b);
}

/* --- partition logs ---------------------------------------------------------------------- */

static void fh_test_append(const kbx_api_t *api, fakehost_t *fh, kbx_partition_t *p, int64_t base,
                           int32_t epoch, int64_t pid, bool txn, int32_t n, int32_t expect)
{
    uint8_t *b;
    size_t len;

    CU_ASSERT_EQUAL_FATAL(fakehost_batch_build(base, epoch, pid, 0, txn, n, &b, &len), 0);
    CU_ASSERT_EQUAL(api->log_append(fh, p, b, len, NULL), expect);
    free(b);
}

static void fh_test_logs(void)
{
    fakehost_t *fh = fakehost_new(NULL);
    const kbx_api_t *api = fakehost_api(fh);
    kbx_partition_t *p;
    kbx_log_offsets_t o = {.struct_size = sizeof(o)};
    kbx_append_result_t res = {.struct_size = sizeof(res)};
    kbx_control_batch_t abort_b = {.struct_size = sizeof(abort_b),
                                   .control_type = KBX_CONTROL_ABORT,
                                   .producer_id = 7,
                                   .leader_epoch = 9,
                                   .timestamp_ms = -1};
    int32_t ep;
    int64_t end;
    uint8_t *b;
    size_t len;

    CU_ASSERT_EQUAL(fakehost_partition_add(fh, &T1, "t1", 0, 5, true, KBX_WRITE_READ_ONLY), 0);
    CU_ASSERT_EQUAL(api->partition_acquire(fh, &T1, 0, 4, &p), KBX_ERR_FENCED);
    CU_ASSERT_EQUAL(api->partition_acquire(fh, &T1, 1, -1, &p), KBX_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL_FATAL(api->partition_acquire(fh, &T1, 0, 5, &p), KBX_OK);

    fh_test_append(api, fh, p, 0, 1, -1, false, 3, KBX_OK); /* 0..2 epoch 1 */
    fh_test_append(api, fh, p, 2, 1, -1, false, 1, KBX_ERR_OFFSET);
    fh_test_append(api, fh, p, 10, 3, 7, true, 2, KBX_OK); /* 10..11 epoch 3, txn */
    CU_ASSERT_EQUAL(api->log_offsets(fh, p, &o), KBX_OK);
    CU_ASSERT_EQUAL(o.log_end_offset, 12);
    CU_ASSERT_EQUAL(o.high_watermark, 12);
    CU_ASSERT_EQUAL(o.last_stable_offset, 10);
    CU_ASSERT_EQUAL(o.latest_cached_epoch, 3);
    CU_ASSERT_EQUAL(o.leader_epoch, 5);

    /* Corrupt CRC is refused and nothing is stored. */
    CU_ASSERT_EQUAL_FATAL(fakehost_batch_build(12, 3, -1, 0, false, 1, &b, &len), 0);
    b[len - 1] ^= 1;
    CU_ASSERT_EQUAL(api->log_append(fh, p, b, len, NULL), KBX_ERR_CORRUPT);
    CU_ASSERT_EQUAL(api->log_append(fh, p, b, 30, NULL), KBX_ERR_CORRUPT);
    free(b);

    CU_ASSERT_EQUAL(api->log_append_control(fh, p, &abort_b, &res), KBX_OK);
    CU_ASSERT_EQUAL(res.first_offset, 12);
    CU_ASSERT_EQUAL(api->log_offsets(fh, p, &o), KBX_OK);
    CU_ASSERT_EQUAL(o.last_stable_offset, 13);
    CU_ASSERT_EQUAL(o.latest_cached_epoch, 9);

    /* Epoch lookups, Kafka semantics. */
    CU_ASSERT_EQUAL(api->log_epoch_end_offset(fh, p, 9, &ep, &end), KBX_OK);
    CU_ASSERT(ep == 9 && end == 13);
    CU_ASSERT_EQUAL(api->log_epoch_end_offset(fh, p, 2, &ep, &end), KBX_OK);
    CU_ASSERT(ep == 1 && end == 10);
    CU_ASSERT_EQUAL(api->log_epoch_end_offset(fh, p, 0, &ep, &end), KBX_OK);
    CU_ASSERT(ep == 0 && end == 0);
    CU_ASSERT_EQUAL(api->log_epoch_end_offset(fh, p, 10, &ep, &end), KBX_OK);
    CU_ASSERT(ep == -1 && end == -1);

    CU_ASSERT_EQUAL(api->log_truncate(fh, p, 10), KBX_OK);
    CU_ASSERT_EQUAL(api->log_offsets(fh, p, &o), KBX_OK);
    CU_ASSERT_EQUAL(o.log_end_offset, 10);
    CU_ASSERT_EQUAL(o.latest_cached_epoch, 1);
    /* inside a batch: the whole batch goes, the log ends at its base (kbx.h) */
    fh_test_append(api, fh, p, 10, 9, -1, false, 4, KBX_OK);
    CU_ASSERT_EQUAL(api->log_truncate(fh, p, 12), KBX_OK);
    CU_ASSERT_EQUAL(api->log_offsets(fh, p, &o), KBX_OK);
    CU_ASSERT_EQUAL(o.log_end_offset, 10);
    CU_ASSERT_EQUAL(o.latest_cached_epoch, 1);
    CU_ASSERT_EQUAL(api->log_set_start(fh, p, 3), KBX_OK);
    CU_ASSERT_EQUAL(api->log_truncate(fh, p, 2), KBX_ERR_OFFSET);

    /* Writable partitions refuse mirror appends; a new epoch fences the handle. */
    CU_ASSERT_EQUAL(api->partition_set_write_mode(fh, p, KBX_WRITE_WRITABLE), KBX_OK);
    fh_test_append(api, fh, p, 10, 1, -1, false, 1, KBX_ERR_STATE);
    CU_ASSERT_EQUAL(fakehost_partition_set_leader(fh, &T1, 0, 6, true), 0);
    CU_ASSERT_EQUAL(fakehost_partition_write_mode(fh, &T1, 0), KBX_WRITE_PENDING);
    CU_ASSERT_EQUAL(api->log_offsets(fh, p, &o), KBX_ERR_FENCED);
    api->partition_release(fh, p);
    CU_ASSERT_EQUAL_FATAL(api->partition_acquire(fh, &T1, 0, -1, &p), KBX_OK);
    fakehost_fail_appends(fh, 1, KBX_ERR_IO);
    fh_test_append(api, fh, p, 10, 6, -1, false, 1, KBX_ERR_IO);
    fh_test_append(api, fh, p, 10, 6, -1, false, 1, KBX_OK);
    api->partition_release(fh, p);
    CU_ASSERT_EQUAL(fakehost_check_clean(fh, NULL, 0), 0);
    fakehost_free(fh);
}

/* --- RPC tokens -------------------------------------------------------------------------- */

typedef struct fh_test_rpc {
    fakehost_t *fh;
    kbx_token_t *held;
    int cancels;
    int32_t complete_in_cancel;
} fh_test_rpc_t;

static int32_t fh_test_handle(void *ctx, const kbx_rpc_request_t *req, kbx_token_t *token,
                              void **token_ctx)
{
    fh_test_rpc_t *t = ctx;
    const kbx_api_t *api = fakehost_api(t->fh);

    if (req->body_len == 1 && req->body[0] == 'd') {
        api->complete_response(t->fh, token, (const uint8_t *)"ok", 2);
        return KBX_RPC_DONE;
    }
    t->held = token;
    *token_ctx = t;
    return KBX_RPC_PENDING;
}

static void fh_test_cancel(void *ctx, kbx_token_t *token, void *token_ctx)
{
    fh_test_rpc_t *t = token_ctx;

    t->cancels++;
    /* A completion racing with the cancel is harmless. */
    t->complete_in_cancel =
        fakehost_api(t->fh)->complete_response(t->fh, token, (const uint8_t *)"x", 1);
}

static const kbx_rpc_ops_t fh_test_ops = {
    .struct_size = sizeof(kbx_rpc_ops_t),
    .api_key = 95,
    .min_version = 0,
    .max_version = 1,
    .first_flexible_version = 0,
    .handle = fh_test_handle,
    .cancel = fh_test_cancel,
};

static void fh_test_rpc(void)
{
    fakehost_t *fh = fakehost_new(NULL);
    const kbx_api_t *api = fakehost_api(fh);
    fh_test_rpc_t t = {.fh = fh};
    kbx_rpc_reg_t *reg, *reg2;
    fakehost_call_t *c1, *c2;
    const uint8_t *resp;
    size_t len;

    CU_ASSERT_EQUAL(api->rpc_register(fh, &fh_test_ops, &t, &reg), KBX_OK);
    CU_ASSERT_EQUAL(api->rpc_register(fh, &fh_test_ops, &t, &reg2), KBX_ERR_EXISTS);
    CU_ASSERT_EQUAL(fakehost_rpc_call(fh, 95, 0, (const uint8_t *)"d", 1, &c1), KBX_RPC_DONE);
    resp = fakehost_call_response(c1, &len);
    CU_ASSERT(resp != NULL && len == 2 && memcmp(resp, "ok", 2) == 0);
    CU_ASSERT_EQUAL(fakehost_rpc_call(fh, 95, 2, (const uint8_t *)"d", 1, &c1),
                    KBX_ERR_UNSUPPORTED);
    CU_ASSERT_EQUAL(fakehost_rpc_call(fh, 95, 1, (const uint8_t *)"p", 1, &c1), KBX_RPC_PENDING);
    CU_ASSERT_EQUAL(fakehost_rpc_call(fh, 95, 1, (const uint8_t *)"p", 1, &c2), KBX_RPC_PENDING);
    CU_ASSERT_EQUAL(api->complete_response(fh, t.held, (const uint8_t *)"late", 4), KBX_OK);
    CU_ASSERT_EQUAL(fakehost_call_state(c2), FAKEHOST_CALL_COMPLETED);
    CU_ASSERT_EQUAL(fakehost_check_clean(fh, NULL, 0), -1); /* c1 pending, reg */
    fakehost_rpc_disconnect(fh, c1);
    CU_ASSERT_EQUAL(t.cancels, 1);
    CU_ASSERT_EQUAL(t.complete_in_cancel, KBX_ERR_CANCELLED);
    CU_ASSERT_EQUAL(fakehost_call_state(c1), FAKEHOST_CALL_CANCELLED);
    api->rpc_unregister(fh, reg);
    CU_ASSERT_EQUAL(fakehost_check_clean(fh, NULL, 0), 0);
    fakehost_free(fh);
}

/* --- asynchronous operations -------------------------------------------------------------- */

typedef struct fh_test_async {
    int calls;
    int32_t status;
    size_t len;
} fh_test_async_t;

static void fh_test_done(void *arg, int32_t status)
{
    fh_test_async_t *a = arg;
    a->calls++;
    a->status = status;
}

static void fh_test_resp(void *arg, int32_t status, const uint8_t *body, size_t len)
{
    fh_test_async_t *a = arg;
    a->calls++;
    a->status = status;
    a->len = len;
}

static int32_t fh_test_req_handler(void *arg, int32_t broker_id, int16_t api_key,
                                   int16_t api_version, const uint8_t *body, size_t len,
                                   uint8_t **resp, size_t *resp_len)
{
    *resp = malloc(len * 2);
    memcpy(*resp, body, len);
    memcpy(*resp + len, body, len);
    *resp_len = len * 2;
    return KBX_OK;
}

static void fh_test_async(void)
{
    fakehost_t *fh = fakehost_new(NULL);
    const kbx_api_t *api = fakehost_api(fh);
    fh_test_async_t a = {0}, b = {0}, c = {0};
    kbx_partition_t *p;
    kbx_log_offsets_t o = {.struct_size = sizeof(o)};

    fakehost_set_request_handler(fh, fh_test_req_handler, NULL);
    CU_ASSERT_EQUAL(
        api->local_request(fh, 19, 7, (const uint8_t *)"abc", 3, 1000, fh_test_resp, &a), KBX_OK);
    CU_ASSERT_EQUAL(a.calls, 0); /* never inside the starting call */
    fakehost_inject_request_error(fh, FAKEHOST_ANY_BROKER, -1, KBX_ERR_NETWORK, 1);
    CU_ASSERT_EQUAL(
        api->broker_request(fh, 2, 100, 0, (const uint8_t *)"x", 1, 1000, fh_test_resp, &b),
        KBX_OK);
    fakehost_run_until_idle(fh);
    CU_ASSERT(a.calls == 1 && a.status == KBX_OK && a.len == 6);
    CU_ASSERT(b.calls == 1 && b.status == KBX_ERR_NETWORK);

    /* Held operations time out in simulated time. */
    CU_ASSERT_EQUAL(fakehost_partition_add(fh, &T1, "t1", 0, 5, true, KBX_WRITE_READ_ONLY), 0);
    CU_ASSERT_EQUAL_FATAL(api->partition_acquire(fh, &T1, 0, -1, &p), KBX_OK);
    fakehost_hold_async(fh, true);
    CU_ASSERT_EQUAL(api->leader_epoch_bump(fh, p, 8, 500, fh_test_done, &c), KBX_OK);
    fakehost_advance_ms(fh, 499);
    CU_ASSERT_EQUAL(c.calls, 0);
    CU_ASSERT_EQUAL(fakehost_pending_async(fh), 1);
    fakehost_advance_ms(fh, 1);
    CU_ASSERT(c.calls == 1 && c.status == KBX_ERR_TIMEOUT);
    fakehost_hold_async(fh, false);
    CU_ASSERT_EQUAL(api->leader_epoch_bump(fh, p, 8, 500, fh_test_done, &c), KBX_OK);
    fakehost_run_until_idle(fh);
    CU_ASSERT(c.calls == 2 && c.status == KBX_OK);
    CU_ASSERT_EQUAL(api->log_offsets(fh, p, &o), KBX_ERR_FENCED);
    api->partition_release(fh, p);
    CU_ASSERT_EQUAL_FATAL(api->partition_acquire(fh, &T1, 0, 8, &p), KBX_OK);
    api->partition_release(fh, p);
    CU_ASSERT_EQUAL(fakehost_check_clean(fh, NULL, 0), 0);
    fakehost_free(fh);
}

static CU_TestInfo fh_tests[] = {
    {"timers", fh_test_timers},  {"tasks and latches", fh_test_tasks},
    {"memory", fh_test_memory},  {"partition logs", fh_test_logs},
    {"rpc tokens", fh_test_rpc}, {"async operations", fh_test_async},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo fh_suites[] = {
    {"fakehost", NULL, NULL, NULL, NULL, fh_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(fh_suites);
}
