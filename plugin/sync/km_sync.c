/*
 * km_sync.c - the metadata sync scheduler (docs/plugin.md "Metadata sync"): per mirror and
 * kind the next due time, the run in flight, counters and the last error; runs start on the
 * mirror's coordinator only, from a tick a host timer posts to the loop every KM_SYNC_TICK_MS.
 *
 * Life of a mirror's state (km_sync_mirror_t): created when its definition appears in the
 * catalog (every broker: a broker can become the coordinator at any time), unlinked when the
 * definition goes (its runs are cancelled), freed once no run refers to it.
 *
 * Final syncs (km_sync_final, before StopMirrorTopics) are runs of their own beside the
 * periodic ones; their completion (km_sync_fin_t) fires when both kinds called done or at
 * the deadline, whichever comes first; runs still open then finish later as cancelled.
 */
#define KM_LOG_COMPONENT "kmirror.sync"
#include "sync/km_sync.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "catalog/km_catalog.h"
#include "coord/km_coord.h"
#include "core/km_plugin_types.h"
#include "state/km_state.h"
#include "sync/km_sync_int.h"
#include "util/km_log.h"
#include "util/km_mem.h"

#define KM_SYNC_MAGIC     0x4b4d5359u /* "KMSY" */
#define KM_SYNC_JOB_MAGIC 0x4b4d534au /* "KMSJ" */

typedef struct km_sync_mirror km_sync_mirror_t;
typedef struct km_sync_fin km_sync_fin_t;

/** One run and the scheduler's bookkeeping around it (run.priv points back here). */
typedef struct km_sync_job {
    uint32_t magic;
    km_sync_run_t run;
    km_sync_mirror_t *sm; /* holds a reference */
    km_sync_fin_t *fin;   /* a final sync's completion, NULL for a periodic run */
    int errors;
    struct km_sync_job *next; /* every open job (km_sync_destroy frees the leftovers) */
} km_sync_job_t;

typedef struct km_sync_kstate {
    int64_t next_ms; /* monotonic: the next periodic run is due then */
    bool kicked;     /* run at the next tick whatever next_ms says */
    km_sync_job_t *inflight;
    km_sync_status_t st;
    kbx_metric_t *m_runs, *m_errors, *m_last_ok;
} km_sync_kstate_t;

struct km_sync_mirror {
    char *name;
    bool gone;        /* the definition went: cancelled, unlinked, freed with its last job */
    bool coordinator; /* as seen by the last tick */
    int refs;         /* jobs referring to it */
    km_sync_kstate_t k[KM_SYNC_NKINDS];
    km_sync_mirror_t *next;
};

struct km_sync_fin {
    km_sync_final_cb cb;
    void *arg;
    char *mirror;
    int64_t deadline_ms; /* wall */
    int pending;         /* jobs not done yet (+1 while km_sync_final starts them) */
    int errors;
    bool called;
    km_sync_fin_t *next;
};

struct km_sync {
    uint32_t magic;
    km_plugin_t *cm;
    kbx_timer_t *timer;
    atomic_bool tick_queued;
    atomic_bool stopping; /* km_sync_stop began (any thread) */
    atomic_uint active;   /* mirrors + final syncs: the timer posts ticks only when some */
    bool stopped;         /* the loop saw the stop: nothing new starts */
    km_sync_hooks_t hooks;
    km_sync_mirror_t *mirrors;
    km_sync_fin_t *fins;
    km_sync_job_t *jobs;
};

static const char *const km_sync_kind_names[KM_SYNC_NKINDS] = {"topics", "configs", "groups",
                                                               "acls"};

const char *km_sync_kind_name(km_sync_kind_t kind)
{
    return (unsigned)kind < KM_SYNC_NKINDS ? km_sync_kind_names[kind] : "?";
}

static int64_t km_sync_wall(const km_plugin_t *cm)
{
    return cm->ref.api->clock_wall_ms(cm->ref.host);
}

static int64_t km_sync_mono(const km_plugin_t *cm)
{
    return cm->ref.api->clock_monotonic_ns(cm->ref.host) / 1000000;
}

