#!/usr/bin/env bash
# elect_cluster.sh KBROKER BUILD_DIR -- leader elections on a three-process kbroker cluster
# (elect_cluster.py starts, kills and restarts the processes): ElectLeaders PREFERRED through the
# Java AdminClient (tests/java/cluster-tools "elect") and kafka-python, UNCLEAN only on request,
# automatic preferred-leader rebalancing, a dynamic topic unclean.leader.election.enable.
# Uses the pinned kafka-python venv of tests/broker_api and Java 4.4 (tests/peers/versions.env).
set -euo pipefail
KB=${1:?kbroker path}
BUILD=${2:?build dir}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=../broker_api/py_venv.sh
. "$HERE/../broker_api/py_venv.sh"
kpy_venv "$BUILD"
command -v java >/dev/null || { echo "FAIL: java not found (the AdminClient half is Java)"; exit 1; }
CT_JAR=$("$REPO/tests/peers/mvn-build.sh" "$REPO/tests/java/cluster-tools" cluster-tools.jar) ||
  { echo "FAIL: cannot build tests/java/cluster-tools"; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/kbcl-elect.XXXXXX")
trap 'rm -rf "$W"' EXIT
timeout 240 "$VENV/bin/python" "$HERE/elect_cluster.py" "$KB" "$CT_JAR" "$W"
