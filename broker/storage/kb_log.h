/*
 * kb_log.h -- one partition log of kbroker, kept as Apache Kafka keeps it: segment files named by
 * base offset (.log/.index/.timeindex/.txnindex), producer-state snapshots (.snapshot), the
 * leader-epoch-checkpoint, crash recovery, retention, truncation and the log cleaner.
 * docs/storage.md describes the formats and the rules.
 *
 * Threads and locks. Every kb_log_t has a writer mutex (one writer at a time: appends,
 * truncation, log-start moves, retention, flush, close, the cleaner's swap) and a rwlock that
 * guards what readers see (segment list, LEO/HW/LSO/log start, indexes, epoch cache). Writers
 * do their file I/O holding only the writer mutex and publish the result under the rwlock's
 * write side; readers take the read side only while they compute a file slice. Unless stated
 * otherwise below: "@thread any; @locks writer" = takes the writer mutex (and briefly the rwlock)
 * inside; "@locks read" = takes only the read side. No function may be called from a listener
 * callback except the "@locks read" ones.
 *
 * Errors: functions named as actions return 0 or a negative kb_sto_err_t.
 */
#ifndef KB_STORAGE_LOG_H
#define KB_STORAGE_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "kb_log_config.h"

/* X(name, value, description) */
#define KB_STO_ERRNO_MAP(X)                                                                        \
    X(OK, 0, "success")                                                                            \
    X(IO, -1, "file system error")                                                                 \
    X(NOMEM, -2, "out of memory")                                                                  \
    X(INVALID, -3, "invalid argument")                                                             \
    X(OFFSET_OUT_OF_RANGE, -4, "offset out of range")                                              \
    X(CORRUPT_MESSAGE, -5, "corrupt record batch (framing or CRC)")                                \
    X(UNSUPPORTED_FORMAT, -6, "unsupported message format (magic 0/1)")                            \
    X(RECORD_TOO_LARGE, -7, "batch larger than max.message.bytes")                                 \
    X(INVALID_RECORD, -8, "invalid record (count, offsets, key on a compacted topic)")             \
    X(INVALID_TIMESTAMP, -9, "timestamp outside message.timestamp.*.max.ms")                       \
    X(NON_MONOTONIC, -10, "raw append below the log end offset or offsets not increasing")         \
    X(DUPLICATE_SEQUENCE, -11, "duplicate batch (already appended; see the info offsets)")         \
    X(OUT_OF_ORDER_SEQUENCE, -12, "out of order sequence number")                                  \
    X(INVALID_PRODUCER_EPOCH, -13, "producer epoch is older than the current one")                 \
    X(COORDINATOR_FENCED, -14, "transaction marker with an older coordinator epoch")               \
    X(CLOSED, -15, "log is closed or deleted")                                                     \
    X(ABORTED, -16, "operation aborted (the log changed underneath, retry later)")                 \
    X(CORRUPT_LOG, -17, "log files are corrupt and cannot be recovered")

typedef enum kb_sto_err_e {
#define KB_STO_ERR_ENUM_(name, val, desc) KB_STO_##name = (val),
    KB_STO_ERRNO_MAP(KB_STO_ERR_ENUM_)
#undef KB_STO_ERR_ENUM_
} kb_sto_err_t;

/** Static description / name of a kb_sto_err_t. @thread any */
const char *kb_sto_err_str(int err);
const char *kb_sto_err_name(int err);

typedef struct kb_log_s kb_log_t;

/** Millisecond wall clock; tests pass a manual one. */
typedef int64_t (*kb_clock_fn)(void *opaque);

/** Listener called after every append / HW change / truncation that changes what readers may
 *  see, on the writer's thread, with no log lock held. Must not block. */
typedef void (*kb_log_listener_fn)(void *opaque, kb_log_t *log, int64_t leo, int64_t hw);

