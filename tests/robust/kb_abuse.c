/*
 * kb_abuse.c -- bad-input soak of a Kafka-protocol broker (docs/testing-robustness.md).
 *
 * For --duration seconds, --conns abusive threads open connections and send, in a random mix:
 * malformed frames (negative, huge, lying and too-small size fields), truncated headers,
 * unknown API keys, unsupported versions (too low and too high) of every key of kp_apis[],
 * valid headers with garbage or truncated bodies, kp_msg_fill_random() bodies (as generated or
 * mutated: bit flips, truncation, inflated or negative length fields), Produce requests with
 * corrupt record batches (bad CRC, bad lengths, magic 0/1, compressed garbage, decompression
 * bombs, lying counts), slowloris requests (one byte at a time), abrupt disconnects in the middle
 * of a request or with requests in flight, pipelined requests followed by garbage, and bursts of
 * many connections. Meanwhile one well-behaved client keeps issuing valid requests (ApiVersions;
 * Metadata, Produce and Fetch round trips when the broker advertises them) and must get a
 * correct answer to every one within --deadline-ms.
 *
 * With --broker PATH it runs the broker itself (ephemeral port, work dir, ASan/UBSan log_path
 * and detect_leaks=1) and, at the end, checks that it is still alive and answering, that
 * SIGTERM makes it exit 0, and that no sanitizer report appeared. With --target HOST:PORT it
 * attacks a running broker (for example Apache Kafka, to validate the expectations).
 *
 * Options: --duration S (60), --conns N abusive threads (8), --deadline-ms MS for every good
 * request (5000), --seed N, --workdir DIR (emptied first), --max-rss-mb N (fail if the broker's
 * peak RSS is higher; default: only reported), --no-bombs (leave the decompression bombs out),
 * --all-apis (decodable random requests also to APIs that create or delete things), -v.
 *
 * Exit status: 0 pass, 1 a check failed, 2 usage or setup error.
 */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "kp_batch.h"
#include "kp_compress.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "kr_util.h"

#define KA_MAX_KEYS     1024
#define KA_TOPIC_GOOD   "robust-good"
#define KA_TOPIC_ABUSE  "robust-abuse"
#define KA_MAX_REQ      (100 * 1024 * 1024) /* socket.request.max.bytes of Kafka and kbroker */
#define KA_BODY_WINDOW  1000                /* ms to wait for a reaction to a random body */
#define KA_LIE_WINDOW   200                 /* ms a lying size frame is left hanging */
#define KA_MAX_FAILMSGS 40

/* ------------------------------------------------------------------ classes and outcomes */

typedef enum ka_cls_e {
    C_SIZE_NEG,
    C_SIZE_HUGE,
    C_SIZE_LIE,
    C_SIZE_SMALL,
    C_HDR_TRUNC,
    C_UNKNOWN_KEY,
    C_VERSION_LOW,
    C_VERSION_HIGH,
    C_GARBAGE_BODY,
    C_TRUNC_BODY,
    C_RANDOM_VALID,
    C_MUTATED,
    C_PRODUCE_CORRUPT,
    C_SLOWLORIS,
    C_DISCONNECT_MID,
    C_DISCONNECT_INFLIGHT,
    C_PIPELINE_GARBAGE,
    C_CONN_STORM,
    C__N
} ka_cls_t;

/* What the broker must do: close (E_CLOSE), answer (E_RESP), answer or close or take its time
 * (E_ANY), refuse with an error or close (E_REJECT), or nothing to check (E_NONE). */
enum { E_CLOSE, E_RESP, E_ANY, E_REJECT, E_NONE };

/* Weights: "fast" classes run on most abusive threads; the slow ones (a connection held open
 * for a while) on their own threads, so that they overlap instead of starving the rest. */
static const struct {
    const char *name;
    int expect;
    int weight;
    bool slow;
} ka_cls_info[C__N] = {
    [C_SIZE_NEG] = {"size-negative", E_CLOSE, 2, false},
    [C_SIZE_HUGE] = {"size-huge", E_CLOSE, 2, false},
    [C_SIZE_LIE] = {"size-lying", E_NONE, 2, true},
    [C_SIZE_SMALL] = {"size-below-header", E_CLOSE, 2, false},
    [C_HDR_TRUNC] = {"header-truncated", E_CLOSE, 2, false},
    [C_UNKNOWN_KEY] = {"unknown-api-key", E_CLOSE, 2, false},
    [C_VERSION_LOW] = {"version-too-low", E_CLOSE, 2, false},
    [C_VERSION_HIGH] = {"version-too-high", E_CLOSE, 2, false},
    [C_GARBAGE_BODY] = {"garbage-body", E_ANY, 4, false},
    [C_TRUNC_BODY] = {"truncated-body", E_ANY, 4, false},
    [C_RANDOM_VALID] = {"random-body", E_ANY, 3, false},
    [C_MUTATED] = {"mutated-body", E_ANY, 8, false},
    [C_PRODUCE_CORRUPT] = {"produce-corrupt", E_REJECT, 6, false},
    [C_SLOWLORIS] = {"slowloris", E_RESP, 3, true},
    [C_DISCONNECT_MID] = {"disconnect-mid", E_NONE, 3, false},
    [C_DISCONNECT_INFLIGHT] = {"disconnect-inflight", E_NONE, 3, false},
    [C_PIPELINE_GARBAGE] = {"pipeline+garbage", E_NONE, 2, false},
    [C_CONN_STORM] = {"connection-storm", E_NONE, 1, true},
};

typedef enum ka_out_e {
    O_RESP,     /* a response with our correlation id */
    O_ERR,      /* a response carrying an error code (decoded classes only) */
    O_CLOSE,    /* the broker closed the connection */
    O_NONE,     /* no reaction within the window; we hung up */
    O_ABANDON,  /* we hung up on purpose */
    O_CONNFAIL, /* connect() failed */
    O__N
} ka_out_t;

static const char *const ka_out_names[O__N] = {"resp",     "err-resp",  "close",
                                               "no-reply", "abandoned", "connfail"};

/* Corrupt-batch variants of C_PRODUCE_CORRUPT. */
typedef enum ka_pc_e {
    PC_CRC,
    PC_CRC_FIELD,
    PC_LEN_LONG,
    PC_LEN_SHORT,
    PC_LEN_NEG,
    PC_MAGIC0_SET,
    PC_MAGIC1_SET,
    PC_MAGIC_BYTE,
    PC_COUNT_LIE,
    PC_DELTA_LIE,
    PC_REC_LEN,
    PC_REC_TRUNC,
    PC_GARBAGE_GZIP,
    PC_GARBAGE_SNAPPY,
    PC_GARBAGE_LZ4,
    PC_GARBAGE_ZSTD,
    PC_CODEC_ID,
    PC_BOMB_GZIP,
    PC_BOMB_LZ4,
    PC_BOMB_ZSTD,
    PC_TRUNCATED,
    PC__N
} ka_pc_t;

static const char *const ka_pc_names[PC__N] = {
    "bad-crc",        "bad-crc-field",    "length-too-long", "length-too-short", "length-negative",
    "magic0-message", "magic1-message",   "magic-byte",      "count-lie",        "delta-lie",
    "record-length",  "record-truncated", "gzip-garbage",    "snappy-garbage",   "lz4-garbage",
    "zstd-garbage",   "codec-id-5..7",    "gzip-bomb",       "lz4-bomb",         "zstd-bomb",
    "batch-truncated"};

/* ------------------------------------------------------------------ global state */

typedef struct ka_adv_s {
    bool on;
    int16_t min, max;
} ka_adv_t;

static struct {
    /* options */
    const char *host;
    int port;
    const char *broker_bin;
    char workdir[512];
    int duration_s;
    int nconns;
    int deadline_ms;
    uint64_t seed;
    bool all_apis;
    bool verbose;
    long max_rss_mb; /* 0: report the broker's peak RSS only */
    bool no_bombs;
    /* broker */
    kr_broker_t broker;
    bool own_broker;
    ka_adv_t adv[KA_MAX_KEYS];
    int16_t pv, fv, mv, cv, av; /* Produce/Fetch/Metadata/CreateTopics/ApiVersions version */
    bool data_ok;               /* topics exist: Produce/Fetch round trips possible */
    /* bombs: compressed payloads, built once */
    uint8_t *bomb[3];
    size_t bomb_len[3];
    uint32_t bomb_raw[3];
    /* run */
    atomic_bool stop;
    atomic_int failures;
    pthread_mutex_t fail_mu;
    atomic_uint_fast64_t sent[C__N];
    atomic_uint_fast64_t out[C__N][O__N];
    atomic_uint_fast64_t busy_us[C__N];
    atomic_uint_fast64_t pc_sent[PC__N];
    atomic_uint_fast64_t pc_rejected[PC__N];
    atomic_uint_fast64_t pc_closed[PC__N];
    atomic_uint_fast64_t storm_conns;
    atomic_int version_cursor;
    int64_t t0;
} g;

static void ka_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void ka_fail(const char *fmt, ...)
{
    int n = atomic_fetch_add(&g.failures, 1);
    va_list ap;
    if (n >= KA_MAX_FAILMSGS)
        return;
    pthread_mutex_lock(&g.fail_mu);
    fprintf(stderr, "FAIL [%.1fs] ", (double)(kr_now_ms() - g.t0) / 1000.0);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&g.fail_mu);
}

static void ka_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void ka_note(const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&g.fail_mu);
    fprintf(stderr, "kb_abuse: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&g.fail_mu);
}

static const ka_adv_t *ka_adv(int16_t key)
{
    static const ka_adv_t none = {false, 0, 0};
    return key >= 0 && key < KA_MAX_KEYS ? &g.adv[key] : &none;
}

static int16_t ka_min16(int a, int b)
{
    return (int16_t)(a < b ? a : b);
}

/* ------------------------------------------------------------------ one exchange */

typedef struct ka_ctx_s {
    uint64_t rng;
    int32_t corr;
    kp_writer_t wr;
    int id;
    bool slow; /* runs the slow classes */
} ka_ctx_t;

/* The response to one request: the frame, or what happened instead. */
typedef struct ka_rx_s {
    ka_out_t out;
    uint8_t *buf;
    size_t len;
} ka_rx_t;

/* Send @p len bytes of @p p on a new connection and wait @p window_ms for a reaction. The
 * connection is closed (with a reset) afterwards. */
static ka_rx_t ka_exchange(const void *p, size_t len, int32_t corr, int window_ms)
{
    ka_rx_t rx = {O_NONE, NULL, 0};
    int64_t dl;
    int fd = kr_connect(g.host, g.port, g.deadline_ms);
    int r;

    if (fd < 0) {
        rx.out = O_CONNFAIL;
        return rx;
    }
    dl = kr_now_ms() + window_ms;
    r = kr_send_all(fd, p, len, dl);
    if (r == -1) {
        rx.out = O_CLOSE;
    } else if (r == -2) {
        rx.out = O_NONE;
    } else {
        kr_rx_t rr = kr_recv_frame(fd, &rx.buf, &rx.len, dl);
        if (rr == KR_RX_FRAME) {
            if (rx.len < 4 || (int32_t)(((uint32_t)rx.buf[0] << 24) | ((uint32_t)rx.buf[1] << 16) |
                                        ((uint32_t)rx.buf[2] << 8) | rx.buf[3]) != corr)
                ka_fail("response with a wrong correlation id (want %d, %zu bytes)", corr, rx.len);
            rx.out = O_RESP;
        } else if (rr == KR_RX_CLOSED) {
            rx.out = O_CLOSE;
        } else if (rr == KR_RX_BAD) {
            ka_fail("response with a bad size prefix");
            rx.out = O_CLOSE;
        } else {
            rx.out = O_NONE;
        }
    }
    kr_close_rst(fd);
    return rx;
}

