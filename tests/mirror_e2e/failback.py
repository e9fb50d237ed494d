#!/usr/bin/env python3
"""failback.py SUBCOMMAND ... -- the client side of scenario failback (tests/mirror_e2e,
docs/testing-mirror.md "Scenario failback").

  gen FIRST COUNT SIZE TAG          COUNT lines "k<i>:<value>" for kcat -K: (i from FIRST): values
                                    of SIZE bytes, words drawn from a fixed random vocabulary
                                    (compressible, not trivially: lz4 keeps about half)
  metrics NODELOG REGEX...          the sum of the Prometheus samples whose line matches REGEX
                                    (one number a REGEX, in order) over every node whose log
                                    NODELOG names a metrics listener ("metrics on http://...")
  batch-bytes ENDS_FILE DIR...      the bytes (12-byte batch header + length) of the record
                                    batches at or after the offset that ENDS_FILE ("topic-part
                                    offset" lines, me2e.py ends) gives for each partition
                                    directory DIR (named <topic>-<part>); one total
  lme KM BOOTSTRAP MIRROR           "topic-part offset" lines: each partition's last mirrored
                                    offset as DescribeMirrors shows it (-1: none recorded)
  epochs BOOTSTRAP TOPIC            "topic-part leader-epoch" lines (Metadata v12)
  wait-writable BOOTSTRAP TOPIC P   exit 0 once a raw Produce of one record to the partition's
                                    leader succeeds (error code 0); polls up to 60 s

Exit 0 pass, 1 fail, 2 setup error.
"""
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import me2e  # noqa: E402


def cmd_gen(first, count, size, tag):
    rnd = random.Random(1279)  # the same vocabulary in every run
    vocab = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 9)))
             for _ in range(2048)]
    rnd = random.Random("%s-%d" % (tag, first))
    out = sys.stdout
    n_words = max(1, size // 6)
    for i in range(first, first + count):
        head = "%s %d " % (tag, i)
        words = " ".join(rnd.choices(vocab, k=n_words))
        out.write("k%d:%s%s\n" % (i, head, (words + " " * size)[:max(0, size - len(head))]))
    out.flush()
    return 0


def cmd_metrics(nodelog_glob, regexes):
    sums = me2e.metric_sums(nodelog_glob, regexes)
    if sums is None:
        print("no metrics listener in %s" % nodelog_glob, file=sys.stderr)
        return 2
    print(" ".join("%d" % s for s in sums))
    return 0


def batch_bytes(partdir, start):
    """Bytes on disk of the partition's batches at or after offset start."""
    return sum(bt["size"] for bt in me2e.scan_log(partdir) if bt["base"] >= start)


def cmd_batch_bytes(ends_file, dirs):
    ends = {}
    with open(ends_file) as f:
        for line in f:
            k, v = line.split()
            ends[k] = int(v)
    total = 0
    for d in dirs:
        key = os.path.basename(d.rstrip("/"))
        if key not in ends:
            print("no start offset for %s in %s" % (key, ends_file), file=sys.stderr)
            return 2
        total += batch_bytes(d, ends[key])
    print(total)
    return 0


def cmd_wait_writable(bootstrap, topic, part):
    deadline = time.time() + 60
    last = None
    while time.time() < deadline:
        try:
            nodes, tops = me2e.metadata(bootstrap.split(",")[0], [topic])
            leader = tops[topic]["parts"][part]["leader"]
            ec, msg = me2e.produce(nodes[leader], topic, part, -1)
            if ec == 0:
                return 0
            last = "error %d: %s" % (ec, msg)
        except Exception as e:  # noqa: BLE001 -- retried until the deadline
            last = str(e)
        time.sleep(0.5)  # poll interval of the deadline loop
    print("%s-%d not writable within 60 s: %s" % (topic, part, last))
    return 1


def cmd_lme(km, bootstrap, mirror):
    parts = me2e.describe_one(km, bootstrap.split(",")[0], mirror)
    if isinstance(parts, str):
        print(parts, file=sys.stderr)
        return 1
    for p in sorted(parts, key=lambda p: (p["topic"], p["partition"])):
        off = p["lastMirroredOffset"]
        print("%s-%d %d" % (p["topic"], p["partition"], -1 if off is None else off))
    return 0


def cmd_epochs(bootstrap, topic):
    _, tops = me2e.metadata(bootstrap.split(",")[0], [topic])
    for p, d in sorted(tops[topic]["parts"].items()):
        print("%s-%d %d" % (topic, p, d["epoch"]))
    return 0


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "gen":
        return cmd_gen(int(a[0]), int(a[1]), int(a[2]), a[3])
    if cmd == "metrics":
        return cmd_metrics(a[0], a[1:])
    if cmd == "batch-bytes":
        return cmd_batch_bytes(a[0], a[1:])
    if cmd == "lme":
        return cmd_lme(*a)
    if cmd == "epochs":
        return cmd_epochs(*a)
    if cmd == "wait-writable":
        return cmd_wait_writable(a[0], a[1], int(a[2]))
    print("unknown subcommand %s" % cmd)
    return 2


if __name__ == "__main__":
    sys.exit(main())
