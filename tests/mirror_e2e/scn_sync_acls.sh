# shellcheck shell=bash
# scn_sync_acls.sh -- scenario sync-acls of tests/mirror_e2e/run.sh (sourced by it; uses its
# helpers and variables: S, D, CL, KM, PY, WORK, DST, BUILD, INJECT, fail, step, until_ok,
# mirror_create, mirror_unlisted). Issue 6 "ACLs added and removed on the source appear and
# disappear on the destination; a destination-only ACL survives" (docs/testing-mirror.md).
#
# Its own 1-broker source with an authorizer (the shared source has none, so every other
# mirror's ACL sync skips quietly and never sees these bindings), mirror msa with a 1 s ACL
# interval and acls.include limited to TOPIC sa-.* and GROUP sa-group.* READ. Independent of
# the other scenarios; leaves no binding, mirror or process behind.
#   --inject sa-own  'pre' is not created on the destination before the mirror: the sync
#                    creates and owns it, so the source's delete removes it (must FAIL)
#   --inject sa-all  acls.include=* : the bindings outside the rules are synced (must FAIL)

# The source node's pid file lives outside $WORK (which run.sh empties at its start), so that a
# node an aborted run left behind is stopped by the next run.
SA_PIDFILE=$KPEER_HOME/mirror-e2e-sa-src.pid
sa_src_stop() { solo_stop "$SA_PIDFILE" sa-src; }

# sa_term I -- SIGTERM destination node I (a clean stop) and wait until it is gone
sa_term() {
  local pid
  pid=$("$CL" pid "$1" --name "$DST") || return 1
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done # until gone
  fail "destination node $1 did not stop within 30 s of SIGTERM"
  return 1
}

# sa_runs_ge N -- the ACL kind of msa finished at least N runs (destination /metrics, summed)
sa_runs_ge() {
  local runs errs
  read -r runs errs < <(sa_runs)
  echo "msa ACL sync runs: $runs (errors $errs), want >= $1"
  [ "$runs" -ge "$1" ]
}
# sa_runs -- "runs errors" now ("0 -1" when the counters cannot be read)
sa_runs() {
  local runs errs
  read -r runs errs < <("${SA[@]}" count "$KPEER_HOME/$DST/node*.log" msa 2>/dev/null)
  [[ "$runs $errs" =~ ^[0-9]+\ [0-9]+$ ]] && echo "$runs $errs" || echo "0 -1"
}

# sa_cleanup SRC_PORT DST_BROKER -- leave nothing behind: the source's bindings deleted and
# synced away, mirror msa deleted, the destination's bindings deleted, the source stopped
sa_cleanup() {
  step "sync-acls: cleanup (source bindings deleted and synced away, mirror msa deleted, destination bindings deleted)"
  "${SA[@]}" cleanup "127.0.0.1:$1" a-read a-write g-read p-describe outside g-describe pre ||
    fail "DeleteAcls on the source (cleanup)"
  until_ok 30 "a-read and g-read disappear on the destination" \
    "${SA[@]}" expect "$D" -a-read -g-read
  "$KM" --bootstrap-server "$D" --delete --mirror msa >"$WORK/sa-delete.out" 2>&1 ||
    fail "kafka-mirrors --delete --mirror msa: $(cat "$WORK/sa-delete.out")"
  until_ok 30 "no destination broker lists msa" mirror_unlisted msa
  # whatever is left (after a failure too): DeleteAcls of a binding that is not there is fine
  "${SA[@]}" cleanup "$2" a-read a-write g-read p-describe outside g-describe dst-only pre ||
    fail "DeleteAcls on the destination (cleanup)"
  until_ok 30 "no scenario binding left on the destination" \
    "${SA[@]}" expect "$D" -a-read -a-write -g-read -p-describe -outside -g-describe -dst-only -pre
  sa_src_stop
}

