#!/usr/bin/env python3
"""me2e.py SUBCOMMAND ... -- the client side of tests/mirror_e2e (docs/testing-mirror.md).

Runs with the clients venv (tests/clients/setup-venv.sh: kafka-python with every codec).

  create-topics BOOTSTRAP PARTS RF TOPIC...    create topics (kafka-python admin), wait for leaders
  caught-up KM DST SRC MIRROR EXPECT_PARTS [TOPIC...]
                                               exit 0 when DescribeMirrors (kafka-mirrors --json)
                                               shows EXPECT_PARTS partitions (of the TOPICs if
                                               given), all MIRRORING, and every destination log
                                               end equals the source's log end (kafka-python,
                                               read_uncommitted); prints why not
  part-info BOOTSTRAP TOPIC PARTITION          "leader replica,... isr,..." (Metadata v12)
  elect-preferred BOOTSTRAP TOPIC PARTITION    ElectLeaders PREFERRED for the partition: exit 0
                                               when elected or already the preferred leader
  ends BOOTSTRAP TOPIC...                      "topic-partition log-end-offset" lines (kafka-python)
  produce-one BOOTSTRAP TOPIC PARTITION        raw Produce of one record to the partition's leader:
                                               prints "<error code> <message>"
  fanout KM DST MIRROR EXPECT_PARTS            exit 0 when DescribeMirrors through each broker of
                                               DST alone lists every partition exactly once
  read-compare SRC DST EXPECT.json             kafka-python reads every partition of every topic
                                               of EXPECT.json on both clusters, read_uncommitted and
                                               read_committed: same records (offset, key, value,
                                               headers, timestamp) and the expected counts
  read-only SRC DST MIRROR_TOPIC PLAIN_TOPIC MIRROR
                                               scenario read-only (raw wire client and
                                               kafka-python's admin, see below)

Exit 0 pass, 1 fail (every failure printed as FAIL: ...), 2 setup error.
"""
import glob
import json
import os
import re
import struct
import subprocess
import sys
import time
import urllib.request

# The wire primitives (compact encodings, the response reader, one request per connection, CRC32C)
# are shared with tests/mirror_admin.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mirror_admin"))
import kmwire  # noqa: E402
from kmwire import TAGS, carr, crc32c, cstr, uvarint  # noqa: E402

FAILS = []


# Control batch types (the key of a control record): Kafka's ABORT and COMMIT, and the mirror's
# MIRROR_PID_RESET (docs/provisional.md).
CONTROL_ABORT, CONTROL_COMMIT, CONTROL_PID_RESET = 0, 1, 7


def read_varint(b, pos):
    """A zigzag varint at pos of b: (value, next position); ValueError if it runs off b."""
    shift = n = 0
    while True:
        if pos >= len(b) or shift > 63:
            raise ValueError("bad varint")
        c = b[pos]
        pos += 1
        n |= (c & 0x7F) << shift
        if not c & 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7


def scan_log(partdir):
    """Every record batch of a partition directory's segment files, in offset order: dicts with
    base, last, epoch (partition leader epoch), pid, pepoch, txn, control (the control type, or
    None) and size (bytes on disk, the 12-byte offset/length prefix included). Stops at a torn
    tail (a follower may be writing), never reads past a length."""
    out = []
    for name in sorted(x for x in os.listdir(partdir) if x.endswith(".log")):
        with open(os.path.join(partdir, name), "rb") as f:
            b = f.read()
        pos = 0
        while pos + 61 <= len(b):
            base, blen, epoch, magic = struct.unpack_from(">qiib", b, pos)
            if magic != 2 or blen < 49 or pos + 12 + blen > len(b):
                break  # a torn tail: not a whole batch
            attrs, lod = struct.unpack_from(">hi", b, pos + 21)
            pid, pepoch = struct.unpack_from(">qh", b, pos + 43)
            ctl = None
            if attrs & 0x20:  # control batch: the type is in its first record's key
                r = pos + 61
                _len, r = read_varint(b, r)
                r += 1  # record attributes
                _ts, r = read_varint(b, r)
                _od, r = read_varint(b, r)
                klen, r = read_varint(b, r)
                if klen >= 4 and r + 4 <= pos + 12 + blen:
                    ctl = struct.unpack_from(">h", b, r + 2)[0]
            out.append({"base": base, "last": base + lod, "epoch": epoch, "pid": pid,
                        "pepoch": pepoch, "txn": bool(attrs & 0x10), "control": ctl,
                        "size": 12 + blen})
            pos += 12 + blen
    return out


