#!/usr/bin/env bash
# The demo: cross-cluster mirroring with kmirror, printing each step.
#
# Installs what it needs (scripts/deps.sh), builds, then on loopback:
#   1. starts two kbroker clusters, dc1 (source) and dc2 (destination), 3 brokers each (node 1
#      also the controller), kmirror.so loaded on every broker;
#   2. produces to topic orders on dc1 with a real client (kcat/librdkafka);
#   3. creates mirror dc1 on dc2 (kafka-mirrors --create) and starts it for orders;
#   4. pauses the mirror, produces more, resumes, and shows kafka-mirrors --describe's lag falling
#      to zero;
#   5. shows that the mirror topic is read-only and holds the same records at the same offsets;
#   6. fails over (kafka-mirrors --stop --wait): orders on dc2 becomes writable;
#   7. produces on dc2;
#   8. fails back: a mirror dc2 on dc1 pointing at dc2 for orders, until dc1 holds dc2's records.
# A step that kmirror cannot do yet is said so plainly (never faked) and the demo goes on with
# what works. KMIRROR_DEMO_KEEP=1 leaves the clusters running at the end (ctrl-C stops them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build

KB=$(pwd)/build/bin/kbroker
KM=$(pwd)/build/bin/kafka-mirrors
SO=$(pwd)/build/lib/kmirror.so
work=$(mktemp -d /tmp/kmirror-demo.XXXXXX)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

