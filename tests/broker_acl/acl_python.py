"""acl_python.py BOOTSTRAP PHASE -- kafka-python's ACL admin calls against a running kbroker.

PHASE "create": create_acls (valid ones, Kafka's refusals), describe_acls with LITERAL, PREFIXED,
MATCH and ANY filters, delete_acls; leaves the bindings of resource "py-keep" behind.
PHASE "restart": after a kbroker restart, the "py-keep" bindings and those the Java phase left
("jv-keep") are there; deletes the Python ones.
PHASE "disabled": a kbroker without an authorizer answers SECURITY_DISABLED.
Prints one line per check; exit 1 on a failure.
"""
import sys

from kafka import KafkaAdminClient
from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType,
                         ACLResourcePatternType, ResourcePattern, ResourcePatternFilter,
                         ResourceType)
from kafka.errors import KafkaError

BOOT, PHASE = sys.argv[1], sys.argv[2]
FAILS = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + "python " + what, flush=True)
    if not cond:
        FAILS.append(what)


def acl(principal, op, perm, rtype, name, pattern=ACLResourcePatternType.LITERAL, host="*"):
    return ACL(principal=principal, host=host, operation=op, permission_type=perm,
               resource_pattern=ResourcePattern(rtype, name, pattern))


def flt(rtype=ResourceType.ANY, name=None, pattern=ACLResourcePatternType.ANY, principal=None,
        host=None, op=ACLOperation.ANY, perm=ACLPermissionType.ANY):
    return ACLFilter(principal=principal, host=host, operation=op, permission_type=perm,
                     resource_pattern=ResourcePatternFilter(rtype, name, pattern))


def key(a):
    p = a.resource_pattern
    return (int(p.resource_type), p.resource_name, int(p.pattern_type), a.principal, a.host,
            int(a.operation), int(a.permission_type))


def described(f):
    acls, err = admin.describe_acls(f)
    return sorted(key(a) for a in acls)


admin = KafkaAdminClient(bootstrap_servers=BOOT, client_id="kbacl-py", request_timeout_ms=20000)
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE, MATCH = (ACLResourcePatternType.LITERAL, ACLResourcePatternType.PREFIXED,
                   ACLResourcePatternType.MATCH)
R, W, D, ALL = ACLOperation.READ, ACLOperation.WRITE, ACLOperation.DESCRIBE, ACLOperation.ALL
ALLOW, DENY = ACLPermissionType.ALLOW, ACLPermissionType.DENY

if PHASE == "disabled":
    try:
        admin.describe_acls(flt())
        check(False, "describe_acls without an authorizer refused")
    except KafkaError as e:
        check(type(e).__name__ == "SecurityDisabledError",
              "describe_acls without an authorizer: %s" % type(e).__name__)
    r = admin.create_acls([acl("User:a", R, ALLOW, T, "t")])
    check(len(r["failed"]) == 1 and r["failed"][0].__name__ == "SecurityDisabledError",
          "create_acls without an authorizer: %s" % r["failed"])

elif PHASE == "create":
    good = [acl("User:alice", R, ALLOW, T, "py-orders"),
            acl("User:bob", W, DENY, T, "py-orders", host="10.0.0.7"),
            acl("User:*", R, ALLOW, T, "*"),
            acl("User:alice", D, ALLOW, T, "py-", PRE),
            acl("User:carol", ALL, ALLOW, G, "py-app", LIT),
            acl("User:alice", ACLOperation.ALTER, ALLOW, C, "kafka-cluster"),
            acl("User:keeper", R, ALLOW, T, "py-keep"),
            acl("User:keeper", W, DENY, T, "py-keep", PRE, host="192.0.2.1")]
    r = admin.create_acls(good)
    check(len(r["succeeded"]) == len(good) and not r["failed"],
          "create_acls: %d created (%s)" % (len(r["succeeded"]), r["failed"]))
    r = admin.create_acls([good[0]])
    check(len(r["succeeded"]) == 1, "create_acls of an existing binding succeeds")
    r = admin.create_acls([acl("User:alice", R, ALLOW, C, "my-cluster"),
                           acl("alice", R, ALLOW, T, "t")])
    check(len(r["failed"]) == 2 and all(e.__name__ == "InvalidRequestError" for e in r["failed"]),
          "create_acls: bad cluster name and untyped principal refused: %s" % r["failed"])

    check(described(flt(T, "py-orders", LIT)) ==
          sorted([key(good[0]), key(good[1])]), "describe_acls LITERAL py-orders")
    check(described(flt(T, "py-", PRE)) == [key(good[3])], "describe_acls PREFIXED py-")
    check(described(flt(T, "py-orders", MATCH)) ==
          sorted([key(good[0]), key(good[1]), key(good[2]), key(good[3])]),
          "describe_acls MATCH py-orders: literal, '*' and prefixed")
    check(described(flt(principal="User:carol")) == [key(good[4])], "describe_acls by principal")
    check(described(flt(C)) == [key(good[5])], "describe_acls CLUSTER")
    check(len(described(flt())) == len(good), "describe_acls ANY: all %d" % len(good))

    res = admin.delete_acls([flt(T, "py-orders", LIT, principal="User:bob"),
                             flt(G, None, ACLResourcePatternType.ANY)])
    check(len(res) == 2 and [key(a) for a in res[0][1]] == [key(good[1])]
          and res[0][2].__name__ == "NoError", "delete_acls: bob's DENY")
    check([key(a) for a in res[1][1]] == [key(good[4])], "delete_acls: every GROUP binding")
    check(len(described(flt())) == len(good) - 2, "describe_acls after delete_acls")
    res = admin.delete_acls([flt(T, "py-orders", MATCH, op=R)])
    check(sorted(key(a) for a in res[0][1]) == sorted([key(good[0]), key(good[2])]),
          "delete_acls MATCH py-orders READ: literal and '*'")
    check(len(described(flt())) == len(good) - 4, "describe_acls after MATCH delete")
    res = admin.delete_acls([flt(T, "py-", PRE), flt(C)])
    check(len(res[0][1]) == 1 and len(res[1][1]) == 1, "delete_acls prefixed and cluster")
    check(described(flt()) == sorted([key(good[6]), key(good[7])]), "only py-keep is left")

elif PHASE == "restart":
    keep = sorted([key(acl("User:keeper", R, ALLOW, T, "py-keep")),
                   key(acl("User:keeper", W, DENY, T, "py-keep", PRE, host="192.0.2.1"))])
    check(described(flt(T, "py-keep", ACLResourcePatternType.ANY)) == keep,
          "py-keep bindings survived the restart")
    check(described(flt(principal="User:jkeeper")) ==
          [key(acl("User:jkeeper", ALL, DENY, G, "jv-keep", PRE))],
          "the Java client's jv-keep binding survived the restart")
    res = admin.delete_acls([flt(T, "py-keep", ACLResourcePatternType.ANY)])
    check(len(res[0][1]) == 2, "delete_acls py-keep")
    check(described(flt(T)) == [], "no topic binding left")
else:
    sys.exit("unknown phase " + PHASE)

admin.close()
sys.exit(1 if FAILS else 0)
