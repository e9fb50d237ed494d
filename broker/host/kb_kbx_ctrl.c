/*
 * kb_kbx_ctrl.c -- the kbx operations a broker-only node of a cluster hands to the controller
 * (docs/broker.md "The plugin host"): leader_epoch_bump as a BumpLeaderEpochs request (105,
 * provisional) and controller_write as a WritePluginRecords request (1000, ours) on the
 * controller channel (kb_apisvc_ctrl_send, installed by broker/ctrl), each completed once THIS
 * node has applied the change (the new epoch; the metadata offset of the written batch).
 *
 * A bump is a waiter: it is listed (with the epoch it waits for) before the request leaves,
 * so the metadata change the controller commits is always seen by the waiters' kb_meta
 * listener on this node. That listener is registered before any plugin loads; kb_meta calls
 * its listeners newest first, so it runs after every plugin's listeners of the same change:
 * the completion is queued on "kb-kbx-event" behind the leadership report of the new epoch,
 * as kbx.h requires. The waited-for epoch is max(min_epoch, the image's epoch + 1), read after
 * listing: the controller raises its own epoch (never below this node's) to at least that.
 *
 * A write waits for the metadata offset the controller answers (its batch's last record): the
 * same listener notes the offset of every change it sees (ctrl.seen); the answer ends the
 * waiter at once when the listener has seen that offset already, else lists it.
 *
 * A waiter ends exactly once (under ctrl.mu): the listener sees the epoch (KBX_OK) or the
 * topic deleted (NOT_FOUND); the controller refuses or cannot be reached (the request's
 * callback: NETWORK / TIMEOUT / NOT_FOUND / IO, logged naming the controller); the deadline
 * timer fires (TIMEOUT); the host stops (SHUTDOWN). The end is then a completion item on the
 * event queue, which cancels the timer and calls the plugin. References: the waiter itself
 * (dropped by its completion) and the request in flight (dropped by its callback); the host
 * waits at stop until no request is in flight, so no callback outlives it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_err.h"
#include "kb_host_int.h"
#include "kb_time.h"
#include "kp_errcode.h"
#include "kp_msgs.h"

/* One round trip to the controller at most this long when the plugin gave no timeout. */
#define KB_HCTRL_MAX_RTT_MS 30000

struct kb_hbump_s {
    kb_hev_t ev; /**< the completion item */
    struct kb_hbump_s *next;
    kbx_host_t *host;
    kp_uuid_t id;
    int32_t partition;
    int32_t target;
    char topic[KB_TOPIC_NAME_MAX + 1];
    bool write;         /**< a controller_write (else a bump) */
    int64_t target_off; /**< write: the metadata offset to see applied */
    size_t nrec;        /**< write: records written */
    bool listed, finished;
    int refs; /**< ctrl.mu */
    int32_t status;
    kbx_timer_t *timer;
    kbx_done_fn done;
    void *arg;
};

typedef struct kb_hbump_s kb_hbump_t;

static void kb_hbump_unref(kb_hctrl_t *c, kb_hbump_t *w)
{
    bool last;
    pthread_mutex_lock(&c->mu);
    last = --w->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (last)
        free(w);
}

/* End @p w with @p status unless it ended already. ctrl.mu held. */
static void kb_hbump_finish_locked(kb_hctrl_t *c, kb_hbump_t *w, int32_t status)
{
    if (w->finished)
        return;
    w->finished = true;
    w->status = status;
    if (w->listed) {
        kb_hbump_t **pp;
        for (pp = &c->waiters; *pp && *pp != w; pp = &(*pp)->next)
            ;
        if (*pp)
            *pp = w->next;
        w->listed = false;
    }
    kb_hq_push(&w->host->h->ev, &w->ev);
}

/* The completion on the event thread (or dropped at teardown: @p run false). */
static void kb_hbump_complete(kb_hq_t *q, kb_hev_t *ev, bool run)
{
    kb_hbump_t *w = (kb_hbump_t *)ev;
    kbx_host_t *host = w->host;
    kb_hctrl_t *c = &host->h->ctrl;
    (void)q;

    if (w->timer)
        host->h->table.timer_cancel(host, w->timer);
    w->timer = NULL;
    if (w->status == KBX_OK && !w->write) {
        kb_part_t *part;
        bool mirror = false;
        /* A new leadership term: a mirror partition's client writes go back to pending. */
        if (kb_meta_part_by_id(host->h->meta, &w->id, w->partition, &part) == KB_META_OK) {
            kb_part_conf(part, NULL, &mirror);
            if (mirror)
                kb_part_set_write_mode(part, KB_WRITE_PENDING);
            kb_part_release(part);
        }
        kb_hlog(KB_HLOG_INFO,
                "plugin %s raised the leader epoch of %s-%d to %d or more (through controller %d)",
                host->name, w->topic, (int)w->partition, (int)w->target,
                (int)host->h->kb->cfg->voter_id);
    }
    if (run && !atomic_load(&host->dead))
        w->done(w->arg, w->status);
    atomic_fetch_sub(&host->n_ops, 1);
    kb_hbump_unref(c, w);
}

