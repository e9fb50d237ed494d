/*
 * test_mrec.c -- the KRaft metadata record framing (proto/runtime/kp_mrec.h) over the generated
 * record types of proto/schema/metadata:
 *
 *   hand-computed golden frames (TopicRecord, PartitionChangeRecord with tagged fields);
 *   every record type and version: random fill -> encode -> size -> decode -> same bytes;
 *   every strict prefix fails; a trailing byte fails;
 *   unknown frame versions, unknown types, unsupported versions and over-long varints fail with
 *   the error the header promises, and report what they read;
 *   encode refuses unknown types and versions without writing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_util.h"
#include "kp_mrec.h"
#include "kp_msgs.h"

static int decode_bytes(const uint8_t *p, size_t n, kp_mrec_t *m)
{
    kp_arena_t ar;
    int err;
    /* an exact-size copy, so ASan sees any read past the end */
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy)
        return KP_E_NOMEM;
    memcpy(copy, p, n);
    kp_arena_init(&ar, 0);
    err = kp_mrec_decode(copy, n, &ar, m);
    m->rec = NULL; /* freed with the arena */
    kp_arena_free(&ar);
    free(copy);
    return err;
}

static void test_golden_topic(void)
{
    static const uint8_t want[] = {
        0x01, 0x02, 0x00,                                     /* frame 1, type 2, version 0 */
        0x04, 't',  'o',  'p',                                /* Name "top" (compact) */
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, /* TopicId */
        0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x00,       /* no tagged fields */
    };
    kp_TopicRecord_t rec;
    kp_writer_t wr;
    kp_arena_t ar;
    kp_mrec_t m;
    int i;

    kp_TopicRecord_init(&rec);
    rec.Name.ptr = "top";
    rec.Name.len = 3;
    for (i = 0; i < 16; i++)
        rec.TopicId.b[i] = (uint8_t)i;
    kp_writer_init(&wr);
    CU_ASSERT_INT(kp_mrec_encode(&wr, KP_RECTYPE_TopicRecord, 0, &rec), 0);
    CU_ASSERT_BYTES(wr.buf, wr.len, want, sizeof(want));
    CU_ASSERT_INT(kp_mrec_size(KP_RECTYPE_TopicRecord, 0, &rec), sizeof(want));
    kp_writer_free(&wr);

    kp_arena_init(&ar, 0);
    CU_ASSERT_INT(kp_mrec_decode(want, sizeof(want), &ar, &m), 0);
    CU_ASSERT_PTR_NULL(m.errstr);
    CU_ASSERT_INT(m.frame_ver, 1);
    CU_ASSERT_INT(m.type, KP_RECTYPE_TopicRecord);
    CU_ASSERT_INT(m.ver, 0);
    CU_ASSERT_FATAL(m.info != NULL && m.rec != NULL);
    CU_ASSERT_STR(m.info->name, "TopicRecord");
    {
        const kp_TopicRecord_t *t = m.rec;
        CU_ASSERT(t->Name.len == 3 && memcmp(t->Name.ptr, "top", 3) == 0);
        CU_ASSERT(memcmp(t->TopicId.b, rec.TopicId.b, 16) == 0);
    }
    {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        CU_ASSERT_FATAL(f != NULL);
        kp_mrec_print(f, &m, 0);
        fclose(f);
        CU_ASSERT_STR(buf, "{\"type\":2,\"name\":\"TopicRecord\",\"version\":0,\"record\":"
                           "{\"Name\":\"top\",\"TopicId\":\"000102030405060708090a0b0c0d0e0f\"}}");
        free(buf);
    }
    kp_arena_free(&ar);
}

/* PartitionChangeRecord v0 changing only the leader: the tagged field Leader (tag 1) is written,
 * the null ISR and replica lists (their default) are not. */
static void test_golden_partition_change(void)
{
    static const uint8_t want[] = {
        0x01, 0x05, 0x00,       /* frame 1, type 5, version 0 */
        0x00, 0x00, 0x00, 0x07, /* PartitionId 7 */
        0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x2a, /* TopicId */
        0x01,                                                          /* one tagged field */
        0x01, 0x04,                                                    /* tag 1, 4 bytes */
        0x00, 0x00, 0x00, 0x03,                                        /* Leader 3 */
    };
    kp_PartitionChangeRecord_t rec;
    kp_writer_t wr;
    kp_arena_t ar;
    kp_mrec_t m;

    kp_PartitionChangeRecord_init(&rec);
    CU_ASSERT_INT(rec.Leader, -2);
    CU_ASSERT_INT(rec.Isr.cnt, -1);
    CU_ASSERT_INT(rec.LeaderRecoveryState, -1);
    rec.PartitionId = 7;
    rec.TopicId.b[15] = 0x2a;
    rec.Leader = 3;
    kp_writer_init(&wr);
    CU_ASSERT_INT(kp_mrec_encode(&wr, KP_RECTYPE_PartitionChangeRecord, 0, &rec), 0);
    CU_ASSERT_BYTES(wr.buf, wr.len, want, sizeof(want));
    kp_writer_free(&wr);

    kp_arena_init(&ar, 0);
    CU_ASSERT_INT(kp_mrec_decode(want, sizeof(want), &ar, &m), 0);
    CU_ASSERT_FATAL(m.rec != NULL);
    {
        const kp_PartitionChangeRecord_t *p = m.rec;
        CU_ASSERT_INT(p->PartitionId, 7);
        CU_ASSERT_INT(p->Leader, 3);
        CU_ASSERT_INT(p->Isr.cnt, -1);
        CU_ASSERT_INT(p->Replicas.cnt, -1);
    }
    kp_arena_free(&ar);

    /* A v1+ field in v0 is reported, not dropped. */
    rec.Directories.cnt = 0;
    kp_writer_init(&wr);
    CU_ASSERT_INT(kp_mrec_encode(&wr, KP_RECTYPE_PartitionChangeRecord, 0, &rec), KP_E_FIELD_LOST);
    kp_writer_free(&wr);
}

