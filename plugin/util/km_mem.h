/*
 * km_mem.h - plugin allocations. Everything goes to the host allocator (kbx mem_*), so the
 * host counts it and the fake host can inject failures. Never mix with malloc/free.
 */
#ifndef KM_MEM_H
#define KM_MEM_H

#include <stddef.h>

#include "util/km_types.h"

/** malloc through the host. Returns NULL on failure. @thread any */
void *km_malloc(km_plugin_t *cm, size_t size);
/** calloc through the host (overflow-checked by the host). @thread any */
void *km_calloc(km_plugin_t *cm, size_t nmemb, size_t size);
/** realloc through the host; on failure ptr is untouched and NULL returned. @thread any */
void *km_realloc(km_plugin_t *cm, void *ptr, size_t size);
/** free through the host; NULL is fine. @thread any */
void km_free(km_plugin_t *cm, void *ptr);
/** Copy of s (caller owns, km_free). NULL on failure. @thread any */
char *km_strdup(km_plugin_t *cm, const char *s);
/** Copy of the first n bytes of s plus a NUL (caller owns). NULL on failure. @thread any */
char *km_strndup(km_plugin_t *cm, const char *s, size_t n);

#endif /* KM_MEM_H */
