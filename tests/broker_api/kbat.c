/*
 * kbat.c -- the broker/api test harness (see kbat.h).
 */
#include "kbat.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kp_batch.h"

int64_t kbat_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int kbat_tmpdir(char *out, size_t size)
{
    const char *t = getenv("TMPDIR");
    snprintf(out, size, "%s/kbat.XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(out) ? 0 : -1;
}

void kbat_rmrf(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[1024];
    if (!d) {
        unlink(dir);
        return;
    }
    while ((de = readdir(d))) {
        struct stat st;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        if (!lstat(p, &st) && S_ISDIR(st.st_mode))
            kbat_rmrf(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

int kbat_broker_start(kbat_broker_t *b, const char *dir, const char *const *kv)
{
    kb_server_conf_t sc;
    kb_net_listener_t l = {.name = "PLAINTEXT", .host = "127.0.0.1", .port = 0};
    kb_apisvc_opts_t o;
    char err[512], logs[600];

    memset(b, 0, sizeof(*b));
    snprintf(b->dir, sizeof(b->dir), "%s", dir);
    snprintf(logs, sizeof(logs), "%s/logs", dir);
    b->cfg = kb_config_new();
    kb_config_set(b->cfg, "node.id", "1", "test");
    kb_config_set(b->cfg, "listeners", "PLAINTEXT://127.0.0.1:0", "test");
    kb_config_set(b->cfg, "log.dirs", logs, "test");
    for (size_t i = 0; kv && kv[i]; i++)
        kb_config_set_kv(b->cfg, kv[i], "test");
    if (kb_config_finalize(b->cfg) != 0) {
        for (size_t i = 0; i < kb_config_error_cnt(b->cfg); i++)
            fprintf(stderr, "config: %s\n", kb_config_error(b->cfg, i));
        return -1;
    }
    b->reg = kb_api_registry_new();
    b->metrics = kb_metrics_new();
    memset(&o, 0, sizeof(o));
    o.cfg = b->cfg;
    o.reg = b->reg;
    b->svc = kb_apisvc_new(&o, err, sizeof(err));
    if (!b->svc) {
        fprintf(stderr, "kb_apisvc_new: %s\n", err);
        return -1;
    }
    kb_server_conf_defaults(&sc);
    sc.listeners = &l;
    sc.listener_cnt = 1;
    sc.num_network_threads = 2;
    sc.num_io_threads = 4;
    b->srv = kb_server_new(&sc, b->reg, b->metrics, err, sizeof(err));
    if (!b->srv) {
        fprintf(stderr, "kb_server_new: %s\n", err);
        return -1;
    }
    b->port = kb_server_listener_port(b->srv, "PLAINTEXT");
    if (kb_server_start(b->srv) != 0 || kb_apisvc_start(b->svc, b->srv) != 0)
        return -1;
    return 0;
}

void kbat_broker_stop(kbat_broker_t *b)
{
    if (b->srv)
        kb_server_stop(b->srv, 5000);
    kb_apisvc_free(b->svc);
    kb_server_free(b->srv);
    kb_api_registry_free(b->reg);
    kb_metrics_free(b->metrics);
    kb_config_free(b->cfg);
    memset(b, 0, sizeof(*b));
}

int kbat_connect(int port)
{
    struct sockaddr_in sa;
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static int kbat_send_all(int fd, const void *p, size_t len)
{
    const uint8_t *b = p;
    while (len > 0) {
        ssize_t n = send(fd, b, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

int kbat_send(int fd, int16_t key, int16_t ver, int32_t corr, const char *client_id,
              const void *req)
{
    const kp_api_info_t *api = kp_api_lookup(key);
    kp_RequestHeader_t hdr;
    kp_writer_t wr;
    int rc;
    if (!api)
        return -1;
    kp_RequestHeader_init(&hdr);
    hdr.RequestApiKey = key;
    hdr.RequestApiVersion = ver;
    hdr.CorrelationId = corr;
    hdr.ClientId =
        (kp_str_t){client_id ? client_id : "kbat", (int32_t)strlen(client_id ? client_id : "kbat")};
    kp_writer_init(&wr);
    kp_write_int32(&wr, 0);
    kp_RequestHeader_encode(&wr, &hdr, kp_request_header_version(key, ver));
    if (kp_msg_encode(api->req, &wr, req, ver) != 0) {
        fprintf(stderr, "kbat_send: cannot encode %s v%d: %s\n", api->name, ver,
                kp_err_str(wr.err));
        kp_writer_free(&wr);
        return -1;
    }
    kp_writer_patch_int32(&wr, 0, (int32_t)(wr.len - 4));
    rc = kbat_send_all(fd, wr.buf, wr.len);
    kp_writer_free(&wr);
    return rc;
}

static int kbat_read_full(int fd, void *p, size_t len, int64_t deadline)
{
    uint8_t *b = p;
    while (len > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int64_t left = deadline - kbat_now_ms();
        ssize_t n;
        if (left <= 0)
            return -2;
        if (poll(&pfd, 1, (int)left) <= 0)
            continue;
        n = recv(fd, b, len, 0);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return -1;
        }
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

int kbat_recv(int fd, int16_t key, int16_t ver, int32_t corr, void *resp, kp_arena_t *ar,
              int timeout_ms)
{
    const kp_api_info_t *api = kp_api_lookup(key);
    int64_t deadline = kbat_now_ms() + timeout_ms;
    uint8_t sz[4];
    int32_t n;
    uint8_t *buf;
    kp_reader_t rd;
    kp_ResponseHeader_t hdr;
    int rc;
    if (!api)
        return -1;
    rc = kbat_read_full(fd, sz, 4, deadline);
    if (rc)
        return rc;
    n = (int32_t)((uint32_t)sz[0] << 24 | (uint32_t)sz[1] << 16 | (uint32_t)sz[2] << 8 | sz[3]);
    if (n < 4)
        return -1;
    buf = kp_arena_alloc(ar, (size_t)n);
    if (!buf)
        return -1;
    rc = kbat_read_full(fd, buf, (size_t)n, deadline);
    if (rc)
        return rc;
    kp_reader_init(&rd, buf, (size_t)n);
    kp_ResponseHeader_init(&hdr);
    if (kp_ResponseHeader_decode(&rd, ar, &hdr, kp_response_header_version(key, ver)) != 0)
        return -1;
    if (hdr.CorrelationId != corr) {
        fprintf(stderr, "kbat_recv: correlation id %d, expected %d\n", hdr.CorrelationId, corr);
        return -1;
    }
    if (kp_msg_decode(api->resp, &rd, ar, resp, ver) != 0) {
        fprintf(stderr, "kbat_recv: cannot decode %s v%d: %s\n", api->name, ver,
                rd.errstr ? rd.errstr : "?");
        return -1;
    }
    if (kp_reader_remaining(&rd) != 0) {
        fprintf(stderr, "kbat_recv: %zu bytes left after %s v%d\n", kp_reader_remaining(&rd),
                api->name, ver);
        return -1;
    }
    return 0;
}

static int32_t kbat_corr = 1;

int kbat_call(int fd, int16_t key, int16_t ver, const void *req, void *resp, kp_arena_t *ar)
{
    int32_t corr = __atomic_fetch_add(&kbat_corr, 1, __ATOMIC_RELAXED);
    if (kbat_send(fd, key, ver, corr, NULL, req) != 0)
        return -1;
    return kbat_recv(fd, key, ver, corr, resp, ar, KBAT_WAIT_MS);
}

bool kbat_silent(int fd, int ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    return poll(&pfd, 1, ms) == 0;
}

int kbat_batch(kp_writer_t *out, int codec, int n, const char *prefix, int64_t pid, int16_t epoch,
               int32_t seq, bool txn, bool null_keys)
{
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    static _Atomic int64_t seq_ts;
    int64_t now = (int64_t)time(NULL) * 1000 + atomic_fetch_add(&seq_ts, n);
    int rc;
    kp_batch_opts_init(&o);
    o.codec = codec;
    o.producerId = pid;
    o.producerEpoch = epoch;
    o.baseSequence = seq;
    o.transactional = txn;
    kp_batch_builder_init(&bb, &o);
    for (int i = 0; i < n; i++) {
        char k[64], v[128];
        int kl = snprintf(k, sizeof(k), "k-%d", i);
        int vl = snprintf(v, sizeof(v), "%s-%d", prefix, i);
        kp_batch_builder_add(&bb, now + i,
                             null_keys ? KP_BYTES_NULL : (kp_bytes_t){(const uint8_t *)k, kl},
                             (kp_bytes_t){(const uint8_t *)v, vl}, NULL, 0);
    }
    rc = kp_batch_builder_finish(&bb, out);
    kp_batch_builder_free(&bb);
    return rc;
}

int16_t kbat_create_topic(int fd, const char *name, int32_t parts, const char *const *cfg_kv)
{
    return kbat_create_topic_rf(fd, name, parts, 1, cfg_kv);
}

int16_t kbat_create_topic_rf(int fd, const char *name, int32_t parts, int16_t rf,
                             const char *const *cfg_kv)
{
    kp_CreateTopicsRequest_t rq;
    kp_CreateTopicsResponse_t resp;
    kp_CreateTopicsRequest_CreatableTopic_t t;
    kp_CreateTopicsRequest_CreatableTopicConfig_t cfgs[16];
    kp_arena_t ar;
    int16_t ec = -100;
    int n = 0;
    kp_CreateTopicsRequest_init(&rq);
    kp_CreateTopicsRequest_CreatableTopic_init(&t);
    t.Name = (kp_str_t){name, (int32_t)strlen(name)};
    t.NumPartitions = parts;
    t.ReplicationFactor = rf;
    for (; cfg_kv && cfg_kv[2 * n] && n < 16; n++) {
        kp_CreateTopicsRequest_CreatableTopicConfig_init(&cfgs[n]);
        cfgs[n].Name = (kp_str_t){cfg_kv[2 * n], (int32_t)strlen(cfg_kv[2 * n])};
        cfgs[n].Value = (kp_str_t){cfg_kv[2 * n + 1], (int32_t)strlen(cfg_kv[2 * n + 1])};
    }
    t.Configs.v = cfgs;
    t.Configs.cnt = n;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    rq.TimeoutMs = 10000;
    kp_arena_init(&ar, 0);
    kp_CreateTopicsResponse_init(&resp);
    if (kbat_call(fd, KP_APIKEY_CreateTopics, 7, &rq, &resp, &ar) == 0 && resp.Topics.cnt == 1)
        ec = resp.Topics.v[0].ErrorCode;
    kp_arena_free(&ar);
    return ec;
}

int16_t kbat_produce(int fd, int16_t ver, const char *topic, int32_t partition, int16_t acks,
                     const kp_writer_t *batch, int64_t *base, const char *txn_id)
{
    kp_ProduceRequest_t rq;
    kp_ProduceResponse_t resp;
    kp_ProduceRequest_TopicProduceData_t td;
    kp_ProduceRequest_PartitionProduceData_t pd;
    kp_arena_t ar;
    int16_t ec = -100;
    kp_ProduceRequest_init(&rq);
    kp_ProduceRequest_TopicProduceData_init(&td);
    kp_ProduceRequest_PartitionProduceData_init(&pd);
    rq.Acks = acks;
    rq.TimeoutMs = 5000;
    if (txn_id)
        rq.TransactionalId = (kp_str_t){txn_id, (int32_t)strlen(txn_id)};
    td.Name = (kp_str_t){topic, (int32_t)strlen(topic)};
    pd.Index = partition;
    pd.Records = (kp_bytes_t){batch->buf, (int32_t)batch->len};
    td.PartitionData.v = &pd;
    td.PartitionData.cnt = 1;
    rq.TopicData.v = &td;
    rq.TopicData.cnt = 1;
    kp_arena_init(&ar, 0);
    kp_ProduceResponse_init(&resp);
    if (acks == 0) {
        int32_t corr = 424242;
        ec = kbat_send(fd, KP_APIKEY_Produce, ver, corr, NULL, &rq) == 0 ? 0 : -100;
    } else if (kbat_call(fd, KP_APIKEY_Produce, ver, &rq, &resp, &ar) == 0 &&
               resp.Responses.cnt == 1 && resp.Responses.v[0].PartitionResponses.cnt == 1) {
        ec = resp.Responses.v[0].PartitionResponses.v[0].ErrorCode;
        if (base)
            *base = resp.Responses.v[0].PartitionResponses.v[0].BaseOffset;
    }
    kp_arena_free(&ar);
    return ec;
}

int kbat_count_records(kp_bytes_t recs, int64_t *first_offset, int64_t *last_offset)
{
    kp_batch_iter_t it;
    kp_batch_t b;
    int n = 0, r;
    if (first_offset)
        *first_offset = -1;
    if (last_offset)
        *last_offset = -1;
    if (recs.len <= 0)
        return 0;
    kp_batch_iter_init(&it, recs.ptr, (size_t)recs.len, 0, 0);
    while ((r = kp_batch_iter_next(&it, &b)) == 1) {
        kp_record_iter_t ri;
        kp_record_t rec;
        kp_writer_t scratch;
        int rr;
        if (kp_batch_hdr_is_control(&b.hdr))
            continue;
        kp_writer_init(&scratch);
        if (kp_record_iter_init(&ri, &b, &scratch, 64 << 20) != 0) {
            kp_writer_free(&scratch);
            return -1;
        }
        while ((rr = kp_record_iter_next(&ri, &rec)) == 1) {
            if (first_offset && *first_offset < 0)
                *first_offset = rec.offset;
            if (last_offset)
                *last_offset = rec.offset;
            n++;
        }
        kp_writer_free(&scratch);
        if (rr < 0)
            return -1;
    }
    return r < 0 ? -1 : n;
}
