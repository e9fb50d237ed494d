#!/usr/bin/env python3
"""mk.py SUBCOMMAND ... -- client helpers of tests/mirror_kafka (docs/testing-kafka-source.md).

Runs with the clients venv (tests/clients/setup-venv.sh: kafka-python with every codec).

  cleaned BOOTSTRAP TOPIC PARTDIR LIVE [TOMBS [GONE [loose]]]
                                         exit 0 when partition 0 of TOPIC is cleaned by the
                                         log cleaner: below the base offset of the active
                                         segment (the last <base>.log in PARTDIR, the leader's
                                         directory) the keys key-0..key-<LIVE-1> are readable
                                         exactly once each with a value, each key of the comma
                                         list TOMBS exactly once as a tombstone (null value;
                                         "loose": at most once), no record of a key of GONE,
                                         nothing else, while that base offset is above the
                                         records read (offset gaps). Prints what it read
  produce-rounds BOOTSTRAP TOPIC KEYS ROUNDS PER [T0 FIRST [TOMBS]]
                                         ROUNDS rounds of PER records "key-<N % KEYS>" =
                                         "value <N> of round <R>" to partition 0 (acks=all,
                                         flushed after each round); round R's records carry the
                                         timestamp T0 + R s (T0 = now - 60 s unless given, in
                                         ms), so that a small segment.ms (< 1 s) rolls a segment
                                         at the first batch of every round whatever the
                                         wall-clock gaps (Kafka rolls on the difference of
                                         record timestamps). Rounds are numbered from FIRST
                                         (default 0; N runs on from FIRST x PER); the last round
                                         ends with a tombstone (null value) for each key of
                                         the comma list TOMBS (MK_TOMB_EMPTY=1: an empty
                                         value instead, run.sh --inject tomb-empty)
  tombstones BOOTSTRAP TOPIC             prints the keys read with a null value, sorted,
                                         comma-separated ("-" for none)
  count BOOTSTRAP TOPIC                  prints the records readable in TOPIC (read_uncommitted)
  txn-check BOOTSTRAP TOPIC N SHA [ISO]  the transactional records of peer-tools produce
                                         --transactional-id as a consumer with isolation level
                                         ISO (default read_committed) sees them in TOPIC: exit 0
                                         when every partition's last stable offset equals its
                                         log end offset (no transaction open) and the records
                                         read, ordered by their "idx" header, are exactly N,
                                         each index once, with the producer's sha256 SHA over
                                         (key, value) (its committed records, none of the
                                         aborted ones); SHA "-": the offsets only
  earliest BOOTSTRAP TOPIC               prints "P=OFFSET,..." (ListOffsets earliest) per partition

Exit 0 yes / ok, 1 not (yet) / fail, 2 usage.
"""
import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mirror_e2e"))
import me2e  # noqa: E402


def active_base(partdir):
    logs = sorted(glob.glob(os.path.join(partdir, "[0-9]" * 20 + ".log")))
    if not logs:
        return None
    return int(os.path.basename(logs[-1])[:20])


def cmd_cleaned(bootstrap, topic, partdir, live, tombs="", gone="", loose=""):
    live = int(live)
    tombs = [k for k in tombs.split(",") if k]
    gone = [k for k in gone.split(",") if k]
    base = active_base(partdir)
    if base is None:
        print("no segment in %s" % partdir)
        return 1
    recs, ends = me2e.read_all(bootstrap, topic, False, deadline_s=60)
    below = [r for r in recs.get(0, []) if r[0] < base]
    vals, nulls, other = {}, {}, []
    for r in below:
        k = (r[1] or b"").decode(errors="replace")
        if r[2] is None:
            nulls[k] = nulls.get(k, 0) + 1
        else:
            vals[k] = vals.get(k, 0) + 1
    want_live = ["key-%d" % i for i in range(live)]
    ok = all(vals.get(k) == 1 for k in want_live) and len(vals) == live
    for k in tombs:
        ok &= nulls.get(k, 0) <= 1 if loose else nulls.get(k, 0) == 1
    ok &= all(k in tombs for k in nulls)
    ok &= not any(k in vals or k in nulls for k in gone)
    print("records %d below %d (values: %s; tombstones: %s), end %d, active segment base %d "
          "(want key-0..key-%d once each, tombstones %s%s, none of %s, base > records)" % (
              len(below), base, ",".join("%s:%d" % kv for kv in sorted(vals.items())),
              ",".join("%s:%d" % kv for kv in sorted(nulls.items())) or "-",
              ends.get(0, -1), base, live - 1, tombs or "-", " at most" if loose else "",
              gone or "-"))
    return 0 if ok and base > len(below) else 1


