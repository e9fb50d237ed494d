/*
 * kb_acl.h -- kbroker's ACLs: the image of ACL bindings, Kafka's binding filters, the authorizer
 * and the durable store behind them.
 *
 * One kb_acl_t per broker (the "acl" module, kb_aclmod.h). It holds:
 *   - the image: every binding (resource type, resource name, pattern type, principal, host,
 *     operation, permission) with a 16-byte id, the id a future AccessControlEntryRecord /
 *     RemoveAccessControlEntryRecord carries (docs/design.md C2). kb_acl_apply_add() and
 *     kb_acl_apply_remove() change the image only; they are what a metadata-record replay calls;
 *   - changes: with a commit hook (kb_acl_set_commit, the kbroker module) they go to the
 *     metadata log and come back as records; without one, to
 *   - the store: `<dir>/kbroker-acls`, the whole image in one CRC-32C checked file, rewritten
 *     crash-safely (temp file, fsync, rename, directory fsync) by kb_acl_create() and
 *     kb_acl_delete(), which write the file first and apply to the image only once it is durable;
 *   - the authorizer settings: enabled (authorizer.class.name set), super.users,
 *     allow.everyone.if.no.acl.found.
 *
 * Codes are Kafka's (ResourceType, PatternType, AclOperation, AclPermissionType), plus the
 * provisional ClusterMirror resource type (KP_ACL_RESOURCE_TYPE_CLUSTER_MIRROR).
 *
 * docs/broker.md, section "ACLs".
 *
 * @thread any: the image is guarded by a read-write lock, mutations are serialised by a mutex.
 */
#ifndef KB_ACL_H
#define KB_ACL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Resource types (Kafka's ResourceType codes). */
#define KB_ACL_RES_UNKNOWN          0
#define KB_ACL_RES_ANY              1
#define KB_ACL_RES_TOPIC            2
#define KB_ACL_RES_GROUP            3
#define KB_ACL_RES_CLUSTER          4
#define KB_ACL_RES_TRANSACTIONAL_ID 5
#define KB_ACL_RES_DELEGATION_TOKEN 6
#define KB_ACL_RES_USER             7
#define KB_ACL_RES_CLUSTER_MIRROR   8 /**< provisional (proto/schema/provisional.kps) */

/* Pattern types (Kafka's PatternType codes). */
#define KB_ACL_PAT_UNKNOWN  0
#define KB_ACL_PAT_ANY      1
#define KB_ACL_PAT_MATCH    2
#define KB_ACL_PAT_LITERAL  3
#define KB_ACL_PAT_PREFIXED 4

/* Operations (Kafka's AclOperation codes). */
#define KB_ACL_OP_UNKNOWN          0
#define KB_ACL_OP_ANY              1
#define KB_ACL_OP_ALL              2
#define KB_ACL_OP_READ             3
#define KB_ACL_OP_WRITE            4
#define KB_ACL_OP_CREATE           5
#define KB_ACL_OP_DELETE           6
#define KB_ACL_OP_ALTER            7
#define KB_ACL_OP_DESCRIBE         8
#define KB_ACL_OP_CLUSTER_ACTION   9
#define KB_ACL_OP_DESCRIBE_CONFIGS 10
#define KB_ACL_OP_ALTER_CONFIGS    11
#define KB_ACL_OP_IDEMPOTENT_WRITE 12
#define KB_ACL_OP_CREATE_TOKENS    13
#define KB_ACL_OP_DESCRIBE_TOKENS  14

/* Permission types (Kafka's AclPermissionType codes). */
#define KB_ACL_PERM_UNKNOWN 0
#define KB_ACL_PERM_ANY     1
#define KB_ACL_PERM_DENY    2
#define KB_ACL_PERM_ALLOW   3

/** The name of the one CLUSTER resource. */
#define KB_ACL_CLUSTER_NAME "kafka-cluster"
/** Wildcards: a literal resource name, a principal, a host. */
#define KB_ACL_WILDCARD           "*"
#define KB_ACL_WILDCARD_PRINCIPAL "User:*"

/** The store's file name inside the first log directory. */
#define KB_ACL_FILE "kbroker-acls"

/** One binding. In the image and in kb_acl_list_t the strings are owned (malloc); as an
 *  argument they are borrowed. Strings are NUL-terminated and never NULL. */