static bool km_sync_default_coordinator(const km_plugin_t *cm, const char *mirror)
{
    return km_state_mirror_coordinator(cm, mirror);
}

static const km_sync_hooks_t km_sync_default_hooks = {
    .is_coordinator = km_sync_default_coordinator,
    .run = {km_sync_topics_run, km_sync_configs_run, km_sync_groups_run, km_sync_acls_run},
};

/** The kind's interval for this mirror (0: off). */
static int64_t km_sync_interval(const km_plugin_t *cm, const km_mirror_def_t *def,
                                km_sync_kind_t kind)
{
    switch (kind) {
    case KM_SYNC_TOPICS:
        return cm->conf.metadata_refresh_interval_ms;
    case KM_SYNC_CONFIGS:
        return def->conf.sync_topic_configs_interval_ms;
    case KM_SYNC_GROUPS:
        return def->conf.sync_group_offsets_interval_ms;
    case KM_SYNC_ACLS:
        return def->conf.sync_acls_interval_ms;
    default:
        return 0;
    }
}

/* ---- mirrors --------------------------------------------------------------------------- */

static km_sync_mirror_t *km_sync_mirror_find(km_sync_t *sy, const char *name)
{
    for (km_sync_mirror_t *sm = sy->mirrors; sm != NULL; sm = sm->next)
        if (strcmp(sm->name, name) == 0)
            return sm;
    return NULL;
}

static kbx_metric_t *km_sync_metric(km_plugin_t *cm, int32_t type, const char *name,
                                    const char *help, const char *mirror, km_sync_kind_t kind)
{
    static const char *const keys[] = {"mirror", "kind"};
    const char *values[2] = {mirror, km_sync_kind_name(kind)};
    kbx_metric_desc_t d = {
        .struct_size = sizeof(d),
        .type = type,
        .group = "kmirror",
        .name = name,
        .help = help,
        .label_keys = keys,
        .label_values = values,
        .label_count = 2,
    };
    kbx_metric_t *m = NULL;

    if (cm->ref.api->metric_register(cm->ref.host, &d, &m) != KBX_OK) {
        km_log_warn(cm, "mirror %s: metric %s{kind=%s} not registered", mirror, name,
                    km_sync_kind_name(kind));
        m = NULL;
    }
    return m;
}

static void km_sync_metrics_drop(km_plugin_t *cm, km_sync_mirror_t *sm)
{
    for (int i = 0; i < KM_SYNC_NKINDS; i++) {
        km_sync_kstate_t *k = &sm->k[i];
        if (k->m_runs != NULL)
            cm->ref.api->metric_unregister(cm->ref.host, k->m_runs);
        if (k->m_errors != NULL)
            cm->ref.api->metric_unregister(cm->ref.host, k->m_errors);
        if (k->m_last_ok != NULL)
            cm->ref.api->metric_unregister(cm->ref.host, k->m_last_ok);
        k->m_runs = k->m_errors = k->m_last_ok = NULL;
    }
}

static km_sync_mirror_t *km_sync_mirror_new(km_sync_t *sy, const char *name)
{
    km_plugin_t *cm = sy->cm;
    km_sync_mirror_t *sm = km_calloc(cm, 1, sizeof(*sm));

    if (sm == NULL || (sm->name = km_strdup(cm, name)) == NULL) {
        km_free(cm, sm);
        km_log_error(cm, "mirror %s: out of memory, it is not synced", name);
        return NULL;
    }
    for (int i = 0; i < KM_SYNC_NKINDS; i++) {
        km_sync_kstate_t *k = &sm->k[i];
        k->st.last_error_ms = -1;
        k->st.last_success_ms = -1;
        k->m_runs = km_sync_metric(cm, KBX_METRIC_COUNTER, "sync_runs_total",
                                   "metadata sync runs finished on this broker", name, i);
        k->m_errors = km_sync_metric(cm, KBX_METRIC_COUNTER, "sync_errors_total",
                                     "metadata sync items that failed on this broker", name, i);
        k->m_last_ok =
            km_sync_metric(cm, KBX_METRIC_GAUGE, "sync_last_success_timestamp_seconds",
                           "wall clock of the last sync run without a failed item", name, i);
    }
    sm->next = sy->mirrors;
    sy->mirrors = sm;
    atomic_fetch_add(&sy->active, 1);
    return sm;
}

