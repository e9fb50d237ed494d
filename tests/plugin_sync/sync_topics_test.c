/*
 * sync_topics_test.c - topic discovery's decision per source topic (plugin/sync/
 * km_sync_topics.h, docs/plugin.md "Topic discovery", docs/design.md M77-M80): a source topic,
 * whether the mirror's filters select it and the destination catalog's topic of that name ->
 * the action.
 */
#include <CUnit/Basic.h>
#include <string.h>

#include "fh_cunit.h"
#include "sync/km_sync_topics.h"

static km_srcadm_topic_t st_src(const char *name, uint8_t id, int32_t parts)
{
    km_srcadm_topic_t s;

    memset(&s, 0, sizeof(s));
    s.name = (char *)name;
    memset(s.id.bytes, id, sizeof(s.id.bytes)); /* id 0: the source gave none */
    s.partitions = parts;
    return s;
}

static km_cat_topic_t st_dst(const char *name, uint8_t id, int32_t parts, const char *mirror,
                             km_desired_t desired)
{
    km_cat_topic_t t;

    memset(&t, 0, sizeof(t));
    t.name = (char *)name;
    memset(t.id.bytes, id, sizeof(t.id.bytes));
    t.partition_count = parts;
    t.mirror = (char *)mirror;
    t.desired = mirror != NULL ? desired : KM_DESIRED_NONE;
    return t;
}

#define ST_EXPECT(want, ...)                                                                       \
    do {                                                                                           \
        km_disc_action_t got_ = km_sync_topics_decide(__VA_ARGS__);                                \
        CU_ASSERT_EQUAL(got_, want);                                                               \
        if (got_ != (want))                                                                        \
            fprintf(stderr, "line %d: %s, want %s\n", __LINE__, km_sync_topics_action_name(got_),  \
                    km_sync_topics_action_name(want));                                             \
    } while (0)

/* Missing on the destination: created only when selected, with an id and partitions. */
static void st_test_missing(void)
{
    km_srcadm_topic_t s = st_src("sd-new", 7, 2);
    km_cat_topic_t empty = st_dst("sd-new", 0, 0, NULL, KM_DESIRED_NONE);

    ST_EXPECT(KM_DISC_CREATE, &s, true, NULL, "msd");
    ST_EXPECT(KM_DISC_CREATE, &s, true, &empty, "msd"); /* no partitions: being deleted */
    ST_EXPECT(KM_DISC_NONE, &s, false, NULL, "msd");    /* not selected (or include "") */
    s = st_src("sd-old", 0, 2);
    ST_EXPECT(KM_DISC_NO_ID, &s, true, NULL, "msd"); /* a source before topic ids */
    ST_EXPECT(KM_DISC_NONE, &s, false, NULL, "msd");
    s = st_src("sd-nop", 7, 0);
    ST_EXPECT(KM_DISC_NONE, &s, true, NULL, "msd"); /* partition count unknown */
}

/* Internal topics and topics the source answered with an error are never acted on. */
static void st_test_never(void)
{
    km_srcadm_topic_t s = st_src("__consumer_offsets", 7, 50);
    km_cat_topic_t d = st_dst("sd-a", 7, 1, "msd", KM_DESIRED_RUNNING);

    ST_EXPECT(KM_DISC_NONE, &s, true, NULL, "msd");
    s = st_src("sd-x", 7, 2);
    s.internal = true;
    ST_EXPECT(KM_DISC_NONE, &s, true, NULL, "msd");
    s = st_src("sd-a", 7, 4);
    s.error_code = 3; /* UNKNOWN_TOPIC_OR_PARTITION */
    ST_EXPECT(KM_DISC_NONE, &s, true, NULL, "msd");
    ST_EXPECT(KM_DISC_NONE, &s, true, &d, "msd");
    ST_EXPECT(KM_DISC_NONE, NULL, true, NULL, "msd");
}

/* This mirror's running topic: grown to the source's count, same id only. */
static void st_test_ours(void)
{
    km_srcadm_topic_t s = st_src("sd-new", 7, 4);
    km_cat_topic_t d = st_dst("sd-new", 7, 2, "msd", KM_DESIRED_RUNNING);

    ST_EXPECT(KM_DISC_GROW, &s, true, &d, "msd");
    /* also a topic started explicitly that the patterns do not select */
    ST_EXPECT(KM_DISC_GROW, &s, false, &d, "msd");
    d.partition_count = 4;
    ST_EXPECT(KM_DISC_NONE, &s, true, &d, "msd");
    d.partition_count = 5;
    ST_EXPECT(KM_DISC_MORE_PARTS, &s, true, &d, "msd");
    /* deleted and re-created on the source: another id, whatever the counts */
    d = st_dst("sd-new", 8, 2, "msd", KM_DESIRED_RUNNING);
    ST_EXPECT(KM_DISC_ID_CHANGED, &s, true, &d, "msd");
    ST_EXPECT(KM_DISC_ID_CHANGED, &s, false, &d, "msd");
    d.partition_count = 4;
    ST_EXPECT(KM_DISC_ID_CHANGED, &s, true, &d, "msd");
    /* the source gives no id: nothing to compare, nothing grown */
    s = st_src("sd-new", 0, 4);
    d = st_dst("sd-new", 7, 2, "msd", KM_DESIRED_RUNNING);
    ST_EXPECT(KM_DISC_NONE, &s, true, &d, "msd");
}

/* Paused, stopped, another mirror's, or a local topic: never touched. */
static void st_test_left_alone(void)
{
    km_srcadm_topic_t s = st_src("sd-new", 7, 4);
    km_cat_topic_t d = st_dst("sd-new", 7, 2, "msd", KM_DESIRED_PAUSED);

    ST_EXPECT(KM_DISC_LEAVE, &s, true, &d, "msd");
    d.desired = KM_DESIRED_STOPPED; /* after a failover: writable, never restarted by a sync */
    ST_EXPECT(KM_DISC_LEAVE, &s, true, &d, "msd");
    d = st_dst("sd-new", 8, 2, "msd", KM_DESIRED_STOPPED);
    ST_EXPECT(KM_DISC_LEAVE, &s, true, &d, "msd"); /* another id, but stopped */
    d = st_dst("sd-new", 7, 2, "other", KM_DESIRED_RUNNING);
    ST_EXPECT(KM_DISC_LEAVE, &s, true, &d, "msd");
    ST_EXPECT(KM_DISC_LEAVE, &s, false, &d, "msd");
    d = st_dst("sd-new", 7, 2, "msdx", KM_DESIRED_RUNNING); /* a prefix is another mirror */
    ST_EXPECT(KM_DISC_LEAVE, &s, true, &d, "msd");
    d = st_dst("sd-new", 7, 2, NULL, KM_DESIRED_NONE);
    ST_EXPECT(KM_DISC_LOCAL, &s, true, &d, "msd");
    ST_EXPECT(KM_DISC_NONE, &s, false, &d, "msd");
    d = st_dst("sd-new", 9, 8, NULL, KM_DESIRED_NONE);
    ST_EXPECT(KM_DISC_LOCAL, &s, true, &d, "msd");
}

static CU_TestInfo st_tests[] = {
    {"missing topics are created when selected", st_test_missing},
    {"internal and erroneous source topics never", st_test_never},
    {"this mirror's running topic: grow, id change, more partitions", st_test_ours},
    {"paused, stopped, other mirror, local: left alone", st_test_left_alone},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo st_suites[] = {
    {"topic discovery decision", NULL, NULL, NULL, NULL, st_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(st_suites);
}
