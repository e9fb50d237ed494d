#!/usr/bin/env bash
# cli_fake.sh KAFKA_MIRRORS KMC_FAKEBROKER -- kafka-mirrors against a scripted broker
# (kmc_fakebroker.c, whose model is described there): for every action the request as sent
# (from the broker's request log), the exact stdout (goldens written by hand from the model),
# the exit code and the hints; the NOT_CONTROLLER retry. The steps share one model, in order.
set -euo pipefail
KM=${1:?kafka-mirrors path}
FB=${2:?kmc_fakebroker path}
W=$(mktemp -d "${TMPDIR:-/tmp}/kmc-fake.XXXXXX")
PIDS=()
fails=0
cleanup() {
  for p in "${PIDS[@]}"; do { kill -KILL "$p" && wait "$p"; } 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# start_fb LOG [ARGS...] -- sets BOOT
start_fb() {
  local log=$1 line
  shift
  mkfifo "$W/ready"
  "$FB" --log "$log" "$@" >"$W/ready" &
  PIDS+=($!)
  exec 9<"$W/ready"
  read -r -t 30 line <&9 || { fail "fake broker did not start"; exit 1; }
  exec 9<&-
  rm -f "$W/ready"
  BOOT=127.0.0.1:${line#PORT }
}

# km WANT_RC DESCRIPTION ARGS... -- runs kafka-mirrors; stdout in $W/out, stderr in $W/err
km() {
  local want=$1 what=$2 rc=0
  shift 2
  : >"$W/log.mark"
  cp "$LOG" "$W/log.before"
  timeout 60 "$KM" --bootstrap-server "$BOOT" "$@" >"$W/out" 2>"$W/err" || rc=$?
  # The requests this run sent.
  tail -n +$(($(wc -l <"$W/log.before") + 1)) "$LOG" >"$W/sent"
  if [ "$rc" != "$want" ]; then
    fail "$what: exit $rc, want $want"
    sed 's/^/  stdout: /' "$W/out"
    sed 's/^/  stderr: /' "$W/err"
  else
    echo "ok: $what (exit $rc)"
  fi
}
stdout_is() { # GOLDEN (from stdin)
  cat >"$W/golden"
  if ! diff -u "$W/golden" "$W/out" >"$W/diff"; then
    fail "$1: stdout differs from the golden"
    cat "$W/diff"
  fi
}
stderr_has() {
  grep -qF -- "$2" "$W/err" || { fail "$1: stderr lacks '$2'"; sed 's/^/  stderr: /' "$W/err"; }
}
sent_has() {
  grep -qF -- "$2" "$W/sent" || { fail "$1: no request with '$2'"; sed 's/^/  sent: /' "$W/sent"; }
}
sent_count() { # WHAT API N
  local n
  n=$(grep -c "^$2 " "$W/sent" || true)
  [ "$n" = "$3" ] || fail "$1: $n $2 sent, want $3"
}

LOG=$W/requests.log
start_fb "$LOG"

# ---- list and describe ---------------------------------------------------------------------
km 0 "list" --list
stdout_is "list" <<'EOF'
MIRROR  TOPICS  SOURCE-CLUSTER-ID  SOURCE-BOOTSTRAP-SERVERS
m1      3       SRC-CLUSTER        src-a:9092,src-b:9092
m2      0       -                  other:9092
EOF
sent_has "list" 'ListMirrorsRequest {}'

km 0 "list --json" --list --json
stdout_is "list --json" <<'EOF'
{"mirrors":[{"mirror":"m1","topicCount":3,"sourceClusterId":"SRC-CLUSTER","sourceBootstrap":"src-a:9092,src-b:9092"},{"mirror":"m2","topicCount":0,"sourceClusterId":null,"sourceBootstrap":"other:9092"}]}
EOF

km 0 "describe (all mirrors; rows sorted although the broker sends them reversed)" --describe
stdout_is "describe" <<'EOF'
MIRROR  TOPIC     PARTITION  STATE      SOURCE-OFFSET  DEST-OFFSET  LAG  LAST-EPOCH  LAST-OFFSET  ERROR
m1      audit     0          PAUSED     40             40           0    -           -            -
m1      orders    0          MIRRORING  1500           1450         50   -           -            -
m1      orders    1          MIRRORING  800            800          0    -           -            -
m1      orders    2          FAILED     10             10           0    -           -            [retry 3] source leader src-b:9092 unreachable
m1      payments  0          FAILED     -              5            -    -           -            [not retryable] source topic deleted
m2      -         -          -          -              -            -    -           -            -
EOF
sent_has "describe" '"MirrorNames":null'

km 0 "describe --failed with a topic filter" --describe --mirror m1 --topic 'ord.*' --failed
stdout_is "describe --failed" <<'EOF'
MIRROR  TOPIC   PARTITION  STATE   SOURCE-OFFSET  DEST-OFFSET  LAG  LAST-EPOCH  LAST-OFFSET  ERROR
m1      orders  2          FAILED  10             10           0    -           -            [retry 3] source leader src-b:9092 unreachable
EOF
sent_has "describe one" '"MirrorNames":["m1"]'

km 1 "describe an unknown mirror" --describe --mirror nope
stdout_is "describe unknown" </dev/null
stderr_has "describe unknown" "mirror nope: UNKNOWN_CLUSTER_MIRROR: no mirror named nope"
stderr_has "describe unknown" "hint: mirror nope not found: list mirrors with --list"

# ---- create --------------------------------------------------------------------------------
printf 'bootstrap.servers=src-a:9092\n' >"$W/m1.properties"
km 1 "create an existing mirror" --create --mirror m1 --mirror-config "$W/m1.properties"
stderr_has "create existing" "CreateMirror failed: CLUSTER_MIRROR_ALREADY_EXISTS: mirror m1 already exists"
stderr_has "create existing" "hint: mirror m1 already exists: look at it with --describe --mirror m1"

printf '# source three\nbootstrap.servers = src3:9092\nmirror.topics.include=x.*\nsasl.password=Hunter2Secret\n' \
  >"$W/m3.properties"
km 0 "create" --create --mirror m3 --mirror-config "$W/m3.properties"
stdout_is "create" <<EOF
Created mirror m3 (source bootstrap.servers=src3:9092).
Next: kafka-mirrors --bootstrap-server $BOOT --start --mirror m3 --topic 'REGEX'
EOF
# Canonical key names; the secret goes to the broker (it needs it) but is never printed.
sent_has "create" 'CreateMirrorRequest {"MirrorName":"m3","Config":[{"Name":"bootstrap.servers","Value":"src3:9092"},{"Name":"topics.include","Value":"x.*"},{"Name":"sasl.password","Value":"Hunter2Secret"}]}'
if grep -q Hunter2Secret "$W/out" "$W/err"; then fail "create: the secret was printed"; fi

km 0 "create --json" --create --mirror m4 --mirror-config "$W/m1.properties" --json
stdout_is "create --json" <<'EOF'
{"action":"create","mirror":"m4","errorCode":0,"errorName":null,"errorMessage":null,"topics":[]}
EOF

# ---- start ---------------------------------------------------------------------------------
km 0 "start with an exclude" --start --mirror m2 --topic 'clicks.*' --exclude 'clicks-eu'
stdout_is "start" <<'EOF'
TOPIC   RESULT
clicks  OK
Follow their progress with --describe --mirror m2.
EOF
# The broker resolves the patterns against the source: no explicit topics are sent.
sent_has "start" 'StartMirrorTopicsRequest {"MirrorName":"m2","Topics":[],"IncludePatterns":["clicks.*"],"ExcludePatterns":["clicks-eu"],"TimeoutMs":30000}'

km 1 "add (seed spelling) of topics already mirrored" --add --mirror m2 --topic 'orders|audit'
stdout_is "add already mirrored" <<'EOF'
TOPIC   RESULT
orders  TOPIC_ALREADY_IN_CLUSTER_MIRROR: topic orders is already mirrored
audit   TOPIC_ALREADY_IN_CLUSTER_MIRROR: topic audit is already mirrored
EOF
stderr_has "add already mirrored" "hint: TOPIC_ALREADY_IN_CLUSTER_MIRROR: the topic already belongs to a mirror"

km 0 "start matching nothing yet" --start --mirror m2 --topic 'later.*' --timeout-ms 4000
stdout_is "start nothing" <<'EOF'
No topic of the source of mirror m2 matches the pattern now; nothing was started (the pattern is kept in the mirror's topics.include).
EOF
sent_has "start nothing" '"IncludePatterns":["later.*"],"ExcludePatterns":[],"TimeoutMs":4000}'

km 1 "start on an unknown mirror" --start --mirror nope --topic x
stderr_has "start unknown" "StartMirrorTopics failed: UNKNOWN_CLUSTER_MIRROR: no mirror named nope"
stderr_has "start unknown" "hint: mirror nope not found: list mirrors with --list"
km 1 "pause on an unknown mirror" --pause --mirror nope --topic x
stderr_has "pause unknown" "mirror nope: UNKNOWN_CLUSTER_MIRROR: no mirror named nope"
stderr_has "pause unknown" "hint: mirror nope not found: list mirrors with --list"

# ---- pause / resume / recover --------------------------------------------------------------
km 0 "pause" --pause --mirror m1 --topic orders
stdout_is "pause" <<'EOF'
TOPIC   RESULT
orders  OK
EOF
sent_has "pause" 'PauseMirrorTopicsRequest {"MirrorName":"m1","Topics":[{"TopicName":"orders"}],"StateOffset":-1}'

km 1 "pause an already paused topic" --pause --mirror m1 --topic 'aud.*' --json
stdout_is "pause paused --json" <<'EOF'
{"action":"pause","mirror":"m1","errorCode":0,"errorName":null,"errorMessage":null,"topics":[{"topic":"audit","errorCode":140,"errorName":"MIRROR_TOPIC_ALREADY_PAUSED","errorMessage":"topic audit is already paused"}]}
EOF

km 1 "pause matching no topic of the mirror" --pause --mirror m1 --topic 'nomatch'
stderr_has "pause nomatch" "no topic of mirror m1 matches 'nomatch': see its topics with --describe --mirror m1"
sent_count "pause nomatch" PauseMirrorTopicsRequest 0

km 0 "resume" --resume --mirror m1 --topic audit
stdout_is "resume" <<'EOF'
TOPIC  RESULT
audit  OK
EOF

km 0 "recover: only topics with a FAILED partition, through ResumeMirrorTopics" \
  --recover --mirror m1 --topic '.*'
stdout_is "recover" <<'EOF'
TOPIC     RESULT
orders    OK
payments  OK
EOF
sent_has "recover" 'ResumeMirrorTopicsRequest {"MirrorName":"m1","Topics":[{"TopicName":"orders"},{"TopicName":"payments"}],"StateOffset":-1}'

km 0 "recover with nothing FAILED" --recover --mirror m1 --topic '.*'
stdout_is "recover nothing" <<'EOF'
Nothing to recover: no topic of mirror m1 matching the pattern has a FAILED partition.
EOF
sent_count "recover nothing" ResumeMirrorTopicsRequest 0

km 0 "describe after recover" --describe --mirror m1
stdout_is "describe after recover" <<'EOF'
MIRROR  TOPIC     PARTITION  STATE      SOURCE-OFFSET  DEST-OFFSET  LAG  LAST-EPOCH  LAST-OFFSET  ERROR
m1      audit     0          MIRRORING  40             40           0    -           -            -
m1      orders    0          MIRRORING  1500           1450         50   -           -            -
m1      orders    1          MIRRORING  800            800          0    -           -            -
m1      orders    2          PREPARING  10             10           0    -           -            -
m1      payments  0          PREPARING  -              5            -    -           -            -
EOF

# ---- delete refused, stop, delete ------------------------------------------------------------
km 1 "delete a mirror with running topics" --delete --mirror m1
stderr_has "delete busy" "DeleteMirror failed: CLUSTER_MIRROR_NOT_EMPTY: mirror m1 has 5 partitions that are not STOPPED"
stderr_has "delete busy" "hint: a mirror can be deleted only when every topic is STOPPED: run --stop --mirror m1 --topic '.*'"

km 0 "stop (remove) every topic" --remove --mirror m1 --topic '.*'
stdout_is "stop" <<'EOF'
TOPIC     RESULT
audit     OK
orders    OK
payments  OK
The topics become writable once every partition is STOPPED: watch with --describe --mirror m1.
EOF
sent_has "stop" 'StopMirrorTopicsRequest {"MirrorName":"m1","Topics":[{"TopicName":"audit"},{"TopicName":"orders"},{"TopicName":"payments"}],"Patterns":[".*"],"StateOffset":-1}'

km 0 "describe --json after stop" --describe --mirror m1 --topic payments --json
stdout_is "describe --json stopped" <<'EOF'
{"mirrors":[{"mirror":"m1","sourceBootstrap":"src-a:9092,src-b:9092","sourceClusterId":"SRC-CLUSTER","errorCode":0,"errorName":null,"errorMessage":null,"partitions":[{"topic":"payments","partition":0,"state":"STOPPED","sourceOffset":null,"destinationOffset":5,"lag":null,"lastMirroredEpoch":7,"lastMirroredOffset":5,"retryAttempt":0,"retryable":true,"errorMessage":null}],"sync":[]}],"warning":null}
EOF

km 0 "stop with no matching topic: the patterns are still sent" --stop --mirror m2 --topic 'zzz'
stdout_is "stop nothing" <<'EOF'
No topic of mirror m2 matches the pattern; nothing was stopped (the pattern moved to the mirror's topics.exclude).
EOF
sent_has "stop nothing" 'StopMirrorTopicsRequest {"MirrorName":"m2","Topics":[],"Patterns":["zzz"],"StateOffset":-1}'

km 0 "delete" --delete --mirror m1
stdout_is "delete" <<'EOF'
Deleted mirror m1.
EOF
sent_has "delete" 'DeleteMirrorRequest {"MirrorName":"m1","StateOffset":-1}'

km 1 "delete again --json" --delete --mirror m1 --json
stdout_is "delete again --json" <<'EOF'
{"action":"delete","mirror":"m1","errorCode":137,"errorName":"UNKNOWN_CLUSTER_MIRROR","errorMessage":"no mirror named m1","topics":[]}
EOF

km 0 "list after delete" --list
stdout_is "list after" <<'EOF'
MIRROR  TOPICS  SOURCE-CLUSTER-ID  SOURCE-BOOTSTRAP-SERVERS
m2      1       -                  other:9092
m3      0       -                  src3:9092
m4      0       -                  src-a:9092
EOF

# ---- NOT_CONTROLLER: retried while the timeout allows ----------------------------------------
LOG=$W/requests2.log
start_fb "$LOG" --not-controller 2
km 0 "delete retried through two NOT_CONTROLLER answers" --delete --mirror m2
sent_count "retry" DeleteMirrorRequest 3
LOG=$W/requests3.log
start_fb "$LOG" --not-controller 1000
km 1 "NOT_CONTROLLER until the timeout" --pause --mirror m1 --topic orders --timeout-ms 1500
stderr_has "not controller" "PauseMirrorTopics failed: NOT_CONTROLLER"
stderr_has "not controller" "hint: a transient condition of the cluster"

# ---- an incomplete DescribeMirrors (a broker of the cluster did not answer the fan-out) -------
LOG=$W/requests4.log
start_fb "$LOG" --partial $'partial answer: broker 3 could not be asked\e[2J'

km 1 "describe, incomplete answer: the table, a warning, exit 1" --describe --mirror m2
stdout_is "describe partial" <<'EOF'
MIRROR  TOPIC  PARTITION  STATE  SOURCE-OFFSET  DEST-OFFSET  LAG  LAST-EPOCH  LAST-OFFSET  ERROR
m2      -      -          -      -              -            -    -           -            -
EOF
stderr_has "describe partial" "warning: the answer is incomplete: partial answer: broker 3 could not be asked?[2J"
grep -q $'\e' "$W/err" && fail "describe partial: an escape character from the broker reached the terminal"
km 1 "pause on an incomplete topic list: nothing sent" --pause --mirror m1 --topic '.*'
stderr_has "pause partial" "the topics matching --topic may be incomplete; nothing was sent"
sent_count "pause partial" PauseMirrorTopicsRequest 0

# ---- an answer that cannot be decoded: exit 4 -------------------------------------------------
LOG=$W/requests7.log
start_fb "$LOG" --garbage
km 4 "describe, truncated answer" --describe
stderr_has "garbage" "sent a DescribeMirrorsResponse v0 that cannot be decoded"
km 4 "stop resolving topics from a truncated answer: nothing sent" --stop --mirror m1 --topic '.*'
sent_count "garbage stop" StopMirrorTopicsRequest 0

# ---- the connection is lost after the broker applied a change: exit 3, "may have been applied" --
LOG=$W/requests8.log
start_fb "$LOG" --hangup
km 3 "stop, connection lost before the answer" --stop --mirror m1 --topic orders
stderr_has "hangup" "StopMirrorTopics to the broker at $BOOT failed: connection failed or lost before the response arrived"
stderr_has "hangup" "The request may have been applied all the same: check with --describe or --list before sending it again"
km 0 "describe after the lost answer: the stop was applied" --describe --mirror m1 --topic orders \
  --json
grep -q '"state":"MIRRORING"' "$W/out" && fail "hangup: the stop was not applied"
grep -q '"state":"STOPPED"' "$W/out" || fail "hangup: no STOPPED partition"

# ---- --wait: polls DescribeMirrors until the final state (transitions take 2 polls here) ------
LOG=$W/requests5.log
start_fb "$LOG" --slow 2
km 0 "stop --wait: until every partition is STOPPED" --stop --mirror m1 --topic orders --wait
stdout_is "stop --wait" <<'EOF'
TOPIC   RESULT
orders  OK
Waiting up to 30000 ms for every partition of 1 topic to be STOPPED.
MIRROR  TOPIC   PARTITION  STATE    SOURCE-OFFSET  DEST-OFFSET  LAG  LAST-EPOCH  LAST-OFFSET  ERROR
m1      orders  0          STOPPED  1500           1450         50   7           1450         -
m1      orders  1          STOPPED  800            800          0    7           800          -
m1      orders  2          STOPPED  10             10           0    7           10           -
All 3 partitions are STOPPED.
EOF
sent_count "stop --wait" DescribeMirrorsRequest 3 # resolve, then two polls
km 1 "stop --wait: a partition turns FAILED for good" --stop --mirror m1 --topic payments --wait
stdout_is "stop --wait failed" <<'EOF'
TOPIC     RESULT
payments  OK
Waiting up to 30000 ms for every partition of 1 topic to be STOPPED.
MIRROR  TOPIC     PARTITION  STATE   SOURCE-OFFSET  DEST-OFFSET  LAG  LAST-EPOCH  LAST-OFFSET  ERROR
m1      payments  0          FAILED  -              5            -    7           5            [not retryable] cannot write the PID reset
EOF
stderr_has "stop --wait failed" "a partition of topic payments is FAILED and will not be retried"
stderr_has "stop --wait failed" "hint: fix the cause, then --recover --mirror m1 --topic 'payments'"
km 0 "start --wait: until the new topic's partitions are MIRRORING" \
  --start --mirror m2 --topic clicks --wait --json
stdout_is "start --wait --json" <<'EOF'
{"action":"start","mirror":"m2","errorCode":0,"errorName":null,"errorMessage":null,"topics":[{"topic":"clicks","errorCode":0,"errorName":null,"errorMessage":null}]}
EOF
km 0 "describe after start --wait" --describe --mirror m2
stdout_is "describe after start --wait" <<'EOF'
MIRROR  TOPIC   PARTITION  STATE      SOURCE-OFFSET  DEST-OFFSET  LAG  LAST-EPOCH  LAST-OFFSET  ERROR
m2      clicks  0          MIRRORING  -              0            -    -           -            -
m2      clicks  1          MIRRORING  -              0            -    -           -            -
EOF
LOG=$W/requests6.log
start_fb "$LOG" --slow 1000
km 1 "pause --wait: not done within --timeout-ms" --pause --mirror m1 --topic orders --wait \
  --timeout-ms 1500
stderr_has "pause --wait timeout" "0 of 3 partitions are PAUSED after 1500 ms; the change goes on in the broker: follow it with --describe --mirror m1"

if [ "$fails" -ne 0 ]; then echo "$fails check(s) failed"; exit 1; fi
echo "all ok"
