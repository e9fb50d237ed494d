#!/usr/bin/env bash
# broker-throughput.sh — produce and consume throughput of kbroker and of Apache Kafka 4.4.0 on
# this machine, in one run: one broker at a time (never both), the same clients, the same
# workload. A benchmark script: not a test, never run by CI.
#
#   tests/bench/broker-throughput.sh [--quick] [--records N] [--reps R] [--partitions P]
#        [--brokers kafka,kbroker] [--clients java,kcat] [--kbroker PATH] [--build-dir DIR]
#        [--kafka-port PORT] [--run-timeout S] [--max-minutes M] [--wait-quiet S]
#        [--max-noise PCT] [--no-doc]
#
# Defaults: 300,000 records of 1 KiB per run, 6 partitions RF 1, 3 rounds, both brokers, Java
# ProducerPerformance / ConsumerPerformance and (if installed) kcat. A round starts each broker
# fresh, one after the other (never both at once; the order alternates between rounds), creates
# the topics and runs every case once after a warm-up run of that case (discarded); medians over
# the rounds are reported (--reps N = N rounds). --quick: 100,000 records, 1 round. Wall time on
# the idle 2-core machine: about 6 minutes (--quick: under 2); --max-minutes (default 15) bounds
# it on a busy one (the cases left are reported as skipped).
# Cases per broker and client: produce {none,zstd} x {acks=1,acks=all}; consume {none,zstd} (the
# records the acks=1 case wrote in that round).
# Measured per run: the tool's MiB/s and records/s, the broker's CPU seconds (utime+stime from
# /proc/PID/stat), its peak RSS (VmHWM, reset before each run), the client's CPU seconds and the
# CPU the rest of the machine used meanwhile (noise). A measured run during which other processes
# used more than --max-noise % (default 25) of the machine is recorded as noisy, left out of the
# medians and repeated (at most twice per case, 4 times per broker and round).
# --wait-quiet S: before each case wait up to S seconds for a 3-second window in which the
# machine is less than 25 % busy (other sessions' builds and tests); default 0 (no waiting).
# Output: a table with kbroker ÷ Kafka ratios on stdout; BUILD/bench/broker-throughput/
# (results.tsv, meta.env, logs/); the section "Broker throughput: kbroker vs Apache Kafka" of
# docs/performance.md and docs/img/broker-throughput.png (unless --no-doc). The plot uses
# matplotlib from a venv in BUILD/bench-venv (created with pip on first use), else gnuplot. The
# doc block between the BEGIN/END markers is regenerated; the hand-written reading below it is
# kept (a NOTE says when it is about an older run).
# Exit status: 0 every case ran; 3 some case could not run or failed (e.g. kbroker lacks an API;
# the reason is in the table), 4 the plot could not be drawn; 1 a broker failed to start or
# another hard error (loud, with the log tail). Everything listens on 127.0.0.1 only; every
# process started here is stopped on exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PEERS=$REPO/tests/peers
# shellcheck source=../peers/versions.env
. "$PEERS/versions.env"
KPEER_HOME=${KPEER_HOME:-$REPO/.kpeer}
export KPEER_HOME
BENCHPY=$HERE/lib/bench.py
# shellcheck source=lib/common.sh
. "$HERE/lib/common.sh"
ORIG_ARGS="$*"

die() { echo "broker-throughput: FATAL: $*" >&2; exit 1; }
log() { echo "broker-throughput: $*" >&2; }
usage() { sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 64; }

RECORDS=300000 REPS=3 PARTS=6 RSIZE=1024 BROKERS=kafka,kbroker CLIENTS= QUICK=0
KBROKER=$REPO/build/bin/kbroker BUILD_DIR=$REPO/build KPORT=19692 RUN_TIMEOUT=150 MAX_MIN=15
DOC=1 WAIT_QUIET=0 MAX_NOISE=25
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; RECORDS=100000; REPS=1; shift ;;
    --records) RECORDS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --partitions) PARTS=$2; shift 2 ;;
    --brokers) BROKERS=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --kbroker) KBROKER=$2; shift 2 ;;
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    --kafka-port) KPORT=$2; shift 2 ;;
    --run-timeout) RUN_TIMEOUT=$2; shift 2 ;;
    --max-minutes) MAX_MIN=$2; shift 2 ;;
    --wait-quiet) WAIT_QUIET=$2; shift 2 ;;
    --max-noise) MAX_NOISE=$2; shift 2 ;;
    --no-doc) DOC=0; shift ;;
    -h | --help) usage ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ "$RECORDS" =~ ^[0-9]+$ && "$RECORDS" -ge 1000 ]] || die "--records must be >= 1000"