/* Every record type and version, a few random fills each. */
static void test_roundtrip_all(void)
{
    size_t i, n = 0;
    CU_ASSERT_FATAL(kp_records_cnt > 0);
    for (i = 0; i < kp_records_cnt; i++) {
        const kp_record_info_t *ri = &kp_records[i];
        int16_t v;
        CU_ASSERT(kp_record_lookup(ri->type) == ri);
        CU_ASSERT(ri->desc->api_key == -1);
        if (i > 0)
            CU_ASSERT(kp_records[i - 1].type < ri->type);
        for (v = ri->min_ver; v <= ri->max_ver; v++) {
            uint64_t seed;
            for (seed = 1; seed <= 5; seed++) {
                kp_arena_t ar, ar2;
                kp_writer_t wr, wr2;
                kp_mrec_t m;
                uint64_t rng = seed * 1000003u + (uint64_t)ri->type * 131u + (uint64_t)v;
                void *rec = calloc(1, ri->desc->struct_size);
                size_t k;
                CU_ASSERT_FATAL(rec != NULL);
                kp_arena_init(&ar, 0);
                kp_arena_init(&ar2, 0);
                kp_writer_init(&wr);
                kp_writer_init(&wr2);
                CU_ASSERT_INT(kp_msg_fill_random(ri->desc, rec, &ar, v, &rng), 0);
                CU_ASSERT_INT(kp_mrec_encode(&wr, ri->type, v, rec), 0);
                CU_ASSERT_INT(kp_mrec_size(ri->type, v, rec), wr.len);
                CU_ASSERT_INT(kp_mrec_decode(wr.buf, wr.len, &ar2, &m), 0);
                CU_ASSERT(m.info == ri && m.ver == (uint32_t)v && m.rec != NULL);
                if (m.rec) {
                    CU_ASSERT_INT(kp_mrec_encode(&wr2, ri->type, v, m.rec), 0);
                    CU_ASSERT_BYTES(wr2.buf, wr2.len, wr.buf, wr.len);
                }
                /* every strict prefix fails; so does one byte too many */
                for (k = 0; k < wr.len; k++) {
                    kp_mrec_t t;
                    if (decode_bytes(wr.buf, k, &t) == 0) {
                        fprintf(stderr, "\n%s v%d: a %zu-byte prefix of %zu decoded\n", ri->name, v,
                                k, wr.len);
                        CU_FAIL("prefix decoded");
                    }
                }
                {
                    kp_mrec_t t;
                    uint8_t *more = malloc(wr.len + 1);
                    CU_ASSERT_FATAL(more != NULL);
                    memcpy(more, wr.buf, wr.len);
                    more[wr.len] = 0;
                    CU_ASSERT_INT(decode_bytes(more, wr.len + 1, &t), KP_E_TRAILING);
                    CU_ASSERT_PTR_NOT_NULL(t.errstr);
                    free(more);
                }
                kp_writer_free(&wr);
                kp_writer_free(&wr2);
                kp_arena_free(&ar);
                kp_arena_free(&ar2);
                free(rec);
                n++;
            }
        }
    }
    fprintf(stderr, "\n  %zu record round trips over %zu types\n", n, kp_records_cnt);
}

