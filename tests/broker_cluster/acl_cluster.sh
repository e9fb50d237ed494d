#!/usr/bin/env bash
# acl_cluster.sh KBROKER BUILD_DIR -- ACLs across a three-process kbroker cluster (node 1
# broker,controller; nodes 2 and 3 broker-only; authorizer.class.name on all): kafka-python's
# CreateAcls through node 2 and DeleteAcls through node 3 are seen on every node, also after
# node 3 restarts (acl_cluster.py). Uses the pinned kafka-python venv of tests/broker_api.
set -euo pipefail
KB=${1:?kbroker path}
BUILD=${2:?build dir}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PIN="kafka-python==3.0.12"
VENV=$BUILD/py-venv
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.pin" 2>/dev/null)" != "$PIN" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV" || { echo "FAIL: python3 -m venv"; exit 1; }
  "$VENV/bin/pip" install --disable-pip-version-check -q "$PIN" >"$BUILD/py-venv.log" 2>&1 ||
    { tail -n 20 "$BUILD/py-venv.log"; echo "FAIL: pip install $PIN"; exit 1; }
  echo "$PIN" >"$VENV/.pin"
fi

W=$(mktemp -d "${TMPDIR:-/tmp}/kbcl-acl.XXXXXX")
declare -A PID
cleanup() {
  for p in "${PID[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for n in 1 2 3; do echo "--- node $n"; tail -n 30 "$W/broker$n.log" 2>/dev/null; done
  exit 1
}

# start N PROPS: start node N (its readiness line goes to $W/line$N; not a command substitution:
# the PID must stay in this shell)
start() {
  local n=$1
  cat >"$W/s$n.properties" <<PROPS
node.id=$n
log.dirs=$W/n$n
cluster.id=kbrokerAclCluster00001
broker.heartbeat.interval.ms=200
broker.session.timeout.ms=1500
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
num.network.threads=1
num.io.threads=2
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
$2
PROPS
  rm -f "$W/ready$n"
  mkfifo "$W/ready$n"
  "$KB" --config "$W/s$n.properties" >"$W/ready$n" 2>>"$W/broker$n.log" &
  PID[$n]=$!
  exec 9<"$W/ready$n"
  read -r -t 60 line <&9 || fail "node $n did not start"
  exec 9<&-
  echo "$line" >"$W/line$n"
}
stop() {
  kill -TERM "${PID[$1]}" 2>/dev/null || true
  timeout 30 tail --pid="${PID[$1]}" -f /dev/null || fail "node $1 did not stop"
  wait "${PID[$1]}" || fail "node $1 exit status"
  unset "PID[$1]"
}
addr() { grep -o '127\.0\.0\.1:[0-9]*' "$W/line$1" | head -1; }

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
start 1 "process.roles=broker,controller
listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"
C1=$(grep -o 'CONTROLLER://127\.0\.0\.1:[0-9]*' "$W/line1" | sed 's|.*:||')
B1=$(grep -o 'PLAINTEXT://127\.0\.0\.1:[0-9]*' "$W/line1" | sed 's|PLAINTEXT://||')
BROKER="process.roles=broker
listeners=PLAINTEXT://127.0.0.1:0
controller.quorum.voters=1@127.0.0.1:$C1"
start 2 "$BROKER"
start 3 "$BROKER"

py() { timeout 120 "$VENV/bin/python" "$HERE/acl_cluster.py" "$1" "$B1" "$(addr 2)" "$(addr 3)"; }
py change || fail "acl_cluster.py change"
stop 3
start 3 "$BROKER"
py restart || fail "acl_cluster.py restart"
[ ! -e "$W/n1/kbroker-acls" ] && [ -s "$W/n1/kbroker-acls.migrated" ] ||
  fail "node 1's kbroker-acls was not migrated"
[ ! -e "$W/n2/kbroker-acls" ] && [ ! -e "$W/n3/kbroker-acls" ] ||
  fail "ACL changes went to a per-node kbroker-acls"
echo "ok: node 1's kbroker-acls moved into the metadata log, renamed kbroker-acls.migrated"
for n in 1 2 3; do stop "$n"; done
echo PASS