static void ka_count(ka_cls_t cls, ka_out_t out)
{
    atomic_fetch_add(&g.sent[cls], 1);
    atomic_fetch_add(&g.out[cls][out], 1);
}

/* Check the reaction against the class's expectation and count it. */
static void ka_judge(ka_cls_t cls, ka_rx_t *rx, const char *what)
{
    int e = ka_cls_info[cls].expect;
    if (e == E_CLOSE && rx->out != O_CLOSE && rx->out != O_CONNFAIL)
        ka_fail("%s (%s): expected the connection to be closed, got %s", ka_cls_info[cls].name,
                what, ka_out_names[rx->out]);
    if (e == E_RESP && rx->out != O_RESP && rx->out != O_CONNFAIL)
        ka_fail("%s (%s): expected a response, got %s", ka_cls_info[cls].name, what,
                ka_out_names[rx->out]);
    if (g.verbose && rx->out == O_NONE)
        ka_note("%s (%s): no reaction within the window", ka_cls_info[cls].name, what);
    ka_count(cls, rx->out);
    free(rx->buf);
    rx->buf = NULL;
}

/* ------------------------------------------------------------------ request bodies */

/* APIs whose decodable random requests could change the broker wholesale (create or delete
 * topics, partitions, configs, ACLs, quotas, mirrors). Garbage bodies still reach them. */
static bool ka_api_mutating(const kp_api_info_t *a)
{
    static const char *const names[] = {"CreateTopics",
                                        "DeleteTopics",
                                        "CreatePartitions",
                                        "DeleteRecords",
                                        "AlterConfigs",
                                        "IncrementalAlterConfigs",
                                        "AlterPartitionReassignments",
                                        "AlterReplicaLogDirs",
                                        "CreateAcls",
                                        "DeleteAcls",
                                        "AlterClientQuotas",
                                        "AlterUserScramCredentials",
                                        "ElectLeaders",
                                        "DeleteGroups",
                                        "UpdateFeatures",
                                        "UnregisterBroker",
                                        NULL};
    if (a->flags & KP_API_PROVISIONAL)
        return true;
    for (int i = 0; names[i]; i++)
        if (strcmp(a->name, names[i]) == 0)
            return true;
    return false;
}

/* Pick an API and a version for a body class: an advertised one 90% of the time (its version
 * within the advertised range and the codec's), else any codec API at a codec version. */
static const kp_api_info_t *ka_pick_api(ka_ctx_t *c, bool decodable, int16_t *ver)
{
    for (int tries = 0; tries < 64; tries++) {
        const kp_api_info_t *a = &kp_apis[kr_rand_below(&c->rng, (uint32_t)kp_apis_cnt)];
        const ka_adv_t *ad = ka_adv(a->key);
        int lo = a->min_ver, hi = a->max_ver;
        if (decodable && !g.all_apis && ka_api_mutating(a))
            continue;
        if (ad->on) {
            lo = ad->min > lo ? ad->min : lo;
            hi = ad->max < hi ? ad->max : hi;
            if (lo > hi)
                continue;
        } else if (kr_rand_below(&c->rng, 10) != 0) {
            continue;
        }
        *ver = (int16_t)(lo + (int)kr_rand_below(&c->rng, (uint32_t)(hi - lo + 1)));
        return a;
    }
    *ver = g.av;
    return kp_api_lookup(KP_APIKEY_ApiVersions);
}

/* Encode a kp_msg_fill_random() request of @p a at @p ver as a whole frame into c->wr.
 * Returns the frame start, or (size_t)-1 if this message cannot be encoded. */
static size_t ka_random_request(ka_ctx_t *c, const kp_api_info_t *a, int16_t ver)
{
    kp_arena_t ar;
    void *msg;
    size_t at = (size_t)-1;

    kp_arena_init(&ar, 4u << 20);
    msg = kp_arena_calloc(&ar, 1, a->req->struct_size);
    if (msg) {
        kp_msg_init(a->req, msg);
        if (kp_msg_fill_random(a->req, msg, &ar, ver, &c->rng) == 0) {
            size_t len0 = c->wr.len;
            if (kr_req_build(&c->wr, a->key, ver, ++c->corr, "kb_abuse", a->req, msg) == 0) {
                at = len0;
            } else {
                c->wr.len = len0;
                c->wr.err = 0;
            }
        }
    }
    kp_arena_free(&ar);
    return at;
}

/* One random mutation of the body at [body, end) of the buffer. Returns the new end. */
static size_t ka_mutate(ka_ctx_t *c, uint8_t *buf, size_t body, size_t end, size_t cap)
{
    size_t blen = end - body, pos;
    uint32_t op = kr_rand_below(&c->rng, 8);
    if (blen == 0)
        op = 7;
    pos = blen ? body + kr_rand_below(&c->rng, (uint32_t)blen) : body;
    switch (op) {
    case 0: /* bit flip */
        buf[pos] ^= (uint8_t)(1u << kr_rand_below(&c->rng, 8));
        break;
    case 1: { /* extreme byte */
        static const uint8_t v[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0xfe};
        buf[pos] = v[kr_rand_below(&c->rng, sizeof(v))];
        break;
    }
    case 2: /* truncate */
        return body + kr_rand_below(&c->rng, (uint32_t)blen);
    case 3: /* inflate an int32 length */
        if (pos + 4 <= end) {
            static const uint32_t v[] = {0x7fffffffu, 0x7ffffff0u, 0x00100000u, 0x01000000u};
            uint32_t x = v[kr_rand_below(&c->rng, 4)];
            buf[pos] = (uint8_t)(x >> 24);
            buf[pos + 1] = (uint8_t)(x >> 16);
            buf[pos + 2] = (uint8_t)(x >> 8);
            buf[pos + 3] = (uint8_t)x;
        }
        break;
    case 4: /* inflate an int16 length */
        if (pos + 2 <= end) {
            buf[pos] = 0x7f;
            buf[pos + 1] = kr_rand_below(&c->rng, 2) ? 0xff : 0xf0;
        }
        break;
    case 5: /* inflate a varint length (compact strings, arrays, tags) */
        if (pos + 5 <= end) {
            static const uint8_t v[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
            memcpy(buf + pos, v, 5);
        } else {
            buf[pos] = 0xff;
        }
        break;
    case 6: /* negative length */
        if (pos + 4 <= end && kr_rand_below(&c->rng, 2)) {
            memset(buf + pos, 0xff, 4);
        } else if (pos + 2 <= end) {
            buf[pos] = 0x80;
            buf[pos + 1] = 0x00;
        }
        break;
    default: /* append garbage */
        for (uint32_t n = 1 + kr_rand_below(&c->rng, 64); n > 0 && end < cap; n--)
            buf[end++] = (uint8_t)kr_rand(&c->rng);
        break;
    }
    return end;
}

/* ------------------------------------------------------------------ frame-level classes */

static void ka_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void ka_do_size(ka_ctx_t *c, ka_cls_t cls)
{
    uint8_t buf[64];
    size_t len;
    ka_rx_t rx;
    int32_t size;
    char what[64];

    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)kr_rand(&c->rng);
    switch (cls) {
    case C_SIZE_NEG: {
        static const int32_t v[] = {-1, INT32_MIN, -4, -65536};
        size = kr_rand_below(&c->rng, 2) ? v[kr_rand_below(&c->rng, 4)]
                                         : (int32_t)(kr_rand(&c->rng) | 0x80000000u);
        len = 4 + kr_rand_below(&c->rng, 40);
        break;
    }
    case C_SIZE_HUGE:
        size = kr_rand_below(&c->rng, 2)
                   ? INT32_MAX
                   : KA_MAX_REQ + 1 + (int32_t)kr_rand_below(&c->rng, INT32_MAX - KA_MAX_REQ - 1);
        len = 4 + kr_rand_below(&c->rng, 40);
        break;
    default: /* C_SIZE_SMALL: a frame shorter than the api key + version + correlation id */
        size = (int32_t)kr_rand_below(&c->rng, 8);
        len = 4 + (size_t)size;
        break;
    }
    ka_put32(buf, (uint32_t)size);
    snprintf(what, sizeof(what), "size %d", size);
    rx = ka_exchange(buf, len, INT32_MIN, g.deadline_ms);
    ka_judge(cls, &rx, what);
}

/* A frame whose size promises more than is ever sent. */
static void ka_do_size_lie(ka_ctx_t *c)
{
    static const int32_t sizes[] = {100, 65537, 1 << 20, 16 << 20, KA_MAX_REQ};
    uint8_t buf[600];
    int32_t size = sizes[kr_rand_below(&c->rng, 5)];
    size_t len = 4 + kr_rand_below(&c->rng, 90);
    ka_rx_t rx;
    int16_t ver;
    const kp_api_info_t *a = ka_pick_api(c, false, &ver);

    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)kr_rand(&c->rng);
    ka_put32(buf, (uint32_t)size);
    /* a plausible header so the broker waits for the body */
    buf[4] = (uint8_t)(a->key >> 8);
    buf[5] = (uint8_t)a->key;
    buf[6] = (uint8_t)(ver >> 8);
    buf[7] = (uint8_t)ver;
    if (len < 8)
        len = 8;
    rx = ka_exchange(buf, len, INT32_MIN, KA_LIE_WINDOW);
    if (rx.out == O_RESP)
        ka_fail("size-lying: the broker answered a frame it never fully received");
    if (rx.out == O_NONE)
        rx.out = O_ABANDON;
    ka_judge(C_SIZE_LIE, &rx, "lie");
}

/* A request header cut short: the client id string claims more bytes than the frame has, or
 * the frame stops inside the fixed fields / the tag section. */
static void ka_do_hdr_trunc(ka_ctx_t *c)
{
    uint8_t buf[64];
    int16_t ver;
    const kp_api_info_t *a = ka_pick_api(c, false, &ver);
    int16_t hv = kp_request_header_version(a->key, ver);
    size_t len = 0;
    ka_rx_t rx;
    char what[80];
    int32_t corr = ++c->corr;

    len = 4;
    buf[len++] = (uint8_t)(a->key >> 8);
    buf[len++] = (uint8_t)a->key;
    buf[len++] = (uint8_t)(ver >> 8);
    buf[len++] = (uint8_t)ver;
    ka_put32(buf + len, (uint32_t)corr);
    len += 4;
    switch (kr_rand_below(&c->rng, 3)) {
    case 0: /* client id length beyond the frame */
        buf[len++] = 0x00;
        buf[len++] = (uint8_t)(20 + kr_rand_below(&c->rng, 200));
        memcpy(buf + len, "short", 5);
        len += 5;
        break;
    case 1: /* frame ends inside the client id length */
        buf[len++] = 0x00;
        break;
    default: /* flexible header without its tag section, or a tag that overruns */
        buf[len++] = 0x00;
        buf[len++] = 0x02;
        buf[len++] = 'k';
        buf[len++] = 'b';
        if (hv >= 2) {
            buf[len++] = 0x01; /* one tag */
            buf[len++] = 0x00; /* tag 0 */
            buf[len++] = 0x7f; /* of 127 bytes */
        } else {
            len -= 1; /* cut the client id */
        }
        break;
    }
    ka_put32(buf, (uint32_t)(len - 4));
    snprintf(what, sizeof(what), "%s v%d", a->name, ver);
    rx = ka_exchange(buf, len, corr, g.deadline_ms);
    ka_judge(C_HDR_TRUNC, &rx, what);
}