def open_txns(batches, below=None):
    """{producer id: first offset} of the transactions open at offset below (default: at the end
    of batches): a transactional data batch with no COMMIT/ABORT of its producer after it."""
    open_ = {}
    for bt in batches:
        if below is not None and bt["base"] >= below:
            break
        if bt["control"] is None:
            if bt["txn"]:
                open_.setdefault(bt["pid"], bt["base"])
        elif bt["control"] in (CONTROL_ABORT, CONTROL_COMMIT):
            open_.pop(bt["pid"], None)
    return open_


def metric_sums(nodelog_glob, regexes):
    """The nodes whose logs match NODELOG_GLOB serve /metrics on the port their last start logged
    ("metrics on http://..."): per regex (re.match on a line), the sum of the values of the lines it
    matches over all of them. None when no log names a metrics listener."""
    ports = []
    for log in sorted(glob.glob(nodelog_glob)):
        port = None
        with open(log, errors="replace") as f:
            for line in f:
                m = re.search(r"metrics on http://[^:]*:(\d+)/metrics", line)
                if m:
                    port = int(m.group(1))  # the last start of the node wins
        if port is not None:
            ports.append(port)
    if not ports:
        return None
    sums = [0.0] * len(regexes)
    pats = [re.compile(r) for r in regexes]
    for port in ports:
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read()
        for line in body.decode().splitlines():
            for i, p in enumerate(pats):
                if p.match(line):
                    sums[i] += float(line.rsplit(" ", 1)[1])
    return sums

def check(cond, what):
    print(("ok   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        FAILS.append(what)
    return cond


def done():
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    sys.exit(0)


# ------------------------------------------------------------------------ kafka-python helpers


def create_topics(bootstrap, parts, rf, topics):
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError
    adm = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        adm.create_topics([NewTopic(t, int(parts), int(rf)) for t in topics], timeout_ms=30000)
    except TopicAlreadyExistsError:
        pass
    finally:
        adm.close()
    # Wait until every partition has a leader on the broker side (a producer started right
    # after creation would otherwise see LEADER_NOT_AVAILABLE for a while; harmless, but slow).
    deadline = time.time() + 60
    while True:
        _, tops = metadata(bootstrap.split(",")[0], topics)
        ok = all(t in tops and tops[t]["ec"] == 0 and len(tops[t]["parts"]) == int(parts) and
                 all(p["leader"] >= 0 and len(p["isr"]) == int(rf)
                     for p in tops[t]["parts"].values()) for t in topics)
        if ok:
            print("created %d topics with %s partitions, RF %s" % (len(topics), parts, rf))
            return 0
        if time.time() > deadline:
            print("FAIL: topics without leaders or full ISR after 60 s: %s" % tops)
            return 1
        time.sleep(0.2)  # poll interval of the deadline loop above


def end_offsets(bootstrap, topics, committed=False):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      isolation_level="read_committed" if committed else "read_uncommitted",
                      request_timeout_ms=30000)
    try:
        tps = [TopicPartition(t, p) for t in topics for p in sorted(c.partitions_for_topic(t) or [])]
        return {(tp.topic, tp.partition): o for tp, o in c.end_offsets(tps).items()}
    finally:
        c.close()


def read_all(bootstrap, topic, committed, deadline_s=120):
    """Every record of every partition of topic up to its end offset (for read_committed: the
    last stable offset). Returns {partition: [(offset, key, value, headers, ts, ts_type)]}."""
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      isolation_level="read_committed" if committed else "read_uncommitted",
                      auto_offset_reset="earliest", request_timeout_ms=30000,
                      max_partition_fetch_bytes=4 << 20)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or [])]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)
        out = {tp.partition: [] for tp in tps}
        deadline = time.time() + deadline_s
        while any(c.position(tp) < ends[tp] for tp in tps):
            if time.time() > deadline:
                raise RuntimeError("%s on %s: positions %s did not reach the end offsets %s" % (
                    topic, bootstrap, {tp.partition: c.position(tp) for tp in tps},
                    {tp.partition: o for tp, o in ends.items()}))
            for tp, recs in c.poll(timeout_ms=500).items():
                for r in recs:
                    if r.offset < ends[tp]:
                        out[tp.partition].append((r.offset, r.key, r.value, tuple(r.headers),
                                                  r.timestamp, r.timestamp_type))
        return out, {tp.partition: o for tp, o in ends.items()}
    finally:
        c.close()


