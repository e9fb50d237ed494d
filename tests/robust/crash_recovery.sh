#!/usr/bin/env bash
# crash_recovery.sh -- acknowledged writes survive kill -9 of the broker (docs/testing-robustness.md)
#
#   crash_recovery.sh --mode kafka|kbroker [--build DIR] [--kbroker PATH] [--count N]
#                     [--rounds R] [--rate R/s] [--partitions P] [--seed S] [--port P]
#                     [--workdir DIR] [--inject-loss]
#
# Phase A: an idempotent acks=all producer (tests/java/robust-tools) writes --count records
#   (default 100,000) to 3 partitions with 1 MiB segments and logs every acknowledged record with
#   its partition and offset; at --rounds (5) random points of its progress the broker is killed
#   with SIGKILL and restarted. Afterwards every partition is read back: every acknowledged
#   record must be at its original offset, offsets contiguous, ids strictly increasing per
#   partition (nothing reordered or duplicated), every send acknowledged in the end.
# Phase B: a 1-partition topic gets 2,000 records, the broker is killed, the active segment is
#   cut in the middle of its last batch with truncate(1), the broker restarts: the log end must be
#   that batch's base offset, the segment must hold only whole batches, and 500 more records must
#   be appended from exactly that offset; then everything is verified again.
# --inject-loss (failure demonstration): before the last restart of phase A, the last two batches
#   of partition 0's active segment are cut off; the verification must then fail.
#
# The broker is driven through five functions per mode (drv_<mode>_start/kill/restart/stop and
# the log dir): "kafka" is Apache Kafka 4.4.0, one KRaft node started by tests/peers/kafka-cluster.sh
# and restarted with the exact command line it was started with (storage is not formatted again);
# "kbroker" is build/bin/kbroker with a fixed port. Waits poll with deadlines; nothing sleeps to
# synchronise. Exit 0 pass, 1 fail, 2 setup error.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
PEERS=$REPO/tests/peers
# shellcheck source=../peers/versions.env
. "$PEERS/versions.env"
export KPEER_HOME=${KPEER_HOME:-$REPO/.kpeer}

MODE= BUILD=$REPO/build KBROKER= COUNT=100000 ROUNDS=5 RATE=20000 PARTS=3 SEED=${SEED:-$RANDOM}
PORT= WORK= INJECT=0
while [ $# -gt 0 ]; do
  case "$1" in
    --mode) MODE=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --kbroker) KBROKER=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --partitions) PARTS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --workdir) WORK=$2; shift 2 ;;
    --inject-loss) INJECT=1; shift ;;
    -h | --help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "crash_recovery: unknown option $1" >&2; exit 2 ;;
  esac
done
case "$MODE" in kafka | kbroker) ;; *) echo "crash_recovery: --mode kafka|kbroker" >&2; exit 2 ;; esac
KBROKER=${KBROKER:-$BUILD/bin/kbroker}
SEGTOOL=$BUILD/bin/kr_segtool
WORK=${WORK:-$BUILD/tests/robust/crash_$MODE}
PORT_FIXED=1
[ -n "$PORT" ] || { PORT=$([ "$MODE" = kafka ] && echo 19892 || echo 19992); PORT_FIXED=0; }
RANDOM=$SEED