[[ "$REPS" =~ ^[0-9]+$ && "$REPS" -ge 1 ]] || die "--reps must be >= 1"
[[ "$PARTS" =~ ^[0-9]+$ && "$PARTS" -ge 1 ]] || die "--partitions must be >= 1"
[[ "$WAIT_QUIET" =~ ^[0-9]+$ ]] || die "--wait-quiet wants seconds"
[[ "$MAX_NOISE" =~ ^[0-9]+$ ]] || die "--max-noise wants a percentage"
[[ "$RUN_TIMEOUT" =~ ^[0-9]+$ && "$MAX_MIN" =~ ^[0-9]+$ ]] || die "--run-timeout/--max-minutes want integers"
if [ -z "$CLIENTS" ]; then
  CLIENTS=java
  if command -v kcat >/dev/null; then CLIENTS=java,kcat; else log "kcat not installed: Java clients only"; fi
fi
want() { [[ ",$2," == *",$1,"* ]]; }

# ------------------------------------------------------------------------------ preflight
for c in java python3 timeout ss awk; do command -v "$c" >/dev/null || die "$c not found"; done
[ -x /usr/bin/time ] || die "/usr/bin/time not found (apt-get install time)"
want kcat "$CLIENTS" && { command -v kcat >/dev/null || die "--clients kcat but kcat is not installed"; }
if want kbroker "$BROKERS"; then
  [ -x "$KBROKER" ] || die "kbroker binary '$KBROKER' not found: build it (scripts/build.sh) or pass --kbroker PATH, or run --brokers kafka"
  KBROKER=$(cd "$(dirname "$KBROKER")" && pwd)/$(basename "$KBROKER")
fi
mkdir -p "$BUILD_DIR"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
WORK=$BUILD_DIR/bench/broker-throughput
LOGS=$WORK/logs
INPUTS=$BUILD_DIR/bench/inputs
RESULTS=$WORK/results.tsv
META=$WORK/meta.env
KNAME=bench-throughput
HZ=$(getconf CLK_TCK)
NCPU=$(nproc)
T_START=$SECONDS
DEADLINE=$((SECONDS + MAX_MIN * 60))
OVERALL_RC=0

# ------------------------------------------------------------------------------ cleanup
KB_PID= KAFKA_STARTED=0 CLIENT_PID= BG_PIDS=() ROUND=0
stop_kbroker() {
  [ -n "$KB_PID" ] || return 0
  local pid=$KB_PID rc=0 end=$((SECONDS + 15))
  KB_PID=
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    log "kbroker $pid still up 15 s after SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || rc=$?
  [ "$rc" = 0 ] || log "WARNING: kbroker exited with status $rc on SIGTERM (see $LOGS/r$ROUND-kbroker.err)"
}
stop_kafka() {
  [ "$KAFKA_STARTED" = 1 ] || return 0
  KAFKA_STARTED=0
  "$PEERS/kafka-cluster.sh" stop --name "$KNAME" >>"$LOGS/kafka-stop.log" 2>&1 \
    || log "WARNING: kafka-cluster.sh stop failed (see $LOGS/kafka-stop.log)"
  rm -rf "$KPEER_HOME/$KNAME/node1"   # gigabytes of benchmark data
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -z "$CLIENT_PID" ] || kill -TERM "$CLIENT_PID" 2>/dev/null || true
  local p
  for p in "${BG_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  stop_kbroker
  stop_kafka
  rm -rf "$WORK/kbroker/data"
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

rm -rf "$LOGS"
mkdir -p "$LOGS" "$INPUTS"
: >"$RESULTS"
: >"$META"

# ------------------------------------------------------------------------------ inputs
LIBS=$("$PEERS/kafka-libs.sh" "$KAFKA_4_VERSION" 2>"$LOGS/kafka-libs.log" | tail -1) \
  || { cat "$LOGS/kafka-libs.log" >&2; die "could not resolve the Kafka $KAFKA_4_VERSION jars"; }
[ -f "$LIBS/kafka-tools-$KAFKA_4_VERSION.jar" ] || die "kafka-tools jar missing in $LIBS"

PAYLOAD=$INPUTS/payload-$RSIZE.txt
[ -s "$PAYLOAD" ] || python3 "$BENCHPY" payload "$PAYLOAD" --size "$RSIZE" --count 4096
KCATFILE=$INPUTS/kcat-$RSIZE-$RECORDS.txt
if want kcat "$CLIENTS" && [ ! -s "$KCATFILE" ]; then
  rm -f "$INPUTS"/kcat-*.txt
  python3 "$BENCHPY" kcatfile "$PAYLOAD" "$KCATFILE" "$RECORDS"
fi
ZRATIO="?"
if command -v zstd >/dev/null; then
  ZRATIO=$(awk -v a=65536 -v b="$(head -c 65536 "$PAYLOAD" | zstd -3 -c | wc -c)" 'BEGIN{printf "%.1f", a/b}')
