/*
 * test_acl.c -- CUnit tests of broker/acl: Kafka's filter matching, CreateAcls validation, the
 * authorizer rules, the image operations, the durable store (reopen, corrupt and truncated
 * files refused), and DescribeAcls / CreateAcls / DeleteAcls round trips through the generated
 * codec against an in-process broker (tests/broker_api/kbat). Label: unit.
 */
#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kb_acl.h"
#include "kb_acl_api.h"
#include "kb_acl_mrec.h"
#include "kb_apisvc.h"
#include "kb_err.h"
#include "kb_config.h"
#include "kb_meta.h"
#include "kb_meta_rec.h"
#include "kbat.h"
#include "kp_errcode.h"
#include "kp_mrec.h"
#include "kp_msgs.h"
#include "kp_writer.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static kb_acl_binding_t B(int8_t restype, const char *name, int8_t pattern, const char *principal,
                          const char *host, int8_t op, int8_t perm)
{
    kb_acl_binding_t b = {.restype = restype,
                          .pattern = pattern,
                          .op = op,
                          .perm = perm,
                          .name = (char *)name,
                          .principal = (char *)principal,
                          .host = (char *)host};
    return b;
}

static kb_acl_filter_t F_ANY(void)
{
    return (kb_acl_filter_t){.restype = KB_ACL_RES_ANY,
                             .pattern = KB_ACL_PAT_ANY,
                             .op = KB_ACL_OP_ANY,
                             .perm = KB_ACL_PERM_ANY};
}

static kb_acl_t *mem_acl(bool enabled, const char *super, bool allow_if_none)
{
    char err[256] = "";
    kb_acl_opts_t o = {
        .dir = NULL, .enabled = enabled, .super_users = super, .allow_if_no_acl = allow_if_none};
    kb_acl_t *acl = kb_acl_new(&o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(acl);
    return acl;
}

static void add(kb_acl_t *acl, kb_acl_binding_t b)
{
    CU_ASSERT_EQUAL(kb_acl_create(acl, &b, 1), 0);
}

#define AZ(acl, pr, host, op, rt, name) kb_acl_authorize(acl, pr, host, op, rt, name)

/* ---- filters --------------------------------------------------------------------------------- */

static void test_filter_resource(void)
{
    kb_acl_binding_t lit = B(KB_ACL_RES_TOPIC, "orders", KB_ACL_PAT_LITERAL, "User:a", "*",
                             KB_ACL_OP_READ, KB_ACL_PERM_ALLOW);
    kb_acl_binding_t star = B(KB_ACL_RES_TOPIC, "*", KB_ACL_PAT_LITERAL, "User:a", "*",
                              KB_ACL_OP_READ, KB_ACL_PERM_ALLOW);
    kb_acl_binding_t pre = B(KB_ACL_RES_TOPIC, "ord", KB_ACL_PAT_PREFIXED, "User:a", "*",
                             KB_ACL_OP_READ, KB_ACL_PERM_ALLOW);
    kb_acl_filter_t f = F_ANY();

    /* ANY with a null name matches everything of any type */
    CU_ASSERT(kb_acl_filter_matches(&f, &lit));
    CU_ASSERT(kb_acl_filter_matches(&f, &pre));
    /* resource type */
    f.restype = KB_ACL_RES_GROUP;
    CU_ASSERT(!kb_acl_filter_matches(&f, &lit));
    f.restype = KB_ACL_RES_TOPIC;
    CU_ASSERT(kb_acl_filter_matches(&f, &lit));
    /* ANY + name: exact name, any pattern type */
    f.name = "orders";
    CU_ASSERT(kb_acl_filter_matches(&f, &lit));
    CU_ASSERT(!kb_acl_filter_matches(&f, &star));
    CU_ASSERT(!kb_acl_filter_matches(&f, &pre));
    f.name = "ord";
    CU_ASSERT(kb_acl_filter_matches(&f, &pre));
    /* LITERAL / PREFIXED: that pattern type only, exact name */
    f.pattern = KB_ACL_PAT_LITERAL;
    f.name = "orders";
    CU_ASSERT(kb_acl_filter_matches(&f, &lit));
    CU_ASSERT(!kb_acl_filter_matches(&f, &star));
    f.name = NULL;
    CU_ASSERT(kb_acl_filter_matches(&f, &star));
    CU_ASSERT(!kb_acl_filter_matches(&f, &pre));
    f.pattern = KB_ACL_PAT_PREFIXED;
    f.name = "ord";
    CU_ASSERT(kb_acl_filter_matches(&f, &pre));
    f.name = "orders";
    CU_ASSERT(!kb_acl_filter_matches(&f, &pre));
    /* MATCH: the bindings that would apply to the literal resource "orders" */
    f.pattern = KB_ACL_PAT_MATCH;
    f.name = "orders";
    CU_ASSERT(kb_acl_filter_matches(&f, &lit));
    CU_ASSERT(kb_acl_filter_matches(&f, &star));
    CU_ASSERT(kb_acl_filter_matches(&f, &pre));
    f.name = "or";
    CU_ASSERT(!kb_acl_filter_matches(&f, &lit));
    CU_ASSERT(kb_acl_filter_matches(&f, &star));
    CU_ASSERT(!kb_acl_filter_matches(&f, &pre)); /* "ord" is not a prefix of "or" */
    f.name = "*";
    CU_ASSERT(kb_acl_filter_matches(&f, &star));
    CU_ASSERT(!kb_acl_filter_matches(&f, &lit));
    f.name = NULL; /* MATCH without a name: every pattern type */
    CU_ASSERT(kb_acl_filter_matches(&f, &lit) && kb_acl_filter_matches(&f, &pre));
    /* none */
    f = F_ANY();
    f.none = true;
    CU_ASSERT(!kb_acl_filter_matches(&f, &lit));
}

static void test_filter_entry(void)
{
    kb_acl_binding_t b = B(KB_ACL_RES_GROUP, "g", KB_ACL_PAT_LITERAL, "User:alice", "10.0.0.1",
                           KB_ACL_OP_READ, KB_ACL_PERM_DENY);
    kb_acl_filter_t f = F_ANY();
    const char *what = NULL;

    f.principal = "User:alice";
    CU_ASSERT(kb_acl_filter_matches(&f, &b));
    f.principal = "User:*"; /* filters compare text: no wildcard expansion */
    CU_ASSERT(!kb_acl_filter_matches(&f, &b));
    f.principal = NULL;
    f.host = "10.0.0.1";
    CU_ASSERT(kb_acl_filter_matches(&f, &b));
    f.host = "*";
    CU_ASSERT(!kb_acl_filter_matches(&f, &b));
    f.host = NULL;
    f.op = KB_ACL_OP_READ;
    CU_ASSERT(kb_acl_filter_matches(&f, &b));
    f.op = KB_ACL_OP_ALL; /* ALL in a filter is the operation ALL, not "any" */
    CU_ASSERT(!kb_acl_filter_matches(&f, &b));
    f.op = KB_ACL_OP_ANY;
    f.perm = KB_ACL_PERM_DENY;
    CU_ASSERT(kb_acl_filter_matches(&f, &b));
    f.perm = KB_ACL_PERM_ALLOW;
    CU_ASSERT(!kb_acl_filter_matches(&f, &b));

    f = F_ANY();
    CU_ASSERT(!kb_acl_filter_unknown(&f, &what));
    f.pattern = KB_ACL_PAT_UNKNOWN;
    CU_ASSERT(kb_acl_filter_unknown(&f, &what));
    CU_ASSERT_STRING_EQUAL(what, "patternFilter");
    f = F_ANY();
    f.restype = 9; /* unknown to Kafka and to us */
    CU_ASSERT(kb_acl_filter_unknown(&f, &what));
    f = F_ANY();
    f.restype = KB_ACL_RES_CLUSTER_MIRROR;
    CU_ASSERT(!kb_acl_filter_unknown(&f, &what));
    f = F_ANY();
    f.perm = 4;
    CU_ASSERT(kb_acl_filter_unknown(&f, &what));
    CU_ASSERT_STRING_EQUAL(what, "entryFilter");
    f = F_ANY();
    f.op = 15;
    CU_ASSERT(kb_acl_filter_unknown(&f, &what));
}

/* ---- validation ------------------------------------------------------------------------------ */

static void test_validate(void)
{
    static const struct {
        kb_acl_binding_t b;
        const char *msg;
    } cases[] = {
        {{.restype = 4,
          .pattern = 3,
          .op = 9,
          .perm = 3,
          .name = "c",
          .principal = "User:a",
          .host = "*"},
         "The only valid name for the CLUSTER resource is kafka-cluster"},
        {{.restype = 2,
          .pattern = 3,
          .op = 3,
          .perm = 3,
          .name = "",
          .principal = "User:a",
          .host = "*"},
         "Invalid empty resource name"},
        {{.restype = 1,
          .pattern = 3,
          .op = 3,
          .perm = 3,
          .name = "t",
          .principal = "User:a",
          .host = "*"},
         "Invalid resourceType ANY"},
        {{.restype = 0,
          .pattern = 3,
          .op = 3,
          .perm = 3,
          .name = "t",
          .principal = "User:a",
          .host = "*"},
         "Invalid resourceType UNKNOWN"},
        {{.restype = 42,
          .pattern = 3,
          .op = 3,
          .perm = 3,
          .name = "t",
          .principal = "User:a",
          .host = "*"},
         "Invalid resourceType UNKNOWN"},
        {{.restype = 2,
          .pattern = 2,
          .op = 3,
          .perm = 3,
          .name = "t",
          .principal = "User:a",
          .host = "*"},
         "Invalid patternType MATCH"},
        {{.restype = 2,
          .pattern = 1,
          .op = 3,
          .perm = 3,
          .name = "t",
          .principal = "User:a",
          .host = "*"},
         "Invalid patternType ANY"},
        {{.restype = 2,
          .pattern = 3,
          .op = 1,
          .perm = 3,
          .name = "t",
          .principal = "User:a",
          .host = "*"},
         "Invalid operation ANY"},
        {{.restype = 2,
          .pattern = 3,
          .op = 0,
          .perm = 3,
          .name = "t",
          .principal = "User:a",
          .host = "*"},
         "Invalid operation UNKNOWN"},
        {{.restype = 2,
          .pattern = 3,
          .op = 3,
          .perm = 1,
          .name = "t",
          .principal = "User:a",
          .host = "*"},
         "Invalid permissionType ANY"},
        {{.restype = 2,
          .pattern = 3,
          .op = 3,
          .perm = 3,
          .name = "t",
          .principal = "alice",
          .host = "*"},
         "expected a string in format principalType:principalName but got alice"},
        {{.restype = 2,
          .pattern = 3,
          .op = 3,
          .perm = 3,
          .name = "t",
          .principal = ":alice",
          .host = "*"},
         "expected a string in format principalType:principalName but got :alice"},
    };
    char msg[300];
    kb_acl_binding_t ok = B(KB_ACL_RES_CLUSTER, "kafka-cluster", KB_ACL_PAT_LITERAL, "Group:ops",
                            "*", KB_ACL_OP_ALTER, KB_ACL_PERM_ALLOW);

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CU_ASSERT_EQUAL(kb_acl_validate(&cases[i].b, msg, sizeof(msg)), KP_ERR_INVALID_REQUEST);
        CU_ASSERT_STRING_EQUAL(msg, cases[i].msg);
    }
    CU_ASSERT_EQUAL(kb_acl_validate(&ok, msg, sizeof(msg)), KP_ERR_NONE);
    ok.restype = KB_ACL_RES_CLUSTER_MIRROR;
    ok.name = "m1";
    ok.pattern = KB_ACL_PAT_PREFIXED;
    CU_ASSERT_EQUAL(kb_acl_validate(&ok, msg, sizeof(msg)), KP_ERR_NONE);
}

