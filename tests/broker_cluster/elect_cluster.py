#!/usr/bin/env python3
"""Leader elections on a three-node kbroker cluster (elect_cluster.sh; docs/broker.md "Cluster").

Node 1 is broker,controller, nodes 2 and 3 broker-only (ElectLeaders reaches the controller in an
Envelope). The controller first runs with auto.leader.rebalance.enable=false (and a 1 s check
interval, so that a rebalance despite it would show):
  1. ElectLeaders PREFERRED on partitions led by their preferred replica: ELECTION_NOT_NEEDED
     (Java AdminClient, explicit partitions; raw v1 requests to both broker-only nodes, which
     forward them); with null partitions the answer names none;
  2. kill -9 of a preferred leader and its restart leave leadership unbalanced; kafka-python's
     elect_leaders(PREFERRED) moves it back, and every broker's Metadata agrees;
  3. the same with the Java AdminClient's electLeaders(PREFERRED, null);
  4. a partition whose ISR is all dead while an out-of-sync replica is alive stays offline;
     PREFERRED answers PREFERRED_LEADER_NOT_AVAILABLE; UNCLEAN elects the live replica, its ISR
     reset to it, and the controller logs a warning; UNCLEAN again is ELECTION_NOT_NEEDED.
Then the controller restarts with auto.leader.rebalance.enable=true and
leader.imbalance.check.interval.seconds=1:
  5. while it is down, a broker-only node answers NOT_CONTROLLER; once it is back, leadership
     returns to every preferred replica without a request;
  6. another such offline partition gets its live out-of-sync replica once
     unclean.leader.election.enable=true is set on the topic (IncrementalAlterConfigs).
Conditions are polled with deadlines; the only fixed waits are the "stays offline" holds.

usage: elect_cluster.py KBROKER CLUSTER_TOOLS_JAR WORKDIR"""
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

KB, CT_JAR, W = sys.argv[1:4]
FAILS = 0
DEADLINE = 20.0
T0 = time.monotonic()


def say(*a):
    print("[%5.1fs]" % (time.monotonic() - T0), *a, flush=True)


def check(cond, what):
    global FAILS
    if not cond:
        FAILS += 1
        say("FAIL:", what)
    return cond


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


PORTS = {1: free_port(), 2: free_port(), 3: free_port()}
CTRL_PORT = free_port()
PROCS = {}


def start(n, extra=""):
    props = os.path.join(W, "s%d.properties" % n)
    with open(props, "w") as f:
        f.write("node.id=%d\nlog.dirs=%s/n%d\ncluster.id=kbrokerElectCluster001\n" % (n, W, n))
        f.write("broker.heartbeat.interval.ms=200\nbroker.session.timeout.ms=1500\n")
        f.write("replica.lag.time.max.ms=3000\nnum.network.threads=1\nnum.io.threads=2\n")
        f.write("controller.listener.names=CONTROLLER\n")
        f.write("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n")
        if n == 1:
            f.write("process.roles=broker,controller\n")
            f.write("listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d\n" %
                    (PORTS[1], CTRL_PORT))
        else:
            f.write("process.roles=broker\nlisteners=PLAINTEXT://127.0.0.1:%d\n" % PORTS[n])
        f.write("controller.quorum.voters=1@127.0.0.1:%d\n" % CTRL_PORT)
        f.write(extra)
    log = open(os.path.join(W, "broker%d.log" % n), "a")
    p = subprocess.Popen([KB, "--config", props], stdout=subprocess.PIPE, stderr=log)
    log.close()
    ready, _, _ = select.select([p.stdout], [], [], 60)
    line = p.stdout.readline().decode() if ready else ""
    if "kbroker started" not in line:
        p.kill()
        raise SystemExit("FAIL: node %d did not start: %r" % (n, line))
    PROCS[n] = p


def kill(n):
    PROCS[n].kill()
    PROCS[n].wait()
    del PROCS[n]


def boot(n):
    return "127.0.0.1:%d" % PORTS[n]


