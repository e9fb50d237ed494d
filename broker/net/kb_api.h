/*
 * kb_api.h -- the request handler registry: which API keys and versions kbroker serves, and
 * the function that serves each. ApiVersions advertises exactly what is registered here.
 *
 * A handler runs on a handler thread (num.io.threads) with the request context. It either
 * answers at once (KB_API_RESPOND with a body), sends nothing (KB_API_NO_RESPONSE: acks=0
 * Produce), or defers: it calls kb_req_defer() and returns KB_API_DEFERRED, and some thread
 * later calls kb_req_complete() (long-poll Fetch, acks=all, the plugin's deferred responses).
 * Whatever the handler does, responses leave a connection in request order.
 *
 * Ordering on one connection: a handler registered without KB_API_CONCURRENT is a barrier —
 * it starts only when every earlier request of the connection has left its handler, and no
 * later request starts before it has left its own. Kafka serves one request per connection at
 * a time; the barrier keeps that guarantee for requests whose effects must not reorder
 * (Produce with idempotence, offset commits, group protocol) while letting read-only requests
 * pipelined behind each other run in parallel. Deferral counts as leaving the handler.
 *
 * @thread any; @locks the registry's rwlock (briefly). Handlers run without registry locks.
 */
#ifndef KB_API_H
#define KB_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_resp.h"

typedef struct kb_api_registry_s kb_api_registry_t;
typedef struct kb_req_s kb_req_t;

/** What a handler did with its request. */
typedef enum kb_api_result_e {
    KB_API_RESPOND = 0,     /**< *respp is the response body; the network layer owns it now */
    KB_API_NO_RESPONSE = 1, /**< nothing is sent (acks=0); later responses keep their order */
    KB_API_DEFERRED = 2,    /**< kb_req_defer() was called; kb_req_complete() follows */
    KB_API_CLOSE = 3,       /**< malformed or forbidden: close the connection (logged) */
} kb_api_result_t;

/**
 * A request handler.
 * @param opaque  as registered
 * @param req     the request; kb_req_ctx(req) has the header, body reader and arena. Valid
 *                until the handler returns, or for a deferred request until kb_req_complete().
 * @param respp   out: the response body for KB_API_RESPOND (ownership passes to the caller)
 * @thread handler
 */
typedef kb_api_result_t(kb_api_handler_fn)(void *opaque, kb_req_t *req, kb_resp_t **respp);

/** kb_api_register() flags */
#define KB_API_CONCURRENT 0x1u /**< may run alongside other requests of the same connection */
/** A broker-to-controller API (BrokerRegistration, Envelope, BumpLeaderEpochs, ...): ApiVersions
 *  advertises it only on the controller listeners, as Kafka scopes its APIs per listener, so
 *  clients never see keys they do not know (kafka-python's admin fails on unknown keys). */
#define KB_API_CONTROLLER_ONLY 0x2u

/** One registered API, as ApiVersions advertises it. */
typedef struct kb_api_range_s {
    int16_t api_key;
    int16_t min_ver;
    int16_t max_ver;
    int16_t flex_min; /**< first flexible version (from the codec), -1 none */
    const char *name; /**< codec name ("Fetch"); static */
    unsigned flags;
} kb_api_range_t;

/**
 * Name the controller listeners (comma-separated, copied; NULL or "" = none: a self-contained
 * node, which advertises no KB_API_CONTROLLER_ONLY API because no other node talks to it).
 * @return 0, KB_E_NOMEM
 * @thread any; call before the server starts
 */
int kb_api_set_controller_listeners(kb_api_registry_t *reg, const char *names);

/** Whether ApiVersions on @p listener (NULL: a connection-less local request) lists @p api. */
bool kb_api_advertised_on(kb_api_registry_t *reg, const kb_api_range_t *api, const char *listener);

/** A new empty registry, or NULL. */
kb_api_registry_t *kb_api_registry_new(void);

/** Free it. No handler may be running and no server may use it any more. */
void kb_api_registry_free(kb_api_registry_t *reg);

/**
 * Serve @p api_key versions @p min_ver..@p max_ver with @p fn.
 * The key must be known to the codec (kp_api_lookup()) and the range inside the codec's range,
 * because the network layer needs the codec to know the header layout of each version.
 * @return 0, KB_E_EXISTS (the key already has a handler), KB_E_NOT_FOUND (unknown to the
 *         codec), KB_E_RANGE (range empty or beyond the codec's), KB_E_NOMEM.
 * @thread any, also while the server runs (the plugin registers its APIs at load).
 */
int kb_api_register(kb_api_registry_t *reg, int16_t api_key, int16_t min_ver, int16_t max_ver,
                    kb_api_handler_fn *fn, void *opaque, unsigned flags);

/**
 * Stop serving @p api_key. Requests arriving afterwards close their connection, as for any
 * unknown API. Waits until no thread runs this API's handler any more (so the caller may
 * free @p opaque afterwards); must not be called from that handler. Deferred requests the
 * handler already took are not affected.
 * @return 0 or KB_E_NOT_FOUND.
 */
int kb_api_unregister(kb_api_registry_t *reg, int16_t api_key);

/** Copy the registered APIs, sorted by key, into @p out (at most @p max). Returns how many
 *  are registered (may exceed @p max). */
size_t kb_api_list(kb_api_registry_t *reg, kb_api_range_t *out, size_t max);

/** The registration of @p api_key (copied to @p out). 0 or KB_E_NOT_FOUND. */
int kb_api_get(kb_api_registry_t *reg, int16_t api_key, kb_api_range_t *out);

/* ---- used by the network layer ---- */

typedef struct kb_api_call_s {
    kb_api_handler_fn *fn;
    void *opaque;
    struct kb_api_entry_s *entry; /**< pinned while the handler runs */
} kb_api_call_t;

/** Pin the handler of @p api_key for one call. 0 or KB_E_NOT_FOUND. */
int kb_api_call_begin(kb_api_registry_t *reg, int16_t api_key, kb_api_call_t *call);
/** Unpin after the handler returned. */
void kb_api_call_end(kb_api_registry_t *reg, kb_api_call_t *call);

#endif /* KB_API_H */