typedef struct kb_log_open_opts_s {
    int64_t recovery_point;   /**< -1: unknown (recover every segment) */
    int64_t log_start_offset; /**< -1: unknown (first segment's base offset) */
    int64_t high_watermark;   /**< -1: unknown (log start offset) */
    int64_t cleaner_offset;   /**< first dirty offset for the cleaner, -1: log start */
    int clean_shutdown;       /**< the dir's clean-shutdown marker was present */
    kb_clock_fn clock;        /**< NULL: CLOCK_REALTIME */
    void *clock_opaque;
} kb_log_open_opts_t;

void kb_log_open_opts_init(kb_log_open_opts_t *o);

/** Open (creating it if needed) the partition log in directory @p dir, recovering it.
 *  @return the log, or NULL with a message in @p errstr. @thread any (not yet shared) */
kb_log_t *kb_log_open(const char *dir, const kb_log_config_t *cfg, const kb_log_open_opts_t *opts,
                      char *errstr, size_t errstr_size);

/** Close: with @p clean, flush everything and write a producer snapshot at the LEO so the next
 *  open needs no recovery. Frees the log (slices still held stay valid until released).
 *  @thread any, no other thread may use the log any more. */
void kb_log_close(kb_log_t *log, int clean);

/** Replace the topic config (AlterConfigs). @locks writer */
void kb_log_set_config(kb_log_t *log, const kb_log_config_t *cfg);
void kb_log_get_config(kb_log_t *log, kb_log_config_t *cfg);
const char *kb_log_dir(const kb_log_t *log);

/** Install the append listener (long-poll fetch wake-ups). @locks writer */
void kb_log_set_listener(kb_log_t *log, kb_log_listener_fn fn, void *opaque);

/* ---- append ------------------------------------------------------------------------------ */

#define KB_ORIGIN_CLIENT      0 /**< Produce: validated, sequence checked */
#define KB_ORIGIN_COORDINATOR 1 /**< transaction markers / internal control batches */

#define KB_APPEND_F_SKIP_VALIDATE 0x1u /**< leader append: caller ran kb_log_validate_produce */

typedef struct kb_append_info_s {
    int64_t first_offset;     /**< base offset of the first batch */
    int64_t last_offset;      /**< last offset of the last batch */
    int64_t log_append_time;  /**< -1 unless LogAppendTime */
    int64_t log_start_offset; /**< at the time of the append */
    int64_t max_timestamp;
    int32_t batch_count;
    int32_t record_count;
    int64_t size; /**< bytes appended */
} kb_append_info_t;

/** Validate a producer's records for a leader append (no lock, no log state): magic 2 only,
 *  framing, CRC, each batch ≤ max.message.bytes, recordCount/lastOffsetDelta sane, record
 *  offset deltas 0..n-1 (uncompressed or after decompression), keys present on compacted
 *  topics, timestamps within message.timestamp.{before,after}.max.ms of @p now_ms for CreateTime,
 *  no control batches from clients. @thread any @locks none */
int kb_log_validate_produce(const kb_log_config_t *cfg, const uint8_t *buf, size_t len,
                            int64_t now_ms, const char **errstr);

/** Leader append of producer batches in @p buf (modified in place: baseOffset = LEO,
 *  partitionLeaderEpoch = @p leader_epoch, LogAppendTime when configured, with new CRC). With
 *  KB_ORIGIN_CLIENT the batch's producer state is checked (kb_log_check_sequence); a
 *  duplicate returns KB_STO_DUPLICATE_SEQUENCE with the original offsets in @p info.
 *  @locks writer */
int kb_log_append_leader(kb_log_t *log, uint8_t *buf, size_t len, int32_t leader_epoch, int origin,
                         unsigned flags, kb_append_info_t *info);

/** Raw append (follower replication, mirror): bytes stored exactly; batches must be complete,
 *  magic 2, CRC-valid, offsets increasing and the first ≥ LEO (gaps allowed). Producer state,
 *  epoch cache, transaction index updated as a follower does, no rejection on sequences.
 *  @locks writer */
