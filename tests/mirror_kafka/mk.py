#!/usr/bin/env python3
"""mk.py SUBCOMMAND ... -- client helpers of tests/mirror_kafka (docs/testing-kafka-source.md).

Runs with the clients venv (tests/clients/setup-venv.sh: kafka-python with every codec).

  cleaned BOOTSTRAP TOPIC PARTDIR KEYS   exit 0 when partition 0 of TOPIC is fully cleaned by
                                         the log cleaner: below the base offset of the active
                                         segment (the last <base>.log in PARTDIR, the leader's
                                         directory) exactly KEYS records are readable (one per
                                         key) while that base offset is above KEYS (offset
                                         gaps). Prints "records R below B, end E, active
                                         segment base B"
  produce-rounds BOOTSTRAP TOPIC KEYS ROUNDS PER
                                         ROUNDS rounds of PER records "key-<N % KEYS>" =
                                         "value <N> of round <R>" to partition 0 (acks=all,
                                         flushed after each round); round R's records carry the
                                         timestamp T0 + R s (T0 = now - 60 s), so that a small
                                         segment.ms (< 1 s) rolls a segment at the first batch of
                                         every round whatever the wall-clock gaps (Kafka rolls on
                                         the difference of record timestamps)
  count BOOTSTRAP TOPIC                  prints the records readable in TOPIC (read_uncommitted)
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


def cmd_cleaned(bootstrap, topic, partdir, keys):
    keys = int(keys)
    base = active_base(partdir)
    if base is None:
        print("no segment in %s" % partdir)
        return 1
    recs, ends = me2e.read_all(bootstrap, topic, False, deadline_s=60)
    below = [r for r in recs.get(0, []) if r[0] < base]
    print("records %d below %d, end %d, active segment base %d (want %d below it, base > %d)" % (
        len(below), base, ends.get(0, -1), base, keys, keys))
    return 0 if len(below) == keys and base > keys else 1


def cmd_produce_rounds(bootstrap, topic, keys, rounds, per):
    import time
    from kafka import KafkaProducer
    keys, rounds, per = int(keys), int(rounds), int(per)
    t0 = int(time.time() * 1000) - 60000
    prod = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                         request_timeout_ms=30000)
    try:
        for r in range(rounds):
            futs = [prod.send(topic, partition=0, key=b"key-%d" % (n % keys),
                              value=b"value %d of round %d" % (n, r), timestamp_ms=t0 + 1000 * r)
                    for n in range(r * per, (r + 1) * per)]
            prod.flush(timeout=60)
            for f in futs:
                f.get(timeout=60)  # raises the send's error, if any
    finally:
        prod.close(timeout=10)
    print("produced %d rounds x %d records over %d keys to %s-0" % (rounds, per, keys, topic))
    return 0


def cmd_count(bootstrap, topic):
    recs, _ = me2e.read_all(bootstrap, topic, False, deadline_s=60)
    print(sum(len(v) for v in recs.values()))
    return 0


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
    if cmd == "cleaned" and len(a) == 4:
        return cmd_cleaned(*a)
    if cmd == "produce-rounds" and len(a) == 5:
        return cmd_produce_rounds(*a)
    if cmd == "count" and len(a) == 2:
        return cmd_count(*a)
    if cmd == "earliest" and len(a) == 2:
        return cmd_earliest(*a)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
