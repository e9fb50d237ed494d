/*
 * km_fetch_wire.c - what a fetcher thread sends and how it handles the answers: source Metadata
 * (leaders, epochs, topic ids), consumer Fetch with incremental sessions (KIP-227),
 * OffsetsForLeaderEpoch below Fetch v12, ListOffsets for OFFSET_OUT_OF_RANGE, and the append of
 * fetched batches to the destination log. Everything here runs on the fetcher thread that owns
 * the partitions (kc_ callbacks run inside its kc_client_poll).
 */
#define KM_LOG_COMPONENT "kmirror.fetch"
#include "fetch/km_fetch_wire.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/km_plugin_types.h"
#include "fetch/km_fetch_ver.h"
#include "kp_errcode.h"
#include "kp_reader.h"
#include "util/km_log.h"
#include "util/km_mem.h"

#define KM_FW_MAX_BACKOFF_MS 10000 /* a source back from an outage is fetched within 10 s */
#define KM_FW_GONE_ANSWERS   3     /* Metadata answers without a known topic before it is */
#define KM_FW_GONE_MS        3000  /* ... taken as deleted, over at least this long (default) */

static int64_t km_fw_now_ns(km_fetcher_t *t)
{
    return t->fm->cm->ref.api->clock_monotonic_ns(t->fm->cm->ref.host);
}

static bool km_fw_fetchable(const km_fetch_part_t *fpart)
{
    return fpart->state == KM_FETCH_ST_FETCHING && !fpart->need_ofle && !fpart->rpc_busy &&
           fpart->oor_step == 0;
}

static bool km_fw_owned(km_fetcher_t *t, const km_fetch_part_t *fpart)
{
    return fpart->t_owner == t;
}

/* ---- the thread's set: a list plus two hash indexes (a response names thousands of
 *      partitions; each must be found in O(1)) ----------------------------------------------- */

static uint32_t km_fw_hash_bytes(const void *b, size_t n, int32_t partition)
{
    const uint8_t *p = b;
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    h = (h ^ (uint32_t)partition) * 16777619u;
    return h ^ (h >> 15);
}

static void km_fw_index_put(km_fetcher_t *t, km_fetch_part_t *p)
{
    size_t mask = t->nbuckets - 1;

    p->hname = km_fw_hash_bytes(p->topic, strlen(p->topic), p->partition);
    p->hname_next = t->by_name[p->hname & mask];
    t->by_name[p->hname & mask] = p;
    p->hid_in = p->src_id_known;
    if (p->hid_in) {
        p->hid = km_fw_hash_bytes(p->src_topic_id.bytes, 16, p->partition);
        p->hid_next = t->by_id[p->hid & mask];
        t->by_id[p->hid & mask] = p;
    }
}

static void km_fw_index_del(km_fetcher_t *t, km_fetch_part_t *p)
{
    size_t mask = t->nbuckets - 1;
    km_fetch_part_t **pp;

    for (pp = &t->by_name[p->hname & mask]; *pp != NULL; pp = &(*pp)->hname_next) {
        if (*pp == p) {
            *pp = p->hname_next;
            break;
        }
    }
    p->hname_next = NULL;
    if (p->hid_in) {
        for (pp = &t->by_id[p->hid & mask]; *pp != NULL; pp = &(*pp)->hid_next) {
            if (*pp == p) {
                *pp = p->hid_next;
                break;
            }
        }
    }
    p->hid_next = NULL;
    p->hid_in = false;
}

/* Grow the indexes to twice the partitions (at least 64 buckets); false when out of memory,
 * the old ones stay. */
static bool km_fw_index_grow(km_fetcher_t *t, size_t want)
{
    km_plugin_t *cm = t->fm->cm;
    size_t nb = t->nbuckets ? t->nbuckets : 64;
    km_fetch_part_t **bi, **bn;

    while (nb < want * 2)
        nb *= 2;
    if (nb == t->nbuckets)
        return true;
    bi = km_calloc(cm, nb, sizeof(*bi));
    bn = km_calloc(cm, nb, sizeof(*bn));
    if (bi == NULL || bn == NULL) {
        km_free(cm, bi);
        km_free(cm, bn);
        return t->nbuckets > 0;
    }
    km_free(cm, t->by_id);
    km_free(cm, t->by_name);
    t->by_id = bi;
    t->by_name = bn;
    t->nbuckets = nb;
    for (km_fetch_part_t *p = t->parts; p != NULL; p = p->t_next)
        km_fw_index_put(t, p);
    return true;
}

void km_fetch_wire_attach(km_fetcher_t *t, km_fetch_part_t *fpart)
{
    fpart->t_next = t->parts;
    if (t->parts != NULL)
        t->parts->t_pprev = &fpart->t_next;
    t->parts = fpart;
    fpart->t_pprev = &t->parts;
    fpart->t_owner = t;
    t->nparts++;
    if (t->nparts * 2 > t->nbuckets && km_fw_index_grow(t, t->nparts))
        return; /* the rebuild indexed it */
    if (t->nbuckets > 0)
        km_fw_index_put(t, fpart);
}

void km_fetch_wire_detach(km_fetcher_t *t, km_fetch_part_t *fpart)
{
    if (fpart->t_owner != t)
        return;
    if (t->nbuckets > 0)
        km_fw_index_del(t, fpart);
    *fpart->t_pprev = fpart->t_next;
    if (fpart->t_next != NULL)
        fpart->t_next->t_pprev = fpart->t_pprev;
    fpart->t_next = NULL;
    fpart->t_pprev = NULL;
    fpart->t_owner = NULL;
    t->nparts--;
}

/* ---- session bookkeeping -------------------------------------------------------------------- */

void km_fetch_wire_leave_session(km_fetcher_t *t, km_fetch_part_t *fpart)
{
    km_plugin_t *cm = t->fm->cm;
    km_fforget_t *f;

    if (!fpart->in_session)
        return;
    fpart->in_session = false;
    if (t->sess_epoch <= 0)
        return; /* the next request is a full one anyway */
    if (t->nforget == t->cap_forget) {
        size_t cap = t->cap_forget ? t->cap_forget * 2 : 8;
        km_fforget_t *nv = km_realloc(cm, t->forget, cap * sizeof(*nv));
        if (nv == NULL) {
            /* Cannot remember it: start a new session instead, which forgets everything. */
            t->sess_id = 0;
            t->sess_epoch = 0;
            return;
        }
        t->forget = nv;
        t->cap_forget = cap;
    }
    f = &t->forget[t->nforget];
    f->topic = km_strdup(cm, fpart->topic);
    if (f->topic == NULL) {
        t->sess_id = 0;
        t->sess_epoch = 0;
        return;
    }
    f->topic_id = fpart->src_topic_id;
    f->partition = fpart->partition;
    t->nforget++;
}

static void km_fw_forget_clear(km_plugin_t *cm, km_fforget_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        km_free(cm, v[i].topic);
        v[i].topic = NULL;
    }
}

void km_fetch_wire_forget_free(km_fetcher_t *t)
{
    km_plugin_t *cm = t->fm->cm;

    km_free(cm, t->by_id);
    km_free(cm, t->by_name);
    t->by_id = t->by_name = NULL;
    t->nbuckets = 0;

    km_fw_forget_clear(cm, t->forget, t->nforget);
    km_free(cm, t->forget);
    t->forget = NULL;
    t->nforget = t->cap_forget = 0;
    km_fw_forget_clear(cm, t->forget_sent, t->nforget_sent);
    km_free(cm, t->forget_sent);
    t->forget_sent = NULL;
    t->nforget_sent = 0;
}

static void km_fw_session_reset(km_fetcher_t *t)
{
    km_plugin_t *cm = t->fm->cm;

    t->sess_id = 0;
    t->sess_epoch = 0;
    for (km_fetch_part_t *p = t->parts; p != NULL; p = p->t_next)
        p->in_session = false;
    km_fw_forget_clear(cm, t->forget, t->nforget);
    t->nforget = 0;
    pthread_mutex_lock(&t->fm->stats_lock);
    t->fm->counters.session_resets++;
    pthread_mutex_unlock(&t->fm->stats_lock);
}

void km_fetch_wire_reset(km_fetcher_t *t)
{
    km_fw_session_reset(t);
    for (km_fetch_part_t *p = t->parts; p != NULL; p = p->t_next) {
        p->rpc_busy = false;
        p->oor_step = 0;
        p->validated = false;
        if (p->state == KM_FETCH_ST_FETCHING)
            p->state = KM_FETCH_ST_LOOKUP;
    }
}

/* ---- partition outcomes --------------------------------------------------------------------- */

static void km_fw_event(km_fetcher_t *t, km_fetch_part_t *fpart, int32_t type, int16_t code,
                        int32_t cls, const char *msg)
{
    km_fetch_event_t ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = type;
    ev.error_code = code;
    ev.error_class = cls;
    ev.high_watermark = fpart->hw;
    ev.offset = fpart->fetch_offset;
    ev.log_end_offset = fpart->fetch_offset;
    ev.epoch = -1;
    ev.end_offset = -1;
    if (msg != NULL)
        snprintf(ev.message, sizeof(ev.message), "%s", msg);
    km_fetch_event(t->fm, fpart, &ev);
}

