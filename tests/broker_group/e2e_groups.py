#!/usr/bin/env python3
"""Consumer groups with real clients (librdkafka through confluent-kafka, kafka-python) against a
broker, in two phases around a broker restart.

  e2e_groups.py --bootstrap HOST:PORT --phase before --state FILE
  e2e_groups.py --bootstrap HOST:PORT --phase after  --state FILE

before: a topic of 4 partitions x 30 records; then
  * librdkafka, two members of group G1 consume and commit synchronously; the first closes
    (LeaveGroup), the second takes over all partitions and goes on from the commits; both close;
  * librdkafka static members (group.instance.id, KIP-345) of G2: one restarts with the same
    instance id and gets its partitions back without the other member rebalancing;
  * kafka-python, group G3: commit, close, a new member resumes at the commits;
  * a simple commit (assign + commit, no membership) for G4;
  * DeleteGroups: an empty group G5 goes (its offsets too), a group with members does not
    (NON_EMPTY_GROUP); ListGroups with a state filter, DescribeGroups with instance ids;
  the expected committed offsets are written to FILE.
after (the broker restarted on the same log dirs): every committed offset is back (librdkafka
  and kafka-python admin clients), G5 stays deleted, the static group G2 is still there with its
  two members, and a new member of G1 starts exactly at the committed offsets.
Closing line: "N passed, N failed"; exit 0 only if everything passed.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "lib"))

from confluent_kafka import (  # noqa: E402
    Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, Producer,
    TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka import KafkaAdminClient, KafkaConsumer  # noqa: E402
from kafka.admin import MemberToRemove  # noqa: E402

from kmcheck import Suite, expect, expect_eq, parse_args, unique, wait_until  # noqa: E402

PARTS = 4
PER_PART = 30


def rdk_consumer(b, group, name, **extra):
    conf = {"bootstrap.servers": b, "group.id": group, "client.id": "kg-" + name,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "enable.partition.eof": False, "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 300, "log_level": 3}
    conf.update(extra)
    return Consumer(conf)


def committed_offsets(admin, group):
    r = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    return {"%s:%d" % (tp.topic, tp.partition): tp.offset for tp in r.topic_partitions}


class Before:
    def __init__(self, s, b, state):
        self.s, self.b, self.state = s, b, state
        self.admin = AdminClient({"bootstrap.servers": b, "log_level": 3})
        self.topic = unique("kg-topic")
        self.g = {k: unique("kg-" + k) for k in ("g1", "g2", "g3", "g4", "g5")}
        self.expected = {}
        self.static = []

    def setup(self):
        fs = self.admin.create_topics([NewTopic(self.topic, PARTS, 1)], operation_timeout=15)
        fs[self.topic].result(20)
        wait_until(lambda: self.topic in self.admin.list_topics(timeout=5).topics, 20, "the topic")
        p = Producer({"bootstrap.servers": self.b, "acks": "all", "linger.ms": 5, "log_level": 3})
        for j in range(PER_PART):
            for part in range(PARTS):
                p.produce(self.topic, key=b"p%d-r%d" % (part, j), value=b"%d" % j, partition=part)
        expect_eq(p.flush(30), 0, "records left unflushed")

    def two_members(self):
        """G1: both members consume some and commit; the first leaves; the second finishes."""
        seen = {}
        a = rdk_consumer(self.b, self.g["g1"], "a")
        bm = rdk_consumer(self.b, self.g["g1"], "b")
        a.subscribe([self.topic])
        bm.subscribe([self.topic])

        def step(c, n=1):
            for _ in range(n):
                m = c.poll(0.05)
                if m is None:
                    return
                if m.error():
                    raise KafkaException(m.error())
                seen.setdefault(m.partition(), []).append(m.offset())
                c.commit(message=m, asynchronous=False)
        try:
            def both_assigned():
                step(a)
                step(bm)
                pa = {tp.partition for tp in a.assignment()}
                pb = {tp.partition for tp in bm.assignment()}
                return pa and pb and not pa & pb and pa | pb == set(range(PARTS))
            wait_until(both_assigned, 60, "both G1 members assigned, disjoint, covering all")
        except Exception:
            a.close()
            bm.close()
            raise
        # records may have been consumed while waiting: they were committed one by one
        for _ in range(20):
            step(a)
            step(bm)
        a.close()  # LeaveGroup: b takes everything over
        wait_until(lambda: (step(bm), len(bm.assignment()) == PARTS)[1], 60,
                   "the remaining member owning all partitions")
        wait_until(lambda: (step(bm, 10), sum(len(v) for v in seen.values()) >= PARTS * PER_PART)[1],
                   60, "every record consumed")
        bm.close()
        for part in range(PARTS):
            offs = seen.get(part, [])
            expect_eq(sorted(offs), list(range(PER_PART)), "partition %d: every offset once" % part)
            expect_eq(offs, sorted(offs), "partition %d: in order across the handover" % part)
        got = committed_offsets(self.admin, self.g["g1"])
        want = {"%s:%d" % (self.topic, p): PER_PART for p in range(PARTS)}
        expect_eq(got, want, "G1 committed offsets")
        self.expected[self.g["g1"]] = want

    def static_members(self):
        """G2: static member s2 restarts with its instance id; s1 sees no rebalance."""
        events = {"s1": [], "s2": []}

        def cb(name):
            return {"on_assign": lambda c, parts: events[name].append(("assign", len(parts))),
                    "on_revoke": lambda c, parts: events[name].append(("revoke", len(parts)))}

        s1 = rdk_consumer(self.b, self.g["g2"], "s1", **{"group.instance.id": "kg-inst-1"})
        s2 = rdk_consumer(self.b, self.g["g2"], "s2", **{"group.instance.id": "kg-inst-2"})
        s1.subscribe([self.topic], **cb("s1"))
        s2.subscribe([self.topic], **cb("s2"))
        self.static = [s1, s2]
        wait_until(lambda: (s1.poll(0.05), s2.poll(0.05),
                            len(s1.assignment()) + len(s2.assignment()) == PARTS
                            and s1.assignment() and s2.assignment())[2],
                   60, "both static members assigned")
        before1 = sorted(tp.partition for tp in s1.assignment())
        before2 = sorted(tp.partition for tp in s2.assignment())
        n1 = len(events["s1"])
        d = self.admin.describe_consumer_groups([self.g["g2"]])[self.g["g2"]].result(15)
        expect_eq(d.state, ConsumerGroupState.STABLE, "G2 state")
        expect_eq(sorted(m.group_instance_id for m in d.members), ["kg-inst-1", "kg-inst-2"],
                  "G2 members' instance ids")
        # a static member leaves no LeaveGroup behind when it closes (KIP-345)
        s2.close()
        s2 = rdk_consumer(self.b, self.g["g2"], "s2b", **{"group.instance.id": "kg-inst-2"})
        events["s2"] = []
        s2.subscribe([self.topic], **cb("s2"))
        self.static[1] = s2
        wait_until(lambda: (s1.poll(0.05), s2.poll(0.05), bool(s2.assignment()))[2], 60,
                   "the restarted static member assigned")
        expect_eq(sorted(tp.partition for tp in s2.assignment()), before2,
                  "the restarted static member's partitions")
        for _ in range(20):  # s1 keeps polling for a while: no rebalance reaches it
            s1.poll(0.05)
        expect_eq(events["s1"][n1:], [], "rebalance callbacks of the other static member")
        expect_eq(sorted(tp.partition for tp in s1.assignment()), before1, "its partitions")
        for c in self.static:
            c.commit(offsets=[TopicPartition(self.topic, tp.partition, 5) for tp in c.assignment()],
                     asynchronous=False)
        self.expected[self.g["g2"]] = {"%s:%d" % (self.topic, p): 5 for p in range(PARTS)}

    def kafka_python(self):
        """G3: kafka-python commits, closes; a new member resumes at the commits."""
        def member():
            return KafkaConsumer(self.topic, bootstrap_servers=self.b, group_id=self.g["g3"],
                                 client_id="kg-kpy", enable_auto_commit=False,
                                 auto_offset_reset="earliest", heartbeat_interval_ms=300,
                                 max_poll_records=3)
        first = []
        c = member()
        try:
            wait_until(lambda: [first.extend(rs) for rs in c.poll(timeout_ms=200).values()] is not None
                       and len(first) >= 12, 60, "kafka-python's first records", interval=0)
            c.commit()
            committed = {tp.partition: c.committed(tp) for tp in c.assignment()}
        finally:
            c.close()
        last = {}
        for r in first:
            last[r.partition] = max(last.get(r.partition, -1), r.offset)
        expect_eq(committed, {p: last.get(p, -1) + 1 for p in range(PARTS)}, "kafka-python committed()")
        second = []
        c = member()
        try:
            wait_until(lambda: [second.extend(rs) for rs in c.poll(timeout_ms=200).values()] is not None
                       and len(second) >= PARTS * PER_PART - len(first), 60, "the rest", interval=0)
            c.commit()
        finally:
            c.close()
        starts = {}
        for r in second:
            starts[r.partition] = min(starts.get(r.partition, 1 << 40), r.offset)
        expect_eq(starts, {p: committed[p] for p in range(PARTS) if committed[p] < PER_PART},
                  "where the new member started")
        both = sorted((r.partition, r.offset) for r in first + second)
        expect_eq(both, sorted((p, o) for p in range(PARTS) for o in range(PER_PART)), "every record once")
        self.expected[self.g["g3"]] = {"%s:%d" % (self.topic, p): PER_PART for p in range(PARTS)}

    def simple_commit(self):
        """G4: assign + commit, no membership (generation -1)."""
        c = rdk_consumer(self.b, self.g["g4"], "simple")
        try:
            c.assign([TopicPartition(self.topic, 0, 0), TopicPartition(self.topic, 2, 0)])
            c.commit(offsets=[TopicPartition(self.topic, 0, 7), TopicPartition(self.topic, 2, 11)],
                     asynchronous=False)
            got = c.committed([TopicPartition(self.topic, p) for p in range(PARTS)], timeout=15)
            expect_eq({tp.partition: tp.offset for tp in got}, {0: 7, 1: -1001, 2: 11, 3: -1001},
                      "committed() of a simple consumer")
        finally:
            c.close()
        self.expected[self.g["g4"]] = {"%s:0" % self.topic: 7, "%s:2" % self.topic: 11}

    def delete_and_list(self):
        c = rdk_consumer(self.b, self.g["g5"], "del")
        c.assign([TopicPartition(self.topic, 1, 0)])
        c.commit(offsets=[TopicPartition(self.topic, 1, 3)], asynchronous=False)
        c.close()
        expect_eq(committed_offsets(self.admin, self.g["g5"]), {"%s:1" % self.topic: 3}, "G5 offsets")
        self.admin.delete_consumer_groups([self.g["g5"]], request_timeout=15)[self.g["g5"]].result(15)
        expect_eq(committed_offsets(self.admin, self.g["g5"]), {}, "G5 offsets after DeleteGroups")
        try:
            self.admin.delete_consumer_groups([self.g["g2"]], request_timeout=15)[self.g["g2"]].result(15)
            expect(False, "deleting G2 (it has members) succeeded")
        except KafkaException as e:
            expect("NON_EMPTY_GROUP" in str(e) or "not empty" in str(e).lower(),
                   "DeleteGroups of a group with members: %s", e)
        lst = self.admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}, request_timeout=15).result(15)
        ids = {g.group_id for g in lst.valid}
        expect(self.g["g1"] in ids and self.g["g3"] in ids, "ListGroups(Empty) lists G1 and G3: %s",
               sorted(ids))
        expect(self.g["g2"] not in ids, "ListGroups(Empty) must not list the Stable G2")
        lst = self.admin.list_consumer_groups(request_timeout=15).result(15)
        ids = {g.group_id: g for g in lst.valid}
        expect(self.g["g2"] in ids and self.g["g4"] in ids and self.g["g5"] not in ids,
               "ListGroups: %s", sorted(ids))
        expect(ids[self.g["g4"]].is_simple_consumer_group, "G4 is a simple group (no protocol type)")
        expect(not ids[self.g["g2"]].is_simple_consumer_group, "G2 is a consumer group")

    def run(self):
        ok = self.s.test("create a %d-partition topic with %d records each" % (PARTS, PER_PART), self.setup)
        if not ok:
            return
        self.s.test("librdkafka: two members, one leaves, the other resumes at the commits", self.two_members)
        self.s.test("librdkafka: static member restarts without a rebalance (KIP-345)", self.static_members)
        self.s.test("kafka-python: commit, close, a new member resumes at the commits", self.kafka_python)
        self.s.test("simple commit (assign, generation -1) and committed()", self.simple_commit)
        self.s.test("DeleteGroups (empty: gone; with members: NON_EMPTY_GROUP); ListGroups filters",
                    self.delete_and_list)
        for c in self.static:
            c.close()
        with open(self.state, "w") as f:
            json.dump({"topic": self.topic, "groups": self.g, "expected": self.expected}, f)


class After:
    def __init__(self, s, b, state):
        self.s, self.b = s, b
        with open(state) as f:
            st = json.load(f)
        self.topic, self.g, self.expected = st["topic"], st["groups"], st["expected"]
        self.admin = AdminClient({"bootstrap.servers": b, "log_level": 3})

    def offsets_back(self):
        for group, want in sorted(self.expected.items()):
            expect_eq(committed_offsets(self.admin, group), want, "committed offsets of %s" % group)
        # kafka-python fetches every group in one OffsetFetch (v8+, KIP-709)
        kp = KafkaAdminClient(bootstrap_servers=self.b, client_id="kg-kpy-admin")
        try:
            got = kp.list_group_offsets(sorted(self.expected) + [self.g["g5"]])
            for group, want in sorted(self.expected.items()):
                expect_eq({"%s:%d" % (tp.topic, tp.partition): om.offset
                           for tp, om in got[group].items()}, want,
                          "kafka-python OffsetFetch of %s" % group)
            expect_eq(dict(got[self.g["g5"]]), {}, "kafka-python OffsetFetch of the deleted G5")
        finally:
            kp.close()
        expect_eq(committed_offsets(self.admin, self.g["g5"]), {}, "the deleted G5")

    def static_back(self):
        """G2's static members come back from the log; an admin removes one by instance id
        (LeaveGroup v3+ with group.instance.id and an empty member id)."""
        d = self.admin.describe_consumer_groups([self.g["g2"]])[self.g["g2"]].result(15)
        expect_eq(d.state, ConsumerGroupState.STABLE, "G2 state after the restart")
        expect_eq(sorted(m.group_instance_id for m in d.members), ["kg-inst-1", "kg-inst-2"],
                  "G2 static members after the restart")
        kp = KafkaAdminClient(bootstrap_servers=self.b, client_id="kg-kpy-admin")
        try:
            r = kp.remove_group_members(self.g["g2"], [MemberToRemove(group_instance_id="kg-inst-1")])
            self.s.log("remove_group_members: %r" % (r,))
            dd = kp.describe_groups([self.g["g2"]])
        finally:
            kp.close()
        d = self.admin.describe_consumer_groups([self.g["g2"]])[self.g["g2"]].result(15)
        expect_eq([m.group_instance_id for m in d.members], ["kg-inst-2"], "G2 members after the removal")
        expect_eq(d.state, ConsumerGroupState.PREPARING_REBALANCING, "G2 state after the removal")
        self.s.log("kafka-python describe_groups: %r" % (dd,))

    def groups_back(self):
        d = self.admin.describe_consumer_groups([self.g["g1"]])[self.g["g1"]].result(15)
        expect_eq(d.state, ConsumerGroupState.EMPTY, "G1 state after the restart")
        expect_eq(d.members, [], "G1 members")

    def resume(self):
        with_data = Producer({"bootstrap.servers": self.b, "log_level": 3})
        for part in range(PARTS):
            with_data.produce(self.topic, key=b"new", value=b"after", partition=part)
        expect_eq(with_data.flush(30), 0, "records left unflushed")
        c = rdk_consumer(self.b, self.g["g1"], "after")
        c.subscribe([self.topic])
        seen = []
        try:
            def got_all():
                m = c.poll(0.1)
                if m is not None and not m.error():
                    seen.append((m.partition(), m.offset()))
                return len(seen) >= PARTS
            wait_until(got_all, 60, "the new records", interval=0)
            for _ in range(10):
                m = c.poll(0.05)
                if m is not None and not m.error():
                    seen.append((m.partition(), m.offset()))
        finally:
            c.close()
        expect_eq(sorted(seen), [(p, PER_PART) for p in range(PARTS)],
                  "a new member starts exactly at the committed offsets")

    def run(self):
        self.s.test("committed offsets survive the restart (OffsetFetch via librdkafka and kafka-python)",
                    self.offsets_back)
        self.s.test("static members survive the restart; admin removal by instance id",
                    self.static_back)
        self.s.test("groups survive the restart (DescribeGroups)", self.groups_back)
        self.s.test("a new member resumes at the committed offsets after the restart", self.resume)


def main():
    a = parse_args(__doc__.splitlines()[0], extra=lambda ap: (
        ap.add_argument("--phase", choices=["before", "after"], required=True),
        ap.add_argument("--state", required=True)))
    s = Suite("groups-" + a.phase, a.only)
    (Before if a.phase == "before" else After)(s, a.bootstrap, a.state).run()
    return s.finish()


if __name__ == "__main__":
    sys.exit(main())
