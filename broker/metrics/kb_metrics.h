/*
 * kb_metrics.h -- one metrics registry per broker: counters, gauges and fixed-bucket
 * histograms, each a family (name, help, label names) with labelled children, rendered in the
 * Prometheus text exposition format (version 0.0.4).
 *
 * Cost model: creating a child (kb_metrics_counter() etc.) takes the registry mutex and may
 * allocate; keep the returned handle and update it from any thread with relaxed atomics, no
 * lock. Handles stay valid until kb_metrics_free().
 *
 * Code that owns its numbers elsewhere (the plugin through kbx, process statistics) adds a
 * collector instead: a callback run at every scrape that emits samples with kb_metrics_emit().
 *
 * @thread any; @locks the registry mutex for creation, collectors and rendering only.
 */
#ifndef KB_METRICS_H
#define KB_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct kb_metrics_s kb_metrics_t;

/** A counter child: monotonically increasing. */
typedef struct kb_counter_s {
    _Atomic uint64_t v;
} kb_counter_t;

/** A gauge child: goes up and down. */
typedef struct kb_gauge_s {
    _Atomic int64_t v;
} kb_gauge_t;

/** A floating-point gauge child (ratios, rates, values coming through kbx as doubles). */
typedef struct kb_fgauge_s {
    _Atomic uint64_t bits; /**< double, as bits */
} kb_fgauge_t;

#define KB_HISTO_MAX_BUCKETS 24

/** A histogram child with the family's fixed bucket bounds. */
typedef struct kb_histo_s {
    const double *bounds; /**< upper bounds, ascending, cnt entries (+Inf implied) */
    size_t cnt;
    _Atomic uint64_t buckets[KB_HISTO_MAX_BUCKETS + 1]; /**< not cumulative; last is +Inf */
    _Atomic uint64_t sum_bits;                          /**< double, as bits (CAS updated) */
} kb_histo_t;

/** Bucket bounds (seconds) for request latencies: 0.5 ms .. 30 s. */
extern const double kb_metrics_latency_buckets[];
extern const size_t kb_metrics_latency_buckets_cnt;

kb_metrics_t *kb_metrics_new(void);
/** Free the registry and every child. No update may run concurrently. */
void kb_metrics_free(kb_metrics_t *m);

/**
 * Get or create the child of family @p name with the label pairs @p labels
 * ({"api", "Produce", NULL}; NULL or {NULL} for none). The first call fixes the family's help
 * and label names; later calls must use the same label names in the same order.
 * @return the child, or NULL (out of memory, invalid name, type or label mismatch — logged).
 */
kb_counter_t *kb_metrics_counter(kb_metrics_t *m, const char *name, const char *help,
                                 const char *const *labels);
kb_gauge_t *kb_metrics_gauge(kb_metrics_t *m, const char *name, const char *help,
                             const char *const *labels);
/** A floating-point gauge; same family rules. Rendered as a Prometheus gauge. */
kb_fgauge_t *kb_metrics_fgauge(kb_metrics_t *m, const char *name, const char *help,
                               const char *const *labels);
/** As above; @p bounds (ascending, at most KB_HISTO_MAX_BUCKETS) must outlive the registry. */
kb_histo_t *kb_metrics_histogram(kb_metrics_t *m, const char *name, const char *help,
                                 const double *bounds, size_t cnt, const char *const *labels);

static inline void kb_counter_add(kb_counter_t *c, uint64_t n)
{
    if (c)
        atomic_fetch_add_explicit(&c->v, n, memory_order_relaxed);
}

static inline void kb_gauge_set(kb_gauge_t *g, int64_t v)
{
    if (g)
        atomic_store_explicit(&g->v, v, memory_order_relaxed);
}

static inline void kb_gauge_add(kb_gauge_t *g, int64_t d)
{
    if (g)
        atomic_fetch_add_explicit(&g->v, d, memory_order_relaxed);
}

static inline void kb_fgauge_set(kb_fgauge_t *g, double v)
{
    uint64_t bits;
    if (!g)
        return;
    memcpy(&bits, &v, sizeof(bits));
    atomic_store_explicit(&g->bits, bits, memory_order_relaxed);
}

/** Record one observation (NULL-safe). */
void kb_histo_observe(kb_histo_t *h, double v);

/**
 * Remove one series (a handle returned by kb_metrics_counter/gauge/fgauge/histogram) and free
 * it; it disappears from the exposition. The caller guarantees that no thread updates it any
 * more (kbx's metric_unregister() contract). Unknown handles are ignored.
 */
void kb_metrics_remove(kb_metrics_t *m, const void *series);

/* ---- collectors ---- */

typedef struct kb_metrics_emit_s kb_metrics_emit_t;

/** Called at each scrape with the registry mutex held: emit samples, do not block. */
typedef void(kb_metrics_collect_fn)(void *opaque, kb_metrics_emit_t *em);

typedef enum kb_metric_type_e {
    KB_METRIC_COUNTER,
    KB_METRIC_GAUGE,
    KB_METRIC_UNTYPED,
} kb_metric_type_t;

/** Register a collector; returns a handle for kb_metrics_collector_remove(), or NULL. */
void *kb_metrics_collector_add(kb_metrics_t *m, kb_metrics_collect_fn *fn, void *opaque);
/** Remove it; once this returns the callback is not running and will not run again. */
void kb_metrics_collector_remove(kb_metrics_t *m, void *handle);

/** Emit one sample from a collector; HELP/TYPE lines are written the first time @p name is
 *  seen in this scrape. Invalid names are dropped. */
void kb_metrics_emit(kb_metrics_emit_t *em, const char *name, const char *help,
                     kb_metric_type_t type, const char *const *labels, double value);

/** Render everything in the Prometheus text format into a malloc'd string (caller frees). */
char *kb_metrics_render(kb_metrics_t *m, size_t *lenp);

/** True if @p name is a valid Prometheus metric name. */
int kb_metrics_name_valid(const char *name);

#endif /* KB_METRICS_H */
