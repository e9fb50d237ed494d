#!/usr/bin/env python3
"""sync-topics.py SUBCOMMAND ... -- the client side of scenario sync-topics of tests/mirror_e2e
(tests/mirror_e2e/scn_sync_topics.sh, docs/testing-mirror.md "Scenario sync-topics"). Clients
venv (kafka-python).

  same SRC DST TOPIC PARTS          exit 0 when TOPIC exists on both clusters with the same
                                    topic id and PARTS partitions on each (Metadata v12);
                                    prints the ids
  absent DST TOPIC...               exit 0 when Metadata of DST answers UNKNOWN_TOPIC_OR_PARTITION
                                    for every TOPIC
  grow BOOTSTRAP TOPIC COUNT        CreatePartitions to COUNT (kafka-python admin), then wait
                                    until every partition has a leader and a full ISR
  produce BOOTSTRAP TOPIC TAG N     N uncompressed records to every partition of TOPIC, values
                                    "TAG <partition> <i>", acks=all; every one acknowledged
  holds DST TOPIC TAG N BAD PARTDIR...
                                    TOPIC on DST holds exactly N records, every value starting
                                    with TAG (kafka-python, read_uncommitted), and no segment
                                    file of the PARTDIRs (every destination replica) contains
                                    the bytes BAD (the other topic's tag) anywhere
  sync-error KM DST MIRROR KIND REGEX
                                    exit 0 when kafka-mirrors --describe --json (through DST)
                                    shows the mirror's KIND sync with errors > 0 and a
                                    lastError matching REGEX (re.search)

Exit 0 pass, 1 fail / not yet (printed), 2 setup error.
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import me2e  # noqa: E402


def topic_of(bootstrap, topic):
    _, tops = me2e.metadata(bootstrap.split(",")[0], [topic])
    return tops.get(topic)


def cmd_same(src, dst, topic, parts):
    s, d = topic_of(src, topic), topic_of(dst, topic)
    if s is None or s["ec"] != 0:
        print("%s not on the source: %s" % (topic, s))
        return 1
    if d is None or d["ec"] != 0:
        print("%s not on the destination (yet): error %s" % (topic, d and d["ec"]))
        return 1
    why = []
    if s["id"] != d["id"]:
        why.append("topic id %s here, %s on the source" % (d["id"].hex(), s["id"].hex()))
    if len(s["parts"]) != int(parts) or len(d["parts"]) != int(parts):
        why.append("%d partitions on the source, %d here, want %s" % (
            len(s["parts"]), len(d["parts"]), parts))
    if why:
        print("%s: %s" % (topic, "; ".join(why)))
        return 1
    print("%s: topic id %s and %s partitions on both clusters" % (topic, d["id"].hex(), parts))
    return 0


def cmd_absent(dst, topics):
    _, tops = me2e.metadata(dst.split(",")[0], topics)
    there = [t for t in topics if tops.get(t, {}).get("ec") != 3]
    if there:
        print("FAIL: on the destination: %s" % {t: tops.get(t) for t in there})
        return 1
    print("not on the destination: %s" % ", ".join(topics))
    return 0


def cmd_grow(bootstrap, topic, count):
    from kafka.admin import KafkaAdminClient, NewPartitions
    count = int(count)
    adm = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        adm.create_partitions({topic: NewPartitions(count)}, timeout_ms=30000)
    finally:
        adm.close()
    deadline = time.time() + 60
    while True:
        t = topic_of(bootstrap, topic)
        if t and t["ec"] == 0 and len(t["parts"]) == count and all(
                p["leader"] >= 0 and len(p["isr"]) == len(p["replicas"]) > 0
                for p in t["parts"].values()):
            print("%s now has %d partitions on %s" % (topic, count, bootstrap))
            return 0
        if time.time() > deadline:
            print("FAIL: %s: not %d partitions with leaders after 60 s: %s" % (topic, count, t))
            return 1
        time.sleep(0.2)  # poll interval of the deadline loop above


def cmd_produce(bootstrap, topic, tag, n):
    from kafka import KafkaProducer
    t = topic_of(bootstrap, topic)
    if not t or t["ec"] != 0:
        print("FAIL: %s unknown on %s" % (topic, bootstrap))
        return 1
    prod = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                         request_timeout_ms=30000)
    try:
        futs = [prod.send(topic, key=b"k%d" % i, value=b"%s %d %d" % (tag.encode(), p, i),
                          partition=p) for p in sorted(t["parts"]) for i in range(int(n))]
        prod.flush(timeout=60)
        for f in futs:
            f.get(timeout=60)
    finally:
        prod.close()
    print("produced %s records tagged '%s' to each of the %d partitions of %s" % (
        n, tag, len(t["parts"]), topic))
    return 0


def cmd_holds(dst, topic, tag, n, bad, partdirs):
    recs, _ = me2e.read_all(dst, topic, False, deadline_s=60)
    vals = [r[2] for p in sorted(recs) for r in recs[p]]
    me2e.check(len(vals) == int(n), "%s on the destination: %d records, want %s" % (
        topic, len(vals), n))
    wrong = [v for v in vals if not (v or b"").startswith(tag.encode() + b" ")]
    me2e.check(not wrong, "%s on the destination: every value starts with '%s' (%d do not%s)" % (
        topic, tag, len(wrong), ", e.g. %r" % wrong[0] if wrong else ""))
    hits = []
    for d in partdirs:
        for name in sorted(os.listdir(d)):
            if name.endswith(".log"):
                with open(os.path.join(d, name), "rb") as f:
                    if bad.encode() in f.read():
                        hits.append(os.path.join(d, name))
    me2e.check(not hits, "no destination replica of %s holds a record tagged '%s' (%d segment "
               "files in %d replicas read%s)" % (
                   topic, bad, sum(1 for d in partdirs for x in os.listdir(d)
                                   if x.endswith(".log")), len(partdirs),
                   "; found in %s" % hits if hits else ""))
    me2e.done()


def cmd_sync_error(km, dst, mirror, kind, rx):
    out = subprocess.run([km, "--bootstrap-server", dst, "--describe", "--mirror", mirror,
                          "--json", "--timeout-ms", "10000"], capture_output=True, timeout=30,
                         check=False)
    try:
        doc = json.loads(out.stdout.decode() or "{}")
    except ValueError as e:
        print("describe: %s" % e)
        return 1
    rows = [r for m in doc.get("mirrors", []) if m.get("mirror") == mirror
            for r in m.get("sync") or [] if r.get("kind") == kind]
    if not rows:
        print("describe: no %s sync status for %s (exit %d): %s" % (
            kind, mirror, out.returncode, out.stderr.decode().strip()))
        return 1
    r = rows[0]
    print("%s %s sync: %d runs, %d errors, last error: %s" % (
        mirror, kind, r["runs"], r["errors"], r["lastError"]))
    return 0 if r["errors"] > 0 and re.search(rx, r["lastError"] or "") else 1


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    cmd, a = sys.argv[1], sys.argv[2:]
    fn = {"same": lambda: cmd_same(*a),
          "absent": lambda: cmd_absent(a[0], a[1:]),
          "grow": lambda: cmd_grow(*a),
          "produce": lambda: cmd_produce(*a),
          "sync-error": lambda: cmd_sync_error(*a),
          "holds": lambda: cmd_holds(a[0], a[1], a[2], a[3], a[4], a[5:])}.get(cmd)
    if fn is None:
        print("unknown subcommand %s" % cmd)
        sys.exit(2)
    sys.exit(fn())


if __name__ == "__main__":
    main()
