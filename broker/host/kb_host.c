/*
 * kb_host.c -- the "host" module of kbroker: the kbx table, the host threads, and loading and
 * unloading the plugins named by plugin.paths.
 *
 * Loading (module init, after the api module, before the server listens): each plugin.paths
 * entry is "PATH" or "FLAG=PATH" (kb_host_entry_parse); FLAG is the feature flag the loader is
 * given (mirror.enable for kmirror.so). kbx_loader_load checks the flag, dlopens, checks the
 * descriptor (ABI major equal, minor <= ours) and calls init. A refused plugin is logged with
 * the loader's reason and kbroker goes on without it. Unloading (module stop, after the network
 * server drained and cancelled every deferred request, so RPC tokens are settled): the plugin's
 * waiting local requests are cancelled, then fini, in reverse load order; the image is never
 * dlclose()d. What a plugin left registered after fini is reported and released (listeners,
 * metrics); its late callbacks are never run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kb_host_int.h"
#include "kb_hostmod.h"
#ifdef KB_HAVE_ACL
#include "kb_aclmod.h"
#endif

/* The feature flag of the mirror plugin (kmirror.so): the one whose write modes of mirror
 * partitions the host waits for (kb_partmgr_set_mirror_plugin). */
#define KB_HOST_MIRROR_FLAG "mirror.enable"

/* ---- plugin.paths entries -------------------------------------------------------------------- */

int kb_host_entry_parse(const char *entry, char *flag, size_t flag_size, char *path,
                        size_t path_size)
{
    const char *eq, *base, *p;
    char stem[256];
    size_t n;

    flag[0] = path[0] = '\0';
    if (!entry || !entry[0])
        return -1;
    /* "FLAG=PATH": a flag is a config key, which never contains '/'. */
    eq = strchr(entry, '=');
    if (eq && eq != entry && memchr(entry, '/', (size_t)(eq - entry)) == NULL) {
        if ((size_t)(eq - entry) >= flag_size || strlen(eq + 1) >= path_size || !eq[1])
            return -1;
        memcpy(flag, entry, (size_t)(eq - entry));
        flag[eq - entry] = '\0';
        snprintf(path, path_size, "%s", eq + 1);
        return 0;
    }
    if (strlen(entry) >= path_size)
        return -1;
    snprintf(path, path_size, "%s", entry);
    base = strrchr(entry, '/');
    base = base ? base + 1 : entry;
    if (!strncmp(base, "lib", 3) && base[3] && base[3] != '.')
        base += 3;
    p = strchr(base, '.');
    n = p ? (size_t)(p - base) : strlen(base);
    if (n >= sizeof(stem))
        n = sizeof(stem) - 1;
    memcpy(stem, base, n);
    stem[n] = '\0';
    p = stem;
    if (p[0] == 'k' && p[1])
        p++; /* kbx plugins are named k<feature>.so */
    if (!p[0] || (size_t)snprintf(flag, flag_size, "%s.enable", p) >= flag_size) {
        flag[0] = path[0] = '\0';
        return -1;
    }
    return 0;
}

/* The feature flag's value: a boolean key of kbroker's table, or the text "true" for keys it
 * does not know (mirror.* keys other than mirror.enable are kept as text). */
static bool kb_host_flag_on(const kb_config_t *cfg, const char *flag)
{
    const kb_conf_def_t *d = kb_config_def(flag);
    const char *raw;
    if (d && d->type == KB_CT_BOOL)
        return kb_config_bool(cfg, flag);
    raw = kb_config_raw(cfg, flag);
    return raw && !strcasecmp(raw, "true");
}

/* ---- the per-broker registry ----------------------------------------------------------------- */

static pthread_mutex_t kb_host_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const kb_broker_t *kb;
    kb_host_t *h;
} kb_host_reg[16];

kb_host_t *kb_host_of(const kb_broker_t *kb)
{
    kb_host_t *h = NULL;
    pthread_mutex_lock(&kb_host_reg_mu);
    for (size_t i = 0; i < sizeof(kb_host_reg) / sizeof(kb_host_reg[0]); i++)
        if (kb_host_reg[i].kb == kb)
            h = kb_host_reg[i].h;
    pthread_mutex_unlock(&kb_host_reg_mu);
    return h;
}

