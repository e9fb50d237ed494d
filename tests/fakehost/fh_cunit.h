/*
 * fh_cunit.h - tiny CUnit runner shared by the kbx/plugin test programs.
 */
#ifndef FH_CUNIT_H
#define FH_CUNIT_H

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <stdio.h>

#include "fakehost.h"

/* Run the suites; exit status is nonzero when a test failed or the registry failed. */
static inline int fh_cunit_run(CU_SuiteInfo *suites)
{
    unsigned fails;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    if (CU_register_suites(suites) != CUE_SUCCESS) {
        CU_cleanup_registry();
        return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    fails += CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return fails != 0 ? 1 : 0;
}

/* The fake host holds nothing of the plugin's any more: a CUnit failure (and what is left, on
 * stderr) when it does. */
static inline void fh_cunit_assert_clean(const fakehost_t *fh)
{
    char buf[512];
    int rc = fakehost_check_clean(fh, buf, sizeof(buf));

    CU_ASSERT_EQUAL(rc, 0);
    if (rc != 0)
        fprintf(stderr, "\n    fake host not clean: %s\n", buf);
}

#endif /* FH_CUNIT_H */
