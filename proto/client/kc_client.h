/*
 * kc_client.h -- the shared asynchronous Kafka-protocol client (docs/client.md, design C6).
 *
 * One kc_client_t holds a set of nodes (a node id -> host:port, set by the caller from config
 * or Metadata, plus bootstrap addresses), at most one connection per node, and the requests
 * queued for or in flight on each. A connection goes resolve -> non-blocking connect ->
 * ApiVersions handshake -> ready; requests submitted before that are sent once it is ready,
 * each at the highest version both sides support.
 *
 * Threads: one thread at a time *drives* the client with kc_client_poll(), which does all the
 * socket I/O and runs every callback. Submission (kc_request*, kc_cancel, node changes,
 * metrics) is safe from any thread, including from inside a callback; a submission from
 * another thread wakes a sleeping kc_client_poll() through an eventfd. Callbacks never run
 * inside the submitting call. No global state: several clients may live in one process.
 *
 * Ownership: the client copies every string and raw body it is given; a message struct given
 * to kc_request_msg() is borrowed until its callback (it is encoded on the driving thread
 * once the version is known). Response bytes are valid only during the callback.
 */
#ifndef KC_CLIENT_H
#define KC_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kp_msg.h"
#include "kp_writer.h"

/* ---- errors (the client's own space; Kafka error codes stay inside response bodies) ----- */

/* X(name, value, retriable, description) */
#define KC_ERRNO_MAP(X)                                                                            \
    X(OK, 0, 0, "success")                                                                         \
    X(TIMED_OUT, -1, 1, "request timed out")                                                       \
    X(TRANSPORT, -2, 1, "connection failed or lost before the response arrived")                   \
    X(NO_VERSION, -3, 0, "no version of the API in common with the broker")                        \
    X(CANCELLED, -4, 0, "cancelled by the caller")                                                 \
    X(DESTROYED, -5, 0, "client destroyed")                                                        \
    X(PROTOCOL, -6, 1, "protocol error from the server (bad frame, header or correlation id)")     \
    X(INVALID, -7, 0, "invalid argument")                                                          \
    X(NOMEM, -8, 0, "out of memory")                                                               \
    X(ENCODE, -9, 0, "request could not be encoded")                                               \
    X(NO_NODE, -10, 0, "unknown node id (or no node to pick)")                                     \
    X(TOO_LARGE, -11, 1, "response larger than max_response_size")                                 \
    X(RESOLVE, -12, 1, "host name resolution failed")                                              \
    X(BUSY, -13, 0, "kc_client_poll() is already running (or called from a callback)")

typedef enum kc_err_e {
#define KC_ERR_ENUM_(name, val, retr, desc) KC_E_##name = (val),
    KC_ERRNO_MAP(KC_ERR_ENUM_)
#undef KC_ERR_ENUM_
} kc_err_t;

/** Static description of @p err ("unknown error" outside the table). @thread any */
const char *kc_err_str(int err);
/** Name without prefix ("TIMED_OUT"), or "UNKNOWN". @thread any */
const char *kc_err_name(int err);
/** True for errors after which the same request may succeed when sent again. @thread any */
bool kc_err_retriable(int err);

/* ---- options ------------------------------------------------------------------------------ */

/** Log levels (syslog numbers). */
#define KC_LOG_ERROR 3
#define KC_LOG_WARN  4
#define KC_LOG_INFO  6
#define KC_LOG_DEBUG 7

/** Log sink: called on the thread where the event happens, with client locks held, so it must
 *  not call back into the client. @p msg has no trailing newline. */
typedef void kc_log_cb_t(void *opaque, int level, const char *msg);

/**
 * Client options. Initialise with kc_opts_init() and change what you need; the struct is
 * append-only (members are only ever added at the end) and kc_client_new() reads only the
 * first struct_size bytes, so a caller built against an older header keeps working.
 * A value <= 0 in a numeric member means "the default".
 */
typedef struct kc_opts_s {
    uint32_t struct_size;             /**< sizeof(kc_opts_t) of the caller */
    const char *client_id;            /**< request header client id; copied ("kc") */
    int32_t connect_timeout_ms;       /**< resolve + connect + ApiVersions (10000) */
    int32_t request_timeout_ms;       /**< for kc_request*() with timeout_ms <= 0 (30000) */
    int32_t reconnect_backoff_ms;     /**< first delay after a failed connection (100) */
    int32_t reconnect_backoff_max_ms; /**< cap of the doubling delay (10000); jitter +-20% */
    int32_t max_in_flight;            /**< requests on the wire per connection (100) */
    int32_t max_response_size;        /**< larger frames close the connection (100 MiB) */
    int32_t socket_send_buffer;       /**< SO_SNDBUF bytes (0: the system's) */
    int32_t socket_recv_buffer;       /**< SO_RCVBUF bytes (0: the system's) */
    int32_t log_level;                /**< most verbose level passed to log_cb (KC_LOG_INFO) */
    kc_log_cb_t *log_cb;              /**< NULL: no logging */
    void *log_opaque;
    const char *software_name; /**< ApiVersions v3+ ClientSoftwareName; copied ("kmirror-kc");
                                    [A-Za-z0-9.-], alphanumeric at both ends (else refused) */
    const char
        *software_version;     /**< ApiVersions v3+ ClientSoftwareVersion; copied ("1.0"); same */
    int32_t handshake_version; /**< first ApiVersions version to try (3); tests use a too-new
                                    one to exercise the fallback */
} kc_opts_t;

