/*
 * kb_config_defs.c -- the table of every configuration key kbroker knows.
 *
 * Names, types and defaults follow Apache Kafka's broker configuration (4.x) where the key
 * exists there, so that a Kafka server.properties loads unchanged; the descriptions are ours.
 * KB_CF_NOEFFECT marks keys accepted for that reason that kbroker does not act on yet, and
 * KB_CF_KBROKER marks kbroker's own keys.
 */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_config.h"

#define F(fld) offsetof(kb_config_t, fld)

#define KEY_BOOL(nm, fld, def, fl, d)                                                              \
    {                                                                                              \
        .name = nm, .type = KB_CT_BOOL, .dflt = def, .flags = fl, .off = F(fld), .doc = d          \
    }
#define KEY_INT(nm, fld, def, lo, hi, fl, d)                                                       \
    {                                                                                              \
        .name = nm, .type = KB_CT_INT, .dflt = def, .min = lo, .max = hi, .flags = fl,             \
        .off = F(fld), .doc = d                                                                    \
    }
#define KEY_LONG(nm, fld, def, lo, hi, fl, d)                                                      \
    {                                                                                              \
        .name = nm, .type = KB_CT_LONG, .dflt = def, .min = lo, .max = hi, .flags = fl,            \
        .off = F(fld), .doc = d                                                                    \
    }
#define KEY_DOUBLE(nm, fld, def, lo, hi, fl, d)                                                    \
    {                                                                                              \
        .name = nm, .type = KB_CT_DOUBLE, .dflt = def, .dmin = lo, .dmax = hi, .flags = fl,        \
        .off = F(fld), .doc = d                                                                    \
    }
#define KEY_STR(nm, fld, def, ch, fl, d)                                                           \
    {                                                                                              \
        .name = nm, .type = KB_CT_STRING, .dflt = def, .choices = ch, .flags = fl, .off = F(fld),  \
        .doc = d                                                                                   \
    }
#define KEY_LIST(nm, fld, def, ch, fl, d)                                                          \
    {                                                                                              \
        .name = nm, .type = KB_CT_LIST, .dflt = def, .choices = ch, .flags = fl, .off = F(fld),    \
        .doc = d                                                                                   \
    }

#define IMAX INT32_MAX
#define LMAX INT64_MAX
#define DYN  KB_CF_DYNAMIC
#define NOFX KB_CF_NOEFFECT
#define KBR  KB_CF_KBROKER

static const char *const kb_conf_roles[] = {"broker", "controller", NULL};
static const char *const kb_conf_cleanup[] = {"delete", "compact", NULL};
static const char *const kb_conf_ts_type[] = {"CreateTime", "LogAppendTime", NULL};
static const char *const kb_conf_compression[] = {"uncompressed", "zstd",     "lz4", "snappy",
                                                  "gzip",         "producer", NULL};
