/*
 * kb_grpmod.h -- the "group" module of kbroker (the group coordinator, kb_gco.h), for
 * broker/core/kb_modules.c. Kept apart from kb_gco.h so that the module table does not pull in
 * the storage engine's headers.
 */
#ifndef KB_GRPMOD_H
#define KB_GRPMOD_H

#include "kb_broker.h"

extern const kb_module_t kb_module_group;

#endif /* KB_GRPMOD_H */
