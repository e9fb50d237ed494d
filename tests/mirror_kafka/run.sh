#!/usr/bin/env bash
# run.sh -- real Apache Kafka as the mirror's SOURCE (issue 7; docs/testing-kafka-source.md).
#
#   run.sh --version V [--nodes 1|3] [--cases a,b,...] [--build DIR] [--python PY]
#          [--base-port P] [--prefix NAME] [--keep] [--inject NAME,...]
#
# --inject shows that the checks can fail (the run must FAIL):
#   flip        identity: one byte of a destination replica of ki-zstd partition 1 is flipped
#               after the catch-up (kc_replicacmp and the read-back must fail)
#   group-skip  group: before the destination consumer starts, kg-java's destination commit on
#               partition 0 is moved one record ahead (the resume check must fail)
#   tomb-empty  compacted: the tombstones kept by the cleaner are written with empty values, not
#               null (the wait for the cleaned state and the null-value checks must fail)
#   stop-skip   failover-txn: no --stop (the transaction stays open on the destination: the
#               LSO check must fail)
#   txn-open    leader-kill: kl-tx's transactional producer leaves a transaction open until the
#               destination was checked (the no-open-transaction check must fail)
#   txn-uncommitted  leader-kill: kl-tx is read read_uncommitted on the destination (the
#               committed-records check must fail: the aborted records are seen)
#
# Starts an Apache Kafka V source (tests/peers/kafka-cluster.sh: KRaft, StandardAuthorizer with
# the broker principal User:ANONYMOUS as super user, so ACLs can be created and described while
# every PLAINTEXT client may do everything) and a destination of 3 kbroker brokers with
# kmirror.so plus a controller-only node (tests/cluster/cluster.sh, the same settings as
# tests/mirror_e2e), once, then runs the cases on them in order, each with its own topics and
# its own mirror:
#   identity     topics written by the Java producer (idempotent, every codec; transactional
#                with aborted transactions) before and while mirroring; caught up; every
#                partition byte-identical (kc_replicacmp over every source replica and the 3
#                destination replicas); kafka-python reads both sides (read_uncommitted and
#                read_committed): the same records at the same offsets
#   compacted    a compacted topic (many updates of few keys, tombstones) cleaned by Kafka's
#                log cleaner BEFORE the mirror starts (the source shows offset gaps; one
#                generation of tombstones removed, delete.retention.ms=0, one kept, 1 day), then
#                mirrored: the same batches at the same offsets (gaps preserved), read back
#                equal, the kept tombstones with null values on both sides
#   group        a Java consumer group reads part of a topic on the source and commits; the
#                group offset sync (1 s) copies the commit; --stop; the same group on the
#                destination resumes exactly at the commit (every record once)
#   sync         retention.ms / cleanup.policy / max.message.bytes set on a Kafka topic appear
#                on the destination; ACLs created on Kafka (CreateAcls) appear on every
#                destination broker, those outside acls.include never
#   failover-txn a transactional Java producer leaves a transaction open on Kafka; once it is
#                mirrored, --stop --wait while Kafka still holds it open: the destination ends
#                it (LSO = log end), read_committed sees exactly the committed records
#   leader-kill  (3 nodes only) the leader of a source partition is killed -9 while two Java
#                producers (acks=all: idempotent; transactional with aborts) write and the
#                mirror copies: the mirror follows the new leader; every acknowledged record
#                mirrored, byte-identical; on the destination no transaction left open and
#                read_committed sees exactly the committed records
# The version-specific choices (default nodes, case list, authorizer) are in version_defaults
# below and nowhere else.
# Cluster names: <prefix>-src / <prefix>-dst (default prefix mirror-kafka-<V without dots>).
# Ports: the source on P, P+10, P+20 (+1: controller), the destination on P+100.. (default
# P 20292: no other ctest uses 20xxx, and it lies below the kernel's ephemeral range).
# Exit 0 pass, 1 fail (each failure printed as FAIL: ...), 2 setup error.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
export KPEER_HOME=${KPEER_HOME:-$REPO/.kpeer}
# shellcheck disable=SC1091
. "$REPO/tests/peers/versions.env"
VERSION= NODES= CASES= BUILD=$REPO/build PY= BASE=20292 PREFIX= KEEP=0 INJECT=
while [ $# -gt 0 ]; do
  case "$1" in
    --version) VERSION=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --base-port) BASE=$2; shift 2 ;;
    --prefix) PREFIX=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --inject) INJECT=$2; shift 2 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
