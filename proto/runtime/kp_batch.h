/*
 * kp_batch.h -- Kafka record batch v2 ("magic 2"): parse, validate, iterate, build, and the
 * in-place edits the broker and the mirror data path need. docs/record-format.md has the
 * layout and the rules.
 *
 * Layout (big-endian; offsets from the batch start):
 *
 *    0 baseOffset int64            \  outside the CRC: the broker may rewrite them
 *    8 batchLength int32            | (baseOffset on append, partitionLeaderEpoch
 *   12 partitionLeaderEpoch int32   | on leader append) without touching the CRC
 *   16 magic int8                   |
 *   17 crc uint32                  /   CRC-32C of bytes [21, end)
 *   21 attributes int16  23 lastOffsetDelta int32  27 baseTimestamp int64
 *   35 maxTimestamp int64  43 producerId int64  51 producerEpoch int16
 *   53 baseSequence int32  57 recordCount int32  61 records...
 *
 * All parse functions take borrowed buffers and return views into them; nothing is copied or
 * allocated except where a scratch writer is passed (decompression). Every function returns 0 /
 * a count, or a negative kp_err_t, and fills an optional static `errstr` with the reason.
 * Error classes:
 *   KP_E_UNSUPPORTED  magic 0 or 1 (the legacy message format): "unsupported message format";
 *   KP_E_CORRUPT      anything else wrong inside a complete batch (bad CRC, unknown magic,
 *                     inconsistent lengths or counts, bad record framing, unknown codec id);
 *   KP_E_TRUNCATED    the buffer ends before the batch does;
 *   KP_E_TOO_LARGE    a batch or the decompressed records exceed a configured limit.
 *
 * @thread any (no shared state)
 */
#ifndef KP_BATCH_H
#define KP_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kp_compress.h"
#include "kp_err.h"
#include "kp_types.h"
#include "kp_writer.h"

#define KP_BATCH_MAGIC         2
#define KP_BATCH_HEADER_SIZE   61 /**< bytes before the first record */
#define KP_BATCH_LOG_OVERHEAD  12 /**< baseOffset + batchLength (not counted in batchLength) */
#define KP_BATCH_MIN_LENGTH    (KP_BATCH_HEADER_SIZE - KP_BATCH_LOG_OVERHEAD) /**< 49 */
#define KP_BATCH_MAGIC_OFFSET  16
#define KP_BATCH_CRC_OFFSET    17
#define KP_BATCH_ATTR_OFFSET   21 /**< the CRC covers [21, end) */
#define KP_BATCH_EPOCH_OFFSET  12
#define KP_BATCH_LENGTH_OFFSET 8
/** Smallest possible record on the wire (length varint + 6 one-byte fields). */
#define KP_RECORD_MIN_SIZE 7

/* Attribute bits. */
#define KP_BATCH_ATTR_COMPRESSION_MASK 0x0007
#define KP_BATCH_ATTR_TIMESTAMP_TYPE   0x0008 /**< 1 = LogAppendTime */
#define KP_BATCH_ATTR_TRANSACTIONAL    0x0010
#define KP_BATCH_ATTR_CONTROL          0x0020
#define KP_BATCH_ATTR_DELETE_HORIZON   0x0040 /**< baseTimestamp is the delete horizon */

#define KP_NO_PRODUCER_ID            (-1)
#define KP_NO_PRODUCER_EPOCH         (-1)
#define KP_NO_SEQUENCE               (-1)
#define KP_NO_PARTITION_LEADER_EPOCH (-1)

/* Control record types (the int16 in a control record's key). The generated kp_msgs.h defines
 * the same names with the same values from proto/schema/provisional.kps. */
#ifndef KP_CONTROL_TYPE_ABORT
#define KP_CONTROL_TYPE_ABORT 0
#endif
#ifndef KP_CONTROL_TYPE_COMMIT
#define KP_CONTROL_TYPE_COMMIT 1
#endif
#ifndef KP_CONTROL_TYPE_MIRROR_PID_RESET
/** KIP-1279 MIRROR_PID_RESET (provisional; also defined by the generated kp_msgs.h). */
#define KP_CONTROL_TYPE_MIRROR_PID_RESET 7
#endif

/** Decoded batch header, field names as in the Kafka spec. */
typedef struct kp_batch_hdr_s {
    int64_t baseOffset;
    int32_t batchLength;
    int32_t partitionLeaderEpoch;
    int8_t magic;
    uint32_t crc;
    int16_t attributes;
    int32_t lastOffsetDelta;
    int64_t baseTimestamp;
    int64_t maxTimestamp;
    int64_t producerId;
    int16_t producerEpoch;
    int32_t baseSequence;
    int32_t recordCount;
} kp_batch_hdr_t;