fi

CLIENT_JVM="-Xmx512M -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true"
cat >"$WORK/client-log4j2.properties" <<'EOF'
status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
EOF
JAVA_CLIENT=(java $CLIENT_JVM "-Dlog4j2.configurationFile=$WORK/client-log4j2.properties" -cp "$LIBS/*")
PRODUCER_PROPS="batch.size=65536 linger.ms=5"
KAFKA_OVR=(num.network.threads=3 num.io.threads=8 background.threads=10
  log.cleaner.dedupe.buffer.size=134217728 offsets.topic.num.partitions=50
  transaction.state.log.num.partitions=50)
KAFKA_JVM_EXTRA="-XX:+ExplicitGCInvokesConcurrent"
KB_OVR=(num.partitions=$PARTS offsets.topic.replication.factor=1
  transaction.state.log.replication.factor=1 transaction.state.log.min.isr=1
  share.coordinator.state.topic.replication.factor=1 share.coordinator.state.topic.min.isr=1
  group.initial.rebalance.delay.ms=0)

# machine and settings
meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
meta command "tests/bench/broker-throughput.sh${ORIG_ARGS:+ $ORIG_ARGS}"
bench_machine_meta "$WORK"
meta kcat "$(command -v kcat >/dev/null && kcat -V 2>&1 | sed -n 's/^Version \([^ ]*\) (.*librdkafka \([^ ]*\).*/\1 (librdkafka \2)/p' | head -1 || echo 'not installed')"
meta kafka_version "$KAFKA_4_VERSION"
meta records "$RECORDS"
meta consume_records "$((2 * RECORDS))"
meta reps "$REPS"
meta partitions "$PARTS"
meta record_size "$RSIZE"
meta payload_count 4096
meta zstd_ratio "$ZRATIO"
meta clients "$CLIENTS"
meta brokers "$BROKERS"
meta wait_quiet "$WAIT_QUIET"
meta max_noise "$MAX_NOISE"
meta client_jvm "$CLIENT_JVM"
meta producer_props "$PRODUCER_PROPS"
meta kafka_overrides "${KAFKA_OVR[*]}"
meta kbroker_overrides "${KB_OVR[*]}"
meta results_path "`<build dir>/bench/broker-throughput/` (`results.tsv`, `meta.env`, `logs/`)"

# ------------------------------------------------------------------------------ measuring
# now_ns, cpu_ticks, sys_busy, sys_total, wait_quiet, hwm_kb, rss_kb, reset_hwm: lib/common.sh

BNAME= BPID= BS= BPEAK=0 APIS=
broker_alive() { [ -n "$BPID" ] && kill -0 "$BPID" 2>/dev/null; }

# run_measured LOG CMD...: runs the client (bounded by RUN_TIMEOUT) and sets M_RC, M_WALL, M_BCPU,
# M_CCPU, M_OCPU, M_RSS.
run_measured() {
  local lg=$1; shift
  local c0 c1 s0 s1 t0 t1
  reset_hwm "$BPID"
  c0=$(cpu_ticks "$BPID") s0=$(sys_busy) t0=$(now_ns)
  M_RC=0
  timeout -k 10 "$RUN_TIMEOUT" /usr/bin/time -f 'CLIENT_CPU %U %S' -o "$lg.time" "$@" >"$lg" 2>&1 </dev/null &
  CLIENT_PID=$!
  wait "$CLIENT_PID" || M_RC=$?
  CLIENT_PID=
  t1=$(now_ns) s1=$(sys_busy)
  if ! c1=$(cpu_ticks "$BPID"); then
    tail -n 30 "$lg" >&2 || true
    die "$BNAME (pid $BPID) died during the run logged in $lg"
  fi
  M_RSS=$(hwm_kb "$BPID")
  [ "$M_RSS" -gt "$BPEAK" ] && BPEAK=$M_RSS
  M_CCPU=$(awk '/^CLIENT_CPU/ {printf "%.2f", $2 + $3}' "$lg.time" 2>/dev/null)
  M_CCPU=${M_CCPU:-0}
  M_WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b - a) / 1e9}')
  M_BCPU=$(awk -v a="$c0" -v b="$c1" -v hz="$HZ" 'BEGIN {printf "%.2f", (b - a) / hz}')
  M_OCPU=$(awk -v a="$s0" -v b="$s1" -v hz="$HZ" -v bc="$M_BCPU" -v cc="$M_CCPU" \
    'BEGIN {v = (b - a) / hz - bc - cc; if (v < 0) v = 0; printf "%.2f", v}')
}

