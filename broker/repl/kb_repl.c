/*
 * kb_repl.c -- the replica fetcher manager (kb_repl.h): fetcher threads per leader, each
 * driving a kc_ client with full replica Fetch requests, and the follower's handling of the
 * answers (append, diverging epoch, out of range, leadership errors).
 *
 * Locks: r->mu guards the fetcher list; f->mu guards a fetcher's partitions and is held while an
 * answer is applied to them, so kb_repl_remove() (which takes it) returns only once no answer
 * is being applied to the partition. Order: r->mu before f->mu. Partition locks (kb_part) are
 * taken inside f->mu by the kb_part_* calls.
 */
#include "kb_repl.h"
#include "kb_repl_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_apilog.h"
#include "kb_err.h"
#include "kb_time.h"
#include "kc_client.h"
#include "kp_arena.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "kp_reader.h"

#define KB_REPL_POLL_MS 100
#define KB_REPL_ADDR_MS 1000 /* period of the leader address look-up */

/* Partition states */
#define KB_RP_FETCH  0 /* fetched */
#define KB_RP_OOR    1 /* out of range: ListOffsets (latest, then earliest) in progress */
#define KB_RP_FENCED 2 /* waits for a leader epoch other than fenced_epoch */

typedef struct kb_rpart_s {
    kb_part_t *part; /* reference */
    uint64_t id;     /* unique per kb_repl_add: answers to an older entry are dropped */
    int state;
    int32_t fenced_epoch;
    int64_t backoff_until; /* monotonic ms */
    int16_t last_err;      /* last error logged (no repetition) */
    bool in_request;       /* in the request in flight */
    int oor_step;          /* KB_RP_OOR: 0 none sent, 1 latest in flight, 2 earliest in flight */
    int64_t oor_leader_end;
} kb_rpart_t;

/* What a request carried for one partition. */
typedef struct kb_rsent_s {
    uint64_t id;
    int32_t epoch;
    int64_t offset;
} kb_rsent_t;

struct kb_fetcher_s {
    kb_repl_t *r;
    kb_fetcher_t *next;
    int32_t leader;
    int idx;
    pthread_t th;
    bool started;
    kc_client_t *kc;
    pthread_mutex_t mu;
    kb_rpart_t **p; /* under mu */
    size_t n, cap;
    bool stop;             /* under mu */
    bool inflight;         /* a Fetch in flight (fetcher thread only) */
    int64_t backoff_until; /* whole fetcher (transport errors) */
    bool addr_dirty;       /* look the leader's address up again */
    int64_t next_addr_ms;  /* next periodic look-up (fetcher thread) */
    char host[256];
    int port;
    /* the request in flight (fetcher thread) */
    kp_arena_t ar;
    kp_FetchRequest_t rq;
    kb_rsent_t *sent;
    size_t nsent;
    /* ListOffsets of an out-of-range partition */
    kp_ListOffsetsRequest_t lo;
    kp_ListOffsetsRequest_ListOffsetsTopic_t lo_t;
    kp_ListOffsetsRequest_ListOffsetsPartition_t lo_p;
    uint64_t lo_id;
    int32_t lo_epoch;
    bool lo_inflight;
};

static void kb_repl_name(const kb_part_t *part, char *buf, size_t size)
{
    snprintf(buf, size, "%s-%" PRId32, part->topic, part->index);
}

/* ---- manager -------------------------------------------------------------------------------- */

kb_repl_t *kb_repl_new(const kb_repl_opts_t *o, char *errstr, size_t errstr_size)
{
    kb_repl_t *r;
    if (!o || !o->cfg || !o->endpoint) {
        snprintf(errstr, errstr_size, "replica fetcher: missing options");
        return NULL;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->ctrl_mu, NULL);
    r->node_id = o->node_id;
    r->max_bytes = o->cfg->replica_fetch_max_bytes;
    r->resp_max_bytes = o->cfg->replica_fetch_response_max_bytes;
    r->wait_ms = o->cfg->replica_fetch_wait_max_ms;
    r->min_bytes = o->cfg->replica_fetch_min_bytes;
    r->backoff_ms = o->cfg->replica_fetch_backoff_ms;
    r->nfetchers = o->cfg->num_replica_fetchers > 0 ? o->cfg->num_replica_fetchers : 1;
    r->endpoint = o->endpoint;
    r->endpoint_opaque = o->endpoint_opaque;
    atomic_init(&r->broker_epoch, -1);
    atomic_init(&r->next_id, 1);
    return r;
}

