"""failback_e2e.py KBROKER KMIRROR_SO KAFKA_MIRRORS KC_REPLICACMP WORKDIR -- failback with the
LME lookup for real (docs/plugin.md "Failback"): two kbroker clusters A and B, both with
kmirror.so, kafka-python clients, the kafka-mirrors CLI.

  1. history written on A; mirror m1 on B (source A) catches up;
  2. failover on B (--stop --wait) and new writes on B (the delta);
  3. more writes on A that B never mirrored (A's tail, inside the LME epoch);
  4. while B's m1 still mirrors the topic, a mirror on A (source B) is refused by the loop
     check: the partition goes FAILED with "stop it there first" and keeps its data;
  5. a second topic, stopped on B, is started on A: A asks B for the LME, drops its tail,
     copies only B's delta; both logs end identical, batch by batch (kc_replicacmp:
     base offset, epoch, producer, CRC, bytes), and the bytes fetched -- as counted by A's
     mirror client (kmirror_fetch_received_bytes_total: the Fetch responses as received; and
     kmirror_fetch_bytes_total, appended) and by B (kbroker_network_sent_bytes_total) --
     stay within 1.05 x the delta plus the stated protocol overhead.
"""
import atexit
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.request

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

# me2e.scan_log: the record batches of a partition directory (tests/mirror_e2e)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mirror_e2e"))
import me2e  # noqa: E402

KB, SO, KMC, CMP, W = sys.argv[1:6]
PROCS = {}
PORTS = {}
MPORTS = {}
# Protocol overhead allowed on top of 1.05 x the delta: Fetch request/response framing and
# the empty long polls while the copy runs (a few hundred bytes each), the DescribeMirrors
# lookup, Metadata, ApiVersions and the divergence round trip. Stated, not measured.
OVERHEAD = 64 * 1024


def kill_all():
    for p in PROCS.values():
        if p.poll() is None:
            p.kill()
            p.wait()


atexit.register(kill_all)


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


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(name, cluster_id):
    path = os.path.join(W, name + ".properties")
    MPORTS[name] = free_port()
    with open(path, "w") as f:
        f.write("node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs=%s\n"
                "num.partitions=1\nnum.network.threads=1\nnum.io.threads=2\n"
                "cluster.id=%s\nplugin.paths=%s\nmirror.enable=true\n"
                "mirror.state.topic.num.partitions=3\n"
                "metrics.listener=http://127.0.0.1:%d\n"
                % (os.path.join(W, name), cluster_id, SO, MPORTS[name]))
    log = open(os.path.join(W, name + ".log"), "a")
    p = subprocess.Popen([KB, "--config", path], stdout=subprocess.PIPE, stderr=log)
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


def kmc(bs, *args, ok=True):
    r = subprocess.run([KMC, "--bootstrap-server", bs] + list(args), capture_output=True,
                       text=True, timeout=90)
    if ok and r.returncode != 0:
        fail("kafka-mirrors %s: exit %d\n%s%s" % (" ".join(args), r.returncode, r.stdout,
                                                   r.stderr))
    return r.stdout + r.stderr


