# shellcheck shell=bash
# scn_sync_groups.sh -- scenario sync-groups of tests/mirror_e2e/run.sh (sourced by it; uses its
# helpers and variables: S, D, CL, KM, PY, PEER, ME2E, WORK, DST, INJECT, fail, step, until_ok).
# Independent of the other scenarios: its own topics sg-t and sg-u, mirror msg, groups sg-java,
# sg-rdk, sg-live, sg-fail and sg-later; it fails over sg-t only.
#
# Issue 6: a consumer group consumes part of a mirrored topic on the source and commits; after
# the next sync and a failover the same group id on the destination (Java for sg-java,
# librdkafka for sg-rdk) resumes at exactly the committed offset (every record once, payloads
# compared) with a bounded number of Metadata requests; after failover, source commits no
# longer reach the destination (while the still-running sg-u of the same mirror shows the sync
# goes on). Also: a group with a member on the destination is left alone, a source reset
# backwards is copied, one failing group (sg-fail, failed by the test hook
# KMIRROR_TEST_SYNC_GROUPS_FAIL that run.sh sets) does not stop the others.

SG_T=sg-t
SG_U=sg-u
# Records per partition of sg-t written in each phase (p0 p1): before the Java group reads,
# before the librdkafka group reads, after both read (the part never consumed on the source),
# on the destination after the failover.
SG_A=(60 40)
SG_B=(30 70)
SG_C=(20 10)
SG_D=(5 5)
# Metadata requests the destination brokers may answer while both groups read (one session
# each): a consumer asks at start, on joining and when it looks a leader or coordinator up
# again, a few each; a consumer refreshing in a loop (a committed epoch the destination never
# shows) asks every retry backoff (100 ms), far more. Background: other mirrors' syncs.
SG_MAX_METADATA=30

sg_py() { "$PY" "$HERE/sync-groups.py" "$@"; }
sg_epy() { "$PY" "$HERE/epochs.py" "$@"; }
# sg_produce BOOTSTRAP TOPIC PARTITION FIRST COUNT [TAG] -- records "p<P> <TAG><I>" for I =
# FIRST.. (TAG r: I is the offset on the source; one record a batch: kcat -X linger.ms=0,
# acks=all, in order)
sg_produce() {
  [ "$5" -gt 0 ] || return 0
  seq "$4" $(($4 + $5 - 1)) | sed "s/.*/p$3 ${6:-r}&/" |
    timeout 60 kcat -b "$1" -P -t "$2" -p "$3" -X acks=all -X linger.ms=0 -X batch.num.messages=1 \
      2>>"$WORK/sg-kcat.log" || { fail "sync-groups: kcat produce to $2-$3 on $1"; return 1; }
}
# sg_same GROUP TOPIC -- the destination's committed offsets of GROUP for TOPIC equal the
# source's (offsets and leader epochs), and there are some
sg_same() {
  local s d
  s=$(sg_py committed "$S" "$1" "$2") || return 1
  d=$(sg_py committed "$D" "$1" "$2") || return 1
  echo "$1 $2: source $s, destination $d"
  [ -n "$s" ] && [ "$s" = "$d" ]
}
# sg_is BOOTSTRAP GROUP TOPIC SPEC -- the committed offsets (offsets only) of GROUP are SPEC
sg_is() {
  local c
  c=$(sg_py committed "$1" "$3" "$4" | sed 's/@[-0-9]*//g') || return 1
  echo "$3 $4 on $1: $c"
  [ "$c" = "$2" ]
}

