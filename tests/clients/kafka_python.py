#!/usr/bin/env python3
"""kafka-python suite (pure-Python client, its own protocol code), against any broker.

  kafka_python.py --bootstrap HOST:PORT      (or KM_BOOTSTRAP=HOST:PORT)

Producer + consumer: per codec (none, gzip, snappy, lz4, zstd) keyed records with headers; the
offsets the producer was told match what the consumer reads (content, order, timestamps);
beginning/end offsets and offsets_for_times; a consumer group commits and a new member resumes.
Admin: DescribeCluster; CreateTopics with configs (topic id, partitions, validate-only) and its
errors (exists, bad config value, unknown key, partitions, replication factor, bad name);
DescribeConfigs (modified / all / chosen keys, sources, unknown topic); IncrementalAlterConfigs
(SET, DELETE, APPEND, SUBTRACT, untouched keys, errors); legacy AlterConfigs (the client's
keep-the-rest mode, and the raw request's replace-everything semantics); Metadata topic list;
DeleteTopics (gone from the list, unknown topic error).
Closing line: "N passed, N failed"; exit 0 only if everything passed.
"""
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import AlterConfigOp, ConfigResource, NewTopic  # noqa: E402
from kafka.protocol.admin import AlterConfigsRequest, DescribeConfigsRequest  # noqa: E402

from kmcheck import Suite, expect, expect_eq, parse_args, unique, wait_until  # noqa: E402

TOPIC_RES = 2  # ConfigResource type TOPIC on the wire
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 120
PARTS = 3


class Ctx:
    def __init__(self, bootstrap):
        self.b = bootstrap
        self.admin = None
        self.created = []
        self.brokers = []
        self.cfg_topic = unique("kc-kpy-cfg")

    def raw(self, request):
        """Sends one request through the admin client's connection manager (for the few checks
        the public API hides: raw error codes, AlterConfigs without the client's fill-in)."""
        return self.admin._manager.run(self.admin._manager.send, request)

    def create(self, topic, partitions, configs=None, **kw):
        r = self.admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})],
                                     raise_errors=False, **kw)
        (t,) = r["topics"]
        if t["error_code"] == 0 and not kw.get("validate_only"):
            self.created.append(topic)
        return t

    def describe(self, topic, keys=None, config_filter="modified"):
        r = self.admin.describe_configs([ConfigResource("TOPIC", topic, keys)], config_filter=config_filter)
        return r["topic"][topic]


def modified(ctx, topic):
    return {k: v["value"] for k, v in ctx.describe(topic).items()}


def wait_modified(ctx, topic, want, what):
    """Waits until the topic's overrides are `want`. Kafka (KRaft) answers an alter once the
    controller has it; the broker serving DescribeConfigs applies it from the metadata log a moment
    later, so a describe right after an alter may still show the old values."""
    wait_until(lambda: modified(ctx, topic) == want, 15, "%s: %r" % (what, want))


def wait_leaders(ctx, topic, partitions):
    def ok():
        try:
            (d,) = ctx.admin.describe_topics([topic])
        except Exception:  # noqa: BLE001 - not there yet
            return None
        ps = d.get("partitions") or []
        return d if (d["error_code"] == 0 and len(ps) == partitions
                     and all(p["leader_id"] >= 0 for p in ps)) else None
    return wait_until(ok, 30, "leaders of " + topic)


# ---------------------------------------------------------------- admin: cluster and topics

def t_describe_cluster(ctx):
    c = ctx.admin.describe_cluster()
    ctx.brokers = [b["broker_id"] for b in c["brokers"]]
    expect(ctx.brokers, "no brokers")
    expect(c["controller_id"] in ctx.brokers, "controller %r is not one of the brokers %r",
           c["controller_id"], ctx.brokers)
    cid = c["cluster_id"] or ""
    expect(len(cid) == 22, "cluster id %r is not a 22-character base64 UUID", cid)
    for b in c["brokers"]:
        expect(b["host"] and b["port"] > 0, "broker %r has no address", b)


