/*
 * kb_log_int.h -- structures shared inside broker/storage only.
 */
#ifndef KB_LOG_INT_H
#define KB_LOG_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "kb_log.h"
#include "kp_batch.h"

/* ---------- segments (kb_segment.c) ---------- */

typedef struct kb_idx_ent_s {
    uint32_t rel; /**< offset - segment base */
    uint32_t pos; /**< byte position of the batch */
} kb_idx_ent_t;

typedef struct kb_tidx_ent_s {
    int64_t ts;
    uint32_t rel;
} kb_tidx_ent_t;

typedef struct kb_seg_s {
    atomic_int refcnt;
    int64_t base;
    int fd;                /**< .log, O_RDWR */
    char *path;            /**< "<dir>/<base20>" without extension */
    int64_t size;          /**< bytes of whole batches */
    int64_t next_offset;   /**< last offset + 1 of the last batch, base if empty */
    int64_t max_ts;        /**< largest batch maxTimestamp, -1 */
    int64_t max_ts_offset; /**< last offset of the batch holding it */
    int64_t roll_ts;       /**< maxTimestamp of the first batch, -1 if none (segment.ms) */
    int64_t created_ms;
    int64_t bytes_since_idx;
    kb_idx_ent_t *idx;
    size_t idx_cnt, idx_cap, idx_flushed;
    kb_tidx_ent_t *tidx;
    size_t tidx_cnt, tidx_cap, tidx_flushed;
    kb_aborted_txn_t *txns;
    size_t txn_cnt, txn_cap, txn_flushed;
    int64_t flushed_size; /**< bytes known fsynced */
    int deleted;          /**< files unlinked; fd kept until last ref */
    char sfx[16];         /**< file name suffix while being built by the cleaner (".cleaned") */
} kb_seg_t;

#define KB_IDX_ENT_SIZE  8
#define KB_TIDX_ENT_SIZE 12
#define KB_TXN_ENT_SIZE  34

/** Create an empty segment at @p base (files created/truncated). */
kb_seg_t *kb_seg_create(const char *dir, int64_t base, int64_t now_ms, int *err);
/** Create an empty segment whose files carry @p sfx (".cleaned"); used by the cleaner. */
kb_seg_t *kb_seg_create_sfx(const char *dir, int64_t base, const char *sfx, int *err);
/** Rename the segment's files from their current suffix to @p sfx ("" = final names). */
int kb_seg_rename_sfx(kb_seg_t *seg, const char *sfx);
/** Open the existing segment files for @p base; sizes from the file, indexes not loaded. */
kb_seg_t *kb_seg_open(const char *dir, int64_t base, int *err);
void kb_seg_ref(kb_seg_t *seg);
void kb_seg_unref(kb_seg_t *seg);
/** Unlink the segment's files (and its .snapshot is not touched). */
void kb_seg_delete_files(kb_seg_t *seg);
void kb_seg_path(char *buf, size_t sz, const char *dir, int64_t base, const char *ext);

/** Load .index/.timeindex/.txnindex from disk, bounds-checking every entry; 0 = ok, <0 = the
 *  files are missing or inconsistent (the caller rebuilds). */
int kb_seg_load_indexes(kb_seg_t *seg, int32_t max_idx_entries);

typedef struct kb_scan_s kb_scan_t;
/** Callback for every valid batch met while scanning a segment; return <0 to stop. */
typedef int (*kb_scan_cb)(void *opaque, kb_seg_t *seg, const kp_batch_t *b, int64_t pos);

/** Scan the segment from @p from_pos, validating each batch (framing, magic, CRC, offsets
 *  increasing, ≥ @p min_offset). Stops at EOF or the first bad batch: *valid_end = end of the
 *  last good batch. Returns 0 (clean EOF), 1 (stopped at a bad/torn batch), <0 I/O error. */
int kb_seg_scan(kb_seg_t *seg, int64_t from_pos, int64_t min_offset, int check_crc, kb_scan_cb cb,
                void *opaque, int64_t *valid_end);

