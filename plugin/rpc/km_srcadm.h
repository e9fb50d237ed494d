/*
 * km_srcadm.h - the source admin client: one-shot queries to a mirror's source cluster
 * (cluster id, topic list with topic ids and partition counts) for the admin RPCs.
 *
 * One kc_ client (proto/client) driven by its own host-lent thread serves every mirror: each
 * query gets fresh node ids for the bootstrap addresses it was given, tries them in order
 * until one answers Metadata (v1..12; topic ids need v10+), and removes them afterwards. The
 * per-mirror connection settings that the kc_ client supports today are used
 * (request.timeout.ms); security.protocol must be PLAINTEXT (CreateMirror refuses others).
 * The data path (fetch/) has its own connections.
 *
 * Owner: km_rpc_t (cm->rpc.srcadm).
 */
#ifndef KM_SRCADM_H
#define KM_SRCADM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/km_config_types.h"
#include "kp_msg.h"
#include "util/km_err.h"
#include "util/km_types.h"

typedef struct km_srcadm km_srcadm_t;

/** One topic of the source cluster. */
typedef struct km_srcadm_topic {
    char *name;
    kbx_uuid_t id; /**< all zero when the source predates topic ids */
    int32_t partitions;
    int16_t error_code; /**< the topic's error in the Metadata answer */
    bool internal;
} km_srcadm_topic_t;

/** The answer to a query. Owned by the source admin client; valid during the callback. */
typedef struct km_srcadm_result {
    km_err_t err;         /**< KM_OK, or why no broker answered (then errmsg) */
    char errmsg[256];     /**< "" on success */
    char cluster_id[128]; /**< the source's cluster id ("" if it sent none) */
    int16_t version;      /**< Metadata version used */
    km_srcadm_topic_t *topics;
    size_t ntopics;
} km_srcadm_result_t;

/**
 * Called once per query with its result: on the coordinator loop; or, only if the loop can no
 * longer run (shutdown), on the thread that drops it with err KM_ERR_SHUTDOWN (then it must
 * touch only arg).
 */
typedef void (*km_srcadm_cb)(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res);

/**
 * Create the client and start its thread.
 * @return KM_OK, KM_ERR_NOMEM, KM_ERR_HOST
 * @thread host main (init)
 */
km_err_t km_srcadm_start(km_plugin_t *cm, km_srcadm_t **out, char *errstr, size_t errstr_size);

/**
 * Stop the thread and destroy the client: queries in progress complete with an error (posted
 * to the loop, which must still run). NULL fine; idempotent.
 * @thread host main (fini)
 */
void km_srcadm_stop(km_srcadm_t *sa);

/** Free it (after km_srcadm_stop). @thread host main (fini) */
void km_srcadm_destroy(km_srcadm_t *sa);

/**
 * Ask the source behind bootstrap (host:port entries, borrowed) for its cluster id and, when
 * with_topics, every topic (Metadata with a null topic list). cb runs exactly once unless
 * this returns an error.
 * @return KM_OK, KM_ERR_INVALID (no usable address), KM_ERR_NOMEM, KM_ERR_SHUTDOWN
 * @thread coordinator loop
 */
km_err_t km_srcadm_metadata(km_srcadm_t *sa, const km_strlist_t *bootstrap, bool with_topics,
                            int32_t timeout_ms, km_srcadm_cb cb, void *arg);

/**
 * Answer of km_srcadm_request, same delivery rules as km_srcadm_cb: res->err/errmsg say why
 * no broker answered; otherwise res->version is the version used and body/len the response
 * body (after the header), valid during the call only.
 */
typedef void (*km_srcadm_raw_cb)(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res,
                                 const uint8_t *body, size_t len);

/**
 * Send one request (a generated codec message, versions of desc capped at max_ver) to the
 * source behind bootstrap, trying the addresses in order like km_srcadm_metadata. msg is
 * borrowed until cb ran. Used by the failback LME lookup (rpc/km_lme.c).
 * @return KM_OK, KM_ERR_INVALID, KM_ERR_NOMEM, KM_ERR_SHUTDOWN
 * @thread coordinator loop
 */
km_err_t km_srcadm_request(km_srcadm_t *sa, const km_strlist_t *bootstrap,
                           const kp_msg_desc_t *desc, int16_t max_ver, const void *msg,
                           int32_t timeout_ms, km_srcadm_raw_cb cb, void *arg);

#endif /* KM_SRCADM_H */
