/* tests/state: __mirror_state binary keys and protobuf values. */
#include <CUnit/Basic.h>
#include <stdlib.h>
#include <string.h>

#include "kp_murmur2.h"
#include "kp_state.h"

static const kp_uuid_t topic1 = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};

static kp_state_key_t mk_key(int16_t type, const char *mirror, int32_t partition)
{
    kp_state_key_t k;
    memset(&k, 0, sizeof(k));
    k.type = type;
    k.mirror = kp_str(mirror);
    if (kp_state_key_has_topic(type))
        k.topicId = topic1;
    if (kp_state_key_has_partition(type))
        k.partition = partition;
    return k;
}

/* ---- keys ---- */

static void test_key_golden(void)
{
    kp_state_key_t k = mk_key(KP_STATE_REC_PARTITION_STATE, "m1", 7), p;
    kp_writer_t w;
    static const uint8_t want[] = {0, 2, 0,  2,  'm', '1', 1,  2,  3,  4, 5, 6, 7,
                                   8, 9, 10, 11, 12,  13,  14, 15, 16, 0, 0, 0, 7};

    kp_writer_init(&w);
    CU_ASSERT_EQUAL(kp_state_key_encode(&w, &k), 0);
    CU_ASSERT_EQUAL(w.len, sizeof(want));
    CU_ASSERT_EQUAL(kp_state_key_size(&k), sizeof(want));
    CU_ASSERT(memcmp(w.buf, want, sizeof(want)) == 0);
    CU_ASSERT_EQUAL(kp_state_key_parse(w.buf, w.len, &p, NULL), 0);
    CU_ASSERT_EQUAL(p.type, 2);
    CU_ASSERT(kp_str_eq(p.mirror, "m1"));
    CU_ASSERT(memcmp(p.topicId.b, topic1.b, 16) == 0);
    CU_ASSERT_EQUAL(p.partition, 7);
    kp_writer_free(&w);
}

static void test_key_roundtrip_all_types(void)
{
    int16_t t;
    char longname[KP_STATE_MIRROR_NAME_MAX + 1];

    memset(longname, 'x', KP_STATE_MIRROR_NAME_MAX);
    longname[KP_STATE_MIRROR_NAME_MAX] = '\0';
    for (t = 1; t <= KP_STATE_REC_MAX; t++) {
        const char *names[] = {"a", "mirror-east.1", longname};
        size_t i;
        for (i = 0; i < 3; i++) {
            kp_state_key_t k = mk_key(t, names[i], 123456), p;
            kp_writer_t w;
            size_t expect = 4 + strlen(names[i]) + (kp_state_key_has_topic(t) ? 16 : 0) +
                            (kp_state_key_has_partition(t) ? 4 : 0);
            kp_writer_init(&w);
            CU_ASSERT_EQUAL_FATAL(kp_state_key_encode(&w, &k), 0);
            CU_ASSERT_EQUAL(w.len, expect);
            CU_ASSERT_EQUAL(kp_state_key_size(&k), expect);
            CU_ASSERT_EQUAL(kp_state_key_parse(w.buf, w.len, &p, NULL), 0);
            CU_ASSERT_EQUAL(p.type, t);
            CU_ASSERT(kp_str_eq(p.mirror, names[i]));
            CU_ASSERT_EQUAL(p.partition, kp_state_key_has_partition(t) ? 123456 : 0);
            CU_ASSERT(memcmp(p.topicId.b, k.topicId.b, 16) == 0);
            kp_writer_free(&w);
        }
    }
    CU_ASSERT_TRUE(kp_state_key_has_topic(KP_STATE_REC_SYNCED_TOPIC_CONFIGS));
    CU_ASSERT_FALSE(kp_state_key_has_partition(KP_STATE_REC_SYNCED_TOPIC_CONFIGS));
    CU_ASSERT_FALSE(kp_state_key_has_topic(KP_STATE_REC_MIRROR));
    CU_ASSERT_FALSE(kp_state_key_has_topic(KP_STATE_REC_SYNCED_ACLS));
}

