#!/usr/bin/env bash
# run.sh -- the mirror's end-to-end scenarios (issue 5 "Done when"; docs/testing-mirror.md).
#
#   run.sh [--scenario NAME,...]   (default: the file `scenarios`, in order) [--build DIR] [--python PY] [--keep]
#          [--src-port P] [--dst-port P]     (first base ports tried; busy ones are skipped)
#          [--inject flip]   (shows the verifier can fail: one byte of a destination replica of
#                             id-03 partition 1 is flipped after the catch-up; the run must FAIL)
#          [--inject fo-lme] (failover-load's checks take every LME one offset lower; must FAIL)
#          [--inject sf-same-cluster]  (source-faults: the replacing cluster gets the original's
#                             cluster.id, so the cluster check cannot fire; the run must FAIL)
#          [--inject fb-full] (scenario failback: the destination's mirror is deleted before the
#                             failback, so the whole log is copied back; the byte checks must FAIL)
#          [--inject ls-start] (scenario source-log-start: the source's log start moves after the
#                             first catch-up; the earliest and read-back checks must FAIL)
#          [--inject no-session]  (scenario scale: the destination's fetchers send every 10th
#                             Fetch without a session, KMIRROR_TEST_FETCH_NO_SESSION; must FAIL)
#          [--inject sc-wrong-kill] (sync-coordinator: a broker that is not msc's coordinator is
#                             killed instead; the takeover check must FAIL)
#          [--inject sc-no-final] (sync-coordinator: mirror mscf gets stop.sync.timeout.ms=0; the
#                             final-sync check must FAIL)
#          [--inject pid-state] (producer-ids: a mirrored producer id gets sequences 0-5 on the
#                             destination first, so its writes are duplicates; must FAIL)
#          [--inject sg-bad-commit] (sync-groups: after the failover sg-java's commits get an
#                             epoch above the destination's, sg-rdk's one offset more; must FAIL)
#          [--inject sa-own] (sync-acls: a binding is not on the destination before the sync, so
#                             the sync owns it and deletes it with the source; must FAIL)
#          [--inject sa-all] (sync-acls: acls.include=*, bindings outside the rules are synced;
#                             must FAIL)
#          [--inject cfg-forget|cfg-forget-restart|cfg-own-all|cfg-exclude|cfg-nopause]
#                             (scenario sync-configs: the config sync ignores its remembered keys
#                             from the start / after the destination restart, takes every
#                             destination override as its own (KMIRROR_TEST_CFGSYNC); the mirror
#                             has no operator exclusion; the paused topic is resumed at once;
#                             each must FAIL)
#          [--inject sd-noexclude] (sync-topics: mirror msd without topics.exclude, so the
#                             excluded sd-skip1 is mirrored; must FAIL)
#          [--inject fv-no-cap] (fetch-v11: its destination runs without the Fetch v11 cap, so the
#                             divergence is not found by OffsetsForLeaderEpoch; must FAIL)
#
# One source cluster (3 kbroker brokers with kmirror.so, for the failback, node 1 also the
# controller) and one destination cluster (3 kbroker brokers with kmirror.so + a controller-only
# node, RF 3, min.insync.replicas=2, an ACL authorizer allowing what no ACL covers, for scenario
# sync-acls, mirror.metadata.refresh.interval.ms=1000 for topic discovery), every node with a
# metrics listener, are started once and reused by every scenario, in order:
#   identity   10 topics x 4 partitions written by kcat (every codec), idempotent and transactional
#              Java producers (some transactions aborted); mirror m1 created and started with
#              kafka-mirrors; caught up (DescribeMirrors: MIRRORING, lag 0, log ends equal); then
#              kc_replicacmp over the 3 source and the 3 destination replicas of every partition
#              (batches, CRCs, epochs, producer ids, every byte; same log start and end) and
#              kafka-python reads both sides, read_uncommitted and read_committed.
#   read-only  (needs identity's mirror) raw Produce to a mirror topic: READ_ONLY_TOPIC (147) on
#              the leader, refused on the other brokers, nothing appended (replicas still equal
#              the source); config requests setting/removing mirror.name refused;
#              kafka-python's create_partitions refused (147 naming m1 and --stop), count unchanged.
#   pause-resume (needs identity's mirror) a paused topic stays read-only and does not move while
#              a running one catches up; --delete refused while running; --list shows the
#              source's cluster id; resume catches up, replicas byte-identical to the source.
#   source-log-start (own topic ls-00, mirror mls) DeleteRecords to mid-batch offsets on the
#              source before the start and on a paused topic beyond the destination's end:
#              MIRRORING, replicas identical from the batch holding the log start, ListOffsets
#              earliest equal on both sides, kafka-python read-back equal.
#   sync-topics (own topics sd-*, mirror msd, nothing started by hand) topic discovery: a new
#              source topic created with the source's id and mirrored byte-identically, an
#              excluded one never; a partition increase followed; a source topic deleted and
#              re-created never mixed into the old mirror topic (FAILED, reported), re-created
#              with the new id once the operator deleted the destination topic.
#   sync-coordinator (own topic sc-00, mirror msc, 1 s sync intervals) the broker coordinating
#              msc (leader of its __mirror_state partition) syncs topic configs and is killed -9:
#              another broker takes the sync over with the persisted memory (a key the old one
#              synced and the source deletes is reset); --describe shows the sync status; a
#              config changed just before --stop arrives (the final sync; mirror mscf, sc-01).
#   read-only-noplugin (own topic ho-ro, mirror mho) a destination broker restarted without the
#              plugin leads a mirror partition: Produce and DeleteRecords answer 147, nothing
#              appended; restored with the plugin, it mirrors again.
#   producer-ids (own topic ho-pid, mirror mho) after failover and a leader move (kill -9, then
#              ElectLeaders), producers with mirrored ids write from sequence 0: every acknowledged
#              record stored (--inject pid-state: must fail).
#   failover-load  failover under load (its own topic fo-load, mirror mfo): no destination write
#              accepted before STOPPED, read_committed = the mirrored prefix once + the new writes,
#              LSO = HW, one MIRROR_PID_RESET after the LME (--inject fo-lme: must fail).
#   sync-groups (own topics sg-t, sg-u, mirror msg, groups sg-java, sg-rdk) a Java and a
#              librdkafka group read part of sg-t on the source and commit; the group offset sync
#              copies the commits (epochs included); after failover both resume on the destination
#              at exactly their commits (every record once, payloads checked, Metadata bounded);
#              later source commits on the failed-over topic never reach the destination.
#   epochs     (independent: topic ep-00, mirror mep) a source partition with >= 5 leader
#              elections mirrored; destination leader epoch >= every mirrored batch epoch; Java
#              and librdkafka consumer groups read and commit for a fixed window with a bounded
#              number of Metadata / OffsetForLeaderEpoch requests (destination brokers' /metrics,
#              metrics.listener on an ephemeral port); after failover new batches carry a higher epoch.
#   fetch-v11  (not in the default list yet; --scenario fetch-v11)
#              (own topic fv-0, mirror mfv, a 1-broker destination of its own running with
#              KMIRROR_TEST_FETCH_MAX_VERSION=11) the source's follower killed, records on the
#              leader alone mirrored, the leader killed and the follower elected unclean: the
#              divergence found through OffsetsForLeaderEpoch (Fetch below v12), truncated,
#              source replicas and mirror byte-identical.
#   crash-stopping  its own topics cs-0..cs-6 and mirror mcs: for each STOPPING crash point in turn
#              the partition's leader restarts armed (KMIRROR_TEST_CRASH_POINT), dies in --stop,
#              restarts; STOPPED with the LME from before, one ABORT + one MIRROR_PID_RESET after
#              it, nothing open, LSO = HW, writable, replicas byte-identical.
#   source-faults (own topics sf-*, mirrors msf/msf2, a 1-broker source of its own) source
#              brokers stopped/killed: MIRRORING with the error shown, recovered by themselves;
#              source topic deleted / re-created, source cluster replaced: FAILED with a
#              message while the others mirror on; --recover once the cause is fixed.
#   source-dead  --stop --wait with every source node frozen, then killed; STOPPED with the LME,
#              writable (topics fo-hung, fo-dead, mirror mfo2); the source is restarted after.
#   sync-acls  (its own 1-broker source with an authorizer, mirror msa, ACLs every 1 s) bindings
#              created on the source appear on every destination broker, those outside acls.include
#              never; deleted ones disappear; destination-only ones (also one identical to a source
#              binding, present before the sync) survive; cleans up after itself.
#   sync-configs (own topics sk-a, sk-b, mirror msk, configs every 1 s) source topic configs
#              appear on the destination, excluded keys do not, a destination-only key survives,
#              keys deleted on the source are reset (also after all destination brokers were
#              killed and restarted), a paused topic's config waits for its resume.
#   mirror-config (own topics mc-*, mirror mmc) DescribeConfigs / IncrementalAlterConfigs of the
#              MIRROR config resource (type 64, raw wire): keys shown through every broker, the
#              secret never; unknown key / bad value / no bootstrap.servers / unknown mirror
#              refused; DELETE topics.exclude -> discovery mirrors mc-skip1 (no reconnect); SET
#              bootstrap.servers to another source broker -> reconnect logged, mirroring goes on.
#   failback   (its own topic and mirrors) history mirrored, a tail on the source never mirrored,
#              failover, new writes on the destination, a mirror on the source cluster pointing
#              back: the tail truncated, 6 replicas identical, only the delta's bytes fetched.
#   leader-moves (own topics lm-*, mirror mlm) kill -9 of a mirror partition's destination leader
#              and of its __mirror_state shard's leader (together, one broker leading both, each
#              alone) while kcat and a transactional Java producer write: mirroring resumes on
#              the new leaders, no plugin truncation, no state transition, identity checks.
# Exit 0 pass, 1 fail (each failure printed as FAIL: ...), 2 setup error. Logs and cluster data:
# $KPEER_HOME/mirror-e2e-{src,dst}/ (kept with --keep or after a failure, else removed).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
export KPEER_HOME=${KPEER_HOME:-$REPO/.kpeer}
BUILD=$REPO/build PY= KEEP=0 INJECT= SCENARIOS= SRC_PORT=19792 DST_PORT=19892
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
# inherited by the nodes cluster.sh starts (only the destination loads the plugin)
[ "$INJECT" = no-session ] && export KMIRROR_TEST_FETCH_NO_SESSION=10
# scenario sync-groups: the group offset sync fails group sg-fail (only that scenario uses it) in
# every run, to show that one failing group does not stop the others
export KMIRROR_TEST_SYNC_GROUPS_FAIL=sg-fail
[ "$INJECT" = cfg-forget ] && export KMIRROR_TEST_CFGSYNC=forget
[ "$INJECT" = cfg-own-all ] && export KMIRROR_TEST_CFGSYNC=own-all
CL=$REPO/tests/cluster/cluster.sh
KM=$BUILD/bin/kafka-mirrors
CMP=$BUILD/bin/kc_replicacmp
SO=$BUILD/lib/kmirror.so
PEER=$REPO/tests/peers/peer-tools.sh
SRC=mirror-e2e-src DST=mirror-e2e-dst
T0=$SECONDS
# Every node keeps a descriptor per open segment file and connection: raise the soft limit to
# the hard one (scenario scale needs thousands; it checks the result).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
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