static void km_sync_mirror_free(km_sync_t *sy, km_sync_mirror_t *sm)
{
    km_sync_metrics_drop(sy->cm, sm);
    km_free(sy->cm, sm->name);
    km_free(sy->cm, sm);
}

/* The definition went: unlink (a mirror re-created under the name starts fresh), cancel. */
static void km_sync_mirror_gone(km_sync_t *sy, km_sync_mirror_t *sm)
{
    km_sync_mirror_t **pp;

    for (pp = &sy->mirrors; *pp != NULL && *pp != sm; pp = &(*pp)->next)
        ;
    if (*pp == sm)
        *pp = sm->next;
    sm->next = NULL;
    sm->gone = true;
    atomic_fetch_sub(&sy->active, 1);
    km_sync_metrics_drop(sy->cm, sm);
    if (sm->refs == 0)
        km_sync_mirror_free(sy, sm);
    else
        km_log_info(sy->cm, "mirror %s deleted: %d sync run(s) cancelled", sm->name, sm->refs);
}

/* ---- runs ------------------------------------------------------------------------------ */

static km_sync_t *km_sync_of(const km_plugin_t *cm)
{
    return cm->sync;
}

static km_sync_job_t *km_sync_job_of(const km_sync_run_t *run)
{
    km_sync_job_t *job;

    if (run == NULL)
        __builtin_trap();
    job = run->priv;
    KM_CHECK_OBJ(run->cm, job, KM_SYNC_JOB_MAGIC);
    return job;
}

static void km_sync_job_free(km_sync_t *sy, km_sync_job_t *job)
{
    km_plugin_t *cm = sy->cm;
    km_sync_job_t **pp;

    for (pp = &sy->jobs; *pp != NULL && *pp != job; pp = &(*pp)->next)
        ;
    if (*pp == job)
        *pp = job->next;
    for (size_t i = 0; i < job->run.ntopics; i++)
        km_free(cm, job->run.topics[i]);
    km_free(cm, job->run.topics);
    km_free(cm, (char *)job->run.mirror);
    job->magic = 0;
    km_free(cm, job);
}

/* A new job of kind for sm (not started). topics: copied (NULL: every eligible topic). */
static km_sync_job_t *km_sync_job_new(km_sync_t *sy, km_sync_mirror_t *sm, km_sync_kind_t kind,
                                      bool persist, const char *const *topics, size_t ntopics,
                                      int64_t deadline_ms)
{
    km_plugin_t *cm = sy->cm;
    km_sync_job_t *job = km_calloc(cm, 1, sizeof(*job));

    if (job == NULL)
        return NULL;
    job->magic = KM_SYNC_JOB_MAGIC;
    job->run.cm = cm;
    job->run.kind = kind;
    job->run.persist = persist;
    job->run.deadline_ms = deadline_ms;
    job->run.priv = job;
    job->next = sy->jobs;
    sy->jobs = job;
    job->run.mirror = km_strdup(cm, sm->name);
    if (job->run.mirror == NULL)
        goto fail;
    if (topics != NULL) {
        job->run.topics = km_calloc(cm, ntopics > 0 ? ntopics : 1, sizeof(*job->run.topics));
        if (job->run.topics == NULL)
            goto fail;
        for (; job->run.ntopics < ntopics; job->run.ntopics++) {
            job->run.topics[job->run.ntopics] = km_strdup(cm, topics[job->run.ntopics]);
            if (job->run.topics[job->run.ntopics] == NULL)
                goto fail;
        }
    }
    job->sm = sm;
    sm->refs++;
    return job;
fail:
    km_sync_job_free(sy, job);
    return NULL;
}

