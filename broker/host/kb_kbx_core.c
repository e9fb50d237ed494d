/*
 * kb_kbx_core.c -- the plain services of the kbx table: host info, fatal, logging, the counted
 * allocator, clocks, host-lent threads, latches, broker configuration and authorization.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "kb_host_int.h"
#include "kb_time.h"

/* ---- handles --------------------------------------------------------------------------------- */

void kb_host_misuse(kbx_host_t *host, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    kb_hlog(KB_HLOG_ERROR, "plugin %s broke the kbx contract: %s",
            host && host->magic == KB_HOST_MAGIC ? host->name : "?", msg);
}

kbx_host_t *kb_host_from(kbx_host_t *host, const char *fn)
{
    if (!host || host->magic != KB_HOST_MAGIC) {
        kb_hlog(KB_HLOG_ERROR, "kbx %s called with an invalid host handle %p", fn, (void *)host);
        return NULL;
    }
    return host;
}

bool kb_host_check(kbx_host_t *host, const void *obj, uint32_t magic, const char *what)
{
    uint32_t m;
    if (!obj) {
        kb_host_misuse(host, "NULL %s handle", what);
        return false;
    }
    memcpy(&m, obj, sizeof(m));
    if (m != magic) {
        kb_host_misuse(host, "%p is not a live %s handle (magic %08x)", obj, what, (unsigned)m);
        return false;
    }
    return true;
}

int64_t kb_host_now_ms(void)
{
    return kb_time_mono_ms();
}

/* ---- host, fatal, logging -------------------------------------------------------------------- */

static int32_t kb_kbx_host_info(kbx_host_t *host, kbx_host_info_t *info)
{
    kbx_host_info_t full;
    size_t n;

    if (!kb_host_from(host, "host_info") || !info || info->struct_size < sizeof(uint32_t))
        return KBX_ERR_INVALID;
    memset(&full, 0, sizeof(full));
    full.struct_size = info->struct_size;
    full.broker_id = kb_meta_node_id(host->h->meta);
    snprintf(full.cluster_id, sizeof(full.cluster_id), "%s", kb_meta_cluster_id(host->h->meta));
    snprintf(full.software, sizeof(full.software), "kbroker %s", KB_HOST_VERSION);
    n = info->struct_size < sizeof(full) ? info->struct_size : sizeof(full);
    memcpy(info, &full, n);
    return KBX_OK;
}

static void kb_kbx_fatal(kbx_host_t *host, const char *file, int32_t line, const char *msg)
{
    const char *name = host && host->magic == KB_HOST_MAGIC ? host->name : "?";
    kb_hlog(KB_HLOG_ERROR, "plugin %s: fatal error at %s:%d: %s; stopping the broker", name,
            file ? file : "?", (int)line, msg ? msg : "(no message)");
    /* The plugin found its own state corrupt; continuing could persist that. abort() keeps a
     * core file for the post-mortem. */
    abort();
}

static int kb_kbx_level(int32_t level)
{
    if (level <= KBX_LOG_ERROR)
        return KB_HLOG_ERROR;
    if (level >= KBX_LOG_TRACE)
        return KB_HLOG_TRACE;
    return (int)level - 1;
}

static int32_t kb_kbx_log_enabled(kbx_host_t *host, int32_t level, const char *component)
{
    (void)host;
    (void)component;
    return kb_hlog_enabled(kb_kbx_level(level));
}

static void kb_kbx_log_write(kbx_host_t *host, int32_t level, const char *component,
                             const char *msg)
{
    if (!kb_host_from(host, "log_write"))
        return;
    kb_hlog_plugin(kb_kbx_level(level), host->name, component, msg);
}

/* ---- memory: a 16-byte header (magic, size) keeps the plugin's blocks counted and aligned ---- */

#define KB_MEM_MAGIC 0x6b626d656d6f7279ull /* "kbmemory" */

