/*
 * test_client_fake.c -- kp_client against a scripted fake Kafka server (a thread with a
 * listening socket on 127.0.0.1) (label: unit).
 *
 * The fake server answers ApiVersions (normally, or refusing a too-new version) and then
 * follows a per-test script: echo, stay silent, close mid-response, send a wrong correlation
 * id, an oversize frame, a slow big frame, or garbage. Every test counts callbacks per request
 * to check "exactly once". Waiting is by polling the client with deadlines, never sleeping.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include "kc_client.h"
#include "kp_msgs.h"

#define WAIT_MS 10000

/* ---- fake server ------------------------------------------------------------------------ */

enum {
    FS_ECHO,       /* answer every request (except Produce) with corr + its body */
    FS_SILENT,     /* read requests, never answer */
    FS_HALF,       /* after 3 requests: half a response, then close */
    FS_BADCORR,    /* answer the first request with a wrong correlation id */
    FS_OVERSIZE,   /* answer with a 1 GiB length */
    FS_SLOWBIG,    /* announce 900000 bytes, send 10, then nothing */
    FS_GARBAGE,    /* answer with pseudo-random bytes */
    FS_GARBAGE_HS, /* answer ApiVersions with pseudo-random bytes */
    FS_BATCH2,     /* read two requests, then answer both */
    FS_BIG,        /* answer with a 3 MiB body (byte i = i * 7) */
    FS_HS_SILENT,  /* never answer ApiVersions */
};

#define BIG_LEN (3u << 20)

