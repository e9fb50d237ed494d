#!/usr/bin/env bash
# Java 4.x client suite (tests/java/client-tests, kafka-clients from tests/peers/versions.env)
# against any broker. Builds the jar on first use (tests/peers/mvn-build.sh: Maven offline, online
# only if something is not cached).
#
#   java.sh --bootstrap HOST:PORT [--only SUBSTRING]... [--group-protocol classic|consumer]
#
# KM_BOOTSTRAP stands in for --bootstrap. CLIENT_TESTS_JAVA_OPTS overrides the JVM options.
# Closing line: "N passed, N failed".
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
JAR=$("$REPO/tests/peers/mvn-build.sh" "$REPO/tests/java/client-tests" client-tests.jar)
# shellcheck disable=SC2086
exec java ${CLIENT_TESTS_JAVA_OPTS:--Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto} \
  -jar "$JAR" "$@"
