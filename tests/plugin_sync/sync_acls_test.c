/*
 * sync_acls_test.c - the pure part of the ACL sync (plugin/sync/km_sync_aclplan.h): binding
 * sets (order, duplicates, refused strings), acls.include rule parsing (fields, wildcards,
 * names, errors naming the rule) and matching (regex on the whole name, CLUSTER_MIRROR only
 * when named), and the diff: source, destination and remembered sets -> creates, deletes, the
 * new remembered set after partial failures. Allocation failures leave nothing behind.
 */
#include <string.h>

#include "core/km_plugin_types.h"
#include "fakehost.h"
#include "fh_cunit.h"
#include "sync/km_sync_aclplan.h"

static fakehost_t *ta_fh;
static km_plugin_t ta_cm;

static int ta_setup(void)
{
    ta_fh = fakehost_new(NULL);
    if (ta_fh == NULL)
        return -1;
    memset(&ta_cm, 0, sizeof(ta_cm));
    ta_cm.ref.magic = KM_PLUGIN_MAGIC;
    ta_cm.ref.api = fakehost_api(ta_fh);
    ta_cm.ref.host = fakehost_host(ta_fh);
    return 0;
}

static int ta_teardown(void)
{
    char err[512] = "";
    int rc = fakehost_check_clean(ta_fh, err, sizeof(err));

    if (rc != 0)
        fprintf(stderr, "leftovers: %s\n", err);
    fakehost_free(ta_fh);
    return rc;
}

/* A binding from literals: rtype, name, ptype, principal, op, perm (host "*"). */
static km_acl_t ta_b(int rtype, const char *name, int ptype, const char *principal, int op,
                     int perm)
{
    km_acl_t b = {.rtype = (int8_t)rtype,
                  .name = (char *)(uintptr_t)name,
                  .ptype = (int8_t)ptype,
                  .principal = (char *)(uintptr_t)principal,
                  .host = (char *)(uintptr_t) "*",
                  .op = (int8_t)op,
                  .perm = (int8_t)perm};
    return b;
}

#define T_READ  3
#define T_WRITE 4
#define T_DESCR 8
#define T_ALLOW 3
#define T_DENY  2
#define T_LIT   KM_ACL_PAT_LITERAL
#define T_PRE   KM_ACL_PAT_PREFIXED

static void ta_add(km_acl_set_t *s, km_acl_t b)
{
    CU_ASSERT_EQUAL_FATAL(km_acl_set_add(&ta_cm, s, &b), KM_OK);
}

static km_strlist_t ta_list(char **v, size_t n)
{
    km_strlist_t l = {.v = v, .n = n};
    return l;
}

static km_err_t ta_parse(const char *rule, km_acl_rules_t *r, char *err, size_t err_size)
{
    char *v[1] = {(char *)(uintptr_t)rule};
    km_strlist_t l = ta_list(v, 1);

    err[0] = '\0';
    return km_acl_rules_parse(&ta_cm, &l, r, err, err_size);
}

static int ta_match(const km_acl_rules_t *r, km_acl_t b)
{
    bool m = false;
    km_err_t err = km_acl_rules_match(r, &b, &m);

    if (err != KM_OK)
        return err;
    return m ? 1 : 0;
}

