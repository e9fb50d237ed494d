/* Record batch v2: build/parse/iterate round trips, control batches, corruption, truncation,
 * chunks, in-place edits, and batches written by the Java client. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kp_batch.h"
#include "kp_crc32c.h"
#include "record_tests.h"

static const int codecs[] = {KP_CODEC_NONE, KP_CODEC_GZIP, KP_CODEC_SNAPPY, KP_CODEC_LZ4,
                             KP_CODEC_ZSTD};
#define NCODECS (sizeof(codecs) / sizeof(codecs[0]))

static kp_bytes_t B(const char *s)
{
    kp_bytes_t b = {(const uint8_t *)s, s ? (int32_t)strlen(s) : -1};
    return b;
}

static int bytes_eq(kp_bytes_t b, const char *s)
{
    if (!s)
        return b.len == -1;
    return b.len == (int32_t)strlen(s) && (b.len == 0 || memcmp(b.ptr, s, (size_t)b.len) == 0);
}

/* The four records the Java data files hold (see data/README.md). */
#define LONG_VALUE "value-1 with a longer body, repeated repeated repeated repeated"
static const struct {
    int64_t ts;
    const char *key, *value;
    int hdrs;
} std_recs[] = {
    {1700000000000LL, "key-0", "value-0", 0},
    {1700000000005LL, NULL, LONG_VALUE, 0},
    {1700000000003LL, "key-2", NULL, 1},
    {1700000000010LL, "", "", 0},
};

static void build_std(kp_writer_t *out, const kp_batch_opts_t *o)
{
    kp_batch_builder_t bb;
    kp_record_header_t h[2] = {{{"h1", 2}, {(const uint8_t *)"v1", 2}}, {{"h2", 2}, {NULL, -1}}};
    size_t i;

    kp_batch_builder_init(&bb, o);
    for (i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(kp_batch_builder_add(&bb, std_recs[i].ts, B(std_recs[i].key),
                                             B(std_recs[i].value), std_recs[i].hdrs ? h : NULL,
                                             std_recs[i].hdrs ? 2 : 0),
                        0);
    CU_ASSERT_EQUAL(kp_batch_builder_finish(&bb, out), 0);
    kp_batch_builder_free(&bb);
}

/* Iterate a batch holding the std records and check every field. */
static void check_std_records(const kp_batch_t *b, int log_append)
{
    kp_record_iter_t it;
    kp_record_t r;
    kp_writer_t scratch;
    int i = 0, rc;

    kp_writer_init(&scratch);
    CU_ASSERT_EQUAL_FATAL(kp_record_iter_init(&it, b, &scratch, 1 << 20), 0);
    while ((rc = kp_record_iter_next(&it, &r)) == 1) {
        CU_ASSERT_FATAL(i < 4);
        CU_ASSERT_EQUAL(r.offsetDelta, i);
        CU_ASSERT_EQUAL(r.offset, b->hdr.baseOffset + i);
        CU_ASSERT_EQUAL(r.timestamp, log_append ? b->hdr.maxTimestamp : std_recs[i].ts);
        CU_ASSERT(bytes_eq(r.key, std_recs[i].key));
        CU_ASSERT(bytes_eq(r.value, std_recs[i].value));
        CU_ASSERT_EQUAL(r.header_cnt, std_recs[i].hdrs ? 2 : 0);
        if (std_recs[i].hdrs) {
            kp_record_header_t h;
            size_t pos = 0;
            CU_ASSERT_EQUAL(kp_record_header_next(&r, &pos, &h), 1);
            CU_ASSERT(kp_str_eq(h.key, "h1"));
            CU_ASSERT(bytes_eq(h.value, "v1"));
            CU_ASSERT_EQUAL(kp_record_header_next(&r, &pos, &h), 1);
            CU_ASSERT(kp_str_eq(h.key, "h2"));
            CU_ASSERT_EQUAL(h.value.len, -1);
            CU_ASSERT_EQUAL(kp_record_header_next(&r, &pos, &h), 0);
        }
        i++;
    }
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(i, 4);
    kp_writer_free(&scratch);
}

static void test_roundtrip_codecs(void)
{
    size_t i;
    for (i = 0; i < NCODECS; i++) {
        kp_batch_opts_t o;
        kp_writer_t w;
        kp_batch_t b;
        const char *why = NULL;

        kp_batch_opts_init(&o);
        o.baseOffset = 1000;
        o.partitionLeaderEpoch = 9;
        o.producerId = 4242;
        o.producerEpoch = 3;
        o.baseSequence = 17;
        o.codec = codecs[i];
        o.transactional = (i & 1) != 0;
        kp_writer_init(&w);
        build_std(&w, &o);
        CU_ASSERT_EQUAL_FATAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, &why), 0);
        CU_ASSERT_EQUAL(b.size, w.len);
        CU_ASSERT_EQUAL(b.hdr.baseOffset, 1000);
        CU_ASSERT_EQUAL(b.hdr.batchLength, (int32_t)w.len - 12);
        CU_ASSERT_EQUAL(b.hdr.partitionLeaderEpoch, 9);
        CU_ASSERT_EQUAL(b.hdr.magic, 2);
        CU_ASSERT_EQUAL(b.hdr.crc, kp_crc32c(0, w.buf + 21, w.len - 21));
        CU_ASSERT_EQUAL(kp_batch_hdr_codec(&b.hdr), codecs[i]);
        CU_ASSERT_EQUAL(kp_batch_hdr_is_transactional(&b.hdr), (i & 1) != 0);
        CU_ASSERT_FALSE(kp_batch_hdr_is_control(&b.hdr));
        CU_ASSERT_FALSE(kp_batch_hdr_log_append_time(&b.hdr));
        CU_ASSERT_EQUAL(b.hdr.lastOffsetDelta, 3);
        CU_ASSERT_EQUAL(b.hdr.baseTimestamp, 1700000000000LL);
        CU_ASSERT_EQUAL(b.hdr.maxTimestamp, 1700000000010LL);
        CU_ASSERT_EQUAL(b.hdr.producerId, 4242);
        CU_ASSERT_EQUAL(b.hdr.producerEpoch, 3);
        CU_ASSERT_EQUAL(b.hdr.baseSequence, 17);
        CU_ASSERT_EQUAL(b.hdr.recordCount, 4);
        CU_ASSERT_EQUAL(kp_batch_hdr_last_offset(&b.hdr), 1003);
        check_std_records(&b, 0);
        kp_writer_free(&w);
    }
}

