#!/usr/bin/env python3
"""crash-stopping.py SUBCOMMAND ... -- the client side of scenario crash-stopping of
tests/mirror_e2e (docs/testing-mirror.md). Runs with the clients venv (kafka-python).

  seed SRC TOPIC...                  on every topic (1 partition): 4 plain records, a committed
                                     transaction (5), an aborted one (3), and one left OPEN (3,
                                     the producer exits without ending it; timeout 10 min)
  preferred BOOTSTRAP TOPIC          the partition's preferred replica (first of its replicas)
  epoch BOOTSTRAP TOPIC              the highest leader epoch the brokers report
  lead BOOTSTRAP TOPIC NODE EPOCH0   wait until every broker reports NODE as the leader above
                                     EPOCH0 (ElectLeaders PREFERRED once NODE is in the ISR)
  moved BOOTSTRAP TOPIC NODE         exit 0 when the brokers that answer agree on a leader other
                                     than NODE
  wait-stopped KM DST TOPIC OFFSET   exit 0 when the partition is STOPPED, the brokers agree on
                                     its leader and the high watermark is >= OFFSET + 2
  mirroring KM DST SRC TOPIC         exit 0 when the partition is MIRRORING (DescribeMirrors)
                                     and its destination log end is the source's
  lme DIR                            "EPOCH LEO" of the log in the partition directory DIR: the
                                     newest batch epoch and the end offset (segment files parsed)
  check-stopped KM DST TOPIC EPOCH OFFSET DIR OPENPID
                                     after the failover: DescribeMirrors shows the partition
                                     STOPPED with LME (EPOCH, OFFSET); the log DIR holds after
                                     OFFSET exactly one ABORT (producer OPENPID) and one
                                     MIRROR_PID_RESET, both above the LME epoch, and nothing else;
                                     no transaction of the whole log is open; read_committed's
                                     LSO = the high watermark = the log end; a write is taken at
                                     the log end (acks=all)
  open-pid DIR                       the producer id of the one open transaction in DIR's log

Exit 0 pass, 1 fail (every failure printed as FAIL: ...), 2 setup error.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import me2e  # noqa: E402
from me2e import check, done  # noqa: E402



def seed(src, topics):
    from kafka import KafkaProducer
    plain = KafkaProducer(bootstrap_servers=src, acks="all")
    for t in topics:
        for i in range(4):
            plain.send(t, partition=0, key=b"plain", value=b"plain %d" % i)
    plain.flush()
    plain.close()
    # One transactional producer writes every topic: committed, aborted, then left open (the
    # process ends without closing it, so the source keeps it open until its timeout).
    p = KafkaProducer(bootstrap_servers=src, transactional_id="cs-open", acks="all",
                      transaction_timeout_ms=600000)
    p.init_transactions()
    for what, n, end in (("committed", 5, p.commit_transaction), ("aborted", 3, p.abort_transaction),
                         ("open", 3, None)):
        p.begin_transaction()
        for t in topics:
            for i in range(n):
                p.send(t, partition=0, key=what.encode(), value=b"%s %d" % (what.encode(), i))
        p.flush()
        if end is not None:
            end()
    print("seeded %d topics: 4 plain, 5 committed, 3 aborted, 3 open records each" % len(topics),
          flush=True)
    os._exit(0)  # no close(): the last transaction stays open


def cmd_lme(pdir):
    bs = me2e.scan_log(pdir)
    if not bs:
        print("no batches in %s" % pdir)
        return 1
    print("%d %d" % (max(b["epoch"] for b in bs), bs[-1]["last"] + 1))
    return 0


def cmd_open_pid(pdir):
    o = me2e.open_txns(me2e.scan_log(pdir))
    if len(o) != 1:
        print("want one open transaction in %s, found %s" % (pdir, o))
        return 1
    print(list(o)[0])
    return 0


def cmd_preferred(bootstrap, topic):
    for addr in bootstrap.split(","):
        try:
            _, tops = me2e.metadata(addr, [topic])
        except OSError:
            continue
        print(tops[topic]["parts"][0]["replicas"][0])
        return 0
    print("no broker answers")
    return 1
    return 0


def views(bootstrap, topic):
    """Each reachable broker's Metadata view of partition 0: {addr: (leader, epoch, isr)}."""
    out = {}
    for addr in bootstrap.split(","):
        try:
            _, tops = me2e.metadata(addr, [topic])
            p = tops[topic]["parts"][0]
            out[addr] = (p["leader"], p["epoch"], tuple(sorted(p["isr"])))
        except Exception:  # noqa: BLE001 -- a broker down or starting: not a view
            pass
    return out


