/*
 * kb_ghash.h -- a small chained hash map from byte-string keys to pointers, for the group
 * coordinator's tables (groups by id, offsets by topic and partition). The map copies keys and
 * never owns values.
 *
 * @thread one at a time (the caller's lock)
 */
#ifndef KB_GHASH_H
#define KB_GHASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct kb_ghash_ent_s kb_ghash_ent_t;

typedef struct kb_ghash_s {
    kb_ghash_ent_t **b; /**< buckets (NULL until the first insert) */
    size_t nb;          /**< bucket count, a power of two */
    size_t cnt;
} kb_ghash_t;

/** Iteration cursor: start zeroed. */
typedef struct kb_ghash_it_s {
    size_t bucket;
    kb_ghash_ent_t *next;
} kb_ghash_it_t;

void kb_ghash_init(kb_ghash_t *h);
/** Free the table and the keys (not the values). */
void kb_ghash_free(kb_ghash_t *h);

/** The value stored under @p key, or NULL. */
void *kb_ghash_get(const kb_ghash_t *h, const void *key, size_t klen);

/** Store @p val under @p key (replacing an existing value). 0 or -1 on no memory. */
int kb_ghash_put(kb_ghash_t *h, const void *key, size_t klen, void *val);

/** Remove @p key; returns the value it had, or NULL. */
void *kb_ghash_del(kb_ghash_t *h, const void *key, size_t klen);

/** Next value (NULL at the end). Removing the entry just returned is allowed. */
void *kb_ghash_next(const kb_ghash_t *h, kb_ghash_it_t *it, const void **key, size_t *klen);

static inline size_t kb_ghash_count(const kb_ghash_t *h)
{
    return h->cnt;
}

#endif /* KB_GHASH_H */
