#!/usr/bin/env python3
"""admin_e2e.py SRC DST -- the mirror admin RPCs against a real destination kbroker with
kmirror.so loaded, mirroring from a real source kbroker. Python standard library only: the
requests are framed by hand (Kafka's flexible encoding), so what is checked is the bytes on
the wire.

Covers: CreateMirror (good, bad name, duplicate, unreachable source, unknown key, non-PLAINTEXT,
__mirror_state created), ListMirrors (resolved source cluster id, topic count, read-your-writes),
StartMirrorTopics with a regex (topics created with the source's topic ids and partition counts,
internal topics never, an existing topic with another id -> INCONSISTENT_TOPIC_ID, patterns kept
in the mirror's filters), MIRRORING and then READ_ONLY_TOPIC on the wire for a produce,
Pause/Resume/Stop changing the mirror.name suffix and the partition states DescribeMirrors
reports, the failback lookup (last mirrored epoch/offset), a produce accepted after the stop,
DeleteMirror refused while topics run and allowed once stopped, the name reusable.
"""
import socket
import sys
import time
import uuid

import kmwire
from kmwire import *  # noqa: F401,F403

SRC, DST = sys.argv[1], sys.argv[2]
kmwire.DST = DST

# ---- the scenario -------------------------------------------------------------------------

src_cluster, _ = metadata(SRC)
dst_cluster, _ = metadata(DST)
check(src_cluster and dst_cluster and src_cluster != dst_cluster, "two clusters with their ids")

# Source topics: two that a regex selects, one it does not, one that exists on the destination
# with another id.
ec = create_topics(SRC, [("orders-eu", 3), ("orders-us", 2), ("payments", 1), ("orders-clash", 1)])
check(all(v == NONE for v in ec.values()), "source topics created: %s" % ec)
ec = create_topics(DST, [("orders-clash", 1)])
check(ec.get("orders-clash") == NONE, "a destination topic of the same name (another id)")

# CreateMirror: refusals first.
ec, msg = create_mirror("bad name!", {"bootstrap.servers": SRC})
check(ec == INVALID_CLUSTER_MIRROR_NAME, "bad name refused (%s: %s)" % (ec, msg))
ec, msg = create_mirror("m1.paused", {"bootstrap.servers": SRC})
check(ec == INVALID_CLUSTER_MIRROR_NAME and ".paused" in (msg or ""),
      "reserved suffix refused (%s: %s)" % (ec, msg))
ec, msg = create_mirror("m1", {"bootstrap.servers": SRC, "no.such.key": "1"})
check(ec == INVALID_CONFIG and "no.such.key" in (msg or ""), "unknown key refused (%s)" % msg)
ec, msg = create_mirror("m1", {"bootstrap.servers": SRC, "security.protocol": "SSL"})
check(ec == INVALID_CONFIG and "PLAINTEXT" in (msg or ""), "SSL refused for now (%s)" % msg)
ec, msg = create_mirror("m1", {"request.timeout.ms": "1000"})
check(ec == INVALID_CONFIG and "bootstrap.servers" in (msg or ""),
      "missing bootstrap.servers refused (%s)" % msg)
# A port nobody listens on: connection refused -> a clear error, quickly.
dead = socket.socket()
dead.bind(("127.0.0.1", 0))
dead_port = dead.getsockname()[1]
dead.close()
t0 = time.time()
ec, msg = create_mirror("m1", {"bootstrap.servers": "127.0.0.1:%d" % dead_port,
                               "request.timeout.ms": "3000"})
check(ec == INVALID_CONFIG and "Cannot reach the source" in (msg or ""),
      "unreachable source refused (%s: %s)" % (ec, msg))
check(time.time() - t0 < 20, "unreachable source answered in bounded time")
ec, _, mirrors = list_mirrors()
check(ec == NONE and mirrors == {}, "no mirror after the refusals")

secret = "org.apache.kafka.common.security.plain.PlainLoginModule required password=\"s3cr3t\";"
ec, msg = create_mirror("m1", {"bootstrap.servers": SRC, "client.id": "e2e",
                               "sasl.jaas.config": secret})
check(ec == NONE, "mirror m1 created (%s: %s)" % (ec, msg))
_, dst_topics = metadata(DST)
check("__mirror_state" in dst_topics, "__mirror_state created with the first mirror")
ec, msg = create_mirror("m1", {"bootstrap.servers": SRC})
check(ec == CLUSTER_MIRROR_ALREADY_EXISTS, "duplicate refused (%s: %s)" % (ec, msg))

