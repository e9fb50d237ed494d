/*
 * km_sync_aclplan.c - ACL binding sets, acls.include rules and the diff of one ACL sync run
 * (km_sync_aclplan.h, docs/plugin.md "ACLs").
 */
#include "sync/km_sync_aclplan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/km_mem.h"

/* ---- bindings ------------------------------------------------------------------------------ */

static int km_acl_strcmp(const char *a, const char *b)
{
    return strcmp(a != NULL ? a : "", b != NULL ? b : "");
}

int km_acl_cmp(const km_acl_t *a, const km_acl_t *b)
{
    int c;

    if (a->rtype != b->rtype)
        return a->rtype < b->rtype ? -1 : 1;
    if ((c = km_acl_strcmp(a->name, b->name)) != 0)
        return c;
    if (a->ptype != b->ptype)
        return a->ptype < b->ptype ? -1 : 1;
    if ((c = km_acl_strcmp(a->principal, b->principal)) != 0)
        return c;
    if ((c = km_acl_strcmp(a->host, b->host)) != 0)
        return c;
    if (a->op != b->op)
        return a->op < b->op ? -1 : 1;
    if (a->perm != b->perm)
        return a->perm < b->perm ? -1 : 1;
    return 0;
}

static int km_acl_qcmp(const void *a, const void *b)
{
    return km_acl_cmp(a, b);
}

static char *km_acl_strcopy(km_plugin_t *cm, const char *s, int32_t len, km_err_t *err)
{
    char *p;

    if (s == NULL || len < 0 || memchr(s, '\0', (size_t)len) != NULL) {
        *err = KM_ERR_INVALID;
        return NULL;
    }
    p = km_strndup(cm, s, (size_t)len);
    if (p == NULL)
        *err = KM_ERR_NOMEM;
    return p;
}

static void km_acl_free_one(km_plugin_t *cm, km_acl_t *b)
{
    km_free(cm, b->name);
    b->name = NULL;
    km_free(cm, b->principal);
    b->principal = NULL;
    km_free(cm, b->host);
    b->host = NULL;
}

km_err_t km_acl_set_addn(km_plugin_t *cm, km_acl_set_t *s, int8_t rtype, const char *name,
                         int32_t name_len, int8_t ptype, const char *principal,
                         int32_t principal_len, const char *host, int32_t host_len, int8_t op,
                         int8_t perm)
{
    km_acl_t b = {.rtype = rtype, .ptype = ptype, .op = op, .perm = perm};
    km_err_t err = KM_OK;

    if (s->n == s->cap) {
        size_t cap = s->cap != 0 ? s->cap * 2 : 16;
        km_acl_t *v = km_realloc(cm, s->v, cap * sizeof(*v));
        if (v == NULL)
            return KM_ERR_NOMEM;
        s->v = v;
        s->cap = cap;
    }
    b.name = km_acl_strcopy(cm, name, name_len, &err);
    if (b.name != NULL)
        b.principal = km_acl_strcopy(cm, principal, principal_len, &err);
    if (b.principal != NULL)
        b.host = km_acl_strcopy(cm, host, host_len, &err);
    if (b.host == NULL) {
        km_acl_free_one(cm, &b);
        return err;
    }
    s->v[s->n++] = b;
    return KM_OK;
}

km_err_t km_acl_set_add(km_plugin_t *cm, km_acl_set_t *s, const km_acl_t *b)
{
    if (b->name == NULL || b->principal == NULL || b->host == NULL)
        return KM_ERR_INVALID;
    return km_acl_set_addn(cm, s, b->rtype, b->name, (int32_t)strlen(b->name), b->ptype,
                           b->principal, (int32_t)strlen(b->principal), b->host,
                           (int32_t)strlen(b->host), b->op, b->perm);
}

void km_acl_set_sort(km_plugin_t *cm, km_acl_set_t *s)
{
    size_t i, w = 0;

    if (s->n < 2)
        return;
    qsort(s->v, s->n, sizeof(*s->v), km_acl_qcmp);
    for (i = 1; i < s->n; i++) {
        if (km_acl_cmp(&s->v[w], &s->v[i]) == 0)
            km_acl_free_one(cm, &s->v[i]);
        else
            s->v[++w] = s->v[i];
    }
    s->n = w + 1;
}

bool km_acl_set_has(const km_acl_set_t *s, const km_acl_t *b)
{
    return s->n != 0 && bsearch(b, s->v, s->n, sizeof(*s->v), km_acl_qcmp) != NULL;
}

