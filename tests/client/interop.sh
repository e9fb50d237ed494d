#!/usr/bin/env bash
# client_interop: kp_client against a real single-node Apache Kafka 4.4.0 (KRaft) cluster:
# ApiVersions negotiation and fallback, Metadata refresh, CreateTopics, Produce + Fetch round
# trip with every record compared, pipelining (tests/client/test_client_broker.c).
# Fails (never skips) when Java, Maven or the jars are unavailable.
#   interop.sh TEST_CLIENT_BROKER_BINARY        Env: KC_INTEROP_PORT (default 19392), KPEER_HOME
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PEERS=$HERE/../peers
# shellcheck source=../peers/versions.env
. "$PEERS/versions.env"
BIN=${1:?usage: interop.sh TEST_CLIENT_BROKER_BINARY}
NAME=kc-interop
PORT=${KC_INTEROP_PORT:-19392}

cleanup() {
  local rc=$?
  if [ -n "${STARTED:-}" ]; then
    "$PEERS/kafka-cluster.sh" stop --name "$NAME" || true
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

STARTED=1
"$PEERS/kafka-cluster.sh" start --name "$NAME" --nodes 1 --version "$KAFKA_4_VERSION" --base-port "$PORT"
BS=$("$PEERS/kafka-cluster.sh" bootstrap --name "$NAME")
"$BIN" --bootstrap "$BS"
