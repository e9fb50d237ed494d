#!/usr/bin/env bash
# python_cluster.sh KBROKER BUILD_DIR [SCRIPT] -- kafka-python against a three-process kbroker
# cluster (node 1 broker,controller with a CONTROLLER listener; nodes 2 and 3 broker-only) running
# SCRIPT (python_cluster.py by default) with the three bootstrap addresses. Uses the pinned
# kafka-python venv of tests/broker_api (installed there on first use, PyPI).
set -euo pipefail
KB=${1:?kbroker path}
BUILD=${2:?build dir}
SCRIPT=${3:-python_cluster.py}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../broker_api/py_venv.sh
. "$HERE/../broker_api/py_venv.sh"
kpy_venv "$BUILD"

W=$(mktemp -d "${TMPDIR:-/tmp}/kbcl-py.XXXXXX")
KBCL_CLUSTER_ID=kbrokerPyCluster000001
# shellcheck source=kbcl.sh
. "$HERE/kbcl.sh"
trap 'kbcl_kill_all; rm -rf "$W"' EXIT
kbcl_start 1
kbcl_start 2
kbcl_start 3

rc=0
timeout 300 "$VENV/bin/python" "$HERE/$SCRIPT" "$(kbcl_addr 1)" "$(kbcl_addr 2)" "$(kbcl_addr 3)" || rc=$?
[ "$rc" -eq 0 ] || kbcl_logs
for n in 1 2 3; do kbcl_stop "$n"; done
exit "$rc"
