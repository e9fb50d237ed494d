# shellcheck shell=bash
# case_leader_kill.sh -- case leader-kill of tests/mirror_kafka/run.sh (3 Kafka nodes; sourced
# by it; uses its helpers and variables: S, D, KC, SRC, PEER, ME2E, KM, WORK, fail, step,
# until_ok, mirror_start, cmp_topic).
#
# kl-t (2 partitions, RF 3, min.insync.replicas=2) is mirrored (mirror mkl) while a Java producer
# (acks=all, idempotent, at most KL_RATE records a second) writes KL_N records; once the mirror
# has copied part of them (and still not all of partition 0), the
# Kafka node leading partition 0 is killed -9. The producer must finish (every record
# acknowledged by the surviving replicas); the mirror follows the new leader and catches up
# with the source's new log end; every partition is byte-identical on the two surviving Kafka
# replicas and the 3 destination replicas; peer-tools consume-verify reads every acknowledged
# record on the destination exactly once (contents, order, SHA-256 of the producer's output).
# The killed node is restarted at the end (it catches up as a follower) for the later cases.

KL_T=kl-t
KL_N=60000
KL_RATE=4000 # records a second at most (peer-tools produce --rate): the kill lands mid-stream
case_leader_kill() {
  local pid leader rc sha live=() i
  step "leader-kill: $KL_T (2 partitions, RF 3, min.insync.replicas=2) on Kafka, mirror mkl started"
  "$PEER" admin-create-topic --bootstrap "$S" --topic "$KL_T" --partitions 2 --rf 3 \
    --config min.insync.replicas=2 >"$WORK/kl-create.log" 2>&1 ||
    { fail "leader-kill: create $KL_T:"; tail -3 "$WORK/kl-create.log"; return; }
  mirror_start mkl "$KL_T" sync.topic.configs.interval.ms=0 sync.acls.interval.ms=0 \
    sync.group.offsets.interval.ms=0 || return

  step "leader-kill: a Java producer (acks=all, idempotent) writes $KL_N records; the leader of $KL_T-0 is killed -9 while the mirror copies"
  "$PEER" produce --bootstrap "$S" --topic "$KL_T" --count "$KL_N" --size 100 --linger-ms 5 \
    --compression lz4 --rate "$KL_RATE" >"$WORK/kl-produce.log" 2>&1 &
  pid=$!
  # kill once the destination holds part of partition 0 (the mirror is copying it)
  until_ok 120 "the destination holds records of $KL_T-0" kl_dst_has 500 || { wait "$pid"; return; }
  kill -0 "$pid" 2>/dev/null || { fail "leader-kill: the producer finished before the kill (raise KL_N)"; return; }
  local at
  at=$(kl_dst_end)
  leader=$("${ME2E[@]}" part-info "$S" "$KL_T" 0 | cut -d' ' -f1)
  [[ "$leader" =~ ^[123]$ ]] || { fail "leader-kill: leader of $KL_T-0 is '$leader'"; wait "$pid"; return; }
  "$KC" kill --name "$SRC" --node "$leader" >"$WORK/kl-kill.log" 2>&1 ||
    { fail "leader-kill: kill Kafka node $leader:"; cat "$WORK/kl-kill.log"; wait "$pid"; return; }
  echo "killed Kafka node $leader (leader of $KL_T-0) when the destination held $at of its $((KL_N / 2)) records"
  [ -n "$at" ] && [ "$at" -lt $((KL_N / 2)) ] ||
    fail "leader-kill: the destination already held every record of $KL_T-0 at the kill (raise KL_N or lower KL_RATE)"
  wait "$pid"
  rc=$?
  grep produced "$WORK/kl-produce.log"
  [ "$rc" = 0 ] || { fail "leader-kill: the Java producer failed (exit $rc):"; tail -5 "$WORK/kl-produce.log"; return; }
  sha=$(sed -n 's/.*sha256=\([0-9a-f]*\).*/\1/p' "$WORK/kl-produce.log" | head -1)

  step "leader-kill: the mirror follows the new leader: caught up, byte-identical on the 2 live Kafka replicas and the 3 destination replicas"
  until_ok 180 "$KL_T caught up after the leader kill" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mkl 2 || return
  tail -1 "$WORK/last"
  for i in 1 2 3; do [ "$i" = "$leader" ] || live+=("$i"); done
  CMP_NODES="${live[*]}" cmp_topic "$KL_T" 2
  "$PEER" consume-verify --bootstrap "$D" --topic "$KL_T" --count "$KL_N" --size 100 \
    --expect-sha256 "$sha" --timeout-ms 120000 >"$WORK/kl-verify.log" 2>&1 &&
    echo "ok: every acknowledged record once on the destination: $(tail -1 "$WORK/kl-verify.log")" ||
    { fail "leader-kill: consume-verify on the destination:"; tail -5 "$WORK/kl-verify.log"; }

  step "leader-kill: Kafka node $leader restarted"
  "$KC" restart --name "$SRC" --node "$leader" --wait --timeout 120 >"$WORK/kl-restart.log" 2>&1 ||
    { fail "leader-kill: restart Kafka node $leader:"; tail -5 "$WORK/kl-restart.log"; }
}

# kl_dst_end -- the destination's log end offset of kl-t partition 0
kl_dst_end() { "${ME2E[@]}" ends "$D" "$KL_T" 2>/dev/null | sed -n "s/^$KL_T-0 //p"; }
# kl_dst_has N -- the destination holds at least N records of kl-t partition 0
kl_dst_has() {
  local e
  e=$(kl_dst_end)
  echo "destination end offset of $KL_T-0: ${e:-?}"
  [ -n "$e" ] && [ "$e" -ge "$1" ]
}