# row CLIENT OP CODEC ACKS REP RECORDS BYTES MIB RECS STATUS NOTE (measurements from run_measured)
row() {
  local note=${11//$'\t'/ }
  note=${note//$'\n'/ }
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
    "$BNAME" "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" "${M_WALL:-}" "${M_BCPU:-}" \
    "${M_CCPU:-}" "${M_OCPU:-}" "${M_RSS:-}" "${10}" "$note" >>"$RESULTS"
}
skip_row() { # CLIENT OP CODEC ACKS STATUS NOTE
  M_WALL= M_BCPU= M_CCPU= M_OCPU= M_RSS=
  row "$1" "$2" "$3" "$4" - "" "" "" "" "$5" "$6"
  OVERALL_RC=3
  local what="$1 $2 $3"
  [ "$4" = - ] || what+=" acks=$4"
  log "$BNAME: $what: $5: $6"
}

has_api() { grep -q "^$1 " <<<"$APIS"; }
api_name() {
  case $1 in 0) echo Produce ;; 1) echo Fetch ;; 2) echo ListOffsets ;; 3) echo Metadata ;;
    8) echo OffsetCommit ;; 9) echo OffsetFetch ;; 10) echo FindCoordinator ;; 11) echo JoinGroup ;;
    12) echo Heartbeat ;; 13) echo LeaveGroup ;; 14) echo SyncGroup ;; 19) echo CreateTopics ;;
    22) echo InitProducerId ;; *) echo "api$1" ;; esac
}
missing_apis() { # KEY...: prints "Name(key) ..." of the keys the broker does not advertise
  local k out=
  for k in "$@"; do has_api "$k" || out+="${out:+, }$(api_name "$k")($k)"; done
  echo "$out"
}
# needs CLIENT OP CODEC ACKS KEY...: skip the case (and return 1) if the broker lacks an API.
needs() {
  local c=$1 o=$2 z=$3 a=$4; shift 4
  local m
  m=$(missing_apis "$@")
  [ -z "$m" ] && return 0
  skip_row "$c" "$o" "$z" "$a" skipped "$BNAME does not serve $m"
  return 1
}
past_deadline() {
  if [ $SECONDS -ge $DEADLINE ]; then
    log "WARNING: --max-minutes $MAX_MIN reached: skipping the remaining cases"
    return 0
  fi
  return 1
}

declare -A TOPIC_OK=() PRODUCED=() ENDOFF=()

# One run of each kind. Each sets R_RECS R_BYTES R_MIB R_RPS R_ST (ok|failed) R_NOTE and the M_*
# measurements of run_measured.
fail_note() { # LOG PATTERN: "exit N: first matching line", noting a timeout
  local n
  n="exit $M_RC: $(grep -m1 -iE "$2" "$1" | cut -c1-200)"
  [ "$M_RC" = 124 ] && n="timed out after ${RUN_TIMEOUT}s; $n"
  echo "$n"
}

# Records a consume run reads: what the warm-up and the measured run of its produce case wrote in
# this round (the same number on both brokers), or fewer if the topic holds fewer.
consume_count() {
  local have=${ENDOFF[$1]:-${PRODUCED[$1]:-0}} want=$((2 * RECORDS))
  echo $((have < want ? have : want))
}

run_java_produce() { # CODEC ACKS REP LOG
  local z=$1 a=$2 t="jp-$1-a$2" parsed
  # shellcheck disable=SC2086
  run_measured "$4" "${JAVA_CLIENT[@]}" org.apache.kafka.tools.ProducerPerformance \
    --bootstrap-server "$BS" --topic "$t" --num-records "$RECORDS" --payload-file "$PAYLOAD" \
    --throughput -1 --command-property acks="$a" compression.type="$z" $PRODUCER_PROPS
  R_RECS= R_MIB= R_RPS= R_ST=ok R_NOTE=
  if parsed=$(python3 "$BENCHPY" parse-producer "$4"); then
    read -r R_RECS R_MIB R_RPS <<<"$parsed"
    PRODUCED[$t]=$((${PRODUCED[$t]:-0} + R_RECS))
  fi
  if [ "$M_RC" != 0 ] || [ -z "$R_RECS" ] || grep -q 'Exception' "$4"; then
    R_ST=failed R_NOTE=$(fail_note "$4" 'Exception|ERROR')
  fi
  R_BYTES=$((${R_RECS:-0} * RSIZE))
}

run_java_consume() { # CODEC - REP LOG
  local z=$1 t="jp-$1-a1" n parsed
  n=$(consume_count "$t")
  run_measured "$4" "${JAVA_CLIENT[@]}" org.apache.kafka.tools.ConsumerPerformance \
    --bootstrap-server "$BS" --topic "$t" --num-records "$n" --group "bench-$$-$z-$3-$RANDOM" \
    --timeout 15000
  R_RECS= R_MIB= R_RPS= R_ST=ok R_NOTE=
  if parsed=$(python3 "$BENCHPY" parse-consumer "$4"); then
    read -r R_RECS R_MIB R_RPS <<<"$parsed"
  fi
  if [ "$M_RC" != 0 ] || [ -z "$R_RECS" ] || [ "${R_RECS:-0}" -lt "$n" ] || grep -q 'Exception' "$4"; then
    R_ST=failed R_NOTE="${R_RECS:-0}/$n records, $(fail_note "$4" 'Exception|ERROR|WARNING')"
  fi
  R_BYTES=$((${R_RECS:-0} * RSIZE))
}

