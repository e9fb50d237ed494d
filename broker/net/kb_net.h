/*
 * kb_net.h -- kbroker's Kafka-protocol network server and the request API handlers use.
 *
 * Threads (docs/broker.md, "Threading model"):
 *   - one acceptor thread: accepts on every listener, hands connections round-robin to
 *   - num.network.threads network threads, each with its own epoll set, owning its
 *     connections outright: reading and framing (int32 size + request), header parsing,
 *     ordering, writing (writev for memory, sendfile for file ranges);
 *   - num.io.threads handler threads taking requests from one bounded queue
 *     (queued.max.requests; a network thread blocks on a full queue, as Kafka's does).
 * Handlers answer through the network thread that owns the connection (an eventfd wakes it);
 * responses go out in request order on each connection whatever order handlers finish in.
 * Connection-less requests (kb_req_local_*: the broker sending requests to itself) run the same
 * handlers and deliver their answer to a completion callback instead.
 *
 * @thread kb_server_* from the owner's thread (main); kb_req_* as documented per function.
 */
#ifndef KB_NET_H
#define KB_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_api.h"
#include "kb_metrics.h"
#include "kb_resp.h"
#include "kp_arena.h"
#include "kp_reader.h"
#include "kp_types.h"

typedef struct kb_server_s kb_server_t;

/* ------------------------------------------------------------------ the request context */

/** What a handler knows about its request. Everything is valid for the request's lifetime
 *  (until the handler returns, or until kb_req_complete() for a deferred request). */
typedef struct kb_reqctx_s {
    uint64_t conn_id;      /**< unique per server run, never reused */
    const char *listener;  /**< listener name ("PLAINTEXT") */
    const char *peer;      /**< "1.2.3.4:5678" */
    const char *principal; /**< "User:ANONYMOUS" until SASL exists */
    int16_t api_key;
    int16_t api_version;
    int32_t correlation_id;
    kp_str_t client_id;       /**< view into the request; len -1 = null */
    int16_t hdr_version;      /**< request header version (1 or 2) */
    int16_t resp_hdr_version; /**< response header version the network layer writes (0 or 1) */
    bool flexible;            /**< api_version is a flexible version */
    kp_reader_t body;         /**< the request body (after the header), for the handler to decode */
    kp_arena_t *arena;        /**< per-request arena for decoded messages; freed with the request */
    const uint8_t *frame;     /**< the whole request (header + body, no size prefix) */
    size_t frame_len;
    int64_t recv_ns;     /**< monotonic time the request was read completely */
    int64_t deadline_ms; /**< reserved (0) */
    bool replica_fetch;  /**< set by the Fetch handler for a follower's fetch: its response is
                              also counted in kbroker_replica_fetch_response_bytes_total */
} kb_reqctx_t;

/** The context of @p req. @thread the thread that currently owns the request */
kb_reqctx_t *kb_req_ctx(kb_req_t *req);

/* ------------------------------------------------------------------ deferred responses */

/**
 * Called when the client disconnects (or the server stops) before a deferred request was
 * completed; for a connection-less request, when kb_req_local_cancel() cancels it. After this
 * callback returns the owner must not touch @p req again. It runs on a network thread (or the
 * thread calling kb_req_local_cancel()): it must not block; it may take the owner's lock (see
 * kb_req_complete()).
 */
typedef void(kb_req_cancel_fn)(void *opaque, kb_req_t *req);

/**
 * Turn @p req into a deferred request, to be completed later by kb_req_complete() from any
 * thread. Call it in the handler, then return KB_API_DEFERRED.
 * @param cancel  optional; see kb_req_cancel_fn. Without one, a cancelled request stays
 *                allocated until the owner calls kb_req_complete() (which then returns
 *                KB_E_CANCELLED and frees it).
 * @return 0, or KB_E_CANCELLED if the connection is already gone (then respond or return
 *         anything; the result is discarded), KB_E_STATE if already deferred.
 * @thread handler (inside the handler of @p req)
 */
int kb_req_defer(kb_req_t *req, kb_req_cancel_fn *cancel, void *cancel_opaque);

