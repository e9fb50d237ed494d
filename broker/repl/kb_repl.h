/*
 * kb_repl.h -- the follower side of replication over the network (docs/design.md C4,
 * docs/broker.md "Replication"): the replica fetcher manager.
 *
 * A partition this broker follows (kb_part_become_follower() done, leader known) is handed to
 * the manager with kb_repl_add(). The manager keeps fetcher threads per source broker (the
 * leader): `num.replica.fetchers` of them, a partition going to the one picked by a hash of its
 * topic id and index. Each fetcher thread drives its own kc_ client (proto/client) to the leader
 * and sends full Fetch requests (no fetch session: SessionId 0, SessionEpoch -1) with
 * ReplicaId / ReplicaState (ReplicaId = node.id, ReplicaEpoch = the broker epoch when known,
 * else -1), per partition FetchOffset = the local LEO, CurrentLeaderEpoch, LastFetchedEpoch
 * (v12+, so the leader validates the log: the first fetch after becoming a follower does the
 * OffsetsForLeaderEpoch check of older Kafka versions) and LogStartOffset. Answers:
 *   - records: appended as they are (kb_part_follower_append: bytes, offsets and epochs kept),
 *     with the leader's HW and log start; a trailing partial batch is left for the next fetch;
 *   - DivergingEpoch: kb_part_follower_diverging() truncates, the next fetch continues;
 *   - OFFSET_OUT_OF_RANGE: Kafka's rule with ListOffsets as this replica: the leader's LEO below
 *     ours -> truncate to it; else the leader's log start above our LEO -> restart the log empty
 *     there (kb_part_truncate_fully);
 *   - FENCED_LEADER_EPOCH: the partition waits for a newer leader epoch (new metadata);
 *   - NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH, unknown topic/partition, storage errors,
 *     lost connections: retried after `replica.fetch.backoff.ms`.
 * An answer is used only if the partition is still at the leader epoch and fetch offset the
 * request carried. Configs: replica.fetch.max.bytes (per partition),
 * replica.fetch.response.max.bytes, replica.fetch.wait.max.ms, replica.fetch.min.bytes,
 * replica.fetch.backoff.ms, num.replica.fetchers.
 *
 * Order with role changes (as Kafka's makeFollower): kb_repl_remove() first (on return no
 * fetcher thread touches the partition), then kb_part_become_*(), then kb_repl_add() for a
 * follower.
 *
 * @thread any (kb_repl_* functions); the fetcher threads are the manager's own
 */
#ifndef KB_REPL_H
#define KB_REPL_H

#include <stddef.h>
#include <stdint.h>

#include "kb_config.h"
#include "kb_meta.h"
#include "kb_part.h"
#include "kc_client.h"

typedef struct kb_repl_s kb_repl_t;

/** Address of broker @p node_id on the inter-broker listener: 0 with @p host / @p port, or -1
 *  when unknown. Called from fetcher threads and kb_repl_add(), without manager locks. */
typedef int(kb_repl_endpoint_fn)(void *opaque, int32_t node_id, char *host, size_t host_size,
                                 int *port);

typedef struct kb_repl_opts_s {
    const kb_config_t *cfg; /**< replica.fetch.*, num.replica.fetchers, node.id */
    int32_t node_id;        /**< this broker (the ReplicaId of its fetches) */
    kb_repl_endpoint_fn *endpoint;
    void *endpoint_opaque;
} kb_repl_opts_t;

/** A manager with no fetcher yet. NULL with @p errstr on failure. */
kb_repl_t *kb_repl_new(const kb_repl_opts_t *o, char *errstr, size_t errstr_size);

/** Stop and join every fetcher thread, release every partition, free. */
void kb_repl_free(kb_repl_t *r);

/** The broker epoch sent as ReplicaState.ReplicaEpoch (-1 until registered). */
void kb_repl_set_broker_epoch(kb_repl_t *r, int64_t epoch);

/**
 * Fetch @p part from its leader (kb_part_follower_position) from now on; a partition already
 * fetched is moved to the fetcher of its current leader. Takes a reference.
 * @return 0, KB_E_STATE (not a follower, or no leader known), KB_E_NOMEM, KB_E_IO (no thread).
 */
int kb_repl_add(kb_repl_t *r, kb_part_t *part);

/** Stop fetching @p part (nothing when it is not fetched). On return no fetcher thread uses
 *  it and the manager's reference is released. */
void kb_repl_remove(kb_repl_t *r, kb_part_t *part);

/** The leaders' addresses may have changed: fetchers look them up again. */
void kb_repl_endpoints_changed(kb_repl_t *r);

/** Counters (tests, metrics). */
typedef struct kb_repl_stats_s {
    uint32_t fetchers;       /**< fetcher threads running */
    uint32_t partitions;     /**< partitions being fetched */
    uint64_t fetches;        /**< Fetch answers received */
    uint64_t fetch_errors;   /**< Fetch requests without an answer (transport, timeout) */
    uint64_t bytes_appended; /**< record bytes appended */
    uint64_t truncations;    /**< truncations (diverging epoch, out of range) */
} kb_repl_stats_t;

void kb_repl_stats(kb_repl_t *r, kb_repl_stats_t *out);

/* ---- leadership from the metadata image (kb_repl_wire.c) ------------------------------------ */

/**
 * Follow the metadata image of @p meta: a kb_meta listener (with the snapshot) that, for every
 * partition of a topic created or grown and for every leader change, hands the local partition
 * to the fetchers when it is a follower with a known leader (kb_repl_add) and takes it back when
 * it leads (kb_repl_remove) -- Kafka's metadata delta -> makeLeader / makeFollower, whose
 * partition half (kb_part_become_leader / _follower with the image's leader, epochs, replicas
 * and ISR) kb_meta's apply path does before the listeners run. A deleted partition leaves its
 * fetcher by itself. Call once, before kb_repl_set_ctrl(). 0 or KB_E_NOMEM.
 */
int kb_repl_watch(kb_repl_t *r, kb_meta_t *meta, kb_partmgr_t *pm);

/** Stop following the image (before kb_repl_free; not from a listener). */
void kb_repl_unwatch(kb_repl_t *r);

/**
 * The controller channel (broker/ctrl): send a request of API @p api_key at a version in
 * [@p min_ver, @p max_ver] whose body @p encode writes (called with @p cb_opaque), and call
 * @p cb exactly once with the answer or an error -- kc_request()'s contract with the node fixed
 * to the active controller. Returns > 0 when accepted, else a negative kc_err_t (@p cb is then
 * never called). @thread any; must not block.
 */
typedef int64_t(kb_repl_ctrl_fn)(void *opaque, int16_t api_key, int16_t min_ver, int16_t max_ver,
                                 kc_encode_cb_t *encode, kc_resp_cb_t *cb, void *cb_opaque);

/**
 * Install (or with NULL remove) the controller channel. With one, the ISR proposals of this
 * broker's leaders (kb_partmgr_set_isr_fn) become AlterPartition (56) v2-3 requests (BrokerId =
 * node.id, BrokerEpoch, the topic id, LeaderEpoch, PartitionEpoch, NewIsr / NewIsrWithEpochs);
 * the answer's ISR and partition epoch are applied with kb_part_set_isr(), any error drops the
 * proposal (kb_part_isr_abort; the lag check proposes again later). Without one the ISR cannot
 * change (no proposals), as when the controller is unreachable. Needs kb_repl_watch() first.
 */
void kb_repl_set_ctrl(kb_repl_t *r, kb_repl_ctrl_fn *fn, void *opaque);

#endif /* KB_REPL_H */