void kb_repl_set_broker_epoch(kb_repl_t *r, int64_t epoch)
{
    atomic_store(&r->broker_epoch, epoch);
}

static void kb_fetcher_stop(kb_fetcher_t *f)
{
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    pthread_mutex_unlock(&f->mu);
    if (f->kc)
        kc_client_wakeup(f->kc);
}

static void kb_fetcher_free(kb_fetcher_t *f)
{
    if (f->started)
        pthread_join(f->th, NULL);
    if (f->kc)
        kc_client_destroy(f->kc);
    for (size_t i = 0; i < f->n; i++) {
        kb_part_release(f->p[i]->part);
        free(f->p[i]);
    }
    free(f->p);
    free(f->sent);
    kp_arena_free(&f->ar);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

void kb_repl_free(kb_repl_t *r)
{
    kb_fetcher_t *f, *next;
    if (!r)
        return;
    kb_repl_unwatch(r);
    for (f = r->fetchers; f; f = f->next)
        kb_fetcher_stop(f);
    for (f = r->fetchers; f; f = next) {
        next = f->next;
        kb_fetcher_free(f);
    }
    pthread_mutex_destroy(&r->ctrl_mu);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void kb_repl_stats(kb_repl_t *r, kb_repl_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&r->mu);
    for (kb_fetcher_t *f = r->fetchers; f; f = f->next) {
        out->fetchers++;
        pthread_mutex_lock(&f->mu);
        out->partitions += (uint32_t)f->n;
        pthread_mutex_unlock(&f->mu);
    }
    pthread_mutex_unlock(&r->mu);
    out->fetches = atomic_load(&r->fetches);
    out->fetch_errors = atomic_load(&r->fetch_errors);
    out->bytes_appended = atomic_load(&r->bytes);
    out->truncations = atomic_load(&r->truncations);
}

void kb_repl_endpoints_changed(kb_repl_t *r)
{
    pthread_mutex_lock(&r->mu);
    for (kb_fetcher_t *f = r->fetchers; f; f = f->next) {
        pthread_mutex_lock(&f->mu);
        f->addr_dirty = true;
        pthread_mutex_unlock(&f->mu);
        kc_client_wakeup(f->kc);
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---- requests ------------------------------------------------------------------------------- */

static void kb_fetcher_backoff_part(kb_fetcher_t *f, kb_rpart_t *e, int16_t err, const char *what)
{
    char name[300];
    e->backoff_until = kb_time_mono_ms() + f->r->backoff_ms;
    if (e->last_err != err) {
        kb_repl_name(e->part, name, sizeof(name));
        kb_log_info("repl", "%s: fetch from leader %" PRId32 ": %s (error %d); retrying in %d ms",
                    name, f->leader, what, (int)err, f->r->backoff_ms);
        e->last_err = err;
    }
}

static kb_rpart_t *kb_fetcher_find(kb_fetcher_t *f, uint64_t id)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->p[i]->id == id)
            return f->p[i];
    return NULL;
}

/* The text of a follower call's error (kb_part_follower_append / _diverging / truncate):
 * KB_E_STATE (not a follower), else the storage engine's code, whose values overlap kb_err's
 * (printing those as kb_err_t named a bad batch "already exists"). */
static const char *kb_repl_part_err(int rc)
{
    return rc == KB_E_STATE ? kb_err_str(rc) : kb_sto_err_str(rc);
}

/* After KB_E_STATE from a follower call (a value storage errors share): did the partition's
 * role or leader epoch change since the request, or is it being deleted? */
static bool kb_fetcher_moved(kb_part_t *part, int32_t epoch)
{
    return kb_part_role(part) != KB_PART_FOLLOWER || kb_part_epoch(part) != epoch ||
           atomic_load(&part->deleted);
}

/* Apply one partition's Fetch answer (f->mu held). */
static void kb_fetcher_apply(kb_fetcher_t *f, kb_rpart_t *e, const kb_rsent_t *s,
                             const kp_FetchResponse_PartitionData_t *pd, int16_t ver)
{
    kb_part_t *part = e->part;
    int32_t leader = -1, epoch = -1;
    int64_t leo = -1;
    char name[300];

    if (kb_part_follower_position(part, &leader, &epoch, &leo, NULL, NULL) != 0 ||
        leader != f->leader || epoch != s->epoch || leo != s->offset)
        return; /* the partition moved on while the request was in flight */
    kb_repl_name(part, name, sizeof(name));
    switch (pd->ErrorCode) {
    case KP_ERR_NONE:
        break;
    case KP_ERR_OFFSET_OUT_OF_RANGE:
        e->state = KB_RP_OOR;
        e->oor_step = 0;
        kb_log_info("repl", "%s: fetch offset %" PRId64 " out of range at leader %" PRId32, name,
                    leo, f->leader);
        return;
    case KP_ERR_FENCED_LEADER_EPOCH:
        e->state = KB_RP_FENCED;
        e->fenced_epoch = epoch;
        if (e->last_err != pd->ErrorCode)
            kb_log_info("repl",
                        "%s: leader %" PRId32 " has a newer leader epoch than %" PRId32
                        "; waiting for metadata",
                        name, f->leader, epoch);
        e->last_err = pd->ErrorCode;
        return;
    case KP_ERR_NOT_LEADER_OR_FOLLOWER:
        kb_fetcher_backoff_part(f, e, pd->ErrorCode, "not leader or follower");
        return;
    case KP_ERR_UNKNOWN_LEADER_EPOCH:
        kb_fetcher_backoff_part(f, e, pd->ErrorCode, "leader has an older leader epoch");
        return;
    default:
        kb_fetcher_backoff_part(f, e, pd->ErrorCode, "error");
        return;
    }
    if (pd->HighWatermark < 0 || pd->HighWatermark > INT64_MAX / 2) {
        kb_fetcher_backoff_part(f, e, -2, "answer without a valid high watermark");
        return;
    }
    e->last_err = 0;
    if (ver >= 12 && (pd->DivergingEpoch.Epoch >= 0 || pd->DivergingEpoch.EndOffset >= 0)) {
        int64_t to = -1;
        bool done = false;
        int rc = kb_part_follower_diverging(part, pd->DivergingEpoch.Epoch,
                                            pd->DivergingEpoch.EndOffset, &to, &done);
        if (rc == KB_E_STATE && kb_fetcher_moved(part, s->epoch))
            return; /* no longer a follower: the role changed while the answer was on its way */
        if (rc != 0) {
            kb_log_error("repl", "%s: truncation after a diverging epoch failed: %s", name,
                         kb_repl_part_err(rc));
            kb_fetcher_backoff_part(f, e, -1, "truncation failed");
            return;
        }
        atomic_fetch_add(&f->r->truncations, 1);
        kb_log_info("repl",
                    "%s: leader %" PRId32 " diverges at epoch %" PRId32 " end %" PRId64
                    "; truncated from %" PRId64 " to %" PRId64,
                    name, f->leader, pd->DivergingEpoch.Epoch, pd->DivergingEpoch.EndOffset, leo,
                    to);
        return;
    }
    {
        /* Whole batches only: the leader may cut the last one at the byte limit. */
        const uint8_t *buf = pd->Records.ptr;
        size_t len = pd->Records.len > 0 ? (size_t)pd->Records.len : 0, used = 0;
        int rc;
        while (len - used >= 12) {
            const uint8_t *b = buf + used + 8;
            uint32_t blen =
                (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
            if ((size_t)blen > len - used - 12)
                break;
            used += 12 + (size_t)blen;
        }
        rc = kb_part_follower_append(part, buf, used, pd->HighWatermark, pd->LogStartOffset, NULL);
        if (rc == KB_E_STATE && kb_fetcher_moved(part, s->epoch))
            return; /* as above (KB_E_STATE shares its value with a storage error) */
        if (rc != 0) {
            kb_log_error("repl",
                         "%s: append of %zu bytes fetched from leader %" PRId32 " at %" PRId64
                         " failed: %s",
                         name, used, f->leader, leo, kb_repl_part_err(rc));
            kb_fetcher_backoff_part(f, e, -1, "append failed");
            return;
        }
        atomic_fetch_add(&f->r->bytes, used);
    }
}

static void kb_fetcher_on_fetch(kc_client_t *kc, int err, int16_t ver, const uint8_t *body,
                                size_t len, void *opaque)
{
    kb_fetcher_t *f = opaque;
    kp_FetchResponse_t resp;
    kp_arena_t ar;
    kp_reader_t rd;
    (void)kc;

    f->inflight = false;
    kp_arena_init(&ar, 0);
    kp_FetchResponse_init(&resp);
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->n; i++)
        f->p[i]->in_request = false;
    if (err != KC_E_OK) {
        atomic_fetch_add(&f->r->fetch_errors, 1);
        if (err != KC_E_DESTROYED && err != KC_E_CANCELLED) {
            f->backoff_until = kb_time_mono_ms() + f->r->backoff_ms;
            f->addr_dirty = true; /* the leader may have come back elsewhere */
            if (err == KC_E_NO_VERSION)
                kb_log_warn("repl", "leader %" PRId32 " has no Fetch v12 or later", f->leader);
            else
                kb_log_debug("repl", "fetch from leader %" PRId32 " failed: %s", f->leader,
                             kc_err_str(err));
        }
        goto out;
    }
    kp_reader_init(&rd, body, len);
    if (kp_FetchResponse_decode(&rd, &ar, &resp, ver) != 0) {
        kb_log_error("repl", "undecodable Fetch v%d answer from leader %" PRId32 " (%zu bytes)",
                     (int)ver, f->leader, len);
        f->backoff_until = kb_time_mono_ms() + f->r->backoff_ms;
        goto out;
    }
    atomic_fetch_add(&f->r->fetches, 1);
    if (resp.ErrorCode != 0) {
        kb_log_info("repl", "Fetch from leader %" PRId32 ": error %d", f->leader,
                    (int)resp.ErrorCode);
        f->backoff_until = kb_time_mono_ms() + f->r->backoff_ms;
        goto out;
    }
    for (int32_t t = 0; t < resp.Responses.cnt; t++) {
        const kp_FetchResponse_FetchableTopicResponse_t *tr = &resp.Responses.v[t];
        for (int32_t k = 0; k < tr->Partitions.cnt; k++) {
            const kp_FetchResponse_PartitionData_t *pd = &tr->Partitions.v[k];
            /* match by topic (id from v13, name before) and partition among what was sent */
            for (size_t i = 0; i < f->nsent; i++) {
                kb_rpart_t *e = kb_fetcher_find(f, f->sent[i].id);
                if (!e || e->part->index != pd->PartitionIndex)
                    continue;
                if (ver >= 13 ? memcmp(e->part->topic_id.b, tr->TopicId.b, 16) != 0
                              : (tr->Topic.len != (int32_t)strlen(e->part->topic) ||
                                 memcmp(tr->Topic.ptr, e->part->topic, (size_t)tr->Topic.len)))
                    continue;
                kb_fetcher_apply(f, e, &f->sent[i], pd, ver);
                break;
            }
        }
    }
out:
    pthread_mutex_unlock(&f->mu);
    kp_arena_free(&ar);
}

/* Build the Fetch request of every partition ready now (f->mu held). Returns the number of
 * partitions in it; *next_ms gets the time of the next backoff expiry. */
static size_t kb_fetcher_build(kb_fetcher_t *f, int64_t now, int64_t *next_ms)
{
    kb_repl_t *r = f->r;
    kp_FetchRequest_FetchTopic_t *tv;
    size_t np = 0;

    kp_arena_free(&f->ar);
    kp_arena_init(&f->ar, 0);
    free(f->sent);
    f->sent = NULL;
    f->nsent = 0;
    if (!f->n)
        return 0;
    tv = kp_arena_calloc(&f->ar, f->n, sizeof(*tv));
    f->sent = calloc(f->n, sizeof(*f->sent));
    if (!tv || !f->sent)
        return 0;
    kp_FetchRequest_init(&f->rq);
    /* ReplicaId / ReplicaState: set by kb_fetcher_encode() for the version chosen */
    f->rq.MaxWaitMs = r->wait_ms;
    f->rq.MinBytes = r->min_bytes;
    f->rq.MaxBytes = r->resp_max_bytes;
    f->rq.IsolationLevel = 0;
    f->rq.SessionId = 0;
    f->rq.SessionEpoch = -1;
    for (size_t i = 0; i < f->n; i++) {
        kb_rpart_t *e = f->p[i];
        int32_t leader = -1, epoch = -1, last = -1;
        int64_t leo = -1, ls = -1;
        kp_FetchRequest_FetchPartition_t *p;
        if (kb_part_follower_position(e->part, &leader, &epoch, &leo, &last, &ls) != 0 ||
            leader != f->leader)
            continue; /* not (or no longer) ours to fetch: wait for a move */
        if (e->state == KB_RP_FENCED) {
            if (epoch == e->fenced_epoch)
                continue;
            e->state = KB_RP_FETCH;
        }
        if (e->state != KB_RP_FETCH)
            continue;
        if (e->backoff_until > now) {
            if (!*next_ms || e->backoff_until < *next_ms)
                *next_ms = e->backoff_until;
            continue;
        }
        p = kp_arena_calloc(&f->ar, 1, sizeof(*p));
        if (!p)
            break;
        kp_FetchRequest_FetchPartition_init(p);
        p->Partition = e->part->index;
        p->CurrentLeaderEpoch = epoch;
        p->FetchOffset = leo;
        p->LastFetchedEpoch = last;
        p->LogStartOffset = ls;
        p->PartitionMaxBytes = r->max_bytes;
        /* one topic entry per partition: simple, and Kafka accepts repeated topics */
        kp_FetchRequest_FetchTopic_init(&tv[np]);
        tv[np].Topic = (kp_str_t){e->part->topic, (int32_t)strlen(e->part->topic)};
        tv[np].TopicId = e->part->topic_id;
        tv[np].Partitions.v = p;
        tv[np].Partitions.cnt = 1;
        f->sent[np] = (kb_rsent_t){.id = e->id, .epoch = epoch, .offset = leo};
        e->in_request = true;
        np++;
    }
    f->rq.Topics.v = tv;
    f->rq.Topics.cnt = (int32_t)np;
    f->nsent = np;
    return np;
}

/* The Fetch body at @p ver: the replica's id goes to ReplicaId before v15, ReplicaState from. */
static int kb_fetcher_encode(kp_writer_t *wr, int16_t ver, void *opaque)
{
    kb_fetcher_t *f = opaque;
    if (ver >= 15) {
        f->rq.ReplicaId = -1;
        f->rq.ReplicaState.ReplicaId = f->r->node_id;
        f->rq.ReplicaState.ReplicaEpoch = atomic_load(&f->r->broker_epoch);
    } else {
        f->rq.ReplicaId = f->r->node_id;
        f->rq.ReplicaState.ReplicaId = -1;
        f->rq.ReplicaState.ReplicaEpoch = -1;
    }
    return kp_FetchRequest_encode(wr, &f->rq, ver);
}

/* ---- out of range: ListOffsets as this replica ------------------------------------------------
 */

static void kb_fetcher_on_offsets(kc_client_t *kc, int err, int16_t ver, const uint8_t *body,
                                  size_t len, void *opaque)
{
    kb_fetcher_t *f = opaque;
    kp_ListOffsetsResponse_t resp;
    kp_arena_t ar;
    kp_reader_t rd;
    kb_rpart_t *e;
    int16_t perr = -1;
    int64_t off = -1;
    (void)kc;

    f->lo_inflight = false;
    kp_arena_init(&ar, 0);
    kp_ListOffsetsResponse_init(&resp);
    pthread_mutex_lock(&f->mu);
    e = kb_fetcher_find(f, f->lo_id);
    if (!e || e->state != KB_RP_OOR)
        goto out;
    if (err == KC_E_OK) {
        kp_reader_init(&rd, body, len);
        if (kp_ListOffsetsResponse_decode(&rd, &ar, &resp, ver) == 0 && resp.Topics.cnt == 1 &&
            resp.Topics.v[0].Partitions.cnt == 1) {
            perr = resp.Topics.v[0].Partitions.v[0].ErrorCode;
            off = resp.Topics.v[0].Partitions.v[0].Offset;
        }
    }
    {
        int32_t leader = -1, epoch = -1;
        int64_t leo = -1;
        char name[300];
        int rc = 0;
        if (kb_part_follower_position(e->part, &leader, &epoch, &leo, NULL, NULL) != 0 ||
            leader != f->leader || epoch != f->lo_epoch) {
            e->state = KB_RP_FETCH; /* moved on: start over */
            goto out;
        }
        if (perr != 0 || off < 0) {
            e->oor_step = 0; /* ask again after the backoff */
            kb_fetcher_backoff_part(f, e, perr, "ListOffsets for an out-of-range fetch failed");
            goto out;
        }
        kb_repl_name(e->part, name, sizeof(name));
        if (e->oor_step == 1) {
            e->oor_leader_end = off;
            if (off < leo) {
                /* Kafka: possible only after an unclean election; the leader's end wins */
                kb_log_warn("repl",
                            "%s: leader %" PRId32 " ends at %" PRId64 ", below our end %" PRId64
                            "; truncating",
                            name, f->leader, off, leo);
                rc = kb_part_truncate_to(e->part, off);
                atomic_fetch_add(&f->r->truncations, 1);
                e->state = KB_RP_FETCH;
            } else {
                e->oor_step = 2; /* now the leader's log start */
            }
        } else {
            if (off > leo) {
                kb_log_info("repl",
                            "%s: leader %" PRId32 " log starts at %" PRId64
                            ", above our end %" PRId64 "; restarting the log there",
                            name, f->leader, off, leo);
                rc = kb_part_truncate_fully(e->part, off);
                atomic_fetch_add(&f->r->truncations, 1);
            }
            e->state = KB_RP_FETCH;
            if (off <= leo)
                kb_fetcher_backoff_part(f, e, KP_ERR_OFFSET_OUT_OF_RANGE,
                                        "offset out of range inside the leader's log");
        }
        if (rc != 0) {
            kb_log_error("repl", "%s: truncation failed: %s", name, kb_repl_part_err(rc));
            e->state = KB_RP_FETCH;
            kb_fetcher_backoff_part(f, e, -1, "truncation failed");
        }
    }
out:
    pthread_mutex_unlock(&f->mu);
    kp_arena_free(&ar);
}

/* Send the next ListOffsets of an out-of-range partition (f->mu held). */
static void kb_fetcher_oor(kb_fetcher_t *f, int64_t now)
{
    kb_rpart_t *e = NULL;
    int32_t leader = -1, epoch = -1;
    int64_t id;
    if (f->lo_inflight)
        return;
    for (size_t i = 0; i < f->n && !e; i++)
        if (f->p[i]->state == KB_RP_OOR && f->p[i]->backoff_until <= now)
            e = f->p[i];
    if (!e)
        return;
    if (kb_part_follower_position(e->part, &leader, &epoch, NULL, NULL, NULL) != 0 ||
        leader != f->leader) {
        e->state = KB_RP_FETCH;
        return;
    }
    if (e->oor_step == 0)
        e->oor_step = 1;
    kp_ListOffsetsRequest_init(&f->lo);
    kp_ListOffsetsRequest_ListOffsetsTopic_init(&f->lo_t);
    kp_ListOffsetsRequest_ListOffsetsPartition_init(&f->lo_p);
    f->lo.ReplicaId = f->r->node_id;
    f->lo_t.Name = (kp_str_t){e->part->topic, (int32_t)strlen(e->part->topic)};
    f->lo_p.PartitionIndex = e->part->index;
    f->lo_p.CurrentLeaderEpoch = epoch;
    f->lo_p.Timestamp = e->oor_step == 1 ? -1 : -2; /* latest, earliest */
    f->lo_t.Partitions.v = &f->lo_p;
    f->lo_t.Partitions.cnt = 1;
    f->lo.Topics.v = &f->lo_t;
    f->lo.Topics.cnt = 1;
    f->lo_id = e->id;
    f->lo_epoch = epoch;
    id = kc_request_msg(f->kc, f->leader, &kp_ListOffsetsRequest_desc, -1, &f->lo, 0, 0,
                        kb_fetcher_on_offsets, f);
    if (id > 0)
        f->lo_inflight = true;
    else
        kb_fetcher_backoff_part(f, e, -1, "cannot send ListOffsets");
}

/* ---- the fetcher thread ------------------------------------------------------------------------
 */

static void kb_fetcher_addr(kb_fetcher_t *f)
{
    char host[256];
    int port = 0;
    if (f->r->endpoint(f->r->endpoint_opaque, f->leader, host, sizeof(host), &port) != 0) {
        if (f->port) {
            kb_log_warn("repl", "no address of leader %" PRId32 " on the inter-broker listener",
                        f->leader);
            kc_client_node_remove(f->kc, f->leader);
            f->host[0] = 0;
            f->port = 0;
        }
        return;
    }
    if (f->port == port && !strcmp(f->host, host))
        return;
    if (kc_client_node_set(f->kc, f->leader, host, port) == 0) {
        snprintf(f->host, sizeof(f->host), "%s", host);
        f->port = port;
        kb_log_info("repl", "fetcher %d of leader %" PRId32 " fetches from %s:%d", f->idx,
                    f->leader, host, port);
    }
}

/* Drop the partitions being deleted (f->mu held): kb_part_delete() waits for their references. */
static void kb_fetcher_reap(kb_fetcher_t *f)
{
    for (size_t i = 0; i < f->n;) {
        kb_rpart_t *e = f->p[i];
        if (!atomic_load(&e->part->deleted)) {
            i++;
            continue;
        }
        kb_part_release(e->part);
        free(e);
        f->p[i] = f->p[--f->n];
    }
}

static void *kb_fetcher_main(void *arg)
{
    kb_fetcher_t *f = arg;
    kb_repl_t *r = f->r;
    char tn[16];
    snprintf(tn, sizeof(tn), "kb-rf-%" PRId32 "-%d", f->leader, f->idx);
    pthread_setname_np(pthread_self(), tn);
    for (;;) {
        int64_t now = kb_time_mono_ms(), next = 0;
        int timeout = KB_REPL_POLL_MS;
        bool send = false, dirty;
        pthread_mutex_lock(&f->mu);
        if (f->stop) {
            pthread_mutex_unlock(&f->mu);
            break;
        }
        dirty = f->addr_dirty;
        f->addr_dirty = false;
        pthread_mutex_unlock(&f->mu);
        /* Asked, unknown, or every second: a leader that came back elsewhere is found even
         * while a request waits for the old address. */
        if (dirty || !f->port || now >= f->next_addr_ms) {
            f->next_addr_ms = now + KB_REPL_ADDR_MS;
            kb_fetcher_addr(f);
        }
        pthread_mutex_lock(&f->mu);
        kb_fetcher_reap(f);
        if (f->port && !f->inflight && f->backoff_until <= now)
            send = kb_fetcher_build(f, now, &next) > 0;
        if (f->port)
            kb_fetcher_oor(f, now);
        pthread_mutex_unlock(&f->mu);
        if (send) {
            /* v12+: LastFetchedEpoch / DivergingEpoch */
            int64_t id =
                kc_request(f->kc, f->leader, KP_APIKEY_Fetch, 12, kp_FetchRequest_desc.max_ver,
                           kb_fetcher_encode, r->wait_ms + 30000, 0, kb_fetcher_on_fetch, f);
            if (id > 0) {
                f->inflight = true;
            } else {
                f->backoff_until = now + r->backoff_ms;
                kb_log_warn("repl", "cannot send a Fetch to leader %" PRId32 ": %s", f->leader,
                            kc_err_str((int)id));
            }
        }
        if (next && next - now < timeout)
            timeout = next - now > 0 ? (int)(next - now) : 0;
        if (f->backoff_until > now && f->backoff_until - now < timeout)
            timeout = (int)(f->backoff_until - now);
        kc_client_poll(f->kc, timeout);
    }
    return NULL;
}

static void kb_fetcher_log(void *opaque, int level, const char *msg)
{
    kb_fetcher_t *f = opaque;
    if (level <= KC_LOG_WARN)
        kb_log_warn("repl", "client of fetcher %d of leader %" PRId32 ": %s", f->idx, f->leader,
                    msg);
    else
        kb_log_debug("repl", "client of fetcher %d of leader %" PRId32 ": %s", f->idx, f->leader,
                     msg);
}

/* A new fetcher thread for @p leader / @p idx (r->mu held). */
static kb_fetcher_t *kb_fetcher_new(kb_repl_t *r, int32_t leader, int idx)
{
    kb_fetcher_t *f = calloc(1, sizeof(*f));
    kc_opts_t o;
    char cid[64], err[256];
    if (!f)
        return NULL;
    f->r = r;
    f->leader = leader;
    f->idx = idx;
    pthread_mutex_init(&f->mu, NULL);
    kp_arena_init(&f->ar, 0);
    snprintf(cid, sizeof(cid), "broker-%" PRId32 "-fetcher-%d", r->node_id, idx);
    kc_opts_init(&o);
    o.client_id = cid;
    o.request_timeout_ms = r->wait_ms + 30000;
    o.reconnect_backoff_ms = r->backoff_ms > 0 ? r->backoff_ms : 100;
    o.reconnect_backoff_max_ms = r->backoff_ms > 1000 ? r->backoff_ms : 1000;
    o.max_response_size =
        r->resp_max_bytes > (INT32_MAX - (1 << 20)) ? INT32_MAX : r->resp_max_bytes + (1 << 20);
    o.log_cb = kb_fetcher_log;
    o.log_opaque = f;
    o.log_level = KC_LOG_WARN;
    o.software_name = "kbroker-fetcher";
    f->kc = kc_client_new(&o, err, sizeof(err));
    if (!f->kc) {
        kb_log_error("repl", "fetcher of leader %" PRId32 ": %s", leader, err);
        kb_fetcher_free(f);
        return NULL;
    }
    if (pthread_create(&f->th, NULL, kb_fetcher_main, f) != 0) {
        kb_log_error("repl", "cannot start the fetcher thread of leader %" PRId32, leader);
        kb_fetcher_free(f);
        return NULL;
    }
    f->started = true;
    f->next = r->fetchers;
    r->fetchers = f;
    return f;
}

/* ---- adding and removing partitions ------------------------------------------------------------
 */

/* Remove @p part from fetcher @p f (f->mu held): true when it was there. */
static bool kb_fetcher_take(kb_fetcher_t *f, kb_part_t *part)
{
    for (size_t i = 0; i < f->n; i++) {
        if (f->p[i]->part != part)
            continue;
        kb_part_release(part);
        free(f->p[i]);
        f->p[i] = f->p[--f->n];
        return true;
    }
    return false;
}

void kb_repl_remove(kb_repl_t *r, kb_part_t *part)
{
    pthread_mutex_lock(&r->mu);
    for (kb_fetcher_t *f = r->fetchers; f; f = f->next) {
        bool taken;
        pthread_mutex_lock(&f->mu);
        taken = kb_fetcher_take(f, part);
        pthread_mutex_unlock(&f->mu);
        if (taken)
            break;
    }
    pthread_mutex_unlock(&r->mu);
}

static int kb_repl_fetcher_idx(const kb_repl_t *r, const kb_part_t *part)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < 16; i++)
        h = (h ^ part->topic_id.b[i]) * 16777619u;
    h = (h ^ (uint32_t)part->index) * 16777619u;
    return (int)(h % (uint32_t)r->nfetchers);
}

