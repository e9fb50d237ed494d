#!/usr/bin/env bash
# kafka-cluster.sh — run a real Apache Kafka cluster (KRaft, combined broker+controller nodes,
# static voters) on 127.0.0.1 from the Maven jars that kafka-libs.sh resolves.
#
#   kafka-cluster.sh start --name N [--nodes 1|3] [--version V] [--base-port P]
#                          [--override k=v]... [--heap 512m] [--perf] [--jvm-opts "..."]
#                          [--timeout SECONDS] [--log-level WARN|INFO|DEBUG]
#   kafka-cluster.sh stop --name N [--timeout SECONDS]
#   kafka-cluster.sh status --name N          (exit 0 only if every node is running and listening)
#   kafka-cluster.sh bootstrap --name N       (prints 127.0.0.1:P,127.0.0.1:P+10,...)
#
# Layout: $KPEER_HOME/<name>/ holds cluster.env, node<i>.properties, node<i>.log, node<i>.pid and
# node<i>/data. Node i listens on P+10*(i-1) (clients, PLAINTEXT) and P+10*(i-1)+1 (CONTROLLER).
# Defaults: --nodes 1, --version $KAFKA_4_VERSION, --base-port 19092, heap 512m, and for functional
# tests -XX:+UseSerialGC -XX:TieredStopAtLevel=1 (--perf drops those for benchmarks: G1, full JIT).
# start formats fresh storage every time (the old data dir is removed), waits until every node
# answers DescribeCluster and sees all brokers (deadline, no fixed sleeps), and prints the time it
# took. On failure it prints the tail of each node log and stops what it started.
# stop sends SIGTERM, waits (deadline), then SIGKILLs, and leaves no process behind.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=versions.env
. "$HERE/versions.env"
KPEER_HOME=${KPEER_HOME:-$REPO/.kpeer}

die() { echo "kafka-cluster: $*" >&2; exit 1; }
log() { echo "kafka-cluster: $*" >&2; }
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 64; }

now_ms() { date +%s%3N; }

CMD=${1:-}; [ -n "$CMD" ] || usage; shift
NAME= NODES=1 VERSION=$KAFKA_4_VERSION BASE_PORT=19092 HEAP=512m PERF=0 JVM_EXTRA= TIMEOUT=
LOGLEVEL=WARN
OVERRIDES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --name) NAME=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --version) VERSION=$2; shift 2 ;;
    --base-port) BASE_PORT=$2; shift 2 ;;
    --override) OVERRIDES+=("$2"); shift 2 ;;
    --heap) HEAP=$2; shift 2 ;;
    --perf) PERF=1; shift ;;
    --jvm-opts) JVM_EXTRA=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --log-level) LOGLEVEL=$2; shift 2 ;;
    -h|--help) usage ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[ -n "$NAME" ] || die "--name is required"
[[ "$NAME" =~ ^[A-Za-z0-9._-]+$ ]] || die "bad --name '$NAME'"
CDIR=$KPEER_HOME/$NAME

client_port() { echo $((BASE_PORT + 10 * ($1 - 1))); }
ctrl_port() { echo $((BASE_PORT + 10 * ($1 - 1) + 1)); }

load_env() {
  [ -f "$CDIR/cluster.env" ] || die "no cluster '$NAME' under $KPEER_HOME (never started?)"
  # shellcheck disable=SC1091
  . "$CDIR/cluster.env"
}

bootstrap_list() {
  local i out=
  for ((i = 1; i <= NODES; i++)); do out+="${out:+,}127.0.0.1:$(client_port "$i")"; done
  echo "$out"
}

# pid_of I: prints the pid of node I if its pid file names a live process that is really that
# node (its command line contains the node's config path; guards against pid reuse).
pid_of() {
  local f=$CDIR/node$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$CDIR/node$1.properties" || return 1
  echo "$pid"
}

# Processes that run one of this cluster's node configs but have no (valid) pid file, e.g. after
# the pid files were lost. Matches the exact config path of this cluster only.
stray_pids() {
  local p cl
  for p in /proc/[0-9]*; do
    cl=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
    case "$cl" in
      *kafka.Kafka\ "$CDIR"/node*.properties*) echo "${p#/proc/}" ;;
    esac
  done
}

port_in_use() { [ -n "$(ss -Hltn "( sport = :$1 )" 2>/dev/null)" ]; }

rss_mb() { awk '/VmRSS/ {printf "%d", $2/1024}' "/proc/$1/status" 2>/dev/null || echo "?"; }

tail_logs() {
  local i
  for ((i = 1; i <= NODES; i++)); do
    if [ -f "$CDIR/node$i.log" ]; then
      echo "----- tail of $CDIR/node$i.log -----" >&2
      tail -n "${1:-40}" "$CDIR/node$i.log" >&2
    fi
  done
}

