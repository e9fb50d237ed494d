/*
 * kb_gsm.h -- the classic consumer-group state machine of kbroker's group coordinator: groups,
 * members, rebalances, committed and transactional offsets, their records in __consumer_offsets
 * and their timers. It knows nothing of sockets, threads or the storage engine: the owner
 * (kb_gco.c) supplies clocks, an append function and the completion of deferred JoinGroup /
 * SyncGroup requests through kb_gsm_ops_t, and drives the timers. The unit tests drive it with a
 * manual clock and an in-memory log.
 *
 * Group states and transitions (Kafka's classic protocol):
 *
 *   Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
 *   CompletingRebalance --leader SyncGroup--> Stable
 *   Stable / CompletingRebalance --join with new metadata, leader rejoin, member gone-->
 *       PreparingRebalance
 *   PreparingRebalance --nobody left--> Empty (generation + 1)
 *   Empty --DeleteGroups, or offsets expired--> Dead (removed)
 *
 * Ownership: the gsm owns every group, member, offset and timer. Tokens of deferred requests are
 * the owner's; the gsm keeps them until it calls join_done / sync_done exactly once per token
 * (possibly from inside the call that handed it over). Strings passed in are copied.
 *
 * @thread any, one at a time: the owner serialises every call (kb_gco holds its mutex), and the
 *         ops are called under that serialisation.
 */
#ifndef KB_GSM_H
#define KB_GSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_ghash.h"
#include "kp_types.h"

typedef struct kb_gsm_s kb_gsm_t;
typedef struct kb_group_s kb_group_t;

/* ---- configuration and ops ----------------------------------------------------------------- */

typedef struct kb_gsm_conf_s {
    int32_t min_session_ms;             /**< group.min.session.timeout.ms */
    int32_t max_session_ms;             /**< group.max.session.timeout.ms */
    int32_t initial_delay_ms;           /**< group.initial.rebalance.delay.ms */
    int32_t max_size;                   /**< group.max.size */
    int64_t retention_ms;               /**< offsets.retention.minutes in ms */
    int64_t retention_check_ms;         /**< period of the offset expiry pass (Kafka: 600000) */
    int32_t new_member_join_timeout_ms; /**< Kafka: 300000 */
    int32_t metadata_max_bytes;         /**< offset.metadata.max.bytes (Kafka: 4096) */
    int32_t partitions;                 /**< partitions of __consumer_offsets */
} kb_gsm_conf_t;

/** Kafka's defaults for the keys kbroker has no configuration entry for. */
#define KB_GSM_RETENTION_CHECK_MS 600000
#define KB_GSM_NEW_MEMBER_TIMEOUT 300000
#define KB_GSM_METADATA_MAX_BYTES 4096

/** One member of a JoinGroup result (the leader gets them all). Borrowed. */
typedef struct kb_gjoin_member_s {
    const char *member_id;
    const char *instance_id; /**< NULL: dynamic */
    const uint8_t *meta;
    int32_t meta_len;
} kb_gjoin_member_t;

/** A JoinGroup outcome; every pointer is valid only during the join_done call. */
typedef struct kb_gjoin_res_s {
    int16_t err;
    int32_t generation;        /**< -1 on errors */
    const char *protocol_type; /**< NULL on errors */
    const char *protocol_name; /**< NULL on errors */
    const char *leader;        /**< "" when none */
    const char *member_id;     /**< the member's id (new ids with MEMBER_ID_REQUIRED too) */
    bool skip_assignment;
    size_t member_cnt;
    const kb_gjoin_member_t *members;
} kb_gjoin_res_t;

/** A SyncGroup outcome; pointers valid only during the sync_done call. */
typedef struct kb_gsync_res_s {
    int16_t err;
    const char *protocol_type; /**< NULL on errors */
    const char *protocol_name;
    const uint8_t *assignment;
    int32_t assignment_len; /**< 0 on errors */
} kb_gsync_res_t;

