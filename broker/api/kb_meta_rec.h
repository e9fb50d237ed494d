/*
 * kb_meta_rec.h -- the metadata records kbroker's controller writes to the metadata log
 * (`__cluster_metadata-0`) and its brokers apply to their image, in Apache Kafka's KRaft framing:
 * the value of each log record is
 *
 *     frameVersion uvarint (1) | record type uvarint | record version uvarint | record
 *
 * with the record in the flexible encoding of Kafka's metadata record schemas, encoded and decoded
 * by the generated codec (proto/schema/metadata, proto/runtime/kp_mrec.h). kb_mrec_t keeps only
 * the record types and fields kbroker uses (other known types decode to their type alone).
 *
 * kbroker extension: PartitionChangeRecord tagged field KB_MREC_TAG_LEADER_EPOCH (int32) sets the
 * new leader epoch explicitly (a leader-epoch bump to at least a given epoch, kbx
 * leader_epoch_bump); Kafka's decoders skip it and would add one instead.
 *
 * @thread any (no shared state)
 */
#ifndef KB_META_REC_H
#define KB_META_REC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kp_types.h"
#include "kp_writer.h"

/* Record types (Kafka's metadata record api keys). */
#define KB_MREC_TOPIC             2  /**< TopicRecord */
#define KB_MREC_PARTITION         3  /**< PartitionRecord */
#define KB_MREC_CONFIG            4  /**< ConfigRecord */
#define KB_MREC_PARTITION_CHANGE  5  /**< PartitionChangeRecord */
#define KB_MREC_REMOVE_TOPIC      9  /**< RemoveTopicRecord */
#define KB_MREC_PRODUCER_IDS      15 /**< ProducerIdsRecord */
#define KB_MREC_REGISTER_BROKER   0  /**< RegisterBrokerRecord (broker/ctrl) */
#define KB_MREC_UNREGISTER_BROKER 1  /**< UnregisterBrokerRecord */
#define KB_MREC_FENCE_BROKER      7  /**< FenceBrokerRecord (read; kbroker writes 17) */
#define KB_MREC_UNFENCE_BROKER    8  /**< UnfenceBrokerRecord (read; kbroker writes 17) */
#define KB_MREC_BROKER_CHANGE     17 /**< BrokerRegistrationChangeRecord */
#define KB_MREC_ACL               18 /**< AccessControlEntryRecord (broker/acl) */
#define KB_MREC_REMOVE_ACL        19 /**< RemoveAccessControlEntryRecord */
/** KbrokerPluginRecord: kbroker's own type (kbx controller_write), far above Kafka's types. */
#define KB_MREC_PLUGIN 10000
/** Largest key / value of a plugin record (bytes). */
#define KB_MREC_PLUGIN_MAX (1 << 20)

/** Most endpoints a broker registration keeps. */
#define KB_MREC_MAX_ENDPOINTS 16

/** A listener endpoint of a registered broker. */
typedef struct kb_mendpoint_s {
    char name[64];
    char host[256];
    int32_t port;
    int16_t security_protocol;
} kb_mendpoint_t;

#define KB_MREC_FRAME_VERSION 1

/** PartitionChangeRecord.Leader: the leader did not change. */
#define KB_MREC_NO_LEADER_CHANGE (-2)
/** kbroker's PartitionChangeRecord tag: the new leader epoch (see the header comment). */
#define KB_MREC_TAG_LEADER_EPOCH 10000

/** Most replicas (or ISR members) a partition record may carry. */
#define KB_MREC_MAX_REPLICAS 1024

/** One decoded (or to be encoded) metadata record. Strings and arrays are malloc'd and owned by
 *  the record (kb_mrec_clear frees them). Fields not used by the type are ignored. */
