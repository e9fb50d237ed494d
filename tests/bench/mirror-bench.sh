#!/usr/bin/env bash
# mirror-bench.sh — the same workload mirrored, in one run on this machine, by (a) kmirror, (b)
# MirrorMaker 2 (IdentityReplicationPolicy, tuned clients) and (c) the destination's own follower
# replication; catch-up throughput, CPU per GiB, wire bytes per byte, end-to-end latency at a
# fixed rate; ratios kmirror ÷ MM2 and kmirror ÷ follower replication. A benchmark script: not a
# test, never run by CI (docs/performance.md; docs/design.md M102–M104).
#
#   tests/bench/mirror-bench.sh [--quick] [--records N] [--reps R] [--partitions P]
#        [--modes km,mm,fr] [--codecs none,zstd] [--lat-rate R] [--lat-seconds S] [--no-latency]
#        [--lat-client librdkafka|kafka-python]
#        [--no-catchup] [--build-dir DIR] [--src-port P] [--dst-port P] [--wait-quiet S] [--max-minutes M]
#        [--no-doc] [--keep]
#
# Topology (M102): source = a 3-node kbroker cluster (tests/cluster/cluster.sh, node 1 also the
# controller) whose benchmark topics have every partition on node 1 (RF 1), so one broker serves
# the data in all three modes; destination = a 3-node kbroker cluster with kmirror.so
# (default.replication.factor=1). (a) kmirror: mirror `bench` created once, each case
# `kafka-mirrors --start --topic km-<codec>`; the mirror topics (RF 1) spread over the 3
# destination brokers. (b) MirrorMaker 2 (connect-mirror from tests/peers/kafka-libs.sh, dedicated
# mode, one JVM, -Xmx512m) mirrors mm-<codec> into the destination (replication.factor=1), one
# fresh MM2 process per case. (c) a destination topic fr-<codec> with every partition on nodes
# 1:2 (leader 1): node 2 is killed, the leader filled (acks=1), node 2 restarted and timed until
# its log holds the leader's bytes.
# Catch-up: N records of 1 KiB written before the case (ProducerPerformance, batch.size=65536
# linger.ms=5, the codec's compression.type); the window runs from the first poll (100 ms) that
# sees data on the destination to the one that sees all of it (destination end offsets = the
# source's; for (c) the follower's log bytes = the leader's), so startup (a JVM, a mirror's
# PREPARING) is outside it. In the window: MiB/s and records/s of payload; CPU = utime+stime of
# every broker of both clusters and of MM2's JVM (/proc/PID/stat) minus the brokers' idle rate
# measured for 3 s before, per GiB of payload; also the threads doing the mirroring alone
# (kmirror's "kmirror-*"/"MirrorFetcherThread-*", MM2's whole JVM, kbroker's "kb-rf-*" follower
# fetchers, from /proc/PID/task/*/stat); wire = kbroker_network_{received,sent}_bytes_total
# of every node (each connection has exactly one kbroker server end) from the start of the case
# to its end, minus the idle rate, per byte of payload (plus kbroker_replica_fetch_response_
# bytes_total in the raw rows). A case whose window would be under 1 s or hold under half the
# data is measured from its start instead (the row says so). Latency:
# tests/bench/lib/mirror_bench.py latency (a librdkafka producer -- confluent-kafka; --lat-client
# kafka-python for the pure-Python client -- at --lat-rate records/s, acks=1,
# value = send time + padding; a consumer on the destination), p50/p90/p99/max after a 5 s
# warm-up, once one probe record went through; (c): produce to the leader of lat-fr (RF 2),
# consume from it (a record is visible once the follower has it). The latency topics (source
# lat-km/lat-mm, destination lat-fr) have message.timestamp.type=LogAppendTime, so the records
# carry their source append time and the log line splits the latency there: send -> source
# append, source append -> consumer (kmirror and the follower copy batches; MM2 writes new ones).
# Defaults: 1,000,000 records (1 GiB of payload: kmirror and follower replication catch up in
# seconds, so less leaves their windows too short), 6 partitions, 1 round, both codecs, all
# modes, latency 1000 records/s for 30 s. --quick: 20,000 records, latency 200 records/s for
# 8 s, and never writes the docs (numbers from it mean nothing). --wait-quiet S: before each case
# wait up to S seconds for a 3-second window with the machine < 25 % busy. --max-minutes
# (default 90) skips what is left when reached. --no-catchup: the latency cases only (to iterate
# on latency; never writes the docs).
# Output: the table and ratios on stdout; BUILD/bench/mirror-bench/ (results.jsonl, meta.env,
# logs/); unless --no-doc/--quick the section "Mirroring: kmirror vs MirrorMaker 2 vs follower
# replication" of docs/performance.md and docs/img/mirror-bench.png (matplotlib from the venv
# BUILD/bench-venv that broker-throughput.sh uses). Exit 0 every case ran; 3 some case failed
# (the reason is in the table); 1 setup error. Ports: source P, P+1, P+10, P+20 (default 35000),
# destination likewise (default 35100), moved up by 200 when taken; clusters bench-msrc and
# bench-mdst in KPEER_HOME, both stopped on exit (--keep: left running).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PEERS=$REPO/tests/peers
# shellcheck source=../peers/versions.env
. "$PEERS/versions.env"
export KPEER_HOME=${KPEER_HOME:-$REPO/.kpeer}
# shellcheck source=lib/common.sh
. "$HERE/lib/common.sh"
BENCHPY=$HERE/lib/bench.py
MBPY=$HERE/lib/mirror_bench.py
ORIG_ARGS="$*"