setup_error() { echo "SETUP ERROR: $*"; exit 2; }
# injected NAME -- --inject lists NAME
injected() { [[ ",$INJECT," == *",$1,"* ]]; }
[ -n "$VERSION" ] || VERSION=$KAFKA_4_VERSION

# ------------------------------------------------------------------------ per Kafka version
# version_defaults -- the one place for what differs between Kafka versions: nodes of the
# source, the cases, and the source's authorizer settings (SRC_AUTH, --override k=v each).
version_defaults() {
  case "$VERSION" in
    4.*)
      DEF_NODES=3
      DEF_CASES=identity,compacted,group,sync,failover-txn,leader-kill
      SRC_AUTH=(authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer) ;;
    3.9.*)
      DEF_NODES=1
      DEF_CASES=identity,compacted,group,sync,failover-txn
      SRC_AUTH=(authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer) ;;
    2.8.*)
      # ZooKeeper mode: the ZooKeeper-era authorizer
      DEF_NODES=1
      DEF_CASES=identity,compacted,group,sync,failover-txn
      SRC_AUTH=(authorizer.class.name=kafka.security.authorizer.AclAuthorizer) ;;
    *) setup_error "no case list for Kafka $VERSION (version_defaults in $0)" ;;
  esac
  # every PLAINTEXT client and the brokers themselves are User:ANONYMOUS
  SRC_AUTH+=(super.users=User:ANONYMOUS allow.everyone.if.no.acl.found=true)
}
version_defaults
NODES=${NODES:-$DEF_NODES}
CASES=${CASES:-$DEF_CASES}
case "$NODES" in 1 | 3) ;; *) setup_error "--nodes must be 1 or 3" ;; esac
PREFIX=${PREFIX:-mirror-kafka-${VERSION//./}}
SRC=$PREFIX-src DST=$PREFIX-dst
SRC_PORT=$BASE DST_PORT=$((BASE + 100))
RF=$NODES

BUILD=$(cd "$BUILD" && pwd -P) || exit 2
KC=$REPO/tests/peers/kafka-cluster.sh
CL=$REPO/tests/cluster/cluster.sh
PEER=$REPO/tests/peers/peer-tools.sh
KM=$BUILD/bin/kafka-mirrors
CMP=$BUILD/bin/kc_replicacmp
SO=$BUILD/lib/kmirror.so
E2E=$REPO/tests/mirror_e2e
T0=$SECONDS
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
step() { echo; echo "== [$((SECONDS - T0))s] $*"; }
for f in "$KM" "$CMP" "$SO" "$BUILD/bin/kbroker"; do [ -e "$f" ] || setup_error "$f not built"; done
command -v kcat >/dev/null || setup_error "kcat not installed (scripts/deps.sh)"
[ -n "$PY" ] || PY=$("$REPO/tests/clients/setup-venv.sh") || setup_error "no clients venv"
ME2E=("$PY" "$E2E/me2e.py")
MK=("$PY" "$HERE/mk.py")
WORK=$KPEER_HOME/$PREFIX-work
rm -rf "$WORK" && mkdir -p "$WORK"
# The cases: each is a function case_<name> (dashes become underscores) in its own file
# case_<name>.sh next to this one; it uses the helpers below and reports with fail().
for f in "$HERE"/case_*.sh; do
  # shellcheck source=/dev/null
  . "$f"
done
IFS=, read -r -a CS <<<"$CASES"
for c in "${CS[@]}"; do
  declare -F "case_${c//-/_}" >/dev/null || setup_error "unknown case $c (no case_${c//-/_} in $HERE/case_*.sh)"
done
[ "$NODES" = 3 ] || [[ ",$CASES," != *,leader-kill,* ]] || setup_error "case leader-kill needs --nodes 3"

stop_all() {
  "$KC" stop --name "$SRC" >/dev/null 2>&1
  "$CL" stop --name "$DST" >/dev/null 2>&1
}
cleanup() {
  local rc=$?
  if [ "$KEEP" = 1 ]; then
    echo "clusters kept running: $SRC ($KC), $DST ($CL); work files $WORK"
    return
  fi
  stop_all
  if [ "$FAILS" -ne 0 ] || [ "$rc" -ne 0 ]; then
    echo "logs kept: $KPEER_HOME/$SRC, $KPEER_HOME/$DST, $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

# until_ok, mirror_listed, me2e_dst_start (shared with tests/mirror_e2e)
# shellcheck source=../mirror_e2e/lib.sh
. "$E2E/lib.sh"

# ------------------------------------------------------------------------ the two clusters
step "start the source ($SRC: Apache Kafka $VERSION, $NODES node(s), port $SRC_PORT) and the destination ($DST: 3 kbroker brokers with kmirror.so + controller node, port $DST_PORT)"
stop_all
"$REPO/tests/peers/kafka-libs.sh" --no-mm2 "$VERSION" >"$WORK/libs.log" 2>&1 ||
  { cat "$WORK/libs.log"; setup_error "the Kafka $VERSION jars (tests/peers/kafka-libs.sh)"; }
# both starts run the Java readiness probe: build its jar once first (a parallel rebuild corrupts it)
"$REPO/tests/peers/mvn-build.sh" "$REPO/tests/java/peer-tools" peer-tools.jar >/dev/null ||
  setup_error "the peer-tools jar does not build (tests/peers/mvn-build.sh)"
ov=()
for kv in "${SRC_AUTH[@]}" log.cleaner.backoff.ms=500 min.insync.replicas=$((NODES > 1 ? 2 : 1)); do
  ov+=(--override "$kv")
done
# ports_free P -- none of the ports of both clusters on base P is listened on
ports_free() {
  local o
  for o in 0 1 10 11 20 21 100 101 110 111 120 121 131; do
    [ -z "$(ss -Hltn "( sport = :$(($1 + o)) )" 2>/dev/null)" ] || return 1
  done
}
# start_both -- the source in the background, the destination (as tests/mirror_e2e/run.sh
# starts it: authorizer for the ACL sync, topic discovery every second), then wait for both;
# 1 if either failed (both stopped again)
start_both() {
  local spid rc=0
  "$KC" start --name "$SRC" --version "$VERSION" --nodes "$NODES" --base-port "$SRC_PORT" \
    --heap 512m --timeout 180 "${ov[@]}" >"$WORK/src-start.log" 2>&1 &
  spid=$!
  me2e_dst_start "$DST" "$BUILD" "$DST_PORT" --timeout 180 >"$WORK/dst-start.log" 2>&1 ||
    { tail -n 30 "$WORK/dst-start.log"; rc=1; }
  wait "$spid" || { tail -n 30 "$WORK/src-start.log"; rc=1; }
  [ "$rc" = 0 ] || stop_all
  return "$rc"
}
# The ports lie in the kernel's ephemeral range (32768-60999) on this machine: a client
# connection elsewhere may take one between the check and the bind. A failed start is therefore
# tried once more, 200 ports higher.
for attempt in 1 2; do
  ports_free "$SRC_PORT" || { SRC_PORT=$((SRC_PORT + 200)); DST_PORT=$((SRC_PORT + 100)); }
  start_both && break
  [ "$attempt" = 1 ] || setup_error "the clusters did not start twice (logs above)"
  echo "the clusters did not start (above); once more on base port $((SRC_PORT + 200))"
  SRC_PORT=$((SRC_PORT + 200))
  DST_PORT=$((SRC_PORT + 100))
done
S=$("$KC" bootstrap --name "$SRC")
D=$("$CL" bootstrap --name "$DST")
echo "source $S (Kafka $VERSION), destination $D"

# src_partdir NODE TOPIC PART -- the Kafka node's directory of that partition
src_partdir() { echo "$KPEER_HOME/$SRC/node$1/data/$2-$3"; }

# src_create_topic TOPIC PARTITIONS RF [k=v]... -- create TOPIC on Kafka with the Java Admin
# (peer-tools admin-create-topic: topic configs, then every partition led with a full ISR).
# Up to 3 attempts: on the loaded machine the Admin's first call in a cold JVM timed out
# ("Timed out waiting for a node assignment", 5 s API timeout); "already exists" after a
# failed attempt is that attempt's topic (the request reached the controller) and counts.
src_create_topic() {
  local t=$1 parts=$2 rf=$3 kv cfg=() a
  shift 3
  for kv in "$@"; do cfg+=(--config "$kv"); done
  for a in 1 2 3; do
    "$PEER" admin-create-topic --bootstrap "$S" --topic "$t" --partitions "$parts" --rf "$rf" \
      "${cfg[@]}" >"$WORK/create-$t.log" 2>&1 && return 0
    [ "$a" -gt 1 ] && grep -q 'already exists' "$WORK/create-$t.log" &&
      { echo "$t: created by the previous attempt"; return 0; }
    echo "create $t on Kafka, attempt $a failed: $(grep -m1 -o '[A-Za-z]*Exception.*' "$WORK/create-$t.log")"
  done
  fail "create $t on Kafka:"
  tail -3 "$WORK/create-$t.log"
  return 1
}

# mirror_start MIRROR TOPIC_REGEX [k=v]... -- create MIRROR (source S, extra configs), wait
# until every destination broker lists it, --start --wait the topics
mirror_start() {
  local m=$1 re=$2
  shift 2
  printf '%s\n' "bootstrap.servers=$S" "$@" >"$WORK/$m.properties"
  "$KM" --bootstrap-server "$D" --create --mirror "$m" --mirror-config "$WORK/$m.properties" ||
    { fail "kafka-mirrors --create --mirror $m"; return 1; }
  until_ok 30 "every destination broker lists mirror $m" mirror_listed "$m" || return 1
  "$KM" --bootstrap-server "$D" --start --mirror "$m" --topic "$re" --wait --timeout-ms 90000 \
    >"$WORK/$m-start.out" 2>&1 || { tail -12 "$WORK/$m-start.out"; fail "kafka-mirrors --start --mirror $m --topic '$re'"; return 1; }
}

# cmp_partition TOPIC PART [--live N...] -- kc_replicacmp --same-end over the source replicas
# (every node, or the listed live ones) and the 3 destination replicas; every replica starts at
# the same offset (the whole log of the source is compared)
cmp_partition() {
  local t=$1 p=$2 dirs=() i nodes n
  nodes=${CMP_NODES:-$(seq 1 "$NODES")}
  for i in $nodes; do dirs+=("$(src_partdir "$i" "$t" "$p")"); done
  for i in 1 2 3; do dirs+=("$("$CL" partdir "$i" "$t" "$p" --name "$DST")"); done
  "$CMP" --same-end "${dirs[@]}" >"$WORK/cmp-$t-$p.txt" 2>&1 || return 1
  n=$(sed -n 's/^replica [0-9]* .*, offsets \([0-9]*\)\.\..*/\1/p' "$WORK/cmp-$t-$p.txt" | sort -u | wc -l)
  [ "$n" = 1 ] || { echo "the replicas start at different offsets"; return 1; }
  cat "$WORK/cmp-$t-$p.txt"
}
# cmp_topic TOPIC PARTS -- every partition 0..PARTS-1; polled, 60 s for them all
cmp_topic() {
  local t=$1 p ok b=0 bad=0 end=$((SECONDS + 60))
  for ((p = 0; p < $2; p++)); do
    ok=0
    while :; do
      if cmp_partition "$t" "$p" >"$WORK/cmp.out" 2>&1; then ok=1; break; fi
      [ "$SECONDS" -lt "$end" ] || break
      sleep 1 # poll interval (followers may still fetch the last batches)
    done
    if [ "$ok" = 0 ]; then
      fail "$t-$p: the source and destination replicas differ (kc_replicacmp --same-end):"
      sed 's/^/  /' "$WORK/cmp.out" | head -20
      bad=$((bad + 1))
      continue
    fi
    b=$((b + $(sed -n 's/^replicacmp: OK: [0-9]* replicas hold the same \([0-9]*\) batches.*/\1/p' "$WORK/cmp-$t-$p.txt")))
  done
  [ "$bad" = 0 ] || return 1
  echo "ok: $t: $2 partition(s) identical on every source replica and the 3 destination replicas ($b batches)"
}

# ------------------------------------------------------------------------ the cases
for c in "${CS[@]}"; do
  "case_${c//-/_}"
done
echo
if [ "$FAILS" -ne 0 ]; then
  echo "mirror_kafka $VERSION: FAILED ($FAILS failure(s)) in $((SECONDS - T0))s"
  exit 1
fi
echo "mirror_kafka $VERSION ($NODES node(s)): OK ($CASES) in $((SECONDS - T0))s"
