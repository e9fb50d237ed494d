# shellcheck shell=bash
# scn_sync_coordinator.sh -- scenario sync-coordinator of tests/mirror_e2e/run.sh (sourced by it;
# uses its helpers and variables: S, D, CL, KM, PY, ME2E, WORK, DST, fail, step, until_ok,
# mirror_create). Own topic sc-00 and mirror msc (1 s sync intervals); needs no other scenario.
#
# The metadata sync runs on the mirror's coordinator (the leader of the __mirror_state partition of
# the mirror name, design M73). The coordinator syncs topic configs; it is killed with SIGKILL;
# another broker must take the sync over (a config changed on the source afterwards arrives) with
# the persisted memory (SYNCED_TOPIC_CONFIGS): a key the old coordinator synced and the source
# then deletes is reset on the destination by the new one. --describe (through a broker that is
# not the coordinator: the fan-out merge) shows the sync status before and after. The killed
# broker is restarted and back in every ISR. Last, the final sync before a stop: a config changed
# on the source just before --stop arrives although mirror mscf syncs configs only every 10 min.

SC_PY=("$PY" "$HERE/sync-coordinator.py")
SC_LM=("$PY" "$HERE/leader_moves.py")

# sc_other_node NODE -- a destination broker other than NODE (the first); sc_other NODE -- its
# address (node i is the i-th of $D)
sc_other_node() {
  local i
  for i in 1 2 3; do [ "$i" = "$1" ] || { echo "$i"; return; }; done
}
sc_other() { cut -d, -f"$(sc_other_node "$1")" <<<"$D"; }

scenario_sync_coordinator() {
  local coord caddr other newc victim runs errs okts rc=0
  step "sync-coordinator: source topic sc-00 (2 partitions, RF 3); mirror msc (1 s sync intervals) started on it"
  "${ME2E[@]}" create-topics "$S" 2 3 sc-00 || { fail "create sc-00"; return; }
  seq 1 10 | sed 's/.*/k&:sc &/' | timeout 60 kcat -b "$S" -P -t sc-00 -K: || fail "produce sc-00"
  printf 'bootstrap.servers=%s\nsync.topic.configs.interval.ms=1000\nsync.group.offsets.interval.ms=1000\nsync.acls.interval.ms=1000\n' \
    "$S" >"$WORK/msc.properties"
  mirror_create msc "$WORK/msc.properties" || return
  "$KM" --bootstrap-server "$D" --start --mirror msc --topic sc-00 --wait --timeout-ms 60000 \
    >"$WORK/sc-start.out" 2>&1 || { cat "$WORK/sc-start.out"; fail "kafka-mirrors --start --mirror msc"; return; }
  until_ok 60 "sc-00 mirrored by msc and caught up" "${ME2E[@]}" caught-up "$KM" "$D" "$S" msc 2 sc-00 || return
  until_ok 30 "msc's coordinator located (leader of its __mirror_state partition)" \
    "${SC_PY[@]}" coordinator "$D" msc || return
  read -r coord caddr <"$WORK/last"
  other=$(sc_other "$coord")
  echo "coordinator of msc: broker $coord ($caddr); describing through $other"

  step "sync-coordinator: retention.ms and max.message.bytes set on the source reach the destination"
  "${SC_PY[@]}" alter "$S" sc-00 retention.ms=3600001 max.message.bytes=1048001 ||
    { fail "IncrementalAlterConfigs on the source"; return; }
  until_ok 30 "the destination's sc-00 has retention.ms=3600001 and max.message.bytes=1048001" \
    "${SC_PY[@]}" configs-are "$other" sc-00 retention.ms=3600001 max.message.bytes=1048001 || return
  until_ok 30 "--describe through broker $other shows the sync status (configs: runs, last sync)" \
    "${SC_PY[@]}" sync-status "$KM" "$other" msc 1 || rc=1
  tail -2 "$WORK/last"

  # The metrics, summed over the three brokers (only the coordinator runs, docs/plugin.md
  # "Status"): configs runs counted, no failed item, a last-success time.
  read -r runs errs okts <<<"$("$PY" "$HERE/failback.py" metrics "$KPEER_HOME/$DST/node[123].log" \
    '^kmirror_sync_runs_total\{(?=[^}]*mirror="msc")(?=[^}]*kind="configs")' \
    '^kmirror_sync_errors_total\{(?=[^}]*mirror="msc")(?=[^}]*kind="configs")' \
    '^kmirror_sync_last_success_timestamp_seconds\{(?=[^}]*mirror="msc")(?=[^}]*kind="configs")')"
  if [ "${runs:-0}" -gt 0 ] && [ "${errs:-1}" = 0 ] && [ "${okts:-0}" -gt 0 ]; then
    echo "ok: kmirror_sync_runs_total{msc,configs} $runs, kmirror_sync_errors_total 0, last success at $okts s"
  else
    fail "sync metrics of msc/configs: runs ${runs:-?}, errors ${errs:-?}, last success ${okts:-?} (want > 0, 0, > 0)"
  fi
  victim=$coord
  # --inject sc-wrong-kill: a broker that is not the coordinator dies instead; the takeover
  # check below must FAIL (the coordinator stays).
  [ "$INJECT" = sc-wrong-kill ] && victim=$(sc_other_node "$coord")
  step "sync-coordinator: kill -9 the coordinator (broker $victim); on the source max.message.bytes is deleted, retention.ms changed"
  "$CL" kill "$victim" --name "$DST" 2>&1 | tail -1
  "${SC_PY[@]}" alter "$S" sc-00 -max.message.bytes retention.ms=3600002 ||
    fail "IncrementalAlterConfigs on the source"
  if until_ok 60 "another broker coordinates msc" sc_new_coordinator "$coord" "$victim"; then
    read -r newc _ <"$WORK/last"
    echo "new coordinator: broker $newc"
    until_ok 45 "the new coordinator synced retention.ms=3600002 and reset max.message.bytes (synced by the old one, deleted on the source)" \
      "${SC_PY[@]}" configs-are "$other" sc-00 retention.ms=3600002 -max.message.bytes || rc=1
    [ "$rc" = 0 ] && tail -2 "$WORK/last"
    until_ok 30 "--describe through broker $other shows the new coordinator's sync status" \
      "${SC_PY[@]}" sync-status "$KM" "$other" msc 1 && tail -2 "$WORK/last"
  fi

  step "sync-coordinator: restart broker $victim"
  "$CL" restart "$victim" --wait --name "$DST" >"$WORK/sc-restart.log" 2>&1 ||
    { cat "$WORK/sc-restart.log"; fail "restart destination broker $victim"; return; }
  until_ok 120 "broker $victim back in every ISR of sc-00 and __mirror_state" \
    "${SC_LM[@]}" isr-full "$D" 3 sc-00 || return
  sc_final_sync
}