/* ---- authorizer ------------------------------------------------------------------------------ */

static void test_authz_disabled_internal_super(void)
{
    kb_acl_t *acl = mem_acl(false, NULL, false);
    CU_ASSERT(AZ(acl, "User:x", "1.2.3.4", KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "t"));
    kb_acl_free(acl);

    acl = mem_acl(true, " User:admin ; ;User:ops;", false);
    add(acl, B(KB_ACL_RES_TOPIC, "t", KB_ACL_PAT_LITERAL, "User:admin", "*", KB_ACL_OP_ALL,
               KB_ACL_PERM_DENY));
    /* super users pass even a DENY; the internal principal too */
    CU_ASSERT(AZ(acl, "User:admin", "1.2.3.4", KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "t"));
    CU_ASSERT(AZ(acl, "User:ops", NULL, KB_ACL_OP_ALTER, KB_ACL_RES_CLUSTER, "kafka-cluster"));
    CU_ASSERT(AZ(acl, KB_ACL_INTERNAL_PRINCIPAL, NULL, KB_ACL_OP_ALTER, KB_ACL_RES_CLUSTER,
                 "kafka-cluster"));
    CU_ASSERT_STRING_EQUAL(KB_ACL_INTERNAL_PRINCIPAL, KB_PRINCIPAL_INTERNAL);
    /* nobody else, and no default allow */
    CU_ASSERT(!AZ(acl, "User:admin2", NULL, KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "t"));
    CU_ASSERT(!AZ(acl, "User:x", NULL, KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "other"));
    CU_ASSERT(!AZ(acl, NULL, NULL, KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "other"));
    kb_acl_free(acl);
}

static void test_authz_super_users_refused(void)
{
    char err[256] = "";
    kb_acl_opts_t o = {.enabled = true, .super_users = "User:a;bob"};
    CU_ASSERT_PTR_NULL(kb_acl_new(&o, err, sizeof(err)));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "super.users: 'bob'"));
}

static void test_authz_deny_wins_and_wildcards(void)
{
    kb_acl_t *acl = mem_acl(true, NULL, false);
    add(acl, B(KB_ACL_RES_TOPIC, "*", KB_ACL_PAT_LITERAL, "User:*", "*", KB_ACL_OP_READ,
               KB_ACL_PERM_ALLOW));
    add(acl, B(KB_ACL_RES_TOPIC, "secret", KB_ACL_PAT_LITERAL, "User:bob", "*", KB_ACL_OP_READ,
               KB_ACL_PERM_DENY));
    add(acl, B(KB_ACL_RES_TOPIC, "logs-", KB_ACL_PAT_PREFIXED, "User:carol", "10.0.0.5",
               KB_ACL_OP_WRITE, KB_ACL_PERM_ALLOW));
    add(acl, B(KB_ACL_RES_TOPIC, "logs-private", KB_ACL_PAT_PREFIXED, "User:*", "10.0.0.5",
               KB_ACL_OP_WRITE, KB_ACL_PERM_DENY));

    /* the wildcard resource and principal */
    CU_ASSERT(AZ(acl, "User:alice", "1.1.1.1", KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "any"));
    CU_ASSERT(AZ(acl, "Group:g", "1.1.1.1", KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "any"));
    CU_ASSERT(!AZ(acl, "User:alice", "1.1.1.1", KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "any"));
    /* other resource types are not covered by a topic wildcard */
    CU_ASSERT(!AZ(acl, "User:alice", "1.1.1.1", KB_ACL_OP_READ, KB_ACL_RES_GROUP, "any"));
    /* DENY wins over the wildcard ALLOW */
    CU_ASSERT(!AZ(acl, "User:bob", "1.1.1.1", KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "secret"));
    CU_ASSERT(AZ(acl, "User:alice", "1.1.1.1", KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "secret"));
    /* prefixed, with the host */
    CU_ASSERT(AZ(acl, "User:carol", "10.0.0.5", KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "logs-app"));
    CU_ASSERT(!AZ(acl, "User:carol", "10.0.0.6", KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "logs-app"));
    CU_ASSERT(!AZ(acl, "User:carol", NULL, KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "logs-app"));
    CU_ASSERT(!AZ(acl, "User:carol", "10.0.0.5", KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "log"));
    /* a longer prefixed DENY for every user wins over the shorter ALLOW */
    CU_ASSERT(
        !AZ(acl, "User:carol", "10.0.0.5", KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "logs-private-1"));
    /* "Group:*" is not a wildcard principal (only User:* is) */
    add(acl, B(KB_ACL_RES_GROUP, "g1", KB_ACL_PAT_LITERAL, "Group:*", "*", KB_ACL_OP_READ,
               KB_ACL_PERM_ALLOW));
    CU_ASSERT(!AZ(acl, "Group:x", NULL, KB_ACL_OP_READ, KB_ACL_RES_GROUP, "g1"));
    CU_ASSERT(AZ(acl, "Group:*", NULL, KB_ACL_OP_READ, KB_ACL_RES_GROUP, "g1"));
    /* ANY and unknown operations or types are never allowed */
    CU_ASSERT(!AZ(acl, "User:alice", NULL, KB_ACL_OP_ANY, KB_ACL_RES_TOPIC, "any"));
    CU_ASSERT(!AZ(acl, "User:alice", NULL, KB_ACL_OP_READ, KB_ACL_RES_ANY, "any"));
    CU_ASSERT(!AZ(acl, "User:alice", NULL, 99, KB_ACL_RES_TOPIC, "any"));
    kb_acl_free(acl);
}

