#include "util/km_mem.h"

#include <string.h>

#include "core/km_plugin_types.h"

void *km_malloc(km_plugin_t *cm, size_t size)
{
    return cm->ref.api->mem_alloc(cm->ref.host, size);
}

void *km_calloc(km_plugin_t *cm, size_t nmemb, size_t size)
{
    return cm->ref.api->mem_calloc(cm->ref.host, nmemb, size);
}

void *km_realloc(km_plugin_t *cm, void *ptr, size_t size)
{
    return cm->ref.api->mem_realloc(cm->ref.host, ptr, size);
}

void km_free(km_plugin_t *cm, void *ptr)
{
    cm->ref.api->mem_free(cm->ref.host, ptr);
}

char *km_strndup(km_plugin_t *cm, const char *s, size_t n)
{
    char *d = km_malloc(cm, n + 1);

    if (d == NULL)
        return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *km_strdup(km_plugin_t *cm, const char *s)
{
    return km_strndup(cm, s, strlen(s));
}
