/*
 * kbx_loader.h - host-side loader for kbx plugins (dlopen, ABI check, feature flag, init/fini).
 *
 * Host code only: a plugin never includes this header. Static library target `kbx_loader`.
 */
#ifndef KBX_LOADER_H
#define KBX_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kbx.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Options of kbx_loader_load(). Host-internal (not part of the plugin ABI). */
typedef struct kbx_loader_opts {
    bool enabled;          /**< value of the host's feature flag; false refuses every load */
    const char *flag_name; /**< name of that flag for messages, e.g. "mirror.enable" */
    bool dlclose;          /**< dlclose() after fini (tests only; production never unloads) */
} kbx_loader_opts_t;

/** A loaded and initialised plugin. Owned by the caller until kbx_loader_unload(). */
typedef struct kbx_loaded kbx_loaded_t;

/**
 * Load the plugin at path and start it.
 *
 * Order: feature flag; dlopen(RTLD_NOW | RTLD_LOCAL); dlsym(kbx_plugin_entry); the descriptor's
 * struct_size, abi_major and abi_minor (kbx_loader_check_desc()); then init(api, host, &ctx,
 * errbuf). The host's ABI version is api->abi_major/abi_minor, so a host (or a test) that
 * claims a higher minor sets api->abi_minor. Until init has been called a refused plugin is
 * dlclose()d again; after a failed init it stays mapped.
 *
 * @param path  plugin file (borrowed)
 * @param opts  options (borrowed); NULL is the same as enabled=false
 * @param api   the host's table; must stay valid until kbx_loader_unload() returns
 * @param host  the host handle passed to init
 * @param out   receives the loaded plugin on success
 * @param errbuf caller-owned buffer for a NUL-terminated reason on failure
 * @return KBX_OK, or KBX_ERR_STATE (flag off), KBX_ERR_NOT_FOUND (file or symbol missing),
 *         KBX_ERR_UNSUPPORTED (ABI version), KBX_ERR_INVALID (bad descriptor or host table),
 *         KBX_ERR_NOMEM, or the negative value init returned.
 * @thread the host's main thread.
 */
int32_t kbx_loader_load(const char *path, const kbx_loader_opts_t *opts, const kbx_api_t *api,
                        kbx_host_t *host, kbx_loaded_t **out, char *errbuf, size_t errbuf_size);

/**
 * Validate a descriptor against the host table: first struct_size (large enough to hold the
 * version), then abi_major == host major and abi_minor <= host minor, then struct_size >= the
 * 1.0 descriptor size, then name/init/fini present. who names the plugin in messages.
 * @return KBX_OK, KBX_ERR_UNSUPPORTED (version) or KBX_ERR_INVALID, with errbuf filled.
 * @thread any.
 */
int32_t kbx_loader_check_desc(const kbx_plugin_desc_t *desc, const char *who, const kbx_api_t *api,
                              char *errbuf, size_t errbuf_size);

/** The plugin's descriptor (owned by the plugin image). @thread any */
const kbx_plugin_desc_t *kbx_loader_desc(const kbx_loaded_t *lp);

/** The context init returned (owned by the plugin). @thread any */
void *kbx_loader_ctx(const kbx_loaded_t *lp);

/** Call fini, free lp; dlclose only if opts.dlclose was set. NULL is fine. @thread main */
void kbx_loader_unload(kbx_loaded_t *lp);

/**
 * Copy a plugin-supplied, size-prefixed ops struct into the host's own copy: min(dst_size,
 * src->struct_size) bytes, the rest of dst zeroed (missing members read as NULL), and dst's
 * struct_size set to the number of bytes taken. Returns that number (0, with dst all zero, if
 * src is NULL or its struct_size < 4).
 * @thread any.
 */
size_t kbx_ops_copy(void *dst, size_t dst_size, const void *src);

/** Static description of a KBX_ERR_* code. @thread any */
const char *kbx_err_str(int32_t err);

#ifdef __cplusplus
}
#endif

#endif /* KBX_LOADER_H */
