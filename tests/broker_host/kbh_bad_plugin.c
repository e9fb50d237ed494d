/*
 * kbh_bad_plugin.c -- a kbx plugin built for an ABI major the host does not have (2.0), for the
 * "incompatible plugin is refused with a clear log line and the broker keeps serving" test.
 * Its init must never run.
 */
#include <stdio.h>

#include "kbx.h"

static int32_t kbh_bad_init(const kbx_api_t *api, kbx_host_t *host, void **plugin_ctx, char *errbuf,
                            size_t errbuf_size)
{
    (void)api;
    (void)host;
    (void)plugin_ctx;
    snprintf(errbuf, errbuf_size, "kbh_bad_plugin init must not run");
    return -1;
}

static void kbh_bad_fini(void *plugin_ctx)
{
    (void)plugin_ctx;
}

static const kbx_plugin_desc_t kbh_bad_desc = {
    .struct_size = sizeof(kbx_plugin_desc_t),
    .abi_major = KBX_ABI_MAJOR + 1,
    .abi_minor = 0,
    .name = "kbh_bad",
    .version = "0.0.1",
    .build_id = "",
    .init = kbh_bad_init,
    .fini = kbh_bad_fini,
};

__attribute__((visibility("default"))) const kbx_plugin_desc_t *kbx_plugin_entry(void)
{
    return &kbh_bad_desc;
}
