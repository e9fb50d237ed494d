#!/usr/bin/env bash
# interop_kafka_cluster_smoke: a real 3-node Apache Kafka 4.x cluster (KRaft) takes traffic from
# the Java clients and stops cleanly.
#   1. start 3 nodes (tests/peers/kafka-cluster.sh), 2. create a topic RF 3, min.insync.replicas=2
#   (Java Admin), 3. produce 10,000 records (acks=all, idempotent), 4. consume them all and check
#   count, per-partition order, content and an end-to-end SHA-256, 5. stop and check that no
#   process and no listener is left.
# Fails (never skips) when Maven, Java or the jars are unavailable.
# Env: SMOKE_BASE_PORT (default 19192), SMOKE_RECORDS (10000), KPEER_HOME.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PEERS=$HERE/../peers
# shellcheck source=../peers/versions.env
. "$PEERS/versions.env"
NAME=interop-smoke
PORT=${SMOKE_BASE_PORT:-19192}
N=${SMOKE_RECORDS:-10000}
TOPIC=smoke-rf3
T0=$(date +%s%3N)
step() { echo "[smoke +$(( $(date +%s%3N) - T0 )) ms] $*"; }

cleanup() {
  local rc=$?
  if [ -n "${STARTED:-}" ]; then
    "$PEERS/kafka-cluster.sh" stop --name "$NAME" || true
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "resolving Kafka $KAFKA_4_VERSION jars and building peer-tools"
"$PEERS/kafka-libs.sh" "$KAFKA_4_VERSION" >/dev/null
"$PEERS/mvn-build.sh" "$HERE/../java/peer-tools" peer-tools.jar >/dev/null

step "starting 3-node cluster '$NAME' on base port $PORT"
STARTED=1
"$PEERS/kafka-cluster.sh" start --name "$NAME" --nodes 3 --version "$KAFKA_4_VERSION" --base-port "$PORT"
BS=$("$PEERS/kafka-cluster.sh" bootstrap --name "$NAME")
KH=${KPEER_HOME:-$(cd "$HERE/../.." && pwd)/.kpeer}
PIDS=$(cat "$KH/$NAME"/node*.pid)
"$PEERS/kafka-cluster.sh" status --name "$NAME"

step "creating topic $TOPIC (3 partitions, RF 3, min.insync.replicas=2)"
"$PEERS/peer-tools.sh" admin-create-topic --bootstrap "$BS" --topic "$TOPIC" --partitions 3 --rf 3 \
  --config min.insync.replicas=2

step "producing $N records (acks=all, idempotent)"
out=$("$PEERS/peer-tools.sh" produce --bootstrap "$BS" --topic "$TOPIC" --count "$N" --seed 7 \
  --acks all --idempotent true)
echo "$out"
SHA=$(sed -n 's/.*sha256=\([0-9a-f]*\).*/\1/p' <<<"$out")
[ ${#SHA} = 64 ] || { echo "smoke: producer printed no checksum" >&2; exit 1; }

step "consuming and verifying $N records"
"$PEERS/peer-tools.sh" consume-verify --bootstrap "$BS" --topic "$TOPIC" --count "$N" --seed 7 \
  --expect-sha256 "$SHA"

step "stopping the cluster"
"$PEERS/kafka-cluster.sh" stop --name "$NAME"
STARTED=
left=0
for pid in $PIDS; do
  if kill -0 "$pid" 2>/dev/null; then echo "smoke: node process $pid is still alive" >&2; left=1; fi
done
for ((i = 0; i < 3; i++)); do
  for p in $((PORT + 10 * i)) $((PORT + 10 * i + 1)); do
    if [ -n "$(ss -Hltn "( sport = :$p )")" ]; then echo "smoke: port $p still listening" >&2; left=1; fi
  done
done
if "$PEERS/kafka-cluster.sh" status --name "$NAME" >/dev/null; then
  echo "smoke: status still reports running nodes" >&2; left=1
fi
[ $left = 0 ] || exit 1
step "PASS: 3-node Kafka $KAFKA_4_VERSION cluster started, took $N records, stopped clean"