T0=$(date +%s%3N)
now_ms() { date +%s%3N; }
say() { echo "crash_recovery[$MODE] +$(( ($(now_ms) - T0) / 1000 ))s: $*"; }
die() { echo "crash_recovery[$MODE]: SETUP ERROR: $*" >&2; cleanup; exit 2; }
FAILS=0
fail() { echo "crash_recovery[$MODE]: FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
port_in_use() { [ -n "$(ss -Hltn "( sport = :$1 )" 2>/dev/null)" ]; }
# Without --port, move past ports other programs on this machine hold (the Kafka driver also
# uses PORT+1 for its controller), once, before the first start: restarts reuse the port.
if [ "$PORT_FIXED" = 0 ]; then
  tries=0
  while port_in_use "$PORT" || port_in_use $((PORT + 1)); do
    tries=$((tries + 1))
    [ $tries -le 50 ] || break # the start below then fails with "port P is in use"
    PORT=$((PORT + 10))
  done
fi

# wait_until DEADLINE_S DESCRIPTION COMMAND...: poll COMMAND every 50 ms until it succeeds.
wait_until() {
  local secs=$1 what=$2 end
  shift 2
  end=$(($(now_ms) + secs * 1000))
  until "$@"; do
    if [ "$(now_ms)" -gt "$end" ]; then
      echo "crash_recovery[$MODE]: timed out after ${secs}s waiting for $what" >&2
      return 1
    fi
    sleep 0.05 # poll interval of a deadline-bounded wait
  done
}

command -v java >/dev/null || die "java not found"
[ -x "$SEGTOOL" ] || die "$SEGTOOL missing (build the tree first)"
JAR=$("$PEERS/mvn-build.sh" "$REPO/tests/java/robust-tools" robust-tools.jar) || die "robust-tools build failed"
JOPTS=(-Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto)
rt() { java "${JOPTS[@]}" -jar "$JAR" "$@"; }

rm -rf "$WORK"
mkdir -p "$WORK"

# ------------------------------------------------------------------ driver: Apache Kafka
KNAME=robust-crash
KDIR=$KPEER_HOME/$KNAME
drv_kafka_pid() { cat "$KDIR/node1.pid"; }
drv_kafka_logdir() { echo "$KDIR/node1/data"; }
drv_kafka_wait_ready() {
  local wp rc=0
  "$PEERS/peer-tools.sh" wait-ready --bootstrap "127.0.0.1:$PORT" --brokers 1 --timeout-ms 120000 \
    >"$WORK/wait-ready.log" 2>&1 &
  wp=$!
  while kill -0 "$wp" 2>/dev/null; do
    if ! kill -0 "$(drv_kafka_pid)" 2>/dev/null; then
      kill "$wp" 2>/dev/null || true
      tail -40 "$KDIR/node1.log" >&2
      return 1
    fi
    sleep 0.1 # poll interval while the readiness probe runs
  done
  wait "$wp" || rc=$?
  return $rc
}
drv_kafka_start() {
  port_in_use "$PORT" && die "port $PORT is in use"
  "$PEERS/kafka-cluster.sh" start --name "$KNAME" --nodes 1 --base-port "$PORT" --timeout 120 \
    || die "kafka-cluster.sh start failed"
  # The exact command line, to restart the node later without formatting its storage again.
  tr '\0' '\n' <"/proc/$(drv_kafka_pid)/cmdline" >"$KDIR/node1.cmdline"
}
drv_kafka_kill() {
  local pid
  pid=$(drv_kafka_pid)
  kill -KILL "$pid"
  wait_until 30 "kafka pid $pid to die" bash -c "! kill -0 $pid 2>/dev/null"
}
# Relaunch without waiting for readiness: phase A's progress check shows when it serves again.
drv_kafka_restart() {
  local args
  mapfile -t args <"$KDIR/node1.cmdline"
  setsid "${args[@]}" >>"$KDIR/node1.log" 2>&1 </dev/null &
  echo $! >"$KDIR/node1.pid"
  disown
  kill -0 "$(drv_kafka_pid)" 2>/dev/null
}
drv_kafka_stop() { "$PEERS/kafka-cluster.sh" stop --name "$KNAME" >/dev/null 2>&1 || true; }

# ------------------------------------------------------------------ driver: kbroker
KB_DIR=$WORK/kbroker
KB_PID=
drv_kbroker_logdir() { echo "$KB_DIR/data"; }
drv_kbroker_ready_lines() {
  local c
  c=$(grep -c '^kbroker started' "$KB_DIR/kbroker.log" 2>/dev/null) || true
  echo "${c:-0}"
}
drv_kbroker_started() { [ "$(drv_kbroker_ready_lines)" -ge "$1" ]; }
drv_kbroker_launch() {
  local n
  n=$(drv_kbroker_ready_lines)
  setsid "$KBROKER" --config "$KB_DIR/server.properties" >>"$KB_DIR/kbroker.log" 2>&1 </dev/null &
  KB_PID=$!
  local end=$(($(now_ms) + 60000))
  until drv_kbroker_started $((n + 1)); do
    if ! kill -0 "$KB_PID" 2>/dev/null || [ "$(now_ms)" -gt "$end" ]; then
      tail -40 "$KB_DIR/kbroker.log" >&2
      return 1
    fi
    sleep 0.05 # poll interval of a deadline-bounded wait
  done
}
drv_kbroker_start() {
  [ -x "$KBROKER" ] || die "$KBROKER missing"
  port_in_use "$PORT" && die "port $PORT is in use"
  mkdir -p "$KB_DIR/data"
  cat >"$KB_DIR/server.properties" <<EOF
# written by tests/robust/crash_recovery.sh
node.id=1
listeners=PLAINTEXT://127.0.0.1:$PORT
log.dirs=$KB_DIR/data
num.network.threads=2
num.io.threads=4
auto.create.topics.enable=false
log.level=info
EOF
  drv_kbroker_launch || die "kbroker did not start"
}
drv_kbroker_kill() {
  kill -KILL "$KB_PID"
  wait "$KB_PID" 2>/dev/null || true
}
drv_kbroker_restart() { drv_kbroker_launch; }
drv_kbroker_wait_ready() { kill -0 "$KB_PID" 2>/dev/null; }
drv_kbroker_stop() {
  [ -n "$KB_PID" ] && kill -0 "$KB_PID" 2>/dev/null || return 0
  kill -TERM "$KB_PID"
  if ! wait_until 30 "kbroker to exit after SIGTERM" bash -c "! kill -0 $KB_PID 2>/dev/null"; then
    fail "kbroker did not exit within 30 s of SIGTERM"
    kill -KILL "$KB_PID" 2>/dev/null || true
  fi
  local rc=0
  wait "$KB_PID" || rc=$?
  [ "$rc" = 0 ] || fail "kbroker exited with status $rc after SIGTERM"
  KB_PID=
}

drv() { local op=$1; shift; "drv_${MODE}_$op" "$@"; }
PROD_PID=
cleanup() {
  [ -n "$PROD_PID" ] && kill "$PROD_PID" 2>/dev/null || true
  drv stop || true
}
trap 'cleanup' EXIT

BS=127.0.0.1:$PORT
acked_lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }

