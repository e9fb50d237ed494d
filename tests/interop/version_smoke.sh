#!/usr/bin/env bash
# version_smoke.sh --version V [--base-port P] [--records N]
#
# interop_kafka_smoke_<line>: an older Apache Kafka release (3.9.x KRaft, 2.8.x with ZooKeeper; any
# version tests/peers/kafka-cluster.sh starts) runs on this machine's JVM and takes traffic from
# librdkafka (kcat):
#   1. start a 1-node cluster of version V (2.x: its ZooKeeper too), 2. check that the broker is
#   that release line (the Fetch version range it advertises in ApiVersions), 3. create a topic
#   (3 partitions) with that release's own TopicCommand and wait until kcat sees a leader for
#   every partition, 4. produce N records per codec (none, gzip, snappy, lz4, zstd;
#   idempotent kcat), 5. consume everything with kcat and compare with what was written: the same
#   (key, value) set, no duplicates, offsets consecutive from 0 in every partition, 6. stop and
#   check that no process and no listener is left.
# Fails (never skips) when java, mvn, kcat or the jars are unavailable.
# Ports: --base-port, else $VSMOKE_BASE_PORT, else 23092 (3.9.x), 23192 (2.8.x), 23292 (others):
# below Linux's ephemeral range (32768-60999), where a client connection's local port can hold
# the port a broker is about to bind. A start that still fails on "Address already in use" is
# retried twice, 20 ports higher each time.
# Env: KPEER_HOME, VSMOKE_BASE_PORT.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PEERS=$HERE/../peers
# shellcheck source=../peers/versions.env
. "$PEERS/versions.env"

VERSION= PORT=${VSMOKE_BASE_PORT:-} N=200
while [ $# -gt 0 ]; do
  case "$1" in
    --version) VERSION=$2; shift 2 ;;
    --base-port) PORT=$2; shift 2 ;;
    --records) N=$2; shift 2 ;;
    *) echo "usage: version_smoke.sh --version V [--base-port P] [--records N]" >&2; exit 64 ;;
  esac
done
[ -n "$VERSION" ] || { echo "version_smoke: --version is required" >&2; exit 64; }
if [ -z "$PORT" ]; then
  case "$VERSION" in 3.9.*) PORT=23092 ;; 2.8.*) PORT=23192 ;; *) PORT=23292 ;; esac
fi
command -v kcat >/dev/null || { echo "version_smoke: FAIL: kcat not found (apt-get install kcat)" >&2; exit 1; }

NAME=interop-smoke-$VERSION
TOPIC=smoke-v
CODECS=(none gzip snappy lz4 zstd)
WORK=$(mktemp -d)
T0=$(date +%s%3N)
step() { echo "[smoke $VERSION +$(($(date +%s%3N) - T0)) ms] $*"; }
fail() { echo "version_smoke: FAIL: $*" >&2; exit 1; }

cleanup() {
  local rc=$?
  if [ -n "${STARTED:-}" ]; then
    "$PEERS/kafka-cluster.sh" stop --name "$NAME" || true
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The Fetch version range each release line advertises (protocol fact, Kafka's schemas): the check
# that the broker answering is really the release asked for.
case "$VERSION" in
  2.8.*) FETCH_RANGE=0..12 ;;
  3.9.*) FETCH_RANGE=0..17 ;;
  *) FETCH_RANGE= ;;
esac

step "resolving Kafka $VERSION jars and building peer-tools"
"$PEERS/kafka-libs.sh" --no-mm2 "$VERSION" >/dev/null
"$PEERS/mvn-build.sh" "$HERE/../java/peer-tools" peer-tools.jar >/dev/null

KH=${KPEER_HOME:-$(cd "$HERE/../.." && pwd)/.kpeer}
for attempt in 1 2 3; do
  step "starting 1-node cluster '$NAME' on base port $PORT ($(java -version 2>&1 | head -1))"
  STARTED=1
  if "$PEERS/kafka-cluster.sh" start --name "$NAME" --nodes 1 --version "$VERSION" --base-port "$PORT" \
    2>"$WORK/start.err"; then
    cat "$WORK/start.err" >&2
    break
  fi
  cat "$WORK/start.err" >&2
  STARTED=
  if [ "$attempt" -lt 3 ] && grep -qsE 'Address already in use|already in use on this machine' \
    "$WORK/start.err" "$KH/$NAME/node1.log" "$KH/$NAME/zk.log"; then
    echo "version_smoke: port $PORT or $((PORT + 1)) was taken; trying $((PORT + 20))" >&2
    PORT=$((PORT + 20))
    continue
  fi
  fail "the cluster did not start"
