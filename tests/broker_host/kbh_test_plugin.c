/*
 * kbh_test_plugin.c -- a kbx plugin that exercises every function of the kbx table inside a
 * real kbroker and reports through an RPC, for tests/broker_host/kbh_test.c.
 *
 * It registers ListMirrors (key 98, v0, flexible): the request's client id is a command
 * ("basic", "topic:NAME", "append:NAME", ...). The handler only enqueues and returns PENDING; a
 * host-lent worker thread runs the command and completes the token with a ListMirrorsResponse
 * whose Mirrors are the checks made: MirrorName = check, SourceBootstrap = "ok" or "FAIL: why",
 * SourceClusterId = detail (hex bytes, ids), TopicCount = a number. "hold" is never completed:
 * the client disconnects and the plugin's cancel op counts it ("status" reports the count).
 * "authz:RT,OP,HOST,NAME:PRINCIPAL" makes one authorize() call (tests/broker_acl).
 *
 * Links the protocol runtime (kp) statically for the codecs and the batch builder; exports only
 * kbx_plugin_entry (kbh_test_plugin.map). All state hangs off one kbh_t.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kbx.h"
#include "kp_batch.h"
#include "kp_msgs.h"

#define KBH_MAGIC    0x6b626874u
#define KBH_MAX_RES  64
#define KBH_WAIT_MS  10000
#define KBH_REC_TYPE 7

typedef struct kbh_res {
    char name[64];
    char status[256];
    char info[2048];
    int32_t value;
} kbh_res_t;

typedef struct kbh_cmd {
    struct kbh_cmd *next;
    kbx_token_t *tok;
    bool cancelled;
    bool hold;
    char text[256];
} kbh_cmd_t;

typedef struct kbh_topic {
    char name[256];
    kbx_uuid_t id;
    int32_t parts;
} kbh_topic_t;

typedef struct kbh_lead {
    kbx_uuid_t id;
    int32_t partition;
    int32_t role;
    int32_t epoch;
    int32_t leader_id; /* as the last change reported it */
} kbh_lead_t;

typedef struct kbh_rec {
    char key[64];
    char value[64];
    bool present;
} kbh_rec_t;

typedef struct kbh {
    uint32_t magic;
    const kbx_api_t *api;
    kbx_host_t *host;
    int32_t broker_id;
    pthread_mutex_t mu; /* queue, listener state, cancel vs completion */
    kbh_cmd_t *q_head, *q_tail;
    kbh_cmd_t *held;
    int cancels, cancel_ctx_ok;
    kbx_latch_t *latch, *oplatch;
    kbx_thread_t *worker;
    atomic_bool stop;
    kbx_rpc_reg_t *rpc;
    kbx_listener_t *md, *lead;
    /* metadata listener */
    bool first_delta_seen, first_was_snapshot, snapshot_had_self;
    int deltas;
    uint32_t brk_registered, brk_fenced; /* bit i: broker id i (0..30) as the deltas left it */
    kbh_topic_t topics[128];
    int ntopics;
    kbh_rec_t recs[16];
    int nrecs, rec_deltas;
    /* leadership listener */
    bool first_lead_seen;
    int lead_calls;
    kbh_lead_t leads[512];
    int nleads;
    /* timers */
    kbx_timer_t *oneshot, *periodic, *selfcancel;
    atomic_int oneshot_fired, periodic_ticks, selfcancel_ticks;
    /* metrics */
    kbx_metric_t *m_req, *m_gauge, *m_hist;
    /* the asynchronous operation in flight (one at a time, from the worker) */
    atomic_int op_done;
    atomic_int op_in_call_violation;
    atomic_bool op_in_call;
    pthread_t op_caller;
    int32_t op_status;
    uint8_t *op_resp;
    size_t op_resp_len;
    int bump_seen_epoch; /* leadership epoch seen when the bump completed */
    bool bump_active;
    kbx_uuid_t bump_id;
    int32_t bump_part;
    /* aux thread */
    atomic_int aux_count;
    /* local requests running side by side: [0] a Fetch waiting for a produce, [1] a Fetch held
     * until the plugin is unloaded */
    struct kbh_lop {
        struct kbh *p;
        atomic_int calls;
        int32_t status;
        uint8_t *resp;
        size_t len;
        int64_t start_ns, end_ns;
        char value[64]; /* the record value the Fetch waits for */
    } lops[2];
} kbh_t;

typedef struct kbh_lop kbh_lop_t;

/* ---- helpers --------------------------------------------------------------------------------- */

