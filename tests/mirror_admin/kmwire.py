"""kmwire.py -- Kafka flexible-version framing by hand (stdlib only) for the mirror admin
tests: the mirror RPCs, Metadata, CreateTopics, DescribeConfigs and Produce. Every request goes
to DST unless an address is given; failures are collected in FAILS by check()."""
import socket
import struct
import time

DST = None  # the destination broker the scripts talk to by default

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

    def done(self):
        return self.p == len(self.b)

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


def create_mirror(name, configs, addr=None):
    body = cstr(name) + carr(list(configs.items()),
                             lambda kv: cstr(kv[0]) + cstr(kv[1]) + TAGS) + TAGS
    rd = call(addr or DST, 97, 0, body)
    rd.i32()
    return rd.i16(), rd.cstr()


def list_mirrors(addr=None):
    rd = call(addr or DST, 98, 0, TAGS)
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


def start_topics(mirror, topics=(), include=(), exclude=(), timeout_ms=30000, addr=None):
    body = (cstr(mirror) +
            carr(list(topics), lambda t: t[1] + cstr(t[0]) + struct.pack(">i", t[2]) + TAGS) +
            carr(list(include), cstr) + struct.pack(">i", timeout_ms) +
            (tagged(0, carr(list(exclude), cstr)) if exclude else TAGS))
    rd = call(addr or DST, 95, 0, body)
    rd.i32()
    ec, msg = rd.i16(), rd.cstr()
    return ec, msg, topic_results(rd)


def change_topics(key, mirror, topics, patterns=(), addr=None):
    body = (cstr(mirror) + carr(list(topics), lambda t: cstr(t) + TAGS) + struct.pack(">q", -1) +
            (tagged(0, carr(list(patterns), cstr)) if patterns else TAGS))
    rd = call(addr or DST, key, 0, body)
    rd.i32()
    ec, msg = rd.i16(), rd.cstr()
    if key == 103:
        rd.cstr()  # MirrorName
        return ec, msg, topic_results(rd, with_msg=False)
    return ec, msg, topic_results(rd)


def delete_mirror(name, addr=None):
    rd = call(addr or DST, 104, 0, cstr(name) + struct.pack(">q", -1) + TAGS)
    rd.i32()
    return rd.i16(), rd.cstr()


def describe_mirrors(names=None, addr=None, cluster_id=None, lookups=None):
    """lookups: [(topic id bytes, [partitions])], sent with cluster_id (the failback lookup)."""
    tags = TAGS
    if cluster_id is not None:
        t0 = cstr(cluster_id)
        t1 = carr(lookups or [], lambda lk: lk[0] + carr(lk[1], lambda p: struct.pack(">i", p)) +
                  TAGS)
        tags = (uvarint(2) + uvarint(0) + uvarint(len(t0)) + t0 + uvarint(1) + uvarint(len(t1)) +
                t1)
    rd = call(addr or DST, 99, 0, carr(names, cstr) + b"\x00" + tags)
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


def describe_configs(addr, topics):
    """DescribeConfigs v4 of topics (every key, no synonyms): {topic: (error code, message,
    {key: (value, config source, sensitive)})}; config source 1 = an override of the topic
    (DYNAMIC_TOPIC_CONFIG), 4 static broker, 5 default, ..."""
    def res(t):
        return struct.pack(">b", 2) + cstr(t) + uvarint(0) + TAGS  # type TOPIC, all keys

    rd = call(addr, 32, 4, carr(topics, res) + b"\x00\x00" + TAGS)
    rd.i32()

    def config(r):
        name, value, _ro, source, sensitive = r.cstr(), r.cstr(), r.i8(), r.i8(), r.i8()
        r.carr(lambda x: (x.cstr(), x.cstr(), x.i8(), x.tags()))
        r.i8(), r.cstr()
        r.tags()
        return name, (value, source, bool(sensitive))

    def result(r):
        ec, msg, _typ, name = r.i16(), r.cstr(), r.i8(), r.cstr()
        configs = dict(r.carr(config) or [])
        r.tags()
        return name, (ec, msg, configs)

    out = dict(rd.carr(result) or [])
    rd.tags()
    return out


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


def states(mirror, topic, addr=None):
    _, _, desc = describe_mirrors([mirror], addr)
    return [p["state"] for p in desc.get(mirror, {}).get("topics", {}).get(topic) or []]


def wait_states(mirror, topic, want, n, timeout=30, addr=None):
    """Wait until DescribeMirrors shows n partitions of topic, all in state want."""
    return wait_for("%s partitions of %s %s" % (n, topic, want),
                    lambda: (lambda st: st if len(st) == n and all(x == want for x in st)
                             else None)(states(mirror, topic, addr)), timeout)




# ---- ACLs (v2, flexible) ------------------------------------------------------------------
# v2, not v3: Apache Kafka 2.8 serves the three ACL APIs up to v2 and closes the connection on
# v3 (tests/mirror_kafka --version 2.8.2); v3 only adds the USER resource type, same bytes.
# A binding is a tuple (resource type, name, pattern type, principal, host, operation,
# permission) with Kafka's codes: TOPIC 2, GROUP 3, CLUSTER 4; LITERAL 3, PREFIXED 4; READ 3,
# WRITE 4, DESCRIBE 8; DENY 2, ALLOW 3 (ANY 1 in filters).
SECURITY_DISABLED = 54


def create_acls(addr, bindings):
    """CreateAcls v2: the error code of each creation, in order."""
    def enc(b):
        rt, name, pt, princ, host, op, perm = b
        return (struct.pack(">b", rt) + cstr(name) + struct.pack(">b", pt) + cstr(princ) +
                cstr(host) + struct.pack(">bb", op, perm) + TAGS)
    rd = call(addr, 30, 2, carr(list(bindings), enc) + TAGS)
    rd.i32()

    def res(r):
        code = r.i16()
        r.cstr()
        r.tags()
        return code
    return rd.carr(res)


def acl_filter(rt=1, name=None, pt=1, princ=None, host=None, op=1, perm=1):
    return (struct.pack(">b", rt) + cstr(name) + struct.pack(">b", pt) + cstr(princ) + cstr(host) +
            struct.pack(">bb", op, perm))


def describe_acls(addr, **flt):
    """DescribeAcls v2 with a filter (default: everything): (error code, [binding tuples])."""
    rd = call(addr, 29, 2, acl_filter(**flt) + TAGS)
    rd.i32()
    code = rd.i16()
    rd.cstr()
    out = []

    def res(r):
        rt, name, pt = r.i8(), r.cstr(), r.i8()

        def acl(a):
            princ, host, op, perm = a.cstr(), a.cstr(), a.i8(), a.i8()
            a.tags()
            out.append((rt, name, pt, princ, host, op, perm))
        r.carr(acl)
        r.tags()
    rd.carr(res)
    return code, out


def delete_acls(addr, bindings):
    """DeleteAcls v2 with one exact filter per binding: [(error code, bindings removed)]."""
    def enc(b):
        rt, name, pt, princ, host, op, perm = b
        return acl_filter(rt, name, pt, princ, host, op, perm) + TAGS
    rd = call(addr, 31, 2, carr(list(bindings), enc) + TAGS)
    rd.i32()

    def fres(r):
        code = r.i16()
        r.cstr()

        def m(a):
            a.i16()
            a.cstr()
            v = (a.i8(), a.cstr(), a.i8(), a.cstr(), a.cstr(), a.i8(), a.i8())
            a.tags()
            return v
        got = r.carr(m)
        r.tags()
        return code, got
    return rd.carr(fres)
