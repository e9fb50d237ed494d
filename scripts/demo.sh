#!/usr/bin/env bash
# The demo. The mirror's data path and the kafka-mirrors CLI are the next issues; until they land,
# this installs what it needs, builds, starts the reference broker kbroker with the kmirror plugin
# loaded, produces and consumes with a real client (kcat), and stops it, printing each step.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build

work=$(mktemp -d /tmp/kmirror-demo.XXXXXX)
pid=
cleanup() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/server.properties" <<PROPS
node.id=1
listeners=PLAINTEXT://127.0.0.1:0
log.dirs=$work/data
num.partitions=3
auto.create.topics.enable=true
group.initial.rebalance.delay.ms=0
plugin.paths=$(pwd)/build/lib/kmirror.so
mirror.enable=true
PROPS

echo
echo "== 1. start kbroker with the kmirror plugin"
build/bin/kbroker --config "$work/server.properties" >"$work/kbroker.log" 2>&1 &
pid=$!
bootstrap=
for _ in $(seq 1 100); do   # poll the readiness line (up to 10 s)
    bootstrap=$(sed -n 's/.*kbroker started.*PLAINTEXT:\/\/\([0-9.]*:[0-9]*\).*/\1/p' "$work/kbroker.log" | head -1)
    [ -n "$bootstrap" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/kbroker.log"; echo "kbroker exited" >&2; exit 1; }
    sleep 0.1
done
[ -n "$bootstrap" ] || { cat "$work/kbroker.log"; echo "kbroker did not start" >&2; exit 1; }
echo "kbroker listens on $bootstrap"
grep -i "kmirror" "$work/kbroker.log" | head -3 | sed 's/^/  log: /'

echo
echo "== 2. produce 5 records with kcat (librdkafka), zstd-compressed"
for i in 1 2 3 4 5; do echo "key$i:hello from kmirror $i"; done |
    kcat -b "$bootstrap" -P -t demo -K: -z zstd -p 0
echo "produced"

echo
echo "== 3. consume them back with their offsets"
kcat -b "$bootstrap" -C -t demo -p 0 -o beginning -e -q -f '  offset %o  key %k  value %s\n'

echo
echo "== 4. metadata as a client sees it"
kcat -b "$bootstrap" -L -t demo | sed 's/^/  /'

echo
echo "== 5. stop kbroker (SIGTERM)"
kill -TERM "$pid"
wait "$pid" && echo "kbroker stopped cleanly"
pid=

echo
echo "Next: the mirror data path, failover/failback and the kafka-mirrors CLI (issue 5)."
echo "Every test suite: scripts/test.sh"
