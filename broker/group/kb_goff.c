/*
 * kb_goff.c -- committed and transactional offsets of the group state machine (kb_gsm.h):
 * OffsetCommit / TxnOffsetCommit validation and records, transaction markers, DeleteGroups,
 * offset expiry, deleted topics, and loading __consumer_offsets.
 */
#include <stdlib.h>
#include <string.h>

#include "kb_glog.h"
#include "kb_grec.h"
#include "kb_gsm.h"
#include "kb_gsm_int.h"
#include "kp_errcode.h"
#include "kp_reader.h"

/* ---- record batches -------------------------------------------------------------------------- */

void kb_gbatch_init(kb_gbatch_t *b, int64_t ts, int64_t pid, int16_t pepoch)
{
    kp_batch_opts_t o;
    kp_batch_opts_init(&o);
    if (pid >= 0) {
        o.producerId = pid;
        o.producerEpoch = pepoch;
        o.transactional = true;
    }
    kp_batch_builder_init(&b->bb, &o);
    kp_writer_init(&b->kw);
    kp_writer_init(&b->vw);
    b->ts = ts;
    b->n = 0;
}

void kb_gbatch_add(kb_gbatch_t *b, bool tombstone)
{
    kp_bytes_t k = {b->kw.buf, (int32_t)b->kw.len};
    kp_bytes_t v = tombstone ? KP_BYTES_NULL : (kp_bytes_t){b->vw.buf, (int32_t)b->vw.len};
    if (!b->kw.err && !b->vw.err && kp_batch_builder_add(&b->bb, b->ts, k, v, NULL, 0) == 0)
        b->n++;
    else
        b->bb.err = b->bb.err ? b->bb.err : KP_E_NOMEM;
    kp_writer_reset(&b->kw);
    kp_writer_reset(&b->vw);
}

void kb_gbatch_free(kb_gbatch_t *b)
{
    kp_batch_builder_free(&b->bb);
    kp_writer_free(&b->kw);
    kp_writer_free(&b->vw);
}

