/*
 * test_grec.c -- __consumer_offsets record layouts and the group -> partition mapping
 * (broker/group/kb_grec.h), checked against bytes and hash values produced by Apache Kafka 4.4's
 * own classes (OffsetCommitKey/Value, GroupMetadataValue, String.hashCode). Label: unit.
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_grec.h"
#include "kp_writer.h"

/* Hex of the bytes Kafka 4.4 writes (MessageUtil.toVersionPrefixedBytes). */
#define KAFKA_OCV4_TOPICID                                                                         \
    "0004000000000000000500000003026d00000000000003e801001001020304050607081112131415161718"
#define KAFKA_OCV4_PLAIN "0004000000000000000500000003026d00000000000003e800"
#define KAFKA_OCKEY      "000100016700017400000007"
#define KAFKA_GMV3                                                                                 \
    "00030008636f6e73756d657200000002000572616e676500026d3100000000000004d20000000100026d31ffff00" \
    "0163000a2f3132372e302e302e31000493e00000afc80000000201020000000103"

static size_t unhex(const char *hex, uint8_t *out)
{
    size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
    return n;
}

static void check_bytes(const kp_writer_t *wr, const char *hex)
{
    uint8_t want[512];
    size_t n = unhex(hex, want);
    CU_ASSERT_EQUAL_FATAL(wr->err, 0);
    CU_ASSERT_EQUAL(wr->len, n);
    CU_ASSERT(wr->len == n && memcmp(wr->buf, want, n) == 0);
}

