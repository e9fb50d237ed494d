/*
 * kb_kbx_part.c -- kbx partition handles and log operations on kbroker's local partitions
 * (broker/api kb_part.h over the storage engine's kb_log.h), and the two asynchronous cluster
 * operations wait_isr_truncation (the followers' fetches as evidence, below) and
 * leader_epoch_bump (through the controller on a broker-only node: kb_kbx_ctrl.c).
 *
 * A handle holds (topic id, partition, bound leader epoch) and no reference on the partition:
 * a reference held for long would stall DeleteTopics (kb_part_delete waits for the last one).
 * Each call looks the partition up (kb_meta_part_by_id, a read lock and a reference for the
 * length of the call) and fails with KBX_ERR_FENCED when the leader epoch moved, or
 * KBX_ERR_NOT_FOUND when the topic is gone. wait_isr_truncation needs the leader role
 * (KBX_ERR_NOT_LEADER); the other calls work on any local replica, as before clusters. The epoch
 * check and the operation are not atomic: on a single broker only the plugin itself bumps epochs
 * (leader_epoch_bump), so it cannot race with its own appends unless it does both at once.
 *
 * In a cluster leader_epoch_bump commits on the node that holds the metadata log: the
 * controller (broker,controller) raises the epoch and every broker's listeners follow. A
 * broker-only node asks the controller (BumpLeaderEpochs, kb_kbx_ctrl.c) and completes once it
 * applied the new epoch itself (docs/broker.md "The plugin host").
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kb_err.h"
#include "kb_host_int.h"
#include "kp_errcode.h"

struct kbx_partition {
    uint32_t magic;
    kbx_host_t *host;
    kp_uuid_t id;
    int32_t partition;
    int32_t epoch;
};

static int32_t kb_kbx_sto_err(int rc)
{
    switch (rc) {
    case KB_STO_OK:
        return KBX_OK;
    case KB_STO_CORRUPT_MESSAGE:
    case KB_STO_RECORD_TOO_LARGE:
        return KBX_ERR_CORRUPT;
    case KB_STO_UNSUPPORTED_FORMAT:
    case KB_STO_INVALID:
    case KB_STO_INVALID_RECORD:
        return KBX_ERR_INVALID;
    case KB_STO_NON_MONOTONIC:
    case KB_STO_OFFSET_OUT_OF_RANGE:
        return KBX_ERR_OFFSET;
    case KB_STO_NOMEM:
        return KBX_ERR_NOMEM;
    case KB_STO_CLOSED:
        return KBX_ERR_NOT_FOUND;
    default:
        return KBX_ERR_IO;
    }
}

static int32_t kb_kbx_meta_rc(int rc)
{
    return rc == KB_META_OFFLINE ? KBX_ERR_IO : KBX_ERR_NOT_FOUND;
}

/* The partition behind @p p with a reference (release with kb_part_release), epoch-checked. */
static int32_t kb_kbx_part_get(kbx_host_t *host, kbx_partition_t *p, const char *fn,
                               kb_part_t **out)
{
    kb_part_t *part;
    int rc;

    *out = NULL;
    if (!kb_host_from(host, fn) || !kb_host_check(host, p, KB_PART_MAGIC, "partition"))
        return KBX_ERR_INVALID;
    rc = kb_meta_part_by_id(host->h->meta, &p->id, p->partition, &part);
    if (rc != KB_META_OK)
        return kb_kbx_meta_rc(rc);
    if (atomic_load(&part->deleted) || !part->log) {
        kb_part_release(part);
        return KBX_ERR_NOT_FOUND;
    }
    if (kb_part_epoch(part) != p->epoch) {
        kb_part_release(part);
        return KBX_ERR_FENCED;
    }
    *out = part;
    return KBX_OK;
}