int kb_log_append_raw(kb_log_t *log, const uint8_t *buf, size_t len, kb_append_info_t *info);

/** Append a control batch written by the leader: ABORT/COMMIT marker for @p pid / @p pepoch
 *  with @p coord_epoch, or MIRROR_PID_RESET (@p pid ignored). @locks writer */
int kb_log_append_control(kb_log_t *log, int16_t type, int64_t pid, int16_t pepoch,
                          int32_t coord_epoch, int32_t leader_epoch, kb_append_info_t *info);

/* ---- reading ----------------------------------------------------------------------------- */

#define KB_ISOLATION_LEO       0 /**< followers: up to the log end offset */
#define KB_ISOLATION_HW        1 /**< read_uncommitted consumers */
#define KB_ISOLATION_COMMITTED 2 /**< read_committed consumers: up to the LSO */

typedef struct kb_log_read_s {
    int fd;                          /**< file to read from, -1 if nothing to read */
    int64_t pos;                     /**< byte position in fd */
    int64_t len;                     /**< bytes (whole batches) */
    int64_t first_offset;            /**< base offset of the first batch returned, -1 if none */
    int64_t next_offset;             /**< offset after the last batch returned */
    int64_t hw, lso, leo, log_start; /**< at read time */
    void *ref_; /**< keeps the segment file open; release with kb_log_read_release */
} kb_log_read_t;

/** Read whole batches starting at the batch containing @p offset (or the next one after a
 *  gap), up to @p max_bytes (the first batch may exceed it if @p min_one), bounded by the
 *  isolation level's upper offset. Reads one segment at a time, as Kafka does. The result is
 *  a file slice valid until kb_log_read_release (even if the log is truncated or the segment
 *  deleted meanwhile; bytes after a concurrent truncation may then be short or stale, as with
 *  Kafka's sendfile). @return 0 or KB_STO_OFFSET_OUT_OF_RANGE (offset < log start or > LEO).
 *  @locks read */
int kb_log_read(kb_log_t *log, int64_t offset, int32_t max_bytes, int isolation, int min_one,
                kb_log_read_t *out);
void kb_log_read_release(kb_log_read_t *r);

/** kb_log_read, copying the bytes into a malloc'd buffer (*buf, caller frees). @locks read */
int kb_log_read_copy(kb_log_t *log, int64_t offset, int32_t max_bytes, int isolation, int min_one,
                     uint8_t **buf, size_t *len, kb_log_read_t *meta);

typedef struct kb_aborted_txn_s {
    int64_t producer_id;
    int64_t first_offset;
    int64_t last_offset; /**< offset of the ABORT marker */
    int64_t lso;         /**< last stable offset when the abort was appended */
} kb_aborted_txn_t;

/** Aborted transactions overlapping [@p start, @p upper): for read_committed Fetch responses.
 *  *out is malloc'd (caller frees), sorted by marker offset. @locks read */
int kb_log_aborted_txns(kb_log_t *log, int64_t start, int64_t upper, kb_aborted_txn_t **out,
                        size_t *cnt);

/* ---- offsets ----------------------------------------------------------------------------- */

#define KB_TS_LATEST         (-1)
#define KB_TS_EARLIEST       (-2)
#define KB_TS_MAX_TIMESTAMP  (-3)
#define KB_TS_EARLIEST_LOCAL (-4)

/** ListOffsets: @p ts a timestamp or KB_TS_*. Gives the first offset whose timestamp ≥ ts
 *  (the record's own offset and timestamp), or offset -1 / ts -1 if none; LATEST = LEO,
 *  EARLIEST(_LOCAL) = log start, MAX_TIMESTAMP = the record with the largest timestamp.
 *  @p epoch gets the leader epoch of the batch / epoch cache at that offset (-1 unknown).
 *  @locks read */
int kb_log_offset_for_timestamp(kb_log_t *log, int64_t ts, int64_t *offset, int64_t *found_ts,
                                int32_t *epoch);

