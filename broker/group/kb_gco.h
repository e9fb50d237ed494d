/*
 * kb_gco.h -- kbroker's classic group coordinator: the group state machine (kb_gsm.h) over the
 * broker's __consumer_offsets partitions, its timer thread, and the handlers of
 *
 *   FindCoordinator 0-6 (group and transaction keys), JoinGroup 0-9, SyncGroup 0-5,
 *   Heartbeat 0-4, LeaveGroup 0-5, OffsetCommit 2-10, OffsetFetch 1-10, ListGroups 0-5,
 *   DescribeGroups 0-6, DeleteGroups 0-3.
 *
 * TxnOffsetCommit belongs to the transaction coordinator (broker/txn), which calls this
 * coordinator through kb_txn_group_hook.h when it is linked in; the same operations are
 * available below as C functions.
 *
 * Single broker: this node coordinates every group. __consumer_offsets is created through the
 * metadata layer (kb_meta_ensure_internal_topic) the first time a group needs it; when it
 * exists at start every partition is read back and the groups, members, committed and pending
 * transactional offsets are restored before the handlers are registered.
 *
 * Locks: one coordinator mutex serialises the state machine, its appends to __consumer_offsets
 * (so the log and the memory agree on order) and the completion of deferred requests. It is
 * never held while __consumer_offsets is created (that takes the metadata change mutex, under
 * which metadata listeners run). Lock order: coordinator mutex -> metadata lookups -> partition
 * and log locks.
 *
 * @thread any unless stated
 */
#ifndef KB_GCO_H
#define KB_GCO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_apisvc.h"
#include "kb_broker.h"
#include "kb_gsm.h"
#include "kb_metrics.h"

typedef struct kb_gco_s kb_gco_t;

typedef struct kb_gco_opts_s {
    kb_apisvc_t *svc;       /**< required: configuration, metadata, partitions */
    kb_api_registry_t *reg; /**< where to register the handlers (NULL: none) */
    const kb_broker_t *kb;  /**< key of the transaction hook (may be NULL) */
    kb_metrics_t *metrics;  /**< where to publish the group gauges (may be NULL) */
} kb_gco_opts_t;

/** Create the coordinator, load __consumer_offsets if it exists, register the handlers.
 *  NULL with @p errstr on failure. */
kb_gco_t *kb_gco_new(const kb_gco_opts_t *o, char *errstr, size_t errstr_size);

/** Start the timer thread (session, rebalance and offset expiry). Without it (tests),
 *  kb_gco_tick() runs the timers. 0 or a kb_err_t. */
int kb_gco_start(kb_gco_t *co);

/** Stop the timer thread and detach from the transaction coordinator and the metadata
 *  (idempotent). The network server must be stopped already. */
void kb_gco_stop(kb_gco_t *co);

/** Unregister the handlers, answer what is still pending, free. */
void kb_gco_free(kb_gco_t *co);

/** Run due timers and queued topic deletions once (tests without the thread). */
void kb_gco_tick(kb_gco_t *co);

/** The coordinator of broker @p kb (registered by the module), or NULL. */
kb_gco_t *kb_gco_of(const kb_broker_t *kb);

/** Create __consumer_offsets if needed. 0 or a Kafka error code. @locks not the coordinator's */
int16_t kb_gco_ensure_topic(kb_gco_t *co);

/** The partition of __consumer_offsets that holds @p group_id. */
int32_t kb_gco_partition_for(kb_gco_t *co, const char *group_id);

/* ---- for the transaction coordinator (also reachable through kb_txn_group_hook.h) -------- */

/**
 * Transactional offset commit of producer @p pid / @p pepoch for @p in (a kb_gsm_commit input:
 * group, generation, member, instance, partitions with topic names). The offsets are written to
 * the group's partition as records of the producer's transaction and stay pending (invisible to
 * OffsetFetch, UNSTABLE_OFFSET_COMMIT for require_stable) until kb_gco_txn_marker. Results in
 * in->parts[].err.
 */
void kb_gco_txn_offset_commit(kb_gco_t *co, kb_gcommit_in_t *in, int64_t pid, int16_t pepoch);

/** Append the COMMIT / ABORT marker of @p pid to __consumer_offsets partition @p partition and
 *  materialise or drop the producer's pending offsets there. 0 or a Kafka error code. */
int16_t kb_gco_txn_marker(kb_gco_t *co, int32_t partition, int64_t pid, int16_t pepoch,
                          int32_t coord_epoch, bool commit);

/** A marker was written to @p partition by someone else: apply it. */
void kb_gco_txn_completed(kb_gco_t *co, int32_t partition, int64_t pid, bool commit);

/* ---- ownership (docs/broker.md "Consumer groups", "Coordinator ownership") -------------- */

/**
 * Look at the leadership of every __consumer_offsets partition now: partitions this node leads
 * (the local partition is leader) are loaded from their log at the partition's leader epoch
 * (requests for their groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile), partitions it no
 * longer leads, or whose leader epoch moved, are unloaded (their groups dropped; waiting
 * JoinGroup / SyncGroup requests answer NOT_COORDINATOR). Runs the loads on the calling thread.
 * @locks not co->mu
 */
void kb_gco_reconcile(kb_gco_t *co);

/** The leadership of some partition changed: the timer thread runs kb_gco_reconcile() soon.
 *  Cheap and non-blocking (metadata listeners, the replication wiring may call it). */
void kb_gco_leadership_changed(kb_gco_t *co);

/** Ownership of one partition: KB_GCO_P_NONE / _LOADING / _ACTIVE (kb_gco_int.h values 0, 1,
 *  2) and the coordinator epoch (-1 when not owned). */
int kb_gco_partition_state(kb_gco_t *co, int32_t partition, int32_t *epoch);

/** Where broker @p node_id is reachable for @p listener (the listener name the request came in
 *  on; NULL when unknown): 0 with the host copied into @p host (NUL-terminated) and *@p port,
 *  or -1 when the broker is unknown, fenced or has no such listener. Must not block. */
typedef int(kb_node_resolve_fn)(void *opaque, int32_t node_id, const char *listener, char *host,
                                size_t host_size, int32_t *port);

/** Install a resolver FindCoordinator uses for coordinators on other brokers instead of the
 *  registered brokers of the cluster (kb_apisvc_cluster, which broker/ctrl feeds): tests. A
 *  leader that neither knows answers COORDINATOR_NOT_AVAILABLE. */
void kb_gco_set_node_resolver(kb_gco_t *co, kb_node_resolve_fn *fn, void *opaque);

/** Counters for tests and logs (taken under the coordinator mutex). */
void kb_gco_stats(kb_gco_t *co, kb_gsm_stats_t *st);

#endif /* KB_GCO_H */
