#!/usr/bin/env python3
"""produce_errors.py KBROKER -- Produce error codes for bad batches, as Apache Kafka 4.x answers.

Starts KBROKER (port 0, temp log dir), creates a compacted and a plain topic with CreateTopics
v2, then sends hand-built Produce v3 requests (one partition, one batch each) and checks the
partition error code:

  keyed record on the compacted topic              0
  keyless record on the compacted topic            87 INVALID_RECORD
  record offset deltas 0,2 (not contiguous)        87 INVALID_RECORD
  recordCount larger than the records (CRC right)  87 INVALID_RECORD
  a record's length cut (CRC right)                87 INVALID_RECORD
  the batch cut before its batchLength             87 INVALID_RECORD
  a byte changed under the CRC                     2  CORRUPT_MESSAGE
  batchLength below the v2 header                  2  CORRUPT_MESSAGE

CORRUPT_MESSAGE is retriable for the Java producer (it would retry a hopeless batch until
delivery.timeout.ms), so only damage to framing and checksum may get it. Stdlib only; the CRC-32C
is computed here. Exit 0 if every check passed, then SIGTERM must end kbroker with status 0.
"""
import os
import re
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

_T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    _T.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def varint(v):
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append((z & 0x7F) | 0x80)
        z >>= 7


def record(delta, key, value):
    body = b"\x00" + varint(0) + varint(delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(0)  # headers
    return varint(len(body)) + body


def batch(recs, count=None, last_delta=None, ts=None):
    """A magic-2 batch with a correct CRC over whatever it is given."""
    ts = int(time.time() * 1000) if ts is None else ts
    n = len(recs) if count is None else count
    last = (len(recs) - 1) if last_delta is None else last_delta
    payload = b"".join(recs)
    after_crc = struct.pack(">hiqqqhii", 0, last, ts, ts, -1, -1, -1, n) + payload
    crc = crc32c(after_crc)
    rest = struct.pack(">ibI", -1, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(rest)) + rest


def s16(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class Conn:
    def __init__(self, host, port):
        self.s = socket.create_connection((host, port), timeout=20)
        self.cid = 0

    def call(self, key, ver, body):
        self.cid += 1
        hdr = struct.pack(">hhi", key, ver, self.cid) + s16("produce-errors")
        msg = hdr + body
        self.s.sendall(struct.pack(">i", len(msg)) + msg)
        n = struct.unpack(">i", self._read(4))[0]
        resp = self._read(n)
        cid = struct.unpack(">i", resp[:4])[0]
        if cid != self.cid:
            raise RuntimeError("correlation id %d, want %d" % (cid, self.cid))
        return resp[4:]

    def _read(self, n):
        b = b""
        while len(b) < n:
            chunk = self.s.recv(n - len(b))
            if not chunk:
                raise RuntimeError("connection closed by the broker")
            b += chunk
        return b


def create_topic(c, name, configs):
    body = struct.pack(">i", 1) + s16(name) + struct.pack(">ihi", 1, 1, 0)
    body += struct.pack(">i", len(configs))
    for k, v in configs.items():
        body += s16(k) + s16(v)
    body += struct.pack(">ib", 30000, 0)
    r = c.call(19, 2, body)
    # throttle, [name, error, message]
    off = 4 + 4
    ln = struct.unpack(">h", r[off:off + 2])[0]
    off += 2 + ln
    return struct.unpack(">h", r[off:off + 2])[0]


def produce(c, topic, records):
    body = struct.pack(">hhi", -1, -1, 30000)  # null transactional id, acks=all, timeout
    body += struct.pack(">i", 1) + s16(topic) + struct.pack(">ii", 1, 0)
    body += struct.pack(">i", len(records)) + records
    r = c.call(0, 3, body)
    off = 4
    ln = struct.unpack(">h", r[off:off + 2])[0]
    off += 2 + ln + 4 + 4  # name, partitions count, index
    return struct.unpack(">h", r[off:off + 2])[0]


def main():
    kb = sys.argv[1]
    w = tempfile.mkdtemp(prefix="kb-produce-errors.")
    with open(os.path.join(w, "server.properties"), "w") as f:
        f.write("node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs=%s/data\n"
                "num.network.threads=1\nnum.io.threads=2\nauto.create.topics.enable=false\n"
                "offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n"
                "transaction.state.log.min.isr=1\n" % w)
    log = open(os.path.join(w, "kbroker.log"), "w")
    p = subprocess.Popen([kb, "--config", os.path.join(w, "server.properties")],
                         stdout=subprocess.PIPE, stderr=log, text=True)
    fails = 0
    passed = 0
    try:
        ready, _, _ = select.select([p.stdout], [], [], 60)
        line = p.stdout.readline() if ready else ""
        m = re.search(r"127\.0\.0\.1:(\d+)", line)
        if not m:
            print("FAIL kbroker did not start: %r" % line)
            return 1
        c = Conn("127.0.0.1", int(m.group(1)))
        for name, cfg in (("pe-compact", {"cleanup.policy": "compact"}), ("pe-plain", {})):
            ec = create_topic(c, name, cfg)
            if ec != 0:
                print("FAIL CreateTopics %s: error %d" % (name, ec))
                return 1

        one = record(0, b"k", b"v")
        good = batch([one])
        cut_rec = batch([record(0, b"k", b"v")[:-3]])  # record shorter than its length says
        cut_rec = bytearray(cut_rec)
        flipped = bytearray(batch([record(0, b"k", b"value")]))
        flipped[-3] ^= 0x55  # inside the CRC range, CRC field unchanged
        short_len = bytearray(good)
        struct.pack_into(">i", short_len, 8, 20)  # batchLength < 49
        cases = [
            ("keyed record on a compacted topic", "pe-compact", good, 0),
            ("keyless record on a compacted topic", "pe-compact",
             batch([record(0, None, b"v")]), 87),
            ("tombstone with a key on a compacted topic", "pe-compact",
             batch([record(0, b"k", None)]), 0),
            ("offset deltas 0,2", "pe-plain",
             batch([record(0, b"a", b"1"), record(2, b"b", b"2")], last_delta=1), 87),
            ("offset deltas 1,2", "pe-plain",
             batch([record(1, b"a", b"1"), record(2, b"b", b"2")]), 87),
            ("recordCount 5 for 1 record", "pe-plain", batch([one], count=5, last_delta=4), 87),
            ("record cut short", "pe-plain", bytes(cut_rec), 87),
            ("batch cut before its batchLength", "pe-plain", good[:-5], 87),
            ("bad CRC", "pe-plain", bytes(flipped), 2),
            ("batchLength below the header", "pe-plain", bytes(short_len), 2),
            ("good batch after the bad ones", "pe-plain", good, 0),
        ]
        for what, topic, recs, want in cases:
            got = produce(c, topic, recs)
            if got == want:
                passed += 1
                print("PASS %s: %d" % (what, got))
            else:
                fails += 1
                print("FAIL %s: error %d, want %d" % (what, got, want))
    except Exception as e:  # noqa: BLE001 -- any failure of the exchange fails the test
        fails += 1
        print("FAIL %s: %s" % (type(e).__name__, e))
    finally:
        if p.poll() is None:
            p.terminate()
            try:
                rc = p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = "timeout"
            if rc != 0:
                fails += 1
                print("FAIL kbroker exit status after SIGTERM: %s" % rc)
        else:
            fails += 1
            print("FAIL kbroker died (status %s)" % p.returncode)
        log.close()
        if fails:
            with open(os.path.join(w, "kbroker.log")) as f:
                print("--- broker log (tail)\n" + "".join(f.readlines()[-20:]))
        shutil.rmtree(w, ignore_errors=True)
    print("%d passed, %d failed" % (passed, fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