static void test_key_encode_invalid(void)
{
    kp_writer_t w;
    kp_state_key_t k;
    char toolong[KP_STATE_MIRROR_NAME_MAX + 2];

    memset(toolong, 'y', sizeof(toolong) - 1);
    toolong[sizeof(toolong) - 1] = '\0';
    kp_writer_init(&w);
    k = mk_key(9, "m", 0);
    CU_ASSERT_EQUAL(kp_state_key_encode(&w, &k), KP_E_UNSUPPORTED);
    CU_ASSERT_EQUAL(kp_state_key_size(&k), 0);
    k = mk_key(2, "", 0);
    CU_ASSERT_EQUAL(kp_state_key_encode(&w, &k), KP_E_INVALID);
    k = mk_key(2, NULL, 0);
    CU_ASSERT_EQUAL(kp_state_key_encode(&w, &k), KP_E_INVALID);
    k = mk_key(2, toolong, 0);
    CU_ASSERT_EQUAL(kp_state_key_encode(&w, &k), KP_E_INVALID);
    k = mk_key(2, "m", -1);
    CU_ASSERT_EQUAL(kp_state_key_encode(&w, &k), KP_E_INVALID);
    k = mk_key(4, "m", 0);
    memset(&k.topicId, 0, sizeof(k.topicId));
    CU_ASSERT_EQUAL(kp_state_key_encode(&w, &k), KP_E_INVALID);
    CU_ASSERT_EQUAL(w.len, 0);
    kp_writer_free(&w);
}

static void test_key_malformed(void)
{
    kp_state_key_t k = mk_key(KP_STATE_REC_LAST_MIRROR_EPOCH, "mm", 3), p;
    kp_writer_t w;
    size_t n;
    const char *why;
    uint8_t buf[64];

    kp_writer_init(&w);
    CU_ASSERT_EQUAL_FATAL(kp_state_key_encode(&w, &k), 0);
    /* Every truncation, in an exact-size buffer for ASan. */
    for (n = 0; n < w.len; n++) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, w.buf, n);
        why = NULL;
        CU_ASSERT_EQUAL(kp_state_key_parse(cut, n, &p, &why), KP_E_TRUNCATED);
        CU_ASSERT_PTR_NOT_NULL(why);
        free(cut);
    }
    CU_ASSERT_EQUAL(kp_state_key_parse(NULL, 0, &p, NULL), KP_E_TRUNCATED);
    /* Trailing byte. */
    memcpy(buf, w.buf, w.len);
    buf[w.len] = 0;
    CU_ASSERT_EQUAL(kp_state_key_parse(buf, w.len + 1, &p, NULL), KP_E_TRAILING);
    /* Type: negative, unknown (future). */
    buf[0] = 0x80;
    CU_ASSERT_EQUAL(kp_state_key_parse(buf, w.len, &p, NULL), KP_E_CORRUPT);
    buf[0] = 0;
    buf[1] = 0x2a;
    CU_ASSERT_EQUAL(kp_state_key_parse(buf, w.len, &p, NULL), KP_E_UNSUPPORTED);
    buf[1] = 0;
    CU_ASSERT_EQUAL(kp_state_key_parse(buf, w.len, &p, NULL), KP_E_UNSUPPORTED);
    buf[1] = 1;
    /* Name length 0, negative, too long, longer than the key. */
    buf[2] = 0;
    buf[3] = 0;
    CU_ASSERT_EQUAL(kp_state_key_parse(buf, w.len, &p, NULL), KP_E_CORRUPT);
    buf[2] = 0xff;
    buf[3] = 0xff;
    CU_ASSERT_EQUAL(kp_state_key_parse(buf, w.len, &p, NULL), KP_E_CORRUPT);
    buf[2] = 0;
    buf[3] = 250;
    CU_ASSERT_EQUAL(kp_state_key_parse(buf, w.len, &p, NULL), KP_E_CORRUPT);
    buf[3] = 60;
    CU_ASSERT_EQUAL(kp_state_key_parse(buf, w.len, &p, NULL), KP_E_TRUNCATED);
    buf[3] = 2;
    CU_ASSERT_EQUAL(kp_state_key_parse(buf, w.len, &p, NULL), 0);
    /* Zero topic id, negative partition. */
    memset(buf + 6, 0, 16);
    CU_ASSERT_EQUAL(kp_state_key_parse(buf, w.len, &p, NULL), KP_E_CORRUPT);
    memcpy(buf + 6, topic1.b, 16);
    buf[22] = 0xff;
    CU_ASSERT_EQUAL(kp_state_key_parse(buf, w.len, &p, NULL), KP_E_CORRUPT);
    kp_writer_free(&w);
}

