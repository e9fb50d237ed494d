#!/usr/bin/env python3
"""create_topic.py HOST:PORT TOPIC PARTITIONS [key=value]... -- CreateTopics v2 (RF 1) with
topic configs, stdlib only (the request code is produce_errors.py's). Exit 0 on error code 0."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from produce_errors import Conn, s16  # noqa: E402
import struct  # noqa: E402


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    topic, parts = sys.argv[2], int(sys.argv[3])
    cfg = dict(kv.split("=", 1) for kv in sys.argv[4:])
    c = Conn(host, int(port))
    body = struct.pack(">i", 1) + s16(topic) + struct.pack(">ihi", parts, 1, 0)
    body += struct.pack(">i", len(cfg))
    for k, v in cfg.items():
        body += s16(k) + s16(v)
    body += struct.pack(">ib", 30000, 0)
    r = c.call(19, 2, body)
    off = 8
    ln = struct.unpack(">h", r[off:off + 2])[0]
    off += 2 + ln
    ec = struct.unpack(">h", r[off:off + 2])[0]
    if ec:
        print("create_topic: %s: error %d" % (topic, ec), file=sys.stderr)
    return 1 if ec else 0


if __name__ == "__main__":
    sys.exit(main())