def t_create_with_configs(ctx):
    cfg = {"retention.ms": "3600000", "cleanup.policy": "compact", "max.message.bytes": "200000"}
    t = ctx.create(ctx.cfg_topic, PARTS, cfg)
    expect_eq(t["error_code"], 0, "CreateTopics error (%s)" % t.get("error_message"))
    expect_eq(t["num_partitions"], PARTS, "num_partitions in the response")
    expect_eq(t["replication_factor"], 1, "replication_factor in the response")
    tid = t["topic_id"]
    expect(tid and uuid.UUID(str(tid)).int != 0, "topic id %r", tid)
    got = {k: v["value"] for k, v in (t.get("configs") or {}).items() if k in cfg}
    expect_eq(got, cfg, "configs echoed by CreateTopics")
    for k in cfg:
        expect_eq(t["configs"][k]["config_source"], "DYNAMIC_TOPIC_CONFIG", "source of " + k)
    d = wait_leaders(ctx, ctx.cfg_topic, PARTS)
    expect_eq(str(d["topic_id"]), str(tid), "topic id in Metadata")
    expect_eq(sorted(p["partition_index"] for p in d["partitions"]), list(range(PARTS)), "partitions")
    expect_eq(d["is_internal"], False, "is_internal")


def t_create_validate_only(ctx):
    name = unique("kc-kpy-vonly")
    t = ctx.create(name, 2, validate_only=True)
    expect_eq(t["error_code"], 0, "validate-only CreateTopics error (%s)" % t.get("error_message"))
    expect(name not in ctx.admin.list_topics(), "validate-only created the topic")


def t_create_errors(ctx):
    base = unique("kc-kpy-bad")
    cases = [
        ("existing topic", ctx.cfg_topic, PARTS, {}, 36),                            # TOPIC_ALREADY_EXISTS
        ("bad config value", base + "-v", 1, {"cleanup.policy": "bogus"}, 40),       # INVALID_CONFIG
        ("non-number config", base + "-n", 1, {"retention.ms": "abc"}, 40),          # INVALID_CONFIG
        ("unknown config key", base + "-k", 1, {"no.such.config": "1"}, 40),         # INVALID_CONFIG
        ("0 partitions", base + "-p", 0, {}, 37),                                    # INVALID_PARTITIONS
        ("bad character", "kc-kpy/bad", 1, {}, 17),                                  # INVALID_TOPIC_EXCEPTION
        ("250-character name", "k" * 250, 1, {}, 17),                                # INVALID_TOPIC_EXCEPTION
    ]
    for what, name, parts, cfg, code in cases:
        t = ctx.create(name, parts, cfg)
        expect_eq(t["error_code"], code, "%s: error code (message %r)" % (what, t.get("error_message")))
        expect(t.get("error_message"), "%s: no error message", what)
    rf = len(ctx.brokers) + 1
    r = ctx.admin.create_topics([NewTopic(base + "-rf", 1, rf)], raise_errors=False)["topics"][0]
    expect_eq(r["error_code"], 38, "replication factor %d > brokers: error code (%s)" % (rf, r.get("error_message")))
    listed = set(ctx.admin.list_topics())
    expect(not any(n.startswith(base) for n in listed), "a refused topic was created: %s",
           [n for n in listed if n.startswith(base)])


def t_list_topics(ctx):
    wait_until(lambda: set(ctx.created) <= set(ctx.admin.list_topics()), 15, "created topics in the list")


# ---------------------------------------------------------------- admin: configs

