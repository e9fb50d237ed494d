/*
 * kb_apimod.h -- the "api" module of kbroker (metadata, partitions, data-plane and admin
 * APIs; see kb_apisvc.h), for broker/core/kb_modules.c. Kept apart from kb_apisvc.h so that
 * the module table does not pull in the storage engine's headers.
 */
#ifndef KB_APIMOD_H
#define KB_APIMOD_H

#include "kb_broker.h"

extern const kb_module_t kb_module_api;

#endif /* KB_APIMOD_H */