static void ka_do_unknown_key(ka_ctx_t *c)
{
    int16_t key;
    size_t at;
    ka_rx_t rx;
    char what[40];
    int32_t corr = ++c->corr;

    do {
        key = (int16_t)kr_rand(&c->rng);
        if (kr_rand_below(&c->rng, 2))
            key = (int16_t)(kr_rand_below(&c->rng, 300));
    } while (kp_api_lookup(key) != NULL);
    c->wr.len = 0;
    at = kr_req_begin(&c->wr, key, (int16_t)kr_rand_below(&c->rng, 20), corr, "kb_abuse");
    for (uint32_t n = kr_rand_below(&c->rng, 64); n > 0; n--)
        kp_write_int8(&c->wr, (int8_t)kr_rand(&c->rng));
    kr_req_end(&c->wr, at);
    snprintf(what, sizeof(what), "key %d", key);
    rx = ka_exchange(c->wr.buf, c->wr.len, corr, g.deadline_ms);
    ka_judge(C_UNKNOWN_KEY, &rx, what);
}

/* Versions below/above what the broker serves, for every key of kp_apis[]: the first
 * 2 * kp_apis_cnt calls (shared by all threads) walk the table, later ones pick at random. */
static void ka_do_version(ka_ctx_t *c)
{
    int n = atomic_fetch_add(&g.version_cursor, 1);
    const kp_api_info_t *a;
    const ka_adv_t *ad;
    bool high;
    int lo, hi, v;
    int16_t ver;
    size_t at;
    ka_rx_t rx;
    char what[80];
    int32_t corr = ++c->corr;
    ka_cls_t cls;

    if (n < (int)(2 * kp_apis_cnt)) {
        a = &kp_apis[n / 2];
        high = n % 2;
    } else {
        a = &kp_apis[kr_rand_below(&c->rng, (uint32_t)kp_apis_cnt)];
        high = kr_rand_below(&c->rng, 2);
    }
    ad = ka_adv(a->key);
    lo = ad->on ? ad->min : a->min_ver;
    hi = ad->on ? ad->max : a->max_ver;
    if (high) {
        v = hi + 1 + (kr_rand_below(&c->rng, 4) == 0 ? (int)kr_rand_below(&c->rng, 30000) : 0);
        if (v > INT16_MAX)
            v = INT16_MAX;
    } else {
        v = lo - 1 - (kr_rand_below(&c->rng, 4) == 0 ? (int)kr_rand_below(&c->rng, 30000) : 0);
        if (v < INT16_MIN)
            v = INT16_MIN;
    }
    ver = (int16_t)v;
    cls = high ? C_VERSION_HIGH : C_VERSION_LOW;
    c->wr.len = 0;
    at = kr_req_begin(&c->wr, a->key, ver, corr, "kb_abuse");
    if (a->key == KP_APIKEY_ApiVersions) {
        kp_ApiVersionsRequest_t rq;
        kp_ApiVersionsRequest_init(&rq);
        rq.ClientSoftwareName = kp_str("kb-abuse");
        rq.ClientSoftwareVersion = kp_str("1.0");
        kp_ApiVersionsRequest_encode(&c->wr, &rq, ver > a->max_ver ? a->max_ver : a->min_ver);
    } else {
        for (uint32_t k = kr_rand_below(&c->rng, 48); k > 0; k--)
            kp_write_int8(&c->wr, (int8_t)kr_rand(&c->rng));
    }
    kr_req_end(&c->wr, at);
    snprintf(what, sizeof(what), "%s v%d (serves %d..%d%s)", a->name, ver, lo, hi,
             ad->on ? "" : ", not advertised");
    rx = ka_exchange(c->wr.buf, c->wr.len, corr, g.deadline_ms);
    if (a->key == KP_APIKEY_ApiVersions && ad->on) {
        /* The exception: a too-new ApiVersions is answered in the v0 layout with
         * UNSUPPORTED_VERSION. Apache Kafka 4.4 answers a too-old (negative) one the same way;
         * closing the connection is accepted there as well. */
        kp_arena_t ar;
        kp_ApiVersionsResponse_t resp;
        kp_arena_init(&ar, 1u << 20);
        kp_ApiVersionsResponse_init(&resp);
        if (rx.out == O_CONNFAIL || (!high && rx.out == O_CLOSE))
            ; /* counted below; the broker's liveness is watched separately */
        else if (rx.out != O_RESP)
            ka_fail("ApiVersions v%d: expected an UNSUPPORTED_VERSION answer, got %s", ver,
                    ka_out_names[rx.out]);
        else if (kr_resp_decode(rx.buf, rx.len, a->key, 0, corr, &ar, &resp) != 0 ||
                 resp.ErrorCode != KP_ERR_UNSUPPORTED_VERSION)
            ka_fail("ApiVersions v%d: answer is not a v0 UNSUPPORTED_VERSION response", ver);
        else
            rx.out = O_ERR;
        kp_arena_free(&ar);
        ka_count(cls, rx.out);
        free(rx.buf);
        return;
    }
    ka_judge(cls, &rx, what);
}

/* ------------------------------------------------------------------ body classes */

static void ka_do_body(ka_ctx_t *c, ka_cls_t cls)
{
    int16_t ver;
    const kp_api_info_t *a = ka_pick_api(c, cls != C_GARBAGE_BODY, &ver);
    size_t at = (size_t)-1, hdr_end, end;
    ka_rx_t rx;
    char what[96];
    int32_t corr;

    c->wr.len = 0;
    c->wr.err = 0;
    if (cls != C_GARBAGE_BODY)
        at = ka_random_request(c, a, ver);
    if (at == (size_t)-1) {
        uint32_t n = kr_rand_below(&c->rng, 8) == 0 ? 70000 : kr_rand_below(&c->rng, 2048);
        cls = C_GARBAGE_BODY;
        c->wr.len = 0;
        at = kr_req_begin(&c->wr, a->key, ver, ++c->corr, "kb_abuse");
        for (; n > 0; n--)
            kp_write_int8(&c->wr, (int8_t)kr_rand(&c->rng));
        kr_req_end(&c->wr, at);
    }
    corr = c->corr;
    /* header end: re-encode the header alone to learn its length */
    {
        kp_writer_t hw;
        kp_writer_init(&hw);
        kr_req_begin(&hw, a->key, ver, corr, "kb_abuse");
        hdr_end = hw.len;
        kp_writer_free(&hw);
    }
    end = c->wr.len;
    if (cls == C_TRUNC_BODY && end > hdr_end) {
        end = hdr_end + kr_rand_below(&c->rng, (uint32_t)(end - hdr_end));
    } else if (cls == C_MUTATED) {
        kp_writer_reserve(&c->wr, 128);
        for (uint32_t n = 1 + kr_rand_below(&c->rng, 4); n > 0; n--)
            end = ka_mutate(c, c->wr.buf, hdr_end, end, c->wr.cap);
    }
    ka_put32(c->wr.buf, (uint32_t)(end - 4));
    snprintf(what, sizeof(what), "%s v%d, %zu-byte body", a->name, ver, end - hdr_end);
    rx = ka_exchange(c->wr.buf, end, corr, KA_BODY_WINDOW);
    ka_judge(cls, &rx, what);
}

/* ------------------------------------------------------------------ corrupt Produce batches */

static void ka_batch_fix_crc(uint8_t *b, size_t size)
{
    uint32_t crc = kp_batch_crc_compute(b, size);
    ka_put32(b + KP_BATCH_CRC_OFFSET, crc);
}

/* A valid uncompressed batch of 1-5 records at the end of @p wr. Returns its start. */
static size_t ka_valid_batch(ka_ctx_t *c, kp_writer_t *wr, int codec)
{
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    size_t at = wr->len;
    uint32_t n = 1 + kr_rand_below(&c->rng, 5);
    kp_batch_opts_init(&o);
    o.codec = codec;
    kp_batch_builder_init(&bb, &o);
    for (uint32_t i = 0; i < n; i++) {
        char k[32], v[64];
        int kl = snprintf(k, sizeof(k), "abuse-%u", i);
        int vl = snprintf(v, sizeof(v), "value-%" PRIu64, kr_rand(&c->rng));
        kp_batch_builder_add(&bb, 1700000000000 + i, (kp_bytes_t){(const uint8_t *)k, kl},
                             (kp_bytes_t){(const uint8_t *)v, vl}, NULL, 0);
    }
    kp_batch_builder_finish(&bb, wr);
    kp_batch_builder_free(&bb);
    return at;
}

/* A legacy (magic 0 or 1) message set of one message: offset, size, crc (CRC-32), magic,
 * attributes, [timestamp], key, value. */
static void ka_legacy_message(kp_writer_t *wr, int magic)
{
    size_t at = wr->len, crc_at;
    uLong crc;
    kp_write_int64(wr, 0);
    kp_write_int32(wr, 0);
    crc_at = wr->len;
    kp_write_int32(wr, 0);
    kp_write_int8(wr, (int8_t)magic);
    kp_write_int8(wr, 0);
    if (magic == 1)
        kp_write_int64(wr, 1700000000000);
    kp_write_int32(wr, 3);
    kp_write_raw(wr, "key", 3);
    kp_write_int32(wr, 5);
    kp_write_raw(wr, "value", 5);
    kp_writer_patch_int32(wr, at + 8, (int32_t)(wr->len - at - 12));
    crc = crc32(0L, wr->buf + crc_at + 4, (uInt)(wr->len - crc_at - 4));
    kp_writer_patch_int32(wr, crc_at, (int32_t)(uint32_t)crc);
}

/* A batch whose records field is @p payload compressed with @p codec (CRC correct). */
static void ka_compressed_batch(kp_writer_t *wr, int codec, const uint8_t *payload, size_t plen,
                                int32_t count)
{
    size_t at = wr->len;
    kp_write_int64(wr, 0);                         /* baseOffset */
    kp_write_int32(wr, 0);                         /* batchLength, patched */
    kp_write_int32(wr, -1);                        /* partitionLeaderEpoch */
    kp_write_int8(wr, 2);                          /* magic */
    kp_write_int32(wr, 0);                         /* crc, patched */
    kp_write_int16(wr, (int16_t)codec);            /* attributes */
    kp_write_int32(wr, count > 0 ? count - 1 : 0); /* lastOffsetDelta */
    kp_write_int64(wr, 1700000000000);
    kp_write_int64(wr, 1700000000000);
    kp_write_int64(wr, -1);
    kp_write_int16(wr, -1);
    kp_write_int32(wr, -1);
    kp_write_int32(wr, count);
    kp_write_raw(wr, payload, plen);
    kp_writer_patch_int32(wr, at + 8, (int32_t)(wr->len - at - 12));
    ka_batch_fix_crc(wr->buf + at, wr->len - at);
}

