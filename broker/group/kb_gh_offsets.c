/*
 * kb_gh_offsets.c -- OffsetCommit 2-10, OffsetFetch 1-10 (multi-group v8+, require_stable v7+,
 * topic ids v10), and the TxnOffsetCommit side of the transaction hook.
 */
#include <stdlib.h>
#include <string.h>

#include "kb_gco_int.h"
#include "kb_glog.h"
#include "kp_errcode.h"

/* ---- OffsetCommit ---------------------------------------------------------------------------- */

static kb_api_result_t kb_gh_commit(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_gco_t *co = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    int16_t ver = ctx->api_version;
    kp_OffsetCommitRequest_t rq;
    kp_OffsetCommitResponse_t resp;
    kp_OffsetCommitResponse_OffsetCommitResponseTopic_t *rt = NULL;
    kb_gcommit_in_t in;
    kb_gcommit_part_t *parts = NULL;
    size_t n = 0, k = 0;
    int16_t group_err = 0;

    if (kb_gh_decode(ctx, &kp_OffsetCommitRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    for (int32_t t = 0; t < rq.Topics.cnt; t++)
        n += rq.Topics.v[t].Partitions.cnt > 0 ? (size_t)rq.Topics.v[t].Partitions.cnt : 0;
    memset(&in, 0, sizeof(in));
    in.group_id = kb_gh_cstr(ar, rq.GroupId);
    in.generation = rq.GenerationIdOrMemberEpoch;
    in.member_id = kb_gh_cstr(ar, rq.MemberId);
    in.instance_id = ver >= 7 ? kb_gh_cstr(ar, rq.GroupInstanceId) : NULL;
    in.retention_ms = ver <= 4 ? rq.RetentionTimeMs : -1;
    in.version = ver;
    parts = kp_arena_alloc(ar, (n ? n : 1) * sizeof(*parts));
    if (rq.Topics.cnt > 0)
        rt = kp_arena_alloc(ar, (size_t)rq.Topics.cnt * sizeof(*rt));
    if (!parts || (rq.Topics.cnt > 0 && !rt) || !in.member_id)
        return KB_API_CLOSE;
    if (!in.group_id || !in.group_id[0])
        group_err = KP_ERR_INVALID_GROUP_ID;
    else if (kb_gco_ensure_topic(co))
        group_err = KP_ERR_COORDINATOR_NOT_AVAILABLE;

    for (int32_t t = 0; t < rq.Topics.cnt; t++) {
        const kp_OffsetCommitRequest_OffsetCommitRequestTopic_t *tq = &rq.Topics.v[t];
        for (int32_t i = 0; i < tq->Partitions.cnt; i++) {
            const kp_OffsetCommitRequest_OffsetCommitRequestPartition_t *pq = &tq->Partitions.v[i];
            kb_gcommit_part_t *p = &parts[k++];
            memset(p, 0, sizeof(*p));
            p->partition = pq->PartitionIndex;
            p->offset = pq->CommittedOffset;
            p->leader_epoch = ver >= 6 ? pq->CommittedLeaderEpoch : -1;
            p->metadata = kb_gh_cstr(ar, pq->CommittedMetadata);
            p->err = group_err ? group_err
                               : kb_gh_topic(co, ar, tq->Name, ver >= 10 ? &tq->TopicId : NULL,
                                             pq->PartitionIndex, &p->topic, &p->topic_id);
            if (!p->topic)
                p->topic = "";
        }
    }
    in.parts = parts;
    in.nparts = n;
    if (!group_err) {
        int16_t err;
        pthread_mutex_lock(&co->mu);
        err = kb_gco_owner_err(co, in.group_id);
        if (!err)
            kb_gsm_commit(co->gsm, &in);
        pthread_mutex_unlock(&co->mu);
        /* acks=all: the answer waits until the records are replicated (the HW passed them) */
        if (!err)
            err = kb_gco_await_writes(co);
        for (size_t i = 0; err && i < n; i++)
            if (!parts[i].err)
                parts[i].err = err;
    }

    kp_OffsetCommitResponse_init(&resp);
    k = 0;
    for (int32_t t = 0; t < rq.Topics.cnt; t++) {
        const kp_OffsetCommitRequest_OffsetCommitRequestTopic_t *tq = &rq.Topics.v[t];
        int32_t np = tq->Partitions.cnt > 0 ? tq->Partitions.cnt : 0;
        kp_OffsetCommitResponse_OffsetCommitResponseTopic_init(&rt[t]);
        rt[t].Name = tq->Name;
        rt[t].TopicId = tq->TopicId;
        rt[t].Partitions.cnt = np;
        rt[t].Partitions.v =
            kp_arena_alloc(ar, (np ? (size_t)np : 1) * sizeof(*rt[t].Partitions.v));
        if (!rt[t].Partitions.v)
            return KB_API_CLOSE;
        for (int32_t i = 0; i < np; i++) {
            kp_OffsetCommitResponse_OffsetCommitResponsePartition_init(&rt[t].Partitions.v[i]);
            rt[t].Partitions.v[i].PartitionIndex = tq->Partitions.v[i].PartitionIndex;
            rt[t].Partitions.v[i].ErrorCode = parts[k++].err;
        }
    }
    resp.Topics.cnt = rq.Topics.cnt > 0 ? rq.Topics.cnt : 0;
    resp.Topics.v = rt;
    return kb_gh_respond(ctx, &kp_OffsetCommitResponse_desc, &resp, respp);
}

/* ---- OffsetFetch ---------------------------------------------------------------------------- */

typedef kp_OffsetFetchResponse_OffsetFetchResponseGroup_t kb_gh_fgroup_t;
typedef kp_OffsetFetchResponse_OffsetFetchResponseTopics_t kb_gh_ftopic_t;
typedef kp_OffsetFetchResponse_OffsetFetchResponsePartitions_t kb_gh_fpart_t;

/* One partition's answer: the committed offset, none (-1), or UNSTABLE_OFFSET_COMMIT while a
 * transaction holds a pending offset for it and the client asked for stable offsets. */
static void kb_gh_fetch_one(const kb_group_t *g, const char *topic, int32_t partition,
                            bool require_stable, kb_gh_fpart_t *out)
{
    const kb_goffset_t *o = g && topic ? kb_gsm_offset(g, topic, partition) : NULL;
    kp_OffsetFetchResponse_OffsetFetchResponsePartitions_init(out);
    out->PartitionIndex = partition;
    out->CommittedOffset = -1;
    out->CommittedLeaderEpoch = -1;
    out->Metadata = kp_str("");
    out->ErrorCode = 0;
    if (g && topic && require_stable && kb_gsm_txn_pending(g, topic, partition)) {
        out->ErrorCode = KP_ERR_UNSTABLE_OFFSET_COMMIT;
        return;
    }
    if (o) {
        out->CommittedOffset = o->offset;
        out->CommittedLeaderEpoch = o->leader_epoch;
        out->Metadata = kb_gh_view(o->metadata);
    }
}

static int kb_gh_offset_cmp(const void *a, const void *b)
{
    const kb_goffset_t *x = *(const kb_goffset_t *const *)a, *y = *(const kb_goffset_t *const *)b;
    int c = strcmp(x->topic, y->topic);
    return c ? c : (x->partition > y->partition) - (x->partition < y->partition);
}

/* Every committed offset of @p g, by topic (v10: topics that no longer exist are left out, they
 * have no id to name them). Strings are copied into @p ar (the lock is released before the
 * response is encoded). */
static int kb_gh_fetch_all(kb_gco_t *co, kp_arena_t *ar, const kb_group_t *g, bool stable, bool ids,
                           kb_gh_fgroup_t *out)
{
    kb_ghash_it_t it = {0};
    const kb_goffset_t **v;
    kb_goffset_t *o;
    size_t n = g ? kb_ghash_count(&g->offsets) : 0, i = 0, nt = 0;
    kb_gh_ftopic_t *topics;
    out->Topics.cnt = 0;
    if (!n)
        return 0;
    v = kp_arena_alloc(ar, n * sizeof(*v));
    topics = kp_arena_alloc(ar, n * sizeof(*topics));
    if (!v || !topics)
        return -1;
    while ((o = kb_ghash_next(&g->offsets, &it, NULL, NULL)))
        v[i++] = o;
    qsort(v, n, sizeof(*v), kb_gh_offset_cmp);
    for (i = 0; i < n;) {
        size_t j = i, np;
        kb_gh_ftopic_t *t = &topics[nt];
        kb_topic_info_t ti;
        while (j < n && !strcmp(v[j]->topic, v[i]->topic))
            j++;
        np = j - i;
        kp_OffsetFetchResponse_OffsetFetchResponseTopics_init(t);
        if (ids && kb_meta_topic_by_name(co->meta, v[i]->topic, &ti) != 0) {
            i = j;
            continue;
        }
        if (ids)
            t->TopicId = ti.id;
        t->Name = kp_str(kb_gh_cstr(ar, kb_gh_view(v[i]->topic)));
        t->Partitions.v = kp_arena_alloc(ar, np * sizeof(*t->Partitions.v));
        if (!t->Name.ptr || !t->Partitions.v)
            return -1;
        t->Partitions.cnt = (int32_t)np;
        for (size_t k = 0; k < np; k++) {
            kb_gh_fpart_t *p = &t->Partitions.v[k];
            kb_gh_fetch_one(g, v[i + k]->topic, v[i + k]->partition, stable, p);
            p->Metadata = kp_str(kb_gh_cstr(ar, p->Metadata));
        }
        nt++;
        i = j;
    }
    out->Topics.cnt = (int32_t)nt;
    out->Topics.v = topics;
    return 0;
}

/* The answer for one group: @p tq (NULL: every committed offset) with @p ntq topics. */
static void kb_gh_fetch_group(kb_gco_t *co, kp_arena_t *ar, int16_t ver, kp_str_t group_id,
                              const kp_OffsetFetchRequest_OffsetFetchRequestTopics_t *tq,
                              int32_t ntq, bool stable, kb_gh_fgroup_t *out)
{
    char *gid = kb_gh_cstr(ar, group_id);
    bool ids = ver >= 10;
    kb_group_t *g;
    kp_OffsetFetchResponse_OffsetFetchResponseGroup_init(out);
    out->GroupId = group_id;
    out->Topics.cnt = 0;
    if (!gid || !gid[0]) {
        out->ErrorCode = KP_ERR_INVALID_GROUP_ID;
        return;
    }
    pthread_mutex_lock(&co->mu);
    if ((out->ErrorCode = kb_gco_owner_err(co, gid))) {
        pthread_mutex_unlock(&co->mu);
        return;
    }
    g = kb_gsm_group(co->gsm, gid);
    if (!tq) {
        if (kb_gh_fetch_all(co, ar, g, stable, ids, out) != 0)
            out->ErrorCode = KP_ERR_UNKNOWN_SERVER_ERROR;
        pthread_mutex_unlock(&co->mu);
        return;
    }
    out->Topics.v = kp_arena_alloc(ar, (ntq > 0 ? (size_t)ntq : 1) * sizeof(*out->Topics.v));
    if (!out->Topics.v) {
        pthread_mutex_unlock(&co->mu);
        out->ErrorCode = KP_ERR_UNKNOWN_SERVER_ERROR;
        return;
    }
    out->Topics.cnt = ntq;
    for (int32_t t = 0; t < ntq; t++) {
        kb_gh_ftopic_t *rt = &out->Topics.v[t];
        int32_t np = tq[t].PartitionIndexes.cnt > 0 ? tq[t].PartitionIndexes.cnt : 0;
        const char *topic = NULL;
        int16_t terr = 0;
        kp_OffsetFetchResponse_OffsetFetchResponseTopics_init(rt);
        rt->Name = tq[t].Name;
        rt->TopicId = tq[t].TopicId;
        if (ids) {
            kb_topic_info_t ti;
            if (kb_meta_topic_by_id(co->meta, &tq[t].TopicId, &ti) == 0)
                topic = kb_gh_cstr(ar, kb_gh_view(ti.name));
            else
                terr = KP_ERR_UNKNOWN_TOPIC_ID;
        } else {
            topic = kb_gh_cstr(ar, tq[t].Name);
        }
        rt->Partitions.v = kp_arena_alloc(ar, (np ? (size_t)np : 1) * sizeof(*rt->Partitions.v));
        if (!rt->Partitions.v) {
            out->ErrorCode = KP_ERR_UNKNOWN_SERVER_ERROR;
            break;
        }
        rt->Partitions.cnt = np;
        for (int32_t i = 0; i < np; i++) {
            kb_gh_fpart_t *p = &rt->Partitions.v[i];
            kb_gh_fetch_one(terr ? NULL : g, topic, tq[t].PartitionIndexes.v[i], stable, p);
            p->Metadata = kp_str(kb_gh_cstr(ar, p->Metadata));
            if (terr)
                p->ErrorCode = terr;
        }
    }
    pthread_mutex_unlock(&co->mu);
}

/* v1-7 carry one group in the top-level Topics (other struct types, same fields). */
static int kb_gh_fetch_legacy(kp_arena_t *ar, int16_t ver, const kb_gh_fgroup_t *g,
                              kp_OffsetFetchResponse_t *resp)
{
    int32_t nt = g->Topics.cnt > 0 ? g->Topics.cnt : 0;
    kp_OffsetFetchResponse_OffsetFetchResponseTopic_t *ts =
        kp_arena_alloc(ar, (nt ? (size_t)nt : 1) * sizeof(*ts));
    if (!ts)
        return -1;
    for (int32_t t = 0; t < nt; t++) {
        const kb_gh_ftopic_t *src = &g->Topics.v[t];
        kp_OffsetFetchResponse_OffsetFetchResponseTopic_init(&ts[t]);
        ts[t].Name = src->Name;
        ts[t].Partitions.cnt = src->Partitions.cnt;
        ts[t].Partitions.v =
            kp_arena_alloc(ar, (src->Partitions.cnt ? (size_t)src->Partitions.cnt : 1) *
                                   sizeof(*ts[t].Partitions.v));
        if (!ts[t].Partitions.v)
            return -1;
        for (int32_t i = 0; i < src->Partitions.cnt; i++) {
            kp_OffsetFetchResponse_OffsetFetchResponsePartition_t *d = &ts[t].Partitions.v[i];
            const kb_gh_fpart_t *s = &src->Partitions.v[i];
            kp_OffsetFetchResponse_OffsetFetchResponsePartition_init(d);
            d->PartitionIndex = s->PartitionIndex;
            d->CommittedOffset = s->CommittedOffset;
            d->CommittedLeaderEpoch = s->CommittedLeaderEpoch;
            d->Metadata = s->Metadata;
            /* v0-1 have no top-level error: it goes on every partition */
            d->ErrorCode = ver < 2 && g->ErrorCode ? g->ErrorCode : s->ErrorCode;
        }
    }
    resp->Topics.cnt = nt;
    resp->Topics.v = ts;
    resp->ErrorCode = g->ErrorCode;
    return 0;
}

static kb_api_result_t kb_gh_fetch(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_gco_t *co = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_arena_t *ar = ctx->arena;
    int16_t ver = ctx->api_version;
    kp_OffsetFetchRequest_t rq;
    kp_OffsetFetchResponse_t resp;
    bool stable;

    if (kb_gh_decode(ctx, &kp_OffsetFetchRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    stable = ver >= 7 && rq.RequireStable;
    kp_OffsetFetchResponse_init(&resp);
    if (ver >= 8) {
        int32_t ng = rq.Groups.cnt > 0 ? rq.Groups.cnt : 0;
        kb_gh_fgroup_t *gs = kp_arena_alloc(ar, (ng ? (size_t)ng : 1) * sizeof(*gs));
        if (!gs)
            return KB_API_CLOSE;
        for (int32_t i = 0; i < ng; i++) {
            const kp_OffsetFetchRequest_OffsetFetchRequestGroup_t *gq = &rq.Groups.v[i];
            kb_gh_fetch_group(co, ar, ver, gq->GroupId, gq->Topics.cnt >= 0 ? gq->Topics.v : NULL,
                              gq->Topics.cnt, stable, &gs[i]);
        }
        resp.Groups.cnt = ng;
        resp.Groups.v = gs;
    } else {
        /* the v1-7 request topics as v8 topics (Name and PartitionIndexes) */
        kp_OffsetFetchRequest_OffsetFetchRequestTopics_t *tq = NULL;
        int32_t nt = rq.Topics.cnt;
        kb_gh_fgroup_t g;
        if (nt >= 0) {
            tq = kp_arena_alloc(ar, (nt ? (size_t)nt : 1) * sizeof(*tq));
            if (!tq)
                return KB_API_CLOSE;
            for (int32_t t = 0; t < nt; t++) {
                kp_OffsetFetchRequest_OffsetFetchRequestTopics_init(&tq[t]);
                tq[t].Name = rq.Topics.v[t].Name;
                tq[t].PartitionIndexes.cnt = rq.Topics.v[t].PartitionIndexes.cnt;
                tq[t].PartitionIndexes.v = rq.Topics.v[t].PartitionIndexes.v;
            }
        }
        kb_gh_fetch_group(co, ar, ver, rq.GroupId, tq, nt, stable, &g);
        if (kb_gh_fetch_legacy(ar, ver, &g, &resp) != 0)
            return KB_API_CLOSE;
    }
    return kb_gh_respond(ctx, &kp_OffsetFetchResponse_desc, &resp, respp);
}

/* ---- TxnOffsetCommit (called by the transaction coordinator) ------------------------------- */

int16_t kb_gh_txn_offset_commit(kb_gco_t *co, kb_reqctx_t *ctx, int32_t offsets_partition,
                                const kp_TxnOffsetCommitRequest_t *rq,
                                kp_TxnOffsetCommitResponse_t *resp)
{
    kp_arena_t *ar = ctx->arena;
    int16_t ver = ctx->api_version;
    kb_gcommit_in_t in;
    kb_gcommit_part_t *parts;
    size_t n = 0, k = 0;

    memset(&in, 0, sizeof(in));
    in.group_id = kb_gh_cstr(ar, rq->GroupId);
    if (!in.group_id || !in.group_id[0])
        return KP_ERR_INVALID_GROUP_ID;
    in.generation = ver >= 3 ? rq->GenerationIdOrMemberEpoch : -1;
    in.member_id = ver >= 3 ? kb_gh_cstr(ar, rq->MemberId) : "";
    in.instance_id = ver >= 3 ? kb_gh_cstr(ar, rq->GroupInstanceId) : NULL;
    in.retention_ms = -1;
    in.version = ver;
    if (!in.member_id)
        in.member_id = "";
    if (kb_gco_partition_for(co, in.group_id) != offsets_partition)
        kb_glog_warn("TxnOffsetCommit for group %s: the transaction coordinator uses partition "
                     "%d, the group lives in %d",
                     in.group_id, offsets_partition, kb_gco_partition_for(co, in.group_id));
    for (int32_t t = 0; t < rq->Topics.cnt; t++)
        n += rq->Topics.v[t].Partitions.cnt > 0 ? (size_t)rq->Topics.v[t].Partitions.cnt : 0;
    if (!(parts = kp_arena_alloc(ar, (n ? n : 1) * sizeof(*parts))))
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    for (int32_t t = 0; t < rq->Topics.cnt; t++) {
        const kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestTopic_t *tq = &rq->Topics.v[t];
        for (int32_t i = 0; i < tq->Partitions.cnt; i++) {
            const kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestPartition_t *pq =
                &tq->Partitions.v[i];
            kb_gcommit_part_t *p = &parts[k++];
            memset(p, 0, sizeof(*p));
            p->partition = pq->PartitionIndex;
            p->offset = pq->CommittedOffset;
            p->leader_epoch = ver >= 2 ? pq->CommittedLeaderEpoch : -1;
            p->metadata = kb_gh_cstr(ar, pq->CommittedMetadata);
            p->err = kb_gh_topic(co, ar, tq->Name, ver >= 6 ? &tq->TopicId : NULL,
                                 pq->PartitionIndex, &p->topic, &p->topic_id);
            if (!p->topic)
                p->topic = "";
        }
    }
    in.parts = parts;
    in.nparts = n;
    kb_gco_txn_offset_commit(co, &in, rq->ProducerId, rq->ProducerEpoch);
    /* resp mirrors the request: same topics and partitions, in order */
    k = 0;
    for (int32_t t = 0; t < rq->Topics.cnt; t++) {
        for (int32_t i = 0; i < rq->Topics.v[t].Partitions.cnt; i++) {
            int16_t err = parts[k++].err;
            if (t < resp->Topics.cnt && i < resp->Topics.v[t].Partitions.cnt)
                resp->Topics.v[t].Partitions.v[i].ErrorCode = err;
        }
    }
    return 0;
}

int kb_gh_offsets_register(kb_gco_t *co)
{
    int rc;
    if ((rc = kb_gh_register(co, KP_APIKEY_OffsetCommit, 0, INT16_MAX, kb_gh_commit, 0)) ||
        (rc = kb_gh_register(co, KP_APIKEY_OffsetFetch, 0, INT16_MAX, kb_gh_fetch,
                             KB_API_CONCURRENT)))
        return rc;
    return 0;
}
