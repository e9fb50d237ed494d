/*
 * kb_dq.c -- delayed operations: a deadline heap, per-partition watch lists and one thread
 * that retries ready operations (see kb_dq.h).
 */
#include "kb_dq.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kb_err.h"
#include "kb_apilog.h"
#include "kb_time.h"

enum { KB_DQ_NEW = 0, KB_DQ_WAITING, KB_DQ_READY, KB_DQ_RUNNING, KB_DQ_DONE };

struct kb_dq_s {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    pthread_t thr;
    bool stop;
    kb_dq_op_t **heap;
    size_t heap_n, heap_cap;
    kb_dq_op_t *ready_head, *ready_tail;
    size_t count; /* ops owned (waiting, ready or running) */
};

/* ---- heap on deadline_ns ----------------------------------------------------------------- */

static void kb_dq_heap_swap(kb_dq_t *dq, size_t a, size_t b)
{
    kb_dq_op_t *t = dq->heap[a];
    dq->heap[a] = dq->heap[b];
    dq->heap[b] = t;
    dq->heap[a]->heap_idx = a;
    dq->heap[b]->heap_idx = b;
}

static void kb_dq_heap_up(kb_dq_t *dq, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (dq->heap[p]->deadline_ns <= dq->heap[i]->deadline_ns)
            break;
        kb_dq_heap_swap(dq, p, i);
        i = p;
    }
}

static void kb_dq_heap_down(kb_dq_t *dq, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < dq->heap_n && dq->heap[l]->deadline_ns < dq->heap[m]->deadline_ns)
            m = l;
        if (r < dq->heap_n && dq->heap[r]->deadline_ns < dq->heap[m]->deadline_ns)
            m = r;
        if (m == i)
            return;
        kb_dq_heap_swap(dq, i, m);
        i = m;
    }
}

static int kb_dq_heap_push(kb_dq_t *dq, kb_dq_op_t *op)
{
    if (dq->heap_n == dq->heap_cap) {
        size_t nc = dq->heap_cap ? dq->heap_cap * 2 : 64;
        kb_dq_op_t **nv = realloc(dq->heap, nc * sizeof(*nv));
        if (!nv)
            return KB_E_NOMEM;
        dq->heap = nv;
        dq->heap_cap = nc;
    }
    op->heap_idx = dq->heap_n;
    dq->heap[dq->heap_n++] = op;
    kb_dq_heap_up(dq, op->heap_idx);
    return 0;
}

static void kb_dq_heap_remove(kb_dq_t *dq, kb_dq_op_t *op)
{
    size_t i = op->heap_idx;
    if (i >= dq->heap_n || dq->heap[i] != op)
        return;
    dq->heap_n--;
    if (i != dq->heap_n) {
        dq->heap[i] = dq->heap[dq->heap_n];
        dq->heap[i]->heap_idx = i;
        kb_dq_heap_down(dq, i);
        kb_dq_heap_up(dq, i);
    }
    op->heap_idx = (size_t)-1;
}

/* ---- watch lists ------------------------------------------------------------------------- */

static void kb_dq_node_unlink(kb_dq_node_t *n)
{
    kb_dq_watch_t *w = n->watch;
    if (!w)
        return;
    if (n->prev)
        n->prev->next = n->next;
    else
        w->head = n->next;
    if (n->next)
        n->next->prev = n->prev;
    n->prev = n->next = NULL;
    n->watch = NULL;
    atomic_fetch_sub(&w->nwatchers, 1);
}

static void kb_dq_op_unlink_all(kb_dq_op_t *op)
{
    for (size_t i = 0; i < op->node_cnt; i++)
        kb_dq_node_unlink(&op->nodes[i]);
}

static void kb_dq_make_ready(kb_dq_t *dq, kb_dq_op_t *op)
{
    if (op->state == KB_DQ_RUNNING) {
        op->renotify = true;
        return;
    }
    if (op->state != KB_DQ_WAITING)
        return;
    op->state = KB_DQ_READY;
    op->ready_next = NULL;
    if (dq->ready_tail)
        dq->ready_tail->ready_next = op;
    else
        dq->ready_head = op;
    dq->ready_tail = op;
    pthread_cond_signal(&dq->cv);
}

/* ---- the thread -------------------------------------------------------------------------- */

