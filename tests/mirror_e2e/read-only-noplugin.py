#!/usr/bin/env python3
"""read-only-noplugin.py BOOTSTRAP TOPIC PARTITION NODE -- the wire checks of scenario
read-only-noplugin (tests/mirror_e2e/scn_read_only_noplugin.sh, docs/testing-mirror.md).
BOOTSTRAP is NODE's own address: its Metadata must already name it the leader.

NODE leads TOPIC-PARTITION, a partition of a mirror topic, and runs without the mirror plugin:
  * Produce v9 (acks=1 and acks=-1) to NODE: READ_ONLY_TOPIC (147) with kbroker's message for a
    broker without the plugin (not the retriable NOT_ENOUGH_REPLICAS of a pending partition);
  * the same Produce to every other broker: refused (NOT_LEADER_OR_FOLLOWER, 6, or 147 from a
    former leader that has not applied the election yet);
  * DeleteRecords v1 (everything, offset -1) to NODE: READ_ONLY_TOPIC;
  * the partition's log end offset (ListOffsets through kafka-python) and log start offset are
    the same afterwards.
Exit 0 pass, 1 fail (each failure printed as FAIL: ...). Runs with the clients venv.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import me2e  # noqa: E402
from me2e import check, done, iarr, istr, r_iarr  # noqa: E402

NOPLUGIN_MSG = "no mirror plugin is loaded on this broker"


def delete_records(addr, topic, partition, offset):
    """DeleteRecords v1 (non-flexible): (error code, low watermark)."""
    body = (iarr([topic], lambda t: istr(t) + iarr(
        [partition], lambda p: struct.pack(">iq", p, offset))) + struct.pack(">i", 10000))
    rd = me2e.call(addr, 21, 1, body, False)
    rd.i32()
    res = r_iarr(rd, lambda r: (me2e.r_istr(r), r_iarr(r, lambda x: (x.i32(), x.i64(), x.i16()))))
    _, lw, ec = res[0][1][0]
    return ec, lw


def log_start(bootstrap, topic, partition):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      request_timeout_ms=30000)
    try:
        tp = TopicPartition(topic, partition)
        return c.beginning_offsets([tp])[tp]
    finally:
        c.close()


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        sys.exit(2)
    bootstrap, topic, p, node = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    nodes, tops = me2e.metadata(bootstrap.split(",")[0], [topic])
    pi = tops.get(topic, {}).get("parts", {}).get(p)
    if not check(pi is not None and pi["leader"] == node,
                 "%s-%d is led by broker %d (metadata: %s)" % (topic, p, node, pi)):
        done()
    end0 = me2e.end_offsets(bootstrap, [topic])[(topic, p)]
    start0 = log_start(bootstrap, topic, p)
    for acks in (1, -1):
        ec, msg = me2e.produce(nodes[node], topic, p, acks)
        check(ec == me2e.READ_ONLY_TOPIC and msg is not None and NOPLUGIN_MSG in msg,
              "produce acks=%d to %s-%d on broker %d (leader, no plugin): error code %d (want "
              "READ_ONLY_TOPIC %d, not retriable): %s" % (acks, topic, p, node, ec,
                                                           me2e.READ_ONLY_TOPIC, msg))
    for nid in sorted(nodes):
        if nid != node:
            ec, msg = me2e.produce(nodes[nid], topic, p, 1)
            # 6; or 147 from a former leader (with the plugin) that has not applied the
            # election from the metadata log yet: refused either way.
            check(ec in (me2e.NOT_LEADER_OR_FOLLOWER, me2e.READ_ONLY_TOPIC),
                  "produce to %s-%d on broker %d (not its leader): refused with %d: %s" % (
                      topic, p, nid, ec, msg))
    ec, lw = delete_records(nodes[node], topic, p, -1)
    check(ec == me2e.READ_ONLY_TOPIC, "DeleteRecords (to the end) of %s-%d on broker %d: error "
          "code %d, low watermark %d (want READ_ONLY_TOPIC %d)" % (topic, p, node, ec, lw,
                                                                 me2e.READ_ONLY_TOPIC))
    end1 = me2e.end_offsets(bootstrap, [topic])[(topic, p)]
    start1 = log_start(bootstrap, topic, p)
    check(end1 == end0 and start1 == start0,
          "%s-%d: log start %d and end %d after the refused writes (were %d and %d)" % (
              topic, p, start1, end1, start0, end0))
    done()


if __name__ == "__main__":
    main()
