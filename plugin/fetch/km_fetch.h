/*
 * km_fetch.h - the MirrorFetcherManager: the mirror's data path (docs/plugin.md "Fetcher").
 *
 * The manager fetches mirror partitions from their source clusters as a consumer (Fetch with
 * ReplicaId -1, READ_UNCOMMITTED, incremental fetch sessions, topic ids where the source has
 * them) and appends the fetched record batches unchanged to the destination partitions with
 * kbx log_append (offsets, leader epochs, producer ids and CRCs kept). It never decides a
 * partition's state: divergence, epoch fencing, fatal and transient errors are reported to the
 * owner (the partition state machine) as events.
 *
 * Threads: fetcher threads are host-lent threads, one per (mirror, source broker, fetcher
 * index); each drives its own kc_ client and owns the partitions currently assigned to it.
 * Every function here is called by the owner on the coordinator loop (@thread coord) unless it
 * says otherwise; events and removal completions are posted to the coordinator loop with
 * km_coord_post and run there.
 *
 * Ownership: the manager belongs to whoever created it (the mirror module); a km_fetch_part_t
 * belongs to the manager and stays valid for the owner from km_fetch_partition_add until the
 * removal completion ran.
 */
#ifndef KM_FETCH_H
#define KM_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/km_config_types.h"
#include "util/km_err.h"
#include "util/km_types.h"

typedef struct km_fetch_mgr km_fetch_mgr_t;
typedef struct km_fetch_part km_fetch_part_t;

/** Partition states of the fetcher (not the mirror partition state machine's states). */
#define KM_FETCH_ST_LOOKUP   1 /**< waiting for source metadata (leader, epoch, topic id) */
#define KM_FETCH_ST_FETCHING 2 /**< fetching from the source leader */
#define KM_FETCH_ST_BACKOFF  3 /**< a transient error; retried by itself after a backoff */
#define KM_FETCH_ST_PAUSED   4 /**< paused by the owner */
#define KM_FETCH_ST_HELD                                                                           \
    5                          /**< stopped after an event that needs the owner (diverged, epoch   \
                                    exceeded, fenced, fatal); km_fetch_partition_resume restarts */
#define KM_FETCH_ST_REMOVING 6 /**< removal requested, completion pending */

/** Error classes of km_fetch_status_t.error_class and of events. */
#define KM_FETCH_ERR_NONE      0
#define KM_FETCH_ERR_TRANSIENT 1 /**< retried by the fetcher with backoff */
#define KM_FETCH_ERR_FATAL     2 /**< the partition is held until the owner acts */

/** Event types. */
#define KM_FETCH_EV_APPENDED 1 /**< batches appended: log_end_offset, high_watermark */
#define KM_FETCH_EV_DIVERGED                                                                       \
    2 /**< the local log diverges from the source after                                            \
           (epoch, end_offset): truncate there, then resume */
#define KM_FETCH_EV_EPOCH_EXCEEDED                                                                 \
    3                           /**< a batch's leader epoch (epoch) is above the destination       \
                                     leader epoch: bump, then resume with the new epoch */
#define KM_FETCH_EV_FATAL     4 /**< error_code, message; partition held */
#define KM_FETCH_EV_TRANSIENT 5 /**< error_code, message; the fetcher retries by itself */
#define KM_FETCH_EV_FENCED                                                                         \
    6 /**< the destination handle was fenced or this broker is not                                 \
           the leader any more; partition held */

const char *km_fetch_state_name(int32_t state);
const char *km_fetch_event_name(int32_t type);

/** One event, borrowed by the callback. */
typedef struct km_fetch_event {
    int32_t type;           /**< KM_FETCH_EV_* */
    int32_t epoch;          /**< DIVERGED: the epoch; EPOCH_EXCEEDED: the batch's epoch */
    int64_t end_offset;     /**< DIVERGED: the end offset of that epoch on the source */
    int64_t log_end_offset; /**< APPENDED: the destination log end offset after the append */
    int64_t high_watermark; /**< the source high watermark last seen (-1: unknown) */
    int64_t offset;         /**< FATAL/TRANSIENT: the fetch offset the error is about */
    int16_t error_code;     /**< Kafka error code when the source sent one, else -1 */
    int32_t error_class;    /**< KM_FETCH_ERR_* */
    char message[256];      /**< FATAL/TRANSIENT: names the partition and offset */
    km_fetch_part_t *fpart; /**< the partition (valid during the callback) */
} km_fetch_event_t;

/** Event callback. @thread coord (posted with km_coord_post) */
typedef void (*km_fetch_event_fn)(km_plugin_t *cm, void *part_opaque, const km_fetch_event_t *ev);

/** Removal completion: in-flight appends of the partition are over and nothing of it runs
 *  any more; no event for it follows. @thread coord */
typedef void (*km_fetch_done_fn)(km_plugin_t *cm, void *arg);