# The scenarios: each is a function scenario_<name> (dashes become underscores) in its own file
# scn_<name>.sh next to this one; it uses the helpers below, reports with fail(), and leaves the
# clusters running for the next one (a scenario that needs another's state says so at the top of
# its file). The default order is the file `scenarios` (one name a line; destructive ones last).
for f in "$HERE"/scn_*.sh; do
  # shellcheck source=/dev/null
  . "$f"
done
[ -n "$SCENARIOS" ] || SCENARIOS=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$HERE/scenarios" | paste -sd,)
IFS=, read -r -a SC <<<"$SCENARIOS"
for s in "${SC[@]}"; do
  declare -F "scenario_${s//-/_}" >/dev/null || setup_error "unknown scenario $s (no scenario_${s//-/_} in $HERE/scn_*.sh)"
done

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

# until_ok, mirror_listed, me2e_dst_start (shared with tests/mirror_kafka)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

# ------------------------------------------------------------------------ the two clusters
step "start the source cluster ($SRC: 3 kbroker brokers) and the destination ($DST: 3 brokers with kmirror.so + controller node)"
"$CL" stop --name "$SRC" >/dev/null 2>&1
"$CL" stop --name "$DST" >/dev/null 2>&1
# Both cluster starts run the Java readiness probe; a stale peer-tools jar would be rebuilt by
# both at once and end corrupt ("Invalid or corrupt jarfile", seen after a rebase touched its
# sources): build it once first.
"$REPO/tests/peers/mvn-build.sh" "$REPO/tests/java/peer-tools" peer-tools.jar >/dev/null ||
  setup_error "the peer-tools jar does not build (tests/peers/mvn-build.sh)"
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
# Every node serves /metrics on an ephemeral port, logged at start ("metrics on http://...") in
# its node log; scenario failback reads the byte counters there.
METRICS=http://127.0.0.1:0
"$CL" start --name "$SRC" --backend kbroker --build "$BUILD" --base-port "$SRC_PORT" \
  --controllers node1 --override min.insync.replicas=2 \
  --override "plugin.paths=$SO" --override mirror.enable=true --override "metrics.listener=$METRICS" \
  >"$WORK/src-start.log" 2>&1 &
