/*
 * km_mpart.h - the per-partition mirror state machine (the decision part of KIP-1279's
 * MirrorMetadataManager; docs/plugin.md "Partition state machine").
 *
 * One km_mpart_mgr_t holds one machine per mirror partition this broker leads. It is owned by
 * the coordinator loop: every function here runs on that loop (@thread coord) unless it says
 * otherwise. The machine reaches the other modules through km_mpart_ops_t (state store,
 * fetcher, peer LME lookup, posting to the loop), and the host's partition log directly through
 * kbx (partition handles bound to the leader epoch, truncation, epoch cache, ISR wait, epoch
 * bump, control batches, write mode).
 *
 * Every transition is persisted first (state epoch + 1, the current leader epoch) and its side
 * effects run only after the write committed. Asynchronous work carries a token (a generation
 * number, unique in the manager); a completion whose token is no longer current is ignored, so
 * a leadership change, a new leader epoch or a newer transition abandons a step without damage
 * and the state's action is run again from its start. Every action is idempotent.
 */
#ifndef KM_MPART_H
#define KM_MPART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coord/km_coord.h"
#include "util/km_err.h"
#include "util/km_types.h"

/* Partition states (int8), equal to the persisted KP_PSTATE_* (proto/state/kp_state.h) and the
 * provisional wire values (proto/schema/provisional.kps MIRROR_STATE_*). */
#define KM_MPART_UNKNOWN       (-1)
#define KM_MPART_PREPARING     0
#define KM_MPART_EPOCH_FENCING 1
#define KM_MPART_MIRRORING     3
#define KM_MPART_PAUSING       4
#define KM_MPART_PAUSED        5
#define KM_MPART_STOPPING      6
#define KM_MPART_STOPPED       7
#define KM_MPART_FAILED        8

/* Desired state of a topic, from the suffix of its mirror.name config. */
#define KM_MPART_WANT_RUNNING 0 /**< mirror.name=<mirror> */
#define KM_MPART_WANT_PAUSED  1 /**< mirror.name=<mirror>.paused */
#define KM_MPART_WANT_STOPPED 2 /**< mirror.name=<mirror>.stopped (or .removed) */

#define KM_MPART_NAME_MAX  249 /**< mirror and topic names follow topic-name rules */
#define KM_MPART_ERROR_MAX 256 /**< error messages are cut to this (with the NUL) */
#define KM_MPART_CID_MAX   64  /**< cluster ids */

/** Headroom of an EPOCH_FENCING bump: the new leader epoch is at least the batch's + this, so
 *  the next few source leader changes do not each need a bump (the prototype's increment). */
#define KM_MPART_EPOCH_HEADROOM 10

/**
 * The leader epoch a failback raises the local one to before it fetches (PREPARING with an LME,
 * design M27): above every epoch the peer used, that is above its current leader epoch of the
 * partition (peer_epoch, learned with the lookup) and above the LME epoch, so the peer's
 * batches need no EPOCH_FENCING. A peer epoch that is unknown (-1: the peer's Metadata had
 * none) falls back to LME epoch + 1 + KM_MPART_EPOCH_HEADROOM. -1 without an LME (no bump).
 */
int32_t km_mpart_failback_epoch(int32_t lme_epoch, int32_t peer_epoch);

typedef struct km_mpart_mgr km_mpart_mgr_t;

/** Which partition (all borrowed). */
typedef struct km_mpart_id {
    const char *mirror;
    const char *topic;
    kbx_uuid_t topic_id;
    int32_t partition;
} km_mpart_id_t;

/** The persisted partition state (the plain form of kp_state_partition_t; the state module
 *  converts). */
typedef struct km_mpart_rec {
    int8_t state;          /**< KM_MPART_* */
    int8_t previous_state; /**< FAILED: the state it failed in; otherwise the state before */
    int16_t retry_attempt; /**< failures since the last successful fetch */
    bool non_retryable;
    int32_t state_epoch;  /**< + 1 on every write */
    int32_t leader_epoch; /**< the writer's leader epoch */
    int32_t lme_epoch;    /**< last mirrored epoch recorded at STOPPING, -1: none */
    int64_t lme_offset;   /**< the log end offset recorded with it, -1: none */
    int64_t update_time_ms;
    char error[KM_MPART_ERROR_MAX];           /**< "" unless a failure is recorded */
    char source_cluster_id[KM_MPART_CID_MAX]; /**< the cluster mirrored from, "" unknown */
} km_mpart_rec_t;

