#!/usr/bin/env bash
# admin_cluster.sh KBROKER KMIRROR_SO -- a single-node source kbroker and a three-process
# destination cluster (node 1 broker+controller, nodes 2 and 3 broker-only), kmirror.so loaded on
# every destination node; admin_cluster.py drives the mirror admin RPCs through all three.
set -euo pipefail
KB=${1:?kbroker path}
SO=${2:?kmirror.so path}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
W=$(mktemp -d "${TMPDIR:-/tmp}/kmadmc.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT

# start NAME PROPS: start a kbroker; its readiness line goes to $W/line.NAME
start() {
  local n=$1
  cat >"$W/$n.properties" <<PROPS
log.dirs=$W/$n
num.partitions=1
num.network.threads=1
num.io.threads=2
$2
PROPS
  mkfifo "$W/ready.$n"
  "$KB" --config "$W/$n.properties" >"$W/ready.$n" 2>"$W/$n.log" &
  PIDS+=($!)
  exec 9<"$W/ready.$n"
  read -r -t 60 line <&9 || { echo "FAIL: $n did not start"; tail "$W/$n.log"; exit 1; }
  exec 9<&-
  echo "$line" >"$W/line.$n"
}
addr() { grep -o 'PLAINTEXT://127\.0\.0\.1:[0-9]*' "$W/line.$1" | head -1 | sed 's|PLAINTEXT://||'; }

start src "node.id=1
listeners=PLAINTEXT://127.0.0.1:0
cluster.id=kmAdminClusterSource01"
COMMON="cluster.id=kmAdminClusterDestin01
broker.heartbeat.interval.ms=200
broker.session.timeout.ms=3000
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
plugin.paths=$SO
mirror.enable=true"
start d1 "node.id=1
process.roles=broker,controller
listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0
$COMMON"
C1=$(grep -o 'CONTROLLER://127\.0\.0\.1:[0-9]*' "$W/line.d1" | sed 's|.*:||')
for n in 2 3; do
  start "d$n" "node.id=$n
process.roles=broker
listeners=PLAINTEXT://127.0.0.1:0
controller.quorum.voters=1@127.0.0.1:$C1
$COMMON"
done

rc=0
timeout 200 python3 "$HERE/admin_cluster.py" "$(addr src)" "$(addr d1)" "$(addr d2)" "$(addr d3)" \
  "$W/d1.log" "$W/d2.log" "$W/d3.log" ||
  rc=$?
for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${PIDS[@]}"; do
  timeout 30 tail --pid="$p" -f /dev/null || { echo "FAIL: kbroker $p did not stop"; rc=1; }
  wait "$p" || { echo "FAIL: kbroker $p exit status"; rc=1; }
done
PIDS=()
for n in d1 d2 d3; do
  if grep -q 'left after fini' "$W/$n.log"; then echo "FAIL: kmirror left handles on $n"; rc=1; fi
done
if [ "$rc" -ne 0 ]; then
  for n in d1 d2 d3; do
    echo "--- $n"; grep -v '^$' "$W/$n.log" | grep -i 'kmirror\|error\|warn' | tail -n 25
    # a sanitizer report, whole: the filter above would keep only its first line
    sed -n '/ERROR: \(Address\|Undefined\|Leak\)Sanitizer/,/^SUMMARY:/p' "$W/$n.log"
  done
fi
exit "$rc"
