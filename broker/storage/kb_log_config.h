/*
 * kb_log_config.h -- topic-level log configuration (Kafka key names, Kafka defaults) and the
 * log cleaner's broker-level knobs.
 *
 * @thread any (plain values; a log copies its config at open / kb_log_set_config)
 */
#ifndef KB_LOG_CONFIG_H
#define KB_LOG_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define KB_CLEANUP_DELETE  0x1
#define KB_CLEANUP_COMPACT 0x2

#define KB_TS_CREATE_TIME     0
#define KB_TS_LOG_APPEND_TIME 1

typedef struct kb_log_config_s {
    int64_t segment_bytes;             /**< segment.bytes, 1 GiB */
    int64_t segment_ms;                /**< segment.ms, 7 days */
    int64_t segment_jitter_ms;         /**< segment.jitter.ms, 0 (no jitter is applied) */
    int64_t retention_ms;              /**< retention.ms, 7 days; -1 = unlimited */
    int64_t retention_bytes;           /**< retention.bytes, -1 = unlimited */
    int cleanup_policy;                /**< cleanup.policy, KB_CLEANUP_* bits, default delete */
    int64_t min_compaction_lag_ms;     /**< min.compaction.lag.ms, 0 */
    int64_t max_compaction_lag_ms;     /**< max.compaction.lag.ms, INT64_MAX */
    int64_t delete_retention_ms;       /**< delete.retention.ms, 1 day */
    int32_t max_message_bytes;         /**< max.message.bytes, 1048588 */
    int message_timestamp_type;        /**< message.timestamp.type, CreateTime */
    int64_t message_ts_before_max_ms;  /**< message.timestamp.before.max.ms, INT64_MAX */
    int64_t message_ts_after_max_ms;   /**< message.timestamp.after.max.ms, 1 hour (4.0) */
    int64_t flush_messages;            /**< flush.messages, INT64_MAX */
    int64_t flush_ms;                  /**< flush.ms, INT64_MAX */
    int32_t index_interval_bytes;      /**< index.interval.bytes, 4096 */
    int32_t segment_index_bytes;       /**< segment.index.bytes, 10 MiB */
    double min_cleanable_dirty_ratio;  /**< min.cleanable.dirty.ratio, 0.5 */
    int64_t file_delete_delay_ms;      /**< file.delete.delay.ms, 60000 (deletes are immediate
                                            here; kept for DescribeConfigs) */
    int64_t producer_id_expiration_ms; /**< producer.id.expiration.ms (broker), 1 day */
    int preallocate;                   /**< preallocate, false (ignored) */
} kb_log_config_t;

/** Kafka's defaults. */
void kb_log_config_defaults(kb_log_config_t *cfg);

/** Set one topic-level key from its string form (as in CreateTopics / AlterConfigs).
 *  Returns 0, -1 unknown key (cfg untouched), -2 invalid value (@p err gets a message). */
int kb_log_config_set(kb_log_config_t *cfg, const char *key, const char *value, char *err,
                      size_t err_size);

/** Broker-level log cleaner knobs (log.cleaner.*). */
typedef struct kb_cleaner_config_s {
    int enable;                      /**< log.cleaner.enable, true */
    int threads;                     /**< log.cleaner.threads, 1 */
    int64_t dedupe_buffer_size;      /**< log.cleaner.dedupe.buffer.size, 128 MiB */
    int32_t io_buffer_size;          /**< log.cleaner.io.buffer.size, 512 KiB */
    int64_t backoff_ms;              /**< log.cleaner.backoff.ms, 15000 */
    double io_buffer_load_factor;    /**< log.cleaner.io.buffer.load.factor, 0.9 */
    int64_t io_max_bytes_per_second; /**< log.cleaner.io.max.bytes.per.second (ignored) */
    int test_crash_point; /**< tests only: 0 none; stop as if crashed 1 after writing .cleaned,
                               2 after the .swap commit, 3 after renaming old segments to
                               .deleted (kb_log_clean returns KB_STO_ABORTED; close the log
                               without clean shutdown and reopen) */
} kb_cleaner_config_t;

void kb_cleaner_config_defaults(kb_cleaner_config_t *cc);

#endif /* KB_LOG_CONFIG_H */
