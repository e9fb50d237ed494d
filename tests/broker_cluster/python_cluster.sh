#!/usr/bin/env bash
# python_cluster.sh KBROKER BUILD_DIR [SCRIPT] -- kafka-python against a three-process kbroker
# cluster (node 1 broker,controller with a CONTROLLER listener; nodes 2 and 3 broker-only) running
# SCRIPT (python_cluster.py by default) with the three bootstrap addresses. Uses the pinned
# kafka-python venv of tests/broker_api (installed there on first use, PyPI).
set -euo pipefail
KB=${1:?kbroker path}
BUILD=${2:?build dir}
SCRIPT=${3:-python_cluster.py}
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

W=$(mktemp -d "${TMPDIR:-/tmp}/kbcl-py.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT

# start N PROPS: start node N with the extra properties; its readiness line goes to $W/line$N
# (not a command substitution: the PID must reach PIDS in this shell)
start() {
  local n=$1
  cat >"$W/s$n.properties" <<PROPS
node.id=$n
log.dirs=$W/n$n
cluster.id=kbrokerPyCluster000001
broker.heartbeat.interval.ms=200
broker.session.timeout.ms=1500
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
num.network.threads=1
num.io.threads=2
$2
PROPS
  mkfifo "$W/ready$n"
  "$KB" --config "$W/s$n.properties" >"$W/ready$n" 2>"$W/broker$n.log" &
  PIDS+=($!)
  exec 9<"$W/ready$n"
  read -r -t 60 line <&9 || { echo "FAIL: node $n did not start"; tail "$W/broker$n.log"; exit 1; }
  exec 9<&-
  echo "$line" >"$W/line$n"
}

start 1 "process.roles=broker,controller
listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"
L1=$(cat "$W/line1")
B1=$(echo "$L1" | grep -o 'PLAINTEXT://127\.0\.0\.1:[0-9]*' | sed 's|PLAINTEXT://||')
C1=$(echo "$L1" | grep -o 'CONTROLLER://127\.0\.0\.1:[0-9]*' | sed 's|.*:||')
start 2 "process.roles=broker
listeners=PLAINTEXT://127.0.0.1:0
controller.quorum.voters=1@127.0.0.1:$C1"
L2=$(cat "$W/line2")
B2=$(echo "$L2" | grep -o '127\.0\.0\.1:[0-9]*' | head -1)
start 3 "process.roles=broker
listeners=PLAINTEXT://127.0.0.1:0
controller.quorum.voters=1@127.0.0.1:$C1"
L3=$(cat "$W/line3")
B3=$(echo "$L3" | grep -o '127\.0\.0\.1:[0-9]*' | head -1)

rc=0
timeout 300 "$VENV/bin/python" "$HERE/$SCRIPT" "$B1" "$B2" "$B3" || rc=$?
for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${PIDS[@]}"; do
  timeout 30 tail --pid="$p" -f /dev/null || { echo "FAIL: kbroker $p did not stop"; rc=1; }
  wait "$p" || { echo "FAIL: kbroker $p exit status"; rc=1; }
done
PIDS=()
if [ "$rc" -ne 0 ]; then for n in 1 2 3; do echo "--- node $n"; tail -n 30 "$W/broker$n.log"; done; fi
exit "$rc"