/** Clear the in-memory indexes and rebuild them (and max timestamps, next_offset, size) by
 *  scanning the whole file; a torn or corrupt tail is truncated away. @p txn_cb (optional) is
 *  called for every batch so producer state / txn index can be rebuilt by the caller.
 *  Returns 0, 1 if something was truncated, <0 error. */
int kb_seg_recover(kb_seg_t *seg, int32_t index_interval, kb_scan_cb cb, void *opaque);

/** Account a batch just written at @p pos (indexes, max ts, next offset, size). */
void kb_seg_track_batch(kb_seg_t *seg, const kp_batch_hdr_t *h, int64_t pos, int64_t size,
                        int32_t index_interval);
/** Append the final time index entry (max timestamp so far) if it is newer than the last. */
void kb_seg_tidx_final(kb_seg_t *seg);
/** Next offset after the valid batches of the .log file at @p path (cleaner swap recovery). */
int kb_seg_probe_end(const char *path, int64_t base, int64_t *next_offset);
/** Index lookup: position of the last indexed batch with offset ≤ @p offset (0 if none). */
int64_t kb_seg_lookup_pos(const kb_seg_t *seg, int64_t offset);
/** Time index lookup: position to start scanning for timestamp @p ts. */
int64_t kb_seg_lookup_ts_pos(const kb_seg_t *seg, int64_t ts);

/** Find the first batch with last offset ≥ @p offset starting at index position; fills *pos
 *  (or size if none) and the header. Returns 1 found, 0 not in segment, <0 error. */
int kb_seg_find(kb_seg_t *seg, int64_t offset, int64_t limit, int64_t *pos, kp_batch_hdr_t *h);
/** kb_seg_find starting the scan at byte position @p from (taken from the index under the
 *  log's rwlock); reads only the file, so it may run without the lock. */
int kb_seg_find_from(kb_seg_t *seg, int64_t from, int64_t offset, int64_t limit, int64_t *pos,
                     kp_batch_hdr_t *h);

/** Truncate the segment to @p pos bytes (a batch boundary) with offsets < @p offset kept. */
int kb_seg_truncate(kb_seg_t *seg, int64_t pos, int64_t offset, int32_t index_interval);

/** Write pending index / txn index entries to their files (whole rewrite if @p rewrite). */
int kb_seg_write_indexes(kb_seg_t *seg, int rewrite);
/** fsync log + index files. */
int kb_seg_fsync(kb_seg_t *seg);

int kb_seg_add_txn(kb_seg_t *seg, const kb_aborted_txn_t *t);

/** pread exactly @p n bytes (short read = error). */
int kb_pread_full(int fd, void *buf, size_t n, int64_t pos);
int kb_pwrite_full(int fd, const void *buf, size_t n, int64_t pos);
int kb_fsync_dir(const char *dir);

/* ---------- leader epoch cache (kb_epoch.c) ---------- */

typedef struct kb_epoch_ent_s {
    int32_t epoch;
    int64_t start;
} kb_epoch_ent_t;

typedef struct kb_epoch_cache_s {
    kb_epoch_ent_t *v;
    size_t n, cap;
} kb_epoch_cache_t;

void kb_epoch_init(kb_epoch_cache_t *ec);
void kb_epoch_free(kb_epoch_cache_t *ec);
/** 0 loaded, 1 file missing, <0 corrupt. */
int kb_epoch_load(kb_epoch_cache_t *ec, const char *path);
int kb_epoch_store(const kb_epoch_cache_t *ec, const char *path);
/** Kafka's assign(): returns 1 if the cache changed. */
int kb_epoch_assign(kb_epoch_cache_t *ec, int32_t epoch, int64_t start);
/** Returns 1 if changed. */
int kb_epoch_truncate_end(kb_epoch_cache_t *ec, int64_t end_offset);
int kb_epoch_truncate_start(kb_epoch_cache_t *ec, int64_t start_offset);
void kb_epoch_end_offset(const kb_epoch_cache_t *ec, int32_t req, int64_t leo, int32_t *epoch,
                         int64_t *offset);
int32_t kb_epoch_for_offset(const kb_epoch_cache_t *ec, int64_t offset);

/* ---------- producer state (kb_pstate.c) ---------- */

#define KB_PSTATE_CACHED_BATCHES 5

