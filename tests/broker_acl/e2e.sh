#!/usr/bin/env bash
# e2e.sh KBROKER BUILD_DIR REPLAY_CHECK [TEST_PLUGIN] -- ACLs through real clients against the real
# kbroker:
#   1. kbroker with authorizer.class.name=...StandardAuthorizer; kafka-python (acl_python.py
#      create) then the Java 4.4 AdminClient (kmirror.brokertests.Acls create) create, describe
#      and delete ACLs; each leaves a binding behind;
#   2. SIGTERM (exit 0), restart on the same data: both bindings are there, replayed from the
#      metadata log, no kbroker-acls written (python restart, then
#      java restart, which also checks the Python deletion and empties the store);
#   3. a kbroker without an authorizer answers SECURITY_DISABLED (python disabled);
#   4. a corrupt kbroker-acls stops the start with a message naming the file;
#   5. with TEST_PLUGIN (tests/broker_host's kbh_test_plugin.so) loaded: the plugin's kbx
#      authorize() answers follow the ACLs kafka-python creates, also after a restart
#      (acl_kbx.py);
#   6. every request frame the clients sent (recorded with KM_RECORD_DIR) decodes with our codec
#      (REPLAY_CHECK = tests/robust's kb_replay_check).
# kafka-python is pip-installed (pinned) into BUILD_DIR/py-venv on first use; the Java program
# is built by tests/peers/mvn-build.sh. Both fail loudly when they cannot be set up.
set -euo pipefail
KB=${1:?kbroker path}
BUILD=${2:?build dir}
REPLAY=${3:?kb_replay_check path}
PLUGIN=${4:-}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=../broker_api/py_venv.sh
. "$HERE/../broker_api/py_venv.sh"
kpy_venv "$BUILD"
command -v java >/dev/null || { echo "FAIL: java not found"; exit 1; }
JAR=$("$REPO/tests/peers/mvn-build.sh" "$REPO/tests/java/broker-tests" broker-tests.jar) ||
  { echo "FAIL: cannot build tests/java/broker-tests"; exit 1; }

W=$(mktemp -d "${TMPDIR:-/tmp}/kbacl-e2e.XXXXXX")
PID=
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill -KILL "$PID" 2>/dev/null || true; fi
  rm -rf "$W"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$W/broker.log" ] && tail -n 40 "$W/broker.log"; exit 1; }

# start PROPERTIES: kbroker in the background; BOOT gets its address once it listens.
start() {
  rm -f "$W/ready"
  mkfifo "$W/ready"
  mkdir -p "$W/rec"
  KM_RECORD_DIR="$W/rec" "$KB" --config "$1" >"$W/ready" 2>>"$W/broker.log" &
  PID=$!
  exec 9<"$W/ready"
  read -r -t 60 line <&9 || fail "kbroker did not start"
  exec 9<&-
  BOOT=$(echo "$line" | grep -o '127\.0\.0\.1:[0-9]*' | head -1)
}
stop() {
  kill -TERM "$PID"
  timeout 30 tail --pid="$PID" -f /dev/null || fail "kbroker did not stop"
  wait "$PID" || fail "kbroker exit status $?"
  PID=
}
py() { timeout 120 "$VENV/bin/python" "$HERE/acl_python.py" "$BOOT" "$1" || fail "python $1"; }
jv() {
  timeout 120 java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$JAR" \
    kmirror.brokertests.Acls "$BOOT" "$1" || fail "java $1"
}

cat >"$W/acl.properties" <<EOF
node.id=1
listeners=PLAINTEXT://127.0.0.1:0
log.dirs=$W/data
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin
EOF
start "$W/acl.properties"
py create
jv create
stop
[ ! -e "$W/data/kbroker-acls" ] || fail "ACL changes went to $W/data/kbroker-acls, not the metadata log"
start "$W/acl.properties"
py restart
jv restart
stop

cat >"$W/none.properties" <<EOF
node.id=1
listeners=PLAINTEXT://127.0.0.1:0
log.dirs=$W/data
EOF
start "$W/none.properties"
py disabled
stop

printf 'KBAC\0\1garbage' >"$W/data/kbroker-acls"
rc=0
timeout 30 "$KB" --config "$W/acl.properties" >/dev/null 2>"$W/corrupt.log" || rc=$?
[ "$rc" -ne 0 ] || fail "kbroker started on a corrupt kbroker-acls"
grep -q "$W/data/kbroker-acls.*corrupt" "$W/corrupt.log" ||
  { cat "$W/corrupt.log"; fail "no message naming the corrupt file"; }
echo "ok: a corrupt kbroker-acls stops the start (exit $rc), naming the file"

if [ -n "$PLUGIN" ]; then
  cat >"$W/kbx.properties" <<EOF
node.id=1
listeners=PLAINTEXT://127.0.0.1:0
log.dirs=$W/kbx-data
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin
plugin.paths=mirror.enable=$PLUGIN
mirror.enable=true
EOF
  kbx() { timeout 120 "$VENV/bin/python" "$HERE/acl_kbx.py" "$BOOT" "$1" || fail "kbx $1"; }
  start "$W/kbx.properties"
  kbx before
  stop
  start "$W/kbx.properties"
  kbx after
  stop
fi

"$REPLAY" -v "$W/rec" >"$W/replay.log" 2>&1 || { grep -v '^ok ' "$W/replay.log" | tail -n 20; fail "kb_replay_check"; }
for api in DescribeAcls CreateAcls DeleteAcls; do
  for v in 1 2 3; do
    if grep -q "^ok   $api v$v " "$W/replay.log"; then seen="${seen:-} $api-v$v"; fi
  done
  grep -q "^ok   $api v" "$W/replay.log" || fail "no $api request recorded"
done
echo "ok: $(tail -n 1 "$W/replay.log"): every recorded request decodes (ACL requests:$seen)"
echo PASS
