#!/usr/bin/env bash
# run-all.sh: every client conformance suite against one broker, then a table.
#
#   run-all.sh --bootstrap HOST:PORT [--suites kcat,rdkafka-group,kafka-python,java]
#              [--log-dir DIR] [--record-dir DIR] [--timeout SECONDS]
#
# The suites know only the bootstrap address (KM_BOOTSTRAP stands in for --bootstrap). Each runs
# with a deadline (--timeout, default 300 s per suite); its output is shown and kept in
# LOG_DIR/<suite>.log (default: a fresh directory under $KPEER_HOME/clients-logs).
# --record-dir (or KM_RECORD_DIR): exported to the suites, and run-all appends one line per suite
# to DIR/suites.log ("<suite> start|end <epoch ms>") so that requests a recording broker writes
# there can be attributed to the suite that sent them. Starting the broker with KM_RECORD_DIR is
# the job of whatever starts it (tests/clients/against-*.sh pass it on).
# Closing line: "N passed, N failed" over all checks of all suites; exit 0 only if every suite
# exited 0 and reported no failure.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
KPEER_HOME=${KPEER_HOME:-$REPO/.kpeer}
export KPEER_HOME
BOOTSTRAP=${KM_BOOTSTRAP:-}
SUITES=kcat,rdkafka-group,kafka-python,java
LOG_DIR=
TIMEOUT=300
RECORD_DIR=${KM_RECORD_DIR:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --bootstrap) BOOTSTRAP=$2; shift 2 ;;
    --suites) SUITES=$2; shift 2 ;;
    --log-dir) LOG_DIR=$2; shift 2 ;;
    --record-dir) RECORD_DIR=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-all: unknown option '$1'" >&2; exit 64 ;;
  esac
done
[ -n "$BOOTSTRAP" ] || { echo "run-all: --bootstrap HOST:PORT (or KM_BOOTSTRAP) is required" >&2; exit 64; }
export KM_BOOTSTRAP=$BOOTSTRAP
if [ -n "$RECORD_DIR" ]; then
  mkdir -p "$RECORD_DIR"
  KM_RECORD_DIR=$(cd "$RECORD_DIR" && pwd)
  export KM_RECORD_DIR
fi
LOG_DIR=${LOG_DIR:-$KPEER_HOME/clients-logs/$(date +%Y%m%d-%H%M%S)-$$}
mkdir -p "$LOG_DIR"
now_ms() { date +%s%3N; }

# Prepare outside the timed suites: the Python venv and the Java jar (cached after the first run).
t0=$(now_ms)
PY=$("$HERE/setup-venv.sh") || { echo "run-all: FAILED to prepare the Python venv" >&2; exit 2; }
export KM_PYTHON=$PY
if [[ ",$SUITES," == *",java,"* ]]; then
  "$REPO/tests/peers/mvn-build.sh" "$REPO/tests/java/client-tests" client-tests.jar >/dev/null ||
    { echo "run-all: FAILED to build tests/java/client-tests" >&2; exit 2; }
fi
PREP_MS=$(($(now_ms) - t0))

suite_cmd() {
  case "$1" in
    kcat) echo "$HERE/kcat.sh" ;;
    rdkafka-group) echo "$PY $HERE/rdkafka_group.py" ;;
    kafka-python) echo "$PY $HERE/kafka_python.py" ;;
    java) echo "$HERE/java.sh" ;;
    *) return 1 ;;
  esac
}

declare -a R_NAME R_PASS R_FAIL R_MS R_RES
TOTAL_PASS=0 TOTAL_FAIL=0 BAD=0
IFS=, read -r -a LIST <<<"$SUITES"
for s in "${LIST[@]}"; do
  cmd=$(suite_cmd "$s") || { echo "run-all: unknown suite '$s'" >&2; exit 64; }
  echo
  echo "=== $s (bootstrap $BOOTSTRAP)"
  [ -n "${KM_RECORD_DIR:-}" ] && echo "$s start $(now_ms)" >>"$KM_RECORD_DIR/suites.log"
  t=$(now_ms)
  # shellcheck disable=SC2086
  timeout --kill-after=10 "$TIMEOUT" $cmd --bootstrap "$BOOTSTRAP" 2>&1 | tee "$LOG_DIR/$s.log"
  rc=${PIPESTATUS[0]}
  ms=$(($(now_ms) - t))
  [ -n "${KM_RECORD_DIR:-}" ] && echo "$s end $(now_ms)" >>"$KM_RECORD_DIR/suites.log"
  line=$(grep -E '^([A-Za-z]+: )?[0-9]+ passed, [0-9]+ failed' "$LOG_DIR/$s.log" | tail -1)
  if [ -n "$line" ]; then
    p=$(sed -E 's/^([A-Za-z]+: )?([0-9]+) passed.*/\2/' <<<"$line")
    f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
  else
    p=0 f=1
  fi
  if [ "$rc" = 0 ] && [ "$f" = 0 ] && [ "$p" -gt 0 ]; then
    res=ok
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    res="TIMEOUT (${TIMEOUT}s)"; BAD=1; [ "$f" = 0 ] && f=1
  elif [ -z "$line" ]; then
    res="CRASHED (exit $rc)"; BAD=1
  else
    res="FAILED (exit $rc)"; BAD=1
  fi
  R_NAME+=("$s"); R_PASS+=("$p"); R_FAIL+=("$f"); R_MS+=("$ms"); R_RES+=("$res")
  TOTAL_PASS=$((TOTAL_PASS + p)); TOTAL_FAIL=$((TOTAL_FAIL + f))
done

echo
echo "=== client conformance against $BOOTSTRAP (logs: $LOG_DIR)"
printf '%-16s %8s %8s %9s  %s\n' suite passed failed seconds result
printf '%-16s %8s %8s %9s  %s\n' "(prepare)" - - "$(awk -v m="$PREP_MS" 'BEGIN{printf "%.1f", m/1000}')" "venv + jar"
for i in "${!R_NAME[@]}"; do
  printf '%-16s %8d %8d %9s  %s\n' "${R_NAME[$i]}" "${R_PASS[$i]}" "${R_FAIL[$i]}" \
    "$(awk -v m="${R_MS[$i]}" 'BEGIN{printf "%.1f", m/1000}')" "${R_RES[$i]}"
done
echo "$TOTAL_PASS passed, $TOTAL_FAIL failed"
[ "$BAD" = 0 ] && [ "$TOTAL_FAIL" = 0 ]