typedef struct kb_mem_hdr_s {
    uint64_t magic;
    uint64_t size;
} kb_mem_hdr_t;

_Static_assert(sizeof(kb_mem_hdr_t) == 16, "the header keeps malloc's 16-byte alignment");

static void kb_kbx_mem_count(kbx_host_t *host, int64_t bytes, int64_t allocs)
{
    atomic_fetch_add(&host->mem_bytes, bytes);
    atomic_fetch_add(&host->mem_allocs, allocs);
    kb_gauge_add(host->m_bytes, bytes);
    kb_gauge_add(host->m_allocs, allocs);
}

static void *kb_kbx_mem_alloc(kbx_host_t *host, size_t size)
{
    kb_mem_hdr_t *hd;
    if (!kb_host_from(host, "mem_alloc") || size > SIZE_MAX - sizeof(*hd))
        return NULL;
    hd = malloc(sizeof(*hd) + size);
    if (!hd)
        return NULL;
    hd->magic = KB_MEM_MAGIC;
    hd->size = size;
    kb_kbx_mem_count(host, (int64_t)size, 1);
    return hd + 1;
}

static void *kb_kbx_mem_calloc(kbx_host_t *host, size_t nmemb, size_t size)
{
    void *p;
    if (size && nmemb > SIZE_MAX / size)
        return NULL;
    p = kb_kbx_mem_alloc(host, nmemb * size);
    if (p)
        memset(p, 0, nmemb * size);
    return p;
}

static kb_mem_hdr_t *kb_kbx_mem_hdr(kbx_host_t *host, void *ptr, const char *fn)
{
    kb_mem_hdr_t *hd = (kb_mem_hdr_t *)ptr - 1;
    if (hd->magic != KB_MEM_MAGIC) {
        kb_host_misuse(host, "%s(%p): not memory from mem_alloc (or freed twice)", fn, ptr);
        return NULL;
    }
    return hd;
}

static void kb_kbx_mem_free(kbx_host_t *host, void *ptr)
{
    kb_mem_hdr_t *hd;
    if (!ptr || !kb_host_from(host, "mem_free"))
        return;
    hd = kb_kbx_mem_hdr(host, ptr, "mem_free");
    if (!hd)
        return; /* leaking is safer than freeing a foreign block */
    kb_kbx_mem_count(host, -(int64_t)hd->size, -1);
    hd->magic = 0;
    free(hd);
}

static void *kb_kbx_mem_realloc(kbx_host_t *host, void *ptr, size_t size)
{
    kb_mem_hdr_t *hd, *nh;
    uint64_t old;
    if (!ptr)
        return kb_kbx_mem_alloc(host, size);
    if (!kb_host_from(host, "mem_realloc") || size > SIZE_MAX - sizeof(*hd))
        return NULL;
    hd = kb_kbx_mem_hdr(host, ptr, "mem_realloc");
    if (!hd)
        return NULL;
    old = hd->size;
    nh = realloc(hd, sizeof(*nh) + size);
    if (!nh)
        return NULL;
    nh->size = size;
    kb_kbx_mem_count(host, (int64_t)size - (int64_t)old, 0);
    return nh + 1;
}

/* ---- clocks ---------------------------------------------------------------------------------- */

static int64_t kb_kbx_clock_monotonic_ns(kbx_host_t *host)
{
    (void)host;
    return kb_time_mono_ns();
}

static int64_t kb_kbx_clock_wall_ms(kbx_host_t *host)
{
    (void)host;
    return kb_time_wall_ms();
}

/* ---- host-lent threads: a pthread calling fn until it returns KBX_THREAD_EXIT ---------------- */

struct kbx_thread {
    uint32_t magic;
    kbx_host_t *host;
    pthread_t thr;
    kbx_thread_fn fn;
    void *arg;
    char name[16];
};

