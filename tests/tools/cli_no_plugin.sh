#!/usr/bin/env bash
# cli_no_plugin.sh KAFKA_MIRRORS KBROKER KMIRROR_SO -- kafka-mirrors' exit codes and messages
# when it cannot do its job (docs/cli.md "Exit codes"):
#   2  local errors, found before any connection (no cluster needed): usage, bad regex, bad
#      --mirror-config (a secret is never echoed), bad --command-config;
#   3  nothing listening at the bootstrap address;
#   3  a real kbroker without kmirror.so: every action names the API key the broker lacks and
#      says to load kmirror.so with mirror.enable=true; with a dead first bootstrap address the
#      live second one is used.
# Waits use read -t on the broker's stdout; no sleeps.
set -euo pipefail
KM=${1:?kafka-mirrors path}
KB=${2:?kbroker path}
W=$(mktemp -d "${TMPDIR:-/tmp}/kmc-noplugin.XXXXXX")
PID=
fails=0
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill -KILL "$PID" 2>/dev/null || true; fi
  if [ "$fails" -ne 0 ]; then echo "--- broker log (tail)"; tail -n 20 "$W/broker.log" 2>/dev/null || true; fi
  rm -rf "$W"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# run WANT_RC WANT_STDERR_SUBSTRING DESCRIPTION -- ARGS...
run() {
  local want_rc=$1 want_err=$2 what=$3 rc=0
  shift 4
  timeout 60 "$KM" "$@" >"$W/out" 2>"$W/err" || rc=$?
  if [ "$rc" != "$want_rc" ]; then
    fail "$what: exit $rc, want $want_rc"; sed 's/^/  stderr: /' "$W/err"; return
  fi
  if ! grep -qF -- "$want_err" "$W/err"; then
    fail "$what: stderr lacks '$want_err'"; sed 's/^/  stderr: /' "$W/err"; return
  fi
  echo "ok: $what"
}

# ---- 2: local errors, before connecting (the address is dead: a connection would give 3) ----
DEAD=127.0.0.1:1
run 2 "no action" "no arguments" --
run 2 "--add needs --topic" "missing --topic" -- --bootstrap-server $DEAD --add --mirror m
run 2 "--topic '(a': invalid regular expression at offset 2" "bad regex" -- \
  --bootstrap-server $DEAD --start --mirror m --topic '(a'
printf 'fetch.max.bytes=2097152\n' >"$W/nobootstrap.properties"
run 2 "bootstrap.servers: required but not set" "mirror config without bootstrap.servers" -- \
  --bootstrap-server $DEAD --create --mirror m --mirror-config "$W/nobootstrap.properties"
printf 'bootstrap.servers=src:9092\nsecurity.protocol=SASL_SSL\nsasl.username=u\nsasl.password=TopSecret42\n' \
  >"$W/sasl.properties"
run 2 "PLAINTEXT only for now" "SASL mirror config refused" -- \
  --bootstrap-server $DEAD --create --mirror m --mirror-config "$W/sasl.properties"
if grep -q TopSecret42 "$W/err" "$W/out"; then fail "a secret was printed"; fi
printf 'bootstrap.servers=src:9092\nssl.keystore.type=TopSecret42\n' >"$W/badenum.properties"
run 2 "line 2: ssl.keystore.type" "bad value named by key and line" -- \
  --bootstrap-server $DEAD --create --mirror m --mirror-config "$W/badenum.properties"
printf 'bootstrap.servers=src:9092\n' >"$W/ok.properties"
run 2 "invalid mirror name" "reserved suffix" -- \
  --bootstrap-server $DEAD --create --mirror m.paused --mirror-config "$W/ok.properties"
run 2 "cannot open" "missing mirror config file" -- \
  --bootstrap-server $DEAD --create --mirror m --mirror-config "$W/none.properties"
printf 'security.protocol=SSL\n' >"$W/ssl-client.properties"
run 2 "kafka-mirrors speaks PLAINTEXT only" "SSL command config refused" -- \
  --bootstrap-server $DEAD --list --command-config "$W/ssl-client.properties"
run 2 "is not host:port" "malformed bootstrap list" -- --bootstrap-server nohostport --list

# ---- 3: nothing listening ------------------------------------------------------------------
run 3 "cannot reach the cluster at $DEAD" "unreachable bootstrap" -- \
  --bootstrap-server $DEAD --list --timeout-ms 1500
grep -qF "Connection refused" "$W/err" || fail "unreachable: the reason is not shown"

# ---- 3: a real kbroker without the plugin --------------------------------------------------
cat >"$W/server.properties" <<EOF
node.id=1
listeners=PLAINTEXT://127.0.0.1:0
log.dirs=$W/data
EOF
mkfifo "$W/ready"
"$KB" --config "$W/server.properties" >"$W/ready" 2>>"$W/broker.log" &
PID=$!
exec 9<"$W/ready"
if ! read -r -t 60 line <&9; then fail "kbroker did not start"; exit 1; fi
exec 9<&-
BOOT=$(echo "$line" | grep -o '127\.0\.0\.1:[0-9]*' | head -1)
[ -n "$BOOT" ] || { fail "no port in '$line'"; exit 1; }

lacks() { # KEY NAME ACTION-ARGS...
  local key=$1 name=$2
  shift 2
  run 3 "the broker at $BOOT does not support the mirror APIs (its ApiVersions lacks key $key, $name): load kmirror.so on every broker with mirror.enable=true" \
    "$* -> lacks $key" -- --bootstrap-server "$BOOT" "$@"
}
lacks 98 ListMirrors --list
lacks 99 DescribeMirrors --describe
lacks 99 DescribeMirrors --describe --mirror m --json
lacks 97 CreateMirror --create --mirror m --mirror-config "$W/ok.properties"
lacks 95 StartMirrorTopics --start --mirror m --topic 'orders.*'
lacks 104 DeleteMirror --delete --mirror m
# stop/pause/resume/recover resolve --topic with DescribeMirrors first.
lacks 99 DescribeMirrors --stop --mirror m --topic '.*'
lacks 99 DescribeMirrors --pause --mirror m --topic '.*'
lacks 99 DescribeMirrors --recover --mirror m --topic '.*'
# A dead first address: the second, live one answers.
run 3 "the broker at $BOOT does not support the mirror APIs (its ApiVersions lacks key 98" \
  "dead first bootstrap, live second" -- --bootstrap-server "$DEAD,$BOOT" --list
[ -s "$W/out" ] && fail "output on stdout when failing: $(cat "$W/out")"
# The seed's spelling ":PORT" means this host.
run 3 "the broker at localhost:${BOOT#*:} does not support the mirror APIs" "bootstrap :PORT" -- \
  --bootstrap-server ":${BOOT#*:}" --list

kill -TERM "$PID"
wait "$PID" || true
PID=
if [ "$fails" -ne 0 ]; then echo "$fails check(s) failed"; exit 1; fi
echo "all ok"
