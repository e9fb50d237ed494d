/*
 * kb_dq.h -- delayed operations ("purgatory"): requests that wait for something to happen on
 * one or more partitions (long-poll Fetch waiting for min.bytes, acks=all Produce
 * waiting for the high watermark) or for their deadline, whichever comes first.
 *
 * One thread owns the timers (a binary heap on monotonic deadlines) and runs the attempts; it
 * sleeps on a condition variable until the earliest deadline or a wake-up, never polls.
 *
 *  - An operation watches partitions through their kb_dq_watch_t (embedded in the partition).
 *    kb_dq_notify() (called by the partition's append listener, on the writer's thread) marks
 *    every operation watching it ready; the dq thread then calls the operation's try function.
 *  - try(op, expired) returns true when the operation is finished (it completed its request
 *    with kb_dq_op_complete()); false puts it back to waiting (unless expired, which must finish).
 *  - Cancellation (the client went away): kb_dq_op_cancel() from the request's cancel callback.
 *    An operation being tried is only marked; the thread frees it when its attempt returns.
 *    kb_dq_op_complete() and kb_dq_op_cancel() are serialised by the dq lock, which is exactly
 *    the rule kb_req_complete()/kb_req_cancel_fn ask for.
 *  - kb_dq_watch_close() (partition deleted): every watcher is made ready and detached.
 *
 * Ownership: an operation belongs to the dq from kb_dq_op_add() until the dq calls its free
 * function (after a finished attempt, after a cancel, or at kb_dq_stop()).
 *
 * @thread any unless stated; @locks the dq mutex (never held while calling try/free).
 */
#ifndef KB_DQ_H
#define KB_DQ_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_net.h"

typedef struct kb_dq_s kb_dq_t;
typedef struct kb_dq_op_s kb_dq_op_t;
typedef struct kb_dq_node_s kb_dq_node_t;

/** The list of operations watching one partition. Zero-initialised; protected by the dq lock. */
typedef struct kb_dq_watch_s {
    kb_dq_node_t *head;
    bool closed;
    _Atomic uint64_t seq;     /**< bumped by every notification */
    _Atomic size_t nwatchers; /**< linked nodes (lock-free fast path of kb_dq_notify) */
} kb_dq_watch_t;

/** Link of one operation into one watch list (internal). */
struct kb_dq_node_s {
    kb_dq_node_t *prev, *next;
    kb_dq_watch_t *watch; /**< NULL once detached */
    kb_dq_op_t *op;
};

typedef bool(kb_dq_try_fn)(kb_dq_op_t *op, bool expired);
typedef void(kb_dq_free_fn)(kb_dq_op_t *op);

/** Embed as the first member of an operation. Fill try_fn, free_fn, req; the rest is the dq's. */
struct kb_dq_op_s {
    kb_dq_try_fn *try_fn;
    kb_dq_free_fn *free_fn;
    kb_req_t *req; /**< the deferred request (completed through kb_dq_op_complete) */
    kb_dq_t *dq;
    int state;      /**< internal */
    bool cancelled; /**< internal */
    bool renotify;  /**< internal: woken while being tried */
    bool completed; /**< internal */
    int64_t deadline_ns;
    size_t heap_idx;
    kb_dq_op_t *ready_next;
    kb_dq_node_t *nodes;
    size_t node_cnt;
};

/** A dq with its thread started. NULL on failure. */
kb_dq_t *kb_dq_new(void);

/** Stop the thread and free every operation still held (their requests must already be
 *  cancelled: the network server is stopped first). Frees the dq. */
void kb_dq_free(kb_dq_t *dq);

/** Initialise @p op for @p dq and up to @p nwatch watches (call before kb_req_defer so that a
 *  cancel can find the dq). 0 or KB_E_NOMEM. */
int kb_dq_op_init(kb_dq_t *dq, kb_dq_op_t *op, size_t nwatch);

/** Free what kb_dq_op_init() allocated (free functions call it). */
void kb_dq_op_fini(kb_dq_op_t *op);

/** The notification count of @p w; snapshot it before trying an operation for the first time
 *  and pass it to kb_dq_op_add() so an append in between is not missed. */
uint64_t kb_dq_watch_seq(kb_dq_watch_t *w);

/**
 * Hand @p op to the dq: it waits until @p deadline_ns (CLOCK_MONOTONIC) or a notification on
 * one of @p watches (a closed watch, or one whose count moved past @p seq_snap[i], makes it
 * ready at once; @p seq_snap may be NULL). If the op was cancelled already (between
 * kb_req_defer and here) it is freed.
 */
void kb_dq_op_add(kb_dq_t *dq, kb_dq_op_t *op, int64_t deadline_ns, kb_dq_watch_t *const *watches,
                  const uint64_t *seq_snap, size_t nwatch);

/** Make every operation watching @p w ready. Cheap when nobody watches. @thread any (append
 *  listeners) */
void kb_dq_notify(kb_dq_t *dq, kb_dq_watch_t *w);

/** Detach every watcher of @p w (making them ready) and refuse new ones. */
void kb_dq_watch_close(kb_dq_t *dq, kb_dq_watch_t *w);

/**
 * Complete the op's request with @p resp (NULL: no response) unless it was cancelled (then
 * @p resp is freed). Call from try_fn, at most once.
 */
void kb_dq_op_complete(kb_dq_op_t *op, kb_resp_t *resp);

/** kb_req_cancel_fn for deferred requests owned by a dq op (opaque = the op). */
void kb_dq_op_cancel(void *opaque, kb_req_t *req);

/** Number of operations waiting (tests, metrics). */
size_t kb_dq_count(kb_dq_t *dq);

#endif /* KB_DQ_H */