bool km_acl_set_equal(const km_acl_set_t *a, const km_acl_set_t *b)
{
    size_t i;

    if (a->n != b->n)
        return false;
    for (i = 0; i < a->n; i++)
        if (km_acl_cmp(&a->v[i], &b->v[i]) != 0)
            return false;
    return true;
}

void km_acl_set_free(km_plugin_t *cm, km_acl_set_t *s)
{
    size_t i;

    for (i = 0; i < s->n; i++)
        km_acl_free_one(cm, &s->v[i]);
    km_free(cm, s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

/* ---- names of Kafka's codes ------------------------------------------------------------------ */

typedef struct km_acl_name {
    const char *name;
    int code;
} km_acl_name_t;

static const km_acl_name_t km_acl_rtypes[] = {{"TOPIC", 2},
                                              {"GROUP", 3},
                                              {"CLUSTER", 4},
                                              {"TRANSACTIONAL_ID", 5},
                                              {"DELEGATION_TOKEN", 6},
                                              {"USER", 7},
                                              {"CLUSTER_MIRROR", 8},
                                              {NULL, 0}};
static const km_acl_name_t km_acl_ops[] = {{"ALL", 2},
                                           {"READ", 3},
                                           {"WRITE", 4},
                                           {"CREATE", 5},
                                           {"DELETE", 6},
                                           {"ALTER", 7},
                                           {"DESCRIBE", 8},
                                           {"CLUSTER_ACTION", 9},
                                           {"DESCRIBE_CONFIGS", 10},
                                           {"ALTER_CONFIGS", 11},
                                           {"IDEMPOTENT_WRITE", 12},
                                           {"CREATE_TOKENS", 13},
                                           {"DESCRIBE_TOKENS", 14},
                                           {NULL, 0}};
static const km_acl_name_t km_acl_perms[] = {{"DENY", 2}, {"ALLOW", 3}, {NULL, 0}};
static const km_acl_name_t km_acl_pats[] = {{"LITERAL", 3}, {"PREFIXED", 4}, {NULL, 0}};

static int km_acl_code(const km_acl_name_t *t, const char *s, size_t len)
{
    for (; t->name != NULL; t++)
        if (strlen(t->name) == len && strncasecmp(t->name, s, len) == 0)
            return t->code;
    return -1;
}

static const char *km_acl_name(const km_acl_name_t *t, int code, char *buf, size_t size)
{
    for (; t->name != NULL; t++)
        if (t->code == code)
            return t->name;
    snprintf(buf, size, "%d", code);
    return buf;
}

void km_acl_format(const km_acl_t *b, char *buf, size_t size)
{
    char n1[8], n2[8], n3[8], n4[8];

    snprintf(buf, size, "%s:%s:%s %s@%s %s %s",
             km_acl_name(km_acl_rtypes, b->rtype, n1, sizeof(n1)),
             km_acl_name(km_acl_pats, b->ptype, n2, sizeof(n2)), b->name != NULL ? b->name : "",
             b->principal != NULL ? b->principal : "", b->host != NULL ? b->host : "",
             km_acl_name(km_acl_ops, b->op, n3, sizeof(n3)),
             km_acl_name(km_acl_perms, b->perm, n4, sizeof(n4)));
}

/* ---- rules ----------------------------------------------------------------------------------- */

/* Trim blanks around [*s, *s + *len). */
static void km_acl_trim(const char **s, size_t *len)
{
    while (*len > 0 && (**s == ' ' || **s == '\t')) {
        (*s)++;
        (*len)--;
    }
    while (*len > 0 && ((*s)[*len - 1] == ' ' || (*s)[*len - 1] == '\t'))
        (*len)--;
}

static km_err_t km_acl_rule_parse(km_plugin_t *cm, const char *text, km_acl_rule_t *r, char *why,
                                  size_t why_size)
{
    static const char *const fields[] = {"resource type", "resource name", "operation",
                                         "permission type", "principal"};
    const char *p = text, *f;
    size_t len, nf = 0;
    km_err_t err;

    r->rtype = r->op = r->perm = -1;
    r->name = NULL;
    r->principal = NULL;
    for (;;) {
        const char *semi = strchr(p, ';');
        f = p;
        len = semi != NULL ? (size_t)(semi - p) : strlen(p);
        km_acl_trim(&f, &len);
        if (nf == 5) {
            snprintf(why, why_size, "more than 5 fields");
            return KM_ERR_INVALID;
        }
        if (len == 0) {
            snprintf(why, why_size, "empty %s (use * for any)", fields[nf]);
            return KM_ERR_INVALID;
        }
        if (!(len == 1 && f[0] == '*')) {
            switch (nf) {
            case 0:
                r->rtype = km_acl_code(km_acl_rtypes, f, len);
                break;
            case 1:
                if (cm == NULL)
                    break; /* syntax only (km_acl_rules_check) */
                err = km_pattern_compile(cm, f, len, &r->name, why, why_size);
                if (err != KM_OK)
                    return err;
                break;
            case 2:
                r->op = km_acl_code(km_acl_ops, f, len);
                break;
            case 3:
                r->perm = km_acl_code(km_acl_perms, f, len);
                break;
            default:
                if (cm == NULL)
                    break;
                r->principal = km_strndup(cm, f, len);
                if (r->principal == NULL)
                    return KM_ERR_NOMEM;
                break;
            }
            if ((nf == 0 && r->rtype < 0) || (nf == 2 && r->op < 0) || (nf == 3 && r->perm < 0)) {
                snprintf(why, why_size, "unknown %s '%.*s'", fields[nf], (int)len, f);
                return KM_ERR_INVALID;
            }
        }
        nf++;
        if (semi == NULL)
            return KM_OK;
        p = semi + 1;
    }
}

static void km_acl_rule_free(km_plugin_t *cm, km_acl_rule_t *r)
{
    km_pattern_free(r->name);
    r->name = NULL;
    km_free(cm, r->principal);
    r->principal = NULL;
}

km_err_t km_acl_rules_parse(km_plugin_t *cm, const km_strlist_t *list, km_acl_rules_t *out,
                            char *errstr, size_t errstr_size)
{
    size_t i;
    char why[256];
    km_err_t err;

    out->v = NULL;
    out->n = 0;
    if (list->n == 0)
        return KM_OK;
    out->v = km_calloc(cm, list->n, sizeof(*out->v));
    if (out->v == NULL)
        return KM_ERR_NOMEM;
    for (i = 0; i < list->n; i++) {
        why[0] = '\0';
        err = km_acl_rule_parse(cm, list->v[i], &out->v[i], why, sizeof(why));
        out->n = i + 1;
        if (err != KM_OK) {
            if (err == KM_ERR_NOMEM)
                snprintf(why, sizeof(why), "out of memory");
            snprintf(errstr, errstr_size, "acls.include rule '%s': %s", list->v[i], why);
            km_acl_rules_free(cm, out);
            return err;
        }
    }
    return KM_OK;
}

km_err_t km_acl_rules_check(const km_strlist_t *list, char *errstr, size_t errstr_size)
{
    km_acl_rule_t r;
    char why[256];
    size_t i;

    for (i = 0; i < list->n; i++) {
        why[0] = '\0';
        if (km_acl_rule_parse(NULL, list->v[i], &r, why, sizeof(why)) != KM_OK) {
            snprintf(errstr, errstr_size, "acls.include rule '%s': %s", list->v[i], why);
            return KM_ERR_CONFIG;
        }
    }
    return KM_OK;
}

km_err_t km_acl_rules_match(const km_acl_rules_t *rules, const km_acl_t *b, bool *matched)
{
    size_t i;
    bool m;
    km_err_t err;

    *matched = false;
    for (i = 0; i < rules->n; i++) {
        const km_acl_rule_t *r = &rules->v[i];
        if (r->rtype >= 0 ? r->rtype != b->rtype : b->rtype == KM_ACL_RES_CLUSTER_MIRROR)
            continue;
        if (r->op >= 0 && r->op != b->op)
            continue;
        if (r->perm >= 0 && r->perm != b->perm)
            continue;
        if (r->principal != NULL && strcmp(r->principal, b->principal) != 0)
            continue;
        if (r->name != NULL) {
            err = km_pattern_match(r->name, b->name, strlen(b->name), &m);
            if (err != KM_OK)
                return err;
            if (!m)
                continue;
        }
        *matched = true;
        return KM_OK;
    }
    return KM_OK;
}

void km_acl_rules_free(km_plugin_t *cm, km_acl_rules_t *rules)
{
    size_t i;

    for (i = 0; i < rules->n; i++)
        km_acl_rule_free(cm, &rules->v[i]);
    km_free(cm, rules->v);
    rules->v = NULL;
    rules->n = 0;
}

/* ---- the diff -------------------------------------------------------------------------------- */

km_err_t km_acl_plan_make(km_plugin_t *cm, const km_acl_set_t *src, const km_acl_set_t *dst,
                          const km_acl_set_t *mem, km_acl_plan_t *plan)
{
    size_t i;
    km_err_t err = KM_OK;

    memset(plan, 0, sizeof(*plan));
    for (i = 0; i < src->n && err == KM_OK; i++)
        if (!km_acl_set_has(dst, &src->v[i]))
            err = km_acl_set_add(cm, &plan->creates, &src->v[i]);
    for (i = 0; i < mem->n && err == KM_OK; i++) {
        const km_acl_t *b = &mem->v[i];
        /* Deleted whether or not the destination lists it: the broker's image may lag a
         * CreateAcls of the previous run (an exact filter matching nothing is harmless). */
        if (!km_acl_set_has(src, b))
            err = km_acl_set_add(cm, &plan->deletes, b);
        else if (km_acl_set_has(dst, b))
            err = km_acl_set_add(cm, &plan->keep, b);
        /* else: created again above, remembered if that succeeds */
    }
    if (err != KM_OK) {
        km_acl_plan_free(cm, plan);
        return err;
    }
    /* Inputs are sorted and unique, so the outputs are already; sort anyway (cheap, and the
     * callers rely on it). */
    km_acl_set_sort(cm, &plan->creates);
    km_acl_set_sort(cm, &plan->deletes);
    km_acl_set_sort(cm, &plan->keep);
    return KM_OK;
}

km_err_t km_acl_plan_remembered(km_plugin_t *cm, const km_acl_plan_t *plan, const bool *created,
                                const bool *deleted, km_acl_set_t *out)
{
    size_t i;
    km_err_t err = KM_OK;

    memset(out, 0, sizeof(*out));
    for (i = 0; i < plan->keep.n && err == KM_OK; i++)
        err = km_acl_set_add(cm, out, &plan->keep.v[i]);
    for (i = 0; i < plan->creates.n && err == KM_OK; i++)
        if (created[i])
            err = km_acl_set_add(cm, out, &plan->creates.v[i]);
    for (i = 0; i < plan->deletes.n && err == KM_OK; i++)
        if (!deleted[i])
            err = km_acl_set_add(cm, out, &plan->deletes.v[i]);
    if (err != KM_OK) {
        km_acl_set_free(cm, out);
        return err;
    }
    km_acl_set_sort(cm, out);
    return KM_OK;
}

void km_acl_plan_free(km_plugin_t *cm, km_acl_plan_t *plan)
{
    km_acl_set_free(cm, &plan->creates);
    km_acl_set_free(cm, &plan->deletes);
    km_acl_set_free(cm, &plan->keep);
}

/* ---- the memo ----------------------------------------------------------------------------------
 */

bool km_acl_memo_add(km_plugin_t *cm, struct km_acl_memo **memo, const char *mirror)
{
    struct km_acl_memo *m = *memo;
    char **v, *s;
    size_t i;

    if (m == NULL) {
        m = *memo = km_calloc(cm, 1, sizeof(*m));
        if (m == NULL)
            return true;
    }
    for (i = 0; i < m->n; i++)
        if (strcmp(m->v[i], mirror) == 0)
            return false;
    v = km_realloc(cm, m->v, (m->n + 1) * sizeof(*v));
    if (v == NULL)
        return true;
    m->v = v;
    s = km_strdup(cm, mirror);
    if (s != NULL)
        m->v[m->n++] = s;
    return true;
}

void km_acl_memo_remove(km_plugin_t *cm, struct km_acl_memo *memo, const char *mirror)
{
    size_t i;

    for (i = 0; memo != NULL && i < memo->n; i++) {
        if (strcmp(memo->v[i], mirror) == 0) {
            km_free(cm, memo->v[i]);
            memo->v[i] = memo->v[--memo->n];
            memo->v[memo->n] = NULL;
            return;
        }
    }
}

void km_acl_memo_free(km_plugin_t *cm, struct km_acl_memo **memo)
{
    struct km_acl_memo *m = *memo;
    size_t i;

    if (m == NULL)
        return;
    for (i = 0; i < m->n; i++)
        km_free(cm, m->v[i]);
    km_free(cm, m->v);
    km_free(cm, m);
    *memo = NULL;
}
