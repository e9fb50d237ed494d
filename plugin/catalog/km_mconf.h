/*
 * km_mconf.h - changes to a mirror's configuration (the MIRROR config resource of design M2,
 * resource type KP_CONFIG_RESOURCE_TYPE_MIRROR; design M114):
 *   - km_mconf_validate: a complete key list checked as CreateMirror checks it (each value by the
 *     mirror scope's table, no key twice (an alias counts as its key), PLAINTEXT sources only,
 *     required keys, the cross-key checks);
 *   - km_mconf_alter: IncrementalAlterConfigs operations (SET, DELETE) applied to a definition's
 *     key list, the result validated, and whether the change needs the mirror's source
 *     connections rebuilt (a key without KM_CF_DYNAMIC changed its effective value);
 *   - km_mconf_describe: every key of the mirror scope with its effective value for
 *     DescribeConfigs; secrets (KM_CF_SENSITIVE) never carry a value.
 * Pure functions over borrowed strings: no I/O, any thread. Messages never echo a sensitive
 * value (the config engine's rule).
 */
#ifndef KM_MCONF_H
#define KM_MCONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/km_config.h"
#include "util/km_types.h"

/* IncrementalAlterConfigs ConfigOperation values (Kafka's). */
#define KM_MCONF_OP_SET      0
#define KM_MCONF_OP_DELETE   1
#define KM_MCONF_OP_APPEND   2
#define KM_MCONF_OP_SUBTRACT 3

/** One operation of an IncrementalAlterConfigs resource (borrowed strings). */
typedef struct km_mconf_op {
    const char *key;
    const char *value; /**< NULL for DELETE (ignored there) */
    int8_t op;         /**< KM_MCONF_OP_* */
} km_mconf_op_t;

/** The key list after km_mconf_alter (owned; km_mconf_result_free). */
typedef struct km_mconf_result {
    size_t n;
    char **keys;
    char **values;  /**< secrets included: never return or log them */
    bool changed;   /**< some key's stored value differs from before */
    bool reconnect; /**< a connection key (no KM_CF_DYNAMIC) changed its effective value */
} km_mconf_result_t;

/** One DescribeConfigs entry (borrowed from the tables and the key list). */
typedef struct km_mconf_entry {
    const km_config_def_t *def;
    const char *value; /**< effective value; NULL when sensitive or unset */
    bool is_default;   /**< not in the key list: the table's default */
    bool sensitive;
} km_mconf_entry_t;

/**
 * Check a complete key list as CreateMirror does and fill @p conf (initialised here; the caller
 * frees it with km_config_free on success, it is freed on failure).
 * @return 0, or a Kafka error code (INVALID_CONFIG; UNKNOWN_SERVER_ERROR when out of memory)
 *         with the reason in @p msg
 */
int16_t km_mconf_validate(km_plugin_t *cm, const char *const *keys, const char *const *values,
                          size_t n, km_mirror_config_t *conf, char *msg, size_t msg_size);

/**
 * Apply @p ops to the key list (@p keys / @p values, @p n entries, as stored in the mirror's
 * definition) into @p out: SET replaces the key's entry (found by its name or alias; the name
 * the operation used is kept) or appends it; DELETE removes it (the default applies again; no
 * entry is no change). APPEND / SUBTRACT, a key twice in @p ops, an unknown key and a SET without
 * a value are refused; the result is validated (km_mconf_validate).
 * @return 0 (out filled), or a Kafka error code with @p msg (out empty): INVALID_CONFIG,
 *         INVALID_REQUEST (a key twice, an unknown operation), UNKNOWN_SERVER_ERROR (memory)
 */
int16_t km_mconf_alter(km_plugin_t *cm, const char *const *keys, const char *const *values,
                       size_t n, const km_mconf_op_t *ops, size_t nops, km_mconf_result_t *out,
                       char *msg, size_t msg_size);

/** Free a result (zeroed after; a zeroed one is fine). */
void km_mconf_result_free(km_plugin_t *cm, km_mconf_result_t *r);

/**
 * Every key of the mirror scope, in table order, with its effective value for the key list:
 * fills up to @p cap entries of @p out (cap >= km_config_mirror_scope.ndefs gives all).
 * @return the number of entries filled
 */
size_t km_mconf_describe(const char *const *keys, const char *const *values, size_t n,
                         km_mconf_entry_t *out, size_t cap);

#endif /* KM_MCONF_H */