/** Fill @p o with the defaults (and struct_size). @thread any */
void kc_opts_init(kc_opts_t *o);

/* ---- client lifecycle ----------------------------------------------------------------------- */

typedef struct kc_client_s kc_client_t;

/**
 * Create a client. @p opts may be NULL (defaults); it is copied. Returns NULL and a message
 * in @p errstr on failure (bad options, no memory, epoll/eventfd failure). @thread any
 */
kc_client_t *kc_client_new(const kc_opts_t *opts, char *errstr, size_t errstr_size);

/**
 * Fail every request with KC_E_DESTROYED (callbacks run here, on the calling thread), close
 * the connections, join the resolver thread (which may wait for one getaddrinfo() in
 * progress) and free the client. No other thread may use the client once this has begun.
 * Called from a callback it does nothing (and logs an error).
 * @thread the driving thread, not from a callback
 */
void kc_client_destroy(kc_client_t *client);

/**
 * Run I/O, timers and callbacks for up to @p timeout_ms (0: do what is ready and return;
 * < 0: wait until something happens). Returns the number of callbacks run, or KC_E_BUSY if
 * another thread is polling or this is called from a callback (KC_E_INVALID: not a client).
 * @thread the driving thread (one at a time)
 */
int kc_client_poll(kc_client_t *client, int timeout_ms);

/** Wake a kc_client_poll() sleeping in another thread (it returns early). @thread any */
void kc_client_wakeup(kc_client_t *client);

/**
 * Put what is queued on the wire now: encode queued requests and write them to their ready
 * connections, without reading, waiting or running callbacks (timers that expire meanwhile
 * complete at the next kc_client_poll()). For a callback that wants its next request sent
 * before it goes on with slow work (a fetcher appending what it got). Returns 0, KC_E_BUSY if
 * another thread is polling, KC_E_INVALID if not a client.
 * @thread the driving thread, from a callback too
 */
int kc_client_flush(kc_client_t *client);

/* ---- nodes ---------------------------------------------------------------------------------- */

/** Pseudo node id for kc_request*(): a node with a ready connection, else one connecting, else
 *  the idle node with the fewest failed connection attempts (bootstrap addresses first, in
 *  order). The node is chosen at submission; the request stays with it. */
#define KC_NODE_ANY (-1)
/** Bootstrap address i (0-based, in the order added) has node id KC_NODE_BOOTSTRAP(i). */
#define KC_NODE_BOOTSTRAP(i) (-2 - (int32_t)(i))

/**
 * Set or change the address of node @p node_id (>= 0). @p host is a name or a numeric
 * IPv4/IPv6 address (copied). If the address changes, the open connection is closed (its
 * in-flight requests fail with KC_E_TRANSPORT) and queued requests go to the new address.
 * Returns 0, KC_E_INVALID or KC_E_NOMEM. @thread any
 */
int kc_client_node_set(kc_client_t *client, int32_t node_id, const char *host, int port);

/** Forget node @p node_id; its queued and in-flight requests fail with KC_E_NO_NODE.
 *  Returns 0 or KC_E_NO_NODE. @thread any */
int kc_client_node_remove(kc_client_t *client, int32_t node_id);

/**
 * Add bootstrap addresses: "host:port[,host:port...]" ("[v6addr]:port" for IPv6 literals).
 * They get node ids KC_NODE_BOOTSTRAP(0), (1), ... in order. Returns 0, KC_E_INVALID (nothing
 * added when any entry is malformed) or KC_E_NOMEM. @thread any
 */
int kc_client_add_bootstrap(kc_client_t *client, const char *list);

/**
 * The version range the broker behind @p node_id advertised for @p api_key in its last
 * ApiVersions answer. Returns 0, KC_E_NO_NODE, or KC_E_NO_VERSION (not connected yet, or the
 * key is not advertised). @thread any
 */
int kc_client_api_range(kc_client_t *client, int32_t node_id, int16_t api_key, int16_t *min_ver,
                        int16_t *max_ver);

/* ---- requests ------------------------------------------------------------------------------- */