def cmd_epoch(bootstrap, topic):
    """The highest leader epoch any broker reports for partition 0."""
    print(max(v[1] for v in views(bootstrap, topic).values()))
    return 0


def cmd_lead(bootstrap, topic, node, epoch0):
    """Wait until every broker reports NODE as the leader at an epoch above EPOCH0 (a restarted
    broker may believe for a while it still leads at its old epoch); ElectLeaders PREFERRED
    once NODE is in the ISR."""
    from kafka.admin import KafkaAdminClient
    node, epoch0 = int(node), int(epoch0)
    deadline = time.time() + 90
    next_elect = 0.0
    v = {}
    while time.time() < deadline:
        v = views(bootstrap, topic)
        if len(v) == len(bootstrap.split(",")) and all(
                x[0] == node and x[1] > epoch0 for x in v.values()) and len(set(v.values())) == 1:
            x = list(v.values())[0]
            print("node %d leads %s-0 at leader epoch %d (ISR %s)" % (node, topic, x[1], x[2]))
            return 0
        if time.time() >= next_elect and v and all(node in x[2] for x in v.values()) and \
                any(x[0] != node for x in v.values()):
            # again every 3 s: the controller may not see NODE in the ISR yet
            next_elect = time.time() + 3
            adm = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
            try:
                r = adm.elect_leaders(0, {topic: [0]}, timeout_ms=30000,
                                      raise_errors=False)
                print("elect_leaders %s-0: %s" % (topic, r), flush=True)
            except Exception as e:  # noqa: BLE001 -- retried until the deadline
                print("elect_leaders: %s" % e)
            finally:
                adm.close()
        time.sleep(0.2)  # poll interval
    print("FAIL: node %d does not lead %s-0 above epoch %d within 90 s: %s" % (
        node, topic, epoch0, v))
    return 1


def cmd_moved(bootstrap, topic, node):
    """Exit 0 when every broker that answers (at least two) reports a leader other than NODE."""
    v = views(bootstrap, topic)
    print("%s-0 metadata: %s" % (topic, v))
    return 0 if len(v) >= 2 and all(x[0] >= 0 and x[0] != int(node) for x in v.values()) and \
        len({x[0] for x in v.values()}) == 1 else 1


def cmd_wait_stopped(km, dst, topic, offset):
    """Exit 0 when DescribeMirrors shows the partition STOPPED and every broker agrees on its
    leader, whose high watermark is past the failover's two batches."""
    parts = me2e.describe_one(km, dst.split(",")[0], "mcs")
    row = [p for p in parts if p["topic"] == topic] if not isinstance(parts, str) else []
    v = views(dst, topic)
    print("%s-0: %s; metadata %s" % (topic, row or parts, v))
    if len(row) != 1 or row[0]["state"] != "STOPPED" or len(v) != 3 or len(set(v.values())) != 1:
        return 1
    hw = me2e.end_offsets(dst, [topic])[(topic, 0)]
    print("high watermark %d" % hw)
    return 0 if hw >= int(offset) + 2 else 1


