/*
 * kb_txnsm.h -- the transaction state machine of one transactional id, without I/O: what
 * Kafka 4.x's coordinator decides for InitProducerId, AddPartitionsToTxn, EndTxn (transaction
 * versions 1 and 2), the epoch fence and the completion after the markers, given the current
 * metadata. Every transition produces the next metadata (to be written to __transaction_state
 * and then adopted) or a Kafka error code; nothing here changes the current metadata.
 *
 * Since kbroker completes a transaction (markers, then the Complete record) before it answers,
 * a Prepare* state always means "markers still to be written": the state checks alone give
 * CONCURRENT_TRANSACTIONS where Kafka looks at its pending-transition flag.
 *
 * @thread any; the caller serialises transitions of one transactional id
 */
#ifndef KB_TXNSM_H
#define KB_TXNSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_txnlog.h"

#define KB_TXN_NO_PID    (-1LL)
#define KB_TXN_NO_EPOCH  ((int16_t)-1)
#define KB_TXN_EPOCH_MAX ((int16_t)32767)

/** A set of (topic, partition), kept sorted; owns its strings. */
typedef struct kb_txn_tpset_s {
    kb_txn_tp_t *v;
    size_t cnt, cap;
} kb_txn_tpset_t;

/** 0 (added or already there) or KB_E_NOMEM. */
int kb_txn_tpset_add(kb_txn_tpset_t *s, const char *topic, int32_t partition);
bool kb_txn_tpset_has(const kb_txn_tpset_t *s, const char *topic, int32_t partition);
void kb_txn_tpset_clear(kb_txn_tpset_t *s);
int kb_txn_tpset_copy(kb_txn_tpset_t *dst, const kb_txn_tpset_t *src);

/** The metadata of one transactional id (Kafka's TransactionMetadata). */
typedef struct kb_txnmeta_s {
    int64_t producer_id;
    int64_t prev_producer_id; /**< the producer id before the last transition */
    int64_t next_producer_id; /**< TV2: id the producer gets when the epoch ran out */
    int16_t producer_epoch;
    int16_t last_producer_epoch; /**< for retries of InitProducerId; not persisted (as Kafka) */
    int32_t timeout_ms;
    int8_t state; /**< KB_TXN_* */
    kb_txn_tpset_t tps;
    int64_t start_ms; /**< start of the ongoing transaction, -1 */
    int64_t last_update_ms;
    int16_t client_tv; /**< transaction version the client uses: 0 (TV1) or 2 */
} kb_txnmeta_t;

/** A fresh transactional id: @p pid, epoch -1, Empty. */
void kb_txnmeta_init(kb_txnmeta_t *m, int64_t pid, int32_t timeout_ms, int64_t now_ms);
/** Deep copy. 0 or KB_E_NOMEM. */
int kb_txnmeta_copy(kb_txnmeta_t *dst, const kb_txnmeta_t *src);
void kb_txnmeta_free(kb_txnmeta_t *m);
/** Move @p src into @p dst (freeing dst's previous content). */
void kb_txnmeta_move(kb_txnmeta_t *dst, kb_txnmeta_t *src);

/** The value record of @p m (tps shared with @p m, not copied; do not free). */
void kb_txnmeta_to_value(const kb_txnmeta_t *m, kb_txnlog_value_t *v);
/** Take the content of a decoded value record (its tps move into @p m). */
void kb_txnmeta_from_value(kb_txnmeta_t *m, kb_txnlog_value_t *v);

/** Kafka's isEpochExhausted: epoch >= Short.MAX_VALUE - 1. */
bool kb_txnsm_epoch_exhausted(int16_t epoch);

/** Producer id allocator (the metadata layer's blocks). Returns 0 and *pid, or non-zero. */
typedef int (*kb_txnsm_alloc_fn)(void *opaque, int64_t *pid);

