#!/usr/bin/env bash
# against-kafka.sh: proves the client suites right against real Apache Kafka. Starts a 1-node
# KRaft cluster (tests/peers/kafka-cluster.sh, version from tests/peers/versions.env), runs
# tests/clients/run-all.sh against it, stops it (also on failure or Ctrl-C).
#
#   against-kafka.sh [--name N] [--base-port P] [--override k=v]... [--record-dir DIR] [--keep]
#                    [run-all options]
#
# Defaults: --name clients-vs-kafka, --base-port 19292 (client port; controller P+1).
# --override k=v goes to every node's server.properties (e.g. to show the suites catching a broker
# that behaves differently: log.message.timestamp.type=LogAppendTime).
# --record-dir DIR is exported as KM_RECORD_DIR to the command that starts the broker (Kafka
# ignores it; kbroker will record every request it receives there) and to run-all.sh.
# Env: KPEER_HOME, CLIENTS_KAFKA_VERSION (default $KAFKA_4_VERSION), CLIENTS_KAFKA_HEAP (512m).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PEERS=$HERE/../peers
# shellcheck source=../peers/versions.env
. "$PEERS/versions.env"
. "$HERE/lib/against.sh"
NAME=clients-vs-kafka
PORT=19292
VERSION=${CLIENTS_KAFKA_VERSION:-$KAFKA_4_VERSION}
ARGS=()
OVR=()
while [ $# -gt 0 ]; do
  case "$1" in
    --name) NAME=$2; shift 2 ;;
    --base-port) PORT=$2; shift 2 ;;
    --override) OVR+=(--override "$2"); shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done

# Tells the Java suite it runs against the reference broker (Main.producerProps).
export KM_CLIENTS_REFERENCE=kafka
km_broker_name() { echo "Apache Kafka $VERSION (1 node)"; }
start_once() {
  # KM_RECORD_DIR (if set) is in this command's environment; Kafka does not use it.
  "$PEERS/kafka-cluster.sh" start --name "$NAME" --nodes 1 --version "$VERSION" --base-port "$PORT" \
    --heap "${CLIENTS_KAFKA_HEAP:-512m}" "${OVR[@]}"
}
km_broker_start() {
  "$PEERS/kafka-libs.sh" "$VERSION" >/dev/null || return 1
  start_once && return 0
  # One retry, for two rare failures of kafka-cluster.sh start seen here: "node 1 exited during
  # startup" with an empty node log (1 in ~10 starts at load 6; apparently the pid is checked
  # before `setsid java` has exec'd), and "storage format failed" when the random cluster id
  # starts with '-' (StorageTool takes it for an option; 1 start in 64). A broker that really
  # cannot start fails twice.
  echo "against-kafka: start failed; stopping what is left and trying once more" >&2
  "$PEERS/kafka-cluster.sh" stop --name "$NAME" >/dev/null 2>&1 || true
  start_once
}
km_broker_bootstrap() { "$PEERS/kafka-cluster.sh" bootstrap --name "$NAME"; }
km_broker_stop() { "$PEERS/kafka-cluster.sh" stop --name "$NAME"; }

km_against "${ARGS[@]}"