typedef struct kb_gsm_ops_s {
    /** Wall clock in ms (commit and state timestamps). */
    int64_t (*now_ms)(void *opaque);
    /** Monotonic clock in ms (timers). */
    int64_t (*mono_ms)(void *opaque);
    /** Append one record batch (built by the gsm, modifiable) to partition @p partition of
     *  __consumer_offsets; set *@p base_offset. Return 0 or a Kafka error code. */
    int16_t (*append)(void *opaque, int32_t partition, uint8_t *batch, size_t len,
                      int64_t *base_offset);
    /** Append a COMMIT (@p commit) or ABORT marker of producer @p pid. 0 or a Kafka error. */
    int16_t (*append_marker)(void *opaque, int32_t partition, int64_t pid, int16_t pepoch,
                             int32_t coord_epoch, bool commit, int64_t *offset);
    /** Deliver the result of a JoinGroup token (exactly once per token). */
    void (*join_done)(void *opaque, void *token, const kb_gjoin_res_t *res);
    /** Deliver the result of a SyncGroup token (exactly once per token). */
    void (*sync_done)(void *opaque, void *token, const kb_gsync_res_t *res);
    /** The earliest timer deadline may have moved earlier: wake the timer thread. */
    void (*timers_changed)(void *opaque);
} kb_gsm_ops_t;

/* ---- the in-memory model (read it under the owner's serialisation; never write it) --------- */

#define KB_GS_EMPTY      0
#define KB_GS_PREPARING  1 /**< PreparingRebalance */
#define KB_GS_COMPLETING 2 /**< CompletingRebalance */
#define KB_GS_STABLE     3
#define KB_GS_DEAD       4

/** Kafka's name of a state ("Empty", "PreparingRebalance", ...). */
const char *kb_gsm_state_name(int state);

typedef struct kb_gtimer_s {
    int64_t deadline; /**< monotonic ms */
    size_t idx;       /**< heap position + 1; 0 = not armed */
    int kind;
    kb_group_t *group;
    void *obj;
} kb_gtimer_t;

typedef struct kb_gproto_s {
    char *name;
    uint8_t *meta;
    int32_t meta_len;
} kb_gproto_t;

typedef struct kb_gmember_s {
    struct kb_gmember_s *next; /**< in join order */
    char *id;
    char *instance_id; /**< NULL: dynamic */
    char *client_id;
    char *client_host;
    int32_t session_ms;
    int32_t rebalance_ms;
    kb_gproto_t *protos;
    size_t nprotos;
    uint8_t *assignment;
    int32_t assignment_len;
    void *join_token;  /**< awaiting a JoinGroup response */
    void *sync_token;  /**< awaiting a SyncGroup response */
    bool is_new;       /**< joined during the current rebalance, no heartbeat yet */
    bool pending_sync; /**< has not sent SyncGroup since the last join phase */
    kb_gtimer_t hb;    /**< session expiry */
} kb_gmember_t;

typedef struct kb_gpend_s {
    struct kb_gpend_s *next;
    char *id;
    kb_gtimer_t t;
} kb_gpend_t;

typedef struct kb_goffset_s {
    char *topic;
    int32_t partition;
    int64_t offset;
    int32_t leader_epoch;
    char *metadata;
    int64_t commit_ts;
    int64_t expire_ts;     /**< -1 none */
    int64_t record_offset; /**< where its record is in __consumer_offsets */
    kp_uuid_t topic_id;
} kb_goffset_t;

/** Offsets written by one producer's open transaction. */
typedef struct kb_gtxn_s {
    struct kb_gtxn_s *next;
    int64_t pid;
    kb_ghash_t offsets; /**< kb_goffset_t by topic/partition */
} kb_gtxn_t;

struct kb_group_s {
    char *id;
    int32_t partition; /**< of __consumer_offsets */
    int state;
    int64_t state_ts; /**< wall ms of the last transition */
    int32_t generation;
    char *protocol_type; /**< NULL: none (groups that only commit offsets) */
    char *protocol_name; /**< NULL: none selected */
    char *leader;        /**< member id or NULL */
    kb_gmember_t *members;
    size_t nmembers;
    size_t nawaiting_join;
    kb_gpend_t *pending; /**< members told MEMBER_ID_REQUIRED, not joined yet */
    size_t npending;
    kb_gtimer_t join_timer;
    bool initial_join;
    bool new_member_added;
    int32_t initial_remaining;
    kb_gtimer_t sync_timer;
    kb_ghash_t offsets; /**< kb_goffset_t by topic/partition */
    kb_gtxn_t *txns;
};