int64_t kb_log_leo(kb_log_t *log);            /**< @locks read */
int64_t kb_log_hw(kb_log_t *log);             /**< @locks read */
int64_t kb_log_lso(kb_log_t *log);            /**< last stable offset @locks read */
int64_t kb_log_start_offset(kb_log_t *log);   /**< @locks read */
int64_t kb_log_recovery_point(kb_log_t *log); /**< @locks read */
int64_t kb_log_cleaner_offset(kb_log_t *log); /**< @locks read */
int64_t kb_log_size_bytes(kb_log_t *log);     /**< sum of segment sizes @locks read */
int kb_log_segment_count(kb_log_t *log);      /**< @locks read */
/** Base offsets of the segments (malloc'd, caller frees). @locks read */
int kb_log_segment_bases(kb_log_t *log, int64_t **bases, size_t *cnt);

/** Set the high watermark (clamped to [log start, LEO]); releases completed transactions from
 *  the LSO computation and notifies the listener. @locks writer */
int kb_log_set_hw(kb_log_t *log, int64_t hw);

/* ---- leader epochs ----------------------------------------------------------------------- */

#define KB_EPOCH_UNDEFINED        (-1)
#define KB_EPOCH_OFFSET_UNDEFINED (-1)

/** OffsetsForLeaderEpoch: end offset of @p epoch = start offset of the next higher epoch, or
 *  LEO for the latest epoch. Requested epoch below the first cached epoch: (@p epoch, start of
 *  the first epoch) as Kafka; above the latest / no cache / UNDEFINED: (-1, -1). @locks read */
void kb_log_epoch_end_offset(kb_log_t *log, int32_t epoch, int32_t *out_epoch, int64_t *out_offset);
/** Latest cached epoch or -1. @locks read */
int32_t kb_log_latest_epoch(kb_log_t *log);
/** Epoch whose range contains @p offset, or -1. @locks read */
int32_t kb_log_epoch_for_offset(kb_log_t *log, int64_t offset);
/** Assign @p epoch starting at @p start_offset (becoming leader: start = LEO); persists the
 *  checkpoint. Ignored if not newer. @locks writer */
int kb_log_assign_epoch(kb_log_t *log, int32_t epoch, int64_t start_offset);
/** Copy of the cache: malloc'd arrays (caller frees). @locks read */
int kb_log_epoch_entries(kb_log_t *log, int32_t **epochs, int64_t **starts, size_t *cnt);

/* ---- truncation and log start -------------------------------------------------------------- */

/** Remove everything at or above @p offset (≥ LEO: nothing is cut, only epoch cache entries
 *  starting at the LEO are dropped, as Kafka does): whole segments deleted, the one
 *  containing it truncated at the first batch whose last offset ≥ @p offset. As in Kafka the
 *  whole batch holding @p offset goes, so the new LEO is that batch's base offset when
 *  @p offset falls inside a batch (never below the log start: a batch straddling the log start
 *  leaves the log empty there); indexes, epoch cache, producer state (snapshot + replay),
 *  transaction index, HW fixed. @locks writer */
int kb_log_truncate_to(kb_log_t *log, int64_t offset);
/** Delete every segment and restart empty at @p offset (log start = HW = LEO = offset; epoch
 *  cache and producer state cleared). @locks writer */
int kb_log_truncate_fully(kb_log_t *log, int64_t offset);
/** Move the log start offset up to @p offset, deleting whole segments below it (an @p offset
 *  beyond the LEO empties the log as kb_log_truncate_fully). Lower values are ignored.
 *  @locks writer */
int kb_log_set_start_offset(kb_log_t *log, int64_t offset);
/** DeleteRecords: as kb_log_set_start_offset but refuses offsets above the HW
 *  (KB_STO_OFFSET_OUT_OF_RANGE); -1 means "the HW". @locks writer */
int kb_log_delete_records(kb_log_t *log, int64_t offset, int64_t *new_start);

