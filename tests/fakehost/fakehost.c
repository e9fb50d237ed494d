/*
 * fakehost.c - in-process kbx host for unit tests. See fakehost.h for the model.
 *
 * The fake host's own bookkeeping uses plain malloc through fh_xmalloc (which aborts on
 * failure); only memory the plugin asks for through mem_* is counted and fault-injected.
 */
#include "fakehost.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kbx_loader.h"

#define FH_ALLOC_MAGIC    0x46484d454d4f5259ull /* "FHMEMORY" */
#define FH_THREAD_MAGIC   0x46485448u
#define FH_LATCH_MAGIC    0x46484c41u
#define FH_TIMER_MAGIC    0x4648544du
#define FH_METRIC_MAGIC   0x46484d45u
#define FH_RPC_MAGIC      0x46485250u
#define FH_TOKEN_MAGIC    0x4648544bu
#define FH_LISTENER_MAGIC 0x46484c49u
#define FH_PART_MAGIC     0x46485041u
#define FH_DEAD_MAGIC     0xdeadbeefu

#define FH_NEVER      INT64_MAX
#define FH_STEP_LIMIT 1000000 /* steps in one run before we call it a livelock */
#define FH_WALL_BASE  1700000000000LL

/* Header in front of every plugin allocation: 32 bytes keeps max_align_t alignment. */
typedef struct fh_alloc_hdr {
    uint64_t magic;
    fakehost_t *owner;
    size_t size;
    uint64_t _pad;
} fh_alloc_hdr_t;

enum { FH_TASK_RUNNABLE, FH_TASK_WAITING, FH_TASK_EXITED };

struct kbx_thread {
    uint32_t magic;
    int state;
    struct kbx_thread *next;
    char *name;
    kbx_thread_fn fn;
    void *arg;
    struct kbx_latch *wait_latch;
    int64_t wait_deadline;
    bool running;
};

struct kbx_latch {
    uint32_t magic;
    bool set;
    int waiters;
    struct kbx_latch *next;
};

struct kbx_timer {
    uint32_t magic;
    bool firing, cancelled, done;
    struct kbx_timer *next;
    int64_t due;
    int64_t period;
    kbx_timer_fn fn;
    void *arg;
};

struct kbx_metric {
    uint32_t magic;
    int32_t type;
    struct kbx_metric *next;
    char *group, *name, *labels;
    double value;
};

struct kbx_rpc_reg {
    uint32_t magic;
    struct kbx_rpc_reg *next;
    kbx_rpc_ops_t ops;
    void *ctx;
};

struct kbx_token {
    uint32_t magic;
    struct fakehost_call *call;
};

enum { FH_CALL_ABANDONED = 10, FH_CALL_CANCELLING = 11 };

struct fakehost_call {
    struct fakehost_call *next;
    int state;
    struct kbx_token token;
    kbx_rpc_ops_t ops;
    void *ctx;
    void *token_ctx;
    uint8_t *body;
    uint8_t *resp;
    size_t resp_len;
};

enum { FH_LISTEN_METADATA = 1, FH_LISTEN_LEADERSHIP = 2 };

struct kbx_listener {
    uint32_t magic;
    int kind;
    bool delivering;
    struct kbx_listener *next;
    kbx_metadata_ops_t mops;
    kbx_leadership_ops_t lops;
    void *ctx;
};

typedef struct fh_batch {
    size_t pos, len;
    int64_t base, last;
    int32_t epoch;
} fh_batch_t;

typedef struct fh_epoch {
    int32_t epoch;
    int64_t start;
} fh_epoch_t;

typedef struct fh_txn {
    int64_t pid;
    int64_t first;
    int16_t pepoch;
} fh_txn_t;

typedef struct fh_log {
    struct fh_log *next;
    kbx_uuid_t id;
    char *topic;
    int32_t partition;
    int32_t leader_epoch;
    bool leader;
    int32_t write_mode;
    uint8_t *data;
    size_t len, cap;
    fh_batch_t *batches;
    size_t nbatches, cap_batches;
    fh_epoch_t *epochs;
    size_t nepochs, cap_epochs;
    fh_txn_t *txns;
    size_t ntxns, cap_txns;
    int64_t log_start, leo, hw_pin;
} fh_log_t;

struct kbx_partition {
    uint32_t magic;
    int32_t epoch;
    struct kbx_partition *next;
    fh_log_t *log;
};

enum {
    FH_EV_ISR = FAKEHOST_OP_ISR_WAIT,
    FH_EV_BUMP = FAKEHOST_OP_EPOCH_BUMP,
    FH_EV_CONTROLLER = FAKEHOST_OP_CONTROLLER,
    FH_EV_REQUEST,
    FH_EV_MD_SNAPSHOT,
    FH_EV_LEAD_SNAPSHOT,
};

typedef struct fh_record {
    struct fh_record *next;
    int32_t type;
    uint8_t *key;
    size_t key_len;
    uint8_t *value;
    size_t value_len;
    bool has_value;
} fh_record_t;

typedef struct fh_event {
    struct fh_event *next;
    int kind;
    bool held;
    int64_t deadline;
    int32_t status; /* injected status, KBX_OK if none */
    kbx_done_fn done;
    kbx_response_fn resp_cb;
    void *arg;
    fh_log_t *log;
    int32_t min_epoch;
    fh_record_t *records; /* controller write payload */
    int32_t broker_id;
    int16_t api_key, api_version;
    uint8_t *body;
    size_t body_len;
    struct kbx_listener *listener;
} fh_event_t;

typedef struct fh_kv {
    struct fh_kv *next;
    char *key, *value;
} fh_kv_t;

typedef struct fh_line {
    int32_t level;
    char *text;
} fh_line_t;

typedef struct fh_injection {
    struct fh_injection *next;
    int32_t broker_id;
    int16_t api_key;
    int op;
    int32_t err;
    int count;
} fh_injection_t;

struct kbx_host {
    kbx_api_t api;
    int32_t broker_id;
    char cluster_id[48];

    fakehost_fatal_fn fatal_fn;
    void *fatal_arg;

    int64_t now;
    int32_t log_level;
    fh_line_t *lines;
    size_t nlines, cap_lines;

    int64_t fail_countdown;
    bool fail_sticky;
    uint64_t alloc_failures, alloc_total;
    size_t live_allocs;

    fh_kv_t *configs;
    struct kbx_thread *threads;
    struct kbx_thread *current; /* task being stepped (innermost) */
    struct kbx_latch *latches;
    struct kbx_timer *timers;
    struct kbx_metric *metrics;
    struct kbx_rpc_reg *rpcs;
    struct fakehost_call *calls;
    struct kbx_listener *listeners;
    fh_log_t *logs;
    struct kbx_partition *parts;
    fh_event_t *events;
    fh_record_t *records;
    fh_injection_t *injections;
    bool hold;

    int append_fail_count;
    int32_t append_fail_err;

    fakehost_request_fn req_fn;
    void *req_arg;
    fakehost_authz_fn authz_fn;
    void *authz_arg;
};

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                      */

static void *fh_xmalloc(size_t n)
{
    void *p = calloc(1, n != 0 ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "fakehost: out of memory\n");
        abort();
    }
    return p;
}

static void *fh_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n != 0 ? n : 1);
    if (q == NULL) {
        fprintf(stderr, "fakehost: out of memory\n");
        abort();
    }
    return q;
}

static char *fh_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = fh_xmalloc(n);
    memcpy(d, s, n);
    return d;
}

static void *fh_xmemdup(const void *p, size_t n)
{
    void *d = fh_xmalloc(n);
    if (n != 0)
        memcpy(d, p, n);
    return d;
}

#define FH_GROW(arr, n, cap)                                                                       \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            (cap) = (cap) != 0 ? (cap)*2 : 8;                                                      \
            (arr) = fh_xrealloc((arr), (cap) * sizeof(*(arr)));                                    \
        }                                                                                          \
    } while (0)

__attribute__((format(printf, 4, 5), noreturn)) static void
fh_fatalf(fakehost_t *fh, const char *file, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (fh != NULL && fh->fatal_fn != NULL)
        fh->fatal_fn(fh->fatal_arg, file, line, msg);
    fprintf(stderr, "fakehost fatal at %s:%d: %s\n", file, line, msg);
    abort();
}

#define FH_FATAL(fh, ...) fh_fatalf((fh), __FILE__, __LINE__, __VA_ARGS__)
#define FH_CHECK(fh, obj, m, what)                                                                 \
    do {                                                                                           \
        if ((obj) == NULL || (obj)->magic != (m))                                                  \
            FH_FATAL((fh), "%s: bad or stale %s handle %p", __func__, (what), (void *)(obj));      \
    } while (0)

static void fh_copy_out(void *dst, const void *src, size_t full)
{
    uint32_t want;

    memcpy(&want, dst, sizeof(want));
    if (want < sizeof(uint32_t))
        return;
    memcpy((char *)dst + sizeof(uint32_t), (const char *)src + sizeof(uint32_t),
           (want < full ? want : full) - sizeof(uint32_t));
}

static void fh_log_line(fakehost_t *fh, int32_t level, const char *text)
{
    FH_GROW(fh->lines, fh->nlines, fh->cap_lines);
    fh->lines[fh->nlines].level = level;
    fh->lines[fh->nlines].text = fh_xstrdup(text);
    fh->nlines++;
    if (getenv("FAKEHOST_VERBOSE") != NULL)
        fprintf(stderr, "[fakehost %d] L%d %s\n", (int)fh->broker_id, (int)level, text);
}

