/*
 * kb_meta.h -- kbroker's cluster metadata: cluster id, this node, topics (name, topic id,
 * partitions with their replicas, ISR, leader, leader epoch and partition epoch, config
 * overrides, internal flag), dynamic broker configs, producer-id blocks; change listeners; and
 * the local partitions (kb_part_t) that belong to each topic.
 *
 * KRaft's shape in one process (docs/design.md C1, C2): the controller half validates a mutation
 * against the image, turns it into metadata records (TopicRecord, PartitionRecord, ConfigRecord,
 * PartitionChangeRecord, RemoveTopicRecord, ProducerIdsRecord; kb_meta_rec.h), commits them as
 * one record batch to the metadata log and applies them; the broker half is the image, which
 * changes only by applying records (the same path replays the log at start and will apply the
 * records a remote controller sends, kb_meta_apply_records), and that path also drives the local
 * partitions and the listeners.
 *
 * Durability: the metadata log `__cluster_metadata-0` in `metadata.log.dir` (default: the first
 * log dir), kept by the storage engine; a mutation is acknowledged once its batch is fsynced.
 * Start = the newest snapshot of the image (`<offset>-<epoch>.checkpoint`, kb_meta_checkpoint)
 * and replay of the log after it (a torn tail is cut by the storage engine's recovery; an
 * undecodable or inapplicable record, or a corrupt batch followed by more data, stops the start
 * with a message naming it). An old
 * `kbroker-metadata` snapshot is migrated into the log once. `meta.properties` (Kafka's format:
 * version, cluster.id, node.id, directory.id) is written in every log dir and checked at start.
 * Partition logs are created before a new topic is committed and deleted after a deletion is
 * committed; directories left behind by a crash in between are removed at start (kb_meta_attach).
 *
 * Locks: a change mutex serialises every mutation and apply together with the listener calls it
 * makes (so listeners see changes in order, one at a time); a rwlock guards the tables for
 * lookups. Listeners run with the change mutex held: they must not call mutating functions of
 * this header (lookups are fine) and must not block.
 *
 * Names are NUL-terminated; topic names are at most 249 bytes.
 *
 * @thread any
 */
#ifndef KB_META_H
#define KB_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_config.h"
#include "kb_meta_rec.h"
#include "kb_part.h"
#include "kb_tconf.h"
#include "kp_types.h"

typedef struct kb_meta_s kb_meta_t;

#define KB_TOPIC_NAME_MAX 249

#define KB_TOPIC_CONSUMER_OFFSETS  "__consumer_offsets"
#define KB_TOPIC_TRANSACTION_STATE "__transaction_state"
/* The mirror plugin's state: internal, but created by the plugin (never by kbroker itself). */
#define KB_TOPIC_MIRROR_STATE "__mirror_state"
/** The metadata log's topic (partition 0, in metadata.log.dir; never a client topic). */
#define KB_TOPIC_CLUSTER_METADATA "__cluster_metadata"

/** A copy of a topic's metadata. */
typedef struct kb_topic_info_s {
    char name[KB_TOPIC_NAME_MAX + 1];
    kp_uuid_t id;
    bool internal; /**< shown as internal in Metadata; clients may not produce to it */
    bool mirror;   /**< has mirror.name (any suffix) */
    int32_t partitions;
} kb_topic_info_t;

/* Results of partition lookups. */
#define KB_META_OK                0
#define KB_META_UNKNOWN_TOPIC     (-1)
#define KB_META_UNKNOWN_PARTITION (-2)
#define KB_META_OFFLINE           (-3) /**< known, but no local log (storage error) */
#define KB_META_NOT_REPLICA       (-4) /**< known, but this node is not one of its replicas */
/** Known and assigned to this node, its local log is being opened (the metadata that made this
 *  node a replica is being applied): not a leader or follower yet, as Kafka's broker answers
 *  (NOT_LEADER_OR_FOLLOWER), not a storage error. */
#define KB_META_NOT_READY (-5)

/**
 * Load (or create) the metadata of the broker configured by @p cfg: meta.properties in every
 * log dir (cluster.id from the config, else from meta.properties, else a new random one; node.id
 * must match), the snapshot file. No partition is opened yet.
 * @return the metadata, or NULL with a message in @p errstr.
 */
kb_meta_t *kb_meta_open(const kb_config_t *cfg, char *errstr, size_t errstr_size);

