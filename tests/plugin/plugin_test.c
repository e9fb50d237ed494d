/*
 * plugin_test.c - the plugin's lifecycle against the fake host: start/stop, shutdown order
 * and draining, two instances in one process, every allocation failing in turn during init,
 * allocation failure in a host callback, host tables lacking members, KM_BUG_ON.
 */
#include <setjmp.h>
#include <string.h>

#include "coord/km_coord.h"
#include "core/km_plugin.h"
#include "core/km_plugin_types.h"
#include "fakehost.h"
#include "fh_cunit.h"
#include "util/km_log.h"

/* Queue ops per host event: the coordinator's own op and the catalog's copy (catalog/). */
#define PT_OPS (2)

static const kbx_uuid_t PT_T1 = {{0xa1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};

static fakehost_t *pt_host(void)
{
    fakehost_t *fh = fakehost_new(NULL);

    CU_ASSERT_PTR_NOT_NULL_FATAL(fh);
    fakehost_config_set(fh, "mirror.enable", "true");
    return fh;
}

static int32_t pt_init(fakehost_t *fh, void **ctx, char *err, size_t n)
{
    const kbx_plugin_desc_t *desc = kbx_plugin_entry();

    return desc->init(fakehost_api(fh), fakehost_host(fh), ctx, err, n);
}

static void pt_test_descriptor(void)
{
    const kbx_plugin_desc_t *desc = kbx_plugin_entry();

    CU_ASSERT_EQUAL(desc->struct_size, sizeof(kbx_plugin_desc_t));
    CU_ASSERT_EQUAL(desc->abi_major, KBX_ABI_MAJOR);
    CU_ASSERT_EQUAL(desc->abi_minor, KBX_ABI_MINOR);
    CU_ASSERT_STRING_EQUAL(desc->name, "kmirror");
    CU_ASSERT_PTR_NOT_NULL(desc->version);
    CU_ASSERT_PTR_NOT_NULL(desc->build_id);
}

static void pt_test_lifecycle(void)
{
    fakehost_t *fh = pt_host();
    void *ctx = NULL;
    km_plugin_t *cm;
    uint64_t done;
    char err[256] = "";

    CU_ASSERT_EQUAL(fakehost_partition_add(fh, &PT_T1, "orders", 0, 3, true, KBX_WRITE_PENDING), 0);
    CU_ASSERT_EQUAL_FATAL(pt_init(fh, &ctx, err, sizeof(err)), 0);
    cm = ctx;
    CU_ASSERT_EQUAL(cm->ref.magic, KM_PLUGIN_MAGIC);
    CU_ASSERT_EQUAL(cm->broker_id, 1);
    CU_ASSERT_STRING_EQUAL(cm->cluster_id, "fake-cluster");
    CU_ASSERT_EQUAL(fakehost_thread_count(fh), 2); /* coordinator loop, source admin client */
    CU_ASSERT_EQUAL(fakehost_listener_count(fh), 2);
    CU_ASSERT_TRUE(fakehost_metric_count(fh) >= 2); /* the coordinator's and the modules' */
    fakehost_run_until_idle(fh);
    /* metadata and leadership snapshots (modules may post closures of their own for them) */
    CU_ASSERT_TRUE(cm->coord.ops_done >= 2);
    CU_ASSERT_EQUAL(cm->coord.leader_partitions_seen, 1);
    done = cm->coord.ops_done;
    /* A leadership change reaches the coordinator through its queue. */
    fakehost_partition_set_leader(fh, &PT_T1, 0, 4, true);
    CU_ASSERT_EQUAL(cm->coord.ops_done, done); /* only enqueued so far */
    fakehost_run_until_idle(fh);
    CU_ASSERT_TRUE(cm->coord.ops_done > done);
    CU_ASSERT_EQUAL(cm->coord.leader_partitions_seen, 2);
    done = cm->coord.ops_done;
    /* The loop wakes on its tick without work and keeps waiting. */
    fakehost_advance_ms(fh, 10 * KM_COORD_TICK_MS);
    CU_ASSERT_EQUAL(cm->coord.ops_done, done);
    kbx_plugin_entry()->fini(ctx);
    fh_cunit_assert_clean(fh);
    fakehost_free(fh);
}

/* fini drains what is queued before it joins the loop (shutdown steps 2 and 3). */
static void pt_test_fini_drains(void)
{
    fakehost_t *fh = pt_host();
    kbx_metadata_delta_t d = {.struct_size = sizeof(d), .metadata_offset = 41};
    void *ctx = NULL;
    char err[256];
    int i;

    CU_ASSERT_EQUAL_FATAL(pt_init(fh, &ctx, err, sizeof(err)), 0);
    fakehost_run_until_idle(fh);
    for (i = 0; i < 3; i++)
        fakehost_publish_delta(fh, &d);
    CU_ASSERT_EQUAL(((km_plugin_t *)ctx)->coord.queued, 3 * PT_OPS);
    CU_ASSERT_FALSE(fakehost_log_contains(fh, "metadata delta at offset 41"));
    kbx_plugin_entry()->fini(ctx);
    CU_ASSERT_TRUE(fakehost_log_contains(fh, "metadata delta at offset 41"));
    fh_cunit_assert_clean(fh);
    fakehost_free(fh);
}

/* km_coord_post: closures run on the loop in FIFO order; one that can no longer run is dropped. */
typedef struct pt_post {
    int ran;
    int dropped;
    int order[4];
    bool on_loop;
} pt_post_t;

static void pt_post_run(km_plugin_t *cm, void *arg)
{
    pt_post_t *p = arg;

    p->on_loop = km_coord_on_loop(&cm->coord);
    p->order[p->ran < 4 ? p->ran : 3] = p->ran + p->dropped;
    p->ran++;
}

static void pt_post_drop(km_plugin_t *cm, void *arg)
{
    (void)cm;
    ((pt_post_t *)arg)->dropped++;
}

static void pt_test_post(void)
{
    fakehost_t *fh = pt_host();
    pt_post_t p = {0};
    void *ctx = NULL;
    km_plugin_t *cm;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(pt_init(fh, &ctx, err, sizeof(err)), 0);
    cm = ctx;
    fakehost_run_until_idle(fh);
    CU_ASSERT_EQUAL(km_coord_post(&cm->coord, NULL, pt_post_drop, &p), KM_ERR_INVALID);
    CU_ASSERT_EQUAL(km_coord_post(&cm->coord, pt_post_run, pt_post_drop, &p), KM_OK);
    CU_ASSERT_EQUAL(km_coord_post(&cm->coord, pt_post_run, pt_post_drop, &p), KM_OK);
    CU_ASSERT_EQUAL(p.ran, 0); /* queued, not run on the caller's thread */
    fakehost_run_until_idle(fh);
    CU_ASSERT_EQUAL(p.ran, 2);
    CU_ASSERT_EQUAL(p.dropped, 0);
    CU_ASSERT_TRUE(p.on_loop);
    CU_ASSERT_EQUAL(p.order[0], 0);
    CU_ASSERT_EQUAL(p.order[1], 1);
    /* Queued before fini: fini drains it, so it runs. */
    CU_ASSERT_EQUAL(km_coord_post(&cm->coord, pt_post_run, pt_post_drop, &p), KM_OK);
    km_coord_stop(&cm->coord);
    CU_ASSERT_EQUAL(p.ran, 3);
    /* After the queue closed: dropped, never run, nothing leaked. */
    CU_ASSERT_EQUAL(km_coord_post(&cm->coord, pt_post_run, pt_post_drop, &p), KM_ERR_SHUTDOWN);
    CU_ASSERT_EQUAL(p.ran, 3);
    CU_ASSERT_EQUAL(p.dropped, 1);
    /* fini's own km_coord_stop finds the loop joined already (a no-op). */
    kbx_plugin_entry()->fini(ctx);
    CU_ASSERT_EQUAL(p.ran, 3);
    CU_ASSERT_EQUAL(p.dropped, 1);
    fh_cunit_assert_clean(fh);
    fakehost_free(fh);
}

static void pt_test_two_instances(void)
{
    fakehost_t *a = pt_host(), *b = pt_host();
    kbx_metadata_delta_t d = {.struct_size = sizeof(d)};
    void *ca = NULL, *cb = NULL;
    char err[256];

    fakehost_config_set(b, "mirror.state.topic.num.partitions", "3");
    CU_ASSERT_EQUAL_FATAL(pt_init(a, &ca, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(pt_init(b, &cb, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(((km_plugin_t *)ca)->conf.state_topic_num_partitions, 50);
    CU_ASSERT_EQUAL(((km_plugin_t *)cb)->conf.state_topic_num_partitions, 3);
    fakehost_run_until_idle(a);
    fakehost_run_until_idle(b);
    fakehost_publish_delta(b, &d);
    fakehost_run_until_idle(b);
    CU_ASSERT_EQUAL(((km_plugin_t *)ca)->coord.ops_done, 2 * PT_OPS);
    CU_ASSERT_EQUAL(((km_plugin_t *)cb)->coord.ops_done, 3 * PT_OPS);
    /* Stop them in the other order than they started; each host sees only its own. */
    kbx_plugin_entry()->fini(cb);
    fh_cunit_assert_clean(b);
    CU_ASSERT_EQUAL(fakehost_thread_count(a), 2);
    kbx_plugin_entry()->fini(ca);
    fh_cunit_assert_clean(a);
    fakehost_free(a);
    fakehost_free(b);
}

/* Make allocation number n (0-based) of init fail, for every n until init needs no more. */
static void pt_alloc_countdown(bool sticky)
{
    int64_t n;
    uint64_t failed_before;
    void *ctx;
    char err[256];
    int32_t rc;

    for (n = 0;; n++) {
        fakehost_t *fh = pt_host();

        fakehost_fail_alloc(fh, n, sticky);
        ctx = NULL;
        err[0] = '\0';
        failed_before = fakehost_alloc_failures(fh);
        rc = pt_init(fh, &ctx, err, sizeof(err));
        if (rc != 0) {
            CU_ASSERT(rc < 0);
            CU_ASSERT_PTR_NULL(ctx);
            CU_ASSERT(err[0] != '\0');
            CU_ASSERT(fakehost_alloc_failures(fh) > failed_before);
            fh_cunit_assert_clean(fh);
            fakehost_free(fh);
            CU_ASSERT_FATAL(n < 10000);
            continue;
        }
        /* init succeeded: it made fewer than n + 1 allocations, or survived the failure. */
        fakehost_run_until_idle(fh);
        kbx_plugin_entry()->fini(ctx);
        fh_cunit_assert_clean(fh);
        if (fakehost_alloc_failures(fh) == 0) {
            fakehost_free(fh);
            break;
        }
        fakehost_free(fh);
    }
    CU_ASSERT(n >= 5); /* config strings, regex contexts, coordinator: several points */
}

static void pt_test_alloc_countdown(void)
{
    pt_alloc_countdown(false);
}

static void pt_test_alloc_countdown_sticky(void)
{
    pt_alloc_countdown(true);
}

/* An allocation failure inside a host callback drops the event and is reported. */
static void pt_test_alloc_failure_in_callback(void)
{
    fakehost_t *fh = pt_host();
    kbx_metadata_delta_t d = {.struct_size = sizeof(d)};
    void *ctx = NULL;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(pt_init(fh, &ctx, err, sizeof(err)), 0);
    fakehost_run_until_idle(fh);
    fakehost_fail_alloc(fh, 0, false);
    fakehost_publish_delta(fh, &d);
    fakehost_run_until_idle(fh); /* not woken: nothing queued */
    fakehost_advance_ms(fh, KM_COORD_TICK_MS);
    CU_ASSERT_TRUE(fakehost_log_contains(fh, "1 metadata events were lost"));
    kbx_plugin_entry()->fini(ctx);
    fh_cunit_assert_clean(fh);
    fakehost_free(fh);
}

static void pt_test_host_tables(void)
{
    fakehost_t *fh = pt_host();
    kbx_api_t *api = fakehost_api_mut(fh);
    void *ctx = NULL;
    char err[256];

    /* A 1.0 table cut short before its last member. */
    api->struct_size = (uint32_t)offsetof(kbx_api_t, authorize);
    CU_ASSERT_EQUAL(pt_init(fh, &ctx, err, sizeof(err)), KM_ERR_HOST_API);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "lacks authorize"));
    api->struct_size = sizeof(*api);
    api->controller_write = NULL;
    CU_ASSERT_EQUAL(pt_init(fh, &ctx, err, sizeof(err)), KM_ERR_HOST_API);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "lacks controller_write"));
    api->abi_major = 2;
    CU_ASSERT_EQUAL(pt_init(fh, &ctx, err, sizeof(err)), KM_ERR_HOST_API);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a 1.x table"));
    CU_ASSERT_PTR_NULL(ctx);
    CU_ASSERT_EQUAL(pt_init(fh, NULL, err, sizeof(err)), KM_ERR_INVALID);
    fh_cunit_assert_clean(fh);
    fakehost_free(fh);
}

static jmp_buf pt_jmp;
static char pt_fatal_msg[256];

static void pt_fatal(void *arg, const char *file, int line, const char *msg)
{
    snprintf(pt_fatal_msg, sizeof(pt_fatal_msg), "%s", msg);
    longjmp(pt_jmp, 1);
}

static void pt_test_bug_on(void)
{
    fakehost_t *fh = pt_host();
    void *ctx = NULL;
    km_plugin_t *volatile cm;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(pt_init(fh, &ctx, err, sizeof(err)), 0);
    cm = ctx;
    fakehost_set_fatal(fh, pt_fatal, NULL);
    if (setjmp(pt_jmp) == 0) {
        KM_BUG_ON(cm, cm->coord.magic != 0);
        CU_FAIL("KM_BUG_ON returned");
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(pt_fatal_msg, "BUG_ON(cm->coord.magic != 0)"));
    CU_ASSERT_TRUE(fakehost_log_contains(fh, "BUG_ON(cm->coord.magic != 0) at"));
    fakehost_set_fatal(fh, NULL, NULL);
    kbx_plugin_entry()->fini(cm);
    fh_cunit_assert_clean(fh);
    fakehost_free(fh);
}

static CU_TestInfo pt_tests[] = {
    {"descriptor", pt_test_descriptor},
    {"start, events, stop", pt_test_lifecycle},
    {"fini drains queued ops", pt_test_fini_drains},
    {"two instances against two hosts", pt_test_two_instances},
    {"closures posted to the coordinator loop", pt_test_post},
    {"every allocation in init fails in turn", pt_test_alloc_countdown},
    {"every allocation in init fails in turn (sticky)", pt_test_alloc_countdown_sticky},
    {"allocation failure in a host callback", pt_test_alloc_failure_in_callback},
    {"host tables lacking members", pt_test_host_tables},
    {"KM_BUG_ON goes to the host's fatal hook", pt_test_bug_on},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo pt_suites[] = {
    {"plugin", NULL, NULL, NULL, NULL, pt_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(pt_suites);
}
