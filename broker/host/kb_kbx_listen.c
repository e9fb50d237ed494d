/*
 * kb_kbx_listen.c -- kbx metadata and leadership listeners on the metadata layer's listeners
 * (broker/api kb_meta_listen), delivered on the host thread "kb-kbx-event".
 *
 * The metadata layer calls its listeners synchronously inside each change, with its change
 * mutex held, on whatever thread made the change. Plugin callbacks must not run there (a plugin
 * calling leader_epoch_bump from its callback would deadlock on that mutex), so each kbx
 * listener has its own kb_meta listener that only copies the event into the event queue; the
 * event thread then builds the kbx delta and calls the plugin with no broker lock held. Callbacks
 * therefore only ever run on "kb-kbx-event", one at a time, in change order; they must still
 * only enqueue (kbx.h), because every listener and every asynchronous completion shares that
 * thread.
 *
 * Snapshot: registration first queues a placeholder, then asks kb_meta for its snapshot (which
 * it delivers synchronously into the placeholder, before linking the listener), then marks the
 * placeholder ready. Changes made meanwhile queue behind the placeholder, so the plugin always
 * sees the snapshot first and no change twice or never. Plugin records (controller_write) are
 * metadata records (KbrokerPluginRecord): kb_meta delivers them like any change, the live keys
 * in the snapshot.
 *
 * Brokers: a snapshot lists every registration of the image (kb_meta_brokers; a node with none
 * lists itself), a KB_META_EV_BROKER change the brokers that differ from the listener's last
 * list (registered / fenced / unregistered), read from the image at delivery time.
 *
 * Grouping: the events of one metadata change (same kb_meta offset) become one delta.
 * metadata_offset is a per-process sequence of delivered deltas (kbroker keeps no metadata log).
 *
 * Leadership: the roles come from the image (kb_meta_part_state), only for partitions this node
 * is a replica of: ROLE_LEADER when the image names this node as leader, else ROLE_FOLLOWER with
 * the actual leader_id (-1 while the partition has none), and the image's leader and partition
 * epochs. The listener keeps the role it last reported per partition: a new topic (or one in the
 * snapshot) and added partitions report the local replicas; a leader-epoch event reports the
 * partition again when this node holds a replica; a replicas/ISR event (KB_META_EV_REPLICAS)
 * reports only when this node joined (role) or left (ROLE_REMOVED) the replica set; a deleted
 * topic gives ROLE_REMOVED for each partition reported before. On a single broker every
 * partition is local and led here, so every report is ROLE_LEADER. Metadata listeners never see
 * EPOCH or REPLICAS events (they carry nothing a kbx metadata delta describes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_host_int.h"

#define KB_LS_MD   1
#define KB_LS_LEAD 2

#define KB_LEV_SNAPSHOT 1
#define KB_LEV_META     2

typedef struct kb_lev_s kb_lev_t;

struct kb_lev_s {
    kb_hev_t ev;
    int kind;
    /* KB_LEV_META: one copied kb_meta event */
    int type;
    uint32_t flags;
    int64_t offset;
    bool has_topic;
    kb_topic_info_t topic;
    int32_t partition;
    int32_t leader_epoch;
    int8_t rtype;
    char *rname, *key, *value;
    /* KB_LEV_SNAPSHOT: the snapshot's events (KB_LEV_META, through sub_next) */
    kb_lev_t *sub_head, *sub_tail, *sub_next;
    kb_hrec_t *recs; /**< KB_META_EV_PLUGIN: the record (one) */
    size_t nrec;
};

typedef struct kb_ltopic_s {
    kp_uuid_t id;
    char *name;
    int32_t partitions;
    uint8_t *role; /**< per partition: the role last reported, 0 = not a local replica */
} kb_ltopic_t;

struct kbx_listener {
    uint32_t magic;
    int kind;
    kbx_host_t *host;
    kbx_metadata_ops_t mops;
    kbx_leadership_ops_t lops;
    void *plugin_ctx;
    kb_meta_listener_t *kl;
    kb_lev_t *snap;                /**< placeholder filled during kb_meta_listen */
    struct kbx_listener *all_next; /**< kb_host_t.listeners (under kb_host_t.mu) */
    bool unreg_in_callback;        /**< unregistered from its own callback: freed after it */
    kb_ltopic_t *topics;           /**< leadership: topics known, for removals */
    size_t ntopics, cap_topics;
    kb_meta_broker_t *brokers; /**< metadata: the registrations last delivered (by id) */
    size_t nbrokers;
};

