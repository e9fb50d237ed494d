# Shared helpers of the shell client suites (sourced, not run).
#
#   km_parse_bootstrap "$@"   sets BOOTSTRAP from --bootstrap HOST:PORT or $KM_BOOTSTRAP, and
#                             leaves the other arguments in KM_ARGS
#   km_check NAME CMD...      runs CMD; counts and prints "PASS NAME" or "FAIL NAME"
#   km_pass NAME / km_fail NAME WHY
#   km_summary                prints "N passed, N failed" and returns 0 only if nothing failed
#   km_topic PREFIX           a topic name unique to this run (suites never reuse a topic)
#   km_deadline_wait SECS CMD...  polls CMD (0.1 s apart) until it succeeds or SECS pass
#
# The suites know nothing about the broker they talk to: only the bootstrap address.

KM_PASSED=0
KM_FAILED=0
KM_FAILED_NAMES=()
KM_CLIENTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

km_log() { echo "[${KM_SUITE:-suite}] $*" >&2; }

km_parse_bootstrap() {
  BOOTSTRAP=${KM_BOOTSTRAP:-}
  KM_ARGS=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --bootstrap) BOOTSTRAP=$2; shift 2 ;;
      --bootstrap=*) BOOTSTRAP=${1#--bootstrap=}; shift ;;
      *) KM_ARGS+=("$1"); shift ;;
    esac
  done
  if [ -z "$BOOTSTRAP" ]; then
    echo "usage: $0 --bootstrap HOST:PORT (or KM_BOOTSTRAP=HOST:PORT)" >&2
    exit 64
  fi
}

km_pass() {
  KM_PASSED=$((KM_PASSED + 1))
  echo "PASS $1"
}

km_fail() {
  KM_FAILED=$((KM_FAILED + 1))
  KM_FAILED_NAMES+=("$1")
  echo "FAIL $1: ${2:-}"
}

# km_check NAME CMD... : the check passes when CMD exits 0; its output (last lines) is shown only
# on failure. Returns CMD's status.
km_check() {
  local name=$1 out rc
  shift
  out=$("$@" 2>&1) && rc=0 || rc=$?
  if [ "$rc" = 0 ]; then
    km_pass "$name"
  else
    km_fail "$name" "$(tail -n 5 <<<"$out" | cut -c1-400 | tr '\n' ' ')"
  fi
  return "$rc"
}

km_summary() {
  echo "$KM_PASSED passed, $KM_FAILED failed"
  [ "$KM_FAILED" = 0 ] && [ "$KM_PASSED" -gt 0 ]
}

km_topic() {
  echo "$1-$(date +%s%3N)-$$-$RANDOM"
}

km_now_ms() { date +%s%3N; }

km_deadline_wait() {
  local secs=$1 end
  shift
  end=$(($(km_now_ms) + secs * 1000))
  until "$@"; do
    [ "$(km_now_ms)" -lt "$end" ] || return 1
    sleep 0.1
  done
}

# The Python interpreter of the client venv (tests/clients/setup-venv.sh). KM_PYTHON overrides.
km_python() {
  if [ -n "${KM_PYTHON:-}" ]; then
    echo "$KM_PYTHON"
  else
    "$KM_CLIENTS_DIR/setup-venv.sh"
  fi
}
