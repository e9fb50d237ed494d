/*
 * kb_part.h -- the local partitions of this broker: each one is a storage log plus what the
 * broker keeps beside it (leader epoch, high watermark policy, client write mode, watchers),
 * and the partition manager that owns the storage engine's log manager, its maintenance and
 * cleaner threads.
 *
 * Single broker: this broker leads every partition; the high watermark follows the log end
 * offset right after each append (acks=all is satisfied by the leader alone), so produce
 * requests never wait. The leader epoch is kept in the metadata (kb_meta) and copied here.
 *
 * Write modes (kbx.h KBX_WRITE_*; ARCHITECTURE §4 read-only row) apply to client writes
 * (Produce, DeleteRecords, and later AddPartitionsToTxn/WriteTxnMarkers):
 *   KB_WRITE_WRITABLE   accepted (the default of topics without mirror.name);
 *   KB_WRITE_READ_ONLY  refused with READ_ONLY_TOPIC (not retriable);
 *   KB_WRITE_PENDING    refused with NOT_ENOUGH_REPLICAS and the message
 *                       "mirror partition is being stopped; retry" (retriable); the default of
 *                       every partition of a topic with mirror.name until the plugin decides.
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

typedef struct kb_partmgr_s kb_partmgr_t;
typedef struct kb_part_s kb_part_t;

/** Called after appends, high-watermark moves and truncations of a partition, on the writer's
 *  thread, with no lock held. Must not block and must not call writer functions of the log. */
typedef void(kb_part_watch_fn)(void *opaque, kb_part_t *part, int64_t leo, int64_t hw);

typedef struct kb_part_watcher_s kb_part_watcher_t;

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

/**
 * May a client write to @p part now? 0, or a Kafka error code (READ_ONLY_TOPIC,
 * NOT_ENOUGH_REPLICAS for pending) with a static message in @p msg.
 */
int16_t kb_part_write_check(kb_part_t *part, const char **msg);

/** After a leader append: move the HW to the LEO (single broker). @locks part mu, log writer */
void kb_part_advance_hw(kb_part_t *part);

/**
 * The mirror append path (kbx log_append): batches stored byte for byte (kb_log_append_raw),
 * refused (KB_E_STATE) in KB_WRITE_WRITABLE; the HW follows. 0 or a negative kb_sto_err_t /
 * KB_E_STATE.
 */
int kb_part_append_raw(kb_part_t *part, const uint8_t *buf, size_t len, kb_append_info_t *info);

/** Control batch at the log end (kbx log_append_control), any write mode; HW follows. */
int kb_part_append_control(kb_part_t *part, int16_t type, int64_t pid, int16_t pepoch,
                           int32_t coord_epoch, int32_t leader_epoch, kb_append_info_t *info);

/** Add a watcher of appends (the plugin host's append notifications). NULL on no memory. */
kb_part_watcher_t *kb_part_watch_add(kb_part_t *part, kb_part_watch_fn *fn, void *opaque);
/** Remove it; on return @p fn is not running for it. */
void kb_part_watch_remove(kb_part_t *part, kb_part_watcher_t *w);

/* ---- topic id text form ------------------------------------------------------------------- */

/** Kafka's text form of a topic id (22 characters of URL-safe base64, no padding). */
void kb_uuid_str(const kp_uuid_t *id, char out[23]);
/** Parse it back. 0 or -1. */
int kb_uuid_parse(const char *s, kp_uuid_t *id);
bool kb_uuid_is_zero(const kp_uuid_t *id);
/** A random topic id as Kafka makes them (never zero, never starting with '-' in text). */
void kb_uuid_random(kp_uuid_t *id);

#endif /* KB_PART_H */
