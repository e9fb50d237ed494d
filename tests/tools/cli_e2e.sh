#!/usr/bin/env bash
# cli_e2e.sh KAFKA_MIRRORS KBROKER KMIRROR_SO -- the CLI's behaviour against the real plugin: a
# source kbroker (topics orders and audit, 2 partitions, some records, produced with kcat) and
# a destination kbroker with kmirror.so. Through kafka-mirrors only: create (and create again:
# exit 1), list (the source's cluster id resolved), start a pattern (only the matching topic),
# describe (--json: every partition exactly once), pause / pause again (exit 1) / resume /
# resume again (exit 1), delete refused while running (exit 1), stop, delete once stopped, list
# and describe after delete, re-create with the same name.
#
# Partition states (MIRRORING, STOPPED, ...) come from other modules; this test checks the
# admin path and what the CLI makes of the answers. Waits poll a condition with a deadline.
set -euo pipefail
KM=${1:?kafka-mirrors path}
KB=${2:?kbroker path}
SO=${3:?kmirror.so path}
command -v kcat >/dev/null || { echo "FAIL: kcat not installed"; exit 1; }
command -v python3 >/dev/null || { echo "FAIL: python3 not installed"; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/kmc-e2e.XXXXXX")
PIDS=()
fails=0
cleanup() {
  for p in "${PIDS[@]}"; do { kill -KILL "$p" && wait "$p"; } 2>/dev/null || true; done
  if [ "$fails" -ne 0 ]; then
    for n in src dst; do echo "--- $n log (tail)"; tail -n 15 "$W/$n.log" 2>/dev/null || true; done
  fi
  rm -rf "$W"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# start NAME CLUSTER_ID EXTRA -- a single-node kbroker; its address in ADDR_<NAME>
start() {
  local n=$1 line
  cat >"$W/$n.properties" <<EOF
node.id=1
listeners=PLAINTEXT://127.0.0.1:0
log.dirs=$W/$n
num.partitions=2
auto.create.topics.enable=true
cluster.id=$2
$3
EOF
  mkfifo "$W/ready.$n"
  "$KB" --config "$W/$n.properties" >"$W/ready.$n" 2>"$W/$n.log" &
  PIDS+=($!)
  exec 9<"$W/ready.$n"
  read -r -t 60 line <&9 || { fail "$n did not start"; exit 1; }
  exec 9<&-
  printf -v "ADDR_$n" '%s' "$(echo "$line" | grep -o '127\.0\.0\.1:[0-9]*' | head -1)"
}

SRC_ID=kmCliE2eSourceCluster1
start src "$SRC_ID" ""
start dst kmCliE2eDestinCluster1 "plugin.paths=$SO
mirror.enable=true"
S=$ADDR_src
D=$ADDR_dst

# km WANT_RC DESCRIPTION ARGS... (stdout in $W/out, stderr in $W/err)
km() {
  local want=$1 what=$2 rc=0
  shift 2
  timeout 60 "$KM" --bootstrap-server "$D" "$@" >"$W/out" 2>"$W/err" || rc=$?
  if [ "$rc" != "$want" ]; then
    fail "$what: exit $rc, want $want"
    sed 's/^/  stdout: /' "$W/out"
    sed 's/^/  stderr: /' "$W/err"
    return 1
  fi
  echo "ok: $what (exit $rc)"
}
has() { # WHERE(out|err) WHAT TEXT
  grep -qF -- "$3" "$W/$1" || { fail "$2: $1 lacks '$3'"; sed "s/^/  $1: /" "$W/$1"; }
}
# until_ok SECONDS DESCRIPTION CMD... -- run CMD until it succeeds or the deadline passes
until_ok() {
  local secs=$1 what=$2 end
  shift 2
  end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$end" ]; then fail "$what: not true within ${secs}s"; return 1; fi
    sleep 0.2 # between polls of the condition
  done
  echo "ok: $what"
}

for t in orders audit; do
  seq 1 20 | timeout 30 kcat -b "$S" -P -t "$t" ||
    fail "produce to $t"
done

printf '# the source cluster\nbootstrap.servers=%s\n' "$S" >"$W/m1.properties"
km 0 "create" --create --mirror m1 --mirror-config "$W/m1.properties" && has out create "Created mirror m1"
km 1 "create again" --create --mirror m1 --mirror-config "$W/m1.properties" &&
  has err "create again" "CreateMirror failed: CLUSTER_MIRROR_ALREADY_EXISTS"

list_resolved() {
  "$KM" --bootstrap-server "$D" --list --json |
    python3 -c 'import json,sys; m={x["mirror"]:x for x in json.load(sys.stdin)["mirrors"]}; sys.exit(0 if m["m1"]["sourceClusterId"]==sys.argv[1] and m["m1"]["sourceBootstrap"]==sys.argv[2] else 1)' "$SRC_ID" "$S"
}
until_ok 30 "list shows the source cluster id $SRC_ID" list_resolved

km 0 "start ord.*" --start --mirror m1 --topic 'ord.*'
has out "start" "orders  OK"
grep -q audit "$W/out" && fail "start: audit does not match ord.* but was started"

# Every partition of orders exactly once, none of audit.
describe_once() {
  "$KM" --bootstrap-server "$D" --describe --mirror m1 --json |
    python3 -c '
import json, sys
d = json.load(sys.stdin)["mirrors"]
assert len(d) == 1 and d[0]["mirror"] == "m1" and d[0]["errorCode"] == 0, d
parts = sorted((p["topic"], p["partition"]) for p in d[0]["partitions"])
sys.exit(0 if parts == [("orders", 0), ("orders", 1)] else 1)'
}
until_ok 30 "describe lists orders-0 and orders-1 exactly once" describe_once
km 0 "describe (table)" --describe --mirror m1 && has out "describe table" "m1      orders  1"
km 0 "list" --list && has out list "m1      1       $SRC_ID"

km 0 "pause" --pause --mirror m1 --topic orders && has out pause "orders  OK"
# The broker answers once the change is committed; its own view may follow a moment later, so a
# repeat is polled until refused (a repeat that is accepted changes nothing).
refused() { # CODE ARGS...: exit 1 with CODE in the per-topic results
  local code=$1 rc=0
  shift
  "$KM" --bootstrap-server "$D" "$@" >"$W/rout" 2>&1 || rc=$?
  [ "$rc" = 1 ] && grep -q "orders  $code" "$W/rout"
}
until_ok 30 "pause again: exit 1, MIRROR_TOPIC_ALREADY_PAUSED" \
  refused MIRROR_TOPIC_ALREADY_PAUSED --pause --mirror m1 --topic orders
km 0 "resume" --resume --mirror m1 --topic 'o.*' && has out resume "orders  OK"
until_ok 30 "resume again: exit 1, MIRROR_TOPIC_NOT_PAUSED" \
  refused MIRROR_TOPIC_NOT_PAUSED --resume --mirror m1 --topic orders
km 1 "pause a topic of no mirror" --pause --mirror m1 --topic audit &&
  has err "pause audit" "no topic of mirror m1 matches 'audit'"

km 1 "delete while running" --delete --mirror m1 &&
  has err "delete while running" "DeleteMirror failed: CLUSTER_MIRROR_NOT_EMPTY"
km 0 "stop .*" --stop --mirror m1 --topic '.*' && has out stop "orders  OK"
until_ok 60 "delete once stopped" "$KM" --bootstrap-server "$D" --delete --mirror m1

km 0 "list after delete" --list && has out "list after delete" "No mirrors."
km 1 "describe after delete" --describe --mirror m1 && has err "describe after delete" "mirror m1"
km 0 "re-create with the same name" --create --mirror m1 --mirror-config "$W/m1.properties"
km 0 "list after re-create" --list && has out "list after re-create" "m1 "

if [ "$fails" -ne 0 ]; then echo "$fails check(s) failed"; exit 1; fi
echo "all ok"