static int32_t kb_kbx_partition_acquire(kbx_host_t *host, const kbx_uuid_t *topic_id,
                                        int32_t partition, int32_t leader_epoch,
                                        kbx_partition_t **out)
{
    struct kbx_partition *p;
    kb_part_t *part;
    kp_uuid_t id;
    int32_t epoch;
    int rc;

    if (!kb_host_from(host, "partition_acquire") || !topic_id || !out)
        return KBX_ERR_INVALID;
    memcpy(id.b, topic_id->bytes, 16);
    rc = kb_meta_part_by_id(host->h->meta, &id, partition, &part);
    if (rc != KB_META_OK)
        return kb_kbx_meta_rc(rc);
    epoch = kb_part_epoch(part);
    kb_part_release(part);
    if (leader_epoch != -1 && leader_epoch != epoch)
        return KBX_ERR_FENCED;
    p = calloc(1, sizeof(*p));
    if (!p)
        return KBX_ERR_NOMEM;
    p->magic = KB_PART_MAGIC;
    p->host = host;
    p->id = id;
    p->partition = partition;
    p->epoch = epoch;
    atomic_fetch_add(&host->n_parts, 1);
    *out = p;
    return KBX_OK;
}

static void kb_kbx_partition_release(kbx_host_t *host, kbx_partition_t *p)
{
    if (!p || !kb_host_check(host, p, KB_PART_MAGIC, "partition"))
        return;
    p->magic = KB_DEAD_MAGIC;
    atomic_fetch_sub(&host->n_parts, 1);
    free(p);
}

static int32_t kb_kbx_log_offsets(kbx_host_t *host, kbx_partition_t *p, kbx_log_offsets_t *out)
{
    kbx_log_offsets_t full;
    kb_part_t *part;
    int32_t rc;

    if (!out || out->struct_size < sizeof(uint32_t))
        return KBX_ERR_INVALID;
    if ((rc = kb_kbx_part_get(host, p, "log_offsets", &part)) != KBX_OK)
        return rc;
    memset(&full, 0, sizeof(full));
    full.struct_size = out->struct_size;
    full.leader_epoch = kb_part_epoch(part);
    full.log_start_offset = kb_log_start_offset(part->log);
    full.last_stable_offset = kb_log_lso(part->log);
    full.high_watermark = kb_log_hw(part->log);
    full.log_end_offset = kb_log_leo(part->log);
    full.latest_cached_epoch = kb_log_latest_epoch(part->log);
    full.last_pid_reset_offset = kb_log_last_pid_reset(part->log);
    kb_part_release(part);
    memcpy(out, &full, out->struct_size < sizeof(full) ? out->struct_size : sizeof(full));
    return KBX_OK;
}

static void kb_kbx_append_result(kbx_append_result_t *out, const kb_append_info_t *info,
                                 int64_t leo)
{
    kbx_append_result_t full;
    if (!out || out->struct_size < sizeof(uint32_t))
        return;
    memset(&full, 0, sizeof(full));
    full.struct_size = out->struct_size;
    full.batch_count = info->batch_count;
    full.first_offset = info->first_offset;
    full.last_offset = info->last_offset;
    full.log_end_offset = leo;
    memcpy(out, &full, out->struct_size < sizeof(full) ? out->struct_size : sizeof(full));
}

static int32_t kb_kbx_log_append(kbx_host_t *host, kbx_partition_t *p, const uint8_t *batches,
                                 size_t len, kbx_append_result_t *out)
{
    kb_append_info_t info;
    kb_part_t *part;
    int32_t rc;

    if (!batches || !len)
        return KBX_ERR_INVALID;
    if ((rc = kb_kbx_part_get(host, p, "log_append", &part)) != KBX_OK)
        return rc;
    memset(&info, 0, sizeof(info));
    /* kb_part_append_raw answers KB_E_STATE in this mode, a value the storage error space
     * also uses (KB_STO_INVALID_TIMESTAMP): test the mode first. */
    if (kb_part_write_mode(part) == KB_WRITE_WRITABLE) {
        kb_part_release(part);
        return KBX_ERR_STATE;
    }
    /* Stored byte for byte: framing, magic 2, CRC, increasing offsets >= LEO are checked by
     * the storage engine; epoch cache, producer state and transaction index follow. */
    rc = kb_kbx_sto_err(kb_part_append_raw(part, batches, len, &info));
    if (rc == KBX_OK)
        kb_kbx_append_result(out, &info, kb_log_leo(part->log));
    kb_part_release(part);
    return rc;
}

