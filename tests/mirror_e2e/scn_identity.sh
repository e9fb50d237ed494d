# shellcheck shell=bash
# scn_identity.sh -- scenario identity of tests/mirror_e2e/run.sh (sourced by it; uses its helpers and
# variables: S, D, CL, KM, CMP, PY, ME2E, WORK, SRC, DST, fail, step, until_ok, cmp_topics).

TOPICS=(id-00 id-01 id-02 id-03 id-04 id-05 id-06 id-07 id-08 id-09)
scenario_identity() {
  local codecs=(none gzip snappy lz4 zstd) i t pids=() rc
  step "identity: create ${#TOPICS[@]} topics x 4 partitions (RF 3) on the source"
  "${ME2E[@]}" create-topics "$S" 4 3 "${TOPICS[@]}" || { fail "create source topics"; return; }

  # kcat_produce TOPIC FIRST COUNT CODEC [-X k=v] -- keyed records, every codec
  kcat_produce() {
    local t=$1 first=$2 n=$3 z=$4
    shift 4
    seq "$first" $((first + n - 1)) | sed "s/.*/k&:value & of $t compressed with $z/" |
      timeout 120 kcat -b "$S" -P -t "$t" -K: -z "$z" -X linger.ms=20 "$@" ||
      fail "kcat produce to $t ($z)"
  }
  step "identity: kcat (librdkafka) writes id-00..id-04 with none/gzip/snappy/lz4/zstd, first half"
  for i in 0 1 2 3 4; do kcat_produce "id-0$i" 1 1000 "${codecs[$i]}"; done
  kcat_produce id-09 1 500 zstd -X enable.idempotence=true

  step "identity: Java producers start (idempotent: id-05 lz4, id-08 gzip; transactional with aborts: id-06 zstd, id-07 none, id-09 snappy)"
  jprod() { # NAME ARGS...
    local n=$1
    shift
    "$PEER" produce --bootstrap "$S" "$@" >"$WORK/java-$n.log" 2>&1
  }
  jprod id-05 --topic id-05 --count 2000 --compression lz4 & pids+=($!)
  jprod id-08 --topic id-08 --count 2000 --compression gzip & pids+=($!)
  jprod id-06 --topic id-06 --count 1500 --compression zstd --transactional-id e2e-t6 \
    --txn-records 50 --abort-every 3 & pids+=($!)
  jprod id-07 --topic id-07 --count 600 --compression none --transactional-id e2e-t7 \
    --txn-records 40 --abort-every 2 & pids+=($!)
  jprod id-09 --topic id-09 --count 600 --compression snappy --transactional-id e2e-t9 \
    --txn-records 30 --abort-every 4 & pids+=($!)

  step "identity: kafka-mirrors --create m1 and --start --topic 'id-.*' while the Java producers write"
  printf 'bootstrap.servers=%s\n' "$S" >"$WORK/m1.properties"
  mirror_create m1 "$WORK/m1.properties" || return
  "$KM" --bootstrap-server "$D" --start --mirror m1 --topic 'id-.*' --wait --timeout-ms 90000 \
    >"$WORK/start.out" 2>&1
  rc=$?
  tail -n 12 "$WORK/start.out"
  [ "$rc" = 0 ] || { fail "kafka-mirrors --start --wait: exit $rc"; wait; return; }

  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || fail "a Java producer failed: $(cat "$WORK"/java-*.log | grep -i fail | head -3)"
  done
  cat "$WORK"/java-*.log | grep produced
  step "identity: kcat writes the second half while mirroring (id-00..id-04, id-08 snappy)"
  for i in 0 1 2 3 4; do kcat_produce "id-0$i" 1001 1000 "${codecs[$i]}"; done
  kcat_produce id-08 2001 500 snappy

  step "identity: wait until DescribeMirrors shows every partition MIRRORING with lag 0 and the source's log ends"
  until_ok 180 "40 partitions caught up" "${ME2E[@]}" caught-up "$KM" "$D" "$S" m1 40 || return
  tail -1 "$WORK/last"
  "$KM" --bootstrap-server "$D" --describe --mirror m1 | head -6
  if "${ME2E[@]}" fanout "$KM" "$D" m1 40 >"$WORK/fanout.out" 2>&1; then
    echo "ok: DescribeMirrors through each destination broker lists all 40 partitions exactly once"
  else
    fail "DescribeMirrors through one broker does not list every partition once:"
    sed 's/^/  /' "$WORK/fanout.out"
  fi

  if [ "$INJECT" = flip ]; then
    local seg
    seg=$(ls "$("$CL" partdir 2 id-03 1 --name "$DST")"/*.log | tail -1)
    "$PY" -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(-5, 2); b = f.read(1); f.seek(-5, 2); f.write(bytes([b[0] ^ 0x55])); f.close()' "$seg"
    echo "INJECTED: one byte flipped 5 bytes before the end of $seg (the run must fail)"
  fi
  step "identity: kc_replicacmp: every batch (offsets, length, CRC, leader epoch, producer id/epoch, every byte) on 3 source + 3 destination replicas"
  cmp_topics "${TOPICS[@]}"

  step "identity: kafka-python reads every record on both sides (read_uncommitted, read_committed)"
  # expected counts: (uncommitted, committed); aborted = R records of every K-th transaction
  cat >"$WORK/expect.json" <<EOF
{"id-00": {"uncommitted": 2000, "committed": 2000}, "id-01": {"uncommitted": 2000, "committed": 2000},
 "id-02": {"uncommitted": 2000, "committed": 2000}, "id-03": {"uncommitted": 2000, "committed": 2000},
 "id-04": {"uncommitted": 2000, "committed": 2000}, "id-05": {"uncommitted": 2000, "committed": 2000},
 "id-06": {"uncommitted": 1500, "committed": 1000}, "id-07": {"uncommitted": 600, "committed": 320},
 "id-08": {"uncommitted": 2500, "committed": 2500}, "id-09": {"uncommitted": 1100, "committed": 950}}
EOF
  "${ME2E[@]}" read-compare "$S" "$D" "$WORK/expect.json" >"$WORK/read.out" 2>&1 ||
    fail "kafka-python read-back differs (see below)"
  grep -v '^ok ' "$WORK/read.out" | head -30
  echo "$(grep -c '^ok ' "$WORK/read.out") read checks ok"
}