/* Records of a decompression bomb: one record claiming a value of @p raw bytes (zeros). */
static int ka_make_bomb(int slot, int codec, uint32_t raw)
{
    uint8_t *in = calloc(1, raw);
    kp_writer_t rec, out;
    int r;
    if (!in)
        return -1;
    /* record: length, attributes, timestampDelta, offsetDelta, key -1, value len, value,
     * header count; the value is the zeros that follow the header bytes written here */
    kp_writer_init(&rec);
    kp_write_varint(&rec, (int32_t)(raw - 6));
    kp_write_int8(&rec, 0);
    kp_write_varlong(&rec, 0);
    kp_write_varint(&rec, 0);
    kp_write_varint(&rec, -1);
    kp_write_varint(&rec, (int32_t)(raw - 16));
    memcpy(in, rec.buf, rec.len);
    kp_writer_free(&rec);
    kp_writer_init(&out);
    r = kp_compress(codec, in, raw, &out, KP_COMPRESS_LEVEL_DEFAULT);
    free(in);
    if (r != 0) {
        kp_writer_free(&out);
        return -1;
    }
    g.bomb[slot] = kp_writer_steal(&out, &g.bomb_len[slot]);
    g.bomb_raw[slot] = raw;
    return 0;
}

/* Build a ProduceRequest to the abuse topic with a corrupt records field of kind @p pc.
 * Returns 0 and the frame in c->wr. */
static int ka_corrupt_produce(ka_ctx_t *c, ka_pc_t pc, int16_t acks)
{
    kp_writer_t rw;
    size_t at;
    uint8_t *b;
    size_t sz;
    kp_ProduceRequest_t rq;
    kp_ProduceRequest_TopicProduceData_t td;
    kp_ProduceRequest_PartitionProduceData_t pd;
    int r;

    kp_writer_init(&rw);
    switch (pc) {
    case PC_MAGIC0_SET:
    case PC_MAGIC1_SET:
        ka_legacy_message(&rw, pc == PC_MAGIC0_SET ? 0 : 1);
        break;
    case PC_GARBAGE_GZIP:
    case PC_GARBAGE_SNAPPY:
    case PC_GARBAGE_LZ4:
    case PC_GARBAGE_ZSTD: {
        uint8_t junk[512];
        size_t n = 1 + kr_rand_below(&c->rng, sizeof(junk));
        int codec = KP_CODEC_GZIP + (int)(pc - PC_GARBAGE_GZIP);
        for (size_t i = 0; i < n; i++)
            junk[i] = (uint8_t)kr_rand(&c->rng);
        if (kr_rand_below(&c->rng, 2)) {
            /* a valid compressed stream, cut short */
            kp_writer_t tmp;
            kp_writer_init(&tmp);
            if (kp_compress(codec, junk, n, &tmp, KP_COMPRESS_LEVEL_DEFAULT) == 0 && tmp.len > 2)
                ka_compressed_batch(&rw, codec, tmp.buf, tmp.len / 2, 1);
            else
                ka_compressed_batch(&rw, codec, junk, n, 1);
            kp_writer_free(&tmp);
        } else {
            ka_compressed_batch(&rw, codec, junk, n, 1);
        }
        break;
    }
    case PC_CODEC_ID: {
        uint8_t junk[64];
        for (size_t i = 0; i < sizeof(junk); i++)
            junk[i] = (uint8_t)kr_rand(&c->rng);
        ka_compressed_batch(&rw, 5 + (int)kr_rand_below(&c->rng, 3), junk, sizeof(junk), 1);
        break;
    }
    case PC_BOMB_GZIP:
    case PC_BOMB_LZ4:
    case PC_BOMB_ZSTD: {
        int slot = (int)(pc - PC_BOMB_GZIP);
        static const int codecs[3] = {KP_CODEC_GZIP, KP_CODEC_LZ4, KP_CODEC_ZSTD};
        if (!g.bomb[slot]) {
            kp_writer_free(&rw);
            return -1;
        }
        ka_compressed_batch(&rw, codecs[slot], g.bomb[slot], g.bomb_len[slot],
                            kr_rand_below(&c->rng, 2) ? 1 : INT32_MAX);
        break;
    }
    default:
        at = ka_valid_batch(c, &rw, KP_CODEC_NONE);
        b = rw.buf + at;
        sz = rw.len - at;
        switch (pc) {
        case PC_CRC: /* a byte inside the CRC range changes, the CRC does not */
            b[KP_BATCH_ATTR_OFFSET + 2 + kr_rand_below(&c->rng, (uint32_t)(sz - 23))] ^= 0x5a;
            break;
        case PC_CRC_FIELD:
            b[KP_BATCH_CRC_OFFSET + kr_rand_below(&c->rng, 4)] ^=
                (uint8_t)(1u << kr_rand_below(&c->rng, 8));
            break;
        case PC_LEN_LONG:
            ka_put32(b + 8, (uint32_t)(sz - 12 + 1 + kr_rand_below(&c->rng, 1000)));
            break;
        case PC_LEN_SHORT:
            ka_put32(b + 8, (uint32_t)(kr_rand_below(&c->rng, (uint32_t)(sz - 12))));
            break;
        case PC_LEN_NEG:
            ka_put32(b + 8, kr_rand_below(&c->rng, 2) ? 0xffffffffu : 0x80000000u);
            break;
        case PC_MAGIC_BYTE: {
            static const uint8_t m[] = {0, 1, 3, 0xff};
            b[KP_BATCH_MAGIC_OFFSET] = m[kr_rand_below(&c->rng, 4)];
            break;
        }
        case PC_COUNT_LIE: {
            static const uint32_t v[] = {0, 0x7fffffffu, 0xffffffffu, 1000000};
            ka_put32(b + 57, v[kr_rand_below(&c->rng, 4)]);
            ka_batch_fix_crc(b, sz);
            break;
        }
        case PC_DELTA_LIE:
            ka_put32(b + 23, 100 + kr_rand_below(&c->rng, 1000));
            ka_batch_fix_crc(b, sz);
            break;
        case PC_REC_LEN: /* the first record's length varint claims far more */
            b[KP_BATCH_HEADER_SIZE] = 0xfe;
            ka_batch_fix_crc(b, sz);
            break;
        case PC_REC_TRUNC: /* the records end early; lengths and CRC agree with that */
            rw.len -= 3;
            sz -= 3;
            ka_put32(b + 8, (uint32_t)(sz - 12));
            ka_batch_fix_crc(b, sz);
            break;
        default: /* PC_TRUNCATED: the batch ends before batchLength says */
            rw.len -= 1 + kr_rand_below(&c->rng, (uint32_t)(sz - 1));
            break;
        }
        break;
    }

    kp_ProduceRequest_init(&rq);
    kp_ProduceRequest_TopicProduceData_init(&td);
    kp_ProduceRequest_PartitionProduceData_init(&pd);
    rq.Acks = acks;
    rq.TimeoutMs = g.deadline_ms;
    rq.TopicData.cnt = 1;
    rq.TopicData.v = &td;
    td.Name = kp_str(KA_TOPIC_ABUSE);
    td.PartitionData.cnt = 1;
    td.PartitionData.v = &pd;
    pd.Index = 0;
    pd.Records = (kp_bytes_t){rw.buf, (int32_t)rw.len};
    c->wr.len = 0;
    c->wr.err = 0;
    r = kr_req_build(&c->wr, KP_APIKEY_Produce, g.pv, ++c->corr, "kb_abuse",
                     &kp_ProduceRequest_desc, &rq);
    kp_writer_free(&rw);
    return r;
}

static void ka_do_produce_corrupt(ka_ctx_t *c)
{
    ka_pc_t pc = (ka_pc_t)kr_rand_below(&c->rng, PC__N);
    int16_t acks = kr_rand_below(&c->rng, 2) ? -1 : 1;
    ka_rx_t rx;
    int32_t corr;

    if (ka_corrupt_produce(c, pc, acks) != 0)
        return;
    corr = c->corr;
    atomic_fetch_add(&g.pc_sent[pc], 1);
    rx = ka_exchange(c->wr.buf, c->wr.len, corr, 2 * g.deadline_ms);
    if (rx.out == O_RESP) {
        kp_arena_t ar;
        kp_ProduceResponse_t resp;
        kp_arena_init(&ar, 1u << 20);
        kp_ProduceResponse_init(&resp);
        if (kr_resp_decode(rx.buf, rx.len, KP_APIKEY_Produce, g.pv, corr, &ar, &resp) != 0 ||
            resp.Responses.cnt != 1 || resp.Responses.v[0].PartitionResponses.cnt != 1) {
            ka_fail("produce-corrupt (%s): undecodable or misshapen Produce v%d response",
                    ka_pc_names[pc], g.pv);
        } else {
            int16_t ec = resp.Responses.v[0].PartitionResponses.v[0].ErrorCode;
            if (ec == KP_ERR_NONE)
                ka_fail("produce-corrupt (%s): the broker ACCEPTED a corrupt batch (offset "
                        "%" PRId64 ")",
                        ka_pc_names[pc], resp.Responses.v[0].PartitionResponses.v[0].BaseOffset);
            else {
                rx.out = O_ERR;
                atomic_fetch_add(&g.pc_rejected[pc], 1);
                if (g.verbose)
                    ka_note("produce-corrupt %s -> error %d", ka_pc_names[pc], ec);
            }
        }
        kp_arena_free(&ar);
    } else if (rx.out == O_CLOSE) {
        atomic_fetch_add(&g.pc_closed[pc], 1);
    } else if (rx.out == O_NONE) {
        ka_fail("produce-corrupt (%s): no answer within %d ms", ka_pc_names[pc], 2 * g.deadline_ms);
    }
    ka_count(C_PRODUCE_CORRUPT, rx.out);
    free(rx.buf);
}

/* ------------------------------------------------------------------ connection classes */

static size_t ka_apiversions_frame(ka_ctx_t *c, kp_writer_t *wr, int16_t ver)
{
    kp_ApiVersionsRequest_t rq;
    size_t at = wr->len;
    kp_ApiVersionsRequest_init(&rq);
    rq.ClientSoftwareName = kp_str("kb-abuse");
    rq.ClientSoftwareVersion = kp_str("1.0");
    kr_req_build(wr, KP_APIKEY_ApiVersions, ver, ++c->corr, "kb_abuse", &kp_ApiVersionsRequest_desc,
                 &rq);
    return at;
}

/* A valid request (or a slow garbage frame) sent one byte at a time. */
static void ka_do_slowloris(ka_ctx_t *c)
{
    bool garbage = kr_rand_below(&c->rng, 4) == 0;
    int16_t ver = (int16_t)kr_rand_below(&c->rng, (uint32_t)g.av + 1);
    int fd;
    ka_rx_t rx = {O_NONE, NULL, 0};
    int32_t corr;
    size_t len;

    c->wr.len = 0;
    c->wr.err = 0;
    if (garbage) {
        kp_write_int32(&c->wr, -2);
        kp_write_int32(&c->wr, 0x12345678);
    } else {
        ka_apiversions_frame(c, &c->wr, ver);
    }
    corr = c->corr;
    len = c->wr.len;
    fd = kr_connect(g.host, g.port, g.deadline_ms);
    if (fd < 0) {
        ka_count(C_SLOWLORIS, O_CONNFAIL);
        return;
    }
    for (size_t i = 0; i < len && !atomic_load(&g.stop); i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        /* the gap between bytes is the attack itself; a close shows up as POLLIN */
        if (poll(&p, 1, 2 + (int)kr_rand_below(&c->rng, 20)) > 0) {
            rx.out = kr_wait_closed(fd, kr_now_ms() + 10) ? O_CLOSE : O_NONE;
            if (rx.out == O_CLOSE)
                break;
        }
        if (kr_send_all(fd, c->wr.buf + i, 1, kr_now_ms() + g.deadline_ms) != 0) {
            rx.out = O_CLOSE;
            break;
        }
    }
    if (rx.out != O_CLOSE) {
        if (garbage) {
            rx.out = kr_wait_closed(fd, kr_now_ms() + g.deadline_ms) ? O_CLOSE : O_NONE;
        } else {
            kr_rx_t rr = kr_recv_frame(fd, &rx.buf, &rx.len, kr_now_ms() + g.deadline_ms);
            rx.out = rr == KR_RX_FRAME ? O_RESP : rr == KR_RX_CLOSED ? O_CLOSE : O_NONE;
            if (rr == KR_RX_FRAME) {
                kp_arena_t ar;
                kp_ApiVersionsResponse_t resp;
                kp_arena_init(&ar, 1u << 20);
                kp_ApiVersionsResponse_init(&resp);
                if (kr_resp_decode(rx.buf, rx.len, KP_APIKEY_ApiVersions, ver, corr, &ar, &resp) !=
                        0 ||
                    resp.ErrorCode != 0)
                    ka_fail("slowloris: bad ApiVersions v%d answer", ver);
                kp_arena_free(&ar);
            }
        }
    }
    kr_close_rst(fd);
    if (garbage) {
        if (rx.out != O_CLOSE && !atomic_load(&g.stop))
            ka_fail("slowloris: a slow negative size was not refused (%s)", ka_out_names[rx.out]);
        ka_count(C_SLOWLORIS, rx.out);
        return;
    }
    if (atomic_load(&g.stop) && rx.out != O_RESP) {
        ka_count(C_SLOWLORIS, O_ABANDON);
        return;
    }
    ka_judge(C_SLOWLORIS, &rx, "ApiVersions byte by byte");
}

