/*
 * test_roundtrip.c -- generic codec checks over every generated message and version:
 *
 *   fill random -> size == encoded length -> decode consumes everything -> re-encode identical
 *   -> the printers give the same, well-formed JSON;
 *   every strict prefix of an encoding fails to decode (cleanly: run it under ASan);
 *   mutated encodings either fail or round-trip, and never make the decoder allocate more than
 *   a bound proportional to the input (huge counts fail before allocating);
 *   the API table is consistent.
 *
 * The same source is built against the real schemas (proto/schema) and the test schemas.
 * Usage: test_roundtrip [iterations-per-version]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_util.h"
#include "json_check.h"
#include "kp_msgs.h"

static int iterations = 20;
static size_t n_checked;

#define FAILF(...)                                                                                 \
    do {                                                                                           \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        CU_FAIL("see stderr");                                                                     \
    } while (0)

/* memcmp that accepts NULL pointers for empty buffers. */
static int same_bytes(const void *a, size_t alen, const void *b, size_t blen)
{
    return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

typedef struct enc_s {
    uint8_t *buf;
    size_t len;
} enc_t;

static char *print_msg(const kp_msg_desc_t *d, const void *msg, int16_t ver, unsigned flags,
                       size_t *lenp)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    kp_msg_print(d, f, msg, ver, flags);
    fclose(f);
    *lenp = len;
    return buf;
}

/* Fill with seed, encode. Returns 0 and the bytes (malloc'd, exact size) or -1. */
static int make_encoded(const kp_msg_desc_t *d, int16_t ver, uint64_t seed, enc_t *out)
{
    kp_arena_t ar;
    kp_writer_t wr;
    void *msg = calloc(1, d->struct_size);
    uint64_t rng = seed;
    int rc = -1, err;
    size_t sz;
    kp_arena_init(&ar, 0);
    kp_writer_init(&wr);
    if (!msg)
        goto out;
    err = kp_msg_fill_random(d, msg, &ar, ver, &rng);
    if (err) {
        FAILF("%s v%d seed %llu: fill: %s", d->name, ver, (unsigned long long)seed,
              kp_err_name(err));
        goto out;
    }
    sz = kp_msg_size(d, msg, ver);
    err = kp_msg_encode(d, &wr, msg, ver);
    if (err) {
        FAILF("%s v%d seed %llu: encode: %s", d->name, ver, (unsigned long long)seed,
              kp_err_name(err));
        goto out;
    }
    if (sz != wr.len) {
        FAILF("%s v%d seed %llu: size %zu != encoded %zu", d->name, ver, (unsigned long long)seed,
              sz, wr.len);
        goto out;
    }
    out->len = wr.len;
    out->buf = malloc(wr.len ? wr.len : 1);
    if (!out->buf)
        goto out;
    if (wr.len)
        memcpy(out->buf, wr.buf, wr.len);
    rc = 0;
out:
    kp_writer_free(&wr);
    kp_arena_free(&ar);
    free(msg);
    return rc;
}

/* Decode buf fully, re-encode, compare; decode the re-encoding and compare again. When
 * @p exact, the first re-encoding must equal buf (true for our own encodings). Returns the
 * decode error (0 on success; comparison failures are reported and give 0). */
static int check_decode(const kp_msg_desc_t *d, int16_t ver, const uint8_t *buf, size_t len,
                        int exact, int print, size_t arena_limit, const char *what)
{
    kp_arena_t ar, ar2;
    kp_reader_t rd;
    kp_writer_t wr, wr2;
    void *msg = calloc(1, d->struct_size), *msg2 = calloc(1, d->struct_size);
    int err;
    kp_arena_init(&ar, arena_limit);
    kp_arena_init(&ar2, 0);
    kp_writer_init(&wr);
    kp_writer_init(&wr2);
    if (!msg || !msg2) {
        err = KP_E_NOMEM;
        goto out;
    }
    kp_reader_init(&rd, buf, len);
    err = kp_msg_decode(d, &rd, &ar, msg, ver);
    if (arena_limit == 0 && ar.used > (len + 16) * 1024)
        FAILF("%s v%d %s: decoding %zu bytes allocated %zu", d->name, ver, what, len, ar.used);
    if (err)
        goto out;
    if (exact && rd.pos != len) {
        FAILF("%s v%d %s: decode consumed %zu of %zu bytes", d->name, ver, what, rd.pos, len);
        goto out;
    }
    if (kp_msg_encode(d, &wr, msg, ver) != 0) {
        FAILF("%s v%d %s: re-encode of a decoded message failed: %s", d->name, ver, what,
              kp_err_name(wr.err));
        goto out;
    }
    if (kp_msg_size(d, msg, ver) != wr.len)
        FAILF("%s v%d %s: size %zu != re-encoded %zu", d->name, ver, what, kp_msg_size(d, msg, ver),
              wr.len);
    if (exact && !same_bytes(wr.buf, wr.len, buf, len)) {
        FAILF("%s v%d %s: re-encoding differs", d->name, ver, what);
        goto out;
    }
    /* second round: decode(encode(x)) must encode to the same bytes */
    kp_reader_init(&rd, wr.buf, wr.len);
    if (kp_msg_decode(d, &rd, &ar2, msg2, ver) != 0 || rd.pos != wr.len) {
        FAILF("%s v%d %s: decoding our own encoding failed: %s", d->name, ver, what,
              kp_err_name(rd.err));
        goto out;
    }
    if (kp_msg_encode(d, &wr2, msg2, ver) != 0 || !same_bytes(wr2.buf, wr2.len, wr.buf, wr.len)) {
        FAILF("%s v%d %s: second round trip differs", d->name, ver, what);
        goto out;
    }
    if (print) {
        size_t l1 = 0, l2 = 0, l3 = 0;
        char *p1 = print_msg(d, msg, ver, KP_PRINT_UNREDACTED, &l1);
        char *p2 = print_msg(d, msg2, ver, KP_PRINT_UNREDACTED, &l2);
        char *p3 = print_msg(d, msg, ver, 0, &l3);
        if (!p1 || !p2 || !p3 || !same_bytes(p1, l1, p2, l2))
            FAILF("%s v%d %s: printed forms differ", d->name, ver, what);
        else if (!json_valid(p1, l1) || !json_valid(p3, l3))
            FAILF("%s v%d %s: printer output is not valid JSON: %s", d->name, ver, what, p1);
        free(p1);
        free(p2);
        free(p3);
    }
out:
    kp_writer_free(&wr);
    kp_writer_free(&wr2);
    kp_arena_free(&ar);
    kp_arena_free(&ar2);
    free(msg);
    free(msg2);
    return err;
}

