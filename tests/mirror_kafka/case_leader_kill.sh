# shellcheck shell=bash
# case_leader_kill.sh -- case leader-kill of tests/mirror_kafka/run.sh (3 Kafka nodes; sourced
# by it; uses its helpers and variables: S, D, KC, SRC, PEER, ME2E, MK, KM, WORK, fail, step,
# until_ok, injected, src_create_topic, mirror_start, cmp_topic).
#
# kl-t and kl-tx (2 partitions each, RF 3, min.insync.replicas=2) are mirrored (mirror mkl)
# while two Java producers write, paced (peer-tools produce --rate): on kl-t an idempotent one
# (acks=all) KL_N records, on kl-tx a transactional one KL_TX_N records in transactions of
# KL_TX_R, every KL_TX_ABORT-th aborted (flushed first, so its records are in the log). Once the
# mirror has copied part of kl-t-0 (and both producers still write), the Kafka node leading
# kl-t-0 is killed -9. Both producers must finish (every record acknowledged by the surviving
# replicas, every transaction committed or aborted); the mirror follows the new leaders and
# catches up with the source's new log ends; every partition is byte-identical on the two
# surviving Kafka replicas and the 3 destination replicas; peer-tools consume-verify reads every
# acknowledged kl-t record on the destination exactly once (contents, order, SHA-256 of the
# producer's output); on kl-tx the destination's last stable offset equals its log end offset
# (no transaction left open) and a read_committed consumer (kafka-python, mk.py txn-check) sees
# exactly the producer's committed records (count, each index once, the producer's SHA-256),
# none of the aborted ones. The killed node is restarted at the end (it catches up as a
# follower) for the later cases.
KL_T=kl-t
KL_N=60000
KL_RATE=4000 # records a second at most (peer-tools produce --rate): the kill lands mid-stream
KL_TX=kl-tx
KL_TX_N=12000 # at KL_TX_RATE a second: ~12 s, as long as kl-t's producer
KL_TX_RATE=1000
KL_TX_R=50
KL_TX_ABORT=4
case_leader_kill() {
  local pid txpid leader rc sha live=() i t open=()
  step "leader-kill: $KL_T, $KL_TX (2 partitions, RF 3, min.insync.replicas=2) on Kafka, mirror mkl started"
  for t in "$KL_T" "$KL_TX"; do src_create_topic "$t" 2 3 min.insync.replicas=2 || return; done
  mirror_start mkl "$KL_T|$KL_TX" sync.topic.configs.interval.ms=0 sync.acls.interval.ms=0 \
    sync.group.offsets.interval.ms=0 || return

  step "leader-kill: Java producers write $KL_N records to $KL_T (acks=all, idempotent) and $KL_TX_N to $KL_TX (transactional, $KL_TX_R a transaction, every ${KL_TX_ABORT}th aborted); the leader of $KL_T-0 is killed -9 while the mirror copies"
  rm -f "$WORK/kl-release"
  # --inject txn-open: the transactional producer leaves one more transaction open until the
  # checks are done (the destination's LSO check must fail)
  injected txn-open && open=(--open-records 10 --release-file "$WORK/kl-release")
  "$PEER" produce --bootstrap "$S" --topic "$KL_T" --count "$KL_N" --size 100 --linger-ms 5 \
    --compression lz4 --rate "$KL_RATE" >"$WORK/kl-produce.log" 2>&1 &
  pid=$!
  "$PEER" produce --bootstrap "$S" --topic "$KL_TX" --count "$KL_TX_N" --size 100 --linger-ms 5 \
    --compression zstd --rate "$KL_TX_RATE" --transactional-id kl-txn --txn-records "$KL_TX_R" \
    --abort-every "$KL_TX_ABORT" "${open[@]}" >"$WORK/kl-txn.log" 2>&1 &
  txpid=$!
  # kill once the destination holds part of partition 0 (the mirror is copying it)
  until_ok 120 "the destination holds records of $KL_T-0" kl_dst_has 500 ||
    { touch "$WORK/kl-release"; wait "$pid" "$txpid"; return; }
  kill -0 "$pid" 2>/dev/null || { fail "leader-kill: the producer finished before the kill (raise KL_N)"; touch "$WORK/kl-release"; wait "$txpid"; return; }
  kill -0 "$txpid" 2>/dev/null || { fail "leader-kill: the transactional producer finished before the kill (raise KL_TX_N)"; wait "$pid"; return; }
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
  [ "$rc" = 0 ] || { fail "leader-kill: the Java producer failed (exit $rc):"; tail -5 "$WORK/kl-produce.log"; touch "$WORK/kl-release"; wait "$txpid"; return; }
  sha=$(sed -n 's/.*sha256=\([0-9a-f]*\).*/\1/p' "$WORK/kl-produce.log" | head -1)
  if [ ${#open[@]} = 0 ]; then
    wait "$txpid"
    rc=$?
  else
    until_ok 120 "the transactional producer left its last transaction open" \
      grep -q '^open transaction:' "$WORK/kl-txn.log"
    rc=$?
    echo "INJECTED: $KL_TX's producer holds 10 records in an open transaction until the checks are done (the run must fail)"
  fi
  [ "$rc" = 0 ] || { fail "leader-kill: the transactional Java producer failed (exit $rc):"; tail -5 "$WORK/kl-txn.log"; touch "$WORK/kl-release"; return; }

  step "leader-kill: the mirror follows the new leader: caught up, byte-identical on the 2 live Kafka replicas and the 3 destination replicas"
  until_ok 180 "$KL_T, $KL_TX caught up after the leader kill" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mkl 4 ||
    { touch "$WORK/kl-release"; wait "$txpid"; return; }
  tail -1 "$WORK/last"
  for i in 1 2 3; do [ "$i" = "$leader" ] || live+=("$i"); done
  CMP_NODES="${live[*]}" cmp_topic "$KL_T" 2
  CMP_NODES="${live[*]}" cmp_topic "$KL_TX" 2
  kl_txn_check
  "$PEER" consume-verify --bootstrap "$D" --topic "$KL_T" --count "$KL_N" --size 100 \
    --expect-sha256 "$sha" --timeout-ms 120000 >"$WORK/kl-verify.log" 2>&1 &&
    echo "ok: every acknowledged record once on the destination: $(tail -1 "$WORK/kl-verify.log")" ||
    { fail "leader-kill: consume-verify on the destination:"; tail -5 "$WORK/kl-verify.log"; }

  step "leader-kill: Kafka node $leader restarted"
  "$KC" restart --name "$SRC" --node "$leader" --wait --timeout 120 >"$WORK/kl-restart.log" 2>&1 ||
    { fail "leader-kill: restart Kafka node $leader:"; tail -5 "$WORK/kl-restart.log"; }
}

# kl_txn_check -- kl-tx after the catch-up: on the destination no transaction open (LSO = log
# end) and read_committed returns exactly the producer's committed records (polled: the
# followers' high watermark may still move); the source's read_committed the same (once).
# --inject txn-open: checked while the producer still holds a transaction open (must fail),
# then released; --inject txn-uncommitted: the destination read read_uncommitted (must fail:
# the aborted transactions' records are seen).
kl_txn_check() {
  local sha c n iso=read_committed
  if [ ${#open[@]} != 0 ]; then
    "${MK[@]}" txn-check "$D" "$KL_TX" 0 - >"$WORK/kl-txn-open.out" 2>&1 ||
      fail "leader-kill: $KL_TX on the destination: $(grep FAIL "$WORK/kl-txn-open.out")"
    touch "$WORK/kl-release" # the producer aborts its open transaction and exits
    wait "$txpid" || { fail "leader-kill: the transactional Java producer failed:"; tail -5 "$WORK/kl-txn.log"; return; }
  fi
  grep produced "$WORK/kl-txn.log"
  sha=$(sed -n 's/.*sha256=\([0-9a-f]*\).*/\1/p' "$WORK/kl-txn.log" | head -1)
  c=$(sed -n 's/.* committed \([0-9]*\) aborted [0-9]* transactions.*/\1/p' "$WORK/kl-txn.log" | head -1)
  [ -n "$sha" ] && [ -n "$c" ] || { fail "leader-kill: no sha256 / committed count in $WORK/kl-txn.log"; return; }
  n=$((c * KL_TX_R))
  [ "$n" -lt "$KL_TX_N" ] || { fail "leader-kill: the transactional producer aborted nothing"; return; }
  "${MK[@]}" txn-check "$S" "$KL_TX" "$n" "$sha" >"$WORK/kl-txn-src.out" 2>&1 ||
    { fail "leader-kill: $KL_TX on Kafka (the source itself):"; cat "$WORK/kl-txn-src.out"; }
  if injected txn-uncommitted; then
    iso=read_uncommitted
    echo "INJECTED: the destination's $KL_TX is read read_uncommitted (the run must fail)"
  fi
  until_ok 30 "$KL_TX on the destination: no transaction open, $iso returns exactly the $n committed records (of $KL_TX_N written)" \
    "${MK[@]}" txn-check "$D" "$KL_TX" "$n" "$sha" "$iso" && sed 's/^/  /' "$WORK/last"
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
