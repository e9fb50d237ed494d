/*
 * test_runtime.c -- unit tests of the codec runtime: kp_reader, kp_writer, kp_arena, kp_err and
 * the generic helpers of kp_msg. Expected bytes come from the Kafka encoding rules.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_util.h"
#include "kp_arena.h"
#include "kp_err.h"
#include "kp_msg.h"
#include "kp_reader.h"
#include "kp_writer.h"

/* Decode helpers: run @p len bytes through a fresh reader. */
static uint32_t rd_uvarint(const uint8_t *p, size_t len, int *err, size_t *pos)
{
    kp_reader_t rd;
    uint32_t v;
    kp_reader_init(&rd, p, len);
    v = kp_read_uvarint(&rd);
    *err = rd.err;
    if (pos)
        *pos = rd.pos;
    return v;
}

static uint64_t rd_uvarlong(const uint8_t *p, size_t len, int *err)
{
    kp_reader_t rd;
    uint64_t v;
    kp_reader_init(&rd, p, len);
    v = kp_read_uvarlong(&rd);
    *err = rd.err;
    return v;
}

static void check_uvarint(uint32_t v, const uint8_t *want, size_t wlen)
{
    kp_writer_t wr;
    int err;
    size_t pos;
    kp_writer_init(&wr);
    kp_write_uvarint(&wr, v);
    CU_ASSERT_BYTES(wr.buf, wr.len, want, wlen);
    CU_ASSERT_INT(kp_uvarint_size(v), wlen);
    CU_ASSERT_INT(rd_uvarint(want, wlen, &err, &pos), v);
    CU_ASSERT_INT(err, 0);
    CU_ASSERT_INT(pos, wlen);
    kp_writer_free(&wr);
}

static void test_uvarint(void)
{
    check_uvarint(0, (const uint8_t *)"\x00", 1);
    check_uvarint(1, (const uint8_t *)"\x01", 1);
    check_uvarint(127, (const uint8_t *)"\x7f", 1);
    check_uvarint(128, (const uint8_t *)"\x80\x01", 2);
    check_uvarint(300, (const uint8_t *)"\xac\x02", 2);
    check_uvarint(16383, (const uint8_t *)"\xff\x7f", 2);
    check_uvarint(16384, (const uint8_t *)"\x80\x80\x01", 3);
    check_uvarint((1u << 21) - 1, (const uint8_t *)"\xff\xff\x7f", 3);
    check_uvarint((1u << 28) - 1, (const uint8_t *)"\xff\xff\xff\x7f", 4);
    check_uvarint(1u << 28, (const uint8_t *)"\x80\x80\x80\x80\x01", 5);
    check_uvarint(UINT32_MAX, (const uint8_t *)"\xff\xff\xff\xff\x0f", 5);
}

static void test_uvarint_bad(void)
{
    int err;
    size_t pos;
    /* A non-minimal encoding is accepted (as Kafka does). */
    CU_ASSERT_INT(rd_uvarint((const uint8_t *)"\x80\x00", 2, &err, &pos), 0);
    CU_ASSERT_INT(err, 0);
    CU_ASSERT_INT(pos, 2);
    /* More than 32 bits of value. */
    rd_uvarint((const uint8_t *)"\xff\xff\xff\xff\x1f", 5, &err, NULL);
    CU_ASSERT_INT(err, KP_E_VARINT);
    /* Six bytes. */
    rd_uvarint((const uint8_t *)"\x80\x80\x80\x80\x80\x00", 6, &err, NULL);
    CU_ASSERT_INT(err, KP_E_VARINT);
    /* Truncated. */
    rd_uvarint((const uint8_t *)"\x80\x80", 2, &err, NULL);
    CU_ASSERT_INT(err, KP_E_TRUNCATED);
    rd_uvarint((const uint8_t *)"", 0, &err, NULL);
    CU_ASSERT_INT(err, KP_E_TRUNCATED);
}

