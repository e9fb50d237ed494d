#!/usr/bin/env bash
# setup-venv.sh: makes sure $KPEER_HOME/clients-venv holds exactly the packages pinned in
# tests/clients/requirements.txt (confluent-kafka, kafka-python) and prints its python path.
# Idempotent: a venv whose marker matches the requirements' hash is left alone (~10 ms).
# Needs python3 with venv and PyPI on first use; fails loudly (exit 2) when it cannot install.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
KPEER_HOME=${KPEER_HOME:-$REPO/.kpeer}
VENV=$KPEER_HOME/clients-venv
REQ=$HERE/requirements.txt
die() { echo "setup-venv: $*" >&2; exit 2; }

want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.complete" 2>/dev/null)" = "$want" ]; then
  echo "$VENV/bin/python"
  exit 0
fi
command -v python3 >/dev/null || die "python3 not found"
mkdir -p "$KPEER_HOME"
# One installer at a time (two suites may ask at once).
exec 9>"$KPEER_HOME/.clients-venv.lock"
flock 9
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.complete" 2>/dev/null)" = "$want" ]; then
  echo "$VENV/bin/python"
  exit 0
fi
echo "setup-venv: creating $VENV" >&2
rm -rf "$VENV"
python3 -m venv "$VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
log=$KPEER_HOME/clients-venv.log
if ! "$VENV/bin/pip" install --disable-pip-version-check -q -r "$REQ" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  die "FAILED: pip could not install $REQ (PyPI unreachable and nothing cached?); log: $log"
fi
"$VENV/bin/python" -c "import confluent_kafka, kafka, kafka.codec as c; assert c.has_snappy() and c.has_lz4() and c.has_zstd()" || die "FAILED: the venv cannot import its packages"
echo "$want" >"$VENV/.complete"
echo "$VENV/bin/python"
