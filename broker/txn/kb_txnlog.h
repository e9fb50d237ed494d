/*
 * kb_txnlog.h -- the records of __transaction_state as Apache Kafka 4.x stores them, and the
 * mapping of a transactional id to its partition.
 *
 * Record key (TransactionLogKey, version 0, not flexible):
 *   int16 version (0) | string TransactionalId (int16 length + UTF-8)
 * Record value (TransactionLogValue), int16 version first, then
 *   v0: int64 ProducerId | int16 ProducerEpoch | int32 TransactionTimeoutMs |
 *       int8 TransactionStatus | nullable array (int32 count, -1 = null) of
 *       { string Topic, array of int32 PartitionIds } | int64 TransactionLastUpdateTimestampMs |
 *       int64 TransactionStartTimestampMs
 *   v1: the same fields in flexible encoding (compact strings/arrays, uvarint count + 1, 0 =
 *       null; an empty tag section after each partition entry) followed by a tag section with
 *       PreviousProducerId (tag 0, int64, default -1), NextProducerId (tag 1, int64, default -1),
 *       ClientTransactionVersion (tag 2, int16, default 0), NextProducerEpoch (tag 3, int16,
 *       default -1); a tag is written only when its value differs from the default.
 * A null value (tombstone) removes the transactional id. Kafka 4.x writes v1 (its default
 * transaction.version 2 selects it); both versions are read. docs/broker.md describes this in
 * the "Transaction coordinator" section.
 *
 * @thread any (no shared state)
 */
#ifndef KB_TXNLOG_H
#define KB_TXNLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kp_writer.h"

/* TransactionStatus values (Kafka's TransactionState ids). */
#define KB_TXN_EMPTY               0
#define KB_TXN_ONGOING             1
#define KB_TXN_PREPARE_COMMIT      2
#define KB_TXN_PREPARE_ABORT       3
#define KB_TXN_COMPLETE_COMMIT     4
#define KB_TXN_COMPLETE_ABORT      5
#define KB_TXN_DEAD                6
#define KB_TXN_PREPARE_EPOCH_FENCE 7

/** Kafka's name of a state ("Empty", "Ongoing", "PrepareCommit", ...); "Unknown" otherwise. */
const char *kb_txnlog_state_name(int state);

/** Java's String.hashCode() of the string Kafka decodes from the UTF-8 bytes @p s / @p len:
 *  31-polynomial over UTF-16 code units (supplementary characters as surrogate pairs), each
 *  maximal ill-formed subsequence replaced by U+FFFD as Java's UTF-8 decoder does. */
int32_t kb_txnlog_java_hash(const char *s, size_t len);

/** The partition of __transaction_state (or of __consumer_offsets for a group id) that owns
 *  @p id among @p partitions: Kafka's Utils.abs(id.hashCode()) % partitions, where
 *  Utils.abs(INT32_MIN) is 0. */
int32_t kb_txnlog_partition_for(const char *id, size_t len, int32_t partitions);

/** One (topic, partition) of a transaction. */
typedef struct kb_txn_tp_s {
    char *topic; /**< malloc'd */
    int32_t partition;
} kb_txn_tp_t;

/** A decoded or to-be-encoded value record. */
typedef struct kb_txnlog_value_s {
    int16_t version; /**< 0 or 1 (decode: as read) */
    int64_t producer_id;
    int64_t prev_producer_id; /**< v1 tag 0, -1 default */
    int64_t next_producer_id; /**< v1 tag 1, -1 default */
    int16_t producer_epoch;
    int16_t next_producer_epoch; /**< v1 tag 3, -1 default */
    int32_t timeout_ms;
    int8_t state;         /**< KB_TXN_* */
    bool partitions_null; /**< TransactionPartitions is null (Kafka writes null for Empty) */
    kb_txn_tp_t *tps;     /**< sorted by topic, then partition */
    size_t tp_cnt;
    int64_t last_update_ms;
    int64_t start_ms;
    int16_t client_txn_version; /**< v1 tag 2, 0 default */
} kb_txnlog_value_t;

/** Append the key record of @p txn_id (@p len bytes) to @p wr. 0 or the writer's error. */
int kb_txnlog_key_encode(kp_writer_t *wr, const char *txn_id, size_t len);

/** Decode a key: *@p id is a malloc'd NUL-terminated copy. 0, KB_E_PARSE (malformed),
 *  KB_E_UNSUPPORTED (a key version other than 0; Kafka skips such records), KB_E_NOMEM. */
int kb_txnlog_key_decode(const uint8_t *buf, size_t len, char **id);

/** Append @p v as value version @p version (0 or 1) to @p wr. Partitions are written grouped by
 *  topic in the order of @p v->tps (sorted input gives Kafka's grouping). 0 or an error. */
int kb_txnlog_value_encode(kp_writer_t *wr, const kb_txnlog_value_t *v, int16_t version);

/** Decode a value (v0 or v1; unknown tags skipped). @p v owns what it allocated: free with
 *  kb_txnlog_value_free(). 0, KB_E_PARSE, KB_E_UNSUPPORTED (version > 1), KB_E_NOMEM. */
int kb_txnlog_value_decode(const uint8_t *buf, size_t len, kb_txnlog_value_t *v);

void kb_txnlog_value_free(kb_txnlog_value_t *v);

#endif /* KB_TXNLOG_H */
