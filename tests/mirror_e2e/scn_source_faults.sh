# shellcheck shell=bash
# scn_source_faults.sh -- scenario source-faults of tests/mirror_e2e/run.sh (sourced by it; uses
# its helpers and variables: S, D, CL, KM, CMP, BUILD, PY, ME2E, WORK, SRC, DST, SRC_PORT, fail,
# step, until_ok, cmp_topics). Its own topics sf-a, sf-b, sf-c (mirror msf) on the shared
# source, and sf-x (mirror msf2) on a 1-broker source of its own (SFALT) that it stops and
# replaces by another cluster at the same address; needs no other scenario's state.
# docs/testing-mirror.md "Scenario source-faults".

SF=("$PY" "$HERE/source_faults.py")
SF_TOPICS=(sf-a sf-b sf-c)
SF_WRITERS=()
SFALT=mirror-e2e-sfalt

# sf_writer TOPIC -- a background writer of TOPIC (2 partitions) on the shared source
sf_writer() {
  rm -f "$WORK/sf-stop-$1"
  "${SF[@]}" produce-loop "$S" "$WORK/sf-stop-$1" "$1" 2 >"$WORK/sf-writer-$1.log" 2>&1 &
  SF_WRITERS+=($!)
}
# sf_writers_stop -- stop every writer (each flushes what it sent) and print their counts
sf_writers_stop() {
  local p
  touch "${SF_TOPICS[@]/#/$WORK/sf-stop-}"
  for p in "${SF_WRITERS[@]}"; do wait "$p"; done
  SF_WRITERS=()
  echo "  writers: $(cat "$WORK"/sf-writer-*.log 2>/dev/null | grep acknowledged | tr '\n' ' ')"
}
# sf_operator_retries MIRROR TOPIC-PART -- how often the destination brokers logged an operator
# retry of the partition (km_mpart: "... FAILED -> MIRRORING (operator, ...)")
sf_operator_retries() {
  cat "$KPEER_HOME/$DST"/node*.log | grep -c "$2 of mirror $1: FAILED -> [A-Z]* (operator"
}
sf_expect() { "${SF[@]}" expect "$KM" "$D" "$@"; }

