/*
 * kb_aclmod.c -- the kbroker module of the ACL component.
 *
 * init: read authorizer.class.name, super.users and allow.everyone.if.no.acl.found, load
 * `<first log dir>/kbroker-acls` (a corrupt file stops the start, naming the file), register
 * DescribeAcls / CreateAcls / DeleteAcls. With broker/api the image then follows the metadata
 * log instead (kb_meta listener with snapshot; changes committed as AccessControlEntryRecords,
 * the old file migrated once on a controller node; docs/broker.md "ACLs"). fini: unlisten,
 * unregister, free. The component has no thread.
 */
#include "kb_aclmod.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_acl_api.h"
#include "kb_err.h"
#include "kb_log.h"
#include "kp_errcode.h"
#ifdef KB_HAVE_API
#include "kb_apisvc.h"
#include "kb_meta.h"
#include "kb_meta_rec.h"
#endif

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

/* ---- the metadata log (docs/design.md C2) ------------------------------------------------------
 */

/* The module's state: the image, and with broker/api the metadata it follows. */
typedef struct kb_aclmod_s {
    kb_acl_t *acl;
#ifdef KB_HAVE_API
    kb_meta_t *meta;
    kb_meta_listener_t *lis;
#endif
} kb_aclmod_t;

#ifdef KB_HAVE_API
/* The metadata's ACL records into the image (every node, the snapshot first). */
static void kb_aclmod_on_meta(void *opaque, const kb_meta_event_t *ev)
{
    kb_aclmod_t *m = opaque;
    const kb_mrec_t *r = ev->acl;
    int rc;
    if (ev->type != KB_META_EV_ACL || !r)
        return;
    if (r->type == KB_MREC_REMOVE_ACL) {
        rc = kb_acl_apply_remove(m->acl, r->acl_id.b);
    } else {
        kb_acl_binding_t b = {0};
        memcpy(b.id, r->acl_id.b, 16);
        b.restype = r->acl_restype;
        b.pattern = r->acl_pattern;
        b.op = r->acl_op;
        b.perm = r->acl_perm;
        b.name = r->acl_name;
        b.principal = r->acl_principal;
        b.host = r->acl_host;
        rc = b.name && b.principal && b.host ? kb_acl_apply_add(m->acl, &b) : KB_E_INVALID;
    }
    if (rc != 0)
        kb_log_warn("acl", "%s at metadata offset %" PRId64 " not applied: %s",
                    kb_mrec_type_name(r->type), ev->offset, kb_err_str(rc));
}

/* kb_acl_commit_fn: the records, committed (and applied through kb_aclmod_on_meta). */
static int kb_aclmod_commit(void *opaque, const kb_acl_binding_t *add, size_t nadd,
                            const uint8_t (*rm)[16], size_t nrm)
{
    kb_aclmod_t *m = opaque;
    kb_mrec_t *recs = calloc(nadd + nrm + 1, sizeof(*recs));
    char msg[256] = "";
    int16_t err;
    if (!recs)
        return KB_E_NOMEM;
    for (size_t i = 0; i < nadd; i++) {
        kb_mrec_init(&recs[i], KB_MREC_ACL);
        memcpy(recs[i].acl_id.b, add[i].id, 16);
        recs[i].acl_restype = add[i].restype;
        recs[i].acl_pattern = add[i].pattern;
        recs[i].acl_op = add[i].op;
        recs[i].acl_perm = add[i].perm;
        recs[i].acl_name = add[i].name; /* borrowed: not cleared below */
        recs[i].acl_principal = add[i].principal;
        recs[i].acl_host = add[i].host;
    }
    for (size_t i = 0; i < nrm; i++) {
        kb_mrec_init(&recs[nadd + i], KB_MREC_REMOVE_ACL);
        memcpy(recs[nadd + i].acl_id.b, rm[i], 16);
    }
    err = kb_meta_commit_records(m->meta, recs, nadd + nrm, msg, sizeof(msg));
    free(recs);
    if (err == KP_ERR_NONE)
        return 0;
    kb_log_warn("acl", "ACL change not committed: %s", msg);
    if (err == KP_ERR_NOT_CONTROLLER)
        return KB_E_STATE;
    return err == KP_ERR_UNKNOWN_SERVER_ERROR ? KB_E_NOMEM : KB_E_IO;
}

/*
 * Follow the metadata: the image becomes the metadata's ACLs. On a node that is a controller, the
 * bindings of an old `kbroker-acls` (@p old) whose ids the metadata lacks are committed once, then
 * the file is renamed `kbroker-acls.migrated`; a broker-only node leaves its file alone (its
 * ACLs are the controller's). 0 or -1 with @p errstr.
 */