def t_describe_configs(ctx):
    mod = ctx.describe(ctx.cfg_topic)
    expect_eq(sorted(mod), ["cleanup.policy", "max.message.bytes", "retention.ms"], "modified keys")
    every = ctx.describe(ctx.cfg_topic, None, "all")
    for k in ("segment.bytes", "min.insync.replicas", "compression.type", "retention.bytes"):
        expect(k in every, "key %s missing from all configs", k)
        # Not a topic override. Which broker-level source it is depends on the broker's setup
        # (Kafka 4.x KRaft keeps a cluster-wide dynamic min.insync.replicas default).
        expect(every[k]["config_source"] != "DYNAMIC_TOPIC_CONFIG", "%s: source %s", k, every[k]["config_source"])
    expect(len(every) >= 25, "only %d topic configs described", len(every))
    two = ctx.describe(ctx.cfg_topic, ["retention.ms", "segment.bytes"], "all")
    expect_eq(sorted(two), ["retention.ms", "segment.bytes"], "keys when two are asked for")
    expect_eq(two["retention.ms"]["value"], "3600000", "retention.ms")
    expect_eq(two["retention.ms"]["config_type"], "LONG", "retention.ms type")
    expect_eq(two["segment.bytes"]["config_type"], "INT", "segment.bytes type")
    r = ctx.raw(DescribeConfigsRequest(resources=[(TOPIC_RES, unique("kc-kpy-none"), None)],
                                       include_synonyms=False))
    (res,) = r.results
    expect_eq(res.error_code, 3, "DescribeConfigs of an unknown topic: error code")


def t_incremental_alter(ctx):
    r = ctx.admin.alter_configs([ConfigResource("TOPIC", ctx.cfg_topic, {
        "retention.ms": (AlterConfigOp.SET, "7200000"),
        "max.message.bytes": (AlterConfigOp.DELETE, None),
        "cleanup.policy": (AlterConfigOp.APPEND, "delete"),
    })], incremental=True)
    expect_eq(r, {"topic": {ctx.cfg_topic: "OK"}}, "IncrementalAlterConfigs result")
    wait_modified(ctx, ctx.cfg_topic, {"retention.ms": "7200000", "cleanup.policy": "compact,delete"},
                  "modified configs after SET/DELETE/APPEND")
    r = ctx.admin.alter_configs([ConfigResource("TOPIC", ctx.cfg_topic, {
        "cleanup.policy": (AlterConfigOp.SUBTRACT, "compact")})], incremental=True)
    expect_eq(r, {"topic": {ctx.cfg_topic: "OK"}}, "SUBTRACT result")
    wait_modified(ctx, ctx.cfg_topic, {"retention.ms": "7200000", "cleanup.policy": "delete"},
                  "modified configs after SUBTRACT")
    every = ctx.describe(ctx.cfg_topic, ["max.message.bytes"], "all")
    expect(every["max.message.bytes"]["config_source"] != "DYNAMIC_TOPIC_CONFIG",
           "deleted key's source %s", every["max.message.bytes"]["config_source"])


def t_incremental_alter_errors(ctx):
    cases = [
        ("non-number value", ctx.cfg_topic, {"retention.ms": "abc"}, "InvalidConfigurationError"),
        ("unknown key", ctx.cfg_topic, {"no.such.config": "1"}, "InvalidConfigurationError"),
        ("APPEND to a non-list key", ctx.cfg_topic, {"max.message.bytes": (AlterConfigOp.APPEND, "5")},
         "InvalidConfigurationError"),
        ("unknown topic", unique("kc-kpy-none"), {"retention.ms": "1000"}, "UnknownTopicOrPartitionError"),
    ]
    for what, topic, cfg, err in cases:
        r = ctx.admin.alter_configs([ConfigResource("TOPIC", topic, cfg)], raise_on_unknown=False, incremental=True)
        got = r["topic"][topic]
        expect(err in got, "%s: got %r, expected %s", what, got, err)
    expect_eq(modified(ctx, ctx.cfg_topic), {"retention.ms": "7200000", "cleanup.policy": "delete"},
              "configs after refused changes")


