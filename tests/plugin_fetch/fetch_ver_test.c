/*
 * fetch_ver_test.c - the fetcher's request versions chosen from a source broker's ApiVersions
 * ranges (plugin/fetch/km_fetch_ver.c, design M93): the Apache Kafka releases the mirror must
 * serve (2.1, 2.8, 3.9, 4.x; ranges from docs/plugin.md "Source versions"), the Fetch cap of the
 * test hook, and the refusals with their messages (too old for Fetch, OffsetForLeaderEpoch
 * missing below Fetch v12, Metadata without AllowAutoTopicCreation, an API not advertised, a
 * broker whose minimum is above what we encode).
 */
#include <string.h>

#include "fetch/km_fetch_ver.h"
#include "fh_cunit.h"
#include "kp_errcode.h"
#include "mirror/km_mirror.h"

/* Ranges in the order of KM_FV_*: Fetch, ListOffsets, Metadata, OffsetForLeaderEpoch. */
typedef struct {
    int16_t r[KM_FV_N][2]; /* {min, max}; {-1, -1}: not advertised */
} src_t;

static void mk(const src_t *s, km_fetch_vrange_t out[KM_FV_N])
{
    for (int i = 0; i < KM_FV_N; i++) {
        out[i].known = s->r[i][0] >= 0;
        out[i].min_ver = s->r[i][0];
        out[i].max_ver = s->r[i][1];
    }
}

static bool choose(const src_t *s, int16_t cap, km_fetch_vers_t *v, int *api, char *msg, size_t n)
{
    km_fetch_vrange_t r[KM_FV_N];

    mk(s, r);
    memset(v, 0x7f, sizeof(*v));
    *api = -1;
    return km_fetch_ver_choose(r, 7, cap, v, api, msg, n);
}

static void expect(const src_t *s, int16_t cap, int f, int lo, int md, int oe)
{
    km_fetch_vers_t v;
    char msg[256];
    int api;

    CU_ASSERT_TRUE_FATAL(choose(s, cap, &v, &api, msg, sizeof(msg)));
    CU_ASSERT_EQUAL(v.v[KM_FV_FETCH], f);
    CU_ASSERT_EQUAL(v.v[KM_FV_LIST_OFFSETS], lo);
    CU_ASSERT_EQUAL(v.v[KM_FV_METADATA], md);
    CU_ASSERT_EQUAL(v.v[KM_FV_OFLE], oe);
    CU_ASSERT_EQUAL(api, -1);
    CU_ASSERT_STRING_EQUAL(msg, "");
}

static void refuse(const src_t *s, int16_t cap, int want_api, const char *const *parts)
{
    km_fetch_vers_t v;
    char msg[256];
    int api;

    CU_ASSERT_FALSE_FATAL(choose(s, cap, &v, &api, msg, sizeof(msg)));
    CU_ASSERT_EQUAL(api, want_api);
    for (int i = 0; parts[i] != NULL; i++) {
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, parts[i]));
        if (strstr(msg, parts[i]) == NULL)
            fprintf(stderr, "\n    \"%s\" lacks \"%s\"\n", msg, parts[i]);
    }
}

/* Apache Kafka's advertised ranges (kafka-peers.md §5.1) */
static const src_t K21 = {{{0, 10}, {0, 4}, {0, 7}, {0, 2}}};
static const src_t K28 = {{{0, 12}, {0, 6}, {0, 11}, {0, 4}}};
static const src_t K39 = {{{0, 17}, {0, 9}, {0, 12}, {0, 4}}};
static const src_t K40 = {{{4, 17}, {1, 10}, {0, 13}, {2, 4}}};
static const src_t K43 = {{{4, 18}, {1, 11}, {0, 13}, {2, 4}}};
static const src_t K20 = {{{0, 8}, {0, 3}, {0, 6}, {0, 1}}};

static void test_kafka_releases(void)
{
    expect(&K21, -1, 10, 4, 7, 2);
    expect(&K28, -1, 12, 6, 11, 4);
    expect(&K39, -1, 17, 9, 12, 4);
    expect(&K40, -1, 17, 10, 12, 4);
    expect(&K43, -1, 18, 11, 12, 4);
}

static void test_fetch_cap(void)
{
    /* the test hook: a 4.x source fetched as an old one; OffsetForLeaderEpoch then matters */
    expect(&K43, 11, 11, 11, 12, 4);
    expect(&K43, 4, 4, 11, 12, 4);
    /* below topic ids (a topic without an id) */
    expect(&K43, 12, 12, 11, 12, 4);
    /* a cap above what the source serves changes nothing */
    expect(&K21, 12, 10, 4, 7, 2);
}