typedef struct fs_s {
    int lfd, port, mode;
    int16_t apiv_max; /* highest ApiVersions version served (refuses newer like Kafka) */
    pthread_t thr;
    atomic_int stop;
    atomic_int requests; /* non-handshake requests read */
    atomic_int conns;    /* connections accepted */
    int16_t hs_vers[8];  /* ApiVersions versions seen */
    atomic_int n_hs;
} fs_t;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int fs_write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Read exactly n bytes, giving up when the server stops or the peer closes. */
static int fs_read_n(fs_t *fs, int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        ssize_t r;
        if (atomic_load(&fs->stop))
            return -1;
        if (poll(&pf, 1, 20) <= 0)
            continue;
        r = recv(fd, b, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* One request frame; returns its length (body in *buf, malloc) or -1. */
static int fs_read_frame(fs_t *fs, int fd, uint8_t **buf)
{
    uint8_t h[4];
    uint32_t n;
    if (fs_read_n(fs, fd, h, 4) != 0)
        return -1;
    n = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    if (n < 8 || n > (1u << 24))
        return -1;
    *buf = malloc(n);
    if (fs_read_n(fs, fd, *buf, n) != 0) {
        free(*buf);
        return -1;
    }
    return (int)n;
}

static int16_t rd16(const uint8_t *p)
{
    return (int16_t)(p[0] << 8 | p[1]);
}

static int32_t rd32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

/* Send a response frame: corr, a tag byte if the header is flexible, body. */
static int fs_respond(int fd, int32_t corr, int flex, const void *body, size_t len)
{
    kp_writer_t wr;
    int r;
    kp_writer_init(&wr);
    kp_write_int32(&wr, (int32_t)(4 + (flex ? 1 : 0) + len));
    kp_write_int32(&wr, corr);
    if (flex)
        kp_write_uvarint(&wr, 0);
    kp_write_raw(&wr, body, len);
    r = fs_write_all(fd, wr.buf, wr.len);
    kp_writer_free(&wr);
    return r;
}

static void fs_apiversions(fs_t *fs, int fd, int16_t ver, int32_t corr)
{
    static const int16_t keys[] = {KP_APIKEY_Produce, KP_APIKEY_Fetch, KP_APIKEY_Metadata,
                                   KP_APIKEY_ApiVersions};
    kp_ApiVersionsResponse_t resp;
    kp_ApiVersionsResponse_ApiVersion_t av[4];
    kp_writer_t wr;
    int n = atomic_fetch_add(&fs->n_hs, 1);
    if (n < 8)
        fs->hs_vers[n] = ver;
    kp_ApiVersionsResponse_init(&resp);
    for (int i = 0; i < 4; i++) {
        const kp_api_info_t *a = kp_api_lookup(keys[i]);
        memset(&av[i], 0, sizeof(av[i]));
        av[i].ApiKey = keys[i];
        av[i].MinVersion = a->min_ver;
        av[i].MaxVersion = keys[i] == KP_APIKEY_ApiVersions ? fs->apiv_max : a->max_ver;
    }
    resp.ApiKeys.v = av;
    resp.ApiKeys.cnt = 4;
    if (ver > fs->apiv_max) {
        /* like Kafka: v0 layout, UNSUPPORTED_VERSION, only our ApiVersions range */
        resp.ErrorCode = KP_ERR_UNSUPPORTED_VERSION;
        resp.ApiKeys.v = &av[3];
        resp.ApiKeys.cnt = 1;
        ver = 0;
    }
    kp_writer_init(&wr);
    CU_ASSERT_EQUAL(kp_ApiVersionsResponse_encode(&wr, &resp, ver), 0);
    fs_respond(fd, corr, 0, wr.buf, wr.len);
    kp_writer_free(&wr);
}

static void fs_garbage(int fd, unsigned seed, size_t n)
{
    uint8_t buf[4096];
    for (size_t i = 0; i < n && i < sizeof(buf); i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (uint8_t)(seed >> 16);
    }
    fs_write_all(fd, buf, n < sizeof(buf) ? n : sizeof(buf));
}

static void fs_serve(fs_t *fs, int fd)
{
    uint8_t *f;
    int n, seen = 0;
    int32_t held[2];
    int16_t held_key[2], held_ver[2];
    uint8_t *held_buf[2];
    int held_len[2];
    while ((n = fs_read_frame(fs, fd, &f)) > 0) {
        int16_t key = rd16(f), ver = rd16(f + 2);
        int32_t corr = rd32(f + 4);
        int flex = kp_response_header_version(key, ver) == 1;
        if (key == KP_APIKEY_ApiVersions) {
            if (fs->mode == FS_HS_SILENT)
                atomic_fetch_add(&fs->n_hs, 1);
            else if (fs->mode == FS_GARBAGE_HS)
                fs_garbage(fd, 7, 300);
            else
                fs_apiversions(fs, fd, ver, corr);
            free(f);
            continue;
        }
        atomic_fetch_add(&fs->requests, 1);
        seen++;
        switch (fs->mode) {
        case FS_ECHO:
            if (key != KP_APIKEY_Produce) {
                uint8_t out[4096 + 4];
                size_t bl = (size_t)n < sizeof(out) - 4 ? (size_t)n : sizeof(out) - 4;
                memcpy(out, f + 4, 4); /* the correlation id, then the whole request */
                memcpy(out + 4, f, bl);
                fs_respond(fd, corr, flex, out, bl + 4);
            }
            break;
        case FS_SILENT:
            break;
        case FS_BIG: {
            uint8_t *big = malloc(BIG_LEN);
            for (uint32_t i = 0; i < BIG_LEN; i++)
                big[i] = (uint8_t)(i * 7);
            fs_respond(fd, corr, flex, big, BIG_LEN);
            free(big);
            break;
        }
        case FS_HALF:
            if (seen == 3) {
                uint8_t h[9] = {0, 0, 0, 100}; /* 100 bytes announced, 5 sent */
                memcpy(h + 4, f + 4, 4);
                fs_write_all(fd, h, sizeof(h));
                free(f);
                return;
            }
            break;
        case FS_BADCORR:
            fs_respond(fd, corr + 100, flex, "x", 1);
            break;
        case FS_OVERSIZE: {
            uint8_t h[20] = {0x40, 0, 0, 0};
            fs_write_all(fd, h, sizeof(h));
            break;
        }
        case FS_SLOWBIG: {
            uint8_t h[14] = {0, 0x0d, 0xbb, 0xa0}; /* 900000 */
            memcpy(h + 4, f + 4, 4);
            fs_write_all(fd, h, sizeof(h));
            break;
        }
        case FS_GARBAGE:
            fs_garbage(fd, (unsigned)seen, 2000);
            break;
        case FS_BATCH2:
            held[seen - 1] = corr;
            held_key[seen - 1] = key;
            held_ver[seen - 1] = ver;
            held_buf[seen - 1] = f;
            held_len[seen - 1] = n;
            f = NULL;
            if (seen == 2)
                for (int i = 0; i < 2; i++) {
                    uint8_t out[4096 + 4];
                    size_t bl = (size_t)held_len[i] < 4096 ? (size_t)held_len[i] : 4096;
                    memcpy(out, held_buf[i] + 4, 4);
                    memcpy(out + 4, held_buf[i], bl);
                    fs_respond(fd, held[i],
                               kp_response_header_version(held_key[i], held_ver[i]) == 1, out,
                               bl + 4);
                    free(held_buf[i]);
                }
            break;
        }
        free(f);
    }
    if (fs->mode == FS_BATCH2 && seen == 1)
        free(held_buf[0]);
}

static void *fs_main(void *arg)
{
    fs_t *fs = arg;
    while (!atomic_load(&fs->stop)) {
        struct pollfd pf = {.fd = fs->lfd, .events = POLLIN};
        int fd;
        if (poll(&pf, 1, 20) <= 0)
            continue;
        fd = accept(fs->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        atomic_fetch_add(&fs->conns, 1);
        fs_serve(fs, fd);
        close(fd);
    }
    return NULL;
}

/* A free loopback port (bound once, then released). */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;
    CU_ASSERT_FATAL(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    getsockname(fd, (struct sockaddr *)&a, &al);
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void fs_start(fs_t *fs, int mode, int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    int one = 1;
    memset(fs, 0, sizeof(*fs));
    fs->mode = mode;
    fs->apiv_max = 3;
    a.sin_port = htons((uint16_t)port);
    fs->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    setsockopt(fs->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    CU_ASSERT_FATAL(bind(fs->lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CU_ASSERT_FATAL(listen(fs->lfd, 16) == 0);
    getsockname(fs->lfd, (struct sockaddr *)&a, &al);
    fs->port = ntohs(a.sin_port);
}

static void fs_run(fs_t *fs)
{
    CU_ASSERT_FATAL(pthread_create(&fs->thr, NULL, fs_main, fs) == 0);
}

static void fs_stop(fs_t *fs)
{
    atomic_store(&fs->stop, 1);
    pthread_join(fs->thr, NULL);
    close(fs->lfd);
}

/* ---- client side helpers ---------------------------------------------------------------- */

#define MAXR 4096

typedef struct res_s {
    int calls;
    int err;
    int16_t ver;
    size_t len;
    int32_t echo_corr;
    int order;       /* callback sequence number */
    bool pattern_ok; /* FS_BIG body verified */
} res_t;

typedef struct tc_s {
    res_t r[MAXR];
    int ncalls;
} tc_t;

static tc_t T;

static void on_resp(kc_client_t *c, int err, int16_t ver, const uint8_t *body, size_t len,
                    void *opaque)
{
    res_t *r = opaque;
    (void)c;
    r->calls++;
    r->err = err;
    r->ver = ver;
    r->len = len;
    r->order = T.ncalls++;
    if (err == KC_E_OK && len >= 4)
        r->echo_corr = rd32(body);
    if (err == KC_E_OK && len == BIG_LEN) {
        r->pattern_ok = true;
        for (size_t i = 0; i < len && r->pattern_ok; i++)
            r->pattern_ok = body[i] == (uint8_t)(i * 7);
    }
}

static void log_cb(void *opaque, int level, const char *msg)
{
    (void)opaque;
    if (getenv("KCT_LOG"))
        fprintf(stderr, "kc[%d] %s\n", level, msg);
}

static kc_client_t *mk_client(int max_resp, int backoff)
{
    kc_opts_t o;
    char err[128];
    kc_client_t *c;
    kc_opts_init(&o);
    o.client_id = "kct";
    o.log_cb = log_cb;
    o.log_level = KC_LOG_DEBUG;
    o.connect_timeout_ms = 3000;
    if (max_resp)
        o.max_response_size = max_resp;
    if (backoff) {
        o.reconnect_backoff_ms = backoff;
        o.reconnect_backoff_max_ms = backoff * 4;
    }
    c = kc_client_new(&o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    memset(&T, 0, sizeof(T));
    return c;
}

static bool all_called(int n)
{
    for (int i = 0; i < n; i++)
        if (T.r[i].calls == 0)
            return false;
    return true;
}

/* Poll until @p n results are in, or the deadline. */
static bool run_until(kc_client_t *c, int n, int ms)
{
    int64_t dl = now_ms() + ms;
    while (!all_called(n) && now_ms() < dl)
        kc_client_poll(c, 20);
    return all_called(n);
}

static kc_metrics_t metrics(kc_client_t *c)
{
    kc_metrics_t m = {.struct_size = sizeof(m)};
    kc_client_metrics(c, &m);
    return m;
}

static const uint8_t MD_V1_BODY[4] = {0, 0, 0, 0}; /* Metadata v1: no topics */

static int64_t md_req(kc_client_t *c, int32_t node, int i, int timeout)
{
    return kc_request_raw(c, node, KP_APIKEY_Metadata, 1, MD_V1_BODY, 4, timeout, 0, on_resp,
                          &T.r[i]);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_echo_and_negotiation(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(0, 0);
    kp_MetadataRequest_t mr;
    kp_ListOffsetsRequest_t lr;
    int16_t lo, hi;
    kc_metrics_t m;
    fs_start(&fs, FS_ECHO, 0);
    fs_run(&fs);
    CU_ASSERT_EQUAL(kc_client_node_set(c, 1, "127.0.0.1", fs.port), 0);
    CU_ASSERT_EQUAL(kc_client_api_range(c, 1, KP_APIKEY_Metadata, &lo, &hi), KC_E_NO_VERSION);
    CU_ASSERT(md_req(c, 1, 0, WAIT_MS) > 0);
    kp_MetadataRequest_init(&mr);
    mr.Topics.cnt = 0;
    /* caller max above the broker's: the broker's max is used (flexible header both ways) */
    CU_ASSERT(
        kc_request_msg(c, 1, &kp_MetadataRequest_desc, 99, &mr, WAIT_MS, 0, on_resp, &T.r[1]) > 0);
    /* caller max below: the caller's */
    CU_ASSERT(kc_request_msg(c, 1, &kp_MetadataRequest_desc, 4, &mr, WAIT_MS, 0, on_resp, &T.r[2]) >
              0);
    /* an API the server does not advertise, and a range above what it serves */
    kp_ListOffsetsRequest_init(&lr);
    CU_ASSERT(kc_request_msg(c, 1, &kp_ListOffsetsRequest_desc, -1, &lr, WAIT_MS, 0, on_resp,
                             &T.r[3]) > 0);
    CU_ASSERT(kc_request_raw(c, 1, KP_APIKEY_ApiVersions, 5, "", 0, WAIT_MS, 0, on_resp, &T.r[4]) >
              0);
    CU_ASSERT_FATAL(run_until(c, 5, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_OK);
    CU_ASSERT_EQUAL(T.r[0].ver, 1);
    CU_ASSERT_EQUAL(T.r[0].len, 4 + 8 + 2 + 3 + 4); /* corr + header(key,ver,corr,"kct") + body */
    CU_ASSERT_EQUAL(T.r[1].err, KC_E_OK);
    CU_ASSERT_EQUAL(T.r[1].ver, kp_MetadataRequest_desc.max_ver);
    CU_ASSERT_EQUAL(T.r[2].err, KC_E_OK);
    CU_ASSERT_EQUAL(T.r[2].ver, 4);
    CU_ASSERT_EQUAL(T.r[3].err, KC_E_NO_VERSION);
    CU_ASSERT_EQUAL(T.r[4].err, KC_E_NO_VERSION);
    /* each answer carries its own request's correlation id, in order */
    CU_ASSERT(T.r[0].echo_corr > 0 && T.r[1].echo_corr == T.r[0].echo_corr + 1 &&
              T.r[2].echo_corr == T.r[1].echo_corr + 1);
    CU_ASSERT_EQUAL(kc_client_api_range(c, 1, KP_APIKEY_Metadata, &lo, &hi), 0);
    CU_ASSERT_EQUAL(hi, kp_MetadataRequest_desc.max_ver);
    CU_ASSERT_EQUAL(fs.hs_vers[0], 3);
    m = metrics(c);
    CU_ASSERT_EQUAL(m.connects, 1);
    CU_ASSERT_EQUAL(m.connections_up, 1);
    CU_ASSERT_EQUAL(m.responses, 3); /* the handshake is not counted */
    CU_ASSERT_EQUAL(m.errors, 2);
    CU_ASSERT(m.bytes_sent > 0 && m.bytes_received > 0);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_apiversions_fallback(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(0, 0);
    fs_start(&fs, FS_ECHO, 0);
    fs.apiv_max = 2; /* refuses v3: the client retries at v2 */
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    CU_ASSERT(md_req(c, 1, 0, WAIT_MS) > 0);
    CU_ASSERT_FATAL(run_until(c, 1, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_OK);
    CU_ASSERT_EQUAL(atomic_load(&fs.n_hs), 2);
    CU_ASSERT_EQUAL(fs.hs_vers[0], 3);
    CU_ASSERT_EQUAL(fs.hs_vers[1], 2);
    CU_ASSERT_EQUAL(atomic_load(&fs.conns), 1); /* same connection */
    kc_client_destroy(c);
    fs_stop(&fs);

    /* a server that knows only v0 */
    c = mk_client(0, 0);
    fs_start(&fs, FS_ECHO, 0);
    fs.apiv_max = 0;
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    CU_ASSERT(md_req(c, 1, 0, WAIT_MS) > 0);
    CU_ASSERT_FATAL(run_until(c, 1, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_OK);
    CU_ASSERT_EQUAL(fs.hs_vers[1], 0);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_silent_timeout(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(0, 0);
    int64_t t0;
    fs_start(&fs, FS_SILENT, 0);
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    t0 = now_ms();
    CU_ASSERT(md_req(c, 1, 0, 300) > 0);
    CU_ASSERT_FATAL(run_until(c, 1, WAIT_MS));
    CU_ASSERT(now_ms() - t0 >= 300);
    CU_ASSERT(now_ms() - t0 < 5000);
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_TIMED_OUT);
    CU_ASSERT(kc_err_retriable(T.r[0].err));
    CU_ASSERT_EQUAL(metrics(c).timeouts, 1);
    CU_ASSERT_EQUAL(metrics(c).disconnects, 1); /* closed after the in-flight timeout */
    for (int i = 0; i < 5; i++)
        kc_client_poll(c, 10);
    CU_ASSERT_EQUAL(T.r[0].calls, 1);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_refused_then_up(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(0, 30);
    int port = free_port();
    int64_t dl;
    kc_client_node_set(c, 1, "127.0.0.1", port);
    CU_ASSERT(md_req(c, 1, 0, WAIT_MS) > 0);
    /* nobody listens: the client retries with backoff */
    dl = now_ms() + WAIT_MS;
    while (metrics(c).connect_failures < 3 && now_ms() < dl)
        kc_client_poll(c, 20);
    CU_ASSERT_FATAL(metrics(c).connect_failures >= 3);
    CU_ASSERT_EQUAL(T.r[0].calls, 0); /* still queued */
    CU_ASSERT_EQUAL(metrics(c).queued, 1);
    fs_start(&fs, FS_ECHO, port);
    fs_run(&fs);
    CU_ASSERT_FATAL(run_until(c, 1, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_OK);
    CU_ASSERT(metrics(c).connects >= 4);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_close_mid_response(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(0, 0);
    fs_start(&fs, FS_HALF, 0);
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    for (int i = 0; i < 3; i++)
        CU_ASSERT(md_req(c, 1, i, WAIT_MS) > 0);
    CU_ASSERT_FATAL(run_until(c, 3, WAIT_MS));
    for (int i = 0; i < 10; i++)
        kc_client_poll(c, 10);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(T.r[i].calls, 1);
        CU_ASSERT_EQUAL(T.r[i].err, KC_E_TRANSPORT);
    }
    CU_ASSERT_EQUAL(metrics(c).disconnects, 1);
    CU_ASSERT_EQUAL(metrics(c).in_flight, 0);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_wrong_correlation(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(0, 0);
    fs_start(&fs, FS_BADCORR, 0);
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    CU_ASSERT(md_req(c, 1, 0, WAIT_MS) > 0);
    CU_ASSERT(md_req(c, 1, 1, WAIT_MS) > 0);
    CU_ASSERT_FATAL(run_until(c, 2, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_PROTOCOL);
    CU_ASSERT_EQUAL(T.r[1].err, KC_E_TRANSPORT);
    CU_ASSERT_EQUAL(T.r[0].calls + T.r[1].calls, 2);
    CU_ASSERT_EQUAL(metrics(c).protocol_errors, 1);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_oversize_and_slow_frames(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(1 << 20, 0);
    fs_start(&fs, FS_OVERSIZE, 0);
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    CU_ASSERT(md_req(c, 1, 0, WAIT_MS) > 0);
    CU_ASSERT_FATAL(run_until(c, 1, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_TOO_LARGE);
    /* refused before allocating: only the small ApiVersions answer was ever buffered */
    CU_ASSERT(metrics(c).rx_buffer_peak < 4096);
    CU_ASSERT_EQUAL(metrics(c).protocol_errors, 1);
    kc_client_destroy(c);
    fs_stop(&fs);

    /* a length under the limit, but the bytes never come: memory follows the bytes */
    c = mk_client(1 << 20, 0);
    fs_start(&fs, FS_SLOWBIG, 0);
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    CU_ASSERT(md_req(c, 1, 0, 400) > 0);
    CU_ASSERT_FATAL(run_until(c, 1, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_TIMED_OUT);
    CU_ASSERT(metrics(c).rx_buffer_peak > 0);
    CU_ASSERT(metrics(c).rx_buffer_peak <= 65536);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_garbage(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(1 << 20, 0);
    fs_start(&fs, FS_GARBAGE, 0);
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    for (int i = 0; i < 3; i++)
        CU_ASSERT(md_req(c, 1, i, 2000) > 0);
    CU_ASSERT_FATAL(run_until(c, 3, WAIT_MS));
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(T.r[i].calls, 1);
        CU_ASSERT_NOT_EQUAL(T.r[i].err, KC_E_OK);
    }
    CU_ASSERT(metrics(c).protocol_errors >= 1);
    kc_client_destroy(c);
    fs_stop(&fs);

    /* garbage instead of the ApiVersions answer: the connection fails, the queued request
     * waits for a good connection until its deadline */
    c = mk_client(1 << 20, 50);
    fs_start(&fs, FS_GARBAGE_HS, 0);
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    CU_ASSERT(md_req(c, 1, 0, 500) > 0);
    CU_ASSERT_FATAL(run_until(c, 1, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_TIMED_OUT);
    CU_ASSERT(metrics(c).connect_failures >= 1);
    CU_ASSERT(metrics(c).protocol_errors >= 1);
    CU_ASSERT_EQUAL(metrics(c).connections_up, 0);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_destroy_in_flight(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(0, 0);
    int64_t dl;
    fs_start(&fs, FS_SILENT, 0);
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    kc_client_node_set(c, 2, "127.0.0.1", free_port()); /* refused: stays queued */
    for (int i = 0; i < 20; i++)
        CU_ASSERT(md_req(c, 1, i, WAIT_MS) > 0);
    for (int i = 20; i < 25; i++)
        CU_ASSERT(md_req(c, 2, i, WAIT_MS) > 0);
    dl = now_ms() + WAIT_MS;
    while (atomic_load(&fs.requests) < 20 && now_ms() < dl)
        kc_client_poll(c, 20);
    CU_ASSERT_EQUAL_FATAL(metrics(c).in_flight, 20);
    CU_ASSERT(kc_cancel(c, md_req(c, 1, 25, WAIT_MS)) == 0); /* cancelled, not yet run */
    for (int i = 26; i < 30; i++)
        CU_ASSERT(md_req(c, 1, i, WAIT_MS) > 0); /* submitted, never polled */
    kc_client_destroy(c);
    for (int i = 0; i < 30; i++) {
        CU_ASSERT_EQUAL(T.r[i].calls, 1);
        CU_ASSERT_EQUAL(T.r[i].err, i == 25 ? KC_E_CANCELLED : KC_E_DESTROYED);
    }
    fs_stop(&fs);
}

static void test_cancel(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(0, 0);
    int64_t id, dl;
    /* queued on an unreachable node */
    kc_client_node_set(c, 2, "127.0.0.1", free_port());
    id = md_req(c, 2, 0, WAIT_MS);
    CU_ASSERT(id > 0);
    kc_client_poll(c, 0);
    CU_ASSERT_EQUAL(kc_cancel(c, id), 0);
    CU_ASSERT_EQUAL(kc_cancel(c, id), KC_E_INVALID);
    CU_ASSERT_FATAL(run_until(c, 1, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_CANCELLED);

    /* in flight: its answer is read and dropped, the next request gets its own */
    fs_start(&fs, FS_BATCH2, 0);
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    id = md_req(c, 1, 1, WAIT_MS);
    dl = now_ms() + WAIT_MS;
    while (atomic_load(&fs.requests) < 1 && now_ms() < dl)
        kc_client_poll(c, 20);
    CU_ASSERT_EQUAL(kc_cancel(c, id), 0);
    CU_ASSERT(md_req(c, 1, 2, WAIT_MS) > 0);
    CU_ASSERT_FATAL(run_until(c, 3, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[1].err, KC_E_CANCELLED);
    CU_ASSERT_EQUAL(T.r[2].err, KC_E_OK);
    CU_ASSERT_EQUAL(T.r[2].echo_corr, 3); /* handshake 1, cancelled 2, this 3 */
    CU_ASSERT_EQUAL(metrics(c).disconnects, 0);
    for (int i = 0; i < 5; i++)
        kc_client_poll(c, 10);
    CU_ASSERT_EQUAL(T.r[1].calls, 1);
    kc_client_destroy(c);
    fs_stop(&fs);
}

typedef struct submitter_s {
    kc_client_t *c;
    int from, n;
} submitter_t;

static void *submitter_main(void *arg)
{
    submitter_t *s = arg;
    for (int i = s->from; i < s->from + s->n; i++)
        if (md_req(s->c, 1, i, WAIT_MS) <= 0)
            break;
    return NULL;
}

static void test_threaded_pipelining(void)
{
    fs_t fs;
    kc_opts_t o;
    kc_client_t *c;
    pthread_t thr;
    submitter_t s;
    bool ordered = true;
    kc_opts_init(&o);
    o.max_in_flight = 50;
    o.log_cb = log_cb;
    c = kc_client_new(&o, NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    memset(&T, 0, sizeof(T));
    fs_start(&fs, FS_ECHO, 0);
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    s = (submitter_t){c, 0, 2000};
    pthread_create(&thr, NULL, submitter_main, &s);
    CU_ASSERT(run_until(c, 2000, 30000));
    pthread_join(thr, NULL);
    for (int i = 0; i < 2000; i++) {
        CU_ASSERT_EQUAL(T.r[i].calls, 1);
        CU_ASSERT_EQUAL(T.r[i].err, KC_E_OK);
        if (T.r[i].order != i)
            ordered = false;
    }
    CU_ASSERT(ordered); /* one connection answers in order */
    CU_ASSERT_EQUAL(metrics(c).responses, 2000);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_no_response(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(0, 0);
    fs_start(&fs, FS_ECHO, 0);
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    CU_ASSERT(kc_request_raw(c, 1, KP_APIKEY_Produce, 3, "abc", 3, WAIT_MS, KC_REQ_NO_RESPONSE,
                             on_resp, &T.r[0]) > 0);
    CU_ASSERT(md_req(c, 1, 1, WAIT_MS) > 0);
    CU_ASSERT_FATAL(run_until(c, 2, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_OK);
    CU_ASSERT_EQUAL(T.r[0].len, 0);
    CU_ASSERT_EQUAL(T.r[1].err, KC_E_OK);
    CU_ASSERT_EQUAL(T.r[1].echo_corr, 3);
    CU_ASSERT_EQUAL(atomic_load(&fs.requests), 2);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_bootstrap_and_names(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(0, 20);
    char list[128];
    CU_ASSERT_EQUAL(kc_client_add_bootstrap(c, "a"), KC_E_INVALID);
    CU_ASSERT_EQUAL(kc_client_add_bootstrap(c, "a:99999"), KC_E_INVALID);
    CU_ASSERT_EQUAL(kc_client_add_bootstrap(c, "[::1]9092"), KC_E_INVALID);
    CU_ASSERT_EQUAL(kc_client_add_bootstrap(c, "::1:9092"), KC_E_INVALID);
    CU_ASSERT_EQUAL(kc_client_add_bootstrap(c, "a:1,"), KC_E_INVALID);
    CU_ASSERT_EQUAL(metrics(c).nodes, 0);
    CU_ASSERT_EQUAL(kc_client_node_set(c, -5, "h", 1), KC_E_INVALID);
    CU_ASSERT_EQUAL(kc_client_node_set(c, 1, "h", 0), KC_E_INVALID);
    CU_ASSERT_EQUAL(md_req(c, KC_NODE_ANY, 0, WAIT_MS), KC_E_NO_NODE);
    CU_ASSERT_EQUAL(md_req(c, 7, 0, WAIT_MS), KC_E_NO_NODE);
    CU_ASSERT_EQUAL(kc_request_raw(c, 1, 999, 0, "", 0, 0, 0, on_resp, &T.r[0]), KC_E_INVALID);

    fs_start(&fs, FS_ECHO, 0);
    fs_run(&fs);
    /* "localhost" goes through the resolver thread; it may also give ::1, where nobody
     * listens, so the client must move on to the next address */
    snprintf(list, sizeof(list), " localhost:%d , [::1]:%d", fs.port, fs.port);
    CU_ASSERT_EQUAL(kc_client_add_bootstrap(c, list), 0);
    CU_ASSERT_EQUAL(metrics(c).nodes, 2);
    CU_ASSERT(md_req(c, KC_NODE_ANY, 0, WAIT_MS) > 0);
    CU_ASSERT_FATAL(run_until(c, 1, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_OK);
    CU_ASSERT_EQUAL(kc_client_node_remove(c, KC_NODE_BOOTSTRAP(1)), 0);
    CU_ASSERT_EQUAL(kc_client_node_remove(c, KC_NODE_BOOTSTRAP(1)), KC_E_NO_NODE);
    CU_ASSERT_EQUAL(metrics(c).nodes, 1);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_options_and_errors(void)
{
    kc_opts_t o;
    char err[128] = "";
    kc_client_t *c, *c2;
    kc_opts_init(&o);
    o.struct_size = 0;
    CU_ASSERT_PTR_NULL(kc_client_new(&o, err, sizeof(err)));
    CU_ASSERT(strlen(err) > 0);
    /* names a broker would refuse in ApiVersions v3 */
    kc_opts_init(&o);
    o.software_name = "my client";
    CU_ASSERT_PTR_NULL(kc_client_new(&o, err, sizeof(err)));
    o.software_name = "kc";
    o.software_version = "1.0-";
    CU_ASSERT_PTR_NULL(kc_client_new(&o, err, sizeof(err)));
    /* an older, shorter options struct: the rest takes the defaults */
    kc_opts_init(&o);
    o.struct_size = (uint32_t)offsetof(kc_opts_t, connect_timeout_ms);
    c = kc_client_new(&o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    c2 = kc_client_new(NULL, NULL, 0); /* two clients, no shared state */
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_EQUAL(kc_client_poll(c, 0), 0);
    kc_client_destroy(c2);
    kc_client_destroy(c);
    CU_ASSERT_STRING_EQUAL(kc_err_name(KC_E_TIMED_OUT), "TIMED_OUT");
    CU_ASSERT(kc_err_retriable(KC_E_TRANSPORT));
    CU_ASSERT(!kc_err_retriable(KC_E_NO_VERSION));
    CU_ASSERT_STRING_EQUAL(kc_err_str(12345), "unknown error");
}

static int reentry_poll_rc;

static void on_resp_reenter(kc_client_t *c, int err, int16_t ver, const uint8_t *body, size_t len,
                            void *opaque)
{
    reentry_poll_rc = kc_client_poll(c, 0);
    kc_client_destroy(c); /* refused from a callback (logged), the client stays usable */
    /* a callback may submit: this one is answered in a later poll */
    CU_ASSERT(md_req(c, 1, 1, WAIT_MS) > 0);
    on_resp(c, err, ver, body, len, opaque);
}

static void test_reentry_from_callback(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(0, 0);
    fs_start(&fs, FS_ECHO, 0);
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    CU_ASSERT(kc_request_raw(c, 1, KP_APIKEY_Metadata, 1, MD_V1_BODY, 4, WAIT_MS, 0,
                             on_resp_reenter, &T.r[0]) > 0);
    CU_ASSERT_FATAL(run_until(c, 2, WAIT_MS));
    CU_ASSERT_EQUAL(reentry_poll_rc, KC_E_BUSY);
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_OK);
    CU_ASSERT_EQUAL(T.r[1].err, KC_E_OK);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_any_skips_failing_bootstrap(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(0, 1000);
    char list[128];
    int64_t dl;
    fs_start(&fs, FS_ECHO, 0);
    fs_run(&fs);
    snprintf(list, sizeof(list), "127.0.0.1:%d,127.0.0.1:%d", free_port(), fs.port);
    CU_ASSERT_EQUAL(kc_client_add_bootstrap(c, list), 0);
    CU_ASSERT(md_req(c, KC_NODE_ANY, 0, 300) > 0); /* goes to the first, which is refused */
    dl = now_ms() + WAIT_MS;
    while (metrics(c).connect_failures < 1 && now_ms() < dl)
        kc_client_poll(c, 20);
    CU_ASSERT_FATAL(metrics(c).connect_failures == 1);
    CU_ASSERT(md_req(c, KC_NODE_ANY, 1, WAIT_MS) > 0); /* the second address now */
    CU_ASSERT_FATAL(run_until(c, 2, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_TIMED_OUT);
    CU_ASSERT_EQUAL(T.r[1].err, KC_E_OK);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_big_responses(void)
{
    fs_t fs;
    kc_client_t *c = mk_client(4 << 20, 0);
    fs_start(&fs, FS_BIG, 0);
    fs_run(&fs);
    kc_client_node_set(c, 1, "127.0.0.1", fs.port);
    for (int i = 0; i < 4; i++)
        CU_ASSERT(md_req(c, 1, i, WAIT_MS) > 0);
    CU_ASSERT_FATAL(run_until(c, 4, WAIT_MS));
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(T.r[i].err, KC_E_OK);
        CU_ASSERT_EQUAL(T.r[i].len, BIG_LEN);
        CU_ASSERT(T.r[i].pattern_ok);
    }
    /* the buffer never exceeds the frame (3 MiB + the correlation id) */
    CU_ASSERT(metrics(c).rx_buffer_peak <= BIG_LEN + 4);
    CU_ASSERT(metrics(c).bytes_received >= 4ull * BIG_LEN);
    kc_client_destroy(c);
    fs_stop(&fs);
}

static void test_handshake_timeout_and_address_change(void)
{
    fs_t quiet, good;
    kc_opts_t o;
    kc_client_t *c;
    int64_t dl;
    kc_opts_init(&o);
    o.connect_timeout_ms = 200;
    o.reconnect_backoff_ms = 20;
    o.log_cb = log_cb;
    o.log_level = KC_LOG_DEBUG;
    c = kc_client_new(&o, NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    memset(&T, 0, sizeof(T));
    fs_start(&quiet, FS_HS_SILENT, 0);
    fs_run(&quiet);
    fs_start(&good, FS_ECHO, 0);
    fs_run(&good);
    kc_client_node_set(c, 1, "127.0.0.1", quiet.port);
    CU_ASSERT(md_req(c, 1, 0, WAIT_MS) > 0);
    /* ApiVersions never answered: each attempt fails after connect_timeout_ms and is retried */
    dl = now_ms() + WAIT_MS;
    while (metrics(c).connect_failures < 2 && now_ms() < dl)
        kc_client_poll(c, 20);
    CU_ASSERT_FATAL(metrics(c).connect_failures >= 2);
    CU_ASSERT(atomic_load(&quiet.n_hs) >= 2);
    CU_ASSERT_EQUAL(T.r[0].calls, 0);
    /* the node moves: the queued request goes to the new address */
    CU_ASSERT_EQUAL(kc_client_node_set(c, 1, "127.0.0.1", good.port), 0);
    CU_ASSERT_FATAL(run_until(c, 1, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[0].err, KC_E_OK);
    /* moving a ready node closes its connection; the next request reconnects */
    CU_ASSERT_EQUAL(kc_client_node_set(c, 1, "127.0.0.1", good.port), 0); /* same: no-op */
    CU_ASSERT_EQUAL(metrics(c).disconnects, 0);
    CU_ASSERT_EQUAL(kc_client_node_set(c, 1, "localhost", good.port), 0);
    CU_ASSERT_EQUAL(metrics(c).disconnects, 1);
    CU_ASSERT(md_req(c, 1, 1, WAIT_MS) > 0);
    CU_ASSERT_FATAL(run_until(c, 2, WAIT_MS));
    CU_ASSERT_EQUAL(T.r[1].err, KC_E_OK);
    CU_ASSERT_EQUAL(atomic_load(&good.conns), 2);
    kc_client_destroy(c);
    fs_stop(&quiet);
    fs_stop(&good);
}

int main(void)
{
    CU_pSuite s;
    unsigned failed;
    signal(SIGPIPE, SIG_IGN);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("client_fake", NULL, NULL);
    CU_add_test(s, "options, errors, two clients", test_options_and_errors);
    CU_add_test(s, "echo, version choice, no common version", test_echo_and_negotiation);
    CU_add_test(s, "ApiVersions fallback (v2, v0)", test_apiversions_fallback);
    CU_add_test(s, "silent server: request timeout", test_silent_timeout);
    CU_add_test(s, "connect refused: backoff, retry, success", test_refused_then_up);
    CU_add_test(s, "close mid-response fails in-flight once", test_close_mid_response);
    CU_add_test(s, "wrong correlation id", test_wrong_correlation);
    CU_add_test(s, "oversize and slow frames", test_oversize_and_slow_frames);
    CU_add_test(s, "garbage responses and handshake", test_garbage);
    CU_add_test(s, "destroy with requests in flight", test_destroy_in_flight);
    CU_add_test(s, "cancel queued and in flight", test_cancel);
    CU_add_test(s, "2000 requests from another thread, pipelined", test_threaded_pipelining);
    CU_add_test(s, "no-response requests", test_no_response);
    CU_add_test(s, "bootstrap parsing, names, ANY", test_bootstrap_and_names);
    CU_add_test(s, "3 MiB responses", test_big_responses);
    CU_add_test(s, "poll and destroy refused from a callback", test_reentry_from_callback);
    CU_add_test(s, "ANY avoids a failing bootstrap address", test_any_skips_failing_bootstrap);
    CU_add_test(s, "handshake timeout, node address change",
                test_handshake_timeout_and_address_change);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