# The 1-broker source of mirror msf2: sf_alt_start ID DIR starts kbroker with cluster.id ID and
# its data in DIR at $SFQ (client) / $SFQ+1 (controller); sf_alt_stop stops it.
sf_alt_start() {
  solo_start "$2" "$1" "$SFQ" "$2/node1.pid" auto.create.topics.enable=false
  "${SF[@]}" wait-up "127.0.0.1:$SFQ" 60
}
sf_alt_stop() {
  local f
  for f in "$KPEER_HOME/$SFALT"/*/node1.pid; do solo_stop "$f" "$SFALT"; done
}

scenario_source_faults() {
  local t0=$SECONDS
  sf_main
  sf_writers_stop >/dev/null
  sf_alt_stop
  echo "source-faults: $((SECONDS - t0))s"
}

sf_main() {
  local t rc n id_old id_new id_dst q cid1 cid2 dirs p i
  step "source-faults: sf-a, sf-b, sf-c (2 partitions, RF 3; leaders: sf-a 1,2  sf-b 3,1  sf-c 2,3) written continuously; mirror msf"
  "${SF[@]}" create "$S" 3 sf-a=1,2 sf-b=3,1 sf-c=2,3 || { fail "create sf- topics"; return; }
  for t in "${SF_TOPICS[@]}"; do sf_writer "$t"; done
  # Short timeouts so that an unreachable broker shows within seconds.
  printf 'bootstrap.servers=%s\nrequest.timeout.ms=3000\nsocket.connection.setup.timeout.ms=2000\nfetch.backoff.ms=200\n' \
    "$S" >"$WORK/msf.properties"
  mirror_create msf "$WORK/msf.properties" || return
  "$KM" --bootstrap-server "$D" --start --mirror msf --topic 'sf-.*' --wait --timeout-ms 60000 \
    >"$WORK/sf-start.out" 2>&1 || { cat "$WORK/sf-start.out"; fail "kafka-mirrors --start msf --wait"; return; }
  until_ok 60 "msf's 6 partitions MIRRORING, no error" sf_expect msf sf-a-0=MIRRORING! sf-a-1=MIRRORING! \
    sf-b-0=MIRRORING! sf-b-1=MIRRORING! sf-c-0=MIRRORING! sf-c-1=MIRRORING! || return

  # (1) Source broker 1 (the only controller, so nobody moves leaders meanwhile) stopped with
  # SIGSTOP: its connections hang (timeouts); broker 2 killed with SIGKILL: refused.
  step "source-faults: SIGSTOP source broker 1 (the controller), kill -9 source broker 2"
  "$CL" pause 1 --name "$SRC" || fail "SIGSTOP node 1"
  "$CL" kill 2 --name "$SRC" || fail "SIGKILL node 2"
  until_ok 60 "partitions led by brokers 1 and 2 stay MIRRORING and show their error and retry count" \
    sf_expect msf 'sf-a-0=MIRRORING~^sf-a-0 ' 'sf-b-1=MIRRORING~^sf-b-1 ' \
    'sf-a-1=MIRRORING~^sf-a-1 ' 'sf-c-0=MIRRORING~^sf-c-0 '
  grep '^ok' "$WORK/last" | sed 's/^/  /'
  "$KM" --bootstrap-server "$D" --describe --mirror msf | sed 's/^/  | /'
  step "source-faults: SIGCONT broker 1, restart broker 2: the partitions recover by themselves"
  "$CL" resume 1 --name "$SRC" || fail "SIGCONT node 1"
  "$CL" restart 2 --name "$SRC" --wait >"$WORK/sf-restart.log" 2>&1 || { cat "$WORK/sf-restart.log"; fail "restart node 2"; }
  until_ok 120 "msf's 6 partitions MIRRORING again, no error" sf_expect msf sf-a-0=MIRRORING! sf-a-1=MIRRORING! \
    sf-b-0=MIRRORING! sf-b-1=MIRRORING! sf-c-0=MIRRORING! sf-c-1=MIRRORING! || return
  sf_writers_stop
  until_ok 120 "msf caught up after the source faults" "${ME2E[@]}" caught-up "$KM" "$D" "$S" msf 6 || return
  tail -1 "$WORK/last"
  CMP_PARTS="0 1" cmp_topics "${SF_TOPICS[@]}"

  # (2) sf-b deleted, then re-created with another topic id.
  step "source-faults: delete sf-b on the source while sf-a and sf-c are written"
  sf_writer sf-a
  sf_writer sf-c
  id_old=$("${SF[@]}" topic-id "$S" sf-b)
  "${SF[@]}" delete "$S" sf-b || { fail "delete sf-b"; return; }
  until_ok 60 "sf-b's partitions FAILED (deleted, not retryable), the others MIRRORING" \
    sf_expect msf 'sf-b-0=FAILED~sf-b-0.*deleted' 'sf-b-1=FAILED~sf-b-1.*deleted' \
    sf-a-0=MIRRORING sf-a-1=MIRRORING sf-c-0=MIRRORING sf-c-1=MIRRORING || return
  grep '^ok   sf-b' "$WORK/last" | sed 's/^/  /'
  "${ME2E[@]}" ends "$D" sf-a >"$WORK/sf-a-before"
  until_ok 60 "sf-a keeps mirroring while sf-b is FAILED (destination log ends move)" \
    "${SF[@]}" grew "$D" sf-a "$WORK/sf-a-before"
  read -r rc _ < <("${ME2E[@]}" produce-one "$D" sf-b 0)
  [ "$rc" = 147 ] && echo "ok: FAILED sf-b is still read-only (Produce: 147)" ||
    fail "Produce to FAILED sf-b: error code $rc, want READ_ONLY_TOPIC 147"

  step "source-faults: re-create sf-b (new topic id) and write it: stays FAILED; --recover is refused by the source check"
  "${SF[@]}" create "$S" 3 sf-b=3,1 || { fail "re-create sf-b"; return; }
  id_new=$("${SF[@]}" topic-id "$S" sf-b)
  [ "$id_new" != "$id_old" ] && echo "ok: sf-b's topic id $id_old -> $id_new" || fail "sf-b kept its topic id $id_old"
  sf_writer sf-b
  sf_expect msf 'sf-b-0=FAILED~deleted' 'sf-b-1=FAILED~deleted' >"$WORK/last" 2>&1 ||
    { fail "sf-b not FAILED after its re-creation:"; cat "$WORK/last"; }
  n=$(sf_operator_retries msf sf-b-0)
  "$KM" --bootstrap-server "$D" --recover --mirror msf --topic sf-b >"$WORK/sf-recover.out" 2>&1 ||
    { cat "$WORK/sf-recover.out"; fail "kafka-mirrors --recover sf-b: exit $?"; }
  until_ok 30 "the operator retry of sf-b-0 ran" test "$(sf_operator_retries msf sf-b-0)" -gt "$n"
  until_ok 60 "sf-b FAILED again: the source topic has another id (re-created)" \
    sf_expect msf 'sf-b-0=FAILED~sf-b-0.*re-created' 'sf-b-1=FAILED~sf-b-1.*re-created' || return
  grep '^ok' "$WORK/last" | sed 's/^/  /'
  step "source-faults: the operator's fix for a re-created topic: delete sf-b on the destination, --start it again"
  "${SF[@]}" delete "$D" sf-b || { fail "delete sf-b on the destination"; return; }
  "$KM" --bootstrap-server "$D" --start --mirror msf --topic sf-b --wait --timeout-ms 60000 \
    >"$WORK/sf-start2.out" 2>&1 || { cat "$WORK/sf-start2.out"; fail "--start sf-b again"; return; }
  id_dst=$("${SF[@]}" topic-id "$D" sf-b)
  [ "$id_dst" = "$id_new" ] && echo "ok: the destination's sf-b has the new source topic id" ||
    fail "destination sf-b has topic id $id_dst, the source's is $id_new"

  # (3) The source of msf2 replaced by another cluster at the same address.
  step "source-faults: a 1-broker source of its own (cluster A) with sf-x, mirror msf2"
  SFQ=$(solo_port $((SRC_PORT + 100)))
  # two cluster ids, told apart by their first character
  cid1=$(solo_cluster_id A)
  cid2=$(solo_cluster_id B)
  # --inject sf-same-cluster: B gets A's id, so the cluster check cannot fire (step 4 must FAIL)
  [ "$INJECT" != sf-same-cluster ] || cid2=$cid1
  rm -rf "${KPEER_HOME:?}/$SFALT"
  sf_alt_start "$cid1" "$KPEER_HOME/$SFALT/a" || { fail "start cluster A at 127.0.0.1:$SFQ"; return; }
  "${SF[@]}" create "127.0.0.1:$SFQ" 1 sf-x=1,1 || { fail "create sf-x on A"; return; }
  seq 1 300 | sed 's/.*/x&:cluster A record &/' | timeout 60 kcat -b "127.0.0.1:$SFQ" -P -t sf-x -K: -z lz4 ||
    fail "produce sf-x on A"
  printf 'bootstrap.servers=127.0.0.1:%s\nrequest.timeout.ms=3000\nsocket.connection.setup.timeout.ms=2000\nfetch.backoff.ms=200\n' \
    "$SFQ" >"$WORK/msf2.properties"
  mirror_create msf2 "$WORK/msf2.properties" || return
  "$KM" --bootstrap-server "$D" --start --mirror msf2 --topic sf-x --wait --timeout-ms 60000 \
    >"$WORK/sf-start3.out" 2>&1 || { cat "$WORK/sf-start3.out"; fail "--start msf2 sf-x"; return; }
  until_ok 60 "msf2 caught up with A" "${ME2E[@]}" caught-up "$KM" "$D" "127.0.0.1:$SFQ" msf2 2 || return

  step "source-faults: cluster A stopped, cluster B (another cluster.id, its own sf-x) started at the same address"
  sf_alt_stop
  sf_alt_start "$cid2" "$KPEER_HOME/$SFALT/b" || { fail "start cluster B at 127.0.0.1:$SFQ"; return; }
  "${SF[@]}" create "127.0.0.1:$SFQ" 1 sf-x=1,1 || { fail "create sf-x on B"; return; }
  seq 1 50 | sed 's/.*/y&:cluster B record &/' | timeout 60 kcat -b "127.0.0.1:$SFQ" -P -t sf-x -K: ||
    fail "produce sf-x on B"
  until_ok 60 "msf2's partitions FAILED: the source answers as another cluster (not retryable)" \
    sf_expect msf2 "sf-x-0=FAILED~sf-x-0.*cluster $cid2" "sf-x-1=FAILED~sf-x-1.*cluster $cid2" || return
  grep '^ok' "$WORK/last" | sed 's/^/  /'
  "${ME2E[@]}" ends "$D" sf-a >"$WORK/sf-a-before"
  until_ok 60 "msf's sf-a keeps mirroring while msf2 is FAILED" "${SF[@]}" grew "$D" sf-a "$WORK/sf-a-before"
  n=$(sf_operator_retries msf2 sf-x-0)
  "$KM" --bootstrap-server "$D" --recover --mirror msf2 --topic sf-x >"$WORK/sf-recover2.out" 2>&1 ||
    { cat "$WORK/sf-recover2.out"; fail "kafka-mirrors --recover msf2 (B still there)"; }
  until_ok 30 "the operator retry of sf-x-0 ran" test "$(sf_operator_retries msf2 sf-x-0)" -gt "$n"
  until_ok 60 "--recover while B answers: FAILED again" \
    sf_expect msf2 "sf-x-0=FAILED~cluster $cid2" "sf-x-1=FAILED~cluster $cid2" || return

  step "source-faults: B stopped, A back (same data): --recover --wait mirrors on, byte-identical"
  sf_alt_stop
  sf_alt_start "$cid1" "$KPEER_HOME/$SFALT/a" || { fail "restart cluster A"; return; }
  seq 301 400 | sed 's/.*/x&:cluster A record &/' | timeout 60 kcat -b "127.0.0.1:$SFQ" -P -t sf-x -K: -z zstd ||
    fail "produce sf-x on A again"
  "$KM" --bootstrap-server "$D" --recover --mirror msf2 --topic sf-x --wait --timeout-ms 60000 \
    >"$WORK/sf-recover3.out" 2>&1 || { cat "$WORK/sf-recover3.out"; fail "--recover msf2 --wait after A is back"; return; }
  until_ok 60 "msf2 caught up with A again" "${ME2E[@]}" caught-up "$KM" "$D" "127.0.0.1:$SFQ" msf2 2 || return
  for p in 0 1; do
    dirs=("$KPEER_HOME/$SFALT/a/data/sf-x-$p")
    for i in 1 2 3; do dirs+=("$("$CL" partdir "$i" sf-x "$p" --name "$DST")"); done
    if until_ok 60 "sf-x-$p: A's log and the 3 destination replicas byte-identical" \
      "$CMP" --same-end "${dirs[@]}"; then
      grep '^replicacmp: OK' "$WORK/last" | sed 's/^/  /'
    fi
  done
  step "source-faults: writers stopped; msf (sf-b mirrored anew from the re-created topic) caught up, byte-identical"
  sf_writers_stop
  until_ok 120 "msf caught up" "${ME2E[@]}" caught-up "$KM" "$D" "$S" msf 6 || return
  tail -1 "$WORK/last"
  CMP_PARTS="0 1" cmp_topics "${SF_TOPICS[@]}"
  # msf2's source goes away with this scenario: its topic stops (failover with the source dead).
  "$KM" --bootstrap-server "$D" --stop --mirror msf2 --topic '.*' --wait --timeout-ms 60000 \
    >"$WORK/sf-stop2.out" 2>&1 || { cat "$WORK/sf-stop2.out"; fail "--stop msf2"; }
}
