#!/usr/bin/env python3
"""source_faults.py SUBCOMMAND ... -- the client side of scenario source-faults of
tests/mirror_e2e (docs/testing-mirror.md "Scenario source-faults"). Clients venv.

  create BOOTSTRAP RF TOPIC=L0,L1[;...] ...   create topics with one partition per leader
                                           list entry, replicas assigned so that partition i
                                           is led by broker Li (the others follow in order);
                                           waits for leaders and full ISRs
  produce-loop BOOTSTRAP STOPFILE TOPIC PARTS   write small keyed records to every partition
                                           (about 40 a second in all) until STOPFILE exists;
                                           prints "TOPIC: N acknowledged, E failed"
  delete BOOTSTRAP TOPIC...                DeleteTopics, then wait until Metadata answers
                                           UNKNOWN_TOPIC_OR_PARTITION for each
  topic-id BOOTSTRAP TOPIC                 the topic id (hex), from Metadata
  wait-up BOOTSTRAP [SECONDS]              exit 0 once Metadata answers with a broker list
  expect KM DST MIRROR SPEC...             exit 0 when DescribeMirrors (kafka-mirrors --json,
                                           through DST, gathered from every broker) shows
                                           every SPEC; prints the rows and why not:
                                             T-P=STATE          the state only
                                             T-P=STATE!         and no error message
                                             T-P=STATE~REGEX    and an error message matching
                                                                REGEX (re.search) with, in
                                                                MIRRORING, a retry count > 0,
                                                                in FAILED, "not retryable" (-1)
  grew BOOTSTRAP TOPIC BEFORE_FILE         exit 0 when every partition's log end is above the
                                           one in BEFORE_FILE (me2e.py ends output)

Exit 0 pass, 1 not (yet), 2 setup error.
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import me2e  # noqa: E402


def cmd_create(bootstrap, rf, specs):
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError
    rf = int(rf)
    want = {}
    new = []
    for spec in specs:
        name, leaders = spec.split("=")
        leaders = [int(x) for x in leaders.split(",")]
        nodes = sorted(set(leaders) | set(range(1, rf + 1)))
        assign = {}
        for p, lead in enumerate(leaders):
            others = [n for n in nodes if n != lead]
            assign[p] = [lead] + others[:rf - 1]
        want[name] = (len(leaders), leaders)
        new.append(NewTopic(name, num_partitions=-1, replication_factor=-1,
                            replica_assignments=assign))
    adm = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        adm.create_topics(new, timeout_ms=30000)
    except TopicAlreadyExistsError:
        pass
    finally:
        adm.close()
    deadline = time.time() + 60
    while True:
        _, tops = me2e.metadata(bootstrap.split(",")[0], list(want))
        ok = all(t in tops and tops[t]["ec"] == 0 and len(tops[t]["parts"]) == n and
                 all(tops[t]["parts"][p]["leader"] == leaders[p] and
                     len(tops[t]["parts"][p]["isr"]) == rf for p in range(n))
                 for t, (n, leaders) in want.items())
        if ok:
            print("created %s (RF %d; leaders %s)" % (
                ", ".join(sorted(want)), rf, {t: v[1] for t, v in want.items()}))
            return 0
        if time.time() > deadline:
            print("FAIL: topics without the assigned leaders or full ISR after 60 s: %s" % tops)
            return 1
        time.sleep(0.2)  # poll interval of the deadline loop above


def cmd_produce_loop(bootstrap, stopfile, topic, parts):
    from kafka import KafkaProducer
    parts = int(parts)
    prod = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20, retries=3,
                         request_timeout_ms=5000, max_block_ms=5000, compression_type="lz4")
    counts = {"ok": 0, "err": 0}
    last_err = [None]

    def ok(_md):
        counts["ok"] += 1

    def err(e):
        counts["err"] += 1
        last_err[0] = e

    i = 0
    while not os.path.exists(stopfile):
        for p in range(parts):
            try:
                prod.send(topic, key=b"k%d" % i, value=b"%s %d record %d" % (
                    topic.encode(), p, i), partition=p).add_callback(ok).add_errback(err)
            except Exception as e:  # noqa: BLE001 -- a send refused while a broker is away
                err(e)
        i += 1
        time.sleep(0.05)  # the write rate (not a synchronisation)
    try:
        prod.flush(timeout=30)
    except Exception as e:  # noqa: BLE001
        last_err[0] = e
    prod.close(timeout=10)
    print("%s: %d acknowledged, %d failed%s" % (topic, counts["ok"], counts["err"],
                                                 " (last: %s)" % last_err[0] if last_err[0] else ""))
    return 0


def cmd_delete(bootstrap, topics):
    from kafka.admin import KafkaAdminClient
    adm = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        adm.delete_topics(topics, timeout_ms=30000)
    finally:
        adm.close()
    deadline = time.time() + 60
    while True:
        _, tops = me2e.metadata(bootstrap.split(",")[0], topics)
        if all(tops.get(t, {}).get("ec") == 3 for t in topics):
            print("deleted %s" % ", ".join(topics))
            return 0
        if time.time() > deadline:
            print("FAIL: still listed after 60 s: %s" % tops)
            return 1
        time.sleep(0.2)  # poll interval of the deadline loop above


def cmd_topic_id(bootstrap, topic):
    _, tops = me2e.metadata(bootstrap.split(",")[0], [topic])
    if tops.get(topic, {}).get("ec") != 0:
        print("unknown")
        return 1
    print(tops[topic]["id"].hex())
    return 0


def cmd_wait_up(bootstrap, secs="30"):
    deadline = time.time() + float(secs)
    while True:
        try:
            nodes, _ = me2e.metadata(bootstrap.split(",")[0])
            if nodes:
                print("%s answers: brokers %s" % (bootstrap, sorted(nodes)))
                return 0
        except Exception as e:  # noqa: BLE001 -- not listening yet
            why = e
        else:
            why = "no brokers listed"
        if time.time() > deadline:
            print("FAIL: %s does not answer Metadata: %s" % (bootstrap, why))
            return 1
        time.sleep(0.2)  # poll interval of the deadline loop above


def rows(km, dst, mirror):
    try:
        out = subprocess.run([km, "--bootstrap-server", dst, "--describe", "--mirror", mirror,
                              "--json", "--timeout-ms", "10000"], capture_output=True,
                             timeout=30, check=False)
        doc = json.loads(out.stdout.decode() or "{}")
    except (subprocess.TimeoutExpired, ValueError) as e:
        return "describe: %s" % e
    ms = [m for m in doc.get("mirrors", []) if m.get("mirror") == mirror]
    if len(ms) != 1:
        return "describe: mirror %s not listed (exit %d): %s" % (
            mirror, out.returncode, out.stderr.decode().strip())
    return {"%s-%d" % (p["topic"], p["partition"]): p for p in ms[0]["partitions"] or []}


def cmd_expect(km, dst, mirror, specs):
    got = rows(km, dst.split(",")[0], mirror)
    if isinstance(got, str):
        print(got)
        return 1
    bad = []
    for spec in specs:
        m = re.match(r"^(.+?)=([A-Z_]+)(!|~(.*))?$", spec)
        if not m:
            print("bad spec %s" % spec)
            return 2
        tp, state, how, rx = m.group(1), m.group(2), m.group(3), m.group(4)
        p = got.get(tp)
        if p is None:
            bad.append("%s: not listed" % tp)
            continue
        msg = p.get("errorMessage") or ""
        why = []
        if p["state"] != state:
            why.append("state %s" % p["state"])
        if how == "!" and msg:
            why.append("an error message")
        if how and how.startswith("~"):
            if not re.search(rx, msg):
                why.append("message does not match /%s/" % rx)
            if state == "MIRRORING" and not p["retryAttempt"] > 0:
                why.append("retry count %d" % p["retryAttempt"])
            if state == "FAILED" and p["retryAttempt"] != -1:
                why.append("retry %d, want -1 (not retryable)" % p["retryAttempt"])
        line = "%s: %s retry %d lag %s dest %s: %s" % (tp, p["state"], p["retryAttempt"],
                                                       p["lag"], p["destinationOffset"], msg)
        if why:
            bad.append("%s (want %s%s: %s)" % (line, state, how or "", ", ".join(why)))
        else:
            print("ok   " + line)
    for b in bad:
        print("not: " + b)
    return 1 if bad else 0


def cmd_grew(bootstrap, topic, before_file):
    before = {}
    with open(before_file) as f:
        for line in f:
            k, v = line.split()
            before[k] = int(v)
    now = {"%s-%d" % tp: o for tp, o in me2e.end_offsets(bootstrap, [topic]).items()}
    slow = [(k, before.get(k), o) for k, o in sorted(now.items())
            if before.get(k) is None or o <= before[k]]
    print("%s log ends %s (before %s)" % (topic, sorted(now.items()), sorted(before.items())))
    return 1 if slow or not now else 0


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    cmd, a = sys.argv[1], sys.argv[2:]
    fn = {"create": lambda: cmd_create(a[0], a[1], a[2:]),
          "produce-loop": lambda: cmd_produce_loop(*a),
          "delete": lambda: cmd_delete(a[0], a[1:]),
          "topic-id": lambda: cmd_topic_id(*a),
          "wait-up": lambda: cmd_wait_up(*a),
          "expect": lambda: cmd_expect(a[0], a[1], a[2], a[3:]),
          "grew": lambda: cmd_grew(*a)}.get(cmd)
    if fn is None:
        print("unknown subcommand %s" % cmd)
        sys.exit(2)
    sys.exit(fn())


if __name__ == "__main__":
    main()
