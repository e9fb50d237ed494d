#!/usr/bin/env bash
# kcat suite: Debian's kcat (librdkafka 2.0.2) against any broker.
#
#   kcat.sh --bootstrap HOST:PORT      (or KM_BOOTSTRAP=HOST:PORT kcat.sh)
#
# For each compression codec (none, gzip, snappy, lz4, zstd): a fresh 3-partition topic, N keyed
# records with two headers produced by one `kcat -P` (default partitioner), consumed back with
# `kcat -C -o beginning -e`, and checked: every record exactly once with its key, value and
# headers; per partition offsets 0..n-1 and production order; CreateTime timestamps from the
# production window; records in more than one partition; a read from the middle of the log
# (inside a compressed batch) returns exactly the offsets asked for; ListOffsets (`kcat -Q`) end
# offsets equal what was read and timestamp 0 gives offset 0. Then: an idempotent producer, null
# keys/values (-Z), `kcat -L` metadata (partition count, leaders, replicas, ISR, brokers,
# controller), and the topic listing.
# Env: KCAT (binary, default kcat), KCAT_RECORDS (default 300), KM_PYTHON (venv python for the
# topic helper; default tests/clients/setup-venv.sh). Closing line: "N passed, N failed".
set -uo pipefail
KM_SUITE=kcat
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
km_parse_bootstrap "$@"
KCAT=${KCAT:-kcat}
N=${KCAT_RECORDS:-300}
PARTS=3
PY=$(km_python) || exit 2
TOPICS_PY=$KM_CLIENTS_DIR/lib/topics.py
command -v "$KCAT" >/dev/null || { echo "kcat not found (apt-get install kcat)" >&2; exit 2; }
km_log "$("$KCAT" -V 2>&1 | grep -o 'Version.*librdkafka [0-9.]*')"

