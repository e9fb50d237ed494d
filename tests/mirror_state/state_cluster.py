#!/usr/bin/env python3
"""state_cluster.py KBROKER KMIRROR_SO -- the MirrorCoordinator (`__mirror_state`) on a real
kbroker cluster: node 4 controller-only, nodes 1-3 brokers with kmirror.so loaded
(plugin.paths, mirror.enable=true). Python standard library only: ReadMirrorStates (100) and
WriteMirrorStates (101) are framed by hand, so what is checked is the bytes on the wire.

  1. the first WriteMirrorStates creates __mirror_state (COORDINATOR_NOT_AVAILABLE meanwhile;
     compacted, internal, replication factor 3 = min(3, brokers));
  2. for keys on several shards, every broker is asked: the shard leader answers, the others
     NOT_COORDINATOR, on reads and writes alike;
  3. fencing on the wire: FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH (124), an invalid transition
     INVALID_CLUSTER_MIRROR_STATES (145), nothing changed by them;
  4. kill -9 of a shard's leader: another broker loads the shard and answers the same state;
  5. the whole cluster restarted: the state is still there, and writable.
Conditions are polled with deadlines; nothing sleeps for synchronisation.
"""
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mirror_admin"))
from kmwire import TAGS, Rd, carr, cstr, recvn, uvarint  # noqa: E402

KB, SO = sys.argv[1], sys.argv[2]
DEADLINE = float(os.environ.get("STATE_DEADLINE", "30"))
T0 = time.monotonic()
FAILS = []

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
FENCED_LEADER_EPOCH = 74
FENCED_STATE_EPOCH = 124
INVALID_CLUSTER_MIRROR_STATES = 145
RETRIABLE = (UNKNOWN_TOPIC_OR_PARTITION, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE)

PREPARING, MIRRORING, PAUSING, STOPPED = 0, 3, 4, 7


def say(*a):
    print("[%5.1fs]" % (time.monotonic() - T0), *a, flush=True)


def check(cond, what):
    say(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)
    return cond


# ---- framing (flexible versions) ---------------------------------------------------------


CORR = [0]


def call(addr, key, ver, body, flexible=True):
    CORR[0] += 1
    cid = b"state-cluster"
    hdr = struct.pack(">hhih", key, ver, CORR[0], len(cid)) + cid
    if flexible:
        hdr += TAGS
    msg = hdr + body
    with socket.create_connection(("127.0.0.1", addr), timeout=30) as s:
        s.sendall(struct.pack(">i", len(msg)) + msg)
        n = struct.unpack(">i", recvn(s, 4))[0]
        data = recvn(s, n)
    rd = Rd(data)
    if rd.i32() != CORR[0]:
        raise ValueError("correlation id")
    if flexible:
        rd.tags()
    return rd


def write_state(port, mirror, topic, part, state, leader_epoch=-1, state_epoch=-1,
                lme=(-1, -1)):
    """WriteMirrorStates for one partition: (error code, message, new state epoch)."""
    p = (struct.pack(">ibiiiq", part, state, leader_epoch, state_epoch, lme[0], lme[1]) +
         cstr(None) + struct.pack(">ib", -1, 0) + TAGS)
    body = cstr(mirror) + carr([topic], lambda t: cstr(t) + carr([p], lambda x: x) + TAGS) + TAGS
    rd = call(port, 101, 0, body)
    rd.i32()
    ec, msg = rd.i16(), rd.cstr()
    topics = rd.carr(lambda r: (r.cstr(), r.carr(lambda q: (q.i32(), q.i32(), q.i16(), q.cstr(),
                                                              q.tags())), r.tags()))
    rd.tags()
    if ec != NONE:
        return ec, msg, -1
    _, epoch, pec, pmsg, _ = topics[0][1][0]
    return pec, pmsg, epoch


def read_state(port, mirror, topic, part):
    """ReadMirrorStates for one partition: (error code, message, dict of the fields)."""
    body = (cstr(mirror) +
            carr([topic], lambda t: cstr(t) + carr([part], lambda x: struct.pack(">i", x) + TAGS) +
                 TAGS) + TAGS)
    rd = call(port, 100, 0, body)
    rd.i32()
    ec, msg = rd.i16(), rd.cstr()

    def pr(q):
        d = dict(partition=q.i32(), state=q.i8(), leader_epoch=q.i32(), state_epoch=q.i32(),
                 lme_epoch=q.i32(), lme_offset=q.i64())
        d["error"], d["message"] = q.i16(), q.cstr()
        d["retry"], d["previous"] = q.i16(), q.i8()
        q.tags()
        return d

    topics = rd.carr(lambda r: (r.cstr(), r.carr(pr), r.tags()))
    rd.tags()
    if ec != NONE:
        return ec, msg, None
    d = topics[0][1][0]
    return d["error"], d["message"], d


