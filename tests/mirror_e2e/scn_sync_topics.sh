# shellcheck shell=bash
# scn_sync_topics.sh -- scenario sync-topics of tests/mirror_e2e/run.sh (sourced by it; uses its
# helpers and variables: S, D, CL, KM, PY, ME2E, WORK, SRC, DST, INJECT, fail, step, until_ok,
# cmp_topics, mirror_create). Needs nothing from the other scenarios: its own topics sd-*,
# mirror msd. docs/testing-mirror.md "Scenario sync-topics".
#
# Topic discovery (issue 6): mirror msd with topics.include=sd-.* and topics.exclude=sd-skip.*
# and nothing started by hand. A new source topic is created on the destination with the source
# topic id and partition count and mirrored byte for byte; an excluded one never appears; a
# partition count raised on the source is followed and the new partitions mirrored; a source
# topic deleted and re-created (new id) never mixes into the old mirror topic, which keeps the
# old records (FAILED, with the operator's step reported by the sync); once the operator deleted
# the destination topic, the new topic is created with the new id and holds only its records.

st_py() { "$PY" "$HERE/sync-topics.py" "$@"; }
st_sf() { "$PY" "$HERE/source_faults.py" "$@"; }

# st_dirs TOPIC PARTS -- the partition directories of every destination replica
st_dirs() {
  local p i
  for p in $(seq 0 $(($2 - 1))); do
    for i in 1 2 3; do "$CL" partdir "$i" "$1" "$p" --name "$DST"; done
  done
}

# st_logged REGEX -- a destination broker logged a topics-sync error of msd matching REGEX
st_logged() {
  grep -hE "mirror msd: topics sync: $1" "$KPEER_HOME/$DST"/node*.log | tail -1 | grep . ||
    { echo "no destination broker logged /mirror msd: topics sync: $1/ (yet)"; return 1; }
}

