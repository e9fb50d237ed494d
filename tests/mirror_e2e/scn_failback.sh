# shellcheck shell=bash
# scn_failback.sh -- scenario failback of tests/mirror_e2e/run.sh (sourced by it; uses its helpers and
# variables: S, D, CL, KM, CMP, PY, ME2E, WORK, SRC, DST, INJECT, fail, step, until_ok,
# cmp_partition). Needs nothing from the other scenarios: its own topic fb-orders and mirrors mfb
# (destination <- source) and mfb-back (source <- destination); both clusters load kmirror.so and
# serve metrics (run.sh starts them so). docs/testing-mirror.md "Scenario failback".
#
# Sizes (records of FB_SIZE bytes, lz4): FB_HIST of shared history, FB_TAIL of tail on the source
# that is never mirrored, FB_DELTA written on the destination after the failover.
FB_TOPIC=fb-orders FB_PARTS=2 FB_SIZE=1000
FB_HIST=${FB_HIST:-84000} FB_TAIL=${FB_TAIL:-600} FB_DELTA=${FB_DELTA:-8400}
# Protocol overhead allowed on top of 1.05 x the delta, stated (not measured): the Fetch
# responses' framing (size, header, session, topic and partition headers: under 100 bytes a
# response; the delta streams in at up to fetch.max.bytes a response, so a few hundred of them
# at most), the empty long polls of the mirror's fetchers while the copy runs (every
# fetch.wait.max.ms = 500 ms per source broker, under 100 bytes each) and the divergence round
# trip (one Fetch answered with a DivergingEpoch). The destination's own replication is
# counted apart (kbroker_replica_fetch_response_bytes_total) and subtracted.
FB_OVERHEAD=$((64 * 1024))

fb() { "$PY" "$HERE/failback.py" "$@"; }

# fb_cmp_all -- kc_replicacmp --same-end over the 3 + 3 replicas of every partition of fb-orders
fb_cmp_all() {
  local p
  for p in $(seq 0 $((FB_PARTS - 1))); do cmp_partition "$FB_TOPIC" "$p" || return 1; done
}
# fb_dirs CLUSTER -- the partition directories of fb-orders on every node of CLUSTER
fb_dirs() {
  local i p
  for i in 1 2 3; do
    for p in $(seq 0 $((FB_PARTS - 1))); do "$CL" partdir "$i" "$FB_TOPIC" "$p" --name "$1"; done
  done
}
# fb_dst_replicas_equal -- the 3 destination replicas of every partition hold the same batches
fb_dst_replicas_equal() {
  local i p dirs
  for p in $(seq 0 $((FB_PARTS - 1))); do
    dirs=()
    for i in 1 2 3; do dirs+=("$("$CL" partdir "$i" "$FB_TOPIC" "$p" --name "$DST")"); done
    "$CMP" --same-end "${dirs[@]}" || return 1
  done
}