run_kcat_produce() { # CODEC ACKS REP LOG
  local z=$1 a=$2 t="kp-$1-a$2"
  run_measured "$4" kcat -P -b "$BS" -t "$t" -X acks="$a" -z "$z" -l "$KCATFILE"
  R_RECS=$RECORDS R_BYTES=$((RECORDS * RSIZE)) R_MIB= R_RPS= R_ST=ok R_NOTE=
  PRODUCED[$t]=$((${PRODUCED[$t]:-0} + RECORDS)) # checked against the end offsets afterwards
  if [ "$M_RC" != 0 ] || grep -qiE 'error|fail' "$4"; then
    R_ST=failed R_NOTE=$(fail_note "$4" 'error|fail')
  else
    R_MIB=$(awk -v n="$RECORDS" -v s="$RSIZE" -v w="$M_WALL" 'BEGIN {printf "%.2f", n * s / 1048576 / w}')
    R_RPS=$(awk -v n="$RECORDS" -v w="$M_WALL" 'BEGIN {printf "%.1f", n / w}')
  fi
}

run_kcat_consume() { # CODEC - REP LOG
  local z=$1 t="jp-$1-a1" n
  n=$(consume_count "$t")
  run_measured "$4" sh -c 'kcat -C -b "$1" -t "$2" -o beginning -e -q -c "$3" -f "%o\n" | wc -l >"$4"' \
    kcat-consume "$BS" "$t" "$n" "$4.count"
  R_RECS=$(cat "$4.count" 2>/dev/null || echo 0) R_MIB= R_RPS= R_ST=ok R_NOTE=
  R_BYTES=$((R_RECS * RSIZE))
  if [ "$M_RC" != 0 ] || [ "$R_RECS" != "$n" ] || grep -qiE 'error|fail' "$4"; then
    R_ST=failed R_NOTE="$R_RECS/$n records, $(fail_note "$4" 'error|fail')"
  else
    R_MIB=$(awk -v n="$n" -v s="$RSIZE" -v w="$M_WALL" 'BEGIN {printf "%.2f", n * s / 1048576 / w}')
    R_RPS=$(awk -v n="$n" -v w="$M_WALL" 'BEGIN {printf "%.1f", n / w}')
  fi
}

# run_case CLIENT OP CODEC ACKS: one warm-up run (discarded) and one measured run of a case, in the
# current round. A measured run during which other processes used more than MAX_NOISE % of the
# machine is recorded as "noisy" (left out of the medians) and repeated, at most twice per case
# and NOISE_BUDGET times per broker and round. A failed warm-up skips the measured run.
run_case() {
  local c=$1 o=$2 z=$3 a=$4 rep=0 retries=2 lg base what noise t
  what="$c $o $z"
  [ "$a" = - ] || what+=" acks=$a"
  if [ "$o" = produce ]; then
    t="${c:0:1}p-$z-a$a"
    [ "${TOPIC_OK[$t]:-0}" = 1 ] || { skip_row "$c" "$o" "$z" "$a" failed "topic $t could not be created"; return 0; }
  else
    t="jp-$z-a1"
    [ "${ENDOFF[$t]:-${PRODUCED[$t]:-0}}" -gt 0 ] \
      || { skip_row "$c" "$o" "$z" "$a" skipped "topic $t holds no records (its produce case did not run)"; return 0; }
  fi
  base=$LOGS/r$ROUND-$BNAME-$c-$o-$z
  [ "$a" = - ] || base+=-a$a
  wait_quiet
  while :; do
    past_deadline && { skip_row "$c" "$o" "$z" "$a" skipped "global deadline (--max-minutes $MAX_MIN)"; return 0; }
    if [ "$rep" = 0 ]; then lg=$base-warmup.log; else lg=$base-run.log; fi
    [ "$rep" = 0 ] || [ "$retries" = 2 ] || lg=$base-run.retry$((2 - retries)).log
    "run_${c}_$o" "$z" "$a" "$rep" "$lg"
    noise=$(awk -v o="$M_OCPU" -v w="$M_WALL" -v n="$NCPU" 'BEGIN {printf "%d", 100 * o / (w * n)}')
    if [ "$R_ST" = ok ] && [ "$rep" != 0 ] && [ "$noise" -gt "$MAX_NOISE" ] && [ "$retries" -gt 0 ] \
      && [ "$NOISE_BUDGET" -gt 0 ]; then
      row "$c" "$o" "$z" "$a" "$rep" "$R_RECS" "$R_BYTES" "$R_MIB" "$R_RPS" noisy \
        "other processes used ${noise}% of the machine: repeated"
      log "r$ROUND $BNAME $what: ${R_MIB:-?} MiB/s but other processes used ${noise}% of the machine: repeating the run"
      retries=$((retries - 1)) NOISE_BUDGET=$((NOISE_BUDGET - 1))
      continue
    fi
    row "$c" "$o" "$z" "$a" "$rep" "$R_RECS" "$R_BYTES" "$R_MIB" "$R_RPS" "$R_ST" "$R_NOTE"
    log "r$ROUND $BNAME $what $([ "$rep" = 0 ] && echo warm-up || echo run): ${R_MIB:-?} MiB/s, broker CPU ${M_BCPU}s, client CPU ${M_CCPU}s, other ${M_OCPU}s (${noise}%), broker RSS peak $((${M_RSS:-0} / 1024)) MiB${R_NOTE:+ — $R_ST: $R_NOTE}"
    if [ "$R_ST" != ok ]; then
      OVERALL_RC=3
      [ "$rep" = 0 ] && { log "$BNAME: warm-up failed, skipping the measured run of this case (log: $lg)"; return 0; }
    fi
    [ "$rep" = 0 ] || return 0
    rep=$ROUND
  done
}

