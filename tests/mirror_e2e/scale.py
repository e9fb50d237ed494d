#!/usr/bin/env python3
"""scale.py SUBCOMMAND ... -- the client side of scenario scale of tests/mirror_e2e
(docs/testing-mirror.md "Scenario scale"). Runs with the clients venv.

  create SRC PREFIX NTOPICS PARTS          NTOPICS topics PREFIX000.. with PARTS partitions, RF 1
                                           (kafka-python admin, 100 a request), leaders awaited
  produce SRC PREFIX NTOPICS PARTS N [T..] N records to every partition (librdkafka, acks=1),
                                           or only to the topic-partitions T ("name:p") given
  scrape OUT URL...                        GET every URL (Prometheus text), save the samples of
                                           every URL as JSON {url: {series: value}} in OUT
  fetches-since BEFORE AFTER SRCN MIN      exit 0 when every source broker served MIN Fetch
                                           requests (any session kind) between the scrapes
  steady BEFORE AFTER SRCN DSTN MIRROR NPART BOUND
                                           the steady-state checks between two scrapes (see
                                           check_steady); SRCN/DSTN: the source/destination
                                           metric URLs, comma-separated

Exit 0 pass, 1 fail (every failure printed as FAIL: ...), 2 setup error.
"""
import json
import os
import re
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import me2e  # noqa: E402
from me2e import check, done  # noqa: E402


def names(prefix, ntopics):
    return ["%s%03d" % (prefix, i) for i in range(int(ntopics))]


def cmd_create(src, prefix, ntopics, parts):
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError
    topics = names(prefix, ntopics)
    adm = KafkaAdminClient(bootstrap_servers=src, request_timeout_ms=120000)
    try:
        for i in range(0, len(topics), 20):
            try:
                adm.create_topics([NewTopic(t, int(parts), 1) for t in topics[i:i + 20]],
                                  timeout_ms=120000)
            except TopicAlreadyExistsError:
                pass
    finally:
        adm.close()
    deadline = time.time() + 120
    while True:
        _, tops = me2e.metadata(src.split(",")[0], topics)
        missing = [t for t in topics if t not in tops or tops[t]["ec"] != 0 or
                   len(tops[t]["parts"]) != int(parts) or
                   any(p["leader"] < 0 for p in tops[t]["parts"].values())]
        if not missing:
            print("created %d topics x %s partitions, RF 1" % (len(topics), parts))
            return 0
        if time.time() > deadline:
            print("FAIL: %d topics without leaders after 120 s: %s" % (len(missing), missing[:5]))
            return 1
        time.sleep(0.5)  # poll interval of the deadline loop above


def cmd_produce(src, prefix, ntopics, parts, n, only=()):
    """librdkafka (confluent-kafka): kafka-python's producer looks up each new topic's metadata
    in turn, which for 500 topics took longer than the whole scenario should."""
    from confluent_kafka import Producer
    if only:
        tps = [(s.rsplit(":", 1)[0], int(s.rsplit(":", 1)[1])) for s in only]
    else:
        tps = [(t, p) for t in names(prefix, ntopics) for p in range(int(parts))]
    res = {"ok": 0, "bad": []}

    def done_cb(err, _msg):
        if err is None:
            res["ok"] += 1
        else:
            res["bad"].append(str(err))

    pr = Producer({"bootstrap.servers": src, "acks": 1, "linger.ms": 20,
                   "message.timeout.ms": 120000})
    total = 0
    for t, p in tps:
        for k in range(int(n)):
            pr.produce(t, value=b"%s-%d record %d" % (t.encode(), p, k), key=b"k%d" % k,
                       partition=p, on_delivery=done_cb)
            total += 1
            pr.poll(0)
    left = pr.flush(120)
    print("produced %d records to %d partitions (%d acknowledged, %d failed, %d not answered)%s"
          % (total, len(tps), res["ok"], len(res["bad"]), left,
             (": " + "; ".join(res["bad"][:3])) if res["bad"] else ""))
    return 0 if res["ok"] == total else 1


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$')


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def cmd_scrape(out, *urls):
    doc = {u: scrape(u) for u in urls}
    with open(out, "w") as f:
        json.dump(doc, f)
    return 0


def series(samples, name, **labels):
    """The samples of metric name whose labels include labels: {labels text: value}."""
    res = {}
    for k, v in samples.items():
        if k != name and not k.startswith(name + "{"):
            continue
        lab = dict(re.findall(r'(\w+)="([^"]*)"', k[len(name):]))
        if all(lab.get(a) == b for a, b in labels.items()):
            res[k[len(name):]] = v
    return res


def one(samples, name, **labels):
    s = series(samples, name, **labels)
    return sum(s.values()) if s else None


