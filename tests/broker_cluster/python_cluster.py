#!/usr/bin/env python3
"""kafka-python against a three-node kbroker cluster (python_cluster.sh): every node lists the
three brokers; a topic created through node 3 (replication factor 3) shows the same topic id,
leaders, replicas and ISR on every node; a config change through node 2 is seen on all nodes.
Polls with deadlines, never sleeps as synchronisation.

usage: python_cluster.py HOST:PORT(node 1) HOST:PORT(node 2) HOST:PORT(node 3)"""
import sys
import time

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

NODES = sys.argv[1:4]
FAILS = 0
DEADLINE = 20.0


def check(cond, what):
    global FAILS
    if not cond:
        FAILS += 1
        print("FAIL:", what, flush=True)


def admin(i):
    return KafkaAdminClient(bootstrap_servers=NODES[i], client_id="kbcl-py-%d" % (i + 1),
                            request_timeout_ms=20000)


def poll(fn, what):
    """fn() until it returns a true value or the deadline passes; the last value."""
    end = time.monotonic() + DEADLINE
    val = None
    while time.monotonic() < end:
        try:
            val = fn()
        except Exception as e:  # a broker may not know the topic yet
            val = None
            last = e
        if val:
            return val
        time.sleep(0.05)  # pacing of the polling loop, not synchronisation
    check(False, what)
    return val


admins = [admin(i) for i in range(3)]

# ---- every node lists every broker --------------------------------------------------------------
for i, a in enumerate(admins):
    # kafka-python asks for fenced brokers too: wait until all three are unfenced
    cl = poll(lambda: (lambda c: c if len(c["brokers"]) == 3 and
                       not any(b.get("is_fenced") for b in c["brokers"]) else None)(
                           a.describe_cluster()),
              "describe_cluster on node %d lists three unfenced brokers" % (i + 1))
    if cl:
        ids = sorted(b["broker_id"] for b in cl["brokers"])
        check(ids == [1, 2, 3], "describe_cluster on node %d: ids %s" % (i + 1, ids))
        check(cl["controller_id"] in (1, 2, 3), "controller_id is a live broker")

# Fresh clients: their first metadata then lists all three brokers (kafka-python does not refresh
# its metadata when the controller id it is given names a broker it has not seen yet).
for a in admins:
    a.close()
admins = [admin(i) for i in range(3)]

# ---- a topic created through node 3 ------------------------------------------------------------
try:
    admins[2].create_topics([NewTopic("py-cluster", 3, 3)])
except Exception as e:  # kafka-python raises on a topic error
    check(False, "create_topics through node 3: %s" % e)


def topic_view(a):
    t = a.describe_topics(["py-cluster"])[0]
    if t["error_code"] != 0 or len(t["partitions"]) != 3:
        return None
    if any(p["error_code"] != 0 or p["leader_id"] < 0 for p in t["partitions"]):
        return None
    parts = sorted((p["partition_index"], p["leader_id"], tuple(p["replica_nodes"]),
                    tuple(sorted(p["isr_nodes"]))) for p in t["partitions"])
    return (t.get("topic_id"), parts)


views = [poll(lambda a=a: topic_view(a), "node %d knows py-cluster" % (i + 1))
         for i, a in enumerate(admins)]
if all(views):
    want = views[0]
    for p in want[1]:
        check(len(p[2]) == 3, "py-cluster-%d has three replicas" % p[0])
    check(sorted(p[1] for p in want[1]) == [1, 2, 3], "leaders spread over the brokers: %s" % (want,))
    for i in (1, 2):
        if not poll(lambda a=admins[i]: topic_view(a) == want,
                    "node %d shows py-cluster as node 1 does" % (i + 1)):
            print("node 1:", want, "node %d:" % (i + 1), topic_view(admins[i]), flush=True)

# ---- a config change through node 2 -------------------------------------------------------------
admins[1].alter_configs([ConfigResource(ConfigResourceType.TOPIC, "py-cluster",
                                        configs={"retention.ms": "4242424"})])


def retention(a):
    res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "py-cluster")])
    return res["topic"]["py-cluster"]["retention.ms"]["value"] == "4242424"


for i, a in enumerate(admins):
    poll(lambda a=a: retention(a), "node %d sees retention.ms=4242424" % (i + 1))

for a in admins:
    a.close()
print("FAILED" if FAILS else "ok", flush=True)
sys.exit(1 if FAILS else 0)
