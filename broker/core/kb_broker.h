/*
 * kb_broker.h -- the running broker as its components see it, and the module table through
 * which components (storage, API handlers, groups, transactions, the plugin host) join the
 * process without kb_main.c knowing their internals.
 *
 * Start order: config -> metrics -> every module's init() (register handlers, open logs) ->
 * network server start -> readiness line. Stop order on SIGTERM/SIGINT: network server stop
 * (drains in-flight requests, cancels deferred ones) -> every module's stop() in reverse ->
 * fini() in reverse.
 *
 * @thread main, unless a function says otherwise
 */
#ifndef KB_BROKER_H
#define KB_BROKER_H

#include <stddef.h>

#include "kb_api.h"
#include "kb_config.h"
#include "kb_metrics.h"

typedef struct kb_server_s kb_server_t;

typedef struct kb_broker_s {
    const kb_config_t *cfg; /**< finalized, read-only */
    kb_metrics_t *metrics;  /**< the registry (thread-safe) */
    kb_api_registry_t *reg; /**< request handlers (thread-safe) */
    kb_server_t *srv;       /**< NULL during init(); set before start() */
} kb_broker_t;

/** One component. Every function is optional; a non-zero init() aborts the start (exit 1)
 *  after a message in @p errstr. */
typedef struct kb_module_s {
    const char *name;
    int (*init)(kb_broker_t *kb, void **statep, char *errstr, size_t errstr_size);
    int (*start)(kb_broker_t *kb, void *state); /**< after the server listens */
    void (*stop)(kb_broker_t *kb, void *state); /**< after the server stopped */
    void (*fini)(kb_broker_t *kb, void *state);
} kb_module_t;

/** The modules linked into this kbroker, NULL-terminated (kb_modules.c). */
extern const kb_module_t *const kb_modules[];

#endif /* KB_BROKER_H */
