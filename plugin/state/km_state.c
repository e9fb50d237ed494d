#define KM_LOG_COMPONENT "kmirror.state"
#include "state/km_state.h"

#include <stdio.h>
#include <string.h>

#include "coord/km_coord.h"
#include "core/km_plugin_types.h"
#include "kp_arena.h"
#include "kp_batch.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "kp_reader.h"
#include "kp_writer.h"
#include "state/km_state_types.h"
#include "util/km_log.h"
#include "util/km_mem.h"

#define KM_STATE_SHARD_MAGIC 0x4b4d5348u /* "KMSH" */
#define KM_STATE_CALL_MAGIC  0x4b4d5343u /* "KMSC" */
#define KM_STATE_RPC_MAGIC   0x4b4d5352u /* "KMSR" */
#define KM_STATE_TIMER_MAGIC 0x4b4d5354u /* "KMST" */

/* Kafka's numbers for authorize(): resource type CLUSTER, operation CLUSTER_ACTION. */
#define KM_STATE_RES_CLUSTER       4
#define KM_STATE_OP_CLUSTER_ACTION 9

#define KM_STATE_FETCH_MAX_BYTES (1 << 20)
#define KM_STATE_FETCH_WAIT_MS   200
#define KM_STATE_RETRY_MS        200
#define KM_STATE_META_TIMEOUT_MS 10000
#define KM_STATE_RPC_ARENA_MAX   (8u << 20)

#define KM_STATE_PRODUCE_VERSION 9
#define KM_STATE_FETCH_VERSION   12
#define KM_STATE_META_VERSION    12
#define KM_STATE_CT_VERSION      7

/* ---- types ------------------------------------------------------------------------------- */

struct km_state_topic {
    km_state_topic_t *next;
    kbx_uuid_t id;
    char *name;
};

struct km_state_timer {
    uint32_t magic;
    km_state_timer_t *next;
    km_state_t *st;
    kbx_timer_t *timer;
    int32_t partition;
    uint64_t gen;
};

struct km_state_shard {
    uint32_t magic;
    int32_t partition;
    int32_t leader_epoch;
    bool loaded;
    bool failed;     /* the log could not be read: requests get COORDINATOR_NOT_AVAILABLE */
    bool busy;       /* a Fetch (loading) or a Produce (writing) is in flight */
    bool timer_wait; /* a retry timer is pending */
    uint64_t gen;
    kbx_uuid_t topic_id;
    int64_t next_offset;
    int64_t target; /* load until here (the log end offset at leadership), -1: the first HW */
    int64_t load_start_ns;
    uint32_t load_errors;
    km_state_table_t table;
    km_state_replay_stats_t stats;
    km_state_pop_t *waiting; /* ops waiting for the load */
    km_state_pop_t *wq;      /* writes waiting for the one in flight */
    km_state_pop_t **wq_tail;
    struct km_state_pdel *pdel; /* mirrors deleted while loading: tombstoned once loaded */
    uint32_t gate; /* > 0: those tombstones are in flight; reads wait as during the load */
};

/* A mirror name whose keys a loading shard deletes once loaded. */
typedef struct km_state_pdel {
    struct km_state_pdel *next;
    char name[KP_STATE_MIRROR_NAME_MAX + 1];
} km_state_pdel_t;

enum {
    KM_STATE_POP_READ = 1,  /* partition state */
    KM_STATE_POP_WRITE = 2, /* partition state, with the write rules */
    KM_STATE_POP_TOMB = 3,  /* delete a key */
    KM_STATE_POP_PUT = 4,   /* store a pre-encoded value of another record type */
    KM_STATE_POP_GET = 5    /* read a value of another record type */
};

typedef void (*km_state_pop_done_fn)(km_state_t *st, km_state_pop_t *pop, int16_t err,
                                     const char *msg, const kp_state_partition_t *val);

/* One operation on one key: a partition-state read or write, or a tombstone. */
struct km_state_pop {
    km_state_pop_t *next;
    int kind;
    int32_t shard; /* __mirror_state partition of the key */
    uint32_t key_len;
    uint8_t key[KP_STATE_KEY_MAX_SIZE];
    kbx_uuid_t topic_id;
    int32_t partition;
    char *mirror;
    char *topic;
    km_state_pwrite_t w;
    char *errmsg; /* owned copy behind w.error_message */
    bool from_rpc;
    bool retried;
    bool waited;           /* queued behind a loading shard at least once */
    int64_t wait_since_ms; /* monotonic, when first queued (valid when waited) */
    /* set while queued for a Produce */
    uint8_t *value;
    size_t value_len;
    int32_t new_epoch;
    /* completion */
    km_state_pop_done_fn done;
    void *ctx;
    km_state_read_cb rcb;
    km_state_write_cb wcb;
    km_state_done_cb dcb;
    km_state_record_cb gcb;
    void *arg;
};

enum {
    KM_STATE_CALL_FETCH = 1,
    KM_STATE_CALL_PRODUCE,
    KM_STATE_CALL_META,
    KM_STATE_CALL_CREATE,
    KM_STATE_CALL_REMOTE,
    KM_STATE_CALL_BROKERS
};

/* A host request in flight; its response is copied and posted to the loop. */
struct km_state_call {
    uint32_t magic;
    km_state_call_t *orphan_next;
    int kind;
    km_state_t *st;
    int32_t partition;
    uint64_t gen;
    km_state_pop_t *ops; /* PRODUCE: the batch's ops; REMOTE: the one op */
    int32_t status;
    uint8_t *body;
    size_t len;
};

/* A ReadMirrorStates / WriteMirrorStates request being served. */
typedef struct km_state_rpc {
    uint32_t magic;
    km_state_t *st;
    kbx_token_t *token; /* NULL once cancelled */
    bool cancelled;
    bool cancel_pending; /* complete_response said CANCELLED: cancel frees */
    bool authorized;
    int16_t api_key;
    uint8_t *body;
    size_t len;
    kp_arena_t ar;
    int32_t remaining;
    int16_t top_err;
    const char *top_msg;
    kp_ReadMirrorStatesResponse_t rresp;
    kp_WriteMirrorStatesResponse_t wresp;
} km_state_rpc_t;

static km_state_t *km_state_of(km_plugin_t *cm)
{
    return &cm->state;
}

static const char *km_state_kbx_str(int32_t rc)
{
    switch (rc) {
#define KM_STATE_KBX_CASE(name, desc)                                                              \
    case name:                                                                                     \
        return desc;
        KBX_ERR_MAP(KM_STATE_KBX_CASE)
#undef KM_STATE_KBX_CASE
    default:
        return "unknown host error";
    }
}

/* km_coord_fn drop for a plain allocation. */
static void km_state_free_arg(km_plugin_t *cm, void *arg)
{
    km_free(cm, arg);
}

static bool km_state_stopping(km_state_t *st)
{
    return atomic_load(&st->stopping) != 0;
}

static int64_t km_state_now_ms(km_state_t *st)
{
    return st->cm->ref.api->clock_wall_ms(st->cm->ref.host);
}

static int64_t km_state_now_mono_ms(km_state_t *st)
{
    return st->cm->ref.api->clock_monotonic_ns(st->cm->ref.host) / 1000000;
}

/* ---- pops -------------------------------------------------------------------------------- */

static void km_state_pop_free(km_state_t *st, km_state_pop_t *pop)
{
    km_plugin_t *cm = st->cm;

    km_free(cm, pop->mirror);
    km_free(cm, pop->topic);
    km_free(cm, pop->errmsg);
    km_free(cm, pop->value);
    km_free(cm, pop);
}

static void km_state_pop_finish(km_state_t *st, km_state_pop_t *pop, int16_t err, const char *msg,
                                const kp_state_partition_t *val)
{
    if (err != 0 && msg == NULL)
        msg = kp_errcode_msg(err);
    pop->done(st, pop, err, msg, val);
}

static void km_state_pop_fail_list(km_state_t *st, km_state_pop_t *list, int16_t err,
                                   const char *msg)
{
    km_state_pop_t *next;

    for (; list != NULL; list = next) {
        next = list->next;
        list->next = NULL;
        km_state_pop_finish(st, list, err, msg, NULL);
    }
}

static int km_state_key_fill(km_state_pop_t *pop, int16_t type, const char *mirror,
                             const kbx_uuid_t *topic_id, int32_t partition, int32_t nparts)
{
    kp_state_key_t key = {.type = type, .mirror = kp_str(mirror), .partition = partition};
    kp_writer_t wr;

    if (topic_id != NULL)
        memcpy(key.topicId.b, topic_id->bytes, 16);
    kp_writer_init_fixed(&wr, pop->key, sizeof(pop->key));
    if (kp_state_key_encode(&wr, &key) != 0 || wr.err != 0)
        return -1;
    pop->key_len = (uint32_t)wr.len;
    pop->shard = kp_state_key_partition(&key, nparts);
    return pop->shard < 0 ? -1 : 0;
}

/* ---- host requests ----------------------------------------------------------------------- */

static void km_state_call_free(km_state_t *st, km_state_call_t *call)
{
    call->magic = 0;
    km_free(st->cm, call->body);
    call->body = NULL;
    km_free(st->cm, call);
}

static void km_state_call_run(km_plugin_t *cm, void *arg);

/* A call that never ran (the queue closed): fail its ops' owners without the loop's state. */
static void km_state_call_drop(km_plugin_t *cm, void *arg)
{
    km_state_call_t *call = arg;
    km_state_t *st = km_state_of(cm);
    km_state_pop_t *pop, *next;

    for (pop = call->ops; pop != NULL; pop = next) {
        next = pop->next;
        km_state_pop_finish(st, pop, KP_ERR_COORDINATOR_NOT_AVAILABLE, "shutting down", NULL);
    }
    km_state_call_free(st, call);
}

static void km_state_outstanding_done(km_state_t *st)
{
    if (atomic_fetch_sub(&st->outstanding, 1) == 1 && st->idle_latch != NULL)
        st->cm->ref.api->latch_set(st->cm->ref.host, st->idle_latch);
}

/* kbx_response_fn: copy and post (host thread). */
static void km_state_call_cb(void *arg, int32_t status, const uint8_t *body, size_t len)
{
    km_state_call_t *call = arg;
    km_state_t *st = call->st;
    km_plugin_t *cm = st->cm;

    call->status = status;
    if (status == KBX_OK && body != NULL) {
        call->body = km_malloc(cm, len != 0 ? len : 1);
        if (call->body == NULL)
            call->status = KBX_ERR_NOMEM;
        else
            memcpy(call->body, body, len);
        call->len = len;
    }
    if (km_coord_post(&cm->coord, km_state_call_run, km_state_call_drop, call) == KM_ERR_NOMEM) {
        /* Not on the loop: keep it for the loop's next state op rather than touch its state. */
        pthread_mutex_lock(&st->tok_lock);
        call->orphan_next = st->orphans;
        st->orphans = call;
        pthread_mutex_unlock(&st->tok_lock);
        km_log_error(cm, "no memory to queue a __mirror_state answer; kept for the next op");
    }
    km_state_outstanding_done(st);
}

/* Run the answers km_state_call_cb could not post. @thread coord */
static void km_state_orphans(km_state_t *st)
{
    km_state_call_t *call, *next;

    pthread_mutex_lock(&st->tok_lock);
    call = st->orphans;
    st->orphans = NULL;
    pthread_mutex_unlock(&st->tok_lock);
    for (; call != NULL; call = next) {
        next = call->orphan_next;
        call->orphan_next = NULL;
        km_state_call_run(st->cm, call);
    }
}

/* Send @p wr's bytes; on failure the call is freed (its ops are the caller's again).
 * The request is counted in flight before the stop flag is checked: km_state_stop sets the flag
 * and then waits for the count to drop to zero, so either it waits for this request or this
 * sees the flag (both sequentially consistent atomics). Checking first let a loop racing fini
 * start a request after the wait ("operations left after fini"). */
static int32_t km_state_call_send(km_state_t *st, km_state_call_t *call, int32_t broker,
                                  int16_t api_key, int16_t version, kp_writer_t *wr,
                                  int64_t timeout_ms)
{
    const kbx_api_t *api = st->cm->ref.api;
    int32_t rc;

    if (wr->err != 0)
        return wr->err == KP_E_NOMEM ? KBX_ERR_NOMEM : KBX_ERR_INVALID;
    atomic_fetch_add(&st->outstanding, 1);
    if (km_state_stopping(st)) {
        km_state_outstanding_done(st);
        return KBX_ERR_SHUTDOWN;
    }
    call->magic = KM_STATE_CALL_MAGIC;
    call->st = st;
    if (broker < 0)
        rc = api->local_request(st->cm->ref.host, api_key, version, wr->buf, wr->len, timeout_ms,
                                km_state_call_cb, call);
    else
        rc = api->broker_request(st->cm->ref.host, broker, api_key, version, wr->buf, wr->len,
                                 timeout_ms, km_state_call_cb, call);
    if (rc != KBX_OK)
        km_state_outstanding_done(st);
    return rc;
}

static km_state_call_t *km_state_call_new(km_state_t *st, int kind, int32_t partition, uint64_t gen)
{
    km_state_call_t *call = km_calloc(st->cm, 1, sizeof(*call));

    if (call == NULL)
        return NULL;
    call->kind = kind;
    call->partition = partition;
    call->gen = gen;
    return call;
}

static int16_t km_state_kbx_to_kafka(int32_t status)
{
    switch (status) {
    case KBX_ERR_TIMEOUT:
        return KP_ERR_REQUEST_TIMED_OUT;
    case KBX_ERR_NOT_LEADER:
    case KBX_ERR_FENCED:
        return KP_ERR_NOT_COORDINATOR;
    default:
        return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    }
}

/* ---- timers ------------------------------------------------------------------------------ */

static void km_state_shard_fetch(km_state_t *st, km_state_shard_t *sh);

static void km_state_timer_run(km_plugin_t *cm, void *arg)
{
    km_state_timer_t *tm = arg, **pt;
    km_state_t *st = km_state_of(cm);
    km_state_shard_t *sh;

    /* Found by address before it is touched: km_state_stop may have cancelled and freed it
     * after it fired (no timer starts once stopping, so the address is not reused). */
    for (pt = &st->timers; *pt != NULL && *pt != tm; pt = &(*pt)->next)
        ;
    if (*pt == NULL)
        return;
    *pt = tm->next;
    KM_CHECK_OBJ(cm, tm, KM_STATE_TIMER_MAGIC);
    cm->ref.api->timer_cancel(cm->ref.host, tm->timer);
    sh = st->shards != NULL ? st->shards[tm->partition] : NULL;
    if (sh != NULL && sh->gen == tm->gen) {
        sh->timer_wait = false;
        km_state_shard_fetch(st, sh);
    }
    tm->magic = 0;
    km_free(cm, tm);
}

static void km_state_timer_fire(void *arg)
{
    km_state_timer_t *tm = arg;
    km_state_t *st = tm->st;

    /* Dropped (queue closed): km_state_stop / destroy cancel and free it. */
    km_coord_post(&st->cm->coord, km_state_timer_run, NULL, tm);
}

static void km_state_timer_start(km_state_t *st, km_state_shard_t *sh, int64_t delay_ms)
{
    km_plugin_t *cm = st->cm;
    km_state_timer_t *tm;

    if (km_state_stopping(st) || sh->timer_wait)
        return;
    tm = km_calloc(cm, 1, sizeof(*tm));
    if (tm == NULL)
        return; /* the next leadership change or request retries the load */
    tm->magic = KM_STATE_TIMER_MAGIC;
    tm->st = st;
    tm->partition = sh->partition;
    tm->gen = sh->gen;
    if (cm->ref.api->timer_start(cm->ref.host, delay_ms, 0, km_state_timer_fire, tm, &tm->timer) !=
        KBX_OK) {
        km_free(cm, tm);
        return;
    }
    tm->next = st->timers;
    st->timers = tm;
    sh->timer_wait = true;
}

