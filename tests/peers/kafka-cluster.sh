#!/usr/bin/env bash
# kafka-cluster.sh — run a real Apache Kafka cluster on 127.0.0.1 from the Maven jars that
# kafka-libs.sh resolves: KRaft (combined broker+controller nodes, static voters) for 3.9.x and 4.x,
# ZooKeeper mode (one ZooKeeper server from the zookeeper jar Kafka depends on, plus the brokers)
# for 2.x and 3.0-3.8.
#
#   kafka-cluster.sh start --name N [--nodes 1|3] [--version V] [--base-port P]
#                          [--override k=v]... [--heap 512m] [--perf] [--jvm-opts "..."]
#                          [--timeout SECONDS] [--log-level WARN|INFO|DEBUG]
#                          [--controllers all|node1|separate]
#   kafka-cluster.sh stop --name N [--timeout SECONDS]
#   kafka-cluster.sh status --name N          (exit 0 only if every node is running and listening)
#   kafka-cluster.sh bootstrap --name N       (prints 127.0.0.1:P,127.0.0.1:P+10,...)
#   kafka-cluster.sh kill|restart|pause|resume|pid --name N --node I [--wait]   (one node)
#
# Layout: $KPEER_HOME/<name>/ holds cluster.env, node<i>.properties, node<i>.log, node<i>.pid and
# node<i>/data. Node i listens on P+10*(i-1) (clients, PLAINTEXT) and P+10*(i-1)+1 (CONTROLLER).
# Defaults: --nodes 1, --version $KAFKA_4_VERSION, --base-port 19092, heap 512m, and for functional
# tests -XX:+UseSerialGC -XX:TieredStopAtLevel=1 (--perf drops those for benchmarks: G1, full JIT).
# start formats fresh storage every time (the old data dir is removed), waits until every node
# answers DescribeCluster and sees all brokers (deadline, no fixed sleeps), and prints the time it
# took. On failure it prints the tail of each node log and stops what it started.
# stop sends SIGTERM, waits (deadline), then SIGKILLs, and leaves no process behind.
# --controllers: "all" (default) makes every node a combined broker+controller voter; "node1"
# makes node 1 the only controller (broker,controller) and the others brokers; "separate" adds a
# controller-only node N+1 (controller port P+10*N+1, no client port) to N broker-only nodes.
# ZooKeeper mode: the ZooKeeper server listens on P+1 (zk.properties, zk.log, zk.pid, zk/data), is
# started and answering (`srvr`) before the brokers, and is stopped after them; --controllers does
# not apply. Kafka 2.x/3.x log through log4j 1 (log4j.properties), 4.x through log4j2.
# Per node (tests/cluster): kill = SIGKILL and wait until gone; restart = run the node's saved
# command line again (storage kept, log appended; --wait waits for readiness); pause/resume =
# SIGSTOP/SIGCONT; pid prints the node's pid.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=versions.env
. "$HERE/versions.env"
KPEER_HOME=${KPEER_HOME:-$REPO/.kpeer}

die() { echo "kafka-cluster: $*" >&2; exit 1; }
log() { echo "kafka-cluster: $*" >&2; }
usage() { sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 64; }

now_ms() { date +%s%3N; }

CMD=${1:-}; [ -n "$CMD" ] || usage; shift
NAME= NODES=1 VERSION=$KAFKA_4_VERSION BASE_PORT=19092 HEAP=512m PERF=0 JVM_EXTRA= TIMEOUT=
LOGLEVEL=WARN CONTROLLERS=all NODE= WAIT=0 MODE=
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
    --controllers) CONTROLLERS=$2; shift 2 ;;
    --node) NODE=$2; shift 2 ;;
    --wait) WAIT=1; shift ;;
    -h|--help) usage ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[ -n "$NAME" ] || die "--name is required"
[[ "$NAME" =~ ^[A-Za-z0-9._-]+$ ]] || die "bad --name '$NAME'"
CDIR=$KPEER_HOME/$NAME

