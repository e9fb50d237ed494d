/*
 * kb_kbx_metric.c -- kbx metrics in kbroker's registry (broker/metrics), so they show on the
 * Prometheus endpoint with the broker's own.
 *
 * Name: group and name joined by '_', every character outside [a-zA-Z0-9_:] turned into '_'
 * ("kafka.server.mirror" + "FailedPartitionsCount" -> kafka_server_mirror_FailedPartitionsCount).
 * Labels: the descriptor's pairs, in order (a family's label keys are fixed by its first series).
 * Types: counter -> kb counter (kbx adds doubles: the host keeps the exact sum and shows its
 * integer part), gauge -> floating-point gauge, histogram -> histogram with fixed buckets
 * (kb_kbx_histo_bounds, 0.5 ms .. 1e7, for seconds, milliseconds or bytes alike).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_host_int.h"

static const double kb_kbx_histo_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                             0.25,   0.5,   1,      2.5,   5,    10,    25,   50,
                                             100,    250,   500,    1000,  1e4,  1e5,   1e6,  1e7};

_Static_assert(sizeof(kb_kbx_histo_bounds) / sizeof(kb_kbx_histo_bounds[0]) <= KB_HISTO_MAX_BUCKETS,
               "histogram buckets fit the registry");

struct kbx_metric {
    uint32_t magic;
    int32_t type;
    kbx_host_t *host;
    void *series;            /**< kb_counter_t / kb_fgauge_t / kb_histo_t */
    _Atomic uint64_t sum;    /**< counter: exact sum (double bits) */
    char *id;                /**< family name + labels, for KBX_ERR_EXISTS */
    struct kbx_metric *next; /**< kb_host_t.metrics */
};

static char *kb_kbx_metric_name(const char *group, const char *name)
{
    size_t n = (group ? strlen(group) + 1 : 0) + strlen(name) + 1;
    char *s = malloc(n);
    if (!s)
        return NULL;
    snprintf(s, n, "%s%s%s", group ? group : "", group ? "_" : "", name);
    for (char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == ':'))
            *p = '_';
    return s;
}

static int32_t kb_kbx_metric_register(kbx_host_t *host, const kbx_metric_desc_t *desc,
                                      kbx_metric_t **out)
{
    kbx_metric_desc_t d;
    struct kbx_metric *m = NULL;
    const char **labels = NULL;
    char *fam = NULL, *id = NULL;
    size_t idlen;
    kb_host_t *h;
    int32_t rc = KBX_ERR_INVALID;

    if (!kb_host_from(host, "metric_register") || !desc || !out)
        return KBX_ERR_INVALID;
    h = host->h;
    kbx_ops_copy(&d, sizeof(d), desc);
    if (!d.name || !d.name[0] || (d.label_count && (!d.label_keys || !d.label_values)) ||
        d.label_count > 16)
        return KBX_ERR_INVALID;
    if (d.type != KBX_METRIC_COUNTER && d.type != KBX_METRIC_GAUGE &&
        d.type != KBX_METRIC_HISTOGRAM)
        return KBX_ERR_INVALID;
    fam = kb_kbx_metric_name(d.group, d.name);
    labels = calloc(2 * d.label_count + 1, sizeof(*labels));
    if (!fam || !labels) {
        rc = KBX_ERR_NOMEM;
        goto out;
    }
    if (!kb_metrics_name_valid(fam)) {
        kb_host_misuse(host, "metric name %s is not a valid Prometheus name", fam);
        goto out;
    }
    idlen = strlen(fam) + 1;
    for (uint32_t i = 0; i < d.label_count; i++) {
        if (!d.label_keys[i] || !d.label_values[i])
            goto out;
        labels[2 * i] = d.label_keys[i];
        labels[2 * i + 1] = d.label_values[i];
        idlen += strlen(d.label_keys[i]) + strlen(d.label_values[i]) + 2;
    }
    id = malloc(idlen);
    m = calloc(1, sizeof(*m));
    if (!id || !m) {
        rc = KBX_ERR_NOMEM;
        goto out;
    }
    {
        size_t o = (size_t)snprintf(id, idlen, "%s", fam);
        for (uint32_t i = 0; i < d.label_count; i++)
            o += (size_t)snprintf(id + o, idlen - o, "\x1f%s\x1e%s", labels[2 * i],
                                  labels[2 * i + 1]);
    }
    pthread_mutex_lock(&h->met_mu);
    for (struct kbx_metric *x = h->metrics; x; x = x->next) {
        if (!strcmp(x->id, id)) {
            pthread_mutex_unlock(&h->met_mu);
            rc = KBX_ERR_EXISTS;
            goto out;
        }
    }
    switch (d.type) {
    case KBX_METRIC_COUNTER:
        m->series = kb_metrics_counter(h->kb->metrics, fam, d.help, labels);
        break;
    case KBX_METRIC_GAUGE:
        m->series = kb_metrics_fgauge(h->kb->metrics, fam, d.help, labels);
        break;
    default:
        m->series = kb_metrics_histogram(
            h->kb->metrics, fam, d.help, kb_kbx_histo_bounds,
            sizeof(kb_kbx_histo_bounds) / sizeof(kb_kbx_histo_bounds[0]), labels);
        break;
    }
    if (!m->series) {
        /* Another type or other label keys under that name (logged by the registry). */
        pthread_mutex_unlock(&h->met_mu);
        goto out;
    }
    m->magic = KB_METRIC_MAGIC;
    m->type = d.type;
    m->host = host;
    m->id = id;
    id = NULL;
    m->next = h->metrics;
    h->metrics = m;
    pthread_mutex_unlock(&h->met_mu);
    atomic_fetch_add(&host->n_metrics, 1);
    *out = m;
    m = NULL;
    rc = KBX_OK;
out:
    free(m);
    free(id);
    free(labels);
    free(fam);
    return rc;
}

