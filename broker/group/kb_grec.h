/*
 * kb_grec.h -- the records of __consumer_offsets, in the byte layouts Apache Kafka 4.x reads and
 * writes, and the group -> partition mapping (docs/broker.md, "Consumer groups").
 *
 * Every record of the topic has a key and (except tombstones) a value, each starting with an
 * int16 version. The key version says what the record is:
 *
 *   key 0 or 1  offset commit:  group string, topic string, partition int32
 *   key 2       group metadata: group string
 *   key 3+      records of the KIP-848/share/streams coordinators (skipped by kbroker)
 *
 * Values (null value = tombstone of the key):
 *
 *   offset commit v0: offset int64, metadata string, commit timestamp int64
 *                 v1: v0 + expire timestamp int64 (written when the commit had a retention time)
 *                 v2: as v0
 *                 v3: offset, leader epoch int32, metadata, commit timestamp
 *                 v4: as v3 but metadata is a compact string and a tag section follows; tag 0
 *                     carries the topic id (16 bytes). Kafka 4.4 writes v4 (v1 with an expire
 *                     timestamp); so does kbroker.
 *   group metadata v0..v4: protocol type string, generation int32, protocol string?, leader
 *                 string?, [v2+] current state timestamp int64, members array of: member id,
 *                 [v3+] group instance id string?, client id, client host, [v1+] rebalance
 *                 timeout int32, session timeout int32, subscription bytes, assignment bytes.
 *                 v4 uses compact encodings and tag sections. Kafka 4.x writes v3; so does
 *                 kbroker.
 *
 * Strings are int16-length UTF-8 (-1 = null), bytes and arrays int32-length; compact forms use
 * an unsigned varint of length + 1 (0 = null).
 *
 * Decoded records are views into the caller's buffer (kp_str_t / kp_bytes_t).
 *
 * @thread any (no shared state)
 */
#ifndef KB_GREC_H
#define KB_GREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kp_types.h"
#include "kp_writer.h"

/* ---- group -> partition ------------------------------------------------------------------ */

/** Java's String.hashCode() of the UTF-8 string @p s (@p len bytes): the UTF-16 code units of
 *  the decoded string (malformed sequences become U+FFFD, as Java's decoder does), h = 31*h + c
 *  in 32-bit arithmetic. */
int32_t kb_grec_java_hash(const char *s, size_t len);

/** Kafka's partitionFor: abs(hashCode) % @p partitions, where abs(INT32_MIN) is 0. */
int32_t kb_grec_partition_for(const char *s, size_t len, int32_t partitions);

/* ---- keys ---------------------------------------------------------------------------------- */

#define KB_GREC_KEY_OFFSET 1 /**< offset commit (key version 0 or 1) */
#define KB_GREC_KEY_GROUP  2 /**< group metadata (key version 2) */
#define KB_GREC_KEY_OTHER  3 /**< another coordinator's record: skip it */

typedef struct kb_grec_key_s {
    int type; /**< KB_GREC_KEY_* */
    int16_t version;
    kp_str_t group;
    kp_str_t topic;    /**< offset commit */
    int32_t partition; /**< offset commit */
} kb_grec_key_t;

/** Offset commit key (written as version 1). */
void kb_grec_offset_key_write(kp_writer_t *wr, const char *group, const char *topic,
                              int32_t partition);
/** Group metadata key (version 2). */
void kb_grec_group_key_write(kp_writer_t *wr, const char *group);

/** Decode a key. 0, or -1 for a malformed key (too short, trailing bytes, bad string). */
int kb_grec_key_decode(const uint8_t *buf, size_t len, kb_grec_key_t *out);

/* ---- offset commit values ------------------------------------------------------------------ */

typedef struct kb_grec_offset_s {
    int64_t offset;
    int32_t leader_epoch; /**< -1 unknown */
    kp_str_t metadata;    /**< never null once decoded (Kafka stores "" for none) */
    int64_t commit_ts;
    int64_t expire_ts;  /**< -1 none (only version 1 has one) */
    kp_uuid_t topic_id; /**< zero: unknown (version 4 tag 0) */
} kb_grec_offset_t;

/** Write @p v as Kafka 4.4 does: version 1 when it has an expire timestamp, else version 4 with
 *  the topic id tag when the id is not zero. */
void kb_grec_offset_value_write(kp_writer_t *wr, const kb_grec_offset_t *v);
/** Write at an explicit @p version (0..4; tests and format conversions). */
void kb_grec_offset_value_write_v(kp_writer_t *wr, const kb_grec_offset_t *v, int16_t version);
/** Decode versions 0..4 (later versions: -1). 0 or -1. */
int kb_grec_offset_value_decode(const uint8_t *buf, size_t len, kb_grec_offset_t *out);

/* ---- group metadata values ----------------------------------------------------------------- */

typedef struct kb_grec_member_s {
    kp_str_t member_id;
    kp_str_t instance_id; /**< null: dynamic member */
    kp_str_t client_id;
    kp_str_t client_host;
    int32_t rebalance_timeout; /**< v0 records: the session timeout */
    int32_t session_timeout;
    kp_bytes_t subscription; /**< metadata of the selected protocol */
    kp_bytes_t assignment;
} kb_grec_member_t;

typedef struct kb_grec_group_s {
    kp_str_t protocol_type; /**< "" for groups without one */
    int32_t generation;
    kp_str_t protocol; /**< null when none selected */
    kp_str_t leader;   /**< null when none */
    int64_t state_ts;  /**< -1 unknown */
    int32_t member_cnt;
    kb_grec_member_t *members; /**< decode: malloc'd by the decoder, free with free() */
} kb_grec_group_t;

/** Write group metadata value version 3. */
void kb_grec_group_value_write(kp_writer_t *wr, const kb_grec_group_t *v);
/** Write at an explicit @p version (0..4). */
void kb_grec_group_value_write_v(kp_writer_t *wr, const kb_grec_group_t *v, int16_t version);
/** Decode versions 0..4. @p out->members is malloc'd (NULL when there are none); free it with
 *  free() whatever the result. 0 or -1. */
int kb_grec_group_value_decode(const uint8_t *buf, size_t len, kb_grec_group_t *out);

#endif /* KB_GREC_H */