static void test_too_old_for_fetch(void)
{
    static const src_t k010 = {{{0, 3}, {0, 1}, {0, 2}, {-1, -1}}};
    static const char *const want[] = {"source broker 7", "serves Fetch v0..3", "v4..18",
                                       "magic 2",         "cannot be mirrored", NULL};
    refuse(&k010, -1, KM_FV_FETCH, want);
}

static void test_fetch_not_advertised(void)
{
    static const src_t s = {{{-1, -1}, {1, 10}, {0, 13}, {2, 4}}};
    static const char *const want[] = {"source broker 7", "does not serve Fetch", "v4..18", NULL};
    refuse(&s, -1, KM_FV_FETCH, want);
}

static void test_ofle_needed_below_v12(void)
{
    /* Kafka 2.0: Fetch v8 is fine, but its OffsetForLeaderEpoch v0..1 has no CurrentLeaderEpoch */
    static const char *const want[] = {"source broker 7", "serves OffsetForLeaderEpoch v0..1",
                                       "Fetch only up to v8", "v2..4", NULL};
    refuse(&K20, -1, KM_FV_OFLE, want);
}

static void test_ofle_not_needed_from_v12(void)
{
    static const src_t s = {{{4, 18}, {1, 11}, {0, 13}, {-1, -1}}};
    static const src_t old = {{{4, 18}, {1, 11}, {0, 13}, {0, 1}}};
    static const char *const want[] = {"does not serve OffsetForLeaderEpoch",
                                       "Fetch only up to v11", NULL};

    expect(&s, -1, 18, 11, 12, -1);
    expect(&old, -1, 18, 11, 12, -1);
    /* capped below v12, the same source must serve it */
    refuse(&s, 11, KM_FV_OFLE, want);
}

static void test_metadata_too_old(void)
{
    static const src_t s = {{{4, 10}, {1, 4}, {0, 3}, {2, 2}}};
    static const char *const want[] = {"serves Metadata v0..3", "v4..12", "auto-creation", NULL};
    refuse(&s, -1, KM_FV_METADATA, want);
}

static void test_list_offsets_v0_only(void)
{
    static const src_t s = {{{4, 10}, {0, 0}, {0, 7}, {2, 2}}};
    static const char *const want[] = {"serves ListOffsets v0..0", "v1..11", NULL};
    refuse(&s, -1, KM_FV_LIST_OFFSETS, want);
}

static void test_source_newer_than_us(void)
{
    /* a future broker that dropped everything we encode */
    static const src_t gone = {{{19, 22}, {1, 12}, {0, 14}, {2, 5}}};
    static const char *const want[] = {"serves Fetch v19..22", "v4..18", NULL};
    /* a future broker that still serves our newest versions */
    static const src_t newer = {{{13, 22}, {5, 12}, {4, 14}, {4, 5}}};

    refuse(&gone, -1, KM_FV_FETCH, want);
    expect(&newer, -1, 18, 11, 12, 4);
}

static void test_needs_table(void)
{
    CU_ASSERT_EQUAL(km_fetch_ver_need(KM_FV_FETCH)->min_ver, 4);
    CU_ASSERT_EQUAL(km_fetch_ver_need(KM_FV_FETCH)->max_ver, 18);
    CU_ASSERT_EQUAL(km_fetch_ver_need(KM_FV_OFLE)->min_ver, 2);
    CU_ASSERT_PTR_NULL(km_fetch_ver_need(-1));
    CU_ASSERT_PTR_NULL(km_fetch_ver_need(KM_FV_N));
}

/* What the partition state machine makes of the fetcher's FATAL codes (plugin/mirror). */
static void test_failed_not_retryable(void)
{
    CU_ASSERT_FALSE(km_mirror_fatal_retryable(KP_ERR_UNSUPPORTED_VERSION));
    CU_ASSERT_FALSE(km_mirror_fatal_retryable(KP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT));
    CU_ASSERT_FALSE(km_mirror_fatal_retryable(KP_ERR_INCONSISTENT_CLUSTER_ID));
    CU_ASSERT_FALSE(km_mirror_fatal_retryable(KP_ERR_INCONSISTENT_TOPIC_ID));
    CU_ASSERT_TRUE(km_mirror_fatal_retryable(-1)); /* e.g. the destination refused a batch */
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"kafka_releases", test_kafka_releases},
        {"fetch_cap", test_fetch_cap},
        {"too_old_for_fetch", test_too_old_for_fetch},
        {"fetch_not_advertised", test_fetch_not_advertised},
        {"ofle_needed_below_v12", test_ofle_needed_below_v12},
        {"ofle_not_needed_from_v12", test_ofle_not_needed_from_v12},
        {"metadata_too_old", test_metadata_too_old},
        {"list_offsets_v0_only", test_list_offsets_v0_only},
        {"source_newer_than_us", test_source_newer_than_us},
        {"needs_table", test_needs_table},
        {"failed_not_retryable", test_failed_not_retryable},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"fetch_ver", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

    return fh_cunit_run(suites);
}
