/*
 * km_config_tables.c - the two configuration tables: broker mirror.* keys and per-mirror keys.
 * Descriptions are ours. docs/config.md is generated from here (km-config-doc).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/km_config.h"
#include "sync/km_sync_aclplan.h"

#define I32MAX INT32_MAX
#define I64MAX INT64_MAX

/* --- broker scope ------------------------------------------------------------------------- */

#define B(field) offsetof(km_broker_config_t, field)

static const km_config_def_t km_config_broker_defs[] = {
    {.name = "mirror.enable",
     .type = KM_CT_BOOL,
     .dflt = "false",
     .offset = B(enable),
     .doc = "Feature flag. The broker loads kmirror only when this is true, and the plugin "
            "checks it again at start and refuses to run when it is not."},
    {.name = "mirror.coordinator.threads",
     .type = KM_CT_INT,
     .dflt = "1",
     .min = 1,
     .max = 64,
     .offset = B(coordinator_threads),
     .doc = "Threads that apply mirror state changes (one coordinator loop each; the "
            "__mirror_state partitions led by this broker are spread over them)."},
    {.name = "mirror.coordinator.write.timeout.ms",
     .type = KM_CT_LONG,
     .dflt = "5000",
     .min = 1,
     .max = I64MAX,
     .offset = B(coordinator_write_timeout_ms),
     .doc = "How long a write to __mirror_state may take before the state change fails and "
            "is retried."},
    {.name = "mirror.coordinator.append.linger.ms",
     .type = KM_CT_INT,
     .dflt = "10",
     .min = 0,
     .max = 60000,
     .offset = B(coordinator_append_linger_ms),
     .doc = "How long the coordinator waits to batch several state records into one append "
            "to __mirror_state."},
    {.name = "mirror.coordinator.load.buffer.size",
     .type = KM_CT_INT,
     .dflt = "5242880",
     .min = 65536,
     .max = I32MAX,
     .offset = B(coordinator_load_buffer_size),
     .doc = "Bytes read at a time when a __mirror_state partition is loaded after this broker "
            "becomes its leader."},
    {.name = "mirror.state.topic.num.partitions",
     .alias = "mirror.topic.num.partitions",
     .type = KM_CT_INT,
     .dflt = "50",
     .min = 1,
     .max = 10000,
     .offset = B(state_topic_num_partitions),
     .doc = "Partitions of the __mirror_state topic when it is created. Every broker must use "
            "the same value: it decides which partition holds a mirror's state."},
    {.name = "mirror.state.topic.replication.factor",
     .type = KM_CT_INT,
     .dflt = "-1",
     .min = 1,
     .max = 32767,
     .offset = B(state_topic_replication_factor),
     .flags = KM_CF_NEG1_AUTO,
     .doc = "Replication factor of __mirror_state when it is created; -1 means 3, or the number "
            "of live brokers if that is smaller."},
    {.name = "mirror.num.fetchers.per.source.broker",
     .alias = "mirror.num.replica.fetchers",
     .type = KM_CT_INT,
     .dflt = "1",
     .min = 1,
     .max = 64,
     .offset = B(num_fetchers_per_source_broker),
     .flags = KM_CF_DYNAMIC,
     .doc = "Fetcher threads per source broker and mirror. Partitions are split over them; more "
            "than one helps on links with a high round-trip time."},
    {.name = "mirror.metadata.refresh.interval.ms",
     .type = KM_CT_LONG,
     .dflt = "60000",
     .min = 1000,
     .max = I64MAX,
     .offset = B(metadata_refresh_interval_ms),
     .flags = KM_CF_DYNAMIC,
     .doc = "How often source-cluster metadata (leaders, partition counts, topic ids, new topics "
            "matching the filters) is refreshed."},
    {.name = "mirror.failed.retry.initial.backoff.ms",
     .type = KM_CT_LONG,
     .dflt = "100",
     .min = 0,
     .max = I64MAX,
     .offset = B(failed_retry_initial_backoff_ms),
     .flags = KM_CF_DYNAMIC,
     .doc = "First delay before a FAILED partition with a retryable cause is retried; the delay "
            "doubles on each attempt."},
    {.name = "mirror.failed.retry.max.backoff.ms",
     .type = KM_CT_LONG,
     .dflt = "300000",
     .min = 0,
     .max = I64MAX,
     .offset = B(failed_retry_max_backoff_ms),
     .flags = KM_CF_DYNAMIC,
     .doc = "Upper bound of the retry delay for FAILED partitions."},
    {.name = "mirror.failed.retry.max.attempts",
     .type = KM_CT_INT,
     .dflt = "20",
     .min = 0,
     .max = 32767,
     .offset = B(failed_retry_max_attempts),
     .flags = KM_CF_DYNAMIC,
     .doc = "Automatic retries of a FAILED partition before it waits for an operator; 0 turns "
            "automatic retries off."},
    {.name = "mirror.replication.throttled.rate",
     .type = KM_CT_LONG,
     .dflt = "-1",
     .min = 1,
     .max = I64MAX,
     .offset = B(replication_throttled_rate),
     .flags = KM_CF_DYNAMIC | KM_CF_NEG1_AUTO,
     .doc = "Bytes per second this broker may fetch for all mirrors together, applied to "
            "partitions listed in the topic config mirror.replication.throttled.replicas; -1 "
            "means no limit."},
    {.name = "mirror.stop.timeout.ms",
     .type = KM_CT_LONG,
     .dflt = "60000",
     .min = 1000,
     .max = I64MAX,
     .offset = B(stop_timeout_ms),
     .flags = KM_CF_DYNAMIC,
     .doc = "Bound on each waiting step of stopping a mirror topic (leader-epoch bump, high "
            "watermark passing the PID reset); a step that times out is retried, never skipped."},
};

