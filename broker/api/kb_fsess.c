/*
 * kb_fsess.c -- the fetch session cache (see kb_fsess.h).
 */
#include "kb_fsess.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "kb_time.h"

struct kb_fsess_cache_s {
    pthread_mutex_t mu;
    size_t max;
    kb_fsess_t **v; /* unordered; small enough to scan for eviction */
    size_t n, cap;
};

int32_t kb_fsess_next_epoch(int32_t e)
{
    return e == INT32_MAX ? 1 : e + 1;
}

static void kb_fsess_free(kb_fsess_t *s)
{
    for (size_t i = 0; i < s->nparts; i++) {
        free(s->parts[i]->topic);
        free(s->parts[i]);
    }
    free(s->parts);
    free(s->hash);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void kb_fsess_release(kb_fsess_t *s)
{
    if (s && atomic_fetch_sub(&s->refcnt, 1) == 1)
        kb_fsess_free(s);
}

kb_fsess_cache_t *kb_fsess_cache_new(size_t max_sessions)
{
    kb_fsess_cache_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    pthread_mutex_init(&c->mu, NULL);
    c->max = max_sessions;
    return c;
}

void kb_fsess_cache_free(kb_fsess_cache_t *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++)
        kb_fsess_release(c->v[i]);
    free(c->v);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static kb_fsess_t *kb_fsess_find_locked(kb_fsess_cache_t *c, int32_t id, size_t *idx)
{
    for (size_t i = 0; i < c->n; i++) {
        if (c->v[i]->id == id) {
            if (idx)
                *idx = i;
            return c->v[i];
        }
    }
    return NULL;
}

static void kb_fsess_drop_locked(kb_fsess_cache_t *c, size_t i)
{
    kb_fsess_t *s = c->v[i];
    c->v[i] = c->v[--c->n];
    kb_fsess_release(s);
}

kb_fsess_t *kb_fsess_create(kb_fsess_cache_t *c, bool uses_ids, size_t nparts, int64_t now_ms)
{
    kb_fsess_t *s;
    int32_t id;
    pthread_mutex_lock(&c->mu);
    if (c->n >= c->max) {
        size_t lru = 0, small = 0;
        for (size_t i = 1; i < c->n; i++) {
            if (c->v[i]->last_used_ms < c->v[lru]->last_used_ms)
                lru = i;
            if (c->v[i]->nparts < c->v[small]->nparts)
                small = i;
        }
        if (c->n && now_ms - c->v[lru]->last_used_ms > KB_FSESS_EVICT_MS)
            kb_fsess_drop_locked(c, lru);
        else if (c->n && c->v[small]->nparts < nparts)
            kb_fsess_drop_locked(c, small);
        else {
            pthread_mutex_unlock(&c->mu);
            return NULL;
        }
    }
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 16;
        kb_fsess_t **nv = realloc(c->v, nc * sizeof(*nv));
        if (!nv) {
            pthread_mutex_unlock(&c->mu);
            return NULL;
        }
        c->v = nv;
        c->cap = nc;
    }
    s = calloc(1, sizeof(*s));
    if (!s) {
        pthread_mutex_unlock(&c->mu);
        return NULL;
    }
    do {
        if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id))
            id = (int32_t)(kb_time_mono_ns() & 0x7fffffff);
        id &= 0x7fffffff;
    } while (id == 0 || kb_fsess_find_locked(c, id, NULL));
    s->id = id;
    s->epoch = 1;
    s->uses_ids = uses_ids;
    s->busy = true;
    s->last_used_ms = now_ms;
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->refcnt, 2); /* the cache's and the caller's */
    c->v[c->n++] = s;
    pthread_mutex_unlock(&c->mu);
    return s;
}

kb_fsess_t *kb_fsess_get(kb_fsess_cache_t *c, int32_t id)
{
    kb_fsess_t *s;
    pthread_mutex_lock(&c->mu);
    s = kb_fsess_find_locked(c, id, NULL);
    if (s)
        atomic_fetch_add(&s->refcnt, 1);
    pthread_mutex_unlock(&c->mu);
    return s;
}

void kb_fsess_remove(kb_fsess_cache_t *c, int32_t id)
{
    size_t i;
    pthread_mutex_lock(&c->mu);
    if (kb_fsess_find_locked(c, id, &i))
        kb_fsess_drop_locked(c, i);
    pthread_mutex_unlock(&c->mu);
}