static int32_t kb_kbx_log_append_control(kbx_host_t *host, kbx_partition_t *p,
                                         const kbx_control_batch_t *batch, kbx_append_result_t *out)
{
    kbx_control_batch_t c;
    kb_append_info_t info;
    kb_part_t *part;
    int32_t rc;

    if (!batch)
        return KBX_ERR_INVALID;
    kbx_ops_copy(&c, sizeof(c), batch);
    if (c.control_type != KBX_CONTROL_ABORT && c.control_type != KBX_CONTROL_COMMIT &&
        c.control_type != KBX_CONTROL_MIRROR_PID_RESET)
        return KBX_ERR_INVALID;
    if (c.control_type != KBX_CONTROL_MIRROR_PID_RESET && c.producer_id < 0)
        return KBX_ERR_INVALID;
    if (c.control_type == KBX_CONTROL_MIRROR_PID_RESET) {
        c.producer_id = -1;
        c.producer_epoch = -1;
    }
    if ((rc = kb_kbx_part_get(host, p, "log_append_control", &part)) != KBX_OK)
        return rc;
    memset(&info, 0, sizeof(info));
    /* The storage engine stamps its own clock: timestamp_ms is not used (docs/abi.md). */
    rc =
        kb_kbx_sto_err(kb_part_append_control(part, c.control_type, c.producer_id, c.producer_epoch,
                                              c.coordinator_epoch, c.leader_epoch, &info));
    if (rc == KBX_OK)
        kb_kbx_append_result(out, &info, kb_log_leo(part->log));
    kb_part_release(part);
    return rc;
}

static int32_t kb_kbx_log_truncate(kbx_host_t *host, kbx_partition_t *p, int64_t offset)
{
    kb_part_t *part;
    int32_t rc;

    int64_t leo;

    if ((rc = kb_kbx_part_get(host, p, "log_truncate", &part)) != KBX_OK)
        return rc;
    leo = kb_log_leo(part->log);
    if (offset < kb_log_start_offset(part->log))
        rc = KBX_ERR_OFFSET;
    else if (offset < leo)
        rc = kb_kbx_sto_err(kb_log_truncate_to(part->log, offset));
    /* One line per truncation that cut something (a leader's log losing its tail is rare and
     * worth finding: the mirror tests count these lines). */
    if (rc == KBX_OK && offset < leo)
        kb_hlog(KB_HLOG_INFO,
                "plugin %s truncated %s-%" PRId32 " (leader epoch %" PRId32 ") to offset %" PRId64
                " (log end was %" PRId64 ")",
                host->name, part->topic, part->index, p->epoch, kb_log_leo(part->log), leo);
    kb_part_release(part);
    return rc;
}

/* kbx 1.1: the open transactions from the producer state (as DescribeProducers reads it); fn
 * runs after the partition reference is dropped, with no lock held. */
static int32_t kb_kbx_log_open_txns(kbx_host_t *host, kbx_partition_t *p, kbx_open_txn_fn fn,
                                    void *arg)
{
    kb_producer_info_t *ps = NULL;
    kbx_open_txn_t t;
    kb_part_t *part;
    size_t cnt = 0, i;
    int32_t rc, n = 0;

    if (!fn)
        return KBX_ERR_INVALID;
    if ((rc = kb_kbx_part_get(host, p, "log_open_txns", &part)) != KBX_OK)
        return rc;
    rc = kb_log_producers(part->log, &ps, &cnt) != 0 ? KBX_ERR_NOMEM : KBX_OK;
    kb_part_release(part);
    if (rc != KBX_OK)
        return rc;
    for (i = 0; i < cnt; i++) {
        if (ps[i].txn_first_offset < 0)
            continue;
        memset(&t, 0, sizeof(t));
        t.struct_size = sizeof(t);
        t.producer_id = ps[i].producer_id;
        t.producer_epoch = ps[i].producer_epoch;
        t.first_offset = ps[i].txn_first_offset;
        t.coordinator_epoch = ps[i].coordinator_epoch;
        fn(arg, &t);
        n++;
    }
    free(ps);
    return n;
}