static void km_sync_fin_call(km_sync_t *sy, km_sync_fin_t *fin, int errors)
{
    fin->called = true;
    fin->cb(sy->cm, fin->arg, errors);
}

static void km_sync_fin_free_if_over(km_sync_t *sy, km_sync_fin_t *fin)
{
    km_sync_fin_t **pp;

    if (!fin->called || fin->pending > 0)
        return;
    for (pp = &sy->fins; *pp != NULL && *pp != fin; pp = &(*pp)->next)
        ;
    if (*pp == fin)
        *pp = fin->next;
    atomic_fetch_sub(&sy->active, 1);
    km_free(sy->cm, fin->mirror);
    km_free(sy->cm, fin);
}

/* One job of fin ended (or was never started): fire when it was the last. */
static void km_sync_fin_release(km_sync_t *sy, km_sync_fin_t *fin)
{
    fin->pending--;
    if (fin->pending == 0 && !fin->called)
        km_sync_fin_call(sy, fin, fin->errors);
    km_sync_fin_free_if_over(sy, fin);
}

const km_mirror_def_t *km_sync_run_def(const km_sync_run_t *run)
{
    km_sync_job_t *job = km_sync_job_of(run);

    if (job->sm->gone)
        return NULL;
    return km_catalog_mirror_find(&run->cm->catalog, run->mirror);
}

bool km_sync_run_cancelled(const km_sync_run_t *run)
{
    km_sync_job_t *job = km_sync_job_of(run);
    km_sync_t *sy = km_sync_of(run->cm);

    if (sy->stopped || atomic_load(&sy->stopping) || job->sm->gone)
        return true;
    if (job->fin != NULL && job->fin->called)
        return true;
    if (km_sync_wall(run->cm) >= run->deadline_ms)
        return true;
    return run->persist && !sy->hooks.is_coordinator(run->cm, run->mirror);
}

void km_sync_run_error(km_sync_run_t *run, const char *item, const char *fmt, ...)
{
    km_sync_job_t *job = km_sync_job_of(run);
    km_plugin_t *cm = run->cm;
    km_sync_kstate_t *k = &job->sm->k[run->kind];
    char msg[sizeof(k->st.last_error)];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    job->errors++;
    k->st.errors++;
    /* Cut to the status's size (a long message is still logged whole below). */
    if (snprintf(k->st.last_error, sizeof(k->st.last_error), "%s%s%s", item != NULL ? item : "",
                 item != NULL ? ": " : "", msg) >= (int)sizeof(k->st.last_error))
        k->st.last_error[sizeof(k->st.last_error) - 1] = '\0';
    k->st.last_error_ms = km_sync_wall(cm);
    if (k->m_errors != NULL)
        cm->ref.api->metric_record(cm->ref.host, k->m_errors, 1);
    km_log_warn(cm, "mirror %s: %s sync%s: %s%s%s", run->mirror, km_sync_kind_name(run->kind),
                job->fin != NULL ? " (final, before a stop)" : "", item != NULL ? item : "",
                item != NULL ? ": " : "", msg);
}