done
BS=$("$PEERS/kafka-cluster.sh" bootstrap --name "$NAME")
PIDS=$(cat "$KH/$NAME"/*.pid)
"$PEERS/kafka-cluster.sh" status --name "$NAME"

step "ApiVersions: the broker's Fetch range"
fetch=$(kcat -b "$BS" -L -d feature,protocol 2>&1 | sed -n 's/.*ApiKey Fetch (1) Versions \([0-9.]*\).*/\1/p' | head -1)
echo "broker advertises Fetch $fetch"
[ -n "$fetch" ] || fail "no ApiVersions answer seen from $BS"
if [ -n "$FETCH_RANGE" ] && [ "$fetch" != "$FETCH_RANGE" ]; then
  fail "Kafka $VERSION should advertise Fetch $FETCH_RANGE, the broker says $fetch"
fi

step "creating topic $TOPIC (3 partitions) with Kafka $VERSION's TopicCommand"
case "$VERSION" in
  2.* | 3.[0-5].*) TOPIC_CMD=kafka.admin.TopicCommand ;;
  *) TOPIC_CMD=org.apache.kafka.tools.TopicCommand ;;
esac
LIBS=$KH/kafka-$VERSION/libs
# The release's own tool and its default timeouts (30 s a request): the Java Admin of peer-tools
# gives up after 3 s, which a ZooKeeper-mode CreateTopics on a loaded 2-core machine can exceed.
java -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
  "-Dlog4j.configuration=file:$KH/$NAME/log4j.properties" -cp "$LIBS/*" "$TOPIC_CMD" \
  --bootstrap-server "$BS" --create --topic "$TOPIC" --partitions 3 --replication-factor 1 \
  || fail "$TOPIC_CMD --create failed"
# leaders_ok: kcat's Metadata shows 3 partitions of the topic, each with a leader and no error.
leaders_ok() {
  local md
  md=$(kcat -b "$BS" -L -t "$TOPIC" -m 10 2>&1) || return 1
  [ "$(grep -c 'partition [0-9]*, leader [0-9]*,' <<<"$md")" = 3 ] && ! grep -q 'Broker:' <<<"$md"
}
end=$((SECONDS + 90))
until leaders_ok; do
  [ $SECONDS -lt $end ] || { kcat -b "$BS" -L -t "$TOPIC" >&2 || true; fail "$TOPIC: no leader for every partition within 90 s"; }
  sleep 0.5 # poll interval of a deadline-bounded wait
done

step "producing $N records with each codec (${CODECS[*]}), idempotent kcat"
: >"$WORK/expected"
for c in "${CODECS[@]}"; do
  for ((i = 0; i < N; i++)); do printf 'k-%s-%d\tv-%s-%d-%s\n' "$c" "$i" "$c" "$i" "$RANDOM$RANDOM"; done >"$WORK/in-$c"
  kcat -b "$BS" -P -t "$TOPIC" -K $'\t' -z "$c" -X enable.idempotence=true -X linger.ms=5 \
    -X message.timeout.ms=60000 <"$WORK/in-$c" 2>"$WORK/produce-$c.err" \
    || { cat "$WORK/produce-$c.err" >&2; fail "kcat produce with $c failed"; }
  if grep -q 'Delivery failed' "$WORK/produce-$c.err"; then cat "$WORK/produce-$c.err" >&2; fail "kcat: delivery failed ($c)"; fi
  cat "$WORK/in-$c" >>"$WORK/expected"
done
TOTAL=$((N * ${#CODECS[@]}))

step "consuming $TOTAL records with kcat and comparing"
kcat -b "$BS" -C -t "$TOPIC" -o beginning -e -q -f '%p\t%o\t%k\t%s\n' -X fetch.wait.max.ms=100 \
  >"$WORK/out" 2>"$WORK/consume.err" || { cat "$WORK/consume.err" >&2; fail "kcat consume failed"; }
got=$(wc -l <"$WORK/out")
[ "$got" = "$TOTAL" ] || fail "read $got records, wrote $TOTAL"
cut -f3,4 "$WORK/out" | sort >"$WORK/got.sorted"
sort "$WORK/expected" >"$WORK/exp.sorted"
cmp -s "$WORK/got.sorted" "$WORK/exp.sorted" \
  || { diff "$WORK/exp.sorted" "$WORK/got.sorted" | head -5 >&2; fail "records read differ from records written"; }
# Per partition, offsets 0,1,2,... in the order read (one producer session, no aborts: no gaps).
awk -F'\t' '{ if ($2 != next_off[$1] + 0) { printf "partition %s: offset %s, expected %d\n", $1, $2, next_off[$1]; bad = 1; exit }
              next_off[$1] = $2 + 1 }
            END { exit bad }' "$WORK/out" || fail "offsets are not consecutive from 0"
echo "read $got records: content equal, offsets consecutive, $(cut -f1 "$WORK/out" | sort -u | wc -l) partitions used"

step "stopping the cluster"
"$PEERS/kafka-cluster.sh" stop --name "$NAME"
STARTED=
left=0
for pid in $PIDS; do
  if kill -0 "$pid" 2>/dev/null; then echo "version_smoke: process $pid is still alive" >&2; left=1; fi
done
for p in "$PORT" $((PORT + 1)); do
  if [ -n "$(ss -Hltn "( sport = :$p )")" ]; then echo "version_smoke: port $p still listening" >&2; left=1; fi
done
if "$PEERS/kafka-cluster.sh" status --name "$NAME" >/dev/null; then
  echo "version_smoke: status still reports running processes" >&2; left=1
fi
[ $left = 0 ] || exit 1
step "PASS: Kafka $VERSION started, took $TOTAL records (5 codecs) from kcat, stopped clean"