/* ---- items ----------------------------------------------------------------------------------- */

static void kb_lev_free(kb_lev_t *e)
{
    while (e) {
        kb_lev_t *sub = e->sub_head, *next = e->sub_next;
        free(e->rname);
        free(e->key);
        free(e->value);
        kb_hrec_free_array(e->recs, e->nrec);
        e->sub_head = NULL;
        free(e);
        kb_lev_free(sub);
        e = next;
    }
}

static void kb_lev_run(kb_hq_t *q, kb_hev_t *ev, bool run);

static kb_lev_t *kb_lev_new(struct kbx_listener *l, int kind)
{
    kb_lev_t *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->ev.fn = kb_lev_run;
    e->ev.owner = l->host;
    e->ev.listener = l;
    atomic_init(&e->ev.ready, true);
    e->kind = kind;
    return e;
}

static int kb_hrec_copy(const kb_hrec_t *src, size_t n, kb_hrec_t **out)
{
    kb_hrec_t *v;
    *out = NULL;
    if (!n)
        return 0;
    v = calloc(n, sizeof(*v));
    if (!v)
        return -1;
    for (size_t i = 0; i < n; i++) {
        v[i].type = src[i].type;
        v[i].key_len = src[i].key_len;
        v[i].value_len = src[i].value_len;
        v[i].key = malloc(src[i].key_len ? src[i].key_len : 1);
        if (v[i].key && src[i].key_len)
            memcpy(v[i].key, src[i].key, src[i].key_len);
        if (src[i].value) {
            v[i].value = malloc(src[i].value_len ? src[i].value_len : 1);
            if (v[i].value && src[i].value_len)
                memcpy(v[i].value, src[i].value, src[i].value_len);
        }
        if (!v[i].key || (src[i].value && !v[i].value)) {
            kb_hrec_free_array(v, i + 1);
            return -1;
        }
    }
    *out = v;
    return 0;
}

/* kb_meta listener: copy and queue. Runs inside the metadata change (change mutex held). */
static void kb_lev_meta_cb(void *opaque, const kb_meta_event_t *mev)
{
    struct kbx_listener *l = opaque;
    kb_lev_t *e;

    if (l->kind == KB_LS_LEAD &&
        (mev->type == KB_META_EV_CONFIG || mev->type == KB_META_EV_PLUGIN ||
         mev->type == KB_META_EV_ACL || mev->type == KB_META_EV_BROKER))
        return;
    if (mev->type == KB_META_EV_ACL)
        return; /* nothing in a kbx delta describes ACLs */
    if (l->kind == KB_LS_MD && (mev->type == KB_META_EV_EPOCH || mev->type == KB_META_EV_REPLICAS))
        return;
    e = kb_lev_new(l, KB_LEV_META);
    if (!e)
        goto nomem;
    e->type = mev->type;
    e->flags = mev->flags;
    e->offset = mev->offset;
    if (mev->topic) {
        e->has_topic = true;
        e->topic = *mev->topic;
    }
    e->partition = mev->partition;
    e->leader_epoch = mev->leader_epoch;
    e->rtype = mev->resource_type;
    if (mev->type == KB_META_EV_PLUGIN) {
        const kb_mrec_t *r = mev->acl;
        kb_hrec_t one = {.type = r ? r->plugin_type : 0,
                         .key = r ? r->pkey : NULL,
                         .key_len = r ? r->pkey_len : 0,
                         .value = r && r->has_pvalue ? r->pvalue : NULL,
                         .value_len = r && r->has_pvalue ? r->pvalue_len : 0};
        if (!r || kb_hrec_copy(&one, 1, &e->recs) != 0) {
            kb_lev_free(e);
            goto nomem;
        }
        e->nrec = 1;
    }
    if ((mev->resource_name && !(e->rname = strdup(mev->resource_name))) ||
        (mev->key && !(e->key = strdup(mev->key))) ||
        (mev->value && !(e->value = strdup(mev->value)))) {
        kb_lev_free(e);
        goto nomem;
    }
    if (mev->snapshot && l->snap) {
        if (l->snap->sub_tail)
            l->snap->sub_tail->sub_next = e;
        else
            l->snap->sub_head = e;
        l->snap->sub_tail = e;
        return;
    }
    kb_hq_push(&l->host->h->ev, &e->ev);
    return;
nomem:
    kb_hlog(KB_HLOG_ERROR, "plugin %s: out of memory: a metadata change was not delivered",
            l->host->name);
}