static void test_log_append_time(void)
{
    kp_batch_opts_t o;
    kp_writer_t w;
    kp_batch_t b;

    kp_batch_opts_init(&o);
    o.log_append_time = true;
    o.log_append_time_ms = 1800000000000LL;
    o.codec = KP_CODEC_ZSTD;
    kp_writer_init(&w);
    build_std(&w, &o);
    CU_ASSERT_EQUAL_FATAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), 0);
    CU_ASSERT_TRUE(kp_batch_hdr_log_append_time(&b.hdr));
    CU_ASSERT_EQUAL(b.hdr.maxTimestamp, 1800000000000LL);
    check_std_records(&b, 1);
    kp_writer_free(&w);
}

static void test_builder_errors(void)
{
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    kp_writer_t w;
    kp_record_header_t h = {{NULL, -1}, {NULL, -1}};

    kp_batch_opts_init(&o);
    kp_writer_init(&w);
    kp_batch_builder_init(&bb, &o);
    CU_ASSERT_EQUAL(kp_batch_builder_finish(&bb, &w), KP_E_INVALID); /* no records */
    CU_ASSERT_EQUAL(kp_batch_builder_add(&bb, 1, B("k"), B("v"), &h, 1), KP_E_INVALID);
    CU_ASSERT_EQUAL(kp_batch_builder_finish(&bb, &w), KP_E_INVALID); /* sticky */
    kp_batch_builder_free(&bb);
    kp_batch_builder_init(&bb, &o);
    CU_ASSERT_EQUAL(kp_batch_builder_add(&bb, 1, B("k"), B("v"), NULL, -1), KP_E_INVALID);
    kp_batch_builder_free(&bb);
    o.codec = 6;
    kp_batch_builder_init(&bb, &o);
    CU_ASSERT_EQUAL(kp_batch_builder_add(&bb, 1, B("k"), B("v"), NULL, 0), 0);
    CU_ASSERT_EQUAL(kp_batch_builder_finish(&bb, &w), KP_E_UNSUPPORTED);
    CU_ASSERT_EQUAL(w.len, 0);
    kp_batch_builder_free(&bb);
    kp_writer_free(&w);
}

static void check_control(const uint8_t *buf, size_t len, int16_t type, int32_t coord_epoch,
                          int transactional)
{
    kp_batch_t b;
    kp_record_iter_t it;
    kp_record_t r;
    kp_control_t c;

    CU_ASSERT_EQUAL_FATAL(kp_batch_parse(buf, len, 0, 0, &b, NULL), 0);
    CU_ASSERT_TRUE(kp_batch_hdr_is_control(&b.hdr));
    CU_ASSERT_EQUAL(kp_batch_hdr_is_transactional(&b.hdr), transactional);
    CU_ASSERT_EQUAL(b.hdr.recordCount, 1);
    CU_ASSERT_EQUAL_FATAL(kp_record_iter_init(&it, &b, NULL, 0), 0);
    CU_ASSERT_EQUAL_FATAL(kp_record_iter_next(&it, &r), 1);
    CU_ASSERT_EQUAL(r.key.len, 4);
    CU_ASSERT_EQUAL(r.value.len, 6);
    CU_ASSERT_EQUAL(kp_control_parse(&r, &c, NULL), 0);
    CU_ASSERT_EQUAL(c.keyVersion, 0);
    CU_ASSERT_EQUAL(c.type, type);
    CU_ASSERT_EQUAL(c.valueVersion, 0);
    if (type == KP_CONTROL_TYPE_MIRROR_PID_RESET) {
        CU_ASSERT_EQUAL(c.reserved, 0);
        CU_ASSERT_EQUAL(c.coordinatorEpoch, -1);
    } else {
        CU_ASSERT_EQUAL(c.coordinatorEpoch, coord_epoch);
    }
    CU_ASSERT_EQUAL(kp_record_iter_next(&it, &r), 0);
    {
        int16_t t = -1;
        CU_ASSERT_EQUAL(kp_batch_control_type(&b, &t), 0);
        CU_ASSERT_EQUAL(t, type);
    }
}