typedef struct kb_mrec_s {
    int16_t type;
    int16_t version;
    kp_uuid_t topic_id; /**< TOPIC, PARTITION, PARTITION_CHANGE, REMOVE_TOPIC */
    char *name;         /**< TOPIC: the topic name */
    int32_t partition;  /**< PARTITION, PARTITION_CHANGE */
    int32_t *replicas;  /**< PARTITION; PARTITION_CHANGE (NULL with nreplicas -1: unchanged) */
    int32_t nreplicas;
    int32_t *isr; /**< the same for the ISR */
    int32_t nisr;
    int32_t leader;           /**< PARTITION; PARTITION_CHANGE: KB_MREC_NO_LEADER_CHANGE */
    int32_t leader_epoch;     /**< PARTITION; PARTITION_CHANGE: kbroker's tag, -1 = absent */
    int32_t partition_epoch;  /**< PARTITION */
    int8_t resource_type;     /**< CONFIG: KB_RES_TOPIC / KB_RES_BROKER (kb_tconf.h) */
    char *resource_name;      /**< CONFIG: topic name, "" or the node id */
    char *key;                /**< CONFIG */
    char *value;              /**< CONFIG: NULL = the key is removed */
    int32_t broker_id;        /**< PRODUCER_IDS */
    int64_t broker_epoch;     /**< PRODUCER_IDS */
    int64_t next_producer_id; /**< PRODUCER_IDS: first id of the next block */
    /* broker records: broker_id and broker_epoch above, and */
    kp_uuid_t incarnation;     /**< REGISTER_BROKER */
    kb_mendpoint_t *endpoints; /**< REGISTER_BROKER (malloc'd) */
    int32_t nendpoints;
    char *rack;    /**< REGISTER_BROKER: NULL = none */
    int8_t fenced; /**< REGISTER_BROKER: 1/0; BROKER_CHANGE: 1 fenced, -1 unfenced, 0 same */
    /* ACL records (Kafka's codes, kb_acl.h; checked by broker/acl when applied, not here) */
    kp_uuid_t acl_id;    /**< ACL, REMOVE_ACL */
    int8_t acl_restype;  /**< ACL: ResourceType */
    int8_t acl_pattern;  /**< ACL: PatternType */
    int8_t acl_op;       /**< ACL: Operation */
    int8_t acl_perm;     /**< ACL: PermissionType */
    char *acl_name;      /**< ACL: ResourceName (never NULL once decoded) */
    char *acl_principal; /**< ACL: Principal */
    char *acl_host;      /**< ACL: Host */
    /* PLUGIN: the latest value per (plugin_type, key) counts; no value deletes the key */
    int32_t plugin_type;
    uint8_t *pkey; /**< PLUGIN (malloc'd; never NULL once decoded) */
    size_t pkey_len;
    uint8_t *pvalue; /**< PLUGIN (malloc'd; NULL when !has_pvalue) */
    size_t pvalue_len;
    bool has_pvalue; /**< PLUGIN: false = the key is deleted */
} kb_mrec_t;

/** An empty record of @p type with Kafka's defaults (arrays null for PARTITION_CHANGE). */
void kb_mrec_init(kb_mrec_t *r, int16_t type);
void kb_mrec_clear(kb_mrec_t *r);

/** Deep copy of ACL record @p src (KB_MREC_ACL or KB_MREC_REMOVE_ACL: type, id, codes, strings)
 *  into @p dst. 0 or KB_E_NOMEM (@p dst then empty). */
int kb_mrec_acl_copy(kb_mrec_t *dst, const kb_mrec_t *src);

/** Deep copy of plugin record @p src (KB_MREC_PLUGIN) into @p dst. 0 or KB_E_NOMEM (@p dst
 *  then empty). */
int kb_mrec_plugin_copy(kb_mrec_t *dst, const kb_mrec_t *src);

/** Name of a record type ("TopicRecord", ...; "unknown" otherwise). */
const char *kb_mrec_type_name(int16_t type);

/** Append the framed record to @p wr. 0, or a negative kp_err_t (the writer's error). */
int kb_mrec_encode(const kb_mrec_t *r, kp_writer_t *wr);

/** Decode one framed record from exactly @p len bytes. 0, or -1 with a message in @p err (bad
 *  frame version, unknown type or version, truncated or malformed field, trailing bytes). */
int kb_mrec_decode(kb_mrec_t *r, const void *buf, size_t len, char *err, size_t err_size);

#endif /* KB_META_REC_H */