size_t kb_fsess_count(kb_fsess_cache_t *c)
{
    size_t n;
    pthread_mutex_lock(&c->mu);
    n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void kb_fsess_stats(kb_fsess_cache_t *c, size_t *sessions, size_t *partitions)
{
    size_t np = 0;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n; i++)
        np += atomic_load_explicit(&c->v[i]->nparts_pub, memory_order_relaxed);
    *sessions = c->n;
    pthread_mutex_unlock(&c->mu);
    *partitions = np;
}

/* ---- partitions ----------------------------------------------------------------------------- */

static uint64_t kb_fsess_hash(const kb_fsess_t *s, const char *topic, const kp_uuid_t *id,
                              int32_t partition)
{
    uint64_t h = 1469598103934665603ULL;
    if (s->uses_ids) {
        for (size_t i = 0; i < 16; i++)
            h = (h ^ id->b[i]) * 1099511628211ULL;
    } else {
        for (const char *p = topic; p && *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    }
    return (h ^ (uint32_t)partition) * 1099511628211ULL;
}

static bool kb_fsess_key_eq(const kb_fsess_t *s, const kb_fsess_part_t *p, const char *topic,
                            const kp_uuid_t *id, int32_t partition)
{
    if (p->partition != partition)
        return false;
    if (s->uses_ids)
        return !memcmp(p->topic_id.b, id->b, 16);
    return p->topic && topic && !strcmp(p->topic, topic);
}

kb_fsess_part_t *kb_fsess_find(kb_fsess_t *s, const char *topic, const kp_uuid_t *id,
                               int32_t partition)
{
    kb_fsess_part_t *p;
    if (!s->nbuckets)
        return NULL;
    for (p = s->hash[kb_fsess_hash(s, topic, id, partition) & (s->nbuckets - 1)]; p; p = p->hnext)
        if (kb_fsess_key_eq(s, p, topic, id, partition))
            return p;
    return NULL;
}

static int kb_fsess_rehash(kb_fsess_t *s)
{
    size_t nb = s->nbuckets ? s->nbuckets * 2 : 16;
    kb_fsess_part_t **h = calloc(nb, sizeof(*h));
    if (!h)
        return -1;
    for (size_t i = 0; i < s->nparts; i++) {
        kb_fsess_part_t *p = s->parts[i];
        size_t b = kb_fsess_hash(s, p->topic, &p->topic_id, p->partition) & (nb - 1);
        p->hnext = h[b];
        h[b] = p;
    }
    free(s->hash);
    s->hash = h;
    s->nbuckets = nb;
    return 0;
}

kb_fsess_part_t *kb_fsess_upsert(kb_fsess_t *s, const char *topic, const kp_uuid_t *id,
                                 int32_t partition)
{
    kb_fsess_part_t *p = kb_fsess_find(s, topic, id, partition);
    size_t b;
    if (p)
        return p;
    if (s->nparts + 1 > s->nbuckets && kb_fsess_rehash(s) != 0)
        return NULL;
    if (s->nparts == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        kb_fsess_part_t **nv = realloc(s->parts, nc * sizeof(*nv));
        if (!nv)
            return NULL;
        s->parts = nv;
        s->cap = nc;
    }
    p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    if (!s->uses_ids && topic && !(p->topic = strdup(topic))) {
        free(p);
        return NULL;
    }
    if (id)
        p->topic_id = *id;
    p->partition = partition;
    p->hw = p->lso = p->log_start = -2;
    p->current_leader_epoch = -1;
    p->last_fetched_epoch = -1;
    p->log_start_offset = -1;
    b = kb_fsess_hash(s, topic, id, partition) & (s->nbuckets - 1);
    p->hnext = s->hash[b];
    s->hash[b] = p;
    s->parts[s->nparts++] = p;
    atomic_store_explicit(&s->nparts_pub, s->nparts, memory_order_relaxed);
    return p;
}

void kb_fsess_forget(kb_fsess_t *s, const char *topic, const kp_uuid_t *id, int32_t partition)
{
    kb_fsess_part_t *p = kb_fsess_find(s, topic, id, partition), **pp;
    if (!p)
        return;
    for (pp = &s->hash[kb_fsess_hash(s, topic, id, partition) & (s->nbuckets - 1)]; *pp;
         pp = &(*pp)->hnext) {
        if (*pp == p) {
            *pp = p->hnext;
            break;
        }
    }
    for (size_t i = 0; i < s->nparts; i++) {
        if (s->parts[i] == p) {
            memmove(&s->parts[i], &s->parts[i + 1], (s->nparts - i - 1) * sizeof(*s->parts));
            s->nparts--;
            atomic_store_explicit(&s->nparts_pub, s->nparts, memory_order_relaxed);
            break;
        }
    }
    if (s->rr_start >= s->nparts)
        s->rr_start = 0;
    free(p->topic);
    free(p);
}