static void test_authz_implied_ops(void)
{
    kb_acl_t *acl = mem_acl(true, NULL, false);
    static const int8_t implies_describe[] = {KB_ACL_OP_READ, KB_ACL_OP_WRITE, KB_ACL_OP_DELETE,
                                              KB_ACL_OP_ALTER, KB_ACL_OP_DESCRIBE};
    for (size_t i = 0; i < sizeof(implies_describe); i++) {
        char name[16];
        snprintf(name, sizeof(name), "t%zu", i);
        add(acl, B(KB_ACL_RES_TOPIC, name, KB_ACL_PAT_LITERAL, "User:u", "*", implies_describe[i],
                   KB_ACL_PERM_ALLOW));
        CU_ASSERT(AZ(acl, "User:u", NULL, KB_ACL_OP_DESCRIBE, KB_ACL_RES_TOPIC, name));
        CU_ASSERT(!AZ(acl, "User:u", NULL, KB_ACL_OP_CREATE, KB_ACL_RES_TOPIC, name));
    }
    /* CREATE does not imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS only */
    add(acl, B(KB_ACL_RES_TOPIC, "c", KB_ACL_PAT_LITERAL, "User:u", "*", KB_ACL_OP_CREATE,
               KB_ACL_PERM_ALLOW));
    CU_ASSERT(!AZ(acl, "User:u", NULL, KB_ACL_OP_DESCRIBE, KB_ACL_RES_TOPIC, "c"));
    add(acl, B(KB_ACL_RES_TOPIC, "cfg", KB_ACL_PAT_LITERAL, "User:u", "*", KB_ACL_OP_ALTER_CONFIGS,
               KB_ACL_PERM_ALLOW));
    CU_ASSERT(AZ(acl, "User:u", NULL, KB_ACL_OP_DESCRIBE_CONFIGS, KB_ACL_RES_TOPIC, "cfg"));
    CU_ASSERT(!AZ(acl, "User:u", NULL, KB_ACL_OP_DESCRIBE, KB_ACL_RES_TOPIC, "cfg"));
    /* ALL allows every operation */
    add(acl, B(KB_ACL_RES_GROUP, "g", KB_ACL_PAT_LITERAL, "User:u", "*", KB_ACL_OP_ALL,
               KB_ACL_PERM_ALLOW));
    for (int8_t op = KB_ACL_OP_READ; op <= KB_ACL_OP_DESCRIBE_TOKENS; op++)
        CU_ASSERT(AZ(acl, "User:u", NULL, op, KB_ACL_RES_GROUP, "g"));
    /* implication does not extend to DENY: a DENY of READ leaves DESCRIBE alone ... */
    add(acl, B(KB_ACL_RES_TOPIC, "t0", KB_ACL_PAT_LITERAL, "User:u", "*", KB_ACL_OP_READ,
               KB_ACL_PERM_DENY));
    CU_ASSERT(!AZ(acl, "User:u", NULL, KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "t0"));
    add(acl, B(KB_ACL_RES_TOPIC, "t0", KB_ACL_PAT_LITERAL, "User:u", "*", KB_ACL_OP_DESCRIBE,
               KB_ACL_PERM_ALLOW));
    CU_ASSERT(AZ(acl, "User:u", NULL, KB_ACL_OP_DESCRIBE, KB_ACL_RES_TOPIC, "t0"));
    /* ... but a DENY of ALL denies everything */
    add(acl, B(KB_ACL_RES_GROUP, "g", KB_ACL_PAT_LITERAL, "User:u", "*", KB_ACL_OP_ALL,
               KB_ACL_PERM_DENY));
    CU_ASSERT(!AZ(acl, "User:u", NULL, KB_ACL_OP_DESCRIBE, KB_ACL_RES_GROUP, "g"));
    kb_acl_free(acl);
}

static void test_authz_allow_everyone(void)
{
    kb_acl_t *acl = mem_acl(true, NULL, true);
    /* no ACL on the resource at all: allowed */
    CU_ASSERT(AZ(acl, "User:x", NULL, KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "free"));
    /* an ACL on the resource for someone else (any operation): no longer "no ACL found" */
    add(acl, B(KB_ACL_RES_TOPIC, "fr", KB_ACL_PAT_PREFIXED, "User:y", "*", KB_ACL_OP_READ,
               KB_ACL_PERM_ALLOW));
    CU_ASSERT(!AZ(acl, "User:x", NULL, KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "free"));
    CU_ASSERT(AZ(acl, "User:y", NULL, KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "free"));
    /* ACLs of another resource type do not count */
    CU_ASSERT(AZ(acl, "User:x", NULL, KB_ACL_OP_READ, KB_ACL_RES_GROUP, "free"));
    kb_acl_free(acl);
}

/* ---- the image ------------------------------------------------------------------------------- */

static void test_image_apply(void)
{
    kb_acl_t *acl = mem_acl(true, NULL, false);
    kb_acl_binding_t b = B(KB_ACL_RES_TOPIC, "t", KB_ACL_PAT_LITERAL, "User:a", "*", KB_ACL_OP_READ,
                           KB_ACL_PERM_ALLOW);
    kb_acl_binding_t c = b;
    uint8_t unknown[16] = {9};
    kb_acl_list_t l;
    kb_acl_filter_t f = F_ANY();

    memset(b.id, 0, 16);
    CU_ASSERT_EQUAL(kb_acl_apply_add(acl, &b), KB_E_INVALID); /* the zero id is not an id */
    b.id[0] = 1;
    CU_ASSERT_EQUAL(kb_acl_apply_add(acl, &b), 0);
    CU_ASSERT_EQUAL(kb_acl_apply_add(acl, &b), KB_E_EXISTS);
    c.id[0] = 2;
    CU_ASSERT_EQUAL(kb_acl_apply_add(acl, &c), KB_E_EXISTS); /* same content */
    c.op = KB_ACL_OP_WRITE;
    CU_ASSERT_EQUAL(kb_acl_apply_add(acl, &c), 0);
    c.id[0] = 3;
    c.pattern = KB_ACL_PAT_MATCH;
    CU_ASSERT_EQUAL(kb_acl_apply_add(acl, &c), KB_E_INVALID);
    CU_ASSERT_EQUAL(kb_acl_count(acl), 2);
    CU_ASSERT(AZ(acl, "User:a", NULL, KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "t"));
    CU_ASSERT_EQUAL(kb_acl_apply_remove(acl, unknown), KB_E_NOT_FOUND);
    unknown[0] = 2;
    CU_ASSERT_EQUAL(kb_acl_apply_remove(acl, unknown), 0);
    CU_ASSERT(!AZ(acl, "User:a", NULL, KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "t"));
    CU_ASSERT_EQUAL(kb_acl_describe(acl, &f, &l), 0);
    CU_ASSERT_EQUAL_FATAL(l.cnt, 1);
    CU_ASSERT_EQUAL(l.v[0].id[0], 1);
    CU_ASSERT_EQUAL(l.v[0].op, KB_ACL_OP_READ);
    kb_acl_list_free(&l);
    kb_acl_free(acl);
}

