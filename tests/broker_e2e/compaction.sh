#!/usr/bin/env bash
# compaction.sh KBROKER -- log compaction end to end with kcat.
#
# kbroker with a fast cleaner (log.cleaner.backoff.ms=200); a topic created with CreateTopics
# (create_topic.py): cleanup.policy=compact, segment.bytes=2048, min.cleanable.dirty.ratio=0.01,
# delete.retention.ms=5000. One idempotent kcat producer (order kept, so the n-th line is at offset
# n-1) writes 10 updates of each of 20 keys k00..k19, tombstones (-Z, empty value) for k00..k04,
# then 40 padded filler records (keys f0..f3) so that the tombstones leave the active segment.
# Phase A (deadline 90 s): poll-consume from the beginning (kcat -f '%o %k %S %s') until no key
#   k05..k19 has an older value left; then: the latest value of every live key at its original
#   offset, no older value of any kNN key, offsets strictly increasing with the removed offsets as
#   gaps, the tombstones still there (null, at their offsets: delete.retention.ms not over), and
#   fewer bytes in the partition's .log files than before.
# Phase B (deadline 90 s): a few more filler records every round (new dirty data, so that the
#   cleaner runs again) until the tombstones are gone, not before delete.retention.ms after they
#   were written; the kNN checks hold again.
# Then SIGTERM: exit status 0. Waits poll conditions against deadlines.
set -uo pipefail
KB=${1:?kbroker path}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v kcat >/dev/null || { echo "FAIL: kcat not installed"; exit 2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/kb-compaction.XXXXXX")
PID=
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "PASS: $*"; }
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill -KILL "$PID" 2>/dev/null || true; fi
  if [ "$fails" -ne 0 ]; then
    echo "--- broker log (tail)"; tail -n 30 "$W/broker.log"; echo "--- work dir kept: $W"
  else
    rm -rf "$W"
  fi
}
trap cleanup EXIT

cat >"$W/server.properties" <<CONF
node.id=1
listeners=PLAINTEXT://127.0.0.1:0
log.dirs=$W/data
auto.create.topics.enable=false
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
num.network.threads=1
num.io.threads=2
log.cleaner.backoff.ms=200
log.cleaner.dedupe.buffer.size=2097152
CONF
"$KB" --config "$W/server.properties" >"$W/broker.out" 2>"$W/broker.log" &
PID=$!
BOOT=
deadline=$(($(date +%s) + 60))
while [ -z "$BOOT" ] && [ "$(date +%s)" -lt "$deadline" ]; do
  BOOT=$(grep -m1 '^kbroker started' "$W/broker.out" | grep -o '127\.0\.0\.1:[0-9]*' | head -1)
  kill -0 "$PID" 2>/dev/null || break
  [ -n "$BOOT" ] || sleep 0.05 # poll interval
done
[ -n "$BOOT" ] || { fail "kbroker did not start"; exit 1; }

T=compacted
python3 "$HERE/create_topic.py" "$BOOT" $T 1 cleanup.policy=compact segment.bytes=2048 \
  min.cleanable.dirty.ratio=0.01 delete.retention.ms=5000 min.compaction.lag.ms=0 ||
  { fail "CreateTopics $T"; exit 1; }
K() { timeout 60 kcat -b "$BOOT" -X socket.timeout.ms=20000 "$@"; }
PAD=$(printf '%0200d' 0)
# Produce stdin lines "key:value" (empty value = null) in order, small batches.
P() {
  K -P -t $T -p 0 -K: -Z -X enable.idempotence=true -X linger.ms=0 -X batch.num.messages=5
}

# Round 1: the expected layout (line n at offset n-1).
: >"$W/in.txt"
for u in $(seq 1 10); do
  for k in $(seq -w 0 19); do echo "k$k:k$k-v$u"; done >>"$W/in.txt"
done
for k in 00 01 02 03 04; do echo "k$k:"; done >>"$W/in.txt"
for i in $(seq 1 40); do echo "f$((i % 4)):f-$i-$PAD"; done >>"$W/in.txt"
P <"$W/in.txt" || { fail "kcat produce"; exit 1; }
T0=$(date +%s%3N) # every tombstone was written before this: none may go before T0 + 5000 ms
NPROD=$(wc -l <"$W/in.txt")
# Latest offset of every kNN key, and whether it is a tombstone.
awk -F: '$1 ~ /^k/ {o[$1]=NR-1; v[$1]=$2} END {for (k in o) print k, o[k], (v[k]=="" ? "NULL" : v[k])}' \
  "$W/in.txt" | sort >"$W/expect.txt"