/* ---- producer state ---------------------------------------------------------------------- */

#define KB_SEQ_OK                     0
#define KB_SEQ_DUPLICATE              1
#define KB_SEQ_OUT_OF_ORDER           2
#define KB_SEQ_INVALID_PRODUCER_EPOCH 3

/** Duplicate / sequence / epoch check for a producer batch on the leader path (Kafka's rules;
 *  see docs/storage.md). For DUPLICATE the original batch's offsets go to @p dup_first /
 *  @p dup_last. @locks writer */
int kb_log_check_sequence(kb_log_t *log, int64_t pid, int16_t pepoch, int32_t first_seq,
                          int32_t last_seq, int64_t *dup_first, int64_t *dup_last);

typedef struct kb_producer_info_s {
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t last_sequence; /**< -1 if no batch cached */
    int64_t last_offset;   /**< -1 if no batch cached */
    int64_t last_timestamp;
    int32_t coordinator_epoch;
    int64_t txn_first_offset; /**< -1 if no ongoing transaction */
    int32_t cached_batches;
} kb_producer_info_t;

/** State of one producer: 0, or KB_STO_INVALID if unknown. @locks writer */
int kb_log_producer_get(kb_log_t *log, int64_t pid, kb_producer_info_t *out);
/** All producers (DescribeProducers): malloc'd array. @locks writer */
int kb_log_producers(kb_log_t *log, kb_producer_info_t **out, size_t *cnt);
/** Offset of the last MIRROR_PID_RESET applied, -1 if none. @locks read */
int64_t kb_log_last_pid_reset(kb_log_t *log);

/* ---- durability and maintenance ---------------------------------------------------------- */

/** fsync everything up to the LEO; recovery point = LEO. @locks writer */
int kb_log_flush(kb_log_t *log);
/** Flush if flush.ms has passed since the last flush. @locks writer */
int kb_log_flush_if_due(kb_log_t *log, int64_t now_ms);

typedef struct kb_retention_stats_s {
    int segments_deleted;
    int64_t bytes_deleted;
    int producers_expired;
} kb_retention_stats_t;

/** Time and size retention (delete policy only), never the active segment nor data at or
 *  above the HW; advances the log start. Also expires producers idle for
 *  producer.id.expiration.ms. @locks writer */
int kb_log_retention_run(kb_log_t *log, int64_t now_ms, kb_retention_stats_t *stats);

/* ---- log cleaner (cleanup.policy=compact) ------------------------------------------------ */

typedef struct kb_clean_stats_s {
    int64_t first_dirty; /**< cleaner offset before */
    int64_t end_offset;  /**< cleaned up to (new cleaner offset) */
    int segments_in;
    int segments_out;
    int64_t bytes_in;
    int64_t bytes_out;
    int64_t records_removed;
    int64_t tombstones_removed;
    int64_t batches_removed;
    int64_t keys_in_map;
} kb_clean_stats_t;

/** Dirty ratio = dirty bytes / cleanable bytes (0 if nothing cleanable). @locks read */
double kb_log_dirty_ratio(kb_log_t *log, int64_t now_ms);

/** Clean the log once if it is compacted and its dirty ratio ≥ min.cleanable.dirty.ratio (or
 *  @p force): latest record per key kept at its original offset, tombstones and transaction
 *  markers removed after delete.retention.ms (two passes via the batch delete horizon), aborted
 *  transactional data removed, MIRROR_PID_RESET batches always kept. Works without the writer
 *  mutex and swaps the cleaned segments in under it (.cleaned → .swap → final names).
 *  @return 0 (cleaned or nothing to do: see stats), KB_STO_ABORTED if the log changed.
 *  @thread cleaner; @locks writer for the swap only */
int kb_log_clean(kb_log_t *log, const kb_cleaner_config_t *cc, int64_t now_ms, int force,
                 kb_clean_stats_t *stats);

#endif /* KB_STORAGE_LOG_H */
