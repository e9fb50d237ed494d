/*
 * kb_time.h -- clocks. Monotonic time for deadlines and latencies, wall time for logs.
 *
 * @thread any
 */
#ifndef KB_TIME_H
#define KB_TIME_H

#include <stdint.h>
#include <time.h>

static inline int64_t kb_time_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t kb_time_mono_ms(void)
{
    return kb_time_mono_ns() / 1000000;
}

static inline int64_t kb_time_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/** Absolute CLOCK_MONOTONIC timespec @p ms from now, for pthread_cond_timedwait on a
 *  condition variable created with kb_cond_init_mono(). */
static inline struct timespec kb_time_mono_deadline(int64_t ms)
{
    int64_t ns = kb_time_mono_ns() + ms * 1000000;
    struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    return ts;
}

#endif /* KB_TIME_H */