# active (highest base offset) segment of partition $1 of topic $2
active_segment() { find "$(drv logdir)/$2-$1" -name '*.log' | sort | tail -1; }

# ------------------------------------------------------------------ phase A: kill -9 loop
say "seed $SEED; starting the broker"
drv start
rt create-topic --bootstrap "$BS" --topic robust-crash --partitions "$PARTS" \
  --config segment.bytes=1048576 >"$WORK/create.log" 2>&1 || { cat "$WORK/create.log" >&2; die "create-topic failed"; }

ACK_A=$WORK/acks-crash.log
say "producing $COUNT records at $RATE/s to $PARTS partitions (acks=all, idempotent), $ROUNDS kills"
rt produce --bootstrap "$BS" --topic robust-crash --partitions "$PARTS" --count "$COUNT" \
  --rate "$RATE" --ack-log "$ACK_A" >"$WORK/produce-crash.log" 2>&1 &
PROD_PID=$!

# random kill points, sorted, between 5% and 95% of the records
mapfile -t POINTS < <(for ((i = 0; i < ROUNDS; i++)); do
  echo $((COUNT / 20 + (RANDOM * 32768 + RANDOM) % (COUNT * 9 / 10)))
done | sort -n)
for ((i = 0; i < ROUNDS; i++)); do
  pt=${POINTS[$i]}
  wait_until 300 "$pt acknowledgements" bash -c "[ \$(cat '$ACK_A' 2>/dev/null | wc -l) -ge $pt ] || ! kill -0 $PROD_PID 2>/dev/null" \
    || { fail "the producer stalled before $pt acknowledgements"; break; }
  at=$(acked_lines "$ACK_A")
  t_kill=$(now_ms)
  drv kill
  if [ "$INJECT" = 1 ] && [ "$i" = $((ROUNDS - 1)) ]; then
    seg=$(active_segment 0 robust-crash)
    info=$("$SEGTOOL" "$seg")
    eval "$(echo "$info" | tr ' ' '\n' | sed 's/^/S_/')"
    # shellcheck disable=SC2154
    if [ "$S_batches" -ge 3 ]; then
      cutp=$(( S_last_pos ))
      # the start of the batch before the last one: walk once more on a copy cut at last_pos
      head -c "$cutp" "$seg" >"$WORK/inject.tmp"
      eval "$("$SEGTOOL" "$WORK/inject.tmp" | tr ' ' '\n' | sed 's/^/J_/')"
      # shellcheck disable=SC2154
      truncate -s "$J_last_pos" "$seg"
      say "INJECTED LOSS: cut $seg at $J_last_pos (two acknowledged batches gone, offsets $J_last_base..)"
    fi
  fi
  drv restart || { fail "the broker did not restart after kill $((i + 1))"; break; }
  # serving again: 2,000 more acknowledgements (more than were in flight or not yet logged at
  # the kill), or the producer has finished
  wait_until 300 "acknowledgements after restart $((i + 1))" bash -c "[ \$(cat '$ACK_A' 2>/dev/null | wc -l) -ge $((at + 2000)) ] || ! kill -0 $PROD_PID 2>/dev/null" \
    || { fail "the producer made no progress within 300 s of restart $((i + 1))"; break; }
  say "round $((i + 1))/$ROUNDS: SIGKILL at $at acknowledgements (point $pt), serving again after $(($(now_ms) - t_kill)) ms"
