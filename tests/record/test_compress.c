/* Compression codecs: round trips, caps, framing variants, corrupt input, allocator hook. */
#include <CUnit/CUnit.h>
#include <lz4frame.h>
#include <snappy-c.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "kp_compress.h"
#include "record_tests.h"

static const int codecs[] = {KP_CODEC_NONE, KP_CODEC_GZIP, KP_CODEC_SNAPPY, KP_CODEC_LZ4,
                             KP_CODEC_ZSTD};
#define NCODECS (sizeof(codecs) / sizeof(codecs[0]))

static void roundtrip(int codec, const uint8_t *in, size_t n, int level)
{
    kp_writer_t c, d;
    int rc;

    kp_writer_init(&c);
    kp_writer_init(&d);
    rc = kp_compress(codec, in, n, &c, level);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc == 0) {
        rc = kp_decompress(codec, c.buf, c.len, &d, n);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_EQUAL(d.len, n);
        CU_ASSERT(n == 0 || (d.len == n && memcmp(d.buf, in, n) == 0));
        /* One byte less of room is a clean cap failure, leaving the writer as it was. */
        if (n > 0) {
            kp_writer_reset(&d);
            kp_write_raw(&d, "xy", 2);
            CU_ASSERT_EQUAL(kp_decompress(codec, c.buf, c.len, &d, n - 1), KP_E_TOO_LARGE);
            CU_ASSERT_EQUAL(d.len, 2);
            CU_ASSERT_EQUAL(d.err, 0);
        }
    }
    kp_writer_free(&c);
    kp_writer_free(&d);
}

static void test_roundtrip_all(void)
{
    static const size_t sizes[] = {0, 1, 7, 100, 4096, 32768, 32769, 65536, 65537, 300000};
    uint64_t seed = 42;
    uint8_t *buf = malloc(300000);
    size_t i, j;

    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    for (i = 0; i < NCODECS; i++) {
        for (j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++) {
            rt_fill(buf, sizes[j], &seed, (int)(j & 1));
            roundtrip(codecs[i], buf, sizes[j], KP_COMPRESS_LEVEL_DEFAULT);
        }
    }
    rt_fill(buf, 5000, &seed, 1);
    roundtrip(KP_CODEC_GZIP, buf, 5000, 1);
    roundtrip(KP_CODEC_GZIP, buf, 5000, 9);
    roundtrip(KP_CODEC_LZ4, buf, 5000, 1);
    roundtrip(KP_CODEC_LZ4, buf, 5000, 17);
    roundtrip(KP_CODEC_ZSTD, buf, 5000, -5);
    roundtrip(KP_CODEC_ZSTD, buf, 5000, 19);
    free(buf);
}

static void test_bad_args(void)
{
    kp_writer_t w;
    kp_writer_init(&w);
    CU_ASSERT_EQUAL(kp_compress(5, "a", 1, &w, KP_COMPRESS_LEVEL_DEFAULT), KP_E_UNSUPPORTED);
    CU_ASSERT_EQUAL(kp_decompress(7, "a", 1, &w, 100), KP_E_UNSUPPORTED);
    CU_ASSERT_EQUAL(kp_compress(KP_CODEC_GZIP, "a", 1, &w, 10), KP_E_INVALID);
    CU_ASSERT_EQUAL(kp_compress(KP_CODEC_LZ4, "a", 1, &w, 0), KP_E_INVALID);
    CU_ASSERT_EQUAL(kp_compress(KP_CODEC_ZSTD, "a", 1, &w, 1000), KP_E_INVALID);
    CU_ASSERT_EQUAL(w.len, 0);
    CU_ASSERT_STRING_EQUAL(kp_codec_name(KP_CODEC_ZSTD), "zstd");
    CU_ASSERT_STRING_EQUAL(kp_codec_name(9), "unknown");
    CU_ASSERT_TRUE(kp_codec_valid(4));
    CU_ASSERT_FALSE(kp_codec_valid(5));
    CU_ASSERT_FALSE(kp_codec_valid(-1));
    kp_writer_free(&w);
}

