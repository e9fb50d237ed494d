/*
 * km_plugin_types.h - the plugin instance, km_plugin_t ("cm"). All plugin state hangs off it;
 * there are no mutable globals, so two instances (two brokers in one process) work.
 */
#ifndef KM_PLUGIN_TYPES_H
#define KM_PLUGIN_TYPES_H

#include "catalog/km_catalog_types.h"
#include "coord/km_coord_types.h"
#include "core/km_config_types.h"
#include "mirror/km_mirror_types.h"
#include "rpc/km_rpc_types.h"
#include "state/km_state_types.h"
#include "util/km_types.h"

struct km_plugin {
    km_host_ref_t ref; /**< magic, host API table and handle: first, always */
    int32_t broker_id;
    char cluster_id[48];
    km_broker_config_t conf; /**< broker mirror.* settings, read at init */
    km_coord_t coord;        /**< the coordinator loop */
    km_catalog_t catalog;    /**< mirrors, topics, local leadership (owned by the loop) */
    km_rpc_t rpc;            /**< admin RPC handlers and the source admin client */
    km_state_t state;        /**< MirrorCoordinator: __mirror_state shards (state/) */
    km_mirror_t mirror;      /**< partition state machines and the fetcher (mirror/) */
    struct km_sync *sync;    /**< metadata sync scheduler (sync/), NULL before start */
    /** sync/km_sync_acls.c: mirrors whose source has no authorizer, logged once each
     *  (km_sync_aclplan.h; owned by the loop, freed in fini) */
    struct km_acl_memo *acl_memo;
    kbx_listener_t *md_listener;
    kbx_listener_t *lead_listener;
};

#endif /* KM_PLUGIN_TYPES_H */
