#!/usr/bin/env bash
# run.sh -- the mirror's end-to-end scenarios (issue 5 "Done when"; docs/testing-mirror.md).
#
#   run.sh [--scenario identity,read-only,pause-resume] [--build DIR] [--python PY] [--keep]
#          [--src-port P] [--dst-port P]     (first base ports tried; busy ones are skipped)
#          [--inject flip]   (shows the verifier can fail: one byte of a destination replica of
#                             id-03 partition 1 is flipped after the catch-up; the run must FAIL)
#
# One source cluster (3 kbroker brokers, node 1 also the controller) and one destination cluster
# (3 kbroker brokers with kmirror.so + a controller-only node, RF 3, min.insync.replicas=2) are
# started once and reused by every scenario, in order:
#   identity   10 topics x 4 partitions written by kcat (every codec), idempotent and transactional
#              Java producers (some transactions aborted); mirror m1 created and started with
#              kafka-mirrors; caught up (DescribeMirrors: MIRRORING, lag 0, log ends equal); then
#              kc_replicacmp over the 3 source and the 3 destination replicas of every partition
#              (batches, CRCs, epochs, producer ids, every byte; same log start and end) and
#              kafka-python reads both sides, read_uncommitted and read_committed.
#   read-only  (needs identity's mirror) raw Produce to a mirror topic: READ_ONLY_TOPIC (147) on
#              the leader, refused on the other brokers, nothing appended (replicas still equal
#              the source); config requests setting/removing mirror.name refused.
#   pause-resume (needs identity's mirror) a paused topic stays read-only and does not move while
#              a running one catches up; --delete refused while running; --list shows the
#              source's cluster id; resume catches up, replicas byte-identical to the source.
# Exit 0 pass, 1 fail (each failure printed as FAIL: ...), 2 setup error. Logs and cluster data:
# $KPEER_HOME/mirror-e2e-{src,dst}/ (kept with --keep or after a failure, else removed).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
export KPEER_HOME=${KPEER_HOME:-$REPO/.kpeer}
BUILD=$REPO/build PY= KEEP=0 INJECT= SCENARIOS=identity,read-only,pause-resume SRC_PORT=19792 DST_PORT=19892
while [ $# -gt 0 ]; do
  case "$1" in
    --scenario) SCENARIOS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --inject) INJECT=$2; shift 2 ;;
    --src-port) SRC_PORT=$2; shift 2 ;;
    --dst-port) DST_PORT=$2; shift 2 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
BUILD=$(cd "$BUILD" && pwd -P) || exit 2
CL=$REPO/tests/cluster/cluster.sh
KM=$BUILD/bin/kafka-mirrors
CMP=$BUILD/bin/kc_replicacmp
SO=$BUILD/lib/kmirror.so
PEER=$REPO/tests/peers/peer-tools.sh
SRC=mirror-e2e-src DST=mirror-e2e-dst
T0=$SECONDS
FAILS=0

setup_error() { echo "SETUP ERROR: $*"; exit 2; }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
step() { echo; echo "== [$((SECONDS - T0))s] $*"; }
for f in "$KM" "$CMP" "$SO" "$BUILD/bin/kbroker"; do [ -e "$f" ] || setup_error "$f not built"; done
command -v kcat >/dev/null || setup_error "kcat not installed (scripts/deps.sh)"
[ -n "$PY" ] || PY=$("$REPO/tests/clients/setup-venv.sh") || setup_error "no clients venv"
ME2E=("$PY" "$HERE/me2e.py")
WORK=$KPEER_HOME/mirror-e2e-work
rm -rf "$WORK" && mkdir -p "$WORK"

