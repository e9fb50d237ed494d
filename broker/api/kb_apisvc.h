/*
 * kb_apisvc.h -- the data-plane and admin API service of kbroker: it owns the metadata
 * (kb_meta), the partitions and the storage engine under them (kb_partmgr), the delayed
 * operations (kb_dq), the fetch sessions (kb_fsess), and registers the handlers of
 *
 *   Metadata 0-13, Produce 3-13, Fetch 4-19, ListOffsets 1-11, OffsetForLeaderEpoch 2-4,
 *   CreateTopics 2-8, DeleteTopics 1-6, CreatePartitions 0-3, DeleteRecords 0-2,
 *   DescribeConfigs 1-4, AlterConfigs 0-2, IncrementalAlterConfigs 0-1, DescribeCluster 0-2,
 *   and InitProducerId 0-6 for idempotent producers until a transaction coordinator takes it.
 *
 * kbroker links it as the "api" module (kb_module_api, listed in broker/core/kb_modules.c).
 * Other components (groups, transactions, the plugin host) reach the service of a broker
 * with kb_apisvc_of() and use kb_meta.h / kb_part.h through it.
 *
 * @thread any unless stated
 */
#ifndef KB_APISVC_H
#define KB_APISVC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_api.h"
#include "kb_broker.h"
#include "kb_config.h"
#include "kb_dq.h"
#include "kb_meta.h"
#include "kb_net.h"
#include "kb_part.h"

/** Principal of the requests the broker sends to itself (the kbx host's local_request
 *  channel). Such requests may use the privileged paths: CreateTopics MirrorInfo and
 *  mirror.name in CreateTopics / AlterConfigs / IncrementalAlterConfigs, deleting internal
 *  topics. Client connections never carry it (there is no SASL yet; with SASL, a client
 *  authenticating as this principal must be refused by the authenticator). */
#define KB_PRINCIPAL_INTERNAL "User:__kbroker"

typedef struct kb_apisvc_s kb_apisvc_t;
typedef struct kb_fsess_cache_s kb_fsess_cache_t;

/**
 * Transaction hook of Produce: may producer @p pid / @p epoch with @p transactional_id write
 * transactional batches to @p topic / @p partition now (has the partition been added to its
 * transaction)? @p produce_version is the Produce request's version (the answer depends on it:
 * Kafka gives TRANSACTION_ABORTABLE only to v11+). Return 0 (yes) or a Kafka error code (e.g.
 * INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE). Without a hook,
 * transactional batches are refused with INVALID_TXN_STATE. @thread handler; must not block for
 * long.
 */
typedef int16_t(kb_txn_verify_fn)(void *opaque, const char *transactional_id, int64_t pid,
                                  int16_t epoch, const char *topic, int32_t partition,
                                  int16_t produce_version);

/** A broker as Metadata and DescribeCluster list it (kb_cluster_fn). */
typedef struct kb_cluster_node_s {
    int32_t id;
    char host[256]; /**< its endpoint for the listener the request came in on */
    int32_t port;
    char rack[128];
    bool has_rack;
    bool fenced;
} kb_cluster_node_t;

/**
 * The cluster's brokers for a request that came in on listener @p listener (broker/ctrl
 * installs it; without it a broker lists only itself): a malloc'd array (caller frees) of the
 * registered brokers that have an endpoint for that listener, sorted by id, fenced ones only
 * with @p include_fenced. *@p controller_id gets the id Metadata and DescribeCluster report
 * (as KRaft brokers: a live broker, clients send their admin requests there). 0, or -1 (then
 * the broker lists itself). @thread handler; must not block.
 */
typedef int(kb_cluster_fn)(void *opaque, const char *listener, bool include_fenced,
                           kb_cluster_node_t **out, size_t *cnt, int32_t *controller_id);

/**
 * Serves a Fetch of the metadata log (`__cluster_metadata` partition 0, KRaft's topic id
 * KB_META_TOPIC_ID from v13) in place of the partition fetch path: the controller's brokers
 * fetching it (broker/ctrl installs it on the controller). @p rq is the decoded request (in the
 * request's arena). Returns like a handler. @thread handler
 */
struct kp_FetchRequest_s;
typedef kb_api_result_t(kb_meta_fetch_fn)(void *opaque, kb_req_t *req,
                                          const struct kp_FetchRequest_s *rq, kb_resp_t **respp);

/**
 * Answer of a request sent with kb_ctrl_send_fn: @p status 0 with the response body (after
 * the response header; valid only during the call), or a negative kb_err_t (KB_E_IO: the
 * controller is unreachable, KB_E_TIMEOUT: no answer in time, KB_E_UNSUPPORTED: it does not
 * serve that version, KB_E_CLOSED: the channel is closing). @thread the channel's thread
 */
typedef void(kb_ctrl_resp_fn)(void *arg, int status, const uint8_t *body, size_t len);

/**
 * A broker-only node's channel to the controller (broker/ctrl installs it while it runs): send
 * request @p api_key at exactly version @p ver with the encoded body @p body (copied) to the
 * controller, as this broker, timing out after @p timeout_ms. 0, after which @p cb(@p arg)
 * follows exactly once on another thread; or a negative kb_err_t (KB_E_IO: the controller is
 * known to be down right now; then @p cb never runs). @thread any; does not block
 */
