"""acl_kbx.py BOOTSTRAP PHASE -- the ACL authorizer behind kbx authorize(), seen by a plugin.

kbroker runs with authorizer.class.name, super.users=User:admin and the test plugin of
tests/broker_host (kbh_test_plugin.so), which answers ListMirrors requests whose client id is a
command; "authz:RT,OP,HOST,NAME:PRINCIPAL" makes the plugin call kbx authorize() and report the
answer (1 allowed, 0 denied). PHASE "before": no ACL yet, then ACLs created with kafka-python;
PHASE "after": the same answers after a kbroker restart (the store is loaded before plugins).
Prints one line per check; exit 1 on a failure.
"""
import socket
import struct
import sys

from kafka import KafkaAdminClient
from kafka.admin import (ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                         ResourcePattern, ResourceType)

BOOT, PHASE = sys.argv[1], sys.argv[2]
HOST, PORT = BOOT.rsplit(":", 1)
FAILS = []
TOPIC, GROUP = 2, 3
READ, WRITE, DESCRIBE, ALTER_CONFIGS, DESCRIBE_CONFIGS = 3, 4, 8, 11, 10


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + "kbx " + what, flush=True)
    if not cond:
        FAILS.append(what)


def uvarint(buf, pos):
    shift = val = 0
    while True:
        b = buf[pos]
        pos += 1
        val |= (b & 0x7F) << shift
        if not b & 0x80:
            return val, pos
        shift += 7


def cstr(buf, pos):
    n, pos = uvarint(buf, pos)
    if n == 0:
        return None, pos
    return buf[pos:pos + n - 1].decode(), pos + n - 1


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError("connection closed")
        out += chunk
    return out


def plugin_command(command):
    """ListMirrors v0 (key 98, flexible) with the command as client id; the plugin's checks."""
    cid = command.encode()
    body = struct.pack(">hhih", 98, 0, 7, len(cid)) + cid + b"\x00" + b"\x00"
    with socket.create_connection((HOST, int(PORT)), timeout=20) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        buf = recv_exact(s, size)
    corr = struct.unpack(">i", buf[:4])[0]
    assert corr == 7, corr
    _, pos = uvarint(buf, 4)                      # response header tags
    pos += 4 + 2                                  # throttle, error code
    _, pos = cstr(buf, pos)                       # error message
    n, pos = uvarint(buf, pos)
    res = []
    for _ in range(n - 1):
        name, pos = cstr(buf, pos)
        status, pos = cstr(buf, pos)
        _, pos = cstr(buf, pos)
        value = struct.unpack(">i", buf[pos:pos + 4])[0]
        pos += 4
        _, pos = uvarint(buf, pos)
        res.append((name, status, value))
    return res


def authz(principal, op, rtype, name, host="127.0.0.1"):
    res = plugin_command("authz:%d,%d,%s,%s:%s" % (rtype, op, host or "-", name, principal))
    if len(res) != 1 or res[0][0] != "authz" or res[0][1] != "ok":
        return "error %r" % (res,)
    return res[0][2]


def expect(principal, op, rtype, name, want, host="127.0.0.1"):
    got = authz(principal, op, rtype, name, host)
    check(got == want, "authorize(%s, %s, op %d, type %d, %s) = %s (want %d)"
          % (principal, host, op, rtype, name, got, want))


ALLOWED, DENIED = 1, 0
if PHASE == "before":
    expect("User:alice", READ, TOPIC, "kt1", DENIED)          # no ACL, no default allow
    expect("User:admin", WRITE, TOPIC, "kt1", ALLOWED)        # super.users
    expect("User:__kbroker", WRITE, TOPIC, "kt1", ALLOWED)    # the internal principal
    admin = KafkaAdminClient(bootstrap_servers=BOOT, client_id="kbacl-kbx",
                             request_timeout_ms=20000)
    r = admin.create_acls([
        ACL("User:alice", "127.0.0.1", ACLOperation.READ, ACLPermissionType.ALLOW,
            ResourcePattern(ResourceType.TOPIC, "kt", ACLResourcePatternType.PREFIXED)),
        ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.DENY,
            ResourcePattern(ResourceType.TOPIC, "kt-secret", ACLResourcePatternType.LITERAL)),
        ACL("User:*", "*", ACLOperation.ALTER_CONFIGS, ACLPermissionType.ALLOW,
            ResourcePattern(ResourceType.GROUP, "*", ACLResourcePatternType.LITERAL))])
    check(len(r["succeeded"]) == 3, "create_acls through kafka-python")
    admin.close()
if PHASE in ("before", "after"):
    expect("User:alice", READ, TOPIC, "kt1", ALLOWED)
    expect("User:alice", DESCRIBE, TOPIC, "kt1", ALLOWED)     # implied by READ
    expect("User:alice", WRITE, TOPIC, "kt1", DENIED)
    expect("User:alice", READ, TOPIC, "kt1", DENIED, host="10.0.0.1")
    expect("User:alice", READ, TOPIC, "kt1", DENIED, host=None)
    expect("User:alice", READ, TOPIC, "kt-secret", DENIED)    # DENY wins
    expect("User:bob", READ, TOPIC, "kt1", DENIED)
    expect("User:bob", DESCRIBE_CONFIGS, GROUP, "g", ALLOWED)  # wildcards, implied op
    expect("User:bob", DESCRIBE, GROUP, "g", DENIED)
sys.exit(1 if FAILS else 0)