def t_legacy_alter(ctx):
    # The public API in legacy mode (incremental=False) first reads the modified keys and sends
    # them along, so only the key given changes.
    r = ctx.admin.alter_configs([ConfigResource("TOPIC", ctx.cfg_topic, {"retention.ms": "7300000"})],
                                incremental=False)
    expect_eq(r, {"topic": {ctx.cfg_topic: "OK"}}, "AlterConfigs result")
    wait_modified(ctx, ctx.cfg_topic, {"retention.ms": "7300000", "cleanup.policy": "delete"},
                  "configs after AlterConfigs")
    # The request itself replaces the topic's whole set: keys not sent go back to their default.
    r = ctx.raw(AlterConfigsRequest(resources=[(TOPIC_RES, ctx.cfg_topic, [("segment.ms", "3600000")])],
                                    validate_only=False))
    expect_eq([(x.error_code, x.resource_name) for x in r.responses], [(0, ctx.cfg_topic)], "raw AlterConfigs")
    wait_modified(ctx, ctx.cfg_topic, {"segment.ms": "3600000"},
                  "configs after a raw AlterConfigs (replace semantics)")
    r = ctx.raw(AlterConfigsRequest(resources=[(TOPIC_RES, ctx.cfg_topic, [("retention.ms", "abc")])],
                                    validate_only=False))
    expect_eq([x.error_code for x in r.responses], [40], "raw AlterConfigs with a bad value: error code")
    r = ctx.raw(AlterConfigsRequest(resources=[(TOPIC_RES, ctx.cfg_topic, [("retention.ms", "1000")])],
                                    validate_only=True))
    expect_eq([x.error_code for x in r.responses], [0], "validate-only AlterConfigs")
    expect_eq(modified(ctx, ctx.cfg_topic), {"segment.ms": "3600000"}, "configs after a validate-only AlterConfigs")


def t_broker_configs(ctx):
    bid = str(ctx.brokers[0])
    r = ctx.admin.describe_configs([ConfigResource("BROKER", bid, ["log.retention.hours", "num.partitions"])],
                                   config_filter="all")
    got = r["broker"][bid]
    expect_eq(sorted(got), ["log.retention.hours", "num.partitions"], "broker config keys")
    for k, v in got.items():
        expect(v["value"] is not None and v["value"].lstrip("-").isdigit(), "%s = %r", k, v["value"])


# ---------------------------------------------------------------- producer and consumer

def t_produce_consume(ctx, codec):
    topic = unique("kc-kpy-" + codec)
    t = ctx.create(topic, PARTS)
    expect_eq(t["error_code"], 0, "create %s (%s)" % (topic, t.get("error_message")))
    wait_leaders(ctx, topic, PARTS)
    p = KafkaProducer(bootstrap_servers=ctx.b, client_id="kc-kpy-producer",
                      compression_type=None if codec == "none" else codec, linger_ms=5)
    sent = []
    try:
        futs = []
        for i in range(PER_CODEC):
            k = ("key-%d" % i).encode()
            v = ("%s value %d " % (codec, i)).encode() * (1 + i % 9)
            h = [("idx", str(i).encode()), ("codec", codec.encode())]
            futs.append((k, v, h, p.send(topic, key=k, value=v, headers=h)))
        p.flush(30)
        for k, v, h, f in futs:
            md = f.get(timeout=30)
            sent.append((md.partition, md.offset, md.timestamp, k, v, h))
    finally:
        p.close(10)
    by_part = {}
    for part, off, ts, k, v, h in sent:
        by_part.setdefault(part, []).append(off)
    expect(len(by_part) >= 2, "all records went to %d partition(s)", len(by_part))
    for part, offs in by_part.items():
        expect_eq(offs, list(range(len(offs))), "offsets the producer got for partition %d" % part)

    c = KafkaConsumer(bootstrap_servers=ctx.b, client_id="kc-kpy-consumer", group_id=None,
                      enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, i) for i in range(PARTS)]
        c.assign(tps)
        c.seek_to_beginning()
        got = []
        wait_until(lambda: [got.extend(rs) for rs in c.poll(timeout_ms=200).values()] is not None
                   and len(got) >= PER_CODEC, 30, "%d records" % PER_CODEC, interval=0)
        end = c.end_offsets(tps)
        beg = c.beginning_offsets(tps)
    finally:
        c.close()
    expect_eq(len(got), PER_CODEC, "records consumed")
    want = {(part, off): (ts, k, v, h) for part, off, ts, k, v, h in sent}
    seen = set()
    for r in sorted(got, key=lambda r: (r.partition, r.offset)):
        key = (r.partition, r.offset)
        expect(key not in seen, "offset %s read twice", key)
        seen.add(key)
        expect(key in want, "unexpected record at %s", key)
        ts, k, v, h = want[key]
        expect_eq((r.key, r.value), (k, v), "record at %s" % (key,))
        expect_eq([(hk, hv) for hk, hv in r.headers], h, "headers at %s" % (key,))
        expect_eq(r.timestamp, ts, "timestamp at %s" % (key,))
        expect_eq(r.timestamp_type, 0, "timestamp type (CreateTime) at %s" % (key,))
    for part in range(PARTS):
        offs = [r.offset for r in got if r.partition == part]
        expect(offs == sorted(offs), "partition %d read out of order", part)
        tp = TopicPartition(topic, part)
        expect_eq((beg[tp], end[tp]), (0, len(by_part.get(part, []))), "beginning/end offsets of %d" % part)


