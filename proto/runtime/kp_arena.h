/*
 * kp_arena.h -- bump allocator for decoded messages. Everything a decode allocates (arrays,
 * nested structs, unknown-tag tables) lives in one arena and is freed at once.
 *
 * @thread any (an arena is owned by one thread at a time)
 */
#ifndef KP_ARENA_H
#define KP_ARENA_H

#include <stddef.h>

typedef struct kp_arena_chunk_s kp_arena_chunk_t;

typedef struct kp_arena_s {
    kp_arena_chunk_t *head;
    size_t used;  /**< bytes handed out so far */
    size_t limit; /**< 0 = unlimited; otherwise allocations beyond it fail */
} kp_arena_t;

void kp_arena_init(kp_arena_t *ar, size_t limit);
/** Zeroed, 16-byte aligned memory, or NULL when out of memory or over the limit. */
void *kp_arena_alloc(kp_arena_t *ar, size_t n);
/** kp_arena_alloc(cnt * size) with overflow check. */
void *kp_arena_calloc(kp_arena_t *ar, size_t cnt, size_t size);
void kp_arena_free(kp_arena_t *ar);

#endif /* KP_ARENA_H */