static const char *const kb_conf_authorizers[] = {
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer", NULL};
static const char *const kb_conf_log_levels[] = {"error", "warn", "info", "debug", "trace", NULL};

const kb_conf_def_t kb_config_defs[] = {
    /* identity and roles */
    KEY_INT("node.id", node_id, "-1", -1, IMAX, 0,
            "This server's id in the cluster. Required (or broker.id)."),
    KEY_INT("broker.id", broker_id, "-1", -1, IMAX, 0,
            "Older name of node.id; if both are given they must be equal."),
    KEY_LIST("process.roles", process_roles, "broker,controller", kb_conf_roles, 0,
             "Roles of this process: broker, controller or both (a self-contained node). A "
             "cluster has one controller (controller.quorum.voters) and brokers that register "
             "with it."),
    KEY_LIST("controller.quorum.voters", controller_quorum_voters, "", NULL, 0,
             "The controller as id@host:port (exactly one voter: kbroker has no quorum). "
             "Required for a broker-only process; for a controller its id must be node.id."),
    KEY_LIST("controller.listener.names", controller_listener_names, "", NULL, 0,
             "Listener names used by the controller; they are not advertised to clients. The "
             "controller APIs are served only on them. Required for a broker-only process "
             "(the first names the listener it connects to)."),
    KEY_INT("broker.heartbeat.interval.ms", broker_heartbeat_interval_ms, "2000", 1, IMAX, 0,
            "Interval between a broker's heartbeats to the controller."),
    KEY_INT("broker.session.timeout.ms", broker_session_timeout_ms, "9000", 1, IMAX, 0,
            "A broker without a heartbeat for this long is fenced by the controller."),
    KEY_STR("inter.broker.listener.name", inter_broker_listener_name, NULL, NULL, 0,
            "Listener that brokers use to talk to each other; must be one of listeners."),
    KEY_STR("cluster.id", cluster_id, NULL, NULL, 0,
            "Cluster id (22-character base64 UUID). When unset the storage layer's "
            "meta.properties decides."),
    /* network */
    KEY_LIST("listeners", listeners, "PLAINTEXT://:9092", NULL, 0,
             "Addresses to listen on, NAME://host:port,... An empty host means every "
             "interface, port 0 an ephemeral port (printed in the readiness line)."),
    KEY_LIST("advertised.listeners", advertised_listeners, NULL, NULL, 0,
             "Addresses given to clients in metadata. Default: listeners without the "
             "controller listeners, an empty host replaced by this host's name."),
    KEY_LIST("listener.security.protocol.map", listener_security_protocol_map,
             "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", NULL, 0,
             "Security protocol of each listener name, NAME:PROTOCOL,... kbroker serves "
             "PLAINTEXT only so far."),
    KEY_INT("num.network.threads", num_network_threads, "3", 1, 1024, DYN,
            "Network threads; each owns its connections and its own epoll set."),
    KEY_INT("num.io.threads", num_io_threads, "8", 1, 1024, DYN, "Request handler threads."),
    KEY_INT("background.threads", background_threads, "10", 1, 1024, DYN | NOFX,
            "Threads for background work."),
    KEY_INT("queued.max.requests", queued_max_requests, "500", 1, IMAX, 0,
            "Requests waiting for a handler thread before network threads stop reading."),
    KEY_INT("socket.request.max.bytes", socket_request_max_bytes, "104857600", 1, IMAX, 0,
            "Largest request accepted; a bigger size prefix closes the connection."),
    KEY_INT("socket.send.buffer.bytes", socket_send_buffer_bytes, "102400", -1, IMAX, 0,
            "SO_SNDBUF of client sockets; -1 keeps the OS default (with autotuning)."),
    KEY_INT("socket.receive.buffer.bytes", socket_receive_buffer_bytes, "102400", -1, IMAX, 0,
            "SO_RCVBUF of client sockets; -1 keeps the OS default (with autotuning)."),
    KEY_INT("socket.listen.backlog.size", socket_listen_backlog_size, "50", 1, IMAX, 0,
            "listen(2) backlog of each listener."),
    KEY_LONG("connections.max.idle.ms", connections_max_idle_ms, "600000", -1, LMAX, 0,
             "Close connections idle for longer than this; -1 never."),
    KEY_INT("connection.max.inflight.requests", connection_max_inflight_requests, "32", 1, 4096,
            KBR,
            "Pipelined requests read from one connection before it stops being read "
            "(Kafka reads one at a time; responses are always sent in request order)."),
    KEY_LONG("shutdown.timeout.ms", shutdown_timeout_ms, "10000", 0, LMAX, KBR,
             "On SIGTERM, how long in-flight requests may take before connections are closed."),
    /* logs */
    KEY_LIST("log.dirs", log_dirs, NULL, NULL, 0,
             "Directories holding partition logs; overrides log.dir."),
    KEY_STR("log.dir", log_dir, "/tmp/kafka-logs", NULL, 0,
            "Directory holding partition logs when log.dirs is unset."),
    KEY_STR("metadata.log.dir", metadata_log_dir, NULL, NULL, 0,
            "Directory of the metadata log (__cluster_metadata-0); default: the first log "
            "directory."),
    KEY_INT("num.recovery.threads.per.data.dir", num_recovery_threads_per_data_dir, "2", 1, IMAX,
            DYN, "Threads per log directory for recovery at start and flush at shutdown."),
    KEY_INT("num.partitions", num_partitions, "1", 1, IMAX, 0,
            "Partitions of an auto-created topic or of CreateTopics with -1 partitions."),
    KEY_INT("default.replication.factor", default_replication_factor, "1", 1, IMAX, 0,
            "Replication factor of auto-created topics and of CreateTopics with -1."),
    KEY_BOOL("auto.create.topics.enable", auto_create_topics_enable, "true", 0,
             "Create a topic when Metadata asks for one that does not exist."),
    KEY_BOOL("delete.topic.enable", delete_topic_enable, "true", 0, "Allow DeleteTopics."),
    KEY_INT("log.segment.bytes", log_segment_bytes, "1073741824", 14, IMAX, DYN,
            "Largest size of one log segment file."),
    KEY_LONG("log.roll.ms", log_roll_ms, NULL, 1, LMAX, DYN,
             "Roll a new segment after this time even if not full; overrides log.roll.hours."),
    KEY_INT("log.roll.hours", log_roll_hours, "168", 1, IMAX, 0,
            "Segment roll time in hours when log.roll.ms is unset."),
    KEY_LONG("log.retention.ms", log_retention_ms, NULL, -1, LMAX, DYN,
             "Keep data this long; -1 forever. Overrides log.retention.minutes and .hours."),
    KEY_INT("log.retention.minutes", log_retention_minutes, NULL, -1, IMAX, 0,
            "Retention in minutes when log.retention.ms is unset."),
    KEY_INT("log.retention.hours", log_retention_hours, "168", -1, IMAX, 0,
            "Retention in hours when neither log.retention.ms nor .minutes is set."),
    KEY_LONG("log.retention.bytes", log_retention_bytes, "-1", -1, LMAX, DYN,
             "Largest size of a partition log before old segments are deleted; -1 no limit."),
    KEY_LONG("log.retention.check.interval.ms", log_retention_check_interval_ms, "300000", 1, LMAX,
             0, "How often retention is checked."),
    KEY_LONG("log.flush.interval.messages", log_flush_interval_messages, "9223372036854775807", 1,
             LMAX, DYN, "fsync a partition after this many appended messages."),
    KEY_LONG("log.flush.interval.ms", log_flush_interval_ms, NULL, 0, LMAX, DYN,
             "fsync a partition when its oldest unflushed message is this old."),
    KEY_INT("log.index.size.max.bytes", log_index_size_max_bytes, "10485760", 4, IMAX, DYN,
            "Largest size of an offset or time index file."),
    KEY_INT("log.index.interval.bytes", log_index_interval_bytes, "4096", 0, IMAX, DYN,
            "Bytes appended between two index entries."),
    KEY_STR("log.message.timestamp.type", log_message_timestamp_type, "CreateTime", kb_conf_ts_type,
            DYN, "Default timestamp type of topics."),
    KEY_LIST("log.cleanup.policy", log_cleanup_policy, "delete", kb_conf_cleanup, DYN,
             "Default cleanup policy of topics: delete, compact or both."),
    KEY_BOOL("log.cleaner.enable", log_cleaner_enable, "true", 0,
             "Run the log cleaner (needed by compacted topics, __consumer_offsets and "
             "__mirror_state)."),
    KEY_INT("log.cleaner.threads", log_cleaner_threads, "1", 0, IMAX, DYN, "Log cleaner threads."),
    KEY_LONG("log.cleaner.dedupe.buffer.size", log_cleaner_dedupe_buffer_size, "134217728", 0, LMAX,
             DYN,
             "Memory for the cleaner's key map, shared by the cleaner threads; "
             "more than 1 MiB per thread."),
    KEY_DOUBLE("log.cleaner.min.cleanable.ratio", log_cleaner_min_cleanable_ratio, "0.5", 0.0, 1.0,
               DYN, "Dirty/total ratio at which a log becomes eligible for cleaning."),
    KEY_LONG("log.cleaner.delete.retention.ms", log_cleaner_delete_retention_ms, "86400000", 0,
             LMAX, DYN, "How long tombstones are kept in compacted topics."),
    KEY_LONG("log.cleaner.backoff.ms", log_cleaner_backoff_ms, "15000", 0, LMAX, DYN,
             "Sleep of the cleaner when there is nothing to clean."),
    KEY_STR("compression.type", compression_type, "producer", kb_conf_compression, DYN,
            "Default compression of topics; producer keeps what the producer sent."),
    KEY_INT("message.max.bytes", message_max_bytes, "1048588", 0, IMAX, DYN,
            "Largest record batch a topic accepts (default for max.message.bytes)."),
    /* replication */
    KEY_INT("min.insync.replicas", min_insync_replicas, "1", 1, IMAX, DYN,
            "In-sync replicas needed for acks=all writes."),
    KEY_BOOL("unclean.leader.election.enable", unclean_leader_election_enable, "false", DYN,
             "Allow an out-of-sync replica to become leader (data loss)."),
    KEY_BOOL(
        "auto.leader.rebalance.enable", auto_leader_rebalance_enable, "true", 0,
        "The controller moves leadership back to the preferred replica (the first of the "
        "assignment) when it is in sync, checked every leader.imbalance.check.interval.seconds."),
    KEY_LONG("leader.imbalance.check.interval.seconds", leader_imbalance_check_interval_seconds,
             "300", 1, LMAX, 0, "How often the controller checks for partitions to rebalance."),
    KEY_INT("leader.imbalance.per.broker.percentage", leader_imbalance_per_broker_percentage, "10",
            0, IMAX, NOFX,
            "Imbalance ratio per broker that triggered a rebalance in ZooKeeper mode; a KRaft "
            "controller (Kafka 4.x, kbroker) rebalances every imbalanced partition."),
    KEY_LONG("replica.lag.time.max.ms", replica_lag_time_max_ms, "30000", 1, LMAX, 0,
             "A follower that has not caught up for this long leaves the ISR."),
    KEY_INT("replica.fetch.max.bytes", replica_fetch_max_bytes, "1048576", 0, IMAX, 0,
            "Bytes a follower fetches per partition."),
    KEY_INT("replica.fetch.wait.max.ms", replica_fetch_wait_max_ms, "500", 0, IMAX, 0,
            "Longest wait of a follower fetch."),
    KEY_INT("num.replica.fetchers", num_replica_fetchers, "1", 1, IMAX, DYN,
            "Follower fetcher threads per source broker."),
    KEY_INT("replica.fetch.min.bytes", replica_fetch_min_bytes, "1", 1, IMAX, 0,
            "Bytes a follower fetch waits for (up to replica.fetch.wait.max.ms)."),
    KEY_INT("replica.fetch.response.max.bytes", replica_fetch_response_max_bytes, "10485760", 0,
            IMAX, 0, "Bytes of a whole follower fetch answer."),
    KEY_INT("replica.fetch.backoff.ms", replica_fetch_backoff_ms, "1000", 0, IMAX, 0,
            "Pause of a follower fetch after an error."),
    /* groups and offsets */
    KEY_INT("offsets.topic.num.partitions", offsets_topic_num_partitions, "50", 1, IMAX, 0,
            "Partitions of __consumer_offsets (fixed once created)."),
    KEY_INT("offsets.topic.replication.factor", offsets_topic_replication_factor, "3", 1, 32767, 0,
            "Replication factor of __consumer_offsets."),
    KEY_INT("offsets.topic.segment.bytes", offsets_topic_segment_bytes, "104857600", 1, IMAX, 0,
            "Segment size of __consumer_offsets."),
    KEY_INT("offsets.retention.minutes", offsets_retention_minutes, "10080", 1, IMAX, 0,
            "How long committed offsets of an empty group are kept."),
    KEY_INT("group.initial.rebalance.delay.ms", group_initial_rebalance_delay_ms, "3000", 0, IMAX,
            0, "Wait before the first rebalance of a new group."),
    KEY_INT("group.min.session.timeout.ms", group_min_session_timeout_ms, "6000", 0, IMAX, 0,
            "Smallest session timeout a consumer may ask for."),
    KEY_INT("group.max.session.timeout.ms", group_max_session_timeout_ms, "1800000", 0, IMAX, 0,
            "Largest session timeout a consumer may ask for."),
    KEY_INT("group.max.size", group_max_size, "2147483647", 1, IMAX, 0,
            "Most members in one consumer group."),
    /* transactions */
    KEY_INT("transaction.max.timeout.ms", transaction_max_timeout_ms, "900000", 1, IMAX, 0,
            "Largest transaction.timeout.ms a producer may ask for."),
    KEY_INT("transaction.state.log.num.partitions", transaction_state_log_num_partitions, "50", 1,
            IMAX, 0, "Partitions of __transaction_state."),
    KEY_INT("transaction.state.log.replication.factor", transaction_state_log_replication_factor,
            "3", 1, 32767, 0, "Replication factor of __transaction_state."),
    KEY_INT("transaction.state.log.min.isr", transaction_state_log_min_isr, "2", 1, IMAX, 0,
            "min.insync.replicas of __transaction_state."),
    KEY_INT("transaction.state.log.segment.bytes", transaction_state_log_segment_bytes, "104857600",
            1, IMAX, 0, "Segment size of __transaction_state."),
    KEY_INT("transactional.id.expiration.ms", transactional_id_expiration_ms, "604800000", 1, IMAX,
            0, "Forget a transactional id unused for this long."),
    KEY_INT("share.coordinator.state.topic.replication.factor",
            share_coordinator_state_topic_replication_factor, "3", 1, 32767, NOFX,
            "Replication factor of __share_group_state (share groups: not implemented)."),
    KEY_INT("share.coordinator.state.topic.min.isr", share_coordinator_state_topic_min_isr, "2", 1,
            IMAX, NOFX, "min.insync.replicas of __share_group_state."),
    /* authorization (broker/acl; docs/broker.md "ACLs") */
    KEY_STR("authorizer.class.name", authorizer_class_name, "", kb_conf_authorizers, 0,
            "Authorizer: empty (none; the ACL APIs answer SECURITY_DISABLED) or one of Kafka's "
            "ACL authorizers, served by kbroker's own with Kafka's rules. The ACL APIs and "
            "kbx authorize() use it; request handlers do not enforce it yet."),
    KEY_STR("super.users", super_users, "", NULL, 0,
            "Principals allowed everything, separated by ';' (User:admin;User:ops)."),
    KEY_BOOL("allow.everyone.if.no.acl.found", allow_everyone_if_no_acl_found, "false", 0,
             "Allow an operation on a resource that has no ACL at all."),
    /* plugins, metrics, logging */
    KEY_LIST("plugin.paths", plugin_paths, "", NULL, KBR,
             "Plugin shared objects to load (mirroring: the path of kmirror.so)."),
    KEY_BOOL("mirror.enable", mirror_enable, "false", 0,
             "Enable cluster mirroring (KIP-1279). Other mirror.* keys go to the plugin."),
    KEY_STR("metrics.listener", metrics_listener, "", NULL, KBR,
            "Prometheus endpoint, http://host:port (GET /metrics); empty disables it."),
    KEY_STR("log.level", log_level, "info", kb_conf_log_levels, KBR,
            "Threshold of kbroker's own log on stderr."),
};

const size_t kb_config_defs_cnt = sizeof(kb_config_defs) / sizeof(kb_config_defs[0]);
