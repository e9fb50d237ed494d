#!/usr/bin/env python3
"""sync-groups.py SUBCOMMAND ... -- client side of scenario sync-groups (tests/mirror_e2e/
scn_sync_groups.sh, docs/testing-mirror.md "Scenario sync-groups"). Runs with the clients venv
(confluent-kafka, which bundles librdkafka, and kafka-python).

Every record the scenario writes on the source has the value "p<P> r<O>": its partition and
offset (one record a batch, written in order by kcat); the records written on the destination
after the failover "p<P> d<I>" (I = 0, 1, ...), so what a consumer read is checked without a
copy.

  rdk-consume BOOTSTRAP TOPIC GROUP OUT
        librdkafka consumer of GROUP (subscribe): starts at the group's committed offsets
        (earliest without), reads until its position reaches the high watermark of every
        partition (within 60 s), commits synchronously after every batch (offset + leader epoch
        of the last record, as librdkafka stores them) and writes "P OFFSET EPOCH VALUE" per
        record to OUT. Prints "rdk-consume: N records, committed P=OFF@EPOCH,...".
  hold BOOTSTRAP TOPIC GROUP OFFSET RELEASE_FILE
        a librdkafka member of GROUP (subscribed to TOPIC) commits OFFSET on partition 0, prints
        "holding ..." and stays in the group until RELEASE_FILE exists (90 s at most)
  committed BOOTSTRAP GROUP TOPIC
        the group's committed offsets of TOPIC as its coordinator answers OffsetFetch
        (kafka-python admin): "P=OFF@EPOCH,..." in partition order ("" when none)
  commit BOOTSTRAP GROUP TOPIC:P=OFF@EPOCH,...
        an admin commit (OffsetCommit, generation -1, as the sync's) of those offsets; exit 1
        unless every partition answers NONE
  check-records OUT TOPIC P=FROM-END+N,...
        OUT (consume-group --records-out or rdk-consume) holds for every listed partition
        exactly the mirrored records FROM..END-1 with the value "p<P> r<O>", then the N
        records "p<P> d0".."p<P> d<N-1>" written after the failover, each once, offsets
        increasing, and no other partition; prints what differs (skips, duplicates, values)

Exit 0 ok, 1 failed check (printed as FAIL: ...), 2 usage or setup error.
"""
import sys
import time

import me2e


def parse_spec(spec):
    """ "0=60@0,1=40@-1" -> {0: (60, 0), 1: (40, -1)} (epoch -1 when left out)"""
    out = {}
    for item in filter(None, spec.split(",")):
        p, v = item.split("=")
        off, _, ep = v.partition("@")
        out[int(p)] = (int(off), int(ep) if ep else -1)
    return out


def fmt_spec(d):
    return ",".join("%d=%d@%d" % (p, d[p][0], d[p][1]) for p in sorted(d))


def rdk_consume(bootstrap, topic, group, out):
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "client.id": "mirror-e2e-sync-groups", "check.crcs": True})
    last, n, errors = {}, 0, []
    deadline = time.time() + 60

    try:
        c.subscribe([topic])
        with open(out, "w") as f:
            while not errors:
                if time.time() >= deadline:
                    errors.append("not at the log end within 60 s (%d records)" % n)
                    break
                msgs = c.consume(num_messages=100, timeout=0.2)
                got = False
                for m in msgs:
                    if m.error():
                        errors.append("consume error: %s" % m.error())
                        continue
                    got = True
                    p, o = m.partition(), m.offset()
                    if p in last and o <= last[p]:
                        errors.append("p%d: offset %d after %d (read twice)" % (p, o, last[p]))
                    last[p] = o
                    ep = m.leader_epoch()
                    f.write("%d %d %d %s\n" % (p, o, -1 if ep is None else ep,
                                               (m.value() or b"").decode("utf-8", "replace")))
                    n += 1
                if got:
                    c.commit(asynchronous=False)
                elif n > 0 and me2e.rdk_at_end(c):
                    break
        md = c.list_topics(topic, timeout=10)
        tps = [TopicPartition(topic, p) for p in sorted(md.topics[topic].partitions)]
        cm = c.committed(tps, timeout=10)
        committed = ",".join("%d=%d@%d" % (tp.partition, tp.offset,
                                           -1 if tp.leader_epoch is None else tp.leader_epoch)
                             for tp in cm if tp.offset >= 0)
    except KafkaException as e:
        errors.append(str(e))
        committed = "?"
    finally:
        c.close()
    if errors:
        for e in errors:
            print("FAIL: rdk-consume %s: %s" % (group, e))
        return 1
    print("rdk-consume: %d records, committed %s" % (n, committed))
    return 0


