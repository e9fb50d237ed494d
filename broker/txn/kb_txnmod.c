/*
 * kb_txnmod.c -- the kbroker module of the transaction coordinator.
 *
 * init: create the coordinator on the api service (load __transaction_state), register the
 * transaction APIs (InitProducerId before the api module's start() would register its
 * provisional one) and the Produce verification hook. start: FindCoordinator if nobody else
 * serves it, complete transactions found in a Prepare state, start the timer thread.
 * stop: stop the timer. fini: unregister, free.
 */
#include "kb_txnmod.h"

#include <stdio.h>

#include "kb_txn.h"

static int kb_module_txn_init(kb_broker_t *kb, void **statep, char *errstr, size_t errstr_size)
{
    kb_apisvc_t *svc = kb_apisvc_of(kb);
    kb_txn_opts_t o = {.svc = svc, .kb = kb};
    kb_txn_t *c;
    int rc;

    if (!svc) {
        snprintf(errstr, errstr_size, "the transaction coordinator needs the api module");
        return -1;
    }
    c = kb_txn_new(&o, errstr, errstr_size);
    if (!c)
        return -1;
    rc = kb_txn_register(c, kb->reg);
    if (rc) {
        snprintf(errstr, errstr_size, "cannot register the transaction APIs (error %d)", rc);
        kb_txn_free(c);
        return -1;
    }
    *statep = c;
    return 0;
}

static int kb_module_txn_start(kb_broker_t *kb, void *state)
{
    int rc = kb_txn_register_find_coordinator(state, kb->reg);
    return rc ? rc : kb_txn_start(state);
}

static void kb_module_txn_stop(kb_broker_t *kb, void *state)
{
    (void)kb;
    kb_txn_stop(state);
}

static void kb_module_txn_fini(kb_broker_t *kb, void *state)
{
    (void)kb;
    kb_txn_free(state);
}

const kb_module_t kb_module_txn = {
    .name = "txn",
    .init = kb_module_txn_init,
    .start = kb_module_txn_start,
    .stop = kb_module_txn_stop,
    .fini = kb_module_txn_fini,
};
