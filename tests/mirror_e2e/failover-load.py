#!/usr/bin/env python3
"""failover-load.py SUBCOMMAND ... -- the client side of scenario failover-load of
tests/mirror_e2e (docs/testing-mirror.md). Runs with the clients venv; uses me2e.py's helpers.

  writer DST TOPIC OUT STOPFILE   until STOPFILE exists: one raw Produce v9 (acks=-1, one record
                                  "fo-dst-<partition>-<n>") after another to the leader of every
                                  partition of TOPIC; one line per answer to OUT:
                                  "<partition> <error code> <base offset> <value>" (error -1: no
                                  answer, e.g. a connection error)
  check KM DST SRC MIRROR TOPIC WRITER_OUT OPEN_FIRST OPEN_LAST PARTDIRS [--inject I]
                                  the checks after the failover (see check() below); PARTDIRS is
                                  a file of "<partition> <dir>" lines, the partition directories
                                  of every destination replica; OPEN_FIRST..OPEN_LAST the indices
                                  of the Java producer's open transaction (keys key-<i>)

Exit 0 pass, 1 fail (every failure printed as FAIL: ...), 2 setup error.
"""
import os
import sys
import time

import me2e
from me2e import check, done

READ_ONLY_TOPIC = me2e.READ_ONLY_TOPIC
# Retriable refusals while the partition is STOPPING: kbroker's PENDING write mode
# (NOT_ENOUGH_REPLICAS, broker/api/kb_part.c), a leader move (NOT_LEADER_OR_FOLLOWER), an
# acks=-1 write that timed out waiting for the ISR (REQUEST_TIMED_OUT), -1 no answer.
RETRIABLE = {19: "NOT_ENOUGH_REPLICAS", 6: "NOT_LEADER_OR_FOLLOWER", 7: "REQUEST_TIMED_OUT",
             -1: "no answer"}


def cmd_writer(dst, topic, out, stopfile):
    seed = dst.split(",")[0]
    nodes, parts, n = {}, {}, 0
    with open(out, "w") as f:
        while not os.path.exists(stopfile):
            if not parts:
                try:
                    nodes, tops = me2e.metadata(seed, [topic])
                    parts = {p: v["leader"] for p, v in tops[topic]["parts"].items()}
                except (OSError, ValueError, KeyError) as e:
                    print("writer: metadata: %s" % e, flush=True)
                    time.sleep(0.2)  # pacing: retry the metadata
                    continue
            for p in sorted(parts):
                n += 1
                value = ("fo-dst-%d-%d" % (p, n)).encode()
                try:
                    ec, _msg, base = me2e.produce_at(nodes[parts[p]], topic, p, -1, value)
                except (OSError, ValueError, KeyError):
                    ec, base = -1, -1
                f.write("%d %d %d %s\n" % (p, ec, base, value.decode()))
                f.flush()
                if ec in (6, -1):
                    parts = {}  # the leader moved (or is gone): ask again
                    break
            time.sleep(0.02)  # pacing of the continuous writer (not a synchronisation)
    return 0


