#!/usr/bin/env bash
# coord_failover.sh -- issue 4: "A consumer group and a transactional producer keep working
# across a kill of the broker that hosts their coordinator", on 3 separate brokers (RF 3,
# min.insync.replicas=2, internal topics with 3 replicas) and a controller-only node, so that
# any broker may die.
#
#   tests/broker_cluster/coord_failover.sh [--backend kbroker|kafka] [--build DIR]
#                                          [--base-port P] [--kbroker PATH]
#                                          [--controllers separate|node1]
#   (node1: node 1 is also the single controller; a kill of node 1 then stops leader moves)
#
# tests/broker_txn/java's "failover" scenario (Java 4.4 client) runs a consumer group and a
# transactional producer on a 3-partition topic, finds the group coordinator with
# describeConsumerGroups, prints "KILL <id>"; this driver kills that broker with SIGKILL
# (cluster.sh kill) and lets the scenario go on: the committed offsets must be read back through
# the new coordinator, the producer (re-initialised if it must be) commits and aborts
# transactions whose markers go to partitions led by the surviving brokers, the group consumer
# reads exactly the committed records and commits, and a read_committed reader sees exactly the
# committed records. --backend kafka runs the same against Apache Kafka 4.4 (proves the test).
# Exit 0 pass, 1 fail, 2 setup error (no java/mvn, the cluster did not start).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
BACKEND=kbroker BUILD=$REPO/build BASE_PORT=21892 KBROKER= CONTROLLERS=separate
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) BACKEND=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --base-port) BASE_PORT=$2; shift 2 ;;
    --kbroker) KBROKER=$2; shift 2 ;;
    --controllers) CONTROLLERS=$2; shift 2 ;;
    *) echo "usage: $0 [--backend kbroker|kafka] [--build DIR] [--base-port P] [--kbroker PATH]" >&2; exit 64 ;;
  esac
done
NAME=coord-failover-$BACKEND
W=$BUILD/tests/broker_cluster/coord-failover-$BACKEND
export KPEER_HOME=${KPEER_HOME:-$W/kpeer}
now_ms() { date +%s%3N; }
say() { echo "coord_failover[$BACKEND]: $*"; }
cl() { "$REPO/tests/cluster/cluster.sh" "$1" --name "$NAME" "${@:2}"; }
JPID=
cleanup() {
  [ -n "$JPID" ] && kill "$JPID" 2>/dev/null || true
  cl stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
command -v java >/dev/null && command -v mvn >/dev/null || { say "java/mvn missing"; exit 2; }
JAR=$("$REPO/tests/peers/mvn-build.sh" "$REPO/tests/broker_txn/java" txn-tests.jar) || { say "cannot build txn-tests"; exit 2; }
rm -rf "$W"
mkdir -p "$W"

OV=(--override min.insync.replicas=2 --override offsets.topic.replication.factor=3
    --override offsets.topic.num.partitions=3 --override transaction.state.log.replication.factor=3
    --override transaction.state.log.num.partitions=3 --override transaction.state.log.min.isr=2
    --override group.initial.rebalance.delay.ms=0 --override unclean.leader.election.enable=false
    --override broker.session.timeout.ms=3000 --override broker.heartbeat.interval.ms=500)
KB=()
[ -n "$KBROKER" ] && KB=(--kbroker "$KBROKER")
say "starting 3 brokers and a controller ($BACKEND, base port $BASE_PORT)"
cl start --backend "$BACKEND" --controllers "$CONTROLLERS" --base-port "$BASE_PORT" --build "$BUILD" \
  "${KB[@]}" "${OV[@]}" --timeout 120 || { say "SETUP ERROR: the cluster did not start"; exit 2; }
# retried: a broker may still be registering with the controller when the nodes first answer
end=$(($(now_ms) + 60000))
until cl create-topic cf 3 min.insync.replicas=2 >"$W/create-topic.log" 2>&1; do
  if [ "$(now_ms)" -gt "$end" ]; then
    cat "$W/create-topic.log"
    say "SETUP ERROR: create-topic"
    exit 2
  fi
  sleep 1 # between attempts of a deadline-bounded retry
done
cat "$W/create-topic.log"
BS=$(cl bootstrap)

mkfifo "$W/go"
java -Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -jar "$JAR" failover \
  --bootstrap "$BS" --topic cf <"$W/go" >"$W/java.log" 2>&1 &
JPID=$!
exec 3>"$W/go" # the scenario's stdin stays open until the go-ahead
end=$(($(now_ms) + 180000))
until grep -q '^KILL [0-9]' "$W/java.log"; do
  if ! kill -0 "$JPID" 2>/dev/null || [ "$(now_ms)" -gt "$end" ]; then
    cat "$W/java.log"
    say "FAIL: the scenario did not reach the kill"
    exit 1
  fi
  sleep 0.05 # poll interval of a deadline-bounded wait for the scenario's line
done
VICTIM=$(sed -n 's/^KILL \([0-9]*\)$/\1/p' "$W/java.log" | head -1)
grep '^group coordinator' "$W/java.log" || true
say "kill -9 of broker $VICTIM (the group coordinator)"
cl kill "$VICTIM"
echo go >&3
exec 3>&-
rc=0
wait "$JPID" || rc=$?
JPID=
cat "$W/java.log"
if [ "$rc" = 0 ] && grep -q '^1 passed, 0 failed' "$W/java.log"; then
  say "PASS"
  exit 0
fi
say "FAIL (exit $rc); broker logs under $KPEER_HOME/$NAME"
exit 1