WORK=$(mktemp -d)
CREATED=()
cleanup() {
  [ ${#CREATED[@]} -gt 0 ] && "$PY" "$TOPICS_PY" --bootstrap "$BOOTSTRAP" delete "${CREATED[@]}" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

K() { timeout 60 "$KCAT" -b "$BOOTSTRAP" -X message.timeout.ms=30000 "$@"; }
# produce_file FILE KCAT-ARGS...: one record per line of FILE (a file argument would be one record)
produce_file() { local f=$1; shift; K -P "$@" <"$f"; }

create_topic() { # create_topic NAME PARTITIONS
  "$PY" "$TOPICS_PY" --bootstrap "$BOOTSTRAP" create "$1" "$2" && CREATED+=("$1")
}

# gen_records CODEC: "key|value" lines; values vary in length (compressible, not constant)
gen_records() {
  awk -v n="$N" -v c="$1" 'BEGIN {
    for (i = 0; i < n; i++) {
      v = sprintf("v%d:", i)
      for (j = 0; j < (i * 7) % 23; j++) v = v sprintf("%s-payload-%d;", c, (i * 31 + j) % 97)
      printf "key-%s-%d|%s\n", c, i, v
    }
  }'
}

# check_content EXPECTED CONSUMED: every record once, key -> value as produced
check_content() {
  local got
  got=$(wc -l <"$2")
  [ "$got" = "$N" ] || { echo "consumed $got records, expected $N"; return 1; }
  diff <(sort "$1") <(awk -F'|' '{ print $3 "|" $4 }' "$2" | sort) | head -5
  [ "${PIPESTATUS[0]}" = 0 ]
}

# check_order CONSUMED: per partition offsets 0..n-1 in order and record index increasing
check_order() {
  awk -F'|' '
    { p = $1; o = $2; split($3, k, "-"); i = k[3] + 0
      if (!(p in next_off)) { next_off[p] = 0; last[p] = -1 }
      if (o != next_off[p]) { printf "partition %s: offset %s, expected %s\n", p, o, next_off[p]; bad = 1; exit 1 }
      if (i <= last[p]) { printf "partition %s offset %s: record %d after record %d\n", p, o, i, last[p]; bad = 1; exit 1 }
      next_off[p] = o + 1; last[p] = i; parts[p] = 1 }
    END { if (bad) exit 1; n = 0; for (p in parts) n++
          if (n < 2) { print "all records in " n " partition(s)"; exit 1 } }' "$1"
}

check_headers() { # CONSUMED CODEC
  awk -F'|' -v want="suite=kcat,codec=$2" '$6 != want { print "offset " $2 " of partition " $1 ": headers \"" $6 "\""; exit 1 }' "$1"
}

check_timestamps() { # CONSUMED T0 T1
  awk -F'|' -v lo="$(($2 - 2000))" -v hi="$(($3 + 2000))" \
    '($5 + 0) < lo || ($5 + 0) > hi { print "timestamp " $5 " outside [" lo "," hi "]"; exit 1 }' "$1"
}

# check_middle TOPIC CONSUMED: `-o X -c 3` on partition 0 returns offsets X..X+2 with their records
check_middle() {
  local n0 mid out want
  n0=$(awk -F'|' '$1 == 0' "$2" | wc -l)
  [ "$n0" -ge 4 ] || { echo "partition 0 has only $n0 records"; return 1; }
  mid=$((n0 / 2))
  out=$(K -C -t "$1" -p 0 -o "$mid" -c 3 -e -f '%o|%k|%s\n' 2>&1 >"$WORK/mid") || { echo "$out"; return 1; }
  want=$(awk -F'|' -v m="$mid" '$1 == 0 && $2 >= m && $2 < m + 3 { print $2 "|" $3 "|" $4 }' "$2")
  [ "$(cat "$WORK/mid")" = "$want" ] || { echo "read from offset $mid: got"; head -3 "$WORK/mid"; echo "want"; echo "$want"; return 1; }
}

# check_list_offsets TOPIC CONSUMED: latest offsets = records per partition; timestamp 0 -> 0
check_list_offsets() {
  local args=() p
  for ((p = 0; p < PARTS; p++)); do args+=(-t "$1:$p:-1"); done
  K -Q "${args[@]}" >"$WORK/latest" 2>"$WORK/latest.err" || { cat "$WORK/latest.err"; return 1; }
  for ((p = 0; p < PARTS; p++)); do
    local n got
    n=$(awk -F'|' -v p=$p '$1 == p' "$2" | wc -l)
    got=$(sed -n "s/^.* \[$p\] offset \(-\{0,1\}[0-9]*\)$/\1/p" "$WORK/latest")
    [ "$got" = "$n" ] || { echo "partition $p: latest offset '$got', consumed $n"; cat "$WORK/latest"; return 1; }
  done
  got=$(K -Q -t "$1:0:0" 2>/dev/null | sed -n 's/^.* \[0\] offset \(-\{0,1\}[0-9]*\)$/\1/p')
  [ "$got" = 0 ] || { echo "offset for timestamp 0: '$got'"; return 1; }
}

# Preflight: without a broker answering metadata, every check below would only wait out timeouts.
if ! km_check "bootstrap answers metadata (kcat -L, 15 s)" K -L -m 15 -J; then
  km_summary
  exit 1
fi

FMT='%p|%o|%k|%s|%T|%h\n'
for codec in none gzip snappy lz4 zstd; do
  t=$(km_topic kc-kcat-$codec)
  if ! create_topic "$t" $PARTS; then km_fail "$codec: create topic" "see above"; continue; fi
  gen_records "$codec" >"$WORK/$codec.in"
  t0=$(km_now_ms)
  km_check "$codec: produce $N keyed records (-z $codec)" \
    produce_file "$WORK/$codec.in" -t "$t" -K '|' -z "$codec" -H suite=kcat -H "codec=$codec"
  t1=$(km_now_ms)
  K -C -t "$t" -o beginning -e -f "$FMT" >"$WORK/$codec.out" 2>"$WORK/$codec.err"
  km_check "$codec: consume from the beginning: every record once, same key and value" \
    check_content "$WORK/$codec.in" "$WORK/$codec.out"
  km_check "$codec: per-partition offsets 0..n-1 in production order, >1 partition used" \
    check_order "$WORK/$codec.out"
  km_check "$codec: headers intact" check_headers "$WORK/$codec.out" "$codec"
  km_check "$codec: CreateTime timestamps from the production window" \
    check_timestamps "$WORK/$codec.out" "$t0" "$t1"
  km_check "$codec: fetch from the middle of partition 0 returns exactly the asked offsets" \
    check_middle "$t" "$WORK/$codec.out"
  km_check "$codec: ListOffsets latest = records per partition, timestamp 0 -> offset 0" \
    check_list_offsets "$t" "$WORK/$codec.out"
done

# Idempotent producer (InitProducerId + sequence numbers), zstd.
t=$(km_topic kc-kcat-idem)
if create_topic "$t" $PARTS; then
  gen_records idem >"$WORK/idem.in"
  km_check "idempotent producer: produce $N records" \
    produce_file "$WORK/idem.in" -t "$t" -K '|' -z zstd -X enable.idempotence=true -H suite=kcat -H codec=idem
  K -C -t "$t" -o beginning -e -f "$FMT" >"$WORK/idem.out" 2>/dev/null
  km_check "idempotent producer: every record once, in order" \
    bash -c "$(declare -f check_content check_order); N=$N; check_content '$WORK/idem.in' '$WORK/idem.out' && check_order '$WORK/idem.out'"
else
  km_fail "idempotent producer: create topic" "see above"
fi

# Null key and null value (-Z) on one partition, with per-message partition 1.
t=$(km_topic kc-kcat-null)
check_nulls() {
  printf 'k-null-value|\n|v-null-key\nk-both|v-both\n' | K -P -t "$t" -p 1 -K '|' -Z || return 1
  K -C -t "$t" -p 1 -o beginning -e -Z -f '%o|%k|%K|%s|%S\n' >"$WORK/null.out" 2>/dev/null
  local want='0|k-null-value|12|NULL|-1
1|NULL|-1|v-null-key|10
2|k-both|6|v-both|6'
  [ "$(cat "$WORK/null.out")" = "$want" ] || { echo "got:"; cat "$WORK/null.out"; return 1; }
}
if create_topic "$t" 2; then
  km_check "null key and null value round trip (-Z), explicit partition" check_nulls
else
  km_fail "null key and null value: create topic" "see above"
fi

# Metadata of one topic: partition count, leaders among the brokers, replicas and ISR.
t=$(km_topic kc-kcat-md)
check_metadata() {
  K -L -t "$t" -J >"$WORK/md.json" || return 1
  "$PY" - "$WORK/md.json" "$t" 5 <<'PYEOF'
import json, re, sys
md, topic, n = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
def need(cond, what):
    if not cond:
        print("kcat -L: " + what + ": " + json.dumps(md)); sys.exit(1)
ids = [b["id"] for b in md["brokers"]]
need(ids, "no brokers")
need(all(re.fullmatch(r"[^:]+:[0-9]+", b["name"]) for b in md["brokers"]), "broker names are not host:port")
need(md.get("controllerid") in ids, "controller id %r is not a broker" % md.get("controllerid"))
need(len(md["topics"]) == 1 and md["topics"][0]["topic"] == topic, "not exactly the asked topic")
t = md["topics"][0]
need("error" not in t, "topic error")
need(sorted(p["partition"] for p in t["partitions"]) == list(range(n)), "partitions are not 0..%d" % (n - 1))
for p in t["partitions"]:
    need("error" not in p, "partition %d error" % p["partition"])
    need(p["leader"] in ids, "partition %d leader %r unknown" % (p["partition"], p["leader"]))
    need(p["leader"] in [r["id"] for r in p["replicas"]], "partition %d leader not a replica" % p["partition"])
    need(p["leader"] in [r["id"] for r in p["isrs"]], "partition %d leader not in ISR" % p["partition"])
PYEOF
}
check_list_all() {
  K -L -J >"$WORK/all.json" || return 1
  "$PY" -c 'import json, sys
listed = {t["topic"] for t in json.load(open(sys.argv[1]))["topics"]}
missing = [x for x in sys.argv[2:] if x not in listed]
if missing: sys.exit("topics missing from kcat -L: %s" % missing)' "$WORK/all.json" "${CREATED[@]}"
}
if create_topic "$t" 5; then
  km_check "kcat -L -t: 5 partitions, each with a known leader in its replicas and ISR; controller is a broker" \
    check_metadata
  km_check "kcat -L: every topic this suite created is listed" check_list_all
else
  km_fail "metadata: create topic" "see above"
fi

km_summary
