# shellcheck shell=bash
# case_compacted.sh -- case compacted of tests/mirror_kafka/run.sh (sourced by it; uses its
# helpers and variables: S, D, KC, SRC, NODES, MK, ME2E, KM, WORK, fail, step, until_ok,
# mirror_start, cmp_topic, src_partdir).
#
# A compacted topic (1 partition, RF 1: followers clean their own logs on their own schedule, so
# only the leader's log is the one the mirror reads) gets KC_ROUNDS rounds of KC_PER records
# over KC_KEYS keys (kafka-python, mk.py produce-rounds), each round's records timestamped 1 s
# after the previous round's, so that every round starts a new segment (segment.ms=100: Kafka
# rolls on the difference of record timestamps; wall-clock gaps between kcat processes did
# not roll reliably under load); Kafka's log cleaner (log.cleaner.backoff.ms=500 on the source,
# min.cleanable.dirty.ratio=0.01) cleans everything below the active segment to one record
# per key BEFORE the mirror starts. Then mirrored: the destination holds the same batches at
# the same offsets (the gaps the cleaner left included; kc_replicacmp), kafka-python reads the
# same records at the same offsets on both sides.

KC_TOPIC=kc-compact
KC_KEYS=10
KC_ROUNDS=6
KC_PER=150
case_compacted() {
  local leader=0 i dir n total=$((KC_ROUNDS * KC_PER))
  step "compacted: $KC_TOPIC (cleanup.policy=compact, segment.ms=100, min.cleanable.dirty.ratio=0.01) on Kafka, $KC_ROUNDS rounds x $KC_PER updates of $KC_KEYS keys"
  "$PEER" admin-create-topic --bootstrap "$S" --topic "$KC_TOPIC" --partitions 1 --rf 1 \
    --config cleanup.policy=compact --config segment.ms=100 \
    --config min.cleanable.dirty.ratio=0.01 --config min.compaction.lag.ms=0 \
    >"$WORK/kc-create.log" 2>&1 || { fail "compacted: create $KC_TOPIC:"; tail -3 "$WORK/kc-create.log"; return; }
  "${MK[@]}" produce-rounds "$S" "$KC_TOPIC" "$KC_KEYS" "$KC_ROUNDS" "$KC_PER" >"$WORK/kc-produce.log" 2>&1 ||
    { fail "compacted: produce the rounds:"; tail -5 "$WORK/kc-produce.log"; return; }
  cat "$WORK/kc-produce.log"
  for ((i = 1; i <= NODES; i++)); do
    [ -d "$(src_partdir "$i" "$KC_TOPIC" 0)" ] && leader=$i
  done
  [ "$leader" != 0 ] || { fail "compacted: no Kafka node holds $KC_TOPIC-0"; return; }
  dir=$(src_partdir "$leader" "$KC_TOPIC" 0)
  echo "$KC_TOPIC-0 lives on Kafka node $leader: $(ls "$dir" | grep -c '\.log$') segment file(s)"

  step "compacted: wait until Kafka's cleaner left one record per key below the active segment (offset gaps)"
  until_ok 120 "$KC_TOPIC cleaned by Kafka" "${MK[@]}" cleaned "$S" "$KC_TOPIC" "$dir" "$KC_KEYS" || return
  tail -1 "$WORK/last"
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
}
