#!/usr/bin/env python3
"""librdkafka consumer-group suite (confluent-kafka, which bundles librdkafka), against any broker.

  rdkafka_group.py --bootstrap HOST:PORT      (or KM_BOOTSTRAP=HOST:PORT)

For each assignment strategy of the classic group protocol (range = eager rebalancing,
cooperative-sticky = incremental; --strategies, default both; the value "consumer" runs the same
scenario with the KIP-848 protocol, group.protocol=consumer, not run by default), on a fresh
4-partition topic holding 50 records per partition:
  * two consumers of one group both get partitions, disjoint, all 4 covered;
    DescribeGroups shows the group Stable with both members and those assignments;
  * both consume and commit every record synchronously; after each has processed some, the
    first closes (LeaveGroup) and the other gets all 4 partitions;
  * across the handover every record is consumed exactly once (none twice, none lost), in offset
    order per partition, the second consumer resuming exactly at the first one's commits;
  * the committed offsets (OffsetFetch, and the Admin ListConsumerGroupOffsets) equal the ends;
  * after both are gone, a new member of the group that rejoins starts at the committed offsets:
    it gets exactly the records produced since, none of the old ones.
Closing line: "N passed, N failed"; exit 0 only if everything passed.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))

from confluent_kafka import (  # noqa: E402
    Consumer, ConsumerGroupTopicPartitions, KafkaException, Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # noqa: E402

from kmcheck import Suite, expect, expect_eq, parse_args, unique, wait_until  # noqa: E402

PARTS = 4
PER_PART = 50
EXTRA = 10
FIRST_STOP = 25  # records each consumer processes before the first one leaves


def produce(bootstrap, topic, start, count):
    """count records per partition, indexes start..start+count-1, in order; returns delivered."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "log_level": 3})
    errors = []

    def dr(err, msg):
        if err is not None:
            errors.append(err)

    for j in range(start, start + count):
        for part in range(PARTS):
            p.produce(topic, key=b"p%d-r%d" % (part, j), value=b"v%d:%d" % (part, j),
                      partition=part, on_delivery=dr)
    left = p.flush(30)
    expect(left == 0 and not errors, "produce: %d undelivered, errors %r", left, errors[:3])


class Member:
    """One consumer of the group; processes one record at a time and commits it synchronously."""

    def __init__(self, name, bootstrap, group, topic, strategy):
        self.name = name
        self.seen = []  # (partition, offset, key, value)
        self.commit_errors = []
        conf = {
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": "kc-rdk-" + name,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "enable.partition.eof": False, "log_level": 3,
        }
        if strategy == "consumer":  # KIP-848: ConsumerGroupHeartbeat, the broker assigns
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"partition.assignment.strategy": strategy,
                         "session.timeout.ms": 10000, "heartbeat.interval.ms": 250})
        self.c = Consumer(conf)
        self.c.subscribe([topic])
        self.closed = False

    def parts(self):
        return sorted(tp.partition for tp in self.c.assignment())

    def step(self, timeout=0.05):
        """Polls once; processes (records and commits) at most one record. True if it did."""
        m = self.c.poll(timeout)
        if m is None:
            return False
        if m.error():
            raise KafkaException(m.error())
        self.seen.append((m.partition(), m.offset(), m.key(), m.value()))
        try:
            self.c.commit(message=m, asynchronous=False)
        except KafkaException as e:
            self.commit_errors.append((m.partition(), m.offset(), str(e)))
        return True

    def close(self):
        if not self.closed:
            self.closed = True
            self.c.close()


def check_records(seen, start, count, what):
    """Every partition: offsets start..start+count-1 exactly once, in order, right content."""
    by_part = {}
    for part, off, key, val in seen:
        by_part.setdefault(part, []).append((off, key, val))
    for part, recs in sorted(by_part.items()):
        offs = [o for o, _, _ in recs]
        dups = sorted({o for o in offs if offs.count(o) > 1})
        expect(not dups, "%s: partition %d: %d offsets consumed twice: %s", what, part, len(dups), dups[:10])
    expect_eq(sorted(by_part), list(range(PARTS)), what + ": partitions seen")
    for part, recs in by_part.items():
        offs = [o for o, _, _ in recs]
        expect_eq(offs, list(range(start, start + count)), "%s: partition %d offsets" % (what, part))
        for o, k, v in recs:
            expect(k == b"p%d-r%d" % (part, o) and v == b"v%d:%d" % (part, o),
                   "%s: partition %d offset %d holds %r=%r", what, part, o, k, v)