void km_sync_run_done(km_sync_run_t *run)
{
    km_sync_job_t *job = km_sync_job_of(run);
    km_plugin_t *cm = run->cm;
    km_sync_t *sy = km_sync_of(cm);
    km_sync_mirror_t *sm = job->sm;
    km_sync_kstate_t *k = &sm->k[run->kind];
    km_sync_fin_t *fin = job->fin;
    bool cancelled = km_sync_run_cancelled(run);
    const km_mirror_def_t *def;

    k->st.runs++;
    if (k->m_runs != NULL)
        cm->ref.api->metric_record(cm->ref.host, k->m_runs, 1);
    if (job->errors == 0 && !cancelled) {
        k->st.last_success_ms = km_sync_wall(cm);
        if (k->m_last_ok != NULL)
            cm->ref.api->metric_record(cm->ref.host, k->m_last_ok,
                                       (double)k->st.last_success_ms / 1000.0);
    }
    if (cancelled)
        km_log_debug(cm, "mirror %s: %s sync run cancelled (%d failed items)", run->mirror,
                     km_sync_kind_name(run->kind), job->errors);
    if (fin == NULL && k->inflight == job) {
        k->inflight = NULL;
        def = sm->gone ? NULL : km_catalog_mirror_find(&cm->catalog, sm->name);
        if (def != NULL)
            k->next_ms = km_sync_mono(cm) + km_sync_interval(cm, def, run->kind);
    }
    if (fin != NULL) {
        /* A final run cut short (its deadline, the stop) did not do its job: one failure, so
         * that the stop says so. */
        fin->errors += job->errors > 0 ? job->errors : cancelled ? 1 : 0;
    }
    job->fin = NULL;
    km_sync_job_free(sy, job);
    if (--sm->refs == 0 && sm->gone)
        km_sync_mirror_free(sy, sm);
    if (fin != NULL)
        km_sync_fin_release(sy, fin);
}

bool km_sync_topic_eligible(const km_cat_topic_t *t, const char *mirror)
{
    return t != NULL && mirror != NULL && t->mirror != NULL && strcmp(t->mirror, mirror) == 0 &&
           t->desired == KM_DESIRED_RUNNING;
}

/* ---- the tick ------------------------------------------------------------------------- */

static void km_sync_start_periodic(km_sync_t *sy, km_sync_mirror_t *sm, km_sync_kind_t kind,
                                   int64_t interval)
{
    km_plugin_t *cm = sy->cm;
    km_sync_kstate_t *k = &sm->k[kind];
    const km_mirror_def_t *def = km_catalog_mirror_find(&cm->catalog, sm->name);
    int64_t bound = interval;
    km_sync_job_t *job;

    if (def != NULL && 2 * (int64_t)def->conf.request_timeout_ms > bound)
        bound = 2 * (int64_t)def->conf.request_timeout_ms;
    job = km_sync_job_new(sy, sm, kind, true, NULL, 0, km_sync_wall(cm) + bound);
    if (job == NULL) {
        km_log_warn(cm, "mirror %s: out of memory, %s sync postponed", sm->name,
                    km_sync_kind_name(kind));
        k->next_ms = km_sync_mono(cm) + interval;
        return;
    }
    k->inflight = job;
    k->kicked = false;
    km_log_debug(cm, "mirror %s: %s sync run starts", sm->name, km_sync_kind_name(kind));
    /* May call km_sync_run_done before it returns: job is not touched afterwards. */
    sy->hooks.run[kind](&job->run);
}

static void km_sync_tick_mirror(km_sync_t *sy, km_sync_mirror_t *sm, int64_t now)
{
    km_plugin_t *cm = sy->cm;
    const km_mirror_def_t *def = km_catalog_mirror_find(&cm->catalog, sm->name);
    bool coord;

    if (def == NULL)
        return;
    coord = sy->hooks.is_coordinator(cm, sm->name);
    if (coord != sm->coordinator)
        km_log_info(cm, "mirror %s: this broker %s its coordinator: the metadata sync %s", sm->name,
                    coord ? "became" : "is no longer", coord ? "runs here now" : "stops here");
    if (coord && !sm->coordinator)
        for (int i = 0; i < KM_SYNC_NKINDS; i++)
            sm->k[i].next_ms = now; /* due at once */
    sm->coordinator = coord;
    if (!coord)
        return;
    for (int i = 0; i < KM_SYNC_NKINDS; i++) {
        km_sync_kstate_t *k = &sm->k[i];
        int64_t interval = km_sync_interval(cm, def, i);

        k->st.enabled = interval > 0;
        if (interval <= 0) {
            k->kicked = false;
            continue;
        }
        if (k->inflight != NULL || (!k->kicked && now < k->next_ms))
            continue;
        km_sync_start_periodic(sy, sm, i, interval);
        /* A kind may finish at once and nothing else changes the list: sm is still valid
         * (it is freed only when gone, which only the catalog's on_mirror does). */
    }
}