def metric(name, pattern):
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % MPORTS[name],
                                  timeout=5).read().decode()
    total = 0.0
    for line in body.splitlines():
        if re.match(pattern, line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def end_offset(bs, topic, part=0):
    c = KafkaConsumer(bootstrap_servers=bs)
    try:
        tp = TopicPartition(topic, part)
        return c.end_offsets([tp])[tp]
    finally:
        c.close()


def produce(bs, topic, n, prefix, size=1000):
    p = KafkaProducer(bootstrap_servers=bs, acks="all", linger_ms=5, batch_size=64 * 1024)
    try:
        futs = [p.send(topic, partition=0, key=b"%s%d" % (prefix, i),
                       value=(prefix * size)[:size]) for i in range(n)]
        p.flush()
        return [f.get(timeout=30) for f in futs]
    finally:
        p.close()


def writable(bs, topic):
    try:
        produce(bs, topic, 1, b"probe", 10)
        return True
    except Exception:
        return False


def describe(bs, mirror, topic):
    return kmc(bs, "--describe", "--mirror", mirror, "--topic", topic, ok=False)


A = start("a", "kmFailbackClusterA0001")
B = start("b", "kmFailbackClusterB0001")
TOPICS = ["loop", "orders"]
adm = KafkaAdminClient(bootstrap_servers=A)
# orders opts in to the all-replicas truncation wait (a kbroker topic key the plugin reads).
adm.create_topics([NewTopic(t, 1, 1, topic_configs={"mirror.support.unclean.leader.election":
                                                    "true"} if t == "orders" else {})
                   for t in TOPICS])
adm.close()

# 1. shared history, mirrored to B
for t in TOPICS:
    produce(A, t, 3000, b"h")
hist = {t: end_offset(A, t) for t in TOPICS}
with open(os.path.join(W, "m1.properties"), "w") as f:
    f.write("bootstrap.servers=%s\n" % A)
kmc(B, "--create", "--mirror", "m1", "--mirror-config", os.path.join(W, "m1.properties"))
kmc(B, "--start", "--mirror", "m1", "--topic", "loop|orders")
for t in TOPICS:
    wait_for("%s mirrored to B" % t, lambda t=t: end_offset(B, t) == hist[t])

# 2. failover of orders on B, the delta written there
kmc(B, "--stop", "--mirror", "m1", "--topic", "orders", "--wait")
wait_for("orders writable on B", lambda: writable(B, "orders"), 30)
produce(B, "orders", 1000, b"d")
b_end = end_offset(B, "orders")

# 3. A's tail that B never mirrored (same leader epoch as the mirrored history)
produce(A, "orders", 300, b"t")
produce(A, "loop", 10, b"t")
a_tail_end = end_offset(A, "orders")
print("history %d, B ends at %d, A ends at %d" % (hist["orders"], b_end, a_tail_end), flush=True)

# 4. the loop: B's m1 still mirrors "loop" from A
with open(os.path.join(W, "m2.properties"), "w") as f:
    f.write("bootstrap.servers=%s\n" % B)
kmc(A, "--create", "--mirror", "m2", "--mirror-config", os.path.join(W, "m2.properties"))
loop_end = end_offset(A, "loop")
kmc(A, "--start", "--mirror", "m2", "--topic", "loop")
wait_for("loop FAILED on A (still mirrored by B)",
         lambda: "FAILED" in describe(A, "m2", "loop") and
         "stop it there first" in describe(A, "m2", "loop"), 30)
if end_offset(A, "loop") != loop_end:
    fail("the loop check truncated loop on A: %d -> %d" % (loop_end, end_offset(A, "loop")))

# 5. failback of orders: only B's delta crosses
b_sent0 = metric("b", r"^kbroker_network_sent_bytes_total(\{| )")
a_fetch0 = metric("a", r'^kmirror_fetch_bytes_total\{.*mirror="m2"')
a_recv0 = metric("a", r'^kmirror_fetch_received_bytes_total\{.*mirror="m2"')
t0 = time.time()
kmc(A, "--start", "--mirror", "m2", "--topic", "orders")
wait_for("orders failed back to A", lambda: end_offset(A, "orders") == b_end, 60)
took = time.time() - t0
a_fetched = metric("a", r'^kmirror_fetch_bytes_total\{.*mirror="m2"') - a_fetch0
a_recv = metric("a", r'^kmirror_fetch_received_bytes_total\{.*mirror="m2"') - a_recv0
b_sent = metric("b", r"^kbroker_network_sent_bytes_total(\{| )") - b_sent0
pa = os.path.join(W, "a", "orders-0")
pb = os.path.join(W, "b", "orders-0")
r = subprocess.run([CMP, "--same-end", pa, pb], capture_output=True, text=True, timeout=60)
print(r.stdout.strip(), flush=True)
if r.returncode != 0:
    fail("A's and B's orders-0 differ after the failback:\n%s%s" % (r.stdout, r.stderr))
delta = sum(bt["size"] for bt in me2e.scan_log(pb) if bt["base"] >= hist["orders"])
if delta <= 0:
    fail("no delta on B")
limit = 1.05 * delta + OVERHEAD
print("delta %d bytes; A's mirror client received %d (appended %d), B sent %d (limit %d) in "
      "%.1f s" % (delta, a_recv, a_fetched, b_sent, limit, took), flush=True)
if a_fetched < delta:
    fail("A's mirror client appended %d bytes, less than the delta %d" % (a_fetched, delta))
if a_recv < a_fetched:
    fail("A's mirror client received %d bytes, less than it appended (%d)" % (a_recv, a_fetched))
if a_recv > limit or b_sent > limit:
    fail("more than the delta crossed: A received %d, B sent %d, limit %d"
         % (a_recv, b_sent, limit))
with open(os.path.join(W, "a.log"), errors="replace") as f:
    alog = f.read()
if "topic orders: mirror.support.unclean.leader.election true" not in alog:
    fail("A's plugin did not take orders' mirror.support.unclean.leader.election")
# design M43: the failback's epoch is B's current leader epoch + 1, B's epoch learned from its
# Metadata after the lookup (was LME epoch + 11).
m = re.search(r"orders-0 of mirror m2: failback: raising the leader epoch from -?\d+ to (\d+) "
              r"\(LME epoch (-?\d+), the peer's leader epoch (-?\d+)\)", alog)
if m is None:
    fail("A's plugin did not log the failback epoch bump of orders-0")
want, lme_e, peer_e = int(m.group(1)), int(m.group(2)), int(m.group(3))
if peer_e < 0 or want != max(lme_e, peer_e) + 1:
    fail("failback epoch %d from LME epoch %d and B's epoch %d (want max + 1, B's known)"
         % (want, lme_e, peer_e))
print("failback epoch %d: B's leader epoch %d + 1 (LME epoch %d)" % (want, peer_e, lme_e),
      flush=True)
out = describe(A, "m2", "orders")
if "MIRRORING" not in out:
    fail("orders on A is not MIRRORING after the failback:\n" + out)
stop("a")
stop("b")
print("failback e2e: OK", flush=True)