typedef struct kb_pbatch_s {
    int32_t first_seq;
    int32_t last_seq;
    int64_t first_offset;
    int64_t last_offset;
    int64_t ts;
} kb_pbatch_t;

typedef struct kb_pentry_s {
    int64_t pid;
    int16_t epoch;
    int32_t coord_epoch;
    int64_t txn_first;
    int64_t last_ts;
    int nb;
    kb_pbatch_t b[KB_PSTATE_CACHED_BATCHES]; /**< oldest first */
    struct kb_pentry_s *next;
} kb_pentry_t;

typedef struct kb_ctxn_s {
    int64_t pid;
    int64_t first;
    int64_t last;
} kb_ctxn_t;

typedef struct kb_pstate_s {
    kb_pentry_t **buckets;
    size_t nbuckets;
    size_t count;
    kb_ctxn_t *done; /**< completed transactions whose marker is not below the HW yet */
    size_t ndone, done_cap;
    int64_t map_end;    /**< state covers offsets < map_end */
    int64_t last_reset; /**< offset of the last MIRROR_PID_RESET applied, -1 */
} kb_pstate_t;

void kb_pstate_init(kb_pstate_t *ps);
void kb_pstate_clear(kb_pstate_t *ps);
void kb_pstate_free(kb_pstate_t *ps);
kb_pentry_t *kb_pstate_get(const kb_pstate_t *ps, int64_t pid);
int kb_pstate_check(const kb_pstate_t *ps, int64_t pid, int16_t pepoch, int32_t first_seq,
                    int32_t last_seq, int64_t *dup_first, int64_t *dup_last);
/** Apply one batch (data or control) appended at its offsets, as every append path and
 *  recovery do. Aborted transactions produced go to @p aborted (up to 1 + number of open
 *  transactions for a MIRROR_PID_RESET), *naborted set. @p b may be a header-only view when
 *  it isn't a control batch. Returns 0 or <0 on a control batch that can't be read. */
int kb_pstate_apply(kb_pstate_t *ps, const kp_batch_t *b, int64_t hw, kb_aborted_txn_t **aborted,
                    size_t *naborted);
/** First offset that is not stable yet (ongoing or unreplicated transaction), -1 none. */
int64_t kb_pstate_first_unstable(const kb_pstate_t *ps);
void kb_pstate_on_hw(kb_pstate_t *ps, int64_t hw);
/** Drop state at/after @p offset is done by reload; this removes entries idle since before
 *  @p now - @p expiration (never ones in a transaction). Returns count removed. */
int kb_pstate_expire(kb_pstate_t *ps, int64_t now_ms, int64_t expiration_ms);
int kb_pstate_write_snapshot(const kb_pstate_t *ps, const char *path);
/** 0 loaded, <0 missing / corrupt (state cleared). */
int kb_pstate_read_snapshot(kb_pstate_t *ps, const char *path);

/* ---------- the log ---------- */

struct kb_log_s {
    char *dir;
    kb_log_config_t cfg;
    kb_clock_fn clock;
    void *clock_opaque;
    pthread_mutex_t wlock;
    pthread_rwlock_t rw;
    kb_seg_t **segs;
    size_t nsegs, segs_cap;
    int64_t leo;
    int64_t hw;
    int64_t log_start;
    int64_t recovery_point;
    int64_t first_unstable; /**< cached from pstate, -1 none */
    int64_t cleaner_offset;
    int64_t unflushed_msgs;
    int64_t last_flush_ms;
    uint64_t gen; /**< bumped whenever segments are removed/replaced/truncated */
    kb_epoch_cache_t ec;
    kb_pstate_t ps;
    kb_log_listener_fn listener;
    void *listener_opaque;
    char *epoch_path;
};

int64_t kb_log_now(kb_log_t *log);
void kb_log_snapshot_path(char *buf, size_t sz, const char *dir, int64_t offset);

/* cleaner helpers implemented in kb_log.c */
int kb_log_int_swap_segments(kb_log_t *log, uint64_t gen, size_t first_idx, size_t cnt,
                             const char *cleaned_base_path, int64_t new_base);
int kb_log_int_recover_swaps(const char *dir);

#endif /* KB_LOG_INT_H */
