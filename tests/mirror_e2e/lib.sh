# shellcheck shell=bash
# lib.sh -- shell helpers shared by the mirror's end-to-end runners (tests/mirror_e2e/run.sh,
# tests/mirror_kafka/run.sh), sourced by them. The caller defines WORK (a scratch directory),
# fail() (report one failure), CL (tests/cluster/cluster.sh) for me2e_dst_start, KM
# (kafka-mirrors) and D (the destination's bootstrap list) for mirror_listed.

# until_ok SECONDS WHAT CMD... -- run CMD (output to $WORK/last) until it succeeds or the deadline
until_ok() {
  local secs=$1 what=$2 end
  shift 2
  end=$((SECONDS + secs))
  until "$@" >"$WORK/last" 2>&1; do
    if [ "$SECONDS" -ge "$end" ]; then
      fail "$what: not within ${secs}s; last output:"
      sed 's/^/  /' "$WORK/last" | tail -20
      return 1
    fi
    sleep 1 # poll interval of the condition
  done
  echo "ok: $what ($((SECONDS - end + secs))s)"
}

# me2e_dst_start NAME BUILD BASE_PORT [cluster.sh start option]... -- the mirror destination of
# the end-to-end suites: 3 kbroker brokers with kmirror.so and a controller-only node, RF 3,
# min.insync.replicas=2, an ACL authorizer that allows what no ACL covers (ACL sync), topic
# discovery every second. Extra options (e.g. --override k=v, --timeout S) are appended.
me2e_dst_start() {
  local name=$1 build=$2 port=$3
  shift 3
  "$CL" start --name "$name" --backend kbroker --build "$build" --base-port "$port" \
    --controllers separate --override "plugin.paths=$build/lib/kmirror.so" --override mirror.enable=true \
    --override default.replication.factor=3 --override min.insync.replicas=2 \
    --override authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer \
    --override allow.everyone.if.no.acl.found=true \
    --override mirror.metadata.refresh.interval.ms=1000 "$@"
}

# mirror_listed MIRROR [CLUSTER] -- every broker of CLUSTER (a bootstrap list; default $D, the
# destination) lists MIRROR ($KM: kafka-mirrors). A definition reaches the other brokers through
# the metadata log: a --start through a broker that has not applied it yet answers
# UNKNOWN_CLUSTER_MIRROR.
mirror_listed() {
  local b
  for b in $(tr , ' ' <<<"${2:-$D}"); do
    "$KM" --bootstrap-server "$b" --list | grep -q "^$1 " || { echo "$b does not list $1 yet"; return 1; }
  done
}