static int32_t kb_kbx_log_epoch_end_offset(kbx_host_t *host, kbx_partition_t *p, int32_t epoch,
                                           int32_t *out_epoch, int64_t *out_end_offset)
{
    kb_part_t *part;
    int32_t rc;

    if (!out_epoch || !out_end_offset)
        return KBX_ERR_INVALID;
    if ((rc = kb_kbx_part_get(host, p, "log_epoch_end_offset", &part)) != KBX_OK)
        return rc;
    *out_epoch = -1;
    *out_end_offset = -1;
    if (epoch >= 0)
        kb_log_epoch_end_offset(part->log, epoch, out_epoch, out_end_offset);
    kb_part_release(part);
    return KBX_OK;
}

static int32_t kb_kbx_log_set_start(kbx_host_t *host, kbx_partition_t *p, int64_t offset)
{
    kb_part_t *part;
    int64_t start, leo;
    int32_t rc;

    if ((rc = kb_kbx_part_get(host, p, "log_set_start", &part)) != KBX_OK)
        return rc;
    start = kb_log_start_offset(part->log);
    leo = kb_log_leo(part->log);
    if (offset < 0) {
        rc = KBX_ERR_OFFSET;
    } else if (leo == start) {
        /* An empty log moves anywhere: it restarts empty at offset (the new LEO). */
        if (offset != leo)
            rc = kb_kbx_sto_err(kb_log_truncate_fully(part->log, offset));
    } else if (offset > kb_log_hw(part->log)) {
        rc = KBX_ERR_OFFSET;
    } else if (offset > start) {
        rc = kb_kbx_sto_err(kb_log_set_start_offset(part->log, offset));
    }
    kb_part_release(part);
    return rc;
}

static int32_t kb_kbx_partition_set_write_mode(kbx_host_t *host, kbx_partition_t *p, int32_t mode)
{
    kb_part_t *part;
    int32_t rc;

    if (mode != KBX_WRITE_PENDING && mode != KBX_WRITE_READ_ONLY && mode != KBX_WRITE_WRITABLE)
        return KBX_ERR_INVALID;
    if ((rc = kb_kbx_part_get(host, p, "partition_set_write_mode", &part)) != KBX_OK)
        return rc;
    _Static_assert(KBX_WRITE_PENDING == KB_WRITE_PENDING &&
                       KBX_WRITE_READ_ONLY == KB_WRITE_READ_ONLY &&
                       KBX_WRITE_WRITABLE == KB_WRITE_WRITABLE,
                   "kbx and kb_part write modes agree");
    kb_part_set_write_mode(part, mode);
    kb_part_release(part);
    return KBX_OK;
}

/* ---- asynchronous operations ----------------------------------------------------------------- */

/*
 * wait_isr_truncation in a cluster. The evidence that follower F holds nothing at or above
 * @p offset that differs from the leader's log: after the wait started (the plugin calls it
 * after its log_truncate(offset)), the leader recorded TWO fetches of F (kb_part_replica_fetched,
 * counted in kb_replica_t.fetches). A fetch is recorded only when the leader validated its
 * FetchOffset / LastFetchedEpoch against its own log and found no divergence (a diverging
 * follower is answered DivergingEpoch and truncates first, unrecorded), and only after the
 * read that answers it. F sends one fetch at a time, so the second recorded fetch was sent after
 * the first one's recording, i.e. after the truncation: its position was checked against the
 * truncated log, and F had applied (and, where needed, truncated after) everything it was sent
 * before. The rule rests on Kafka's: a leader never rewrites offsets inside one leader epoch,
 * so the plugin must not append at or above @p offset before the wait completes unless it
 * bumped the epoch. Members: the image's ISR, or every assigned replica with
 * KBX_ISR_WAIT_ALL_REPLICAS, re-read at each check (a follower dropped from the ISR is no
 * longer waited for); this node counts as done. Checks run on the host timer thread every
 * KB_ISRW_POLL_MS; the leader epoch moving ends the wait with KBX_ERR_FENCED, the partition
 * led elsewhere with KBX_ERR_NOT_LEADER, the deadline with KBX_ERR_TIMEOUT. A partition whose
 * replica set is this node alone completes at once.
 */