/** Fetcher status for describe (filled by ops->fetch_status). */
typedef struct km_mpart_fstatus {
    int64_t source_hw;     /**< source high watermark, -1 unknown */
    int64_t fetch_offset;  /**< next offset to fetch */
    int64_t lag;           /**< source_hw - local log end offset, -1 unknown */
    int32_t retries;       /**< consecutive failed fetches */
    int64_t last_fetch_ms; /**< wall clock of the last successful fetch, -1 never */
    char error[KM_MPART_ERROR_MAX];
} km_mpart_fstatus_t;

/**
 * How the machine reaches the other modules. Asynchronous ops return KM_OK when started and
 * complete later, on the coordinator loop, through the km_mpart_*_done() function named in
 * their comment, passing back token. A synchronous error return means "not started": the
 * machine retries after the retry delay. ctx is ops_ctx of km_mpart_mgr_new().
 */
typedef struct km_mpart_ops {
    /** Read the persisted state of id. Completes with km_mpart_state_loaded(). */
    km_err_t (*state_read)(void *ctx, const km_mpart_id_t *id, uint64_t token);
    /** Persist rec (the PARTITION_STATE record, fenced by rec->leader_epoch and by
     *  rec->state_epoch - 1, the state epoch the machine last saw), plus the LAST_MIRROR_EPOCH
     *  record (rec->lme_*) when write_lme. A store may count state epochs only on state
     *  changes: it reports the resulting epoch. Completes with km_mpart_state_written(). */
    km_err_t (*state_write)(void *ctx, const km_mpart_id_t *id, const km_mpart_rec_t *rec,
                            bool write_lme, uint64_t token);
    /** Start fetching into the local log at fetch_offset (its log end) with leader_epoch. A
     *  second call for the same partition moves it there. Synchronous. */
    km_err_t (*fetch_add)(void *ctx, const km_mpart_id_t *id, int32_t leader_epoch,
                          int64_t fetch_offset);
    /** Stop fetching and wait until no append of this partition is in flight (also when it
     *  was not fetching). Completes with km_mpart_fetch_removed(). */
    km_err_t (*fetch_remove)(void *ctx, const km_mpart_id_t *id, uint64_t token);
    /** Fill *out for describe; false if the partition is not fetched. May be NULL. */
    bool (*fetch_status)(void *ctx, const km_mpart_id_t *id, km_mpart_fstatus_t *out);
    /** Ask the peer (the source cluster) for the last mirrored epoch it recorded when it stopped
     *  mirroring this partition from us (DescribeMirrors with the tagged lookup fields).
     *  Completes with km_mpart_lme_done(): epoch -1 for an explicit "none" (with the peer's
     *  current leader epoch of the partition when it is known); a peer without the
     *  mirror APIs is "none" too (one-way mirroring, the binding logs it). */
    km_err_t (*lme_lookup)(void *ctx, const km_mpart_id_t *id, uint64_t token);
    /** Run run(cm, arg) on the coordinator loop, or drop(cm, arg) if it never will
     *  (km_coord_post's contract). Called from host threads (kbx completions). */
    km_err_t (*post)(void *ctx, km_coord_fn run, km_coord_fn drop, void *arg);
    /** TEST ONLY: a crash point was reached (see km_mpart_opts_t.crash_point). NULL: the
     *  host's fatal hook is called, which stops the broker as a crash would. After it returns
     *  the partition's machine is frozen until the manager is freed. */
    void (*crash)(void *ctx, const km_mpart_id_t *id, const char *point);
} km_mpart_ops_t;

/** Manager settings. */
typedef struct km_mpart_opts {
    int64_t retry_initial_ms;   /**< mirror.failed.retry.initial.backoff.ms */
    int64_t retry_max_ms;       /**< mirror.failed.retry.max.backoff.ms */
    int32_t retry_max_attempts; /**< mirror.failed.retry.max.attempts (0: no automatic retry) */
    int64_t step_retry_ms; /**< delay before a failed step (lookup, write, ISR wait) is retried */
    int64_t op_timeout_ms; /**< timeout of ISR waits and epoch bumps; a lost completion is
                                given up after twice this */
    uint64_t seed;         /**< jitter seed (0: from the clock) */
    /** TEST ONLY: name of a crash point ("stopping.drained", "stopping.lme_recorded",
     *  "stopping.epoch_bumped", "stopping.txns_aborted", "stopping.pid_reset",
     *  "stopping.persisted", "stopping.hw_passed"); NULL or "" for none. The plugin fills it
     *  from the environment variable KMIRROR_TEST_CRASH_POINT. Copied. */
    const char *crash_point;
} km_mpart_opts_t;

