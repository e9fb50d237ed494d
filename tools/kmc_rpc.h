/*
 * kmc_rpc.h -- kafka-mirrors' connection to the destination cluster, over kp_client (kc_).
 *
 * The CLI drives the client on its own (main) thread: every call below submits and then runs
 * kc_client_poll() until its callback has run or the deadline passed. The connection goes to
 * the first bootstrap broker that completes the ApiVersions handshake (all are tried at once);
 * every mirror RPC then goes to that broker, which forwards what needs the controller.
 *
 * Owner: the caller owns the kmc_conn_t; response bodies are kept until kmc_conn_close() (or
 * kmc_conn_reset()), so decoded strings (views into them) stay valid until then.
 *
 * @thread every function: the CLI's main thread, which drives the client (no other thread
 * touches it).
 */
#ifndef KMC_RPC_H
#define KMC_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "kc_client.h"
#include "kmc_conf.h"
#include "kp_arena.h"
#include "kp_msg.h"

#define KMC_MAX_BOOTSTRAP 32

typedef struct kmc_body {
    struct kmc_body *next;
    size_t len;
    uint8_t data[];
} kmc_body_t;

typedef struct kmc_conn {
    kc_client_t *c;
    int32_t node;                   /**< the bootstrap node in use */
    char *addrs[KMC_MAX_BOOTSTRAP]; /**< "host:port" of each bootstrap entry */
    int naddrs;
    char addr[300]; /**< host:port of the node in use */
    int32_t request_timeout_ms;
    int32_t connect_timeout_ms;
    char last_log[512]; /**< the last warning the client logged (why a connect failed) */
    kmc_body_t *bodies; /**< response bodies, freed at close */
    kp_arena_t ar;      /**< decoded responses */
} kmc_conn_t;

/**
 * Connect: parse @p bootstrap, start the client, and wait (at most the connect timeout) for
 * the first broker to complete its handshake. Returns KMC_EXIT_OK, KMC_EXIT_USAGE (a malformed
 * bootstrap list) or KMC_EXIT_UNREACHABLE, with a message in @p errstr.
 */
int kmc_conn_open(kmc_conn_t *cn, const char *bootstrap, const kmc_client_conf_t *cc,
                  int32_t timeout_ms, char *errstr, size_t errstr_size);

/**
 * Check that the broker in use serves API @p req (version 0 of our provisional mirror RPCs).
 * Returns KMC_EXIT_OK or KMC_EXIT_UNREACHABLE with the operator's message (which key is
 * missing, and that kmirror.so must be loaded with mirror.enable=true).
 */
int kmc_conn_check_api(kmc_conn_t *cn, const kp_msg_desc_t *req, char *errstr, size_t errstr_size);

/**
 * Send @p req (a generated message, kp_<X>Request_t) and decode the answer into @p resp
 * (kp_<X>Response_t) with @p timeout_ms (<= 0: the request timeout). Returns KMC_EXIT_OK,
 * KMC_EXIT_UNREACHABLE (timeout, connection lost; the outcome of a mutation is then unknown,
 * which the message says) or KMC_EXIT_PROTOCOL (undecodable answer), with errstr.
 */
int kmc_conn_call(kmc_conn_t *cn, const kp_msg_desc_t *req_desc, const void *req,
                  const kp_msg_desc_t *resp_desc, void *resp, int32_t timeout_ms, char *errstr,
                  size_t errstr_size);

/** Wait about @p ms while keeping the client's connections serviced (retry backoff). */
void kmc_conn_wait(kmc_conn_t *cn, int ms);

/** Drop every response body and decoded answer kept so far (strings from kmc_conn_str() and
 *  decoded messages become invalid); the connection stays. For polling loops. */
void kmc_conn_reset(kmc_conn_t *cn);

void kmc_conn_close(kmc_conn_t *cn);

/** A NUL-terminated copy of @p s in the connection's arena ("" for a null string; never NULL
 *  unless out of memory). */
char *kmc_conn_str(kmc_conn_t *cn, kp_str_t s);

#endif /* KMC_RPC_H */