def t_offsets_for_times(ctx):
    topic = unique("kc-kpy-times")
    expect_eq(ctx.create(topic, 1)["error_code"], 0, "create")
    wait_leaders(ctx, topic, 1)
    base = int(time.time() * 1000) - 100000
    p = KafkaProducer(bootstrap_servers=ctx.b)
    try:
        for i in range(10):  # explicit CreateTime timestamps 1 s apart
            p.send(topic, value=b"t%d" % i, timestamp_ms=base + 1000 * i)
        p.flush(30)
    finally:
        p.close(10)
    c = KafkaConsumer(bootstrap_servers=ctx.b, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        r = c.offsets_for_times({tp: base + 4500})[tp]
        expect(r is not None, "no offset for a timestamp inside the log")
        expect_eq((r.offset, r.timestamp), (5, base + 5000), "offset for timestamp base+4.5 s")
        r = c.offsets_for_times({tp: base})[tp]
        expect_eq((r.offset, r.timestamp), (0, base), "offset for the first timestamp")
        r = c.offsets_for_times({tp: base + 20000})[tp]
        expect(r is None, "offset for a timestamp after the last record: %r", r)
    finally:
        c.close()


def t_group_commit_resume(ctx):
    topic = unique("kc-kpy-group")
    group = unique("kc-kpy-group")
    expect_eq(ctx.create(topic, 2)["error_code"], 0, "create")
    wait_leaders(ctx, topic, 2)
    p = KafkaProducer(bootstrap_servers=ctx.b)
    try:
        for i in range(40):
            p.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
        p.flush(30)
    finally:
        p.close(10)

    def member():
        return KafkaConsumer(topic, bootstrap_servers=ctx.b, group_id=group, client_id="kc-kpy-member",
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             heartbeat_interval_ms=500, max_poll_records=5)
    first = []
    c = member()
    try:
        wait_until(lambda: [first.extend(rs) for rs in c.poll(timeout_ms=200).values()] is not None
                   and len(first) >= 10, 30, "the first member's records", interval=0)
        c.commit()  # synchronous: the positions after what was returned
        committed = {tp.partition: c.committed(tp) for tp in c.assignment()}
    finally:
        c.close()
    last = {}
    for r in first:
        last[r.partition] = max(last.get(r.partition, -1), r.offset)
    expect_eq(committed, {p_: last.get(p_, -1) + 1 for p_ in range(2)}, "committed offsets")
    offs = ctx.admin.list_group_offsets([group])[group]
    expect_eq({tp.partition: om.offset for tp, om in offs.items() if tp.topic == topic}, committed,
              "OffsetFetch through the admin client")
    second = []
    c = member()
    try:
        total = 40 - len(first)
        wait_until(lambda: [second.extend(rs) for rs in c.poll(timeout_ms=200).values()] is not None
                   and len(second) >= total, 30, "the second member's records", interval=0)
    finally:
        c.close()
    firsts = {}
    for r in second:
        firsts[r.partition] = min(firsts.get(r.partition, 1 << 62), r.offset)
    expect_eq(firsts, {p_: committed[p_] for p_ in range(2) if committed[p_] < 20},
              "where the second member started")
    both = sorted((r.partition, r.offset) for r in first + second)
    expect_eq(both, sorted((p_, o) for p_ in range(2) for o in range(20)), "records of both members")
    groups = [g for g in ctx.admin.list_groups() if g["group_id"] == group]
    expect_eq(len(groups), 1, "the group in ListGroups (%r)" % groups)
    expect_eq(groups[0].get("protocol_type"), "consumer", "its protocol type")
    expect_eq(groups[0].get("group_state"), "Empty", "its state once both members left")


# ---------------------------------------------------------------- delete

def t_delete_topics(ctx):
    names = list(ctx.created)
    r = ctx.admin.delete_topics(names, raise_errors=False)
    errs = [(t["name"], t["error_code"]) for t in r["topics"] if t["error_code"] != 0]
    expect(not errs, "DeleteTopics errors: %s", errs)
    wait_until(lambda: not set(names) & set(ctx.admin.list_topics()), 30, "deleted topics to leave the list")
    ctx.created = []
    r = ctx.admin.delete_topics([unique("kc-kpy-none")], raise_errors=False)
    expect_eq([t["error_code"] for t in r["topics"]], [3], "DeleteTopics of an unknown topic: error code")


def main():
    a = parse_args(__doc__.splitlines()[0])
    s = Suite("kafka-python", a.only)
    ctx = Ctx(a.bootstrap)

    def preflight():
        ctx.admin = KafkaAdminClient(bootstrap_servers=a.bootstrap, client_id="kc-kpy-admin",
                                     request_timeout_ms=15000)
    if not s.test("bootstrap answers (admin client connects, 15 s)", preflight):
        return s.finish()
    import kafka
    s.log("kafka-python %s" % kafka.__version__)
    try:
        s.test("DescribeCluster: cluster id, brokers with addresses, controller among them", t_describe_cluster, ctx)
        s.test("CreateTopics with configs: topic id, partitions, configs echoed, leaders", t_create_with_configs, ctx)
        s.test("CreateTopics validate-only creates nothing", t_create_validate_only, ctx)
        s.test("CreateTopics errors: 36 exists, 40 bad config, 37 partitions, 17 name, 38 RF", t_create_errors, ctx)
        s.test("DescribeConfigs: modified, all, chosen keys, types, unknown topic (3)", t_describe_configs, ctx)
        s.test("IncrementalAlterConfigs: SET, DELETE, APPEND, SUBTRACT", t_incremental_alter, ctx)
        s.test("IncrementalAlterConfigs errors: bad value, unknown key, APPEND non-list, unknown topic",
               t_incremental_alter_errors, ctx)
        s.test("legacy AlterConfigs: client keep-the-rest mode, raw replace semantics, errors, validate-only",
               t_legacy_alter, ctx)
        s.test("DescribeConfigs of the broker (two chosen keys)", t_broker_configs, ctx)
        for codec in CODECS:
            s.test("produce/consume %s: offsets, content, headers, timestamps, order, begin/end" % codec,
                   t_produce_consume, ctx, codec)
        s.test("offsets_for_times (ListOffsets by timestamp)", t_offsets_for_times, ctx)
        s.test("consumer group: commit, close, a new member resumes at the commits; ListGroups",
               t_group_commit_resume, ctx)
        s.test("Metadata topic list shows every created topic", t_list_topics, ctx)
        s.test("DeleteTopics: topics leave the list; unknown topic (3)", t_delete_topics, ctx)
    finally:
        if ctx.created:
            try:
                ctx.admin.delete_topics(ctx.created, raise_errors=False)
            except Exception:  # noqa: BLE001 - cleanup only
                pass
        ctx.admin.close()
    return s.finish()


if __name__ == "__main__":
    sys.exit(main())