static void test_create_delete_semantics(void)
{
    kb_acl_t *acl = mem_acl(true, NULL, false);
    kb_acl_binding_t v[3] = {
        B(KB_ACL_RES_TOPIC, "b", KB_ACL_PAT_LITERAL, "User:a", "*", KB_ACL_OP_READ,
          KB_ACL_PERM_ALLOW),
        B(KB_ACL_RES_TOPIC, "a", KB_ACL_PAT_LITERAL, "User:a", "*", KB_ACL_OP_READ,
          KB_ACL_PERM_ALLOW),
        B(KB_ACL_RES_TOPIC, "b", KB_ACL_PAT_LITERAL, "User:a", "*", KB_ACL_OP_READ,
          KB_ACL_PERM_ALLOW), /* a duplicate within the request */
    };
    kb_acl_filter_t f[2] = {F_ANY(), F_ANY()};
    kb_acl_list_t out[2], l;

    CU_ASSERT_EQUAL(kb_acl_create(acl, v, 3), 0);
    CU_ASSERT_EQUAL(kb_acl_count(acl), 2);
    CU_ASSERT_EQUAL(kb_acl_create(acl, v, 1), 0); /* present already: success, no change */
    CU_ASSERT_EQUAL(kb_acl_count(acl), 2);
    /* describe sorts by resource */
    CU_ASSERT_EQUAL(kb_acl_describe(acl, &f[0], &l), 0);
    CU_ASSERT_EQUAL_FATAL(l.cnt, 2);
    CU_ASSERT_STRING_EQUAL(l.v[0].name, "a");
    CU_ASSERT_STRING_EQUAL(l.v[1].name, "b");
    kb_acl_list_free(&l);
    /* within one resource, creation order (not the principal's) */
    add(acl, B(KB_ACL_RES_TOPIC, "a", KB_ACL_PAT_LITERAL, "User:zed", "*", KB_ACL_OP_READ,
               KB_ACL_PERM_ALLOW));
    add(acl, B(KB_ACL_RES_TOPIC, "a", KB_ACL_PAT_LITERAL, "User:amy", "*", KB_ACL_OP_READ,
               KB_ACL_PERM_ALLOW));
    CU_ASSERT_EQUAL(kb_acl_describe(acl, &f[0], &l), 0);
    CU_ASSERT_EQUAL_FATAL(l.cnt, 4);
    CU_ASSERT_STRING_EQUAL(l.v[0].principal, "User:a");
    CU_ASSERT_STRING_EQUAL(l.v[1].principal, "User:zed");
    CU_ASSERT_STRING_EQUAL(l.v[2].principal, "User:amy");
    CU_ASSERT_STRING_EQUAL(l.v[3].name, "b");
    kb_acl_list_free(&l);
    /* two filters matching the same binding both report it */
    f[0].name = "b";
    f[1].restype = KB_ACL_RES_TOPIC;
    CU_ASSERT_EQUAL(kb_acl_delete(acl, f, 2, out), 0);
    CU_ASSERT_EQUAL(out[0].cnt, 1);
    CU_ASSERT_EQUAL(out[1].cnt, 4);
    CU_ASSERT_EQUAL(kb_acl_count(acl), 0);
    kb_acl_list_free(&out[0]);
    kb_acl_list_free(&out[1]);
    kb_acl_free(acl);
}

/* ---- metadata records ------------------------------------------------------------------------ */

/* Encode @p rec as a metadata record value, decode it back and apply it. */
static int mrec_apply(kb_acl_t *acl, int16_t type, const void *rec)
{
    kp_writer_t wr;
    kp_arena_t ar;
    kp_mrec_t m;
    int rc;
    kp_writer_init(&wr);
    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL_FATAL(kp_mrec_encode(&wr, type, 0, rec), 0);
    CU_ASSERT_EQUAL_FATAL(kp_mrec_decode(wr.buf, wr.len, &ar, &m), 0);
    CU_ASSERT_EQUAL(m.type, (uint32_t)type);
    rc = kb_acl_mrec_apply(acl, &m);
    kp_arena_free(&ar);
    kp_writer_free(&wr);
    return rc;
}

static void test_mrec_replay(void)
{
    kb_acl_t *ctl = mem_acl(true, NULL, false), *brk = mem_acl(true, NULL, false);
    kb_acl_binding_t v[2] = {
        B(KB_ACL_RES_TOPIC, "orders", KB_ACL_PAT_LITERAL, "User:alice", "*", KB_ACL_OP_READ,
          KB_ACL_PERM_ALLOW),
        B(KB_ACL_RES_GROUP, "app-", KB_ACL_PAT_PREFIXED, "User:bob", "10.0.0.1", KB_ACL_OP_ALL,
          KB_ACL_PERM_DENY),
    };
    kb_acl_filter_t f = F_ANY();
    kb_acl_list_t made, seen;
    kp_AccessControlEntryRecord_t rec;
    kp_RemoveAccessControlEntryRecord_t rm;
    kp_NoOpRecord_t noop;

    /* the "controller" creates bindings; a "broker" replays their records */
    CU_ASSERT_EQUAL(kb_acl_create(ctl, v, 2), 0);
    CU_ASSERT_EQUAL(kb_acl_describe(ctl, &f, &made), 0);
    CU_ASSERT_EQUAL_FATAL(made.cnt, 2);
    for (size_t i = 0; i < made.cnt; i++) {
        kb_acl_mrec_from_binding(&made.v[i], &rec);
        CU_ASSERT_EQUAL(mrec_apply(brk, KP_RECTYPE_AccessControlEntryRecord, &rec), 0);
    }
    CU_ASSERT_EQUAL(kb_acl_describe(brk, &f, &seen), 0);
    CU_ASSERT_EQUAL_FATAL(seen.cnt, 2);
    for (size_t i = 0; i < 2; i++) {
        CU_ASSERT(!memcmp(seen.v[i].id, made.v[i].id, 16));
        CU_ASSERT(!strcmp(seen.v[i].name, made.v[i].name) &&
                  !strcmp(seen.v[i].principal, made.v[i].principal) &&
                  !strcmp(seen.v[i].host, made.v[i].host) && seen.v[i].op == made.v[i].op &&
                  seen.v[i].perm == made.v[i].perm && seen.v[i].pattern == made.v[i].pattern);
    }
    kb_acl_list_free(&seen);
    CU_ASSERT(!AZ(brk, "User:bob", "10.0.0.1", KB_ACL_OP_READ, KB_ACL_RES_GROUP, "app-1"));
    /* a replayed record again: EXISTS, nothing changes */
    kb_acl_mrec_from_binding(&made.v[0], &rec);
    CU_ASSERT_EQUAL(mrec_apply(brk, KP_RECTYPE_AccessControlEntryRecord, &rec), KB_E_EXISTS);
    /* a record CreateAcls would refuse, and a zero id */
    rec.PatternType = KB_ACL_PAT_MATCH;
    rec.Id.b[0] ^= 1;
    CU_ASSERT_EQUAL(mrec_apply(brk, KP_RECTYPE_AccessControlEntryRecord, &rec), KB_E_INVALID);
    kb_acl_mrec_from_binding(&made.v[0], &rec);
    memset(rec.Id.b, 0, 16);
    rec.Operation = KB_ACL_OP_WRITE;
    CU_ASSERT_EQUAL(mrec_apply(brk, KP_RECTYPE_AccessControlEntryRecord, &rec), KB_E_INVALID);
    CU_ASSERT_EQUAL(kb_acl_count(brk), 2);
    /* removal by id; an unknown id */
    kp_RemoveAccessControlEntryRecord_init(&rm);
    memcpy(rm.Id.b, made.v[1].id, 16);
    CU_ASSERT_EQUAL(mrec_apply(brk, KP_RECTYPE_RemoveAccessControlEntryRecord, &rm), 0);
    CU_ASSERT_EQUAL(mrec_apply(brk, KP_RECTYPE_RemoveAccessControlEntryRecord, &rm),
                    KB_E_NOT_FOUND);
    CU_ASSERT_EQUAL(kb_acl_count(brk), 1);
    CU_ASSERT(AZ(brk, "User:alice", NULL, KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "orders"));
    /* other record types are not ACL records */
    kp_NoOpRecord_init(&noop);
    CU_ASSERT_EQUAL(mrec_apply(brk, KP_RECTYPE_NoOpRecord, &noop), 0);
    CU_ASSERT_EQUAL(kb_acl_count(brk), 1);
    kb_acl_list_free(&made);
    kb_acl_free(ctl);
    kb_acl_free(brk);
}

/* The records as kb_meta's kb_mrec_t carries them (what the metadata log holds): every field
 * round-trips, the bytes are the ones broker/acl replays, truncations and bad strings are
 * refused. */