/* ---- life cycle --------------------------------------------------------------------------- */

/** NULL on no memory. */
kb_gsm_t *kb_gsm_new(const kb_gsm_conf_t *conf, const kb_gsm_ops_t *ops, void *opaque);

/** Complete every outstanding token with NOT_COORDINATOR and free everything. */
void kb_gsm_free(kb_gsm_t *gsm);

/** Change the partition count of __consumer_offsets (before any group exists). */
void kb_gsm_set_partitions(kb_gsm_t *gsm, int32_t partitions);
int32_t kb_gsm_partitions(const kb_gsm_t *gsm);

/** The partition of __consumer_offsets holding @p group_id. */
int32_t kb_gsm_partition_for(const kb_gsm_t *gsm, const char *group_id);

/* ---- timers ------------------------------------------------------------------------------- */

/** Earliest armed deadline (monotonic ms), INT64_MAX if none. */
int64_t kb_gsm_next_deadline(const kb_gsm_t *gsm);

/** Fire every timer due at mono_ms(). */
void kb_gsm_run_timers(kb_gsm_t *gsm);

/* ---- the group protocol --------------------------------------------------------------------- */

typedef struct kb_gproto_in_s {
    const char *name;
    const uint8_t *meta;
    int32_t meta_len;
} kb_gproto_in_t;

typedef struct kb_gjoin_in_s {
    const char *group_id;
    const char *member_id;   /**< "" for a new member */
    const char *instance_id; /**< NULL: dynamic */
    const char *protocol_type;
    const kb_gproto_in_t *protos;
    size_t nprotos;
    int32_t session_ms;
    int32_t rebalance_ms;
    const char *client_id;
    const char *client_host;
    bool require_known_member_id;  /**< JoinGroup v4+ (KIP-394) */
    bool supports_skip_assignment; /**< JoinGroup v9+ */
    const char *reason;            /**< NULL or the client's reason (logged) */
} kb_gjoin_in_t;

/** JoinGroup. The result goes to join_done(token), now or when the rebalance completes. */
void kb_gsm_join(kb_gsm_t *gsm, const kb_gjoin_in_t *in, void *token);

typedef struct kb_gassign_in_s {
    const char *member_id;
    const uint8_t *data;
    int32_t len;
} kb_gassign_in_t;

typedef struct kb_gsync_in_s {
    const char *group_id;
    const char *member_id;
    const char *instance_id;
    int32_t generation;
    const char *protocol_type; /**< NULL: not checked (before v5) */
    const char *protocol_name; /**< NULL: not checked */
    const kb_gassign_in_t *assignments;
    size_t nassignments;
} kb_gsync_in_t;

/** SyncGroup. The result goes to sync_done(token), now or when the leader's assignment comes. */
void kb_gsm_sync(kb_gsm_t *gsm, const kb_gsync_in_t *in, void *token);

/** Heartbeat: 0 or a Kafka error code. */
int16_t kb_gsm_heartbeat(kb_gsm_t *gsm, const char *group_id, const char *member_id,
                         const char *instance_id, int32_t generation);

typedef struct kb_gleave_in_s {
    const char *member_id;   /**< "" allowed with an instance id */
    const char *instance_id; /**< NULL: dynamic */
    const char *reason;
} kb_gleave_in_t;

/** LeaveGroup for @p n members: per-member errors in @p errs; returns the group-level error. */
int16_t kb_gsm_leave(kb_gsm_t *gsm, const char *group_id, const kb_gleave_in_t *members, size_t n,
                     int16_t *errs);

/* ---- offsets ------------------------------------------------------------------------------ */

typedef struct kb_gcommit_part_s {
    const char *topic;
    kp_uuid_t topic_id; /**< zero if unknown */
    int32_t partition;
    int64_t offset;
    int32_t leader_epoch;
    const char *metadata; /**< NULL: "" */
    int16_t err;          /**< in: an error found by the caller (unknown topic); out: result */
} kb_gcommit_part_t;

typedef struct kb_gcommit_in_s {
    const char *group_id;
    int32_t generation; /**< -1: a commit from outside the group protocol */
    const char *member_id;
    const char *instance_id;
    int64_t retention_ms; /**< -1: the broker's retention (OffsetCommit v2-4 only) */
    int16_t version;      /**< request version (v9+ get GROUP_ID_NOT_FOUND for unknown groups) */
    kb_gcommit_part_t *parts;
    size_t nparts;
} kb_gcommit_in_t;