client_port() { echo $((BASE_PORT + 10 * ($1 - 1))); }
ctrl_port() { echo $((BASE_PORT + 10 * ($1 - 1) + 1)); }
# Processes: the NODES brokers, plus the controller-only node NODES+1 with --controllers separate.
total_nodes() { if [ "${CONTROLLERS:-all}" = separate ]; then echo $((NODES + 1)); else echo "$NODES"; fi; }
is_broker() { [ "$1" -le "$NODES" ]; }
# kraft for 3.9.x and 4.x; zk for 2.x and 3.0-3.8 (their KRaft was early access or preview).
mode_of() {
  case "$1" in
    4.* | 3.9.*) echo kraft ;;
    2.* | 3.[0-8].*) echo zk ;;
    *) return 1 ;;
  esac
}
zk_port() { ctrl_port 1; }

load_env() {
  [ -f "$CDIR/cluster.env" ] || die "no cluster '$NAME' under $KPEER_HOME (never started?)"
  # shellcheck disable=SC1091
  . "$CDIR/cluster.env"
  MODE=${MODE:-kraft} # cluster.env files written before ZooKeeper mode existed
}

bootstrap_list() {
  local i out=
  for ((i = 1; i <= NODES; i++)); do out+="${out:+,}127.0.0.1:$(client_port "$i")"; done
  echo "$out"
}

# pid_of I: prints the pid of node I if its pid file names a live process that is really that
# node (its command line contains the node's config path; guards against pid reuse).
pid_of() { proc_pid "node$1"; }
# proc_pid BASE: the same for any process of this cluster whose files are BASE.pid/BASE.properties
# (node<i>, zk).
proc_pid() {
  local f=$CDIR/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$CDIR/$1.properties" || return 1
  echo "$pid"
}

# Processes that run one of this cluster's node configs but have no (valid) pid file, e.g. after
# the pid files were lost. Matches the exact config path of this cluster only.
stray_pids() {
  local p cl
  for p in /proc/[0-9]*; do
    { cl=$(tr '\0' ' ' <"$p/cmdline"); } 2>/dev/null || continue
    case "$cl" in
      *kafka.Kafka\ "$CDIR"/node*.properties*) echo "${p#/proc/}" ;;
      *QuorumPeerMain\ "$CDIR"/zk.properties*) echo "${p#/proc/}" ;;
    esac
  done
}

port_in_use() { [ -n "$(ss -Hltn "( sport = :$1 )" 2>/dev/null)" ]; }

rss_mb() { awk '/VmRSS/ {printf "%d", $2/1024}' "/proc/$1/status" 2>/dev/null || echo "?"; }

tail_logs() {
  local i
  for ((i = 1; i <= $(total_nodes); i++)); do
    if [ -f "$CDIR/node$i.log" ]; then
      echo "----- tail of $CDIR/node$i.log -----" >&2
      tail -n "${1:-40}" "$CDIR/node$i.log" >&2
    fi
  done
  if [ "$MODE" = zk ] && [ -f "$CDIR/zk.log" ]; then
    echo "----- tail of $CDIR/zk.log -----" >&2
    tail -n "${1:-40}" "$CDIR/zk.log" >&2
  fi
}