/**
 * Complete a deferred request with @p resp (NULL: no response is sent; order is kept).
 * Ownership of @p resp passes to the network layer in every case.
 *
 * Race with cancellation: if the owner uses a cancel callback, it must serialise this call
 * with its callback (for example both under the owner's lock) and forget @p req once the
 * callback has run. A call made before the callback has returned is safe and returns
 * KB_E_CANCELLED.
 * @return 0, KB_E_CANCELLED (the client went away; @p resp was freed), KB_E_STATE (not a
 *         deferred request).
 * @thread any
 */
int kb_req_complete(kb_req_t *req, kb_resp_t *resp);

/** Complete a deferred request by closing its connection (a protocol error found late).
 *  Same rules and results as kb_req_complete(). @thread any */
int kb_req_complete_close(kb_req_t *req);

/* ------------------------------------------------------------------ connection-less requests */

/*
 * A connection-less ("local") request runs a registered handler without a socket: the broker
 * talking to itself (the kbx plugin host's local_request). Everything a handler can do works as
 * for a socket request -- answer at once, answer nothing, refuse, or kb_req_defer() and be
 * completed later by kb_req_complete() / kb_req_complete_close() from any thread, with its
 * cancel callback run if the request is cancelled first -- but the result goes to a completion
 * callback instead of a connection.
 *
 * Life cycle: kb_req_local_new() -> kb_req_local_run() (the handler runs on the caller's
 * thread) -> the done callback, exactly once, on whichever thread finishes the request ->
 * kb_req_local_release() by the creator. kb_req_local_cancel() (any thread, e.g. a deadline or
 * shutdown) cancels a request that has not finished: a deferred request has its cancel
 * callback run, as when a client disconnects, and its done callback called with the given
 * status. Nothing cancels local requests automatically (they belong to no connection and the
 * server's stop does not see them): their creator cancels what it still holds when it stops.
 */

/**
 * The result of a connection-less request; called exactly once.
 * @param status  0: @p body / @p len is the response body (without response header); @p body is
 *                NULL and @p len 0 when the handler answers nothing (acks=0 Produce).
 *                The status given to kb_req_local_cancel() (KB_E_CANCELLED, KB_E_TIMEOUT):
 *                cancelled before the handler's answer. KB_E_PARSE: the handler refused the
 *                request (a client's connection would be closed). KB_E_UNSUPPORTED: the API was
 *                unregistered before the handler ran. KB_E_NOMEM / KB_E_IO: the response could
 *                not be copied (file segments are read with pread).
 * @param body    malloc'd, owned by the callee (free() it); NULL unless status is 0
 * @thread whichever thread finishes the request: the caller of kb_req_local_run() (answered at
 *         once), the caller of kb_req_complete() -- possibly holding the handler owner's
 *         locks -- or the caller of kb_req_local_cancel(). It must not block and must not
 *         call into the request's handler or its owner; copy or enqueue, then return.
 */
typedef void(kb_req_done_fn)(void *opaque, int status, uint8_t *body, size_t len);

/** How a connection-less request presents itself to the handler (kb_reqctx_t). */
typedef struct kb_req_local_conf_s {
    int16_t api_key;
    int16_t api_version;
    int32_t correlation_id;
    const char *client_id; /**< request header client id; copied; NULL = null */
    const char *listener;  /**< listener the request claims to come from; copied */
    const char *peer;      /**< shown in logs ("kbx:kmirror"); copied */
    const char *principal; /**< e.g. KB_PRINCIPAL_INTERNAL; copied */
    kb_req_done_fn *done;  /**< required */
    void *done_opaque;
} kb_req_local_conf_t;

/**
 * Build a connection-less request: the header (version from the codec) followed by @p body,
 * decoded exactly as the network layer decodes a client's frame. kb_reqctx_t.conn_id is 0.
 * @param body  the encoded request body (no header); copied
 * @param errp  out (may be NULL): KB_E_INVALID (bad arguments), KB_E_UNSUPPORTED (the key or
 *              version is not served by @p reg), KB_E_PARSE, KB_E_NOMEM
 * @return the request, holding the creator's reference, or NULL. The done callback is not
 *         called for a request that was not created.
 * @thread any. @p reg must outlive the request.
 */