/* ---- delivery -------------------------------------------------------------------------------- */

static bool kb_lev_same_change(const kb_hev_t *a, const kb_hev_t *b)
{
    const kb_lev_t *x = (const kb_lev_t *)a, *y = (const kb_lev_t *)b;
    return x->kind == KB_LEV_META && y->kind == KB_LEV_META && x->offset == y->offset;
}

/* Growable arrays of change structs and of pointers to them. */
typedef struct kb_dbuf_s {
    void *v;
    const void **p;
    size_t n, cap, elem;
    bool nomem;
} kb_dbuf_t;

static void *kb_dbuf_add(kb_dbuf_t *b)
{
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 16;
        void *nv = realloc(b->v, nc * b->elem);
        if (!nv) {
            b->nomem = true;
            return NULL;
        }
        b->v = nv;
        b->cap = nc;
    }
    memset((char *)b->v + b->n * b->elem, 0, b->elem);
    return (char *)b->v + b->n++ * b->elem;
}

/* Pointers are taken at the end: the array may move while it grows. */
static const void *const *kb_dbuf_ptrs(kb_dbuf_t *b)
{
    if (!b->n)
        return NULL;
    b->p = calloc(b->n, sizeof(*b->p));
    if (!b->p) {
        b->nomem = true;
        return NULL;
    }
    for (size_t i = 0; i < b->n; i++)
        b->p[i] = (const char *)b->v + i * b->elem;
    return b->p;
}

static void kb_dbuf_free(kb_dbuf_t *b)
{
    free(b->v);
    free(b->p);
}

static void kb_md_add_records(kb_dbuf_t *recs, const kb_hrec_t *v, size_t n);

static void kb_md_add_event(kb_dbuf_t *topics, kb_dbuf_t *configs, kb_dbuf_t *recs,
                            const kb_lev_t *e)
{
    if (e->type == KB_META_EV_TOPIC && e->has_topic) {
        kbx_topic_change_t *t = kb_dbuf_add(topics);
        if (!t)
            return;
        t->struct_size = sizeof(*t);
        t->flags = e->flags;
        memcpy(t->topic_id.bytes, e->topic.id.b, 16);
        t->name = e->topic.name;
        t->partition_count = e->topic.partitions;
    } else if (e->type == KB_META_EV_CONFIG) {
        kbx_config_change_t *c = kb_dbuf_add(configs);
        if (!c)
            return;
        c->struct_size = sizeof(*c);
        c->resource_type = e->rtype;
        c->resource_name = e->rname ? e->rname : "";
        c->key = e->key ? e->key : "";
        c->value = e->value;
    } else if (e->type == KB_META_EV_PLUGIN) {
        kb_md_add_records(recs, e->recs, e->nrec);
    }
}

static void kb_md_add_records(kb_dbuf_t *recs, const kb_hrec_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        kbx_record_t *r = kb_dbuf_add(recs);
        if (!r)
            return;
        r->struct_size = sizeof(*r);
        r->record_type = v[i].type;
        r->key = v[i].key;
        r->key_len = v[i].key_len;
        r->value = v[i].value;
        r->value_len = v[i].value_len;
    }
}

static const kb_meta_broker_t *kb_md_broker_find(const kb_meta_broker_t *v, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].id == id)
            return &v[i];
    return NULL;
}

static void kb_md_broker_add(kb_dbuf_t *brokers, const kb_meta_broker_t *b, uint32_t flags)
{
    kbx_broker_change_t *c = kb_dbuf_add(brokers);
    if (!c)
        return;
    c->struct_size = sizeof(*c);
    c->broker_id = b->id;
    c->flags = flags;
    c->rack = b->has_rack ? b->rack : NULL;
}

