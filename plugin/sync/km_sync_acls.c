/*
 * km_sync_acls.c - the ACL kind of the metadata sync (km_sync.h, docs/plugin.md "ACLs",
 * kip-1279-facts §7.6): on the mirror coordinator, per persisting run,
 *
 *   1. parse acls.include (a bad rule: the run reports it and syncs nothing);
 *   2. read SYNCED_ACLS, the bindings this mirror's sync created earlier;
 *   3. DescribeAcls (any filter) on the source; SECURITY_DISABLED (no authorizer there): skip
 *      quietly, logged once per mirror until the source answers again;
 *   4. DescribeAcls on the destination (kbx local_request);
 *   5. CreateAcls for the selected source bindings the destination lacks, DeleteAcls (one
 *      exact filter each) for remembered bindings the source no longer has or the rules no
 *      longer select, in chunks, one request at a time;
 *   6. write SYNCED_ACLS when the remembered set changed (created ones added once their
 *      creation succeeded, deleted ones dropped once their deletion succeeded).
 *
 * Bindings on the destination that the sync did not create are never deleted nor remembered.
 * One request is in flight per run at a time; every continuation runs on the coordinator loop
 * and checks km_sync_run_cancelled(). A continuation dropped by a closed queue frees the
 * context only (the scheduler frees the run).
 */
#define KM_LOG_COMPONENT "kmirror.sync"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "catalog/km_catalog.h"
#include "core/km_plugin_types.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "kp_state.h"
#include "rpc/km_rpc.h"
#include "rpc/km_srcadm.h"
#include "state/km_state.h"
#include "sync/km_sync.h"
#include "sync/km_sync_aclplan.h"
#include "util/km_log.h"
#include "util/km_mem.h"

/* Bindings per CreateAcls / DeleteAcls request (Kafka's controller takes up to 10,000). */
#define KM_SYNC_ACLS_CHUNK 500
/* Decoded answers: one arena per answer. */
#define KM_SYNC_ACLS_ARENA (16u << 20)
/* Versions: 1-3 are what kbroker and Kafka 2.8-4.x have in common for the three APIs (4.x
 * dropped 0; 2.8 tops at 2); the source's client negotiates down from 3. */
#define KM_SYNC_ACLS_VERSION 3

typedef struct km_sync_acls km_sync_acls_t;
typedef void (*km_sync_acls_cont)(km_sync_acls_t *sa, int32_t status, const uint8_t *body,
                                  size_t len);

struct km_sync_acls {
    km_sync_run_t *run;
    km_plugin_t *cm;
    km_acl_rules_t rules;
    km_acl_set_t mem; /* SYNCED_ACLS as read */
    km_acl_set_t src; /* the source's bindings the rules select */
    km_acl_set_t dst; /* every destination binding */
    km_acl_plan_t plan;
    bool *created, *deleted;
    size_t next;                     /* next index of the creates, then of the deletes */
    kp_DescribeAclsRequest_t src_rq; /* borrowed by the source admin client until its answer */
    km_sync_acls_cont cont;
};

static void km_sync_acls_describe_src(km_sync_acls_t *sa);

static void km_sync_acls_free(km_sync_acls_t *sa)
{
    km_plugin_t *cm = sa->cm;

    km_acl_rules_free(cm, &sa->rules);
    km_acl_set_free(cm, &sa->mem);
    km_acl_set_free(cm, &sa->src);
    km_acl_set_free(cm, &sa->dst);
    km_acl_plan_free(cm, &sa->plan);
    km_free(cm, sa->created);
    km_free(cm, sa->deleted);
    km_free(cm, sa);
}

static void km_sync_acls_done(km_sync_acls_t *sa)
{
    km_sync_run_t *run = sa->run;

    km_sync_acls_free(sa);
    km_sync_run_done(run);
}

