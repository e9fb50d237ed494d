/*
 * km_state.h - the MirrorCoordinator: `__mirror_state` (docs/plugin.md "MirrorCoordinator
 * (`__mirror_state`)", docs/state-format.md, kip-1279-facts §2.1, §3.6, §5.9, §5.10, §6.1).
 *
 * Server side: one shard per `__mirror_state` partition this broker leads, loaded on
 * leadership by reading the partition from its log start (local Fetch requests), replayed into
 * a km_state_table_t, dropped on resignation. Writes are Produce acks=-1 to the shard's
 * partition through the host's internal path, applied to the table only once acknowledged.
 * ReadMirrorStates (100) and WriteMirrorStates (101) serve remote partition leaders.
 *
 * Client side (km_state_read / km_state_write): the state of a mirror partition wherever its
 * shard lives -- the local shard directly, else a request to the shard's leader; one retry on
 * NOT_COORDINATOR (leader re-learned) and FENCED_STATE_EPOCH (state re-read first).
 *
 * Owner: km_plugin_t (cm->state). Everything runs on the coordinator loop except the host
 * callbacks named below, which copy and post.
 */
#ifndef KM_STATE_H
#define KM_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kp_state.h"
#include "state/km_state_table.h"
#include "util/km_err.h"
#include "util/km_types.h"

#define KM_STATE_TOPIC "__mirror_state"

/** The stored state of one mirror partition, as a reader gets it. */
typedef struct km_state_pstate {
    int8_t state;              /**< KP_PSTATE_*, KP_PSTATE_UNKNOWN when nothing is stored */
    int8_t previous_state;     /**< -1: none */
    int16_t retry_attempt;     /**< -1: not retryable */
    int32_t state_epoch;       /**< 0 when nothing is stored */
    int32_t leader_epoch;      /**< highest writer leader epoch seen, -1 */
    int32_t lme_epoch;         /**< last mirrored epoch, -1 */
    int64_t lme_offset;        /**< last mirrored offset, -1 */
    const char *error_message; /**< NULL: none; valid during the callback only */
} km_state_pstate_t;

/**
 * Result of km_state_read. @p err is 0 or a Kafka error code with @p msg (never NULL on error);
 * @p st is valid during the call only (NULL on error).
 * @thread coord
 */
typedef void (*km_state_read_cb)(km_plugin_t *cm, void *arg, int16_t err, const char *msg,
                                 const km_state_pstate_t *st);
/** Result of km_state_write: @p state_epoch is the new state epoch (-1 on error). @thread coord */
typedef void (*km_state_write_cb)(km_plugin_t *cm, void *arg, int16_t err, const char *msg,
                                  int32_t state_epoch);
/** Completion of km_state_ensure_topic / km_state_delete_mirror. @thread coord */
typedef void (*km_state_done_cb)(km_plugin_t *cm, void *arg, int16_t err, const char *msg);

/**
 * Register the RPC handlers (ReadMirrorStates 100, WriteMirrorStates 101) and metrics.
 * @return KM_OK, KM_ERR_NOMEM, KM_ERR_HOST (errstr says what)
 * @thread host main (init), after km_coord_start
 */
km_err_t km_state_start(km_plugin_t *cm, char *errstr, size_t errstr_size);

/**
 * Stop: unregister the handlers, fail what waits (COORDINATOR_NOT_AVAILABLE) and wait until
 * every host request the module started has completed. Idempotent.
 * @thread host main (fini), before km_coord_stop
 */
void km_state_stop(km_plugin_t *cm);

/** Free the shards and metrics. After km_coord_stop (the loop is gone). @thread host main */
void km_state_destroy(km_plugin_t *cm);

/** Host leadership callback: copy the `__mirror_state` changes and post them. @thread host */
void km_state_on_leadership(km_plugin_t *cm, const kbx_leadership_change_t *const *changes,
                            uint32_t count);
/** Host metadata callback: copy topics (name, id) and brokers and post them. @thread host */
void km_state_on_metadata(km_plugin_t *cm, const kbx_metadata_delta_t *delta);

/**
 * Make sure `__mirror_state` exists: CreateTopics through the host's internal path with
 * mirror.state.topic.num.partitions partitions, mirror.state.topic.replication.factor (-1:
 * min(3, registered brokers)), cleanup.policy=compact. TOPIC_ALREADY_EXISTS counts as done.
 * @p cb (may be NULL) runs on the loop with 0 or the error.
 * @return KM_OK (cb will run), KM_ERR_NOMEM, KM_ERR_SHUTDOWN
 * @thread coord
 */
km_err_t km_state_ensure_topic(km_plugin_t *cm, km_state_done_cb cb, void *arg);

