/*
 * kb_aclmod.h -- the "acl" module of kbroker (kb_acl.h, kb_acl_api.h), for
 * broker/core/kb_modules.c. Listed after "api" (whose log directories hold the store) and
 * before "host", which installs kb_acl_authorize() behind kbx authorize() before it loads
 * plugins.
 */
#ifndef KB_ACLMOD_H
#define KB_ACLMOD_H

#include "kb_acl.h"
#include "kb_broker.h"

extern const kb_module_t kb_module_acl;

/** The ACL component of broker @p kb, or NULL (module not initialised). @thread any */
kb_acl_t *kb_acl_of(const kb_broker_t *kb);

#endif /* KB_ACLMOD_H */
