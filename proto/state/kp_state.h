/*
 * kp_state.h -- the `__mirror_state` record formats: binary keys and protobuf values
 * (docs/state-format.md). This module is the only one that sees the protobuf-c types; callers
 * work with the plain C structs below.
 *
 * Key (fixed binary, big-endian):  int16 record type | int16 length + mirror name bytes |
 *   [topic id: 16 bytes] | [partition: int32] -- which of the bracketed parts are present
 *   depends on the record type (KP_STATE_KEY_HAS_* below). A null value is a tombstone.
 * Value: a protobuf StateValue envelope (proto/state/mirror_state.proto) carrying a format
 *   version, a minimum reader version and exactly one record body matching the key's type.
 *
 * Decoded strings and arrays live in a caller-supplied kp_arena_t (copied out of the protobuf
 * message, which is freed before returning); key views point into the caller's key buffer.
 * protobuf-c allocates through the optional kp_alloc_t (NULL: malloc), the hook for the plugin
 * allocator and for fault injection.
 *
 * @thread any (no shared state)
 */
#ifndef KP_STATE_H
#define KP_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kp_arena.h"
#include "kp_compress.h" /* kp_alloc_t */
#include "kp_err.h"
#include "kp_types.h"
#include "kp_writer.h"

/** Format version this code writes, and the oldest reader version it asks for. */
#define KP_STATE_FORMAT_VERSION            1
#define KP_STATE_FORMAT_MIN_READER_VERSION 1

/* Record types: the int16 that starts every key. Never renumbered or reused. */
#define KP_STATE_REC_LAST_MIRROR_EPOCH    1 /**< key: mirror, topic id, partition */
#define KP_STATE_REC_PARTITION_STATE      2 /**< key: mirror, topic id, partition */
#define KP_STATE_REC_MIRROR               3 /**< key: mirror */
#define KP_STATE_REC_SYNCED_TOPIC_CONFIGS 4 /**< key: mirror, topic id */
#define KP_STATE_REC_SYNCED_ACLS          5 /**< key: mirror */
#define KP_STATE_REC_MAX                  5

#define KP_STATE_MIRROR_NAME_MAX 249 /**< mirror names follow topic-name rules */
#define KP_STATE_KEY_MAX_SIZE    (2 + 2 + KP_STATE_MIRROR_NAME_MAX + 16 + 4)

/*
 * Partition states as persisted (int8). Today they equal the provisional wire values
 * (proto/schema/provisional.kps MIRROR_STATE_*); persisted values never change meaning even if
 * the wire values do. 2 is reserved (the KIP prototype's ULE_RECOVERY).
 */
#define KP_PSTATE_UNKNOWN       (-1)
#define KP_PSTATE_PREPARING     0
#define KP_PSTATE_EPOCH_FENCING 1
#define KP_PSTATE_MIRRORING     3
#define KP_PSTATE_PAUSING       4
#define KP_PSTATE_PAUSED        5
#define KP_PSTATE_STOPPING      6
#define KP_PSTATE_STOPPED       7
#define KP_PSTATE_FAILED        8

/** "MIRRORING", ...; NULL for a value that is not a known state. */
const char *kp_state_pstate_name(int state);
/** The state named @p name (case-sensitive; LOG_TRUNCATION and LOG_ALIGNMENT read as
 *  PREPARING), or -2 if unknown. */
int kp_state_pstate_from_name(const char *name);

/* ---- keys -------------------------------------------------------------------------------- */

/** A decoded key. Fields a record type does not have are zero. */
typedef struct kp_state_key_s {
    int16_t type;      /**< KP_STATE_REC_* */
    kp_str_t mirror;   /**< view (into the parsed buffer, or the caller's string) */
    kp_uuid_t topicId; /**< types 1, 2, 4 */
    int32_t partition; /**< types 1, 2 */
} kp_state_key_t;

/** True if record type @p type has a topic id / a partition in its key. */
bool kp_state_key_has_topic(int type);
bool kp_state_key_has_partition(int type);

/** Exact encoded size of @p key (0 if the type is unknown). */
size_t kp_state_key_size(const kp_state_key_t *key);

/**
 * Append the binary key to @p wr.
 * @return 0, KP_E_UNSUPPORTED (unknown type), KP_E_INVALID (mirror name empty, longer than
 *         249 bytes or null; zero topic id; negative partition), or a writer error.
 */
int kp_state_key_encode(kp_writer_t *wr, const kp_state_key_t *key);

/**
 * Parse a binary key of exactly @p len bytes at @p buf (borrowed; key->mirror points into it).
 * @return 0; KP_E_UNSUPPORTED for a record type this code does not know (skip the record:
 *         a newer writer made it); KP_E_CORRUPT / KP_E_TRUNCATED / KP_E_TRAILING for bad keys.
 */
int kp_state_key_parse(const void *buf, size_t len, kp_state_key_t *key, const char **errstr);

/**
 * The `__mirror_state` partition of a record: toPositive(murmur2(bytes)) % @p num_partitions,
 * where bytes are the encoded key for partition-level records (types 1, 2) and the mirror name
 * for mirror-level records (types 3, 4, 5: they live with the mirror's coordinator).
 * @return the partition, or -1 for a bad key or @p num_partitions <= 0.
 */
int32_t kp_state_key_partition(const kp_state_key_t *key, int32_t num_partitions);

