/*
 * km_fetch.c - the MirrorFetcherManager: registry, owner API, fetcher threads, events.
 * The wire side (requests and responses) is in km_fetch_wire.c.
 */
#define KM_LOG_COMPONENT "kmirror.fetch"
#include "fetch/km_fetch.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/km_coord.h"
#include "core/km_plugin_types.h"
#include "fetch/km_fetch_int.h"
#include "fetch/km_fetch_wire.h"
#include "util/km_log.h"
#include "util/km_mem.h"

const char *km_fetch_state_name(int32_t state)
{
    switch (state) {
    case KM_FETCH_ST_LOOKUP:
        return "LOOKUP";
    case KM_FETCH_ST_FETCHING:
        return "FETCHING";
    case KM_FETCH_ST_BACKOFF:
        return "BACKOFF";
    case KM_FETCH_ST_PAUSED:
        return "PAUSED";
    case KM_FETCH_ST_HELD:
        return "HELD";
    case KM_FETCH_ST_REMOVING:
        return "REMOVING";
    default:
        return "UNKNOWN";
    }
}

const char *km_fetch_event_name(int32_t type)
{
    switch (type) {
    case KM_FETCH_EV_APPENDED:
        return "APPENDED";
    case KM_FETCH_EV_DIVERGED:
        return "DIVERGED";
    case KM_FETCH_EV_EPOCH_EXCEEDED:
        return "EPOCH_EXCEEDED";
    case KM_FETCH_EV_FATAL:
        return "FATAL";
    case KM_FETCH_EV_TRANSIENT:
        return "TRANSIENT";
    case KM_FETCH_EV_FENCED:
        return "FENCED";
    default:
        return "UNKNOWN";
    }
}

/* ---- references --------------------------------------------------------------------------- */

