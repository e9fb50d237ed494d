# shellcheck shell=bash
# scn_source_dead.sh -- scenario source-dead of tests/mirror_e2e/run.sh (sourced by it; uses its
# helpers and variables: S, D, CL, KM, PY, ME2E, WORK, SRC, fail, step, until_ok; and
# mirror_create, mirror_unlisted). Its own topics fo-hung, fo-dead and mirror
# mfo2.
#
# Failover with the source dead (docs/testing-mirror.md "Scenario source-dead"): every source node
# is first frozen (SIGSTOP: connections stay open, nothing answers) and fo-hung is stopped, then
# every node is killed (SIGKILL) and fo-dead is stopped. Each kafka-mirrors --stop --wait must
# complete, the partitions be STOPPED with their LME (the log ends before the source went away)
# and take writes. It kills the source, so it runs last; the source is restarted at the end (its
# data kept) for a later run.

# source_dead_stop TOPIC -- --stop --wait, then STOPPED with LME = the log ends in
# $w/ends-TOPIC, then 100 records written by kcat (acks=all) land (+1 offset each for the resets)
source_dead_stop() {
  local t=$1 rc t0 before after
  t0=$SECONDS
  "$KM" --bootstrap-server "$D" --stop --mirror mfo2 --topic "$t" --wait --timeout-ms 60000 \
    >"$w/stop-$t.out" 2>&1
  rc=$?
  tail -n 3 "$w/stop-$t.out"
  if [ "$rc" = 0 ]; then
    echo "ok: --stop --topic $t --wait completed in $((SECONDS - t0))s"
  else
    fail "kafka-mirrors --stop --topic $t --wait: exit $rc after $((SECONDS - t0))s"
    "$KM" --bootstrap-server "$D" --describe --mirror mfo2 | sed 's/^/  /'
  fi
  "$KM" --bootstrap-server "$D" --describe --mirror mfo2 --json >"$w/describe-$t.json" 2>&1
  # STOPPED without an error, and the LME offset is the log end from before (nothing could be
  # fetched since)
  "$PY" - "$w/describe-$t.json" "$w/ends-$t" "$t" <<'EOF' || fail "source-dead: $t: state or LME wrong (above)"
import json, sys
doc = json.load(open(sys.argv[1]))
ends = dict(l.split() for l in open(sys.argv[2]))
parts = [p for m in doc["mirrors"] if m["mirror"] == "mfo2" for p in m["partitions"]
         if p["topic"] == sys.argv[3]]
bad = 0
for p in sorted(parts, key=lambda p: p["partition"]):
    want = int(ends["%s-%d" % (sys.argv[3], p["partition"])])
    ok = (p["state"] == "STOPPED" and p["lastMirroredOffset"] == want and
          p["lastMirroredEpoch"] >= 0 and not p["errorMessage"])
    print("%s %s-%d: %s, LME (%d, %d), log end before %d, error %s" % (
        "ok:" if ok else "FAIL:", p["topic"], p["partition"], p["state"],
        p["lastMirroredEpoch"], p["lastMirroredOffset"], want, p["errorMessage"]))
    bad += not ok
if len(parts) != 2:
    print("FAIL: %d partitions of %s described, want 2" % (len(parts), sys.argv[3]))
    bad += 1
sys.exit(1 if bad else 0)
EOF
  seq 1 100 | sed "s/.*/after&:$t written after the failover &/" |
    timeout 60 kcat -b "$D" -P -t "$t" -K: -X acks=all -X message.timeout.ms=30000 -X linger.ms=5 \
      -X enable.idempotence=true >"$w/produce-$t.out" 2>&1 ||
    fail "kcat produce to $t on the destination: $(tail -3 "$w/produce-$t.out")"
  "${ME2E[@]}" ends "$D" "$t" >"$w/ends-after-$t"
  before=$(awk '{s += $2} END {print s}' "$w/ends-$t")
  after=$(awk '{s += $2} END {print s}' "$w/ends-after-$t")
  # + 100 records, + one MIRROR_PID_RESET batch per partition
  if [ "$after" -eq $((before + 100 + 2)) ]; then
    echo "ok: $t takes writes: 100 records (high watermarks $before -> $after, the 2 resets included)"
  else
    fail "$t: high watermarks $before -> $after after 100 records, want $((before + 102))"
  fi
}

