#!/usr/bin/env bash
# e2e.sh KBROKER TXN_PROTO OUT_DIR -- the transaction coordinator end to end (label interop).
#
# Starts the real kbroker on a free loopback port and runs against it:
#   1. the transaction tests of the Java 4.x client suite (tests/java/client-tests via
#      tests/clients/java.sh): 9 interleaved transactions over 2 partitions with 3 aborted, a
#      read_committed consumer seeing only committed records in order, a read_uncommitted one
#      seeing all, describeTransactions/listTransactions, the LSO held by an open transaction,
#      fencing;
#   2. txn_proto (raw protocol, every transaction API version by version) against the process;
#   3. tests/broker_txn/java (Java 4.x producer): transaction timeout, fencing, and a broker
#      killed (SIGKILL) and restarted on the same port in the middle of two transactions: one
#      completes after the restart, the other times out there; txn_clients.py: the
#      transactional producers of librdkafka (commit/abort, fencing, sendOffsetsToTransaction)
#      and kafka-python, in the clients venv (tests/clients/setup-venv.sh);
#   4. when Apache Kafka's jars are cached (tests/peers/kafka-libs.sh), Kafka's DumpLogSegments
#      --transaction-log-decoder reads every __transaction_state segment kbroker wrote;
#   5. SIGTERM: kbroker exits 0.
# Waits are event driven (grep on a followed log, wait on pids) with deadlines. Exit 77 (skipped)
# when java or maven is missing.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
KB=$1
PROTO=$2
OUT=$3/e2e
KPEER_HOME=${KPEER_HOME:-$REPO/.kpeer}
. "$REPO/tests/peers/versions.env"

command -v java >/dev/null && command -v mvn >/dev/null || { echo "e2e: java/mvn missing: skipped"; exit 77; }

rm -rf "$OUT"
mkdir -p "$OUT/data"
fails=0
KPID=
JPID=
cleanup() {
  [ -n "$JPID" ] && kill -KILL "$JPID" 2>/dev/null
  [ -n "$KPID" ] && kill -KILL "$KPID" 2>/dev/null
  exec 7>&- 2>/dev/null
  true
}
trap cleanup EXIT
fail() { echo "e2e: FAIL $*"; fails=$((fails + 1)); }
ok() { echo "e2e: ok   $*"; }

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$OUT/server.properties" <<EOF
node.id=1
listeners=PLAINTEXT://127.0.0.1:$PORT
log.dirs=$OUT/data
transaction.state.log.num.partitions=10
offsets.topic.num.partitions=5
EOF
BOOT=127.0.0.1:$PORT

# Wait (deadline $3 s) until file $1 contains a line matching $2.
wait_line() {
  timeout "$3" grep -m1 -q -- "$2" <(tail -n +1 -F "$1" 2>/dev/null)
}

start_broker() {
  : >"$OUT/kbroker.out"
  "$KB" --config "$OUT/server.properties" >>"$OUT/kbroker.out" 2>>"$OUT/kbroker.log" &
  KPID=$!
  if ! wait_line "$OUT/kbroker.out" "kbroker started" 30; then
    tail -20 "$OUT/kbroker.log"
    echo "e2e: kbroker did not start"
    exit 1
  fi
}

start_broker
echo "e2e: kbroker pid $KPID on $BOOT (log $OUT/kbroker.log)"

# 1. the client suite's transaction tests
if "$REPO/tests/clients/java.sh" --bootstrap "$BOOT" --only "transactional producer:" \
    --only "read_committed consumer" --only "read_uncommitted consumer" \
    --only "open transaction holds" --only "fences the first" \
    --only "describeTransactions/listTransactions" >"$OUT/client-suite.log" 2>&1 &&
   grep -q "^6 passed, 0 failed" "$OUT/client-suite.log"; then
  ok "client suite: $(tail -1 "$OUT/client-suite.log")"
else
  cat "$OUT/client-suite.log"
  fail "client suite transaction tests"
fi

# 2. raw protocol conformance (FindCoordinator belongs to broker/group when it is linked)
skip_fc=
grep -q "FindCoordinator is served by another component" "$OUT/kbroker.log" &&
  skip_fc="--skip-find-coordinator --groups"
if "$PROTO" --port "$PORT" $skip_fc >"$OUT/txn_proto.log" 2>&1; then
  ok "txn_proto: $(tail -1 "$OUT/txn_proto.log")"
else
  grep FAIL "$OUT/txn_proto.log"
  fail "txn_proto: $(tail -1 "$OUT/txn_proto.log")"
