/*
 * kb_config.h -- kbroker's static configuration: one declarative table of the keys kbroker
 * knows (name, type, default, bounds or allowed values, dynamic?, description, where the
 * typed value lives in kb_config_t), Kafka-style .properties loading, overrides, validation
 * with messages that name the key and what is allowed, and typed accessors.
 *
 * Flow: kb_config_new() -> kb_config_load_file() / kb_config_set() (raw text, last one wins,
 * so `--override` given after the file wins) -> kb_config_finalize() (parse, validate every
 * key, cross-key checks, derived values) -> read-only use from any thread.
 *
 * Keys starting with "mirror." other than mirror.enable are not validated here: they are kept
 * as text and passed to plugins (kb_config_foreach_prefix()), which validate their own.
 *
 * @thread any once finalized (read-only); loading is single-threaded.
 */
#ifndef KB_CONFIG_H
#define KB_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum kb_conf_type_e {
    KB_CT_BOOL,     /**< bool: true|false (case-insensitive) */
    KB_CT_INT,      /**< int32_t */
    KB_CT_LONG,     /**< int64_t */
    KB_CT_DOUBLE,   /**< double */
    KB_CT_STRING,   /**< char * (NULL = null) */
    KB_CT_LIST,     /**< char *: comma-separated, normalised to "a,b,c" (no blanks) */
    KB_CT_PASSWORD, /**< char *, never printed */
} kb_conf_type_t;

#define KB_CF_DYNAMIC  0x1u /**< Kafka lets it change at run time (kbroker: not yet) */
#define KB_CF_NOEFFECT 0x2u /**< accepted so Kafka configs load; no effect in kbroker yet */
#define KB_CF_KBROKER  0x4u /**< kbroker's own key (not an Apache Kafka broker key) */

/** One known key. The table is kb_config_defs[]; it drives parsing, --help-config and docs. */
typedef struct kb_conf_def_s {
    const char *name;
    kb_conf_type_t type;
    const char *dflt;           /**< default as text; NULL = null (unset) */
    int64_t min, max;           /**< INT/LONG inclusive bounds */
    double dmin, dmax;          /**< DOUBLE inclusive bounds */
    const char *const *choices; /**< STRING/LIST allowed values, NULL-terminated; NULL = any */
    unsigned flags;             /**< KB_CF_* */
    size_t off;                 /**< offsetof(kb_config_t, field) */
    const char *doc;
} kb_conf_def_t;

extern const kb_conf_def_t kb_config_defs[];
extern const size_t kb_config_defs_cnt;

/** One parsed listener, "NAME://host:port". */
typedef struct kb_config_listener_s {
    char name[64];     /**< upper-cased listener name */
    char host[256];    /**< "" = every interface */
    int port;          /**< 0 = ephemeral (bound port known only at run time) */
    char protocol[32]; /**< security protocol from listener.security.protocol.map */
} kb_config_listener_t;

/** Typed values. Filled by kb_config_finalize(); never written afterwards. */
typedef struct kb_config_s {
    /* identity and roles */
    int32_t node_id;
    int32_t broker_id;
    char *process_roles;
    char *controller_quorum_voters;
    char *controller_listener_names;
    char *inter_broker_listener_name;
    int32_t broker_heartbeat_interval_ms;
    int32_t broker_session_timeout_ms;
    char *cluster_id;
    /* network */
    char *listeners;
    char *advertised_listeners;
    char *listener_security_protocol_map;
    int32_t num_network_threads;
    int32_t num_io_threads;
    int32_t background_threads;
    int32_t queued_max_requests;
    int32_t socket_request_max_bytes;
    int32_t socket_send_buffer_bytes;
    int32_t socket_receive_buffer_bytes;
    int32_t socket_listen_backlog_size;
    int64_t connections_max_idle_ms;
    int32_t connection_max_inflight_requests;
    int64_t shutdown_timeout_ms;
    /* logs */
    char *log_dirs;
    char *log_dir;
    char *metadata_log_dir;
    int32_t num_recovery_threads_per_data_dir;
    int32_t num_partitions;
    int32_t default_replication_factor;
    bool auto_create_topics_enable;
    bool delete_topic_enable;
    int32_t log_segment_bytes;
    int64_t log_roll_ms;
    int32_t log_roll_hours;
    int64_t log_retention_ms;
    int32_t log_retention_minutes;
    int32_t log_retention_hours;
    int64_t log_retention_bytes;
    int64_t log_retention_check_interval_ms;
    int64_t log_flush_interval_messages;
    int64_t log_flush_interval_ms;
    int32_t log_index_size_max_bytes;
    int32_t log_index_interval_bytes;
    char *log_message_timestamp_type;
    char *log_cleanup_policy;
    bool log_cleaner_enable;
    int32_t log_cleaner_threads;
    int64_t log_cleaner_dedupe_buffer_size;
    double log_cleaner_min_cleanable_ratio;
    int64_t log_cleaner_delete_retention_ms;
    int64_t log_cleaner_backoff_ms;
    char *compression_type;
    int32_t message_max_bytes;
    /* replication */
    int32_t min_insync_replicas;
    bool unclean_leader_election_enable;
    bool auto_leader_rebalance_enable;
    int64_t leader_imbalance_check_interval_seconds;
    int32_t leader_imbalance_per_broker_percentage;
    int64_t replica_lag_time_max_ms;
    int32_t replica_fetch_max_bytes;
    int32_t replica_fetch_wait_max_ms;
    int32_t num_replica_fetchers;
    int32_t replica_fetch_min_bytes;
    int32_t replica_fetch_response_max_bytes;
    int32_t replica_fetch_backoff_ms;
    /* groups and offsets */
    int32_t offsets_topic_num_partitions;
    int32_t offsets_topic_replication_factor;
    int32_t offsets_topic_segment_bytes;
    int32_t offsets_retention_minutes;
    int32_t group_initial_rebalance_delay_ms;
    int32_t group_min_session_timeout_ms;
    int32_t group_max_session_timeout_ms;
    int32_t group_max_size;
    /* transactions */
    int32_t transaction_max_timeout_ms;
    int32_t transaction_state_log_num_partitions;
    int32_t transaction_state_log_replication_factor;
    int32_t transaction_state_log_min_isr;
    int32_t transaction_state_log_segment_bytes;
    int32_t transactional_id_expiration_ms;
    int32_t share_coordinator_state_topic_replication_factor;
    int32_t share_coordinator_state_topic_min_isr;
    /* authorization (broker/acl) */
    char *authorizer_class_name;
    char *super_users;
    bool allow_everyone_if_no_acl_found;
    /* plugins, metrics, logging */
    char *plugin_paths;
    bool mirror_enable;
    char *metrics_listener;
    char *log_level;

    /* ---- derived by kb_config_finalize() ---- */
    const char *eff_log_dirs;     /**< log.dirs, else log.dir */
    int64_t eff_log_roll_ms;      /**< log.roll.ms, else log.roll.hours */
    int64_t eff_log_retention_ms; /**< log.retention.ms > .minutes > .hours; -1 = forever */
    kb_config_listener_t *lst;    /**< parsed `listeners` */
    size_t lst_cnt;
    kb_config_listener_t *adv; /**< parsed `advertised.listeners` (defaults to lst) */
    size_t adv_cnt;
    int32_t voter_id;       /**< from controller.quorum.voters; -1 when unset */
    char voter_host[256];   /**< the controller's host (controller.quorum.voters) */
    int voter_port;         /**< the controller's port; -1 when unset */
    char metrics_host[256]; /**< from metrics.listener; "" when disabled */
    int metrics_port;       /**< -1 when disabled */

    struct kb_config_priv_s *priv; /**< raw key/values, set flags, errors */
} kb_config_t;

