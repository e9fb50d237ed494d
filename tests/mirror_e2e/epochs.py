#!/usr/bin/env python3
"""epochs.py SUBCOMMAND ... -- client side of scenario epochs (tests/mirror_e2e/scn_epochs.sh,
docs/testing-mirror.md "Scenario epochs"). Runs with the clients venv (confluent-kafka, which
bundles librdkafka, and kafka-python).

  create-assigned BOOTSTRAP TOPIC PARTS R1,R2,R3
        create TOPIC with PARTS partitions, each on replicas R1,R2,R3 (R1 the preferred leader);
        waits until every partition has a leader and a full ISR
  elect BOOTSTRAP TOPIC
        ElectLeaders (preferred) for every partition of TOPIC (ELECTION_NOT_NEEDED is fine)
  raise-epoch CONTROLLER TOPIC PARTS MIN_EPOCH
        BumpLeaderEpochs (105, kbroker's controller listener, docs/provisional.md) raising
        every partition of TOPIC to leader epoch >= MIN_EPOCH: the epoch jump many elections
        would make, in one request (the leaders stay); exit 1 unless every partition answers 0
  epoch-ends BOOTSTRAP TOPIC MAX_EPOCH
        OffsetForLeaderEpoch v4 as a consumer (replica -1, current leader epoch -1) to each
        partition's leader, for every epoch 0..MAX_EPOCH: lines "P E -> EPOCH END_OFFSET ERROR"
        (the epoch cache as clients see it: the largest epoch <= E and where it ends)
  rdk-consume BOOTSTRAP TOPIC GROUP SECONDS SESSIONS [MIN_RECORDS]
        librdkafka consumer (confluent-kafka) of group GROUP: SESSIONS consumers one after the
        other, each subscribed for SECONDS/SESSIONS and until it has read a record, the last one
        also until MIN_RECORDS were read in all and its positions reach the log end offsets (all
        within 90 s, else it fails, as peer-tools consume-group does); every batch of records
        consumed is committed
        synchronously (offset + leader epoch of the last record, as librdkafka stores them); a
        session resumes at the group's committed offsets. Per partition the offsets must keep
        rising (none read twice). Prints one line per session and a last line
        "rdk-consume: R records in K sessions, max record leader epoch E, committed P=OFF@EPOCH,..."
  scrape OUT.json URL...
        GET each URL (a kbroker /metrics) and store {url: {api: kbroker_requests_total}}
  delta BEFORE.json AFTER.json API...
        per broker and in all, how many requests of each API were answered between the scrapes:
        lines "URL API=N ..." and "total API=N ..."
  committed-check ENDS_FILE COMMITTED
        COMMITTED is "P=OFF@EPOCH,..."; ENDS_FILE has "topic-P END" lines (me2e.py ends): exit 0
        when every partition's committed offset is its end offset

Exit 0 ok, 1 failed check (printed as FAIL: ...), 2 usage or setup error.
"""
import json
import os
import re
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import me2e  # noqa: E402  (metadata: the raw Metadata v12 client)


def create_assigned(bootstrap, topic, parts, replicas):
    from kafka.admin import KafkaAdminClient, NewTopic
    reps = [int(r) for r in replicas.split(",")]
    adm = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        adm.create_topics([NewTopic(topic, replica_assignments={p: reps for p in range(int(parts))})],
                          timeout_ms=30000)
    finally:
        adm.close()
    deadline = time.time() + 60
    while True:
        _, tops = me2e.metadata(bootstrap.split(",")[0], [topic])
        t = tops.get(topic, {})
        if t.get("ec") == 0 and len(t["parts"]) == int(parts) and all(
                p["leader"] == reps[0] and len(p["isr"]) == len(reps) for p in t["parts"].values()):
            print("created %s: %s partitions on replicas %s" % (topic, parts, replicas))
            return 0
        if time.time() > deadline:
            print("FAIL: %s without its preferred leader or a full ISR after 60 s: %s" % (topic, t))
            return 1
        time.sleep(0.2)  # poll interval of the deadline loop above


def elect(bootstrap, topic):
    """me2e.elect_preferred (raw ElectLeaders) for every partition of topic."""
    _, tops = me2e.metadata(bootstrap.split(",")[0], [topic])
    rc = 0
    for p in sorted(tops[topic]["parts"]):
        top, ec, msg = me2e.elect_preferred(bootstrap.split(",")[0], topic, p)
        print("elect %s %d error=%d/%d %s" % (topic, p, top, ec, msg))
        rc |= 0 if top == 0 and ec in (0, 84) else 1  # 84 = ELECTION_NOT_NEEDED
    return rc


def raise_epoch(controller, topic, parts, min_epoch):
    from kmwire import TAGS, carr, cstr
    import struct
    body = carr([topic], lambda t: cstr(t) + carr(
        list(range(int(parts))), lambda p: struct.pack(">ii", p, int(min_epoch)) + TAGS) + TAGS) + TAGS
    rd = me2e.kmwire.call(controller, 105, 0, body, flexible_resp=True, client_id="mirror-e2e")
    rd.i32()
    ec, msg = rd.i16(), rd.cstr()

    def part(r):
        v = (r.i32(), r.i16(), r.cstr())
        r.tags()
        return v

    def top(r):
        v = (r.cstr(), r.carr(part))
        r.tags()
        return v

    res = rd.carr(top) or []
    print("BumpLeaderEpochs %s to >= %s: error %d %s; %s" % (topic, min_epoch, ec, msg, res))
    ok = ec == 0 and len(res) == 1 and len(res[0][1] or []) == int(parts) and all(
        p[1] == 0 for p in res[0][1])
    return 0 if ok else 1


