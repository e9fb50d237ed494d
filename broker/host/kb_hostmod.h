/*
 * kb_hostmod.h -- the "host" module of kbroker (the kbx plugin host; see kb_host.h), for
 * broker/core/kb_modules.c. Kept apart from kb_host.h so that the module table does not pull
 * in the storage engine's headers.
 */
#ifndef KB_HOSTMOD_H
#define KB_HOSTMOD_H

#include "kb_broker.h"

/** Loads plugin.paths at init (after the api module, before the server listens, so plugin
 *  APIs are in ApiVersions from the first request); runs every plugin's fini at stop (after the
 *  network server drained, before the api module closes the logs), in reverse load order. */
extern const kb_module_t kb_module_host;

#endif /* KB_HOSTMOD_H */