/** kb_partmgr_opts_t.config_for for partitions found on disk (opaque = the kb_meta_t). */
int kb_meta_log_config_for(void *opaque, const char *topic, int32_t partition,
                           kb_log_config_t *cfg);

/** Open the local partitions of every topic through @p pm and delete partition directories no
 *  topic claims. 0, or a negative kb_err_t with @p errstr. */
int kb_meta_attach(kb_meta_t *meta, kb_partmgr_t *pm, char *errstr, size_t errstr_size);

/** Tell the partitions whether the mirror plugin runs on this broker (kb_partmgr_set_mirror_plugin;
 *  nothing without a partition manager or with @p meta NULL). @thread any */
void kb_meta_set_mirror_plugin(kb_meta_t *meta, bool loaded);

/** Close every partition (cleanly) and free the metadata. Listeners must be gone. */
void kb_meta_close(kb_meta_t *meta);

const char *kb_meta_cluster_id(const kb_meta_t *meta);
int32_t kb_meta_node_id(const kb_meta_t *meta);
/** The metadata offset: the log offset of the last applied record (-1 before the first). */
int64_t kb_meta_offset(kb_meta_t *meta);

/* ---- lookups ------------------------------------------------------------------------------ */

/** 0 or KB_E_NOT_FOUND. */
int kb_meta_topic_by_name(kb_meta_t *meta, const char *name, kb_topic_info_t *out);
int kb_meta_topic_by_id(kb_meta_t *meta, const kp_uuid_t *id, kb_topic_info_t *out);

/** The mirror topic @p name belongs to: its mirror.name without the state suffix into @p mirror
 *  (truncated to @p size) and whether the suffix is .stopped/.removed into @p stopped.
 *  @return true for a topic with mirror.name, false for any other (or unknown) topic. */
bool kb_meta_topic_mirror(kb_meta_t *meta, const char *name, char *mirror, size_t size,
                          bool *stopped);

/** Every topic, sorted by name: malloc'd array (caller frees). 0 or KB_E_NOMEM. */
int kb_meta_topics(kb_meta_t *meta, kb_topic_info_t **out, size_t *cnt);

/** The leader epochs of a topic's partitions: malloc'd (caller frees). 0 or KB_E_NOT_FOUND. */
int kb_meta_topic_epochs(kb_meta_t *meta, const char *name, int32_t **epochs, int32_t *cnt);

/** Most replicas kb_meta_part_state reports per partition. */
#define KB_META_MAX_REPLICAS 64

/** A partition's replication state in the image. */
typedef struct kb_meta_part_state_s {
    int32_t leader;          /**< node id, -1 = none */
    int32_t leader_epoch;    /**< bumped by every leader change (and kb_meta_bump_epoch) */
    int32_t partition_epoch; /**< bumped by every change of the partition */
    int32_t nreplicas;
    int32_t nisr;
    int32_t replicas[KB_META_MAX_REPLICAS]; /**< preferred order */
    int32_t isr[KB_META_MAX_REPLICAS];
} kb_meta_part_state_t;

/** Replicas, ISR, leader and epochs of partition @p partition of topic @p id. KB_META_OK,
 *  KB_META_UNKNOWN_TOPIC or KB_META_UNKNOWN_PARTITION. (Single node: replicas = ISR = [this
 *  node], leader = this node.) */
int kb_meta_part_state(kb_meta_t *meta, const kp_uuid_t *id, int32_t partition,
                       kb_meta_part_state_t *out);

/** A copy of a topic's config overrides (hidden keys included): free with kb_kv_free(). */
int kb_meta_topic_configs(kb_meta_t *meta, const char *name, kb_kv_t **kv, size_t *cnt);
void kb_kv_free(kb_kv_t *kv, size_t cnt);

/** A reference on a local partition (release with kb_part_release). KB_META_* result. */
int kb_meta_part(kb_meta_t *meta, const char *topic, int32_t partition, kb_part_t **out);
int kb_meta_part_by_id(kb_meta_t *meta, const kp_uuid_t *id, int32_t partition, kb_part_t **out);

/* ---- validation ----------------------------------------------------------------------------- */

/** Kafka's topic-name rules: 1..249 characters of [a-zA-Z0-9._-], not "." or "..". */
bool kb_meta_topic_name_valid(const char *name, char *msg, size_t msg_size);

/** Kafka's internal topics (__consumer_offsets, __transaction_state). */
bool kb_meta_topic_is_internal_name(const char *name);

