/*
 * kc_client_int.h -- structures shared by the client's files (kc_client.c: API, nodes, poll
 * loop, resolver; kc_conn.c: sockets, framing, handshake) and by the tests and fuzz target.
 * Not a public header.
 *
 * Locking: one mutex per client (client->lock) guards every member below except the ones
 * marked "driver", which only the thread inside kc_client_poll() touches. Callbacks run with
 * the lock released.
 */
#ifndef KC_CLIENT_INT_H
#define KC_CLIENT_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "kc_client.h"
#include "kp_writer.h"

#define KC_CLIENT_MAGIC 0x6b63636cu /* "kccl" */
#define KC_MAX_ADDRS    8           /* addresses kept per resolved name */
#define KC_RX_CHUNK     65536u      /* first receive buffer; grows as bytes actually arrive */
#define KC_APIV_MAX     3           /* highest ApiVersions version whose response we parse */

typedef struct kc_req_s kc_req_t;
struct kc_req_s {
    kc_req_t *next;  /**< in a node queue (sendq, inflight, sending) */
    kc_req_t *dnext; /**< in client->done */
    int64_t id;
    int32_t node_id;
    int16_t api_key, min_ver, max_ver;
    int16_t ver; /**< chosen version, -1 before */
    int32_t corr;
    unsigned flags;   /**< KC_REQ_* */
    int64_t deadline; /**< monotonic ms */
    kc_encode_cb_t *encode;
    void *enc_opaque;
    kc_resp_cb_t *cb;
    void *opaque;
    const kp_msg_desc_t *desc; /**< kc_request_msg(): the message, borrowed */
    const void *msg;
    uint8_t *raw; /**< kc_request_raw(): the body, owned */
    size_t raw_len;
    uint64_t wire_end; /**< KC_REQ_NO_RESPONSE: output stream offset where the frame ends */
    /* result */
    bool done;    /**< result decided; on client->done until the callback ran */
    bool in_wire; /**< on inflight or sending (a finished one stays as a tombstone) */
    bool cb_done; /**< callback ran; freed as soon as !in_wire */
    int err;
    uint8_t *resp; /**< the whole frame, owned; body at resp + resp_off */
    size_t resp_off, resp_len;
};

typedef struct kc_reqq_s {
    kc_req_t *head, *tail;
    uint32_t cnt;
} kc_reqq_t;

typedef struct kc_apiver_s {
    int16_t key, min_ver, max_ver;
} kc_apiver_t;

typedef enum kc_cstate_e {
    KC_CS_DOWN = 0,   /**< no socket; may connect after backoff_until */
    KC_CS_RESOLVING,  /**< getaddrinfo() running on the resolver thread */
    KC_CS_CONNECTING, /**< non-blocking connect() in progress */
    KC_CS_HANDSHAKE,  /**< ApiVersions sent */
    KC_CS_READY,
} kc_cstate_t;

typedef struct kc_node_s {
    int32_t id;
    char *host;
    int port;
    char name[64]; /**< "host:port" for logs (truncated) */
    /* addresses */
    struct sockaddr_storage addrs[KC_MAX_ADDRS];
    socklen_t addrlens[KC_MAX_ADDRS];
    int naddrs, addr_next;
    uint32_t resolve_gen; /**< bumped on address change; stale resolver results are dropped */
    int resolve_done;     /**< 0 running, 1 addresses in addrs, -1 failed */
    /* connection */
    kc_cstate_t state;
    int fd;
    uint32_t conn_gen; /**< part of the epoll key, so stale events are recognised */
    int64_t state_deadline;
    int64_t backoff_until;
    int failures; /**< consecutive connection attempts that did not become ready */
    bool epoll_out;
    kp_writer_t out; /**< frames not yet written; out_pos bytes of it are */
    size_t out_pos;
    uint64_t out_base; /**< stream offset of out.buf[0] */
    uint8_t hdr[4];
    size_t hdr_got;
    uint8_t *rbuf; /**< the frame being received (size field excluded) */
    size_t rlen, rgot, rcap;
    int32_t next_corr;
    int16_t hs_ver;
    int32_t hs_corr;
    kc_apiver_t *vers; /**< from the last ApiVersions answer */
    uint32_t nvers;
    kc_reqq_t sendq;    /**< accepted, not yet written */
    kc_reqq_t inflight; /**< written, awaiting the response, in correlation order */
    kc_reqq_t sending;  /**< KC_REQ_NO_RESPONSE, frame not yet fully written */
} kc_node_t;

