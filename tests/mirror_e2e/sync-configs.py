"""sync-configs.py -- topic configs on the wire for scenario sync-configs (scn_sync_configs.sh).

  alter ADDR TOPIC KEY=VALUE|KEY= ...     IncrementalAlterConfigs: SET, or DELETE for KEY=
  expect ADDR TOPIC COND ...              exit 0 when every COND holds now, else 1 (prints why)
  hold SECS ADDR TOPIC COND ...           every COND holds at every poll (0.5 s) for SECS
  status KAFKA_MIRRORS ADDR MIRROR        the configs sync of MIRROR (kafka-mirrors --describe
                                          --json, its coordinator): enabled, ran, its last
                                          run without a failed topic after any error
  settled KAFKA_MIRRORS ADDR              every partition of every mirror is MIRRORING, PAUSED
                                          or STOPPED (the destination restart is over for the
                                          scenarios after this one)

COND: KEY=VALUE (the topic has the override KEY=VALUE) or KEY=~ (KEY is not an override of
the topic: its value comes from the broker or the default). ADDR: host:port (or a bootstrap
list: the first entry). Read with DescribeConfigs v4 (kmwire.describe_configs)."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import me2e  # noqa: E402
import kmwire  # noqa: E402  (me2e put its directory on the path)

TOPIC_CONFIG = 1  # ConfigSource DYNAMIC_TOPIC_CONFIG


def first(addr):
    return addr.split(",")[0]


def mismatches(addr, topic, conds):
    res = kmwire.describe_configs(first(addr), [topic]).get(topic)
    if res is None:
        return ["%s missing from the DescribeConfigs answer" % topic]
    ec, msg, configs = res
    if ec != 0:
        return ["DescribeConfigs %s: error %d %s" % (topic, ec, msg)]
    bad = []
    for c in conds:
        key, want = c.split("=", 1)
        have = configs.get(key)
        if have is None:
            bad.append("%s: not listed" % key)
            continue
        value, source, _sensitive = have
        if want == "~":
            if source == TOPIC_CONFIG:
                bad.append("%s: an override (%s), want none" % (key, value))
        elif source != TOPIC_CONFIG or value != want:
            bad.append("%s: %s (source %d), want the override %s" % (key, value, source, want))
    return bad


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        sys.exit(2)
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "alter":
        ops = []
        for kv in a[2:]:
            k, v = kv.split("=", 1)
            ops.append((k, 0, v) if v != "" else (k, 1, None))
        ec, msg = me2e.incremental_alter(first(a[0]), a[1], ops)
        print("IncrementalAlterConfigs %s %s: %d %s" % (a[1], " ".join(a[2:]), ec, msg or ""))
        sys.exit(0 if ec == 0 else 1)
    if cmd == "expect":
        bad = mismatches(a[0], a[1], a[2:])
        print("%s on %s: %s" % (a[1], a[0], "; ".join(bad) if bad else "as expected: " +
                                " ".join(a[2:])))
        sys.exit(1 if bad else 0)
    if cmd == "hold":
        secs, polls = float(a[0]), 0
        end = time.monotonic() + secs
        while True:
            bad = mismatches(a[1], a[2], a[3:])
            polls += 1
            if bad:
                print("%s on %s after %d polls: %s" % (a[2], a[1], polls, "; ".join(bad)))
                sys.exit(1)
            if time.monotonic() >= end:
                break
            time.sleep(0.5)  # the poll interval of a condition that must keep holding
        print("%s on %s: held for %.0f s (%d polls): %s" % (a[2], a[1], secs, polls,
                                                           " ".join(a[3:])))
        sys.exit(0)
    if cmd == "status":
        out = subprocess.run([a[0], "--bootstrap-server", a[1], "--describe", "--mirror", a[2],
                              "--json"], capture_output=True, text=True, timeout=60)
        try:
            mirrors = json.loads(out.stdout)["mirrors"]
        except (ValueError, KeyError):
            print("kafka-mirrors --describe --json: %s %s" % (out.stdout, out.stderr))
            sys.exit(1)
        rows = [r for m in mirrors if m["mirror"] == a[2] for r in m.get("sync", [])
                if r["kind"] == "configs"]
        if not rows:
            print("no configs sync status for %s: %s" % (a[2], out.stdout.strip()))
            sys.exit(1)
        r = rows[0]
        # an error may have been transient (a record write right after the restart, before the
        # ISR is back); the last run must then have succeeded after it
        ok = r["enabled"] and r["runs"] > 0 and (
            r["errors"] == 0 or (r["lastSyncTimeMs"] or -1) > (r["lastErrorTimeMs"] or -1))
        print("configs sync of %s: enabled %s, %d runs, %d errors, last error %s at %s, "
              "last run without error at %s" % (a[2], r["enabled"], r["runs"], r["errors"],
                                                r["lastError"], r["lastErrorTimeMs"],
                                                r["lastSyncTimeMs"]))
        sys.exit(0 if ok else 1)
    if cmd == "settled":
        out = subprocess.run([a[0], "--bootstrap-server", a[1], "--describe", "--json"],
                             capture_output=True, text=True, timeout=60)
        try:
            mirrors = json.loads(out.stdout)["mirrors"]
        except (ValueError, KeyError):
            print("kafka-mirrors --describe --json: %s %s" % (out.stdout, out.stderr))
            sys.exit(1)
        parts = [(m["mirror"], p["topic"], p["partition"], p["state"]) for m in mirrors
                 for p in m.get("partitions", [])]
        bad = [p for p in parts if p[3] not in ("MIRRORING", "PAUSED", "STOPPED")]
        print("%d mirror partitions in %d mirrors%s" % (
            len(parts), len(mirrors), ", not settled: %s" % bad[:5] if bad else ", all settled"))
        sys.exit(1 if bad or not parts else 0)
    print("unknown subcommand %s" % cmd)
    sys.exit(2)


if __name__ == "__main__":
    main()