def create_topic(port, name, partitions, rf):
    """CreateTopics v7 (no configs): the topic's error code."""
    t = cstr(name) + struct.pack(">ih", partitions, rf) + carr([], None) + carr([], None) + TAGS
    rd = call(port, 19, 7, carr([t], lambda x: x) + struct.pack(">ib", 30000, 0) + TAGS)
    rd.i32()
    res = rd.carr(lambda r: (r.cstr(), r.take(16), r.i16(), r.cstr()))
    return res[0][2]


def metadata_topic(port, name):
    """Metadata v12 for one topic: (error, is_internal, {partition: (leader, replicas)})."""
    body = carr([name], lambda n: b"\0" * 16 + cstr(n) + TAGS) + struct.pack(">bb", 0, 0) + TAGS
    rd = call(port, 3, 12, body)
    rd.i32()
    rd.carr(lambda r: (r.i32(), r.cstr(), r.i32(), r.cstr(), r.tags()))
    rd.cstr()
    rd.i32()

    def part(r):
        ec, idx, leader, _ = r.i16(), r.i32(), r.i32(), r.i32()
        reps = r.carr(lambda q: q.i32())
        r.carr(lambda q: q.i32())
        r.carr(lambda q: q.i32())
        r.tags()
        return idx, (ec, leader, reps)

    def topic(r):
        ec, n, _, internal = r.i16(), r.cstr(), r.take(16), r.i8()
        parts = r.carr(part)
        r.i32()
        r.tags()
        return ec, n, internal, dict(parts or [])

    topics = rd.carr(topic)
    ec, _, internal, parts = topics[0]
    return ec, bool(internal), parts


# ---- the cluster -------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


W = tempfile.mkdtemp(prefix="kmstate.")
BROKERS = (1, 2, 3)
PORTS = {n: free_port() for n in BROKERS}
CTRL = 4
CTRL_PORT = free_port()
PROCS = {}
NPARTS = 5


def start(n):
    props = os.path.join(W, "s%d.properties" % n)
    with open(props, "w") as f:
        f.write("node.id=%d\nlog.dirs=%s/n%d\ncluster.id=kmMirrorStateCluster01\n" % (n, W, n))
        f.write("broker.heartbeat.interval.ms=200\nbroker.session.timeout.ms=1500\n")
        f.write("replica.lag.time.max.ms=3000\nnum.network.threads=1\nnum.io.threads=2\n")
        f.write("controller.listener.names=CONTROLLER\n")
        f.write("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n")
        f.write("controller.quorum.voters=%d@127.0.0.1:%d\n" % (CTRL, CTRL_PORT))
        if n == CTRL:
            f.write("process.roles=controller\nlisteners=CONTROLLER://127.0.0.1:%d\n" % CTRL_PORT)
        else:
            f.write("process.roles=broker\nlisteners=PLAINTEXT://127.0.0.1:%d\n" % PORTS[n])
            f.write("plugin.paths=%s\nmirror.enable=true\n" % SO)
            f.write("mirror.state.topic.num.partitions=%d\n" % NPARTS)
    log = open(os.path.join(W, "node%d.log" % n), "a")
    p = subprocess.Popen([KB, "--config", props], stdout=subprocess.PIPE, stderr=log)
    log.close()
    ready, _, _ = select.select([p.stdout], [], [], 60)
    line = p.stdout.readline().decode() if ready else ""
    if "kbroker started" not in line:
        p.kill()
        raise SystemExit("FAIL: node %d did not start: %r" % (n, line))
    PROCS[n] = p


def kill9(n):
    PROCS[n].send_signal(signal.SIGKILL)
    PROCS[n].wait()
    del PROCS[n]


def stop(n):
    p = PROCS.pop(n)
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        rc = "timeout"
    check(rc == 0, "node %d stops on SIGTERM with status 0 (got %s)" % (n, rc))