/* ---- mutations (return 0 or a Kafka error code with a message) ------------------------------ */

/** One manual replica list (CreateTopics / CreatePartitions Assignments): broker ids in
 *  preference order (the first is the preferred leader). */
typedef struct kb_meta_assignment_s {
    int32_t partition; /**< CreateTopics' PartitionIndex (CreatePartitions: by position) */
    const int32_t *brokers;
    int32_t nbrokers;
} kb_meta_assignment_t;

typedef struct kb_topic_spec_s {
    const char *name;
    int32_t partitions;
    const kb_kv_t *configs; /**< overrides (validated here) */
    size_t config_cnt;
    const kp_uuid_t *id; /**< NULL or zero: a random one */
    bool internal;       /**< unused: internal topics are known by their names (as in Kafka,
                              whose TopicRecord has no such flag) */
    bool privileged;     /**< the broker itself or the plugin: hidden keys (mirror.name) allowed */
    int32_t replication_factor; /**< replicas per partition (<= 0: 1); used with an assigner */
    /** Manual assignments (nassignments > 0; then @p partitions must equal nassignments and
     *  @p replication_factor is ignored): checked as Kafka's controller does (every broker
     *  registered in the image, none twice, the same count in every list, partitions 0..n-1,
     *  INVALID_REPLICA_ASSIGNMENT); the ISR is the unfenced replicas in list order, the leader
     *  the first of them. */
    const kb_meta_assignment_t *assignments;
    size_t nassignments;
} kb_topic_spec_t;

/** Create a topic (its logs first, then the metadata). With @p validate_only nothing changes.
 *  @p id_out (may be NULL) gets the topic id. Errors: INVALID_TOPIC_EXCEPTION,
 *  TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_CONFIG, INVALID_REQUEST (id in use),
 *  KAFKA_STORAGE_ERROR. */
int16_t kb_meta_create_topic(kb_meta_t *meta, const kb_topic_spec_t *spec, bool validate_only,
                             kp_uuid_t *id_out, char *msg, size_t msg_size);

/** Delete by name (or by @p id when @p name is NULL). Errors: UNKNOWN_TOPIC_OR_PARTITION,
 *  UNKNOWN_TOPIC_ID, KAFKA_STORAGE_ERROR. */
int16_t kb_meta_delete_topic(kb_meta_t *meta, const char *name, const kp_uuid_t *id, char *msg,
                             size_t msg_size);

/** Grow a topic to @p count partitions. Errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS,
 *  KAFKA_STORAGE_ERROR. */
int16_t kb_meta_create_partitions(kb_meta_t *meta, const char *name, int32_t count,
                                  bool validate_only, char *msg, size_t msg_size);
/** kb_meta_create_partitions() with manual assignments for the new partitions (@p nasg < 0:
 *  none; else exactly count minus the current count, each as many replicas as partition 0 has;
 *  the lists' partition fields are ignored). Adds INVALID_REPLICA_ASSIGNMENT. */
int16_t kb_meta_create_partitions_assigned(kb_meta_t *meta, const char *name, int32_t count,
                                           const kb_meta_assignment_t *asg, int32_t nasg,
                                           bool validate_only, char *msg, size_t msg_size);

#define KB_CFGOP_SET      0
#define KB_CFGOP_DELETE   1
#define KB_CFGOP_APPEND   2
#define KB_CFGOP_SUBTRACT 3

typedef struct kb_cfg_op_s {
    const char *key;
    int op;            /**< KB_CFGOP_* */
    const char *value; /**< may be NULL for DELETE */
} kb_cfg_op_t;

/**
 * Change a topic's overrides: @p replace_all (AlterConfigs) replaces every override with the
 * SETs given (hidden keys are kept unless @p privileged), otherwise the operations apply in
 * order (IncrementalAlterConfigs). Every key and value is validated; a client (!@p privileged)
 * touching a hidden key is refused. Errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG,
 * INVALID_REQUEST, KAFKA_STORAGE_ERROR.
 */
int16_t kb_meta_alter_topic_configs(kb_meta_t *meta, const char *topic, const kb_cfg_op_t *ops,
                                    size_t n, bool replace_all, bool privileged, bool validate_only,
                                    char *msg, size_t msg_size);

/** The same for dynamic broker configs; @p scope is "" (cluster default) or this node's id.
 *  Topics without their own override of an affected key are reconfigured. */
