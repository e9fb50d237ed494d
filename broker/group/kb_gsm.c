/*
 * kb_gsm.c -- groups, members and rebalances of the classic group protocol (kb_gsm.h): JoinGroup,
 * SyncGroup, Heartbeat, LeaveGroup, session and rebalance timers, group metadata records.
 * Offsets, transactions, loading and expiry are in kb_goff.c.
 *
 * The rules follow Apache Kafka's classic group coordinator; the comments say why where the
 * behaviour is not obvious.
 */
#include "kb_gsm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "kb_glog.h"
#include "kb_grec.h"
#include "kb_gsm_int.h"
#include "kp_errcode.h"

const char *kb_gsm_state_name(int state)
{
    static const char *const names[] = {"Empty", "PreparingRebalance", "CompletingRebalance",
                                        "Stable", "Dead"};
    return state >= 0 && state <= KB_GS_DEAD ? names[state] : "Unknown";
}

char *kb_gsm_strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

static bool kb_gsm_streq(const char *a, const char *b)
{
    return a && b && !strcmp(a, b);
}

/* ---- timers: a binary min-heap of armed kb_gtimer_t ------------------------------------------ */

static void kb_gsm_heap_swap(kb_gsm_t *gsm, size_t i, size_t j)
{
    kb_gtimer_t *t = gsm->heap[i];
    gsm->heap[i] = gsm->heap[j];
    gsm->heap[j] = t;
    gsm->heap[i]->idx = i + 1;
    gsm->heap[j]->idx = j + 1;
}

static void kb_gsm_heap_up(kb_gsm_t *gsm, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (gsm->heap[p]->deadline <= gsm->heap[i]->deadline)
            break;
        kb_gsm_heap_swap(gsm, i, p);
        i = p;
    }
}

static void kb_gsm_heap_down(kb_gsm_t *gsm, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < gsm->heap_n && gsm->heap[l]->deadline < gsm->heap[m]->deadline)
            m = l;
        if (r < gsm->heap_n && gsm->heap[r]->deadline < gsm->heap[m]->deadline)
            m = r;
        if (m == i)
            return;
        kb_gsm_heap_swap(gsm, i, m);
        i = m;
    }
}

void kb_gsm_timer_arm(kb_gsm_t *gsm, kb_gtimer_t *t, int64_t deadline)
{
    int64_t first = gsm->heap_n ? gsm->heap[0]->deadline : INT64_MAX;
    t->deadline = deadline;
    if (t->idx) {
        kb_gsm_heap_up(gsm, t->idx - 1);
        kb_gsm_heap_down(gsm, t->idx - 1);
    } else {
        if (gsm->heap_n == gsm->heap_cap) {
            size_t cap = gsm->heap_cap ? gsm->heap_cap * 2 : 64;
            kb_gtimer_t **h = realloc(gsm->heap, cap * sizeof(*h));
            if (!h) {
                kb_glog_error("out of memory arming a timer; a session or rebalance timeout "
                              "will not fire");
                return;
            }
            gsm->heap = h;
            gsm->heap_cap = cap;
        }
        gsm->heap[gsm->heap_n] = t;
        t->idx = ++gsm->heap_n;
        kb_gsm_heap_up(gsm, gsm->heap_n - 1);
    }
    if (deadline < first && gsm->ops.timers_changed)
        gsm->ops.timers_changed(gsm->opaque);
}

void kb_gsm_timer_disarm(kb_gsm_t *gsm, kb_gtimer_t *t)
{
    size_t i;
    kb_gtimer_t *last;
    if (!t->idx)
        return;
    i = t->idx - 1;
    t->idx = 0;
    last = gsm->heap[--gsm->heap_n];
    if (i < gsm->heap_n) {
        gsm->heap[i] = last;
        last->idx = i + 1;
        kb_gsm_heap_up(gsm, i);
        kb_gsm_heap_down(gsm, last->idx - 1);
    }
}

int64_t kb_gsm_next_deadline(const kb_gsm_t *gsm)
{
    return gsm->heap_n ? gsm->heap[0]->deadline : INT64_MAX;
}

/* ---- groups ---------------------------------------------------------------------------------- */

int32_t kb_gsm_partition_for(const kb_gsm_t *gsm, const char *group_id)
{
    return kb_grec_partition_for(group_id, strlen(group_id), gsm->conf.partitions);
}

void kb_gsm_set_partitions(kb_gsm_t *gsm, int32_t partitions)
{
    if (partitions > 0)
        gsm->conf.partitions = partitions;
}

int32_t kb_gsm_partitions(const kb_gsm_t *gsm)
{
    return gsm->conf.partitions;
}

kb_group_t *kb_gsm_group(kb_gsm_t *gsm, const char *group_id)
{
    return kb_ghash_get(&gsm->groups, group_id, strlen(group_id));
}

void kb_gsm_foreach_group(kb_gsm_t *gsm, int (*fn)(void *arg, const kb_group_t *g), void *arg)
{
    kb_ghash_it_t it = {0};
    kb_group_t *g;
    while ((g = kb_ghash_next(&gsm->groups, &it, NULL, NULL)))
        if (fn(arg, g))
            return;
}

void kb_gsm_transition(kb_gsm_t *gsm, kb_group_t *g, int state)
{
    if (g->state != state)
        kb_glog_debug("group %s: %s -> %s (generation %d)", g->id, kb_gsm_state_name(g->state),
                      kb_gsm_state_name(state), g->generation);
    g->state = state;
    g->state_ts = kb_gsm_now(gsm);
}

kb_group_t *kb_gsm_group_create(kb_gsm_t *gsm, const char *id)
{
    kb_group_t *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->id = strdup(id);
    if (!g->id || kb_ghash_put(&gsm->groups, id, strlen(id), g) != 0) {
        free(g->id);
        free(g);
        return NULL;
    }
    g->partition = kb_gsm_partition_for(gsm, id);
    g->state = KB_GS_EMPTY;
    g->state_ts = kb_gsm_now(gsm);
    g->join_timer.kind = KB_GT_JOIN;
    g->join_timer.group = g;
    g->sync_timer.kind = KB_GT_SYNC;
    g->sync_timer.group = g;
    kb_ghash_init(&g->offsets);
    return g;
}

static void kb_gsm_join_error(kb_gsm_t *gsm, void *token, int16_t err, const char *member_id)
{
    kb_gjoin_res_t r = {
        .err = err, .generation = -1, .leader = "", .member_id = member_id ? member_id : ""};
    gsm->ops.join_done(gsm->opaque, token, &r);
}

static void kb_gsm_sync_error(kb_gsm_t *gsm, void *token, int16_t err)
{
    kb_gsync_res_t r = {.err = err};
    gsm->ops.sync_done(gsm->opaque, token, &r);
}

static void kb_gsm_protos_free(kb_gproto_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(p[i].name);
        free(p[i].meta);
    }
    free(p);
}

/* Free a member that is already unlinked, answering what it still waits for with @p err. */
static void kb_gsm_member_free(kb_gsm_t *gsm, kb_group_t *g, kb_gmember_t *m, int16_t err)
{
    if (m->join_token) {
        void *t = m->join_token;
        m->join_token = NULL;
        g->nawaiting_join--;
        kb_gsm_join_error(gsm, t, err, m->id);
    }
    if (m->sync_token) {
        void *t = m->sync_token;
        m->sync_token = NULL;
        kb_gsm_sync_error(gsm, t, err);
    }
    kb_gsm_timer_disarm(gsm, &m->hb);
    kb_gsm_protos_free(m->protos, m->nprotos);
    free(m->id);
    free(m->instance_id);
    free(m->client_id);
    free(m->client_host);
    free(m->assignment);
    free(m);
}