def poll(what, fn, deadline=DEADLINE):
    """Call fn until it returns a true value (or DEADLINE passes): that value, or None."""
    end = time.monotonic() + deadline
    last = None
    while time.monotonic() < end:
        try:
            v = fn()
        except (OSError, ValueError) as e:
            v, last = None, e
        if v:
            return v
        time.sleep(0.05)  # pacing of a polling loop, not synchronisation
    say("gave up waiting for %s (last error: %s)" % (what, last))
    return None


# ---- scenario ----------------------------------------------------------------------------

MIRROR = "m1"
TOPIC = "orders"
KEYS = list(range(6))  # partitions of "orders": keys spread over the shards


def find_leader(part, alive):
    """Every live broker is asked to read the key; exactly one answers, the others say
    NOT_COORDINATOR. Returns (leader, its answer) once that holds."""
    def once():
        answers = {n: read_state(PORTS[n], MIRROR, TOPIC, part) for n in alive}
        ok = [n for n, a in answers.items() if a[0] == NONE]
        notc = [n for n, a in answers.items() if a[0] == NOT_COORDINATOR]
        if len(ok) == 1 and len(notc) == len(alive) - 1:
            return ok[0], answers[ok[0]][2]
        return None
    return poll("one coordinator for orders-%d" % part, once)