static void kb_host_reg_set(const kb_broker_t *kb, kb_host_t *h)
{
    pthread_mutex_lock(&kb_host_reg_mu);
    for (size_t i = 0; i < sizeof(kb_host_reg) / sizeof(kb_host_reg[0]); i++) {
        if (h ? kb_host_reg[i].kb == NULL : kb_host_reg[i].kb == kb) {
            kb_host_reg[i].kb = h ? kb : NULL;
            kb_host_reg[i].h = h;
            break;
        }
    }
    pthread_mutex_unlock(&kb_host_reg_mu);
}

size_t kb_host_plugin_count(kb_host_t *h)
{
    size_t n = 0;
    pthread_mutex_lock(&h->mu);
    for (kbx_host_t *p = h->plugins; p; p = p->next)
        n += p->loaded && !atomic_load(&p->dead);
    pthread_mutex_unlock(&h->mu);
    return n;
}

/* Whether a plugin enabled by mirror.enable is loaded and running. */
static bool kb_host_mirror_running(kb_host_t *h)
{
    bool on = false;
    pthread_mutex_lock(&h->mu);
    for (kbx_host_t *p = h->plugins; p; p = p->next)
        on |= p->loaded && !atomic_load(&p->dead) && !strcmp(p->flag, KB_HOST_MIRROR_FLAG);
    pthread_mutex_unlock(&h->mu);
    return on;
}

/* ---- metrics: one collector for every plugin's accounting ------------------------------------ */

static void kb_host_collect(void *opaque, kb_metrics_emit_t *em)
{
    kb_host_t *h = opaque;
    pthread_mutex_lock(&h->mu);
    for (kbx_host_t *p = h->plugins; p; p = p->next) {
        const kbx_plugin_desc_t *d;
        char abi[16];
        const char *l[] = {"plugin", p->name, NULL};
        if (!p->loaded || atomic_load(&p->dead))
            continue;
        d = kbx_loader_desc(p->loaded);
        snprintf(abi, sizeof(abi), "%u.%u", (unsigned)d->abi_major, (unsigned)d->abi_minor);
        {
            const char *li[] = {"plugin", p->name, "version", d->version ? d->version : "",
                                "abi",    abi,     NULL};
            kb_metrics_emit(em, "kbroker_kbx_plugin_info",
                            "Constant 1 for every loaded plugin, with its version and kbx ABI.",
                            KB_METRIC_GAUGE, li, 1);
        }
        kb_metrics_emit(em, "kbroker_kbx_memory_bytes",
                        "Bytes a plugin holds from the kbx allocator (mem_alloc and friends).",
                        KB_METRIC_GAUGE, l, (double)atomic_load(&p->mem_bytes));
        kb_metrics_emit(em, "kbroker_kbx_memory_allocations",
                        "Blocks a plugin holds from the kbx allocator.", KB_METRIC_GAUGE, l,
                        (double)atomic_load(&p->mem_allocs));
        kb_metrics_emit(em, "kbroker_kbx_threads", "Host-lent threads a plugin runs.",
                        KB_METRIC_GAUGE, l, (double)atomic_load(&p->n_threads));
        kb_metrics_emit(em, "kbroker_kbx_timers", "Timers a plugin holds.", KB_METRIC_GAUGE, l,
                        (double)atomic_load(&p->n_timers));
        kb_metrics_emit(em, "kbroker_kbx_pending_tokens",
                        "Deferred RPC responses a plugin has not completed yet.", KB_METRIC_GAUGE,
                        l, (double)atomic_load(&p->n_tokens));
        kb_metrics_emit(em, "kbroker_kbx_pending_operations",
                        "Asynchronous kbx operations of a plugin not completed yet.",
                        KB_METRIC_GAUGE, l, (double)atomic_load(&p->n_ops));
    }
    pthread_mutex_unlock(&h->mu);
}

/* ---- loading --------------------------------------------------------------------------------- */

