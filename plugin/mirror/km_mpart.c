/*
 * km_mpart.c - the per-partition mirror state machine (see km_mpart.h and docs/plugin.md
 * "Partition state machine").
 *
 * Shape: every input ends in km_mpart_kick(), which first decides (km_mpart_decide: the target
 * state from the persisted state and the desired state) and then runs the current state's
 * action (km_mpart_run), a small step machine that advances until it has to wait for an
 * asynchronous completion (busy), a retry delay (wake_at) or a state write (writing).
 * Completions carry the generation they were started with; anything that abandons a step
 * (a transition, a new leader epoch, a lost completion) takes a new generation.
 */
#define KM_LOG_COMPONENT "kmirror.mpart"

#include "mirror/km_mpart.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/km_plugin_types.h"
#include "util/km_log.h"
#include "util/km_mem.h"

#define KM_MPART_MAGIC      0x4b4d4d50u /* "KMMP" */
#define KM_MPART_MGR_MAGIC  0x4b4d4d47u /* "KMMG" */
#define KM_MPART_BUCKETS    256
#define KM_MPART_HW_POLL_MS 100 /* STOPPED: how often the high watermark is looked at */

/* Steps of the actions. 0 is "start the state's action". */
enum {
    KM_MP_START = 0,
    KM_MP_LOAD,
    KM_MP_P_LOOKUP,
    KM_MP_P_TRUNCATE,
    KM_MP_P_ISR,
    KM_MP_P_BUMP,
    KM_MP_F_DRAIN,
    KM_MP_F_BUMP,
    KM_MP_M_RUN,
    KM_MP_M_DIVERGE_DRAIN,
    KM_MP_M_DIVERGE_TRUNCATE,
    KM_MP_PA_DRAIN,
    KM_MP_PA_DONE,
    KM_MP_S_PREDRAIN,
    KM_MP_S_DRAIN,
    KM_MP_S_LME,
    KM_MP_S_BUMP,
    KM_MP_S_ABORT,
    KM_MP_S_RESET,
    KM_MP_S_PERSIST,
    KM_MP_SD_HW,
    KM_MP_SD_DONE,
    KM_MP_FA_DRAIN,
    KM_MP_FA_WAIT,
};

static const char *const km_mpart_step_names[] = {
    [KM_MP_START] = "start",
    [KM_MP_LOAD] = "load",
    [KM_MP_P_LOOKUP] = "preparing.lookup",
    [KM_MP_P_TRUNCATE] = "preparing.truncate",
    [KM_MP_P_ISR] = "preparing.isr_wait",
    [KM_MP_P_BUMP] = "preparing.epoch_bump",
    [KM_MP_F_DRAIN] = "fencing.drain",
    [KM_MP_F_BUMP] = "fencing.bump",
    [KM_MP_M_RUN] = "mirroring",
    [KM_MP_M_DIVERGE_DRAIN] = "mirroring.diverged.drain",
    [KM_MP_M_DIVERGE_TRUNCATE] = "mirroring.diverged.truncate",
    [KM_MP_PA_DRAIN] = "pausing.drain",
    [KM_MP_PA_DONE] = "paused",
    [KM_MP_S_PREDRAIN] = "stopping.drain",
    [KM_MP_S_DRAIN] = "stopping.drain",
    [KM_MP_S_LME] = "stopping.record_lme",
    [KM_MP_S_BUMP] = "stopping.bump",
    [KM_MP_S_ABORT] = "stopping.abort",
    [KM_MP_S_RESET] = "stopping.pid_reset",
    [KM_MP_S_PERSIST] = "stopping.persist",
    [KM_MP_SD_HW] = "stopped.hw_wait",
    [KM_MP_SD_DONE] = "stopped",
    [KM_MP_FA_DRAIN] = "failed.drain",
    [KM_MP_FA_WAIT] = "failed",
};

/* Kinds of kbx completions. */
enum { KM_MP_CB_ISR = 1, KM_MP_CB_BUMP };

typedef struct km_mpart {
    uint32_t magic;
    struct km_mpart *next; /* hash chain */
    km_mpart_mgr_t *mgr;
    char mirror[KM_MPART_NAME_MAX + 1];
    char topic[KM_MPART_NAME_MAX + 1];
    km_mpart_id_t id; /* points at mirror/topic above */
    char source_cid[KM_MPART_CID_MAX];
    int32_t desired;
    bool ule;

    int32_t leader_epoch;
    kbx_partition_t *part; /* NULL: to be acquired at leader_epoch */

    bool loaded;
    km_mpart_rec_t rec; /* as persisted */
    bool writing;
    km_mpart_rec_t wrec; /* being persisted */

    uint64_t gen; /* the token of the current step / write / read */
    int step;
    bool busy;
    int64_t deadline_ms; /* busy/writing/loading: given up after this */
    int64_t wake_at_ms;  /* waiting for a retry delay, -1 none */
    bool frozen;         /* a test crash point fired */

    /* PREPARING */
    bool have_lme;
    int32_t peer_lme_epoch;
    int64_t peer_lme_offset;
    int32_t peer_epoch; /* the peer's current leader epoch of the partition, -1 unknown */
    int64_t trunc_offset;
    /* EPOCH_FENCING */
    int32_t fence_epoch;
    /* MIRRORING */
    bool fetching;
    int64_t diverge_offset;
    char transient[KM_MPART_ERROR_MAX];
    int32_t transient_count;
    /* STOPPED */
    bool from_stopping; /* STOPPED persisted here (not loaded): the last two crash points */
    int64_t hw_target;
    /* FAILED */
    int64_t retry_at_ms;
} km_mpart_t;

struct km_mpart_mgr {
    uint32_t magic;
    km_plugin_t *cm;
    const km_mpart_ops_t *ops;
    void *ctx;
    km_mpart_opts_t opts;
    char crash_point[64];
    uint64_t gen;
    uint64_t rng;
    size_t count;
    atomic_uint inflight;
    bool warned_no_txns;
    km_mpart_t *buckets[KM_MPART_BUCKETS];
};

/* A kbx completion on its way to the loop. */
typedef struct km_mpart_cb {
    km_mpart_mgr_t *mgr;
    kbx_uuid_t topic_id;
    int32_t partition;
    int32_t kind;
    uint64_t token;
    int32_t status;
} km_mpart_cb_t;

static void km_mpart_kick(km_mpart_t *mp);
static void km_mpart_run(km_mpart_t *mp);

/* ---- helpers ----------------------------------------------------------------------------- */

const char *km_mpart_state_name(int state)
{
    switch (state) {
    case KM_MPART_PREPARING:
        return "PREPARING";
    case KM_MPART_EPOCH_FENCING:
        return "EPOCH_FENCING";
    case KM_MPART_MIRRORING:
        return "MIRRORING";
    case KM_MPART_PAUSING:
        return "PAUSING";
    case KM_MPART_PAUSED:
        return "PAUSED";
    case KM_MPART_STOPPING:
        return "STOPPING";
    case KM_MPART_STOPPED:
        return "STOPPED";
    case KM_MPART_FAILED:
        return "FAILED";
    default:
        return "UNKNOWN";
    }
}

static bool km_mpart_state_known(int s)
{
    return s == KM_MPART_UNKNOWN || s == KM_MPART_PREPARING || s == KM_MPART_EPOCH_FENCING ||
           s == KM_MPART_MIRRORING || s == KM_MPART_PAUSING || s == KM_MPART_PAUSED ||
           s == KM_MPART_STOPPING || s == KM_MPART_STOPPED || s == KM_MPART_FAILED;
}

#define KM_MP_BIT(s) (1u << ((s) + 1)) /* UNKNOWN (-1) is bit 0 */

bool km_mpart_transition_valid(int from, int to)
{
    uint32_t allowed;

    if (!km_mpart_state_known(from) || !km_mpart_state_known(to) || to == KM_MPART_UNKNOWN)
        return false;
    if (from == to || to == KM_MPART_FAILED)
        return true;
    switch (to) {
    case KM_MPART_PREPARING:
        allowed =
            KM_MP_BIT(KM_MPART_UNKNOWN) | KM_MP_BIT(KM_MPART_STOPPED) | KM_MP_BIT(KM_MPART_FAILED);
        break;
    case KM_MPART_EPOCH_FENCING:
        allowed = KM_MP_BIT(KM_MPART_MIRRORING);
        break;
    case KM_MPART_MIRRORING:
        allowed = KM_MP_BIT(KM_MPART_PREPARING) | KM_MP_BIT(KM_MPART_EPOCH_FENCING) |
                  KM_MP_BIT(KM_MPART_PAUSED) | KM_MP_BIT(KM_MPART_FAILED);
        break;
    case KM_MPART_PAUSING:
        allowed = KM_MP_BIT(KM_MPART_MIRRORING);
        break;
    case KM_MPART_PAUSED:
        allowed = KM_MP_BIT(KM_MPART_PAUSING);
        break;
    case KM_MPART_STOPPING:
        /* UNKNOWN too (docs/design.md M24): a partition with no state whose topic is stopped
         * must still end writable. */
        allowed = KM_MP_BIT(KM_MPART_UNKNOWN) | KM_MP_BIT(KM_MPART_PREPARING) |
                  KM_MP_BIT(KM_MPART_EPOCH_FENCING) | KM_MP_BIT(KM_MPART_MIRRORING) |
                  KM_MP_BIT(KM_MPART_PAUSING) | KM_MP_BIT(KM_MPART_PAUSED) |
                  KM_MP_BIT(KM_MPART_FAILED);
        break;
    case KM_MPART_STOPPED:
        allowed = KM_MP_BIT(KM_MPART_STOPPING);
        break;
    default:
        return false;
    }
    return (allowed & KM_MP_BIT(from)) != 0;
}

