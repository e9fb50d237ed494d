#!/usr/bin/env python3
"""kafka-python against a three-node kbroker cluster (python_cluster.sh): every node lists the
three brokers; a topic created through node 3 (replication factor 3) shows the same topic id,
leaders, replicas and ISR on every node; a config change through node 2 is seen on all nodes;
manual replica assignments (CreateTopics through node 2, CreatePartitions through node 3) show
as given on every node with the first replica leading, and bad ones are refused as Kafka 4.x
refuses them; a producer's send to an unknown topic through broker-only node 2 auto-creates it
(the controller creates it) and is acknowledged.
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

# ---- manual replica assignments (CreateTopics / CreatePartitions Assignments) -----------------
# Checked as Kafka 4.x's controller does; the lists show unchanged (order kept) on every node and
# the first replica of each is its leader.
INVALID_REQUEST, INVALID_REPLICA_ASSIGNMENT = 42, 39
ASG = {0: [2, 3, 1], 1: [3, 1, 2], 2: [1, 2, 3]}
res = admins[1].create_topics({"py-asg": {"assignments": ASG}}, raise_errors=False)
check(res["topics"][0]["error_code"] == 0, "create_topics py-asg with assignments: %s" % (res,))


def asg_view(a, topic, n):
    t = a.describe_topics([topic])[0]
    if t["error_code"] != 0 or len(t["partitions"]) != n:
        return None
    if any(p["error_code"] != 0 or p["leader_id"] < 0 or
           len(p["isr_nodes"]) != len(p["replica_nodes"]) for p in t["partitions"]):
        return None  # not yet a leader and a full ISR everywhere
    return (t.get("topic_id"), sorted((p["partition_index"], p["leader_id"],
                                       tuple(p["replica_nodes"])) for p in t["partitions"]))


def asg_check(topic, want):
    views = [poll(lambda a=a: asg_view(a, topic, len(want)), "node %d shows %s" % (i + 1, topic))
             for i, a in enumerate(admins)]
    if not all(views):
        return
    exp = sorted((k, v[0], tuple(v)) for k, v in want.items())
    for i, v in enumerate(views):
        check(v[1] == exp, "node %d: %s is %s, want %s (leader = first replica)" %
              (i + 1, topic, v[1], exp))
        check(v[0] == views[0][0], "node %d: topic id of %s" % (i + 1, topic))


asg_check("py-asg", ASG)

BAD = [  # (options, error code, part of the message)
    ({"assignments": {0: [1, 2, 9], 1: [2, 3, 1]}}, INVALID_REPLICA_ASSIGNMENT,
     "includes broker 9, but no such broker is registered"),
    ({"assignments": {0: [1, 2, 1]}}, INVALID_REPLICA_ASSIGNMENT, "broker 1 more than once"),
    ({"assignments": {0: [1, 2, 3], 1: [1, 2]}}, INVALID_REPLICA_ASSIGNMENT,
     "a partition with 2 replica(s), but this is inconsistent with previous partitions, which "
     "have 3 replica(s)"),
    ({"assignments": {0: [1, 2, 3], 2: [2, 3, 1]}}, INVALID_REPLICA_ASSIGNMENT,
     "consecutive 0-based"),
    ({"assignments": {0: []}}, INVALID_REPLICA_ASSIGNMENT, "empty replica list"),
    ({"num_partitions": 1, "assignments": {0: [1, 2, 3]}}, INVALID_REQUEST,
     "numPartitions was not set to -1"),
    ({"replication_factor": 3, "assignments": {0: [1, 2, 3]}}, INVALID_REQUEST,
     "replication factor was not set to -1"),
]
for k, (opts, code, text) in enumerate(BAD):
    res = admins[2].create_topics({"py-asg-bad": opts}, raise_errors=False)
    t = res["topics"][0]
    check(t["error_code"] == code and text in (t["error_message"] or ""),
          "create_topics %s: %s %s, want %d '%s'" % (opts, t["error_code"], t["error_message"],
                                                     code, text))
check(all(a.describe_topics(["py-asg-bad"])[0]["error_code"] != 0 for a in admins),
      "no refused topic was created")

# CreatePartitions through node 3: two more partitions on chosen brokers
NEW = {3: [3, 2, 1], 4: [2, 1, 3]}
res = admins[2].create_partitions({"py-asg": {"count": 5, "assignments": [NEW[3], NEW[4]]}},
                                  raise_errors=False)
check(res.results[0].error_code == 0, "create_partitions py-asg: %s" % (res,))
asg_check("py-asg", {**ASG, **NEW})
for opts, code, text in [
        ({"count": 7, "assignments": [[1, 2, 3]]}, INVALID_REPLICA_ASSIGNMENT,
         "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
        ({"count": 6, "assignments": [[1, 2]]}, INVALID_REPLICA_ASSIGNMENT,
         "inconsistent with previous partitions, which have 3 replica(s)"),
        ({"count": 6, "assignments": [[4, 2, 1]]}, INVALID_REPLICA_ASSIGNMENT,
         "includes broker 4, but no such broker is registered")]:
    res = admins[1].create_partitions({"py-asg": opts}, raise_errors=False)
    r = res.results[0]
    check(r.error_code == code and text in (r.error_message or ""),
          "create_partitions %s: %s %s, want %d '%s'" % (opts, r.error_code, r.error_message,
                                                         code, text))
check(all(len(a.describe_topics(["py-asg"])[0]["partitions"]) == 5 for a in admins),
      "refused create_partitions added nothing")

# ---- auto-creation through a broker-only node ---------------------------------------------------
# A producer's Metadata request for an unknown topic through node 2 (broker-only): the node has
# the controller create it (it answered NOT_CONTROLLER before) and the send is acknowledged.
try:
    from kafka import KafkaProducer
    prod = KafkaProducer(bootstrap_servers=NODES[1], client_id="kbcl-py-auto", max_block_ms=30000,
                         request_timeout_ms=20000)
    md = prod.send("py-auto", b"auto-created").get(timeout=30)
    prod.close()
    check(md.topic == "py-auto" and md.offset == 0, "send to py-auto through node 2: %s" % (md,))
except Exception as e:  # kafka-python raises on a timeout or a topic error
    check(False, "send to an auto-created topic through broker-only node 2: %s" % e)


def auto_view(a):
    t = a.describe_topics(["py-auto"])[0]
    return (t["error_code"], len(t["partitions"])) if t["error_code"] == 0 else None


views = [poll(lambda: auto_view(a), "py-auto listed by node %d" % (i + 1))
         for i, a in enumerate(admins)]
check(all(v == (0, 1) for v in views),
      "py-auto: one partition (num.partitions) on every node: %s" % views)

for a in admins:
    a.close()
print("FAILED" if FAILS else "ok", flush=True)
sys.exit(1 if FAILS else 0)