/* A valid request cut off after a random prefix: the client leaves (FIN or reset). */
static void ka_do_disconnect_mid(ka_ctx_t *c)
{
    int16_t ver;
    const kp_api_info_t *a = ka_pick_api(c, true, &ver);
    size_t at, cut;
    int fd;

    c->wr.len = 0;
    c->wr.err = 0;
    at = ka_random_request(c, a, ver);
    if (at == (size_t)-1)
        at = ka_apiversions_frame(c, &c->wr, 0);
    cut = 1 + kr_rand_below(&c->rng, (uint32_t)(c->wr.len - at - 1));
    fd = kr_connect(g.host, g.port, g.deadline_ms);
    if (fd < 0) {
        ka_count(C_DISCONNECT_MID, O_CONNFAIL);
        return;
    }
    kr_send_all(fd, c->wr.buf + at, cut, kr_now_ms() + g.deadline_ms);
    if (kr_rand_below(&c->rng, 2))
        kr_close_rst(fd);
    else
        close(fd);
    ka_count(C_DISCONNECT_MID, O_ABANDON);
}

/* Several complete requests pipelined, then the client leaves without reading: the broker
 * must cancel what is queued or running for that connection. */
static void ka_do_disconnect_inflight(ka_ctx_t *c)
{
    uint32_t n = 1 + kr_rand_below(&c->rng, 20);
    int fd;

    c->wr.len = 0;
    c->wr.err = 0;
    for (uint32_t i = 0; i < n; i++) {
        int16_t ver;
        const kp_api_info_t *a = ka_pick_api(c, true, &ver);
        if (kr_rand_below(&c->rng, 2) || ka_random_request(c, a, ver) == (size_t)-1)
            ka_apiversions_frame(c, &c->wr, (int16_t)kr_rand_below(&c->rng, (uint32_t)g.av + 1));
    }
    fd = kr_connect(g.host, g.port, g.deadline_ms);
    if (fd < 0) {
        ka_count(C_DISCONNECT_INFLIGHT, O_CONNFAIL);
        return;
    }
    kr_send_all(fd, c->wr.buf, c->wr.len, kr_now_ms() + g.deadline_ms);
    if (kr_rand_below(&c->rng, 2))
        kr_close_rst(fd);
    else
        close(fd);
    ka_count(C_DISCONNECT_INFLIGHT, O_ABANDON);
}

/* K valid ApiVersions requests and then a negative size on one connection: whatever answers
 * arrive before the close must be complete, correct and in request order. */
static void ka_do_pipeline_garbage(ka_ctx_t *c)
{
    uint32_t k = 1 + kr_rand_below(&c->rng, 10);
    int32_t first = c->corr + 1;
    int16_t vers[10];
    int fd;
    uint32_t got = 0;
    ka_out_t out = O_NONE;
    int64_t dl;

    c->wr.len = 0;
    c->wr.err = 0;
    for (uint32_t i = 0; i < k; i++) {
        vers[i] = (int16_t)kr_rand_below(&c->rng, (uint32_t)g.av + 1);
        ka_apiversions_frame(c, &c->wr, vers[i]);
    }
    kp_write_int32(&c->wr, -7);
    fd = kr_connect(g.host, g.port, g.deadline_ms);
    if (fd < 0) {
        ka_count(C_PIPELINE_GARBAGE, O_CONNFAIL);
        return;
    }
    dl = kr_now_ms() + g.deadline_ms;
    if (kr_send_all(fd, c->wr.buf, c->wr.len, dl) != 0) {
        out = O_CLOSE;
    } else {
        for (;;) {
            uint8_t *buf;
            size_t len;
            kr_rx_t rr = kr_recv_frame(fd, &buf, &len, dl);
            if (rr == KR_RX_CLOSED) {
                out = O_CLOSE;
                break;
            }
            if (rr != KR_RX_FRAME) {
                if (rr == KR_RX_BAD)
                    ka_fail("pipeline+garbage: bad size prefix in a response");
                break;
            }
            if (got >= k) {
                ka_fail("pipeline+garbage: more answers than requests");
                free(buf);
                break;
            } else {
                kp_arena_t ar;
                kp_ApiVersionsResponse_t resp;
                kp_arena_init(&ar, 1u << 20);
                kp_ApiVersionsResponse_init(&resp);
                if (kr_resp_decode(buf, len, KP_APIKEY_ApiVersions, vers[got], first + (int32_t)got,
                                   &ar, &resp) != 0 ||
                    resp.ErrorCode != 0)
                    ka_fail("pipeline+garbage: answer %u is not the ApiVersions v%d response to "
                            "correlation id %d",
                            got, vers[got], first + (int32_t)got);
                kp_arena_free(&ar);
            }
            free(buf);
            got++;
        }
    }
    kr_close_rst(fd);
    if (out != O_CLOSE)
        ka_fail("pipeline+garbage: the trailing negative size did not close the connection");
    ka_count(C_PIPELINE_GARBAGE, out);
}

/* A burst of connections held open together: nothing, a partial header or a full request
 * each; then all of them go, half with a reset. */
static void ka_do_conn_storm(ka_ctx_t *c)
{
    uint32_t n = 30 + kr_rand_below(&c->rng, 170);
    int *fds = calloc(n, sizeof(*fds));
    uint32_t opened = 0, failed = 0;

    if (!fds)
        return;
    c->wr.len = 0;
    c->wr.err = 0;
    ka_apiversions_frame(c, &c->wr, 0);
    for (uint32_t i = 0; i < n && !atomic_load(&g.stop); i++) {
        int fd = kr_connect(g.host, g.port, g.deadline_ms);
        if (fd < 0) {
            failed++;
            continue;
        }
        switch (kr_rand_below(&c->rng, 3)) {
        case 0:
            break;
        case 1:
            kr_send_all(fd, c->wr.buf, 6, kr_now_ms() + 100);
            break;
        default:
            kr_send_all(fd, c->wr.buf, c->wr.len, kr_now_ms() + 100);
            break;
        }
        fds[opened++] = fd;
    }
    for (uint32_t i = 0; i < opened; i++) {
        if (i % 2)
            kr_close_rst(fds[i]);
        else
            close(fds[i]);
    }
    free(fds);
    atomic_fetch_add(&g.storm_conns, opened);
    ka_count(C_CONN_STORM, failed ? O_CONNFAIL : O_ABANDON);
    if (failed)
        ka_note("connection storm: %u of %u connects failed", failed, n);
}

static void *ka_abuser_main(void *arg)
{
    ka_ctx_t *c = arg;
    int total = 0;
    for (int i = 0; i < C__N; i++)
        if (ka_cls_info[i].slow == c->slow)
            total += ka_cls_info[i].weight;
    while (!atomic_load(&g.stop)) {
        int w = (int)kr_rand_below(&c->rng, (uint32_t)total);
        ka_cls_t cls = 0;
        int64_t t0 = kr_now_us();
        for (;; cls++) {
            if (ka_cls_info[cls].slow != c->slow)
                continue;
            if (w < ka_cls_info[cls].weight)
                break;
            w -= ka_cls_info[cls].weight;
        }
        switch (cls) {
        case C_SIZE_NEG:
        case C_SIZE_HUGE:
        case C_SIZE_SMALL:
            ka_do_size(c, cls);
            break;
        case C_SIZE_LIE:
            ka_do_size_lie(c);
            break;
        case C_HDR_TRUNC:
            ka_do_hdr_trunc(c);
            break;
        case C_UNKNOWN_KEY:
            ka_do_unknown_key(c);
            break;
        case C_VERSION_LOW:
        case C_VERSION_HIGH:
            ka_do_version(c);
            break;
        case C_GARBAGE_BODY:
        case C_TRUNC_BODY:
        case C_RANDOM_VALID:
        case C_MUTATED:
            ka_do_body(c, cls);
            break;
        case C_PRODUCE_CORRUPT:
            ka_do_produce_corrupt(c);
            break;
        case C_SLOWLORIS:
            ka_do_slowloris(c);
            break;
        case C_DISCONNECT_MID:
            ka_do_disconnect_mid(c);
            break;
        case C_DISCONNECT_INFLIGHT:
            ka_do_disconnect_inflight(c);
            break;
        case C_PIPELINE_GARBAGE:
            ka_do_pipeline_garbage(c);
            break;
        default:
            ka_do_conn_storm(c);
            break;
        }
        atomic_fetch_add(&g.busy_us[cls], (uint64_t)(kr_now_us() - t0));
    }
    return NULL;
}

/* ------------------------------------------------------------------ the good client */

typedef struct ka_good_s {
    int fd;
    int32_t corr;
    uint64_t rng;
    kp_writer_t wr;
    int64_t *lat_us; /* every good request */
    size_t nlat, caplat;
    int64_t *api_lat[4]; /* per API: ApiVersions, Metadata, Produce, Fetch */
    size_t api_nlat[4], api_caplat[4];
    uint64_t nreq[4]; /* ApiVersions, Metadata, Produce, Fetch */
    int64_t next_offset;
    uint64_t seq;
    uint8_t *resp_buf; /* the last response: decoded strings and records point into it */
    bool quiet;        /* do not record latencies (setup) */
} ka_good_t;

/* Send the frame in gc->wr and read its answer, decoded into @p msg (response of @p key at
 * @p ver). Returns 0, or -1 after reporting a failure tagged @p what. */
/* Append @p v to a growable latency array. */
static void ka_lat_add(int64_t **arr, size_t *n, size_t *cap, int64_t v)
{
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 4096;
        int64_t *na = realloc(*arr, nc * sizeof(*na));
        if (!na)
            return;
        *arr = na;
        *cap = nc;
    }
    (*arr)[(*n)++] = v;
}

static int ka_good_slot(int16_t key)
{
    return key == KP_APIKEY_Metadata  ? 1
           : key == KP_APIKEY_Produce ? 2
           : key == KP_APIKEY_Fetch   ? 3
                                      : 0;
}