static void kb_hbump_deadline(void *arg)
{
    kb_hbump_t *w = arg;
    kb_hctrl_t *c = &w->host->h->ctrl;
    pthread_mutex_lock(&c->mu);
    if (!w->finished && w->write)
        kb_hlog(KB_HLOG_WARN,
                "plugin %s: controller_write of %zu records timed out (controller %d; not "
                "applied here yet)",
                w->host->name, w->nrec, (int)w->host->h->kb->cfg->voter_id);
    else if (!w->finished)
        kb_hlog(KB_HLOG_WARN,
                "plugin %s: leader_epoch_bump of %s-%d timed out (controller %d; epoch %d not "
                "applied here yet)",
                w->host->name, w->topic, (int)w->partition, (int)w->host->h->kb->cfg->voter_id,
                (int)w->target);
    kb_hbump_finish_locked(c, w, KBX_ERR_TIMEOUT);
    pthread_mutex_unlock(&c->mu);
}

/* The controller's answer (the channel's thread). */
static void kb_hbump_answer(void *arg, int status, const uint8_t *body, size_t len)
{
    kb_hbump_t *w = arg;
    kb_hctrl_t *c = &w->host->h->ctrl;
    int32_t voter = w->host->h->kb->cfg->voter_id;
    int32_t kst = KBX_OK;
    int64_t off = -1; /* write: the batch offset the controller answered (set under mu) */
    int16_t ec = -1;

    if (status == 0 && w->write) {
        kp_WritePluginRecordsResponse_t resp;
        kp_reader_t rd;
        kp_arena_t ar;
        kp_arena_init(&ar, 0);
        kp_reader_init(&rd, body, len);
        kp_WritePluginRecordsResponse_init(&resp);
        if (kp_msg_decode(&kp_WritePluginRecordsResponse_desc, &rd, &ar, &resp, 0) == 0) {
            ec = resp.ErrorCode;
            off = resp.MetadataOffset;
        }
        kp_arena_free(&ar);
        kst = ec == 0 && off >= 0           ? KBX_OK
              : ec == KP_ERR_NOT_CONTROLLER ? KBX_ERR_NETWORK
                                            : KBX_ERR_IO;
        if (kst != KBX_OK)
            kb_hlog(KB_HLOG_WARN,
                    "plugin %s: controller %d refused controller_write of %zu records (error %d)",
                    w->host->name, (int)voter, w->nrec, (int)ec);
    } else if (status == 0) {
        kp_BumpLeaderEpochsResponse_t resp;
        kp_reader_t rd;
        kp_arena_t ar;
        kp_arena_init(&ar, 0);
        kp_reader_init(&rd, body, len);
        kp_BumpLeaderEpochsResponse_init(&resp);
        if (kp_msg_decode(&kp_BumpLeaderEpochsResponse_desc, &rd, &ar, &resp, 0) == 0) {
            ec = resp.ErrorCode;
            for (int32_t i = 0; !ec && i < resp.Topics.cnt; i++)
                for (int32_t k = 0; k < resp.Topics.v[i].Partitions.cnt; k++)
                    if (resp.Topics.v[i].Partitions.v[k].PartitionIndex == w->partition)
                        ec = resp.Topics.v[i].Partitions.v[k].ErrorCode;
        }
        kp_arena_free(&ar);
        kst = ec == 0                                   ? KBX_OK
              : ec == KP_ERR_UNKNOWN_TOPIC_OR_PARTITION ? KBX_ERR_NOT_FOUND
              : ec == KP_ERR_NOT_CONTROLLER             ? KBX_ERR_NETWORK
                                                        : KBX_ERR_IO;
        if (kst != KBX_OK)
            kb_hlog(KB_HLOG_WARN,
                    "plugin %s: controller %d refused the leader-epoch bump of %s-%d (error %d)",
                    w->host->name, (int)voter, w->topic, (int)w->partition, (int)ec);
    } else {
        kst = status == KB_E_TIMEOUT       ? KBX_ERR_TIMEOUT
              : status == KB_E_CLOSED      ? KBX_ERR_SHUTDOWN
              : status == KB_E_UNSUPPORTED ? KBX_ERR_UNSUPPORTED
                                           : KBX_ERR_NETWORK;
        if (w->write)
            kb_hlog(KB_HLOG_WARN,
                    "plugin %s: controller_write of %zu records: no answer from controller %d "
                    "(%s); retry later",
                    w->host->name, w->nrec, (int)voter, kb_err_str(status));
        else
            kb_hlog(KB_HLOG_WARN,
                    "plugin %s: leader_epoch_bump of %s-%d: no answer from controller %d (%s); "
                    "retry later",
                    w->host->name, w->topic, (int)w->partition, (int)voter, kb_err_str(status));
    }
    pthread_mutex_lock(&c->mu);
    /* Accepted: the waiter now waits for this node to apply the change (the listener); a
     * write whose batch the listener has seen already ends here. */
    if (kst != KBX_OK)
        kb_hbump_finish_locked(c, w, kst);
    else if (w->write && (w->target_off = off) >= 0 && c->seen >= off)
        kb_hbump_finish_locked(c, w, KBX_OK);
    c->inflight--;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    kb_hbump_unref(c, w);
}

