/*
 * km_sync_int.h - the scheduler's seams for unit tests (tests/plugin_sync/sync_core_test.c):
 * which broker coordinates a mirror and the kinds' entry points, replaceable so that the
 * scheduling is tested without a loaded `__mirror_state` shard or real kinds.
 *
 * Owner: km_sync.c. Nothing in the plugin itself calls km_sync_set_hooks.
 */
#ifndef KM_SYNC_INT_H
#define KM_SYNC_INT_H

#include <stdbool.h>

#include "sync/km_sync.h"

/** How often the scheduler looks at its mirrors (a host timer posts a tick to the loop). */
#define KM_SYNC_TICK_MS 250

typedef struct km_sync_hooks {
    /** Is this broker the mirror's coordinator? Default km_state_mirror_coordinator. */
    bool (*is_coordinator)(const km_plugin_t *cm, const char *mirror);
    /** Entry point per kind. Default km_sync_<kind>_run. */
    void (*run[KM_SYNC_NKINDS])(km_sync_run_t *run);
} km_sync_hooks_t;

/** Replace the hooks (NULL members keep the defaults). @thread coord, or before any tick */
void km_sync_set_hooks(km_plugin_t *cm, const km_sync_hooks_t *hooks);

/** Runs of mirror in flight on this broker (periodic and final). @thread coord */
size_t km_sync_inflight(km_plugin_t *cm, const char *mirror);

#endif /* KM_SYNC_INT_H */
