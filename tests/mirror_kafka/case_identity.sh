# shellcheck shell=bash
# case_identity.sh -- case identity of tests/mirror_kafka/run.sh (sourced by it; uses its helpers
# and variables: S, D, RF, CL, DST, PY, PEER, KM, ME2E, WORK, fail, step, until_ok, injected,
# mirror_start, cmp_topic).
#
# Topics written by the Java producer (kafka-clients of the source's release line is what
# peer-tools is built with; idempotent, acks=all): one per codec, and two transactional ones
# with aborted transactions. Half is written before the mirror starts, half while it copies.
# After the catch-up every partition is byte-identical (kc_replicacmp: every batch's offsets,
# epochs, producer id/epoch, CRC and bytes on every source replica and the 3 destination
# replicas) and kafka-python reads the same records at the same offsets on both sides,
# read_uncommitted and read_committed.

KI_CODECS=(none gzip snappy lz4 zstd)
KI_PARTS=2
case_identity() {
  local z pids=() i t ok
  step "identity: topics ki-<codec> (${KI_CODECS[*]}), ki-txn-zstd, ki-txn-none ($KI_PARTS partitions, RF $RF) on Kafka"
  "${ME2E[@]}" create-topics "$S" "$KI_PARTS" "$RF" "${KI_CODECS[@]/#/ki-}" ki-txn-zstd ki-txn-none ||
    { fail "identity: create source topics"; return; }

  # jprod LOG ARGS... -- one Java producer (peer-tools produce) in the background
  jprod() {
    local log=$1
    shift
    "$PEER" produce --bootstrap "$S" --size 120 --linger-ms 5 "$@" >"$WORK/ki-$log.log" 2>&1 &
    pids+=($!)
  }
  # The first half: idempotent producers of every codec, and the transactional ones (records
  # 0..N-1 of their generators; the second half continues with --seed so the values differ).
  step "identity: the Java producer writes the first half (idempotent, every codec; transactional, every 3rd / 2nd transaction aborted)"
  for z in "${KI_CODECS[@]}"; do jprod "$z-1" --topic "ki-$z" --count 600 --compression "$z"; done
  jprod txn-zstd --topic ki-txn-zstd --count 600 --compression zstd --transactional-id ki-t1 \
    --txn-records 40 --abort-every 3
  jprod txn-none --topic ki-txn-none --count 400 --compression none --transactional-id ki-t2 \
    --txn-records 25 --abort-every 2
  ok=1
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || ok=0; done
  pids=()
  [ "$ok" = 1 ] || { fail "identity: a Java producer failed:"; tail -n 3 "$WORK"/ki-*.log; return; }
  grep -h produced "$WORK"/ki-*.log | head -8

  step "identity: mirror mki started for 'ki-.*'; the Java producer writes the second half while it copies"
  mirror_start mki 'ki-.*' sync.topic.configs.interval.ms=0 sync.acls.interval.ms=0 \
    sync.group.offsets.interval.ms=0 || return
  for z in "${KI_CODECS[@]}"; do jprod "$z-2" --topic "ki-$z" --count 600 --seed 2 --compression "$z"; done
  ok=1
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || ok=0; done
  [ "$ok" = 1 ] || { fail "identity: a Java producer (second half) failed:"; tail -n 3 "$WORK"/ki-*-2.log; return; }

  step "identity: caught up (DescribeMirrors: every partition MIRRORING, lag 0, the source's log ends)"
  local np=$(((${#KI_CODECS[@]} + 2) * KI_PARTS))
  until_ok 180 "$np partitions caught up" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mki "$np" || return
  tail -1 "$WORK/last"

  if injected flip; then
    local seg
    seg=$(ls "$("$CL" partdir 2 ki-zstd 1 --name "$DST")"/*.log | tail -1)
    "$PY" -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(-5, 2); b = f.read(1); f.seek(-5, 2); f.write(bytes([b[0] ^ 0x55])); f.close()' "$seg"
    echo "INJECTED: one byte flipped 5 bytes before the end of $seg (the run must fail)"
  fi
  step "identity: kc_replicacmp: every batch byte-identical on every Kafka replica and the 3 destination replicas"
  for t in "${KI_CODECS[@]/#/ki-}" ki-txn-zstd ki-txn-none; do cmp_topic "$t" "$KI_PARTS"; done

  step "identity: kafka-python reads both sides (read_uncommitted, read_committed)"
  # expected counts: aborted = R records of every K-th transaction
  {
    echo "{"
    for z in "${KI_CODECS[@]}"; do echo "\"ki-$z\": {\"uncommitted\": 1200, \"committed\": 1200},"; done
    echo '"ki-txn-zstd": {"uncommitted": 600, "committed": 400},'
    echo '"ki-txn-none": {"uncommitted": 400, "committed": 200}}'
  } >"$WORK/ki-expect.json"
  if "${ME2E[@]}" read-compare "$S" "$D" "$WORK/ki-expect.json" >"$WORK/ki-read.out" 2>&1; then
    echo "ok: $(grep -c '^ok ' "$WORK/ki-read.out") read checks"
  else
    fail "identity: kafka-python read-back differs:"
    grep -v '^ok ' "$WORK/ki-read.out" | head -20
  fi
}
