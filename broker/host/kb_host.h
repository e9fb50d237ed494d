/*
 * kb_host.h -- kbroker's plugin host: the kbx extension ABI (hostapi/kbx.h) implemented on the
 * real broker, and the loading of the plugins named by plugin.paths.
 *
 * One kb_host_t per broker (the "host" module). It owns:
 *   - one kbx_api_t table shared by every plugin and one struct kbx_host per loaded plugin
 *     (the handle passed to init; it names the plugin in log lines and metrics);
 *   - three host threads: "kb-kbx-event" (metadata and leadership deliveries, completions of
 *     the asynchronous cluster operations, controller writes), "kb-kbx-timer" (every kbx
 *     timer, one heap), "kb-kbx-local" (requests a plugin sends to its own broker);
 *   - the plugin-record store behind controller_write (one file in the first log dir).
 *
 * docs/broker.md ("The plugin host") and docs/abi.md ("kbroker implementation notes") describe
 * what every kbx function maps to.
 *
 * @thread main for the module functions; the rest as stated.
 */
#ifndef KB_HOST_H
#define KB_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_broker.h"

typedef struct kb_host_s kb_host_t;

/** The plugin host of broker @p kb, or NULL (module not started). @thread any */
kb_host_t *kb_host_of(const kb_broker_t *kb);

/**
 * Authorizer hook behind kbx authorize(): return KBX_AUTHZ_ALLOWED, KBX_AUTHZ_DENIED or a
 * negative KBX_ERR_*. Strings are borrowed. Must not block for long.
 * @thread any
 */
typedef int32_t(kb_host_authz_fn)(void *opaque, const char *principal, const char *client_host,
                                  int32_t resource_type, const char *resource_name,
                                  int32_t operation);

/** Install (NULL: remove) the authorizer. Without one every request is allowed. The host module
 *  installs broker/acl's authorizer here when authorizer.class.name is set. @thread any */
void kb_host_set_authorizer(kb_host_t *h, kb_host_authz_fn *fn, void *opaque);

/**
 * Parse one plugin.paths entry: "PATH" or "FLAG=PATH". Without FLAG the feature flag is
 * derived from the file name: directory, a "lib" prefix and everything from the first '.'
 * removed, then a leading 'k' dropped (kbx plugins are named k<feature>.so), then ".enable"
 * appended: "build/lib/kmirror.so" -> "mirror.enable".
 * @return 0, or -1 when the entry is empty or does not fit (@p flag / @p path get "" then).
 * @thread any
 */
int kb_host_entry_parse(const char *entry, char *flag, size_t flag_size, char *path,
                        size_t path_size);

/** Number of plugins loaded and running. @thread any */
size_t kb_host_plugin_count(kb_host_t *h);

#endif /* KB_HOST_H */
