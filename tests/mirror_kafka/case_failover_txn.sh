# shellcheck shell=bash
# case_failover_txn.sh -- case failover-txn of tests/mirror_kafka/run.sh (sourced by it; uses its
# helpers and variables: S, D, RF, PEER, ME2E, MK, KM, WORK, fail, step, until_ok, injected,
# mirror_start).
#
# Failover with a transaction open on Kafka: a transactional Java producer writes kf-t
# (KF_N records in transactions of KF_R, every KF_ABORT-th aborted) and then leaves one more
# transaction of KF_OPEN records open (flushed: in Kafka's log, neither committed nor aborted;
# peer-tools produce --open-records). Once the mirror has copied past it (the destination's
# high watermarks reach Kafka's log ends) and the destination shows it open (LSO below the log
# end), kafka-mirrors --stop --wait fails the topic over while the transaction is still open on
# Kafka. The destination must end it: its LSO reaches its log end on every partition, so a
# read_committed consumer is not held at the LSO, and reads exactly the producer's committed
# records (mk.py txn-check: count, each index once, the producer's SHA-256, which it prints
# only after the open transaction is released and aborted on Kafka), never the open
# transaction's. The check of the destination's LSO runs while Kafka still holds the
# transaction open.
# --inject stop-skip: no --stop (the mirror keeps copying, the transaction stays open on the
# destination: the LSO check must fail).

KF_T=kf-t
KF_N=400
KF_R=20
KF_ABORT=4
KF_OPEN=10
case_failover_txn() {
  local pid sha c n
  step "failover-txn: $KF_T (2 partitions, RF $RF) on Kafka, mirror mkf started; a transactional Java producer writes $KF_N records ($KF_R a transaction, every ${KF_ABORT}th aborted), then leaves $KF_OPEN records in an open transaction"
  "${ME2E[@]}" create-topics "$S" 2 "$RF" "$KF_T" || { fail "failover-txn: create $KF_T"; return; }
  mirror_start mkf "$KF_T" sync.topic.configs.interval.ms=0 sync.acls.interval.ms=0 \
    sync.group.offsets.interval.ms=0 || return
  rm -f "$WORK/kf-release"
  "$PEER" produce --bootstrap "$S" --topic "$KF_T" --count "$KF_N" --size 100 --compression lz4 \
    --transactional-id kf-txn --txn-records "$KF_R" --abort-every "$KF_ABORT" \
    --open-records "$KF_OPEN" --release-file "$WORK/kf-release" >"$WORK/kf-produce.log" 2>&1 &
  pid=$!
  until_ok 120 "the Java producer's last transaction is flushed and left open" \
    grep -q '^open transaction:' "$WORK/kf-produce.log" || { touch "$WORK/kf-release"; wait "$pid"; return; }
  "${ME2E[@]}" ends "$S" "$KF_T" >"$WORK/kf-src-ends" || { fail "failover-txn: Kafka's log ends"; touch "$WORK/kf-release"; wait "$pid"; return; }
  until_ok 60 "the open transaction is mirrored (destination high watermarks >= Kafka's log ends $(paste -sd' ' "$WORK/kf-src-ends"))" \
    kf_mirrored_past || { touch "$WORK/kf-release"; wait "$pid"; return; }
  "${MK[@]}" txn-check "$D" "$KF_T" 0 - >"$WORK/kf-open.out" 2>&1 &&
    { fail "failover-txn: the destination does not show the transaction open before the stop:"; cat "$WORK/kf-open.out"; }
  echo "before the stop: $(grep -o 'last stable offset below.*' "$WORK/kf-open.out")"

  if injected stop-skip; then
    echo "INJECTED: no --stop; the mirror keeps copying the open transaction (the run must fail)"
  else
    step "failover-txn: kafka-mirrors --stop --wait while the transaction is open on Kafka"
    "$KM" --bootstrap-server "$D" --stop --mirror mkf --topic "$KF_T" --wait --timeout-ms 60000 \
      >"$WORK/kf-stop.out" 2>&1 || { cat "$WORK/kf-stop.out"; fail "failover-txn: kafka-mirrors --stop --mirror mkf"; }
  fi
  until_ok 30 "$KF_T on the destination: the open transaction ended (LSO = log end on every partition) while Kafka still holds it open" \
    "${MK[@]}" txn-check "$D" "$KF_T" 0 - && sed 's/^/  /' "$WORK/last"

  step "failover-txn: Kafka's transaction released (aborted there); a read_committed consumer on the destination reads exactly the committed records"
  touch "$WORK/kf-release"
  wait "$pid" || { fail "failover-txn: the transactional Java producer failed:"; tail -5 "$WORK/kf-produce.log"; return; }
  grep produced "$WORK/kf-produce.log"
  sha=$(sed -n 's/.*sha256=\([0-9a-f]*\).*/\1/p' "$WORK/kf-produce.log" | head -1)
  c=$(sed -n 's/.* committed \([0-9]*\) aborted [0-9]* transactions.*/\1/p' "$WORK/kf-produce.log" | head -1)
  [ -n "$sha" ] && [ -n "$c" ] || { fail "failover-txn: no sha256 / committed count in $WORK/kf-produce.log"; return; }
  n=$((c * KF_R))
  "${MK[@]}" txn-check "$D" "$KF_T" "$n" "$sha" >"$WORK/kf-check.out" 2>&1 &&
    sed 's/^/  /' "$WORK/kf-check.out" ||
    { fail "failover-txn: read_committed on the destination:"; cat "$WORK/kf-check.out"; }
}

# kf_mirrored_past -- the destination's high watermarks of kf-t reach Kafka's log ends as they
# were when the transaction was left open (kf-src-ends)
kf_mirrored_past() {
  local tp o got
  "${ME2E[@]}" ends "$D" "$KF_T" >"$WORK/kf-dst-ends" || return 1
  while read -r tp o; do
    got=$(sed -n "s/^$tp //p" "$WORK/kf-dst-ends")
    [ -n "$got" ] && [ "$got" -ge "$o" ] || { echo "$tp: destination $got < Kafka $o"; return 1; }
  done <"$WORK/kf-src-ends"
}
