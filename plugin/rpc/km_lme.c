/*
 * km_lme.c - the failback LME lookup: DescribeMirrors with the tagged lookup fields, answered
 * from `__mirror_state` (server) and sent in batches per mirror to its source (client). See
 * km_lme.h and docs/plugin.md "Failback".
 */
#define KM_LOG_COMPONENT "kmirror.lme"

#include "rpc/km_lme.h"

#include <stdio.h>
#include <string.h>

#include "catalog/km_catalog.h"
#include "coord/km_coord.h"
#include "core/km_plugin_types.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "kp_state.h"
#include "rpc/km_rpc_int.h"
#include "rpc/km_srcadm.h"
#include "state/km_state.h"
#include "util/km_log.h"
#include "util/km_mem.h"

/* ==================================== server ================================================ */

/* One looked-up partition (request arena). */
typedef struct km_lme_item {
    km_rpc_req_t *req;
    int32_t look; /* index into LastMirrorEpochLookups */
    int32_t part; /* partition */
    char *topic;  /* NULL: the topic id is unknown here (not answered: none) */
    char *mirror; /* "" unless the topic's mirror mirrors from the requester */
    bool desired_stopped;
    bool read;    /* the state was read */
    int8_t state; /* KP_PSTATE_* */
    int32_t lme_epoch;
    int64_t lme_offset;
} km_lme_item_t;

typedef struct km_lme_srv {
    km_lme_item_t *items;
    int32_t n;
    int pending;
    int16_t error;
    char errmsg[256];
} km_lme_srv_t;

bool km_lme_is_lookup(km_rpc_req_t *req)
{
    const kp_DescribeMirrorsRequest_t *rq = req->rq;
    const char *own = req->cm->cluster_id;

    if (rq->LastMirrorEpochLookups.cnt <= 0 || rq->ClusterId.len <= 0)
        return false;
    return !((size_t)rq->ClusterId.len == strlen(own) &&
             memcmp(rq->ClusterId.ptr, own, (size_t)rq->ClusterId.len) == 0);
}

typedef struct km_lme_find {
    const kp_uuid_t *id;
    const km_cat_topic_t *found;
} km_lme_find_t;

static void km_lme_find_topic(void *arg, const km_cat_topic_t *t)
{
    km_lme_find_t *f = arg;

    if (f->found == NULL && memcmp(t->id.bytes, f->id->b, 16) == 0)
        f->found = t;
}

/* The StateValue the requester decides by (docs/plugin.md "Failback"): STOPPED with the LME,
 * UNKNOWN for none, STOPPING (retry), anything else: still mirrored from the requester. */
static const char *km_lme_state_value(const km_lme_item_t *it)
{
    const char *name;

    if (!it->desired_stopped && (it->state == KP_PSTATE_STOPPED || it->state == KP_PSTATE_UNKNOWN))
        return "PREPARING"; /* about to mirror from the requester again */
    name = kp_state_pstate_name(it->state);
    return name != NULL ? name : "UNKNOWN";
}

