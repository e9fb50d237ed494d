#!/usr/bin/env bash
# python_test.sh KBROKER BUILD_DIR -- kafka-python against the real kbroker.
# Installs kafka-python (pinned) into BUILD_DIR/py-venv on first use (PyPI; fails loudly when
# it cannot), starts kbroker on an ephemeral loopback port, runs python_test.py.
set -euo pipefail
KB=${1:?kbroker path}
BUILD=${2:?build dir}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../broker_api/py_venv.sh
. "$HERE/py_venv.sh"
kpy_venv "$BUILD"

W=$(mktemp -d "${TMPDIR:-/tmp}/kbat-py.XXXXXX")
PID=
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill -KILL "$PID" 2>/dev/null || true; fi
  rm -rf "$W"
}
trap cleanup EXIT
cat >"$W/server.properties" <<EOF
node.id=1
listeners=PLAINTEXT://127.0.0.1:0
log.dirs=$W/data
EOF
mkfifo "$W/ready"
"$KB" --config "$W/server.properties" >"$W/ready" 2>"$W/broker.log" &
PID=$!
exec 9<"$W/ready"
read -r -t 60 line <&9 || { echo "FAIL: kbroker did not start"; tail "$W/broker.log"; exit 1; }
exec 9<&-
BOOT=$(echo "$line" | grep -o '127\.0\.0\.1:[0-9]*' | head -1)
rc=0
timeout 300 "$VENV/bin/python" "$HERE/python_test.py" "$BOOT" || rc=$?
kill -TERM "$PID"
timeout 30 tail --pid="$PID" -f /dev/null || { echo "FAIL: kbroker did not stop"; rc=1; }
wait "$PID" || { echo "FAIL: kbroker exit status"; rc=1; }
PID=
if [ "$rc" -ne 0 ]; then tail -n 40 "$W/broker.log"; fi
exit "$rc"