/* 16 MiB of zeros compresses to almost nothing; a 1 MiB cap must stop it cleanly. */
static void test_bomb(void)
{
    size_t n = 16u << 20;
    uint8_t *zeros = calloc(1, n);
    size_t i;

    CU_ASSERT_PTR_NOT_NULL_FATAL(zeros);
    for (i = 0; i < NCODECS; i++) {
        kp_writer_t c, d;
        kp_writer_init(&c);
        kp_writer_init(&d);
        CU_ASSERT_EQUAL_FATAL(kp_compress(codecs[i], zeros, n, &c, KP_COMPRESS_LEVEL_DEFAULT), 0);
        if (codecs[i] != KP_CODEC_NONE)
            CU_ASSERT(c.len < n / 20);
        CU_ASSERT_EQUAL(kp_decompress(codecs[i], c.buf, c.len, &d, 1u << 20), KP_E_TOO_LARGE);
        CU_ASSERT_EQUAL(d.len, 0);
        /* The writer never grew much past the cap. */
        CU_ASSERT(d.cap <= (2u << 20) + 65536);
        kp_writer_free(&c);
        kp_writer_free(&d);
    }
    free(zeros);
}

/* Fixed output buffers: exact fit works, too small reports OVERFLOW. */
static void test_fixed_writer(void)
{
    uint8_t in[3000], out[3000];
    uint64_t seed = 7;
    size_t i;

    rt_fill(in, sizeof(in), &seed, 1);
    for (i = 0; i < NCODECS; i++) {
        kp_writer_t c, d;
        kp_writer_init(&c);
        CU_ASSERT_EQUAL_FATAL(kp_compress(codecs[i], in, sizeof(in), &c, 1 + (codecs[i] == 4)), 0);
        kp_writer_init_fixed(&d, out, sizeof(out));
        CU_ASSERT_EQUAL(kp_decompress(codecs[i], c.buf, c.len, &d, SIZE_MAX), 0);
        CU_ASSERT_EQUAL(d.len, sizeof(in));
        CU_ASSERT(memcmp(out, in, sizeof(in)) == 0);
        kp_writer_init_fixed(&d, out, sizeof(out) - 1);
        CU_ASSERT_EQUAL(kp_decompress(codecs[i], c.buf, c.len, &d, SIZE_MAX), KP_E_OVERFLOW);
        CU_ASSERT_EQUAL(d.len, 0);
        kp_writer_free(&c);
    }
    /* Compressing into a fixed buffer that is too small. */
    {
        kp_writer_t d;
        uint64_t s2 = 9;
        rt_fill(in, sizeof(in), &s2, 0);
        for (i = 0; i < NCODECS; i++) {
            kp_writer_init_fixed(&d, out, 100);
            CU_ASSERT_EQUAL(kp_compress(codecs[i], in, sizeof(in), &d, KP_COMPRESS_LEVEL_DEFAULT),
                            KP_E_OVERFLOW);
            CU_ASSERT_EQUAL(d.len, 0);
        }
    }
}

