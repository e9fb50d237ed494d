/*
 * km_config_types.h - parsed configuration structs, filled by the tables in km_config_tables.c.
 * Strings and lists are owned by the struct and released with km_config_free().
 */
#ifndef KM_CONFIG_TYPES_H
#define KM_CONFIG_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** A parsed comma-separated list (entries trimmed, owned). */
typedef struct km_strlist {
    char **v;
    size_t n;
} km_strlist_t;

/** Broker-level settings (mirror.* keys of the broker configuration). */
typedef struct km_broker_config {
    bool enable;
    int32_t coordinator_threads;
    int64_t coordinator_write_timeout_ms;
    int32_t coordinator_append_linger_ms;
    int32_t coordinator_load_buffer_size;
    int32_t state_topic_num_partitions;
    int32_t state_topic_replication_factor; /* -1: min(3, live brokers) */
    int32_t num_fetchers_per_source_broker;
    int64_t metadata_refresh_interval_ms;
    int64_t failed_retry_initial_backoff_ms;
    int64_t failed_retry_max_backoff_ms;
    int32_t failed_retry_max_attempts;
    int64_t replication_throttled_rate; /* bytes/s, -1: unlimited */
    int64_t stop_timeout_ms;
} km_broker_config_t;

/** Per-mirror settings (config resource MIRROR named after the mirror). */
typedef struct km_mirror_config {
    /* connection */
    km_strlist_t bootstrap_servers;
    char *source_cluster_id;
    char *client_id;
    int32_t request_timeout_ms;
    int64_t socket_connection_setup_timeout_ms;
    int64_t socket_connection_setup_timeout_max_ms;
    int64_t connections_max_idle_ms;
    int64_t reconnect_backoff_ms;
    int64_t reconnect_backoff_max_ms;
    int64_t retry_backoff_ms;
    int32_t socket_timeout_ms;
    int32_t socket_receive_buffer_bytes;
    int32_t socket_send_buffer_bytes;
    /* fetch */
    int32_t fetch_wait_max_ms;
    int32_t fetch_backoff_ms;
    int32_t fetch_min_bytes;
    int32_t fetch_response_max_bytes;
    int32_t fetch_max_bytes;
    /* security */
    char *security_protocol;
    char *sasl_mechanism;
    char *sasl_jaas_config;
    char *sasl_username;
    char *sasl_password;
    char *ssl_protocol;
    km_strlist_t ssl_enabled_protocols;
    km_strlist_t ssl_cipher_suites;
    char *ssl_endpoint_identification_algorithm;
    char *ssl_keystore_type;
    char *ssl_keystore_location;
    char *ssl_keystore_password;
    char *ssl_keystore_key;
    char *ssl_keystore_certificate_chain;
    char *ssl_key_password;
    char *ssl_truststore_type;
    char *ssl_truststore_location;
    char *ssl_truststore_password;
    char *ssl_truststore_certificates;
    /* filters */
    char *topics_include;
    char *topics_exclude;
    char *groups_include;
    char *groups_exclude;
    km_strlist_t acls_include;
    km_strlist_t topic_properties_exclude;
    /* sync */
    int64_t sync_topic_configs_interval_ms;
    int64_t sync_group_offsets_interval_ms;
    int64_t sync_acls_interval_ms;
    int64_t stop_sync_timeout_ms;
} km_mirror_config_t;

#endif /* KM_CONFIG_TYPES_H */
