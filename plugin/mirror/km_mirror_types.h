/*
 * km_mirror_types.h - the MirrorMetadataManager binding (embedded in km_plugin_t as
 * cm->mirror): the partition state machines bound to the catalog, the state store, the fetcher
 * manager and the host. Owned by the coordinator loop, except the tick flag.
 */
#ifndef KM_MIRROR_TYPES_H
#define KM_MIRROR_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/km_types.h"

typedef struct km_mpart_mgr km_mpart_mgr_t;
typedef struct km_fetch_mgr km_fetch_mgr_t;
typedef struct km_mirror_fp km_mirror_fp_t;
typedef struct km_lme km_lme_t;

typedef struct km_mirror {
    uint32_t magic;
    km_plugin_t *cm;
    km_mpart_mgr_t *mgr; /**< the partition state machines (NULL before start / after stop) */
    km_fetch_mgr_t *fm;  /**< the fetcher manager this module owns */
    km_mirror_fp_t *fps; /**< fetched partitions (the fetcher's handles) */
    km_lme_t *lme;       /**< failback LME lookups to the sources (rpc/km_lme.c) */
    kbx_timer_t *timer;  /**< periodic tick */
    atomic_bool tick_queued;
    atomic_uint nparts; /**< machines alive: the timer posts ticks only when there are some */
    atomic_bool resync; /**< a partition could not be led (no memory): the tick leads again */
    bool started;
    uint32_t ticks;
    kbx_metric_t *m_states[10]; /**< partitions per state (KM_MPART_NSTATES), NULL: none */
} km_mirror_t;

#endif /* KM_MIRROR_TYPES_H */