def hold(bootstrap, topic, group, offset, release):
    """Join GROUP, commit OFFSET on TOPIC-0, print "holding" and stay a member until the file
    RELEASE exists (90 s at most), then leave."""
    import os
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "client.id": "mirror-e2e-sync-groups-hold"})
    rc = 0
    try:
        c.subscribe([topic])
        deadline = time.time() + 90
        while not c.assignment() and time.time() < deadline:
            c.poll(0.2)
        if not c.assignment():
            print("FAIL: hold %s: no assignment within 90 s" % group)
            return 1
        c.commit(offsets=[TopicPartition(topic, 0, int(offset))], asynchronous=False)
        print("holding %s: member with %s-0 committed at %s" % (group, topic, offset), flush=True)
        while not os.path.exists(release):
            if time.time() >= deadline:
                print("FAIL: hold %s: not released within 90 s" % group)
                rc = 1
                break
            c.poll(0.2)
    finally:
        c.close()
    return rc


def admin(bootstrap):
    from kafka.admin import KafkaAdminClient
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000,
                            client_id="mirror-e2e-sync-groups")


def committed(bootstrap, group, topic):
    a = admin(bootstrap)
    try:
        got = a.list_group_offsets({group: None}).get(group, {})
    finally:
        a.close()
    d = {tp.partition: (om.offset, -1 if om.leader_epoch is None else om.leader_epoch)
         for tp, om in got.items() if tp.topic == topic and om.offset >= 0}
    print(fmt_spec(d))
    return 0


def commit(bootstrap, group, spec):
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata
    offsets = {}
    for part in spec.split(";"):
        topic, _, s = part.partition(":")
        for p, (off, ep) in parse_spec(s).items():
            offsets[TopicPartition(topic, p)] = OffsetAndMetadata(off, "", ep)
    a = admin(bootstrap)
    try:
        res = a.alter_group_offsets(group, offsets)
    finally:
        a.close()
    bad = {"%s-%d" % (tp.topic, tp.partition): e.__name__ for tp, e in res.items()
           if e.__name__ != "NoError"}
    if bad or len(res) != len(offsets):
        print("FAIL: commit %s %s: %s" % (group, spec, bad or res))
        return 1
    print("committed %s for %s" % (spec, group))
    return 0


def check_records(out, topic, spec):
    want = {}
    for item in spec.split(","):
        p, r = item.split("=")
        lo, rest = r.split("-")
        hi, _, nd = rest.partition("+")
        want[int(p)] = (int(lo), int(hi), int(nd or 0))
    got = {}
    with open(out) as f:
        for line in f:
            p, o, _, v = line.rstrip("\n").split(" ", 3)
            got.setdefault(int(p), []).append((int(o), v))
    bad = []
    for p in sorted(set(want) | set(got)):
        if p not in want:
            bad.append("p%d: %d records read, none expected" % (p, len(got[p])))
            continue
        lo, hi, nd = want[p]
        recs = got.get(p, [])
        offs = [o for o, _ in recs]
        if any(b <= a for a, b in zip(offs, offs[1:])):
            bad.append("p%d: offsets not increasing (read twice or going back): %s" % (
                p, [(a, b) for a, b in zip(offs, offs[1:]) if b <= a][:5]))
        # the mirrored part: exactly lo..hi-1, each with its source value
        src = [(o, v) for o, v in recs if o < hi]
        if [o for o, _ in src] != list(range(lo, hi)):
            so = [o for o, _ in src]
            bad.append("p%d: mirrored offsets read %s..%s (%d records), want %d..%d: missing %s, "
                       "below %s" % (p, so[0] if so else "-", so[-1] if so else "-", len(so), lo,
                                      hi - 1, sorted(set(range(lo, hi)) - set(so))[:5],
                                      sorted(o for o in so if o < lo)[:5]))
        wrong = [(o, v) for o, v in src if v != "p%d r%d" % (p, o)]
        if wrong:
            bad.append("p%d: %d mirrored records with another value, first %s" % (
                p, len(wrong), wrong[0]))
        # written on the destination after the failover: d0..d<nd-1>, in order (above hi: the
        # failover's MIRROR_PID_RESET control batch takes an offset)
        dst = [v for o, v in recs if o >= hi]
        if dst != ["p%d d%d" % (p, i) for i in range(nd)]:
            bad.append("p%d: after the mirrored part read %s, want p%d d0..d%d" % (
                p, dst[:8], p, nd - 1))
    if bad:
        for b in bad:
            print("FAIL: %s %s: %s" % (out, topic, b))
        return 1
    print("ok: %s: %s" % (topic, ", ".join(
        "p%d mirrored offsets %d..%d + %d written after the failover, each once" % (
            p, want[p][0], want[p][1] - 1, want[p][2]) for p in sorted(want))))
    return 0


def main():
    cmd, a = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if cmd == "rdk-consume" and len(a) == 4:
        return rdk_consume(*a)
    if cmd == "hold" and len(a) == 5:
        return hold(*a)
    if cmd == "committed" and len(a) == 3:
        return committed(*a)
    if cmd == "commit" and len(a) == 3:
        return commit(*a)
    if cmd == "check-records" and len(a) == 3:
        return check_records(*a)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
