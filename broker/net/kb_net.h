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
} kb_reqctx_t;

/** The context of @p req. @thread the thread that currently owns the request */
kb_reqctx_t *kb_req_ctx(kb_req_t *req);

/* ------------------------------------------------------------------ deferred responses */

/**
 * Called when the client disconnects (or the server stops) before a deferred request was
 * completed. After this callback returns the owner must not touch @p req again. It runs on a
 * network thread: it must not block; it may take the owner's lock (see kb_req_complete()).
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