static void test_mrec_kb_record(void)
{
    kb_acl_t *brk = mem_acl(true, NULL, true); /* allow when no ACL matches */
    kb_mrec_t r, d;
    kp_writer_t wr;
    kp_arena_t ar;
    kp_mrec_t m;
    char err[256];
    static const uint8_t id[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6, 7};

    kb_mrec_init(&r, KB_MREC_ACL);
    memcpy(r.acl_id.b, id, 16);
    r.acl_restype = KB_ACL_RES_TOPIC;
    r.acl_pattern = KB_ACL_PAT_PREFIXED;
    r.acl_op = KB_ACL_OP_WRITE;
    r.acl_perm = KB_ACL_PERM_DENY;
    r.acl_name = strdup("pay-");
    r.acl_principal = strdup("User:carol");
    r.acl_host = strdup("192.0.2.7");
    CU_ASSERT_STRING_EQUAL(kb_mrec_type_name(KB_MREC_ACL), "AccessControlEntryRecord");
    CU_ASSERT_STRING_EQUAL(kb_mrec_type_name(KB_MREC_REMOVE_ACL), "RemoveAccessControlEntryRecord");
    kp_writer_init(&wr);
    CU_ASSERT_EQUAL_FATAL(kb_mrec_encode(&r, &wr), 0);
    CU_ASSERT_EQUAL_FATAL(kb_mrec_decode(&d, wr.buf, wr.len, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(d.type, KB_MREC_ACL);
    CU_ASSERT(!memcmp(d.acl_id.b, id, 16));
    CU_ASSERT(d.acl_restype == KB_ACL_RES_TOPIC && d.acl_pattern == KB_ACL_PAT_PREFIXED &&
              d.acl_op == KB_ACL_OP_WRITE && d.acl_perm == KB_ACL_PERM_DENY);
    CU_ASSERT(d.acl_name && !strcmp(d.acl_name, "pay-"));
    CU_ASSERT(d.acl_principal && !strcmp(d.acl_principal, "User:carol"));
    CU_ASSERT(d.acl_host && !strcmp(d.acl_host, "192.0.2.7"));
    kb_mrec_clear(&d);
    /* the same bytes through the generated codec into the image */
    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL_FATAL(kp_mrec_decode(wr.buf, wr.len, &ar, &m), 0);
    CU_ASSERT_EQUAL(kb_acl_mrec_apply(brk, &m), 0);
    kp_arena_free(&ar);
    CU_ASSERT_EQUAL(kb_acl_count(brk), 1);
    CU_ASSERT(!AZ(brk, "User:carol", "192.0.2.7", KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "pay-in"));
    CU_ASSERT(AZ(brk, "User:carol", "192.0.2.7", KB_ACL_OP_WRITE, KB_ACL_RES_TOPIC, "other"));
    /* every truncation is refused */
    for (size_t n = 0; n < wr.len; n++)
        CU_ASSERT_NOT_EQUAL(kb_mrec_decode(&d, wr.buf, n, err, sizeof(err)), 0);
    kp_writer_free(&wr);
    /* a string with a NUL byte is refused; a missing one cannot be encoded */
    {
        kp_AccessControlEntryRecord_t a;
        kp_AccessControlEntryRecord_init(&a);
        memcpy(a.Id.b, id, 16);
        a.ResourceName = (kp_str_t){"t", 1};
        a.Principal = (kp_str_t){"User:a\0b", 8};
        a.Host = (kp_str_t){"*", 1};
        kp_writer_init(&wr);
        CU_ASSERT_EQUAL_FATAL(kp_mrec_encode(&wr, KP_RECTYPE_AccessControlEntryRecord, 0, &a), 0);
        CU_ASSERT_NOT_EQUAL(kb_mrec_decode(&d, wr.buf, wr.len, err, sizeof(err)), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "NUL"));
        kp_writer_free(&wr);
    }
    free(r.acl_host);
    r.acl_host = NULL;
    kp_writer_init(&wr);
    CU_ASSERT_NOT_EQUAL(kb_mrec_encode(&r, &wr), 0);
    kp_writer_free(&wr);
    kb_mrec_clear(&r);
    /* the removal */
    kb_mrec_init(&r, KB_MREC_REMOVE_ACL);
    memcpy(r.acl_id.b, id, 16);
    kp_writer_init(&wr);
    CU_ASSERT_EQUAL_FATAL(kb_mrec_encode(&r, &wr), 0);
    CU_ASSERT_EQUAL_FATAL(kb_mrec_decode(&d, wr.buf, wr.len, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(d.type, KB_MREC_REMOVE_ACL);
    CU_ASSERT(!memcmp(d.acl_id.b, id, 16));
    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL_FATAL(kp_mrec_decode(wr.buf, wr.len, &ar, &m), 0);
    CU_ASSERT_EQUAL(kb_acl_mrec_apply(brk, &m), 0);
    kp_arena_free(&ar);
    CU_ASSERT_EQUAL(kb_acl_count(brk), 0);
    kp_writer_free(&wr);
    kb_mrec_clear(&d);
    kb_mrec_clear(&r);
    kb_acl_free(brk);
}

/* kb_meta's half: ACL records committed to the metadata log reach a listener (live and, for a
 * late listener, as its snapshot) and survive a reopen, by log replay and by checkpoint. */
typedef struct acl_lis_s {
    kb_acl_t *acl;
    int live, snap, bad;
} acl_lis_t;

static void acl_lis_fn(void *opaque, const kb_meta_event_t *ev)
{
    acl_lis_t *l = opaque;
    kb_acl_binding_t b;
    if (ev->type != KB_META_EV_ACL)
        return;
    if (!ev->acl) {
        l->bad++;
        return;
    }
    ev->snapshot ? l->snap++ : l->live++;
    if (ev->acl->type == KB_MREC_REMOVE_ACL) {
        if (kb_acl_apply_remove(l->acl, ev->acl->acl_id.b) != 0)
            l->bad++;
        return;
    }
    memset(&b, 0, sizeof(b));
    memcpy(b.id, ev->acl->acl_id.b, 16);
    b.restype = ev->acl->acl_restype;
    b.pattern = ev->acl->acl_pattern;
    b.op = ev->acl->acl_op;
    b.perm = ev->acl->acl_perm;
    b.name = ev->acl->acl_name;
    b.principal = ev->acl->acl_principal;
    b.host = ev->acl->acl_host;
    if (kb_acl_apply_add(l->acl, &b) != 0)
        l->bad++;
}

/* Remove the metadata snapshots of @p dir; how many. */
static int rm_checkpoints(const char *dir)
{
    char mdir[700], path[1000];
    struct dirent *e;
    DIR *d;
    int n = 0;
    snprintf(mdir, sizeof(mdir), "%s/logs/__cluster_metadata-0", dir);
    d = opendir(mdir);
    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 11 && !strcmp(e->d_name + len - 11, ".checkpoint")) {
            snprintf(path, sizeof(path), "%s/%s", mdir, e->d_name);
            n += unlink(path) == 0;
        }
    }
    closedir(d);
    return n;
}

static kb_meta_t *meta_open(const char *dir, kb_config_t **cfgp)
{
    char logs[600], err[512] = "";
    kb_config_t *cfg = kb_config_new();
    kb_meta_t *meta;
    snprintf(logs, sizeof(logs), "%s/logs", dir);
    kb_config_set(cfg, "node.id", "1", "test");
    kb_config_set(cfg, "listeners", "PLAINTEXT://127.0.0.1:0", "test");
    kb_config_set(cfg, "log.dirs", logs, "test");
    CU_ASSERT_EQUAL_FATAL(kb_config_finalize(cfg), 0);
    meta = kb_meta_open(cfg, err, sizeof(err));
    if (!meta)
        fprintf(stderr, "kb_meta_open: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(meta);
    *cfgp = cfg;
    return meta;
}

static void acl_rec(kb_mrec_t *r, int i, const char *principal)
{
    kb_mrec_init(r, KB_MREC_ACL);
    memset(r->acl_id.b, 0x40 + i, 16);
    r->acl_restype = KB_ACL_RES_TOPIC;
    r->acl_pattern = KB_ACL_PAT_LITERAL;
    r->acl_op = KB_ACL_OP_READ;
    r->acl_perm = KB_ACL_PERM_ALLOW;
    r->acl_name = strdup("orders");
    r->acl_principal = strdup(principal);
    r->acl_host = strdup("*");
}

static void test_meta_acl_records(void)
{
    char dir[512], msg[512];
    kb_config_t *cfg;
    kb_meta_t *meta;
    kb_mrec_t r[3];
    acl_lis_t l1 = {0}, l2 = {0};
    kb_meta_listener_t *h1, *h2;

    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(dir, sizeof(dir)), 0);
    meta = meta_open(dir, &cfg);
    l1.acl = mem_acl(true, NULL, false);
    h1 = kb_meta_listen(meta, acl_lis_fn, &l1, true);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h1);
    acl_rec(&r[0], 0, "User:alice");
    acl_rec(&r[1], 1, "User:bob");
    CU_ASSERT_EQUAL(kb_meta_commit_records(meta, r, 2, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(l1.live, 2);
    CU_ASSERT_EQUAL(kb_acl_count(l1.acl), 2);
    CU_ASSERT(AZ(l1.acl, "User:bob", "h", KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "orders"));
    /* an id twice is refused, nothing committed */
    CU_ASSERT_NOT_EQUAL(kb_meta_commit_records(meta, r, 1, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(l1.live, 2);
    /* remove bob's; removing an unknown id is refused */
    kb_mrec_clear(&r[1]);
    kb_mrec_init(&r[2], KB_MREC_REMOVE_ACL);
    memset(r[2].acl_id.b, 0x41, 16);
    CU_ASSERT_EQUAL(kb_meta_commit_records(meta, &r[2], 1, msg, sizeof(msg)), 0);
    CU_ASSERT_NOT_EQUAL(kb_meta_commit_records(meta, &r[2], 1, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(l1.live, 3);
    CU_ASSERT_EQUAL(kb_acl_count(l1.acl), 1);
    CU_ASSERT(!AZ(l1.acl, "User:bob", "h", KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "orders"));
    CU_ASSERT_EQUAL(l1.bad, 0);
    kb_meta_unlisten(meta, h1);
    /* a late listener gets the image's ACLs as its snapshot */
    l2.acl = mem_acl(true, NULL, false);
    h2 = kb_meta_listen(meta, acl_lis_fn, &l2, true);
    CU_ASSERT_EQUAL(l2.snap, 1);
    CU_ASSERT_EQUAL(l2.live, 0);
    CU_ASSERT(AZ(l2.acl, "User:alice", "h", KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "orders"));
    kb_meta_unlisten(meta, h2);
    kb_acl_free(l2.acl);
    kb_meta_close(meta); /* writes a checkpoint */
    kb_config_free(cfg);
    /* reopened: from the checkpoint the close wrote, then from the log alone */
    for (int round = 0; round < 2; round++) {
        acl_lis_t l3 = {0};
        kb_meta_listener_t *h3;
        meta = meta_open(dir, &cfg);
        l3.acl = mem_acl(true, NULL, false);
        h3 = kb_meta_listen(meta, acl_lis_fn, &l3, true);
        CU_ASSERT_EQUAL(l3.snap, 1);
        CU_ASSERT_EQUAL(l3.bad, 0);
        CU_ASSERT_EQUAL(kb_acl_count(l3.acl), 1);
        CU_ASSERT(AZ(l3.acl, "User:alice", "h", KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "orders"));
        CU_ASSERT(!AZ(l3.acl, "User:bob", "h", KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "orders"));
        kb_meta_unlisten(meta, h3);
        kb_acl_free(l3.acl);
        kb_meta_close(meta);
        kb_config_free(cfg);
        if (round == 0)
            CU_ASSERT(rm_checkpoints(dir) >= 1);
    }
    kb_acl_free(l1.acl);
    kb_mrec_clear(&r[0]);
    kb_mrec_clear(&r[2]);
    kbat_rmrf(dir);
}

/* ---- the store ------------------------------------------------------------------------------- */

static char g_dir[512];

static int store_setup(void)
{
    return kbat_tmpdir(g_dir, sizeof(g_dir));
}

static int store_teardown(void)
{
    kbat_rmrf(g_dir);
    return 0;
}

static kb_acl_t *open_store(char *err, size_t errsz)
{
    kb_acl_opts_t o = {.dir = g_dir, .enabled = true};
    return kb_acl_new(&o, err, errsz);
}

static void store_path(char *p, size_t n)
{
    snprintf(p, n, "%s/%s", g_dir, KB_ACL_FILE);
}

static void test_store_reopen(void)
{
    char err[512] = "", path[600];
    kb_acl_t *acl = open_store(err, sizeof(err));
    kb_acl_binding_t v[3] = {
        B(KB_ACL_RES_TOPIC, "orders", KB_ACL_PAT_LITERAL, "User:alice", "*", KB_ACL_OP_READ,
          KB_ACL_PERM_ALLOW),
        B(KB_ACL_RES_GROUP, "app-", KB_ACL_PAT_PREFIXED, "User:bob", "10.1.2.3", KB_ACL_OP_ALL,
          KB_ACL_PERM_DENY),
        B(KB_ACL_RES_CLUSTER_MIRROR, "m\xc3\xa9", KB_ACL_PAT_LITERAL, "User:*", "*",
          KB_ACL_OP_ALTER, KB_ACL_PERM_ALLOW),
    };
    kb_acl_filter_t f = F_ANY();
    kb_acl_list_t before, after, out;
    struct stat st;

    CU_ASSERT_PTR_NOT_NULL_FATAL(acl);
    store_path(path, sizeof(path));
    CU_ASSERT_NOT_EQUAL(stat(path, &st), 0); /* nothing written before the first change */
    CU_ASSERT_EQUAL(kb_acl_create(acl, v, 3), 0);
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(kb_acl_describe(acl, &f, &before), 0);
    kb_acl_free(acl);

    acl = open_store(err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(acl);
    CU_ASSERT_EQUAL(kb_acl_describe(acl, &f, &after), 0);
    CU_ASSERT_EQUAL_FATAL(after.cnt, 3);
    CU_ASSERT_EQUAL_FATAL(before.cnt, 3);
    for (size_t i = 0; i < 3; i++) {
        CU_ASSERT(!memcmp(before.v[i].id, after.v[i].id, 16));
        CU_ASSERT(before.v[i].restype == after.v[i].restype &&
                  !strcmp(before.v[i].name, after.v[i].name) &&
                  !strcmp(before.v[i].host, after.v[i].host) && before.v[i].op == after.v[i].op &&
                  before.v[i].perm == after.v[i].perm &&
                  before.v[i].pattern == after.v[i].pattern &&
                  !strcmp(before.v[i].principal, after.v[i].principal));
    }
    CU_ASSERT(!AZ(acl, "User:bob", "10.1.2.3", KB_ACL_OP_READ, KB_ACL_RES_GROUP, "app-1"));
    kb_acl_list_free(&before);
    kb_acl_list_free(&after);

    /* a delete is durable too, and no temp file is left behind */
    f.restype = KB_ACL_RES_GROUP;
    CU_ASSERT_EQUAL(kb_acl_delete(acl, &f, 1, &out), 0);
    CU_ASSERT_EQUAL(out.cnt, 1);
    kb_acl_list_free(&out);
    kb_acl_free(acl);
    acl = open_store(err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(acl);
    CU_ASSERT_EQUAL(kb_acl_count(acl), 2);
    CU_ASSERT(AZ(acl, "User:bob", "10.1.2.3", KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "orders") == false);
    CU_ASSERT(AZ(acl, "User:alice", "10.1.2.3", KB_ACL_OP_READ, KB_ACL_RES_TOPIC, "orders"));
    kb_acl_free(acl);
    snprintf(path + strlen(path), sizeof(path) - strlen(path), ".tmp");
    CU_ASSERT_NOT_EQUAL(stat(path, &st), 0);
}

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = malloc(1 << 20);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    *n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

static void write_all(const char *path, const uint8_t *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(buf, 1, n, f), n);
    fclose(f);
}

static void test_store_corrupt(void)
{
    char err[512], path[600];
    uint8_t *good, *bad;
    size_t n;
    kb_acl_t *acl;

    /* the store of the previous test: 2 bindings */
    store_path(path, sizeof(path));
    good = read_all(path, &n);
    CU_ASSERT_FATAL(n > 30);
    bad = malloc(n + 8);

    /* every flipped byte and every truncation is refused with the file's name */
    for (size_t i = 0; i < n; i++) {
        memcpy(bad, good, n);
        bad[i] ^= 0x40;
        write_all(path, bad, n);
        err[0] = '\0';
        acl = open_store(err, sizeof(err));
        CU_ASSERT_PTR_NULL(acl);
        kb_acl_free(acl);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
    }
    for (size_t len = 0; len < n; len++) {
        write_all(path, good, len);
        err[0] = '\0';
        acl = open_store(err, sizeof(err));
        CU_ASSERT_PTR_NULL(acl);
        kb_acl_free(acl);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
    }
    /* trailing bytes after the payload */
    memcpy(bad, good, n);
    memcpy(bad + n, "XXXX", 4);
    write_all(path, bad, n + 4);
    acl = open_store(err, sizeof(err));
    CU_ASSERT_PTR_NULL(acl);
    kb_acl_free(acl);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "corrupt"));
    /* the good file still loads */
    write_all(path, good, n);
    acl = open_store(err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL(acl);
    CU_ASSERT_EQUAL(kb_acl_count(acl), 2);
    kb_acl_free(acl);
    free(good);
    free(bad);
}

static void test_store_unwritable(void)
{
    char err[512], sub[600];
    kb_acl_opts_t o = {.dir = sub, .enabled = true};
    kb_acl_binding_t b = B(KB_ACL_RES_TOPIC, "t", KB_ACL_PAT_LITERAL, "User:a", "*", KB_ACL_OP_READ,
                           KB_ACL_PERM_ALLOW);
    kb_acl_t *acl;
    /* a directory that does not exist: the change is refused and not applied */
    snprintf(sub, sizeof(sub), "%s/missing", g_dir);
    acl = kb_acl_new(&o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(acl);
    CU_ASSERT_EQUAL(kb_acl_create(acl, &b, 1), KB_E_IO);
    CU_ASSERT_EQUAL(kb_acl_count(acl), 0);
    kb_acl_free(acl);
    /* a store that cannot be read (a directory in its place) stops the start, naming it */
    snprintf(sub, sizeof(sub), "%s/isdir", g_dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(sub, 0755), 0);
    {
        char file[700];
        snprintf(file, sizeof(file), "%s/%s", sub, KB_ACL_FILE);
        CU_ASSERT_EQUAL_FATAL(mkdir(file, 0755), 0);
    }
    err[0] = '\0';
    acl = kb_acl_new(&o, err, sizeof(err));
    CU_ASSERT_PTR_NULL(acl);
    kb_acl_free(acl);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "isdir/" KB_ACL_FILE ": cannot read"));
}

/* ---- the APIs through the codec -------------------------------------------------------------- */

static kbat_broker_t g_b;
static kb_acl_t *g_acl;
static int g_fd = -1;
static kp_arena_t g_ar;
static char g_bdir[512];

static void api_up(bool enabled)
{
    char err[256], logs[600];
    kb_acl_opts_t o = {.enabled = enabled};
    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(g_bdir, sizeof(g_bdir)), 0);
    CU_ASSERT_EQUAL_FATAL(kbat_broker_start(&g_b, g_bdir, NULL), 0);
    snprintf(logs, sizeof(logs), "%s/logs", g_bdir);
    o.dir = logs;
    g_acl = kb_acl_new(&o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g_acl);
    CU_ASSERT_EQUAL_FATAL(kb_acl_api_register(g_acl, g_b.reg), 0);
    g_fd = kbat_connect(g_b.port);
    CU_ASSERT_FATAL(g_fd >= 0);
    kp_arena_init(&g_ar, 0);
}

static void api_down(void)
{
    close(g_fd);
    g_fd = -1;
    kb_acl_api_unregister(g_b.reg); /* waits for running handlers; the registry dies next */
    kbat_broker_stop(&g_b);
    kb_acl_free(g_acl);
    g_acl = NULL;
    kp_arena_free(&g_ar);
    kbat_rmrf(g_bdir);
}

static kp_str_t S(const char *s)
{
    return s ? (kp_str_t){s, (int32_t)strlen(s)} : (kp_str_t){NULL, -1};
}

static bool eq(kp_str_t a, const char *s)
{
    return s ? a.len == (int32_t)strlen(s) && !memcmp(a.ptr, s, (size_t)a.len) : a.len == -1;
}

static void creation(kp_CreateAclsRequest_AclCreation_t *c, int8_t rt, const char *name, int8_t pat,
                     const char *pr, const char *host, int8_t op, int8_t perm)
{
    kp_CreateAclsRequest_AclCreation_init(c);
    c->ResourceType = rt;
    c->ResourceName = S(name);
    c->ResourcePatternType = pat;
    c->Principal = S(pr);
    c->Host = S(host);
    c->Operation = op;
    c->PermissionType = perm;
}

static void describe_req(kp_DescribeAclsRequest_t *rq, int8_t rt, const char *name, int8_t pat)
{
    kp_DescribeAclsRequest_init(rq);
    rq->ResourceTypeFilter = rt;
    rq->ResourceNameFilter = S(name);
    rq->PatternTypeFilter = pat;
    rq->PrincipalFilter = S(NULL);
    rq->HostFilter = S(NULL);
    rq->Operation = KB_ACL_OP_ANY;
    rq->PermissionType = KB_ACL_PERM_ANY;
}

static void test_api_round_trip(void)
{
    for (int16_t ver = 1; ver <= 3; ver++) {
        kp_CreateAclsRequest_AclCreation_t c[5];
        kp_CreateAclsRequest_t crq;
        kp_CreateAclsResponse_t crs;
        kp_DescribeAclsRequest_t drq;
        kp_DescribeAclsResponse_t drs;
        kp_DeleteAclsRequest_DeleteAclsFilter_t df[3];
        kp_DeleteAclsRequest_t xrq;
        kp_DeleteAclsResponse_t xrs;

        api_up(true);
        creation(&c[0], KB_ACL_RES_TOPIC, "orders", KB_ACL_PAT_LITERAL, "User:alice", "*",
                 KB_ACL_OP_READ, KB_ACL_PERM_ALLOW);
        creation(&c[1], KB_ACL_RES_CLUSTER, "x", KB_ACL_PAT_LITERAL, "User:alice", "*",
                 KB_ACL_OP_ALTER, KB_ACL_PERM_ALLOW);
        creation(&c[2], KB_ACL_RES_TOPIC, "orders", KB_ACL_PAT_LITERAL, "User:bob", "10.0.0.1",
                 KB_ACL_OP_WRITE, KB_ACL_PERM_DENY);
        creation(&c[3], KB_ACL_RES_GROUP, "app-", KB_ACL_PAT_PREFIXED, "User:alice", "*",
                 KB_ACL_OP_READ, KB_ACL_PERM_ALLOW);
        creation(&c[4], KB_ACL_RES_TOPIC, "t", KB_ACL_PAT_MATCH, "User:alice", "*", KB_ACL_OP_READ,
                 KB_ACL_PERM_ALLOW);
        kp_CreateAclsRequest_init(&crq);
        crq.Creations.cnt = 5;
        crq.Creations.v = c;
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_CreateAcls, ver, &crq, &crs, &g_ar), 0);
        CU_ASSERT_EQUAL_FATAL(crs.Results.cnt, 5);
        CU_ASSERT_EQUAL(crs.Results.v[0].ErrorCode, KP_ERR_NONE);
        CU_ASSERT(eq(crs.Results.v[0].ErrorMessage, NULL));
        CU_ASSERT_EQUAL(crs.Results.v[1].ErrorCode, KP_ERR_INVALID_REQUEST);
        CU_ASSERT(eq(crs.Results.v[1].ErrorMessage,
                     "The only valid name for the CLUSTER resource is kafka-cluster"));
        CU_ASSERT_EQUAL(crs.Results.v[2].ErrorCode, KP_ERR_NONE);
        CU_ASSERT_EQUAL(crs.Results.v[3].ErrorCode, KP_ERR_NONE);
        CU_ASSERT_EQUAL(crs.Results.v[4].ErrorCode, KP_ERR_INVALID_REQUEST);
        CU_ASSERT(eq(crs.Results.v[4].ErrorMessage, "Invalid patternType MATCH"));

        /* MATCH on topic "orders": both bindings of the one resource, grouped */
        describe_req(&drq, KB_ACL_RES_TOPIC, "orders", KB_ACL_PAT_MATCH);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DescribeAcls, ver, &drq, &drs, &g_ar), 0);
        CU_ASSERT_EQUAL(drs.ErrorCode, KP_ERR_NONE);
        CU_ASSERT(eq(drs.ErrorMessage, NULL));
        CU_ASSERT_EQUAL_FATAL(drs.Resources.cnt, 1);
        CU_ASSERT_EQUAL(drs.Resources.v[0].ResourceType, KB_ACL_RES_TOPIC);
        CU_ASSERT(eq(drs.Resources.v[0].ResourceName, "orders"));
        CU_ASSERT_EQUAL(drs.Resources.v[0].PatternType, KB_ACL_PAT_LITERAL);
        CU_ASSERT_EQUAL_FATAL(drs.Resources.v[0].Acls.cnt, 2);
        CU_ASSERT(eq(drs.Resources.v[0].Acls.v[0].Principal, "User:alice"));
        CU_ASSERT(eq(drs.Resources.v[0].Acls.v[1].Principal, "User:bob"));
        CU_ASSERT(eq(drs.Resources.v[0].Acls.v[1].Host, "10.0.0.1"));
        CU_ASSERT_EQUAL(drs.Resources.v[0].Acls.v[1].Operation, KB_ACL_OP_WRITE);
        CU_ASSERT_EQUAL(drs.Resources.v[0].Acls.v[1].PermissionType, KB_ACL_PERM_DENY);
        /* everything: two resources */
        describe_req(&drq, KB_ACL_RES_ANY, NULL, KB_ACL_PAT_ANY);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DescribeAcls, ver, &drq, &drs, &g_ar), 0);
        CU_ASSERT_EQUAL(drs.Resources.cnt, 2);
        /* an unknown filter field */
        describe_req(&drq, KB_ACL_RES_ANY, NULL, 0);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DescribeAcls, ver, &drq, &drs, &g_ar), 0);
        CU_ASSERT_EQUAL(drs.ErrorCode, KP_ERR_INVALID_REQUEST);
        CU_ASSERT(eq(drs.ErrorMessage, "Unknown patternFilter."));

        /* delete: filter 0 (bob's DENY), filter 1 unknown, filter 2 every prefixed binding */
        kp_DeleteAclsRequest_init(&xrq);
        for (int i = 0; i < 3; i++) {
            kp_DeleteAclsRequest_DeleteAclsFilter_init(&df[i]);
            df[i].ResourceTypeFilter = KB_ACL_RES_ANY;
            df[i].ResourceNameFilter = S(NULL);
            df[i].PatternTypeFilter = KB_ACL_PAT_ANY;
            df[i].PrincipalFilter = S(NULL);
            df[i].HostFilter = S(NULL);
            df[i].Operation = KB_ACL_OP_ANY;
            df[i].PermissionType = KB_ACL_PERM_ANY;
        }
        df[0].PrincipalFilter = S("User:bob");
        df[1].PermissionType = 0;
        df[2].PatternTypeFilter = KB_ACL_PAT_PREFIXED;
        xrq.Filters.cnt = 3;
        xrq.Filters.v = df;
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DeleteAcls, ver, &xrq, &xrs, &g_ar), 0);
        CU_ASSERT_EQUAL_FATAL(xrs.FilterResults.cnt, 3);
        CU_ASSERT_EQUAL(xrs.FilterResults.v[0].ErrorCode, KP_ERR_NONE);
        CU_ASSERT_EQUAL_FATAL(xrs.FilterResults.v[0].MatchingAcls.cnt, 1);
        CU_ASSERT(eq(xrs.FilterResults.v[0].MatchingAcls.v[0].Principal, "User:bob"));
        CU_ASSERT(eq(xrs.FilterResults.v[0].MatchingAcls.v[0].ResourceName, "orders"));
        CU_ASSERT_EQUAL(xrs.FilterResults.v[0].MatchingAcls.v[0].PermissionType, KB_ACL_PERM_DENY);
        CU_ASSERT_EQUAL(xrs.FilterResults.v[1].ErrorCode, KP_ERR_INVALID_REQUEST);
        CU_ASSERT(eq(xrs.FilterResults.v[1].ErrorMessage, "Unknown entryFilter."));
        CU_ASSERT_EQUAL(xrs.FilterResults.v[1].MatchingAcls.cnt, 0);
        CU_ASSERT_EQUAL_FATAL(xrs.FilterResults.v[2].MatchingAcls.cnt, 1);
        CU_ASSERT(eq(xrs.FilterResults.v[2].MatchingAcls.v[0].ResourceName, "app-"));
        CU_ASSERT_EQUAL(xrs.FilterResults.v[2].MatchingAcls.v[0].PatternType, KB_ACL_PAT_PREFIXED);
        CU_ASSERT_EQUAL(kb_acl_count(g_acl), 1);

        /* the store has what the APIs left: reopen it beside the running one */
        {
            char err[256], logs[600];
            kb_acl_opts_t o = {.enabled = true, .dir = logs};
            kb_acl_t *again;
            snprintf(logs, sizeof(logs), "%s/logs", g_bdir);
            again = kb_acl_new(&o, err, sizeof(err));
            CU_ASSERT_PTR_NOT_NULL_FATAL(again);
            CU_ASSERT_EQUAL(kb_acl_count(again), 1);
            CU_ASSERT(
                AZ(again, "User:alice", NULL, KB_ACL_OP_DESCRIBE, KB_ACL_RES_TOPIC, "orders"));
            kb_acl_free(again);
        }
        api_down();
    }
}

