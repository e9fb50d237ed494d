/*
 * sync_groups_test.c - the consumer-group offset sync's decisions (plugin/sync/km_sync_groups.h):
 * which source groups are copied (protocol type, groups.include / groups.exclude), the offset
 * clamped to the destination high watermark, the leader epoch re-stamped only when the
 * destination proves it (never newer than its leader epoch, never failing a consumer's
 * validation), what counts as a change (both directions), and which destination groups may be
 * written (no members, Empty or Dead).
 */
#include <string.h>

#include "core/km_plugin_types.h"
#include "fakehost.h"
#include "fh_cunit.h"
#include "sync/km_sync_groups.h"
#include "util/km_pattern.h"

static fakehost_t *sgt_fh;
static km_plugin_t sgt_cm;

static int sgt_setup(void)
{
    sgt_fh = fakehost_new(NULL);
    if (sgt_fh == NULL)
        return -1;
    memset(&sgt_cm, 0, sizeof(sgt_cm));
    sgt_cm.ref.magic = KM_PLUGIN_MAGIC;
    sgt_cm.ref.api = fakehost_api(sgt_fh);
    sgt_cm.ref.host = fakehost_host(sgt_fh);
    return 0;
}

static int sgt_teardown(void)
{
    char err[512] = "";
    int rc = fakehost_check_clean(sgt_fh, err, sizeof(err));

    if (rc != 0)
        fprintf(stderr, "leftovers: %s\n", err);
    fakehost_free(sgt_fh);
    return rc;
}

static km_pattern_t *sgt_compile(const char *re)
{
    km_pattern_t *p = NULL;
    char err[256];

    CU_ASSERT_EQUAL(km_pattern_compile(&sgt_cm, re, strlen(re), &p, err, sizeof(err)), KM_OK);
    return p;
}

/* 1 selected, 0 not, negative: the error */
static int sgt_sel(km_pattern_t *inc, km_pattern_t *exc, const char *group, const char *ptype)
{
    bool sel = true;
    km_err_t err =
        km_sync_groups_select(inc, exc, group, strlen(group), ptype, strlen(ptype), &sel);

    if (err != KM_OK)
        return err;
    return sel ? 1 : 0;
}

static void sgt_test_select(void)
{
    km_pattern_t *all = sgt_compile(".*");
    km_pattern_t *sg = sgt_compile("sg-.*");
    km_pattern_t *java = sgt_compile("sg-java|other");
    km_pattern_t *evil = sgt_compile("(a+)+$");
    char big[64];

    /* protocol types: classic consumer groups and offset-only groups */
    CU_ASSERT_EQUAL(sgt_sel(all, NULL, "g", "consumer"), 1);
    CU_ASSERT_EQUAL(sgt_sel(all, NULL, "g", ""), 1);
    CU_ASSERT_EQUAL(sgt_sel(all, NULL, "g", "connect"), 0);
    CU_ASSERT_EQUAL(sgt_sel(all, NULL, "g", "share"), 0);
    CU_ASSERT_EQUAL(sgt_sel(all, NULL, "g", "consumers"), 0);
    CU_ASSERT_EQUAL(sgt_sel(all, NULL, "g", "consume"), 0);
    /* no include pattern: every group; an empty group id: none */
    CU_ASSERT_EQUAL(sgt_sel(NULL, NULL, "anything", "consumer"), 1);
    CU_ASSERT_EQUAL(sgt_sel(NULL, NULL, "", "consumer"), 0);
    /* include matches the whole id (Java matches()) */
    CU_ASSERT_EQUAL(sgt_sel(sg, NULL, "sg-rdk", "consumer"), 1);
    CU_ASSERT_EQUAL(sgt_sel(sg, NULL, "xsg-rdk", "consumer"), 0);
    CU_ASSERT_EQUAL(sgt_sel(java, NULL, "sg-java2", "consumer"), 0);
    /* exclude wins */
    CU_ASSERT_EQUAL(sgt_sel(sg, java, "sg-java", "consumer"), 0);
    CU_ASSERT_EQUAL(sgt_sel(sg, java, "sg-rdk", ""), 1);
    CU_ASSERT_EQUAL(sgt_sel(NULL, java, "other", "consumer"), 0);
    /* a runaway pattern is an error, never a silent "no" or "yes" */
    memset(big, 'a', sizeof(big) - 2);
    big[sizeof(big) - 2] = 'b';
    big[sizeof(big) - 1] = '\0';
    CU_ASSERT_EQUAL(sgt_sel(evil, NULL, big, "consumer"), KM_ERR_LIMIT);
    CU_ASSERT_EQUAL(sgt_sel(all, evil, big, "consumer"), KM_ERR_LIMIT);
    km_pattern_free(all);
    km_pattern_free(sg);
    km_pattern_free(java);
    km_pattern_free(evil);
}

