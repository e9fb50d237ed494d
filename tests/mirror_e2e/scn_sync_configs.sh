# shellcheck shell=bash
# scn_sync_configs.sh -- scenario sync-configs of tests/mirror_e2e/run.sh (sourced by it; uses its
# helpers and variables: S, D, CL, KM, PY, WORK, DST, INJECT, fail, step, until_ok, mirror_create).
# Issue 6 "Done when": a topic config changed on the source (retention.ms, cleanup.policy,
# max.message.bytes) appears on the destination; an excluded key does not; a destination-only
# setting survives; a synced key deleted on the source is reset on the destination, also after a
# destination restart; a paused topic's config does not change until it is resumed.
# Needs nothing of the other scenarios: its own topics sk-a, sk-b and mirror msk (1 s config sync).

scenario_sync_configs() {
  local cfg=("$PY" "$HERE/sync-configs.py") i
  # expect_dst TOPIC COND... -- polled until it holds (the sync runs every second)
  expect_dst() { until_ok 30 "destination $1: ${*:2}" "${cfg[@]}" expect "$D" "$@"; }

  step "sync-configs: topics sk-a, sk-b on the source; mirror msk (sync.topic.configs.interval.ms=1000, operator exclusion segment.bytes) started on both"
  "${ME2E[@]}" create-topics "$S" 2 3 sk-a sk-b || { fail "create source topics sk-a sk-b"; return; }
  {
    printf 'bootstrap.servers=%s\n' "$S"
    printf 'sync.topic.configs.interval.ms=1000\nsync.group.offsets.interval.ms=1000\n'
    # ACLs are cluster-wide: msk copying them would race scenario sync-acls' own mirror
    printf 'sync.acls.interval.ms=0\n'
    # the operator's list extends the built-in one (min.insync.replicas stays excluded)
    [ "$INJECT" = cfg-exclude ] || printf 'topic.properties.exclude=segment.bytes\n'
  } >"$WORK/msk.properties"
  [ "$INJECT" = cfg-exclude ] && echo "INJECTED: msk without topic.properties.exclude (the exclusion check must FAIL)"
  mirror_create msk "$WORK/msk.properties" || return
  "$KM" --bootstrap-server "$D" --start --mirror msk --topic 'sk-[ab]' --wait --timeout-ms 60000 \
    >"$WORK/msk-start.out" 2>&1 || { tail -5 "$WORK/msk-start.out"; fail "kafka-mirrors --start msk"; return; }
  tail -n 3 "$WORK/msk-start.out"

  step "sync-configs: the source sets retention.ms, cleanup.policy, max.message.bytes and two excluded keys (built-in min.insync.replicas, the operator's segment.bytes) on sk-a, retention.ms on sk-b"
  "${cfg[@]}" alter "$S" sk-a retention.ms=3600000 cleanup.policy=compact max.message.bytes=200000 \
    min.insync.replicas=1 segment.bytes=1048576 || { fail "source IncrementalAlterConfigs sk-a"; return; }
  "${cfg[@]}" alter "$S" sk-b retention.ms=7200000 || { fail "source IncrementalAlterConfigs sk-b"; return; }
  expect_dst sk-a retention.ms=3600000 cleanup.policy=compact max.message.bytes=200000 || return
  expect_dst sk-b retention.ms=7200000 || return
  # the same run copied the three (above): the excluded keys were seen and left out
  if "${cfg[@]}" expect "$D" sk-a min.insync.replicas=~ segment.bytes=~ >"$WORK/last" 2>&1; then
    echo "ok: excluded keys not copied: $(cat "$WORK/last")"
  else
    fail "an excluded key reached the destination: $(cat "$WORK/last")"
  fi

  step "sync-configs: a destination-only setting (segment.ms on sk-a, set on the destination)"
  "${cfg[@]}" alter "$D" sk-a segment.ms=600000 || { fail "destination IncrementalAlterConfigs sk-a segment.ms"; return; }
  # the next syncs (a change on the source shows one ran) leave it alone
  "${cfg[@]}" alter "$S" sk-a cleanup.policy=compact,delete || { fail "source alter sk-a"; return; }
  expect_dst sk-a cleanup.policy=compact,delete segment.ms=600000 || return

  step "sync-configs: retention.ms deleted on the source: reset on the destination (no longer an override)"
  "${cfg[@]}" alter "$S" sk-a retention.ms= || { fail "source DELETE retention.ms"; return; }
  expect_dst sk-a retention.ms=~ cleanup.policy=compact,delete max.message.bytes=200000 segment.ms=600000 || return

  step "sync-configs: the destination restarted: its 3 brokers killed (kill -9) together and started again; the synced keys are remembered in __mirror_state"
  for i in 1 2 3; do
    "$CL" kill "$i" --name "$DST" >"$WORK/kill-$i.out" 2>&1 ||
      { tail -3 "$WORK/kill-$i.out"; fail "kill -9 destination broker $i"; return; }
  done
  local env=()
  # the restarted brokers ignore what the sync remembered: the reset below must FAIL
  [ "$INJECT" = cfg-forget-restart ] && env=(KMIRROR_TEST_CFGSYNC=forget) &&
    echo "INJECTED: the restarted brokers run with KMIRROR_TEST_CFGSYNC=forget (the reset check must FAIL)"
  # all started before the one wait (cluster.sh's readiness probe looks at every node)
  for i in 1 2 3; do
    env "${env[@]}" "$CL" restart "$i" $([ "$i" = 3 ] && echo --wait) --name "$DST" >"$WORK/restart-$i.out" 2>&1 ||
      { grep -v '^20' "$WORK/restart-$i.out" | tail -3; fail "restart destination broker $i"; return; }
  done
  until_ok 30 "every destination broker lists msk after the restarts" mirror_listed msk || return
  # the later scenarios (and the other mirrors of a shared run) find the destination as before
  until_ok 90 "every mirror partition of the destination MIRRORING, PAUSED or STOPPED again" \
    "${cfg[@]}" settled "$KM" "$D" || return
  tail -1 "$WORK/last"
  "${cfg[@]}" alter "$S" sk-a max.message.bytes= || { fail "source DELETE max.message.bytes"; return; }
  expect_dst sk-a max.message.bytes=~ cleanup.policy=compact,delete segment.ms=600000 || return

  step "sync-configs: sk-b paused, retention.ms changed on the source for both: sk-a follows, sk-b does not until resumed"
  "$KM" --bootstrap-server "$D" --pause --mirror msk --topic sk-b --wait --timeout-ms 60000 \
    >"$WORK/msk-pause.out" 2>&1 || { tail -5 "$WORK/msk-pause.out"; fail "kafka-mirrors --pause sk-b"; return; }
  "${cfg[@]}" alter "$S" sk-b retention.ms=5400000 || { fail "source alter sk-b"; return; }
  "${cfg[@]}" alter "$S" sk-a retention.ms=1800000 || { fail "source alter sk-a"; return; }
  if [ "$INJECT" = cfg-nopause ]; then
    echo "INJECTED: sk-b resumed at once (the paused-topic check must FAIL)"
    "$KM" --bootstrap-server "$D" --resume --mirror msk --topic sk-b >/dev/null 2>&1
  fi
  expect_dst sk-a retention.ms=1800000 || return
  # sk-a's change arrived, so a sync ran after both changes; sk-b holds for 3 more intervals
  if "${cfg[@]}" hold 3 "$D" sk-b retention.ms=7200000 >"$WORK/last" 2>&1; then
    echo "ok: paused $(cat "$WORK/last")"
  else
    fail "the paused topic's config changed: $(cat "$WORK/last")"
  fi
  "$KM" --bootstrap-server "$D" --resume --mirror msk --topic sk-b --wait --timeout-ms 60000 \
    >"$WORK/msk-resume.out" 2>&1 || { tail -5 "$WORK/msk-resume.out"; fail "kafka-mirrors --resume sk-b"; return; }
  expect_dst sk-b retention.ms=5400000 || return

  step "sync-configs: after all syncs the destination-only key and the exclusions still hold; the config sync ends without errors"
  if "${cfg[@]}" expect "$D" sk-a segment.ms=600000 min.insync.replicas=~ segment.bytes=~ \
    retention.ms=1800000 >"$WORK/last" 2>&1; then
    echo "ok: $(cat "$WORK/last")"
  else
    fail "final state of sk-a: $(cat "$WORK/last")"
  fi
  # counted on the coordinator since the restart; a failed topic there must have been followed
  # by a run without one
  if "${cfg[@]}" status "$KM" "$D" msk >"$WORK/last" 2>&1; then
    echo "ok: $(cat "$WORK/last")"
  else
    fail "kafka-mirrors --describe: $(cat "$WORK/last")"
  fi
}
