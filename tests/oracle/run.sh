#!/usr/bin/env bash
# tests/oracle/run.sh BUILD_DIR — ctest codec_oracle: kmirror's C codec against Apache Kafka's.
#
#  1. builds the Java oracle (tests/java/oracle, kafka-clients from tests/peers/versions.env)
#  2. oracle selfcheck: the oracle agrees with itself and with the library (every vector decodes,
#     re-encodes to the same bytes, every field non-default)
#  3. oracle gen: K vectors per (api, kind, version) claimed by proto/schema/**.kps (metadata
#     records included: framed by Kafka's MetadataRecordSerde), encoded by Apache Kafka's
#     classes (or, for the KIP-1279 additions, by its generic protocol types);
#     --strict: a claimed (api, kind, version) that the oracle has no layout for fails the test
#  4. BUILD_DIR/bin/kp_vectors check on them (our decoder + encoder must reproduce the bytes)
#  5. BUILD_DIR/bin/kp_vectors dump, then oracle verify on that (Kafka decodes our bytes and every
#     field must equal our JSON)
# Fails (never skips) when java/mvn/the jars or kp_vectors are missing.
# Env: ORACLE_COUNT (3), ORACLE_SEED (1).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: run.sh BUILD_DIR" >&2; exit 64; }
BUILD=$(cd "$1" && pwd)
K=${ORACLE_COUNT:-3}
SEED=${ORACLE_SEED:-1}
WORK=$BUILD/oracle
mkdir -p "$WORK"
fail=0

KPV=$BUILD/bin/kp_vectors
if [ ! -x "$KPV" ]; then
  echo "codec_oracle: FAILED: $KPV does not exist (build the kp_vectors tool: docs/codec.md)" >&2
  exit 1
fi

JAR=$("$REPO/tests/peers/mvn-build.sh" "$REPO/tests/java/oracle" oracle.jar)
oracle() { java -Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -jar "$JAR" "$@"; }

echo "== oracle selfcheck"
oracle selfcheck --schema-dir "$REPO/proto/schema" --count "$K" --seed "$SEED" || fail=1

echo "== oracle gen -> $WORK/kafka-vectors.txt"
oracle gen "$WORK/kafka-vectors.txt" --schema-dir "$REPO/proto/schema" --count "$K" --seed "$SEED" --strict || fail=1

echo "== kp_vectors check (our codec on Kafka's bytes)"
"$KPV" check "$WORK/kafka-vectors.txt" || fail=1

echo "== kp_vectors dump -> $WORK/kmirror-vectors.txt"
"$KPV" dump "$WORK/kmirror-vectors.txt" --seed "$SEED" --count "$K" || { echo "codec_oracle: kp_vectors dump failed" >&2; exit 1; }

echo "== oracle verify (Kafka on our bytes and JSON)"
oracle verify "$WORK/kmirror-vectors.txt" || fail=1

if [ $fail != 0 ]; then
  echo "codec_oracle: FAILED (see above; vectors in $WORK)"
  exit 1
fi
echo "codec_oracle: PASS"