static void test_snappy_framing(void)
{
    uint8_t in[100000];
    uint64_t seed = 3;
    kp_writer_t x, d, cat;
    char raw[120000];
    size_t raw_len = sizeof(raw);

    rt_fill(in, sizeof(in), &seed, 1);
    kp_writer_init(&x);
    kp_writer_init(&d);
    kp_writer_init(&cat);
    CU_ASSERT_EQUAL_FATAL(kp_compress(KP_CODEC_SNAPPY, in, sizeof(in), &x, 0), 0);
    /* Java framing: magic, version 1, compatible 1, then length-prefixed 32 KiB blocks. */
    CU_ASSERT(memcmp(x.buf, "\x82SNAPPY\0\0\0\0\1\0\0\0\1", 16) == 0);

    /* Raw (unframed) snappy input is accepted too. */
    CU_ASSERT_EQUAL_FATAL(snappy_compress((const char *)in, sizeof(in), raw, &raw_len), SNAPPY_OK);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_SNAPPY, raw, raw_len, &d, sizeof(in)), 0);
    CU_ASSERT(d.len == sizeof(in) && memcmp(d.buf, in, sizeof(in)) == 0);
    kp_writer_reset(&d);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_SNAPPY, raw, raw_len, &d, sizeof(in) - 1),
                    KP_E_TOO_LARGE);

    /* Two xerial streams back to back (a header between blocks). */
    kp_write_raw(&cat, x.buf, x.len);
    kp_write_raw(&cat, x.buf, x.len);
    kp_writer_reset(&d);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_SNAPPY, cat.buf, cat.len, &d, 2 * sizeof(in)), 0);
    CU_ASSERT(d.len == 2 * sizeof(in) && memcmp(d.buf + sizeof(in), in, sizeof(in)) == 0);

    /* Header only: empty output. Truncated header, bad block length, truncated block: corrupt. */
    kp_writer_reset(&d);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_SNAPPY, x.buf, 16, &d, 10), 0);
    CU_ASSERT_EQUAL(d.len, 0);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_SNAPPY, x.buf, 12, &d, 10), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_SNAPPY, x.buf, 18, &d, SIZE_MAX), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_SNAPPY, x.buf, x.len - 1, &d, SIZE_MAX), KP_E_CORRUPT);
    x.buf[16] = 0x7f; /* block length far beyond the input */
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_SNAPPY, x.buf, x.len, &d, SIZE_MAX), KP_E_CORRUPT);
    x.buf[16] = 0x80; /* negative block length */
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_SNAPPY, x.buf, x.len, &d, SIZE_MAX), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(d.len, 0);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_SNAPPY, "", 0, &d, SIZE_MAX), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_SNAPPY, "\xff\xff\xff\xff\x0f", 5, &d, 1000),
                    KP_E_TOO_LARGE);
    kp_writer_free(&x);
    kp_writer_free(&d);
    kp_writer_free(&cat);
}

static void test_gzip_members(void)
{
    kp_writer_t c, cat, d;
    kp_writer_init(&c);
    kp_writer_init(&cat);
    kp_writer_init(&d);
    CU_ASSERT_EQUAL_FATAL(kp_compress(KP_CODEC_GZIP, "hello ", 6, &c, 6), 0);
    CU_ASSERT(c.buf[0] == 0x1f && c.buf[1] == 0x8b);
    kp_write_raw(&cat, c.buf, c.len);
    kp_write_raw(&cat, c.buf, c.len);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_GZIP, cat.buf, cat.len, &d, 100), 0);
    CU_ASSERT(d.len == 12 && memcmp(d.buf, "hello hello ", 12) == 0);
    kp_writer_reset(&d);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_GZIP, cat.buf, cat.len, &d, 11), KP_E_TOO_LARGE);
    kp_write_raw(&cat, "junk", 4);
    kp_writer_reset(&d);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_GZIP, cat.buf, cat.len, &d, 100), KP_E_CORRUPT);
    /* Truncation anywhere, and a bad trailer CRC. */
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_GZIP, c.buf, c.len - 1, &d, 100), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_GZIP, c.buf, 5, &d, 100), KP_E_CORRUPT);
    c.buf[c.len - 6] ^= 1;
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_GZIP, c.buf, c.len, &d, 100), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_GZIP, "", 0, &d, 100), KP_E_CORRUPT);
    /* zlib-wrapped (not gzip) data is refused. */
    {
        uint8_t z[64];
        uLongf zl = sizeof(z);
        CU_ASSERT_EQUAL_FATAL(compress(z, &zl, (const Bytef *)"hello", 5), Z_OK);
        CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_GZIP, z, zl, &d, 100), KP_E_CORRUPT);
    }
    CU_ASSERT_EQUAL(d.len, 0);
    kp_writer_free(&c);
    kp_writer_free(&cat);
    kp_writer_free(&d);
}

