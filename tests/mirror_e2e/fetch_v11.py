#!/usr/bin/env python3
"""fetch_v11.py SUBCOMMAND ... -- the client side of scenario fetch-v11 of tests/mirror_e2e
(docs/testing-mirror.md). Runs with the clients venv; Metadata through me2e.py.

  create BOOT TOPIC R1,R2 K=V...   one partition, replicas R1,R2 (R1 the leader), topic configs
                                   K=V; waits (60 s) for leader R1 and the full ISR
  part BOOT TOPIC                  print "leader L epoch E isr I,J" of partition 0 (exit 1: unknown)
  wait BOOT TOPIC LEADER ISR [S]   until partition 0 has that leader and ISR (comma list; "-" any
                                   leader) as some broker of BOOT says, within S seconds (60)

Exit 0 ok, 1 not (yet), 2 usage.
"""
import sys
import time

import me2e


def part0(boot, topic):
    """(leader, epoch, isr) of partition 0 from the first broker of boot that answers."""
    for addr in boot.split(","):
        try:
            _, tops = me2e.metadata(addr, [topic])
        except Exception:  # a killed broker: ask the next one
            continue
        t = tops.get(topic)
        if t is None or t["ec"] != 0 or 0 not in t["parts"]:
            continue
        p = t["parts"][0]
        return p["leader"], p["epoch"], sorted(p["isr"])
    return None


def cmd_create(boot, topic, replicas, *configs):
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError
    reps = [int(x) for x in replicas.split(",")]
    cfg = dict(kv.split("=", 1) for kv in configs)
    adm = KafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=30000)
    try:
        adm.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1,
                                    replica_assignments={0: reps}, topic_configs=cfg)],
                          timeout_ms=30000)
    except TopicAlreadyExistsError:
        pass
    finally:
        adm.close()
    return cmd_wait(boot, topic, str(reps[0]), ",".join(str(r) for r in sorted(reps)))


def cmd_part(boot, topic):
    p = part0(boot, topic)
    if p is None:
        print("no metadata for %s-0" % topic)
        return 1
    print("leader %d epoch %d isr %s" % (p[0], p[1], ",".join(str(x) for x in p[2])))
    return 0


def cmd_wait(boot, topic, leader, isr, secs="60"):
    want_isr = sorted(int(x) for x in isr.split(","))
    deadline = time.time() + float(secs)
    last = None
    while True:
        last = part0(boot, topic)
        if last is not None and (leader == "-" or last[0] == int(leader)) and last[2] == want_isr:
            print("%s-0: leader %d epoch %d isr %s" % (topic, last[0], last[1], last[2]))
            return 0
        if time.time() > deadline:
            print("%s-0: not leader %s with isr %s within %s s; last %s" % (
                topic, leader, want_isr, secs, last))
            return 1
        time.sleep(0.2)  # poll interval of the deadline loop above


def main(argv):
    cmds = {"create": cmd_create, "part": cmd_part, "wait": cmd_wait}
    if len(argv) < 2 or argv[1] not in cmds:
        print(__doc__)
        return 2
    return cmds[argv[1]](*argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
