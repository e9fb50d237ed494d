/*
 * kb_txn.h -- kbroker's transaction coordinator: the transactional ids (kb_txnsm.h state
 * machine) persisted in __transaction_state (kb_txnlog.h formats), transaction markers written
 * to the local partitions, transaction timeouts and transactional-id expiration on a timer,
 * and the verification hook of Produce. The handlers (kb_txn_h.c) and the tests use the
 * functions below; docs/broker.md, section "Transaction coordinator", has the rules.
 *
 * Ownership (kb_txn_reconcile): this node coordinates the transactional ids of the
 * __transaction_state partitions it leads, loaded from their log at the partition's leader
 * epoch, which is the coordinator epoch of their markers; requests for other ids answer
 * NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while loading). __transaction_state is created
 * on first use (FindCoordinator for a transaction key, InitProducerId with a transactional id)
 * with transaction.state.log.num.partitions partitions. Writes to it wait for the high
 * watermark (acks=all).
 *
 * EndTxn writes PrepareCommit/PrepareAbort, then the markers (kb_part_append_control; for
 * __consumer_offsets through the group hook), then CompleteCommit/CompleteAbort, and answers
 * after that. Markers that cannot be written (storage errors) leave the transaction in its
 * Prepare state; the timer retries them, and clients get CONCURRENT_TRANSACTIONS meanwhile.
 *
 * Locks: a table mutex (lookups) and one mutex per transactional id, held across a whole
 * transition including its log appends. Produce's verification takes the id's mutex briefly.
 *
 * @thread any unless stated
 */
#ifndef KB_TXN_H
#define KB_TXN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_apisvc.h"
#include "kb_broker.h"
#include "kb_txn_group_hook.h"
#include "kb_txnlog.h"
#include "kb_txnsm.h"

typedef struct kb_txn_s kb_txn_t;

typedef struct kb_txn_opts_s {
    kb_apisvc_t *svc;      /**< required: metadata, partitions, config */
    const kb_broker_t *kb; /**< key of the group hook (kb_txn_group_hook_install); may be NULL */
    kb_clock_fn clock;     /**< NULL: wall clock (tests pass a manual one) */
    void *clock_opaque;
    int64_t tick_ms;           /**< timer period (timeouts, marker retries, expiration); 0: 1000 */
    bool no_threads;           /**< tests: no timer thread, call kb_txn_tick() */
    int32_t marker_timeout_ms; /**< one WriteTxnMarkers exchange with another broker (0: 5000) */
} kb_txn_opts_t;

/** Create the coordinator and load __transaction_state if it exists. NULL with @p errstr. */
kb_txn_t *kb_txn_new(const kb_txn_opts_t *o, char *errstr, size_t errstr_size);

/** Complete transactions loaded in a Prepare state and start the timer thread. 0 or kb_err_t. */
int kb_txn_start(kb_txn_t *c);

/** Stop the timer thread (idempotent). */
void kb_txn_stop(kb_txn_t *c);

/** Stop and free. Handlers must be unregistered and the verify hook removed first
 *  (kb_txn_unregister). */
void kb_txn_free(kb_txn_t *c);

/** Register the handlers (InitProducerId unless taken, AddPartitionsToTxn, AddOffsetsToTxn,
 *  EndTxn, WriteTxnMarkers, TxnOffsetCommit, DescribeProducers unless taken) and install the
 *  Produce verification hook. 0 or a kb_err_t. */
int kb_txn_register(kb_txn_t *c, kb_api_registry_t *reg);
/** FindCoordinator, if no other component registered it (call after every module's init). */
int kb_txn_register_find_coordinator(kb_txn_t *c, kb_api_registry_t *reg);
/** Undo kb_txn_register / kb_txn_register_find_coordinator. */
void kb_txn_unregister(kb_txn_t *c);

/** Run the timer work once: marker retries, timeouts, expiration (tests). */
void kb_txn_tick(kb_txn_t *c);

/**
 * Ownership pass (docs/broker.md "Transaction coordinator", "Ownership"): partitions of
 * __transaction_state this node leads (the local partition is leader) and does not own are
 * loaded at their leader epoch (the coordinator epoch; requests for their ids answer
 * COORDINATOR_LOAD_IN_PROGRESS meanwhile, ids found in a Prepare state are completed by the
 * timer); partitions it owns but no longer leads, or whose leader epoch moved, are unloaded
 * (their ids dropped; requests answer NOT_COORDINATOR). Runs at creation, at each timer tick,
 * at once after a metadata change of the topic, and when the topic is created.
 */
void kb_txn_reconcile(kb_txn_t *c);

/** Create __transaction_state if needed. 0 or a Kafka error code. */
int16_t kb_txn_ensure_topic(kb_txn_t *c);

/** Partition of __consumer_offsets that holds @p group_id's offsets. */
int32_t kb_txn_offsets_partition(kb_txn_t *c, const char *group_id);

