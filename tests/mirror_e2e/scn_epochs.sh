# shellcheck shell=bash
# scn_epochs.sh -- scenario epochs of tests/mirror_e2e/run.sh (sourced by it; uses its helpers and
# variables: S, D, CL, KM, CMP, PY, PEER, WORK, SRC, DST, fail, step, until_ok, cmp_partition).
# Independent of the other scenarios: its own topic ep-00 and mirror mep. It stops (fails over)
# its own topic only, so it may run before or after the others.
#
# A source partition with >= 5 leader elections (records written in every leader term) is
# mirrored; the destination leader epoch must stay >= every mirrored batch's epoch (KIP-320
# clients compare them); a Java and a librdkafka consumer group read and commit on the mirror
# topic for a fixed window while mirroring continues, and the destination brokers' request
# counters (kbroker_requests_total on metrics.listener) bound their Metadata and
# OffsetForLeaderEpoch requests; after failover the destination's new batches carry an epoch
# above every mirrored one.

EP_T=ep-00
EP_PARTS=2
EP_WINDOW=16 # seconds the consumers run (2 sessions each)
# The bound: a consumer sends a Metadata request at start, on joining the group and when it
# looks a coordinator / partition leader up again; 4 consumer sessions (2 Java, 2 librdkafka)
# in the window, so 10 per session is generous. A consumer that loops on stale metadata (KIP-320:
# committed or fetched epoch above the leader epoch in Metadata) sends one every retry backoff
# (100 ms): hundreds in the window.
EP_MAX_METADATA=40
EP_MAX_OFFLE=40

ep_epy() { "$PY" "$HERE/epochs.py" "$@"; }
# ep_meta CLUSTER -- "P LEADER EPOCH ISR" per partition of EP_T, as broker 1 of CLUSTER answers
ep_meta() {
  "$CL" meta 1 "$EP_T" --name "$1" |
    sed -n "s/^partition $EP_T \([0-9]*\) leader=\([-0-9]*\) epoch=\([-0-9]*\) replicas=[^ ]* isr=\([^ ]*\).*/\1 \2 \3 \4/p"
}
# ep_produce N TAG -- N keyed records per partition on the source (kcat, acks=all)
ep_produce() {
  local p
  for ((p = 0; p < EP_PARTS; p++)); do
    seq 1 "$1" | sed "s/.*/$2-&:epochs record & ($2)/" |
      timeout 60 kcat -b "$S" -P -t "$EP_T" -p "$p" -K: -X acks=all -X linger.ms=5 2>>"$WORK/ep-kcat.log" ||
      { fail "epochs: kcat produce $2 to $EP_T-$p"; return 1; }
  done
}
# ep_leaders_are NODE -- every partition led by NODE with a full ISR (broker 1's Metadata)
ep_leaders_are() {
  local m
  m=$(ep_meta "$SRC")
  echo "$m"
  [ "$(echo "$m" | awk -v n="$1" '$2 == n && split($4, a, ",") == 3' | wc -l)" = "$EP_PARTS" ]
}
ep_leaders_not() {
  local m
  m=$(ep_meta "$SRC")
  echo "$m"
  [ "$(echo "$m" | awk -v n="$1" '$2 >= 0 && $2 != n' | wc -l)" = "$EP_PARTS" ]
}
ep_isr_full() {
  local m
  m=$(ep_meta "$SRC")
  echo "$m"
  [ "$(echo "$m" | awk 'split($4, a, ",") == 3' | wc -l)" = "$EP_PARTS" ]
}
ep_record_epochs() { ep_meta "$SRC" | sed "s/^/$1 /" >>"$WORK/ep-elections.txt"; }
# ep_batch_epochs CLUSTER P [MIN_OFFSET] -- "base last epoch" of every batch of partition P on
# CLUSTER (kc_replicacmp -v over its 3 replicas, which must be identical and end together)
ep_batch_epochs() {
  local dirs=() i
  for i in 1 2 3; do dirs+=("$("$CL" partdir "$i" "$EP_T" "$2" --name "$1")"); done
  "$CMP" -v --same-end "${dirs[@]}" >"$WORK/ep-cmp-$1-$2.txt" 2>&1 || return 1
  sed -n 's/^  same: offsets \([0-9]*\)\.\.\([0-9]*\) leaderEpoch=\([-0-9]*\) .*/\1 \2 \3/p' \
    "$WORK/ep-cmp-$1-$2.txt" | awk -v m="${3:-0}" '$1 >= m'
}
ep_gone() { ! kill -0 "$1" 2>/dev/null; }
ep_metrics_urls() {
  local i u
  for i in 1 2 3; do
    u=$(grep -o 'metrics on http://[0-9.]*:[0-9]*/metrics' "$KPEER_HOME/$DST/node$i.log" | tail -1)
    [ -n "$u" ] || { fail "epochs: destination node $i logs no metrics listener (metrics.listener)"; return 1; }
    echo "${u#metrics on }"
  done
}