static void kb_gsm_set_leader(kb_group_t *g, const char *id)
{
    char *l = kb_gsm_strdup(id);
    free(g->leader);
    g->leader = l;
}

/* Unlink @p m from the group (the leader moves to the first remaining member) and free it. */
static void kb_gsm_member_drop(kb_gsm_t *gsm, kb_group_t *g, kb_gmember_t *m, int16_t err)
{
    kb_gmember_t **pp = &g->members;
    while (*pp && *pp != m)
        pp = &(*pp)->next;
    if (!*pp)
        return;
    *pp = m->next;
    g->nmembers--;
    if (kb_gsm_streq(g->leader, m->id))
        kb_gsm_set_leader(g, g->members ? g->members->id : NULL);
    kb_gsm_member_free(gsm, g, m, err);
}

static void kb_gsm_pending_free(kb_gsm_t *gsm, kb_group_t *g, kb_gpend_t *p)
{
    kb_gpend_t **pp = &g->pending;
    while (*pp && *pp != p)
        pp = &(*pp)->next;
    if (*pp) {
        *pp = p->next;
        g->npending--;
    }
    kb_gsm_timer_disarm(gsm, &p->t);
    free(p->id);
    free(p);
}

void kb_gsm_group_clear_members(kb_gsm_t *gsm, kb_group_t *g)
{
    while (g->members)
        kb_gsm_member_drop(gsm, g, g->members, KP_ERR_UNKNOWN_MEMBER_ID);
    while (g->pending)
        kb_gsm_pending_free(gsm, g, g->pending);
    kb_gsm_set_leader(g, NULL);
}

bool kb_gsm_group_is_idle(const kb_group_t *g)
{
    return !g->nmembers && !g->npending && !kb_ghash_count(&g->offsets) && !g->txns;
}

void kb_gsm_group_destroy(kb_gsm_t *gsm, kb_group_t *g)
{
    kb_gsm_group_clear_members(gsm, g);
    kb_gsm_timer_disarm(gsm, &g->join_timer);
    kb_gsm_timer_disarm(gsm, &g->sync_timer);
    kb_ghash_del(&gsm->groups, g->id, strlen(g->id));
    kb_goff_free_all(&g->offsets);
    kb_goff_txns_free(g);
    free(g->protocol_type);
    free(g->protocol_name);
    free(g->leader);
    free(g->id);
    free(g);
}

/* ---- life cycle ------------------------------------------------------------------------------ */

kb_gsm_t *kb_gsm_new(const kb_gsm_conf_t *conf, const kb_gsm_ops_t *ops, void *opaque)
{
    kb_gsm_t *gsm = calloc(1, sizeof(*gsm));
    if (!gsm)
        return NULL;
    gsm->conf = *conf;
    if (gsm->conf.partitions <= 0)
        gsm->conf.partitions = 1;
    if (gsm->conf.retention_check_ms <= 0)
        gsm->conf.retention_check_ms = KB_GSM_RETENTION_CHECK_MS;
    if (gsm->conf.new_member_join_timeout_ms <= 0)
        gsm->conf.new_member_join_timeout_ms = KB_GSM_NEW_MEMBER_TIMEOUT;
    if (gsm->conf.metadata_max_bytes <= 0)
        gsm->conf.metadata_max_bytes = KB_GSM_METADATA_MAX_BYTES;
    gsm->ops = *ops;
    gsm->opaque = opaque;
    gsm->expiry_timer.kind = KB_GT_EXPIRY;
    kb_ghash_init(&gsm->groups);
    return gsm;
}

void kb_gsm_free(kb_gsm_t *gsm)
{
    kb_ghash_it_t it = {0};
    kb_group_t *g;
    if (!gsm)
        return;
    while ((g = kb_ghash_next(&gsm->groups, &it, NULL, NULL))) {
        while (g->members)
            kb_gsm_member_drop(gsm, g, g->members, KP_ERR_NOT_COORDINATOR);
        kb_gsm_group_destroy(gsm, g);
    }
    kb_ghash_free(&gsm->groups);
    free(gsm->heap);
    free(gsm);
}

void kb_gsm_unload_partition(kb_gsm_t *gsm, int32_t partition)
{
    kb_ghash_it_t it = {0};
    kb_group_t *g;
    while ((g = kb_ghash_next(&gsm->groups, &it, NULL, NULL))) {
        if (g->partition != partition)
            continue;
        while (g->members)
            kb_gsm_member_drop(gsm, g, g->members, KP_ERR_NOT_COORDINATOR);
        kb_gsm_group_destroy(gsm, g);
    }
}

void kb_gsm_stats(const kb_gsm_t *gsm, kb_gsm_stats_t *st)
{
    kb_ghash_it_t it = {0};
    kb_group_t *g;
    memset(st, 0, sizeof(*st));
    st->groups = kb_ghash_count(&gsm->groups);
    while ((g = kb_ghash_next(&gsm->groups, &it, NULL, NULL))) {
        st->offsets += kb_ghash_count(&g->offsets);
        st->members += g->nmembers;
        if (g->state >= 0 && g->state <= KB_GS_DEAD)
            st->by_state[g->state]++;
    }
    st->rebalances = gsm->rebalances;
    st->records_loaded = gsm->records_loaded;
    st->records_skipped = gsm->records_skipped;
}

/* ---- members --------------------------------------------------------------------------------- */

static kb_gmember_t *kb_gsm_member_find(const kb_group_t *g, const char *id)
{
    for (kb_gmember_t *m = g->members; m; m = m->next)
        if (!strcmp(m->id, id))
            return m;
    return NULL;
}

static kb_gmember_t *kb_gsm_member_by_instance(const kb_group_t *g, const char *instance_id)
{
    for (kb_gmember_t *m = g->members; m; m = m->next)
        if (kb_gsm_streq(m->instance_id, instance_id))
            return m;
    return NULL;
}

static kb_gpend_t *kb_gsm_pending_find(const kb_group_t *g, const char *id)
{
    for (kb_gpend_t *p = g->pending; p; p = p->next)
        if (!strcmp(p->id, id))
            return p;
    return NULL;
}

static bool kb_gsm_is_leader(const kb_group_t *g, const kb_gmember_t *m)
{
    return kb_gsm_streq(g->leader, m->id);
}

/* Copy the protocols of a join request. */
static kb_gproto_t *kb_gsm_protos_dup(const kb_gproto_in_t *in, size_t n)
{
    kb_gproto_t *p = calloc(n ? n : 1, sizeof(*p));
    if (!p)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        p[i].name = strdup(in[i].name ? in[i].name : "");
        p[i].meta_len = in[i].meta_len > 0 ? in[i].meta_len : 0;
        p[i].meta = malloc(p[i].meta_len ? (size_t)p[i].meta_len : 1);
        if (!p[i].name || !p[i].meta) {
            kb_gsm_protos_free(p, i + 1);
            return NULL;
        }
        if (p[i].meta_len)
            memcpy(p[i].meta, in[i].meta, (size_t)p[i].meta_len);
    }
    return p;
}

/* The member's metadata for protocol @p name (empty if it has none). */
static void kb_gsm_member_meta(const kb_gmember_t *m, const char *name, const uint8_t **meta,
                               int32_t *len)
{
    *meta = NULL;
    *len = 0;
    for (size_t i = 0; name && i < m->nprotos; i++) {
        if (!strcmp(m->protos[i].name, name)) {
            *meta = m->protos[i].meta;
            *len = m->protos[i].meta_len;
            return;
        }
    }
}