static bool km_mpart_is_mirroring_state(int s)
{
    return s == KM_MPART_MIRRORING || s == KM_MPART_EPOCH_FENCING || s == KM_MPART_PAUSING ||
           s == KM_MPART_PAUSED;
}

static int64_t km_mpart_now_ms(const km_mpart_mgr_t *mgr)
{
    return mgr->cm->ref.api->clock_monotonic_ns(mgr->cm->ref.host) / 1000000;
}

static int64_t km_mpart_wall_ms(const km_mpart_mgr_t *mgr)
{
    return mgr->cm->ref.api->clock_wall_ms(mgr->cm->ref.host);
}

static const kbx_api_t *km_mpart_api(const km_mpart_t *mp)
{
    return mp->mgr->cm->ref.api;
}

static kbx_host_t *km_mpart_host(const km_mpart_t *mp)
{
    return mp->mgr->cm->ref.host;
}

static uint32_t km_mpart_hash(const kbx_uuid_t *id, int32_t partition)
{
    uint32_t h = 2166136261u;
    size_t i;

    for (i = 0; i < sizeof(id->bytes); i++)
        h = (h ^ id->bytes[i]) * 16777619u;
    h = (h ^ (uint32_t)partition) * 16777619u;
    return h % KM_MPART_BUCKETS;
}

static km_mpart_t *km_mpart_find(km_mpart_mgr_t *mgr, const kbx_uuid_t *id, int32_t partition)
{
    km_mpart_t *mp;

    if (mgr == NULL || id == NULL)
        return NULL;
    for (mp = mgr->buckets[km_mpart_hash(id, partition)]; mp != NULL; mp = mp->next)
        if (mp->id.partition == partition && memcmp(&mp->id.topic_id, id, sizeof(*id)) == 0)
            return mp;
    return NULL;
}

static uint64_t km_mpart_new_gen(km_mpart_t *mp)
{
    mp->gen = ++mp->mgr->gen;
    return mp->gen;
}

/* Start waiting for an asynchronous completion of the current generation. */
static void km_mpart_wait(km_mpart_t *mp, int64_t timeout_ms)
{
    mp->busy = true;
    mp->deadline_ms = km_mpart_now_ms(mp->mgr) + timeout_ms;
}

static void km_mpart_retry_later(km_mpart_t *mp)
{
    mp->busy = false;
    mp->wake_at_ms = km_mpart_now_ms(mp->mgr) + mp->mgr->opts.step_retry_ms;
}

/* snprintf that cuts long messages on purpose (names are up to 249 bytes). */
__attribute__((format(printf, 3, 4))) static void km_mpart_fmt(char *dst, size_t size,
                                                               const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(dst, size, fmt, ap);
    va_end(ap);
}

static void km_mpart_copy_str(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src != NULL ? src : "");
}

/* Fire the test-only crash point `point` if it is the configured one. True: stop here. */
static bool km_mpart_crash(km_mpart_t *mp, const char *point)
{
    km_mpart_mgr_t *mgr = mp->mgr;
    char msg[160];

    if (mgr->crash_point[0] == '\0' || strcmp(mgr->crash_point, point) != 0)
        return false;
    km_log_warn(mgr->cm, "TEST crash point %s reached: %s-%d of mirror %s", point, mp->topic,
                (int)mp->id.partition, mp->mirror);
    mp->frozen = true;
    if (mgr->ops->crash != NULL) {
        mgr->ops->crash(mgr->ctx, &mp->id, point);
        return true;
    }
    km_mpart_fmt(msg, sizeof(msg), "test crash point %s (KMIRROR_TEST_CRASH_POINT)", point);
    mgr->cm->ref.api->fatal(mgr->cm->ref.host, __FILE__, __LINE__, msg);
    return true;
}

/* Make sure the handle is bound to leader_epoch. False: not available now (retry later). */
static bool km_mpart_handle(km_mpart_t *mp)
{
    int32_t rc;

    if (mp->part != NULL)
        return true;
    rc = km_mpart_api(mp)->partition_acquire(km_mpart_host(mp), &mp->id.topic_id, mp->id.partition,
                                             mp->leader_epoch, &mp->part);
    if (rc != KBX_OK) {
        mp->part = NULL;
        km_log_debug(mp->mgr->cm, "%s-%d: no partition handle at leader epoch %d (kbx %d)",
                     mp->topic, (int)mp->id.partition, (int)mp->leader_epoch, (int)rc);
        return false;
    }
    return true;
}

static void km_mpart_release(km_mpart_t *mp)
{
    if (mp->part != NULL)
        km_mpart_api(mp)->partition_release(km_mpart_host(mp), mp->part);
    mp->part = NULL;
}

/* After our own epoch bump: bind the handle to the partition's current epoch. */
static bool km_mpart_reacquire_current(km_mpart_t *mp)
{
    kbx_partition_t *part = NULL;
    int32_t rc;

    rc = km_mpart_api(mp)->partition_acquire(km_mpart_host(mp), &mp->id.topic_id, mp->id.partition,
                                             -1, &part);
    if (rc != KBX_OK)
        return false;
    km_mpart_release(mp);
    mp->part = part;
    {
        kbx_log_offsets_t o = {.struct_size = sizeof(o)};
        if (km_mpart_api(mp)->log_offsets(km_mpart_host(mp), part, &o) == KBX_OK)
            mp->leader_epoch = o.leader_epoch;
    }
    return true;
}

static int32_t km_mpart_offsets(km_mpart_t *mp, kbx_log_offsets_t *o)
{
    memset(o, 0, sizeof(*o));
    o->struct_size = sizeof(*o);
    o->last_pid_reset_offset = -1;
    if (!km_mpart_handle(mp))
        return KBX_ERR_FENCED;
    return km_mpart_api(mp)->log_offsets(km_mpart_host(mp), mp->part, o);
}

static void km_mpart_write_mode(km_mpart_t *mp, int32_t mode)
{
    int32_t rc;

    if (!km_mpart_handle(mp))
        return;
    rc = km_mpart_api(mp)->partition_set_write_mode(km_mpart_host(mp), mp->part, mode);
    if (rc != KBX_OK)
        km_log_debug(mp->mgr->cm, "%s-%d: write mode %d not set (kbx %d)", mp->topic,
                     (int)mp->id.partition, (int)mode, (int)rc);
}

/* ---- kbx completions --------------------------------------------------------------------- */

static void km_mpart_cb_drop(km_plugin_t *cm, void *arg)
{
    km_mpart_cb_t *cb = arg;
    km_mpart_mgr_t *mgr = cb->mgr;

    km_free(cm, cb);
    atomic_fetch_sub(&mgr->inflight, 1);
}

static void km_mpart_cb_apply(km_mpart_t *mp, const km_mpart_cb_t *cb);

static void km_mpart_cb_run(km_plugin_t *cm, void *arg)
{
    km_mpart_cb_t *cb = arg;
    km_mpart_t *mp = km_mpart_find(cb->mgr, &cb->topic_id, cb->partition);

    if (mp != NULL && !mp->frozen && mp->busy && mp->gen == cb->token)
        km_mpart_cb_apply(mp, cb);
    km_mpart_cb_drop(cm, cb);
}

/* kbx_done_fn: a host thread. Copy and post. */
static void km_mpart_kbx_done(void *arg, int32_t status)
{
    km_mpart_cb_t *cb = arg;
    km_mpart_mgr_t *mgr = cb->mgr;

    cb->status = status;
    if (mgr->ops->post(mgr->ctx, km_mpart_cb_run, km_mpart_cb_drop, cb) == KM_ERR_NOMEM) {
        /* Lost: the step's deadline gives it up and runs it again (km_mpart_mgr_tick). */
        km_mpart_cb_drop(mgr->cm, cb);
    }
}

static km_mpart_cb_t *km_mpart_cb_new(km_mpart_t *mp, int32_t kind)
{
    km_mpart_cb_t *cb = km_calloc(mp->mgr->cm, 1, sizeof(*cb));

    if (cb == NULL)
        return NULL;
    cb->mgr = mp->mgr;
    cb->topic_id = mp->id.topic_id;
    cb->partition = mp->id.partition;
    cb->kind = kind;
    cb->token = mp->gen;
    atomic_fetch_add(&mp->mgr->inflight, 1);
    return cb;
}

/* Undo km_mpart_cb_new when the operation did not start. */
static void km_mpart_cb_unstarted(km_mpart_t *mp, km_mpart_cb_t *cb)
{
    km_mpart_cb_drop(mp->mgr->cm, cb);
}

/* ---- persisting ---------------------------------------------------------------------------- */

static void km_mpart_load(km_mpart_t *mp)
{
    km_mpart_mgr_t *mgr = mp->mgr;
    km_err_t err;

    mp->loaded = false;
    mp->writing = false;
    mp->step = KM_MP_LOAD;
    km_mpart_new_gen(mp);
    km_mpart_wait(mp, 2 * mgr->opts.op_timeout_ms);
    err = mgr->ops->state_read(mgr->ctx, &mp->id, mp->gen);
    if (err != KM_OK) {
        km_log_warn(mgr->cm, "%s-%d of mirror %s: cannot read its state (%s), retrying", mp->topic,
                    (int)mp->id.partition, mp->mirror, km_err_str(err));
        km_mpart_retry_later(mp);
    }
}

/* The record a transition to `to` starts from. */
static void km_mpart_next_rec(km_mpart_t *mp, int to, km_mpart_rec_t *w)
{
    *w = mp->rec;
    if (to != mp->rec.state)
        w->previous_state = (int8_t)mp->rec.state;
    w->state = (int8_t)to;
    w->state_epoch = mp->rec.state_epoch + 1;
    w->leader_epoch = mp->leader_epoch;
    w->update_time_ms = km_mpart_wall_ms(mp->mgr);
}