typedef int(kb_ctrl_send_fn)(void *opaque, int16_t api_key, int16_t ver, const uint8_t *body,
                             size_t len, int32_t timeout_ms, kb_ctrl_resp_fn *cb, void *arg);

/** KRaft's fixed topic id of `__cluster_metadata` (AAAAAAAAAAAAAAAAAAAAAQ). */
#define KB_META_TOPIC_ID_INIT                                                                      \
    {                                                                                              \
        .b = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 }                                    \
    }

struct kb_apisvc_s {
    const kb_config_t *cfg;
    kb_broker_t *kb; /**< NULL when created by a test */
    kb_api_registry_t *reg;
    kb_meta_t *meta;
    kb_partmgr_t *pm;
    kb_dq_t *dq;
    kb_fsess_cache_t *fsess;
    kb_server_t *srv; /**< for the bound ports of port-0 listeners; set by start */
    pthread_rwlock_t hook_rw;
    kb_txn_verify_fn *txn_verify;
    void *txn_verify_opaque;
    kb_cluster_fn *cluster;
    void *cluster_opaque;
    kb_meta_fetch_fn *meta_fetch;
    void *meta_fetch_opaque;
    kb_ctrl_send_fn *ctrl_send;
    void *ctrl_send_opaque;
    bool initpid_registered;
    int16_t registered[32];
    size_t registered_cnt;
    /* Fetch requests by session handling (NULL without a metrics registry): a new session, an
     * accepted incremental one (the session's next epoch), without a session, refused with a
     * session error. */
    kb_counter_t *m_fetch_full, *m_fetch_incr, *m_fetch_nosess, *m_fetch_sesserr;
    kb_counter_t *m_fbytes_full, *m_fbytes_incr, *m_fbytes_nosess; /* their request bytes */
    void *m_collector;
};

typedef struct kb_apisvc_opts_s {
    const kb_config_t *cfg;
    kb_api_registry_t *reg;
    kb_broker_t *kb;   /**< optional */
    kb_clock_fn clock; /**< optional storage clock (tests) */
    void *clock_opaque;
    bool no_threads; /**< tests: no maintenance / cleaner threads */
} kb_apisvc_opts_t;

/** Open the metadata and the logs, register the handlers. NULL with @p errstr on failure. */
kb_apisvc_t *kb_apisvc_new(const kb_apisvc_opts_t *o, char *errstr, size_t errstr_size);

/** After the server listens: remember it, start the log maintenance threads, register
 *  InitProducerId unless someone else did. 0 or a kb_err_t. */
int kb_apisvc_start(kb_apisvc_t *svc, kb_server_t *srv);

/** Unregister the handlers, stop the delayed operations, close partitions and logs, free.
 *  The network server must be stopped already. */
void kb_apisvc_free(kb_apisvc_t *svc);

/** The service of broker @p kb (registered by the module), or NULL. */
kb_apisvc_t *kb_apisvc_of(const kb_broker_t *kb);

/** Install (or with NULL remove) the transaction verification hook of Produce. */
void kb_apisvc_set_txn_verify(kb_apisvc_t *svc, kb_txn_verify_fn *fn, void *opaque);

/** Install (or with NULL remove) the cluster's broker list of Metadata and DescribeCluster. */
void kb_apisvc_set_cluster(kb_apisvc_t *svc, kb_cluster_fn *fn, void *opaque);

/** Install (or with NULL remove) the metadata-log Fetch server (before the server starts or
 *  after it stopped). */
void kb_apisvc_set_meta_fetch(kb_apisvc_t *svc, kb_meta_fetch_fn *fn, void *opaque);

/** Install (or with NULL remove) the channel to the controller (broker/ctrl on a broker-only
 *  node). */
void kb_apisvc_set_ctrl_send(kb_apisvc_t *svc, kb_ctrl_send_fn *fn, void *opaque);

/** Send a request to the controller through the installed channel (kb_ctrl_send_fn). Without
 *  one (this node is its own controller, or the channel has stopped): KB_E_UNSUPPORTED, and
 *  @p cb never runs. */
int kb_apisvc_ctrl_send(kb_apisvc_t *svc, int16_t api_key, int16_t ver, const uint8_t *body,
                        size_t len, int32_t timeout_ms, kb_ctrl_resp_fn *cb, void *arg);

/** The brokers to list for a request on @p listener: the installed kb_cluster_fn's answer, or
 *  this broker alone at its advertised endpoint (and itself as controller). A malloc'd array
 *  (caller frees). 0 or -1 (no memory). @thread handler */
int kb_apisvc_cluster(kb_apisvc_t *svc, const char *listener, bool include_fenced,
                      kb_cluster_node_t **out, size_t *cnt, int32_t *controller_id);

/** Whether @p ctx is a request the broker sent to itself (see KB_PRINCIPAL_INTERNAL). */
bool kb_apisvc_privileged(const kb_reqctx_t *ctx);

#endif /* KB_APISVC_H */
