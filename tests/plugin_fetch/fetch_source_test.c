/*
 * fetch_source_test.c - the MirrorFetcherManager against a real source: build/bin/kbroker as the
 * source cluster, real producers (kcat with every codec; with --python, a transactional
 * confluent-kafka producer committing one transaction and aborting another), the manager
 * fetching into tests/fakehost partitions.
 *
 *   km_fetch_source --kbroker PATH [--python PATH]
 *
 * Checks: the destination logs are byte for byte the source's batches (fetched from the source
 * with an independent Fetch: same base offsets, CRCs, epochs, producer ids, control batches);
 * every codec's batch arrives compressed as produced; after catch-up the session carries only
 * changed partitions (counters: no full fetch, exactly one partition listed for one new
 * batch); kill -9 of the source and a restart on the same port: TRANSIENT, then the fetcher
 * recovers by itself and mirrors what was produced after the restart.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/km_config.h"
#include "core/km_plugin.h"
#include "core/km_plugin_types.h"
#include "fakehost.h"
#include "fetch/km_fetch.h"
#include "fh_cunit.h"
#include "kc_client.h"
#include "kp_arena.h"
#include "kp_batch.h"
#include "kp_msgs.h"
#include "kp_reader.h"

#define WAIT_MS 30000
#define NPART   3
#define TOPIC   "mt"

static const kbx_uuid_t DST_ID = {{0xd5, 7, 7, 7, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};

static const char *kbroker_bin, *python_bin;
static int16_t fetch_max; /* --fetch-max N: the fetcher capped at Fetch vN (test hook) */
static char dir[] = "/tmp/km_fetch_src_XXXXXX";
static pid_t src_pid = -1;
static int src_port;
static char bootstrap[64];

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the source process -------------------------------------------------------------------- */

static pid_t spawn_kbroker(int port, int *out_port)
{
    char cfg[600], logp[600], buf[8192];
    const char *needle = "listeners=PLAINTEXT://127.0.0.1:";
    int p[2];
    size_t got = 0;
    int64_t dl;
    pid_t pid;
    FILE *f;

    snprintf(cfg, sizeof(cfg), "%s/server.properties", dir);
    snprintf(logp, sizeof(logp), "%s/kbroker.log", dir);
    f = fopen(cfg, "w");
    if (f == NULL)
        return -1;
    fprintf(f,
            "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:%d\nlog.dirs=%s/logs\nnum.partitions=%d\n"
            "auto.create.topics.enable=true\n",
            port, dir, NPART);
    fclose(f);
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        int lfd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        dup2(lfd, 2);
        execl(kbroker_bin, kbroker_bin, "--config", cfg, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    dl = now_ms() + WAIT_MS;
    *out_port = -1;
    while (now_ms() < dl && got < sizeof(buf) - 1) {
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        ssize_t n;
        char *s;
        if (poll(&pf, 1, 100) <= 0)
            continue;
        n = read(p[0], buf + got, sizeof(buf) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        if ((s = strstr(buf, needle)) != NULL && strchr(s, '\n') != NULL) {
            *out_port = atoi(s + strlen(needle));
            break;
        }
    }
    close(p[0]);
    return pid;
}

static int run(const char *cmd)
{
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "\n    command failed (%d): %s\n", rc, cmd);
    return rc;
}

/* kcat: n records to partition p with codec (none, gzip, snappy, lz4, zstd). */
static int kcat_produce(int p, const char *codec, int n, const char *tag)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "for i in $(seq 1 %d); do echo \"%s-$i key-$i\"; done | kcat -P -q -b %s -t %s -p %d "
             "-z %s -K ' ' -X linger.ms=50 -X batch.num.messages=10000",
             n, tag, bootstrap, TOPIC, p, codec);
    return run(cmd);
}

/* ---- reading the source independently -------------------------------------------------- */

typedef struct fres {
    int done, err;
    int16_t ver;
    uint8_t *body;
    size_t len;
} fres_t;

static void on_resp(kc_client_t *c, int err, int16_t ver, const uint8_t *body, size_t len,
                    void *opaque)
{
    fres_t *r = opaque;
    (void)c;
    r->done = 1;
    r->err = err;
    r->ver = ver;
    r->len = len;
    r->body = NULL;
    if (len > 0) {
        r->body = malloc(len);
        memcpy(r->body, body, len);
    }
}