static km_err_t km_config_broker_check(const void *conf_v, char *errstr, size_t errstr_size)
{
    const km_broker_config_t *conf = conf_v;

    if (conf->failed_retry_initial_backoff_ms > conf->failed_retry_max_backoff_ms) {
        snprintf(errstr, errstr_size,
                 "mirror.failed.retry.initial.backoff.ms: %lld is above "
                 "mirror.failed.retry.max.backoff.ms (%lld)",
                 (long long)conf->failed_retry_initial_backoff_ms,
                 (long long)conf->failed_retry_max_backoff_ms);
        return KM_ERR_CONFIG;
    }
    return KM_OK;
}

const km_config_scope_t km_config_broker_scope = {
    .name = "broker",
    .title = "Broker settings (`mirror.*`)",
    .intro = "Set in the broker's configuration (server.properties or its equivalent). Keys "
             "marked dynamic may also be changed as dynamic broker configs; the others are read "
             "when the plugin starts. Unknown `mirror.*` keys are logged as warnings. An old "
             "name is accepted when the new one is not set; setting both to different values "
             "is an error.",
    .defs = km_config_broker_defs,
    .ndefs = sizeof(km_config_broker_defs) / sizeof(km_config_broker_defs[0]),
    .struct_size = sizeof(km_broker_config_t),
    .check = km_config_broker_check,
};

/* --- mirror scope ------------------------------------------------------------------------- */

#define M(field) offsetof(km_mirror_config_t, field)

