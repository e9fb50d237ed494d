# shellcheck shell=bash
# scn_producer_ids.sh -- scenario producer-ids of tests/mirror_e2e/run.sh (sourced by it; uses its
# helpers and variables: S, D, CL, KM, PY, ME2E, WORK, SRC, DST, INJECT, fail, step, until_ok, and
# the ho_* helpers of scn_read_only_noplugin.sh). Own topic ho-pid and mirror mho (created if
# missing); needs no other scenario. --inject pid-state: the check must fail (see the doc).

# ho_other_brokers NODE -- the destination bootstrap list without broker NODE (node i is the i-th)
ho_other_brokers() {
  local i=0 b out=()
  for b in ${D//,/ }; do
    i=$((i + 1))
    [ "$i" = "$1" ] || out+=("$b")
  done
  (IFS=,; echo "${out[*]}")
}
# ho_led_elsewhere TOPIC PART NODE -- asked of the other brokers: a leader, and not NODE
ho_led_elsewhere() {
  local l
  l=$("${ME2E[@]}" part-info "$(ho_other_brokers "$3")" "$1" "$2" | cut -d' ' -f1) || return 1
  echo "leader: $l"
  [ -n "$l" ] && [ "$l" -ge 0 ] && [ "$l" != "$3" ]
}

scenario_producer_ids() {
  local pid1=424242001 pid2=424242002 info l pref dx pyid=("$PY" "$HERE/producer-ids.py")
  rm -f "$WORK/ho-src.json" "$WORK/ho-dst.json"
  step "producer-ids: source topic ho-pid; producers $pid1 and $pid2 write sequences 0-5 there (idempotent), mirrored by mho"
  "${ME2E[@]}" create-topics "$S" 1 3 ho-pid || { fail "create ho-pid"; return; }
  "${pyid[@]}" write "$S" ho-pid "$pid1" src1 "$WORK/ho-src.json" >"$WORK/ho-pid.out" 2>&1 &&
    "${pyid[@]}" write "$S" ho-pid "$pid2" src2 "$WORK/ho-src.json" >>"$WORK/ho-pid.out" 2>&1 ||
    { cat "$WORK/ho-pid.out"; fail "source writes of producers $pid1 and $pid2"; return; }
  ho_mirror_start ho-pid 1 || return

  step "producer-ids: failover of ho-pid (--stop --wait: STOPPED, MIRROR_PID_RESET written)"
  "$KM" --bootstrap-server "$D" --stop --mirror mho --topic ho-pid --wait --timeout-ms 60000 \
    >"$WORK/ho-stop.out" 2>&1 || { cat "$WORK/ho-stop.out"; fail "kafka-mirrors --stop --topic ho-pid"; return; }
  tail -n 3 "$WORK/ho-stop.out"
  info=$("${ME2E[@]}" part-info "$D" ho-pid 0) || { fail "metadata of ho-pid-0: $info"; return; }
  l=$(echo "$info" | cut -d' ' -f1)
  pref=$(echo "$info" | cut -d' ' -f2 | cut -d, -f1)
  dx=$(ho_other_brokers "$l")
  echo "destination ho-pid-0: leader replicas isr = $info"

  step "producer-ids: kill -9 destination broker $l (the leader); producer $pid1 writes from sequence 0 on the new leader"
  "$CL" kill "$l" --name "$DST" >/dev/null 2>&1 || { fail "kill destination broker $l"; return; }
  if until_ok 60 "ho-pid-0 led by another broker" ho_led_elsewhere ho-pid 0 "$l"; then
    if [ "$INJECT" = pid-state ]; then
      # The check must fail: producer $pid1 now has sequences 0-5 on the destination, as if the
      # mirrored producer state had survived, so its writes below are duplicates (acknowledged
      # with the earlier offsets, not stored).
      "${pyid[@]}" write "$dx" ho-pid "$pid1" inj "$WORK/ho-inj.json" >/dev/null 2>&1
      echo "INJECTED: producer $pid1 wrote sequences 0-5 on the destination first (the run must fail)"
    fi
    "${pyid[@]}" write "$dx" ho-pid "$pid1" dst1 "$WORK/ho-dst.json" ||
      fail "producer $pid1 on the new leader of ho-pid-0 (above)"
  fi

  step "producer-ids: broker $l restarted (log recovery after kill -9); the preferred replica $pref leads; producer $pid2 writes from sequence 0"
  "$CL" restart "$l" --wait --name "$DST" >"$WORK/ho-restart-$l.log" 2>&1 ||
    { cat "$WORK/ho-restart-$l.log"; fail "restart destination broker $l"; return; }
  until_ok 60 "broker $l back in the ISR of ho-pid-0" ho_in_isr ho-pid 0 "$l" || return
  until_ok 60 "the preferred replica $pref leads ho-pid-0 (ElectLeaders PREFERRED)" ho_leads ho-pid 0 "$pref" || return
  "${pyid[@]}" write "$D" ho-pid "$pid2" dst2 "$WORK/ho-dst.json" ||
    fail "producer $pid2 on the leader of ho-pid-0 (above)"

  step "producer-ids: every acknowledged record stored once (kafka-python), the mirrored ones kept, replicas equal"
  "${pyid[@]}" verify "$D" ho-pid "$WORK/ho-dst.json" >"$WORK/ho-verify.out" 2>&1 ||
    fail "acknowledged destination records missing (below)"
  grep -v '^ok ' "$WORK/ho-verify.out"
  "${pyid[@]}" verify "$D" ho-pid "$WORK/ho-src.json" >"$WORK/ho-verify-src.out" 2>&1 ||
    fail "mirrored source records missing on the destination (below)"
  grep -v '^ok ' "$WORK/ho-verify-src.out"
  until_ok 30 "the 3 destination replicas of ho-pid-0 identical" \
    "$CL" compare ho-pid 0 --same-end --name "$DST"
}
