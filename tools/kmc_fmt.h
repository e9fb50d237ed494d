/*
 * kmc_fmt.h -- kafka-mirrors output: aligned text tables and JSON (docs/cli.md "Output").
 *
 * Pure formatting of plain rows (no protocol types), so the exact output is unit-tested with
 * hand-written goldens. Text from the broker is printed with control characters replaced by
 * '?' in tables and escaped in JSON. A value of -1 (unknown) prints as "-" / null.
 */
#ifndef KMC_FMT_H
#define KMC_FMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/** One mirror of --list. */
typedef struct kmc_list_row {
    const char *mirror;
    int32_t topic_count;
    const char *source_cluster_id; /**< NULL or "" until known */
    const char *source_bootstrap;  /**< may be NULL */
} kmc_list_row_t;

/** One partition of --describe. */
typedef struct kmc_part_row {
    const char *topic;
    int32_t partition;
    const char *state;
    int64_t source_offset; /**< -1: unknown */
    int64_t dest_offset;   /**< -1: unknown */
    int32_t last_epoch;    /**< last mirrored epoch, -1: none */
    int64_t last_offset;   /**< -1: none */
    int16_t retry;         /**< retries so far; -1: not retryable */
    const char *error;     /**< NULL: none */
} kmc_part_row_t;

/** The metadata sync of one kind of a mirror (--describe; from the mirror's coordinator). */
typedef struct kmc_sync_row {
    const char *kind; /**< topics, configs, groups, acls */
    bool enabled;
    int64_t runs;
    int64_t errors;
    const char *last_error; /**< NULL: none */
    int64_t last_error_ms;  /**< wall clock ms, -1: none */
    int64_t last_sync_ms;   /**< last run without a failed item, -1: none */
} kmc_sync_row_t;

/** One mirror of --describe, with its partitions. */
typedef struct kmc_mirror_desc {
    const char *mirror;
    const char *source_bootstrap;  /**< NULL if not returned */
    const char *source_cluster_id; /**< NULL or "" until known */
    int16_t error_code;            /**< per-mirror Kafka error, 0 if none */
    const char *error_message;
    kmc_part_row_t *parts;
    size_t nparts;
    kmc_sync_row_t *sync; /**< per kind; none when the coordinator did not report (yet) */
    size_t nsync;
} kmc_mirror_desc_t;

/** Per-topic result of a mutating action. */
typedef struct kmc_topic_result {
    const char *topic;
    int16_t error_code;
    const char *error_message; /**< NULL: none */
} kmc_topic_result_t;

/** Lag of a partition: source - destination (never below 0), or -1 if either is unknown. */
int64_t kmc_fmt_lag(int64_t source_offset, int64_t dest_offset);

/** --list: columns MIRROR TOPICS SOURCE-CLUSTER-ID SOURCE-BOOTSTRAP-SERVERS. */
void kmc_fmt_list_text(FILE *out, const kmc_list_row_t *rows, size_t n);
/** --list --json: {"mirrors":[{"mirror","topicCount","sourceClusterId","sourceBootstrap"}]} */
void kmc_fmt_list_json(FILE *out, const kmc_list_row_t *rows, size_t n);

/**
 * --describe: one row per partition (MIRROR TOPIC PARTITION STATE SOURCE-OFFSET
 * DESTINATION-OFFSET LAG LAST-EPOCH LAST-OFFSET ERROR); a mirror without partitions gets one
 * row of dashes; mirrors with a per-mirror error are left out (the caller reports them).
 * Then, when any mirror reports its metadata sync, a second table MIRROR SYNC ENABLED RUNS
 * ERRORS LAST-SYNC LAST-ERROR-TIME LAST-ERROR (times in UTC, ISO 8601).
 */
void kmc_fmt_describe_text(FILE *out, const kmc_mirror_desc_t *m, size_t n);
/** --describe --json (every mirror, errors included; see docs/cli.md for the fields).
 *  @p warning: the broker's note on an incomplete answer (NULL: none). */
void kmc_fmt_describe_json(FILE *out, const kmc_mirror_desc_t *m, size_t n, const char *warning);

/** Results of start/stop/pause/resume/recover: columns TOPIC RESULT. */
void kmc_fmt_results_text(FILE *out, const kmc_topic_result_t *r, size_t n);
/**
 * {"action","mirror","errorCode","errorName","errorMessage","topics":[{"topic","errorCode",
 * "errorName","errorMessage"}]} for every mutating action (@p r may be empty).
 */
void kmc_fmt_results_json(FILE *out, const char *action, const char *mirror, int16_t error_code,
                          const char *error_message, const kmc_topic_result_t *r, size_t n);

/** Write @p s as a JSON string (or null). */
void kmc_fmt_json_str(FILE *out, const char *s);

#endif /* KMC_FMT_H */