static void km_sync_tick_finals(km_sync_t *sy)
{
    int64_t wall = km_sync_wall(sy->cm);
    km_sync_fin_t *fin, *next;

    for (fin = sy->fins; fin != NULL; fin = next) {
        next = fin->next;
        if (fin->called)
            continue;
        if (fin->pending == 0) { /* nothing ran (kinds off, mirror gone) or all done */
            km_sync_fin_call(sy, fin, fin->errors);
            km_sync_fin_free_if_over(sy, fin);
            continue;
        }
        if (wall < fin->deadline_ms)
            continue;
        km_log_warn(sy->cm,
                    "mirror %s: the final sync before a stop did not finish within "
                    "stop.sync.timeout.ms (%d run(s) still open); the stop goes on",
                    fin->mirror, fin->pending);
        km_sync_fin_call(sy, fin, fin->errors + fin->pending);
        km_sync_fin_free_if_over(sy, fin);
    }
}

static void km_sync_tick_run(km_plugin_t *cm, void *arg)
{
    km_sync_t *sy = km_sync_of(cm);
    int64_t now;

    (void)arg;
    atomic_store(&sy->tick_queued, false);
    if (sy->stopped)
        return;
    now = km_sync_mono(cm);
    for (km_sync_mirror_t *sm = sy->mirrors; sm != NULL; sm = sm->next)
        km_sync_tick_mirror(sy, sm, now);
    km_sync_tick_finals(sy);
}

static void km_sync_tick_drop(km_plugin_t *cm, void *arg)
{
    (void)arg;
    atomic_store(&km_sync_of(cm)->tick_queued, false);
}

/* Host timer thread: only posts (at most one tick queued). */
static void km_sync_tick_fire(void *arg)
{
    km_sync_t *sy = arg;

    if (atomic_load(&sy->stopping) || atomic_load(&sy->active) == 0 ||
        atomic_exchange(&sy->tick_queued, true))
        return;
    if (km_coord_post(&sy->cm->coord, km_sync_tick_run, km_sync_tick_drop, NULL) == KM_ERR_NOMEM)
        atomic_store(&sy->tick_queued, false);
}

/* ---- catalog --------------------------------------------------------------------------- */

static void km_sync_on_mirror(void *arg, const char *name, const km_mirror_def_t *def)
{
    km_sync_t *sy = arg;
    km_sync_mirror_t *sm = km_sync_mirror_find(sy, name);

    if (def != NULL && sm == NULL)
        (void)km_sync_mirror_new(sy, name);
    else if (def == NULL && sm != NULL)
        km_sync_mirror_gone(sy, sm);
}

/* A topic of a mirror became RUNNING (a new association, a resume, a start after a stop):
 * the kinds run at once, wherever StartMirrorTopics / ResumeMirrorTopics was received. */
static void km_sync_on_topic(void *arg, const km_cat_topic_t *t, const char *old_mirror,
                             km_desired_t old_desired)
{
    km_sync_t *sy = arg;

    if (t->mirror == NULL || t->desired != KM_DESIRED_RUNNING)
        return;
    if (old_mirror != NULL && strcmp(old_mirror, t->mirror) == 0 &&
        old_desired == KM_DESIRED_RUNNING)
        return;
    km_sync_kick(sy->cm, t->mirror);
}

static const km_catalog_ops_t km_sync_catalog_ops = {
    .on_mirror = km_sync_on_mirror,
    .on_topic = km_sync_on_topic,
};

/* ---- the rest of the plugin ------------------------------------------------------------ */

void km_sync_kick(km_plugin_t *cm, const char *mirror)
{
    km_sync_t *sy = km_sync_of(cm);
    km_sync_mirror_t *sm;

    if (sy == NULL || mirror == NULL || (sm = km_sync_mirror_find(sy, mirror)) == NULL)
        return;
    for (int i = 0; i < KM_SYNC_NKINDS; i++)
        sm->k[i].kicked = true;
}

