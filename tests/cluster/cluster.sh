#!/usr/bin/env bash
# cluster.sh -- one control interface for the 3-broker test clusters of tests/cluster, with two
# backends: Apache Kafka (tests/peers/kafka-cluster.sh) and kbroker (build/bin/kbroker).
# docs/testing-cluster.md describes it.
#
#   cluster.sh start   --name N [--backend kafka|kbroker] [--base-port P]
#                      [--controllers node1|separate|all] [--override k=v]... [--timeout S]
#                      [--kbroker PATH] [--heap 512m]
#   cluster.sh CMD     --name N [ARGS]      (the backend and ports are remembered from start)
#
#   stop                         stop every node (SIGTERM, deadline, SIGKILL), nothing left behind
#   status                       one line per node; exit 0 only if all run and listen
#   bootstrap                    127.0.0.1:P,127.0.0.1:P+10,127.0.0.1:P+20
#   kill I | restart I [--wait] | pause I | resume I | pid I
#                                per node: SIGKILL (waits until gone) / start again keeping its
#                                data (with the caller's environment, e.g. a test-only variable
#                                such as KMIRROR_TEST_CRASH_POINT; --wait: until the cluster is
#                                ready and, kbroker, this node registered and unfenced again) /
#                                SIGSTOP / SIGCONT / its pid
#   datadir I                    the node's log.dirs
#   partdir I TOPIC PART         the node's directory of that partition
#   create-topic TOPIC PARTS [k=v]...       RF 3, configs; waits for leaders and full ISRs
#   describe [TOPIC]...          cluster-tools describe (leaders, replicas, ISR, ELR, topic ids)
#   leader TOPIC PART            the leader's node id, or "none"
#   admin SUBCMD [--opt v]...    any cluster-tools subcommand with this cluster's --bootstrap
#   wait TOPIC PART|all COND [--hold-ms H] [--timeout-ms T]   cluster-tools wait
#   compare TOPIC PART [--upto O] [--same-end]   kc_replicacmp over the partition's replicas
#   meta I [TOPIC]...            kc_meta: broker I's own Metadata answer (leaders, epochs, ISR, ids)
#   consistent [TOPIC]... [--timeout-ms T]   every broker gives the same Metadata answer, and its
#                                topic ids are the ones the Java Admin client reports (polled)
#
# Layout ($KPEER_HOME/<name>/, KPEER_HOME defaults to <repo>/.kpeer): harness.env (backend,
# ports), node<i>.properties, node<i>.log, node<i>.pid, node<i>.cmdline, node<i>/data.
# Node i (1..3) is a broker listening on P+10*(i-1) (clients) and, when it is a controller,
# P+10*(i-1)+1. --controllers: node1 (default; node 1 is broker+controller, the single voter),
# separate (brokers 1-3 and a controller-only node 4 on P+31), all (three combined voters).
# Exit status: 0 ok, 1 failure, 2 setup error (e.g. the kbroker build cannot run clusters).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
PEERS=$REPO/tests/peers
export KPEER_HOME=${KPEER_HOME:-$REPO/.kpeer}

die() { echo "cluster.sh: $*" >&2; exit 2; }
log() { echo "cluster.sh: $*" >&2; }
usage() { sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 64; }
now_ms() { date +%s%3N; }
port_in_use() { [ -n "$(ss -Hltn "( sport = :$1 )" 2>/dev/null)" ]; }

CMD=${1:-}; [ -n "$CMD" ] || usage; shift
case "$CMD" in -h | --help | help) usage ;; esac
NAME= BACKEND=kafka BASE_PORT=19592 CONTROLLERS=node1 TIMEOUT=120 KBROKER= HEAP=512m
BUILD=${KM_BUILD_DIR:-$REPO/build}
OVERRIDES=() ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --name) NAME=$2; shift 2 ;;
    --backend) BACKEND=$2; shift 2 ;;
    --base-port) BASE_PORT=$2; shift 2 ;;
    --controllers) CONTROLLERS=$2; shift 2 ;;
    --override) OVERRIDES+=("$2"); shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --kbroker) KBROKER=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --heap) HEAP=$2; shift 2 ;;
    -h | --help) usage ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