die() { echo "mirror-bench: FATAL: $*" >&2; exit 1; }
log() { echo "mirror-bench: $*" >&2; }
usage() { sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 64; }

RECORDS=1000000 REPS=1 PARTS=6 RSIZE=1024 MODES=km,mm,fr CODECS=none,zstd QUICK=0
LAT_TS=message.timestamp.type=LogAppendTime LAT_CLIENT=librdkafka
LAT_RATE=1000 LAT_SECONDS=30 LAT_WARMUP=5 LATENCY=1 BUILD_DIR=$REPO/build SRC_PORT=35000
DST_PORT=35100 WAIT_QUIET=0 MAX_MIN=90 DOC=1 KEEP=0 CATCHUP=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; RECORDS=20000; LAT_RATE=200; LAT_SECONDS=8; LAT_WARMUP=2; shift ;;
    --records) RECORDS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --partitions) PARTS=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --codecs) CODECS=$2; shift 2 ;;
    --lat-rate) LAT_RATE=$2; shift 2 ;;
    --lat-client) LAT_CLIENT=$2; shift 2 ;;
    --lat-seconds) LAT_SECONDS=$2; shift 2 ;;
    --no-latency) LATENCY=0; shift ;;
    --no-catchup) CATCHUP=0; shift ;;
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    --src-port) SRC_PORT=$2; shift 2 ;;
    --dst-port) DST_PORT=$2; shift 2 ;;
    --wait-quiet) WAIT_QUIET=$2; shift 2 ;;
    --max-minutes) MAX_MIN=$2; shift 2 ;;
    --no-doc) DOC=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h | --help) usage ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[ "$QUICK" = 0 ] || DOC=0 # quick numbers never go into the docs