scenario_sync_acls() {
  local t0=$SECONDS q d1 r e c include='TOPIC;sa-.*,GROUP;sa-group.*;READ'
  SA=("$PY" "$HERE/sync-acls.py")
  d1=${D%%,*}

  step "sync-acls: a 1-broker source of its own with an authorizer; destination-only bindings"
  sa_src_stop # one an aborted run left behind
  q=$(solo_port $((SRC_PORT + 120)))
  solo_start "$WORK/sa-src" "$(solo_cluster_id C)" "$q" "$SA_PIDFILE" \
    authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer \
    allow.everyone.if.no.acl.found=true
  until_ok 30 "the ACL source answers DescribeAcls" "${SA[@]}" expect "127.0.0.1:$q" -pre ||
    { sa_src_stop; return; }
  if [ "$INJECT" = sa-own ]; then
    echo "INJECTED: 'pre' is not created on the destination first (the run must fail)"
    "${SA[@]}" create "$d1" dst-only || fail "CreateAcls on the destination"
  else
    "${SA[@]}" create "$d1" dst-only pre || fail "CreateAcls on the destination"
  fi
  until_ok 30 "every destination broker holds the destination-only bindings" \
    "${SA[@]}" expect "$D" +dst-only || { sa_src_stop; return; }

  step "sync-acls: 7 bindings on the source (5 selected by acls.include), mirror msa (ACLs every 1 s)"
  "${SA[@]}" create "127.0.0.1:$q" a-read a-write g-read p-describe outside g-describe pre ||
    fail "CreateAcls on the source"
  if [ "$INJECT" = sa-all ]; then
    include='*'
    echo "INJECTED: acls.include=* (the run must fail)"
  fi
  # A rule with a typo is refused at creation, naming it (design M89): by kafka-mirrors (it
  # checks with the same tables) and by the broker (a raw CreateMirror)
  printf 'bootstrap.servers=127.0.0.1:%s\nacls.include=TOPIC;sa-.*,TOPICS;sa-.*\n' "$q" \
    >"$WORK/msa-bad.properties"
  if "$KM" --bootstrap-server "$D" --create --mirror msa-bad --mirror-config \
    "$WORK/msa-bad.properties" >"$WORK/sa-bad.out" 2>&1; then
    fail "kafka-mirrors --create with acls.include rule 'TOPICS;sa-.*' accepted"
    "$KM" --bootstrap-server "$D" --delete --mirror msa-bad >/dev/null 2>&1
  elif grep -qF "rule 'TOPICS;sa-.*'" "$WORK/sa-bad.out"; then
    echo "ok: kafka-mirrors --create refuses the bad rule: $(head -1 "$WORK/sa-bad.out")"
  else
    fail "kafka-mirrors --create with a bad acls.include rule: $(cat "$WORK/sa-bad.out")"
  fi
  read -r r e < <("${SA[@]}" create-mirror "$d1" msa-bad "bootstrap.servers=127.0.0.1:$q" \
    'acls.include=TOPIC;sa-.*,TOPICS;sa-.*' 2>&1)
  if [ "$r" = 40 ] && [[ "$e" == *"rule 'TOPICS;sa-.*'"* ]]; then
    echo "ok: the broker refuses it too: INVALID_CONFIG $e"
  else
    fail "raw CreateMirror with a bad acls.include rule: $r $e (want 40 INVALID_CONFIG naming the rule)"
    [ "$r" = 0 ] && "$KM" --bootstrap-server "$D" --delete --mirror msa-bad >/dev/null 2>&1
  fi
  printf 'bootstrap.servers=127.0.0.1:%s\nsync.acls.interval.ms=1000\nacls.include=%s\n' \
    "$q" "$include" >"$WORK/msa.properties"
  mirror_create msa "$WORK/msa.properties" || { sa_src_stop; return; }
  if ! until_ok 30 "the selected source bindings appear on every destination broker, the others do not" \
    "${SA[@]}" expect "$D" +a-read +a-write +g-read +p-describe +pre +dst-only -outside -g-describe; then
    sa_cleanup "$q" "$d1"
    return
  fi
  cat "$WORK/last"
  read -r r e < <(sa_runs)
  until_ok 20 "three more ACL sync runs of msa" sa_runs_ge $((r + 3))
  if "${SA[@]}" expect "$D" +a-read +a-write +g-read +p-describe +pre +dst-only -outside \
    -g-describe >"$WORK/sa.out" 2>&1; then
    echo "ok: unchanged after three more runs (destination-only kept, outside bindings never synced)"
  else
    fail "after three more ACL sync runs: $(cat "$WORK/sa.out")"
  fi

  # The memory must outlive its broker: restart the coordinator (clean, as an upgrade would);
  # the deletes below are then decided from SYNCED_ACLS as read back from __mirror_state.
  c=$("${SA[@]}" coordinator "$D" msa)
  if [[ "$c" =~ ^[0-9]+$ ]]; then
    step "sync-acls: restart msa's coordinator, broker $c (SYNCED_ACLS read back by it or its successor)"
    sa_term "$c"
    "$CL" restart "$c" --name "$DST" --wait >"$WORK/sa-restart.out" 2>&1 ||
      fail "restart of destination broker $c: $(tail -3 "$WORK/sa-restart.out")"
  else
    fail "msa's coordinator not found: $c"
  fi

  step "sync-acls: delete a-write, p-describe and pre on the source"
  "${SA[@]}" delete "127.0.0.1:$q" a-write p-describe pre || fail "DeleteAcls on the source"
  until_ok 30 "a-write and p-describe disappear on every destination broker; the others stay" \
    "${SA[@]}" expect "$D" -a-write -p-describe +a-read +g-read +dst-only -outside -g-describe
  read -r r e < <(sa_runs)
  until_ok 20 "three more ACL sync runs of msa" sa_runs_ge $((r + 3))
  if "${SA[@]}" expect "$D" -a-write -p-describe +a-read +g-read +dst-only +pre -outside \
    -g-describe >"$WORK/sa.out" 2>&1; then
    echo "ok: after three more runs: dst-only and pre (on the destination before the sync saw it) kept, a-read and g-read kept"
  else
    fail "after the source's deletes and three more runs: $(cat "$WORK/sa.out")"
  fi
  read -r r e < <(sa_runs)
  [ "${e:-1}" = 0 ] && echo "ok: no ACL sync errors for msa ($r runs)" ||
    fail "msa's ACL sync counted ${e:-?} errors ($r runs): $(grep -h 'acls sync' "$KPEER_HOME/$DST"/node*.log | tail -3)"

  sa_cleanup "$q" "$d1"
  echo "sync-acls: $((SECONDS - t0))s"
}