static void kb_host_load_one(kb_host_t *h, const char *entry)
{
    const kb_config_t *cfg = h->kb->cfg;
    char flag[256], path[4096], err[1024];
    kbx_loader_opts_t opts;
    kbx_host_t *host, **tail;
    const kbx_plugin_desc_t *d;
    int32_t rc;
    bool mirror;

    if (kb_host_entry_parse(entry, flag, sizeof(flag), path, sizeof(path)) != 0) {
        kb_hlog(KB_HLOG_ERROR, "plugin.paths: cannot use entry '%s' (PATH or FLAG=PATH)", entry);
        return;
    }
    host = calloc(1, sizeof(*host));
    if (!host || !(host->path = strdup(path)) || !(host->flag = strdup(flag))) {
        kb_hlog(KB_HLOG_ERROR, "plugin %s: out of memory", path);
        if (host) {
            free(host->path);
            free(host);
        }
        return;
    }
    host->magic = KB_HOST_MAGIC;
    host->h = h;
    {
        const char *b = strrchr(path, '/');
        b = b ? b + 1 : path;
        snprintf(host->name, sizeof(host->name), "%.*s", (int)strcspn(b, "."), b);
    }
    pthread_mutex_lock(&h->mu);
    for (tail = &h->plugins; *tail; tail = &(*tail)->next)
        ;
    *tail = host;
    pthread_mutex_unlock(&h->mu);

    memset(&opts, 0, sizeof(opts));
    opts.enabled = kb_host_flag_on(cfg, flag);
    /* The mirror plugin decides the write modes of mirror partitions (docs/broker.md "Mirror
     * topics without the plugin"); said before init so that no client write in between gets the
     * not-retriable answer of a broker without it, taken back if the load fails. */
    mirror = opts.enabled && !strcmp(flag, KB_HOST_MIRROR_FLAG);
    if (mirror)
        kb_meta_set_mirror_plugin(h->meta, true);
    opts.flag_name = host->flag;
    opts.dlclose = false; /* never: see docs/abi.md */
    err[0] = '\0';
    rc = kbx_loader_load(path, &opts, &h->table, host, &host->loaded, err, sizeof(err));
    if (rc != KBX_OK) {
        atomic_store(&host->dead, true);
        if (mirror)
            kb_meta_set_mirror_plugin(h->meta, kb_host_mirror_running(h));
        if (rc == KBX_ERR_STATE && !opts.enabled)
            kb_hlog(KB_HLOG_INFO, "%s", err);
        else
            kb_hlog(KB_HLOG_ERROR, "plugin refused, kbroker continues without it: %s (%s)", err,
                    kbx_err_str(rc));
        /* init may have registered things before it failed (a plugin bug): take them back. */
        kb_hlocal_cancel_plugin(h, host);
        kb_kbx_listen_drop_all(h, host);
        kb_kbx_metric_drop_all(h, host);
        return;
    }
    d = kbx_loader_desc(host->loaded);
    pthread_mutex_lock(&h->mu);
    snprintf(host->name, sizeof(host->name), "%s", d->name);
    pthread_mutex_unlock(&h->mu);
    kb_hlog(KB_HLOG_INFO,
            "plugin %s %s (build %s, kbx ABI %u.%u, host %u.%u) loaded from %s (%s=true)", d->name,
            d->version ? d->version : "?", d->build_id && d->build_id[0] ? d->build_id : "-",
            (unsigned)d->abi_major, (unsigned)d->abi_minor, (unsigned)KBX_ABI_MAJOR,
            (unsigned)KBX_ABI_MINOR, path, flag);
}

