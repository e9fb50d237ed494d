/*
 * kb_txn_group_hook.h -- the contract between the transaction coordinator (broker/txn) and the
 * group coordinator (broker/group): two functions the group coordinator implements and
 * installs, so that consumer offsets can take part in transactions.
 *
 * Flow of sendOffsetsToTransaction (Kafka's):
 *   1. AddOffsetsToTxn (transaction coordinator): partition P = abs(hash(group id)) %
 *      partitions of __consumer_offsets joins the producer's transaction.
 *   2. TxnOffsetCommit: the transaction coordinator registers the API, decodes the request and
 *      verifies that __consumer_offsets-P is in the ongoing transaction of ProducerId /
 *      ProducerEpoch (else the errors Kafka 4.x gives: INVALID_PRODUCER_EPOCH,
 *      INVALID_TXN_STATE / TRANSACTION_ABORTABLE, COORDINATOR_NOT_AVAILABLE, ...); then it calls
 *      txn_offset_commit(), which validates the group and writes the offsets to P as
 *      *transactional* records of that producer (pending, invisible to OffsetFetch).
 *   3. EndTxn: for P the transaction coordinator calls txn_marker() instead of writing the marker
 *      itself; the group coordinator appends the COMMIT/ABORT control batch to P
 *      (kb_part_append_control with the given coordinator epoch) and then materialises (commit)
 *      or drops (abort) that producer's pending offsets. WriteTxnMarkers requests naming
 *      __consumer_offsets partitions take the same path.
 * Without an installed hook, TxnOffsetCommit answers COORDINATOR_NOT_AVAILABLE and the
 * transaction coordinator writes __consumer_offsets markers itself.
 *
 * Installation is keyed by the broker (kb_broker_t), so it does not depend on the order of the
 * modules in broker/core/kb_modules.c: install in the group module's init() or start(), remove
 * in its stop() (or fini()). kb_txn_group_hook_remove() waits for calls in flight.
 *
 * Both functions are called with the transactional id's lock held (so the offsets of a
 * transaction are written before its marker): they must not call any kb_txn function and must
 * not wait for anything that itself waits for a transaction. They run on handler threads
 * (txn_offset_commit, txn_marker from EndTxn / WriteTxnMarkers) or the coordinator's timer
 * thread (txn_marker for timed-out, fenced or recovered transactions).
 *
 * @thread any
 */
#ifndef KB_TXN_GROUP_HOOK_H
#define KB_TXN_GROUP_HOOK_H

#include <stdbool.h>
#include <stdint.h>

#include "kb_broker.h"
#include "kb_net.h"
#include "kp_msgs.h"

typedef struct kb_txn_group_hook_s {
    /**
     * TxnOffsetCommit after the transaction check passed. @p offsets_partition is P.
     * @p resp has one topic / partition entry per request entry (names or ids copied, every
     * ErrorCode NONE): set per-partition errors there, or return a non-zero Kafka error code
     * that the caller puts on every partition (e.g. COORDINATOR_NOT_AVAILABLE,
     * COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID).
     * Arrays in @p resp may be reallocated in ctx->arena.
     */
    int16_t (*txn_offset_commit)(void *opaque, kb_reqctx_t *ctx, int32_t offsets_partition,
                                 const kp_TxnOffsetCommitRequest_t *rq,
                                 kp_TxnOffsetCommitResponse_t *resp);
    /**
     * Write the COMMIT (@p commit) or ABORT marker of producer @p pid / @p epoch with
     * coordinator epoch @p coord_epoch to __consumer_offsets partition @p partition and apply
     * it to that producer's pending offsets. Return 0, or a Kafka error code:
     * UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH and TRANSACTION_COORDINATOR_FENCED are
     * final (the marker is given up, as Kafka does); any other error makes the coordinator
     * retry later.
     */
    int16_t (*txn_marker)(void *opaque, int32_t partition, int64_t pid, int16_t epoch,
                          int32_t coord_epoch, bool commit);
} kb_txn_group_hook_t;

/** Install @p hook (copied) with @p opaque for broker @p kb, replacing a previous one.
 *  0 or KB_E_NOMEM (too many brokers in this process). */
int kb_txn_group_hook_install(const kb_broker_t *kb, const kb_txn_group_hook_t *hook, void *opaque);

/** Remove the hook of @p kb; on return no hook function of it is running. */
void kb_txn_group_hook_remove(const kb_broker_t *kb);

#endif /* KB_TXN_GROUP_HOOK_H */