/* Persist w; the step continues (or the new state's action starts) when it committed. */
static void km_mpart_write(km_mpart_t *mp, const km_mpart_rec_t *w, bool write_lme)
{
    km_mpart_mgr_t *mgr = mp->mgr;
    km_err_t err;

    mp->wrec = *w;
    mp->writing = true;
    mp->busy = false;
    mp->wake_at_ms = -1;
    mp->deadline_ms = km_mpart_now_ms(mgr) + 2 * mgr->opts.op_timeout_ms;
    km_mpart_new_gen(mp);
    err = mgr->ops->state_write(mgr->ctx, &mp->id, &mp->wrec, write_lme, mp->gen);
    if (err != KM_OK) {
        km_log_warn(mgr->cm, "%s-%d of mirror %s: cannot persist %s (%s), retrying", mp->topic,
                    (int)mp->id.partition, mp->mirror, km_mpart_state_name(w->state),
                    km_err_str(err));
        mp->writing = false;
        mp->loaded = false;
        km_mpart_retry_later(mp);
    }
}

/* Persist a transition. Refused (logged, KM_ERR_INVALID) when the table does not allow it. */
static km_err_t km_mpart_transition(km_mpart_t *mp, const km_mpart_rec_t *w, bool write_lme)
{
    if (!km_mpart_transition_valid(mp->rec.state, w->state)) {
        km_log_error(mp->mgr->cm, "%s-%d of mirror %s: transition %s -> %s refused", mp->topic,
                     (int)mp->id.partition, mp->mirror, km_mpart_state_name(mp->rec.state),
                     km_mpart_state_name(w->state));
        return KM_ERR_INVALID;
    }
    if (w->state != mp->rec.state)
        km_log_info(mp->mgr->cm, "%s-%d of mirror %s: %s -> %s (state epoch %d)", mp->topic,
                    (int)mp->id.partition, mp->mirror, km_mpart_state_name(mp->rec.state),
                    km_mpart_state_name(w->state), (int)w->state_epoch);
    km_mpart_write(mp, w, write_lme);
    return KM_OK;
}

static km_err_t km_mpart_go(km_mpart_t *mp, int to)
{
    km_mpart_rec_t w;

    km_mpart_next_rec(mp, to, &w);
    if ((to == KM_MPART_PREPARING || to == KM_MPART_MIRRORING) && mp->source_cid[0] != '\0')
        km_mpart_copy_str(w.source_cluster_id, sizeof(w.source_cluster_id), mp->source_cid);
    return km_mpart_transition(mp, &w, false);
}

/* FAILED with a message naming the partition (and the offset when known). */
static void km_mpart_fail(km_mpart_t *mp, bool retryable, int64_t offset, const char *what)
{
    km_mpart_rec_t w;
    char name[KM_MPART_ERROR_MAX];
    size_t n;

    km_mpart_next_rec(mp, KM_MPART_FAILED, &w);
    if (mp->rec.state == KM_MPART_FAILED)
        w.previous_state = mp->rec.previous_state;
    km_mpart_fmt(name, sizeof(name), "%s-%d", mp->topic, (int)mp->id.partition);
    n = strlen(name);
    if (strncmp(what, name, n) == 0 && (what[n] == ':' || what[n] == ' '))
        km_mpart_fmt(w.error, sizeof(w.error), "%s", what); /* names the partition already */
    else if (offset >= 0)
        km_mpart_fmt(w.error, sizeof(w.error), "%s-%d at offset %lld: %s", mp->topic,
                     (int)mp->id.partition, (long long)offset, what);
    else
        km_mpart_fmt(w.error, sizeof(w.error), "%s-%d: %s", mp->topic, (int)mp->id.partition, what);
    w.non_retryable = !retryable;
    if (retryable && w.retry_attempt < INT16_MAX)
        w.retry_attempt++;
    km_log_error(mp->mgr->cm, "mirror %s: %s (%s)", mp->mirror, w.error,
                 retryable ? "retried with backoff" : "not retryable: needs an operator");
    km_mpart_transition(mp, &w, false);
}

/* ---- decisions ----------------------------------------------------------------------------- */

/* The state the inputs ask for (the current one when nothing changes). */
static int km_mpart_target(const km_mpart_t *mp)
{
    int cur = mp->rec.state;

    switch (mp->desired) {
    case KM_MPART_WANT_STOPPED:
        return cur == KM_MPART_STOPPED ? cur : KM_MPART_STOPPING;
    case KM_MPART_WANT_PAUSED:
        return cur == KM_MPART_MIRRORING ? KM_MPART_PAUSING : cur;
    default:
        if (cur == KM_MPART_UNKNOWN || cur == KM_MPART_STOPPED)
            return KM_MPART_PREPARING;
        if (cur == KM_MPART_PAUSED)
            return KM_MPART_MIRRORING;
        return cur;
    }
}

static void km_mpart_start_remove(km_mpart_t *mp, int step);

/* Step 1 of a failover, run before STOPPING is persisted so that the STOPPING record carries
 * this failover's LME (step 2): remove the fetcher and drain. Idempotent; nothing is
 * persisted, so a crash here leaves the previous state, which decides STOPPING again. */
static void km_mpart_predrain(km_mpart_t *mp)
{
    if (mp->busy && mp->step == KM_MP_S_PREDRAIN)
        return;
    mp->wake_at_ms = -1;
    km_mpart_write_mode(mp, KBX_WRITE_PENDING);
    km_mpart_start_remove(mp, KM_MP_S_PREDRAIN);
}

/* Drained before STOPPING: record the LME in the STOPPING transition itself. */
static void km_mpart_stop_with_lme(km_mpart_t *mp)
{
    kbx_log_offsets_t o;
    km_mpart_rec_t w;

    if (km_mpart_crash(mp, "stopping.drained"))
        return;
    mp->step = KM_MP_START;
    if (km_mpart_target(mp) != KM_MPART_STOPPING) {
        /* The stop was taken back meanwhile: the state's action starts over. */
        km_mpart_kick(mp);
        return;
    }
    if (km_mpart_offsets(mp, &o) != KBX_OK) {
        km_mpart_retry_later(mp);
        return;
    }
    km_mpart_next_rec(mp, KM_MPART_STOPPING, &w);
    w.lme_epoch = o.latest_cached_epoch;
    w.lme_offset = o.log_end_offset;
    km_log_info(mp->mgr->cm, "%s-%d of mirror %s: last mirrored epoch %d, offset %lld", mp->topic,
                (int)mp->id.partition, mp->mirror, (int)w.lme_epoch, (long long)w.lme_offset);
    km_mpart_transition(mp, &w, true);
}

static void km_mpart_kick(km_mpart_t *mp)
{
    int to;

    if (mp->frozen || !mp->loaded || mp->writing)
        return;
    to = km_mpart_target(mp);
    if (to == KM_MPART_STOPPING && mp->rec.state != KM_MPART_STOPPING) {
        km_mpart_predrain(mp);
        return;
    }
    if (to != mp->rec.state) {
        km_mpart_go(mp, to);
        return;
    }
    km_mpart_run(mp);
}

/* ---- PREPARING ------------------------------------------------------------------------------ */

static void km_mpart_prep_truncate(km_mpart_t *mp)
{
    const kbx_api_t *api = km_mpart_api(mp);
    kbx_log_offsets_t o;
    km_mpart_cb_t *cb;
    int32_t rc, e = -1;
    int64_t end = -1;

    if ((rc = km_mpart_offsets(mp, &o)) != KBX_OK)
        goto retry;
    if (mp->peer_lme_epoch < 0) {
        /* No LME: nothing of ours is known to the peer; mirror from scratch. */
        mp->trunc_offset = o.log_start_offset;
    } else {
        rc = api->log_epoch_end_offset(km_mpart_host(mp), mp->part, mp->peer_lme_epoch, &e, &end);
        if (rc != KBX_OK)
            goto retry;
        /* end: the start of the first cached epoch above the LME (or the LEO when the LME is
         * the newest epoch; -1 when every cached epoch is older: nothing to cut). */
        mp->trunc_offset = end >= 0 ? end : o.log_end_offset;
    }
    if (mp->trunc_offset < o.log_start_offset)
        mp->trunc_offset = o.log_start_offset;
    if (mp->trunc_offset < o.log_end_offset) {
        km_log_info(mp->mgr->cm,
                    "%s-%d of mirror %s: LME (%d, %lld): truncating the log at %lld (end %lld)",
                    mp->topic, (int)mp->id.partition, mp->mirror, (int)mp->peer_lme_epoch,
                    (long long)mp->peer_lme_offset, (long long)mp->trunc_offset,
                    (long long)o.log_end_offset);
        rc = api->log_truncate(km_mpart_host(mp), mp->part, mp->trunc_offset);
        if (rc != KBX_OK)
            goto retry;
    }
    mp->step = KM_MP_P_ISR;
    km_mpart_new_gen(mp);
    cb = km_mpart_cb_new(mp, KM_MP_CB_ISR);
    if (cb == NULL) {
        rc = KBX_ERR_NOMEM;
        goto retry;
    }
    km_mpart_wait(mp, 2 * mp->mgr->opts.op_timeout_ms);
    rc = api->wait_isr_truncation(km_mpart_host(mp), mp->part, mp->trunc_offset,
                                  mp->ule ? KBX_ISR_WAIT_ALL_REPLICAS : 0,
                                  mp->mgr->opts.op_timeout_ms, km_mpart_kbx_done, cb);
    if (rc != KBX_OK) {
        km_mpart_cb_unstarted(mp, cb);
        mp->step = KM_MP_P_TRUNCATE;
        goto retry;
    }
    return;
retry:
    km_log_debug(mp->mgr->cm, "%s-%d: truncation step failed (kbx %d), retrying", mp->topic,
                 (int)mp->id.partition, (int)rc);
    km_mpart_retry_later(mp);
}