static void ta_test_set(void)
{
    km_acl_set_t s = {0};
    km_acl_t b = ta_b(2, "sa-1", T_LIT, "User:alice", T_READ, T_ALLOW);
    char buf[128];

    ta_add(&s, ta_b(3, "g", T_LIT, "User:bob", T_READ, T_ALLOW));
    ta_add(&s, b);
    ta_add(&s, ta_b(2, "sa-1", T_LIT, "User:alice", T_WRITE, T_ALLOW));
    ta_add(&s, b); /* duplicate */
    ta_add(&s, ta_b(2, "sa-1", T_PRE, "User:alice", T_READ, T_ALLOW));
    ta_add(&s, ta_b(2, "sa-1", T_LIT, "User:alice", T_READ, T_DENY));
    CU_ASSERT_EQUAL(s.n, 6);
    km_acl_set_sort(&ta_cm, &s);
    CU_ASSERT_EQUAL(s.n, 5);
    CU_ASSERT_TRUE(km_acl_set_has(&s, &b));
    b.host = (char *)(uintptr_t) "10.0.0.1";
    CU_ASSERT_FALSE(km_acl_set_has(&s, &b));
    /* sorted by type first */
    CU_ASSERT_EQUAL(s.v[0].rtype, 2);
    CU_ASSERT_EQUAL(s.v[4].rtype, 3);
    km_acl_format(&s.v[4], buf, sizeof(buf));
    CU_ASSERT_STRING_EQUAL(buf, "GROUP:LITERAL:g User:bob@* READ ALLOW");
    /* NUL bytes and null strings are refused, the set unchanged */
    CU_ASSERT_EQUAL(km_acl_set_addn(&ta_cm, &s, 2, "a\0b", 3, T_LIT, "User:x", 6, "*", 1, 3, 3),
                    KM_ERR_INVALID);
    CU_ASSERT_EQUAL(km_acl_set_addn(&ta_cm, &s, 2, "ab", 2, T_LIT, NULL, -1, "*", 1, 3, 3),
                    KM_ERR_INVALID);
    CU_ASSERT_EQUAL(km_acl_set_addn(&ta_cm, &s, 2, "ab", 2, T_LIT, "User:x", 6, "*", -1, 3, 3),
                    KM_ERR_INVALID);
    CU_ASSERT_EQUAL(s.n, 5);
    km_acl_set_free(&ta_cm, &s);
    CU_ASSERT_EQUAL(s.n, 0);
}

static void ta_test_rules_parse(void)
{
    km_acl_rules_t r;
    char err[300];

    CU_ASSERT_EQUAL(ta_parse("*", &r, err, sizeof(err)), KM_OK);
    CU_ASSERT_EQUAL(r.n, 1);
    CU_ASSERT_EQUAL(r.v[0].rtype, -1);
    CU_ASSERT_PTR_NULL(r.v[0].name);
    CU_ASSERT_EQUAL(r.v[0].op, -1);
    km_acl_rules_free(&ta_cm, &r);

    CU_ASSERT_EQUAL(ta_parse(" topic ; sa-.* ;Read; allow ; User:alice", &r, err, sizeof(err)),
                    KM_OK);
    CU_ASSERT_EQUAL(r.v[0].rtype, 2);
    CU_ASSERT_PTR_NOT_NULL(r.v[0].name);
    CU_ASSERT_EQUAL(r.v[0].op, 3);
    CU_ASSERT_EQUAL(r.v[0].perm, 3);
    CU_ASSERT_STRING_EQUAL(r.v[0].principal, "User:alice");
    km_acl_rules_free(&ta_cm, &r);

    CU_ASSERT_EQUAL(ta_parse("GROUP;*;DESCRIBE_CONFIGS", &r, err, sizeof(err)), KM_OK);
    CU_ASSERT_EQUAL(r.v[0].rtype, 3);
    CU_ASSERT_PTR_NULL(r.v[0].name);
    CU_ASSERT_EQUAL(r.v[0].op, 10);
    CU_ASSERT_EQUAL(r.v[0].perm, -1);
    CU_ASSERT_PTR_NULL(r.v[0].principal);
    km_acl_rules_free(&ta_cm, &r);

    CU_ASSERT_EQUAL(ta_parse("CLUSTER_MIRROR", &r, err, sizeof(err)), KM_OK);
    CU_ASSERT_EQUAL(r.v[0].rtype, KM_ACL_RES_CLUSTER_MIRROR);
    km_acl_rules_free(&ta_cm, &r);

    /* errors name the rule and the field */
    CU_ASSERT_EQUAL(ta_parse("TOPICS;x", &r, err, sizeof(err)), KM_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "rule 'TOPICS;x'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown resource type 'TOPICS'"));
    CU_ASSERT_EQUAL(r.n, 0);
    CU_ASSERT_EQUAL(ta_parse("TOPIC;x;READS", &r, err, sizeof(err)), KM_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown operation 'READS'"));
    CU_ASSERT_EQUAL(ta_parse("TOPIC;x;READ;PERMIT", &r, err, sizeof(err)), KM_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown permission type 'PERMIT'"));
    CU_ASSERT_EQUAL(ta_parse("TOPIC;(x;READ", &r, err, sizeof(err)), KM_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "invalid regular expression"));
    CU_ASSERT_EQUAL(ta_parse("TOPIC;;READ", &r, err, sizeof(err)), KM_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "empty resource name"));
    CU_ASSERT_EQUAL(ta_parse("TOPIC;x;READ;ALLOW;User:a;extra", &r, err, sizeof(err)),
                    KM_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "more than 5 fields"));
    CU_ASSERT_EQUAL(ta_parse("TOPIC;x;READ;", &r, err, sizeof(err)), KM_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "empty permission type"));

    /* a bad rule after good ones: nothing is kept (the run syncs nothing) */
    {
        char *v[3] = {"TOPIC;sa-.*", "GROUP;sa-g", "NOPE"};
        km_strlist_t l = ta_list(v, 3);
        CU_ASSERT_EQUAL(km_acl_rules_parse(&ta_cm, &l, &r, err, sizeof(err)), KM_ERR_INVALID);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "rule 'NOPE'"));
        CU_ASSERT_EQUAL(r.n, 0);
        CU_ASSERT_PTR_NULL(r.v);
    }
    /* no rules at all: nothing selected */
    {
        km_strlist_t l = ta_list(NULL, 0);
        CU_ASSERT_EQUAL(km_acl_rules_parse(&ta_cm, &l, &r, err, sizeof(err)), KM_OK);
        CU_ASSERT_EQUAL(r.n, 0);
        CU_ASSERT_EQUAL(ta_match(&r, ta_b(2, "x", T_LIT, "User:a", T_READ, T_ALLOW)), 0);
    }
}