say() { echo; echo "== $*"; }
run() { echo "\$ $*" | sed "s#$(pwd)/build/bin/##g"; "$@"; }
not_yet() { echo "NOT THERE YET: $*"; }
die() { echo "demo: $*" >&2; for f in "$work"/*/node*.log; do echo "--- $f"; tail -5 "$f"; done >&2; exit 1; }
port_free() { [ -z "$(ss -Hltn "( sport = :$1 )" 2>/dev/null)" ]; }

# start_cluster NAME BASE_PORT -- 3 kbroker nodes: node 1 broker+controller (controller on
# BASE+1), nodes 2 and 3 brokers on BASE+10, BASE+20; every broker loads kmirror.so.
start_cluster() {
    local name=$1 base=$2 i roles listeners id
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)
    mkdir -p "$work/$name"
    for i in 1 2 3; do
        roles=broker
        listeners="PLAINTEXT://127.0.0.1:$((base + 10 * (i - 1)))"
        if [ "$i" = 1 ]; then
            roles=broker,controller
            listeners+=",CONTROLLER://127.0.0.1:$((base + 1))"
        fi
        cat >"$work/$name/node$i.properties" <<PROPS
process.roles=$roles
node.id=$i
cluster.id=$id
controller.quorum.voters=1@127.0.0.1:$((base + 1))
listeners=$listeners
advertised.listeners=PLAINTEXT://127.0.0.1:$((base + 10 * (i - 1)))
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$work/$name/node$i
num.partitions=3
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
broker.session.timeout.ms=3000
broker.heartbeat.interval.ms=500
plugin.paths=$SO
mirror.enable=true
PROPS
        "$KB" --config "$work/$name/node$i.properties" >"$work/$name/node$i.log" 2>&1 &
        PIDS+=($!)
    done
}
# wait_cluster BOOTSTRAP -- until the cluster's metadata lists its 3 brokers (30 s)
wait_cluster() {
    local end=$((SECONDS + 30))
    until kcat -b "$1" -L -m 2 2>/dev/null | grep -q '^ *3 brokers:'; do
        [ "$SECONDS" -lt "$end" ] || die "the cluster at $1 did not come up with 3 brokers"
        sleep 0.2 # poll interval
    done
}
pick_base() { # a base port whose 4 ports are free
    local b=$1
    while ! { port_free "$b" && port_free $((b + 1)) && port_free $((b + 10)) && port_free $((b + 20)); }; do
        b=$((b + 100))
    done
    echo "$b"
}

# describe BOOTSTRAP MIRROR -- kafka-mirrors --describe (the broker asked gathers every broker's
# partitions)
describe() { "$KM" --bootstrap-server "$1" --describe --mirror "$2"; }
# partitions BOOTSTRAP MIRROR -- the partition table of describe alone (the sync-status table that
# follows it after a blank line is not parsed)
partitions() { describe "$1" "$2" 2>&1 | awk 'NF == 0 { exit } { print }'; }
total_lag_of() { # FILE -- sum of a describe table's LAG, or "-" while a partition has no number
    awk 'NR > 1 { if ($7 == "-") unknown = 1; else s += $7; n++ }
        END { if (unknown || n == 0) print "-"; else print s }' "$1"
}
# same_records A B -- per partition of orders: checksums of (offset, key, value) on clusters A and B
same_records() { # returns 1 when a partition differs
    local p a b rc=0
    for p in 0 1 2; do
        a=$(kcat -b "$1" -C -t orders -p "$p" -o beginning -e -q -f '%o %k %s\n' | sha256sum | cut -c1-16)
        b=$(kcat -b "$2" -C -t orders -p "$p" -o beginning -e -q -f '%o %k %s\n' | sha256sum | cut -c1-16)
        echo "  partition $p: $3 sha256 $a, $4 sha256 $b $([ "$a" = "$b" ] && echo "(same offsets, keys, values)" || echo "(DIFFERENT)")"
        [ "$a" = "$b" ] || rc=1
    done
    return "$rc"
}
# wait_listed BOOTSTRAP MIRROR -- until every broker of the cluster lists the mirror (30 s): the
# definition reaches the other brokers through the metadata log, and a --start that lands on a
# broker that has not applied it yet is answered UNKNOWN_CLUSTER_MIRROR.
wait_listed() {
    local b end=$((SECONDS + 30))
    echo "(waiting until every broker of $1 knows mirror $2)"
    for b in ${1//,/ }; do
        until "$KM" --bootstrap-server "$b" --list 2>/dev/null | grep -q "^$2 "; do
            [ "$SECONDS" -lt "$end" ] || die "broker $b does not list mirror $2 after 30 s"
            sleep 0.2 # poll interval
        done
    done
}
say "1. start two kbroker clusters on loopback, dc1 (source) and dc2 (destination), kmirror.so on every broker"
b1=$(pick_base 29092)
b2=$(pick_base $((b1 + 100)))
DC1="127.0.0.1:$b1,127.0.0.1:$((b1 + 10)),127.0.0.1:$((b1 + 20))"
DC2="127.0.0.1:$b2,127.0.0.1:$((b2 + 10)),127.0.0.1:$((b2 + 20))"
start_cluster dc1 "$b1"
start_cluster dc2 "$b2"
wait_cluster "$DC1"
wait_cluster "$DC2"
echo "dc1: $DC1"
echo "dc2: $DC2"
grep -h "kmirror" "$work/dc2/node1.log" | head -2 | sed 's/^/  log: /'

say "2. create topic orders on dc1 (3 partitions, RF 3; the Java Admin client) and produce 3000 records with kcat (librdkafka, idempotent, zstd)"
run tests/peers/peer-tools.sh admin-create-topic --bootstrap "$DC1" --topic orders --partitions 3 --rf 3 |
    tail -1
produce() { # BOOTSTRAP FIRST LAST -- keyed records "order-i"
    seq "$2" "$3" | sed 's/.*/order-&:{"order":&,"amount":&0}/' |
        kcat -b "$1" -P -t orders -K: -z zstd -X enable.idempotence=true -X linger.ms=20
}
run produce "$DC1" 1 3000
echo "dc1 orders end offsets: $(kcat -b "$DC1" -Q -t orders:0:-1 -t orders:1:-1 -t orders:2:-1 2>/dev/null | tr '\n' ' ')"

say "3. create mirror dc1 on dc2 and start it for orders"
printf 'bootstrap.servers=%s\nfetch.max.bytes=1024\n' "$DC1" >"$work/dc1.properties"
run cat "$work/dc1.properties"
run "$KM" --bootstrap-server "$DC2" --create --mirror dc1 --mirror-config "$work/dc1.properties"
wait_listed "$DC2" dc1
run "$KM" --bootstrap-server "$DC2" --start --mirror dc1 --topic orders --wait --timeout-ms 60000

say "4. pause the mirror, produce 60000 records on dc1, resume, and watch the lag on dc2 fall to zero"
echo "(mirror dc1 fetches at most 1 KiB per partition per request, fetch.max.bytes=1024 in its"
echo " config, so that the catch-up is slow enough to watch)"
run "$KM" --bootstrap-server "$DC2" --pause --mirror dc1 --topic orders --wait --timeout-ms 60000
seq 3001 63000 | sed 's/.*/order-&:{"order":&,"amount":&0}/' |
    kcat -b "$DC1" -P -t orders -K: -z zstd -X enable.idempotence=true -X batch.num.messages=20