static void kb_host_load_all(kb_host_t *h)
{
    const char *paths = h->kb->cfg->plugin_paths;
    char *dup, *save = NULL;

    if (!paths || !paths[0])
        return;
    dup = strdup(paths);
    if (!dup)
        return;
    for (char *e = strtok_r(dup, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
        while (*e == ' ')
            e++;
        if (*e)
            kb_host_load_one(h, e);
    }
    free(dup);
}

static void kb_host_unload(kb_host_t *h, kbx_host_t *host)
{
    const char *name = host->name;
    kbx_loaded_t *lp = host->loaded;

    kb_hlog(KB_HLOG_INFO, "plugin %s: stopping", name);
    /* Its local requests that wait (long-poll Fetch, JoinGroup, ...) end now, as for a client
     * that went away, so that fini does not wait for them. */
    kb_hlocal_cancel_plugin(h, host);
    kbx_loader_unload(lp); /* fini; never dlclose */
    pthread_mutex_lock(&h->mu);
    host->loaded = NULL;
    pthread_mutex_unlock(&h->mu);
    atomic_store(&host->dead, true);
    if (!strcmp(host->flag, KB_HOST_MIRROR_FLAG))
        kb_meta_set_mirror_plugin(h->meta, kb_host_mirror_running(h));
    if (atomic_load(&host->n_threads) || atomic_load(&host->n_timers) ||
        atomic_load(&host->n_listeners) || atomic_load(&host->n_rpcs) ||
        atomic_load(&host->n_metrics) || atomic_load(&host->n_parts) ||
        atomic_load(&host->n_latches) || atomic_load(&host->n_ops) ||
        atomic_load(&host->n_tokens) || atomic_load(&host->mem_allocs))
        kb_hlog(KB_HLOG_WARN,
                "plugin %s left after fini: %d threads, %d timers, %d listeners, %d RPC "
                "handlers, %d metrics, %d partition handles, %d latches, %d operations, "
                "%d tokens, %lld bytes in %lld blocks",
                name, atomic_load(&host->n_threads), atomic_load(&host->n_timers),
                atomic_load(&host->n_listeners), atomic_load(&host->n_rpcs),
                atomic_load(&host->n_metrics), atomic_load(&host->n_parts),
                atomic_load(&host->n_latches), atomic_load(&host->n_ops),
                atomic_load(&host->n_tokens), (long long)atomic_load(&host->mem_bytes),
                (long long)atomic_load(&host->mem_allocs));
    kb_kbx_listen_drop_all(h, host);
    kb_kbx_metric_drop_all(h, host);
    kb_hlog(KB_HLOG_INFO, "plugin %s stopped", name);
}

/* ---- the module ------------------------------------------------------------------------------ */

static void kb_host_free(kb_host_t *h)
{
    kbx_host_t *p = h->plugins;
    while (p) {
        kbx_host_t *n = p->next;
        free(p->path);
        free(p->flag);
        p->magic = KB_DEAD_MAGIC;
        free(p);
        p = n;
    }
    for (size_t i = 0; i < sizeof(h->tok_ring) / sizeof(h->tok_ring[0]); i++)
        free(h->tok_ring[i]); /* retired tokens: their mutexes are unused */
    kb_hrecords_close(&h->rec);
    kb_hctrl_destroy(h);
    kb_hq_destroy(&h->ev);
    kb_hlocal_destroy(&h->local);
    pthread_rwlock_destroy(&h->authz_rw);
    pthread_mutex_destroy(&h->tok_mu);
    pthread_mutex_destroy(&h->met_mu);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

#ifdef KB_HAVE_ACL
/* kbx authorize() through broker/acl. Codes outside int8 name no resource type / operation. */
static int32_t kb_host_acl_authz(void *opaque, const char *principal, const char *client_host,
                                 int32_t resource_type, const char *resource_name,
                                 int32_t operation)
{
    if (resource_type < INT8_MIN || resource_type > INT8_MAX || operation < INT8_MIN ||
        operation > INT8_MAX)
        return KBX_AUTHZ_DENIED;
    return kb_acl_authorize(opaque, principal, client_host, (int8_t)operation,
                            (int8_t)resource_type, resource_name)
               ? KBX_AUTHZ_ALLOWED
               : KBX_AUTHZ_DENIED;
}
#endif

static int kb_module_host_init(kb_broker_t *kb, void **statep, char *errstr, size_t errstr_size)
{
    const kb_config_t *cfg = kb->cfg;
    kb_apisvc_t *api = kb_apisvc_of(kb);
    kb_host_t *h;
    char dir[4096];

    if (!api) {
        snprintf(errstr, errstr_size, "the plugin host needs the api module");
        return -1;
    }
    h = calloc(1, sizeof(*h));
    if (!h) {
        snprintf(errstr, errstr_size, "out of memory");
        return -1;
    }
    h->kb = kb;
    h->api = api;
    h->meta = api->meta;
    pthread_mutex_init(&h->mu, NULL);
    pthread_mutex_init(&h->tok_mu, NULL);
    pthread_mutex_init(&h->met_mu, NULL);
    pthread_rwlock_init(&h->authz_rw, NULL);
    atomic_init(&h->local_corr, 1);
    kb_hq_init(&h->ev, "kb-kbx-event");
    kb_hlocal_init(&h->local);
    kb_htimers_init(&h->timers);
    snprintf(h->local_listener, sizeof(h->local_listener), "%s",
             cfg->inter_broker_listener_name && cfg->inter_broker_listener_name[0]
                 ? cfg->inter_broker_listener_name
             : cfg->lst_cnt ? cfg->lst[0].name
                            : "PLAINTEXT");

    h->table.struct_size = sizeof(h->table);
    h->table.abi_major = KBX_ABI_MAJOR;
    h->table.abi_minor = KBX_ABI_MINOR;
    kb_kbx_core_fill(&h->table);
    kb_kbx_timer_fill(&h->table);
    kb_kbx_metric_fill(&h->table);
    kb_kbx_rpc_fill(&h->table);
    kb_kbx_listen_fill(&h->table);
    kb_kbx_part_fill(&h->table);
    kb_kbx_records_fill(&h->table);
    kb_kbx_local_fill(&h->table);

    snprintf(dir, sizeof(dir), "%.*s",
             (int)strcspn(cfg->eff_log_dirs ? cfg->eff_log_dirs : ".", ","),
             cfg->eff_log_dirs ? cfg->eff_log_dirs : ".");
    if (kb_hrecords_open(&h->rec, dir, errstr, errstr_size) != 0) {
        kb_htimers_stop(&h->timers);
        kb_host_free(h);
        return -1;
    }
    if (kb_hq_start(&h->ev) != 0 || kb_hlocal_start(h) != 0 || kb_htimers_start(&h->timers) != 0) {
        snprintf(errstr, errstr_size, "cannot start the plugin host threads");
        kb_hq_stop(&h->ev);
        kb_hlocal_stop(h);
        kb_htimers_stop(&h->timers);
        kb_host_free(h);
        return -1;
    }
    if (kb_hrecords_migrate(h, errstr, errstr_size) != 0) {
        kb_hlocal_stop(h);
        kb_hq_stop(&h->ev);
        kb_htimers_stop(&h->timers);
        kb_host_free(h);
        return -1;
    }
    if (kb_hctrl_init(h) != 0) {
        snprintf(errstr, errstr_size, "out of memory");
        kb_hlocal_stop(h);
        kb_hq_stop(&h->ev);
        kb_htimers_stop(&h->timers);
        kb_host_free(h);
        return -1;
    }
    h->collector = kb_metrics_collector_add(kb->metrics, kb_host_collect, h);
    kb_host_reg_set(kb, h);
#ifdef KB_HAVE_ACL
    /* Before any plugin runs: its authorize() calls get the ACL component's answers. The acl
     * module is initialised before this one and finalised after it. */
    if (kb_acl_of(kb) && kb_acl_enabled(kb_acl_of(kb)))
        kb_host_set_authorizer(h, kb_host_acl_authz, kb_acl_of(kb));
#endif
    kb_host_load_all(h);
    *statep = h;
    return 0;
}

static void kb_module_host_stop(kb_broker_t *kb, void *state)
{
    kb_host_t *h = state;
    (void)kb;
    /* Reverse load order. The network server has stopped: no handler runs, every deferred
     * RPC was completed or cancelled. */
    for (;;) {
        kbx_host_t *last = NULL;
        pthread_mutex_lock(&h->mu);
        for (kbx_host_t *p = h->plugins; p; p = p->next)
            if (p->loaded)
                last = p;
        pthread_mutex_unlock(&h->mu);
        if (!last)
            break;
        kb_host_unload(h, last);
    }
    kb_hctrl_stop(h);
    kb_hlocal_stop(h);
    kb_hq_stop(&h->ev);
    kb_htimers_stop(&h->timers);
}

static void kb_module_host_fini(kb_broker_t *kb, void *state)
{
    kb_host_t *h = state;
    kb_host_reg_set(kb, NULL);
    if (!h)
        return;
    /* The metrics endpoint still serves until after the modules are gone. */
    if (h->collector)
        kb_metrics_collector_remove(kb->metrics, h->collector);
    kb_host_free(h);
}

const kb_module_t kb_module_host = {
    .name = "host",
    .init = kb_module_host_init,
    .stop = kb_module_host_stop,
    .fini = kb_module_host_fini,
};