static void test_java_hash(void)
{
    static const struct {
        const char *s;
        int32_t h;
    } v[] = {
        {"", 0},
        {"Aa", 2112},
        {"BB", 2112},
        {"test-group", 627841412},
        {"console-consumer-12345", 158455506},
        {"\xc3\xa9t\xc3\xa9", 227742},  /* "été" */
        {"g\xf0\x9f\x98\x80", 1871882}, /* "g" + U+1F600 (a surrogate pair in UTF-16) */
        {"polygenelubricants", INT32_MIN},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        CU_ASSERT_EQUAL(kb_grec_java_hash(v[i].s, strlen(v[i].s)), v[i].h);
    /* abs(INT32_MIN) is 0 in Kafka's Utils.abs */
    CU_ASSERT_EQUAL(kb_grec_partition_for("polygenelubricants", 18, 50), 0);
    CU_ASSERT_EQUAL(kb_grec_partition_for("test-group", 10, 50), 627841412 % 50);
    CU_ASSERT_EQUAL(kb_grec_partition_for("", 0, 50), 0);
    /* malformed UTF-8 hashes as U+FFFD per maximal ill-formed subpart */
    CU_ASSERT_EQUAL(kb_grec_java_hash("\xff", 1), 0xFFFD);
    CU_ASSERT_EQUAL(kb_grec_java_hash("\xe2\x82", 2), 0xFFFD);
    CU_ASSERT_EQUAL(kb_grec_java_hash("\xe2\x82"
                                      "a",
                                      3),
                    31 * 0xFFFD + 'a');
    CU_ASSERT_EQUAL(kb_grec_java_hash("\xc0\xaf", 2), 31 * 0xFFFD + 0xFFFD);
}

static void test_offset_records(void)
{
    kp_writer_t wr;
    kb_grec_offset_t v = {.offset = 5, .leader_epoch = 3, .commit_ts = 1000, .expire_ts = -1};
    kb_grec_offset_t d;
    kb_grec_key_t k;
    uint8_t buf[256];
    size_t n;
    static const uint8_t id[16] = {1,    2,    3,    4,    5,    6,    7,    8,
                                   0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18};

    v.metadata = kp_str("m");
    kp_writer_init(&wr);
    kb_grec_offset_value_write(&wr, &v);
    check_bytes(&wr, KAFKA_OCV4_PLAIN);
    kp_writer_reset(&wr);
    memcpy(v.topic_id.b, id, 16);
    kb_grec_offset_value_write(&wr, &v);
    check_bytes(&wr, KAFKA_OCV4_TOPICID);
    CU_ASSERT_EQUAL(kb_grec_offset_value_decode(wr.buf, wr.len, &d), 0);
    CU_ASSERT_EQUAL(d.offset, 5);
    CU_ASSERT_EQUAL(d.leader_epoch, 3);
    CU_ASSERT(kp_str_eq(d.metadata, "m"));
    CU_ASSERT_EQUAL(d.commit_ts, 1000);
    CU_ASSERT_EQUAL(d.expire_ts, -1);
    CU_ASSERT(memcmp(d.topic_id.b, id, 16) == 0);
    /* trailing garbage and truncation are refused */
    memcpy(buf, wr.buf, wr.len);
    buf[wr.len] = 0;
    CU_ASSERT_EQUAL(kb_grec_offset_value_decode(buf, wr.len + 1, &d), -1);
    CU_ASSERT_EQUAL(kb_grec_offset_value_decode(buf, wr.len - 1, &d), -1);

    /* every older version round-trips; v1 carries the expire timestamp */
    v.expire_ts = 99999;
    for (int16_t ver = 0; ver <= 4; ver++) {
        kp_writer_reset(&wr);
        kb_grec_offset_value_write_v(&wr, &v, ver);
        CU_ASSERT_EQUAL_FATAL(kb_grec_offset_value_decode(wr.buf, wr.len, &d), 0);
        CU_ASSERT_EQUAL(d.offset, 5);
        CU_ASSERT_EQUAL(d.leader_epoch, ver >= 3 ? 3 : -1);
        CU_ASSERT_EQUAL(d.expire_ts, ver == 1 ? 99999 : -1);
        CU_ASSERT(kp_str_eq(d.metadata, "m"));
    }
    /* with an expire timestamp Kafka writes version 1 */
    kp_writer_reset(&wr);
    kb_grec_offset_value_write(&wr, &v);
    CU_ASSERT(wr.len > 2 && wr.buf[0] == 0 && wr.buf[1] == 1);
    buf[0] = 0;
    buf[1] = 5; /* unknown value version */
    CU_ASSERT_EQUAL(kb_grec_offset_value_decode(buf, 2, &d), -1);

    kp_writer_reset(&wr);
    kb_grec_offset_key_write(&wr, "g", "t", 7);
    check_bytes(&wr, KAFKA_OCKEY);
    CU_ASSERT_EQUAL(kb_grec_key_decode(wr.buf, wr.len, &k), 0);
    CU_ASSERT_EQUAL(k.type, KB_GREC_KEY_OFFSET);
    CU_ASSERT(kp_str_eq(k.group, "g") && kp_str_eq(k.topic, "t") && k.partition == 7);
    kp_writer_reset(&wr);
    kb_grec_group_key_write(&wr, "grp");
    CU_ASSERT_EQUAL(kb_grec_key_decode(wr.buf, wr.len, &k), 0);
    CU_ASSERT_EQUAL(k.type, KB_GREC_KEY_GROUP);
    CU_ASSERT(kp_str_eq(k.group, "grp"));
    n = unhex("0003000167", buf); /* a KIP-848 record key: skipped, not an error */
    CU_ASSERT_EQUAL(kb_grec_key_decode(buf, n, &k), 0);
    CU_ASSERT_EQUAL(k.type, KB_GREC_KEY_OTHER);
    CU_ASSERT_EQUAL(kb_grec_key_decode(buf, 1, &k), -1);
    kp_writer_free(&wr);
}

static void test_group_records(void)
{
    static const uint8_t sub[] = {1, 2}, asg[] = {3};
    kb_grec_member_t m = {
        .member_id = kp_str("m1"),
        .instance_id = KP_STR_NULL,
        .client_id = kp_str("c"),
        .client_host = kp_str("/127.0.0.1"),
        .rebalance_timeout = 300000,
        .session_timeout = 45000,
        .subscription = {sub, 2},
        .assignment = {asg, 1},
    };
    kb_grec_group_t g = {.protocol_type = kp_str("consumer"),
                         .generation = 2,
                         .protocol = kp_str("range"),
                         .leader = kp_str("m1"),
                         .state_ts = 1234,
                         .member_cnt = 1,
                         .members = &m};
    kb_grec_group_t d;
    kp_writer_t wr;
    kp_writer_init(&wr);
    kb_grec_group_value_write(&wr, &g);
    check_bytes(&wr, KAFKA_GMV3);
    for (int16_t ver = 0; ver <= 4; ver++) {
        kp_writer_reset(&wr);
        m.instance_id = kp_str("inst");
        kb_grec_group_value_write_v(&wr, &g, ver);
        CU_ASSERT_EQUAL_FATAL(kb_grec_group_value_decode(wr.buf, wr.len, &d), 0);
        CU_ASSERT(kp_str_eq(d.protocol_type, "consumer"));
        CU_ASSERT_EQUAL(d.generation, 2);
        CU_ASSERT(kp_str_eq(d.protocol, "range") && kp_str_eq(d.leader, "m1"));
        CU_ASSERT_EQUAL(d.state_ts, ver >= 2 ? 1234 : -1);
        CU_ASSERT_EQUAL_FATAL(d.member_cnt, 1);
        CU_ASSERT(kp_str_eq(d.members[0].member_id, "m1"));
        CU_ASSERT(ver >= 3 ? kp_str_eq(d.members[0].instance_id, "inst")
                           : d.members[0].instance_id.len == -1);
        CU_ASSERT_EQUAL(d.members[0].session_timeout, 45000);
        CU_ASSERT_EQUAL(d.members[0].rebalance_timeout, ver >= 1 ? 300000 : 45000);
        CU_ASSERT(d.members[0].subscription.len == 2 && d.members[0].assignment.len == 1);
        free(d.members);
    }
    /* an empty group with null protocol and leader, as written when a group becomes empty */
    g.protocol = KP_STR_NULL;
    g.leader = KP_STR_NULL;
    g.member_cnt = 0;
    kp_writer_reset(&wr);
    kb_grec_group_value_write(&wr, &g);
    CU_ASSERT_EQUAL(kb_grec_group_value_decode(wr.buf, wr.len, &d), 0);
    CU_ASSERT(d.protocol.len == -1 && d.leader.len == -1 && d.member_cnt == 0 && !d.members);
    /* a member count larger than the bytes can hold is refused before allocating */
    kp_writer_reset(&wr);
    kb_grec_group_value_write(&wr, &g);
    wr.buf[wr.len - 1] = 0x7f;
    CU_ASSERT_EQUAL(kb_grec_group_value_decode(wr.buf, wr.len, &d), -1);
    free(d.members);
    kp_writer_free(&wr);
}

int main(void)
{
    CU_pSuite s;
    unsigned failed;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("grec", NULL, NULL);
    CU_add_test(s, "java String.hashCode and partitionFor", test_java_hash);
    CU_add_test(s, "offset commit key and value (Kafka 4.4 bytes)", test_offset_records);
    CU_add_test(s, "group metadata value (Kafka 4.4 bytes)", test_group_records);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