static void test_roundtrip_all(void)
{
    size_t i;
    for (i = 0; i < kp_msgs_all_cnt; i++) {
        const kp_msg_desc_t *d = kp_msgs_all[i];
        int16_t v;
        for (v = d->min_ver; v <= d->max_ver; v++) {
            int it;
            for (it = 0; it < iterations; it++) {
                enc_t e = {NULL, 0};
                char what[32];
                uint64_t seed = (uint64_t)it * 7919u + (uint64_t)v * 104729u + i;
                if (make_encoded(d, v, seed, &e) != 0)
                    break;
                snprintf(what, sizeof(what), "seed %llu", (unsigned long long)seed);
                if (check_decode(d, v, e.buf, e.len, 1, 1, 0, what) != 0)
                    FAILF("%s v%d %s: decoding our encoding failed", d->name, v, what);
                free(e.buf);
                n_checked++;
            }
        }
    }
    fprintf(stderr, "\n  %zu round trips over %zu messages\n", n_checked, kp_msgs_all_cnt);
}

static void test_truncation(void)
{
    size_t i, n = 0;
    for (i = 0; i < kp_msgs_all_cnt; i++) {
        const kp_msg_desc_t *d = kp_msgs_all[i];
        int16_t v;
        for (v = d->min_ver; v <= d->max_ver; v++) {
            enc_t e = {NULL, 0};
            size_t k;
            if (make_encoded(d, v, 1000u + (uint64_t)v, &e) != 0)
                continue;
            for (k = 0; k < e.len; k++) {
                /* an exact-size copy, so ASan sees any read past the end */
                uint8_t *p = malloc(k ? k : 1);
                if (!p)
                    break;
                memcpy(p, e.buf, k);
                if (check_decode(d, v, p, k, 0, 0, 0, "prefix") == 0)
                    FAILF("%s v%d: a %zu-byte prefix of %zu bytes decoded", d->name, v, k, e.len);
                free(p);
                n++;
            }
            free(e.buf);
        }
    }
    fprintf(stderr, "\n  %zu truncated decodes\n", n);
}

static void test_mutation(void)
{
    static const uint8_t vals[] = {0x00, 0xff, 0x7f, 0x80, 0x01};
    size_t i, n = 0, ok = 0;
    for (i = 0; i < kp_msgs_all_cnt; i++) {
        const kp_msg_desc_t *d = kp_msgs_all[i];
        int16_t v;
        for (v = d->min_ver; v <= d->max_ver; v++) {
            enc_t e = {NULL, 0};
            size_t k, j;
            if (make_encoded(d, v, 2000u + (uint64_t)v, &e) != 0)
                continue;
            for (k = 0; k < e.len; k++) {
                uint8_t *p = malloc(e.len);
                if (!p)
                    break;
                for (j = 0; j < sizeof(vals) + 2; j++) {
                    memcpy(p, e.buf, e.len);
                    if (j < sizeof(vals)) {
                        p[k] = vals[j];
                    } else if (j == sizeof(vals)) {
                        /* a huge int32 count or length at k */
                        size_t m;
                        for (m = 0; m < 4 && k + m < e.len; m++)
                            p[k + m] = m ? 0xff : 0x7f;
                    } else {
                        /* a huge uvarint at k */
                        size_t m;
                        for (m = 0; m < 5 && k + m < e.len; m++)
                            p[k + m] = m < 4 ? 0xff : 0x0f;
                    }
                    if (check_decode(d, v, p, e.len, 0, 1, 0, "mutated") == 0)
                        ok++;
                    n++;
                }
                free(p);
            }
            free(e.buf);
        }
    }
    fprintf(stderr, "\n  %zu mutated decodes, %zu decoded\n", n, ok);
}