static void km_lme_srv_finish(km_rpc_req_t *req)
{
    const kp_DescribeMirrorsRequest_t *rq = req->rq;
    km_lme_srv_t *st = req->st;
    kp_DescribeMirrorsResponse_t resp;
    kp_DescribeMirrorsResponse_DescribedMirror_t *m;
    kp_DescribeMirrorsResponse_TopicResult_t *cur_tr = NULL;
    int32_t i, j, cur_look = -1;

    if (km_rpc_req_done(req))
        return;
    if (st->error != 0) {
        km_rpc_fail(req, st->error, "%s", st->errmsg);
        return;
    }
    kp_DescribeMirrorsResponse_init(&resp);
    resp.Mirrors.cnt = 0;
    resp.Mirrors.v = kp_arena_calloc(&req->ar, (size_t)st->n + 1, sizeof(*resp.Mirrors.v));
    if (resp.Mirrors.v == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    for (i = 0; i < st->n; i++) {
        km_lme_item_t *it = &st->items[i];
        kp_DescribeMirrorsResponse_TopicResult_t *tr = NULL;
        kp_DescribeMirrorsResponse_PartitionDetail_t *pd;
        const km_mirror_def_t *def;

        if (it->topic == NULL)
            continue;
        m = NULL;
        for (j = 0; j < resp.Mirrors.cnt && m == NULL; j++)
            if ((size_t)resp.Mirrors.v[j].MirrorName.len == strlen(it->mirror) &&
                memcmp(resp.Mirrors.v[j].MirrorName.ptr, it->mirror,
                       (size_t)resp.Mirrors.v[j].MirrorName.len) == 0)
                m = &resp.Mirrors.v[j];
        if (m == NULL) {
            m = &resp.Mirrors.v[resp.Mirrors.cnt++];
            kp_DescribeMirrorsResponse_DescribedMirror_init(m);
            m->MirrorName = km_rpc_str(req, it->mirror);
            m->AuthorizedOperations = INT32_MIN;
            def = it->mirror[0] != '\0' ? km_catalog_mirror_find(&req->cm->catalog, it->mirror)
                                        : NULL;
            m->SourceBootstrap = km_rpc_str(req, NULL);
            m->SourceClusterId =
                def != NULL ? km_rpc_str(req, def->source_cluster_id) : km_rpc_str(req, NULL);
            m->ErrorMessage = it->mirror[0] != '\0'
                                  ? km_rpc_str(req, NULL)
                                  : km_rpc_str(req, "not mirrored from the requesting cluster");
            m->Topics.cnt = 0;
            m->Topics.v = kp_arena_calloc(&req->ar, (size_t)rq->LastMirrorEpochLookups.cnt,
                                          sizeof(*m->Topics.v));
            if (m->Topics.v == NULL)
                goto nomem;
        }
        /* One TopicResult per lookup entry: its items are consecutive and share the topic and
         * mirror (items left out in between do not split it). */
        if (cur_tr != NULL && cur_look == it->look)
            tr = cur_tr;
        if (tr == NULL) {
            tr = &m->Topics.v[m->Topics.cnt++];
            kp_DescribeMirrorsResponse_TopicResult_init(tr);
            tr->TopicName = km_rpc_str(req, it->topic);
            tr->Partitions.cnt = 0;
            tr->Partitions.v = kp_arena_calloc(
                &req->ar, (size_t)rq->LastMirrorEpochLookups.v[it->look].Partitions.cnt,
                sizeof(*tr->Partitions.v));
            if (tr->Partitions.v == NULL)
                goto nomem;
            cur_tr = tr;
            cur_look = it->look;
        }
        pd = &tr->Partitions.v[tr->Partitions.cnt++];
        kp_DescribeMirrorsResponse_PartitionDetail_init(pd);
        pd->PartitionIndex = it->part;
        pd->ErrorMessage = km_rpc_str(req, NULL);
        if (!it->read) {
            pd->StateValue = km_rpc_str(req, "UNKNOWN");
            continue;
        }
        pd->StateValue = km_rpc_str(req, km_lme_state_value(it));
        if (it->state == KP_PSTATE_STOPPED && it->desired_stopped) {
            pd->LastMirrorEpoch = it->lme_epoch;
            pd->LastMirrorOffset = it->lme_offset;
        } else if (strcmp(km_lme_state_value(it), "UNKNOWN") != 0 &&
                   it->state != KP_PSTATE_STOPPING) {
            pd->ErrorMessage = km_rpc_strf(req, "%s-%d is %s in mirror %s here", it->topic,
                                           (int)it->part, km_lme_state_value(it), it->mirror);
        }
    }
    km_rpc_complete(req, &resp);
    return;
nomem:
    km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
}

static void km_lme_srv_read_done(km_plugin_t *cm, void *arg, int16_t err, const char *msg,
                                 const km_state_pstate_t *st_in)
{
    km_lme_item_t *it = arg;
    km_rpc_req_t *req = it->req;
    km_lme_srv_t *st = req->st;

    (void)cm;
    if (err != 0 || st_in == NULL) {
        if (st->error == 0) {
            st->error = err != 0 ? err : KP_ERR_UNKNOWN_SERVER_ERROR;
            snprintf(st->errmsg, sizeof(st->errmsg), "%s-%d: state of mirror %s not readable: %s",
                     it->topic, (int)it->part, it->mirror, msg != NULL ? msg : "");
        }
    } else {
        it->read = true;
        it->state = st_in->state;
        it->lme_epoch = st_in->lme_epoch;
        it->lme_offset = st_in->lme_offset;
    }
    if (--st->pending == 0)
        km_lme_srv_finish(req);
    km_rpc_req_release(req);
}

void km_lme_serve(km_rpc_req_t *req)
{
    const kp_DescribeMirrorsRequest_t *rq = req->rq;
    km_plugin_t *cm = req->cm;
    char *requester = km_rpc_cstr(req, rq->ClusterId);
    km_lme_srv_t *st;
    int64_t total = 0;
    int32_t i, k;

    for (i = 0; i < rq->LastMirrorEpochLookups.cnt; i++)
        if (rq->LastMirrorEpochLookups.v[i].Partitions.cnt > 0)
            total += rq->LastMirrorEpochLookups.v[i].Partitions.cnt;
    st = kp_arena_calloc(&req->ar, 1, sizeof(*st));
    if (requester == NULL || st == NULL || total > INT32_MAX ||
        (total > 0 &&
         (st->items = kp_arena_calloc(&req->ar, (size_t)total, sizeof(*st->items))) == NULL)) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    req->st = st; /* in the arena */
    st->pending = 1;
    for (i = 0; i < rq->LastMirrorEpochLookups.cnt; i++) {
        const kp_DescribeMirrorsRequest_LastMirrorEpochLookup_t *lk =
            &rq->LastMirrorEpochLookups.v[i];
        km_lme_find_t f = {.id = &lk->TopicId, .found = NULL};
        const km_mirror_def_t *def = NULL;
        bool ours;

        km_catalog_topic_foreach(&cm->catalog, km_lme_find_topic, &f);
        if (f.found != NULL && f.found->mirror != NULL)
            def = km_catalog_mirror_find(&cm->catalog, f.found->mirror);
        ours = def != NULL && strcmp(def->source_cluster_id, requester) == 0;
        for (k = 0; k < lk->Partitions.cnt; k++) {
            km_lme_item_t *it = &st->items[st->n++];
            kbx_uuid_t id;

            it->req = req;
            it->look = i;
            it->part = lk->Partitions.v[k];
            it->state = KP_PSTATE_UNKNOWN;
            it->lme_epoch = -1;
            it->lme_offset = -1;
            /* A topic or partition this cluster does not have was never mirrored from the
             * requester: left out, which the requester reads as "none". */
            if (f.found == NULL || it->part < 0 || it->part >= f.found->partition_count)
                continue;
            it->topic = km_rpc_cstr(req, km_rpc_str(req, f.found->name));
            it->mirror = km_rpc_cstr(req, km_rpc_str(req, ours ? f.found->mirror : ""));
            it->desired_stopped = f.found->desired == KM_DESIRED_STOPPED;
            if (it->topic == NULL || it->mirror == NULL) {
                st->error = KP_ERR_UNKNOWN_SERVER_ERROR;
                snprintf(st->errmsg, sizeof(st->errmsg), "out of memory");
                it->topic = NULL;
                continue;
            }
            if (!ours)
                continue;
            memcpy(id.bytes, lk->TopicId.b, 16);
            km_rpc_req_hold(req);
            if (km_state_read(cm, it->mirror, it->topic, &id, it->part, km_lme_srv_read_done, it) !=
                KM_OK) {
                km_rpc_req_release(req);
                if (st->error == 0) {
                    st->error = KP_ERR_COORDINATOR_NOT_AVAILABLE;
                    snprintf(st->errmsg, sizeof(st->errmsg), "%s-%d: cannot read its state now",
                             it->topic, (int)it->part);
                }
                continue;
            }
            st->pending++;
        }
    }
    km_log_debug(cm, "LME lookup from cluster %s: %d partitions, %d state reads", requester,
                 (int)st->n, st->pending - 1);
    if (--st->pending == 0)
        km_lme_srv_finish(req);
}

/* ==================================== client ================================================ */

typedef struct km_lme_q {
    char *mirror;
    char *topic;
    kbx_uuid_t id;
    int32_t partition;
    uint64_t token;
    /* The result, filled from the peer's answers (items of a batch only). */
    int kind;           /* KM_LME_* */
    int32_t epoch;      /* the LME epoch, -1 none */
    int64_t offset;     /* the LME offset */
    int32_t peer_epoch; /* the peer's current leader epoch of the partition, -1 unknown */
    char *why;          /* NULL or the message of a RETRY / LOOP (owned) */
} km_lme_q_t;

typedef struct km_lme_busy {
    char *mirror;
    bool inflight;
    char last_err[160]; /* the last failure logged (warned once until it changes) */
} km_lme_busy_t;

struct km_lme {
    km_plugin_t *cm;
    km_lme_done_fn done;
    km_lme_q_t *q; /* queued, not sent */
    size_t nq, capq;
    km_lme_busy_t *busy; /* mirrors with a request in flight */
    size_t nbusy, capbusy;
    bool flush_queued;
};

/* One request in flight: owns copies of its items and the request message. */
typedef struct km_lme_batch {
    km_plugin_t *cm;
    char *mirror;
    km_lme_q_t *items;
    size_t n;
    kp_DescribeMirrorsRequest_t rq;
    kp_DescribeMirrorsRequest_LastMirrorEpochLookup_t *looks;
    int32_t *parts;
    /* The second round trip (design M43): Metadata for the topics answered with an LME, whose
     * partition leader epochs tell how far the peer's epochs went. */
    kp_MetadataRequest_t mrq;
    kp_MetadataRequest_MetadataRequestTopic_t *mtopics;
} km_lme_batch_t;

static void km_lme_q_clear(km_plugin_t *cm, km_lme_q_t *q)
{
    km_free(cm, q->mirror);
    km_free(cm, q->topic);
    km_free(cm, q->why);
    q->mirror = q->topic = q->why = NULL;
}

km_lme_t *km_lme_new(km_plugin_t *cm, km_lme_done_fn done)
{
    km_lme_t *l = km_calloc(cm, 1, sizeof(*l));

    if (l == NULL)
        return NULL;
    l->cm = cm;
    l->done = done;
    return l;
}

void km_lme_free(km_lme_t *l)
{
    if (l == NULL)
        return;
    for (size_t i = 0; i < l->nq; i++)
        km_lme_q_clear(l->cm, &l->q[i]);
    for (size_t i = 0; i < l->nbusy; i++)
        km_free(l->cm, l->busy[i].mirror);
    km_free(l->cm, l->q);
    km_free(l->cm, l->busy);
    km_free(l->cm, l);
}

static km_lme_busy_t *km_lme_busy_find(km_lme_t *l, const char *mirror, bool add)
{
    km_lme_busy_t *nb;

    for (size_t i = 0; i < l->nbusy; i++)
        if (strcmp(l->busy[i].mirror, mirror) == 0)
            return &l->busy[i];
    if (!add)
        return NULL;
    if (l->nbusy == l->capbusy) {
        size_t cap = l->capbusy ? 2 * l->capbusy : 4;
        nb = km_realloc(l->cm, l->busy, cap * sizeof(*nb));
        if (nb == NULL)
            return NULL;
        l->busy = nb;
        l->capbusy = cap;
    }
    nb = &l->busy[l->nbusy];
    nb->mirror = km_strdup(l->cm, mirror);
    if (nb->mirror == NULL)
        return NULL;
    nb->inflight = false;
    nb->last_err[0] = '\0';
    l->nbusy++;
    return nb;
}

static void km_lme_batch_free(km_plugin_t *cm, km_lme_batch_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        km_lme_q_clear(cm, &b->items[i]);
    km_free(cm, b->items);
    km_free(cm, b->looks);
    km_free(cm, b->parts);
    km_free(cm, b->mtopics);
    km_free(cm, b->mirror);
    km_free(cm, b);
}

static void km_lme_flush_post(km_lme_t *l);

/* Every item of b gets RETRY with fail (no usable answer). */
static void km_lme_fail_all(km_lme_t *l, km_lme_batch_t *b, const char *fail)
{
    for (size_t i = 0; i < b->n; i++) {
        km_lme_q_t *it = &b->items[i];
        l->done(l->cm, &it->id, it->partition, it->token, KM_LME_RETRY, -1, -1, -1, fail);
    }
}

/* Every item of b gets its result. */
static void km_lme_finish(km_lme_t *l, km_lme_batch_t *b)
{
    for (size_t i = 0; i < b->n; i++) {
        km_lme_q_t *it = &b->items[i];
        l->done(l->cm, &it->id, it->partition, it->token, it->kind, it->epoch, it->offset,
                it->peer_epoch, it->why);
    }
}

static bool km_lme_str_eq(const kp_str_t *a, const char *b)
{
    return a->len >= 0 && (size_t)a->len == strlen(b) && memcmp(a->ptr, b, (size_t)a->len) == 0;
}

/* Each item's kind/epoch/offset (and message) from the peer's decoded DescribeMirrors answer.
 * Returns true when some item got an LME (its peer epoch is then worth asking for). */
static bool km_lme_decide(km_lme_t *l, km_lme_batch_t *b, const kp_DescribeMirrorsResponse_t *resp)
{
    char msg[512];
    bool any_lme = false;

    for (size_t i = 0; i < b->n; i++) {
        km_lme_q_t *it = &b->items[i];
        int kind = KM_LME_ANSWER;
        int32_t epoch = -1;
        int64_t offset = -1;
        const char *why = NULL;

        msg[0] = '\0';
        for (int32_t m = 0; m < resp->Mirrors.cnt; m++) {
            const kp_DescribeMirrorsResponse_DescribedMirror_t *dm = &resp->Mirrors.v[m];
            for (int32_t t = 0; t < dm->Topics.cnt; t++) {
                const kp_DescribeMirrorsResponse_TopicResult_t *tr = &dm->Topics.v[t];
                if (!km_lme_str_eq(&tr->TopicName, it->topic))
                    continue;
                for (int32_t p = 0; p < tr->Partitions.cnt; p++) {
                    const kp_DescribeMirrorsResponse_PartitionDetail_t *pd = &tr->Partitions.v[p];
                    const kp_str_t *sv = &pd->StateValue;
                    if (pd->PartitionIndex != it->partition || sv->len < 0)
                        continue;
                    if (km_lme_str_eq(sv, "STOPPED")) {
                        if (kind == KM_LME_ANSWER && pd->LastMirrorEpoch > epoch) {
                            epoch = pd->LastMirrorEpoch;
                            offset = pd->LastMirrorOffset;
                        }
                    } else if (km_lme_str_eq(sv, "UNKNOWN")) {
                        /* never mirrored from us in that mirror: none */
                    } else if (km_lme_str_eq(sv, "STOPPING")) {
                        if (kind == KM_LME_ANSWER) {
                            kind = KM_LME_RETRY;
                            why = "the other cluster is still failing this partition over "
                                  "(STOPPING)";
                        }
                    } else {
                        kind = KM_LME_LOOP;
                        snprintf(msg, sizeof(msg),
                                 "the other cluster still mirrors this topic from us "
                                 "(mirror %.*s, state %.*s): stop it there first",
                                 (int)(dm->MirrorName.len > 0 ? dm->MirrorName.len : 0),
                                 dm->MirrorName.ptr != NULL ? dm->MirrorName.ptr : "", (int)sv->len,
                                 sv->ptr);
                        why = msg;
                    }
                }
            }
        }
        if (epoch < 0)
            offset = -1;
        it->kind = kind;
        it->epoch = epoch;
        it->offset = offset;
        it->peer_epoch = -1;
        km_free(l->cm, it->why);
        it->why = NULL;
        if (why != NULL && (it->why = km_strdup(l->cm, why)) == NULL) {
            /* Without memory for the message a LOOP still fails the partition (with the
             * generic text); a RETRY retries. */
            km_log_warn(l->cm, "%s-%d: LME answer message lost (out of memory)", it->topic,
                        (int)it->partition);
        }
        any_lme |= kind == KM_LME_ANSWER && epoch >= 0;
    }
    return any_lme;
}

/* Partitions stay PREPARING while a lookup fails: say why once (not on every retry). */
static void km_lme_note(km_lme_t *l, const km_lme_batch_t *b, const char *fail)
{
    km_lme_busy_t *busy = km_lme_busy_find(l, b->mirror, false);

    if (busy == NULL || strncmp(busy->last_err, fail, sizeof(busy->last_err) - 1) == 0)
        return;
    if (fail[0] != '\0')
        km_log_warn(l->cm,
                    "mirror %s: LME lookup of %zu partitions failed, they stay PREPARING and ask "
                    "again: %s",
                    b->mirror, b->n, fail);
    snprintf(busy->last_err, sizeof(busy->last_err), "%s", fail);
}

/* The batch is done: free it and send what queued meanwhile. */
static void km_lme_batch_done(km_lme_t *l, km_lme_batch_t *b)
{
    km_lme_busy_t *busy = km_lme_busy_find(l, b->mirror, false);

    if (busy != NULL)
        busy->inflight = false;
    km_lme_batch_free(l->cm, b);
    if (l->nq > 0)
        km_lme_flush_post(l);
}

/* The start of a source answer's callback: the lookup service that goes on with batch b, or NULL
 * (b freed) when the plugin shuts down or the service is gone. */
static km_lme_t *km_lme_answer_owner(km_plugin_t *cm, km_lme_batch_t *b,
                                     const km_srcadm_result_t *res)
{
    if (res->err == KM_ERR_SHUTDOWN || cm->mirror.lme == NULL) {
        /* on shutdown maybe not on the loop: touch nothing else */
        km_lme_batch_free(cm, b);
        return NULL;
    }
    return cm->mirror.lme;
}

/* The peer's current leader epochs (Metadata), for the items answered with an LME. */
static void km_lme_on_epochs(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res,
                             const uint8_t *body, size_t len)
{
    km_lme_batch_t *b = arg;
    km_lme_t *l;
    kp_MetadataResponse_t resp;
    kp_reader_t rd;
    kp_arena_t ar;
    char fail[320];

    l = km_lme_answer_owner(cm, b, res);
    if (l == NULL)
        return;
    kp_arena_init(&ar, KM_RPC_ARENA_LIMIT);
    kp_MetadataResponse_init(&resp);
    fail[0] = '\0';
    if (res->err != KM_OK) {
        snprintf(fail, sizeof(fail), "the source did not answer Metadata (leader epochs): %s",
                 res->errmsg);
    } else {
        kp_reader_init(&rd, body, len);
        if (kp_MetadataResponse_decode(&rd, &ar, &resp, res->version) != 0)
            snprintf(fail, sizeof(fail), "undecodable Metadata answer from the source");
    }
    if (fail[0] != '\0') {
        km_lme_fail_all(l, b, fail);
    } else {
        for (size_t i = 0; i < b->n; i++) {
            km_lme_q_t *it = &b->items[i];
            if (it->kind != KM_LME_ANSWER || it->epoch < 0)
                continue;
            for (int32_t t = 0; t < resp.Topics.cnt; t++) {
                const kp_MetadataResponse_MetadataResponseTopic_t *mt = &resp.Topics.v[t];
                if (mt->ErrorCode != 0 || !km_lme_str_eq(&mt->Name, it->topic))
                    continue;
                for (int32_t p = 0; p < mt->Partitions.cnt; p++) {
                    const kp_MetadataResponse_MetadataResponsePartition_t *mp =
                        &mt->Partitions.v[p];
                    /* LeaderEpoch is v7+ (-1 before: unknown) */
                    if (mp->PartitionIndex == it->partition && mp->LeaderEpoch >= 0 &&
                        mp->LeaderEpoch > it->peer_epoch)
                        it->peer_epoch = mp->LeaderEpoch;
                }
            }
        }
        km_lme_finish(l, b);
    }
    km_lme_note(l, b, fail);
    kp_arena_free(&ar);
    km_lme_batch_done(l, b);
}

/* Ask the peer's Metadata for the topics of the items answered with an LME. */
static km_err_t km_lme_ask_epochs(km_lme_t *l, km_lme_batch_t *b)
{
    km_plugin_t *cm = l->cm;
    const km_mirror_def_t *def = km_catalog_mirror_find(&cm->catalog, b->mirror);
    int32_t nt = 0;

    if (def == NULL || cm->rpc.srcadm == NULL)
        return KM_ERR_SHUTDOWN;
    b->mtopics = km_calloc(cm, b->n, sizeof(*b->mtopics));
    if (b->mtopics == NULL)
        return KM_ERR_NOMEM;
    for (size_t i = 0; i < b->n; i++) {
        const km_lme_q_t *it = &b->items[i];
        int32_t j;
        if (it->kind != KM_LME_ANSWER || it->epoch < 0)
            continue;
        for (j = 0; j < nt; j++)
            if (km_lme_str_eq(&b->mtopics[j].Name, it->topic))
                break;
        if (j < nt)
            continue;
        kp_MetadataRequest_MetadataRequestTopic_init(&b->mtopics[nt]);
        b->mtopics[nt].Name.ptr = it->topic;
        b->mtopics[nt].Name.len = (int32_t)strlen(it->topic);
        nt++;
    }
    kp_MetadataRequest_init(&b->mrq);
    b->mrq.Topics.cnt = nt;
    b->mrq.Topics.v = b->mtopics;
    b->mrq.AllowAutoTopicCreation = false;
    return km_srcadm_request(cm->rpc.srcadm, &def->conf.bootstrap_servers, &kp_MetadataRequest_desc,
                             12, &b->mrq, def->conf.request_timeout_ms, km_lme_on_epochs, b);
}

static void km_lme_on_answer(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res,
                             const uint8_t *body, size_t len)
{
    km_lme_batch_t *b = arg;
    km_lme_t *l;
    kp_DescribeMirrorsResponse_t resp;
    kp_reader_t rd;
    kp_arena_t ar;
    char fail[320];
    km_err_t err;

    l = km_lme_answer_owner(cm, b, res);
    if (l == NULL)
        return;
    kp_arena_init(&ar, KM_RPC_ARENA_LIMIT);
    kp_DescribeMirrorsResponse_init(&resp);
    fail[0] = '\0';
    if (res->err != KM_OK) {
        snprintf(fail, sizeof(fail), "the source did not answer the lookup: %s", res->errmsg);
    } else {
        kp_reader_init(&rd, body, len);
        if (kp_DescribeMirrorsResponse_decode(&rd, &ar, &resp, res->version) != 0)
            snprintf(fail, sizeof(fail), "undecodable DescribeMirrors answer from the source");
        else if (resp.ErrorCode != 0)
            snprintf(fail, sizeof(fail), "the source answered the lookup with error %d: %.*s",
                     (int)resp.ErrorCode,
                     (int)(resp.ErrorMessage.len > 0 ? resp.ErrorMessage.len : 0),
                     resp.ErrorMessage.ptr != NULL ? resp.ErrorMessage.ptr : "");
    }
    if (fail[0] != '\0') {
        km_lme_fail_all(l, b, fail);
    } else {
        km_log_info(cm, "mirror %s: the source answered %zu LME lookups", b->mirror, b->n);
        if (km_lme_decide(l, b, &resp)) {
            /* Some have an LME: the failback's epoch comes from the peer's current leader
             * epochs (design M27), one more round trip; the batch stays in flight. */
            err = km_lme_ask_epochs(l, b);
            if (err == KM_OK) {
                kp_arena_free(&ar);
                return;
            }
            snprintf(fail, sizeof(fail), "cannot ask the source for its leader epochs: %s",
                     km_err_str(err));
            km_lme_fail_all(l, b, fail);
        } else {
            km_lme_finish(l, b);
        }
    }
    km_lme_note(l, b, fail);
    kp_arena_free(&ar);
    km_lme_batch_done(l, b);
}

/* Take every queued item of mirror into a batch and send it. */
static void km_lme_send(km_lme_t *l, const char *mirror_in)
{
    km_plugin_t *cm = l->cm;
    const km_mirror_def_t *def = km_catalog_mirror_find(&cm->catalog, mirror_in);
    km_lme_busy_t *busy;
    km_lme_batch_t *b;
    size_t i, n = 0, w;
    int32_t nl = 0;
    km_err_t err;

    b = km_calloc(cm, 1, sizeof(*b));
    if (b == NULL || (b->mirror = km_strdup(cm, mirror_in)) == NULL)
        goto nomem;
    for (i = 0; i < l->nq; i++)
        n += strcmp(l->q[i].mirror, b->mirror) == 0;
    b->items = km_calloc(cm, n, sizeof(*b->items));
    b->looks = km_calloc(cm, n, sizeof(*b->looks));
    b->parts = km_calloc(cm, n, sizeof(*b->parts));
    if (b->items == NULL || b->looks == NULL || b->parts == NULL)
        goto nomem;
    /* Move the mirror's items out of the queue. */
    for (i = 0, w = 0; i < l->nq; i++) {
        if (strcmp(l->q[i].mirror, b->mirror) == 0)
            b->items[b->n++] = l->q[i];
        else
            l->q[w++] = l->q[i];
    }
    l->nq = w;
    if (def == NULL) {
        km_lme_fail_all(l, b, "the mirror definition is not known here (yet)");
        km_lme_batch_free(cm, b);
        return;
    }
    /* Group by topic id; each lookup's partitions are a run of b->parts. */
    for (i = 0; i < b->n; i++) {
        int32_t j;
        for (j = 0; j < nl; j++)
            if (memcmp(b->looks[j].TopicId.b, b->items[i].id.bytes, 16) == 0)
                break;
        if (j == nl) {
            kp_DescribeMirrorsRequest_LastMirrorEpochLookup_init(&b->looks[nl]);
            memcpy(b->looks[nl].TopicId.b, b->items[i].id.bytes, 16);
            b->looks[nl].Partitions.cnt = 0;
            nl++;
        }
    }
    {
        size_t off = 0;
        for (int32_t j = 0; j < nl; j++) {
            b->looks[j].Partitions.v = &b->parts[off];
            for (i = 0; i < b->n; i++)
                if (memcmp(b->looks[j].TopicId.b, b->items[i].id.bytes, 16) == 0)
                    b->parts[off + (size_t)b->looks[j].Partitions.cnt++] = b->items[i].partition;
            off += (size_t)b->looks[j].Partitions.cnt;
        }
    }
    kp_DescribeMirrorsRequest_init(&b->rq);
    b->rq.MirrorNames.cnt = -1;
    b->rq.ClusterId.ptr = cm->cluster_id;
    b->rq.ClusterId.len = (int32_t)strlen(cm->cluster_id);
    b->rq.LastMirrorEpochLookups.cnt = nl;
    b->rq.LastMirrorEpochLookups.v = b->looks;
    b->cm = cm;
    busy = km_lme_busy_find(l, b->mirror, true);
    if (busy == NULL) {
        km_lme_fail_all(l, b, "out of memory");
        km_lme_batch_free(cm, b);
        return;
    }
    err = cm->rpc.srcadm == NULL
              ? KM_ERR_SHUTDOWN
              : km_srcadm_request(cm->rpc.srcadm, &def->conf.bootstrap_servers,
                                  &kp_DescribeMirrorsRequest_desc, 0, &b->rq,
                                  def->conf.request_timeout_ms, km_lme_on_answer, b);
    if (err != KM_OK) {
        char fail[160];
        snprintf(fail, sizeof(fail), "cannot ask the source: %s", km_err_str(err));
        km_lme_fail_all(l, b, fail);
        km_lme_batch_free(cm, b);
        return;
    }
    busy->inflight = true;
    km_log_debug(cm, "mirror %s: LME lookup of %zu partitions (%d topics) sent to the source",
                 mirror_in, b->n, (int)nl);
    return;
nomem:
    if (b != NULL) {
        /* The items stay queued (nothing was moved unless b->items exists and n > 0). */
        km_free(cm, b->items);
        b->items = NULL;
        b->n = 0;
        km_lme_batch_free(cm, b);
    }
    km_log_warn(cm, "mirror %s: out of memory for an LME lookup (retried)", mirror_in);
}

static void km_lme_flush_run(km_plugin_t *cm, void *arg)
{
    km_lme_t *l = cm->mirror.lme;
    size_t i = 0;

    (void)arg;
    if (l == NULL)
        return;
    l->flush_queued = false;
    while (i < l->nq) {
        km_lme_busy_t *busy = km_lme_busy_find(l, l->q[i].mirror, false);
        size_t before = l->nq;
        if (busy != NULL && busy->inflight) {
            i++; /* sent with the next batch, when the answer came */
            continue;
        }
        km_lme_send(l, l->q[i].mirror);
        if (l->nq == before)
            i++; /* could not take them (memory): left for the next flush */
    }
}

static void km_lme_flush_drop(km_plugin_t *cm, void *arg)
{
    (void)cm;
    (void)arg;
}

static void km_lme_flush_post(km_lme_t *l)
{
    if (l->flush_queued)
        return;
    if (km_coord_post(&l->cm->coord, km_lme_flush_run, km_lme_flush_drop, NULL) == KM_OK)
        l->flush_queued = true;
}

km_err_t km_lme_lookup(km_lme_t *l, const char *mirror, const char *topic,
                       const kbx_uuid_t *topic_id, int32_t partition, uint64_t token)
{
    km_lme_q_t *q;

    for (size_t i = 0; i < l->nq; i++) {
        if (l->q[i].partition == partition && memcmp(l->q[i].id.bytes, topic_id->bytes, 16) == 0 &&
            strcmp(l->q[i].mirror, mirror) == 0) {
            l->q[i].token = token;
            km_lme_flush_post(l);
            return KM_OK;
        }
    }
    if (l->nq == l->capq) {
        size_t cap = l->capq ? 2 * l->capq : 16;
        q = km_realloc(l->cm, l->q, cap * sizeof(*q));
        if (q == NULL)
            return KM_ERR_NOMEM;
        l->q = q;
        l->capq = cap;
    }
    q = &l->q[l->nq];
    q->why = NULL; /* km_lme_q_clear frees it */
    q->mirror = km_strdup(l->cm, mirror);
    q->topic = km_strdup(l->cm, topic);
    if (q->mirror == NULL || q->topic == NULL) {
        km_lme_q_clear(l->cm, q);
        return KM_ERR_NOMEM;
    }
    q->id = *topic_id;
    q->partition = partition;
    q->token = token;
    q->kind = KM_LME_RETRY;
    q->epoch = q->peer_epoch = -1;
    q->offset = -1;
    l->nq++;
    km_lme_flush_post(l);
    return KM_OK;
}