create_topics() { # TOPIC...: CreateTopics through kafka-tools' TopicCommand, in parallel
  local t pids=() i=0
  if ! has_api 19; then
    log "$BNAME does not serve CreateTopics(19): relying on auto-creation (num.partitions=$PARTS)"
    for t in "$@"; do TOPIC_OK[$t]=1; done
    return 0
  fi
  for t in "$@"; do
    timeout -k 5 90 "${JAVA_CLIENT[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BS" \
      --create --topic "$t" --partitions "$PARTS" --replication-factor 1 >"$LOGS/r$ROUND-$BNAME-topic-$t.log" 2>&1 &
    pids+=($!)
    BG_PIDS+=($!)
  done
  for t in "$@"; do
    if wait "${pids[$i]}"; then
      TOPIC_OK[$t]=1
    else
      TOPIC_OK[$t]=0
      log "WARNING: $BNAME: creating topic $t failed: $(grep -m1 -E 'Exception|ERROR' "$LOGS/r$ROUND-$BNAME-topic-$t.log" | cut -c1-200)"
    fi
    i=$((i + 1))
  done
  BG_PIDS=()
}

verify_offsets() { # sums of the end offsets per topic against what the clients reported
  if ! has_api 2; then
    VERIFY[$BNAME]="not checked ($BNAME does not serve ListOffsets)"
    return 0
  fi
  local lg=$LOGS/r$ROUND-$BNAME-offsets.log t bad=
  timeout -k 5 90 "${JAVA_CLIENT[@]}" org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$BS" \
    --topic '(jp|kp)-.*' >"$lg" 2>&1 || { log "WARNING: GetOffsetShell failed ($lg)"; VERIFY[$BNAME]+="round $ROUND: GetOffsetShell failed; "; return 0; }
  while IFS=: read -r t _ off; do
    [[ "$off" =~ ^[0-9]+$ ]] && ENDOFF[$t]=$((${ENDOFF[$t]:-0} + off))
  done <"$lg"
  for t in "${!PRODUCED[@]}"; do
    [ "${ENDOFF[$t]:-0}" = "${PRODUCED[$t]}" ] || bad+="$t: end offsets ${ENDOFF[$t]:-0} != ${PRODUCED[$t]} sent; "
  done
  if [ -n "$bad" ]; then
    log "WARNING: $BNAME: $bad"
    VERIFY[$BNAME]+="round $ROUND: MISMATCH $bad"
    OVERALL_RC=3
  fi
}

start_kafka() {
  local args=(start --name "$KNAME" --base-port "$KPORT" --perf --heap 1g --jvm-opts "$KAFKA_JVM_EXTRA")
  local kv
  for kv in "${KAFKA_OVR[@]}"; do args+=(--override "$kv"); done
  KAFKA_STARTED=1 # from here on the trap stops it, whatever happens
  if ! "$PEERS/kafka-cluster.sh" "${args[@]}" >"$LOGS/r$ROUND-kafka-start.log" 2>&1; then
    cat "$LOGS/r$ROUND-kafka-start.log" >&2
    die "Apache Kafka $KAFKA_4_VERSION failed to start (log above; node log in $KPEER_HOME/$KNAME/node1.log)"
  fi
  BPID=$(cat "$KPEER_HOME/$KNAME/node1.pid")
  BS=127.0.0.1:$KPORT
  meta kafka_jvm "$(tr '\0' '\n' <"/proc/$BPID/cmdline" | sed -n '2,/^-cp$/p' | grep -v -e '^-cp$' -e log4j2 | tr '\n' ' ' | sed 's/ $//')"
  log "$(grep -m1 'ready at' "$LOGS/r$ROUND-kafka-start.log" | sed 's/^kafka-cluster: //')"
}