def check_steady(before_f, after_f, srcn, dstn, mirror, npart, bound):
    """Between two scrapes taken in steady state (every partition caught up, no new records):
    * every source broker holds one fetch session per mirror fetcher fetching from it (each
      destination broker runs one fetcher per source broker for the partitions it leads; RF 1
      on the source, so no follower sessions), and together they hold the NPART partitions;
    * no new full Fetch was accepted (kbroker_fetch_requests_total{kind="full"} unchanged) and
      incremental ones were (the broker accepts one only with the session's next epoch, so the
      epochs went up by exactly that many);
    * the mirror's fetchers (kmirror metrics on the destination): the same session id in both
      scrapes and a higher session epoch;
    * the average Fetch request between the scrapes (every kind) is under BOUND bytes, and BOUND
      is under 5 % of the smallest possible full request of the smallest session (a full Fetch
      v13+ lists every partition with at least Partition, CurrentLeaderEpoch, FetchOffset,
      LastFetchedEpoch, LogStartOffset, PartitionMaxBytes and a tag byte: 33 bytes)."""
    with open(before_f) as f:
        b = json.load(f)
    with open(after_f) as f:
        a = json.load(f)
    npart, bound = int(npart), float(bound)
    srcs, dsts = srcn.split(","), dstn.split(",")
    # the destination's fetchers, per source broker id (source URLs are nodes 1, 2, 3 in order)
    fetchers = {}
    for u in dsts:
        for lab in series(a[u], "kmirror_fetch_session_epoch", mirror=mirror):
            sb = dict(re.findall(r'(\w+)="([^"]*)"', lab)).get("source_broker")
            fetchers[sb] = fetchers.get(sb, 0) + 1
    cached, smallest = 0, None
    for i, u in enumerate(srcs):
        sb, sa = b[u], a[u]
        sess = one(sa, "kbroker_fetch_sessions")
        parts = one(sa, "kbroker_fetch_session_partitions") or 0
        want = fetchers.get(str(i + 1), 0)
        check(want > 0 and sess == want, "source broker %d: %s fetch sessions, one per mirror "
              "fetcher fetching from it (%d)" % (i + 1, sess, want))
        cached += parts
        if sess:
            smallest = parts / sess if smallest is None else min(smallest, parts / sess)
        cnt = {k: (one(sb, "kbroker_fetch_requests_total", kind=k),
                   one(sa, "kbroker_fetch_requests_total", kind=k))
               for k in ("full", "incremental", "sessionless", "session_error")}
        kinds = ("full", "incremental", "sessionless")
        byt = [(one(sb, "kbroker_fetch_request_bytes_total", kind=k),
                one(sa, "kbroker_fetch_request_bytes_total", kind=k)) for k in kinds]
        if None in [x for v in cnt.values() for x in v] or None in [x for v in byt for x in v]:
            check(False, "source broker %d: fetch session metrics missing: %s" % (i + 1, cnt))
            continue
        check(cnt["full"][1] == cnt["full"][0] and cnt["sessionless"][1] == cnt["sessionless"][0],
              "source broker %d: no new full or sessionless Fetch in steady state (full %d then "
              "%d)" % (i + 1, cnt["full"][0], cnt["full"][1]))
        check(cnt["session_error"][1] == cnt["session_error"][0],
              "source broker %d: no session errors in steady state (%d then %d)" % (
                  i + 1, cnt["session_error"][0], cnt["session_error"][1]))
        n = cnt["incremental"][1] - cnt["incremental"][0]
        check(n >= 10, "source broker %d: %d incremental Fetch requests accepted, each with its "
              "session's next epoch" % (i + 1, n))
        nall = sum(cnt[k][1] - cnt[k][0] for k in kinds)
        avg = sum(a_ - b_ for b_, a_ in byt) / nall if nall > 0 else float("inf")
        check(avg < bound, "source broker %d: %d Fetch requests of %.1f bytes on average "
              "(bound %d; %d partitions in its %s sessions)" % (i + 1, nall, avg, bound, parts,
                                                               sess))
    check(cached == npart, "the source brokers' sessions hold %d partitions, want %d" % (
        cached, npart))
    if smallest is not None:
        check(bound < 0.05 * 33 * smallest, "the bound %d bytes is under 5%% of a full request of "
              "the smallest session (%d partitions: at least %d bytes)" % (
                  bound, smallest, 33 * smallest))
    seen = 0
    for u in dsts:
        eb = series(b[u], "kmirror_fetch_session_epoch", mirror=mirror)
        ea = series(a[u], "kmirror_fetch_session_epoch", mirror=mirror)
        ib = series(b[u], "kmirror_fetch_session_id", mirror=mirror)
        ia = series(a[u], "kmirror_fetch_session_id", mirror=mirror)
        for lab, e in sorted(ea.items()):
            seen += 1
            check(ib.get(lab) is not None and ib.get(lab) == ia.get(lab) and ia.get(lab) != 0,
                  "%s %s: the same fetch session in both scrapes (id %s then %s)" % (
                      u, lab, ib.get(lab), ia.get(lab)))
            check(eb.get(lab) is not None and e > eb[lab] > 0,
                  "%s %s: the session epoch went up (%s then %s)" % (u, lab, eb.get(lab), e))
    check(seen == len(dsts) * len(srcs), "every destination broker runs one fetcher per source "
          "broker (%d fetchers report a session, want %d)" % (seen, len(dsts) * len(srcs)))
    done()


def cmd_fetches_since(before_f, after_f, srcn, want):
    """Exit 0 when every source broker served at least WANT consumer or follower Fetch requests
    (full, incremental or sessionless) between the two scrapes."""
    with open(before_f) as f:
        b = json.load(f)
    with open(after_f) as f:
        a = json.load(f)
    d = [(u, sum((one(a[u], "kbroker_fetch_requests_total", kind=k) or 0) -
                 (one(b[u], "kbroker_fetch_requests_total", kind=k) or 0)
                 for k in ("full", "incremental", "sessionless")))
         for u in srcn.split(",")]
    print("Fetch requests since the first scrape, per source broker: %s" % d)
    return 0 if all(x >= int(want) for _, x in d) else 1


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "create":
        sys.exit(cmd_create(*a))
    if cmd == "produce":
        sys.exit(cmd_produce(a[0], a[1], a[2], a[3], a[4], a[5:]))
    if cmd == "scrape":
        sys.exit(cmd_scrape(*a))
    if cmd == "fetches-since":
        sys.exit(cmd_fetches_since(*a))
    if cmd == "steady":
        check_steady(*a)
    print("unknown subcommand %s" % cmd)
    sys.exit(2)


if __name__ == "__main__":
    main()
