/*
 * test_plugin.c - a minimal kbx plugin, built several times with different defines to test the
 * loader's refusals:
 *   TP_MAJOR / TP_MINOR   ABI version written into the descriptor
 *   TP_STRUCT_SIZE        descriptor struct_size (a truncated descriptor)
 *   TP_NO_ENTRY           export a differently named function instead of kbx_plugin_entry
 *   TP_FAIL_INIT          init refuses with a message
 */
#include <stdio.h>
#include <string.h>

#include "kbx.h"

#ifndef TP_NAME
#define TP_NAME "tp"
#endif
#ifndef TP_MAJOR
#define TP_MAJOR KBX_ABI_MAJOR
#endif
#ifndef TP_MINOR
#define TP_MINOR KBX_ABI_MINOR
#endif
#ifndef TP_STRUCT_SIZE
#define TP_STRUCT_SIZE sizeof(kbx_plugin_desc_t)
#endif

#define TP_EXPORT __attribute__((visibility("default")))

typedef struct tp_ctx {
    const kbx_api_t *api;
    kbx_host_t *host;
} tp_ctx_t;

static int32_t tp_init(const kbx_api_t *api, kbx_host_t *host, void **plugin_ctx, char *errbuf,
                       size_t errbuf_size)
{
    char line[128];
    tp_ctx_t *ctx;

#ifdef TP_FAIL_INIT
    snprintf(errbuf, errbuf_size, "test plugin refuses to start, as told");
    return -3;
#endif
    ctx = api->mem_calloc(host, 1, sizeof(*ctx));
    if (ctx == NULL) {
        snprintf(errbuf, errbuf_size, "out of memory");
        return -1;
    }
    ctx->api = api;
    ctx->host = host;
    snprintf(line, sizeof(line), "%s init on kbx %u.%u", TP_NAME, (unsigned)api->abi_major,
             (unsigned)api->abi_minor);
    api->log_write(host, KBX_LOG_INFO, "tp", line);
    *plugin_ctx = ctx;
    return 0;
}

static void tp_fini(void *plugin_ctx)
{
    tp_ctx_t *ctx = plugin_ctx;

    ctx->api->log_write(ctx->host, KBX_LOG_INFO, "tp", TP_NAME " fini");
    ctx->api->mem_free(ctx->host, ctx);
}

static const kbx_plugin_desc_t tp_desc = {
    .struct_size = TP_STRUCT_SIZE,
    .abi_major = TP_MAJOR,
    .abi_minor = TP_MINOR,
    .name = TP_NAME,
    .version = "9.9.9",
    .build_id = "test",
    .init = tp_init,
    .fini = tp_fini,
};

#ifdef TP_NO_ENTRY
TP_EXPORT const kbx_plugin_desc_t *kbx_plugin_entry_misspelt(void);
TP_EXPORT const kbx_plugin_desc_t *kbx_plugin_entry_misspelt(void)
#else
TP_EXPORT const kbx_plugin_desc_t *kbx_plugin_entry(void)
#endif
{
    return &tp_desc;
}
