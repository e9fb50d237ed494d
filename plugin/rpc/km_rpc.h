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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kp_msg.h"
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

/**
 * Completion of km_rpc_internal / km_rpc_host_request: status KBX_OK with the response body
 * (after the header; borrowed for the call), or a KBX_ERR_* with body NULL. Runs on the
 * coordinator loop, except with KBX_ERR_SHUTDOWN: then possibly on the thread that drops the
 * loop's work at shutdown, and it must touch only arg.
 */
typedef void (*km_rpc_done_fn)(km_plugin_t *cm, void *arg, int32_t status, const uint8_t *body,
                               size_t len);

/**
 * Run one of this module's admin APIs (api_key 95..104, request version 0, msg a decoded
 * request of desc, borrowed for the call) on this broker as the broker itself: the handler a
 * client request would run (same checks, same host requests, same answer), without a client
 * and without the ACL check. done gets the encoded response (version 0). Used by the metadata
 * sync (plugin/sync) to start mirror topics exactly as StartMirrorTopics does.
 * @return KM_OK (done runs exactly once, later), KM_ERR_INVALID (msg does not encode),
 *         KM_ERR_NOMEM, KM_ERR_SHUTDOWN
 * @thread coord
 */
km_err_t km_rpc_internal(km_plugin_t *cm, int16_t api_key, const void *msg,
                         const kp_msg_desc_t *desc, km_rpc_done_fn done, void *arg);

/**
 * Send one request (msg of desc at api_version) to this broker with kbx local_request (the
 * internal principal) and hand the answer to done on the loop; counted with the module's host
 * operations, so km_rpc_stop waits for it.
 * @return KM_OK (done runs exactly once, later), KM_ERR_INVALID, KM_ERR_NOMEM,
 *         KM_ERR_SHUTDOWN, KM_ERR_HOST (the host refused to start it)
 * @thread coord
 */
km_err_t km_rpc_host_request(km_plugin_t *cm, int16_t api_key, int16_t api_version, const void *msg,
                             const kp_msg_desc_t *desc, km_rpc_done_fn done, void *arg);

/**
 * For other modules that start host operations (local_request, broker_request) from the loop
 * and must be waited for by km_rpc_stop like the handlers' own (the metadata sync): count one
 * operation in flight. False (nothing counted) once fini began: start nothing then.
 * @thread any
 */
bool km_rpc_host_op_begin(km_plugin_t *cm);

/** The operation counted by km_rpc_host_op_begin called back (or never started): uncount it,
 *  last in the callback. @thread any */
void km_rpc_host_op_end(km_plugin_t *cm);

#endif /* KM_RPC_H */
