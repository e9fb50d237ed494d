# shellcheck shell=bash
# case_compacted.sh -- case compacted of tests/mirror_kafka/run.sh (sourced by it; uses its
# helpers and variables: S, D, KC, SRC, NODES, PY, E2E, MK, ME2E, KM, WORK, fail, step, until_ok,
# injected, src_create_topic, mirror_start, cmp_topic, src_partdir).
#
# A compacted topic (1 partition, RF 1: followers clean their own logs on their own schedule, so
# only the leader's log is the one the mirror reads) gets rounds of KC_PER records over a few
# keys (kafka-python, mk.py produce-rounds), each round's records timestamped 1 s after the
# previous round's, so that every round starts a new segment (segment.ms=100: Kafka rolls on
# the difference of record timestamps; wall-clock gaps between processes did not roll reliably
# under load); Kafka's log cleaner (log.cleaner.backoff.ms=500 on the source,
# min.cleanable.dirty.ratio=0.01) cleans everything below the active segment to one record
# per key BEFORE the mirror starts. Tombstones (null values) in two generations, each step
# waited for by what the cleaner left below the active segment (mk.py cleaned), so the state
# the mirror starts from is the same on every run:
#   A  delete.retention.ms=0: key-8 and key-9 deleted (round 2), later rounds over key-0..7;
#      once the cleaner has passed over them, one more round makes the log dirty again and the
#      next pass removes the tombstones (key-8/9 leave no record at all)
#   B  delete.retention.ms=1 day (IncrementalAlterConfigs, checked on Kafka first): key-6 and
#      key-7 deleted (round 7), a last round over key-0..5; the cleaner keeps these tombstones
# Then mirrored: the destination holds the same batches at the same offsets (the gaps the
# cleaner left included; kc_replicacmp), ListOffsets earliest equal, kafka-python reads the
# same records at the same offsets on both sides, and exactly key-6 and key-7 with null values
# on both.
# --inject tomb-empty: generation B's "tombstones" get empty values instead of null (the
# B-state wait and the null-value checks must fail).