static fh_injection_t *fh_take_injection(fakehost_t *fh, int op, int32_t broker_id, int16_t api_key)
{
    fh_injection_t *inj;

    for (inj = fh->injections; inj != NULL; inj = inj->next) {
        if (inj->count <= 0 || inj->op != op)
            continue;
        if (op == FH_EV_REQUEST) {
            bool bmatch = inj->broker_id == broker_id ||
                          (inj->broker_id == FAKEHOST_ANY_BROKER && broker_id != FAKEHOST_LOCAL);
            if (!bmatch || (inj->api_key != -1 && inj->api_key != api_key))
                continue;
        }
        inj->count--;
        return inj;
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* record batches                                                                               */

uint32_t fakehost_crc32c(uint32_t crc, const uint8_t *buf, size_t len)
{
    size_t i;
    int k;

    crc = ~crc;
    for (i = 0; i < len; i++) {
        crc ^= buf[i];
        for (k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static uint64_t fh_rd_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    int i;

    for (i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

static void fh_wr_be(uint8_t *p, uint64_t v, int n)
{
    int i;

    for (i = n - 1; i >= 0; i--) {
        p[i] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
}

static size_t fh_put_varint(uint8_t *p, int64_t sv)
{
    uint64_t v = ((uint64_t)sv << 1) ^ (uint64_t)(sv >> 63);
    size_t n = 0;

    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* Reads a zigzag varint; returns bytes used or 0 on error. */
static size_t fh_get_varint(const uint8_t *p, size_t avail, int64_t *out)
{
    uint64_t v = 0;
    size_t n = 0;
    int shift = 0;

    while (n < avail && shift < 64) {
        v |= (uint64_t)(p[n] & 0x7f) << shift;
        if ((p[n++] & 0x80) == 0) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return n;
        }
        shift += 7;
    }
    return 0;
}

#define FH_BATCH_HDR 61

/* Frame a batch around already-encoded records. Caller frees *out. */
static void fh_batch_frame(int64_t base, int32_t epoch, int16_t attrs, int32_t last_delta,
                           int64_t ts, int64_t pid, int16_t pepoch, int32_t nrec,
                           const uint8_t *recs, size_t recs_len, uint8_t **out, size_t *out_len)
{
    size_t total = FH_BATCH_HDR + recs_len;
    uint8_t *b = fh_xmalloc(total);

    fh_wr_be(b + 0, (uint64_t)base, 8);
    fh_wr_be(b + 8, (uint64_t)(total - 12), 4);
    fh_wr_be(b + 12, (uint64_t)(uint32_t)epoch, 4);
    b[16] = 2;
    fh_wr_be(b + 21, (uint64_t)(uint16_t)attrs, 2);
    fh_wr_be(b + 23, (uint64_t)(uint32_t)last_delta, 4);
    fh_wr_be(b + 27, (uint64_t)ts, 8);
    fh_wr_be(b + 35, (uint64_t)ts, 8);
    fh_wr_be(b + 43, (uint64_t)pid, 8);
    fh_wr_be(b + 51, (uint64_t)(uint16_t)pepoch, 2);
    fh_wr_be(b + 53, (uint64_t)(uint32_t)(pid >= 0 ? 0 : -1), 4);
    fh_wr_be(b + 57, (uint64_t)(uint32_t)nrec, 4);
    memcpy(b + FH_BATCH_HDR, recs, recs_len);
    fh_wr_be(b + 17, fakehost_crc32c(0, b + 21, total - 21), 4);
    *out = b;
    *out_len = total;
}

/* One record: key/value may be NULL (encoded as length -1). */
static size_t fh_record_encode(uint8_t *p, int32_t offset_delta, const uint8_t *key,
                               int32_t key_len, const uint8_t *val, int32_t val_len)
{
    uint8_t body[256];
    size_t n = 0, hdr;

    body[n++] = 0;                   /* attributes */
    n += fh_put_varint(body + n, 0); /* timestamp delta */
    n += fh_put_varint(body + n, offset_delta);
    n += fh_put_varint(body + n, key != NULL ? key_len : -1);
    if (key != NULL) {
        memcpy(body + n, key, (size_t)key_len);
        n += (size_t)key_len;
    }
    n += fh_put_varint(body + n, val != NULL ? val_len : -1);
    if (val != NULL) {
        memcpy(body + n, val, (size_t)val_len);
        n += (size_t)val_len;
    }
    n += fh_put_varint(body + n, 0); /* headers */
    hdr = fh_put_varint(p, (int64_t)n);
    memcpy(p + hdr, body, n);
    return hdr + n;
}

int fakehost_batch_build(int64_t base_offset, int32_t epoch, int64_t pid, int16_t pepoch,
                         bool transactional, int32_t nrecords, uint8_t **out, size_t *out_len)
{
    uint8_t *recs;
    size_t n = 0;
    int32_t i;
    uint8_t val[8];

    if (nrecords <= 0 || nrecords > 10000)
        return -1;
    recs = fh_xmalloc((size_t)nrecords * 64);
    for (i = 0; i < nrecords; i++) {
        fh_wr_be(val, (uint64_t)(base_offset + i), 8);
        n += fh_record_encode(recs + n, i, NULL, 0, val, (int32_t)sizeof(val));
    }
    fh_batch_frame(base_offset, epoch, transactional ? 0x10 : 0, nrecords - 1, FH_WALL_BASE, pid,
                   pepoch, nrecords, recs, n, out, out_len);
    free(recs);
    return 0;
}

/* Control type of a control batch's first record, or -1. */
static int fh_control_type(const uint8_t *b, size_t len)
{
    const uint8_t *p = b + FH_BATCH_HDR;
    size_t avail = len - FH_BATCH_HDR, n;
    int64_t v, klen;

    if ((n = fh_get_varint(p, avail, &v)) == 0)
        return -1;
    p += n, avail -= n;
    if (avail < 1)
        return -1;
    p += 1, avail -= 1; /* attributes */
    if ((n = fh_get_varint(p, avail, &v)) == 0)
        return -1;
    p += n, avail -= n;
    if ((n = fh_get_varint(p, avail, &v)) == 0)
        return -1;
    p += n, avail -= n;
    if ((n = fh_get_varint(p, avail, &klen)) == 0 || klen < 4 || (size_t)klen > avail - n)
        return -1;
    p += n;
    return (int)(int16_t)fh_rd_be(p + 2, 2);
}

/* ------------------------------------------------------------------------------------------ */
/* scheduler                                                                                    */

static void fh_event_free(fh_event_t *ev)
{
    fh_record_t *r, *rn;

    for (r = ev->records; r != NULL; r = rn) {
        rn = r->next;
        free(r->key);
        free(r->value);
        free(r);
    }
    free(ev->body);
    free(ev);
}

static void fh_event_push(fakehost_t *fh, fh_event_t *ev)
{
    fh_event_t **pp = &fh->events;

    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = ev;
}

static void fh_deliver_delta(fakehost_t *fh, const kbx_metadata_delta_t *d,
                             struct kbx_listener *only)
{
    struct kbx_listener *l, *next;

    for (l = fh->listeners; l != NULL; l = next) {
        next = l->next;
        if (l->kind != FH_LISTEN_METADATA || (only != NULL && l != only) ||
            l->mops.on_delta == NULL)
            continue;
        l->delivering = true;
        l->mops.on_delta(l->ctx, d);
        l->delivering = false;
    }
}

static void fh_deliver_leadership(fakehost_t *fh, const kbx_leadership_change_t *const *c,
                                  uint32_t count, struct kbx_listener *only)
{
    struct kbx_listener *l, *next;

    for (l = fh->listeners; l != NULL; l = next) {
        next = l->next;
        if (l->kind != FH_LISTEN_LEADERSHIP || (only != NULL && l != only) ||
            l->lops.on_change == NULL)
            continue;
        l->delivering = true;
        l->lops.on_change(l->ctx, c, count);
        l->delivering = false;
    }
}

static void fh_leadership_of(const fh_log_t *log, kbx_leadership_change_t *c)
{
    memset(c, 0, sizeof(*c));
    c->struct_size = sizeof(*c);
    c->role = log->leader ? KBX_ROLE_LEADER : KBX_ROLE_FOLLOWER;
    c->topic_id = log->id;
    c->topic_name = log->topic;
    c->partition = log->partition;
    c->leader_id = log->leader ? 1 : 2;
    c->leader_epoch = log->leader_epoch;
    c->partition_epoch = log->leader_epoch;
}

static void fh_publish_log_leadership(fakehost_t *fh, fh_log_t *log)
{
    kbx_leadership_change_t c;
    const kbx_leadership_change_t *cp = &c;

    fh_leadership_of(log, &c);
    c.leader_id = log->leader ? fh->broker_id : fh->broker_id + 1;
    fh_deliver_leadership(fh, &cp, 1, NULL);
}

static void fh_md_snapshot(fakehost_t *fh, struct kbx_listener *l)
{
    kbx_metadata_delta_t d;
    kbx_record_t *recs = NULL;
    const kbx_record_t **rp = NULL;
    kbx_topic_change_t *topics = NULL;
    const kbx_topic_change_t **tp = NULL;
    size_t nrec = 0, ntop = 0, i;
    fh_record_t *r;
    fh_log_t *log;

    for (r = fh->records; r != NULL; r = r->next)
        nrec++;
    for (log = fh->logs; log != NULL; log = log->next)
        ntop++;
    recs = fh_xmalloc((nrec + 1) * sizeof(*recs));
    rp = fh_xmalloc((nrec + 1) * sizeof(*rp));
    topics = fh_xmalloc((ntop + 1) * sizeof(*topics));
    tp = fh_xmalloc((ntop + 1) * sizeof(*tp));
    for (i = 0, r = fh->records; r != NULL; r = r->next, i++) {
        recs[i].struct_size = sizeof(recs[i]);
        recs[i].record_type = r->type;
        recs[i].key = r->key;
        recs[i].key_len = r->key_len;
        recs[i].value = r->value;
        recs[i].value_len = r->value_len;
        rp[i] = &recs[i];
    }
    /* One topic entry per local replica; good enough for a fake (partition counts are 1+). */
    for (i = 0, log = fh->logs; log != NULL; log = log->next, i++) {
        topics[i].struct_size = sizeof(topics[i]);
        topics[i].flags = KBX_TOPIC_CREATED;
        topics[i].topic_id = log->id;
        topics[i].name = log->topic;
        topics[i].partition_count = log->partition + 1;
        tp[i] = &topics[i];
    }
    memset(&d, 0, sizeof(d));
    d.struct_size = sizeof(d);
    d.flags = KBX_DELTA_SNAPSHOT;
    d.metadata_offset = (int64_t)nrec;
    d.records = rp;
    d.record_count = (uint32_t)nrec;
    d.topics = tp;
    d.topic_count = (uint32_t)ntop;
    fh_deliver_delta(fh, &d, l);
    free(recs);
    free(rp);
    free(topics);
    free(tp);
}

static void fh_lead_snapshot(fakehost_t *fh, struct kbx_listener *l)
{
    kbx_leadership_change_t *c;
    const kbx_leadership_change_t **cp;
    size_t n = 0, i;
    fh_log_t *log;

    for (log = fh->logs; log != NULL; log = log->next)
        n++;
    c = fh_xmalloc((n + 1) * sizeof(*c));
    cp = fh_xmalloc((n + 1) * sizeof(*cp));
    for (i = 0, log = fh->logs; log != NULL; log = log->next, i++) {
        fh_leadership_of(log, &c[i]);
        c[i].leader_id = log->leader ? fh->broker_id : fh->broker_id + 1;
        cp[i] = &c[i];
    }
    fh_deliver_leadership(fh, cp, (uint32_t)n, l);
    free(c);
    free(cp);
}

static void fh_controller_apply(fakehost_t *fh, fh_event_t *ev)
{
    kbx_metadata_delta_t d;
    kbx_record_t *recs;
    const kbx_record_t **rp;
    fh_record_t *r, **pp, *old;
    size_t n = 0, i;

    for (r = ev->records; r != NULL; r = r->next)
        n++;
    recs = fh_xmalloc((n + 1) * sizeof(*recs));
    rp = fh_xmalloc((n + 1) * sizeof(*rp));
    for (i = 0, r = ev->records; r != NULL; r = r->next, i++) {
        recs[i].struct_size = sizeof(recs[i]);
        recs[i].record_type = r->type;
        recs[i].key = r->key;
        recs[i].key_len = r->key_len;
        recs[i].value = r->has_value ? r->value : NULL;
        recs[i].value_len = r->value_len;
        rp[i] = &recs[i];
    }
    memset(&d, 0, sizeof(d));
    d.struct_size = sizeof(d);
    d.records = rp;
    d.record_count = (uint32_t)n;
    fh_deliver_delta(fh, &d, NULL);
    free(recs);
    free(rp);

    /* Store: latest value per (type, key); a NULL value deletes. */
    while ((r = ev->records) != NULL) {
        ev->records = r->next;
        for (pp = &fh->records; *pp != NULL; pp = &(*pp)->next) {
            if ((*pp)->type == r->type && (*pp)->key_len == r->key_len &&
                memcmp((*pp)->key, r->key, r->key_len) == 0)
                break;
        }
        if (*pp != NULL) {
            old = *pp;
            *pp = old->next;
            free(old->key);
            free(old->value);
            free(old);
        }
        if (r->has_value) {
            r->next = fh->records;
            fh->records = r;
        } else {
            free(r->key);
            free(r->value);
            free(r);
        }
    }
}

static void fh_event_run(fakehost_t *fh, fh_event_t *ev, bool timed_out)
{
    int32_t status = timed_out ? KBX_ERR_TIMEOUT : ev->status;
    uint8_t *resp = NULL;
    size_t resp_len = 0;

    switch (ev->kind) {
    case FH_EV_MD_SNAPSHOT:
        fh_md_snapshot(fh, ev->listener);
        return;
    case FH_EV_LEAD_SNAPSHOT:
        fh_lead_snapshot(fh, ev->listener);
        return;
    case FH_EV_ISR:
        ev->done(ev->arg, status);
        return;
    case FH_EV_BUMP:
        if (status == KBX_OK) {
            int32_t e = ev->log->leader_epoch + 1;
            ev->log->leader_epoch = e > ev->min_epoch ? e : ev->min_epoch;
            ev->log->write_mode = KBX_WRITE_PENDING;
            fh_publish_log_leadership(fh, ev->log);
        }
        ev->done(ev->arg, status);
        return;
    case FH_EV_CONTROLLER:
        if (status == KBX_OK)
            fh_controller_apply(fh, ev);
        ev->done(ev->arg, status);
        return;
    case FH_EV_REQUEST:
        if (status == KBX_OK) {
            if (fh->req_fn == NULL)
                status = KBX_ERR_UNSUPPORTED;
            else
                status = fh->req_fn(fh->req_arg, ev->broker_id, ev->api_key, ev->api_version,
                                    ev->body, ev->body_len, &resp, &resp_len);
        }
        if (status == KBX_OK && resp == NULL)
            resp = fh_xmalloc(1);
        ev->resp_cb(ev->arg, status, status == KBX_OK ? resp : NULL,
                    status == KBX_OK ? resp_len : 0);
        free(resp);
        return;
    default:
        FH_FATAL(fh, "unknown event kind %d", ev->kind);
    }
}

static bool fh_task_runnable(const fakehost_t *fh, const struct kbx_thread *t)
{
    if (t->running || t->state == FH_TASK_EXITED)
        return false;
    if (t->state == FH_TASK_RUNNABLE)
        return true;
    return t->wait_latch->set || t->wait_deadline <= fh->now;
}

static void fh_task_step(fakehost_t *fh, struct kbx_thread *t)
{
    struct kbx_thread *prev = fh->current;
    int32_t rc;

    if (t->state == FH_TASK_WAITING) {
        t->wait_latch->waiters--;
        t->wait_latch = NULL;
    }
    t->state = FH_TASK_RUNNABLE;
    t->running = true;
    fh->current = t;
    rc = t->fn(t->arg);
    fh->current = prev;
    t->running = false;
    if (rc == KBX_THREAD_EXIT) {
        if (t->state == FH_TASK_WAITING) {
            t->wait_latch->waiters--;
            t->wait_latch = NULL;
        }
        t->state = FH_TASK_EXITED;
    } else if (rc != KBX_THREAD_CONTINUE) {
        FH_FATAL(fh, "thread %s returned %d (want KBX_THREAD_CONTINUE or _EXIT)", t->name, (int)rc);
    }
}

/* Run one thing that can run now. Returns false when idle. */
static bool fh_step_one(fakehost_t *fh)
{
    fh_event_t **pp, *ev;
    struct kbx_timer *tm;
    struct kbx_thread *t;

    for (pp = &fh->events; (ev = *pp) != NULL; pp = &ev->next) {
        bool timed_out = ev->held && ev->deadline <= fh->now;
        if (ev->held && !timed_out)
            continue;
        *pp = ev->next;
        fh_event_run(fh, ev, timed_out);
        fh_event_free(ev);
        return true;
    }
    for (tm = fh->timers; tm != NULL; tm = tm->next) {
        if (tm->cancelled || tm->done || tm->firing || tm->due > fh->now)
            continue;
        if (tm->period > 0)
            tm->due += tm->period;
        else
            tm->done = true;
        tm->firing = true;
        tm->fn(tm->arg);
        tm->firing = false;
        if (tm->cancelled) {
            struct kbx_timer **tpp;
            for (tpp = &fh->timers; *tpp != tm; tpp = &(*tpp)->next)
                ;
            *tpp = tm->next;
            free(tm);
        }
        return true;
    }
    for (t = fh->threads; t != NULL; t = t->next) {
        if (fh_task_runnable(fh, t)) {
            fh_task_step(fh, t);
            return true;
        }
    }
    return false;
}

static int64_t fh_next_deadline(const fakehost_t *fh)
{
    int64_t next = FH_NEVER;
    const fh_event_t *ev;
    const struct kbx_timer *tm;
    const struct kbx_thread *t;

    for (ev = fh->events; ev != NULL; ev = ev->next)
        if (ev->held && ev->deadline < next)
            next = ev->deadline;
    for (tm = fh->timers; tm != NULL; tm = tm->next)
        if (!tm->cancelled && !tm->done && !tm->firing && tm->due < next)
            next = tm->due;
    for (t = fh->threads; t != NULL; t = t->next)
        if (t->state == FH_TASK_WAITING && !t->running && t->wait_deadline < next)
            next = t->wait_deadline;
    return next;
}

size_t fakehost_run_until_idle(fakehost_t *fh)
{
    size_t n = 0;

    while (fh_step_one(fh)) {
        if (++n > FH_STEP_LIMIT)
            FH_FATAL(fh, "livelock: %d steps without going idle (a task that never waits?)",
                     FH_STEP_LIMIT);
    }
    return n;
}

void fakehost_advance_ms(fakehost_t *fh, int64_t ms)
{
    int64_t target = fh->now + ms, next;

    for (;;) {
        fakehost_run_until_idle(fh);
        next = fh_next_deadline(fh);
        if (next > target)
            break;
        if (next > fh->now)
            fh->now = next;
    }
    fh->now = target;
    fakehost_run_until_idle(fh);
}

/* Block on the test thread until done(arg) or the deadline; simulated time jumps when idle. */
static bool fh_block(fakehost_t *fh, bool (*done)(const void *), const void *arg, int64_t deadline)
{
    size_t steps = 0;
    int64_t next;

    for (;;) {
        if (done(arg))
            return true;
        if (fh_step_one(fh)) {
            if (++steps > FH_STEP_LIMIT)
                FH_FATAL(fh, "livelock while blocking on the test thread");
            continue;
        }
        if (fh->now >= deadline)
            return false;
        next = fh_next_deadline(fh);
        if (next > deadline)
            next = deadline;
        if (next == FH_NEVER)
            return false;
        if (next > fh->now)
            fh->now = next;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* kbx_api_t implementation                                                                     */

static int32_t fh_host_info(kbx_host_t *fh, kbx_host_info_t *info)
{
    kbx_host_info_t full;

    if (info == NULL || info->struct_size < sizeof(uint32_t))
        return KBX_ERR_INVALID;
    memset(&full, 0, sizeof(full));
    full.broker_id = fh->broker_id;
    snprintf(full.cluster_id, sizeof(full.cluster_id), "%s", fh->cluster_id);
    snprintf(full.software, sizeof(full.software), "fakehost %d.%d", (int)fh->api.abi_major,
             (int)fh->api.abi_minor);
    fh_copy_out(info, &full, sizeof(full));
    return KBX_OK;
}

static void fh_api_fatal(kbx_host_t *fh, const char *file, int32_t line, const char *msg)
{
    char buf[600];

    snprintf(buf, sizeof(buf), "plugin fatal at %s:%d: %s", file, (int)line, msg);
    fh_log_line(fh, KBX_LOG_ERROR, buf);
    fh_fatalf(fh, file, (int)line, "%s", msg);
}

static int32_t fh_log_enabled(kbx_host_t *fh, int32_t level, const char *component)
{
    return level <= fh->log_level;
}

static void fh_log_write(kbx_host_t *fh, int32_t level, const char *component, const char *msg)
{
    char buf[2048];

    if (level > fh->log_level)
        return;
    snprintf(buf, sizeof(buf), "[%s] %s", component != NULL ? component : "-", msg);
    fh_log_line(fh, level, buf);
}

static bool fh_alloc_should_fail(fakehost_t *fh)
{
    if (fh->fail_countdown < 0)
        return false;
    if (fh->fail_countdown > 0) {
        fh->fail_countdown--;
        return false;
    }
    if (!fh->fail_sticky)
        fh->fail_countdown = -1;
    fh->alloc_failures++;
    return true;
}

static void *fh_mem_alloc(kbx_host_t *fh, size_t size)
{
    fh_alloc_hdr_t *h;

    if (size > SIZE_MAX - sizeof(*h) || fh_alloc_should_fail(fh))
        return NULL;
    h = malloc(sizeof(*h) + size);
    if (h == NULL)
        return NULL;
    h->magic = FH_ALLOC_MAGIC;
    h->owner = fh;
    h->size = size;
    fh->live_allocs++;
    fh->alloc_total++;
    return h + 1;
}

static void *fh_mem_calloc(kbx_host_t *fh, size_t nmemb, size_t size)
{
    void *p;

    if (size != 0 && nmemb > SIZE_MAX / size)
        return NULL;
    p = fh_mem_alloc(fh, nmemb * size);
    if (p != NULL)
        memset(p, 0, nmemb * size);
    return p;
}

static fh_alloc_hdr_t *fh_hdr_of(kbx_host_t *fh, void *ptr, const char *what)
{
    fh_alloc_hdr_t *h = (fh_alloc_hdr_t *)ptr - 1;

    if (h->magic != FH_ALLOC_MAGIC || h->owner != fh)
        FH_FATAL(fh, "%s of %p: not memory from this host's mem_alloc (or freed twice)", what, ptr);
    return h;
}

static void *fh_mem_realloc(kbx_host_t *fh, void *ptr, size_t size)
{
    fh_alloc_hdr_t *h, *nh;

    if (ptr == NULL)
        return fh_mem_alloc(fh, size);
    h = fh_hdr_of(fh, ptr, "mem_realloc");
    if (size > SIZE_MAX - sizeof(*h) || fh_alloc_should_fail(fh))
        return NULL;
    nh = realloc(h, sizeof(*h) + size);
    if (nh == NULL)
        return NULL;
    nh->size = size;
    fh->alloc_total++;
    return nh + 1;
}

static void fh_mem_free(kbx_host_t *fh, void *ptr)
{
    fh_alloc_hdr_t *h;

    if (ptr == NULL)
        return;
    h = fh_hdr_of(fh, ptr, "mem_free");
    h->magic = 0;
    fh->live_allocs--;
    free(h);
}

static int64_t fh_clock_monotonic_ns(kbx_host_t *fh)
{
    return fh->now * 1000000;
}

static int64_t fh_clock_wall_ms(kbx_host_t *fh)
{
    return FH_WALL_BASE + fh->now;
}

static int32_t fh_thread_start(kbx_host_t *fh, const char *name, kbx_thread_fn fn, void *arg,
                               kbx_thread_t **out)
{
    struct kbx_thread *t, **pp;

    if (name == NULL || fn == NULL || out == NULL)
        return KBX_ERR_INVALID;
    t = fh_xmalloc(sizeof(*t));
    t->magic = FH_THREAD_MAGIC;
    t->name = fh_xstrdup(name);
    t->fn = fn;
    t->arg = arg;
    t->state = FH_TASK_RUNNABLE;
    for (pp = &fh->threads; *pp != NULL; pp = &(*pp)->next)
        ;
    *pp = t;
    *out = t;
    return KBX_OK;
}

static bool fh_thread_exited(const void *arg)
{
    const struct kbx_thread *t = arg;
    return t->state == FH_TASK_EXITED;
}

static int32_t fh_thread_join(kbx_host_t *fh, kbx_thread_t *t)
{
    struct kbx_thread **pp;

    FH_CHECK(fh, t, FH_THREAD_MAGIC, "thread");
    if (t->running)
        FH_FATAL(fh, "thread_join(%s) called from the thread itself", t->name);
    if (!fh_block(fh, fh_thread_exited, t, FH_NEVER))
        FH_FATAL(fh, "thread_join(%s): deadlock, the thread can never exit", t->name);
    for (pp = &fh->threads; *pp != t; pp = &(*pp)->next)
        ;
    *pp = t->next;
    t->magic = FH_DEAD_MAGIC;
    free(t->name);
    free(t);
    return KBX_OK;
}

static int32_t fh_latch_create(kbx_host_t *fh, kbx_latch_t **out)
{
    struct kbx_latch *l;

    if (out == NULL)
        return KBX_ERR_INVALID;
    l = fh_xmalloc(sizeof(*l));
    l->magic = FH_LATCH_MAGIC;
    l->next = fh->latches;
    fh->latches = l;
    *out = l;
    return KBX_OK;
}

static void fh_latch_set(kbx_host_t *fh, kbx_latch_t *l)
{
    FH_CHECK(fh, l, FH_LATCH_MAGIC, "latch");
    l->set = true;
}

static bool fh_latch_is_set(const void *arg)
{
    const struct kbx_latch *l = arg;
    return l->set;
}

static int32_t fh_latch_wait(kbx_host_t *fh, kbx_latch_t *l, int64_t timeout_ms)
{
    struct kbx_thread *t = fh->current;
    int64_t deadline = timeout_ms < 0 ? FH_NEVER : fh->now + timeout_ms;
    bool set;

    FH_CHECK(fh, l, FH_LATCH_MAGIC, "latch");
    if (l->set) {
        l->set = false;
        return KBX_OK;
    }
    if (timeout_ms == 0)
        return KBX_ERR_TIMEOUT;
    if (t != NULL) {
        /* Inside a task: park it; the scheduler resumes it when the latch is set or at the
         * deadline. The task's function must now return (one wait per step). */
        if (t->state == FH_TASK_WAITING)
            FH_FATAL(fh, "thread %s waits twice in one step", t->name);
        if (l->waiters != 0)
            FH_FATAL(fh, "two waiters on one latch");
        t->state = FH_TASK_WAITING;
        t->wait_latch = l;
        t->wait_deadline = deadline;
        l->waiters++;
        return KBX_ERR_TIMEOUT;
    }
    if (l->waiters != 0)
        FH_FATAL(fh, "two waiters on one latch");
    l->waiters++;
    set = fh_block(fh, fh_latch_is_set, l, deadline);
    l->waiters--;
    if (!set)
        return KBX_ERR_TIMEOUT;
    l->set = false;
    return KBX_OK;
}

static void fh_latch_destroy(kbx_host_t *fh, kbx_latch_t *l)
{
    struct kbx_latch **pp;

    FH_CHECK(fh, l, FH_LATCH_MAGIC, "latch");
    if (l->waiters != 0)
        FH_FATAL(fh, "latch_destroy with a waiter");
    for (pp = &fh->latches; *pp != l; pp = &(*pp)->next)
        ;
    *pp = l->next;
    l->magic = FH_DEAD_MAGIC;
    free(l);
}

static int32_t fh_timer_start(kbx_host_t *fh, int64_t delay_ms, int64_t period_ms, kbx_timer_fn fn,
                              void *arg, kbx_timer_t **out)
{
    struct kbx_timer *tm;

    if (delay_ms < 0 || period_ms < 0 || fn == NULL || out == NULL)
        return KBX_ERR_INVALID;
    tm = fh_xmalloc(sizeof(*tm));
    tm->magic = FH_TIMER_MAGIC;
    tm->due = fh->now + delay_ms;
    tm->period = period_ms;
    tm->fn = fn;
    tm->arg = arg;
    tm->next = fh->timers;
    fh->timers = tm;
    *out = tm;
    return KBX_OK;
}

static void fh_timer_cancel(kbx_host_t *fh, kbx_timer_t *tm)
{
    struct kbx_timer **pp;

    FH_CHECK(fh, tm, FH_TIMER_MAGIC, "timer");
    if (tm->firing) {
        /* Called from its own callback: fh_step_one frees it when the callback returns. */
        tm->cancelled = true;
        tm->magic = FH_DEAD_MAGIC;
        return;
    }
    for (pp = &fh->timers; *pp != tm; pp = &(*pp)->next)
        ;
    *pp = tm->next;
    tm->magic = FH_DEAD_MAGIC;
    free(tm);
}

static char *fh_labels_join(const kbx_metric_desc_t *d)
{
    size_t n = 1, i;
    char *s;

    for (i = 0; i < d->label_count; i++)
        n += strlen(d->label_keys[i]) + strlen(d->label_values[i]) + 2;
    s = fh_xmalloc(n);
    for (i = 0; i < d->label_count; i++) {
        if (i != 0)
            strcat(s, ",");
        strcat(s, d->label_keys[i]);
        strcat(s, "=");
        strcat(s, d->label_values[i]);
    }
    return s;
}

static int32_t fh_metric_register(kbx_host_t *fh, const kbx_metric_desc_t *desc, kbx_metric_t **out)
{
    kbx_metric_desc_t d;
    struct kbx_metric *m;
    char *labels;
    uint32_t i;

    kbx_ops_copy(&d, sizeof(d), desc);
    if (out == NULL || d.group == NULL || d.name == NULL || d.type < KBX_METRIC_COUNTER ||
        d.type > KBX_METRIC_HISTOGRAM ||
        (d.label_count != 0 && (d.label_keys == NULL || d.label_values == NULL)))
        return KBX_ERR_INVALID;
    for (i = 0; i < d.label_count; i++)
        if (d.label_keys[i] == NULL || d.label_values[i] == NULL)
            return KBX_ERR_INVALID;
    labels = fh_labels_join(&d);
    for (m = fh->metrics; m != NULL; m = m->next) {
        if (strcmp(m->group, d.group) == 0 && strcmp(m->name, d.name) == 0 &&
            strcmp(m->labels, labels) == 0) {
            free(labels);
            return KBX_ERR_EXISTS;
        }
    }
    m = fh_xmalloc(sizeof(*m));
    m->magic = FH_METRIC_MAGIC;
    m->type = d.type;
    m->group = fh_xstrdup(d.group);
    m->name = fh_xstrdup(d.name);
    m->labels = labels;
    m->next = fh->metrics;
    fh->metrics = m;
    *out = m;
    return KBX_OK;
}

static void fh_metric_record(kbx_host_t *fh, kbx_metric_t *m, double v)
{
    FH_CHECK(fh, m, FH_METRIC_MAGIC, "metric");
    if (m->type == KBX_METRIC_GAUGE)
        m->value = v;
    else if (m->type == KBX_METRIC_COUNTER)
        m->value += v;
    else
        m->value += 1;
}

static void fh_metric_free(struct kbx_metric *m)
{
    m->magic = FH_DEAD_MAGIC;
    free(m->group);
    free(m->name);
    free(m->labels);
    free(m);
}

static void fh_metric_unregister(kbx_host_t *fh, kbx_metric_t *m)
{
    struct kbx_metric **pp;

    FH_CHECK(fh, m, FH_METRIC_MAGIC, "metric");
    for (pp = &fh->metrics; *pp != m; pp = &(*pp)->next)
        ;
    *pp = m->next;
    fh_metric_free(m);
}

static int32_t fh_config_get(kbx_host_t *fh, const char *key, char *buf, size_t size)
{
    fh_kv_t *kv;

    if (key == NULL || (buf == NULL && size != 0))
        return KBX_ERR_INVALID;
    for (kv = fh->configs; kv != NULL; kv = kv->next) {
        if (strcmp(kv->key, key) == 0) {
            if (size != 0)
                snprintf(buf, size, "%s", kv->value);
            return (int32_t)strlen(kv->value);
        }
    }
    return KBX_ERR_NOT_FOUND;
}

static int32_t fh_config_foreach(kbx_host_t *fh, const char *prefix, kbx_config_fn fn, void *arg)
{
    fh_kv_t *kv;
    int32_t n = 0;
    size_t plen;

    if (prefix == NULL || fn == NULL)
        return KBX_ERR_INVALID;
    plen = strlen(prefix);
    for (kv = fh->configs; kv != NULL; kv = kv->next) {
        if (strncmp(kv->key, prefix, plen) == 0) {
            fn(arg, kv->key, kv->value);
            n++;
        }
    }
    return n;
}

static int32_t fh_rpc_register(kbx_host_t *fh, const kbx_rpc_ops_t *ops, void *ctx,
                               kbx_rpc_reg_t **out)
{
    struct kbx_rpc_reg *r;
    kbx_rpc_ops_t o;

    kbx_ops_copy(&o, sizeof(o), ops);
    if (out == NULL || o.handle == NULL || o.api_key < 0 || o.min_version < 0 ||
        o.max_version < o.min_version)
        return KBX_ERR_INVALID;
    for (r = fh->rpcs; r != NULL; r = r->next)
        if (r->ops.api_key == o.api_key)
            return KBX_ERR_EXISTS;
    r = fh_xmalloc(sizeof(*r));
    r->magic = FH_RPC_MAGIC;
    r->ops = o;
    r->ctx = ctx;
    r->next = fh->rpcs;
    fh->rpcs = r;
    *out = r;
    return KBX_OK;
}

static void fh_rpc_unregister(kbx_host_t *fh, kbx_rpc_reg_t *r)
{
    struct kbx_rpc_reg **pp;

    FH_CHECK(fh, r, FH_RPC_MAGIC, "rpc registration");
    for (pp = &fh->rpcs; *pp != r; pp = &(*pp)->next)
        ;
    *pp = r->next;
    r->magic = FH_DEAD_MAGIC;
    free(r);
}

static int32_t fh_complete_response(kbx_host_t *fh, kbx_token_t *tok, const uint8_t *bytes,
                                    size_t len)
{
    struct fakehost_call *c;

    FH_CHECK(fh, tok, FH_TOKEN_MAGIC, "token");
    c = tok->call;
    switch (c->state) {
    case FAKEHOST_CALL_PENDING:
        if (bytes == NULL && len != 0)
            return KBX_ERR_INVALID;
        c->resp = fh_xmemdup(bytes, len);
        c->resp_len = len;
        c->state = FAKEHOST_CALL_COMPLETED;
        return KBX_OK;
    case FH_CALL_CANCELLING:
        return KBX_ERR_CANCELLED;
    case FH_CALL_ABANDONED:
        c->state = FAKEHOST_CALL_CANCELLED;
        return KBX_ERR_CANCELLED;
    case FAKEHOST_CALL_CANCELLED:
        FH_FATAL(fh, "complete_response on a token whose cancel callback returned");
    default:
        FH_FATAL(fh, "complete_response on a token that was already consumed (state %d)", c->state);
    }
    return KBX_ERR_INVALID;
}

static int32_t fh_listen(kbx_host_t *fh, int kind, const void *ops, void *ctx, kbx_listener_t **out)
{
    struct kbx_listener *l, **pp;
    fh_event_t *ev;

    if (ops == NULL || out == NULL)
        return KBX_ERR_INVALID;
    l = fh_xmalloc(sizeof(*l));
    l->magic = FH_LISTENER_MAGIC;
    l->kind = kind;
    l->ctx = ctx;
    if (kind == FH_LISTEN_METADATA)
        kbx_ops_copy(&l->mops, sizeof(l->mops), ops);
    else
        kbx_ops_copy(&l->lops, sizeof(l->lops), ops);
    for (pp = &fh->listeners; *pp != NULL; pp = &(*pp)->next)
        ;
    *pp = l;
    /* The first delivery is a snapshot, made later on the "metadata thread". */
    ev = fh_xmalloc(sizeof(*ev));
    ev->kind = kind == FH_LISTEN_METADATA ? FH_EV_MD_SNAPSHOT : FH_EV_LEAD_SNAPSHOT;
    ev->listener = l;
    fh_event_push(fh, ev);
    *out = l;
    return KBX_OK;
}

static int32_t fh_metadata_listen(kbx_host_t *fh, const kbx_metadata_ops_t *ops, void *ctx,
                                  kbx_listener_t **out)
{
    return fh_listen(fh, FH_LISTEN_METADATA, ops, ctx, out);
}

static int32_t fh_leadership_listen(kbx_host_t *fh, const kbx_leadership_ops_t *ops, void *ctx,
                                    kbx_listener_t **out)
{
    return fh_listen(fh, FH_LISTEN_LEADERSHIP, ops, ctx, out);
}

static void fh_listener_unregister(kbx_host_t *fh, kbx_listener_t *l)
{
    struct kbx_listener **pp;
    fh_event_t **ep, *ev;

    FH_CHECK(fh, l, FH_LISTENER_MAGIC, "listener");
    if (l->delivering)
        FH_FATAL(fh, "listener_unregister from the listener's own callback");
    for (ep = &fh->events; (ev = *ep) != NULL;) {
        if (ev->listener == l) {
            *ep = ev->next;
            fh_event_free(ev);
        } else {
            ep = &ev->next;
        }
    }
    for (pp = &fh->listeners; *pp != l; pp = &(*pp)->next)
        ;
    *pp = l->next;
    l->magic = FH_DEAD_MAGIC;
    free(l);
}

static fh_log_t *fh_log_find(const fakehost_t *fh, const kbx_uuid_t *id, int32_t partition)
{
    fh_log_t *log;

    for (log = fh->logs; log != NULL; log = log->next)
        if (log->partition == partition && memcmp(&log->id, id, sizeof(*id)) == 0)
            return log;
    return NULL;
}

static int32_t fh_partition_acquire(kbx_host_t *fh, const kbx_uuid_t *id, int32_t partition,
                                    int32_t epoch, kbx_partition_t **out)
{
    struct kbx_partition *p;
    fh_log_t *log;

    if (id == NULL || out == NULL)
        return KBX_ERR_INVALID;
    log = fh_log_find(fh, id, partition);
    if (log == NULL)
        return KBX_ERR_NOT_FOUND;
    if (epoch != -1 && epoch != log->leader_epoch)
        return KBX_ERR_FENCED;
    p = fh_xmalloc(sizeof(*p));
    p->magic = FH_PART_MAGIC;
    p->log = log;
    p->epoch = log->leader_epoch;
    p->next = fh->parts;
    fh->parts = p;
    *out = p;
    return KBX_OK;
}

static void fh_partition_release(kbx_host_t *fh, kbx_partition_t *p)
{
    struct kbx_partition **pp;

    FH_CHECK(fh, p, FH_PART_MAGIC, "partition");
    for (pp = &fh->parts; *pp != p; pp = &(*pp)->next)
        ;
    *pp = p->next;
    p->magic = FH_DEAD_MAGIC;
    free(p);
}

static int32_t fh_part_check(kbx_host_t *fh, kbx_partition_t *p, bool leader_only)
{
    FH_CHECK(fh, p, FH_PART_MAGIC, "partition");
    if (p->epoch != p->log->leader_epoch)
        return KBX_ERR_FENCED;
    if (leader_only && !p->log->leader)
        return KBX_ERR_NOT_LEADER;
    return KBX_OK;
}

static int64_t fh_hw(const fh_log_t *log)
{
    return log->hw_pin < 0 || log->hw_pin > log->leo ? log->leo : log->hw_pin;
}

static void fh_offsets_of(const fh_log_t *log, kbx_log_offsets_t *o)
{
    int64_t lso = fh_hw(log);
    size_t i;

    memset(o, 0, sizeof(*o));
    o->struct_size = sizeof(*o);
    for (i = 0; i < log->ntxns; i++)
        if (log->txns[i].first < lso)
            lso = log->txns[i].first;
    o->leader_epoch = log->leader_epoch;
    o->log_start_offset = log->log_start;
    o->last_stable_offset = lso;
    o->high_watermark = fh_hw(log);
    o->log_end_offset = log->leo;
    o->latest_cached_epoch = log->nepochs != 0 ? log->epochs[log->nepochs - 1].epoch : -1;
    o->last_pid_reset_offset = -1;
    for (i = log->nbatches; i-- > 0;) {
        const uint8_t *b = log->data + log->batches[i].pos;
        if ((fh_rd_be(b + 21, 2) & 0x20) != 0 &&
            fh_control_type(b, log->batches[i].len) == KBX_CONTROL_MIRROR_PID_RESET) {
            o->last_pid_reset_offset = log->batches[i].base;
            break;
        }
    }
}

static int32_t fh_log_offsets(kbx_host_t *fh, kbx_partition_t *p, kbx_log_offsets_t *out)
{
    kbx_log_offsets_t full;
    int32_t err;

    if (out == NULL || out->struct_size < sizeof(uint32_t))
        return KBX_ERR_INVALID;
    if ((err = fh_part_check(fh, p, false)) != KBX_OK)
        return err;
    fh_offsets_of(p->log, &full);
    fh_copy_out(out, &full, sizeof(full));
    return KBX_OK;
}

static void fh_txn_remove(fh_log_t *log, int64_t pid)
{
    size_t i;

    for (i = 0; i < log->ntxns; i++) {
        if (log->txns[i].pid == pid) {
            log->txns[i] = log->txns[--log->ntxns];
            return;
        }
    }
}

/* Store one validated batch. */
static void fh_log_store(fh_log_t *log, const uint8_t *b, size_t len)
{
    int64_t base = (int64_t)fh_rd_be(b, 8);
    int64_t last = base + (int32_t)fh_rd_be(b + 23, 4);
    int32_t epoch = (int32_t)fh_rd_be(b + 12, 4);
    uint16_t attrs = (uint16_t)fh_rd_be(b + 21, 2);
    int64_t pid = (int64_t)fh_rd_be(b + 43, 8);
    fh_batch_t *bt;
    size_t i;

    while (log->len + len > log->cap) {
        log->cap = log->cap != 0 ? log->cap * 2 : 4096;
        log->data = fh_xrealloc(log->data, log->cap);
    }
    FH_GROW(log->batches, log->nbatches, log->cap_batches);
    bt = &log->batches[log->nbatches++];
    bt->pos = log->len;
    bt->len = len;
    bt->base = base;
    bt->last = last;
    bt->epoch = epoch;
    memcpy(log->data + log->len, b, len);
    log->len += len;

    if (log->nepochs == 0 || epoch > log->epochs[log->nepochs - 1].epoch) {
        FH_GROW(log->epochs, log->nepochs, log->cap_epochs);
        log->epochs[log->nepochs].epoch = epoch;
        log->epochs[log->nepochs].start = base;
        log->nepochs++;
    }
    if ((attrs & 0x20) != 0) {
        int type = fh_control_type(b, len);
        if (type == KBX_CONTROL_MIRROR_PID_RESET)
            log->ntxns = 0;
        else if (type == KBX_CONTROL_ABORT || type == KBX_CONTROL_COMMIT)
            fh_txn_remove(log, pid);
    } else if ((attrs & 0x10) != 0) {
        for (i = 0; i < log->ntxns && log->txns[i].pid != pid; i++)
            ;
        if (i == log->ntxns) {
            FH_GROW(log->txns, log->ntxns, log->cap_txns);
            log->txns[log->ntxns].pid = pid;
            log->txns[log->ntxns].first = base;
            log->txns[log->ntxns].pepoch = (int16_t)fh_rd_be(b + 51, 2);
            log->ntxns++;
        }
    }
    log->leo = last + 1;
}

static int32_t fh_take_append_failure(fakehost_t *fh)
{
    if (fh->append_fail_count <= 0)
        return KBX_OK;
    fh->append_fail_count--;
    return fh->append_fail_err;
}

static void fh_append_result(kbx_append_result_t *out, int32_t n, int64_t first, int64_t last,
                             int64_t leo)
{
    kbx_append_result_t full;

    if (out == NULL || out->struct_size < sizeof(uint32_t))
        return;
    memset(&full, 0, sizeof(full));
    full.batch_count = n;
    full.first_offset = first;
    full.last_offset = last;
    full.log_end_offset = leo;
    fh_copy_out(out, &full, sizeof(full));
}

static int32_t fh_log_append(kbx_host_t *fh, kbx_partition_t *p, const uint8_t *batches, size_t len,
                             kbx_append_result_t *out)
{
    fh_log_t *log;
    size_t pos, size;
    int64_t min_next, first = -1, last = -1;
    int32_t err, n = 0;

    if ((err = fh_part_check(fh, p, true)) != KBX_OK)
        return err;
    log = p->log;
    if (log->write_mode == KBX_WRITE_WRITABLE)
        return KBX_ERR_STATE;
    if (batches == NULL || len == 0)
        return KBX_ERR_INVALID;
    if ((err = fh_take_append_failure(fh)) != KBX_OK)
        return err;
    /* Validate everything before storing anything. */
    for (pos = 0, min_next = log->leo; pos < len; pos += size) {
        const uint8_t *b = batches + pos;
        int64_t base;
        int32_t delta;

        if (len - pos < FH_BATCH_HDR)
            return KBX_ERR_CORRUPT;
        size = 12 + (size_t)(uint32_t)fh_rd_be(b + 8, 4);
        if (size < FH_BATCH_HDR || size > len - pos)
            return KBX_ERR_CORRUPT;
        if (b[16] != 2)
            return KBX_ERR_INVALID;
        if ((uint32_t)fh_rd_be(b + 17, 4) != fakehost_crc32c(0, b + 21, size - 21))
            return KBX_ERR_CORRUPT;
        base = (int64_t)fh_rd_be(b, 8);
        delta = (int32_t)fh_rd_be(b + 23, 4);
        if (base < min_next || delta < 0)
            return KBX_ERR_OFFSET;
        if (first < 0)
            first = base;
        last = base + delta;
        min_next = last + 1;
        n++;
    }
    for (pos = 0; pos < len; pos += size) {
        size = 12 + (size_t)(uint32_t)fh_rd_be(batches + pos + 8, 4);
        fh_log_store(log, batches + pos, size);
    }
    fh_append_result(out, n, first, last, log->leo);
    return KBX_OK;
}

static int32_t fh_log_append_control(kbx_host_t *fh, kbx_partition_t *p,
                                     const kbx_control_batch_t *cb, kbx_append_result_t *out)
{
    kbx_control_batch_t c;
    uint8_t key[4], val[6], rec[64], *b;
    size_t rlen, blen;
    int32_t err;
    int16_t attrs;

    if ((err = fh_part_check(fh, p, true)) != KBX_OK)
        return err;
    kbx_ops_copy(&c, sizeof(c), cb);
    if (c.control_type != KBX_CONTROL_ABORT && c.control_type != KBX_CONTROL_COMMIT &&
        c.control_type != KBX_CONTROL_MIRROR_PID_RESET)
        return KBX_ERR_INVALID;
    if (c.control_type != KBX_CONTROL_MIRROR_PID_RESET && c.producer_id < 0)
        return KBX_ERR_INVALID;
    if ((err = fh_take_append_failure(fh)) != KBX_OK)
        return err;
    fh_wr_be(key, 0, 2);
    fh_wr_be(key + 2, (uint64_t)(uint16_t)c.control_type, 2);
    fh_wr_be(val, 0, 2);
    fh_wr_be(val + 2, (uint64_t)(uint32_t)c.coordinator_epoch, 4);
    if (c.control_type == KBX_CONTROL_MIRROR_PID_RESET) {
        rlen = fh_record_encode(rec, 0, key, 4, NULL, 0);
        attrs = 0x20;
    } else {
        rlen = fh_record_encode(rec, 0, key, 4, val, 6);
        attrs = 0x30;
    }
    fh_batch_frame(p->log->leo, c.leader_epoch, attrs, 0,
                   c.timestamp_ms >= 0 ? c.timestamp_ms : fh_clock_wall_ms(fh), c.producer_id,
                   c.producer_epoch, 1, rec, rlen, &b, &blen);
    fh_log_store(p->log, b, blen);
    free(b);
    fh_append_result(out, 1, p->log->leo - 1, p->log->leo - 1, p->log->leo);
    return KBX_OK;
}

static int32_t fh_log_truncate(kbx_host_t *fh, kbx_partition_t *p, int64_t offset)
{
    fh_log_t *log;
    size_t i;
    int32_t err;

    if ((err = fh_part_check(fh, p, true)) != KBX_OK)
        return err;
    log = p->log;
    if (offset < log->log_start)
        return KBX_ERR_OFFSET;
    if (offset >= log->leo)
        return KBX_OK;
    for (i = 0; i < log->nbatches && log->batches[i].last < offset; i++)
        ;
    /* Whole batches go (kbx.h): an offset inside a batch ends the log at the batch's base. */
    if (i < log->nbatches && log->batches[i].base < offset)
        offset = log->batches[i].base > log->log_start ? log->batches[i].base : log->log_start;
    log->len = i < log->nbatches ? log->batches[i].pos : log->len;
    log->nbatches = i;
    log->leo = offset;
    while (log->nepochs != 0 && log->epochs[log->nepochs - 1].start >= offset)
        log->nepochs--;
    for (i = 0; i < log->ntxns;) {
        if (log->txns[i].first >= offset)
            log->txns[i] = log->txns[--log->ntxns];
        else
            i++;
    }
    if (log->hw_pin > offset)
        log->hw_pin = offset;
    return KBX_OK;
}

static int32_t fh_log_open_txns(kbx_host_t *fh, kbx_partition_t *p, kbx_open_txn_fn fn, void *arg)
{
    kbx_open_txn_t t;
    size_t i;
    int32_t err;

    if (fn == NULL)
        return KBX_ERR_INVALID;
    if ((err = fh_part_check(fh, p, false)) != KBX_OK)
        return err;
    for (i = 0; i < p->log->ntxns; i++) {
        memset(&t, 0, sizeof(t));
        t.struct_size = sizeof(t);
        t.producer_id = p->log->txns[i].pid;
        t.producer_epoch = p->log->txns[i].pepoch;
        t.first_offset = p->log->txns[i].first;
        t.coordinator_epoch = -1; /* the fake keeps no markers' coordinator epochs */
        fn(arg, &t);
    }
    return (int32_t)p->log->ntxns;
}

static int32_t fh_log_epoch_end_offset(kbx_host_t *fh, kbx_partition_t *p, int32_t epoch,
                                       int32_t *out_epoch, int64_t *out_end)
{
    fh_log_t *log;
    size_t i;
    int32_t err;

    if (out_epoch == NULL || out_end == NULL)
        return KBX_ERR_INVALID;
    if ((err = fh_part_check(fh, p, false)) != KBX_OK)
        return err;
    log = p->log;
    *out_epoch = -1;
    *out_end = -1;
    if (epoch < 0 || log->nepochs == 0)
        return KBX_OK;
    if (log->epochs[log->nepochs - 1].epoch == epoch) {
        *out_epoch = epoch;
        *out_end = log->leo;
        return KBX_OK;
    }
    for (i = 0; i < log->nepochs && log->epochs[i].epoch <= epoch; i++)
        ;
    if (i == log->nepochs)
        return KBX_OK; /* newer than every cached epoch */
    *out_epoch = i == 0 ? epoch : log->epochs[i - 1].epoch;
    *out_end = log->epochs[i].start;
    return KBX_OK;
}

static int32_t fh_log_set_start(kbx_host_t *fh, kbx_partition_t *p, int64_t offset)
{
    fh_log_t *log;
    size_t i, drop;
    int32_t err;

    if ((err = fh_part_check(fh, p, true)) != KBX_OK)
        return err;
    log = p->log;
    if (offset < 0)
        return KBX_ERR_OFFSET;
    if (log->leo == log->log_start) {
        log->log_start = offset;
        log->leo = offset;
        return KBX_OK;
    }
    if (offset > fh_hw(log))
        return KBX_ERR_OFFSET;
    if (offset <= log->log_start)
        return KBX_OK;
    for (drop = 0; drop < log->nbatches && log->batches[drop].last < offset; drop++)
        ;
    if (drop != 0) {
        size_t cut = drop < log->nbatches ? log->batches[drop].pos : log->len;
        memmove(log->data, log->data + cut, log->len - cut);
        log->len -= cut;
        for (i = drop; i < log->nbatches; i++)
            log->batches[i].pos -= cut;
        memmove(log->batches, log->batches + drop, (log->nbatches - drop) * sizeof(fh_batch_t));
        log->nbatches -= drop;
    }
    log->log_start = offset;
    return KBX_OK;
}

static int32_t fh_partition_set_write_mode(kbx_host_t *fh, kbx_partition_t *p, int32_t mode)
{
    int32_t err;

    if (mode < KBX_WRITE_PENDING || mode > KBX_WRITE_WRITABLE)
        return KBX_ERR_INVALID;
    if ((err = fh_part_check(fh, p, true)) != KBX_OK)
        return err;
    p->log->write_mode = mode;
    return KBX_OK;
}

static fh_event_t *fh_op_new(fakehost_t *fh, int kind, int64_t timeout_ms)
{
    fh_event_t *ev = fh_xmalloc(sizeof(*ev));
    fh_injection_t *inj = kind != FH_EV_REQUEST ? fh_take_injection(fh, kind, 0, 0) : NULL;

    ev->kind = kind;
    ev->held = fh->hold;
    ev->deadline = timeout_ms < 0 ? FH_NEVER : fh->now + timeout_ms;
    ev->status = inj != NULL ? inj->err : KBX_OK;
    return ev;
}

static int32_t fh_wait_isr_truncation(kbx_host_t *fh, kbx_partition_t *p, int64_t offset,
                                      uint32_t flags, int64_t timeout_ms, kbx_done_fn done,
                                      void *arg)
{
    fh_event_t *ev;
    int32_t err;

    if (done == NULL || offset < 0)
        return KBX_ERR_INVALID;
    if ((err = fh_part_check(fh, p, true)) != KBX_OK)
        return err;
    ev = fh_op_new(fh, FH_EV_ISR, timeout_ms);
    ev->done = done;
    ev->arg = arg;
    ev->log = p->log;
    fh_event_push(fh, ev);
    return KBX_OK;
}

static int32_t fh_leader_epoch_bump(kbx_host_t *fh, kbx_partition_t *p, int32_t min_epoch,
                                    int64_t timeout_ms, kbx_done_fn done, void *arg)
{
    fh_event_t *ev;
    int32_t err;

    if (done == NULL)
        return KBX_ERR_INVALID;
    if ((err = fh_part_check(fh, p, true)) != KBX_OK)
        return err;
    ev = fh_op_new(fh, FH_EV_BUMP, timeout_ms);
    ev->done = done;
    ev->arg = arg;
    ev->log = p->log;
    ev->min_epoch = min_epoch;
    fh_event_push(fh, ev);
    return KBX_OK;
}

static int32_t fh_controller_write(kbx_host_t *fh, const kbx_record_t *const *records,
                                   uint32_t count, int64_t timeout_ms, kbx_done_fn done, void *arg)
{
    fh_event_t *ev;
    fh_record_t **tail;
    uint32_t i;

    if (done == NULL || records == NULL || count == 0)
        return KBX_ERR_INVALID;
    for (i = 0; i < count; i++) {
        if (records[i] == NULL || records[i]->struct_size < sizeof(kbx_record_t) ||
            (records[i]->key == NULL && records[i]->key_len != 0))
            return KBX_ERR_INVALID;
    }
    ev = fh_op_new(fh, FH_EV_CONTROLLER, timeout_ms);
    ev->done = done;
    ev->arg = arg;
    tail = &ev->records;
    for (i = 0; i < count; i++) {
        fh_record_t *r = fh_xmalloc(sizeof(*r));
        r->type = records[i]->record_type;
        r->key = fh_xmemdup(records[i]->key, (size_t)records[i]->key_len);
        r->key_len = (size_t)records[i]->key_len;
        r->has_value = records[i]->value != NULL;
        r->value = fh_xmemdup(records[i]->value, r->has_value ? (size_t)records[i]->value_len : 0);
        r->value_len = r->has_value ? (size_t)records[i]->value_len : 0;
        *tail = r;
        tail = &r->next;
    }
    fh_event_push(fh, ev);
    return KBX_OK;
}

static int32_t fh_request(kbx_host_t *fh, int32_t broker_id, int16_t api_key, int16_t api_version,
                          const uint8_t *body, size_t len, int64_t timeout_ms, kbx_response_fn cb,
                          void *arg)
{
    fh_event_t *ev;
    fh_injection_t *inj;

    if (cb == NULL || (body == NULL && len != 0) || api_key < 0 || api_version < 0)
        return KBX_ERR_INVALID;
    ev = fh_op_new(fh, FH_EV_REQUEST, timeout_ms);
    inj = fh_take_injection(fh, FH_EV_REQUEST, broker_id, api_key);
    if (inj != NULL)
        ev->status = inj->err;
    ev->resp_cb = cb;
    ev->arg = arg;
    ev->broker_id = broker_id;
    ev->api_key = api_key;
    ev->api_version = api_version;
    ev->body = fh_xmemdup(body, len);
    ev->body_len = len;
    fh_event_push(fh, ev);
    return KBX_OK;
}

static int32_t fh_local_request(kbx_host_t *fh, int16_t api_key, int16_t api_version,
                                const uint8_t *body, size_t len, int64_t timeout_ms,
                                kbx_response_fn cb, void *arg)
{
    return fh_request(fh, FAKEHOST_LOCAL, api_key, api_version, body, len, timeout_ms, cb, arg);
}

static int32_t fh_broker_request(kbx_host_t *fh, int32_t broker_id, int16_t api_key,
                                 int16_t api_version, const uint8_t *body, size_t len,
                                 int64_t timeout_ms, kbx_response_fn cb, void *arg)
{
    if (broker_id < 0)
        return KBX_ERR_NOT_FOUND;
    return fh_request(fh, broker_id, api_key, api_version, body, len, timeout_ms, cb, arg);
}

static int32_t fh_authorize(kbx_host_t *fh, const char *principal, const char *client_host,
                            int32_t resource_type, const char *name, int32_t operation)
{
    if (principal == NULL || name == NULL)
        return KBX_ERR_INVALID;
    if (fh->authz_fn == NULL)
        return KBX_AUTHZ_ALLOWED;
    return fh->authz_fn(fh->authz_arg, principal, resource_type, name, operation);
}

static const kbx_api_t fh_api_template = {
    .struct_size = sizeof(kbx_api_t),
    .abi_major = KBX_ABI_MAJOR,
    .abi_minor = KBX_ABI_MINOR,
    .host_info = fh_host_info,
    .fatal = fh_api_fatal,
    .log_enabled = fh_log_enabled,
    .log_write = fh_log_write,
    .mem_alloc = fh_mem_alloc,
    .mem_calloc = fh_mem_calloc,
    .mem_realloc = fh_mem_realloc,
    .mem_free = fh_mem_free,
    .clock_monotonic_ns = fh_clock_monotonic_ns,
    .clock_wall_ms = fh_clock_wall_ms,
    .thread_start = fh_thread_start,
    .thread_join = fh_thread_join,
    .latch_create = fh_latch_create,
    .latch_set = fh_latch_set,
    .latch_wait = fh_latch_wait,
    .latch_destroy = fh_latch_destroy,
    .timer_start = fh_timer_start,
    .timer_cancel = fh_timer_cancel,
    .metric_register = fh_metric_register,
    .metric_record = fh_metric_record,
    .metric_unregister = fh_metric_unregister,
    .config_get = fh_config_get,
    .config_foreach = fh_config_foreach,
    .rpc_register = fh_rpc_register,
    .rpc_unregister = fh_rpc_unregister,
    .complete_response = fh_complete_response,
    .metadata_listen = fh_metadata_listen,
    .leadership_listen = fh_leadership_listen,
    .listener_unregister = fh_listener_unregister,
    .partition_acquire = fh_partition_acquire,
    .partition_release = fh_partition_release,
    .log_offsets = fh_log_offsets,
    .log_append = fh_log_append,
    .log_append_control = fh_log_append_control,
    .log_truncate = fh_log_truncate,
    .log_epoch_end_offset = fh_log_epoch_end_offset,
    .log_set_start = fh_log_set_start,
    .partition_set_write_mode = fh_partition_set_write_mode,
    .wait_isr_truncation = fh_wait_isr_truncation,
    .leader_epoch_bump = fh_leader_epoch_bump,
    .controller_write = fh_controller_write,
    .local_request = fh_local_request,
    .broker_request = fh_broker_request,
    .authorize = fh_authorize,
    .log_open_txns = fh_log_open_txns,
};

/* ------------------------------------------------------------------------------------------ */
/* test-facing functions                                                                        */

fakehost_t *fakehost_new(const fakehost_opts_t *opts)
{
    fakehost_t *fh = calloc(1, sizeof(*fh));

    if (fh == NULL)
        return NULL;
    fh->api = fh_api_template;
    if (opts != NULL && opts->abi_minor != 0)
        fh->api.abi_minor = opts->abi_minor;
    fh->broker_id = opts != NULL && opts->broker_id != 0 ? opts->broker_id : 1;
    snprintf(fh->cluster_id, sizeof(fh->cluster_id), "%s",
             opts != NULL && opts->cluster_id != NULL ? opts->cluster_id : "fake-cluster");
    fh->log_level = KBX_LOG_DEBUG;
    fh->fail_countdown = -1;
    return fh;
}

void fakehost_free(fakehost_t *fh)
{
    size_t i;

    if (fh == NULL)
        return;
    while (fh->threads != NULL) {
        struct kbx_thread *t = fh->threads;
        fh->threads = t->next;
        free(t->name);
        free(t);
    }
    while (fh->latches != NULL) {
        struct kbx_latch *l = fh->latches;
        fh->latches = l->next;
        free(l);
    }
    while (fh->timers != NULL) {
        struct kbx_timer *tm = fh->timers;
        fh->timers = tm->next;
        free(tm);
    }
    while (fh->metrics != NULL) {
        struct kbx_metric *m = fh->metrics;
        fh->metrics = m->next;
        fh_metric_free(m);
    }
    while (fh->rpcs != NULL) {
        struct kbx_rpc_reg *r = fh->rpcs;
        fh->rpcs = r->next;
        free(r);
    }
    while (fh->calls != NULL) {
        struct fakehost_call *c = fh->calls;
        fh->calls = c->next;
        free(c->body);
        free(c->resp);
        free(c);
    }
    while (fh->listeners != NULL) {
        struct kbx_listener *l = fh->listeners;
        fh->listeners = l->next;
        free(l);
    }
    while (fh->parts != NULL) {
        struct kbx_partition *p = fh->parts;
        fh->parts = p->next;
        free(p);
    }
    while (fh->logs != NULL) {
        fh_log_t *log = fh->logs;
        fh->logs = log->next;
        free(log->topic);
        free(log->data);
        free(log->batches);
        free(log->epochs);
        free(log->txns);
        free(log);
    }
    while (fh->events != NULL) {
        fh_event_t *ev = fh->events;
        fh->events = ev->next;
        fh_event_free(ev);
    }
    while (fh->records != NULL) {
        fh_record_t *r = fh->records;
        fh->records = r->next;
        free(r->key);
        free(r->value);
        free(r);
    }
    while (fh->injections != NULL) {
        fh_injection_t *inj = fh->injections;
        fh->injections = inj->next;
        free(inj);
    }
    while (fh->configs != NULL) {
        fh_kv_t *kv = fh->configs;
        fh->configs = kv->next;
        free(kv->key);
        free(kv->value);
        free(kv);
    }
    for (i = 0; i < fh->nlines; i++)
        free(fh->lines[i].text);
    free(fh->lines);
    free(fh);
}

const kbx_api_t *fakehost_api(fakehost_t *fh)
{
    return &fh->api;
}

kbx_api_t *fakehost_api_mut(fakehost_t *fh)
{
    return &fh->api;
}

kbx_host_t *fakehost_host(fakehost_t *fh)
{
    return fh;
}

void fakehost_set_fatal(fakehost_t *fh, fakehost_fatal_fn fn, void *arg)
{
    fh->fatal_fn = fn;
    fh->fatal_arg = arg;
}

int fakehost_config_set(fakehost_t *fh, const char *key, const char *value)
{
    fh_kv_t **pp, *kv;

    for (pp = &fh->configs; *pp != NULL; pp = &(*pp)->next) {
        if (strcmp((*pp)->key, key) == 0) {
            kv = *pp;
            *pp = kv->next;
            free(kv->key);
            free(kv->value);
            free(kv);
            break;
        }
    }
    if (value == NULL)
        return 0;
    kv = fh_xmalloc(sizeof(*kv));
    kv->key = fh_xstrdup(key);
    kv->value = fh_xstrdup(value);
    kv->next = fh->configs;
    fh->configs = kv;
    return 0;
}

bool fakehost_log_contains(const fakehost_t *fh, const char *needle)
{
    size_t i;

    for (i = 0; i < fh->nlines; i++)
        if (strstr(fh->lines[i].text, needle) != NULL)
            return true;
    return false;
}

size_t fakehost_log_count(const fakehost_t *fh, int32_t level)
{
    size_t i, n = 0;

    for (i = 0; i < fh->nlines; i++)
        if (level == 0 || fh->lines[i].level == level)
            n++;
    return n;
}

void fakehost_set_log_level(fakehost_t *fh, int32_t max_level)
{
    fh->log_level = max_level;
}

int64_t fakehost_now_ms(const fakehost_t *fh)
{
    return fh->now;
}

size_t fakehost_thread_count(const fakehost_t *fh)
{
    const struct kbx_thread *t;
    size_t n = 0;

    for (t = fh->threads; t != NULL; t = t->next)
        n++;
    return n;
}

void fakehost_fail_alloc(fakehost_t *fh, int64_t after, bool sticky)
{
    fh->fail_countdown = after;
    fh->fail_sticky = sticky;
}

uint64_t fakehost_alloc_failures(const fakehost_t *fh)
{
    return fh->alloc_failures;
}

uint64_t fakehost_alloc_total(const fakehost_t *fh)
{
    return fh->alloc_total;
}

size_t fakehost_live_allocs(const fakehost_t *fh)
{
    return fh->live_allocs;
}

size_t fakehost_metric_count(const fakehost_t *fh)
{
    const struct kbx_metric *m;
    size_t n = 0;

    for (m = fh->metrics; m != NULL; m = m->next)
        n++;
    return n;
}

bool fakehost_metric_get(const fakehost_t *fh, const char *group, const char *name, double *value)
{
    const struct kbx_metric *m;

    for (m = fh->metrics; m != NULL; m = m->next) {
        if (strcmp(m->group, group) == 0 && strcmp(m->name, name) == 0) {
            if (value != NULL)
                *value = m->value;
            return true;
        }
    }
    return false;
}

size_t fakehost_rpc_count(const fakehost_t *fh)
{
    const struct kbx_rpc_reg *r;
    size_t n = 0;

    for (r = fh->rpcs; r != NULL; r = r->next)
        n++;
    return n;
}

bool fakehost_rpc_registered(const fakehost_t *fh, int16_t api_key)
{
    const struct kbx_rpc_reg *r;

    for (r = fh->rpcs; r != NULL; r = r->next)
        if (r->ops.api_key == api_key)
            return true;
    return false;
}

int32_t fakehost_rpc_call(fakehost_t *fh, int16_t api_key, int16_t api_version, const uint8_t *body,
                          size_t len, fakehost_call_t **out)
{
    struct kbx_rpc_reg *r;
    struct fakehost_call *c;
    kbx_rpc_request_t req;
    int32_t rc;

    *out = NULL;
    for (r = fh->rpcs; r != NULL && r->ops.api_key != api_key; r = r->next)
        ;
    if (r == NULL)
        return KBX_ERR_NOT_FOUND;
    c = fh_xmalloc(sizeof(*c));
    c->next = fh->calls;
    fh->calls = c;
    *out = c;
    c->token.magic = FH_TOKEN_MAGIC;
    c->token.call = c;
    c->ops = r->ops;
    c->ctx = r->ctx;
    if (api_version < r->ops.min_version || api_version > r->ops.max_version) {
        c->state = FAKEHOST_CALL_FAILED;
        return KBX_ERR_UNSUPPORTED;
    }
    c->body = fh_xmemdup(body, len);
    memset(&req, 0, sizeof(req));
    req.struct_size = sizeof(req);
    req.api_key = api_key;
    req.api_version = api_version;
    req.correlation_id = 42;
    req.client_id = "fake-client";
    req.principal = "User:test";
    req.client_host = "127.0.0.1";
    req.listener = "PLAINTEXT";
    req.body = c->body;
    req.body_len = len;
    c->state = FAKEHOST_CALL_PENDING;
    rc = r->ops.handle(r->ctx, &req, &c->token, &c->token_ctx);
    if (rc == KBX_RPC_DONE) {
        if (c->state != FAKEHOST_CALL_COMPLETED)
            FH_FATAL(fh, "handler for key %d returned DONE without complete_response",
                     (int)api_key);
    } else if (rc < 0) {
        if (c->state == FAKEHOST_CALL_PENDING)
            c->state = FAKEHOST_CALL_FAILED;
    } else if (rc != KBX_RPC_PENDING) {
        FH_FATAL(fh, "handler for key %d returned %d", (int)api_key, (int)rc);
    }
    return rc;
}

void fakehost_rpc_disconnect(fakehost_t *fh, fakehost_call_t *c)
{
    if (c == NULL || c->state != FAKEHOST_CALL_PENDING)
        return;
    if (c->ops.cancel == NULL) {
        c->state = FH_CALL_ABANDONED;
        return;
    }
    c->state = FH_CALL_CANCELLING;
    c->ops.cancel(c->ctx, &c->token, c->token_ctx);
    c->state = FAKEHOST_CALL_CANCELLED;
}

int fakehost_call_state(const fakehost_call_t *c)
{
    if (c->state == FH_CALL_ABANDONED || c->state == FH_CALL_CANCELLING)
        return FAKEHOST_CALL_CANCELLED;
    return c->state;
}

const uint8_t *fakehost_call_response(const fakehost_call_t *c, size_t *len)
{
    if (c->state != FAKEHOST_CALL_COMPLETED)
        return NULL;
    *len = c->resp_len;
    return c->resp;
}

size_t fakehost_listener_count(const fakehost_t *fh)
{
    const struct kbx_listener *l;
    size_t n = 0;

    for (l = fh->listeners; l != NULL; l = l->next)
        n++;
    return n;
}

void fakehost_publish_delta(fakehost_t *fh, const kbx_metadata_delta_t *delta)
{
    fh_deliver_delta(fh, delta, NULL);
}

void fakehost_publish_leadership(fakehost_t *fh, const kbx_leadership_change_t *const *changes,
                                 uint32_t count)
{
    fh_deliver_leadership(fh, changes, count, NULL);
}

int fakehost_partition_add(fakehost_t *fh, const kbx_uuid_t *topic_id, const char *topic,
                           int32_t partition, int32_t leader_epoch, bool leader, int32_t write_mode)
{
    fh_log_t *log, **pp;

    if (fh_log_find(fh, topic_id, partition) != NULL)
        return -1;
    log = fh_xmalloc(sizeof(*log));
    log->id = *topic_id;
    log->topic = fh_xstrdup(topic);
    log->partition = partition;
    log->leader_epoch = leader_epoch;
    log->leader = leader;
    log->write_mode = write_mode;
    log->hw_pin = -1;
    for (pp = &fh->logs; *pp != NULL; pp = &(*pp)->next)
        ;
    *pp = log;
    return 0;
}

int fakehost_partition_set_leader(fakehost_t *fh, const kbx_uuid_t *topic_id, int32_t partition,
                                  int32_t leader_epoch, bool leader)
{
    fh_log_t *log = fh_log_find(fh, topic_id, partition);

    if (log == NULL)
        return -1;
    if (log->leader_epoch != leader_epoch)
        log->write_mode = KBX_WRITE_PENDING;
    log->leader_epoch = leader_epoch;
    log->leader = leader;
    fh_publish_log_leadership(fh, log);
    return 0;
}

int fakehost_partition_set_hw(fakehost_t *fh, const kbx_uuid_t *topic_id, int32_t partition,
                              int64_t hw)
{
    fh_log_t *log = fh_log_find(fh, topic_id, partition);

    if (log == NULL)
        return -1;
    log->hw_pin = hw < 0 ? -1 : hw;
    return 0;
}

const uint8_t *fakehost_partition_log(const fakehost_t *fh, const kbx_uuid_t *topic_id,
                                      int32_t partition, size_t *len, kbx_log_offsets_t *offs)
{
    const fh_log_t *log = fh_log_find(fh, topic_id, partition);

    if (log == NULL)
        return NULL;
    if (len != NULL)
        *len = log->len;
    if (offs != NULL)
        fh_offsets_of(log, offs);
    return log->data;
}

int32_t fakehost_partition_write_mode(const fakehost_t *fh, const kbx_uuid_t *topic_id,
                                      int32_t partition)
{
    const fh_log_t *log = fh_log_find(fh, topic_id, partition);

    return log != NULL ? log->write_mode : -1;
}

void fakehost_fail_appends(fakehost_t *fh, int count, int32_t err)
{
    fh->append_fail_count = count;
    fh->append_fail_err = err;
}

void fakehost_set_request_handler(fakehost_t *fh, fakehost_request_fn fn, void *arg)
{
    fh->req_fn = fn;
    fh->req_arg = arg;
}

static void fh_add_injection(fakehost_t *fh, int op, int32_t broker_id, int16_t api_key,
                             int32_t err, int count)
{
    fh_injection_t *inj = fh_xmalloc(sizeof(*inj)), **pp;

    inj->op = op;
    inj->broker_id = broker_id;
    inj->api_key = api_key;
    inj->err = err;
    inj->count = count;
    for (pp = &fh->injections; *pp != NULL; pp = &(*pp)->next)
        ;
    *pp = inj;
}

void fakehost_inject_request_error(fakehost_t *fh, int32_t broker_id, int16_t api_key, int32_t err,
                                   int count)
{
    fh_add_injection(fh, FH_EV_REQUEST, broker_id, api_key, err, count);
}

void fakehost_inject_op_error(fakehost_t *fh, int op, int32_t err, int count)
{
    fh_add_injection(fh, op, 0, -1, err, count);
}

void fakehost_hold_async(fakehost_t *fh, bool hold)
{
    fh_event_t *ev;

    fh->hold = hold;
    if (!hold)
        for (ev = fh->events; ev != NULL; ev = ev->next)
            ev->held = false;
}

size_t fakehost_pending_async(const fakehost_t *fh)
{
    const fh_event_t *ev;
    size_t n = 0;

    for (ev = fh->events; ev != NULL; ev = ev->next)
        if (ev->listener == NULL)
            n++;
    return n;
}

size_t fakehost_record_count(const fakehost_t *fh)
{
    const fh_record_t *r;
    size_t n = 0;

    for (r = fh->records; r != NULL; r = r->next)
        n++;
    return n;
}

void fakehost_set_authorizer(fakehost_t *fh, fakehost_authz_fn fn, void *arg)
{
    fh->authz_fn = fn;
    fh->authz_arg = arg;
}

int fakehost_check_clean(const fakehost_t *fh, char *errbuf, size_t errbuf_size)
{
    size_t n_latch = 0, n_timer = 0, n_part = 0, n_calls = 0, off = 0;
    const struct kbx_latch *l;
    const struct kbx_timer *tm;
    const struct kbx_partition *p;
    const struct fakehost_call *c;
    struct {
        const char *what;
        size_t n;
    } items[9];
    size_t i, nitems = 0;
    bool dirty = false;

    for (l = fh->latches; l != NULL; l = l->next)
        n_latch++;
    for (tm = fh->timers; tm != NULL; tm = tm->next)
        if (!tm->cancelled)
            n_timer++;
    for (p = fh->parts; p != NULL; p = p->next)
        n_part++;
    for (c = fh->calls; c != NULL; c = c->next)
        if (c->state == FAKEHOST_CALL_PENDING)
            n_calls++;
    items[nitems].what = "allocations";
    items[nitems++].n = fh->live_allocs;
    items[nitems].what = "threads";
    items[nitems++].n = fakehost_thread_count(fh);
    items[nitems].what = "latches";
    items[nitems++].n = n_latch;
    items[nitems].what = "timers";
    items[nitems++].n = n_timer;
    items[nitems].what = "metrics";
    items[nitems++].n = fakehost_metric_count(fh);
    items[nitems].what = "rpc registrations";
    items[nitems++].n = fakehost_rpc_count(fh);
    items[nitems].what = "listeners";
    items[nitems++].n = fakehost_listener_count(fh);
    items[nitems].what = "partition handles";
    items[nitems++].n = n_part;
    items[nitems].what = "pending tokens";
    items[nitems++].n = n_calls;

    if (errbuf_size != 0)
        errbuf[0] = '\0';
    for (i = 0; i < nitems; i++) {
        if (items[i].n == 0)
            continue;
        dirty = true;
        if (errbuf_size > off)
            off += (size_t)snprintf(errbuf + off, errbuf_size - off, "%s%zu %s",
                                    off != 0 ? ", " : "leftovers: ", items[i].n, items[i].what);
    }
    if (fakehost_pending_async(fh) != 0) {
        dirty = true;
        if (errbuf_size > off)
            snprintf(errbuf + off, errbuf_size - off, "%s%zu undelivered completions",
                     off != 0 ? ", " : "leftovers: ", fakehost_pending_async(fh));
    }
    return dirty ? -1 : 0;
}