do_stop() {
  local i pid pids=() t0 ctl= zk=
  t0=$(now_ms)
  for ((i = 1; i <= $(total_nodes); i++)); do
    if pid=$(pid_of "$i"); then
      # The single controller (--controllers node1 or separate) stops after the other nodes:
      # they shut down through it.
      if { [ "$CONTROLLERS" = node1 ] && [ "$i" = 1 ]; } || ! is_broker "$i"; then ctl=$pid; else pids+=("$pid"); fi
    fi
  done
  zk=$(proc_pid zk) || zk=
  for pid in $(stray_pids); do
    [[ " ${pids[*]} $ctl $zk " == *" $pid "* ]] && continue
    log "found stray process $pid of '$NAME'"
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q QuorumPeerMain; then zk=$pid; else pids+=("$pid"); fi
  done
  if [ ${#pids[@]} -eq 0 ] && [ -z "$ctl" ] && [ -z "$zk" ]; then
    log "cluster '$NAME': no running node"
    rm -f "$CDIR"/node*.pid "$CDIR/zk.pid"
    return 0
  fi
  [ ${#pids[@]} -eq 0 ] || stop_pids "${pids[@]}"
  [ -z "$ctl" ] || stop_pids "$ctl"
  # ZooKeeper last: the brokers' controlled shutdown goes through it.
  [ -z "$zk" ] || stop_pids "$zk"
  rm -f "$CDIR"/node*.pid "$CDIR/zk.pid"
  log "cluster '$NAME' stopped ($((${#pids[@]} + (${#ctl} > 0 ? 1 : 0) + (${#zk} > 0 ? 1 : 0))) processes) in $(( $(now_ms) - t0 )) ms"
}

# stop_pids PID...: SIGTERM, wait up to the deadline, SIGKILL, verify gone.
stop_pids() {
  local deadline=${TIMEOUT:-30} pid pids=("$@")
  kill -TERM "${pids[@]}" 2>/dev/null || true
  kill -CONT "${pids[@]}" 2>/dev/null || true # a paused node must be able to act on SIGTERM
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
  return 0
}

# ZooKeeper mode: the ZooKeeper server (standalone, 127.0.0.1 only, no admin server: it would want
# Jetty and port 8080) and the brokers (broker.id = node number, zookeeper.connect to it).
write_configs_zk() {
  local i rf=$((NODES < 3 ? NODES : 3)) misr=$((NODES < 3 ? 1 : 2))
  cat >"$CDIR/zk.properties" <<EOF
# generated by tests/peers/kafka-cluster.sh for cluster '$NAME': ZooKeeper server (Kafka $VERSION)
dataDir=$CDIR/zk/data
clientPort=$(zk_port)
clientPortAddress=127.0.0.1
maxClientCnxns=0
tickTime=2000
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok
EOF
  for ((i = 1; i <= NODES; i++)); do
    cat >"$CDIR/node$i.properties" <<EOF
# generated by tests/peers/kafka-cluster.sh for cluster '$NAME', node $i (Kafka $VERSION, ZooKeeper mode)
broker.id=$i
zookeeper.connect=127.0.0.1:$(zk_port)
zookeeper.connection.timeout.ms=60000
zookeeper.session.timeout.ms=30000
listeners=PLAINTEXT://127.0.0.1:$(client_port "$i")
advertised.listeners=PLAINTEXT://127.0.0.1:$(client_port "$i")
inter.broker.listener.name=PLAINTEXT
log.dirs=$CDIR/node$i/data
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$misr
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
  done
}

write_configs() {
  local i voters= rf=$((NODES < 3 ? NODES : 3)) misr=$((NODES < 3 ? 1 : 2)) roles listeners
  if [ "$MODE" = zk ]; then write_configs_zk; fi
  [ "$MODE" = zk ] || case "$CONTROLLERS" in
    all) for ((i = 1; i <= NODES; i++)); do voters+="${voters:+,}$i@127.0.0.1:$(ctrl_port "$i")"; done ;;
    node1) voters="1@127.0.0.1:$(ctrl_port 1)" ;;
    separate) voters="$((NODES + 1))@127.0.0.1:$(ctrl_port $((NODES + 1)))" ;;
  esac
  if [ "$CONTROLLERS" = separate ]; then
    i=$((NODES + 1))
    cat >"$CDIR/node$i.properties" <<EOF
# generated by tests/peers/kafka-cluster.sh for cluster '$NAME', node $i: controller only (Kafka $VERSION)
process.roles=controller
node.id=$i
controller.quorum.voters=$voters
listeners=CONTROLLER://127.0.0.1:$(ctrl_port "$i")
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT
log.dirs=$CDIR/node$i/data
num.io.threads=2
num.network.threads=2
background.threads=2
EOF
  fi
  for ((i = 1; i <= NODES; i++)); do
    [ "$MODE" = kraft ] || break
    roles=broker,controller
    listeners="PLAINTEXT://127.0.0.1:$(client_port "$i"),CONTROLLER://127.0.0.1:$(ctrl_port "$i")"
    if [ "$CONTROLLERS" = separate ] || { [ "$CONTROLLERS" = node1 ] && [ "$i" != 1 ]; }; then
      roles=broker
      listeners="PLAINTEXT://127.0.0.1:$(client_port "$i")"
    fi
    cat >"$CDIR/node$i.properties" <<EOF
# generated by tests/peers/kafka-cluster.sh for cluster '$NAME', node $i (Kafka $VERSION)
process.roles=$roles
node.id=$i
controller.quorum.voters=$voters
listeners=$listeners
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
  done
  local kv
  for ((i = 1; i <= $(total_nodes); i++)); do
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
  # Kafka 2.x/3.x (and their ZooKeeper) log through log4j 1 (log4j 1.2.17 or reload4j).
  cat >"$CDIR/log4j.properties" <<EOF
log4j.rootLogger=$LOGLEVEL, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server=INFO
log4j.logger.org.apache.zookeeper.server.ZooKeeperServer=INFO
EOF
}

# log_opt: the JVM option that points this version's logging at our config.
log_opt() {
  case "$VERSION" in
    4.*) echo "-Dlog4j2.configurationFile=$CDIR/log4j2.properties" ;;
    *) echo "-Dlog4j.configuration=file:$CDIR/log4j.properties" ;;
  esac
}