/** Manager options. */
typedef struct km_fetch_opts {
    /** Called by km_fetch_mgr_destroy for the opaque of every partition whose removal did not
     *  complete (the completion is dropped then). May be NULL. @thread fini */
    void (*free_opaque)(km_plugin_t *cm, void *opaque);
    km_fetch_event_fn on_event; /**< required */
    int32_t poll_ms;            /**< longest wait of a fetcher step in its kc_ poll (100) */
    int32_t latch_wait_ms;      /**< 0 (production): the kc_ poll is the thread's wait; > 0 also
                                     parks each step on the thread's latch that long (for a host
                                     that steps threads, tests/fakehost) */
    int32_t topic_gone_ms;      /**< a source topic whose id is known and that 3 Metadata answers
                                     in a row over at least this long do not list is taken as
                                     deleted (FATAL); 0: 3000 */
    int16_t fetch_max_version;  /**< test only: highest Fetch version sent (4..18, e.g. 11 to take
                                     the OffsetForLeaderEpoch path); 0: the environment variable
                                     KMIRROR_TEST_FETCH_MAX_VERSION, else no cap */
} km_fetch_opts_t;

/** What to fetch and where to append it (strings borrowed, copied by the manager). */
typedef struct km_fetch_part_spec {
    const char *mirror;         /**< mirror name (set with km_fetch_mirror_set first) */
    const char *source_topic;   /**< source topic name */
    kbx_uuid_t source_topic_id; /**< expected source topic id; all zero: learned */
    int32_t partition;          /**< partition index (same on both sides) */
    kbx_uuid_t dest_topic_id;   /**< destination topic id */
    int32_t dest_leader_epoch;  /**< destination leader epoch the handle is bound to */
    int64_t fetch_offset;       /**< where to start: the local log end offset; -1: read it */
    int32_t last_fetched_epoch; /**< epoch of the last local batch; -1: unknown, then taken
                                     from the log's epoch cache when fetch_offset is its end */
    void *opaque;               /**< passed back with every event of this partition */
} km_fetch_part_spec_t;

/** Snapshot of one partition (for DescribeMirrors and metrics). */
typedef struct km_fetch_status {
    int32_t state;               /**< KM_FETCH_ST_* */
    int32_t source_leader;       /**< source broker id, -1 unknown */
    int32_t source_leader_epoch; /**< -1 unknown */
    int32_t last_fetched_epoch;
    int64_t fetch_offset;   /**< next offset to fetch = local log end offset */
    int64_t high_watermark; /**< source high watermark, -1 unknown */
    int64_t lag;            /**< max(0, high_watermark - fetch_offset), -1 unknown */
    uint64_t bytes;         /**< appended bytes */
    uint64_t records;       /**< appended records (batch record counts) */
    uint64_t batches;
    int32_t retries;        /**< consecutive transient errors */
    int32_t error_class;    /**< KM_FETCH_ERR_* of the last error (NONE after success) */
    int16_t error_code;     /**< Kafka error code of the last error, -1 none */
    char error[256];        /**< last error text, "" if none */
    int64_t last_append_ms; /**< wall clock of the last append, -1 never */
} km_fetch_status_t;

/**
 * Create a manager. Starts no thread yet. Returns NULL with errstr set on failure.
 * @thread any (init)
 */
km_fetch_mgr_t *km_fetch_mgr_create(km_plugin_t *cm, const km_fetch_opts_t *opts, char *errstr,
                                    size_t errstr_size);

/**
 * Stop and join every fetcher thread, release destination handles, unregister metrics and free
 * everything. Pending removal completions and events are dropped (not called).
 * @thread host main (fini), never a fetcher thread
 */
void km_fetch_mgr_destroy(km_fetch_mgr_t *fm);

/**
 * Add or update a mirror's source connection settings (conf borrowed; what the fetcher needs
 * is copied). conf->source_cluster_id, when set, is the cluster the source must be: a Metadata
 * answer with another ClusterId holds the partitions it concerns (FATAL,
 * INCONSISTENT_CLUSTER_ID). Only PLAINTEXT sources for now: other security.protocol values are
 * refused with KM_ERR_CONFIG and a message. fetch.* changes apply to the next fetch; a changed
 * connection setting makes the mirror's threads reconnect (new client and session, leaders looked
 * up again).
 * @return KM_OK, KM_ERR_CONFIG, KM_ERR_NOMEM, KM_ERR_INVALID
 * @thread coord
 */
km_err_t km_fetch_mirror_set(km_fetch_mgr_t *fm, const char *mirror, const km_mirror_config_t *conf,
                             char *errstr, size_t errstr_size);

/**
 * Forget a mirror that has no partitions left; its threads are stopped and joined.
 * @return KM_OK, KM_ERR_INVALID (unknown, or partitions left)
 * @thread coord
 */
km_err_t km_fetch_mirror_remove(km_fetch_mgr_t *fm, const char *mirror);

/**
 * Start fetching a partition. *out stays valid until the removal completion.
 * @return KM_OK, KM_ERR_INVALID (bad spec, unknown mirror, partition already added),
 *         KM_ERR_NOMEM, KM_ERR_HOST (a fetcher thread could not start)
 * @thread coord
 */
km_err_t km_fetch_partition_add(km_fetch_mgr_t *fm, const km_fetch_part_spec_t *spec,
                                km_fetch_part_t **out);

