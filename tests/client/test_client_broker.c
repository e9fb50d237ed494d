/*
 * test_client_broker.c -- kp_client against a real broker.
 *
 *   test_client_broker --kbroker PATH        starts build/bin/kbroker on an ephemeral
 *                                            loopback port (label: unit)
 *   test_client_broker --bootstrap H:P[,..]  an already running cluster, e.g. Apache Kafka
 *                                            4.4.0 from tests/peers (label: interop)
 *
 * Checks: ApiVersions negotiation (the version picked is min(ours, the broker's)), a range the
 * broker does not serve fails cleanly, the ApiVersions fallback from a too-new handshake,
 * Metadata refresh registering the brokers by node id, CreateTopics, Produce then Fetch with
 * every record compared, and 300 pipelined requests answered in order.
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

#include <CUnit/Basic.h>

#include "kc_client.h"
#include "kp_arena.h"
#include "kp_batch.h"
#include "kp_msgs.h"

#define WAIT_MS  20000
#define NRECORDS 25

static char bootstrap[512];
static char topic[64];

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- one result per request -------------------------------------------------------------- */

typedef struct res_s {
    int calls, err, order;
    int16_t ver;
    uint8_t *body;
    size_t len;
} res_t;

static int ncalls;

static void on_resp(kc_client_t *c, int err, int16_t ver, const uint8_t *body, size_t len,
                    void *opaque)
{
    res_t *r = opaque;
    (void)c;
    r->calls++;
    r->err = err;
    r->ver = ver;
    r->order = ncalls++;
    free(r->body);
    r->body = NULL;
    r->len = len;
    if (len) {
        r->body = malloc(len);
        memcpy(r->body, body, len);
    }
}

static bool wait_res(kc_client_t *c, res_t *r, int n)
{
    int64_t dl = now_ms() + WAIT_MS;
    for (;;) {
        int done = 0;
        for (int i = 0; i < n; i++)
            done += r[i].calls > 0;
        if (done == n)
            return true;
        if (now_ms() > dl)
            return false;
        kc_client_poll(c, 50);
    }
}

static void log_cb(void *opaque, int level, const char *msg)
{
    (void)opaque;
    if (getenv("KCT_LOG") || level <= KC_LOG_WARN)
        fprintf(stderr, "kc[%d] %s\n", level, msg);
}

