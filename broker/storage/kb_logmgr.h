/*
 * kb_logmgr.h -- all partition logs of a broker, spread over several log.dirs, as Kafka's
 * LogManager: open/recover at start (in parallel), create/delete partition directories,
 * checkpoint files per log dir (recovery-point-offset-checkpoint, log-start-offset-checkpoint,
 * replication-offset-checkpoint, cleaner-offset-checkpoint), the clean-shutdown marker
 * (.kafka_cleanshutdown), periodic maintenance and the log cleaner threads.
 *
 * Thread safety: the manager's partition table has its own mutex; every function may be called
 * from any thread. A kb_log_t returned by get/create stays valid until kb_logmgr_delete() or
 * kb_logmgr_close() for it returns; the broker serialises deletion with its own users of the
 * log (Kafka's partition lifecycle does the same). The manager's own maintenance (cleaner threads,
 * kb_logmgr_tick) holds each log while it works on it: kb_logmgr_delete() waits for that pass to
 * put the log down, and later passes skip it.
 */
#ifndef KB_LOGMGR_H
#define KB_LOGMGR_H

#include <stddef.h>
#include <stdint.h>

#include "kb_log.h"
#include "kb_log_config.h"

typedef struct kb_logmgr_s kb_logmgr_t;

typedef struct kb_logmgr_opts_s {
    const char *const *log_dirs; /**< log.dirs */
    size_t ndirs;
    kb_log_config_t default_cfg; /**< used for partitions opened at start unless overridden */
    kb_cleaner_config_t cleaner;
    int recovery_threads; /**< num.recovery.threads.per.data.dir (total here), >= 1 */
    kb_clock_fn clock;    /**< NULL: CLOCK_REALTIME */
    void *clock_opaque;
    /** Optional: per-partition config at open (topic configs from the metadata); return 0 and
     *  fill @p cfg, or nonzero for the default. */
    int (*config_for)(void *opaque, const char *topic, int32_t partition, kb_log_config_t *cfg);
    void *config_opaque;
} kb_logmgr_opts_t;

void kb_logmgr_opts_init(kb_logmgr_opts_t *o);

/** Open every "<topic>-<partition>" directory under every log dir (recovering each log),
 *  finish deletions left over ("*-delete" dirs), remove the clean-shutdown markers.
 *  @return the manager or NULL with @p errstr. */
kb_logmgr_t *kb_logmgr_open(const kb_logmgr_opts_t *o, char *errstr, size_t errstr_size);

/** Stop the cleaner threads, close every log cleanly, write the checkpoints and the
 *  clean-shutdown markers. */
void kb_logmgr_close(kb_logmgr_t *mgr);

/** The log of topic/partition, or NULL. */
kb_log_t *kb_logmgr_get(kb_logmgr_t *mgr, const char *topic, int32_t partition);

/** Create the partition's log (in the log dir with the fewest partitions) or return the
 *  existing one. @p cfg NULL = default. */
kb_log_t *kb_logmgr_create(kb_logmgr_t *mgr, const char *topic, int32_t partition,
                           const kb_log_config_t *cfg, char *errstr, size_t errstr_size);

/** Delete the partition: close the log, rename its dir to "<topic>-<partition>.<id>-delete",
 *  remove it later (next kb_logmgr_tick or the cleaner thread). 0 or KB_STO_INVALID if unknown. */
int kb_logmgr_delete(kb_logmgr_t *mgr, const char *topic, int32_t partition);

/** Write the per-dir checkpoint files now. */
int kb_logmgr_checkpoint(kb_logmgr_t *mgr);

/** Periodic maintenance for every log: retention, flush.ms, checkpoints, pending deletions;
 *  with no cleaner threads running also one cleaning pass. */
int kb_logmgr_tick(kb_logmgr_t *mgr, int64_t now_ms);

/** Start @p opts.cleaner.threads cleaner threads (they wait on a condition variable with
 *  log.cleaner.backoff.ms between passes; kb_logmgr_wake_cleaner wakes them). */
int kb_logmgr_start_cleaner(kb_logmgr_t *mgr);
void kb_logmgr_wake_cleaner(kb_logmgr_t *mgr);

/** Run one cleaning pass over all compacted logs (the cleaner threads' body); returns the number
 *  of logs cleaned. */
int kb_logmgr_clean_once(kb_logmgr_t *mgr, int64_t now_ms);

typedef struct kb_logmgr_part_s {
    char topic[256];
    int32_t partition;
    int dir_index;
    int64_t size_bytes;
    int64_t leo;
    int64_t log_start;
    int segments;
} kb_logmgr_part_t;

/** Sizes for metrics / DescribeLogDirs: malloc'd array (caller frees). */
int kb_logmgr_list(kb_logmgr_t *mgr, kb_logmgr_part_t **out, size_t *cnt);

#endif /* KB_LOGMGR_H */
