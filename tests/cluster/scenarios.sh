#!/usr/bin/env bash
# scenarios.sh -- issue 4's "Done when" checks 1-3 on a 3-broker cluster, for either backend of
# tests/cluster/cluster.sh (docs/testing-cluster.md).
#
#   scenarios.sh --backend kafka|kbroker [--scenario all|S[,S...]]   (S: leader-kill, isr-offline,
#                                                                  controller-kill)
#                [--count N] [--kills K] [--rate R] [--partitions P] [--controllers C]
#                [--name NAME] [--base-port PORT] [--build DIR] [--kbroker PATH] [--seed S]
#                [--keep] [--inject unclean]
#
# The scenarios use topics with RF 3, min.insync.replicas=2, unclean.leader.election.enable=false
# and 1 MiB segments (the smallest Kafka 4 accepts), the verifying producer of
# tests/java/robust-tools (idempotent, acks=all,
# 5 in flight, retries; every acknowledged record logged with its partition and offset) and its
# verifier (every acknowledged record present exactly once, in order, at its acknowledged offset;
# no duplicates, no gaps), and kc_replicacmp (the three replicas hold the same batches).
#
# leader-kill: the producer writes --count records (default 200,000) to --partitions (3) at
#   --rate records/s; --kills (10) times, once count/(K+1) more records have been acknowledged,
#   the leader of partition k mod P is killed with SIGKILL; a new leader other than it must be
#   elected, then the node is restarted and every partition must get its full ISR back before the
#   next kill (these checks poll every broker's own Metadata with kc_meta: no JVM per check). All
#   records must be acknowledged; then verify and compare.
# isr-offline: a 1-partition topic takes writes; a follower F is paused (SIGSTOP) until it leaves
#   the ISR, the leader takes more writes, then every in-sync replica is killed (SIGKILL). F is
#   resumed and must be a registered broker again, and the partition must stay offline (no leader:
#   F must not be elected) for 3 s. The killed replicas are restarted: a leader from the old ISR,
#   the full ISR back, every acknowledged record in place, the replicas identical.
# controller-kill ("Done when" 3, the part this harness can check from outside): a topic is created,
#   a producer writes to it at rate/3, the controller node is killed (SIGKILL); while it is down
#   the brokers must keep taking the producer's writes, and a CreateTopics must fail with a
#   retriable error; after the controller's restart the topic must have the same topic id and
#   partitions, the CreateTopics must succeed (retried up to 60 s), every record must be
#   acknowledged and verified, and the brokers must agree on the metadata. Needs --controllers
#   separate (node1: the controller is also a broker, so only the metadata checks are made).
#
# --controllers defaults to "separate" (a controller-only node 4), so that killing brokers never
# kills the controller; isr-offline needs that (with the controller on a killed node nobody
# could decide anything). "node1" is the kbroker shape of issue 4 (node 1 broker+controller).
# --inject unclean (failure demonstration): the isr-offline topic allows unclean leader election,
#   so the lagging follower is elected while the in-sync replicas are down; the run must fail.
# Exit 0 pass, 1 fail, 2 setup error (a backend that cannot start a cluster is a setup error).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
PEERS=$REPO/tests/peers
export KPEER_HOME=${KPEER_HOME:-$REPO/.kpeer}

BACKEND= SCENARIO=all COUNT=200000 KILLS=10 RATE=1000 PARTS=3 CONTROLLERS=separate
NAME= BASE_PORT= BUILD=$REPO/build KBROKER= SEED=${SEED:-$RANDOM} KEEP=0 INJECT=
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) BACKEND=$2; shift 2 ;;
    --scenario) SCENARIO=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    --kills) KILLS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --partitions) PARTS=$2; shift 2 ;;
    --controllers) CONTROLLERS=$2; shift 2 ;;
    --name) NAME=$2; shift 2 ;;
    --base-port) BASE_PORT=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --kbroker) KBROKER=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --inject) INJECT=$2; shift 2 ;;
    -h | --help) sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scenarios: unknown option $1" >&2; exit 2 ;;
  esac
