#!/usr/bin/env python3
"""admin_cluster.py SRC D1 D2 D3 -- the mirror admin RPCs against a three-broker destination
cluster (D1 broker+controller, D2 and D3 broker-only, kmirror.so on each) mirroring from SRC.
Python standard library only (kmwire.py).

Each request goes to a different broker than the one before: a definition written through a
broker-only node (controller_write in the metadata log) is seen by the others; StartMirrorTopics
creates the topic through any node; DescribeMirrors through any node gathers every broker's
partitions (each reports the partitions it leads, no duplicates); pause/resume/stop through one
node are seen in the states reported through another; DeleteMirror through a third.
ResumeMirrorTopics retries the FAILED partitions on every broker that leads some (fan-out), not
only on the receiving one: a second mirror's topic is re-created on the source with another id
(every partition FAILED), resumed through broker 1, and each leader's log says it retried.
"""
import sys
import time

import kmwire
from kmwire import *  # noqa: F401,F403

SRC, D = sys.argv[1], sys.argv[2:5]
LOGS = sys.argv[5:8]  # d1.log d2.log d3.log
kmwire.DST = D[0]
NPARTS = 6


def brokers_of(addr):
    rd = call(addr, 3, 12, uvarint(1) + b"\x00\x00" + TAGS)  # no topics: brokers only
    rd.i32()
    out = []

    def broker(r):
        out.append(r.i32())
        r.cstr(), r.i32(), r.cstr()
        r.tags()

    rd.carr(broker)
    return sorted(out)


def leaders(addr, topic):
    """{partition: leader id} from Metadata v12 for one topic."""
    rd = call(addr, 3, 12, carr([topic], lambda t: b"\x00" * 16 + cstr(t) + TAGS) + b"\x00\x00" +
              TAGS)
    rd.i32()
    rd.carr(lambda r: (r.i32(), r.cstr(), r.i32(), r.cstr(), r.tags()))
    rd.cstr(), rd.i32()
    out = {}

    def part(r):
        _ec, idx, leader, _epoch = r.i16(), r.i32(), r.i32(), r.i32()
        for _ in range(3):
            r.carr(lambda x: x.i32())
        r.tags()
        out[idx] = leader

    def topic(r):
        r.i16(), r.cstr(), r.uuid(), r.i8()
        r.carr(part)
        r.i32()
        r.tags()

    rd.carr(topic)
    return out


LAST = {}


def all_partitions(addr, state):
    ec, msg, desc = describe_mirrors(["m1"], addr)
    parts = desc.get("m1", {}).get("topics", {}).get("orders") or []
    idx = sorted(p["p"] for p in parts)
    LAST[addr] = (ec, msg, sorted((p["p"], p["state"], p["err"]) for p in parts))
    if idx == list(range(NPARTS)) and all(p["state"] == state for p in parts):
        return parts
    return None


def last_seen(addr):
    return "last seen: %s" % (LAST.get(addr),)


check(wait_for("three brokers registered",
               lambda: brokers_of(D[0]) == [1, 2, 3] or None, 60), "three destination brokers")
ec = create_topics(SRC, [("orders", NPARTS), ("other", 1)])
check(all(v == NONE for v in ec.values()), "source topics created: %s" % ec)
src_cluster, src_topics = metadata(SRC)

# Create through a broker-only node: the definition goes through the controller.
# NOT_CONTROLLER is retriable: a Kafka client retries it (the broker retries too).
for _ in range(20):
    ec, msg = create_mirror("m1", {"bootstrap.servers": SRC}, addr=D[1])
    if ec != 41:
        break
    time.sleep(0.5)
check(ec == NONE, "CreateMirror through broker 2 (%s: %s)" % (ec, msg))
for i in (0, 2):
    got = wait_for("m1 listed by broker %d" % (i + 1),
                   lambda: list_mirrors(D[i])[2].get("m1"))
    check(got and got[2] == src_cluster, "broker %d lists m1 with source %s" % (i + 1, src_cluster))
ec, msg = create_mirror("m1", {"bootstrap.servers": SRC}, addr=D[2])
check(ec == CLUSTER_MIRROR_ALREADY_EXISTS, "duplicate through broker 3 (%s)" % ec)

# Start through broker 3; the topic gets the source id and partition count, spread over brokers.
ec, msg, res = start_topics("m1", include=["ord.*"], addr=D[2])
check(ec == NONE and res.get("orders", (None,))[0] == NONE and "other" not in res,
      "start ord.* through broker 3: %s" % res)
_, dst_topics = metadata(D[0])
check(dst_topics.get("orders", (None,))[0] == src_topics["orders"][0], "orders has the source id")
check(dst_topics.get("orders", (None, 0))[1] == NPARTS, "orders has %d partitions" % NPARTS)
lead = wait_for("orders has leaders", lambda: (lambda l: l if len(l) == NPARTS and
                                               all(v > 0 for v in l.values()) else None)(
    leaders(D[0], "orders")))
check(lead and len(set(lead.values())) > 1, "orders partitions led by several brokers: %s" % lead)