static void test_control_batches(void)
{
    kp_batch_opts_t o;
    kp_writer_t w;
    kp_batch_t b;
    static const uint8_t pid_reset_key[4] = {0, 0, 0, 7};
    static const uint8_t pid_reset_value[6] = {0, 0, 0, 0, 0, 0};

    kp_writer_init(&w);
    kp_batch_opts_init(&o);
    o.baseOffset = 500;
    o.partitionLeaderEpoch = 6;
    o.producerId = 77;
    o.producerEpoch = 1;
    o.transactional = true;
    CU_ASSERT_EQUAL_FATAL(
        kp_batch_build_control(&w, &o, KP_CONTROL_TYPE_ABORT, 12, 1700000000100LL), 0);
    check_control(w.buf, w.len, KP_CONTROL_TYPE_ABORT, 12, 1);
    /* Byte-identical to what the Java client builds for the same marker. */
    {
        size_t jl;
        uint8_t *j = rt_load_hex("java_abort.hex", &jl);
        CU_ASSERT_PTR_NOT_NULL_FATAL(j);
        CU_ASSERT(jl == w.len && memcmp(j, w.buf, jl) == 0);
        free(j);
    }
    kp_writer_reset(&w);
    o.baseOffset = 501;
    CU_ASSERT_EQUAL_FATAL(
        kp_batch_build_control(&w, &o, KP_CONTROL_TYPE_COMMIT, 13, 1700000000200LL), 0);
    check_control(w.buf, w.len, KP_CONTROL_TYPE_COMMIT, 13, 1);
    {
        size_t jl;
        uint8_t *j = rt_load_hex("java_commit.hex", &jl);
        CU_ASSERT_PTR_NOT_NULL_FATAL(j);
        CU_ASSERT(jl == w.len && memcmp(j, w.buf, jl) == 0);
        free(j);
    }

    /* MIRROR_PID_RESET: control, not transactional, no producer; key {0, 7}, value {0, 0}. */
    kp_writer_reset(&w);
    kp_batch_opts_mirror_pid_reset(&o, 9000, 44);
    CU_ASSERT_EQUAL_FATAL(
        kp_batch_build_control(&w, &o, KP_CONTROL_TYPE_MIRROR_PID_RESET, 99, 1700000000300LL), 0);
    check_control(w.buf, w.len, KP_CONTROL_TYPE_MIRROR_PID_RESET, 0, 0);
    CU_ASSERT_EQUAL_FATAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), 0);
    CU_ASSERT_EQUAL(b.hdr.baseOffset, 9000);
    CU_ASSERT_EQUAL(b.hdr.partitionLeaderEpoch, 44);
    CU_ASSERT_EQUAL(b.hdr.producerId, -1);
    CU_ASSERT_EQUAL(b.hdr.producerEpoch, -1);
    CU_ASSERT_EQUAL(b.hdr.baseSequence, -1);
    CU_ASSERT_EQUAL(b.hdr.attributes, KP_BATCH_ATTR_CONTROL);
    /* The record bytes: length 14, attrs 0, ts delta 0, offset delta 0, key len 4 (zigzag 8),
     * key, value len 6 (zigzag 12), value, 0 headers. */
    {
        static const uint8_t rec[] = {0x20, 0, 0, 0, 0x08, 0, 0, 0, 7, 0x0c, 0, 0, 0, 0, 0, 0, 0};
        CU_ASSERT_EQUAL(b.records_len, sizeof(rec));
        CU_ASSERT(memcmp(b.records, rec, sizeof(rec)) == 0);
        CU_ASSERT(memcmp(rec + 5, pid_reset_key, 4) == 0);
        CU_ASSERT(memcmp(rec + 10, pid_reset_value, 6) == 0);
    }

    /* kp_batch_control_type() on data batches and compressed control batches. */
    {
        int16_t t;
        kp_writer_t d;
        kp_batch_opts_t od;
        kp_batch_opts_init(&od);
        kp_writer_init(&d);
        build_std(&d, &od);
        CU_ASSERT_EQUAL_FATAL(kp_batch_parse(d.buf, d.len, 0, 0, &b, NULL), 0);
        CU_ASSERT_EQUAL(kp_batch_control_type(&b, &t), KP_E_INVALID);
        kp_writer_reset(&d);
        o.codec = KP_CODEC_LZ4;
        CU_ASSERT_EQUAL_FATAL(
            kp_batch_build_control(&d, &o, KP_CONTROL_TYPE_MIRROR_PID_RESET, 0, 1), 0);
        CU_ASSERT_EQUAL_FATAL(kp_batch_parse(d.buf, d.len, 0, 0, &b, NULL), 0);
        CU_ASSERT_EQUAL(kp_batch_control_type(&b, &t), KP_E_UNSUPPORTED);
        kp_writer_free(&d);
    }

    /* Invalid: markers without a transactional producer, unknown types. */
    kp_writer_reset(&w);
    kp_batch_opts_init(&o);
    CU_ASSERT_EQUAL(kp_batch_build_control(&w, &o, KP_CONTROL_TYPE_ABORT, 0, 0), KP_E_INVALID);
    o.producerId = 5;
    CU_ASSERT_EQUAL(kp_batch_build_control(&w, &o, KP_CONTROL_TYPE_COMMIT, 0, 0), KP_E_INVALID);
    o.transactional = true;
    CU_ASSERT_EQUAL(kp_batch_build_control(&w, &o, 2, 0, 0), KP_E_INVALID);
    CU_ASSERT_EQUAL(w.len, 0);
    kp_writer_free(&w);
}

static void test_control_parse_edges(void)
{
    kp_record_t r;
    kp_control_t c;
    const char *why = NULL;

    memset(&r, 0, sizeof(r));
    r.key = (kp_bytes_t){(const uint8_t *)"\0\0\0", 3};
    r.value = KP_BYTES_NULL;
    CU_ASSERT_EQUAL(kp_control_parse(&r, &c, &why), KP_E_CORRUPT);
    CU_ASSERT_PTR_NOT_NULL(why);
    r.key = KP_BYTES_NULL;
    CU_ASSERT_EQUAL(kp_control_parse(&r, &c, NULL), KP_E_CORRUPT);
    r.key = (kp_bytes_t){(const uint8_t *)"\xff\xff\0\0", 4}; /* negative version */
    CU_ASSERT_EQUAL(kp_control_parse(&r, &c, NULL), KP_E_CORRUPT);
    r.key = (kp_bytes_t){(const uint8_t *)"\0\0\0\1", 4}; /* COMMIT with a short value */
    r.value = (kp_bytes_t){(const uint8_t *)"\0\0\0\0\0", 5};
    CU_ASSERT_EQUAL(kp_control_parse(&r, &c, NULL), KP_E_CORRUPT);
    r.key = (kp_bytes_t){(const uint8_t *)"\0\0\0\7", 4}; /* type 7, version only */
    r.value = (kp_bytes_t){(const uint8_t *)"\0\0", 2};
    CU_ASSERT_EQUAL(kp_control_parse(&r, &c, NULL), 0);
    CU_ASSERT_EQUAL(c.type, KP_CONTROL_TYPE_MIRROR_PID_RESET);
    r.value = KP_BYTES_NULL;
    CU_ASSERT_EQUAL(kp_control_parse(&r, &c, NULL), KP_E_CORRUPT);
    r.key = (kp_bytes_t){(const uint8_t *)"\0\1\0\x2a", 4}; /* unknown type, newer key version */
    CU_ASSERT_EQUAL(kp_control_parse(&r, &c, NULL), 0);
    CU_ASSERT_EQUAL(c.type, 42);
    CU_ASSERT_EQUAL(c.keyVersion, 1);
    CU_ASSERT_EQUAL(c.valueVersion, -1);
}