static void *kb_kbx_thread_main(void *p)
{
    struct kbx_thread *t = p;
    int32_t r;

    pthread_setname_np(pthread_self(), t->name);
    do {
        r = t->fn(t->arg);
    } while (r == KBX_THREAD_CONTINUE);
    if (r != KBX_THREAD_EXIT)
        kb_host_misuse(t->host, "thread %s returned %d (neither CONTINUE nor EXIT); it ends",
                       t->name, (int)r);
    return NULL;
}

static int32_t kb_kbx_thread_start(kbx_host_t *host, const char *name, kbx_thread_fn fn, void *arg,
                                   kbx_thread_t **out)
{
    struct kbx_thread *t;
    sigset_t all, old;
    int rc;

    if (!kb_host_from(host, "thread_start") || !fn || !out)
        return KBX_ERR_INVALID;
    if (atomic_load(&host->dead))
        return KBX_ERR_SHUTDOWN;
    t = calloc(1, sizeof(*t));
    if (!t)
        return KBX_ERR_NOMEM;
    t->magic = KB_THREAD_MAGIC;
    t->host = host;
    t->fn = fn;
    t->arg = arg;
    /* Linux thread names hold 15 characters. */
    snprintf(t->name, sizeof(t->name), "%.15s", name && name[0] ? name : host->name);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&t->thr, NULL, kb_kbx_thread_main, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        t->magic = KB_DEAD_MAGIC;
        free(t);
        return rc == EAGAIN ? KBX_ERR_NOMEM : KBX_ERR_INVALID;
    }
    atomic_fetch_add(&host->n_threads, 1);
    *out = t;
    return KBX_OK;
}

static int32_t kb_kbx_thread_join(kbx_host_t *host, kbx_thread_t *t)
{
    if (!kb_host_from(host, "thread_join") || !kb_host_check(host, t, KB_THREAD_MAGIC, "thread"))
        return KBX_ERR_INVALID;
    if (pthread_equal(t->thr, pthread_self())) {
        kb_host_misuse(host, "thread %s joins itself", t->name);
        return KBX_ERR_INVALID;
    }
    pthread_join(t->thr, NULL);
    t->magic = KB_DEAD_MAGIC;
    atomic_fetch_sub(&host->n_threads, 1);
    free(t);
    return KBX_OK;
}

/* ---- latches --------------------------------------------------------------------------------- */

struct kbx_latch {
    uint32_t magic;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    bool set;
    int waiters;
};

static int32_t kb_kbx_latch_create(kbx_host_t *host, kbx_latch_t **out)
{
    struct kbx_latch *l;
    pthread_condattr_t ca;

    if (!kb_host_from(host, "latch_create") || !out)
        return KBX_ERR_INVALID;
    l = calloc(1, sizeof(*l));
    if (!l)
        return KBX_ERR_NOMEM;
    l->magic = KB_LATCH_MAGIC;
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_fetch_add(&host->n_latches, 1);
    *out = l;
    return KBX_OK;
}

static void kb_kbx_latch_set(kbx_host_t *host, kbx_latch_t *l)
{
    if (!kb_host_check(host, l, KB_LATCH_MAGIC, "latch"))
        return;
    pthread_mutex_lock(&l->mu);
    l->set = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static int32_t kb_kbx_latch_wait(kbx_host_t *host, kbx_latch_t *l, int64_t timeout_ms)
{
    struct timespec dl = {0, 0};
    int32_t rc;

    if (!kb_host_check(host, l, KB_LATCH_MAGIC, "latch"))
        return KBX_ERR_INVALID;
    if (timeout_ms > 0)
        dl = kb_time_mono_deadline(timeout_ms);
    pthread_mutex_lock(&l->mu);
    l->waiters++;
    while (!l->set && timeout_ms != 0) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&l->cv, &l->mu);
        } else if (pthread_cond_timedwait(&l->cv, &l->mu, &dl) == ETIMEDOUT) {
            break;
        }
    }
    rc = l->set ? KBX_OK : KBX_ERR_TIMEOUT;
    l->set = false;
    l->waiters--;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