fi

# 3. Java scenarios
JAR=$("$REPO/tests/peers/mvn-build.sh" "$HERE/java" txn-tests.jar) || { echo "e2e: cannot build txn-tests"; exit 1; }
JOPTS=${CLIENT_TESTS_JAVA_OPTS:--Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto}
for scen in timeout fence; do
  # shellcheck disable=SC2086
  if timeout 300 java $JOPTS -jar "$JAR" "$scen" --bootstrap "$BOOT" >"$OUT/java-$scen.log" 2>&1; then
    ok "java $scen: $(tail -1 "$OUT/java-$scen.log")"
  else
    cat "$OUT/java-$scen.log"
    fail "java $scen"
  fi
done

mkfifo "$OUT/restart.in"
# shellcheck disable=SC2086
timeout 300 java $JOPTS -jar "$JAR" restart --bootstrap "$BOOT" <"$OUT/restart.in" >"$OUT/java-restart.log" 2>&1 &
JPID=$!
exec 7>"$OUT/restart.in"
if wait_line "$OUT/java-restart.log" "^RESTART" 120; then
  kill -KILL "$KPID"
  wait "$KPID" 2>/dev/null
  echo "e2e: kbroker killed (SIGKILL) with two transactions open; restarting"
  start_broker
  grep "txn.*loaded" "$OUT/kbroker.log" | tail -1
  echo GO >&7
else
  fail "java restart: no RESTART line"
fi
exec 7>&-
if wait "$JPID" && grep -q "^[1-9][0-9]* passed, 0 failed" "$OUT/java-restart.log"; then
  ok "java restart: $(tail -1 "$OUT/java-restart.log")"
else
  cat "$OUT/java-restart.log"
  fail "java restart"
fi
JPID=

if PY=$("$REPO/tests/clients/setup-venv.sh" 2>"$OUT/venv.log"); then
  groups=
  [ -n "$skip_fc" ] || groups=--no-groups
  # shellcheck disable=SC2086
  if timeout 300 "$PY" "$HERE/txn_clients.py" --bootstrap "$BOOT" $groups >"$OUT/txn_clients.log" 2>&1 &&
     grep -q "^[1-9][0-9]* passed, 0 failed" "$OUT/txn_clients.log"; then
    ok "librdkafka / kafka-python: $(tail -1 "$OUT/txn_clients.log")"
  else
    grep -v '^%' "$OUT/txn_clients.log"
    fail "librdkafka / kafka-python transactions"
  fi
else
  echo "e2e: no clients venv (see $OUT/venv.log): librdkafka / kafka-python skipped"
fi

# 4. Kafka's own tool reads our __transaction_state
LIBS=$KPEER_HOME/kafka-$KAFKA_4_VERSION/libs
if [ -d "$LIBS" ]; then
  CP=$(find "$LIBS" -name '*.jar' | tr '\n' ':')
  segs=$(find "$OUT/data" -path '*__transaction_state-*' -name '*.log' -size +0c | sort)
  # shellcheck disable=SC2086
  java -cp "$CP" org.apache.kafka.tools.DumpLogSegments --transaction-log-decoder --print-data-log \
    --files "$(echo $segs | tr ' ' ',')" >"$OUT/dump.log" 2>&1
  n=$(grep -c '"transactionStatus":' "$OUT/dump.log")
  bad=$(grep -ci 'exception\|could not\|unknown' "$OUT/dump.log")
  if [ "$n" -gt 0 ] && [ "$bad" = 0 ]; then
    ok "Kafka's DumpLogSegments decoded $n __transaction_state records ($(grep -c '"transactionStatus":"CompleteCommit"' "$OUT/dump.log") CompleteCommit, $(grep -c '"transactionStatus":"CompleteAbort"' "$OUT/dump.log") CompleteAbort)"
  else
    grep -i 'exception\|could not\|unknown' "$OUT/dump.log" | head -5
    fail "DumpLogSegments: $n records, $bad problems"
  fi
else
  echo "e2e: $LIBS missing: DumpLogSegments check skipped (tests/peers/kafka-libs.sh fetches it)"
fi

# 5. clean stop
kill -TERM "$KPID"
wait "$KPID"
rc=$?
KPID=
[ "$rc" = 0 ] && ok "SIGTERM: exit 0" || fail "kbroker exited with $rc after SIGTERM"

echo "e2e: $fails failed"
[ "$fails" = 0 ]