static void km_state_timers_cancel(km_state_t *st)
{
    km_state_timer_t *tm;

    while ((tm = st->timers) != NULL) {
        st->timers = tm->next;
        st->cm->ref.api->timer_cancel(st->cm->ref.host, tm->timer);
        tm->magic = 0;
        km_free(st->cm, tm);
    }
}

/* ---- shards ------------------------------------------------------------------------------ */

static void km_state_metric_shards(km_state_t *st)
{
    st->cm->ref.api->metric_record(st->cm->ref.host, st->m_shards,
                                   (double)km_state_shard_count(st->cm));
}

static void km_state_shard_drop(km_state_t *st, int32_t partition, const char *why)
{
    km_state_shard_t *sh = st->shards[partition];

    if (sh == NULL)
        return;
    st->shards[partition] = NULL;
    km_log_info(st->cm, "__mirror_state-%d: shard dropped (%s; epoch %d, %zu keys)", (int)partition,
                why, (int)sh->leader_epoch, sh->table.count);
    km_state_pop_fail_list(st, sh->waiting, KP_ERR_NOT_COORDINATOR,
                           "this broker no longer leads the __mirror_state partition");
    km_state_pop_fail_list(st, sh->wq, KP_ERR_NOT_COORDINATOR,
                           "this broker no longer leads the __mirror_state partition");
    km_state_table_clear(&sh->table);
    while (sh->pdel != NULL) {
        km_state_pdel_t *pd = sh->pdel;

        sh->pdel = pd->next;
        km_free(st->cm, pd);
    }
    sh->magic = 0;
    km_free(st->cm, sh);
    km_state_metric_shards(st);
}

static void km_state_shard_pump(km_state_t *st, km_state_shard_t *sh);
static void km_state_pop_local(km_state_t *st, km_state_pop_t *pop);

static void km_state_shard_create(km_state_t *st, int32_t partition, int32_t epoch,
                                  const kbx_uuid_t *topic_id)
{
    km_plugin_t *cm = st->cm;
    const kbx_api_t *api = cm->ref.api;
    km_state_shard_t *sh;
    kbx_partition_t *part = NULL;

    sh = km_calloc(cm, 1, sizeof(*sh));
    if (sh == NULL) {
        km_log_error(cm, "__mirror_state-%d: no memory for the shard; not coordinating it",
                     (int)partition);
        return;
    }
    sh->magic = KM_STATE_SHARD_MAGIC;
    sh->partition = partition;
    sh->leader_epoch = epoch;
    sh->gen = ++st->next_gen;
    sh->topic_id = *topic_id;
    sh->target = -1;
    sh->wq_tail = &sh->wq;
    sh->load_start_ns = api->clock_monotonic_ns(cm->ref.host);
    km_state_table_init(&sh->table, cm);
    /* Load up to the log end offset as it is now: acknowledged writes of the old leader are
     * there even before this leader's high watermark covers them. */
    if (api->partition_acquire(cm->ref.host, topic_id, partition, epoch, &part) == KBX_OK) {
        kbx_log_offsets_t offs = {.struct_size = sizeof(offs)};

        if (api->log_offsets(cm->ref.host, part, &offs) == KBX_OK) {
            sh->next_offset = offs.log_start_offset;
            sh->target = offs.log_end_offset;
        }
        api->partition_release(cm->ref.host, part);
    }
    st->shards[partition] = sh;
    km_state_metric_shards(st);
    km_log_info(cm, "__mirror_state-%d: leader at epoch %d, loading from offset %lld to %lld",
                (int)partition, (int)epoch, (long long)sh->next_offset, (long long)sh->target);
    km_state_shard_fetch(st, sh);
}

static void km_state_shard_run_pdel(km_state_t *st, km_state_shard_t *sh);

static void km_state_shard_mark_loaded(km_state_t *st, km_state_shard_t *sh)
{
    km_plugin_t *cm = st->cm;
    int64_t ms = (cm->ref.api->clock_monotonic_ns(cm->ref.host) - sh->load_start_ns) / 1000000;
    km_state_pop_t *list = sh->waiting, *next;

    sh->loaded = true;
    sh->waiting = NULL;
    cm->ref.api->metric_record(cm->ref.host, st->m_load_ms, (double)ms);
    km_log_info(cm,
                "__mirror_state-%d: loaded at epoch %d in %lld ms: %zu keys from %llu records "
                "(%llu tombstones, %llu skipped, %llu unreadable)",
                (int)sh->partition, (int)sh->leader_epoch, (long long)ms, sh->table.count,
                (unsigned long long)sh->stats.records, (unsigned long long)sh->stats.tombstones,
                (unsigned long long)sh->stats.skipped, (unsigned long long)sh->stats.bad);
    km_state_shard_run_pdel(st, sh);
    for (; list != NULL; list = next) {
        next = list->next;
        list->next = NULL;
        km_state_pop_local(st, list);
    }
}

static void km_state_shard_fetch(km_state_t *st, km_state_shard_t *sh)
{
    kp_FetchRequest_t rq;
    kp_FetchRequest_FetchTopic_t t;
    kp_FetchRequest_FetchPartition_t p;
    km_state_call_t *call;
    kp_writer_t wr;
    int32_t rc;

    if (sh->loaded || sh->busy || sh->failed || sh->timer_wait)
        return;
    call = km_state_call_new(st, KM_STATE_CALL_FETCH, sh->partition, sh->gen);
    if (call == NULL) {
        km_state_timer_start(st, sh, KM_STATE_RETRY_MS);
        return;
    }
    kp_FetchRequest_init(&rq);
    kp_FetchRequest_FetchTopic_init(&t);
    kp_FetchRequest_FetchPartition_init(&p);
    rq.ReplicaId = -1;
    rq.MaxWaitMs = sh->target >= 0 ? KM_STATE_FETCH_WAIT_MS : 0;
    rq.MinBytes = 1;
    rq.MaxBytes = KM_STATE_FETCH_MAX_BYTES;
    rq.IsolationLevel = 0;
    rq.SessionId = 0;
    rq.SessionEpoch = -1;
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    rq.ForgottenTopicsData.cnt = 0;
    rq.RackId = kp_str("");
    t.Topic = kp_str(KM_STATE_TOPIC);
    t.Partitions.cnt = 1;
    t.Partitions.v = &p;
    p.Partition = sh->partition;
    p.CurrentLeaderEpoch = sh->leader_epoch;
    p.FetchOffset = sh->next_offset;
    p.LastFetchedEpoch = -1;
    p.LogStartOffset = -1;
    p.PartitionMaxBytes = KM_STATE_FETCH_MAX_BYTES;
    kp_writer_init(&wr);
    kp_FetchRequest_encode(&wr, &rq, KM_STATE_FETCH_VERSION);
    rc = km_state_call_send(st, call, -1, KP_APIKEY_Fetch, KM_STATE_FETCH_VERSION, &wr,
                            st->cm->conf.coordinator_write_timeout_ms + KM_STATE_FETCH_WAIT_MS);
    kp_writer_free(&wr);
    if (rc != KBX_OK) {
        km_state_call_free(st, call);
        km_state_timer_start(st, sh, KM_STATE_RETRY_MS);
        return;
    }
    sh->busy = true;
}

/* Local requests wait for a load at most mirror.coordinator.write.timeout.ms. */
static void km_state_expire_waiters(km_state_t *st, km_state_shard_t *sh)
{
    int64_t limit = km_state_now_mono_ms(st) - st->cm->conf.coordinator_write_timeout_ms;
    km_state_pop_t **pp = &sh->waiting, *pop, *expired = NULL;

    while ((pop = *pp) != NULL) {
        if (pop->waited && pop->wait_since_ms <= limit) {
            *pp = pop->next;
            pop->next = expired;
            expired = pop;
        } else {
            pp = &pop->next;
        }
    }
    km_state_pop_fail_list(st, expired, KP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
                           "the __mirror_state partition of the key is still loading");
}

static void km_state_load_retry(km_state_t *st, km_state_shard_t *sh, const char *why)
{
    km_state_expire_waiters(st, sh);
    sh->load_errors++;
    if (sh->load_errors == 1 || sh->load_errors % 50 == 0)
        km_log_warn(st->cm, "__mirror_state-%d: loading at offset %lld: %s; retrying",
                    (int)sh->partition, (long long)sh->next_offset, why);
    km_state_timer_start(st, sh, KM_STATE_RETRY_MS);
}

static void km_state_fetch_done(km_state_t *st, km_state_shard_t *sh, km_state_call_t *call)
{
    const kp_FetchResponse_PartitionData_t *pd = NULL;
    kp_FetchResponse_t resp;
    kp_reader_t rd;
    kp_arena_t ar;
    int64_t before = sh->next_offset, hw;
    km_err_t err;
    char why[160];

    sh->busy = false;
    km_state_expire_waiters(st, sh);
    if (call->status != KBX_OK) {
        snprintf(why, sizeof(why), "local Fetch failed: %s", km_state_kbx_str(call->status));
        km_state_load_retry(st, sh, why);
        return;
    }
    kp_arena_init(&ar, KM_STATE_RPC_ARENA_MAX);
    kp_reader_init(&rd, call->body, call->len);
    if (kp_FetchResponse_decode(&rd, &ar, &resp, KM_STATE_FETCH_VERSION) != 0 ||
        resp.Responses.cnt != 1 || resp.Responses.v[0].Partitions.cnt != 1) {
        kp_arena_free(&ar);
        km_state_load_retry(st, sh, "unreadable Fetch response");
        return;
    }
    pd = &resp.Responses.v[0].Partitions.v[0];
    if (pd->ErrorCode == KP_ERR_OFFSET_OUT_OF_RANGE && pd->LogStartOffset > sh->next_offset) {
        /* Retention or DeleteRecords moved the start: what lies below it is gone. */
        sh->next_offset = pd->LogStartOffset;
        kp_arena_free(&ar);
        km_state_shard_fetch(st, sh);
        return;
    }
    if (pd->ErrorCode != 0) {
        snprintf(why, sizeof(why), "Fetch error %s", kp_errcode_name(pd->ErrorCode));
        kp_arena_free(&ar);
        km_state_load_retry(st, sh, why);
        return;
    }
    hw = pd->HighWatermark; /* pd lives in ar, freed before the last use */
    if (sh->target < 0)
        sh->target = hw;
    if (pd->Records.len > 0) {
        err = km_state_table_replay(&sh->table, sh->partition, pd->Records.ptr,
                                    (size_t)pd->Records.len, &sh->next_offset, &sh->stats);
        if (err == KM_ERR_INVALID) {
            sh->failed = true;
            km_log_error(st->cm,
                         "__mirror_state-%d: the log is corrupt at offset %lld; the shard is not "
                         "served (COORDINATOR_NOT_AVAILABLE) until leadership changes",
                         (int)sh->partition, (long long)sh->next_offset);
            kp_arena_free(&ar);
            km_state_pop_fail_list(st, sh->waiting, KP_ERR_COORDINATOR_NOT_AVAILABLE,
                                   "the __mirror_state partition cannot be read");
            sh->waiting = NULL;
            return;
        }
        if (err != KM_OK) {
            kp_arena_free(&ar);
            km_state_load_retry(st, sh, "out of memory");
            return;
        }
    }
    kp_arena_free(&ar);
    sh->load_errors = 0;
    /* Done at the target, or when nothing below the high watermark is left to read (the rest
     * was compacted away). */
    if (sh->next_offset >= sh->target || (sh->next_offset == before && hw >= sh->target)) {
        km_state_shard_mark_loaded(st, sh);
        return;
    }
    km_state_shard_fetch(st, sh);
}

/* ---- writes ------------------------------------------------------------------------------ */

static void *km_state_pb_alloc(void *opaque, size_t size)
{
    return km_malloc(opaque, size);
}

static void km_state_pb_free(void *opaque, void *p)
{
    km_free(opaque, p);
}

/* Decode the stored partition state of @p e into @p v (strings in @p ar). */
static int km_state_entry_decode(km_state_t *st, const km_state_entry_t *e, kp_arena_t *ar,
                                 kp_state_value_t *v)
{
    kp_alloc_t al = {.alloc = km_state_pb_alloc, .free = km_state_pb_free, .opaque = st->cm};
    const char *why = NULL;

    if (kp_state_value_decode(e->value, e->value_len, ar, v, &al, &why) != 0 ||
        v->type != KP_STATE_REC_PARTITION_STATE)
        return -1;
    return 0;
}

