/*
 * test_golden.c -- the generator on the test schemas of tests/codec/schemas: golden bytes
 * worked out by hand from the encoding rules in docs/protocol.md (not taken from our encoder),
 * tagged-field rules, FIELD_LOST and null checks, the printers, the tables.
 *
 * Built against the code generated from tests/codec/schemas (not proto/schema).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_util.h"
#include "kp_msgs.h"

/* Encode, check against want and against the size function; returns the writer (caller frees). */
#define CHECK_ENC(MSG, msgp, ver, want)                                                            \
    do {                                                                                           \
        kp_writer_t wr_;                                                                           \
        kp_writer_init(&wr_);                                                                      \
        CU_ASSERT_INT(kp_##MSG##_encode(&wr_, (msgp), (ver)), 0);                                  \
        CU_ASSERT_BYTES(wr_.buf, wr_.len, (want), sizeof(want) - 1);                               \
        CU_ASSERT_INT(kp_##MSG##_size((msgp), (ver)), sizeof(want) - 1);                           \
        kp_writer_free(&wr_);                                                                      \
    } while (0)

#define CHECK_ENC_ERR(MSG, msgp, ver, ERR_)                                                        \
    do {                                                                                           \
        kp_writer_t wr_;                                                                           \
        kp_writer_init(&wr_);                                                                      \
        CU_ASSERT_INT(kp_##MSG##_encode(&wr_, (msgp), (ver)), (ERR_));                             \
        kp_writer_free(&wr_);                                                                      \
    } while (0)

/* Decode want (which must be consumed exactly) into *out, then re-encode to the same bytes. */
#define CHECK_DEC(MSG, out, ar, ver, want)                                                         \
    do {                                                                                           \
        kp_reader_t rd_;                                                                           \
        kp_writer_t wr_;                                                                           \
        kp_reader_init(&rd_, (want), sizeof(want) - 1);                                            \
        CU_ASSERT_INT(kp_##MSG##_decode(&rd_, (ar), (out), (ver)), 0);                             \
        CU_ASSERT_INT(rd_.pos, sizeof(want) - 1);                                                  \
        kp_writer_init(&wr_);                                                                      \
        CU_ASSERT_INT(kp_##MSG##_encode(&wr_, (out), (ver)), 0);                                   \
        CU_ASSERT_BYTES(wr_.buf, wr_.len, (want), sizeof(want) - 1);                               \
        kp_writer_free(&wr_);                                                                      \
    } while (0)

#define CHECK_DEC_ERR(MSG, ar, ver, bytes, ERR_)                                                   \
    do {                                                                                           \
        kp_reader_t rd_;                                                                           \
        kp_##MSG##_t m_;                                                                           \
        kp_reader_init(&rd_, (bytes), sizeof(bytes) - 1);                                          \
        CU_ASSERT_INT(kp_##MSG##_decode(&rd_, (ar), &m_, (ver)), (ERR_));                          \
        CU_ASSERT_INT(rd_.err, (ERR_));                                                            \
    } while (0)

static char *print_str(void (*fn)(FILE *, const void *, int16_t, unsigned), const void *msg,
                       int16_t ver, unsigned flags)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fn(f, msg, ver, flags);
    fclose(f);
    return buf;
}

#define CHECK_PRINT(MSG, msgp, ver, flags, want)                                                   \
    do {                                                                                           \
        char *s_ = print_str(kp_##MSG##_desc.print, (msgp), (ver), (flags));                       \
        CU_ASSERT_STR(s_, (want));                                                                 \
        free(s_);                                                                                  \
    } while (0)

static kp_str_t S(const char *s)
{
    return kp_str(s);
}

/* ---- Plain: no flexible version ------------------------------------------------------ */

static void test_plain(void)
{
    static int32_t parts[] = {1, 2};
    kp_PlainRequest_t m, d;
    kp_PlainResponse_t r;
    kp_arena_t ar;
    kp_arena_init(&ar, 0);
    kp_PlainRequest_init(&m);
    CU_ASSERT_INT(m.Extra.len, -1); /* default=null */
    m.Topic = S("ab");
    m.Partitions.cnt = 2;
    m.Partitions.v = parts;
    CHECK_ENC(PlainRequest, &m, 0,
              "\x00\x02"
              "ab"
              "\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x02");
    CHECK_ENC(PlainRequest, &m, 1,
              "\x00\x02"
              "ab"
              "\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x02\xff\xff");
    CHECK_PRINT(PlainRequest, &m, 1, 0, "{\"Topic\":\"ab\",\"Partitions\":[1,2],\"Extra\":null}");
    CHECK_PRINT(PlainRequest, &m, 0, 0, "{\"Topic\":\"ab\",\"Partitions\":[1,2]}");
    m.Extra = S("x");
    CHECK_ENC(PlainRequest, &m, 1,
              "\x00\x02"
              "ab"
              "\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x02\x00\x01x");
    /* ignorable: dropped in v0 */
    CHECK_ENC(PlainRequest, &m, 0,
              "\x00\x02"
              "ab"
              "\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x02");
    CHECK_DEC(PlainRequest, &d, &ar, 1,
              "\x00\x02"
              "ab"
              "\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x02\x00\x01x");
    CU_ASSERT(kp_str_eq(d.Topic, "ab"));
    CU_ASSERT_INT(d.Partitions.cnt, 2);
    CU_ASSERT_INT(d.Partitions.v[1], 2);
    CU_ASSERT(kp_str_eq(d.Extra, "x"));

    kp_PlainResponse_init(&r);
    CU_ASSERT_INT(r.Message.len, 0); /* nullable, default the empty string */
    CHECK_ENC(PlainResponse, &r, 0, "\x00\x00\x00\x00");
    CHECK_PRINT(PlainResponse, &r, 0, 0, "{\"ErrorCode\":0,\"Message\":\"\"}");
    r.Message = KP_STR_NULL;
    r.ErrorCode = -1;
    CHECK_ENC(PlainResponse, &r, 0, "\xff\xff\xff\xff");
    CHECK_PRINT(PlainResponse, &r, 1, 0, "{\"ErrorCode\":-1,\"Message\":null}");
    kp_arena_free(&ar);
}

static void test_plain_bad(void)
{
    kp_arena_t ar;
    kp_PlainRequest_t m;
    kp_arena_init(&ar, 0);
    /* null in a non-nullable field */
    CHECK_DEC_ERR(PlainRequest, &ar, 0, "\xff\xff\x00\x00\x00\x00", KP_E_NULL_NOT_ALLOWED);
    CHECK_DEC_ERR(PlainRequest, &ar, 0, "\x00\x00\xff\xff\xff\xff", KP_E_NULL_NOT_ALLOWED);
    /* truncated */
    CHECK_DEC_ERR(PlainRequest, &ar, 0,
                  "\x00\x02"
                  "a",
                  KP_E_TRUNCATED);
    CHECK_DEC_ERR(PlainRequest, &ar, 0, "\x00\x00\x00\x00\x00\x01\x00\x00", KP_E_BAD_LENGTH);
    /* versions */
    CHECK_DEC_ERR(PlainRequest, &ar, 2, "\x00\x00\x00\x00\x00\x00", KP_E_BAD_VERSION);
    CHECK_DEC_ERR(PlainRequest, &ar, -1, "\x00\x00\x00\x00\x00\x00", KP_E_BAD_VERSION);
    kp_PlainRequest_init(&m);
    CHECK_ENC_ERR(PlainRequest, &m, 2, KP_E_BAD_VERSION);
    CU_ASSERT_INT(kp_PlainRequest_size(&m, 2), 0);
    /* a null where the encoder needs a value */
    m.Topic = KP_STR_NULL;
    CHECK_ENC_ERR(PlainRequest, &m, 0, KP_E_NULL_NOT_ALLOWED);
    kp_PlainRequest_init(&m);
    m.Partitions.cnt = -1;
    CHECK_ENC_ERR(PlainRequest, &m, 0, KP_E_NULL_NOT_ALLOWED);
    kp_arena_free(&ar);
}

static void test_huge_counts(void)
{
    kp_arena_t ar;
    kp_arena_init(&ar, 0);
    /* int32 count 2^31-1 with nothing behind it: fails, nothing allocated */
    CHECK_DEC_ERR(PlainRequest, &ar, 0, "\x00\x00\x7f\xff\xff\xff", KP_E_TOO_LARGE);
    CU_ASSERT_INT(ar.used, 0);
    CHECK_DEC_ERR(PlainRequest, &ar, 0, "\x00\x00\x03\xff\xff\xff\x00\x00\x00\x00",
                  KP_E_BAD_LENGTH);
    CU_ASSERT_INT(ar.used, 0);
    /* compact counts */
    CHECK_DEC_ERR(KitchenResponse, &ar, 2, "\x00\x00\xff\xff\xff\xff\x0f", KP_E_TOO_LARGE);
    CHECK_DEC_ERR(KitchenResponse, &ar, 2, "\x00\x00\x80\x80\x80\x20\x00", KP_E_BAD_LENGTH);
    /* an over-long varint count */
    CHECK_DEC_ERR(KitchenResponse, &ar, 2, "\x00\x00\xff\xff\xff\xff\xff\x01", KP_E_VARINT);
    /* tagged-field count */
    CHECK_DEC_ERR(KitchenResponse, &ar, 2, "\x00\x00\x01\x00\xff\xff\xff\xff\x0f", KP_E_BAD_LENGTH);
    CHECK_DEC_ERR(KitchenResponse, &ar, 2, "\x00\x00\x01\x00\x02\x00\x00", KP_E_BAD_LENGTH);
    CU_ASSERT_INT(ar.used, 0);
    kp_arena_free(&ar);
    /* an arena limit stops a legitimate but large array */
    kp_arena_init(&ar, 64);
    CHECK_DEC_ERR(PlainRequest, &ar, 0,
                  "\x00\x00\x00\x00\x00\x20"
                  "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                  "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                  KP_E_NOMEM);
    kp_arena_free(&ar);
}

/* ---- headers ---------------------------------------------------------------------- */

static void test_headers(void)
{
    kp_RequestHeader_t h, d;
    kp_ResponseHeader_t r;
    kp_arena_t ar;
    kp_arena_init(&ar, 0);
    kp_RequestHeader_init(&h);
    h.RequestApiKey = 1;
    h.RequestApiVersion = 12;
    h.CorrelationId = 7;
    h.ClientId = S("c");
    /* ClientId keeps its int16 length in the flexible v2 (flexible=none) */
    CHECK_ENC(RequestHeader, &h, 2,
              "\x00\x01\x00\x0c\x00\x00\x00\x07\x00\x01"
              "c"
              "\x00");
    CHECK_ENC(RequestHeader, &h, 1,
              "\x00\x01\x00\x0c\x00\x00\x00\x07\x00\x01"
              "c");
    h.ClientId = KP_STR_NULL;
    CHECK_ENC(RequestHeader, &h, 2, "\x00\x01\x00\x0c\x00\x00\x00\x07\xff\xff\x00");
    CHECK_DEC(RequestHeader, &d, &ar, 2,
              "\x00\x12\x00\x03\x00\x00\x01\x00\x00\x02"
              "ab"
              "\x00");
    CU_ASSERT_INT(d.RequestApiKey, 18);
    CU_ASSERT_INT(d.CorrelationId, 256);
    CU_ASSERT(kp_str_eq(d.ClientId, "ab"));
    kp_ResponseHeader_init(&r);
    r.CorrelationId = 5;
    CHECK_ENC(ResponseHeader, &r, 1, "\x00\x00\x00\x05\x00");
    CHECK_ENC(ResponseHeader, &r, 0, "\x00\x00\x00\x05");
    kp_arena_free(&ar);
}

/* ---- Kitchen: every feature -------------------------------------------------------- */

#define K_V0_DEFAULT                                                                               \
    "\x00"                             /* Flag */                                                  \
    "\xfd"                             /* Small -3 */                                              \
    "\x00\x00"                         /* Short */                                                 \
    "\x7f\xff\xff\xff"                 /* Count 0x7fffffff */                                      \
    "\x80\x00\x00\x00\x00\x00\x00\x00" /* Big INT64_MIN */                                         \
    "\x3f\xf8\x00\x00\x00\x00\x00\x00" /* Ratio 1.5 */                                             \
    "\x00\x03"                                                                                     \
    "d\"q"                                                             /* Label */                 \
    "\x00\x00"                                                         /* MaybeLabel "" */         \
    "\x00\x00\x00\x00"                                                 /* Blob empty */            \
    "\xff\xff\xff\xff"                                                 /* Recs null */             \
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" /* Id */                    \
    "\x00\x00\x00\x00"                                                 /* Ints [] */               \
    "\x00\x00"                                                         /* Secret "" */             \
    "\x00\x00\x00\x00"                                                 /* Gone */                  \
    "\x00\x00\x00\x00"                                                 /* GoneQuiet */             \
    "\x00\x00\x00\x00"                                                 /* Outers [] */             \
    "\x00\x00\x00\x00"                                                 /* Shared.A */              \
    "\xff\xff" /* Legacy null, int16 length */

static void test_kitchen_v0(void)
{
    kp_KitchenRequest_t m, d;
    kp_arena_t ar;
    kp_arena_init(&ar, 0);
    kp_KitchenRequest_init(&m);
    CHECK_ENC(KitchenRequest, &m, 0, K_V0_DEFAULT);
    CHECK_DEC(KitchenRequest, &d, &ar, 0, K_V0_DEFAULT);
    CU_ASSERT_INT(d.Small, -3);
    CU_ASSERT(d.Big == INT64_MIN);
    CU_ASSERT(d.Ratio == 1.5);
    CU_ASSERT_INT(d.Port, 65535); /* absent in v0: default */
    CU_ASSERT(d.Box_null);
    CHECK_PRINT(KitchenRequest, &m, 0, 0,
                "{\"Flag\":false,\"Small\":-3,\"Short\":0,\"Count\":2147483647,"
                "\"Big\":-9223372036854775808,\"Ratio\":1.5,\"Label\":\"d\\\"q\","
                "\"MaybeLabel\":\"\",\"Blob\":\"\",\"Recs\":null,"
                "\"Id\":\"00000000000000000000000000000000\",\"Ints\":[],"
                "\"Secret\":\"<redacted>\",\"Gone\":0,\"GoneQuiet\":0,\"Outers\":[],"
                "\"Shared\":{\"A\":0},\"Legacy\":null}");
    m.Secret = S("hunter2");
    {
        char *s = print_str(kp_KitchenRequest_desc.print, &m, 0, KP_PRINT_UNREDACTED);
        CU_ASSERT_PTR_NOT_NULL(s);
        CU_ASSERT(s && strstr(s, "\"Secret\":\"hunter2\""));
        free(s);
        s = print_str(kp_KitchenRequest_desc.print, &m, 0, 0);
        CU_ASSERT(s && !strstr(s, "hunter2"));
        free(s);
    }
    kp_arena_free(&ar);
}

#define K_V1_BOX                                                                                   \
    "\x00\xfd\x00\x00"                                                                             \
    "\xff\xff" /* Port 65535 */                                                                    \
    "\x7f\xff\xff\xff"                                                                             \
    "\x80\x00\x00\x00\x00\x00\x00\x00"                                                             \
    "\x00\x00\x00\x2a" /* Unsigned 42 */                                                           \
    "\x3f\xf8\x00\x00\x00\x00\x00\x00"                                                             \
    "\x00\x03"                                                                                     \
    "d\"q"                                                                                         \
    "\xff\xff" /* MaybeLabel null (nullable from v1) */                                            \
    "\x00\x00\x00\x00\xff\xff\xff\xff"                                                             \
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"                             \
    "\x00\x00\x00\x00" /* Ints */                                                                  \
    "\xff\xff\xff\xff" /* Names null */                                                            \
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"                                                     \
    "\x01\x00\x01"                                                                                 \
    "n"                        /* Box present, Name "n" */                                         \
    "\x00\x00\x00\x00"         /* Outers */                                                        \
    "\x00\x00\x00\x00\x00\x00" /* Shared.A, Shared.B "" */                                         \
    "\xff\xff"

static void test_kitchen_v1(void)
{
    kp_KitchenRequest_t m, d;
    kp_arena_t ar;
    kp_arena_init(&ar, 0);
    kp_KitchenRequest_init(&m);
    m.Unsigned = 42;
    m.MaybeLabel = KP_STR_NULL;
    m.Names.cnt = -1;
    m.Box_null = false;
    m.Box.Name = S("n");
    CHECK_ENC(KitchenRequest, &m, 1, K_V1_BOX);
    CHECK_DEC(KitchenRequest, &d, &ar, 1, K_V1_BOX);
    CU_ASSERT(!d.Box_null);
    CU_ASSERT(kp_str_eq(d.Box.Name, "n"));
    CU_ASSERT_INT(d.MaybeLabel.len, -1);
    /* Unsigned (v1+) is lost in v0 before MaybeLabel is reached */
    CHECK_ENC_ERR(KitchenRequest, &m, 0, KP_E_FIELD_LOST);
    /* MaybeLabel is not nullable in v0 */
    kp_KitchenRequest_init(&m);
    m.MaybeLabel = KP_STR_NULL;
    CHECK_ENC_ERR(KitchenRequest, &m, 0, KP_E_NULL_NOT_ALLOWED);
    kp_arena_free(&ar);
}

#define K_V3_PREFIX                                                                                \
    "\x00\xfd\x00\x00\xff\xff\x7f\xff\xff\xff\x80\x00\x00\x00\x00\x00\x00\x00"                     \
    "\x00\x00\x00\x00\x3f\xf8\x00\x00\x00\x00\x00\x00"                                             \
    "\x04"                                                                                         \
    "d\"q" /* Label, compact */                                                                    \
    "\x01" /* MaybeLabel "" */                                                                     \
    "\x01" /* Blob empty */                                                                        \
    "\x00" /* Recs null */                                                                         \
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"                             \
    "\x01" /* Ints [] */                                                                           \
    "\x01" /* Names [] */                                                                          \
    "\x01" /* Secret "" */                                                                         \
    "\xff" /* Box null */
#define K_OUTERS1                                                                                  \
    "\x02"             /* Outers: 1 element */                                                     \
    "\x00\x01"         /*   Id 1 */                                                                \
    "\x02"             /*   Inners: 1 element */                                                   \
    "\x02\xab"         /*     Data ab */                                                           \
    "\x01\x00\x01\x01" /*     tags: Hot (tag 0) = true */                                          \
    "\x00"             /*   Outer tags */
#define K_SHARED3                "\x00\x00\x00\x00\x01\x00\x00\x00" /* A, B "", Sub.Z, Sub tags, tags */
#define K_SHARED2                "\x00\x00\x00\x00\x01\x00" /* A, B "", tags (no Sub before v3) */
#define K_LEGACY                 "\xff\xff"                 /* Legacy null, int16 length */
#define K_V3_HEAD                K_V3_PREFIX K_OUTERS1 K_SHARED3 K_LEGACY
#define K_V2_HEAD                K_V3_PREFIX K_OUTERS1 K_SHARED2 K_LEGACY
#define K_V3_HEAD_DEFAULT_OUTERS K_V3_PREFIX "\x01" K_SHARED3 K_LEGACY

#define K_V3_TAG0 "\x00\x09\xff\xff\xff\xff\x00\x00\x00\x02\x00" /* Where {X -1, Y 2} */
#define K_V3_TAG1                                                                                  \
    "\x01\x03\x03"                                                                                 \
    "hi" /* Note "hi" */
#define K_V3_TAG2                                                                                  \
    "\x02\x08\x02\x02"                                                                             \
    "k"                                                                                            \
    "\x00\x00\x00\x01\x00"                                   /* Pairs [{k, 1}] */
#define K_V3_TAG5 "\x05\x08\x00\x00\x00\x00\x00\x00\x00\x05" /* Epoch 5 */

static void fill_v3(kp_KitchenRequest_t *m, kp_KitchenRequest_Outer_t *outer,
                    kp_KitchenRequest_Inner_t *inner, kp_KitchenRequest_Pair_t *pair)
{
    kp_KitchenRequest_init(m);
    kp_KitchenRequest_Outer_init(outer);
    kp_KitchenRequest_Inner_init(inner);
    kp_KitchenRequest_Pair_init(pair);
    inner->Data.ptr = (const uint8_t *)"\xab";
    inner->Data.len = 1;
    inner->Hot = true;
    outer->Id = 1;
    outer->Inners.cnt = 1;
    outer->Inners.v = inner;
    m->Outers.cnt = 1;
    m->Outers.v = outer;
    pair->Key = S("k");
    pair->Value = 1;
    m->Pairs.cnt = 1;
    m->Pairs.v = pair;
    m->Where.Y = 2;
    m->Note = S("hi");
    m->Epoch = 5;
}

static void test_kitchen_v3(void)
{
    kp_KitchenRequest_t m, d;
    kp_KitchenRequest_Outer_t outer;
    kp_KitchenRequest_Inner_t inner;
    kp_KitchenRequest_Pair_t pair;
    kp_arena_t ar;
    char *s;
    kp_arena_init(&ar, 0);
    fill_v3(&m, &outer, &inner, &pair);
    CHECK_ENC(KitchenRequest, &m, 3, K_V3_HEAD "\x04" K_V3_TAG0 K_V3_TAG1 K_V3_TAG2 K_V3_TAG5);
    CHECK_DEC(KitchenRequest, &d, &ar, 3, K_V3_HEAD "\x04" K_V3_TAG0 K_V3_TAG1 K_V3_TAG2 K_V3_TAG5);
    CU_ASSERT_INT(d.Epoch, 5);
    CU_ASSERT(kp_str_eq(d.Note, "hi"));
    CU_ASSERT_INT(d.Where.X, -1);
    CU_ASSERT_INT(d.Where.Y, 2);
    CU_ASSERT_INT(d.Pairs.cnt, 1);
    CU_ASSERT_INT(d.Outers.v[0].Inners.v[0].Hot, 1);
    CU_ASSERT_INT(d._unknown_tags.cnt, 0);
    s = print_str(kp_KitchenRequest_desc.print, &d, 3, 0);
    CU_ASSERT(s && strstr(s, "\"Secret\":\"<redacted>\",\"Epoch\":5,\"Note\":\"hi\","
                             "\"Pairs\":[{\"Key\":\"k\",\"Value\":1}],\"Where\":{\"X\":-1,\"Y\":2},"
                             "\"Box\":null,\"Outers\":[{\"Id\":1,\"Inners\":[{\"Data\":\"ab\","
                             "\"Hot\":true}]}],\"Shared\":{\"A\":0,\"B\":\"\",\"T\":0,"
                             "\"Sub\":{\"Z\":0}},\"Legacy\":null}"));
    free(s);
    /* defaults: no tagged field written */
    kp_KitchenRequest_init(&m);
    kp_KitchenRequest_init(&d);
    s = print_str(kp_KitchenRequest_desc.print, &m, 2, 0);
    CU_ASSERT(s &&
              strstr(s, "\"Epoch\":-1,\"Note\":null,\"Where\":{\"X\":-1,\"Y\":0},\"Box\":null"));
    free(s);
    kp_arena_free(&ar);
}

static void test_unknown_tags(void)
{
    kp_KitchenRequest_t d;
    kp_arena_t ar;
    kp_arena_init(&ar, 0);
    /* an unknown tag 3 between known ones is kept and written back in place */
    CHECK_DEC(KitchenRequest, &d, &ar, 3,
              K_V3_HEAD "\x05" K_V3_TAG0 K_V3_TAG1 K_V3_TAG2 "\x03\x02\xde\xad" K_V3_TAG5);
    CU_ASSERT_INT(d._unknown_tags.cnt, 1);
    CU_ASSERT_INT(d._unknown_tags.v[0].tag, 3);
    CU_ASSERT_INT(d._unknown_tags.v[0].data.len, 2);
    CU_ASSERT_INT(d.Epoch, 5);
    /* unknown tags only, and a large tag number */
    CHECK_DEC(KitchenRequest, &d, &ar, 3, K_V3_HEAD "\x02\x03\x00\x80\x80\x01\x01\x07");
    CU_ASSERT_INT(d._unknown_tags.cnt, 2);
    CU_ASSERT_INT(d._unknown_tags.v[1].tag, 16384);
    /* tag 2 (Pairs) exists only from v3: in v2 it is an unknown tag, kept */
    CHECK_DEC(KitchenRequest, &d, &ar, 2, K_V2_HEAD "\x02" K_V3_TAG1 K_V3_TAG2);
    CU_ASSERT_INT(d.Pairs.cnt, 0);
    /* and so is Hot (tag 0 of Inner, v3+) */
    CU_ASSERT_INT(d.Outers.v[0].Inners.v[0].Hot, 0);
    CU_ASSERT_INT(d.Outers.v[0].Inners.v[0]._unknown_tags.cnt, 1);
    CU_ASSERT_INT(d._unknown_tags.cnt, 1);
    CU_ASSERT_INT(d._unknown_tags.v[0].tag, 2);
    CU_ASSERT(kp_str_eq(d.Note, "hi"));
    /* an explicit default value on the wire is read, and not written back */
    {
        kp_reader_t rd;
        kp_writer_t wr;
        static const char in[] = K_V3_HEAD "\x01\x05\x08\xff\xff\xff\xff\xff\xff\xff\xff";
        static const char out[] = K_V3_HEAD "\x00";
        kp_reader_init(&rd, in, sizeof(in) - 1);
        CU_ASSERT_INT(kp_KitchenRequest_decode(&rd, &ar, &d, 3), 0);
        CU_ASSERT_INT(d.Epoch, -1);
        kp_writer_init(&wr);
        CU_ASSERT_INT(kp_KitchenRequest_encode(&wr, &d, 3), 0);
        CU_ASSERT_BYTES(wr.buf, wr.len, out, sizeof(out) - 1);
        kp_writer_free(&wr);
    }
    kp_arena_free(&ar);
}

static void test_bad_tags(void)
{
    kp_arena_t ar;
    kp_arena_init(&ar, 0);
    /* not increasing */
    CHECK_DEC_ERR(KitchenRequest, &ar, 3, K_V3_HEAD "\x02" K_V3_TAG1 K_V3_TAG0, KP_E_BAD_TAGS);
    CHECK_DEC_ERR(KitchenRequest, &ar, 3, K_V3_HEAD "\x02" K_V3_TAG1 K_V3_TAG1, KP_E_BAD_TAGS);
    CHECK_DEC_ERR(KitchenRequest, &ar, 3, K_V3_HEAD "\x02\x09\x00\x09\x00", KP_E_BAD_TAGS);
    /* declared size larger than what the field's decoder takes */
    CHECK_DEC_ERR(KitchenRequest, &ar, 3,
                  K_V3_HEAD "\x01\x05\x09\x00\x00\x00\x00\x00\x00\x00\x05\x00", KP_E_BAD_TAGS);
    /* declared size smaller than the value */
    CHECK_DEC_ERR(KitchenRequest, &ar, 3,
                  K_V3_HEAD "\x01\x01\x02\x03"
                            "hi",
                  KP_E_TRUNCATED);
    /* value runs past the end */
    CHECK_DEC_ERR(KitchenRequest, &ar, 3,
                  K_V3_HEAD "\x01\x01\x05\x03"
                            "hi",
                  KP_E_TRUNCATED);
    /* a null in the tagged, non-nullable Pairs */
    CHECK_DEC_ERR(KitchenRequest, &ar, 3, K_V3_HEAD "\x01\x02\x01\x00", KP_E_NULL_NOT_ALLOWED);
    /* missing tag section */
    CHECK_DEC_ERR(KitchenRequest, &ar, 3, K_V3_HEAD, KP_E_TRUNCATED);
    kp_arena_free(&ar);
}

static void test_field_lost(void)
{
    kp_KitchenRequest_t m;
    kp_KitchenRequest_init(&m);
    m.Port = 1; /* v1+, not ignorable */
    CHECK_ENC_ERR(KitchenRequest, &m, 0, KP_E_FIELD_LOST);
    CHECK_ENC_ERR(KitchenRequest, &m, 1, 0);
    kp_KitchenRequest_init(&m);
    m.GoneQuiet = 5; /* v0-1, ignorable: dropped */
    CHECK_ENC_ERR(KitchenRequest, &m, 2, 0);
    m.Gone = 5; /* v0-1, not ignorable */
    CHECK_ENC_ERR(KitchenRequest, &m, 2, KP_E_FIELD_LOST);
    kp_KitchenRequest_init(&m);
    m.Epoch = 5; /* tagged, v2+ */
    CHECK_ENC_ERR(KitchenRequest, &m, 1, KP_E_FIELD_LOST);
    kp_KitchenRequest_init(&m);
    m.Where.Y = 1; /* tagged struct, v2+ */
    CHECK_ENC_ERR(KitchenRequest, &m, 1, KP_E_FIELD_LOST);
    kp_KitchenRequest_init(&m);
    m.Box_null = false; /* v1+, default null */
    CHECK_ENC_ERR(KitchenRequest, &m, 0, KP_E_FIELD_LOST);
    kp_KitchenRequest_init(&m);
    m.Shared.T = 3; /* shared struct, tagged v2+ */
    CHECK_ENC_ERR(KitchenRequest, &m, 1, KP_E_FIELD_LOST);
    CHECK_ENC_ERR(KitchenRequest, &m, 2, 0);
    kp_KitchenRequest_init(&m);
    m.Label = KP_STR_NULL;
    CHECK_ENC_ERR(KitchenRequest, &m, 3, KP_E_NULL_NOT_ALLOWED);
    kp_KitchenRequest_init(&m);
    CHECK_ENC_ERR(KitchenRequest, &m, 4, KP_E_BAD_VERSION);
}

static void test_unknown_tag_clash(void)
{
    kp_KitchenRequest_t m;
    kp_rawtag_t rt[2];
    kp_KitchenRequest_init(&m);
    rt[0].tag = 5;
    rt[0].data.ptr = (const uint8_t *)"\x00";
    rt[0].data.len = 1;
    m._unknown_tags.cnt = 1;
    m._unknown_tags.v = rt;
    /* Epoch (tag 5) at its default: the kept tag 5 is written */
    CHECK_ENC(KitchenRequest, &m, 3, K_V3_HEAD_DEFAULT_OUTERS "\x01\x05\x01\x00");
    m.Epoch = 1; /* now both would be tag 5 */
    CHECK_ENC_ERR(KitchenRequest, &m, 3, KP_E_BAD_TAGS);
    /* unsorted kept tags */
    m.Epoch = -1;
    rt[1] = rt[0];
    rt[0].tag = 9;
    m._unknown_tags.cnt = 2;
    CHECK_ENC_ERR(KitchenRequest, &m, 3, KP_E_BAD_TAGS);
}

static void test_response_shared_struct(void)
{
    kp_KitchenResponse_t r, d;
    kp_KitchenRequest_Pair_t p[2]; /* the response reuses the request's struct Pair */
    static const int64_t maybe[] = {-1};
    kp_arena_t ar;
    kp_arena_init(&ar, 0);
    kp_KitchenResponse_init(&r);
    CU_ASSERT_INT(r.Maybe.cnt, -1);
    kp_KitchenRequest_Pair_init(&p[0]);
    kp_KitchenRequest_Pair_init(&p[1]);
    p[0].Key = S("a");
    p[1].Value = -2;
    r.Pairs.cnt = 2;
    r.Pairs.v = p;
    CHECK_ENC(KitchenResponse, &r, 1,
              "\x00\x00\x00\x00\x00\x02\x00\x01"
              "a"
              "\x00\x00\x00\x00\x00\x00\xff\xff\xff\xfe");
    CHECK_ENC(KitchenResponse, &r, 2,
              "\x00\x00\x03\x02"
              "a"
              "\x00\x00\x00\x00\x00\x01\xff\xff\xff\xfe\x00\x00\x00");
    r.Maybe.cnt = 1;
    r.Maybe.v = (int64_t *)maybe;
    CHECK_ENC(KitchenResponse, &r, 3,
              "\x00\x00\x03\x02"
              "a"
              "\x00\x00\x00\x00\x00\x01\xff\xff\xff\xfe\x00"
              "\x02\xff\xff\xff\xff\xff\xff\xff\xff\x00");
    CHECK_DEC(KitchenResponse, &d, &ar, 3,
              "\x00\x00\x03\x02"
              "a"
              "\x00\x00\x00\x00\x00\x01\xff\xff\xff\xfe\x00"
              "\x02\xff\xff\xff\xff\xff\xff\xff\xff\x00");
    CU_ASSERT_INT(d.Maybe.v[0], -1);
    CHECK_ENC_ERR(KitchenResponse, &r, 1, KP_E_FIELD_LOST);
    kp_arena_free(&ar);
}

/* ---- tables ----------------------------------------------------------------------- */

static void test_tables(void)
{
    const kp_api_info_t *a;
    CU_ASSERT_INT(kp_apis_cnt, 3);
    CU_ASSERT_INT(kp_apis[0].key, 1);
    CU_ASSERT_INT(kp_apis[2].key, 18);
    a = kp_api_lookup(1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_STR(a->name, "Kitchen");
    CU_ASSERT_INT(a->min_ver, 0);
    CU_ASSERT_INT(a->max_ver, 3);
    CU_ASSERT_INT(a->flex_min, 2);
    CU_ASSERT_INT(a->flags, KP_API_BROKER | KP_API_CONTROLLER);
    CU_ASSERT_PTR_EQUAL(a->req, &kp_KitchenRequest_desc);
    CU_ASSERT_PTR_EQUAL(a->resp, &kp_KitchenResponse_desc);
    CU_ASSERT_INT(kp_api_lookup(7)->flags, KP_API_BROKER);
    CU_ASSERT_INT(kp_api_lookup(7)->flex_min, -1);
    CU_ASSERT_INT(kp_api_lookup(18)->flags, KP_API_PROVISIONAL | KP_API_BROKER);
    CU_ASSERT_PTR_NULL(kp_api_lookup(2));
    CU_ASSERT_PTR_NULL(kp_api_lookup(-1));
    CU_ASSERT_INT(KP_APIKEY_Kitchen, 1);
    CU_ASSERT_STR(kp_KitchenRequest_desc.name, "KitchenRequest");
    CU_ASSERT_INT(kp_KitchenRequest_desc.struct_size, sizeof(kp_KitchenRequest_t));
    CU_ASSERT_INT(kp_RequestHeader_desc.api_key, -1);
    CU_ASSERT_PTR_EQUAL(kp_msg_lookup("ResponseHeader"), &kp_ResponseHeader_desc);
    CU_ASSERT_PTR_NULL(kp_msg_lookup("Nope"));
    CU_ASSERT_INT(kp_msgs_all_cnt, 8);

    CU_ASSERT_INT(kp_request_header_version(1, 1), 1);
    CU_ASSERT_INT(kp_request_header_version(1, 2), 2);
    CU_ASSERT_INT(kp_request_header_version(1, 99), 2);
    CU_ASSERT_INT(kp_request_header_version(7, 0), 1);
    CU_ASSERT_INT(kp_request_header_version(99, 0), -1);
    CU_ASSERT_INT(kp_response_header_version(1, 1), 0);
    CU_ASSERT_INT(kp_response_header_version(1, 3), 1);
    CU_ASSERT_INT(kp_response_header_version(18, 3), 0);
    CU_ASSERT_INT(kp_response_header_version(18, 9), 0);
    CU_ASSERT_INT(kp_response_header_version(99, 3), -1);
}

static void test_errcodes(void)
{
    CU_ASSERT_INT(KP_ERR_NOT_LEADER_OR_FOLLOWER, 6);
    CU_ASSERT_INT(KP_ERR_UNKNOWN_SERVER_ERROR, -1);
    CU_ASSERT_INT(sizeof(KP_ERR_NONE), sizeof(int16_t));
    CU_ASSERT_STR(kp_errcode_name(6), "NOT_LEADER_OR_FOLLOWER");
    CU_ASSERT_STR(kp_errcode_name(999), "UNKNOWN_ERROR_CODE");
    CU_ASSERT(kp_errcode_retriable(6));
    CU_ASSERT(!kp_errcode_retriable(-1));
    CU_ASSERT(!kp_errcode_retriable(999));
    CU_ASSERT_STR(kp_errcode_msg(134), "A \"quoted\" provisional code.");
    CU_ASSERT(kp_errcode_lookup(134)->provisional);
    CU_ASSERT(!kp_errcode_lookup(0)->provisional);
    CU_ASSERT_INT(kp_errcodes_cnt, 4);
    CU_ASSERT_INT(kp_errcodes[0].code, -1);
}

static void test_constants(void)
{
    CU_ASSERT_INT(KP_TEST_SMALL, 7);
    CU_ASSERT_INT(KP_TEST_NEGATIVE, -1);
    CU_ASSERT_INT(KP_TEST_HEX, 64);
    CU_ASSERT(KP_TEST_BIG == INT64_C(4294967296));
}

static const cu_test_t plain_tests[] = {
    {"plain", test_plain},
    {"plain_bad", test_plain_bad},
    {"huge_counts", test_huge_counts},
    {"headers", test_headers},
    {NULL, NULL},
};
static const cu_test_t kitchen_tests[] = {
    {"v0", test_kitchen_v0},
    {"v1", test_kitchen_v1},
    {"v3", test_kitchen_v3},
    {"unknown_tags", test_unknown_tags},
    {"bad_tags", test_bad_tags},
    {"field_lost", test_field_lost},
    {"unknown_tag_clash", test_unknown_tag_clash},
    {"response_shared_struct", test_response_shared_struct},
    {NULL, NULL},
};
static const cu_test_t table_tests[] = {
    {"apis", test_tables},
    {"errcodes", test_errcodes},
    {"constants", test_constants},
    {NULL, NULL},
};
static const cu_suite_t suites[] = {
    {"golden_plain", plain_tests},
    {"golden_kitchen", kitchen_tests},
    {"tables", table_tests},
    {NULL, NULL},
};

int main(void)
{
    return cu_run(suites);
}
