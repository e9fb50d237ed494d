#!/usr/bin/env bash
# mvn-build.sh PROJECT_DIR JAR_NAME
#
# Builds one of the small Maven projects under tests/java (peer-tools, oracle) when its jar is
# missing or older than its pom/sources: `mvn -o -q package` first (offline, from ~/.m2), then
# online if something is not cached yet. Kafka versions come from versions.env. Fails loudly
# (exit 2) when the build is impossible, e.g. Maven Central unreachable on a cold ~/.m2.
# Prints the jar path on stdout.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
. "$HERE/versions.env"
PROJ=$(cd "$1" && pwd)
JAR=$PROJ/target/$2
die() { echo "mvn-build: $*" >&2; exit 2; }
command -v mvn >/dev/null || die "mvn not found on PATH (apt-get install maven)"

stale=0
if [ ! -f "$JAR" ] || [ ! -d "$PROJ/target/lib" ]; then
  stale=1
elif [ -n "$(find "$PROJ/pom.xml" "$PROJ/src" "$HERE/versions.env" -newer "$JAR" -type f 2>/dev/null | head -1)" ]; then
  stale=1
fi
if [ "$stale" = 1 ]; then
  extra=()
  read -r -a extra <<<"${KPEER_MVN_ARGS:-}"
  args=("${extra[@]}" -B -q -Dstyle.color=never -f "$PROJ/pom.xml" package
        -Dkafka.version="$KAFKA_4_VERSION" -Dslf4j.version="$KAFKA_4_SLF4J_VERSION"
        -Dmaven.dep.plugin.version="$MAVEN_DEP_PLUGIN")
  mkdir -p "$PROJ/target"
  log=$PROJ/target/mvn-build.log
  if ! mvn -o "${args[@]}" >"$log" 2>&1; then
    echo "mvn-build: building $(basename "$PROJ") online (not everything is in ~/.m2)" >&2
    if ! mvn "${args[@]}" >"$log" 2>&1; then
      grep -E 'ERROR' "$log" | head -20 >&2 || true
      if grep -qiE 'could not transfer|transfer failed|unknownhost|connect timed out|connection refused|network is unreachable' "$log"; then
        die "FAILED: Maven Central cannot be reached and $(basename "$PROJ")'s dependencies are not cached in ~/.m2"
      fi
      die "FAILED: mvn package of $PROJ failed (log: $log)"
    fi
  fi
  [ -f "$JAR" ] || die "FAILED: $JAR was not produced (log: $log)"
  touch "$JAR"
fi
echo "$JAR"