static void test_key_partition(void)
{
    kp_state_key_t k = mk_key(KP_STATE_REC_PARTITION_STATE, "mirror-1", 5);
    kp_writer_t w;
    int32_t i;

    kp_writer_init(&w);
    CU_ASSERT_EQUAL_FATAL(kp_state_key_encode(&w, &k), 0);
    /* Partition-level records: murmur2 of the encoded key. */
    CU_ASSERT_EQUAL(kp_state_key_partition(&k, 50), kp_murmur2_partition(w.buf, w.len, 50));
    /* Mirror-level records: the mirror name's partition ("mirror-1" -> 24 of 50, computed
     * with the Java client's Utils.murmur2). */
    for (i = KP_STATE_REC_MIRROR; i <= KP_STATE_REC_SYNCED_ACLS; i++) {
        kp_state_key_t m = mk_key((int16_t)i, "mirror-1", 0);
        CU_ASSERT_EQUAL(kp_state_key_partition(&m, 50), 24);
    }
    CU_ASSERT_EQUAL(kp_state_mirror_partition(kp_str("mirror-1"), 50), 24);
    CU_ASSERT_EQUAL(kp_state_key_partition(&k, 0), -1);
    k.partition = -1;
    CU_ASSERT_EQUAL(kp_state_key_partition(&k, 50), -1);
    k.type = 99;
    CU_ASSERT_EQUAL(kp_state_key_partition(&k, 50), -1);
    kp_writer_free(&w);
}

static void test_pstate_names(void)
{
    CU_ASSERT_STRING_EQUAL(kp_state_pstate_name(KP_PSTATE_MIRRORING), "MIRRORING");
    CU_ASSERT_STRING_EQUAL(kp_state_pstate_name(KP_PSTATE_UNKNOWN), "UNKNOWN");
    CU_ASSERT_PTR_NULL(kp_state_pstate_name(2));
    CU_ASSERT_EQUAL(kp_state_pstate_from_name("STOPPED"), KP_PSTATE_STOPPED);
    CU_ASSERT_EQUAL(kp_state_pstate_from_name("LOG_TRUNCATION"), KP_PSTATE_PREPARING);
    CU_ASSERT_EQUAL(kp_state_pstate_from_name("LOG_ALIGNMENT"), KP_PSTATE_PREPARING);
    CU_ASSERT_EQUAL(kp_state_pstate_from_name("nope"), -2);
    CU_ASSERT_EQUAL(kp_state_pstate_from_name(NULL), -2);
}

/* ---- values ---- */

static int str_same(kp_str_t a, kp_str_t b)
{
    if (a.len != b.len)
        return 0;
    return a.len <= 0 || memcmp(a.ptr, b.ptr, (size_t)a.len) == 0;
}

static void fill_value(kp_state_value_t *v, int16_t type)
{
    static kp_str_t keys[3];
    static kp_state_acl_t acls[2];

    kp_state_value_init(v, type);
    switch (type) {
    case KP_STATE_REC_LAST_MIRROR_EPOCH:
        v->u.lme.last_mirror_epoch = 17;
        v->u.lme.last_mirror_offset = 1234567890123LL;
        v->u.lme.source_cluster_id = kp_str("src-cluster-XYZ");
        v->u.lme.update_time_ms = 1700000000000LL;
        break;
    case KP_STATE_REC_PARTITION_STATE:
        v->u.partition.state = KP_PSTATE_FAILED;
        v->u.partition.state_epoch = 41;
        v->u.partition.leader_epoch = 12;
        v->u.partition.last_mirrored_epoch = 9;
        v->u.partition.last_mirrored_offset = 99999;
        v->u.partition.error_message = kp_str("source topic deleted \xe2\x9c\x97");
        v->u.partition.retry_attempt = 3;
        v->u.partition.non_retryable = true;
        v->u.partition.previous_state = KP_PSTATE_MIRRORING;
        v->u.partition.update_time_ms = 1700000000001LL;
        v->u.partition.source_cluster_id = kp_str("");
        break;
    case KP_STATE_REC_MIRROR:
        v->u.mirror.has_mirror_id = true;
        v->u.mirror.mirror_id = topic1;
        v->u.mirror.creation_time_ms = 1600000000000LL;
        v->u.mirror.source_cluster_id = kp_str("abc");
        v->u.mirror.update_time_ms = 1600000000002LL;
        break;
    case KP_STATE_REC_SYNCED_TOPIC_CONFIGS:
        keys[0] = kp_str("retention.ms");
        keys[1] = kp_str("cleanup.policy");
        keys[2] = kp_str("");
        v->u.topic_configs.topic_name = kp_str("orders");
        v->u.topic_configs.key_cnt = 3;
        v->u.topic_configs.keys = keys;
        v->u.topic_configs.update_time_ms = 5;
        break;
    case KP_STATE_REC_SYNCED_ACLS:
        acls[0] = (kp_state_acl_t){2, kp_str("orders"), 3, kp_str("User:alice"), kp_str("*"), 3, 3};
        acls[1] = (kp_state_acl_t){3, kp_str("grp-"), 4, kp_str("User:bob"), KP_STR_NULL, 2, 2};
        v->u.acls.cnt = 2;
        v->u.acls.v = acls;
        v->u.acls.update_time_ms = 6;
        break;
    default:
        break;
    }
}