# wait_zk DEADLINE_S: until the ZooKeeper server answers `srvr` as a standalone server, while its
# process lives.
wait_zk() {
  local end=$((SECONDS + $1)) out
  while :; do
    kill -0 "$(cat "$CDIR/zk.pid")" 2>/dev/null || return 1
    out=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf srvr >&3 && cat <&3' _ "$(zk_port)" 2>/dev/null) || true
    [[ "$out" == *"Mode: standalone"* ]] && return 0
    [ $SECONDS -lt $end ] || return 2
    sleep 0.2 # poll interval of a deadline-bounded wait
  done
}

do_start() {
  case "$NODES" in 1 | 3) ;; *) die "--nodes must be 1 or 3" ;; esac
  case "$CONTROLLERS" in all | node1 | separate) ;; *) die "--controllers must be all, node1 or separate" ;; esac
  [[ "$BASE_PORT" =~ ^[0-9]+$ ]] && [ "$BASE_PORT" -ge 1024 ] && [ "$BASE_PORT" -le 65000 ] \
    || die "bad --base-port '$BASE_PORT'"
  MODE=$(mode_of "$VERSION") || die "version $VERSION: not supported (KRaft: 3.9.x, 4.x; ZooKeeper: 2.x, 3.0-3.8)"
  if [ "$MODE" = zk ]; then
    [ "$CONTROLLERS" = all ] || die "--controllers does not apply to Kafka $VERSION (ZooKeeper mode)"
  fi
  command -v java >/dev/null || die "java not found"

  # Refuse to clobber a running cluster of the same name, and refuse ports that are taken.
  if [ -f "$CDIR/cluster.env" ]; then
    # shellcheck disable=SC1091
    (. "$CDIR/cluster.env"; proc_pid zk >/dev/null && exit 1
     for ((i = 1; i <= $(total_nodes); i++)); do pid_of "$i" >/dev/null && exit 1; done; exit 0) \
      || die "cluster '$NAME' is already running; run: $0 stop --name $NAME"
  fi
  [ -z "$(stray_pids)" ] || die "processes of cluster '$NAME' are still running ($(stray_pids | tr '\n' ' ')); run: $0 stop --name $NAME"
  local i p
  for ((i = 1; i <= $(total_nodes); i++)); do
    for p in $(client_port "$i") $(ctrl_port "$i"); do
      port_in_use "$p" && die "port $p (node $i) is already in use on this machine: $(ss -Hltnp "( sport = :$p )" | head -1)"
    done
  done

  local libs
  libs=$("$HERE/kafka-libs.sh" --no-mm2 "$VERSION" | tail -1) # the brokers never need MM2
  "$HERE/mvn-build.sh" "$REPO/tests/java/peer-tools" peer-tools.jar >/dev/null

  local t0
  t0=$(now_ms)
  mkdir -p "$CDIR"
  rm -f "$CDIR"/node*.cmdline
  for ((i = 1; i <= $(total_nodes); i++)); do
    rm -rf "$CDIR/node$i"
    mkdir -p "$CDIR/node$i/data"
    [ -f "$CDIR/node$i.log" ] && mv -f "$CDIR/node$i.log" "$CDIR/node$i.log.prev"
  done
  rm -f "$CDIR"/node*.pid "$CDIR/zk.pid" "$CDIR/zk.cmdline"
  rm -rf "$CDIR/zk"
  [ -f "$CDIR/zk.log" ] && mv -f "$CDIR/zk.log" "$CDIR/zk.log.prev"
  local cid
  if [ "$MODE" = zk ]; then
    cid=zk # chosen by the first broker; read from meta.properties once the cluster is ready
  else
    cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)
    # A leading '-' would be read as an option by StorageTool; any base64url letter keeps it a uuid.
    [[ "$cid" == -* ]] && cid="A${cid:1}"
  fi
  cat >"$CDIR/cluster.env" <<EOF