static void test_lz4_frames(void)
{
    kp_writer_t c, cat, d;
    uint8_t in[200000];
    uint64_t seed = 11;
    size_t i;

    rt_fill(in, sizeof(in), &seed, 1);
    kp_writer_init(&c);
    kp_writer_init(&cat);
    kp_writer_init(&d);
    CU_ASSERT_EQUAL_FATAL(kp_compress(KP_CODEC_LZ4, in, sizeof(in), &c, 1), 0);
    CU_ASSERT(c.buf[0] == 0x04 && c.buf[1] == 0x22 && c.buf[2] == 0x4d && c.buf[3] == 0x18);
    /* Concatenated frames. */
    kp_write_raw(&cat, c.buf, c.len);
    kp_write_raw(&cat, c.buf, c.len);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_LZ4, cat.buf, cat.len, &d, SIZE_MAX), 0);
    CU_ASSERT_EQUAL(d.len, 2 * sizeof(in));
    /* Frame header checksum (byte 6: after magic, FLG, BD) is verified. */
    kp_writer_reset(&d);
    c.buf[6] ^= 0x55;
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_LZ4, c.buf, c.len, &d, SIZE_MAX), KP_E_CORRUPT);
    c.buf[6] ^= 0x55;
    /* Every truncation fails. */
    for (i = 0; i < c.len; i += 1 + i / 8)
        CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_LZ4, c.buf, i, &d, SIZE_MAX), KP_E_CORRUPT);
    /* Trailing garbage after the frame. */
    kp_write_raw(&c, "xyzw", 4);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_LZ4, c.buf, c.len, &d, SIZE_MAX), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(d.len, 0);
    /* A frame with a content checksum and block checksums (other producers write those). */
    {
        LZ4F_preferences_t p;
        char fr[1024];
        size_t n;
        memset(&p, 0, sizeof(p));
        p.frameInfo.contentChecksumFlag = LZ4F_contentChecksumEnabled;
        p.frameInfo.blockChecksumFlag = LZ4F_blockChecksumEnabled;
        p.frameInfo.contentSize = 300;
        n = LZ4F_compressFrame(fr, sizeof(fr), in, 300, &p);
        CU_ASSERT_FATAL(!LZ4F_isError(n));
        CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_LZ4, fr, n, &d, 300), 0);
        CU_ASSERT(d.len == 300 && memcmp(d.buf, in, 300) == 0);
        kp_writer_reset(&d);
        fr[n - 2] ^= 1; /* content checksum */
        CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_LZ4, fr, n, &d, 300), KP_E_CORRUPT);
    }
    kp_writer_free(&c);
    kp_writer_free(&cat);
    kp_writer_free(&d);
}

static void test_zstd_frames(void)
{
    uint8_t in[100000];
    uint8_t fr[120000];
    uint64_t seed = 5;
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_inBuffer ib = {in, sizeof(in), 0};
    ZSTD_outBuffer ob = {fr, sizeof(fr), 0};
    kp_writer_t d, cat;
    size_t r;

    rt_fill(in, sizeof(in), &seed, 1);
    kp_writer_init(&d);
    kp_writer_init(&cat);
    /* Streaming compression without a pledged size: the frame has no content size. */
    r = ZSTD_compressStream2(cc, &ob, &ib, ZSTD_e_continue);
    CU_ASSERT_FATAL(!ZSTD_isError(r));
    do {
        r = ZSTD_compressStream2(cc, &ob, &ib, ZSTD_e_end);
        CU_ASSERT_FATAL(!ZSTD_isError(r));
    } while (r != 0);
    ZSTD_freeCCtx(cc);
    CU_ASSERT_EQUAL(ZSTD_getFrameContentSize(fr, ob.pos), ZSTD_CONTENTSIZE_UNKNOWN);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_ZSTD, fr, ob.pos, &d, sizeof(in)), 0);
    CU_ASSERT(d.len == sizeof(in) && memcmp(d.buf, in, sizeof(in)) == 0);
    kp_writer_free(&d);
    kp_writer_init(&d);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_ZSTD, fr, ob.pos, &d, 5000), KP_E_TOO_LARGE);
    CU_ASSERT(d.cap <= 8192); /* never grew past the cap's power of two */
    /* Concatenated frames and a skippable frame between them. */
    kp_write_raw(&cat, fr, ob.pos);
    kp_write_raw(&cat,
                 "\x50\x2a\x4d\x18\x03\x00\x00\x00"
                 "abc",
                 11);
    kp_write_raw(&cat, fr, ob.pos);
    kp_writer_reset(&d);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_ZSTD, cat.buf, cat.len, &d, SIZE_MAX), 0);
    CU_ASSERT_EQUAL(d.len, 2 * sizeof(in));
    /* Truncated, garbage, empty. */
    kp_writer_reset(&d);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_ZSTD, fr, ob.pos - 1, &d, SIZE_MAX), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_ZSTD, fr, 3, &d, SIZE_MAX), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_ZSTD, "garbage!", 8, &d, SIZE_MAX), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(kp_decompress(KP_CODEC_ZSTD, "", 0, &d, SIZE_MAX), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(d.len, 0);
    kp_writer_free(&d);
    kp_writer_free(&cat);
}