/** A config with every default applied and no errors recorded yet (the defaults alone are
 *  not valid: node.id is required). NULL on out of memory. Free with kb_config_free(). */
kb_config_t *kb_config_new(void);
void kb_config_free(kb_config_t *cfg);

/**
 * Record @p key = @p value as text (last one wins). Nothing is validated until finalize.
 * @p origin names the source for messages ("server.properties line 4", "--override"); copied.
 * @return 0 or KB_E_NOMEM.
 */
int kb_config_set(kb_config_t *cfg, const char *key, const char *value, const char *origin);

/** Parse "key=value" (an --override argument) and kb_config_set() it.
 *  @return 0, KB_E_INVALID (no '='; an error is recorded) or KB_E_NOMEM. */
int kb_config_set_kv(kb_config_t *cfg, const char *kv, const char *origin);

/** Load a .properties file. Syntax and I/O problems are recorded as errors.
 *  @return 0 or a negative kb_err_t. */
int kb_config_load_file(kb_config_t *cfg, const char *path);

/**
 * Parse and validate every recorded key, run the cross-key checks and compute the derived
 * values. Errors are collected (every bad key is reported, not just the first).
 * @return 0 when valid, else KB_E_INVALID (see kb_config_error()).
 */
int kb_config_finalize(kb_config_t *cfg);

size_t kb_config_error_cnt(const kb_config_t *cfg);
/** The @p i-th error, e.g. "log.segment.bytes: 'abc' is not an integer (server.properties
 *  line 7)". Valid until the config is freed. */
const char *kb_config_error(const kb_config_t *cfg, size_t i);

/** The definition of @p name, or NULL. */
const kb_conf_def_t *kb_config_def(const char *name);

/** True if @p name was given (file or override) rather than defaulted. */
bool kb_config_is_set(const kb_config_t *cfg, const char *name);

/* Typed accessors by name, for code that does not want the struct (plugins, tests). A wrong
 * type or unknown name returns 0 / false / NULL. */
int64_t kb_config_int(const kb_config_t *cfg, const char *name);
bool kb_config_bool(const kb_config_t *cfg, const char *name);
double kb_config_double(const kb_config_t *cfg, const char *name);
const char *kb_config_str(const kb_config_t *cfg, const char *name);

/** The raw text given for @p key (any key, including mirror.*), or NULL. */
const char *kb_config_raw(const kb_config_t *cfg, const char *key);

/** Call @p fn for every given key starting with @p prefix (e.g. "mirror."), in key order.
 *  A non-zero return stops the walk and is returned. */
int kb_config_foreach_prefix(const kb_config_t *cfg, const char *prefix,
                             int (*fn)(void *opaque, const char *key, const char *value),
                             void *opaque);

/** Whether @p cfg's process.roles contains @p role ("broker" or "controller"). */
bool kb_config_has_role(const kb_config_t *cfg, const char *role);

/** Print the table: format "text" (for --help-config) or "markdown" (for docs/broker.md). */
void kb_config_print_table(FILE *out, const char *format);

/** Print the effective values (passwords redacted), one "key=value" per line. */
void kb_config_print_values(const kb_config_t *cfg, FILE *out);

#endif /* KB_CONFIG_H */
