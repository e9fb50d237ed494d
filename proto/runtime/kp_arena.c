#include "kp_arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct kp_arena_chunk_s {
    kp_arena_chunk_t *next;
    size_t size; /* usable bytes in data[] */
    size_t off;
    _Alignas(16) unsigned char data[];
};

#define KP_ARENA_CHUNK_MIN 4096

void kp_arena_init(kp_arena_t *ar, size_t limit)
{
    ar->head = NULL;
    ar->used = 0;
    ar->limit = limit;
}

void *kp_arena_alloc(kp_arena_t *ar, size_t n)
{
    kp_arena_chunk_t *c = ar->head;
    void *p;
    /* Check before rounding up: rounding SIZE_MAX would wrap to 0. */
    if (n > SIZE_MAX / 4)
        return NULL;
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    if (ar->limit && (n > ar->limit || ar->used > ar->limit - n))
        return NULL;
    if (!c || c->size - c->off < n) {
        size_t sz = n > KP_ARENA_CHUNK_MIN ? n : KP_ARENA_CHUNK_MIN;
        if (c && c->size * 2 > sz && c->size < (1u << 20))
            sz = c->size * 2;
        c = malloc(sizeof(*c) + sz);
        if (!c)
            return NULL;
        c->next = ar->head;
        c->size = sz;
        c->off = 0;
        ar->head = c;
    }
    p = c->data + c->off;
    c->off += n;
    ar->used += n;
    memset(p, 0, n);
    return p;
}

void *kp_arena_calloc(kp_arena_t *ar, size_t cnt, size_t size)
{
    if (size && cnt > SIZE_MAX / 4 / size)
        return NULL;
    return kp_arena_alloc(ar, cnt * size);
}

void kp_arena_free(kp_arena_t *ar)
{
    kp_arena_chunk_t *c = ar->head;
    while (c) {
        kp_arena_chunk_t *next = c->next;
        free(c);
        c = next;
    }
    ar->head = NULL;
    ar->used = 0;
}