/* The source partition's whole log as complete batches, with its high watermark. */
static uint8_t *source_log_at(const char *bs, const char *topic, int32_t part, size_t *out_len,
                              int64_t *hw)
{
    kc_opts_t o;
    char err[128];
    kc_client_t *c;
    uint8_t *out = NULL;
    size_t len = 0;
    int64_t off = 0;

    kc_opts_init(&o);
    o.client_id = "km-fetch-check";
    c = kc_client_new(&o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_FATAL(kc_client_add_bootstrap(c, bs) == 0);
    *hw = -1;
    for (int round = 0; round < 1000; round++) {
        kp_FetchRequest_t rq;
        kp_FetchRequest_FetchTopic_t t;
        kp_FetchRequest_FetchPartition_t p;
        kp_FetchResponse_t resp;
        kp_arena_t ar;
        kp_reader_t rd;
        fres_t r = {0};
        int64_t dl = now_ms() + WAIT_MS;
        const kp_FetchResponse_PartitionData_t *pd;
        kp_chunk_info_t ci;

        kp_FetchRequest_init(&rq);
        kp_FetchRequest_FetchTopic_init(&t);
        kp_FetchRequest_FetchPartition_init(&p);
        rq.ReplicaId = -1;
        rq.MaxWaitMs = 0;
        rq.MinBytes = 1;
        rq.MaxBytes = 1 << 20;
        rq.SessionEpoch = -1;
        t.Topic = kp_str(topic);
        p.Partition = part;
        p.FetchOffset = off;
        p.PartitionMaxBytes = 1 << 20;
        t.Partitions.v = &p;
        t.Partitions.cnt = 1;
        rq.Topics.v = &t;
        rq.Topics.cnt = 1;
        /* v12: by name, no topic id needed */
        CU_ASSERT_FATAL(kc_request_msg(c, KC_NODE_ANY, &kp_FetchRequest_desc, 12, &rq, WAIT_MS, 0,
                                       on_resp, &r) > 0);
        while (!r.done && now_ms() < dl)
            kc_client_poll(c, 50);
        CU_ASSERT_FATAL(r.done && r.err == KC_E_OK);
        kp_arena_init(&ar, 0);
        kp_FetchResponse_init(&resp);
        kp_reader_init(&rd, r.body, r.len);
        CU_ASSERT_FATAL(kp_FetchResponse_decode(&rd, &ar, &resp, r.ver) == 0);
        CU_ASSERT_FATAL(resp.Responses.cnt == 1 && resp.Responses.v[0].Partitions.cnt == 1);
        pd = &resp.Responses.v[0].Partitions.v[0];
        CU_ASSERT_FATAL(pd->ErrorCode == 0);
        *hw = pd->HighWatermark;
        if (pd->Records.len <= 0) {
            kp_arena_free(&ar);
            free(r.body);
            break;
        }
        CU_ASSERT_FATAL(kp_batch_chunk_check(pd->Records.ptr, (size_t)pd->Records.len, 0, 0, &ci) ==
                        0);
        out = realloc(out, len + ci.valid_bytes);
        memcpy(out + len, pd->Records.ptr, ci.valid_bytes);
        len += ci.valid_bytes;
        off = ci.next_offset;
        kp_arena_free(&ar);
        free(r.body);
        if (off >= *hw)
            break;
    }
    kc_client_destroy(c);
    *out_len = len;
    return out;
}

static uint8_t *source_log(int32_t part, size_t *out_len, int64_t *hw)
{
    return source_log_at(bootstrap, TOPIC, part, out_len, hw);
}

/* ---- the destination ----------------------------------------------------------------------- */

typedef struct tc {
    fakehost_t *fh;
    km_plugin_t *cm;
    km_fetch_mgr_t *fm;
    km_mirror_config_t mc;
    km_fetch_part_t *fp[NPART];
    int nev[8];
} tc_t;

static tc_t T;

static void on_event(km_plugin_t *cm, void *opaque, const km_fetch_event_t *ev)
{
    (void)cm;
    (void)opaque;
    if (ev->type > 0 && ev->type < 8)
        T.nev[ev->type]++;
    if (ev->type == KM_FETCH_EV_FATAL || ev->type == KM_FETCH_EV_DIVERGED ||
        ev->type == KM_FETCH_EV_EPOCH_EXCEEDED || ev->type == KM_FETCH_EV_FENCED)
        fprintf(stderr, "\n    unexpected %s: %s\n", km_fetch_event_name(ev->type), ev->message);
}

static int64_t dst_leo(int32_t p)
{
    kbx_log_offsets_t lo = {.struct_size = sizeof(lo)};
    size_t len;
    fakehost_partition_log(T.fh, &DST_ID, p, &len, &lo);
    return lo.log_end_offset;
}

static bool step_until(bool (*cond)(void), int64_t ms)
{
    int64_t end = now_ms() + ms;
    while (!cond()) {
        if (now_ms() > end)
            return false;
        fakehost_advance_ms(T.fh, 1);
    }
    return true;
}

static int64_t WANT[NPART];
static bool c_caught_up(void)
{
    for (int p = 0; p < NPART; p++)
        if (dst_leo(p) < WANT[p])
            return false;
    return true;
}
static bool c_two_incremental(void)
{
    km_fetch_counters_t c;
    km_fetch_counters(T.fm, &c);
    return c.incremental_fetches >= 2;
}
static bool c_transient(void)
{
    return T.nev[KM_FETCH_EV_TRANSIENT] > 0;
}

/* Compare every destination partition with the source, byte for byte; returns the codecs seen
 * (bit per codec id) and counts control/transactional batches. */
static unsigned compare_all(int *ctrl, int *txn)
{
    unsigned codecs = 0;

    *ctrl = *txn = 0;
    for (int p = 0; p < NPART; p++) {
        size_t slen, dlen;
        int64_t hw;
        uint8_t *src = source_log(p, &slen, &hw);
        const uint8_t *dst = fakehost_partition_log(T.fh, &DST_ID, p, &dlen, NULL);
        kp_batch_iter_t it;
        kp_batch_t b;

        CU_ASSERT_EQUAL(dlen, slen);
        CU_ASSERT(dlen == slen && (slen == 0 || memcmp(src, dst, slen) == 0));
        kp_batch_iter_init(&it, dst, dlen, 0, 0);
        while (kp_batch_iter_next(&it, &b) == 1) {
            codecs |= 1u << kp_batch_hdr_codec(&b.hdr);
            *ctrl += kp_batch_hdr_is_control(&b.hdr);
            *txn += kp_batch_hdr_is_transactional(&b.hdr);
        }
        CU_ASSERT_EQUAL(it.err, 0);
        free(src);
    }
    return codecs;
}

static void set_want_from_source(void)
{
    for (int p = 0; p < NPART; p++) {
        size_t len;
        uint8_t *b = source_log(p, &len, &WANT[p]);
        free(b);
    }
}

/* --fetch-max: every Fetch at that version; below v12 the (re)starts and leader changes went
 * through OffsetsForLeaderEpoch (no LastFetchedEpoch there), with no divergence */
static void check_fetch_cap(void)
{
    km_fetch_counters_t cv;

    if (fetch_max <= 0)
        return;
    km_fetch_counters(T.fm, &cv);
    CU_ASSERT_EQUAL(cv.fetch_version_min, fetch_max);
    CU_ASSERT_EQUAL(cv.fetch_version_max, fetch_max);
    if (fetch_max < 12)
        CU_ASSERT(cv.epoch_requests > 0);
    printf("\n    Fetch v%d..%d, %llu OffsetsForLeaderEpoch request(s)\n",
           (int)cv.fetch_version_min, (int)cv.fetch_version_max,
           (unsigned long long)cv.epoch_requests);
}

static void test_mirror_real_source(void)
{
    void *ctx = NULL;
    char err[256] = "";
    km_fetch_opts_t o = {.on_event = on_event, .poll_ms = 5, .latch_wait_ms = 1};
    km_fetch_counters_t c0, c1;
    km_fetch_status_t st;
    int ctrl, txn;
    unsigned codecs;
    static const char *const codec_names[] = {"none", "gzip", "snappy", "lz4", "zstd"};

    /* the source: every codec into partition 0, some into 2, transactions into 1 */
    for (int i = 0; i < 5; i++)
        CU_ASSERT_FATAL(kcat_produce(0, codec_names[i], 20 + i, codec_names[i]) == 0);
    CU_ASSERT_FATAL(kcat_produce(2, "zstd", 7, "two") == 0);
    if (python_bin != NULL) {
        char cmd[2048];
        FILE *f;
        snprintf(cmd, sizeof(cmd), "%s/txn.py", dir);
        f = fopen(cmd, "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fprintf(f, "import sys\n"
                   "from confluent_kafka import Producer\n"
                   "p = Producer({'bootstrap.servers': sys.argv[1], 'transactional.id': "
                   "'km-fetch-txn', 'linger.ms': 5})\n"
                   "p.init_transactions(20)\n"
                   "p.begin_transaction()\n"
                   "for i in range(5): p.produce('" TOPIC "', value=b'c%%d' %% i, partition=1)\n"
                   "p.commit_transaction(20)\n"
                   "p.begin_transaction()\n"
                   "for i in range(3): p.produce('" TOPIC "', value=b'a%%d' %% i, partition=1)\n"
                   "p.flush(20)\n"
                   "p.abort_transaction(20)\n");
        fclose(f);
        snprintf(cmd, sizeof(cmd), "%s %s/txn.py %s", python_bin, dir, bootstrap);
        CU_ASSERT_FATAL(run(cmd) == 0);
    } else {
        CU_ASSERT_FATAL(kcat_produce(1, "lz4", 9, "one") == 0);
    }

    /* the destination */
    T.fh = fakehost_new(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(T.fh);
    fakehost_config_set(T.fh, "mirror.enable", "true");
    fakehost_set_log_level(T.fh, KBX_LOG_INFO);
    for (int p = 0; p < NPART; p++)
        CU_ASSERT_EQUAL_FATAL(
            fakehost_partition_add(T.fh, &DST_ID, "mt-dst", p, 100, true, KBX_WRITE_READ_ONLY), 0);
    CU_ASSERT_EQUAL_FATAL(
        kbx_plugin_entry()->init(fakehost_api(T.fh), fakehost_host(T.fh), &ctx, err, sizeof(err)),
        0);
    T.cm = ctx;
    o.fetch_max_version = fetch_max;
    T.fm = km_fetch_mgr_create(T.cm, &o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(T.fm);
    CU_ASSERT_EQUAL_FATAL(km_config_init(T.cm, &km_config_mirror_scope, &T.mc, err, sizeof(err)),
                          KM_OK);
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "bootstrap.servers", bootstrap, err,
                  sizeof(err));
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "fetch.backoff.ms", "20", err, sizeof(err));
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "fetch.wait.max.ms", "50", err,
                  sizeof(err));
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "retry.backoff.ms", "20", err, sizeof(err));
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "reconnect.backoff.max.ms", "200", err,
                  sizeof(err));
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "request.timeout.ms", "3000", err,
                  sizeof(err));
    CU_ASSERT_EQUAL_FATAL(km_fetch_mirror_set(T.fm, "m1", &T.mc, err, sizeof(err)), KM_OK);
    for (int p = 0; p < NPART; p++) {
        km_fetch_part_spec_t s = {.mirror = "m1",
                                  .source_topic = TOPIC,
                                  .partition = p,
                                  .dest_topic_id = DST_ID,
                                  .dest_leader_epoch = 100,
                                  .fetch_offset = -1,
                                  .last_fetched_epoch = -1};
        CU_ASSERT_EQUAL_FATAL(km_fetch_partition_add(T.fm, &s, &T.fp[p]), KM_OK);
    }
    set_want_from_source();
    CU_ASSERT(WANT[0] >= 5 * 20);
    CU_ASSERT_FATAL(step_until(c_caught_up, WAIT_MS));
    codecs = compare_all(&ctrl, &txn);
    CU_ASSERT_EQUAL(codecs & 0x1f, 0x1f); /* none, gzip, snappy, lz4, zstd */
    if (python_bin != NULL) {
        CU_ASSERT_EQUAL(ctrl, 2); /* COMMIT and ABORT markers */
        CU_ASSERT(txn >= 4);
    }
    km_fetch_partition_status(T.fm, T.fp[0], &st);
    CU_ASSERT_EQUAL(st.state, KM_FETCH_ST_FETCHING);
    CU_ASSERT_EQUAL(st.lag, 0);
    CU_ASSERT_EQUAL(st.high_watermark, WANT[0]);
    CU_ASSERT(st.bytes > 0);
    {
        /* the wire bytes received cover every appended byte plus the responses' framing */
        double appended = -1, received = -1;
        CU_ASSERT(fakehost_metric_get(T.fh, "kmirror.fetch", "bytes_total", &appended));
        CU_ASSERT(fakehost_metric_get(T.fh, "kmirror.fetch", "received_bytes_total", &received));
        CU_ASSERT(appended > 0);
        CU_ASSERT(received > appended);
    }

    /* incremental session: one new batch in partition 2 is the only partition listed */
    {
        bool seen_idle = false;
        int64_t end;
        /* after the catch-up: an incremental request with the new positions, then one that
         * lists nothing; from there on the session is quiet */
        CU_ASSERT(step_until(c_two_incremental, WAIT_MS));
        km_fetch_counters(T.fm, &c0);
        CU_ASSERT_EQUAL(c0.full_fetches, 1);
        CU_ASSERT(c0.last_session_id != 0);
        CU_ASSERT_FATAL(kcat_produce(2, "none", 3, "inc") == 0);
        set_want_from_source();
        CU_ASSERT_FATAL(step_until(c_caught_up, WAIT_MS));
        /* then at least one more (empty) incremental request */
        end = now_ms() + WAIT_MS;
        while (!seen_idle && now_ms() < end) {
            fakehost_advance_ms(T.fh, 1);
            km_fetch_counters(T.fm, &c1);
            seen_idle = c1.partitions_sent - c0.partitions_sent == 1 &&
                        c1.incremental_fetches - c0.incremental_fetches >= 2;
        }
        CU_ASSERT(seen_idle);
        CU_ASSERT_EQUAL(c1.full_fetches, c0.full_fetches);
        CU_ASSERT_EQUAL(c1.partitions_sent - c0.partitions_sent, 1);
        CU_ASSERT_EQUAL(c1.session_resets, c0.session_resets);
        CU_ASSERT_EQUAL(c1.last_session_id, c0.last_session_id);
    }

    /* kill -9 of the source: transient; a restart on the same port: it recovers by itself */
    {
        int st2, port2 = -1;
        kill(src_pid, SIGKILL);
        waitpid(src_pid, &st2, 0);
        src_pid = -1;
        memset(T.nev, 0, sizeof(T.nev));
        CU_ASSERT(step_until(c_transient, WAIT_MS));
        km_fetch_partition_status(T.fm, T.fp[0], &st);
        CU_ASSERT_EQUAL(st.error_class, KM_FETCH_ERR_TRANSIENT);
        CU_ASSERT(st.retries >= 1);
        CU_ASSERT(st.error[0] != '\0');
        src_pid = spawn_kbroker(src_port, &port2);
        CU_ASSERT_FATAL(src_pid > 0 && port2 == src_port);
        CU_ASSERT_FATAL(kcat_produce(0, "snappy", 11, "after") == 0);
        CU_ASSERT_FATAL(kcat_produce(1, "gzip", 4, "after") == 0);
        set_want_from_source();
        CU_ASSERT_FATAL(step_until(c_caught_up, WAIT_MS));
        compare_all(&ctrl, &txn);
        km_fetch_partition_status(T.fm, T.fp[0], &st);
        CU_ASSERT_EQUAL(st.state, KM_FETCH_ST_FETCHING);
        CU_ASSERT_EQUAL(st.error_class, KM_FETCH_ERR_NONE);
        CU_ASSERT_EQUAL(st.retries, 0);
        CU_ASSERT_EQUAL(T.nev[KM_FETCH_EV_FATAL], 0);
        CU_ASSERT_EQUAL(T.nev[KM_FETCH_EV_DIVERGED], 0);
    }

    /* a connection setting changes: the threads reconnect (new client, new full session) and
     * mirroring goes on */
    {
        km_fetch_counters_t c2, c3;
        int64_t end;
        km_fetch_counters(T.fm, &c2);
        CU_ASSERT_EQUAL(km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "client.id",
                                      "km-fetch-renamed", err, sizeof(err)),
                        KM_OK);
        CU_ASSERT_EQUAL(km_fetch_mirror_set(T.fm, "m1", &T.mc, err, sizeof(err)), KM_OK);
        end = now_ms() + WAIT_MS;
        do {
            fakehost_advance_ms(T.fh, 1);
            km_fetch_counters(T.fm, &c3);
        } while (c3.full_fetches == c2.full_fetches && now_ms() < end);
        CU_ASSERT(c3.full_fetches > c2.full_fetches);
        CU_ASSERT(c3.session_resets > c2.session_resets);
        CU_ASSERT_FATAL(kcat_produce(2, "lz4", 5, "renamed") == 0);
        set_want_from_source();
        CU_ASSERT_FATAL(step_until(c_caught_up, WAIT_MS));
        compare_all(&ctrl, &txn);
        CU_ASSERT_EQUAL(T.nev[KM_FETCH_EV_FATAL], 0);
    }

    check_fetch_cap();

    km_fetch_mgr_destroy(T.fm);
    km_config_free(T.cm, &km_config_mirror_scope, &T.mc);
    kbx_plugin_entry()->fini(T.cm);
    {
        char buf[512];
        int rc = fakehost_check_clean(T.fh, buf, sizeof(buf));
        CU_ASSERT_EQUAL(rc, 0);
        if (rc != 0)
            fprintf(stderr, "\n    fake host not clean: %s\n", buf);
    }
    fakehost_free(T.fh);
}

