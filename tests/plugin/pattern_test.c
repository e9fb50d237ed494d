/*
 * pattern_test.c - util/km_pattern: whole-name matching (Java matches()), compile errors with
 * their offset, runaway patterns stopped by the limits, topic selection (internal topics never,
 * exclude wins), allocation failures.
 */
#include <string.h>

#include "core/km_plugin_types.h"
#include "fakehost.h"
#include "fh_cunit.h"
#include "util/km_pattern.h"

static fakehost_t *pt_fh;
static km_plugin_t pt_cm;

static int pt_setup(void)
{
    pt_fh = fakehost_new(NULL);
    if (pt_fh == NULL)
        return -1;
    memset(&pt_cm, 0, sizeof(pt_cm));
    pt_cm.ref.magic = KM_PLUGIN_MAGIC;
    pt_cm.ref.api = fakehost_api(pt_fh);
    pt_cm.ref.host = fakehost_host(pt_fh);
    return 0;
}

static int pt_teardown(void)
{
    char err[512] = "";
    int rc = fakehost_check_clean(pt_fh, err, sizeof(err));

    if (rc != 0)
        fprintf(stderr, "leftovers: %s\n", err);
    fakehost_free(pt_fh);
    return rc;
}

static km_pattern_t *pt_compile(const char *re)
{
    km_pattern_t *p = NULL;
    char err[256];

    CU_ASSERT_EQUAL(km_pattern_compile(&pt_cm, re, strlen(re), &p, err, sizeof(err)), KM_OK);
    return p;
}

static int pt_match(km_pattern_t *p, const char *s)
{
    bool m = false;
    km_err_t err = km_pattern_match(p, s, strlen(s), &m);

    if (err != KM_OK)
        return err;
    return m ? 1 : 0;
}

static void pt_test_whole_name(void)
{
    km_pattern_t *p = pt_compile("orders.*");

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(pt_match(p, "orders"), 1);
    CU_ASSERT_EQUAL(pt_match(p, "orders-eu"), 1);
    CU_ASSERT_EQUAL(pt_match(p, "old-orders"), 0); /* not a find(): anchored at the start */
    CU_ASSERT_STRING_EQUAL(km_pattern_source(p), "orders.*");
    km_pattern_free(p);

    /* Anchored at the end too, and around the whole alternation, not its branches. */
    p = pt_compile("a|b");
    CU_ASSERT_EQUAL(pt_match(p, "a"), 1);
    CU_ASSERT_EQUAL(pt_match(p, "b"), 1);
    CU_ASSERT_EQUAL(pt_match(p, "ab"), 0);
    CU_ASSERT_EQUAL(pt_match(p, "ba"), 0);
    km_pattern_free(p);

    p = pt_compile("t[0-9]+");
    CU_ASSERT_EQUAL(pt_match(p, "t12"), 1);
    CU_ASSERT_EQUAL(pt_match(p, "t12x"), 0);
    CU_ASSERT_EQUAL(pt_match(p, "xt12"), 0);
    CU_ASSERT_EQUAL(pt_match(p, "t"), 0);
    km_pattern_free(p);

    /* A literal dot must be escaped, as in Java. */
    p = pt_compile("a\\.b");
    CU_ASSERT_EQUAL(pt_match(p, "a.b"), 1);
    CU_ASSERT_EQUAL(pt_match(p, "axb"), 0);
    km_pattern_free(p);

    /* Explicit anchors are harmless. */
    p = pt_compile("^x$");
    CU_ASSERT_EQUAL(pt_match(p, "x"), 1);
    CU_ASSERT_EQUAL(pt_match(p, "xx"), 0);
    km_pattern_free(p);
}

static void pt_test_compile_errors(void)
{
    static const struct {
        const char *re;
        const char *want;
    } cases[] = {
        {"(abc", "invalid regular expression at offset 4: "},
        {"ab[c", "invalid regular expression at offset 4: "},
        {"a{2,1}", "invalid regular expression at offset 5: "},
        {"*x", "invalid regular expression at offset 0: "},
    };
    char err[256];
    km_pattern_t *p = (km_pattern_t *)&err; /* must be reset to NULL */

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        p = (km_pattern_t *)&err;
        err[0] = '\0';
        CU_ASSERT_EQUAL(
            km_pattern_compile(&pt_cm, cases[i].re, strlen(cases[i].re), &p, err, sizeof(err)),
            KM_ERR_INVALID);
        CU_ASSERT_PTR_NULL(p);
        CU_ASSERT_EQUAL(strncmp(err, cases[i].want, strlen(cases[i].want)), 0);
        CU_ASSERT(strlen(err) > strlen(cases[i].want)); /* PCRE2's reason follows */
        if (strncmp(err, cases[i].want, strlen(cases[i].want)) != 0)
            fprintf(stderr, "\n    %s: got '%s'\n", cases[i].re, err);
    }
    CU_ASSERT_EQUAL(km_pattern_compile(&pt_cm, "", 0, &p, err, sizeof(err)), KM_ERR_INVALID);
    CU_ASSERT_STRING_EQUAL(err, "empty regular expression");
    {
        static char big[KM_PATTERN_MAX_LEN + 2];
        memset(big, 'a', sizeof(big) - 1);
        CU_ASSERT_EQUAL(km_pattern_compile(&pt_cm, big, strlen(big), &p, err, sizeof(err)),
                        KM_ERR_INVALID);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "longer than"));
    }
}