#define KB_ISRW_POLL_MS 20

typedef struct kb_isrw_s {
    kb_hev_t ev; /**< the completion */
    kbx_host_t *host;
    kp_uuid_t id;
    int32_t partition, epoch, self;
    bool all;
    int64_t deadline_ms; /**< -1: none */
    kbx_timer_t *timer;
    _Atomic bool armed, finished;
    int32_t status;
    size_t nbase;
    int32_t base_id[KB_META_MAX_REPLICAS];
    uint64_t base[KB_META_MAX_REPLICAS]; /**< fetches recorded when the wait started */
    kbx_done_fn done;
    void *arg;
} kb_isrw_t;

static void kb_isrw_complete(kb_hq_t *q, kb_hev_t *ev, bool run)
{
    kb_isrw_t *w = (kb_isrw_t *)ev;
    kbx_host_t *host = w->host;
    (void)q;
    host->h->table.timer_cancel(host, w->timer);
    if (run && !atomic_load(&host->dead))
        w->done(w->arg, w->status);
    atomic_fetch_sub(&host->n_ops, 1);
    free(w);
}

/* The fetches of replica @p id the wait must see beyond: its count at the start (0 when it was
 * not a replica then). */
static uint64_t *kb_isrw_base(kb_isrw_t *w, int32_t id)
{
    for (size_t i = 0; i < w->nbase; i++)
        if (w->base_id[i] == id)
            return &w->base[i];
    if (w->nbase == KB_META_MAX_REPLICAS)
        return NULL;
    w->base_id[w->nbase] = id;
    w->base[w->nbase] = 0;
    return &w->base[w->nbase++];
}

/* 1: every member showed the evidence; 0: not yet; else a KBX_ERR_*. (timer thread) */
static int32_t kb_isrw_check(kb_isrw_t *w)
{
    kb_meta_part_state_t st;
    kb_part_t *part;
    int32_t rc = 1, n;
    const int32_t *ids;

    if (kb_meta_part_by_id(w->host->h->meta, &w->id, w->partition, &part) != KB_META_OK)
        return KBX_ERR_NOT_FOUND;
    if (kb_part_epoch(part) != w->epoch)
        rc = KBX_ERR_FENCED;
    else if (kb_part_role(part) != KB_PART_LEADER)
        rc = KBX_ERR_NOT_LEADER;
    else if (kb_meta_part_state(w->host->h->meta, &w->id, w->partition, &st) != KB_META_OK)
        rc = KBX_ERR_NOT_FOUND;
    if (rc == 1) {
        n = w->all ? st.nreplicas : st.nisr;
        ids = w->all ? st.replicas : st.isr;
        for (int32_t i = 0; i < n && rc == 1; i++) {
            kb_replica_t r;
            uint64_t *base;
            if (ids[i] == w->self)
                continue;
            if (kb_part_replica_get(part, ids[i], &r) != 0 || !(base = kb_isrw_base(w, ids[i]))) {
                rc = 0;
                continue;
            }
            if (r.fetches < *base)
                *base = r.fetches; /* the replica entry was rebuilt: count again */
            if (r.fetches - *base < 2)
                rc = 0;
        }
    }
    kb_part_release(part);
    return rc;
}

static void kb_isrw_tick(void *arg)
{
    kb_isrw_t *w = arg;
    int32_t rc;
    if (!atomic_load(&w->armed) || atomic_load(&w->finished))
        return;
    rc = kb_isrw_check(w);
    if (rc == 0 && w->deadline_ms >= 0 && kb_host_now_ms() >= w->deadline_ms)
        rc = KBX_ERR_TIMEOUT;
    if (rc == 0)
        return;
    w->status = rc == 1 ? KBX_OK : rc;
    atomic_store(&w->finished, true);
    kb_hq_push(&w->host->h->ev, &w->ev); /* the completion cancels this timer */
}