/* kb_meta listener: the epochs this node applies (after every plugin listener of the change). */
static void kb_hctrl_meta_cb(void *opaque, const kb_meta_event_t *ev)
{
    kb_hctrl_t *c = opaque;
    bool deleted = ev->type == KB_META_EV_TOPIC && (ev->flags & KB_META_TOPIC_DELETED);

    pthread_mutex_lock(&c->mu);
    if (!ev->snapshot && ev->offset > c->seen)
        c->seen = ev->offset;
    for (kb_hbump_t *w = c->waiters, *next; w; w = next) {
        next = w->next;
        if (w->write) {
            if (w->target_off >= 0 && c->seen >= w->target_off)
                kb_hbump_finish_locked(c, w, KBX_OK);
            continue;
        }
        if ((ev->type != KB_META_EV_EPOCH && !deleted) || !ev->topic ||
            memcmp(w->id.b, ev->topic->id.b, sizeof(w->id.b)) != 0)
            continue;
        if (deleted)
            kb_hbump_finish_locked(c, w, KBX_ERR_NOT_FOUND);
        else if (ev->partition == w->partition && ev->leader_epoch >= w->target)
            kb_hbump_finish_locked(c, w, KBX_OK);
    }
    pthread_mutex_unlock(&c->mu);
}

int kb_hctrl_init(kb_host_t *h)
{
    kb_hctrl_t *c = &h->ctrl;
    pthread_condattr_t ca;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    c->inited = true;
    c->seen = kb_meta_offset(h->meta);
    c->ml = kb_meta_listen(h->meta, kb_hctrl_meta_cb, c, false);
    return c->ml ? 0 : -1;
}

void kb_hctrl_stop(kb_host_t *h)
{
    kb_hctrl_t *c = &h->ctrl;
    struct timespec dl = kb_time_mono_deadline(KB_HCTRL_MAX_RTT_MS + 5000);

    if (!c->inited)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    while (c->waiters)
        kb_hbump_finish_locked(c, c->waiters, KBX_ERR_SHUTDOWN);
    while (c->inflight > 0)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &dl) != 0)
            break;
    if (c->inflight > 0)
        kb_hlog(KB_HLOG_ERROR, "%d request(s) to the controller still unanswered at stop",
                c->inflight);
    pthread_mutex_unlock(&c->mu);
    if (c->ml)
        kb_meta_unlisten(h->meta, c->ml);
    c->ml = NULL;
}

void kb_hctrl_destroy(kb_host_t *h)
{
    kb_hctrl_t *c = &h->ctrl;
    if (!c->inited)
        return;
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    c->inited = false;
}

