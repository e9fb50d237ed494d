/*
 * kp_mrec.h -- KRaft metadata record values (docs/design.md C2, docs/codec.md).
 *
 * A record in the metadata log (`__cluster_metadata`) carries, as its value:
 *
 *     uvarint frame version (always 1)
 *     uvarint record type   (kp_records[].type, e.g. KP_RECTYPE_TopicRecord)
 *     uvarint record version
 *     the record, encoded by the generated codec of that type and version
 *
 * The record types are the `record` schema files of proto/schema/metadata; their structs,
 * KP_RECTYPE_* ids and the kp_records[] table are generated into kp_msgs.h.
 *
 * @thread any (no shared state)
 */
#ifndef KP_MREC_H
#define KP_MREC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kp_msgs.h"

/** The only frame version Kafka defines. */
#define KP_MREC_FRAME_VERSION 1

/** A decoded metadata record value. */
typedef struct kp_mrec_s {
    uint32_t frame_ver;           /**< as read, also on failure (0 if not reached) */
    uint32_t type;                /**< as read, also on failure */
    uint32_t ver;                 /**< as read, also on failure */
    const kp_record_info_t *info; /**< the record type, NULL if unknown or not reached */
    void *rec;                    /**< the record (an info->desc struct) in the arena, or NULL */
    const char *errstr;           /**< static description of the failure, NULL on success */
} kp_mrec_t;

/**
 * Decode one record value of exactly @p len bytes. The record struct and its arrays live in
 * @p ar; strings and bytes point into @p buf. Every byte must belong to the record.
 * Returns 0 or a kp_err_t: KP_E_UNSUPPORTED (frame version other than 1, or a record type this
 * codec does not know), KP_E_BAD_VERSION (a version the type does not have), KP_E_TRAILING
 * (bytes after the record), KP_E_NOMEM, or the decoder's error (KP_E_TRUNCATED, KP_E_VARINT,
 * ...). On failure @p out->errstr says what was wrong and frame_ver/type/ver hold what was read.
 */
int kp_mrec_decode(const void *buf, size_t len, kp_arena_t *ar, kp_mrec_t *out);

/**
 * Append the value of record @p rec (a struct of record type @p type) at version @p ver.
 * Returns 0 or a kp_err_t: KP_E_UNSUPPORTED (unknown type), KP_E_BAD_VERSION, or the
 * encoder's error (KP_E_FIELD_LOST, ...). On failure the writer is left failed.
 */
int kp_mrec_encode(kp_writer_t *wr, int16_t type, int16_t ver, const void *rec);

/** Exactly the number of bytes kp_mrec_encode() writes, or 0 for an unknown type or version. */
size_t kp_mrec_size(int16_t type, int16_t ver, const void *rec);

/** One-line JSON: {"type":N,"name":"TopicRecord","version":V,"record":{...}}. */
void kp_mrec_print(FILE *out, const kp_mrec_t *m, unsigned flags);

#endif /* KP_MREC_H */
