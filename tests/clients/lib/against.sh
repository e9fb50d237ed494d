# Shared flow of tests/clients/against-<broker>.sh (sourced). The caller defines
#   km_broker_start    starts the broker (KM_RECORD_DIR is exported when --record-dir was given)
#   km_broker_bootstrap prints HOST:PORT of the running broker
#   km_broker_stop     stops it (called once, also on failure or interrupt)
#   km_broker_name     a label for the table (e.g. "Apache Kafka 4.4.0, 1 node")
# and calls km_against "$@". Options understood here:
#   --record-dir DIR   exported as KM_RECORD_DIR to km_broker_start and run-all.sh
#   --keep             leave the broker running afterwards (prints its bootstrap)
#   anything else      passed to run-all.sh (e.g. --suites kcat,java)
# Prints the run-all table plus start/stop times; exits with run-all's status (2 if the broker
# could not be started).

km_against() {
  local run_args=() keep=0 t0 t_start t_run t_stop rc
  while [ $# -gt 0 ]; do
    case "$1" in
      --record-dir) mkdir -p "$2"; KM_RECORD_DIR=$(cd "$2" && pwd); export KM_RECORD_DIR; shift 2 ;;
      --keep) keep=1; shift ;;
      *) run_args+=("$1"); shift ;;
    esac
  done
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  KM_AGAINST_STARTED=
  _km_against_cleanup() {
    local rc=$?
    if [ -n "$KM_AGAINST_STARTED" ] && [ "${KM_AGAINST_KEEP:-0}" = 0 ]; then
      KM_AGAINST_STARTED=
      km_broker_stop || true
    fi
    exit $rc
  }
  KM_AGAINST_KEEP=$keep
  trap _km_against_cleanup EXIT
  trap 'exit 130' INT TERM

  # Prepare first (no broker running yet): the venv and the Java suite's jar.
  t0=$(date +%s%3N)
  "$here/setup-venv.sh" >/dev/null || return 2
  "$here/../peers/mvn-build.sh" "$here/../java/client-tests" client-tests.jar >/dev/null || return 2
  local t_prep=$(($(date +%s%3N) - t0))

  t0=$(date +%s%3N)
  KM_AGAINST_STARTED=1
  km_broker_start || { echo "against: the broker did not start" >&2; return 2; }
  t_start=$(($(date +%s%3N) - t0))
  local bs
  bs=$(km_broker_bootstrap) || { echo "against: no bootstrap address" >&2; return 2; }

  t0=$(date +%s%3N)
  "$here/run-all.sh" --bootstrap "$bs" "${run_args[@]}"
  rc=$?
  t_run=$(($(date +%s%3N) - t0))

  t_stop=0
  if [ "$keep" = 0 ]; then
    t0=$(date +%s%3N)
    KM_AGAINST_STARTED=
    km_broker_stop || { echo "against: stopping the broker failed" >&2; rc=1; }
    t_stop=$(($(date +%s%3N) - t0))
  else
    echo "against: broker left running at $bs"
  fi
  printf 'against %s: prepare %.1f s, start %.1f s, suites %.1f s, stop %.1f s\n' "$(km_broker_name)" \
    "$(awk -v m=$t_prep 'BEGIN{print m/1000}')" "$(awk -v m=$t_start 'BEGIN{print m/1000}')" \
    "$(awk -v m=$t_run 'BEGIN{print m/1000}')" "$(awk -v m=$t_stop 'BEGIN{print m/1000}')"
  return $rc
}