def cmd_produce_rounds(bootstrap, topic, keys, rounds, per, t0=None, first="0", tombs=""):
    import time
    from kafka import KafkaProducer
    keys, rounds, per, first = int(keys), int(rounds), int(per), int(first)
    t0 = int(t0) if t0 else int(time.time() * 1000) - 60000
    tombs = [k for k in tombs.split(",") if k]
    prod = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                         request_timeout_ms=30000)
    try:
        for r in range(first, first + rounds):
            ts = t0 + 1000 * r
            futs = [prod.send(topic, partition=0, key=b"key-%d" % (n % keys),
                              value=b"value %d of round %d" % (n, r), timestamp_ms=ts)
                    for n in range(r * per, (r + 1) * per)]
            if r == first + rounds - 1:
                # MK_TOMB_EMPTY=1 (run.sh --inject tomb-empty): empty values, not null
                tv = b"" if os.environ.get("MK_TOMB_EMPTY") == "1" else None
                futs += [prod.send(topic, partition=0, key=k.encode(), value=tv, timestamp_ms=ts)
                         for k in tombs]
            prod.flush(timeout=60)
            for f in futs:
                f.get(timeout=60)  # raises the send's error, if any
    finally:
        prod.close(timeout=10)
    print("produced rounds %d..%d x %d records over %d keys to %s-0%s" % (
        first, first + rounds - 1, per, keys, topic,
        ", then tombstones of %s" % ",".join(tombs) if tombs else ""))
    return 0


def cmd_tombstones(bootstrap, topic):
    recs, _ = me2e.read_all(bootstrap, topic, False, deadline_s=60)
    ks = sorted((r[1] or b"").decode(errors="replace") for v in recs.values() for r in v
                if r[2] is None)
    print(",".join(ks) or "-")
    return 0


def cmd_count(bootstrap, topic):
    recs, _ = me2e.read_all(bootstrap, topic, False, deadline_s=60)
    print(sum(len(v) for v in recs.values()))
    return 0


def cmd_txn_check(bootstrap, topic, n, sha, iso="read_committed"):
    import hashlib
    import struct
    n = int(n)
    lso = me2e.end_offsets(bootstrap, [topic], committed=True)
    leo = me2e.end_offsets(bootstrap, [topic], committed=False)
    rc = 0
    open_parts = sorted((p, lso[k], leo[k]) for k in leo for p in [k[1]] if lso.get(k) != leo[k])
    if open_parts:
        print("FAIL: %s: last stable offset below the log end offset (a transaction is open): "
              "%s (partition, LSO, log end)" % (topic, open_parts))
        rc = 1
    else:
        print("ok: %s: last stable offset = log end offset on every partition (%s)" % (
            topic, ",".join("%d=%d" % (k[1], leo[k]) for k in sorted(leo))))
    if sha == "-":
        return rc
    recs, _ = me2e.read_all(bootstrap, topic, iso == "read_committed", deadline_s=120)
    by_idx = {}
    dups = 0
    for part in recs.values():
        for r in part:
            idx = [v for k, v in r[3] if k == "idx"]
            i = struct.unpack(">q", idx[0])[0] if idx and len(idx[0]) == 8 else -1
            dups += i in by_idx
            by_idx[i] = (r[1], r[2])
    md = hashlib.sha256()
    for i in sorted(by_idx):
        k, v = by_idx[i]
        for b in (k or b"", v or b""):
            md.update(struct.pack(">q", len(b)))
            md.update(b)
    got = md.hexdigest()
    nread = sum(len(v) for v in recs.values())
    if nread != n or dups or got != sha:
        print("FAIL: %s %s: %d records (%d indices read twice), sha256 %s; want the producer's "
              "%d committed records, sha256 %s" % (topic, iso, nread, dups, got, n, sha))
        return 1
    print("ok: %s %s: exactly the producer's %d committed records, each once (sha256 %s)" % (
        topic, iso, n, got))
    return rc


def cmd_earliest(bootstrap, topic):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      request_timeout_ms=30000)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or [])]
        offs = c.beginning_offsets(tps)
        print(",".join("%d=%d" % (tp.partition, offs[tp]) for tp in tps))
    finally:
        c.close()
    return 0


def main():
    cmd, a = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if cmd == "cleaned" and 4 <= len(a) <= 7:
        return cmd_cleaned(*a)
    if cmd == "tombstones" and len(a) == 2:
        return cmd_tombstones(*a)
    if cmd == "produce-rounds" and 5 <= len(a) <= 8:
        return cmd_produce_rounds(*a)
    if cmd == "count" and len(a) == 2:
        return cmd_count(*a)
    if cmd == "txn-check" and len(a) in (4, 5):
        return cmd_txn_check(*a)
    if cmd == "earliest" and len(a) == 2:
        return cmd_earliest(*a)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