done
case "$BACKEND" in kafka | kbroker) ;; *) echo "scenarios: --backend kafka|kbroker" >&2; exit 2 ;; esac
[ "$SCENARIO" = all ] && SCENARIO=leader-kill,isr-offline,controller-kill
for sc in ${SCENARIO//,/ }; do
  case "$sc" in leader-kill | isr-offline | controller-kill) ;; *) echo "scenarios: bad --scenario '$sc'" >&2; exit 2 ;; esac
done
case "$INJECT" in "" | unclean) ;; *) echo "scenarios: --inject unclean" >&2; exit 2 ;; esac
NAME=${NAME:-cluster-$BACKEND}
[ -n "$BASE_PORT" ] || BASE_PORT=$([ "$BACKEND" = kafka ] && echo 19592 || echo 19692)
WORK=$BUILD/tests/cluster/$NAME
RANDOM=$SEED

T0=$(date +%s%3N)
now_ms() { date +%s%3N; }
say() { echo "scenarios[$BACKEND] +$(( ($(now_ms) - T0) / 1000 ))s: $*"; }
FAILS=0
fail() { echo "scenarios[$BACKEND]: FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
PROD_PID=
cleanup() {
  if [ -n "$PROD_PID" ]; then kill "$PROD_PID" 2>/dev/null || true; fi
  if [ "$KEEP" = 0 ]; then "$HERE/cluster.sh" stop --name "$NAME" >/dev/null 2>&1 || true; fi
}
die() { echo "scenarios[$BACKEND]: SETUP ERROR: $*" >&2; cleanup; exit 2; }
trap cleanup EXIT

cl() { "$HERE/cluster.sh" "$1" --name "$NAME" "${@:2}"; }
command -v java >/dev/null || die "java not found"
[ -x "$BUILD/bin/kc_replicacmp" ] || die "$BUILD/bin/kc_replicacmp missing (build the tree first)"
[ -x "$BUILD/bin/kc_meta" ] || die "$BUILD/bin/kc_meta missing (build the tree first)"
export KC_REPLICACMP=$BUILD/bin/kc_replicacmp KC_META=$BUILD/bin/kc_meta
RT_JAR=$("$PEERS/mvn-build.sh" "$REPO/tests/java/robust-tools" robust-tools.jar) || die "robust-tools build failed"
rt() { java -Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto -jar "$RT_JAR" "$@"; }

rm -rf "$WORK"
mkdir -p "$WORK"

# wait_until SECONDS WHAT COMMAND...: poll COMMAND every 50 ms until it succeeds.
wait_until() {
  local secs=$1 what=$2 end
  shift 2
  end=$(($(now_ms) + secs * 1000))
  until "$@"; do
    if [ "$(now_ms)" -gt "$end" ]; then
      echo "scenarios[$BACKEND]: timed out after ${secs}s waiting for $what" >&2
      return 1
    fi
    sleep 0.05 # poll interval of a deadline-bounded wait
  done
}
acked() { if [ -f "$1" ]; then grep -c '^A ' "$1" || true; else echo 0; fi; }
acked_at_least() { [ "$(acked "$1")" -ge "$2" ]; }
producer_alive() { kill -0 "$PROD_PID" 2>/dev/null; }
# set_gate FILE N: the producer may send records 0..N-1 (robust-tools produce --gate-file); the
# scenarios keep it a little ahead of the next kill, so that every kill falls while records are in
# flight and the producer cannot finish early however slow the cluster is.
set_gate() { echo "$2" >"$1.tmp" && mv -f "$1.tmp" "$1"; }
# progress_or_dead ACKLOG N: true once N records are acknowledged or the producer has exited
progress_or_dead() { acked_at_least "$1" "$2" || ! producer_alive; }

# meta_holds TOPIC PART|all COND NODE...: every listed broker's own Metadata answer (kc_meta, a C
# client: no JVM start per check) satisfies COND for the partition (all: every partition, at least
# one): leader!=K (a leader, not K), isr-full (a leader, the ISR = the replica set), no error.
meta_holds() {
  local t=$1 p=$2 cond=$3 n out
  shift 3
  for n in "$@"; do
    out=$("$KC_META" --broker "127.0.0.1:$((BASE_PORT + 10 * (n - 1)))" --topic "$t" \
      --timeout-ms 2000 2>/dev/null) || return 1
    awk -v t="$t" -v p="$p" -v cond="$cond" '
      function sorted(list,   a, n, i, j, x) {
        n = split(list, a, ",")
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
        x = ""; for (i = 1; i <= n; i++) x = x "," a[i]
        return x
      }
      $1 == "partition" && $2 == t && (p == "all" || $3 == p) {
        seen++
        for (i = 4; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        if (f["error"] != 0 || f["leader"] < 0) bad++
        else if (cond ~ /^leader!=/ && f["leader"] == substr(cond, 9)) bad++
        else if (cond == "isr-full" && sorted(f["isr"]) != sorted(f["replicas"])) bad++
      }
      END { exit (seen == 0 || bad > 0) }' <<<"$out" || return 1
  done
}
# meta_leader TOPIC PART: the partition's leader when brokers 1-3 all answer with the same one
meta_leader() {
  local n l one=
  for n in 1 2 3; do
    l=$("$KC_META" --broker "127.0.0.1:$((BASE_PORT + 10 * (n - 1)))" --topic "$1" --timeout-ms 2000 \
      2>/dev/null | awk -v t="$1" -v p="$2" '$1 == "partition" && $2 == t && $3 == p {
        sub(/^leader=/, "", $4); print $4 }') || return 1
    [[ "$l" =~ ^[0-9]+$ ]] || return 1
    [ -z "$one" ] || [ "$one" = "$l" ] || return 1
    one=$l
  done
  echo "$one"
}

# Overrides: short failure detection so that a run takes seconds per kill, not tens.
# (kbroker reads the same keys; docs/broker.md "Cluster".)
OV=(--override replica.lag.time.max.ms=3000 --override unclean.leader.election.enable=false
    --override min.insync.replicas=2 --override broker.session.timeout.ms=3000
    --override broker.heartbeat.interval.ms=500)
KB=()
[ -n "$KBROKER" ] && KB=(--kbroker "$KBROKER")

say "seed $SEED; starting a 3-broker $BACKEND cluster '$NAME' (controllers: $CONTROLLERS, base port $BASE_PORT)"
cl start --backend "$BACKEND" --controllers "$CONTROLLERS" --base-port "$BASE_PORT" --build "$BUILD" \
  "${KB[@]}" "${OV[@]}" --timeout 120 || die "the $BACKEND cluster did not start (see above)"
BS=$(cl bootstrap)
TOPIC_CFG=(min.insync.replicas=2 unclean.leader.election.enable=false segment.bytes=1048576)

# compare_converged TOPIC PARTS: every partition's replicas hold the same batches and end at the
# same offset (polled: followers may still be fetching the last batches).
compare_converged() {
  local t=$1 n=$2 p
  for ((p = 0; p < n; p++)); do
    if ! wait_until 60 "replicas of $t-$p to converge" \
        bash -c "'$HERE/cluster.sh' compare --name '$NAME' '$t' $p --same-end >'$WORK/compare-$t-$p.log' 2>&1"; then
      cat "$WORK/compare-$t-$p.log" >&2
      fail "$t-$p: the replicas differ (kc_replicacmp above)"
    else
      say "$t-$p: $(tail -1 "$WORK/compare-$t-$p.log")"
    fi
  done
}

# consistent_view TOPIC: every broker answers Metadata with the same leaders, epochs, ISR and topic
# id, which are also what the Java Admin client sees.
consistent_view() {
  if cl consistent "$1" --timeout-ms 30000 >"$WORK/consistent-$1.log" 2>&1; then
    say "$1: $(tail -1 "$WORK/consistent-$1.log")"
  else
    cat "$WORK/consistent-$1.log" >&2
    fail "$1: the brokers do not agree on the metadata (above)"
  fi
}

verify_topic() {
  local t=$1 acklog=$2
  if rt verify --bootstrap "$BS" --topic "$t" --ack-log "$acklog" >"$WORK/verify-$t.log" 2>&1; then
    say "$t: $(grep '^verify ' "$WORK/verify-$t.log")"
  else
    cat "$WORK/verify-$t.log" >&2
    fail "$t: the verifying consumer found problems (above)"
  fi
}

# ------------------------------------------------------------------ scenario: leader-kill
scenario_leader_kill() {
  local t=leader-kill acklog=$WORK/leader-kill.acks gate=$WORK/leader-kill.gate k step p leader t1 rc=0 times=() x
  cl create-topic "$t" "$PARTS" "${TOPIC_CFG[@]}" >"$WORK/create-$t.log" 2>&1 \
    || { cat "$WORK/create-$t.log" >&2; die "create-topic $t failed"; }
  say "leader-kill: producing $COUNT records to $PARTS partitions at $RATE/s; $KILLS leader kills"
  step=$((COUNT / (KILLS + 1)))
  set_gate "$gate" $((step + step / 2))
  rt produce --bootstrap "$BS" --topic "$t" --partitions "$PARTS" --count "$COUNT" --rate "$RATE" \
    --ack-log "$acklog" --gate-file "$gate" >"$WORK/produce-$t.log" 2>&1 &
  PROD_PID=$!
  for ((k = 1; k <= KILLS; k++)); do
    wait_until 600 "$((step * k)) acknowledgements" progress_or_dead "$acklog" $((step * k)) \
      || { fail "leader-kill: the producer stalled before kill $k"; break; }
    if ! producer_alive; then
      fail "leader-kill: the producer exited before kill $k ($(acked "$acklog") acknowledged; $WORK/produce-$t.log)"
      break
    fi
    p=$(((k - 1) % PARTS))
    # the leader as every broker's own Metadata answer gives it (kc_meta: milliseconds, so the
    # kill falls while the records up to the gate are still being produced)
    if ! leader=$(wait_until 30 "brokers 1-3 to agree on the leader of $t-$p" meta_leader "$t" "$p"); then
      fail "leader-kill: partition $p has no leader the brokers agree on before kill $k"
      break
    fi
    t1=$(now_ms)
    local at others=()
    at=$(acked "$acklog")
    cl kill "$leader"
    for x in 1 2 3; do [ "$x" = "$leader" ] || others+=("$x"); done
    if [ "$CONTROLLERS" = node1 ] && [ "$leader" = 1 ]; then
      : # node 1 was also the only controller: nobody elects until it is back
    elif ! wait_until 60 "a new leader of $t-$p on brokers ${others[*]}" \
        meta_holds "$t" "$p" "leader!=$leader" "${others[@]}"; then
      fail "leader-kill: no new leader for $t-$p within 60 s of killing node $leader"
      break
    fi
    local te=$(($(now_ms) - t1))
    cl restart "$leader"
    if ! wait_until 120 "every ISR of $t full on brokers 1-3" meta_holds "$t" all isr-full 1 2 3; then
      cl wait "$t" all isr-full --timeout-ms 1000 >&2 || true
      fail "leader-kill: node $leader did not rejoin every ISR within 120 s of its restart"
      break
    fi
    times+=("$te/$(($(now_ms) - t1))")
    set_gate "$gate" $((k == KILLS ? COUNT : (k + 1) * step + step / 2))
    say "kill $k: node $leader (leader of $t-$p) at $at acks; new leader after $te ms, full ISR after $(($(now_ms) - t1)) ms"
  done
  set_gate "$gate" "$COUNT"
  wait "$PROD_PID" || rc=$?
  PROD_PID=
  say "leader-kill: $(tail -1 "$WORK/produce-$t.log")"
  [ "$rc" = 0 ] || fail "leader-kill: not every record was acknowledged (producer exit $rc)"
  if grep -q "^E " "$acklog"; then fail "leader-kill: $(grep -c '^E ' "$acklog") sends failed, e.g. $(grep -m1 "^E " "$acklog")"; fi
  verify_topic "$t" "$acklog"
  cl wait "$t" all isr-full --timeout-ms 60000 >/dev/null 2>&1 || fail "leader-kill: ISR not full at the end"
  compare_converged "$t" "$PARTS"
  consistent_view "$t"
  say "leader-kill: done (election/full-ISR ms per kill: ${times[*]:-none})"
}

# ------------------------------------------------------------------ scenario: isr-offline
scenario_isr_offline() {
  local t=isr-offline acklog=$WORK/isr-offline.acks gate=$WORK/isr-offline.gate desc leader isr f others=() n a0 rc=0 x
  local count=$((COUNT / 4)) rate=$((RATE / 3 > 100 ? RATE / 3 : 100))
  count=$((count < 5000 ? 5000 : count > 20000 ? 20000 : count))
  local cfg=("${TOPIC_CFG[@]}")
  if [ "$INJECT" = unclean ]; then
    cfg=(min.insync.replicas=2 unclean.leader.election.enable=true segment.bytes=1048576)
    say "isr-offline: INJECT unclean: the topic allows unclean leader election (this run must fail)"
  fi
  cl create-topic "$t" 1 "${cfg[@]}" >"$WORK/create-$t.log" 2>&1 \
    || { cat "$WORK/create-$t.log" >&2; die "create-topic $t failed"; }
  desc=$(cl describe "$t" | grep "^partition $t 0 ")
  leader=$(sed -n 's/.* leader=\([0-9]*\) .*/\1/p' <<<"$desc")
  isr=$(sed -n 's/.* isr=\([0-9,]*\) .*/\1/p' <<<"$desc")
  [ -n "$leader" ] || die "isr-offline: no leader: $desc"
  for x in ${isr//,/ }; do [ "$x" != "$leader" ] && others+=("$x"); done
  f=${others[$((RANDOM % 2))]}
  say "isr-offline: $desc; follower to cut off: $f"
  set_gate "$gate" $((count * 3 / 10))
  rt produce --bootstrap "$BS" --topic "$t" --partitions 1 --count "$count" --rate "$rate" \
    --ack-log "$acklog" --gate-file "$gate" >"$WORK/produce-$t.log" 2>&1 &
  PROD_PID=$!
  wait_until 120 "first acknowledgements" progress_or_dead "$acklog" $((count / 5)) || true
  producer_alive || { fail "isr-offline: the producer exited early ($WORK/produce-$t.log)"; wait "$PROD_PID" || true; PROD_PID=; return; }
  cl pause "$f"
  if ! cl wait "$t" 0 "isr-without=$f+has-leader" --timeout-ms 60000 >"$WORK/shrink.log" 2>&1; then
    cat "$WORK/shrink.log" >&2
    fail "isr-offline: paused follower $f was not removed from the ISR within 60 s"
    cl resume "$f" || true
    set_gate "$gate" "$count"
    wait "$PROD_PID" || true
    PROD_PID=
    return
  fi
  say "isr-offline: follower $f left the ISR: $(head -1 "$WORK/shrink.log")"
  # The leader takes writes the paused follower does not have.
  set_gate "$gate" $((count * 6 / 10))
  a0=$(acked "$acklog")
  wait_until 120 "writes after the shrink" progress_or_dead "$acklog" $((a0 + count / 10)) || true
  producer_alive || fail "isr-offline: the producer exited before the in-sync replicas were killed"
  desc=$(cl describe "$t" | grep "^partition $t 0 ")
  isr=$(sed -n 's/.* isr=\([0-9,]*\) .*/\1/p' <<<"$desc")
  say "isr-offline: $(acked "$acklog") acknowledged; killing every in-sync replica ($isr)"
  for x in ${isr//,/ }; do cl kill "$x"; done
  cl resume "$f"
  # F must be back as a live broker (it could be elected now if unclean election were allowed) ...
  if ! wait_until 60 "node $f to be a registered broker again" \
      bash -c "'$HERE/cluster.sh' describe --name '$NAME' $t 2>/dev/null | grep -q '^cluster .* brokers=\(.*,\)\?$f\(,.*\)\?$'"; then
    fail "isr-offline: resumed node $f did not come back as a broker"
  fi
  # ... and the partition must be and stay offline.
  if cl wait "$t" 0 no-leader --hold-ms 3000 --timeout-ms 30000 >"$WORK/offline.log" 2>&1; then
    say "isr-offline: offline while only the lagging follower is up: $(head -1 "$WORK/offline.log")"
  else
    cat "$WORK/offline.log" >&2
    fail "isr-offline: the partition did not stay offline with only the out-of-sync follower $f alive (unclean election?)"
  fi
  # Divergent tails: what each killed replica held when it died (informational).
  "$KC_REPLICACMP" "$(cl partdir 1 "$t" 0)" "$(cl partdir 2 "$t" 0)" "$(cl partdir 3 "$t" 0)" \
    >"$WORK/before-restart.log" 2>&1 || true
  grep '^replica ' "$WORK/before-restart.log" | sed 's/^/    before restart: /'
  for x in ${isr//,/ }; do cl restart "$x"; done
  set_gate "$gate" "$count"
  if ! cl wait "$t" 0 "has-leader+isr-full" --timeout-ms 120000 >"$WORK/back.log" 2>&1; then
    cat "$WORK/back.log" >&2
    fail "isr-offline: no leader with a full ISR within 120 s of restarting $isr"
  else
    n=$(sed -n 's/.* leader=\([0-9]*\) .*/\1/p' "$WORK/back.log" | head -1)
    [ "$n" != "$f" ] || fail "isr-offline: the out-of-sync follower $f became leader"
    say "isr-offline: back: $(head -1 "$WORK/back.log")"
  fi
  wait "$PROD_PID" || rc=$?
  PROD_PID=
  say "isr-offline: $(tail -1 "$WORK/produce-$t.log")"
  [ "$rc" = 0 ] || fail "isr-offline: not every record was acknowledged (producer exit $rc)"
  verify_topic "$t" "$acklog"
  compare_converged "$t" 1
  consistent_view "$t"
}

# ------------------------------------------------------------------ scenario: controller-kill
scenario_controller_kill() {
  local t=ck-before t2=ck-during acklog=$WORK/ck.acks gate=$WORK/ck.gate ctl id0 id1 out a0 rc=0
  local count=$((COUNT / 10 < 5000 ? 5000 : COUNT / 10 > 20000 ? 20000 : COUNT / 10))
  local rate=$((RATE / 3 > 100 ? RATE / 3 : 100))
  case "$CONTROLLERS" in
    separate) ctl=4 ;;
    node1) ctl=1 ;;
    *) fail "controller-kill: needs --controllers separate or node1 (a single controller to kill)"; return ;;
  esac
  cl create-topic "$t" 3 "${TOPIC_CFG[@]}" >"$WORK/create-$t.log" 2>&1 \
    || { cat "$WORK/create-$t.log" >&2; die "create-topic $t failed"; }
  id0=$(cl describe "$t" | grep "^topic $t ")
  set_gate "$gate" $((count * 3 / 10))
  rt produce --bootstrap "$BS" --topic "$t" --partitions 3 --count "$count" --rate "$rate" \
    --ack-log "$acklog" --gate-file "$gate" >"$WORK/produce-$t.log" 2>&1 &
  PROD_PID=$!
  wait_until 120 "first acknowledgements" progress_or_dead "$acklog" $((count / 5)) || true
  producer_alive || { fail "controller-kill: the producer exited early ($WORK/produce-$t.log)"; wait "$PROD_PID" || true; PROD_PID=; return; }
  say "controller-kill: $id0; killing the controller (node $ctl) at $(acked "$acklog") acks"
  cl kill "$ctl"
  out=$(cl admin create-topic --topic "$t2" --partitions 1 --rf 3 --once true --timeout-ms 10000 2>&1) || true
  if grep -q "^create-topic: FAILED .*retriable=true" <<<"$out"; then
    say "controller-kill: CreateTopics while the controller is down: $(grep '^create-topic' <<<"$out")"
  else
    echo "$out" >&2
    fail "controller-kill: CreateTopics while the controller is down did not fail with a retriable error"
  fi
  if [ "$ctl" = 4 ]; then
    a0=$(acked "$acklog")
    set_gate "$gate" $((a0 + count / 5))
    if wait_until 60 "writes while the controller is down" progress_or_dead "$acklog" $((a0 + count / 10)) \
        && [ "$(acked "$acklog")" -ge $((a0 + count / 10)) ]; then
      say "controller-kill: the brokers kept taking writes: $a0 -> $(acked "$acklog") acks with the controller down"
    else
      fail "controller-kill: writes stopped while the controller was down ($a0 -> $(acked "$acklog") acks)"
    fi
  fi
  cl restart "$ctl"
  set_gate "$gate" "$count"
  if wait_until 60 "CreateTopics to succeed after the controller's restart" \
      bash -c "'$HERE/cluster.sh' admin --name '$NAME' create-topic --topic '$t2' --partitions 1 --rf 3 --once true --timeout-ms 5000 >'$WORK/ck-create.log' 2>&1"; then
    # "exists": the attempt made while the controller was down, which the client saw time out,
    # was still carried out once it returned (Kafka's brokers queue forwarded requests).
    say "controller-kill: after the restart: $(grep '^create-topic' "$WORK/ck-create.log")"
    cl wait "$t2" all has-leader+isr-full --timeout-ms 60000 >"$WORK/ck-during.log" 2>&1 \
      || { cat "$WORK/ck-during.log" >&2; fail "controller-kill: $t2 has no leader with a full ISR"; }
  else
    cat "$WORK/ck-create.log" >&2
    fail "controller-kill: CreateTopics still failing 60 s after the controller's restart"
  fi
  cl wait "$t" all has-leader+isr-full --timeout-ms 120000 >"$WORK/ck-back.log" 2>&1 \
    || { cat "$WORK/ck-back.log" >&2; fail "controller-kill: $t not fully in sync after the restart"; }
  id1=$(cl describe "$t" | grep "^topic $t ")
  [ "$id1" = "$id0" ] || fail "controller-kill: $t changed across the controller restart: '$id0' -> '$id1'"
  wait "$PROD_PID" || rc=$?
  PROD_PID=
  say "controller-kill: $(tail -1 "$WORK/produce-$t.log")"
  [ "$rc" = 0 ] || fail "controller-kill: not every record was acknowledged (producer exit $rc)"
  verify_topic "$t" "$acklog"
  compare_converged "$t" 3
  consistent_view "$t"
}

for sc in ${SCENARIO//,/ }; do
  case "$sc" in
    leader-kill) scenario_leader_kill ;;
    isr-offline) scenario_isr_offline ;;
    controller-kill) scenario_controller_kill ;;
  esac
done

if [ "$KEEP" = 0 ]; then
  cl stop >/dev/null 2>&1 || fail "stopping the cluster failed"
fi
trap - EXIT
if [ "$FAILS" = 0 ]; then
  say "PASS ($SCENARIO; logs in $WORK)"
  exit 0
fi
say "FAILED: $FAILS problem(s) (seed $SEED; logs in $WORK and $KPEER_HOME/$NAME)"
exit 1
