/*
 * kb_gco.c -- the group coordinator (kb_gco.h): __consumer_offsets through broker/api's
 * partitions, loading, the timer thread, deferred requests, the transaction hook, the handler
 * helpers and the kbroker module.
 */
#include "kb_gco.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "kb_err.h"
#include "kb_gco_int.h"
#include "kb_glog.h"
#include "kb_grpmod.h"
#include "kb_time.h"
#include "kp_errcode.h"

#ifdef KB_GROUP_TXN_HOOK
#include "kb_txn_group_hook.h"
#endif

/* ---- __consumer_offsets through the partitions of broker/api ------------------------------- */

static int16_t kb_gco_sto_err(int rc)
{
    switch (rc) {
    case KB_STO_OK:
        return 0;
    case KB_STO_RECORD_TOO_LARGE:
        return KP_ERR_MESSAGE_TOO_LARGE;
    case KB_STO_INVALID_PRODUCER_EPOCH:
        return KP_ERR_INVALID_PRODUCER_EPOCH;
    case KB_STO_COORDINATOR_FENCED:
        return KP_ERR_TRANSACTION_COORDINATOR_FENCED;
    case KB_STO_CLOSED:
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    case KB_STO_IO:
    case KB_STO_CORRUPT_LOG:
        return KP_ERR_KAFKA_STORAGE_ERROR;
    default:
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
}

static int16_t kb_gco_part(kb_gco_t *co, int32_t partition, kb_part_t **part)
{
    int rc = kb_meta_part(co->meta, KB_TOPIC_CONSUMER_OFFSETS, partition, part);
    if (rc == KB_META_OK)
        return 0;
    return rc == KB_META_OFFLINE ? KP_ERR_KAFKA_STORAGE_ERROR : KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
}

/* The coordinator writes this thread made since the last kb_gco_await_writes (the partition
 * and the offset after the last write): a thread serves one request at a time. */
static _Thread_local struct {
    kb_part_t *part;
    int64_t end;
    int32_t epoch; /**< the leader epoch the writes were made at */
} kb_gco_tl_write;

void kb_gco_forget_writes(void)
{
    if (kb_gco_tl_write.part)
        kb_part_release(kb_gco_tl_write.part);
    kb_gco_tl_write.part = NULL;
    kb_gco_tl_write.end = -1;
}

static void kb_gco_note_write(kb_part_t *part, int64_t end)
{
    if (kb_gco_tl_write.part && kb_gco_tl_write.part != part)
        kb_gco_forget_writes(); /* one partition per request: the last one counts */
    if (!kb_gco_tl_write.part) {
        kb_part_ref(part);
        kb_gco_tl_write.part = part;
        kb_gco_tl_write.epoch = kb_part_epoch(part);
    }
    if (end > kb_gco_tl_write.end)
        kb_gco_tl_write.end = end;
}

int16_t kb_gco_await_writes(kb_gco_t *co)
{
    kb_part_t *part = kb_gco_tl_write.part;
    kb_part_hw_wait_t hw;
    (void)co;
    if (!part)
        return 0;
    hw =
        kb_part_await_hw(part, kb_gco_tl_write.epoch, kb_gco_tl_write.end, KB_GCO_WRITE_TIMEOUT_MS);
    if (hw != KB_PART_HW_REACHED)
        kb_glog_warn("a write to %s-%d was not replicated: %s", part->topic, part->index,
                     hw == KB_PART_HW_TIMEOUT ? "timed out" : "leadership lost");
    kb_gco_forget_writes();
    return hw == KB_PART_HW_TIMEOUT   ? KP_ERR_COORDINATOR_NOT_AVAILABLE
           : hw == KB_PART_HW_NOT_LED ? KP_ERR_NOT_COORDINATOR
                                      : 0;
}

/* The partition of an owned group, checked against the ownership table: the append goes to
 * the leader at the epoch the partition was loaded with. @locks co->mu held */
static int16_t kb_gco_owned_part(kb_gco_t *co, int32_t partition, kb_part_t **part)
{
    int16_t err;
    if (partition < 0 || partition >= co->nown || co->own[partition].state != KB_GCO_P_ACTIVE)
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    if ((err = kb_gco_part(co, partition, part)))
        return err;
    if (kb_part_role(*part) != KB_PART_LEADER || kb_part_epoch(*part) != co->own[partition].epoch) {
        kb_part_release(*part);
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    }
    return 0;
}

/* Kafka's appends with acks=all check min.insync.replicas before writing. */
static int16_t kb_gco_isr_check(kb_part_t *part)
{
    kb_tconf_extra_t ex;
    bool mirror;
    kb_part_conf(part, &ex, &mirror);
    if ((int64_t)kb_part_isr(part, NULL, 0) < (int64_t)ex.min_insync_replicas)
        return KP_ERR_NOT_ENOUGH_REPLICAS;
    return 0;
}

static int16_t kb_gco_op_append(void *opaque, int32_t partition, uint8_t *batch, size_t len,
                                int64_t *base)
{
    kb_gco_t *co = opaque;
    kb_part_t *part;
    kb_append_info_t info;
    int16_t err = kb_gco_owned_part(co, partition, &part);
    int rc;
    if (err)
        return err;
    if ((err = kb_gco_isr_check(part))) {
        kb_part_release(part);
        return err;
    }
    rc = kb_part_append_leader(part, batch, len, KB_ORIGIN_COORDINATOR, 0, &info);
    if (rc == 0) {
        *base = info.first_offset;
        kb_gco_note_write(part, info.last_offset + 1);
    } else if (kb_part_role(part) != KB_PART_LEADER) {
        err = KP_ERR_NOT_LEADER_OR_FOLLOWER;
    } else {
        kb_glog_warn("cannot append to %s-%d: %s", KB_TOPIC_CONSUMER_OFFSETS, partition,
                     kb_sto_err_str(rc));
    }
    kb_part_release(part);
    return err ? err : kb_gco_sto_err(rc);
}

static int16_t kb_gco_op_marker(void *opaque, int32_t partition, int64_t pid, int16_t pepoch,
                                int32_t coord_epoch, bool commit, int64_t *offset)
{
    kb_gco_t *co = opaque;
    kb_part_t *part;
    kb_append_info_t info;
    int16_t err = kb_gco_owned_part(co, partition, &part);
    int rc;
    if (err)
        return err;
    rc = kb_part_append_control(part, commit ? KP_CONTROL_TYPE_COMMIT : KP_CONTROL_TYPE_ABORT, pid,
                                pepoch, coord_epoch, kb_part_epoch(part), &info);
    if (rc == 0) {
        *offset = info.first_offset;
        kb_gco_note_write(part, info.last_offset + 1);
    } else if (kb_part_role(part) != KB_PART_LEADER) {
        kb_part_release(part);
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    }
    kb_part_release(part);
    return kb_gco_sto_err(rc);
}

static int64_t kb_gco_op_now(void *opaque)
{
    (void)opaque;
    return kb_time_wall_ms();
}

static int64_t kb_gco_op_mono(void *opaque)
{
    (void)opaque;
    return kb_time_mono_ms();
}

static void kb_gco_wake(kb_gco_t *co)
{
    uint64_t one = 1;
    if (co->efd >= 0 && write(co->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        kb_glog_error("cannot wake the group timer thread: %s", strerror(errno));
}

static void kb_gco_op_timers_changed(void *opaque)
{
    kb_gco_wake(opaque);
}

static void kb_gco_op_join_done(void *opaque, void *token, const kb_gjoin_res_t *res)
{
    (void)opaque;
    kb_gh_join_result(token, res);
}

static void kb_gco_op_sync_done(void *opaque, void *token, const kb_gsync_res_t *res)
{
    (void)opaque;
    kb_gh_sync_result(token, res);
}

static const kb_gsm_ops_t kb_gco_ops = {
    .now_ms = kb_gco_op_now,
    .mono_ms = kb_gco_op_mono,
    .append = kb_gco_op_append,
    .append_marker = kb_gco_op_marker,
    .join_done = kb_gco_op_join_done,
    .sync_done = kb_gco_op_sync_done,
    .timers_changed = kb_gco_op_timers_changed,
};

int16_t kb_gco_ensure_topic(kb_gco_t *co)
{
    kb_topic_info_t ti;
    int16_t err;
    if (atomic_load(&co->topic_ready))
        return 0;
    pthread_mutex_lock(&co->topic_mu);
    if (atomic_load(&co->topic_ready)) {
        pthread_mutex_unlock(&co->topic_mu);
        return 0;
    }
    err = kb_meta_ensure_internal_topic(co->meta, KB_TOPIC_CONSUMER_OFFSETS, &ti);
    if (!err) {
        kb_glog_info("%s ready with %d partitions", KB_TOPIC_CONSUMER_OFFSETS, ti.partitions);
        kb_gco_reconcile(co); /* take the partitions this node leads (new: nothing to read) */
    } else {
        kb_glog_warn("cannot create %s: error %d", KB_TOPIC_CONSUMER_OFFSETS, err);
    }
    pthread_mutex_unlock(&co->topic_mu);
    return err;
}

int32_t kb_gco_partition_for(kb_gco_t *co, const char *group_id)
{
    int32_t p;
    pthread_mutex_lock(&co->mu);
    p = kb_gsm_partition_for(co->gsm, group_id);
    pthread_mutex_unlock(&co->mu);
    return p;
}

/* ---- ownership and loading ------------------------------------------------------------------ */

int16_t kb_gco_owner_err(kb_gco_t *co, const char *group_id)
{
    int32_t p = kb_gsm_partition_for(co->gsm, group_id);
    if (p < 0 || p >= co->nown)
        return KP_ERR_NOT_COORDINATOR;
    switch (co->own[p].state) {
    case KB_GCO_P_ACTIVE:
        return 0;
    case KB_GCO_P_LOADING:
        return KP_ERR_COORDINATOR_LOAD_IN_PROGRESS;
    default:
        return KP_ERR_NOT_COORDINATOR;
    }
}

int kb_gco_partition_state(kb_gco_t *co, int32_t partition, int32_t *epoch)
{
    int st = KB_GCO_P_NONE;
    *epoch = -1;
    pthread_mutex_lock(&co->mu);
    if (partition >= 0 && partition < co->nown) {
        st = co->own[partition].state;
        if (st != KB_GCO_P_NONE)
            *epoch = co->own[partition].epoch;
    }
    pthread_mutex_unlock(&co->mu);
    return st;
}

void kb_gco_set_node_resolver(kb_gco_t *co, kb_node_resolve_fn *fn, void *opaque)
{
    pthread_mutex_lock(&co->mu);
    co->resolve = fn;
    co->resolve_opaque = opaque;
    pthread_mutex_unlock(&co->mu);
}

/* Size the ownership table for @p n partitions (the topic's count; it never shrinks while the
 * topic exists). 0 or -1 (no memory). @locks co->mu held */
static int kb_gco_own_resize(kb_gco_t *co, int32_t n)
{
    kb_gpown_t *v;
    if (n <= co->nown)
        return 0;
    if (!(v = realloc(co->own, (size_t)n * sizeof(*v))))
        return -1;
    for (int32_t p = co->nown; p < n; p++)
        v[p] = (kb_gpown_t){.state = KB_GCO_P_NONE, .epoch = -1};
    co->own = v;
    co->nown = n;
    kb_gsm_set_partitions(co->gsm, n);
    return 0;
}

/* Drop partition @p p: its groups go, waiting requests answer NOT_COORDINATOR. @locks co->mu */
static void kb_gco_unload_locked(kb_gco_t *co, int32_t p, const char *why)
{
    if (co->own[p].state != KB_GCO_P_NONE)
        kb_glog_info("%s-%d: no longer the coordinator (epoch %d; %s)", KB_TOPIC_CONSUMER_OFFSETS,
                     p, co->own[p].epoch, why);
    kb_gsm_unload_partition(co->gsm, p);
    co->own[p].state = KB_GCO_P_NONE;
    co->own[p].epoch = -1;
}

/* Read partition @p p from its log start to its log end (as Kafka's loading) into the state
 * machine, one chunk at a time under co->mu, while it stays LOADING at @p epoch; then make it
 * ACTIVE. On a read error the partition is left unloaded (the next pass tries again). */
static void kb_gco_load_partition(kb_gco_t *co, kb_part_t *part, int32_t p, int32_t epoch)
{
    int64_t t0 = kb_time_mono_ms();
    int64_t off = kb_log_start_offset(part->log);
    int64_t end = kb_log_leo(part->log);
    kb_gsm_stats_t st;
    bool lost = false;
    while (off < end && !lost) {
        uint8_t *buf = NULL;
        size_t len = 0;
        kb_log_read_t meta;
        int64_t next = off;
        int rc = kb_log_read_copy(part->log, off, 4 << 20, KB_ISOLATION_LEO, 1, &buf, &len, &meta);
        if (rc != 0) {
            kb_glog_error("cannot load %s-%d at offset %" PRId64 ": %s", KB_TOPIC_CONSUMER_OFFSETS,
                          p, off, kb_sto_err_str(rc));
            free(buf);
            pthread_mutex_lock(&co->mu);
            if (co->own[p].state == KB_GCO_P_LOADING && co->own[p].epoch == epoch)
                kb_gco_unload_locked(co, p, "load failed");
            pthread_mutex_unlock(&co->mu);
            return;
        }
        if (!len) {
            free(buf);
            break;
        }
        pthread_mutex_lock(&co->mu);
        if (co->own[p].state != KB_GCO_P_LOADING || co->own[p].epoch != epoch)
            lost = true;
        else if (kb_gsm_load(co->gsm, p, buf, len, &next) != 0)
            kb_glog_warn("%s-%d: a malformed batch after offset %" PRId64 " was skipped",
                         KB_TOPIC_CONSUMER_OFFSETS, p, next);
        pthread_mutex_unlock(&co->mu);
        free(buf);
        if (meta.next_offset > next)
            next = meta.next_offset;
        if (next <= off)
            break;
        off = next;
    }
    pthread_mutex_lock(&co->mu);
    if (co->own[p].state == KB_GCO_P_LOADING && co->own[p].epoch == epoch) {
        kb_gsm_partition_loaded(co->gsm, p);
        co->own[p].state = KB_GCO_P_ACTIVE;
        kb_gsm_stats(co->gsm, &st);
        kb_glog_info("%s-%d: coordinator at epoch %d, loaded up to offset %" PRId64 " in %" PRId64
                     " ms (%zu group(s) in all)",
                     KB_TOPIC_CONSUMER_OFFSETS, p, epoch, off, kb_time_mono_ms() - t0, st.groups);
    }
    pthread_mutex_unlock(&co->mu);
}

void kb_gco_reconcile(kb_gco_t *co)
{
    kb_topic_info_t ti;
    pthread_mutex_lock(&co->load_mu);
    atomic_store(&co->reconcile_due, false);
    if (kb_meta_topic_by_name(co->meta, KB_TOPIC_CONSUMER_OFFSETS, &ti) != 0) {
        pthread_mutex_lock(&co->mu);
        for (int32_t p = 0; p < co->nown; p++)
            if (co->own[p].state != KB_GCO_P_NONE)
                kb_gco_unload_locked(co, p, "topic gone");
        pthread_mutex_unlock(&co->mu);
        pthread_mutex_unlock(&co->load_mu);
        return;
    }
    pthread_mutex_lock(&co->mu);
    if (kb_gco_own_resize(co, ti.partitions) != 0) {
        pthread_mutex_unlock(&co->mu);
        pthread_mutex_unlock(&co->load_mu);
        kb_glog_error("out of memory for the ownership of %s", KB_TOPIC_CONSUMER_OFFSETS);
        atomic_store(&co->reconcile_due, true);
        return;
    }
    pthread_mutex_unlock(&co->mu);
    atomic_store(&co->topic_ready, true);
    for (int32_t p = 0; p < ti.partitions; p++) {
        kb_part_t *part = NULL;
        bool lead = false, load = false;
        int32_t epoch = -1;
        if (kb_meta_part(co->meta, KB_TOPIC_CONSUMER_OFFSETS, p, &part) == KB_META_OK) {
            lead = kb_part_role(part) == KB_PART_LEADER && !atomic_load(&part->deleted);
            epoch = kb_part_epoch(part);
        }
        pthread_mutex_lock(&co->mu);
        if (co->own[p].state != KB_GCO_P_NONE && (!lead || co->own[p].epoch != epoch))
            kb_gco_unload_locked(co, p, lead ? "new leader epoch" : "not the leader");
        if (lead && co->own[p].state == KB_GCO_P_NONE) {
            kb_gsm_unload_partition(co->gsm, p); /* anything a racing request left behind */
            co->own[p].state = KB_GCO_P_LOADING;
            co->own[p].epoch = epoch;
            load = true;
        }
        pthread_mutex_unlock(&co->mu);
        if (load)
            kb_gco_load_partition(co, part, p, epoch);
        if (part)
            kb_part_release(part);
    }
    pthread_mutex_unlock(&co->load_mu);
}

/* ---- timer thread and deleted topics -------------------------------------------------------- */

void kb_gco_leadership_changed(kb_gco_t *co)
{
    atomic_store(&co->reconcile_due, true);
    kb_gco_wake(co);
}

/* Metadata listener (runs under the metadata change mutex): only queue the work. A change of
 * __consumer_offsets (created, leader epoch moved: a new leader) asks for an ownership pass. */
static void kb_gco_meta_event(void *opaque, const kb_meta_event_t *ev)
{
    kb_gco_t *co = opaque;
    char *name;
    if (!ev->snapshot && ev->topic && !strcmp(ev->topic->name, KB_TOPIC_CONSUMER_OFFSETS) &&
        (ev->type == KB_META_EV_TOPIC || ev->type == KB_META_EV_EPOCH)) {
        kb_gco_leadership_changed(co);
        return;
    }
    if (ev->snapshot || ev->type != KB_META_EV_TOPIC || !(ev->flags & KB_META_TOPIC_DELETED) ||
        !ev->topic)
        return;
    if (!(name = strdup(ev->topic->name)))
        return;
    pthread_mutex_lock(&co->q_mu);
    if (co->ndeleted == co->cap_deleted) {
        size_t cap = co->cap_deleted ? co->cap_deleted * 2 : 8;
        char **v = realloc(co->deleted, cap * sizeof(*v));
        if (!v) {
            pthread_mutex_unlock(&co->q_mu);
            free(name);
            return;
        }
        co->deleted = v;
        co->cap_deleted = cap;
    }
    co->deleted[co->ndeleted++] = name;
    pthread_mutex_unlock(&co->q_mu);
    kb_gco_wake(co);
}

/* Offsets of deleted topics go (with tombstones). @locks co->mu held */
static void kb_gco_drain_deleted(kb_gco_t *co)
{
    char **v;
    size_t n;
    pthread_mutex_lock(&co->q_mu);
    v = co->deleted;
    n = co->ndeleted;
    co->deleted = NULL;
    co->ndeleted = co->cap_deleted = 0;
    pthread_mutex_unlock(&co->q_mu);
    for (size_t i = 0; i < n; i++) {
        kb_gsm_topic_deleted(co->gsm, v[i]);
        free(v[i]);
    }
    free(v);
}

void kb_gco_tick(kb_gco_t *co)
{
    if (atomic_load(&co->reconcile_due))
        kb_gco_reconcile(co);
    pthread_mutex_lock(&co->mu);
    kb_gco_drain_deleted(co);
    kb_gsm_run_timers(co->gsm);
    pthread_mutex_unlock(&co->mu);
    kb_gco_forget_writes();
}

static void *kb_gco_thread(void *arg)
{
    kb_gco_t *co = arg;
    for (;;) {
        struct pollfd pfd = {.fd = co->efd, .events = POLLIN};
        int64_t next, wait, now = kb_time_mono_ms();
        uint64_t v;
        if (atomic_load(&co->reconcile_due) || now >= co->next_reconcile_ms) {
            kb_gco_reconcile(co);
            co->next_reconcile_ms = now + KB_GCO_RECONCILE_MS;
        }
        pthread_mutex_lock(&co->mu);
        if (co->stop) {
            pthread_mutex_unlock(&co->mu);
            break;
        }
        kb_gco_drain_deleted(co);
        kb_gsm_run_timers(co->gsm);
        next = kb_gsm_next_deadline(co->gsm);
        if (next > co->next_reconcile_ms)
            next = co->next_reconcile_ms;
        pthread_mutex_unlock(&co->mu);
        kb_gco_forget_writes();
        /* -1: no deadline; 0: a deadline has passed, run the timers again at once. */
        wait = next == INT64_MAX ? -1 : next - kb_time_mono_ms();
        if (next != INT64_MAX && wait < 0)
            wait = 0;
        if (wait > INT32_MAX)
            wait = INT32_MAX;
        if (wait != 0 && poll(&pfd, 1, wait < 0 ? -1 : (int)wait) > 0 &&
            read(co->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
            kb_glog_error("group timer thread: read: %s", strerror(errno));
    }
    return NULL;
}

/* ---- deferred requests ---------------------------------------------------------------------- */

/* kb_req_cancel_fn: the client went away before its JoinGroup / SyncGroup was answered. The
 * member stays (as in Kafka); its result will be dropped. */
static void kb_gco_cancel(void *opaque, kb_req_t *req)
{
    kb_gwait_t *w = opaque;
    kb_gco_t *co = w->co;
    (void)req;
    pthread_mutex_lock(&co->mu);
    if (w->detached) {
        free(w);
    } else {
        w->req = NULL;
        kb_resp_free(w->held);
        w->held = NULL;
    }
    pthread_mutex_unlock(&co->mu);
}

kb_gwait_t *kb_gco_wait_new(kb_gco_t *co, kb_req_t *req, bool *gone)
{
    kb_gwait_t *w = calloc(1, sizeof(*w));
    kb_reqctx_t *ctx = kb_req_ctx(req);
    *gone = false;
    if (!w)
        return NULL;
    w->co = co;
    w->req = req;
    w->api_key = ctx->api_key;
    w->version = ctx->api_version;
    w->in_handler = true;
    if (kb_req_defer(req, kb_gco_cancel, w) != 0) {
        *gone = true;
        free(w);
        return NULL;
    }
    return w;
}

static void kb_gco_wait_send(kb_gwait_t *w, kb_resp_t *resp)
{
    int rc;
    if (!w->req) {
        kb_resp_free(resp);
        free(w);
        return;
    }
    rc = resp ? kb_req_complete(w->req, resp) : kb_req_complete_close(w->req);
    if (rc == KB_E_CANCELLED) {
        w->detached = true; /* the cancel callback is running or due; it frees w */
        return;
    }
    free(w);
}

void kb_gco_wait_complete(kb_gwait_t *w, kb_resp_t *resp)
{
    if (w->in_handler) {
        /* The handler still reads its request (the arena): send when it ends. */
        w->held = resp;
        w->completed = true;
        return;
    }
    kb_gco_wait_send(w, resp);
}

void kb_gco_wait_release(kb_gwait_t *w)
{
    w->in_handler = false;
    if (w->completed)
        kb_gco_wait_send(w, w->held);
}

/* ---- handler helpers ------------------------------------------------------------------------ */

int kb_gh_decode(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, void *msg)
{
    kp_msg_init(desc, msg);
    if (kp_msg_decode(desc, &ctx->body, ctx->arena, msg, ctx->api_version) != 0) {
        kb_glog_debug("%s: malformed %s v%d: %s", ctx->peer, desc->name, ctx->api_version,
                      ctx->body.errstr ? ctx->body.errstr : "?");
        return -1;
    }
    return 0;
}

kb_resp_t *kb_gh_encode(const kp_msg_desc_t *desc, const void *msg, int16_t version)
{
    kp_writer_t wr;
    kb_resp_t *resp;
    kp_writer_init(&wr);
    if (kp_msg_encode(desc, &wr, msg, version) != 0) {
        kb_glog_error("cannot encode %s v%d: %s", desc->name, version, kp_err_str(wr.err));
        kp_writer_free(&wr);
        return NULL;
    }
    resp = kb_resp_from_writer(&wr);
    kp_writer_free(&wr);
    return resp;
}

kb_api_result_t kb_gh_respond(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, const void *msg,
                              kb_resp_t **respp)
{
    *respp = kb_gh_encode(desc, msg, ctx->api_version);
    return *respp ? KB_API_RESPOND : KB_API_CLOSE;
}

char *kb_gh_cstr(kp_arena_t *ar, kp_str_t s)
{
    char *p;
    if (s.len < 0 || !(p = kp_arena_alloc(ar, (size_t)s.len + 1)))
        return NULL;
    if (s.len)
        memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = '\0';
    return p;
}

kp_str_t kb_gh_view(const char *s)
{
    return s ? (kp_str_t){s, (int32_t)strlen(s)} : KP_STR_NULL;
}

const char *kb_gh_client_host(kp_arena_t *ar, const char *peer)
{
    const char *colon = peer ? strrchr(peer, ':') : NULL;
    size_t n = colon ? (size_t)(colon - peer) : (peer ? strlen(peer) : 0);
    char *p;
    if (n >= 2 && peer[0] == '[' && peer[n - 1] == ']') {
        peer++;
        n -= 2;
    }
    if (!(p = kp_arena_alloc(ar, n + 2)))
        return "";
    p[0] = '/';
    memcpy(p + 1, peer ? peer : "", n);
    p[n + 1] = '\0';
    return p;
}

void kb_gh_endpoint(kb_gco_t *co, const char *listener, const char **host, int32_t *port)
{
    const kb_config_t *cfg = co->cfg;
    const kb_config_listener_t *a = NULL;
    for (size_t i = 0; i < cfg->adv_cnt; i++) {
        if (listener && !strcasecmp(cfg->adv[i].name, listener)) {
            a = &cfg->adv[i];
            break;
        }
    }
    if (!a && cfg->adv_cnt)
        a = &cfg->adv[0];
    if (!a) {
        *host = "localhost";
        *port = 9092;
        return;
    }
    *host = a->host[0] ? a->host : "localhost";
    *port = a->port;
    if (*port == 0 && co->svc->srv) {
        int p = kb_server_listener_port(co->svc->srv, a->name);
        if (p < 0 && listener)
            p = kb_server_listener_port(co->svc->srv, listener);
        *port = p;
    }
}

int kb_gh_register(kb_gco_t *co, int16_t key, int16_t min, int16_t max, kb_api_handler_fn *fn,
                   unsigned flags)
{
    const kp_api_info_t *info = kp_api_lookup(key);
    int rc;
    if (!co->reg)
        return 0;
    if (!info)
        return KB_E_NOT_FOUND;
    if (min < info->min_ver)
        min = info->min_ver;
    if (max > info->max_ver)
        max = info->max_ver;
    rc = kb_api_register(co->reg, key, min, max, fn, co, flags);
    if (rc == 0 && co->nregistered < sizeof(co->registered) / sizeof(co->registered[0]))
        co->registered[co->nregistered++] = key;
    return rc;
}

int16_t kb_gh_topic(kb_gco_t *co, kp_arena_t *ar, kp_str_t name, const kp_uuid_t *id,
                    int32_t partition, const char **name_out, kp_uuid_t *id_out)
{
    kb_topic_info_t ti;
    int rc;
    *name_out = NULL;
    memset(id_out, 0, sizeof(*id_out));
    if (id && !kb_uuid_is_zero(id)) {
        if (kb_meta_topic_by_id(co->meta, id, &ti) != 0)
            return KP_ERR_UNKNOWN_TOPIC_ID;
    } else {
        char *n = kb_gh_cstr(ar, name);
        if (!n || !n[0])
            return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
        rc = kb_meta_topic_by_name(co->meta, n, &ti);
        if (rc != 0)
            return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    }
    if (partition < 0 || partition >= ti.partitions)
        return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    *name_out = kb_gh_cstr(ar, kb_gh_view(ti.name));
    *id_out = ti.id;
    return *name_out ? 0 : KP_ERR_UNKNOWN_SERVER_ERROR;
}

/* ---- transactions --------------------------------------------------------------------------- */

void kb_gco_txn_offset_commit(kb_gco_t *co, kb_gcommit_in_t *in, int64_t pid, int16_t pepoch)
{
    if (kb_gco_ensure_topic(co) != 0) {
        for (size_t i = 0; i < in->nparts; i++)
            if (!in->parts[i].err)
                in->parts[i].err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
        return;
    }
    int16_t err;
    pthread_mutex_lock(&co->mu);
    err = kb_gco_owner_err(co, in->group_id);
    if (!err)
        kb_gsm_txn_commit(co->gsm, in, pid, pepoch);
    pthread_mutex_unlock(&co->mu);
    if (!err)
        err = kb_gco_await_writes(co);
    for (size_t i = 0; err && i < in->nparts; i++)
        if (!in->parts[i].err)
            in->parts[i].err = err;
}

int16_t kb_gco_txn_marker(kb_gco_t *co, int32_t partition, int64_t pid, int16_t pepoch,
                          int32_t coord_epoch, bool commit)
{
    int16_t err;
    pthread_mutex_lock(&co->mu);
    err = kb_gsm_txn_marker(co->gsm, partition, pid, pepoch, coord_epoch, commit);
    pthread_mutex_unlock(&co->mu);
    if (!err)
        err = kb_gco_await_writes(co);
    else
        kb_gco_forget_writes();
    if (err)
        kb_glog_warn("%s marker of producer %" PRId64 " on %s-%d: error %d",
                     commit ? "COMMIT" : "ABORT", pid, KB_TOPIC_CONSUMER_OFFSETS, partition, err);
    return err;
}

void kb_gco_txn_completed(kb_gco_t *co, int32_t partition, int64_t pid, bool commit)
{
    pthread_mutex_lock(&co->mu);
    kb_gsm_txn_complete(co->gsm, partition, pid, commit);
    pthread_mutex_unlock(&co->mu);
}

void kb_gco_stats(kb_gco_t *co, kb_gsm_stats_t *st)
{
    pthread_mutex_lock(&co->mu);
    kb_gsm_stats(co->gsm, st);
    pthread_mutex_unlock(&co->mu);
}

#ifdef KB_GROUP_TXN_HOOK
static int16_t kb_gco_hook_commit(void *opaque, kb_reqctx_t *ctx, int32_t offsets_partition,
                                  const kp_TxnOffsetCommitRequest_t *rq,
                                  kp_TxnOffsetCommitResponse_t *resp)
{
    return kb_gh_txn_offset_commit(opaque, ctx, offsets_partition, rq, resp);
}

static int16_t kb_gco_hook_marker(void *opaque, int32_t partition, int64_t pid, int16_t epoch,
                                  int32_t coord_epoch, bool commit)
{
    return kb_gco_txn_marker(opaque, partition, pid, epoch, coord_epoch, commit);
}

static const kb_txn_group_hook_t kb_gco_txn_hook = {
    .txn_offset_commit = kb_gco_hook_commit,
    .txn_marker = kb_gco_hook_marker,
};
#endif

/* ---- metrics ------------------------------------------------------------------------------------
 */

/* Runs at every scrape under the registry mutex: it must not block, so it reads the state
 * machine only when the coordinator mutex is free and repeats its last figures otherwise. */
static void kb_gco_collect(void *opaque, kb_metrics_emit_t *em)
{
    kb_gco_t *co = opaque;
    static const char *const states[] = {"Empty", "PreparingRebalance", "CompletingRebalance",
                                         "Stable"};
    if (pthread_mutex_trylock(&co->mu) == 0) {
        if (co->gsm)
            kb_gsm_stats(co->gsm, &co->last);
        pthread_mutex_unlock(&co->mu);
    }
    for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
        const char *const labels[] = {"state", states[i], NULL};
        kb_metrics_emit(em, "kbroker_groups", "Classic consumer groups by state", KB_METRIC_GAUGE,
                        labels, (double)co->last.by_state[i]);
    }
    kb_metrics_emit(em, "kbroker_group_members", "Members of all classic groups", KB_METRIC_GAUGE,
                    NULL, (double)co->last.members);
    kb_metrics_emit(em, "kbroker_group_committed_offsets",
                    "Committed offsets held by the group coordinator", KB_METRIC_GAUGE, NULL,
                    (double)co->last.offsets);
    kb_metrics_emit(em, "kbroker_group_rebalances_total",
                    "Join phases completed (generations started) since the broker started",
                    KB_METRIC_COUNTER, NULL, (double)co->last.rebalances);
}

/* ---- life cycle ------------------------------------------------------------------------------ */

kb_gco_t *kb_gco_new(const kb_gco_opts_t *o, char *errstr, size_t errstr_size)
{
    kb_gco_t *co = calloc(1, sizeof(*co));
    const kb_config_t *cfg = o->svc->cfg;
    kb_gsm_conf_t gc = {
        .min_session_ms = cfg->group_min_session_timeout_ms,
        .max_session_ms = cfg->group_max_session_timeout_ms,
        .initial_delay_ms = cfg->group_initial_rebalance_delay_ms,
        .max_size = cfg->group_max_size,
        .retention_ms = (int64_t)cfg->offsets_retention_minutes * 60000,
        .retention_check_ms = KB_GSM_RETENTION_CHECK_MS,
        .new_member_join_timeout_ms = KB_GSM_NEW_MEMBER_TIMEOUT,
        .metadata_max_bytes = KB_GSM_METADATA_MAX_BYTES,
        .partitions = cfg->offsets_topic_num_partitions,
    };
    int (*regs[])(kb_gco_t *) = {kb_gh_admin_register, kb_gh_join_register, kb_gh_offsets_register};

    if (!co) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    co->magic = KB_GCO_MAGIC;
    co->cfg = cfg;
    co->kb = o->kb;
    co->svc = o->svc;
    co->meta = o->svc->meta;
    co->reg = o->reg;
    co->efd = -1;
    pthread_mutex_init(&co->mu, NULL);
    pthread_mutex_init(&co->topic_mu, NULL);
    pthread_mutex_init(&co->q_mu, NULL);
    pthread_mutex_init(&co->load_mu, NULL);
    co->gsm = kb_gsm_new(&gc, &kb_gco_ops, co);
    co->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!co->gsm || co->efd < 0) {
        snprintf(errstr, errstr_size, "cannot create the group coordinator: %s",
                 co->gsm ? strerror(errno) : "out of memory");
        goto fail;
    }
    /* Partitions this node leads now are loaded before the handlers are registered. */
    kb_gco_reconcile(co);
    co->metrics = o->metrics;
    if (co->metrics) {
        kb_gsm_stats(co->gsm, &co->last);
        co->collector = kb_metrics_collector_add(co->metrics, kb_gco_collect, co);
    }
    co->ml = kb_meta_listen(co->meta, kb_gco_meta_event, co, false);
    if (!co->ml) {
        snprintf(errstr, errstr_size, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < sizeof(regs) / sizeof(regs[0]); i++) {
        int rc = regs[i](co);
        if (rc != 0) {
            snprintf(errstr, errstr_size, "cannot register the group APIs: %s", kb_err_str(rc));
            goto fail;
        }
    }
#ifdef KB_GROUP_TXN_HOOK
    if (co->kb) {
        if (kb_txn_group_hook_install(co->kb, &kb_gco_txn_hook, co) != 0) {
            snprintf(errstr, errstr_size, "cannot install the transaction hook");
            goto fail;
        }
        co->hook_installed = true;
    }
#endif
    return co;
fail:
    kb_gco_stop(co);
    kb_gco_free(co);
    return NULL;
}

int kb_gco_start(kb_gco_t *co)
{
    if (co->thr_started)
        return 0;
    if (pthread_create(&co->thr, NULL, kb_gco_thread, co) != 0)
        return KB_E_NOMEM;
    co->thr_started = true;
    return 0;
}

void kb_gco_stop(kb_gco_t *co)
{
    if (!co)
        return;
#ifdef KB_GROUP_TXN_HOOK
    if (co->hook_installed) {
        kb_txn_group_hook_remove(co->kb);
        co->hook_installed = false;
    }
#endif
    if (co->thr_started) {
        pthread_mutex_lock(&co->mu);
        co->stop = true;
        pthread_mutex_unlock(&co->mu);
        kb_gco_wake(co);
        pthread_join(co->thr, NULL);
        co->thr_started = false;
    }
    if (co->ml) {
        kb_meta_unlisten(co->meta, co->ml);
        co->ml = NULL;
    }
    if (co->collector) {
        kb_metrics_collector_remove(co->metrics, co->collector);
        co->collector = NULL;
    }
}

void kb_gco_free(kb_gco_t *co)
{
    if (!co)
        return;
    kb_gco_stop(co);
    for (size_t i = 0; i < co->nregistered; i++)
        kb_api_unregister(co->reg, co->registered[i]);
    co->nregistered = 0;
    pthread_mutex_lock(&co->mu);
    kb_gco_drain_deleted(co);
    kb_gsm_free(co->gsm);
    co->gsm = NULL;
    pthread_mutex_unlock(&co->mu);
    if (co->efd >= 0)
        close(co->efd);
    pthread_mutex_destroy(&co->mu);
    pthread_mutex_destroy(&co->topic_mu);
    pthread_mutex_destroy(&co->q_mu);
    pthread_mutex_destroy(&co->load_mu);
    free(co->own);
    co->magic = 0;
    free(co);
}

/* ---- the kbroker module ------------------------------------------------------------------------
 */

static pthread_mutex_t kb_gco_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const kb_broker_t *kb;
    kb_gco_t *co;
} kb_gco_reg[16];

kb_gco_t *kb_gco_of(const kb_broker_t *kb)
{
    kb_gco_t *co = NULL;
    pthread_mutex_lock(&kb_gco_reg_mu);
    for (size_t i = 0; i < sizeof(kb_gco_reg) / sizeof(kb_gco_reg[0]); i++)
        if (kb_gco_reg[i].kb == kb)
            co = kb_gco_reg[i].co;
    pthread_mutex_unlock(&kb_gco_reg_mu);
    return co;
}

static void kb_gco_reg_set(const kb_broker_t *kb, kb_gco_t *co)
{
    pthread_mutex_lock(&kb_gco_reg_mu);
    for (size_t i = 0; i < sizeof(kb_gco_reg) / sizeof(kb_gco_reg[0]); i++) {
        if (co ? kb_gco_reg[i].kb == NULL : kb_gco_reg[i].kb == kb) {
            kb_gco_reg[i].kb = co ? kb : NULL;
            kb_gco_reg[i].co = co;
            break;
        }
    }
    pthread_mutex_unlock(&kb_gco_reg_mu);
}

static int kb_module_group_init(kb_broker_t *kb, void **statep, char *errstr, size_t errstr_size)
{
    kb_apisvc_t *svc = kb_apisvc_of(kb);
    kb_gco_opts_t o = {.svc = svc, .reg = kb->reg, .kb = kb, .metrics = kb->metrics};
    kb_gco_t *co;
    if (!svc) {
        snprintf(errstr, errstr_size, "the group coordinator needs the api module");
        return -1;
    }
    if (!(co = kb_gco_new(&o, errstr, errstr_size)))
        return -1;
    kb_gco_reg_set(kb, co);
    *statep = co;
    return 0;
}

static int kb_module_group_start(kb_broker_t *kb, void *state)
{
    (void)kb;
    return kb_gco_start(state);
}

static void kb_module_group_stop(kb_broker_t *kb, void *state)
{
    (void)kb;
    kb_gco_stop(state);
}

static void kb_module_group_fini(kb_broker_t *kb, void *state)
{
    kb_gco_reg_set(kb, NULL);
    kb_gco_free(state);
}

const kb_module_t kb_module_group = {
    .name = "group",
    .init = kb_module_group_init,
    .start = kb_module_group_start,
    .stop = kb_module_group_stop,
    .fini = kb_module_group_fini,
};