def epoch_ends(bootstrap, topic, max_epoch):
    from kmwire import TAGS, carr, cstr
    import struct
    nodes, tops = me2e.metadata(bootstrap.split(",")[0], [topic])
    parts = tops[topic]["parts"]
    for p in sorted(parts):
        eps = list(range(int(max_epoch) + 1))
        body = struct.pack(">i", -1) + carr([topic], lambda t: cstr(t) + carr(
            eps, lambda e: struct.pack(">iii", p, -1, e) + TAGS) + TAGS) + TAGS
        rd = me2e.kmwire.call(nodes[parts[p]["leader"]], 23, 4, body, flexible_resp=True,
                              client_id="mirror-e2e")
        rd.i32()

        def part(r):
            v = (r.i16(), r.i32(), r.i32(), r.i64())
            r.tags()
            return v

        def top(r):
            v = (r.cstr(), r.carr(part))
            r.tags()
            return v

        res = rd.carr(top) or [(topic, [])]
        for e, (ec, _pi, ep, end) in zip(eps, res[0][1] or []):
            print("%d %d -> %d %d %d" % (p, e, ep, end, ec))
    return 0


def rdk_consume(bootstrap, topic, group, seconds, sessions, min_records=0):
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    sessions = int(sessions)
    per = float(seconds) / max(1, sessions)
    last = {}
    total, max_epoch, errors, committed = 0, -1, [], ""
    deadline = time.time() + 90

    for s in range(1, sessions + 1):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "client.id": "mirror-e2e-epochs", "check.crcs": True})
        n, smax = 0, -1
        try:
            c.subscribe([topic])
            end = time.time() + per
            while len(errors) < 20:
                now = time.time()
                if now >= deadline:
                    errors.append("session %d: not done within 90 s (%d records)" % (s, n))
                    break
                if now >= end and n > 0 and (s < sessions or (
                        total + n >= int(min_records) and me2e.rdk_at_end(c))):
                    break
                msgs = c.consume(num_messages=500, timeout=0.2)
                got = False
                for m in msgs:
                    if m.error():
                        if m.error().code() != -191:  # _PARTITION_EOF (not enabled, harmless)
                            errors.append("consume error: %s" % m.error())
                        continue
                    got = True
                    p, o = m.partition(), m.offset()
                    if p in last and o <= last[p]:
                        errors.append("p%d: offset %d after %d (read twice or going back)" % (
                            p, o, last[p]))
                    last[p] = o
                    ep = m.leader_epoch()
                    smax = max(smax, -1 if ep is None else ep)
                    n += 1
                if got:
                    c.commit(asynchronous=False)
            md = c.list_topics(topic, timeout=10)
            tps = [TopicPartition(topic, p) for p in sorted(md.topics[topic].partitions)]
            cm = c.committed(tps, timeout=10)
            committed = ",".join("%d=%s" % (tp.partition, "%d@%d" % (tp.offset, tp.leader_epoch if
                                                                       tp.leader_epoch is not None else -1)
                                            if tp.offset >= 0 else "none") for tp in cm)
        except KafkaException as e:
            errors.append("session %d: %s" % (s, e))
        finally:
            c.close()
        print("rdk-consume: session %d: %d records, max record leader epoch %d, committed %s" % (
            s, n, smax, committed), flush=True)
        total += n
        max_epoch = max(max_epoch, smax)
    if errors:
        for e in errors:
            print("FAIL: rdk-consume: %s" % e)
        return 1
    print("rdk-consume: %d records in %d sessions, max record leader epoch %d, committed %s" % (
        total, sessions, max_epoch, committed))
    return 0


SERIES = re.compile(r'^kbroker_requests_total\{api="([^"]*)"\}\s+([0-9.eE+]+)\s*$')


def scrape(out, urls):
    doc = {}
    for u in urls:
        with urllib.request.urlopen(u, timeout=10) as r:
            text = r.read().decode()
        doc[u] = {m.group(1): int(float(m.group(2)))
                  for m in (SERIES.match(line) for line in text.splitlines()) if m}
    with open(out, "w") as f:
        json.dump(doc, f)
    return 0


def delta(before, after, apis):
    with open(before) as f:
        b = json.load(f)
    with open(after) as f:
        a = json.load(f)
    tot = {api: 0 for api in apis}
    for u in sorted(a):
        d = {api: a[u].get(api, 0) - b.get(u, {}).get(api, 0) for api in apis}
        for api in apis:
            tot[api] += d[api]
        print("%s %s" % (u, " ".join("%s=%d" % (api, d[api]) for api in apis)))
    print("total %s" % " ".join("%s=%d" % (api, tot[api]) for api in apis))
    return 0


def committed_check(ends_file, committed):
    ends = {}
    with open(ends_file) as f:
        for line in f:
            tp, end = line.split()
            ends[int(tp.rsplit("-", 1)[1])] = int(end)
    got = {}
    for item in committed.split(","):
        p, v = item.split("=")
        got[int(p)] = int(v.split("@")[0]) if v != "none" else -1
    if got != ends:
        print("FAIL: committed offsets %s, log end offsets %s" % (got, ends))
        return 1
    return 0


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "create-assigned" and len(a) == 4:
        return create_assigned(*a)
    if cmd == "elect" and len(a) == 2:
        return elect(*a)
    if cmd == "raise-epoch" and len(a) == 4:
        return raise_epoch(*a)
    if cmd == "epoch-ends" and len(a) == 3:
        return epoch_ends(*a)
    if cmd == "rdk-consume" and len(a) in (5, 6):
        return rdk_consume(*a)
    if cmd == "scrape" and len(a) >= 2:
        return scrape(a[0], a[1:])
    if cmd == "delta" and len(a) >= 3:
        return delta(a[0], a[1], a[2:])
    if cmd == "committed-check" and len(a) == 2:
        return committed_check(*a)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