static inline int kp_batch_hdr_codec(const kp_batch_hdr_t *h)
{
    return h->attributes & KP_BATCH_ATTR_COMPRESSION_MASK;
}
static inline bool kp_batch_hdr_is_control(const kp_batch_hdr_t *h)
{
    return (h->attributes & KP_BATCH_ATTR_CONTROL) != 0;
}
static inline bool kp_batch_hdr_is_transactional(const kp_batch_hdr_t *h)
{
    return (h->attributes & KP_BATCH_ATTR_TRANSACTIONAL) != 0;
}
static inline bool kp_batch_hdr_log_append_time(const kp_batch_hdr_t *h)
{
    return (h->attributes & KP_BATCH_ATTR_TIMESTAMP_TYPE) != 0;
}
static inline bool kp_batch_hdr_has_delete_horizon(const kp_batch_hdr_t *h)
{
    return (h->attributes & KP_BATCH_ATTR_DELETE_HORIZON) != 0;
}
/** baseOffset + lastOffsetDelta, saturated at the int64 limits: both come from the wire, and a
 *  corrupt header (baseOffset near INT64_MAX) must not overflow; such a batch is refused later
 *  by the offset checks of whoever appends or replays it. */
static inline int64_t kp_batch_hdr_last_offset(const kp_batch_hdr_t *h)
{
    if (h->lastOffsetDelta > 0 && h->baseOffset > INT64_MAX - h->lastOffsetDelta)
        return INT64_MAX;
    if (h->lastOffsetDelta < 0 && h->baseOffset < INT64_MIN - h->lastOffsetDelta)
        return INT64_MIN;
    return h->baseOffset + h->lastOffsetDelta;
}

/** One complete batch inside a borrowed buffer. */
typedef struct kp_batch_s {
    kp_batch_hdr_t hdr;
    const uint8_t *buf;     /**< first byte (baseOffset) */
    size_t size;            /**< batchLength + 12 */
    const uint8_t *records; /**< buf + 61: the records, compressed or not */
    size_t records_len;     /**< size - 61 */
} kp_batch_t;

/* Flags for kp_batch_parse() / the iterators / kp_batch_chunk_check(). */
#define KP_BATCH_F_SKIP_CRC        0x01u /**< do not verify the CRC (fuzzing, repair tools) */
#define KP_BATCH_F_EPOCH_MONOTONIC 0x02u /**< chunk: epochs must not decrease batch to batch */

/**
 * Decode the 61 header bytes at @p buf without validating anything but the length.
 * @return 0, or KP_E_TRUNCATED if @p len < 61.
 */
int kp_batch_hdr_decode(const void *buf, size_t len, kp_batch_hdr_t *hdr);

/**
 * Parse and validate the batch that starts at @p buf (@p len bytes available; bytes after the
 * batch are ignored): magic, batchLength bounds (49 .. @p max_size - 12, and within @p len),
 * the attribute codec id, recordCount/lastOffsetDelta consistency, the records fitting
 * recordCount for an uncompressed batch, and the CRC unless KP_BATCH_F_SKIP_CRC.
 * @param max_size largest acceptable batch (batchLength + 12); 0 = INT32_MAX.
 * @param errstr optional; receives a static description on failure.
 * @return 0, KP_E_UNSUPPORTED, KP_E_CORRUPT, KP_E_TRUNCATED or KP_E_TOO_LARGE.
 */
int kp_batch_parse(const void *buf, size_t len, size_t max_size, unsigned flags, kp_batch_t *b,
                   const char **errstr);

/** CRC-32C over bytes [21, @p size) of the batch at @p buf (what the crc field must hold). */
uint32_t kp_batch_crc_compute(const void *buf, size_t size);

/**
 * Iterator over concatenated batches, as in a Fetch response's records field. A trailing
 * partial batch is not an error (Kafka truncates fetch responses at the size limit): the
 * iterator stops and reports its size in @p trailing.
 */
typedef struct kp_batch_iter_s {
    const uint8_t *buf;
    size_t len;
    size_t pos;      /**< start of the next batch */
    size_t max_size; /**< per-batch limit, as kp_batch_parse() */
    unsigned flags;
    int err;            /**< 0 or the error that stopped the iteration */
    const char *errstr; /**< static reason for err */
    size_t trailing;    /**< bytes of an incomplete batch at the end (valid once done) */
} kp_batch_iter_t;

void kp_batch_iter_init(kp_batch_iter_t *it, const void *buf, size_t len, size_t max_size,
                        unsigned flags);

/**
 * Next batch. @return 1 with @p b filled; 0 at the end (clean, or a trailing partial batch:
 * see it->trailing); a negative kp_err_t for a bad batch at it->pos (sticky: the iterator
 * stays there).
 */
int kp_batch_iter_next(kp_batch_iter_t *it, kp_batch_t *b);

