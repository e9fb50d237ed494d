#define KM_LOG_COMPONENT "kmirror.core"
#include "core/km_plugin.h"

#include <stdio.h>
#include <string.h>

#include "catalog/km_catalog.h"
#include "coord/km_coord.h"
#include "mirror/km_mirror.h"
#include "core/km_config.h"
#include "core/km_plugin_types.h"
#include "rpc/km_rpc.h"
#include "state/km_state.h"
#include "sync/km_sync.h"
#include "sync/km_sync_aclplan.h"
#include "util/km_log.h"
#include "util/km_mem.h"

#ifndef KM_VERSION
#define KM_VERSION "0.0.0"
#endif
#ifndef KM_BUILD_ID
#define KM_BUILD_ID ""
#endif

static const kbx_plugin_desc_t km_plugin_desc = {
    .struct_size = sizeof(kbx_plugin_desc_t),
    .abi_major = KBX_ABI_MAJOR,
    .abi_minor = KBX_ABI_MINOR,
    .name = "kmirror",
    .version = KM_VERSION,
    .build_id = KM_BUILD_ID,
    .init = km_plugin_init,
    .fini = km_plugin_fini,
};

KM_EXPORT const kbx_plugin_desc_t *kbx_plugin_entry(void)
{
    return &km_plugin_desc;
}

/* Every kbx 1.0 member the plugin relies on; a host that lacks one is refused by name. */
static km_err_t km_plugin_check_api(const kbx_api_t *api, char *errbuf, size_t errbuf_size)
{
    const char *missing = NULL;

    if (api == NULL || api->struct_size < sizeof(uint32_t) * 2 || api->abi_major != KBX_ABI_MAJOR) {
        snprintf(errbuf, errbuf_size, "the host's kbx API table is not a %d.x table",
                 KBX_ABI_MAJOR);
        return KM_ERR_HOST_API;
    }
#define KM_PLUGIN_REQUIRE(member)                                                                  \
    if (missing == NULL && !KBX_API_HAS(api, member))                                              \
        missing = #member;
    KM_PLUGIN_REQUIRE(host_info)
    KM_PLUGIN_REQUIRE(fatal)
    KM_PLUGIN_REQUIRE(log_enabled)
    KM_PLUGIN_REQUIRE(log_write)
    KM_PLUGIN_REQUIRE(mem_alloc)
    KM_PLUGIN_REQUIRE(mem_calloc)
    KM_PLUGIN_REQUIRE(mem_realloc)
    KM_PLUGIN_REQUIRE(mem_free)
    KM_PLUGIN_REQUIRE(clock_monotonic_ns)
    KM_PLUGIN_REQUIRE(clock_wall_ms)
    KM_PLUGIN_REQUIRE(thread_start)
    KM_PLUGIN_REQUIRE(thread_join)
    KM_PLUGIN_REQUIRE(latch_create)
    KM_PLUGIN_REQUIRE(latch_set)
    KM_PLUGIN_REQUIRE(latch_wait)
    KM_PLUGIN_REQUIRE(latch_destroy)
    KM_PLUGIN_REQUIRE(timer_start)
    KM_PLUGIN_REQUIRE(timer_cancel)
    KM_PLUGIN_REQUIRE(metric_register)
    KM_PLUGIN_REQUIRE(metric_record)
    KM_PLUGIN_REQUIRE(metric_unregister)
    KM_PLUGIN_REQUIRE(config_get)
    KM_PLUGIN_REQUIRE(config_foreach)
    KM_PLUGIN_REQUIRE(rpc_register)
    KM_PLUGIN_REQUIRE(rpc_unregister)
    KM_PLUGIN_REQUIRE(complete_response)
    KM_PLUGIN_REQUIRE(metadata_listen)
    KM_PLUGIN_REQUIRE(leadership_listen)
    KM_PLUGIN_REQUIRE(listener_unregister)
    KM_PLUGIN_REQUIRE(partition_acquire)
    KM_PLUGIN_REQUIRE(partition_release)
    KM_PLUGIN_REQUIRE(log_offsets)
    KM_PLUGIN_REQUIRE(log_append)
    KM_PLUGIN_REQUIRE(log_append_control)
    KM_PLUGIN_REQUIRE(log_truncate)
    KM_PLUGIN_REQUIRE(log_epoch_end_offset)
    KM_PLUGIN_REQUIRE(log_set_start)
    KM_PLUGIN_REQUIRE(partition_set_write_mode)
    KM_PLUGIN_REQUIRE(wait_isr_truncation)
    KM_PLUGIN_REQUIRE(leader_epoch_bump)
    KM_PLUGIN_REQUIRE(controller_write)
    KM_PLUGIN_REQUIRE(local_request)
    KM_PLUGIN_REQUIRE(broker_request)
    KM_PLUGIN_REQUIRE(authorize)
#undef KM_PLUGIN_REQUIRE
    if (missing != NULL) {
        snprintf(errbuf, errbuf_size,
                 "the host's kbx %u.%u API table lacks %s, which kmirror needs",
                 (unsigned)api->abi_major, (unsigned)api->abi_minor, missing);
        return KM_ERR_HOST_API;
    }
    return KM_OK;
}

