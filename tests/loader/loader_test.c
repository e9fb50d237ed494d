/*
 * loader_test.c - kbx_loader against real shared objects: kmirror.so itself and the test
 * plugins of plugins/test_plugin.c, all through the fake host.
 *
 * A newer host is simulated by creating the fake host with opts.abi_minor = KBX_ABI_MINOR + 1:
 * the loader reads the host's version from api->abi_major/abi_minor.
 */
#include <string.h>

#include "fakehost.h"
#include "fh_cunit.h"
#include "kbx_loader.h"

static const kbx_loader_opts_t ld_on = {.enabled = true, .flag_name = "mirror.enable"};

static fakehost_t *ld_host(uint16_t minor, const char *enable)
{
    fakehost_opts_t opts = {.abi_minor = minor};
    fakehost_t *fh = fakehost_new(&opts);

    CU_ASSERT_PTR_NOT_NULL_FATAL(fh);
    if (enable != NULL)
        fakehost_config_set(fh, "mirror.enable", enable);
    return fh;
}

/* Load path into a fresh host and expect a refusal whose message contains each needle. */
static void ld_expect_refusal(const char *path, const kbx_loader_opts_t *opts, uint16_t minor,
                              const char *enable, int32_t want_err, const char *needle1,
                              const char *needle2)
{
    fakehost_t *fh = ld_host(minor, enable);
    kbx_loaded_t *lp = (kbx_loaded_t *)&fh; /* poison: must be reset to NULL */
    char err[512] = "";
    int32_t rc;

    rc = kbx_loader_load(path, opts, fakehost_api(fh), fakehost_host(fh), &lp, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, want_err);
    CU_ASSERT_PTR_NULL(lp);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, needle1));
    if (needle2 != NULL)
        CU_ASSERT_PTR_NOT_NULL(strstr(err, needle2));
    if (strstr(err, needle1) == NULL || (needle2 != NULL && strstr(err, needle2) == NULL))
        fprintf(stderr, "\n    message was: %s\n", err);
    fh_cunit_assert_clean(fh);
    fakehost_free(fh);
}

static void ld_test_kmirror_loads(void)
{
    fakehost_t *fh = ld_host(0, "true");
    kbx_loaded_t *lp = NULL;
    char err[512] = "";
    double events = 0;

    CU_ASSERT_EQUAL_FATAL(kbx_loader_load(KMIRROR_SO, &ld_on, fakehost_api(fh), fakehost_host(fh),
                                          &lp, err, sizeof(err)),
                          KBX_OK);
    CU_ASSERT_STRING_EQUAL(kbx_loader_desc(lp)->name, "kmirror");
    CU_ASSERT_PTR_NOT_NULL(kbx_loader_ctx(lp));
    CU_ASSERT_TRUE(fakehost_log_contains(fh, "started on broker 1 of cluster fake-cluster"));
    CU_ASSERT_EQUAL(fakehost_thread_count(fh), 2); /* coordinator loop, source admin client */
    CU_ASSERT_EQUAL(fakehost_listener_count(fh), 2);
    fakehost_run_until_idle(fh); /* the two snapshots reach the coordinator */
    CU_ASSERT_TRUE(
        fakehost_metric_get(fh, "kafka.server.mirror", "CoordinatorEventsTotal", &events));
    CU_ASSERT_EQUAL(events, 2 * 2); /* per host event: the coordinator's op and the catalog's */
    kbx_loader_unload(lp);
    CU_ASSERT_TRUE(fakehost_log_contains(fh, "kmirror stopped"));
    fh_cunit_assert_clean(fh);
    fakehost_free(fh);
}

static void ld_test_two_instances(void)
{
    fakehost_t *a = ld_host(0, "true"), *b = ld_host(0, "true");
    kbx_loaded_t *la = NULL, *lb = NULL;
    kbx_metadata_delta_t d = {.struct_size = sizeof(d), .metadata_offset = 7};
    char err[512] = "";
    double ea = 0, eb = 0;

    CU_ASSERT_EQUAL_FATAL(kbx_loader_load(KMIRROR_SO, &ld_on, fakehost_api(a), fakehost_host(a),
                                          &la, err, sizeof(err)),
                          KBX_OK);
    CU_ASSERT_EQUAL_FATAL(kbx_loader_load(KMIRROR_SO, &ld_on, fakehost_api(b), fakehost_host(b),
                                          &lb, err, sizeof(err)),
                          KBX_OK);
    CU_ASSERT_PTR_NOT_EQUAL(kbx_loader_ctx(la), kbx_loader_ctx(lb));
    fakehost_publish_delta(a, &d);
    fakehost_publish_delta(a, &d);
    fakehost_run_until_idle(a);
    fakehost_run_until_idle(b);
    fakehost_metric_get(a, "kafka.server.mirror", "CoordinatorEventsTotal", &ea);
    fakehost_metric_get(b, "kafka.server.mirror", "CoordinatorEventsTotal", &eb);
    CU_ASSERT_EQUAL(ea, 4 * 2); /* per host event: the coordinator's op and the catalog's */
    CU_ASSERT_EQUAL(eb, 2 * 2);
    kbx_loader_unload(la);
    fh_cunit_assert_clean(a);
    CU_ASSERT_EQUAL(fakehost_thread_count(b), 2); /* b untouched by a's fini */
    kbx_loader_unload(lb);
    fh_cunit_assert_clean(b);
    fakehost_free(a);
    fakehost_free(b);
}