def rdk_at_end(c):
    """A confluent_kafka Consumer has an assignment and its position in every assigned partition
    is the partition's high watermark."""
    asg = c.assignment()
    if not asg:
        return False
    for tp in c.position(asg):
        _, high = c.get_watermark_offsets(tp, timeout=10)
        if tp.offset < high:
            return False
    return True

def describe_one(km, addr, mirror):
    """DescribeMirrors (kafka-mirrors --json) through the one broker at addr: its partitions of
    the mirror, or a string saying why there are none."""
    try:
        out = subprocess.run([km, "--bootstrap-server", addr, "--describe", "--mirror", mirror,
                              "--json", "--timeout-ms", "10000"], capture_output=True,
                             timeout=30, check=False)
        doc = json.loads(out.stdout.decode() or "{}")
    except (subprocess.TimeoutExpired, ValueError) as e:
        return "describe through %s: %s" % (addr, e)
    ms = [m for m in doc.get("mirrors", []) if m.get("mirror") == mirror]
    if len(ms) != 1:
        return "describe through %s: mirror %s not listed (exit %d): %s" % (
            addr, mirror, out.returncode, out.stderr.decode().strip())
    return ms[0]["partitions"] or []


def cmd_fanout(km, dst, mirror, expect_parts):
    """Exit 0 when DescribeMirrors through each single broker lists every partition once."""
    rc = 0
    for addr in dst.split(","):
        parts = describe_one(km, addr, mirror)
        if isinstance(parts, str):
            print(parts)
            return 1
        keys = sorted((p["topic"], p["partition"]) for p in parts)
        ok = len(keys) == int(expect_parts) and len(set(keys)) == len(keys)
        print("describe through %s: %d partitions listed (%d distinct), want %s" % (
            addr, len(keys), len(set(keys)), expect_parts))
        rc |= 0 if ok else 1
    return rc


def cmd_caught_up(km, dst, src, mirror, expect_parts, *only_topics):
    """Every partition MIRRORING with lag 0 and the source's log end, as DescribeMirrors through
    the first broker of DST reports them (it gathers every broker's partitions); with
    only_topics, the partitions of those topics only (the mirror may have others)."""
    parts = describe_one(km, dst.split(",")[0], mirror)
    if isinstance(parts, str):
        print(parts)
        return 1
    if only_topics:
        parts = [p for p in parts if p["topic"] in only_topics]
    how = "DescribeMirrors through %s" % dst.split(",")[0]
    keys = [(p["topic"], p["partition"]) for p in parts]
    if len(keys) != len(set(keys)):
        print("describe (%s): a partition is listed twice: %s" % (how, sorted(keys)))
        return 1
    if len(keys) != int(expect_parts):
        print("describe (%s): %d partitions listed, want %s" % (how, len(keys), expect_parts))
        return 1
    not_mirroring = [(p["topic"], p["partition"], p["state"], p["errorMessage"]) for p in parts
                     if p["state"] != "MIRRORING"]
    if not_mirroring:
        print("describe: not MIRRORING: %s" % not_mirroring[:8])
        return 1
    topics = sorted({k[0] for k in keys})
    srcend = end_offsets(src, topics)
    behind = []
    for p in parts:
        want = srcend.get((p["topic"], p["partition"]))
        if p["destinationOffset"] != want or p["lag"] != 0 or p["sourceOffset"] != want:
            behind.append((p["topic"], p["partition"], p["sourceOffset"], p["destinationOffset"],
                           p["lag"], want))
    if behind:
        print("describe: %d partitions not caught up (topic, partition, source HW, dest LEO, "
              "lag, source log end): %s" % (len(behind), behind[:6]))
        return 1
    print("caught up (%s): %d partitions MIRRORING, lag 0, destination log ends = source log "
          "ends (%d records in all)" % (how, len(parts), sum(srcend.values())))
    return 0