/**
 * Response callback, called exactly once per accepted request, on the driving thread:
 * @p err is KC_E_OK with the response body (the bytes after the response header; valid only
 * during the call) at version @p ver, or a kc_err_t with @p body NULL and @p len 0 (timeout,
 * connection loss, cancel, destroy, no common version...). For KC_REQ_NO_RESPONSE requests
 * KC_E_OK means the request was written to the socket. @p ver is -1 if none was chosen.
 * The callback may submit new requests and cancel others; it must not poll or destroy.
 */
typedef void kc_resp_cb_t(kc_client_t *client, int err, int16_t ver, const uint8_t *body,
                          size_t len, void *opaque);

/** Request body encoder, called on the driving thread once the version is chosen: append the
 *  body for version @p ver to @p wr; return 0 or non-zero (the request fails KC_E_ENCODE). */
typedef int kc_encode_cb_t(kp_writer_t *wr, int16_t ver, void *opaque);

/** kc_request*() flags */
#define KC_REQ_NO_RESPONSE 0x1u /**< the server sends nothing back (Produce with acks=0) */

/**
 * Submit a request for API @p api_key to @p node_id (or KC_NODE_ANY) at the highest version
 * in [@p min_ver, @p max_ver] that the broker supports; the body comes from @p encode (called
 * with @p opaque, which must stay valid until the callback). @p timeout_ms counts from now
 * (<= 0: the client default). Returns the request id (> 0, for kc_cancel()), after which
 * @p cb is called exactly once; or a negative kc_err_t (KC_E_INVALID, KC_E_NO_NODE,
 * KC_E_NOMEM), in which case @p cb is never called.
 * @thread any
 */
int64_t kc_request(kc_client_t *client, int32_t node_id, int16_t api_key, int16_t min_ver,
                   int16_t max_ver, kc_encode_cb_t *encode, int32_t timeout_ms, unsigned flags,
                   kc_resp_cb_t *cb, void *opaque);

/** kc_request() with a message struct of the generated codec: versions are those of
 *  @p req_desc capped at @p max_ver (< 0: no cap). @p msg is borrowed until the callback. */
int64_t kc_request_msg(kc_client_t *client, int32_t node_id, const kp_msg_desc_t *req_desc,
                       int16_t max_ver, const void *msg, int32_t timeout_ms, unsigned flags,
                       kc_resp_cb_t *cb, void *opaque);

/** kc_request() with a body already encoded for exactly version @p ver (copied); fails with
 *  KC_E_NO_VERSION in the callback if the broker does not support @p ver. */
int64_t kc_request_raw(kc_client_t *client, int32_t node_id, int16_t api_key, int16_t ver,
                       const void *body, size_t len, int32_t timeout_ms, unsigned flags,
                       kc_resp_cb_t *cb, void *opaque);

/**
 * Cancel request @p id: its callback runs with KC_E_CANCELLED at the next kc_client_poll(); if
 * it was already sent, its response is read and dropped (the connection stays up). Returns 0,
 * or KC_E_INVALID if the request is unknown or already completed (its callback has run or is
 * about to run with its real result). @thread any
 */
int kc_cancel(kc_client_t *client, int64_t id);

/**
 * Send Metadata (no topics: brokers and controller only, v1..12) to @p node_id and, on a
 * good answer, kc_client_node_set() every broker in it. @p cb (may be NULL) then gets the
 * response as from kc_request(). Returns as kc_request(). @thread any
 */
int64_t kc_metadata_refresh(kc_client_t *client, int32_t node_id, kc_resp_cb_t *cb, void *opaque);

/* ---- metrics ---------------------------------------------------------------------------- */

/** Counters since creation (append-only; kc_client_metrics() fills the first struct_size
 *  bytes the caller declares). */
typedef struct kc_metrics_s {
    uint32_t struct_size;
    uint32_t nodes;            /**< gauge: known nodes, bootstrap entries included */
    uint32_t connections_up;   /**< gauge: connections in the ready state */
    uint32_t queued;           /**< gauge: requests waiting to be sent */
    uint32_t in_flight;        /**< gauge: requests sent, awaiting their response */
    uint32_t _pad;             /**< explicit padding */
    uint64_t requests;         /**< requests written (handshakes included) */
    uint64_t responses;        /**< responses matched to a request */
    uint64_t errors;           /**< callbacks with an error */
    uint64_t timeouts;         /**< callbacks with KC_E_TIMED_OUT */
    uint64_t bytes_sent;       /**< socket bytes */
    uint64_t bytes_received;   /**< socket bytes */
    uint64_t connects;         /**< connection attempts */
    uint64_t connect_failures; /**< attempts that never became ready */
    uint64_t disconnects;      /**< ready connections that were closed */
    uint64_t protocol_errors;  /**< bad frames, headers, correlation ids, oversize frames */
    uint64_t rx_buffer_peak;   /**< largest receive buffer allocated, bytes */
} kc_metrics_t;

/** Copy the counters into @p out (set out->struct_size first). @thread any */
void kc_client_metrics(kc_client_t *client, kc_metrics_t *out);

#endif /* KC_CLIENT_H */