static void km_fetch_mgr_unref(km_fetch_mgr_t *fm)
{
    km_plugin_t *cm = fm->cm;

    if (atomic_fetch_sub(&fm->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&fm->stats_lock);
    pthread_mutex_destroy(&fm->lock);
    fm->magic = 0;
    km_free(cm, fm);
}

void km_fetch_part_ref(km_fetch_part_t *fpart)
{
    atomic_fetch_add(&fpart->refs, 1);
}

void km_fetch_part_unref(km_fetch_part_t *fpart)
{
    km_plugin_t *cm = fpart->fm->cm;

    if (atomic_fetch_sub(&fpart->refs, 1) != 1)
        return;
    if (fpart->dst != NULL)
        cm->ref.api->partition_release(cm->ref.host, fpart->dst);
    fpart->dst = NULL;
    km_free(cm, fpart->topic);
    fpart->topic = NULL;
    fpart->magic = 0;
    km_free(cm, fpart);
}

/* ---- events to the owner ------------------------------------------------------------------ */

typedef struct km_fetch_post {
    km_fetch_mgr_t *fm;
    km_fetch_part_t *fpart;
    bool removal;
    km_fetch_done_fn done;
    void *done_arg;
    km_fetch_event_t ev;
} km_fetch_post_t;

static void km_fetch_post_free(km_plugin_t *cm, km_fetch_post_t *p)
{
    km_fetch_mgr_t *fm = p->fm;

    km_fetch_part_unref(p->fpart);
    km_free(cm, p);
    km_fetch_mgr_unref(fm);
}

static void km_fetch_post_drop(km_plugin_t *cm, void *arg)
{
    km_fetch_post_free(cm, arg);
}

static void km_fetch_registry_unlink(km_fetch_mgr_t *fm, km_fetch_part_t *fpart)
{
    km_fetch_part_t **pp;

    for (pp = &fm->parts; *pp != NULL; pp = &(*pp)->reg_next) {
        if (*pp == fpart) {
            *pp = fpart->reg_next;
            fpart->reg_next = NULL;
            fpart->mirror->nparts--;
            fpart->mirror->lag_sum -= fpart->lag_counted;
            fpart->lag_counted = 0;
            km_fetch_part_unref(fpart); /* the registry's reference */
            return;
        }
    }
}

static void km_fetcher_free(km_fetch_mgr_t *fm, km_fetcher_t *t);

/*
 * Stop and free the source broker threads that no registered partition belongs to (the last
 * one was removed, or moved to another broker's thread) and that have nothing in their inbox.
 * Coordinator loop, after a removal completed. Under fm->lock a hand-over cannot pick an
 * unlinked thread (km_fetcher_get looks in fm->fetchers), so nothing reaches it afterwards; the
 * mirror's lookup thread (broker -1) stays until the mirror goes.
 */
static void km_fetch_reap(km_fetch_mgr_t *fm)
{
    km_fetcher_t *dead = NULL, **tp;

    pthread_mutex_lock(&fm->lock);
    for (km_fetcher_t *t = fm->fetchers; t != NULL; t = t->next)
        t->reap_keep = t->broker < 0 || t->inbox != NULL;
    for (km_fetch_part_t *p = fm->parts; p != NULL; p = p->reg_next)
        if (p->owner != NULL)
            p->owner->reap_keep = true;
    for (tp = &fm->fetchers; *tp != NULL;) {
        km_fetcher_t *t = *tp;
        if (t->reap_keep || fm->stopping) {
            tp = &t->next;
            continue;
        }
        *tp = t->next;
        t->next = dead;
        dead = t;
    }
    pthread_mutex_unlock(&fm->lock);
    while (dead != NULL) {
        km_fetcher_t *t = dead;
        dead = t->next;
        km_log_info(fm->cm, "%s: no partitions left, stopped", t->name);
        km_fetcher_free(fm, t);
    }
}

static void km_fetch_post_run(km_plugin_t *cm, void *arg)
{
    km_fetch_post_t *p = arg;
    km_fetch_mgr_t *fm = p->fm;

    if (!atomic_load(&fm->dead)) {
        if (p->removal) {
            pthread_mutex_lock(&fm->lock);
            km_fetch_registry_unlink(fm, p->fpart);
            pthread_mutex_unlock(&fm->lock);
            km_fetch_reap(fm);
            if (p->done != NULL)
                p->done(cm, p->done_arg);
        } else {
            p->ev.fpart = p->fpart;
            fm->opts.on_event(cm, p->fpart->opaque, &p->ev);
        }
    }
    km_fetch_post_free(cm, p);
}

static void km_fetch_post(km_fetch_mgr_t *fm, km_fetch_post_t *p)
{
    km_err_t err;

    atomic_fetch_add(&fm->refs, 1);
    km_fetch_part_ref(p->fpart);
    p->fm = fm;
    err = km_coord_post(&fm->cm->coord, km_fetch_post_run, km_fetch_post_drop, p);
    if (err == KM_ERR_NOMEM || err == KM_ERR_INVALID)
        km_fetch_post_free(fm->cm, p);
}

void km_fetch_event(km_fetch_mgr_t *fm, km_fetch_part_t *fpart, const km_fetch_event_t *ev)
{
    km_fetch_post_t *p = km_calloc(fm->cm, 1, sizeof(*p));

    if (p == NULL) {
        km_log_error(fm->cm, "%s-%d: out of memory, %s event lost", fpart->topic,
                     (int)fpart->partition, km_fetch_event_name(ev->type));
        return;
    }
    p->fpart = fpart;
    p->ev = *ev;
    if (ev->type != KM_FETCH_EV_APPENDED)
        fpart->progress_ns = 0; /* the next append reports progress again */
    km_fetch_post(fm, p);
}

/* Post the removal completion of fpart (the thread has let go of it). */
static void km_fetch_post_removal(km_fetch_mgr_t *fm, km_fetch_part_t *fpart)
{
    km_fetch_post_t *p = km_calloc(fm->cm, 1, sizeof(*p));

    if (p == NULL) {
        /* Keep it in the registry; destroy frees it. The owner's completion is lost, which
         * the log says. */
        km_log_error(fm->cm, "%s-%d: out of memory, removal completion lost", fpart->topic,
                     (int)fpart->partition);
        return;
    }
    p->fpart = fpart;
    p->removal = true;
    pthread_mutex_lock(&fm->lock);
    p->done = fpart->rm_done;
    p->done_arg = fpart->rm_arg;
    pthread_mutex_unlock(&fm->lock);
    km_fetch_post(fm, p);
}

/* ---- status --------------------------------------------------------------------------------- */

void km_fetch_status_update(km_fetch_mgr_t *fm, km_fetch_part_t *fpart, int32_t error_class,
                            int16_t error_code, const char *error, uint64_t bytes, uint64_t records,
                            uint64_t batches)
{
    km_fetch_status_t *st = &fpart->st;
    const kbx_api_t *api = fm->cm->ref.api;
    kbx_host_t *host = fm->cm->ref.host;
    km_fmirror_t *mr = fpart->mirror;
    int64_t lag = -1;

    pthread_mutex_lock(&fm->lock);
    st->state = fpart->removing ? KM_FETCH_ST_REMOVING : fpart->state;
    st->source_leader = fpart->src_leader;
    st->source_leader_epoch = fpart->src_epoch;
    st->last_fetched_epoch = fpart->lfe;
    st->fetch_offset = fpart->fetch_offset;
    st->high_watermark = fpart->hw;
    if (fpart->hw >= 0)
        lag = fpart->hw > fpart->fetch_offset ? fpart->hw - fpart->fetch_offset : 0;
    st->lag = lag;
    st->bytes += bytes;
    st->records += records;
    st->batches += batches;
    st->retries = fpart->retries;
    if (error_class != KM_FETCH_ERR_NONE || error != NULL) {
        st->error_class = error_class;
        st->error_code = error_code;
        snprintf(st->error, sizeof(st->error), "%s", error != NULL ? error : "");
    } else if (bytes > 0) {
        st->error_class = KM_FETCH_ERR_NONE;
        st->error_code = -1;
        st->error[0] = '\0';
    }
    if (lag >= 0) {
        mr->lag_sum += lag - fpart->lag_counted;
        fpart->lag_counted = lag;
    }
    if (mr->m_lag != NULL)
        api->metric_record(host, mr->m_lag, (double)mr->lag_sum);
    if (bytes > 0)
        st->last_append_ms = api->clock_wall_ms(host);
    if (bytes > 0 && mr->m_bytes != NULL)
        api->metric_record(host, mr->m_bytes, (double)bytes);
    if (records > 0 && mr->m_records != NULL)
        api->metric_record(host, mr->m_records, (double)records);
    if (error_class != KM_FETCH_ERR_NONE && mr->m_errors != NULL)
        api->metric_record(host, mr->m_errors, 1);
    pthread_mutex_unlock(&fm->lock);
}

void *km_fetch_partition_opaque(const km_fetch_part_t *fpart)
{
    return fpart->opaque;
}

void km_fetch_partition_status(km_fetch_mgr_t *fm, const km_fetch_part_t *fpart,
                               km_fetch_status_t *out)
{
    pthread_mutex_lock(&fm->lock);
    *out = fpart->st;
    pthread_mutex_unlock(&fm->lock);
}

void km_fetch_counters(km_fetch_mgr_t *fm, km_fetch_counters_t *out)
{
    pthread_mutex_lock(&fm->stats_lock);
    *out = fm->counters;
    pthread_mutex_unlock(&fm->stats_lock);
}

km_fetch_part_t *km_fetch_partition_find(km_fetch_mgr_t *fm, const kbx_uuid_t *topic_id,
                                         int32_t partition)
{
    km_fetch_part_t *found = NULL;

    pthread_mutex_lock(&fm->lock);
    for (km_fetch_part_t *p = fm->parts; p != NULL && found == NULL; p = p->reg_next)
        if (!p->removing && p->partition == partition &&
            memcmp(&p->dst_topic_id, topic_id, sizeof(*topic_id)) == 0)
            found = p;
    pthread_mutex_unlock(&fm->lock);
    return found;
}

size_t km_fetch_thread_count(km_fetch_mgr_t *fm)
{
    size_t n = 0;

    pthread_mutex_lock(&fm->lock);
    for (km_fetcher_t *t = fm->fetchers; t != NULL; t = t->next)
        n++;
    pthread_mutex_unlock(&fm->lock);
    return n;
}

/* ---- fetcher threads ------------------------------------------------------------------------ */

void km_fetcher_wake(km_fetcher_t *t)
{
    /* Under the lock: the thread swaps its client under it (reconnect, exit). */
    pthread_mutex_lock(&t->fm->lock);
    if (t->kc != NULL)
        kc_client_wakeup(t->kc);
    pthread_mutex_unlock(&t->fm->lock);
    t->fm->cm->ref.api->latch_set(t->fm->cm->ref.host, t->latch);
}

static void km_fetcher_kc_log(void *opaque, int level, const char *msg)
{
    km_fetcher_t *t = opaque;
    int32_t lvl = level <= KC_LOG_ERROR  ? KBX_LOG_WARN /* source trouble is not our error */
                  : level <= KC_LOG_WARN ? KBX_LOG_INFO
                                         : KBX_LOG_DEBUG;

    km_log(t->fm->cm, lvl, "%s: %s", t->name, msg);
}

static int32_t km_fetcher_step(void *arg);

/* A kc_ client for t from its mirror's connection settings, with the bootstrap addresses and,
 * when known, its broker's address. fm->lock held. */
static kc_client_t *km_fetcher_client_new(km_fetcher_t *t)
{
    km_plugin_t *cm = t->fm->cm;
    km_fmirror_t *mr = t->mirror;
    kc_client_t *kc;
    kc_opts_t o;
    char err[256];
    char cid[256];

    if (mr->client_id != NULL && mr->client_id[0] != '\0')
        snprintf(cid, sizeof(cid), "%s", mr->client_id);
    else
        snprintf(cid, sizeof(cid), "kmirror-%s-%d", mr->name, (int)cm->broker_id);
    kc_opts_init(&o);
    o.client_id = cid;
    o.connect_timeout_ms = mr->connect_timeout_ms;
    o.request_timeout_ms = mr->request_timeout_ms;
    o.reconnect_backoff_ms = mr->reconnect_backoff_ms > 0 ? mr->reconnect_backoff_ms : 1;
    o.reconnect_backoff_max_ms =
        mr->reconnect_backoff_max_ms > 0 ? mr->reconnect_backoff_max_ms : 1;
    o.max_response_size = mr->fetch_response_max_bytes > (INT32_MAX - (64 << 20)) / 2
                              ? INT32_MAX
                              : mr->fetch_response_max_bytes * 2 + (64 << 20);
    o.socket_recv_buffer = mr->socket_recv_buffer > 0 ? mr->socket_recv_buffer : 0;
    o.socket_send_buffer = mr->socket_send_buffer > 0 ? mr->socket_send_buffer : 0;
    o.log_cb = km_fetcher_kc_log;
    o.log_opaque = t;
    o.log_level = KC_LOG_INFO;
    o.software_name = "kmirror";
    kc = kc_client_new(&o, err, sizeof(err));
    if (kc == NULL) {
        km_log_error(cm, "%s: cannot create the source client: %s", t->name, err);
        return NULL;
    }
    if (kc_client_add_bootstrap(kc, mr->bootstrap) != 0) {
        km_log_error(cm, "%s: bad bootstrap.servers", t->name);
        kc_client_destroy(kc);
        return NULL;
    }
    if (t->broker >= 0 && t->port > 0)
        kc_client_node_set(kc, t->broker, t->host, t->port);
    return kc;
}

/* Find or start the fetcher of (mirror, broker, idx). host/port: the broker's address when
 * known. fm->lock held. */
/* The fetcher's session gauges (a metric that cannot be registered is logged and left out). */
static void km_fetcher_metrics(km_fetcher_t *t)
{
    km_plugin_t *cm = t->fm->cm;
    static const char *const keys[] = {"mirror", "source_broker", "fetcher"};
    char broker[16], idx[16];
    const char *values[3] = {t->mirror->name, broker, idx};
    kbx_metric_desc_t d = {
        .struct_size = sizeof(d),
        .type = KBX_METRIC_GAUGE,
        .group = "kmirror.fetch",
        .label_keys = keys,
        .label_values = values,
        .label_count = 3,
    };

    snprintf(broker, sizeof(broker), "%d", (int)t->broker);
    snprintf(idx, sizeof(idx), "%d", (int)t->idx);
    d.name = "session_id";
    d.help = "fetch session id of the fetcher's last Fetch request (0: a full request)";
    if (cm->ref.api->metric_register(cm->ref.host, &d, &t->m_sess_id) != KBX_OK)
        km_log_warn(cm, "%s: metric session_id not registered", t->name);
    d.name = "session_epoch";
    d.help = "fetch session epoch of the fetcher's last Fetch request (0: a full request)";
    if (cm->ref.api->metric_register(cm->ref.host, &d, &t->m_sess_epoch) != KBX_OK)
        km_log_warn(cm, "%s: metric session_epoch not registered", t->name);
}

static void km_fetcher_metrics_drop(km_fetcher_t *t)
{
    km_plugin_t *cm = t->fm->cm;

    if (t->m_sess_id != NULL)
        cm->ref.api->metric_unregister(cm->ref.host, t->m_sess_id);
    if (t->m_sess_epoch != NULL)
        cm->ref.api->metric_unregister(cm->ref.host, t->m_sess_epoch);
    t->m_sess_id = t->m_sess_epoch = NULL;
}

km_fetcher_t *km_fetcher_get(km_fetch_mgr_t *fm, km_fmirror_t *mr, int32_t broker, int32_t idx,
                             const char *host, int32_t port)
{
    km_plugin_t *cm = fm->cm;
    const kbx_api_t *api = cm->ref.api;
    km_fetcher_t *t;
    int32_t rc;

    if (fm->stopping)
        return NULL;
    for (t = fm->fetchers; t != NULL; t = t->next) {
        if (t->mirror == mr && t->broker == broker && t->idx == idx) {
            if (host != NULL && port > 0 && t->kc != NULL) {
                kc_client_node_set(t->kc, broker, host, port);
                snprintf(t->host, sizeof(t->host), "%s", host);
                t->port = port;
            }
            return t;
        }
    }
    t = km_calloc(cm, 1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->magic = KM_FETCHER_MAGIC;
    t->fm = fm;
    t->mirror = mr;
    t->broker = broker;
    t->idx = idx;
    t->fetch_ver = -1;
    atomic_init(&t->stop, 0);
    kp_arena_init(&t->rq_ar, 0);
    /* Kafka's naming: MirrorFetcherThread-{sourceBroker}-{fetcherId}-{mirror} */
    snprintf(t->name, sizeof(t->name), "MirrorFetcherThread-%d-%d-%s", (int)broker, (int)idx,
             mr->name);
    t->conn_gen = mr->conn_gen;
    if (host != NULL && port > 0) {
        snprintf(t->host, sizeof(t->host), "%s", host);
        t->port = port;
    }
    t->kc = km_fetcher_client_new(t);
    if (t->kc == NULL)
        goto free_t;
    if (api->latch_create(cm->ref.host, &t->latch) != KBX_OK)
        goto free_kc;
    if (broker >= 0)
        km_fetcher_metrics(t);
    rc = api->thread_start(cm->ref.host, t->name, km_fetcher_step, t, &t->thread);
    if (rc != KBX_OK) {
        km_log_error(cm, "%s: cannot start the thread: host error %d", t->name, (int)rc);
        goto free_latch;
    }
    t->next = fm->fetchers;
    fm->fetchers = t;
    km_log_info(cm, "%s started", t->name);
    return t;

free_latch:
    km_fetcher_metrics_drop(t);
    api->latch_destroy(cm->ref.host, t->latch);
free_kc:
    kc_client_destroy(t->kc);
    t->kc = NULL;
free_t:
    kp_arena_free(&t->rq_ar);
    t->magic = 0;
    km_free(cm, t);
    return NULL;
}

/* Put fpart into t's inbox with ctl bits. fm->lock held. */
static void km_fetch_inbox_push(km_fetcher_t *t, km_fetch_part_t *fpart, uint32_t ctl)
{
    fpart->ctl |= ctl;
    if (!fpart->in_inbox) {
        fpart->in_inbox = true;
        fpart->inbox_next = t->inbox;
        t->inbox = fpart;
    }
}

bool km_fetch_handover(km_fetcher_t *t, km_fetch_part_t *fpart, int32_t leader, const char *host,
                       int32_t port)
{
    km_fetch_mgr_t *fm = t->fm;
    km_fetcher_t *to;

    pthread_mutex_lock(&fm->lock);
    if (fpart->ctl != 0 || fpart->in_inbox) {
        /* The owner asked for something first; it is handled on this thread's next step. */
        pthread_mutex_unlock(&fm->lock);
        return false;
    }
    to = km_fetcher_get(fm, t->mirror, leader, fpart->fetcher_idx, host, port);
    if (to == NULL || to == t) {
        pthread_mutex_unlock(&fm->lock);
        return to == t;
    }
    km_fetch_wire_detach(t, fpart);
    km_fetch_wire_leave_session(t, fpart);
    fpart->owner = to;
    km_fetch_inbox_push(to, fpart, KM_FCTL_ADOPT);
    pthread_mutex_unlock(&fm->lock);
    km_fetcher_wake(to);
    km_log_debug(fm->cm, "%s-%d: source leader %d, moved from %s to %s", fpart->topic,
                 (int)fpart->partition, (int)leader, t->name, to->name);
    return true;
}

/* Re-read the position from the destination log (after a resume: the owner may have
 * truncated) and, with a new epoch, bind a new handle. Thread of the owner. */
static void km_fetcher_rebind(km_fetcher_t *t, km_fetch_part_t *fpart, int32_t epoch)
{
    km_plugin_t *cm = t->fm->cm;
    const kbx_api_t *api = cm->ref.api;
    kbx_log_offsets_t lo = {.struct_size = sizeof(lo)};
    km_fetch_event_t ev;
    int32_t rc;

    if (epoch >= 0 && epoch != fpart->dst_epoch) {
        kbx_partition_t *np = NULL;
        rc = api->partition_acquire(cm->ref.host, &fpart->dst_topic_id, fpart->partition, epoch,
                                    &np);
        if (rc == KBX_OK) {
            if (fpart->dst != NULL)
                api->partition_release(cm->ref.host, fpart->dst);
            fpart->dst = np;
            fpart->dst_epoch = epoch;
        } else {
            goto fenced;
        }
    }
    rc = fpart->dst != NULL ? api->log_offsets(cm->ref.host, fpart->dst, &lo) : KBX_ERR_FENCED;
    if (rc != KBX_OK)
        goto fenced;
    fpart->fetch_offset = lo.log_end_offset;
    fpart->lfe = lo.latest_cached_epoch;
    fpart->validated = false;
    fpart->state = fpart->src_leader == t->broker && t->broker >= 0 ? KM_FETCH_ST_FETCHING
                                                                    : KM_FETCH_ST_LOOKUP;
    fpart->retries = 0;
    fpart->progress_ns = 0;
    return;

fenced:
    fpart->state = KM_FETCH_ST_HELD;
    memset(&ev, 0, sizeof(ev));
    ev.type = KM_FETCH_EV_FENCED;
    ev.error_code = -1;
    ev.error_class = KM_FETCH_ERR_FATAL;
    ev.high_watermark = fpart->hw;
    snprintf(ev.message, sizeof(ev.message),
             "%s-%d: the destination replica refused a handle at leader epoch %d (host error %d)",
             fpart->topic, (int)fpart->partition, (int)epoch, (int)rc);
    km_fetch_event(t->fm, fpart, &ev);
    km_fetch_status_update(t->fm, fpart, KM_FETCH_ERR_FATAL, -1, ev.message, 0, 0, 0);
}

/* Apply the owner's requests queued for this thread. */
static void km_fetcher_inbox(km_fetcher_t *t)
{
    km_fetch_mgr_t *fm = t->fm;
    km_fetch_part_t *list, *fpart, *next;

    pthread_mutex_lock(&fm->lock);
    list = t->inbox;
    t->inbox = NULL;
    for (fpart = list; fpart != NULL; fpart = fpart->inbox_next)
        fpart->in_inbox = false;
    pthread_mutex_unlock(&fm->lock);

    for (fpart = list; fpart != NULL; fpart = next) {
        uint32_t ctl;
        int32_t epoch;

        pthread_mutex_lock(&fm->lock);
        next = fpart->inbox_next;
        fpart->inbox_next = NULL;
        ctl = fpart->ctl;
        fpart->ctl = 0;
        epoch = fpart->resume_epoch;
        pthread_mutex_unlock(&fm->lock);

        if (ctl & KM_FCTL_ADOPT) {
            km_fetch_wire_attach(t, fpart);
            fpart->in_session = false;
            if (t->broker < 0 || fpart->src_leader != t->broker) {
                if (fpart->state == KM_FETCH_ST_FETCHING)
                    fpart->state = KM_FETCH_ST_LOOKUP;
            }
            if (fpart->state == KM_FETCH_ST_LOOKUP)
                t->md_wanted = true;
        }
        if (ctl & KM_FCTL_REMOVE) {
            km_fetch_wire_detach(t, fpart);
            km_fetch_wire_leave_session(t, fpart);
            fpart->state = KM_FETCH_ST_REMOVING;
            km_fetch_status_update(fm, fpart, KM_FETCH_ERR_NONE, -1, NULL, 0, 0, 0);
            km_fetch_post_removal(fm, fpart);
            continue;
        }
        if (ctl & KM_FCTL_PAUSE) {
            km_fetch_wire_leave_session(t, fpart);
            fpart->state = KM_FETCH_ST_PAUSED;
        }
        if (ctl & KM_FCTL_RESUME) {
            km_fetcher_rebind(t, fpart, epoch);
            if (fpart->state == KM_FETCH_ST_LOOKUP)
                t->md_wanted = true;
        }
        km_fetch_status_update(fm, fpart, KM_FETCH_ERR_NONE, -1, NULL, 0, 0, 0);
    }
}

/* The mirror's connection settings changed: a new client (in-flight requests are dropped,
 * the session starts anew, partitions look their leader up again). */
static void km_fetcher_reconnect(km_fetcher_t *t)
{
    km_fetch_mgr_t *fm = t->fm;
    kc_client_t *old, *kc;

    pthread_mutex_lock(&fm->lock);
    if (t->conn_gen == t->mirror->conn_gen && t->kc != NULL) {
        pthread_mutex_unlock(&fm->lock);
        return;
    }
    t->conn_gen = t->mirror->conn_gen;
    kc = km_fetcher_client_new(t);
    if (kc == NULL) {
        t->conn_gen--; /* tried again at the next step */
        pthread_mutex_unlock(&fm->lock);
        return;
    }
    old = t->kc;
    t->kc = kc;
    pthread_mutex_unlock(&fm->lock);
    if (old != NULL)
        kc_client_destroy(old); /* callbacks see KC_E_DESTROYED and only free */
    km_log_info(fm->cm, "%s: reconnecting to the source with new settings", t->name);
    t->fetch_busy = false;
    t->md_busy = false;
    t->md_wanted = true;
    t->fetch_ver = -1;
    km_fetch_wire_reset(t);
}

/* No client (it could not be created): wait and try again. */
static int32_t km_fetcher_idle(km_fetcher_t *t)
{
    const kbx_api_t *api = t->fm->cm->ref.api;

    api->latch_wait(t->fm->cm->ref.host, t->latch, t->fm->opts.poll_ms);
    return KBX_THREAD_CONTINUE;
}

static int32_t km_fetcher_step(void *arg)
{
    km_fetcher_t *t = arg;
    km_fetch_mgr_t *fm = t->fm;
    const kbx_api_t *api = fm->cm->ref.api;
    int32_t wait_ms;

    if (atomic_load(&t->stop)) {
        kc_client_t *kc;
        pthread_mutex_lock(&fm->lock);
        kc = t->kc;
        t->kc = NULL;
        pthread_mutex_unlock(&fm->lock);
        /* In-flight requests are called back with KC_E_DESTROYED here. */
        if (kc != NULL)
            kc_client_destroy(kc);
        return KBX_THREAD_EXIT;
    }
    km_fetcher_reconnect(t);
    if (t->kc == NULL)
        return km_fetcher_idle(t);
    km_fetcher_inbox(t);
    wait_ms = km_fetch_wire_work(t, fm->opts.poll_ms);
    kc_client_poll(t->kc, wait_ms);
    if (fm->opts.latch_wait_ms > 0 && !atomic_load(&t->stop))
        api->latch_wait(fm->cm->ref.host, t->latch, fm->opts.latch_wait_ms);
    return KBX_THREAD_CONTINUE;
}

/* Stop and join t, which is unlinked already. fm->lock not held. */
static void km_fetcher_free(km_fetch_mgr_t *fm, km_fetcher_t *t)
{
    km_plugin_t *cm = fm->cm;
    const kbx_api_t *api = cm->ref.api;

    if (t->thread != NULL) {
        atomic_store(&t->stop, 1);
        km_fetcher_wake(t);
        api->thread_join(cm->ref.host, t->thread);
        t->thread = NULL;
    }
    if (t->kc != NULL)
        kc_client_destroy(t->kc); /* the thread never ran */
    t->kc = NULL;
    api->latch_destroy(cm->ref.host, t->latch);
    t->latch = NULL;
    km_fetcher_metrics_drop(t);
    km_fetch_wire_forget_free(t);
    kp_arena_free(&t->rq_ar);
    t->magic = 0;
    km_free(cm, t);
}

/* ---- manager -------------------------------------------------------------------------------- */

km_fetch_mgr_t *km_fetch_mgr_create(km_plugin_t *cm, const km_fetch_opts_t *opts, char *errstr,
                                    size_t errstr_size)
{
    km_fetch_mgr_t *fm;

    if (opts == NULL || opts->on_event == NULL) {
        snprintf(errstr, errstr_size, "fetcher manager: an event callback is required");
        return NULL;
    }
    fm = km_calloc(cm, 1, sizeof(*fm));
    if (fm == NULL) {
        snprintf(errstr, errstr_size, "fetcher manager: out of memory");
        return NULL;
    }
    if (pthread_mutex_init(&fm->lock, NULL) != 0) {
        snprintf(errstr, errstr_size, "fetcher manager: cannot create a mutex");
        km_free(cm, fm);
        return NULL;
    }
    if (pthread_mutex_init(&fm->stats_lock, NULL) != 0) {
        snprintf(errstr, errstr_size, "fetcher manager: cannot create a mutex");
        pthread_mutex_destroy(&fm->lock);
        km_free(cm, fm);
        return NULL;
    }
    fm->magic = KM_FETCH_MGR_MAGIC;
    fm->cm = cm;
    fm->opts = *opts;
    if (fm->opts.poll_ms <= 0)
        fm->opts.poll_ms = 100;
    if (fm->opts.fetch_max_version == 0) {
        /* Test only (docs/plugin.md "Source versions"): cap Fetch, e.g. at v11 so that a new
         * source is fetched as an old one would be (OffsetForLeaderEpoch divergence checks). */
        const char *e = getenv("KMIRROR_TEST_FETCH_MAX_VERSION");
        long v = e != NULL ? strtol(e, NULL, 10) : 0;
        if (v >= 4 && v <= 18) {
            fm->opts.fetch_max_version = (int16_t)v;
            km_log_warn(cm, "test hook KMIRROR_TEST_FETCH_MAX_VERSION: Fetch capped at v%ld", v);
        }
    }
    if (fm->opts.fetch_max_version < 4 || fm->opts.fetch_max_version > 18)
        fm->opts.fetch_max_version = -1;
    atomic_init(&fm->refs, 1);
    atomic_init(&fm->dead, false);
    fm->counters.last_session_id = 0;
    return fm;
}

static void km_fmirror_free(km_fetch_mgr_t *fm, km_fmirror_t *mr)
{
    km_plugin_t *cm = fm->cm;
    const kbx_api_t *api = cm->ref.api;

    if (mr->m_bytes != NULL)
        api->metric_unregister(cm->ref.host, mr->m_bytes);
    if (mr->m_records != NULL)
        api->metric_unregister(cm->ref.host, mr->m_records);
    if (mr->m_lag != NULL)
        api->metric_unregister(cm->ref.host, mr->m_lag);
    if (mr->m_errors != NULL)
        api->metric_unregister(cm->ref.host, mr->m_errors);
    if (mr->m_received != NULL)
        api->metric_unregister(cm->ref.host, mr->m_received);
    km_free(cm, mr->name);
    km_free(cm, mr->bootstrap);
    km_free(cm, mr->client_id);
    mr->magic = 0;
    km_free(cm, mr);
}

void km_fetch_mgr_destroy(km_fetch_mgr_t *fm)
{
    km_plugin_t *cm;

    if (fm == NULL)
        return;
    cm = fm->cm;
    KM_CHECK_OBJ(cm, fm, KM_FETCH_MGR_MAGIC);
    atomic_store(&fm->dead, true);
    /* No thread starts from now on (hand-overs fail), every thread is told to stop, all are
     * joined, and only then freed: a thread still running may wake another one meanwhile. */
    pthread_mutex_lock(&fm->lock);
    fm->stopping = true;
    for (km_fetcher_t *t = fm->fetchers; t != NULL; t = t->next)
        atomic_store(&t->stop, 1);
    pthread_mutex_unlock(&fm->lock);
    for (km_fetcher_t *t = fm->fetchers; t != NULL; t = t->next) {
        km_fetcher_wake(t);
        cm->ref.api->thread_join(cm->ref.host, t->thread);
        t->thread = NULL;
    }
    while (fm->fetchers != NULL) {
        km_fetcher_t *t = fm->fetchers;
        fm->fetchers = t->next;
        km_fetcher_free(fm, t);
    }
    while (fm->parts != NULL) {
        km_fetch_part_t *fpart = fm->parts;
        fm->parts = fpart->reg_next;
        if (fm->opts.free_opaque != NULL && fpart->opaque != NULL)
            fm->opts.free_opaque(cm, fpart->opaque);
        fpart->opaque = NULL;
        km_fetch_part_unref(fpart);
    }
    while (fm->mirrors != NULL) {
        km_fmirror_t *mr = fm->mirrors;
        fm->mirrors = mr->next;
        km_fmirror_free(fm, mr);
    }
    km_fetch_mgr_unref(fm);
}

static km_fmirror_t *km_fmirror_find(km_fetch_mgr_t *fm, const char *name)
{
    for (km_fmirror_t *mr = fm->mirrors; mr != NULL; mr = mr->next)
        if (strcmp(mr->name, name) == 0)
            return mr;
    return NULL;
}

static char *km_fetch_join(km_plugin_t *cm, const km_strlist_t *l)
{
    size_t n = 1;
    char *s;

    for (size_t i = 0; i < l->n; i++)
        n += strlen(l->v[i]) + 1;
    s = km_malloc(cm, n);
    if (s == NULL)
        return NULL;
    s[0] = '\0';
    for (size_t i = 0; i < l->n; i++) {
        if (i > 0)
            strcat(s, ",");
        strcat(s, l->v[i]);
    }
    return s;
}

static kbx_metric_t *km_fetch_metric(km_fetch_mgr_t *fm, int32_t type, const char *name,
                                     const char *help, const char *mirror)
{
    static const char *const keys[] = {"mirror"};
    const char *values[1] = {mirror};
    kbx_metric_desc_t d = {
        .struct_size = sizeof(d),
        .type = type,
        .group = "kmirror.fetch",
        .name = name,
        .help = help,
        .label_keys = keys,
        .label_values = values,
        .label_count = 1,
    };
    kbx_metric_t *m = NULL;

    if (fm->cm->ref.api->metric_register(fm->cm->ref.host, &d, &m) != KBX_OK)
        km_log_warn(fm->cm, "mirror %s: metric %s not registered", mirror, name);
    return m;
}

km_err_t km_fetch_mirror_set(km_fetch_mgr_t *fm, const char *mirror, const km_mirror_config_t *conf,
                             char *errstr, size_t errstr_size)
{
    km_plugin_t *cm = fm->cm;
    km_fmirror_t *mr;
    char *bootstrap, *client_id;
    bool fresh = false, reconnect = false;

    if (mirror == NULL || mirror[0] == '\0' || conf == NULL) {
        snprintf(errstr, errstr_size, "mirror name and configuration are required");
        return KM_ERR_INVALID;
    }
    if (conf->security_protocol != NULL && strcmp(conf->security_protocol, "PLAINTEXT") != 0) {
        snprintf(errstr, errstr_size,
                 "mirror %s: security.protocol=%s is not supported yet; the source client speaks "
                 "PLAINTEXT only",
                 mirror, conf->security_protocol);
        return KM_ERR_CONFIG;
    }
    if (conf->bootstrap_servers.n == 0) {
        snprintf(errstr, errstr_size, "mirror %s: bootstrap.servers is empty", mirror);
        return KM_ERR_CONFIG;
    }
    bootstrap = km_fetch_join(cm, &conf->bootstrap_servers);
    client_id = km_strdup(cm, conf->client_id != NULL ? conf->client_id : "");
    if (bootstrap == NULL || client_id == NULL) {
        km_free(cm, bootstrap);
        km_free(cm, client_id);
        snprintf(errstr, errstr_size, "out of memory");
        return KM_ERR_NOMEM;
    }
    pthread_mutex_lock(&fm->lock);
    mr = km_fmirror_find(fm, mirror);
    if (mr == NULL) {
        mr = km_calloc(cm, 1, sizeof(*mr));
        if (mr != NULL)
            mr->name = km_strdup(cm, mirror);
        if (mr == NULL || mr->name == NULL) {
            pthread_mutex_unlock(&fm->lock);
            if (mr != NULL)
                km_free(cm, mr);
            km_free(cm, bootstrap);
            km_free(cm, client_id);
            snprintf(errstr, errstr_size, "out of memory");
            return KM_ERR_NOMEM;
        }
        mr->magic = KM_FMIRROR_MAGIC;
        mr->next = fm->mirrors;
        fm->mirrors = mr;
        fresh = true;
    }
    if (!fresh) {
        /* A connection setting changed: the threads reconnect (fetch.* apply as they are). */
        int32_t cto = conf->socket_connection_setup_timeout_ms > INT32_MAX
                          ? INT32_MAX
                          : (int32_t)conf->socket_connection_setup_timeout_ms;
        if (strcmp(mr->bootstrap, bootstrap) != 0 || strcmp(mr->client_id, client_id) != 0 ||
            mr->request_timeout_ms != conf->request_timeout_ms || mr->connect_timeout_ms != cto ||
            mr->reconnect_backoff_ms != conf->reconnect_backoff_ms ||
            mr->reconnect_backoff_max_ms != conf->reconnect_backoff_max_ms ||
            mr->socket_recv_buffer != conf->socket_receive_buffer_bytes ||
            mr->socket_send_buffer != conf->socket_send_buffer_bytes) {
            mr->conn_gen++;
            reconnect = true;
        }
    }
    km_free(cm, mr->bootstrap);
    mr->bootstrap = bootstrap;
    km_free(cm, mr->client_id);
    mr->client_id = client_id;
    mr->request_timeout_ms = conf->request_timeout_ms;
    mr->connect_timeout_ms = conf->socket_connection_setup_timeout_ms > INT32_MAX
                                 ? INT32_MAX
                                 : (int32_t)conf->socket_connection_setup_timeout_ms;
    mr->reconnect_backoff_ms =
        conf->reconnect_backoff_ms > INT32_MAX ? INT32_MAX : (int32_t)conf->reconnect_backoff_ms;
    mr->reconnect_backoff_max_ms = conf->reconnect_backoff_max_ms > INT32_MAX
                                       ? INT32_MAX
                                       : (int32_t)conf->reconnect_backoff_max_ms;
    mr->retry_backoff_ms =
        conf->retry_backoff_ms > INT32_MAX ? INT32_MAX : (int32_t)conf->retry_backoff_ms;
    mr->socket_recv_buffer = conf->socket_receive_buffer_bytes;
    mr->socket_send_buffer = conf->socket_send_buffer_bytes;
    mr->fetch_wait_max_ms = conf->fetch_wait_max_ms;
    mr->fetch_backoff_ms = conf->fetch_backoff_ms;
    mr->fetch_min_bytes = conf->fetch_min_bytes;
    mr->fetch_response_max_bytes = conf->fetch_response_max_bytes;
    mr->fetch_max_bytes = conf->fetch_max_bytes;
    snprintf(mr->cluster_id, sizeof(mr->cluster_id), "%s",
             conf->source_cluster_id != NULL ? conf->source_cluster_id : "");
    if (reconnect) {
        km_log_info(cm, "mirror %s: source connection settings changed, reconnecting", mirror);
        for (km_fetcher_t *t = fm->fetchers; t != NULL; t = t->next) {
            if (t->mirror != mr)
                continue;
            if (t->kc != NULL)
                kc_client_wakeup(t->kc);
            cm->ref.api->latch_set(cm->ref.host, t->latch);
        }
    }
    pthread_mutex_unlock(&fm->lock);
    if (fresh) {
        /* Registered outside the lock; only this (coordinator) thread changes the mirror list
         * and the metric pointers are read under the lock. */
        kbx_metric_t *b = km_fetch_metric(fm, KBX_METRIC_COUNTER, "bytes_total",
                                          "record batch bytes appended", mirror);
        kbx_metric_t *r = km_fetch_metric(fm, KBX_METRIC_COUNTER, "records_total",
                                          "records appended (batch record counts)", mirror);
        kbx_metric_t *l = km_fetch_metric(fm, KBX_METRIC_GAUGE, "lag_records",
                                          "source high watermark minus local log end, summed "
                                          "over the mirror's partitions",
                                          mirror);
        kbx_metric_t *e = km_fetch_metric(fm, KBX_METRIC_COUNTER, "errors_total",
                                          "fetch errors (transient and fatal)", mirror);
        kbx_metric_t *rb = km_fetch_metric(fm, KBX_METRIC_COUNTER, "received_bytes_total",
                                           "Fetch response bytes received from the source "
                                           "(size prefix, response header and body)",
                                           mirror);
        pthread_mutex_lock(&fm->lock);
        mr->m_bytes = b;
        mr->m_records = r;
        mr->m_lag = l;
        mr->m_errors = e;
        mr->m_received = rb;
        pthread_mutex_unlock(&fm->lock);
    }
    return KM_OK;
}

km_err_t km_fetch_mirror_remove(km_fetch_mgr_t *fm, const char *mirror)
{
    km_fmirror_t *mr, **mp;

    pthread_mutex_lock(&fm->lock);
    mr = km_fmirror_find(fm, mirror != NULL ? mirror : "");
    if (mr == NULL || mr->nparts > 0) {
        pthread_mutex_unlock(&fm->lock);
        return KM_ERR_INVALID;
    }
    for (mp = &fm->mirrors; *mp != mr; mp = &(*mp)->next)
        ;
    *mp = mr->next;
    pthread_mutex_unlock(&fm->lock);
    for (;;) {
        km_fetcher_t *t = NULL, **tp;
        pthread_mutex_lock(&fm->lock);
        for (tp = &fm->fetchers; *tp != NULL; tp = &(*tp)->next) {
            if ((*tp)->mirror == mr) {
                t = *tp;
                *tp = t->next;
                break;
            }
        }
        pthread_mutex_unlock(&fm->lock);
        if (t == NULL)
            break;
        km_fetcher_free(fm, t);
    }
    km_fmirror_free(fm, mr);
    return KM_OK;
}

static bool km_fetch_uuid_zero(const kbx_uuid_t *u)
{
    for (int i = 0; i < 16; i++)
        if (u->bytes[i] != 0)
            return false;
    return true;
}

static uint32_t km_fetch_hash(const char *s, int32_t partition)
{
    uint32_t h = 2166136261u;

    for (; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    h = (h ^ (uint32_t)partition) * 16777619u;
    return h;
}

km_err_t km_fetch_partition_add(km_fetch_mgr_t *fm, const km_fetch_part_spec_t *spec,
                                km_fetch_part_t **out)
{
    km_plugin_t *cm = fm->cm;
    const kbx_api_t *api = cm->ref.api;
    kbx_log_offsets_t lo = {.struct_size = sizeof(lo)};
    km_fetch_part_t *fpart;
    km_fmirror_t *mr;
    km_fetcher_t *t;
    int32_t nf;

    if (spec == NULL || out == NULL || spec->mirror == NULL || spec->source_topic == NULL ||
        spec->source_topic[0] == '\0' || spec->partition < 0)
        return KM_ERR_INVALID;
    *out = NULL;
    fpart = km_calloc(cm, 1, sizeof(*fpart));
    if (fpart == NULL)
        return KM_ERR_NOMEM;
    fpart->magic = KM_FETCH_PART_MAGIC;
    atomic_init(&fpart->refs, 1); /* the registry's */
    fpart->fm = fm;
    fpart->opaque = spec->opaque;
    fpart->topic = km_strdup(cm, spec->source_topic);
    if (fpart->topic == NULL) {
        km_free(cm, fpart);
        return KM_ERR_NOMEM;
    }
    fpart->src_topic_id = spec->source_topic_id;
    fpart->src_id_known = !km_fetch_uuid_zero(&spec->source_topic_id);
    fpart->partition = spec->partition;
    fpart->dst_topic_id = spec->dest_topic_id;
    fpart->dst_epoch = spec->dest_leader_epoch;
    fpart->state = KM_FETCH_ST_LOOKUP;
    fpart->src_epoch = -1;
    fpart->src_leader = -1;
    fpart->hw = -1;
    fpart->start_pending = -1;
    fpart->st.error_code = -1;
    fpart->st.source_leader = -1;
    fpart->st.source_leader_epoch = -1;
    fpart->st.high_watermark = -1;
    fpart->st.lag = -1;
    fpart->st.last_append_ms = -1;
    if (api->partition_acquire(cm->ref.host, &spec->dest_topic_id, spec->partition,
                               spec->dest_leader_epoch, &fpart->dst) != KBX_OK) {
        km_log_warn(cm, "%s-%d: no destination replica at leader epoch %d", spec->source_topic,
                    (int)spec->partition, (int)spec->dest_leader_epoch);
        km_fetch_part_unref(fpart);
        return KM_ERR_HOST;
    }
    fpart->fetch_offset = spec->fetch_offset;
    fpart->lfe = spec->last_fetched_epoch;
    if (spec->fetch_offset < 0 || spec->last_fetched_epoch < 0) {
        if (api->log_offsets(cm->ref.host, fpart->dst, &lo) != KBX_OK) {
            km_fetch_part_unref(fpart);
            return KM_ERR_HOST;
        }
        if (spec->fetch_offset < 0)
            fpart->fetch_offset = lo.log_end_offset;
        /* An unknown last fetched epoch at the log end is the log's newest epoch: divergence
         * detection then covers a restart from an existing log too. */
        if (spec->last_fetched_epoch < 0 && fpart->fetch_offset == lo.log_end_offset)
            fpart->lfe = lo.latest_cached_epoch;
    }
    fpart->st.fetch_offset = fpart->fetch_offset;
    fpart->st.last_fetched_epoch = fpart->lfe;
    fpart->st.state = KM_FETCH_ST_LOOKUP;

    pthread_mutex_lock(&fm->lock);
    mr = km_fmirror_find(fm, spec->mirror);
    for (km_fetch_part_t *o = fm->parts; mr != NULL && o != NULL; o = o->reg_next) {
        if (!o->removing && o->partition == spec->partition &&
            memcmp(&o->dst_topic_id, &spec->dest_topic_id, sizeof(kbx_uuid_t)) == 0) {
            mr = NULL; /* already fetched */
        }
    }
    if (mr == NULL) {
        pthread_mutex_unlock(&fm->lock);
        km_fetch_part_unref(fpart);
        return KM_ERR_INVALID;
    }
    fpart->mirror = mr;
    nf = cm->conf.num_fetchers_per_source_broker > 0 ? cm->conf.num_fetchers_per_source_broker : 1;
    fpart->fetcher_idx = (int32_t)(km_fetch_hash(fpart->topic, fpart->partition) % (uint32_t)nf);
    /* The mirror's lookup thread (broker -1) finds the source leader, then hands it over. */
    t = km_fetcher_get(fm, mr, -1, 0, NULL, 0);
    if (t == NULL) {
        pthread_mutex_unlock(&fm->lock);
        km_fetch_part_unref(fpart);
        return KM_ERR_HOST;
    }
    fpart->reg_next = fm->parts;
    fm->parts = fpart;
    mr->nparts++;
    fpart->owner = t;
    km_fetch_inbox_push(t, fpart, KM_FCTL_ADOPT);
    pthread_mutex_unlock(&fm->lock);
    km_fetcher_wake(t);
    *out = fpart;
    return KM_OK;
}

static km_err_t km_fetch_control(km_fetch_mgr_t *fm, km_fetch_part_t *fpart, uint32_t ctl,
                                 int32_t epoch, km_fetch_done_fn done, void *arg)
{
    km_fetcher_t *t;

    KM_CHECK_OBJ(fm->cm, fpart, KM_FETCH_PART_MAGIC);
    pthread_mutex_lock(&fm->lock);
    if (fpart->removing) {
        pthread_mutex_unlock(&fm->lock);
        return KM_ERR_INVALID;
    }
    if (ctl & KM_FCTL_REMOVE) {
        fpart->removing = true;
        fpart->rm_done = done;
        fpart->rm_arg = arg;
        fpart->st.state = KM_FETCH_ST_REMOVING;
    }
    if (ctl & KM_FCTL_RESUME) {
        fpart->ctl &= ~KM_FCTL_PAUSE;
        fpart->resume_epoch = epoch;
    }
    if (ctl & KM_FCTL_PAUSE)
        fpart->ctl &= ~KM_FCTL_RESUME;
    t = fpart->owner;
    km_fetch_inbox_push(t, fpart, ctl);
    pthread_mutex_unlock(&fm->lock);
    km_fetcher_wake(t);
    return KM_OK;
}

km_err_t km_fetch_partition_remove(km_fetch_mgr_t *fm, km_fetch_part_t *fpart,
                                   km_fetch_done_fn done, void *arg)
{
    return km_fetch_control(fm, fpart, KM_FCTL_REMOVE, -1, done, arg);
}

km_err_t km_fetch_partition_pause(km_fetch_mgr_t *fm, km_fetch_part_t *fpart)
{
    return km_fetch_control(fm, fpart, KM_FCTL_PAUSE, -1, NULL, NULL);
}

km_err_t km_fetch_partition_resume(km_fetch_mgr_t *fm, km_fetch_part_t *fpart,
                                   int32_t dest_leader_epoch)
{
    return km_fetch_control(fm, fpart, KM_FCTL_RESUME, dest_leader_epoch, NULL, NULL);
}
