#!/usr/bin/env python3
"""sync-coordinator.py SUBCOMMAND ... -- the client side of scenario sync-coordinator of
tests/mirror_e2e (docs/testing-mirror.md). Runs with the clients venv; wire framing from me2e.py /
kmwire.py, the coordinator from me2e.py.

  coordinator DST MIRROR            "node addr": the destination broker that is MIRROR's coordinator,
                                    the leader of the __mirror_state partition of the mirror name
                                    (toPositive(murmur2(name)) % partitions, docs/plugin.md
                                    "Mirror-level records"); exit 1 when it has no live leader
  alter BOOTSTRAP TOPIC KEY=VALUE|-KEY ...
                                    IncrementalAlterConfigs on the topic: SET KEY=VALUE, DELETE -KEY
  configs-are ADDR TOPIC KEY=VALUE|-KEY ...
                                    DescribeConfigs (kmwire, v4) of the topic at ADDR: each KEY=VALUE is a
                                    topic override (DYNAMIC_TOPIC_CONFIG) with that value, each -KEY
                                    is not a topic override; prints the keys' values and sources;
                                    exit 1 when not (yet)
  sync-status KM ADDR MIRROR MIN_RUNS
                                    kafka-mirrors --describe --json through ADDR: MIRROR's "sync"
                                    lists topics, configs, groups, acls, configs enabled with at
                                    least MIN_RUNS runs; prints the configs row; exit 1 when not

Exit 0 ok, 1 not (yet), 2 usage.
"""
import json
import subprocess
import sys

import me2e  # first: it puts tests/mirror_admin (kmwire) on the path
import kmwire  # noqa: E402

DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs ConfigSource


def cmd_coordinator(dst, mirror):
    leader, addr = me2e.mirror_coordinator(dst, mirror)
    if leader is None:
        print(addr)
        return 1
    print("%d %s" % (leader, addr))
    return 0


def parse_ops(args):
    ops = []
    for a in args:
        if a.startswith("-"):
            ops.append((a[1:], 1, None))
        else:
            k, v = a.split("=", 1)
            ops.append((k, 0, v))
    return ops


def cmd_alter(bootstrap, topic, *args):
    ec, msg = me2e.incremental_alter(bootstrap.split(",")[0], topic, parse_ops(args))
    if ec != 0:
        print("IncrementalAlterConfigs %s: error %d %s" % (topic, ec, msg))
        return 1
    return 0


def cmd_configs_are(addr, topic, *args):
    ops = parse_ops(args)
    ec, msg, cfgs = kmwire.describe_configs(addr, [topic]).get(topic, (-1, "no result", {}))
    if ec != 0:
        print("DescribeConfigs %s: error %d %s" % (topic, ec, msg))
        return 1
    ok = True
    for k, op, v in ops:
        got = cfgs.get(k)
        print("%s=%s (source %s)" % (k, got[0] if got else None, got[1] if got else None))
        if op == 0:
            ok = ok and got is not None and got[1] == DYNAMIC_TOPIC_CONFIG and got[0] == v
        else:
            ok = ok and (got is None or got[1] != DYNAMIC_TOPIC_CONFIG)
    return 0 if ok else 1


def cmd_sync_status(km, addr, mirror, min_runs):
    out = subprocess.run([km, "--bootstrap-server", addr, "--describe", "--mirror", mirror, "--json"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        print("kafka-mirrors --describe: exit %d: %s %s" % (out.returncode, out.stdout, out.stderr))
        return 1
    doc = json.loads(out.stdout)
    m = [x for x in doc["mirrors"] if x["mirror"] == mirror]
    if not m:
        print("%s not in the answer: %s" % (mirror, out.stdout))
        return 1
    rows = {r["kind"]: r for r in m[0].get("sync", [])}
    print("sync: %s" % json.dumps(m[0].get("sync")))
    if sorted(rows) != ["acls", "configs", "groups", "topics"]:
        print("sync kinds %s, want acls configs groups topics" % sorted(rows))
        return 1
    c = rows["configs"]
    if not c["enabled"] or c["runs"] < int(min_runs) or c["lastSyncTimeMs"] is None:
        print("configs: enabled %s, %d runs (want >= %s), last sync %s" % (
            c["enabled"], c["runs"], min_runs, c["lastSyncTimeMs"]))
        return 1
    return 0


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    cmd, a = sys.argv[1], sys.argv[2:]
    fns = {"coordinator": cmd_coordinator, "alter": cmd_alter, "configs-are": cmd_configs_are,
           "sync-status": cmd_sync_status}
    if cmd not in fns:
        print("unknown subcommand %s" % cmd)
        return 2
    return fns[cmd](*a)


if __name__ == "__main__":
    sys.exit(main())
