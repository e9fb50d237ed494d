/*
 * km_coord.h - the coordinator loop (skeleton). It owns plugin state single-threaded; every
 * other thread talks to it only through ops pushed on its queue (km_coord_enqueue_*).
 *
 * The loop runs on a host-lent thread: each call of its thread function drains the queue and
 * then waits on a host latch with a timeout (never sleeps), checking a stop flag.
 * Owner: km_plugin_t (core/km_plugin.c) creates, stops and destroys it.
 */
#ifndef KM_COORD_H
#define KM_COORD_H

#include <stddef.h>

#include "coord/km_coord_types.h"
#include "util/km_err.h"

/** Loop tick: the longest the loop waits without being woken. */
#define KM_COORD_TICK_MS 1000

/**
 * Register the coordinator's metrics, create its latch and queue and start its thread.
 * On failure everything is undone and errstr says what failed.
 * @return KM_OK, KM_ERR_NOMEM, KM_ERR_HOST
 * @thread host main (init)
 */
km_err_t km_coord_start(km_plugin_t *cm, km_coord_t *coord, char *errstr, size_t errstr_size);

/**
 * Close the queue, let the loop drain what is queued, and join its thread. Ops pushed later
 * are dropped. After a successful km_coord_start; a second call is a no-op.
 * @thread host main (fini); never the loop itself
 */
void km_coord_stop(km_coord_t *coord);

/**
 * Free what is left (queued ops, latch, lock, metrics). After km_coord_stop, or after a failed
 * start (then a no-op).
 * @thread host main (fini)
 */
void km_coord_destroy(km_coord_t *coord);

/**
 * Copy the minimal facts of a metadata delta (borrowed) into an op and queue it.
 * @return KM_OK, KM_ERR_NOMEM (event counted as lost), KM_ERR_SHUTDOWN (queue closed)
 * @thread host metadata thread (any); does not block beyond the queue lock
 */
km_err_t km_coord_enqueue_metadata(km_coord_t *coord, const kbx_metadata_delta_t *delta);

/**
 * Same for a batch of leadership changes (borrowed).
 * @thread host metadata thread (any)
 */
km_err_t km_coord_enqueue_leadership(km_coord_t *coord,
                                     const kbx_leadership_change_t *const *changes, uint32_t count);

/**
 * A closure run on the coordinator loop: the way any thread (host callbacks, fetcher threads,
 * request completions, timers) hands work to the single-threaded owner of the plugin's state.
 * @thread run: the coordinator loop; drop: whichever thread frees the op
 */
typedef void (*km_coord_fn)(km_plugin_t *cm, void *arg);

/**
 * Queue run(cm, arg) on the loop, in FIFO order with every other op. If the op never runs
 * (the queue closed before or after the push, or the loop was torn down), drop(cm, arg) is
 * called instead, exactly once, so arg is never leaked; drop may be NULL when arg owns nothing.
 * On KM_ERR_NOMEM neither is called: the caller still owns arg.
 * @return KM_OK, KM_ERR_INVALID (run NULL), KM_ERR_NOMEM, KM_ERR_SHUTDOWN (drop was called)
 * @thread any; does not block beyond the queue lock
 */
km_err_t km_coord_post(km_coord_t *coord, km_coord_fn run, km_coord_fn drop, void *arg);

/** True when called from inside the coordinator loop. @thread any */
bool km_coord_on_loop(const km_coord_t *coord);

#endif /* KM_COORD_H */