/** Summary of a chunk checked by kp_batch_chunk_check(). */
typedef struct kp_chunk_info_s {
    size_t valid_bytes; /**< bytes of complete, valid batches from the start */
    size_t trailing;    /**< bytes of a trailing partial batch */
    int32_t batch_cnt;
    int64_t first_offset;  /**< baseOffset of the first batch, -1 if none */
    int64_t next_offset;   /**< last offset of the last batch + 1, -1 if none */
    int32_t max_epoch;     /**< highest partitionLeaderEpoch, -1 if none */
    int64_t max_timestamp; /**< highest maxTimestamp, -1 if none */
    size_t bad_pos;        /**< on error: position of the bad batch in the chunk */
    int64_t bad_offset;    /**< on error: its baseOffset if readable, else -1 */
    const char *errstr;    /**< on error: static reason */
} kp_chunk_info_t;

/**
 * Check a fetched chunk (concatenated batches) byte for byte without decompressing anything:
 * every complete batch must parse (framing, magic 2, CRC), offsets must increase from batch to
 * batch (a batch's baseOffset > the previous batch's last offset) and, with
 * KP_BATCH_F_EPOCH_MONOTONIC, partition leader epochs must not decrease. A trailing partial
 * batch is allowed and reported. This is the mirror data path's only validation.
 * @return 0 (chunk good up to info->valid_bytes), or the first batch's error (info says where).
 */
int kp_batch_chunk_check(const void *buf, size_t len, size_t max_size, unsigned flags,
                         kp_chunk_info_t *info);

/**
 * Set baseOffset of the batch at @p buf in place. baseOffset lies outside the CRC range, so the
 * CRC stays valid and nothing else changes (record offsets are deltas).
 * @return 0, or KP_E_TRUNCATED if @p len < 61.
 */
int kp_batch_set_base_offset(void *buf, size_t len, int64_t base_offset);

/** Set partitionLeaderEpoch in place (outside the CRC range, like baseOffset). */
int kp_batch_set_partition_leader_epoch(void *buf, size_t len, int32_t epoch);

/* ---- records ----------------------------------------------------------------------------- */

/** A record header; views into the record data. */
typedef struct kp_record_header_s {
    kp_str_t key;     /**< never null */
    kp_bytes_t value; /**< len -1 = null */
} kp_record_header_t;

/** One record; views into the (decompressed) record data. */
typedef struct kp_record_s {
    int32_t length; /**< body length (after the length varint) */
    int8_t attributes;
    int64_t timestampDelta;
    int32_t offsetDelta;
    int64_t offset;    /**< baseOffset + offsetDelta */
    int64_t timestamp; /**< baseTimestamp + delta, or maxTimestamp with LogAppendTime */
    kp_bytes_t key;    /**< len -1 = null */
    kp_bytes_t value;  /**< len -1 = null */
    int32_t header_cnt;
    const uint8_t *headers; /**< the raw headers (after the count); validated */
    size_t headers_len;
} kp_record_t;

/** Iterator over the records of one batch. */
typedef struct kp_record_iter_s {
    const uint8_t *buf; /**< record data (borrowed) */
    size_t len;
    size_t pos;
    int32_t left; /**< records still expected */
    kp_batch_hdr_t hdr;
    int err;
    const char *errstr;
} kp_record_iter_t;

/**
 * Start iterating the records of @p b. An uncompressed batch is iterated in place. A compressed
 * one is decompressed into @p scratch (appended; growable or fixed, owned by the caller, must
 * outlive the iteration) with at most @p max_out bytes of output. @p scratch may be NULL only
 * for uncompressed batches. To decompress into an arena, pass a fixed writer over
 * kp_arena_alloc(ar, max_out).
 * @return 0, or KP_E_CORRUPT (bad compressed data, unknown codec), KP_E_TOO_LARGE (over
 *         max_out), KP_E_NOMEM, KP_E_OVERFLOW, KP_E_INVALID (compressed and no scratch).
 */
int kp_record_iter_init(kp_record_iter_t *it, const kp_batch_t *b, kp_writer_t *scratch,
                        size_t max_out);

/** Iterate records already at hand (uncompressed, or decompressed by the caller). */
void kp_record_iter_init_raw(kp_record_iter_t *it, const kp_batch_hdr_t *hdr, const void *data,
                             size_t len);

/**
 * Next record. Every length is bounds-checked against the record body. @return 1 with @p r
 * filled; 0 after recordCount records when the data is exactly used up; KP_E_CORRUPT
 * otherwise, truncation included (sticky; it->errstr says why).
 */
int kp_record_iter_next(kp_record_iter_t *it, kp_record_t *r);

/**
 * Next header of @p r. @p *pos is a byte position in the headers: start at 0; it is advanced.
 * @return 1 with @p h filled (views into the record data), 0 after the last header. The headers
 * were validated by kp_record_iter_next().
 */
