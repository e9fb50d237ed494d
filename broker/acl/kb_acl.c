/*
 * kb_acl.c -- the ACL image, Kafka's filter matching, CreateAcls validation, the operations
 * behind the ACL APIs (persist first, then apply) and the authorizer.
 *
 * The image is a plain array in creation order; the authorizer walks it under the read lock.
 * That is linear in the number of bindings, which is fine for the ACL counts a reference
 * broker sees (Kafka indexes by resource; an index can come without changing this interface).
 */
#include "kb_acl.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "kb_acl_int.h"
#include "kb_err.h"
#include "kb_log.h"
#include "kp_errcode.h"

/* ---- names ----------------------------------------------------------------------------------- */

const char *kb_acl_restype_name(int8_t v)
{
    static const char *const n[] = {
        "UNKNOWN",          "ANY",  "TOPIC",         "GROUP", "CLUSTER", "TRANSACTIONAL_ID",
        "DELEGATION_TOKEN", "USER", "CLUSTER_MIRROR"};
    return v >= 0 && (size_t)v < sizeof(n) / sizeof(n[0]) ? n[v] : "UNKNOWN";
}

const char *kb_acl_pattern_name(int8_t v)
{
    static const char *const n[] = {"UNKNOWN", "ANY", "MATCH", "LITERAL", "PREFIXED"};
    return v >= 0 && (size_t)v < sizeof(n) / sizeof(n[0]) ? n[v] : "UNKNOWN";
}

const char *kb_acl_op_name(int8_t v)
{
    static const char *const n[] = {"UNKNOWN",
                                    "ANY",
                                    "ALL",
                                    "READ",
                                    "WRITE",
                                    "CREATE",
                                    "DELETE",
                                    "ALTER",
                                    "DESCRIBE",
                                    "CLUSTER_ACTION",
                                    "DESCRIBE_CONFIGS",
                                    "ALTER_CONFIGS",
                                    "IDEMPOTENT_WRITE",
                                    "CREATE_TOKENS",
                                    "DESCRIBE_TOKENS"};
    return v >= 0 && (size_t)v < sizeof(n) / sizeof(n[0]) ? n[v] : "UNKNOWN";
}

const char *kb_acl_perm_name(int8_t v)
{
    static const char *const n[] = {"UNKNOWN", "ANY", "DENY", "ALLOW"};
    return v >= 0 && (size_t)v < sizeof(n) / sizeof(n[0]) ? n[v] : "UNKNOWN";
}

/* Codes Kafka 4.4 knows (fromCode gives UNKNOWN for the rest), plus ClusterMirror. */
static bool kb_acl_restype_known(int8_t v)
{
    return v >= KB_ACL_RES_ANY && v <= KB_ACL_RES_CLUSTER_MIRROR;
}

static bool kb_acl_pattern_known(int8_t v)
{
    return v >= KB_ACL_PAT_ANY && v <= KB_ACL_PAT_PREFIXED;
}

static bool kb_acl_op_known(int8_t v)
{
    return v >= KB_ACL_OP_ANY && v <= KB_ACL_OP_DESCRIBE_TOKENS;
}

static bool kb_acl_perm_known(int8_t v)
{
    return v >= KB_ACL_PERM_ANY && v <= KB_ACL_PERM_ALLOW;
}

/* ---- bindings -------------------------------------------------------------------------------- */

void kb_acl_binding_clear(kb_acl_binding_t *b)
{
    free(b->name);
    b->name = NULL;
    free(b->principal);
    b->principal = NULL;
    free(b->host);
    b->host = NULL;
}

int kb_acl_binding_copy(kb_acl_binding_t *dst, const kb_acl_binding_t *src)
{
    *dst = *src;
    dst->name = strdup(src->name);
    dst->principal = strdup(src->principal);
    dst->host = strdup(src->host);
    if (!dst->name || !dst->principal || !dst->host) {
        kb_acl_binding_clear(dst);
        return KB_E_NOMEM;
    }
    return 0;
}

bool kb_acl_binding_same(const kb_acl_binding_t *a, const kb_acl_binding_t *b)
{
    return a->restype == b->restype && a->pattern == b->pattern && a->op == b->op &&
           a->perm == b->perm && !strcmp(a->name, b->name) && !strcmp(a->principal, b->principal) &&
           !strcmp(a->host, b->host);
}