km_err_t km_sync_final(km_plugin_t *cm, const char *mirror, const char *const *topics,
                       size_t ntopics, km_sync_final_cb cb, void *arg)
{
    static const km_sync_kind_t kinds[] = {KM_SYNC_CONFIGS, KM_SYNC_GROUPS};
    km_sync_t *sy = km_sync_of(cm);
    const km_mirror_def_t *def;
    km_sync_mirror_t *sm;
    km_sync_fin_t *fin;
    bool persist;

    if (sy == NULL || sy->stopped || atomic_load(&sy->stopping))
        return KM_ERR_SHUTDOWN;
    if (mirror == NULL || cb == NULL || (topics == NULL && ntopics > 0))
        return KM_ERR_INVALID;
    fin = km_calloc(cm, 1, sizeof(*fin));
    if (fin == NULL || (fin->mirror = km_strdup(cm, mirror)) == NULL) {
        km_free(cm, fin);
        return KM_ERR_NOMEM;
    }
    fin->cb = cb;
    fin->arg = arg;
    fin->pending = 1; /* ours, until every job started */
    fin->next = sy->fins;
    sy->fins = fin;
    atomic_fetch_add(&sy->active, 1);
    def = km_catalog_mirror_find(&cm->catalog, mirror);
    sm = km_sync_mirror_find(sy, mirror);
    fin->deadline_ms = km_sync_wall(cm) + (def != NULL ? def->conf.stop_sync_timeout_ms : 0);
    persist = sy->hooks.is_coordinator(cm, mirror);
    for (size_t i = 0; def != NULL && sm != NULL && i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        km_sync_job_t *job;

        if (km_sync_interval(cm, def, kinds[i]) <= 0 || ntopics == 0)
            continue;
        job = km_sync_job_new(sy, sm, kinds[i], persist, topics, ntopics, fin->deadline_ms);
        if (job == NULL) {
            km_log_warn(cm, "mirror %s: out of memory, no final %s sync before the stop", mirror,
                        km_sync_kind_name(kinds[i]));
            fin->errors++;
            continue;
        }
        job->fin = fin;
        fin->pending++;
        km_log_info(cm, "mirror %s: final %s sync of %zu topic(s) before a stop", mirror,
                    km_sync_kind_name(kinds[i]), ntopics);
        sy->hooks.run[kinds[i]](&job->run);
        /* def may have changed under a kind's synchronous work: look it up again. */
        def = km_catalog_mirror_find(&cm->catalog, mirror);
        if (fin->called)
            break;
    }
    /* Our own reference: cb never runs inside this call. With nothing left to wait for, the
     * next tick (or the stop) calls it. */
    fin->pending--;
    return KM_OK;
}

bool km_sync_status(km_plugin_t *cm, const char *mirror, km_sync_kind_t kind, km_sync_status_t *out)
{
    km_sync_t *sy = km_sync_of(cm);
    km_sync_mirror_t *sm;
    const km_mirror_def_t *def;

    if (sy == NULL || mirror == NULL || (unsigned)kind >= KM_SYNC_NKINDS ||
        (sm = km_sync_mirror_find(sy, mirror)) == NULL ||
        (def = km_catalog_mirror_find(&cm->catalog, mirror)) == NULL ||
        !sy->hooks.is_coordinator(cm, mirror))
        return false;
    *out = sm->k[kind].st;
    out->enabled = km_sync_interval(cm, def, kind) > 0;
    return true;
}

void km_sync_set_hooks(km_plugin_t *cm, const km_sync_hooks_t *hooks)
{
    km_sync_t *sy = km_sync_of(cm);

    if (hooks->is_coordinator != NULL)
        sy->hooks.is_coordinator = hooks->is_coordinator;
    for (int i = 0; i < KM_SYNC_NKINDS; i++)
        if (hooks->run[i] != NULL)
            sy->hooks.run[i] = hooks->run[i];
}

size_t km_sync_inflight(km_plugin_t *cm, const char *mirror)
{
    size_t n = 0;

    for (km_sync_job_t *job = km_sync_of(cm)->jobs; job != NULL; job = job->next)
        if (strcmp(job->run.mirror, mirror) == 0)
            n++;
    return n;
}

