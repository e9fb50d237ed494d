# shellcheck shell=bash
# scn_source_log_start.sh -- scenario source-log-start of tests/mirror_e2e/run.sh (sourced by it;
# uses its helpers and variables: S, D, CL, KM, CMP, PY, ME2E, WORK, SRC, DST, INJECT, fail, step,
# until_ok). Needs nothing from the other scenarios: its own topic ls-00 and mirror mls.
# docs/testing-mirror.md "Scenario source-log-start".
#
# The source's log start inside a batch (DeleteRecords to a mid-batch offset), once before the
# mirror starts (the destination starts out of range at 0) and once on a paused topic beyond the
# destination's end (resume -> out of range): the mirror restarts the destination log at the
# batch's base offset, and its log start offset (ListOffsets earliest) equals the source's.
LS_TOPIC=ls-00

ls_py() { "$PY" "$HERE/source-log-start.py" "$@"; }

# ls_cmp PARTITION BASE -- kc_replicacmp --same-end over the 3 source and 3 destination replicas
# (compared from the highest first batch: the destination's; the source keeps older segments),
# and every destination replica's first batch is at BASE (the batch holding the log start).
ls_cmp() {
  local p=$1 base=$2 dirs=() i out=$WORK/ls-cmp-$1.txt
  for i in 1 2 3; do dirs+=("$("$CL" partdir "$i" "$LS_TOPIC" "$p" --name "$SRC")"); done
  for i in 1 2 3; do dirs+=("$("$CL" partdir "$i" "$LS_TOPIC" "$p" --name "$DST")"); done
  "$CMP" --same-end "${dirs[@]}" >"$out" 2>&1 || { cat "$out"; return 1; }
  [ "$(grep -c "/$DST/.*, offsets $base\.\." "$out")" = 3 ] || {
    cat "$out"; echo "the 3 destination replicas do not start at the batch base $base"; return 1; }
  cat "$out"
}

scenario_source_log_start() {
  local t0=$SECONDS p
  step "source-log-start: $LS_TOPIC (2 partitions, RF 3): 3 batches of 10 records each; DeleteRecords to 15 and 25 (inside the batches at 10 and 20)"
  "${ME2E[@]}" create-topics "$S" 2 3 "$LS_TOPIC" || { fail "create $LS_TOPIC"; return; }
  for p in 0 1; do ls_py produce "$S" "$LS_TOPIC" "$p" 0 3 || { fail "produce $LS_TOPIC-$p"; return; }; done
  ls_py delete "$S" "$LS_TOPIC" 0 15 && ls_py delete "$S" "$LS_TOPIC" 1 25 ||
    { fail "DeleteRecords on the source"; return; }

  step "source-log-start: mirror mls, --start $LS_TOPIC (the destination starts out of range at 0)"
  printf 'bootstrap.servers=%s\n' "$S" >"$WORK/mls.properties"
  mirror_create mls "$WORK/mls.properties" || return
  "$KM" --bootstrap-server "$D" --start --mirror mls --topic "$LS_TOPIC" --wait --timeout-ms 60000 \
    >"$WORK/ls-start.out" 2>&1 || { cat "$WORK/ls-start.out"; fail "kafka-mirrors --start mls"; return; }
  until_ok 60 "$LS_TOPIC caught up (MIRRORING, lag 0)" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mls 2 "$LS_TOPIC" || return
  tail -1 "$WORK/last"
  if [ "$INJECT" = ls-start ]; then
    ls_py delete "$S" "$LS_TOPIC" 0 17 >/dev/null
    echo "INJECTED: the source's $LS_TOPIC-0 log start moved to 17 after the catch-up (the run must fail)"
  fi
  until_ok 60 "$LS_TOPIC-0: 6 replicas identical from the batch at 10" ls_cmp 0 10
  until_ok 60 "$LS_TOPIC-1: 6 replicas identical from the batch at 20" ls_cmp 1 20
  ls_py earliest "$S" "$D" "$LS_TOPIC" 0=15 1=25 || fail "ListOffsets earliest differs (see above)"
  echo "{\"$LS_TOPIC\": {\"uncommitted\": 20, \"committed\": 20}}" >"$WORK/ls-expect.json"
  "${ME2E[@]}" read-compare "$S" "$D" "$WORK/ls-expect.json" >"$WORK/ls-read.out" 2>&1 ||
    { fail "kafka-python read-back differs"; cat "$WORK/ls-read.out"; }
  echo "$(grep -c '^ok ' "$WORK/ls-read.out") read checks ok"

  step "source-log-start: --pause; 5 batches to $LS_TOPIC-0 (30..79), DeleteRecords to 65 (beyond the destination's end 30, inside the batch at 60); 2 batches to $LS_TOPIC-1"
  "$KM" --bootstrap-server "$D" --pause --mirror mls --topic "$LS_TOPIC" --wait --timeout-ms 60000 \
    >"$WORK/ls-pause.out" 2>&1 || { cat "$WORK/ls-pause.out"; fail "kafka-mirrors --pause mls"; return; }
  ls_py produce "$S" "$LS_TOPIC" 0 30 5 && ls_py produce "$S" "$LS_TOPIC" 1 30 2 ||
    { fail "produce while paused"; return; }
  ls_py delete "$S" "$LS_TOPIC" 0 65 || { fail "DeleteRecords to 65"; return; }
  "$KM" --bootstrap-server "$D" --resume --mirror mls --topic "$LS_TOPIC" --wait --timeout-ms 60000 \
    >"$WORK/ls-resume.out" 2>&1 || { cat "$WORK/ls-resume.out"; fail "kafka-mirrors --resume mls"; return; }
  until_ok 60 "$LS_TOPIC caught up after the resume (out of range, then MIRRORING, lag 0)" \
    "${ME2E[@]}" caught-up "$KM" "$D" "$S" mls 2 "$LS_TOPIC" || return
  tail -1 "$WORK/last"
  until_ok 60 "$LS_TOPIC-0: 6 replicas identical from the batch at 60" ls_cmp 0 60
  until_ok 60 "$LS_TOPIC-1: 6 replicas identical from the batch at 20" ls_cmp 1 20
  ls_py earliest "$S" "$D" "$LS_TOPIC" 0=65 1=25 || fail "ListOffsets earliest differs after the resume"
  echo "{\"$LS_TOPIC\": {\"uncommitted\": 40, \"committed\": 40}}" >"$WORK/ls-expect.json"
  "${ME2E[@]}" read-compare "$S" "$D" "$WORK/ls-expect.json" >"$WORK/ls-read.out" 2>&1 ||
    { fail "kafka-python read-back differs after the resume"; cat "$WORK/ls-read.out"; }
  echo "$(grep -c '^ok ' "$WORK/ls-read.out") read checks ok"
  echo "source-log-start: $((SECONDS - t0))s"
}
