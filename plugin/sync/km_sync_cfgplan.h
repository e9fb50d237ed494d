/*
 * km_sync_cfgplan.h - the pure part of the topic-config sync (km_sync_configs.c): which keys of
 * one topic to SET and DELETE on the destination and which keys the sync owns afterwards
 * (docs/plugin.md "Topic configs", docs/design.md M81-M84).
 *
 * No I/O, no plugin instance: the inputs are the two DescribeConfigs answers of the topic, the
 * keys remembered in its SYNCED_TOPIC_CONFIGS record and the operator's extra exclusions; the
 * output lives in a caller's arena. Unit-tested in tests/plugin_sync/sync_configs_test.c.
 */
#ifndef KM_SYNC_CFGPLAN_H
#define KM_SYNC_CFGPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/km_config_types.h"
#include "kp_arena.h"
#include "kp_types.h"
#include "util/km_err.h"

/** ConfigSource of a topic override (Kafka's DYNAMIC_TOPIC_CONFIG, also called TOPIC_CONFIG). */
#define KM_CFG_SOURCE_TOPIC 1

/** One config entry of a topic as DescribeConfigs v1+ returns it (views, borrowed). */
typedef struct km_cfgentry {
    kp_str_t name;
    kp_str_t value; /**< len -1: null (a sensitive value, or none) */
    int8_t source;  /**< ConfigSource; KM_CFG_SOURCE_TOPIC for an override of the topic */
    bool sensitive;
} km_cfgentry_t;

/** What to do on one destination topic. Views into the inputs; arrays in the caller's arena. */
typedef struct km_cfgplan {
    kp_str_t *set_names;  /**< keys to SET ... */
    kp_str_t *set_values; /**< ... to these values (never null) */
    size_t nset;
    kp_str_t *del; /**< keys to DELETE: the sync wrote them, the source no longer sets them */
    size_t ndel;
    kp_str_t *keep; /**< the keys the sync owns after the writes (the new remembered set) */
    size_t nkeep;
    kp_str_t *unknown; /**< keys the source sets that the destination does not know: not written */
    size_t nunknown;
    bool keep_changed; /**< keep differs (as a set) from the remembered keys */
} km_cfgplan_t;

/**
 * True if key @p name must stay local: the built-in list (replication, placement, throttling,
 * timestamp policy, tiered storage and the mirror's own mirror.* keys; docs/plugin.md "Topic
 * configs") or an entry of @p extra (the mirror's topic.properties.exclude, may be NULL),
 * each an exact key or a prefix ending in '*'.
 */
bool km_sync_cfg_excluded(kp_str_t name, const km_strlist_t *extra);

/** The built-in list (for docs and logs): @p n gets its length. */
const char *const *km_sync_cfg_builtin_excludes(size_t *n);

/**
 * Plan the writes of one topic.
 *
 * A source entry is synced when its source is KM_CFG_SOURCE_TOPIC, it is not sensitive, its
 * value is not null and km_sync_cfg_excluded() is false. Each synced key the destination knows
 * (it is in @p dst) is SET unless the destination already has the same value as a topic
 * override; either way it is kept. A synced key missing from @p dst is listed in unknown and
 * not written (the destination would refuse the whole topic's change). A remembered key that
 * is no longer synced is DELETEd if the destination still has it as an override and is
 * dropped from the kept set; a remembered key that is now excluded is dropped without a
 * DELETE (it became local). Destination overrides never remembered are never touched.
 * Duplicate names in any input count once (the first wins).
 *
 * @param remembered  the keys of the SYNCED_TOPIC_CONFIGS record (NULL when none)
 * @param ar          where the arrays of @p out are allocated
 * @return KM_OK, KM_ERR_NOMEM (arena limit)
 * @thread any
 */
km_err_t km_sync_cfgplan_make(const km_cfgentry_t *src, size_t nsrc, const km_cfgentry_t *dst,
                              size_t ndst, const kp_str_t *remembered, size_t nremembered,
                              const km_strlist_t *extra, kp_arena_t *ar, km_cfgplan_t *out);

#endif /* KM_SYNC_CFGPLAN_H */