[ -n "$NAME" ] || die "--name is required"
[[ "$NAME" =~ ^[A-Za-z0-9._-]+$ ]] || die "bad --name '$NAME'"
CDIR=$KPEER_HOME/$NAME
NODES=3
KBROKER=${KBROKER:-$BUILD/bin/kbroker}
REPLICACMP=${KC_REPLICACMP:-$BUILD/bin/kc_replicacmp}
KCMETA=${KC_META:-$BUILD/bin/kc_meta}

client_port() { echo $((BASE_PORT + 10 * ($1 - 1))); }
ctrl_port() { echo $((BASE_PORT + 10 * ($1 - 1) + 1)); }
total_nodes() { if [ "$CONTROLLERS" = separate ]; then echo 4; else echo 3; fi; }
bootstrap_list() { echo "127.0.0.1:$(client_port 1),127.0.0.1:$(client_port 2),127.0.0.1:$(client_port 3)"; }

load_env() {
  [ -f "$CDIR/harness.env" ] || die "no cluster '$NAME' under $KPEER_HOME (run: cluster.sh start --name $NAME)"
  # shellcheck disable=SC1091
  . "$CDIR/harness.env"
}

CT_JAR=
ct() {
  [ -n "$CT_JAR" ] || CT_JAR=$("$PEERS/mvn-build.sh" "$REPO/tests/java/cluster-tools" cluster-tools.jar)
  java -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto -jar "$CT_JAR" "$@"
}

need_node() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le "$(total_nodes)" ] \
    || die "node must be 1..$(total_nodes), got '${1:-}'"
}

# ------------------------------------------------------------------ backend: Apache Kafka
kafka_cluster() { "$PEERS/kafka-cluster.sh" "$@"; }
be_kafka_start() {
  local ov=() kv
  for kv in "${OVERRIDES[@]}"; do ov+=(--override "$kv"); done
  kafka_cluster start --name "$NAME" --nodes 3 --base-port "$BASE_PORT" --controllers "$CONTROLLERS" \
    --heap "$HEAP" --timeout "$TIMEOUT" "${ov[@]}" || return 1
}
be_kafka_stop() { kafka_cluster stop --name "$NAME"; }
be_kafka_status() { kafka_cluster status --name "$NAME"; }
be_kafka_kill() { kafka_cluster kill --name "$NAME" --node "$1"; }
be_kafka_restart() {
  if [ "${2:-}" = --wait ]; then
    kafka_cluster restart --name "$NAME" --node "$1" --wait --timeout "$TIMEOUT"
  else
    kafka_cluster restart --name "$NAME" --node "$1"
  fi
}
be_kafka_pause() { kafka_cluster pause --name "$NAME" --node "$1"; }
be_kafka_resume() { kafka_cluster resume --name "$NAME" --node "$1"; }
be_kafka_pid() { kafka_cluster pid --name "$NAME" --node "$1"; }

