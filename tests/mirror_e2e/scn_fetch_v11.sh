# shellcheck shell=bash
# scn_fetch_v11.sh -- scenario fetch-v11 of tests/mirror_e2e/run.sh (sourced by it; uses its
# helpers and variables: S, CL, KM, CMP, PY, ME2E, BUILD, SO, SRC, DST_PORT, INJECT, WORK,
# KPEER_HOME, fail, step, until_ok, mirror_create). Needs nothing of the other scenarios: its
# own topic fv-0 on the shared source, its own mirror mfv, and its own 1-broker destination.
#
# The fetcher capped at Fetch v11 (the test hook KMIRROR_TEST_FETCH_MAX_VERSION=11, per process,
# so a destination broker of its own runs with it): a source below Fetch v12 has no
# LastFetchedEpoch / DivergingEpoch, and divergence is found with OffsetsForLeaderEpoch. fv-0
# (replicas 2,3 on the source; unclean.leader.election.enable, min.insync.replicas=1) is
# mirrored; follower 3 is killed and leaves the ISR; records written to leader 2 alone are
# mirrored; leader 2 is killed and 3 comes back as the unclean leader without those records and
# takes new ones. The mirror must find the divergence through OffsetsForLeaderEpoch (the hold
# message of that path, which lacks the "(last fetched epoch" of the v12+ path), truncate and
# end byte-identical with both source replicas (kc_replicacmp --same-end).
# --inject fv-no-cap: the destination runs without the hook (Fetch v18, DivergingEpoch): the
# OffsetsForLeaderEpoch check must FAIL.

FV_PY=("$PY" "$HERE/fetch_v11.py")
FV_DIR=$KPEER_HOME/mirror-e2e-fv
FV_LOG=$FV_DIR/node1.log

# fv_dst_start -- the 1-broker destination (broker + controller, kmirror.so) at $FVQ / $FVQ+1,
# with the test hook in its environment (not with --inject fv-no-cap)
fv_dst_start() {
  local cid
  FVQ=$(solo_port $((DST_PORT + 100)))
  FVD=127.0.0.1:$FVQ
  cid=$(solo_cluster_id F)
  rm -rf "$FV_DIR"
  if [ "$INJECT" = fv-no-cap ]; then
    echo "INJECTED: the destination runs without KMIRROR_TEST_FETCH_MAX_VERSION (the OffsetsForLeaderEpoch check must FAIL)"
    (unset KMIRROR_TEST_FETCH_MAX_VERSION && fv_solo_start "$cid")
  else
    (export KMIRROR_TEST_FETCH_MAX_VERSION=11 && fv_solo_start "$cid")
  fi
  until_ok 60 "the fetch-v11 destination $FVD answers kafka-mirrors --list" "$KM" --bootstrap-server "$FVD" --list
}

# fv_solo_start CLUSTER_ID -- run.sh's solo_start with kmirror.so loaded (the environment decides
# the test hook)
fv_solo_start() {
  solo_start "$FV_DIR" "$1" "$FVQ" "$FV_DIR/node1.pid" auto.create.topics.enable=false \
    "plugin.paths=$SO" mirror.enable=true
}

fv_dst_stop() {
  solo_stop "$FV_DIR/node1.pid" "$FV_DIR/node1.properties" || true
}

# fv_produce N TAG -- N keyed records to fv-0 (acks=all: the ISR there is what counts)
# (kcat's complaints about the killed broker in the bootstrap list are kept in a file)
fv_produce() {
  seq 1 "$1" | sed "s/.*/k&:$2 record &/" |
    timeout 60 kcat -b "$S" -P -t fv-0 -K: -X acks=all 2>"$WORK/fv-kcat.err" ||
    { cat "$WORK/fv-kcat.err"; fail "kcat: $2 records to fv-0"; return 1; }
}

fv_caught_up() { "${ME2E[@]}" caught-up "$KM" "$FVD" "$S" mfv 1; }

scenario_fetch_v11() {
  local t0=$SECONDS n
  fv_main
  # the source brokers come back whatever happened (the scenarios after this one need them)
  for n in 2 3; do
    kill -0 "$("$CL" pid "$n" --name "$SRC" 2>/dev/null)" 2>/dev/null ||
      "$CL" restart "$n" --name "$SRC" --wait 2>&1 | tail -1
  done
  fv_dst_stop
  echo "fetch-v11: $((SECONDS - t0))s"
}