static bool kb_gsm_member_supports(const kb_gmember_t *m, const char *name)
{
    for (size_t i = 0; i < m->nprotos; i++)
        if (!strcmp(m->protos[i].name, name))
            return true;
    return false;
}

/* Same protocols with the same metadata, in the same order. */
static bool kb_gsm_member_matches(const kb_gmember_t *m, const kb_gjoin_in_t *in)
{
    if (m->nprotos != in->nprotos)
        return false;
    for (size_t i = 0; i < in->nprotos; i++) {
        const kb_gproto_t *p = &m->protos[i];
        int32_t len = in->protos[i].meta_len > 0 ? in->protos[i].meta_len : 0;
        if (strcmp(p->name, in->protos[i].name ? in->protos[i].name : "") || p->meta_len != len ||
            (len && memcmp(p->meta, in->protos[i].meta, (size_t)len)))
            return false;
    }
    return true;
}

/* How many members support protocol @p name. */
static size_t kb_gsm_proto_support(const kb_group_t *g, const char *name)
{
    size_t n = 0;
    for (kb_gmember_t *m = g->members; m; m = m->next)
        n += kb_gsm_member_supports(m, name);
    return n;
}

/* Kafka's supportsProtocols: an empty group takes any non-empty type and protocol list; otherwise
 * the type must match and one of the protocols must be supported by every current member. */
static bool kb_gsm_supports(const kb_group_t *g, const kb_gjoin_in_t *in)
{
    if (!g->nmembers)
        return in->protocol_type && in->protocol_type[0] && in->nprotos > 0;
    if (!kb_gsm_streq(g->protocol_type, in->protocol_type))
        return false;
    for (size_t i = 0; i < in->nprotos; i++)
        if (in->protos[i].name && kb_gsm_proto_support(g, in->protos[i].name) == g->nmembers)
            return true;
    return false;
}

/* The protocol of the next generation: among the protocols every member supports, each member
 * votes for the first one in its own preference order; most votes wins, ties go to the one the
 * first member prefers. NULL if there is no common protocol. */
static const char *kb_gsm_select_protocol(const kb_group_t *g)
{
    const kb_gmember_t *first = g->members;
    const char *best = NULL;
    size_t best_votes = 0;
    if (!first)
        return NULL;
    for (size_t i = 0; i < first->nprotos; i++) {
        const char *cand = first->protos[i].name;
        size_t votes = 0;
        if (kb_gsm_proto_support(g, cand) != g->nmembers)
            continue;
        for (const kb_gmember_t *m = g->members; m; m = m->next) {
            for (size_t j = 0; j < m->nprotos; j++) {
                const char *pn = m->protos[j].name;
                if (kb_gsm_proto_support(g, pn) != g->nmembers)
                    continue;
                votes += !strcmp(pn, cand);
                break;
            }
        }
        if (!best || votes > best_votes) {
            best = cand;
            best_votes = votes;
        }
    }
    return best;
}

static int32_t kb_gsm_rebalance_timeout(const kb_group_t *g)
{
    int32_t t = 0;
    for (kb_gmember_t *m = g->members; m; m = m->next)
        if (m->rebalance_ms > t)
            t = m->rebalance_ms;
    return t;
}

/* "<prefix>-<random UUID>", as Kafka makes member ids. */
static void kb_gsm_new_member_id(const char *prefix, char *out, size_t size)
{
    uint8_t r[16];
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        for (size_t i = 0; i < sizeof(r); i++)
            r[i] = (uint8_t)random();
    }
    r[6] = (r[6] & 0x0F) | 0x40;
    r[8] = (r[8] & 0x3F) | 0x80;
    snprintf(out, size, "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             prefix ? prefix : "", r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9],
             r[10], r[11], r[12], r[13], r[14], r[15]);
}

static void kb_gsm_arm_session(kb_gsm_t *gsm, kb_gmember_t *m, int64_t ms)
{
    kb_gsm_timer_arm(gsm, &m->hb, kb_gsm_mono(gsm) + ms);
}

static void kb_gsm_member_set_token(kb_gsm_t *gsm, kb_group_t *g, kb_gmember_t *m, void *token)
{
    if (m->join_token) {
        /* A second JoinGroup while one is pending (a client that gave up on the first): the
         * older request is told to rejoin. */
        void *old = m->join_token;
        m->join_token = NULL;
        g->nawaiting_join--;
        kb_gsm_join_error(gsm, old, KP_ERR_REBALANCE_IN_PROGRESS, m->id);
    }
    if (token) {
        m->join_token = token;
        g->nawaiting_join++;
    }
}

/* ---- rebalances ------------------------------------------------------------------------------ */

static void kb_gsm_prepare_rebalance(kb_gsm_t *gsm, kb_group_t *g, const char *reason);
static void kb_gsm_try_complete_join(kb_gsm_t *gsm, kb_group_t *g);

static bool kb_gsm_can_rebalance(const kb_group_t *g)
{
    return g->state == KB_GS_STABLE || g->state == KB_GS_COMPLETING || g->state == KB_GS_EMPTY;
}

static void kb_gsm_maybe_prepare_rebalance(kb_gsm_t *gsm, kb_group_t *g, const char *reason)
{
    if (kb_gsm_can_rebalance(g))
        kb_gsm_prepare_rebalance(gsm, g, reason);
}

/* After a member joined or changed: start a rebalance, or see whether the running one is done. */
static void kb_gsm_rebalance_or_check(kb_gsm_t *gsm, kb_group_t *g, const char *reason)
{
    if (g->state == KB_GS_PREPARING)
        kb_gsm_try_complete_join(gsm, g);
    else
        kb_gsm_maybe_prepare_rebalance(gsm, g, reason);
}

/* Members waiting for their assignment get @p err instead; assignments are forgotten. */
static void kb_gsm_reset_and_propagate(kb_gsm_t *gsm, kb_group_t *g, int16_t err)
{
    for (kb_gmember_t *m = g->members; m; m = m->next) {
        free(m->assignment);
        m->assignment = NULL;
        m->assignment_len = 0;
    }
    for (kb_gmember_t *m = g->members; m; m = m->next) {
        if (m->sync_token) {
            void *t = m->sync_token;
            m->sync_token = NULL;
            kb_gsm_sync_error(gsm, t, err);
        }
    }
}

static void kb_gsm_prepare_rebalance(kb_gsm_t *gsm, kb_group_t *g, const char *reason)
{
    int64_t now = kb_gsm_mono(gsm);
    bool initial = g->state == KB_GS_EMPTY;
    if (g->state == KB_GS_COMPLETING)
        kb_gsm_reset_and_propagate(gsm, g, KP_ERR_REBALANCE_IN_PROGRESS);
    kb_gsm_timer_disarm(gsm, &g->sync_timer);
    for (kb_gmember_t *m = g->members; m; m = m->next)
        m->pending_sync = false;
    kb_glog_info("group %s: preparing to rebalance in state %s with old generation %d (%s)", g->id,
                 kb_gsm_state_name(g->state), g->generation, reason);
    if (initial) {
        /* A new group waits group.initial.rebalance.delay.ms for more members, extended while
         * members keep arriving, up to the rebalance timeout. */
        int32_t delay = gsm->conf.initial_delay_ms;
        int32_t rt = kb_gsm_rebalance_timeout(g);
        g->initial_join = true;
        g->new_member_added = false;
        g->initial_remaining = rt > delay ? rt - delay : 0;
        kb_gsm_transition(gsm, g, KB_GS_PREPARING);
        kb_gsm_timer_arm(gsm, &g->join_timer, now + delay);
        return;
    }
    g->initial_join = false;
    kb_gsm_transition(gsm, g, KB_GS_PREPARING);
    kb_gsm_timer_arm(gsm, &g->join_timer, now + kb_gsm_rebalance_timeout(g));
    kb_gsm_try_complete_join(gsm, g);
}