static void kb_kbx_latch_destroy(kbx_host_t *host, kbx_latch_t *l)
{
    int waiters;
    if (!l || !kb_host_check(host, l, KB_LATCH_MAGIC, "latch"))
        return;
    pthread_mutex_lock(&l->mu);
    waiters = l->waiters;
    pthread_mutex_unlock(&l->mu);
    if (waiters) {
        kb_host_misuse(host, "latch_destroy while a thread waits on it (the latch is leaked)");
        return;
    }
    l->magic = KB_DEAD_MAGIC;
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    atomic_fetch_sub(&host->n_latches, 1);
    free(l);
}

/* ---- broker configuration -------------------------------------------------------------------- */

static int32_t kb_kbx_config_get(kbx_host_t *host, const char *key, char *buf, size_t size)
{
    const kb_config_t *cfg;
    const char *raw;
    int n;

    if (!kb_host_from(host, "config_get") || !key || (!buf && size))
        return KBX_ERR_INVALID;
    cfg = host->h->kb->cfg;
    /* Dynamic broker configs (node, then cluster default), then server.properties. */
    n = kb_meta_broker_config_get(host->h->meta, key, buf, size);
    if (n >= 0)
        return n;
    /* A key the table knows but the metadata layer does not render (none today): the text
     * as given. */
    if (kb_config_is_set(cfg, key) && (raw = kb_config_raw(cfg, key)))
        return snprintf(buf, size, "%s", raw);
    return KBX_ERR_NOT_FOUND;
}

typedef struct kb_kbx_keys_s {
    char **v;
    size_t n, cap;
    const char *prefix;
    bool nomem;
} kb_kbx_keys_t;

static void kb_kbx_keys_add(kb_kbx_keys_t *k, const char *key)
{
    if (strncmp(key, k->prefix, strlen(k->prefix)) != 0)
        return;
    for (size_t i = 0; i < k->n; i++)
        if (!strcmp(k->v[i], key))
            return;
    if (k->n == k->cap) {
        size_t nc = k->cap ? k->cap * 2 : 16;
        char **nv = realloc(k->v, nc * sizeof(*nv));
        if (!nv) {
            k->nomem = true;
            return;
        }
        k->v = nv;
        k->cap = nc;
    }
    if (!(k->v[k->n] = strdup(key)))
        k->nomem = true;
    else
        k->n++;
}

static int kb_kbx_keys_static(void *opaque, const char *key, const char *value)
{
    (void)value;
    kb_kbx_keys_add(opaque, key);
    return 0;
}

static int32_t kb_kbx_config_foreach(kbx_host_t *host, const char *prefix, kbx_config_fn fn,
                                     void *arg)
{
    kb_kbx_keys_t k = {.prefix = prefix ? prefix : ""};
    kb_kv_t *node = NULL, *dflt = NULL;
    size_t node_cnt = 0, dflt_cnt = 0;
    int32_t count = 0;
    char small[1024];

    if (!kb_host_from(host, "config_foreach") || !fn)
        return KBX_ERR_INVALID;
    kb_config_foreach_prefix(host->h->kb->cfg, k.prefix, kb_kbx_keys_static, &k);
    if (kb_meta_broker_dyncfg(host->h->meta, &node, &node_cnt, &dflt, &dflt_cnt) == 0) {
        for (size_t i = 0; i < node_cnt; i++)
            kb_kbx_keys_add(&k, node[i].key);
        for (size_t i = 0; i < dflt_cnt; i++)
            kb_kbx_keys_add(&k, dflt[i].key);
        kb_kv_free(node, node_cnt);
        kb_kv_free(dflt, dflt_cnt);
    }
    for (size_t i = 0; i < k.n && !k.nomem; i++) {
        int32_t len = kb_kbx_config_get(host, k.v[i], small, sizeof(small));
        char *big = NULL;
        if (len < 0)
            continue;
        if ((size_t)len >= sizeof(small)) {
            big = malloc((size_t)len + 1);
            if (!big) {
                k.nomem = true;
                break;
            }
            kb_kbx_config_get(host, k.v[i], big, (size_t)len + 1);
        }
        fn(arg, k.v[i], big ? big : small);
        free(big);
        count++;
    }
    for (size_t i = 0; i < k.n; i++)
        free(k.v[i]);
    free(k.v);
    return k.nomem ? KBX_ERR_NOMEM : count;
}