static void *kb_dq_thread(void *arg)
{
    kb_dq_t *dq = arg;
    pthread_mutex_lock(&dq->mu);
    for (;;) {
        kb_dq_op_t *op = NULL;
        bool expired, done;
        int64_t now = kb_time_mono_ns();
        while (!dq->stop && !dq->ready_head && !(dq->heap_n && dq->heap[0]->deadline_ns <= now)) {
            if (dq->heap_n) {
                int64_t d = dq->heap[0]->deadline_ns;
                struct timespec ts = {.tv_sec = d / 1000000000, .tv_nsec = d % 1000000000};
                pthread_cond_timedwait(&dq->cv, &dq->mu, &ts);
            } else {
                pthread_cond_wait(&dq->cv, &dq->mu);
            }
            now = kb_time_mono_ns();
        }
        if (dq->stop)
            break;
        if (dq->ready_head) {
            op = dq->ready_head;
            dq->ready_head = op->ready_next;
            if (!dq->ready_head)
                dq->ready_tail = NULL;
            op->ready_next = NULL;
        } else {
            op = dq->heap[0];
        }
        kb_dq_heap_remove(dq, op);
        if (op->cancelled) {
            kb_dq_op_unlink_all(op);
            op->state = KB_DQ_DONE;
            dq->count--;
            pthread_mutex_unlock(&dq->mu);
            op->free_fn(op);
            pthread_mutex_lock(&dq->mu);
            continue;
        }
        expired = op->deadline_ns <= now;
        op->state = KB_DQ_RUNNING;
        op->renotify = false;
        pthread_mutex_unlock(&dq->mu);

        done = op->try_fn(op, expired);

        pthread_mutex_lock(&dq->mu);
        if (done || expired || op->cancelled) {
            if (!op->completed && !op->cancelled && op->req)
                kb_log_error("dq", "a delayed operation finished without completing its request");
            kb_dq_op_unlink_all(op);
            op->state = KB_DQ_DONE;
            dq->count--;
            pthread_mutex_unlock(&dq->mu);
            op->free_fn(op);
            pthread_mutex_lock(&dq->mu);
            continue;
        }
        op->state = KB_DQ_WAITING;
        if (kb_dq_heap_push(dq, op) != 0) {
            /* No memory for the timer: answer now rather than lose the request. */
            op->deadline_ns = now;
            op->renotify = true;
        }
        if (op->renotify)
            kb_dq_make_ready(dq, op);
    }
    pthread_mutex_unlock(&dq->mu);
    return NULL;
}

kb_dq_t *kb_dq_new(void)
{
    kb_dq_t *dq = calloc(1, sizeof(*dq));
    pthread_condattr_t ca;
    if (!dq)
        return NULL;
    pthread_mutex_init(&dq->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&dq->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&dq->thr, NULL, kb_dq_thread, dq) != 0) {
        pthread_cond_destroy(&dq->cv);
        pthread_mutex_destroy(&dq->mu);
        free(dq);
        return NULL;
    }
    pthread_setname_np(dq->thr, "kb-delayed");
    return dq;
}

void kb_dq_free(kb_dq_t *dq)
{
    if (!dq)
        return;
    pthread_mutex_lock(&dq->mu);
    dq->stop = true;
    pthread_cond_broadcast(&dq->cv);
    pthread_mutex_unlock(&dq->mu);
    pthread_join(dq->thr, NULL);
    /* Whatever is left: ready ones are also in no heap; waiting ones are in the heap. */
    while (dq->ready_head) {
        kb_dq_op_t *op = dq->ready_head;
        dq->ready_head = op->ready_next;
        kb_dq_op_unlink_all(op);
        op->free_fn(op);
    }
    for (size_t i = 0; i < dq->heap_n; i++) {
        kb_dq_op_unlink_all(dq->heap[i]);
        dq->heap[i]->free_fn(dq->heap[i]);
    }
    free(dq->heap);
    pthread_cond_destroy(&dq->cv);
    pthread_mutex_destroy(&dq->mu);
    free(dq);
}

int kb_dq_op_init(kb_dq_t *dq, kb_dq_op_t *op, size_t nwatch)
{
    op->dq = dq;
    op->state = KB_DQ_NEW;
    op->cancelled = op->renotify = op->completed = false;
    op->heap_idx = (size_t)-1;
    op->ready_next = NULL;
    op->node_cnt = 0;
    op->nodes = nwatch ? calloc(nwatch, sizeof(*op->nodes)) : NULL;
    if (nwatch && !op->nodes)
        return KB_E_NOMEM;
    return 0;
}

