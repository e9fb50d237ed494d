#!/usr/bin/env python3
"""admin_e2e.py SRC DST -- the mirror admin RPCs against a real destination kbroker with
kmirror.so loaded, mirroring from a real source kbroker. Python standard library only: the
requests are framed by hand (Kafka's flexible encoding), so what is checked is the bytes on
the wire.

Covers: CreateMirror (good, bad name, duplicate, unreachable source, unknown key, non-PLAINTEXT),
ListMirrors (resolved source cluster id, topic count), StartMirrorTopics with a regex (topics
created with the source's topic ids and partition counts, internal topics never, an existing
topic with another id -> INCONSISTENT_TOPIC_ID), a produce to a mirror topic refused,
Pause/Resume/Stop changing the mirror.name suffix (seen through DescribeMirrors/ListMirrors and
the per-topic error codes), DeleteMirror refused while topics run and allowed once stopped.
"""
import socket
import struct
import sys
import time
import uuid

SRC, DST = sys.argv[1], sys.argv[2]

# Error codes (Kafka's, and the provisional mirror codes of docs/provisional.md).
NONE = 0
NOT_ENOUGH_REPLICAS = 19
INVALID_CONFIG = 40
INCONSISTENT_TOPIC_ID = 103
INVALID_REGULAR_EXPRESSION = 128
UNKNOWN_CLUSTER_MIRROR = 137
TOPIC_NOT_IN_CLUSTER_MIRROR = 139
MIRROR_TOPIC_ALREADY_PAUSED = 140
MIRROR_TOPIC_NOT_PAUSED = 141
CLUSTER_MIRROR_NOT_EMPTY = 143
READ_ONLY_TOPIC = 147
INVALID_CLUSTER_MIRROR_NAME = 148
CLUSTER_MIRROR_ALREADY_EXISTS = 149

FAILS = []


def check(cond, what):
    if cond:
        print("ok   " + what)
    else:
        print("FAIL " + what)
        FAILS.append(what)


# ---- encoding ---------------------------------------------------------------------------


def uvarint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def cstr(s):  # compact (nullable) string
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def carr(items, enc):  # compact (nullable) array
    if items is None:
        return uvarint(0)
    return uvarint(len(items) + 1) + b"".join(enc(i) for i in items)


TAGS = uvarint(0)


class Rd:
    def __init__(self, b):
        self.b, self.p = b, 0

    def take(self, n):
        if self.p + n > len(self.b):
            raise ValueError("truncated response")
        v = self.b[self.p:self.p + n]
        self.p += n
        return v

    def i8(self):
        return struct.unpack(">b", self.take(1))[0]

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def i64(self):
        return struct.unpack(">q", self.take(8))[0]

    def uv(self):
        shift = n = 0
        while True:
            b = self.take(1)[0]
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7

    def cstr(self):
        n = self.uv()
        return None if n == 0 else self.take(n - 1).decode()

    def carr(self, dec):
        n = self.uv()
        return None if n == 0 else [dec(self) for _ in range(n - 1)]

    def uuid(self):
        return self.take(16)

    def tags(self):
        for _ in range(self.uv()):
            self.uv()
            self.take(self.uv())


# ---- connection ---------------------------------------------------------------------------

CORR = [0]


def call(addr, key, ver, body, flexible_resp=True, client_id="admin-e2e"):
    host, port = addr.rsplit(":", 1)
    CORR[0] += 1
    cid = client_id.encode()
    hdr = struct.pack(">hhih", key, ver, CORR[0], len(cid)) + cid
    if flexible_resp:
        hdr += TAGS  # request header v2
    msg = hdr + body
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(struct.pack(">i", len(msg)) + msg)
        n = struct.unpack(">i", recvn(s, 4))[0]
        data = recvn(s, n)
    rd = Rd(data)
    corr = rd.i32()
    assert corr == CORR[0], "correlation id"
    if flexible_resp:
        rd.tags()
    return rd


