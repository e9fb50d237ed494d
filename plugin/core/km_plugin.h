/*
 * km_plugin.h - lifecycle of the plugin instance: kbx_plugin_entry (the only exported
 * symbol), init and fini.
 *
 * init: check the host table, check the feature flag and read the mirror.* settings, start the
 * coordinator loop, subscribe to metadata and leadership. fini, in the fixed order of
 * STYLE point 24: (1) unregister RPC handlers (none yet), (2)+(3) stop the coordinator, which
 * drains its queue, and join its thread, (4) unregister the listeners, (5) free everything.
 */
#ifndef KM_PLUGIN_H
#define KM_PLUGIN_H

#include <stddef.h>

#include "kbx.h"
#include "util/km_err.h"

/** Marks the one symbol the shared object exports (see kmirror.map). */
#define KM_EXPORT __attribute__((visibility("default")))

/**
 * The plugin's kbx init (also reachable through kbx_plugin_entry()->init).
 * @return 0 or a negative km_err_t; errbuf (caller-owned) gets the reason.
 * @thread host main
 */
int32_t km_plugin_init(const kbx_api_t *api, kbx_host_t *host, void **plugin_ctx, char *errbuf,
                       size_t errbuf_size);

/** The plugin's kbx fini. @thread host main */
void km_plugin_fini(void *plugin_ctx);

#endif /* KM_PLUGIN_H */
