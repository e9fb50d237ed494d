/*
 * km_state_table.h - the in-memory table of one `__mirror_state` shard, and the rules a write
 * must pass (docs/plugin.md "MirrorCoordinator", kip-1279-facts §3.6).
 *
 * A table maps the exact key bytes of a record (docs/state-format.md) to the latest value bytes
 * seen for it: replaying the partition's log from its start gives the table the coordinator had
 * (latest value per key wins; a null value, a tombstone, deletes the key). Values are kept
 * encoded (the protobuf envelope) and decoded when read, so what is served is exactly what is
 * stored.
 *
 * The write rules are pure functions (no host, no table): km_state_pstate_apply() decides what
 * a WriteMirrorStates partition entry does to the stored partition state.
 *
 * Owner: one shard (state/km_state.c); @thread coord for everything on a table.
 */
#ifndef KM_STATE_TABLE_H
#define KM_STATE_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kp_state.h"
#include "util/km_err.h"
#include "util/km_types.h"

/** One key and its latest value (both owned by the table). */
typedef struct km_state_entry {
    struct km_state_entry *next; /**< bucket chain */
    uint32_t hash;
    uint32_t key_len;
    uint32_t value_len;
    uint32_t _pad0;
    uint8_t *key;
    uint8_t *value;
} km_state_entry_t;

typedef struct km_state_table {
    km_plugin_t *cm;
    km_state_entry_t **buckets;
    size_t nbuckets; /**< 0 or a power of two */
    size_t count;
} km_state_table_t;

/** Counters of one replay call (added to, never reset). */
typedef struct km_state_replay_stats {
    uint64_t records;    /**< records applied (values and tombstones) */
    uint64_t tombstones; /**< of which tombstones */
    uint64_t skipped;    /**< records of a newer format (unknown type, newer reader version) */
    uint64_t bad;        /**< records with a bad key or value: logged and skipped */
    uint64_t control;    /**< control batches (transaction markers) skipped */
} km_state_replay_stats_t;

/** Set up an empty table. @thread coord */
void km_state_table_init(km_state_table_t *t, km_plugin_t *cm);
/** Free every entry and the buckets; the table is empty and usable again. @thread coord */
void km_state_table_clear(km_state_table_t *t);

/** The entry for the key bytes, or NULL. @thread coord */
const km_state_entry_t *km_state_table_get(const km_state_table_t *t, const uint8_t *key,
                                           size_t key_len);

/**
 * Store @p value (copied; NULL = tombstone: delete the key) for @p key (copied).
 * @return KM_OK, KM_ERR_NOMEM (the table is unchanged), KM_ERR_INVALID (empty key)
 * @thread coord
 */
km_err_t km_state_table_put(km_state_table_t *t, const uint8_t *key, size_t key_len,
                            const uint8_t *value, size_t value_len);

/** Call fn for every entry (in no order); fn must not change the table. @thread coord */
void km_state_table_foreach(const km_state_table_t *t,
                            void (*fn)(void *arg, const km_state_entry_t *e), void *arg);

/**
 * Replay concatenated record batches (as a Fetch response carries them) into the table:
 * every record's key is parsed (kp_state_key_parse), its value decoded to prove it readable
 * (kp_state_value_decode), then the latest value wins; tombstones delete. Control batches
 * are skipped, a record of a newer format is skipped (counted), a bad record is logged with
 * @p partition and its offset and skipped. A trailing partial batch is left for the next read.
 * @param next_offset in: where the read started; out: the offset after the last whole batch
 * @return KM_OK; KM_ERR_INVALID when a batch is corrupt (framing/CRC: nothing after it is
 *         applied and *next_offset points at it); KM_ERR_NOMEM.
 * @thread coord
 */
km_err_t km_state_table_replay(km_state_table_t *t, int32_t partition, const uint8_t *batches,
                               size_t len, int64_t *next_offset, km_state_replay_stats_t *st);

/* ---- the rules of a partition-state write ----------------------------------------------- */

/** One WriteMirrorStates partition entry (field meanings: write_mirror_states.kps). */
typedef struct km_state_pwrite {
    int8_t state;       /**< new state (KP_PSTATE_*), -1: leave the state alone */
    bool non_retryable; /**< the failure must not be retried automatically */
    int16_t _pad0;
    int32_t leader_epoch;  /**< the writer's leader epoch, -1: no leader-epoch fencing */
    int32_t state_epoch;   /**< the state epoch the writer expects, -1: no fencing */
    int32_t lme_epoch;     /**< last mirrored epoch, -1 (with offset -1): keep the stored one */
    int64_t lme_offset;    /**< last mirrored offset */
    int32_t retry_attempt; /**< -1: keep the stored attempt */
    int32_t _pad1;
    kp_str_t error_message; /**< null: no error (clears a stored one) */
} km_state_pwrite_t;

/** A write entry with every field at its "leave alone / no fencing" value. */
void km_state_pwrite_init(km_state_pwrite_t *w);

/** True if a partition may move from state @p from (-1: no state stored) to @p to; the same
 *  state is always allowed, FAILED is reachable from anything (kip-1279-facts §3.3). @thread any */
bool km_state_transition_valid(int from, int to);

/**
 * Decide a partition-state write (kip-1279-facts §3.6), without side effects:
 *   stored leader epoch > @p w->leader_epoch (not -1)    -> FENCED_LEADER_EPOCH
 *   stored state epoch  > @p w->state_epoch (not -1)     -> FENCED_STATE_EPOCH (124)
 *   state change that km_state_transition_valid refuses  -> INVALID_CLUSTER_MIRROR_STATES
 *   a state value that is not a known state              -> INVALID_REQUEST
 * Otherwise *out is the new stored value: the state epoch +1 when the state changes, the highest
 * leader epoch seen, the LME when given, error details as given (FAILED keeps the state it
 * failed from in previous_state), update_time_ms = @p now_ms. Strings in *out point into @p cur
 * or @p w.
 * @param cur the stored value, NULL when there is none
 * @param msg receives a static reason on error
 * @return 0 or a Kafka error code
 * @thread any
 */
int16_t km_state_pstate_apply(const kp_state_partition_t *cur, const km_state_pwrite_t *w,
                              int64_t now_ms, kp_state_partition_t *out, const char **msg);

#endif /* KM_STATE_TABLE_H */