def cmd_check(km, dst, src, mirror, topic, writer_out, open_first, open_last, partdirs,
              inject=None):
    open_keys = {("key-%d" % i).encode() for i in range(int(open_first), int(open_last) + 1)}
    # 1. Every partition STOPPED with its LME (DescribeMirrors, kafka-mirrors --json).
    desc = me2e.describe_one(km, dst.split(",")[0], mirror)
    if not check(not isinstance(desc, str), "DescribeMirrors lists mirror %s (%s)" % (
            mirror, desc if isinstance(desc, str) else "%d partitions" % len(desc))):
        done()
    lme = {}
    for pd in desc:
        ok = pd["state"] == "STOPPED" and pd["lastMirroredOffset"] >= 0
        check(ok, "%s-%d STOPPED with an LME: state %s, LME (%s, %s)" % (
            pd["topic"], pd["partition"], pd["state"], pd["lastMirroredEpoch"],
            pd["lastMirroredOffset"]))
        lme[pd["partition"]] = pd["lastMirroredOffset"]
    if inject == "lme":  # shows the checks below can fail: an LME one batch too low
        lme = {p: max(0, o - 1) for p, o in lme.items()}
        print("INJECTED: every LME offset taken one lower (the run must fail)")

    # 2. The read_committed consumer makes progress: LSO = high watermark on the destination
    # (the failover aborted the open mirrored transaction); polled, the ISR may still be
    # catching up with the last writes.
    deadline = time.time() + 60
    while True:
        hw = me2e.end_offsets(dst, [topic])
        lso = me2e.end_offsets(dst, [topic], committed=True)
        if lso == hw or time.time() > deadline:
            break
        time.sleep(0.5)  # poll interval of the deadline loop
    check(lso == hw, "destination: last stable offset = high watermark on every partition "
          "(LSO %s, HW %s)" % (sorted(lso.items()), sorted(hw.items())))

    # 3. The segment files of every destination replica: exactly one MIRROR_PID_RESET after the
    # LME offset, below the high watermark (committed); every transaction open at the LME has
    # an ABORT marker between the LME and the reset.
    reset_at = {}
    with open(partdirs) as f:
        dirs = [(int(line.split()[0]), line.split()[1]) for line in f if line.strip()]
    for p, d in dirs:
        bs = me2e.scan_log(d)
        resets = [bt for bt in bs if bt["control"] == me2e.CONTROL_PID_RESET]
        after = [bt["base"] for bt in resets if bt["base"] >= lme[p]]
        check(len(resets) == 1 and len(after) == 1 and after[0] < hw[(topic, p)],
              "%s: one MIRROR_PID_RESET control batch, at or after the LME offset %d and below "
              "the HW %d (reset batches at %s)" % (d, lme[p], hw[(topic, p)],
                                                   [bt["base"] for bt in resets]))
        if not after:
            continue
        reset_at.setdefault(p, after[0])
        check(reset_at[p] == after[0], "%s: the reset at the same offset as on the other "
              "replicas (%d, %d)" % (d, after[0], reset_at[p]))
        opened = me2e.open_txns(bs, lme[p])
        check(len(opened) >= 1, "%s: a transaction was open at the LME %d (the Java producer's "
              "open one was mirrored): producers %s" % (d, lme[p], sorted(opened)))
        for pid, first in sorted(opened.items()):
            aborts = [bt["base"] for bt in bs if bt["control"] == me2e.CONTROL_ABORT and
                      bt["pid"] == pid and lme[p] <= bt["base"] < after[0]]
            check(len(aborts) == 1, "%s: producer %d's transaction open since %d aborted "
                  "between the LME and the reset (ABORT markers at %s)" % (d, pid, first, aborts))
    check(sorted(reset_at) == sorted(lme), "a reset found on every partition (%s of %s)" % (
        sorted(reset_at), sorted(lme)))

    # 4. The destination writer: nothing accepted before STOPPED (every acknowledged record
    # lands after the reset); refused with 147 before the stop and a retriable code while
    # STOPPING, never with 147 once a write was accepted.
    acked, counts = {}, {}
    with open(writer_out) as f:
        seq = [line.split() for line in f if line.strip()]
    for p in sorted(lme):
        mine = [(int(ec), int(base), v) for pp, ec, base, v in seq if int(pp) == p]
        ok = [(base, v) for ec, base, v in mine if ec == 0]
        acked[p] = ok
        c = {}
        for ec, _, _ in mine:
            c[ec] = c.get(ec, 0) + 1
        counts[p] = c
        first_ok = next((i for i, m in enumerate(mine) if m[0] == 0), len(mine))
        last_147 = max((i for i, m in enumerate(mine) if m[0] == READ_ONLY_TOPIC), default=-1)
        print("destination writer, partition %d: %d answers: %s" % (p, len(mine), ", ".join(
            "%d x %s" % (n, "accepted" if ec == 0 else "%d %s" % (
                ec, "READ_ONLY_TOPIC" if ec == READ_ONLY_TOPIC else RETRIABLE.get(ec, "?")))
            for ec, n in sorted(c.items()))))
        check(c.get(READ_ONLY_TOPIC, 0) > 0, "partition %d: writes refused with READ_ONLY_TOPIC "
              "before the stop" % p)
        check(len(ok) > 0, "partition %d: writes accepted after the stop" % p)
        check(last_147 < first_ok, "partition %d: no READ_ONLY_TOPIC after the first accepted "
              "write (answer %d vs %d)" % (p, last_147, first_ok))
        other = sorted(ec for ec in c if ec not in RETRIABLE and ec not in (0, READ_ONLY_TOPIC))
        check(not other, "partition %d: no other refusal (%s)" % (p, other))
        low = [base for base, _ in ok if p not in reset_at or base <= reset_at[p]]
        check(not low, "partition %d: every accepted write lands after the reset at %s and the "
              "LME %d (accepted at or below it: %s)" % (p, reset_at.get(p), lme[p], low[:5]))

    # 5. read_committed on the destination: the mirrored prefix is the source's committed
    # records below the LME, once; nothing of the open transaction; then exactly the
    # destination writer's accepted records.
    try:
        d, _ = me2e.read_all(dst, topic, True)
        s, _ = me2e.read_all(src, topic, True)
        du, _ = me2e.read_all(dst, topic, False)
    except Exception as e:  # noqa: BLE001 -- any client error is a failed check
        check(False, "read_committed read-back failed: %s" % e)
        done()
    for p in sorted(lme):
        dp = [r for r in d[p] if r[0] < lme[p]]
        sp = [r for r in s[p] if r[0] < lme[p]]
        same = dp == sp
        if not same:
            i = next((i for i in range(min(len(dp), len(sp))) if dp[i] != sp[i]),
                     min(len(dp), len(sp)))
            print("  partition %d: first difference at index %d: source %s, destination %s" % (
                p, i, sp[i:i + 1], dp[i:i + 1]))
        check(same, "partition %d: read_committed below the LME %d: the destination returns the "
              "source's %d committed records (destination %d)" % (p, lme[p], len(sp), len(dp)))
        keys = [r[1] for r in dp]
        check(len(keys) == len(set(keys)), "partition %d: every mirrored record once (%d "
              "records, %d keys)" % (p, len(keys), len(set(keys))))
        in_open = [r[0] for r in du[p] if r[1] in open_keys and r[0] < lme[p]]
        check(len(in_open) > 0, "partition %d: the open transaction's records were mirrored "
              "(read_uncommitted, offsets %s)" % (p, in_open[:3]))
        seen = [r[0] for r in d[p] if r[1] in open_keys]
        check(not seen, "partition %d: read_committed returns nothing of the open transaction "
              "(%s)" % (p, seen[:5]))
        tail = sorted((r[0], r[2]) for r in d[p] if r[0] >= lme[p])
        want = sorted((base, v.encode()) for base, v in acked[p])
        check(tail == want, "partition %d: after the LME, read_committed returns exactly the "
              "destination writer's %d acknowledged records (got %d)" % (p, len(want), len(tail)))
    done()


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "writer":
        sys.exit(cmd_writer(*a))
    if cmd == "check":
        inject = None
        if "--inject" in a:
            i = a.index("--inject")
            inject = a[i + 1]
            a = a[:i] + a[i + 2:]
        cmd_check(*a, inject=inject)
    print("unknown subcommand %s" % cmd)
    sys.exit(2)


if __name__ == "__main__":
    main()