class Scenario:
    def __init__(self, suite, bootstrap, admin, strategy):
        self.s, self.b, self.admin, self.strategy = suite, bootstrap, admin, strategy
        self.topic = unique("kc-rdk-" + strategy.replace("-", ""))
        self.group = unique("kc-rdk-group")
        self.a = self.bm = None
        self.ok = True

    def step(self, name, fn):
        full = "%s: %s" % (self.strategy, name)
        if not self.ok:
            self.s.test(full, lambda: (_ for _ in ()).throw(AssertionError("not run: an earlier step failed")))
            return
        self.ok = self.s.test(full, fn)

    def run(self):
        try:
            self.step("create a 4-partition topic", self.setup)
            self.step("two members both get partitions, disjoint, covering all 4", self.join_both)
            self.step("DescribeGroups: Stable, 2 members, the same assignments", self.describe_two)
            self.step("both consume %d records per partition, committing each synchronously" % PER_PART,
                      self.consume_some)
            self.step("first member closes: the other gets all 4 partitions", self.leave)
            self.step("handover: every record exactly once, in order, none lost", self.finish_consuming)
            self.step("committed offsets (OffsetFetch, ListConsumerGroupOffsets) = ListOffsets latest", self.committed)
            self.step("rejoin: a new member starts at the committed offsets", self.rejoin)
        finally:
            for m in (self.a, self.bm):
                if m is not None:
                    m.close()
            try:
                self.admin.delete_topics([self.topic], operation_timeout=10)[self.topic].result(15)
            except Exception:  # noqa: BLE001 - cleanup only
                pass

    def setup(self):
        f = self.admin.create_topics([NewTopic(self.topic, PARTS, 1)], operation_timeout=30)
        f[self.topic].result(30)
        wait_until(lambda: (lambda t: t is not None and t.error is None and len(t.partitions) == PARTS
                            and all(p.leader >= 0 for p in t.partitions.values()))(
            self.admin.list_topics(self.topic, timeout=5).topics.get(self.topic)),
            30, "leaders of " + self.topic)

    def join_both(self):
        self.a = Member("A", self.b, self.group, self.topic, self.strategy)
        wait_until(lambda: (self.a.c.poll(0.05), self.a.parts() == list(range(PARTS)))[1],
                   30, "A to get all partitions alone", interval=0)
        self.bm = Member("B", self.b, self.group, self.topic, self.strategy)
        # The topic is still empty: records are produced once the group is stable, so that no
        # commit races the join (a cooperative member keeps consuming while the group rebalances,
        # and its commits then carry the old generation: Kafka answers ILLEGAL_GENERATION).

        def both():
            self.a.step(0.02)
            self.bm.step(0.02)
            pa, pb = self.a.parts(), self.bm.parts()
            return pa and pb and not set(pa) & set(pb) and sorted(pa + pb) == list(range(PARTS))
        wait_until(both, 30, "both members to hold disjoint partitions covering all 4", interval=0)
        self.s.log("%s: A=%s B=%s" % (self.strategy, self.a.parts(), self.bm.parts()))

    def describe_two(self):
        def stable():
            self.a.step(0.02)
            self.bm.step(0.02)
            d = self.admin.describe_consumer_groups([self.group])[self.group].result(10)
            return d if (d.state.name == "STABLE" and len(d.members) == 2) else None
        d = wait_until(stable, 20, "DescribeGroups to show Stable with 2 members")
        expect_eq(d.group_id, self.group, "group id")
        expect_eq(d.is_simple_consumer_group, False, "is_simple_consumer_group (protocol type 'consumer')")
        if self.strategy == "consumer":
            expect_eq(d.type.name, "CONSUMER", "group type")
        else:
            expect_eq(d.partition_assignor, self.strategy, "partition assignor (protocol name)")
            expect_eq(d.type.name, "CLASSIC", "group type")
        md = self.admin.list_topics(timeout=10)
        expect(d.coordinator.id in md.brokers, "coordinator %r is not a broker in metadata", d.coordinator.id)
        got = {m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in d.members}
        expect_eq(got, {"kc-rdk-A": self.a.parts(), "kc-rdk-B": self.bm.parts()}, "member assignments")

    def consume_some(self):
        produce(self.b, self.topic, 0, PER_PART)

        def enough():
            if len(self.a.seen) < FIRST_STOP:
                self.a.step(0.02)
            if len(self.bm.seen) < FIRST_STOP:
                self.bm.step(0.02)
            return len(self.a.seen) >= FIRST_STOP and len(self.bm.seen) >= FIRST_STOP
        wait_until(enough, 30, "each member to process %d records" % FIRST_STOP, interval=0)
        expect(not self.a.commit_errors and not self.bm.commit_errors,
               "synchronous commits failed: %r", (self.a.commit_errors + self.bm.commit_errors)[:3])

    def leave(self):
        self.b_parts_before = self.bm.parts()
        self.a.close()

        def all_parts():
            self.bm.step(0.02)
            return self.bm.parts() == list(range(PARTS))
        wait_until(all_parts, 30, "B to get all 4 partitions", interval=0)

    def finish_consuming(self):
        total = PARTS * PER_PART
        # Until every record was seen at least once: a duplicate does not end the wait early.
        wait_until(lambda: (self.bm.step(0.05),
                            len({(p, o) for p, o, _, _ in self.a.seen + self.bm.seen}) >= total)[1],
                   30, "all %d records to be consumed" % total, interval=0)
        # While the group rebalances after A left, a cooperative B keeps its own partitions and goes
        # on consuming; a commit sent with the generation that is being replaced is refused with
        # ILLEGAL_GENERATION or REBALANCE_IN_PROGRESS (Kafka does so). Such a refusal is harmless
        # only for a partition B kept (a later commit covers it); any other error fails the test,
        # and so would the duplicate it could cause. One final commit covers the last refusal.
        kept = set(self.b_parts_before)
        for part, off, err in self.bm.commit_errors:
            expect(part in kept and ("ILLEGAL_GENERATION" in err or "REBALANCE_IN_PROGRESS" in err),
                   "commit of partition %d offset %d failed: %s", part, off, err)
        if self.bm.commit_errors:
            self.s.log("%s: %d commit(s) refused during the rebalance: %s" % (
                self.strategy, len(self.bm.commit_errors), self.bm.commit_errors[:2]))
            self.bm.c.commit(asynchronous=False)
        # Both members together: every offset exactly once. Sorting by offset per partition keeps
        # the check independent of who processed what.
        merged = sorted(self.a.seen + self.bm.seen, key=lambda r: (r[0], r[1]))
        check_records(merged, 0, PER_PART, "A+B")
        # Each member on its own consumed in offset order.
        for m in (self.a, self.bm):
            for part in range(PARTS):
                offs = [o for p, o, _, _ in m.seen if p == part]
                expect(offs == sorted(offs), "%s: partition %d out of order: %s", m.name, part, offs[:20])
        # Where A stopped in a partition, B started right after A's last commit.
        for part in range(PARTS):
            a_offs = [o for p, o, _, _ in self.a.seen if p == part]
            b_offs = [o for p, o, _, _ in self.bm.seen if p == part]
            if a_offs and b_offs and max(a_offs) < min(b_offs):
                expect_eq(min(b_offs), max(a_offs) + 1, "partition %d: B's first offset after A" % part)

    def committed(self):
        tps = [TopicPartition(self.topic, p) for p in range(PARTS)]
        got = {tp.partition: tp.offset for tp in self.bm.c.committed(tps, timeout=10)}
        expect_eq(got, {p: PER_PART for p in range(PARTS)}, "committed offsets (OffsetFetch)")
        for spec, want in ((OffsetSpec.earliest(), 0), (OffsetSpec.latest(), PER_PART)):
            res = self.admin.list_offsets({tp: spec for tp in tps}, request_timeout=10)
            got = {tp.partition: f.result(10).offset for tp, f in res.items()}
            expect_eq(got, {p: want for p in range(PARTS)}, "ListOffsets %s" % spec)
        res = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(self.group)])
        r = res[self.group].result(10)
        got = {tp.partition: tp.offset for tp in r.topic_partitions if tp.topic == self.topic}
        expect_eq(got, {p: PER_PART for p in range(PARTS)}, "ListConsumerGroupOffsets")

    def rejoin(self):
        self.bm.close()
        produce(self.b, self.topic, PER_PART, EXTRA)
        c = Member("C", self.b, self.group, self.topic, self.strategy)
        try:
            wait_until(lambda: (c.step(0.05), len(c.seen) >= PARTS * EXTRA)[1], 30,
                       "C to consume the %d new records" % (PARTS * EXTRA), interval=0)
            expect(not c.commit_errors, "synchronous commits failed: %r", c.commit_errors[:3])
            check_records(sorted(c.seen, key=lambda r: (r[0], r[1])), PER_PART, EXTRA, "C")
        finally:
            c.close()


def main():
    a = parse_args(__doc__.splitlines()[0], lambda ap: ap.add_argument(
        "--strategies", default=os.environ.get("RDK_STRATEGIES", "range,cooperative-sticky")))
    s = Suite("rdkafka-group", a.only)
    admin = AdminClient({"bootstrap.servers": a.bootstrap, "log_level": 2})

    def preflight():
        md = admin.list_topics(timeout=15)
        expect(len(md.brokers) >= 1, "no brokers in metadata")
    if not s.test("bootstrap answers metadata (15 s)", preflight):
        return s.finish()
    import confluent_kafka
    v = confluent_kafka.version()
    s.log("confluent-kafka %s, librdkafka %s" % (v[0] if isinstance(v, tuple) else v, confluent_kafka.libversion()[0]))
    for strategy in a.strategies.split(","):
        Scenario(s, a.bootstrap, admin, strategy).run()
    return s.finish()


if __name__ == "__main__":
    sys.exit(main())
