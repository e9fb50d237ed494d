#!/usr/bin/env bash
# mirror_e2e.sh KBROKER KMIRROR_SO KAFKA_MIRRORS BUILD_DIR -- the partition state machine
# end to end (mirror_e2e.py): source and destination kbroker, kafka-python, kafka-mirrors,
# STOPPING crash points. Installs kafka-python (pinned, as tests/broker_api) into
# BUILD_DIR/py-venv on first use.
set -euo pipefail
KB=${1:?kbroker path}
SO=${2:?kmirror.so path}
KMC=${3:?kafka-mirrors path}
BUILD=${4:?build dir}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../broker_api/py_venv.sh
. "$HERE/../broker_api/py_venv.sh"
kpy_venv "$BUILD"
W=$(mktemp -d "${TMPDIR:-/tmp}/kmpart.XXXXXX")
trap 'rm -rf "$W"' EXIT
timeout 280 "$VENV/bin/python" "$HERE/mirror_e2e.py" "$KB" "$SO" "$KMC" "$W"
