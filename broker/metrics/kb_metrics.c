#include "kb_metrics.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kb_log.h"

const double kb_metrics_latency_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                             0.25,   0.5,   1,      2.5,   5,    10,    30};
const size_t kb_metrics_latency_buckets_cnt =
    sizeof(kb_metrics_latency_buckets) / sizeof(kb_metrics_latency_buckets[0]);

typedef enum kb_mtype_e { KB_MT_COUNTER, KB_MT_GAUGE, KB_MT_HISTO, KB_MT_FGAUGE } kb_mtype_t;

typedef struct kb_mchild_s {
    struct kb_mchild_s *next;
    char **lvals;
    union {
        kb_counter_t c;
        kb_gauge_t g;
        kb_fgauge_t fg;
        kb_histo_t h;
    } u;
} kb_mchild_t;

typedef struct kb_mfamily_s {
    struct kb_mfamily_s *next;
    char *name;
    char *help;
    kb_mtype_t type;
    char **lnames;
    size_t nlabels;
    const double *bounds;
    size_t nbounds;
    kb_mchild_t *head, *tail;
} kb_mfamily_t;

typedef struct kb_mcollector_s {
    struct kb_mcollector_s *next;
    kb_metrics_collect_fn *fn;
    void *opaque;
} kb_mcollector_t;

struct kb_metrics_s {
    pthread_mutex_t mu;
    kb_mfamily_t *fam_head, *fam_tail;
    kb_mcollector_t *coll;
};

/* ---------------------------------------------------------------- string builder */

typedef struct kb_msb_s {
    char *p;
    size_t len, cap;
    int oom;
} kb_msb_t;

static void kb_msb_printf(kb_msb_t *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void kb_msb_printf(kb_msb_t *sb, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (sb->oom)
        return;
    for (;;) {
        size_t room = sb->cap - sb->len;
        va_start(ap, fmt);
        n = vsnprintf(sb->p ? sb->p + sb->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            sb->oom = 1;
            return;
        }
        if ((size_t)n < room) {
            sb->len += (size_t)n;
            return;
        }
        size_t ncap = sb->cap ? sb->cap * 2 : 4096;
        while (ncap - sb->len <= (size_t)n)
            ncap *= 2;
        char *np = realloc(sb->p, ncap);
        if (!np) {
            sb->oom = 1;
            return;
        }
        sb->p = np;
        sb->cap = ncap;
    }
}

/* Label value escaping: backslash, double quote and newline. */
static void kb_msb_label_value(kb_msb_t *sb, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            kb_msb_printf(sb, "\\\\");
        else if (*v == '"')
            kb_msb_printf(sb, "\\\"");
        else if (*v == '\n')
            kb_msb_printf(sb, "\\n");
        else
            kb_msb_printf(sb, "%c", *v);
    }
}

/* HELP text escaping: backslash and newline. */
static void kb_msb_help(kb_msb_t *sb, const char *v)
{
    for (; v && *v; v++) {
        if (*v == '\\')
            kb_msb_printf(sb, "\\\\");
        else if (*v == '\n')
            kb_msb_printf(sb, "\\n");
        else
            kb_msb_printf(sb, "%c", *v);
    }
}

/* "{a="x",b="y"}" with an optional extra label (le for buckets). Nothing if no labels. */
static void kb_msb_labels(kb_msb_t *sb, char *const *names, char *const *vals, size_t n,
                          const char *xname, const char *xval)
{
    if (n == 0 && !xname)
        return;
    kb_msb_printf(sb, "{");
    for (size_t i = 0; i < n; i++) {
        kb_msb_printf(sb, "%s%s=\"", i ? "," : "", names[i]);
        kb_msb_label_value(sb, vals[i]);
        kb_msb_printf(sb, "\"");
    }
    if (xname)
        kb_msb_printf(sb, "%s%s=\"%s\"", n ? "," : "", xname, xval);
    kb_msb_printf(sb, "}");
}

static void kb_msb_double(kb_msb_t *sb, double v)
{
    if (isinf(v))
        kb_msb_printf(sb, v > 0 ? "+Inf" : "-Inf");
    else if (isnan(v))
        kb_msb_printf(sb, "NaN");
    else if (v == floor(v) && fabs(v) < 1e15)
        kb_msb_printf(sb, "%.0f", v);
    else
        kb_msb_printf(sb, "%.9g", v);
}

/* ---------------------------------------------------------------- registry */