/* The leader of the next generation must be a member that rejoined. */
static bool kb_gsm_elect_joined_leader(kb_group_t *g)
{
    kb_gmember_t *l = g->leader ? kb_gsm_member_find(g, g->leader) : NULL;
    if (l && l->join_token)
        return true;
    for (kb_gmember_t *m = g->members; m; m = m->next) {
        if (m->join_token) {
            kb_gsm_set_leader(g, m->id);
            return true;
        }
    }
    kb_gsm_set_leader(g, NULL);
    return false;
}

/* The members list the leader gets: every member with its metadata for the selected protocol.
 * malloc'd; NULL with *n = 0 on no memory. */
static kb_gjoin_member_t *kb_gsm_member_list(const kb_group_t *g, size_t *n)
{
    kb_gjoin_member_t *v = calloc(g->nmembers ? g->nmembers : 1, sizeof(*v));
    size_t i = 0;
    *n = 0;
    if (!v)
        return NULL;
    for (kb_gmember_t *m = g->members; m; m = m->next, i++) {
        v[i].member_id = m->id;
        v[i].instance_id = m->instance_id;
        kb_gsm_member_meta(m, g->protocol_name, &v[i].meta, &v[i].meta_len);
    }
    *n = i;
    return v;
}

static int16_t kb_gsm_store_group(kb_gsm_t *gsm, kb_group_t *g);

static void kb_gsm_complete_join(kb_gsm_t *gsm, kb_group_t *g)
{
    kb_gmember_t *m, *next;
    kb_gjoin_member_t *list;
    size_t n;
    const char *sel;
    int64_t now = kb_gsm_mono(gsm);

    kb_gsm_timer_disarm(gsm, &g->join_timer);
    g->initial_join = false;
    /* Dynamic members that did not rejoin in time are gone; static members stay until their
     * session expires. */
    for (m = g->members; m; m = next) {
        next = m->next;
        if (!m->join_token && !m->instance_id) {
            kb_glog_info("group %s: member %s did not rejoin, removing it", g->id, m->id);
            kb_gsm_member_drop(gsm, g, m, KP_ERR_UNKNOWN_MEMBER_ID);
        }
    }
    if (!kb_gsm_elect_joined_leader(g) && g->nmembers) {
        /* Only static members that have not rejoined are left: wait one more rebalance timeout
         * for them to rejoin or for their sessions to expire. */
        kb_glog_warn("group %s: no member rejoined, waiting for the static members", g->id);
        kb_gsm_timer_arm(gsm, &g->join_timer, now + kb_gsm_rebalance_timeout(g));
        return;
    }
    g->generation++;
    gsm->rebalances++;
    if (!g->nmembers) {
        int16_t err;
        free(g->protocol_name);
        g->protocol_name = NULL;
        kb_gsm_transition(gsm, g, KB_GS_EMPTY);
        kb_glog_info("group %s with generation %d is now empty", g->id, g->generation);
        if ((err = kb_gsm_store_group(gsm, g)))
            kb_glog_warn("group %s: cannot write its metadata: error %d", g->id, err);
        return;
    }
    sel = kb_gsm_select_protocol(g);
    free(g->protocol_name);
    g->protocol_name = kb_gsm_strdup(sel);
    kb_gsm_transition(gsm, g, KB_GS_COMPLETING);
    kb_glog_info("group %s: stabilized with generation %d, protocol %s, %zu member(s), leader %s",
                 g->id, g->generation, g->protocol_name ? g->protocol_name : "(none)", g->nmembers,
                 g->leader);
    list = kb_gsm_member_list(g, &n);
    for (m = g->members; m; m = m->next) {
        void *t = m->join_token;
        bool leader = kb_gsm_is_leader(g, m);
        kb_gjoin_res_t r = {
            .err = 0,
            .generation = g->generation,
            .protocol_type = g->protocol_type,
            .protocol_name = g->protocol_name,
            .leader = g->leader ? g->leader : "",
            .member_id = m->id,
            .member_cnt = leader ? n : 0,
            .members = leader ? list : NULL,
        };
        if (!t)
            continue;
        m->join_token = NULL;
        g->nawaiting_join--;
        m->is_new = false;
        m->pending_sync = true;
        kb_gsm_arm_session(gsm, m, m->session_ms);
        gsm->ops.join_done(gsm->opaque, t, &r);
    }
    free(list);
    kb_gsm_timer_arm(gsm, &g->sync_timer, now + kb_gsm_rebalance_timeout(g));
}

static void kb_gsm_try_complete_join(kb_gsm_t *gsm, kb_group_t *g)
{
    /* The initial join of a new group always waits for its delay. */
    if (g->state != KB_GS_PREPARING || g->initial_join)
        return;
    if (g->nawaiting_join == g->nmembers && !g->npending)
        kb_gsm_complete_join(gsm, g);
}

static void kb_gsm_join_timer_fired(kb_gsm_t *gsm, kb_group_t *g)
{
    if (g->state != KB_GS_PREPARING)
        return;
    if (g->initial_join && g->new_member_added && g->initial_remaining > 0) {
        int32_t delay = gsm->conf.initial_delay_ms < g->initial_remaining
                            ? gsm->conf.initial_delay_ms
                            : g->initial_remaining;
        g->new_member_added = false;
        g->initial_remaining -= delay;
        kb_gsm_timer_arm(gsm, &g->join_timer, kb_gsm_mono(gsm) + delay);
        return;
    }
    kb_gsm_complete_join(gsm, g);
}

/* State actions after members left (Kafka's removeMemberAndUpdateGroup). */
static void kb_gsm_after_removal(kb_gsm_t *gsm, kb_group_t *g, const char *reason)
{
    switch (g->state) {
    case KB_GS_STABLE:
    case KB_GS_COMPLETING:
        kb_gsm_maybe_prepare_rebalance(gsm, g, reason);
        break;
    case KB_GS_PREPARING:
        kb_gsm_try_complete_join(gsm, g);
        break;
    default:
        break;
    }
}

static void kb_gsm_member_expired(kb_gsm_t *gsm, kb_group_t *g, kb_gmember_t *m)
{
    char reason[160];
    /* A member waiting for a JoinGroup or SyncGroup response cannot heartbeat; that counts as
     * alive, except for new members, which get new_member_join_timeout_ms to finish joining. */
    if (!m->is_new && (m->join_token || m->sync_token)) {
        kb_gsm_arm_session(gsm, m, m->session_ms);
        return;
    }
    snprintf(reason, sizeof(reason), "removing member %.100s on heartbeat expiration", m->id);
    kb_glog_info("group %s: member %s has failed (session timeout %d ms), removing it", g->id,
                 m->id, m->is_new ? gsm->conf.new_member_join_timeout_ms : m->session_ms);
    kb_gsm_member_drop(gsm, g, m, KP_ERR_UNKNOWN_MEMBER_ID);
    kb_gsm_after_removal(gsm, g, reason);
}

static void kb_gsm_pending_expired(kb_gsm_t *gsm, kb_group_t *g, kb_gpend_t *p)
{
    kb_glog_debug("group %s: pending member %s did not join in time", g->id, p->id);
    kb_gsm_pending_free(gsm, g, p);
    if (g->state == KB_GS_PREPARING)
        kb_gsm_try_complete_join(gsm, g);
}

