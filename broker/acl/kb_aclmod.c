/*
 * kb_aclmod.c -- the kbroker module of the ACL component.
 *
 * init: read authorizer.class.name, super.users and allow.everyone.if.no.acl.found, load
 * `<first log dir>/kbroker-acls` (a corrupt file stops the start, naming the file), register
 * DescribeAcls / CreateAcls / DeleteAcls. fini: unregister, free. Nothing runs in between:
 * the component has no thread.
 */
#include "kb_aclmod.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kb_acl_api.h"
#include "kb_log.h"

/* ---- the per-broker registry (kb_acl_of) ----------------------------------------------------- */

static pthread_mutex_t kb_acl_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const kb_broker_t *kb;
    kb_acl_t *acl;
} kb_acl_reg[16];

kb_acl_t *kb_acl_of(const kb_broker_t *kb)
{
    kb_acl_t *acl = NULL;
    pthread_mutex_lock(&kb_acl_reg_mu);
    for (size_t i = 0; i < sizeof(kb_acl_reg) / sizeof(kb_acl_reg[0]); i++)
        if (kb_acl_reg[i].kb == kb)
            acl = kb_acl_reg[i].acl;
    pthread_mutex_unlock(&kb_acl_reg_mu);
    return acl;
}

static int kb_acl_reg_set(const kb_broker_t *kb, kb_acl_t *acl)
{
    int rc = -1;
    pthread_mutex_lock(&kb_acl_reg_mu);
    for (size_t i = 0; i < sizeof(kb_acl_reg) / sizeof(kb_acl_reg[0]); i++)
        if (kb_acl_reg[i].kb == kb) {
            kb_acl_reg[i].acl = acl;
            if (!acl)
                kb_acl_reg[i].kb = NULL;
            rc = 0;
            break;
        }
    for (size_t i = 0; rc != 0 && acl && i < sizeof(kb_acl_reg) / sizeof(kb_acl_reg[0]); i++)
        if (!kb_acl_reg[i].kb) {
            kb_acl_reg[i].kb = kb;
            kb_acl_reg[i].acl = acl;
            rc = 0;
        }
    pthread_mutex_unlock(&kb_acl_reg_mu);
    return acl ? rc : 0;
}

/* ---- the module ------------------------------------------------------------------------------ */

static int kb_module_acl_init(kb_broker_t *kb, void **statep, char *errstr, size_t errstr_size)
{
    const kb_config_t *cfg = kb->cfg;
    const char *dirs = cfg->eff_log_dirs && cfg->eff_log_dirs[0] ? cfg->eff_log_dirs : ".";
    char dir[4096];
    kb_acl_opts_t o = {0};
    kb_acl_t *acl;
    int rc;

    snprintf(dir, sizeof(dir), "%.*s", (int)strcspn(dirs, ","), dirs);
    o.dir = dir;
    o.enabled = cfg->authorizer_class_name && cfg->authorizer_class_name[0];
    o.super_users = cfg->super_users;
    o.allow_if_no_acl = cfg->allow_everyone_if_no_acl_found;
    acl = kb_acl_new(&o, errstr, errstr_size);
    if (!acl)
        return -1;
    rc = kb_acl_api_register(acl, kb->reg);
    if (rc != 0) {
        snprintf(errstr, errstr_size, "cannot register the ACL APIs (error %d)", rc);
        kb_acl_free(acl);
        return -1;
    }
    if (kb_acl_reg_set(kb, acl) != 0) {
        snprintf(errstr, errstr_size, "too many brokers in one process");
        kb_acl_api_unregister(kb->reg);
        kb_acl_free(acl);
        return -1;
    }
    if (o.enabled)
        kb_log_info("acl", "authorizer %s: %zu ACL bindings, %s when no ACL matches a resource",
                    cfg->authorizer_class_name, kb_acl_count(acl),
                    o.allow_if_no_acl ? "allow" : "deny");
    *statep = acl;
    return 0;
}

static void kb_module_acl_fini(kb_broker_t *kb, void *state)
{
    kb_acl_reg_set(kb, NULL);
    if (!state)
        return;
    kb_acl_api_unregister(kb->reg);
    kb_acl_free(state);
}

const kb_module_t kb_module_acl = {
    .name = "acl",
    .init = kb_module_acl_init,
    .fini = kb_module_acl_fini,
};