/* A small uncompressed batch for the corruption tests. */
static void build_small(kp_writer_t *w, int codec)
{
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    kp_record_header_t h = {{"hk", 2}, {(const uint8_t *)"hv", 2}};

    kp_batch_opts_init(&o);
    o.baseOffset = 77;
    o.partitionLeaderEpoch = 3;
    o.producerId = 1;
    o.producerEpoch = 0;
    o.baseSequence = 0;
    o.codec = codec;
    kp_batch_builder_init(&bb, &o);
    kp_batch_builder_add(&bb, 1000, B("a"), B("bb"), &h, 1);
    kp_batch_builder_add(&bb, 1001, KP_BYTES_NULL, B("ccc"), NULL, 0);
    CU_ASSERT_EQUAL(kp_batch_builder_finish(&bb, w), 0);
    kp_batch_builder_free(&bb);
}

/* Parse and fully iterate; 0 if everything is fine. */
static int parse_and_iterate(const uint8_t *buf, size_t len, kp_batch_t *b)
{
    kp_record_iter_t it;
    kp_record_t r;
    kp_writer_t scratch;
    int rc = kp_batch_parse(buf, len, 0, 0, b, NULL);
    if (rc)
        return rc;
    kp_writer_init(&scratch);
    rc = kp_record_iter_init(&it, b, &scratch, 1 << 20);
    if (rc == 0)
        while ((rc = kp_record_iter_next(&it, &r)) == 1)
            ;
    kp_writer_free(&scratch);
    return rc;
}

/*
 * Flip every byte (three different masks) of a small batch: each flip is caught by the CRC or
 * a framing check, except in the CRC-excluded header fields baseOffset (0-7) and
 * partitionLeaderEpoch (12-15), where the batch parses with the changed value.
 */
static void test_single_byte_flips(void)
{
    static const uint8_t masks[] = {0x01, 0x80, 0xff};
    size_t ci;

    for (ci = 0; ci < 2; ci++) {
        kp_writer_t w;
        kp_batch_t orig, b;
        size_t pos, m;

        kp_writer_init(&w);
        build_small(&w, ci ? KP_CODEC_LZ4 : KP_CODEC_NONE);
        CU_ASSERT_EQUAL_FATAL(parse_and_iterate(w.buf, w.len, &orig), 0);
        for (pos = 0; pos < w.len; pos++) {
            for (m = 0; m < sizeof(masks); m++) {
                int rc;
                w.buf[pos] ^= masks[m];
                rc = kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL);
                if (pos < 8) {
                    CU_ASSERT_EQUAL(rc, 0);
                    CU_ASSERT_NOT_EQUAL(b.hdr.baseOffset, orig.hdr.baseOffset);
                } else if (pos >= 12 && pos < 16) {
                    CU_ASSERT_EQUAL(rc, 0);
                    CU_ASSERT_NOT_EQUAL(b.hdr.partitionLeaderEpoch, orig.hdr.partitionLeaderEpoch);
                } else if (pos == 16) {
                    /* magic: 0/1 read as the legacy format, anything else unknown */
                    CU_ASSERT(rc == KP_E_UNSUPPORTED || rc == KP_E_CORRUPT);
                } else if (pos < 12) {
                    /* batchLength: longer than the buffer, or shorter and failing the CRC */
                    CU_ASSERT(rc == KP_E_TRUNCATED || rc == KP_E_CORRUPT);
                } else {
                    CU_ASSERT_EQUAL(rc, KP_E_CORRUPT);
                }
                w.buf[pos] ^= masks[m];
            }
        }
        /* With the CRC check off, the record framing still catches what it can, and nothing
         * reads out of bounds (ASan watches). */
        for (pos = 21; pos < w.len; pos++) {
            w.buf[pos] ^= 0xff;
            if (kp_batch_parse(w.buf, w.len, 0, KP_BATCH_F_SKIP_CRC, &b, NULL) == 0) {
                kp_record_iter_t it;
                kp_record_t r;
                kp_writer_t scratch;
                kp_writer_init(&scratch);
                if (kp_record_iter_init(&it, &b, &scratch, 4096) == 0)
                    while (kp_record_iter_next(&it, &r) == 1)
                        ;
                kp_writer_free(&scratch);
            }
            w.buf[pos] ^= 0xff;
        }
        kp_writer_free(&w);
    }
}

/* Every truncation of a batch: parse says TRUNCATED; the iterator sees a trailing partial. */
static void test_truncation(void)
{
    size_t ci;
    for (ci = 0; ci < NCODECS; ci++) {
        kp_writer_t w;
        size_t n;

        kp_writer_init(&w);
        build_small(&w, codecs[ci]);
        for (n = 0; n < w.len; n++) {
            kp_batch_t b;
            kp_batch_iter_t it;
            /* Copy into an exact-size allocation so ASan sees any over-read. */
            uint8_t *cut = malloc(n ? n : 1);
            memcpy(cut, w.buf, n);
            CU_ASSERT_EQUAL(kp_batch_parse(cut, n, 0, 0, &b, NULL), KP_E_TRUNCATED);
            kp_batch_iter_init(&it, cut, n, 0, 0);
            CU_ASSERT_EQUAL(kp_batch_iter_next(&it, &b), 0);
            CU_ASSERT_EQUAL(it.trailing, n);
            CU_ASSERT_EQUAL(it.err, 0);
            free(cut);
        }
        /* Records data cut short (a decompressed buffer that lost its tail). */
        if (codecs[ci] == KP_CODEC_NONE) {
            kp_batch_t b;
            CU_ASSERT_EQUAL_FATAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), 0);
            for (n = 0; n < b.records_len; n++) {
                kp_record_iter_t it;
                kp_record_t r;
                int rc;
                uint8_t *cut = malloc(n ? n : 1);
                memcpy(cut, b.records, n);
                kp_record_iter_init_raw(&it, &b.hdr, cut, n);
                while ((rc = kp_record_iter_next(&it, &r)) == 1)
                    ;
                CU_ASSERT_EQUAL(rc, KP_E_CORRUPT);
                free(cut);
            }
        }
        kp_writer_free(&w);
    }
}