typedef struct kb_acl_binding_s {
    uint8_t id[16]; /**< random, never all zero; the metadata record id */
    int8_t restype; /**< KB_ACL_RES_* (not ANY/UNKNOWN) */
    int8_t pattern; /**< KB_ACL_PAT_LITERAL or KB_ACL_PAT_PREFIXED */
    int8_t op;      /**< KB_ACL_OP_* (not ANY/UNKNOWN) */
    int8_t perm;    /**< KB_ACL_PERM_DENY or KB_ACL_PERM_ALLOW */
    char *name;
    char *principal; /**< "Type:name" */
    char *host;      /**< an address or "*" */
} kb_acl_binding_t;

/** A DescribeAcls / DeleteAcls filter (Kafka's AclBindingFilter). NULL strings match anything.
 *  Strings borrowed. */
typedef struct kb_acl_filter_s {
    int8_t restype; /**< KB_ACL_RES_ANY or one type */
    int8_t pattern; /**< ANY, MATCH, LITERAL or PREFIXED */
    int8_t op;      /**< KB_ACL_OP_ANY or one operation */
    int8_t perm;    /**< KB_ACL_PERM_ANY, DENY or ALLOW */
    const char *name;
    const char *principal;
    const char *host;
    bool none; /**< match nothing (a filter string the image cannot contain, e.g. with a NUL) */
} kb_acl_filter_t;

/** A list of bindings (deep copies, owned). Free with kb_acl_list_free(). */
typedef struct kb_acl_list_s {
    kb_acl_binding_t *v;
    size_t cnt;
} kb_acl_list_t;

typedef struct kb_acl_s kb_acl_t;

typedef struct kb_acl_opts_s {
    const char *dir;         /**< directory of the store; NULL keeps the image in memory only */
    bool enabled;            /**< an authorizer is configured (authorizer.class.name) */
    const char *super_users; /**< super.users: "User:a;User:b", may be NULL */
    bool allow_if_no_acl;    /**< allow.everyone.if.no.acl.found */
} kb_acl_opts_t;

/**
 * Create the ACL component and load `<dir>/kbroker-acls` when it exists.
 * @return the component, or NULL with a message in @p errstr: a super.users entry that is not
 *         "Type:name", a store that cannot be read or is corrupt (the message names the file),
 *         out of memory.
 */
kb_acl_t *kb_acl_new(const kb_acl_opts_t *o, char *errstr, size_t errstr_size);
/** Free it (NULL is fine). No other call may be running. */
void kb_acl_free(kb_acl_t *acl);

/** Whether an authorizer is configured (DescribeAcls & co. answer SECURITY_DISABLED if not). */
bool kb_acl_enabled(const kb_acl_t *acl);

/** Number of bindings in the image. */
size_t kb_acl_count(kb_acl_t *acl);

/* ---- the image (no persistence) ---------------------------------------------------------- */

/**
 * Add @p b (copied, id included) to the image, as replaying an AccessControlEntryRecord does.
 * @return 0, KB_E_EXISTS (a binding with this id or with the same content is there: nothing
 *         changes), KB_E_INVALID (a value the image cannot hold, see kb_acl_validate), KB_E_NOMEM.
 */
int kb_acl_apply_add(kb_acl_t *acl, const kb_acl_binding_t *b);
/** Remove the binding with id @p id (RemoveAccessControlEntryRecord). 0 or KB_E_NOT_FOUND. */
int kb_acl_apply_remove(kb_acl_t *acl, const uint8_t id[16]);

/* ---- matching ----------------------------------------------------------------------------- */

/** Kafka's ResourcePatternFilter + AccessControlEntryFilter match of one binding. */
bool kb_acl_filter_matches(const kb_acl_filter_t *f, const kb_acl_binding_t *b);
/** Whether the filter has an UNKNOWN field (DeleteAcls answers INVALID_REQUEST). @p what gets
 *  "patternFilter" or "entryFilter" (Kafka's message words). */
bool kb_acl_filter_unknown(const kb_acl_filter_t *f, const char **what);

/**
 * Kafka's checks of one binding of CreateAcls (the broker's, then the controller's).
 * @return KP_ERR_NONE, or KP_ERR_INVALID_REQUEST with the message in @p msg.
 */
