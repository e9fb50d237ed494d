#!/usr/bin/env python3
"""producer-ids.py SUBCOMMAND ... -- the client side of scenario producer-ids
(tests/mirror_e2e/scn_producer_ids.sh, docs/testing-mirror.md). Runs with the clients venv.

  write BOOTSTRAP TOPIC PID TAG ACKED.json    idempotent Produce v9 (acks=-1) of 3 batches of 2
                                              records, producer PID, epoch 0, sequences 0, 2, 4,
                                              values "TAG-<i>", to partition 0's leader; retriable
                                              answers (6, 19, 5) are retried with the same
                                              sequence for up to 60 s; any other error fails (e.g.
                                              OUT_OF_ORDER_SEQUENCE_NUMBER 45); every acknowledged
                                              batch (base offset, values) is added to ACKED.json
  verify BOOTSTRAP TOPIC ACKED.json           kafka-python reads partition 0 to its end: every
                                              acknowledged record is stored once, at its offset
Exit 0 pass, 1 fail (each failure printed as FAIL: ...).
"""
import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import me2e  # noqa: E402
from me2e import check, done  # noqa: E402
from kmwire import crc32c  # noqa: E402

RETRIABLE = {5: "LEADER_NOT_AVAILABLE", 6: "NOT_LEADER_OR_FOLLOWER", 19: "NOT_ENOUGH_REPLICAS"}
BATCHES, PER_BATCH = 3, 2


def idempotent_batch(values, pid, epoch, seq):
    """A magic-2 batch of len(values) records (values < 64 bytes, no key) of producer pid/epoch
    with base sequence seq."""
    recs = b""
    for i, v in enumerate(values):
        body = b"\x00\x00" + bytes([i << 1]) + b"\x01" + bytes([len(v) << 1]) + v + b"\x00"
        recs += bytes([len(body) << 1]) + body
    now = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", 0, len(values) - 1, now, now, pid, epoch, seq,
                            len(values)) + recs
    rest = struct.pack(">ibI", 0, 2, crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(rest)) + rest


def cmd_write(bootstrap, topic, pid, tag, acked_file):
    pid = int(pid)
    acked = []
    if os.path.exists(acked_file):
        with open(acked_file) as f:
            acked = json.load(f)
    answers = {}
    for b in range(BATCHES):
        values = ["%s-%d" % (tag, b * PER_BATCH + i) for i in range(PER_BATCH)]
        batch = idempotent_batch([v.encode() for v in values], pid, 0, b * PER_BATCH)
        deadline = time.time() + 60
        while True:
            try:
                nodes, tops = me2e.metadata(bootstrap.split(",")[0], [topic])
                leader = tops[topic]["parts"][0]["leader"]
                ec, msg, base = me2e.produce_full(nodes[leader], topic, 0, -1, batch) \
                    if leader in nodes else (5, "no leader", -1)
            except (OSError, KeyError, AssertionError) as e:
                ec, msg, base, leader = 5, "no answer: %s" % e, -1, -1
            answers[ec] = answers.get(ec, 0) + 1
            if ec not in RETRIABLE or time.time() > deadline:
                break
            time.sleep(0.2)  # retry interval of a retriable answer (bounded by the deadline)
        ok = check(ec == 0, "producer %d epoch 0 sequence %d (%d records) to %s-0 on broker %d: "
                   "error %d %s, base offset %d" % (pid, b * PER_BATCH, PER_BATCH, topic, leader,
                                                     ec, msg or "", base))
        if ok:
            acked.append({"base": base, "values": values})
    print("answers by error code: %s" % ", ".join(
        "%d x %s" % (n, "accepted" if ec == 0 else "%d %s" % (ec, RETRIABLE.get(ec, "")))
        for ec, n in sorted(answers.items())))
    with open(acked_file, "w") as f:
        json.dump(acked, f)
    done()


def cmd_verify(bootstrap, topic, acked_file):
    with open(acked_file) as f:
        acked = json.load(f)
    parts, ends = me2e.read_all(bootstrap, topic, False)
    at = {}
    for rec in parts.get(0, []):
        at[rec[0]] = rec[2].decode() if rec[2] is not None else None
    seen = {}
    for v in at.values():
        seen[v] = seen.get(v, 0) + 1
    n = 0
    for a in acked:
        for i, v in enumerate(a["values"]):
            n += 1
            check(at.get(a["base"] + i) == v and seen.get(v) == 1,
                  "acknowledged record %s: stored once at offset %d (found there: %s; copies: %d)"
                  % (v, a["base"] + i, at.get(a["base"] + i), seen.get(v, 0)))
    print("%d acknowledged records checked; %s-0 ends at %d" % (n, topic, ends.get(0, -1)))
    done()


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "write" and len(a) == 5:
        cmd_write(*a)
    if cmd == "verify" and len(a) == 3:
        cmd_verify(*a)
    print(__doc__)
    sys.exit(2)


if __name__ == "__main__":
    main()
