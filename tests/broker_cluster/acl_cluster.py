#!/usr/bin/env python3
"""ACLs in a three-node kbroker cluster (acl_cluster.sh), with kafka-python; each admin client is
pinned to its node (its requests go to that node only).

PHASE "change": node 1's old per-node binding ("acl-old", migrated into the metadata log at its
start) is seen on every node; CreateAcls through node 2 (a broker-only node: forwarded to the controller) is
seen by DescribeAcls on nodes 1 and 3; DeleteAcls through node 3 removes one binding everywhere;
the other ("acl-keep") stays.
PHASE "restart": after node 3 restarted, every node has "acl-keep" and not the deleted binding.
Polls with deadlines, never sleeps as synchronisation.

usage: acl_cluster.py PHASE HOST:PORT(node 1) HOST:PORT(node 2) HOST:PORT(node 3)"""
import sys
import time

from kafka import KafkaAdminClient
from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType,
                         ACLResourcePatternType, ResourcePattern, ResourcePatternFilter,
                         ResourceType)

PHASE = sys.argv[1]
NODES = sys.argv[2:5]
FAILS = 0
DEADLINE = 20.0


def check(cond, what):
    global FAILS
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        FAILS += 1


def admin(i):
    a = KafkaAdminClient(bootstrap_servers=NODES[i], client_id="kbcl-acl-%d" % (i + 1),
                         request_timeout_ms=20000)
    a._manager.least_loaded_node = lambda: i + 1  # every request to node i + 1
    return a


def poll(fn, what):
    """fn() until it returns a true value or the deadline passes."""
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        try:
            if fn():
                check(True, what)
                return True
        except Exception:  # a node still starting
            pass
        time.sleep(0.05)  # pacing of the polling loop, not synchronisation
    check(False, what)
    return False


def binding(name, op):
    return ACL(principal="User:alice", host="*", operation=op,
               permission_type=ACLPermissionType.ALLOW,
               resource_pattern=ResourcePattern(ResourceType.TOPIC, name,
                                                ACLResourcePatternType.LITERAL))


def names(a):
    acls, err = a.describe_acls(ACLFilter(
        principal=None, host=None, operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(ResourceType.ANY, None,
                                               ACLResourcePatternType.ANY)))
    return sorted(x.resource_pattern.resource_name for x in acls)




def three_unfenced(i):
    """A fresh client of node i + 1 lists three unfenced brokers (a client made earlier may
    never learn of a broker registering later)."""
    a = admin(i)
    try:
        c = a.describe_cluster()
        return len(c["brokers"]) == 3 and not any(b.get("is_fenced") for b in c["brokers"])
    finally:
        a.close()


for i in range(3):
    poll(lambda i=i: three_unfenced(i), "node %d lists three unfenced brokers" % (i + 1))
admins = [admin(i) for i in range(3)] if PHASE == "change" else []
if PHASE == "change":
    res = admins[1].create_acls([binding("acl-gone", ACLOperation.READ),
                                 binding("acl-keep", ACLOperation.WRITE)])
    check(len(res["succeeded"]) == 2 and not res["failed"],
          "create_acls through node 2: %s" % res["failed"])
    for i in range(3):
        poll(lambda i=i: names(admins[i]) == ["acl-gone", "acl-keep", "acl-old"],
             "node %d describes both bindings and node 1's migrated acl-old" % (i + 1))
    res = admins[2].delete_acls([ACLFilter(
        principal=None, host=None, operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, "acl-gone",
                                               ACLResourcePatternType.LITERAL))])
    matched = [m for _, ms, _ in res for m in ms]
    check(len(matched) == 1, "delete_acls through node 3 matched one binding: %s" % res)
    for i in range(3):
        poll(lambda i=i: names(admins[i]) == ["acl-keep", "acl-old"],
             "node %d: acl-gone removed, acl-keep left" % (i + 1))
elif PHASE == "restart":
    def fresh_names(i):
        """A new client each try: one made while node 3 re-registers never learns of it."""
        a = admin(i)
        try:
            return names(a)
        finally:
            a.close()

    for i in range(3):
        poll(lambda i=i: fresh_names(i) == ["acl-keep", "acl-old"],
             "after node 3 restarted, node %d describes acl-keep alone" % (i + 1))
for a in admins:
    a.close()
print("FAILED" if FAILS else "ok", flush=True)
sys.exit(1 if FAILS else 0)
