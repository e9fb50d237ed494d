#!/usr/bin/env python3
"""Transactional producers of librdkafka (confluent-kafka) and kafka-python against a broker.

    txn_clients.py --bootstrap HOST:PORT

For each client: interleaved committed and aborted transactions over 2 partitions, a
read_committed consumer (librdkafka) that sees only the committed records in order and a
read_uncommitted one that sees all; for librdkafka also sendOffsetsToTransaction when the broker
has a group coordinator, and fencing by a second instance of the same transactional.id.
Waits poll with deadlines. Prints PASS/FAIL lines and "N passed, N failed"; exit 1 on failure.
"""
import argparse
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PASSED = 0
FAILED = 0


def check(name, fn):
    global PASSED, FAILED
    t0 = time.monotonic()
    try:
        fn()
        PASSED += 1
        print(f"PASS {name} ({time.monotonic() - t0:.1f} s)", flush=True)
    except Exception as e:  # noqa: BLE001 - report every failure the same way
        FAILED += 1
        print(f"FAIL {name} ({time.monotonic() - t0:.1f} s): {type(e).__name__}: {e}", flush=True)


def unique(prefix):
    return f"{prefix}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"


class Env:
    def __init__(self, bootstrap):
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def topic(self, prefix, partitions=2):
        name = unique(prefix)
        fut = self.admin.create_topics([NewTopic(name, partitions, 1)])[name]
        fut.result(30)
        return name

    def read(self, topic, partitions, isolation):
        """Every data record of @topic from the start to the end offsets, as (partition, value)."""
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": unique("kbt-reader"),
                      "isolation.level": isolation, "enable.auto.commit": False,
                      "enable.partition.eof": True})
        try:
            tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
            c.assign(tps)
            ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                               cached=False)[1] for p in range(partitions)}
            got, eof = [], set()
            deadline = time.monotonic() + 30
            while len(eof) < partitions:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{isolation} reader did not reach the end: {eof}")
                m = c.poll(0.5)
                if m is None:
                    continue
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF
                        pos = c.position([TopicPartition(topic, m.partition())])[0].offset
                        if pos >= ends[m.partition()] or isolation == "read_committed":
                            eof.add(m.partition())
                        continue
                    raise KafkaException(m.error())
                got.append((m.partition(), m.value().decode()))
            return got
        finally:
            c.close()


def librdkafka_txns(env):
    topic = env.topic("kbt-rdk-txn")
    txn_id = unique("kbt-rdk-txn-id")
    p = Producer({"bootstrap.servers": env.bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": 30000, "linger.ms": 0})
    p.init_transactions(30)
    want = {0: [], 1: []}
    for k in range(6):
        p.begin_transaction()
        for j in range(4):
            p.produce(topic, value=f"t{k}-r{j}".encode(), partition=j % 2)
        if k % 3 == 1:
            p.flush(30)
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            for j in range(4):
                want[j % 2].append(f"t{k}-r{j}")
    p.flush(10)

    def committed():
        got = env.read(topic, 2, "read_committed")
        for part in (0, 1):
            vals = [v for (pp, v) in got if pp == part]
            assert vals == want[part], f"partition {part}: {vals} != {want[part]}"

    def uncommitted():
        got = env.read(topic, 2, "read_uncommitted")
        assert len(got) == 24, f"{len(got)} records"

    check("librdkafka: read_committed sees the 4 committed transactions in order", committed)
    check("librdkafka: read_uncommitted sees all 24 records", uncommitted)
    return topic


def librdkafka_fencing(env):
    topic = env.topic("kbt-rdk-fence", 1)
    txn_id = unique("kbt-rdk-fence-id")
    conf = {"bootstrap.servers": env.bootstrap, "transactional.id": txn_id,
            "transaction.timeout.ms": 30000, "linger.ms": 0}
    first = Producer(conf)
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(topic, value=b"zombie", partition=0)
    first.flush(30)
    second = Producer(conf)
    second.init_transactions(30)
    try:
        first.commit_transaction(30)
        raise AssertionError("the fenced producer committed")
    except KafkaException as e:
        err = e.args[0]
        assert err.fatal() or err.code() in (-144, 47, 90), f"unexpected error {err}"
    second.begin_transaction()
    second.produce(topic, value=b"good", partition=0)
    second.commit_transaction(30)
    got = [v for (_, v) in env.read(topic, 1, "read_committed")]
    assert got == ["good"], got


def librdkafka_offsets(env, topic):
    """sendOffsetsToTransaction: the group's offsets move only with the commit."""
    group = unique("kbt-rdk-group")
    txn_id = unique("kbt-rdk-offsets-id")
    p = Producer({"bootstrap.servers": env.bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": 30000})
    p.init_transactions(30)
    c = Consumer({"bootstrap.servers": env.bootstrap, "group.id": group,
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        meta = c.consumer_group_metadata()
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 5)], meta, 30)
        p.abort_transaction(30)
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], meta, 30)
        p.commit_transaction(30)
        deadline = time.monotonic() + 30
        while True:
            off = c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
            if off == 7 or time.monotonic() > deadline:
                break
        assert off == 7, f"committed offset {off}"
    finally:
        c.close()


def kafka_python_txns(env):
    from kafka import KafkaProducer  # kafka-python, transactions since 2.1
    topic = env.topic("kbt-kp-txn")
    p = KafkaProducer(bootstrap_servers=env.bootstrap, transactional_id=unique("kbt-kp-txn-id"),
                      transaction_timeout_ms=30000)
    p.init_transactions()
    want = {0: [], 1: []}
    for k in range(4):
        p.begin_transaction()
        for j in range(4):
            p.send(topic, value=f"k{k}-r{j}".encode(), partition=j % 2)
        if k == 2:
            p.flush()
            p.abort_transaction()
        else:
            p.commit_transaction()
            for j in range(4):
                want[j % 2].append(f"k{k}-r{j}")
    p.close()
    got = env.read(topic, 2, "read_committed")
    for part in (0, 1):
        vals = [v for (pp, v) in got if pp == part]
        assert vals == want[part], f"partition {part}: {vals} != {want[part]}"
    assert len(env.read(topic, 2, "read_uncommitted")) == 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--no-groups", action="store_true",
                    help="the broker has no group coordinator: skip sendOffsetsToTransaction")
    a = ap.parse_args()
    env = Env(a.bootstrap)
    topic = None

    def rdk():
        nonlocal topic
        topic = librdkafka_txns(env)

    check("librdkafka: 6 transactions over 2 partitions, 2 aborted", rdk)
    check("librdkafka: a second instance fences the first", lambda: librdkafka_fencing(env))
    if not a.no_groups and topic:
        check("librdkafka: sendOffsetsToTransaction commits offsets only with the transaction",
              lambda: librdkafka_offsets(env, topic))
    check("kafka-python: 4 transactions over 2 partitions, 1 aborted, read_committed in order",
          lambda: kafka_python_txns(env))
    print(f"{PASSED} passed, {FAILED} failed", flush=True)
    return 0 if FAILED == 0 and PASSED > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