/** OffsetCommit: validates the member, appends the records, updates the cache. Results in
 *  parts[].err. */
void kb_gsm_commit(kb_gsm_t *gsm, kb_gcommit_in_t *in);

/** TxnOffsetCommit: as kb_gsm_commit, but the records are appended in producer @p pid's
 *  transaction and stay pending until kb_gsm_txn_complete. */
void kb_gsm_txn_commit(kb_gsm_t *gsm, kb_gcommit_in_t *in, int64_t pid, int16_t pepoch);

/** A COMMIT (@p commit) or ABORT marker of @p pid was written to @p partition: materialise or
 *  drop the pid's pending offsets of every group on that partition. Returns how many groups had
 *  pending offsets. */
int kb_gsm_txn_complete(kb_gsm_t *gsm, int32_t partition, int64_t pid, bool commit);

/** Write the marker through ops->append_marker, then kb_gsm_txn_complete. 0 or a Kafka error. */
int16_t kb_gsm_txn_marker(kb_gsm_t *gsm, int32_t partition, int64_t pid, int16_t pepoch,
                          int32_t coord_epoch, bool commit);

/** Whether some producer has a pending transactional offset for the partition. */
bool kb_gsm_txn_pending(const kb_group_t *g, const char *topic, int32_t partition);

/** The group, or NULL. Valid until the next mutating call. */
kb_group_t *kb_gsm_group(kb_gsm_t *gsm, const char *group_id);

/** The committed offset of a partition, or NULL. */
const kb_goffset_t *kb_gsm_offset(const kb_group_t *g, const char *topic, int32_t partition);

/** Iterate every group (any order); stop early when @p fn returns non-zero. */
void kb_gsm_foreach_group(kb_gsm_t *gsm, int (*fn)(void *arg, const kb_group_t *g), void *arg);

/** DeleteGroups for one group: 0, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP or an append error. */
int16_t kb_gsm_delete_group(kb_gsm_t *gsm, const char *group_id);

/** Remove the committed offsets of @p topic in every group (the topic was deleted). */
void kb_gsm_topic_deleted(kb_gsm_t *gsm, const char *topic);

/** Run the offset expiry pass now (also runs every retention_check_ms). Returns the number of
 *  offsets removed. */
int kb_gsm_expire_offsets(kb_gsm_t *gsm);

/* ---- loading -------------------------------------------------------------------------------- */

/**
 * Replay record batches read from partition @p partition of __consumer_offsets (concatenated,
 * in log order, from the log start up). Offset commits, group metadata, tombstones,
 * transactional offsets and their markers are applied; other coordinators' records are skipped.
 * *@p next_offset gets the offset after the last complete batch (read on from there).
 * Returns 0, or -1 for a malformed batch (the records before it are applied).
 */
int kb_gsm_load(kb_gsm_t *gsm, int32_t partition, const uint8_t *buf, size_t len,
                int64_t *next_offset);

/** After loading: start the session timers of loaded members and the expiry timer. */
void kb_gsm_load_done(kb_gsm_t *gsm);

/** After loading partition @p partition alone (the coordinator took it over): start the
 *  session timers of its loaded members, and the expiry timer if it is not running. */
void kb_gsm_partition_loaded(kb_gsm_t *gsm, int32_t partition);

/** The coordinator lost @p partition: every group on it goes (members waiting for a JoinGroup
 *  or SyncGroup answer get NOT_COORDINATOR), with their offsets and timers; nothing is written. */
void kb_gsm_unload_partition(kb_gsm_t *gsm, int32_t partition);

/** Counters (tests, logs, metrics). */
typedef struct kb_gsm_stats_s {
    size_t groups;
    size_t by_state[KB_GS_DEAD + 1]; /**< groups per state */
    size_t members;
    size_t offsets;
    uint64_t rebalances; /**< join phases completed since start */
    size_t records_loaded;
    size_t records_skipped;
} kb_gsm_stats_t;
void kb_gsm_stats(const kb_gsm_t *gsm, kb_gsm_stats_t *st);

#endif /* KB_GSM_H */
