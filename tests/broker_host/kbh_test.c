/*
 * kbh_test.c -- the kbx host inside a real kbroker process (tests/broker_host).
 *
 *   kbh_test kbx KBROKER TEST_PLUGIN           (label interop)
 *   kbh_test smoke KBROKER KMIRROR BAD_PLUGIN  (label smoke; also under ASan)
 *
 * kbx: starts kbroker with the test plugin (kbh_test_plugin.so) and drives it through the RPC
 * the plugin registers (ListMirrors, the command in the client id; see the plugin), plus raw
 * Kafka requests and kcat: ApiVersions advertises the plugin's API; host services; the metadata
 * snapshot; a topic created by kcat reaches the listeners; a mirror topic created through
 * local_request (CreateTopics with mirror.name) is refused to Produce/DeleteRecords (pending:
 * NOT_ENOUGH_REPLICAS, read-only: READ_ONLY_TOPIC) until the plugin makes it writable; raw
 * appends come back byte for byte from Fetch; ABORT and MIRROR_PID_RESET control batches;
 * truncation; ISR wait and epoch bump (Metadata shows the epoch); controller records; local
 * requests whose handlers wait (long-poll Fetch woken by kcat, empty at MaxWaitMs, cut by the
 * local deadline, JoinGroup + SyncGroup, one cancelled at unload); a client that disconnects
 * cancels its token; the plugin's metrics on /metrics; SIGTERM -> exit 0; a
 * restart without the plugin still refuses writes to the mirror topic, now with READ_ONLY_TOPIC
 * (no mirror plugin on the broker: nothing would ever make it writable).
 *
 * smoke: the real kmirror.so loads with mirror.enable=true (and logs), is not loaded with
 * mirror.enable=false, and an incompatible plugin is refused with a clear line while the broker
 * keeps serving and the next plugin still loads.
 *
 * Waiting uses poll() on pipes, sockets and a pidfd, and retries with deadlines; no fixed sleeps
 * decide an outcome.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kbt_client.h"
#include "kp_batch.h"
#include "kp_errcode.h"
#include "kp_msgs.h"

#define DEADLINE_MS 20000

static int failures, checks;
static char workdir[256], logpath[512], datadir[512];
static const char *kbroker_path;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_ms(int ms)
{
    poll(NULL, 0, ms); /* between retries only */
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = calloc(1, (size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n)
        buf[0] = '\0';
    fclose(f);
    return buf;
}

static int log_contains(const char *needle)
{
    char *s = read_file(logpath);
    int r = strstr(s, needle) != NULL;
    free(s);
    return r;
}

/* ---- the broker process ---------------------------------------------------------------------- */

typedef struct broker {
    pid_t pid;
    int out;
    int port;
    int mport;
} broker_t;