/* A transient error: back off, then go on (through a metadata lookup when lookup). */
static void km_fw_transient(km_fetcher_t *t, km_fetch_part_t *fpart, int16_t code, bool lookup,
                            const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void km_fw_transient(km_fetcher_t *t, km_fetch_part_t *fpart, int16_t code, bool lookup,
                            const char *fmt, ...)
{
    char msg[256];
    int n;
    va_list ap;
    int32_t base = t->fetch_backoff_ms > 0 ? t->fetch_backoff_ms : 1;

    n = snprintf(msg, sizeof(msg), "%s-%d at offset %" PRId64 ": ", fpart->topic,
                 (int)fpart->partition, fpart->fetch_offset);
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(msg))
        vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    va_end(ap);
    km_fetch_wire_leave_session(t, fpart);
    fpart->retries++;
    fpart->backoff_ms = fpart->backoff_ms <= 0 ? base : fpart->backoff_ms * 2;
    if (fpart->backoff_ms > KM_FW_MAX_BACKOFF_MS)
        fpart->backoff_ms = base > KM_FW_MAX_BACKOFF_MS ? base : KM_FW_MAX_BACKOFF_MS;
    fpart->retry_at_ns = km_fw_now_ns(t) + (int64_t)fpart->backoff_ms * 1000000;
    fpart->state = KM_FETCH_ST_BACKOFF;
    fpart->next_state = lookup ? KM_FETCH_ST_LOOKUP : KM_FETCH_ST_FETCHING;
    if (lookup)
        fpart->validated = false;
    km_fetch_status_update(t->fm, fpart, KM_FETCH_ERR_TRANSIENT, code, msg, 0, 0, 0);
    /* The first error of a streak, then at powers of two: the owner learns without a flood. */
    if ((fpart->retries & (fpart->retries - 1)) == 0) {
        km_log_info(t->fm->cm, "%s (retry %d)", msg, (int)fpart->retries);
        km_fw_event(t, fpart, KM_FETCH_EV_TRANSIENT, code, KM_FETCH_ERR_TRANSIENT, msg);
    }
}