start_kbroker() {
  local d=$WORK/kbroker kv end port rc=0
  rm -rf "$d"
  mkdir -p "$d/data"
  {
    echo "# generated by tests/bench/broker-throughput.sh: kbroker defaults, single-node topology"
    echo "node.id=1"
    echo "listeners=PLAINTEXT://127.0.0.1:0"
    echo "log.dirs=$d/data"
    for kv in "${KB_OVR[@]}"; do echo "$kv"; done
  } >"$d/server.properties"
  "$KBROKER" --config "$d/server.properties" >"$LOGS/r$ROUND-kbroker.out" 2>"$LOGS/r$ROUND-kbroker.err" </dev/null &
  KB_PID=$!
  BPID=$KB_PID
  end=$((SECONDS + 30))
  while :; do
    port=$(sed -n 's/^kbroker started .*PLAINTEXT:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$LOGS/r$ROUND-kbroker.out" | head -1)
    [ -n "$port" ] && break
    if ! kill -0 "$KB_PID" 2>/dev/null; then
      wait "$KB_PID" || rc=$?
      KB_PID=
      tail -n 40 "$LOGS/r$ROUND-kbroker.err" >&2
      die "kbroker failed to start (exit status $rc; log above, config $d/server.properties)"
    fi
    [ $SECONDS -lt $end ] || { tail -n 40 "$LOGS/r$ROUND-kbroker.err" >&2; die "kbroker did not print its readiness line within 30 s"; }
    sleep 0.05
  done
  BS=127.0.0.1:$port
  log "kbroker ready at $BS (pid $KB_PID)"
}

declare -A PEAK=() LOADS=() VERIFY=()
run_broker() { # kafka | kbroker: start it, run every case once (after its warm-up), stop it
  BNAME=$1 BPEAK=0 NOISE_BUDGET=4
  TOPIC_OK=() PRODUCED=() ENDOFF=()
  LOADS[$BNAME]+="${LOADS[$BNAME]:+; }$(loadavg)"
  log "=== round $ROUND of $REPS: $BNAME (load average $(loadavg)) ==="
  if [ "$BNAME" = kafka ]; then start_kafka; else start_kbroker; fi
  [ "$ROUND" != 1 ] || meta "${BNAME}_rss_start_mib" "$(($(rss_kb "$BPID") / 1024))"
  BPEAK=$(hwm_kb "$BPID")
  if ! APIS=$(python3 "$BENCHPY" apis "$BS" 2>"$LOGS/r$ROUND-$BNAME-apis.err"); then
    cat "$LOGS/r$ROUND-$BNAME-apis.err" >&2
    die "$BNAME at $BS does not answer ApiVersions"
  fi
  printf '%s\n' "$APIS" >"$LOGS/r$ROUND-$BNAME-apis.txt"
  local missing
  missing=$(missing_apis 0 1 2 3 8 9 10 11 12 13 14 19 22)
  if [ "$ROUND" = 1 ]; then
    [ -z "$missing" ] || log "NOTE: $BNAME does not advertise $missing; the cases needing them are reported as skipped"
    meta "${BNAME}_missing_apis" "${missing:-none}"
  fi

  local topics=() z a c keys
  for z in none zstd; do for a in 1 all; do
    want java "$CLIENTS" && topics+=("jp-$z-a$a")
    want kcat "$CLIENTS" && topics+=("kp-$z-a$a")
  done; done
  if has_api 3; then create_topics "${topics[@]}"; fi

  for c in java kcat; do
    want "$c" "$CLIENTS" || continue
    for z in none zstd; do for a in 1 all; do
      keys=(0 3)
      # acks=all: the Java producer is idempotent by default (InitProducerId)
      [ "$c" = java ] && [ "$a" = all ] && keys+=(22)
      needs "$c" produce "$z" "$a" "${keys[@]}" && run_case "$c" produce "$z" "$a"
    done; done
  done
  verify_offsets
  for z in none zstd; do
    if want java "$CLIENTS"; then
      needs java consume "$z" - 1 2 3 8 9 10 11 12 13 14 && run_case java consume "$z" -
    fi
    if want kcat "$CLIENTS"; then
      needs kcat consume "$z" - 1 2 3 && run_case kcat consume "$z" -
    fi
  done
  [ "$(hwm_kb "$BPID")" -gt "$BPEAK" ] && BPEAK=$(hwm_kb "$BPID")
  [ "$BPEAK" -gt "${PEAK[$BNAME]:-0}" ] && PEAK[$BNAME]=$BPEAK
  if [ "$BNAME" = kafka ]; then stop_kafka; else stop_kbroker; rm -rf "$WORK/kbroker/data"; fi
  BPID=
  log "=== round $ROUND: $BNAME done ($((SECONDS - T_START)) s so far) ==="
}

# ------------------------------------------------------------------------------ main
log "records/run $RECORDS x $RSIZE B, $PARTS partitions, $REPS rounds (warm-up + 1 measured run per case and broker each), brokers $BROKERS, clients $CLIENTS"
log "load average now: $(loadavg) (2 cores: anything above ~0.5 makes the numbers noisy)"
if want kbroker "$BROKERS"; then
  meta kbroker_version "$("$KBROKER" --version 2>&1 | head -1)"
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$(dirname "$KBROKER")/../CMakeCache.txt" 2>/dev/null || true)
  btype=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$(dirname "$KBROKER")/../CMakeCache.txt" 2>/dev/null || true)
  cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$(dirname "$KBROKER")/../CMakeCache.txt" 2>/dev/null || true)
  rev="unknown revision"
  if [ -n "$src" ] && git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    rev="commit $(git -C "$src" log -1 --format='%h, %cs' 2>/dev/null)"
    [ -z "$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null)" ] || rev+=", with uncommitted changes"
  fi
  meta kbroker_rev "$rev"
  meta kbroker_build "${btype:-?} build, $( [ -n "$cc" ] && "$cc" --version 2>/dev/null | head -1 || echo '?')"
fi

# Rounds: each round starts each broker fresh, one after the other (never both at once), and runs
# every case once after its warm-up; the order alternates so that neither broker always goes first.
for ((ROUND = 1; ROUND <= REPS; ROUND++)); do
  order="kafka kbroker"
  [ $((ROUND % 2)) = 0 ] && order="kbroker kafka"
  for b in $order; do
    want "$b" "$BROKERS" || continue
    run_broker "$b"
  done
done
for b in kafka kbroker; do
  want "$b" "$BROKERS" || continue
  meta "${b}_rss_peak_kb" "${PEAK[$b]:-0}"
  meta "${b}_loads" "${LOADS[$b]:-}"
  meta "${b}_verify" "${VERIFY[$b]:-end offsets equal the records sent on every topic, every round}"
done

if want kbroker "$BROKERS"; then
  if awk -F'\t' '$1 == "kbroker" && ($16 == "failed" || $16 == "skipped") {bad = 1} END {exit !bad}' "$RESULTS"; then
    meta kbroker_status "Not every case ran on kbroker: see the table."
  else
    meta kbroker_status ""
  fi
else
  meta kbroker_status "kbroker was not run (--brokers $BROKERS)."
fi
meta load_end "$(loadavg)"
meta wall "total wall time $(((SECONDS - T_START) / 60)) min $(((SECONDS - T_START) % 60)) s"

# ------------------------------------------------------------------------------ report
PLOT=none PY=python3
PNG=$REPO/docs/img/broker-throughput.png
if [ "$DOC" = 1 ]; then
  VENV=$BUILD_DIR/bench-venv
  if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
    log "setting up $VENV (pip install matplotlib)"
    { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q matplotlib; } >"$LOGS/venv.log" 2>&1 \
      || log "WARNING: could not install matplotlib into $VENV (see $LOGS/venv.log)"
  fi
  if "$VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
    PLOT=matplotlib PY=$VENV/bin/python
  elif command -v gnuplot >/dev/null; then
    PLOT=gnuplot
  else
    log "WARNING: neither matplotlib nor gnuplot: no plot (apt-get install gnuplot-nox)"
    OVERALL_RC=4
  fi
  mkdir -p "$REPO/docs/img"
fi
echo
echo "Broker throughput: kbroker vs Apache Kafka $KAFKA_4_VERSION — medians of $REPS rounds, $RECORDS x $RSIZE B records, $PARTS partitions"
echo
report_args=(report --results "$RESULTS" --meta "$META")
[ "$DOC" = 1 ] && report_args+=(--doc "$REPO/docs/performance.md" --png "$PNG" --plot "$PLOT")
rrc=0
"$PY" "$BENCHPY" "${report_args[@]}" || rrc=$?
[ "$rrc" = 0 ] || [ "$OVERALL_RC" != 0 ] || OVERALL_RC=$rrc
echo
log "raw rows: $RESULTS; logs: $LOGS; total $((SECONDS - T_START)) s"
[ "$OVERALL_RC" = 0 ] || log "exit status $OVERALL_RC: not every case ran (see the table and the NOTE/WARNING lines above)"
exit "$OVERALL_RC"
