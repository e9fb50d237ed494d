/*
 * kb_part.h -- the local partitions of this broker: each one is a storage log plus what the
 * broker keeps beside it (leader epoch, high watermark policy, client write mode, watchers),
 * and the partition manager that owns the storage engine's log manager, its maintenance and
 * cleaner threads.
 *
 * Replication (docs/design.md C4, docs/broker.md "Replication"): each partition has a role
 * (leader or follower), a leader epoch, a partition epoch, a replica list and an ISR, set by
 * kb_part_become_leader() / kb_part_become_follower() (Kafka's makeLeader / makeFollower). The
 * default after kb_part_open() is the single-broker state: leader, replicas = ISR = [this node],
 * so the high watermark follows the log end offset right after each append and acks=all never
 * waits. On a leader with followers the HW is the smallest LEO of the maximal ISR (followers'
 * LEOs come from their fetches, kb_part_replica_fetched()), never moving backwards; ISR changes
 * are proposed through the manager's kb_part_isr_fn and applied only when confirmed
 * (kb_part_set_isr()). A follower appends the leader's batches as they are
 * (kb_part_follower_append()) and truncates (kb_part_truncate_to()). The leader epoch is kept
 * in the metadata (kb_meta) and copied here.
 *
 * Write modes (kbx.h KBX_WRITE_*; ARCHITECTURE §4 read-only row) apply to client writes
 * (Produce, DeleteRecords, and later AddPartitionsToTxn/WriteTxnMarkers):
 *   KB_WRITE_WRITABLE   accepted (the default of topics without mirror.name);
 *   KB_WRITE_READ_ONLY  refused with READ_ONLY_TOPIC (not retriable);
 *   KB_WRITE_PENDING    refused with NOT_ENOUGH_REPLICAS and the message
 *                       "mirror partition is being stopped; retry" (retriable); the default of
 *                       every partition of a topic with mirror.name until the plugin decides.
 *                       On a broker where no mirror plugin runs (kb_partmgr_set_mirror_plugin)
 *                       nothing decides: a topic whose mirror.name is not stopped answers
 *                       READ_ONLY_TOPIC instead (not retriable); a stopped one stays retriable
 *                       (a leader with the plugin finishes STOPPING).
 * The mirror append path (kb_part_append_raw) is refused in KB_WRITE_WRITABLE.
 *
 * Lifetime: kb_part_t is reference counted. kb_meta holds one reference per partition; lookups
 * hand out more (release with kb_part_release). Deleting a partition detaches its waiters,
 * waits for the other references to go and then deletes the log.
 *
 * @thread any; @locks as stated per function
 */
#ifndef KB_PART_H
#define KB_PART_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_config.h"
#include "kb_dq.h"
#include "kb_logmgr.h" /* and through it the storage engine's kb_log.h (see kb_apilog.h) */
#include "kb_tconf.h"
#include "kp_types.h"

#define KB_WRITE_PENDING   0
#define KB_WRITE_READ_ONLY 1
#define KB_WRITE_WRITABLE  2

/** The retriable answer to client writes on a pending partition (documented in docs/broker.md). */
#define KB_PART_PENDING_MSG "mirror partition is being stopped; retry"
/** The answer on a pending partition of a mirrored topic where no mirror plugin runs. */
#define KB_PART_NOPLUGIN_MSG                                                                       \
    "topic is a read-only mirror topic (no mirror plugin is loaded on this broker)"

typedef struct kb_partmgr_s kb_partmgr_t;
typedef struct kb_part_s kb_part_t;

/** Called after appends, high-watermark moves and truncations of a partition, on the writer's
 *  thread, with no lock held. Must not block and must not call writer functions of the log. */
typedef void(kb_part_watch_fn)(void *opaque, kb_part_t *part, int64_t leo, int64_t hw);

typedef struct kb_part_watcher_s kb_part_watcher_t;

#define KB_PART_LEADER   0
#define KB_PART_FOLLOWER 1

/** One replica of a partition (under the partition's mu). On a leader, the followers' entries
 *  carry their fetch state (Kafka's Replica); times are monotonic milliseconds. */