/* Members that got their JoinGroup response but sent no SyncGroup within the rebalance timeout
 * are removed, and the group rebalances without them. */
static void kb_gsm_sync_expired(kb_gsm_t *gsm, kb_group_t *g)
{
    kb_gmember_t *m, *next;
    size_t n = 0;
    if (g->state != KB_GS_COMPLETING && g->state != KB_GS_STABLE)
        return;
    for (m = g->members; m; m = next) {
        next = m->next;
        if (m->pending_sync) {
            kb_glog_info("group %s: member %s sent no SyncGroup in time, removing it", g->id,
                         m->id);
            kb_gsm_member_drop(gsm, g, m, KP_ERR_UNKNOWN_MEMBER_ID);
            n++;
        }
    }
    if (n)
        kb_gsm_prepare_rebalance(gsm, g, "removing members on pending sync expiration");
}

void kb_gsm_run_timers(kb_gsm_t *gsm)
{
    int64_t now = kb_gsm_mono(gsm);
    while (gsm->heap_n && gsm->heap[0]->deadline <= now) {
        kb_gtimer_t *t = gsm->heap[0];
        kb_gsm_timer_disarm(gsm, t);
        switch (t->kind) {
        case KB_GT_MEMBER:
            kb_gsm_member_expired(gsm, t->group, t->obj);
            break;
        case KB_GT_PENDING:
            kb_gsm_pending_expired(gsm, t->group, t->obj);
            break;
        case KB_GT_JOIN:
            kb_gsm_join_timer_fired(gsm, t->group);
            break;
        case KB_GT_SYNC:
            kb_gsm_sync_expired(gsm, t->group);
            break;
        case KB_GT_EXPIRY:
            kb_goff_expiry_fire(gsm);
            break;
        }
    }
}

/* ---- group metadata records ------------------------------------------------------------------ */

int16_t kb_gsm_store_err(int16_t err)
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
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    default:
        return err;
    }
}

/* Write the group's metadata record (members with their metadata for the selected protocol and
 * their current assignments). 0 or the raw append error. */
static int16_t kb_gsm_store_group(kb_gsm_t *gsm, kb_group_t *g)
{
    kb_grec_group_t v;
    kb_grec_member_t *mv = calloc(g->nmembers ? g->nmembers : 1, sizeof(*mv));
    kb_gbatch_t b;
    size_t i = 0;
    int16_t err;
    if (!mv)
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    memset(&v, 0, sizeof(v));
    v.protocol_type = kp_str(g->protocol_type ? g->protocol_type : "");
    v.generation = g->generation;
    v.protocol = g->protocol_name ? kp_str(g->protocol_name) : KP_STR_NULL;
    v.leader = g->leader ? kp_str(g->leader) : KP_STR_NULL;
    v.state_ts = g->state_ts;
    for (kb_gmember_t *m = g->members; m; m = m->next, i++) {
        const uint8_t *meta;
        int32_t len;
        kb_gsm_member_meta(m, g->protocol_name, &meta, &len);
        mv[i].member_id = kp_str(m->id);
        mv[i].instance_id = m->instance_id ? kp_str(m->instance_id) : KP_STR_NULL;
        mv[i].client_id = kp_str(m->client_id ? m->client_id : "");
        mv[i].client_host = kp_str(m->client_host ? m->client_host : "");
        mv[i].rebalance_timeout = m->rebalance_ms;
        mv[i].session_timeout = m->session_ms;
        mv[i].subscription = (kp_bytes_t){meta, len};
        mv[i].assignment = (kp_bytes_t){m->assignment, m->assignment_len};
    }
    v.member_cnt = (int32_t)i;
    v.members = mv;
    kb_gbatch_init(&b, kb_gsm_now(gsm), -1, -1);
    kb_grec_group_key_write(&b.kw, g->id);
    kb_grec_group_value_write(&b.vw, &v);
    kb_gbatch_add(&b, false);
    err = kb_gbatch_write(gsm, &b, g->partition, NULL);
    free(mv);
    return err;
}

/* ---- JoinGroup --------------------------------------------------------------------------------
 */

/* Kafka's acceptJoiningMember: a rebalancing group counts the members it waits for. */
static bool kb_gsm_accept_joining(const kb_gsm_t *gsm, const kb_group_t *g, const kb_gmember_t *m)
{
    size_t max = gsm->conf.max_size > 0 ? (size_t)gsm->conf.max_size : SIZE_MAX;
    switch (g->state) {
    case KB_GS_PREPARING:
        return (m && m->join_token) || g->nawaiting_join + g->npending < max;
    case KB_GS_COMPLETING:
    case KB_GS_STABLE:
        return m || g->nmembers < max;
    default:
        return true;
    }
}

static kb_gmember_t *kb_gsm_member_new(const kb_gjoin_in_t *in, const char *id)
{
    kb_gmember_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->id = strdup(id);
    m->instance_id = kb_gsm_strdup(in->instance_id);
    m->client_id = strdup(in->client_id ? in->client_id : "");
    m->client_host = strdup(in->client_host ? in->client_host : "");
    m->protos = kb_gsm_protos_dup(in->protos, in->nprotos);
    m->nprotos = in->nprotos;
    m->session_ms = in->session_ms;
    m->rebalance_ms = in->rebalance_ms;
    m->hb.kind = KB_GT_MEMBER;
    m->hb.obj = m;
    if (!m->id || (in->instance_id && !m->instance_id) || !m->client_id || !m->client_host ||
        !m->protos) {
        kb_gsm_protos_free(m->protos, m->protos ? m->nprotos : 0);
        free(m->id);
        free(m->instance_id);
        free(m->client_id);
        free(m->client_host);
        free(m);
        return NULL;
    }
    return m;
}

static void kb_gsm_add_member_and_rebalance(kb_gsm_t *gsm, kb_group_t *g, const kb_gjoin_in_t *in,
                                            const char *id, void *token)
{
    kb_gmember_t *m = kb_gsm_member_new(in, id), **pp;
    char reason[200];
    if (!m) {
        kb_gsm_join_error(gsm, token, KP_ERR_COORDINATOR_NOT_AVAILABLE, id);
        return;
    }
    m->hb.group = g;
    if (!g->nmembers && !kb_gsm_streq(g->protocol_type, in->protocol_type)) {
        free(g->protocol_type);
        g->protocol_type = kb_gsm_strdup(in->protocol_type);
    }
    for (pp = &g->members; *pp; pp = &(*pp)->next)
        ;
    *pp = m;
    g->nmembers++;
    if (!g->leader)
        kb_gsm_set_leader(g, m->id);
    m->is_new = true;
    kb_gsm_member_set_token(gsm, g, m, token);
    /* While the initial delay runs, every new member extends it (up to the rebalance timeout). */
    if (g->state == KB_GS_PREPARING && g->initial_join)
        g->new_member_added = true;
    /* New members cannot heartbeat until they have joined; they get a longer, fixed timeout. */
    kb_gsm_arm_session(gsm, m, gsm->conf.new_member_join_timeout_ms);
    snprintf(reason, sizeof(reason), "adding new member %.100s%s%.40s", id,
             in->instance_id ? " with group instance id " : "",
             in->instance_id ? in->instance_id : "");
    kb_gsm_rebalance_or_check(gsm, g, reason);
}