int16_t kb_acl_validate(const kb_acl_binding_t *b, char *msg, size_t msg_size);

/* ---- the operations behind the APIs ------------------------------------------------------ */

/** Every binding matching @p f into @p out, sorted by resource (type, name, pattern), then in
 *  creation order. 0 or KB_E_NOMEM. */
int kb_acl_describe(kb_acl_t *acl, const kb_acl_filter_t *f, kb_acl_list_t *out);

/**
 * Add @p n validated bindings (ids are assigned here), persist, then apply. A binding equal to
 * one already present (or earlier in @p v) changes nothing and still succeeds (Kafka).
 * @return 0, or KB_E_IO / KB_E_NOMEM with nothing changed.
 */
int kb_acl_create(kb_acl_t *acl, const kb_acl_binding_t *v, size_t n);

/**
 * Remove every binding that matches one of the @p n filters. @p out (n lists) gets, per filter,
 * the bindings it matched in the image before the call (a binding matching two filters is in
 * both, as in Kafka). Persisted before the image changes.
 * @return 0, or KB_E_IO / KB_E_NOMEM with nothing changed (the lists are then empty).
 */
int kb_acl_delete(kb_acl_t *acl, const kb_acl_filter_t *f, size_t n, kb_acl_list_t *out);

void kb_acl_list_free(kb_acl_list_t *l);

/**
 * Where changes go in a cluster (docs/design.md C2): the metadata log. kb_acl_create() and
 * kb_acl_delete() hand the bindings to add (ids assigned) and the ids to remove to @p fn, with
 * the mutation mutex held, instead of writing the store and the image; @p fn commits them as
 * AccessControlEntryRecords / RemoveAccessControlEntryRecords and returns once they are
 * applied to the image (kb_acl_apply_add / kb_acl_apply_remove, from the records, must not
 * call back into kb_acl_create / kb_acl_delete). Returns 0, KB_E_STATE (not the controller),
 * KB_E_IO or KB_E_NOMEM. Set before the APIs are served.
 */
typedef int(kb_acl_commit_fn)(void *opaque, const kb_acl_binding_t *add, size_t nadd,
                              const uint8_t (*rm)[16], size_t nrm);
void kb_acl_set_commit(kb_acl_t *acl, kb_acl_commit_fn *fn, void *opaque);

/** Every binding of the image (deep copies) into @p out. 0 or KB_E_NOMEM. */
int kb_acl_all(kb_acl_t *acl, kb_acl_list_t *out);

/* ---- the authorizer ----------------------------------------------------------------------- */

/**
 * Kafka's StandardAuthorizer decision for @p principal ("Type:name") connecting from @p host
 * (an address without port; NULL matches only "*" ACLs) doing @p op on resource @p restype /
 * @p name (a literal name):
 *   - no authorizer configured, the internal principal (KB_ACL_INTERNAL_PRINCIPAL) or a
 *     super user: allowed;
 *   - a matching DENY binding: denied (DENY wins); a matching ALLOW binding: allowed;
 *   - no binding at all on the resource: allow.everyone.if.no.acl.found; else denied.
 * Bindings match by resource (literal name, literal "*", prefixed), principal (equal or
 * "User:*"), host (equal or "*") and operation (ALL matches every operation; an ALLOW of READ,
 * WRITE, DELETE or ALTER also allows DESCRIBE, an ALLOW of ALTER_CONFIGS also DESCRIBE_CONFIGS).
 * ANY/UNKNOWN operations or resource types, and a NULL principal or name, are denied.
 */
bool kb_acl_authorize(kb_acl_t *acl, const char *principal, const char *host, int8_t op,
                      int8_t restype, const char *name);

/** The principal of requests the broker makes to itself (KB_PRINCIPAL_INTERNAL of broker/api). */
#define KB_ACL_INTERNAL_PRINCIPAL "User:__kbroker"

/* ---- names (log lines, messages) ---------------------------------------------------------- */

const char *kb_acl_restype_name(int8_t v);
const char *kb_acl_pattern_name(int8_t v);
const char *kb_acl_op_name(int8_t v);
const char *kb_acl_perm_name(int8_t v);

#endif /* KB_ACL_H */