done
rc=0
wait_until 600 "the producer to finish" bash -c "! kill -0 $PROD_PID 2>/dev/null" || fail "the producer did not finish"
wait "$PROD_PID" || rc=$?
PROD_PID=
cat "$WORK/produce-crash.log"
drv wait_ready || fail "the broker is not ready after phase A"
[ "$rc" = 0 ] || fail "not every record was acknowledged (producer exit $rc; failed sends in $ACK_A: $(grep -c '^E' "$ACK_A" || true))"
say "verifying robust-crash"
if ! rt verify --bootstrap "$BS" --topic robust-crash --ack-log "$ACK_A" >"$WORK/verify-crash.log" 2>&1; then
  fail "verification of phase A failed"
fi
grep -v '^robust-tools' "$WORK/verify-crash.log" | tail -25

# ------------------------------------------------------------------ phase B: torn tail
say "phase B: torn tail of the active segment"
rt create-topic --bootstrap "$BS" --topic robust-torn --partitions 1 >>"$WORK/create.log" 2>&1 || die "create-topic robust-torn failed"
ACK_B1=$WORK/acks-torn-1.log ACK_B2=$WORK/acks-torn-2.log
rt produce --bootstrap "$BS" --topic robust-torn --count 2000 --ack-log "$ACK_B1" \
  >"$WORK/produce-torn-1.log" 2>&1 || fail "phase B: the first 2,000 records were not all acknowledged"
drv kill
seg=$(active_segment 0 robust-torn)
[ -n "$seg" ] || die "no segment of robust-torn-0 under $(drv logdir)"
info=$("$SEGTOOL" "$seg") || die "kr_segtool $seg failed"
eval "$(echo "$info" | tr ' ' '\n' | sed 's/^/S_/')"
# shellcheck disable=SC2154
cut=$((S_last_pos + S_last_len / 2))
truncate -s "$cut" "$seg"
say "cut $(basename "$seg") from $S_size to $cut bytes: inside the last batch (offsets $S_last_base..$((S_last_next - 1)), $S_last_len bytes at $S_last_pos)"
drv restart && drv wait_ready || { fail "the broker did not come back after the cut"; exit 1; }
read -r _ _ end < <(rt end-offsets --bootstrap "$BS" --topic robust-torn 2>/dev/null | head -1)
[ "$end" = "$S_last_base" ] || fail "after recovery the log end offset is $end, expected $S_last_base (the cut batch's base)"
say "after recovery: log end offset $end (expected $S_last_base)"
rt produce --bootstrap "$BS" --topic robust-torn --count 500 --first-id 1000000 --ack-log "$ACK_B2" \
  >"$WORK/produce-torn-2.log" 2>&1 || fail "phase B: the 500 later records were not all acknowledged"
first=$(awk '$1 == "A" { print $4; exit }' "$ACK_B2")
min=$(awk '$1 == "A" { if (m == "" || $4 < m) m = $4 } END { print m }' "$ACK_B2")
[ "$min" = "$S_last_base" ] || fail "later appends start at offset $min, expected $S_last_base"
say "later appends start at offset $min (first acknowledged $first)"
seg2=$(active_segment 0 robust-torn)
info2=$("$SEGTOOL" "$seg2") || fail "kr_segtool $seg2 failed"
eval "$(echo "$info2" | tr ' ' '\n' | sed 's/^/R_/')"
# shellcheck disable=SC2154
[ "$R_whole_end" = "$R_size" ] || fail "$(basename "$seg2") has $((R_size - R_whole_end)) bytes after its last whole batch"
if ! rt verify --bootstrap "$BS" --topic robust-torn --ack-log "$ACK_B1" --ack-log "$ACK_B2" \
  --cut "0:$S_last_base" >"$WORK/verify-torn.log" 2>&1; then
  fail "verification of phase B failed"
fi
grep -v '^robust-tools' "$WORK/verify-torn.log" | tail -25

drv stop
trap - EXIT
if [ "$FAILS" -gt 0 ]; then
  say "FAILED ($FAILS problem(s); seed $SEED; files in $WORK)"
  exit 1
fi
say "PASSED (seed $SEED)"