/* Something the owner must act on: the partition is held. */
static void km_fw_hold(km_fetcher_t *t, km_fetch_part_t *fpart, int32_t type, int16_t code,
                       int32_t epoch, int64_t end_offset, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

static void km_fw_hold(km_fetcher_t *t, km_fetch_part_t *fpart, int32_t type, int16_t code,
                       int32_t epoch, int64_t end_offset, const char *fmt, ...)
{
    km_fetch_event_t ev;
    va_list ap;
    int32_t cls = type == KM_FETCH_EV_FATAL || type == KM_FETCH_EV_FENCED ? KM_FETCH_ERR_FATAL
                                                                          : KM_FETCH_ERR_NONE;

    memset(&ev, 0, sizeof(ev));
    va_start(ap, fmt);
    vsnprintf(ev.message, sizeof(ev.message), fmt, ap);
    va_end(ap);
    km_fetch_wire_leave_session(t, fpart);
    fpart->state = KM_FETCH_ST_HELD;
    ev.type = type;
    ev.error_code = code;
    ev.error_class = cls;
    ev.epoch = epoch;
    ev.end_offset = end_offset;
    ev.high_watermark = fpart->hw;
    ev.offset = fpart->fetch_offset;
    ev.log_end_offset = fpart->fetch_offset;
    if (type == KM_FETCH_EV_FATAL)
        km_log_error(t->fm->cm, "%s", ev.message);
    else
        km_log_info(t->fm->cm, "%s", ev.message);
    km_fetch_status_update(t->fm, fpart, cls, code, ev.message, 0, 0, 0);
    km_fetch_event(t->fm, fpart, &ev);
}

/* ---- source versions (km_fetch_ver.h) ---------------------------------------------------------
 */

/* The ranges source node advertised in its last ApiVersions answer; false when none is known
 * (not connected). */
static bool km_fw_src_ranges(km_fetcher_t *t, int32_t node, km_fetch_vrange_t src[KM_FV_N])
{
    int16_t lo, hi;

    if (kc_client_api_range(t->kc, node, KP_APIKEY_ApiVersions, &lo, &hi) != KC_E_OK)
        return false;
    for (int api = 0; api < KM_FV_N; api++) {
        src[api].known = kc_client_api_range(t->kc, node, km_fetch_ver_need(api)->api_key,
                                             &src[api].min_ver, &src[api].max_ver) == KC_E_OK;
    }
    return true;
}

static int16_t km_fw_fetch_max(km_fetcher_t *t);

/*
 * A request for api found no version in common with the source broker (KC_E_NO_VERSION): the
 * source cannot be mirrored. Every partition of the thread that is being looked up or fetched is
 * held FATAL with UNSUPPORTED_VERSION and a message naming the source broker, the API and both
 * version ranges (not retryable: a source upgrade, then --recover, design M93).
 */
static void km_fw_unsupported(km_fetcher_t *t, int api)
{
    km_fetch_vrange_t src[KM_FV_N];
    km_fetch_vers_t vers;
    char why[200];
    int32_t node = t->broker;
    bool have = t->broker >= 0 && km_fw_src_ranges(t, t->broker, src);

    /* The lookup thread sends to any bootstrap address: the one that answered ApiVersions. */
    for (int32_t i = 0; !have && t->broker < 0 && i < 64; i++) {
        have = km_fw_src_ranges(t, KC_NODE_BOOTSTRAP(i), src);
        node = -1;
    }
    if (!have ||
        km_fetch_ver_choose(src, node, km_fw_fetch_max(t), &vers, NULL, why, sizeof(why))) {
        const km_fetch_vneed_t *need = km_fetch_ver_need(api);
        char who[32] = "the source broker";
        if (t->broker >= 0)
            snprintf(who, sizeof(who), "source broker %d", (int)t->broker);
        snprintf(why, sizeof(why), "%s has no version of %s in common with kmirror's v%d..%d (%s)",
                 who, need->name, (int)need->min_ver, (int)need->max_ver, need->why_min);
    }
    for (km_fetch_part_t *p = t->parts, *next; p != NULL; p = next) {
        next = p->t_next;
        if (p->state != KM_FETCH_ST_LOOKUP && p->state != KM_FETCH_ST_FETCHING &&
            p->state != KM_FETCH_ST_BACKOFF)
            continue;
        p->rpc_busy = false;
        p->oor_step = 0;
        km_fw_hold(t, p, KM_FETCH_EV_FATAL, KP_ERR_UNSUPPORTED_VERSION, -1, -1,
                   "%s-%d at offset %" PRId64 ": %s", p->topic, (int)p->partition, p->fetch_offset,
                   why);
    }
}

/* ---- appending --------------------------------------------------------------------------------
 */

/* A log start moved below its target (km_fw_restart_at_batch) goes up once the HW allows it:
 * after each append and at each step of the thread (KBX_ERR_OFFSET: the HW is below it yet; the
 * destination's followers have not fetched the batch). */
static void km_fw_raise_start(km_fetcher_t *t, km_fetch_part_t *fpart)
{
    km_plugin_t *cm = t->fm->cm;
    int32_t rc;

    if (fpart->start_pending < 0)
        return;
    rc = cm->ref.api->log_set_start(cm->ref.host, fpart->dst, fpart->start_pending);
    if (rc == KBX_ERR_OFFSET)
        return;
    if (rc != KBX_OK)
        km_log_warn(cm,
                    "%s-%d: cannot raise the log start to the source's %" PRId64 " (host error %d)",
                    fpart->topic, (int)fpart->partition, fpart->start_pending, (int)rc);
    fpart->start_pending = -1;
}

/*
 * The first fetched batch starts below the fetch offset: the source's log start lies inside it
 * (DeleteRecords to a mid-batch offset). Only a local log that is empty at the fetch offset
 * (just restarted at the source log start after OFFSET_OUT_OF_RANGE) can take it: restart it
 * empty at the batch's base offset, as a Kafka follower does when its leader's log start is
 * inside a batch, and raise the log start back to the source's after the append
 * (km_fw_raise_start), so both the bytes and the log start offset equal the source's. A
 * non-empty local log ends at a batch boundary, so the source answered from another batch
 * layout: FATAL as any offsets out of order. KBX_OK: append.
 */
static int32_t km_fw_restart_at_batch(km_fetcher_t *t, km_fetch_part_t *fpart, int64_t base)
{
    km_plugin_t *cm = t->fm->cm;
    const kbx_api_t *api = cm->ref.api;
    kbx_log_offsets_t lo = {.struct_size = sizeof(lo)};
    int32_t rc = api->log_offsets(cm->ref.host, fpart->dst, &lo);

    if (rc == KBX_OK &&
        (lo.log_start_offset != lo.log_end_offset || lo.log_end_offset != fpart->fetch_offset)) {
        km_fw_hold(t, fpart, KM_FETCH_EV_FATAL, -1, -1, -1,
                   "%s-%d: the source answered offset %" PRId64 " with a batch at %" PRId64
                   " below the local log end (offsets out of order)",
                   fpart->topic, (int)fpart->partition, fpart->fetch_offset, base);
        return KBX_ERR_OFFSET;
    }
    if (rc == KBX_OK)
        rc = api->log_set_start(cm->ref.host, fpart->dst, base);
    if (rc == KBX_ERR_FENCED || rc == KBX_ERR_NOT_LEADER || rc == KBX_ERR_NOT_FOUND) {
        km_fw_hold(t, fpart, KM_FETCH_EV_FENCED, -1, -1, -1,
                   "%s-%d: fenced while moving the empty log to %" PRId64, fpart->topic,
                   (int)fpart->partition, base);
        return rc;
    }
    if (rc != KBX_OK) {
        km_fw_transient(t, fpart, -1, false,
                        "cannot restart the empty log at the batch base %" PRId64
                        " (host error %d)",
                        base, (int)rc);
        return rc;
    }
    km_log_info(cm,
                "%s-%d: the source log start %" PRId64 " is inside the batch at %" PRId64
                "; local log restarted at the batch",
                fpart->topic, (int)fpart->partition, fpart->fetch_offset, base);
    if (fpart->start_pending < fpart->fetch_offset)
        fpart->start_pending = fpart->fetch_offset;
    fpart->fetch_offset = base;
    return KBX_OK;
}

/* Append what a partition's fetched records allow (plan: km_fetch_plan_chunk of buf at
 * fpart->fetch_offset); the data path's core. */
static void km_fw_records(km_fetcher_t *t, km_fetch_part_t *fpart, const uint8_t *buf,
                          const km_fetch_plan_t *planp)
{
    km_plugin_t *cm = t->fm->cm;
    const kbx_api_t *api = cm->ref.api;
    kbx_append_result_t res = {.struct_size = sizeof(res)};
    km_fetch_plan_t plan = *planp;
    int32_t rc;

    if (plan.end > plan.start && plan.first_offset < fpart->fetch_offset &&
        km_fw_restart_at_batch(t, fpart, plan.first_offset) != KBX_OK)
        return;
    if (plan.end > plan.start) {
        int64_t at = fpart->fetch_offset;
        rc = api->log_append(cm->ref.host, fpart->dst, buf + plan.start, plan.end - plan.start,
                             &res);
        switch (rc) {
        case KBX_OK:
            break;
        case KBX_ERR_FENCED:
        case KBX_ERR_NOT_LEADER:
        case KBX_ERR_NOT_FOUND:
            km_fw_hold(t, fpart, KM_FETCH_EV_FENCED, -1, -1, -1,
                       "%s-%d: the destination refused the append at offset %" PRId64
                       " (%s): not the leader at epoch %d any more",
                       fpart->topic, (int)fpart->partition, at,
                       rc == KBX_ERR_FENCED ? "fenced" : "not leader", (int)fpart->dst_epoch);
            return;
        case KBX_ERR_IO:
        case KBX_ERR_NOMEM:
        case KBX_ERR_TIMEOUT:
            km_fw_transient(t, fpart, -1, false, "destination append failed (host error %d)",
                            (int)rc);
            return;
        default:
            km_fw_hold(t, fpart, KM_FETCH_EV_FATAL, -1, -1, -1,
                       "%s-%d: the destination refused %d fetched batch(es) at offset %" PRId64
                       " (host error %d: %s)",
                       fpart->topic, (int)fpart->partition, (int)plan.batches, at, (int)rc,
                       rc == KBX_ERR_CORRUPT  ? "corrupt batch"
                       : rc == KBX_ERR_OFFSET ? "offsets out of order"
                       : rc == KBX_ERR_STATE  ? "the partition is writable"
                                              : "refused");
            return;
        }
        fpart->fetch_offset =
            res.log_end_offset > plan.next_offset ? res.log_end_offset : plan.next_offset;
        fpart->lfe = plan.last_epoch;
        km_fw_raise_start(t, fpart);
        fpart->retries = 0;
        fpart->backoff_ms = 0;
        km_fetch_status_update(t->fm, fpart, KM_FETCH_ERR_NONE, -1, NULL,
                               (uint64_t)(plan.end - plan.start), (uint64_t)plan.records,
                               (uint64_t)plan.batches);
        /* Progress for the owner (it clears a recorded failure): after the first append at a
         * new position or after another event, then at most once a second, not for every
         * answer (design M106: a post wakes the coordinator loop). */
        if (fpart->progress_ns == 0 || km_fw_now_ns(t) - fpart->progress_ns >= 1000000000) {
            km_fetch_event_t ev;
            fpart->progress_ns = km_fw_now_ns(t);
            if (fpart->progress_ns == 0)
                fpart->progress_ns = 1;
            memset(&ev, 0, sizeof(ev));
            ev.type = KM_FETCH_EV_APPENDED;
            ev.error_code = -1;
            ev.epoch = plan.last_epoch;
            ev.end_offset = -1;
            ev.log_end_offset = fpart->fetch_offset;
            ev.high_watermark = fpart->hw;
            ev.offset = at;
            km_fetch_event(t->fm, fpart, &ev);
        }
    } else {
        /* An answer without new batches also ends an error streak (an idle partition that
         * came back must not show the last error, or back off longer, for ever). */
        bool streak = fpart->retries > 0;

        fpart->retries = 0;
        fpart->backoff_ms = 0;
        km_fetch_status_update(t->fm, fpart, KM_FETCH_ERR_NONE, -1, streak ? "" : NULL, 0, 0, 0);
    }
    switch (plan.stop) {
    case KM_FETCH_STOP_EPOCH:
        km_fw_hold(t, fpart, KM_FETCH_EV_EPOCH_EXCEEDED, -1, plan.stop_epoch, -1,
                   "%s-%d: the batch at offset %" PRId64 " has leader epoch %d, above the "
                   "destination leader epoch %d",
                   fpart->topic, (int)fpart->partition, plan.stop_offset, (int)plan.stop_epoch,
                   (int)fpart->dst_epoch);
        break;
    case KM_FETCH_STOP_CORRUPT:
    case KM_FETCH_STOP_FORMAT:
        km_fw_hold(t, fpart, KM_FETCH_EV_FATAL,
                   plan.stop == KM_FETCH_STOP_FORMAT ? KP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT : -1,
                   -1, -1, "%s-%d: %s in the batch at offset %" PRId64 " fetched from broker %d",
                   fpart->topic, (int)fpart->partition, plan.stop_reason, plan.stop_offset,
                   (int)t->broker);
        break;
    default:
        break;
    }
}

/* ---- Metadata ---------------------------------------------------------------------------------
 */

typedef struct km_fw_md {
    km_fetcher_t *t;
    kp_arena_t ar;
    kp_MetadataRequest_t rq;
} km_fw_md_t;

static int km_fw_md_encode(kp_writer_t *wr, int16_t ver, void *opaque)
{
    km_fw_md_t *md = opaque;

    return kp_MetadataRequest_encode(wr, &md->rq, ver);
}

static void km_fw_copy_str(char *dst, size_t size, kp_str_t s)
{
    size_t n = s.len > 0 ? (size_t)s.len : 0;

    if (n >= size)
        n = size - 1;
    if (n > 0)
        memcpy(dst, s.ptr, n);
    dst[n] = '\0';
}

static bool km_fw_str_eq(kp_str_t s, const char *c)
{
    size_t n = strlen(c);

    return s.len >= 0 && (size_t)s.len == n && memcmp(s.ptr, c, n) == 0;
}

static void km_fw_md_lookup_failed(km_fetcher_t *t, const char *why)
{
    for (km_fetch_part_t *p = t->parts; p != NULL; p = p->t_next) {
        if (p->state != KM_FETCH_ST_LOOKUP)
            continue;
        km_fw_transient(t, p, -1, true, "source metadata: %s", why);
    }
}

/*
 * The source answers as another cluster (its address now serves a cluster other than the one
 * the mirror was created against): every partition being looked up or fetched is held FATAL.
 * Returns true when it did.
 */
static bool km_fw_md_other_cluster(km_fetcher_t *t, const kp_MetadataResponse_t *resp, int16_t ver)
{
    char cid[KM_FW_CID_MAX];

    if (ver < 2 || t->cluster_id[0] == '\0' || resp->ClusterId.len <= 0 ||
        km_fw_str_eq(resp->ClusterId, t->cluster_id))
        return false;
    km_fw_copy_str(cid, sizeof(cid), resp->ClusterId);
    for (km_fetch_part_t *p = t->parts, *next; p != NULL; p = next) {
        next = p->t_next;
        if (p->state != KM_FETCH_ST_LOOKUP && p->state != KM_FETCH_ST_FETCHING)
            continue;
        km_fw_hold(t, p, KM_FETCH_EV_FATAL, KP_ERR_INCONSISTENT_CLUSTER_ID, -1, -1,
                   "%s-%d: the source answers as cluster %s, not %s, the cluster this mirror "
                   "copies (another cluster at the source's address?); the mirrored data up to "
                   "offset %" PRId64 " is kept read-only",
                   p->topic, (int)p->partition, cid, t->cluster_id, p->fetch_offset);
    }
    return true;
}

/*
 * The source's Metadata does not list a topic whose id we know: deleted, or a broker that has
 * not learned it (yet). Deleted once KM_FW_GONE_ANSWERS answers in a row over at least
 * KM_FW_GONE_MS said so (a restarted or lagging broker catches up well within that): FATAL,
 * held. Before that, a transient error. Returns true when it held the partition.
 */
static bool km_fw_md_topic_gone(km_fetcher_t *t, km_fetch_part_t *p, int16_t code)
{
    int64_t now = km_fw_now_ns(t);
    int64_t window_ms = t->fm->opts.topic_gone_ms > 0 ? t->fm->opts.topic_gone_ms : KM_FW_GONE_MS;

    if (!p->src_id_known) {
        km_fw_transient(t, p, code, true, "source metadata: %s",
                        code >= 0 ? kp_errcode_name(code) : "the topic is not listed");
        return false;
    }
    if (p->gone_count == 0)
        p->gone_since_ns = now;
    if (p->gone_count < INT32_MAX)
        p->gone_count++;
    if (p->gone_count < KM_FW_GONE_ANSWERS || now - p->gone_since_ns < window_ms * 1000000) {
        km_fw_transient(t, p, code, true, "the source does not know the topic (%s, %d time(s))",
                        code >= 0 ? kp_errcode_name(code) : "not listed", (int)p->gone_count);
        return false;
    }
    km_fw_hold(t, p, KM_FETCH_EV_FATAL, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION, -1, -1,
               "%s-%d: the source topic was deleted (not in the source's metadata for %d s); "
               "the mirrored data up to offset %" PRId64 " is kept read-only",
               p->topic, (int)p->partition, (int)((now - p->gone_since_ns) / 1000000000LL),
               p->fetch_offset);
    return true;
}

static void km_fw_on_metadata(kc_client_t *kc, int err, int16_t ver, const uint8_t *body,
                              size_t len, void *opaque)
{
    km_fw_md_t *md = opaque;
    km_fetcher_t *t = md->t;
    kp_MetadataResponse_t resp;
    kp_arena_t ar;
    kp_reader_t rd;
    km_fetch_part_t *p, *next;
    (void)kc;

    kp_arena_free(&md->ar);
    km_free(t->fm->cm, md);
    if (err == KC_E_DESTROYED)
        return;
    t->md_busy = false;
    if (err == KC_E_NO_VERSION) {
        km_fw_unsupported(t, KM_FV_METADATA);
        return;
    }
    if (err != KC_E_OK) {
        t->md_backoff_until_ns = km_fw_now_ns(t) + (int64_t)t->retry_backoff_ms * 1000000;
        km_fw_md_lookup_failed(t, kc_err_str(err));
        return;
    }
    kp_arena_init(&ar, 0);
    kp_MetadataResponse_init(&resp);
    kp_reader_init(&rd, body, len);
    if (kp_MetadataResponse_decode(&rd, &ar, &resp, ver) != 0) {
        kp_arena_free(&ar);
        km_fw_md_lookup_failed(t, "undecodable Metadata response");
        return;
    }
    if (km_fw_md_other_cluster(t, &resp, ver)) {
        kp_arena_free(&ar);
        return;
    }
    for (int32_t i = 0; i < resp.Brokers.cnt; i++) {
        const kp_MetadataResponse_MetadataResponseBroker_t *b = &resp.Brokers.v[i];
        char host[256];
        if (b->NodeId < 0 || b->Port <= 0 || b->Port > 65535)
            continue;
        km_fw_copy_str(host, sizeof(host), b->Host);
        if (host[0] != '\0')
            kc_client_node_set(t->kc, b->NodeId, host, b->Port);
    }
    for (p = t->parts; p != NULL; p = next) {
        const kp_MetadataResponse_MetadataResponseTopic_t *tp = NULL;
        const kp_MetadataResponse_MetadataResponsePartition_t *pp = NULL;
        char host[256] = "";
        int32_t port = 0;

        next = p->t_next;
        if (p->state != KM_FETCH_ST_LOOKUP && p->state != KM_FETCH_ST_FETCHING)
            continue;
        for (int32_t i = 0; i < resp.Topics.cnt && tp == NULL; i++)
            if (km_fw_str_eq(resp.Topics.v[i].Name, p->topic))
                tp = &resp.Topics.v[i];
        if (tp == NULL || tp->ErrorCode == KP_ERR_UNKNOWN_TOPIC_OR_PARTITION) {
            km_fw_md_topic_gone(t, p, tp != NULL ? tp->ErrorCode : -1);
            continue;
        }
        if (tp->ErrorCode != 0) {
            if (p->state == KM_FETCH_ST_LOOKUP)
                km_fw_transient(t, p, tp->ErrorCode, true, "source metadata: topic error %s",
                                kp_errcode_name(tp->ErrorCode));
            continue;
        }
        p->gone_count = 0;
        p->src_no_id = !p->src_id_known; /* until this answer shows an id (v10+) */
        if (ver >= 10) {
            kbx_uuid_t id;
            bool zero = true;
            memcpy(id.bytes, tp->TopicId.b, 16);
            for (int k = 0; k < 16; k++)
                zero = zero && id.bytes[k] == 0;
            if (!zero && p->src_id_known && memcmp(&id, &p->src_topic_id, sizeof(id)) != 0) {
                km_fw_hold(t, p, KM_FETCH_EV_FATAL, KP_ERR_INCONSISTENT_TOPIC_ID, -1, -1,
                           "%s-%d: the source topic was deleted and re-created (new topic id); "
                           "the mirrored data up to offset %" PRId64 " is kept read-only. To "
                           "mirror the new topic, delete this topic on the destination and start "
                           "it again",
                           p->topic, (int)p->partition, p->fetch_offset);
                continue;
            }
            if (!zero && !p->src_id_known) {
                if (t->nbuckets > 0)
                    km_fw_index_del(t, p);
                p->src_topic_id = id;
                p->src_id_known = true;
                if (t->nbuckets > 0)
                    km_fw_index_put(t, p);
            }
            p->src_no_id = !p->src_id_known;
        }
        for (int32_t k = 0; k < tp->Partitions.cnt && pp == NULL; k++)
            if (tp->Partitions.v[k].PartitionIndex == p->partition)
                pp = &tp->Partitions.v[k];
        if (pp == NULL) {
            km_fw_transient(t, p, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION, true,
                            "the source topic has no partition %d", (int)p->partition);
            continue;
        }
        if ((pp->ErrorCode != 0 && pp->ErrorCode != KP_ERR_REPLICA_NOT_AVAILABLE) ||
            pp->LeaderId < 0) {
            km_fw_transient(
                t, p, pp->ErrorCode, true, "no source leader (%s)",
                kp_errcode_name(pp->ErrorCode != 0 ? pp->ErrorCode : KP_ERR_LEADER_NOT_AVAILABLE));
            continue;
        }
        if (p->state == KM_FETCH_ST_FETCHING && pp->LeaderEpoch >= 0 &&
            pp->LeaderEpoch < p->src_epoch)
            continue; /* older than what the leader told us: stale metadata of another broker */
        if (pp->LeaderId != p->src_leader || pp->LeaderEpoch != p->src_epoch)
            p->validated = false;
        p->src_leader = pp->LeaderId;
        p->src_epoch = pp->LeaderEpoch;
        for (int32_t i = 0; i < resp.Brokers.cnt; i++) {
            if (resp.Brokers.v[i].NodeId == pp->LeaderId) {
                km_fw_copy_str(host, sizeof(host), resp.Brokers.v[i].Host);
                port = resp.Brokers.v[i].Port;
            }
        }
        if (pp->LeaderId == t->broker) {
            if (p->state == KM_FETCH_ST_LOOKUP)
                p->state = KM_FETCH_ST_FETCHING;
            km_fetch_status_update(t->fm, p, KM_FETCH_ERR_NONE, -1, NULL, 0, 0, 0);
            continue;
        }
        p->state = KM_FETCH_ST_FETCHING; /* on the new thread */
        km_fetch_status_update(t->fm, p, KM_FETCH_ERR_NONE, -1, NULL, 0, 0, 0);
        if (!km_fetch_handover(t, p, pp->LeaderId, host[0] != '\0' ? host : NULL, port))
            p->state = KM_FETCH_ST_LOOKUP; /* retried at the next lookup */
    }
    kp_arena_free(&ar);
}

static void km_fw_send_metadata(km_fetcher_t *t)
{
    km_plugin_t *cm = t->fm->cm;
    km_fw_md_t *md;
    size_t n = 0, k = 0;
    int64_t id;

    for (km_fetch_part_t *p = t->parts; p != NULL; p = p->t_next)
        n++;
    if (n == 0)
        return;
    md = km_calloc(cm, 1, sizeof(*md));
    if (md == NULL)
        return;
    md->t = t;
    kp_arena_init(&md->ar, 0);
    kp_MetadataRequest_init(&md->rq);
    md->rq.Topics.v = kp_arena_calloc(&md->ar, n, sizeof(*md->rq.Topics.v));
    if (md->rq.Topics.v == NULL)
        goto fail;
    for (km_fetch_part_t *p = t->parts; p != NULL; p = p->t_next) {
        bool dup = false;
        for (size_t i = 0; i < k && !dup; i++)
            dup = km_fw_str_eq(md->rq.Topics.v[i].Name, p->topic);
        if (dup)
            continue;
        kp_MetadataRequest_MetadataRequestTopic_init(&md->rq.Topics.v[k]);
        {
            /* Copied: the message is encoded when the connection is ready, and the partition
             * may be gone by then. */
            size_t tl = strlen(p->topic);
            char *name = kp_arena_alloc(&md->ar, tl + 1);
            if (name == NULL)
                goto fail;
            memcpy(name, p->topic, tl + 1);
            md->rq.Topics.v[k].Name = kp_str(name);
        }
        k++;
    }
    md->rq.Topics.cnt = (int32_t)k;
    md->rq.AllowAutoTopicCreation = false;
    id = kc_request(t->kc, KC_NODE_ANY, KP_APIKEY_Metadata,
                    km_fetch_ver_need(KM_FV_METADATA)->min_ver,
                    km_fetch_ver_need(KM_FV_METADATA)->max_ver, km_fw_md_encode,
                    t->request_timeout_ms, 0, km_fw_on_metadata, md);
    if (id < 0)
        goto fail;
    t->md_busy = true;
    pthread_mutex_lock(&t->fm->stats_lock);
    t->fm->counters.metadata_requests++;
    pthread_mutex_unlock(&t->fm->stats_lock);
    return;
fail:
    kp_arena_free(&md->ar);
    km_free(cm, md);
}

/* ---- ListOffsets (OFFSET_OUT_OF_RANGE) and OffsetsForLeaderEpoch (Fetch < v12) --------------- */

typedef struct km_fw_prq {
    km_fetcher_t *t;
    km_fetch_part_t *fpart; /* reference */
    kp_arena_t ar;
    union {
        kp_ListOffsetsRequest_t lo;
        kp_OffsetForLeaderEpochRequest_t oe;
    } u;
    int64_t timestamp;
} km_fw_prq_t;

static int km_fw_lo_encode(kp_writer_t *wr, int16_t ver, void *opaque)
{
    km_fw_prq_t *q = opaque;

    return kp_ListOffsetsRequest_encode(wr, &q->u.lo, ver);
}

static int km_fw_oe_encode(kp_writer_t *wr, int16_t ver, void *opaque)
{
    km_fw_prq_t *q = opaque;

    return kp_OffsetForLeaderEpochRequest_encode(wr, &q->u.oe, ver);
}

static void km_fw_prq_free(km_fw_prq_t *q)
{
    km_plugin_t *cm = q->t->fm->cm;

    kp_arena_free(&q->ar);
    km_fetch_part_unref(q->fpart);
    km_free(cm, q);
}

static void km_fw_send_list_offsets(km_fetcher_t *t, km_fetch_part_t *fpart, int64_t ts);

/* The source's earliest or latest offset arrived for a partition out of range. */
static void km_fw_oor_answer(km_fetcher_t *t, km_fetch_part_t *fpart, int64_t off)
{
    km_plugin_t *cm = t->fm->cm;
    const kbx_api_t *api = cm->ref.api;

    if (fpart->oor_step == 1) {
        kbx_log_offsets_t lo = {.struct_size = sizeof(lo)};
        int32_t rc;

        fpart->oor_earliest = off;
        if (fpart->fetch_offset >= off) {
            fpart->oor_step = 2;
            km_fw_send_list_offsets(t, fpart, -1);
            return;
        }
        /* Below the source log start (retention or DeleteRecords went past us): what we lack
         * is gone at the source too. Restart the local log at the source log start. */
        rc = api->log_offsets(cm->ref.host, fpart->dst, &lo);
        if (rc == KBX_OK && lo.log_end_offset > lo.log_start_offset)
            rc = api->log_truncate(cm->ref.host, fpart->dst, lo.log_start_offset);
        if (rc == KBX_OK)
            rc = api->log_set_start(cm->ref.host, fpart->dst, off);
        fpart->oor_step = 0;
        if (rc == KBX_ERR_FENCED || rc == KBX_ERR_NOT_LEADER) {
            km_fw_hold(t, fpart, KM_FETCH_EV_FENCED, -1, -1, -1,
                       "%s-%d: fenced while moving the log start to %" PRId64, fpart->topic,
                       (int)fpart->partition, off);
            return;
        }
        if (rc != KBX_OK) {
            km_fw_transient(t, fpart, KP_ERR_OFFSET_OUT_OF_RANGE, false,
                            "cannot move the log start to the source's %" PRId64 " (host error %d)",
                            off, (int)rc);
            return;
        }
        km_log_info(cm,
                    "%s-%d: offset %" PRId64 " is below the source log start %" PRId64
                    "; local log restarted there",
                    fpart->topic, (int)fpart->partition, fpart->fetch_offset, off);
        fpart->fetch_offset = off;
        fpart->lfe = -1;
        fpart->validated = true;
        fpart->state = KM_FETCH_ST_FETCHING;
        km_fetch_status_update(t->fm, fpart, KM_FETCH_ERR_NONE, -1, NULL, 0, 0, 0);
        return;
    }
    fpart->oor_step = 0;
    if (fpart->fetch_offset > off) {
        /* Above the source log end: the source lost data we mirrored (or it is another log).
         * Divergence handling decides; never an offset reset. */
        km_fw_hold(t, fpart, KM_FETCH_EV_DIVERGED, KP_ERR_OFFSET_OUT_OF_RANGE, fpart->lfe, off,
                   "%s-%d: local log end %" PRId64 " is above the source log end %" PRId64,
                   fpart->topic, (int)fpart->partition, fpart->fetch_offset, off);
        return;
    }
    km_fw_transient(t, fpart, KP_ERR_OFFSET_OUT_OF_RANGE, false,
                    "out of range, but within the source log [%" PRId64 ", %" PRId64 "] now",
                    fpart->oor_earliest, off);
}

static void km_fw_on_list_offsets(kc_client_t *kc, int err, int16_t ver, const uint8_t *body,
                                  size_t len, void *opaque)
{
    km_fw_prq_t *q = opaque;
    km_fetcher_t *t = q->t;
    km_fetch_part_t *fpart = q->fpart;
    kp_ListOffsetsResponse_t resp;
    kp_arena_t ar;
    kp_reader_t rd;
    const kp_ListOffsetsResponse_ListOffsetsPartitionResponse_t *pr = NULL;
    (void)kc;

    if (err == KC_E_DESTROYED || !km_fw_owned(t, fpart) || fpart->state != KM_FETCH_ST_FETCHING) {
        fpart->rpc_busy = false;
        fpart->oor_step = 0;
        km_fw_prq_free(q);
        return;
    }
    fpart->rpc_busy = false;
    if (err == KC_E_NO_VERSION) {
        km_fw_prq_free(q);
        km_fw_unsupported(t, KM_FV_LIST_OFFSETS);
        return;
    }
    kp_arena_init(&ar, 0);
    if (err == KC_E_OK) {
        kp_ListOffsetsResponse_init(&resp);
        kp_reader_init(&rd, body, len);
        if (kp_ListOffsetsResponse_decode(&rd, &ar, &resp, ver) == 0) {
            for (int32_t i = 0; i < resp.Topics.cnt && pr == NULL; i++) {
                if (!km_fw_str_eq(resp.Topics.v[i].Name, fpart->topic))
                    continue;
                for (int32_t k = 0; k < resp.Topics.v[i].Partitions.cnt && pr == NULL; k++)
                    if (resp.Topics.v[i].Partitions.v[k].PartitionIndex == fpart->partition)
                        pr = &resp.Topics.v[i].Partitions.v[k];
            }
        }
    }
    if (pr == NULL || pr->ErrorCode != 0 || pr->Offset < 0) {
        fpart->oor_step = 0;
        km_fw_transient(t, fpart, pr != NULL ? pr->ErrorCode : -1, true,
                        "ListOffsets for the out-of-range position failed: %s",
                        err != KC_E_OK ? kc_err_str(err)
                        : pr == NULL   ? "no answer for the partition"
                                       : kp_errcode_name(pr->ErrorCode));
    } else {
        km_fw_oor_answer(t, fpart, pr->Offset);
    }
    kp_arena_free(&ar);
    km_fw_prq_free(q);
}

static void km_fw_send_list_offsets(km_fetcher_t *t, km_fetch_part_t *fpart, int64_t ts)
{
    km_plugin_t *cm = t->fm->cm;
    km_fw_prq_t *q = km_calloc(cm, 1, sizeof(*q));
    kp_ListOffsetsRequest_ListOffsetsTopic_t *tp;
    kp_ListOffsetsRequest_ListOffsetsPartition_t *pp;
    int64_t id;

    if (q == NULL)
        goto fail;
    q->t = t;
    q->fpart = fpart;
    km_fetch_part_ref(fpart);
    kp_arena_init(&q->ar, 0);
    tp = kp_arena_calloc(&q->ar, 1, sizeof(*tp));
    pp = kp_arena_calloc(&q->ar, 1, sizeof(*pp));
    if (tp == NULL || pp == NULL) {
        km_fw_prq_free(q);
        goto fail;
    }
    kp_ListOffsetsRequest_init(&q->u.lo);
    kp_ListOffsetsRequest_ListOffsetsTopic_init(tp);
    kp_ListOffsetsRequest_ListOffsetsPartition_init(pp);
    q->u.lo.ReplicaId = -1;
    q->u.lo.IsolationLevel = 0;
    tp->Name = kp_str(fpart->topic);
    pp->PartitionIndex = fpart->partition;
    pp->CurrentLeaderEpoch = fpart->src_epoch;
    pp->Timestamp = ts;
    tp->Partitions.v = pp;
    tp->Partitions.cnt = 1;
    q->u.lo.Topics.v = tp;
    q->u.lo.Topics.cnt = 1;
    id = kc_request(t->kc, t->broker, KP_APIKEY_ListOffsets,
                    km_fetch_ver_need(KM_FV_LIST_OFFSETS)->min_ver,
                    km_fetch_ver_need(KM_FV_LIST_OFFSETS)->max_ver, km_fw_lo_encode,
                    t->request_timeout_ms, 0, km_fw_on_list_offsets, q);
    if (id < 0) {
        km_fw_prq_free(q);
        goto fail;
    }
    fpart->rpc_busy = true;
    pthread_mutex_lock(&t->fm->stats_lock);
    t->fm->counters.list_offsets_requests++;
    pthread_mutex_unlock(&t->fm->stats_lock);
    return;
fail:
    fpart->oor_step = 0;
    km_fw_transient(t, fpart, -1, false, "cannot send ListOffsets");
}

static void km_fw_on_epoch(kc_client_t *kc, int err, int16_t ver, const uint8_t *body, size_t len,
                           void *opaque)
{
    km_fw_prq_t *q = opaque;
    km_fetcher_t *t = q->t;
    km_fetch_part_t *fpart = q->fpart;
    kp_OffsetForLeaderEpochResponse_t resp;
    const kp_OffsetForLeaderEpochResponse_EpochEndOffset_t *eo = NULL;
    kp_arena_t ar;
    kp_reader_t rd;
    (void)kc;

    fpart->rpc_busy = false;
    if (err == KC_E_DESTROYED || !km_fw_owned(t, fpart) || fpart->state != KM_FETCH_ST_FETCHING) {
        km_fw_prq_free(q);
        return;
    }
    if (err == KC_E_NO_VERSION) {
        km_fw_prq_free(q);
        km_fw_unsupported(t, KM_FV_OFLE);
        return;
    }
    kp_arena_init(&ar, 0);
    if (err == KC_E_OK) {
        kp_OffsetForLeaderEpochResponse_init(&resp);
        kp_reader_init(&rd, body, len);
        if (kp_OffsetForLeaderEpochResponse_decode(&rd, &ar, &resp, ver) == 0) {
            for (int32_t i = 0; i < resp.Topics.cnt && eo == NULL; i++) {
                if (!km_fw_str_eq(resp.Topics.v[i].Topic, fpart->topic))
                    continue;
                for (int32_t k = 0; k < resp.Topics.v[i].Partitions.cnt && eo == NULL; k++)
                    if (resp.Topics.v[i].Partitions.v[k].Partition == fpart->partition)
                        eo = &resp.Topics.v[i].Partitions.v[k];
            }
        }
    }
    if (eo == NULL || eo->ErrorCode != 0) {
        int16_t code = eo != NULL ? eo->ErrorCode : -1;
        km_fw_transient(t, fpart, code, true, "OffsetsForLeaderEpoch failed: %s",
                        err != KC_E_OK ? kc_err_str(err)
                        : eo == NULL   ? "no answer for the partition"
                                       : kp_errcode_name(code));
    } else if (eo->EndOffset >= 0 && eo->EndOffset < fpart->fetch_offset) {
        km_fw_hold(t, fpart, KM_FETCH_EV_DIVERGED, -1, eo->LeaderEpoch, eo->EndOffset,
                   "%s-%d: diverged from the source: its epoch %d ends at %" PRId64
                   ", local log end %" PRId64,
                   fpart->topic, (int)fpart->partition, (int)eo->LeaderEpoch, eo->EndOffset,
                   fpart->fetch_offset);
    } else {
        fpart->need_ofle = false;
        fpart->validated = true;
    }
    kp_arena_free(&ar);
    km_fw_prq_free(q);
}

static void km_fw_send_epoch(km_fetcher_t *t, km_fetch_part_t *fpart)
{
    km_plugin_t *cm = t->fm->cm;
    km_fw_prq_t *q = km_calloc(cm, 1, sizeof(*q));
    kp_OffsetForLeaderEpochRequest_OffsetForLeaderTopic_t *tp;
    kp_OffsetForLeaderEpochRequest_OffsetForLeaderPartition_t *pp;
    int64_t id;

    if (q == NULL)
        return;
    q->t = t;
    q->fpart = fpart;
    km_fetch_part_ref(fpart);
    kp_arena_init(&q->ar, 0);
    tp = kp_arena_calloc(&q->ar, 1, sizeof(*tp));
    pp = kp_arena_calloc(&q->ar, 1, sizeof(*pp));
    if (tp == NULL || pp == NULL) {
        km_fw_prq_free(q);
        return;
    }
    kp_OffsetForLeaderEpochRequest_init(&q->u.oe);
    kp_OffsetForLeaderEpochRequest_OffsetForLeaderTopic_init(tp);
    kp_OffsetForLeaderEpochRequest_OffsetForLeaderPartition_init(pp);
    q->u.oe.ReplicaId = -1; /* a consumer (v3+) */
    tp->Topic = kp_str(fpart->topic);
    pp->Partition = fpart->partition;
    pp->CurrentLeaderEpoch = fpart->src_epoch;
    pp->LeaderEpoch = fpart->lfe;
    tp->Partitions.v = pp;
    tp->Partitions.cnt = 1;
    q->u.oe.Topics.v = tp;
    q->u.oe.Topics.cnt = 1;
    id = kc_request(t->kc, t->broker, KP_APIKEY_OffsetForLeaderEpoch,
                    km_fetch_ver_need(KM_FV_OFLE)->min_ver, km_fetch_ver_need(KM_FV_OFLE)->max_ver,
                    km_fw_oe_encode, t->request_timeout_ms, 0, km_fw_on_epoch, q);
    if (id < 0) {
        km_fw_prq_free(q);
        return;
    }
    fpart->rpc_busy = true;
    pthread_mutex_lock(&t->fm->stats_lock);
    t->fm->counters.epoch_requests++;
    pthread_mutex_unlock(&t->fm->stats_lock);
}

/* ---- Fetch ------------------------------------------------------------------------------------
 */

/* Test only: KMIRROR_TEST_FETCH_NO_SESSION=N makes every N-th Fetch of a fetcher a full one
 * without a session (SessionId 0, SessionEpoch -1; the next one starts a new session), so
 * tests/mirror_e2e scenario scale can show that its session checks fail (run.sh --inject
 * no-session). Read once; never set in production. */
static bool km_fw_test_no_session(km_fetcher_t *t)
{
    static atomic_int v = -1;
    int x = atomic_load(&v);

    if (x < 0) {
        const char *e = getenv("KMIRROR_TEST_FETCH_NO_SESSION");
        long n = e != NULL ? strtol(e, NULL, 10) : 0;
        x = n > 0 && n < INT32_MAX ? (int)n : 0;
        atomic_store(&v, x);
    }
    return x > 0 && ++t->test_fetches % (uint64_t)x == 0;
}

static int km_fw_fetch_encode(kp_writer_t *wr, int16_t ver, void *opaque)
{
    km_fetcher_t *t = opaque;
    km_plugin_t *cm = t->fm->cm;
    bool ids = ver >= 13, full, nosess = km_fw_test_no_session(t);
    size_t n = 0, ntop = 0, nparts = 0;
    kp_FetchRequest_FetchTopic_t *tv;
    kp_FetchRequest_FetchPartition_t *pv;
    kp_FetchRequest_ForgottenTopic_t *fv = NULL;

    t->fetch_ver = ver;
    if (ver < 7 || (t->sess_epoch > 0 && ids != t->sess_ids) || nosess)
        km_fw_session_reset(t);
    full = t->sess_epoch <= 0;
    if (full) {
        km_fw_forget_clear(cm, t->forget, t->nforget);
        t->nforget = 0;
    }
    for (km_fetch_part_t *p = t->parts; p != NULL; p = p->t_next) {
        p->incl = false;
        n++;
        if (!km_fw_fetchable(p))
            continue;
        if (ids && !p->src_id_known)
            continue; /* learned from the next metadata answer */
        if (ver < 12 && !p->validated && p->lfe >= 0) {
            /* No LastFetchedEpoch below v12: check with OffsetsForLeaderEpoch first. */
            p->need_ofle = true;
            km_fetch_wire_leave_session(t, p);
            continue;
        }
        if (!full && p->in_session && p->sent_offset == p->fetch_offset &&
            p->sent_epoch == p->src_epoch && p->sent_lfe == p->lfe)
            continue; /* unchanged: the session has it */
        p->incl = true;
        nparts++;
    }
    kp_arena_free(&t->rq_ar);
    kp_arena_init(&t->rq_ar, 0);
    tv = kp_arena_calloc(&t->rq_ar, nparts > 0 ? nparts : 1, sizeof(*tv));
    pv = kp_arena_calloc(&t->rq_ar, nparts > 0 ? nparts : 1, sizeof(*pv));
    if (t->nforget > 0)
        fv = kp_arena_calloc(&t->rq_ar, t->nforget, sizeof(*fv));
    if (tv == NULL || pv == NULL || (t->nforget > 0 && fv == NULL))
        return -1;
    kp_FetchRequest_init(&t->rq);
    /* Group included partitions by topic; the partitions of one topic are consecutive in pv. */
    {
        size_t k = 0;
        for (km_fetch_part_t *p = t->parts; p != NULL; p = p->t_next) {
            size_t ti;
            if (!p->incl)
                continue;
            for (ti = 0; ti < ntop; ti++)
                if (km_fw_str_eq(tv[ti].Topic, p->topic))
                    break;
            if (ti < ntop)
                continue; /* grouped with its topic below */
            kp_FetchRequest_FetchTopic_init(&tv[ntop]);
            tv[ntop].Topic = kp_str(p->topic);
            memcpy(tv[ntop].TopicId.b, p->src_topic_id.bytes, 16);
            tv[ntop].Partitions.v = &pv[k];
            tv[ntop].Partitions.cnt = 0;
            for (km_fetch_part_t *q = p; q != NULL; q = q->t_next) {
                kp_FetchRequest_FetchPartition_t *fp;
                if (!q->incl || strcmp(q->topic, p->topic) != 0)
                    continue;
                fp = &pv[k++];
                kp_FetchRequest_FetchPartition_init(fp);
                fp->Partition = q->partition;
                fp->CurrentLeaderEpoch = q->src_epoch;
                fp->FetchOffset = q->fetch_offset;
                /* Not ignorable: below v12 a value other than -1 fails the encode (every Fetch
                 * after the first append did, until M95); OffsetsForLeaderEpoch checks there. */
                fp->LastFetchedEpoch = ver >= KM_FV_FETCH_DIVERGING ? q->lfe : -1;
                fp->LogStartOffset = -1;
                fp->PartitionMaxBytes = t->fetch_max_bytes;
                tv[ntop].Partitions.cnt++;
                q->sent_offset = q->fetch_offset;
                q->sent_epoch = q->src_epoch;
                q->sent_lfe = q->lfe;
                q->in_session = true;
                if (ver >= 12)
                    q->validated = true;
            }
            ntop++;
        }
    }
    for (size_t i = 0; i < t->nforget; i++) {
        kp_FetchRequest_ForgottenTopic_init(&fv[i]);
        fv[i].Topic = kp_str(t->forget[i].topic);
        memcpy(fv[i].TopicId.b, t->forget[i].topic_id.bytes, 16);
        fv[i].Partitions.v = &t->forget[i].partition;
        fv[i].Partitions.cnt = 1;
    }
    t->rq.ReplicaId = -1;
    t->rq.MaxWaitMs = t->fetch_wait_max_ms;
    t->rq.MinBytes = t->fetch_min_bytes;
    t->rq.MaxBytes = t->fetch_response_max_bytes;
    t->rq.IsolationLevel = 0; /* READ_UNCOMMITTED: up to the high watermark */
    t->rq.SessionId = full ? 0 : t->sess_id;
    t->rq.SessionEpoch = full ? (nosess ? -1 : 0) : t->sess_epoch;
    t->rq.Topics.v = tv;
    t->rq.Topics.cnt = (int32_t)ntop;
    t->rq.ForgottenTopicsData.v = fv;
    t->rq.ForgottenTopicsData.cnt = (int32_t)t->nforget;
    t->rq.RackId = kp_str("");
    t->sess_ids = ids;
    /* stats_lock, never fm->lock: this runs under the kc_ client's lock (km_fetch_int.h) */
    pthread_mutex_lock(&t->fm->stats_lock);
    t->fm->counters.fetches++;
    if (full)
        t->fm->counters.full_fetches++;
    else
        t->fm->counters.incremental_fetches++;
    t->fm->counters.partitions_sent += nparts;
    t->fm->counters.forgotten_sent += t->nforget;
    t->fm->counters.last_session_id = t->rq.SessionId;
    t->fm->counters.last_session_epoch = t->rq.SessionEpoch;
    if (t->fm->counters.fetch_version_min == 0 || ver < t->fm->counters.fetch_version_min)
        t->fm->counters.fetch_version_min = ver;
    if (ver > t->fm->counters.fetch_version_max)
        t->fm->counters.fetch_version_max = ver;
    if (t->m_sess_id != NULL)
        cm->ref.api->metric_record(cm->ref.host, t->m_sess_id, (double)t->rq.SessionId);
    if (t->m_sess_epoch != NULL)
        cm->ref.api->metric_record(cm->ref.host, t->m_sess_epoch, (double)t->rq.SessionEpoch);
    pthread_mutex_unlock(&t->fm->stats_lock);
    /* The forgotten names must live until this request is encoded; keep them one round. */
    km_fw_forget_clear(cm, t->forget_sent, t->nforget_sent);
    km_free(cm, t->forget_sent);
    t->forget_sent = t->forget;
    t->nforget_sent = t->nforget;
    t->forget = NULL;
    t->nforget = t->cap_forget = 0;
    (void)n;
    return kp_FetchRequest_encode(wr, &t->rq, ver);
}

static km_fetch_part_t *km_fw_find(km_fetcher_t *t,
                                   const kp_FetchResponse_FetchableTopicResponse_t *tr,
                                   int32_t partition, int16_t ver)
{
    size_t mask = t->nbuckets - 1;

    if (t->nbuckets == 0)
        return NULL;
    if (ver >= 13) {
        uint32_t h = km_fw_hash_bytes(tr->TopicId.b, 16, partition);
        for (km_fetch_part_t *p = t->by_id[h & mask]; p != NULL; p = p->hid_next)
            if (p->hid == h && p->partition == partition &&
                memcmp(tr->TopicId.b, p->src_topic_id.bytes, 16) == 0)
                return p;
        return NULL;
    }
    if (tr->Topic.len < 0)
        return NULL;
    {
        uint32_t h = km_fw_hash_bytes(tr->Topic.ptr, (size_t)tr->Topic.len, partition);
        for (km_fetch_part_t *p = t->by_name[h & mask]; p != NULL; p = p->hname_next)
            if (p->hname == h && p->partition == partition && km_fw_str_eq(tr->Topic, p->topic))
                return p;
    }
    return NULL;
}

/* A partition's records whose append waits until the next Fetch is on the wire (design M105):
 * the position and epoch it had before they were planned. */
typedef struct km_fw_pipe {
    km_fetch_part_t *p;
    const uint8_t *buf;
    km_fetch_plan_t plan;
    int64_t offset;
    int32_t lfe;
} km_fw_pipe_t;

/* One partition of a Fetch answer. With pipe (not NULL), clean records are not appended here:
 * the partition's position moves past them and *pipe says what to append (true); false:
 * handled in full. */
static bool km_fw_partition(km_fetcher_t *t, km_fetch_part_t *p,
                            const kp_FetchResponse_PartitionData_t *pd, int16_t ver,
                            km_fw_pipe_t *pipe)
{
    int16_t code = pd->ErrorCode;

    if (p->state != KM_FETCH_ST_FETCHING || !p->in_session || p->sent_offset != p->fetch_offset)
        return false; /* moved on since the request (paused, reset, truncated) */
    if (pd->HighWatermark >= 0)
        p->hw = pd->HighWatermark;
    if (ver >= 12 && pd->CurrentLeader.LeaderEpoch > p->src_epoch) {
        p->src_epoch = pd->CurrentLeader.LeaderEpoch;
        if (pd->CurrentLeader.LeaderId >= 0 && pd->CurrentLeader.LeaderId != t->broker) {
            p->src_leader = pd->CurrentLeader.LeaderId;
            km_fw_transient(t, p, KP_ERR_NOT_LEADER_OR_FOLLOWER, true,
                            "the source leader moved to broker %d (epoch %d)",
                            (int)pd->CurrentLeader.LeaderId, (int)pd->CurrentLeader.LeaderEpoch);
            return false;
        }
    }
    switch (code) {
    case 0:
        break;
    case KP_ERR_OFFSET_OUT_OF_RANGE:
        km_fetch_wire_leave_session(t, p);
        p->oor_step = 1;
        km_fw_send_list_offsets(t, p, -2);
        return false;
    case KP_ERR_NOT_LEADER_OR_FOLLOWER:
    case KP_ERR_FENCED_LEADER_EPOCH:
    case KP_ERR_UNKNOWN_TOPIC_ID:
    case KP_ERR_UNKNOWN_TOPIC_OR_PARTITION:
    case KP_ERR_LEADER_NOT_AVAILABLE:
    case KP_ERR_UNKNOWN_LEADER_EPOCH:
    case KP_ERR_INCONSISTENT_TOPIC_ID:
    case KP_ERR_KAFKA_STORAGE_ERROR:
    case KP_ERR_REPLICA_NOT_AVAILABLE:
        km_fw_transient(t, p, code, true, "source broker %d: %s", (int)t->broker,
                        kp_errcode_name(code));
        return false;
    default:
        km_fw_transient(t, p, code, false, "source broker %d: %s", (int)t->broker,
                        kp_errcode_name(code));
        return false;
    }
    if (ver >= 12 && (pd->DivergingEpoch.Epoch >= 0 || pd->DivergingEpoch.EndOffset >= 0)) {
        km_fw_hold(t, p, KM_FETCH_EV_DIVERGED, -1, pd->DivergingEpoch.Epoch,
                   pd->DivergingEpoch.EndOffset,
                   "%s-%d: diverged from the source: its epoch %d ends at %" PRId64
                   ", local log end %" PRId64 " (last fetched epoch %d)",
                   p->topic, (int)p->partition, (int)pd->DivergingEpoch.Epoch,
                   pd->DivergingEpoch.EndOffset, p->fetch_offset, (int)p->lfe);
        return false;
    }
    {
        const uint8_t *buf = pd->Records.ptr;
        size_t len = pd->Records.len > 0 ? (size_t)pd->Records.len : 0;
        km_fetch_plan_t plan;

        km_fetch_plan_chunk(buf, len, p->fetch_offset, p->dst_epoch, &plan);
        if (pipe != NULL && plan.end > plan.start && plan.stop == KM_FETCH_STOP_NONE &&
            plan.first_offset >= p->fetch_offset) {
            /* Clean batches from the fetch position on: appended after the next Fetch is sent
             * (km_fw_on_fetch), which asks for what follows them. */
            pipe->p = p;
            pipe->buf = buf;
            pipe->plan = plan;
            pipe->offset = p->fetch_offset;
            pipe->lfe = p->lfe;
            p->fetch_offset = plan.next_offset;
            p->lfe = plan.last_epoch;
            return true;
        }
        km_fw_records(t, p, buf, &plan);
    }
    return false;
}

static void km_fw_fetch_failed(km_fetcher_t *t, const char *why)
{
    km_fw_session_reset(t);
    for (km_fetch_part_t *p = t->parts; p != NULL; p = p->t_next) {
        if (p->state != KM_FETCH_ST_FETCHING)
            continue;
        km_fw_transient(t, p, -1, true, "fetch from source broker %d failed: %s", (int)t->broker,
                        why);
    }
}

/* The wire size of a Fetch response: size prefix, header (correlation id, and from v12 the
 * flexible header's tagged fields, an empty set: one byte) and the body the client handed over. */
static void km_fw_count_received(km_fetcher_t *t, int16_t ver, size_t body_len)
{
    km_fetch_mgr_t *fm = t->fm;
    size_t n = body_len + 4 + (ver >= 12 ? 5 : 4);

    pthread_mutex_lock(&fm->lock);
    if (t->mirror->m_received != NULL)
        fm->cm->ref.api->metric_record(fm->cm->ref.host, t->mirror->m_received, (double)n);
    pthread_mutex_unlock(&fm->lock);
}

static void km_fw_send_fetch(km_fetcher_t *t);

/* From a Fetch answer's callback: the next Fetch, on the wire now (kc_client_flush) if the
 * step would send it. */
static void km_fw_send_next(km_fetcher_t *t)
{
    if (t->broker < 0 || t->fetch_busy || km_fw_now_ns(t) < t->fetch_backoff_until_ns)
        return;
    km_fw_send_fetch(t);
    if (t->fetch_busy)
        (void)kc_client_flush(t->kc);
}

/* Append planned records (km_fw_partition with a pipe). The partition goes back to the position
 * they were planned at: the append moves it again, on success to the one the next Fetch asked
 * for (its answer is taken), on failure nowhere (that answer is dropped as one for another
 * position, km_fw_partition). */
static void km_fw_append_piped(km_fetcher_t *t, const km_fw_pipe_t *q)
{
    km_fetch_part_t *p = q->p;

    p->fetch_offset = q->offset;
    p->lfe = q->lfe;
    if (p->state != KM_FETCH_ST_FETCHING)
        return; /* held meanwhile: the records are fetched again */
    km_fw_records(t, p, q->buf, &q->plan);
}

static void km_fw_on_fetch(kc_client_t *kc, int err, int16_t ver, const uint8_t *body, size_t len,
                           void *opaque)
{
    km_fetcher_t *t = opaque;
    kp_FetchResponse_t resp;
    kp_arena_t ar;
    kp_reader_t rd;
    (void)kc;

    if (err == KC_E_DESTROYED)
        return;
    t->fetch_busy = false;
    if (err == KC_E_NO_VERSION) {
        km_fw_session_reset(t);
        km_fw_unsupported(t, KM_FV_FETCH);
        return;
    }
    if (err == KC_E_OK)
        km_fw_count_received(t, ver, len);
    if (err != KC_E_OK) {
        t->fetch_backoff_until_ns = km_fw_now_ns(t) + (int64_t)t->fetch_backoff_ms * 1000000;
        km_fw_fetch_failed(t, kc_err_str(err));
        return;
    }
    kp_arena_init(&ar, 0);
    kp_FetchResponse_init(&resp);
    kp_reader_init(&rd, body, len);
    if (kp_FetchResponse_decode(&rd, &ar, &resp, ver) != 0) {
        km_log_warn(t->fm->cm, "%s: undecodable Fetch v%d response (%zu bytes)", t->name, (int)ver,
                    len);
        km_fw_fetch_failed(t, "undecodable response");
        kp_arena_free(&ar);
        return;
    }
    if (ver >= 7 && resp.ErrorCode != 0) {
        if (resp.ErrorCode == KP_ERR_FETCH_SESSION_ID_NOT_FOUND ||
            resp.ErrorCode == KP_ERR_INVALID_FETCH_SESSION_EPOCH ||
            resp.ErrorCode == KP_ERR_FETCH_SESSION_TOPIC_ID_ERROR) {
            km_log_debug(t->fm->cm, "%s: fetch session %d/%d: %s, starting a new one", t->name,
                         (int)t->sess_id, (int)t->sess_epoch, kp_errcode_name(resp.ErrorCode));
            km_fw_session_reset(t);
        } else {
            t->fetch_backoff_until_ns = km_fw_now_ns(t) + (int64_t)t->fetch_backoff_ms * 1000000;
            km_fw_fetch_failed(t, kp_errcode_name(resp.ErrorCode));
        }
        kp_arena_free(&ar);
        return;
    }
    if (ver >= 7) {
        if (t->sess_epoch <= 0) {
            t->sess_id = resp.SessionId;
            t->sess_epoch = resp.SessionId != 0 ? 1 : 0;
            if (resp.SessionId == 0) /* sessionless: every request is a full one */
                for (km_fetch_part_t *p = t->parts; p != NULL; p = p->t_next)
                    p->in_session = p->incl;
        } else {
            t->sess_epoch = t->sess_epoch == INT32_MAX ? 1 : t->sess_epoch + 1;
        }
    }
    /* Pipelining (design M105): the partitions' answers are handled first, clean records only
     * planned (their positions move past them); then the next Fetch goes on the wire, and the
     * records are appended while the source prepares its answer. */
    {
        km_fw_pipe_t *pipe = NULL;
        size_t cap = 0, npipe = 0;

        for (int32_t i = 0; i < resp.Responses.cnt; i++)
            cap += resp.Responses.v[i].Partitions.cnt > 0
                       ? (size_t)resp.Responses.v[i].Partitions.cnt
                       : 0;
        if (cap > 0)
            pipe = kp_arena_calloc(&ar, cap, sizeof(*pipe)); /* NULL: appended at once */
        for (int32_t i = 0; i < resp.Responses.cnt; i++) {
            const kp_FetchResponse_FetchableTopicResponse_t *tr = &resp.Responses.v[i];
            for (int32_t k = 0; k < tr->Partitions.cnt; k++) {
                const kp_FetchResponse_PartitionData_t *pd = &tr->Partitions.v[k];
                km_fetch_part_t *p = km_fw_find(t, tr, pd->PartitionIndex, ver);
                if (p != NULL && km_fw_partition(t, p, pd, ver, pipe != NULL ? &pipe[npipe] : NULL))
                    npipe++;
            }
        }
        if (npipe > 0)
            km_fw_send_next(t);
        for (size_t k = 0; k < npipe; k++)
            km_fw_append_piped(t, &pipe[k]);
    }
    kp_arena_free(&ar);
}

/* The highest Fetch version to offer: the fetcher's, capped by the test hook, and below topic
 * ids (v12) while a fetchable partition's source topic has none (a source before 2.8, or a topic
 * without an id): a v13+ request names topics by id only (design M94). */
static int16_t km_fw_fetch_max(km_fetcher_t *t)
{
    int16_t hi = km_fetch_ver_need(KM_FV_FETCH)->max_ver;

    if (t->fm->opts.fetch_max_version > 0 && t->fm->opts.fetch_max_version < hi)
        hi = t->fm->opts.fetch_max_version;
    if (hi >= KM_FV_FETCH_TOPIC_IDS) {
        for (km_fetch_part_t *p = t->parts; p != NULL; p = p->t_next) {
            if (km_fw_fetchable(p) && p->src_no_id) {
                hi = KM_FV_FETCH_TOPIC_IDS - 1;
                break;
            }
        }
    }
    return hi;
}

static void km_fw_send_fetch(km_fetcher_t *t)
{
    km_fetch_vrange_t src[KM_FV_N];
    km_fetch_vers_t vers;
    int16_t cap = km_fw_fetch_max(t);
    int api = KM_FV_FETCH;
    int64_t id;

    /* Once the broker's ranges are known, a source it cannot serve fails before any fetch (also
     * for OffsetForLeaderEpoch, needed below Fetch v12 before the first fetch after a restart or
     * a leader change); before that, kc_ negotiates and KC_E_NO_VERSION says it. */
    if (km_fw_src_ranges(t, t->broker, src) &&
        !km_fetch_ver_choose(src, t->broker, cap, &vers, &api, NULL, 0)) {
        km_fw_unsupported(t, api);
        return;
    }
    id = kc_request(t->kc, t->broker, KP_APIKEY_Fetch, km_fetch_ver_need(KM_FV_FETCH)->min_ver, cap,
                    km_fw_fetch_encode, t->request_timeout_ms + t->fetch_wait_max_ms, 0,
                    km_fw_on_fetch, t);
    if (id > 0)
        t->fetch_busy = true;
}

/* ---- the step's work --------------------------------------------------------------------------
 */

int32_t km_fetch_wire_work(km_fetcher_t *t, int32_t poll_ms)
{
    km_fetch_mgr_t *fm = t->fm;
    int64_t now = km_fw_now_ns(t), next = now + (int64_t)poll_ms * 1000000;
    bool want_fetch = t->nforget > 0;

    pthread_mutex_lock(&fm->lock);
    t->fetch_wait_max_ms = t->mirror->fetch_wait_max_ms;
    t->fetch_backoff_ms = t->mirror->fetch_backoff_ms;
    t->fetch_min_bytes = t->mirror->fetch_min_bytes;
    t->fetch_response_max_bytes = t->mirror->fetch_response_max_bytes;
    t->fetch_max_bytes = t->mirror->fetch_max_bytes;
    t->request_timeout_ms = t->mirror->request_timeout_ms;
    t->retry_backoff_ms = t->mirror->retry_backoff_ms;
    memcpy(t->cluster_id, t->mirror->cluster_id, sizeof(t->cluster_id));
    pthread_mutex_unlock(&fm->lock);

    for (km_fetch_part_t *p = t->parts; p != NULL; p = p->t_next) {
        if (p->state == KM_FETCH_ST_BACKOFF) {
            if (now >= p->retry_at_ns) {
                p->state = p->next_state;
                km_fetch_status_update(fm, p, KM_FETCH_ERR_NONE, -1, NULL, 0, 0, 0);
            } else if (p->retry_at_ns < next) {
                next = p->retry_at_ns;
            }
        }
        if (p->state == KM_FETCH_ST_LOOKUP)
            t->md_wanted = true;
        if (p->state == KM_FETCH_ST_FETCHING && t->broker < 0)
            p->state = KM_FETCH_ST_LOOKUP, t->md_wanted = true;
    }
    if (t->broker >= 0 && t->parts != NULL && now >= t->md_next_ns)
        t->md_wanted = true;
    if (t->md_wanted && !t->md_busy) {
        if (now >= t->md_backoff_until_ns) {
            t->md_wanted = false;
            t->md_next_ns = now + fm->cm->conf.metadata_refresh_interval_ms * 1000000;
            km_fw_send_metadata(t);
        } else if (t->md_backoff_until_ns < next) {
            next = t->md_backoff_until_ns;
        }
    }
    if (t->broker >= 0) {
        for (km_fetch_part_t *p = t->parts; p != NULL; p = p->t_next) {
            if (p->state == KM_FETCH_ST_FETCHING && p->need_ofle && !p->rpc_busy)
                km_fw_send_epoch(t, p);
            if (p->state == KM_FETCH_ST_FETCHING && p->start_pending >= 0)
                km_fw_raise_start(t, p); /* an idle partition's HW reaches it too */
            if (km_fw_fetchable(p))
                want_fetch = true;
        }
        if (want_fetch && !t->fetch_busy) {
            if (now >= t->fetch_backoff_until_ns)
                km_fw_send_fetch(t);
            else if (t->fetch_backoff_until_ns < next)
                next = t->fetch_backoff_until_ns;
        }
    }
    if (next <= now)
        return 0;
    return (int32_t)((next - now + 999999) / 1000000);
}
