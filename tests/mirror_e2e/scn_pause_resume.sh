# shellcheck shell=bash
# scn_pause_resume.sh -- scenario pause-resume of tests/mirror_e2e/run.sh (sourced by it; uses its helpers and
# variables: S, D, CL, KM, CMP, PY, ME2E, WORK, SRC, DST, fail, step, until_ok, cmp_topics).

scenario_pause_resume() {
  local before after rc cid
  step "pause-resume: --pause id-01 (id-02 keeps running), produce to both on the source"
  "$KM" --bootstrap-server "$D" --pause --mirror m1 --topic id-01 --wait --timeout-ms 60000 \
    >"$WORK/pause.out" 2>&1 || { cat "$WORK/pause.out"; fail "kafka-mirrors --pause --wait"; return; }
  tail -n 5 "$WORK/pause.out"
  "${ME2E[@]}" ends "$D" id-01 >"$WORK/ends-before"
  seq 1 400 | sed 's/.*/p&:paused &/' | timeout 60 kcat -b "$S" -P -t id-01 -K: -z lz4 || fail "produce id-01"
  seq 1 400 | sed 's/.*/p&:running &/' | timeout 60 kcat -b "$S" -P -t id-02 -K: -z zstd || fail "produce id-02"
  # The running topic catching up shows the fetchers work meanwhile; the paused one must not move.
  until_ok 60 "id-02 (running) caught up with the source" cmp_topics_quiet id-02 || return
  "${ME2E[@]}" ends "$D" id-01 >"$WORK/ends-after"
  if cmp -s "$WORK/ends-before" "$WORK/ends-after"; then
    echo "ok: paused id-01 did not move on the destination ($(tr '\n' ' ' <"$WORK/ends-after"))"
  else
    fail "paused id-01 moved: before $(tr '\n' ' ' <"$WORK/ends-before"), after $(tr '\n' ' ' <"$WORK/ends-after")"
  fi
  read -r rc _ < <("${ME2E[@]}" produce-one "$D" id-01 0)
  [ "$rc" = 147 ] && echo "ok: a paused mirror topic is still read-only (Produce: 147)" ||
    fail "Produce to paused id-01: error code $rc, want READ_ONLY_TOPIC 147"
  "$KM" --bootstrap-server "$D" --delete --mirror m1 >"$WORK/delete.out" 2>&1
  rc=$?
  if [ "$rc" = 1 ] && grep -q CLUSTER_MIRROR_NOT_EMPTY "$WORK/delete.out"; then
    echo "ok: --delete refused while topics are not stopped: $(head -1 "$WORK/delete.out")"
  else
    fail "--delete while running: exit $rc, want 1 with CLUSTER_MIRROR_NOT_EMPTY: $(cat "$WORK/delete.out")"
  fi
  cid=$(sed -n 's/^CLUSTER_ID=//p' "$KPEER_HOME/$SRC/harness.env")
  if "$KM" --bootstrap-server "$D" --list | grep -qE "^m1 +10 +$cid "; then
    echo "ok: --list shows m1 with 10 topics and the source's cluster id $cid"
  else
    fail "--list does not show m1 with 10 topics and source cluster id $cid: $("$KM" --bootstrap-server "$D" --list)"
  fi
  step "pause-resume: --resume id-01: it continues from its log end to the source's"
  "$KM" --bootstrap-server "$D" --resume --mirror m1 --topic id-01 --wait --timeout-ms 60000 \
    >"$WORK/resume.out" 2>&1 || { cat "$WORK/resume.out"; fail "kafka-mirrors --resume --wait"; return; }
  tail -n 5 "$WORK/resume.out"
  until_ok 120 "40 partitions caught up after the resume" "${ME2E[@]}" caught-up "$KM" "$D" "$S" m1 40 || return
  cmp_topics id-01 id-02
}
cmp_topics_quiet() { cmp_partition "$1" 0 && cmp_partition "$1" 1 && cmp_partition "$1" 2 && cmp_partition "$1" 3; }
