#!/usr/bin/env bash
# admin_e2e.sh KBROKER KMIRROR_SO -- a source kbroker and a destination kbroker with kmirror.so
# loaded (single nodes), then admin_e2e.py drives the mirror admin RPCs against the destination.
set -euo pipefail
KB=${1:?kbroker path}
SO=${2:?kmirror.so path}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
W=$(mktemp -d "${TMPDIR:-/tmp}/kmadm.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT

# start NAME EXTRA: start a single-node kbroker; its PLAINTEXT address goes to $W/addr.NAME
start() {
  local n=$1
  cat >"$W/$n.properties" <<PROPS
node.id=1
listeners=PLAINTEXT://127.0.0.1:0
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
  echo "$line" | grep -o 'PLAINTEXT://127\.0\.0\.1:[0-9]*' | sed 's|PLAINTEXT://||' >"$W/addr.$n"
}

start src "cluster.id=kmAdminE2eSource000001"
start dst "cluster.id=kmAdminE2eDestin000001
plugin.paths=$SO
mirror.enable=true"
SRC=$(cat "$W/addr.src")
DST=$(cat "$W/addr.dst")

rc=0
timeout 120 python3 "$HERE/admin_e2e.py" "$SRC" "$DST" || rc=$?
# The secret given at creation never reaches the log.
if grep -q 's3cr3t' "$W/dst.log"; then echo "FAIL: the secret is in the destination log"; rc=1; fi
for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${PIDS[@]}"; do
  timeout 30 tail --pid="$p" -f /dev/null || { echo "FAIL: kbroker $p did not stop"; rc=1; }
  wait "$p" || { echo "FAIL: kbroker $p exit status"; rc=1; }
done
PIDS=()
if grep -q 'left after fini' "$W/dst.log"; then echo "FAIL: kmirror left handles"; rc=1; fi
if [ "$rc" -ne 0 ]; then
  for n in src dst; do echo "--- $n"; grep -v '^$' "$W/$n.log" | tail -n 40; done
fi
exit "$rc"
