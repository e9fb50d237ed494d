# shellcheck shell=bash
# scn_crash_stopping.sh -- scenario crash-stopping of tests/mirror_e2e/run.sh (sourced by it; uses
# its helpers and variables: S, D, CL, KM, CMP, PY, WORK, SRC, DST, INJECT, fail, step, until_ok).
# Needs nothing of the other scenarios: its own topics cs-0..cs-6 and mirror mcs. It restarts
# single destination brokers (never a whole cluster).
#
# For each STOPPING crash point in turn (KMIRROR_TEST_CRASH_POINT, test only, docs/plugin.md),
# on its own topic: the partition's preferred destination replica A is restarted with the point
# armed and made the leader (ElectLeaders), the topic is stopped, A dies at the point (abort()
# through the host's fatal hook), and is restarted unarmed: for the even points only after
# another replica took over (it finishes STOPPING), for the odd ones at once (A resumes itself). Then: STOPPED with the LME the log had before the stop, after it
# exactly the ABORT of the open transaction and one MIRROR_PID_RESET, no transaction open,
# LSO = HW = log end, a write taken, the 3 replicas byte-identical, the mirrored prefix still
# identical to the source's.

CS_POINTS=(drained lme_recorded epoch_bumped txns_aborted pid_reset persisted hw_passed)
# KM_E2E_CS_POINTS=pid_reset,persisted (environment): only those points (a quicker run by hand)
scenario_crash_stopping() {
  local CSPY=("$PY" "$HERE/crash-stopping.py") topics=() i t p a pid lme lme_e lme_o opid dirs
  local t0 e0 n0 f0
  for i in "${!CS_POINTS[@]}"; do topics+=("cs-$i"); done
  step "crash-stopping: ${#topics[@]} topics (1 partition, RF 3) on the source, each with a committed, an aborted and an open transaction"
  "${ME2E[@]}" create-topics "$S" 1 3 "${topics[@]}" || { fail "create source topics"; return; }
  "${CSPY[@]}" seed "$S" "${topics[@]}" || { fail "seed the source topics"; return; }

  step "crash-stopping: mirror mcs mirrors cs-.* (the open transactions included)"
  printf 'bootstrap.servers=%s\n' "$S" >"$WORK/mcs.properties"
  mirror_create mcs "$WORK/mcs.properties" || return
  "$KM" --bootstrap-server "$D" --start --mirror mcs --topic 'cs-.*' --wait --timeout-ms 90000 \
    >"$WORK/cs-start.out" 2>&1 || { cat "$WORK/cs-start.out"; fail "kafka-mirrors --start mcs"; return; }

  for i in "${!CS_POINTS[@]}"; do
    p=stopping.${CS_POINTS[$i]} t=cs-$i t0=$SECONDS f0=$FAILS
    [[ ",${KM_E2E_CS_POINTS:-${CS_POINTS[$i]}}," == *",${CS_POINTS[$i]},"* ]] || continue
    step "crash-stopping: $p on $t"
    a=$("${CSPY[@]}" preferred "$D" "$t") || { fail "$t: no metadata"; continue; }
    e0=$("${CSPY[@]}" epoch "$D" "$t") || { fail "$t: no metadata"; continue; }
    # A (the preferred replica) stopped (SIGTERM) and restarted with the point armed, then made
    # the leader (above the epoch it had), caught up and MIRRORING there
    cs_term "$a" || continue
    n0=$(cs_unfenced "$a")
    KMIRROR_TEST_CRASH_POINT=$p "$CL" restart "$a" --name "$DST" 2>/dev/null ||
      { fail "$t: restart node $a armed"; continue; }
    until_ok 60 "node $a registered and unfenced" cs_unfenced "$a" "$n0" || continue
    "${CSPY[@]}" lead "$D" "$t" "$a" "$e0" || { fail "$t: node $a does not lead"; continue; }
    until_ok 60 "$t MIRRORING on node $a, caught up with the source" \
      "${CSPY[@]}" mirroring "$KM" "$D" "$S" "$t" || continue
    # The LME to expect: the newest epoch and the end offset of the leader's log now
    lme=$("${CSPY[@]}" lme "$("$CL" partdir "$a" "$t" 0 --name "$DST")") || { fail "$t: $lme"; continue; }
    read -r lme_e lme_o <<<"$lme"
    opid=$("${CSPY[@]}" open-pid "$("$CL" partdir "$a" "$t" 0 --name "$DST")") ||
      { fail "$t before the stop: $opid"; continue; }
    echo "before the stop: $t-0 log ends at $lme_o, newest epoch $lme_e, open transaction of producer $opid"
    pid=$("$CL" pid "$a" --name "$DST")
    # The broker may die before it answers: the CLI's exit status does not matter here.
    "$KM" --bootstrap-server "$D" --stop --mirror mcs --topic "$t" >"$WORK/cs-stop-$i.out" 2>&1
    until_ok 60 "node $a (pid $pid) died at $p" cs_dead "$pid" || continue
    grep "TEST crash point" "$KPEER_HOME/$DST/node$a.log" | tail -1 >"$WORK/cs-crash-$i"
    grep -q "TEST crash point $p reached: $t-0 " "$WORK/cs-crash-$i" ||
      fail "$t: node $a's log does not show the crash at $p on $t: $(cat "$WORK/cs-crash-$i")"
    # Even points: the controller moves the leadership first (A's session expires, about 9 s) and
    # the new leader finishes STOPPING from the persisted step. Odd points: A is restarted at
    # once and, still the leader until then, resumes itself (a restarted kbroker leads from its
    # old metadata until it registers).
    if [ $((i % 2)) = 0 ]; then
      until_ok 60 "$t: the leadership moved off node $a" "${CSPY[@]}" moved "$D" "$t" "$a" || continue
    fi
    n0=$(cs_unfenced "$a")
    env -u KMIRROR_TEST_CRASH_POINT "$CL" restart "$a" --name "$DST" 2>/dev/null ||
      { fail "$t: restart node $a"; continue; }
    until_ok 60 "node $a registered and unfenced" cs_unfenced "$a" "$n0" || continue
    until_ok 90 "$t STOPPED, high watermark past the ABORT and the reset" \
      "${CSPY[@]}" wait-stopped "$KM" "$D" "$t" "$lme_o" || continue
    dirs=()
    for a in 1 2 3; do dirs+=("$("$CL" partdir "$a" "$t" 0 --name "$DST")"); done
    until_ok 60 "$t-0: the 3 destination replicas byte-identical (kc_replicacmp --same-end)" \
      "$CMP" --same-end "${dirs[@]}" || continue
    "${CSPY[@]}" check-stopped "$KM" "$D" "$t" "$lme_e" "$lme_o" "${dirs[0]}" "$opid" ||
      fail "$t: the failover after the crash at $p is not as expected (above)"
    until_ok 60 "$t-0: the 3 destination replicas byte-identical after the write" \
      "$CMP" --same-end "${dirs[@]}" || continue
    for a in 1 2 3; do dirs+=("$("$CL" partdir "$a" "$t" 0 --name "$SRC")"); done
    "$CMP" --upto "$lme_o" "${dirs[@]}" >"$WORK/cs-cmp-$i" 2>&1 ||
      fail "$t-0: below the LME offset $lme_o the destination differs from the source: $(tail -3 "$WORK/cs-cmp-$i")"
    [ "$FAILS" = "$f0" ] && echo "ok: $p on $t in $((SECONDS - t0))s"
  done
}
# cs_term NODE -- SIGTERM to a destination broker (a clean stop hands its leaderships over), wait
# until it is gone
cs_term() {
  local pid end=$((SECONDS + 60))
  pid=$("$CL" pid "$1" --name "$DST" 2>/dev/null) || return 0
  kill -TERM "$pid"
  while ! cs_dead "$pid"; do
    [ "$SECONDS" -lt "$end" ] || { fail "node $1 (pid $pid) still running 60 s after SIGTERM"; return 1; }
    sleep 0.1 # poll interval
  done
}
# cs_unfenced NODE [N] -- how often the node's log says it was unfenced; with N: true once more
# often than N. A restarted broker registers only when its earlier incarnation's session has
# expired (broker.session.timeout.ms); until then it may act on its old metadata.
cs_unfenced() {
  local n
  n=$(grep -c "unfenced by controller" "$KPEER_HOME/$DST/node$1.log")
  if [ $# -eq 1 ]; then echo "$n"; else [ "$n" -gt "$2" ]; fi
}
# cs_dead PID -- the broker process is gone (or a zombie: no command line any more)
cs_dead() { [ -z "$(tr -d '\0' <"/proc/$1/cmdline" 2>/dev/null)" ]; }