int16_t kb_meta_alter_broker_configs(kb_meta_t *meta, const char *scope, const kb_cfg_op_t *ops,
                                     size_t n, bool replace_all, bool validate_only, char *msg,
                                     size_t msg_size);

/** Copies of the dynamic broker configs (free both with kb_kv_free). */
int kb_meta_broker_dyncfg(kb_meta_t *meta, kb_kv_t **node, size_t *node_cnt, kb_kv_t **dflt,
                          size_t *dflt_cnt);

/** The effective value of broker key @p key (dynamic for this node > dynamic default >
 *  server.properties), for the plugin host's config_get. Copies into @p buf like snprintf and
 *  returns the full length, or -1 when the key is not set anywhere. */
int kb_meta_broker_config_get(kb_meta_t *meta, const char *key, char *buf, size_t size);

/** Raise the leader epoch of partition @p partition of topic @p id to at least @p min_epoch and
 *  at least by one (persisted; listeners get KB_META_EV_EPOCH). */
int16_t kb_meta_bump_epoch(kb_meta_t *meta, const kp_uuid_t *id, int32_t partition,
                           int32_t min_epoch, int32_t *new_epoch);

/** Allocate @p count consecutive producer ids (blocks of 1000 are persisted ahead, so ids are
 *  never handed out twice across restarts). 0 or a negative kb_err_t. */
int kb_meta_alloc_producer_ids(kb_meta_t *meta, int32_t count, int64_t *first);

/**
 * Create the internal topic @p name (__consumer_offsets with offsets.topic.*,
 * __transaction_state with transaction.state.log.*; compacted) if it does not exist yet.
 * @p out (may be NULL) gets its metadata. For the group and transaction coordinators.
 * On the controller of a cluster the replication factor is the configured one, replicas from
 * the assigner; fewer usable brokers: COORDINATOR_NOT_AVAILABLE (a node that is the only
 * registered broker, or has no assigner, caps it at its one broker). On a broker-only node the
 * internal-topic creator (kb_meta_set_internal_creator) is asked and COORDINATOR_NOT_AVAILABLE
 * answered until the topic arrives with the controller's metadata. 0 or a Kafka error code.
 */
int16_t kb_meta_ensure_internal_topic(kb_meta_t *meta, const char *name, kb_topic_info_t *out);

/** The settings internal topic @p name is created with: spec (partitions, replication factor,
 *  configs pointing into this struct) from @p cfg. */
typedef struct kb_meta_internal_spec_s {
    kb_topic_spec_t spec;
    kb_kv_t kv[5];
    char seg[24], isr[24];
} kb_meta_internal_spec_t;
/** Fill @p out for @p name (__consumer_offsets or __transaction_state); @p max_rf > 0 caps the
 *  replication factor (min.insync.replicas of __transaction_state is capped at the replication
 *  factor). 0, or INVALID_REQUEST for another name. */
int16_t kb_meta_internal_spec(const kb_config_t *cfg, const char *name, int32_t max_rf,
                              kb_meta_internal_spec_t *out);

/**
 * How a broker-only node has an internal topic created (broker/ctrl: CreateTopics to the
 * controller). Must not block or call this header's functions (called with the change lock
 * held); the topic reaches this node with the controller's metadata.
 */
typedef void(kb_meta_internal_creator_fn)(void *opaque, const char *name);
void kb_meta_set_internal_creator(kb_meta_t *meta, kb_meta_internal_creator_fn *fn, void *opaque);

/**
 * An auto-creation of topic @p name (Metadata, auto.create.topics.enable) on a broker-only node:
 * the creator above is asked (the controller creates it with num.partitions and
 * default.replication.factor) and true returned; the topic reaches this node with the
 * controller's metadata. false on a node that creates topics itself (kb_meta_create_topic).
 */
bool kb_meta_create_remote(kb_meta_t *meta, const char *name);

/** Write a snapshot of the image now (`<offset>-<epoch>.checkpoint` beside the metadata log;
 *  also done every 20 MiB of metadata and at close). 0 or KB_E_IO. */
int kb_meta_checkpoint(kb_meta_t *meta);

/**
 * Take metadata record batches that a remote controller committed (the broker half of a cluster,
 * as fetched from the controller; broker/ctrl's metadata fetcher): the batches from the local log's
 * end on are appended to this node's metadata log as they are and fsynced (they must continue it
 * without a gap), then every record above kb_meta_offset() changes the image, the local
 * partitions and tells the listeners, batch by batch. Not for a process that is its own
 * controller. 0, KB_E_IO, or KB_E_INVALID with @p err (a corrupt batch, a gap, a record that
 * cannot be decoded or applied, naming its offset; the records before it stay applied).
 */