static int32_t kb_kbx_wait_isr_truncation(kbx_host_t *host, kbx_partition_t *p, int64_t offset,
                                          uint32_t flags, int64_t timeout_ms, kbx_done_fn done,
                                          void *arg)
{
    kb_meta_part_state_t st;
    kb_isrw_t *w;
    kb_part_t *part;
    int32_t rc;

    if (!done || offset < 0 || (flags & ~KBX_ISR_WAIT_ALL_REPLICAS))
        return KBX_ERR_INVALID;
    if ((rc = kb_kbx_part_get(host, p, "wait_isr_truncation", &part)) != KBX_OK)
        return rc;
    if (kb_part_role(part) != KB_PART_LEADER) {
        kb_part_release(part);
        return KBX_ERR_NOT_LEADER;
    }
    if (kb_meta_part_state(host->h->meta, &p->id, p->partition, &st) != KB_META_OK ||
        st.nreplicas <= 1) {
        kb_part_release(part);
        /* The replica set is this broker alone: its log is the leader's log. The completion
         * still comes from the event thread, never from inside this call. */
        return kb_host_post_done(host, done, arg, KBX_OK);
    }
    w = calloc(1, sizeof(*w));
    if (!w) {
        kb_part_release(part);
        return KBX_ERR_NOMEM;
    }
    w->ev.fn = kb_isrw_complete;
    w->ev.owner = host;
    atomic_init(&w->ev.ready, true);
    w->host = host;
    w->id = p->id;
    w->partition = p->partition;
    w->epoch = p->epoch;
    w->self = kb_meta_node_id(host->h->meta);
    w->all = (flags & KBX_ISR_WAIT_ALL_REPLICAS) != 0;
    w->deadline_ms = timeout_ms < 0 ? -1 : kb_host_now_ms() + timeout_ms;
    w->done = done;
    w->arg = arg;
    for (int32_t i = 0; i < st.nreplicas; i++) {
        kb_replica_t r;
        uint64_t *base = kb_isrw_base(w, st.replicas[i]);
        if (base && st.replicas[i] != w->self && kb_part_replica_get(part, st.replicas[i], &r) == 0)
            *base = r.fetches;
    }
    kb_part_release(part);
    atomic_fetch_add(&host->n_ops, 1);
    rc = host->h->table.timer_start(host, KB_ISRW_POLL_MS, KB_ISRW_POLL_MS, kb_isrw_tick, w,
                                    &w->timer);
    if (rc != KBX_OK) {
        atomic_fetch_sub(&host->n_ops, 1);
        free(w);
        return rc;
    }
    atomic_store(&w->armed, true); /* the tick ignores itself until w->timer is set */
    return KBX_OK;
}

typedef struct kb_bump_ev_s {
    kb_hev_t ev;
    kp_uuid_t id;
    int32_t partition;
    int32_t min_epoch;
    int64_t deadline_ms; /**< -1: none */
    kbx_done_fn done;
    void *arg;
} kb_bump_ev_t;

