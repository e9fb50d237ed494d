/*
 * km_types.h - the few types every module of the plugin shares.
 *
 * km_plugin_t (the plugin instance, "cm") is defined in core/km_plugin_types.h; util code only
 * needs the handle and the two host pointers, which km_host_of() hands out.
 */
#ifndef KM_TYPES_H
#define KM_TYPES_H

#include "kbx.h"

typedef struct km_plugin km_plugin_t;

/** Host access carried by every plugin instance (first members of km_plugin_t). */
typedef struct km_host_ref {
    uint32_t magic; /**< KM_PLUGIN_MAGIC while the instance is alive */
    uint32_t _pad0;
    const kbx_api_t *api; /**< the host's table, valid until fini returns */
    kbx_host_t *host;     /**< the host handle */
} km_host_ref_t;

#define KM_PLUGIN_MAGIC 0x4b4d504cu /* "KMPL" */

#endif /* KM_TYPES_H */