/* Compute a queued write's new value against the table; 0 or a Kafka error. */
static int16_t km_state_write_prepare(km_state_t *st, km_state_shard_t *sh, km_state_pop_t *pop,
                                      const char **msg)
{
    kp_alloc_t al = {.alloc = km_state_pb_alloc, .free = km_state_pb_free, .opaque = st->cm};
    const km_state_entry_t *e = km_state_table_get(&sh->table, pop->key, pop->key_len);
    kp_state_value_t cur, out;
    kp_arena_t ar;
    kp_writer_t wr;
    int16_t err;

    if (pop->kind == KM_STATE_POP_TOMB || pop->kind == KM_STATE_POP_PUT)
        return 0; /* a tombstone (no value) or a value encoded by km_state_put_record */
    kp_arena_init(&ar, 1u << 20);
    if (e != NULL && km_state_entry_decode(st, e, &ar, &cur) != 0) {
        kp_arena_free(&ar);
        *msg = "the stored state of this partition cannot be read";
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
    kp_state_value_init(&out, KP_STATE_REC_PARTITION_STATE);
    err = km_state_pstate_apply(e != NULL ? &cur.u.partition : NULL, &pop->w, km_state_now_ms(st),
                                &out.u.partition, msg);
    if (err != 0) {
        kp_arena_free(&ar);
        return err;
    }
    kp_writer_init(&wr);
    if (kp_state_value_encode(&wr, &out, &al) != 0 || wr.err != 0) {
        kp_writer_free(&wr);
        kp_arena_free(&ar);
        *msg = "cannot encode the state";
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
    kp_arena_free(&ar);
    pop->value = km_malloc(st->cm, wr.len);
    if (pop->value == NULL) {
        kp_writer_free(&wr);
        *msg = "out of memory";
        return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    }
    memcpy(pop->value, wr.buf, wr.len);
    pop->value_len = wr.len;
    pop->new_epoch = out.u.partition.state_epoch;
    kp_writer_free(&wr);
    return 0;
}

static bool km_state_batch_has_key(const km_state_pop_t *list, const km_state_pop_t *pop)
{
    for (; list != NULL; list = list->next)
        if (list->key_len == pop->key_len && memcmp(list->key, pop->key, pop->key_len) == 0)
            return true;
    return false;
}

/* Send the queued writes of a loaded shard as one batch (one Produce in flight per shard; a
 * key written twice waits for the next batch, so each write sees the one before it). */
static void km_state_shard_pump(km_state_t *st, km_state_shard_t *sh)
{
    km_plugin_t *cm = st->cm;
    km_state_pop_t *batch = NULL, **btail = &batch, *pop;
    kp_ProduceRequest_t rq;
    kp_ProduceRequest_TopicProduceData_t t;
    kp_ProduceRequest_PartitionProduceData_t p;
    kp_batch_builder_t bb;
    kp_batch_opts_t opts;
    kp_writer_t recs, wr;
    km_state_call_t *call;
    int64_t now = km_state_now_ms(st);
    int32_t rc;

    if (!sh->loaded || sh->busy || sh->wq == NULL)
        return;
    kp_batch_opts_init(&opts);
    kp_batch_builder_init(&bb, &opts);
    while ((pop = sh->wq) != NULL && !km_state_batch_has_key(batch, pop)) {
        const char *msg = NULL;
        int16_t err;

        sh->wq = pop->next;
        if (sh->wq == NULL)
            sh->wq_tail = &sh->wq;
        pop->next = NULL;
        err = km_state_write_prepare(st, sh, pop, &msg);
        if (err == 0 && kp_batch_builder_add(
                            &bb, now, (kp_bytes_t){pop->key, (int32_t)pop->key_len},
                            pop->value != NULL ? (kp_bytes_t){pop->value, (int32_t)pop->value_len}
                                               : KP_BYTES_NULL,
                            NULL, 0) != 0) {
            err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
            msg = "out of memory";
        }
        if (err != 0) {
            if (err != KP_ERR_FENCED_LEADER_EPOCH && err != KP_ERR_FENCED_STATE_EPOCH &&
                err != KP_ERR_INVALID_CLUSTER_MIRROR_STATES && err != KP_ERR_INVALID_REQUEST)
                cm->ref.api->metric_record(cm->ref.host, st->m_write_errors, 1);
            km_state_pop_finish(st, pop, err, msg, NULL);
            continue;
        }
        *btail = pop;
        btail = &pop->next;
    }
    if (batch == NULL) {
        kp_batch_builder_free(&bb);
        return;
    }
    kp_writer_init(&recs);
    if (kp_batch_builder_finish(&bb, &recs) != 0)
        goto fail;
    kp_batch_builder_free(&bb);
    call = km_state_call_new(st, KM_STATE_CALL_PRODUCE, sh->partition, sh->gen);
    if (call == NULL)
        goto fail_recs;
    kp_ProduceRequest_init(&rq);
    kp_ProduceRequest_TopicProduceData_init(&t);
    kp_ProduceRequest_PartitionProduceData_init(&p);
    rq.TransactionalId = KP_STR_NULL;
    rq.Acks = -1;
    rq.TimeoutMs = (int32_t)cm->conf.coordinator_write_timeout_ms;
    rq.TopicData.cnt = 1;
    rq.TopicData.v = &t;
    t.Name = kp_str(KM_STATE_TOPIC);
    t.PartitionData.cnt = 1;
    t.PartitionData.v = &p;
    p.Index = sh->partition;
    p.Records = (kp_bytes_t){recs.buf, (int32_t)recs.len};
    kp_writer_init(&wr);
    kp_ProduceRequest_encode(&wr, &rq, KM_STATE_PRODUCE_VERSION);
    call->ops = batch;
    rc = km_state_call_send(st, call, -1, KP_APIKEY_Produce, KM_STATE_PRODUCE_VERSION, &wr,
                            cm->conf.coordinator_write_timeout_ms + 1000);
    kp_writer_free(&wr);
    kp_writer_free(&recs);
    if (rc != KBX_OK) {
        call->ops = NULL;
        km_state_call_free(st, call);
        km_state_pop_fail_list(st, batch, KP_ERR_COORDINATOR_NOT_AVAILABLE,
                               "cannot send the write to the __mirror_state partition");
        return;
    }
    sh->busy = true;
    cm->ref.api->metric_record(cm->ref.host, st->m_writes, 1);
    return;

fail:
    kp_batch_builder_free(&bb);
fail_recs:
    kp_writer_free(&recs);
    km_state_pop_fail_list(st, batch, KP_ERR_COORDINATOR_NOT_AVAILABLE, "out of memory");
}

/* Produce errors as the coordinator's clients see them (Kafka's group coordinator mapping). */
static int16_t km_state_produce_err(int16_t ec, bool *ambiguous)
{
    *ambiguous = false;
    switch (ec) {
    case KP_ERR_NOT_LEADER_OR_FOLLOWER:
    case KP_ERR_FENCED_LEADER_EPOCH:
    case KP_ERR_KAFKA_STORAGE_ERROR:
        return KP_ERR_NOT_COORDINATOR;
    case KP_ERR_UNKNOWN_TOPIC_OR_PARTITION:
    case KP_ERR_NOT_ENOUGH_REPLICAS:
        return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    case KP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
    case KP_ERR_REQUEST_TIMED_OUT:
        *ambiguous = true; /* may be in the log after all */
        return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    default:
        *ambiguous = true;
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
}

static void km_state_produce_done(km_state_t *st, km_state_call_t *call)
{
    km_plugin_t *cm = st->cm;
    km_state_shard_t *sh = st->shards[call->partition];
    km_state_pop_t *batch = call->ops, *pop, *next;
    int16_t ec = 0;
    bool ambiguous = false;
    char msg[160];

    call->ops = NULL;
    if (sh == NULL || sh->gen != call->gen) {
        /* Leadership moved while the write was in flight: nothing is applied here; the new
         * leader loads whatever the log kept. */
        km_state_pop_fail_list(st, batch, KP_ERR_NOT_COORDINATOR,
                               "leadership of the __mirror_state partition moved during the "
                               "write");
        return;
    }
    sh->busy = false;
    if (call->status != KBX_OK) {
        ec = km_state_kbx_to_kafka(call->status);
        ambiguous = call->status == KBX_ERR_TIMEOUT;
        snprintf(msg, sizeof(msg), "the write to __mirror_state-%d failed: %s",
                 (int)call->partition, km_state_kbx_str(call->status));
    } else {
        kp_ProduceResponse_t resp;
        kp_reader_t rd;
        kp_arena_t ar;

        kp_arena_init(&ar, KM_STATE_RPC_ARENA_MAX);
        kp_reader_init(&rd, call->body, call->len);
        if (kp_ProduceResponse_decode(&rd, &ar, &resp, KM_STATE_PRODUCE_VERSION) != 0 ||
            resp.Responses.cnt != 1 || resp.Responses.v[0].PartitionResponses.cnt != 1) {
            ec = KP_ERR_UNKNOWN_SERVER_ERROR;
            ambiguous = true;
            snprintf(msg, sizeof(msg), "unreadable Produce response from __mirror_state-%d",
                     (int)call->partition);
        } else if (resp.Responses.v[0].PartitionResponses.v[0].ErrorCode != 0) {
            int16_t pe = resp.Responses.v[0].PartitionResponses.v[0].ErrorCode;

            ec = km_state_produce_err(pe, &ambiguous);
            snprintf(msg, sizeof(msg), "the write to __mirror_state-%d failed: %s",
                     (int)call->partition, kp_errcode_name(pe));
        }
        kp_arena_free(&ar);
    }
    if (ec != 0) {
        cm->ref.api->metric_record(cm->ref.host, st->m_write_errors, 1);
        km_log_warn(cm, "%s", msg);
        km_state_pop_fail_list(st, batch, ec, msg);
        if (ambiguous) {
            /* The records may be in the log after all: reload so the table matches it. */
            int32_t epoch = sh->leader_epoch;
            kbx_uuid_t id = sh->topic_id;

            km_state_shard_drop(st, call->partition, "a write's outcome is unknown; reloading");
            km_state_shard_create(st, call->partition, epoch, &id);
        } else {
            km_state_shard_pump(st, sh);
        }
        return;
    }
    for (pop = batch; pop != NULL; pop = next) {
        kp_state_value_t v;
        kp_arena_t ar;
        km_err_t err;

        next = pop->next;
        pop->next = NULL;
        err = km_state_table_put(&sh->table, pop->key, pop->key_len, pop->value, pop->value_len);
        if (err != KM_OK) {
            /* In the log but not in memory: reload after answering. */
            km_state_pop_finish(st, pop, KP_ERR_COORDINATOR_NOT_AVAILABLE, "out of memory", NULL);
            continue;
        }
        kp_arena_init(&ar, 1u << 20);
        if (pop->kind == KM_STATE_POP_WRITE) {
            const km_state_entry_t *e = km_state_table_get(&sh->table, pop->key, pop->key_len);

            if (e != NULL && km_state_entry_decode(st, e, &ar, &v) == 0)
                km_state_pop_finish(st, pop, 0, NULL, &v.u.partition);
            else
                km_state_pop_finish(st, pop, KP_ERR_UNKNOWN_SERVER_ERROR, "state lost", NULL);
        } else {
            km_state_pop_finish(st, pop, 0, NULL, NULL);
        }
        kp_arena_free(&ar);
    }
    km_state_shard_pump(st, sh);
}

/* ---- serving a pop on this broker ---------------------------------------------------------- */

static void km_state_pop_local(km_state_t *st, km_state_pop_t *pop)
{
    km_state_shard_t *sh = st->shards[pop->shard];

    if (km_state_stopping(st)) {
        km_state_pop_finish(st, pop, KP_ERR_COORDINATOR_NOT_AVAILABLE, "shutting down", NULL);
        return;
    }
    if (sh == NULL) {
        km_state_pop_finish(st, pop, KP_ERR_NOT_COORDINATOR,
                            "this broker does not lead the __mirror_state partition of the key",
                            NULL);
        return;
    }
    if (sh->failed) {
        km_state_pop_finish(st, pop, KP_ERR_COORDINATOR_NOT_AVAILABLE,
                            "the __mirror_state partition of the key cannot be read", NULL);
        return;
    }
    if (!sh->loaded || (sh->gate > 0 && pop->kind == KM_STATE_POP_READ)) {
        if (pop->from_rpc) {
            km_state_pop_finish(st, pop, KP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
                                "the __mirror_state partition of the key is loading", NULL);
            return;
        }
        if (!pop->waited) {
            pop->waited = true;
            pop->wait_since_ms = km_state_now_mono_ms(st);
        }
        pop->next = sh->waiting;
        sh->waiting = pop;
        return;
    }
    if (pop->kind == KM_STATE_POP_GET) {
        const km_state_entry_t *e = km_state_table_get(&sh->table, pop->key, pop->key_len);
        kp_alloc_t al = {.alloc = km_state_pb_alloc, .free = km_state_pb_free, .opaque = st->cm};
        kp_state_value_t v;
        kp_arena_t ar;

        kp_arena_init(&ar, 4u << 20);
        if (e == NULL)
            pop->gcb(st->cm, pop->arg, 0, NULL, NULL);
        else if (kp_state_value_decode(e->value, e->value_len, &ar, &v, &al, NULL) != 0)
            pop->gcb(st->cm, pop->arg, KP_ERR_UNKNOWN_SERVER_ERROR,
                     "the stored value cannot be read", NULL);
        else
            pop->gcb(st->cm, pop->arg, 0, NULL, &v);
        kp_arena_free(&ar);
        km_state_pop_free(st, pop);
        return;
    }
    if (pop->kind == KM_STATE_POP_READ) {
        const km_state_entry_t *e = km_state_table_get(&sh->table, pop->key, pop->key_len);
        kp_state_value_t v;
        kp_arena_t ar;

        if (e == NULL) {
            km_state_pop_finish(st, pop, 0, NULL, NULL);
            return;
        }
        kp_arena_init(&ar, 1u << 20);
        if (km_state_entry_decode(st, e, &ar, &v) != 0)
            km_state_pop_finish(st, pop, KP_ERR_UNKNOWN_SERVER_ERROR,
                                "the stored state of this partition cannot be read", NULL);
        else
            km_state_pop_finish(st, pop, 0, NULL, &v.u.partition);
        kp_arena_free(&ar);
        return;
    }
    pop->next = NULL;
    *sh->wq_tail = pop;
    sh->wq_tail = &pop->next;
    km_state_shard_pump(st, sh);
}

/* ---- metadata and leadership ------------------------------------------------------------- */

typedef struct km_state_lead_ev {
    uint32_t count;
    struct {
        int32_t role, partition, leader_id, leader_epoch;
        kbx_uuid_t topic_id;
    } v[];
} km_state_lead_ev_t;

static void km_state_lead_run(km_plugin_t *cm, void *arg)
{
    km_state_t *st = km_state_of(cm);
    km_state_lead_ev_t *ev = arg;
    uint32_t i;

    km_state_orphans(st);
    for (i = 0; i < ev->count; i++) {
        int32_t p = ev->v[i].partition;
        km_state_shard_t *sh;

        if (p < 0 || p >= st->nparts) {
            km_log_warn(cm,
                        "__mirror_state-%d is outside mirror.state.topic.num.partitions (%d): "
                        "not coordinated",
                        (int)p, (int)st->nparts);
            continue;
        }
        st->leaders[p] = ev->v[i].role == KBX_ROLE_LEADER ? cm->broker_id : ev->v[i].leader_id;
        sh = st->shards[p];
        if (ev->v[i].role == KBX_ROLE_LEADER) {
            if (sh != NULL && sh->leader_epoch == ev->v[i].leader_epoch)
                continue;
            if (sh != NULL)
                km_state_shard_drop(st, p, "new leader epoch");
            if (!km_state_stopping(st))
                km_state_shard_create(st, p, ev->v[i].leader_epoch, &ev->v[i].topic_id);
        } else if (sh != NULL) {
            km_state_shard_drop(st, p, "leadership resigned");
        }
    }
    km_free(cm, ev);
}

void km_state_on_leadership(km_plugin_t *cm, const kbx_leadership_change_t *const *changes,
                            uint32_t count)
{
    km_state_lead_ev_t *ev;
    uint32_t i, n = 0;

    for (i = 0; i < count; i++)
        if (changes[i]->struct_size >= offsetof(kbx_leadership_change_t, partition_epoch) &&
            changes[i]->topic_name != NULL && strcmp(changes[i]->topic_name, KM_STATE_TOPIC) == 0)
            n++;
    if (n == 0)
        return;
    ev = km_calloc(cm, 1, sizeof(*ev) + n * sizeof(ev->v[0]));
    if (ev == NULL) {
        km_log_error(cm, "no memory for %u __mirror_state leadership changes", (unsigned)n);
        return;
    }
    for (i = 0; i < count; i++) {
        const kbx_leadership_change_t *c = changes[i];

        if (c->struct_size < offsetof(kbx_leadership_change_t, partition_epoch) ||
            c->topic_name == NULL || strcmp(c->topic_name, KM_STATE_TOPIC) != 0)
            continue;
        ev->v[ev->count].role = c->role;
        ev->v[ev->count].partition = c->partition;
        ev->v[ev->count].leader_id = c->leader_id;
        ev->v[ev->count].leader_epoch = c->leader_epoch;
        ev->v[ev->count].topic_id = c->topic_id;
        ev->count++;
    }
    if (km_coord_post(&cm->coord, km_state_lead_run, km_state_free_arg, ev) == KM_ERR_NOMEM) {
        km_log_error(cm, "no memory to queue __mirror_state leadership changes");
        km_free(cm, ev);
    }
}

/* A metadata delta reduced to what the coordinator needs: topic names and ids, brokers. */
typedef struct km_state_md_ev {
    bool snapshot;
    uint32_t ntopics, nbrokers;
    struct km_state_md_topic {
        kbx_uuid_t id;
        bool deleted;
        int32_t partitions;
        char *name;
    } * topics;
    struct km_state_md_broker {
        int32_t id;
        uint32_t flags;
    } * brokers;
} km_state_md_ev_t;

static void km_state_md_free(km_plugin_t *cm, void *arg)
{
    km_state_md_ev_t *ev = arg;
    uint32_t i;

    for (i = 0; i < ev->ntopics; i++)
        km_free(cm, ev->topics[i].name);
    km_free(cm, ev->topics);
    km_free(cm, ev->brokers);
    km_free(cm, ev);
}

static void km_state_topics_clear(km_state_t *st)
{
    km_state_topic_t *t;

    while ((t = st->topics) != NULL) {
        st->topics = t->next;
        km_free(st->cm, t->name);
        km_free(st->cm, t);
    }
}

static km_state_topic_t *km_state_topic_find(km_state_t *st, const char *name)
{
    km_state_topic_t *t;

    for (t = st->topics; t != NULL; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

static void km_state_topic_forget(km_state_t *st, const char *name)
{
    km_state_topic_t **pt, *t;

    for (pt = &st->topics; (t = *pt) != NULL; pt = &t->next)
        if (strcmp(t->name, name) == 0) {
            *pt = t->next;
            km_free(st->cm, t->name);
            km_free(st->cm, t);
            return;
        }
}

static void km_state_broker_set(km_state_t *st, int32_t id, bool up)
{
    uint32_t i;

    for (i = 0; i < st->nbrokers && st->brokers[i] != id; i++)
        ;
    if (!up) {
        if (i < st->nbrokers)
            st->brokers[i] = st->brokers[--st->nbrokers];
        return;
    }
    if (i < st->nbrokers)
        return;
    if (st->nbrokers == st->brokers_cap) {
        uint32_t cap = st->brokers_cap != 0 ? st->brokers_cap * 2 : 8;
        int32_t *v = km_realloc(st->cm, st->brokers, cap * sizeof(*v));

        if (v == NULL)
            return;
        st->brokers = v;
        st->brokers_cap = cap;
    }
    st->brokers[st->nbrokers++] = id;
}

static void km_state_md_run(km_plugin_t *cm, void *arg)
{
    km_state_t *st = km_state_of(cm);
    km_state_md_ev_t *ev = arg;
    uint32_t i;

    km_state_orphans(st);
    if (ev->snapshot) {
        km_state_topics_clear(st);
        st->nbrokers = 0;
        st->topic_seen = false;
    }
    for (i = 0; i < ev->ntopics; i++) {
        struct km_state_md_topic *mt = &ev->topics[i];
        km_state_topic_t *t;

        if (strcmp(mt->name, KM_STATE_TOPIC) == 0) {
            st->topic_seen = !mt->deleted;
            st->topic_id = mt->id;
            if (!mt->deleted && mt->partitions > 0 && mt->partitions != st->nparts)
                km_log_error(cm,
                             "%s has %d partitions but mirror.state.topic.num.partitions is %d: "
                             "keys are placed by the configured count, so state on partitions "
                             "the topic lacks is unavailable; set the key back to %d",
                             KM_STATE_TOPIC, (int)mt->partitions, (int)st->nparts,
                             (int)mt->partitions);
            continue;
        }
        km_state_topic_forget(st, mt->name);
        if (mt->deleted)
            continue;
        t = km_calloc(cm, 1, sizeof(*t));
        if (t == NULL) {
            km_log_error(cm, "no memory to remember topic %s", mt->name);
            continue;
        }
        t->name = mt->name;
        mt->name = NULL;
        t->id = mt->id;
        t->next = st->topics;
        st->topics = t;
    }
    for (i = 0; i < ev->nbrokers; i++)
        km_state_broker_set(
            st, ev->brokers[i].id,
            (ev->brokers[i].flags & KBX_BROKER_REGISTERED) != 0 &&
                (ev->brokers[i].flags & (KBX_BROKER_UNREGISTERED | KBX_BROKER_FENCED)) == 0);
    km_state_md_free(cm, ev);
}

void km_state_on_metadata(km_plugin_t *cm, const kbx_metadata_delta_t *delta)
{
    km_state_md_ev_t *ev;
    uint32_t i;

    /* Nothing we keep changed (an empty snapshot too: the tables start empty). */
    if (delta->topic_count == 0 && delta->broker_count == 0)
        return;
    ev = km_calloc(cm, 1, sizeof(*ev));
    if (ev == NULL)
        goto nomem;
    ev->snapshot = (delta->flags & KBX_DELTA_SNAPSHOT) != 0;
    if (delta->topic_count != 0) {
        ev->topics = km_calloc(cm, delta->topic_count, sizeof(*ev->topics));
        if (ev->topics == NULL)
            goto free_ev;
    }
    for (i = 0; i < delta->topic_count; i++) {
        const kbx_topic_change_t *t = delta->topics[i];

        if (t->name == NULL)
            continue;
        ev->topics[ev->ntopics].name = km_strdup(cm, t->name);
        if (ev->topics[ev->ntopics].name == NULL)
            goto free_ev;
        ev->topics[ev->ntopics].id = t->topic_id;
        ev->topics[ev->ntopics].deleted = (t->flags & KBX_TOPIC_DELETED) != 0;
        ev->topics[ev->ntopics].partitions = t->partition_count;
        ev->ntopics++;
    }
    if (delta->broker_count != 0) {
        ev->brokers = km_calloc(cm, delta->broker_count, sizeof(*ev->brokers));
        if (ev->brokers == NULL)
            goto free_ev;
    }
    for (i = 0; i < delta->broker_count; i++) {
        ev->brokers[i].id = delta->brokers[i]->broker_id;
        ev->brokers[i].flags = delta->brokers[i]->flags;
        ev->nbrokers++;
    }
    if (km_coord_post(&cm->coord, km_state_md_run, km_state_md_free, ev) == KM_ERR_NOMEM)
        goto free_ev;
    return;

free_ev:
    km_state_md_free(cm, ev);
nomem:
    km_log_error(cm, "no memory to copy a metadata delta; topic names may be stale");
}

/* ---- client side: routing --------------------------------------------------------------- */

static void km_state_dispatch(km_state_t *st, km_state_pop_t *pop);
static void km_state_remote_send(km_state_t *st, km_state_pop_t *pop, int32_t broker);

/* Look up the leaders of __mirror_state with a Metadata request (for partitions this broker
 * holds no replica of, the leadership listener says nothing). */
static void km_state_md_lookup(km_state_t *st, km_state_pop_t *pop)
{
    kp_MetadataRequest_t rq;
    kp_MetadataRequest_MetadataRequestTopic_t t;
    km_state_call_t *call;
    kp_writer_t wr;
    int32_t rc;

    pop->next = st->md_wait;
    st->md_wait = pop;
    if (st->md_busy)
        return;
    call = km_state_call_new(st, KM_STATE_CALL_META, -1, 0);
    if (call == NULL)
        goto fail;
    kp_MetadataRequest_init(&rq);
    kp_MetadataRequest_MetadataRequestTopic_init(&t);
    t.Name = kp_str(KM_STATE_TOPIC);
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    rq.AllowAutoTopicCreation = false;
    kp_writer_init(&wr);
    kp_MetadataRequest_encode(&wr, &rq, KM_STATE_META_VERSION);
    rc = km_state_call_send(st, call, -1, KP_APIKEY_Metadata, KM_STATE_META_VERSION, &wr,
                            KM_STATE_META_TIMEOUT_MS);
    kp_writer_free(&wr);
    if (rc != KBX_OK) {
        km_state_call_free(st, call);
        goto fail;
    }
    st->md_busy = true;
    return;

fail:
    pop = st->md_wait;
    st->md_wait = NULL;
    km_state_pop_fail_list(st, pop, KP_ERR_COORDINATOR_NOT_AVAILABLE,
                           "cannot look up the leaders of __mirror_state");
}

static void km_state_md_done(km_state_t *st, km_state_call_t *call)
{
    km_state_pop_t *list = st->md_wait, *next;

    st->md_busy = false;
    st->md_wait = NULL;
    if (call->status == KBX_OK) {
        kp_MetadataResponse_t resp;
        kp_reader_t rd;
        kp_arena_t ar;
        int32_t i, j;

        kp_arena_init(&ar, KM_STATE_RPC_ARENA_MAX);
        kp_reader_init(&rd, call->body, call->len);
        if (kp_MetadataResponse_decode(&rd, &ar, &resp, KM_STATE_META_VERSION) == 0)
            for (i = 0; i < resp.Topics.cnt; i++) {
                const kp_MetadataResponse_MetadataResponseTopic_t *t = &resp.Topics.v[i];

                if (t->ErrorCode != 0 || !kp_str_eq(t->Name, KM_STATE_TOPIC))
                    continue;
                for (j = 0; j < t->Partitions.cnt; j++) {
                    int32_t p = t->Partitions.v[j].PartitionIndex;

                    /* Our own shards are known from the listener; trust it for those. */
                    if (p >= 0 && p < st->nparts && st->shards[p] == NULL)
                        st->leaders[p] =
                            t->Partitions.v[j].ErrorCode == 0 ? t->Partitions.v[j].LeaderId : -1;
                }
            }
        kp_arena_free(&ar);
    }
    for (; list != NULL; list = next) {
        int32_t leader;

        next = list->next;
        list->next = NULL;
        leader = st->leaders[list->shard];
        if (leader < 0)
            km_state_pop_finish(st, list, KP_ERR_COORDINATOR_NOT_AVAILABLE,
                                "the __mirror_state partition of the key has no leader", NULL);
        else if (leader == st->cm->broker_id)
            km_state_pop_local(st, list);
        else
            km_state_remote_send(st, list, leader);
    }
}

static void km_state_ensure_done_pops(km_state_t *st, int16_t err, const char *msg)
{
    km_state_pop_t *list = st->ensure_wait, *next;

    st->ensure_busy = false;
    st->ensure_wait = NULL;
    for (; list != NULL; list = next) {
        next = list->next;
        list->next = NULL;
        if (list->kind == 0) {
            /* a km_state_ensure_topic caller */
            if (list->dcb != NULL)
                list->dcb(st->cm, list->arg, err, err != 0 ? msg : NULL);
            km_state_pop_free(st, list);
        } else if (err != 0) {
            km_state_pop_finish(st, list, KP_ERR_COORDINATOR_NOT_AVAILABLE, msg, NULL);
        } else {
            km_state_dispatch(st, list);
        }
    }
}

static void km_state_create_send(km_state_t *st, int32_t rf);

/* Count the cluster's brokers with a Metadata request (no topics): the replication factor -1
 * means min(3, brokers), and the metadata listener may report only this broker. */
static void km_state_create_topic(km_state_t *st)
{
    kp_MetadataRequest_t rq;
    km_state_call_t *call;
    kp_writer_t wr;
    int32_t rc;

    if (st->ensure_busy)
        return;
    if (st->cm->conf.state_topic_replication_factor > 0) {
        km_state_create_send(st, st->cm->conf.state_topic_replication_factor);
        return;
    }
    call = km_state_call_new(st, KM_STATE_CALL_BROKERS, -1, 0);
    if (call == NULL) {
        km_state_ensure_done_pops(st, KP_ERR_COORDINATOR_NOT_AVAILABLE, "out of memory");
        return;
    }
    kp_MetadataRequest_init(&rq);
    rq.Topics.cnt = 0;
    rq.AllowAutoTopicCreation = false;
    kp_writer_init(&wr);
    kp_MetadataRequest_encode(&wr, &rq, KM_STATE_META_VERSION);
    rc = km_state_call_send(st, call, -1, KP_APIKEY_Metadata, KM_STATE_META_VERSION, &wr,
                            KM_STATE_META_TIMEOUT_MS);
    kp_writer_free(&wr);
    if (rc != KBX_OK) {
        km_state_call_free(st, call);
        km_state_ensure_done_pops(st, KP_ERR_COORDINATOR_NOT_AVAILABLE,
                                  "cannot send Metadata to count the brokers");
        return;
    }
    st->ensure_busy = true;
}

static void km_state_brokers_done(km_state_t *st, km_state_call_t *call)
{
    int32_t n = (int32_t)st->nbrokers;

    st->ensure_busy = false;
    if (call->status == KBX_OK) {
        kp_MetadataResponse_t resp;
        kp_reader_t rd;
        kp_arena_t ar;

        kp_arena_init(&ar, KM_STATE_RPC_ARENA_MAX);
        kp_reader_init(&rd, call->body, call->len);
        if (kp_MetadataResponse_decode(&rd, &ar, &resp, KM_STATE_META_VERSION) == 0 &&
            resp.Brokers.cnt > n)
            n = resp.Brokers.cnt;
        kp_arena_free(&ar);
    }
    km_state_create_send(st, n <= 0 ? 1 : (n < 3 ? n : 3));
}

static void km_state_create_send(km_state_t *st, int32_t rf)
{
    km_plugin_t *cm = st->cm;
    kp_CreateTopicsRequest_t rq;
    kp_CreateTopicsRequest_CreatableTopic_t t;
    kp_CreateTopicsRequest_CreatableTopicConfig_t c;
    km_state_call_t *call;
    kp_writer_t wr;
    int32_t rc;

    call = km_state_call_new(st, KM_STATE_CALL_CREATE, -1, 0);
    if (call == NULL) {
        km_state_ensure_done_pops(st, KP_ERR_COORDINATOR_NOT_AVAILABLE, "out of memory");
        return;
    }
    kp_CreateTopicsRequest_init(&rq);
    kp_CreateTopicsRequest_CreatableTopic_init(&t);
    kp_CreateTopicsRequest_CreatableTopicConfig_init(&c);
    c.Name = kp_str("cleanup.policy");
    c.Value = kp_str("compact");
    t.Name = kp_str(KM_STATE_TOPIC);
    t.NumPartitions = st->nparts;
    t.ReplicationFactor = (int16_t)rf;
    t.Assignments.cnt = 0;
    t.Configs.cnt = 1;
    t.Configs.v = &c;
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    rq.TimeoutMs = (int32_t)cm->conf.coordinator_write_timeout_ms;
    rq.ValidateOnly = false;
    kp_writer_init(&wr);
    kp_CreateTopicsRequest_encode(&wr, &rq, KM_STATE_CT_VERSION);
    rc = km_state_call_send(st, call, -1, KP_APIKEY_CreateTopics, KM_STATE_CT_VERSION, &wr,
                            cm->conf.coordinator_write_timeout_ms + 1000);
    kp_writer_free(&wr);
    if (rc != KBX_OK) {
        km_state_call_free(st, call);
        km_state_ensure_done_pops(st, KP_ERR_COORDINATOR_NOT_AVAILABLE,
                                  "cannot send CreateTopics for __mirror_state");
        return;
    }
    km_log_info(cm, "creating %s: %d partitions, replication factor %d, compacted", KM_STATE_TOPIC,
                (int)st->nparts, (int)rf);
    st->ensure_busy = true;
}

static void km_state_create_done(km_state_t *st, km_state_call_t *call)
{
    int16_t ec = 0;
    char msg[200];

    msg[0] = '\0';
    if (call->status != KBX_OK) {
        ec = KP_ERR_COORDINATOR_NOT_AVAILABLE;
        snprintf(msg, sizeof(msg), "CreateTopics %s failed: %s", KM_STATE_TOPIC,
                 km_state_kbx_str(call->status));
    } else {
        kp_CreateTopicsResponse_t resp;
        kp_reader_t rd;
        kp_arena_t ar;

        kp_arena_init(&ar, KM_STATE_RPC_ARENA_MAX);
        kp_reader_init(&rd, call->body, call->len);
        if (kp_CreateTopicsResponse_decode(&rd, &ar, &resp, KM_STATE_CT_VERSION) != 0 ||
            resp.Topics.cnt != 1) {
            ec = KP_ERR_COORDINATOR_NOT_AVAILABLE;
            snprintf(msg, sizeof(msg), "unreadable CreateTopics response");
        } else if (resp.Topics.v[0].ErrorCode != 0 &&
                   resp.Topics.v[0].ErrorCode != KP_ERR_TOPIC_ALREADY_EXISTS) {
            const kp_str_t m = resp.Topics.v[0].ErrorMessage;

            ec = resp.Topics.v[0].ErrorCode;
            snprintf(msg, sizeof(msg), "creating %s: %s: %.*s", KM_STATE_TOPIC, kp_errcode_name(ec),
                     m.len > 0 ? (int)m.len : 0, m.len > 0 ? m.ptr : "");
        }
        kp_arena_free(&ar);
    }
    if (ec != 0)
        km_log_warn(st->cm, "%s", msg);
    else
        st->topic_seen = true; /* the metadata delta follows; don't create it twice */
    km_state_ensure_done_pops(st, ec, msg);
}

km_err_t km_state_ensure_topic(km_plugin_t *cm, km_state_done_cb cb, void *arg)
{
    km_state_t *st = km_state_of(cm);
    km_state_pop_t *pop;

    if (km_state_stopping(st))
        return KM_ERR_SHUTDOWN;
    pop = km_calloc(cm, 1, sizeof(*pop));
    if (pop == NULL)
        return KM_ERR_NOMEM;
    pop->kind = 0;
    pop->dcb = cb;
    pop->arg = arg;
    pop->next = st->ensure_wait;
    st->ensure_wait = pop;
    km_state_create_topic(st);
    return KM_OK;
}

static void km_state_dispatch(km_state_t *st, km_state_pop_t *pop)
{
    int32_t leader;

    if (km_state_stopping(st)) {
        km_state_pop_finish(st, pop, KP_ERR_COORDINATOR_NOT_AVAILABLE, "shutting down", NULL);
        return;
    }
    if (st->shards[pop->shard] != NULL) {
        km_state_pop_local(st, pop);
        return;
    }
    if (!st->topic_seen && pop->kind == KM_STATE_POP_WRITE) {
        /* The first write creates the topic (CreateMirror normally did already). */
        pop->next = st->ensure_wait;
        st->ensure_wait = pop;
        km_state_create_topic(st);
        return;
    }
    leader = st->leaders[pop->shard];
    if (leader < 0 || leader == st->cm->broker_id) {
        km_state_md_lookup(st, pop);
        return;
    }
    km_state_remote_send(st, pop, leader);
}

/* ---- client side: remote requests ------------------------------------------------------- */

static void km_state_remote_send(km_state_t *st, km_state_pop_t *pop, int32_t broker)
{
    km_plugin_t *cm = st->cm;
    km_state_call_t *call = km_state_call_new(st, KM_STATE_CALL_REMOTE, pop->shard, 0);
    kp_writer_t wr;
    int32_t rc;
    int16_t key;

    if (call == NULL) {
        km_state_pop_finish(st, pop, KP_ERR_COORDINATOR_NOT_AVAILABLE, "out of memory", NULL);
        return;
    }
    kp_writer_init(&wr);
    if (pop->kind == KM_STATE_POP_READ) {
        kp_ReadMirrorStatesRequest_t rq;
        kp_ReadMirrorStatesRequest_TopicMetadata_t t;
        kp_ReadMirrorStatesRequest_PartitionData_t p;

        kp_ReadMirrorStatesRequest_init(&rq);
        kp_ReadMirrorStatesRequest_TopicMetadata_init(&t);
        kp_ReadMirrorStatesRequest_PartitionData_init(&p);
        rq.MirrorName = kp_str(pop->mirror);
        rq.Topics.cnt = 1;
        rq.Topics.v = &t;
        t.TopicName = kp_str(pop->topic);
        memcpy(t.TopicId.b, pop->topic_id.bytes, 16);
        t.Partitions.cnt = 1;
        t.Partitions.v = &p;
        p.PartitionIndex = pop->partition;
        kp_ReadMirrorStatesRequest_encode(&wr, &rq, 0);
        key = KP_APIKEY_ReadMirrorStates;
    } else {
        kp_WriteMirrorStatesRequest_t rq;
        kp_WriteMirrorStatesRequest_TopicMetadata_t t;
        kp_WriteMirrorStatesRequest_PartitionData_t p;

        kp_WriteMirrorStatesRequest_init(&rq);
        kp_WriteMirrorStatesRequest_TopicMetadata_init(&t);
        kp_WriteMirrorStatesRequest_PartitionData_init(&p);
        rq.MirrorName = kp_str(pop->mirror);
        rq.Topics.cnt = 1;
        rq.Topics.v = &t;
        t.TopicName = kp_str(pop->topic);
        memcpy(t.TopicId.b, pop->topic_id.bytes, 16);
        t.Partitions.cnt = 1;
        t.Partitions.v = &p;
        p.PartitionIndex = pop->partition;
        p.State = pop->w.state;
        p.LeaderEpoch = pop->w.leader_epoch;
        p.StateEpoch = pop->w.state_epoch;
        p.LastMirrorEpoch = pop->w.lme_epoch;
        p.LastMirrorOffset = pop->w.lme_offset;
        p.ErrorMessage = pop->w.error_message;
        p.RetryAttempt = pop->w.retry_attempt;
        p.NonRetryable = pop->w.non_retryable;
        kp_WriteMirrorStatesRequest_encode(&wr, &rq, 0);
        key = KP_APIKEY_WriteMirrorStates;
    }
    call->ops = pop;
    rc = km_state_call_send(st, call, broker, key, 0, &wr,
                            cm->conf.coordinator_write_timeout_ms + 1000);
    kp_writer_free(&wr);
    if (rc != KBX_OK) {
        call->ops = NULL;
        km_state_call_free(st, call);
        km_state_pop_finish(st, pop,
                            rc == KBX_ERR_NOT_FOUND ? KP_ERR_NOT_COORDINATOR
                                                    : KP_ERR_COORDINATOR_NOT_AVAILABLE,
                            "cannot send to the leader of the __mirror_state partition", NULL);
    }
}

static void km_state_remote_done(km_state_t *st, km_state_call_t *call)
{
    km_state_pop_t *pop = call->ops;
    kp_reader_t rd;
    kp_arena_t ar;
    char msg[256];

    call->ops = NULL;
    pop->next = NULL;
    if (call->status != KBX_OK) {
        snprintf(msg, sizeof(msg), "request to the __mirror_state coordinator failed: %s",
                 km_state_kbx_str(call->status));
        km_state_pop_finish(st, pop, km_state_kbx_to_kafka(call->status), msg, NULL);
        return;
    }
    kp_arena_init(&ar, KM_STATE_RPC_ARENA_MAX);
    kp_reader_init(&rd, call->body, call->len);
    if (pop->kind == KM_STATE_POP_READ) {
        kp_ReadMirrorStatesResponse_t r;
        const kp_ReadMirrorStatesResponse_PartitionResult_t *pr;

        if (kp_ReadMirrorStatesResponse_decode(&rd, &ar, &r, 0) != 0 ||
            (r.ErrorCode == 0 && (r.Topics.cnt != 1 || r.Topics.v[0].Partitions.cnt != 1))) {
            km_state_pop_finish(st, pop, KP_ERR_UNKNOWN_SERVER_ERROR,
                                "unreadable ReadMirrorStates response", NULL);
        } else if (r.ErrorCode != 0) {
            snprintf(msg, sizeof(msg), "%.*s", r.ErrorMessage.len > 0 ? (int)r.ErrorMessage.len : 0,
                     r.ErrorMessage.len > 0 ? r.ErrorMessage.ptr : "");
            km_state_pop_finish(st, pop, r.ErrorCode, msg[0] != '\0' ? msg : NULL, NULL);
        } else if ((pr = &r.Topics.v[0].Partitions.v[0])->ErrorCode != 0) {
            snprintf(msg, sizeof(msg), "%.*s",
                     pr->ErrorMessage.len > 0 ? (int)pr->ErrorMessage.len : 0,
                     pr->ErrorMessage.len > 0 ? pr->ErrorMessage.ptr : "");
            km_state_pop_finish(st, pop, pr->ErrorCode, msg[0] != '\0' ? msg : NULL, NULL);
        } else if (pr->State == KP_PSTATE_UNKNOWN && pr->StateEpoch == 0) {
            km_state_pop_finish(st, pop, 0, NULL, NULL); /* nothing stored */
        } else {
            kp_state_value_t v;

            kp_state_value_init(&v, KP_STATE_REC_PARTITION_STATE);
            v.u.partition.state = pr->State;
            v.u.partition.state_epoch = pr->StateEpoch;
            v.u.partition.leader_epoch = pr->LeaderEpoch;
            v.u.partition.last_mirrored_epoch = pr->LastMirrorEpoch;
            v.u.partition.last_mirrored_offset = pr->LastMirrorOffset;
            v.u.partition.non_retryable = pr->RetryAttempt < 0;
            v.u.partition.retry_attempt = pr->RetryAttempt < 0 ? 0 : pr->RetryAttempt;
            v.u.partition.previous_state = pr->PreviousState;
            /* With ErrorCode NONE, ErrorMessage is the stored failure's message. */
            v.u.partition.error_message = pr->ErrorMessage;
            km_state_pop_finish(st, pop, 0, NULL, &v.u.partition);
        }
    } else {
        kp_WriteMirrorStatesResponse_t r;
        const kp_WriteMirrorStatesResponse_PartitionResult_t *pr;

        if (kp_WriteMirrorStatesResponse_decode(&rd, &ar, &r, 0) != 0 ||
            (r.ErrorCode == 0 && (r.Topics.cnt != 1 || r.Topics.v[0].Partitions.cnt != 1))) {
            km_state_pop_finish(st, pop, KP_ERR_UNKNOWN_SERVER_ERROR,
                                "unreadable WriteMirrorStates response", NULL);
        } else if (r.ErrorCode != 0) {
            snprintf(msg, sizeof(msg), "%.*s", r.ErrorMessage.len > 0 ? (int)r.ErrorMessage.len : 0,
                     r.ErrorMessage.len > 0 ? r.ErrorMessage.ptr : "");
            km_state_pop_finish(st, pop, r.ErrorCode, msg[0] != '\0' ? msg : NULL, NULL);
        } else if ((pr = &r.Topics.v[0].Partitions.v[0])->ErrorCode != 0) {
            snprintf(msg, sizeof(msg), "%.*s",
                     pr->ErrorMessage.len > 0 ? (int)pr->ErrorMessage.len : 0,
                     pr->ErrorMessage.len > 0 ? pr->ErrorMessage.ptr : "");
            km_state_pop_finish(st, pop, pr->ErrorCode, msg[0] != '\0' ? msg : NULL, NULL);
        } else {
            kp_state_value_t v;

            kp_state_value_init(&v, KP_STATE_REC_PARTITION_STATE);
            v.u.partition.state_epoch = pr->StateEpoch;
            km_state_pop_finish(st, pop, 0, NULL, &v.u.partition);
        }
    }
    kp_arena_free(&ar);
}

static void km_state_call_run(km_plugin_t *cm, void *arg)
{
    km_state_call_t *call = arg;
    km_state_t *st = km_state_of(cm);
    km_state_shard_t *sh;

    KM_CHECK_OBJ(cm, call, KM_STATE_CALL_MAGIC);
    switch (call->kind) {
    case KM_STATE_CALL_FETCH:
        sh = st->shards[call->partition];
        if (sh != NULL && sh->gen == call->gen && !km_state_stopping(st))
            km_state_fetch_done(st, sh, call);
        else if (sh != NULL && sh->gen == call->gen)
            sh->busy = false;
        break;
    case KM_STATE_CALL_PRODUCE:
        km_state_produce_done(st, call);
        break;
    case KM_STATE_CALL_META:
        km_state_md_done(st, call);
        break;
    case KM_STATE_CALL_CREATE:
        km_state_create_done(st, call);
        break;
    case KM_STATE_CALL_REMOTE:
        km_state_remote_done(st, call);
        break;
    case KM_STATE_CALL_BROKERS:
        km_state_brokers_done(st, call);
        break;
    }
    km_state_call_free(st, call);
}

/* ---- client side: API ------------------------------------------------------------------- */

static void km_state_pstate_out(const kp_state_partition_t *v, km_state_pstate_t *out, char *errbuf,
                                size_t errbuf_size)
{
    out->state = v->state;
    out->previous_state = v->previous_state;
    out->retry_attempt = v->non_retryable ? -1 : v->retry_attempt;
    out->state_epoch = v->state_epoch;
    out->leader_epoch = v->leader_epoch;
    out->lme_epoch = v->last_mirrored_epoch;
    out->lme_offset = v->last_mirrored_offset;
    out->error_message = NULL;
    if (v->error_message.len >= 0) {
        snprintf(errbuf, errbuf_size, "%.*s", (int)v->error_message.len,
                 v->error_message.ptr != NULL ? v->error_message.ptr : "");
        out->error_message = errbuf;
    }
}

static void km_state_client_read_done(km_state_t *st, km_state_pop_t *pop, int16_t err,
                                      const char *msg, const kp_state_partition_t *val);

static void km_state_client_retry_read_done(km_state_t *st, km_state_pop_t *rpop, int16_t err,
                                            const char *msg, const kp_state_partition_t *val)
{
    km_state_pop_t *wpop = rpop->ctx;

    km_state_pop_free(st, rpop);
    if (err != 0) {
        km_state_pop_finish(st, wpop, KP_ERR_FENCED_STATE_EPOCH, msg, NULL);
        return;
    }
    wpop->w.state_epoch = val != NULL ? val->state_epoch : 0;
    km_state_dispatch(st, wpop);
}

static void km_state_client_write_done(km_state_t *st, km_state_pop_t *pop, int16_t err,
                                       const char *msg, const kp_state_partition_t *val)
{
    if (!pop->retried && (err == KP_ERR_NOT_COORDINATOR || err == KP_ERR_FENCED_STATE_EPOCH) &&
        !km_state_stopping(st)) {
        pop->retried = true;
        st->leaders[pop->shard] = -1; /* re-learn the leader */
        if (err == KP_ERR_FENCED_STATE_EPOCH) {
            /* §3.6: re-read the stored state, then retry once with its state epoch. */
            km_state_pop_t *rpop = km_calloc(st->cm, 1, sizeof(*rpop));

            if (rpop != NULL) {
                *rpop = *pop;
                rpop->kind = KM_STATE_POP_READ;
                rpop->waited = false;
                rpop->mirror = km_strdup(st->cm, pop->mirror);
                rpop->topic = km_strdup(st->cm, pop->topic);
                rpop->errmsg = NULL;
                rpop->value = NULL;
                rpop->next = NULL;
                rpop->done = km_state_client_retry_read_done;
                rpop->ctx = pop;
                if (rpop->mirror != NULL && rpop->topic != NULL) {
                    km_state_dispatch(st, rpop);
                    return;
                }
                km_state_pop_free(st, rpop);
            }
        } else {
            km_state_dispatch(st, pop);
            return;
        }
    }
    if (err != 0)
        km_log_debug(st->cm, "write of %s/%s-%d: %s: %s", pop->mirror, pop->topic,
                     (int)pop->partition, kp_errcode_name(err), msg);
    if (pop->wcb != NULL)
        pop->wcb(st->cm, pop->arg, err, msg, err == 0 && val != NULL ? val->state_epoch : -1);
    km_state_pop_free(st, pop);
}

static void km_state_client_read_done(km_state_t *st, km_state_pop_t *pop, int16_t err,
                                      const char *msg, const kp_state_partition_t *val)
{
    km_state_pstate_t out;
    char errbuf[512];

    if (!pop->retried && err == KP_ERR_NOT_COORDINATOR && !km_state_stopping(st)) {
        pop->retried = true;
        st->leaders[pop->shard] = -1;
        km_state_dispatch(st, pop);
        return;
    }
    if (err == 0 && val == NULL) {
        kp_state_value_t none;

        kp_state_value_init(&none, KP_STATE_REC_PARTITION_STATE);
        km_state_pstate_out(&none.u.partition, &out, errbuf, sizeof(errbuf));
    } else if (err == 0) {
        km_state_pstate_out(val, &out, errbuf, sizeof(errbuf));
    }
    if (pop->rcb != NULL)
        pop->rcb(st->cm, pop->arg, err, msg, err == 0 ? &out : NULL);
    km_state_pop_free(st, pop);
}

/* Posted so the caller's callback never runs inside its own call. */
static void km_state_dispatch_run(km_plugin_t *cm, void *arg)
{
    km_state_orphans(km_state_of(cm));
    km_state_dispatch(km_state_of(cm), arg);
}

static void km_state_dispatch_drop(km_plugin_t *cm, void *arg)
{
    km_state_pop_free(km_state_of(cm), arg);
}

static km_err_t km_state_post_pop(km_state_t *st, km_state_pop_t *pop)
{
    km_err_t err =
        km_coord_post(&st->cm->coord, km_state_dispatch_run, km_state_dispatch_drop, pop);

    if (err == KM_ERR_NOMEM)
        km_state_pop_free(st, pop);
    return err;
}

static km_state_pop_t *km_state_client_pop(km_state_t *st, int kind, const char *mirror,
                                           const char *topic, const kbx_uuid_t *topic_id,
                                           int32_t partition)
{
    km_state_pop_t *pop;

    if (mirror == NULL || topic == NULL || topic_id == NULL || partition < 0 ||
        strlen(mirror) == 0 || strlen(mirror) > KP_STATE_MIRROR_NAME_MAX)
        return NULL;
    pop = km_calloc(st->cm, 1, sizeof(*pop));
    if (pop == NULL)
        return NULL;
    km_state_pwrite_init(&pop->w);
    pop->kind = kind;
    pop->topic_id = *topic_id;
    pop->partition = partition;
    pop->mirror = km_strdup(st->cm, mirror);
    pop->topic = km_strdup(st->cm, topic);
    if (pop->mirror == NULL || pop->topic == NULL ||
        km_state_key_fill(pop, KP_STATE_REC_PARTITION_STATE, mirror, topic_id, partition,
                          st->nparts) != 0) {
        km_state_pop_free(st, pop);
        return NULL;
    }
    return pop;
}

km_err_t km_state_read(km_plugin_t *cm, const char *mirror, const char *topic,
                       const kbx_uuid_t *topic_id, int32_t partition, km_state_read_cb cb,
                       void *arg)
{
    km_state_t *st = km_state_of(cm);
    km_state_pop_t *pop;

    if (km_state_stopping(st))
        return KM_ERR_SHUTDOWN;
    pop = km_state_client_pop(st, KM_STATE_POP_READ, mirror, topic, topic_id, partition);
    if (pop == NULL)
        return KM_ERR_INVALID;
    pop->done = km_state_client_read_done;
    pop->rcb = cb;
    pop->arg = arg;
    return km_state_post_pop(st, pop);
}

km_err_t km_state_write(km_plugin_t *cm, const char *mirror, const char *topic,
                        const kbx_uuid_t *topic_id, int32_t partition, const km_state_pwrite_t *w,
                        km_state_write_cb cb, void *arg)
{
    km_state_t *st = km_state_of(cm);
    km_state_pop_t *pop;

    if (km_state_stopping(st))
        return KM_ERR_SHUTDOWN;
    pop = km_state_client_pop(st, KM_STATE_POP_WRITE, mirror, topic, topic_id, partition);
    if (pop == NULL)
        return KM_ERR_INVALID;
    pop->w = *w;
    if (w->error_message.len >= 0) {
        pop->errmsg = km_strndup(cm, w->error_message.ptr != NULL ? w->error_message.ptr : "",
                                 (size_t)w->error_message.len);
        if (pop->errmsg == NULL) {
            km_state_pop_free(st, pop);
            return KM_ERR_NOMEM;
        }
        pop->w.error_message = (kp_str_t){pop->errmsg, w->error_message.len};
    }
    pop->done = km_state_client_write_done;
    pop->wcb = cb;
    pop->arg = arg;
    return km_state_post_pop(st, pop);
}

/* ---- RPC handlers: ReadMirrorStates (100), WriteMirrorStates (101) ------------------------ */

static void km_state_rpc_free(km_state_t *st, km_state_rpc_t *rpc)
{
    rpc->magic = 0;
    kp_arena_free(&rpc->ar);
    km_free(st->cm, rpc->body);
    rpc->body = NULL;
    km_free(st->cm, rpc);
}

/* Send @p bytes for the request (or nothing, if the client went away) and free it. */
static void km_state_rpc_complete(km_state_t *st, km_state_rpc_t *rpc, const uint8_t *bytes,
                                  size_t len)
{
    const kbx_api_t *api = st->cm->ref.api;
    bool free_it = true;

    pthread_mutex_lock(&st->tok_lock);
    if (!rpc->cancelled && rpc->token != NULL) {
        if (api->complete_response(st->cm->ref.host, rpc->token, bytes, len) == KBX_ERR_CANCELLED) {
            rpc->cancel_pending = true; /* the host's cancel is coming and frees it */
            free_it = false;
        }
        rpc->token = NULL;
    }
    pthread_mutex_unlock(&st->tok_lock);
    if (free_it)
        km_state_rpc_free(st, rpc);
}

static void km_state_rpc_respond(km_state_t *st, km_state_rpc_t *rpc)
{
    kp_writer_t wr;

    kp_writer_init(&wr);
    if (rpc->api_key == KP_APIKEY_ReadMirrorStates) {
        rpc->rresp.ErrorCode = rpc->top_err;
        rpc->rresp.ErrorMessage = rpc->top_err != 0 ? kp_str(rpc->top_msg) : KP_STR_NULL;
        if (rpc->top_err != 0)
            rpc->rresp.Topics.cnt = 0;
        kp_ReadMirrorStatesResponse_encode(&wr, &rpc->rresp, 0);
    } else {
        rpc->wresp.ErrorCode = rpc->top_err;
        rpc->wresp.ErrorMessage = rpc->top_err != 0 ? kp_str(rpc->top_msg) : KP_STR_NULL;
        if (rpc->top_err != 0)
            rpc->wresp.Topics.cnt = 0;
        kp_WriteMirrorStatesResponse_encode(&wr, &rpc->wresp, 0);
    }
    if (wr.err != 0) {
        /* Only memory can fail here; the smallest answer still tells the client. */
        uint8_t small[64];

        kp_writer_free(&wr);
        kp_writer_init_fixed(&wr, small, sizeof(small));
        if (rpc->api_key == KP_APIKEY_ReadMirrorStates) {
            rpc->rresp.ErrorCode = KP_ERR_COORDINATOR_NOT_AVAILABLE;
            rpc->rresp.ErrorMessage = KP_STR_NULL;
            rpc->rresp.Topics.cnt = 0;
            kp_ReadMirrorStatesResponse_encode(&wr, &rpc->rresp, 0);
        } else {
            rpc->wresp.ErrorCode = KP_ERR_COORDINATOR_NOT_AVAILABLE;
            rpc->wresp.ErrorMessage = KP_STR_NULL;
            rpc->wresp.Topics.cnt = 0;
            kp_WriteMirrorStatesResponse_encode(&wr, &rpc->wresp, 0);
        }
        km_state_rpc_complete(st, rpc, small, wr.len);
        return;
    }
    km_state_rpc_complete(st, rpc, wr.buf, wr.len);
    kp_writer_free(&wr);
}

static kp_str_t km_state_rpc_str(km_state_rpc_t *rpc, const char *s)
{
    size_t n;
    char *c;

    if (s == NULL)
        return KP_STR_NULL;
    n = strlen(s);
    c = kp_arena_alloc(&rpc->ar, n + 1);
    if (c == NULL)
        return KP_STR_NULL;
    memcpy(c, s, n + 1);
    return (kp_str_t){c, (int32_t)n};
}

/* A partition of a request finished; the last one sends the response. */
static void km_state_rpc_pop_done(km_state_t *st, km_state_pop_t *pop, int16_t err, const char *msg,
                                  const kp_state_partition_t *val)
{
    km_state_rpc_t *rpc = pop->ctx;

    if (rpc->api_key == KP_APIKEY_ReadMirrorStates) {
        kp_ReadMirrorStatesResponse_PartitionResult_t *r = pop->arg;

        r->ErrorCode = err;
        r->ErrorMessage = err != 0 ? km_state_rpc_str(rpc, msg) : KP_STR_NULL;
        if (err == 0 && val != NULL) {
            r->State = val->state;
            r->LeaderEpoch = val->leader_epoch;
            r->StateEpoch = val->state_epoch;
            r->LastMirrorEpoch = val->last_mirrored_epoch;
            r->LastMirrorOffset = val->last_mirrored_offset;
            r->RetryAttempt = val->non_retryable ? -1 : val->retry_attempt;
            r->PreviousState = val->previous_state;
            if (val->error_message.len >= 0 && val->error_message.ptr != NULL) {
                char *c = kp_arena_alloc(&rpc->ar, (size_t)val->error_message.len + 1);

                if (c != NULL) {
                    memcpy(c, val->error_message.ptr, (size_t)val->error_message.len);
                    r->ErrorMessage = (kp_str_t){c, val->error_message.len};
                }
            }
        }
    } else {
        kp_WriteMirrorStatesResponse_PartitionResult_t *r = pop->arg;

        r->ErrorCode = err;
        r->ErrorMessage = err != 0 ? km_state_rpc_str(rpc, msg) : KP_STR_NULL;
        r->StateEpoch = err == 0 && val != NULL ? val->state_epoch : -1;
    }
    km_state_pop_free(st, pop);
    if (--rpc->remaining == 0)
        km_state_rpc_respond(st, rpc);
}

/* The pop for one request partition; NULL with err and msg set when it is answered at once.
 * @p topic_id is the requesting leader's id of the topic: the key uses it when it is
 * not zero, so a topic deleted and re-created under its name is never confused with the other
 * one while this broker's metadata lags the leader's (design M117); zero (a sender without the
 * tagged field) resolves the name here. */
static km_state_pop_t *km_state_rpc_pop(km_state_t *st, km_state_rpc_t *rpc, int kind,
                                        kp_str_t mirror, kp_str_t topic, const kp_uuid_t *topic_id,
                                        int32_t partition, int16_t *err, const char **msg)
{
    km_state_topic_t *t = NULL;
    km_state_pop_t *pop;
    kbx_uuid_t id;
    char name[256];

    if (topic.len <= 0 || topic.len >= (int32_t)sizeof(name)) {
        *err = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
        *msg = "invalid topic name";
        return NULL;
    }
    memcpy(name, topic.ptr, (size_t)topic.len);
    name[topic.len] = '\0';
    if (!st->topic_seen) {
        /* No mirror state anywhere yet: the first write creates the topic (retriable). */
        if (kind == KM_STATE_POP_WRITE)
            km_state_create_topic(st);
        *err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
        *msg = kind == KM_STATE_POP_WRITE ? "creating __mirror_state"
                                          : "__mirror_state does not exist (yet)";
        return NULL;
    }
    if (!kp_uuid_is_zero(topic_id)) {
        memcpy(id.bytes, topic_id->b, 16);
    } else if ((t = km_state_topic_find(st, name)) != NULL) {
        id = t->id;
    } else {
        *err = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
        *msg = "this broker does not know the topic (yet)";
        return NULL;
    }
    if (partition < 0) {
        *err = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
        *msg = "negative partition";
        return NULL;
    }
    pop = km_calloc(st->cm, 1, sizeof(*pop));
    if (pop == NULL) {
        *err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
        *msg = "out of memory";
        return NULL;
    }
    km_state_pwrite_init(&pop->w);
    pop->kind = kind;
    pop->from_rpc = true;
    pop->topic_id = id;
    pop->partition = partition;
    {
        kp_state_key_t key = {
            .type = KP_STATE_REC_PARTITION_STATE, .mirror = mirror, .partition = partition};
        kp_writer_t wr;

        memcpy(key.topicId.b, id.bytes, 16);
        kp_writer_init_fixed(&wr, pop->key, sizeof(pop->key));
        if (kp_state_key_encode(&wr, &key) != 0 || wr.err != 0 ||
            (pop->shard = kp_state_key_partition(&key, st->nparts)) < 0) {
            km_free(st->cm, pop);
            *err = KP_ERR_INVALID_REQUEST;
            *msg = "invalid mirror name";
            return NULL;
        }
        pop->key_len = (uint32_t)wr.len;
    }
    pop->done = km_state_rpc_pop_done;
    pop->ctx = rpc;
    return pop;
}

static void km_state_rpc_read(km_state_t *st, km_state_rpc_t *rpc)
{
    kp_ReadMirrorStatesRequest_t rq;
    kp_ReadMirrorStatesResponse_t *resp = &rpc->rresp;
    km_state_pop_t *pops = NULL, *pop, *next;
    kp_reader_t rd;
    int32_t i, j;

    kp_ReadMirrorStatesResponse_init(resp);
    kp_reader_init(&rd, rpc->body, rpc->len);
    if (kp_ReadMirrorStatesRequest_decode(&rd, &rpc->ar, &rq, 0) != 0 ||
        kp_reader_remaining(&rd) != 0 || rq.Topics.cnt < 0) {
        rpc->top_err = KP_ERR_INVALID_REQUEST;
        rpc->top_msg = "malformed ReadMirrorStates request";
        km_state_rpc_respond(st, rpc);
        return;
    }
    if (!rpc->authorized) {
        rpc->top_err = KP_ERR_CLUSTER_AUTHORIZATION_FAILED;
        rpc->top_msg = "ReadMirrorStates needs CLUSTER_ACTION on the cluster";
        km_state_rpc_respond(st, rpc);
        return;
    }
    resp->Topics.cnt = rq.Topics.cnt;
    resp->Topics.v = kp_arena_calloc(&rpc->ar, (size_t)rq.Topics.cnt + 1, sizeof(*resp->Topics.v));
    if (resp->Topics.v == NULL)
        goto nomem;
    rpc->remaining = 1; /* held until every partition is dispatched */
    for (i = 0; i < rq.Topics.cnt; i++) {
        const kp_ReadMirrorStatesRequest_TopicMetadata_t *t = &rq.Topics.v[i];
        kp_ReadMirrorStatesResponse_TopicResult_t *tr = &resp->Topics.v[i];

        kp_ReadMirrorStatesResponse_TopicResult_init(tr);
        tr->TopicName = t->TopicName;
        tr->Partitions.cnt = t->Partitions.cnt < 0 ? 0 : t->Partitions.cnt;
        tr->Partitions.v =
            kp_arena_calloc(&rpc->ar, (size_t)tr->Partitions.cnt + 1, sizeof(*tr->Partitions.v));
        if (tr->Partitions.v == NULL)
            goto nomem_pops;
        for (j = 0; j < tr->Partitions.cnt; j++) {
            kp_ReadMirrorStatesResponse_PartitionResult_t *pr = &tr->Partitions.v[j];
            const char *msg = NULL;
            int16_t err = 0;

            kp_ReadMirrorStatesResponse_PartitionResult_init(pr);
            pr->PartitionIndex = t->Partitions.v[j].PartitionIndex;
            pop = km_state_rpc_pop(st, rpc, KM_STATE_POP_READ, rq.MirrorName, t->TopicName,
                                   &t->TopicId, pr->PartitionIndex, &err, &msg);
            if (pop == NULL) {
                pr->ErrorCode = err;
                pr->ErrorMessage = kp_str(msg);
                continue;
            }
            pop->arg = pr;
            pop->next = pops;
            pops = pop;
            rpc->remaining++;
        }
    }
    for (pop = pops; pop != NULL; pop = next) {
        next = pop->next;
        pop->next = NULL;
        km_state_pop_local(st, pop);
    }
    if (--rpc->remaining == 0)
        km_state_rpc_respond(st, rpc);
    return;

nomem_pops:
    for (pop = pops; pop != NULL; pop = next) {
        next = pop->next;
        km_state_pop_free(st, pop);
    }
nomem:
    rpc->top_err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
    rpc->top_msg = "out of memory";
    km_state_rpc_respond(st, rpc);
}

static void km_state_rpc_write(km_state_t *st, km_state_rpc_t *rpc)
{
    kp_WriteMirrorStatesRequest_t rq;
    kp_WriteMirrorStatesResponse_t *resp = &rpc->wresp;
    km_state_pop_t *pops = NULL, **ptail = &pops, *pop, *next;
    kp_reader_t rd;
    int32_t i, j;

    kp_WriteMirrorStatesResponse_init(resp);
    kp_reader_init(&rd, rpc->body, rpc->len);
    if (kp_WriteMirrorStatesRequest_decode(&rd, &rpc->ar, &rq, 0) != 0 ||
        kp_reader_remaining(&rd) != 0 || rq.Topics.cnt < 0) {
        rpc->top_err = KP_ERR_INVALID_REQUEST;
        rpc->top_msg = "malformed WriteMirrorStates request";
        km_state_rpc_respond(st, rpc);
        return;
    }
    if (!rpc->authorized) {
        rpc->top_err = KP_ERR_CLUSTER_AUTHORIZATION_FAILED;
        rpc->top_msg = "WriteMirrorStates needs CLUSTER_ACTION on the cluster";
        km_state_rpc_respond(st, rpc);
        return;
    }
    resp->Topics.cnt = rq.Topics.cnt;
    resp->Topics.v = kp_arena_calloc(&rpc->ar, (size_t)rq.Topics.cnt + 1, sizeof(*resp->Topics.v));
    if (resp->Topics.v == NULL)
        goto nomem;
    rpc->remaining = 1;
    for (i = 0; i < rq.Topics.cnt; i++) {
        const kp_WriteMirrorStatesRequest_TopicMetadata_t *t = &rq.Topics.v[i];
        kp_WriteMirrorStatesResponse_TopicResult_t *tr = &resp->Topics.v[i];

        kp_WriteMirrorStatesResponse_TopicResult_init(tr);
        tr->TopicName = t->TopicName;
        tr->Partitions.cnt = t->Partitions.cnt < 0 ? 0 : t->Partitions.cnt;
        tr->Partitions.v =
            kp_arena_calloc(&rpc->ar, (size_t)tr->Partitions.cnt + 1, sizeof(*tr->Partitions.v));
        if (tr->Partitions.v == NULL)
            goto nomem_pops;
        for (j = 0; j < tr->Partitions.cnt; j++) {
            const kp_WriteMirrorStatesRequest_PartitionData_t *pd = &t->Partitions.v[j];
            kp_WriteMirrorStatesResponse_PartitionResult_t *pr = &tr->Partitions.v[j];
            const char *msg = NULL;
            int16_t err = 0;

            kp_WriteMirrorStatesResponse_PartitionResult_init(pr);
            pr->PartitionIndex = pd->PartitionIndex;
            pr->StateEpoch = -1;
            pop = km_state_rpc_pop(st, rpc, KM_STATE_POP_WRITE, rq.MirrorName, t->TopicName,
                                   &t->TopicId, pd->PartitionIndex, &err, &msg);
            if (pop == NULL) {
                pr->ErrorCode = err;
                pr->ErrorMessage = kp_str(msg);
                continue;
            }
            pop->w.state = pd->State;
            pop->w.leader_epoch = pd->LeaderEpoch;
            pop->w.state_epoch = pd->StateEpoch;
            pop->w.lme_epoch = pd->LastMirrorEpoch;
            pop->w.lme_offset = pd->LastMirrorOffset;
            pop->w.error_message = pd->ErrorMessage; /* in rpc->ar, lives until the answer */
            pop->w.retry_attempt = pd->RetryAttempt;
            pop->w.non_retryable = pd->NonRetryable;
            pop->arg = pr;
            *ptail = pop;
            ptail = &pop->next;
            rpc->remaining++;
        }
    }
    /* In request order, so two entries for one partition apply one after the other. */
    for (pop = pops; pop != NULL; pop = next) {
        next = pop->next;
        pop->next = NULL;
        km_state_pop_local(st, pop);
    }
    if (--rpc->remaining == 0)
        km_state_rpc_respond(st, rpc);
    return;

nomem_pops:
    for (pop = pops; pop != NULL; pop = next) {
        next = pop->next;
        km_state_pop_free(st, pop);
    }
nomem:
    rpc->top_err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
    rpc->top_msg = "out of memory";
    km_state_rpc_respond(st, rpc);
}

static void km_state_rpc_run(km_plugin_t *cm, void *arg)
{
    km_state_rpc_t *rpc = arg;
    km_state_t *st = km_state_of(cm);

    KM_CHECK_OBJ(cm, rpc, KM_STATE_RPC_MAGIC);
    km_state_orphans(st);
    if (km_state_stopping(st)) {
        kp_ReadMirrorStatesResponse_init(&rpc->rresp);
        kp_WriteMirrorStatesResponse_init(&rpc->wresp);
        rpc->top_err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
        rpc->top_msg = "the broker is shutting down";
        km_state_rpc_respond(st, rpc);
        return;
    }
    if (rpc->api_key == KP_APIKEY_ReadMirrorStates)
        km_state_rpc_read(st, rpc);
    else
        km_state_rpc_write(st, rpc);
}

/* Never ran (queue closed): answer without the loop's state. */
static void km_state_rpc_drop(km_plugin_t *cm, void *arg)
{
    km_state_rpc_t *rpc = arg;
    km_state_t *st = km_state_of(cm);

    kp_ReadMirrorStatesResponse_init(&rpc->rresp);
    kp_WriteMirrorStatesResponse_init(&rpc->wresp);
    rpc->top_err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
    rpc->top_msg = "the broker is shutting down";
    km_state_rpc_respond(st, rpc);
}

/* kbx handle: copy the body, check the principal, post (host request thread). */
static int32_t km_state_rpc_handle(void *plugin_ctx, const kbx_rpc_request_t *req,
                                   kbx_token_t *token, void **token_ctx)
{
    km_plugin_t *cm = plugin_ctx;
    km_state_t *st;
    km_state_rpc_t *rpc;
    km_err_t err;
    int32_t az;

    KM_CHECK_PLUGIN(cm);
    st = km_state_of(cm);
    rpc = km_calloc(cm, 1, sizeof(*rpc));
    if (rpc == NULL)
        return KBX_ERR_NOMEM;
    rpc->magic = KM_STATE_RPC_MAGIC;
    rpc->st = st;
    rpc->token = token;
    rpc->api_key = req->api_key;
    kp_arena_init(&rpc->ar, KM_STATE_RPC_ARENA_MAX);
    rpc->len = (size_t)req->body_len;
    rpc->body = km_malloc(cm, rpc->len != 0 ? rpc->len : 1);
    if (rpc->body == NULL) {
        rpc->magic = 0;
        km_free(cm, rpc);
        return KBX_ERR_NOMEM;
    }
    if (rpc->len != 0)
        memcpy(rpc->body, req->body, rpc->len);
    /* Inter-broker: CLUSTER_ACTION on the cluster (allowed by a host without an authorizer). */
    az = cm->ref.api->authorize(cm->ref.host, req->principal != NULL ? req->principal : "",
                                req->client_host, KM_STATE_RES_CLUSTER, "kafka-cluster",
                                KM_STATE_OP_CLUSTER_ACTION);
    rpc->authorized = az == KBX_AUTHZ_ALLOWED;
    *token_ctx = rpc;
    err = km_coord_post(&cm->coord, km_state_rpc_run, km_state_rpc_drop, rpc);
    if (err == KM_ERR_NOMEM) { /* nothing ran: the host closes the connection */
        km_state_rpc_free(st, rpc);
        return KBX_ERR_NOMEM;
    }
    /* On KM_ERR_SHUTDOWN the drop answered already (COORDINATOR_NOT_AVAILABLE). */
    return err == KM_ERR_SHUTDOWN ? KBX_RPC_DONE : KBX_RPC_PENDING;
}

static void km_state_rpc_cancel(void *plugin_ctx, kbx_token_t *token, void *token_ctx)
{
    km_plugin_t *cm = plugin_ctx;
    km_state_rpc_t *rpc = token_ctx;
    km_state_t *st;
    bool free_it = false;

    (void)token;
    KM_CHECK_PLUGIN(cm);
    st = km_state_of(cm);
    pthread_mutex_lock(&st->tok_lock);
    KM_CHECK_OBJ(cm, rpc, KM_STATE_RPC_MAGIC);
    if (rpc->cancel_pending)
        free_it = true; /* the loop is done with it */
    rpc->cancelled = true;
    rpc->token = NULL;
    pthread_mutex_unlock(&st->tok_lock);
    if (free_it)
        km_state_rpc_free(st, rpc);
}

static const kbx_rpc_ops_t km_state_read_ops = {
    .struct_size = sizeof(kbx_rpc_ops_t),
    .api_key = KP_APIKEY_ReadMirrorStates,
    .min_version = 0,
    .max_version = 0,
    .first_flexible_version = 0,
    .handle = km_state_rpc_handle,
    .cancel = km_state_rpc_cancel,
};

static const kbx_rpc_ops_t km_state_write_ops = {
    .struct_size = sizeof(kbx_rpc_ops_t),
    .api_key = KP_APIKEY_WriteMirrorStates,
    .min_version = 0,
    .max_version = 0,
    .first_flexible_version = 0,
    .handle = km_state_rpc_handle,
    .cancel = km_state_rpc_cancel,
};

/* ---- listing and deleting ---------------------------------------------------------------- */

typedef struct km_state_list_ctx {
    km_state_t *st;
    kp_str_t mirror;
    void (*fn)(void *arg, const km_state_listed_t *ls);
    void *arg;
} km_state_list_ctx_t;

static void km_state_list_one(void *arg, const km_state_entry_t *e)
{
    km_state_list_ctx_t *lc = arg;
    kp_state_key_t key;
    kp_state_value_t v;
    km_state_listed_t ls;
    kp_arena_t ar;
    char errbuf[512];

    if (kp_state_key_parse(e->key, e->key_len, &key, NULL) != 0 ||
        key.type != KP_STATE_REC_PARTITION_STATE || key.mirror.len != lc->mirror.len ||
        memcmp(key.mirror.ptr, lc->mirror.ptr, (size_t)key.mirror.len) != 0)
        return;
    kp_arena_init(&ar, 1u << 20);
    if (km_state_entry_decode(lc->st, e, &ar, &v) == 0) {
        memset(&ls, 0, sizeof(ls));
        memcpy(ls.topic_id.bytes, key.topicId.b, 16);
        ls.partition = key.partition;
        km_state_pstate_out(&v.u.partition, &ls.st, errbuf, sizeof(errbuf));
        lc->fn(lc->arg, &ls);
    }
    kp_arena_free(&ar);
}

int32_t km_state_list_local(km_plugin_t *cm, const char *mirror,
                            void (*fn)(void *arg, const km_state_listed_t *ls), void *arg)
{
    km_state_t *st = km_state_of(cm);
    km_state_list_ctx_t lc = {.st = st, .mirror = kp_str(mirror), .fn = fn, .arg = arg};
    int32_t p, loading = 0;

    if (st->shards == NULL || mirror == NULL)
        return 0;
    for (p = 0; p < st->nparts; p++) {
        km_state_shard_t *sh = st->shards[p];

        if (sh == NULL)
            continue;
        if (!sh->loaded) {
            loading++;
            continue;
        }
        km_state_table_foreach(&sh->table, km_state_list_one, &lc);
    }
    return loading;
}

/* Tombstones of one delete call: the callback runs when the last one is answered. */
typedef struct km_state_del {
    km_state_done_cb cb;
    void *arg;
    int32_t remaining;
    int16_t err;
    char msg[160];
} km_state_del_t;

static void km_state_del_step(km_state_t *st, km_state_del_t *del)
{
    if (--del->remaining > 0)
        return;
    if (del->cb != NULL)
        del->cb(st->cm, del->arg, del->err, del->err != 0 ? del->msg : NULL);
    km_free(st->cm, del);
}

static void km_state_del_pop_done(km_state_t *st, km_state_pop_t *pop, int16_t err, const char *msg,
                                  const kp_state_partition_t *val)
{
    km_state_del_t *del = pop->ctx;

    (void)val;
    if (err != 0 && del->err == 0) {
        del->err = err;
        snprintf(del->msg, sizeof(del->msg), "%s", msg != NULL ? msg : kp_errcode_name(err));
    }
    km_state_pop_free(st, pop);
    km_state_del_step(st, del);
}

typedef struct km_state_del_scan {
    km_state_t *st;
    km_state_shard_t *sh;
    kp_str_t mirror;
    km_state_pop_t *pops;
    bool nomem;
} km_state_del_scan_t;

static void km_state_del_one(void *arg, const km_state_entry_t *e)
{
    km_state_del_scan_t *sc = arg;
    kp_state_key_t key;
    km_state_pop_t *pop;

    if (sc->nomem || kp_state_key_parse(e->key, e->key_len, &key, NULL) != 0 ||
        key.mirror.len != sc->mirror.len ||
        memcmp(key.mirror.ptr, sc->mirror.ptr, (size_t)key.mirror.len) != 0 ||
        e->key_len > KP_STATE_KEY_MAX_SIZE)
        return;
    pop = km_calloc(sc->st->cm, 1, sizeof(*pop));
    if (pop == NULL) {
        sc->nomem = true;
        return;
    }
    pop->kind = KM_STATE_POP_TOMB;
    pop->shard = sc->sh->partition;
    memcpy(pop->key, e->key, e->key_len);
    pop->key_len = e->key_len;
    pop->next = sc->pops;
    sc->pops = pop;
}

/* Queue a tombstone for every key of @p mirror in loaded shard @p sh; false when out of memory
 * (some keys were not queued). */
static bool km_state_shard_tomb(km_state_t *st, km_state_shard_t *sh, const char *mirror,
                                km_state_del_t *del)
{
    km_state_del_scan_t sc = {.st = st, .sh = sh, .mirror = kp_str(mirror)};
    km_state_pop_t *pop, *next;

    km_state_table_foreach(&sh->table, km_state_del_one, &sc);
    for (pop = sc.pops; pop != NULL; pop = next) {
        next = pop->next;
        pop->next = NULL;
        pop->done = km_state_del_pop_done;
        pop->ctx = del;
        del->remaining++;
        km_state_pop_local(st, pop);
    }
    return !sc.nomem;
}

typedef struct km_state_gate {
    int32_t partition;
    uint64_t gen;
} km_state_gate_t;

/* The tombstones of one pending delete are answered: open the gate when it was the last. */
static void km_state_pdel_done(km_plugin_t *cm, void *arg, int16_t err, const char *msg)
{
    km_state_t *st = km_state_of(cm);
    km_state_gate_t *g = arg;
    km_state_shard_t *sh = st->shards != NULL ? st->shards[g->partition] : NULL;

    if (err != 0)
        km_log_warn(cm,
                    "__mirror_state-%d: tombstoning a deleted mirror's state after the load: "
                    "%s: %s",
                    (int)g->partition, kp_errcode_name(err), msg != NULL ? msg : "");
    if (sh != NULL && sh->gen == g->gen && sh->gate > 0 && --sh->gate == 0) {
        km_state_pop_t *list = sh->waiting, *next;

        sh->waiting = NULL;
        for (; list != NULL; list = next) {
            next = list->next;
            list->next = NULL;
            km_state_pop_local(st, list);
        }
    }
    km_free(cm, g);
}

/* A shard just loaded: delete the keys of the mirrors deleted while it was loading. */
static void km_state_shard_run_pdel(km_state_t *st, km_state_shard_t *sh)
{
    km_state_pdel_t *pd;

    while ((pd = sh->pdel) != NULL) {
        km_state_del_t *del = km_calloc(st->cm, 1, sizeof(*del));
        km_state_gate_t *g = km_calloc(st->cm, 1, sizeof(*g));

        sh->pdel = pd->next;
        if (del == NULL || g == NULL) {
            km_log_error(st->cm, "__mirror_state-%d: out of memory deleting mirror %s's state",
                         (int)sh->partition, pd->name);
            km_free(st->cm, del);
            km_free(st->cm, g);
        } else {
            g->partition = sh->partition;
            g->gen = sh->gen;
            sh->gate++;
            del->cb = km_state_pdel_done;
            del->arg = g;
            del->remaining = 1;
            if (!km_state_shard_tomb(st, sh, pd->name, del) && del->err == 0) {
                del->err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
                snprintf(del->msg, sizeof(del->msg), "out of memory");
            }
            km_state_del_step(st, del);
        }
        km_free(st->cm, pd);
    }
}

static void km_state_del_release(km_plugin_t *cm, void *arg)
{
    km_state_del_step(km_state_of(cm), arg);
}

km_err_t km_state_delete_mirror(km_plugin_t *cm, const char *mirror, km_state_done_cb cb, void *arg)
{
    km_state_t *st = km_state_of(cm);
    km_state_del_t *del;
    int32_t p;
    bool nomem = false;

    if (mirror == NULL || strlen(mirror) == 0 || strlen(mirror) > KP_STATE_MIRROR_NAME_MAX)
        return KM_ERR_INVALID;
    if (km_state_stopping(st))
        return KM_ERR_SHUTDOWN;
    del = km_calloc(cm, 1, sizeof(*del));
    if (del == NULL)
        return KM_ERR_NOMEM;
    del->cb = cb;
    del->arg = arg;
    del->remaining = 1;
    for (p = 0; p < st->nparts; p++) {
        km_state_shard_t *sh = st->shards[p];

        if (sh == NULL || sh->failed)
            continue;
        if (!sh->loaded) {
            /* Its keys are unknown until loaded: tombstoned then (km_state_shard_run_pdel). */
            km_state_pdel_t *pd = km_calloc(cm, 1, sizeof(*pd));

            if (pd == NULL) {
                nomem = true;
                continue;
            }
            memcpy(pd->name, mirror, strlen(mirror) + 1);
            pd->next = sh->pdel;
            sh->pdel = pd;
            continue;
        }
        nomem = !km_state_shard_tomb(st, sh, mirror, del) || nomem;
    }
    if (nomem && del->err == 0) {
        del->err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
        snprintf(del->msg, sizeof(del->msg), "out of memory");
    }
    /* The callback runs from a later op even when there was nothing to delete. */
    if (km_coord_post(&cm->coord, km_state_del_release, NULL, del) != KM_OK)
        km_state_del_step(st, del);
    return KM_OK;
}

int32_t km_state_shard_count(const km_plugin_t *cm)
{
    const km_state_t *st = &cm->state;
    int32_t p, n = 0;

    if (st->shards == NULL)
        return 0;
    for (p = 0; p < st->nparts; p++)
        n += st->shards[p] != NULL;
    return n;
}

bool km_state_shard_loaded(const km_plugin_t *cm, int32_t partition)
{
    const km_state_t *st = &cm->state;

    return st->shards != NULL && partition >= 0 && partition < st->nparts &&
           st->shards[partition] != NULL && st->shards[partition]->loaded;
}

/* ---- lifecycle --------------------------------------------------------------------------- */

static km_err_t km_state_metric(km_plugin_t *cm, int32_t type, const char *name, const char *help,
                                kbx_metric_t **out)
{
    static const char *const label_keys[] = {"component"};
    static const char *const label_values[] = {"state"};
    kbx_metric_desc_t desc = {
        .struct_size = sizeof(desc),
        .type = type,
        .group = "kafka.server.mirror",
        .name = name,
        .help = help,
        .label_keys = label_keys,
        .label_values = label_values,
        .label_count = 1,
    };
    int32_t rc = cm->ref.api->metric_register(cm->ref.host, &desc, out);

    if (rc == KBX_ERR_NOMEM)
        return KM_ERR_NOMEM;
    return rc == KBX_OK ? KM_OK : KM_ERR_HOST;
}

static void km_state_unregister(km_state_t *st)
{
    const kbx_api_t *api = st->cm->ref.api;
    kbx_host_t *host = st->cm->ref.host;

    if (st->reg_read != NULL)
        api->rpc_unregister(host, st->reg_read);
    st->reg_read = NULL;
    if (st->reg_write != NULL)
        api->rpc_unregister(host, st->reg_write);
    st->reg_write = NULL;
}

static void km_state_free_all(km_state_t *st)
{
    const kbx_api_t *api = st->cm->ref.api;
    kbx_host_t *host = st->cm->ref.host;

    kbx_metric_t **metrics[] = {&st->m_writes, &st->m_write_errors, &st->m_load_ms, &st->m_shards};
    size_t i;

    for (i = 0; i < sizeof(metrics) / sizeof(metrics[0]); i++) {
        if (*metrics[i] != NULL) /* the host refuses a NULL handle (partial start) */
            api->metric_unregister(host, *metrics[i]);
        *metrics[i] = NULL;
    }
    if (st->idle_latch != NULL)
        api->latch_destroy(host, st->idle_latch);
    st->idle_latch = NULL;
    km_free(st->cm, st->shards);
    st->shards = NULL;
    km_free(st->cm, st->leaders);
    st->leaders = NULL;
    km_free(st->cm, st->brokers);
    st->brokers = NULL;
    if (st->lock_ready)
        pthread_mutex_destroy(&st->tok_lock);
    st->lock_ready = false;
    st->magic = 0;
}

km_err_t km_state_start(km_plugin_t *cm, char *errstr, size_t errstr_size)
{
    km_state_t *st = km_state_of(cm);
    const kbx_api_t *api = cm->ref.api;
    const char *what;
    km_err_t err = KM_ERR_NOMEM;
    int32_t rc;

    memset(st, 0, sizeof(*st));
    st->cm = cm;
    st->nparts = cm->conf.state_topic_num_partitions;
    atomic_init(&st->outstanding, 0);
    atomic_init(&st->stopping, 0);
    what = "tables";
    if (st->nparts <= 0)
        goto fail_free;
    st->shards = km_calloc(cm, (size_t)st->nparts, sizeof(*st->shards));
    st->leaders = km_calloc(cm, (size_t)st->nparts, sizeof(*st->leaders));
    if (st->shards == NULL || st->leaders == NULL)
        goto fail_free;
    memset(st->leaders, 0xff, (size_t)st->nparts * sizeof(*st->leaders)); /* -1 */
    what = "lock";
    if (pthread_mutex_init(&st->tok_lock, NULL) != 0)
        goto fail_free;
    st->lock_ready = true;
    st->magic = KM_STATE_MAGIC;
    what = "latch";
    rc = api->latch_create(cm->ref.host, &st->idle_latch);
    if (rc != KBX_OK) {
        st->idle_latch = NULL;
        err = rc == KBX_ERR_NOMEM ? KM_ERR_NOMEM : KM_ERR_HOST;
        goto fail_free;
    }
    what = "metrics";
    if ((err = km_state_metric(cm, KBX_METRIC_GAUGE, "MirrorStateShardCount",
                               "__mirror_state partitions this broker leads (loaded or loading)",
                               &st->m_shards)) != KM_OK ||
        (err = km_state_metric(cm, KBX_METRIC_HISTOGRAM, "MirrorStateLoadTimeMs",
                               "Time to load a __mirror_state shard, ms", &st->m_load_ms)) !=
            KM_OK ||
        (err = km_state_metric(cm, KBX_METRIC_COUNTER, "MirrorStateWriteErrorsTotal",
                               "Mirror state writes that failed (not fencing refusals)",
                               &st->m_write_errors)) != KM_OK ||
        (err = km_state_metric(cm, KBX_METRIC_COUNTER, "MirrorStateWritesTotal",
                               "Batches of mirror state written to __mirror_state",
                               &st->m_writes)) != KM_OK)
        goto fail_free;
    what = "ReadMirrorStates handler";
    rc = api->rpc_register(cm->ref.host, &km_state_read_ops, cm, &st->reg_read);
    if (rc != KBX_OK) {
        st->reg_read = NULL;
        err = rc == KBX_ERR_NOMEM ? KM_ERR_NOMEM : KM_ERR_HOST;
        goto fail_free;
    }
    what = "WriteMirrorStates handler";
    rc = api->rpc_register(cm->ref.host, &km_state_write_ops, cm, &st->reg_write);
    if (rc != KBX_OK) {
        st->reg_write = NULL;
        err = rc == KBX_ERR_NOMEM ? KM_ERR_NOMEM : KM_ERR_HOST;
        goto fail_unregister;
    }
    return KM_OK;

fail_unregister:
    km_state_unregister(st);
fail_free:
    km_state_free_all(st);
    snprintf(errstr, errstr_size, "cannot create the mirror state coordinator's %s: %s", what,
             km_err_str(err));
    return err;
}

/* On the loop: fail everything that waits, so nothing is left once the host requests end. */
static void km_state_stop_run(km_plugin_t *cm, void *arg)
{
    km_state_t *st = km_state_of(cm);
    km_state_pop_t *list;
    int32_t p;

    (void)arg;
    km_state_orphans(st);
    km_state_timers_cancel(st);
    list = st->md_wait;
    st->md_wait = NULL;
    km_state_pop_fail_list(st, list, KP_ERR_COORDINATOR_NOT_AVAILABLE, "shutting down");
    km_state_ensure_done_pops(st, KP_ERR_COORDINATOR_NOT_AVAILABLE, "shutting down");
    for (p = 0; p < st->nparts; p++) {
        km_state_shard_t *sh = st->shards[p];

        if (sh == NULL)
            continue;
        list = sh->waiting;
        sh->waiting = NULL;
        km_state_pop_fail_list(st, list, KP_ERR_COORDINATOR_NOT_AVAILABLE, "shutting down");
        list = sh->wq;
        sh->wq = NULL;
        sh->wq_tail = &sh->wq;
        km_state_pop_fail_list(st, list, KP_ERR_COORDINATOR_NOT_AVAILABLE, "shutting down");
    }
    cm->ref.api->latch_set(cm->ref.host, st->idle_latch);
}

void km_state_stop(km_plugin_t *cm)
{
    km_state_t *st = km_state_of(cm);
    const kbx_api_t *api = cm->ref.api;
    int64_t deadline;

    if (st->magic != KM_STATE_MAGIC || atomic_exchange(&st->stopping, 1) != 0)
        return;
    /* 1. no new requests */
    km_state_unregister(st);
    /* 2. fail what waits, on the loop */
    km_coord_post(&cm->coord, km_state_stop_run, NULL, NULL);
    /* 3. wait for the host requests and timers in flight to call back (they are bounded by
     *    their timeouts; the host cancels local requests of an unloading plugin) */
    deadline = api->clock_monotonic_ns(cm->ref.host) / 1000000 +
               cm->conf.coordinator_write_timeout_ms + 5000;
    while (atomic_load(&st->outstanding) > 0 &&
           api->clock_monotonic_ns(cm->ref.host) / 1000000 < deadline)
        api->latch_wait(cm->ref.host, st->idle_latch, 100);
    if (atomic_load(&st->outstanding) > 0)
        km_log_error(cm, "%d __mirror_state host requests still outstanding at shutdown",
                     atomic_load(&st->outstanding));
}

void km_state_destroy(km_plugin_t *cm)
{
    km_state_t *st = km_state_of(cm);
    int32_t p;

    if (st->magic != KM_STATE_MAGIC)
        return;
    km_state_unregister(st);
    km_state_orphans(st); /* the loop is gone: this thread is the only one left */
    km_state_timers_cancel(st);
    for (p = 0; st->shards != NULL && p < st->nparts; p++)
        km_state_shard_drop(st, p, "shutdown");
    km_state_pop_fail_list(st, st->md_wait, KP_ERR_COORDINATOR_NOT_AVAILABLE, "shutting down");
    st->md_wait = NULL;
    km_state_ensure_done_pops(st, KP_ERR_COORDINATOR_NOT_AVAILABLE, "shutting down");
    km_state_topics_clear(st);
    km_state_free_all(st);
}

/* ---- records of the other types (mirror-level duties) -------------------------------------- */

static void km_state_put_done(km_state_t *st, km_state_pop_t *pop, int16_t err, const char *msg,
                              const kp_state_partition_t *val)
{
    (void)val;
    if (pop->dcb != NULL)
        pop->dcb(st->cm, pop->arg, err, err != 0 ? msg : NULL);
    km_state_pop_free(st, pop);
}

static void km_state_get_done(km_state_t *st, km_state_pop_t *pop, int16_t err, const char *msg,
                              const kp_state_partition_t *val)
{
    (void)val;
    pop->gcb(st->cm, pop->arg, err, err != 0 ? msg : NULL, NULL);
    km_state_pop_free(st, pop);
}

/* Only the local shard serves these: the caller runs where the key's shard is led. */
static void km_state_local_run(km_plugin_t *cm, void *arg)
{
    km_state_t *st = km_state_of(cm);
    km_state_pop_t *pop = arg;

    if (pop->kind == KM_STATE_POP_PUT && !st->topic_seen) {
        km_state_pop_finish(st, pop, KP_ERR_COORDINATOR_NOT_AVAILABLE,
                            "__mirror_state does not exist (yet)", NULL);
        return;
    }
    km_state_pop_local(st, pop);
}

static km_state_pop_t *km_state_record_pop(km_state_t *st, int kind, int16_t type,
                                           const char *mirror, const kbx_uuid_t *topic_id,
                                           int32_t partition)
{
    km_state_pop_t *pop;

    if (type < KP_STATE_REC_LAST_MIRROR_EPOCH || type > KP_STATE_REC_MAX ||
        type == KP_STATE_REC_PARTITION_STATE || mirror == NULL ||
        (kp_state_key_has_topic(type) && topic_id == NULL) ||
        (kp_state_key_has_partition(type) && partition < 0))
        return NULL;
    pop = km_calloc(st->cm, 1, sizeof(*pop));
    if (pop == NULL)
        return NULL;
    km_state_pwrite_init(&pop->w);
    pop->kind = kind;
    if (km_state_key_fill(pop, type, mirror, kp_state_key_has_topic(type) ? topic_id : NULL,
                          kp_state_key_has_partition(type) ? partition : 0, st->nparts) != 0) {
        km_free(st->cm, pop);
        return NULL;
    }
    return pop;
}

km_err_t km_state_put_record(km_plugin_t *cm, int16_t type, const char *mirror,
                             const kbx_uuid_t *topic_id, int32_t partition,
                             const kp_state_value_t *v, km_state_done_cb cb, void *arg)
{
    kp_alloc_t al = {.alloc = km_state_pb_alloc, .free = km_state_pb_free, .opaque = cm};
    km_state_t *st = km_state_of(cm);
    km_state_pop_t *pop;
    km_err_t err;

    if (km_state_stopping(st))
        return KM_ERR_SHUTDOWN;
    if (v != NULL && v->type != type)
        return KM_ERR_INVALID;
    pop = km_state_record_pop(st, v != NULL ? KM_STATE_POP_PUT : KM_STATE_POP_TOMB, type, mirror,
                              topic_id, partition);
    if (pop == NULL)
        return KM_ERR_INVALID;
    if (v != NULL) {
        kp_writer_t wr;

        kp_writer_init(&wr);
        if (kp_state_value_encode(&wr, v, &al) != 0 || wr.err != 0 ||
            (pop->value = km_malloc(cm, wr.len != 0 ? wr.len : 1)) == NULL) {
            int e = wr.err;

            kp_writer_free(&wr);
            km_state_pop_free(st, pop);
            return e == KP_E_NOMEM ? KM_ERR_NOMEM : KM_ERR_INVALID;
        }
        memcpy(pop->value, wr.buf, wr.len);
        pop->value_len = wr.len;
        kp_writer_free(&wr);
    }
    pop->done = km_state_put_done;
    pop->dcb = cb;
    pop->arg = arg;
    err = km_coord_post(&cm->coord, km_state_local_run, km_state_dispatch_drop, pop);
    if (err == KM_ERR_NOMEM)
        km_state_pop_free(st, pop);
    return err;
}

km_err_t km_state_get_record(km_plugin_t *cm, int16_t type, const char *mirror,
                             const kbx_uuid_t *topic_id, int32_t partition, km_state_record_cb cb,
                             void *arg)
{
    km_state_t *st = km_state_of(cm);
    km_state_pop_t *pop;
    km_err_t err;

    if (km_state_stopping(st))
        return KM_ERR_SHUTDOWN;
    if (cb == NULL)
        return KM_ERR_INVALID;
    pop = km_state_record_pop(st, KM_STATE_POP_GET, type, mirror, topic_id, partition);
    if (pop == NULL)
        return KM_ERR_INVALID;
    pop->done = km_state_get_done;
    pop->gcb = cb;
    pop->arg = arg;
    err = km_coord_post(&cm->coord, km_state_local_run, km_state_dispatch_drop, pop);
    if (err == KM_ERR_NOMEM)
        km_state_pop_free(st, pop);
    return err;
}

bool km_state_mirror_coordinator(const km_plugin_t *cm, const char *mirror)
{
    const km_state_t *st = &cm->state;
    int32_t p;

    if (mirror == NULL || st->shards == NULL)
        return false;
    p = kp_state_mirror_partition(kp_str(mirror), st->nparts);
    return p >= 0 && st->shards[p] != NULL && st->shards[p]->loaded && !st->shards[p]->failed;
}