scenario_sync_topics() {
  local t0=$SECONDS old_id new_id rc
  step "sync-topics: mirror msd (topics.include=sd-.*, topics.exclude=sd-skip.*, 1 s intervals), nothing started by hand"
  {
    printf 'bootstrap.servers=%s\n' "$S"
    printf 'topics.include=sd-.*\n'
    # --inject sd-noexclude: no exclude pattern, so sd-skip1 is mirrored; the run must FAIL
    [ "$INJECT" = sd-noexclude ] || printf 'topics.exclude=sd-skip.*\n'
    printf 'sync.topic.configs.interval.ms=1000\nsync.group.offsets.interval.ms=1000\n'
    printf 'sync.acls.interval.ms=1000\n'
  } >"$WORK/msd.properties"
  [ "$INJECT" = sd-noexclude ] && echo "INJECTED: msd has no topics.exclude (sd-skip1 is mirrored; the run must fail)"
  mirror_create msd "$WORK/msd.properties" || return

  step "sync-topics: on the source sd-skip1 (excluded), then sd-new (2 partitions, RF 3), 50 records a partition"
  "${ME2E[@]}" create-topics "$S" 1 3 sd-skip1 && st_py produce "$S" sd-skip1 skip 20 &&
    "${ME2E[@]}" create-topics "$S" 2 3 sd-new && st_py produce "$S" sd-new "sd-new" 50 ||
    { fail "create and write sd-skip1, sd-new on the source"; return; }
  until_ok 30 "sd-new created on the destination by discovery: same topic id, 2 partitions" \
    st_py same "$S" "$D" sd-new 2 || return
  tail -1 "$WORK/last"
  until_ok 30 "sd-new mirrored (MIRRORING, lag 0, log ends equal)" \
    "${ME2E[@]}" caught-up "$KM" "$D" "$S" msd 2 sd-new || return
  CMP_PARTS="0 1" cmp_topics sd-new
  # The run that created sd-new listed sd-skip1 already (created first on the source).
  st_py absent "$D" sd-skip1 || fail "sd-skip1 (matches topics.exclude) was created on the destination"

  step "sync-topics: CreatePartitions sd-new -> 4 on the source, 50 more records to every partition"
  st_py grow "$S" sd-new 4 && st_py produce "$S" sd-new "sd-new" 50 ||
    { fail "grow and write sd-new on the source"; return; }
  until_ok 30 "sd-new has 4 partitions on the destination, same topic id" \
    st_py same "$S" "$D" sd-new 4 || return
  until_ok 30 "sd-new's 4 partitions mirrored (MIRRORING, lag 0, log ends equal)" \
    "${ME2E[@]}" caught-up "$KM" "$D" "$S" msd 4 sd-new || return
  CMP_PARTS="0 1 2 3" cmp_topics sd-new
  read -r rc _ < <("${ME2E[@]}" produce-one "$D" sd-new 3)
  [ "$rc" = 147 ] && echo "ok: an added partition is read-only like the others (Produce: 147)" ||
    fail "Produce to the added partition sd-new-3 on the destination: error code $rc, want READ_ONLY_TOPIC 147"

  step "sync-topics: sd-re (2 partitions) mirrored with 30 records a partition tagged gen1"
  "${ME2E[@]}" create-topics "$S" 2 3 sd-re && st_py produce "$S" sd-re gen1 30 ||
    { fail "create and write sd-re on the source"; return; }
  until_ok 30 "sd-re created on the destination, same topic id" st_py same "$S" "$D" sd-re 2 || return
  until_ok 30 "sd-re mirrored" "${ME2E[@]}" caught-up "$KM" "$D" "$S" msd 2 sd-re || return
  old_id=$(st_sf topic-id "$D" sd-re)

  step "sync-topics: sd-re deleted on the source and re-created (new topic id), 20 records a partition tagged gen2"
  st_sf delete "$S" sd-re && "${ME2E[@]}" create-topics "$S" 2 3 sd-re && st_py produce "$S" sd-re gen2 20 ||
    { fail "delete, re-create and write sd-re on the source"; return; }
  new_id=$(st_sf topic-id "$S" sd-re)
  [ "$new_id" != "$old_id" ] || { fail "the re-created sd-re has the old topic id $old_id"; return; }
  echo "sd-re: topic id $old_id mirrored, $new_id on the source now"
  until_ok 45 "sd-re's partitions FAILED: the source topic was re-created" \
    st_sf expect "$KM" "$D" msd 'sd-re-0=FAILED~re-created' 'sd-re-1=FAILED~re-created' || return
  until_ok 30 "discovery reports sd-re with the operator's step (delete it on the destination)" \
    st_logged "sd-re: re-created on the source \\(id $new_id, was $old_id\\): delete it here to mirror the new topic \\(the next run creates it\\)" || return
  tail -1 "$WORK/last" | cut -c1-240
  until_ok 30 "kafka-mirrors --describe shows it as msd's last topics sync error" \
    st_py sync-error "$KM" "$D" msd topics "^sd-re: re-created on the source \\(id $new_id, was $old_id\\): delete it here" || return
  tail -1 "$WORK/last"
  [ "$(st_sf topic-id "$D" sd-re)" = "$old_id" ] && echo "ok: sd-re on the destination keeps topic id $old_id" ||
    fail "sd-re on the destination changed its topic id: $(st_sf topic-id "$D" sd-re), was $old_id"
  # shellcheck disable=SC2046
  st_py holds "$D" sd-re gen1 60 gen2 $(st_dirs sd-re 2) ||
    fail "sd-re on the destination does not hold exactly the old topic's records"

  step "sync-topics: the operator deletes sd-re on the destination; discovery creates it with the new id"
  st_sf delete "$D" sd-re || { fail "delete sd-re on the destination"; return; }
  until_ok 30 "sd-re re-created on the destination with the new topic id $new_id" \
    st_py same "$S" "$D" sd-re 2 || return
  until_ok 30 "the new sd-re mirrored" "${ME2E[@]}" caught-up "$KM" "$D" "$S" msd 2 sd-re || return
  CMP_PARTS="0 1" cmp_topics sd-re
  # shellcheck disable=SC2046
  st_py holds "$D" sd-re gen2 40 gen1 $(st_dirs sd-re 2) ||
    fail "the new sd-re on the destination does not hold exactly the new topic's records"
  st_py absent "$D" sd-skip1 || fail "sd-skip1 (matches topics.exclude) was created on the destination"
  echo "sync-topics: $((SECONDS - t0))s"
}