typedef struct kb_replica_s {
    int32_t id;
    bool isr;                      /**< in the committed ISR */
    bool proposed;                 /**< in the ISR of the pending proposal */
    int64_t leo;                   /**< follower: offset of its last fetch, -1 unknown */
    int64_t log_start;             /**< follower: its log start offset, -1 unknown */
    int64_t last_fetch_ms;         /**< follower: time of its last fetch, 0 never */
    int64_t last_fetch_leader_leo; /**< leader's LEO at that fetch, -1 none */
    int64_t last_caught_up_ms;     /**< last time it had fetched up to the leader's LEO, 0 never */
    uint64_t fetches; /**< follower: fetches recorded (kb_part_replica_fetched) since the replica
                           entry exists; only grows (the kbx ISR-truncation wait counts them) */
} kb_replica_t;

/** Replication state of a partition (under its mu). */
typedef struct kb_part_repl_s {
    int32_t self;            /**< this node (node.id) */
    int32_t leader;          /**< leader node id, -1 unknown */
    int32_t partition_epoch; /**< the controller's partition epoch of replicas / ISR */
    int64_t epoch_start;     /**< leader: the LEO when its leader epoch began */
    bool pending;            /**< leader: an ISR proposal awaits kb_part_set_isr/_isr_abort */
    bool replicated;         /**< has had more than one replica since it was opened */
    int64_t open_hw;         /**< the HW the log opened with (replication-offset-checkpoint) */
    int64_t open_leo;        /**< the LEO at open */
    kb_replica_t *r;         /**< the replica list, in assignment order (malloc'd) */
    size_t n;
} kb_part_repl_t;

/**
 * ISR proposal of a leader (Kafka's AlterPartition): @p isr (with the leader) at the current
 * @p leader_epoch and @p partition_epoch. Called without locks, on the thread that noticed the
 * change (a Fetch handler: expansion; the partition manager's thread: shrink after
 * replica.lag.time.max.ms). @p isr is valid for the call only. The proposal stays pending (no
 * other proposal, HW over the maximal ISR) until kb_part_set_isr() or kb_part_isr_abort().
 * Must not block nor call kb_partmgr_set_isr_fn(); may call kb_part_set_isr() /
 * kb_part_isr_abort() itself.
 */
typedef void(kb_part_isr_fn)(void *opaque, kb_part_t *part, int32_t leader_epoch,
                             int32_t partition_epoch, const int32_t *isr, size_t n);

struct kb_part_s {
    _Atomic int refcnt;
    kb_partmgr_t *pm;
    char *topic;        /**< name (immutable) */
    kp_uuid_t topic_id; /**< (immutable) */
    int32_t index;
    kb_log_t *log;
    _Atomic int32_t leader_epoch;
    _Atomic int write_mode;
    _Atomic bool deleted;
    pthread_mutex_t mu;          /**< HW updates, conf, watchers */
    kb_tconf_extra_t conf;       /**< under mu */
    bool mirror;                 /**< topic has mirror.name (under mu) */
    bool internal;               /**< __consumer_offsets, __transaction_state (immutable) */
    kb_dq_watch_t watch;         /**< delayed operations waiting on this partition (dq lock) */
    kb_part_watcher_t *watchers; /**< under mu */
    _Atomic int role;            /**< KB_PART_LEADER / KB_PART_FOLLOWER (written under both) */
    pthread_rwlock_t role_rw;    /**< read: appends and truncations; write: role changes */
    kb_part_repl_t repl;         /**< under mu */
};

typedef struct kb_partmgr_opts_s {
    const kb_config_t *cfg; /**< broker config (log.dirs, cleaner, recovery threads) */
    kb_dq_t *dq;            /**< delayed operations to wake on appends */
    /** Per-partition config at open for partitions found on disk (from the metadata). */
    int (*config_for)(void *opaque, const char *topic, int32_t partition, kb_log_config_t *cfg);
    void *config_opaque;
    kb_clock_fn clock; /**< NULL: wall clock (tests pass a manual one) */
    void *clock_opaque;
    bool no_threads; /**< tests: no maintenance and cleaner threads */
} kb_partmgr_opts_t;