static int kb_aclmod_follow(kb_aclmod_t *m, kb_broker_t *kb, const char *dir,
                            const kb_acl_list_t *old, char *errstr, size_t errstr_size)
{
    bool controller =
        kb_config_has_role(kb->cfg, "controller") || !kb_config_has_role(kb->cfg, "broker");
    kb_acl_list_t have;
    kb_acl_binding_t *todo;
    size_t ntodo = 0;
    int rc;

    m->meta = kb_apisvc_of(kb)->meta;
    m->lis = kb_meta_listen(m->meta, kb_aclmod_on_meta, m, true);
    if (!m->lis) {
        snprintf(errstr, errstr_size, "out of memory");
        return -1;
    }
    kb_acl_set_commit(m->acl, kb_aclmod_commit, m);
    if (!old->cnt)
        return 0;
    if (!controller) {
        kb_log_warn("acl", "%s/%s ignored: a broker-only node takes its ACLs from the controller",
                    dir, KB_ACL_FILE);
        return 0;
    }
    if (kb_acl_all(m->acl, &have) != 0 || !(todo = calloc(old->cnt, sizeof(*todo)))) {
        kb_acl_list_free(&have);
        snprintf(errstr, errstr_size, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < old->cnt; i++) {
        bool there = false;
        for (size_t k = 0; k < have.cnt && !there; k++)
            there = !memcmp(have.v[k].id, old->v[i].id, 16);
        if (!there)
            todo[ntodo++] = old->v[i]; /* borrowed */
    }
    rc = ntodo ? kb_aclmod_commit(m, todo, ntodo, NULL, 0) : 0;
    free(todo);
    kb_acl_list_free(&have);
    if (rc != 0) {
        snprintf(errstr, errstr_size, "cannot move the ACLs of %s/%s into the metadata log (%s)",
                 dir, KB_ACL_FILE, kb_err_str(rc));
        return -1;
    }
    {
        char from[4200], to[4300];
        snprintf(from, sizeof(from), "%s/%s", dir, KB_ACL_FILE);
        snprintf(to, sizeof(to), "%s.migrated", from);
        if (rename(from, to) != 0)
            kb_log_warn("acl", "cannot rename %s: %s (its ACLs are in the metadata log)", from,
                        strerror(errno));
        kb_log_info("acl",
                    "moved %zu ACL binding(s) of %s into the metadata log; the file is now %s",
                    ntodo, from, to);
    }
    return 0;
}
#endif

/* ---- the module ------------------------------------------------------------------------------ */

static void kb_aclmod_free(kb_aclmod_t *m)
{
#ifdef KB_HAVE_API
    if (m->lis)
        kb_meta_unlisten(m->meta, m->lis);
#endif
    kb_acl_free(m->acl);
    free(m);
}

static int kb_module_acl_init(kb_broker_t *kb, void **statep, char *errstr, size_t errstr_size)
{
    const kb_config_t *cfg = kb->cfg;
    const char *dirs = cfg->eff_log_dirs && cfg->eff_log_dirs[0] ? cfg->eff_log_dirs : ".";
    char dir[4096];
    kb_acl_opts_t o = {0};
    kb_aclmod_t *m;
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
    if (!(m = calloc(1, sizeof(*m)))) {
        snprintf(errstr, errstr_size, "out of memory");
        kb_acl_free(acl);
        return -1;
    }
#ifdef KB_HAVE_API
    {
        /* The file's bindings are only read for the migration: the image is the metadata's. */
        kb_acl_list_t old;
        if (kb_acl_all(acl, &old) != 0) {
            snprintf(errstr, errstr_size, "out of memory");
            kb_acl_free(acl);
            free(m);
            return -1;
        }
        kb_acl_free(acl);
        o.dir = NULL;
        acl = kb_acl_new(&o, errstr, errstr_size);
        m->acl = acl;
        if (!acl || kb_aclmod_follow(m, kb, dir, &old, errstr, errstr_size) != 0) {
            kb_acl_list_free(&old);
            if (m->lis)
                kb_meta_unlisten(m->meta, m->lis);
            kb_acl_free(acl);
            free(m);
            return -1;
        }
        kb_acl_list_free(&old);
    }
#endif
    m->acl = acl;
    rc = kb_acl_api_register(acl, kb->reg);
    if (rc != 0) {
        snprintf(errstr, errstr_size, "cannot register the ACL APIs (error %d)", rc);
        kb_aclmod_free(m);
        return -1;
    }
    if (kb_acl_reg_set(kb, acl) != 0) {
        snprintf(errstr, errstr_size, "too many brokers in one process");
        kb_acl_api_unregister(kb->reg);
        kb_aclmod_free(m);
        return -1;
    }
    if (o.enabled)
        kb_log_info("acl", "authorizer %s: %zu ACL bindings, %s when no ACL matches a resource",
                    cfg->authorizer_class_name, kb_acl_count(acl),
                    o.allow_if_no_acl ? "allow" : "deny");
    *statep = m;
    return 0;
}

static void kb_module_acl_fini(kb_broker_t *kb, void *state)
{
    kb_acl_reg_set(kb, NULL);
    if (!state)
        return;
    kb_acl_api_unregister(kb->reg);
    kb_aclmod_free(state);
}

const kb_module_t kb_module_acl = {
    .name = "acl",
    .init = kb_module_acl_init,
    .fini = kb_module_acl_fini,
};