typedef struct kc_rjob_s kc_rjob_t;
struct kc_rjob_s {
    kc_rjob_t *next;
    int32_t node_id;
    uint32_t gen;
    char *host;
    int port;
};

struct kc_client_s {
    uint32_t magic;
    pthread_mutex_t lock;
    kc_opts_t o; /**< with the strings below */
    char *client_id, *sw_name, *sw_ver;
    int epfd, evfd;
    kc_node_t **nodes;
    size_t nnodes, capnodes;
    int32_t nboot;
    int64_t next_id;
    kc_req_t *done_head, *done_tail; /**< completed, callbacks pending */
    bool polling;
    pthread_t poll_thread;
    uint64_t rng;
    kc_metrics_t m;
    /* resolver thread, started on the first host name */
    pthread_t rthr;
    bool rthr_started, stopping;
    pthread_cond_t rcond;
    kc_rjob_t *rjobs;
};

/* ---- kc_client.c, for kc_conn.c (lock held) ---- */
int64_t kc_now_ms(void);
void kc_log(kc_client_t *c, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
kc_node_t *kc_node_find(kc_client_t *c, int32_t id);
/** Decide the result of @p req and queue its callback. */
void kc_req_finish(kc_client_t *c, kc_req_t *req, int err, uint8_t *resp, size_t off, size_t len);
void kc_reqq_push(kc_reqq_t *q, kc_req_t *req);
kc_req_t *kc_reqq_pop(kc_reqq_t *q);
/** A wire list lost @p req: free it if its callback already ran. */
void kc_req_unwire(kc_req_t *req);
/** Start the lookup of node->host on the resolver thread. 0 or KC_E_NOMEM. */
int kc_resolve_start(kc_client_t *c, kc_node_t *node);

/* ---- kc_conn.c (lock held, driver thread unless noted) ---- */
/** Begin connecting @p node (state DOWN) to its next address. */
void kc_conn_start(kc_client_t *c, kc_node_t *node, int64_t now);
/** Close the connection. Wire requests fail with @p err (the first in flight with
 *  @p head_err); a connection that never became ready counts as a failure (backoff). Any
 *  thread (lock held). */
void kc_conn_close(kc_client_t *c, kc_node_t *node, int head_err, int err, const char *why);
/** Handle epoll events for the node's socket. */
void kc_conn_event(kc_client_t *c, kc_node_t *node, uint32_t events, int64_t now);
/** Timers, connection starts, filling the wire and writing: one pass over @p node. */
void kc_conn_service(kc_client_t *c, kc_node_t *node, int64_t now);
/** Earliest timer of @p node (INT64_MAX if none). */
int64_t kc_conn_next_timer(kc_client_t *c, const kc_node_t *node);
/** Bytes read from the server: frame them and handle each complete frame. Closes the
 *  connection on a protocol error. Returns 0, or the error that closed it. */
int kc_conn_input(kc_client_t *c, kc_node_t *node, const uint8_t *data, size_t len, int64_t now);
/** Adopt an already connected socket @p fd as the node's connection and send ApiVersions
 *  (tests and the fuzz target use a socketpair). */
void kc_conn_adopt(kc_client_t *c, kc_node_t *node, int fd, int64_t now);
/** Free the node's connection buffers (not its queues). */
void kc_conn_free(kc_node_t *node);

#endif /* KC_CLIENT_INT_H */
