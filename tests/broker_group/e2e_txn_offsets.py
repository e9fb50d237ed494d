#!/usr/bin/env python3
"""Consumer offsets inside transactions (sendOffsetsToTransaction: AddOffsetsToTxn, then
TxnOffsetCommit to the group coordinator, then the markers) with librdkafka, against a broker.

  e2e_txn_offsets.py --bootstrap HOST:PORT

  * a transactional producer consumes-transforms-produces: the group's offsets move with each
    committed transaction and not with aborted ones;
  * while a transaction with pending offsets is open, a read_committed consumer's committed()
    (OffsetFetch with require_stable) does not return the pending value (the broker answers
    UNSTABLE_OFFSET_COMMIT and librdkafka retries); kafka-python's OffsetFetch (no require_stable)
    sees the last committed offset; after the commit both see the new one.
Needs a broker whose transaction coordinator serves AddOffsetsToTxn and TxnOffsetCommit (the
script says so and fails otherwise). Closing line: "N passed, N failed".
"""
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "lib"))

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka import KafkaAdminClient  # noqa: E402

from kmcheck import Suite, expect, expect_eq, parse_args, unique, wait_until  # noqa: E402

PARTS = 2


class Txn:
    def __init__(self, s, b):
        self.s, self.b = s, b
        self.admin = AdminClient({"bootstrap.servers": b, "log_level": 3})
        self.src = unique("kg-txn-src")
        self.dst = unique("kg-txn-dst")
        self.group = unique("kg-txn-group")
        self.p = self.c = None

    def setup(self):
        fs = self.admin.create_topics([NewTopic(t, PARTS, 1) for t in (self.src, self.dst)],
                                      operation_timeout=15)
        for f in fs.values():
            f.result(20)
        p = Producer({"bootstrap.servers": self.b, "log_level": 3})
        for i in range(20):
            p.produce(self.src, value=b"%d" % i, partition=i % PARTS)
        expect_eq(p.flush(30), 0, "records left unflushed")
        self.p = Producer({"bootstrap.servers": self.b, "transactional.id": unique("kg-txn-id"),
                           "log_level": 3})
        self.p.init_transactions(30)
        self.c = Consumer({"bootstrap.servers": self.b, "group.id": self.group, "log_level": 3,
                           "enable.auto.commit": False, "auto.offset.reset": "earliest",
                           "isolation.level": "read_committed"})
        self.c.subscribe([self.src])

    def batch(self, n):
        """Consume n records, produce them to dst inside the current transaction, send the
        positions as the group's offsets; returns the positions."""
        got = []
        wait_until(lambda: (lambda m: m is not None and not m.error() and got.append(m))(
            self.c.poll(0.2)) is None and len(got) >= n, 60, "%d source records" % n, interval=0)
        for m in got:
            self.p.produce(self.dst, value=m.value(), partition=m.partition())
        pos = self.c.position(self.c.assignment())
        self.p.send_offsets_to_transaction(pos, self.c.consumer_group_metadata(), 30)
        return {tp.partition: tp.offset for tp in pos if tp.offset >= 0}

    def committed(self, timeout):
        c = Consumer({"bootstrap.servers": self.b, "group.id": self.group, "log_level": 3,
                      "isolation.level": "read_committed"})
        try:
            got = c.committed([TopicPartition(self.src, p) for p in range(PARTS)], timeout=timeout)
            return {tp.partition: tp.offset for tp in got}
        finally:
            c.close()

    def plain_fetch(self):
        kp = KafkaAdminClient(bootstrap_servers=self.b, client_id="kg-txn-admin")
        try:
            got = kp.list_group_offsets([self.group])[self.group]
            return {tp.partition: om.offset for tp, om in got.items() if tp.topic == self.src}
        finally:
            kp.close()

    def commit_and_abort(self):
        self.p.begin_transaction()
        first = self.batch(6)
        self.p.commit_transaction(30)
        expect_eq(self.committed(15), {p: first.get(p, -1001) for p in range(PARTS)},
                  "offsets after the committed transaction")
        self.p.begin_transaction()
        self.batch(4)
        self.p.abort_transaction(30)
        expect_eq(self.committed(15), {p: first.get(p, -1001) for p in range(PARTS)},
                  "offsets after the aborted transaction")
        self.first = first

    def unstable_while_open(self):
        # the aborted batch's records come again: rewind the consumer to the committed offsets
        for tp in self.c.assignment():
            self.c.seek(TopicPartition(self.src, tp.partition, self.first.get(tp.partition, 0)))
        self.p.begin_transaction()
        pending = self.batch(4)
        expect_eq(self.plain_fetch(), {p: o for p, o in self.first.items()},
                  "OffsetFetch without require_stable during the transaction")
        # committed() with require_stable keeps getting UNSTABLE_OFFSET_COMMIT until the end
        try:
            early = self.committed(2)
            expect(False, "committed() returned %r while the transaction was open" % early)
        except KafkaException as e:
            self.s.log("committed() during the transaction: %s" % e)
        result = {}
        t = threading.Thread(target=lambda: result.update(self.committed(30)))
        t.start()
        self.p.commit_transaction(30)
        t.join(40)
        expect_eq(result, {p: pending.get(p, -1001) for p in range(PARTS)},
                  "committed() once the transaction is committed")
        expect_eq(self.plain_fetch(), pending, "OffsetFetch after the commit")

    def run(self):
        try:
            if not self.s.test("transactional producer and read_committed consumer", self.setup):
                return
            self.s.test("sendOffsetsToTransaction: committed moves the offsets, aborted does not",
                        self.commit_and_abort)
            self.s.test("pending transactional offsets: UNSTABLE_OFFSET_COMMIT for require_stable",
                        self.unstable_while_open)
        finally:
            if self.c is not None:
                self.c.close()


def served(bootstrap):
    """Whether the broker serves AddOffsetsToTxn (25) and TxnOffsetCommit (28)."""
    kp = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kg-txn-probe")
    try:
        keys = {int(k) for k in kp.api_versions()}
    finally:
        kp.close()
    return 25 in keys and 28 in keys


def main():
    a = parse_args(__doc__.splitlines()[0], extra=lambda ap: ap.add_argument(
        "--probe", action="store_true",
        help="only say (exit 0 / 3) whether the broker serves AddOffsetsToTxn and TxnOffsetCommit"))
    if a.probe:
        return 0 if served(a.bootstrap) else 3
    s = Suite("txn-offsets", a.only)
    Txn(s, a.bootstrap).run()
    return s.finish()


if __name__ == "__main__":
    sys.exit(main())
