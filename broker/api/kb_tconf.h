/*
 * kb_tconf.h -- topic-level configuration as Kafka defines it: one declarative table of every
 * topic key kbroker knows (type, Kafka default, bounds or allowed values, the broker keys that
 * supply its default, documentation), validation of client-given values, the effective value of
 * a key for a topic (topic override > dynamic broker config > dynamic cluster default >
 * server.properties > default, with the source and synonyms DescribeConfigs reports), and the
 * conversion into the storage engine's kb_log_config_t.
 *
 * `mirror.name` (KIP-1279 topic association) is in the table with KB_TCF_HIDDEN: clients may
 * not set it and DescribeConfigs does not show it; only the internal path sets it.
 *
 * Dynamic broker configs (IncrementalAlterConfigs on a BROKER resource) are validated here too
 * (kb_tconf_broker_validate) against the broker table of broker/core/kb_config_defs.c.
 *
 * @thread any (tables are const; functions have no shared state)
 */
#ifndef KB_TCONF_H
#define KB_TCONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_config.h"
#include "kb_log_config.h"

/* Kafka's DescribeConfigs ConfigType codes (v3+). */
#define KB_TC_BOOLEAN  1
#define KB_TC_STRING   2
#define KB_TC_INT      3
#define KB_TC_SHORT    4
#define KB_TC_LONG     5
#define KB_TC_DOUBLE   6
#define KB_TC_LIST     7
#define KB_TC_CLASS    8
#define KB_TC_PASSWORD 9

/* Kafka's DescribeConfigs ConfigSource codes. */
#define KB_CS_UNKNOWN                       0
#define KB_CS_TOPIC_CONFIG                  1
#define KB_CS_DYNAMIC_BROKER_CONFIG         2
#define KB_CS_DYNAMIC_DEFAULT_BROKER_CONFIG 3
#define KB_CS_STATIC_BROKER_CONFIG          4
#define KB_CS_DEFAULT_CONFIG                5

/* Kafka's ConfigResource types. */
#define KB_RES_TOPIC         2
#define KB_RES_BROKER        4
#define KB_RES_BROKER_LOGGER 8

#define KB_TCF_HIDDEN   0x1u /**< never shown, never settable by clients (mirror.name) */
#define KB_TCF_NOEFFECT 0x2u /**< accepted and shown; kbroker does not act on it */

#define KB_TCONF_MIRROR_NAME "mirror.name"

/** A broker key supplying a topic key's default; numeric values are multiplied by @p mult
 *  (log.retention.hours -> retention.ms: 3600000). */
typedef struct kb_tconf_syn_s {
    const char *name;
    int64_t mult;
} kb_tconf_syn_t;

#define KB_TCONF_MAX_SYN 3

typedef struct kb_tconf_def_s {
    const char *name;
    int type;                   /**< KB_TC_* */
    const char *dflt;           /**< Kafka's default as text (NULL: null) */
    int64_t min, max;           /**< INT/LONG/SHORT bounds (inclusive) */
    double dmin, dmax;          /**< DOUBLE bounds */
    const char *const *choices; /**< STRING/LIST allowed values (NULL-terminated) or NULL */
    kb_tconf_syn_t syn[KB_TCONF_MAX_SYN]; /**< broker synonyms, highest precedence first */
    unsigned flags;                       /**< KB_TCF_* */
    const char *doc;
} kb_tconf_def_t;

extern const kb_tconf_def_t kb_tconf_defs[];
extern const size_t kb_tconf_defs_cnt;

/** The definition of topic key @p name, or NULL. */
const kb_tconf_def_t *kb_tconf_def(const char *name);

/** One key/value of a config set (topic overrides, dynamic broker configs). Strings owned by
 *  whoever owns the set. */
typedef struct kb_kv_s {
    char *key;
    char *value;
} kb_kv_t;

/** The dynamic broker configs known at a moment: per-broker (this node) and cluster default. */
typedef struct kb_dyncfg_s {
    const kb_kv_t *node;
    size_t node_cnt;
    const kb_kv_t *dflt;
    size_t dflt_cnt;
} kb_dyncfg_t;

/**
 * Validate one client-given topic config value. With @p internal, hidden keys (mirror.name)
 * are allowed. The value is checked as Kafka's ConfigDef does (type, range, allowed values).
 * @return 0, or a Kafka error code (INVALID_CONFIG, ...) with a message in @p msg.
 */
