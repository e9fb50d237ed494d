#include "kb_api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kb_err.h"
#include "kb_props.h"
#include "kp_msgs.h"

/* Kafka API keys are int16; we index a table by key and ignore keys outside it. */
#define KB_API_KEYS 1024

typedef struct kb_api_entry_s {
    kb_api_range_t range;
    kb_api_handler_fn *fn;
    void *opaque;
    _Atomic int active;  /* calls running */
    _Atomic int removed; /* unregistered: the last call to end wakes the unregistering thread */
} kb_api_entry_t;

struct kb_api_registry_s {
    pthread_rwlock_t lock;  /* protects tab[] */
    pthread_mutex_t mu;     /* pairs with idle_cv */
    pthread_cond_t idle_cv; /* broadcast when an entry's active count drops to 0 */
    kb_api_entry_t *tab[KB_API_KEYS];
    char *ctrl_listeners; /* comma list, or NULL; under lock */
};

kb_api_registry_t *kb_api_registry_new(void)
{
    kb_api_registry_t *reg = calloc(1, sizeof(*reg));
    if (!reg)
        return NULL;
    pthread_rwlock_init(&reg->lock, NULL);
    pthread_mutex_init(&reg->mu, NULL);
    pthread_cond_init(&reg->idle_cv, NULL);
    return reg;
}

void kb_api_registry_free(kb_api_registry_t *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < KB_API_KEYS; i++)
        free(reg->tab[i]);
    pthread_cond_destroy(&reg->idle_cv);
    pthread_mutex_destroy(&reg->mu);
    pthread_rwlock_destroy(&reg->lock);
    free(reg->ctrl_listeners);
    free(reg);
}

int kb_api_set_controller_listeners(kb_api_registry_t *reg, const char *names)
{
    char *copy = NULL;

    if (names && *names && !(copy = strdup(names)))
        return KB_E_NOMEM;
    pthread_rwlock_wrlock(&reg->lock);
    free(reg->ctrl_listeners);
    reg->ctrl_listeners = copy;
    pthread_rwlock_unlock(&reg->lock);
    return 0;
}

bool kb_api_advertised_on(kb_api_registry_t *reg, const kb_api_range_t *api, const char *listener)
{
    bool yes;

    if (!(api->flags & KB_API_CONTROLLER_ONLY))
        return true;
    pthread_rwlock_rdlock(&reg->lock);
    yes = kb_props_list_has(reg->ctrl_listeners, listener, true);
    pthread_rwlock_unlock(&reg->lock);
    return yes;
}

int kb_api_register(kb_api_registry_t *reg, int16_t api_key, int16_t min_ver, int16_t max_ver,
                    kb_api_handler_fn *fn, void *opaque, unsigned flags)
{
    const kp_api_info_t *info = kp_api_lookup(api_key);
    kb_api_entry_t *e;
    int r = 0;

    if (!info || api_key < 0 || api_key >= KB_API_KEYS)
        return KB_E_NOT_FOUND;
    if (!fn || min_ver > max_ver || min_ver < info->min_ver || max_ver > info->max_ver)
        return KB_E_RANGE;
    e = calloc(1, sizeof(*e));
    if (!e)
        return KB_E_NOMEM;
    e->range.api_key = api_key;
    e->range.min_ver = min_ver;
    e->range.max_ver = max_ver;
    e->range.flex_min = info->flex_min;
    e->range.name = info->name;
    e->range.flags = flags;
    e->fn = fn;
    e->opaque = opaque;
    pthread_rwlock_wrlock(&reg->lock);
    if (reg->tab[api_key])
        r = KB_E_EXISTS;
    else
        reg->tab[api_key] = e;
    pthread_rwlock_unlock(&reg->lock);
    if (r)
        free(e);
    return r;
}

int kb_api_unregister(kb_api_registry_t *reg, int16_t api_key)
{
    kb_api_entry_t *e;

    if (api_key < 0 || api_key >= KB_API_KEYS)
        return KB_E_NOT_FOUND;
    pthread_rwlock_wrlock(&reg->lock);
    e = reg->tab[api_key];
    reg->tab[api_key] = NULL;
    pthread_rwlock_unlock(&reg->lock);
    if (!e)
        return KB_E_NOT_FOUND;
    /* New calls can no longer find the entry; wait for the running ones. */
    atomic_store(&e->removed, 1);
    pthread_mutex_lock(&reg->mu);
    while (atomic_load(&e->active) > 0)
        pthread_cond_wait(&reg->idle_cv, &reg->mu);
    pthread_mutex_unlock(&reg->mu);
    free(e);
    return 0;
}

size_t kb_api_list(kb_api_registry_t *reg, kb_api_range_t *out, size_t max)
{
    size_t n = 0;
    pthread_rwlock_rdlock(&reg->lock);
    for (size_t i = 0; i < KB_API_KEYS; i++) {
        if (!reg->tab[i])
            continue;
        if (n < max)
            out[n] = reg->tab[i]->range;
        n++;
    }
    pthread_rwlock_unlock(&reg->lock);
    return n;
}

int kb_api_get(kb_api_registry_t *reg, int16_t api_key, kb_api_range_t *out)
{
    int r = KB_E_NOT_FOUND;
    if (api_key < 0 || api_key >= KB_API_KEYS)
        return r;
    pthread_rwlock_rdlock(&reg->lock);
    if (reg->tab[api_key]) {
        *out = reg->tab[api_key]->range;
        r = 0;
    }
    pthread_rwlock_unlock(&reg->lock);
    return r;
}

int kb_api_call_begin(kb_api_registry_t *reg, int16_t api_key, kb_api_call_t *call)
{
    kb_api_entry_t *e;
    if (api_key < 0 || api_key >= KB_API_KEYS)
        return KB_E_NOT_FOUND;
    pthread_rwlock_rdlock(&reg->lock);
    e = reg->tab[api_key];
    if (e) {
        /* Taken under the read lock, so unregister (write lock) cannot have passed yet. */
        atomic_fetch_add(&e->active, 1);
        call->fn = e->fn;
        call->opaque = e->opaque;
        call->entry = e;
    }
    pthread_rwlock_unlock(&reg->lock);
    return e ? 0 : KB_E_NOT_FOUND;
}

void kb_api_call_end(kb_api_registry_t *reg, kb_api_call_t *call)
{
    kb_api_entry_t *e = call->entry;
    if (atomic_fetch_sub(&e->active, 1) == 1 && atomic_load(&e->removed)) {
        pthread_mutex_lock(&reg->mu);
        pthread_cond_broadcast(&reg->idle_cv);
        pthread_mutex_unlock(&reg->mu);
    }
    call->entry = NULL;
}