/* The registered brokers of the image against those this listener was given last (all of them
 * for a snapshot): new, re-registered or fenced/unfenced ones as REGISTERED or FENCED, gone ones
 * as UNREGISTERED. A node whose image has no registrations (a single node without broker/ctrl)
 * is a cluster of itself. The new list is kept in @p l; the previous one is returned in *@p old
 * (freed by the caller after the delivery: UNREGISTERED changes point into it). */
static void kb_md_brokers(struct kbx_listener *l, kb_dbuf_t *brokers, bool snapshot,
                          kb_meta_broker_t **old)
{
    kb_meta_t *meta = l->host->h->meta;
    kb_meta_broker_t *cur;
    size_t n;

    *old = NULL;
    if (kb_meta_brokers(meta, &cur, &n) != 0) {
        brokers->nomem = true;
        return;
    }
    if (!n) {
        memset(&cur[0], 0, sizeof(cur[0])); /* kb_meta_brokers allocates one more */
        cur[0].id = kb_meta_node_id(meta);
        n = 1;
    }
    for (size_t i = 0; i < n; i++) {
        const kb_meta_broker_t *was =
            snapshot ? NULL : kb_md_broker_find(l->brokers, l->nbrokers, cur[i].id);
        if (!was || was->fenced != cur[i].fenced || was->epoch != cur[i].epoch ||
            was->has_rack != cur[i].has_rack || strcmp(was->rack, cur[i].rack) != 0)
            kb_md_broker_add(brokers, &cur[i],
                             cur[i].fenced ? KBX_BROKER_FENCED : KBX_BROKER_REGISTERED);
    }
    for (size_t i = 0; !snapshot && i < l->nbrokers; i++)
        if (!kb_md_broker_find(cur, n, l->brokers[i].id))
            kb_md_broker_add(brokers, &l->brokers[i], KBX_BROKER_UNREGISTERED);
    *old = l->brokers;
    l->brokers = cur;
    l->nbrokers = n;
}

static void kb_md_deliver(struct kbx_listener *l, kb_lev_t *first, kb_lev_t *rest)
{
    kb_host_t *h = l->host->h;
    kb_dbuf_t topics = {.elem = sizeof(kbx_topic_change_t)};
    kb_dbuf_t configs = {.elem = sizeof(kbx_config_change_t)};
    kb_dbuf_t brokers = {.elem = sizeof(kbx_broker_change_t)};
    kb_dbuf_t recs = {.elem = sizeof(kbx_record_t)};
    kbx_metadata_delta_t d;
    kb_meta_broker_t *old_brokers = NULL;

    memset(&d, 0, sizeof(d));
    d.struct_size = sizeof(d);
    if (first->kind == KB_LEV_SNAPSHOT) {
        d.flags = KBX_DELTA_SNAPSHOT;
        for (kb_lev_t *e = first->sub_head; e; e = e->sub_next)
            kb_md_add_event(&topics, &configs, &recs, e);
        kb_md_brokers(l, &brokers, true, &old_brokers);
    } else {
        bool brk = first->type == KB_META_EV_BROKER;
        kb_md_add_event(&topics, &configs, &recs, first);
        for (kb_lev_t *e = rest; e; e = (kb_lev_t *)e->ev.next) {
            kb_md_add_event(&topics, &configs, &recs, e);
            brk = brk || e->type == KB_META_EV_BROKER;
        }
        if (brk)
            kb_md_brokers(l, &brokers, false, &old_brokers);
    }
    d.topics = (const kbx_topic_change_t *const *)kb_dbuf_ptrs(&topics);
    d.configs = (const kbx_config_change_t *const *)kb_dbuf_ptrs(&configs);
    d.brokers = (const kbx_broker_change_t *const *)kb_dbuf_ptrs(&brokers);
    d.records = (const kbx_record_t *const *)kb_dbuf_ptrs(&recs);
    d.topic_count = (uint32_t)topics.n;
    d.config_count = (uint32_t)configs.n;
    d.broker_count = (uint32_t)brokers.n;
    d.record_count = (uint32_t)recs.n;
    if (topics.nomem || configs.nomem || brokers.nomem || recs.nomem) {
        kb_hlog(KB_HLOG_ERROR, "plugin %s: out of memory: a metadata delta was not delivered",
                l->host->name);
    } else if (d.flags || d.topic_count || d.config_count || d.broker_count || d.record_count) {
        d.metadata_offset = atomic_fetch_add(&h->md_seq, 1) + 1;
        l->mops.on_delta(l->plugin_ctx, &d);
    }
    kb_dbuf_free(&topics);
    kb_dbuf_free(&configs);
    kb_dbuf_free(&brokers);
    kb_dbuf_free(&recs);
    free(old_brokers);
}