spid=$!
me2e_dst_start "$DST" "$BUILD" "$DST_PORT" --override "metrics.listener=$METRICS" \
  >"$WORK/dst-start.log" 2>&1 || { cat "$WORK/dst-start.log"; setup_error "destination cluster did not start"; }
wait "$spid" || { cat "$WORK/src-start.log"; setup_error "source cluster did not start"; }
S=$("$CL" bootstrap --name "$SRC")
D=$("$CL" bootstrap --name "$DST")
echo "source $S, destination $D"

# mirror_unlisted MIRROR [CLUSTER] -- no broker of CLUSTER (default the destination) lists MIRROR
mirror_unlisted() {
  local b
  for b in $(tr , ' ' <<<"${2:-$D}"); do
    ! "$KM" --bootstrap-server "$b" --list | grep -q "^$1 " || { echo "$b still lists $1"; return 1; }
  done
}
# mirror_create MIRROR CONFIG_FILE [CLUSTER] -- kafka-mirrors --create through CLUSTER (default
# the destination), then wait (30 s) until every broker of it lists the mirror; 1 after fail()
mirror_create() {
  local c=${3:-$D}
  "$KM" --bootstrap-server "$c" --create --mirror "$1" --mirror-config "$2" ||
    { fail "kafka-mirrors --create --mirror $1 (through $c)"; return 1; }
  until_ok 30 "every broker of $c lists mirror $1" mirror_listed "$1" "$c"
}