/* ---- lifecycle ------------------------------------------------------------------------- */

km_err_t km_sync_start(km_plugin_t *cm, char *errstr, size_t errstr_size)
{
    km_sync_t *sy = km_calloc(cm, 1, sizeof(*sy));
    int32_t rc;

    if (sy == NULL) {
        snprintf(errstr, errstr_size, "out of memory (sync scheduler)");
        return KM_ERR_NOMEM;
    }
    sy->magic = KM_SYNC_MAGIC;
    sy->cm = cm;
    sy->hooks = km_sync_default_hooks;
    atomic_init(&sy->tick_queued, false);
    atomic_init(&sy->stopping, false);
    atomic_init(&sy->active, 0);
    cm->sync = sy;
    if (km_catalog_subscribe(&cm->catalog, &km_sync_catalog_ops, sy) != KM_OK) {
        snprintf(errstr, errstr_size, "the sync scheduler cannot subscribe to the catalog");
        goto fail;
    }
    rc = cm->ref.api->timer_start(cm->ref.host, KM_SYNC_TICK_MS, KM_SYNC_TICK_MS, km_sync_tick_fire,
                                  sy, &sy->timer);
    if (rc != KBX_OK) {
        sy->timer = NULL;
        snprintf(errstr, errstr_size, "cannot start the sync timer: host error %d", (int)rc);
        goto fail;
    }
    return KM_OK;
fail:
    /* The catalog keeps the subscription (append-only): it calls into sy until destroy, so sy
     * stays allocated and is freed by km_sync_destroy. */
    atomic_store(&sy->stopping, true);
    return KM_ERR_HOST;
}

/* The loop side of the stop: nothing new starts, waiting stop requests go on. */
static void km_sync_stop_run(km_plugin_t *cm, void *arg)
{
    km_sync_t *sy = km_sync_of(cm);
    km_sync_fin_t *fin, *next;

    (void)arg;
    sy->stopped = true;
    for (fin = sy->fins; fin != NULL; fin = next) {
        next = fin->next;
        if (fin->called)
            continue;
        km_sync_fin_call(sy, fin, fin->errors + fin->pending);
        km_sync_fin_free_if_over(sy, fin);
    }
}

void km_sync_stop(km_plugin_t *cm)
{
    km_sync_t *sy = km_sync_of(cm);

    if (sy == NULL || sy->magic != KM_SYNC_MAGIC)
        return;
    atomic_store(&sy->stopping, true);
    if (sy->timer != NULL)
        cm->ref.api->timer_cancel(cm->ref.host, sy->timer);
    sy->timer = NULL;
    (void)km_coord_post(&cm->coord, km_sync_stop_run, NULL, NULL);
}

void km_sync_destroy(km_plugin_t *cm)
{
    km_sync_t *sy = km_sync_of(cm);
    size_t open = 0;

    if (sy == NULL || sy->magic != KM_SYNC_MAGIC)
        return;
    km_sync_stop(cm);
    while (sy->jobs != NULL) {
        km_sync_job_t *job = sy->jobs;
        km_sync_mirror_t *sm = job->sm;

        open++;
        if (job->fin != NULL)
            job->fin->pending--;
        km_sync_job_free(sy, job);
        if (--sm->refs == 0 && sm->gone)
            km_sync_mirror_free(sy, sm);
    }
    if (open > 0)
        km_log_warn(cm, "%zu sync run(s) did not finish before the plugin stopped", open);
    while (sy->fins != NULL) {
        km_sync_fin_t *fin = sy->fins;
        sy->fins = fin->next;
        km_free(cm, fin->mirror);
        km_free(cm, fin);
    }
    while (sy->mirrors != NULL) {
        km_sync_mirror_t *sm = sy->mirrors;
        sy->mirrors = sm->next;
        km_sync_mirror_free(sy, sm);
    }
    sy->magic = 0;
    km_free(cm, sy);
    cm->sync = NULL;
}