do_stop() {
  local deadline=${TIMEOUT:-30} i pid pids=() t0
  t0=$(now_ms)
  for ((i = 1; i <= NODES; i++)); do
    if pid=$(pid_of "$i"); then pids+=("$pid"); fi
  done
  for pid in $(stray_pids); do
    [[ " ${pids[*]} " == *" $pid "* ]] || { log "found stray node process $pid of '$NAME'"; pids+=("$pid"); }
  done
  if [ ${#pids[@]} -eq 0 ]; then
    log "cluster '$NAME': no running node"
    rm -f "$CDIR"/node*.pid
    return 0
  fi
  kill -TERM "${pids[@]}" 2>/dev/null || true
  local end=$((SECONDS + deadline)) alive
  while :; do
    alive=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
    [ ${#alive[@]} -eq 0 ] && break
    if [ $SECONDS -ge $end ]; then
      log "nodes ${alive[*]} still up after ${deadline}s: SIGKILL"
      kill -KILL "${alive[@]}" 2>/dev/null || true
      local kend=$((SECONDS + 10))
      while [ $SECONDS -lt $kend ]; do
        local any=0
        for pid in "${alive[@]}"; do kill -0 "$pid" 2>/dev/null && any=1; done
        [ $any = 0 ] && break
        sleep 0.1
      done
      break
    fi
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    kill -0 "$pid" 2>/dev/null && die "process $pid of '$NAME' survived SIGKILL"
  done
  rm -f "$CDIR"/node*.pid
  log "cluster '$NAME' stopped (${#pids[@]} processes) in $(( $(now_ms) - t0 )) ms"
}

write_configs() {
  local i voters= rf=$((NODES < 3 ? NODES : 3)) misr=$((NODES < 3 ? 1 : 2))
  for ((i = 1; i <= NODES; i++)); do voters+="${voters:+,}$i@127.0.0.1:$(ctrl_port "$i")"; done
  for ((i = 1; i <= NODES; i++)); do
    cat >"$CDIR/node$i.properties" <<EOF
# generated by tests/peers/kafka-cluster.sh for cluster '$NAME', node $i (Kafka $VERSION)
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(client_port "$i"),CONTROLLER://127.0.0.1:$(ctrl_port "$i")
advertised.listeners=PLAINTEXT://127.0.0.1:$(client_port "$i")
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$CDIR/node$i/data
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$misr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$misr
# test-speed and small-machine settings
log.cleaner.dedupe.buffer.size=2097152
group.initial.rebalance.delay.ms=0
offsets.topic.num.partitions=5
transaction.state.log.num.partitions=5
num.network.threads=2
num.io.threads=2
background.threads=2
num.recovery.threads.per.data.dir=1
num.replica.fetchers=1
auto.create.topics.enable=false
EOF
    local kv
    if [ ${#OVERRIDES[@]} -gt 0 ]; then
      echo "# --override" >>"$CDIR/node$i.properties"
      for kv in "${OVERRIDES[@]}"; do
        [[ "$kv" == *=* ]] || die "bad --override '$kv' (want key=value)"
        echo "$kv" >>"$CDIR/node$i.properties"
      done
    fi
  done
  cat >"$CDIR/log4j2.properties" <<EOF
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = $LOGLEVEL
rootLogger.appenderRef.out.ref = OUT
logger.server.name = kafka.server
logger.server.level = INFO
EOF
}

do_start() {
  case "$NODES" in 1 | 3) ;; *) die "--nodes must be 1 or 3" ;; esac
  [[ "$BASE_PORT" =~ ^[0-9]+$ ]] && [ "$BASE_PORT" -ge 1024 ] && [ "$BASE_PORT" -le 65000 ] \
    || die "bad --base-port '$BASE_PORT'"
  case "$VERSION" in 4.* | 3.9.*) ;; *) die "version $VERSION: only KRaft versions (3.9.x, 4.x) are supported here" ;; esac
  command -v java >/dev/null || die "java not found"

  # Refuse to clobber a running cluster of the same name, and refuse ports that are taken.
  if [ -f "$CDIR/cluster.env" ]; then
    # shellcheck disable=SC1091
    (. "$CDIR/cluster.env"; for ((i = 1; i <= NODES; i++)); do pid_of "$i" >/dev/null && exit 1; done; exit 0) \
      || die "cluster '$NAME' is already running; run: $0 stop --name $NAME"
  fi
  [ -z "$(stray_pids)" ] || die "processes of cluster '$NAME' are still running ($(stray_pids | tr '\n' ' ')); run: $0 stop --name $NAME"
  local i p
  for ((i = 1; i <= NODES; i++)); do
    for p in $(client_port "$i") $(ctrl_port "$i"); do
      port_in_use "$p" && die "port $p (node $i) is already in use on this machine: $(ss -Hltnp "( sport = :$p )" | head -1)"
    done
  done

  local libs
  libs=$("$HERE/kafka-libs.sh" "$VERSION" | tail -1)
  "$HERE/mvn-build.sh" "$REPO/tests/java/peer-tools" peer-tools.jar >/dev/null

  local t0
  t0=$(now_ms)
  mkdir -p "$CDIR"
  for ((i = 1; i <= NODES; i++)); do
    rm -rf "$CDIR/node$i"
    mkdir -p "$CDIR/node$i/data"
    [ -f "$CDIR/node$i.log" ] && mv -f "$CDIR/node$i.log" "$CDIR/node$i.log.prev"
  done
  rm -f "$CDIR"/node*.pid
  local cid
  cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)
  # A leading '-' would be read as an option by StorageTool; any base64url letter keeps it a uuid.
  [[ "$cid" == -* ]] && cid="A${cid:1}"
  cat >"$CDIR/cluster.env" <<EOF
NAME=$NAME
VERSION=$VERSION
NODES=$NODES
BASE_PORT=$BASE_PORT
CLUSTER_ID=$cid
EOF
  write_configs

  local fast="-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
  local tool_opts="-Xms64m -Xmx256m $fast -Djava.awt.headless=true -Dlog4j2.configurationFile=$CDIR/log4j2.properties"
  # Format every node's storage (in parallel; each is a short JVM).
  local fpids=()
  for ((i = 1; i <= NODES; i++)); do
    # shellcheck disable=SC2086
    java $tool_opts -cp "$libs/*" kafka.tools.StorageTool format -t "$cid" \
      -c "$CDIR/node$i.properties" >"$CDIR/node$i.format.log" 2>&1 &
    fpids+=($!)
  done
  for ((i = 1; i <= NODES; i++)); do
    wait "${fpids[$((i - 1))]}" || { cat "$CDIR/node$i.format.log" >&2; die "storage format of node $i failed"; }
  done
  local tf
  tf=$(now_ms)

  local jvm="-Xms$HEAP -Xmx$HEAP -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true"
  if [ "$PERF" = 1 ]; then
    jvm+=" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35"
  else
    jvm+=" $fast"
  fi
  jvm+=" -Dlog4j2.configurationFile=$CDIR/log4j2.properties $JVM_EXTRA"
  for ((i = 1; i <= NODES; i++)); do
    # setsid: the node outlives this script and is not hit by signals sent to our process group.
    # shellcheck disable=SC2086
    setsid java $jvm -cp "$libs/*" kafka.Kafka "$CDIR/node$i.properties" \
      >"$CDIR/node$i.log" 2>&1 </dev/null &
    echo $! >"$CDIR/node$i.pid"
  done

  # Readiness: one peer-tools JVM polls DescribeCluster on every node until each answers and sees
  # all brokers; meanwhile watch that no node died.
  local deadline=${TIMEOUT:-120} bs wpid rc=0
  bs=$(bootstrap_list)
  "$HERE/peer-tools.sh" wait-ready --bootstrap "$bs" --brokers "$NODES" \
    --timeout-ms $((deadline * 1000)) >"$CDIR/wait-ready.log" 2>&1 &
  wpid=$!
  while kill -0 "$wpid" 2>/dev/null; do
    for ((i = 1; i <= NODES; i++)); do
      # kill -0, not pid_of: until setsid has exec'd java the command line is still the shell's.
      if ! kill -0 "$(cat "$CDIR/node$i.pid")" 2>/dev/null; then
        kill "$wpid" 2>/dev/null || true
        wait "$wpid" 2>/dev/null || true
        log "node $i exited during startup"
        tail_logs 60
        do_stop >/dev/null 2>&1 || true
        die "cluster '$NAME' failed to start"
      fi
    done
    sleep 0.2
  done
  wait "$wpid" || rc=$?
  if [ "$rc" != 0 ]; then
    cat "$CDIR/wait-ready.log" >&2
    tail_logs 60
    do_stop >/dev/null 2>&1 || true
    die "cluster '$NAME' did not become ready within ${deadline}s"
  fi
  local t1 rss=
  t1=$(now_ms)
  for ((i = 1; i <= NODES; i++)); do rss+=" node$i=$(rss_mb "$(pid_of "$i")")MB"; done
  log "cluster '$NAME' (Kafka $VERSION, $NODES node(s), id $cid) ready at $bs:" \
      "format $((tf - t0)) ms, start-to-ready $((t1 - tf)) ms, total $((t1 - t0)) ms; RSS$rss"
}

do_status() {
  local i pid ok=0 known=" "
  for ((i = 1; i <= NODES; i++)); do
    if pid=$(pid_of "$i"); then
      known+="$pid "
      if port_in_use "$(client_port "$i")"; then
        echo "node$i pid=$pid 127.0.0.1:$(client_port "$i") listening rss=$(rss_mb "$pid")MB"
      else
        echo "node$i pid=$pid 127.0.0.1:$(client_port "$i") NOT listening"; ok=1
      fi
    else
      echo "node$i down"; ok=1
    fi
  done
  local sp= p
  for p in $(stray_pids); do [[ "$known" == *" $p "* ]] || sp+="$p "; done
  [ -z "$sp" ] || { echo "processes of this cluster without a pid file: $sp(run stop)"; ok=1; }
  return $ok
}

case "$CMD" in
  start) do_start ;;
  stop) load_env; do_stop ;;
  status) load_env; echo "cluster $NAME: Kafka $VERSION, $NODES node(s), id $CLUSTER_ID"; do_status ;;
  bootstrap) load_env; bootstrap_list ;;
  -h | --help | help) usage ;;
  *) die "unknown command '$CMD' (start|stop|status|bootstrap)" ;;
esac