/** Open the log manager (recovering every log on disk). NULL with @p errstr on failure. */
kb_partmgr_t *kb_partmgr_open(const kb_partmgr_opts_t *o, char *errstr, size_t errstr_size);

/** Start the maintenance thread (retention, flush.ms, checkpoints every
 *  min(log.retention.check.interval.ms, 5 s)) and the cleaner threads. */
int kb_partmgr_start(kb_partmgr_t *pm);

/** Stop the threads, close every log cleanly. Every partition must have been released. */
void kb_partmgr_close(kb_partmgr_t *pm);

kb_logmgr_t *kb_partmgr_logmgr(kb_partmgr_t *pm);

/** Run the maintenance once (tests). */
void kb_partmgr_tick(kb_partmgr_t *pm);

/** Partition directories on disk that no open partition claims: "topic" + partition, via
 *  @p fn. Called by kb_meta after it attached every partition, to remove orphans. */
void kb_partmgr_foreach_unclaimed(kb_partmgr_t *pm,
                                  void (*fn)(void *o, const char *topic, int32_t partition),
                                  void *opaque);

/** Delete the log of an orphan partition directory. */
void kb_partmgr_delete_orphan(kb_partmgr_t *pm, const char *topic, int32_t partition);

/**
 * Open (@p create: create if missing) the local partition @p topic / @p index with topic id
 * @p id. An existing directory whose partition.metadata names another topic id is an older
 * incarnation of the name: it is deleted and a fresh log created. Sets the HW to the LEO and,
 * unless @p mirror, records @p epoch in the epoch cache at the LEO ("became leader").
 * @return a partition with one reference, or NULL with @p err.
 */
kb_part_t *kb_part_open(kb_partmgr_t *pm, const char *topic, const kp_uuid_t *id, int32_t index,
                        int32_t epoch, const kb_log_config_t *lc, const kb_tconf_extra_t *ex,
                        bool mirror, bool internal, char *err, size_t err_size);

void kb_part_ref(kb_part_t *part);
void kb_part_release(kb_part_t *part);

/** Delete the partition: mark it deleted, wake and detach its waiters, wait until the caller's
 *  reference is the last, delete the log, drop that reference. */
void kb_part_delete(kb_part_t *part);

/** Close (broker stop): drop the caller's reference after closing the log cleanly once it is
 *  the last one. */
void kb_part_close(kb_part_t *part);

/** New topic configuration (AlterConfigs) and mirror flag. A topic gaining mirror.name makes
 *  the partition PENDING; losing it makes it WRITABLE. */
void kb_part_reconfigure(kb_part_t *part, const kb_log_config_t *lc, const kb_tconf_extra_t *ex,
                         bool mirror);

void kb_part_conf(kb_part_t *part, kb_tconf_extra_t *ex, bool *mirror);

static inline int32_t kb_part_epoch(const kb_part_t *part)
{
    return atomic_load(&((kb_part_t *)part)->leader_epoch);
}

/** New leader epoch (from kb_meta after a bump). Unless the topic is mirrored, the epoch is
 *  entered in the epoch cache at the LEO. */
void kb_part_set_epoch(kb_part_t *part, int32_t epoch);

/** Client write mode. */
static inline int kb_part_write_mode(const kb_part_t *part)
{
    return atomic_load(&((kb_part_t *)part)->write_mode);
}
void kb_part_set_write_mode(kb_part_t *part, int mode);

/** Whether a plugin that sets the write modes of mirror partitions (the one enabled by
 *  mirror.enable) runs on this broker; false until the plugin host says so. @thread any */
void kb_partmgr_set_mirror_plugin(kb_partmgr_t *pm, bool loaded);
bool kb_partmgr_mirror_plugin(kb_partmgr_t *pm);

/**
 * The answer to a client write on @p part by its write mode alone (no leadership check): 0,
 * READ_ONLY_TOPIC, or NOT_ENOUGH_REPLICAS for pending, with a static message in @p msg; pending
 * without a mirror plugin and without a stopped mirror.name is READ_ONLY_TOPIC (see above).
 */
