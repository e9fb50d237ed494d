/*
 * kb_host_ev.c -- the FIFOs of the host threads "kb-kbx-event" and "kb-kbx-local".
 *
 * An item is a function plus its data (kb_hev_t at the start of a larger struct). The thread
 * runs items in order, without the queue lock. A placeholder (ready false) stops the queue until
 * it is filled: metadata_listen reserves the snapshot's place in the order before it asks the
 * metadata layer for the snapshot, so no later change can overtake it.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "kb_host_int.h"

int kb_hq_init(kb_hq_t *q, const char *name)
{
    memset(q, 0, sizeof(*q));
    q->name = name;
    if (pthread_mutex_init(&q->mu, NULL) != 0)
        return -1;
    pthread_cond_init(&q->cv, NULL);
    pthread_cond_init(&q->idle_cv, NULL);
    return 0;
}

bool kb_hq_on_thread(const kb_hq_t *q)
{
    return q->started && pthread_equal(q->thr, pthread_self());
}

static void *kb_hq_main(void *arg)
{
    kb_hq_t *q = arg;
    kb_hev_t *ev;

    pthread_setname_np(pthread_self(), q->name);
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while ((!q->head && !q->stop) || (q->head && !atomic_load(&q->head->ready)))
            pthread_cond_wait(&q->cv, &q->mu);
        if (!q->head)
            break; /* stop, and everything queued before it has run */
        ev = q->head;
        q->head = ev->next;
        if (!q->head)
            q->tail = NULL;
        ev->next = NULL;
        pthread_mutex_unlock(&q->mu);
        ev->fn(q, ev, true);
        pthread_mutex_lock(&q->mu);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

int kb_hq_start(kb_hq_t *q)
{
    sigset_t all, old;
    int rc;

    /* Host threads take no signals: the main thread waits for SIGTERM/SIGINT. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&q->thr, NULL, kb_hq_main, q);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return -1;
    q->started = true;
    return 0;
}

void kb_hq_push(kb_hq_t *q, kb_hev_t *ev)
{
    bool drop;

    ev->next = NULL;
    pthread_mutex_lock(&q->mu);
    drop = q->stop && !q->started;
    if (!drop) {
        if (q->tail)
            q->tail->next = ev;
        else
            q->head = ev;
        q->tail = ev;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    if (drop)
        ev->fn(q, ev, false);
}

void kb_hq_set_ready(kb_hq_t *q, kb_hev_t *ev)
{
    pthread_mutex_lock(&q->mu);
    atomic_store(&ev->ready, true);
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

void kb_hq_stop(kb_hq_t *q)
{
    kb_hev_t *ev;

    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    if (q->started)
        pthread_join(q->thr, NULL);
    pthread_mutex_lock(&q->mu);
    q->started = false;
    ev = q->head;
    q->head = q->tail = NULL;
    pthread_mutex_unlock(&q->mu);
    while (ev) {
        kb_hev_t *next = ev->next;
        ev->fn(q, ev, false);
        ev = next;
    }
}

void kb_hq_destroy(kb_hq_t *q)
{
    pthread_cond_destroy(&q->cv);
    pthread_cond_destroy(&q->idle_cv);
    pthread_mutex_destroy(&q->mu);
}

kb_hev_t *kb_hq_take_run(kb_hq_t *q, kb_hlistener_t *l,
                         bool (*same)(const kb_hev_t *a, const kb_hev_t *b), const kb_hev_t *first)
{
    kb_hev_t *out = NULL, **tail = &out;

    pthread_mutex_lock(&q->mu);
    while (q->head && q->head->listener == l && atomic_load(&q->head->ready) &&
           same(first, q->head)) {
        kb_hev_t *ev = q->head;
        q->head = ev->next;
        if (!q->head)
            q->tail = NULL;
        ev->next = NULL;
        *tail = ev;
        tail = &ev->next;
    }
    pthread_mutex_unlock(&q->mu);
    return out;
}

void kb_hq_set_current(kb_hq_t *q, kb_hlistener_t *l)
{
    pthread_mutex_lock(&q->mu);
    q->cur_listener = l;
    if (!l)
        pthread_cond_broadcast(&q->idle_cv);
    pthread_mutex_unlock(&q->mu);
}

void kb_hq_forget_listener(kb_hq_t *q, kb_hlistener_t *l)
{
    kb_hev_t **pp, *dropped = NULL;
    bool self = kb_hq_on_thread(q);

    pthread_mutex_lock(&q->mu);
    for (pp = &q->head; *pp;) {
        kb_hev_t *ev = *pp;
        if (ev->listener == l) {
            *pp = ev->next;
            ev->next = dropped;
            dropped = ev;
        } else {
            pp = &ev->next;
        }
    }
    q->tail = NULL;
    for (kb_hev_t *ev = q->head; ev; ev = ev->next)
        q->tail = ev;
    while (!self && q->cur_listener == l)
        pthread_cond_wait(&q->idle_cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
    while (dropped) {
        kb_hev_t *next = dropped->next;
        dropped->fn(q, dropped, false);
        dropped = next;
    }
}
