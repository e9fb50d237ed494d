# shellcheck shell=bash
# scn_read_only_noplugin.sh -- scenario read-only-noplugin of tests/mirror_e2e/run.sh (sourced by
# it; uses its helpers and variables: S, D, CL, KM, CMP, PY, ME2E, WORK, SRC, DST, fail, step,
# until_ok, cmp_partition). Own topic ho-ro and mirror mho (created if missing); needs no other
# scenario. The ho_* helpers are shared with scn_producer_ids.sh.

# ho_mirror_start TOPIC NPARTS -- mirror mho (created on first use) started on TOPIC, caught up
ho_mirror_start() {
  local t=$1 n=$2
  if ! "$KM" --bootstrap-server "$D" --list 2>/dev/null | grep -q '^mho '; then
    printf 'bootstrap.servers=%s\n' "$S" >"$WORK/mho.properties"
    mirror_create mho "$WORK/mho.properties" || return 1
  fi
  until_ok 30 "every destination broker lists mirror mho" mirror_listed mho || return 1
  "$KM" --bootstrap-server "$D" --start --mirror mho --topic "$t" --wait --timeout-ms 60000 \
    >"$WORK/ho-start-$t.out" 2>&1 || { cat "$WORK/ho-start-$t.out"; fail "kafka-mirrors --start --mirror mho --topic $t"; return 1; }
  until_ok 60 "$t mirrored by mho and caught up" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mho "$n" "$t"
}
# ho_in_isr TOPIC PART NODE -- NODE is in the destination partition's ISR
ho_in_isr() {
  local info
  info=$("${ME2E[@]}" part-info "$D" "$1" "$2") || { echo "$info"; return 1; }
  echo "leader replicas isr: $info"
  [[ ",$(echo "$info" | cut -d' ' -f3)," == *",$3,"* ]]
}
# ho_addr NODE -- destination broker NODE's address (node i is the i-th of $D)
ho_addr() { echo "$D" | cut -d, -f"$1"; }
# ho_leads TOPIC PART NODE -- ElectLeaders PREFERRED (NODE is the preferred replica), then NODE
# leads the destination partition in the Metadata of the first broker and of NODE itself (each
# broker applies the change from the metadata log in its own time)
ho_leads() {
  "${ME2E[@]}" elect-preferred "$D" "$1" "$2" || return 1
  [ "$("${ME2E[@]}" part-info "$D" "$1" "$2" | cut -d' ' -f1)" = "$3" ] &&
    [ "$("${ME2E[@]}" part-info "$(ho_addr "$3")" "$1" "$2" | cut -d' ' -f1)" = "$3" ]
}
# ho_restart NODE on|off -- kill destination broker NODE and start it again with (on) or without
# (off) its plugin.paths line (the properties file is kept aside and put back for on); sets
# HO_LOADED to the number of plugins the node's log says it loaded since this start
ho_restart() {
  local n=$1 f="$KPEER_HOME/$DST/node$1.properties"
  "$CL" kill "$n" --name "$DST" >/dev/null 2>&1 || { fail "kill destination broker $n"; return 1; }
  if [ "$2" = off ]; then
    cp "$f" "$f.ho-saved" && sed -i '/^plugin\.paths=/d' "$f"
  elif [ -f "$f.ho-saved" ]; then
    mv "$f.ho-saved" "$f"
  fi
  "$CL" restart "$n" --wait --name "$DST" >"$WORK/ho-restart-$n.log" 2>&1 ||
    { cat "$WORK/ho-restart-$n.log"; fail "restart destination broker $n ($2)"; return 1; }
  HO_LOADED=$(awk '/^----- start/ { n = 0 } /plugin kmirror .* loaded from/ { n++ } END { print n + 0 }' \
    "$KPEER_HOME/$DST/node$n.log")
}

scenario_read_only_noplugin() {
  local p0 info rc msg
  step "read-only-noplugin: source topic ho-ro (2 partitions, 20 records), mirrored by mho"
  "${ME2E[@]}" create-topics "$S" 2 3 ho-ro || { fail "create ho-ro"; return; }
  seq 1 20 | sed 's/.*/k&:ho-ro &/' | timeout 60 kcat -b "$S" -P -t ho-ro -K: || fail "produce ho-ro"
  ho_mirror_start ho-ro 2 || return
  info=$("${ME2E[@]}" part-info "$D" ho-ro 0) || { fail "metadata of ho-ro-0: $info"; return; }
  p0=$(echo "$info" | cut -d' ' -f2 | cut -d, -f1)
  echo "destination ho-ro-0: leader replicas isr = $info; preferred replica $p0"

  step "read-only-noplugin: restart destination broker $p0 without plugin.paths; make it lead ho-ro-0"
  ho_restart "$p0" off || return
  [ "$HO_LOADED" = 0 ] && echo "ok: broker $p0 runs without kmirror.so (no 'loaded' line since its start)" ||
    fail "broker $p0 still loaded the plugin ($HO_LOADED 'loaded' lines since its start)"
  # From here on broker $p0 runs without the plugin: no early return before it is restored.
  if until_ok 60 "broker $p0 back in the ISR of ho-ro-0" ho_in_isr ho-ro 0 "$p0" &&
    until_ok 60 "broker $p0 (no plugin) leads ho-ro-0 (ElectLeaders PREFERRED)" ho_leads ho-ro 0 "$p0"; then
    step "read-only-noplugin: raw Produce and DeleteRecords to ho-ro-0 on broker $p0 (no plugin)"
    "$PY" "$HERE/read-only-noplugin.py" "$(ho_addr "$p0")" ho-ro 0 "$p0" >"$WORK/ho-ro.out" 2>&1 ||
      fail "read-only-noplugin wire checks (below)"
    cat "$WORK/ho-ro.out"
    until_ok 30 "ho-ro-0: the 3 destination replicas still equal the 3 source replicas (nothing appended)" \
      cmp_partition ho-ro 0
  fi

  step "read-only-noplugin: restore broker $p0 with the plugin; it leads ho-ro-0 and mirrors again"
  ho_restart "$p0" on || return
  [ "$HO_LOADED" -ge 1 ] && echo "ok: broker $p0 loaded kmirror.so again" ||
    fail "broker $p0 did not load the plugin after the restore"
  until_ok 60 "broker $p0 back in the ISR of ho-ro-0" ho_in_isr ho-ro 0 "$p0" || return
  until_ok 60 "broker $p0 (with the plugin) leads ho-ro-0 again" ho_leads ho-ro 0 "$p0" || return
  seq 21 30 | sed 's/.*/k&:ho-ro &/' | timeout 60 kcat -b "$S" -P -t ho-ro -K: || fail "produce ho-ro"
  until_ok 60 "ho-ro caught up again (MIRRORING, log ends = the source's)" \
    "${ME2E[@]}" caught-up "$KM" "$D" "$S" mho 2 ho-ro || return
  read -r rc msg < <("${ME2E[@]}" produce-one "$D" ho-ro 0)
  [ "$rc" = 147 ] && echo "ok: ho-ro-0 with the plugin back: Produce answers 147 ($msg)" ||
    fail "Produce to ho-ro-0 after the restore: $rc $msg, want READ_ONLY_TOPIC 147"
  until_ok 30 "ho-ro-0 and ho-ro-1 byte-identical on the 6 replicas" ho_cmp_ro
}
ho_cmp_ro() { cmp_partition ho-ro 0 && cmp_partition ho-ro 1; }