static void test_tables(void)
{
    size_t i;
    CU_ASSERT_FATAL(kp_apis_cnt > 0);
    for (i = 0; i < kp_apis_cnt; i++) {
        const kp_api_info_t *a = &kp_apis[i];
        size_t nl = strlen(a->name);
        if (i > 0 && kp_apis[i - 1].key >= a->key)
            FAILF("kp_apis not sorted at %s", a->name);
        if (kp_api_lookup(a->key) != a)
            FAILF("kp_api_lookup(%d) is not %s", a->key, a->name);
        if (!a->req || !a->resp || a->req->api_key != a->key || a->resp->api_key != a->key)
            FAILF("%s: bad descriptors", a->name);
        else if (strncmp(a->req->name, a->name, nl) != 0 ||
                 strcmp(a->req->name + nl, "Request") != 0 ||
                 strncmp(a->resp->name, a->name, nl) != 0 ||
                 strcmp(a->resp->name + nl, "Response") != 0)
            FAILF("%s: descriptor names %s / %s", a->name, a->req->name, a->resp->name);
        else if (a->req->min_ver != a->min_ver || a->req->max_ver != a->max_ver ||
                 a->resp->flex_min != a->flex_min || a->req->flex_min != a->flex_min)
            FAILF("%s: descriptor versions differ from the table", a->name);
        if (a->min_ver > a->max_ver || (a->flex_min >= 0 && a->flex_min > a->max_ver))
            FAILF("%s: bad version range", a->name);
        {
            int16_t v;
            for (v = a->min_ver; v <= a->max_ver; v++) {
                int flex = a->flex_min >= 0 && v >= a->flex_min;
                if (kp_request_header_version(a->key, v) != (flex ? 2 : 1))
                    FAILF("%s v%d: request header version", a->name, v);
                if (kp_response_header_version(a->key, v) != (a->key == 18 ? 0 : flex ? 1 : 0))
                    FAILF("%s v%d: response header version", a->name, v);
            }
        }
    }
    for (i = 0; i < kp_msgs_all_cnt; i++) {
        if (kp_msgs_all[i]->id != i)
            FAILF("%s: id %u at index %zu", kp_msgs_all[i]->name, kp_msgs_all[i]->id, i);
        if (kp_msg_lookup(kp_msgs_all[i]->name) != kp_msgs_all[i])
            FAILF("kp_msg_lookup(%s)", kp_msgs_all[i]->name);
    }
    CU_ASSERT_PTR_NULL(kp_api_lookup(-1));
    CU_ASSERT_PTR_NULL(kp_api_lookup(32767));
}

/* Versions outside the range fail cleanly everywhere. */
static void test_bad_versions(void)
{
    size_t i;
    for (i = 0; i < kp_msgs_all_cnt; i++) {
        const kp_msg_desc_t *d = kp_msgs_all[i];
        static const int16_t bad[3] = {-1, 0, 0};
        int16_t vs[3];
        void *msg = calloc(1, d->struct_size);
        kp_arena_t ar;
        uint64_t rng = 1;
        int j;
        vs[0] = bad[0];
        vs[1] = (int16_t)(d->min_ver - 1);
        vs[2] = (int16_t)(d->max_ver + 1);
        kp_arena_init(&ar, 0);
        for (j = 0; j < 3 && msg; j++) {
            kp_reader_t rd;
            kp_writer_t wr;
            if (vs[j] >= d->min_ver && vs[j] <= d->max_ver)
                continue;
            kp_msg_init(d, msg);
            kp_reader_init(&rd, "\0\0\0\0\0\0\0\0", 8);
            if (kp_msg_decode(d, &rd, &ar, msg, vs[j]) != KP_E_BAD_VERSION)
                FAILF("%s v%d: decode did not say BAD_VERSION", d->name, vs[j]);
            kp_writer_init(&wr);
            if (kp_msg_encode(d, &wr, msg, vs[j]) != KP_E_BAD_VERSION || wr.len != 0)
                FAILF("%s v%d: encode did not say BAD_VERSION", d->name, vs[j]);
            kp_writer_free(&wr);
            if (kp_msg_fill_random(d, msg, &ar, vs[j], &rng) != KP_E_BAD_VERSION)
                FAILF("%s v%d: fill did not say BAD_VERSION", d->name, vs[j]);
        }
        kp_arena_free(&ar);
        free(msg);
    }
}

static const cu_test_t tests[] = {
    {"tables", test_tables},           {"bad_versions", test_bad_versions},
    {"roundtrip", test_roundtrip_all}, {"truncation", test_truncation},
    {"mutation", test_mutation},       {NULL, NULL},
};
static const cu_suite_t suites[] = {
    {"codec_all_messages", tests},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    if (argc > 1)
        iterations = atoi(argv[1]);
    return cu_run(suites);
}
