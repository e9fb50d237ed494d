/*
 * kbx_loader.c - host-side plugin loader. See kbx_loader.h.
 */
#include "kbx_loader.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kbx_loaded {
    void *dl;                      /* dlopen handle */
    const kbx_plugin_desc_t *desc; /* owned by the plugin image */
    void *ctx;                     /* what init returned */
    bool dlclose;
};

/* Bytes of the descriptor needed to read struct_size, abi_major and abi_minor. */
#define KBX_LOADER_DESC_VERSION_END (offsetof(kbx_plugin_desc_t, abi_minor) + sizeof(uint16_t))

__attribute__((format(printf, 3, 4))) static void kbx_loader_errf(char *errbuf, size_t errbuf_size,
                                                                  const char *fmt, ...)
{
    va_list ap;

    if (errbuf == NULL || errbuf_size == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(errbuf, errbuf_size, fmt, ap);
    va_end(ap);
}

const char *kbx_err_str(int32_t err)
{
    switch (err) {
#define KBX_LOADER_ERR_CASE(code, desc)                                                            \
    case code:                                                                                     \
        return desc;
        KBX_ERR_MAP(KBX_LOADER_ERR_CASE)
#undef KBX_LOADER_ERR_CASE
    default:
        return "unknown error";
    }
}

size_t kbx_ops_copy(void *dst, size_t dst_size, const void *src)
{
    uint32_t src_size;
    size_t n;

    memset(dst, 0, dst_size);
    if (src == NULL)
        return 0;
    memcpy(&src_size, src, sizeof(src_size));
    if (src_size < sizeof(uint32_t))
        return 0;
    n = src_size < dst_size ? src_size : dst_size;
    memcpy(dst, src, n);
    src_size = (uint32_t)n;
    memcpy(dst, &src_size, sizeof(src_size));
    return n;
}

static int32_t kbx_loader_check_api(const kbx_api_t *api, char *errbuf, size_t errbuf_size)
{
    if (api == NULL || api->struct_size < KBX_API_SIZE_1_0 || api->abi_major != KBX_ABI_MAJOR) {
        kbx_loader_errf(errbuf, errbuf_size,
                        "host bug: the kbx API table is missing or not a %d.x table",
                        KBX_ABI_MAJOR);
        return KBX_ERR_INVALID;
    }
    return KBX_OK;
}

int32_t kbx_loader_check_desc(const kbx_plugin_desc_t *desc, const char *who, const kbx_api_t *api,
                              char *errbuf, size_t errbuf_size)
{
    int32_t err;

    err = kbx_loader_check_api(api, errbuf, errbuf_size);
    if (err != KBX_OK)
        return err;
    if (desc == NULL) {
        kbx_loader_errf(errbuf, errbuf_size, "plugin %s: %s returned NULL", who,
                        KBX_PLUGIN_ENTRY_SYMBOL);
        return KBX_ERR_INVALID;
    }
    /* The first three members protect the rest: read nothing else before they passed. */
    if (desc->struct_size < KBX_LOADER_DESC_VERSION_END) {
        kbx_loader_errf(errbuf, errbuf_size,
                        "plugin %s: descriptor struct_size %u is smaller than the kbx %d.0 "
                        "descriptor (%zu bytes)",
                        who, (unsigned)desc->struct_size, KBX_ABI_MAJOR, KBX_PLUGIN_DESC_SIZE_1_0);
        return KBX_ERR_INVALID;
    }
    if (desc->abi_major != api->abi_major || desc->abi_minor > api->abi_minor) {
        kbx_loader_errf(errbuf, errbuf_size,
                        "plugin %s was built for kbx ABI %u.%u, this broker provides %u.%u (%s)",
                        who, (unsigned)desc->abi_major, (unsigned)desc->abi_minor,
                        (unsigned)api->abi_major, (unsigned)api->abi_minor,
                        desc->abi_major != api->abi_major ? "the major versions must be equal"
                                                          : "the plugin needs a newer broker");
        return KBX_ERR_UNSUPPORTED;
    }
    if (desc->struct_size < KBX_PLUGIN_DESC_SIZE_1_0) {
        kbx_loader_errf(errbuf, errbuf_size,
                        "plugin %s: descriptor struct_size %u is smaller than the kbx %d.0 "
                        "descriptor (%zu bytes)",
                        who, (unsigned)desc->struct_size, KBX_ABI_MAJOR, KBX_PLUGIN_DESC_SIZE_1_0);
        return KBX_ERR_INVALID;
    }
    if (desc->name == NULL || desc->name[0] == '\0' || desc->init == NULL || desc->fini == NULL) {
        kbx_loader_errf(errbuf, errbuf_size, "plugin %s: descriptor lacks %s", who,
                        desc->name == NULL || desc->name[0] == '\0' ? "a name"
                        : desc->init == NULL                        ? "an init function"
                                                                    : "a fini function");
        return KBX_ERR_INVALID;
    }
    return KBX_OK;
}

int32_t kbx_loader_load(const char *path, const kbx_loader_opts_t *opts, const kbx_api_t *api,
                        kbx_host_t *host, kbx_loaded_t **out, char *errbuf, size_t errbuf_size)
{
    char init_err[512];
    kbx_loaded_t *lp = NULL;
    kbx_plugin_entry_fn entry;
    void *sym;
    int32_t err;

    *out = NULL;
    if (opts == NULL || !opts->enabled) {
        const char *flag =
            opts != NULL && opts->flag_name != NULL ? opts->flag_name : "the plugin feature flag";
        kbx_loader_errf(errbuf, errbuf_size,
                        "plugin %s not loaded: %s is off (set it to true to enable the feature)",
                        path, flag);
        return KBX_ERR_STATE;
    }
    err = kbx_loader_check_api(api, errbuf, errbuf_size);
    if (err != KBX_OK)
        return err;

    lp = calloc(1, sizeof(*lp));
    if (lp == NULL) {
        kbx_loader_errf(errbuf, errbuf_size, "plugin %s: out of memory", path);
        return KBX_ERR_NOMEM;
    }
    lp->dlclose = opts->dlclose;

    dlerror();
    lp->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lp->dl == NULL) {
        const char *why = dlerror();
        kbx_loader_errf(errbuf, errbuf_size, "cannot load plugin %s: %s", path,
                        why != NULL ? why : "unknown dlopen error");
        err = KBX_ERR_NOT_FOUND;
        goto free_lp;
    }

    dlerror();
    sym = dlsym(lp->dl, KBX_PLUGIN_ENTRY_SYMBOL);
    if (sym == NULL) {
        kbx_loader_errf(errbuf, errbuf_size, "%s is not a kbx plugin: symbol %s not found", path,
                        KBX_PLUGIN_ENTRY_SYMBOL);
        err = KBX_ERR_NOT_FOUND;
        goto close_dl;
    }
    /* POSIX requires object-to-function pointer conversion to work for dlsym results. */
    memcpy(&entry, &sym, sizeof(entry));

    lp->desc = entry();
    err = kbx_loader_check_desc(lp->desc, path, api, errbuf, errbuf_size);
    if (err != KBX_OK)
        goto close_dl;

    init_err[0] = '\0';
    err = lp->desc->init(api, host, &lp->ctx, init_err, sizeof(init_err));
    if (err != 0) {
        init_err[sizeof(init_err) - 1] = '\0';
        kbx_loader_errf(errbuf, errbuf_size, "plugin %s (%s %s) failed to start: %s", path,
                        lp->desc->name, lp->desc->version != NULL ? lp->desc->version : "?",
                        init_err[0] != '\0' ? init_err : "no reason given");
        if (err > 0)
            err = KBX_ERR_INVALID;
        /* init ran plugin code: keep the image mapped (never dlclose after init). */
        goto free_lp;
    }
    *out = lp;
    return KBX_OK;

close_dl:
    dlclose(lp->dl);
free_lp:
    free(lp);
    return err;
}

const kbx_plugin_desc_t *kbx_loader_desc(const kbx_loaded_t *lp)
{
    return lp->desc;
}

void *kbx_loader_ctx(const kbx_loaded_t *lp)
{
    return lp->ctx;
}

void kbx_loader_unload(kbx_loaded_t *lp)
{
    if (lp == NULL)
        return;
    lp->desc->fini(lp->ctx);
    if (lp->dlclose)
        dlclose(lp->dl);
    free(lp);
}