int kb_meta_apply_records(kb_meta_t *meta, const void *buf, size_t len, char *err, size_t err_size);

/**
 * A broker-only node (broker/ctrl): this node's metadata log is the controller's copy, so every
 * mutation of this header is refused with NOT_CONTROLLER and a message naming controller
 * @p controller_id (the changes go to the controller; broker/ctrl forwards them). Call before
 * the server starts. @thread any
 */
void kb_meta_set_remote(kb_meta_t *meta, int32_t controller_id);

/**
 * Committed record batches of the metadata log from the batch holding @p offset (the
 * controller serving its brokers' metadata fetches): a malloc'd copy of whole batches, at most
 * @p max_bytes but at least one batch, into *@p buf / *@p len (0: nothing at or after
 * @p offset); *@p end gets the log end offset. 0, KB_E_RANGE (@p offset below the log start or
 * beyond its end) or KB_E_NOMEM.
 */
int kb_meta_log_read(kb_meta_t *meta, int64_t offset, int32_t max_bytes, uint8_t **buf, size_t *len,
                     int64_t *end);

/**
 * Replicas of a new partition (broker/ctrl on the controller, kb_meta_set_assigner): fill
 * @p out with @p rf broker ids for partition @p partition (the first is the leader); with
 * @p cap, fewer when fewer brokers are usable but only on a node that is the one registered
 * broker (*@p rf lowered; internal topics in a single-node setup). 0, or a Kafka
 * error (INVALID_REPLICATION_FACTOR) with @p msg. Called with the change lock held: must not
 * call this header's functions. Without an assigner a partition lives on this node alone.
 */
typedef int16_t(kb_meta_assign_fn)(void *opaque, int32_t partition, int32_t *rf, bool cap,
                                   int32_t *out, char *msg, size_t msg_size);
void kb_meta_set_assigner(kb_meta_t *meta, kb_meta_assign_fn *fn, void *opaque);

/**
 * Commit a PartitionChangeRecord for partition @p partition of topic @p id if its partition
 * epoch is still @p partition_epoch (-1: any): the new ISR (@p nisr < 0: unchanged) and leader
 * (KB_META_LEADER_UNCHANGED, -1 = none, else a broker id: a new leader epoch). @p out (may be
 * NULL) gets the state after. 0, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION,
 * INVALID_UPDATE_VERSION, NOT_CONTROLLER or KAFKA_STORAGE_ERROR. (The controller's AlterPartition
 * and elections.)
 */
#define KB_META_LEADER_UNCHANGED (-2)
int16_t kb_meta_change_partition(kb_meta_t *meta, const kp_uuid_t *id, int32_t partition,
                                 int32_t partition_epoch, int32_t leader, const int32_t *isr,
                                 int32_t nisr, kb_meta_part_state_t *out);

/** A registered broker in the image (RegisterBrokerRecord & co., written by broker/ctrl). */
typedef struct kb_meta_broker_s {
    int32_t id;
    int64_t epoch;
    kp_uuid_t incarnation;
    bool fenced;
    bool has_rack;
    char rack[128];
    int32_t nendpoints;
    kb_mendpoint_t endpoints[KB_MREC_MAX_ENDPOINTS];
} kb_meta_broker_t;

/** Copies of the registered brokers, sorted by id: a malloc'd array (caller frees). 0 or
 *  KB_E_NOMEM. */
int kb_meta_brokers(kb_meta_t *meta, kb_meta_broker_t **out, size_t *cnt);

/**
 * Commit records @p recs (built by the caller, e.g. broker/ctrl's broker registrations; still
 * the caller's to kb_mrec_clear) as one batch of the metadata log. 0, NOT_CONTROLLER,
 * KAFKA_STORAGE_ERROR or UNKNOWN_SERVER_ERROR with @p msg; INVALID_REQUEST (nothing written)
 * for an AccessControlEntryRecord of an id the image has or a RemoveAccessControlEntryRecord of
 * one it has not.
 */
int16_t kb_meta_commit_records(kb_meta_t *meta, const kb_mrec_t *recs, size_t n, char *msg,
                               size_t msg_size);