/* Re-CRC a batch after editing it, for tests of the checks behind the CRC. */
static void recrc(kp_writer_t *w)
{
    kp_writer_patch_int32(w, 17, (int32_t)kp_batch_crc_compute(w->buf, w->len));
}

static void test_framing_checks(void)
{
    kp_writer_t w;
    kp_batch_t b;
    const char *why;

    kp_writer_init(&w);
    build_small(&w, KP_CODEC_NONE);
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), 0);
    /* size limit */
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, w.len - 1, 0, &b, NULL), KP_E_TOO_LARGE);
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, w.len, 0, &b, NULL), 0);
    /* magic 0 and 1: the distinct "unsupported message format" error */
    w.buf[16] = 1;
    why = NULL;
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, &why), KP_E_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(why);
    w.buf[16] = 0;
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, 17, 0, 0, &b, NULL), KP_E_UNSUPPORTED);
    w.buf[16] = 3;
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), KP_E_CORRUPT);
    w.buf[16] = 2;
    /* batchLength below the header */
    kp_writer_patch_int32(&w, 8, 48);
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), KP_E_CORRUPT);
    kp_writer_patch_int32(&w, 8, -5);
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), KP_E_CORRUPT);
    kp_writer_patch_int32(&w, 8, (int32_t)w.len - 12);
    /* codec id 5..7 */
    w.buf[22] |= 5;
    recrc(&w);
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), KP_E_CORRUPT);
    w.buf[22] &= (uint8_t)~7;
    /* recordCount vs lastOffsetDelta */
    kp_writer_patch_int32(&w, 57, 3); /* 3 records, lastOffsetDelta 1 */
    recrc(&w);
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), KP_E_CORRUPT);
    kp_writer_patch_int32(&w, 57, -1);
    recrc(&w);
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), KP_E_CORRUPT);
    kp_writer_patch_int32(&w, 23, -1);
    recrc(&w);
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), KP_E_CORRUPT);
    /* Fewer records than the offset span (compaction) parses; the extra record data is then
     * reported by the record iterator. */
    kp_writer_patch_int32(&w, 23, 5);
    kp_writer_patch_int32(&w, 57, 1);
    recrc(&w);
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), 0);
    {
        kp_record_iter_t it;
        kp_record_t r;
        CU_ASSERT_EQUAL(kp_record_iter_init(&it, &b, NULL, 0), 0);
        CU_ASSERT_EQUAL(kp_record_iter_next(&it, &r), 1);
        CU_ASSERT_EQUAL(kp_record_iter_next(&it, &r), KP_E_CORRUPT);
        CU_ASSERT_PTR_NOT_NULL(it.errstr);
    }
    /* More records than can fit the bytes of an uncompressed batch. */
    kp_writer_patch_int32(&w, 23, 1000);
    kp_writer_patch_int32(&w, 57, 1000);
    recrc(&w);
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), KP_E_CORRUPT);
    /* The CRC check can be skipped. */
    kp_writer_patch_int32(&w, 23, 1);
    kp_writer_patch_int32(&w, 57, 2);
    w.buf[w.len - 1] ^= 1;
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(kp_batch_parse(w.buf, w.len, 0, KP_BATCH_F_SKIP_CRC, &b, NULL), 0);
    kp_writer_free(&w);
}