void kb_acl_list_free(kb_acl_list_t *l)
{
    for (size_t i = 0; i < l->cnt; i++)
        kb_acl_binding_clear(&l->v[i]);
    free(l->v);
    l->v = NULL;
    l->cnt = 0;
}

static int kb_acl_list_push(kb_acl_list_t *l, size_t *cap, const kb_acl_binding_t *b)
{
    if (l->cnt == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        kb_acl_binding_t *nv = realloc(l->v, ncap * sizeof(*nv));
        if (!nv)
            return KB_E_NOMEM;
        l->v = nv;
        *cap = ncap;
    }
    if (kb_acl_binding_copy(&l->v[l->cnt], b) != 0)
        return KB_E_NOMEM;
    l->cnt++;
    return 0;
}

/* ---- validation ------------------------------------------------------------------------------ */

/* A principal is "Type:name": a colon that is not the first character is all Kafka's parser
 * (SecurityUtils.parseKafkaPrincipal) needs; the type is what comes before the first colon. */
static bool kb_acl_principal_ok(const char *p)
{
    const char *c = p ? strchr(p, ':') : NULL;
    return c != NULL && c != p;
}

int16_t kb_acl_validate(const kb_acl_binding_t *b, char *msg, size_t msg_size)
{
    /* The broker's checks (AclApis), then the controller's (AclControlManager), in Kafka's
     * order, with Kafka's messages. */
    if (b->restype == KB_ACL_RES_CLUSTER && strcmp(b->name, KB_ACL_CLUSTER_NAME) != 0) {
        snprintf(msg, msg_size, "The only valid name for the CLUSTER resource is %s",
                 KB_ACL_CLUSTER_NAME);
        return KP_ERR_INVALID_REQUEST;
    }
    if (!b->name[0]) {
        snprintf(msg, msg_size, "Invalid empty resource name");
        return KP_ERR_INVALID_REQUEST;
    }
    if (!kb_acl_restype_known(b->restype) || b->restype == KB_ACL_RES_ANY) {
        snprintf(msg, msg_size, "Invalid resourceType %s", kb_acl_restype_name(b->restype));
        return KP_ERR_INVALID_REQUEST;
    }
    if (b->pattern != KB_ACL_PAT_LITERAL && b->pattern != KB_ACL_PAT_PREFIXED) {
        snprintf(msg, msg_size, "Invalid patternType %s", kb_acl_pattern_name(b->pattern));
        return KP_ERR_INVALID_REQUEST;
    }
    if (!kb_acl_op_known(b->op) || b->op == KB_ACL_OP_ANY) {
        snprintf(msg, msg_size, "Invalid operation %s", kb_acl_op_name(b->op));
        return KP_ERR_INVALID_REQUEST;
    }
    if (b->perm != KB_ACL_PERM_DENY && b->perm != KB_ACL_PERM_ALLOW) {
        snprintf(msg, msg_size, "Invalid permissionType %s", kb_acl_perm_name(b->perm));
        return KP_ERR_INVALID_REQUEST;
    }
    if (!kb_acl_principal_ok(b->principal)) {
        snprintf(msg, msg_size,
                 "expected a string in format principalType:principalName but got %.200s",
                 b->principal);
        return KP_ERR_INVALID_REQUEST;
    }
    if (msg_size)
        msg[0] = '\0';
    return KP_ERR_NONE;
}

/* ---- filters --------------------------------------------------------------------------------- */

bool kb_acl_filter_unknown(const kb_acl_filter_t *f, const char **what)
{
    if (!kb_acl_restype_known(f->restype) || !kb_acl_pattern_known(f->pattern)) {
        *what = "patternFilter";
        return true;
    }
    if (!kb_acl_op_known(f->op) || !kb_acl_perm_known(f->perm)) {
        *what = "entryFilter";
        return true;
    }
    return false;
}

static bool kb_acl_prefix_of(const char *prefix, const char *s)
{
    return strncmp(prefix, s, strlen(prefix)) == 0;
}