ec, _, mirrors = list_mirrors()
check(ec == NONE and "m1" in mirrors, "ListMirrors shows m1")
if "m1" in mirrors:
    _, boot, cid, count = mirrors["m1"]
    check(cid == src_cluster, "resolved source cluster id %s == %s" % (cid, src_cluster))
    check(boot == SRC, "source bootstrap %s" % boot)
    check(count == 0, "no topics yet")

# StartMirrorTopics with a regex (anchored: "orders-.*" does not match "payments").
ec, msg, res = start_topics("nope", include=["orders-.*"])
check(ec == UNKNOWN_CLUSTER_MIRROR, "start on an unknown mirror refused")
ec, msg, res = start_topics("m1", include=["orders-(eu"])
check(ec == INVALID_REGULAR_EXPRESSION and "offset" in (msg or ""),
      "bad regex refused with its offset (%s)" % msg)
# A record on the source, so that the stop records a last mirrored epoch for orders-eu-0.
ec, msg = produce(SRC, "orders-eu")
check(ec == NONE, "a record produced to the source's orders-eu (%s)" % ec)
ec, msg, res = start_topics("m1", include=["orders-.*"])
check(ec == NONE, "start with a regex (%s: %s)" % (ec, msg))
check(res.get("orders-eu", (None,))[0] == NONE and res.get("orders-us", (None,))[0] == NONE,
      "orders-eu and orders-us started: %s" % res)
check("payments" not in res, "payments not selected")
# Read-your-writes: the answer comes once this broker's catalog shows the new topics.
ec, _, mirrors = list_mirrors()
check(mirrors.get("m1", (0, 0, 0, 0))[3] == 2, "ListMirrors counts 2 topics right after the start")
check(res.get("orders-clash", (None,))[0] == INCONSISTENT_TOPIC_ID,
      "existing topic with another id refused: %s" % (res.get("orders-clash"),))

_, src_topics = metadata(SRC)
_, dst_topics = wait_for("mirror topics visible on the destination",
                         lambda: (lambda m: m if "orders-us" in m[1] else None)(metadata(DST)))
for t in ("orders-eu", "orders-us"):
    check(dst_topics.get(t, (None, 0))[0] == src_topics[t][0],
          "%s has the source's topic id %s" % (t, uuid.UUID(bytes=src_topics[t][0])))
    check(dst_topics.get(t, (None, 0))[1] == src_topics[t][1],
          "%s has the source's partition count %d" % (t, src_topics[t][1]))
check("payments" not in dst_topics, "payments not created")

# Patterns are kept in the mirror's topics.include / topics.exclude: an exclusion given once
# still applies to later requests (exclude wins over include).
ec, msg, res = start_topics("m1", include=["pay.*"], exclude=["pay.*"])
check(ec == NONE and "payments" not in res, "exclude wins within a request: %s" % res)
ec, msg, res = start_topics("m1", include=["payments"])
check(ec == NONE and "payments" not in res, "the stored exclusion applies later: %s" % res)

# The partition state machine takes the new partitions to MIRRORING; then writes to them are
# refused as read-only on the wire.
check(wait_states("m1", "orders-eu", "MIRRORING", 3), "orders-eu MIRRORING")
check(wait_states("m1", "orders-us", "MIRRORING", 2), "orders-us MIRRORING")
ec, msg = produce(DST, "orders-eu")
check(ec == READ_ONLY_TOPIC, "produce to a mirror topic: READ_ONLY_TOPIC (%s: %s)" % (ec, msg))

# Pause / resume / stop change the suffix; the catalog (ListMirrors, Describe) follows.
ec, msg, res = change_topics(102, "m1", ["orders-eu", "payments"])
check(ec == NONE and res.get("orders-eu", (None,))[0] == NONE, "pause orders-eu: %s" % res)
check(res.get("payments", (None,))[0] == TOPIC_NOT_IN_CLUSTER_MIRROR, "payments not in m1")
ec, msg, res = change_topics(102, "m1", ["orders-eu"])
check(res.get("orders-eu", (None,))[0] == MIRROR_TOPIC_ALREADY_PAUSED, "pause twice: %s" % res)
ec, msg, res = change_topics(103, "m1", ["orders-us"])
check(res.get("orders-us", (None,))[0] == MIRROR_TOPIC_NOT_PAUSED, "resume a running topic: %s"
      % res)