int32_t kb_hctrl_bump(kbx_host_t *host, const kp_uuid_t *id, int32_t partition, int32_t min_epoch,
                      int64_t deadline_ms, kbx_done_fn done, void *arg)
{
    kb_host_t *h = host->h;
    kb_hctrl_t *c = &h->ctrl;
    kp_BumpLeaderEpochsRequest_t rq;
    kp_BumpLeaderEpochsRequest_TopicState_t ts;
    kp_BumpLeaderEpochsRequest_LeaderEpochState_t ps;
    kb_meta_part_state_t st;
    kb_topic_info_t info;
    kp_writer_t wr;
    kb_hbump_t *w;
    int64_t rtt = KB_HCTRL_MAX_RTT_MS;
    int rc;

    if (kb_meta_topic_by_id(h->meta, id, &info) != 0)
        return KBX_ERR_NOT_FOUND;
    if (deadline_ms >= 0) {
        rtt = deadline_ms - kb_host_now_ms();
        if (rtt <= 0)
            return KBX_ERR_TIMEOUT;
        if (rtt > KB_HCTRL_MAX_RTT_MS)
            rtt = KB_HCTRL_MAX_RTT_MS;
    }
    w = calloc(1, sizeof(*w));
    if (!w)
        return KBX_ERR_NOMEM;
    w->ev.fn = kb_hbump_complete;
    w->ev.owner = host;
    atomic_init(&w->ev.ready, true);
    w->host = host;
    w->id = *id;
    w->partition = partition;
    w->done = done;
    w->arg = arg;
    w->refs = 2; /* the waiter and the request */
    snprintf(w->topic, sizeof(w->topic), "%s", info.name);

    kp_BumpLeaderEpochsRequest_init(&rq);
    kp_BumpLeaderEpochsRequest_TopicState_init(&ts);
    kp_BumpLeaderEpochsRequest_LeaderEpochState_init(&ps);
    ps.PartitionIndex = partition;
    ps.MinLeaderEpoch = min_epoch;
    ts.TopicName = (kp_str_t){w->topic, (int32_t)strlen(w->topic)};
    ts.Partitions.v = &ps;
    ts.Partitions.cnt = 1;
    rq.Topics.v = &ts;
    rq.Topics.cnt = 1;
    kp_writer_init(&wr);
    rc = kp_msg_encode(&kp_BumpLeaderEpochsRequest_desc, &wr, &rq, 0) == 0 ? 0 : KB_E_NOMEM;

    /* Listed before the request leaves (see the top of the file). */
    pthread_mutex_lock(&c->mu);
    if (c->stopping)
        rc = KB_E_CLOSED;
    if (rc == 0) {
        int32_t cur =
            kb_meta_part_state(h->meta, id, partition, &st) == KB_META_OK ? st.leader_epoch : -1;
        w->target = min_epoch > cur ? min_epoch : cur + 1;
        w->listed = true;
        w->next = c->waiters;
        c->waiters = w;
        c->inflight++;
        rc = kb_apisvc_ctrl_send(h->api, KP_APIKEY_BumpLeaderEpochs, 0, wr.buf, wr.len,
                                 (int32_t)rtt, kb_hbump_answer, w);
        if (rc != 0) {
            c->inflight--;
            c->waiters = w->next;
            w->listed = false;
        }
    }
    /* The deadline: set under mu, so an end that races with it (answer, listener) queues the
     * completion only after w->timer is known; the completion runs on this (the event) thread
     * after this call returns. */
    if (rc == 0 && deadline_ms >= 0) {
        int64_t left = deadline_ms - kb_host_now_ms();
        if (h->table.timer_start(host, left > 0 ? left : 0, 0, kb_hbump_deadline, w, &w->timer) !=
            KBX_OK)
            kb_hlog(KB_HLOG_ERROR,
                    "plugin %s: out of memory: leader_epoch_bump of %s-%d waits without its "
                    "deadline",
                    host->name, w->topic, (int)partition);
    }
    pthread_mutex_unlock(&c->mu);
    kp_writer_free(&wr);
    if (rc == 0)
        return KBX_OK;
    free(w);
    if (rc == KB_E_UNSUPPORTED)
        return KBX_ERR_UNSUPPORTED;
    if (rc == KB_E_CLOSED)
        return KBX_ERR_SHUTDOWN;
    if (rc == KB_E_IO) {
        kb_hlog(KB_HLOG_WARN,
                "plugin %s: leader_epoch_bump of %s-%d failed: controller %d is unreachable; "
                "retry later",
                host->name, info.name, (int)partition, (int)h->kb->cfg->voter_id);
        return KBX_ERR_NETWORK;
    }
    return KBX_ERR_NOMEM;
}