NAME=$NAME
VERSION=$VERSION
NODES=$NODES
BASE_PORT=$BASE_PORT
CLUSTER_ID=$cid
CONTROLLERS=$CONTROLLERS
MODE=$MODE
EOF
  write_configs

  local fast="-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
  local tool_opts="-Xms64m -Xmx256m $fast -Djava.awt.headless=true $(log_opt)"
  if [ "$MODE" = zk ]; then
    # ZooKeeper first, answering before any broker starts (no storage format in ZooKeeper mode).
    mkdir -p "$CDIR/zk/data"
    local zkargs=(java -Xms32m -Xmx128m $fast -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
                  "$(log_opt)" -cp "$libs/*" org.apache.zookeeper.server.quorum.QuorumPeerMain
                  "$CDIR/zk.properties")
    printf '%s\n' "${zkargs[@]}" >"$CDIR/zk.cmdline"
    setsid "${zkargs[@]}" >"$CDIR/zk.log" 2>&1 </dev/null &
    echo $! >"$CDIR/zk.pid"
    local zrc=0
    wait_zk "${TIMEOUT:-120}" || zrc=$?
    if [ "$zrc" != 0 ]; then
      tail_logs 60
      do_stop >/dev/null 2>&1 || true
      [ "$zrc" = 1 ] && die "ZooKeeper of '$NAME' exited during startup"
      die "ZooKeeper of '$NAME' did not answer on 127.0.0.1:$(zk_port) within ${TIMEOUT:-120}s"
    fi
  fi
  # Format every node's storage (in parallel; each is a short JVM). KRaft only.
  local fpids=()
  for ((i = 1; i <= $(total_nodes); i++)); do
    [ "$MODE" = kraft ] || break
    # shellcheck disable=SC2086
    java $tool_opts -cp "$libs/*" kafka.tools.StorageTool format -t "$cid" \
      -c "$CDIR/node$i.properties" >"$CDIR/node$i.format.log" 2>&1 &
    fpids+=($!)
  done
  for ((i = 1; i <= ${#fpids[@]}; i++)); do
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
  jvm+=" $(log_opt) $JVM_EXTRA"
  for ((i = 1; i <= $(total_nodes); i++)); do
    # setsid: the node outlives this script and is not hit by signals sent to our process group.
    # The command line is saved (one argument a line) for `restart`.
    # shellcheck disable=SC2086
    printf '%s\n' java $jvm -cp "$libs/*" kafka.Kafka "$CDIR/node$i.properties" >"$CDIR/node$i.cmdline"
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
    for ((i = 1; i <= $(total_nodes); i++)); do
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
  for ((i = 1; i <= $(total_nodes); i++)); do rss+=" node$i=$(rss_mb "$(pid_of "$i")")MB"; done
  if [ "$MODE" = zk ]; then
    rss+=" zk=$(rss_mb "$(proc_pid zk)")MB"
    cid=$(sed -n 's/^cluster\.id=//p' "$CDIR/node1/data/meta.properties" 2>/dev/null)
    sed -i "s/^CLUSTER_ID=.*/CLUSTER_ID=${cid:-unknown}/" "$CDIR/cluster.env"
  fi
  log "cluster '$NAME' (Kafka $VERSION, $MODE, $NODES node(s), id $cid) ready at $bs:" \
      "$([ "$MODE" = zk ] && echo zookeeper || echo format) $((tf - t0)) ms, start-to-ready $((t1 - tf)) ms, total $((t1 - t0)) ms; RSS$rss"
}

do_status() {
  local i pid ok=0 known=" " port state
  for ((i = 1; i <= $(total_nodes); i++)); do
    if pid=$(pid_of "$i"); then
      known+="$pid "
      port=$(client_port "$i")
      is_broker "$i" || port=$(ctrl_port "$i")
      state=$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
      if [ "$state" = T ]; then
        echo "node$i pid=$pid 127.0.0.1:$port PAUSED (SIGSTOP)"; ok=1
      elif port_in_use "$port"; then
        echo "node$i pid=$pid 127.0.0.1:$port listening rss=$(rss_mb "$pid")MB"
      else
        echo "node$i pid=$pid 127.0.0.1:$port NOT listening"; ok=1
      fi
    else
      echo "node$i down"; ok=1
    fi
  done
  if [ "$MODE" = zk ]; then
    if pid=$(proc_pid zk); then
      known+="$pid "
      if port_in_use "$(zk_port)"; then echo "zookeeper pid=$pid 127.0.0.1:$(zk_port) listening rss=$(rss_mb "$pid")MB"
      else echo "zookeeper pid=$pid 127.0.0.1:$(zk_port) NOT listening"; ok=1; fi
    else
      echo "zookeeper down"; ok=1
    fi
  fi
  local sp= p
  for p in $(stray_pids); do [[ "$known" == *" $p "* ]] || sp+="$p "; done
  [ -z "$sp" ] || { echo "processes of this cluster without a pid file: $sp(run stop)"; ok=1; }
  return $ok
}

need_node() {
  [[ "$NODE" =~ ^[0-9]+$ ]] && [ "$NODE" -ge 1 ] && [ "$NODE" -le "$(total_nodes)" ] \
    || die "--node must be 1..$(total_nodes)"
}

# kill: SIGKILL one node and wait (deadline) until it is gone; the pid file is removed.
do_kill() {
  local pid end
  need_node
  pid=$(pid_of "$NODE") || die "node $NODE of '$NAME' is not running"
  kill -KILL "$pid"
  end=$((SECONDS + ${TIMEOUT:-30}))
  while kill -0 "$pid" 2>/dev/null; do
    [ $SECONDS -lt $end ] || die "node $NODE (pid $pid) still alive after SIGKILL"
    sleep 0.05 # poll interval of a deadline-bounded wait
  done
  rm -f "$CDIR/node$NODE.pid"
  log "node $NODE (pid $pid) killed"
}

# restart: run the node's saved command line again (storage is not formatted), log appended.
do_restart() {
  local args pid
  need_node
  if pid=$(pid_of "$NODE"); then die "node $NODE of '$NAME' is still running (pid $pid)"; fi
  [ -f "$CDIR/node$NODE.cmdline" ] || die "no saved command line for node $NODE (started by an older kafka-cluster.sh?)"
  mapfile -t args <"$CDIR/node$NODE.cmdline"
  echo "----- restart $(date -u +%FT%TZ) -----" >>"$CDIR/node$NODE.log"
  setsid "${args[@]}" >>"$CDIR/node$NODE.log" 2>&1 </dev/null &
  echo $! >"$CDIR/node$NODE.pid"
  log "node $NODE restarted (pid $!)"
  [ "$WAIT" = 1 ] || return 0
  local deadline=${TIMEOUT:-120} wpid rc=0
  "$HERE/peer-tools.sh" wait-ready --bootstrap "$(bootstrap_list)" --brokers "$NODES" \
    --timeout-ms $((deadline * 1000)) >"$CDIR/wait-ready.log" 2>&1 &
  wpid=$!
  while kill -0 "$wpid" 2>/dev/null; do
    if ! kill -0 "$(cat "$CDIR/node$NODE.pid")" 2>/dev/null; then
      kill "$wpid" 2>/dev/null || true
      tail -n 40 "$CDIR/node$NODE.log" >&2
      die "node $NODE exited while restarting"
    fi
    sleep 0.1 # poll interval while the readiness probe runs
  done
  wait "$wpid" || rc=$?
  [ "$rc" = 0 ] || { cat "$CDIR/wait-ready.log" >&2; die "cluster '$NAME' not ready within ${deadline}s after restarting node $NODE"; }
}

do_signal() {
  local pid
  need_node
  pid=$(pid_of "$NODE") || die "node $NODE of '$NAME' is not running"
  kill "-$1" "$pid"
  log "node $NODE (pid $pid): SIG$1"
}

case "$CMD" in
  start) do_start ;;
  kill) load_env; do_kill ;;
  restart) load_env; do_restart ;;
  pause) load_env; do_signal STOP ;;
  resume) load_env; do_signal CONT ;;
  pid) load_env; need_node; pid_of "$NODE" || die "node $NODE of '$NAME' is not running" ;;
  stop) load_env; do_stop ;;
  status) load_env; echo "cluster $NAME: Kafka $VERSION ($MODE), $NODES node(s), id $CLUSTER_ID"; do_status ;;
  bootstrap) load_env; bootstrap_list ;;
  -h | --help | help) usage ;;
  *) die "unknown command '$CMD' (start|stop|status|bootstrap|kill|restart|pause|resume|pid)" ;;
esac