check(wait_states("m1", "orders-eu", "PAUSED", 3), "orders-eu PAUSED")
ec, msg, res = change_topics(103, "m1", ["orders-eu"])
check(res.get("orders-eu", (None,))[0] == NONE, "resume orders-eu: %s" % res)
check(wait_states("m1", "orders-eu", "MIRRORING", 3), "orders-eu MIRRORING again")

ec, msg, desc = describe_mirrors()
m1 = desc.get("m1", {})
check(ec == NONE and m1.get("cluster") == src_cluster, "DescribeMirrors m1 (%s)" % msg)
parts = m1.get("topics", {}).get("orders-eu") or []
check(sorted(p["p"] for p in parts) == [0, 1, 2], "orders-eu: this broker leads 3 partitions")
check(all(p["dst"] >= 0 for p in parts), "orders-eu destination offsets reported")
ec, msg, desc = describe_mirrors(["nope"])
check(desc.get("nope", {}).get("ec") == UNKNOWN_CLUSTER_MIRROR, "describe an unknown mirror")

# The source's record must be mirrored before the stop, so that the stop's last mirrored
# epoch/offset covers it (checked by the failback lookup below).
def eu0_mirrored():
    parts = describe_mirrors()[2].get("m1", {}).get("topics", {}).get("orders-eu") or []
    return any(p["p"] == 0 and p["dst"] >= 1 for p in parts)


wait_for("orders-eu-0 has mirrored the source's record", eu0_mirrored)

# Delete: refused while topics run, allowed once every topic is stopped.
ec, msg = delete_mirror("m1")
check(ec == CLUSTER_MIRROR_NOT_EMPTY, "delete refused while topics run (%s: %s)" % (ec, msg))
ec, msg, res = change_topics(96, "m1", ["orders-us"], patterns=["orders-eu"])
check(ec == NONE and all(v[0] == NONE for v in res.values()) and len(res) == 2,
      "stop orders-us by name and orders-eu by pattern: %s" % res)
# Stop's patterns join topics.exclude: starting orders-eu by pattern again selects nothing.
ec, msg, res = start_topics("m1", include=["orders-eu"])
check(ec == NONE and "orders-eu" not in res, "a stopped pattern stays excluded: %s" % res)
check(wait_states("m1", "orders-us", "STOPPED", 2), "orders-us STOPPED")
check(wait_states("m1", "orders-eu", "STOPPED", 3), "orders-eu STOPPED")
# The failback lookup (design M1): the old source asks with its own cluster id and the
# partitions it needs; the answer has the last mirrored epoch recorded at the stop.
ec, msg, desc = describe_mirrors(cluster_id=src_cluster,
                                 lookups=[(src_topics["orders-eu"][0], [0, 2])])
lk = {p["p"]: p for p in (desc.get("m1", {}).get("topics", {}).get("orders-eu") or [])}
check(ec == NONE and sorted(lk) == [0, 2] and list(desc.get("m1", {}).get("topics", {})) ==
      ["orders-eu"], "lookup answers orders-eu 0 and 2 only: %s" % sorted(lk))
check(0 in lk and lk[0]["lme"] >= 0 and lk[0]["lmo"] == 1,
      "orders-eu-0: last mirrored epoch %s offset %s" % (lk.get(0, {}).get("lme"),
                                                          lk.get(0, {}).get("lmo")))
ec, msg, desc = describe_mirrors(cluster_id="not-our-source", lookups=[])
check(ec == NONE and desc == {}, "a lookup from another cluster finds no mirror: %s" % list(desc))

# Failover done: the stopped topic takes writes again.
ec, msg = wait_for("produce to a stopped topic accepted",
                   lambda: (lambda r: r if r[0] == NONE else None)(produce(DST, "orders-us"))
                   ) or (None, None)
check(ec == NONE, "produce to the stopped orders-us accepted")
ec, msg = delete_mirror("m1")
check(ec == NONE, "delete allowed once stopped (%s: %s)" % (ec, msg))
ec, _, mirrors = list_mirrors()
check(mirrors == {}, "m1 gone")
ec, msg = delete_mirror("m1")
check(ec == UNKNOWN_CLUSTER_MIRROR, "delete again: unknown mirror")
# The stopped topics were detached (plain topics now) and the name can be used again.
ec, msg = create_mirror("m1", {"bootstrap.servers": SRC})
check(ec == NONE, "name reusable after delete (%s: %s)" % (ec, msg))
ec, _, mirrors = list_mirrors()
check(mirrors.get("m1", (0, 0, 0, -1))[3] == 0, "the old topics are not in the new m1")

if FAILS:
    print("%d check(s) failed" % len(FAILS))
    sys.exit(1)
print("all checks passed")