KC_TOPIC=kc-compact
KC_PER=150
case_compacted() {
  local leader=0 i dir n rc total=$((9 * KC_PER + 4)) t0 tb=key-6,key-7
  step "compacted: $KC_TOPIC (cleanup.policy=compact, segment.ms=100, min.cleanable.dirty.ratio=0.01, delete.retention.ms=0) on Kafka; rounds 0-2 over 10 keys, then tombstones of key-8, key-9; rounds 3-5 over 8 keys"
  src_create_topic "$KC_TOPIC" 1 1 cleanup.policy=compact segment.ms=100 delete.retention.ms=0 \
    min.cleanable.dirty.ratio=0.01 min.compaction.lag.ms=0 || return
  t0=$(($(date +%s%3N) - 120000)) # round R's records carry t0 + R s
  kc_rounds 10 3 0 key-8,key-9 && kc_rounds 8 3 3 || return
  for ((i = 1; i <= NODES; i++)); do
    [ -d "$(src_partdir "$i" "$KC_TOPIC" 0)" ] && leader=$i
  done
  [ "$leader" != 0 ] || { fail "compacted: no Kafka node holds $KC_TOPIC-0"; return; }
  dir=$(src_partdir "$leader" "$KC_TOPIC" 0)
  echo "$KC_TOPIC-0 lives on Kafka node $leader: $(ls "$dir" | grep -c '\.log$') segment file(s)"

  step "compacted: wait until Kafka's cleaner passed over the tombstones (one record per key below the active segment), then one more round; the next pass removes them"
  until_ok 120 "$KC_TOPIC cleaned by Kafka (key-0..7 once, the tombstones of key-8/9 at most once)" \
    "${MK[@]}" cleaned "$S" "$KC_TOPIC" "$dir" 8 key-8,key-9 "" loose || return
  tail -1 "$WORK/last"
  kc_rounds 8 1 6 || return
  until_ok 120 "$KC_TOPIC: the tombstones of key-8/9 removed by Kafka's cleaner (delete.retention.ms=0)" \
    "${MK[@]}" cleaned "$S" "$KC_TOPIC" "$dir" 8 "" key-8,key-9 || return
  tail -1 "$WORK/last"

  step "compacted: delete.retention.ms=86400000; round 7 over 8 keys, then tombstones of key-6, key-7; round 8 over 6 keys; the cleaner keeps these tombstones"
  "$PY" "$E2E/sync-configs.py" alter "${S%%,*}" "$KC_TOPIC" delete.retention.ms=86400000 \
    >"$WORK/kc-alter.out" 2>&1 || { fail "compacted: IncrementalAlterConfigs on Kafka:"; cat "$WORK/kc-alter.out"; return; }
  until_ok 30 "Kafka shows delete.retention.ms=86400000 on $KC_TOPIC" \
    "$PY" "$E2E/sync-configs.py" expect "${S%%,*}" "$KC_TOPIC" delete.retention.ms=86400000 || return
  if injected tomb-empty; then
    echo "INJECTED: generation B's tombstones get empty values, not null (the run must fail)"
    export MK_TOMB_EMPTY=1
  fi
  kc_rounds 8 1 7 "$tb" && kc_rounds 6 1 8
  rc=$?
  unset MK_TOMB_EMPTY
  [ "$rc" = 0 ] || return
  # not a return on failure: the checks after the mirror show what it made of the log
  until_ok 120 "$KC_TOPIC cleaned: key-0..5 once, the tombstones of key-6/7 kept (once each), key-8/9 gone" \
    "${MK[@]}" cleaned "$S" "$KC_TOPIC" "$dir" 6 "$tb" key-8,key-9 && tail -1 "$WORK/last"
  n=$("${MK[@]}" count "$S" "$KC_TOPIC") || { fail "compacted: count the source's records"; return; }
  [ "$n" -lt "$total" ] || { fail "compacted: the source still returns all $total records"; return; }
  echo "the source returns $n of the $total records written (end offset $total)"

  step "compacted: mirror mkc started; caught up; the same batches at the same offsets"
  mirror_start mkc "$KC_TOPIC" sync.topic.configs.interval.ms=0 sync.acls.interval.ms=0 \
    sync.group.offsets.interval.ms=0 || return
  until_ok 120 "$KC_TOPIC caught up" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mkc 1 || return
  tail -1 "$WORK/last"
  CMP_NODES=$leader cmp_topic "$KC_TOPIC" 1
  grep '^replica ' "$WORK/cmp-$KC_TOPIC-0.txt" | sed 's/^/  /'
  local es ed
  es=$("${MK[@]}" earliest "$S" "$KC_TOPIC") && ed=$("${MK[@]}" earliest "$D" "$KC_TOPIC") &&
    [ -n "$es" ] && [ "$es" = "$ed" ] && echo "ok: ListOffsets earliest equal on both sides ($es)" ||
    fail "compacted: ListOffsets earliest: Kafka '$es', destination '${ed:-}'"
  printf '{"%s": {"uncommitted": %d, "committed": %d}}\n' "$KC_TOPIC" "$n" "$n" >"$WORK/kc-expect.json"
  if "${ME2E[@]}" read-compare "$S" "$D" "$WORK/kc-expect.json" >"$WORK/kc-read.out" 2>&1; then
    echo "ok: kafka-python reads the same $n records at the same offsets on both sides ($(grep -c '^ok ' "$WORK/kc-read.out") checks)"
  else
    fail "compacted: kafka-python read-back differs:"
    grep -v '^ok ' "$WORK/kc-read.out" | head -20
  fi
  es=$("${MK[@]}" tombstones "$S" "$KC_TOPIC") && ed=$("${MK[@]}" tombstones "$D" "$KC_TOPIC") &&
    [ "$es" = "$tb" ] && [ "$ed" = "$tb" ] &&
    echo "ok: the records with null values are the tombstones of $tb on both sides" ||
    fail "compacted: records with null values: Kafka '$es', destination '${ed:-}', want $tb on both"
}

# kc_rounds KEYS ROUNDS FIRST [TOMBS] -- mk.py produce-rounds to kc-compact (timestamps from t0)
kc_rounds() {
  "${MK[@]}" produce-rounds "$S" "$KC_TOPIC" "$1" "$2" "$KC_PER" "$t0" "$3" "${4:-}" \
    >"$WORK/kc-produce.log" 2>&1 || { fail "compacted: produce rounds $3..:"; tail -5 "$WORK/kc-produce.log"; return 1; }
  cat "$WORK/kc-produce.log"
}