bool kb_acl_filter_matches(const kb_acl_filter_t *f, const kb_acl_binding_t *b)
{
    if (f->none)
        return false;
    /* ResourcePatternFilter */
    if (f->restype != KB_ACL_RES_ANY && f->restype != b->restype)
        return false;
    if (f->pattern != KB_ACL_PAT_ANY && f->pattern != KB_ACL_PAT_MATCH && f->pattern != b->pattern)
        return false;
    if (f->name) {
        if (f->pattern == KB_ACL_PAT_ANY || f->pattern == b->pattern) {
            if (strcmp(f->name, b->name) != 0)
                return false;
        } else if (b->pattern == KB_ACL_PAT_LITERAL) { /* MATCH against a literal binding */
            if (strcmp(f->name, b->name) != 0 && strcmp(b->name, KB_ACL_WILDCARD) != 0)
                return false;
        } else if (b->pattern == KB_ACL_PAT_PREFIXED) { /* MATCH against a prefixed binding */
            if (!kb_acl_prefix_of(b->name, f->name))
                return false;
        } else {
            return false;
        }
    }
    /* AccessControlEntryFilter */
    if (f->principal && strcmp(f->principal, b->principal) != 0)
        return false;
    if (f->host && strcmp(f->host, b->host) != 0)
        return false;
    if (f->op != KB_ACL_OP_ANY && f->op != b->op)
        return false;
    return f->perm == KB_ACL_PERM_ANY || f->perm == b->perm;
}

/* ---- life cycle ------------------------------------------------------------------------------ */

static int kb_acl_parse_super(kb_acl_t *acl, const char *s, char *errstr, size_t errstr_size)
{
    const char *p = s ? s : "";
    while (*p) {
        const char *e = strchr(p, ';');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *a = p, *z = p + n;
        char *one, **nv;
        while (a < z && isspace((unsigned char)*a))
            a++;
        while (z > a && isspace((unsigned char)z[-1]))
            z--;
        p += n + (e ? 1 : 0);
        if (a == z)
            continue;
        one = strndup(a, (size_t)(z - a));
        nv = realloc(acl->super, (acl->super_cnt + 1) * sizeof(*nv));
        if (!one || !nv) {
            free(one);
            if (nv)
                acl->super = nv;
            snprintf(errstr, errstr_size, "out of memory");
            return KB_E_NOMEM;
        }
        acl->super = nv;
        acl->super[acl->super_cnt++] = one;
        if (!kb_acl_principal_ok(one)) {
            snprintf(errstr, errstr_size,
                     "super.users: '%.200s' is not a principal (expected Type:name, e.g. "
                     "User:admin; entries are separated by ';')",
                     one);
            return KB_E_INVALID;
        }
    }
    return 0;
}

kb_acl_t *kb_acl_new(const kb_acl_opts_t *o, char *errstr, size_t errstr_size)
{
    kb_acl_t *acl = calloc(1, sizeof(*acl));
    kb_acl_list_t loaded = {0};

    if (!acl) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    acl->magic = KB_ACL_MAGIC;
    pthread_rwlock_init(&acl->rw, NULL);
    pthread_mutex_init(&acl->wmu, NULL);
    acl->enabled = o->enabled;
    acl->allow_if_no_acl = o->allow_if_no_acl;
    if (kb_acl_parse_super(acl, o->super_users, errstr, errstr_size) != 0)
        goto fail;
    if (o->dir) {
        acl->dir = strdup(o->dir);
        if (!acl->dir) {
            snprintf(errstr, errstr_size, "out of memory");
            goto fail;
        }
        if (kb_acl_store_read(acl->dir, &loaded, errstr, errstr_size) != 0)
            goto fail;
        /* The store is the image: take the bindings over. */
        acl->v = loaded.v;
        acl->cnt = acl->cap = loaded.cnt;
    }
    return acl;
fail:
    kb_acl_free(acl);
    return NULL;
}

void kb_acl_free(kb_acl_t *acl)
{
    if (!acl)
        return;
    for (size_t i = 0; i < acl->cnt; i++)
        kb_acl_binding_clear(&acl->v[i]);
    free(acl->v);
    acl->v = NULL;
    for (size_t i = 0; i < acl->super_cnt; i++)
        free(acl->super[i]);
    free(acl->super);
    acl->super = NULL;
    free(acl->dir);
    acl->dir = NULL;
    pthread_rwlock_destroy(&acl->rw);
    pthread_mutex_destroy(&acl->wmu);
    acl->magic = KB_ACL_DEAD_MAGIC;
    free(acl);
}

