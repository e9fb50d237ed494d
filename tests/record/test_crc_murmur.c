/* CRC32C known vectors, hardware/software agreement; murmur2 against the Java client. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "kp_crc32c.h"
#include "kp_murmur2.h"
#include "record_tests.h"

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

/* RFC 3720 (iSCSI) appendix B.4 vectors and the usual "123456789" check value. */
static void check_vectors(crc_fn fn)
{
    uint8_t buf[32];
    int i;

    CU_ASSERT_EQUAL(fn(0, "123456789", 9), 0xe3069283u);
    CU_ASSERT_EQUAL(fn(0, "", 0), 0u);
    CU_ASSERT_EQUAL(fn(0, "a", 1), 0xc1d04330u);
    memset(buf, 0, sizeof(buf));
    CU_ASSERT_EQUAL(fn(0, buf, 32), 0x8a9136aau);
    memset(buf, 0xff, sizeof(buf));
    CU_ASSERT_EQUAL(fn(0, buf, 32), 0x62a8ab43u);
    for (i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    CU_ASSERT_EQUAL(fn(0, buf, 32), 0x46dd794eu);
    for (i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    CU_ASSERT_EQUAL(fn(0, buf, 32), 0x113fdb5cu);
    /* Chaining: the value returned continues the computation. */
    CU_ASSERT_EQUAL(fn(fn(0, "1234", 4), "56789", 5), 0xe3069283u);
}

static void test_crc_sw_vectors(void)
{
    check_vectors(kp_crc32c_sw);
}

static void test_crc_hw_vectors(void)
{
    if (!kp_crc32c_hw_available()) {
        CU_PASS("no SSE4.2 on this CPU; hardware path not testable");
        return;
    }
    check_vectors(kp_crc32c_hw);
}

static void test_crc_dispatch(void)
{
    bool hw = kp_crc32c_hw_available();
    const char *env = getenv("KP_CRC32C_FORCE_SW");

    if (env && strcmp(env, "1") == 0)
        CU_ASSERT_FALSE(kp_crc32c_uses_hw());
    check_vectors(kp_crc32c);
    kp_crc32c_force_sw(true);
    CU_ASSERT_FALSE(kp_crc32c_uses_hw());
    check_vectors(kp_crc32c);
    kp_crc32c_force_sw(false);
    CU_ASSERT_EQUAL(kp_crc32c_uses_hw(), hw);
    check_vectors(kp_crc32c);
    if (env && strcmp(env, "1") == 0)
        kp_crc32c_force_sw(true); /* leave the mode this run asked for */
}

/* Random lengths and misaligned starts: both paths and the chained form must agree. */
static void test_crc_hw_sw_random(void)
{
    uint64_t seed = 0x1234567u;
    size_t cap = 70000;
    uint8_t *buf = malloc(cap);
    int i;

    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    rt_fill(buf, cap, &seed, 0);
    for (i = 0; i < 2000; i++) {
        size_t off = rt_rand(&seed) % 16;
        size_t len = i < 100 ? (size_t)i : rt_rand(&seed) % (i % 50 == 0 ? cap - 16 : 600);
        size_t cut = len ? rt_rand(&seed) % (len + 1) : 0;
        uint32_t sw = kp_crc32c_sw(0, buf + off, len);
        CU_ASSERT_EQUAL(kp_crc32c_sw(kp_crc32c_sw(0, buf + off, cut), buf + off + cut, len - cut),
                        sw);
        if (kp_crc32c_hw_available()) {
            CU_ASSERT_EQUAL(kp_crc32c_hw(0, buf + off, len), sw);
            CU_ASSERT_EQUAL(
                kp_crc32c_hw(kp_crc32c_hw(0, buf + off, cut), buf + off + cut, len - cut), sw);
        }
        CU_ASSERT_EQUAL(kp_crc32c(0, buf + off, len), sw);
    }
    /* Around the hardware path's 3 x 1024-byte lane rounds, at every alignment. */
    if (kp_crc32c_hw_available()) {
        static const size_t lens[] = {3071, 3072, 3073, 3079, 3080, 6143, 6144, 6151, 9216, 65536};
        size_t li, off;
        for (li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
            for (off = 0; off < 8; off++)
                CU_ASSERT_EQUAL(kp_crc32c_hw(0x5a5a5a5au, buf + off, lens[li]),
                                kp_crc32c_sw(0x5a5a5a5au, buf + off, lens[li]));
    }
    free(buf);
}

/* Values computed with org.apache.kafka.common.utils.Utils.murmur2() from kafka-clients 4.4.0
 * (UTF-8 bytes of the string), and toPositive(h) % 50. */
static const struct {
    const char *key;
    int32_t hash;
    int32_t part50;
} murmur2_java[] = {
    {"", 275646681, 31},
    {"a", -1563381124, 24},
    {"ab", 316155434, 34},
    {"abc", 479470107, 7},
    {"abcd", -1323649548, 0},
    {"abcde", 461995741, 41},
    {"kafka", -798503068, 30},
    {"mirror-1", 969914774, 24},
    {"__mirror_state", -1884038613, 35},
    {"The quick brown fox jumps over the lazy dog", 495243318, 18},
    {"\xc3\xa9t\xc3\xa9", -2101193575, 23},
    {"0123456789abcdef0", 1856781438, 38},
};

static void test_murmur2_java(void)
{
    size_t i;
    uint8_t bin[256];

    for (i = 0; i < sizeof(murmur2_java) / sizeof(murmur2_java[0]); i++) {
        const char *k = murmur2_java[i].key;
        CU_ASSERT_EQUAL(kp_murmur2(k, strlen(k)), murmur2_java[i].hash);
        CU_ASSERT_EQUAL(kp_murmur2_partition(k, strlen(k), 50), murmur2_java[i].part50);
    }
    /* Bytes 0, 1, 2, ... (every byte value, high bit included). */
    for (i = 0; i < 256; i++)
        bin[i] = (uint8_t)i;
    CU_ASSERT_EQUAL(kp_murmur2(bin, 7), -1488168820);
    CU_ASSERT_EQUAL(kp_murmur2(bin, 255), 1542706800);
    CU_ASSERT_EQUAL(kp_murmur2(bin, 256), -1948347274);
    CU_ASSERT_EQUAL(kp_murmur2_partition(bin, 7, 50), 28);
    CU_ASSERT_EQUAL(kp_murmur2_partition(bin, 255, 50), 0);
    CU_ASSERT_EQUAL(kp_murmur2_partition(bin, 256, 50), 24);
}

static void test_murmur2_partition_edges(void)
{
    CU_ASSERT_EQUAL(kp_murmur2_partition("a", 1, 0), -1);
    CU_ASSERT_EQUAL(kp_murmur2_partition("a", 1, -3), -1);
    CU_ASSERT_EQUAL(kp_murmur2_partition("a", 1, 1), 0);
    CU_ASSERT_EQUAL(kp_murmur2_to_positive(INT32_MIN), 0);
    CU_ASSERT_EQUAL(kp_murmur2_to_positive(-1), INT32_MAX);
    CU_ASSERT_EQUAL(kp_murmur2_to_positive(5), 5);
}

void record_suite_crc_murmur(void)
{
    CU_pSuite s = CU_add_suite("crc32c_murmur2", NULL, NULL);
    CU_add_test(s, "crc32c software vectors", test_crc_sw_vectors);
    CU_add_test(s, "crc32c hardware vectors", test_crc_hw_vectors);
    CU_add_test(s, "crc32c dispatch and forcing", test_crc_dispatch);
    CU_add_test(s, "crc32c hw == sw on random data", test_crc_hw_sw_random);
    CU_add_test(s, "murmur2 vs Java client", test_murmur2_java);
    CU_add_test(s, "murmur2 partition edges", test_murmur2_partition_edges);
}