/* ---- authorization --------------------------------------------------------------------------- */

static int32_t kb_kbx_authorize(kbx_host_t *host, const char *principal, const char *client_host,
                                int32_t resource_type, const char *resource_name, int32_t operation)
{
    kb_host_t *h;
    int32_t rc = KBX_AUTHZ_ALLOWED;

    if (!kb_host_from(host, "authorize") || !principal || !resource_name)
        return KBX_ERR_INVALID;
    h = host->h;
    pthread_rwlock_rdlock(&h->authz_rw);
    if (h->authz)
        rc = h->authz(h->authz_opaque, principal, client_host, resource_type, resource_name,
                      operation);
    pthread_rwlock_unlock(&h->authz_rw);
    return rc;
}

void kb_host_set_authorizer(kb_host_t *h, kb_host_authz_fn *fn, void *opaque)
{
    pthread_rwlock_wrlock(&h->authz_rw);
    h->authz = fn;
    h->authz_opaque = opaque;
    pthread_rwlock_unlock(&h->authz_rw);
}

/* ---- completions without work ---------------------------------------------------------------- */

typedef struct kb_host_done_ev_s {
    kb_hev_t ev;
    kbx_done_fn done;
    void *arg;
    int32_t status;
} kb_host_done_ev_t;

static void kb_host_done_run(kb_hq_t *q, kb_hev_t *ev, bool run)
{
    kb_host_done_ev_t *d = (kb_host_done_ev_t *)ev;
    kbx_host_t *host = ev->owner;
    (void)q;
    if (!atomic_load(&host->dead))
        d->done(d->arg, run ? d->status : KBX_ERR_SHUTDOWN);
    atomic_fetch_sub(&host->n_ops, 1);
    free(d);
}

int32_t kb_host_post_done(kbx_host_t *host, kbx_done_fn done, void *arg, int32_t status)
{
    kb_host_done_ev_t *d = calloc(1, sizeof(*d));
    if (!d)
        return KBX_ERR_NOMEM;
    d->ev.fn = kb_host_done_run;
    d->ev.owner = host;
    atomic_init(&d->ev.ready, true);
    d->done = done;
    d->arg = arg;
    d->status = status;
    atomic_fetch_add(&host->n_ops, 1);
    kb_hq_push(&host->h->ev, &d->ev);
    return KBX_OK;
}

void kb_kbx_core_fill(kbx_api_t *t)
{
    t->host_info = kb_kbx_host_info;
    t->fatal = kb_kbx_fatal;
    t->log_enabled = kb_kbx_log_enabled;
    t->log_write = kb_kbx_log_write;
    t->mem_alloc = kb_kbx_mem_alloc;
    t->mem_calloc = kb_kbx_mem_calloc;
    t->mem_realloc = kb_kbx_mem_realloc;
    t->mem_free = kb_kbx_mem_free;
    t->clock_monotonic_ns = kb_kbx_clock_monotonic_ns;
    t->clock_wall_ms = kb_kbx_clock_wall_ms;
    t->thread_start = kb_kbx_thread_start;
    t->thread_join = kb_kbx_thread_join;
    t->latch_create = kb_kbx_latch_create;
    t->latch_set = kb_kbx_latch_set;
    t->latch_wait = kb_kbx_latch_wait;
    t->latch_destroy = kb_kbx_latch_destroy;
    t->config_get = kb_kbx_config_get;
    t->config_foreach = kb_kbx_config_foreach;
    t->authorize = kb_kbx_authorize;
}