/**
 * Stop fetching fpart; done(cm, arg) runs on the coordinator loop once no append of it is in
 * progress and none will start. After done, fpart is gone.
 * @return KM_OK, KM_ERR_INVALID (already being removed)
 * @thread coord
 */
km_err_t km_fetch_partition_remove(km_fetch_mgr_t *fm, km_fetch_part_t *fpart,
                                   km_fetch_done_fn done, void *arg);

/** Pause fetching (the partition leaves the fetch session). @thread coord */
km_err_t km_fetch_partition_pause(km_fetch_mgr_t *fm, km_fetch_part_t *fpart);

/**
 * Resume a paused or held partition. The fetch position is read again from the destination log
 * (log end offset, newest cached epoch), so a truncation by the owner is picked up.
 * @param dest_leader_epoch the destination leader epoch to bind to (after a bump), -1: keep
 * @thread coord
 */
km_err_t km_fetch_partition_resume(km_fetch_mgr_t *fm, km_fetch_part_t *fpart,
                                   int32_t dest_leader_epoch);

/** The opaque given at km_fetch_partition_add. @thread any */
void *km_fetch_partition_opaque(const km_fetch_part_t *fpart);

/** Copy fpart's status. @thread any */
void km_fetch_partition_status(km_fetch_mgr_t *fm, const km_fetch_part_t *fpart,
                               km_fetch_status_t *out);

/**
 * The partition fetched into destination (topic_id, partition), not being removed; NULL if none.
 * @thread coord
 */
km_fetch_part_t *km_fetch_partition_find(km_fetch_mgr_t *fm, const kbx_uuid_t *topic_id,
                                         int32_t partition);

/** Number of fetcher threads running. @thread any */
size_t km_fetch_thread_count(km_fetch_mgr_t *fm);

/** Fetch-session counters of the manager, for tests and metrics. @thread any */
typedef struct km_fetch_counters {
    uint64_t fetches;             /**< Fetch requests sent */
    uint64_t full_fetches;        /**< of which full (session epoch 0 or no session) */
    uint64_t incremental_fetches; /**< of which incremental */
    uint64_t partitions_sent;     /**< partitions listed in requests, summed */
    uint64_t forgotten_sent;      /**< partitions listed as forgotten, summed */
    uint64_t session_resets;      /**< session errors and transport errors that reset it */
    uint64_t metadata_requests;
    uint64_t list_offsets_requests;
    uint64_t epoch_requests; /**< OffsetsForLeaderEpoch requests */
    int32_t last_session_id;
    int32_t last_session_epoch;
    int32_t fetch_version_min; /**< lowest / highest Fetch version sent (0 before the first) */
    int32_t fetch_version_max;
} km_fetch_counters_t;

void km_fetch_counters(km_fetch_mgr_t *fm, km_fetch_counters_t *out);

/* ---- the batch walk (pure; exposed for unit tests and the fuzz target) --------------------- */

/** What to do with one fetched records chunk. */
typedef struct km_fetch_plan {
    size_t start;        /**< first byte to append (batches wholly below fetch_offset skipped) */
    size_t end;          /**< one past the last byte to append */
    int32_t batches;     /**< batches in [start, end) */
    int64_t records;     /**< their record counts */
    int64_t next_offset; /**< last offset of the last batch in range + 1, or fetch_offset */
    int32_t last_epoch;  /**< partition leader epoch of the last batch in range, -1 none */
    int32_t stop;        /**< KM_FETCH_STOP_* after the range */
    int32_t stop_epoch;  /**< STOP_EPOCH: the batch's epoch */
    int64_t stop_offset; /**< base offset of the batch that stopped the walk, -1 unknown */
    const char *stop_reason; /**< static text for STOP_CORRUPT / STOP_FORMAT */
    /** base offset of the first batch in range, -1 none; below fetch_offset when that batch
     *  holds fetch_offset (the source's log start inside a batch) */
    int64_t first_offset;
} km_fetch_plan_t;

#define KM_FETCH_STOP_NONE    0 /**< the whole chunk (except a trailing partial batch) is used */
#define KM_FETCH_STOP_EPOCH   1 /**< a batch's epoch is above the destination leader epoch */
#define KM_FETCH_STOP_CORRUPT 2 /**< bad framing, CRC, offsets going back: fatal */
#define KM_FETCH_STOP_FORMAT  3 /**< magic 0/1: fatal "unsupported message format" */

/**
 * Walk the concatenated batches of a Fetch response's records (borrowed) without decompressing:
 * framing, CRC32C and magic 2 of every complete batch, increasing offsets, and each batch's
 * partition leader epoch against dest_epoch. Batches whose last offset is below fetch_offset
 * are skipped; a trailing partial batch is ignored (Kafka cuts responses at the size limit).
 * @thread any
 */
void km_fetch_plan_chunk(const uint8_t *buf, size_t len, int64_t fetch_offset, int32_t dest_epoch,
                         km_fetch_plan_t *plan);

#endif /* KM_FETCH_H */