bool kb_acl_enabled(const kb_acl_t *acl)
{
    return acl->enabled;
}

size_t kb_acl_count(kb_acl_t *acl)
{
    size_t n;
    pthread_rwlock_rdlock(&acl->rw);
    n = acl->cnt;
    pthread_rwlock_unlock(&acl->rw);
    return n;
}

/* ---- the image ------------------------------------------------------------------------------- */

bool kb_acl_id_is_zero(const uint8_t id[16])
{
    for (int i = 0; i < 16; i++)
        if (id[i])
            return false;
    return true;
}

/* Index of the binding with @p id, or -1. rw held. */
static long kb_acl_find_id(const kb_acl_t *acl, const uint8_t id[16])
{
    for (size_t i = 0; i < acl->cnt; i++)
        if (!memcmp(acl->v[i].id, id, 16))
            return (long)i;
    return -1;
}

/* Index of a binding with the content of @p b, or -1. rw held. */
static long kb_acl_find_same(const kb_acl_t *acl, const kb_acl_binding_t *b)
{
    for (size_t i = 0; i < acl->cnt; i++)
        if (kb_acl_binding_same(&acl->v[i], b))
            return (long)i;
    return -1;
}

/* Whether @p b is something the image may hold (what CreateAcls validation lets through). */
static bool kb_acl_storable(const kb_acl_binding_t *b)
{
    char msg[8];
    return b->name && b->principal && b->host && !kb_acl_id_is_zero(b->id) &&
           kb_acl_validate(b, msg, sizeof(msg)) == KP_ERR_NONE;
}

/* Append a copy of @p b. rw held for writing. */
static int kb_acl_image_push(kb_acl_t *acl, const kb_acl_binding_t *b)
{
    if (acl->cnt == acl->cap) {
        size_t ncap = acl->cap ? acl->cap * 2 : 16;
        kb_acl_binding_t *nv = realloc(acl->v, ncap * sizeof(*nv));
        if (!nv)
            return KB_E_NOMEM;
        acl->v = nv;
        acl->cap = ncap;
    }
    if (kb_acl_binding_copy(&acl->v[acl->cnt], b) != 0)
        return KB_E_NOMEM;
    acl->cnt++;
    return 0;
}

/* Remove index @p i keeping the creation order. rw held for writing. */
static void kb_acl_image_remove_at(kb_acl_t *acl, size_t i)
{
    kb_acl_binding_clear(&acl->v[i]);
    memmove(&acl->v[i], &acl->v[i + 1], (acl->cnt - i - 1) * sizeof(acl->v[0]));
    acl->cnt--;
}

int kb_acl_apply_add(kb_acl_t *acl, const kb_acl_binding_t *b)
{
    int rc;
    if (!kb_acl_storable(b))
        return KB_E_INVALID;
    pthread_rwlock_wrlock(&acl->rw);
    if (kb_acl_find_id(acl, b->id) >= 0 || kb_acl_find_same(acl, b) >= 0)
        rc = KB_E_EXISTS;
    else
        rc = kb_acl_image_push(acl, b);
    pthread_rwlock_unlock(&acl->rw);
    return rc;
}

int kb_acl_apply_remove(kb_acl_t *acl, const uint8_t id[16])
{
    long i;
    pthread_rwlock_wrlock(&acl->rw);
    i = kb_acl_find_id(acl, id);
    if (i >= 0)
        kb_acl_image_remove_at(acl, (size_t)i);
    pthread_rwlock_unlock(&acl->rw);
    return i >= 0 ? 0 : KB_E_NOT_FOUND;
}

/* ---- describe, create, delete ---------------------------------------------------------------- */

static int kb_acl_cmp_resource(const void *pa, const void *pb)
{
    const kb_acl_binding_t *a = pa, *b = pb;
    int c;
    if (a->restype != b->restype)
        return a->restype < b->restype ? -1 : 1;
    c = strcmp(a->name, b->name);
    if (c)
        return c;
    if (a->pattern != b->pattern)
        return a->pattern < b->pattern ? -1 : 1;
    return 0;
}

