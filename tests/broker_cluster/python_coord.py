#!/usr/bin/env python3
"""The group coordinator in a three-node kbroker cluster (python_cluster.sh ... python_coord.py):
FindCoordinator through broker-only node 2 answers COORDINATOR_NOT_AVAILABLE (retriable) until
the controller has created __consumer_offsets, then a live broker; __consumer_offsets has
replication factor 3 alike on every node (with the settings of offsets.topic.*); a consumer
group bootstrapped on node 3 commits offsets through it and another node reads them back.
Polls with deadlines, never sleeps as synchronisation.

usage: python_coord.py HOST:PORT(node 1) HOST:PORT(node 2) HOST:PORT(node 3)"""
import socket
import struct
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

NODES = sys.argv[1:4]
FAILS = 0
DEADLINE = 15.0
GROUP = "py-coord-group"
TOPIC = "py-coord"


def check(cond, what):
    global FAILS
    if not cond:
        FAILS += 1
        print("FAIL:", what, flush=True)


def poll(fn, what):
    """fn() until it returns a true value or the deadline passes; the last value."""
    end = time.monotonic() + DEADLINE
    val = None
    while time.monotonic() < end:
        try:
            val = fn()
        except Exception as e:  # a node may not know the topic yet
            print("  (retrying %s: %s)" % (what, e), flush=True)
            val = None
        if val:
            return val
        time.sleep(0.1)  # pacing of the polling loop, not synchronisation
    check(False, what)
    return val


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf


def find_coordinator(node, key):
    """FindCoordinator v1 (key type 0 = group) sent to NODES[node]: (error, node id, host, port)."""
    host, port = NODES[node].rsplit(":", 1)
    cid = b"kbcl-coord"
    body = struct.pack(">hhih", 10, 1, 7, len(cid)) + cid
    body += struct.pack(">h", len(key)) + key.encode() + struct.pack(">b", 0)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        r = recv_exact(s, size)
    corr, _throttle, err = struct.unpack(">iih", r[:10])
    check(corr == 7, "FindCoordinator correlation id")
    pos = 10
    mlen = struct.unpack(">h", r[pos:pos + 2])[0]
    pos += 2 + max(mlen, 0)
    nid, hlen = struct.unpack(">ih", r[pos:pos + 6])
    pos += 6
    h = r[pos:pos + hlen].decode()
    pos += hlen
    p = struct.unpack(">i", r[pos:pos + 4])[0]
    return err, nid, h, p


# ---- the cluster is up: three unfenced brokers --------------------------------------------------
adm = KafkaAdminClient(bootstrap_servers=NODES[1], client_id="kbcl-coord-adm",
                       request_timeout_ms=20000)
poll(lambda: (lambda c: len(c["brokers"]) == 3 and
              not any(b.get("is_fenced") for b in c["brokers"]))(adm.describe_cluster()),
     "node 2 lists three unfenced brokers")
adm.close()

# ---- FindCoordinator through broker-only node 2 -------------------------------------------------
seen = []


def coord():
    err, nid, h, p = find_coordinator(1, GROUP)
    seen.append(err)
    return (nid, h, p) if err == 0 else None


c = poll(coord, "FindCoordinator through node 2 names a coordinator")
print("FindCoordinator through node 2: %d answer(s), errors %s" % (len(seen), sorted(set(seen))),
      flush=True)
check(all(e in (0, 15) for e in seen),
      "FindCoordinator answers only NONE or COORDINATOR_NOT_AVAILABLE: %s" % sorted(set(seen)))
check(seen and seen[0] == 15, "the first FindCoordinator (topic not there yet) answers "
      "COORDINATOR_NOT_AVAILABLE: %s" % seen[:1])
if c:
    check(c[0] in (1, 2, 3) and c[2] > 0, "the coordinator is a live broker: %s" % (c,))
    # Every node names the same coordinator (the leader of the group's partition).
    for i in (0, 2):
        other = poll(lambda i=i: (lambda r: r if r[0] == 0 else None)(find_coordinator(i, GROUP)),
                     "FindCoordinator through node %d" % (i + 1))
        check(other and other[1:] == c, "node %d names coordinator %s as node 2 does (%s)" %
              (i + 1, other and other[1:], c))

# ---- __consumer_offsets: replication factor 3, alike on every node ------------------------------


def offsets_view(i):
    a = KafkaAdminClient(bootstrap_servers=NODES[i], client_id="kbcl-coord-%d" % (i + 1),
                         request_timeout_ms=20000)
    try:
        t = a.describe_topics(["__consumer_offsets"])[0]
    finally:
        a.close()
    if t["error_code"] != 0 or not t["partitions"]:
        return None
    if any(p["error_code"] != 0 or p["leader_id"] < 0 for p in t["partitions"]):
        return None
    return (t.get("is_internal"), sorted((p["partition_index"], p["leader_id"],
                                          tuple(p["replica_nodes"])) for p in t["partitions"]))


views = [poll(lambda i=i: offsets_view(i), "node %d knows __consumer_offsets" % (i + 1))
         for i in range(3)]
if all(views):
    check(views[0][0] is True, "__consumer_offsets is internal")
    check(len(views[0][1]) == 50, "__consumer_offsets has offsets.topic.num.partitions (50) "
          "partitions: %d" % len(views[0][1]))
    for p in views[0][1]:
        check(sorted(p[2]) == [1, 2, 3], "__consumer_offsets-%d has replicas 1, 2, 3: %s" %
              (p[0], p[2]))
    check(len(set(p[1] for p in views[0][1])) == 3, "__consumer_offsets leaders spread")
    check(views[1] == views[0] and views[2] == views[0], "every node shows __consumer_offsets "
          "alike")

# ---- a consumer group commits through it --------------------------------------------------------
adm = KafkaAdminClient(bootstrap_servers=NODES[2], client_id="kbcl-coord-adm3",
                       request_timeout_ms=20000)
adm.create_topics([NewTopic(TOPIC, 1, 3)])
prod = KafkaProducer(bootstrap_servers=NODES[1], acks="all")
poll(lambda: prod.partitions_for(TOPIC), "the producer sees %s" % TOPIC)
for n in range(5):
    prod.send(TOPIC, ("m%d" % n).encode()).get(timeout=20)
prod.close()

cons = KafkaConsumer(bootstrap_servers=NODES[2], group_id=GROUP, auto_offset_reset="earliest",
                     enable_auto_commit=False, client_id="kbcl-coord-cons")
cons.subscribe([TOPIC])
got = []


def consume():
    for recs in cons.poll(timeout_ms=200).values():
        got.extend(r.value for r in recs)
    return len(got) >= 5


poll(consume, "the group member reads the five records")
check(got[:5] == [b"m0", b"m1", b"m2", b"m3", b"m4"], "records in order: %s" % got)
cons.commit()
cons.close()

tp = TopicPartition(TOPIC, 0)
for i in range(3):
    # OffsetFetch through the coordinator, found from another bootstrap node each time.
    c = KafkaConsumer(bootstrap_servers=NODES[i], group_id=GROUP, enable_auto_commit=False,
                      client_id="kbcl-coord-r%d" % (i + 1))
    off = poll(lambda c=c: c.committed(tp), "node %d: the group's committed offset" % (i + 1))
    check(off == 5, "the committed offset read through node %d is 5: %s" % (i + 1, off))
    c.close()
adm.close()

print("FAILED" if FAILS else "ok", flush=True)
sys.exit(1 if FAILS else 0)