echo "produced 60000 records in batches of up to 20 while paused"
run "$KM" --bootstrap-server "$DC2" --resume --mirror dc1 --topic orders
end=$((SECONDS + 120))
t0=$(date +%s%N)
while :; do
    partitions "$DC2" dc1 >"$work/describe.txt" || true
    lag=$(total_lag_of "$work/describe.txt")
    printf -- '-- %5.1f s  total lag %-6s %s\n' "$(( ($(date +%s%N) - t0) / 100000000 ))e-1" "$lag" \
        "$(awk 'NR > 1 { printf "  p%s %s %s/%s", $3, $4, $6, $5 }' "$work/describe.txt")"
    [ "$lag" = 0 ] && ! grep -qv -e MIRRORING -e '^MIRROR ' "$work/describe.txt" && break
    [ "$SECONDS" -lt "$end" ] || die "the lag did not reach zero within 120 s"
    sleep 0.1 # sample interval
done
echo "(p<partition> <state> <dest log end>/<source high watermark>)"
describe "$DC2" dc1
echo "caught up: every partition MIRRORING with lag 0"

say "5. the mirror topic on dc2 is read-only and holds the same records at the same offsets"
set +e
echo "order-x:should not be accepted" | kcat -b "$DC2" -P -t orders -K: -p 0 -X message.send.max.retries=0 2>&1 |
    head -2 | sed 's/^/  kcat: /'
set -e
echo "  (kcat does not know the provisional READ_ONLY_TOPIC code 147 and calls it an unknown error)"
same_records "$DC1" "$DC2" dc1 dc2 || die "dc2's mirror topic differs from dc1's"

say "6. fail over: stop mirroring orders on dc2 (it becomes writable)"
run "$KM" --bootstrap-server "$DC2" --stop --mirror dc1 --topic orders --wait --timeout-ms 60000
echo "(LAST-EPOCH/LAST-OFFSET: the last mirrored epoch and log end recorded at the failover; the"
echo " offset above it holds the one MIRROR_PID_RESET batch that separates mirrored producers from"
echo " new ones)"

say "7. produce 1000 records on dc2 (the new primary)"
run produce "$DC2" 63001 64000
echo "last records on dc2:"
kcat -b "$DC2" -C -t orders -p 0 -o -3 -e -q -f '  partition %p offset %o  %k %s\n'

say "8. fail back: on dc1, a mirror dc2 pointing at dc2, started for orders"
printf 'bootstrap.servers=%s\n' "$DC2" >"$work/dc2.properties"
run "$KM" --bootstrap-server "$DC1" --create --mirror dc2 --mirror-config "$work/dc2.properties"
wait_listed "$DC1" dc2
set +e
run "$KM" --bootstrap-server "$DC1" --start --mirror dc2 --topic orders --wait --timeout-ms 15000
rc=$?
set -e
describe "$DC1" dc2
partitions "$DC1" dc2 >"$work/describe.txt" || true
if [ "$rc" = 0 ] && [ "$(total_lag_of "$work/describe.txt")" = 0 ]; then
    echo "failback: dc1 mirrors orders from dc2 again; dc1 now holds what was written on dc2:"
    if same_records "$DC1" "$DC2" dc1 dc2; then
        echo "last records on dc1:"
        kcat -b "$DC1" -C -t orders -p 0 -o -3 -e -q -f '  partition %p offset %o  %k %s\n'
    else
        not_yet "failback: dc1 mirrors from dc2 but its log differs from dc2's (above)"
    fi
else
    not_yet "failback: dc1's partitions did not reach MIRRORING with lag 0 within 15 s (states"
    echo "  above). Before mirroring, dc1's orders, which already holds data, is cut back to the"
    echo "  last epoch dc2 mirrored from it (asked of dc2 with DescribeMirrors); the partitions wait"
    echo "  in PREPARING until that answer comes. dc1's orders is now a read-only mirror topic."
fi

say "done"
echo "Every test suite: scripts/test.sh; the mirror's end-to-end suite: ctest --test-dir build -R mirror_e2e"
if [ "${KMIRROR_DEMO_KEEP:-0}" = 1 ]; then
    echo "clusters left running (dc1 $DC1, dc2 $DC2); ctrl-C stops them"
    wait
fi