# ------------------------------------------------------------------ backend: kbroker
# The nodes are configured in Apache Kafka's KRaft shape (process.roles, node.id,
# controller.quorum.voters, a CONTROLLER listener on controller nodes); kbroker reads the same keys.
kb_pid_of() {
  local f=$CDIR/node$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  { tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$CDIR/node$1.properties"; } 2>/dev/null || return 1
  echo "$pid"
}
kb_write_configs() {
  local i roles listeners voters kv
  case "$CONTROLLERS" in
    node1) voters="1@127.0.0.1:$(ctrl_port 1)" ;;
    separate) voters="4@127.0.0.1:$(ctrl_port 4)" ;;
    all) voters="1@127.0.0.1:$(ctrl_port 1),2@127.0.0.1:$(ctrl_port 2),3@127.0.0.1:$(ctrl_port 3)" ;;
  esac
  for ((i = 1; i <= $(total_nodes); i++)); do
    roles=broker
    listeners="PLAINTEXT://127.0.0.1:$(client_port "$i")"
    if [ "$CONTROLLERS" = all ] || { [ "$CONTROLLERS" = node1 ] && [ "$i" = 1 ]; }; then
      roles=broker,controller
      listeners+=",CONTROLLER://127.0.0.1:$(ctrl_port "$i")"
    fi
    if [ "$i" = 4 ]; then
      roles=controller
      listeners="CONTROLLER://127.0.0.1:$(ctrl_port "$i")"
    fi
    {
      echo "# generated by tests/cluster/cluster.sh for cluster '$NAME', node $i (kbroker)"
      echo "process.roles=$roles"
      echo "node.id=$i"
      echo "cluster.id=$CLUSTER_ID"
      echo "controller.quorum.voters=$voters"
      echo "listeners=$listeners"
      if [ "$i" != 4 ]; then
        echo "advertised.listeners=PLAINTEXT://127.0.0.1:$(client_port "$i")"
        echo "inter.broker.listener.name=PLAINTEXT"
      fi
      echo "controller.listener.names=CONTROLLER"
      echo "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
      echo "log.dirs=$CDIR/node$i/data"
      echo "offsets.topic.replication.factor=3"
      echo "transaction.state.log.replication.factor=3"
      echo "transaction.state.log.min.isr=2"
      echo "num.network.threads=2"
      echo "num.io.threads=4"
      echo "group.initial.rebalance.delay.ms=0"
      echo "auto.create.topics.enable=false"
      echo "log.level=info"
      if [ ${#OVERRIDES[@]} -gt 0 ]; then
        echo "# --override"
        for kv in "${OVERRIDES[@]}"; do
          [[ "$kv" == *=* ]] || die "bad --override '$kv' (want key=value)"
          echo "$kv"
        done
      fi
    } >"$CDIR/node$i.properties"
  done
}
kb_launch() {
  local args
  mapfile -t args <"$CDIR/node$1.cmdline"
  echo "----- start $(date -u +%FT%TZ) -----" >>"$CDIR/node$1.log"
  setsid "${args[@]}" >>"$CDIR/node$1.log" 2>&1 </dev/null &
  echo $! >"$CDIR/node$1.pid"
}
# Wait until every broker answers DescribeCluster and sees all 3 brokers, watching the pids.
kb_wait_ready() {
  local wpid rc=0 i pid
  "$PEERS/peer-tools.sh" wait-ready --bootstrap "$(bootstrap_list)" --brokers 3 \
    --timeout-ms $((TIMEOUT * 1000)) >"$CDIR/wait-ready.log" 2>&1 &
  wpid=$!
  while kill -0 "$wpid" 2>/dev/null; do
    for ((i = 1; i <= $(total_nodes); i++)); do
      pid=$(cat "$CDIR/node$i.pid" 2>/dev/null) || pid=
      if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
        kill "$wpid" 2>/dev/null || true
        wait "$wpid" 2>/dev/null || true
        log "kbroker node $i exited; the end of $CDIR/node$i.log:"
        tail -n 30 "$CDIR/node$i.log" >&2
        return 1
      fi
    done
    sleep 0.1 # poll interval while the readiness probe runs
  done
  wait "$wpid" || rc=$?
  if [ "$rc" != 0 ]; then
    tail -n 3 "$CDIR/wait-ready.log" >&2
    log "the kbroker nodes did not form one 3-broker cluster within ${TIMEOUT}s" \
        "(each node must answer DescribeCluster with brokers 1, 2 and 3)."
    log "This kbroker build may not run clusters yet (issue 4: controller and replication)."
  fi
  return $rc
}
be_kbroker_start() {
  local i p
  [ -x "$KBROKER" ] || die "kbroker binary '$KBROKER' not found (build the tree or pass --kbroker)"
  for ((i = 1; i <= $(total_nodes); i++)); do
    kb_pid_of "$i" >/dev/null && die "cluster '$NAME' is still running; run: cluster.sh stop --name $NAME"
    for p in $(client_port "$i") $(ctrl_port "$i"); do
      port_in_use "$p" && die "port $p (node $i) is in use: $(ss -Hltnp "( sport = :$p )" | head -1)"
    done
  done
  for ((i = 1; i <= $(total_nodes); i++)); do
    rm -rf "$CDIR/node$i"
    mkdir -p "$CDIR/node$i/data"
    [ -f "$CDIR/node$i.log" ] && mv -f "$CDIR/node$i.log" "$CDIR/node$i.log.prev"
  done
  rm -f "$CDIR"/node*.pid
  kb_write_configs
  for ((i = 1; i <= $(total_nodes); i++)); do
    printf '%s\n' "$KBROKER" --config "$CDIR/node$i.properties" >"$CDIR/node$i.cmdline"
    kb_launch "$i"
  done
  if ! kb_wait_ready; then
    be_kbroker_stop >/dev/null 2>&1 || true
    return 1
  fi
}
be_kbroker_kill() {
  local pid end
  pid=$(kb_pid_of "$1") || die "node $1 of '$NAME' is not running"
  kill -KILL "$pid"
  end=$(($(now_ms) + 30000))
  while kill -0 "$pid" 2>/dev/null; do
    [ "$(now_ms)" -lt "$end" ] || die "node $1 (pid $pid) still alive after SIGKILL"
    sleep 0.05 # poll interval of a deadline-bounded wait
  done
  rm -f "$CDIR/node$1.pid"
  log "node $1 (pid $pid) killed"
}
be_kbroker_restart() {
  local pid n0 end
  if pid=$(kb_pid_of "$1"); then die "node $1 of '$NAME' is still running (pid $pid)"; fi
  n0=$(kb_unfenced_count "$1")
  kb_launch "$1"
  log "node $1 restarted (pid $(cat "$CDIR/node$1.pid"))"
  [ "${2:-}" = --wait ] || return 0
  kb_wait_ready || return 1
  # DescribeCluster still lists the previous incarnation until its session expires, so the
  # readiness probe can pass before this one registered: also wait until the node's log says
  # the controller unfenced it again (broker nodes only; a controller-only node has no session).
  grep -q '^process.roles=.*broker' "$CDIR/node$1.properties" || return 0
  end=$(($(now_ms) + TIMEOUT * 1000))
  until [ "$(kb_unfenced_count "$1")" -gt "$n0" ]; do
    kill -0 "$(cat "$CDIR/node$1.pid")" 2>/dev/null || { log "node $1 exited after its restart"; return 1; }
    [ "$(now_ms)" -lt "$end" ] || { log "node $1 not registered and unfenced within ${TIMEOUT}s"; return 1; }
    sleep 0.1 # poll interval of a deadline-bounded wait
  done
}
# kb_unfenced_count NODE -- how often the node's log says the controller unfenced it
kb_unfenced_count() {
  local c
  c=$(grep -c 'unfenced by controller' "$CDIR/node$1.log" 2>/dev/null)
  echo "${c:-0}"
}
be_kbroker_signal() {
  local pid
  pid=$(kb_pid_of "$2") || die "node $2 of '$NAME' is not running"
  kill "-$1" "$pid"
  log "node $2 (pid $pid): SIG$1"
}
be_kbroker_pause() { be_kbroker_signal STOP "$1"; }
be_kbroker_resume() { be_kbroker_signal CONT "$1"; }
be_kbroker_pid() { kb_pid_of "$1" || die "node $1 of '$NAME' is not running"; }
# kb_term PID...: SIGTERM (and SIGCONT for a paused one), wait up to 30 s each, SIGKILL. 1 if a
# SIGKILL was needed.
kb_term() {
  local pid end rc=0
  kill -TERM "$@" 2>/dev/null || true
  kill -CONT "$@" 2>/dev/null || true
  end=$(($(now_ms) + 30000))
  for pid in "$@"; do
    while kill -0 "$pid" 2>/dev/null && [ "$(now_ms)" -lt "$end" ]; do
      sleep 0.05 # poll interval of a deadline-bounded wait
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "kbroker pid $pid still up 30 s after SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      rc=1
    fi
  done
  return $rc
}
# Brokers first (their SIGTERM is a controlled shutdown through the controller), then the
# controller node(s).
be_kbroker_stop() {
  local i pid brokers=() ctls=() rc=0
  for ((i = 1; i <= $(total_nodes); i++)); do
    pid=$(kb_pid_of "$i") || continue
    if [ "$i" = 4 ] || { [ "$CONTROLLERS" = node1 ] && [ "$i" = 1 ]; }; then ctls+=("$pid"); else brokers+=("$pid"); fi
  done
  [ ${#brokers[@]} -eq 0 ] || kb_term "${brokers[@]}" || rc=1
  [ ${#ctls[@]} -eq 0 ] || kb_term "${ctls[@]}" || rc=1
  rm -f "$CDIR"/node*.pid
  log "cluster '$NAME' stopped ($((${#brokers[@]} + ${#ctls[@]})) processes)"
  return $rc
}
be_kbroker_status() {
  local i pid ok=0 port state
  for ((i = 1; i <= $(total_nodes); i++)); do
    port=$(client_port "$i")
    [ "$i" = 4 ] && port=$(ctrl_port 4)
    if pid=$(kb_pid_of "$i"); then
      state=$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
      if [ "$state" = T ]; then
        echo "node$i pid=$pid 127.0.0.1:$port PAUSED (SIGSTOP)"; ok=1
      elif port_in_use "$port"; then
        echo "node$i pid=$pid 127.0.0.1:$port listening"
      else
        echo "node$i pid=$pid 127.0.0.1:$port NOT listening"; ok=1
      fi
    else
      echo "node$i down"; ok=1
    fi
  done
  return $ok
}

be() { local op=$1; shift; "be_${BACKEND}_$op" "$@"; }

# ------------------------------------------------------------------ commands
arg() { [ ${#ARGS[@]} -gt "$1" ] || die "$CMD: missing argument $(($1 + 1)) (see --help)"; echo "${ARGS[$1]}"; }

case "$CMD" in
  start)
    case "$BACKEND" in kafka | kbroker) ;; *) die "--backend must be kafka or kbroker" ;; esac
    case "$CONTROLLERS" in node1 | separate | all) ;; *) die "--controllers must be node1, separate or all" ;; esac
    [[ "$BASE_PORT" =~ ^[0-9]+$ ]] && [ "$BASE_PORT" -ge 1024 ] && [ "$BASE_PORT" -le 65000 ] \
      || die "bad --base-port '$BASE_PORT'"
    command -v java >/dev/null || die "java not found (the harness's clients are Java)"
    mkdir -p "$CDIR"
    CLUSTER_ID=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)
    [[ "$CLUSTER_ID" == -* ]] && CLUSTER_ID="A${CLUSTER_ID:1}"
    cat >"$CDIR/harness.env" <<EOF
BACKEND=$BACKEND
BASE_PORT=$BASE_PORT
CONTROLLERS=$CONTROLLERS
CLUSTER_ID=$CLUSTER_ID
KBROKER=$KBROKER
EOF
    "$PEERS/mvn-build.sh" "$REPO/tests/java/cluster-tools" cluster-tools.jar >/dev/null
    t0=$(now_ms)
    be start || { log "cluster '$NAME' ($BACKEND) failed to start"; exit 2; }
    log "cluster '$NAME' ($BACKEND, controllers $CONTROLLERS) up in $(($(now_ms) - t0)) ms at $(bootstrap_list)"
    ;;
  stop) load_env; be stop ;;
  status) load_env; echo "cluster $NAME: backend $BACKEND, controllers $CONTROLLERS"; be status ;;
  bootstrap) load_env; bootstrap_list ;;
  kill | pause | resume | pid)
    load_env; n=$(arg 0); need_node "$n"; be "$CMD" "$n" ;;
  restart)
    load_env; n=$(arg 0); need_node "$n"; be restart "$n" "${ARGS[1]:-}" ;;
  datadir) load_env; n=$(arg 0); need_node "$n"; echo "$CDIR/node$n/data" ;;
  partdir) load_env; n=$(arg 0); need_node "$n"; echo "$CDIR/node$n/data/$(arg 1)-$(arg 2)" ;;
  create-topic)
    load_env
    t=$(arg 0); p=$(arg 1); cf=()
    for kv in "${ARGS[@]:2}"; do cf+=(--config "$kv"); done
    ct create-topic --bootstrap "$(bootstrap_list)" --topic "$t" --partitions "$p" --rf 3 "${cf[@]}" \
      --timeout-ms $((TIMEOUT * 1000))
    ;;
  describe)
    load_env; tp=()
    for t in "${ARGS[@]}"; do tp+=(--topic "$t"); done
    ct describe --bootstrap "$(bootstrap_list)" "${tp[@]}"
    ;;
  admin) load_env; ct "$(arg 0)" --bootstrap "$(bootstrap_list)" "${ARGS[@]:1}" ;;
  leader) load_env; ct leader --bootstrap "$(bootstrap_list)" --topic "$(arg 0)" --partition "$(arg 1)" ;;
  wait)
    load_env
    ct wait --bootstrap "$(bootstrap_list)" --topic "$(arg 0)" --partition "$(arg 1)" --until "$(arg 2)" \
      "${ARGS[@]:3}"
    ;;
  compare)
    load_env
    [ -x "$REPLICACMP" ] || die "$REPLICACMP missing (build the tree: target kc_replicacmp)"
    t=$(arg 0); p=$(arg 1); dirs=()
    for n in 1 2 3; do dirs+=("$CDIR/node$n/data/$t-$p"); done
    "$REPLICACMP" "${ARGS[@]:2}" "${dirs[@]}"
    ;;
  meta)
    load_env
    [ -x "$KCMETA" ] || die "$KCMETA missing (build the tree: target kc_meta)"
    n=$(arg 0); need_node "$n"; tp=()
    for t in "${ARGS[@]:1}"; do tp+=(--topic "$t"); done
    "$KCMETA" --broker "127.0.0.1:$(client_port "$n")" "${tp[@]}"
    ;;
  consistent)
    load_env
    [ -x "$KCMETA" ] || die "$KCMETA missing (build the tree: target kc_meta)"
    tp=() ms=30000 j=0
    while [ $j -lt ${#ARGS[@]} ]; do
      if [ "${ARGS[$j]}" = --timeout-ms ]; then ms=${ARGS[$((j + 1))]}; j=$((j + 2)); continue; fi
      tp+=(--topic "${ARGS[$j]}"); j=$((j + 1))
    done
    end=$(($(now_ms) + ms))
    while :; do
      same=1
      for n in 1 2 3; do
        "$KCMETA" --broker "127.0.0.1:$(client_port "$n")" "${tp[@]}" >"$CDIR/meta$n.txt" 2>&1 || same=0
      done
      if [ $same = 1 ] && cmp -s "$CDIR/meta1.txt" "$CDIR/meta2.txt" && cmp -s "$CDIR/meta1.txt" "$CDIR/meta3.txt"; then
        break
      fi
      if [ "$(now_ms)" -gt "$end" ]; then
        echo "consistent: FAILED: the brokers' Metadata answers still differ after ${ms} ms:"
        for n in 2 3; do diff -u --label node1 --label "node$n" "$CDIR/meta1.txt" "$CDIR/meta$n.txt" || true; done
        exit 1
      fi
      sleep 0.2 # poll interval of a deadline-bounded wait (metadata propagates to every broker)
    done
    # The topic ids as the Java Admin client reports them must be the same.
    ct describe --bootstrap "$(bootstrap_list)" "${tp[@]}" | grep '^topic ' | sed 's/ partitions=.*//' \
      >"$CDIR/meta-java.txt" || die "cluster-tools describe failed"
    grep '^topic ' "$CDIR/meta1.txt" | sed 's/ error=.*//' >"$CDIR/meta-c.txt"
    if ! cmp -s "$CDIR/meta-java.txt" "$CDIR/meta-c.txt"; then
      echo "consistent: FAILED: topic ids differ between the brokers' Metadata and the Admin client:"
      diff -u --label admin --label metadata "$CDIR/meta-java.txt" "$CDIR/meta-c.txt" || true
      exit 1
    fi
    echo "consistent: brokers 1, 2, 3 agree: $(grep -c '^partition ' "$CDIR/meta1.txt") partitions, $(head -1 "$CDIR/meta1.txt")"
    ;;
  -h | --help | help) usage ;;
  *) die "unknown command '$CMD' (see --help)" ;;
esac