static void check_value_equal(const kp_state_value_t *a, const kp_state_value_t *b)
{
    int32_t i;
    CU_ASSERT_EQUAL_FATAL(a->type, b->type);
    switch (a->type) {
    case KP_STATE_REC_LAST_MIRROR_EPOCH:
        CU_ASSERT_EQUAL(a->u.lme.last_mirror_epoch, b->u.lme.last_mirror_epoch);
        CU_ASSERT_EQUAL(a->u.lme.last_mirror_offset, b->u.lme.last_mirror_offset);
        CU_ASSERT(str_same(a->u.lme.source_cluster_id, b->u.lme.source_cluster_id));
        CU_ASSERT_EQUAL(a->u.lme.update_time_ms, b->u.lme.update_time_ms);
        break;
    case KP_STATE_REC_PARTITION_STATE: {
        const kp_state_partition_t *x = &a->u.partition, *y = &b->u.partition;
        CU_ASSERT_EQUAL(x->state, y->state);
        CU_ASSERT_EQUAL(x->state_epoch, y->state_epoch);
        CU_ASSERT_EQUAL(x->leader_epoch, y->leader_epoch);
        CU_ASSERT_EQUAL(x->last_mirrored_epoch, y->last_mirrored_epoch);
        CU_ASSERT_EQUAL(x->last_mirrored_offset, y->last_mirrored_offset);
        CU_ASSERT(str_same(x->error_message, y->error_message));
        CU_ASSERT_EQUAL(x->retry_attempt, y->retry_attempt);
        CU_ASSERT_EQUAL(x->non_retryable, y->non_retryable);
        CU_ASSERT_EQUAL(x->previous_state, y->previous_state);
        CU_ASSERT_EQUAL(x->update_time_ms, y->update_time_ms);
        CU_ASSERT(str_same(x->source_cluster_id, y->source_cluster_id));
        break;
    }
    case KP_STATE_REC_MIRROR:
        CU_ASSERT_EQUAL(a->u.mirror.has_mirror_id, b->u.mirror.has_mirror_id);
        CU_ASSERT(memcmp(a->u.mirror.mirror_id.b, b->u.mirror.mirror_id.b, 16) == 0);
        CU_ASSERT_EQUAL(a->u.mirror.creation_time_ms, b->u.mirror.creation_time_ms);
        CU_ASSERT(str_same(a->u.mirror.source_cluster_id, b->u.mirror.source_cluster_id));
        CU_ASSERT_EQUAL(a->u.mirror.update_time_ms, b->u.mirror.update_time_ms);
        break;
    case KP_STATE_REC_SYNCED_TOPIC_CONFIGS:
        CU_ASSERT(str_same(a->u.topic_configs.topic_name, b->u.topic_configs.topic_name));
        CU_ASSERT_EQUAL_FATAL(a->u.topic_configs.key_cnt, b->u.topic_configs.key_cnt);
        for (i = 0; i < a->u.topic_configs.key_cnt; i++)
            CU_ASSERT(str_same(a->u.topic_configs.keys[i], b->u.topic_configs.keys[i]));
        CU_ASSERT_EQUAL(a->u.topic_configs.update_time_ms, b->u.topic_configs.update_time_ms);
        break;
    case KP_STATE_REC_SYNCED_ACLS:
        CU_ASSERT_EQUAL_FATAL(a->u.acls.cnt, b->u.acls.cnt);
        for (i = 0; i < a->u.acls.cnt; i++) {
            const kp_state_acl_t *x = &a->u.acls.v[i], *y = &b->u.acls.v[i];
            CU_ASSERT_EQUAL(x->resource_type, y->resource_type);
            CU_ASSERT(str_same(x->resource_name, y->resource_name));
            CU_ASSERT_EQUAL(x->pattern_type, y->pattern_type);
            CU_ASSERT(str_same(x->principal, y->principal));
            CU_ASSERT(str_same(x->host, y->host));
            CU_ASSERT_EQUAL(x->operation, y->operation);
            CU_ASSERT_EQUAL(x->permission_type, y->permission_type);
        }
        CU_ASSERT_EQUAL(a->u.acls.update_time_ms, b->u.acls.update_time_ms);
        break;
    default:
        CU_FAIL("unknown type");
    }
}

