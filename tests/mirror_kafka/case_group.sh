# shellcheck shell=bash
# case_group.sh -- case group of tests/mirror_kafka/run.sh (sourced by it; uses its helpers and
# variables: S, D, RF, PY, E2E, PEER, KM, ME2E, WORK, fail, step, until_ok, injected,
# mirror_start).
#
# Failover with a Java consumer group: kg-t (2 partitions) gets KG_A records per partition, the
# Java group kg-java (peer-tools consume-group: subscribe, commit after every poll) reads them
# all on Kafka and commits; KG_B more per partition nobody reads on Kafka. The mirror's group
# offset sync (sync.group.offsets.interval.ms=1000) copies the commit (OffsetFetch on both
# sides: offsets and leader epochs equal); --stop --wait fails the topic over; KG_D records are
# written on the destination; the same group on the destination resumes exactly at the commit:
# every record from it once, the mirrored ones with their Kafka values, then the new ones.
# Records are "p<P> r<OFFSET>" (kcat, one record a batch), so a value names its source offset
# (tests/mirror_e2e/sync-groups.py check-records).

KG_T=kg-t
KG_A=(40 25)
KG_B=(15 30)
KG_D=3
kg_py() { "$PY" "$E2E/sync-groups.py" "$@"; }
# kg_produce BOOTSTRAP PARTITION FIRST COUNT [TAG] -- idempotent: a retried record keeps its place
# (seen: the first record written on the destination right after the failover was retried and
# landed after the next two without idempotence)
kg_produce() {
  seq "$3" $(($3 + $4 - 1)) | sed "s/.*/p$2 ${5:-r}&/" |
    timeout 60 kcat -b "$1" -P -t "$KG_T" -p "$2" -X acks=all -X linger.ms=0 -X batch.num.messages=1 \
      -X enable.idempotence=true \
      2>>"$WORK/kg-kcat.log" || { fail "group: kcat produce to $KG_T-$2 on $1"; return 1; }
}
# kg_same -- the destination's commits of kg-java on kg-t equal Kafka's (offsets and epochs)
kg_same() {
  local s d
  s=$(kg_py committed "$S" kg-java "$KG_T") || return 1
  d=$(kg_py committed "$D" kg-java "$KG_T") || return 1
  echo "kg-java $KG_T: Kafka $s, destination $d"
  [ -n "$s" ] && [ "$s" = "$d" ]
}

case_group() {
  local p spec=
  step "group: $KG_T (2 partitions, RF $RF) on Kafka, ${KG_A[0]}/${KG_A[1]} records; mirror mkg (group sync every 1 s) started"
  "${ME2E[@]}" create-topics "$S" 2 "$RF" "$KG_T" || { fail "group: create $KG_T"; return; }
  for p in 0 1; do kg_produce "$S" "$p" 0 "${KG_A[$p]}" || return; done
  mirror_start mkg "$KG_T" sync.group.offsets.interval.ms=1000 'groups.include=kg-.*' \
    sync.topic.configs.interval.ms=0 sync.acls.interval.ms=0 || return

  step "group: the Java group kg-java reads everything on Kafka and commits; ${KG_B[0]}/${KG_B[1]} more records nobody reads there"
  "$PEER" consume-group --bootstrap "$S" --topic "$KG_T" --group kg-java --sessions 1 \
    --duration-ms 1000 --min-records $((KG_A[0] + KG_A[1])) --timeout-ms 60000 \
    >"$WORK/kg-java-src.log" 2>&1 || { fail "group: Java consume-group on Kafka:"; tail -5 "$WORK/kg-java-src.log"; return; }
  grep '^consume-group: [0-9]* records' "$WORK/kg-java-src.log"
  for p in 0 1; do kg_produce "$S" "$p" "${KG_A[$p]}" "${KG_B[$p]}" || return; done
  local c
  c=$(kg_py committed "$S" kg-java "$KG_T" | sed 's/@[-0-9]*//g')
  [ "$c" = "0=${KG_A[0]},1=${KG_A[1]}" ] ||
    { fail "group: Kafka's commit of kg-java is '$c', want 0=${KG_A[0]},1=${KG_A[1]}"; return; }
  echo "ok: Kafka holds kg-java's commit $c"

  step "group: the commit reaches the destination (offsets and leader epochs); caught up; --stop --wait"
  until_ok 60 "$KG_T caught up" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mkg 2 || return
  until_ok 60 "kg-java's commit synced" kg_same || return
  tail -1 "$WORK/last"
  "$KM" --bootstrap-server "$D" --stop --mirror mkg --topic "$KG_T" --wait --timeout-ms 60000 \
    >"$WORK/kg-stop.out" 2>&1 || { cat "$WORK/kg-stop.out"; fail "group: kafka-mirrors --stop --mirror mkg"; return; }
  for p in 0 1; do kg_produce "$D" "$p" 0 "$KG_D" d || return; done

  if injected group-skip; then
    kg_py commit "$D" kg-java "$KG_T:0=$((KG_A[0] + 1))" >/dev/null
    echo "INJECTED: kg-java's destination commit on partition 0 moved to $((KG_A[0] + 1)) (the run must fail)"
  fi
  step "group: on the destination kg-java resumes at its commit: every record from it once, then the $KG_D new ones per partition"
  "$PEER" consume-group --bootstrap "$D" --topic "$KG_T" --group kg-java --sessions 1 \
    --duration-ms 1000 --min-records $((KG_B[0] + KG_B[1] + 2 * KG_D)) --timeout-ms 60000 \
    --records-out "$WORK/kg-java-dst.txt" >"$WORK/kg-java-dst.log" 2>&1 ||
    { fail "group: Java consume-group on the destination:"; tail -5 "$WORK/kg-java-dst.log"; return; }
  grep '^consume-group: [0-9]* records' "$WORK/kg-java-dst.log"
  for p in 0 1; do
    spec+="${spec:+,}$p=${KG_A[$p]}-$((KG_A[p] + KG_B[p]))+$KG_D"
  done
  kg_py check-records "$WORK/kg-java-dst.txt" "$KG_T" "$spec" || fail "group: what kg-java read on the destination (above)"
}
