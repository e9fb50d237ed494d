/*
 * kb_gco_int.h -- the coordinator's structure and what its files share (kb_gco.c, the handler
 * files kb_gh_*.c). Not for other components.
 *
 * @thread as stated per function
 */
#ifndef KB_GCO_INT_H
#define KB_GCO_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kb_gco.h"
#include "kb_gsm.h"
#include "kb_net.h"
#include "kp_msgs.h"

#define KB_GCO_MAGIC 0x6b67636fu /* "kgco" */

/* What this node does with one partition of __consumer_offsets (kb_gpown_t.state). */
#define KB_GCO_P_NONE    0 /**< not the leader: requests for its groups are NOT_COORDINATOR */
#define KB_GCO_P_LOADING 1 /**< leader, reading the log: COORDINATOR_LOAD_IN_PROGRESS */
#define KB_GCO_P_ACTIVE  2 /**< leader, loaded: this node coordinates its groups */

/** Kafka's offsets.commit.timeout.ms default: how long a coordinator write waits for the
 *  high watermark (acks=all) before the request fails. */
#define KB_GCO_WRITE_TIMEOUT_MS 5000

/** Period of the ownership check that backs up the leadership notifications. */
#define KB_GCO_RECONCILE_MS 1000

typedef struct kb_gpown_s {
    int state;     /**< KB_GCO_P_* */
    int32_t epoch; /**< coordinator epoch = the partition's leader epoch when it was taken */
} kb_gpown_t;

struct kb_gco_s {
    uint32_t magic;
    const kb_config_t *cfg;
    const kb_broker_t *kb;
    kb_apisvc_t *svc;
    kb_meta_t *meta;
    kb_api_registry_t *reg;
    pthread_mutex_t mu; /**< the state machine and everything below it */
    kb_gsm_t *gsm;
    int efd; /**< eventfd waking the timer thread */
    pthread_t thr;
    bool thr_started;
    bool stop;                /**< under mu */
    pthread_mutex_t topic_mu; /**< serialises the creation of __consumer_offsets */
    _Atomic bool topic_ready;
    pthread_mutex_t q_mu; /**< deleted topics, from the metadata listener */
    char **deleted;
    size_t ndeleted;
    size_t cap_deleted;
    kb_meta_listener_t *ml;
    kb_gpown_t *own; /**< per partition of __consumer_offsets (under mu) */
    int32_t nown;
    pthread_mutex_t load_mu;     /**< one ownership pass (kb_gco_reconcile) at a time */
    _Atomic bool reconcile_due;  /**< a leadership change to look at */
    int64_t next_reconcile_ms;   /**< timer thread: the next periodic pass (monotonic) */
    kb_node_resolve_fn *resolve; /**< other brokers' endpoints (FindCoordinator) */
    void *resolve_opaque;
    bool hook_installed;
    kb_metrics_t *metrics;
    void *collector;
    kb_gsm_stats_t last; /**< the metrics collector's copy (its own: it never blocks on mu) */
    int16_t registered[16];
    size_t nregistered;
};

/** A deferred JoinGroup / SyncGroup: the state machine's token. Owned by the state machine
 *  until its result is delivered; see kb_gco_wait_complete for the cancellation rules. */
typedef struct kb_gwait_s {
    kb_gco_t *co;
    kb_req_t *req; /**< NULL once the client went away */
    int16_t api_key;
    int16_t version;
    bool in_handler; /**< the handler that created it is still running */
    bool detached;   /**< completed but the cancel callback is still due: it frees */
    bool completed;  /**< a result was produced while in_handler */
    kb_resp_t *held; /**< that result (NULL: close the connection), sent at release */
} kb_gwait_t;

/** A waiter for @p req, deferred with the coordinator's cancel callback. NULL when the client
 *  is gone (or on no memory; *@p gone says which). @locks co->mu held */
kb_gwait_t *kb_gco_wait_new(kb_gco_t *co, kb_req_t *req, bool *gone);