/**
 * Read the stored state of (@p mirror, @p topic / @p topic_id, @p partition). The local shard
 * answers directly when this broker leads it; otherwise ReadMirrorStates goes to the leader.
 * @p cb always runs later on the loop (never inside this call). Strings are copied.
 * @return KM_OK (cb will run), KM_ERR_INVALID (bad name or partition), KM_ERR_NOMEM,
 *         KM_ERR_SHUTDOWN
 * @thread coord
 */
km_err_t km_state_read(km_plugin_t *cm, const char *mirror, const char *topic,
                       const kbx_uuid_t *topic_id, int32_t partition, km_state_read_cb cb,
                       void *arg);

/**
 * Write the state of a mirror partition (fencing and transition rules of
 * km_state_pstate_apply). Same routing and callback rules as km_state_read.
 * @thread coord
 */
km_err_t km_state_write(km_plugin_t *cm, const char *mirror, const char *topic,
                        const kbx_uuid_t *topic_id, int32_t partition, const km_state_pwrite_t *w,
                        km_state_write_cb cb, void *arg);

/** One stored partition state of a mirror, for km_state_list_local. */
typedef struct km_state_listed {
    kbx_uuid_t topic_id;
    int32_t partition;
    km_state_pstate_t st;
} km_state_listed_t;

/**
 * The partition states of @p mirror held by the shards this broker leads and has loaded
 * (DescribeMirrors fans out to every broker). fn is called for each (borrowed data).
 * @return the number of shards still loading (their states are not listed)
 * @thread coord
 */
int32_t km_state_list_local(km_plugin_t *cm, const char *mirror,
                            void (*fn)(void *arg, const km_state_listed_t *ls), void *arg);

/**
 * Tombstone every key of @p mirror (record types 1-5) in the shards this broker leads; a shard
 * still loading deletes them once loaded (before it serves anything). Every broker calls it
 * when the mirror's definition disappears from the metadata (DeleteMirror), so together they
 * cover every shard. @p cb (may be NULL) runs on the loop when the tombstones of the loaded
 * shards are acknowledged: 0 or the first error.
 * @return KM_OK, KM_ERR_INVALID, KM_ERR_NOMEM, KM_ERR_SHUTDOWN
 * @thread coord
 */
km_err_t km_state_delete_mirror(km_plugin_t *cm, const char *mirror, km_state_done_cb cb,
                                void *arg);

/**
 * Result of km_state_get_record: @p v is the stored value (NULL when nothing is stored or on
 * error), valid during the call only. @thread coord
 */
typedef void (*km_state_record_cb)(km_plugin_t *cm, void *arg, int16_t err, const char *msg,
                                   const kp_state_value_t *v);

/**
 * Store @p v (NULL: a tombstone) as the record of @p type (KP_STATE_REC_LAST_MIRROR_EPOCH,
 * _MIRROR, _SYNCED_TOPIC_CONFIGS, _SYNCED_ACLS; not PARTITION_STATE, which has
 * km_state_write) for @p mirror (+ @p topic_id for types 1 and 4, + @p partition for type 1).
 * Served only by the local shard of the key: mirror-level records (3-5) live in the partition
 * of the mirror name, led by the broker that runs the mirror-level duties
 * (km_state_mirror_coordinator); elsewhere NOT_COORDINATOR. A shard still loading makes it
 * wait. No fencing: the mirror coordinator is the only writer. Appended like every write
 * (Produce acks=-1, applied once acknowledged). @p cb (may be NULL) runs later on the loop.
 * @return KM_OK, KM_ERR_INVALID (type, names, v's type), KM_ERR_NOMEM, KM_ERR_SHUTDOWN
 * @thread coord
 */
km_err_t km_state_put_record(km_plugin_t *cm, int16_t type, const char *mirror,
                             const kbx_uuid_t *topic_id, int32_t partition,
                             const kp_state_value_t *v, km_state_done_cb cb, void *arg);

/** Read the record stored by km_state_put_record (same key and routing rules). @thread coord */
km_err_t km_state_get_record(km_plugin_t *cm, int16_t type, const char *mirror,
                             const kbx_uuid_t *topic_id, int32_t partition, km_state_record_cb cb,
                             void *arg);

/** True if this broker leads and has loaded the partition of @p mirror's name: it runs the
 *  mirror-level duties (ARCHITECTURE §4). @thread coord */
bool km_state_mirror_coordinator(const km_plugin_t *cm, const char *mirror);

/** Number of shards this broker leads (loaded or loading). @thread coord */
int32_t km_state_shard_count(const km_plugin_t *cm);
/** True if this broker leads `__mirror_state` partition @p partition and has loaded it. */
bool km_state_shard_loaded(const km_plugin_t *cm, int32_t partition);

#endif /* KM_STATE_H */