def recvn(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        out += chunk
    return out


# ---- requests -----------------------------------------------------------------------------


def create_mirror(name, configs):
    body = cstr(name) + carr(list(configs.items()),
                             lambda kv: cstr(kv[0]) + cstr(kv[1]) + TAGS) + TAGS
    rd = call(DST, 97, 0, body)
    rd.i32()
    return rd.i16(), rd.cstr()


def list_mirrors():
    rd = call(DST, 98, 0, TAGS)
    rd.i32()
    ec, msg = rd.i16(), rd.cstr()

    def m(r):
        v = (r.cstr(), r.cstr(), r.cstr(), r.i32())
        r.tags()
        return v

    mirrors = rd.carr(m)
    return ec, msg, {x[0]: x for x in mirrors or []}


def topic_results(rd, with_msg=True):
    def t(r):
        v = (r.cstr(), r.i16(), r.cstr() if with_msg else None)
        r.tags()
        return v

    return {x[0]: (x[1], x[2]) for x in rd.carr(t) or []}


def tagged(tag, data):
    return uvarint(1) + uvarint(tag) + uvarint(len(data)) + data


def start_topics(mirror, topics=(), include=(), exclude=(), timeout_ms=30000):
    body = (cstr(mirror) +
            carr(list(topics), lambda t: t[1] + cstr(t[0]) + struct.pack(">i", t[2]) + TAGS) +
            carr(list(include), cstr) + struct.pack(">i", timeout_ms) +
            (tagged(0, carr(list(exclude), cstr)) if exclude else TAGS))
    rd = call(DST, 95, 0, body)
    rd.i32()
    ec, msg = rd.i16(), rd.cstr()
    return ec, msg, topic_results(rd)


def change_topics(key, mirror, topics, patterns=()):
    body = (cstr(mirror) + carr(list(topics), lambda t: cstr(t) + TAGS) + struct.pack(">q", -1) +
            (tagged(0, carr(list(patterns), cstr)) if patterns else TAGS))
    rd = call(DST, key, 0, body)
    rd.i32()
    ec, msg = rd.i16(), rd.cstr()
    if key == 103:
        rd.cstr()  # MirrorName
        return ec, msg, topic_results(rd, with_msg=False)
    return ec, msg, topic_results(rd)


def delete_mirror(name):
    rd = call(DST, 104, 0, cstr(name) + struct.pack(">q", -1) + TAGS)
    rd.i32()
    return rd.i16(), rd.cstr()


def describe_mirrors(names=None):
    rd = call(DST, 99, 0, carr(names, cstr) + b"\x00" + TAGS)
    rd.i32()
    ec, msg = rd.i16(), rd.cstr()

    def part(r):
        v = {"p": r.i32(), "state": r.cstr(), "err": r.cstr(), "retry": r.i16(),
             "src": r.i64(), "dst": r.i64(), "lme": r.i32(), "lmo": r.i64()}
        r.tags()
        return v

    def topic(r):
        v = (r.cstr(), r.carr(part))
        r.tags()
        return v

    def mirror(r):
        v = {"ec": r.i16(), "msg": r.cstr(), "name": r.cstr(), "bootstrap": r.cstr(),
             "cluster": r.cstr(), "ops": r.i32()}
        v["topics"] = {t[0]: t[1] for t in r.carr(topic) or []}
        r.tags()
        return v

    return ec, msg, {m["name"]: m for m in rd.carr(mirror) or []}


def metadata(addr):
    """Metadata v12, every topic: (cluster id, {name: (topic id, partitions)})."""
    rd = call(addr, 3, 12, uvarint(0) + b"\x00\x00" + TAGS)
    rd.i32()

    def broker(r):
        r.i32(), r.cstr(), r.i32(), r.cstr()
        r.tags()

    rd.carr(broker)
    cluster = rd.cstr()
    rd.i32()

    def arr32(r):
        r.carr(lambda x: x.i32())

    def part(r):
        r.i16(), r.i32(), r.i32(), r.i32()
        arr32(r), arr32(r), arr32(r)
        r.tags()

    def topic(r):
        ec, name, tid, _internal = r.i16(), r.cstr(), r.uuid(), r.i8()
        parts = r.carr(part)
        r.i32()
        r.tags()
        return name, (tid, len(parts or []), ec)

    topics = dict(rd.carr(topic) or [])
    return cluster, topics


def create_topics(addr, topics):
    """CreateTopics v7 (name, partitions) on a cluster; returns {name: error code}."""
    def t(x):
        return (cstr(x[0]) + struct.pack(">ih", x[1], -1) + carr([], None) + carr([], None) +
                TAGS)

    rd = call(addr, 19, 7, carr(topics, t) + struct.pack(">i?", 30000, False) + TAGS)
    rd.i32()
    out = {}

    def res(r):
        name, _tid, ec, _msg = r.cstr(), r.uuid(), r.i16(), r.cstr()
        r.i32(), r.i16()
        r.carr(lambda c: (c.cstr(), c.cstr(), c.i8(), c.i8(), c.i8(), c.tags()))
        r.tags()
        out[name] = ec

    rd.carr(res)
    return out


def produce(addr, topic):
    """Produce v9 (by name, acks=1) of a one-record batch to partition 0: (error code, message)."""
    rec_body = b"\x00\x00\x00\x01\x02x\x00"  # attrs, ts/offset delta 0, null key, value "x"
    rec = bytes([len(rec_body) << 1]) + rec_body  # zigzag varint length
    after_crc = struct.pack(">hiqqqhii", 0, 0, 0, 0, -1, -1, -1, 1) + rec
    rest = struct.pack(">ibI", 0, 2, crc32c(after_crc)) + after_crc
    batch = struct.pack(">qi", 0, len(rest)) + rest
    part = struct.pack(">i", 0) + uvarint(len(batch) + 1) + batch + TAGS
    body = (cstr(None) + struct.pack(">hi", 1, 30000) +
            carr([topic], lambda t: cstr(t) + carr([part], lambda x: x) + TAGS) + TAGS)
    rd = call(addr, 0, 9, body)

    def presp(r):
        idx, ec = r.i32(), r.i16()
        r.i64(), r.i64(), r.i64()
        r.carr(lambda x: (x.i32(), x.cstr(), x.tags()))
        msg = r.cstr()
        r.tags()
        return idx, ec, msg

    def tresp(r):
        name = r.cstr()
        parts = r.carr(presp)
        r.tags()
        return name, parts

    res = rd.carr(tresp)
    return res[0][1][0][1], res[0][1][0][2]


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def wait_for(what, fn, timeout=20):
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.time() > deadline:
            check(False, what + " (timed out)")
            return v
        time.sleep(0.1)


def states(mirror, topic):
    _, _, desc = describe_mirrors([mirror])
    return [p["state"] for p in desc.get(mirror, {}).get("topics", {}).get(topic) or []]


def wait_states(mirror, topic, want, n, timeout=30):
    """Wait until DescribeMirrors shows n partitions of topic, all in state want."""
    return wait_for("%s partitions of %s %s" % (n, topic, want),
                    lambda: (lambda st: st if len(st) == n and all(x == want for x in st)
                             else None)(states(mirror, topic)), timeout)


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
