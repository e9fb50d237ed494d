/*
 * kb_replmod.c -- the kbroker module of the replica fetcher manager (kb_replmod.h).
 */
#include "kb_replmod.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kb_apilog.h"
#include "kb_apisvc.h"

typedef struct kb_replmod_s {
    const kb_broker_t *kb;
    kb_apisvc_t *svc;
    kb_repl_t *repl;
    char listener[64]; /* the inter-broker listener's name */
} kb_replmod_t;

/* ---- the per-broker registry (kb_repl_of) ---------------------------------------------------- */

static pthread_mutex_t kb_replmod_mu = PTHREAD_MUTEX_INITIALIZER;
static kb_replmod_t *kb_replmod_reg[16];

kb_repl_t *kb_repl_of(const kb_broker_t *kb)
{
    kb_repl_t *r = NULL;
    pthread_mutex_lock(&kb_replmod_mu);
    for (size_t i = 0; i < sizeof(kb_replmod_reg) / sizeof(kb_replmod_reg[0]); i++)
        if (kb_replmod_reg[i] && kb_replmod_reg[i]->kb == kb)
            r = kb_replmod_reg[i]->repl;
    pthread_mutex_unlock(&kb_replmod_mu);
    return r;
}

static int kb_replmod_reg_set(kb_replmod_t *m, bool add)
{
    int rc = add ? -1 : 0;
    pthread_mutex_lock(&kb_replmod_mu);
    for (size_t i = 0; i < sizeof(kb_replmod_reg) / sizeof(kb_replmod_reg[0]); i++) {
        if (add && !kb_replmod_reg[i]) {
            kb_replmod_reg[i] = m;
            rc = 0;
            break;
        }
        if (!add && kb_replmod_reg[i] == m)
            kb_replmod_reg[i] = NULL;
    }
    pthread_mutex_unlock(&kb_replmod_mu);
    return rc;
}

/* ---- endpoints ------------------------------------------------------------------------------ */

/* kb_repl_endpoint_fn: broker @p node_id in the cluster's broker list on the inter-broker
 * listener (fenced brokers included: a leader's fence does not stop its followers). */
static int kb_replmod_endpoint(void *opaque, int32_t node_id, char *host, size_t host_size,
                               int *port)
{
    kb_replmod_t *m = opaque;
    kb_cluster_node_t *v = NULL;
    size_t n = 0;
    int32_t ctrl = -1;
    int rc = -1;
    if (kb_apisvc_cluster(m->svc, m->listener, true, &v, &n, &ctrl) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (v[i].id == node_id && v[i].port > 0) {
            snprintf(host, host_size, "%s", v[i].host);
            *port = v[i].port;
            rc = 0;
            break;
        }
    free(v);
    return rc;
}

/* ---- the module -------------------------------------------------------------------------------
 */

static int kb_module_repl_init(kb_broker_t *kb, void **statep, char *errstr, size_t errstr_size)
{
    const kb_config_t *cfg = kb->cfg;
    kb_replmod_t *m;
    kb_repl_opts_t o = {0};

    m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(errstr, errstr_size, "out of memory");
        return -1;
    }
    m->kb = kb;
    m->svc = kb_apisvc_of(kb);
    if (!m->svc) {
        snprintf(errstr, errstr_size, "the replica fetchers need the api module");
        free(m);
        return -1;
    }
    if (cfg->inter_broker_listener_name && cfg->inter_broker_listener_name[0])
        snprintf(m->listener, sizeof(m->listener), "%s", cfg->inter_broker_listener_name);
    else if (cfg->adv_cnt > 0)
        snprintf(m->listener, sizeof(m->listener), "%s", cfg->adv[0].name);
    o.cfg = cfg;
    o.node_id = cfg->node_id;
    o.endpoint = kb_replmod_endpoint;
    o.endpoint_opaque = m;
    m->repl = kb_repl_new(&o, errstr, errstr_size);
    if (!m->repl) {
        free(m);
        return -1;
    }
    if (kb_replmod_reg_set(m, true) != 0) {
        snprintf(errstr, errstr_size, "too many brokers in one process");
        kb_repl_free(m->repl);
        free(m);
        return -1;
    }
    *statep = m;
    return 0;
}

static int kb_module_repl_start(kb_broker_t *kb, void *state)
{
    kb_replmod_t *m = state;
    (void)kb;
    if (kb_repl_watch(m->repl, m->svc->meta, m->svc->pm) != 0) {
        kb_log_error("repl", "cannot follow the metadata: out of memory");
        return -1;
    }
    return 0;
}

static void kb_module_repl_stop(kb_broker_t *kb, void *state)
{
    kb_replmod_t *m = state;
    (void)kb;
    kb_repl_unwatch(m->repl);
}

static void kb_module_repl_fini(kb_broker_t *kb, void *state)
{
    kb_replmod_t *m = state;
    (void)kb;
    if (!m)
        return;
    kb_replmod_reg_set(m, false);
    kb_repl_free(m->repl);
    free(m);
}

const kb_module_t kb_module_repl = {
    .name = "repl",
    .init = kb_module_repl_init,
    .start = kb_module_repl_start,
    .stop = kb_module_repl_stop,
    .fini = kb_module_repl_fini,
};