static void km_mpart_start_bump(km_mpart_t *mp, int32_t min_epoch);

int32_t km_mpart_failback_epoch(int32_t lme_epoch, int32_t peer_epoch)
{
    int32_t top;

    if (lme_epoch < 0)
        return -1;
    if (peer_epoch < 0) /* unknown: the old heuristic, a few peer leader changes covered */
        return lme_epoch > INT32_MAX - 1 - KM_MPART_EPOCH_HEADROOM
                   ? INT32_MAX
                   : lme_epoch + 1 + KM_MPART_EPOCH_HEADROOM;
    top = peer_epoch > lme_epoch ? peer_epoch : lme_epoch;
    return top == INT32_MAX ? INT32_MAX : top + 1;
}

/* Failback (the peer answered an LME): the peer bumped its epoch above the LME epoch when it
 * failed over, so its new batches carry epoch > LME epoch, up to its current leader epoch.
 * Raise ours above that before fetching (km_mpart_failback_epoch), so the first fetched data
 * is not thrown away at an epoch fence (which would fetch it twice). A peer leader change
 * after the lookup is fenced as usual. */
static void km_mpart_prep_bump(km_mpart_t *mp)
{
    kbx_log_offsets_t o;
    int32_t want;

    mp->step = KM_MP_P_BUMP;
    if (mp->peer_lme_epoch < 0) {
        km_mpart_go(mp, KM_MPART_MIRRORING);
        return;
    }
    if (km_mpart_offsets(mp, &o) != KBX_OK) {
        km_mpart_retry_later(mp);
        return;
    }
    want = km_mpart_failback_epoch(mp->peer_lme_epoch, mp->peer_epoch);
    if (o.leader_epoch >= want) {
        km_mpart_go(mp, KM_MPART_MIRRORING);
        return;
    }
    km_log_info(mp->mgr->cm,
                "%s-%d of mirror %s: failback: raising the leader epoch from %d to %d (LME epoch "
                "%d, the peer's leader epoch %d)",
                mp->topic, (int)mp->id.partition, mp->mirror, (int)o.leader_epoch, (int)want,
                (int)mp->peer_lme_epoch, (int)mp->peer_epoch);
    km_mpart_start_bump(mp, want);
}

static void km_mpart_run_preparing(km_mpart_t *mp)
{
    km_err_t err;

    switch (mp->step) {
    case KM_MP_START:
        /* PREPARING is entered only from STOPPED, never mirrored, or a failure while
         * preparing: a partition that was mirroring resumes in MIRRORING from its log end. */
        km_mpart_write_mode(mp, KBX_WRITE_READ_ONLY);
        mp->have_lme = false;
        mp->step = KM_MP_P_LOOKUP;
        /* fallthrough */
    case KM_MP_P_LOOKUP:
        if (mp->have_lme) {
            mp->step = KM_MP_P_TRUNCATE;
            km_mpart_prep_truncate(mp);
            return;
        }
        km_mpart_new_gen(mp);
        km_mpart_wait(mp, 2 * mp->mgr->opts.op_timeout_ms);
        err = mp->mgr->ops->lme_lookup(mp->mgr->ctx, &mp->id, mp->gen);
        if (err != KM_OK)
            km_mpart_retry_later(mp);
        return;
    case KM_MP_P_TRUNCATE:
        km_mpart_prep_truncate(mp);
        return;
    case KM_MP_P_BUMP:
        km_mpart_prep_bump(mp);
        return;
    default:
        return;
    }
}

/* ---- EPOCH_FENCING ------------------------------------------------------------------------- */

static void km_mpart_start_remove(km_mpart_t *mp, int step)
{
    km_err_t err;

    mp->step = step;
    km_mpart_new_gen(mp);
    km_mpart_wait(mp, 2 * mp->mgr->opts.op_timeout_ms);
    err = mp->mgr->ops->fetch_remove(mp->mgr->ctx, &mp->id, mp->gen);
    if (err != KM_OK)
        km_mpart_retry_later(mp);
}

/* Bump the leader epoch to at least min_epoch. */
static void km_mpart_start_bump(km_mpart_t *mp, int32_t min_epoch)
{
    km_mpart_cb_t *cb;
    int32_t rc;

    km_mpart_new_gen(mp);
    cb = km_mpart_cb_new(mp, KM_MP_CB_BUMP);
    if (cb == NULL) {
        km_mpart_retry_later(mp);
        return;
    }
    km_mpart_wait(mp, 2 * mp->mgr->opts.op_timeout_ms);
    rc = km_mpart_api(mp)->leader_epoch_bump(km_mpart_host(mp), mp->part, min_epoch,
                                             mp->mgr->opts.op_timeout_ms, km_mpart_kbx_done, cb);
    if (rc != KBX_OK) {
        km_mpart_cb_unstarted(mp, cb);
        km_log_warn(mp->mgr->cm, "%s-%d of mirror %s: leader epoch bump to %d not started (kbx %d)",
                    mp->topic, (int)mp->id.partition, mp->mirror, (int)min_epoch, (int)rc);
        km_mpart_retry_later(mp);
    }
}

static void km_mpart_run_fencing(km_mpart_t *mp)
{
    kbx_log_offsets_t o;

    switch (mp->step) {
    case KM_MP_START:
        km_mpart_write_mode(mp, KBX_WRITE_READ_ONLY);
        km_mpart_start_remove(mp, KM_MP_F_DRAIN);
        return;
    case KM_MP_F_BUMP:
        if (km_mpart_offsets(mp, &o) != KBX_OK) {
            km_mpart_retry_later(mp);
            return;
        }
        /* The invariant: the local leader epoch >= every mirrored batch's epoch. Unknown
         * fence epoch (state loaded after a restart): the fetcher reports it again if needed. */
        if (mp->fence_epoch < 0 || o.leader_epoch >= mp->fence_epoch) {
            km_mpart_go(mp, KM_MPART_MIRRORING);
            return;
        }
        km_mpart_start_bump(mp, mp->fence_epoch + KM_MPART_EPOCH_HEADROOM);
        return;
    default:
        return;
    }
}

/* ---- MIRRORING ------------------------------------------------------------------------------ */

static void km_mpart_run_mirroring(km_mpart_t *mp)
{
    kbx_log_offsets_t o;
    int32_t rc;
    km_err_t err;

    switch (mp->step) {
    case KM_MP_START:
        km_mpart_write_mode(mp, KBX_WRITE_READ_ONLY);
        if (km_mpart_offsets(mp, &o) != KBX_OK) {
            km_mpart_retry_later(mp);
            return;
        }
        err = mp->mgr->ops->fetch_add(mp->mgr->ctx, &mp->id, mp->leader_epoch, o.log_end_offset);
        if (err != KM_OK) {
            km_log_warn(mp->mgr->cm, "%s-%d of mirror %s: fetcher not started (%s), retrying",
                        mp->topic, (int)mp->id.partition, mp->mirror, km_err_str(err));
            km_mpart_retry_later(mp);
            return;
        }
        mp->fetching = true;
        mp->step = KM_MP_M_RUN;
        return;
    case KM_MP_M_DIVERGE_TRUNCATE:
        if (!km_mpart_handle(mp)) {
            km_mpart_retry_later(mp);
            return;
        }
        rc = km_mpart_api(mp)->log_truncate(km_mpart_host(mp), mp->part, mp->diverge_offset);
        if (rc == KBX_ERR_OFFSET) {
            km_mpart_fail(mp, true, mp->diverge_offset,
                          "the log diverged from the source below its log start offset");
            return;
        }
        if (rc != KBX_OK) {
            km_mpart_retry_later(mp);
            return;
        }
        km_log_info(mp->mgr->cm, "%s-%d of mirror %s: diverged from the source: truncated at %lld",
                    mp->topic, (int)mp->id.partition, mp->mirror, (long long)mp->diverge_offset);
        mp->step = KM_MP_START;
        km_mpart_run_mirroring(mp);
        return;
    default:
        return;
    }
}

/* ---- PAUSING / PAUSED ------------------------------------------------------------------------ */

static void km_mpart_run_pausing(km_mpart_t *mp)
{
    if (mp->step == KM_MP_START) {
        km_mpart_write_mode(mp, KBX_WRITE_READ_ONLY);
        km_mpart_start_remove(mp, KM_MP_PA_DRAIN);
    } else if (mp->step == KM_MP_PA_DONE) {
        km_mpart_go(mp, KM_MPART_PAUSED);
    }
}

/* ---- STOPPING ------------------------------------------------------------------------------- */

typedef struct km_mpart_txns {
    km_mpart_t *mp;
    kbx_open_txn_t *v;
    size_t n, cap;
    bool nomem;
} km_mpart_txns_t;

static void km_mpart_txn_collect(void *arg, const kbx_open_txn_t *txn)
{
    km_mpart_txns_t *t = arg;
    kbx_open_txn_t *nv;

    if (t->nomem)
        return;
    if (t->n == t->cap) {
        size_t cap = t->cap != 0 ? t->cap * 2 : 8;
        nv = km_realloc(t->mp->mgr->cm, t->v, cap * sizeof(*nv));
        if (nv == NULL) {
            t->nomem = true;
            return;
        }
        t->v = nv;
        t->cap = cap;
    }
    memset(&t->v[t->n], 0, sizeof(t->v[t->n]));
    memcpy(&t->v[t->n], txn,
           txn->struct_size < sizeof(t->v[t->n]) ? txn->struct_size : sizeof(t->v[t->n]));
    t->n++;
}