static void kb_kbx_bump_run(kb_hq_t *q, kb_hev_t *ev, bool run)
{
    kb_bump_ev_t *b = (kb_bump_ev_t *)ev;
    kbx_host_t *host = ev->owner;
    int32_t status = KBX_OK, ne = -1;
    (void)q;

    if (!run || atomic_load(&host->dead)) {
        status = KBX_ERR_SHUTDOWN;
    } else if (b->deadline_ms >= 0 && kb_host_now_ms() > b->deadline_ms) {
        status = KBX_ERR_TIMEOUT;
    } else {
        int16_t kerr = kb_meta_bump_epoch(host->h->meta, &b->id, b->partition, b->min_epoch, &ne);
        if (kerr == KP_ERR_UNKNOWN_TOPIC_ID || kerr == KP_ERR_UNKNOWN_TOPIC_OR_PARTITION) {
            status = KBX_ERR_NOT_FOUND;
        } else if (kerr == KP_ERR_NOT_CONTROLLER) {
            /* A broker-only node: the controller commits it (kb_kbx_ctrl.c); the waiter takes
             * over the completion and the operation count. */
            status = kb_hctrl_bump(host, &b->id, b->partition, b->min_epoch, b->deadline_ms,
                                   b->done, b->arg);
            if (status == KBX_OK) {
                free(b);
                return;
            }
            if (status == KBX_ERR_UNSUPPORTED)
                kb_hlog(KB_HLOG_WARN,
                        "plugin %s: leader_epoch_bump of partition %d refused: this broker-only "
                        "node has no channel to the controller",
                        host->name, (int)b->partition);
        } else if (kerr != 0) {
            status = KBX_ERR_IO;
        }
    }
    if (status == KBX_OK) {
        kb_part_t *part;
        bool mirror = false;
        /* A new leader epoch is a new leadership term: a mirror partition's client writes go
         * back to pending until the plugin decides again (as the fake host does). */
        if (kb_meta_part_by_id(host->h->meta, &b->id, b->partition, &part) == KB_META_OK) {
            kb_part_conf(part, NULL, &mirror);
            if (mirror)
                kb_part_set_write_mode(part, KB_WRITE_PENDING);
            kb_part_release(part);
        }
        kb_hlog(KB_HLOG_INFO, "plugin %s raised the leader epoch of partition %d to %d", host->name,
                (int)b->partition, (int)ne);
        /* After the leadership event this change queued: the plugin sees the new epoch from
         * its listener no later than the completion. */
        if (kb_host_post_done(host, b->done, b->arg, KBX_OK) == KBX_OK) {
            atomic_fetch_sub(&host->n_ops, 1);
            free(b);
            return;
        }
    }
    if (run && !atomic_load(&host->dead))
        b->done(b->arg, status);
    atomic_fetch_sub(&host->n_ops, 1);
    free(b);
}

static int32_t kb_kbx_leader_epoch_bump(kbx_host_t *host, kbx_partition_t *p, int32_t min_epoch,
                                        int64_t timeout_ms, kbx_done_fn done, void *arg)
{
    kb_bump_ev_t *b;
    kb_part_t *part;
    int32_t rc;

    if (!done)
        return KBX_ERR_INVALID;
    if ((rc = kb_kbx_part_get(host, p, "leader_epoch_bump", &part)) != KBX_OK)
        return rc;
    kb_part_release(part);
    b = calloc(1, sizeof(*b));
    if (!b)
        return KBX_ERR_NOMEM;
    b->ev.fn = kb_kbx_bump_run;
    b->ev.owner = host;
    atomic_init(&b->ev.ready, true);
    b->id = p->id;
    b->partition = p->partition;
    b->min_epoch = min_epoch;
    b->deadline_ms = timeout_ms < 0 ? -1 : kb_host_now_ms() + timeout_ms;
    b->done = done;
    b->arg = arg;
    atomic_fetch_add(&host->n_ops, 1);
    kb_hq_push(&host->h->ev, &b->ev);
    return KBX_OK;
}

void kb_kbx_part_fill(kbx_api_t *t)
{
    t->partition_acquire = kb_kbx_partition_acquire;
    t->partition_release = kb_kbx_partition_release;
    t->log_offsets = kb_kbx_log_offsets;
    t->log_append = kb_kbx_log_append;
    t->log_append_control = kb_kbx_log_append_control;
    t->log_truncate = kb_kbx_log_truncate;
    t->log_epoch_end_offset = kb_kbx_log_epoch_end_offset;
    t->log_open_txns = kb_kbx_log_open_txns;
    t->log_set_start = kb_kbx_log_set_start;
    t->partition_set_write_mode = kb_kbx_partition_set_write_mode;
    t->wait_isr_truncation = kb_kbx_wait_isr_truncation;
    t->leader_epoch_bump = kb_kbx_leader_epoch_bump;
}