# Describe through each broker: every partition once, gathered from the others.
for i in range(3):
    parts = wait_for("broker %d describes all partitions MIRRORING" % (i + 1),
                     lambda: all_partitions(D[i], "MIRRORING"), 60)
    check(parts is not None, "broker %d: %d partitions of orders, all MIRRORING (%s)"
          % (i + 1, NPARTS, last_seen(D[i])))

ec, msg, res = change_topics(102, "m1", ["orders"], addr=D[1])
check(res.get("orders", (None,))[0] == NONE, "pause through broker 2: %s" % res)
check(wait_for("PAUSED seen through broker 3", lambda: all_partitions(D[2], "PAUSED"), 60),
      "all partitions PAUSED (through broker 3)")
ec, msg, res = change_topics(103, "m1", ["orders"], addr=D[0])
check(res.get("orders", (None,))[0] == NONE, "resume through broker 1: %s" % res)
check(wait_for("MIRRORING again", lambda: all_partitions(D[1], "MIRRORING"), 60),
      "all partitions MIRRORING again (through broker 2)")



def delete_topic(addr, name):
    """DeleteTopics v6 of one topic by name; the error code."""
    rd = call(addr, 20, 6, carr([name], lambda t: cstr(t) + b"\x00" * 16 + TAGS) +
              struct.pack(">i", 30000) + TAGS)
    rd.i32()
    res = rd.carr(lambda r: (r.cstr(), r.uuid(), r.i16(), r.cstr(), r.tags())) or []
    return res[0][2] if res else -1


def all_of(mirror, topic, addr, state, n):
    ec, msg, desc = describe_mirrors([mirror], addr)
    parts = desc.get(mirror, {}).get("topics", {}).get(topic) or []
    LAST[addr] = (ec, msg, sorted((p["p"], p["state"], p["err"]) for p in parts))
    return parts if len(parts) == n and all(p["state"] == state for p in parts) else None


def log_has(i, text):
    with open(LOGS[i], errors="replace") as f:
        return text in f.read()


# Resume fan-out: m2's topic "flaky" re-created on the source with another id -> every
# partition FAILED (fatal); ResumeMirrorTopics through broker 1 retries them on every leader.
ec, msg = create_mirror("m2", {"bootstrap.servers": SRC}, addr=D[0])
check(ec == NONE, "CreateMirror m2 (%s: %s)" % (ec, msg))
check(all(v == NONE for v in create_topics(SRC, [("flaky", NPARTS)]).values()), "flaky on source")
wait_for("m2 listed by broker 3", lambda: list_mirrors(D[2])[2].get("m2"))
ec, msg, res = start_topics("m2", include=["flaky"], addr=D[2])
check(ec == NONE and res.get("flaky", (None,))[0] == NONE, "start flaky: %s" % res)
flead = wait_for("flaky has leaders", lambda: (lambda l: l if len(l) == NPARTS and
                                                all(v > 0 for v in l.values()) else None)(
    leaders(D[0], "flaky")))
check(wait_for("flaky MIRRORING", lambda: all_of("m2", "flaky", D[0], "MIRRORING", NPARTS), 60),
      "flaky MIRRORING (%s)" % last_seen(D[0]))
check(delete_topic(SRC, "flaky") == NONE, "flaky deleted on the source")
check(wait_for("flaky re-created on the source", lambda: create_topics(
    SRC, [("flaky", NPARTS)]).get("flaky") == NONE or None, 30), "flaky re-created")
check(wait_for("flaky FAILED", lambda: all_of("m2", "flaky", D[0], "FAILED", NPARTS), 60),
      "every flaky partition FAILED (%s)" % last_seen(D[0]))
ec, msg, res = change_topics(103, "m2", ["flaky"], addr=D[0])
check(ec == NONE and res.get("flaky", (None,))[0] == NONE, "resume flaky through broker 1: %s" % res)
for b in sorted(set(flead.values()) if flead else []):
    check(wait_for("broker %d retried" % b,
                   lambda: log_has(b - 1, "FAILED partitions of flaky retried") or None, 20),
          "broker %d (leads flaky partitions) retried its FAILED ones" % b)

ec, msg = delete_mirror("m1", addr=D[0])
check(ec == CLUSTER_MIRROR_NOT_EMPTY, "delete refused while mirroring (%s)" % ec)
ec, msg, res = change_topics(96, "m1", [], patterns=["ord.*"], addr=D[0])
check(ec == NONE and res.get("orders", (None,))[0] == NONE, "stop ord.* through broker 1: %s" % res)
check(wait_for("STOPPED", lambda: all_partitions(D[2], "STOPPED"), 60),
      "all partitions STOPPED (through broker 3)")
ec, msg = delete_mirror("m1", addr=D[2])
check(ec == NONE, "delete through broker 3 (%s: %s)" % (ec, msg))
for i in range(3):
    check(wait_for("m1 gone on broker %d" % (i + 1),
                   lambda: "m1" not in list_mirrors(D[i])[2] or None),
          "broker %d no longer lists m1" % (i + 1))

if FAILS:
    print("%d check(s) failed" % len(FAILS))
    sys.exit(1)
print("all checks passed")