/** Defaults for every member (the config table's defaults; no crash point). @thread any */
void km_mpart_opts_default(km_mpart_opts_t *opts);

/** Defaults, the mirror.failed.retry.* broker keys of cm->conf, and the test-only crash point
 *  from the environment (KMIRROR_TEST_CRASH_POINT; the string stays owned by the environment).
 *  @thread host main (init) */
void km_mpart_opts_from_plugin(km_plugin_t *cm, km_mpart_opts_t *opts);

/**
 * Create a manager. ops and ops_ctx must outlive it. NULL when out of memory.
 * @thread coord (or init)
 */
km_mpart_mgr_t *km_mpart_mgr_new(km_plugin_t *cm, const km_mpart_ops_t *ops, void *ops_ctx,
                                 const km_mpart_opts_t *opts);

/**
 * Free every machine (partition handles released; no op is called). kbx completions still in
 * flight must have been delivered or dropped first (km_mpart_mgr_inflight() == 0).
 * @thread coord (or fini)
 */
void km_mpart_mgr_free(km_mpart_mgr_t *mgr);

/** kbx asynchronous operations started and not yet delivered or dropped. @thread any */
uint32_t km_mpart_mgr_inflight(const km_mpart_mgr_t *mgr);

/** Number of machines. */
size_t km_mpart_mgr_count(const km_mpart_mgr_t *mgr);

/** Index of a state in km_mpart_mgr_state_counts' array: state + 1 (UNKNOWN is 0). */
#define KM_MPART_NSTATES 10

/** counts[state + 1] = machines in that state (as persisted), for the per-state gauges. */
void km_mpart_mgr_state_counts(const km_mpart_mgr_t *mgr, uint32_t counts[KM_MPART_NSTATES]);

/* ---- inputs ------------------------------------------------------------------------------ */

/** What the coordinator knows of a partition this broker leads. */
typedef struct km_mpart_lead {
    km_mpart_id_t id;
    int32_t leader_epoch;
    int32_t desired;               /**< KM_MPART_WANT_* */
    bool unclean_election;         /**< topic's mirror.support.unclean.leader.election */
    const char *source_cluster_id; /**< the mirror's source cluster id, NULL/"" unknown */
} km_mpart_lead_t;

/**
 * This broker leads the partition at lead->leader_epoch. A new partition gets a machine in
 * UNKNOWN and its state is read; for a known one a new epoch abandons the running step, takes
 * a new handle and runs the state's action again; the same epoch only updates the inputs.
 * @return KM_OK, KM_ERR_NOMEM, KM_ERR_INVALID (bad id, or the handle could not be acquired:
 *         logged, the partition is retried on the next km_mpart_lead)
 */
km_err_t km_mpart_lead(km_mpart_mgr_t *mgr, const km_mpart_lead_t *lead);

/** This broker no longer leads the partition: abandon every step, stop its fetcher (not waited
 *  for), release the handle and free the machine. No-op if unknown. */
void km_mpart_resign(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition);

/** The topic's desired state changed (mirror.name suffix). No-op if unknown. */
void km_mpart_set_desired(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                          int32_t desired);

/** Completion of ops->state_read: err KM_OK with rec (borrowed) or NULL when nothing is
 *  stored; another err: read again after the retry delay. */
void km_mpart_state_loaded(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                           uint64_t token, km_err_t err, const km_mpart_rec_t *rec);

/** Completion of ops->state_write: state_epoch is the stored state epoch after the write
 *  (-1: the one the machine asked for). On an error (fenced included) the state is read again
 *  after the retry delay and the decision is made anew. */
void km_mpart_state_written(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                            uint64_t token, km_err_t err, int32_t state_epoch);

/** Completion of ops->fetch_remove. */
void km_mpart_fetch_removed(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                            uint64_t token);

/** Completion of ops->lme_lookup: err KM_OK with (epoch, offset), epoch -1 meaning "none", and
 *  the peer's current leader epoch of the partition (-1: unknown). */