static void kb_gsm_respond_current(kb_gsm_t *gsm, kb_group_t *g, kb_gmember_t *m, void *token)
{
    bool leader = kb_gsm_is_leader(g, m);
    size_t n = 0;
    kb_gjoin_member_t *list = leader ? kb_gsm_member_list(g, &n) : NULL;
    kb_gjoin_res_t r = {
        .generation = g->generation,
        .protocol_type = g->protocol_type,
        .protocol_name = g->protocol_name,
        .leader = g->leader ? g->leader : "",
        .member_id = m->id,
        .member_cnt = n,
        .members = list,
    };
    gsm->ops.join_done(gsm->opaque, token, &r);
    free(list);
}

/* Replace a member's protocols and timeouts (the old protocols are returned for a revert). */
static int kb_gsm_member_update(kb_gmember_t *m, const kb_gjoin_in_t *in, kb_gproto_t **old,
                                size_t *old_n)
{
    kb_gproto_t *p = kb_gsm_protos_dup(in->protos, in->nprotos);
    if (!p)
        return -1;
    if (old) {
        *old = m->protos;
        *old_n = m->nprotos;
    } else {
        kb_gsm_protos_free(m->protos, m->nprotos);
    }
    m->protos = p;
    m->nprotos = in->nprotos;
    m->session_ms = in->session_ms;
    m->rebalance_ms = in->rebalance_ms;
    return 0;
}

static void kb_gsm_update_member_and_rebalance(kb_gsm_t *gsm, kb_group_t *g, kb_gmember_t *m,
                                               const kb_gjoin_in_t *in, void *token,
                                               const char *why)
{
    char reason[200];
    if (kb_gsm_member_update(m, in, NULL, NULL) != 0) {
        kb_gsm_join_error(gsm, token, KP_ERR_COORDINATOR_NOT_AVAILABLE, m->id);
        return;
    }
    kb_gsm_member_set_token(gsm, g, m, token);
    snprintf(reason, sizeof(reason), "%s %.100s during %s", why, m->id,
             kb_gsm_state_name(g->state));
    kb_gsm_rebalance_or_check(gsm, g, reason);
}

/* A known static member (by group instance id) joins with no member id: it takes a new member
 * id, and whatever the old incarnation waits for is fenced. */
static void kb_gsm_update_static_member(kb_gsm_t *gsm, kb_group_t *g, kb_gmember_t *m,
                                        const kb_gjoin_in_t *in, const char *new_id, void *token)
{
    char *old_id = m->id, *cur_leader = kb_gsm_strdup(g->leader), *nid = strdup(new_id);
    kb_gproto_t *old_protos = NULL;
    size_t old_n = 0;
    int32_t old_session = m->session_ms, old_rebalance = m->rebalance_ms;
    bool was_leader = kb_gsm_is_leader(g, m);

    if (!nid || (g->leader && !cur_leader) ||
        kb_gsm_member_update(m, in, &old_protos, &old_n) != 0) {
        free(nid);
        free(cur_leader);
        kb_gsm_join_error(gsm, token, KP_ERR_COORDINATOR_NOT_AVAILABLE, "");
        return;
    }
    if (m->join_token) {
        void *t = m->join_token;
        m->join_token = NULL;
        g->nawaiting_join--;
        kb_gsm_join_error(gsm, t, KP_ERR_FENCED_INSTANCE_ID, old_id);
    }
    if (m->sync_token) {
        void *t = m->sync_token;
        m->sync_token = NULL;
        kb_gsm_sync_error(gsm, t, KP_ERR_FENCED_INSTANCE_ID);
    }
    m->id = nid;
    if (was_leader)
        kb_gsm_set_leader(g, nid);
    kb_gsm_arm_session(gsm, m, m->session_ms);
    kb_gsm_member_set_token(gsm, g, m, token);
    kb_glog_info("group %s: static member %s (instance %s) replaced by %s", g->id, old_id,
                 m->instance_id, nid);

    switch (g->state) {
    case KB_GS_STABLE: {
        const char *sel = kb_gsm_select_protocol(g);
        int16_t err;
        if (!kb_gsm_streq(sel, g->protocol_name)) {
            kb_gsm_prepare_rebalance(gsm, g, "static member rejoined with a protocol change");
            break;
        }
        /* Same protocol: no rebalance, only the new member id is persisted. */
        err = kb_gsm_store_group(gsm, g);
        m->join_token = NULL;
        g->nawaiting_join--;
        if (err) {
            kb_gjoin_res_t r = {.err = kb_gsm_store_err(err),
                                .generation = g->generation,
                                .protocol_type = g->protocol_type,
                                .protocol_name = g->protocol_name,
                                .leader = cur_leader ? cur_leader : "",
                                .member_id = ""};
            kb_gsm_protos_free(m->protos, m->nprotos);
            m->protos = old_protos;
            m->nprotos = old_n;
            old_protos = NULL;
            m->session_ms = old_session;
            m->rebalance_ms = old_rebalance;
            m->id = old_id;
            old_id = nid;
            if (was_leader)
                kb_gsm_set_leader(g, m->id);
            kb_gsm_arm_session(gsm, m, m->session_ms);
            gsm->ops.join_done(gsm->opaque, token, &r);
        } else {
            /* Clients that cannot skip the assignment are given the old leader id, so a
             * rejoining leader does not compute an assignment a stable group would not send. */
            bool skip = in->supports_skip_assignment && kb_gsm_is_leader(g, m);
            size_t n = 0;
            kb_gjoin_member_t *list = skip ? kb_gsm_member_list(g, &n) : NULL;
            kb_gjoin_res_t r = {
                .generation = g->generation,
                .protocol_type = g->protocol_type,
                .protocol_name = g->protocol_name,
                .leader = in->supports_skip_assignment ? (g->leader ? g->leader : "")
                                                       : (cur_leader ? cur_leader : ""),
                .member_id = m->id,
                .skip_assignment = skip,
                .member_cnt = n,
                .members = list,
            };
            gsm->ops.join_done(gsm->opaque, token, &r);
            free(list);
        }
        break;
    }
    case KB_GS_COMPLETING:
        /* The leader may already be assigning with the old member id. */
        kb_gsm_prepare_rebalance(gsm, g, "static member rejoined during CompletingRebalance");
        break;
    case KB_GS_PREPARING:
        kb_gsm_try_complete_join(gsm, g);
        break;
    default:
        break;
    }
    kb_gsm_protos_free(old_protos, old_n);
    free(old_id);
    free(cur_leader);
}

static void kb_gsm_join_unknown(kb_gsm_t *gsm, kb_group_t *g, const kb_gjoin_in_t *in, void *token)
{
    char id[512];
    kb_gsm_new_member_id(in->instance_id ? in->instance_id : in->client_id, id, sizeof(id));
    if (in->instance_id) {
        kb_gmember_t *m = kb_gsm_member_by_instance(g, in->instance_id);
        if (m)
            kb_gsm_update_static_member(gsm, g, m, in, id, token);
        else
            kb_gsm_add_member_and_rebalance(gsm, g, in, id, token);
        return;
    }
    if (in->require_known_member_id) {
        /* KIP-394: hand out the id and wait for the member to come back with it, so members
         * that never return do not hold up rebalances for long. */
        kb_gpend_t *p = calloc(1, sizeof(*p));
        if (!p || !(p->id = strdup(id))) {
            free(p);
            kb_gsm_join_error(gsm, token, KP_ERR_COORDINATOR_NOT_AVAILABLE, "");
            return;
        }
        p->t.kind = KB_GT_PENDING;
        p->t.group = g;
        p->t.obj = p;
        p->next = g->pending;
        g->pending = p;
        g->npending++;
        kb_gsm_timer_arm(gsm, &p->t, kb_gsm_mono(gsm) + in->session_ms);
        kb_gsm_join_error(gsm, token, KP_ERR_MEMBER_ID_REQUIRED, id);
        return;
    }
    kb_gsm_add_member_and_rebalance(gsm, g, in, id, token);
}