fv_main() {
  local e1 dirs n
  step "fetch-v11: a 1-broker destination of its own with KMIRROR_TEST_FETCH_MAX_VERSION=11"
  fv_dst_start || return
  if grep -q 'KMIRROR_TEST_FETCH_MAX_VERSION: Fetch capped at v11' "$FV_LOG"; then
    echo "ok: the destination's fetcher is capped at Fetch v11"
  elif [ "$INJECT" != fv-no-cap ]; then
    fail "the destination did not log the Fetch cap"
  fi

  step "fetch-v11: fv-0 on the source (replicas 2,3, unclean election allowed); 30 records; mirror mfv"
  "${FV_PY[@]}" create "$S" fv-0 2,3 unclean.leader.election.enable=true min.insync.replicas=1 ||
    { fail "create fv-0"; return; }
  fv_produce 30 first || return
  printf 'bootstrap.servers=%s\nrequest.timeout.ms=3000\nsocket.connection.setup.timeout.ms=2000\nfetch.backoff.ms=200\n' \
    "$S" >"$WORK/mfv.properties"
  mirror_create mfv "$WORK/mfv.properties" "$FVD" || return
  "$KM" --bootstrap-server "$FVD" --start --mirror mfv --topic fv-0 --wait --timeout-ms 60000 \
    >"$WORK/fv-start.out" 2>&1 || { cat "$WORK/fv-start.out"; fail "kafka-mirrors --start mfv --wait"; return; }
  until_ok 60 "fv-0 mirrored (30 records)" fv_caught_up || return

  step "fetch-v11: kill -9 source broker 3 (follower); 20 records on leader 2 alone, mirrored"
  "$CL" kill 3 --name "$SRC" 2>&1 | tail -1
  until_ok 60 "broker 3 out of fv-0's ISR" "${FV_PY[@]}" wait "$S" fv-0 2 2 1 || return
  fv_produce 20 lost || return
  until_ok 60 "fv-0 mirrored (50 records, 20 of them only on broker 2)" fv_caught_up || return
  e1=$("${FV_PY[@]}" part "$S" fv-0)
  echo "source before the unclean election: $e1"

  step "fetch-v11: kill -9 source broker 2 (leader), restart 3: unclean leader without the 20; 10 new records"
  "$CL" kill 2 --name "$SRC" 2>&1 | tail -1
  "$CL" restart 3 --name "$SRC" 2>&1 | tail -1
  until_ok 90 "broker 3 leads fv-0 (unclean election)" "${FV_PY[@]}" wait "$S" fv-0 3 3 1 || return
  fv_produce 10 new || return
  until_ok 90 "mfv caught up with the new leader (40 records)" fv_caught_up || return
  tail -1 "$WORK/last"

  step "fetch-v11: the divergence went through OffsetsForLeaderEpoch, the plugin truncated"
  n=$(grep -a 'fv-0-0: diverged from the source: its epoch' "$FV_LOG" | grep -vc 'last fetched epoch')
  if [ "$n" -ge 1 ]; then
    echo "ok: $n divergence(s) found by OffsetsForLeaderEpoch:"
    grep -a 'fv-0-0: diverged from the source' "$FV_LOG" | head -3 | sed 's/^/  /'
  else
    fail "no divergence found by OffsetsForLeaderEpoch (Fetch below v12); the log says:"
    grep -a 'fv-0-0: diverged\|Fetch capped' "$FV_LOG" | head -5 | sed 's/^/  /'
  fi
  if grep -aq 'plugin kmirror truncated fv-0-0' "$FV_LOG"; then
    echo "ok: $(grep -a 'plugin kmirror truncated fv-0-0' "$FV_LOG" | head -1 | cut -c1-200)"
  else
    fail "the mirror did not truncate fv-0-0"
  fi

  step "fetch-v11: restart broker 2 (a follower now); 3 replicas byte-identical"
  "$CL" restart 2 --name "$SRC" --wait 2>&1 | tail -1
  until_ok 90 "fv-0's ISR is 2,3 again" "${FV_PY[@]}" wait "$S" fv-0 3 2,3 || return
  dirs=("$("$CL" partdir 2 fv-0 0 --name "$SRC")" "$("$CL" partdir 3 fv-0 0 --name "$SRC")" "$FV_DIR/data/fv-0-0")
  if until_ok 60 "kc_replicacmp --same-end: source replicas 2, 3 and the mirror" "$CMP" --same-end "${dirs[@]}"; then
    grep '^replicacmp' "$WORK/last"
  fi
  "$KM" --bootstrap-server "$FVD" --describe --mirror mfv | sed 's/^/  | /'
}