static kc_client_t *mk_client(int handshake_version)
{
    kc_opts_t o;
    char err[128];
    kc_client_t *c;
    kc_opts_init(&o);
    o.client_id = "kc-test";
    o.log_cb = log_cb;
    o.log_level = KC_LOG_DEBUG;
    o.max_in_flight = 32;
    if (handshake_version)
        o.handshake_version = handshake_version;
    c = kc_client_new(&o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL_FATAL(kc_client_add_bootstrap(c, bootstrap), 0);
    return c;
}

/* Decode @p r's body as @p d at the response's version into @p msg. */
static int decode(const kp_msg_desc_t *d, const res_t *r, kp_arena_t *ar, void *msg)
{
    kp_reader_t rd;
    kp_reader_init(&rd, r->body, r->len);
    kp_msg_init(d, msg);
    return kp_msg_decode(d, &rd, ar, msg, r->ver);
}

/* ---- tests ------------------------------------------------------------------------------ */

static int32_t broker_id = -1;

static void test_negotiation_and_metadata(void)
{
    kc_client_t *c = mk_client(0);
    res_t r[3] = {{0}};
    kp_MetadataRequest_t mr;
    kp_MetadataResponse_t resp;
    kp_arena_t ar;
    int16_t lo, hi;
    kc_metrics_t m = {.struct_size = sizeof(m)};

    CU_ASSERT(kc_metadata_refresh(c, KC_NODE_ANY, on_resp, &r[0]) > 0);
    CU_ASSERT_FATAL(wait_res(c, r, 1));
    CU_ASSERT_EQUAL_FATAL(r[0].err, KC_E_OK);
    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL_FATAL(decode(&kp_MetadataResponse_desc, &r[0], &ar, &resp), 0);
    CU_ASSERT_FATAL(resp.Brokers.cnt >= 1);
    broker_id = resp.Brokers.v[0].NodeId;
    printf("\n  Metadata v%d: %d broker(s), first node %d at %.*s:%d\n", r[0].ver, resp.Brokers.cnt,
           broker_id, resp.Brokers.v[0].Host.len, resp.Brokers.v[0].Host.ptr,
           resp.Brokers.v[0].Port);
    kc_client_metrics(c, &m);
    CU_ASSERT_EQUAL(m.nodes, (uint32_t)(1 + resp.Brokers.cnt)); /* bootstrap + the brokers */
    kp_arena_free(&ar);

    /* negotiation: min(ours, the broker's), through the node id learned from Metadata */
    CU_ASSERT_EQUAL_FATAL(
        kc_client_api_range(c, KC_NODE_BOOTSTRAP(0), KP_APIKEY_Metadata, &lo, &hi), 0);
    kp_MetadataRequest_init(&mr);
    mr.Topics.cnt = 0;
    free(r[0].body);
    memset(r, 0, sizeof(r));
    CU_ASSERT(kc_request_msg(c, broker_id, &kp_MetadataRequest_desc, -1, &mr, WAIT_MS, 0, on_resp,
                             &r[0]) > 0);
    CU_ASSERT(kc_request_msg(c, broker_id, &kp_MetadataRequest_desc, 5, &mr, WAIT_MS, 0, on_resp,
                             &r[1]) > 0);
    /* a range above what the broker serves: no common version, nothing sent */
    CU_ASSERT(kc_request_raw(c, broker_id, KP_APIKEY_Metadata, (int16_t)(hi + 1), "", 0, WAIT_MS, 0,
                             on_resp, &r[2]) > 0);
    CU_ASSERT_FATAL(wait_res(c, r, 3));
    CU_ASSERT_EQUAL(r[0].err, KC_E_OK);
    CU_ASSERT_EQUAL(r[0].ver,
                    hi < kp_MetadataRequest_desc.max_ver ? hi : kp_MetadataRequest_desc.max_ver);
    CU_ASSERT_EQUAL(r[1].err, KC_E_OK);
    CU_ASSERT_EQUAL(r[1].ver, 5);
    CU_ASSERT_EQUAL(r[2].err, KC_E_NO_VERSION);
    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL(decode(&kp_MetadataResponse_desc, &r[0], &ar, &resp), 0);
    CU_ASSERT_EQUAL(resp.Brokers.v[0].NodeId, broker_id);
    kp_arena_free(&ar);
    for (int i = 0; i < 3; i++)
        free(r[i].body);
    kc_client_destroy(c);
}

static void test_apiversions_fallback(void)
{
    /* a handshake version no broker serves: it answers UNSUPPORTED_VERSION (v0 layout) and
     * the client retries at the broker's highest (capped at ours) on the same connection */
    kc_client_t *c = mk_client(99);
    res_t r[1] = {{0}};
    kp_MetadataRequest_t mr;
    kc_metrics_t m = {.struct_size = sizeof(m)};
    kp_MetadataRequest_init(&mr);
    mr.Topics.cnt = 0;
    CU_ASSERT(kc_request_msg(c, KC_NODE_ANY, &kp_MetadataRequest_desc, -1, &mr, WAIT_MS, 0, on_resp,
                             &r[0]) > 0);
    CU_ASSERT_FATAL(wait_res(c, r, 1));
    CU_ASSERT_EQUAL(r[0].err, KC_E_OK);
    kc_client_metrics(c, &m);
    CU_ASSERT_EQUAL(m.connects, 1);
    CU_ASSERT_EQUAL(m.requests, 3); /* ApiVersions v99, ApiVersions again, Metadata */
    free(r[0].body);
    kc_client_destroy(c);
}

typedef struct create_s {
    kp_CreateTopicsRequest_t req;
    kp_CreateTopicsRequest_CreatableTopic_t t;
} create_t;

static void test_produce_fetch(void)
{
    kc_client_t *c = mk_client(0);
    res_t r = {0};
    create_t ct;
    kp_arena_t ar;
    kp_writer_t batch;
    kp_batch_builder_t bb;
    kp_batch_opts_t bo;
    kp_ProduceRequest_t pr;
    kp_ProduceRequest_TopicProduceData_t ptd;
    kp_ProduceRequest_PartitionProduceData_t ppd;
    kp_FetchRequest_t fr;
    kp_FetchRequest_FetchTopic_t ftp;
    kp_FetchRequest_FetchPartition_t fpp;
    int16_t perr = -100;
    int64_t base = -1, dl;
    int got = 0;

    /* learn the broker's node id (a single-broker cluster leads every partition) */
    CU_ASSERT(kc_metadata_refresh(c, KC_NODE_ANY, on_resp, &r) > 0);
    CU_ASSERT_FATAL(wait_res(c, &r, 1));
    CU_ASSERT_EQUAL_FATAL(r.err, KC_E_OK);
    free(r.body);
    memset(&r, 0, sizeof(r));
    CU_ASSERT_FATAL(broker_id >= 0);

    /* CreateTopics: 1 partition, RF 1 */
    kp_CreateTopicsRequest_init(&ct.req);
    kp_CreateTopicsRequest_CreatableTopic_init(&ct.t);
    ct.t.Name = kp_str(topic);
    ct.t.NumPartitions = 1;
    ct.t.ReplicationFactor = 1;
    ct.t.MirrorInfo_null = true;
    ct.req.Topics.v = &ct.t;
    ct.req.Topics.cnt = 1;
    ct.req.TimeoutMs = 10000;
    CU_ASSERT(kc_request_msg(c, KC_NODE_ANY, &kp_CreateTopicsRequest_desc, 7, &ct.req, WAIT_MS, 0,
                             on_resp, &r) > 0);
    CU_ASSERT_FATAL(wait_res(c, &r, 1));
    CU_ASSERT_EQUAL_FATAL(r.err, KC_E_OK);
    {
        kp_CreateTopicsResponse_t resp;
        kp_arena_init(&ar, 0);
        CU_ASSERT_EQUAL_FATAL(decode(&kp_CreateTopicsResponse_desc, &r, &ar, &resp), 0);
        CU_ASSERT_EQUAL_FATAL(resp.Topics.cnt, 1);
        CU_ASSERT(resp.Topics.v[0].ErrorCode == KP_ERR_NONE ||
                  resp.Topics.v[0].ErrorCode == KP_ERR_TOPIC_ALREADY_EXISTS);
        kp_arena_free(&ar);
        free(r.body);
        r.body = NULL;
    }

    /* one batch of NRECORDS records */
    kp_batch_opts_init(&bo);
    kp_batch_builder_init(&bb, &bo);
    for (int i = 0; i < NRECORDS; i++) {
        char k[32], v[64];
        int kl = snprintf(k, sizeof(k), "k-%d", i), vl = snprintf(v, sizeof(v), "value-%d", i);
        CU_ASSERT_EQUAL(kp_batch_builder_add(&bb, 1700000000000 + i,
                                             (kp_bytes_t){(const uint8_t *)k, kl},
                                             (kp_bytes_t){(const uint8_t *)v, vl}, NULL, 0),
                        0);
    }
    kp_writer_init(&batch);
    CU_ASSERT_EQUAL_FATAL(kp_batch_builder_finish(&bb, &batch), 0);
    kp_batch_builder_free(&bb);

    kp_ProduceRequest_init(&pr);
    kp_ProduceRequest_TopicProduceData_init(&ptd);
    kp_ProduceRequest_PartitionProduceData_init(&ppd);
    ppd.Index = 0;
    ppd.Records = (kp_bytes_t){batch.buf, (int32_t)batch.len};
    ptd.Name = kp_str(topic);
    ptd.PartitionData.v = &ppd;
    ptd.PartitionData.cnt = 1;
    pr.Acks = -1;
    pr.TimeoutMs = 10000;
    pr.TopicData.v = &ptd;
    pr.TopicData.cnt = 1;
    /* a new topic may need a moment to get a leader: retry retriable errors until a deadline */
    dl = now_ms() + WAIT_MS;
    while (now_ms() < dl) {
        kp_ProduceResponse_t resp;
        memset(&r, 0, sizeof(r));
        /* v12: topics by name (v13 switches to topic ids) */
        CU_ASSERT_FATAL(kc_request_msg(c, broker_id, &kp_ProduceRequest_desc, 12, &pr, WAIT_MS, 0,
                                       on_resp, &r) > 0);
        CU_ASSERT_FATAL(wait_res(c, &r, 1));
        CU_ASSERT_EQUAL_FATAL(r.err, KC_E_OK);
        kp_arena_init(&ar, 0);
        CU_ASSERT_EQUAL_FATAL(decode(&kp_ProduceResponse_desc, &r, &ar, &resp), 0);
        CU_ASSERT_EQUAL_FATAL(resp.Responses.cnt, 1);
        CU_ASSERT_EQUAL_FATAL(resp.Responses.v[0].PartitionResponses.cnt, 1);
        perr = resp.Responses.v[0].PartitionResponses.v[0].ErrorCode;
        base = resp.Responses.v[0].PartitionResponses.v[0].BaseOffset;
        kp_arena_free(&ar);
        free(r.body);
        r.body = NULL;
        if (perr == KP_ERR_NONE)
            break;
        kc_client_poll(c, 200); /* nothing to do: a short pause between tries */
    }
    printf("\n  Produce v%d: error %d, base offset %lld\n", r.ver, perr, (long long)base);
    CU_ASSERT_EQUAL_FATAL(perr, KP_ERR_NONE);
    CU_ASSERT_EQUAL(base, 0);

    kp_FetchRequest_init(&fr);
    kp_FetchRequest_FetchTopic_init(&ftp);
    kp_FetchRequest_FetchPartition_init(&fpp);
    fpp.Partition = 0;
    fpp.FetchOffset = 0;
    fpp.PartitionMaxBytes = 1 << 20;
    fpp.CurrentLeaderEpoch = -1;
    fpp.LogStartOffset = -1;
    fpp.LastFetchedEpoch = -1;
    ftp.Topic = kp_str(topic);
    ftp.Partitions.v = &fpp;
    ftp.Partitions.cnt = 1;
    fr.ReplicaId = -1;
    fr.MaxWaitMs = 500;
    fr.MinBytes = 1;
    fr.MaxBytes = 1 << 20;
    fr.Topics.v = &ftp;
    fr.Topics.cnt = 1;
    fr.ForgottenTopicsData.cnt = 0;
    memset(&r, 0, sizeof(r));
    CU_ASSERT_FATAL(
        kc_request_msg(c, broker_id, &kp_FetchRequest_desc, 12, &fr, WAIT_MS, 0, on_resp, &r) > 0);
    CU_ASSERT_FATAL(wait_res(c, &r, 1));
    CU_ASSERT_EQUAL_FATAL(r.err, KC_E_OK);
    {
        kp_FetchResponse_t resp;
        kp_FetchResponse_PartitionData_t *pd;
        kp_batch_iter_t it;
        kp_batch_t b;
        kp_arena_init(&ar, 0);
        CU_ASSERT_EQUAL_FATAL(decode(&kp_FetchResponse_desc, &r, &ar, &resp), 0);
        CU_ASSERT_EQUAL_FATAL(resp.Responses.cnt, 1);
        CU_ASSERT_EQUAL_FATAL(resp.Responses.v[0].Partitions.cnt, 1);
        pd = &resp.Responses.v[0].Partitions.v[0];
        printf("  Fetch v%d: error %d, high watermark %lld, %d record bytes\n", r.ver,
               pd->ErrorCode, (long long)pd->HighWatermark, pd->Records.len);
        CU_ASSERT_EQUAL(pd->ErrorCode, KP_ERR_NONE);
        CU_ASSERT_EQUAL(pd->HighWatermark, NRECORDS);
        kp_batch_iter_init(&it, pd->Records.ptr, pd->Records.len > 0 ? (size_t)pd->Records.len : 0,
                           1 << 20, 0);
        while (kp_batch_iter_next(&it, &b) == 1) {
            kp_record_iter_t ri;
            kp_record_t rec;
            CU_ASSERT_EQUAL_FATAL(kp_record_iter_init(&ri, &b, NULL, 0), 0);
            while (kp_record_iter_next(&ri, &rec) == 1) {
                char want[64];
                int wl = snprintf(want, sizeof(want), "value-%d", got);
                CU_ASSERT_EQUAL(rec.offset, got);
                CU_ASSERT(rec.value.len == wl && memcmp(rec.value.ptr, want, (size_t)wl) == 0);
                got++;
            }
        }
        CU_ASSERT_EQUAL(it.err, 0);
        kp_arena_free(&ar);
    }
    CU_ASSERT_EQUAL(got, NRECORDS);
    free(r.body);
    kp_writer_free(&batch);
    kc_client_destroy(c);
}

static void test_pipelined(void)
{
    enum { N = 300 };
    kc_client_t *c = mk_client(0);
    static res_t r[N];
    kp_MetadataRequest_t mr;
    kp_MetadataRequest_MetadataRequestTopic_t t;
    bool ordered = true;
    kc_metrics_t m = {.struct_size = sizeof(m)};
    memset(r, 0, sizeof(r));
    ncalls = 0;
    kp_MetadataRequest_init(&mr);
    kp_MetadataRequest_MetadataRequestTopic_init(&t);
    t.Name = kp_str(topic);
    mr.Topics.v = &t;
    mr.Topics.cnt = 1;
    for (int i = 0; i < N; i++)
        CU_ASSERT(kc_request_msg(c, KC_NODE_ANY, &kp_MetadataRequest_desc, -1, &mr, WAIT_MS, 0,
                                 on_resp, &r[i]) > 0);
    CU_ASSERT_FATAL(wait_res(c, r, N));
    for (int i = 0; i < N; i++) {
        CU_ASSERT_EQUAL(r[i].calls, 1);
        CU_ASSERT_EQUAL(r[i].err, KC_E_OK);
        ordered &= r[i].order == i;
        free(r[i].body);
    }
    CU_ASSERT(ordered);
    kc_client_metrics(c, &m);
    CU_ASSERT_EQUAL(m.connects, 1);
    CU_ASSERT_EQUAL(m.responses, N);
    kc_client_destroy(c);
}

/* ---- kbroker process ------------------------------------------------------------------------ */

static pid_t spawn_kbroker(const char *bin, const char *dir, int *port)
{
    char cfg[600], logp[600], buf[4096];
    const char *needle = "listeners=PLAINTEXT://127.0.0.1:";
    int p[2];
    size_t got = 0;
    int64_t dl;
    pid_t pid;
    FILE *f;
    snprintf(cfg, sizeof(cfg), "%s/server.properties", dir);
    snprintf(logp, sizeof(logp), "%s/kbroker.log", dir);
    f = fopen(cfg, "w");
    if (!f)
        return -1;
    fprintf(f, "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs=%s/logs\n", dir);
    fclose(f);
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        int lfd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        dup2(lfd, 2);
        execl(bin, bin, "--config", cfg, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    dl = now_ms() + WAIT_MS;
    *port = -1;
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
        if ((s = strstr(buf, needle)) && strchr(s, '\n')) {
            *port = atoi(s + strlen(needle));
            break;
        }
    }
    close(p[0]);
    return pid;
}

int main(int argc, char **argv)
{
    CU_pSuite s;
    unsigned failed;
    pid_t pid = -1;
    char dir[] = "/tmp/kc_broker_XXXXXX";
    signal(SIGPIPE, SIG_IGN);
    if (argc == 3 && strcmp(argv[1], "--kbroker") == 0) {
        int port;
        if (!mkdtemp(dir))
            return 1;
        pid = spawn_kbroker(argv[2], dir, &port);
        if (pid < 0 || port <= 0) {
            fprintf(stderr, "kbroker did not start (see %s/kbroker.log)\n", dir);
            if (pid > 0)
                kill(pid, SIGKILL);
            return 1;
        }
        snprintf(bootstrap, sizeof(bootstrap), "127.0.0.1:%d", port);
    } else if (argc == 3 && strcmp(argv[1], "--bootstrap") == 0) {
        snprintf(bootstrap, sizeof(bootstrap), "%s", argv[2]);
    } else {
        fprintf(stderr, "usage: %s --kbroker PATH | --bootstrap HOST:PORT[,...]\n", argv[0]);
        return 2;
    }
    snprintf(topic, sizeof(topic), "kc-roundtrip-%d", (int)getpid());
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("client_broker", NULL, NULL);
    CU_add_test(s, "negotiation, Metadata refresh", test_negotiation_and_metadata);
    CU_add_test(s, "ApiVersions fallback from a too-new version", test_apiversions_fallback);
    CU_add_test(s, "CreateTopics, Produce, Fetch round trip", test_produce_fetch);
    CU_add_test(s, "300 pipelined requests", test_pipelined);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    if (pid > 0) {
        int st;
        kill(pid, SIGTERM);
        waitpid(pid, &st, 0);
        if (!failed) {
            char cmd[600];
            snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
            if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", dir);
        }
    }
    return failed ? 1 : 0;
}