typedef struct kb_acl_seq_s {
    kb_acl_binding_t b;
    size_t seq;
} kb_acl_seq_t;

/* By resource, then by position (qsort is not stable by itself). */
static int kb_acl_cmp_seq(const void *pa, const void *pb)
{
    const kb_acl_seq_t *a = pa, *b = pb;
    int c = kb_acl_cmp_resource(&a->b, &b->b);
    if (c)
        return c;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Sort @p l by resource keeping creation order within a resource. 0 or KB_E_NOMEM. */
static int kb_acl_sort_stable(kb_acl_list_t *l)
{
    kb_acl_seq_t *t = calloc(l->cnt + 1, sizeof(*t));
    if (!t)
        return KB_E_NOMEM;
    for (size_t i = 0; i < l->cnt; i++)
        t[i] = (kb_acl_seq_t){.b = l->v[i], .seq = i};
    qsort(t, l->cnt, sizeof(*t), kb_acl_cmp_seq);
    for (size_t i = 0; i < l->cnt; i++)
        l->v[i] = t[i].b;
    free(t);
    return 0;
}

int kb_acl_describe(kb_acl_t *acl, const kb_acl_filter_t *f, kb_acl_list_t *out)
{
    size_t cap = 0;
    int rc = 0;
    out->v = NULL;
    out->cnt = 0;
    pthread_rwlock_rdlock(&acl->rw);
    for (size_t i = 0; i < acl->cnt && rc == 0; i++)
        if (kb_acl_filter_matches(f, &acl->v[i]))
            rc = kb_acl_list_push(out, &cap, &acl->v[i]);
    pthread_rwlock_unlock(&acl->rw);
    if (rc) {
        kb_acl_list_free(out);
        return rc;
    }
    rc = kb_acl_sort_stable(out);
    if (rc)
        kb_acl_list_free(out);
    return rc;
}

static void kb_acl_new_id(uint8_t id[16])
{
    do {
        size_t got = 0;
        while (got < 16) {
            ssize_t n = getrandom(id + got, 16 - got, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                /* No entropy source: ids only need to be unique within this image. */
                for (size_t i = got; i < 16; i++)
                    id[i] = (uint8_t)rand();
                break;
            }
            got += (size_t)n;
        }
    } while (kb_acl_id_is_zero(id));
}

/* Persist the image minus the bindings flagged in @p drop plus @p add (n_add). acl->wmu held;
 * the image does not change meanwhile. */
static int kb_acl_persist_with(kb_acl_t *acl, const bool *drop, const kb_acl_binding_t *add,
                               size_t n_add)
{
    const kb_acl_binding_t **ptrs;
    size_t n = 0;
    int rc;
    if (!acl->dir)
        return 0;
    pthread_rwlock_rdlock(&acl->rw);
    ptrs = malloc((acl->cnt + n_add + 1) * sizeof(*ptrs));
    if (!ptrs) {
        pthread_rwlock_unlock(&acl->rw);
        return KB_E_NOMEM;
    }
    for (size_t i = 0; i < acl->cnt; i++)
        if (!drop || !drop[i])
            ptrs[n++] = &acl->v[i];
    for (size_t i = 0; i < n_add; i++)
        ptrs[n++] = &add[i];
    rc = kb_acl_store_write(acl->dir, ptrs, n);
    pthread_rwlock_unlock(&acl->rw);
    free(ptrs);
    return rc;
}

/* Room for @p extra more bindings in the image. rw held for writing. */
static int kb_acl_image_reserve(kb_acl_t *acl, size_t extra)
{
    size_t ncap = acl->cap ? acl->cap : 16;
    kb_acl_binding_t *nv;
    if (acl->cnt + extra <= acl->cap)
        return 0;
    while (ncap < acl->cnt + extra)
        ncap *= 2;
    nv = realloc(acl->v, ncap * sizeof(*nv));
    if (!nv)
        return KB_E_NOMEM;
    acl->v = nv;
    acl->cap = ncap;
    return 0;
}

int kb_acl_create(kb_acl_t *acl, const kb_acl_binding_t *v, size_t n)
{
    kb_acl_binding_t *add = calloc(n + 1, sizeof(*add));
    size_t n_add = 0;
    int rc = 0;

    if (!add)
        return KB_E_NOMEM;
    pthread_mutex_lock(&acl->wmu);
    /* Everything that can fail happens before the file is written: copies of the new bindings
     * and room in the image. Once the file is durable, applying cannot fail. */
    pthread_rwlock_rdlock(&acl->rw);
    for (size_t i = 0; i < n && rc == 0; i++) {
        bool dup = kb_acl_find_same(acl, &v[i]) >= 0;
        for (size_t k = 0; k < n_add && !dup; k++)
            dup = kb_acl_binding_same(&add[k], &v[i]);
        if (dup)
            continue;
        rc = kb_acl_binding_copy(&add[n_add], &v[i]);
        if (rc == 0)
            kb_acl_new_id(add[n_add++].id);
    }
    pthread_rwlock_unlock(&acl->rw);
    if (rc == 0 && n_add && acl->commit) {
        rc = acl->commit(acl->commit_opaque, add, n_add, NULL, 0); /* applied by the records */
        pthread_mutex_unlock(&acl->wmu);
        for (size_t i = 0; i < n_add; i++)
            kb_acl_binding_clear(&add[i]);
        free(add);
        return rc;
    }
    if (rc == 0 && n_add) {
        pthread_rwlock_wrlock(&acl->rw);
        rc = kb_acl_image_reserve(acl, n_add);
        pthread_rwlock_unlock(&acl->rw);
    }
    if (rc == 0 && n_add)
        rc = kb_acl_persist_with(acl, NULL, add, n_add);
    if (rc == 0 && n_add) {
        pthread_rwlock_wrlock(&acl->rw);
        memcpy(&acl->v[acl->cnt], add, n_add * sizeof(*add)); /* the image takes the copies */
        acl->cnt += n_add;
        pthread_rwlock_unlock(&acl->rw);
        n_add = 0;
    }
    pthread_mutex_unlock(&acl->wmu);
    for (size_t i = 0; i < n_add; i++)
        kb_acl_binding_clear(&add[i]);
    free(add);
    return rc;
}

void kb_acl_set_commit(kb_acl_t *acl, kb_acl_commit_fn *fn, void *opaque)
{
    pthread_mutex_lock(&acl->wmu);
    acl->commit = fn;
    acl->commit_opaque = opaque;
    pthread_mutex_unlock(&acl->wmu);
}

int kb_acl_all(kb_acl_t *acl, kb_acl_list_t *out)
{
    int rc = 0;
    *out = (kb_acl_list_t){0};
    pthread_rwlock_rdlock(&acl->rw);
    out->v = calloc(acl->cnt + 1, sizeof(*out->v));
    if (!out->v)
        rc = KB_E_NOMEM;
    for (size_t i = 0; rc == 0 && i < acl->cnt; i++) {
        rc = kb_acl_binding_copy(&out->v[i], &acl->v[i]);
        if (rc == 0)
            out->cnt++;
    }
    pthread_rwlock_unlock(&acl->rw);
    if (rc)
        kb_acl_list_free(out);
    return rc;
}

int kb_acl_delete(kb_acl_t *acl, const kb_acl_filter_t *f, size_t n, kb_acl_list_t *out)
{
    bool *drop = NULL;
    size_t *caps = calloc(n + 1, sizeof(*caps));
    size_t ndrop = 0;
    int rc = 0;

    for (size_t k = 0; k < n; k++)
        out[k] = (kb_acl_list_t){0};
    if (!caps)
        return KB_E_NOMEM;
    pthread_mutex_lock(&acl->wmu);
    pthread_rwlock_rdlock(&acl->rw);
    drop = calloc(acl->cnt + 1, sizeof(*drop));
    if (!drop)
        rc = KB_E_NOMEM;
    for (size_t k = 0; k < n && rc == 0; k++)
        for (size_t i = 0; i < acl->cnt && rc == 0; i++)
            if (kb_acl_filter_matches(&f[k], &acl->v[i])) {
                rc = kb_acl_list_push(&out[k], &caps[k], &acl->v[i]);
                if (!drop[i])
                    ndrop++;
                drop[i] = true;
            }
    if (rc == 0 && ndrop && acl->commit) {
        uint8_t(*ids)[16] = calloc(ndrop, sizeof(*ids));
        size_t k = 0;
        for (size_t i = 0; ids && i < acl->cnt; i++)
            if (drop[i])
                memcpy(ids[k++], acl->v[i].id, 16);
        pthread_rwlock_unlock(&acl->rw);
        rc = ids ? acl->commit(acl->commit_opaque, NULL, 0, (const uint8_t(*)[16])ids, ndrop)
                 : KB_E_NOMEM;
        free(ids);
        ndrop = 0; /* applied by the records */
    } else
        pthread_rwlock_unlock(&acl->rw);
    if (rc == 0 && ndrop)
        rc = kb_acl_persist_with(acl, drop, NULL, 0);
    if (rc == 0 && ndrop) {
        pthread_rwlock_wrlock(&acl->rw);
        for (size_t i = acl->cnt; i-- > 0;)
            if (drop[i])
                kb_acl_image_remove_at(acl, i);
        pthread_rwlock_unlock(&acl->rw);
    }
    pthread_mutex_unlock(&acl->wmu);
    if (rc)
        for (size_t k = 0; k < n; k++)
            kb_acl_list_free(&out[k]);
    free(drop);
    free(caps);
    return rc;
}

/* ---- the authorizer -------------------------------------------------------------------------- */

static bool kb_acl_resource_matches(const kb_acl_binding_t *b, int8_t restype, const char *name)
{
    if (b->restype != restype)
        return false;
    if (b->pattern == KB_ACL_PAT_LITERAL)
        return !strcmp(b->name, name) || !strcmp(b->name, KB_ACL_WILDCARD);
    return b->pattern == KB_ACL_PAT_PREFIXED && kb_acl_prefix_of(b->name, name);
}

/* Whether binding @p b's operation covers @p op. Implied operations count for ALLOW bindings
 * only: a DENY of READ does not deny DESCRIBE (Kafka's StandardAuthorizerData). */
static bool kb_acl_op_matches(const kb_acl_binding_t *b, int8_t op)
{
    if (b->op == KB_ACL_OP_ALL || b->op == op)
        return true;
    if (b->perm != KB_ACL_PERM_ALLOW)
        return false;
    if (op == KB_ACL_OP_DESCRIBE)
        return b->op == KB_ACL_OP_READ || b->op == KB_ACL_OP_WRITE || b->op == KB_ACL_OP_DELETE ||
               b->op == KB_ACL_OP_ALTER;
    if (op == KB_ACL_OP_DESCRIBE_CONFIGS)
        return b->op == KB_ACL_OP_ALTER_CONFIGS;
    return false;
}

bool kb_acl_authorize(kb_acl_t *acl, const char *principal, const char *host, int8_t op,
                      int8_t restype, const char *name)
{
    bool allowed = false, resource_acls = false, denied = false;

    if (!acl->enabled)
        return true;
    if (!principal || !name)
        return false;
    if (!strcmp(principal, KB_ACL_INTERNAL_PRINCIPAL))
        return true;
    for (size_t i = 0; i < acl->super_cnt; i++)
        if (!strcmp(acl->super[i], principal))
            return true;
    if (!kb_acl_op_known(op) || op == KB_ACL_OP_ANY || !kb_acl_restype_known(restype) ||
        restype == KB_ACL_RES_ANY)
        return false;

    pthread_rwlock_rdlock(&acl->rw);
    for (size_t i = 0; i < acl->cnt && !denied; i++) {
        const kb_acl_binding_t *b = &acl->v[i];
        if (!kb_acl_resource_matches(b, restype, name))
            continue;
        resource_acls = true;
        if (strcmp(b->principal, principal) != 0 && strcmp(b->principal, KB_ACL_WILDCARD_PRINCIPAL))
            continue;
        if (strcmp(b->host, KB_ACL_WILDCARD) != 0 && (!host || strcmp(b->host, host) != 0))
            continue;
        if (!kb_acl_op_matches(b, op))
            continue;
        if (b->perm == KB_ACL_PERM_DENY)
            denied = true;
        else
            allowed = true;
    }
    pthread_rwlock_unlock(&acl->rw);
    if (denied)
        return false;
    if (allowed)
        return true;
    return !resource_acls && acl->allow_if_no_acl;
}
