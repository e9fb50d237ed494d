#!/usr/bin/env bash
# interop.sh KBROKER [--no-java] -- consumer groups with real clients against the real kbroker:
#
#   1. kbroker on an ephemeral loopback port, fresh log dir;
#   2. e2e_groups.py --phase before (librdkafka two-member handover, static members, kafka-python
#      commit/resume, simple commits, DeleteGroups, ListGroups);
#   3. kbroker restarted (SIGTERM, exit 0, same log dir): it must load the groups back;
#   4. e2e_groups.py --phase after (committed offsets, groups, resuming after the restart);
#   5. transactional offsets (e2e_txn_offsets.py: sendOffsetsToTransaction, commit/abort,
#      UNSTABLE_OFFSET_COMMIT) when the broker serves TxnOffsetCommit (the transaction
#      coordinator, broker/txn, calls this coordinator through kb_txn_group_hook.h);
#   6. the client conformance suites' group tests against it: rdkafka_group.py (eager and
#      cooperative, the full suite), kafka_python.py and the Java 4.x suite (tests/clients/java.sh),
#      both --only "consumer group";
#   7. kbroker stopped: exit 0 within a deadline.
#
# Python clients come from tests/clients/setup-venv.sh (confluent-kafka, kafka-python); Java from
# tests/peers/mvn-build.sh (Maven offline once cached). Closing line "N passed, N failed" over the
# steps; exit 0 only if every step passed. Waits use deadlines (read -t, timeout), never sleeps.
set -uo pipefail
KB=${1:?kbroker path}
JAVA=1
[ "${2:-}" = "--no-java" ] && JAVA=0
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CLIENTS=$REPO/tests/clients
PY=$("$CLIENTS/setup-venv.sh") || { echo "FAIL: cannot prepare the Python venv"; exit 1; }

W=$(mktemp -d "${TMPDIR:-/tmp}/kbgroup.XXXXXX")
PID=
PASSED=0
FAILED=0
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill -KILL "$PID" 2>/dev/null || true; fi
  rm -rf "$W"
}
trap cleanup EXIT
pass() { PASSED=$((PASSED + 1)); echo "PASS $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL $1${2:+: $2}"; }

cat >"$W/server.properties" <<EOF
node.id=1
listeners=PLAINTEXT://127.0.0.1:0
log.dirs=$W/data
offsets.topic.num.partitions=10
group.initial.rebalance.delay.ms=300
metrics.listener=http://127.0.0.1:0
EOF

BOOT=
start_broker() {
  rm -f "$W/ready"
  mkfifo "$W/ready"
  "$KB" --config "$W/server.properties" >"$W/ready" 2>>"$W/broker.log" &
  PID=$!
  exec 9<"$W/ready"
  if ! read -r -t 60 line <&9; then
    exec 9<&-
    return 1
  fi
  exec 9<&-
  BOOT=$(echo "$line" | grep -o '127\.0\.0\.1:[0-9]*' | head -1)
  [ -n "$BOOT" ]
}

stop_broker() {
  local rc=0
  kill -TERM "$PID"
  timeout 30 tail --pid="$PID" -f /dev/null || rc=1
  wait "$PID" || rc=1
  PID=
  return $rc
}

# run NAME CMD...: a step whose command prints its own PASS/FAIL lines and "N passed, N failed".
run() {
  local name=$1 rc
  shift
  echo "=== $name"
  "$@" 2>&1 | tee "$W/step.log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" = 0 ] && grep -qE '^[0-9]+ passed, 0 failed' "$W/step.log"; then
    pass "$name"
  else
    fail "$name" "exit $rc"
  fi
}

if start_broker; then pass "kbroker starts ($BOOT)"; else fail "kbroker starts"; tail -n 30 "$W/broker.log"; exit 1; fi
run "groups before the restart" timeout 600 "$PY" "$HERE/e2e_groups.py" --bootstrap "$BOOT" \
  --phase before --state "$W/state.json"
if stop_broker; then pass "kbroker stops on SIGTERM with status 0"; else fail "kbroker stops"; fi
if start_broker; then pass "kbroker restarts ($BOOT)"; else fail "kbroker restarts"; tail -n 30 "$W/broker.log"; exit 1; fi
# one line per __consumer_offsets partition the node leads; the count covers every loaded group
# (partitions load in the background after the start: poll the log with a deadline)
loaded_re='\[group\] __consumer_offsets-[0-9]+: coordinator at epoch [0-9]+, loaded up to offset [0-9]+ .*\([1-9][0-9]* group\(s\) in all\)'
loaded=0
for _ in $(seq 1 300); do
  if grep -Eq "$loaded_re" "$W/broker.log"; then loaded=1; break; fi
  sleep 0.1
done
if [ "$loaded" = 1 ]; then
  pass "the groups are loaded from __consumer_offsets at start"
else
  fail "the groups are loaded from __consumer_offsets at start"
fi
run "groups after the restart" timeout 600 "$PY" "$HERE/e2e_groups.py" --bootstrap "$BOOT" \
  --phase after --state "$W/state.json"
"$PY" "$HERE/e2e_txn_offsets.py" --bootstrap "$BOOT" --probe
case $? in
  0) run "transactional offsets (sendOffsetsToTransaction)" timeout 300 "$PY" \
       "$HERE/e2e_txn_offsets.py" --bootstrap "$BOOT" ;;
  3) echo "(transactional offsets not run: this kbroker has no transaction coordinator)" ;;
  *) fail "probe for TxnOffsetCommit" ;;
esac
run "librdkafka group suite (tests/clients/rdkafka_group.py)" timeout 600 "$PY" \
  "$CLIENTS/rdkafka_group.py" --bootstrap "$BOOT"
run "kafka-python group test (tests/clients/kafka_python.py)" timeout 600 "$PY" \
  "$CLIENTS/kafka_python.py" --bootstrap "$BOOT" --only "bootstrap" --only "consumer group"
if [ "$JAVA" = 1 ]; then
  run "Java 4.x group test (tests/clients/java.sh)" timeout 600 "$CLIENTS/java.sh" \
    --bootstrap "$BOOT" --only "bootstrap" --only "consumer group"
fi
MPORT=$(grep -o 'metrics on http://127\.0\.0\.1:[0-9]*' "$W/broker.log" | tail -1 | grep -o '[0-9]*$')
if curl -s --max-time 10 "http://127.0.0.1:$MPORT/metrics" >"$W/metrics.txt" &&
   grep -q '^kbroker_groups{state="Empty"} [1-9]' "$W/metrics.txt" &&
   grep -q '^kbroker_group_rebalances_total [1-9]' "$W/metrics.txt" &&
   grep -q '^kbroker_group_committed_offsets [1-9]' "$W/metrics.txt"; then
  pass "group metrics on /metrics"
else
  fail "group metrics on /metrics" "$(grep kbroker_group "$W/metrics.txt" 2>/dev/null | tr '\n' ' ')"
fi
if stop_broker; then pass "kbroker stops on SIGTERM with status 0"; else fail "kbroker stops"; fi
if grep -E 'ERROR|AddressSanitizer|runtime error' "$W/broker.log" >/dev/null; then
  fail "broker log free of errors" "$(grep -E 'ERROR|AddressSanitizer|runtime error' "$W/broker.log" | head -3)"
else
  pass "broker log free of errors"
fi
[ "$FAILED" = 0 ] || tail -n 60 "$W/broker.log"
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