/* Hand-made record bodies: every length field is bounds-checked. */
static void test_record_framing(void)
{
    static const struct {
        const char *name;
        uint8_t bytes[24];
        size_t len;
    } bad[] = {
        {"record length past the end", {0x40, 0, 0, 0}, 4},
        {"negative record length", {0x01, 0}, 2},
        {"key past the record", {0x0c, 0, 0, 0, 0x10, 'a', 0, 0}, 8},
        {"negative key length", {0x0a, 0, 0, 0, 0x03, 0, 0}, 7},
        {"value past the record", {0x0a, 0, 0, 0, 0x01, 0x20, 0}, 7},
        {"negative header count", {0x0c, 0, 0, 0, 0x01, 0x01, 0x01}, 7},
        {"header count too big", {0x0c, 0, 0, 0, 0x01, 0x01, 0x40}, 7},
        {"null header key", {0x0e, 0, 0, 0, 0x01, 0x01, 0x02, 0x01, 0x01}, 9},
        {"header value past the record", {0x10, 0, 0, 0, 0x01, 0x01, 0x02, 0x00, 0x08}, 9},
        {"bytes left in the record", {0x0e, 0, 0, 0, 0x01, 0x01, 0x00, 0, 0}, 9},
        {"bad varint", {0x0a, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 12},
        {"bytes after the last record", {0x0c, 0, 0, 0, 0x01, 0x01, 0x00, 0x00}, 8},
    };
    kp_batch_hdr_t h;
    size_t i;

    memset(&h, 0, sizeof(h));
    h.recordCount = 1;
    h.lastOffsetDelta = 0;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        kp_record_iter_t it;
        kp_record_t r;
        int rc;
        uint8_t *p = malloc(bad[i].len);
        memcpy(p, bad[i].bytes, bad[i].len);
        kp_record_iter_init_raw(&it, &h, p, bad[i].len);
        while ((rc = kp_record_iter_next(&it, &r)) == 1)
            ;
        if (rc != KP_E_CORRUPT)
            printf("\n  case '%s' gave %d\n", bad[i].name, rc);
        CU_ASSERT_EQUAL(rc, KP_E_CORRUPT);
        CU_ASSERT_PTR_NOT_NULL(it.errstr);
        free(p);
    }
    /* No data at all, or a compressed batch whose records decompress to nothing (found by
     * fuzz_batch: a growable scratch writer has no buffer then). */
    {
        kp_record_iter_t it;
        kp_record_t r;
        kp_batch_opts_t o;
        kp_batch_builder_t bb;
        kp_writer_t w, scratch, empty;
        kp_batch_t b;
        size_t hdr_len;

        kp_record_iter_init_raw(&it, &h, NULL, 0);
        CU_ASSERT_EQUAL(kp_record_iter_next(&it, &r), KP_E_CORRUPT);
        kp_batch_opts_init(&o);
        o.codec = KP_CODEC_SNAPPY;
        kp_writer_init(&w);
        kp_batch_builder_init(&bb, &o);
        kp_batch_builder_add(&bb, 1, B("k"), B("v"), NULL, 0);
        CU_ASSERT_EQUAL_FATAL(kp_batch_builder_finish(&bb, &w), 0);
        kp_batch_builder_free(&bb);
        /* Replace the records by an empty xerial stream (the 16-byte header only). */
        kp_writer_init(&empty);
        CU_ASSERT_EQUAL_FATAL(kp_compress(KP_CODEC_SNAPPY, "", 0, &empty, 0), 0);
        hdr_len = KP_BATCH_HEADER_SIZE;
        w.len = hdr_len;
        kp_write_raw(&w, empty.buf, empty.len);
        kp_writer_patch_int32(&w, 8, (int32_t)(w.len - 12));
        recrc(&w);
        CU_ASSERT_EQUAL_FATAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), 0);
        kp_writer_init(&scratch);
        CU_ASSERT_EQUAL(kp_record_iter_init(&it, &b, &scratch, 100), 0);
        CU_ASSERT_EQUAL(kp_record_iter_next(&it, &r), KP_E_CORRUPT);
        kp_writer_free(&scratch);
        kp_writer_free(&empty);
        kp_writer_free(&w);
    }
    /* And a good one: empty key, null value, no headers. */
    {
        static const uint8_t good[] = {0x0c, 0, 0, 0, 0x00, 0x01, 0x00};
        kp_record_iter_t it;
        kp_record_t r;
        kp_record_iter_init_raw(&it, &h, good, sizeof(good));
        CU_ASSERT_EQUAL(kp_record_iter_next(&it, &r), 1);
        CU_ASSERT_EQUAL(r.key.len, 0);
        CU_ASSERT_EQUAL(r.value.len, -1);
        CU_ASSERT_EQUAL(kp_record_iter_next(&it, &r), 0);
    }
}

static void test_decompress_cap(void)
{
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    kp_writer_t w, scratch;
    kp_batch_t b;
    kp_record_iter_t it;
    static uint8_t big[100000];
    size_t ci;

    for (ci = 1; ci < NCODECS; ci++) {
        kp_batch_opts_init(&o);
        o.codec = codecs[ci];
        kp_writer_init(&w);
        kp_writer_init(&scratch);
        kp_batch_builder_init(&bb, &o);
        kp_batch_builder_add(&bb, 1, KP_BYTES_NULL, (kp_bytes_t){big, sizeof(big)}, NULL, 0);
        CU_ASSERT_EQUAL_FATAL(kp_batch_builder_finish(&bb, &w), 0);
        kp_batch_builder_free(&bb);
        CU_ASSERT(w.len < 6000); /* snappy tops out near 21:1 */
        CU_ASSERT_EQUAL_FATAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), 0);
        CU_ASSERT_EQUAL(kp_record_iter_init(&it, &b, &scratch, 50000), KP_E_TOO_LARGE);
        CU_ASSERT_EQUAL(scratch.len, 0);
        CU_ASSERT_EQUAL(kp_record_iter_init(&it, &b, NULL, 50000), KP_E_INVALID);
        CU_ASSERT_EQUAL(kp_record_iter_init(&it, &b, &scratch, 200000), 0);
        /* recordCount 0 (compaction): no decompression, no records, no error. */
        kp_writer_reset(&scratch);
        kp_writer_patch_int32(&w, 57, 0);
        recrc(&w);
        CU_ASSERT_EQUAL_FATAL(kp_batch_parse(w.buf, w.len, 0, 0, &b, NULL), 0);
        CU_ASSERT_EQUAL(kp_record_iter_init(&it, &b, &scratch, 10), 0);
        CU_ASSERT_EQUAL(scratch.len, 0);
        {
            kp_record_t r;
            CU_ASSERT_EQUAL(kp_record_iter_next(&it, &r), 0);
        }
        kp_writer_free(&w);
        kp_writer_free(&scratch);
    }
}

