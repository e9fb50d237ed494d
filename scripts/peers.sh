#!/usr/bin/env bash
# Fetch the Apache Kafka jars the interop suites use (versions pinned in
# tests/peers/versions.env; Maven's local repository caches them). Fails loudly when Maven
# Central cannot be reached and nothing is cached.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/peers/versions.env
export KPEER_HOME=${KPEER_HOME:-$(pwd)/.kpeer}
tests/peers/kafka-libs.sh "$KAFKA_4_VERSION" "$KPEER_HOME/kafka-$KAFKA_4_VERSION"
# The older source versions of the interop suites (brokers only; MM2 runs from the 4.x jars).
tests/peers/kafka-libs.sh --no-mm2 "$KAFKA_39_VERSION" "$KPEER_HOME/kafka-$KAFKA_39_VERSION"
tests/peers/kafka-libs.sh --no-mm2 "$KAFKA_28_VERSION" "$KPEER_HOME/kafka-$KAFKA_28_VERSION"
