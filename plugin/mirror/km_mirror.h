/*
 * km_mirror.h - the MirrorMetadataManager binding (docs/plugin.md "Partition state machine",
 * "Binding"): one km_mpart_mgr_t driven by the catalog (leadership, mirror.name suffix, mirror
 * definitions), persisting through the state module (km_state_read / km_state_write), fetching
 * through a fetcher manager it owns (km_fetch_*), ticking on a host timer.
 *
 * Owner: km_plugin_t (cm->mirror). Everything runs on the coordinator loop except start/stop
 * (host main) and the timer (host timer thread, which only posts).
 */
#ifndef KM_MIRROR_H
#define KM_MIRROR_H

#include <stddef.h>

#include "mirror/km_mpart.h"
#include "util/km_err.h"
#include "util/km_types.h"

/** How often the state machines are ticked (retries, backoff, the STOPPED HW wait). */
#define KM_MIRROR_TICK_MS 100

/**
 * Create the fetcher manager and the state machines, subscribe to the catalog and start the
 * tick timer. Before the host listeners are registered (the catalog is still empty).
 * @return KM_OK, KM_ERR_NOMEM, KM_ERR_HOST (errstr says what)
 * @thread host main (init), after km_coord_start
 */
km_err_t km_mirror_start(km_plugin_t *cm, char *errstr, size_t errstr_size);

/**
 * Cancel the tick timer (nothing new is started by it afterwards). Idempotent.
 * @thread host main (fini), before km_coord_stop
 */
void km_mirror_stop(km_plugin_t *cm);

/**
 * After km_coord_stop (queued work has run): destroy the fetcher manager (joins its threads),
 * wait for the host operations still in flight (bounded), free the machines.
 * @thread host main (fini)
 */
void km_mirror_destroy(km_plugin_t *cm);

/** The state machines, for DescribeMirrors and the operator's recover (NULL when stopped).
 *  @thread coord */
km_mpart_mgr_t *km_mirror_mgr(km_plugin_t *cm);

/** Whether a FATAL fetcher event with Kafka error code @p code (-1: none) leaves the partition
 *  FAILED retryable: false for a source topic gone or re-created, another source cluster, and a
 *  source the fetcher cannot serve (UNSUPPORTED_VERSION, UNSUPPORTED_FOR_MESSAGE_FORMAT; design
 *  M93). @thread any */
bool km_mirror_fatal_retryable(int16_t code);

#endif /* KM_MIRROR_H */
