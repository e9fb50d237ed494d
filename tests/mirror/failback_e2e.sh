#!/usr/bin/env bash
# failback_e2e.sh KBROKER KMIRROR_SO KAFKA_MIRRORS KC_REPLICACMP BUILD_DIR -- failback with
# the LME lookup (failback_e2e.py): two kbroker clusters with kmirror.so, kafka-python,
# kafka-mirrors, kc_replicacmp. Installs kafka-python (pinned, as tests/broker_api) into
# BUILD_DIR/py-venv on first use.
set -euo pipefail
KB=${1:?kbroker path}
SO=${2:?kmirror.so path}
KMC=${3:?kafka-mirrors path}
CMP=${4:?kc_replicacmp path}
BUILD=${5:?build dir}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PIN="kafka-python==3.0.12"
VENV=$BUILD/py-venv
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.pin" 2>/dev/null)" != "$PIN" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV" || { echo "FAIL: python3 -m venv"; exit 1; }
  "$VENV/bin/pip" install --disable-pip-version-check -q "$PIN" >"$BUILD/py-venv.log" 2>&1 ||
    { tail -n 20 "$BUILD/py-venv.log"; echo "FAIL: pip install $PIN"; exit 1; }
  echo "$PIN" >"$VENV/.pin"
fi
W=$(mktemp -d "${TMPDIR:-/tmp}/kmfailback.XXXXXX")
trap 'rm -rf "$W"' EXIT
timeout 200 "$VENV/bin/python" "$HERE/failback_e2e.py" "$KB" "$SO" "$KMC" "$CMP" "$W"
