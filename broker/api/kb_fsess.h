/*
 * kb_fsess.h -- incremental fetch sessions (KIP-227): the broker remembers, per session id, the
 * partitions a fetcher follows with their fetch offsets and what it last told the fetcher about
 * each (high watermark, last stable offset, log start), so incremental requests list only what
 * changed and incremental responses only partitions with news.
 *
 * Cache: at most KB_FSESS_MAX_SESSIONS sessions. A new session evicts, in this order, the least
 * recently used session idle for more than KB_FSESS_EVICT_MS, else the smallest session if it
 * has fewer partitions than the new one; otherwise the new fetch runs without a session
 * (session id 0), as Kafka's cache does.
 *
 * A session is used by one request at a time (busy flag); references keep it alive while a
 * deferred fetch holds it even if it is evicted meanwhile.
 *
 * @thread any; @locks the cache mutex, then a session's mutex
 */
#ifndef KB_FSESS_H
#define KB_FSESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kp_types.h"

#define KB_FSESS_MAX_SESSIONS 1000
#define KB_FSESS_EVICT_MS     120000

typedef struct kb_fsess_cache_s kb_fsess_cache_t;

/** One partition of a session. */
typedef struct kb_fsess_part_s {
    struct kb_fsess_part_s *hnext;
    char *topic;        /**< name (sessions keyed by name) or NULL */
    kp_uuid_t topic_id; /**< (sessions keyed by id) */
    int32_t partition;
    /* from the fetcher's requests */
    int64_t fetch_offset;
    int32_t max_bytes;
    int32_t current_leader_epoch;
    int32_t last_fetched_epoch;
    int64_t log_start_offset;
    /* what the last response said (-2: nothing sent yet) */
    int64_t hw, lso, log_start;
} kb_fsess_part_t;

typedef struct kb_fsess_s {
    int32_t id;
    int32_t epoch; /**< the epoch the next request must carry */
    bool uses_ids;
    bool busy; /**< a request is using it */
    _Atomic int refcnt;
    int64_t last_used_ms;
    pthread_mutex_t mu;
    kb_fsess_part_t **parts; /**< in insertion order */
    size_t nparts, cap;
    _Atomic size_t nparts_pub; /**< nparts, readable without the mutex (metrics) */
    kb_fsess_part_t **hash;
    size_t nbuckets;
    size_t rr_start; /**< rotating start of incremental reads */
} kb_fsess_t;

kb_fsess_cache_t *kb_fsess_cache_new(size_t max_sessions);
void kb_fsess_cache_free(kb_fsess_cache_t *c);

/** A new session (referenced, busy) for @p nparts partitions, or NULL when the cache has no
 *  room (see the eviction rules). */
kb_fsess_t *kb_fsess_create(kb_fsess_cache_t *c, bool uses_ids, size_t nparts, int64_t now_ms);

/** The session @p id, referenced, or NULL. */
kb_fsess_t *kb_fsess_get(kb_fsess_cache_t *c, int32_t id);

/** Remove session @p id from the cache (references keep it alive). */
void kb_fsess_remove(kb_fsess_cache_t *c, int32_t id);

void kb_fsess_release(kb_fsess_t *s);

/** Number of sessions in the cache. */
size_t kb_fsess_count(kb_fsess_cache_t *c);

/** Sessions in the cache and the partitions they hold, summed (metrics). */
void kb_fsess_stats(kb_fsess_cache_t *c, size_t *sessions, size_t *partitions);

/* The following need the session's mutex held (or the session not yet shared). */

/** The partition with this key, or NULL. @p topic is used for name sessions, @p id for id
 *  sessions. */
kb_fsess_part_t *kb_fsess_find(kb_fsess_t *s, const char *topic, const kp_uuid_t *id,
                               int32_t partition);

/** Add or update a partition; NULL on no memory. New ones start with hw = lso = log_start = -2.*/
kb_fsess_part_t *kb_fsess_upsert(kb_fsess_t *s, const char *topic, const kp_uuid_t *id,
                                 int32_t partition);

/** Forget a partition (no-op if absent). */
void kb_fsess_forget(kb_fsess_t *s, const char *topic, const kp_uuid_t *id, int32_t partition);

/** The epoch after @p e (1 after INT32_MAX, as Kafka). */
int32_t kb_fsess_next_epoch(int32_t e);

#endif /* KB_FSESS_H */
