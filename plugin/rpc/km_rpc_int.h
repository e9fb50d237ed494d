/*
 * km_rpc_int.h - shared by the files of plugin/rpc/: the request object and the helpers the
 * handlers use to complete, fail and continue requests.
 *
 * A request (km_rpc_req_t) is created by the host's handle callback, which copies the body and
 * posts it to the coordinator loop. References: one for the host token (dropped when the
 * response is sent or the client cancels), one per pending step (the initial post, each host
 * operation in flight). Everything else about a request happens on the loop.
 */
#ifndef KM_RPC_INT_H
#define KM_RPC_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "kp_arena.h"
#include "kp_msgs.h"
#include "rpc/km_rpc.h"
#include "rpc/km_rpc_types.h"
#include "util/km_types.h"

#define KM_RPC_REQ_MAGIC 0x4b4d5251u /* "KMRQ" */
/** Memory a decoded request or a built response may take. */
#define KM_RPC_ARENA_LIMIT (16u << 20)
/** Default timeout of the host operations a handler starts. */
#define KM_RPC_OP_TIMEOUT_MS 30000

typedef struct km_rpc_req km_rpc_req_t;

/** A continuation: runs on the loop with the result of a host operation. status is KBX_OK or
 *  a KBX_ERR_*; body/len the response body (local/broker requests), else NULL/0; the body
 *  lives in the request's arena, so views decoded from it last as long as the request. */
typedef void (*km_rpc_cont_fn)(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                               int32_t tag);

struct km_rpc_req {
    uint32_t magic;
    km_plugin_t *cm;
    int refs;       /* under rpc->lock */
    bool cancelled; /* under rpc->lock: the client went away */
    bool completed; /* under rpc->lock: the response was handed to the host */
    kbx_token_t *token;
    int16_t api_key, api_version;
    uint8_t *body;
    size_t body_len;
    char *principal;
    char *client_host;
    kp_arena_t ar; /* decoded request, response under construction */
    void *rq;      /* the decoded request (in ar) */
    bool rq_ok;    /* rq decoded completely */
    /* Handler state (loop only). */
    void *st;
    void (*st_free)(km_rpc_req_t *req);
    int pending;                             /* sub-operations outstanding (fan-outs) */
    int mirror_waits;                        /* km_rpc_mirror_grace() re-checks so far */
    void (*mirror_again)(km_rpc_req_t *req); /* the handler it runs again */
    /* Internal requests (km_rpc_internal, km_rpc_host_request): no token, no ACL check; the
     * answer goes to done(done_arg). raw: a plain host request, no handler, no encoded answer. */
    bool internal;
    bool raw;
    bool dropping; /* the loop no longer runs: done gets KBX_ERR_SHUTDOWN */
    km_rpc_done_fn done;
    void *done_arg;
};

/** Take a reference (loop or host thread). */
void km_rpc_req_hold(km_rpc_req_t *req);
/** Drop a reference; the last one frees the request. */
void km_rpc_req_release(km_rpc_req_t *req);
/** True when the response was sent or the client went away: stop working on it. */
bool km_rpc_req_done(km_rpc_req_t *req);

/** Encode resp (a response struct of req's API) and send it; no-op if already done or
 *  cancelled. @thread loop */