static int ka_good_call(ka_good_t *gc, int16_t key, int16_t ver, kp_arena_t *ar, void *msg,
                        const char *what)
{
    int64_t t0 = kr_now_us(), dl = kr_now_ms() + g.deadline_ms;
    uint8_t *buf = NULL;
    size_t len;
    kr_rx_t rr;

    if (gc->fd < 0) {
        gc->fd = kr_connect(g.host, g.port, g.deadline_ms);
        if (gc->fd < 0) {
            ka_fail("good client: cannot connect (%s)", what);
            return -1;
        }
    }
    if (kr_send_all(gc->fd, gc->wr.buf, gc->wr.len, dl) != 0) {
        ka_fail("good client: %s: send failed", what);
        goto broken;
    }
    rr = kr_recv_frame(gc->fd, &buf, &len, dl);
    if (rr != KR_RX_FRAME) {
        ka_fail("good client: %s: %s", what,
                rr == KR_RX_TIMEOUT  ? "no answer within the deadline"
                : rr == KR_RX_CLOSED ? "connection closed by the broker"
                                     : "bad size prefix");
        goto broken;
    }
    if (!gc->quiet) {
        int64_t us = kr_now_us() - t0;
        int slot = ka_good_slot(key);
        ka_lat_add(&gc->lat_us, &gc->nlat, &gc->caplat, us);
        ka_lat_add(&gc->api_lat[slot], &gc->api_nlat[slot], &gc->api_caplat[slot], us);
    }
    free(gc->resp_buf);
    gc->resp_buf = buf;
    if (kr_resp_decode(buf, len, key, ver, gc->corr, ar, msg) != 0) {
        ka_fail("good client: %s: undecodable response (%zu bytes)", what, len);
        goto broken;
    }
    return 0;
broken:
    close(gc->fd);
    gc->fd = -1;
    return -1;
}

static int ka_good_apiversions(ka_good_t *gc)
{
    kp_ApiVersionsRequest_t rq;
    kp_ApiVersionsResponse_t resp;
    kp_arena_t ar;
    int r = -1;
    kp_ApiVersionsRequest_init(&rq);
    rq.ClientSoftwareName = kp_str("kb-abuse-good");
    rq.ClientSoftwareVersion = kp_str("1.0");
    gc->wr.len = 0;
    kr_req_build(&gc->wr, KP_APIKEY_ApiVersions, g.av, ++gc->corr, "good",
                 &kp_ApiVersionsRequest_desc, &rq);
    kp_arena_init(&ar, 1u << 20);
    kp_ApiVersionsResponse_init(&resp);
    gc->nreq[0]++;
    if (ka_good_call(gc, KP_APIKEY_ApiVersions, g.av, &ar, &resp, "ApiVersions") == 0) {
        bool self = false;
        for (int32_t i = 0; i < resp.ApiKeys.cnt; i++)
            if (resp.ApiKeys.v[i].ApiKey == KP_APIKEY_ApiVersions)
                self = true;
        if (resp.ErrorCode != 0 || !self)
            ka_fail("good client: ApiVersions v%d: error %d or ApiVersions not listed", g.av,
                    resp.ErrorCode);
        else
            r = 0;
    }
    kp_arena_free(&ar);
    return r;
}

/* Metadata for the good topic; with @p want_leader, the partition must have a leader among
 * the brokers. Returns 0, 1 (topic or leader not there yet) or -1 (failure reported unless
 * @p quiet). */
static int ka_good_metadata(ka_good_t *gc, bool quiet)
{
    kp_MetadataRequest_t rq;
    kp_MetadataRequest_MetadataRequestTopic_t t;
    kp_MetadataResponse_t resp;
    kp_arena_t ar;
    int r = -1;

    kp_MetadataRequest_init(&rq);
    kp_MetadataRequest_MetadataRequestTopic_init(&t);
    t.Name = kp_str(KA_TOPIC_GOOD);
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    rq.AllowAutoTopicCreation = false;
    gc->wr.len = 0;
    kr_req_build(&gc->wr, KP_APIKEY_Metadata, g.mv, ++gc->corr, "good", &kp_MetadataRequest_desc,
                 &rq);
    kp_arena_init(&ar, 1u << 20);
    kp_MetadataResponse_init(&resp);
    gc->nreq[1]++;
    if (ka_good_call(gc, KP_APIKEY_Metadata, g.mv, &ar, &resp, "Metadata") == 0) {
        const kp_MetadataResponse_MetadataResponseTopic_t *tp =
            resp.Topics.cnt == 1 ? &resp.Topics.v[0] : NULL;
        bool leader = false;
        if (tp && tp->ErrorCode == 0 && tp->Partitions.cnt >= 1)
            for (int32_t i = 0; i < resp.Brokers.cnt; i++)
                if (resp.Brokers.v[i].NodeId == tp->Partitions.v[0].LeaderId &&
                    tp->Partitions.v[0].ErrorCode == 0)
                    leader = true;
        if (leader)
            r = 0;
        else if (quiet)
            r = 1;
        else
            ka_fail("good client: Metadata v%d: topic %s: %s", g.mv, KA_TOPIC_GOOD,
                    !tp             ? "missing from the answer"
                    : tp->ErrorCode ? "error"
                                    : "no leader");
    }
    kp_arena_free(&ar);
    return r;
}

static int ka_good_create_topics(ka_good_t *gc)
{
    kp_CreateTopicsRequest_t rq;
    kp_CreateTopicsRequest_CreatableTopic_t t[2];
    kp_CreateTopicsResponse_t resp;
    kp_arena_t ar;
    int r = -1;
    const char *names[2] = {KA_TOPIC_GOOD, KA_TOPIC_ABUSE};

    kp_CreateTopicsRequest_init(&rq);
    for (int i = 0; i < 2; i++) {
        kp_CreateTopicsRequest_CreatableTopic_init(&t[i]);
        t[i].Name = kp_str(names[i]);
        t[i].NumPartitions = 1;
        t[i].ReplicationFactor = 1;
    }
    rq.Topics.cnt = 2;
    rq.Topics.v = t;
    rq.TimeoutMs = 10000;
    gc->wr.len = 0;
    kr_req_build(&gc->wr, KP_APIKEY_CreateTopics, g.cv, ++gc->corr, "good",
                 &kp_CreateTopicsRequest_desc, &rq);
    kp_arena_init(&ar, 1u << 20);
    kp_CreateTopicsResponse_init(&resp);
    if (ka_good_call(gc, KP_APIKEY_CreateTopics, g.cv, &ar, &resp, "CreateTopics") == 0) {
        r = 0;
        for (int32_t i = 0; i < resp.Topics.cnt; i++) {
            int16_t ec = resp.Topics.v[i].ErrorCode;
            if (ec != 0 && ec != KP_ERR_TOPIC_ALREADY_EXISTS) {
                ka_fail("good client: CreateTopics %.*s: error %d", (int)resp.Topics.v[i].Name.len,
                        resp.Topics.v[i].Name.ptr, ec);
                r = -1;
            }
        }
    }
    kp_arena_free(&ar);
    return r;
}

/* Produce 1-5 records to the good topic, fetch them back at the returned offset and compare
 * every record. */
static int ka_good_roundtrip(ka_good_t *gc)
{
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    kp_writer_t batch;
    char keys[5][32], vals[5][96];
    int klen[5], vlen[5];
    uint32_t n = 1 + kr_rand_below(&gc->rng, 5);
    kp_arena_t ar;
    int64_t base = -1;
    int r = -1;

    kp_batch_opts_init(&o);
    kp_batch_builder_init(&bb, &o);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t s = gc->seq++;
        klen[i] = snprintf(keys[i], sizeof(keys[i]), "good-%" PRIu64, s);
        vlen[i] = snprintf(vals[i], sizeof(vals[i]), "value-%" PRIu64 "-%016" PRIx64, s,
                           kr_rand(&gc->rng));
        kp_batch_builder_add(&bb, 1700000000000 + (int64_t)s,
                             (kp_bytes_t){(const uint8_t *)keys[i], klen[i]},
                             (kp_bytes_t){(const uint8_t *)vals[i], vlen[i]}, NULL, 0);
    }
    kp_writer_init(&batch);
    kp_batch_builder_finish(&bb, &batch);
    kp_batch_builder_free(&bb);
    kp_arena_init(&ar, 4u << 20);

    { /* Produce */
        kp_ProduceRequest_t rq;
        kp_ProduceRequest_TopicProduceData_t td;
        kp_ProduceRequest_PartitionProduceData_t pd;
        kp_ProduceResponse_t resp;
        kp_ProduceRequest_init(&rq);
        kp_ProduceRequest_TopicProduceData_init(&td);
        kp_ProduceRequest_PartitionProduceData_init(&pd);
        rq.Acks = -1;
        rq.TimeoutMs = g.deadline_ms;
        rq.TopicData.cnt = 1;
        rq.TopicData.v = &td;
        td.Name = kp_str(KA_TOPIC_GOOD);
        td.PartitionData.cnt = 1;
        td.PartitionData.v = &pd;
        pd.Records = (kp_bytes_t){batch.buf, (int32_t)batch.len};
        gc->wr.len = 0;
        kr_req_build(&gc->wr, KP_APIKEY_Produce, g.pv, ++gc->corr, "good", &kp_ProduceRequest_desc,
                     &rq);
        kp_ProduceResponse_init(&resp);
        gc->nreq[2]++;
        if (ka_good_call(gc, KP_APIKEY_Produce, g.pv, &ar, &resp, "Produce") != 0)
            goto out;
        if (resp.Responses.cnt != 1 || resp.Responses.v[0].PartitionResponses.cnt != 1) {
            ka_fail("good client: Produce v%d: misshapen response", g.pv);
            goto out;
        }
        if (resp.Responses.v[0].PartitionResponses.v[0].ErrorCode != 0) {
            ka_fail("good client: Produce v%d: error %d", g.pv,
                    resp.Responses.v[0].PartitionResponses.v[0].ErrorCode);
            goto out;
        }
        base = resp.Responses.v[0].PartitionResponses.v[0].BaseOffset;
        if (base < 0 || (gc->next_offset >= 0 && base != gc->next_offset)) {
            ka_fail("good client: Produce v%d: base offset %" PRId64 ", expected %" PRId64, g.pv,
                    base, gc->next_offset);
            goto out;
        }
        gc->next_offset = base + n;
    }
    { /* Fetch */
        kp_FetchRequest_t rq;
        kp_FetchRequest_FetchTopic_t ft;
        kp_FetchRequest_FetchPartition_t fp;
        kp_FetchResponse_t resp;
        const kp_FetchResponse_PartitionData_t *pd;
        kp_batch_iter_t it;
        kp_batch_t b;
        kp_record_iter_t ri;
        kp_record_t rec;
        uint32_t i = 0;

        kp_FetchRequest_init(&rq);
        kp_FetchRequest_FetchTopic_init(&ft);
        kp_FetchRequest_FetchPartition_init(&fp);
        rq.ReplicaId = -1;
        rq.MaxWaitMs = 0;
        rq.MinBytes = 1;
        rq.MaxBytes = 1 << 20;
        rq.SessionId = 0;
        rq.SessionEpoch = -1;
        rq.Topics.cnt = 1;
        rq.Topics.v = &ft;
        rq.ForgottenTopicsData.cnt = 0;
        rq.RackId = kp_str("");
        ft.Topic = kp_str(KA_TOPIC_GOOD);
        ft.Partitions.cnt = 1;
        ft.Partitions.v = &fp;
        fp.Partition = 0;
        fp.CurrentLeaderEpoch = -1;
        fp.FetchOffset = base;
        fp.LastFetchedEpoch = -1;
        fp.LogStartOffset = -1;
        fp.PartitionMaxBytes = 1 << 20;
        gc->wr.len = 0;
        kr_req_build(&gc->wr, KP_APIKEY_Fetch, g.fv, ++gc->corr, "good", &kp_FetchRequest_desc,
                     &rq);
        kp_FetchResponse_init(&resp);
        gc->nreq[3]++;
        if (ka_good_call(gc, KP_APIKEY_Fetch, g.fv, &ar, &resp, "Fetch") != 0)
            goto out;
        if (resp.ErrorCode != 0 || resp.Responses.cnt != 1 ||
            resp.Responses.v[0].Partitions.cnt != 1) {
            ka_fail("good client: Fetch v%d: error %d or misshapen response", g.fv, resp.ErrorCode);
            goto out;
        }
        pd = &resp.Responses.v[0].Partitions.v[0];
        if (pd->ErrorCode != 0 || pd->HighWatermark < base + n || pd->Records.len <= 0) {
            ka_fail("good client: Fetch v%d at %" PRId64 ": error %d, high watermark %" PRId64
                    ", %d record bytes",
                    g.fv, base, pd->ErrorCode, pd->HighWatermark, pd->Records.len);
            goto out;
        }
        kp_batch_iter_init(&it, pd->Records.ptr, (size_t)pd->Records.len, 0, 0);
        if (kp_batch_iter_next(&it, &b) != 1 || b.hdr.baseOffset != base ||
            b.hdr.recordCount != (int32_t)n) {
            ka_fail("good client: Fetch v%d at %" PRId64 ": first batch missing, invalid (%s) or "
                    "not ours",
                    g.fv, base, it.errstr ? it.errstr : "-");
            goto out;
        }
        if (kp_record_iter_init(&ri, &b, NULL, 0) != 0)
            goto rec_bad;
        while (kp_record_iter_next(&ri, &rec) == 1) {
            if (i >= n || rec.offset != base + i || rec.key.len != klen[i] ||
                memcmp(rec.key.ptr, keys[i], (size_t)klen[i]) != 0 || rec.value.len != vlen[i] ||
                memcmp(rec.value.ptr, vals[i], (size_t)vlen[i]) != 0)
                goto rec_bad;
            i++;
        }
        if (ri.err || i != n)
            goto rec_bad;
    }
    r = 0;
    goto out;
