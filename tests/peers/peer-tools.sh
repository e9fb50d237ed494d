#!/usr/bin/env bash
# peer-tools.sh SUBCOMMAND [--opt value]...
#
# Runs tests/java/peer-tools (Java Admin/producer/consumer CLI), building it first when needed.
# Subcommands: wait-ready, describe-cluster, admin-create-topic, produce, consume-verify,
# consume-group
# (see tests/java/peer-tools/src/main/java/kmirror/peertools/Main.java).
# PEER_TOOLS_JAVA_OPTS overrides the JVM options (default: small heap, fast start).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
JAR=$("$HERE/mvn-build.sh" "$REPO/tests/java/peer-tools" peer-tools.jar)
# shellcheck disable=SC2086
exec java ${PEER_TOOLS_JAVA_OPTS:--Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto} \
  -jar "$JAR" "$@"