static void test_iter_and_chunk(void)
{
    kp_writer_t w;
    kp_batch_iter_t it;
    kp_batch_t b;
    kp_chunk_info_t info;
    size_t ci, sizes[NCODECS], total;
    int n = 0;

    kp_writer_init(&w);
    for (ci = 0; ci < NCODECS; ci++) {
        kp_batch_opts_t o;
        size_t before = w.len;
        kp_batch_opts_init(&o);
        o.baseOffset = (int64_t)(10 * ci);
        o.partitionLeaderEpoch = (int32_t)ci;
        o.codec = codecs[ci];
        build_std(&w, &o);
        sizes[ci] = w.len - before;
    }
    total = w.len;
    kp_write_raw(&w, w.buf, 30); /* a trailing partial batch */

    kp_batch_iter_init(&it, w.buf, w.len, 0, 0);
    while (kp_batch_iter_next(&it, &b) == 1) {
        CU_ASSERT_EQUAL(b.hdr.baseOffset, 10 * n);
        CU_ASSERT_EQUAL(b.size, sizes[n]);
        check_std_records(&b, 0);
        n++;
    }
    CU_ASSERT_EQUAL(n, (int)NCODECS);
    CU_ASSERT_EQUAL(it.err, 0);
    CU_ASSERT_EQUAL(it.trailing, 30);

    CU_ASSERT_EQUAL(kp_batch_chunk_check(w.buf, w.len, 0, KP_BATCH_F_EPOCH_MONOTONIC, &info), 0);
    CU_ASSERT_EQUAL(info.valid_bytes, total);
    CU_ASSERT_EQUAL(info.trailing, 30);
    CU_ASSERT_EQUAL(info.batch_cnt, (int32_t)NCODECS);
    CU_ASSERT_EQUAL(info.first_offset, 0);
    CU_ASSERT_EQUAL(info.next_offset, 10 * (NCODECS - 1) + 4);
    CU_ASSERT_EQUAL(info.max_epoch, (int32_t)NCODECS - 1);
    CU_ASSERT_EQUAL(info.max_timestamp, 1700000000010LL);

    /* Empty chunk. */
    CU_ASSERT_EQUAL(kp_batch_chunk_check(NULL, 0, 0, 0, &info), 0);
    CU_ASSERT_EQUAL(info.batch_cnt, 0);
    CU_ASSERT_EQUAL(info.first_offset, -1);

    /* A corrupt third batch: the first two are reported valid, the error points at it. */
    w.buf[sizes[0] + sizes[1] + 40] ^= 0x10;
    CU_ASSERT_EQUAL(kp_batch_chunk_check(w.buf, w.len, 0, 0, &info), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(info.valid_bytes, sizes[0] + sizes[1]);
    CU_ASSERT_EQUAL(info.bad_pos, sizes[0] + sizes[1]);
    CU_ASSERT_EQUAL(info.bad_offset, 20);
    CU_ASSERT_PTR_NOT_NULL(info.errstr);
    kp_batch_iter_init(&it, w.buf, w.len, 0, 0);
    CU_ASSERT_EQUAL(kp_batch_iter_next(&it, &b), 1);
    CU_ASSERT_EQUAL(kp_batch_iter_next(&it, &b), 1);
    CU_ASSERT_EQUAL(kp_batch_iter_next(&it, &b), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(kp_batch_iter_next(&it, &b), KP_E_CORRUPT); /* sticky */
    w.buf[sizes[0] + sizes[1] + 40] ^= 0x10;

    /* Offsets must increase; epochs must not decrease when asked. */
    kp_batch_set_base_offset(w.buf + sizes[0], w.len - sizes[0], 3);
    CU_ASSERT_EQUAL(kp_batch_chunk_check(w.buf, w.len, 0, 0, &info), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(info.bad_pos, sizes[0]);
    CU_ASSERT_EQUAL(info.bad_offset, 3);
    kp_batch_set_base_offset(w.buf + sizes[0], w.len - sizes[0], 4);
    CU_ASSERT_EQUAL(kp_batch_chunk_check(w.buf, w.len, 0, 0, &info), 0);
    kp_batch_set_partition_leader_epoch(w.buf + sizes[0], w.len - sizes[0], 7);
    CU_ASSERT_EQUAL(kp_batch_chunk_check(w.buf, w.len, 0, 0, &info), 0);
    CU_ASSERT_EQUAL(info.max_epoch, 7);
    CU_ASSERT_EQUAL(kp_batch_chunk_check(w.buf, w.len, 0, KP_BATCH_F_EPOCH_MONOTONIC, &info),
                    KP_E_CORRUPT);
    CU_ASSERT_EQUAL(info.bad_pos, sizes[0] + sizes[1]);

    /* Offsets at the very top of the int64 range (found by fuzz_batch): the next offset
     * would overflow, so the batch is out of range. */
    kp_batch_set_partition_leader_epoch(w.buf + sizes[0], w.len - sizes[0], 0);
    kp_batch_set_base_offset(w.buf, w.len, INT64_MAX - 3);
    CU_ASSERT_EQUAL(kp_batch_chunk_check(w.buf, sizes[0], 0, 0, &info), KP_E_CORRUPT);
    kp_batch_set_base_offset(w.buf, w.len, INT64_MAX - 4);
    CU_ASSERT_EQUAL(kp_batch_chunk_check(w.buf, sizes[0], 0, 0, &info), 0);
    CU_ASSERT_EQUAL(info.next_offset, INT64_MAX);
    kp_batch_set_base_offset(w.buf, w.len, 0);

    /* A legacy (magic 1) message in the middle: UNSUPPORTED, located. */
    w.buf[sizes[0] + 16] = 1;
    CU_ASSERT_EQUAL(kp_batch_chunk_check(w.buf, w.len, 0, 0, &info), KP_E_UNSUPPORTED);
    CU_ASSERT_EQUAL(info.bad_pos, sizes[0]);
    CU_ASSERT_EQUAL(info.valid_bytes, sizes[0]);
    kp_writer_free(&w);
}

/* The in-place edits change only their field: the CRC stays valid, the rest is untouched. */
static void test_in_place_edits(void)
{
    kp_writer_t w;
    kp_batch_t b;
    uint8_t *copy;

    kp_writer_init(&w);
    build_small(&w, KP_CODEC_ZSTD);
    copy = malloc(w.len);
    memcpy(copy, w.buf, w.len);
    CU_ASSERT_EQUAL(kp_batch_set_base_offset(w.buf, w.len, 0x0102030405060708LL), 0);
    CU_ASSERT_EQUAL(kp_batch_set_partition_leader_epoch(w.buf, w.len, 123456), 0);
    CU_ASSERT_EQUAL_FATAL(parse_and_iterate(w.buf, w.len, &b), 0);
    CU_ASSERT_EQUAL(b.hdr.baseOffset, 0x0102030405060708LL);
    CU_ASSERT_EQUAL(b.hdr.partitionLeaderEpoch, 123456);
    CU_ASSERT(memcmp(copy + 8, w.buf + 8, 4) == 0);
    CU_ASSERT(memcmp(copy + 16, w.buf + 16, w.len - 16) == 0);
    CU_ASSERT_EQUAL(kp_batch_set_base_offset(w.buf, 60, 1), KP_E_TRUNCATED);
    CU_ASSERT_EQUAL(kp_batch_set_partition_leader_epoch(w.buf, 60, 1), KP_E_TRUNCATED);
    free(copy);
    kp_writer_free(&w);
}

/* Batches written by the Java client (kafka-clients 4.4.0), every codec. */
static void test_java_batches(void)
{
    static const char *names[] = {"none", "gzip", "snappy", "lz4", "zstd"};
    size_t i;

    for (i = 0; i < NCODECS; i++) {
        char fn[64];
        size_t len;
        uint8_t *buf;
        kp_batch_t b;
        kp_chunk_info_t info;
        int txn;

        for (txn = 0; txn < 2; txn++) {
            snprintf(fn, sizeof(fn), "java_%s%s.hex", txn ? "txn_" : "", names[i]);
            buf = rt_load_hex(fn, &len);
            CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
            CU_ASSERT_EQUAL_FATAL(kp_batch_parse(buf, len, 0, 0, &b, NULL), 0);
            CU_ASSERT_EQUAL(b.size, len);
            CU_ASSERT_EQUAL(kp_batch_hdr_codec(&b.hdr), codecs[i]);
            CU_ASSERT_EQUAL(b.hdr.crc, kp_batch_crc_compute(buf, len));
            CU_ASSERT_EQUAL(b.hdr.baseOffset, txn ? 0 : 1000);
            CU_ASSERT_EQUAL(b.hdr.partitionLeaderEpoch, txn ? 5 : 9);
            CU_ASSERT_EQUAL(b.hdr.producerId, txn ? 77 : 4242);
            CU_ASSERT_EQUAL(b.hdr.producerEpoch, txn ? 1 : 3);
            CU_ASSERT_EQUAL(b.hdr.baseSequence, txn ? 0 : 17);
            CU_ASSERT_EQUAL(kp_batch_hdr_is_transactional(&b.hdr), txn);
            CU_ASSERT_EQUAL(b.hdr.recordCount, 4);
            CU_ASSERT_EQUAL(b.hdr.maxTimestamp, 1700000000010LL);
            check_std_records(&b, 0);
            CU_ASSERT_EQUAL(kp_batch_chunk_check(buf, len, 0, 0, &info), 0);
            CU_ASSERT_EQUAL(info.valid_bytes, len);
            /* Our builder with the same inputs gives the same bytes where the codec output
             * is deterministic and identical to Java's (uncompressed). */
            if (codecs[i] == KP_CODEC_NONE) {
                kp_batch_opts_t o;
                kp_writer_t w;
                kp_batch_opts_init(&o);
                o.baseOffset = b.hdr.baseOffset;
                o.partitionLeaderEpoch = b.hdr.partitionLeaderEpoch;
                o.producerId = b.hdr.producerId;
                o.producerEpoch = b.hdr.producerEpoch;
                o.baseSequence = b.hdr.baseSequence;
                o.transactional = txn;
                kp_writer_init(&w);
                build_std(&w, &o);
                CU_ASSERT(w.len == len && memcmp(w.buf, buf, len) == 0);
                kp_writer_free(&w);
            }
            free(buf);
        }
    }
    /* LogAppendTime, lz4. */
    {
        size_t len;
        uint8_t *buf = rt_load_hex("java_logappend_lz4.hex", &len);
        kp_batch_t b;
        kp_record_iter_t it;
        kp_record_t r;
        kp_writer_t scratch;
        CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
        CU_ASSERT_EQUAL_FATAL(kp_batch_parse(buf, len, 0, 0, &b, NULL), 0);
        CU_ASSERT_TRUE(kp_batch_hdr_log_append_time(&b.hdr));
        CU_ASSERT_EQUAL(b.hdr.baseOffset, 42);
        kp_writer_init(&scratch);
        CU_ASSERT_EQUAL_FATAL(kp_record_iter_init(&it, &b, &scratch, 1 << 16), 0);
        CU_ASSERT_EQUAL(kp_record_iter_next(&it, &r), 1);
        CU_ASSERT(bytes_eq(r.key, "k") && bytes_eq(r.value, "v"));
        CU_ASSERT_EQUAL(r.timestamp, b.hdr.maxTimestamp);
        CU_ASSERT_EQUAL(r.offset, 42);
        CU_ASSERT_EQUAL(kp_record_iter_next(&it, &r), 1);
        CU_ASSERT(bytes_eq(r.key, "k2") && bytes_eq(r.value, "v2"));
        CU_ASSERT_EQUAL(r.offset, 43);
        CU_ASSERT_EQUAL(kp_record_iter_next(&it, &r), 0);
        kp_writer_free(&scratch);
        free(buf);
    }
    /* Java control markers parse as control records. */
    {
        size_t len;
        uint8_t *buf = rt_load_hex("java_commit.hex", &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
        check_control(buf, len, KP_CONTROL_TYPE_COMMIT, 13, 1);
        free(buf);
    }
}

void record_suite_batch(void)
{
    CU_pSuite s = CU_add_suite("batch", NULL, NULL);
    CU_add_test(s, "build/parse/iterate every codec", test_roundtrip_codecs);
    CU_add_test(s, "LogAppendTime", test_log_append_time);
    CU_add_test(s, "builder errors", test_builder_errors);
    CU_add_test(s, "control batches ABORT/COMMIT/MIRROR_PID_RESET", test_control_batches);
    CU_add_test(s, "control record parse edges", test_control_parse_edges);
    CU_add_test(s, "every single-byte flip is caught", test_single_byte_flips);
    CU_add_test(s, "truncation at every length", test_truncation);
    CU_add_test(s, "framing checks", test_framing_checks);
    CU_add_test(s, "record framing bounds", test_record_framing);
    CU_add_test(s, "decompression cap in the record iterator", test_decompress_cap);
    CU_add_test(s, "batch iterator and chunk check", test_iter_and_chunk);
    CU_add_test(s, "in-place base offset and epoch", test_in_place_edits);
    CU_add_test(s, "batches from the Java client", test_java_batches);
}