static void test_uvarlong(void)
{
    static const uint8_t max[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    static const uint8_t over[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    static const uint8_t eleven[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                     0x80, 0x80, 0x80, 0x80, 0x00};
    kp_writer_t wr;
    int err;
    kp_writer_init(&wr);
    kp_write_uvarlong(&wr, UINT64_MAX);
    CU_ASSERT_BYTES(wr.buf, wr.len, max, sizeof(max));
    CU_ASSERT_INT(kp_uvarlong_size(UINT64_MAX), 10);
    CU_ASSERT(rd_uvarlong(max, sizeof(max), &err) == UINT64_MAX);
    CU_ASSERT_INT(err, 0);
    rd_uvarlong(over, sizeof(over), &err);
    CU_ASSERT_INT(err, KP_E_VARINT);
    rd_uvarlong(eleven, sizeof(eleven), &err);
    CU_ASSERT_INT(err, KP_E_VARINT);
    rd_uvarlong(max, 9, &err);
    CU_ASSERT_INT(err, KP_E_TRUNCATED);
    kp_writer_free(&wr);
}

static void check_varint(int32_t v, const uint8_t *want, size_t wlen)
{
    kp_writer_t wr;
    kp_reader_t rd;
    kp_writer_init(&wr);
    kp_write_varint(&wr, v);
    CU_ASSERT_BYTES(wr.buf, wr.len, want, wlen);
    CU_ASSERT_INT(kp_varint_size(v), wlen);
    kp_reader_init(&rd, want, wlen);
    CU_ASSERT_INT(kp_read_varint(&rd), v);
    CU_ASSERT_INT(rd.err, 0);
    kp_writer_free(&wr);
}

static void check_varlong(int64_t v, const uint8_t *want, size_t wlen)
{
    kp_writer_t wr;
    kp_reader_t rd;
    kp_writer_init(&wr);
    kp_write_varlong(&wr, v);
    CU_ASSERT_BYTES(wr.buf, wr.len, want, wlen);
    CU_ASSERT_INT(kp_varlong_size(v), wlen);
    kp_reader_init(&rd, want, wlen);
    CU_ASSERT(kp_read_varlong(&rd) == v);
    CU_ASSERT_INT(rd.err, 0);
    kp_writer_free(&wr);
}

static void test_zigzag(void)
{
    check_varint(0, (const uint8_t *)"\x00", 1);
    check_varint(-1, (const uint8_t *)"\x01", 1);
    check_varint(1, (const uint8_t *)"\x02", 1);
    check_varint(-2, (const uint8_t *)"\x03", 1);
    check_varint(-64, (const uint8_t *)"\x7f", 1);
    check_varint(64, (const uint8_t *)"\x80\x01", 2);
    check_varint(INT32_MAX, (const uint8_t *)"\xfe\xff\xff\xff\x0f", 5);
    check_varint(INT32_MIN, (const uint8_t *)"\xff\xff\xff\xff\x0f", 5);
    check_varlong(0, (const uint8_t *)"\x00", 1);
    check_varlong(-1, (const uint8_t *)"\x01", 1);
    check_varlong(150, (const uint8_t *)"\xac\x02", 2);
    check_varlong(INT64_MAX, (const uint8_t *)"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10);
    check_varlong(INT64_MIN, (const uint8_t *)"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10);
}

static void test_fixed_ints(void)
{
    static const uint8_t want[] = {0xfe, 0x12, 0x34, 0x80, 0x00, 0x00, 0x01, 0xff, 0xff,
                                   0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 0xff, 0xfe, 0x3f,
                                   0xf8, 0,    0,    0,    0,    0,    0};
    kp_writer_t wr;
    kp_reader_t rd;
    kp_writer_init(&wr);
    kp_write_int8(&wr, -2);
    kp_write_int16(&wr, 0x1234);
    kp_write_int32(&wr, INT32_MIN + 1);
    kp_write_int64(&wr, -2);
    kp_write_uint16(&wr, 0xfffe);
    kp_write_float64(&wr, 1.5);
    CU_ASSERT_BYTES(wr.buf, wr.len, want, sizeof(want));
    kp_reader_init(&rd, wr.buf, wr.len);
    CU_ASSERT_INT(kp_read_int8(&rd), -2);
    CU_ASSERT_INT(kp_read_int16(&rd), 0x1234);
    CU_ASSERT_INT(kp_read_int32(&rd), INT32_MIN + 1);
    CU_ASSERT_INT(kp_read_int64(&rd), -2);
    CU_ASSERT_INT(kp_read_uint16(&rd), 0xfffe);
    CU_ASSERT(kp_read_float64(&rd) == 1.5);
    CU_ASSERT_INT(kp_reader_remaining(&rd), 0);
    CU_ASSERT_INT(rd.err, 0);
    kp_writer_free(&wr);
}

static void test_strings(void)
{
    kp_writer_t wr;
    kp_reader_t rd;
    kp_str_t s;
    kp_writer_init(&wr);
    kp_write_string(&wr, kp_str("abc"), 0);
    kp_write_string(&wr, KP_STR_NULL, 0);
    kp_write_string(&wr, kp_str("abc"), 1);
    kp_write_string(&wr, KP_STR_NULL, 1);
    kp_write_string(&wr, kp_str(""), 1);
    CU_ASSERT_BYTES(wr.buf, wr.len,
                    "\x00\x03"
                    "abc"
                    "\xff\xff"
                    "\x04"
                    "abc"
                    "\x00"
                    "\x01",
                    13);
    CU_ASSERT_INT(kp_string_size(kp_str("abc"), 0), 5);
    CU_ASSERT_INT(kp_string_size(KP_STR_NULL, 0), 2);
    CU_ASSERT_INT(kp_string_size(kp_str("abc"), 1), 4);
    CU_ASSERT_INT(kp_string_size(KP_STR_NULL, 1), 1);
    kp_reader_init(&rd, wr.buf, wr.len);
    s = kp_read_string(&rd, 0, 0);
    CU_ASSERT(kp_str_eq(s, "abc"));
    s = kp_read_string(&rd, 0, 1);
    CU_ASSERT_INT(s.len, -1);
    s = kp_read_string(&rd, 1, 0);
    CU_ASSERT(kp_str_eq(s, "abc"));
    s = kp_read_string(&rd, 1, 1);
    CU_ASSERT_INT(s.len, -1);
    s = kp_read_string(&rd, 1, 0);
    CU_ASSERT_INT(s.len, 0);
    CU_ASSERT_INT(rd.err, 0);
    CU_ASSERT_INT(kp_reader_remaining(&rd), 0);
    kp_writer_free(&wr);
}

static void test_strings_bad(void)
{
    kp_reader_t rd;
    kp_str_t s;
    /* null where not nullable */
    kp_reader_init(&rd, "\xff\xff", 2);
    s = kp_read_string(&rd, 0, 0);
    CU_ASSERT_INT(rd.err, KP_E_NULL_NOT_ALLOWED);
    CU_ASSERT_INT(s.len, 0);
    kp_reader_init(&rd, "\x00", 1);
    kp_read_string(&rd, 1, 0);
    CU_ASSERT_INT(rd.err, KP_E_NULL_NOT_ALLOWED);
    /* negative length other than -1 */
    kp_reader_init(&rd, "\xff\xfe", 2);
    kp_read_string(&rd, 0, 1);
    CU_ASSERT_INT(rd.err, KP_E_BAD_LENGTH);
    /* longer than the input */
    kp_reader_init(&rd,
                   "\x00\x05"
                   "abc",
                   5);
    kp_read_string(&rd, 0, 0);
    CU_ASSERT_INT(rd.err, KP_E_TRUNCATED);
    kp_reader_init(&rd,
                   "\x05"
                   "abc",
                   4);
    kp_read_string(&rd, 1, 0);
    CU_ASSERT_INT(rd.err, KP_E_TRUNCATED);
    /* compact length above int16 */
    kp_reader_init(&rd, "\x81\x80\x02", 3);
    kp_read_string(&rd, 1, 0);
    CU_ASSERT_INT(rd.err, KP_E_TOO_LARGE);
    /* truncated length */
    kp_reader_init(&rd, "\x00", 1);
    kp_read_string(&rd, 0, 0);
    CU_ASSERT_INT(rd.err, KP_E_TRUNCATED);
}

static void test_bytes(void)
{
    kp_writer_t wr;
    kp_reader_t rd;
    kp_bytes_t b = {(const uint8_t *)"\x01\x02", 2};
    kp_writer_init(&wr);
    kp_write_bytes(&wr, b, 0);
    kp_write_bytes(&wr, KP_BYTES_NULL, 0);
    kp_write_bytes(&wr, b, 1);
    kp_write_bytes(&wr, KP_BYTES_NULL, 1);
    CU_ASSERT_BYTES(wr.buf, wr.len, "\x00\x00\x00\x02\x01\x02\xff\xff\xff\xff\x03\x01\x02\x00", 14);
    CU_ASSERT_INT(kp_bytes_size(b, 0), 6);
    CU_ASSERT_INT(kp_bytes_size(b, 1), 3);
    kp_reader_init(&rd, wr.buf, wr.len);
    b = kp_read_bytes(&rd, 0, 0);
    CU_ASSERT(b.len == 2 && b.ptr[1] == 2);
    CU_ASSERT_INT(kp_read_bytes(&rd, 0, 1).len, -1);
    CU_ASSERT_INT(kp_read_bytes(&rd, 1, 0).len, 2);
    CU_ASSERT_INT(kp_read_bytes(&rd, 1, 1).len, -1);
    CU_ASSERT_INT(rd.err, 0);
    /* a length far beyond the input */
    kp_reader_init(&rd, "\x7f\xff\xff\xff\x00", 5);
    kp_read_bytes(&rd, 0, 0);
    CU_ASSERT_INT(rd.err, KP_E_TRUNCATED);
    kp_reader_init(&rd, "\xff\xff\xff\xff\x0f", 5);
    kp_read_bytes(&rd, 1, 0);
    CU_ASSERT_INT(rd.err, KP_E_TRUNCATED);
    kp_writer_free(&wr);
}

static void test_arrays(void)
{
    kp_writer_t wr;
    kp_reader_t rd;
    kp_writer_init(&wr);
    kp_write_array_len(&wr, 2, 0);
    kp_write_array_len(&wr, -1, 0);
    kp_write_array_len(&wr, 2, 1);
    kp_write_array_len(&wr, -1, 1);
    CU_ASSERT_BYTES(wr.buf, wr.len, "\x00\x00\x00\x02\xff\xff\xff\xff\x03\x00", 10);
    CU_ASSERT_INT(kp_array_len_size(2, 0), 4);
    CU_ASSERT_INT(kp_array_len_size(-1, 1), 1);
    kp_reader_init(&rd, wr.buf, wr.len);
    CU_ASSERT_INT(kp_read_array_len(&rd, 0, 0, 1), 2);
    CU_ASSERT_INT(kp_read_array_len(&rd, 0, 1, 1), -1);
    CU_ASSERT_INT(kp_read_array_len(&rd, 1, 0, 0), 2);
    CU_ASSERT_INT(kp_read_array_len(&rd, 1, 1, 0), -1);
    CU_ASSERT_INT(rd.err, 0);
    /* null not allowed */
    kp_reader_init(&rd, "\xff\xff\xff\xff", 4);
    kp_read_array_len(&rd, 0, 0, 1);
    CU_ASSERT_INT(rd.err, KP_E_NULL_NOT_ALLOWED);
    /* more elements than bytes left */
    kp_reader_init(&rd, "\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00", 12);
    kp_read_array_len(&rd, 0, 0, 4);
    CU_ASSERT_INT(rd.err, KP_E_BAD_LENGTH);
    kp_reader_init(&rd, "\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00", 12);
    CU_ASSERT_INT(kp_read_array_len(&rd, 0, 0, 4), 2);
    CU_ASSERT_INT(rd.err, 0);
    /* huge counts */
    kp_reader_init(&rd, "\x7f\xff\xff\xff", 4);
    kp_read_array_len(&rd, 0, 0, 1);
    CU_ASSERT_INT(rd.err, KP_E_TOO_LARGE);
    kp_reader_init(&rd, "\xff\xff\xff\xff\x0f", 5);
    kp_read_array_len(&rd, 1, 0, 1);
    CU_ASSERT_INT(rd.err, KP_E_TOO_LARGE);
    kp_reader_init(&rd, "\x80\x80\x80\x10", 4); /* compact 2^25 - 1 elements */
    kp_read_array_len(&rd, 1, 0, 1);
    CU_ASSERT_INT(rd.err, KP_E_BAD_LENGTH);
    kp_writer_free(&wr);
}

static void test_sticky(void)
{
    kp_reader_t rd;
    kp_uuid_t u;
    kp_reader_init(&rd, "\x01\x02\x03", 3);
    CU_ASSERT_INT(kp_read_int16(&rd), 0x0102);
    CU_ASSERT_INT(kp_read_int32(&rd), 0); /* fails: one byte left */
    CU_ASSERT_INT(rd.err, KP_E_TRUNCATED);
    CU_ASSERT_PTR_NOT_NULL(rd.errstr);
    /* later reads return zeros and do not move or change the error */
    CU_ASSERT_INT(kp_read_int8(&rd), 0);
    CU_ASSERT_INT(kp_read_uvarint(&rd), 0);
    CU_ASSERT_INT(kp_read_string(&rd, 0, 1).len, 0);
    memset(u.b, 0xaa, 16);
    kp_read_uuid(&rd, &u);
    CU_ASSERT_INT(u.b[0], 0);
    CU_ASSERT_INT(rd.pos, 2);
    CU_ASSERT_INT(kp_reader_remaining(&rd), 0);
    kp_reader_fail(&rd, KP_E_CORRUPT, "other");
    CU_ASSERT_INT(rd.err, KP_E_TRUNCATED);
    /* an empty reader over NULL */
    kp_reader_init(&rd, NULL, 10);
    kp_read_int8(&rd);
    CU_ASSERT_INT(rd.err, KP_E_TRUNCATED);
}

static void test_writer_grow(void)
{
    kp_writer_t wr;
    uint8_t *p;
    size_t len, i;
    int ok = 1;
    kp_writer_init(&wr);
    for (i = 0; i < 100000; i++)
        kp_write_int8(&wr, (int8_t)i);
    CU_ASSERT_INT(wr.len, 100000);
    CU_ASSERT(wr.cap >= wr.len);
    CU_ASSERT_INT(wr.err, 0);
    for (i = 0; i < 100000; i++)
        ok &= wr.buf[i] == (uint8_t)i;
    CU_ASSERT(ok);
    p = kp_writer_steal(&wr, &len);
    CU_ASSERT_INT(len, 100000);
    CU_ASSERT_PTR_NULL(wr.buf);
    free(p);
    kp_writer_init(&wr);
    kp_writer_fail(&wr, KP_E_FIELD_LOST);
    kp_writer_fail(&wr, KP_E_NOMEM);
    kp_write_int32(&wr, 1);
    CU_ASSERT_INT(wr.err, KP_E_FIELD_LOST);
    CU_ASSERT_INT(wr.len, 0);
    kp_writer_free(&wr);
}

static void test_writer_fixed(void)
{
    uint8_t buf[6];
    kp_writer_t wr;
    kp_writer_init_fixed(&wr, buf, sizeof(buf));
    kp_write_int32(&wr, 0x01020304);
    kp_write_int32(&wr, 0x05060708); /* does not fit */
    CU_ASSERT_INT(wr.err, KP_E_OVERFLOW);
    CU_ASSERT_INT(wr.len, 4);
    kp_write_int8(&wr, 9); /* sticky: nothing more */
    CU_ASSERT_INT(wr.len, 4);
    CU_ASSERT_BYTES(buf, 4, "\x01\x02\x03\x04", 4);
    kp_writer_reset(&wr);
    kp_write_int16(&wr, 0x0a0b);
    kp_writer_patch_int32(&wr, 0, 1); /* only 2 bytes written */
    CU_ASSERT_INT(wr.err, KP_E_INVALID);
    kp_writer_free(&wr); /* must not free the caller's buffer */
}

static void test_arena(void)
{
    kp_arena_t ar;
    uint8_t *p, *q;
    size_t i;
    int zero = 1;
    kp_arena_init(&ar, 1024);
    p = kp_arena_alloc(&ar, 100);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_INT((uintptr_t)p % 16, 0);
    for (i = 0; i < 100; i++)
        zero &= p[i] == 0;
    CU_ASSERT(zero);
    CU_ASSERT_INT(ar.used, 112);
    CU_ASSERT_PTR_NULL(kp_arena_alloc(&ar, 1000)); /* over the limit */
    CU_ASSERT_INT(ar.used, 112);
    q = kp_arena_alloc(&ar, 900);
    CU_ASSERT_PTR_NOT_NULL(q);
    CU_ASSERT_PTR_NULL(kp_arena_alloc(&ar, 1));
    CU_ASSERT_PTR_NULL(kp_arena_alloc(&ar, SIZE_MAX));
    CU_ASSERT_PTR_NULL(kp_arena_calloc(&ar, SIZE_MAX / 2, 4));
    kp_arena_free(&ar);
    CU_ASSERT_INT(ar.used, 0);
    /* unlimited: many chunks */
    kp_arena_init(&ar, 0);
    for (i = 0; i < 1000; i++) {
        p = kp_arena_alloc(&ar, 1000);
        CU_ASSERT_PTR_NOT_NULL(p);
        if (p)
            memset(p, 0x5a, 1000);
    }
    CU_ASSERT_PTR_NULL(kp_arena_alloc(&ar, SIZE_MAX));
    CU_ASSERT_PTR_NULL(kp_arena_alloc(&ar, SIZE_MAX - 7));
    kp_arena_free(&ar);
}

static void test_err(void)
{
    CU_ASSERT_STR(kp_err_name(KP_E_TRUNCATED), "TRUNCATED");
    CU_ASSERT_STR(kp_err_name(0), "OK");
    CU_ASSERT_STR(kp_err_name(-999), "UNKNOWN");
    CU_ASSERT_STR(kp_err_str(-999), "unknown error");
    CU_ASSERT(strlen(kp_err_str(KP_E_FIELD_LOST)) > 0);
}

static void test_tag_helpers(void)
{
    kp_reader_t rd, sub;
    kp_writer_t wr;
    kp_arena_t ar;
    kp_tagbuf_t tb = {0, NULL};
    kp_rawtag_t tags[2];
    int64_t prev = -1;
    uint32_t tag;
    /* count larger than half the remaining bytes */
    kp_reader_init(&rd, "\x03\x00\x00\x00\x00", 5);
    CU_ASSERT_INT(kp_tags_begin(&rd), 0);
    CU_ASSERT_INT(rd.err, KP_E_BAD_LENGTH);
    /* two tags, second not increasing */
    kp_reader_init(&rd, "\x02\x05\x01\xaa\x05\x00", 6);
    kp_arena_init(&ar, 0);
    CU_ASSERT_INT(kp_tags_begin(&rd), 2);
    CU_ASSERT_INT(kp_tag_next(&rd, &prev, &tag, &sub), 0);
    CU_ASSERT_INT(tag, 5);
    CU_ASSERT_INT(sub.len, 1);
    kp_tag_keep(&rd, &ar, &tb, 2, tag, &sub);
    CU_ASSERT_INT(tb.cnt, 1);
    CU_ASSERT_INT(tb.v[0].data.ptr[0], 0xaa);
    CU_ASSERT_INT(kp_tag_next(&rd, &prev, &tag, &sub), KP_E_BAD_TAGS);
    /* value larger than the input */
    prev = -1;
    kp_reader_init(&rd, "\x01\x09\x00", 3);
    CU_ASSERT_INT(kp_tag_next(&rd, &prev, &tag, &sub), KP_E_TRUNCATED);
    /* a decoder that consumed less than the declared size */
    kp_reader_init(&rd, "\x01\x02\x00\x00", 4);
    prev = -1;
    CU_ASSERT_INT(kp_tag_next(&rd, &prev, &tag, &sub), 0);
    kp_read_int8(&sub);
    kp_tag_done(&rd, &sub);
    CU_ASSERT_INT(rd.err, KP_E_BAD_TAGS);
    kp_arena_free(&ar);
    /* writing: unknown tags below a known one, then the rest */
    tags[0].tag = 1;
    tags[0].data.ptr = (const uint8_t *)"\x11";
    tags[0].data.len = 1;
    tags[1].tag = 7;
    tags[1].data.ptr = NULL;
    tags[1].data.len = 0;
    tb.cnt = 2;
    tb.v = tags;
    kp_writer_init(&wr);
    CU_ASSERT_INT(kp_tags_write_below(&wr, &tb, 0, 3), 1);
    CU_ASSERT_INT(kp_tags_write_below(&wr, &tb, 1, UINT64_MAX), 2);
    CU_ASSERT_BYTES(wr.buf, wr.len, "\x01\x01\x11\x07\x00", 5);
    CU_ASSERT_INT(kp_tags_size(&tb), 5);
    CU_ASSERT_INT(wr.err, 0);
    /* an unknown tag equal to a known one */
    kp_writer_reset(&wr);
    kp_tags_write_below(&wr, &tb, 0, 7);
    CU_ASSERT_INT(wr.err, KP_E_BAD_TAGS);
    /* unsorted unknown tags */
    tags[1].tag = 1;
    kp_writer_reset(&wr);
    kp_tags_write_below(&wr, &tb, 0, UINT64_MAX);
    CU_ASSERT_INT(wr.err, KP_E_BAD_TAGS);
    kp_writer_free(&wr);
}

static void test_enc_checks(void)
{
    kp_writer_t wr;
    kp_str_t s;
    char *big = malloc(0x8000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    memset(big, 'x', 0x8000);
    kp_writer_init(&wr);
    s.ptr = big;
    s.len = 0x7fff;
    kp_enc_str(&wr, s, 0, 0);
    CU_ASSERT_INT(wr.err, 0);
    CU_ASSERT_INT(wr.len, 0x8001);
    s.len = 0x8000;
    kp_enc_str(&wr, s, 1, 0);
    CU_ASSERT_INT(wr.err, KP_E_TOO_LARGE);
    kp_writer_reset(&wr);
    kp_enc_str(&wr, KP_STR_NULL, 0, 0);
    CU_ASSERT_INT(wr.err, KP_E_NULL_NOT_ALLOWED);
    kp_writer_reset(&wr);
    kp_enc_bytes(&wr, KP_BYTES_NULL, 1, 0);
    CU_ASSERT_INT(wr.err, KP_E_NULL_NOT_ALLOWED);
    kp_writer_reset(&wr);
    CU_ASSERT_INT(kp_enc_arr(&wr, -1, NULL, 1, 0), 0);
    CU_ASSERT_INT(wr.err, KP_E_NULL_NOT_ALLOWED);
    kp_writer_reset(&wr);
    CU_ASSERT_INT(kp_enc_arr(&wr, 3, NULL, 1, 0), 0);
    CU_ASSERT_INT(wr.err, KP_E_INVALID);
    kp_writer_reset(&wr);
    CU_ASSERT_INT(kp_enc_arr(&wr, -1, NULL, 1, 1), 0);
    CU_ASSERT_INT(kp_enc_arr(&wr, 0, NULL, 0, 0), 0);
    CU_ASSERT_INT(kp_enc_arr(&wr, 1, big, 1, 0), 1);
    CU_ASSERT_BYTES(wr.buf, wr.len, "\x00\x00\x00\x00\x00\x02", 6);
    kp_writer_free(&wr);
    free(big);
}

static void test_json(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    kp_str_t s = {"a\"b\\c\n\x01\x7f", 8};
    kp_bytes_t b = {(const uint8_t *)"\x00\xab\xff", 3};
    kp_uuid_t u;
    int i;
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (i = 0; i < 16; i++)
        u.b[i] = (uint8_t)(i * 17);
    kp_json_str(f, s);
    fputc(' ', f);
    kp_json_str(f, KP_STR_NULL);
    fputc(' ', f);
    kp_json_hex(f, b);
    fputc(' ', f);
    kp_json_hex(f, KP_BYTES_NULL);
    fputc(' ', f);
    kp_json_uuid(f, &u);
    fputc(' ', f);
    kp_json_f64(f, 0.1);
    fputc(' ', f);
    kp_json_f64(f, -2.0);
    fputc(' ', f);
    kp_json_redacted(f);
    fclose(f);
    CU_ASSERT_STR(buf, "\"a\\\"b\\\\c\\u000a\\u0001\x7f\" null \"00abff\" null "
                       "\"00112233445566778899aabbccddeeff\" 0.10000000000000001 -2 "
                       "\"<redacted>\"");
    free(buf);
    CU_ASSERT(kp_str_eqn(kp_str("ab"), "ab", 2));
    CU_ASSERT(!kp_str_eqn(KP_STR_NULL, "", 0));
    memset(u.b, 0, 16);
    CU_ASSERT(kp_uuid_is_zero(&u));
    u.b[15] = 1;
    CU_ASSERT(!kp_uuid_is_zero(&u));
}

static const cu_test_t varint_tests[] = {
    {"uvarint", test_uvarint}, {"uvarint_bad", test_uvarint_bad}, {"uvarlong", test_uvarlong},
    {"zigzag", test_zigzag},   {"fixed_ints", test_fixed_ints},   {NULL, NULL},
};
static const cu_test_t value_tests[] = {
    {"strings", test_strings}, {"strings_bad", test_strings_bad}, {"bytes", test_bytes},
    {"arrays", test_arrays},   {"sticky", test_sticky},           {NULL, NULL},
};
static const cu_test_t mem_tests[] = {
    {"writer_grow", test_writer_grow},
    {"writer_fixed", test_writer_fixed},
    {"arena", test_arena},
    {"err", test_err},
    {NULL, NULL},
};
static const cu_test_t msg_tests[] = {
    {"tag_helpers", test_tag_helpers},
    {"enc_checks", test_enc_checks},
    {"json", test_json},
    {NULL, NULL},
};
static const cu_suite_t suites[] = {
    {"varint", varint_tests},
    {"values", value_tests},
    {"memory", mem_tests},
    {"msg_helpers", msg_tests},
    {NULL, NULL},
};

int main(void)
{
    return cu_run(suites);
}