void kb_dq_op_fini(kb_dq_op_t *op)
{
    free(op->nodes);
    op->nodes = NULL;
    op->node_cnt = 0;
}

uint64_t kb_dq_watch_seq(kb_dq_watch_t *w)
{
    return atomic_load(&w->seq);
}

void kb_dq_op_add(kb_dq_t *dq, kb_dq_op_t *op, int64_t deadline_ns, kb_dq_watch_t *const *watches,
                  const uint64_t *seq_snap, size_t nwatch)
{
    bool ready = false;
    pthread_mutex_lock(&dq->mu);
    if (op->cancelled) {
        pthread_mutex_unlock(&dq->mu);
        op->free_fn(op);
        return;
    }
    op->deadline_ns = deadline_ns;
    for (size_t i = 0; i < nwatch; i++) {
        kb_dq_watch_t *w = watches[i];
        kb_dq_node_t *n = &op->nodes[op->node_cnt];
        if (w->closed) {
            ready = true;
            continue;
        }
        n->op = op;
        n->watch = w;
        n->prev = NULL;
        n->next = w->head;
        if (w->head)
            w->head->prev = n;
        w->head = n;
        op->node_cnt++;
        atomic_fetch_add(&w->nwatchers, 1);
        /* An append between the caller's attempt and here: try again at once. */
        if (seq_snap && atomic_load(&w->seq) != seq_snap[i])
            ready = true;
    }
    op->state = KB_DQ_WAITING;
    dq->count++;
    if (kb_dq_heap_push(dq, op) != 0)
        ready = true, op->deadline_ns = kb_time_mono_ns();
    else if (op->heap_idx == 0)
        pthread_cond_signal(&dq->cv);
    if (ready)
        kb_dq_make_ready(dq, op);
    pthread_mutex_unlock(&dq->mu);
}

void kb_dq_notify(kb_dq_t *dq, kb_dq_watch_t *w)
{
    atomic_fetch_add(&w->seq, 1);
    if (atomic_load(&w->nwatchers) == 0)
        return;
    pthread_mutex_lock(&dq->mu);
    for (kb_dq_node_t *n = w->head; n; n = n->next)
        kb_dq_make_ready(dq, n->op);
    pthread_mutex_unlock(&dq->mu);
}

void kb_dq_watch_close(kb_dq_t *dq, kb_dq_watch_t *w)
{
    atomic_fetch_add(&w->seq, 1);
    pthread_mutex_lock(&dq->mu);
    w->closed = true;
    while (w->head) {
        kb_dq_node_t *n = w->head;
        kb_dq_make_ready(dq, n->op);
        kb_dq_node_unlink(n);
    }
    pthread_mutex_unlock(&dq->mu);
}

void kb_dq_op_complete(kb_dq_op_t *op, kb_resp_t *resp)
{
    kb_dq_t *dq = op->dq;
    pthread_mutex_lock(&dq->mu);
    if (op->completed || op->cancelled) {
        kb_resp_free(resp);
    } else {
        kb_req_complete(op->req, resp);
        op->completed = true;
    }
    pthread_mutex_unlock(&dq->mu);
}

void kb_dq_op_cancel(void *opaque, kb_req_t *req)
{
    kb_dq_op_t *op = opaque;
    kb_dq_t *dq = op->dq;
    bool free_now = false;
    (void)req;
    pthread_mutex_lock(&dq->mu);
    op->cancelled = true;
    if (op->state == KB_DQ_WAITING) {
        kb_dq_heap_remove(dq, op);
        kb_dq_op_unlink_all(op);
        op->state = KB_DQ_DONE;
        dq->count--;
        free_now = true;
    }
    /* NEW: kb_dq_op_add() sees the flag and frees it; READY: the thread pops it and frees
     * it; RUNNING: freed when the attempt returns. */
    pthread_mutex_unlock(&dq->mu);
    if (free_now)
        op->free_fn(op);
}

size_t kb_dq_count(kb_dq_t *dq)
{
    size_t n;
    pthread_mutex_lock(&dq->mu);
    n = dq->count;
    pthread_mutex_unlock(&dq->mu);
    return n;
}