[ "$CATCHUP" = 1 ] || DOC=0 # nor a run without the catch-up cases
for v in RECORDS REPS PARTS LAT_RATE LAT_SECONDS SRC_PORT DST_PORT WAIT_QUIET MAX_MIN; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "--${v,,} wants a number"
done
[ "$RECORDS" -ge 1000 ] || die "--records must be >= 1000"
[ "$PARTS" -ge 1 ] && [ "$REPS" -ge 1 ] || die "--partitions and --reps must be >= 1"
want() { [[ ",$2," == *",$1,"* ]]; }
for m in ${MODES//,/ }; do case $m in km | mm | fr) ;; *) die "--modes: km, mm, fr" ;; esac; done
case $LAT_CLIENT in librdkafka | kafka-python) ;; *) die "--lat-client: librdkafka or kafka-python" ;; esac
for z in ${CODECS//,/ }; do case $z in none | zstd) ;; *) die "--codecs: none, zstd" ;; esac; done

# ------------------------------------------------------------------------------ preflight
for c in java python3 timeout ss awk; do command -v "$c" >/dev/null || die "$c not found"; done
BUILD_DIR=$(cd "$BUILD_DIR" && pwd) || die "no build dir"
KM=$BUILD_DIR/bin/kafka-mirrors
SO=$BUILD_DIR/lib/kmirror.so
for f in "$BUILD_DIR/bin/kbroker" "$KM" "$SO"; do [ -e "$f" ] || die "$f not built (scripts/build.sh)"; done
CL=$REPO/tests/cluster/cluster.sh
SRC=bench-msrc DST=bench-mdst
WORK=$BUILD_DIR/bench/mirror-bench
LOGS=$WORK/logs
INPUTS=$BUILD_DIR/bench/inputs
RESULTS=$WORK/results.jsonl
META=$WORK/meta.env
T_START=$SECONDS
DEADLINE=$((SECONDS + MAX_MIN * 60))
OVERALL_RC=0
rm -rf "$LOGS"
mkdir -p "$LOGS" "$INPUTS"
: >"$RESULTS"
: >"$META"

# ------------------------------------------------------------------------------ cleanup
MM2_PID= STARTED=0
stop_pid() { # PID: SIGTERM, up to 30 s, SIGKILL
  local pid=$1 end=$((SECONDS + 30))
  kill -TERM "$pid" 2>/dev/null || return 0
  while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
}
stop_mm2() {
  [ -s "$WORK/mm2.pid" ] && MM2_PID=$(cat "$WORK/mm2.pid")
  [ -n "$MM2_PID" ] || return 0
  stop_pid "$MM2_PID"
  MM2_PID=
  rm -f "$WORK/mm2.pid"
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_mm2
  if [ "$STARTED" = 1 ] && [ "$KEEP" = 0 ]; then
    "$CL" stop --name "$SRC" >>"$LOGS/stop.log" 2>&1 || log "WARNING: stopping $SRC failed"
    "$CL" stop --name "$DST" >>"$LOGS/stop.log" 2>&1 || log "WARNING: stopping $DST failed"
    rm -rf "$KPEER_HOME/$SRC"/node*/data "$KPEER_HOME/$DST"/node*/data # gigabytes
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

# ------------------------------------------------------------------------------ inputs
LIBS=$("$PEERS/kafka-libs.sh" "$KAFKA_4_VERSION" 2>"$LOGS/kafka-libs.log" | tail -1) \
  || { cat "$LOGS/kafka-libs.log" >&2; die "could not resolve the Kafka $KAFKA_4_VERSION jars"; }
MM2LIBS=$(dirname "$LIBS")/mm2-libs
[ -f "$MM2LIBS/connect-mirror-$KAFKA_4_MM2_VERSION.jar" ] || die "connect-mirror $KAFKA_4_MM2_VERSION missing in $MM2LIBS"
PY=$("$REPO/tests/clients/setup-venv.sh") || die "no clients venv (tests/clients/setup-venv.sh)"
PAYLOAD=$INPUTS/payload-$RSIZE.txt
[ -s "$PAYLOAD" ] || python3 "$BENCHPY" payload "$PAYLOAD" --size "$RSIZE" --count 4096
ZRATIO="?"
if command -v zstd >/dev/null; then
  ZRATIO=$(awk -v a=65536 -v b="$(head -c 65536 "$PAYLOAD" | zstd -3 -c | wc -c)" 'BEGIN{printf "%.1f", a/b}')
fi
cat >"$WORK/log4j2.properties" <<'EOF'
status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
EOF
CLIENT_JVM="-Xmx512M -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true"
JAVA_CLIENT=(java $CLIENT_JVM "-Dlog4j2.configurationFile=$WORK/log4j2.properties" -cp "$LIBS/*")
MM2_JVM="-Xms512m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -Djava.awt.headless=true"
PRODUCER_PROPS="acks=1 batch.size=65536 linger.ms=5"
METRICS=http://127.0.0.1:0
NODE_PIDS=("$KPEER_HOME/$SRC"/node{1,2,3}.pid "$KPEER_HOME/$DST"/node{1,2,3}.pid)
NODE_LOGS=("$KPEER_HOME/$SRC/node*.log" "$KPEER_HOME/$DST/node*.log")
ASSIGN1=$(printf '1%.0s,' $(seq 1 "$PARTS")); ASSIGN1=${ASSIGN1%,}
ASSIGN12=$(printf '1:2%.0s,' $(seq 1 "$PARTS")); ASSIGN12=${ASSIGN12%,}

# MirrorMaker 2, tuned for throughput (M103): written per codec by mm2_props CODEC TOPICS FILE
mm2_props() {
  cat >"$3" <<EOF
clusters = src, dst
src.bootstrap.servers = $S
dst.bootstrap.servers = $D
src->dst.enabled = true
dst->src.enabled = false
src->dst.topics = $2
replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
tasks.max = $PARTS
replication.factor = 1
refresh.topics.interval.seconds = 600
sync.topic.acls.enabled = false
dst.producer.compression.type = $1
dst.producer.linger.ms = 10
dst.producer.batch.size = 262144
dst.producer.buffer.memory = 67108864
dst.producer.acks = 1
dst.producer.max.in.flight.requests.per.connection = 5
src.consumer.max.poll.records = 2000
src.consumer.fetch.min.bytes = 1
src.consumer.fetch.max.bytes = 52428800
src.consumer.max.partition.fetch.bytes = 4194304
offset.flush.interval.ms = 10000
EOF
}
MM2_PROPS_DOC="IdentityReplicationPolicy, tasks.max = partitions ($PARTS), replication.factor=1, dst.producer.{compression.type=<the source's codec>, linger.ms=10, batch.size=262144, buffer.memory=67108864, acks=1, max.in.flight.requests.per.connection=5}, src.consumer.{max.poll.records=2000, fetch.min.bytes=1, fetch.max.bytes=52428800, max.partition.fetch.bytes=4194304}, offset.flush.interval.ms=10000, sync.topic.acls.enabled=false; the rest default (offset syncs, checkpoints, heartbeats on)"
# start-mm2.sh PROPS LOG: the JVM in the background, its pid in $WORK/mm2.pid (also the trigger
# of a catch-up case, run by mirror_bench.py)
cat >"$WORK/start-mm2.sh" <<EOF
#!/usr/bin/env bash
java $MM2_JVM -Dlog4j2.configurationFile=$WORK/log4j2.properties -cp '$MM2LIBS/*' \\
  org.apache.kafka.connect.mirror.MirrorMaker "\$1" >"\$2" 2>&1 </dev/null &
echo \$! >'$WORK/mm2.pid'
EOF
chmod +x "$WORK/start-mm2.sh"
start_mm2() { "$WORK/start-mm2.sh" "$@"; }

# ------------------------------------------------------------------------------ meta
meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
meta command "tests/bench/mirror-bench.sh${ORIG_ARGS:+ $ORIG_ARGS}"
bench_machine_meta "$WORK"
meta load_start "$(loadavg)"
meta records "$RECORDS"
meta reps "$REPS"
meta partitions "$PARTS"
meta record_size "$RSIZE"
meta payload_count 4096
meta zstd_ratio "$ZRATIO"
meta producer_props "$PRODUCER_PROPS"
meta lat_rate "$LAT_RATE"
meta lat_seconds "$LAT_SECONDS"
meta lat_warmup "$LAT_WARMUP"
if [ "$LAT_CLIENT" = librdkafka ]; then
  meta lat_client "$("$PY" -c 'import confluent_kafka as c; v = c.version(); print("librdkafka %s (confluent-kafka %s)" % (c.libversion()[0], v if isinstance(v, str) else v[0]))')"
else
  meta lat_client "kafka-python $("$PY" -c 'import kafka; print(kafka.__version__)')"
fi
meta mm2_version "$KAFKA_4_MM2_VERSION"
meta mm2_jvm "$MM2_JVM"
meta mm2_props "$MM2_PROPS_DOC"
meta kmirror_so "build/lib/kmirror.so"
meta km_mirror_config "bootstrap.servers=<source>, the rest default"
rev="unknown revision"
if git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
  rev="kbroker $("$BUILD_DIR/bin/kbroker" --version 2>&1 | head -1 | awk '{print $2}'), commit $(git -C "$REPO" log -1 --format='%h, %cs')"
  [ -z "$(git -C "$REPO" status --porcelain --untracked-files=no 2>/dev/null)" ] || rev+=", with uncommitted changes"
fi
btype=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || true)
meta kbroker_rev "$rev (${btype:-default (CMakeLists.txt)} build)"
meta topology "source: 3 kbroker brokers (node 1 also the controller), benchmark topics with all $PARTS partitions on node 1 (RF 1); destination: 3 kbroker brokers with kmirror.so, default.replication.factor=1, node 1 also the controller; every node with a metrics listener. The three modes run one after the other against the same two clusters."
meta fr_how "topic fr-<codec> on the destination, $PARTS partitions each on nodes 1:2 (leader 1, min.insync.replicas=1); node 2 killed (SIGKILL), the leader filled with acks=1, node 2 restarted: the window is its catch-up (bytes of its *.log files = the leader's), the node's restart before the first byte outside it."
meta method "Catch-up window: from the first 100 ms poll that sees data on the destination to the one that sees all of it (destination end offsets = the source's; follower: its log bytes = the leader's). MiB/s, records/s: payload (records × record size) moved in the window. CPU: utime+stime (/proc/PID/stat) of all 6 brokers and of MM2's JVM in the window, minus the brokers' idle rate measured for 3 s before the start, per GiB of payload; and the same for the threads doing the mirroring alone: kmirror's (kmirror-*, MirrorFetcherThread-*), MM2's whole JVM, kbroker's follower fetchers (kb-rf-*), from /proc/PID/task/*/stat. Wire: kbroker_network_received_bytes_total + kbroker_network_sent_bytes_total over all 6 brokers from the start of the case to its end (every connection has one kbroker server end: source→mirror, MM2→both, follower→leader), minus the idle rate, per byte of payload. Latency: see Workload."

# ------------------------------------------------------------------------------ clusters
log "records/case $RECORDS x $RSIZE B, $PARTS partitions, $REPS round(s), modes $MODES, codecs $CODECS; load average $(loadavg)"
"$CL" stop --name "$SRC" >/dev/null 2>&1 || true
"$CL" stop --name "$DST" >/dev/null 2>&1 || true
"$REPO/tests/peers/mvn-build.sh" "$REPO/tests/java/peer-tools" peer-tools.jar >/dev/null || die "peer-tools does not build"
"$REPO/tests/peers/mvn-build.sh" "$REPO/tests/java/cluster-tools" cluster-tools.jar >/dev/null || die "cluster-tools does not build"
# Ports 32768-60999 are also the kernel's ephemeral range: another process's outgoing connection
# may hold one of ours as its local port. free_base P: P or the next P+200 (at most 4 tries) with
# no socket but TIME-WAIT ones (the brokers listen with SO_REUSEADDR) on P, P+1, P+10, P+20; a
# start that still loses the race is retried likewise.
free_base() {
  local b=$1 o busy i
  for i in 1 2 3 4; do
    busy=0
    for o in 0 1 10 20; do
      [ -z "$(ss -Htan exclude time-wait "( sport = :$((b + o)) )" 2>/dev/null)" ] || busy=1
    done
    [ "$busy" = 0 ] && { echo "$b"; return 0; }
    b=$((b + 200))
  done
  return 1
}
start_cluster() { # NAME BASE LOG ARGS...: start, retrying on a port taken meanwhile (3 tries)
  local n=$1 b=$2 lg=$3 try
  shift 3
  for try in 1 2 3; do
    b=$(free_base "$b") || { log "no free ports for $n"; return 1; }
    if "$CL" start --name "$n" --backend kbroker --build "$BUILD_DIR" --base-port "$b" \
      --controllers node1 --override "metrics.listener=$METRICS" "$@" >"$lg" 2>&1; then
      return 0
    fi
    grep -q 'Address already in use' "$lg" || return 1
    log "$n: a port of base $b was taken meanwhile (try $try): next base"
    "$CL" stop --name "$n" >/dev/null 2>&1 || true
    b=$((b + 200))
  done
  return 1
}
STARTED=1
start_cluster "$SRC" "$SRC_PORT" "$LOGS/src-start.log" &
spid=$!
start_cluster "$DST" "$DST_PORT" "$LOGS/dst-start.log" --override "plugin.paths=$SO" \
  --override mirror.enable=true --override default.replication.factor=1 \
  || { cat "$LOGS/dst-start.log" >&2; die "destination cluster did not start"; }
wait "$spid" || { cat "$LOGS/src-start.log" >&2; die "source cluster did not start"; }
S=$("$CL" bootstrap --name "$SRC")
D=$("$CL" bootstrap --name "$DST")
log "source $S, destination $D"

ctopic() { # CLUSTER TOPIC ASSIGN [k=v]...
  local c=$1 t=$2 asg=$3 cf=() kv
  shift 3
  for kv in "$@"; do cf+=(--config "$kv"); done
  "$CL" admin create-topic --name "$c" --topic "$t" --assign "$asg" "${cf[@]}" \
    --timeout-ms 120000 >>"$LOGS/topics.log" 2>&1 || { tail -5 "$LOGS/topics.log" >&2; die "creating topic $t on $c failed"; }
}
fill() { # BOOTSTRAP TOPIC CODEC: N records of RSIZE bytes, checked
  local lg=$LOGS/fill-$2.log
  # shellcheck disable=SC2086
  timeout -k 10 900 "${JAVA_CLIENT[@]}" org.apache.kafka.tools.ProducerPerformance \
    --bootstrap-server "$1" --topic "$2" --num-records "$RECORDS" --payload-file "$PAYLOAD" \
    --throughput -1 --command-property compression.type="$3" $PRODUCER_PROPS >"$lg" 2>&1 \
    || { tail -5 "$lg" >&2; return 1; }
  [ "$(python3 "$BENCHPY" parse-producer "$lg" | cut -d' ' -f1)" = "$RECORDS" ] || { tail -5 "$lg" >&2; return 1; }
}
past_deadline() { [ $SECONDS -ge $DEADLINE ] && { log "WARNING: --max-minutes $MAX_MIN reached: skipping the rest"; return 0; }; return 1; }
skip() { # KIND MODE CODEC NOTE: a failed/skipped row
  python3 -c 'import json, sys; print(json.dumps({"kind": sys.argv[1], "mode": sys.argv[2],
    "codec": sys.argv[3], "round": int(sys.argv[4]), "status": "failed", "note": sys.argv[5]}))' \
    "$1" "$2" "$3" "$ROUND" "$4" >>"$RESULTS"
  OVERALL_RC=3
  log "r$ROUND $1 $2 $3: FAILED: $4"
}
catchup() { # MODE CODEC TRIGGER [extra mirror_bench args]: one measured case
  local m=$1 z=$2 trig=$3 out=$WORK/r$ROUND-$1-$2.json
  shift 3
  rm -f "$out"
  wait_quiet
  if "$PY" "$MBPY" catchup --mode "$m" --codec "$z" --round "$ROUND" --records "$RECORDS" \
    --size "$RSIZE" --pidfiles "${NODE_PIDS[@]}" "$WORK/mm2.pid" --metrics-logs "${NODE_LOGS[@]}" \
    --timeout 900 --trigger "$trig" --out "$out" "$@" >"$LOGS/r$ROUND-catchup-$m-$z.log" 2>&1; then
    log "r$ROUND catch-up $m $z: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%.1f MiB/s, %.0f rec/s, %.2f CPU s/GiB%s, %.2f wire B/B, window %.1f s of %.1f s, other %.0f%%, reclaim scanned %.0f MiB direct + %.0f MiB kswapd, direct compaction %d stalls %.0f MiB" % (r["mib_s"], r["rec_s"], r["cpu_s_per_gib"], "" if r.get("work_sys_cpu_s_per_gib") is None else " (mirroring threads %.2f, of it kernel %.2f)" % (r["work_cpu_s_per_gib"], r["work_sys_cpu_s_per_gib"]), r["wire_per_byte"], r["window_s"], r["wall_s"], 100*r["other_share"], r["reclaim_direct_mib"], r["reclaim_kswapd_mib"], r["compact_stalls"], r["compact_direct_mib"]))' "$out")"
  else
    OVERALL_RC=3
    log "r$ROUND catch-up $m $z: FAILED: $(tail -3 "$LOGS/r$ROUND-catchup-$m-$z.log")"
  fi
  if [ -s "$out" ]; then { cat "$out"; echo; } >>"$RESULTS"; else
    skip catchup "$m" "$z" "no result: $(tail -1 "$LOGS/r$ROUND-catchup-$m-$z.log")"; fi
  return 0
}
latency() { # MODE SRC SRC_TOPIC DST DST_TOPIC
  local out=$WORK/r$ROUND-lat-$1.json
  rm -f "$out"
  # the path runs end to end before the clock starts (MM2's JVM and tasks, the mirror's fetcher)
  if ! "$PY" "$MBPY" probe --src "$2" --src-topic "$3" --dst "$4" --dst-topic "$5" --timeout 300 \
    >"$LOGS/r$ROUND-lat-$1-probe.log" 2>&1; then
    skip latency "$1" - "the path does not run: $(tail -1 "$LOGS/r$ROUND-lat-$1-probe.log")"
    return 0
  fi
  wait_quiet
  if "$PY" "$MBPY" latency --mode "$1" --round "$ROUND" --src "$2" --src-topic "$3" --dst "$4" \
    --dst-topic "$5" --rate "$LAT_RATE" --seconds "$LAT_SECONDS" --warmup "$LAT_WARMUP" \
    --size "$RSIZE" --client "$LAT_CLIENT" --out "$out" >"$LOGS/r$ROUND-lat-$1.log" 2>&1; then
    log "r$ROUND latency $1: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("p50 %.1f ms, p99 %.1f ms, max %.1f ms (%d records)" % (r["p50_ms"], r["p99_ms"], r["max_ms"], r["measured"]) + ("; send->source append p50 %.1f p99 %.1f ms, source append->consumer p50 %.1f p99 %.1f max %.1f ms" % (r["hop1_p50_ms"], r["hop1_p99_ms"], r["hop2_p50_ms"], r["hop2_p99_ms"], r["hop2_max_ms"]) if "hop1_p50_ms" in r else ""))' "$out")"
  else
    OVERALL_RC=3
    log "r$ROUND latency $1: FAILED: $(tail -3 "$LOGS/r$ROUND-lat-$1.log")"
  fi
  if [ -s "$out" ]; then { cat "$out"; echo; } >>"$RESULTS"; else
    skip latency "$1" - "no result: $(tail -1 "$LOGS/r$ROUND-lat-$1.log")"; fi
  return 0
}
mirror_on_all() { # every destination broker lists mirror bench
  local b
  for b in ${D//,/ }; do "$KM" --bootstrap-server "$b" --list 2>/dev/null | grep -q '^bench ' || return 1; done
}

# ------------------------------------------------------------------------------ rounds
# Topics of round R: km-<codec>-rR, mm-<codec>-rR (source), fr-<codec>-rR (destination),
# lat-km-rR, lat-mm-rR (source), lat-fr-rR (destination). Nothing is reused across rounds.
ROUND=0
if want km "$MODES"; then
  printf 'bootstrap.servers=%s\n' "$S" >"$WORK/mirror.properties"
  "$KM" --bootstrap-server "$D" --create --mirror bench --mirror-config "$WORK/mirror.properties" \
    >"$LOGS/mirror-create.log" 2>&1 || { cat "$LOGS/mirror-create.log" >&2; die "kafka-mirrors --create failed"; }
  end=$((SECONDS + 60))
  until mirror_on_all; do
    [ $SECONDS -lt $end ] || die "mirror bench not listed by every destination broker within 60 s"
    sleep 0.5 # poll interval
  done
fi
for ((ROUND = 1; ROUND <= REPS; ROUND++)); do
  log "=== round $ROUND of $REPS (load average $(loadavg)) ==="
  for z in ${CODECS//,/ }; do
    [ "$CATCHUP" = 1 ] || break
    # (c) follower replication first: it kills and restarts destination node 2
    if want fr "$MODES" && ! past_deadline; then
      t=fr-$z-r$ROUND
      ctopic "$DST" "$t" "$ASSIGN12" min.insync.replicas=1
      "$CL" kill 2 --name "$DST" >>"$LOGS/fr.log" 2>&1 || die "kill of destination node 2 failed"
      if fill "$D" "$t" "$z"; then
        catchup fr "$z" "'$CL' restart 2 --name $DST" \
          --leader-dirs "$KPEER_HOME/$DST/node1/data/$t-*" --follower-dirs "$KPEER_HOME/$DST/node2/data/$t-*"
      else
        skip catchup fr "$z" "filling $t failed"
      fi
      # node 2 back whatever happened (a case that failed before its trigger leaves it down)
      "$CL" pid 2 --name "$DST" >/dev/null 2>&1 || "$CL" restart 2 --name "$DST" >>"$LOGS/fr.log" 2>&1
      "$CL" admin wait --name "$DST" --topic "$t" --partition all --until isr-full --timeout-ms 300000 \
        >>"$LOGS/fr.log" 2>&1 || die "destination node 2 did not rejoin the ISR of $t within 300 s"
    fi
    # (a) kmirror
    if want km "$MODES" && ! past_deadline; then
      t=km-$z-r$ROUND
      ctopic "$SRC" "$t" "$ASSIGN1"
      if fill "$S" "$t" "$z"; then
        catchup km "$z" "'$KM' --bootstrap-server $D --start --mirror bench --topic $t" \
          --src "$S" --src-topic "$t" --dst "$D" --dst-topic "$t"
      else
        skip catchup km "$z" "filling $t failed"
      fi
    fi
    # (b) MirrorMaker 2: a fresh JVM per case
    if want mm "$MODES" && ! past_deadline; then
      t=mm-$z-r$ROUND
      ctopic "$SRC" "$t" "$ASSIGN1"
      if fill "$S" "$t" "$z"; then
        mm2_props "$z" "$t" "$WORK/mm2-$t.properties"
        catchup mm "$z" "'$WORK/start-mm2.sh' '$WORK/mm2-$t.properties' '$LOGS/mm2-$t.log'" \
          --src "$S" --src-topic "$t" --dst "$D" --dst-topic "$t"
        stop_mm2
      else
        skip catchup mm "$z" "filling $t failed"
      fi
    fi
  done
  [ "$LATENCY" = 1 ] || continue
  if want fr "$MODES" && ! past_deadline; then
    t=lat-fr-r$ROUND
    ctopic "$DST" "$t" "$ASSIGN12" min.insync.replicas=1 "$LAT_TS"
    latency fr "$D" "$t" "$D" "$t"
  fi
  if want km "$MODES" && ! past_deadline; then
    t=lat-km-r$ROUND
    ctopic "$SRC" "$t" "$ASSIGN1" "$LAT_TS"
    if "$KM" --bootstrap-server "$D" --start --mirror bench --topic "$t" --wait --timeout-ms 120000 \
      >"$LOGS/r$ROUND-lat-km-start.log" 2>&1; then
      latency km "$S" "$t" "$D" "$t"
    else
      skip latency km - "kafka-mirrors --start --wait $t failed: $(tail -2 "$LOGS/r$ROUND-lat-km-start.log")"
    fi
  fi
  if want mm "$MODES" && ! past_deadline; then
    t=lat-mm-r$ROUND
    ctopic "$SRC" "$t" "$ASSIGN1" "$LAT_TS"
    mm2_props none "$t" "$WORK/mm2-$t.properties"
    start_mm2 "$WORK/mm2-$t.properties" "$LOGS/mm2-$t.log"
    latency mm "$S" "$t" "$D" "$t"
    stop_mm2
  fi
done
meta load_end "$(loadavg)"
meta wall "total wall time $(((SECONDS - T_START) / 60)) min $(((SECONDS - T_START) % 60)) s"

# ------------------------------------------------------------------------------ report
report_args=(report --results "$RESULTS" --meta "$META")
RPY=python3
if [ "$DOC" = 1 ]; then
  VENV=$BUILD_DIR/bench-venv
  if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
    log "setting up $VENV (pip install matplotlib)"
    { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q matplotlib; } >"$LOGS/venv.log" 2>&1 \
      || log "WARNING: could not install matplotlib into $VENV (see $LOGS/venv.log)"
  fi
  RPY=$VENV/bin/python
  mkdir -p "$REPO/docs/img"
  report_args+=(--doc "$REPO/docs/performance.md" --png "$REPO/docs/img/mirror-bench.png")
fi
echo
echo "Mirroring: kmirror vs MirrorMaker 2 $KAFKA_4_MM2_VERSION vs follower replication — $RECORDS x $RSIZE B records, $PARTS partitions, $REPS round(s)$([ "$QUICK" = 1 ] && echo ' (--quick: numbers mean nothing)')"
echo
rrc=0
"$RPY" "$MBPY" "${report_args[@]}" || rrc=$?
[ "$rrc" = 0 ] || [ "$OVERALL_RC" != 0 ] || OVERALL_RC=$rrc
log "raw rows: $RESULTS; logs: $LOGS; total $((SECONDS - T_START)) s"
exit "$OVERALL_RC"