/* Host callbacks: they only copy and enqueue (STYLE point 22). */
static void km_plugin_on_metadata(void *plugin_ctx, const kbx_metadata_delta_t *delta)
{
    km_plugin_t *cm = plugin_ctx;

    KM_CHECK_PLUGIN(cm);
    km_coord_enqueue_metadata(&cm->coord, delta);
    km_catalog_enqueue_delta(&cm->catalog, delta);
    km_state_on_metadata(cm, delta);
}

static void km_plugin_on_leadership(void *plugin_ctx, const kbx_leadership_change_t *const *changes,
                                    uint32_t count)
{
    km_plugin_t *cm = plugin_ctx;

    KM_CHECK_PLUGIN(cm);
    km_coord_enqueue_leadership(&cm->coord, changes, count);
    km_catalog_enqueue_leadership(&cm->catalog, changes, count);
    km_state_on_leadership(cm, changes, count);
}

static const kbx_metadata_ops_t km_plugin_metadata_ops = {
    .struct_size = sizeof(kbx_metadata_ops_t),
    .on_delta = km_plugin_on_metadata,
};

static const kbx_leadership_ops_t km_plugin_leadership_ops = {
    .struct_size = sizeof(kbx_leadership_ops_t),
    .on_change = km_plugin_on_leadership,
};

static km_err_t km_plugin_listen(km_plugin_t *cm, char *errbuf, size_t errbuf_size)
{
    const kbx_api_t *api = cm->ref.api;
    int32_t rc;

    rc = api->metadata_listen(cm->ref.host, &km_plugin_metadata_ops, cm, &cm->md_listener);
    if (rc != KBX_OK) {
        snprintf(errbuf, errbuf_size, "cannot subscribe to metadata: host error %d", (int)rc);
        return rc == KBX_ERR_NOMEM ? KM_ERR_NOMEM : KM_ERR_HOST;
    }
    rc = api->leadership_listen(cm->ref.host, &km_plugin_leadership_ops, cm, &cm->lead_listener);
    if (rc != KBX_OK) {
        api->listener_unregister(cm->ref.host, cm->md_listener);
        cm->md_listener = NULL;
        snprintf(errbuf, errbuf_size, "cannot subscribe to leadership changes: host error %d",
                 (int)rc);
        return rc == KBX_ERR_NOMEM ? KM_ERR_NOMEM : KM_ERR_HOST;
    }
    return KM_OK;
}

static void km_plugin_unlisten(km_plugin_t *cm)
{
    cm->ref.api->listener_unregister(cm->ref.host, cm->lead_listener);
    cm->lead_listener = NULL;
    cm->ref.api->listener_unregister(cm->ref.host, cm->md_listener);
    cm->md_listener = NULL;
}

