# shellcheck shell=bash
# scn_leader_moves.sh -- scenario leader-moves of tests/mirror_e2e/run.sh (sourced by it; uses its
# helpers and variables: S, D, CL, KM, PY, ME2E, PEER, WORK, KPEER_HOME, DST, fail, step, until_ok,
# cmp_topics). Needs nothing of the other scenarios: its own topics lm-0..lm-2 and mirror mlm.
#
# While kcat (idempotent) and a transactional Java producer write to the source and mirror mlm
# mirrors them, destination brokers are killed with SIGKILL and restarted: the leader of a mirror
# partition together with the leader of that partition's __mirror_state shard (two brokers), a
# broker leading both, and then each alone. After every kill the partition must mirror again on
# its new leader; at the end the usual identity checks (docs/testing-mirror.md).

LM_TOPICS=(lm-0 lm-1 lm-2)
LM_PY=("$PY" "$HERE/leader_moves.py")

# lm_node_addr ID -- the client address of destination broker ID (bootstrap order = node order)
lm_node_addr() { cut -d, -f"$1" <<<"$D"; }

# lm_kill_round WHAT TOPIC PARTITION VICTIMS -- kill -9 the destination brokers VICTIMS (comma-
# separated node ids), wait until TOPIC-PARTITION mirrors again on a surviving leader (new source
# records arrive there), restart the victims and wait until every ISR is full again.
lm_kill_round() {
  local what=$1 t=$2 p=$3 victims=$4 end_before v alive= rc=0
  end_before=$("${ME2E[@]}" ends "$D" "$t" | sed -n "s/^$t-$p //p")
  [ -n "$end_before" ] || { fail "leader-moves: no log end for $t-$p"; return 1; }
  # A broker that stopped answering (or was fenced for missing heartbeats) before the kill is a
  # hang, not a leader move: its threads' stacks are kept for a look.
  until_ok 30 "every destination broker answers Metadata listing the 3 brokers" \
    timeout 20 "${LM_PY[@]}" brokers-up "$D" || { lm_stuck_note; return 1; }
  step "leader-moves: $what: kill -9 destination broker(s) $victims ($t-$p at $end_before)"
  for v in ${victims//,/ }; do "$CL" kill "$v" --name "$DST" 2>&1 | tail -1; done
  for v in 1 2 3; do [[ ",$victims," == *",$v,"* ]] || { alive=$v; break; }; done
  if until_ok 90 "$t-$p mirroring on a new leader" \
    "${LM_PY[@]}" resumed "$(lm_node_addr "$alive")" "$KM" mlm "$t" "$p" "$victims" "$end_before"; then
    tail -1 "$WORK/last"
  else
    rc=1
    lm_stuck_note
  fi
  # The victims come back whatever happened (the scenarios after this one need all brokers).
  for v in ${victims//,/ }; do "$CL" restart "$v" --name "$DST" 2>&1 | tail -1; done
  until_ok 120 "the restarted broker(s) back in every ISR" \
    "${LM_PY[@]}" isr-full "$D" 3 "${LM_TOPICS[@]}" || return 1
  return "${rc:-0}"
}

# lm_stuck_note -- after a failed wait: which destination brokers the controller fenced for
# missing heartbeats, and each broker's last log line (a broker that stopped logging and
# heartbeating hangs; seen once, docs/testing-mirror.md)
lm_stuck_note() {
  local i pid
  grep -h 'fenced: no heartbeat' "$KPEER_HOME/$DST/node4.log" | tail -3 | sed 's/^/  controller: /'
  for i in 1 2 3; do
    echo "  node $i last: $(grep -a '^20' "$KPEER_HOME/$DST/node$i.log" | tail -1 | cut -c1-160)"
    pid=$("$CL" pid "$i" --name "$DST" 2>/dev/null) || continue
    command -v gdb >/dev/null || continue
    timeout 60 gdb -batch -p "$pid" -ex 'thread apply all bt' >"$WORK/lm-stacks-node$i.txt" 2>&1
    echo "  node $i (pid $pid): thread stacks in $WORK/lm-stacks-node$i.txt"
  done
}

# lm_pick SAME -- from $WORK/lm-places (topic partition leader shard shard_leader state_epoch), the
# first partition whose leader is (SAME=1) / is not (SAME=0) its shard's leader: "topic part
# leader shard_leader"; nothing when there is none.
lm_pick() {
  awk -v same="$1" '(same == 1) == ($3 == $5) { print $1, $2, $3, $5; exit }' "$WORK/lm-places"
}

lm_places() {
  until_ok 60 "__mirror_state shards and their leaders located (ReadMirrorStates: MIRRORING at the shard's leader, NOT_COORDINATOR elsewhere)" \
    "${LM_PY[@]}" places "$D" mlm "${LM_TOPICS[@]}" || return 1
  cp "$WORK/last" "$WORK/lm-places"
}

scenario_leader_moves() {
  local t= p l sl k=0 j=0 rc pk pj v
  rm -f "$WORK/lm-stop" "$WORK"/lm-*.rounds
  step "leader-moves: create ${LM_TOPICS[*]} (4 partitions, RF 3) on the source; producers start"
  "${ME2E[@]}" create-topics "$S" 4 3 "${LM_TOPICS[@]}" || { fail "create source topics"; return; }
  # kcat: rounds of 20 keyed records to lm-0 (zstd) and lm-2 (uncompressed), idempotent; the
  # Java producer: runs of 200 records to lm-1 (snappy), transactions of 20, every 5th aborted.
  (
    n=0
    while [ ! -e "$WORK/lm-stop" ]; do
      n=$((n + 1))
      for tz in lm-0:zstd lm-2:none; do
        seq 1 20 | sed "s/.*/k&:round $n record & of ${tz%%:*}/" |
          timeout 60 kcat -b "$S" -P -t "${tz%%:*}" -K: -z "${tz#*:}" -X enable.idempotence=true \
            -X linger.ms=20 || { echo "kcat round $n to ${tz%%:*} failed"; exit 1; }
      done
      echo "$n" >"$WORK/lm-kcat.rounds"
      sleep 0.5 # the write rate (about a round a second), not a wait for anything
    done
  ) >"$WORK/lm-kcat.log" 2>&1 &
  pk=$!
  # A run whose Admin lookup of the partition count timed out (5 s in peer-tools; the loaded
  # machine sometimes takes longer) sent nothing and is run again, at most twice.
  (
    n=0
    while [ ! -e "$WORK/lm-stop" ]; do
      n=$((n + 1))
      for try in 1 2 3; do
        "$PEER" produce --bootstrap "$S" --topic lm-1 --count 200 --seed "$n" --compression snappy \
          --transactional-id lm-t1 --txn-records 20 --abort-every 5 >"$WORK/lm-java.run" 2>&1 && break
        cat "$WORK/lm-java.run"
        grep -q 'Call: \(listNodes\|describeTopics\)' "$WORK/lm-java.run" && [ "$try" -lt 3 ] ||
          { echo "java run $n failed"; exit 1; }
        echo "java run $n: the partition count lookup timed out before anything was sent; again"
      done
      cat "$WORK/lm-java.run"
      echo "$n" >"$WORK/lm-java.rounds"
    done
  ) >"$WORK/lm-java.log" 2>&1 &
  pj=$!

  step "leader-moves: kafka-mirrors --create mlm, --start --topic 'lm-.*' while they write"
  printf 'bootstrap.servers=%s\n' "$S" >"$WORK/mlm.properties"
  mirror_create mlm "$WORK/mlm.properties" &&
    "$KM" --bootstrap-server "$D" --start --mirror mlm --topic 'lm-.*' --wait --timeout-ms 90000 \
      >"$WORK/lm-start.out" 2>&1
  rc=$?
  tail -n 3 "$WORK/lm-start.out"
  [ "$rc" = 0 ] || { fail "kafka-mirrors --start mlm --wait: exit $rc"; touch "$WORK/lm-stop"; wait "$pk" "$pj"; return; }
  lm_places || { touch "$WORK/lm-stop"; wait "$pk" "$pj"; return; }
  cp "$WORK/lm-places" "$WORK/lm-places.0"
  sed 's/^/  /' "$WORK/lm-places"

  # Round 1: a partition's leader and its shard's leader are two brokers, killed together.
  read -r t p l sl < <(lm_pick 0)
  if [ -n "${t:-}" ]; then
    lm_kill_round "leader of $t-$p (broker $l) and of its shard (broker $sl) together" "$t" "$p" "$l,$sl" && k=$((k + 1))
  else
    echo "note: every partition's leader also leads its shard; the two-broker case is not run"
  fi
  # Round 2: one broker leads both.
  t=
  lm_places && read -r t p l sl < <(lm_pick 1)
  if [ -n "${t:-}" ]; then
    lm_kill_round "broker $l leading $t-$p and its shard" "$t" "$p" "$l" && k=$((k + 1))
  else
    echo "note: no partition's leader leads its shard; the one-broker case is not run"
  fi
  # Round 3: separately: the partition's leader, then (once back) the leader of its shard.
  t=
  lm_places && read -r t p l sl < <(lm_pick 0)
  if [ -n "${t:-}" ]; then
    lm_kill_round "leader of $t-$p (broker $l) alone" "$t" "$p" "$l" && k=$((k + 1))
    sl=
    lm_places && sl=$(awk -v t="$t" -v p="$p" '$1 == t && $2 == p { print $5 }' "$WORK/lm-places")
    if [ -n "$sl" ] && lm_kill_round "leader of $t-$p's shard (broker $sl) alone" "$t" "$p" "$sl"; then
      k=$((k + 1))
    fi
  fi
  echo "$k kill rounds done"

  step "leader-moves: producers stop; wait for the catch-up"
  touch "$WORK/lm-stop"
  wait "$pk" || fail "kcat producer: $(tail -3 "$WORK/lm-kcat.log")"
  wait "$pj" || fail "Java producer: $(grep -i -m3 'fail\|exception' "$WORK/lm-java.log")"
  local kr jr
  kr=$(cat "$WORK/lm-kcat.rounds" 2>/dev/null || echo 0)
  jr=$(cat "$WORK/lm-java.rounds" 2>/dev/null || echo 0)
  echo "kcat: $kr rounds of 20 records to lm-0 and lm-2; Java: $jr transactional runs of 200 records to lm-1"
  until_ok 180 "12 partitions caught up" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mlm 12 || return
  tail -1 "$WORK/last"
  if "${ME2E[@]}" fanout "$KM" "$D" mlm 12 >"$WORK/lm-fanout.out" 2>&1; then
    echo "ok: DescribeMirrors through each destination broker lists all 12 partitions exactly once"
  else
    fail "DescribeMirrors through one broker does not list every partition once:"
    sed 's/^/  /' "$WORK/lm-fanout.out"
  fi

  # No state transition while the leaders moved: a new leader that went through PREPARING (or
  # FAILED, EPOCH_FENCING) would have raised the partition's state epoch.
  if lm_places; then
    if awk '{ print $1, $2, $6 }' "$WORK/lm-places.0" | cmp -s - <(awk '{ print $1, $2, $6 }' "$WORK/lm-places"); then
      echo "ok: every partition's state epoch is the one before the kills (no state transition)"
    else
      fail "state epochs moved (topic partition epoch, before | after):"
      paste -d'|' <(awk '{ print $1, $2, $6 }' "$WORK/lm-places.0") <(awk '{ print $1, $2, $6 }' "$WORK/lm-places") | sed 's/^/  /'
    fi
  fi

  step "leader-moves: no truncation of a mirror log (the host logs every plugin truncation)"
  # kbroker logs "plugin kmirror truncated T-P ..." for every kbx log_truncate that cut
  # something (PREPARING, divergence, below the source's log start): none may name our topics.
  # "T-P: truncated to offset O" lines are kbroker's follower replication (a restarted or
  # surviving follower cutting a tail the new leader never had: above the high watermark,
  # acknowledged to no one, and fetched again from the source by the new leader); reported only.
  v=$(cat "$KPEER_HOME/$DST"/node[123].log | grep -c 'plugin kmirror truncated lm-')
  if [ "$v" = 0 ]; then
    echo "ok: no plugin truncation of lm-* on any destination broker"
  else
    fail "$v plugin truncation(s) of a mirror log:"
    grep -h 'plugin kmirror truncated lm-\|of mirror mlm:.*truncat' "$KPEER_HOME/$DST"/node[123].log | sed 's/^/  /' | head
  fi
  j=$(cat "$KPEER_HOME/$DST"/node[123].log | grep -cE '\[api\] lm-[0-9]+-[0-9]+: truncated')
  echo "follower truncations of lm-* (kbroker replication, not the mirror's): $j"
  grep -hE '\[api\] lm-[0-9]+-[0-9]+: truncated' "$KPEER_HOME/$DST"/node[123].log | sed 's/^/  /' | head -5

  step "leader-moves: kc_replicacmp on 3 source + 3 destination replicas (no batch missing or twice)"
  cmp_topics "${LM_TOPICS[@]}"

  step "leader-moves: kafka-python reads both sides (read_uncommitted, read_committed)"
  cat >"$WORK/lm-expect.json" <<EOF
{"lm-0": {"uncommitted": $((kr * 20)), "committed": $((kr * 20))},
 "lm-1": {"uncommitted": $((jr * 200)), "committed": $((jr * 160))},
 "lm-2": {"uncommitted": $((kr * 20)), "committed": $((kr * 20))}}
EOF
  "${ME2E[@]}" read-compare "$S" "$D" "$WORK/lm-expect.json" >"$WORK/lm-read.out" 2>&1 ||
    fail "kafka-python read-back differs (see below)"
  grep -v '^ok ' "$WORK/lm-read.out" | head -20
  echo "$(grep -c '^ok ' "$WORK/lm-read.out") read checks ok"
}
