#!/usr/bin/env python3
"""leader_moves.py SUBCOMMAND ... -- the client side of scenario leader-moves of tests/mirror_e2e
(docs/testing-mirror.md). Runs with the clients venv; wire framing from me2e.py / kmwire.py.

  places DST MIRROR TOPIC...   one line per partition of the destination topics:
                               "topic partition leader shard shard_leader state_epoch", where shard
                               is the __mirror_state partition holding the partition's
                               PARTITION_STATE key (docs/state-format.md "Placement") and
                               shard_leader its leader. The placement is checked on the wire: the
                               shard's leader answers ReadMirrorStates for the key with the state
                               MIRRORING, another broker answers NOT_COORDINATOR. Exit 1 (with the
                               reason) when a partition has no leader or the check fails.

  isr-full DST RF TOPIC...     every partition of the topics and of __mirror_state has a leader and
                               RF replicas in its ISR (a restarted broker caught up); prints why not
  resumed ADDR KM MIRROR TOPIC PARTITION GONE MIN_END
                               through the broker at ADDR: the partition's leader is none of the
                               comma-separated brokers GONE, and DescribeMirrors shows it MIRRORING
                               with a destination log end above MIN_END (mirroring resumed on the
                               new leader: new source records arrived there)

  brokers-up DST               every broker of DST answers Metadata and lists all of DST's brokers
                               (none fenced)

Exit 0 ok, 1 not (yet), 2 usage.
"""
import struct
import sys

import me2e
from me2e import STATE_TOPIC, murmur2
from kmwire import TAGS, carr, cstr

NOT_COORDINATOR = 16
MIRRORING = 3  # MIRROR_STATE_MIRRORING, proto/schema/provisional.kps
PARTITION_STATE = 2  # record type of the key, docs/state-format.md


def shard_of(mirror, topic_id, partition, shards):
    """The __mirror_state partition of a PARTITION_STATE key: toPositive(murmur2(key)) % shards."""
    name = mirror.encode()
    key = struct.pack(">hh", PARTITION_STATE, len(name)) + name + topic_id + struct.pack(">i", partition)
    return (murmur2(key) & 0x7FFFFFFF) % shards


def read_state(addr, mirror, topic, partition):
    """ReadMirrorStates (100) v0 for one partition: (error code, state, state epoch)."""
    body = (cstr(mirror) + carr([topic], lambda t: cstr(t) + carr(
        [partition], lambda p: struct.pack(">i", p) + TAGS) + TAGS) + TAGS)
    rd = me2e.call(addr, 100, 0, body, True)
    rd.i32()
    ec, _msg = rd.i16(), rd.cstr()

    def pr(q):
        _idx, state, _le, sepoch, _lmee, _lmeo = q.i32(), q.i8(), q.i32(), q.i32(), q.i32(), q.i64()
        pec, _pmsg, _retry, _prev = q.i16(), q.cstr(), q.i16(), q.i8()
        q.tags()
        return pec, state, sepoch

    topics = rd.carr(lambda r: (r.cstr(), r.carr(pr), r.tags()))
    if ec != 0:
        return ec, -1, -1
    return topics[0][1][0]