def cmd_check_stopped(km, dst, topic, epoch, offset, pdir, open_pid):
    from kafka import KafkaProducer
    epoch, offset, open_pid = int(epoch), int(offset), int(open_pid)
    parts = me2e.describe_one(km, dst.split(",")[0], "mcs")
    row = [p for p in parts if p["topic"] == topic] if not isinstance(parts, str) else []
    if not check(len(row) == 1 and row[0]["state"] == "STOPPED",
                 "%s-0 STOPPED (DescribeMirrors: %s)" % (topic, row or parts)):
        done()
    check((row[0]["lastMirroredEpoch"], row[0]["lastMirroredOffset"]) == (epoch, offset),
          "%s-0 recorded LME (%s, %s), the log's before the stop (%d, %d)" % (
              topic, row[0]["lastMirroredEpoch"], row[0]["lastMirroredOffset"], epoch, offset))
    bs = me2e.scan_log(pdir)
    tail = [b for b in bs if b["base"] >= offset]
    kinds = [(b["control"], b["pid"]) for b in tail]
    want = [(me2e.CONTROL_ABORT, open_pid), (me2e.CONTROL_PID_RESET, -1)]
    check(kinds == want, "%s-0 after offset %d: the ABORT of producer %d, then one "
          "MIRROR_PID_RESET, nothing else (found (control type, producer id): %s)" % (
              topic, offset, open_pid, kinds))
    check(all(b["epoch"] > epoch for b in tail),
          "%s-0: the failover's batches carry leader epochs above the LME epoch %d (%s)" % (
              topic, epoch, [b["epoch"] for b in tail]))
    check(not me2e.open_txns(bs), "%s-0: no transaction open in the log (open: %s)" % (
        topic, me2e.open_txns(bs)))
    end = bs[-1]["last"] + 1 if bs else -1
    hw = me2e.end_offsets(dst, [topic])[(topic, 0)]
    lso = me2e.end_offsets(dst, [topic], committed=True)[(topic, 0)]
    check(lso == hw == end == offset + 2, "%s-0: read_committed LSO %d = high watermark %d = log "
          "end %d = LME offset + 2 (%d)" % (topic, lso, hw, end, offset + 2))
    # Writable: the partition takes a write at its log end (acks=all: the 3 replicas are back).
    pr = KafkaProducer(bootstrap_servers=dst, acks="all", retries=10, request_timeout_ms=20000,
                       enable_idempotence=False)  # a plain write: no producer id to allocate
    try:
        md = pr.send(topic, partition=0, key=b"after", value=b"written after the failover").get(60)
        check(md.offset == end, "%s-0 writable: a record written at offset %d (log end %d)" % (
            topic, md.offset, end))
    except Exception as e:  # noqa: BLE001 -- a refused write is the failure reported
        check(False, "%s-0 writable: %s: %s" % (topic, type(e).__name__, e))
    finally:
        pr.close(timeout=5)
    done()


def cmd_mirroring(km, dst, src, topic):
    """Exit 0 when DescribeMirrors shows the partition MIRRORING and its destination log end
    equals the source's."""
    parts = me2e.describe_one(km, dst.split(",")[0], "mcs")
    row = [p for p in parts if p["topic"] == topic] if not isinstance(parts, str) else []
    s_end = me2e.end_offsets(src, [topic]).get((topic, 0))
    d_end = me2e.end_offsets(dst, [topic]).get((topic, 0))
    ok = len(row) == 1 and row[0]["state"] == "MIRRORING" and s_end == d_end
    print("%s-0: %s, source log end %s, destination %s" % (topic, row or parts, s_end, d_end))
    return 0 if ok else 1


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "seed":
        seed(a[0], a[1:])
    if cmd == "preferred":
        sys.exit(cmd_preferred(*a))
    if cmd == "epoch":
        sys.exit(cmd_epoch(*a))
    if cmd == "moved":
        sys.exit(cmd_moved(*a))
    if cmd == "wait-stopped":
        sys.exit(cmd_wait_stopped(*a))
    if cmd == "lead":
        sys.exit(cmd_lead(*a))
    if cmd == "mirroring":
        sys.exit(cmd_mirroring(*a))
    if cmd == "lme":
        sys.exit(cmd_lme(*a))
    if cmd == "open-pid":
        sys.exit(cmd_open_pid(*a))
    if cmd == "check-stopped":
        cmd_check_stopped(*a)
    print("unknown subcommand %s" % cmd)
    sys.exit(2)


if __name__ == "__main__":
    main()
