# shellcheck shell=bash
# scn_mirror_config.sh -- scenario mirror-config of tests/mirror_e2e/run.sh (sourced by it; uses
# its helpers and variables: S, D, CL, KM, PY, ME2E, WORK, DST, fail, step, until_ok,
# mirror_create). Needs nothing from the other scenarios: its own topics mc-*, mirror mmc.
# docs/testing-mirror.md "Scenario mirror-config".
#
# The MIRROR config resource (design M114, M115), raw wire and kafka-mirrors --alter / --describe
# --mirror: DescribeConfigs shows the mirror's keys through
# every destination broker, a secret never; IncrementalAlterConfigs refuses unknown keys, bad
# values and a result without bootstrap.servers; a filter change (DELETE topics.exclude) takes
# effect on the next discovery run; a connection change (bootstrap.servers to another broker of
# the same source) makes the fetchers reconnect and mirroring go on.

mc_py() { "$PY" "$HERE/mirror-config.py" "$@"; }
mc_st() { "$PY" "$HERE/sync-topics.py" "$@"; }

# mc_all_show KEY VALUE -- every destination broker describes mmc's KEY as VALUE
mc_all_show() {
  local b v
  for b in $(tr , ' ' <<<"$D"); do
    v=$(mc_py get "$b" mmc "$1") || { echo "$b: $v"; return 1; }
    [ "$v" = "$2" ] || { echo "$b shows $1=$v, want $2"; return 1; }
  done
}

# mc_refused EXPECT_CODE EXPECT_TEXT OP... -- an alteration of mmc refused as expected
mc_refused() {
  local want=$1 text=$2 out
  shift 2
  out=$(mc_py alter "${D%%,*}" mmc "$@")
  if [ "${out%% *}" = "$want" ] && grep -qF -- "$text" <<<"$out"; then
    echo "ok: alter $* refused: $out"
  else
    fail "alter $*: got '$out', want error $want with '$text'"
  fi
}

scenario_mirror_config() {
  local s1=${S%%,*} s2 out
  s2=$(cut -d, -f2 <<<"$S")
  step "mirror-config: mirror mmc (bootstrap.servers=$s1 only, topics.include=mc-.*, topics.exclude=mc-skip.*, a sasl.password)"
  printf 'bootstrap.servers=%s\ntopics.include=mc-.*\ntopics.exclude=mc-skip.*\nsasl.password=mc-s3cret-pw\n' \
    "$s1" >"$WORK/mmc.properties"
  mirror_create mmc "$WORK/mmc.properties" || return
  "${ME2E[@]}" create-topics "$S" 2 3 mc-a mc-skip1 && mc_st produce "$S" mc-a a 20 &&
    mc_st produce "$S" mc-skip1 skip 10 || { fail "create and write mc-a, mc-skip1 on the source"; return; }
  until_ok 60 "mc-a discovered and mirrored" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mmc 2 mc-a || return
  mc_st absent "$D" mc-skip1 || fail "mc-skip1 (matches topics.exclude) was created on the destination"

  step "mirror-config: DescribeConfigs of mmc through every destination broker (the secret never in an answer)"
  for b in $(tr , ' ' <<<"$D"); do
    if out=$(mc_py describe "$b" mmc mc-s3cret-pw); then
      grep -qx "bootstrap.servers=$s1" <<<"$out" && grep -qx 'topics.exclude=mc-skip.\*' <<<"$out" &&
        grep -qx 'sasl.password=(sensitive)' <<<"$out" &&
        echo "ok: $b describes mmc: $(paste -sd' ' <<<"$out")" ||
        fail "$b describes mmc as: $(paste -sd' ' <<<"$out")"
    else
      fail "DescribeConfigs of mmc through $b: $out"
    fi
  done

  step "mirror-config: IncrementalAlterConfigs refused: unknown key, bad value, no bootstrap.servers, unknown mirror"
  mc_refused 40 "no.such.key: unknown mirror configuration key" set:no.such.key=1
  mc_refused 40 "sync.topic.configs.interval.ms" set:sync.topic.configs.interval.ms=-5
  mc_refused 40 "bootstrap.servers: required but not set" delete:bootstrap.servers
  out=$(mc_py alter "${D%%,*}" mmc-none set:topics.exclude=x)
  [ "${out%% *}" = 137 ] && echo "ok: an unknown mirror: $out" || fail "alter of mirror mmc-none: $out, want 137"
  if out=$("$KM" --bootstrap-server "$D" --alter --mirror mmc --add-config no.such.key=1 2>&1); then
    fail "kafka-mirrors --alter --add-config no.such.key=1 succeeded: $out"
  else
    grep -q "unknown mirror configuration key" <<<"$out" && echo "ok: kafka-mirrors --alter refused: $out" ||
      fail "kafka-mirrors --alter --add-config no.such.key=1: $out"
  fi
  until_ok 10 "mmc unchanged (topics.exclude still mc-skip.*)" mc_all_show topics.exclude 'mc-skip.*' || return

  step "mirror-config: DELETE topics.exclude (the default __.* applies): discovery mirrors mc-skip1, no reconnect"
  out=$("$KM" --bootstrap-server "$(cut -d, -f2 <<<"$D")" --alter --mirror mmc --delete-config topics.exclude 2>&1) ||
    { fail "kafka-mirrors --alter --delete-config topics.exclude: $out"; return; }
  echo "$out"
  until_ok 30 "every destination broker shows topics.exclude=__.* (the default)" mc_all_show topics.exclude '__.*' || return
  until_ok 60 "mc-skip1 discovered and mirrored" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mmc 2 mc-skip1 || return
  if grep -q "mirror mmc: source connection settings changed" "$KPEER_HOME/$DST"/node*.log; then
    fail "a filter change made mmc's fetchers reconnect"
  else
    echo "ok: no reconnect for the filter change"
  fi

  step "mirror-config: SET bootstrap.servers=$s2 (another broker of the same source): fetchers reconnect, mirroring goes on"
  out=$("$KM" --bootstrap-server "${D##*,}" --alter --mirror mmc --add-config "bootstrap.servers=$s2" 2>&1) ||
    { fail "kafka-mirrors --alter --add-config bootstrap.servers=$s2: $out"; return; }
  echo "$out"
  until_ok 30 "every destination broker shows bootstrap.servers=$s2" mc_all_show bootstrap.servers "$s2" || return
  until_ok 30 "a destination broker logged mmc's reconnect" \
    grep -q "mirror mmc: source connection settings changed, reconnecting" "$KPEER_HOME/$DST"/node*.log || return
  out=$("$KM" --bootstrap-server "$D" --describe --mirror mmc 2>&1)
  if grep -q "^CONFIG of mirror mmc" <<<"$out" && grep -qx "  bootstrap.servers=$s2" <<<"$out" &&
    grep -qx "  sasl.password=(sensitive)" <<<"$out" && ! grep -q "mc-s3cret-pw" <<<"$out"; then
    echo "ok: kafka-mirrors --describe --mirror mmc shows the config:"
    sed -n '/^CONFIG of mirror/,$p' <<<"$out"
  else
    fail "kafka-mirrors --describe --mirror mmc: $out"
  fi
  mc_st produce "$S" mc-a a2 20 || { fail "write mc-a again"; return; }
  until_ok 60 "mc-a caught up after the reconnect" "${ME2E[@]}" caught-up "$KM" "$D" "$S" mmc 2 mc-a || return
}