int16_t kb_gbatch_write(kb_gsm_t *gsm, kb_gbatch_t *b, int32_t partition, int64_t *base)
{
    kp_writer_t out;
    int16_t err = 0;
    int64_t dummy;
    if (!base)
        base = &dummy;
    *base = -1;
    if (b->bb.err) {
        kb_gbatch_free(b);
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
    if (!b->n) {
        kb_gbatch_free(b);
        return 0;
    }
    kp_writer_init(&out);
    if (kp_batch_builder_finish(&b->bb, &out) != 0 || out.err)
        err = KP_ERR_UNKNOWN_SERVER_ERROR;
    else
        err = gsm->ops.append(gsm->opaque, partition, out.buf, out.len, base);
    kp_writer_free(&out);
    kb_gbatch_free(b);
    return err;
}

/* ---- the offset cache -------------------------------------------------------------------------
 */

/* Table key of a partition: topic name, a NUL, the partition as 4 bytes. */
static size_t kb_goff_key(char *buf, size_t size, const char *topic, int32_t partition)
{
    size_t n = strlen(topic);
    if (n + 5 > size)
        n = size - 5;
    memcpy(buf, topic, n);
    buf[n] = '\0';
    memcpy(buf + n + 1, &partition, 4);
    return n + 5;
}

void kb_goff_free(kb_goffset_t *o)
{
    if (!o)
        return;
    free(o->topic);
    free(o->metadata);
    free(o);
}

void kb_goff_free_all(kb_ghash_t *h)
{
    kb_ghash_it_t it = {0};
    kb_goffset_t *o;
    while ((o = kb_ghash_next(h, &it, NULL, NULL)))
        kb_goff_free(o);
    kb_ghash_free(h);
}

void kb_goff_txns_free(kb_group_t *g)
{
    while (g->txns) {
        kb_gtxn_t *t = g->txns;
        g->txns = t->next;
        kb_goff_free_all(&t->offsets);
        free(t);
    }
}

static kb_goffset_t *kb_goff_new(const char *topic, int32_t partition, const kb_grec_offset_t *v,
                                 int64_t record_offset)
{
    kb_goffset_t *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->topic = strdup(topic);
    o->metadata = malloc(v->metadata.len > 0 ? (size_t)v->metadata.len + 1 : 1);
    if (!o->topic || !o->metadata) {
        kb_goff_free(o);
        return NULL;
    }
    if (v->metadata.len > 0)
        memcpy(o->metadata, v->metadata.ptr, (size_t)v->metadata.len);
    o->metadata[v->metadata.len > 0 ? v->metadata.len : 0] = '\0';
    o->partition = partition;
    o->offset = v->offset;
    o->leader_epoch = v->leader_epoch;
    o->commit_ts = v->commit_ts;
    o->expire_ts = v->expire_ts;
    o->record_offset = record_offset;
    o->topic_id = v->topic_id;
    return o;
}

/* Store @p o under its partition in @p h (replacing and freeing an older entry). */
static int kb_goff_put(kb_ghash_t *h, kb_goffset_t *o)
{
    char key[512];
    size_t kl = kb_goff_key(key, sizeof(key), o->topic, o->partition);
    kb_goffset_t *old = kb_ghash_get(h, key, kl);
    if (kb_ghash_put(h, key, kl, o) != 0)
        return -1;
    if (old != o)
        kb_goff_free(old);
    return 0;
}

static void kb_goff_remove(kb_ghash_t *h, const char *topic, int32_t partition)
{
    char key[512];
    size_t kl = kb_goff_key(key, sizeof(key), topic, partition);
    kb_goff_free(kb_ghash_del(h, key, kl));
}

const kb_goffset_t *kb_gsm_offset(const kb_group_t *g, const char *topic, int32_t partition)
{
    char key[512];
    size_t kl = kb_goff_key(key, sizeof(key), topic, partition);
    return kb_ghash_get(&g->offsets, key, kl);
}

static kb_gtxn_t *kb_goff_txn(kb_group_t *g, int64_t pid, bool create)
{
    kb_gtxn_t *t;
    for (t = g->txns; t; t = t->next)
        if (t->pid == pid)
            return t;
    if (!create || !(t = calloc(1, sizeof(*t))))
        return NULL;
    t->pid = pid;
    kb_ghash_init(&t->offsets);
    t->next = g->txns;
    g->txns = t;
    return t;
}

static void kb_goff_txn_drop(kb_group_t *g, kb_gtxn_t *t)
{
    kb_gtxn_t **pp = &g->txns;
    while (*pp && *pp != t)
        pp = &(*pp)->next;
    if (*pp)
        *pp = t->next;
    kb_goff_free_all(&t->offsets);
    free(t);
}

bool kb_gsm_txn_pending(const kb_group_t *g, const char *topic, int32_t partition)
{
    char key[512];
    size_t kl = kb_goff_key(key, sizeof(key), topic, partition);
    for (kb_gtxn_t *t = g->txns; t; t = t->next)
        if (kb_ghash_get(&t->offsets, key, kl))
            return true;
    return false;
}

/* ---- OffsetCommit / TxnOffsetCommit
 * -------------------------------------------------------------- */

/* Kafka's mapping of append errors for offset commits. */
static int16_t kb_goff_commit_err(int16_t err)
{
    switch (err) {
    case KP_ERR_UNKNOWN_TOPIC_OR_PARTITION:
    case KP_ERR_NOT_ENOUGH_REPLICAS:
    case KP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
    case KP_ERR_REQUEST_TIMED_OUT:
        return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    case KP_ERR_NOT_LEADER_OR_FOLLOWER:
    case KP_ERR_KAFKA_STORAGE_ERROR:
        return KP_ERR_NOT_COORDINATOR;
    case KP_ERR_MESSAGE_TOO_LARGE:
    case KP_ERR_RECORD_LIST_TOO_LARGE:
    case KP_ERR_INVALID_FETCH_SIZE:
        return KP_ERR_INVALID_COMMIT_OFFSET_SIZE;
    default:
        return err;
    }
}

static kb_gmember_t *kb_goff_member(const kb_group_t *g, const char *id)
{
    for (kb_gmember_t *m = g->members; m; m = m->next)
        if (id && !strcmp(m->id, id))
            return m;
    return NULL;
}

/* Who may commit for the group (Kafka's validateOffsetCommit of a classic group). */
static int16_t kb_goff_validate(kb_gsm_t *gsm, kb_group_t *g, const kb_gcommit_in_t *in, bool txn)
{
    const char *mid = in->member_id ? in->member_id : "";
    kb_gmember_t *m;
    if (g->state == KB_GS_DEAD)
        return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    /* A transactional commit without group information (before KIP-447) is not checked. */
    if (txn && in->generation < 0 && !mid[0] && !in->instance_id)
        return 0;
    /* Simple commit: a group that only stores offsets. */
    if (in->generation < 0 && g->state == KB_GS_EMPTY)
        return 0;
    if (in->generation >= 0 || mid[0] || in->instance_id) {
        if (in->instance_id) {
            kb_gmember_t *s = NULL;
            for (kb_gmember_t *x = g->members; x; x = x->next)
                if (x->instance_id && !strcmp(x->instance_id, in->instance_id))
                    s = x;
            if (!s)
                return KP_ERR_UNKNOWN_MEMBER_ID;
            if (strcmp(s->id, mid))
                return KP_ERR_FENCED_INSTANCE_ID;
        }
        if (!(m = kb_goff_member(g, mid)))
            return KP_ERR_UNKNOWN_MEMBER_ID;
        if (in->generation != g->generation)
            return KP_ERR_ILLEGAL_GENERATION;
    } else if (g->state != KB_GS_EMPTY) {
        /* No member id and no generation: only accepted while the group is empty. */
        return KP_ERR_UNKNOWN_MEMBER_ID;
    } else {
        m = NULL;
    }
    if (!txn && g->state == KB_GS_COMPLETING)
        return KP_ERR_REBALANCE_IN_PROGRESS;
    /* A commit proves the member alive (Stable and PreparingRebalance). */
    if (!txn && m)
        kb_gsm_timer_arm(gsm, &m->hb, kb_gsm_mono(gsm) + m->session_ms);
    return 0;
}

static void kb_goff_do_commit(kb_gsm_t *gsm, kb_gcommit_in_t *in, bool txn, int64_t pid,
                              int16_t pepoch)
{
    kb_group_t *g = in->group_id ? kb_gsm_group(gsm, in->group_id) : NULL;
    bool created = false;
    kb_gbatch_t b;
    int64_t now = kb_gsm_now(gsm), base = -1;
    int16_t err = 0;
    size_t *idx, n = 0;

    if (!in->group_id) {
        err = KP_ERR_INVALID_GROUP_ID;
    } else if (!g) {
        if (in->generation < 0) {
            /* Commits from outside the group protocol create a "simple" group. */
            if (!(g = kb_gsm_group_create(gsm, in->group_id)))
                err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
            created = g != NULL;
        } else {
            /* v9+ learn that the group is gone; older clients expect ILLEGAL_GENERATION. */
            err = !txn && in->version >= 9 ? KP_ERR_GROUP_ID_NOT_FOUND : KP_ERR_ILLEGAL_GENERATION;
        }
    }
    if (!err)
        err = kb_goff_validate(gsm, g, in, txn);
    if (err) {
        for (size_t i = 0; i < in->nparts; i++)
            if (!in->parts[i].err)
                in->parts[i].err = err;
        goto out;
    }
    idx = calloc(in->nparts ? in->nparts : 1, sizeof(*idx));
    if (!idx) {
        for (size_t i = 0; i < in->nparts; i++)
            if (!in->parts[i].err)
                in->parts[i].err = KP_ERR_UNKNOWN_SERVER_ERROR;
        goto out;
    }
    kb_gbatch_init(&b, now, txn ? pid : -1, txn ? pepoch : -1);
    for (size_t i = 0; i < in->nparts; i++) {
        kb_gcommit_part_t *p = &in->parts[i];
        kb_grec_offset_t v;
        if (p->err)
            continue;
        if (p->metadata && strlen(p->metadata) > (size_t)gsm->conf.metadata_max_bytes) {
            p->err = KP_ERR_OFFSET_METADATA_TOO_LARGE;
            continue;
        }
        memset(&v, 0, sizeof(v));
        v.offset = p->offset;
        v.leader_epoch = p->leader_epoch;
        v.metadata = kp_str(p->metadata ? p->metadata : "");
        v.commit_ts = now;
        v.expire_ts = in->retention_ms >= 0 ? now + in->retention_ms : -1;
        v.topic_id = p->topic_id;
        kb_grec_offset_key_write(&b.kw, g->id, p->topic, p->partition);
        kb_grec_offset_value_write(&b.vw, &v);
        kb_gbatch_add(&b, false);
        idx[n++] = i;
    }
    err = kb_gbatch_write(gsm, &b, g->partition, &base);
    for (size_t j = 0; j < n; j++) {
        kb_gcommit_part_t *p = &in->parts[idx[j]];
        kb_grec_offset_t v;
        kb_goffset_t *o;
        kb_ghash_t *h;
        if (err) {
            p->err = kb_goff_commit_err(err);
            continue;
        }
        memset(&v, 0, sizeof(v));
        v.offset = p->offset;
        v.leader_epoch = p->leader_epoch;
        v.metadata = kp_str(p->metadata ? p->metadata : "");
        v.commit_ts = now;
        v.expire_ts = in->retention_ms >= 0 ? now + in->retention_ms : -1;
        v.topic_id = p->topic_id;
        if (txn) {
            kb_gtxn_t *t = kb_goff_txn(g, pid, true);
            h = t ? &t->offsets : NULL;
        } else {
            h = &g->offsets;
        }
        o = h ? kb_goff_new(p->topic, p->partition, &v, base + (int64_t)j) : NULL;
        if (!o || kb_goff_put(h, o) != 0) {
            /* Written but not cached: the next load has it. */
            kb_goff_free(o);
            kb_glog_error("group %s: out of memory caching a committed offset", g->id);
        }
        p->err = 0;
    }
    if (err)
        kb_glog_warn("group %s: offset commit failed: error %d", g->id, err);
    free(idx);
out:
    if (created && kb_gsm_group_is_idle(g))
        kb_gsm_group_destroy(gsm, g);
}

void kb_gsm_commit(kb_gsm_t *gsm, kb_gcommit_in_t *in)
{
    kb_goff_do_commit(gsm, in, false, -1, -1);
}

void kb_gsm_txn_commit(kb_gsm_t *gsm, kb_gcommit_in_t *in, int64_t pid, int16_t pepoch)
{
    kb_goff_do_commit(gsm, in, true, pid, pepoch);
}

/* Apply or drop the pending offsets of @p pid in @p g. A transactional offset only replaces a
 * committed one that was written before it (a later plain commit wins). */
static bool kb_goff_txn_end(kb_group_t *g, int64_t pid, bool commit)
{
    kb_gtxn_t *t = kb_goff_txn(g, pid, false);
    kb_ghash_it_t it = {0};
    kb_goffset_t *o;
    if (!t)
        return false;
    while (commit && (o = kb_ghash_next(&t->offsets, &it, NULL, NULL))) {
        const kb_goffset_t *cur = kb_gsm_offset(g, o->topic, o->partition);
        char key[512];
        size_t kl = kb_goff_key(key, sizeof(key), o->topic, o->partition);
        if (cur && cur->record_offset > o->record_offset)
            continue;
        kb_ghash_del(&t->offsets, key, kl);
        if (kb_goff_put(&g->offsets, o) != 0)
            kb_goff_free(o);
    }
    kb_goff_txn_drop(g, t);
    return true;
}

int kb_gsm_txn_complete(kb_gsm_t *gsm, int32_t partition, int64_t pid, bool commit)
{
    kb_ghash_it_t it = {0};
    kb_group_t *g;
    int n = 0;
    while ((g = kb_ghash_next(&gsm->groups, &it, NULL, NULL)))
        if (g->partition == partition && kb_goff_txn_end(g, pid, commit))
            n++;
    return n;
}

int16_t kb_gsm_txn_marker(kb_gsm_t *gsm, int32_t partition, int64_t pid, int16_t pepoch,
                          int32_t coord_epoch, bool commit)
{
    int64_t off = -1;
    int16_t err;
    if (!gsm->ops.append_marker)
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    err = gsm->ops.append_marker(gsm->opaque, partition, pid, pepoch, coord_epoch, commit, &off);
    if (err)
        return err;
    kb_gsm_txn_complete(gsm, partition, pid, commit);
    return 0;
}

/* ---- DeleteGroups, deleted topics, expiry
 * -------------------------------------------------------- */

/* Tombstones for every offset of @p g (and the group record when @p group_too). */
static int16_t kb_goff_tombstones(kb_gsm_t *gsm, kb_group_t *g, bool group_too)
{
    kb_ghash_it_t it = {0};
    kb_goffset_t *o;
    kb_gbatch_t b;
    kb_gbatch_init(&b, kb_gsm_now(gsm), -1, -1);
    while ((o = kb_ghash_next(&g->offsets, &it, NULL, NULL))) {
        kb_grec_offset_key_write(&b.kw, g->id, o->topic, o->partition);
        kb_gbatch_add(&b, true);
    }
    if (group_too) {
        kb_grec_group_key_write(&b.kw, g->id);
        kb_gbatch_add(&b, true);
    }
    return kb_gbatch_write(gsm, &b, g->partition, NULL);
}

int16_t kb_gsm_delete_group(kb_gsm_t *gsm, const char *group_id)
{
    kb_group_t *g = group_id ? kb_gsm_group(gsm, group_id) : NULL;
    int16_t err;
    if (!g || g->state == KB_GS_DEAD)
        return KP_ERR_GROUP_ID_NOT_FOUND;
    if (g->state != KB_GS_EMPTY || g->nmembers)
        return KP_ERR_NON_EMPTY_GROUP;
    if ((err = kb_goff_tombstones(gsm, g, true)))
        return kb_gsm_store_err(err);
    kb_glog_info("group %s deleted (%zu committed offset(s))", g->id, kb_ghash_count(&g->offsets));
    kb_gsm_transition(gsm, g, KB_GS_DEAD);
    kb_gsm_group_destroy(gsm, g);
    return 0;
}

/* Remove the offsets @p pick selects, with tombstones; returns how many. */
static int kb_goff_remove_where(kb_gsm_t *gsm, kb_group_t *g,
                                bool (*pick)(const kb_group_t *g, const kb_goffset_t *o,
                                             const void *arg),
                                const void *arg)
{
    kb_ghash_it_t it = {0};
    kb_goffset_t *o;
    kb_gbatch_t b;
    int n = 0;
    int16_t err;
    kb_gbatch_init(&b, kb_gsm_now(gsm), -1, -1);
    while ((o = kb_ghash_next(&g->offsets, &it, NULL, NULL))) {
        if (!pick(g, o, arg))
            continue;
        kb_grec_offset_key_write(&b.kw, g->id, o->topic, o->partition);
        kb_gbatch_add(&b, true);
        n++;
    }
    if (!n) {
        kb_gbatch_free(&b);
        return 0;
    }
    if ((err = kb_gbatch_write(gsm, &b, g->partition, NULL))) {
        kb_glog_warn("group %s: cannot write offset tombstones: error %d", g->id, err);
        return 0;
    }
    memset(&it, 0, sizeof(it));
    while ((o = kb_ghash_next(&g->offsets, &it, NULL, NULL)))
        if (pick(g, o, arg))
            kb_goff_remove(&g->offsets, o->topic, o->partition);
    return n;
}

static bool kb_goff_pick_topic(const kb_group_t *g, const kb_goffset_t *o, const void *arg)
{
    (void)g;
    return !strcmp(o->topic, arg);
}

void kb_gsm_topic_deleted(kb_gsm_t *gsm, const char *topic)
{
    kb_ghash_it_t it = {0};
    kb_group_t *g;
    while ((g = kb_ghash_next(&gsm->groups, &it, NULL, NULL))) {
        int n = kb_goff_remove_where(gsm, g, kb_goff_pick_topic, topic);
        if (n)
            kb_glog_info("group %s: removed %d offset(s) of deleted topic %s", g->id, n, topic);
    }
}

/* Topics the members of a Stable "consumer" group subscribe to (KIP-496), from the consumer
 * protocol's subscription (version int16, topics array of strings, ...). false when any member's
 * subscription cannot be read (then nothing of the group expires). */
static bool kb_goff_subscribed(const kb_group_t *g, kb_ghash_t *topics)
{
    for (kb_gmember_t *m = g->members; m; m = m->next) {
        const uint8_t *meta = NULL;
        int32_t len = 0;
        kp_reader_t rd;
        int32_t n;
        for (size_t i = 0; g->protocol_name && i < m->nprotos; i++) {
            if (!strcmp(m->protos[i].name, g->protocol_name)) {
                meta = m->protos[i].meta;
                len = m->protos[i].meta_len;
            }
        }
        if (!meta)
            return false;
        kp_reader_init(&rd, meta, (size_t)len);
        if (kp_read_int16(&rd) < 0)
            return false;
        n = kp_read_array_len(&rd, 0, 0, 2);
        for (int32_t i = 0; i < n && !rd.err; i++) {
            kp_str_t t = kp_read_string(&rd, 0, 0);
            if (!rd.err && kb_ghash_put(topics, t.ptr, (size_t)t.len, (void *)1) != 0)
                return false;
        }
        if (rd.err)
            return false;
    }
    return true;
}

static bool kb_goff_is_consumer(const kb_group_t *g)
{
    return g->protocol_type && !strcmp(g->protocol_type, "consumer");
}

typedef struct kb_goff_exp_s {
    int64_t now;
    int64_t retention;
    int mode; /* 1 empty consumer group, 2 stable consumer group, 3 simple group */
    kb_ghash_t *subscribed;
} kb_goff_exp_t;

static bool kb_goff_pick_expired(const kb_group_t *g, const kb_goffset_t *o, const void *arg)
{
    const kb_goff_exp_t *x = arg;
    int64_t base;
    if (kb_gsm_txn_pending(g, o->topic, o->partition))
        return false;
    if (x->mode == 2 && kb_ghash_get(x->subscribed, o->topic, strlen(o->topic)))
        return false;
    if (o->expire_ts >= 0)
        return x->now >= o->expire_ts; /* a retention time given with the commit (v2-v4) */
    base = x->mode == 1 && g->state_ts >= 0 ? g->state_ts : o->commit_ts;
    return x->now - base >= x->retention;
}

int kb_gsm_expire_offsets(kb_gsm_t *gsm)
{
    kb_ghash_it_t it = {0};
    kb_group_t *g;
    int total = 0;
    while ((g = kb_ghash_next(&gsm->groups, &it, NULL, NULL))) {
        kb_goff_exp_t x = {.now = kb_gsm_now(gsm), .retention = gsm->conf.retention_ms};
        kb_ghash_t sub;
        int n = 0;
        kb_ghash_init(&sub);
        x.subscribed = &sub;
        /* Empty groups with a protocol: from the time they became empty. Stable consumer
         * groups: offsets of topics nobody subscribes to, from their commit. Groups without a
         * protocol (offset storage only): from each commit. */
        if (g->protocol_type && g->state == KB_GS_EMPTY)
            x.mode = 1;
        else if (kb_goff_is_consumer(g) && g->state == KB_GS_STABLE && kb_goff_subscribed(g, &sub))
            x.mode = 2;
        else if (!g->protocol_type)
            x.mode = 3;
        if (x.mode)
            n = kb_goff_remove_where(gsm, g, kb_goff_pick_expired, &x);
        kb_ghash_free(&sub);
        if (n)
            kb_glog_info("group %s: removed %d expired offset(s)", g->id, n);
        total += n;
        if (g->state == KB_GS_EMPTY && kb_gsm_group_is_idle(g)) {
            /* Nothing left: the group goes, with a tombstone for its metadata. */
            int16_t err = kb_goff_tombstones(gsm, g, true);
            if (err) {
                kb_glog_warn("group %s: cannot write its tombstone: error %d", g->id, err);
                continue;
            }
            kb_glog_info("group %s is empty and has no offsets: removed", g->id);
            kb_gsm_transition(gsm, g, KB_GS_DEAD);
            kb_gsm_group_destroy(gsm, g);
        }
    }
    return total;
}

void kb_goff_expiry_fire(kb_gsm_t *gsm)
{
    kb_gsm_expire_offsets(gsm);
    kb_gsm_timer_arm(gsm, &gsm->expiry_timer, kb_gsm_mono(gsm) + gsm->conf.retention_check_ms);
}

/* ---- loading ----------------------------------------------------------------------------------
 */

static char *kb_goff_cstr(kp_str_t s)
{
    char *p;
    if (s.len < 0)
        return NULL;
    if (!(p = malloc((size_t)s.len + 1)))
        return NULL;
    memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = '\0';
    return p;
}

static kb_group_t *kb_goff_load_group(kb_gsm_t *gsm, kp_str_t id)
{
    char *cid = kb_goff_cstr(id);
    kb_group_t *g;
    if (!cid)
        return NULL;
    g = kb_gsm_group(gsm, cid);
    if (!g)
        g = kb_gsm_group_create(gsm, cid);
    free(cid);
    return g;
}

static void kb_goff_load_offset(kb_gsm_t *gsm, const kb_grec_key_t *k, const kp_record_t *r,
                                const kp_batch_hdr_t *h)
{
    bool txn = kp_batch_hdr_is_transactional(h) && h->producerId >= 0;
    kb_grec_offset_t v;
    kb_group_t *g;
    kb_goffset_t *o;
    char *topic;
    if (r->value.len < 0) {
        char *gid = kb_goff_cstr(k->group), *t = kb_goff_cstr(k->topic);
        if (gid && t && (g = kb_gsm_group(gsm, gid)))
            kb_goff_remove(&g->offsets, t, k->partition);
        free(gid);
        free(t);
        return;
    }
    if (kb_grec_offset_value_decode(r->value.ptr, (size_t)r->value.len, &v) != 0) {
        gsm->records_skipped++;
        return;
    }
    if (!(g = kb_goff_load_group(gsm, k->group)) || !(topic = kb_goff_cstr(k->topic)))
        return;
    o = kb_goff_new(topic, k->partition, &v, r->offset);
    free(topic);
    if (!o)
        return;
    if (txn) {
        kb_gtxn_t *t = kb_goff_txn(g, h->producerId, true);
        if (!t || kb_goff_put(&t->offsets, o) != 0)
            kb_goff_free(o);
    } else if (kb_goff_put(&g->offsets, o) != 0) {
        kb_goff_free(o);
    }
}

static void kb_goff_load_group_record(kb_gsm_t *gsm, const kb_grec_key_t *k, const kp_record_t *r)
{
    kb_grec_group_t v;
    kb_group_t *g = kb_goff_load_group(gsm, k->group);
    if (!g)
        return;
    kb_gsm_group_clear_members(gsm, g);
    free(g->protocol_name);
    g->protocol_name = NULL;
    if (r->value.len < 0) {
        /* Tombstone: the group is gone (its offsets have their own tombstones). */
        free(g->protocol_type);
        g->protocol_type = NULL;
        g->generation = 0;
        g->state = KB_GS_EMPTY;
        if (kb_gsm_group_is_idle(g))
            kb_gsm_group_destroy(gsm, g);
        return;
    }
    if (kb_grec_group_value_decode(r->value.ptr, (size_t)r->value.len, &v) != 0) {
        free(v.members);
        gsm->records_skipped++;
        return;
    }
    free(g->protocol_type);
    g->protocol_type = v.protocol_type.len > 0 ? kb_goff_cstr(v.protocol_type) : NULL;
    g->protocol_name = kb_goff_cstr(v.protocol);
    g->generation = v.generation;
    for (int32_t i = 0; i < v.member_cnt; i++) {
        const kb_grec_member_t *mv = &v.members[i];
        char *id = kb_goff_cstr(mv->member_id), *inst = kb_goff_cstr(mv->instance_id);
        char *cid = kb_goff_cstr(mv->client_id), *host = kb_goff_cstr(mv->client_host);
        if (id && cid && host)
            kb_gsm_member_load(gsm, g, id, inst, cid, host, mv->session_timeout,
                               mv->rebalance_timeout, g->protocol_name, mv->subscription.ptr,
                               mv->subscription.len, mv->assignment.ptr, mv->assignment.len);
        free(id);
        free(inst);
        free(cid);
        free(host);
    }
    free(g->leader);
    g->leader = kb_goff_cstr(v.leader);
    g->state = g->nmembers ? KB_GS_STABLE : KB_GS_EMPTY;
    g->state_ts = v.state_ts >= 0 ? v.state_ts : kb_gsm_now(gsm);
    free(v.members);
}

int kb_gsm_load(kb_gsm_t *gsm, int32_t partition, const uint8_t *buf, size_t len,
                int64_t *next_offset)
{
    kp_batch_iter_t it;
    kp_batch_t b;
    kp_writer_t scratch;
    int r;
    kp_writer_init(&scratch);
    kp_batch_iter_init(&it, buf, len, 0, 0);
    while ((r = kp_batch_iter_next(&it, &b)) == 1) {
        kp_record_iter_t ri;
        kp_record_t rec;
        int rr;
        *next_offset = kp_batch_hdr_last_offset(&b.hdr) + 1;
        if (kp_batch_hdr_is_control(&b.hdr)) {
            int16_t type;
            if (kp_batch_control_type(&b, &type) == 0 &&
                (type == KP_CONTROL_TYPE_COMMIT || type == KP_CONTROL_TYPE_ABORT))
                kb_gsm_txn_complete(gsm, partition, b.hdr.producerId,
                                    type == KP_CONTROL_TYPE_COMMIT);
            continue;
        }
        kp_writer_reset(&scratch);
        if (kp_record_iter_init(&ri, &b, &scratch, 64u << 20) != 0) {
            kb_glog_warn("__consumer_offsets-%d: cannot read the batch at offset %lld", partition,
                         (long long)b.hdr.baseOffset);
            continue;
        }
        while ((rr = kp_record_iter_next(&ri, &rec)) == 1) {
            kb_grec_key_t k;
            if (rec.key.len < 0 || kb_grec_key_decode(rec.key.ptr, (size_t)rec.key.len, &k)) {
                gsm->records_skipped++;
                continue;
            }
            if (k.type == KB_GREC_KEY_OFFSET) {
                kb_goff_load_offset(gsm, &k, &rec, &b.hdr);
                gsm->records_loaded++;
            } else if (k.type == KB_GREC_KEY_GROUP) {
                kb_goff_load_group_record(gsm, &k, &rec);
                gsm->records_loaded++;
            } else {
                gsm->records_skipped++;
            }
        }
    }
    kp_writer_free(&scratch);
    return r < 0 ? -1 : 0;
}

void kb_gsm_load_done(kb_gsm_t *gsm)
{
    kb_ghash_it_t it = {0};
    kb_group_t *g;
    int64_t now = kb_gsm_mono(gsm);
    while ((g = kb_ghash_next(&gsm->groups, &it, NULL, NULL))) {
        for (kb_gmember_t *m = g->members; m; m = m->next)
            kb_gsm_timer_arm(gsm, &m->hb, now + m->session_ms);
        if (g->partition != kb_gsm_partition_for(gsm, g->id))
            g->partition = kb_gsm_partition_for(gsm, g->id);
    }
    kb_gsm_timer_arm(gsm, &gsm->expiry_timer, now + gsm->conf.retention_check_ms);
}

void kb_gsm_partition_loaded(kb_gsm_t *gsm, int32_t partition)
{
    kb_ghash_it_t it = {0};
    kb_group_t *g;
    int64_t now = kb_gsm_mono(gsm);
    while ((g = kb_ghash_next(&gsm->groups, &it, NULL, NULL))) {
        if (g->partition != partition)
            continue;
        for (kb_gmember_t *m = g->members; m; m = m->next)
            kb_gsm_timer_arm(gsm, &m->hb, now + m->session_ms);
    }
    if (!gsm->expiry_timer.idx)
        kb_gsm_timer_arm(gsm, &gsm->expiry_timer, now + gsm->conf.retention_check_ms);
}