/* What CreateMirror checks: the syntax, not the expressions. */
static void ta_test_rules_check(void)
{
    char err[300];
    char *good[3] = {"*", "TOPIC;(x", "group;sa-.*;read;allow;User:a"};
    char *bad[2] = {"TOPIC;sa-.*", "TOPIC;x;READ;PERMIT"};
    km_strlist_t l = ta_list(good, 3);

    err[0] = '\0';
    CU_ASSERT_EQUAL(km_acl_rules_check(&l, err, sizeof(err)), KM_OK);
    l = ta_list(bad, 2);
    CU_ASSERT_EQUAL(km_acl_rules_check(&l, err, sizeof(err)), KM_ERR_CONFIG);
    CU_ASSERT_STRING_EQUAL(err, "acls.include rule 'TOPIC;x;READ;PERMIT': unknown permission "
                                "type 'PERMIT'");
    l = ta_list(NULL, 0);
    CU_ASSERT_EQUAL(km_acl_rules_check(&l, err, sizeof(err)), KM_OK);
}

static void ta_test_rules_match(void)
{
    km_acl_rules_t r;
    char err[300];
    char *v[2] = {"TOPIC;sa-.*;*;ALLOW", "GROUP;sa-g[0-9];READ;*;User:alice"};
    km_strlist_t l = ta_list(v, 2);

    CU_ASSERT_EQUAL_FATAL(km_acl_rules_parse(&ta_cm, &l, &r, err, sizeof(err)), KM_OK);
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(2, "sa-1", T_LIT, "User:x", T_WRITE, T_ALLOW)), 1);
    /* the prefixed binding's stored name is matched */
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(2, "sa-", T_PRE, "User:x", T_READ, T_ALLOW)), 1);
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(2, "sa-1", T_LIT, "User:x", T_WRITE, T_DENY)), 0);
    /* whole match only */
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(2, "xsa-1", T_LIT, "User:x", T_READ, T_ALLOW)), 0);
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(3, "sa-1", T_LIT, "User:x", T_READ, T_ALLOW)), 0);
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(3, "sa-g1", T_LIT, "User:alice", T_READ, T_ALLOW)), 1);
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(3, "sa-g1", T_LIT, "User:alice", T_READ, T_DENY)), 1);
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(3, "sa-g12", T_LIT, "User:alice", T_READ, T_ALLOW)), 0);
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(3, "sa-g1", T_LIT, "User:bob", T_READ, T_ALLOW)), 0);
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(3, "sa-g1", T_LIT, "User:alice", T_DESCR, T_ALLOW)), 0);
    km_acl_rules_free(&ta_cm, &r);

    /* "*" selects everything except the mirror's administrative ACLs */
    CU_ASSERT_EQUAL_FATAL(ta_parse("*", &r, err, sizeof(err)), KM_OK);
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(4, "kafka-cluster", T_LIT, "User:a", 7, T_ALLOW)), 1);
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(8, "m1", T_LIT, "User:a", 7, T_ALLOW)), 0);
    km_acl_rules_free(&ta_cm, &r);
    CU_ASSERT_EQUAL_FATAL(ta_parse("*;m.*", &r, err, sizeof(err)), KM_OK);
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(8, "m1", T_LIT, "User:a", 7, T_ALLOW)), 0);
    km_acl_rules_free(&ta_cm, &r);
    /* ... unless a rule names the type */
    CU_ASSERT_EQUAL_FATAL(ta_parse("CLUSTER_MIRROR;m.*", &r, err, sizeof(err)), KM_OK);
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(8, "m1", T_LIT, "User:a", 7, T_ALLOW)), 1);
    CU_ASSERT_EQUAL(ta_match(&r, ta_b(2, "m1", T_LIT, "User:a", 7, T_ALLOW)), 0);
    km_acl_rules_free(&ta_cm, &r);

    /* a runaway pattern is an error, not "no match" */
    CU_ASSERT_EQUAL_FATAL(ta_parse("TOPIC;(a+)+b", &r, err, sizeof(err)), KM_OK);
    /* 40 a's then "cb" (the 'b' is there, so only the limits stop it; util/km_pattern) */
    CU_ASSERT_EQUAL(
        ta_match(&r, ta_b(2, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaacb", T_LIT, "User:a", 3, 3)),
        KM_ERR_LIMIT);
    km_acl_rules_free(&ta_cm, &r);
}

/* The scenario of the issue, step by step: sources, destination, remembered. */
static void ta_test_diff(void)
{
    km_acl_set_t src = {0}, dst = {0}, mem = {0}, mem2 = {0};
    km_acl_plan_t plan;
    km_acl_t a = ta_b(2, "sa-1", T_LIT, "User:alice", T_READ, T_ALLOW);
    km_acl_t w = ta_b(2, "sa-1", T_LIT, "User:alice", T_WRITE, T_ALLOW);
    km_acl_t g = ta_b(3, "sa-g", T_LIT, "User:alice", T_READ, T_ALLOW);
    km_acl_t p = ta_b(2, "sa-", T_PRE, "User:bob", T_DESCR, T_ALLOW);
    km_acl_t d = ta_b(2, "sa-local", T_LIT, "User:carol", T_READ, T_ALLOW); /* dst only */
    bool ok[4] = {true, true, true, true};
    bool part[4] = {true, false, true, true};

    /* run 1: the source has a, w, g, p; the destination has d and (before the sync) p */
    ta_add(&src, a);
    ta_add(&src, w);
    ta_add(&src, g);
    ta_add(&src, p);
    ta_add(&dst, d);
    ta_add(&dst, p);
    km_acl_set_sort(&ta_cm, &src);
    km_acl_set_sort(&ta_cm, &dst);
    CU_ASSERT_EQUAL_FATAL(km_acl_plan_make(&ta_cm, &src, &dst, &mem, &plan), KM_OK);
    CU_ASSERT_EQUAL(plan.creates.n, 3); /* a, w, g; p exists already */
    CU_ASSERT_FALSE(km_acl_set_has(&plan.creates, &p));
    CU_ASSERT_EQUAL(plan.deletes.n, 0);
    CU_ASSERT_EQUAL(plan.keep.n, 0);
    /* the second creation (sorted: a READ, w WRITE, g) fails: not remembered */
    CU_ASSERT_EQUAL_FATAL(km_acl_plan_remembered(&ta_cm, &plan, part, NULL, &mem), KM_OK);
    CU_ASSERT_EQUAL(mem.n, 2);
    CU_ASSERT_TRUE(km_acl_set_has(&mem, &a));
    CU_ASSERT_FALSE(km_acl_set_has(&mem, &w));
    CU_ASSERT_TRUE(km_acl_set_has(&mem, &g));
    CU_ASSERT_FALSE(km_acl_set_has(&mem, &p)); /* present before: never remembered */
    km_acl_plan_free(&ta_cm, &plan);
    ta_add(&dst, a);
    ta_add(&dst, g);
    km_acl_set_sort(&ta_cm, &dst);

    /* run 2: w is created again; the rest stays */
    CU_ASSERT_EQUAL_FATAL(km_acl_plan_make(&ta_cm, &src, &dst, &mem, &plan), KM_OK);
    CU_ASSERT_EQUAL(plan.creates.n, 1);
    CU_ASSERT_TRUE(km_acl_set_has(&plan.creates, &w));
    CU_ASSERT_EQUAL(plan.keep.n, 2);
    CU_ASSERT_EQUAL_FATAL(km_acl_plan_remembered(&ta_cm, &plan, ok, NULL, &mem2), KM_OK);
    CU_ASSERT_EQUAL(mem2.n, 3);
    km_acl_plan_free(&ta_cm, &plan);
    km_acl_set_free(&ta_cm, &mem);
    mem = mem2;
    memset(&mem2, 0, sizeof(mem2));
    ta_add(&dst, w);
    km_acl_set_sort(&ta_cm, &dst);

    /* run 3: nothing to do, remembered unchanged */
    CU_ASSERT_EQUAL_FATAL(km_acl_plan_make(&ta_cm, &src, &dst, &mem, &plan), KM_OK);
    CU_ASSERT_EQUAL(plan.creates.n + plan.deletes.n, 0);
    CU_ASSERT_EQUAL_FATAL(km_acl_plan_remembered(&ta_cm, &plan, NULL, NULL, &mem2), KM_OK);
    CU_ASSERT_TRUE(km_acl_set_equal(&mem, &mem2));
    km_acl_set_free(&ta_cm, &mem2);
    km_acl_plan_free(&ta_cm, &plan);

    /* run 4: the source deletes w and p (p was not created by the sync) */
    km_acl_set_free(&ta_cm, &src);
    ta_add(&src, a);
    ta_add(&src, g);
    km_acl_set_sort(&ta_cm, &src);
    CU_ASSERT_EQUAL_FATAL(km_acl_plan_make(&ta_cm, &src, &dst, &mem, &plan), KM_OK);
    CU_ASSERT_EQUAL(plan.creates.n, 0);
    CU_ASSERT_EQUAL(plan.deletes.n, 1);
    CU_ASSERT_TRUE(km_acl_set_has(&plan.deletes, &w));
    CU_ASSERT_FALSE(km_acl_set_has(&plan.deletes, &p));
    CU_ASSERT_FALSE(km_acl_set_has(&plan.deletes, &d));
    {
        bool failed[1] = {false};
        /* the delete failed: still remembered, tried again next run */
        CU_ASSERT_EQUAL_FATAL(km_acl_plan_remembered(&ta_cm, &plan, NULL, failed, &mem2), KM_OK);
        CU_ASSERT_TRUE(km_acl_set_has(&mem2, &w));
        km_acl_set_free(&ta_cm, &mem2);
    }
    CU_ASSERT_EQUAL_FATAL(km_acl_plan_remembered(&ta_cm, &plan, NULL, ok, &mem2), KM_OK);
    CU_ASSERT_EQUAL(mem2.n, 2);
    CU_ASSERT_FALSE(km_acl_set_has(&mem2, &w));
    km_acl_plan_free(&ta_cm, &plan);
    km_acl_set_free(&ta_cm, &mem);
    mem = mem2;
    memset(&mem2, 0, sizeof(mem2));

    /* run 5: an operator removed g on the destination and the source deleted a: a is
     * deleted, g created again */
    km_acl_set_free(&ta_cm, &src);
    ta_add(&src, g);
    km_acl_set_sort(&ta_cm, &src);
    km_acl_set_free(&ta_cm, &dst);
    ta_add(&dst, d);
    ta_add(&dst, p);
    ta_add(&dst, a);
    km_acl_set_sort(&ta_cm, &dst);
    CU_ASSERT_EQUAL_FATAL(km_acl_plan_make(&ta_cm, &src, &dst, &mem, &plan), KM_OK);
    CU_ASSERT_EQUAL(plan.creates.n, 1);
    CU_ASSERT_TRUE(km_acl_set_has(&plan.creates, &g));
    CU_ASSERT_EQUAL(plan.deletes.n, 1);
    CU_ASSERT_TRUE(km_acl_set_has(&plan.deletes, &a));
    CU_ASSERT_EQUAL(plan.keep.n, 0);
    km_acl_plan_free(&ta_cm, &plan);

    /* a remembered binding gone from the source that the destination does not list (its image
     * may lag the creation) is deleted all the same, and forgotten once that succeeded */
    km_acl_set_free(&ta_cm, &src);
    km_acl_set_free(&ta_cm, &dst);
    CU_ASSERT_EQUAL_FATAL(km_acl_plan_make(&ta_cm, &src, &dst, &mem, &plan), KM_OK);
    CU_ASSERT_EQUAL(plan.creates.n + plan.keep.n, 0);
    CU_ASSERT_EQUAL(plan.deletes.n, 2);
    {
        bool two[2] = {true, true};
        CU_ASSERT_EQUAL_FATAL(km_acl_plan_remembered(&ta_cm, &plan, NULL, two, &mem2), KM_OK);
    }
    CU_ASSERT_EQUAL(mem2.n, 0);
    CU_ASSERT_FALSE(km_acl_set_equal(&mem, &mem2));
    km_acl_plan_free(&ta_cm, &plan);
    km_acl_set_free(&ta_cm, &mem);
    km_acl_set_free(&ta_cm, &mem2);
}

static void ta_test_nomem(void)
{
    km_acl_set_t src = {0}, dst = {0}, mem = {0};
    km_acl_plan_t plan;
    km_acl_rules_t r;
    char err[300];
    char *v[2] = {"TOPIC;sa-.*;READ;ALLOW;User:alice", "GROUP"};
    km_strlist_t l = ta_list(v, 2);
    int i, fails = 0;

    ta_add(&src, ta_b(2, "sa-1", T_LIT, "User:alice", T_READ, T_ALLOW));
    ta_add(&src, ta_b(2, "sa-2", T_LIT, "User:alice", T_READ, T_ALLOW));
    ta_add(&mem, ta_b(2, "sa-3", T_LIT, "User:alice", T_READ, T_ALLOW));
    ta_add(&dst, ta_b(2, "sa-3", T_LIT, "User:alice", T_READ, T_ALLOW));
    for (i = 1; i < 40; i++) {
        km_err_t e1, e2;
        fakehost_fail_alloc(ta_fh, i, false);
        e1 = km_acl_plan_make(&ta_cm, &src, &dst, &mem, &plan);
        if (e1 == KM_OK)
            km_acl_plan_free(&ta_cm, &plan);
        e2 = km_acl_rules_parse(&ta_cm, &l, &r, err, sizeof(err));
        if (e2 == KM_OK)
            km_acl_rules_free(&ta_cm, &r);
        fakehost_fail_alloc(ta_fh, -1, false);
        CU_ASSERT(e1 == KM_OK || e1 == KM_ERR_NOMEM);
        CU_ASSERT(e2 == KM_OK || e2 == KM_ERR_NOMEM);
        fails += e1 != KM_OK || e2 != KM_OK;
    }
    CU_ASSERT(fails > 0);
    km_acl_set_free(&ta_cm, &src);
    km_acl_set_free(&ta_cm, &dst);
    km_acl_set_free(&ta_cm, &mem);
}

static void ta_test_memo(void)
{
    struct km_acl_memo *m = NULL;

    CU_ASSERT_TRUE(km_acl_memo_add(&ta_cm, &m, "m1"));
    CU_ASSERT_FALSE(km_acl_memo_add(&ta_cm, &m, "m1"));
    CU_ASSERT_TRUE(km_acl_memo_add(&ta_cm, &m, "m2"));
    km_acl_memo_remove(&ta_cm, m, "m1");
    CU_ASSERT_TRUE(km_acl_memo_add(&ta_cm, &m, "m1")); /* logged again after a good answer */
    CU_ASSERT_FALSE(km_acl_memo_add(&ta_cm, &m, "m2"));
    km_acl_memo_remove(&ta_cm, NULL, "m1");
    km_acl_memo_free(&ta_cm, &m);
    CU_ASSERT_PTR_NULL(m);
    km_acl_memo_free(&ta_cm, &m);
}

static CU_TestInfo ta_tests[] = {
    {"SECURITY_DISABLED memo", ta_test_memo},
    {"binding sets", ta_test_set},
    {"acls.include parsing", ta_test_rules_parse},
    {"acls.include syntax check (CreateMirror)", ta_test_rules_check},
    {"acls.include matching", ta_test_rules_match},
    {"diff and remembered set", ta_test_diff},
    {"allocation failures", ta_test_nomem},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo ta_suites[] = {
    {"sync_acls", ta_setup, ta_teardown, NULL, NULL, ta_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(ta_suites);
}