kb_req_t *kb_req_local_new(kb_api_registry_t *reg, const kb_req_local_conf_t *conf,
                           const uint8_t *body, size_t len, int *errp);

/**
 * Run the handler of @p req on the calling thread (as a handler thread would). When it returns,
 * the request has either finished (the done callback ran, on this thread) or is deferred, to be
 * finished by kb_req_complete() or kb_req_local_cancel(). Call it once.
 * @thread any thread that may run a handler (no locks a handler or its owner might take)
 */
void kb_req_local_run(kb_req_t *req);

/**
 * Cancel @p req unless it has finished. A deferred request: its cancel callback runs here (then
 * the owner forgets the request; a later kb_req_complete() returns KB_E_CANCELLED) and the done
 * callback is called here with @p status. A request whose handler is still running: the handler
 * sees a cancelled request (kb_req_defer() returns KB_E_CANCELLED) and the done callback runs
 * with @p status when it returns. A request not run yet: kb_req_local_run() only calls the done
 * callback with @p status.
 * @param status  passed to the done callback (KB_E_CANCELLED, KB_E_TIMEOUT, ...); not 0
 * @return 0, KB_E_STATE (already finished or already cancelled), KB_E_INVALID (not a live local
 *         request).
 * @thread any except inside the done callback; the caller must hold no lock the owner's cancel
 *         callback takes. The creator's reference must still be held.
 */
int kb_req_local_cancel(kb_req_t *req, int status);

/** Drop the creator's reference (after kb_req_local_run() returned; also allowed inside the
 *  done callback, or without running a request that was created). @thread any */
void kb_req_local_release(kb_req_t *req);

/* ------------------------------------------------------------------ the server */

typedef struct kb_net_listener_s {
    const char *name; /**< "PLAINTEXT"; copied */
    const char *host; /**< "" = every interface; copied */
    int port;         /**< 0 = ephemeral */
} kb_net_listener_t;

typedef struct kb_server_conf_s {
    const kb_net_listener_t *listeners;
    size_t listener_cnt;
    int num_network_threads;          /**< >= 1 */
    int num_io_threads;               /**< handler threads, >= 1 */
    int queued_max_requests;          /**< request queue bound, >= 1 */
    int32_t socket_request_max_bytes; /**< largest accepted request size */
    int max_inflight_per_conn;        /**< pipelining limit before a connection is not read */
    int64_t connections_max_idle_ms;  /**< -1: never close idle connections */
    int socket_send_buffer_bytes;     /**< -1: OS default */
    int socket_receive_buffer_bytes;  /**< -1: OS default */
    int listen_backlog;
} kb_server_conf_t;

/** Defaults matching Kafka's (3 network threads, 8 handler threads, 500 queued, 100 MiB). */
void kb_server_conf_defaults(kb_server_conf_t *conf);

/**
 * Create the server and bind every listener (so the ports are known before start).
 * @p reg and @p metrics (may be NULL) are borrowed and must outlive the server.
 * @return the server, or NULL with a message in @p errstr.
 */
kb_server_t *kb_server_new(const kb_server_conf_t *conf, kb_api_registry_t *reg,
                           kb_metrics_t *metrics, char *errstr, size_t errstr_size);

/** Start the threads. 0 or a kb_err_t. */
int kb_server_start(kb_server_t *srv);

/** The bound port of listener @p name (case-insensitive), or -1. */
int kb_server_listener_port(const kb_server_t *srv, const char *name);

/**
 * Graceful stop: stop accepting, stop reading requests, let in-flight requests finish and
 * their responses go out for at most @p timeout_ms, then close every connection (cancelling
 * what is left), stop the handler threads and the network threads.
 * @return 0 if everything drained in time, KB_E_TIMEOUT if connections had to be cut.
 */
int kb_server_stop(kb_server_t *srv, int64_t timeout_ms);

/** Free a stopped (or never started) server. Deferred requests still held by their owners
 *  must have been completed before. */
void kb_server_free(kb_server_t *srv);

/** The registry the server dispatches to. */
kb_api_registry_t *kb_server_registry(kb_server_t *srv);

#endif /* KB_NET_H */