static kb_ltopic_t *kb_lead_find(struct kbx_listener *l, const kp_uuid_t *id)
{
    for (size_t i = 0; i < l->ntopics; i++)
        if (!memcmp(l->topics[i].id.b, id->b, 16))
            return &l->topics[i];
    return NULL;
}

static void kb_lead_change(kb_dbuf_t *chg, int32_t role, const kp_uuid_t *id, const char *name,
                           int32_t partition, int32_t leader_id, int32_t epoch, int32_t pepoch)
{
    kbx_leadership_change_t *c = kb_dbuf_add(chg);
    if (!c)
        return;
    c->struct_size = sizeof(*c);
    c->role = role;
    memcpy(c->topic_id.bytes, id->b, 16);
    c->topic_name = name;
    c->partition = partition;
    c->leader_id = leader_id;
    c->leader_epoch = epoch;
    c->partition_epoch = pepoch;
}

/* This node's role in partition @p p of @p t from the image, reported when it differs from the
 * one reported last or (@p always) whenever the node holds a replica. */
static void kb_lead_part(struct kbx_listener *l, kb_dbuf_t *chg, kb_ltopic_t *t, int32_t p,
                         bool always)
{
    kb_meta_t *meta = l->host->h->meta;
    int32_t me = kb_meta_node_id(meta);
    kb_meta_part_state_t st;
    uint8_t role = 0;

    if (p < 0 || p >= t->partitions)
        return;
    if (kb_meta_part_state(meta, &t->id, p, &st) != KB_META_OK)
        return; /* deleted meanwhile: its deletion follows */
    for (int32_t i = 0; i < st.nreplicas && i < KB_META_MAX_REPLICAS; i++)
        if (st.replicas[i] == me)
            role = st.leader == me ? KBX_ROLE_LEADER : KBX_ROLE_FOLLOWER;
    if (!role) {
        if (t->role[p])
            kb_lead_change(chg, KBX_ROLE_REMOVED, &t->id, t->name, p, st.leader, st.leader_epoch,
                           st.partition_epoch);
    } else if (always || role != t->role[p]) {
        kb_lead_change(chg, role, &t->id, t->name, p, st.leader, st.leader_epoch,
                       st.partition_epoch);
    }
    t->role[p] = role;
}

/* Topic event -> leadership changes; keeps the listener's topic table. Names point into the
 * table or the event, both alive until the delivery returns (removed entries are freed then). */
static void kb_lead_add_event(struct kbx_listener *l, kb_dbuf_t *chg, const kb_lev_t *e,
                              char **graveyard, size_t *ngrave)
{
    kb_ltopic_t *t;
    int32_t from = 0;

    if (!e->has_topic)
        return;
    t = kb_lead_find(l, &e->topic.id);
    if (e->type == KB_META_EV_EPOCH || e->type == KB_META_EV_REPLICAS) {
        if (t)
            kb_lead_part(l, chg, t, e->partition, e->type == KB_META_EV_EPOCH);
        return;
    }
    if (e->type != KB_META_EV_TOPIC)
        return;
    if (e->flags & KB_META_TOPIC_DELETED) {
        if (!t)
            return;
        for (int32_t p = 0; p < t->partitions; p++)
            if (t->role[p])
                kb_lead_change(chg, KBX_ROLE_REMOVED, &t->id, t->name, p, -1, -1, -1);
        graveyard[(*ngrave)++] = t->name; /* freed after the callback */
        free(t->role);
        *t = l->topics[--l->ntopics];
        return;
    }
    if (!t) {
        if (l->ntopics == l->cap_topics) {
            size_t nc = l->cap_topics ? l->cap_topics * 2 : 16;
            kb_ltopic_t *nv = realloc(l->topics, nc * sizeof(*nv));
            if (!nv) {
                chg->nomem = true;
                return;
            }
            l->topics = nv;
            l->cap_topics = nc;
        }
        t = &l->topics[l->ntopics];
        t->id = e->topic.id;
        t->partitions = 0;
        t->role = NULL;
        if (!(t->name = strdup(e->topic.name))) {
            chg->nomem = true;
            return;
        }
        l->ntopics++;
    } else {
        from = t->partitions; /* partitions added: only the new ones change */
    }
    if (e->topic.partitions > t->partitions) {
        uint8_t *nr = realloc(t->role, (size_t)e->topic.partitions);
        if (!nr) {
            chg->nomem = true;
            return;
        }
        memset(nr + t->partitions, 0, (size_t)(e->topic.partitions - t->partitions));
        t->role = nr;
        t->partitions = e->topic.partitions;
    }
    for (int32_t p = from; p < t->partitions; p++)
        kb_lead_part(l, chg, t, p, false);
}

