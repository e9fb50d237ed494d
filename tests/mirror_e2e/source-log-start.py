#!/usr/bin/env python3
"""source-log-start.py SUBCOMMAND ... -- client side of scenario source-log-start
(tests/mirror_e2e/scn_source_log_start.sh, docs/testing-mirror.md "Scenario source-log-start").

Runs with the clients venv (kafka-python).

  produce BOOTSTRAP TOPIC PARTITION FIRST BATCHES   BATCHES batches of exactly 10 records (gzip,
                                               one flush per batch) to the partition, values
                                               "ls <FIRST+i>"; checks the batch base offsets
                                               are multiples of 10 (the layout the deletes rely on)
  delete BOOTSTRAP TOPIC PARTITION OFFSET      DeleteRecords (kafka-python admin) to OFFSET
  earliest SRC DST TOPIC PARTITION=WANT...     ListOffsets earliest of each partition on both
                                               clusters: equal, and WANT

Exit 0 pass, 1 fail (every failure printed as FAIL: ...), 2 setup error.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from me2e import FAILS, check, done  # noqa: E402,F401


def cmd_produce(bootstrap, topic, partition, first, batches):
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip",
                      linger_ms=60000, batch_size=1 << 20, request_timeout_ms=30000)
    try:
        n = int(first)
        for _ in range(int(batches)):
            futs = [p.send(topic, key=b"k%d" % (n + i), value=b"ls %d" % (n + i),
                           partition=int(partition)) for i in range(10)]
            p.flush(timeout=60)
            offs = [f.get(timeout=60).offset for f in futs]
            # one batch of 10: consecutive offsets from a multiple of 10
            if offs[0] % 10 != 0 or offs != list(range(offs[0], offs[0] + 10)):
                print("FAIL: %s-%s: records at %s, want one batch at a multiple of 10" % (
                    topic, partition, offs))
                return 1
            n += 10
    finally:
        p.close()
    print("produced %s batches of 10 to %s-%s" % (batches, topic, partition))
    return 0


def cmd_delete(bootstrap, topic, partition, offset):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    adm = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        res = adm.delete_records({TopicPartition(topic, int(partition)): int(offset)},
                                 timeout_ms=30000)
    finally:
        adm.close()
    print("DeleteRecords %s-%s to %s: %s" % (topic, partition, offset, res))
    return 0


def cmd_earliest(src, dst, topic, *wants):
    from kafka import KafkaConsumer, TopicPartition

    def earliest(bootstrap, tps):
        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, request_timeout_ms=30000)
        try:
            return c.beginning_offsets(tps)
        finally:
            c.close()

    want = {TopicPartition(topic, int(w.split("=")[0])): int(w.split("=")[1]) for w in wants}
    s = earliest(src, list(want))
    d = earliest(dst, list(want))
    for tp, w in sorted(want.items()):
        check(s[tp] == d[tp] == w, "%s-%d: ListOffsets earliest: source %d, destination %d, want %d"
              % (tp.topic, tp.partition, s[tp], d[tp], w))
    done()


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "produce" and len(args) == 5:
        return cmd_produce(*args)
    if cmd == "delete" and len(args) == 4:
        return cmd_delete(*args)
    if cmd == "earliest" and len(args) >= 4:
        return cmd_earliest(*args)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