int32_t km_plugin_init(const kbx_api_t *api, kbx_host_t *host, void **plugin_ctx, char *errbuf,
                       size_t errbuf_size)
{
    kbx_host_info_t info = {.struct_size = sizeof(info)};
    km_plugin_t *cm;
    km_err_t err;

    if (plugin_ctx == NULL || errbuf == NULL || errbuf_size == 0)
        return KM_ERR_INVALID;
    *plugin_ctx = NULL;
    errbuf[0] = '\0';
    err = km_plugin_check_api(api, errbuf, errbuf_size);
    if (err != KM_OK)
        return err;

    cm = api->mem_calloc(host, 1, sizeof(*cm));
    if (cm == NULL) {
        snprintf(errbuf, errbuf_size, "out of memory");
        return KM_ERR_NOMEM;
    }
    cm->ref.magic = KM_PLUGIN_MAGIC;
    cm->ref.api = api;
    cm->ref.host = host;
    cm->broker_id = -1;
    if (api->host_info(host, &info) == KBX_OK) {
        cm->broker_id = info.broker_id;
        memcpy(cm->cluster_id, info.cluster_id, sizeof(cm->cluster_id));
        cm->cluster_id[sizeof(cm->cluster_id) - 1] = '\0';
    }

    err = km_config_load_broker(cm, &cm->conf, errbuf, errbuf_size);
    if (err != KM_OK)
        goto free_cm;
    km_catalog_init(cm, &cm->catalog);
    err = km_coord_start(cm, &cm->coord, errbuf, errbuf_size);
    if (err != KM_OK)
        goto free_conf;
    err = km_state_start(cm, errbuf, errbuf_size);
    if (err != KM_OK)
        goto stop_coord;
    err = km_mirror_start(cm, errbuf, errbuf_size);
    if (err != KM_OK)
        goto stop_state;
    err = km_sync_start(cm, errbuf, errbuf_size);
    if (err != KM_OK)
        goto stop_mirror;
    err = km_plugin_listen(cm, errbuf, errbuf_size);
    if (err != KM_OK)
        goto stop_mirror;
    err = km_rpc_start(cm, &cm->rpc, errbuf, errbuf_size);
    if (err != KM_OK)
        goto unlisten;

    km_log_info(cm,
                "kmirror %s (%s) started on broker %d of cluster %s, kbx host %u.%u, plugin "
                "%u.%u; __mirror_state: %d partitions, replication factor %d",
                KM_VERSION, KM_BUILD_ID[0] != '\0' ? KM_BUILD_ID : "no build id",
                (int)cm->broker_id, cm->cluster_id[0] != '\0' ? cm->cluster_id : "(unknown)",
                (unsigned)api->abi_major, (unsigned)api->abi_minor, (unsigned)KBX_ABI_MAJOR,
                (unsigned)KBX_ABI_MINOR, (int)cm->conf.state_topic_num_partitions,
                (int)cm->conf.state_topic_replication_factor);
    *plugin_ctx = cm;
    return 0;

unlisten:
    km_plugin_unlisten(cm);
stop_mirror:
    km_sync_stop(cm);
    km_mirror_stop(cm);
stop_state:
    km_state_stop(cm);
stop_coord:
    km_coord_stop(&cm->coord);
    km_mirror_destroy(cm);
    km_state_destroy(cm);
    km_coord_destroy(&cm->coord);
    km_sync_destroy(cm);
    km_catalog_destroy(&cm->catalog);
free_conf:
    km_config_free(cm, &km_config_broker_scope, &cm->conf);
free_cm:
    cm->ref.magic = 0;
    api->mem_free(host, cm);
    if (errbuf[0] == '\0')
        snprintf(errbuf, errbuf_size, "%s", km_err_str(err));
    return err;
}

void km_plugin_fini(void *plugin_ctx)
{
    km_plugin_t *cm = plugin_ctx;
    const kbx_api_t *api;
    kbx_host_t *host;

    KM_CHECK_PLUGIN(cm);
    api = cm->ref.api;
    host = cm->ref.host;
    /* 1. stop accepting new work: the RPC handlers go; the source admin client stops and the
     *    host operations the handlers started call back (the loop answers their requests). */
    km_rpc_stop(&cm->rpc);
    /*    the metadata sync: its tick stops, its runs in flight see themselves cancelled and
     *    waiting final syncs (StopMirrorTopics) complete. */
    km_sync_stop(cm);
    /*    the partition state machines' tick stops. */
    km_mirror_stop(cm);
    /*    the state coordinator likewise: its handlers go, waiting work fails, its host
     *    requests call back. */
    km_state_stop(cm);
    /* 2. + 3. the loop drains the queued ops, closes the queue and exits; join it. */
    km_coord_stop(&cm->coord);
    /* 4. listeners: callbacks arriving until now found the queue closed and dropped. */
    km_plugin_unlisten(cm);
    /* 5. free everything (the fetcher's threads are joined first). */
    km_mirror_destroy(cm);
    km_state_destroy(cm);
    km_coord_destroy(&cm->coord);
    km_sync_destroy(cm);
    km_rpc_destroy(&cm->rpc);
    km_catalog_destroy(&cm->catalog);
    km_acl_memo_free(cm, &cm->acl_memo);
    km_log_info(cm, "kmirror stopped");
    km_config_free(cm, &km_config_broker_scope, &cm->conf);
    cm->ref.magic = 0;
    api->mem_free(host, cm);
}