static void test_api_security_disabled(void)
{
    for (int16_t ver = 1; ver <= 3; ver++) {
        kp_CreateAclsRequest_AclCreation_t c;
        kp_CreateAclsRequest_t crq;
        kp_CreateAclsResponse_t crs;
        kp_DescribeAclsRequest_t drq;
        kp_DescribeAclsResponse_t drs;
        kp_DeleteAclsRequest_DeleteAclsFilter_t df;
        kp_DeleteAclsRequest_t xrq;
        kp_DeleteAclsResponse_t xrs;

        api_up(false);
        creation(&c, KB_ACL_RES_TOPIC, "orders", KB_ACL_PAT_LITERAL, "User:alice", "*",
                 KB_ACL_OP_READ, KB_ACL_PERM_ALLOW);
        kp_CreateAclsRequest_init(&crq);
        crq.Creations.cnt = 1;
        crq.Creations.v = &c;
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_CreateAcls, ver, &crq, &crs, &g_ar), 0);
        CU_ASSERT_EQUAL_FATAL(crs.Results.cnt, 1);
        CU_ASSERT_EQUAL(crs.Results.v[0].ErrorCode, KP_ERR_SECURITY_DISABLED);
        CU_ASSERT(eq(crs.Results.v[0].ErrorMessage, "No Authorizer is configured."));
        CU_ASSERT_EQUAL(kb_acl_count(g_acl), 0);

        describe_req(&drq, KB_ACL_RES_ANY, NULL, KB_ACL_PAT_ANY);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DescribeAcls, ver, &drq, &drs, &g_ar), 0);
        CU_ASSERT_EQUAL(drs.ErrorCode, KP_ERR_SECURITY_DISABLED);
        CU_ASSERT(eq(drs.ErrorMessage, "No Authorizer is configured on the broker"));

        kp_DeleteAclsRequest_DeleteAclsFilter_init(&df);
        df.ResourceTypeFilter = KB_ACL_RES_ANY;
        df.PatternTypeFilter = KB_ACL_PAT_ANY;
        df.ResourceNameFilter = df.PrincipalFilter = df.HostFilter = S(NULL);
        df.Operation = KB_ACL_OP_ANY;
        df.PermissionType = KB_ACL_PERM_ANY;
        kp_DeleteAclsRequest_init(&xrq);
        xrq.Filters.cnt = 1;
        xrq.Filters.v = &df;
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DeleteAcls, ver, &xrq, &xrs, &g_ar), 0);
        CU_ASSERT_EQUAL_FATAL(xrs.FilterResults.cnt, 1);
        CU_ASSERT_EQUAL(xrs.FilterResults.v[0].ErrorCode, KP_ERR_SECURITY_DISABLED);
        CU_ASSERT(eq(xrs.FilterResults.v[0].ErrorMessage, "No Authorizer is configured."));
        api_down();
    }
}