/* Step 4: ABORT markers for every transaction that started below the LME and is still open. */
static int32_t km_mpart_abort_open_txns(km_mpart_t *mp)
{
    const kbx_api_t *api = km_mpart_api(mp);
    km_mpart_txns_t t = {.mp = mp};
    kbx_control_batch_t c;
    int32_t rc;
    size_t i;

    if (!KBX_API_HAS(api, log_open_txns)) {
        if (!mp->mgr->warned_no_txns)
            km_log_warn(mp->mgr->cm, "the host's kbx API has no log_open_txns (kbx < 1.1): "
                                     "failover writes no ABORT markers; MIRROR_PID_RESET ends "
                                     "open transactions");
        mp->mgr->warned_no_txns = true;
        return KBX_OK;
    }
    rc = api->log_open_txns(km_mpart_host(mp), mp->part, km_mpart_txn_collect, &t);
    if (rc >= 0 && t.nomem)
        rc = KBX_ERR_NOMEM;
    for (i = 0; rc >= 0 && i < t.n; i++) {
        if (t.v[i].first_offset >= mp->rec.lme_offset) {
            km_log_warn(mp->mgr->cm,
                        "%s-%d: transaction of producer %lld opened at %lld, above the LME "
                        "offset %lld, left alone",
                        mp->topic, (int)mp->id.partition, (long long)t.v[i].producer_id,
                        (long long)t.v[i].first_offset, (long long)mp->rec.lme_offset);
            continue;
        }
        memset(&c, 0, sizeof(c));
        c.struct_size = sizeof(c);
        c.control_type = KBX_CONTROL_ABORT;
        c.producer_id = t.v[i].producer_id;
        c.producer_epoch = t.v[i].producer_epoch;
        c.coordinator_epoch = t.v[i].coordinator_epoch > 0 ? t.v[i].coordinator_epoch : 0;
        c.leader_epoch = mp->leader_epoch;
        c.timestamp_ms = -1;
        rc = api->log_append_control(km_mpart_host(mp), mp->part, &c, NULL);
        if (rc == KBX_OK)
            km_log_info(mp->mgr->cm,
                        "%s-%d of mirror %s: aborted the open transaction of producer %lld "
                        "(epoch %d) started at %lld",
                        mp->topic, (int)mp->id.partition, mp->mirror, (long long)c.producer_id,
                        (int)c.producer_epoch, (long long)t.v[i].first_offset);
    }
    km_free(mp->mgr->cm, t.v);
    return rc < 0 ? rc : KBX_OK;
}

/* Step 5's batch: the MIRROR_PID_RESET at the current leader epoch. */
static int32_t km_mpart_append_reset(km_mpart_t *mp)
{
    kbx_control_batch_t c;
    int32_t rc;

    memset(&c, 0, sizeof(c));
    c.struct_size = sizeof(c);
    c.control_type = KBX_CONTROL_MIRROR_PID_RESET;
    c.producer_id = -1;
    c.producer_epoch = -1;
    c.coordinator_epoch = 0;
    c.leader_epoch = mp->leader_epoch;
    c.timestamp_ms = -1;
    rc = km_mpart_api(mp)->log_append_control(km_mpart_host(mp), mp->part, &c, NULL);
    if (rc != KBX_OK)
        km_log_warn(mp->mgr->cm,
                    "%s-%d of mirror %s: MIRROR_PID_RESET append failed (kbx %d), "
                    "retrying",
                    mp->topic, (int)mp->id.partition, mp->mirror, (int)rc);
    return rc;
}

static void km_mpart_run_stopping(km_mpart_t *mp)
{
    const kbx_api_t *api = km_mpart_api(mp);
    kbx_log_offsets_t o;
    km_mpart_rec_t w;
    int32_t rc;

    switch (mp->step) {
    case KM_MP_START:
        /* Writers wait (retriable error) through the failover. */
        km_mpart_write_mode(mp, KBX_WRITE_PENDING);
        km_mpart_start_remove(mp, KM_MP_S_DRAIN);
        return;
    case KM_MP_S_LME:
        /* Normally recorded by the STOPPING transition; a record without one (another
         * writer) gets it now. */
        if (mp->rec.lme_offset < 0) {
            if (km_mpart_offsets(mp, &o) != KBX_OK) {
                km_mpart_retry_later(mp);
                return;
            }
            km_mpart_next_rec(mp, KM_MPART_STOPPING, &w);
            w.lme_epoch = o.latest_cached_epoch;
            w.lme_offset = o.log_end_offset;
            km_log_info(mp->mgr->cm, "%s-%d of mirror %s: last mirrored epoch %d, offset %lld",
                        mp->topic, (int)mp->id.partition, mp->mirror, (int)w.lme_epoch,
                        (long long)w.lme_offset);
            km_mpart_write(mp, &w, true); /* continues here when committed */
            return;
        }
        if (km_mpart_crash(mp, "stopping.lme_recorded"))
            return;
        mp->step = KM_MP_S_BUMP;
        /* fallthrough */
    case KM_MP_S_BUMP:
        if (km_mpart_offsets(mp, &o) != KBX_OK) {
            km_mpart_retry_later(mp);
            return;
        }
        if (o.leader_epoch <= mp->rec.lme_epoch) {
            km_mpart_start_bump(mp, mp->rec.lme_epoch + 1);
            return;
        }
        if (km_mpart_crash(mp, "stopping.epoch_bumped"))
            return;
        mp->step = KM_MP_S_ABORT;
        /* fallthrough */
    case KM_MP_S_ABORT:
        if (!km_mpart_handle(mp) || (rc = km_mpart_abort_open_txns(mp)) != KBX_OK) {
            km_mpart_retry_later(mp);
            return;
        }
        if (km_mpart_crash(mp, "stopping.txns_aborted"))
            return;
        mp->step = KM_MP_S_RESET;
        /* fallthrough */
    case KM_MP_S_RESET:
        if (km_mpart_offsets(mp, &o) != KBX_OK) {
            km_mpart_retry_later(mp);
            return;
        }
        /* Exactly one reset per failover: one at or above the LME offset is ours (nothing
         * else appends to the partition now). A 1.0 host does not report it. */
        if (!KBX_API_HAS(api, log_open_txns) || o.last_pid_reset_offset < mp->rec.lme_offset) {
            if (km_mpart_append_reset(mp) != KBX_OK) {
                km_mpart_retry_later(mp);
                return;
            }
        }
        if (km_mpart_crash(mp, "stopping.pid_reset"))
            return;
        mp->step = KM_MP_S_PERSIST;
        /* fallthrough */
    case KM_MP_S_PERSIST:
        mp->from_stopping = true;
        km_mpart_go(mp, KM_MPART_STOPPED);
        return;
    default:
        return;
    }
}

/* ---- STOPPED ------------------------------------------------------------------------------- */

/* STOPPED loaded here (a new leader, a restart), not persisted here. STOPPED is persisted
 * before the high watermark passes the failover's ABORT markers and reset, so a leader that
 * dies right after it may leave a new leader whose log never got them. Append what is missing
 * as steps 4 and 5 do (kbx 1.1 tells: the reset is the last of them). False: retry later;
 * o is refreshed when something was appended. */
static bool km_mpart_repair(km_mpart_t *mp, kbx_log_offsets_t *o)
{
    if (!KBX_API_HAS(km_mpart_api(mp), log_open_txns) || mp->rec.lme_offset < 0 ||
        o->last_pid_reset_offset >= mp->rec.lme_offset)
        return true;
    if (o->leader_epoch <= mp->rec.lme_epoch) {
        km_log_warn(mp->mgr->cm,
                    "%s-%d of mirror %s: STOPPED without its MIRROR_PID_RESET at leader epoch "
                    "%d, not above the LME epoch %d: left as it is",
                    mp->topic, (int)mp->id.partition, mp->mirror, (int)o->leader_epoch,
                    (int)mp->rec.lme_epoch);
        return true;
    }
    km_log_warn(mp->mgr->cm,
                "%s-%d of mirror %s: STOPPED, but the log lacks the failover's MIRROR_PID_RESET "
                "(the leader that persisted STOPPED died before it was replicated): appending "
                "the ABORT markers and the reset again",
                mp->topic, (int)mp->id.partition, mp->mirror);
    if (km_mpart_abort_open_txns(mp) != KBX_OK || km_mpart_append_reset(mp) != KBX_OK)
        return false;
    return km_mpart_offsets(mp, o) == KBX_OK;
}

static void km_mpart_run_stopped(km_mpart_t *mp)
{
    kbx_log_offsets_t o;

    switch (mp->step) {
    case KM_MP_START:
        if (mp->from_stopping && km_mpart_crash(mp, "stopping.persisted"))
            return;
        if (km_mpart_offsets(mp, &o) != KBX_OK ||
            (!mp->from_stopping && !km_mpart_repair(mp, &o))) {
            km_mpart_retry_later(mp);
            return;
        }
        /* Nothing is appended any more: the reset is below the log end. */
        mp->hw_target = o.log_end_offset;
        mp->step = KM_MP_SD_HW;
        /* fallthrough */
    case KM_MP_SD_HW:
        if (km_mpart_offsets(mp, &o) != KBX_OK) {
            km_mpart_retry_later(mp);
            return;
        }
        if (o.high_watermark < mp->hw_target) {
            mp->wake_at_ms = km_mpart_now_ms(mp->mgr) + KM_MPART_HW_POLL_MS;
            return;
        }
        /* Only where this failover persisted STOPPED: a STOPPED partition led again (a new
         * leader, a restart) passes the wait without it. */
        if (mp->from_stopping && km_mpart_crash(mp, "stopping.hw_passed"))
            return;
        mp->from_stopping = false;
        if (km_mpart_api(mp)->partition_set_write_mode(km_mpart_host(mp), mp->part,
                                                       KBX_WRITE_WRITABLE) != KBX_OK) {
            km_mpart_retry_later(mp);
            return;
        }
        km_log_info(mp->mgr->cm, "%s-%d of mirror %s: STOPPED and writable (LME %d, %lld)",
                    mp->topic, (int)mp->id.partition, mp->mirror, (int)mp->rec.lme_epoch,
                    (long long)mp->rec.lme_offset);
        mp->step = KM_MP_SD_DONE;
        return;
    default:
        return;
    }
}