static const km_config_def_t km_config_mirror_defs[] = {
    /* connection */
    {.name = "bootstrap.servers",
     .type = KM_CT_HOSTPORT_LIST,
     .offset = M(bootstrap_servers),
     .flags = KM_CF_REQUIRED,
     .doc = "Source-cluster brokers to start from, as host:port[,host:port...]."},
    {.name = "source.cluster.id",
     .type = KM_CT_STRING,
     .offset = M(source_cluster_id),
     .doc = "Expected cluster id of the source. Recorded on first contact when unset; a "
            "different id later fails the mirror's partitions."},
    {.name = "client.id",
     .type = KM_CT_STRING,
     .dflt = "",
     .offset = M(client_id),
     .doc = "Client id sent to the source; empty means kmirror-<mirror>-<broker id>."},
    {.name = "request.timeout.ms",
     .type = KM_CT_INT,
     .dflt = "30000",
     .min = 1,
     .max = I32MAX,
     .offset = M(request_timeout_ms),
     .doc = "How long to wait for a response from a source broker."},
    {.name = "socket.connection.setup.timeout.ms",
     .type = KM_CT_LONG,
     .dflt = "10000",
     .min = 1,
     .max = I64MAX,
     .offset = M(socket_connection_setup_timeout_ms),
     .doc = "Time allowed to establish a connection (TCP, TLS and SASL) before it is closed and "
            "retried."},
    {.name = "socket.connection.setup.timeout.max.ms",
     .type = KM_CT_LONG,
     .dflt = "30000",
     .min = 1,
     .max = I64MAX,
     .offset = M(socket_connection_setup_timeout_max_ms),
     .doc = "Upper bound of the connection setup timeout, which grows after consecutive "
            "failures."},
    {.name = "connections.max.idle.ms",
     .type = KM_CT_LONG,
     .dflt = "600000",
     .min = -1,
     .max = I64MAX,
     .offset = M(connections_max_idle_ms),
     .doc = "Close source connections idle for this long; -1 never closes them."},
    {.name = "reconnect.backoff.ms",
     .type = KM_CT_LONG,
     .dflt = "50",
     .min = 0,
     .max = I64MAX,
     .offset = M(reconnect_backoff_ms),
     .doc = "First delay before reconnecting to a source broker; doubles up to "
            "reconnect.backoff.max.ms."},
    {.name = "reconnect.backoff.max.ms",
     .type = KM_CT_LONG,
     .dflt = "1000",
     .min = 0,
     .max = I64MAX,
     .offset = M(reconnect_backoff_max_ms),
     .doc = "Upper bound of the reconnect delay."},
    {.name = "retry.backoff.ms",
     .type = KM_CT_LONG,
     .dflt = "100",
     .min = 0,
     .max = I64MAX,
     .offset = M(retry_backoff_ms),
     .doc = "Delay before retrying a failed metadata or admin request to the source."},
    {.name = "socket.timeout.ms",
     .type = KM_CT_INT,
     .dflt = "30000",
     .min = 1,
     .max = I32MAX,
     .offset = M(socket_timeout_ms),
     .doc = "Network timeout of the fetchers' requests to source brokers."},
    {.name = "socket.receive.buffer.bytes",
     .type = KM_CT_INT,
     .dflt = "65536",
     .min = 1024,
     .max = I32MAX,
     .offset = M(socket_receive_buffer_bytes),
     .flags = KM_CF_NEG1_AUTO,
     .doc = "SO_RCVBUF of source connections; -1 keeps the operating system's default. Raise it "
            "on links with a high bandwidth-delay product."},
    {.name = "socket.send.buffer.bytes",
     .type = KM_CT_INT,
     .dflt = "131072",
     .min = 1024,
     .max = I32MAX,
     .offset = M(socket_send_buffer_bytes),
     .flags = KM_CF_NEG1_AUTO,
     .doc = "SO_SNDBUF of source connections; -1 keeps the operating system's default."},
    /* fetch */
    {.name = "fetch.wait.max.ms",
     .alias = "mirror.fetch.wait.max.ms",
     .type = KM_CT_INT,
     .dflt = "500",
     .min = 0,
     .max = I32MAX,
     .offset = M(fetch_wait_max_ms),
     .flags = KM_CF_DYNAMIC,
     .doc = "How long a source broker may hold a fetch while it has less than fetch.min.bytes."},
    {.name = "fetch.backoff.ms",
     .alias = "mirror.fetch.backoff.ms",
     .type = KM_CT_INT,
     .dflt = "1000",
     .min = 0,
     .max = I32MAX,
     .offset = M(fetch_backoff_ms),
     .flags = KM_CF_DYNAMIC,
     .doc = "Pause of a fetcher after a fetch error before it fetches again."},
    {.name = "fetch.min.bytes",
     .alias = "mirror.fetch.min.bytes",
     .type = KM_CT_INT,
     .dflt = "1",
     .min = 1,
     .max = I32MAX,
     .offset = M(fetch_min_bytes),
     .flags = KM_CF_DYNAMIC,
     .doc = "Bytes a source broker should gather before answering a fetch."},
    {.name = "fetch.response.max.bytes",
     .alias = "mirror.fetch.response.max.bytes",
     .type = KM_CT_INT,
     .dflt = "10485760",
     .min = 1024,
     .max = I32MAX,
     .offset = M(fetch_response_max_bytes),
     .flags = KM_CF_DYNAMIC,
     .doc = "Upper bound of one fetch response (all partitions). Note: the consumer calls this "
            "fetch.max.bytes; here the KIP's names are used."},
    {.name = "fetch.max.bytes",
     .alias = "mirror.fetch.max.bytes",
     .type = KM_CT_INT,
     .dflt = "1048576",
     .min = 1024,
     .max = I32MAX,
     .offset = M(fetch_max_bytes),
     .flags = KM_CF_DYNAMIC,
     .doc = "Upper bound per partition in one fetch (the consumer's max.partition.fetch.bytes). "
            "A larger first batch is still returned whole."},
    /* security */
    {.name = "security.protocol",
     .type = KM_CT_ENUM,
     .dflt = "PLAINTEXT",
     .allowed = "PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL",
     .offset = M(security_protocol),
     .doc = "How to talk to the source brokers."},
    {.name = "sasl.mechanism",
     .type = KM_CT_ENUM,
     .dflt = "PLAIN",
     .allowed = "PLAIN|SCRAM-SHA-256|SCRAM-SHA-512",
     .offset = M(sasl_mechanism),
     .doc = "SASL mechanism for SASL_PLAINTEXT and SASL_SSL."},
    {.name = "sasl.jaas.config",
     .type = KM_CT_PASSWORD,
     .offset = M(sasl_jaas_config),
     .flags = KM_CF_SENSITIVE,
     .doc = "Credentials in the Java client's JAAS form (a PlainLoginModule or ScramLoginModule "
            "entry with username and password). Alternative to sasl.username/sasl.password."},
    {.name = "sasl.username",
     .type = KM_CT_STRING,
     .offset = M(sasl_username),
     .doc = "SASL user name (librdkafka style)."},
    {.name = "sasl.password",
     .type = KM_CT_PASSWORD,
     .offset = M(sasl_password),
     .flags = KM_CF_SENSITIVE,
     .doc = "SASL password (librdkafka style)."},
    {.name = "ssl.protocol",
     .type = KM_CT_ENUM,
     .dflt = "TLSv1.3",
     .allowed = "TLSv1.2|TLSv1.3",
     .offset = M(ssl_protocol),
     .doc = "Highest TLS version offered."},
    {.name = "ssl.enabled.protocols",
     .type = KM_CT_LIST,
     .dflt = "TLSv1.2,TLSv1.3",
     .offset = M(ssl_enabled_protocols),
     .doc = "TLS versions allowed."},
    {.name = "ssl.cipher.suites",
     .type = KM_CT_LIST,
     .dflt = "",
     .offset = M(ssl_cipher_suites),
     .doc = "OpenSSL cipher names allowed; empty keeps OpenSSL's defaults."},
    {.name = "ssl.endpoint.identification.algorithm",
     .type = KM_CT_ENUM,
     .dflt = "https",
     .allowed = "https|",
     .offset = M(ssl_endpoint_identification_algorithm),
     .doc = "https checks that the source broker's certificate matches its host name; empty "
            "turns the check off."},
    {.name = "ssl.keystore.type",
     .type = KM_CT_ENUM,
     .dflt = "PEM",
     .allowed = "PEM|PKCS12",
     .offset = M(ssl_keystore_type),
     .doc = "Format of the client key store (JKS is not supported)."},
    {.name = "ssl.keystore.location",
     .type = KM_CT_STRING,
     .offset = M(ssl_keystore_location),
     .doc = "File with the client certificate and key, for TLS client authentication."},
    {.name = "ssl.keystore.password",
     .type = KM_CT_PASSWORD,
     .offset = M(ssl_keystore_password),
     .flags = KM_CF_SENSITIVE,
     .doc = "Password of the key store file."},
    {.name = "ssl.keystore.key",
     .type = KM_CT_PASSWORD,
     .offset = M(ssl_keystore_key),
     .flags = KM_CF_SENSITIVE,
     .doc = "The client private key itself, PEM, instead of a key store file."},
    {.name = "ssl.keystore.certificate.chain",
     .type = KM_CT_STRING,
     .offset = M(ssl_keystore_certificate_chain),
     .doc = "The client certificate chain itself, PEM, instead of a key store file."},
    {.name = "ssl.key.password",
     .type = KM_CT_PASSWORD,
     .offset = M(ssl_key_password),
     .flags = KM_CF_SENSITIVE,
     .doc = "Password of the private key."},
    {.name = "ssl.truststore.type",
     .type = KM_CT_ENUM,
     .dflt = "PEM",
     .allowed = "PEM|PKCS12",
     .offset = M(ssl_truststore_type),
     .doc = "Format of the trust store."},
    {.name = "ssl.truststore.location",
     .type = KM_CT_STRING,
     .offset = M(ssl_truststore_location),
     .doc = "File with the CA certificates that sign the source brokers' certificates; unset "
            "uses the system's CA store."},
    {.name = "ssl.truststore.password",
     .type = KM_CT_PASSWORD,
     .offset = M(ssl_truststore_password),
     .flags = KM_CF_SENSITIVE,
     .doc = "Password of the trust store file."},
    {.name = "ssl.truststore.certificates",
     .type = KM_CT_STRING,
     .offset = M(ssl_truststore_certificates),
     .doc = "The trusted CA certificates themselves, PEM, instead of a trust store file."},
    /* filters */
    {.name = "topics.include",
     .alias = "mirror.topics.include",
     .type = KM_CT_REGEX,
     .dflt = "",
     .offset = M(topics_include),
     .flags = KM_CF_DYNAMIC,
     .doc = "Regular expression for source topics to mirror automatically (it must match the "
            "whole name). Empty: only topics started explicitly. Internal topics (__*) are never "
            "mirrored."},
    {.name = "topics.exclude",
     .alias = "mirror.topics.exclude",
     .type = KM_CT_REGEX,
     .dflt = "__.*",
     .offset = M(topics_exclude),
     .flags = KM_CF_DYNAMIC,
     .doc = "Regular expression for source topics never mirrored automatically; wins over "
            "topics.include."},
    {.name = "groups.include",
     .alias = "mirror.groups.include",
     .type = KM_CT_REGEX,
     .dflt = ".*",
     .offset = M(groups_include),
     .flags = KM_CF_DYNAMIC,
     .doc = "Regular expression for consumer groups whose offsets are synchronised."},
    {.name = "groups.exclude",
     .alias = "mirror.groups.exclude",
     .type = KM_CT_REGEX,
     .dflt = "",
     .offset = M(groups_exclude),
     .flags = KM_CF_DYNAMIC,
     .doc = "Regular expression for consumer groups never synchronised; wins over "
            "groups.include."},
    {.name = "acls.include",
     .alias = "mirror.acl.include",
     .type = KM_CT_LIST,
     .dflt = "*",
     .offset = M(acls_include),
     .flags = KM_CF_DYNAMIC,
     .doc = "ACL bindings to synchronise, as comma-separated rules "
            "resourceType;resourceName;operation;permissionType;principal where * matches "
            "anything, resourceName may be a regular expression and trailing fields may be "
            "left out. Empty turns ACL sync off."},
    {.name = "topic.properties.exclude",
     .alias = "mirror.topic.properties.exclude",
     .type = KM_CT_LIST,
     .dflt = "",
     .offset = M(topic_properties_exclude),
     .flags = KM_CF_DYNAMIC,
     .doc = "More topic configs never copied from the source, on top of the built-in list "
            "that always applies: mirror.*, follower.replication.throttled.replicas, "
            "leader.replication.throttled.replicas, min.insync.replicas, "
            "unclean.leader.election.enable, message.timestamp.type, "
            "message.timestamp.difference.max.ms, message.timestamp.before.max.ms, "
            "message.timestamp.after.max.ms, message.format.version, remote.storage.enable, "
            "local.retention.ms, local.retention.bytes, remote.log.* (docs/plugin.md \"Topic "
            "configs\"). Each entry is a key or a prefix ending in *. A key excluded after the "
            "sync copied it stays as it is on the destination."},
    /* sync */
    {.name = "sync.topic.configs.interval.ms",
     .type = KM_CT_LONG,
     .dflt = "30000",
     .min = 0,
     .max = I64MAX,
     .offset = M(sync_topic_configs_interval_ms),
     .flags = KM_CF_DYNAMIC,
     .doc = "How often topic configs are copied from the source; 0 turns it off."},
    {.name = "sync.group.offsets.interval.ms",
     .type = KM_CT_LONG,
     .dflt = "30000",
     .min = 0,
     .max = I64MAX,
     .offset = M(sync_group_offsets_interval_ms),
     .flags = KM_CF_DYNAMIC,
     .doc = "How often committed consumer-group offsets are copied (clamped to the mirror "
            "topic's high watermark); 0 turns it off."},
    {.name = "sync.acls.interval.ms",
     .type = KM_CT_LONG,
     .dflt = "60000",
     .min = 0,
     .max = I64MAX,
     .offset = M(sync_acls_interval_ms),
     .flags = KM_CF_DYNAMIC,
     .doc = "How often ACLs matching acls.include are copied; 0 turns it off."},
    {.name = "stop.sync.timeout.ms",
     .type = KM_CT_LONG,
     .dflt = "10000",
     .min = 0,
     .max = I64MAX,
     .offset = M(stop_sync_timeout_ms),
     .flags = KM_CF_DYNAMIC,
     .doc = "How long stopping a topic waits for a last config and offset sync from the source "
            "before it goes on without it (the source may be down)."},
};