scenario_epochs() {
  local i p pid m n urls rc e max_batch dle cyc want jout rout bg
  : >"$WORK/ep-elections.txt"
  step "epochs: $EP_T ($EP_PARTS partitions, replicas 2,3,1: broker 2 preferred) on the source; 3 rounds of leader moves (SIGTERM of broker 2, restart, preferred election) with records in every leader term"
  ep_epy create-assigned "$S" "$EP_T" "$EP_PARTS" 2,3,1 || { fail "epochs: create $EP_T"; return; }
  ep_record_epochs created
  ep_produce 40 t0 || return
  for cyc in 1 2 3; do
    pid=$("$CL" pid 2 --name "$SRC") || { fail "epochs: source broker 2 not running"; return; }
    kill -TERM "$pid" # controlled shutdown: its leaderships move to broker 3 at once
    until_ok 60 "round $cyc: leaders moved off broker 2" ep_leaders_not 2 || return
    ep_record_epochs "r$cyc-moved"
    until_ok 60 "round $cyc: broker 2 exited" ep_gone "$pid" || return
    ep_produce 40 "r$cyc-a" || return
    "$CL" restart 2 --name "$SRC" >/dev/null 2>&1 || { fail "epochs: restart source broker 2"; return; }
    until_ok 60 "round $cyc: broker 2 back in every ISR" ep_isr_full || return
    ep_epy elect "$S" "$EP_T" >"$WORK/ep-elect.txt" 2>&1 || { cat "$WORK/ep-elect.txt"; fail "epochs: preferred election"; return; }
    until_ok 60 "round $cyc: broker 2 leads again (preferred election)" ep_leaders_are 2 || return
    ep_record_epochs "r$cyc-back"
    ep_produce 40 "r$cyc-b" || return
  done
  echo "source leaders and epochs after each step (step partition leader epoch isr):"
  sed 's/^/  /' "$WORK/ep-elections.txt"
  for ((p = 0; p < EP_PARTS; p++)); do
    # an election = the leader changed and the epoch went up
    n=$(awk -v p="$p" '$2 == p { if (seen && $3 != l && $4 > e) c++; seen = 1; l = $3; e = $4 } END { print c + 0 }' \
      "$WORK/ep-elections.txt")
    if [ "$n" -ge 5 ]; then echo "ok: $EP_T-$p: $n leader elections on the source"
    else fail "epochs: $EP_T-$p: only $n leader elections (want >= 5)"; fi
    e=$(ep_batch_epochs "$SRC" "$p" | awk '{ print $3 }' | sort -un | paste -sd,)
    if [ "$(echo "$e" | tr ',' '\n' | wc -l)" -ge 6 ]; then echo "ok: $EP_T-$p: the source log holds batches of epochs $e"
    else fail "epochs: $EP_T-$p: the source log holds batches of epochs '$e' only (want >= 6)"; fi
  done

  step "epochs: mirror mep of $EP_T, caught up; the destination leader epoch >= every mirrored batch's epoch"
  printf 'bootstrap.servers=%s\n' "$S" >"$WORK/mep.properties"
  mirror_create mep "$WORK/mep.properties" || return
  "$KM" --bootstrap-server "$D" --start --mirror mep --topic 'ep-.*' --wait --timeout-ms 90000 \
    >"$WORK/ep-start.out" 2>&1 || { cat "$WORK/ep-start.out"; fail "epochs: kafka-mirrors --start mep"; return; }
  until_ok 120 "$EP_T caught up" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mep "$EP_PARTS" || return
  ep_check_invariant() {
    local p dle max rc=0
    for ((p = 0; p < EP_PARTS; p++)); do
      dle=$(ep_meta "$DST" | awk -v p="$p" '$1 == p { print $3 }')
      max=$(ep_batch_epochs "$DST" "$p" | awk 'BEGIN { m = -1 } $3 > m { m = $3 } END { print m }')
      echo "$EP_T-$p: destination leader epoch $dle, mirrored batch epochs up to $max"
      [ -n "$dle" ] && [ -n "$max" ] && [ "$dle" -ge "$max" ] || rc=1
    done
    return $rc
  }
  # polled: the destination replicas may still be fetching the last batches
  until_ok 60 "destination leader epoch >= every mirrored batch epoch" ep_check_invariant && cat "$WORK/last"

  step "epochs: Java and librdkafka consumer groups read and commit on $EP_T (destination) for ${EP_WINDOW}s while the source takes writes and mirroring goes on"
  mapfile -t urls < <(ep_metrics_urls) || return
  [ "${#urls[@]}" = 3 ] || return
  ep_epy scrape "$WORK/ep-metrics-0.json" "${urls[@]}" || { fail "epochs: scrape destination metrics"; return; }
  # In the window the source epoch also jumps past the destination's headroom (EPOCH_FENCING's
  # +10): BumpLeaderEpochs on the source controller to the destination epoch + 20, as many more
  # elections would; the destination must fence and bump again while the consumers read.
  dle=$(ep_meta "$DST" | awk 'NR == 1 { print $3 }')
  want=$((dle + 20))
  ep_epy raise-epoch "127.0.0.1:$((SRC_PORT + 1))" "$EP_T" "$EP_PARTS" "$want" >"$WORK/ep-raise.txt" 2>&1 ||
    { cat "$WORK/ep-raise.txt"; fail "epochs: raise the source leader epoch to $want"; return; }
  echo "source leader epoch raised to >= $want (destination at $dle)"
  # what the source will hold when the writer is done: the consumers' last sessions go on until
  # they have read that much (the last writes may still be on their way through the mirror)
  n=$(("$(awk '{ s += $2 } END { print s }' <("${ME2E[@]}" ends "$S" "$EP_T"))" + (EP_WINDOW - 5) * 10 * EP_PARTS))
  echo "the consumers go on until they have read $n records"
  # writes through most of the window (10 records a partition about every second: pacing, not
  # synchronisation), so both sessions of each consumer read mirrored data; the consumers must
  # still reach the end before the window closes
  (for i in $(seq 1 $((EP_WINDOW - 5))); do ep_produce 10 "w$i" || exit 1; sleep 1; done) >"$WORK/ep-writer.log" 2>&1 &
  bg=$!
  "$PEER" consume-group --bootstrap "$D" --topic "$EP_T" --group ep-java --sessions 2 \
    --duration-ms $((EP_WINDOW * 1000)) --min-records "$n" >"$WORK/ep-java.log" 2>&1 &
  pid=$!
  ep_epy rdk-consume "$D" "$EP_T" ep-rdk "$EP_WINDOW" 2 "$n" >"$WORK/ep-rdk.log" 2>&1
  rc=$?
  wait "$pid" || { fail "epochs: Java consume-group failed:"; sed 's/^/  /' "$WORK/ep-java.log" | tail -8; }
  [ "$rc" = 0 ] || { fail "epochs: librdkafka consumer failed:"; sed 's/^/  /' "$WORK/ep-rdk.log" | tail -8; }
  wait "$bg" || fail "epochs: the writer during the window failed: $(tail -3 "$WORK/ep-writer.log")"
  ep_epy scrape "$WORK/ep-metrics-1.json" "${urls[@]}" || { fail "epochs: scrape destination metrics"; return; }
  grep 'consume-group:' "$WORK/ep-java.log"
  grep 'rdk-consume:' "$WORK/ep-rdk.log"
  ep_epy delta "$WORK/ep-metrics-0.json" "$WORK/ep-metrics-1.json" Metadata OffsetForLeaderEpoch \
    FindCoordinator JoinGroup OffsetCommit Fetch | tee "$WORK/ep-delta.txt"
  m=$(sed -n 's/^total Metadata=\([0-9]*\) OffsetForLeaderEpoch=\([0-9]*\).*/\1 \2/p' "$WORK/ep-delta.txt")
  read -r n e <<<"$m"
  if [ -n "$n" ] && [ "$n" -le "$EP_MAX_METADATA" ]; then
    echo "ok: $n Metadata requests on the 3 destination brokers in the window (bound $EP_MAX_METADATA)"
  else
    fail "epochs: ${n:-?} Metadata requests on the destination brokers in the window, want <= $EP_MAX_METADATA"
  fi
  if [ -n "$e" ] && [ "$e" -le "$EP_MAX_OFFLE" ]; then
    echo "ok: $e OffsetForLeaderEpoch requests in the window (bound $EP_MAX_OFFLE)"
  else
    fail "epochs: ${e:-?} OffsetForLeaderEpoch requests on the destination brokers in the window, want <= $EP_MAX_OFFLE"
  fi
  until_ok 60 "$EP_T caught up after the window's writes" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mep "$EP_PARTS" || return
  until_ok 60 "destination leader epoch >= every mirrored batch epoch (after the source's jump to $want)" \
    ep_check_invariant && cat "$WORK/last"
  # The destination's epoch cache as clients see it (OffsetForLeaderEpoch) is the source's: the
  # same (epoch, end offset) for every epoch up to the destination's own, which (bumped, not
  # mirrored) is not in it while mirroring.
  dle=$(ep_meta "$DST" | awk 'NR == 1 { print $3 }')
  ep_epy epoch-ends "$S" "$EP_T" "$dle" >"$WORK/ep-ofle-src.txt" 2>&1
  ep_epy epoch-ends "$D" "$EP_T" "$dle" >"$WORK/ep-ofle-dst.txt" 2>&1
  if [ -s "$WORK/ep-ofle-dst.txt" ] && cmp -s "$WORK/ep-ofle-src.txt" "$WORK/ep-ofle-dst.txt"; then
    echo "ok: OffsetForLeaderEpoch answers the same on both sides for epochs 0..$dle: $(awk '$1 " " $4 != l { printf "%s%s:%s@%s", (n++ ? " " : ""), $1, $4, $5; l = $1 " " $4 }' "$WORK/ep-ofle-dst.txt") (partition:epoch@end)"
  else
    fail "epochs: OffsetForLeaderEpoch differs between source and destination (epochs 0..$dle; partition epoch -> epoch end error):"
    diff "$WORK/ep-ofle-src.txt" "$WORK/ep-ofle-dst.txt" | head -10 | sed 's/^/  /'
  fi
  for m in ep-java.log ep-rdk.log; do
    e=$(sed -n 's/.* records in .*, max record leader epoch \([-0-9]*\),.*/\1/p' "$WORK/$m")
    [ "${e:--1}" -ge "$want" ] || fail "epochs: $m: the consumer's newest record has epoch ${e:-?}, want the raised source epoch $want (did it read the last records?)"
  done
  "${ME2E[@]}" ends "$D" "$EP_T" >"$WORK/ep-ends.txt"
  jout=$(sed -n 's/^consume-group: [0-9]* records in .* committed \(.*\)/\1/p' "$WORK/ep-java.log")
  rout=$(sed -n 's/^rdk-consume: [0-9]* records in .* committed \(.*\)/\1/p' "$WORK/ep-rdk.log")
  for m in "java:$jout" "librdkafka:$rout"; do
    if [ -n "${m#*:}" ] && ep_epy committed-check "$WORK/ep-ends.txt" "${m#*:}"; then
      echo "ok: the ${m%%:*} group read everything: committed ${m#*:} = the log ends"
    else
      fail "epochs: the ${m%%:*} group did not commit the log ends ($(tr '\n' ' ' <"$WORK/ep-ends.txt")): '${m#*:}'"
    fi
  done

  step "epochs: failover (kafka-mirrors --stop --wait), records produced on the destination carry an epoch above every mirrored one"
  declare -A ep_end
  while read -r tp o; do ep_end[${tp##*-}]=$o; done <"$WORK/ep-ends.txt"
  "$KM" --bootstrap-server "$D" --stop --mirror mep --topic "$EP_T" --wait --timeout-ms 60000 \
    >"$WORK/ep-stop.out" 2>&1 || { cat "$WORK/ep-stop.out"; fail "epochs: kafka-mirrors --stop mep"; return; }
  for ((p = 0; p < EP_PARTS; p++)); do
    seq 1 20 | sed "s/.*/f-&:after failover &/" |
      timeout 60 kcat -b "$D" -P -t "$EP_T" -p "$p" -K: -X acks=all ||
      { fail "epochs: produce to $EP_T-$p on the destination after the failover"; return; }
  done
  ep_after_failover() {
    local p max new rc=0
    for ((p = 0; p < EP_PARTS; p++)); do
      ep_batch_epochs "$DST" "$p" >"$WORK/ep-batches-$p.txt" || { echo "$EP_T-$p: replicas differ"; return 1; }
      max=$(awk -v e="${ep_end[$p]}" '$1 < e && $3 > m { m = $3 } BEGIN { m = -1 } END { print m }' "$WORK/ep-batches-$p.txt")
      new=$(awk -v e="${ep_end[$p]}" '$1 >= e { print $3 }' "$WORK/ep-batches-$p.txt" | sort -un | paste -sd,)
      echo "$EP_T-$p: mirrored batches (below offset ${ep_end[$p]}) up to epoch $max; batches written since: epochs ${new:-none}"
      [ -n "$new" ] || rc=1
      for e in ${new//,/ }; do [ "$e" -gt "$max" ] || rc=1; done
      # OffsetForLeaderEpoch: the last mirrored epoch now ends where the failover cut
      ep_epy epoch-ends "$D" "$EP_T" "$max" >"$WORK/ep-ofle-after.txt" 2>&1
      grep -qx "$p $max -> $max ${ep_end[$p]} 0" "$WORK/ep-ofle-after.txt" || {
        echo "$EP_T-$p: OffsetForLeaderEpoch($max) answers '$(grep "^$p $max " "$WORK/ep-ofle-after.txt")', want epoch $max ending at ${ep_end[$p]}"
        rc=1
      }
      # the 20 records written on the destination must be there (in batches at/after the end)
      [ "$(awk -v e="${ep_end[$p]}" '$1 >= e { n += $2 - $1 + 1 } END { print n + 0 }' "$WORK/ep-batches-$p.txt")" -ge 20 ] || rc=1
    done
    return $rc
  }
  until_ok 60 "every batch written after the failover has an epoch above every mirrored batch" ep_after_failover &&
    cat "$WORK/last"

  step "epochs: both groups resume on the (now writable) destination from their commits: exactly the $((20 * EP_PARTS)) new records"
  "${ME2E[@]}" ends "$D" "$EP_T" >"$WORK/ep-ends2.txt"
  "$PEER" consume-group --bootstrap "$D" --topic "$EP_T" --group ep-java --sessions 1 \
    --duration-ms 3000 --min-records $((20 * EP_PARTS)) >"$WORK/ep-java2.log" 2>&1 &
  pid=$!
  ep_epy rdk-consume "$D" "$EP_T" ep-rdk 3 1 $((20 * EP_PARTS)) >"$WORK/ep-rdk2.log" 2>&1
  rc=$?
  wait "$pid" || { fail "epochs: Java consume-group after the failover failed:"; sed 's/^/  /' "$WORK/ep-java2.log" | tail -8; }
  [ "$rc" = 0 ] || { fail "epochs: librdkafka consumer after the failover failed:"; sed 's/^/  /' "$WORK/ep-rdk2.log" | tail -8; }
  jout=$(grep '^consume-group: [0-9]* records in' "$WORK/ep-java2.log")
  rout=$(grep '^rdk-consume: [0-9]* records in' "$WORK/ep-rdk2.log")
  for m in "java|$jout" "librdkafka|$rout"; do
    echo "${m#*|}"
    read -r _ n _ <<<"${m#*|}"
    if [ "$n" = $((20 * EP_PARTS)) ] && ep_epy committed-check "$WORK/ep-ends2.txt" "${m##* committed }"; then
      echo "ok: the ${m%%|*} group read the $n new records and committed the new log ends"
    else
      fail "epochs: the ${m%%|*} group after the failover: '${m#*|}', want $((20 * EP_PARTS)) records and commits at $(tr '\n' ' ' <"$WORK/ep-ends2.txt")"
    fi
  done
}