static void ld_test_flag_off(void)
{
    kbx_loader_opts_t off = {.enabled = false, .flag_name = "mirror.enable"};

    /* The host's flag is off: the loader refuses before dlopen. */
    ld_expect_refusal(KMIRROR_SO, &off, 0, "true", KBX_ERR_STATE, "not loaded",
                      "mirror.enable is off");
    ld_expect_refusal(KMIRROR_SO, NULL, 0, "true", KBX_ERR_STATE, "not loaded", "is off");
    /* The loader was told "on" but the plugin's own check of the config refuses. */
    ld_expect_refusal(KMIRROR_SO, &ld_on, 0, "false", -4, "failed to start",
                      "mirror.enable is false");
    ld_expect_refusal(KMIRROR_SO, &ld_on, 0, NULL, -4, "failed to start",
                      "mirror.enable is not set");
    ld_expect_refusal(KMIRROR_SO, &ld_on, 0, "yes", -3, "failed to start",
                      "mirror.enable: 'yes' is not a boolean");
}

static void ld_test_wrong_major(void)
{
    char want[96];

    snprintf(want, sizeof(want), "was built for kbx ABI %d.%d, this broker provides %d.%d",
             KBX_ABI_MAJOR + 1, KBX_ABI_MINOR, KBX_ABI_MAJOR, KBX_ABI_MINOR);
    ld_expect_refusal(TP_DIR "/tp_wrong_major.so", &ld_on, 0, "true", KBX_ERR_UNSUPPORTED, want,
                      "major versions must be equal");
}

static void ld_test_newer_minor(void)
{
    char want[96];

    snprintf(want, sizeof(want), "was built for kbx ABI %d.%d, this broker provides %d.%d",
             KBX_ABI_MAJOR, KBX_ABI_MINOR + 1, KBX_ABI_MAJOR, KBX_ABI_MINOR);
    ld_expect_refusal(TP_DIR "/tp_newer_minor.so", &ld_on, 0, "true", KBX_ERR_UNSUPPORTED, want,
                      "needs a newer broker");
}

static void ld_test_truncated(void)
{
    ld_expect_refusal(TP_DIR "/tp_truncated.so", &ld_on, 0, "true", KBX_ERR_INVALID,
                      "descriptor struct_size 24 is smaller than the kbx 1.0 descriptor (48 bytes)",
                      NULL);
}

static void ld_test_no_entry(void)
{
    ld_expect_refusal(TP_DIR "/tp_no_entry.so", &ld_on, 0, "true", KBX_ERR_NOT_FOUND,
                      "is not a kbx plugin: symbol kbx_plugin_entry not found", NULL);
}

static void ld_test_missing_file(void)
{
    ld_expect_refusal(TP_DIR "/no_such_plugin.so", &ld_on, 0, "true", KBX_ERR_NOT_FOUND,
                      "cannot load plugin", "no_such_plugin.so");
}

static void ld_test_init_fails(void)
{
    ld_expect_refusal(TP_DIR "/tp_fail_init.so", &ld_on, 0, "true", -3,
                      "(tp_fail_init 9.9.9) failed to start",
                      "test plugin refuses to start, as told");
}

/* A plugin built for an older minor loads into a newer host (the host claims one more). */
static void ld_test_older_minor_loads(void)
{
    fakehost_t *fh = ld_host(KBX_ABI_MINOR + 1, "true");
    kbx_loaded_t *lp = NULL;
    char err[512] = "", want[64];

    snprintf(want, sizeof(want), "tp_good init on kbx %d.%d", KBX_ABI_MAJOR, KBX_ABI_MINOR + 1);
    CU_ASSERT_EQUAL_FATAL(kbx_loader_load(TP_DIR "/tp_good.so", &ld_on, fakehost_api(fh),
                                          fakehost_host(fh), &lp, err, sizeof(err)),
                          KBX_OK);
    CU_ASSERT_TRUE(fakehost_log_contains(fh, want));
    kbx_loader_unload(lp);
    CU_ASSERT_TRUE(fakehost_log_contains(fh, "tp_good fini"));
    fh_cunit_assert_clean(fh);
    fakehost_free(fh);

    /* kmirror.so itself into the newer host. */
    fh = ld_host(KBX_ABI_MINOR + 1, "true");
    CU_ASSERT_EQUAL_FATAL(kbx_loader_load(KMIRROR_SO, &ld_on, fakehost_api(fh), fakehost_host(fh),
                                          &lp, err, sizeof(err)),
                          KBX_OK);
    kbx_loader_unload(lp);
    fh_cunit_assert_clean(fh);
    fakehost_free(fh);
}

