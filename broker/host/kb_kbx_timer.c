/*
 * kb_kbx_timer.c -- kbx timers: one thread ("kb-kbx-timer") and one binary min-heap ordered by
 * due time (CLOCK_MONOTONIC). Callbacks run on that thread without the heap lock.
 *
 * timer_cancel is synchronous: when it returns the callback is not running and will not run
 * again. Called from another thread while the callback runs, it waits for the callback to
 * return; called from the callback itself, it only marks the timer and the timer thread frees
 * it after the callback returns. A one-shot timer that fired stays allocated (out of the heap)
 * until the plugin cancels it, as kbx.h requires.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kb_host_int.h"
#include "kb_time.h"

#define KB_TIMER_NOT_QUEUED SIZE_MAX

struct kbx_timer {
    uint32_t magic;
    kbx_host_t *host;
    int64_t due_ns;
    int64_t period_ns; /**< 0: one-shot */
    kbx_timer_fn fn;
    void *arg;
    size_t idx;     /**< heap index, or KB_TIMER_NOT_QUEUED */
    bool cancelled; /**< cancelled from its own callback: freed by the timer thread */
};

static bool kb_timer_less(const struct kbx_timer *a, const struct kbx_timer *b)
{
    return a->due_ns < b->due_ns;
}

static void kb_timer_swap(kb_htimers_t *t, size_t i, size_t j)
{
    struct kbx_timer *x = t->heap[i];
    t->heap[i] = t->heap[j];
    t->heap[j] = x;
    t->heap[i]->idx = i;
    t->heap[j]->idx = j;
}

static void kb_timer_up(kb_htimers_t *t, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!kb_timer_less(t->heap[i], t->heap[p]))
            break;
        kb_timer_swap(t, i, p);
        i = p;
    }
}

static void kb_timer_down(kb_htimers_t *t, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < t->n && kb_timer_less(t->heap[l], t->heap[m]))
            m = l;
        if (r < t->n && kb_timer_less(t->heap[r], t->heap[m]))
            m = r;
        if (m == i)
            return;
        kb_timer_swap(t, i, m);
        i = m;
    }
}

/* mu held */
static int kb_timer_push(kb_htimers_t *t, struct kbx_timer *tm)
{
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 32;
        struct kbx_timer **nh = realloc(t->heap, nc * sizeof(*nh));
        if (!nh)
            return -1;
        t->heap = nh;
        t->cap = nc;
    }
    tm->idx = t->n;
    t->heap[t->n++] = tm;
    kb_timer_up(t, tm->idx);
    return 0;
}

/* mu held */
static void kb_timer_remove(kb_htimers_t *t, struct kbx_timer *tm)
{
    size_t i = tm->idx;
    if (i == KB_TIMER_NOT_QUEUED)
        return;
    tm->idx = KB_TIMER_NOT_QUEUED;
    if (i == --t->n)
        return;
    t->heap[i] = t->heap[t->n];
    t->heap[i]->idx = i;
    kb_timer_down(t, i);
    kb_timer_up(t, i);
}

