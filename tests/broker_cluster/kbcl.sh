# kbcl.sh -- sourced (not run) by the shell tests of tests/broker_cluster: three kbroker processes,
# node 1 broker,controller (PLAINTEXT and CONTROLLER listeners on ports the kernel picks), nodes 2
# and 3 broker-only registering with it; the shell side of kbcl.c.
#
#   KB=<kbroker> W=<work dir> KBCL_CLUSTER_ID=<22 characters> [KBCL_PROPS=<more properties>]
#   . "$HERE/kbcl.sh"
#   kbcl_start N     start node N (config $W/sN.properties, data $W/nN, log $W/brokerN.log) and
#                    wait for its readiness line ($W/lineN); nodes 2, 3 need node 1 started first
#   kbcl_addr N      its PLAINTEXT host:port
#   kbcl_stop N      SIGTERM, then its exit (within 30 s, status 0)
#   kbcl_kill_all    SIGKILL to every node still running (for the EXIT trap)
#   kbcl_logs        the last 30 lines of each node's log
#   kbcl_fail MSG    "FAIL: MSG", the logs, exit 1
declare -A KBCL_PID

kbcl_logs() { for n in 1 2 3; do echo "--- node $n"; tail -n 30 "$W/broker$n.log" 2>/dev/null; done; }
kbcl_fail() {
  echo "FAIL: $*"
  kbcl_logs
  exit 1
}
kbcl_addr() { grep -o 'PLAINTEXT://127\.0\.0\.1:[0-9]*' "$W/line$1" | sed 's|PLAINTEXT://||'; }
kbcl_kill_all() { for p in "${KBCL_PID[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; }

# Not a command substitution: the PID must stay in this shell.
kbcl_start() {
  local n=$1 role line
  if [ "$n" = 1 ]; then
    role="process.roles=broker,controller
listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"
  else
    role="process.roles=broker
listeners=PLAINTEXT://127.0.0.1:0
controller.quorum.voters=1@127.0.0.1:$(grep -o 'CONTROLLER://127\.0\.0\.1:[0-9]*' "$W/line1" | sed 's|.*:||')"
  fi
  cat >"$W/s$n.properties" <<PROPS
node.id=$n
log.dirs=$W/n$n
cluster.id=$KBCL_CLUSTER_ID
broker.heartbeat.interval.ms=200
broker.session.timeout.ms=1500
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
num.network.threads=1
num.io.threads=2
${KBCL_PROPS:-}
$role
PROPS
  rm -f "$W/ready$n"
  mkfifo "$W/ready$n"
  "$KB" --config "$W/s$n.properties" >"$W/ready$n" 2>>"$W/broker$n.log" &
  KBCL_PID[$n]=$!
  exec 9<"$W/ready$n"
  read -r -t 60 line <&9 || kbcl_fail "node $n did not start"
  exec 9<&-
  echo "$line" >"$W/line$n"
}

kbcl_stop() {
  kill -TERM "${KBCL_PID[$1]}" 2>/dev/null || true
  timeout 30 tail --pid="${KBCL_PID[$1]}" -f /dev/null || kbcl_fail "node $1 did not stop"
  wait "${KBCL_PID[$1]}" || kbcl_fail "node $1 exit status"
  unset "KBCL_PID[$1]"
}