/** toPositive(murmur2(mirror name)) % @p num_partitions: where mirror-level duties run. */
int32_t kp_state_mirror_partition(kp_str_t mirror, int32_t num_partitions);

/* ---- values ------------------------------------------------------------------------------ */

/** Type 1: the last mirrored epoch of a mirror partition. */
typedef struct kp_state_lme_s {
    int32_t last_mirror_epoch;  /**< -1: none */
    int64_t last_mirror_offset; /**< -1: none */
    kp_str_t source_cluster_id; /**< null: not recorded */
    int64_t update_time_ms;     /**< -1: unknown */
} kp_state_lme_t;

/** Type 2: the state of a mirror partition. */
typedef struct kp_state_partition_s {
    int8_t state;                 /**< KP_PSTATE_*; other int8 values are kept (newer writer) */
    int32_t state_epoch;          /**< 0 */
    int32_t leader_epoch;         /**< -1 */
    int32_t last_mirrored_epoch;  /**< -1: no LME */
    int64_t last_mirrored_offset; /**< -1: no LME */
    kp_str_t error_message;       /**< null unless FAILED */
    int16_t retry_attempt;        /**< 0 */
    bool non_retryable;           /**< false */
    int8_t previous_state;        /**< -1: none */
    int64_t update_time_ms;       /**< -1: unknown */
    kp_str_t source_cluster_id;   /**< null: not recorded */
} kp_state_partition_t;

/** Type 3: the mirror. */
typedef struct kp_state_mirror_s {
    bool has_mirror_id;
    kp_uuid_t mirror_id;
    int64_t creation_time_ms; /**< -1: unknown */
    kp_str_t source_cluster_id;
    int64_t update_time_ms;
} kp_state_mirror_t;

/** Type 4: config keys the metadata sync set on one destination topic. */
typedef struct kp_state_topic_configs_s {
    kp_str_t topic_name;
    int32_t key_cnt;
    kp_str_t *keys;
    int64_t update_time_ms;
} kp_state_topic_configs_t;

/** One ACL binding, Kafka's wire enum values. */
typedef struct kp_state_acl_s {
    int8_t resource_type;
    kp_str_t resource_name;
    int8_t pattern_type;
    kp_str_t principal;
    kp_str_t host;
    int8_t operation;
    int8_t permission_type;
} kp_state_acl_t;

/** Type 5: ACL bindings the metadata sync created. */
typedef struct kp_state_acls_s {
    int32_t cnt;
    kp_state_acl_t *v;
    int64_t update_time_ms;
} kp_state_acls_t;

/** A decoded or to-be-encoded value: @p type selects the member of @p u. */
typedef struct kp_state_value_s {
    int16_t type;                /**< KP_STATE_REC_* */
    uint32_t format_version;     /**< decode: as written; encode: ignored (ours is written) */
    uint32_t min_reader_version; /**< decode: as written; encode: ignored */
    union {
        kp_state_lme_t lme;
        kp_state_partition_t partition;
        kp_state_mirror_t mirror;
        kp_state_topic_configs_t topic_configs;
        kp_state_acls_t acls;
    } u;
} kp_state_value_t;

/** Set @p v to record type @p type with every field at its documented default. */
void kp_state_value_init(kp_state_value_t *v, int16_t type);

/**
 * Append the protobuf envelope of @p v to @p wr. Temporary memory comes from @p al (NULL:
 * malloc) and is freed before returning.
 * @return 0, KP_E_UNSUPPORTED (unknown type), KP_E_INVALID (a string with a NUL byte, a
 *         negative count, a state value outside int8), KP_E_NOMEM, or a writer error.
 */
int kp_state_value_encode(kp_writer_t *wr, const kp_state_value_t *v, const kp_alloc_t *al);

/**
 * Decode the envelope at @p buf (@p len bytes, borrowed). Strings and arrays are copied into
 * @p ar (so @p buf may go away); protobuf-c allocates through @p al (NULL: malloc).
 * Unknown fields (written by a newer format) are ignored.
 * @return 0; KP_E_UNSUPPORTED (min_reader_version above ours, or a record body this code does
 *         not know); KP_E_CORRUPT (not protobuf, no format version, no body, out-of-range
 *         numbers, a mirror id that is not 16 bytes; also an allocation failure inside
 *         protobuf-c, which reports both the same way); KP_E_NOMEM (arena limit).
 */
int kp_state_value_decode(const void *buf, size_t len, kp_arena_t *ar, kp_state_value_t *v,
                          const kp_alloc_t *al, const char **errstr);

/* ---- records ----------------------------------------------------------------------------- */

/** One `__mirror_state` record: key plus value or tombstone. */
typedef struct kp_state_record_s {
    kp_state_key_t key;
    bool tombstone;         /**< null value: the key's state is deleted */
    kp_state_value_t value; /**< valid when !tombstone */
} kp_state_record_t;

/**
 * Parse a record from its key bytes and value bytes (@p value.len == -1: tombstone), as read
 * from the topic. Checks that the value's body matches the key's record type.
 * @return as kp_state_key_parse() / kp_state_value_decode(), or KP_E_CORRUPT on a type
 *         mismatch.
 */
int kp_state_record_parse(kp_bytes_t key, kp_bytes_t value, kp_arena_t *ar, kp_state_record_t *rec,
                          const kp_alloc_t *al, const char **errstr);

#endif /* KP_STATE_H */