static void test_bad_frames(void)
{
    /* NoOpRecord v0: frame 1, type 20, version 0, empty tag section. */
    static const uint8_t noop[] = {0x01, 0x14, 0x00, 0x00};
    static const uint8_t frame0[] = {0x00, 0x14, 0x00, 0x00};
    static const uint8_t frame2[] = {0x02, 0x14, 0x00, 0x00};
    static const uint8_t type6[] = {0x01, 0x06, 0x00, 0x00};                /* unassigned */
    static const uint8_t type_big[] = {0x01, 0xff, 0xff, 0x01, 0x00, 0x00}; /* 32767 */
    static const uint8_t type_huge[] = {0x01, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x00};
    static const uint8_t ver1[] = {0x01, 0x14, 0x01, 0x00}; /* NoOpRecord has v0 only */
    static const uint8_t ver_huge[] = {0x01, 0x14, 0x80, 0x80, 0x80, 0x80, 0x10, 0x00};
    static const uint8_t frame_long[] = {0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 0x14, 0x00, 0x00};
    static const uint8_t frame_cut[] = {0x81};
    static const uint8_t type_cut[] = {0x01, 0x94};
    static const uint8_t tags_bad[] = {0x01, 0x14, 0x00, 0x05}; /* 5 tags in no bytes */
    kp_mrec_t m;

    CU_ASSERT_INT(decode_bytes(noop, sizeof(noop), &m), 0);
    CU_ASSERT_INT(m.type, KP_RECTYPE_NoOpRecord);

    CU_ASSERT_INT(decode_bytes(noop, 0, &m), KP_E_TRUNCATED);
    CU_ASSERT_PTR_NOT_NULL(m.errstr);
    CU_ASSERT_PTR_NULL(m.info);

    CU_ASSERT_INT(decode_bytes(frame0, sizeof(frame0), &m), KP_E_UNSUPPORTED);
    CU_ASSERT_INT(m.frame_ver, 0);
    CU_ASSERT_STR(m.errstr, "metadata record: unknown frame version");
    CU_ASSERT_INT(decode_bytes(frame2, sizeof(frame2), &m), KP_E_UNSUPPORTED);
    CU_ASSERT_INT(m.frame_ver, 2);

    CU_ASSERT_INT(decode_bytes(type6, sizeof(type6), &m), KP_E_UNSUPPORTED);
    CU_ASSERT_INT(m.type, 6);
    CU_ASSERT_PTR_NULL(m.info);
    CU_ASSERT_STR(m.errstr, "metadata record: unknown record type");
    CU_ASSERT_INT(decode_bytes(type_big, sizeof(type_big), &m), KP_E_UNSUPPORTED);
    CU_ASSERT_INT(m.type, 32767);
    CU_ASSERT_INT(decode_bytes(type_huge, sizeof(type_huge), &m), KP_E_UNSUPPORTED);
    CU_ASSERT_INT(m.type, UINT32_MAX);
    CU_ASSERT_PTR_NULL(m.info);

    CU_ASSERT_INT(decode_bytes(ver1, sizeof(ver1), &m), KP_E_BAD_VERSION);
    CU_ASSERT_INT(m.ver, 1);
    CU_ASSERT_PTR_NOT_NULL(m.info);
    CU_ASSERT_STR(m.errstr, "metadata record: unsupported record version");
    /* 5-byte varint whose last byte carries more than 32 bits */
    CU_ASSERT_INT(decode_bytes(ver_huge, sizeof(ver_huge), &m), KP_E_VARINT);
    CU_ASSERT_PTR_NOT_NULL(m.errstr);
    /* 6-byte varint */
    CU_ASSERT_INT(decode_bytes(frame_long, sizeof(frame_long), &m), KP_E_VARINT);
    CU_ASSERT_INT(decode_bytes(frame_cut, sizeof(frame_cut), &m), KP_E_TRUNCATED);
    CU_ASSERT_INT(decode_bytes(type_cut, sizeof(type_cut), &m), KP_E_TRUNCATED);
    CU_ASSERT_STR(m.errstr, "metadata record: bad record type varint");
    CU_ASSERT(decode_bytes(tags_bad, sizeof(tags_bad), &m) != 0);
    CU_ASSERT_PTR_NULL(m.rec);
    CU_ASSERT_PTR_NOT_NULL(m.errstr);
}

static void test_encode_refuses(void)
{
    kp_NoOpRecord_t rec;
    kp_writer_t wr;

    kp_NoOpRecord_init(&rec);
    kp_writer_init(&wr);
    CU_ASSERT_INT(kp_mrec_encode(&wr, 6, 0, &rec), KP_E_UNSUPPORTED);
    CU_ASSERT_INT(wr.len, 0);
    CU_ASSERT_INT(wr.err, KP_E_UNSUPPORTED);
    kp_writer_free(&wr);
    kp_writer_init(&wr);
    CU_ASSERT_INT(kp_mrec_encode(&wr, KP_RECTYPE_NoOpRecord, 1, &rec), KP_E_BAD_VERSION);
    CU_ASSERT_INT(wr.len, 0);
    kp_writer_free(&wr);
    kp_writer_init(&wr);
    CU_ASSERT_INT(kp_mrec_encode(&wr, -1, 0, &rec), KP_E_UNSUPPORTED);
    kp_writer_free(&wr);
    CU_ASSERT_INT(kp_mrec_size(6, 0, &rec), 0);
    CU_ASSERT_INT(kp_mrec_size(KP_RECTYPE_NoOpRecord, -1, &rec), 0);
    CU_ASSERT_INT(kp_mrec_size(KP_RECTYPE_NoOpRecord, 0, &rec), 4);
}

static const cu_test_t tests[] = {
    {"golden_topic", test_golden_topic},
    {"golden_partition_change", test_golden_partition_change},
    {"roundtrip_all", test_roundtrip_all},
    {"bad_frames", test_bad_frames},
    {"encode_refuses", test_encode_refuses},
    {NULL, NULL},
};
static const cu_suite_t suites[] = {
    {"codec_mrec", tests},
    {NULL, NULL},
};

int main(void)
{
    return cu_run(suites);
}
