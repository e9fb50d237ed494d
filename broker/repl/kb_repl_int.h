/*
 * kb_repl_int.h -- the replica manager's state shared by kb_repl.c (fetchers) and
 * kb_repl_wire.c (metadata listener, AlterPartition).
 */
#ifndef KB_REPL_INT_H
#define KB_REPL_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "kb_repl.h"

typedef struct kb_fetcher_s kb_fetcher_t;

struct kb_repl_s {
    pthread_mutex_t mu;
    kb_fetcher_t *fetchers;
    int32_t node_id;
    int32_t max_bytes, resp_max_bytes, wait_ms, min_bytes, backoff_ms, nfetchers;
    kb_repl_endpoint_fn *endpoint;
    void *endpoint_opaque;
    _Atomic int64_t broker_epoch;
    _Atomic uint64_t next_id;
    _Atomic uint64_t fetches, fetch_errors, bytes, truncations;
    /* kb_repl_wire.c */
    kb_meta_t *meta;
    kb_partmgr_t *pm;
    kb_meta_listener_t *listener;
    pthread_mutex_t ctrl_mu; /* ctrl_fn, ctrl_opaque */
    kb_repl_ctrl_fn *ctrl_fn;
    void *ctrl_opaque;
};

#endif /* KB_REPL_INT_H */