/** What a transition asks of the caller. */
typedef enum kb_txnsm_act_e {
    KB_TXNSM_ERROR = 0, /**< answer the error code; nothing changes */
    KB_TXNSM_NOOP,      /**< answer the error code (often NONE) without writing anything */
    KB_TXNSM_WRITE,     /**< write next, adopt it, answer */
    KB_TXNSM_FENCE,     /**< InitProducerId on an ongoing transaction: abort it first with the
                             epoch in next->producer_epoch (kb_txnsm_fence_abort), then answer
                             CONCURRENT_TRANSACTIONS */
} kb_txnsm_act_t;

typedef struct kb_txnsm_initpid_s {
    int32_t timeout_ms;
    int64_t exp_pid;   /**< -1: none (KIP-360 fields absent) */
    int16_t exp_epoch; /**< -1: none */
    int64_t now_ms;
} kb_txnsm_initpid_t;

/** InitProducerId of a transactional producer (prepareInitProducerIdTransit). For FENCE,
 *  next->producer_epoch is the fencing epoch and nothing else in next is meaningful. */
kb_txnsm_act_t kb_txnsm_init_pid(const kb_txnmeta_t *cur, const kb_txnsm_initpid_t *rq,
                                 kb_txnsm_alloc_fn alloc, void *alloc_opaque, kb_txnmeta_t *next,
                                 int16_t *err);

/** AddPartitionsToTxn / AddOffsetsToTxn (@p client_tv: 2 for the TV2 broker form, else 0). */
kb_txnsm_act_t kb_txnsm_add_partitions(const kb_txnmeta_t *cur, int64_t pid, int16_t epoch,
                                       const kb_txn_tp_t *tps, size_t n, int16_t client_tv,
                                       int64_t now_ms, kb_txnmeta_t *next, int16_t *err);

/** Verification (AddPartitionsToTxn VerifyOnly, Produce, TxnOffsetCommit): NONE when the
 *  partition is in the ongoing transaction of @p pid / @p epoch; else INVALID_PRODUCER_ID_MAPPING,
 *  PRODUCER_FENCED, CONCURRENT_TRANSACTIONS or TRANSACTION_ABORTABLE (not added). */
int16_t kb_txnsm_verify(const kb_txnmeta_t *cur, int64_t pid, int16_t epoch, const char *topic,
                        int32_t partition);

typedef struct kb_txnsm_end_s {
    int64_t pid;
    int16_t epoch;
    bool commit;
    bool from_client; /**< EndTxn (else the coordinator's own abort: fence or timeout) */
    bool tv2;         /**< EndTxn v5+, or a coordinator abort of a TV2 transaction */
    bool epoch_fence; /**< coordinator abort that fences the producer (epoch = fencing epoch) */
    int64_t now_ms;
} kb_txnsm_end_t;

/** EndTxn: the PrepareCommit / PrepareAbort transition (TV1 or TV2 rules). NOOP with NONE is
 *  a retry of a completed EndTxn. */
kb_txnsm_act_t kb_txnsm_end(const kb_txnmeta_t *cur, const kb_txnsm_end_t *rq,
                            kb_txnsm_alloc_fn alloc, void *alloc_opaque, kb_txnmeta_t *next,
                            int16_t *err);

/** The epoch a coordinator abort (fence, timeout) uses: current + 1 unless that would pass
 *  Short.MAX_VALUE. */
int16_t kb_txnsm_fence_epoch(const kb_txnmeta_t *cur);

/** After every marker was written: CompleteCommit / CompleteAbort (TV2 overflow: the next
 *  producer id with epoch 0). @p prep must be in a Prepare state. 0 or KB_E_NOMEM. */
int kb_txnsm_complete(const kb_txnmeta_t *prep, int64_t now_ms, kb_txnmeta_t *next);

/** Whether a transactional id in @p m may be forgotten after transactional.id.expiration.ms. */
bool kb_txnsm_expirable(const kb_txnmeta_t *m);

#endif /* KB_TXNSM_H */
