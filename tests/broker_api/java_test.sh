#!/usr/bin/env bash
# java_test.sh KBROKER BUILD_DIR -- the Apache Kafka Java client 4.x against the real kbroker
# (tests/java/broker-tests, built with tests/peers/mvn-build.sh; fails loudly without java/mvn
# or when Maven Central cannot be reached on a cold ~/.m2).
set -euo pipefail
KB=${1:?kbroker path}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
command -v java >/dev/null || { echo "FAIL: java not found"; exit 1; }
JAR=$("$REPO/tests/peers/mvn-build.sh" "$REPO/tests/java/broker-tests" broker-tests.jar) ||
  { echo "FAIL: cannot build tests/java/broker-tests"; exit 1; }

W=$(mktemp -d "${TMPDIR:-/tmp}/kbat-java.XXXXXX")
PID=
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill -KILL "$PID" 2>/dev/null || true; fi
  rm -rf "$W"
}
trap cleanup EXIT
cat >"$W/server.properties" <<EOF
node.id=1
listeners=PLAINTEXT://127.0.0.1:0
log.dirs=$W/data
EOF
mkfifo "$W/ready"
"$KB" --config "$W/server.properties" >"$W/ready" 2>"$W/broker.log" &
PID=$!
exec 9<"$W/ready"
read -r -t 60 line <&9 || { echo "FAIL: kbroker did not start"; tail "$W/broker.log"; exit 1; }
exec 9<&-
BOOT=$(echo "$line" | grep -o '127\.0\.0\.1:[0-9]*' | head -1)
rc=0
timeout 400 java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -jar "$JAR" "$BOOT" || rc=$?
kill -TERM "$PID"
timeout 30 tail --pid="$PID" -f /dev/null || { echo "FAIL: kbroker did not stop"; rc=1; }
wait "$PID" || { echo "FAIL: kbroker exit status"; rc=1; }
PID=
if [ "$rc" -ne 0 ]; then tail -n 40 "$W/broker.log"; fi
exit "$rc"