# sc_new_coordinator OLD KILLED -- the coordinator of msc is a live broker other than OLD (asked
# through a broker that is neither OLD nor KILLED); prints "node addr"
sc_new_coordinator() {
  local n a i ask=
  for i in 1 2 3; do [ "$i" = "$1" ] || [ "$i" = "$2" ] || { ask=$(cut -d, -f"$i" <<<"$D"); break; }; done
  "${SC_PY[@]}" coordinator "$ask" msc >"$WORK/sc-coord" || { cat "$WORK/sc-coord"; return 1; }
  read -r n a <"$WORK/sc-coord"
  cat "$WORK/sc-coord"
  [ "$n" != "$1" ]
}

# sc_final_sync -- StopMirrorTopics runs a last config sync before the topic stops (design M74).
# Mirror mscf syncs configs every 10 minutes only, so after its first run (at the start) nothing
# but the final sync can bring a change over within the check's 15 s.
# --inject sc-no-final: mscf gets stop.sync.timeout.ms=0 (the final sync is cut at once); the
# check must FAIL.
sc_final_sync() {
  local tmo=10000
  [ "$INJECT" = sc-no-final ] && tmo=0
  step "sync-coordinator: final sync before a stop (mirror mscf, configs every 10 min, topic sc-01)"
  "${ME2E[@]}" create-topics "$S" 1 3 sc-01 || { fail "create sc-01"; return 1; }
  printf 'bootstrap.servers=%s\nsync.topic.configs.interval.ms=600000\nsync.group.offsets.interval.ms=0\nsync.acls.interval.ms=0\nstop.sync.timeout.ms=%s\n' \
    "$S" "$tmo" >"$WORK/mscf.properties"
  mirror_create mscf "$WORK/mscf.properties" || return 1
  "$KM" --bootstrap-server "$D" --start --mirror mscf --topic sc-01 --wait --timeout-ms 60000 \
    >"$WORK/scf-start.out" 2>&1 || { cat "$WORK/scf-start.out"; fail "kafka-mirrors --start --mirror mscf"; return 1; }
  until_ok 30 "mscf's first config sync ran (the start's kick)" \
    "${SC_PY[@]}" sync-status "$KM" "$D" mscf 1 || return 1
  "${SC_PY[@]}" alter "$S" sc-01 retention.ms=7200001 || { fail "IncrementalAlterConfigs on the source"; return 1; }
  "$KM" --bootstrap-server "$D" --stop --mirror mscf --topic sc-01 >"$WORK/scf-stop.out" 2>&1 ||
    { cat "$WORK/scf-stop.out"; fail "kafka-mirrors --stop --mirror mscf --topic sc-01"; return 1; }
  until_ok 15 "retention.ms=7200001 on the destination's sc-01 after --stop (the final sync)" \
    "${SC_PY[@]}" configs-are "$(cut -d, -f1 <<<"$D")" sc-01 retention.ms=7200001 || return 1
  tail -1 "$WORK/last"
}