def cmd_read_compare(src, dst, expect_file):
    with open(expect_file) as f:
        expect = json.load(f)
    for topic in sorted(expect):
        for committed in (False, True):
            iso = "read_committed" if committed else "read_uncommitted"
            try:
                s, s_end = read_all(src, topic, committed)
                d, d_end = read_all(dst, topic, committed)
            except Exception as e:  # noqa: BLE001 -- any client error is a failed check
                check(False, "%s %s: read failed: %s" % (topic, iso, e))
                continue
            n_s = sum(len(v) for v in s.values())
            n_d = sum(len(v) for v in d.values())
            want = expect[topic]["committed" if committed else "uncommitted"]
            check(s_end == d_end, "%s %s: end offsets equal on both sides (%s)" % (
                topic, iso, sorted(s_end.items()) if s_end == d_end else (s_end, d_end)))
            check(n_s == want, "%s %s: the source returns %d records, want %d" % (
                topic, iso, n_s, want))
            same = s == d
            if not same:
                for p in sorted(set(s) | set(d)):
                    a, b = s.get(p, []), d.get(p, [])
                    if a != b:
                        i = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]),
                                 min(len(a), len(b)))
                        print("  partition %d: first difference at index %d: source %s, "
                              "destination %s" % (p, i, a[i:i + 1], b[i:i + 1]))
                        break
            check(same, "%s %s: the destination returns the same %d records as the source "
                  "(offset, key, value, headers, timestamp; destination %d)" % (topic, iso, n_s, n_d))
    done()


# ------------------------------------------------------------------------------- raw wire
# A client that shows the error code as it is on the wire: released clients do not know the
# provisional mirror codes (READ_ONLY_TOPIC is 147 here, docs/provisional.md).

READ_ONLY_TOPIC = kmwire.READ_ONLY_TOPIC
NOT_LEADER_OR_FOLLOWER = 6


def istr(s):  # classic nullable string
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def iarr(items, enc):  # classic array
    return struct.pack(">i", len(items)) + b"".join(enc(i) for i in items)


def r_istr(rd):
    n = rd.i16()
    return None if n < 0 else rd.take(n).decode()


def r_iarr(rd, dec):
    n = rd.i32()
    return None if n < 0 else [dec(rd) for _ in range(n)]


def call(addr, key, ver, body, flexible):
    return kmwire.call(addr, key, ver, body, flexible_resp=flexible, client_id="mirror-e2e")


def metadata(addr, topics=None):
    """Metadata v11: ({node id: addr}, {topic: {ec, id, parts: {p: {leader, epoch, replicas, isr}}}}).

    v11, not v12: Apache Kafka 2.8 serves Metadata up to v11 and closes the connection on v12
    (tests/mirror_kafka --version 2.8.2). The two are the same bytes here (v12 only lets a topic
    name be null, which this never sends nor expects)."""
    req = carr([t for t in topics], lambda t: b"\x00" * 16 + cstr(t) + TAGS) if topics else b"\x00"
    rd = call(addr, 3, 11, req + b"\x00\x00" + TAGS, True)
    rd.i32()

    def broker(r):
        v = (r.i32(), r.cstr(), r.i32())
        r.cstr()
        r.tags()
        return v

    nodes = {b[0]: "%s:%d" % (b[1], b[2]) for b in rd.carr(broker) or []}
    rd.cstr()
    rd.i32()

    def part(r):
        ec, idx, leader, epoch = r.i16(), r.i32(), r.i32(), r.i32()
        reps, isr = r.carr(lambda x: x.i32()), r.carr(lambda x: x.i32())
        r.carr(lambda x: x.i32())
        r.tags()
        return idx, {"ec": ec, "leader": leader, "epoch": epoch, "replicas": reps or [],
                     "isr": isr or []}

    def topic(r):
        ec, name, tid, _internal = r.i16(), r.cstr(), r.take(16), r.i8()
        parts = dict(r.carr(part) or [])
        r.i32()
        r.tags()
        return name, {"ec": ec, "id": tid, "parts": parts}

    return nodes, dict(rd.carr(topic) or [])


STATE_TOPIC = "__mirror_state"