static void sgt_test_clamp(void)
{
    CU_ASSERT_EQUAL(km_sync_groups_clamp(120, 300), 120);
    CU_ASSERT_EQUAL(km_sync_groups_clamp(300, 300), 300);
    CU_ASSERT_EQUAL(km_sync_groups_clamp(301, 300), 300); /* not mirrored yet: the HW */
    CU_ASSERT_EQUAL(km_sync_groups_clamp(0, 0), 0);
    CU_ASSERT_EQUAL(km_sync_groups_clamp(5, 0), 0);
    CU_ASSERT_EQUAL(km_sync_groups_clamp(-1, 300), -1); /* no commit on the source */
    CU_ASSERT_EQUAL(km_sync_groups_clamp(100, -1), -1); /* HW unknown: write nothing */
    CU_ASSERT_EQUAL(km_sync_groups_clamp(INT64_MAX, 7), 7);
}

static void sgt_test_epoch(void)
{
    /* proved: the destination has epoch 3 up to offset 150 and leads at epoch 5 */
    CU_ASSERT_EQUAL(km_sync_groups_epoch(3, 120, 5, 3, 150), 3);
    CU_ASSERT_EQUAL(km_sync_groups_epoch(3, 150, 5, 3, 150), 3); /* end offset == offset */
    CU_ASSERT_EQUAL(km_sync_groups_epoch(5, 150, 5, 5, 150), 5); /* == leader epoch */
    /* the epoch ends before the offset: a consumer would see a truncation */
    CU_ASSERT_EQUAL(km_sync_groups_epoch(3, 151, 5, 3, 150), -1);
    /* the destination does not have the epoch (answers another one, or none) */
    CU_ASSERT_EQUAL(km_sync_groups_epoch(4, 120, 5, 3, 150), -1);
    CU_ASSERT_EQUAL(km_sync_groups_epoch(4, 120, 5, -1, -1), -1);
    /* newer than the destination's leader epoch: a consumer would refresh metadata for
     * ever waiting for it; -1 even if an epoch cache answer looked right */
    CU_ASSERT_EQUAL(km_sync_groups_epoch(6, 120, 5, 6, 200), -1);
    CU_ASSERT_EQUAL(km_sync_groups_epoch(3, 120, -1, 3, 150), -1); /* leader epoch unknown */
    /* no epoch committed on the source, or nothing consumed */
    CU_ASSERT_EQUAL(km_sync_groups_epoch(-1, 120, 5, -1, -1), -1);
    CU_ASSERT_EQUAL(km_sync_groups_epoch(3, 0, 5, 3, 150), -1);
}

static void sgt_test_changed(void)
{
    CU_ASSERT_FALSE(km_sync_groups_changed(120, 3, 120, 3));
    CU_ASSERT_TRUE(km_sync_groups_changed(120, 3, -1, -1));  /* nothing there yet */
    CU_ASSERT_TRUE(km_sync_groups_changed(121, 3, 120, 3));  /* forward */
    CU_ASSERT_TRUE(km_sync_groups_changed(50, 3, 120, 3));   /* back: a reset on the source */
    CU_ASSERT_TRUE(km_sync_groups_changed(120, -1, 120, 3)); /* epoch re-stamped */
    CU_ASSERT_TRUE(km_sync_groups_changed(120, 3, 120, -1));
}

static void sgt_test_idle(void)
{
    CU_ASSERT_TRUE(km_sync_groups_idle("Empty", 5, 0));
    CU_ASSERT_TRUE(km_sync_groups_idle("Dead", 4, 0));
    CU_ASSERT_FALSE(km_sync_groups_idle("Empty", 5, 1)); /* members win over the state */
    CU_ASSERT_FALSE(km_sync_groups_idle("Stable", 6, 2));
    CU_ASSERT_FALSE(km_sync_groups_idle("PreparingRebalance", 18, 0));
    CU_ASSERT_FALSE(km_sync_groups_idle("CompletingRebalance", 19, 0));
    CU_ASSERT_FALSE(km_sync_groups_idle("Emptyish", 8, 0));
    CU_ASSERT_FALSE(km_sync_groups_idle("Empt", 4, 0));
    CU_ASSERT_FALSE(km_sync_groups_idle("", 0, 0));
}

static CU_TestInfo sgt_tests[] = {
    {"groups selected: protocol type, include, exclude wins, limits", sgt_test_select},
    {"offsets clamped to the destination high watermark", sgt_test_clamp},
    {"leader epoch kept only when the destination proves it", sgt_test_epoch},
    {"changes in both directions", sgt_test_changed},
    {"only groups without members, Empty or Dead, are written", sgt_test_idle},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo sgt_suites[] = {
    {"sync_groups", sgt_setup, sgt_teardown, NULL, NULL, sgt_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(sgt_suites);
}