static void kb_lead_deliver(struct kbx_listener *l, kb_lev_t *first, kb_lev_t *rest)
{
    kb_dbuf_t chg = {.elem = sizeof(kbx_leadership_change_t)};
    char *grave[64];
    size_t ngrave = 0;
    const kbx_leadership_change_t *const *cp;

    if (first->kind == KB_LEV_SNAPSHOT) {
        for (kb_lev_t *e = first->sub_head; e && ngrave < 64; e = e->sub_next)
            kb_lead_add_event(l, &chg, e, grave, &ngrave);
    } else {
        kb_lead_add_event(l, &chg, first, grave, &ngrave);
        for (kb_lev_t *e = rest; e && ngrave < 64; e = (kb_lev_t *)e->ev.next)
            kb_lead_add_event(l, &chg, e, grave, &ngrave);
    }
    cp = (const kbx_leadership_change_t *const *)kb_dbuf_ptrs(&chg);
    if (chg.nomem)
        kb_hlog(KB_HLOG_ERROR, "plugin %s: out of memory: leadership changes not delivered",
                l->host->name);
    else if (chg.n || first->kind == KB_LEV_SNAPSHOT)
        l->lops.on_change(l->plugin_ctx, cp, (uint32_t)chg.n);
    kb_dbuf_free(&chg);
    for (size_t i = 0; i < ngrave; i++)
        free(grave[i]);
}

static void kb_listener_free(struct kbx_listener *l)
{
    for (size_t i = 0; i < l->ntopics; i++) {
        free(l->topics[i].name);
        free(l->topics[i].role);
    }
    free(l->topics);
    free(l->brokers);
    l->magic = KB_DEAD_MAGIC;
    free(l);
}

static void kb_lev_run(kb_hq_t *q, kb_hev_t *ev, bool run)
{
    kb_lev_t *e = (kb_lev_t *)ev, *rest = NULL;
    struct kbx_listener *l = ev->listener;

    if (!run || atomic_load(&ev->owner->dead)) {
        kb_lev_free(e);
        return;
    }
    /* One metadata change = one delta (at most 64 deleted topics per delta for the
     * leadership bookkeeping; a larger batch is split). */
    if (e->kind == KB_LEV_META)
        rest = (kb_lev_t *)kb_hq_take_run(q, l, kb_lev_same_change, ev);
    kb_hq_set_current(q, l);
    if (l->kind == KB_LS_MD)
        kb_md_deliver(l, e, rest);
    else
        kb_lead_deliver(l, e, rest);
    kb_hq_set_current(q, NULL);
    if (l->unreg_in_callback) {
        kb_listener_free(l);
        /* the rest of its queued items were dropped by listener_unregister */
    }
    while (rest) {
        kb_lev_t *n = (kb_lev_t *)rest->ev.next;
        rest->ev.next = NULL;
        kb_lev_free(rest);
        rest = n;
    }
    kb_lev_free(e);
}

/* ---- registration ---------------------------------------------------------------------------- */

