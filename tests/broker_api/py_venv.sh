# py_venv.sh -- sourced (not run) by the kafka-python tests: the pinned kafka-python venv.
#
#   . "$REPO/tests/broker_api/py_venv.sh"
#   kpy_venv DIR        # VENV=DIR/py-venv, kafka-python installed (PyPI, first use / new pin)
#
# One pin for every test (tests/broker_api, broker_acl, broker_cluster, mirror). Tests that run
# at the same time (ctest -j) share the venv: its creation is serialised with flock on
# DIR/py-venv.lock. On failure kpy_venv prints "FAIL: ..." and exits the calling script with 1.
KPY_PIN="kafka-python==3.0.12"

kpy_venv() {
  local dir=${1:?kpy_venv: build dir} fd
  VENV=$dir/py-venv
  mkdir -p "$dir"
  exec {fd}>"$dir/py-venv.lock"
  flock "$fd"
  if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.pin" 2>/dev/null)" != "$KPY_PIN" ]; then
    rm -rf "$VENV"
    python3 -m venv "$VENV" || { echo "FAIL: python3 -m venv"; exit 1; }
    "$VENV/bin/pip" install --disable-pip-version-check -q "$KPY_PIN" >"$dir/py-venv.log" 2>&1 ||
      { tail -n 20 "$dir/py-venv.log"; echo "FAIL: pip install $KPY_PIN"; exit 1; }
    echo "$KPY_PIN" >"$VENV/.pin"
  fi
  exec {fd}>&-
}