def tools(*args):
    cmd = ["java", "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           "-Xshare:auto", "-jar", CT_JAR] + list(args)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=90)
    out = r.stdout.decode().strip()
    if r.returncode not in (0, 1):
        say("cluster-tools %s: exit %d: %s" % (args[0], r.returncode, r.stderr.decode()[-800:]))
    return r.returncode, [l for l in out.splitlines() if l]


def java_elect(node, kind, *parts):
    args = ["elect", "--bootstrap", boot(node), "--type", kind]
    for p in parts:
        args += ["--partition", p]
    rc, lines = tools(*args)
    say("java electLeaders(%s, %s) via node %d: rc %d %s" % (kind, list(parts) or "null", node, rc,
                                                            lines))
    return rc, lines


def raw_elect(n, kind, topic, parts):
    """ElectLeaders v1 straight to node n (no client picks the node: a broker-only node must
    forward it): (top-level error, [(topic, partition, error)]) or None on a network error."""
    name = topic.encode()
    body = struct.pack(">bih", kind, 1, len(name)) + name + struct.pack(">i", len(parts))
    body += b"".join(struct.pack(">i", k) for k in parts) + struct.pack(">i", 10000)
    req = struct.pack(">hhih", 43, 1, 7, 5) + b"elect" + body
    try:
        with socket.create_connection(("127.0.0.1", PORTS[n]), timeout=10) as c:
            c.sendall(struct.pack(">i", len(req)) + req)
            buf = b""
            while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
                chunk = c.recv(65536)
                if not chunk:
                    return None
                buf += chunk
    except OSError:
        return None
    pos = 8  # size, correlation id

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v[0]
    take(">i")  # throttle
    top = take(">h")
    out = []
    for _ in range(take(">i")):
        tl = take(">h")
        t = buf[pos:pos + tl].decode()
        pos += tl
        for _ in range(take(">i")):
            k, err, ml = take(">i"), take(">h"), take(">h")
            pos += max(ml, 0)
            out.append((t, k, err))
    return top, out


ADMINS = {}


def admin(n):
    if n not in ADMINS:
        ADMINS[n] = KafkaAdminClient(bootstrap_servers=boot(n), client_id="kbcl-elect-%d" % n,
                                     request_timeout_ms=10000)
    return ADMINS[n]


def drop_admin(n):
    a = ADMINS.pop(n, None)
    if a:
        try:
            a.close()
        except Exception:
            pass


def view(n, topic):
    """{partition: (leader, replicas, sorted isr)} of @topic in node n's Metadata, or None."""
    try:
        t = admin(n).describe_topics([topic])[0]
    except Exception:
        drop_admin(n)
        return None
    if t["error_code"] != 0:
        return None
    return {p["partition_index"]: (p["leader_id"], tuple(p["replica_nodes"]),
                                   tuple(sorted(p["isr_nodes"]))) for p in t["partitions"]}


def poll(fn, what, deadline=DEADLINE):
    end = time.monotonic() + deadline
    val = None
    while time.monotonic() < end:
        val = fn()
        if val:
            return val
        time.sleep(0.1)  # pacing of the polling loop, not synchronisation
    check(False, what)
    return val


def agree(topic, cond, nodes=None, what=""):
    """Every live node's Metadata of @topic satisfies cond(view) and all views are equal."""
    nodes = nodes or sorted(PROCS)

    def ok():
        vs = [view(n, topic) for n in nodes]
        if any(v is None or not cond(v) for v in vs):
            return None
        return vs[0] if all(v == vs[0] for v in vs) else None
    v = poll(ok, "nodes %s agree on %s: %s" % (nodes, topic, what))
    if not v:
        for n in nodes:
            say("  node %d: %s" % (n, view(n, topic)))
    return v


def leaders(v):
    return [v[k][0] for k in sorted(v)]


def hold(fn, secs, what):
    """fn() must stay true for secs (a negative check: something must not happen)."""
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if not fn():
            return check(False, what)
        time.sleep(0.1)
    return True


def log_has(n, text):
    with open(os.path.join(W, "broker%d.log" % n), errors="replace") as f:
        return text in f.read()


TOPICS = ("el", "unc", "unc2")
# the check runs every second (unclean elections of topics that allow them), rebalancing is off
NO_AUTO = "auto.leader.rebalance.enable=false\nleader.imbalance.check.interval.seconds=1\n"


def balanced(v):
    """Every partition led by its preferred replica (the first of its assignment)."""
    return all(p[0] == p[1][0] for p in v.values())


def full(v):
    return all(len(p[2]) == len(p[1]) for p in v.values())


def movable(n):
    """'elect T P ok' lines PREFERRED on every partition must give, from node n's Metadata:
    partitions not on their preferred replica while it is in the ISR."""
    out = []
    for t in TOPICS:
        for k, p in (view(n, t) or {}).items():
            if p[0] != p[1][0] and p[1][0] in p[2]:
                out.append("elect %s %d ok" % (t, k))
    return sorted(out)


def outside(v, node):
    """A partition of @v whose replicas do not include @node."""
    return next(k for k, p in sorted(v.items()) if node not in p[1])


try:
    start(1, NO_AUTO)
    start(2)
    start(3)
    # fenced brokers are listed too: wait until all three are unfenced
    poll(lambda: (lambda c: len(c["brokers"]) == 3 and not any(b.get("is_fenced")
                                                               for b in c["brokers"]))(
        admin(1).describe_cluster()), "three unfenced brokers")
    drop_admin(1)
    # kbroker's assigner stripes replicas (and so preferred leaders) over the brokers
    admin(2).create_topics({"el": {"num_partitions": 3, "replication_factor": 3},
                            "unc": {"num_partitions": 3, "replication_factor": 2},
                            "unc2": {"num_partitions": 3, "replication_factor": 2}})
    el = agree("el", lambda v: len(v) == 3 and balanced(v) and full(v),
               what="preferred leaders, full ISR")
    for t in ("unc", "unc2"):
        agree(t, lambda v: len(v) == 3 and balanced(v) and full(v), what="balanced, full ISR")
    if not el:
        raise SystemExit(1)
    E = {p[0]: k for k, p in el.items()}    # preferred leader -> partition of el
    check(sorted(E) == [1, 2, 3], "el's preferred leaders spread over the brokers: %s" % el)

    # ---- 1. nothing to do ------------------------------------------------------------------
    rc, lines = java_elect(3, "preferred", "el:0", "el:1", "el:2")
    check(rc == 0 and lines == ["elect el %d error=ELECTION_NOT_NEEDED" % k for k in range(3)],
          "PREFERRED on preferred leaders: ELECTION_NOT_NEEDED each")
    rc, lines = java_elect(2, "preferred")
    check(rc == 0 and lines == [], "PREFERRED on every partition of a balanced cluster names none")
    for n in (2, 3):  # broker-only nodes forward it to the controller (Envelope)
        got = raw_elect(n, 0, "el", [0, 1])
        say("ElectLeaders v1 (PREFERRED, el-0, el-1) straight to node %d:" % n, got)
        check(got == (0, [("el", 0, 84), ("el", 1, 84)]),
              "ElectLeaders v1 through node %d: ELECTION_NOT_NEEDED each: %s" % (n, got))
    rc, lines = java_elect(2, "preferred", "nosuch:0", "el:7")
    check(lines == ["elect el 7 error=UNKNOWN_TOPIC_OR_PARTITION",
                    "elect nosuch 0 error=UNKNOWN_TOPIC_OR_PARTITION"], "unknown partitions")

    # ---- 2. kill the leader of el's partition preferring 2, restart: unbalanced; kafka-python
    e2 = E[2]
    kill(2)
    agree("el", lambda v: v[e2][0] not in (-1, 2) and 2 not in v[e2][2],
          what="el-%d led by another without 2" % e2)
    start(2)
    v = agree("el", full, what="node 2 back in el's ISRs")
    check(v and v[e2][0] != 2, "el-%d stays away from node 2 after it returns (no auto)" % e2)
    hold(lambda: (view(1, "el") or {e2: (0,)})[e2][0] != 2, 1.5,
         "no automatic rebalance while auto.leader.rebalance.enable=false")
    res = admin(3).elect_leaders(0, {"el": [e2]})
    got = [(t.topic, p.partition_id, p.error_code) for t in res.replica_election_results
           for p in t.partition_result]
    say("kafka-python elect_leaders(PREFERRED, el-%d) via node 3:" % e2, got)
    check(got == [("el", e2, 0)], "kafka-python PREFERRED on el-%d succeeds" % e2)
    agree("el", lambda v: v[e2][0] == 2, what="el-%d back on node 2 everywhere" % e2)

    # ---- 3. the same for node 3 with the Java AdminClient, every partition (null) -----------
    e3 = E[3]
    kill(3)
    agree("el", lambda v: v[e3][0] not in (-1, 3) and 3 not in v[e3][2],
          what="el-%d led by another without 3" % e3)
    start(3)
    for t in TOPICS:
        agree(t, full, what="node 3 back in %s's ISRs" % t)
    want = movable(1)
    check("elect el %d ok" % e3 in want, "el-%d is to move: %s" % (e3, want))
    rc, lines = java_elect(2, "preferred")
    check(rc == 0 and lines == want, "Java PREFERRED on every partition names the moved: %s" % want)
    for t in TOPICS:
        agree(t, balanced, what="%s balanced everywhere" % t)

    # ---- 4. unc: a partition [a, b] off node 1; its ISR all dead, b alive out of sync -------
    uv = view(1, "unc")
    u = outside(uv, 1)
    a, b = uv[u][1]
    kill(b)                                             # the follower: it leaves the ISR
    agree("unc", lambda v: v[u] == (a, (a, b), (a,)), what="unc-%d ISR shrunk to %d" % (u, a))
    kill(a)                                             # the last ISR member
    agree("unc", lambda v: v[u][0] == -1 and v[u][2] == (a,), what="unc-%d offline" % u)
    start(b)                                            # alive, not in sync
    agree("el", lambda v: b in v[E[b]][2], nodes=[1, b], what="node %d is back" % b)
    hold(lambda: (view(1, "unc") or {u: (-1,)})[u][0] == -1, 1.0,
         "unc-%d stays offline: unclean election is off" % u)
    rc, lines = java_elect(b, "preferred", "unc:%d" % u)
    check(lines == ["elect unc %d error=PREFERRED_LEADER_NOT_AVAILABLE" % u],
          "PREFERRED on offline unc-%d: PREFERRED_LEADER_NOT_AVAILABLE" % u)
    rc, lines = java_elect(b, "unclean", "unc:%d" % u)
    check(rc == 0 and lines == ["elect unc %d ok" % u], "UNCLEAN on unc-%d succeeds" % u)
    agree("unc", lambda v: v[u] == (b, (a, b), (b,)), nodes=[1, b],
          what="unc-%d led by %d with ISR [%d]" % (u, b, b))
    check(log_has(1, "UNCLEAN leader election"), "the controller logs the unclean election")
    rc, lines = java_elect(1, "unclean", "unc:%d" % u)
    check(lines == ["elect unc %d error=ELECTION_NOT_NEEDED" % u], "UNCLEAN again: not needed")
    start(a)
    v = agree("el", full, what="nodes %d and %d back in el's ISRs" % (a, b))
    check(v and not balanced(v), "el is unbalanced before the automatic rebalance: %s" % v)

    # ---- 5. automatic rebalancing (controller restarted with a 1 s check interval) ----------
    kill(1)
    drop_admin(1)
    # the controller is down: a broker-only node answers NOT_CONTROLLER (41), top level and per
    # partition (forwarding fails fast once its channel noticed)
    poll(lambda: raw_elect(2, 0, "el", [0]) == (41, [("el", 0, 41)]),
         "ElectLeaders through node 2 with the controller down: NOT_CONTROLLER")
    start(1, "leader.imbalance.check.interval.seconds=1\n")
    for t in TOPICS:
        agree(t, lambda v: balanced(v) and full(v),
              what="automatic rebalance: %s on preferred leaders, full ISRs" % t)

    # ---- 6. unc2: the same offline shape, then unclean.leader.election.enable on the topic --
    wv = view(1, "unc2")
    w = outside(wv, 1)
    c, d = wv[w][1]
    kill(d)
    agree("unc2", lambda v: v[w] == (c, (c, d), (c,)), what="unc2-%d ISR shrunk to %d" % (w, c))
    kill(c)
    agree("unc2", lambda v: v[w][0] == -1, what="unc2-%d offline" % w)
    start(d)
    agree("el", lambda v: d in v[E[d]][2], nodes=[1, d], what="node %d is back" % d)
    hold(lambda: (view(1, "unc2") or {w: (-1,)})[w][0] == -1, 1.0,
         "unc2-%d stays offline before the topic allows unclean election" % w)
    admin(d).alter_configs([ConfigResource(ConfigResourceType.TOPIC, "unc2",
                                           configs={"unclean.leader.election.enable": "true"})],
                           incremental=True)
    agree("unc2", lambda v: v[w] == (d, (c, d), (d,)), nodes=[1, d],
          what="unc2-%d led by %d after the topic enabled unclean election" % (w, d))
finally:
    for n in list(ADMINS):
        drop_admin(n)
    for n, p in list(PROCS.items()):
        p.send_signal(signal.SIGTERM)
    for n, p in list(PROCS.items()):
        try:
            # exit 0: a clean stop (under ASan, a leak fails it)
            check(p.wait(timeout=30) == 0, "node %d exits 0 on SIGTERM (%s)" % (n, p.returncode))
        except subprocess.TimeoutExpired:
            check(False, "node %d did not stop on SIGTERM" % n)
            p.kill()
    if FAILS:
        for n in (1, 2, 3):
            print("--- node %d" % n)
            with open(os.path.join(W, "broker%d.log" % n), errors="replace") as f:
                print("".join(f.readlines()[-25:]))

say("FAILED (%d)" % FAILS if FAILS else "ok")
sys.exit(1 if FAILS else 0)