logbytes() { cat "$W"/data/$T-0/*.log 2>/dev/null | wc -c; }
consume() { K -C -t $T -p 0 -o beginning -e -q -f '%o %k %S %s\n' >"$W/out.txt" 2>"$W/kcat.err"; }
# Checks of the kNN records in out.txt. $1 = "with" / "without" tombstones.
check_knn() {
  python3 - "$W/expect.txt" "$W/out.txt" "$NPROD" "$1" <<'PY'
import sys
exp = {}
for line in open(sys.argv[1]):
    k, o, v = line.split(" ", 2)
    exp[k] = (int(o), v.rstrip("\n"))
nprod, mode = int(sys.argv[3]), sys.argv[4]
bad, last, offs, seen = [], -1, [], {}
for line in open(sys.argv[2]):
    o, k, size, val = (line.rstrip("\n").split(" ", 3) + [""])[:4]
    o = int(o)
    if o <= last:
        bad.append("offset %d after %d" % (o, last))
    last = o
    offs.append(o)
    if k.startswith("k"):
        seen.setdefault(k, []).append((o, "NULL" if size == "-1" else val))
for k, (o, v) in sorted(exp.items()):
    got = seen.get(k, [])
    if v == "NULL" and mode == "without":
        if got:
            bad.append("%s: tombstoned key still present %s" % (k, got))
        continue
    if got != [(o, v)]:
        bad.append("%s: want only (%d, %s), got %s" % (k, o, v, got[:4]))
gaps = nprod - len(offs)
if not offs or gaps <= 0:
    bad.append("no records removed (%d records for %d produced)" % (len(offs), nprod))
for b in bad[:10]:
    print("  " + b)
print("  %d records read, %d produced before phase B, %d offsets are gaps" % (len(offs), nprod, gaps))
sys.exit(1 if bad else 0)
PY
}
# Done when no live kNN key has an older value (the cleaner passed over the updates).
knn_clean() {
  awk '$2 ~ /^k/ {n[$2]++} END {for (k in n) if (n[k] > 1) exit 1}' "$W/out.txt"
}

BYTES0=$(logbytes)
SEGS0=$(ls "$W"/data/$T-0/*.log | wc -l)
echo "produced $NPROD records: $BYTES0 bytes in $SEGS0 segments"
deadline=$(($(date +%s) + 90))
ok=0
while [ "$(date +%s)" -lt "$deadline" ]; do
  if consume && knn_clean; then ok=1; break; fi
  sleep 0.2 # poll interval
done
TA=$(date +%s%3N)
if [ $ok = 1 ]; then
  pass "phase A: the cleaner removed the older values ($(logbytes) bytes in $(ls "$W"/data/$T-0/*.log | wc -l) segments now)"
  if check_knn with; then pass "latest value of every key at its original offset, older values gone, gaps"; else fail "phase A checks"; fi
  if awk '$2 ~ /^k0[0-4]$/ && $3 == "-1"' "$W/out.txt" | grep -q .; then
    n=$(awk '$2 ~ /^k0[0-4]$/ && $3 == "-1"' "$W/out.txt" | wc -l)
    [ "$n" = 5 ] && pass "5 tombstones still present before delete.retention.ms" || fail "tombstones: $n of 5 present in phase A"
  else
    fail "tombstones gone already in phase A (delete.retention.ms=5000)"
  fi
  b=$(logbytes)
  [ "$b" -lt "$BYTES0" ] && pass "log bytes $BYTES0 -> $b" || fail "log bytes did not drop: $BYTES0 -> $b"
else
  fail "phase A: older values still there after 90 s"; cat "$W/out.txt" | head -20
fi

# Phase B: more dirty data each round until the tombstones are gone.
deadline=$(($(date +%s) + 90))
ok=0
r=0
while [ $ok = 0 ] && [ "$(date +%s)" -lt "$deadline" ]; do
  r=$((r + 1))
  for i in $(seq 1 8); do echo "f$((i % 4)):g-$r-$i-$PAD"; done | P || { fail "kcat produce (phase B)"; break; }
  NPROD=$((NPROD + 8))
  if consume && ! awk '$2 ~ /^k0[0-4]$/' "$W/out.txt" | grep -q .; then ok=1; break; fi
  sleep 0.2 # poll interval
done
if [ $ok = 1 ]; then
  now=$(date +%s%3N)
  ms=$((now - T0))
  [ "$ms" -ge 5000 ] || fail "tombstones removed ${ms} ms after they were written (delete.retention.ms=5000)"
  pass "phase B: tombstones removed ${ms} ms after they were written ($((now - TA)) ms after phase A, $r rounds of new data)"
  if check_knn without; then pass "after phase B: latest values at their offsets, no tombstoned key left"; else fail "phase B checks"; fi
else
  fail "phase B: tombstones still present after 90 s"
  grep ' k0[0-4] ' "$W/out.txt" | head
fi

kill -TERM "$PID"
if timeout 30 tail --pid="$PID" -f /dev/null; then
  rc=0; wait "$PID" || rc=$?
  [ "$rc" = 0 ] && pass "kbroker exit status 0 after SIGTERM" || fail "kbroker exit status $rc after SIGTERM"
else
  fail "kbroker did not exit within 30 s of SIGTERM"
fi
PID=
echo "$([ $fails = 0 ] && echo PASS || echo FAIL): compaction ($fails failed)"
[ "$fails" = 0 ]