int main(void)
{
    CU_pSuite s;
    unsigned fails;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("broker_acl_match", NULL, NULL);
    CU_add_test(s, "resource pattern filters: ANY, MATCH, LITERAL, PREFIXED", test_filter_resource);
    CU_add_test(s, "entry filters and unknown filter fields", test_filter_entry);
    CU_add_test(s, "CreateAcls validation with Kafka's messages", test_validate);
    s = CU_add_suite("broker_acl_authorizer", NULL, NULL);
    CU_add_test(s, "no authorizer, internal principal, super.users",
                test_authz_disabled_internal_super);
    CU_add_test(s, "a bad super.users entry is refused", test_authz_super_users_refused);
    CU_add_test(s, "DENY wins, wildcard principal/host/resource, prefixed",
                test_authz_deny_wins_and_wildcards);
    CU_add_test(s, "implied operations (ALLOW only), ALL", test_authz_implied_ops);
    CU_add_test(s, "allow.everyone.if.no.acl.found", test_authz_allow_everyone);
    s = CU_add_suite("broker_acl_image", NULL, NULL);
    CU_add_test(s, "apply add / remove by id", test_image_apply);
    CU_add_test(s, "create duplicates, delete with overlapping filters",
                test_create_delete_semantics);
    CU_add_test(s, "AccessControlEntryRecord / RemoveAccessControlEntryRecord replay",
                test_mrec_replay);
    CU_add_test(s, "the ACL records as kb_mrec_t: round trip, refused input", test_mrec_kb_record);
    CU_add_test(s, "kb_meta: ACL records to listeners, late-listener snapshot, reopen",
                test_meta_acl_records);
    s = CU_add_suite("broker_acl_store", store_setup, store_teardown);
    CU_add_test(s, "bindings and ids survive a reopen; deletes too", test_store_reopen);
    CU_add_test(s, "every corrupt or truncated file is refused, naming it", test_store_corrupt);
    CU_add_test(s, "an unwritable store refuses the change; an unreadable one the start",
                test_store_unwritable);
    s = CU_add_suite("broker_acl_api", NULL, NULL);
    CU_add_test(s, "CreateAcls / DescribeAcls / DeleteAcls v1-v3 through the codec",
                test_api_round_trip);
    CU_add_test(s, "no authorizer: SECURITY_DISABLED", test_api_security_disabled);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