int kp_record_header_next(const kp_record_t *r, size_t *pos, kp_record_header_t *h);

/* ---- building ---------------------------------------------------------------------------- */

/** Batch-level settings for the builder. Start from kp_batch_opts_init(). */
typedef struct kp_batch_opts_s {
    int64_t baseOffset;           /**< 0 */
    int32_t partitionLeaderEpoch; /**< -1 */
    int64_t producerId;           /**< -1 */
    int16_t producerEpoch;        /**< -1 */
    int32_t baseSequence;         /**< -1 */
    bool transactional;           /**< false */
    bool control;                 /**< false */
    bool log_append_time;         /**< false; true stamps maxTimestamp = log_append_time_ms */
    int64_t log_append_time_ms;
    int codec; /**< KP_CODEC_NONE */
    int level; /**< KP_COMPRESS_LEVEL_DEFAULT */
} kp_batch_opts_t;

void kp_batch_opts_init(kp_batch_opts_t *o);

/** Accumulates records, then writes one batch. */
typedef struct kp_batch_builder_s {
    kp_batch_opts_t opts;
    kp_writer_t recs; /**< uncompressed records (owned) */
    int32_t count;
    int64_t baseTimestamp;
    int64_t maxTimestamp;
    int err;
} kp_batch_builder_t;

void kp_batch_builder_init(kp_batch_builder_t *bb, const kp_batch_opts_t *opts);

/**
 * Append a record with offsetDelta = the number of records so far. Keys and values are
 * copied; len -1 means null. @p hdrs may be NULL when @p hdr_cnt is 0.
 * @return 0, or the builder's sticky error (KP_E_NOMEM, KP_E_INVALID for a null header key
 *         or a negative count).
 */
int kp_batch_builder_add(kp_batch_builder_t *bb, int64_t timestamp, kp_bytes_t key,
                         kp_bytes_t value, const kp_record_header_t *hdrs, int32_t hdr_cnt);

/**
 * Write the batch (header, compressed records, CRC) to the end of @p out.
 * @return 0, KP_E_INVALID (no records), or a compression/writer error. On error @p out keeps
 *         its length on entry.
 */
int kp_batch_builder_finish(kp_batch_builder_t *bb, kp_writer_t *out);

void kp_batch_builder_free(kp_batch_builder_t *bb);

/* ---- control batches --------------------------------------------------------------------- */

/** A decoded control record. */
typedef struct kp_control_s {
    int16_t keyVersion;
    int16_t type;             /**< KP_CONTROL_TYPE_*; unknown types are reported, not errors */
    int16_t valueVersion;     /**< -1 if the record has no (parsed) value */
    int32_t coordinatorEpoch; /**< ABORT/COMMIT; -1 otherwise */
    int32_t reserved;         /**< MIRROR_PID_RESET v0's reserved int32; 0 otherwise */
} kp_control_t;

/**
 * Append a control batch with one control record of @p type to @p out: for ABORT/COMMIT
 * (a transaction marker) value = {version 0, @p coordinator_epoch}; for MIRROR_PID_RESET
 * value = {version 0, reserved int32 0} and @p coordinator_epoch is ignored. The batch takes
 * baseOffset, partitionLeaderEpoch, producer id/epoch, transactional and codec from @p opts;
 * the control flag is set for you. Markers must be transactional with a producer id; a
 * MIRROR_PID_RESET batch is not tied to a producer (see docs/record-format.md).
 * @return 0, KP_E_INVALID (unknown type), or a writer error.
 */
int kp_batch_build_control(kp_writer_t *out, const kp_batch_opts_t *opts, int16_t type,
                           int32_t coordinator_epoch, int64_t timestamp);

/**
 * The control type of control batch @p b (read from its first record's key), without
 * allocating: what the broker's append and recovery paths need to spot ABORT/COMMIT markers and
 * MIRROR_PID_RESET.
 * @return 0 with @p *type set; KP_E_INVALID (not a control batch), KP_E_UNSUPPORTED
 *         (compressed: use the record iterator), KP_E_CORRUPT (no well-formed control record).
 */
int kp_batch_control_type(const kp_batch_t *b, int16_t *type);

/** Convenience: opts for a MIRROR_PID_RESET batch (no producer, not transactional). */
void kp_batch_opts_mirror_pid_reset(kp_batch_opts_t *o, int64_t base_offset, int32_t epoch);

/**
 * Decode the control record @p r (from a control batch).
 * @return 0, or KP_E_CORRUPT (key shorter than 4 bytes, negative versions, a marker value
 *         shorter than 6 bytes, a type-7 value shorter than 2 bytes).
 */
int kp_control_parse(const kp_record_t *r, kp_control_t *c, const char **errstr);

#endif /* KP_BATCH_H */