/* ---- FAILED -------------------------------------------------------------------------------- */

/* Delay before retry attempt n (>= 1): initial * 2^(n-1), capped, +-20% jitter. */
static int64_t km_mpart_backoff_ms(km_mpart_mgr_t *mgr, int attempt)
{
    int64_t d = mgr->opts.retry_initial_ms, max = mgr->opts.retry_max_ms, j;
    int i;

    for (i = 1; i < attempt && d < max; i++)
        d = d > max / 2 ? max : d * 2;
    if (d > max)
        d = max;
    /* xorshift64 */
    mgr->rng ^= mgr->rng << 13;
    mgr->rng ^= mgr->rng >> 7;
    mgr->rng ^= mgr->rng << 17;
    j = d / 5;
    if (j > 0)
        d += (int64_t)(mgr->rng % (uint64_t)(2 * j + 1)) - j;
    return d;
}

/* Where an automatic retry goes: back to mirroring, or preparing again. */
static int km_mpart_retry_target(const km_mpart_t *mp)
{
    int prev = mp->rec.previous_state;

    if (km_mpart_is_mirroring_state(prev))
        return KM_MPART_MIRRORING;
    return KM_MPART_PREPARING;
}

static void km_mpart_retry_failed(km_mpart_t *mp, bool by_operator)
{
    km_mpart_rec_t w;
    int to = km_mpart_retry_target(mp);

    km_mpart_next_rec(mp, to, &w);
    if (by_operator) {
        w.retry_attempt = 0;
        w.non_retryable = false;
        w.error[0] = '\0';
    }
    if (mp->source_cid[0] != '\0')
        km_mpart_copy_str(w.source_cluster_id, sizeof(w.source_cluster_id), mp->source_cid);
    km_log_info(mp->mgr->cm, "%s-%d of mirror %s: FAILED -> %s (%s, attempt %d)", mp->topic,
                (int)mp->id.partition, mp->mirror, km_mpart_state_name(to),
                by_operator ? "operator" : "automatic retry", (int)mp->rec.retry_attempt);
    km_mpart_transition(mp, &w, false);
}

static void km_mpart_run_failed(km_mpart_t *mp)
{
    km_mpart_mgr_t *mgr = mp->mgr;
    int64_t now = km_mpart_now_ms(mgr);

    switch (mp->step) {
    case KM_MP_START:
        km_mpart_write_mode(mp, KBX_WRITE_READ_ONLY);
        km_mpart_start_remove(mp, KM_MP_FA_DRAIN);
        return;
    case KM_MP_FA_WAIT:
        if (mp->retry_at_ms < 0 || now < mp->retry_at_ms) {
            mp->wake_at_ms = mp->retry_at_ms;
            return;
        }
        km_mpart_retry_failed(mp, false);
        return;
    default:
        return;
    }
}

static void km_mpart_failed_schedule(km_mpart_t *mp)
{
    km_mpart_mgr_t *mgr = mp->mgr;
    const km_mpart_rec_t *r = &mp->rec;

    mp->retry_at_ms = -1;
    if (r->non_retryable || mgr->opts.retry_max_attempts <= 0 ||
        r->retry_attempt > mgr->opts.retry_max_attempts) {
        km_log_warn(mgr->cm, "%s-%d of mirror %s: FAILED (%s); waiting for an operator", mp->topic,
                    (int)mp->id.partition, mp->mirror, r->error);
        return;
    }
    mp->retry_at_ms = km_mpart_now_ms(mgr) +
                      km_mpart_backoff_ms(mgr, r->retry_attempt > 0 ? r->retry_attempt : 1);
}

/* ---- dispatch ------------------------------------------------------------------------------- */

static void km_mpart_run(km_mpart_t *mp)
{
    if (mp->frozen || !mp->loaded || mp->writing || mp->busy)
        return;
    if (mp->wake_at_ms >= 0) {
        if (km_mpart_now_ms(mp->mgr) < mp->wake_at_ms)
            return;
        mp->wake_at_ms = -1;
    }
    switch (mp->rec.state) {
    case KM_MPART_PREPARING:
        km_mpart_run_preparing(mp);
        break;
    case KM_MPART_EPOCH_FENCING:
        km_mpart_run_fencing(mp);
        break;
    case KM_MPART_MIRRORING:
        km_mpart_run_mirroring(mp);
        break;
    case KM_MPART_PAUSING:
        km_mpart_run_pausing(mp);
        break;
    case KM_MPART_PAUSED:
        if (mp->step == KM_MP_START) {
            km_mpart_write_mode(mp, KBX_WRITE_READ_ONLY);
            mp->fetching = false;
            mp->step = KM_MP_PA_DONE;
        }
        break;
    case KM_MPART_STOPPING:
        km_mpart_run_stopping(mp);
        break;
    case KM_MPART_STOPPED:
        km_mpart_run_stopped(mp);
        break;
    case KM_MPART_FAILED:
        km_mpart_run_failed(mp);
        break;
    default:
        break; /* UNKNOWN: nothing to do until the inputs ask for something */
    }
}

/* A kbx completion of the current step. */
static void km_mpart_cb_apply(km_mpart_t *mp, const km_mpart_cb_t *cb)
{
    mp->busy = false;
    switch (cb->kind) {
    case KM_MP_CB_ISR:
        if (cb->status != KBX_OK) {
            km_log_info(mp->mgr->cm,
                        "%s-%d of mirror %s: replicas not truncated yet (kbx %d), retrying",
                        mp->topic, (int)mp->id.partition, mp->mirror, (int)cb->status);
            mp->step = KM_MP_P_TRUNCATE;
            km_mpart_retry_later(mp);
            return;
        }
        km_mpart_prep_bump(mp);
        return;
    case KM_MP_CB_BUMP:
        if (cb->status != KBX_OK) {
            km_log_warn(mp->mgr->cm, "%s-%d of mirror %s: leader epoch bump failed (kbx %d)",
                        mp->topic, (int)mp->id.partition, mp->mirror, (int)cb->status);
            km_mpart_retry_later(mp);
            return;
        }
        /* The host applied the new epoch: our handle is fenced. Its leadership event may
         * still be on its way; take the current epoch now (the event is then a no-op). */
        if (!km_mpart_reacquire_current(mp)) {
            km_mpart_retry_later(mp);
            return;
        }
        km_mpart_kick(mp);
        return;
    default:
        return;
    }
}

/* ---- manager ------------------------------------------------------------------------------ */

void km_mpart_opts_default(km_mpart_opts_t *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->retry_initial_ms = 100;
    opts->retry_max_ms = 300000;
    opts->retry_max_attempts = 20;
    opts->step_retry_ms = 1000;
    opts->op_timeout_ms = 30000;
}

void km_mpart_opts_from_plugin(km_plugin_t *cm, km_mpart_opts_t *opts)
{
    km_mpart_opts_default(opts);
    opts->retry_initial_ms = cm->conf.failed_retry_initial_backoff_ms;
    opts->retry_max_ms = cm->conf.failed_retry_max_backoff_ms;
    opts->retry_max_attempts = cm->conf.failed_retry_max_attempts;
    /* TEST ONLY (docs/plugin.md): the crash points of the failover tests. */
    opts->crash_point = getenv("KMIRROR_TEST_CRASH_POINT");
}

km_mpart_mgr_t *km_mpart_mgr_new(km_plugin_t *cm, const km_mpart_ops_t *ops, void *ops_ctx,
                                 const km_mpart_opts_t *opts)
{
    km_mpart_mgr_t *mgr;

    if (ops == NULL || ops->state_read == NULL || ops->state_write == NULL ||
        ops->fetch_add == NULL || ops->fetch_remove == NULL || ops->lme_lookup == NULL ||
        ops->post == NULL)
        return NULL;
    mgr = km_calloc(cm, 1, sizeof(*mgr));
    if (mgr == NULL)
        return NULL;
    mgr->magic = KM_MPART_MGR_MAGIC;
    mgr->cm = cm;
    mgr->ops = ops;
    mgr->ctx = ops_ctx;
    if (opts != NULL)
        mgr->opts = *opts;
    else
        km_mpart_opts_default(&mgr->opts);
    km_mpart_copy_str(mgr->crash_point, sizeof(mgr->crash_point), mgr->opts.crash_point);
    mgr->opts.crash_point = NULL;
    if (mgr->opts.step_retry_ms <= 0)
        mgr->opts.step_retry_ms = 1000;
    if (mgr->opts.op_timeout_ms <= 0)
        mgr->opts.op_timeout_ms = 30000;
    mgr->rng = mgr->opts.seed != 0 ? mgr->opts.seed
                                   : (uint64_t)cm->ref.api->clock_monotonic_ns(cm->ref.host) | 1u;
    atomic_init(&mgr->inflight, 0);
    if (mgr->crash_point[0] != '\0')
        km_log_warn(cm, "TEST ONLY: crash point %s armed", mgr->crash_point);
    return mgr;
}

static void km_mpart_free_one(km_mpart_t *mp)
{
    km_plugin_t *cm = mp->mgr->cm;

    km_mpart_release(mp);
    mp->magic = 0;
    km_free(cm, mp);
}

void km_mpart_mgr_free(km_mpart_mgr_t *mgr)
{
    km_mpart_t *mp, *next;
    size_t b;

    if (mgr == NULL)
        return;
    KM_CHECK_OBJ(mgr->cm, mgr, KM_MPART_MGR_MAGIC);
    KM_BUG_ON(mgr->cm, atomic_load(&mgr->inflight) != 0);
    for (b = 0; b < KM_MPART_BUCKETS; b++) {
        for (mp = mgr->buckets[b]; mp != NULL; mp = next) {
            next = mp->next;
            km_mpart_free_one(mp);
        }
        mgr->buckets[b] = NULL;
    }
    mgr->magic = 0;
    km_free(mgr->cm, mgr);
}