scenario_source_dead() {
  local w=$WORK/fo-dead t n
  mkdir -p "$w"
  step "source-dead: topics fo-hung, fo-dead (2 partitions each) written on the source, mirror mfo2 caught up"
  "${ME2E[@]}" create-topics "$S" 2 3 fo-hung fo-dead || { fail "create fo-hung, fo-dead"; return; }
  for t in fo-hung fo-dead; do
    seq 1 300 | sed "s/.*/d&:$t record &/" | timeout 60 kcat -b "$S" -P -t "$t" -K: -z snappy ||
      { fail "kcat produce $t"; return; }
  done
  printf 'bootstrap.servers=%s\n' "$S" >"$w/mfo2.properties"
  mirror_create mfo2 "$w/mfo2.properties" || return
  "$KM" --bootstrap-server "$D" --start --mirror mfo2 --topic 'fo-(hung|dead)' --wait --timeout-ms 60000 \
    >"$w/start.out" 2>&1 || { cat "$w/start.out"; fail "kafka-mirrors --start mfo2 --wait"; return; }
  until_ok 60 "4 partitions of mfo2 caught up" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mfo2 4 || return
  for t in fo-hung fo-dead; do "${ME2E[@]}" ends "$D" "$t" >"$w/ends-$t"; done

  step "source-dead: SIGSTOP every source node (connections open, nothing answers); stop fo-hung"
  for n in 1 2 3; do "$CL" pause "$n" --name "$SRC" >/dev/null 2>&1 || fail "pause source node $n"; done
  source_dead_stop fo-hung

  step "source-dead: kill -9 every source node; stop fo-dead"
  for n in 1 2 3; do "$CL" kill "$n" --name "$SRC" >/dev/null 2>&1 || fail "kill source node $n"; done
  "$CL" status --name "$SRC" >"$w/src-status" 2>&1 && fail "the source still runs: $(cat "$w/src-status")"
  source_dead_stop fo-dead

  step "source-dead: --delete mfo2 (every partition STOPPED) is accepted with the source still dead"
  if "$KM" --bootstrap-server "$D" --delete --mirror mfo2 >"$w/delete.out" 2>&1; then
    echo "ok: --delete mfo2 accepted: $(head -1 "$w/delete.out")"
  else
    fail "--delete mfo2 with every partition STOPPED: $(cat "$w/delete.out")"
  fi
  until_ok 30 "no destination broker lists mfo2 any more" mirror_unlisted mfo2

  step "source-dead: restart the source cluster (its data kept); mfo2 re-created with the same name starts clean"
  for n in 1 2 3; do "$CL" restart "$n" --name "$SRC" >>"$w/restart.log" 2>&1 || fail "restart source node $n"; done
  until_ok 120 "every source node runs again" "$CL" status --name "$SRC"
  mirror_create mfo2 "$w/mfo2.properties" || return
  # clean: none of the deleted mirror's topics or partition states comes back with the name
  "$KM" --bootstrap-server "$D" --list >"$w/list.out" 2>&1
  if grep -qE '^mfo2 +0 ' "$w/list.out" && "${ME2E[@]}" fanout "$KM" "$D" mfo2 0 >"$w/fanout.out" 2>&1; then
    echo "ok: the re-created mfo2 has no topics and no partitions on any broker"
  else
    fail "the re-created mfo2 is not clean: $(grep '^mfo2 ' "$w/list.out"); $(cat "$w/fanout.out")"
  fi
  "$KM" --bootstrap-server "$D" --delete --mirror mfo2 >>"$w/delete.out" 2>&1 || fail "--delete the empty mfo2"
}