static void pt_test_runaway(void)
{
    /* Classic catastrophic backtracking: (a+)+b against a long run of a's and no b. Without
     * limits this takes 2^n steps; with them it fails quickly with KM_ERR_LIMIT. */
    km_pattern_t *p = pt_compile("(a+)+b");
    char subject[64];
    bool m = true;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    /* 40 a's, then "cb": the required 'b' is present, so PCRE2's quick "cannot match" check
     * does not save it; only the limits do. */
    memset(subject, 'a', 40);
    memcpy(subject + 40, "cb", 3);
    CU_ASSERT_EQUAL(km_pattern_match(p, subject, strlen(subject), &m), KM_ERR_LIMIT);
    /* The same pattern still answers cheap subjects. */
    CU_ASSERT_EQUAL(pt_match(p, "aab"), 1);
    CU_ASSERT_EQUAL(pt_match(p, "aac"), 0);
    km_pattern_free(p);

    /* Deep nesting through a back-reference-free recursion. */
    p = pt_compile("((a|aa)*)*c");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(km_pattern_match(p, subject, strlen(subject), &m), KM_ERR_LIMIT);
    km_pattern_free(p);
}

static void pt_test_select(void)
{
    km_pattern_t *inc[2] = {pt_compile("orders.*"), pt_compile("pay-[0-9]+")};
    km_pattern_t *exc[2] = {pt_compile("__.*"), pt_compile(".*-test")};
    km_pattern_t *all = pt_compile(".*");
    bool sel;

    CU_ASSERT_EQUAL(km_pattern_select(inc, 2, exc, 2, "orders", &sel), KM_OK);
    CU_ASSERT_TRUE(sel);
    CU_ASSERT_EQUAL(km_pattern_select(inc, 2, exc, 2, "pay-7", &sel), KM_OK);
    CU_ASSERT_TRUE(sel);
    CU_ASSERT_EQUAL(km_pattern_select(inc, 2, exc, 2, "orders-test", &sel), KM_OK);
    CU_ASSERT_FALSE(sel); /* exclude wins */
    CU_ASSERT_EQUAL(km_pattern_select(inc, 2, exc, 2, "payments", &sel), KM_OK);
    CU_ASSERT_FALSE(sel);
    /* Internal topics are never selected, even by ".*" with no exclude at all. */
    CU_ASSERT_EQUAL(km_pattern_select(&all, 1, NULL, 0, "__consumer_offsets", &sel), KM_OK);
    CU_ASSERT_FALSE(sel);
    CU_ASSERT_EQUAL(km_pattern_select(&all, 1, NULL, 0, "__mirror_state", &sel), KM_OK);
    CU_ASSERT_FALSE(sel);
    CU_ASSERT_EQUAL(km_pattern_select(&all, 1, NULL, 0, "_single", &sel), KM_OK);
    CU_ASSERT_TRUE(sel);
    CU_ASSERT_TRUE(km_pattern_internal_topic("__x"));
    CU_ASSERT_FALSE(km_pattern_internal_topic("_x"));
    /* No include pattern selects nothing. */
    CU_ASSERT_EQUAL(km_pattern_select(NULL, 0, NULL, 0, "orders", &sel), KM_OK);
    CU_ASSERT_FALSE(sel);
    for (int i = 0; i < 2; i++) {
        km_pattern_free(inc[i]);
        km_pattern_free(exc[i]);
    }
    km_pattern_free(all);
}

static void pt_test_alloc_failures(void)
{
    int64_t n;

    for (n = 0;; n++) {
        km_pattern_t *p = NULL;
        char err[256];
        km_err_t rc;

        fakehost_fail_alloc(pt_fh, n, false);
        rc = km_pattern_compile(&pt_cm, "orders-(eu|us)[0-9]*", 20, &p, err, sizeof(err));
        if (rc == KM_OK) {
            bool m = false;
            fakehost_fail_alloc(pt_fh, -1, false);
            CU_ASSERT_EQUAL(km_pattern_match(p, "orders-eu12", 11, &m), KM_OK);
            CU_ASSERT_TRUE(m);
            km_pattern_free(p);
            break;
        }
        CU_ASSERT_EQUAL_FATAL(rc, KM_ERR_NOMEM);
        CU_ASSERT_PTR_NULL(p);
        CU_ASSERT_FATAL(n < 1000);
    }
    fakehost_fail_alloc(pt_fh, -1, false);
    CU_ASSERT(n >= 3);
}

static CU_TestInfo pt_tests[] = {
    {"whole-name matching (Java matches())", pt_test_whole_name},
    {"compile errors give the offset", pt_test_compile_errors},
    {"runaway patterns hit the limits", pt_test_runaway},
    {"topic selection: include, exclude wins, internal never", pt_test_select},
    {"allocation failures", pt_test_alloc_failures},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo pt_suites[] = {
    {"pattern", pt_setup, pt_teardown, NULL, NULL, pt_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(pt_suites);
}