int32_t kb_hctrl_write(kbx_host_t *host, kb_hrec_t *recs, size_t n, int64_t deadline_ms,
                       kbx_done_fn done, void *arg)
{
    kb_host_t *h = host->h;
    kb_hctrl_t *c = &h->ctrl;
    kp_WritePluginRecordsRequest_t rq;
    kp_WritePluginRecordsRequest_PluginRecord_t *pr;
    kb_meta_broker_t *brokers = NULL;
    size_t nb = 0;
    kp_writer_t wr;
    kb_hbump_t *w;
    int64_t rtt = KB_HCTRL_MAX_RTT_MS;
    int rc;

    if (deadline_ms >= 0) {
        rtt = deadline_ms - kb_host_now_ms();
        if (rtt <= 0)
            return KBX_ERR_TIMEOUT;
        if (rtt > KB_HCTRL_MAX_RTT_MS)
            rtt = KB_HCTRL_MAX_RTT_MS;
    }
    pr = calloc(n + 1, sizeof(*pr));
    w = calloc(1, sizeof(*w));
    if (!pr || !w) {
        free(pr);
        free(w);
        return KBX_ERR_NOMEM;
    }
    w->ev.fn = kb_hbump_complete;
    w->ev.owner = host;
    atomic_init(&w->ev.ready, true);
    w->host = host;
    w->write = true;
    w->target_off = -1;
    w->nrec = n;
    w->done = done;
    w->arg = arg;
    w->refs = 2; /* the waiter and the request */

    kp_WritePluginRecordsRequest_init(&rq);
    rq.BrokerId = kb_meta_node_id(h->meta);
    /* This broker's registration as the image has it (the controller checks the epoch). */
    if (kb_meta_brokers(h->meta, &brokers, &nb) == 0)
        for (size_t i = 0; i < nb; i++)
            if (brokers[i].id == rq.BrokerId)
                rq.BrokerEpoch = brokers[i].epoch;
    free(brokers);
    for (size_t i = 0; i < n; i++) {
        kp_WritePluginRecordsRequest_PluginRecord_init(&pr[i]);
        pr[i].RecordType = recs[i].type;
        pr[i].Key = (kp_bytes_t){recs[i].key, (int32_t)recs[i].key_len};
        pr[i].Value = recs[i].value ? (kp_bytes_t){recs[i].value, (int32_t)recs[i].value_len}
                                    : (kp_bytes_t){NULL, -1};
    }
    rq.Records.v = pr;
    rq.Records.cnt = (int32_t)n;
    kp_writer_init(&wr);
    rc = kp_msg_encode(&kp_WritePluginRecordsRequest_desc, &wr, &rq, 0) == 0 ? 0 : KB_E_NOMEM;
    free(pr);

    pthread_mutex_lock(&c->mu);
    if (rc == 0 && c->stopping)
        rc = KB_E_CLOSED;
    if (rc == 0) {
        w->listed = true;
        w->next = c->waiters;
        c->waiters = w;
        c->inflight++;
        rc = kb_apisvc_ctrl_send(h->api, KP_APIKEY_WritePluginRecords, 0, wr.buf, wr.len,
                                 (int32_t)rtt, kb_hbump_answer, w);
        if (rc != 0) {
            c->inflight--;
            c->waiters = w->next;
            w->listed = false;
        }
    }
    if (rc == 0 && deadline_ms >= 0) {
        int64_t left = deadline_ms - kb_host_now_ms();
        if (h->table.timer_start(host, left > 0 ? left : 0, 0, kb_hbump_deadline, w, &w->timer) !=
            KBX_OK)
            kb_hlog(KB_HLOG_ERROR,
                    "plugin %s: out of memory: controller_write waits without its deadline",
                    host->name);
    }
    pthread_mutex_unlock(&c->mu);
    kp_writer_free(&wr);
    if (rc == 0) {
        kb_hrec_free_array(recs, n); /* encoded: the request holds a copy */
        return KBX_OK;
    }
    free(w);
    if (rc == KB_E_UNSUPPORTED)
        return KBX_ERR_UNSUPPORTED;
    if (rc == KB_E_CLOSED)
        return KBX_ERR_SHUTDOWN;
    if (rc == KB_E_IO) {
        kb_hlog(KB_HLOG_WARN,
                "plugin %s: controller_write of %zu records failed: controller %d is unreachable; "
                "retry later",
                host->name, n, (int)h->kb->cfg->voter_id);
        return KBX_ERR_NETWORK;
    }
    return KBX_ERR_NOMEM;
}