int kb_repl_add(kb_repl_t *r, kb_part_t *part)
{
    int32_t leader = -1;
    kb_fetcher_t *f;
    kb_rpart_t *e;
    int idx;
    if (kb_part_follower_position(part, &leader, NULL, NULL, NULL, NULL) != 0 || leader < 0 ||
        leader == r->node_id)
        return KB_E_STATE;
    idx = kb_repl_fetcher_idx(r, part);
    e = calloc(1, sizeof(*e));
    if (!e)
        return KB_E_NOMEM;
    e->id = atomic_fetch_add(&r->next_id, 1);
    e->state = KB_RP_FETCH;
    e->part = part;
    kb_part_ref(part);
    kb_repl_remove(r, part);
    pthread_mutex_lock(&r->mu);
    for (f = r->fetchers; f; f = f->next)
        if (f->leader == leader && f->idx == idx)
            break;
    if (!f)
        f = kb_fetcher_new(r, leader, idx);
    if (!f) {
        pthread_mutex_unlock(&r->mu);
        kb_part_release(part);
        free(e);
        return KB_E_IO;
    }
    pthread_mutex_lock(&f->mu);
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        kb_rpart_t **np = realloc(f->p, cap * sizeof(*np));
        if (!np) {
            pthread_mutex_unlock(&f->mu);
            pthread_mutex_unlock(&r->mu);
            kb_part_release(part);
            free(e);
            return KB_E_NOMEM;
        }
        f->p = np;
        f->cap = cap;
    }
    f->p[f->n++] = e;
    pthread_mutex_unlock(&f->mu);
    pthread_mutex_unlock(&r->mu);
    kc_client_wakeup(f->kc);
    return 0;
}