/* ---- a source cluster: the leader moves ---------------------------------------------------- */

#define CL_NODES   3
#define CL_SESSION 1500

static pid_t cl_pid[CL_NODES + 1];
static char cl_topic[32];
static int cl_port[CL_NODES + 1], cl_cport;

/* Start node id (1: broker and controller; 2, 3: brokers); 0 or -1. */
static int cl_start(int id)
{
    char cfg[700], logp[700], buf[8192];
    int p[2];
    size_t got = 0;
    int64_t dl;
    FILE *f;

    snprintf(cfg, sizeof(cfg), "%s/server-%d.properties", dir, id);
    snprintf(logp, sizeof(logp), "%s/kbroker-%d.log", dir, id);
    f = fopen(cfg, "w");
    if (f == NULL)
        return -1;
    fprintf(f,
            "node.id=%d\nlog.dirs=%s/n%d\ncluster.id=kmFetchLeaderMove00001\n"
            "broker.heartbeat.interval.ms=200\nbroker.session.timeout.ms=%d\n"
            "controller.listener.names=CONTROLLER\n"
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
            "num.network.threads=1\nnum.io.threads=2\nlog.cleaner.enable=false\n"
            "replica.lag.time.max.ms=1500\nreplica.fetch.backoff.ms=200\n"
            "auto.create.topics.enable=false\n",
            id, dir, id, CL_SESSION);
    if (id == 1)
        fprintf(f, "process.roles=broker,controller\n"
                   "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0\n");
    else
        fprintf(f,
                "process.roles=broker\nlisteners=PLAINTEXT://127.0.0.1:0\n"
                "controller.quorum.voters=1@127.0.0.1:%d\n",
                cl_cport);
    fclose(f);
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    cl_pid[id] = fork();
    if (cl_pid[id] == 0) {
        int lfd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        dup2(lfd, 2);
        execl(kbroker_bin, kbroker_bin, "--config", cfg, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    dl = now_ms() + WAIT_MS;
    while (now_ms() < dl && got < sizeof(buf) - 1) {
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        ssize_t n;
        char *line, *q;
        if (poll(&pf, 1, 100) <= 0)
            continue;
        n = read(p[0], buf + got, sizeof(buf) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        line = strstr(buf, "kbroker started (");
        if (line != NULL && strchr(line, '\n') != NULL) {
            if ((q = strstr(line, "PLAINTEXT://127.0.0.1:")) != NULL)
                cl_port[id] = atoi(q + strlen("PLAINTEXT://127.0.0.1:"));
            if (id == 1 && (q = strstr(line, "CONTROLLER://127.0.0.1:")) != NULL)
                cl_cport = atoi(q + strlen("CONTROLLER://127.0.0.1:"));
            close(p[0]);
            return cl_port[id] > 0 ? 0 : -1;
        }
    }
    close(p[0]);
    fprintf(stderr, "node %d did not start (see %s)\n", id, logp);
    return -1;
}

/* CreateTopics topic (1 partition, replication factor 3) through node 1, retried until every
 * broker has registered; then its leader from Metadata (-1 unknown). */
static int32_t cl_create_topic(const char *topic)
{
    int64_t end = now_ms() + WAIT_MS;
    char bs[32], err[128];
    kc_opts_t o;
    kc_client_t *c;
    bool ok = false;
    int32_t leader = -1;

    snprintf(bs, sizeof(bs), "127.0.0.1:%d", cl_port[1]);
    kc_opts_init(&o);
    c = kc_client_new(&o, err, sizeof(err));
    if (c == NULL || kc_client_add_bootstrap(c, bs) != 0)
        return -1;
    while (!ok && now_ms() < end) {
        kp_CreateTopicsRequest_t rq;
        kp_CreateTopicsRequest_CreatableTopic_t t;
        kp_CreateTopicsResponse_t resp;
        kp_arena_t ar;
        kp_reader_t rd;
        fres_t r = {0};
        int64_t dl = now_ms() + 5000;

        kp_CreateTopicsRequest_init(&rq);
        kp_CreateTopicsRequest_CreatableTopic_init(&t);
        t.Name = kp_str(topic);
        t.NumPartitions = 1;
        t.ReplicationFactor = CL_NODES;
        t.MirrorInfo_null = true;
        rq.Topics.v = &t;
        rq.Topics.cnt = 1;
        rq.TimeoutMs = 5000;
        if (kc_request_msg(c, KC_NODE_ANY, &kp_CreateTopicsRequest_desc, 7, &rq, 6000, 0, on_resp,
                           &r) <= 0)
            break;
        while (!r.done && now_ms() < dl)
            kc_client_poll(c, 50);
        if (r.done && r.err == KC_E_OK) {
            kp_arena_init(&ar, 0);
            kp_CreateTopicsResponse_init(&resp);
            kp_reader_init(&rd, r.body, r.len);
            if (kp_CreateTopicsResponse_decode(&rd, &ar, &resp, r.ver) == 0 &&
                resp.Topics.cnt == 1 &&
                (resp.Topics.v[0].ErrorCode == 0 || resp.Topics.v[0].ErrorCode == 36))
                ok = true;
            else if (getenv("KM_FETCH_DEBUG") != NULL && resp.Topics.cnt == 1)
                fprintf(stderr, "CreateTopics: %d %.*s\n", resp.Topics.v[0].ErrorCode,
                        resp.Topics.v[0].ErrorMessage.len > 0 ? resp.Topics.v[0].ErrorMessage.len
                                                              : 0,
                        resp.Topics.v[0].ErrorMessage.ptr);
            kp_arena_free(&ar);
        }
        free(r.body);
        if (!ok)
            kc_client_poll(c, 200); /* brokers still registering */
    }
    while (ok && leader < 0 && now_ms() < end) {
        kp_MetadataRequest_t mr;
        kp_MetadataRequest_MetadataRequestTopic_t mt;
        kp_MetadataResponse_t resp;
        kp_arena_t ar;
        kp_reader_t rd;
        fres_t r = {0};
        int64_t dl = now_ms() + 5000;

        kp_MetadataRequest_init(&mr);
        kp_MetadataRequest_MetadataRequestTopic_init(&mt);
        mt.Name = kp_str(topic);
        mr.Topics.v = &mt;
        mr.Topics.cnt = 1;
        if (kc_request_msg(c, KC_NODE_ANY, &kp_MetadataRequest_desc, 12, &mr, 6000, 0, on_resp,
                           &r) <= 0)
            break;
        while (!r.done && now_ms() < dl)
            kc_client_poll(c, 50);
        if (r.done && r.err == KC_E_OK) {
            kp_arena_init(&ar, 0);
            kp_MetadataResponse_init(&resp);
            kp_reader_init(&rd, r.body, r.len);
            if (kp_MetadataResponse_decode(&rd, &ar, &resp, r.ver) == 0 && resp.Topics.cnt == 1 &&
                resp.Topics.v[0].Partitions.cnt == 1 &&
                resp.Topics.v[0].Partitions.v[0].IsrNodes.cnt == CL_NODES)
                leader = resp.Topics.v[0].Partitions.v[0].LeaderId;
            kp_arena_free(&ar);
        }
        free(r.body);
        if (leader < 0)
            kc_client_poll(c, 100);
    }
    kc_client_destroy(c);
    return leader;
}

static int cl_produce(const char *bs, int n, const char *tag)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "for i in $(seq 1 %d); do echo \"%s-$i\"; done | kcat -P -q -b %s -t %s -p 0 "
             "-X acks=all -X message.send.max.retries=50 -X retry.backoff.ms=200 "
             "-X message.timeout.ms=20000",
             n, tag, bs, cl_topic);
    return run(cmd);
}

static int64_t CL_WANT;
static bool c_cl_caught_up(void)
{
    return dst_leo(0) >= CL_WANT;
}
static int32_t CL_OLD_LEADER;
static bool c_cl_moved(void)
{
    km_fetch_status_t st;
    km_fetch_partition_status(T.fm, T.fp[0], &st);
    return st.source_leader > 0 && st.source_leader != CL_OLD_LEADER &&
           st.state == KM_FETCH_ST_FETCHING;
}

static void test_leader_move(void)
{
    void *ctx = NULL;
    char err[256] = "", all[128], lbs[32];
    km_fetch_opts_t o = {.on_event = on_event, .poll_ms = 5, .latch_wait_ms = 1};
    km_fetch_status_t st;
    km_fetch_part_spec_t s = {.mirror = "m1",
                              .source_topic = cl_topic,
                              .partition = 0,
                              .dest_topic_id = DST_ID,
                              .dest_leader_epoch = 100,
                              .fetch_offset = -1,
                              .last_fetched_epoch = -1};
    size_t slen, dlen;
    uint8_t *src;
    const uint8_t *dst;
    int32_t leader;
    int st2;

    for (int id = 1; id <= CL_NODES; id++)
        CU_ASSERT_FATAL(cl_start(id) == 0);
    snprintf(all, sizeof(all), "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", cl_port[1], cl_port[2],
             cl_port[3]);
    /* The partition's leader must not be node 1: the controller (a single voter) has to
     * survive the kill. kbroker refuses explicit assignments in a cluster, so topics are
     * created until the assigner picks another leader. */
    for (int i = 0; i < 8; i++) {
        int32_t l;
        snprintf(cl_topic, sizeof(cl_topic), "mc%d", i);
        l = cl_create_topic(cl_topic);
        CU_ASSERT_FATAL(l >= 1);
        if (l != 1)
            break;
    }
    CU_ASSERT_FATAL(cl_produce(all, 30, "before") == 0);

    T.fh = fakehost_new(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(T.fh);
    fakehost_config_set(T.fh, "mirror.enable", "true");
    fakehost_set_log_level(T.fh, KBX_LOG_INFO);
    CU_ASSERT_EQUAL_FATAL(
        fakehost_partition_add(T.fh, &DST_ID, "mc-dst", 0, 100, true, KBX_WRITE_READ_ONLY), 0);
    CU_ASSERT_EQUAL_FATAL(
        kbx_plugin_entry()->init(fakehost_api(T.fh), fakehost_host(T.fh), &ctx, err, sizeof(err)),
        0);
    T.cm = ctx;
    o.fetch_max_version = fetch_max;
    T.fm = km_fetch_mgr_create(T.cm, &o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(T.fm);
    CU_ASSERT_EQUAL_FATAL(km_config_init(T.cm, &km_config_mirror_scope, &T.mc, err, sizeof(err)),
                          KM_OK);
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "bootstrap.servers", all, err, sizeof(err));
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "fetch.backoff.ms", "50", err, sizeof(err));
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "fetch.wait.max.ms", "50", err,
                  sizeof(err));
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "retry.backoff.ms", "50", err, sizeof(err));
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "reconnect.backoff.max.ms", "200", err,
                  sizeof(err));
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "request.timeout.ms", "2000", err,
                  sizeof(err));
    CU_ASSERT_EQUAL_FATAL(km_fetch_mirror_set(T.fm, "m1", &T.mc, err, sizeof(err)), KM_OK);
    CU_ASSERT_EQUAL_FATAL(km_fetch_partition_add(T.fm, &s, &T.fp[0]), KM_OK);
    CL_WANT = 30;
    CU_ASSERT_FATAL(step_until(c_cl_caught_up, WAIT_MS));
    km_fetch_partition_status(T.fm, T.fp[0], &st);
    leader = st.source_leader;
    CU_ASSERT_FATAL(leader >= 2 && leader <= CL_NODES);

    /* kill -9 the source leader: the controller moves leadership after the session timeout,
     * the fetcher follows it by itself */
    kill(cl_pid[leader], SIGKILL);
    waitpid(cl_pid[leader], &st2, 0);
    cl_pid[leader] = 0;
    CL_OLD_LEADER = leader;
    memset(T.nev, 0, sizeof(T.nev));
    if (!step_until(c_cl_moved, WAIT_MS)) {
        km_fetch_partition_status(T.fm, T.fp[0], &st);
        fprintf(stderr, "\n    not moved: state %s leader %d epoch %d error %s\n",
                km_fetch_state_name(st.state), (int)st.source_leader, (int)st.source_leader_epoch,
                st.error);
        CU_FAIL_FATAL("the fetcher did not follow the new leader");
    }
    CU_ASSERT(T.nev[KM_FETCH_EV_TRANSIENT] > 0);
    km_fetch_partition_status(T.fm, T.fp[0], &st);
    CU_ASSERT(st.source_leader_epoch > 0);
    CU_ASSERT(km_fetch_thread_count(T.fm) >= 3); /* lookup, old leader's, new leader's */
    snprintf(lbs, sizeof(lbs), "127.0.0.1:%d", cl_port[st.source_leader]);
    CU_ASSERT_FATAL(cl_produce(lbs, 20, "after") == 0);
    {
        uint8_t *b = source_log_at(lbs, cl_topic, 0, &slen, &CL_WANT);
        free(b);
    }
    CU_ASSERT(CL_WANT >= 50);
    CU_ASSERT_FATAL(step_until(c_cl_caught_up, WAIT_MS));
    src = source_log_at(lbs, cl_topic, 0, &slen, &CL_WANT);
    dst = fakehost_partition_log(T.fh, &DST_ID, 0, &dlen, NULL);
    CU_ASSERT_EQUAL(dlen, slen);
    CU_ASSERT(dlen == slen && memcmp(src, dst, slen) == 0);
    free(src);
    CU_ASSERT_EQUAL(T.nev[KM_FETCH_EV_FATAL], 0);
    CU_ASSERT_EQUAL(T.nev[KM_FETCH_EV_DIVERGED], 0);

    check_fetch_cap();
    km_fetch_mgr_destroy(T.fm);
    km_config_free(T.cm, &km_config_mirror_scope, &T.mc);
    kbx_plugin_entry()->fini(T.cm);
    {
        char buf[512];
        int rc = fakehost_check_clean(T.fh, buf, sizeof(buf));
        CU_ASSERT_EQUAL(rc, 0);
        if (rc != 0)
            fprintf(stderr, "\n    fake host not clean: %s\n", buf);
    }
    fakehost_free(T.fh);
}

