/*
 * km_rpc_types.h - the admin RPC module's state (embedded in km_plugin_t as cm->rpc).
 */
#ifndef KM_RPC_TYPES_H
#define KM_RPC_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/km_types.h"

/** Admin APIs this module serves (CreateMirror 97, ListMirrors 98, DescribeMirrors 99,
 *  StartMirrorTopics 95, StopMirrorTopics 96, PauseMirrorTopics 102, ResumeMirrorTopics 103,
 *  DeleteMirror 104). */
#define KM_RPC_NAPIS 10

typedef struct km_srcadm km_srcadm_t;

typedef struct km_rpc {
    uint32_t magic;
    km_plugin_t *cm;
    bool lock_ready;
    pthread_mutex_t lock; /* request refs, completion vs cancel */
    kbx_rpc_reg_t *regs[KM_RPC_NAPIS];
    atomic_bool stopping;      /* fini began: no new host operations */
    atomic_int async_inflight; /* host operations whose callback has not finished */
    kbx_latch_t *idle_latch;   /* set when async_inflight drops to 0 */
    km_srcadm_t *srcadm;       /* the source admin client (its own host thread) */
    uint64_t requests;         /* requests accepted (loop) */
} km_rpc_t;

#endif /* KM_RPC_TYPES_H */
