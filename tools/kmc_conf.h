/*
 * kmc_conf.h -- local validation of what kafka-mirrors sends: mirror names, the
 * --mirror-config file (against the plugin's own per-mirror config table, so the CLI refuses
 * exactly what the broker would) and the --command-config file (the CLI's own client).
 *
 * Secrets: no message produced here contains the value of a sensitive key.
 */
#ifndef KMC_CONF_H
#define KMC_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kmc_props.h"

typedef struct km_plugin km_plugin_t;

/**
 * A minimal plugin instance whose host table has only the memory functions (malloc/free), for
 * the plugin modules the CLI links (the config engine, km_pattern). NULL when out of memory.
 * Free with kmc_conf_plugin_free(). @thread any
 */
km_plugin_t *kmc_conf_plugin_new(void);
void kmc_conf_plugin_free(km_plugin_t *cm);

/** Longest mirror name (Kafka's topic-name limit). */
#define KMC_MIRROR_NAME_MAX 249

/**
 * Check @p name against the mirror-name rules (topic-name rules: 1..249 characters of
 * [a-zA-Z0-9._-], not "." or "..", and no ".paused", ".stopped" or ".removed" suffix, which
 * encode a topic's desired state). Returns NULL when valid, else a static reason.
 * @thread any
 */
const char *kmc_mirror_name_invalid(const char *name);

/** One config entry to send in CreateMirror. */
typedef struct kmc_kv {
    const char *name;  /**< the table's canonical key (an old alias is translated) */
    const char *value; /**< borrowed from the kmc_props_t */
    bool sensitive;
} kmc_kv_t;

typedef struct kmc_mirror_conf {
    kmc_kv_t *v; /**< one per distinct key, in file order of their last occurrence */
    size_t n;
    const char *bootstrap; /**< bootstrap.servers as given (not secret) */
} kmc_mirror_conf_t;

/**
 * Validate the entries of a --mirror-config file (@p path names it in messages) with the
 * plugin's per-mirror table: unknown keys, bad values, missing bootstrap.servers and the
 * cross-key checks are refused; security.protocol other than PLAINTEXT is refused too (the
 * mirror's source client has no TLS/SASL yet). A key given twice: the last one wins, with a
 * warning on @p warn (may be NULL). On success fills @p out (free with kmc_mirror_conf_free).
 * Returns 0 or -1 with errstr.
 * @thread any
 */
int kmc_mirror_conf_check(const kmc_props_t *p, const char *path, kmc_mirror_conf_t *out,
                          FILE *warn, char *errstr, size_t errstr_size);

void kmc_mirror_conf_free(kmc_mirror_conf_t *mc);

/** Settings of the CLI's own client, from --command-config. */
typedef struct kmc_client_conf {
    const char *client_id;      /**< borrowed; default "kafka-mirrors" */
    int32_t request_timeout_ms; /**< 0: from --timeout-ms */
    int32_t connect_timeout_ms; /**< 0: from --timeout-ms */
} kmc_client_conf_t;

/**
 * Apply a --command-config file: security.protocol must be PLAINTEXT (SSL and SASL are refused
 * with a message saying so), client.id, request.timeout.ms and
 * socket.connection.setup.timeout.ms are used, other Kafka client keys are ignored with a
 * warning on @p warn (NULL: silent; values never printed). Returns 0 or -1 with errstr.
 * @thread any
 */
int kmc_client_conf_apply(const kmc_props_t *p, const char *path, kmc_client_conf_t *cc, FILE *warn,
                          char *errstr, size_t errstr_size);

#endif /* KMC_CONF_H */