int16_t kb_part_write_refusal(kb_part_t *part, const char **msg);

/**
 * May a client write to @p part now? 0, or a Kafka error code (NOT_LEADER_OR_FOLLOWER on a
 * follower, else as kb_part_write_refusal) with a static message in @p msg.
 */
int16_t kb_part_write_check(kb_part_t *part, const char **msg);

/**
 * Leader append of producer or coordinator batches (kb_log_append_leader() at the current
 * leader epoch; @p buf is modified in place) under the role lock, so that a concurrent
 * become-follower cannot interleave with it: KB_E_STATE unless leader. The HW advances after a
 * successful append. 0, KB_E_STATE or a negative kb_sto_err_t (KB_STO_DUPLICATE_SEQUENCE with
 * the original offsets in @p info; KB_E_STATE has the value of a storage error too: check the
 * role). @locks role (read), log writer, part mu
 */
int kb_part_append_leader(kb_part_t *part, uint8_t *buf, size_t len, int origin, unsigned flags,
                          kb_append_info_t *info);

/** After a leader append: move the HW up to the smallest LEO of the maximal ISR (the LEO with
 *  the single-broker replica set); nothing on a follower. @locks part mu, log writer */
void kb_part_advance_hw(kb_part_t *part);

/**
 * The mirror append path (kbx log_append): batches stored byte for byte (kb_log_append_raw),
 * refused (KB_E_STATE) in KB_WRITE_WRITABLE and on a follower; the HW follows. 0 or a
 * negative kb_sto_err_t / KB_E_STATE.
 */
int kb_part_append_raw(kb_part_t *part, const uint8_t *buf, size_t len, kb_append_info_t *info);

/** Control batch at the log end (kbx log_append_control), any write mode, leader only
 *  (KB_E_STATE on a follower); HW follows. */
int kb_part_append_control(kb_part_t *part, int16_t type, int64_t pid, int16_t pepoch,
                           int32_t coord_epoch, int32_t leader_epoch, kb_append_info_t *info);

/* ---- replication (leader side) -------------------------------------------------------------- */

/** Install (or with NULL remove) the ISR proposal callback of every partition of @p pm. On
 *  return an earlier callback is not running. Without one no proposal is made (the ISR cannot
 *  change, as when the controller is unreachable). */
void kb_partmgr_set_isr_fn(kb_partmgr_t *pm, kb_part_isr_fn *fn, void *opaque);

/** The ISR lag check of every leader (run by the maintenance thread every
 *  replica.lag.time.max.ms / 2; tests may call it). */
void kb_partmgr_isr_check(kb_partmgr_t *pm);

static inline int kb_part_role(const kb_part_t *part)
{
    return atomic_load(&((kb_part_t *)part)->role);
}

/**
 * Become (or stay) leader at @p leader_epoch with @p replicas (must contain this node) and
 * @p isr (a subset containing this node), as Kafka's makeLeader: a newer leader epoch is entered
 * in the epoch cache at the LEO (not for mirror topics, whose cache holds the source's epochs),
 * starts the epoch at the LEO and resets the followers' fetch state; the same epoch only takes
 * the new replica set / ISR. A pending ISR proposal is dropped. Wakes the delayed operations.
 * The first call with more than one replica after kb_part_open(), if nothing was appended in
 * between, puts back the HW the log was opened with (replication-offset-checkpoint; kb_part_open
 * moved it to the LEO for the single-broker state), as Kafka starts a replica from it.
 * @return 0, KB_E_STATE (@p leader_epoch older than the current one, or the same with an older
 * @p partition_epoch), KB_E_INVALID (bad sets), KB_E_NOMEM. @locks part mu, log writer
 */
int kb_part_become_leader(kb_part_t *part, int32_t leader_epoch, int32_t partition_epoch,
                          const int32_t *replicas, size_t nreplicas, const int32_t *isr,
                          size_t nisr);