rec_bad:
    ka_fail("good client: Fetch v%d at %" PRId64 ": records differ from what was produced", g.fv,
            base);
out:
    kp_arena_free(&ar);
    kp_writer_free(&batch);
    return r;
}

static bool ka_have(int16_t key)
{
    return ka_adv(key)->on;
}

/* One round of valid requests. */
static int ka_good_round(ka_good_t *gc)
{
    int r = ka_good_apiversions(gc);
    if (ka_have(KP_APIKEY_Metadata) && g.data_ok && ka_good_metadata(gc, false) != 0)
        r = -1;
    if (g.data_ok && ka_have(KP_APIKEY_Produce) && ka_have(KP_APIKEY_Fetch) &&
        ka_good_roundtrip(gc) != 0)
        r = -1;
    return r;
}

static void *ka_good_main(void *arg)
{
    ka_good_t *gc = arg;
    while (!atomic_load(&g.stop)) {
        struct timespec pace = {0, 5 * 1000 * 1000};
        ka_good_round(gc);
        /* pacing, so that the good client measures latency rather than competing for CPU */
        nanosleep(&pace, NULL);
    }
    return NULL;
}

/* ------------------------------------------------------------------ setup */

/* ApiVersions probe: what the broker serves. */
static int ka_probe(void)
{
    int16_t vers[] = {3, 0};
    for (size_t vi = 0; vi < 2; vi++) {
        kp_writer_t wr;
        kp_ApiVersionsRequest_t rq;
        kp_ApiVersionsResponse_t resp;
        kp_arena_t ar;
        uint8_t *buf = NULL;
        size_t len;
        int fd = kr_connect(g.host, g.port, g.deadline_ms), ok = -1;
        if (fd < 0) {
            fprintf(stderr, "kb_abuse: cannot connect to %s:%d\n", g.host, g.port);
            return -1;
        }
        kp_writer_init(&wr);
        kp_ApiVersionsRequest_init(&rq);
        rq.ClientSoftwareName = kp_str("kb-abuse");
        rq.ClientSoftwareVersion = kp_str("1.0");
        kr_req_build(&wr, KP_APIKEY_ApiVersions, vers[vi], 1, "kb_abuse",
                     &kp_ApiVersionsRequest_desc, &rq);
        kp_arena_init(&ar, 1u << 20);
        kp_ApiVersionsResponse_init(&resp);
        if (kr_send_all(fd, wr.buf, wr.len, kr_now_ms() + g.deadline_ms) == 0 &&
            kr_recv_frame(fd, &buf, &len, kr_now_ms() + g.deadline_ms) == KR_RX_FRAME &&
            kr_resp_decode(buf, len, KP_APIKEY_ApiVersions, vers[vi], 1, &ar, &resp) == 0 &&
            resp.ErrorCode == 0) {
            for (int32_t i = 0; i < resp.ApiKeys.cnt; i++) {
                const kp_ApiVersionsResponse_ApiVersion_t *v = &resp.ApiKeys.v[i];
                if (v->ApiKey >= 0 && v->ApiKey < KA_MAX_KEYS)
                    g.adv[v->ApiKey] = (ka_adv_t){true, v->MinVersion, v->MaxVersion};
            }
            g.av = vers[vi];
            ok = 0;
        }
        free(buf);
        kp_arena_free(&ar);
        kp_writer_free(&wr);
        close(fd);
        if (ok == 0)
            return 0;
    }
    fprintf(stderr, "kb_abuse: the ApiVersions probe failed\n");
    return -1;
}

/* Versions the good client speaks: the newest both sides know, and for Produce/Fetch one
 * that still names topics (v12). */
static void ka_pick_versions(void)
{
    const kp_api_info_t *a;
    if (ka_have(KP_APIKEY_Produce)) {
        a = kp_api_lookup(KP_APIKEY_Produce);
        g.pv = ka_min16(ka_min16(g.adv[0].max, a->max_ver), 12);
        if (g.pv < a->min_ver)
            g.adv[0].on = false;
    }
    if (ka_have(KP_APIKEY_Fetch)) {
        a = kp_api_lookup(KP_APIKEY_Fetch);
        g.fv = ka_min16(ka_min16(g.adv[1].max, a->max_ver), 12);
        if (g.fv < a->min_ver)
            g.adv[1].on = false;
    }
    if (ka_have(KP_APIKEY_Metadata)) {
        a = kp_api_lookup(KP_APIKEY_Metadata);
        g.mv = ka_min16(g.adv[3].max, a->max_ver);
    }
    if (ka_have(KP_APIKEY_CreateTopics)) {
        a = kp_api_lookup(KP_APIKEY_CreateTopics);
        g.cv = ka_min16(ka_min16(g.adv[19].max, a->max_ver), 7);
    }
    if (!ka_have(KP_APIKEY_Produce))
        g.pv = 9; /* corrupt Produce requests are still sent (and refused as unsupported) */
}

/* Create the topics (CreateTopics) and wait until Metadata shows a leader. */
static int ka_setup_topics(ka_good_t *gc)
{
    int64_t dl = kr_now_ms() + 30000;
    if (!ka_have(KP_APIKEY_Metadata) || !(ka_have(KP_APIKEY_Produce) && ka_have(KP_APIKEY_Fetch)))
        return 0;
    if (!ka_have(KP_APIKEY_CreateTopics)) {
        ka_note("the broker has Produce/Fetch but no CreateTopics: no data round trips");
        return 0;
    }
    gc->quiet = true;
    if (ka_good_create_topics(gc) != 0)
        return -1;
    for (;;) {
        int r = ka_good_metadata(gc, true);
        if (r == 0)
            break;
        if (r < 0 || kr_now_ms() > dl) {
            ka_fail("good client: topic %s has no leader after 30 s", KA_TOPIC_GOOD);
            return -1;
        }
        /* poll Metadata again shortly */
        poll(NULL, 0, 100);
    }
    gc->quiet = false;
    g.data_ok = true;
    return 0;
}

/* ------------------------------------------------------------------ main */

static int ka_rm_cb(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    if (ftw->level > 0)
        remove(path);
    return 0;
}