int kb_metrics_name_valid(const char *name)
{
    if (!name || !(isalpha((unsigned char)*name) || *name == '_' || *name == ':'))
        return 0;
    for (const char *p = name + 1; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_' || *p == ':'))
            return 0;
    return 1;
}

static int kb_metrics_label_name_valid(const char *name)
{
    if (!name || !(isalpha((unsigned char)*name) || *name == '_'))
        return 0;
    for (const char *p = name + 1; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_'))
            return 0;
    return 1;
}

kb_metrics_t *kb_metrics_new(void)
{
    kb_metrics_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

static void kb_metrics_strv_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

void kb_metrics_free(kb_metrics_t *m)
{
    if (!m)
        return;
    for (kb_mfamily_t *f = m->fam_head, *fn; f; f = fn) {
        fn = f->next;
        for (kb_mchild_t *c = f->head, *cn; c; c = cn) {
            cn = c->next;
            kb_metrics_strv_free(c->lvals, f->nlabels);
            free(c);
        }
        kb_metrics_strv_free(f->lnames, f->nlabels);
        free(f->name);
        free(f->help);
        free(f);
    }
    for (kb_mcollector_t *c = m->coll, *cn; c; c = cn) {
        cn = c->next;
        free(c);
    }
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static size_t kb_metrics_nlabels(const char *const *labels)
{
    size_t n = 0;
    while (labels && labels[n * 2])
        n++;
    return n;
}

static kb_mfamily_t *kb_metrics_family(kb_metrics_t *m, const char *name, const char *help,
                                       kb_mtype_t type, const char *const *labels,
                                       const double *bounds, size_t nbounds)
{
    size_t nl = kb_metrics_nlabels(labels);
    kb_mfamily_t *f;

    for (f = m->fam_head; f; f = f->next) {
        if (strcmp(f->name, name) != 0)
            continue;
        if (f->type != type || f->nlabels != nl)
            goto mismatch;
        for (size_t i = 0; i < nl; i++)
            if (strcmp(f->lnames[i], labels[i * 2]) != 0)
                goto mismatch;
        return f;
    }
    if (!kb_metrics_name_valid(name))
        goto invalid;
    for (size_t i = 0; i < nl; i++)
        if (!kb_metrics_label_name_valid(labels[i * 2]) || !labels[i * 2 + 1])
            goto invalid;
    f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    f->lnames = calloc(nl ? nl : 1, sizeof(*f->lnames));
    if (!f->name || !f->help || !f->lnames)
        goto nomem;
    f->nlabels = nl;
    for (size_t i = 0; i < nl; i++)
        if (!(f->lnames[i] = strdup(labels[i * 2])))
            goto nomem;
    f->type = type;
    f->bounds = bounds;
    f->nbounds = nbounds;
    if (m->fam_tail)
        m->fam_tail->next = f;
    else
        m->fam_head = f;
    m->fam_tail = f;
    return f;
nomem:
    kb_metrics_strv_free(f->lnames, nl);
    free(f->name);
    free(f->help);
    free(f);
    return NULL;
mismatch:
    kb_log_error("metrics", "metric %s: type or label names differ from its first use", name);
    return NULL;
invalid:
    kb_log_error("metrics", "metric %s: invalid metric or label name", name);
    return NULL;
}

static kb_mchild_t *kb_metrics_child(kb_mfamily_t *f, const char *const *labels)
{
    kb_mchild_t *c;
    for (c = f->head; c; c = c->next) {
        size_t i;
        for (i = 0; i < f->nlabels; i++)
            if (strcmp(c->lvals[i], labels[i * 2 + 1]) != 0)
                break;
        if (i == f->nlabels)
            return c;
    }
    c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->lvals = calloc(f->nlabels ? f->nlabels : 1, sizeof(*c->lvals));
    if (!c->lvals)
        goto nomem;
    for (size_t i = 0; i < f->nlabels; i++)
        if (!(c->lvals[i] = strdup(labels[i * 2 + 1])))
            goto nomem;
    if (f->type == KB_MT_HISTO) {
        c->u.h.bounds = f->bounds;
        c->u.h.cnt = f->nbounds;
    }
    if (f->tail)
        f->tail->next = c;
    else
        f->head = c;
    f->tail = c;
    return c;
nomem:
    kb_metrics_strv_free(c->lvals, f->nlabels);
    free(c);
    return NULL;
}

static kb_mchild_t *kb_metrics_get(kb_metrics_t *m, const char *name, const char *help,
                                   kb_mtype_t type, const char *const *labels, const double *bounds,
                                   size_t nbounds)
{
    kb_mfamily_t *f;
    kb_mchild_t *c = NULL;
    if (!m)
        return NULL;
    pthread_mutex_lock(&m->mu);
    f = kb_metrics_family(m, name, help, type, labels, bounds, nbounds);
    if (f)
        c = kb_metrics_child(f, labels);
    pthread_mutex_unlock(&m->mu);
    return c;
}

kb_counter_t *kb_metrics_counter(kb_metrics_t *m, const char *name, const char *help,
                                 const char *const *labels)
{
    kb_mchild_t *c = kb_metrics_get(m, name, help, KB_MT_COUNTER, labels, NULL, 0);
    return c ? &c->u.c : NULL;
}

kb_gauge_t *kb_metrics_gauge(kb_metrics_t *m, const char *name, const char *help,
                             const char *const *labels)
{
    kb_mchild_t *c = kb_metrics_get(m, name, help, KB_MT_GAUGE, labels, NULL, 0);
    return c ? &c->u.g : NULL;
}

kb_fgauge_t *kb_metrics_fgauge(kb_metrics_t *m, const char *name, const char *help,
                               const char *const *labels)
{
    kb_mchild_t *c = kb_metrics_get(m, name, help, KB_MT_FGAUGE, labels, NULL, 0);
    return c ? &c->u.fg : NULL;
}

void kb_metrics_remove(kb_metrics_t *m, const void *series)
{
    if (!m || !series)
        return;
    pthread_mutex_lock(&m->mu);
    for (kb_mfamily_t *f = m->fam_head; f; f = f->next) {
        kb_mchild_t *prev = NULL;
        for (kb_mchild_t *c = f->head; c; prev = c, c = c->next) {
            if ((const void *)&c->u != series)
                continue;
            if (prev)
                prev->next = c->next;
            else
                f->head = c->next;
            if (f->tail == c)
                f->tail = prev;
            kb_metrics_strv_free(c->lvals, f->nlabels);
            free(c);
            pthread_mutex_unlock(&m->mu);
            return;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

kb_histo_t *kb_metrics_histogram(kb_metrics_t *m, const char *name, const char *help,
                                 const double *bounds, size_t cnt, const char *const *labels)
{
    kb_mchild_t *c;
    if (cnt > KB_HISTO_MAX_BUCKETS)
        return NULL;
    c = kb_metrics_get(m, name, help, KB_MT_HISTO, labels, bounds, cnt);
    return c ? &c->u.h : NULL;
}

void kb_histo_observe(kb_histo_t *h, double v)
{
    size_t i;
    uint64_t old, nw;
    double sum;

    if (!h)
        return;
    for (i = 0; i < h->cnt; i++)
        if (v <= h->bounds[i])
            break;
    atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
    old = atomic_load_explicit(&h->sum_bits, memory_order_relaxed);
    do {
        memcpy(&sum, &old, sizeof(sum));
        sum += v;
        memcpy(&nw, &sum, sizeof(nw));
    } while (!atomic_compare_exchange_weak_explicit(&h->sum_bits, &old, nw, memory_order_relaxed,
                                                    memory_order_relaxed));
}

/* ---------------------------------------------------------------- collectors */

struct kb_metrics_emit_s {
    kb_msb_t *sb;
    char **seen; /* names that got HELP/TYPE in this scrape */
    size_t nseen, capseen;
};

void *kb_metrics_collector_add(kb_metrics_t *m, kb_metrics_collect_fn *fn, void *opaque)
{
    kb_mcollector_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->fn = fn;
    c->opaque = opaque;
    pthread_mutex_lock(&m->mu);
    c->next = m->coll;
    m->coll = c;
    pthread_mutex_unlock(&m->mu);
    return c;
}

void kb_metrics_collector_remove(kb_metrics_t *m, void *handle)
{
    /* Collectors run under m->mu, so once unlinked under it, it cannot be running. */
    pthread_mutex_lock(&m->mu);
    for (kb_mcollector_t **pp = &m->coll; *pp; pp = &(*pp)->next) {
        if (*pp == handle) {
            *pp = (*pp)->next;
            free(handle);
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

void kb_metrics_emit(kb_metrics_emit_t *em, const char *name, const char *help,
                     kb_metric_type_t type, const char *const *labels, double value)
{
    static const char *const tnames[] = {"counter", "gauge", "untyped"};
    size_t nl = kb_metrics_nlabels(labels);
    bool seen = false;

    if (!kb_metrics_name_valid(name))
        return;
    for (size_t i = 0; i < nl; i++)
        if (!kb_metrics_label_name_valid(labels[i * 2]) || !labels[i * 2 + 1])
            return;
    for (size_t i = 0; i < em->nseen && !seen; i++)
        seen = strcmp(em->seen[i], name) == 0;
    if (!seen) {
        if (em->nseen == em->capseen) {
            size_t ncap = em->capseen ? em->capseen * 2 : 16;
            char **n = realloc(em->seen, ncap * sizeof(*n));
            if (n) {
                em->seen = n;
                em->capseen = ncap;
            }
        }
        if (em->nseen < em->capseen && (em->seen[em->nseen] = strdup(name)))
            em->nseen++;
        kb_msb_printf(em->sb, "# HELP %s ", name);
        kb_msb_help(em->sb, help);
        kb_msb_printf(em->sb, "\n# TYPE %s %s\n", name,
                      tnames[type <= KB_METRIC_UNTYPED ? type : KB_METRIC_UNTYPED]);
    }
    kb_msb_printf(em->sb, "%s", name);
    if (nl) {
        kb_msb_printf(em->sb, "{");
        for (size_t i = 0; i < nl; i++) {
            kb_msb_printf(em->sb, "%s%s=\"", i ? "," : "", labels[i * 2]);
            kb_msb_label_value(em->sb, labels[i * 2 + 1]);
            kb_msb_printf(em->sb, "\"");
        }
        kb_msb_printf(em->sb, "}");
    }
    kb_msb_printf(em->sb, " ");
    kb_msb_double(em->sb, value);
    kb_msb_printf(em->sb, "\n");
}

/* ---------------------------------------------------------------- rendering */

static void kb_metrics_render_family(kb_msb_t *sb, const kb_mfamily_t *f)
{
    static const char *const tnames[] = {"counter", "gauge", "histogram", "gauge"};

    if (!f->head)
        return;
    kb_msb_printf(sb, "# HELP %s ", f->name);
    kb_msb_help(sb, f->help);
    kb_msb_printf(sb, "\n# TYPE %s %s\n", f->name, tnames[f->type]);
    for (const kb_mchild_t *c = f->head; c; c = c->next) {
        if (f->type == KB_MT_FGAUGE) {
            uint64_t bits = atomic_load_explicit(&c->u.fg.bits, memory_order_relaxed);
            double v;
            memcpy(&v, &bits, sizeof(v));
            kb_msb_printf(sb, "%s", f->name);
            kb_msb_labels(sb, f->lnames, c->lvals, f->nlabels, NULL, NULL);
            kb_msb_printf(sb, " ");
            kb_msb_double(sb, v);
            kb_msb_printf(sb, "\n");
            continue;
        }
        if (f->type == KB_MT_COUNTER || f->type == KB_MT_GAUGE) {
            kb_msb_printf(sb, "%s", f->name);
            kb_msb_labels(sb, f->lnames, c->lvals, f->nlabels, NULL, NULL);
            if (f->type == KB_MT_COUNTER)
                kb_msb_printf(
                    sb, " %llu\n",
                    (unsigned long long)atomic_load_explicit(&c->u.c.v, memory_order_relaxed));
            else
                kb_msb_printf(sb, " %lld\n",
                              (long long)atomic_load_explicit(&c->u.g.v, memory_order_relaxed));
            continue;
        }
        /* Histogram: cumulative buckets, +Inf, _sum, _count. A scrape racing observations may
         * see a sum that lags a count by one observation; Prometheus tolerates that. */
        uint64_t cum = 0;
        uint64_t sb_bits = atomic_load_explicit(&c->u.h.sum_bits, memory_order_relaxed);
        double sum;
        char le[64];
        for (size_t i = 0; i <= c->u.h.cnt; i++) {
            cum += atomic_load_explicit(&c->u.h.buckets[i], memory_order_relaxed);
            if (i < c->u.h.cnt)
                snprintf(le, sizeof(le), "%.9g", c->u.h.bounds[i]);
            else
                snprintf(le, sizeof(le), "+Inf");
            kb_msb_printf(sb, "%s_bucket", f->name);
            kb_msb_labels(sb, f->lnames, c->lvals, f->nlabels, "le", le);
            kb_msb_printf(sb, " %llu\n", (unsigned long long)cum);
        }
        memcpy(&sum, &sb_bits, sizeof(sum));
        kb_msb_printf(sb, "%s_sum", f->name);
        kb_msb_labels(sb, f->lnames, c->lvals, f->nlabels, NULL, NULL);
        kb_msb_printf(sb, " ");
        kb_msb_double(sb, sum);
        kb_msb_printf(sb, "\n%s_count", f->name);
        kb_msb_labels(sb, f->lnames, c->lvals, f->nlabels, NULL, NULL);
        kb_msb_printf(sb, " %llu\n", (unsigned long long)cum);
    }
}

char *kb_metrics_render(kb_metrics_t *m, size_t *lenp)
{
    kb_msb_t sb = {0};
    kb_metrics_emit_t em = {.sb = &sb};

    kb_msb_printf(&sb, "%s", "");
    pthread_mutex_lock(&m->mu);
    for (const kb_mfamily_t *f = m->fam_head; f; f = f->next)
        kb_metrics_render_family(&sb, f);
    for (kb_mcollector_t *c = m->coll; c; c = c->next)
        c->fn(c->opaque, &em);
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; i < em.nseen; i++)
        free(em.seen[i]);
    free(em.seen);
    if (sb.oom) {
        free(sb.p);
        return NULL;
    }
    if (lenp)
        *lenp = sb.len;
    return sb.p;
}