scenario_failback() {
  local t0 p n_hist hist_bytes app0 rcv0 dst0 rep0 appended received dst1 rep1 sent delta limit
  t0=$SECONDS
  step "failback: $FB_TOPIC ($FB_PARTS partitions, RF 3) on the source, $FB_HIST records of $FB_SIZE bytes (lz4) of history"
  "${ME2E[@]}" create-topics "$S" "$FB_PARTS" 3 "$FB_TOPIC" || { fail "create $FB_TOPIC"; return; }
  fb gen 1 "$FB_HIST" "$FB_SIZE" hist |
    timeout 180 kcat -b "$S" -P -t "$FB_TOPIC" -K: -z lz4 -X linger.ms=50 -X batch.size=1000000 \
      -X queue.buffering.max.kbytes=262144 || { fail "kcat: the history"; return; }
  "${ME2E[@]}" ends "$S" "$FB_TOPIC" >"$WORK/fb-hist-ends"
  n_hist=$(awk '{s += $2} END {print s}' "$WORK/fb-hist-ends")
  [ "$n_hist" = "$FB_HIST" ] || { fail "the source holds $n_hist records of history, want $FB_HIST"; return; }
  : >"$WORK/fb-zero-ends"
  for p in $(seq 0 $((FB_PARTS - 1))); do echo "$FB_TOPIC-$p 0" >>"$WORK/fb-zero-ends"; done
  hist_bytes=$(fb batch-bytes "$WORK/fb-zero-ends" $(fb_dirs "$SRC" | head -n "$FB_PARTS"))
  echo "history: $(tr '\n' ' ' <"$WORK/fb-hist-ends")records, $hist_bytes bytes of batches (one replica of each partition)"

  step "failback: mirror mfb on the destination (source: the source cluster) copies the history"
  printf 'bootstrap.servers=%s\n' "$S" >"$WORK/mfb.properties"
  mirror_create mfb "$WORK/mfb.properties" || return
  "$KM" --bootstrap-server "$D" --start --mirror mfb --topic "$FB_TOPIC" --wait --timeout-ms 60000 \
    >"$WORK/fb-start.out" 2>&1 || { cat "$WORK/fb-start.out"; fail "kafka-mirrors --start mfb"; return; }
  until_ok 180 "$FB_TOPIC caught up on the destination" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mfb "$FB_PARTS" || return
  tail -1 "$WORK/last"

  step "failback: pause mfb, then a tail of $FB_TAIL records on the source that the destination never fetches"
  "$KM" --bootstrap-server "$D" --pause --mirror mfb --topic "$FB_TOPIC" --wait --timeout-ms 60000 \
    >"$WORK/fb-pause.out" 2>&1 || { cat "$WORK/fb-pause.out"; fail "kafka-mirrors --pause mfb"; return; }
  fb gen 1 "$FB_TAIL" "$FB_SIZE" tail | timeout 60 kcat -b "$S" -P -t "$FB_TOPIC" -K: -z lz4 ||
    { fail "kcat: the tail"; return; }
  "${ME2E[@]}" ends "$S" "$FB_TOPIC" >"$WORK/fb-tail-ends"
  [ "$(awk '{s += $2} END {print s}' "$WORK/fb-tail-ends")" = $((FB_HIST + FB_TAIL)) ] ||
    { fail "the source does not hold history + tail: $(tr '\n' ' ' <"$WORK/fb-tail-ends")"; return; }

  step "failback: failover (kafka-mirrors --stop mfb --wait): the destination takes $FB_DELTA records"
  "$KM" --bootstrap-server "$D" --stop --mirror mfb --topic "$FB_TOPIC" --wait --timeout-ms 60000 \
    >"$WORK/fb-stop.out" 2>&1 || { cat "$WORK/fb-stop.out"; fail "kafka-mirrors --stop mfb"; return; }
  tail -n 3 "$WORK/fb-stop.out"
  # The failover recorded the last mirrored offsets (LME) = the history's end: the tail was never
  # mirrored. (The log goes one further: the failover's MIRROR_PID_RESET marker.)
  fb lme "$KM" "$D" mfb >"$WORK/fb-lme-ends" || { fail "describe mfb after the stop"; return; }
  if cmp -s "$WORK/fb-lme-ends" "$WORK/fb-hist-ends"; then
    echo "ok: the destination's last mirrored offsets are the history's end ($(tr '\n' ' ' <"$WORK/fb-lme-ends")); the source's tail was never mirrored (source ends $(tr '\n' ' ' <"$WORK/fb-tail-ends"))"
  else
    fail "the destination's last mirrored offsets $(tr '\n' ' ' <"$WORK/fb-lme-ends") are not the history's end $(tr '\n' ' ' <"$WORK/fb-hist-ends")"
    return
  fi
  for p in $(seq 0 $((FB_PARTS - 1))); do
    fb wait-writable "$D" "$FB_TOPIC" "$p" || { fail "$FB_TOPIC-$p not writable on the destination after --stop"; return; }
  done
  fb gen 1 "$FB_DELTA" "$FB_SIZE" delta |
    timeout 120 kcat -b "$D" -P -t "$FB_TOPIC" -K: -z lz4 -X linger.ms=50 -X batch.size=1000000 ||
    { fail "kcat: the delta on the destination"; return; }
  "${ME2E[@]}" ends "$D" "$FB_TOPIC" >"$WORK/fb-dst-ends"
  until_ok 60 "the 3 destination replicas of $FB_TOPIC hold the delta" fb_dst_replicas_equal || return

  step "failback: mirror mfb-back on the source cluster (source: the destination) starts $FB_TOPIC"
  printf 'bootstrap.servers=%s\n' "$D" >"$WORK/mfb-back.properties"
  mirror_create mfb-back "$WORK/mfb-back.properties" "$S" || return
  # Counters before the failback: the source's mirror client (kmirror.so on nodes 1-3 of the
  # source cluster: appended and received bytes of mfb-back) and the destination brokers'
  # Fetch responses (nodes 1-3; node 4 is the controller), all and those to follower replicas
  # (the destination's own replication, subtracted).
  read -r app0 rcv0 <<<"$(fb metrics "$KPEER_HOME/$SRC/node[123].log" \
    '^kmirror_fetch_bytes_total\{.*mirror="mfb-back"' '^kmirror_fetch_received_bytes_total\{.*mirror="mfb-back"')"
  read -r dst0 rep0 <<<"$(fb metrics "$KPEER_HOME/$DST/node[123].log" '^kbroker_response_bytes_total\{api="Fetch"\}' \
    '^kbroker_replica_fetch_response_bytes_total ')"
  [ -n "$app0" ] && [ -n "$rcv0" ] && [ -n "$dst0" ] && [ -n "$rep0" ] || { fail "the metrics endpoints do not answer"; return; }
  if [ "$INJECT" = fb-full ]; then
    "$KM" --bootstrap-server "$D" --delete --mirror mfb || fail "inject: --delete mfb"
    echo "INJECTED: mirror mfb deleted on the destination (its LME with it): the failback copies everything, the byte checks must fail"
  fi
  "$KM" --bootstrap-server "$S" --start --mirror mfb-back --topic "$FB_TOPIC" --wait --timeout-ms 90000 \
    >"$WORK/fb-back.out" 2>&1 || { cat "$WORK/fb-back.out"; fail "kafka-mirrors --start mfb-back"; return; }
  until_ok 120 "$FB_TOPIC failed back: MIRRORING on the source cluster with the destination's log ends" \
    "${ME2E[@]}" caught-up "$KM" "$S" "$D" mfb-back "$FB_PARTS" || return
  tail -1 "$WORK/last"
  read -r appended received <<<"$(fb metrics "$KPEER_HOME/$SRC/node[123].log" \
    '^kmirror_fetch_bytes_total\{.*mirror="mfb-back"' '^kmirror_fetch_received_bytes_total\{.*mirror="mfb-back"')"
  read -r dst1 rep1 <<<"$(fb metrics "$KPEER_HOME/$DST/node[123].log" '^kbroker_response_bytes_total\{api="Fetch"\}' \
    '^kbroker_replica_fetch_response_bytes_total ')"
  appended=$((appended - app0))
  received=$((received - rcv0))
  sent=$((dst1 - dst0 - (rep1 - rep0)))

  step "failback: the tail is gone, the logs end identical on the 6 replicas, only the delta crossed"
  until_ok 60 "$FB_TOPIC: 3 source + 3 destination replicas byte-identical (kc_replicacmp --same-end)" fb_cmp_all ||
    sed 's/^/  /' "$WORK"/cmp-"$FB_TOPIC"-*.txt | head -20
  grep -h '^replicacmp: OK' "$WORK"/cmp-"$FB_TOPIC"-*.txt
  "${ME2E[@]}" ends "$S" "$FB_TOPIC" >"$WORK/fb-src-ends"
  if cmp -s "$WORK/fb-src-ends" "$WORK/fb-dst-ends"; then
    echo "ok: the source's log ends are the destination's ($(tr '\n' ' ' <"$WORK/fb-src-ends")), its tail ($(tr '\n' ' ' <"$WORK/fb-tail-ends")) truncated"
  else
    fail "source log ends $(tr '\n' ' ' <"$WORK/fb-src-ends") differ from the destination's $(tr '\n' ' ' <"$WORK/fb-dst-ends")"
  fi
  # design M27: the failback raised the source's leader epochs just above the destination's
  # current ones (which the destination bumped above the LME epoch at its failover), learned
  # with the lookup; so the destination's batches were never fenced (no EPOCH_FENCING).
  fb epochs "$D" "$FB_TOPIC" >"$WORK/fb-dst-epochs"
  fb epochs "$S" "$FB_TOPIC" >"$WORK/fb-src-epochs"
  if [ "$(awk '{print $1, $2 + 1}' "$WORK/fb-dst-epochs")" = "$(cat "$WORK/fb-src-epochs")" ]; then
    echo "ok: the source's leader epochs are the destination's + 1 ($(tr '\n' ' ' <"$WORK/fb-src-epochs")vs $(tr '\n' ' ' <"$WORK/fb-dst-epochs"))"
  else
    fail "the source's leader epochs $(tr '\n' ' ' <"$WORK/fb-src-epochs")are not the destination's $(tr '\n' ' ' <"$WORK/fb-dst-epochs")+ 1"
  fi
  if grep -h "mirror mfb-back: .*-> EPOCH_FENCING" "$KPEER_HOME/$SRC"/node[123].log; then
    fail "the failback went through EPOCH_FENCING (the destination's batches were above the bumped epoch)"
  fi
  # The delta: the destination's batches from the failover offsets on (the new records and
  # the failover's MIRROR_PID_RESET marker), one replica of each partition.
  delta=$(fb batch-bytes "$WORK/fb-lme-ends" $(fb_dirs "$DST" | head -n "$FB_PARTS"))
  limit=$(awk -v d="$delta" -v o="$FB_OVERHEAD" 'BEGIN {printf "%d", 1.05 * d + o}')
  echo "delta $delta bytes (history $hist_bytes); the source's mirror client received $received bytes of Fetch responses and appended $appended; the destination's brokers sent $sent bytes of Fetch responses to clients (and $((rep1 - rep0)) to their followers meanwhile); limit 1.05 x delta + $FB_OVERHEAD = $limit"
  # The follower counter counts: the destination's followers fetched history and delta twice.
  [ "$rep1" -ge $((2 * (hist_bytes + delta))) ] ||
    fail "the destination's replica fetch counter ($rep1) is below 2 x (history + delta) = $((2 * (hist_bytes + delta)))"
  [ "$appended" -ge "$delta" ] || fail "the mirror client appended $appended bytes, less than the delta $delta (is it counting?)"
  [ "$received" -ge "$appended" ] || fail "the mirror client received $received bytes, less than it appended ($appended)"
  if [ "$received" -le "$limit" ] && [ "$sent" -le "$limit" ]; then
    echo "ok: only the delta crossed: received $received, sent $sent <= $limit"
  else
    fail "more than the delta crossed: the mirror client received $received, the destination sent $sent, limit $limit"
  fi
  echo "failback scenario: $((SECONDS - t0)) s"
}
