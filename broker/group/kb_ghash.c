/*
 * kb_ghash.c -- chained hash map (kb_ghash.h). FNV-1a hashes; the table doubles at a load
 * factor of 1.
 */
#include "kb_ghash.h"

#include <stdlib.h>
#include <string.h>

struct kb_ghash_ent_s {
    kb_ghash_ent_t *next;
    uint64_t hash;
    void *val;
    size_t klen;
    unsigned char key[]; /**< copied */
};

static uint64_t kb_ghash_fnv(const void *key, size_t klen)
{
    const unsigned char *p = key;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < klen; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

void kb_ghash_init(kb_ghash_t *h)
{
    memset(h, 0, sizeof(*h));
}

void kb_ghash_free(kb_ghash_t *h)
{
    for (size_t i = 0; i < h->nb; i++) {
        kb_ghash_ent_t *e = h->b[i];
        while (e) {
            kb_ghash_ent_t *n = e->next;
            free(e);
            e = n;
        }
    }
    free(h->b);
    memset(h, 0, sizeof(*h));
}

static kb_ghash_ent_t **kb_ghash_slot(const kb_ghash_t *h, const void *key, size_t klen,
                                      uint64_t hash)
{
    kb_ghash_ent_t **pp;
    if (!h->nb)
        return NULL;
    pp = &h->b[hash & (h->nb - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == hash && (*pp)->klen == klen && !memcmp((*pp)->key, key, klen))
            return pp;
    return NULL;
}

void *kb_ghash_get(const kb_ghash_t *h, const void *key, size_t klen)
{
    kb_ghash_ent_t **pp = kb_ghash_slot(h, key, klen, kb_ghash_fnv(key, klen));
    return pp ? (*pp)->val : NULL;
}

static int kb_ghash_grow(kb_ghash_t *h)
{
    size_t nb = h->nb ? h->nb * 2 : 16;
    kb_ghash_ent_t **b = calloc(nb, sizeof(*b));
    if (!b)
        return -1;
    for (size_t i = 0; i < h->nb; i++) {
        kb_ghash_ent_t *e = h->b[i];
        while (e) {
            kb_ghash_ent_t *n = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = n;
        }
    }
    free(h->b);
    h->b = b;
    h->nb = nb;
    return 0;
}

int kb_ghash_put(kb_ghash_t *h, const void *key, size_t klen, void *val)
{
    uint64_t hash = kb_ghash_fnv(key, klen);
    kb_ghash_ent_t **pp = kb_ghash_slot(h, key, klen, hash);
    kb_ghash_ent_t *e;
    if (pp) {
        (*pp)->val = val;
        return 0;
    }
    if (h->cnt >= h->nb && kb_ghash_grow(h) != 0)
        return -1;
    e = malloc(sizeof(*e) + klen);
    if (!e)
        return -1;
    e->hash = hash;
    e->val = val;
    e->klen = klen;
    if (klen)
        memcpy(e->key, key, klen);
    e->next = h->b[hash & (h->nb - 1)];
    h->b[hash & (h->nb - 1)] = e;
    h->cnt++;
    return 0;
}

void *kb_ghash_del(kb_ghash_t *h, const void *key, size_t klen)
{
    kb_ghash_ent_t **pp = kb_ghash_slot(h, key, klen, kb_ghash_fnv(key, klen));
    kb_ghash_ent_t *e;
    void *val;
    if (!pp)
        return NULL;
    e = *pp;
    *pp = e->next;
    val = e->val;
    free(e);
    h->cnt--;
    return val;
}

void *kb_ghash_next(const kb_ghash_t *h, kb_ghash_it_t *it, const void **key, size_t *klen)
{
    kb_ghash_ent_t *e = it->next;
    while (!e) {
        if (it->bucket >= h->nb)
            return NULL;
        e = h->b[it->bucket++];
    }
    it->next = e->next; /* taken before the caller may delete e */
    if (key)
        *key = e->key;
    if (klen)
        *klen = e->klen;
    return e->val;
}