def murmur2(data):
    """Kafka's murmur2 (the partitioner's), as an unsigned 32-bit value."""
    m, h = 0x5BD1E995, (0x9747B28C ^ len(data)) & 0xFFFFFFFF
    n4 = len(data) // 4
    for i in range(n4):
        k = struct.unpack_from("<I", data, 4 * i)[0]
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[4 * n4:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if len(tail) >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def mirror_coordinator(bootstrap, mirror):
    """MIRROR's coordinator, asked through the first broker of BOOTSTRAP: the leader of the
    __mirror_state partition toPositive(murmur2(name)) % partitions (docs/plugin.md "Mirror-level
    records"). Returns (node id, "host:port"), or (None, why) when it has no live leader."""
    nodes, tops = metadata(bootstrap.split(",")[0], [STATE_TOPIC])
    st = tops.get(STATE_TOPIC)
    if not st or st["ec"] != 0 or not st["parts"]:
        return None, "%s: not in the metadata (%s)" % (STATE_TOPIC, st)
    p = (murmur2(mirror.encode()) & 0x7FFFFFFF) % len(st["parts"])
    leader = st["parts"][p]["leader"]
    if leader not in nodes:
        return None, "%s-%d (mirror %s): leader %d is not a live broker" % (STATE_TOPIC, p, mirror,
                                                                            leader)
    return leader, nodes[leader]

def elect_preferred(addr, topic, partition):
    """ElectLeaders v1, PREFERRED, for one partition (forwarded to the controller by any
    broker): (top-level error code, partition error code, message). ELECTION_NOT_NEEDED (84)
    when the preferred replica leads already."""
    body = (struct.pack(">b", 0) +
            iarr([topic], lambda t: istr(t) + iarr([partition], lambda p: struct.pack(">i", p))) +
            struct.pack(">i", 30000))
    rd = call(addr, 43, 1, body, False)
    rd.i32()
    top = rd.i16()
    res = r_iarr(rd, lambda r: (r_istr(r), r_iarr(r, lambda x: (x.i32(), x.i16(), r_istr(x)))))
    if not res or not res[0][1]:
        return top, -1, "no partition result"
    return top, res[0][1][0][1], res[0][1][0][2]


def one_record_batch(value=b"x"):
    rec_body = b"\x00\x00\x00\x01" + bytes([len(value) << 1]) + value + b"\x00"
    rec = bytes([len(rec_body) << 1]) + rec_body
    now = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", 0, 0, now, now, -1, -1, -1, 1) + rec
    rest = struct.pack(">ibI", 0, 2, crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(rest)) + rest


def produce(addr, topic, partition, acks, batch=None):
    """Produce v9 of a one-record batch (or of the record batch given): (error code, error
    message)."""
    return produce_full(addr, topic, partition, acks, batch)[:2]


def produce_at(addr, topic, partition, acks, value=b"x"):
    """Produce v9 of a one-record batch with value (at most 63 bytes): (error code, error
    message, base offset)."""
    return produce_full(addr, topic, partition, acks, one_record_batch(value))


def produce_full(addr, topic, partition, acks, batch=None):
    """produce(), also returning the base offset the broker assigned: (error code, message,
    base offset)."""
    batch = batch if batch is not None else one_record_batch()
    part = struct.pack(">i", partition) + uvarint(len(batch) + 1) + batch + TAGS
    body = (cstr(None) + struct.pack(">hi", acks, 10000) +
            carr([topic], lambda t: cstr(t) + carr([part], lambda x: x) + TAGS) + TAGS)
    rd = call(addr, 0, 9, body, True)

    def presp(r):
        _idx, ec = r.i32(), r.i16()
        base = r.i64()
        r.i64(), r.i64()
        r.carr(lambda x: (x.i32(), x.cstr(), x.tags()))
        msg = r.cstr()
        r.tags()
        return ec, msg, base

    def tresp(r):
        r.cstr()
        v = r.carr(presp)
        r.tags()
        return v

    return rd.carr(tresp)[0][0]


def incremental_alter(addr, topic, ops):
    """IncrementalAlterConfigs v0 (v1 is flexible) on a topic, ops = [(name, op 0 SET / 1 DELETE, value)]."""
    body = iarr([topic], lambda t: struct.pack(">b", 2) + istr(t) + iarr(
        ops, lambda o: istr(o[0]) + struct.pack(">b", o[1]) + istr(o[2]))) + b"\x00"
    rd = call(addr, 44, 0, body, False)
    rd.i32()
    res = r_iarr(rd, lambda r: (r.i16(), r_istr(r), r.i8(), r_istr(r)))
    return res[0][0], res[0][1]


def alter_configs(addr, topic, kvs):
    """AlterConfigs v1 (replaces the topic's override set): (error code, message)."""
    body = iarr([topic], lambda t: struct.pack(">b", 2) + istr(t) + iarr(
        kvs, lambda kv: istr(kv[0]) + istr(kv[1]))) + b"\x00"
    rd = call(addr, 33, 1, body, False)
    rd.i32()
    res = r_iarr(rd, lambda r: (r.i16(), r_istr(r), r.i8(), r_istr(r)))
    return res[0][0], res[0][1]


def create_topic(addr, name, configs):
    """CreateTopics v7 (1 partition, default RF, with configs): (error code, message)."""
    t = (cstr(name) + struct.pack(">ih", 1, -1) + b"\x01" +
         carr(configs, lambda kv: cstr(kv[0]) + cstr(kv[1]) + TAGS) + TAGS)
    rd = call(addr, 19, 7, carr([t], lambda x: x) + struct.pack(">i?", 30000, False) + TAGS, True)
    rd.i32()

    def res(r):
        name_, _tid, ec, msg = r.cstr(), r.take(16), r.i16(), r.cstr()
        r.i32(), r.i16()
        r.carr(lambda c: (c.cstr(), c.cstr(), c.i8(), c.i8(), c.i8(), c.tags()))
        r.tags()
        return name_, ec, msg

    out = rd.carr(res)
    return out[0][1], out[0][2]


def cmd_read_only(src, dst, mtopic, plain, mirror):
    """Produce to a mirror topic: READ_ONLY_TOPIC on its leader, refused on every other broker,
    nothing appended on any replica; config requests that set or remove mirror.name refused;
    a CreateTopics carrying mirror.name refused; CreatePartitions (kafka-python admin) refused
    with READ_ONLY_TOPIC naming MIRROR, the partition count unchanged."""
    seed = dst.split(",")[0]
    nodes, tops = metadata(seed, [mtopic, plain])
    if not check(tops.get(mtopic, {}).get("ec") == 0 and tops.get(plain, {}).get("ec") == 0,
                 "metadata for %s and %s" % (mtopic, plain)):
        done()
    parts = tops[mtopic]["parts"]

    for p in sorted(parts):
        leader = parts[p]["leader"]
        before = end_offsets(dst, [mtopic])[(mtopic, p)]
        for acks in (1, -1):
            ec, msg = produce(nodes[leader], mtopic, p, acks)
            check(ec == READ_ONLY_TOPIC, "produce acks=%d to %s-%d on its leader %d: error code %d "
                  "(want READ_ONLY_TOPIC %d): %s" % (acks, mtopic, p, leader, ec, READ_ONLY_TOPIC, msg))
        for nid in sorted(nodes):
            if nid == leader:
                continue
            ec, msg = produce(nodes[nid], mtopic, p, 1)
            check(ec in (READ_ONLY_TOPIC, NOT_LEADER_OR_FOLLOWER),
                  "produce to %s-%d on broker %d (not its leader): refused with %d: %s" % (
                      mtopic, p, nid, ec, msg))
        after = end_offsets(dst, [mtopic])[(mtopic, p)]
        check(after == before, "%s-%d: log end offset %d after the refused produces (was %d)" % (
            mtopic, p, after, before))
    # Config requests from a client must neither set nor remove mirror.name.
    seeds = [nodes[n] for n in sorted(nodes)]
    for i, (what, fn) in enumerate([
            ("IncrementalAlterConfigs DELETE mirror.name on %s" % mtopic,
             lambda a: incremental_alter(a, mtopic, [("mirror.name", 1, None)])),
            ("IncrementalAlterConfigs SET mirror.name=other on %s" % mtopic,
             lambda a: incremental_alter(a, mtopic, [("mirror.name", 0, "other")])),
            ("IncrementalAlterConfigs SET mirror.name on the plain topic %s" % plain,
             lambda a: incremental_alter(a, plain, [("mirror.name", 0, "x")])),
            ("AlterConfigs with mirror.name=other on %s" % mtopic,
             lambda a: alter_configs(a, mtopic, [("mirror.name", "other")])),
            ("AlterConfigs with mirror.name on the plain topic %s" % plain,
             lambda a: alter_configs(a, plain, [("retention.ms", "86400000"),
                                                ("mirror.name", "x")])),
            ("CreateTopics ro-created with mirror.name",
             lambda a: create_topic(a, "ro-created", [("mirror.name", "x")])),
    ]):
        addr = seeds[i % len(seeds)]
        ec, msg = fn(addr)
        check(ec != 0, "%s (through %s): refused with %d: %s" % (what, addr, ec, msg))
    # A client (kafka-python's admin) cannot add partitions to the mirror topic: READ_ONLY_TOPIC
    # naming the mirror and the fix; its partition count stays the source's (design M113).
    ec, msg = admin_grow(dst, mtopic, len(parts) + 2)
    check(ec == READ_ONLY_TOPIC and ("'%s'" % mirror) in msg and "--stop" in msg,
          "kafka-python create_partitions on %s (mirror %s): refused with %d (want READ_ONLY_TOPIC "
          "%d, naming the mirror and --stop): %s" % (mtopic, mirror, ec, READ_ONLY_TOPIC, msg))
    # AlterConfigs replaces the override set; one without mirror.name must keep it (the topic
    # stays a mirror topic), as must everything above.
    ec, msg = alter_configs(seeds[0], mtopic, [("retention.ms", "86400000")])
    check(ec == 0, "AlterConfigs without mirror.name on %s accepted: %d %s" % (mtopic, ec, msg))
    _, tops2 = metadata(seed, [mtopic, plain, "ro-created"])
    check(tops2.get("ro-created", {}).get("ec") != 0,
          "ro-created does not exist (error %s)" % tops2.get("ro-created", {}).get("ec"))
    p0 = min(parts)
    leader = tops2[mtopic]["parts"][p0]["leader"]
    deadline = time.time() + 10
    while True:  # the config change travels through the metadata log: poll a while
        ec, msg = produce(nodes[leader], mtopic, p0, 1)
        if ec != READ_ONLY_TOPIC or time.time() > deadline:
            break
        time.sleep(0.2)  # poll interval: the change must NOT make it writable within 10 s
    check(ec == READ_ONLY_TOPIC, "%s-%d still READ_ONLY_TOPIC after the config requests: %d %s" % (
        mtopic, p0, ec, msg))
    pl = tops2[plain]["parts"][0]["leader"]
    ec, msg = produce(nodes[pl], plain, 0, -1)
    check(ec == 0, "the plain topic %s still takes writes: %d %s" % (plain, ec, msg))
    check(len(tops2[mtopic]["parts"]) == len(parts), "%s still has %d partitions (metadata: %d)" % (
        mtopic, len(parts), len(tops2[mtopic]["parts"])))
    done()


def admin_grow(bootstrap, topic, count):
    """kafka-python admin create_partitions of TOPIC to COUNT: (error code, message)."""
    from kafka.admin import KafkaAdminClient
    adm = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        r = adm.create_partitions({topic: count}, timeout_ms=30000, raise_errors=False)
    finally:
        adm.close()
    res = r.results[0]
    return res.error_code, res.error_message or ""


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "create-topics":
        sys.exit(create_topics(a[0], a[1], a[2], a[3:]))
    if cmd == "ends":
        for (t, p), o in sorted(end_offsets(a[0], a[1:]).items()):
            print("%s-%d %d" % (t, p, o))
        sys.exit(0)
    if cmd == "produce-one":
        nodes, tops = metadata(a[0].split(",")[0], [a[1]])
        leader = tops[a[1]]["parts"][int(a[2])]["leader"]
        ec, msg = produce(nodes[leader], a[1], int(a[2]), 1)
        print("%d %s" % (ec, msg))
        sys.exit(0)
    if cmd == "part-info":
        _, tops = metadata(a[0].split(",")[0], [a[1]])
        pi = tops.get(a[1], {}).get("parts", {}).get(int(a[2]))
        if not pi:
            print("no metadata for %s-%s: %s" % (a[1], a[2], tops))
            sys.exit(1)
        print("%d %s %s" % (pi["leader"], ",".join(map(str, pi["replicas"])),
                            ",".join(map(str, pi["isr"]))))
        sys.exit(0)
    if cmd == "elect-preferred":
        top, ec, msg = elect_preferred(a[0].split(",")[0], a[1], int(a[2]))
        print("%d %d %s" % (top, ec, msg))
        sys.exit(0 if top == 0 and ec in (0, 84) else 1)
    if cmd == "fanout":
        sys.exit(cmd_fanout(*a))
    if cmd == "caught-up":
        sys.exit(cmd_caught_up(*a))
    if cmd == "read-compare":
        cmd_read_compare(*a)
    if cmd == "read-only":
        cmd_read_only(*a)
    print("unknown subcommand %s" % cmd)
    sys.exit(2)


if __name__ == "__main__":
    main()