/** The handler is done with its request: send a result held back meanwhile. @locks co->mu */
void kb_gco_wait_release(kb_gwait_t *w);

/** Send @p resp (NULL: close the connection) for @p w and free it (unless the cancel callback
 *  still has to run). @locks co->mu held */
void kb_gco_wait_complete(kb_gwait_t *w, kb_resp_t *resp);

/* ---- handler helpers (kb_gh_util in kb_gco.c) ------------------------------------------- */

/** Decode the request body into @p msg (arena). 0 or -1 (malformed). */
int kb_gh_decode(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, void *msg);

/** Encode @p msg at the request's version into a response. */
kb_api_result_t kb_gh_respond(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, const void *msg,
                              kb_resp_t **respp);

/** Encode @p msg at @p version into a new response (NULL on failure). */
kb_resp_t *kb_gh_encode(const kp_msg_desc_t *desc, const void *msg, int16_t version);

/** NUL-terminated copy of @p s in @p ar (NULL for a null string or no memory). */
char *kb_gh_cstr(kp_arena_t *ar, kp_str_t s);

/** A view of @p s (NULL gives a null string). */
kp_str_t kb_gh_view(const char *s);

/** "/1.2.3.4", Kafka's client host form, from the peer "1.2.3.4:5678" (in @p ar). */
const char *kb_gh_client_host(kp_arena_t *ar, const char *peer);

/** This node's advertised endpoint for @p listener. */
void kb_gh_endpoint(kb_gco_t *co, const char *listener, const char **host, int32_t *port);

/** Register @p key (versions clamped to the codec's) with @p fn. 0 or a kb_err_t. */
int kb_gh_register(kb_gco_t *co, int16_t key, int16_t min, int16_t max, kb_api_handler_fn *fn,
                   unsigned flags);

/** Deliver a JoinGroup / SyncGroup result to its waiter (the gsm's join_done / sync_done).
 *  @locks co->mu held (kb_gh_join.c) */
void kb_gh_join_result(kb_gwait_t *w, const kb_gjoin_res_t *res);
void kb_gh_sync_result(kb_gwait_t *w, const kb_gsync_res_t *res);

/* handler registration per file */
int kb_gh_join_register(kb_gco_t *co);
int kb_gh_offsets_register(kb_gco_t *co);
int kb_gh_admin_register(kb_gco_t *co);

/** Resolve a committed topic: by name (@p id NULL or zero) or by id. Sets *@p name (in @p ar)
 *  and *@p id_out. 0, UNKNOWN_TOPIC_OR_PARTITION (unknown name or partition out of range) or
 *  UNKNOWN_TOPIC_ID. */
int16_t kb_gh_topic(kb_gco_t *co, kp_arena_t *ar, kp_str_t name, const kp_uuid_t *id,
                    int32_t partition, const char **name_out, kp_uuid_t *id_out);

/** Whether this node coordinates @p group_id now: 0, NOT_COORDINATOR or
 *  COORDINATOR_LOAD_IN_PROGRESS. @locks co->mu held */
int16_t kb_gco_owner_err(kb_gco_t *co, const char *group_id);

/** Wait (without co->mu) for the high watermark to pass the coordinator writes this thread
 *  made since the last call (acks=all); forget them. 0, COORDINATOR_NOT_AVAILABLE (timeout,
 *  fewer in-sync replicas than min.insync.replicas) or NOT_COORDINATOR (leadership lost). */
int16_t kb_gco_await_writes(kb_gco_t *co);

/** Drop what kb_gco_await_writes would wait for (requests that answer without waiting). */
void kb_gco_forget_writes(void);

/** The transaction hook's TxnOffsetCommit (kb_gh_offsets.c). */
int16_t kb_gh_txn_offset_commit(kb_gco_t *co, kb_reqctx_t *ctx, int32_t offsets_partition,
                                const kp_TxnOffsetCommitRequest_t *rq,
                                kp_TxnOffsetCommitResponse_t *resp);

#endif /* KB_GCO_INT_H */