def main():
    start(CTRL)
    for n in BROKERS:
        start(n)
    say("cluster up: controller %d, brokers %s" % (CTRL, PORTS))
    check(poll("orders created", lambda: create_topic(PORTS[1], TOPIC, len(KEYS), 3) in (0, 36))
          is not None, "topic orders created (RF 3)")

    # 1. the first write creates __mirror_state; meanwhile COORDINATOR_NOT_AVAILABLE
    ec, msg, _ = write_state(PORTS[2], MIRROR, TOPIC, 0, PREPARING)
    check(ec == COORDINATOR_NOT_AVAILABLE and msg, "first write: COORDINATOR_NOT_AVAILABLE (%d %s)"
          % (ec, msg))
    md = poll("__mirror_state in the metadata",
              lambda: (lambda m: m if m[0] == 0 and len(m[2]) == NPARTS and
                       all(p[1] >= 0 for p in m[2].values()) else None)(
                  metadata_topic(PORTS[1], "__mirror_state")))
    if not check(md is not None, "__mirror_state created with %d partitions, all led" % NPARTS):
        return
    if md:
        check(md[1], "__mirror_state is internal")
        check(all(len(p[2]) == 3 for p in md[2].values()),
              "__mirror_state replication factor 3 (min(3, brokers))")
    rc = create_topic(PORTS[3], "__mirror_state", 1, 1)
    check(rc != 0, "a client cannot create __mirror_state (error %d)" % rc)

    # 2. writes: the shard leader answers, every other broker NOT_COORDINATOR
    leaders = {}
    for part in KEYS:
        def try_all():
            res = {n: write_state(PORTS[n], MIRROR, TOPIC, part, PREPARING, 3) for n in BROKERS}
            ok = [n for n, r in res.items() if r[0] == NONE]
            if any(r[0] in RETRIABLE for r in res.values()) and not ok:
                return None
            return res
        res = poll("a write of orders-%d accepted" % part, try_all)
        if not check(res is not None, "orders-%d: a write is answered" % part):
            continue
        ok = [n for n, r in res.items() if r[0] == NONE]
        check(len(ok) == 1 and res[ok[0]][2] == 1,
              "orders-%d: exactly one broker (%s) accepts PREPARING, state epoch 1" % (part, ok))
        others = [r[0] for n, r in res.items() if n not in ok]
        check(all(e == NOT_COORDINATOR for e in others),
              "orders-%d: the others answer NOT_COORDINATOR (%s)" % (part, others))
        if ok:
            leaders[part] = ok[0]
    check(len(set(leaders.values())) > 1, "the shards of the keys have different leaders (%s)"
          % leaders)
    for part, lead in leaders.items():
        got = find_leader(part, BROKERS)
        check(got is not None and got[0] == lead and got[1]["state"] == PREPARING and
              got[1]["state_epoch"] == 1 and got[1]["leader_epoch"] == 3,
              "orders-%d: read from broker %s only: PREPARING, epoch 1, leader epoch 3" %
              (part, lead))

    # 3. fencing on the wire (key orders-0)
    part = 0
    lead = leaders.get(part)
    if lead is None:
        return
    port = PORTS[lead]
    ec, _, ep = write_state(port, MIRROR, TOPIC, part, MIRRORING, 5, 1, (2, 100))
    check(ec == NONE and ep == 2, "PREPARING -> MIRRORING with leader epoch 5: state epoch 2")
    ec, msg, ep = write_state(port, MIRROR, TOPIC, part, PAUSING, 4, 2)
    check(ec == FENCED_LEADER_EPOCH and ep == -1 and msg,
          "leader epoch 4 < 5: FENCED_LEADER_EPOCH (%s)" % msg)
    ec, msg, ep = write_state(port, MIRROR, TOPIC, part, PAUSING, 5, 1)
    check(ec == FENCED_STATE_EPOCH and msg, "state epoch 1 < 2: FENCED_STATE_EPOCH (%s)" % msg)
    ec, msg, ep = write_state(port, MIRROR, TOPIC, part, STOPPED, 5, 2)
    check(ec == INVALID_CLUSTER_MIRROR_STATES and msg,
          "MIRRORING -> STOPPED: INVALID_CLUSTER_MIRROR_STATES (%s)" % msg)
    ec, _, st = read_state(port, MIRROR, TOPIC, part)
    want = dict(state=MIRRORING, state_epoch=2, leader_epoch=5, lme_epoch=2, lme_offset=100)
    check(ec == NONE and all(st[k] == v for k, v in want.items()),
          "refused writes changed nothing: %s" % st)

    # 4. kill -9 the shard's leader: another broker loads the shard, same state
    kill9(lead)
    alive = [n for n in BROKERS if n != lead]
    say("killed broker %d (leader of the shard of orders-0)" % lead)
    got = find_leader(part, alive)
    check(got is not None and got[0] != lead and
          all(got[1][k] == v for k, v in want.items()),
          "after kill -9 of %d: broker %s serves the same state %s" %
          (lead, got and got[0], got and got[1]))
    if got:
        ec, _, ep = write_state(PORTS[got[0]], MIRROR, TOPIC, part, PAUSING, 5, 2)
        check(ec == NONE and ep == 3, "the new coordinator takes writes: MIRRORING -> PAUSING, "
              "state epoch 3")
    # every other key still readable through its (maybe new) coordinator
    for p2 in KEYS:
        if p2 == part or p2 not in leaders:
            continue
        g = find_leader(p2, alive)
        check(g is not None and g[1]["state"] == PREPARING and g[1]["state_epoch"] == 1,
              "orders-%d still PREPARING after the kill" % p2)
    start(lead)

    # 5. the whole cluster restarted keeps the state
    for n in BROKERS:
        stop(n)
    stop(CTRL)
    say("cluster stopped")
    start(CTRL)
    for n in BROKERS:
        start(n)
    say("cluster restarted")
    got = find_leader(part, BROKERS)
    check(got is not None and got[1]["state"] == PAUSING and got[1]["state_epoch"] == 3 and
          got[1]["lme_epoch"] == 2 and got[1]["lme_offset"] == 100,
          "after the restart: PAUSING, state epoch 3, LME (2, 100): %s" % (got and got[1]))
    if got:
        ec, _, ep = write_state(PORTS[got[0]], MIRROR, TOPIC, part, PAUSING + 1, 5, 3)
        check(ec == NONE and ep == 4, "after the restart: PAUSING -> PAUSED, state epoch 4")
    for p2 in KEYS:
        if p2 != part and p2 in leaders:
            g = find_leader(p2, BROKERS)
            check(g is not None and g[1]["state_epoch"] == 1, "orders-%d kept after the restart"
                  % p2)


if __name__ == "__main__":
    rc = 1
    try:
        main()
        rc = 1 if FAILS else 0
    finally:
        for n in list(PROCS):
            PROCS[n].kill()
            PROCS[n].wait()
        if FAILS or rc:
            for n in list(BROKERS) + [CTRL]:
                path = os.path.join(W, "node%d.log" % n)
                if os.path.exists(path):
                    print("--- node %d" % n)
                    with open(path, errors="replace") as f:
                        lines = [l for l in f if "kmirror" in l or "ERROR" in l or "WARN" in l]
                    sys.stdout.writelines(lines[-40:])
        if not os.environ.get("STATE_KEEP"):
            shutil.rmtree(W, ignore_errors=True)
    say("FAILED: %d checks" % len(FAILS) if FAILS else "all checks passed")
    sys.exit(rc)