static int32_t kb_kbx_listen(kbx_host_t *host, int kind, const void *ops, void *plugin_ctx,
                             kbx_listener_t **out)
{
    kb_host_t *h;
    struct kbx_listener *l;
    kb_lev_t *snap;

    if (!kb_host_from(host, kind == KB_LS_MD ? "metadata_listen" : "leadership_listen") || !ops ||
        !out)
        return KBX_ERR_INVALID;
    h = host->h;
    l = calloc(1, sizeof(*l));
    if (!l)
        return KBX_ERR_NOMEM;
    l->magic = KB_LISTENER_MAGIC;
    l->kind = kind;
    l->host = host;
    l->plugin_ctx = plugin_ctx;
    if (kind == KB_LS_MD)
        kbx_ops_copy(&l->mops, sizeof(l->mops), ops);
    else
        kbx_ops_copy(&l->lops, sizeof(l->lops), ops);
    if ((kind == KB_LS_MD && !l->mops.on_delta) || (kind == KB_LS_LEAD && !l->lops.on_change)) {
        free(l);
        return KBX_ERR_INVALID;
    }
    snap = kb_lev_new(l, KB_LEV_SNAPSHOT);
    if (!snap) {
        free(l);
        return KBX_ERR_NOMEM;
    }
    /* 1. reserve the snapshot's place in the delivery order */
    atomic_store(&snap->ev.ready, false);
    kb_hq_push(&h->ev, &snap->ev);
    /* 2. the metadata image (plugin records included), delivered synchronously into the
     *    placeholder */
    l->snap = snap;
    l->kl = kb_meta_listen(h->meta, kb_lev_meta_cb, l, true);
    l->snap = NULL;
    if (!l->kl)
        goto nomem;
    kb_hq_set_ready(&h->ev, &snap->ev);
    pthread_mutex_lock(&h->mu);
    l->all_next = h->listeners;
    h->listeners = l;
    pthread_mutex_unlock(&h->mu);
    atomic_fetch_add(&host->n_listeners, 1);
    *out = l;
    return KBX_OK;
nomem:
    kb_hq_forget_listener(&h->ev, l);
    kb_listener_free(l);
    return KBX_ERR_NOMEM;
}

static int32_t kb_kbx_metadata_listen(kbx_host_t *host, const kbx_metadata_ops_t *ops,
                                      void *plugin_ctx, kbx_listener_t **out)
{
    return kb_kbx_listen(host, KB_LS_MD, ops, plugin_ctx, out);
}

static int32_t kb_kbx_leadership_listen(kbx_host_t *host, const kbx_leadership_ops_t *ops,
                                        void *plugin_ctx, kbx_listener_t **out)
{
    return kb_kbx_listen(host, KB_LS_LEAD, ops, plugin_ctx, out);
}

static void kb_kbx_listener_unregister(kbx_host_t *host, kbx_listener_t *l)
{
    kb_host_t *h;
    bool own;

    if (!kb_host_from(host, "listener_unregister") ||
        !kb_host_check(host, l, KB_LISTENER_MAGIC, "listener"))
        return;
    h = host->h;
    pthread_mutex_lock(&h->mu);
    for (struct kbx_listener **pp = &h->listeners; *pp; pp = &(*pp)->all_next) {
        if (*pp == l) {
            *pp = l->all_next;
            break;
        }
    }
    pthread_mutex_unlock(&h->mu);
    kb_meta_unlisten(h->meta, l->kl); /* no new events */
    l->kl = NULL;
    own = kb_hq_on_thread(&h->ev) && h->ev.cur_listener == l;
    if (own) {
        kb_host_misuse(host, "listener_unregister from that listener's own callback");
        l->unreg_in_callback = true;
    }
    /* Drops its queued events and waits until its callback is not running. */
    kb_hq_forget_listener(&h->ev, l);
    atomic_fetch_sub(&host->n_listeners, 1);
    if (!own)
        kb_listener_free(l);
}

void kb_kbx_listen_drop_all(kb_host_t *h, kbx_host_t *host)
{
    for (;;) {
        struct kbx_listener *l;
        pthread_mutex_lock(&h->mu);
        for (l = h->listeners; l && l->host != host; l = l->all_next)
            ;
        pthread_mutex_unlock(&h->mu);
        if (!l)
            return;
        kb_kbx_listener_unregister(host, l);
    }
}

void kb_kbx_listen_fill(kbx_api_t *t)
{
    t->metadata_listen = kb_kbx_metadata_listen;
    t->leadership_listen = kb_kbx_leadership_listen;
    t->listener_unregister = kb_kbx_listener_unregister;
}