static km_err_t km_config_mirror_check(const void *conf_v, char *errstr, size_t errstr_size)
{
    const km_mirror_config_t *conf = conf_v;
    bool sasl =
        conf->security_protocol != NULL && strncmp(conf->security_protocol, "SASL_", 5) == 0;

    if (conf->reconnect_backoff_ms > conf->reconnect_backoff_max_ms) {
        snprintf(errstr, errstr_size,
                 "reconnect.backoff.ms: %lld is above reconnect.backoff.max.ms (%lld)",
                 (long long)conf->reconnect_backoff_ms, (long long)conf->reconnect_backoff_max_ms);
        return KM_ERR_CONFIG;
    }
    if (conf->socket_connection_setup_timeout_ms > conf->socket_connection_setup_timeout_max_ms) {
        snprintf(errstr, errstr_size,
                 "socket.connection.setup.timeout.ms: %lld is above "
                 "socket.connection.setup.timeout.max.ms (%lld)",
                 (long long)conf->socket_connection_setup_timeout_ms,
                 (long long)conf->socket_connection_setup_timeout_max_ms);
        return KM_ERR_CONFIG;
    }
    if (sasl && conf->sasl_jaas_config == NULL &&
        (conf->sasl_username == NULL || conf->sasl_password == NULL)) {
        snprintf(errstr, errstr_size,
                 "security.protocol: %s needs sasl.jaas.config, or sasl.username and "
                 "sasl.password",
                 conf->security_protocol);
        return KM_ERR_CONFIG;
    }
    /* acls.include: the rules' syntax (their expressions are compiled by each sync run) */
    return km_acl_rules_check(&conf->acls_include, errstr, errstr_size);
}

const km_config_scope_t km_config_mirror_scope = {
    .name = "mirror",
    .title = "Per-mirror settings",
    .intro = "Stored in the config resource MIRROR named after the mirror (given at creation with "
             "`kafka-mirrors --create --mirror-config` or changed with IncrementalAlterConfigs). "
             "Connection keys follow the Kafka clients' names. Keys marked dynamic take effect "
             "without reconnecting; changing any other key reconnects to the source. Unknown "
             "keys are refused. Values of password keys are never returned by any API and never "
             "logged. Regular expressions must match whole names.",
    .defs = km_config_mirror_defs,
    .ndefs = sizeof(km_config_mirror_defs) / sizeof(km_config_mirror_defs[0]),
    .struct_size = sizeof(km_mirror_config_t),
    .check = km_config_mirror_check,
};
