"""mirror_e2e.py KBROKER KMIRROR_SO KAFKA_MIRRORS WORKDIR -- the partition state machine for
real: a source kbroker and a destination kbroker with kmirror.so, kafka-python clients, the
kafka-mirrors CLI.

  1. topics on the source with data and a transaction left open; the mirror is created and the
     topics started; the destination catches up with the same offsets and bytes and refuses
     client writes (READ_ONLY_TOPIC);
  2. for three STOPPING crash points in turn (KMIRROR_TEST_CRASH_POINT, test only): the
     destination restarts armed, the topic is stopped, the broker dies at the point, restarts
     unarmed, and the partition ends writable with exactly one ABORT marker and one
     MIRROR_PID_RESET after the mirrored offsets and no transaction left open;
  3. a plain failover of the remaining topic, then new writes on the destination.
"""
import atexit
import os
import select
import signal
import subprocess
import sys
import threading
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

KB, SO, KMC, W = sys.argv[1:5]
PROCS = {}


def kill_all():
    for p in PROCS.values():
        if p.poll() is None:
            p.kill()
            p.wait()


atexit.register(kill_all)
CRASH_POINTS = ["stopping.lme_recorded", "stopping.txns_aborted", "stopping.pid_reset"]


def fail(msg):
    print("FAIL: " + msg, flush=True)
    for name in PROCS:
        log = os.path.join(W, name + ".log")
        if os.path.exists(log):
            print("--- " + name, flush=True)
            with open(log, errors="replace") as f:
                print("".join(f.readlines()[-40:]), flush=True)
    sys.exit(1)


def wait_for(what, cond, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.2)
    fail("timed out waiting for " + what)


def start(name, props, env_extra=None):
    path = os.path.join(W, name + ".properties")
    with open(path, "w") as f:
        f.write("node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs=%s\n"
                "num.partitions=1\nnum.network.threads=1\nnum.io.threads=2\n%s\n"
                % (os.path.join(W, name), props))
    env = dict(os.environ)
    env.pop("KMIRROR_TEST_CRASH_POINT", None)
    env.update(env_extra or {})
    log = open(os.path.join(W, name + ".log"), "a")
    p = subprocess.Popen([KB, "--config", path], stdout=subprocess.PIPE, stderr=log, env=env)
    r, _, _ = select.select([p.stdout], [], [], 60)
    line = p.stdout.readline().decode() if r else ""
    if "PLAINTEXT://" not in line:
        fail(name + " did not start")
    threading.Thread(target=lambda: p.stdout.read(), daemon=True).start()
    PORTS[name] = int(line.split("PLAINTEXT://127.0.0.1:")[1].split()[0].strip(",;)"))
    PROCS[name] = p
    return "127.0.0.1:%d" % PORTS[name]


def stop(name):
    p = PROCS[name]
    p.send_signal(signal.SIGTERM)
    if p.wait(timeout=30) != 0:
        fail("%s exited with %s on SIGTERM" % (name, p.returncode))


def kmc(*args):
    r = subprocess.run([KMC, "--bootstrap-server", DST] + list(args), capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        fail("kafka-mirrors %s: exit %d\n%s%s" % (" ".join(args), r.returncode, r.stdout,
                                                   r.stderr))
    return r.stdout


def mirror_known():
    # After a restart the plugin learns the mirror from the metadata a moment after the
    # broker listens.
    r = subprocess.run([KMC, "--bootstrap-server", DST, "--list"], capture_output=True,
                       text=True, timeout=60)
    return r.returncode == 0 and "m1" in r.stdout


def end_offsets(bs, topic, parts):
    c = KafkaConsumer(bootstrap_servers=bs)
    try:
        tps = [TopicPartition(topic, p) for p in range(parts)]
        return {tp.partition: off for tp, off in c.end_offsets(tps).items()}
    finally:
        c.close()


def records(bs, topic, part, isolation="read_uncommitted"):
    # Everything up to the partition's end offset (the consumer position reaches it even when
    # the last batches are control batches), or what arrived within 15 s.
    end = end_offsets(bs, topic, part + 1)[part]
    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, isolation_level=isolation)
    try:
        tp = TopicPartition(topic, part)
        c.assign([tp])
        c.seek_to_beginning(tp)
        out = []
        deadline = time.time() + 15
        while c.position(tp) < end and time.time() < deadline:
            for msgs in c.poll(timeout_ms=200).values():
                out += [(m.offset, m.key, m.value) for m in msgs]
        return out, c.position(tp)
    finally:
        c.close()