cleanup() {
  local rc=$?
  if [ "$KEEP" = 1 ] || [ "$FAILS" -ne 0 ] || [ "$rc" -ne 0 ]; then
    echo "clusters and logs kept: $KPEER_HOME/$SRC, $KPEER_HOME/$DST, $WORK"
    if [ "$KEEP" != 1 ]; then
      "$CL" stop --name "$SRC" >/dev/null 2>&1
      "$CL" stop --name "$DST" >/dev/null 2>&1
    fi
  else
    "$CL" stop --name "$SRC" >/dev/null 2>&1
    "$CL" stop --name "$DST" >/dev/null 2>&1
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

# until_ok SECONDS WHAT CMD... -- run CMD (output to $WORK/last) until it succeeds or the deadline
until_ok() {
  local secs=$1 what=$2 end
  shift 2
  end=$((SECONDS + secs))
  until "$@" >"$WORK/last" 2>&1; do
    if [ "$SECONDS" -ge "$end" ]; then
      fail "$what: not within ${secs}s; last output:"
      sed 's/^/  /' "$WORK/last" | tail -20
      return 1
    fi
    sleep 1 # poll interval of the condition
  done
  echo "ok: $what ($((SECONDS - end + secs))s)"
}

# ------------------------------------------------------------------------ the two clusters
step "start the source cluster ($SRC: 3 kbroker brokers) and the destination ($DST: 3 brokers with kmirror.so + controller node)"
"$CL" stop --name "$SRC" >/dev/null 2>&1
"$CL" stop --name "$DST" >/dev/null 2>&1
# free_base P -- P, or the next P+200k whose cluster ports (P, P+1, P+10, P+11, P+20, P+21,
# P+31) nobody listens on (the machine is shared with other suites)
free_base() {
  local b=$1 o busy
  for _ in $(seq 1 20); do
    busy=0
    for o in 0 1 10 11 20 21 31; do
      [ -z "$(ss -Hltn "( sport = :$((b + o)) )" 2>/dev/null)" ] || busy=1
    done
    [ "$busy" = 0 ] && { echo "$b"; return; }
    b=$((b + 200))
  done
  setup_error "no free ports from $1 on"
}
SRC_PORT=$(free_base "$SRC_PORT")
DST_PORT=$(free_base "$DST_PORT")
[ "$DST_PORT" != "$SRC_PORT" ] || DST_PORT=$(free_base $((SRC_PORT + 100)))
"$CL" start --name "$SRC" --backend kbroker --build "$BUILD" --base-port "$SRC_PORT" \
  --controllers node1 --override min.insync.replicas=2 >"$WORK/src-start.log" 2>&1 &
spid=$!
"$CL" start --name "$DST" --backend kbroker --build "$BUILD" --base-port "$DST_PORT" \
  --controllers separate --override "plugin.paths=$SO" --override mirror.enable=true \
  --override default.replication.factor=3 --override min.insync.replicas=2 \
  >"$WORK/dst-start.log" 2>&1 || { cat "$WORK/dst-start.log"; setup_error "destination cluster did not start"; }
wait "$spid" || { cat "$WORK/src-start.log"; setup_error "source cluster did not start"; }
S=$("$CL" bootstrap --name "$SRC")
D=$("$CL" bootstrap --name "$DST")
echo "source $S, destination $D"

# cmp_partition TOPIC PART -- kc_replicacmp --same-end over the 3 source and 3 destination
# replicas; every replica must start at offset 0 (the whole log is compared).
cmp_partition() {
  local t=$1 p=$2 dirs=() i
  for i in 1 2 3; do dirs+=("$("$CL" partdir "$i" "$t" "$p" --name "$SRC")"); done
  for i in 1 2 3; do dirs+=("$("$CL" partdir "$i" "$t" "$p" --name "$DST")"); done
  "$CMP" --same-end "${dirs[@]}" >"$WORK/cmp-$t-$p.txt" 2>&1 || return 1
  [ "$(grep -c '^replica [0-9] .*, offsets 0\.\.' "$WORK/cmp-$t-$p.txt")" = 6 ] || {
    echo "a replica does not start at offset 0"; return 1; }
  cat "$WORK/cmp-$t-$p.txt"
}
# cmp_topics TOPIC... -- every partition (0..3) of every topic; polled, 60 s for them all
# (followers may still be fetching the last batches)
cmp_topics() {
  local t p ok n=0 b=0 end=$((SECONDS + 60))
  for t in "$@"; do
    for p in 0 1 2 3; do
      ok=0
      while :; do
        if cmp_partition "$t" "$p" >"$WORK/cmp.out" 2>&1; then ok=1; break; fi
        [ "$SECONDS" -lt "$end" ] || break
        sleep 1 # poll interval
      done
      if [ "$ok" = 0 ]; then
        fail "$t-$p: the 3 source and 3 destination replicas differ (kc_replicacmp --same-end):"
        cat "$WORK/cmp.out" "$WORK/cmp-$t-$p.txt" 2>/dev/null | sed 's/^/  /' | head -20
        continue
      fi
      n=$((n + 1))
      b=$((b + $(sed -n 's/^replicacmp: OK: 6 replicas hold the same \([0-9]*\) batches.*/\1/p' "$WORK/cmp-$t-$p.txt")))
    done
  done
  echo "ok: $n partitions identical on 6 replicas, $b batches in all"
}

# ------------------------------------------------------------------------ scenario identity
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
  "$KM" --bootstrap-server "$D" --create --mirror m1 --mirror-config "$WORK/m1.properties" ||
    { fail "kafka-mirrors --create"; return; }
  # The definition reaches the other brokers through the metadata log: a --start through a
  # broker that has not applied it yet answers UNKNOWN_CLUSTER_MIRROR (seen once).
  listed_everywhere() {
    local b
    for b in ${D//,/ }; do
      "$KM" --bootstrap-server "$b" --list | grep -q '^m1 ' || { echo "$b does not list m1 yet"; return 1; }
    done
  }
  until_ok 30 "every destination broker lists mirror m1" listed_everywhere || return
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

# ------------------------------------------------------------------------ scenario read-only
scenario_read_only() {
  step "read-only: a plain topic ro-plain on the destination; raw Produce and config requests against mirror topic id-00"
  "${ME2E[@]}" create-topics "$D" 1 3 ro-plain || { fail "create ro-plain"; return; }
  "${ME2E[@]}" read-only "$S" "$D" id-00 ro-plain >"$WORK/ro.out" 2>&1 || fail "read-only checks (below)"
  cat "$WORK/ro.out"
  step "read-only: nothing was appended to any replica of id-00 (still byte-identical to the source)"
  cmp_topics id-00
}

# ------------------------------------------------------------------------ scenario pause-resume
scenario_pause_resume() {
  local before after rc cid
  step "pause-resume: --pause id-01 (id-02 keeps running), produce to both on the source"
  "$KM" --bootstrap-server "$D" --pause --mirror m1 --topic id-01 --wait --timeout-ms 60000 \
    >"$WORK/pause.out" 2>&1 || { cat "$WORK/pause.out"; fail "kafka-mirrors --pause --wait"; return; }
  tail -n 5 "$WORK/pause.out"
  "${ME2E[@]}" ends "$D" id-01 >"$WORK/ends-before"
  seq 1 400 | sed 's/.*/p&:paused &/' | timeout 60 kcat -b "$S" -P -t id-01 -K: -z lz4 || fail "produce id-01"
  seq 1 400 | sed 's/.*/p&:running &/' | timeout 60 kcat -b "$S" -P -t id-02 -K: -z zstd || fail "produce id-02"
  # The running topic catching up shows the fetchers work meanwhile; the paused one must not move.
  until_ok 60 "id-02 (running) caught up with the source" cmp_topics_quiet id-02 || return
  "${ME2E[@]}" ends "$D" id-01 >"$WORK/ends-after"
  if cmp -s "$WORK/ends-before" "$WORK/ends-after"; then
    echo "ok: paused id-01 did not move on the destination ($(tr '\n' ' ' <"$WORK/ends-after"))"
  else
    fail "paused id-01 moved: before $(tr '\n' ' ' <"$WORK/ends-before"), after $(tr '\n' ' ' <"$WORK/ends-after")"
  fi
  read -r rc _ < <("${ME2E[@]}" produce-one "$D" id-01 0)
  [ "$rc" = 147 ] && echo "ok: a paused mirror topic is still read-only (Produce: 147)" ||
    fail "Produce to paused id-01: error code $rc, want READ_ONLY_TOPIC 147"
  "$KM" --bootstrap-server "$D" --delete --mirror m1 >"$WORK/delete.out" 2>&1
  rc=$?
  if [ "$rc" = 1 ] && grep -q CLUSTER_MIRROR_NOT_EMPTY "$WORK/delete.out"; then
    echo "ok: --delete refused while topics are not stopped: $(head -1 "$WORK/delete.out")"
  else
    fail "--delete while running: exit $rc, want 1 with CLUSTER_MIRROR_NOT_EMPTY: $(cat "$WORK/delete.out")"
  fi
  cid=$(sed -n 's/^CLUSTER_ID=//p' "$KPEER_HOME/$SRC/harness.env")
  if "$KM" --bootstrap-server "$D" --list | grep -qE "^m1 +10 +$cid "; then
    echo "ok: --list shows m1 with 10 topics and the source's cluster id $cid"
  else
    fail "--list does not show m1 with 10 topics and source cluster id $cid: $("$KM" --bootstrap-server "$D" --list)"
  fi
  step "pause-resume: --resume id-01: it continues from its log end to the source's"
  "$KM" --bootstrap-server "$D" --resume --mirror m1 --topic id-01 --wait --timeout-ms 60000 \
    >"$WORK/resume.out" 2>&1 || { cat "$WORK/resume.out"; fail "kafka-mirrors --resume --wait"; return; }
  tail -n 5 "$WORK/resume.out"
  until_ok 120 "40 partitions caught up after the resume" "${ME2E[@]}" caught-up "$KM" "$D" "$S" m1 40 || return
  cmp_topics id-01 id-02
}
cmp_topics_quiet() { cmp_partition "$1" 0 && cmp_partition "$1" 1 && cmp_partition "$1" 2 && cmp_partition "$1" 3; }

IFS=, read -r -a SC <<<"$SCENARIOS"
for s in "${SC[@]}"; do
  case "$s" in
    identity) scenario_identity ;;
    read-only) scenario_read_only ;;
    pause-resume) scenario_pause_resume ;;
    *) setup_error "unknown scenario $s" ;;
  esac
done
echo
if [ "$FAILS" -ne 0 ]; then
  echo "mirror_e2e: FAILED ($FAILS failure(s)) in $((SECONDS - T0))s"
  exit 1
fi
echo "mirror_e2e: OK ($SCENARIOS) in $((SECONDS - T0))s"