/**
 * Become a follower of @p leader (-1: none known) at @p leader_epoch, as Kafka's makeFollower:
 * client writes are refused with NOT_LEADER_OR_FOLLOWER, delayed produce requests waiting on
 * the partition answer NOT_LEADER_OR_FOLLOWER, replica fetches are refused; the log is left as
 * it is (the fetcher truncates). Same epoch rules and results as kb_part_become_leader();
 * @p replicas must contain this node, @p isr (may be NULL/0) is recorded as given.
 */
int kb_part_become_follower(kb_part_t *part, int32_t leader, int32_t leader_epoch,
                            int32_t partition_epoch, const int32_t *replicas, size_t nreplicas,
                            const int32_t *isr, size_t nisr);

/**
 * Confirm an ISR change (the AlterPartition answer): @p isr at @p partition_epoch (newer than
 * the current one) becomes the ISR, the pending proposal is cleared, the HW moves if it can and
 * waiting produce requests are re-checked. 0, KB_E_STATE (not leader, or @p partition_epoch not
 * newer), KB_E_INVALID (@p isr not a subset of the replicas containing this node), KB_E_NOMEM.
 */
int kb_part_set_isr(kb_part_t *part, int32_t partition_epoch, const int32_t *isr, size_t n);

/** Drop the pending ISR proposal (AlterPartition failed); a later check may propose again. */
void kb_part_isr_abort(kb_part_t *part);

/** The committed ISR: up to @p cap ids into @p out (may be NULL); returns the ISR size. */
size_t kb_part_isr(kb_part_t *part, int32_t *out, size_t cap);

/** Partition epoch, leader id and whether an ISR proposal is pending. */
void kb_part_repl_info(kb_part_t *part, int32_t *partition_epoch, int32_t *leader, bool *pending);

/** Fetch state of replica @p id as the leader sees it. 0 or KB_E_NOT_FOUND. */
int kb_part_replica_get(kb_part_t *part, int32_t id, kb_replica_t *out);

/**
 * May replica @p replica_id fetch from this partition? 0, or NOT_LEADER_OR_FOLLOWER (this node
 * is not the leader, or @p replica_id is not a follower in the replica list). Leader epochs are
 * checked by the caller (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH) first.
 */
int16_t kb_part_replica_check(kb_part_t *part, int32_t replica_id);

/**
 * Record a follower's fetch at @p fetch_offset (its LEO; the read succeeded) when the leader's
 * LEO was @p leader_leo, at @p now_ms (monotonic): Kafka's rule for the last caught-up time
 * (caught up if it fetched up to the leader's LEO at that fetch, or up to the LEO of its
 * previous fetch: then as of that fetch), an expansion proposal if it is out of the ISR and has
 * reached the HW and the start of the leader epoch, then the HW = the smallest LEO of the
 * maximal ISR if that is higher (waking delayed operations). @p log_start: the follower's log
 * start offset or -1. @locks part mu, log writer; calls the ISR callback without locks
 */
void kb_part_replica_fetched(kb_part_t *part, int32_t replica_id, int64_t fetch_offset,
                             int64_t log_start, int64_t leader_leo, int64_t now_ms);

/** The lag check of one leader at @p now_ms (monotonic) with @p max_lag_ms: ISR followers not
 *  at the LEO whose last caught-up time is older than @p max_lag_ms are proposed for removal. */
void kb_part_isr_check(kb_part_t *part, int64_t now_ms, int64_t max_lag_ms);

/* ---- replication (follower side) --------------------------------------------------------------
 */

/**
 * Follower append of batches fetched from the leader (@p len may be 0): stored byte for byte
 * (offsets, leader epochs, CRCs; the epoch cache and producer state follow the batches), then
 * HW = min(@p leader_hw, LEO) and the log start offset raised to @p leader_log_start (at most
 * to the HW; -1: unchanged). Only in the follower role (KB_E_STATE otherwise); write modes do
 * not apply. 0, KB_E_STATE or a negative kb_sto_err_t. @p info may be NULL.
 */