int16_t kb_tconf_validate(const char *key, const char *value, bool internal, char *msg,
                          size_t msg_size);

/** Cross-key checks of a complete override set (e.g. min.compaction.lag.ms <= max...).
 *  @return 0 or a Kafka error code with @p msg. */
int16_t kb_tconf_validate_set(const kb_kv_t *kv, size_t cnt, const kb_config_t *cfg,
                              const kb_dyncfg_t *dyn, char *msg, size_t msg_size);

/** Whether @p name is a valid mirror name (topic-name rules, no reserved suffix). Suffixes
 *  .paused/.stopped/.removed are accepted in the mirror.name *value* only with @p value. */
bool kb_tconf_mirror_name_valid(const char *name, bool value);

/** A mirror.name value split: the mirror's name without a .paused/.stopped/.removed suffix into
 *  @p mirror (truncated to @p size, may be NULL), and whether the desired state is stopped
 *  (.stopped, or .removed read as .stopped) into @p stopped (may be NULL). */
void kb_tconf_mirror_value(const char *value, char *mirror, size_t size, bool *stopped);

/** Where an effective value came from, as DescribeConfigs shows it. */
typedef struct kb_tconf_val_s {
    char value[1024]; /**< the effective value ("" with is_null for null) */
    bool is_null;
    int source; /**< KB_CS_* */
} kb_tconf_val_t;

/** One synonym entry (DescribeConfigs IncludeSynonyms). */
typedef struct kb_tconf_synval_s {
    const char *name; /**< static (table) or the topic key */
    char value[1024];
    bool is_null;
    int source;
} kb_tconf_synval_t;

/**
 * The effective value of topic key @p d for a topic with overrides @p ov (may be NULL),
 * on a broker with static config @p cfg and dynamic configs @p dyn (may be NULL).
 * With @p syn (room for KB_TCONF_MAX_SYN * 3 + 2 entries), fills the synonyms Kafka lists,
 * highest precedence first; *@p syn_cnt gets their count.
 */
void kb_tconf_effective(const kb_tconf_def_t *d, const kb_kv_t *ov, size_t ov_cnt,
                        const kb_config_t *cfg, const kb_dyncfg_t *dyn, kb_tconf_val_t *out,
                        kb_tconf_synval_t *syn, size_t *syn_cnt);

#define KB_TCONF_SYN_ROOM (KB_TCONF_MAX_SYN * 3 + 2)

/** Things about a topic's effective config the broker acts on outside the storage engine. */
typedef struct kb_tconf_extra_s {
    int32_t min_insync_replicas;
    int compression;       /**< -1 = producer (keep), else a kp_codec_t id */
    int compression_level; /**< for the chosen codec, KP_COMPRESS_LEVEL_DEFAULT if default */
    bool unclean_leader_election;
    bool remote_storage;
    bool mirror_stopped; /**< mirror.name ends in .stopped (or .removed, read as .stopped) */
} kb_tconf_extra_t;

/** Build the storage config and the extras of a topic from its overrides and the broker
 *  configs. Values that fail to parse (they were validated before) keep Kafka's defaults. */
void kb_tconf_build(const kb_kv_t *ov, size_t ov_cnt, const kb_config_t *cfg,
                    const kb_dyncfg_t *dyn, kb_log_config_t *lc, kb_tconf_extra_t *ex);

/** The override of @p key in @p kv, or NULL. */
const char *kb_kv_get(const kb_kv_t *kv, size_t cnt, const char *key);

/* ---- broker configs ---------------------------------------------------------------------- */

/**
 * Validate a dynamic broker config change of @p key to @p value (NULL: delete). Keys must be
 * known broker keys that Kafka lets change at run time (KB_CF_DYNAMIC), or mirror.* keys other
 * than mirror.enable (kept as text for the plugin).
 * @return 0, or INVALID_REQUEST (not dynamic) / INVALID_CONFIG (unknown, bad value) with @p msg.
 */
int16_t kb_tconf_broker_validate(const char *key, const char *value, char *msg, size_t msg_size);

/** Format the static value of broker key @p d from @p cfg into @p buf; returns false for a
 *  null value (@p buf ""). Passwords come back as "" with false (never shown). */
bool kb_tconf_broker_static(const kb_config_t *cfg, const kb_conf_def_t *d, char *buf, size_t size);

/** Kafka's ConfigType code for a broker key definition. */
int kb_tconf_broker_type(const kb_conf_def_t *d);

#endif /* KB_TCONF_H */