int main(int argc, char **argv)
{
    CU_TestInfo tests[] = {
        {"mirror_real_source", test_mirror_real_source},
        CU_TEST_INFO_NULL,
    };
    CU_TestInfo cl_tests[] = {
        {"leader_move", test_leader_move},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"fetch_source", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    CU_SuiteInfo cl_suites[] = {{"fetch_source_cluster", NULL, NULL, NULL, NULL, cl_tests},
                                CU_SUITE_INFO_NULL};
    bool cluster = false;
    int rc;

    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--kbroker") == 0 && i + 1 < argc)
            kbroker_bin = argv[++i];
        else if (strcmp(argv[i], "--python") == 0 && i + 1 < argc)
            python_bin = argv[++i];
        else if (strcmp(argv[i], "--cluster") == 0)
            cluster = true;
        else if (strcmp(argv[i], "--fetch-max") == 0 && i + 1 < argc)
            fetch_max = (int16_t)atoi(argv[++i]);
    }
    if (kbroker_bin == NULL) {
        fprintf(stderr, "usage: %s --kbroker PATH [--python PATH] [--cluster] [--fetch-max N]\n",
                argv[0]);
        return 2;
    }
    if (mkdtemp(dir) == NULL)
        return 1;
    if (cluster) {
        rc = fh_cunit_run(cl_suites);
        for (int id = 1; id <= CL_NODES; id++) {
            if (cl_pid[id] > 0) {
                int st;
                kill(cl_pid[id], SIGKILL);
                waitpid(cl_pid[id], &st, 0);
            }
        }
    } else {
        src_pid = spawn_kbroker(0, &src_port);
        if (src_pid < 0 || src_port <= 0) {
            fprintf(stderr, "kbroker did not start (see %s/kbroker.log)\n", dir);
            if (src_pid > 0)
                kill(src_pid, SIGKILL);
            return 1;
        }
        snprintf(bootstrap, sizeof(bootstrap), "127.0.0.1:%d", src_port);
        rc = fh_cunit_run(suites);
        if (src_pid > 0) {
            int st;
            kill(src_pid, SIGTERM);
            waitpid(src_pid, &st, 0);
        }
    }
    if (rc == 0) {
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
    } else {
        fprintf(stderr, "source kept in %s\n", dir);
    }
    return rc;
}