static void *kb_htimers_main(void *arg)
{
    kb_htimers_t *t = arg;

    pthread_setname_np(pthread_self(), "kb-kbx-timer");
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        struct kbx_timer *tm;
        int64_t now = kb_time_mono_ns();
        if (t->n == 0) {
            pthread_cond_wait(&t->cv, &t->mu);
            continue;
        }
        tm = t->heap[0];
        if (tm->due_ns > now) {
            struct timespec ts = {.tv_sec = tm->due_ns / 1000000000,
                                  .tv_nsec = tm->due_ns % 1000000000};
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
            continue;
        }
        kb_timer_remove(t, tm);
        t->running = tm;
        pthread_mutex_unlock(&t->mu);
        if (!atomic_load(&tm->host->dead))
            tm->fn(tm->arg);
        pthread_mutex_lock(&t->mu);
        t->running = NULL;
        if (tm->cancelled) {
            tm->magic = KB_DEAD_MAGIC;
            atomic_fetch_sub(&tm->host->n_timers, 1);
            free(tm);
        } else if (tm->period_ns > 0) {
            /* Next due time from the schedule, not from now, unless we fell behind by more
             * than a period (then skip the missed firings). */
            tm->due_ns += tm->period_ns;
            if (tm->due_ns < kb_time_mono_ns())
                tm->due_ns = kb_time_mono_ns() + tm->period_ns;
            if (kb_timer_push(t, tm) != 0)
                kb_host_misuse(tm->host, "periodic timer dropped: out of memory");
        }
        pthread_cond_broadcast(&t->done_cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

int kb_htimers_init(kb_htimers_t *t)
{
    pthread_condattr_t ca;
    memset(t, 0, sizeof(*t));
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&t->done_cv, NULL);
    return 0;
}

int kb_htimers_start(kb_htimers_t *t)
{
    sigset_t all, old;
    int rc;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&t->thr, NULL, kb_htimers_main, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return -1;
    t->started = true;
    return 0;
}

void kb_htimers_stop(kb_htimers_t *t)
{
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (t->started)
        pthread_join(t->thr, NULL);
    t->started = false;
    /* Timers still here belong to plugins that did not cancel them (reported at unload). */
    for (size_t i = 0; i < t->n; i++) {
        t->heap[i]->magic = KB_DEAD_MAGIC;
        free(t->heap[i]);
    }
    free(t->heap);
    t->heap = NULL;
    t->n = t->cap = 0;
    pthread_cond_destroy(&t->cv);
    pthread_cond_destroy(&t->done_cv);
    pthread_mutex_destroy(&t->mu);
}

static int32_t kb_kbx_timer_start(kbx_host_t *host, int64_t delay_ms, int64_t period_ms,
                                  kbx_timer_fn fn, void *arg, kbx_timer_t **out)
{
    kb_htimers_t *t;
    struct kbx_timer *tm;

    if (!kb_host_from(host, "timer_start") || !fn || !out || delay_ms < 0 || period_ms < 0)
        return KBX_ERR_INVALID;
    t = &host->h->timers;
    tm = calloc(1, sizeof(*tm));
    if (!tm)
        return KBX_ERR_NOMEM;
    tm->magic = KB_TIMER_MAGIC;
    tm->host = host;
    tm->fn = fn;
    tm->arg = arg;
    tm->due_ns = kb_time_mono_ns() + delay_ms * 1000000;
    tm->period_ns = period_ms * 1000000;
    pthread_mutex_lock(&t->mu);
    if (kb_timer_push(t, tm) != 0) {
        pthread_mutex_unlock(&t->mu);
        free(tm);
        return KBX_ERR_NOMEM;
    }
    if (tm->idx == 0)
        pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    atomic_fetch_add(&host->n_timers, 1);
    *out = tm;
    return KBX_OK;
}

static void kb_kbx_timer_cancel(kbx_host_t *host, kbx_timer_t *tm)
{
    kb_htimers_t *t;

    if (!kb_host_from(host, "timer_cancel") || !kb_host_check(host, tm, KB_TIMER_MAGIC, "timer"))
        return;
    t = &host->h->timers;
    pthread_mutex_lock(&t->mu);
    if (t->running == tm && pthread_equal(t->thr, pthread_self())) {
        /* From its own callback: the timer thread frees it when the callback returns. */
        tm->cancelled = true;
        pthread_mutex_unlock(&t->mu);
        return;
    }
    while (t->running == tm)
        pthread_cond_wait(&t->done_cv, &t->mu);
    kb_timer_remove(t, tm);
    pthread_mutex_unlock(&t->mu);
    tm->magic = KB_DEAD_MAGIC;
    atomic_fetch_sub(&host->n_timers, 1);
    free(tm);
}

void kb_kbx_timer_fill(kbx_api_t *t)
{
    t->timer_start = kb_kbx_timer_start;
    t->timer_cancel = kb_kbx_timer_cancel;
}
