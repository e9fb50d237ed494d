#!/usr/bin/env python3
"""mirror-config.py SUBCOMMAND ... -- scenario mirror-config of tests/mirror_e2e (raw wire client:
released clients do not know the provisional MIRROR config resource type 64).

  describe ADDR MIRROR [SECRET]   DescribeConfigs v1 of the mirror's config resource through ADDR:
                                  prints "key=value" lines (value "(sensitive)" for a secret,
                                  "(null)" for an unset key) of the keys set on the mirror; exit 1
                                  on an error, or when SECRET appears anywhere in the answer
  get ADDR MIRROR KEY             the effective value of KEY (exit 1 if absent)
  alter ADDR MIRROR [set:K=V | delete:K]...
                                  IncrementalAlterConfigs v0: prints "<error code> <message>"

Exit 0 ok, 1 failed, 2 usage.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from me2e import call, istr, r_iarr, r_istr  # noqa: E402

MIRROR_RESOURCE = 64  # CONFIG_RESOURCE_TYPE_MIRROR, docs/provisional.md


def describe(addr, mirror):
    """(error code, message, [(name, value, source, sensitive)], raw answer bytes)."""
    body = (struct.pack(">i", 1) + struct.pack(">b", MIRROR_RESOURCE) + istr(mirror) +
            struct.pack(">i", -1) + b"\x00")
    rd = call(addr, 32, 1, body, False)
    raw = rd.b
    rd.i32()

    def cfg(r):
        name, value, _ro, source, sens = r_istr(r), r_istr(r), r.i8(), r.i8(), r.i8()
        r_iarr(r, lambda s: (r_istr(s), r_istr(s), s.i8()))
        return name, value, source, bool(sens)

    def res(r):
        ec, msg, _t, _n = r.i16(), r_istr(r), r.i8(), r_istr(r)
        return ec, msg, r_iarr(r, cfg) or []

    out = r_iarr(rd, res)
    return out[0][0], out[0][1], out[0][2], raw


def alter(addr, mirror, ops):
    """ops = [(name, 0 SET / 1 DELETE, value)]: (error code, message)."""
    body = (struct.pack(">i", 1) + struct.pack(">b", MIRROR_RESOURCE) + istr(mirror) +
            struct.pack(">i", len(ops)) +
            b"".join(istr(o[0]) + struct.pack(">b", o[1]) + istr(o[2]) for o in ops) + b"\x00")
    rd = call(addr, 44, 0, body, False)
    rd.i32()
    res = r_iarr(rd, lambda r: (r.i16(), r_istr(r), r.i8(), r_istr(r)))
    return res[0][0], res[0][1]


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        sys.exit(2)
    cmd, addr, mirror = sys.argv[1], sys.argv[2], sys.argv[3]
    if cmd in ("describe", "get"):
        ec, msg, cfgs, raw = describe(addr, mirror)
        if ec != 0:
            print("DescribeConfigs of %s: error %d: %s" % (mirror, ec, msg))
            sys.exit(1)
        if cmd == "get":
            for name, value, _src, sens in cfgs:
                if name == sys.argv[4]:
                    print("(sensitive)" if sens else value)
                    sys.exit(0)
            print("%s not listed" % sys.argv[4])
            sys.exit(1)
        for name, value, src, sens in cfgs:
            if src != 5:  # set on the mirror (5 = the default)
                print("%s=%s" % (name, "(sensitive)" if sens else value))
        if len(sys.argv) > 4 and sys.argv[4].encode() in raw:
            print("FAIL: the secret appears in the DescribeConfigs answer")
            sys.exit(1)
        sys.exit(0)
    if cmd == "alter":
        ops = []
        for a in sys.argv[4:]:
            if a.startswith("set:"):
                k, v = a[4:].split("=", 1)
                ops.append((k, 0, v))
            elif a.startswith("delete:"):
                ops.append((a[7:], 1, None))
            else:
                print("bad operation %s" % a)
                sys.exit(2)
        ec, msg = alter(addr, mirror, ops)
        print("%d %s" % (ec, msg))
        sys.exit(0)
    print(__doc__)
    sys.exit(2)


if __name__ == "__main__":
    main()
