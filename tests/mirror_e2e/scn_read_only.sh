# shellcheck shell=bash
# scn_read_only.sh -- scenario read-only of tests/mirror_e2e/run.sh (sourced by it; uses its helpers and
# variables: S, D, CL, KM, CMP, PY, ME2E, WORK, SRC, DST, fail, step, until_ok, cmp_topics).

scenario_read_only() {
  step "read-only: a plain topic ro-plain on the destination; raw Produce, config requests and CreatePartitions against mirror topic id-00"
  "${ME2E[@]}" create-topics "$D" 1 3 ro-plain || { fail "create ro-plain"; return; }
  "${ME2E[@]}" read-only "$S" "$D" id-00 ro-plain m1 >"$WORK/ro.out" 2>&1 || fail "read-only checks (below)"
  cat "$WORK/ro.out"
  step "read-only: nothing was appended to any replica of id-00 (still byte-identical to the source)"
  cmp_topics id-00
}
