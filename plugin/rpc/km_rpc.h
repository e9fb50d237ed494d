/*
 * km_rpc.h - the admin RPC handlers (docs/plugin.md "Admin RPCs and catalog"): CreateMirror
 * (97), ListMirrors (98), DescribeMirrors (99, fanned out to every broker), StartMirrorTopics
 * (95), StopMirrorTopics (96), PauseMirrorTopics (102), ResumeMirrorTopics (103), DeleteMirror
 * (104).
 *
 * Every handler runs on the coordinator loop: the host's handle callback copies the request
 * and posts it; the answer is completed later (deferred tokens) from the loop. A client that
 * disconnects cancels its token; completion and cancel exclude each other under rpc->lock.
 * Every error is a Kafka error code plus a message.
 *
 * Owner: km_plugin_t (cm->rpc).
 */
#ifndef KM_RPC_H
#define KM_RPC_H

#include <stddef.h>

#include "rpc/km_rpc_types.h"
#include "util/km_err.h"

/**
 * Start the source admin client and register the handlers.
 * @return KM_OK, KM_ERR_NOMEM, KM_ERR_HOST (errstr says which)
 * @thread host main (init), after the coordinator loop started
 */
km_err_t km_rpc_start(km_plugin_t *cm, km_rpc_t *rpc, char *errstr, size_t errstr_size);

/**
 * Shutdown step 1 and the RPC part of step 2: unregister the handlers, stop starting host
 * operations, stop the source admin client (its pending queries complete with an error), and
 * wait until every host operation the handlers started has called back. Requests still in
 * progress are answered with an error by the loop (which must still run). Idempotent.
 * @thread host main (fini), before km_coord_stop
 */
void km_rpc_stop(km_rpc_t *rpc);

/** Free what is left. After km_rpc_stop and km_coord_stop. @thread host main (fini) */
void km_rpc_destroy(km_rpc_t *rpc);

#endif /* KM_RPC_H */