/** kb_meta_commit_records() that also gives the metadata offset of the batch's last record
 *  (*@p offset; -1 when nothing was committed). */
int16_t kb_meta_commit_records_at(kb_meta_t *meta, const kb_mrec_t *recs, size_t n, int64_t *offset,
                                  char *msg, size_t msg_size);

/** Copies of the plugin records of the image (KbrokerPluginRecords, live keys only, in
 *  first-write order): a malloc'd array (caller frees each with kb_mrec_clear, then the array).
 *  0 or KB_E_NOMEM. */
int kb_meta_plugin_records(kb_meta_t *meta, kb_mrec_t **out, size_t *cnt);

/**
 * Where a broker-only node gets producer-id blocks (broker/ctrl: AllocateProducerIds to the
 * controller): fill *@p start / *@p len with a block; may block for a round trip (called with no
 * lock of this module held). 0 or a negative kb_err_t.
 */
typedef int(kb_meta_pid_source_fn)(void *opaque, int64_t *start, int32_t *len);
/** Install it (before the server starts): kb_meta_alloc_producer_ids then hands out ids from
 *  the blocks it returns instead of committing ProducerIdsRecords. */
void kb_meta_set_pid_source(kb_meta_t *meta, kb_meta_pid_source_fn *fn, void *opaque);

/* ---- listeners ---------------------------------------------------------------------------- */

#define KB_META_EV_TOPIC  1 /**< topic created / deleted / partition count changed */
#define KB_META_EV_CONFIG 2 /**< a config key of a topic or broker resource changed */
#define KB_META_EV_EPOCH  3 /**< a partition's leader epoch changed */
#define KB_META_EV_ACL    5 /**< an ACL binding was created or removed (ev->acl; broker/acl) */
#define KB_META_EV_PLUGIN                                                                          \
    6 /**< a plugin record was written or deleted (ev->acl: the                                    \
           KbrokerPluginRecord; kbx controller_write, broker/host) */
#define KB_META_EV_REPLICAS                                                                        \
    4 /**< a partition's replicas or ISR changed, not its leader (local                            \
         log opened / deleted when this node joined / left) */
#define KB_META_EV_BROKER                                                                          \
    7 /**< a broker registered, unregistered, was fenced or unfenced (no payload:                  \
           kb_meta_brokers() has the image; not in snapshots) */

/* kb_meta_event_t.flags for KB_META_EV_TOPIC (the same values as kbx.h's KBX_TOPIC_*). */
#define KB_META_TOPIC_CREATED    0x1u
#define KB_META_TOPIC_DELETED    0x2u
#define KB_META_TOPIC_PARTITIONS 0x4u

typedef struct kb_meta_event_s {
    int type;
    uint32_t flags;
    int64_t offset;               /**< kb_meta_offset() after the change */
    bool snapshot;                /**< part of the initial snapshot of a new listener */
    const kb_topic_info_t *topic; /**< TOPIC, EPOCH (and CONFIG of a topic) */
    int32_t partition;            /**< EPOCH, REPLICAS */
    int32_t leader_epoch;         /**< EPOCH, REPLICAS */
    int8_t resource_type;         /**< CONFIG: KB_RES_TOPIC / KB_RES_BROKER */
    const char *resource_name;    /**< CONFIG: topic name, "" or the node id */
    const char *key;              /**< CONFIG */
    const char *value;            /**< CONFIG: NULL when removed */
    const kb_mrec_t *acl;         /**< ACL: the AccessControlEntryRecord (KB_MREC_ACL; the
                                       snapshot has only these) or RemoveAccessControlEntryRecord;
                                       PLUGIN: the KbrokerPluginRecord (the snapshot: every live
                                       key, with its value) */
} kb_meta_event_t;

typedef void(kb_meta_listen_fn)(void *opaque, const kb_meta_event_t *ev);
typedef struct kb_meta_listener_s kb_meta_listener_t;

/** Register a listener. With @p snapshot it first receives the current image (every topic as
 *  created, every override and dynamic broker config, ACL and plugin record), with
 *  ev->snapshot set. NULL on no
 *  memory. */
kb_meta_listener_t *kb_meta_listen(kb_meta_t *meta, kb_meta_listen_fn *fn, void *opaque,
                                   bool snapshot);
/** Unregister; on return the listener is not running. Not from inside a listener. */
void kb_meta_unlisten(kb_meta_t *meta, kb_meta_listener_t *l);

#endif /* KB_META_H */
