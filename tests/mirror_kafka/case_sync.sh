# shellcheck shell=bash
# case_sync.sh -- case sync of tests/mirror_kafka/run.sh (sourced by it; uses its helpers and
# variables: S, D, RF, PY, E2E, ME2E, KM, WORK, fail, step, until_ok, mirror_start).
#
# Topic-config and ACL sync from real Kafka (mirror mks, configs and ACLs every second):
# retention.ms, cleanup.policy and max.message.bytes set on the Kafka topic sa-orders
# (IncrementalAlterConfigs) appear as overrides of the destination's topic
# (DescribeConfigs), min.insync.replicas (excluded by default) does not; retention.ms deleted
# on Kafka is reset on the destination. ACL bindings created on Kafka (CreateAcls; Kafka's
# StandardAuthorizer, run.sh) appear on every destination broker (DescribeAcls), a binding
# outside acls.include never; a binding deleted on Kafka disappears. The bindings and their
# names are tests/mirror_e2e/sync-acls.py's table.

KS_T=sa-orders
case_sync() {
  local sc=("$PY" "$E2E/sync-configs.py") sa=("$PY" "$E2E/sync-acls.py") s1=${S%%,*} d1=${D%%,*}
  step "sync: $KS_T on Kafka, mirror mks (configs and ACLs every 1 s, acls.include TOPIC;sa-.* and GROUP;sa-group.*;READ)"
  "${ME2E[@]}" create-topics "$S" 1 "$RF" "$KS_T" || { fail "sync: create $KS_T"; return; }
  mirror_start mks "$KS_T" sync.topic.configs.interval.ms=1000 sync.acls.interval.ms=1000 \
    'acls.include=TOPIC;sa-.*,GROUP;sa-group.*;READ' sync.group.offsets.interval.ms=0 || return

  step "sync: topic configs set on Kafka appear on the destination"
  "${sc[@]}" alter "$s1" "$KS_T" retention.ms=7200000 cleanup.policy=compact,delete \
    max.message.bytes=1048000 min.insync.replicas=1 >"$WORK/ks-alter.out" 2>&1 ||
    { fail "sync: IncrementalAlterConfigs on Kafka:"; cat "$WORK/ks-alter.out"; return; }
  "${sc[@]}" expect "$s1" "$KS_T" retention.ms=7200000 cleanup.policy=compact,delete \
    max.message.bytes=1048000 >"$WORK/last" 2>&1 || { fail "sync: Kafka does not show its own overrides:"; cat "$WORK/last"; }
  until_ok 60 "retention.ms, cleanup.policy, max.message.bytes synced from Kafka" \
    "${sc[@]}" expect "$d1" "$KS_T" retention.ms=7200000 cleanup.policy=compact,delete \
    max.message.bytes=1048000 min.insync.replicas=~
  "${sc[@]}" alter "$s1" "$KS_T" retention.ms= >"$WORK/ks-alter.out" 2>&1 ||
    { fail "sync: delete retention.ms on Kafka:"; cat "$WORK/ks-alter.out"; }
  until_ok 60 "retention.ms deleted on Kafka is reset on the destination" \
    "${sc[@]}" expect "$d1" "$KS_T" retention.ms=~ max.message.bytes=1048000

  step "sync: ACL bindings created on Kafka appear on every destination broker, one outside acls.include never"
  "${sa[@]}" create "$s1" a-read g-read p-describe outside g-describe >"$WORK/ks-acl.out" 2>&1 ||
    { fail "sync: CreateAcls on Kafka:"; cat "$WORK/ks-acl.out"; return; }
  "${sa[@]}" expect "$s1" +a-read +g-read +p-describe +outside +g-describe >"$WORK/last" 2>&1 ||
    { fail "sync: Kafka does not describe its own bindings:"; cat "$WORK/last"; }
  until_ok 60 "a-read, g-read, p-describe synced from Kafka; outside, g-describe not" \
    "${sa[@]}" expect "$D" +a-read +g-read +p-describe -outside -g-describe
  "${sa[@]}" delete "$s1" a-read >"$WORK/ks-acl.out" 2>&1 || { fail "sync: DeleteAcls on Kafka:"; cat "$WORK/ks-acl.out"; }
  until_ok 60 "a-read deleted on Kafka disappears from the destination" \
    "${sa[@]}" expect "$D" -a-read +g-read +p-describe
  "${sa[@]}" cleanup "$s1" a-read g-read p-describe outside g-describe >/dev/null 2>&1
}
