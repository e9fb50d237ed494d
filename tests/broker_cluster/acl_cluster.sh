#!/usr/bin/env bash
# acl_cluster.sh KBROKER BUILD_DIR -- ACLs across a three-process kbroker cluster (node 1
# broker,controller; nodes 2 and 3 broker-only; authorizer.class.name on all): kafka-python's
# CreateAcls through node 2 and DeleteAcls through node 3 are seen on every node, also after
# node 3 restarts (acl_cluster.py). Uses the pinned kafka-python venv of tests/broker_api.
set -euo pipefail
KB=${1:?kbroker path}
BUILD=${2:?build dir}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../broker_api/py_venv.sh
. "$HERE/../broker_api/py_venv.sh"
kpy_venv "$BUILD"

W=$(mktemp -d "${TMPDIR:-/tmp}/kbcl-acl.XXXXXX")
KBCL_CLUSTER_ID=kbrokerAclCluster00001
KBCL_PROPS="authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS"
# shellcheck source=kbcl.sh
. "$HERE/kbcl.sh"
trap 'kbcl_kill_all; rm -rf "$W"' EXIT

# node 1 has a per-node store of an older kbroker (one binding, "acl-old"): moved into the
# metadata log once, the file renamed kbroker-acls.migrated
mkdir -p "$W/n1"
python3 - "$W/n1/kbroker-acls" <<'PY'
import struct, sys
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF
def s(v):
    return struct.pack(">h", len(v)) + v.encode()
# id, TOPIC, LITERAL, READ, ALLOW, name, principal, host
pl = struct.pack(">i", 1) + bytes(range(1, 17)) + bytes([2, 3, 3, 3]) + s("acl-old") + \
    s("User:old") + s("*")
open(sys.argv[1], "wb").write(b"KBAC" + struct.pack(">hIi", 1, crc32c(pl), len(pl)) + pl)
PY
kbcl_start 1
kbcl_start 2
kbcl_start 3

py() { timeout 120 "$VENV/bin/python" "$HERE/acl_cluster.py" "$1" "$(kbcl_addr 1)" "$(kbcl_addr 2)" "$(kbcl_addr 3)"; }
py change || kbcl_fail "acl_cluster.py change"
kbcl_stop 3
kbcl_start 3
py restart || kbcl_fail "acl_cluster.py restart"
[ ! -e "$W/n1/kbroker-acls" ] && [ -s "$W/n1/kbroker-acls.migrated" ] ||
  kbcl_fail "node 1's kbroker-acls was not migrated"
[ ! -e "$W/n2/kbroker-acls" ] && [ ! -e "$W/n3/kbroker-acls" ] ||
  kbcl_fail "ACL changes went to a per-node kbroker-acls"
echo "ok: node 1's kbroker-acls moved into the metadata log, renamed kbroker-acls.migrated"
for n in 1 2 3; do kbcl_stop "$n"; done
echo PASS
