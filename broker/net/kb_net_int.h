/*
 * kb_net_int.h -- structures shared inside broker/net only.
 */
#ifndef KB_NET_INT_H
#define KB_NET_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kb_net.h"

#define KB_REQ_MAGIC 0x6b627271u /* "kbrq" */

/* Request states (kb_req_t.state). Transitions, all by compare-and-swap:
 *   RUNNING  -> DEFERRED   kb_req_defer() in the handler
 *   RUNNING  -> DONE       the handler returned a result
 *   DEFERRED -> DONE       kb_req_complete()
 *   RUNNING|DEFERRED -> CANCELLED   the connection closed first */
enum { KB_RS_RUNNING = 0, KB_RS_DEFERRED, KB_RS_DONE, KB_RS_CANCELLED };

/* Server phases (kb_server_t.phase). */
enum { KB_PH_RUN = 0, KB_PH_DRAIN, KB_PH_CLOSE, KB_PH_EXIT };

typedef struct kb_conn_s kb_conn_t;
typedef struct kb_io_s kb_io_t;

/* A completion event for the network thread owning the request's connection. */
typedef struct kb_ev_s {
    struct kb_ev_s *next;
    kb_req_t *req;
} kb_ev_t;

struct kb_req_s {
    uint32_t magic;
    _Atomic int refcnt; /* in-flight list (network thread) + handler + deferred owner + events */
    _Atomic int state;
    kb_conn_t *conn;       /* holds a reference on the connection */
    struct kb_req_s *next; /* in-flight list of the connection (network thread) */
    kb_reqctx_t ctx;
    kp_arena_t arena;
    uint8_t *buf; /* the frame, owned */
    size_t len;
    unsigned api_flags;
    /* Written by the thread finishing the request before the state change, read by the
     * network thread after the event: */
    kb_resp_t *resp;
    bool close_conn;
    bool exec_ready; /* the handler finished with a result (not deferred) */
    kb_req_cancel_fn *cancel;
    void *cancel_opaque;
    /* Network thread only: */
    bool dispatched;
    bool ready;
    kb_ev_t ev_exec;  /* "the handler returned" */
    kb_ev_t ev_ready; /* "a deferred request was completed" */
};

#endif /* KB_NET_INT_H */