/* A host whose table lacks a 1.0 member: kmirror names the member and refuses. */
static void ld_test_host_lacks_member(void)
{
    fakehost_t *fh = ld_host(0, "true");
    kbx_loaded_t *lp = NULL;
    char err[512] = "";

    fakehost_api_mut(fh)->latch_create = NULL;
    CU_ASSERT_EQUAL(kbx_loader_load(KMIRROR_SO, &ld_on, fakehost_api(fh), fakehost_host(fh), &lp,
                                    err, sizeof(err)),
                    -5);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "lacks latch_create"));
    fh_cunit_assert_clean(fh);

    /* A table smaller than 1.0 is a host bug the loader reports before loading anything. */
    fakehost_api_mut(fh)->struct_size = (uint32_t)(KBX_API_SIZE_1_0 - 8);
    CU_ASSERT_EQUAL(kbx_loader_load(KMIRROR_SO, &ld_on, fakehost_api(fh), fakehost_host(fh), &lp,
                                    err, sizeof(err)),
                    KBX_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "host bug"));
    fakehost_free(fh);
}

static int32_t ld_dummy_init(const kbx_api_t *api, kbx_host_t *host, void **ctx, char *errbuf,
                             size_t errbuf_size)
{
    return 0;
}

static void ld_dummy_fini(void *ctx)
{
}

/* Descriptor checks in process: the version is judged before any other field. */
static void ld_test_check_desc(void)
{
    fakehost_t *fh = ld_host(0, NULL);
    kbx_plugin_desc_t d = {
        .struct_size = 4,
        .abi_major = 9,
        .abi_minor = 0,
        .name = NULL,
        .init = ld_dummy_init,
        .fini = ld_dummy_fini,
    };
    char err[256];

    CU_ASSERT_EQUAL(kbx_loader_check_desc(&d, "p", fakehost_api(fh), err, sizeof(err)),
                    KBX_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "descriptor struct_size 4 is smaller"));
    /* Version mismatch is reported even though the name is missing too. */
    d.struct_size = sizeof(d);
    CU_ASSERT_EQUAL(kbx_loader_check_desc(&d, "p", fakehost_api(fh), err, sizeof(err)),
                    KBX_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "built for kbx ABI 9.0"));
    d.abi_major = KBX_ABI_MAJOR;
    CU_ASSERT_EQUAL(kbx_loader_check_desc(&d, "p", fakehost_api(fh), err, sizeof(err)),
                    KBX_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "lacks a name"));
    d.name = "p";
    d.init = NULL;
    CU_ASSERT_EQUAL(kbx_loader_check_desc(&d, "p", fakehost_api(fh), err, sizeof(err)),
                    KBX_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "lacks an init function"));
    d.init = ld_dummy_init;
    CU_ASSERT_EQUAL(kbx_loader_check_desc(&d, "p", fakehost_api(fh), err, sizeof(err)), KBX_OK);
    CU_ASSERT_EQUAL(kbx_loader_check_desc(NULL, "p", fakehost_api(fh), err, sizeof(err)),
                    KBX_ERR_INVALID);
    fakehost_free(fh);
}

static CU_TestInfo ld_tests[] = {
    {"kmirror.so loads, starts and stops", ld_test_kmirror_loads},
    {"two kmirror instances in one process", ld_test_two_instances},
    {"feature flag off is refused", ld_test_flag_off},
    {"wrong major is refused", ld_test_wrong_major},
    {"newer minor is refused", ld_test_newer_minor},
    {"truncated descriptor is refused", ld_test_truncated},
    {"missing entry symbol is refused", ld_test_no_entry},
    {"missing file is refused", ld_test_missing_file},
    {"init failure is reported", ld_test_init_fails},
    {"older minor loads into a newer host", ld_test_older_minor_loads},
    {"host table lacking a member", ld_test_host_lacks_member},
    {"descriptor checks", ld_test_check_desc},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo ld_suites[] = {
    {"loader", NULL, NULL, NULL, NULL, ld_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(ld_suites);
}
