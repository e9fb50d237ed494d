/*
 * km_config.h - declarative configuration tables and the engine that applies them.
 *
 * One table per scope (STYLE point 38): the broker's mirror.* keys and the per-mirror keys.
 * Each entry names the key, its type, default, range or allowed values, where it is stored
 * (offsetof into the scope's struct), whether it can change at run time, and a description.
 * The same tables validate values, fill the structs and generate docs/config.md.
 */
#ifndef KM_CONFIG_H
#define KM_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "core/km_config_types.h"
#include "util/km_err.h"
#include "util/km_types.h"

typedef enum km_config_type {
    KM_CT_BOOL,          /**< bool: true/false (any case) */
    KM_CT_INT,           /**< int32_t within [min, max] */
    KM_CT_LONG,          /**< int64_t within [min, max] */
    KM_CT_DOUBLE,        /**< double within [dmin, dmax] */
    KM_CT_STRING,        /**< char * */
    KM_CT_PASSWORD,      /**< char *, never shown */
    KM_CT_ENUM,          /**< char *, one of `allowed` ("A|B|C"; an empty alternative allowed) */
    KM_CT_REGEX,         /**< char *, a regular expression matched against whole names */
    KM_CT_LIST,          /**< km_strlist_t from a comma-separated list */
    KM_CT_HOSTPORT_LIST, /**< km_strlist_t of host:port entries, at least one */
} km_config_type_t;

#define KM_CF_DYNAMIC                                                                              \
    0x1u                     /**< broker: dynamic broker config; mirror: applied without           \
                                  reconnecting to the source */
#define KM_CF_SENSITIVE 0x2u /**< never returned, logged or echoed in errors */
#define KM_CF_REQUIRED  0x4u /**< must be set */
#define KM_CF_NEG1_AUTO 0x8u /**< -1 is accepted below min and means "automatic" */

#define KM_CONFIG_NO_FIELD ((size_t)-1)

typedef struct km_config_def {
    const char *name;
    const char *alias; /**< older name accepted for the same key, or NULL */
    km_config_type_t type;
    const char *dflt;    /**< default as text; NULL: unset */
    int64_t min, max;    /**< KM_CT_INT / KM_CT_LONG */
    double dmin, dmax;   /**< KM_CT_DOUBLE */
    const char *allowed; /**< KM_CT_ENUM: "A|B|C" */
    size_t offset;       /**< offsetof into the scope struct, or KM_CONFIG_NO_FIELD */
    uint32_t flags;      /**< KM_CF_* */
    const char *doc;     /**< description, our words */
} km_config_def_t;

typedef struct km_config_scope {
    const char *name;  /**< "broker" or "mirror" */
    const char *title; /**< section title in docs/config.md */
    const char *intro; /**< paragraph under the title */
    const km_config_def_t *defs;
    size_t ndefs;
    size_t struct_size;
    /** Cross-key checks after every key was set; NULL if none. */
    km_err_t (*check)(const void *conf, char *errstr, size_t errstr_size);
} km_config_scope_t;

extern const km_config_scope_t km_config_broker_scope;
extern const km_config_scope_t km_config_mirror_scope;

/** Longest regular expression accepted (characters). */
#define KM_CONFIG_REGEX_MAX 4096

/**
 * Find the entry for key (its name or its alias) in scope. Returns NULL if unknown.
 * @thread any
 */
const km_config_def_t *km_config_find(const km_config_scope_t *scope, const char *key);

/**
 * Zero conf and apply every default. On failure conf is freed again.
 * @param conf struct of scope->struct_size bytes, owned by the caller
 * @return KM_OK, KM_ERR_NOMEM, KM_ERR_CONFIG (a broken default: a bug in the table)
 * @thread any
 */
km_err_t km_config_init(km_plugin_t *cm, const km_config_scope_t *scope, void *conf, char *errstr,
                        size_t errstr_size);

/**
 * Validate value (borrowed) for key and store it into conf, replacing the previous value.
 * value NULL restores the default. On failure conf is unchanged and errstr names the key and
 * says what is allowed (a sensitive value is never echoed).
 * @return KM_OK, KM_ERR_CONFIG (unknown key or invalid value), KM_ERR_NOMEM
 * @thread any
 */
km_err_t km_config_set(km_plugin_t *cm, const km_config_scope_t *scope, void *conf, const char *key,
                       const char *value, char *errstr, size_t errstr_size);

/**
 * Validate value for def without storing it. cm is needed for memory (regex compile).
 * @return KM_OK, KM_ERR_CONFIG, KM_ERR_NOMEM
 * @thread any
 */
km_err_t km_config_validate(km_plugin_t *cm, const km_config_def_t *def, const char *value,
                            char *errstr, size_t errstr_size);

/**
 * Check that required keys are set and run the scope's cross-key check.
 * @return KM_OK or KM_ERR_CONFIG
 * @thread any
 */
km_err_t km_config_check(const km_config_scope_t *scope, const void *conf, char *errstr,
                         size_t errstr_size);

/** Release everything conf owns and zero it. @thread any */
void km_config_free(km_plugin_t *cm, const km_config_scope_t *scope, void *conf);

/**
 * Read the broker's mirror.* keys from the host into conf (initialised here), after checking
 * the feature flag mirror.enable first. Both a key and its alias set to different values is an
 * error; unknown mirror.* keys are logged as warnings.
 * @return KM_OK, KM_ERR_DISABLED (flag not true), KM_ERR_CONFIG, KM_ERR_NOMEM
 * @thread host main (init)
 */
km_err_t km_config_load_broker(km_plugin_t *cm, km_broker_config_t *conf, char *errstr,
                               size_t errstr_size);

#endif /* KM_CONFIG_H */
