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
 *   RUNNING|DEFERRED -> CANCELLED   the connection closed first (a local request:
 *                                   kb_req_local_cancel()) */
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
    /* in-flight list (network thread) + handler + deferred owner + events; for a local request:
     * creator + deferred owner + a running kb_req_local_run() / kb_req_local_cancel() */
    _Atomic int refcnt;
    _Atomic int state;
    kb_conn_t *conn;       /* holds a reference on the connection; NULL: a local request */
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
    /* Connection-less requests (conn == NULL; kb_req_local.c): */
    kb_api_registry_t *reg;
    kb_req_done_fn *done;
    void *done_opaque;
    _Atomic bool finished;     /* the done callback has been called (or is being called) */
    _Atomic int cancel_status; /* the first kb_req_local_cancel() status, 0 none */
    char *strs;                /* the copied client id, listener, peer and principal */
    /* Network thread only: */
    bool dispatched;
    bool ready;
    kb_ev_t ev_exec;  /* "the handler returned" */
    kb_ev_t ev_ready; /* "a deferred request was completed" */
};

/** Drop one reference; the last frees the request. @thread any */
void kb_req_unref(kb_req_t *req);

/** kb_req_complete() / kb_req_complete_close() of a local request (kb_req_local.c). */
int kb_req_local_complete(kb_req_t *req, kb_resp_t *resp, bool close_conn);

/** Free what a local request owns besides the common parts (kb_req_local.c). */
void kb_req_local_free(kb_req_t *req);

#endif /* KB_NET_INT_H */