def produce(bs, topic, part, n, prefix):
    p = KafkaProducer(bootstrap_servers=bs, acks="all", retries=0)
    try:
        futs = [p.send(topic, partition=part, key=b"%s%d" % (prefix, i), value=b"v" * (i % 50))
                for i in range(n)]
        p.flush()
        return [f.get(timeout=30) for f in futs]
    finally:
        p.close()


def open_txn(bs, topic):
    # A producer that leaves its transaction open: a child process that exits without ending it.
    code = ("import os,sys\nfrom kafka import KafkaProducer\n"
            "p=KafkaProducer(bootstrap_servers=%r,transactional_id=%r,acks='all')\n"
            "p.init_transactions();p.begin_transaction()\n"
            "[p.send(%r,partition=0,key=b'tx',value=b'open') for _ in range(3)]\n"
            "p.flush();os._exit(0)\n" % (bs, "tx-" + topic, topic))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def writable(bs, topic):
    try:
        produce(bs, topic, 0, 1, b"probe")
        return True
    except Exception:
        return False


PORTS = {}
DST_PROPS = ("cluster.id=kmMpartE2eDestin000001\nplugin.paths=%s\nmirror.enable=true\n"
             "mirror.state.topic.num.partitions=3\n" % SO)
SRC = start("src", "cluster.id=kmMpartE2eSource000001")
DST = start("dst", DST_PROPS)

topics = {"orders": 2}
for i in range(len(CRASH_POINTS)):
    topics["crash%d" % i] = 1
adm = KafkaAdminClient(bootstrap_servers=SRC)
adm.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
adm.close()
for t, n in topics.items():
    for p in range(n):
        produce(SRC, t, p, 40 + 10 * p, b"k")
    open_txn(SRC, t)
src_end = {t: end_offsets(SRC, t, n) for t, n in topics.items()}

with open(os.path.join(W, "m1.properties"), "w") as f:
    f.write("bootstrap.servers=%s\n" % SRC)
kmc("--create", "--mirror", "m1", "--mirror-config", os.path.join(W, "m1.properties"))
kmc("--start", "--mirror", "m1", "--topic", "orders|crash[0-9]+")
for t, n in topics.items():
    wait_for("%s mirrored" % t,
             lambda t=t, n=n: end_offsets(DST, t, n) == src_end[t])
# Same offsets, keys and values (the open transaction's records included).
for t, n in topics.items():
    for p in range(n):
        if records(DST, t, p)[0] != records(SRC, t, p)[0]:
            fail("%s-%d differs between source and destination" % (t, p))
if writable(DST, "orders"):
    fail("a mirror topic accepted a client write while MIRRORING")
try:
    produce(DST, "orders", 0, 1, b"x")
    fail("no error for a write to a mirror topic")
except Exception as e:
    if "ReadOnlyTopic" not in type(e).__name__ and "READ_ONLY" not in str(e).upper():
        print("note: write refused with %s: %s" % (type(e).__name__, e), flush=True)

# Pause: the destination stops following; resume: it catches up from its log end.
kmc("--pause", "--mirror", "m1", "--topic", "orders")
wait_for("orders paused", lambda: "PAUSED" in kmc("--describe", "--mirror", "m1", "--topic",
                                                  "orders"), 30)
