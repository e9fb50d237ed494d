/*
 * km_sync_aclplan.h - the pure part of the ACL sync (km_sync_acls.c, docs/plugin.md "ACLs"):
 * ACL bindings as sorted sets, the mirror's `acls.include` rules (kip-1279-facts §8.3) and the
 * diff of one run (source, destination and remembered sets -> creates, deletes and the new
 * remembered set). No host calls, so the unit tests (tests/plugin_sync/sync_acls_test.c) drive
 * it directly.
 *
 * Owner: the ACL sync run that built them (one run at a time per mirror, coordinator loop).
 */
#ifndef KM_SYNC_ACLPLAN_H
#define KM_SYNC_ACLPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/km_config_types.h"
#include "util/km_err.h"
#include "util/km_pattern.h"
#include "util/km_types.h"

/* Kafka's wire codes (ResourceType, PatternType, AclOperation, AclPermissionType). */
#define KM_ACL_RES_ANY            1
#define KM_ACL_RES_TOPIC          2
#define KM_ACL_RES_GROUP          3
#define KM_ACL_RES_CLUSTER        4
#define KM_ACL_RES_CLUSTER_MIRROR 8 /**< provisional (proto/schema/provisional.kps) */
#define KM_ACL_PAT_ANY            1
#define KM_ACL_PAT_LITERAL        3
#define KM_ACL_PAT_PREFIXED       4
#define KM_ACL_OP_ANY             1
#define KM_ACL_PERM_ANY           1

/** One binding. Strings owned by the set that holds it. */
typedef struct km_acl {
    int8_t rtype;
    char *name;
    int8_t ptype;
    char *principal;
    char *host;
    int8_t op;
    int8_t perm;
} km_acl_t;

/** A set of bindings; sorted and without duplicates after km_acl_set_sort(). */
typedef struct km_acl_set {
    km_acl_t *v;
    size_t n, cap;
} km_acl_set_t;

/** Total order over all seven fields (what "the same binding" means here). @thread any */
int km_acl_cmp(const km_acl_t *a, const km_acl_t *b);

/**
 * Append a copy of a binding whose strings are given with their lengths (not NUL-terminated;
 * they come from decoded answers or records). A string with a NUL byte or a negative length
 * (null) is refused.
 * @return KM_OK, KM_ERR_INVALID (refused, nothing added), KM_ERR_NOMEM
 * @thread coord
 */
km_err_t km_acl_set_addn(km_plugin_t *cm, km_acl_set_t *s, int8_t rtype, const char *name,
                         int32_t name_len, int8_t ptype, const char *principal,
                         int32_t principal_len, const char *host, int32_t host_len, int8_t op,
                         int8_t perm);

/** km_acl_set_addn of a binding with NUL-terminated strings. @thread coord */
km_err_t km_acl_set_add(km_plugin_t *cm, km_acl_set_t *s, const km_acl_t *b);

/** Sort the set and drop duplicates. @thread coord */
void km_acl_set_sort(km_plugin_t *cm, km_acl_set_t *s);

/** Is b in s (sorted)? @thread any */
bool km_acl_set_has(const km_acl_set_t *s, const km_acl_t *b);

/** Same bindings (both sorted)? @thread any */
bool km_acl_set_equal(const km_acl_set_t *a, const km_acl_set_t *b);

/** Free every binding and the array; the set is empty after. @thread coord */
void km_acl_set_free(km_plugin_t *cm, km_acl_set_t *s);

/** "TOPIC:PREFIXED:sa- User:alice@* READ ALLOW" into buf (truncated to size). @thread any */
void km_acl_format(const km_acl_t *b, char *buf, size_t size);

/** One rule of acls.include: -1 / NULL fields match anything (`*` or left out). */
typedef struct km_acl_rule {
    int rtype;
    km_pattern_t *name; /**< whole-name regular expression; NULL: any */
    int op;
    int perm;
    char *principal; /**< exact; NULL: any */
} km_acl_rule_t;

