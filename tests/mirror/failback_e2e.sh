#!/usr/bin/env bash
# failback_e2e.sh KBROKER KMIRROR_SO KAFKA_MIRRORS KC_REPLICACMP BUILD_DIR -- failback with the
# LME lookup (failback_e2e.py): two kbroker clusters with kmirror.so, kafka-python,
# kafka-mirrors, kc_replicacmp. kafka-python (pinned) comes from tests/broker_api/py_venv.sh.
set -euo pipefail
KB=${1:?kbroker path}
SO=${2:?kmirror.so path}
KMC=${3:?kafka-mirrors path}
CMP=${4:?kc_replicacmp path}
BUILD=${5:?build dir}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../broker_api/py_venv.sh
. "$HERE/../broker_api/py_venv.sh"
kpy_venv "$BUILD"
W=$(mktemp -d "${TMPDIR:-/tmp}/kmfailback.XXXXXX")
trap 'rm -rf "$W"' EXIT
timeout 200 "$VENV/bin/python" "$HERE/failback_e2e.py" "$KB" "$SO" "$KMC" "$CMP" "$W"
