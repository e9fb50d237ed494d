#!/usr/bin/env bash
# kcat_test.sh KBROKER smoke|full -- the real kbroker with kcat (librdkafka).
#
# smoke: metadata (-L), auto-created topic, 200 lz4 records produced and consumed back with
#        keys, values and offsets checked.
# full:  also every codec (none, gzip, snappy, lz4, zstd) over 3 partitions with per-partition
#        contiguous offsets and exact content, headers, null values, large records, reading
#        from an offset, ListOffsets by time (-Q), and a restart (SIGTERM, then SIGKILL) with
#        the data and offsets still there and new offsets continuing.
# Waits use read -t on the broker's stdout and kcat's own -e (exit at end); no sleeps.
set -euo pipefail
KB=${1:?kbroker path}
MODE=${2:-full}
command -v kcat >/dev/null || { echo "FAIL: kcat not installed"; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/kbat-kcat.XXXXXX")
PID=
fails=0
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill -KILL "$PID" 2>/dev/null || true; fi
  if [ "$fails" -ne 0 ]; then echo "--- broker log (tail)"; tail -n 40 "$W/broker.log" || true; fi
  rm -rf "$W"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
check() { if [ "$1" != "$2" ]; then fail "$3: got '$1', want '$2'"; else echo "ok: $3"; fi; }

cat >"$W/server.properties" <<EOF
node.id=1
listeners=PLAINTEXT://127.0.0.1:0
log.dirs=$W/data
num.partitions=3
log.segment.bytes=1048576
EOF

start() {
  mkfifo "$W/ready"
  "$KB" --config "$W/server.properties" >"$W/ready" 2>>"$W/broker.log" &
  PID=$!
  exec 9<"$W/ready"
  if ! read -r -t 60 line <&9; then fail "kbroker did not start"; exit 1; fi
  exec 9<&-
  rm -f "$W/ready"
  BOOT=$(echo "$line" | grep -o '127\.0\.0\.1:[0-9]*' | head -1)
  [ -n "$BOOT" ] || { fail "no port in '$line'"; exit 1; }
}
stop() { # $1: TERM or KILL
  kill -"$1" "$PID"
  local rc=0
  timeout 30 tail --pid="$PID" -f /dev/null || fail "kbroker did not exit after SIG$1"
  wait "$PID" || rc=$?
  if [ "$1" = TERM ]; then check "$rc" 0 "exit status after SIGTERM"; fi
  PID=
}
K() { timeout 60 kcat -b "$BOOT" -X socket.timeout.ms=20000 "$@"; }

# Produce N "key-i<TAB>value-i" lines to topic $1 with codec $2; consume and verify them all.
roundtrip() {
  local topic=$1 codec=$2 n=$3
  seq 1 "$n" | awk -v c="$codec" '{printf "key-%d\t%s-value-%d\n", $1, c, $1}' >"$W/in.txt"
  K -P -t "$topic" -z "$codec" -K $'\t' -X linger.ms=5 <"$W/in.txt" ||
    { fail "$topic: produce"; return; }
  K -C -t "$topic" -o beginning -e -q -f '%p\t%o\t%k\t%s\n' >"$W/out.txt" ||
    { fail "$topic: consume"; return; }
  check "$(wc -l <"$W/out.txt")" "$n" "$topic ($codec): records consumed"
  check "$(cut -f3,4 "$W/out.txt" | sort | md5sum)" "$(sort "$W/in.txt" | md5sum)" \
    "$topic ($codec): keys and values"
  # per partition: offsets 0..n-1 in order
  local bad
  bad=$(awk -F'\t' '{ if ($2 != next_[$1] + 0) bad++; next_[$1] = $2 + 1 } END { print bad + 0 }' \
    "$W/out.txt")
  check "$bad" 0 "$topic ($codec): contiguous offsets per partition"
}

start
K -L >"$W/L.txt"
grep -q "broker 1 at $BOOT" "$W/L.txt" && echo "ok: -L lists the broker" || fail "-L: $(cat "$W/L.txt")"

if [ "$MODE" = smoke ]; then
  roundtrip smoke lz4 200
  K -L -t smoke >"$W/L.txt"
  grep -q 'topic "smoke" with 3 partitions' "$W/L.txt" && echo "ok: -L topic" ||
    fail "-L topic: $(cat "$W/L.txt")"
  stop TERM
  [ "$fails" -eq 0 ] && echo "PASS" && exit 0
  exit 1
fi

for c in none gzip snappy lz4 zstd; do
  roundtrip "codec-$c" "$c" 3000
done
K -L -t codec-zstd >"$W/L.txt"
grep -q 'topic "codec-zstd" with 3 partitions' "$W/L.txt" && echo "ok: -L topic" ||
  fail "-L topic: $(cat "$W/L.txt")"

# headers and null values
echo "hv" | K -P -t hdr -p 0 -H "h1=v1" -H "h2=v2" -k hk
printf 'tomb:\n' | K -P -t hdr -p 0 -K : -Z
K -C -t hdr -p 0 -o beginning -e -q -f '%k|%s|%h\n' >"$W/h.txt"
grep -q '^hk|hv|h1=v1,h2=v2$' "$W/h.txt" && echo "ok: headers" || fail "headers: $(cat "$W/h.txt")"
K -C -t hdr -p 0 -o beginning -e -q -f '%k|%S\n' >"$W/h.txt"
grep -q '^tomb|-1$' "$W/h.txt" && echo "ok: null value" || fail "null value: $(cat "$W/h.txt")"

# large records (300 KiB values; max.message.bytes is 1 MiB)
head -c 307200 /dev/zero | tr '\0' 'a' >"$W/big1"
for i in 1 2 3; do K -P -t big -p 0 -z none "$W/big1"; done
K -C -t big -p 0 -o beginning -e -q -f '%o %S\n' >"$W/big.txt"
check "$(cat "$W/big.txt" | tr '\n' ' ')" "0 307200 1 307200 2 307200 " "large records"

# from an offset
K -C -t codec-gzip -p 1 -o 5 -c 1 -e -q -f '%o\n' >"$W/o.txt"
check "$(cat "$W/o.txt")" 5 "consume from offset 5"

# ListOffsets by timestamp: a time far in the past is the first offset, the future is the end
check "$(K -Q -t codec-none:0:1 | grep -o 'offset [0-9-]*' | head -1)" "offset 0" "-Q old time"
end0=$(K -C -t codec-none -p 0 -o -1 -c 1 -e -q -f '%o\n')
check "$(K -Q -t "codec-none:0:$(( $(date +%s) * 1000 + 3600000 ))" | grep -o 'offset [0-9-]*' | head -1)" \
  "offset -1" "-Q future time"

# restart: SIGTERM keeps everything; SIGKILL too (data on disk, metadata snapshot)
before=$(K -C -t codec-lz4 -o beginning -e -q -f '%p %o %k %s\n' | sort | md5sum)
stop TERM
start
after=$(K -C -t codec-lz4 -o beginning -e -q -f '%p %o %k %s\n' | sort | md5sum)
check "$after" "$before" "data after SIGTERM restart"
echo "late" | K -P -t codec-none -p 0 -k late
check "$(K -C -t codec-none -p 0 -o -1 -c 1 -e -q -f '%o %k\n')" "$((end0 + 1)) late" \
  "offsets continue"
stop KILL
start
after=$(K -C -t codec-lz4 -o beginning -e -q -f '%p %o %k %s\n' | sort | md5sum)
check "$after" "$before" "data after SIGKILL restart"
check "$(K -C -t codec-none -p 0 -o -1 -c 1 -e -q -f '%o %k\n')" "$((end0 + 1)) late" \
  "last record after SIGKILL"
stop TERM

[ "$fails" -eq 0 ] && echo "PASS" && exit 0
echo "$fails failure(s)"
exit 1
