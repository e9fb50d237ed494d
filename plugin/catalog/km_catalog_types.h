/*
 * km_catalog_types.h - the destination's view of mirrors (embedded in km_plugin_t as
 * cm->catalog). Owned by the coordinator loop; other threads never touch it.
 */
#ifndef KM_CATALOG_TYPES_H
#define KM_CATALOG_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/km_config_types.h"
#include "util/km_types.h"

/** Desired state of a topic, from the suffix of its mirror.name (docs/design.md M3). */
typedef enum km_desired {
    KM_DESIRED_NONE = 0,    /**< no mirror.name: not a mirror topic */
    KM_DESIRED_RUNNING = 1, /**< mirror.name=<mirror>: mirror it */
    KM_DESIRED_PAUSED = 2,  /**< <mirror>.paused */
    KM_DESIRED_STOPPED = 3, /**< <mirror>.stopped (also read: <mirror>.removed) */
} km_desired_t;

/** One mirror definition (plugin record type 1, docs/state-format.md "Mirror definitions"). */
typedef struct km_mirror_def {
    char *name;
    uint8_t mirror_id[16];
    int64_t creation_time_ms;
    char *source_cluster_id; /**< "" when not known */
    size_t nconfig;
    char **keys;             /**< nconfig config keys as given at creation (validated then) */
    char **values;           /**< their values; secrets included: never return or log them */
    km_mirror_config_t conf; /**< the keys applied over the defaults of the mirror scope */
    bool conf_ok;            /**< false: a stored key no longer validates (logged once) */
    bool seen;               /**< mark for a snapshot's sweep */
} km_mirror_def_t;

/** This broker's replica of one partition, from the leadership listener. */
typedef struct km_cat_part {
    int32_t role; /**< KBX_ROLE_LEADER / KBX_ROLE_FOLLOWER; 0 (or REMOVED): no local replica */
    int32_t leader_id;
    int32_t leader_epoch;
    int32_t partition_epoch;
} km_cat_part_t;

/** A topic of this cluster. */
typedef struct km_cat_topic {
    char *name;
    kbx_uuid_t id;
    int32_t partition_count;
    char *mirror; /**< base mirror name of mirror.name (suffix stripped), NULL if none */
    km_desired_t desired;
    bool unclean_election; /**< topic config mirror.support.unclean.leader.election=true */
    km_cat_part_t *parts;  /**< nparts entries (>= partition_count when leadership came first) */
    int32_t nparts;
    bool seen;
    struct km_cat_topic *next; /* hash chain */
} km_cat_topic_t;

/** Catalog change events, delivered on the coordinator loop after a delta is applied. */
typedef struct km_catalog_ops {
    /** A mirror definition appeared or changed (def set), or went away (def NULL). */
    void (*on_mirror)(void *arg, const char *name, const km_mirror_def_t *def);
    /** A topic's association or desired state changed (also: topic deleted, new = NONE). */
    void (*on_topic)(void *arg, const km_cat_topic_t *topic, const char *old_mirror,
                     km_desired_t old_desired);
    /** This broker's role or epoch for a partition changed (role 0/REMOVED: no replica). */
    void (*on_partition)(void *arg, const km_cat_topic_t *topic, int32_t partition,
                         const km_cat_part_t *old_part);
} km_catalog_ops_t;

#define KM_CATALOG_MAX_SUBS 8

typedef struct km_catalog {
    uint32_t magic;
    km_plugin_t *cm;
    bool ready; /**< the first metadata snapshot has been applied */
    int64_t metadata_offset;

    km_mirror_def_t **mirrors; /* sorted by name */
    size_t nmirrors, mirrors_cap;

    km_cat_topic_t **buckets;
    size_t nbuckets, ntopics;

    int32_t *brokers; /* registered, unfenced broker ids of this cluster */
    size_t nbrokers, brokers_cap;

    struct {
        const km_catalog_ops_t *ops;
        void *arg;
    } subs[KM_CATALOG_MAX_SUBS];
    atomic_size_t nsubs; /* append-only: written at init, possibly while the loop runs */
} km_catalog_t;

#endif /* KM_CATALOG_TYPES_H */