static int broker_start(broker_t *b, const char *extra)
{
    char cfg[600], buf[8192], *line;
    size_t got = 0;
    int p[2];
    int64_t dl = now_ms() + DEADLINE_MS;
    FILE *f;

    snprintf(cfg, sizeof(cfg), "%s/server.properties", workdir);
    f = fopen(cfg, "w");
    if (!f)
        return -1;
    fprintf(f,
            "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs=%s\n"
            "metrics.listener=http://127.0.0.1:0\nnum.partitions=1\n%s\n",
            datadir, extra);
    fclose(f);
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    b->pid = fork();
    if (b->pid == 0) {
        int lfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        dup2(lfd, 2);
        execl(kbroker_path, kbroker_path, "--config", cfg, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    b->out = p[0];
    b->port = b->mport = -1;
    while (now_ms() < dl && got < sizeof(buf) - 1) {
        struct pollfd pf = {.fd = b->out, .events = POLLIN};
        ssize_t n;
        if (poll(&pf, 1, (int)(dl - now_ms())) <= 0)
            break;
        n = read(b->out, buf + got, sizeof(buf) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        line = strstr(buf, "listeners=PLAINTEXT://127.0.0.1:");
        if (line && strchr(line, '\n')) {
            b->port = atoi(line + strlen("listeners=PLAINTEXT://127.0.0.1:"));
            break;
        }
    }
    if (b->port > 0) {
        char *s = read_file(logpath), *m = NULL, *q = s;
        while ((q = strstr(q, "metrics on http://127.0.0.1:")) != NULL)
            m = q++;
        if (m)
            b->mport = atoi(m + strlen("metrics on http://127.0.0.1:"));
        free(s);
    }
    return b->port > 0 ? 0 : -1;
}

static int broker_stop(broker_t *b)
{
    int rc;
    kill(b->pid, SIGTERM);
    rc = kbt_wait_exit(b->pid, DEADLINE_MS);
    if (rc < 0) {
        kill(b->pid, SIGKILL);
        kbt_wait_exit(b->pid, DEADLINE_MS);
    }
    close(b->out);
    return rc;
}

/* ---- requests -------------------------------------------------------------------------------- */

/* Send @p req (message of API @p key at @p ver) with @p client_id on a new connection and decode
 * the response into @p resp (arrays in @p ar). 0, or -1 (connection closed, bad response). */
static int call(int port, int16_t key, int16_t ver, const char *client_id, const void *req,
                void *resp, kp_arena_t *ar)
{
    const kp_api_info_t *api = kp_api_lookup(key);
    kp_RequestHeader_t hdr;
    kp_writer_t wr;
    kp_reader_t rd;
    uint8_t *buf = NULL;
    size_t len;
    int fd, rc = -1;
    int16_t hv = kp_request_header_version(key, ver);
    int16_t rhv = kp_response_header_version(key, ver);

    fd = kbt_connect(port);
    if (fd < 0 || !api)
        return -1;
    kp_writer_init(&wr);
    kp_RequestHeader_init(&hdr);
    hdr.RequestApiKey = key;
    hdr.RequestApiVersion = ver;
    hdr.CorrelationId = 7;
    hdr.ClientId = (kp_str_t){client_id, (int32_t)strlen(client_id)};
    kp_write_int32(&wr, 0);
    kp_RequestHeader_encode(&wr, &hdr, hv);
    kp_msg_encode(api->req, &wr, req, ver);
    kp_writer_patch_int32(&wr, 0, (int32_t)(wr.len - 4));
    if (!wr.err && kbt_send_all(fd, wr.buf, wr.len) == 0 &&
        kbt_recv_frame(fd, &buf, &len, DEADLINE_MS) == 0) {
        kp_ResponseHeader_t rh;
        kp_reader_init(&rd, buf, len);
        kp_ResponseHeader_init(&rh);
        if (kp_ResponseHeader_decode(&rd, ar, &rh, rhv) == 0 && rh.CorrelationId == 7) {
            /* keep the bytes: decoded views point into them */
            uint8_t *keep = kp_arena_alloc(ar, len);
            if (keep) {
                memcpy(keep, buf, len);
                kp_reader_init(&rd, keep, len);
                kp_ResponseHeader_decode(&rd, ar, &rh, rhv);
                kp_msg_init(api->resp, resp);
                rc = kp_msg_decode(api->resp, &rd, ar, resp, ver) == 0 ? 0 : -1;
            }
        }
    }
    free(buf);
    kp_writer_free(&wr);
    close(fd);
    return rc;
}

/* A plugin command: every check must be "ok". Returns the response (arrays in @p ar) or NULL. */
static kp_ListMirrorsResponse_t *cmd(int port, const char *command, kp_arena_t *ar, bool quiet)
{
    kp_ListMirrorsRequest_t req;
    kp_ListMirrorsResponse_t *resp = kp_arena_alloc(ar, sizeof(*resp));
    kp_ListMirrorsRequest_init(&req);
    if (!resp || call(port, 98, 0, command, &req, resp, ar) != 0) {
        CHECK(false, "command %s: no response", command);
        return NULL;
    }
    for (int32_t i = 0; i < resp->Mirrors.cnt; i++) {
        const kp_ListMirrorsResponse_ListedMirror_t *m = &resp->Mirrors.v[i];
        bool ok = m->SourceBootstrap.len == 2 && !memcmp(m->SourceBootstrap.ptr, "ok", 2);
        if (quiet && !ok)
            return NULL;
        checks++;
        if (!ok) {
            failures++;
            fprintf(stderr, "FAIL plugin %s / %.*s: %.*s\n", command, (int)m->MirrorName.len,
                    m->MirrorName.ptr, (int)m->SourceBootstrap.len, m->SourceBootstrap.ptr);
        }
    }
    return resp;
}

static const kp_ListMirrorsResponse_ListedMirror_t *result(const kp_ListMirrorsResponse_t *r,
                                                           const char *name)
{
    for (int32_t i = 0; r && i < r->Mirrors.cnt; i++)
        if (r->Mirrors.v[i].MirrorName.len == (int32_t)strlen(name) &&
            !memcmp(r->Mirrors.v[i].MirrorName.ptr, name, strlen(name)))
            return &r->Mirrors.v[i];
    return NULL;
}

/* Retry a command until all its checks pass (listeners are asynchronous). */
static kp_ListMirrorsResponse_t *cmd_until(int port, const char *command, kp_arena_t *ar)
{
    int64_t dl = now_ms() + DEADLINE_MS;
    while (now_ms() < dl) {
        kp_ListMirrorsResponse_t *r = cmd(port, command, ar, true);
        if (r)
            return r;
        pause_ms(100);
    }
    return cmd(port, command, ar, false);
}

static int16_t produce(int port, const char *topic, int16_t ver)
{
    kp_ProduceRequest_t req;
    kp_ProduceRequest_TopicProduceData_t t;
    kp_ProduceRequest_PartitionProduceData_t p;
    kp_ProduceResponse_t resp;
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    kp_writer_t w;
    kp_arena_t ar;
    int16_t err = -1;

    kp_batch_opts_init(&o);
    kp_batch_builder_init(&bb, &o);
    kp_batch_builder_add(&bb, 1700000000000, (kp_bytes_t){(const uint8_t *)"k", 1},
                         (kp_bytes_t){(const uint8_t *)"client", 6}, NULL, 0);
    kp_writer_init(&w);
    kp_batch_builder_finish(&bb, &w);
    kp_batch_builder_free(&bb);
    kp_ProduceRequest_init(&req);
    kp_ProduceRequest_TopicProduceData_init(&t);
    kp_ProduceRequest_PartitionProduceData_init(&p);
    p.Index = 0;
    p.Records = (kp_bytes_t){w.buf, (int32_t)w.len};
    t.Name = (kp_str_t){topic, (int32_t)strlen(topic)};
    t.PartitionData.cnt = 1;
    t.PartitionData.v = &p;
    req.Acks = -1;
    req.TimeoutMs = 5000;
    req.TopicData.cnt = 1;
    req.TopicData.v = &t;
    kp_arena_init(&ar, 0);
    if (call(port, 0, ver, "kbh-producer", &req, &resp, &ar) == 0 && resp.Responses.cnt == 1 &&
        resp.Responses.v[0].PartitionResponses.cnt == 1)
        err = resp.Responses.v[0].PartitionResponses.v[0].ErrorCode;
    kp_arena_free(&ar);
    kp_writer_free(&w);
    return err;
}

static int16_t delete_records(int port, const char *topic, int64_t offset)
{
    kp_DeleteRecordsRequest_t req;
    kp_DeleteRecordsRequest_DeleteRecordsTopic_t t;
    kp_DeleteRecordsRequest_DeleteRecordsPartition_t p;
    kp_DeleteRecordsResponse_t resp;
    kp_arena_t ar;
    int16_t err = -1;

    kp_DeleteRecordsRequest_init(&req);
    kp_DeleteRecordsRequest_DeleteRecordsTopic_init(&t);
    kp_DeleteRecordsRequest_DeleteRecordsPartition_init(&p);
    p.PartitionIndex = 0;
    p.Offset = offset;
    t.Name = (kp_str_t){topic, (int32_t)strlen(topic)};
    t.Partitions.cnt = 1;
    t.Partitions.v = &p;
    req.Topics.cnt = 1;
    req.Topics.v = &t;
    req.TimeoutMs = 5000;
    kp_arena_init(&ar, 0);
    if (call(port, 21, 2, "kbh-admin", &req, &resp, &ar) == 0 && resp.Topics.cnt == 1 &&
        resp.Topics.v[0].Partitions.cnt == 1)
        err = resp.Topics.v[0].Partitions.v[0].ErrorCode;
    kp_arena_free(&ar);
    return err;
}

/* Fetch partition 0 from @p offset (read_uncommitted): the records bytes (malloc'd). */
static uint8_t *fetch(int port, const char *topic, int64_t offset, size_t *len)
{
    kp_FetchRequest_t req;
    kp_FetchRequest_FetchTopic_t t;
    kp_FetchRequest_FetchPartition_t p;
    kp_FetchResponse_t resp;
    kp_arena_t ar;
    uint8_t *out = NULL;

    kp_FetchRequest_init(&req);
    kp_FetchRequest_FetchTopic_init(&t);
    kp_FetchRequest_FetchPartition_init(&p);
    p.Partition = 0;
    p.FetchOffset = offset;
    p.PartitionMaxBytes = 1 << 20;
    p.CurrentLeaderEpoch = -1;
    t.Topic = (kp_str_t){topic, (int32_t)strlen(topic)};
    t.Partitions.cnt = 1;
    t.Partitions.v = &p;
    req.ReplicaId = -1;
    req.MaxWaitMs = 0;
    req.MinBytes = 0;
    req.MaxBytes = 1 << 20;
    req.Topics.cnt = 1;
    req.Topics.v = &t;
    kp_arena_init(&ar, 0);
    *len = 0;
    if (call(port, 1, 11, "kbh-consumer", &req, &resp, &ar) == 0 && resp.Responses.cnt == 1 &&
        resp.Responses.v[0].Partitions.cnt == 1 &&
        resp.Responses.v[0].Partitions.v[0].ErrorCode == 0) {
        const kp_bytes_t *r = &resp.Responses.v[0].Partitions.v[0].Records;
        if (getenv("KBH_DEBUG"))
            fprintf(stderr, "fetch %s@%" PRId64 ": hw %" PRId64 " lso %" PRId64 " %d bytes\n",
                    topic, offset, resp.Responses.v[0].Partitions.v[0].HighWatermark,
                    resp.Responses.v[0].Partitions.v[0].LastStableOffset, r->len);
        out = malloc(r->len > 0 ? (size_t)r->len : 1);
        if (out && r->len > 0) {
            memcpy(out, r->ptr, (size_t)r->len);
            *len = (size_t)r->len;
        }
    }
    kp_arena_free(&ar);
    return out;
}

/* Fetch until the end of the log (a fetch returns one segment at most, as Kafka's does). */
static uint8_t *fetch_all(int port, const char *topic, int64_t offset, size_t *len)
{
    uint8_t *all = NULL;
    size_t n = 0;
    for (int round = 0; round < 64; round++) {
        size_t got = 0;
        uint8_t *buf = fetch(port, topic, offset, &got);
        kp_batch_iter_t it;
        kp_batch_t bt;
        int64_t next = offset;
        if (!buf || !got) {
            free(buf);
            break;
        }
        kp_batch_iter_init(&it, buf, got, 0, 0);
        while (kp_batch_iter_next(&it, &bt) == 1)
            next = kp_batch_hdr_last_offset(&bt.hdr) + 1;
        all = realloc(all, n + got);
        memcpy(all + n, buf, got);
        n += got;
        free(buf);
        if (next == offset)
            break;
        offset = next;
    }
    *len = n;
    return all ? all : calloc(1, 1);
}

/* Leader epoch of partition 0 of @p topic from Metadata v12, or -2. */
static int32_t metadata_epoch(int port, const char *topic)
{
    kp_MetadataRequest_t req;
    kp_MetadataRequest_MetadataRequestTopic_t t;
    kp_MetadataResponse_t resp;
    kp_arena_t ar;
    int32_t e = -2;

    kp_MetadataRequest_init(&req);
    kp_MetadataRequest_MetadataRequestTopic_init(&t);
    t.Name = (kp_str_t){topic, (int32_t)strlen(topic)};
    req.Topics.cnt = 1;
    req.Topics.v = &t;
    kp_arena_init(&ar, 0);
    if (call(port, 3, 12, "kbh-admin", &req, &resp, &ar) == 0 && resp.Topics.cnt == 1 &&
        resp.Topics.v[0].ErrorCode == 0 && resp.Topics.v[0].Partitions.cnt >= 1)
        e = resp.Topics.v[0].Partitions.v[0].LeaderEpoch;
    kp_arena_free(&ar);
    return e;
}

/* ApiVersions v3: the advertised range of @p key (min*100+max... as two outputs). 0 if found. */
static int advertised(int port, int16_t key, int16_t *min, int16_t *max)
{
    kp_writer_t wr;
    kp_arena_t ar;
    kp_ApiVersionsResponse_t resp;
    uint8_t *buf = NULL;
    size_t len;
    int32_t corr;
    int fd = kbt_connect(port), r = -1;
    kp_writer_init(&wr);
    kp_arena_init(&ar, 0);
    if (fd >= 0 && kbt_build_apiversions(&wr, 3, 1, "kbh", "kbh-test", "1.0") == 0 &&
        kbt_send_all(fd, wr.buf, wr.len) == 0 && kbt_recv_frame(fd, &buf, &len, DEADLINE_MS) == 0 &&
        kbt_parse_apiversions(buf, len, 3, &ar, &corr, &resp) == 0) {
        for (int32_t i = 0; i < resp.ApiKeys.cnt; i++) {
            if (resp.ApiKeys.v[i].ApiKey == key) {
                *min = resp.ApiKeys.v[i].MinVersion;
                *max = resp.ApiKeys.v[i].MaxVersion;
                r = 0;
            }
        }
    }
    if (fd >= 0)
        close(fd);
    free(buf);
    kp_arena_free(&ar);
    kp_writer_free(&wr);
    return r;
}

static char *http_get_metrics(int port)
{
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
    int fd = kbt_connect(port);
    size_t cap = 1 << 20, got = 0;
    char *out = calloc(1, cap);
    int64_t dl = now_ms() + DEADLINE_MS;
    if (fd < 0)
        return out;
    kbt_send_all(fd, req, sizeof(req) - 1);
    while (got < cap - 1 && now_ms() < dl) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t n;
        if (poll(&p, 1, (int)(dl - now_ms())) <= 0)
            break;
        n = recv(fd, out + got, cap - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    return out;
}

static int run_cmd(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int run_cmd(const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    int st;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    st = system(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void hex(const uint8_t *b, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[b[i] >> 4];
        out[2 * i + 1] = hx[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Control types of the control batches in @p buf, in order (at most 8). */
static int control_types(const uint8_t *buf, size_t len, int *types, int max)
{
    kp_batch_iter_t it;
    kp_batch_t b;
    int n = 0;
    kp_batch_iter_init(&it, buf, len, 0, 0);
    while (kp_batch_iter_next(&it, &b) == 1 && n < max) {
        int16_t type = -1;
        if (kp_batch_hdr_is_control(&b.hdr)) {
            kp_batch_control_type(&b, &type);
            types[n++] = type;
        }
    }
    return n;
}

/* ---- the kbx test ---------------------------------------------------------------------------- */

static void test_kbx(const char *plugin)
{
    char extra[1024], kcat_out[600];
    broker_t b;
    kp_arena_t ar;
    kp_ListMirrorsResponse_t *r;
    const kp_ListMirrorsResponse_ListedMirror_t *m;
    int16_t min = -1, max = -1;
    int rc;

    snprintf(extra, sizeof(extra),
             "plugin.paths=mirror.enable=%s\nmirror.enable=true\nmirror.test.key=v1\n"
             "group.initial.rebalance.delay.ms=200\n",
             plugin);
    if (broker_start(&b, extra) != 0) {
        CHECK(false, "kbroker with the test plugin did not start");
        return;
    }
    kp_arena_init(&ar, 0);
    /* the kbx version grows with minors: match the fixed parts */
    CHECK(log_contains("plugin kbh_test 0.1.0 (build test, kbx ABI 1.") &&
              log_contains(", host 1.") && log_contains(") loaded"),
          "no load line");
    CHECK(advertised(b.port, 98, &min, &max) == 0 && min == 0 && max == 0,
          "ApiVersions does not advertise the plugin's API 98 v0 (%d..%d)", min, max);

    /* Host services. */
    cmd_until(b.port, "basic", &ar);
    CHECK(log_contains("INFO  [kbh_test] kbh.test: hello from kbh forged line"),
          "plugin log line missing or not sanitised");
    cmd(b.port, "snapshot", &ar, false);

    /* A topic created by a client (kcat, auto-creation) reaches the listeners. */
    rc = run_cmd("printf 'a\\nb\\n' | kcat -P -b 127.0.0.1:%d -t kbh-kcat -X "
                 "topic.metadata.refresh.interval.ms=100 >/dev/null 2>&1",
                 b.port);
    CHECK(rc == 0, "kcat -P failed (%d)", rc);
    cmd_until(b.port, "topic:kbh-kcat", &ar);

    /* A mirror topic through local_request (CreateTopics v7 with mirror.name, privileged). */
    r = cmd(b.port, "create:kbh-m1:mirrorA", &ar, false);
    cmd_until(b.port, "topic:kbh-m1", &ar);
    /* Read-only enforcement: pending by default (retriable), read-only, then writable. */
    CHECK(produce(b.port, "kbh-m1", 9) == 19, "Produce to a pending mirror topic: want 19");
    CHECK(delete_records(b.port, "kbh-m1", 0) == 19, "DeleteRecords pending: want 19");

    r = cmd(b.port, "append:kbh-m1", &ar, false);
    rc = produce(b.port, "kbh-m1", 9);
    CHECK(rc == KP_ERR_READ_ONLY_TOPIC, "Produce to a read-only topic: %d, want READ_ONLY_TOPIC",
          rc);
    rc = produce(b.port, "kbh-m1", 3);
    CHECK(rc == KP_ERR_READ_ONLY_TOPIC, "Produce v3 to a read-only topic: %d, want READ_ONLY_TOPIC",
          rc);
    rc = delete_records(b.port, "kbh-m1", 1);
    CHECK(rc == KP_ERR_READ_ONLY_TOPIC, "DeleteRecords read-only: %d, want READ_ONLY_TOPIC", rc);
    m = result(r, "log_append");
    if (m) {
        size_t len = 0;
        uint8_t *got = fetch_all(b.port, "kbh-m1", 0, &len);
        char *gh = malloc(len * 2 + 1);
        hex(got ? got : (const uint8_t *)"", len, gh);
        CHECK(got && (int32_t)strlen(gh) == m->SourceClusterId.len &&
                  !memcmp(gh, m->SourceClusterId.ptr, strlen(gh)),
              "Fetch did not return the appended batches byte for byte (%zu bytes)", len);
        free(gh);
        free(got);
    }
    rc = run_cmd("kcat -C -b 127.0.0.1:%d -t kbh-m1 -p 0 -o beginning -e -q -f '%%o:%%s\\n' > "
                 "%s/kcat.out 2>/dev/null",
                 b.port, workdir);
    snprintf(kcat_out, sizeof(kcat_out), "%s/kcat.out", workdir);
    {
        char *s = read_file(kcat_out);
        CHECK(rc == 0 && strstr(s, "0:a-value-0") && strstr(s, "2:a-value-2") &&
                  strstr(s, "10:b-value-0") && strstr(s, "11:b-value-1"),
              "kcat does not read the mirrored records at their offsets: %s", s);
        free(s);
    }

    /* Control batches: ABORT marker and MIRROR_PID_RESET (type 7). */
    r = cmd(b.port, "control:kbh-m1", &ar, false);
    {
        size_t len = 0;
        int types[8], n;
        uint8_t *got = fetch_all(b.port, "kbh-m1", 12, &len);
        n = got ? control_types(got, len, types, 8) : 0;
        CHECK(n == 2 && types[0] == 0 && types[1] == 7,
              "control batches after offset 12: %d (%d, %d) in %zu bytes", n, n > 0 ? types[0] : -1,
              n > 1 ? types[1] : -1, len);
        free(got);
    }
    /* Truncation back to the start of batch B (offset 10). */
    cmd(b.port, "truncate:kbh-m1:10", &ar, false);
    {
        size_t len = 0;
        uint8_t *got = fetch_all(b.port, "kbh-m1", 0, &len);
        int types[8];
        CHECK(got && control_types(got, len, types, 8) == 0, "control batches survived truncation");
        free(got);
    }
    /* ISR wait and epoch bump; Metadata shows the new epoch; writes go back to pending. */
    CHECK(metadata_epoch(b.port, "kbh-m1") == 0, "epoch before the bump");
    r = cmd(b.port, "bump:kbh-m1", &ar, false);
    CHECK(metadata_epoch(b.port, "kbh-m1") == 10, "Metadata epoch after the bump: %d",
          metadata_epoch(b.port, "kbh-m1"));
    CHECK(produce(b.port, "kbh-m1", 9) == 19, "Produce after the bump: want pending (19)");
    /* Writable lifts the refusal. */
    cmd(b.port, "mode:kbh-m1:2", &ar, false);
    CHECK(produce(b.port, "kbh-m1", 9) == 0, "Produce to a writable mirror topic");
    rc = run_cmd("echo x | kcat -P -b 127.0.0.1:%d -t kbh-m1 -p 0 >/dev/null 2>&1", b.port);
    CHECK(rc == 0, "kcat -P to the writable mirror topic failed");
    CHECK(delete_records(b.port, "kbh-m1", 1) == 0, "DeleteRecords on a writable mirror topic");

    /* An empty topic's log start can be moved anywhere. */
    cmd(b.port, "create:kbh-empty:mirrorA", &ar, false);
    cmd_until(b.port, "topic:kbh-empty", &ar);
    cmd(b.port, "setstart:kbh-empty", &ar, false);

    /* Controller records. */
    cmd(b.port, "records", &ar, false);

    /* Local requests whose handlers wait (connection-less deferred requests): a long-poll
     * Fetch that a record produced by kcat completes, while a CreateTopics behind it is not
     * held up; one that ends empty at MaxWaitMs; one cut by local_request's own deadline; a
     * one-member group (JoinGroup held for the rebalance, SyncGroup); and one left waiting
     * until the broker stops, which the host must cancel when it unloads the plugin. */
    cmd(b.port, "create:kbh-lf:", &ar, false);
    cmd_until(b.port, "topic:kbh-lf", &ar);
    cmd(b.port, "lfetch:kbh-lf:hello-local", &ar, false);
    rc = run_cmd("echo hello-local | kcat -P -b 127.0.0.1:%d -t kbh-lf -p 0 >/dev/null 2>&1",
                 b.port);
    CHECK(rc == 0, "kcat -P to kbh-lf failed (%d)", rc);
    cmd(b.port, "lfetch-wait", &ar, false);
    cmd(b.port, "lfetch-empty:kbh-lf", &ar, false);
    cmd(b.port, "lfetch-deadline:kbh-lf", &ar, false);
    cmd(b.port, "lgroup:kbh-lgroup", &ar, false);
    cmd(b.port, "lhold:kbh-lf", &ar, false);

    /* A client that goes away: the plugin's cancel op runs for its token. */
    {
        kp_writer_t wr;
        kp_RequestHeader_t hdr;
        int fd = kbt_connect(b.port);
        kp_writer_init(&wr);
        kp_RequestHeader_init(&hdr);
        hdr.RequestApiKey = 98;
        hdr.RequestApiVersion = 0;
        hdr.CorrelationId = 1;
        hdr.ClientId = (kp_str_t){"hold", 4};
        kp_write_int32(&wr, 0);
        kp_RequestHeader_encode(&wr, &hdr, 2);
        kp_write_uvarint(&wr, 0); /* empty ListMirrors request: no tagged fields */
        kp_writer_patch_int32(&wr, 0, (int32_t)(wr.len - 4));
        CHECK(fd >= 0 && kbt_send_all(fd, wr.buf, wr.len) == 0, "hold request not sent");
        kp_writer_free(&wr);
        /* wait until the handler has the token (the plugin histogram counts it), then go */
        pause_ms(200);
        if (fd >= 0)
            close(fd);
        cmd_until(b.port, "status", &ar);
    }

    /* Metrics. */
    {
        char *mt = http_get_metrics(b.mport);
        CHECK(strstr(mt, "kbhtest_requests{plugin=\"kbh\"} "), "kbx counter not on /metrics");
        CHECK(strstr(mt, "kbhtest_gauge_value{plugin=\"kbh\"} 7.25"), "kbx gauge not on /metrics");
        CHECK(strstr(mt, "kbhtest_latency_seconds_count{plugin=\"kbh\"}"),
              "kbx histogram not on /metrics");
        CHECK(strstr(mt, "kbroker_kbx_memory_bytes{plugin=\"kbh_test\"}"),
              "plugin memory accounting not on /metrics");
        CHECK(strstr(mt, "kbroker_kbx_plugin_info{plugin=\"kbh_test\""), "plugin info metric");
        free(mt);
    }

    rc = broker_stop(&b);
    CHECK(rc == 0, "kbroker exit status %d after SIGTERM", rc);
    CHECK(log_contains("kbh test plugin stopped") && log_contains("plugin kbh_test stopped"),
          "no clean plugin stop in the log");
    CHECK(!log_contains("left after fini"), "the test plugin left handles behind");
    CHECK(!log_contains("broke the kbx contract"), "a kbx contract violation was logged");
    CHECK(log_contains("held local fetch ended: status -12 calls 1"),
          "the waiting local Fetch was not cancelled once with KBX_ERR_SHUTDOWN at unload");

    /* Without the plugin (the one loaded under mirror.enable) nothing decides the mirror
     * topic's write mode: a topic not being stopped is read-only (not retriable). */
    if (broker_start(&b, "") == 0) {
        CHECK(produce(b.port, "kbh-m1", 9) == 147, "Produce without the plugin: want 147");
        CHECK(delete_records(b.port, "kbh-m1", 1) == 147, "DeleteRecords without the plugin");
        CHECK(produce(b.port, "kbh-kcat", 9) == 0, "Produce to an ordinary topic");
        CHECK(broker_stop(&b) == 0, "second kbroker exit status");
    } else {
        CHECK(false, "kbroker without plugins did not start");
    }
    {
        int16_t a = -1, z = -1;
        if (advertised(b.port, 24, &a, &z) == 0)
            fprintf(stderr, "note: AddPartitionsToTxn is served; read-only refusal for it is "
                            "tested by the transaction component\n");
    }
    kp_arena_free(&ar);
}

/* ---- the smoke test -------------------------------------------------------------------------- */

static void test_smoke(const char *kmirror, const char *bad)
{
    char extra[2048];
    broker_t b;
    int16_t min, max;

    /* 1. the real kmirror.so with mirror.enable=true */
    snprintf(extra, sizeof(extra), "plugin.paths=%s\nmirror.enable=true\n", kmirror);
    if (broker_start(&b, extra) != 0) {
        CHECK(false, "kbroker with kmirror did not start");
        return;
    }
    CHECK(log_contains("plugin kmirror 0.1.0") && log_contains("loaded from"),
          "no kmirror load line");
    CHECK(log_contains("[kmirror] kmirror.core: kmirror 0.1.0"), "kmirror's own start line");
    CHECK(advertised(b.port, 18, &min, &max) == 0, "ApiVersions with kmirror loaded");
    CHECK(broker_stop(&b) == 0, "exit status with kmirror");
    CHECK(log_contains("[kmirror] kmirror.core: kmirror stopped"), "kmirror's stop line");
    CHECK(!log_contains("left after fini"), "kmirror left handles behind");
    CHECK(truncate(logpath, 0) == 0, "cannot truncate the log");

    /* 2. mirror.enable=false: not loaded */
    snprintf(extra, sizeof(extra), "plugin.paths=%s\nmirror.enable=false\n", kmirror);
    if (broker_start(&b, extra) != 0) {
        CHECK(false, "kbroker with mirror.enable=false did not start");
        return;
    }
    CHECK(log_contains("not loaded: mirror.enable is off"), "no 'not loaded' line");
    CHECK(!log_contains("[kmirror]"), "kmirror ran with mirror.enable=false");
    CHECK(broker_stop(&b) == 0, "exit status with mirror.enable=false");
    CHECK(truncate(logpath, 0) == 0, "cannot truncate the log");

    /* 3. an incompatible plugin first, kmirror second */
    snprintf(extra, sizeof(extra), "plugin.paths=mirror.enable=%s,%s\nmirror.enable=true\n", bad,
             kmirror);
    if (broker_start(&b, extra) != 0) {
        CHECK(false, "kbroker with an incompatible plugin did not start");
        return;
    }
    CHECK(log_contains("plugin refused, kbroker continues without it") &&
              log_contains("was built for kbx ABI 2.0, this broker provides 1.") &&
              log_contains("(the major versions must be equal)"),
          "no clear refusal line for the incompatible plugin");
    CHECK(!log_contains("kbh_bad_plugin init must not run"), "the bad plugin's init ran");
    CHECK(advertised(b.port, 18, &min, &max) == 0, "the broker does not serve after a refusal");
    CHECK(log_contains("[kmirror] kmirror.core: kmirror 0.1.0"),
          "kmirror did not load after the refused plugin");
    CHECK(broker_stop(&b) == 0, "exit status after a refusal");
}

int main(int argc, char **argv)
{
    char tmpl[] = "/tmp/kbh_test.XXXXXX";
    const char *mode = argc > 1 ? argv[1] : "";

    signal(SIGPIPE, SIG_IGN);
    if (argc < 4 || (strcmp(mode, "kbx") && strcmp(mode, "smoke")) ||
        (!strcmp(mode, "smoke") && argc < 5)) {
        fprintf(stderr, "usage: kbh_test kbx KBROKER TEST_PLUGIN\n"
                        "       kbh_test smoke KBROKER KMIRROR BAD_PLUGIN\n");
        return 2;
    }
    kbroker_path = argv[2];
    if (!mkdtemp(tmpl))
        return 1;
    snprintf(workdir, sizeof(workdir), "%s", tmpl);
    snprintf(logpath, sizeof(logpath), "%s/kbroker.log", workdir);
    snprintf(datadir, sizeof(datadir), "%s/data", workdir);
    if (!strcmp(mode, "kbx"))
        test_kbx(argv[3]);
    else
        test_smoke(argv[3], argv[4]);
    if (failures) {
        char *s = read_file(logpath);
        fprintf(stderr, "---- kbroker log (%s) ----\n%s\n", logpath, s);
        free(s);
    } else {
        run_cmd("rm -rf %s", workdir);
    }
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