def cmd_places(dst, mirror, *topics):
    seed = dst.split(",")[0]
    nodes, tops = me2e.metadata(seed, list(topics) + [STATE_TOPIC])
    st = tops.get(STATE_TOPIC)
    if not st or st["ec"] != 0 or not st["parts"]:
        print("%s: not in the metadata (%s)" % (STATE_TOPIC, st))
        return 1
    shards = len(st["parts"])
    rc = 0
    for t in topics:
        if tops.get(t, {}).get("ec") != 0:
            print("%s: metadata error %s" % (t, tops.get(t, {}).get("ec")))
            return 1
        for p, info in sorted(tops[t]["parts"].items()):
            s = shard_of(mirror, tops[t]["id"], p, shards)
            sl = st["parts"][s]["leader"]
            if info["leader"] not in nodes or sl not in nodes:
                print("%s-%d: leader %d, shard %d leader %d: not both known brokers" % (
                    t, p, info["leader"], s, sl))
                return 1
            ec, state, sepoch = read_state(nodes[sl], mirror, t, p)
            if ec != 0 or state != MIRRORING:
                print("%s-%d: ReadMirrorStates at the shard %d's leader %d: error %d, state %d "
                      "(want 0, MIRRORING %d)" % (t, p, s, sl, ec, state, MIRRORING))
                rc = 1
            other = min(n for n in nodes if n != sl)
            ec2, _, _ = read_state(nodes[other], mirror, t, p)
            if ec2 != NOT_COORDINATOR:
                print("%s-%d: ReadMirrorStates at broker %d (not shard %d's leader): error %d, "
                      "want NOT_COORDINATOR" % (t, p, other, s, ec2))
                rc = 1
            print("%s %d %d %d %d %d" % (t, p, info["leader"], s, sl, sepoch))
    return rc


def cmd_isr_full(dst, rf, *topics):
    _, tops = me2e.metadata(dst.split(",")[0], list(topics) + [STATE_TOPIC])
    short = []
    for t in list(topics) + [STATE_TOPIC]:
        info = tops.get(t, {})
        if info.get("ec") != 0:
            print("%s: metadata error %s" % (t, info.get("ec")))
            return 1
        short += ["%s-%d leader %d isr %s" % (t, p, q["leader"], q["isr"])
                  for p, q in sorted(info["parts"].items())
                  if q["leader"] < 0 or len(q["isr"]) < int(rf)]
    if short:
        print("%d partitions without a leader or a full ISR: %s" % (len(short), short[:6]))
        return 1
    return 0


def cmd_resumed(addr, km, mirror, topic, partition, gone, min_end):
    partition, min_end = int(partition), int(min_end)
    gone = {int(g) for g in gone.split(",") if g}
    _, tops = me2e.metadata(addr, [topic])
    leader = tops.get(topic, {}).get("parts", {}).get(partition, {}).get("leader", -1)
    if leader < 0 or leader in gone:
        print("%s-%d: leader %d (killed: %s)" % (topic, partition, leader, sorted(gone)))
        return 1
    parts = me2e.describe_one(km, addr, mirror)
    if isinstance(parts, str):
        print(parts)
        return 1
    mine = [p for p in parts if (p["topic"], p["partition"]) == (topic, partition)]
    if len(mine) != 1:
        print("%s-%d listed %d times by DescribeMirrors through %s" % (topic, partition, len(mine), addr))
        return 1
    p = mine[0]
    if p["state"] != "MIRRORING" or p["destinationOffset"] <= min_end:
        print("%s-%d on leader %d: %s, destination log end %s (want MIRRORING above %d) %s" % (
            topic, partition, leader, p["state"], p["destinationOffset"], min_end,
            p.get("errorMessage") or ""))
        return 1
    print("%s-%d: MIRRORING on the new leader %d, destination log end %d (was %d)" % (
        topic, partition, leader, p["destinationOffset"], min_end))
    return 0


def cmd_brokers_up(dst):
    addrs = dst.split(",")
    rc = 0
    for a in addrs:
        try:
            nodes, _ = me2e.metadata(a, ["lm-0"])
        except (OSError, ValueError, AssertionError) as e:
            print("%s: no Metadata answer: %s" % (a, e))
            rc = 1
            continue
        if len(nodes) != len(addrs):
            print("%s lists brokers %s, want %d" % (a, sorted(nodes), len(addrs)))
            rc = 1
    return rc


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "places":
        sys.exit(cmd_places(*a))
    if cmd == "brokers-up":
        sys.exit(cmd_brokers_up(*a))
    if cmd == "isr-full":
        sys.exit(cmd_isr_full(*a))
    if cmd == "resumed":
        sys.exit(cmd_resumed(*a))
    print("unknown subcommand %s" % cmd)
    sys.exit(2)


if __name__ == "__main__":
    main()