before = end_offsets(DST, "orders", 2)
produce(SRC, "orders", 1, 7, b"p")
src_end["orders"] = end_offsets(SRC, "orders", 2)
time.sleep(1)
if end_offsets(DST, "orders", 2) != before:
    fail("orders moved while paused")
kmc("--resume", "--mirror", "m1", "--topic", "orders")
wait_for("orders resumed and caught up", lambda: end_offsets(DST, "orders", 2) == src_end["orders"])
if records(DST, "orders", 1)[0] != records(SRC, "orders", 1)[0]:
    fail("orders-1 differs after pause and resume")


def check_stopped(t):
    # Exactly one ABORT marker (the open transaction) and one MIRROR_PID_RESET after the
    # mirrored offsets; nothing open: read_committed reaches the end and skips the aborted ones.
    end = end_offsets(DST, t, 1)[0]
    if end != src_end[t][0] + 2:
        fail("%s-0 ends at %d after the failover, want %d (mirrored %d + ABORT + reset)"
             % (t, end, src_end[t][0] + 2, src_end[t][0]))
    recs, pos = records(DST, t, 0, "read_committed")
    if pos != end:
        fail("%s-0: read_committed stops at %d, the end is %d (a transaction left open)"
             % (t, pos, end))
    if any(k == b"tx" for _, k, _ in recs) or len(recs) != src_end[t][0] - 3:
        fail("%s-0: read_committed sees %d records, want %d without the open transaction"
             % (t, len(recs), src_end[t][0] - 3))


for i, point in enumerate(CRASH_POINTS):
    t = "crash%d" % i
    stop("dst")
    DST = start("dst", DST_PROPS, {"KMIRROR_TEST_CRASH_POINT": point})
    wait_for("the mirror after a restart", mirror_known, 30)
    # The broker may die before it answers: the CLI's exit status does not matter here.
    subprocess.run([KMC, "--bootstrap-server", DST, "--stop", "--mirror", "m1", "--topic", t],
                   capture_output=True, timeout=60)
    try:
        rc = PROCS["dst"].wait(timeout=60)
    except subprocess.TimeoutExpired:
        fail("the destination did not crash at %s" % point)
    if rc == 0:
        fail("the destination exited normally instead of crashing at %s" % point)
    with open(os.path.join(W, "dst.log"), errors="replace") as f:
        if "test crash point %s" % point not in f.read():
            fail("no crash at %s in the log" % point)
    DST = start("dst", DST_PROPS)
    wait_for("%s writable after the crash at %s" % (t, point),
             lambda t=t: end_offsets(DST, t, 1)[0] >= src_end[t][0] + 2, 60)
    check_stopped(t)
    wait_for("%s accepts writes" % t, lambda t=t: writable(DST, t), 30)
    print("crash at %s: resumed to STOPPED" % point, flush=True)

# The disaster case: the source is gone; the failover of orders completes all the same, then
# new writes there.
PROCS["src"].kill()
PROCS["src"].wait()
kmc("--stop", "--mirror", "m1", "--topic", "orders")
wait_for("orders writable", lambda: writable(DST, "orders"), 30)
end = end_offsets(DST, "orders", 2)
# partition 0: ABORT + reset + the probe; partition 1 (no transaction): the reset
if end[0] != src_end["orders"][0] + 3 or end[1] != src_end["orders"][1] + 1:
    fail("orders ends at %s after the failover (and one probe on 0), source %s"
         % (end, src_end["orders"]))
md = produce(DST, "orders", 1, 5, b"new")
if md[0].offset != end[1]:
    fail("the first new write on orders-1 got offset %d, want %d" % (md[0].offset, end[1]))
with open(os.path.join(W, "dst.log"), errors="replace") as f:
    log = f.read()
if "FAILED" in log and "-> FAILED" in log:
    fail("a partition went FAILED")
stop("dst")
print("mirror e2e: OK", flush=True)