uint32_t km_mpart_mgr_inflight(const km_mpart_mgr_t *mgr)
{
    return atomic_load(&((km_mpart_mgr_t *)mgr)->inflight);
}

size_t km_mpart_mgr_count(const km_mpart_mgr_t *mgr)
{
    return mgr->count;
}

void km_mpart_mgr_state_counts(const km_mpart_mgr_t *mgr, uint32_t counts[KM_MPART_NSTATES])
{
    const km_mpart_t *mp;
    size_t b;

    memset(counts, 0, KM_MPART_NSTATES * sizeof(counts[0]));
    for (b = 0; b < KM_MPART_BUCKETS; b++)
        for (mp = mgr->buckets[b]; mp != NULL; mp = mp->next)
            if (mp->rec.state >= -1 && mp->rec.state < KM_MPART_NSTATES - 1)
                counts[mp->rec.state + 1]++;
}

static bool km_mpart_id_valid(const km_mpart_id_t *id)
{
    return id != NULL && id->mirror != NULL && id->mirror[0] != '\0' &&
           strlen(id->mirror) <= KM_MPART_NAME_MAX && id->topic != NULL && id->topic[0] != '\0' &&
           strlen(id->topic) <= KM_MPART_NAME_MAX && id->partition >= 0;
}

km_err_t km_mpart_lead(km_mpart_mgr_t *mgr, const km_mpart_lead_t *lead)
{
    km_mpart_t *mp;
    uint32_t b;

    if (lead == NULL || !km_mpart_id_valid(&lead->id) || lead->leader_epoch < 0 ||
        lead->desired < KM_MPART_WANT_RUNNING || lead->desired > KM_MPART_WANT_STOPPED)
        return KM_ERR_INVALID;
    mp = km_mpart_find(mgr, &lead->id.topic_id, lead->id.partition);
    if (mp == NULL) {
        mp = km_calloc(mgr->cm, 1, sizeof(*mp));
        if (mp == NULL)
            return KM_ERR_NOMEM;
        mp->magic = KM_MPART_MAGIC;
        mp->mgr = mgr;
        km_mpart_copy_str(mp->mirror, sizeof(mp->mirror), lead->id.mirror);
        km_mpart_copy_str(mp->topic, sizeof(mp->topic), lead->id.topic);
        mp->id.mirror = mp->mirror;
        mp->id.topic = mp->topic;
        mp->id.topic_id = lead->id.topic_id;
        mp->id.partition = lead->id.partition;
        mp->leader_epoch = lead->leader_epoch;
        mp->rec.state = KM_MPART_UNKNOWN;
        mp->wake_at_ms = -1;
        mp->fence_epoch = -1;
        mp->retry_at_ms = -1;
        b = km_mpart_hash(&mp->id.topic_id, mp->id.partition);
        mp->next = mgr->buckets[b];
        mgr->buckets[b] = mp;
        mgr->count++;
    } else if (mp->leader_epoch != lead->leader_epoch) {
        if (mp->frozen)
            return KM_OK;
        /* A new epoch: whatever runs is abandoned; state is read again and the state's action
         * starts over with a handle bound to the new epoch. */
        km_log_info(mgr->cm, "%s-%d of mirror %s: leader epoch %d -> %d", mp->topic,
                    (int)mp->id.partition, mp->mirror, (int)mp->leader_epoch,
                    (int)lead->leader_epoch);
        km_mpart_release(mp);
        mp->leader_epoch = lead->leader_epoch;
    } else {
        mp->desired = lead->desired;
        mp->ule = lead->unclean_election;
        km_mpart_copy_str(mp->source_cid, sizeof(mp->source_cid), lead->source_cluster_id);
        km_mpart_kick(mp);
        return KM_OK;
    }
    mp->desired = lead->desired;
    mp->ule = lead->unclean_election;
    km_mpart_copy_str(mp->source_cid, sizeof(mp->source_cid), lead->source_cluster_id);
    mp->wake_at_ms = -1;
    mp->busy = false;
    if (!km_mpart_handle(mp))
        km_log_warn(mgr->cm, "%s-%d of mirror %s: no partition handle at epoch %d yet", mp->topic,
                    (int)mp->id.partition, mp->mirror, (int)mp->leader_epoch);
    km_mpart_load(mp);
    return KM_OK;
}

void km_mpart_resign(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition)
{
    km_mpart_t *mp = km_mpart_find(mgr, topic_id, partition), **pp;

    if (mp == NULL)
        return;
    km_log_info(mgr->cm, "%s-%d of mirror %s: leadership lost in %s", mp->topic,
                (int)mp->id.partition, mp->mirror, km_mpart_state_name(mp->rec.state));
    if (!mp->frozen)
        mgr->ops->fetch_remove(mgr->ctx, &mp->id, 0); /* completion ignored (token 0) */
    for (pp = &mgr->buckets[km_mpart_hash(topic_id, partition)]; *pp != mp; pp = &(*pp)->next)
        ;
    *pp = mp->next;
    mgr->count--;
    km_mpart_free_one(mp);
}

void km_mpart_set_desired(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                          int32_t desired)
{
    km_mpart_t *mp = km_mpart_find(mgr, topic_id, partition);

    if (mp == NULL || desired < KM_MPART_WANT_RUNNING || desired > KM_MPART_WANT_STOPPED)
        return;
    mp->desired = desired;
    km_mpart_kick(mp);
}

void km_mpart_state_loaded(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                           uint64_t token, km_err_t err, const km_mpart_rec_t *rec)
{
    km_mpart_t *mp = km_mpart_find(mgr, topic_id, partition);

    if (mp == NULL || mp->frozen || mp->loaded || mp->step != KM_MP_LOAD || mp->gen != token)
        return;
    mp->busy = false;
    if (err != KM_OK) {
        km_log_warn(mgr->cm, "%s-%d of mirror %s: state read failed (%s), retrying", mp->topic,
                    (int)mp->id.partition, mp->mirror, km_err_str(err));
        km_mpart_retry_later(mp);
        return;
    }
    if (rec != NULL) {
        mp->rec = *rec;
        mp->rec.error[sizeof(mp->rec.error) - 1] = '\0';
        mp->rec.source_cluster_id[sizeof(mp->rec.source_cluster_id) - 1] = '\0';
        if (!km_mpart_state_known(mp->rec.state)) {
            /* A newer writer's state: keep it, do nothing with the partition. */
            km_log_error(mgr->cm,
                         "%s-%d of mirror %s: persisted state %d is unknown to this "
                         "version; the partition is left alone",
                         mp->topic, (int)mp->id.partition, mp->mirror, (int)mp->rec.state);
            mp->frozen = true;
            return;
        }
    } else {
        memset(&mp->rec, 0, sizeof(mp->rec));
        mp->rec.state = KM_MPART_UNKNOWN;
        mp->rec.previous_state = KM_MPART_UNKNOWN;
        mp->rec.leader_epoch = -1;
        mp->rec.lme_epoch = -1;
        mp->rec.lme_offset = -1;
        mp->rec.update_time_ms = -1;
    }
    mp->loaded = true;
    mp->step = KM_MP_START;
    km_mpart_new_gen(mp);
    if (mp->rec.state == KM_MPART_FAILED)
        km_mpart_failed_schedule(mp);
    if (km_mpart_is_mirroring_state(mp->rec.state) && mp->rec.source_cluster_id[0] != '\0' &&
        mp->source_cid[0] != '\0' && strcmp(mp->rec.source_cluster_id, mp->source_cid) != 0 &&
        mp->desired != KM_MPART_WANT_STOPPED) {
        char what[200];
        km_mpart_fmt(what, sizeof(what), "the source cluster id changed from %s to %s",
                     mp->rec.source_cluster_id, mp->source_cid);
        km_mpart_fail(mp, false, -1, what);
        return;
    }
    km_mpart_kick(mp);
}

void km_mpart_state_written(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                            uint64_t token, km_err_t err, int32_t state_epoch)
{
    km_mpart_t *mp = km_mpart_find(mgr, topic_id, partition);
    bool same;

    if (mp == NULL || mp->frozen || !mp->writing || mp->gen != token)
        return;
    mp->writing = false;
    if (err != KM_OK) {
        km_log_warn(mgr->cm, "%s-%d of mirror %s: writing %s failed (%s); reading the state again",
                    mp->topic, (int)mp->id.partition, mp->mirror,
                    km_mpart_state_name(mp->wrec.state), km_err_str(err));
        mp->loaded = false;
        mp->step = KM_MP_LOAD;
        km_mpart_retry_later(mp);
        return;
    }
    same = mp->wrec.state == mp->rec.state;
    mp->rec = mp->wrec;
    if (state_epoch >= 0)
        mp->rec.state_epoch = state_epoch;
    km_mpart_new_gen(mp);
    if (!same) {
        mp->step = KM_MP_START;
        mp->fetching = mp->fetching && mp->rec.state == KM_MPART_MIRRORING;
        if (mp->rec.state == KM_MPART_FAILED)
            km_mpart_failed_schedule(mp);
    }
    km_mpart_kick(mp);
}

