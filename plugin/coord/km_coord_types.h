/*
 * km_coord_types.h - the coordinator loop's state (embedded in km_plugin_t).
 */
#ifndef KM_COORD_TYPES_H
#define KM_COORD_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/km_types.h"

typedef struct km_op km_op_t;

#define KM_COORD_MAGIC 0x4b4d434fu /* "KMCO" */

typedef struct km_coord {
    uint32_t magic;
    bool lock_ready;
    km_plugin_t *cm;

    /* The queue: the one thread-safe entry point (push + wake), under lock. */
    pthread_mutex_t lock;
    km_op_t *head;
    km_op_t **tail;
    size_t queued;
    bool closed; /* no more ops accepted (the loop is exiting or gone) */

    kbx_latch_t *latch;
    kbx_thread_t *thread;
    atomic_int stop;
    atomic_uint_fast64_t lost; /* events dropped because an op could not be allocated */

    /* Owned by the coordinator loop. */
    bool in_loop;
    pthread_t loop_tid;
    uint64_t ops_done;
    int64_t metadata_offset;
    uint32_t leader_partitions_seen;

    kbx_metric_t *m_queue_size;
    kbx_metric_t *m_events;
} km_coord_t;

#endif /* KM_COORD_TYPES_H */
