#!/usr/bin/env bash
# against-kbroker.sh: the client conformance suites against kbroker. Starts BUILD_DIR/bin/kbroker
# on an ephemeral loopback port with a fresh log dir and the request recorder on (KM_RECORD_DIR),
# runs tests/clients/run-all.sh against it, stops it with SIGTERM (exit status 0 required), then
# decodes every recorded request with BUILD_DIR/bin/kb_replay_check (per suite, via suites.log).
#
#   against-kbroker.sh BUILD_DIR [--record-dir DIR] [--override k=v]... [--keep-dir]
#                      [run-all options, e.g. --suites kcat,java]
#
# Fails (exit 1) if a suite check fails, kbroker does not exit 0 on SIGTERM, or a recorded frame
# does not decode; exit 2 if kbroker cannot be started. The work dir (config, log dir, broker log,
# recording unless --record-dir) is removed afterwards unless --keep-dir or a failure.
# The broker settings mirror tests/peers/kafka-cluster.sh's Kafka (1 node): replication factors 1,
# small internal topics, no initial rebalance delay, no auto-create.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/lib/against.sh"

BUILD=${1:?usage: against-kbroker.sh BUILD_DIR [options]}
shift
BUILD=$(cd "$BUILD" && pwd) || exit 2
KB=$BUILD/bin/kbroker
CHECK=$BUILD/bin/kb_replay_check
[ -x "$KB" ] || { echo "against-kbroker: $KB not found (build it first)" >&2; exit 2; }
[ -x "$CHECK" ] || { echo "against-kbroker: $CHECK not found (build it first)" >&2; exit 2; }

W=$(mktemp -d "${TMPDIR:-/tmp}/against-kbroker.XXXXXX")
REC=$W/record
KEEP_DIR=0
ARGS=()
OVR=()
while [ $# -gt 0 ]; do
  case "$1" in
    --record-dir) REC=$2; shift 2 ;;
    --override) OVR+=(--override "$2"); shift 2 ;;
    --keep-dir) KEEP_DIR=1; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
mkdir -p "$REC"
REC=$(cd "$REC" && pwd)

cat >"$W/server.properties" <<EOF
node.id=1
listeners=PLAINTEXT://127.0.0.1:0
log.dirs=$W/data
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.cleaner.dedupe.buffer.size=2097152
group.initial.rebalance.delay.ms=0
offsets.topic.num.partitions=5
transaction.state.log.num.partitions=5
num.network.threads=2
num.io.threads=2
auto.create.topics.enable=false
EOF

KB_PID=
BOOT=
km_broker_name() { echo "kbroker ($KB)"; }
km_broker_start() {
  # KM_RECORD_DIR is exported by km_against (--record-dir below).
  "$KB" --config "$W/server.properties" "${OVR[@]}" >"$W/kbroker.out" 2>"$W/kbroker.log" &
  KB_PID=$!
  local deadline=$(($(date +%s) + 60)) line
  while [ "$(date +%s)" -lt "$deadline" ]; do
    line=$(grep -m1 '^kbroker started' "$W/kbroker.out" 2>/dev/null)
    if [ -n "$line" ]; then
      BOOT=$(echo "$line" | grep -o '127\.0\.0\.1:[0-9]*' | head -1)
      [ -n "$BOOT" ] && return 0
      echo "against-kbroker: no port in '$line'" >&2
      return 1
    fi
    kill -0 "$KB_PID" 2>/dev/null || { echo "against-kbroker: kbroker exited" >&2; tail -20 "$W/kbroker.log" >&2; return 1; }
    sleep 0.05 # poll interval of the deadline loop
  done
  echo "against-kbroker: no readiness line within 60 s" >&2
  return 1
}
km_broker_bootstrap() { [ -n "$BOOT" ] && echo "$BOOT"; }
km_broker_stop() {
  [ -n "$KB_PID" ] || return 0
  local pid=$KB_PID rc=0
  KB_PID=
  kill -TERM "$pid" 2>/dev/null
  if ! timeout 60 tail --pid="$pid" -f /dev/null; then
    echo "against-kbroker: kbroker did not exit within 60 s of SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 1
  fi
  wait "$pid" || rc=$?
  echo "against-kbroker: kbroker exited with status $rc after SIGTERM"
  [ "$rc" = 0 ]
}

rc=0
(km_against --record-dir "$REC" "${ARGS[@]}") || rc=$?
# km_against runs in a subshell (it installs an EXIT trap); the broker was started and stopped
# inside it. If it could not be started, there is nothing to check.
if [ "$rc" = 2 ]; then
  echo "against-kbroker: broker start failed; log in $W/kbroker.log" >&2
  tail -30 "$W/kbroker.log" >&2
  exit 2
fi
echo "--- kb_replay_check $REC"
"$CHECK" "$REC" | grep -v '^PASS' | tail -n 60
crc=${PIPESTATUS[0]}
[ "$crc" = 0 ] || { echo "against-kbroker: kb_replay_check failed (status $crc)"; rc=1; }
if grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$W/kbroker.log"; then
  echo "against-kbroker: sanitizer report in the broker log"; rc=1
fi
echo "against-kbroker: broker ERROR lines: $(grep -c ' ERROR ' "$W/kbroker.log")"
grep ' ERROR ' "$W/kbroker.log" | head -20
if [ "$rc" = 0 ] && [ "$KEEP_DIR" = 0 ]; then
  rm -rf "$W"
else
  echo "against-kbroker: work dir kept: $W"
fi
echo "against-kbroker: $([ "$rc" = 0 ] && echo PASS || echo FAIL)"
exit "$rc"
