/*
 * kb_modules.c -- the components linked into kbroker, in start order. A component adds its
 * kb_module_t here (guarded by its KB_HAVE_<COMPONENT> definition from CMake).
 */
#include <stddef.h>

#include "kb_api.h"
#include "kb_apiversions.h"
#include "kb_broker.h"

/* broker/api: metadata, partitions and the data-plane / admin APIs. */
#ifdef KB_HAVE_API
#include "kb_apimod.h"
#endif

/* broker/repl: the replica fetchers following the metadata image; after "api" (its service),
 * before "ctrl" (which installs the controller channel and the broker epoch). */
#ifdef KB_HAVE_REPL
#include "kb_replmod.h"
#endif

/* broker/txn: the transaction coordinator; listed after "api", whose service it uses. */
#ifdef KB_HAVE_TXN
#include "kb_txnmod.h"
#endif

/* broker/group: the classic group coordinator; after "api", whose metadata and partitions it
 * uses for __consumer_offsets. */
#ifdef KB_HAVE_GROUP
#include "kb_grpmod.h"
#endif

/* broker/acl: ACL bindings, their store, the authorizer and the ACL APIs; after "api" (its log
 * directories hold the store), before "host" (which installs the authorizer behind kbx). */
#ifdef KB_HAVE_ACL
#include "kb_aclmod.h"
#endif

/* broker/ctrl: the cluster control plane (registration, heartbeats, the broker list); after
 * "api", whose metadata and service it uses. */
#ifdef KB_HAVE_CTRL
#include "kb_ctrlmod.h"
#endif

/* broker/host: the kbx plugin host (plugin.paths); after the api module, whose metadata and
 * partitions it serves to plugins. */
#ifdef KB_HAVE_HOST
#include "kb_hostmod.h"
#endif

static int kb_module_net_init(kb_broker_t *kb, void **statep, char *errstr, size_t errstr_size)
{
    (void)statep;
    (void)errstr;
    (void)errstr_size;
    return kb_apiversions_register(kb->reg);
}

static const kb_module_t kb_module_net = {
    .name = "apiversions",
    .init = kb_module_net_init,
};

const kb_module_t *const kb_modules[] = {
    &kb_module_net,
#ifdef KB_HAVE_API
    &kb_module_api,
#endif
#ifdef KB_HAVE_REPL
    &kb_module_repl,
#endif
#ifdef KB_HAVE_TXN
    &kb_module_txn,
#endif
#ifdef KB_HAVE_GROUP
    &kb_module_group,
#endif
#ifdef KB_HAVE_ACL
    &kb_module_acl,
#endif
#ifdef KB_HAVE_CTRL
    &kb_module_ctrl,
#endif
#ifdef KB_HAVE_HOST
    &kb_module_host,
#endif
    NULL,
};
