#!/usr/bin/env python3
"""Topic set-up for the shell suites (kcat cannot create topics), with librdkafka's AdminClient.

  topics.py --bootstrap B create TOPIC PARTITIONS [--config k=v]...
      creates the topic (replication factor 1 unless --rf) and waits (deadline) until metadata
      shows every partition with a leader
  topics.py --bootstrap B delete TOPIC...
      deletes the topics (best effort: prints errors, exit 1 if any)
"""
import argparse
import os
import sys
import time

from confluent_kafka.admin import AdminClient, NewTopic


def wait_leaders(admin, topic, partitions, deadline):
    last = "no metadata"
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
            p.leader >= 0 for p in t.partitions.values()
        ):
            return
        last = "topic metadata: %r" % (t.error if t is not None else "absent")
        time.sleep(0.05)
    raise SystemExit("topics.py: %s did not get leaders in time (%s)" % (topic, last))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default=os.environ.get("KM_BOOTSTRAP"))
    ap.add_argument("--timeout", type=float, default=30)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("create")
    c.add_argument("topic")
    c.add_argument("partitions", type=int)
    c.add_argument("--rf", type=int, default=1)
    c.add_argument("--config", action="append", default=[])
    d = sub.add_parser("delete")
    d.add_argument("topics", nargs="+")
    a = ap.parse_args()
    if not a.bootstrap:
        ap.error("--bootstrap or KM_BOOTSTRAP is required")
    # log_level 2: librdkafka's per-attempt connection errors would flood the suite's output; a
    # failure still surfaces as the exception of the call.
    admin = AdminClient({"bootstrap.servers": a.bootstrap, "log_level": 2})
    deadline = time.monotonic() + a.timeout
    if a.cmd == "create":
        cfg = dict(kv.split("=", 1) for kv in a.config)
        fut = admin.create_topics(
            [NewTopic(a.topic, a.partitions, a.rf, config=cfg)], operation_timeout=a.timeout
        )[a.topic]
        fut.result(timeout=a.timeout)
        wait_leaders(admin, a.topic, a.partitions, deadline)
        return 0
    rc = 0
    for t, fut in admin.delete_topics(a.topics, operation_timeout=a.timeout).items():
        try:
            fut.result(timeout=a.timeout)
        except Exception as e:  # noqa: BLE001 - report every failure, keep going
            print("topics.py: delete %s: %s" % (t, e), file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
