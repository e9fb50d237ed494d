/*
 * km_state_types.h - the MirrorCoordinator's state (embedded in km_plugin_t as cm->state).
 * Everything but the token lock, the outstanding counter and the stop flag is owned by the
 * coordinator loop.
 */
#ifndef KM_STATE_TYPES_H
#define KM_STATE_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/km_types.h"

typedef struct km_state_shard km_state_shard_t;
typedef struct km_state_pop km_state_pop_t;
typedef struct km_state_topic km_state_topic_t;
typedef struct km_state_timer km_state_timer_t;
typedef struct km_state_call km_state_call_t;

#define KM_STATE_MAGIC 0x4b4d5354u /* "KMST" */

typedef struct km_state {
    uint32_t magic;
    bool lock_ready;
    km_plugin_t *cm;
    int32_t nparts; /**< mirror.state.topic.num.partitions */

    /* Any thread. */
    pthread_mutex_t tok_lock; /**< RPC tokens: completion vs cancel; the orphans */
    km_state_call_t *orphans; /**< answers that could not be posted (no memory), under tok_lock;
                                   the loop takes them with its next state op */
    atomic_int outstanding;   /**< host requests and timers not yet called back */
    atomic_int stopping;      /**< no new host requests; waiting work fails */
    kbx_latch_t *idle_latch;  /**< set when outstanding drops */
    kbx_rpc_reg_t *reg_read;
    kbx_rpc_reg_t *reg_write;
    kbx_metric_t *m_shards;
    kbx_metric_t *m_load_ms;
    kbx_metric_t *m_write_errors;
    kbx_metric_t *m_writes;

    /* Owned by the coordinator loop. */
    km_state_shard_t **shards; /**< [nparts]: NULL where this broker does not lead */
    int32_t *leaders;          /**< [nparts]: known leader, -1 */
    uint64_t next_gen;
    bool topic_seen; /**< __mirror_state is in the metadata */
    kbx_uuid_t topic_id;
    km_state_topic_t *topics; /**< topic name -> id, from the metadata */
    int32_t *brokers;         /**< registered, unfenced brokers */
    uint32_t nbrokers, brokers_cap;
    km_state_pop_t *md_wait; /**< ops waiting for a leader lookup (Metadata) */
    bool md_busy;
    km_state_pop_t *ensure_wait; /**< ops waiting for the topic to be created */
    bool ensure_busy;
    km_state_timer_t *timers;
} km_state_t;

#endif /* KM_STATE_TYPES_H */