void km_rpc_complete(km_rpc_req_t *req, const void *resp);
/** Answer with only the top-level ErrorCode/ErrorMessage set (msg formatted). @thread loop */
void km_rpc_fail(km_rpc_req_t *req, int16_t error_code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** A copy of s in the request's arena as a kp string (NULL s: null string). */
kp_str_t km_rpc_str(km_rpc_req_t *req, const char *s);
/** printf into the request's arena. */
kp_str_t km_rpc_strf(km_rpc_req_t *req, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** A NUL-terminated copy of a kp string in the arena (NULL for null). */
char *km_rpc_cstr(km_rpc_req_t *req, kp_str_t s);

/** True once fini began: handlers must not start host operations. */
bool km_rpc_stopping(km_plugin_t *cm);

/**
 * Host operations whose callbacks continue the request on the loop (tag is passed through).
 * On a start error the continuation is not called and the KBX_ERR_* is returned.
 * @thread loop
 */
int32_t km_rpc_local_request(km_rpc_req_t *req, int16_t api_key, int16_t api_version,
                             const void *msg, const kp_msg_desc_t *desc, km_rpc_cont_fn cont,
                             int32_t tag);
int32_t km_rpc_broker_request(km_rpc_req_t *req, int32_t broker_id, int16_t api_key,
                              int16_t api_version, const void *msg, const kp_msg_desc_t *desc,
                              km_rpc_cont_fn cont, int32_t tag);
int32_t km_rpc_controller_write(km_rpc_req_t *req, const kbx_record_t *const *records,
                                uint32_t count, km_rpc_cont_fn cont, int32_t tag);

/** How long a request naming a mirror this broker does not know looks again before answering
 *  UNKNOWN_CLUSTER_MIRROR, and how often: a mirror created through another broker reaches this
 *  broker's metadata a fetch later (design M17). */
#define KM_RPC_MIRROR_GRACE_MS      2000
#define KM_RPC_MIRROR_GRACE_STEP_MS 50

/**
 * The mirror named by req is not in this broker's catalog: schedule handler(req) again in
 * KM_RPC_MIRROR_GRACE_STEP_MS unless KM_RPC_MIRROR_GRACE_MS have passed. handler must be
 * re-entrant up to its catalog lookup (it only decodes and checks before it).
 * @return true when re-scheduled (the caller returns), false to answer UNKNOWN_CLUSTER_MIRROR
 * @thread loop
 */
bool km_rpc_mirror_grace(km_rpc_req_t *req, void (*handler)(km_rpc_req_t *req));

/** Continue with cont(req, KBX_OK, NULL, 0, tag) on the loop after delay_ms (a host timer). */
int32_t km_rpc_after(km_rpc_req_t *req, int64_t delay_ms, km_rpc_cont_fn cont, int32_t tag);

/**
 * The registered brokers of this cluster: a Metadata request (no topics) to this broker through
 * local_request, so that any host that serves Metadata works (the kbx metadata deltas of a host
 * may list only the local broker). cont gets the response; km_rpc_brokers_decode reads it.
 */
int32_t km_rpc_brokers_query(km_rpc_req_t *req, km_rpc_cont_fn cont, int32_t tag);
/**
 * The broker ids of a km_rpc_brokers_query answer (in the request arena; *n 0 when the answer
 * is unusable, then the catalog's list, else this broker alone).
 */
const int32_t *km_rpc_brokers_decode(km_rpc_req_t *req, int32_t status, const uint8_t *body,
                                     size_t len, size_t *n);

/** The Kafka error code for a host status of a failed operation (km_rpc_mirror.c). */
int16_t km_rpc_host_error(int32_t status);
/** The text of a host status (KBX_ERR_*). */
const char *km_rpc_host_errstr(int32_t status);

/** Authorize the request's principal for operation (Kafka AclOperation) on the cluster. */
bool km_rpc_authorized(km_rpc_req_t *req, int32_t operation);

/* Handlers (loop), one per API: req->rq holds the decoded request. */
void km_rpc_create_mirror(km_rpc_req_t *req);
/* DescribeConfigs / IncrementalAlterConfigs of the MIRROR config resource (km_rpc_mconf.c). */
void km_rpc_describe_configs(km_rpc_req_t *req);
void km_rpc_alter_configs(km_rpc_req_t *req);
/** Answer every resource of a DescribeConfigs / IncrementalAlterConfigs request with one error
 *  (km_rpc_fail's form for those APIs, which have no top-level error). */
void km_rpc_mconf_fail(km_rpc_req_t *req, int16_t error_code, const char *msg);
void km_rpc_list_mirrors(km_rpc_req_t *req);
void km_rpc_delete_mirror(km_rpc_req_t *req);
void km_rpc_describe_mirrors(km_rpc_req_t *req);
void km_rpc_start_topics(km_rpc_req_t *req);
void km_rpc_change_topics(km_rpc_req_t *req); /* Stop, Pause, Resume */

#endif /* KM_RPC_INT_H */