static void test_value_roundtrip(void)
{
    int16_t t;
    for (t = 1; t <= KP_STATE_REC_MAX; t++) {
        int filled;
        for (filled = 0; filled < 2; filled++) {
            kp_state_value_t v, d;
            kp_writer_t w;
            kp_arena_t ar;
            size_t n;

            if (filled)
                fill_value(&v, t);
            else
                kp_state_value_init(&v, t);
            kp_writer_init(&w);
            kp_arena_init(&ar, 0);
            CU_ASSERT_EQUAL_FATAL(kp_state_value_encode(&w, &v, NULL), 0);
            CU_ASSERT_EQUAL_FATAL(kp_state_value_decode(w.buf, w.len, &ar, &d, NULL, NULL), 0);
            CU_ASSERT_EQUAL(d.format_version, KP_STATE_FORMAT_VERSION);
            CU_ASSERT_EQUAL(d.min_reader_version, KP_STATE_FORMAT_MIN_READER_VERSION);
            check_value_equal(&v, &d);
            /* Decoded strings live in the arena: the input may go away. */
            memset(w.buf, 0xee, w.len);
            check_value_equal(&v, &d);
            /* Every proper prefix of the encoding is rejected. */
            kp_writer_reset(&w);
            CU_ASSERT_EQUAL_FATAL(kp_state_value_encode(&w, &v, NULL), 0);
            for (n = 0; n < w.len; n++) {
                kp_state_value_t x;
                CU_ASSERT_NOT_EQUAL(kp_state_value_decode(w.buf, n, &ar, &x, NULL, NULL), 0);
            }
            kp_arena_free(&ar);
            kp_writer_free(&w);
        }
    }
}

static void test_value_encode_invalid(void)
{
    kp_state_value_t v;
    kp_writer_t w;
    kp_str_t withnul = {"a\0b", 3};
    kp_str_t keys[1] = {{NULL, -1}};

    kp_writer_init(&w);
    kp_state_value_init(&v, 9);
    CU_ASSERT_EQUAL(kp_state_value_encode(&w, &v, NULL), KP_E_UNSUPPORTED);
    kp_state_value_init(&v, KP_STATE_REC_PARTITION_STATE);
    v.u.partition.error_message = withnul;
    CU_ASSERT_EQUAL(kp_state_value_encode(&w, &v, NULL), KP_E_INVALID);
    kp_state_value_init(&v, KP_STATE_REC_SYNCED_TOPIC_CONFIGS);
    v.u.topic_configs.key_cnt = 1;
    v.u.topic_configs.keys = keys; /* a null config key */
    CU_ASSERT_EQUAL(kp_state_value_encode(&w, &v, NULL), KP_E_INVALID);
    v.u.topic_configs.key_cnt = -1;
    CU_ASSERT_EQUAL(kp_state_value_encode(&w, &v, NULL), KP_E_INVALID);
    kp_state_value_init(&v, KP_STATE_REC_SYNCED_ACLS);
    v.u.acls.cnt = 2;
    CU_ASSERT_EQUAL(kp_state_value_encode(&w, &v, NULL), KP_E_INVALID); /* NULL array */
    CU_ASSERT_EQUAL(w.len, 0);
    kp_writer_free(&w);
}

/* ---- hand-made protobuf, to play a newer or broken writer ---- */

static void pb_tag(kp_writer_t *w, uint32_t field, uint32_t wt)
{
    kp_write_uvarlong(w, ((uint64_t)field << 3) | wt);
}