typedef struct km_acl_rules {
    km_acl_rule_t *v;
    size_t n;
} km_acl_rules_t;

/**
 * Parse the rules of acls.include (one list entry per rule:
 * `resourceType;resourceName;operation;permissionType;principal`, trailing fields optional,
 * `*` = any; names of types, operations and permissions as Kafka's enums, case-insensitive).
 * errstr names the rule and what is wrong with it.
 * @return KM_OK, KM_ERR_INVALID (a bad rule: out holds nothing), KM_ERR_NOMEM
 * @thread coord
 */
km_err_t km_acl_rules_parse(km_plugin_t *cm, const km_strlist_t *list, km_acl_rules_t *out,
                            char *errstr, size_t errstr_size);

/**
 * The syntax of the rules only (fields, names; not the regular expressions, which need the
 * plugin's allocator): what CreateMirror checks (core/km_config_tables.c).
 * @return KM_OK, KM_ERR_CONFIG (errstr names the rule)
 * @thread any
 */
km_err_t km_acl_rules_check(const km_strlist_t *list, char *errstr, size_t errstr_size);

/**
 * Does some rule select binding b? A CLUSTER_MIRROR binding (the mirror's own administrative
 * ACLs) only by a rule that names that resource type.
 * @return KM_OK with *matched set; KM_ERR_LIMIT / KM_ERR_NOMEM from the name pattern
 * @thread coord
 */
km_err_t km_acl_rules_match(const km_acl_rules_t *rules, const km_acl_t *b, bool *matched);

void km_acl_rules_free(km_plugin_t *cm, km_acl_rules_t *rules);

/** What one run does (every set sorted). */
typedef struct km_acl_plan {
    km_acl_set_t creates; /**< selected on the source, missing on the destination */
    km_acl_set_t deletes; /**< remembered, no longer selected on the source */
    km_acl_set_t keep;    /**< remembered, still selected on the source and on the destination */
} km_acl_plan_t;

/**
 * The diff. src = the source's bindings the rules select, dst = every binding of the
 * destination, mem = the bindings this mirror's sync created earlier (SYNCED_ACLS). All
 * sorted. A remembered binding the source no longer has is deleted even when the destination
 * does not list it (its image may lag a creation); one the destination lacks but the source
 * has is created again; a destination binding not remembered is never deleted.
 * @return KM_OK, KM_ERR_NOMEM (plan empty)
 * @thread coord
 */
km_err_t km_acl_plan_make(km_plugin_t *cm, const km_acl_set_t *src, const km_acl_set_t *dst,
                          const km_acl_set_t *mem, km_acl_plan_t *plan);

/**
 * The new remembered set once the requests answered: keep, plus the creates whose CreateAcls
 * succeeded (created[i]), plus the deletes whose DeleteAcls failed (!deleted[i]). Sorted.
 * @return KM_OK, KM_ERR_NOMEM
 * @thread coord
 */
km_err_t km_acl_plan_remembered(km_plugin_t *cm, const km_acl_plan_t *plan, const bool *created,
                                const bool *deleted, km_acl_set_t *out);

void km_acl_plan_free(km_plugin_t *cm, km_acl_plan_t *plan);

/* ---- mirrors whose source has no authorizer (logged once each) --------------------------- */

/** A set of mirror names (km_plugin_t.acl_memo, created on first use). */
struct km_acl_memo {
    char **v;
    size_t n;
};

/** Add mirror to *memo (created if NULL). @return true if it was not there (log it), also
 *  when memory ran out (then it is logged again next time). @thread coord */
bool km_acl_memo_add(km_plugin_t *cm, struct km_acl_memo **memo, const char *mirror);
/** Remove mirror (NULL memo fine). @thread coord */
void km_acl_memo_remove(km_plugin_t *cm, struct km_acl_memo *memo, const char *mirror);
/** Free *memo and set it NULL. @thread host main (fini, after the loop stopped) */
void km_acl_memo_free(km_plugin_t *cm, struct km_acl_memo **memo);

#endif /* KM_SYNC_ACLPLAN_H */
