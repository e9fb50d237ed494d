#!/usr/bin/env bash
# Run every kmirror test suite: installs what is missing, builds a normal tree (gcc) and a
# sanitizer tree (clang, ASan+UBSan, libFuzzer), runs the suites, and prints how long each
# part took. Exit status is non-zero if any part failed. Benchmarks never run here.
#
#   scripts/test.sh                 everything
#   KM_FUZZ_SECONDS=10 scripts/test.sh   shorter fuzzing (CI uses the default, 60 s per target)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export KPEER_HOME=${KPEER_HOME:-$ROOT/.kpeer}
export KM_FUZZ_SECONDS=${KM_FUZZ_SECONDS:-60}
JOBS=${KM_JOBS:-2}

declare -a T_NAME T_SECS T_RES T_SUB
failed=0
LOGDIR=$(mktemp -d)
trap 'rm -rf "$LOGDIR"' EXIT
step() { # step NAME command...
    local name=$1; shift
    local t0=$SECONDS rc
    echo
    echo "=== $name"
    "$@"
    rc=$?
    T_NAME+=("$name"); T_SECS+=($((SECONDS - t0))); T_SUB+=(0)
    if [ $rc -eq 0 ]; then T_RES+=(ok); else T_RES+=("FAILED ($rc)"); failed=1; fi
    return $rc
}
ctest_each() { # ctest_each LOG: one table row per test of a ctest run (indented, not in the total)
    local line name secs res
    while IFS= read -r line; do
        [[ $line =~ Test\ +\#[0-9]+:\ ([^ ]+)\ [.\ ]*(\*\*\*)?([A-Za-z][A-Za-z ]*[a-z])\ +([0-9.]+)\ sec ]] || continue
        name=${BASH_REMATCH[1]}; res=${BASH_REMATCH[3]}; secs=${BASH_REMATCH[4]%.*}
        [ "$res" = Passed ] && res=ok
        T_NAME+=("  $name"); T_SECS+=("$secs"); T_RES+=("$res"); T_SUB+=(1)
    done <"$1"
}
ctest_logged() { # ctest_logged LOG DIR INCLUDE-REGEX [EXCLUDE-REGEX]: ctest_labels, output kept
    local log=$1; shift
    ctest_labels "$@" 2>&1 | tee "$log"
}
ctest_labels() { # ctest_labels DIR INCLUDE-REGEX [EXCLUDE-REGEX]
    local args=(--test-dir "$1" -L "$2" --output-on-failure --no-tests=error -j "$JOBS")
    [ -n "${3:-}" ] && args+=(-LE "$3")
    ctest "${args[@]}"
}

step "deps (apt, JDK, Maven)" scripts/deps.sh || { echo "cannot install dependencies" >&2; exit 1; }
step "peers (Apache Kafka jars from Maven Central)" scripts/peers.sh
step "build (gcc)" scripts/build.sh build
step "unit+codec+smoke (gcc)" ctest_labels build 'unit|codec|smoke' 'interop|robust|slow'
# Real Apache Kafka as the mirror's source (issue 7: 4.x, 3.9.x, 2.8.x), its own line and one
# line per version, then the rest of the interop/robust/slow suites.
step "interop: Apache Kafka as mirror source" ctest_logged "$LOGDIR/kafka_source" build 'kafka_source'
ctest_each "$LOGDIR/kafka_source"
step "interop+robust+slow (real clients, Apache Kafka)" ctest_labels build 'interop|robust|slow' 'kafka_source'
step "build (clang, ASan+UBSan, libFuzzer)" \
    env CC=clang scripts/build.sh build-asan -DKM_SANITIZE=ON -DKM_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug
step "unit+codec+smoke+asan (ASan+UBSan)" ctest_labels build-asan 'unit|codec|smoke|asan' 'interop|slow'
step "fuzz (${KM_FUZZ_SECONDS}s per target)" ctest_labels build-asan 'fuzz'
step "format-check" cmake --build build --target format-check

echo
echo "=== time per suite"
printf '%-48s %8s  %s\n' "suite" "seconds" "result"
total=0
for i in "${!T_NAME[@]}"; do
    printf '%-48s %8d  %s\n' "${T_NAME[$i]}" "${T_SECS[$i]}" "${T_RES[$i]}"
    [ "${T_SUB[$i]}" = 1 ] || total=$((total + T_SECS[i]))
done
printf '%-48s %8d\n' "total" "$total"
exit $failed