static void pb_varint(kp_writer_t *w, uint32_t field, uint64_t v)
{
    pb_tag(w, field, 0);
    kp_write_uvarlong(w, v);
}

static void pb_bytes(kp_writer_t *w, uint32_t field, const void *p, size_t n)
{
    pb_tag(w, field, 2);
    kp_write_uvarlong(w, n);
    kp_write_raw(w, p, n);
}

static uint64_t zz(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int decode(const kp_writer_t *w, kp_state_value_t *v, kp_arena_t *ar)
{
    return kp_state_value_decode(w->buf, w->len, ar, v, NULL, NULL);
}

static void test_unknown_fields_tolerated(void)
{
    kp_writer_t inner, env;
    kp_state_value_t v;
    kp_arena_t ar;

    kp_writer_init(&inner);
    kp_writer_init(&env);
    kp_arena_init(&ar, 0);
    /* A newer writer's PartitionState: fields we know plus fields 100 (varint), 101 (string),
     * 102 (fixed64) and 103 (fixed32) we do not. */
    pb_varint(&inner, 1, zz(KP_PSTATE_MIRRORING));
    pb_varint(&inner, 100, 12345);
    pb_varint(&inner, 2, 5);
    pb_bytes(&inner, 101, "future", 6);
    pb_tag(&inner, 102, 1);
    kp_write_int64(&inner, 7);
    pb_tag(&inner, 103, 5);
    kp_write_int32(&inner, 7);
    pb_bytes(&inner, 6, "boom", 4);
    /* Envelope: format version 3 (newer), still readable by version 1, unknown field 50. */
    pb_varint(&env, 1, 3);
    pb_varint(&env, 2, 1);
    pb_varint(&env, 50, 1);
    pb_bytes(&env, 17, inner.buf, inner.len);
    CU_ASSERT_EQUAL_FATAL(decode(&env, &v, &ar), 0);
    CU_ASSERT_EQUAL(v.type, KP_STATE_REC_PARTITION_STATE);
    CU_ASSERT_EQUAL(v.format_version, 3);
    CU_ASSERT_EQUAL(v.u.partition.state, KP_PSTATE_MIRRORING);
    CU_ASSERT_EQUAL(v.u.partition.state_epoch, 5);
    CU_ASSERT(kp_str_eq(v.u.partition.error_message, "boom"));
    /* Fields the writer left out take their defaults (an older writer). */
    CU_ASSERT_EQUAL(v.u.partition.leader_epoch, -1);
    CU_ASSERT_EQUAL(v.u.partition.last_mirrored_offset, -1);
    CU_ASSERT_EQUAL(v.u.partition.previous_state, -1);
    CU_ASSERT_EQUAL(v.u.partition.update_time_ms, -1);
    CU_ASSERT_EQUAL(v.u.partition.source_cluster_id.len, -1);
    kp_arena_free(&ar);
    kp_writer_free(&inner);
    kp_writer_free(&env);
}

static void test_envelope_versions(void)
{
    kp_writer_t env, inner;
    kp_state_value_t v;
    kp_arena_t ar;
    const char *why;

    kp_writer_init(&env);
    kp_writer_init(&inner);
    kp_arena_init(&ar, 0);
    pb_varint(&inner, 1, zz(9));

    /* Needs a newer reader. */
    pb_varint(&env, 1, 2);
    pb_varint(&env, 2, 2);
    pb_bytes(&env, 16, inner.buf, inner.len);
    why = NULL;
    CU_ASSERT_EQUAL(kp_state_value_decode(env.buf, env.len, &ar, &v, NULL, &why), KP_E_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(why);
    /* No format version at all / version 0. */
    kp_writer_reset(&env);
    pb_bytes(&env, 16, inner.buf, inner.len);
    CU_ASSERT_EQUAL(decode(&env, &v, &ar), KP_E_CORRUPT);
    kp_writer_reset(&env);
    pb_varint(&env, 1, 0);
    pb_bytes(&env, 16, inner.buf, inner.len);
    CU_ASSERT_EQUAL(decode(&env, &v, &ar), KP_E_CORRUPT);
    /* No min_reader_version: read as 1. */
    kp_writer_reset(&env);
    pb_varint(&env, 1, 1);
    pb_bytes(&env, 16, inner.buf, inner.len);
    CU_ASSERT_EQUAL(decode(&env, &v, &ar), 0);
    CU_ASSERT_EQUAL(v.type, KP_STATE_REC_LAST_MIRROR_EPOCH);
    CU_ASSERT_EQUAL(v.u.lme.last_mirror_epoch, 9);
    CU_ASSERT_EQUAL(v.u.lme.last_mirror_offset, -1);
    CU_ASSERT_EQUAL(v.min_reader_version, 1);
    /* A body of a record type we do not know (oneof member 21). */
    kp_writer_reset(&env);
    pb_varint(&env, 1, 2);
    pb_varint(&env, 2, 1);
    pb_bytes(&env, 21, inner.buf, inner.len);
    CU_ASSERT_EQUAL(decode(&env, &v, &ar), KP_E_UNSUPPORTED);
    /* No body at all. */
    kp_writer_reset(&env);
    pb_varint(&env, 1, 1);
    pb_varint(&env, 2, 1);
    CU_ASSERT_EQUAL(decode(&env, &v, &ar), KP_E_CORRUPT);
    CU_ASSERT_EQUAL(kp_state_value_decode(NULL, 0, &ar, &v, NULL, NULL), KP_E_CORRUPT);
    /* Not protobuf. */
    CU_ASSERT_EQUAL(kp_state_value_decode("\xff\xff\xff", 3, &ar, &v, NULL, NULL), KP_E_CORRUPT);
    /* Out-of-range numbers. */
    kp_writer_reset(&env);
    kp_writer_reset(&inner);
    pb_varint(&inner, 1, zz(300));
    pb_varint(&env, 1, 1);
    pb_bytes(&env, 17, inner.buf, inner.len);
    CU_ASSERT_EQUAL(decode(&env, &v, &ar), KP_E_CORRUPT);
    kp_writer_reset(&env);
    kp_writer_reset(&inner);
    pb_varint(&inner, 7, 70000);
    pb_varint(&env, 1, 1);
    pb_bytes(&env, 17, inner.buf, inner.len);
    CU_ASSERT_EQUAL(decode(&env, &v, &ar), KP_E_CORRUPT);
    /* A mirror id that is not 16 bytes. */
    kp_writer_reset(&env);
    kp_writer_reset(&inner);
    pb_bytes(&inner, 1, "0123456789abcde", 15);
    pb_varint(&env, 1, 1);
    pb_bytes(&env, 18, inner.buf, inner.len);
    CU_ASSERT_EQUAL(decode(&env, &v, &ar), KP_E_CORRUPT);
    kp_arena_free(&ar);
    kp_writer_free(&env);
    kp_writer_free(&inner);
}

static void test_record_parse(void)
{
    kp_state_key_t k = mk_key(KP_STATE_REC_PARTITION_STATE, "mx", 1);
    kp_state_value_t v;
    kp_state_record_t rec;
    kp_writer_t kw, vw;
    kp_arena_t ar;
    kp_bytes_t kb, vb;

    kp_writer_init(&kw);
    kp_writer_init(&vw);
    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL_FATAL(kp_state_key_encode(&kw, &k), 0);
    fill_value(&v, KP_STATE_REC_PARTITION_STATE);
    CU_ASSERT_EQUAL_FATAL(kp_state_value_encode(&vw, &v, NULL), 0);
    kb = (kp_bytes_t){kw.buf, (int32_t)kw.len};
    vb = (kp_bytes_t){vw.buf, (int32_t)vw.len};
    CU_ASSERT_EQUAL(kp_state_record_parse(kb, vb, &ar, &rec, NULL, NULL), 0);
    CU_ASSERT_FALSE(rec.tombstone);
    CU_ASSERT_EQUAL(rec.key.partition, 1);
    check_value_equal(&v, &rec.value);
    /* Tombstone. */
    CU_ASSERT_EQUAL(kp_state_record_parse(kb, KP_BYTES_NULL, &ar, &rec, NULL, NULL), 0);
    CU_ASSERT_TRUE(rec.tombstone);
    CU_ASSERT(kp_str_eq(rec.key.mirror, "mx"));
    /* Key and value of different record types. */
    kp_writer_reset(&vw);
    fill_value(&v, KP_STATE_REC_LAST_MIRROR_EPOCH);
    CU_ASSERT_EQUAL_FATAL(kp_state_value_encode(&vw, &v, NULL), 0);
    vb = (kp_bytes_t){vw.buf, (int32_t)vw.len};
    CU_ASSERT_EQUAL(kp_state_record_parse(kb, vb, &ar, &rec, NULL, NULL), KP_E_CORRUPT);
    /* No key. */
    CU_ASSERT_EQUAL(kp_state_record_parse(KP_BYTES_NULL, vb, &ar, &rec, NULL, NULL), KP_E_CORRUPT);
    kp_arena_free(&ar);
    kp_writer_free(&kw);
    kp_writer_free(&vw);
}

/* ---- allocator hook and limits ---- */

typedef struct {
    long live, total, fail_after;
} count_alloc_t;

static void *count_alloc(void *opaque, size_t n)
{
    count_alloc_t *ca = opaque;
    if (ca->fail_after >= 0 && ca->total >= ca->fail_after)
        return NULL;
    ca->live++;
    ca->total++;
    return malloc(n);
}

static void count_free(void *opaque, void *p)
{
    count_alloc_t *ca = opaque;
    if (p) {
        ca->live--;
        free(p);
    }
}

static void test_alloc_hook(void)
{
    int16_t t;
    for (t = 1; t <= KP_STATE_REC_MAX; t++) {
        count_alloc_t ca = {0, 0, -1};
        kp_alloc_t al = {count_alloc, count_free, &ca};
        kp_state_value_t v, d;
        kp_writer_t w;
        kp_arena_t ar;
        long need, i;

        fill_value(&v, t);
        kp_writer_init(&w);
        kp_arena_init(&ar, 0);
        CU_ASSERT_EQUAL_FATAL(kp_state_value_encode(&w, &v, &al), 0);
        CU_ASSERT_EQUAL_FATAL(kp_state_value_decode(w.buf, w.len, &ar, &d, &al, NULL), 0);
        CU_ASSERT(ca.total > 0);
        CU_ASSERT_EQUAL(ca.live, 0);
        need = ca.total;
        for (i = 0; i < need; i++) {
            count_alloc_t cf = {0, 0, i};
            kp_alloc_t af = {count_alloc, count_free, &cf};
            kp_writer_t w2;
            int rc;
            kp_writer_init(&w2);
            rc = kp_state_value_encode(&w2, &v, &af);
            CU_ASSERT(rc == 0 || rc == KP_E_NOMEM);
            rc = kp_state_value_decode(w.buf, w.len, &ar, &d, &af, NULL);
            CU_ASSERT(rc == 0 || rc == KP_E_CORRUPT); /* protobuf-c reports NOMEM as NULL */
            CU_ASSERT_EQUAL(cf.live, 0);
            kp_writer_free(&w2);
        }
        kp_arena_free(&ar);
        kp_writer_free(&w);
    }
}

static void test_arena_limit(void)
{
    kp_state_value_t v, d;
    kp_writer_t w;
    kp_arena_t ar;

    fill_value(&v, KP_STATE_REC_SYNCED_ACLS);
    kp_writer_init(&w);
    CU_ASSERT_EQUAL_FATAL(kp_state_value_encode(&w, &v, NULL), 0);
    kp_arena_init(&ar, 32);
    CU_ASSERT_EQUAL(kp_state_value_decode(w.buf, w.len, &ar, &d, NULL, NULL), KP_E_NOMEM);
    kp_arena_free(&ar);
    kp_writer_free(&w);
}

int main(void)
{
    CU_pSuite s;
    unsigned failures;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("state_keys", NULL, NULL);
    CU_add_test(s, "golden key bytes", test_key_golden);
    CU_add_test(s, "round trip every record type", test_key_roundtrip_all_types);
    CU_add_test(s, "encode refuses bad keys", test_key_encode_invalid);
    CU_add_test(s, "malformed keys", test_key_malformed);
    CU_add_test(s, "partition placement", test_key_partition);
    CU_add_test(s, "partition state names", test_pstate_names);
    s = CU_add_suite("state_values", NULL, NULL);
    CU_add_test(s, "round trip every record type", test_value_roundtrip);
    CU_add_test(s, "encode refuses bad values", test_value_encode_invalid);
    CU_add_test(s, "unknown future fields are ignored", test_unknown_fields_tolerated);
    CU_add_test(s, "envelope version handling", test_envelope_versions);
    CU_add_test(s, "records and tombstones", test_record_parse);
    CU_add_test(s, "allocator hook and failures", test_alloc_hook);
    CU_add_test(s, "arena limit", test_arena_limit);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failures = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failures ? 1 : 0;
}
