/*
 * kb_txn_int.h -- what kb_txn.c and the handler file kb_txn_h.c share. Internal to kb_txn.
 */
#ifndef KB_TXN_INT_H
#define KB_TXN_INT_H

#include <pthread.h>

#include "kb_txn.h"

typedef struct kb_txn_entry_s kb_txn_entry_t;
typedef struct kb_txn_mark_s kb_txn_mark_t;

/* What this node does with one partition of __transaction_state (as the group coordinator's
 * kb_gpown_t): not the leader, loading, or coordinating its ids at an epoch. */
#define KB_TXN_P_NONE    0
#define KB_TXN_P_LOADING 1
#define KB_TXN_P_ACTIVE  2

typedef struct kb_txn_pown_s {
    int state;
    int32_t epoch; /**< the partition's leader epoch when it was taken (-1 none) */
} kb_txn_pown_t;

/** How long a write to __transaction_state waits for the high watermark (acks=all). */
#define KB_TXN_WRITE_TIMEOUT_MS 5000

/** One transactional id. */
struct kb_txn_entry_s {
    kb_txn_entry_t *next; /**< bucket chain (c->mu) */
    int refcnt;           /**< c->mu */
    bool linked;          /**< in the table (c->mu to change; readable under mu) */
    pthread_mutex_t mu;   /**< serialises transitions of this id, held across log appends */
    char *id;
    size_t id_len;
    int32_t partition; /**< of __transaction_state */
    kb_txnmeta_t m;    /**< under mu */
    bool pending;      /**< under mu: Prepare* written, markers or Complete still to write */
    uint8_t *done;     /**< under mu: per m.tps entry, marker written (while pending) */
};

struct kb_txn_s {
    kb_apisvc_t *svc;
    kb_meta_t *meta;
    const kb_config_t *cfg;
    const kb_broker_t *kb;
    kb_clock_fn clock;
    void *clock_opaque;
    int64_t tick_ms;
    bool no_threads;
    int32_t marker_timeout_ms;

    pthread_mutex_t mu; /**< table, nparts */
    kb_txn_entry_t **buckets;
    size_t nbuckets;
    size_t count;
    int32_t nparts;     /**< partitions of __transaction_state, 0 while it does not exist */
    kb_txn_pown_t *own; /**< per partition (mu) */
    int32_t nown;
    pthread_mutex_t load_mu; /**< one ownership pass at a time */
    kb_meta_listener_t *ml;  /**< leadership changes of __transaction_state */
    kb_txn_mark_t *mark;     /**< markers to other brokers (NULL without threads) */

    pthread_mutex_t thr_mu; /**< timer thread state */
    pthread_cond_t thr_cv;
    pthread_t thr;
    bool thr_started;
    bool thr_stop;
    bool thr_due; /**< thr_mu: a leadership change to look at now */

    kb_api_registry_t *reg;
    int16_t registered[12];
    size_t registered_cnt;
    bool verify_installed;
};

int64_t kb_txn_now(kb_txn_t *c);

/* ---- the marker channel (kb_txn_mark.c) ---- */

/** A WriteTxnMarkers client with its driving thread. NULL on failure (logged). */
kb_txn_mark_t *kb_txn_mark_new(kb_txn_t *c);
/** Stop its thread and free it; pending exchanges end first. */
void kb_txn_mark_free(kb_txn_mark_t *m);
/** Write one marker through the leader of @p topic-@p partition on another broker (blocks up
 *  to kb_txn_opts_t.marker_timeout_ms). The leader's partition error (NONE, INVALID_PRODUCER_EPOCH,
 *  TRANSACTION_COORDINATOR_FENCED, ...), UNKNOWN_TOPIC_OR_PARTITION when the topic left the
 *  image, or NOT_LEADER_OR_FOLLOWER for everything to retry (no leader, this node, no endpoint,
 *  transport errors, the leader's retriable errors). @p m NULL: NOT_LEADER_OR_FOLLOWER. */
int16_t kb_txn_mark_remote(kb_txn_mark_t *m, const char *topic, int32_t partition, int64_t pid,
                           int16_t epoch, int32_t coord_epoch, bool commit);

/** The handlers' registration (kb_txn_h.c). */
int kb_txn_h_register(kb_txn_t *c, kb_api_registry_t *reg);
int kb_txn_h_register_find_coordinator(kb_txn_t *c, kb_api_registry_t *reg);

#endif /* KB_TXN_INT_H */
