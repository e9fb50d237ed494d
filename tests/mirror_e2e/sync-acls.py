#!/usr/bin/env python3
"""sync-acls.py SUBCOMMAND ... -- the client side of scenario sync-acls (tests/mirror_e2e,
docs/testing-mirror.md). Raw ACL requests (kmwire.py: CreateAcls / DescribeAcls / DeleteAcls
v3) on bindings named by the table below.

  create ADDR NAME...                 CreateAcls of the named bindings: exit 0 when each is NONE
  delete ADDR NAME...                 DeleteAcls, one exact filter each: exit 0 when each
                                      filter answers NONE and removed exactly its binding
  cleanup ADDR NAME...                DeleteAcls of the named bindings, present or not
  expect BOOTSTRAPS [+NAME|-NAME]...  exit 0 when DescribeAcls on EVERY broker of the comma-
                                      separated list holds each +NAME and no -NAME; prints why not
  create-mirror ADDR MIRROR K=V...    raw CreateMirror (97): prints "<error code> <message>"
  coordinator BOOTSTRAP MIRROR        the broker id leading MIRROR's `__mirror_state` partition
                                      (murmur2 of the name, me2e.mirror_coordinator): the broker
                                      that runs its sync and holds SYNCED_ACLS
  count NODELOG_GLOB MIRROR           "runs errors" of kmirror_sync_{runs,errors}_total for
                                      MIRROR's ACL kind, summed over the nodes' /metrics

Exit 0 pass, 1 not (yet) / fail, 2 setup error.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mirror_admin"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kmwire  # noqa: E402

TOPIC, GROUP = 2, 3
LITERAL, PREFIXED = 3, 4
READ, WRITE, DESCRIBE = 3, 4, 8
ALLOW = 3

# The scenario's bindings (mirror msa's acls.include: TOPIC;sa-.* and GROUP;sa-group.*;READ).
B = {
    "a-read": (TOPIC, "sa-orders", LITERAL, "User:alice", "*", READ, ALLOW),
    "a-write": (TOPIC, "sa-orders", LITERAL, "User:alice", "*", WRITE, ALLOW),
    "g-read": (GROUP, "sa-group", LITERAL, "User:alice", "*", READ, ALLOW),
    "p-describe": (TOPIC, "sa-", PREFIXED, "User:bob", "*", DESCRIBE, ALLOW),
    # not selected by acls.include: another topic name, and a group binding for DESCRIBE
    "outside": (TOPIC, "other-orders", LITERAL, "User:alice", "*", READ, ALLOW),
    "g-describe": (GROUP, "sa-group", LITERAL, "User:alice", "*", DESCRIBE, ALLOW),
    # destination only
    "dst-only": (TOPIC, "sa-orders", LITERAL, "User:carol", "*", READ, ALLOW),
    # on the destination before the mirror exists, and on the source
    "pre": (TOPIC, "sa-audit", LITERAL, "User:dave", "*", WRITE, ALLOW),
}


def names(args):
    for n in args:
        if n not in B:
            print("unknown binding %s" % n)
            sys.exit(2)
    return [B[n] for n in args]


def cmd_create(addr, *ns):
    codes = kmwire.create_acls(addr, names(ns))
    bad = [(n, c) for n, c in zip(ns, codes or []) if c != 0]
    if codes is None or len(codes) != len(ns) or bad:
        print("CreateAcls on %s: %s" % (addr, bad or codes))
        return 1
    print("created on %s: %s" % (addr, " ".join(ns)))
    return 0


def cmd_delete(addr, *ns):
    res = kmwire.delete_acls(addr, names(ns))
    ok = res is not None and len(res) == len(ns)
    for n, r in zip(ns, res or []):
        code, got = r
        if code != 0 or got != [B[n]]:
            print("DeleteAcls of %s on %s: error %d, removed %s" % (n, addr, code, got))
            ok = False
    if ok:
        print("deleted on %s: %s" % (addr, " ".join(ns)))
    return 0 if ok else 1


def cmd_cleanup(addr, *ns):
    res = kmwire.delete_acls(addr, names(ns))
    bad = [(n, r[0]) for n, r in zip(ns, res or []) if r[0] != 0]
    if res is None or len(res) != len(ns) or bad:
        print("DeleteAcls on %s: %s" % (addr, bad or res))
        return 1
    return 0


def cmd_expect(bootstraps, *specs):
    ok = True
    for addr in bootstraps.split(","):
        code, got = kmwire.describe_acls(addr)
        if code != 0:
            print("%s: DescribeAcls error %d" % (addr, code))
            ok = False
            continue
        have = set(got)
        for s in specs:
            want, n = s[0] == "+", s[1:]
            if (B[n] in have) != want:
                print("%s: %s %s" % (addr, n, "missing" if want else "present"))
                ok = False
    if ok:
        print("every broker of %s: %s" % (bootstraps, " ".join(specs)))
    return 0 if ok else 1


def cmd_create_mirror(addr, mirror, *kvs):
    code, msg = kmwire.create_mirror(mirror, dict(kv.split("=", 1) for kv in kvs), addr)
    print("%d %s" % (code, msg))
    return 0


def cmd_coordinator(bootstrap, mirror):
    import me2e
    leader, why = me2e.mirror_coordinator(bootstrap, mirror)
    if leader is None:
        print(why)
        return 1
    print(leader)
    return 0


def cmd_count(nodelog_glob, mirror):
    import me2e
    labels = r'\{(?=[^}]*mirror="%s")(?=[^}]*kind="acls")' % re.escape(mirror)
    sums = me2e.metric_sums(nodelog_glob, [r"kmirror_sync_runs_total" + labels,
                                           r"kmirror_sync_errors_total" + labels])
    if sums is None:
        print("no metrics listener in %s" % nodelog_glob)
        return 2
    print("%d %d" % (sums[0], sums[1]))
    return 0


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    cmd, a = sys.argv[1], sys.argv[2:]
    fn = {"create": cmd_create, "delete": cmd_delete, "expect": cmd_expect, "cleanup": cmd_cleanup,
          "coordinator": cmd_coordinator, "create-mirror": cmd_create_mirror,
          "count": cmd_count}.get(cmd)
    if fn is None:
        print("unknown subcommand %s" % cmd)
        return 2
    try:
        return fn(*a)
    except (OSError, ValueError) as e:
        print("%s: %s" % (cmd, e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