static void kb_kbx_metric_record(kbx_host_t *host, kbx_metric_t *m, double v)
{
    if (!kb_host_check(host, m, KB_METRIC_MAGIC, "metric"))
        return;
    switch (m->type) {
    case KBX_METRIC_COUNTER: {
        uint64_t old, nw;
        double sum;
        kb_counter_t *c = m->series;
        if (!(v >= 0) || isinf(v))
            return; /* counters only go up */
        old = atomic_load(&m->sum);
        do {
            memcpy(&sum, &old, sizeof(sum));
            sum += v;
            memcpy(&nw, &sum, sizeof(nw));
        } while (!atomic_compare_exchange_weak(&m->sum, &old, nw));
        atomic_store_explicit(&c->v, (uint64_t)sum, memory_order_relaxed);
        break;
    }
    case KBX_METRIC_GAUGE:
        kb_fgauge_set(m->series, v);
        break;
    default:
        kb_histo_observe(m->series, v);
        break;
    }
}

/* h->met_mu held (never h->mu: a scrape holds the registry's mutex and then takes h->mu in
 * the host's collector); m unlinked by the caller. */
static void kb_kbx_metric_free(kb_host_t *h, struct kbx_metric *m)
{
    kb_metrics_remove(h->kb->metrics, m->series);
    atomic_fetch_sub(&m->host->n_metrics, 1);
    m->magic = KB_DEAD_MAGIC;
    free(m->id);
    free(m);
}

static void kb_kbx_metric_unregister(kbx_host_t *host, kbx_metric_t *m)
{
    kb_host_t *h;
    struct kbx_metric **pp;
    if (!m || !kb_host_check(host, m, KB_METRIC_MAGIC, "metric"))
        return;
    h = host->h;
    pthread_mutex_lock(&h->met_mu);
    for (pp = &h->metrics; *pp && *pp != m; pp = &(*pp)->next)
        ;
    if (*pp) {
        *pp = m->next;
        kb_kbx_metric_free(h, m);
    }
    pthread_mutex_unlock(&h->met_mu);
}

void kb_kbx_metric_drop_all(kb_host_t *h, kbx_host_t *host)
{
    struct kbx_metric **pp;
    pthread_mutex_lock(&h->met_mu);
    for (pp = &h->metrics; *pp;) {
        struct kbx_metric *m = *pp;
        if (m->host == host) {
            *pp = m->next;
            kb_kbx_metric_free(h, m);
        } else {
            pp = &m->next;
        }
    }
    pthread_mutex_unlock(&h->met_mu);
}

void kb_kbx_metric_fill(kbx_api_t *t)
{
    t->metric_register = kb_kbx_metric_register;
    t->metric_record = kb_kbx_metric_record;
    t->metric_unregister = kb_kbx_metric_unregister;
}