/* Empty @p dir (created if missing), so old data and sanitizer reports cannot mislead. */
static int ka_clean_dir(const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return -1;
    return nftw(dir, ka_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void ka_usage(void)
{
    fprintf(stderr,
            "usage: kb_abuse (--broker PATH | --target HOST:PORT) [--duration S] [--conns N]\n"
            "                [--deadline-ms MS] [--seed N] [--workdir DIR] [--max-rss-mb N]\n"
            "                [--no-bombs] [--all-apis] [-v]\n");
}

static int ka_cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void ka_summary(ka_good_t *gc, double secs)
{
    uint64_t total = 0;
    printf("\n%-20s %9s", "class", "sent");
    for (int o = 0; o < O__N; o++)
        printf(" %9s", ka_out_names[o]);
    printf(" %8s\n", "avg-ms");
    for (int c = 0; c < C__N; c++) {
        uint64_t s = atomic_load(&g.sent[c]);
        total += s;
        printf("%-20s %9" PRIu64, ka_cls_info[c].name, s);
        for (int o = 0; o < O__N; o++)
            printf(" %9" PRIu64, (uint64_t)atomic_load(&g.out[c][o]));
        printf(" %8.2f\n", s ? (double)atomic_load(&g.busy_us[c]) / 1000.0 / (double)s : 0.0);
    }
    printf("%-20s %9" PRIu64 "  (%.0f/s; %" PRIu64 " connections in storms)\n", "total", total,
           (double)total / secs, (uint64_t)atomic_load(&g.storm_conns));
    printf("\ncorrupt Produce batches (Produce v%d%s):\n", g.pv,
           ka_have(KP_APIKEY_Produce) ? "" : ", NOT served by the broker: refused as unsupported");
    printf("  %-18s %7s %9s %7s\n", "kind", "sent", "rejected", "closed");
    for (int p = 0; p < PC__N; p++)
        printf("  %-18s %7" PRIu64 " %9" PRIu64 " %7" PRIu64 "\n", ka_pc_names[p],
               (uint64_t)atomic_load(&g.pc_sent[p]), (uint64_t)atomic_load(&g.pc_rejected[p]),
               (uint64_t)atomic_load(&g.pc_closed[p]));
    if (gc->nlat > 0) {
        qsort(gc->lat_us, gc->nlat, sizeof(int64_t), ka_cmp64);
        printf("\ngood client: %zu requests (ApiVersions %" PRIu64 ", Metadata %" PRIu64
               ", Produce %" PRIu64 ", Fetch %" PRIu64 "), latency p50 %.2f ms, p99 %.2f ms, "
               "max %.2f ms (deadline %d ms)\n",
               gc->nlat, gc->nreq[0], gc->nreq[1], gc->nreq[2], gc->nreq[3],
               (double)gc->lat_us[gc->nlat / 2] / 1000.0,
               (double)gc->lat_us[(gc->nlat * 99) / 100] / 1000.0,
               (double)gc->lat_us[gc->nlat - 1] / 1000.0, g.deadline_ms);
        for (int a = 0; a < 4; a++) {
            static const char *const names[4] = {"ApiVersions", "Metadata", "Produce", "Fetch"};
            size_t n = gc->api_nlat[a];
            if (n == 0)
                continue;
            qsort(gc->api_lat[a], n, sizeof(int64_t), ka_cmp64);
            printf("  %-12s %7zu  p50 %8.2f ms  p99 %8.2f ms  max %8.2f ms\n", names[a], n,
                   (double)gc->api_lat[a][n / 2] / 1000.0,
                   (double)gc->api_lat[a][(n * 99) / 100] / 1000.0,
                   (double)gc->api_lat[a][n - 1] / 1000.0);
        }
    } else {
        printf("\ngood client: no request completed\n");
    }
    if (!g.data_ok)
        printf("good client: ApiVersions only (Metadata/Produce/Fetch/CreateTopics not all "
               "served)\n");
}

int main(int argc, char **argv)
{
    pthread_t *thr, good_thr;
    ka_ctx_t *ctx;
    ka_good_t gc;
    int64_t end;
    char err[512];
    double secs;
    long hwm = -1, rss = -1;

    signal(SIGPIPE, SIG_IGN);
    g.host = "127.0.0.1";
    g.duration_s = 60;
    g.nconns = 8;
    g.deadline_ms = 5000;
    g.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
    pthread_mutex_init(&g.fail_mu, NULL);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--broker") == 0 && v) {
            g.broker_bin = v;
            i++;
        } else if (strcmp(a, "--target") == 0 && v) {
            static char host[256];
            const char *colon = strrchr(v, ':');
            if (!colon || colon == v || (size_t)(colon - v) >= sizeof(host)) {
                ka_usage();
                return 2;
            }
            memcpy(host, v, (size_t)(colon - v));
            host[colon - v] = '\0';
            g.host = host;
            g.port = atoi(colon + 1);
            i++;
        } else if (strcmp(a, "--duration") == 0 && v) {
            g.duration_s = atoi(v);
            i++;
        } else if (strcmp(a, "--conns") == 0 && v) {
            g.nconns = atoi(v);
            i++;
        } else if (strcmp(a, "--deadline-ms") == 0 && v) {
            g.deadline_ms = atoi(v);
            i++;
        } else if (strcmp(a, "--seed") == 0 && v) {
            g.seed = strtoull(v, NULL, 0);
            i++;
        } else if (strcmp(a, "--workdir") == 0 && v) {
            snprintf(g.workdir, sizeof(g.workdir), "%s", v);
            i++;
        } else if (strcmp(a, "--max-rss-mb") == 0 && v) {
            g.max_rss_mb = atol(v);
            i++;
        } else if (strcmp(a, "--no-bombs") == 0) {
            g.no_bombs = true;
        } else if (strcmp(a, "--all-apis") == 0) {
            g.all_apis = true;
        } else if (strcmp(a, "-v") == 0) {
            g.verbose = true;
        } else {
            ka_usage();
            return 2;
        }
    }
    if ((!g.broker_bin) == (g.port == 0) || g.duration_s < 0 || g.nconns < 1 ||
        g.deadline_ms < 100) {
        ka_usage();
        return 2;
    }
    printf("kb_abuse: seed %" PRIu64 ", %d s, %d abusive threads, deadline %d ms\n", g.seed,
           g.duration_s, g.nconns, g.deadline_ms);
    fflush(stdout);

    /* decompression bombs: one record claiming 1 GiB (zstd), 256 MiB (gzip), 128 MiB (lz4) */
    if (!g.no_bombs) {
        int64_t t = kr_now_ms();
        if (ka_make_bomb(0, KP_CODEC_GZIP, 256u << 20) ||
            ka_make_bomb(1, KP_CODEC_LZ4, 128u << 20) || ka_make_bomb(2, KP_CODEC_ZSTD, 1u << 30))
            fprintf(stderr, "kb_abuse: could not build every decompression bomb\n");
        printf("kb_abuse: bombs built in %" PRId64 " ms: gzip %zu B -> %u MiB, lz4 %zu B -> %u "
               "MiB, zstd %zu B -> %u MiB\n",
               kr_now_ms() - t, g.bomb_len[0], g.bomb_raw[0] >> 20, g.bomb_len[1],
               g.bomb_raw[1] >> 20, g.bomb_len[2], g.bomb_raw[2] >> 20);
    }

    if (g.broker_bin) {
        static const char *const extra[] = {"auto.create.topics.enable=false", "log.level=error",
                                            NULL};
        if (!g.workdir[0]) {
            snprintf(g.workdir, sizeof(g.workdir), "/tmp/kb_abuse.XXXXXX");
            if (!mkdtemp(g.workdir)) {
                perror("mkdtemp");
                return 2;
            }
        } else if (ka_clean_dir(g.workdir) != 0) {
            fprintf(stderr, "kb_abuse: cannot prepare %s: %s\n", g.workdir, strerror(errno));
            return 2;
        }
        if (kr_broker_start(&g.broker, g.broker_bin, g.workdir, extra, 60000, err, sizeof(err)) !=
            0) {
            fprintf(stderr, "kb_abuse: %s\n", err);
            return 2;
        }
        g.own_broker = true;
        g.port = g.broker.port;
        printf("kb_abuse: kbroker pid %d on port %d, work dir %s\n", (int)g.broker.pid, g.port,
               g.workdir);
    }
    if (ka_probe() != 0)
        goto fatal;
    ka_pick_versions();
    {
        int n = 0;
        printf("kb_abuse: broker serves");
        for (int k = 0; k < KA_MAX_KEYS; k++)
            if (g.adv[k].on && n++ < 12) {
                const kp_api_info_t *a = kp_api_lookup((int16_t)k);
                printf(" %s %d-%d", a ? a->name : "?", g.adv[k].min, g.adv[k].max);
            }
        printf("%s (%d APIs)\n", n > 12 ? " ..." : "", n);
    }

    memset(&gc, 0, sizeof(gc));
    gc.fd = -1;
    gc.next_offset = -1;
    gc.rng = g.seed ^ 0x600d;
    kp_writer_init(&gc.wr);
    g.t0 = kr_now_ms();
    if (ka_setup_topics(&gc) != 0)
        goto fatal;
    fflush(stdout);

    thr = calloc((size_t)g.nconns, sizeof(*thr));
    ctx = calloc((size_t)g.nconns, sizeof(*ctx));
    if (!thr || !ctx)
        goto fatal;
    g.t0 = kr_now_ms();
    pthread_create(&good_thr, NULL, ka_good_main, &gc);
    for (int i = 0; i < g.nconns; i++) {
        ctx[i].id = i;
        ctx[i].slow = i < (g.nconns + 3) / 4; /* a quarter of the threads, at least one */
        ctx[i].rng = g.seed + (uint64_t)(i + 1) * 0x1234567ull;
        ctx[i].corr = i * 1000000;
        kp_writer_init(&ctx[i].wr);
        pthread_create(&thr[i], NULL, ka_abuser_main, &ctx[i]);
    }
    end = g.t0 + (int64_t)g.duration_s * 1000;
    while (kr_now_ms() < end) {
        int64_t left = end - kr_now_ms();
        if (g.own_broker) {
            if (kr_broker_wait(&g.broker, (int)(left > 1000 ? 1000 : left)) != -1 ||
                !kr_broker_alive(&g.broker)) {
                ka_fail("the broker died during the soak (see %s)", g.broker.stderr_log);
                break;
            }
        } else {
            /* nothing to watch: wait for the end of the run */
            poll(NULL, 0, (int)(left > 1000 ? 1000 : left));
        }
    }
    atomic_store(&g.stop, true);
    pthread_join(good_thr, NULL);
    for (int i = 0; i < g.nconns; i++) {
        pthread_join(thr[i], NULL);
        kp_writer_free(&ctx[i].wr);
    }
    secs = (double)(kr_now_ms() - g.t0) / 1000.0;
    free(thr);
    free(ctx);

    /* after the storm: the broker still answers a fresh client correctly */
    if (!g.own_broker || kr_broker_alive(&g.broker)) {
        ka_good_t fin;
        memset(&fin, 0, sizeof(fin));
        fin.fd = -1;
        fin.next_offset = -1;
        fin.quiet = true;
        fin.rng = g.seed ^ 0xf1;
        fin.seq = 1000000000;
        kp_writer_init(&fin.wr);
        if (ka_good_round(&fin) != 0)
            ka_fail("the broker does not answer a fresh client correctly after the soak");
        else
            printf("kb_abuse: after the soak a fresh client gets correct answers\n");
        if (fin.fd >= 0)
            close(fin.fd);
        kp_writer_free(&fin.wr);
        free(fin.resp_buf);
    }
    ka_summary(&gc, secs);

    if (g.own_broker) {
        int st = 0;
        int64_t t;
        if (g.broker.pid <= 0)
            goto reports; /* died during the soak; its sanitizer output may say why */
        kr_broker_rss(&g.broker, &hwm, &rss);
        printf("broker: peak RSS %ld MiB, RSS now %ld MiB\n", hwm / 1024, rss / 1024);
        if (g.max_rss_mb > 0 && hwm / 1024 > g.max_rss_mb)
            ka_fail("the broker's peak RSS %ld MiB is above --max-rss-mb %ld", hwm / 1024,
                    g.max_rss_mb);
        kill(g.broker.pid, SIGTERM);
        t = kr_now_ms();
        st = kr_broker_wait(&g.broker, 60000);
        if (st != 0) {
            ka_fail("kbroker did not exit 0 on SIGTERM (status %d)", st);
            if (st == -1) {
                kill(g.broker.pid, SIGKILL);
                kr_broker_wait(&g.broker, 10000);
            }
        } else {
            printf("broker: exit 0 on SIGTERM after %" PRId64 " ms\n", kr_now_ms() - t);
        }
    reports : {
        /* informational: error lines the broker logged (log.level=error) */
        char *log = kr_read_file(g.broker.stderr_log, NULL);
        int nerr = 0;
        for (char *p = log; p && (p = strstr(p, " ERROR ")) != NULL; p++)
            if (nerr++ < 5) {
                char *nl = strchr(p, '\n');
                printf("broker logged: %.*s\n", nl ? (int)(nl - p) : 200, p + 1);
            }
        printf("broker: %d ERROR line(s) in %s\n", nerr, g.broker.stderr_log);
        free(log);
    }
        st = kr_broker_sanitizer_findings(&g.broker);
        if (st)
            ka_fail("%d sanitizer finding(s) in the broker (see above)", st);
        else
            printf("broker: no sanitizer report (log_path %s-*, stderr %s)\n", g.broker.asan_prefix,
                   g.broker.stderr_log);
    }
    if (gc.fd >= 0)
        close(gc.fd);
    kp_writer_free(&gc.wr);
    free(gc.resp_buf);
    free(gc.lat_us);
    for (int a = 0; a < 4; a++)
        free(gc.api_lat[a]);
    for (int i = 0; i < 3; i++)
        free(g.bomb[i]);
    if (atomic_load(&g.failures)) {
        printf("\nkb_abuse: FAILED (%d failure(s); seed %" PRIu64 ")\n", atomic_load(&g.failures),
               g.seed);
        return 1;
    }
    printf("\nkb_abuse: PASSED\n");
    return 0;

fatal:
    if (g.own_broker && g.broker.pid > 0) {
        kill(g.broker.pid, SIGKILL);
        kr_broker_wait(&g.broker, 10000);
    }
    fprintf(stderr, "kb_abuse: setup failed\n");
    return 2;
}