static void kbh_log(kbh_t *p, int32_t lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void kbh_log(kbh_t *p, int32_t lvl, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    if (!p->api->log_enabled(p->host, lvl, "kbh.test"))
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    p->api->log_write(p->host, lvl, "kbh.test", buf);
}

typedef struct kbh_results {
    kbh_res_t v[KBH_MAX_RES];
    int n;
} kbh_results_t;

static void kbh_check(kbh_results_t *R, const char *name, bool ok, int32_t value, const char *info,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void kbh_check(kbh_results_t *R, const char *name, bool ok, int32_t value, const char *info,
                      const char *fmt, ...)
{
    kbh_res_t *r;
    va_list ap;
    if (R->n >= KBH_MAX_RES)
        return;
    r = &R->v[R->n++];
    snprintf(r->name, sizeof(r->name), "%s", name);
    snprintf(r->info, sizeof(r->info), "%s", info ? info : "");
    r->value = value;
    if (ok) {
        snprintf(r->status, sizeof(r->status), "ok");
    } else {
        char why[200];
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        snprintf(r->status, sizeof(r->status), "FAIL: %s", why);
    }
}

#define CHECK(R, name, cond, ...) kbh_check((R), (name), (cond), 0, NULL, __VA_ARGS__)

static void kbh_hex(const uint8_t *b, size_t n, char *out, size_t out_size)
{
    static const char hx[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < n && o + 2 < out_size; i++) {
        out[o++] = hx[b[i] >> 4];
        out[o++] = hx[b[i] & 15];
    }
    out[o] = '\0';
}

static kbh_topic_t *kbh_topic_find(kbh_t *p, const char *name)
{
    for (int i = 0; i < p->ntopics; i++)
        if (!strcmp(p->topics[i].name, name))
            return &p->topics[i];
    return NULL;
}

static kbh_lead_t *kbh_lead_find(kbh_t *p, const kbx_uuid_t *id, int32_t partition)
{
    for (int i = 0; i < p->nleads; i++)
        if (!memcmp(p->leads[i].id.bytes, id->bytes, 16) && p->leads[i].partition == partition)
            return &p->leads[i];
    return NULL;
}

/* ---- asynchronous operations: started by the worker, awaited on oplatch ---------------------- */

static void kbh_op_begin(kbh_t *p)
{
    atomic_store(&p->op_done, 0);
    p->op_status = 1;
    p->api->mem_free(p->host, p->op_resp);
    p->op_resp = NULL;
    p->op_resp_len = 0;
    p->op_caller = pthread_self();
    atomic_store(&p->op_in_call, true);
}

static void kbh_op_started(kbh_t *p)
{
    atomic_store(&p->op_in_call, false);
}

static void kbh_done_cb(void *arg, int32_t status)
{
    kbh_t *p = arg;
    /* kbx.h: never on the starting thread before the starting call returned */
    if (atomic_load(&p->op_in_call) && pthread_equal(p->op_caller, pthread_self()))
        atomic_fetch_add(&p->op_in_call_violation, 1);
    pthread_mutex_lock(&p->mu);
    p->op_status = status;
    if (status == KBX_OK && p->bump_active) {
        kbh_lead_t *l = kbh_lead_find(p, &p->bump_id, p->bump_part);
        p->bump_seen_epoch = l ? l->epoch : -1;
    }
    pthread_mutex_unlock(&p->mu);
    atomic_store(&p->op_done, 1);
    p->api->latch_set(p->host, p->oplatch);
}

static void kbh_resp_cb(void *arg, int32_t status, const uint8_t *body, size_t len)
{
    kbh_t *p = arg;
    if (atomic_load(&p->op_in_call) && pthread_equal(p->op_caller, pthread_self()))
        atomic_fetch_add(&p->op_in_call_violation, 1);
    p->op_status = status;
    if (status == KBX_OK) {
        p->op_resp = p->api->mem_alloc(p->host, len ? len : 1);
        if (p->op_resp) {
            memcpy(p->op_resp, body, len);
            p->op_resp_len = len;
        }
    }
    atomic_store(&p->op_done, 1);
    p->api->latch_set(p->host, p->oplatch);
}

/* Wait for the callback. Returns the operation's status, or KBX_ERR_TIMEOUT. */
static int32_t kbh_op_wait(kbh_t *p)
{
    int64_t end = p->api->clock_monotonic_ns(p->host) + (int64_t)KBH_WAIT_MS * 1000000;
    while (!atomic_load(&p->op_done)) {
        if (p->api->clock_monotonic_ns(p->host) > end)
            return KBX_ERR_TIMEOUT;
        p->api->latch_wait(p->host, p->oplatch, 50);
    }
    return p->op_status;
}

/* ---- timers and the aux thread --------------------------------------------------------------- */

static void kbh_oneshot_cb(void *arg)
{
    kbh_t *p = arg;
    atomic_fetch_add(&p->oneshot_fired, 1);
}

static void kbh_periodic_cb(void *arg)
{
    kbh_t *p = arg;
    atomic_fetch_add(&p->periodic_ticks, 1);
}

static void kbh_selfcancel_cb(void *arg)
{
    kbh_t *p = arg;
    if (atomic_fetch_add(&p->selfcancel_ticks, 1) + 1 == 3) {
        p->api->timer_cancel(p->host, p->selfcancel); /* a timer may cancel itself */
        p->selfcancel = NULL;
    }
}

static int32_t kbh_aux_fn(void *arg)
{
    kbh_t *p = arg;
    return atomic_fetch_add(&p->aux_count, 1) + 1 >= 3 ? KBX_THREAD_EXIT : KBX_THREAD_CONTINUE;
}

static void kbh_config_cb(void *arg, const char *key, const char *value)
{
    int *seen = arg;
    if (!strcmp(key, "mirror.test.key") && !strcmp(value, "v1"))
        (*seen) |= 1;
    if (!strcmp(key, "mirror.enable") && !strcmp(value, "true"))
        (*seen) |= 2;
}

/* ---- commands -------------------------------------------------------------------------------- */

static void kbh_cmd_basic(kbh_t *p, kbh_results_t *R)
{
    const kbx_api_t *api = p->api;
    kbx_host_info_t info, small;
    char buf[64];
    int seen = 0;
    int32_t n, rc;
    int64_t m1, m2, wall;
    uint8_t *a, *b;
    kbx_latch_t *l;
    kbx_thread_t *t;
    bool zero = true;

    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    rc = api->host_info(p->host, &info);
    CHECK(R, "host_info",
          rc == KBX_OK && info.broker_id == 1 && info.cluster_id[0] &&
              !strncmp(info.software, "kbroker ", 8),
          "rc %d id %d cluster '%s' software '%s'", rc, info.broker_id, info.cluster_id,
          info.software);
    memset(&small, 0xab, sizeof(small));
    small.struct_size = (uint32_t)offsetof(kbx_host_info_t, cluster_id);
    rc = api->host_info(p->host, &small);
    CHECK(R, "host_info_short",
          rc == KBX_OK && small.broker_id == 1 && (uint8_t)small.cluster_id[0] == 0xab,
          "a short struct_size was overwritten");

    CHECK(R, "log_enabled", api->log_enabled(p->host, KBX_LOG_INFO, "kbh.test") != 0,
          "INFO not enabled");
    api->log_write(p->host, KBX_LOG_INFO, "kbh.test", "hello from kbh\nforged line");

    a = api->mem_alloc(p->host, 100);
    b = api->mem_calloc(p->host, 10, 10);
    for (int i = 0; b && i < 100; i++)
        zero = zero && b[i] == 0;
    if (a)
        memset(a, 1, 100);
    a = api->mem_realloc(p->host, a, 1000);
    CHECK(R, "memory",
          a && b && zero && a[99] == 1 && api->mem_calloc(p->host, SIZE_MAX, 2) == NULL,
          "alloc/calloc/realloc");
    api->mem_free(p->host, a);
    api->mem_free(p->host, b);
    api->mem_free(p->host, NULL);

    m1 = api->clock_monotonic_ns(p->host);
    m2 = api->clock_monotonic_ns(p->host);
    wall = api->clock_wall_ms(p->host);
    CHECK(R, "clocks",
          m2 >= m1 && wall / 1000 - (int64_t)time(NULL) < 5 &&
              (int64_t)time(NULL) - wall / 1000 < 5,
          "monotonic %" PRId64 " %" PRId64 " wall %" PRId64, m1, m2, wall);

    n = api->config_get(p->host, "mirror.enable", buf, sizeof(buf));
    CHECK(R, "config_get_flag", n == 4 && !strcmp(buf, "true"), "mirror.enable -> %d '%s'", n, buf);
    n = api->config_get(p->host, "mirror.test.key", buf, sizeof(buf));
    CHECK(R, "config_get_mirror_key", n == 2 && !strcmp(buf, "v1"), "-> %d '%s'", n, buf);
    n = api->config_get(p->host, "mirror.test.key", buf, 2);
    CHECK(R, "config_get_truncated", n == 2 && !strcmp(buf, "v"), "-> %d '%s'", n, buf);
    n = api->config_get(p->host, "node.id", buf, sizeof(buf));
    CHECK(R, "config_get_broker_key", n == 1 && !strcmp(buf, "1"), "node.id -> %d '%s'", n, buf);
    n = api->config_get(p->host, "no.such.key", buf, sizeof(buf));
    CHECK(R, "config_get_missing", n == KBX_ERR_NOT_FOUND, "-> %d", n);
    n = api->config_foreach(p->host, "mirror.", kbh_config_cb, &seen);
    CHECK(R, "config_foreach", n >= 2 && seen == 3, "count %d seen %d", n, seen);

    rc = api->authorize(p->host, "User:alice", "127.0.0.1", 2, "t1", 3);
    CHECK(R, "authorize", rc == KBX_AUTHZ_ALLOWED, "-> %d", rc);
    rc = api->authorize(p->host, NULL, NULL, 2, "t1", 3);
    CHECK(R, "authorize_invalid", rc == KBX_ERR_INVALID, "-> %d", rc);

    api->metric_record(p->host, p->m_req, 2.5);
    api->metric_record(p->host, p->m_req, 1.0);
    api->metric_record(p->host, p->m_gauge, 7.25);
    api->metric_record(p->host, p->m_hist, 0.02);
    {
        const char *lk[] = {"plugin"}, *lv[] = {"kbh"};
        kbx_metric_desc_t d = {.struct_size = sizeof(d),
                               .type = KBX_METRIC_COUNTER,
                               .group = "kbhtest",
                               .name = "requests",
                               .label_keys = lk,
                               .label_values = lv,
                               .label_count = 1};
        kbx_metric_t *dup = NULL;
        rc = api->metric_register(p->host, &d, &dup);
        CHECK(R, "metric_exists", rc == KBX_ERR_EXISTS, "duplicate register -> %d", rc);
    }

    CHECK(R, "timer_oneshot", atomic_load(&p->oneshot_fired) == 1, "fired %d times",
          atomic_load(&p->oneshot_fired));
    CHECK(R, "timer_periodic", atomic_load(&p->periodic_ticks) >= 2, "ticks %d",
          atomic_load(&p->periodic_ticks));
    CHECK(R, "timer_self_cancel", atomic_load(&p->selfcancel_ticks) == 3, "ticks %d",
          atomic_load(&p->selfcancel_ticks));

    atomic_store(&p->aux_count, 0);
    rc = api->thread_start(p->host, "kbh-aux", kbh_aux_fn, p, &t);
    if (rc == KBX_OK)
        rc = api->thread_join(p->host, t);
    CHECK(R, "thread", rc == KBX_OK && atomic_load(&p->aux_count) == 3, "rc %d count %d", rc,
          atomic_load(&p->aux_count));

    rc = api->latch_create(p->host, &l);
    if (rc == KBX_OK) {
        int32_t w0 = api->latch_wait(p->host, l, 0);
        int32_t w1, w2;
        api->latch_set(p->host, l);
        w1 = api->latch_wait(p->host, l, 0);
        w2 = api->latch_wait(p->host, l, 10);
        api->latch_destroy(p->host, l);
        CHECK(R, "latch", w0 == KBX_ERR_TIMEOUT && w1 == KBX_OK && w2 == KBX_ERR_TIMEOUT,
              "%d %d %d", w0, w1, w2);
    } else {
        CHECK(R, "latch", false, "create -> %d", rc);
    }

    rc = api->broker_request(p->host, 99, 18, 0, NULL, 0, 1000, kbh_resp_cb, p);
    CHECK(R, "broker_request_unknown", rc == KBX_ERR_NOT_FOUND, "-> %d", rc);
    kbh_op_begin(p);
    rc = api->broker_request(p->host, 1, 18, 0, NULL, 0, 5000, kbh_resp_cb, p);
    kbh_op_started(p);
    if (rc == KBX_OK)
        rc = kbh_op_wait(p);
    CHECK(R, "broker_request_self",
          rc == KBX_OK && p->op_resp_len >= 2 && p->op_resp[0] == 0 && p->op_resp[1] == 0,
          "ApiVersions v0 to self -> %d (%zu bytes)", rc, p->op_resp_len);
    kbh_op_begin(p);
    rc = api->local_request(p->host, 18, 99, NULL, 0, 5000, kbh_resp_cb, p);
    kbh_op_started(p);
    if (rc == KBX_OK)
        rc = kbh_op_wait(p);
    CHECK(R, "local_request_bad_version", rc == KBX_ERR_UNSUPPORTED, "-> %d", rc);
    kbh_op_begin(p);
    rc = api->local_request(p->host, 2000, 0, NULL, 0, 5000, kbh_resp_cb, p);
    kbh_op_started(p);
    if (rc == KBX_OK)
        rc = kbh_op_wait(p);
    CHECK(R, "local_request_unknown_key", rc == KBX_ERR_UNSUPPORTED, "-> %d", rc);
    /* A malformed Fetch: the handler refuses it (a client's connection would be closed). */
    kbh_op_begin(p);
    rc = api->local_request(p->host, 1, 12, (const uint8_t *)"\x01", 1, 5000, kbh_resp_cb, p);
    kbh_op_started(p);
    if (rc == KBX_OK)
        rc = kbh_op_wait(p);
    CHECK(R, "local_request_malformed", rc == KBX_ERR_INVALID, "-> %d", rc);
    CHECK(R, "callbacks_never_inside_call", atomic_load(&p->op_in_call_violation) == 0,
          "%d callbacks ran inside the starting call", atomic_load(&p->op_in_call_violation));
}

static void kbh_cmd_snapshot(kbh_t *p, kbh_results_t *R)
{
    pthread_mutex_lock(&p->mu);
    CHECK(R, "metadata_snapshot_first", p->first_delta_seen && p->first_was_snapshot,
          "seen %d snapshot %d", p->first_delta_seen, p->first_was_snapshot);
    CHECK(R, "metadata_snapshot_broker", p->snapshot_had_self, "broker 1 not in the snapshot");
    CHECK(R, "leadership_first_call", p->first_lead_seen, "no leadership call");
    pthread_mutex_unlock(&p->mu);
}

static void kbh_cmd_topic(kbh_t *p, kbh_results_t *R, const char *name)
{
    kbh_topic_t *t;
    char hex[40] = "";
    int32_t parts = -1, epoch = -1, role = -1;

    pthread_mutex_lock(&p->mu);
    t = kbh_topic_find(p, name);
    if (t) {
        kbh_lead_t *l = kbh_lead_find(p, &t->id, 0);
        parts = t->parts;
        kbh_hex(t->id.bytes, 16, hex, sizeof(hex));
        if (l) {
            epoch = l->epoch;
            role = l->role;
        }
    }
    pthread_mutex_unlock(&p->mu);
    kbh_check(R, "topic_seen", t != NULL && parts > 0, parts, hex, "topic %s not seen", name);
    kbh_check(R, "leader_seen", role == KBX_ROLE_LEADER, epoch, NULL, "role %d", role);
}

/* "lead:TOPIC:PART": the last leadership change of the partition (tests/broker_cluster):
 * lead_role (KBX_ROLE_*), lead_leader (leader_id), lead_epoch as values; fails while none. */
static void kbh_cmd_lead(kbh_t *p, kbh_results_t *R, const char *name, int32_t part)
{
    kbh_topic_t *t;
    kbh_lead_t *l = NULL;
    int32_t role = -1, leader = -1, epoch = -1;

    pthread_mutex_lock(&p->mu);
    t = kbh_topic_find(p, name);
    if (t && (l = kbh_lead_find(p, &t->id, part)) != NULL) {
        role = l->role;
        leader = l->leader_id;
        epoch = l->epoch;
    }
    pthread_mutex_unlock(&p->mu);
    kbh_check(R, "lead_role", l != NULL, role, NULL, "no leadership change for %s-%d", name, part);
    kbh_check(R, "lead_leader", l != NULL, leader, NULL, "no leadership change");
    kbh_check(R, "lead_epoch", l != NULL, epoch, NULL, "no leadership change");
}

/* "breq:ID": ApiVersions v0 through broker_request to broker ID (tests/broker_cluster):
 * breq_status (the start or completion status), breq_error (the answer's ErrorCode, -1 without
 * one) and breq_keys (its ApiKeys count) as values; always ok (the test judges the values). */
static void kbh_cmd_breq(kbh_t *p, kbh_results_t *R, int32_t broker)
{
    int32_t rc, ec = -1, nkeys = -1;

    kbh_op_begin(p);
    rc = p->api->broker_request(p->host, broker, 18, 0, NULL, 0, 3000, kbh_resp_cb, p);
    kbh_op_started(p);
    if (rc == KBX_OK)
        rc = kbh_op_wait(p);
    if (rc == KBX_OK && p->op_resp && p->op_resp_len >= 6) {
        const uint8_t *b = p->op_resp;
        ec = (int16_t)((b[0] << 8) | b[1]);
        nkeys = (int32_t)(((uint32_t)b[2] << 24) | ((uint32_t)b[3] << 16) | ((uint32_t)b[4] << 8) |
                          b[5]);
    }
    kbh_check(R, "breq_status", true, rc, NULL, "-");
    kbh_check(R, "breq_error", true, ec, NULL, "-");
    kbh_check(R, "breq_keys", true, nkeys, NULL, "-");
}

static bool kbh_topic_id(kbh_t *p, const char *name, kbx_uuid_t *id)
{
    kbh_topic_t *t;
    pthread_mutex_lock(&p->mu);
    t = kbh_topic_find(p, name);
    if (t)
        *id = t->id;
    pthread_mutex_unlock(&p->mu);
    return t != NULL;
}

static void kbh_cmd_create(kbh_t *p, kbh_results_t *R, const char *name, const char *mirror)
{
    kp_CreateTopicsRequest_t req;
    kp_CreateTopicsRequest_CreatableTopic_t topic;
    kp_CreateTopicsRequest_CreatableTopicConfig_t cfg;
    kp_CreateTopicsResponse_t resp;
    kp_writer_t wr;
    kp_reader_t rd;
    kp_arena_t ar;
    int32_t rc;
    int16_t err = -1;
    char hex[40] = "";

    kp_CreateTopicsRequest_init(&req);
    kp_CreateTopicsRequest_CreatableTopic_init(&topic);
    kp_CreateTopicsRequest_CreatableTopicConfig_init(&cfg);
    topic.Name = (kp_str_t){name, (int32_t)strlen(name)};
    topic.NumPartitions = 1;
    topic.ReplicationFactor = 1;
    cfg.Name = (kp_str_t){"mirror.name", 11};
    cfg.Value = (kp_str_t){mirror, mirror ? (int32_t)strlen(mirror) : -1};
    if (mirror && mirror[0]) {
        topic.Configs.cnt = 1;
        topic.Configs.v = &cfg;
    }
    req.Topics.cnt = 1;
    req.Topics.v = &topic;
    req.TimeoutMs = 5000;
    kp_writer_init(&wr);
    kp_CreateTopicsRequest_encode(&wr, &req, 7);
    kbh_op_begin(p);
    rc = p->api->local_request(p->host, 19, 7, wr.buf, wr.len, 5000, kbh_resp_cb, p);
    kbh_op_started(p);
    kp_writer_free(&wr);
    if (rc == KBX_OK)
        rc = kbh_op_wait(p);
    kp_arena_init(&ar, 0);
    if (rc == KBX_OK) {
        kp_reader_init(&rd, p->op_resp, p->op_resp_len);
        kp_CreateTopicsResponse_init(&resp);
        if (kp_CreateTopicsResponse_decode(&rd, &ar, &resp, 7) == 0 && resp.Topics.cnt == 1) {
            err = resp.Topics.v[0].ErrorCode;
            kbh_hex(resp.Topics.v[0].TopicId.b, 16, hex, sizeof(hex));
        }
    }
    kp_arena_free(&ar);
    kbh_check(R, "local_create_topics", rc == KBX_OK && err == 0, err, hex,
              "local_request -> %d, ErrorCode %d", rc, err);
}

/* One batch of @p n records built with the protocol runtime's builder (fixed timestamps, so the
 * bytes are reproducible). */
static int kbh_batch(kp_writer_t *out, int64_t base, int32_t epoch, int64_t pid, int16_t pepoch,
                     bool txn, int n, const char *tag)
{
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    int rc = 0;
    kp_batch_opts_init(&o);
    o.baseOffset = base;
    o.partitionLeaderEpoch = epoch;
    o.producerId = pid;
    o.producerEpoch = pepoch;
    o.baseSequence = pid >= 0 ? 0 : -1;
    o.transactional = txn;
    kp_batch_builder_init(&bb, &o);
    for (int i = 0; i < n && !rc; i++) {
        char k[32], v[64];
        snprintf(k, sizeof(k), "k%d", i);
        snprintf(v, sizeof(v), "%s-value-%d", tag, i);
        rc = kp_batch_builder_add(&bb, 1700000000000 + i,
                                  (kp_bytes_t){(const uint8_t *)k, (int32_t)strlen(k)},
                                  (kp_bytes_t){(const uint8_t *)v, (int32_t)strlen(v)}, NULL, 0);
    }
    if (!rc)
        rc = kp_batch_builder_finish(&bb, out);
    kp_batch_builder_free(&bb);
    return rc;
}

static kbx_partition_t *kbh_acquire(kbh_t *p, kbh_results_t *R, const char *name, kbx_uuid_t *id)
{
    kbx_partition_t *part = NULL;
    int32_t rc;
    if (!kbh_topic_id(p, name, id)) {
        CHECK(R, "acquire", false, "topic %s unknown to the metadata listener", name);
        return NULL;
    }
    rc = p->api->partition_acquire(p->host, id, 0, -1, &part);
    if (rc != KBX_OK) {
        CHECK(R, "acquire", false, "partition_acquire(%s, 0) -> %d", name, rc);
        return NULL;
    }
    return part;
}

static int64_t kbh_leo(kbh_t *p, kbx_partition_t *part, kbx_log_offsets_t *o)
{
    memset(o, 0, sizeof(*o));
    o->struct_size = sizeof(*o);
    if (p->api->log_offsets(p->host, part, o) != KBX_OK)
        return -1;
    return o->log_end_offset;
}

static void kbh_cmd_append(kbh_t *p, kbh_results_t *R, const char *name)
{
    const kbx_api_t *api = p->api;
    kbx_uuid_t id;
    kbx_partition_t *part = kbh_acquire(p, R, name, &id);
    kbx_append_result_t ar = {.struct_size = sizeof(ar)};
    kbx_log_offsets_t o;
    kp_writer_t wa, wb;
    int64_t L;
    int32_t rc, e;
    int64_t end;
    char hex[2048];

    if (!part)
        return;
    rc = api->partition_set_write_mode(p->host, part, KBX_WRITE_READ_ONLY);
    CHECK(R, "set_read_only", rc == KBX_OK, "-> %d", rc);
    L = kbh_leo(p, part, &o);
    kp_writer_init(&wa);
    kp_writer_init(&wb);
    kbh_batch(&wa, L, 3, 1000, 0, false, 3, "a");
    kbh_batch(&wa, L + 10, 5, -1, -1, false, 2, "b");
    rc = api->log_append(p->host, part, wa.buf, wa.len, &ar);
    kbh_hex(wa.buf, wa.len, hex, sizeof(hex));
    kbh_check(R, "log_append",
              rc == KBX_OK && ar.batch_count == 2 && ar.first_offset == L &&
                  ar.last_offset == L + 11 && ar.log_end_offset == L + 12,
              (int32_t)L, hex, "rc %d count %d first %" PRId64 " last %" PRId64 " leo %" PRId64, rc,
              ar.batch_count, ar.first_offset, ar.last_offset, ar.log_end_offset);
    kbh_leo(p, part, &o);
    CHECK(R, "log_offsets",
          o.log_end_offset == L + 12 && o.high_watermark == L + 12 && o.latest_cached_epoch == 5 &&
              o.leader_epoch >= 0,
          "leo %" PRId64 " hw %" PRId64 " cached %d epoch %d", o.log_end_offset, o.high_watermark,
          o.latest_cached_epoch, o.leader_epoch);
    rc = api->log_append(p->host, part, wa.buf, wa.len, NULL);
    CHECK(R, "append_below_leo", rc == KBX_ERR_OFFSET, "-> %d", rc);
    kbh_batch(&wb, L + 12, 5, -1, -1, false, 1, "c");
    wb.buf[wb.len - 1] ^= 0x5a;
    rc = api->log_append(p->host, part, wb.buf, wb.len, NULL);
    CHECK(R, "append_bad_crc", rc == KBX_ERR_CORRUPT, "-> %d", rc);
    wb.buf[wb.len - 1] ^= 0x5a;
    api->partition_set_write_mode(p->host, part, KBX_WRITE_WRITABLE);
    rc = api->log_append(p->host, part, wb.buf, wb.len, NULL);
    CHECK(R, "append_writable_refused", rc == KBX_ERR_STATE, "-> %d", rc);
    api->partition_set_write_mode(p->host, part, KBX_WRITE_READ_ONLY);
    rc = api->partition_set_write_mode(p->host, part, 7);
    CHECK(R, "write_mode_invalid", rc == KBX_ERR_INVALID, "-> %d", rc);

    rc = api->log_epoch_end_offset(p->host, part, 3, &e, &end);
    CHECK(R, "epoch_end_3", rc == KBX_OK && e == 3 && end == L + 10, "(%d, %" PRId64 ")", e, end);
    api->log_epoch_end_offset(p->host, part, 4, &e, &end);
    CHECK(R, "epoch_end_4", e == 3 && end == L + 10, "(%d, %" PRId64 ")", e, end);
    api->log_epoch_end_offset(p->host, part, 5, &e, &end);
    CHECK(R, "epoch_end_5", e == 5 && end == L + 12, "(%d, %" PRId64 ")", e, end);
    api->log_epoch_end_offset(p->host, part, 9, &e, &end);
    CHECK(R, "epoch_end_newer", e == -1 && end == -1, "(%d, %" PRId64 ")", e, end);
    api->log_epoch_end_offset(p->host, part, -1, &e, &end);
    CHECK(R, "epoch_end_undefined", e == -1 && end == -1, "(%d, %" PRId64 ")", e, end);
    if (L == 0) {
        api->log_epoch_end_offset(p->host, part, 1, &e, &end);
        CHECK(R, "epoch_end_older", e == 1 && end == 0, "(%d, %" PRId64 ")", e, end);
    }
    kp_writer_free(&wa);
    kp_writer_free(&wb);
    api->partition_release(p->host, part);
}

static void kbh_cmd_control(kbh_t *p, kbh_results_t *R, const char *name)
{
    const kbx_api_t *api = p->api;
    kbx_uuid_t id;
    kbx_partition_t *part = kbh_acquire(p, R, name, &id);
    kbx_append_result_t ar = {.struct_size = sizeof(ar)};
    kbx_control_batch_t cb;
    kbx_log_offsets_t o;
    kp_writer_t w;
    int64_t L;
    int32_t rc;
    char info[128];

    if (!part)
        return;
    L = kbh_leo(p, part, &o);
    kp_writer_init(&w);
    kbh_batch(&w, L, 5, 2000, 1, true, 2, "txn");
    rc = api->log_append(p->host, part, w.buf, w.len, NULL);
    kbh_leo(p, part, &o);
    CHECK(R, "txn_open_lso", rc == KBX_OK && o.last_stable_offset == L,
          "rc %d lso %" PRId64 " (want %" PRId64 ")", rc, o.last_stable_offset, L);
    memset(&cb, 0, sizeof(cb));
    cb.struct_size = sizeof(cb);
    cb.control_type = KBX_CONTROL_ABORT;
    cb.producer_id = 2000;
    cb.producer_epoch = 1;
    cb.coordinator_epoch = 0;
    cb.leader_epoch = 5;
    cb.timestamp_ms = -1;
    rc = api->log_append_control(p->host, part, &cb, &ar);
    kbh_leo(p, part, &o);
    CHECK(R, "abort_marker",
          rc == KBX_OK && ar.first_offset == L + 2 && ar.batch_count == 1 &&
              o.last_stable_offset == L + 3 && o.log_end_offset == L + 3,
          "rc %d at %" PRId64 " lso %" PRId64 " leo %" PRId64, rc, ar.first_offset,
          o.last_stable_offset, o.log_end_offset);
    kp_writer_reset(&w);
    kbh_batch(&w, L + 3, 5, 3000, 0, false, 1, "idem");
    rc = api->log_append(p->host, part, w.buf, w.len, NULL);
    cb.control_type = KBX_CONTROL_MIRROR_PID_RESET;
    cb.producer_id = -1;
    cb.producer_epoch = -1;
    rc = rc == KBX_OK ? api->log_append_control(p->host, part, &cb, &ar) : rc;
    kbh_leo(p, part, &o);
    snprintf(info, sizeof(info), "%" PRId64 " %" PRId64, L + 2, ar.first_offset);
    kbh_check(R, "mirror_pid_reset",
              rc == KBX_OK && ar.first_offset == L + 4 && o.log_end_offset == L + 5, (int32_t)L,
              info, "rc %d at %" PRId64, rc, ar.first_offset);
    cb.control_type = 5;
    rc = api->log_append_control(p->host, part, &cb, NULL);
    CHECK(R, "control_bad_type", rc == KBX_ERR_INVALID, "-> %d", rc);
    cb.control_type = KBX_CONTROL_ABORT;
    cb.producer_id = -1;
    rc = api->log_append_control(p->host, part, &cb, NULL);
    CHECK(R, "abort_without_pid", rc == KBX_ERR_INVALID, "-> %d", rc);
    kp_writer_free(&w);
    api->partition_release(p->host, part);
}

static void kbh_cmd_truncate(kbh_t *p, kbh_results_t *R, const char *name, int64_t off)
{
    const kbx_api_t *api = p->api;
    kbx_uuid_t id;
    kbx_partition_t *part = kbh_acquire(p, R, name, &id);
    kbx_log_offsets_t o;
    int32_t rc, e = 0;
    int64_t end = 0;

    if (!part)
        return;
    rc = api->log_truncate(p->host, part, off);
    kbh_leo(p, part, &o);
    CHECK(R, "log_truncate", rc == KBX_OK && o.log_end_offset == off && o.high_watermark == off,
          "rc %d leo %" PRId64 " hw %" PRId64, rc, o.log_end_offset, o.high_watermark);
    rc = api->log_truncate(p->host, part, off + 100);
    CHECK(R, "truncate_beyond_leo_noop", rc == KBX_OK && kbh_leo(p, part, &o) == off, "-> %d", rc);
    rc = api->log_truncate(p->host, part, -1);
    CHECK(R, "truncate_below_start", rc == KBX_ERR_OFFSET, "-> %d", rc);
    rc = api->log_set_start(p->host, part, off + 100);
    CHECK(R, "set_start_above_hw", rc == KBX_ERR_OFFSET, "-> %d", rc);
    /* Truncated at the start of epoch 5: epoch 3 is the newest left and ends at the LEO. */
    api->log_epoch_end_offset(p->host, part, 3, &e, &end);
    CHECK(R, "epoch_cache_trimmed", e == 3 && end == off, "(%d, %" PRId64 ")", e, end);
    api->partition_release(p->host, part);
}

static void kbh_cmd_setstart(kbh_t *p, kbh_results_t *R, const char *name)
{
    kbx_uuid_t id;
    kbx_partition_t *part = kbh_acquire(p, R, name, &id);
    kbx_log_offsets_t o;
    int32_t rc;
    if (!part)
        return;
    rc = p->api->log_set_start(p->host, part, 100);
    kbh_leo(p, part, &o);
    CHECK(R, "set_start_empty",
          rc == KBX_OK && o.log_start_offset == 100 && o.log_end_offset == 100,
          "rc %d start %" PRId64 " leo %" PRId64, rc, o.log_start_offset, o.log_end_offset);
    p->api->partition_release(p->host, part);
}

static void kbh_cmd_bump(kbh_t *p, kbh_results_t *R, const char *name)
{
    const kbx_api_t *api = p->api;
    kbx_uuid_t id;
    kbx_partition_t *part = kbh_acquire(p, R, name, &id), *p2 = NULL;
    kbx_log_offsets_t o;
    int32_t rc, e0;
    int64_t leo;

    if (!part)
        return;
    leo = kbh_leo(p, part, &o);
    e0 = o.leader_epoch;
    kbh_op_begin(p);
    rc = api->wait_isr_truncation(p->host, part, leo, 0, 5000, kbh_done_cb, p);
    kbh_op_started(p);
    if (rc == KBX_OK)
        rc = kbh_op_wait(p);
    CHECK(R, "wait_isr_truncation", rc == KBX_OK, "-> %d", rc);
    pthread_mutex_lock(&p->mu);
    p->bump_id = id;
    p->bump_part = 0;
    p->bump_active = true;
    p->bump_seen_epoch = -1;
    pthread_mutex_unlock(&p->mu);
    kbh_op_begin(p);
    rc = api->leader_epoch_bump(p->host, part, 10, 5000, kbh_done_cb, p);
    kbh_op_started(p);
    if (rc == KBX_OK)
        rc = kbh_op_wait(p);
    pthread_mutex_lock(&p->mu);
    p->bump_active = false;
    pthread_mutex_unlock(&p->mu);
    CHECK(R, "leader_epoch_bump", rc == KBX_OK, "-> %d", rc);
    CHECK(R, "bump_seen_by_listener", p->bump_seen_epoch >= 10,
          "leadership listener had epoch %d when the bump completed", p->bump_seen_epoch);
    rc = api->log_offsets(p->host, part, &o);
    CHECK(R, "old_handle_fenced", rc == KBX_ERR_FENCED, "-> %d", rc);
    rc = api->partition_acquire(p->host, &id, 0, e0, &p2);
    CHECK(R, "acquire_old_epoch_fenced", rc == KBX_ERR_FENCED, "-> %d", rc);
    if (rc == KBX_OK)
        api->partition_release(p->host, p2);
    rc = api->partition_acquire(p->host, &id, 0, -1, &p2);
    if (rc == KBX_OK) {
        kbh_leo(p, p2, &o);
        api->partition_release(p->host, p2);
    }
    kbh_check(R, "new_epoch", rc == KBX_OK && o.leader_epoch >= 10, o.leader_epoch, NULL,
              "rc %d epoch %d", rc, o.leader_epoch);
    api->partition_release(p->host, part);
}

/* "cbump:TOPIC:PART,MIN,TIMEOUT_MS" (tests/broker_cluster): leader_epoch_bump of TOPIC-PART to
 * at least MIN on this broker, whatever its role. Values: cbump_status (the start or completion
 * status), cbump_seen (the epoch the leadership listener had for the partition when the bump
 * completed, -1 none), cbump_fenced (log_offsets on the handle afterwards), cbump_ms (start to
 * completion). Always ok: the test judges the values. */
static void kbh_cmd_cbump(kbh_t *p, kbh_results_t *R, const char *name, const char *args)
{
    const kbx_api_t *api = p->api;
    int part = 0, minv = 0, tmo = 5000;
    kbx_uuid_t id;
    kbx_partition_t *h = NULL;
    kbx_log_offsets_t o = {.struct_size = sizeof(o)};
    int32_t rc, fenced = 1, seen;
    int64_t t0;

    memset(&id, 0, sizeof(id));
    sscanf(args, "%d,%d,%d", &part, &minv, &tmo);
    rc = kbh_topic_id(p, name, &id) ? api->partition_acquire(p->host, &id, part, -1, &h)
                                    : KBX_ERR_NOT_FOUND;
    pthread_mutex_lock(&p->mu);
    p->bump_id = id;
    p->bump_part = part;
    p->bump_active = true;
    p->bump_seen_epoch = -1;
    pthread_mutex_unlock(&p->mu);
    t0 = api->clock_monotonic_ns(p->host);
    if (rc == KBX_OK) {
        kbh_op_begin(p);
        rc = api->leader_epoch_bump(p->host, h, minv, tmo, kbh_done_cb, p);
        kbh_op_started(p);
        if (rc == KBX_OK)
            rc = kbh_op_wait(p);
        fenced = api->log_offsets(p->host, h, &o);
        api->partition_release(p->host, h);
    }
    pthread_mutex_lock(&p->mu);
    p->bump_active = false;
    seen = p->bump_seen_epoch;
    pthread_mutex_unlock(&p->mu);
    kbh_check(R, "cbump_status", true, rc, NULL, "-");
    kbh_check(R, "cbump_seen", true, seen, NULL, "-");
    kbh_check(R, "cbump_fenced", true, fenced, NULL, "-");
    kbh_check(R, "cbump_ms", true, (int32_t)((api->clock_monotonic_ns(p->host) - t0) / 1000000),
              NULL, "-");
}

/* "itrunc:TOPIC:PART,OFFSET,FLAGS,TIMEOUT_MS" (tests/broker_cluster): log_truncate(OFFSET) on
 * this broker's replica (nothing when OFFSET is at or above its LEO), then wait_isr_truncation
 * (OFFSET, FLAGS). Values: itrunc_status (the start or completion status), itrunc_ms. */
static void kbh_cmd_itrunc(kbh_t *p, kbh_results_t *R, const char *name, const char *args)
{
    const kbx_api_t *api = p->api;
    int part = 0, flags = 0, tmo = 5000;
    long long off = 0;
    kbx_uuid_t id;
    kbx_partition_t *h = NULL;
    int32_t rc;
    int64_t t0;

    sscanf(args, "%d,%lld,%d,%d", &part, &off, &flags, &tmo);
    rc = kbh_topic_id(p, name, &id) ? api->partition_acquire(p->host, &id, part, -1, &h)
                                    : KBX_ERR_NOT_FOUND;
    t0 = api->clock_monotonic_ns(p->host);
    if (rc == KBX_OK) {
        rc = api->log_truncate(p->host, h, off);
        kbh_op_begin(p);
        if (rc == KBX_OK)
            rc = api->wait_isr_truncation(p->host, h, off, (uint32_t)flags, tmo, kbh_done_cb, p);
        kbh_op_started(p);
        if (rc == KBX_OK)
            rc = kbh_op_wait(p);
        api->partition_release(p->host, h);
    }
    kbh_check(R, "itrunc_status", true, rc, NULL, "-");
    kbh_check(R, "itrunc_ms", true, (int32_t)((api->clock_monotonic_ns(p->host) - t0) / 1000000),
              NULL, "-");
}

/* "offs:TOPIC:PART": this broker's replica's log end offset and HW (values offs_leo, offs_hw;
 * -1 when the partition is not here). Always ok. */
static void kbh_cmd_offs(kbh_t *p, kbh_results_t *R, const char *name, int32_t part)
{
    kbx_uuid_t id;
    kbx_partition_t *h = NULL;
    kbx_log_offsets_t o = {.struct_size = sizeof(o), .log_end_offset = -1, .high_watermark = -1};
    if (kbh_topic_id(p, name, &id) &&
        p->api->partition_acquire(p->host, &id, part, -1, &h) == KBX_OK) {
        if (p->api->log_offsets(p->host, h, &o) != KBX_OK)
            o.log_end_offset = o.high_watermark = -1;
        p->api->partition_release(p->host, h);
    }
    kbh_check(R, "offs_leo", true, (int32_t)o.log_end_offset, NULL, "-");
    kbh_check(R, "offs_hw", true, (int32_t)o.high_watermark, NULL, "-");
}

static void kbh_cmd_mode(kbh_t *p, kbh_results_t *R, const char *name, int32_t mode)
{
    kbx_uuid_t id;
    kbx_partition_t *part = kbh_acquire(p, R, name, &id);
    int32_t rc;
    if (!part)
        return;
    rc = p->api->partition_set_write_mode(p->host, part, mode);
    CHECK(R, "set_write_mode", rc == KBX_OK, "-> %d", rc);
    p->api->partition_release(p->host, part);
}

static void kbh_cmd_records(kbh_t *p, kbh_results_t *R)
{
    kbx_record_t r1 = {.struct_size = sizeof(r1),
                       .record_type = KBH_REC_TYPE,
                       .key = (const uint8_t *)"k1",
                       .key_len = 2,
                       .value = (const uint8_t *)"v1",
                       .value_len = 2};
    kbx_record_t r2 = {.struct_size = sizeof(r2),
                       .record_type = KBH_REC_TYPE,
                       .key = (const uint8_t *)"k2",
                       .key_len = 2,
                       .value = (const uint8_t *)"v2",
                       .value_len = 2};
    kbx_record_t d2 = {.struct_size = sizeof(d2),
                       .record_type = KBH_REC_TYPE,
                       .key = (const uint8_t *)"k2",
                       .key_len = 2};
    const kbx_record_t *w1[] = {&r1, &r2}, *w2[] = {&d2};
    int32_t rc;
    bool k1 = false, k2 = false;

    kbh_op_begin(p);
    rc = p->api->controller_write(p->host, w1, 2, 5000, kbh_done_cb, p);
    kbh_op_started(p);
    if (rc == KBX_OK)
        rc = kbh_op_wait(p);
    CHECK(R, "controller_write", rc == KBX_OK, "-> %d", rc);
    kbh_op_begin(p);
    rc = p->api->controller_write(p->host, w2, 1, 5000, kbh_done_cb, p);
    kbh_op_started(p);
    if (rc == KBX_OK)
        rc = kbh_op_wait(p);
    CHECK(R, "controller_delete", rc == KBX_OK, "-> %d", rc);
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->nrecs; i++) {
        if (!strcmp(p->recs[i].key, "k1"))
            k1 = p->recs[i].present && !strcmp(p->recs[i].value, "v1");
        if (!strcmp(p->recs[i].key, "k2"))
            k2 = p->recs[i].present;
    }
    CHECK(R, "records_in_listener", k1 && !k2 && p->rec_deltas >= 2, "k1 %d k2 %d deltas %d", k1,
          k2, p->rec_deltas);
    pthread_mutex_unlock(&p->mu);
}

/* The value the metadata listener holds for plugin record key @p key (type KBH_REC_TYPE) as a
 * number, or -1 when absent. mu held. */
static int32_t kbh_rec_value(kbh_t *p, const char *key)
{
    for (int i = 0; i < p->nrecs; i++)
        if (!strcmp(p->recs[i].key, key))
            return p->recs[i].present ? atoi(p->recs[i].value) : -1;
    return -1;
}

/* "cwrite:KEY:VALUE" (tests/broker_cluster): controller_write of one record (type KBH_REC_TYPE,
 * VALUE "-" deletes KEY). Values: cwrite_status (start or completion status), cwrite_seen (the
 * value this plugin's listener held for KEY when the write completed, -1 absent). */
static void kbh_cmd_cwrite(kbh_t *p, kbh_results_t *R, const char *key, const char *value)
{
    kbx_record_t r = {.struct_size = sizeof(r),
                      .record_type = KBH_REC_TYPE,
                      .key = (const uint8_t *)key,
                      .key_len = strlen(key),
                      .value = strcmp(value, "-") ? (const uint8_t *)value : NULL,
                      .value_len = strcmp(value, "-") ? strlen(value) : 0};
    const kbx_record_t *w[] = {&r};
    int32_t rc, seen = -2;

    kbh_op_begin(p);
    rc = p->api->controller_write(p->host, w, 1, 5000, kbh_done_cb, p);
    kbh_op_started(p);
    if (rc == KBX_OK)
        rc = kbh_op_wait(p);
    /* kbh_done_cb ran after the delta (kbx.h): what the listener holds now it held then */
    pthread_mutex_lock(&p->mu);
    seen = kbh_rec_value(p, key);
    pthread_mutex_unlock(&p->mu);
    kbh_check(R, "cwrite_status", true, rc, NULL, "-");
    kbh_check(R, "cwrite_seen", true, seen, NULL, "-");
}

/* "crec:KEY": the value this plugin's metadata listener holds for KEY (crec_value, -1 absent). */
/* The brokers the metadata deltas named: bit masks of the registered and the fenced ids. */
static void kbh_cmd_brokers(kbh_t *p, kbh_results_t *R)
{
    uint32_t reg, fen;
    pthread_mutex_lock(&p->mu);
    reg = p->brk_registered;
    fen = p->brk_fenced;
    pthread_mutex_unlock(&p->mu);
    kbh_check(R, "brokers_registered", true, (int32_t)reg, NULL, "-");
    kbh_check(R, "brokers_fenced", true, (int32_t)fen, NULL, "-");
}

static void kbh_cmd_crec(kbh_t *p, kbh_results_t *R, const char *key)
{
    int32_t v;
    pthread_mutex_lock(&p->mu);
    v = kbh_rec_value(p, key);
    pthread_mutex_unlock(&p->mu);
    kbh_check(R, "crec_value", true, v, NULL, "-");
}

static void kbh_cmd_status(kbh_t *p, kbh_results_t *R)
{
    pthread_mutex_lock(&p->mu);
    kbh_check(R, "cancelled", p->cancels >= 1 && p->cancel_ctx_ok == p->cancels, p->cancels, NULL,
              "cancels %d with the right token_ctx %d", p->cancels, p->cancel_ctx_ok);
    pthread_mutex_unlock(&p->mu);
}

/* authz:RT,OP,HOST,NAME:PRINCIPAL -- one kbx authorize() call (HOST "-" for none); the result's
 * value is its answer. Used by tests/broker_acl to check the ACL authorizer behind kbx. */
static void kbh_cmd_authz(kbh_t *p, kbh_results_t *R, const char *args, const char *principal)
{
    int rt = 0, op = 0;
    char host[64] = "", name[128] = "";
    int32_t rc;
    if (sscanf(args, "%d,%d,%63[^,],%127s", &rt, &op, host, name) != 4) {
        CHECK(R, "authz", false, "bad arguments '%s'", args);
        return;
    }
    rc = p->api->authorize(p->host, principal, strcmp(host, "-") ? host : NULL, rt, name, op);
    kbh_check(R, "authz", rc >= 0, rc, NULL, "-> %d", (int)rc);
}

/* ---- local requests whose handlers wait ----------------------------------------------------- */

static void kbh_lop_cb(void *arg, int32_t status, const uint8_t *body, size_t len)
{
    kbh_lop_t *l = arg;
    kbh_t *p = l->p;
    pthread_mutex_lock(&p->mu);
    l->status = status;
    l->end_ns = p->api->clock_monotonic_ns(p->host);
    p->api->mem_free(p->host, l->resp);
    l->resp = NULL;
    l->len = 0;
    if (status == KBX_OK) {
        l->resp = p->api->mem_alloc(p->host, len ? len : 1);
        if (l->resp) {
            memcpy(l->resp, body, len);
            l->len = len;
        }
    }
    pthread_mutex_unlock(&p->mu);
    atomic_fetch_add(&l->calls, 1);
    p->api->latch_set(p->host, p->oplatch);
}

/* Wait until slot @p l was called back (or @p ms passed); returns the call count. */
static int kbh_lop_wait(kbh_t *p, kbh_lop_t *l, int64_t ms)
{
    int64_t end = p->api->clock_monotonic_ns(p->host) + ms * 1000000;
    while (!atomic_load(&l->calls) && p->api->clock_monotonic_ns(p->host) < end)
        p->api->latch_wait(p->host, p->oplatch, 20);
    return atomic_load(&l->calls);
}

/* Start a Fetch v12 of partition 0 of @p topic at its log end offset into slot @p l. */
static int32_t kbh_lop_fetch(kbh_t *p, kbh_lop_t *l, const char *topic, int32_t max_wait_ms,
                             int64_t timeout_ms, int64_t *leo)
{
    kp_FetchRequest_t rq;
    kp_FetchRequest_FetchTopic_t t;
    kp_FetchRequest_FetchPartition_t fp;
    kbx_log_offsets_t o;
    kbx_partition_t *part = NULL;
    kbx_uuid_t id;
    kp_writer_t wr;
    int32_t rc;

    *leo = -1;
    if (!kbh_topic_id(p, topic, &id) ||
        p->api->partition_acquire(p->host, &id, 0, -1, &part) != KBX_OK)
        return KBX_ERR_NOT_FOUND;
    *leo = kbh_leo(p, part, &o);
    p->api->partition_release(p->host, part);
    kp_FetchRequest_init(&rq);
    kp_FetchRequest_FetchTopic_init(&t);
    kp_FetchRequest_FetchPartition_init(&fp);
    fp.Partition = 0;
    fp.FetchOffset = *leo;
    fp.PartitionMaxBytes = 1 << 20;
    t.Topic = (kp_str_t){topic, (int32_t)strlen(topic)};
    t.Partitions.cnt = 1;
    t.Partitions.v = &fp;
    rq.ReplicaId = -1;
    rq.MaxWaitMs = max_wait_ms;
    rq.MinBytes = 1;
    rq.MaxBytes = 1 << 20;
    rq.SessionId = 0;
    rq.SessionEpoch = -1;
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    kp_writer_init(&wr);
    kp_FetchRequest_encode(&wr, &rq, 12);
    pthread_mutex_lock(&p->mu);
    atomic_store(&l->calls, 0);
    l->status = 1;
    l->p = p;
    l->start_ns = p->api->clock_monotonic_ns(p->host);
    pthread_mutex_unlock(&p->mu);
    rc = p->api->local_request(p->host, 1, 12, wr.buf, wr.len, timeout_ms, kbh_lop_cb, l);
    kp_writer_free(&wr);
    return rc;
}

/* Decode slot @p l's Fetch v12 answer: the partition's error, high watermark and whether the
 * records hold @p value. Returns 0 or -1. */
static int kbh_lop_fetch_result(kbh_lop_t *l, const char *value, int16_t *err, int64_t *hw,
                                int32_t *rec_len, bool *found)
{
    kp_FetchResponse_t resp;
    kp_arena_t ar;
    kp_reader_t rd;
    int rc = -1;
    *err = -1;
    *hw = -1;
    *rec_len = -1;
    *found = false;
    kp_arena_init(&ar, 0);
    kp_reader_init(&rd, l->resp, l->len);
    kp_FetchResponse_init(&resp);
    if (l->resp && kp_FetchResponse_decode(&rd, &ar, &resp, 12) == 0 && resp.Responses.cnt == 1 &&
        resp.Responses.v[0].Partitions.cnt == 1) {
        const kp_FetchResponse_PartitionData_t *pd = &resp.Responses.v[0].Partitions.v[0];
        *err = pd->ErrorCode;
        *hw = pd->HighWatermark;
        *rec_len = pd->Records.len;
        if (value && pd->Records.len > 0)
            *found = memmem(pd->Records.ptr, (size_t)pd->Records.len, value, strlen(value)) != NULL;
        rc = 0;
    }
    kp_arena_free(&ar);
    return rc;
}

static int64_t kbh_lop_ms(const kbh_lop_t *l)
{
    return (l->end_ns - l->start_ns) / 1000000;
}

/* "lfetch:T:VALUE": a long-poll Fetch (MaxWaitMs 10 s) at the end of T is left waiting; a
 * CreateTopics through local_request must complete meanwhile. "lfetch-wait" then checks that
 * the Fetch returned VALUE (produced by the test's client) well before MaxWaitMs. */
static void kbh_cmd_lfetch(kbh_t *p, kbh_results_t *R, const char *topic, const char *value)
{
    kbh_lop_t *l = &p->lops[0];
    char side[300];
    int64_t leo;
    int32_t rc;

    snprintf(l->value, sizeof(l->value), "%s", value);
    rc = kbh_lop_fetch(p, l, topic, 10000, 15000, &leo);
    CHECK(R, "lfetch_started", rc == KBX_OK && leo >= 0, "-> %d (leo %" PRId64 ")", rc, leo);
    snprintf(side, sizeof(side), "%s-side", topic);
    kbh_cmd_create(p, R, side, "");
    CHECK(R, "lfetch_not_blocking", atomic_load(&l->calls) == 0,
          "the Fetch answered before any record was produced (status %d)", l->status);
}

static void kbh_cmd_lfetch_wait(kbh_t *p, kbh_results_t *R)
{
    kbh_lop_t *l = &p->lops[0];
    int16_t err;
    int64_t hw;
    int32_t rlen;
    bool found;
    int calls = kbh_lop_wait(p, l, KBH_WAIT_MS);

    pthread_mutex_lock(&p->mu);
    CHECK(R, "lfetch_answered", calls == 1 && l->status == KBX_OK, "calls %d status %d", calls,
          l->status);
    if (calls == 1 && l->status == KBX_OK) {
        int r = kbh_lop_fetch_result(l, l->value, &err, &hw, &rlen, &found);
        kbh_check(R, "lfetch_record", r == 0 && err == 0 && found, (int32_t)kbh_lop_ms(l), NULL,
                  "decode %d error %d records %d bytes, '%s' %sfound", r, err, rlen, l->value,
                  found ? "" : "not ");
        /* woken by the produce, not by MaxWaitMs (10 s) */
        CHECK(R, "lfetch_early", kbh_lop_ms(l) < 8000, "answered after %" PRId64 " ms",
              kbh_lop_ms(l));
    }
    pthread_mutex_unlock(&p->mu);
}

/* "lfetch-empty:T": MaxWaitMs 300, nothing produced: an empty answer after about 300 ms. */
static void kbh_cmd_lfetch_empty(kbh_t *p, kbh_results_t *R, const char *topic)
{
    kbh_lop_t *l = &p->lops[0];
    int16_t err;
    int64_t leo, hw;
    int32_t rlen, rc;
    bool found;
    int calls;

    rc = kbh_lop_fetch(p, l, topic, 300, 5000, &leo);
    calls = rc == KBX_OK ? kbh_lop_wait(p, l, KBH_WAIT_MS) : 0;
    pthread_mutex_lock(&p->mu);
    CHECK(R, "lfetch_empty_answered", rc == KBX_OK && calls == 1 && l->status == KBX_OK,
          "rc %d calls %d status %d", rc, calls, l->status);
    if (calls == 1 && l->status == KBX_OK) {
        int r = kbh_lop_fetch_result(l, NULL, &err, &hw, &rlen, &found);
        CHECK(R, "lfetch_empty_no_records", r == 0 && err == 0 && rlen <= 0 && hw == leo,
              "decode %d error %d records %d high watermark %" PRId64 " (leo %" PRId64 ")", r, err,
              rlen, hw, leo);
        CHECK(R, "lfetch_empty_waited", kbh_lop_ms(l) >= 280 && kbh_lop_ms(l) < 4000,
              "answered after %" PRId64 " ms (MaxWaitMs 300)", kbh_lop_ms(l));
    }
    pthread_mutex_unlock(&p->mu);
}

/* "lfetch-deadline:T": MaxWaitMs 10 s but local_request's timeout 300 ms: KBX_ERR_TIMEOUT. */
static void kbh_cmd_lfetch_deadline(kbh_t *p, kbh_results_t *R, const char *topic)
{
    kbh_lop_t *l = &p->lops[0];
    int64_t leo;
    int32_t rc;
    int calls;

    rc = kbh_lop_fetch(p, l, topic, 10000, 300, &leo);
    calls = rc == KBX_OK ? kbh_lop_wait(p, l, KBH_WAIT_MS) : 0;
    pthread_mutex_lock(&p->mu);
    CHECK(R, "lfetch_deadline", rc == KBX_OK && calls == 1 && l->status == KBX_ERR_TIMEOUT,
          "rc %d calls %d status %d", rc, calls, l->status);
    CHECK(R, "lfetch_deadline_time", kbh_lop_ms(l) >= 280 && kbh_lop_ms(l) < 5000,
          "timed out after %" PRId64 " ms (timeout 300, MaxWaitMs 10000)", kbh_lop_ms(l));
    pthread_mutex_unlock(&p->mu);
}

/* "lhold:T": a Fetch with MaxWaitMs 60 s and no timeout, left waiting; fini reports how it
 * ended (the host must cancel it when it unloads the plugin). */
static void kbh_cmd_lhold(kbh_t *p, kbh_results_t *R, const char *topic)
{
    int64_t leo;
    int32_t rc = kbh_lop_fetch(p, &p->lops[1], topic, 60000, -1, &leo);
    CHECK(R, "lhold_started", rc == KBX_OK, "-> %d", rc);
}

/* One local_request, waited for; the response body in p->op_resp. */
static int32_t kbh_local(kbh_t *p, int16_t key, int16_t ver, kp_writer_t *wr)
{
    int32_t rc;
    kbh_op_begin(p);
    rc = p->api->local_request(p->host, key, ver, wr->buf, wr->len, 10000, kbh_resp_cb, p);
    kbh_op_started(p);
    kp_writer_free(wr);
    return rc == KBX_OK ? kbh_op_wait(p) : rc;
}

/* "lgroup:G": a one-member classic group through local_request: JoinGroup v7 (KIP-394: the
 * first answer is MEMBER_ID_REQUIRED with the id), JoinGroup again (held by the coordinator
 * until the rebalance completes), SyncGroup v5 with the leader's assignment, LeaveGroup. */
static void kbh_cmd_lgroup(kbh_t *p, kbh_results_t *R, const char *group)
{
    kp_JoinGroupRequest_t jq;
    kp_JoinGroupRequest_JoinGroupRequestProtocol_t proto;
    kp_JoinGroupResponse_t jr;
    kp_SyncGroupRequest_t sq;
    kp_SyncGroupRequest_SyncGroupRequestAssignment_t as;
    kp_SyncGroupResponse_t sr;
    kp_arena_t ar;
    kp_reader_t rd;
    kp_writer_t wr;
    char member[256] = "";
    int32_t rc, gen = -1;
    int16_t ec = -1;
    int64_t t0;

    kp_arena_init(&ar, 0);
    kp_JoinGroupRequest_init(&jq);
    kp_JoinGroupRequest_JoinGroupRequestProtocol_init(&proto);
    proto.Name = (kp_str_t){"range", 5};
    proto.Metadata = (kp_bytes_t){(const uint8_t *)"meta", 4};
    jq.GroupId = (kp_str_t){group, (int32_t)strlen(group)};
    jq.SessionTimeoutMs = 10000;
    jq.RebalanceTimeoutMs = 10000;
    jq.MemberId = (kp_str_t){"", 0};
    jq.GroupInstanceId = (kp_str_t){NULL, -1};
    jq.ProtocolType = (kp_str_t){"consumer", 8};
    jq.Protocols.cnt = 1;
    jq.Protocols.v = &proto;
    for (int round = 0; round < 2; round++) {
        kp_writer_init(&wr);
        kp_JoinGroupRequest_encode(&wr, &jq, 7);
        t0 = p->api->clock_monotonic_ns(p->host);
        rc = kbh_local(p, 11, 7, &wr);
        ec = -1;
        if (rc == KBX_OK) {
            kp_reader_init(&rd, p->op_resp, p->op_resp_len);
            kp_JoinGroupResponse_init(&jr);
            if (kp_JoinGroupResponse_decode(&rd, &ar, &jr, 7) == 0) {
                ec = jr.ErrorCode;
                gen = jr.GenerationId;
                snprintf(member, sizeof(member), "%.*s",
                         jr.MemberId.len > 0 ? (int)jr.MemberId.len : 0,
                         jr.MemberId.len > 0 ? jr.MemberId.ptr : "");
            }
        }
        if (round == 0) {
            CHECK(R, "ljoin_member_id_required", rc == KBX_OK && ec == 79 && member[0],
                  "rc %d ErrorCode %d member '%s'", rc, ec, member);
            jq.MemberId = (kp_str_t){member, (int32_t)strlen(member)};
        } else {
            bool leader = rc == KBX_OK && ec == 0 && jr.Leader.len == (int32_t)strlen(member) &&
                          !memcmp(jr.Leader.ptr, member, strlen(member)) && jr.Members.cnt == 1;
            int64_t ms = (p->api->clock_monotonic_ns(p->host) - t0) / 1000000;
            kbh_check(R, "ljoin", leader && gen >= 1, (int32_t)ms, NULL,
                      "rc %d ErrorCode %d generation %d", rc, ec, gen);
            /* the coordinator held (deferred) it for group.initial.rebalance.delay.ms (200) */
            CHECK(R, "ljoin_deferred", ms >= 150, "answered after %" PRId64 " ms", ms);
        }
    }

    kp_SyncGroupRequest_init(&sq);
    kp_SyncGroupRequest_SyncGroupRequestAssignment_init(&as);
    sq.GroupId = jq.GroupId;
    sq.GenerationId = gen;
    sq.MemberId = (kp_str_t){member, (int32_t)strlen(member)};
    sq.GroupInstanceId = (kp_str_t){NULL, -1};
    sq.ProtocolType = (kp_str_t){"consumer", 8};
    sq.ProtocolName = (kp_str_t){"range", 5};
    as.MemberId = sq.MemberId;
    as.Assignment = (kp_bytes_t){(const uint8_t *)"assignment-1", 12};
    sq.Assignments.cnt = 1;
    sq.Assignments.v = &as;
    kp_writer_init(&wr);
    kp_SyncGroupRequest_encode(&wr, &sq, 5);
    rc = kbh_local(p, 14, 5, &wr);
    ec = -1;
    if (rc == KBX_OK) {
        kp_reader_init(&rd, p->op_resp, p->op_resp_len);
        kp_SyncGroupResponse_init(&sr);
        if (kp_SyncGroupResponse_decode(&rd, &ar, &sr, 5) == 0)
            ec = sr.ErrorCode;
    }
    CHECK(R, "lsync",
          rc == KBX_OK && ec == 0 && sr.Assignment.len == 12 &&
              !memcmp(sr.Assignment.ptr, "assignment-1", 12),
          "rc %d ErrorCode %d", rc, ec);
    kp_arena_free(&ar);
}

static void kbh_run(kbh_t *p, const char *cmd, kbh_results_t *R)
{
    char a[256] = "", b[64] = "";
    const char *c1 = strchr(cmd, ':');
    if (c1) {
        const char *c2 = strchr(c1 + 1, ':');
        snprintf(a, sizeof(a), "%.*s", (int)(c2 ? c2 - c1 - 1 : (long)strlen(c1 + 1)), c1 + 1);
        if (c2)
            snprintf(b, sizeof(b), "%s", c2 + 1);
    }
    if (!strcmp(cmd, "basic"))
        kbh_cmd_basic(p, R);
    else if (!strcmp(cmd, "snapshot"))
        kbh_cmd_snapshot(p, R);
    else if (!strncmp(cmd, "topic:", 6))
        kbh_cmd_topic(p, R, a);
    else if (!strncmp(cmd, "create:", 7))
        kbh_cmd_create(p, R, a, b);
    else if (!strncmp(cmd, "append:", 7))
        kbh_cmd_append(p, R, a);
    else if (!strncmp(cmd, "control:", 8))
        kbh_cmd_control(p, R, a);
    else if (!strncmp(cmd, "truncate:", 9))
        kbh_cmd_truncate(p, R, a, atoll(b));
    else if (!strncmp(cmd, "setstart:", 9))
        kbh_cmd_setstart(p, R, a);
    else if (!strncmp(cmd, "bump:", 5))
        kbh_cmd_bump(p, R, a);
    else if (!strncmp(cmd, "mode:", 5))
        kbh_cmd_mode(p, R, a, atoi(b));
    else if (!strcmp(cmd, "brokers"))
        kbh_cmd_brokers(p, R);
    else if (!strcmp(cmd, "records"))
        kbh_cmd_records(p, R);
    else if (!strcmp(cmd, "status"))
        kbh_cmd_status(p, R);
    else if (!strncmp(cmd, "authz:", 6))
        kbh_cmd_authz(p, R, a, b);
    else if (!strncmp(cmd, "lfetch:", 7))
        kbh_cmd_lfetch(p, R, a, b);
    else if (!strcmp(cmd, "lfetch-wait"))
        kbh_cmd_lfetch_wait(p, R);
    else if (!strncmp(cmd, "lfetch-empty:", 13))
        kbh_cmd_lfetch_empty(p, R, a);
    else if (!strncmp(cmd, "lfetch-deadline:", 16))
        kbh_cmd_lfetch_deadline(p, R, a);
    else if (!strncmp(cmd, "lhold:", 6))
        kbh_cmd_lhold(p, R, a);
    else if (!strncmp(cmd, "lgroup:", 7))
        kbh_cmd_lgroup(p, R, a);
    else if (!strncmp(cmd, "lead:", 5))
        kbh_cmd_lead(p, R, a, atoi(b));
    else if (!strncmp(cmd, "itrunc:", 7))
        kbh_cmd_itrunc(p, R, a, b);
    else if (!strncmp(cmd, "offs:", 5))
        kbh_cmd_offs(p, R, a, atoi(b));
    else if (!strncmp(cmd, "cwrite:", 7))
        kbh_cmd_cwrite(p, R, a, b);
    else if (!strncmp(cmd, "crec:", 5))
        kbh_cmd_crec(p, R, a);
    else if (!strncmp(cmd, "cbump:", 6))
        kbh_cmd_cbump(p, R, a, b);
    else if (!strncmp(cmd, "breq:", 5))
        kbh_cmd_breq(p, R, atoi(a));
    else
        CHECK(R, "command", false, "unknown command '%s'", cmd);
}

/* ---- RPC ------------------------------------------------------------------------------------- */

static void kbh_reply(kbh_t *p, kbh_cmd_t *c, const kbh_results_t *R)
{
    kp_ListMirrorsResponse_t resp;
    kp_ListMirrorsResponse_ListedMirror_t m[KBH_MAX_RES];
    kp_writer_t wr;

    kp_ListMirrorsResponse_init(&resp);
    for (int i = 0; i < R->n; i++) {
        kp_ListMirrorsResponse_ListedMirror_init(&m[i]);
        m[i].MirrorName = (kp_str_t){R->v[i].name, (int32_t)strlen(R->v[i].name)};
        m[i].SourceBootstrap = (kp_str_t){R->v[i].status, (int32_t)strlen(R->v[i].status)};
        m[i].SourceClusterId = (kp_str_t){R->v[i].info, (int32_t)strlen(R->v[i].info)};
        m[i].TopicCount = R->v[i].value;
    }
    resp.Mirrors.cnt = R->n;
    resp.Mirrors.v = m;
    kp_writer_init(&wr);
    kp_ListMirrorsResponse_encode(&wr, &resp, 0);
    /* Completion and cancel are mutually exclusive under mu (kbx.h). */
    pthread_mutex_lock(&p->mu);
    if (!c->cancelled)
        p->api->complete_response(p->host, c->tok, wr.buf, wr.len);
    pthread_mutex_unlock(&p->mu);
    kp_writer_free(&wr);
}

static int32_t kbh_worker(void *arg)
{
    kbh_t *p = arg;
    kbh_cmd_t *c;

    p->api->latch_wait(p->host, p->latch, 200);
    if (atomic_load(&p->stop))
        return KBX_THREAD_EXIT;
    pthread_mutex_lock(&p->mu);
    c = p->q_head;
    if (c) {
        p->q_head = c->next;
        if (!p->q_head)
            p->q_tail = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    if (c) {
        kbh_results_t *R = p->api->mem_calloc(p->host, 1, sizeof(*R));
        if (R) {
            kbh_log(p, KBX_LOG_INFO, "running command %s", c->text);
            kbh_run(p, c->text, R);
            kbh_reply(p, c, R);
            p->api->mem_free(p->host, R);
        }
        p->api->mem_free(p->host, c);
        p->api->latch_set(p->host, p->latch); /* more may be queued */
    }
    return KBX_THREAD_CONTINUE;
}

static int32_t kbh_handle(void *plugin_ctx, const kbx_rpc_request_t *req, kbx_token_t *token,
                          void **token_ctx)
{
    kbh_t *p = plugin_ctx;
    kbh_cmd_t *c = p->api->mem_calloc(p->host, 1, sizeof(*c));
    if (!c)
        return KBX_ERR_NOMEM;
    c->tok = token;
    snprintf(c->text, sizeof(c->text), "%s", req->client_id ? req->client_id : "");
    *token_ctx = c;
    p->api->metric_record(p->host, p->m_hist, 0.001);
    pthread_mutex_lock(&p->mu);
    if (!strcmp(c->text, "hold")) {
        c->hold = true;
        c->next = p->held;
        p->held = c;
    } else {
        if (p->q_tail)
            p->q_tail->next = c;
        else
            p->q_head = c;
        p->q_tail = c;
    }
    pthread_mutex_unlock(&p->mu);
    p->api->latch_set(p->host, p->latch);
    return KBX_RPC_PENDING;
}

static void kbh_cancel(void *plugin_ctx, kbx_token_t *token, void *token_ctx)
{
    kbh_t *p = plugin_ctx;
    kbh_cmd_t *c = token_ctx;
    pthread_mutex_lock(&p->mu);
    if (c->hold) {
        kbh_cmd_t **pp;
        p->cancels++;
        p->cancel_ctx_ok += c->tok == token;
        for (pp = &p->held; *pp && *pp != c; pp = &(*pp)->next)
            ;
        if (*pp)
            *pp = c->next;
        p->api->mem_free(p->host, c);
    } else {
        c->cancelled = true; /* the worker still owns c */
    }
    pthread_mutex_unlock(&p->mu);
}

static const kbx_rpc_ops_t kbh_rpc_ops = {
    .struct_size = sizeof(kbx_rpc_ops_t),
    .api_key = 98,
    .min_version = 0,
    .max_version = 0,
    .first_flexible_version = 0,
    .handle = kbh_handle,
    .cancel = kbh_cancel,
};

/* ---- listeners: copy under the plugin's lock and return -------------------------------------- */

static void kbh_on_delta(void *plugin_ctx, const kbx_metadata_delta_t *d)
{
    kbh_t *p = plugin_ctx;
    pthread_mutex_lock(&p->mu);
    if (!p->first_delta_seen) {
        p->first_delta_seen = true;
        p->first_was_snapshot = (d->flags & KBX_DELTA_SNAPSHOT) != 0;
        for (uint32_t i = 0; i < d->broker_count; i++)
            if (d->brokers[i]->broker_id == p->broker_id &&
                (d->brokers[i]->flags & KBX_BROKER_REGISTERED))
                p->snapshot_had_self = true;
    }
    p->deltas++;
    if (d->flags & KBX_DELTA_SNAPSHOT)
        p->brk_registered = p->brk_fenced = 0;
    for (uint32_t i = 0; i < d->broker_count; i++) {
        const kbx_broker_change_t *b = d->brokers[i];
        uint32_t bit;
        if (b->broker_id < 0 || b->broker_id > 30)
            continue;
        bit = 1u << b->broker_id;
        p->brk_registered &= ~bit;
        p->brk_fenced &= ~bit;
        if (b->flags & KBX_BROKER_REGISTERED)
            p->brk_registered |= bit;
        else if (b->flags & KBX_BROKER_FENCED)
            p->brk_fenced |= bit;
    }
    for (uint32_t i = 0; i < d->topic_count; i++) {
        const kbx_topic_change_t *t = d->topics[i];
        kbh_topic_t *x = kbh_topic_find(p, t->name);
        if (t->flags & KBX_TOPIC_DELETED) {
            if (x)
                *x = p->topics[--p->ntopics];
            continue;
        }
        if (!x && p->ntopics < (int)(sizeof(p->topics) / sizeof(p->topics[0])))
            x = &p->topics[p->ntopics++];
        if (x) {
            snprintf(x->name, sizeof(x->name), "%s", t->name);
            x->id = t->topic_id;
            x->parts = t->partition_count;
        }
    }
    if (d->record_count)
        p->rec_deltas++;
    for (uint32_t i = 0; i < d->record_count; i++) {
        const kbx_record_t *r = d->records[i];
        kbh_rec_t *x = NULL;
        char key[64];
        if (r->record_type != KBH_REC_TYPE || r->key_len >= sizeof(key))
            continue;
        snprintf(key, sizeof(key), "%.*s", (int)r->key_len, (const char *)r->key);
        for (int j = 0; j < p->nrecs; j++)
            if (!strcmp(p->recs[j].key, key))
                x = &p->recs[j];
        if (!x && p->nrecs < 16)
            x = &p->recs[p->nrecs++];
        if (!x)
            continue;
        snprintf(x->key, sizeof(x->key), "%s", key);
        x->present = r->value != NULL;
        snprintf(x->value, sizeof(x->value), "%.*s", r->value ? (int)r->value_len : 0,
                 r->value ? (const char *)r->value : "");
    }
    pthread_mutex_unlock(&p->mu);
}

static void kbh_on_leadership(void *plugin_ctx, const kbx_leadership_change_t *const *changes,
                              uint32_t count)
{
    kbh_t *p = plugin_ctx;
    pthread_mutex_lock(&p->mu);
    p->first_lead_seen = true;
    p->lead_calls++;
    for (uint32_t i = 0; i < count; i++) {
        const kbx_leadership_change_t *c = changes[i];
        kbh_lead_t *l = kbh_lead_find(p, &c->topic_id, c->partition);
        if (!l && p->nleads < (int)(sizeof(p->leads) / sizeof(p->leads[0])))
            l = &p->leads[p->nleads++];
        if (!l)
            continue;
        l->id = c->topic_id;
        l->partition = c->partition;
        l->role = c->role;
        l->epoch = c->leader_epoch;
        l->leader_id = c->leader_id;
    }
    pthread_mutex_unlock(&p->mu);
}

static const kbx_metadata_ops_t kbh_md_ops = {
    .struct_size = sizeof(kbx_metadata_ops_t),
    .on_delta = kbh_on_delta,
};

static const kbx_leadership_ops_t kbh_lead_ops = {
    .struct_size = sizeof(kbx_leadership_ops_t),
    .on_change = kbh_on_leadership,
};

/* ---- init / fini ----------------------------------------------------------------------------- */

static int32_t kbh_metric(kbh_t *p, int32_t type, const char *name, kbx_metric_t **out)
{
    const char *lk[] = {"plugin"}, *lv[] = {"kbh"};
    kbx_metric_desc_t d = {.struct_size = sizeof(d),
                           .type = type,
                           .group = "kbhtest",
                           .name = name,
                           .help = "kbh test plugin metric",
                           .label_keys = lk,
                           .label_values = lv,
                           .label_count = 1};
    return p->api->metric_register(p->host, &d, out);
}

static void kbh_fini(void *plugin_ctx);

static int32_t kbh_init(const kbx_api_t *api, kbx_host_t *host, void **plugin_ctx, char *errbuf,
                        size_t errbuf_size)
{
    kbx_host_info_t info = {.struct_size = sizeof(info)};
    kbh_t *p;
    char flag[16];
    int32_t rc;

    if (api->config_get(host, "mirror.enable", flag, sizeof(flag)) < 0 || strcmp(flag, "true")) {
        snprintf(errbuf, errbuf_size, "mirror.enable is not true");
        return KBX_ERR_STATE;
    }
    p = api->mem_calloc(host, 1, sizeof(*p));
    if (!p) {
        snprintf(errbuf, errbuf_size, "out of memory");
        return KBX_ERR_NOMEM;
    }
    p->magic = KBH_MAGIC;
    p->api = api;
    p->host = host;
    pthread_mutex_init(&p->mu, NULL);
    api->host_info(host, &info);
    p->broker_id = info.broker_id;
    if ((rc = api->latch_create(host, &p->latch)) != KBX_OK ||
        (rc = api->latch_create(host, &p->oplatch)) != KBX_OK ||
        (rc = kbh_metric(p, KBX_METRIC_COUNTER, "requests", &p->m_req)) != KBX_OK ||
        (rc = kbh_metric(p, KBX_METRIC_GAUGE, "gauge_value", &p->m_gauge)) != KBX_OK ||
        (rc = kbh_metric(p, KBX_METRIC_HISTOGRAM, "latency_seconds", &p->m_hist)) != KBX_OK ||
        (rc = api->timer_start(host, 20, 0, kbh_oneshot_cb, p, &p->oneshot)) != KBX_OK ||
        (rc = api->timer_start(host, 10, 25, kbh_periodic_cb, p, &p->periodic)) != KBX_OK ||
        (rc = api->timer_start(host, 10, 10, kbh_selfcancel_cb, p, &p->selfcancel)) != KBX_OK ||
        (rc = api->metadata_listen(host, &kbh_md_ops, p, &p->md)) != KBX_OK ||
        (rc = api->leadership_listen(host, &kbh_lead_ops, p, &p->lead)) != KBX_OK ||
        (rc = api->thread_start(host, "kbh-worker", kbh_worker, p, &p->worker)) != KBX_OK ||
        (rc = api->rpc_register(host, &kbh_rpc_ops, p, &p->rpc)) != KBX_OK) {
        snprintf(errbuf, errbuf_size, "setup failed: %d", rc);
        kbh_fini(p);
        return rc;
    }
    kbh_log(p, KBX_LOG_INFO, "kbh test plugin started on broker %d", p->broker_id);
    *plugin_ctx = p;
    return 0;
}

static void kbh_fini(void *plugin_ctx)
{
    kbh_t *p = plugin_ctx;
    const kbx_api_t *api = p->api;
    kbx_host_t *host = p->host;

    /* 1. stop accepting work */
    if (p->rpc)
        api->rpc_unregister(host, p->rpc);
    /* 2.+3. stop and join the worker; drop what is queued (the server has cancelled it) */
    atomic_store(&p->stop, true);
    if (p->worker) {
        api->latch_set(host, p->latch);
        api->thread_join(host, p->worker);
    }
    while (p->q_head) {
        kbh_cmd_t *c = p->q_head;
        p->q_head = c->next;
        api->mem_free(host, c);
    }
    while (p->held) {
        kbh_cmd_t *c = p->held;
        p->held = c->next;
        api->mem_free(host, c);
    }
    /* Outstanding completions: fini waits for them (kbx.h). The held Fetch is cancelled by
     * the host when it unloads the plugin; report how it ended. */
    for (int i = 0; i < 2; i++) {
        kbh_lop_t *l = &p->lops[i];
        if (!l->p)
            continue;
        kbh_lop_wait(p, l, KBH_WAIT_MS);
        if (i == 1)
            kbh_log(p, KBX_LOG_INFO, "held local fetch ended: status %d calls %d", l->status,
                    atomic_load(&l->calls));
        api->mem_free(host, l->resp);
        l->resp = NULL;
    }
    /* 4. listeners and timers */
    if (p->md)
        api->listener_unregister(host, p->md);
    if (p->lead)
        api->listener_unregister(host, p->lead);
    if (p->oneshot)
        api->timer_cancel(host, p->oneshot);
    if (p->periodic)
        api->timer_cancel(host, p->periodic);
    if (p->selfcancel)
        api->timer_cancel(host, p->selfcancel);
    if (p->m_req)
        api->metric_unregister(host, p->m_req);
    if (p->m_gauge)
        api->metric_unregister(host, p->m_gauge);
    if (p->m_hist)
        api->metric_unregister(host, p->m_hist);
    /* 5. free */
    if (p->latch)
        api->latch_destroy(host, p->latch);
    if (p->oplatch)
        api->latch_destroy(host, p->oplatch);
    api->mem_free(host, p->op_resp);
    kbh_log(p, KBX_LOG_INFO, "kbh test plugin stopped");
    pthread_mutex_destroy(&p->mu);
    p->magic = 0;
    api->mem_free(host, p);
}

static const kbx_plugin_desc_t kbh_desc = {
    .struct_size = sizeof(kbx_plugin_desc_t),
    .abi_major = KBX_ABI_MAJOR,
    .abi_minor = KBX_ABI_MINOR,
    .name = "kbh_test",
    .version = "0.1.0",
    .build_id = "test",
    .init = kbh_init,
    .fini = kbh_fini,
};

__attribute__((visibility("default"))) const kbx_plugin_desc_t *kbx_plugin_entry(void)
{
    return &kbh_desc;
}