/* A continuation that finds the run cancelled (or the mirror gone) ends it. */
static bool km_sync_acls_stale(km_sync_acls_t *sa)
{
    if (!km_sync_run_cancelled(sa->run) && km_sync_run_def(sa->run) != NULL)
        return false;
    km_sync_acls_done(sa);
    return true;
}

static size_t km_sync_acls_count(const bool *v, size_t n)
{
    size_t i, c = 0;

    for (i = 0; i < n; i++)
        c += v[i];
    return c;
}

/* ---- destination requests (kbx local_request through km_rpc_host_request) ------------------ */

/* km_rpc_done_fn: on the loop, or with KBX_ERR_SHUTDOWN maybe elsewhere (then: only sa). */
static void km_sync_acls_on_host(km_plugin_t *cm, void *arg, int32_t status, const uint8_t *body,
                                 size_t len)
{
    km_sync_acls_t *sa = arg;

    (void)cm;
    if (status == KBX_ERR_SHUTDOWN) {
        km_sync_acls_free(sa); /* the run is the scheduler's */
        return;
    }
    /* A cancelled run still takes the answer: what was created or deleted is remembered. */
    if (km_sync_run_def(sa->run) == NULL)
        km_sync_acls_done(sa); /* the mirror is gone, and its records with it */
    else
        sa->cont(sa, status, body, len);
}

/* Send msg (api key, desc) to this broker as the internal principal; cont gets the answer. */
static km_err_t km_sync_acls_local(km_sync_acls_t *sa, int16_t api_key, const kp_msg_desc_t *desc,
                                   const void *msg, km_sync_acls_cont cont)
{
    sa->cont = cont;
    return km_rpc_host_request(sa->cm, api_key, KM_SYNC_ACLS_VERSION, msg, desc,
                               km_sync_acls_on_host, sa);
}

