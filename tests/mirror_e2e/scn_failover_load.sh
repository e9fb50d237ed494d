# shellcheck shell=bash
# scn_failover_load.sh -- scenario failover-load of tests/mirror_e2e/run.sh (sourced by it; uses
# its helpers and variables: S, D, CL, KM, PY, ME2E, PEER, WORK, INJECT, DST, fail, step,
# until_ok). Needs nothing of the other scenarios: its own topic fo-load and mirror mfo.
#
# Failover under load (docs/testing-mirror.md "Scenario failover-load"): kcat (idempotent) writes
# the source continuously, a transactional Java producer commits and aborts transactions and then
# leaves one open (flushed), a raw client writes the destination mirror topic continuously;
# kafka-mirrors --stop --wait while all of them run; then failover-load.py checks the writer's
# answers, read_committed on both sides and the destination's segment files.


scenario_failover_load() {
  local t=fo-load w=$WORK/fo-load fl=("$PY" "$HERE/failover-load.py") kpid jpid wpid rc i p t0
  local count=400 open=10
  mkdir -p "$w" && rm -f "$w"/stop-* "$w/release"
  # the Java producer's jar first (built when missing or stale), so that the wait for its open
  # transaction below does not include a Maven build
  "$REPO/tests/peers/mvn-build.sh" "$REPO/tests/java/peer-tools" peer-tools.jar >"$w/mvn.log" 2>&1 ||
    { cat "$w/mvn.log"; fail "building tests/java/peer-tools"; return; }
  step "failover-load: topic $t (2 partitions, RF 3) on the source, mirror mfo started"
  "${ME2E[@]}" create-topics "$S" 2 3 "$t" || { fail "create $t"; return; }
  printf 'bootstrap.servers=%s\n' "$S" >"$w/mfo.properties"
  mirror_create mfo "$w/mfo.properties" || return

  # kcat (librdkafka, idempotent) writes the source continuously until stop-src exists (the
  # sleep paces the writer, it synchronises nothing)
  (i=0; while [ ! -e "$w/stop-src" ]; do i=$((i + 1)); echo "kc-$i:fo-load kcat record $i"; sleep 0.01; done) |
    timeout 600 kcat -b "$S" -P -t "$t" -K: -z lz4 -X enable.idempotence=true -X linger.ms=5 \
      >"$w/kcat.log" 2>&1 &
  kpid=$!
  "$KM" --bootstrap-server "$D" --start --mirror mfo --topic "$t" --wait --timeout-ms 60000 \
    >"$w/start.out" 2>&1 || { cat "$w/start.out"; fail "kafka-mirrors --start mfo --wait"; touch "$w/stop-src"; return; }
  step "failover-load: transactional Java producer ($count records, 20 a transaction, every 4th aborted, then $open left open)"
  "$PEER" produce --bootstrap "$S" --topic "$t" --count "$count" --compression zstd \
    --transactional-id fo-txn --txn-records 20 --abort-every 4 --open-records "$open" \
    --release-file "$w/release" >"$w/java.log" 2>&1 &
  jpid=$!
  until_ok 90 "the Java producer's last transaction is flushed and left open" \
    grep -q '^open transaction:' "$w/java.log" || { touch "$w/stop-src" "$w/release"; wait; return; }
  # Mirrored past it: the destination's high watermarks reach the source log ends of now.
  "${ME2E[@]}" ends "$S" "$t" >"$w/src-ends"
  mirrored_past() {
    local tp o got
    "${ME2E[@]}" ends "$D" "$t" >"$w/dst-ends" || return 1
    while read -r tp o; do
      got=$(sed -n "s/^$tp //p" "$w/dst-ends")
      [ -n "$got" ] && [ "$got" -ge "$o" ] || { echo "$tp: destination $got < source $o"; return 1; }
    done <"$w/src-ends"
  }
  until_ok 60 "the open transaction is mirrored (destination HW >= source log end $(paste -sd' ' "$w/src-ends"))" \
    mirrored_past || { touch "$w/stop-src" "$w/release"; wait; return; }

  step "failover-load: a raw client writes the destination continuously; kafka-mirrors --stop --wait while all write"
  "${fl[@]}" writer "$D" "$t" "$w/writer.out" "$w/stop-writer" >"$w/writer.log" 2>&1 &
  wpid=$!
  refused_147() { for p in 0 1; do grep -q "^$p 147 " "$w/writer.out" || return 1; done; }
  until_ok 30 "the destination writer is refused with 147 on both partitions" refused_147
  t0=$SECONDS
  "$KM" --bootstrap-server "$D" --stop --mirror mfo --topic "$t" --wait --timeout-ms 60000 \
    >"$w/stop.out" 2>&1
  rc=$?
  tail -n 4 "$w/stop.out"
  [ "$rc" = 0 ] && echo "ok: --stop --wait returned after $((SECONDS - t0))s" ||
    fail "kafka-mirrors --stop mfo --wait: exit $rc"
  accepted() { for p in 0 1; do grep -q "^$p 0 " "$w/writer.out" || return 1; done; }
  until_ok 30 "the destination writer's writes are accepted on both partitions" accepted
  touch "$w/stop-writer" "$w/stop-src"
  wait "$wpid" || fail "the destination writer failed: $(tail -3 "$w/writer.log")"
  wait "$kpid" || fail "kcat (source writer) failed: $(tail -3 "$w/kcat.log")"
  touch "$w/release" # the Java producer aborts its open transaction on the source and exits
  wait "$jpid" || fail "the Java producer failed: $(tail -3 "$w/java.log")"
  grep -h produced "$w/java.log"

  step "failover-load: checks (writer answers, segment files of the 3 destination replicas, read_committed on both sides)"
  : >"$w/partdirs"
  for p in 0 1; do
    for i in 1 2 3; do echo "$p $("$CL" partdir "$i" "$t" "$p" --name "$DST")" >>"$w/partdirs"; done
  done
  local inj=()
  [ "$INJECT" = fo-lme ] && inj=(--inject lme)
  "${fl[@]}" check "$KM" "$D" "$S" mfo "$t" "$w/writer.out" "$count" $((count + open - 1)) \
    "$w/partdirs" "${inj[@]}" >"$w/check.out" 2>&1 || fail "failover-load checks (see below)"
  grep -v '^ok ' "$w/check.out" | head -40
  echo "$(grep -c '^ok ' "$w/check.out") failover-load checks ok"
}