void km_mpart_fetch_removed(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                            uint64_t token)
{
    km_mpart_t *mp = km_mpart_find(mgr, topic_id, partition);

    if (mp == NULL || mp->frozen || !mp->busy || mp->gen != token)
        return;
    mp->busy = false;
    mp->fetching = false;
    /* The fetcher's last retriable error is about a fetch that no longer runs (a stop with the
     * source unreachable must not show it on the STOPPED partition); a re-added fetcher
     * reports its own. */
    mp->transient[0] = '\0';
    mp->transient_count = 0;
    switch (mp->step) {
    case KM_MP_F_DRAIN:
        mp->step = KM_MP_F_BUMP;
        break;
    case KM_MP_M_DIVERGE_DRAIN:
        mp->step = KM_MP_M_DIVERGE_TRUNCATE;
        break;
    case KM_MP_PA_DRAIN:
        mp->step = KM_MP_PA_DONE;
        break;
    case KM_MP_S_PREDRAIN:
        km_mpart_stop_with_lme(mp);
        return;
    case KM_MP_S_DRAIN:
        mp->step = KM_MP_S_LME;
        break;
    case KM_MP_FA_DRAIN:
        mp->step = KM_MP_FA_WAIT;
        break;
    default:
        return;
    }
    km_mpart_kick(mp);
}

void km_mpart_lme_done(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                       uint64_t token, km_err_t err, int32_t lme_epoch, int64_t lme_offset,
                       int32_t peer_epoch)
{
    km_mpart_t *mp = km_mpart_find(mgr, topic_id, partition);

    if (mp == NULL || mp->frozen || !mp->busy || mp->gen != token || mp->step != KM_MP_P_LOOKUP)
        return;
    mp->busy = false;
    if (err != KM_OK) {
        /* Truncation only after the peer answered: stay PREPARING and ask again. */
        km_log_info(mgr->cm, "%s-%d of mirror %s: LME lookup failed (%s), retrying", mp->topic,
                    (int)mp->id.partition, mp->mirror, km_err_str(err));
        km_mpart_retry_later(mp);
        return;
    }
    mp->have_lme = true;
    mp->peer_lme_epoch = lme_epoch < 0 ? -1 : lme_epoch;
    mp->peer_lme_offset = lme_epoch < 0 ? -1 : lme_offset;
    mp->peer_epoch = peer_epoch < 0 ? -1 : peer_epoch;
    mp->step = KM_MP_P_TRUNCATE;
    km_mpart_kick(mp);
}

void km_mpart_lme_loop(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                       uint64_t token, const char *message)
{
    km_mpart_t *mp = km_mpart_find(mgr, topic_id, partition);

    if (mp == NULL || mp->frozen || !mp->busy || mp->gen != token || mp->step != KM_MP_P_LOOKUP)
        return;
    mp->busy = false;
    /* Retryable: once the other side stopped mirroring from us, a retry (PREPARING again)
     * gets its LME. Nothing was truncated. */
    km_mpart_fail(mp, true, -1,
                  message != NULL && message[0] != '\0'
                      ? message
                      : "the other cluster still mirrors this topic from us: stop it there first");
}

void km_mpart_fetch_event(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                          const km_mpart_fevent_t *ev)
{
    km_mpart_t *mp = km_mpart_find(mgr, topic_id, partition);
    km_mpart_rec_t w;

    if (mp == NULL || ev == NULL || mp->frozen || !mp->loaded || mp->writing ||
        mp->rec.state != KM_MPART_MIRRORING || mp->step != KM_MP_M_RUN)
        return;
    switch (ev->kind) {
    case KM_MPART_FEV_PROGRESS:
        mp->transient[0] = '\0';
        mp->transient_count = 0;
        if (mp->rec.retry_attempt != 0 || mp->rec.error[0] != '\0' || mp->rec.non_retryable) {
            km_mpart_next_rec(mp, KM_MPART_MIRRORING, &w);
            w.retry_attempt = 0;
            w.non_retryable = false;
            w.error[0] = '\0';
            km_mpart_write(mp, &w, false);
        }
        return;
    case KM_MPART_FEV_EPOCH_EXCEEDED:
        km_log_info(mgr->cm, "%s-%d of mirror %s: source epoch %d above the local leader epoch %d",
                    mp->topic, (int)mp->id.partition, mp->mirror, (int)ev->epoch,
                    (int)mp->leader_epoch);
        mp->fence_epoch = ev->epoch;
        km_mpart_go(mp, KM_MPART_EPOCH_FENCING);
        return;
    case KM_MPART_FEV_DIVERGED:
        if (ev->offset < 0)
            return;
        mp->diverge_offset = ev->offset;
        km_mpart_start_remove(mp, KM_MP_M_DIVERGE_DRAIN);
        return;
    case KM_MPART_FEV_TRANSIENT:
        km_mpart_copy_str(mp->transient, sizeof(mp->transient), ev->message);
        if (mp->transient_count < INT32_MAX)
            mp->transient_count++;
        return;
    case KM_MPART_FEV_FATAL:
        km_mpart_fail(mp, ev->retryable, ev->offset,
                      ev->message != NULL ? ev->message : "fatal fetch error");
        return;
    default:
        return;
    }
}

void km_mpart_mgr_tick(km_mpart_mgr_t *mgr)
{
    int64_t now = km_mpart_now_ms(mgr);
    km_mpart_t *mp, *next;
    size_t b;

    for (b = 0; b < KM_MPART_BUCKETS; b++) {
        for (mp = mgr->buckets[b]; mp != NULL; mp = next) {
            next = mp->next;
            if (mp->frozen)
                continue;
            if ((mp->busy || mp->writing) && now > mp->deadline_ms) {
                /* A completion that never came: give the step up and start it again. */
                km_log_warn(mgr->cm, "%s-%d of mirror %s: %s timed out; starting it again",
                            mp->topic, (int)mp->id.partition, mp->mirror,
                            mp->writing ? "state write" : km_mpart_step_names[mp->step]);
                km_mpart_new_gen(mp);
                mp->busy = false;
                if (mp->writing || !mp->loaded) {
                    mp->writing = false;
                    km_mpart_load(mp);
                    continue;
                }
                if (mp->step == KM_MP_F_DRAIN || mp->step == KM_MP_S_DRAIN ||
                    mp->step == KM_MP_S_PREDRAIN || mp->step == KM_MP_PA_DRAIN ||
                    mp->step == KM_MP_FA_DRAIN || mp->step == KM_MP_P_ISR ||
                    mp->step == KM_MP_M_DIVERGE_DRAIN)
                    mp->step = KM_MP_START;
            }
            if (!mp->loaded && !mp->busy && !mp->writing) {
                if (mp->wake_at_ms < 0 || now >= mp->wake_at_ms) {
                    mp->wake_at_ms = -1;
                    km_mpart_load(mp);
                }
                continue;
            }
            if (mp->wake_at_ms >= 0 && now >= mp->wake_at_ms)
                km_mpart_kick(mp);
        }
    }
}

km_err_t km_mpart_operator_retry(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                                 char *errbuf, size_t errbuf_size)
{
    km_mpart_t *mp = km_mpart_find(mgr, topic_id, partition);

    if (mp == NULL) {
        km_mpart_fmt(errbuf, errbuf_size, "partition %d is not led by this broker", (int)partition);
        return KM_ERR_INVALID;
    }
    if (!mp->loaded || mp->writing || mp->frozen || mp->rec.state != KM_MPART_FAILED) {
        km_mpart_fmt(errbuf, errbuf_size, "%s-%d of mirror %s is %s%s, not FAILED", mp->topic,
                     (int)mp->id.partition, mp->mirror, km_mpart_state_name(mp->rec.state),
                     mp->writing ? " (changing)" : "");
        return KM_ERR_INVALID;
    }
    if (mp->desired == KM_MPART_WANT_STOPPED) {
        km_mpart_fmt(errbuf, errbuf_size, "%s-%d of mirror %s is being stopped", mp->topic,
                     (int)mp->id.partition, mp->mirror);
        return KM_ERR_INVALID;
    }
    km_mpart_retry_failed(mp, true);
    return KM_OK;
}

static void km_mpart_describe_one(km_mpart_t *mp, km_mpart_desc_t *out)
{
    kbx_log_offsets_t o;

    memset(out, 0, sizeof(*out));
    out->state = mp->rec.state;
    out->state_name = km_mpart_state_name(mp->rec.state);
    out->step = km_mpart_step_names[mp->step];
    out->loaded = mp->loaded;
    out->rec = mp->rec;
    out->leader_epoch = mp->leader_epoch;
    out->next_retry_ms = mp->rec.state == KM_MPART_FAILED ? mp->retry_at_ms : -1;
    km_mpart_copy_str(out->transient_error, sizeof(out->transient_error), mp->transient);
    out->transient_count = mp->transient_count;
    out->log_end_offset = -1;
    out->high_watermark = -1;
    if (mp->part != NULL && km_mpart_offsets(mp, &o) == KBX_OK) {
        out->log_end_offset = o.log_end_offset;
        out->high_watermark = o.high_watermark;
    }
    if (mp->fetching && mp->mgr->ops->fetch_status != NULL)
        out->fetching = mp->mgr->ops->fetch_status(mp->mgr->ctx, &mp->id, &out->fetch);
}

km_err_t km_mpart_describe(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                           km_mpart_desc_t *out)
{
    km_mpart_t *mp = km_mpart_find(mgr, topic_id, partition);

    if (mp == NULL || out == NULL)
        return KM_ERR_INVALID;
    km_mpart_describe_one(mp, out);
    return KM_OK;
}

void km_mpart_foreach(km_mpart_mgr_t *mgr,
                      void (*fn)(void *arg, const km_mpart_id_t *id, const km_mpart_desc_t *desc),
                      void *arg)
{
    km_mpart_desc_t d;
    km_mpart_t *mp;
    size_t b;

    for (b = 0; b < KM_MPART_BUCKETS; b++) {
        for (mp = mgr->buckets[b]; mp != NULL; mp = mp->next) {
            km_mpart_describe_one(mp, &d);
            fn(arg, &mp->id, &d);
        }
    }
}