void km_mpart_lme_done(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                       uint64_t token, km_err_t err, int32_t lme_epoch, int64_t lme_offset,
                       int32_t peer_epoch);

/** Completion of ops->lme_lookup when the peer still mirrors the partition from us (a
 *  mirroring loop): FAILED (retryable, back to PREPARING) with message, nothing truncated. */
void km_mpart_lme_loop(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                       uint64_t token, const char *message);

/* Fetcher events (km_mpart_fetch_event). */
#define KM_MPART_FEV_PROGRESS       1 /**< batches appended: clears recorded failures */
#define KM_MPART_FEV_EPOCH_EXCEEDED 2 /**< a batch's epoch (ev.epoch) > the local leader epoch */
#define KM_MPART_FEV_DIVERGED       3 /**< the log diverged from the source at ev.offset */
#define KM_MPART_FEV_TRANSIENT      4 /**< retriable source error (ev.message); keep mirroring */
#define KM_MPART_FEV_FATAL                                                                         \
    5 /**< the partition cannot be mirrored (ev.message at                                         \
           ev.offset); ev.retryable picks the FAILED class */

typedef struct km_mpart_fevent {
    int32_t kind;        /**< KM_MPART_FEV_* */
    int32_t epoch;       /**< EPOCH_EXCEEDED */
    int64_t offset;      /**< DIVERGED: truncate here; FATAL: where it happened (-1 unknown) */
    bool retryable;      /**< FATAL */
    const char *message; /**< TRANSIENT, FATAL (borrowed) */
} km_mpart_fevent_t;

/** An event of the partition's fetcher (ignored unless MIRRORING). */
void km_mpart_fetch_event(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                          const km_mpart_fevent_t *ev);

/** Run what is due: retries, FAILED backoff, the STOPPED high-watermark wait, lost
 *  completions. Called on every loop tick (and by tests after moving the clock). */
void km_mpart_mgr_tick(km_mpart_mgr_t *mgr);

/**
 * Operator action (the admin RPC layer, ResumeMirrorTopics --recover): send a FAILED partition
 * back with its retry count and error cleared: to MIRRORING (from its log end) when it failed
 * in a mirroring state, else to PREPARING.
 * @return KM_OK; KM_ERR_INVALID (unknown partition, or not FAILED: errbuf says why)
 */
km_err_t km_mpart_operator_retry(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                                 char *errbuf, size_t errbuf_size);

/* ---- describe ---------------------------------------------------------------------------- */

typedef struct km_mpart_desc {
    int8_t state;           /**< KM_MPART_* */
    const char *state_name; /**< "MIRRORING", ... (static) */
    const char *step;       /**< the running step ("lookup", "stopping.abort", ...), static */
    bool loaded;            /**< the persisted state has been read */
    km_mpart_rec_t rec;     /**< as last persisted (or loaded) */
    int32_t leader_epoch;   /**< the handle's leader epoch */
    int64_t next_retry_ms;  /**< FAILED: monotonic ms of the next automatic retry, -1 none */
    char transient_error[KM_MPART_ERROR_MAX]; /**< last retriable fetch error, "" none */
    int32_t transient_count;                  /**< retriable errors since the last progress */
    int64_t log_end_offset;                   /**< local, -1 unknown */
    int64_t high_watermark;                   /**< local, -1 unknown */
    bool fetching;                            /**< fetch holds the fetcher's status */
    km_mpart_fstatus_t fetch;
} km_mpart_desc_t;

/** State name of a KM_MPART_* value, "UNKNOWN" for anything else. @thread any */
const char *km_mpart_state_name(int state);

/** True if the table allows from -> to (same state always; FAILED from any state). @thread any */
bool km_mpart_transition_valid(int from, int to);

/** Describe one partition. @return KM_OK, KM_ERR_INVALID (not led here) */
km_err_t km_mpart_describe(km_mpart_mgr_t *mgr, const kbx_uuid_t *topic_id, int32_t partition,
                           km_mpart_desc_t *out);

/** Call fn for every partition (id and desc borrowed for the call), in no particular order. */
void km_mpart_foreach(km_mpart_mgr_t *mgr,
                      void (*fn)(void *arg, const km_mpart_id_t *id, const km_mpart_desc_t *desc),
                      void *arg);

#endif /* KM_MPART_H */