static void km_sync_acls_errv(km_sync_acls_t *sa, const km_acl_t *b, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Report one failed item: a binding (b) or the run as a whole (b NULL). */
static void km_sync_acls_errv(km_sync_acls_t *sa, const km_acl_t *b, const char *fmt, ...)
{
    char item[512], msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (b != NULL)
        km_acl_format(b, item, sizeof(item));
    km_sync_run_error(sa->run, b != NULL ? item : NULL, "%s", msg);
}

static const char *km_sync_acls_errname(int16_t code)
{
    const char *n = kp_errcode_name(code);
    return n != NULL ? n : "UNKNOWN";
}

/* ---- 6. the remembered set --------------------------------------------------------------- */

static void km_sync_acls_on_put(km_plugin_t *cm, void *arg, int16_t err, const char *msg)
{
    km_sync_acls_t *sa = arg;

    (void)cm;
    if (err != 0)
        km_sync_acls_errv(sa, NULL,
                          "SYNCED_ACLS not written (%s: %s): the bindings created in this run "
                          "are not remembered",
                          km_sync_acls_errname(err), msg != NULL ? msg : "");
    km_sync_acls_done(sa);
}

static void km_sync_acls_remember(km_sync_acls_t *sa)
{
    km_plugin_t *cm = sa->cm;
    km_acl_set_t now = {0};
    kp_state_value_t v;
    kp_state_acl_t *ab = NULL;
    size_t i;
    km_err_t err;

    err = km_acl_plan_remembered(cm, &sa->plan, sa->created, sa->deleted, &now);
    if (err != KM_OK) {
        km_sync_acls_errv(sa, NULL, "out of memory: SYNCED_ACLS not updated");
        km_sync_acls_done(sa);
        return;
    }
    if (km_acl_set_equal(&now, &sa->mem)) {
        km_acl_set_free(cm, &now);
        km_sync_acls_done(sa);
        return;
    }
    kp_state_value_init(&v, KP_STATE_REC_SYNCED_ACLS);
    if (now.n > 0 && (ab = km_calloc(cm, now.n, sizeof(*ab))) == NULL) {
        km_acl_set_free(cm, &now);
        km_sync_acls_errv(sa, NULL, "out of memory: SYNCED_ACLS not updated");
        km_sync_acls_done(sa);
        return;
    }
    for (i = 0; i < now.n; i++) {
        ab[i].resource_type = now.v[i].rtype;
        ab[i].resource_name = kp_str(now.v[i].name);
        ab[i].pattern_type = now.v[i].ptype;
        ab[i].principal = kp_str(now.v[i].principal);
        ab[i].host = kp_str(now.v[i].host);
        ab[i].operation = now.v[i].op;
        ab[i].permission_type = now.v[i].perm;
    }
    v.u.acls.cnt = (int32_t)now.n;
    v.u.acls.v = ab;
    v.u.acls.update_time_ms = cm->ref.api->clock_wall_ms(cm->ref.host);
    err = km_state_put_record(cm, KP_STATE_REC_SYNCED_ACLS, sa->run->mirror, NULL, 0, &v,
                              km_sync_acls_on_put, sa);
    km_log_debug(cm, "mirror %s: ACL sync remembers %zu bindings (was %zu)", sa->run->mirror, now.n,
                 sa->mem.n);
    km_free(cm, ab);
    km_acl_set_free(cm, &now);
    if (err != KM_OK) {
        km_sync_acls_errv(sa, NULL, "SYNCED_ACLS not written: %s", km_err_str(err));
        km_sync_acls_done(sa);
    }
}

/* ---- 5. CreateAcls, then DeleteAcls ------------------------------------------------------- */

static void km_sync_acls_deletes(km_sync_acls_t *sa);

static void km_sync_acls_on_created(km_sync_acls_t *sa, int32_t status, const uint8_t *body,
                                    size_t len)
{
    size_t first = sa->next, n = sa->plan.creates.n - first, i;
    kp_CreateAclsResponse_t resp;
    kp_reader_t rd;
    kp_arena_t ar;
    bool ok = false;

    if (n > KM_SYNC_ACLS_CHUNK)
        n = KM_SYNC_ACLS_CHUNK;
    sa->next = first + n;
    kp_arena_init(&ar, KM_SYNC_ACLS_ARENA);
    kp_CreateAclsResponse_init(&resp);
    if (status != KBX_OK) {
        km_sync_acls_errv(sa, NULL,
                          "CreateAcls of %zu bindings on the destination failed (host %d)", n,
                          (int)status);
    } else {
        kp_reader_init(&rd, body, len);
        if (kp_CreateAclsResponse_decode(&rd, &ar, &resp, KM_SYNC_ACLS_VERSION) != 0 ||
            resp.Results.cnt != (int32_t)n)
            km_sync_acls_errv(sa, NULL,
                              "undecodable CreateAcls answer from the destination "
                              "(or not one result per binding)");
        else
            ok = true;
    }
    for (i = 0; ok && i < n; i++) {
        const kp_CreateAclsResponse_AclCreationResult_t *r = &resp.Results.v[i];
        if (r->ErrorCode == 0) {
            sa->created[first + i] = true;
            continue;
        }
        km_sync_acls_errv(sa, &sa->plan.creates.v[first + i], "CreateAcls: %s: %.*s",
                          km_sync_acls_errname(r->ErrorCode),
                          r->ErrorMessage.len > 0 ? (int)r->ErrorMessage.len : 0,
                          r->ErrorMessage.ptr != NULL ? r->ErrorMessage.ptr : "");
    }
    kp_arena_free(&ar);
    km_sync_acls_deletes(sa); /* more creates first if any remain (see there) */
}

static void km_sync_acls_on_deleted(km_sync_acls_t *sa, int32_t status, const uint8_t *body,
                                    size_t len)
{
    size_t first = sa->next - sa->plan.creates.n, n = sa->plan.deletes.n - first, i;
    kp_DeleteAclsResponse_t resp;
    kp_reader_t rd;
    kp_arena_t ar;
    bool ok = false;

    if (n > KM_SYNC_ACLS_CHUNK)
        n = KM_SYNC_ACLS_CHUNK;
    sa->next += n;
    kp_arena_init(&ar, KM_SYNC_ACLS_ARENA);
    kp_DeleteAclsResponse_init(&resp);
    if (status != KBX_OK) {
        km_sync_acls_errv(sa, NULL,
                          "DeleteAcls of %zu bindings on the destination failed (host %d)", n,
                          (int)status);
    } else {
        kp_reader_init(&rd, body, len);
        if (kp_DeleteAclsResponse_decode(&rd, &ar, &resp, KM_SYNC_ACLS_VERSION) != 0 ||
            resp.FilterResults.cnt != (int32_t)n)
            km_sync_acls_errv(sa, NULL,
                              "undecodable DeleteAcls answer from the destination "
                              "(or not one result per filter)");
        else
            ok = true;
    }
    for (i = 0; ok && i < n; i++) {
        const kp_DeleteAclsResponse_DeleteAclsFilterResult_t *r = &resp.FilterResults.v[i];
        /* An exact filter matching nothing (removed meanwhile) is fine: it is gone. */
        if (r->ErrorCode == 0) {
            sa->deleted[first + i] = true;
            continue;
        }
        km_sync_acls_errv(sa, &sa->plan.deletes.v[first + i], "DeleteAcls: %s: %.*s",
                          km_sync_acls_errname(r->ErrorCode),
                          r->ErrorMessage.len > 0 ? (int)r->ErrorMessage.len : 0,
                          r->ErrorMessage.ptr != NULL ? r->ErrorMessage.ptr : "");
    }
    kp_arena_free(&ar);
    km_sync_acls_deletes(sa);
}

/* Send the next chunk: creations while some remain, then deletions, then remember. */
static void km_sync_acls_deletes(km_sync_acls_t *sa)
{
    km_plugin_t *cm = sa->cm;
    size_t nc = sa->plan.creates.n, nd = sa->plan.deletes.n, n, i;
    km_err_t err;

    if (km_sync_run_cancelled(sa->run)) {
        /* What succeeded so far is remembered all the same: those bindings exist now. */
        km_sync_acls_remember(sa);
        return;
    }
    if (sa->next < nc) {
        kp_CreateAclsRequest_t rq;
        kp_CreateAclsRequest_AclCreation_t *c;

        n = nc - sa->next < KM_SYNC_ACLS_CHUNK ? nc - sa->next : KM_SYNC_ACLS_CHUNK;
        c = km_calloc(cm, n, sizeof(*c));
        if (c == NULL) {
            km_sync_acls_errv(sa, NULL, "out of memory for CreateAcls");
            km_sync_acls_remember(sa);
            return;
        }
        kp_CreateAclsRequest_init(&rq);
        for (i = 0; i < n; i++) {
            const km_acl_t *b = &sa->plan.creates.v[sa->next + i];
            kp_CreateAclsRequest_AclCreation_init(&c[i]);
            c[i].ResourceType = b->rtype;
            c[i].ResourceName = kp_str(b->name);
            c[i].ResourcePatternType = b->ptype;
            c[i].Principal = kp_str(b->principal);
            c[i].Host = kp_str(b->host);
            c[i].Operation = b->op;
            c[i].PermissionType = b->perm;
        }
        rq.Creations.cnt = (int32_t)n;
        rq.Creations.v = c;
        err = km_sync_acls_local(sa, KP_APIKEY_CreateAcls, &kp_CreateAclsRequest_desc, &rq,
                                 km_sync_acls_on_created);
        km_free(cm, c);
        if (err != KM_OK) {
            km_sync_acls_errv(sa, NULL, "CreateAcls not sent: %s", km_err_str(err));
            km_sync_acls_remember(sa);
        }
        return;
    }
    if (sa->next < nc + nd) {
        kp_DeleteAclsRequest_t rq;
        kp_DeleteAclsRequest_DeleteAclsFilter_t *f;
        size_t first = sa->next - nc;

        n = nd - first < KM_SYNC_ACLS_CHUNK ? nd - first : KM_SYNC_ACLS_CHUNK;
        f = km_calloc(cm, n, sizeof(*f));
        if (f == NULL) {
            km_sync_acls_errv(sa, NULL, "out of memory for DeleteAcls");
            km_sync_acls_remember(sa);
            return;
        }
        kp_DeleteAclsRequest_init(&rq);
        for (i = 0; i < n; i++) {
            /* Exact: every field set (pattern type LITERAL/PREFIXED matches only that). */
            const km_acl_t *b = &sa->plan.deletes.v[first + i];
            kp_DeleteAclsRequest_DeleteAclsFilter_init(&f[i]);
            f[i].ResourceTypeFilter = b->rtype;
            f[i].ResourceNameFilter = kp_str(b->name);
            f[i].PatternTypeFilter = b->ptype;
            f[i].PrincipalFilter = kp_str(b->principal);
            f[i].HostFilter = kp_str(b->host);
            f[i].Operation = b->op;
            f[i].PermissionType = b->perm;
        }
        rq.Filters.cnt = (int32_t)n;
        rq.Filters.v = f;
        err = km_sync_acls_local(sa, KP_APIKEY_DeleteAcls, &kp_DeleteAclsRequest_desc, &rq,
                                 km_sync_acls_on_deleted);
        km_free(cm, f);
        if (err != KM_OK) {
            km_sync_acls_errv(sa, NULL, "DeleteAcls not sent: %s", km_err_str(err));
            km_sync_acls_remember(sa);
        }
        return;
    }
    if (nc + nd > 0)
        km_log_info(cm, "mirror %s: ACL sync: %zu of %zu bindings created, %zu of %zu deleted",
                    sa->run->mirror, km_sync_acls_count(sa->created, nc), nc,
                    km_sync_acls_count(sa->deleted, nd), nd);
    km_sync_acls_remember(sa);
}

/* ---- 4. the destination's bindings ----------------------------------------------------------- */

/* Add every binding of a DescribeAcls answer to set (those the rules select when rules is set).
 * Bindings with null or NUL-carrying strings are reported and skipped. */
static km_err_t km_sync_acls_collect(km_sync_acls_t *sa, const kp_DescribeAclsResponse_t *resp,
                                     const km_acl_rules_t *rules, km_acl_set_t *set,
                                     const char *where)
{
    int32_t i, j;
    km_err_t err;

    for (i = 0; i < resp->Resources.cnt; i++) {
        const kp_DescribeAclsResponse_DescribeAclsResource_t *r = &resp->Resources.v[i];
        for (j = 0; j < r->Acls.cnt; j++) {
            const kp_DescribeAclsResponse_AclDescription_t *a = &r->Acls.v[j];
            bool m = true;

            err = km_acl_set_addn(sa->cm, set, r->ResourceType, r->ResourceName.ptr,
                                  r->ResourceName.len, r->PatternType, a->Principal.ptr,
                                  a->Principal.len, a->Host.ptr, a->Host.len, a->Operation,
                                  a->PermissionType);
            if (err == KM_ERR_INVALID) {
                km_sync_acls_errv(sa, NULL,
                                  "%s: a binding of resource type %d with a null or "
                                  "NUL-carrying string is skipped",
                                  where, (int)r->ResourceType);
                continue;
            }
            if (err != KM_OK)
                return err;
            if (rules == NULL)
                continue;
            err = km_acl_rules_match(rules, &set->v[set->n - 1], &m);
            if (err != KM_OK || !m) {
                if (err != KM_OK)
                    km_sync_acls_errv(sa, &set->v[set->n - 1],
                                      "acls.include cannot be matched (%s): not synced",
                                      km_err_str(err));
                set->n--;
                km_free(sa->cm, set->v[set->n].name);
                km_free(sa->cm, set->v[set->n].principal);
                km_free(sa->cm, set->v[set->n].host);
                if (err == KM_ERR_NOMEM)
                    return err;
            }
        }
    }
    km_acl_set_sort(sa->cm, set);
    return KM_OK;
}

static void km_sync_acls_on_dst(km_sync_acls_t *sa, int32_t status, const uint8_t *body, size_t len)
{
    km_plugin_t *cm = sa->cm;
    kp_DescribeAclsResponse_t resp;
    kp_reader_t rd;
    kp_arena_t ar;
    km_err_t err;

    if (km_sync_run_cancelled(sa->run)) {
        km_sync_acls_done(sa); /* nothing changed yet */
        return;
    }
    kp_arena_init(&ar, KM_SYNC_ACLS_ARENA);
    kp_DescribeAclsResponse_init(&resp);
    if (status != KBX_OK) {
        km_sync_acls_errv(sa, NULL, "DescribeAcls on the destination failed (host %d)",
                          (int)status);
        goto end;
    }
    kp_reader_init(&rd, body, len);
    if (kp_DescribeAclsResponse_decode(&rd, &ar, &resp, KM_SYNC_ACLS_VERSION) != 0) {
        km_sync_acls_errv(sa, NULL, "undecodable DescribeAcls answer from the destination");
        goto end;
    }
    if (resp.ErrorCode != 0) {
        km_sync_acls_errv(sa, NULL, "DescribeAcls on the destination: %s: %.*s%s",
                          km_sync_acls_errname(resp.ErrorCode),
                          resp.ErrorMessage.len > 0 ? (int)resp.ErrorMessage.len : 0,
                          resp.ErrorMessage.ptr != NULL ? resp.ErrorMessage.ptr : "",
                          resp.ErrorCode == KP_ERR_SECURITY_DISABLED
                              ? " (the destination needs authorizer.class.name to hold ACLs)"
                              : "");
        goto end;
    }
    err = km_sync_acls_collect(sa, &resp, NULL, &sa->dst, "destination");
    if (err == KM_OK)
        err = km_acl_plan_make(cm, &sa->src, &sa->dst, &sa->mem, &sa->plan);
    if (err == KM_OK && sa->plan.creates.n > 0 &&
        (sa->created = km_calloc(cm, sa->plan.creates.n, sizeof(bool))) == NULL)
        err = KM_ERR_NOMEM;
    if (err == KM_OK && sa->plan.deletes.n > 0 &&
        (sa->deleted = km_calloc(cm, sa->plan.deletes.n, sizeof(bool))) == NULL)
        err = KM_ERR_NOMEM;
    if (err != KM_OK) {
        km_sync_acls_errv(sa, NULL, "out of memory comparing the bindings");
        goto end;
    }
    kp_arena_free(&ar);
    sa->next = 0;
    km_sync_acls_deletes(sa);
    return;
end:
    kp_arena_free(&ar);
    km_sync_acls_done(sa);
}

/* Forget memo entries of mirrors that are gone (a mirror re-created under the name logs again). */
static void km_sync_acls_memo_prune(km_plugin_t *cm)
{
    struct km_acl_memo *m = cm->acl_memo;
    size_t i = 0;

    while (m != NULL && i < m->n) {
        if (km_catalog_mirror_find(&cm->catalog, m->v[i]) == NULL) {
            km_free(cm, m->v[i]);
            m->v[i] = m->v[--m->n]; /* the last entry moves here: look at i again */
            m->v[m->n] = NULL;
        } else {
            i++;
        }
    }
}

/* ---- 3. the source's bindings --------------------------------------------------------------- */

static void km_sync_acls_on_src(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res,
                                const uint8_t *body, size_t len)
{
    km_sync_acls_t *sa = arg;
    kp_DescribeAclsResponse_t resp;
    kp_DescribeAclsRequest_t rq;
    kp_reader_t rd;
    kp_arena_t ar;
    km_err_t err;

    if (res->err == KM_ERR_SHUTDOWN) {
        km_sync_acls_free(sa); /* maybe not on the loop: the run is the scheduler's */
        return;
    }
    if (km_sync_acls_stale(sa))
        return;
    if (res->err != KM_OK) {
        km_sync_acls_errv(sa, NULL, "DescribeAcls on the source: %s", res->errmsg);
        km_sync_acls_done(sa);
        return;
    }
    kp_arena_init(&ar, KM_SYNC_ACLS_ARENA);
    kp_DescribeAclsResponse_init(&resp);
    kp_reader_init(&rd, body, len);
    if (kp_DescribeAclsResponse_decode(&rd, &ar, &resp, res->version) != 0) {
        km_sync_acls_errv(sa, NULL, "undecodable DescribeAcls v%d answer from the source",
                          (int)res->version);
        goto end;
    }
    km_sync_acls_memo_prune(cm);
    if (resp.ErrorCode == KP_ERR_SECURITY_DISABLED) {
        if (km_acl_memo_add(cm, &cm->acl_memo, sa->run->mirror))
            km_log_info(cm,
                        "mirror %s: the source has no authorizer (DescribeAcls: "
                        "SECURITY_DISABLED): no ACLs to sync (logged once)",
                        sa->run->mirror);
        goto end;
    }
    km_acl_memo_remove(cm, cm->acl_memo, sa->run->mirror);
    if (resp.ErrorCode != 0) {
        km_sync_acls_errv(sa, NULL, "DescribeAcls on the source: %s: %.*s",
                          km_sync_acls_errname(resp.ErrorCode),
                          resp.ErrorMessage.len > 0 ? (int)resp.ErrorMessage.len : 0,
                          resp.ErrorMessage.ptr != NULL ? resp.ErrorMessage.ptr : "");
        goto end;
    }
    err = km_sync_acls_collect(sa, &resp, &sa->rules, &sa->src, "source");
    if (err != KM_OK) {
        km_sync_acls_errv(sa, NULL, "out of memory reading the source's bindings");
        goto end;
    }
    kp_arena_free(&ar);
    if (sa->src.n == 0 && sa->mem.n == 0) {
        km_sync_acls_done(sa); /* nothing to create, nothing to delete */
        return;
    }
    kp_DescribeAclsRequest_init(&rq);
    rq.ResourceTypeFilter = KM_ACL_RES_ANY;
    rq.ResourceNameFilter = KP_STR_NULL;
    rq.PatternTypeFilter = KM_ACL_PAT_ANY;
    rq.PrincipalFilter = KP_STR_NULL;
    rq.HostFilter = KP_STR_NULL;
    rq.Operation = KM_ACL_OP_ANY;
    rq.PermissionType = KM_ACL_PERM_ANY;
    err = km_sync_acls_local(sa, KP_APIKEY_DescribeAcls, &kp_DescribeAclsRequest_desc, &rq,
                             km_sync_acls_on_dst);
    if (err != KM_OK) {
        km_sync_acls_errv(sa, NULL, "DescribeAcls on the destination not sent: %s",
                          km_err_str(err));
        km_sync_acls_done(sa);
    }
    return;
end:
    kp_arena_free(&ar);
    km_sync_acls_done(sa);
}

static void km_sync_acls_describe_src(km_sync_acls_t *sa)
{
    const km_mirror_def_t *def = km_sync_run_def(sa->run);
    kp_DescribeAclsRequest_t *rq = &sa->src_rq;
    km_err_t err;

    kp_DescribeAclsRequest_init(rq);
    rq->ResourceTypeFilter = KM_ACL_RES_ANY;
    rq->ResourceNameFilter = KP_STR_NULL;
    rq->PatternTypeFilter = KM_ACL_PAT_ANY;
    rq->PrincipalFilter = KP_STR_NULL;
    rq->HostFilter = KP_STR_NULL;
    rq->Operation = KM_ACL_OP_ANY;
    rq->PermissionType = KM_ACL_PERM_ANY;
    err = km_srcadm_request(sa->cm->rpc.srcadm, &def->conf.bootstrap_servers,
                            &kp_DescribeAclsRequest_desc, KM_SYNC_ACLS_VERSION, rq,
                            def->conf.request_timeout_ms, km_sync_acls_on_src, sa);
    if (err != KM_OK) {
        km_sync_acls_errv(sa, NULL, "DescribeAcls on the source not sent: %s", km_err_str(err));
        km_sync_acls_done(sa);
    }
}

/* ---- 2. what the sync created earlier ------------------------------------------------------- */

static void km_sync_acls_on_record(km_plugin_t *cm, void *arg, int16_t err, const char *msg,
                                   const kp_state_value_t *v)
{
    km_sync_acls_t *sa = arg;
    int32_t i;

    if (km_sync_acls_stale(sa))
        return;
    if (err != 0) {
        /* Without the memory the run could delete nothing and would forget what it created:
         * better to wait for the next run. */
        km_sync_acls_errv(sa, NULL, "SYNCED_ACLS not readable (%s: %s): nothing synced",
                          km_sync_acls_errname(err), msg != NULL ? msg : "");
        km_sync_acls_done(sa);
        return;
    }
    for (i = 0; v != NULL && v->type == KP_STATE_REC_SYNCED_ACLS && i < v->u.acls.cnt; i++) {
        const kp_state_acl_t *a = &v->u.acls.v[i];
        km_err_t e = km_acl_set_addn(cm, &sa->mem, a->resource_type, a->resource_name.ptr,
                                     a->resource_name.len, a->pattern_type, a->principal.ptr,
                                     a->principal.len, a->host.ptr, a->host.len, a->operation,
                                     a->permission_type);
        if (e == KM_ERR_NOMEM) {
            km_sync_acls_errv(sa, NULL, "out of memory reading SYNCED_ACLS: nothing synced");
            km_sync_acls_done(sa);
            return;
        }
        /* KM_ERR_INVALID: a stored binding with a null string (not written by us): dropped. */
    }
    km_acl_set_sort(cm, &sa->mem);
    km_sync_acls_describe_src(sa);
}

/* ---- 1. the entry point -----------------------------------------------------------------------
 */

void km_sync_acls_run(km_sync_run_t *run)
{
    km_plugin_t *cm = run->cm;
    const km_mirror_def_t *def = km_sync_run_def(run);
    km_sync_acls_t *sa;
    char errstr[512];
    km_err_t err;

    /* Only the mirror coordinator's periodic runs: the final sync before a stop (run->topics)
     * does not include ACLs, and without persistence nothing could be deleted later. */
    if (def == NULL || !run->persist || run->topics != NULL || !def->conf_ok ||
        def->conf.acls_include.n == 0 || km_sync_run_cancelled(run)) {
        km_sync_run_done(run);
        return;
    }
    sa = km_calloc(cm, 1, sizeof(*sa));
    if (sa == NULL) {
        km_sync_run_error(run, NULL, "out of memory");
        km_sync_run_done(run);
        return;
    }
    sa->run = run;
    sa->cm = cm;
    errstr[0] = '\0';
    err = km_acl_rules_parse(cm, &def->conf.acls_include, &sa->rules, errstr, sizeof(errstr));
    if (err != KM_OK) {
        /* Nothing rather than too much: a bad rule stops the whole run. */
        km_sync_run_error(run, NULL, "%s; nothing synced",
                          err == KM_ERR_NOMEM ? "out of memory" : errstr);
        km_sync_acls_done(sa);
        return;
    }
    err = km_state_get_record(cm, KP_STATE_REC_SYNCED_ACLS, run->mirror, NULL, 0,
                              km_sync_acls_on_record, sa);
    if (err != KM_OK) {
        km_sync_run_error(run, NULL, "SYNCED_ACLS not readable: %s; nothing synced",
                          km_err_str(err));
        km_sync_acls_done(sa);
    }
}