# A 1-broker source of a scenario's own beside the shared clusters: one kbroker that is broker and
# controller (client listener PORT, controller PORT+1, no kmirror.so).
# solo_port BASE -- the first PORT from BASE on (in steps of 2) where PORT and PORT+1 are free
solo_port() {
  local q=$1
  while [ -n "$(ss -Hltn "( sport = :$q or sport = :$((q + 1)) )" 2>/dev/null)" ]; do q=$((q + 2)); done
  echo "$q"
}
# solo_cluster_id C -- a fresh cluster id in Kafka's form (22 characters of base64url), first C
solo_cluster_id() { echo "$1$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c2-22)"; }
# solo_start DIR CLUSTER_ID PORT PIDFILE [KEY=VALUE...] -- start it with its data and node1.log in
# DIR, its pid in PIDFILE, the KEY=VALUE lines added to its properties; does not wait for it
solo_start() {
  local dir=$1 cid=$2 q=$3 pidfile=$4
  shift 4
  mkdir -p "$dir/data"
  cat >"$dir/node1.properties" <<EOF
process.roles=broker,controller
node.id=1
cluster.id=$cid
controller.quorum.voters=1@127.0.0.1:$((q + 1))
listeners=PLAINTEXT://127.0.0.1:$q,CONTROLLER://127.0.0.1:$((q + 1))
advertised.listeners=PLAINTEXT://127.0.0.1:$q
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
num.network.threads=2
num.io.threads=2
log.level=info
EOF
  printf '%s\n' "$@" >>"$dir/node1.properties"
  setsid "$BUILD/bin/kbroker" --config "$dir/node1.properties" >>"$dir/node1.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
}
# solo_stop PIDFILE MARK -- stop the node of PIDFILE if its command line still holds MARK (a pid
# file an aborted run left behind may name a reused pid): SIGTERM, 10 s to go, then SIGKILL
solo_stop() {
  local pid
  [ -f "$1" ] || return 0
  pid=$(cat "$1")
  rm -f "$1"
  grep -qs -- "$2" "/proc/$pid/cmdline" || return 0 # not ours (any more)
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done # until gone
  kill -KILL "$pid" 2>/dev/null
}

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
# cmp_topics TOPIC... -- every partition (0..3, or the list in $CMP_PARTS) of every topic;
# polled, 60 s for them all (followers may still be fetching the last batches)
cmp_topics() {
  local t p ok n=0 b=0 end=$((SECONDS + 60))
  for t in "$@"; do
    for p in ${CMP_PARTS:-0 1 2 3}; do
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

# ------------------------------------------------------------------------ the scenarios
for s in "${SC[@]}"; do
  "scenario_${s//-/_}"
done
echo
if [ "$FAILS" -ne 0 ]; then
  echo "mirror_e2e: FAILED ($FAILS failure(s)) in $((SECONDS - T0))s"
  exit 1
fi
echo "mirror_e2e: OK ($SCENARIOS) in $((SECONDS - T0))s"
