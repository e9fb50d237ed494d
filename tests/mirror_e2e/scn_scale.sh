# shellcheck shell=bash
# scn_scale.sh -- scenario scale of tests/mirror_e2e/run.sh (sourced by it; uses its helpers and
# variables: S, D, CL, KM, PY, ME2E, WORK, SRC, DST, INJECT, fail, step, until_ok).
#
# 2,000 mirrored partitions (SCALE_TOPICS x SCALE_PARTS, RF 1 on the source, the mirror's default
# RF 3 on the destination) reach steady state with incremental fetch sessions. Independent of the
# other scenarios (own topics sc-*, own mirror msc). Not in the default list `scenarios`: it has
# its own ctest (mirror_e2e_scale, fresh clusters), so that the 2,000 x 3 replicas it leaves on
# the destination never slow the shared clusters of the other scenarios.

SCALE_TOPICS=${SCALE_TOPICS:-200}
SCALE_PARTS=${SCALE_PARTS:-10}
SCALE_BOUND=${SCALE_BOUND:-256} # bytes: average steady-state Fetch request, at most
scale_py() { "$PY" "$HERE/scale.py" "$@"; }

# metrics_urls CLUSTER NODES... -- the /metrics URLs of the nodes (ephemeral ports, from the
# "metrics on http://..." line of each node's log)
metrics_urls() {
  local c=$1 i u out=()
  shift
  for i in "$@"; do
    u=$(sed -n 's|.*metrics on \(http://[^ ]*/metrics\).*|\1|p' "$KPEER_HOME/$c/node$i.log" | tail -1)
    [ -n "$u" ] || return 1
    out+=("$u")
  done
  (IFS=,; echo "${out[*]}")
}

scenario_scale() {
  local n=$((SCALE_TOPICS * SCALE_PARTS)) su du rc i few=()
  step "scale: ulimit -n $(ulimit -n) (run.sh raised it to the hard limit)"
  [ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge 8192 ] ||
    { fail "ulimit -n is $(ulimit -n), the scale scenario needs 8192 (2,000 partitions x 3 replicas on 3 brokers)"; return; }
  su=$(metrics_urls "$SRC" 1 2 3) && du=$(metrics_urls "$DST" 1 2 3) ||
    { fail "no metrics listener in the node logs (run.sh starts every node with metrics.listener port 0)"; return; }

  step "scale: $SCALE_TOPICS topics x $SCALE_PARTS partitions (RF 1) on the source, 2 records each"
  scale_py create "$S" sc- "$SCALE_TOPICS" "$SCALE_PARTS" || { fail "create the source topics"; return; }
  scale_py produce "$S" sc- "$SCALE_TOPICS" "$SCALE_PARTS" 2 || { fail "produce to the source topics"; return; }

  step "scale: kafka-mirrors --create msc and --start --topic 'sc-.*' ($n partitions)"
  printf 'bootstrap.servers=%s\n' "$S" >"$WORK/msc.properties"
  mirror_create msc "$WORK/msc.properties" || return
  "$KM" --bootstrap-server "$D" --start --mirror msc --topic 'sc-.*' --timeout-ms 120000 \
    >"$WORK/scale-start.out" 2>&1
  rc=$?
  tail -n 3 "$WORK/scale-start.out"
  [ "$rc" = 0 ] || { fail "kafka-mirrors --start msc: exit $rc"; return; }

  step "scale: wait until DescribeMirrors shows all $n partitions MIRRORING with lag 0 and the source's log ends"
  until_ok 300 "$n partitions caught up" "${ME2E[@]}" caught-up "$KM" "$D" "$S" msc "$n" || return
  tail -1 "$WORK/last"

  step "scale: steady state: fetch sessions on the source brokers, session epochs, request sizes"
  # Two scrapes with at least 10 Fetch requests served by every source broker between them
  # (polled on the counters, not timed; any kind, so that the checks below judge them).
  scale_py scrape "$WORK/scale-m0.json" ${su//,/ } ${du//,/ } || { fail "scrape metrics"; return; }
  enough_fetches() {
    scale_py scrape "$WORK/scale-m1.json" ${su//,/ } ${du//,/ } || return 1
    scale_py fetches-since "$WORK/scale-m0.json" "$WORK/scale-m1.json" "$su" 10
  }
  until_ok 120 "10 Fetch requests on every source broker" enough_fetches || return
  scale_py steady "$WORK/scale-m0.json" "$WORK/scale-m1.json" "$su" "$du" msc "$n" "$SCALE_BOUND" \
    >"$WORK/scale-steady.out" 2>&1 || fail "steady state (see below)"
  cat "$WORK/scale-steady.out"

  step "scale: new records on a handful of partitions arrive"
  for i in 0 7 63 123 199; do
    [ "$i" -lt "$SCALE_TOPICS" ] && few+=("$(printf 'sc-%03d:%d' "$i" $((i % SCALE_PARTS)))")
  done
  scale_py produce "$S" sc- 0 0 3 "${few[@]}" || { fail "produce to ${few[*]}"; return; }
  until_ok 120 "all $n partitions caught up again (the new records mirrored)" \
    "${ME2E[@]}" caught-up "$KM" "$D" "$S" msc "$n" || return
  tail -1 "$WORK/last"
}