/* ---- operations (Kafka error codes; the handlers apply the per-version mappings) ------------- */

/** InitProducerId. @p txn_id NULL: idempotent producer (a new id, epoch 0). @p exp_pid /
 *  @p exp_epoch: KIP-360 fields (-1 none). On NONE, *pid / *epoch are the answer. */
int16_t kb_txn_init_producer_id(kb_txn_t *c, const char *txn_id, int32_t timeout_ms,
                                int64_t exp_pid, int16_t exp_epoch, int64_t *pid, int16_t *epoch);

/** AddPartitionsToTxn of partitions that exist (@p client_tv 2 for the TV2 broker form). */
int16_t kb_txn_add_partitions(kb_txn_t *c, const char *txn_id, int64_t pid, int16_t epoch,
                              const kb_txn_tp_t *tps, size_t n, int16_t client_tv);

/** Verification of one partition (see kb_txnsm_verify; INVALID_PRODUCER_ID_MAPPING for an
 *  unknown id, INVALID_REQUEST for an empty one). */
int16_t kb_txn_verify(kb_txn_t *c, const char *txn_id, int64_t pid, int16_t epoch,
                      const char *topic, int32_t partition);

/** The kb_txn_verify_fn that Produce calls for transactional batches (@p opaque is the
 *  coordinator): kb_txn_verify mapped to what a Kafka 4.x partition leader answers a producer:
 *  PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH, not in the transaction -> TRANSACTION_ABORTABLE
 *  for Produce v11+ (@p produce_version; clients that know the error) and INVALID_TXN_STATE
 *  below, CONCURRENT_TRANSACTIONS / coordinator errors -> NOT_ENOUGH_REPLICAS (retriable for
 *  every client), INVALID_PRODUCER_ID_MAPPING as is; an id coordinated by another broker
 *  (NOT_COORDINATOR) is accepted unverified (Kafka without partition verification). */
int16_t kb_txn_produce_verify(void *opaque, const char *transactional_id, int64_t pid,
                              int16_t epoch, const char *topic, int32_t partition,
                              int16_t produce_version);

/** AddOffsetsToTxn. */
int16_t kb_txn_add_offsets(kb_txn_t *c, const char *txn_id, int64_t pid, int16_t epoch,
                           const char *group_id);

/** EndTxn (@p tv2: version 5+). *rpid / *repoch: the producer id and epoch to answer (v5+). */
int16_t kb_txn_end(kb_txn_t *c, const char *txn_id, int64_t pid, int16_t epoch, bool commit,
                   bool tv2, int64_t *rpid, int16_t *repoch);

/** Write one marker to a local partition (WriteTxnMarkers; __consumer_offsets via the group
 *  hook). NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH,
 *  TRANSACTION_COORDINATOR_FENCED, NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, ... */
int16_t kb_txn_write_marker(kb_txn_t *c, const char *topic, int32_t partition, int64_t pid,
                            int16_t epoch, int32_t coord_epoch, bool commit);

/**
 * TxnOffsetCommit: verify that the group's __consumer_offsets partition is in the transaction
 * (with @p implicit_add, TxnOffsetCommit v5+ / transaction version 2: add it) and call the
 * group hook, all under the transactional id's lock. @p resp mirrors the request (every
 * ErrorCode NONE) on entry. Returns 0 when @p resp holds the answer, or a Kafka error code to
 * put on every partition (COORDINATOR_NOT_AVAILABLE without a group hook).
 */
int16_t kb_txn_offset_commit(kb_txn_t *c, kb_reqctx_t *ctx, const kp_TxnOffsetCommitRequest_t *rq,
                             kp_TxnOffsetCommitResponse_t *resp, bool implicit_add);

/** A copy of the metadata of @p txn_id (free with kb_txnmeta_free). 0, KB_E_NOT_FOUND, or
 *  (positive) NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for an id this node does not
 *  coordinate now.
 *  @p pending (may be NULL): markers still to be written; the copy's partitions are then only
 *  those still without a marker (what DescribeTransactions shows). */
int kb_txn_describe(kb_txn_t *c, const char *txn_id, kb_txnmeta_t *out, bool *pending);

/** Number of transactional ids known. */
size_t kb_txn_count(kb_txn_t *c);

/** One transactional id, as ListTransactions shows it. */
typedef struct kb_txn_listing_s {
    char *id; /**< malloc'd */
    int64_t producer_id;
    int16_t producer_epoch;
    int8_t state; /**< KB_TXN_* */
    int64_t start_ms;
} kb_txn_listing_t;

/** A snapshot of every transactional id (free with kb_txn_listing_free). 0 or KB_E_NOMEM. */
int kb_txn_list(kb_txn_t *c, kb_txn_listing_t **out, size_t *cnt);
void kb_txn_listing_free(kb_txn_listing_t *v, size_t cnt);

#endif /* KB_TXN_H */
