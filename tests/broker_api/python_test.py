"""python_test.py BOOTSTRAP -- kafka-python against a running kbroker.

Admin: create topics (valid and invalid), list and describe topics, describe and alter topic
configs (mirror.name is neither shown nor accepted), create partitions, delete topics, describe
the cluster. Data: produce with acks=all (plain, gzip) and consume everything back by partition
assignment, checking keys, values and offsets. Prints one line per check; exit 1 on a failure.
"""
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import KafkaError

BOOT = sys.argv[1]
FAILS = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def err_name(e):
    return type(e).__name__


admin = KafkaAdminClient(bootstrap_servers=BOOT, client_id="kbat-py", request_timeout_ms=20000)

# ---- topics -----------------------------------------------------------------------------------
admin.create_topics([NewTopic("py-a", 3, 1, topic_configs={"retention.ms": "3600000"}),
                     NewTopic("py-b", 1, 1)])
names = set(admin.list_topics())
check({"py-a", "py-b"} <= names, "create_topics + list_topics")

for bad, want in [(NewTopic("py-a", 1, 1), "TopicAlreadyExists"),
                  (NewTopic("py bad", 1, 1), "InvalidTopic"),
                  (NewTopic("py-rf", 1, 3), "InvalidReplicationFactor"),
                  (NewTopic("py-cfg", 1, 1, topic_configs={"no.such": "1"}), "InvalidConfiguration"),
                  (NewTopic("py-mn", 1, 1, topic_configs={"mirror.name": "m"}),
                   "InvalidConfiguration")]:
    try:
        admin.create_topics([bad])
        check(False, "create %s refused" % bad.name)
    except KafkaError as e:
        check(want.lower() in err_name(e).lower(), "create %s refused with %s (%s)"
              % (bad.name, want, err_name(e)))

desc = {t["name"]: t for t in admin.describe_topics(["py-a"])}
check(len(desc["py-a"]["partitions"]) == 3, "describe_topics: 3 partitions")
check(all(p["leader_id"] == 1 for p in desc["py-a"]["partitions"]), "describe_topics: leader 1")
check(not desc["py-a"]["is_internal"], "describe_topics: not internal")

cl = admin.describe_cluster()
check(len(cl["brokers"]) == 1 and cl["brokers"][0]["broker_id"] == 1, "describe_cluster")
check(bool(cl.get("cluster_id")) and cl.get("controller_id") == 1, "describe_cluster: ids")

# ---- configs ----------------------------------------------------------------------------------
def topic_configs(name):
    res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)],
                                 include_synonyms=True, config_filter="all")
    return res["topic"][name]


cfg = topic_configs("py-a")
check(cfg["retention.ms"]["value"] == "3600000", "describe_configs: override")
check(cfg["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG", "describe_configs: source")
check(cfg["cleanup.policy"]["value"] == "delete", "describe_configs: default")
check(cfg["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG", "describe_configs: default src")
check("mirror.name" not in cfg, "describe_configs: mirror.name hidden")

r = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "py-a",
                                        configs={"retention.ms": "7200000",
                                                 "max.message.bytes": "2000000"})])
check(r["topic"]["py-a"] == "OK", "alter_configs (incremental)")
r = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "py-a",
                                        configs={"segment.ms": "3600000"})], incremental=False)
check(r["topic"]["py-a"] == "OK", "alter_configs (AlterConfigs)")
cfg = topic_configs("py-a")
check(cfg["segment.ms"]["value"] == "3600000", "AlterConfigs applied")
r = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "py-a",
                                        configs={"mirror.name": "m"})], raise_on_unknown=False)
check("InvalidConfiguration" in str(r["topic"]["py-a"]), "alter_configs mirror.name refused")

bres = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")],
                              config_filter="all")["broker"]["1"]
check("log.retention.hours" in bres and bres["node.id"]["read_only"], "describe broker configs")
r = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1",
                                        configs={"log.retention.ms": "86400000"})],
                        raise_on_unknown=False)
check(r["broker"]["1"] == "OK", "alter a dynamic broker config")
check(topic_configs("py-b")["retention.ms"]["config_source"] == "DYNAMIC_BROKER_CONFIG",
      "topic default follows the dynamic broker config")
check(topic_configs("py-b")["retention.ms"]["value"] == "86400000", "... with its value")
r = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1",
                                        configs={"log.dirs": "/x"})], raise_on_unknown=False)
check(r["broker"]["1"] != "OK", "a static broker config is refused")

# ---- partitions ---------------------------------------------------------------------------------
admin.create_partitions({"py-b": 4})
desc = {t["name"]: t for t in admin.describe_topics(["py-b"])}
check(len(desc["py-b"]["partitions"]) == 4, "create_partitions")

# ---- produce and consume ----------------------------------------------------------------------
def roundtrip(topic, codec, n):
    prod = KafkaProducer(bootstrap_servers=BOOT, acks="all", compression_type=codec,
                         linger_ms=5, retries=5)
    futs = [prod.send(topic, key=b"k-%d" % i, value=("%s-%d" % (codec, i)).encode())
            for i in range(n)]
    prod.flush(30)
    metas = [f.get(timeout=30) for f in futs]
    prod.close()
    parts = sorted({m.partition for m in metas})
    cons = KafkaConsumer(bootstrap_servers=BOOT, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", consumer_timeout_ms=15000)
    tps = [TopicPartition(topic, p) for p in parts]
    cons.assign(tps)
    cons.seek_to_beginning(*tps)
    got = {}
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        for tp, recs in cons.poll(timeout_ms=1000).items():
            for rec in recs:
                got[rec.key] = (rec.partition, rec.offset, rec.value)
    ends = cons.end_offsets(tps)
    cons.close()
    check(len(got) == n, "%s/%s: %d records consumed (want %d)" % (topic, codec, len(got), n))
    check(all(got.get(b"k-%d" % i, (0, 0, b""))[2] == ("%s-%d" % (codec, i)).encode()
              for i in range(n)), "%s/%s: values" % (topic, codec))
    by_meta = all(got.get(b"k-%d" % i, (None, None))[:2] == (m.partition, m.offset)
                  for i, m in enumerate(metas))
    check(by_meta, "%s/%s: offsets equal the producer's" % (topic, codec))
    check(sum(ends.values()) == n, "%s/%s: end offsets" % (topic, codec))


roundtrip("py-a", None, 500)
roundtrip("py-b", "gzip", 500)

admin.delete_topics(["py-a"])
check("py-a" not in set(admin.list_topics()), "delete_topics")
admin.close()

if FAILS:
    print("%d failure(s)" % len(FAILS))
    sys.exit(1)
print("PASS")
