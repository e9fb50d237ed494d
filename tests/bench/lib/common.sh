# shellcheck shell=bash
# common.sh -- shell helpers shared by the benchmarks in tests/bench/ (sourced, never run).
# Expects the caller to define log() and, for meta(), the variable META (a file).
#   meta KEY VALUE     appends KEY=VALUE (tabs and newlines flattened) to $META
#   loadavg            the three load averages
#   now_ns             wall clock in ns
#   cpu_ticks PID      utime+stime of a process (clock ticks; fails if it is gone)
#   sys_busy           busy ticks of the whole machine (user nice system irq softirq steal)
#   sys_total          all ticks of the whole machine
#   wait_quiet         waits up to $WAIT_QUIET s for a 3 s window with the machine < 25 % busy
#   hwm_kb/rss_kb PID, reset_hwm PID    VmHWM / VmRSS, and resetting VmHWM (clear_refs 5)
#   bench_machine_meta writes the machine's lines (cpu, cores, ram, kernel, os, jdk, python, disk
#                      of $1) with meta()

meta() { printf '%s=%s\n' "$1" "$(printf '%s' "$2" | tr '\n\t' '  ')" >>"$META"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
now_ns() { date +%s%N; }
cpu_ticks() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  echo $((${12} + ${13}))
}
sys_busy() {
  local _c u n s i w q sq st
  read -r _c u n s i w q sq st _ </proc/stat
  echo $((u + n + s + q + sq + st))
}
sys_total() { awk '/^cpu / {t = 0; for (i = 2; i <= NF; i++) t += $i; print t; exit}' /proc/stat; }
wait_quiet() {
  [ "${WAIT_QUIET:-0}" -gt 0 ] || return 0
  local end=$((SECONDS + WAIT_QUIET)) b0 t0 b1 t1 pct
  while :; do
    b0=$(sys_busy) t0=$(sys_total)
    sleep 3 # the measuring window itself, not a synchronisation
    b1=$(sys_busy) t1=$(sys_total)
    pct=$(((b1 - b0) * 100 / (t1 - t0 > 0 ? t1 - t0 : 1)))
    [ "$pct" -lt 25 ] && return 0
    if [ $SECONDS -ge $end ]; then
      log "machine still ${pct}% busy after waiting ${WAIT_QUIET}s: measuring anyway"
      return 0
    fi
  done
}
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
reset_hwm() { echo 5 >"/proc/$1/clear_refs" 2>/dev/null || true; }
bench_machine_meta() {
  meta cpu "$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
  meta cores "$(nproc)"
  meta ram "$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  meta kernel "Linux $(uname -r)"
  meta os "$(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}")"
  meta jdk "OpenJDK $(java -version 2>&1 | sed -n '1s/^[a-z]* version "\([^"]*\)".*/\1/p') ($(java -version 2>&1 | sed -n '2s/.*(build \(.*\))$/\1/p'))"
  meta python "$(python3 --version 2>&1)"
  meta disk "$(df -h --output=fstype,size "$1" | tail -1 | awk '{print $1 ", " $2}')"
}