static void kb_gsm_join_known(kb_gsm_t *gsm, kb_group_t *g, const kb_gjoin_in_t *in, void *token)
{
    kb_gpend_t *p = kb_gsm_pending_find(g, in->member_id);
    kb_gmember_t *m;
    if (p && !in->instance_id) {
        kb_gsm_pending_free(gsm, g, p);
        kb_gsm_add_member_and_rebalance(gsm, g, in, in->member_id, token);
        return;
    }
    if (in->instance_id) {
        kb_gmember_t *s = kb_gsm_member_by_instance(g, in->instance_id);
        if (!s) {
            kb_gsm_join_error(gsm, token, KP_ERR_UNKNOWN_MEMBER_ID, in->member_id);
            return;
        }
        if (strcmp(s->id, in->member_id)) {
            kb_glog_info("group %s: fencing static member %s (instance %s, current member %s)",
                         g->id, in->member_id, in->instance_id, s->id);
            kb_gsm_join_error(gsm, token, KP_ERR_FENCED_INSTANCE_ID, in->member_id);
            return;
        }
    }
    m = kb_gsm_member_find(g, in->member_id);
    if (!m) {
        kb_gsm_join_error(gsm, token, KP_ERR_UNKNOWN_MEMBER_ID, in->member_id);
        return;
    }
    switch (g->state) {
    case KB_GS_PREPARING:
        kb_gsm_update_member_and_rebalance(gsm, g, m, in, token, "member rejoining");
        break;
    case KB_GS_COMPLETING:
        /* Same metadata: it lost the JoinGroup response; send it again. */
        if (kb_gsm_member_matches(m, in))
            kb_gsm_respond_current(gsm, g, m, token);
        else
            kb_gsm_update_member_and_rebalance(gsm, g, m, in, token, "updating metadata of");
        break;
    case KB_GS_STABLE:
        /* The leader rejoining forces a rebalance (its assignment inputs may have changed, such
         * as topic metadata); a follower with unchanged metadata just gets the generation. */
        if (kb_gsm_is_leader(g, m))
            kb_gsm_update_member_and_rebalance(gsm, g, m, in, token, "leader re-joining:");
        else if (!kb_gsm_member_matches(m, in))
            kb_gsm_update_member_and_rebalance(gsm, g, m, in, token, "updating metadata of");
        else
            kb_gsm_respond_current(gsm, g, m, token);
        break;
    default:
        kb_gsm_join_error(gsm, token, KP_ERR_UNKNOWN_MEMBER_ID, in->member_id);
        break;
    }
}

void kb_gsm_join(kb_gsm_t *gsm, const kb_gjoin_in_t *in, void *token)
{
    const char *mid = in->member_id ? in->member_id : "";
    kb_gjoin_in_t req = *in;
    kb_group_t *g;
    kb_gmember_t *m;
    bool created = false;

    req.member_id = mid;
    if (!in->group_id || !in->group_id[0]) {
        kb_gsm_join_error(gsm, token, KP_ERR_INVALID_GROUP_ID, mid);
        return;
    }
    if (in->session_ms < gsm->conf.min_session_ms || in->session_ms > gsm->conf.max_session_ms) {
        kb_gsm_join_error(gsm, token, KP_ERR_INVALID_SESSION_TIMEOUT, mid);
        return;
    }
    g = kb_gsm_group(gsm, in->group_id);
    if (!g) {
        if (mid[0]) {
            kb_gsm_join_error(gsm, token, KP_ERR_UNKNOWN_MEMBER_ID, mid);
            return;
        }
        if (!(g = kb_gsm_group_create(gsm, in->group_id))) {
            kb_gsm_join_error(gsm, token, KP_ERR_COORDINATOR_NOT_AVAILABLE, mid);
            return;
        }
        created = true;
    }
    if (in->reason)
        kb_glog_debug("group %s: JoinGroup from %s (%s): %s", g->id, mid[0] ? mid : "new member",
                      in->client_id ? in->client_id : "", in->reason);
    m = mid[0] ? kb_gsm_member_find(g, mid) : NULL;
    if (!kb_gsm_supports(g, &req)) {
        kb_gsm_join_error(gsm, token, KP_ERR_INCONSISTENT_GROUP_PROTOCOL, mid);
    } else if (!kb_gsm_accept_joining(gsm, g, m)) {
        if (m)
            kb_gsm_member_drop(gsm, g, m, KP_ERR_GROUP_MAX_SIZE_REACHED);
        kb_gsm_join_error(gsm, token, KP_ERR_GROUP_MAX_SIZE_REACHED, "");
    } else if (!mid[0]) {
        kb_gsm_join_unknown(gsm, g, &req, token);
    } else {
        kb_gsm_join_known(gsm, g, &req, token);
    }
    if (created && kb_gsm_group_is_idle(g) && g->state == KB_GS_EMPTY)
        kb_gsm_group_destroy(gsm, g);
}

/* ---- SyncGroup ------------------------------------------------------------------------------- */

/* Kafka's validateMember: a static member's instance id must map to this member id. */
static int16_t kb_gsm_validate_member(const kb_group_t *g, const char *member_id,
                                      const char *instance_id, kb_gmember_t **out)
{
    *out = NULL;
    if (instance_id) {
        kb_gmember_t *s = kb_gsm_member_by_instance(g, instance_id);
        if (!s)
            return KP_ERR_UNKNOWN_MEMBER_ID;
        if (strcmp(s->id, member_id ? member_id : ""))
            return KP_ERR_FENCED_INSTANCE_ID;
    }
    *out = member_id ? kb_gsm_member_find(g, member_id) : NULL;
    return *out ? 0 : KP_ERR_UNKNOWN_MEMBER_ID;
}

static void kb_gsm_sync_reply(kb_gsm_t *gsm, const kb_group_t *g, kb_gmember_t *m, void *token)
{
    kb_gsync_res_t r = {.protocol_type = g->protocol_type,
                        .protocol_name = g->protocol_name,
                        .assignment = m->assignment,
                        .assignment_len = m->assignment_len};
    gsm->ops.sync_done(gsm->opaque, token, &r);
}

static void kb_gsm_sync_done_if_all(kb_gsm_t *gsm, kb_group_t *g)
{
    for (kb_gmember_t *m = g->members; m; m = m->next)
        if (m->pending_sync)
            return;
    kb_gsm_timer_disarm(gsm, &g->sync_timer);
}

static int kb_gsm_set_assignments(kb_group_t *g, const kb_gsync_in_t *in)
{
    for (kb_gmember_t *m = g->members; m; m = m->next) {
        const kb_gassign_in_t *a = NULL;
        uint8_t *p = NULL;
        for (size_t i = 0; i < in->nassignments; i++) {
            if (in->assignments[i].member_id && !strcmp(in->assignments[i].member_id, m->id)) {
                a = &in->assignments[i];
                break;
            }
        }
        if (a && a->len > 0) {
            if (!(p = malloc((size_t)a->len)))
                return -1;
            memcpy(p, a->data, (size_t)a->len);
        }
        free(m->assignment);
        m->assignment = p;
        m->assignment_len = p ? a->len : 0;
    }
    return 0;
}

