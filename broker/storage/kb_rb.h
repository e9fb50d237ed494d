/*
 * kb_rb.h -- the storage engine's helpers on top of proto/runtime's kp_batch.h: what the
 * runtime does not offer (yet) for a log.
 *
 *  - kb_rb_set_log_append_time: LogAppendTime stamping (attribute bit + maxTimestamp + new CRC);
 *  - kb_rb_control_type: the control record type of a control batch (decompressing if needed);
 *  - kb_rb_builder: rebuild a batch keeping each record's original offsetDelta (the log cleaner
 *    needs offset gaps and the original lastOffsetDelta), recompressing with a given codec.
 *
 * @thread any (no shared state)
 */
#ifndef KB_RB_H
#define KB_RB_H

#include <stddef.h>
#include <stdint.h>

#include "kp_batch.h"
#include "kp_writer.h"

/** Stamp LogAppendTime: set the timestamp-type attribute bit, maxTimestamp = @p ts, recompute
 *  the CRC, as Kafka's LogValidator does in place. @p len is the whole batch size (>= 61). */
void kb_rb_set_log_append_time(uint8_t *batch, size_t len, int64_t ts);

/** Control record type (KP_CONTROL_TYPE_*) of the control batch @p b, or a negative kp_err_t if
 *  the first record can't be read. @p coord_epoch (optional) gets a marker's coordinator epoch
 *  or -1. Compressed control batches are decompressed (bounded). */
int kb_rb_control_type(const kp_batch_t *b, int32_t *coord_epoch);

/** Batch rebuilder: header fields taken from @p orig, records added with explicit offset deltas
 *  and timestamps; keeps baseOffset and (optionally) lastOffsetDelta of the original. */
typedef struct kb_rb_builder_s {
    kp_batch_hdr_t hdr; /**< header of the batch being built (copied from the original) */
    kp_writer_t recs;   /**< uncompressed records */
    int32_t count;
    int64_t max_ts;
    int err;
} kb_rb_builder_t;

/** Start a batch with @p orig's header. @p base_ts becomes baseTimestamp (Kafka writes the
 *  delete horizon there when @p attributes has KP_BATCH_ATTR_DELETE_HORIZON). */
void kb_rb_builder_init(kb_rb_builder_t *b, const kp_batch_hdr_t *orig, int16_t attributes,
                        int64_t base_ts);
/** Add a record copied from an iterated original (its offset delta and timestamp kept). */
void kb_rb_builder_add(kb_rb_builder_t *b, const kp_record_t *r);
/** Write the batch (compressed with the attribute codec) to @p out. lastOffsetDelta is the
 *  original's; maxTimestamp is recomputed for CreateTime (kept for LogAppendTime); an empty
 *  batch (all records removed) keeps only the header with recordCount 0.
 *  @return 0 or a kp_err_t (out untouched on error). */
int kb_rb_builder_finish(kb_rb_builder_t *b, kp_writer_t *out);
void kb_rb_builder_free(kb_rb_builder_t *b);

#endif /* KB_RB_H */