scenario_sync_groups() {
  local p e0=() e1=() urls rc pid n m
  step "sync-groups: $SG_T (2 partitions) and $SG_U (1) on the source, ${SG_A[0]}/${SG_A[1]} records; mirror msg (sync.group.offsets.interval.ms=1000) started"
  "${ME2E[@]}" create-topics "$S" 2 3 "$SG_T" || { fail "sync-groups: create $SG_T"; return; }
  "${ME2E[@]}" create-topics "$S" 1 3 "$SG_U" || { fail "sync-groups: create $SG_U"; return; }
  for p in 0 1; do sg_produce "$S" "$SG_T" "$p" 0 "${SG_A[$p]}" || return; done
  sg_produce "$S" "$SG_U" 0 0 20 || return
  # only the group sync (the other kinds have their own scenarios; off here so that msg adds no
  # load or ACLs to the shared clusters)
  printf '%s\n' "bootstrap.servers=$S" sync.group.offsets.interval.ms=1000 'groups.include=sg-.*' \
    sync.topic.configs.interval.ms=0 sync.acls.interval.ms=0 >"$WORK/msg.properties"
  mirror_create msg "$WORK/msg.properties" || return
  "$KM" --bootstrap-server "$D" --start --mirror msg --topic 'sg-.*' --wait --timeout-ms 90000 \
    >"$WORK/sg-start.out" 2>&1 || { cat "$WORK/sg-start.out"; fail "sync-groups: kafka-mirrors --start msg"; return; }

  step "sync-groups: on the SOURCE the Java group sg-java reads ${SG_A[0]}/${SG_A[1]} and commits; ${SG_B[0]}/${SG_B[1]} more records; the librdkafka group sg-rdk reads to the end and commits; ${SG_C[0]}/${SG_C[1]} more records nobody reads on the source"
  "$PEER" consume-group --bootstrap "$S" --topic "$SG_T" --group sg-java --sessions 1 \
    --duration-ms 1000 --min-records $((SG_A[0] + SG_A[1])) --timeout-ms 60000 \
    >"$WORK/sg-java-src.log" 2>&1 || { fail "sync-groups: Java consume-group on the source:"; tail -5 "$WORK/sg-java-src.log"; return; }
  grep '^consume-group: [0-9]* records' "$WORK/sg-java-src.log"
  for p in 0 1; do sg_produce "$S" "$SG_T" "$p" "${SG_A[$p]}" "${SG_B[$p]}" || return; done
  sg_py rdk-consume "$S" "$SG_T" sg-rdk "$WORK/sg-rdk-src.txt" >"$WORK/sg-rdk-src.log" 2>&1 ||
    { fail "sync-groups: librdkafka consumer on the source:"; cat "$WORK/sg-rdk-src.log"; return; }
  cat "$WORK/sg-rdk-src.log"
  for p in 0 1; do sg_produce "$S" "$SG_T" "$p" $((SG_A[p] + SG_B[p])) "${SG_C[$p]}" || return; done
  # sg-java also commits on sg-u (the control topic for the after-failover check)
  sg_py commit "$S" sg-java "$SG_U:0=4" >/dev/null || { fail "sync-groups: commit sg-java on $SG_U"; return; }
  local ja="0=${SG_A[0]},1=${SG_A[1]}" ra="0=$((SG_A[0] + SG_B[0])),1=$((SG_A[1] + SG_B[1]))"
  sg_is "$S" "$ja" sg-java "$SG_T" >"$WORK/last" && sg_is "$S" "$ra" sg-rdk "$SG_T" >>"$WORK/last" &&
    echo "ok: source commits exactly where the consumers stopped: sg-java $ja, sg-rdk $ra" ||
    { fail "sync-groups: the source commits are not the expected ones:"; cat "$WORK/last"; return; }

  step "sync-groups: the destination's committed offsets (OffsetFetch at its coordinator) become the source's, leader epochs included"
  until_ok 60 "sg-t caught up" "${ME2E[@]}" caught-up "$KM" "$D" "$S" msg 3 || return
  until_ok 30 "sg-java's commits synced" sg_same sg-java "$SG_T" && tail -1 "$WORK/last"
  until_ok 30 "sg-rdk's commits synced" sg_same sg-rdk "$SG_T" && tail -1 "$WORK/last"
  until_ok 30 "sg-java's sg-u commit synced" sg_same sg-java "$SG_U" && tail -1 "$WORK/last"

  step "sync-groups: a group with a member on the destination is left alone (sg-live on $SG_U); a source reset backwards is copied (sg-java on $SG_U 4 -> 2)"
  rm -f "$WORK/sg-release"
  sg_py hold "$D" "$SG_U" sg-live 3 "$WORK/sg-release" >"$WORK/sg-hold.log" 2>&1 &
  pid=$!
  until_ok 60 "sg-live has a member on the destination (committed 3 there)" grep -q '^holding' "$WORK/sg-hold.log" || return
  sg_py commit "$S" sg-live "$SG_U:0=11" >/dev/null && sg_py commit "$S" sg-java "$SG_U:0=2" >/dev/null ||
    { fail "sync-groups: commits on the source"; touch "$WORK/sg-release"; wait "$pid"; return; }
  until_ok 30 "sg-java's reset of $SG_U back to 2 synced (backwards too)" sg_is "$D" "0=2" sg-java "$SG_U"
  m=0
  for _ in 1 2 3; do # three more sync intervals, polled
    sg_is "$D" "0=3" sg-live "$SG_U" >"$WORK/last" || { m=1; break; }
    sleep 1 # one sync interval between looks
  done
  [ "$m" = 0 ] && echo "ok: sg-live (a member on the destination) kept its own commit 3 (source 11)" ||
    fail "sync-groups: the sync wrote a group that has a member on the destination: $(cat "$WORK/last")"
  touch "$WORK/sg-release"
  wait "$pid" || { fail "sync-groups: the sg-live member:"; cat "$WORK/sg-hold.log"; }
  until_ok 30 "sg-live synced to 11 once its member left" sg_is "$D" "0=11" sg-live "$SG_U"

  step "sync-groups: one failing group does not stop the others: sg-fail (failed in every run by run.sh's KMIRROR_TEST_SYNC_GROUPS_FAIL) and sg-later (after it in the run's order) commit on $SG_U"
  sg_py commit "$S" sg-fail "$SG_U:0=5" >/dev/null && sg_py commit "$S" sg-later "$SG_U:0=6" >/dev/null ||
    { fail "sync-groups: commits of sg-fail / sg-later on the source"; return; }
  until_ok 30 "sg-later synced although sg-fail, before it in the same runs, fails" sg_is "$D" "0=6" sg-later "$SG_U"
  until_ok 30 "kafka-mirrors --describe shows the groups sync error of sg-fail" \
    "$PY" "$HERE/sync-topics.py" sync-error "$KM" "$D" msg groups '^group sg-fail: .*injected failure' &&
    tail -1 "$WORK/last"
  n=$(sg_py committed "$D" sg-fail "$SG_U")
  [ -z "$n" ] && echo "ok: sg-fail has no commit on the destination" ||
    fail "sync-groups: the failing sg-fail has destination commits: $n"

  step "sync-groups: failover of $SG_T (kafka-mirrors --stop --wait); ${SG_D[0]}/${SG_D[1]} records written on the destination"
  "$KM" --bootstrap-server "$D" --stop --mirror msg --topic "$SG_T" --wait --timeout-ms 60000 \
    >"$WORK/sg-stop.out" 2>&1 || { cat "$WORK/sg-stop.out"; fail "sync-groups: kafka-mirrors --stop msg $SG_T"; return; }
  local end0=$((SG_A[0] + SG_B[0] + SG_C[0])) end1=$((SG_A[1] + SG_B[1] + SG_C[1]))
  sg_produce "$D" "$SG_T" 0 0 "${SG_D[0]}" d || return
  sg_produce "$D" "$SG_T" 1 0 "${SG_D[1]}" d || return
  if [ "$INJECT" = sg-bad-commit ]; then
    # the checks below must fail: sg-java gets an epoch above the destination's leader epoch
    # (a consumer waits for metadata showing it), sg-rdk one offset more on p0 (a skip) and
    # that epoch on p1
    e=$(sg_py committed "$D" sg-java "$SG_T" | sed 's/.*@//')
    sg_py commit "$D" sg-java "$SG_T:0=${SG_A[0]}@$((e + 50)),1=${SG_A[1]}@$((e + 50))"
    sg_py commit "$D" sg-rdk "$SG_T:0=$((SG_A[0] + SG_B[0] + 1)),1=$((SG_A[1] + SG_B[1]))@$((e + 50))"
    echo "INJECTED: sg-java committed with epoch $((e + 50)), sg-rdk one offset ahead on p0 and with that epoch on p1 (the run must fail)"
  fi

  step "sync-groups: on the DESTINATION sg-java (Java) and sg-rdk (librdkafka) read to the end: every record from their commits once; Metadata requests bounded"
  mapfile -t urls < <(ep_metrics_urls) || return
  [ "${#urls[@]}" = 3 ] || return
  sg_epy scrape "$WORK/sg-metrics-0.json" "${urls[@]}" || { fail "sync-groups: scrape destination metrics"; return; }
  "$PEER" consume-group --bootstrap "$D" --topic "$SG_T" --group sg-java --sessions 1 \
    --duration-ms 1000 --min-records 1 --timeout-ms 30000 --records-out "$WORK/sg-java-dst.txt" \
    >"$WORK/sg-java-dst.log" 2>&1 &
  pid=$!
  sg_py rdk-consume "$D" "$SG_T" sg-rdk "$WORK/sg-rdk-dst.txt" >"$WORK/sg-rdk-dst.log" 2>&1
  rc=$?
  wait "$pid" || { fail "sync-groups: Java consume-group on the destination:"; tail -5 "$WORK/sg-java-dst.log"; }
  [ "$rc" = 0 ] || { fail "sync-groups: librdkafka consumer on the destination:"; cat "$WORK/sg-rdk-dst.log"; }
  sg_epy scrape "$WORK/sg-metrics-1.json" "${urls[@]}" || { fail "sync-groups: scrape destination metrics"; return; }
  grep '^consume-group: [0-9]* records' "$WORK/sg-java-dst.log"
  grep '^rdk-consume:' "$WORK/sg-rdk-dst.log"
  sg_py check-records "$WORK/sg-java-dst.txt" "$SG_T" \
    "0=${SG_A[0]}-$end0+${SG_D[0]},1=${SG_A[1]}-$end1+${SG_D[1]}" ||
    fail "sync-groups: the Java group did not resume exactly at its committed offsets"
  sg_py check-records "$WORK/sg-rdk-dst.txt" "$SG_T" \
    "0=$((SG_A[0] + SG_B[0]))-$end0+${SG_D[0]},1=$((SG_A[1] + SG_B[1]))-$end1+${SG_D[1]}" ||
    fail "sync-groups: the librdkafka group did not resume exactly at its committed offsets"
  sg_epy delta "$WORK/sg-metrics-0.json" "$WORK/sg-metrics-1.json" Metadata OffsetForLeaderEpoch \
    FindCoordinator OffsetFetch OffsetCommit Fetch | tee "$WORK/sg-delta.txt" | tail -1
  n=$(sed -n 's/^total Metadata=\([0-9]*\) .*/\1/p' "$WORK/sg-delta.txt")
  if [ -n "$n" ] && [ "$n" -le "$SG_MAX_METADATA" ]; then
    echo "ok: $n Metadata requests on the 3 destination brokers while both groups read (bound $SG_MAX_METADATA)"
  else
    fail "sync-groups: ${n:-?} Metadata requests on the destination brokers while the groups read, want <= $SG_MAX_METADATA (a refresh loop)"
  fi

  step "sync-groups: after the failover a source commit of sg-java on $SG_T does not reach the destination (its commit on the running $SG_U does)"
  local jd
  jd=$("${ME2E[@]}" ends "$D" "$SG_T" | sed 's/^[^ ]*-\([0-9]*\) /\1=/' | sort | paste -sd,)
  sg_is "$D" "$jd" sg-java "$SG_T" >"$WORK/last" || { fail "sync-groups: sg-java's destination commit is not the log end ($jd):"; cat "$WORK/last"; }
  jd=$(sg_py committed "$D" sg-java "$SG_T" | sed 's/@[-0-9]*//g')
  sg_py commit "$S" sg-java "$SG_T:0=7,1=3;$SG_U:0=9" >/dev/null || { fail "sync-groups: commit sg-java on the source"; return; }
  until_ok 30 "sg-java's new sg-u commit synced (the sync still runs for msg)" sg_is "$D" "0=9" sg-java "$SG_U"
  # then three more sync intervals, polled: sg-t's destination commit must not move
  m=0
  for _ in 1 2 3 4; do
    sg_is "$D" "$jd" sg-java "$SG_T" >"$WORK/last" || { m=1; break; }
    sleep 1 # one sync interval between looks
  done
  if [ "$m" = 0 ]; then
    echo "ok: sg-java's destination commit on $SG_T stays $jd (source now 0=7,1=3)"
  else
    fail "sync-groups: a source commit reached the failed-over $SG_T: $(cat "$WORK/last")"
  fi
  # leave nothing of msg running for the later scenarios (its group sync then has no topic)
  "$KM" --bootstrap-server "$D" --stop --mirror msg --topic "$SG_U" --wait --timeout-ms 60000 \
    >"$WORK/sg-stop-u.out" 2>&1 || { cat "$WORK/sg-stop-u.out"; fail "sync-groups: kafka-mirrors --stop msg $SG_U"; }
}