void kb_gsm_sync(kb_gsm_t *gsm, const kb_gsync_in_t *in, void *token)
{
    kb_group_t *g;
    kb_gmember_t *m;
    int16_t err;
    if (!in->group_id || !in->group_id[0]) {
        kb_gsm_sync_error(gsm, token, KP_ERR_INVALID_GROUP_ID);
        return;
    }
    if (!(g = kb_gsm_group(gsm, in->group_id))) {
        kb_gsm_sync_error(gsm, token, KP_ERR_UNKNOWN_MEMBER_ID);
        return;
    }
    if ((err = kb_gsm_validate_member(g, in->member_id, in->instance_id, &m))) {
        kb_gsm_sync_error(gsm, token, err);
        return;
    }
    if (in->generation != g->generation) {
        kb_gsm_sync_error(gsm, token, KP_ERR_ILLEGAL_GENERATION);
        return;
    }
    if ((in->protocol_type && !kb_gsm_streq(in->protocol_type, g->protocol_type)) ||
        (in->protocol_name && !kb_gsm_streq(in->protocol_name, g->protocol_name))) {
        kb_gsm_sync_error(gsm, token, KP_ERR_INCONSISTENT_GROUP_PROTOCOL);
        return;
    }
    switch (g->state) {
    case KB_GS_PREPARING:
        kb_gsm_sync_error(gsm, token, KP_ERR_REBALANCE_IN_PROGRESS);
        return;
    case KB_GS_COMPLETING:
        if (m->sync_token) {
            void *old = m->sync_token;
            m->sync_token = NULL;
            kb_gsm_sync_error(gsm, old, KP_ERR_REBALANCE_IN_PROGRESS);
        }
        m->sync_token = token;
        m->pending_sync = false;
        kb_gsm_arm_session(gsm, m, m->session_ms);
        kb_gsm_sync_done_if_all(gsm, g);
        if (!kb_gsm_is_leader(g, m))
            return;
        /* The leader's assignment: persist it, then hand every waiting member its part. */
        if (kb_gsm_set_assignments(g, in) != 0)
            err = KP_ERR_UNKNOWN_SERVER_ERROR;
        else
            err = kb_gsm_store_group(gsm, g);
        if (err) {
            kb_glog_warn("group %s: cannot persist the assignment of generation %d: error %d",
                         g->id, g->generation, err);
            kb_gsm_reset_and_propagate(gsm, g, kb_gsm_store_err(err));
            kb_gsm_maybe_prepare_rebalance(gsm, g, "error persisting the group assignment");
            return;
        }
        for (kb_gmember_t *x = g->members; x; x = x->next) {
            if (x->sync_token) {
                void *t = x->sync_token;
                x->sync_token = NULL;
                kb_gsm_arm_session(gsm, x, x->session_ms);
                kb_gsm_sync_reply(gsm, g, x, t);
            }
        }
        kb_gsm_transition(gsm, g, KB_GS_STABLE);
        kb_glog_info("group %s: assignment of generation %d received from leader %s", g->id,
                     g->generation, m->id);
        return;
    case KB_GS_STABLE:
        m->pending_sync = false;
        kb_gsm_arm_session(gsm, m, m->session_ms);
        kb_gsm_sync_done_if_all(gsm, g);
        kb_gsm_sync_reply(gsm, g, m, token);
        return;
    default:
        kb_gsm_sync_error(gsm, token, KP_ERR_UNKNOWN_MEMBER_ID);
        return;
    }
}

/* ---- Heartbeat and LeaveGroup ------------------------------------------------------------------
 */

int16_t kb_gsm_heartbeat(kb_gsm_t *gsm, const char *group_id, const char *member_id,
                         const char *instance_id, int32_t generation)
{
    kb_group_t *g;
    kb_gmember_t *m;
    int16_t err;
    if (!group_id || !group_id[0])
        return KP_ERR_INVALID_GROUP_ID;
    if (!(g = kb_gsm_group(gsm, group_id)))
        return KP_ERR_UNKNOWN_MEMBER_ID;
    if ((err = kb_gsm_validate_member(g, member_id, instance_id, &m)))
        return err;
    if (generation != g->generation)
        return KP_ERR_ILLEGAL_GENERATION;
    switch (g->state) {
    case KB_GS_PREPARING:
        kb_gsm_arm_session(gsm, m, m->session_ms);
        return KP_ERR_REBALANCE_IN_PROGRESS;
    case KB_GS_COMPLETING:
    case KB_GS_STABLE:
        /* Members may heartbeat between their JoinGroup and SyncGroup responses. */
        kb_gsm_arm_session(gsm, m, m->session_ms);
        return 0;
    default:
        return KP_ERR_UNKNOWN_MEMBER_ID;
    }
}

int16_t kb_gsm_leave(kb_gsm_t *gsm, const char *group_id, const kb_gleave_in_t *members, size_t n,
                     int16_t *errs)
{
    kb_group_t *g;
    size_t removed = 0;
    if (!group_id || !group_id[0])
        return KP_ERR_INVALID_GROUP_ID;
    if (!(g = kb_gsm_group(gsm, group_id))) {
        for (size_t i = 0; i < n; i++)
            errs[i] = KP_ERR_UNKNOWN_MEMBER_ID;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        const char *mid = members[i].member_id ? members[i].member_id : "";
        kb_gmember_t *m;
        errs[i] = 0;
        if (members[i].instance_id) {
            /* An empty member id is allowed: an admin removing a static member by instance. */
            m = kb_gsm_member_by_instance(g, members[i].instance_id);
            if (!m) {
                errs[i] = KP_ERR_UNKNOWN_MEMBER_ID;
                continue;
            }
            if (mid[0] && strcmp(m->id, mid)) {
                errs[i] = KP_ERR_FENCED_INSTANCE_ID;
                continue;
            }
        } else {
            kb_gpend_t *p = kb_gsm_pending_find(g, mid);
            if (p) {
                kb_gsm_pending_free(gsm, g, p);
                removed++;
                continue;
            }
            if (!(m = kb_gsm_member_find(g, mid))) {
                errs[i] = KP_ERR_UNKNOWN_MEMBER_ID;
                continue;
            }
        }
        kb_glog_info("group %s: member %s leaves%s%s", g->id, m->id, members[i].reason ? ": " : "",
                     members[i].reason ? members[i].reason : "");
        kb_gsm_member_drop(gsm, g, m, KP_ERR_UNKNOWN_MEMBER_ID);
        removed++;
    }
    if (removed)
        kb_gsm_after_removal(gsm, g, "members left the group");
    return 0;
}

/* ---- loading helpers ----------------------------------------------------------------------------
 */

kb_gmember_t *kb_gsm_member_load(kb_gsm_t *gsm, kb_group_t *g, const char *id,
                                 const char *instance_id, const char *client_id,
                                 const char *client_host, int32_t session_ms, int32_t rebalance_ms,
                                 const char *protocol, const uint8_t *meta, int32_t meta_len,
                                 const uint8_t *assignment, int32_t assignment_len)
{
    kb_gproto_in_t p = {protocol, meta, meta_len};
    kb_gjoin_in_t in = {.instance_id = instance_id,
                        .protos = &p,
                        .nprotos = protocol ? 1 : 0,
                        .session_ms = session_ms,
                        .rebalance_ms = rebalance_ms,
                        .client_id = client_id,
                        .client_host = client_host};
    kb_gmember_t *m = kb_gsm_member_new(&in, id), **pp;
    (void)gsm;
    if (!m)
        return NULL;
    if (assignment_len > 0) {
        m->assignment = malloc((size_t)assignment_len);
        if (m->assignment) {
            memcpy(m->assignment, assignment, (size_t)assignment_len);
            m->assignment_len = assignment_len;
        }
    }
    m->hb.group = g;
    for (pp = &g->members; *pp; pp = &(*pp)->next)
        ;
    *pp = m;
    g->nmembers++;
    return m;
}