int kb_part_follower_append(kb_part_t *part, const uint8_t *buf, size_t len, int64_t leader_hw,
                            int64_t leader_log_start, kb_append_info_t *info);

/** What a follower's fetcher sends next: the leader (-1 unknown) and leader epoch
 *  (CurrentLeaderEpoch), the fetch offset (the LEO), the epoch of the last batch
 *  (LastFetchedEpoch, -1 none) and the log start offset. 0, or KB_E_STATE unless follower.
 *  Any output may be NULL. */
int kb_part_follower_position(kb_part_t *part, int32_t *leader, int32_t *leader_epoch,
                              int64_t *fetch_offset, int32_t *last_fetched_epoch,
                              int64_t *log_start);

/**
 * Follower truncation (DivergingEpoch / OffsetsForLeaderEpoch): remove everything at or above
 * @p offset (an offset inside a batch: from that batch's base offset, so that the LEO stays at a
 * batch boundary); the epoch cache, producer state, HW follow and delayed operations are woken.
 * Follower role only (KB_E_STATE). 0 or a negative kb_sto_err_t.
 */
int kb_part_truncate_to(kb_part_t *part, int64_t offset);

/**
 * Kafka's follower rule for a divergence found by the leader (Fetch v12+ DivergingEpoch, or an
 * OffsetsForLeaderEpoch answer): @p leader_epoch / @p leader_end_offset is the leader's largest
 * epoch not above the follower's last fetched epoch and where it ends. The follower looks up its
 * own end of that epoch: if it has the same epoch it truncates to the smaller end offset and is
 * done; if its largest epoch below it is another one it truncates to that epoch's end and is
 * not done (*@p done false: fetch again with the new last epoch); with no such epoch the leader's
 * end offset decides; an undefined end offset (-1) truncates to the HW. Never beyond the LEO.
 * *@p truncated_to gets the LEO after it. 0, KB_E_STATE (not a follower) or a kb_sto_err_t.
 */
int kb_part_follower_diverging(kb_part_t *part, int32_t leader_epoch, int64_t leader_end_offset,
                               int64_t *truncated_to, bool *done);

/** Follower whose LEO is below the leader's log start: restart the log empty at @p offset. */
int kb_part_truncate_fully(kb_part_t *part, int64_t offset);

/** Add a watcher of appends (the plugin host's append notifications). NULL on no memory. */
kb_part_watcher_t *kb_part_watch_add(kb_part_t *part, kb_part_watch_fn *fn, void *opaque);
/** Remove it; on return @p fn is not running for it. */
void kb_part_watch_remove(kb_part_t *part, kb_part_watcher_t *w);

/** What kb_part_await_hw() ended with. */
typedef enum kb_part_hw_wait_e {
    KB_PART_HW_REACHED = 0, /**< the HW reached the offset */
    KB_PART_HW_NOT_LED,     /**< no longer led at the epoch, or deleted */
    KB_PART_HW_TIMEOUT      /**< the timeout passed first */
} kb_part_hw_wait_t;

/**
 * acks=all for a coordinator's own write (group and transaction coordinators): wait until the
 * HW of @p part reaches @p end, the partition stops being led here at @p epoch (or is deleted),
 * or @p timeout_ms pass. Woken by HW moves (a watcher); role changes notify nobody, so the role
 * is re-checked at least every 100 ms.
 * @thread any but a partition's own writer (blocks)
 */
kb_part_hw_wait_t kb_part_await_hw(kb_part_t *part, int32_t epoch, int64_t end, int64_t timeout_ms);

/* ---- topic id text form ------------------------------------------------------------------- */

/** Kafka's text form of a topic id (22 characters of URL-safe base64, no padding). */
void kb_uuid_str(const kp_uuid_t *id, char out[23]);
/** Parse it back. 0 or -1. */
int kb_uuid_parse(const char *s, kp_uuid_t *id);
bool kb_uuid_is_zero(const kp_uuid_t *id);
/** A random topic id as Kafka makes them (never zero, never starting with '-' in text). */
void kb_uuid_random(kp_uuid_t *id);

#endif /* KB_PART_H */