/* ---- allocator hook ---- */

typedef struct {
    long live, total, fail_after;
} count_alloc_t;

static void *count_alloc(void *opaque, size_t n)
{
    count_alloc_t *ca = opaque;
    void *p;
    if (ca->fail_after >= 0 && ca->total >= ca->fail_after)
        return NULL;
    p = malloc(n + 16);
    if (!p)
        return NULL;
    ca->live++;
    ca->total++;
    return (char *)p + 16;
}

static void count_free(void *opaque, void *p)
{
    count_alloc_t *ca = opaque;
    if (!p)
        return;
    ca->live--;
    free((char *)p - 16);
}

static void test_alloc_hook(void)
{
    uint8_t in[50000];
    uint64_t seed = 13;
    size_t i;

    rt_fill(in, sizeof(in), &seed, 1);
    for (i = 0; i < NCODECS; i++) {
        count_alloc_t ca = {0, 0, -1};
        kp_alloc_t al = {count_alloc, count_free, &ca};
        kp_writer_t c, d;
        long need;
        int codec = codecs[i];

        kp_writer_init(&c);
        kp_writer_init(&d);
        CU_ASSERT_EQUAL(kp_compress_ex(codec, in, sizeof(in), &c, KP_COMPRESS_LEVEL_DEFAULT, &al),
                        0);
        CU_ASSERT_EQUAL(kp_decompress_ex(codec, c.buf, c.len, &d, SIZE_MAX, &al), 0);
        CU_ASSERT_EQUAL(d.len, sizeof(in));
        CU_ASSERT_EQUAL(ca.live, 0);
        if (codec == KP_CODEC_GZIP || codec == KP_CODEC_LZ4 || codec == KP_CODEC_ZSTD)
            CU_ASSERT(ca.total > 0);
        /* Failing allocations: NOMEM, nothing leaked, writer unchanged. */
        need = ca.total;
        while (need-- > 0) {
            count_alloc_t cf = {0, 0, need};
            kp_alloc_t af = {count_alloc, count_free, &cf};
            int rc;
            kp_writer_reset(&d);
            rc = kp_decompress_ex(codec, c.buf, c.len, &d, SIZE_MAX, &af);
            CU_ASSERT(rc == 0 || rc == KP_E_NOMEM);
            if (rc)
                CU_ASSERT_EQUAL(d.len, 0);
            CU_ASSERT_EQUAL(cf.live, 0);
            cf.total = 0;
            kp_writer_reset(&d);
            rc = kp_compress_ex(codec, in, sizeof(in), &d, KP_COMPRESS_LEVEL_DEFAULT, &af);
            CU_ASSERT(rc == 0 || rc == KP_E_NOMEM);
            CU_ASSERT_EQUAL(cf.live, 0);
        }
        kp_writer_free(&c);
        kp_writer_free(&d);
    }
}

void record_suite_compress(void)
{
    CU_pSuite s = CU_add_suite("compress", NULL, NULL);
    CU_add_test(s, "round trip every codec and size", test_roundtrip_all);
    CU_add_test(s, "bad codec ids and levels", test_bad_args);
    CU_add_test(s, "decompression bombs hit the cap", test_bomb);
    CU_add_test(s, "fixed output buffers", test_fixed_writer);
    CU_add_test(s, "snappy xerial and raw", test_snappy_framing);
    CU_add_test(s, "gzip members, trailer, garbage", test_gzip_members);
    CU_add_test(s, "lz4 frames and checksums", test_lz4_frames);
    CU_add_test(s, "zstd frames without content size", test_zstd_frames);
    CU_add_test(s, "custom allocator and allocation failures", test_alloc_hook);
}
