/*
 * cu_util.h -- small helpers shared by the codec CUnit suites: a main() driver, hex dumps and
 * a byte-compare assertion that prints both sides on failure.
 */
#ifndef CU_UTIL_H
#define CU_UTIL_H

#include <CUnit/Basic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct cu_test_s {
    const char *name;
    void (*fn)(void);
} cu_test_t;

typedef struct cu_suite_s {
    const char *name;
    const cu_test_t *tests;
} cu_suite_t;

static inline void cu_hex(FILE *out, const uint8_t *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        fprintf(out, "%02x", p[i]);
}

/* Compare bytes; on mismatch print both and fail the current test. */
#define CU_ASSERT_BYTES(got, gotlen, want, wantlen)                                                \
    do {                                                                                           \
        const uint8_t *g_ = (const uint8_t *)(got), *w_ = (const uint8_t *)(want);                 \
        size_t gl_ = (gotlen), wl_ = (wantlen);                                                    \
        int ok_ = gl_ == wl_ && (gl_ == 0 || memcmp(g_, w_, gl_) == 0);                            \
        if (!ok_) {                                                                                \
            fprintf(stderr, "\n%s:%d: bytes differ\n  got  ", __FILE__, __LINE__);                 \
            cu_hex(stderr, g_, gl_);                                                               \
            fprintf(stderr, "\n  want ");                                                          \
            cu_hex(stderr, w_, wl_);                                                               \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
        CU_ASSERT(ok_);                                                                            \
    } while (0)

#define CU_ASSERT_STR(got, want)                                                                   \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        int ok_ = g_ && w_ && strcmp(g_, w_) == 0;                                                 \
        if (!ok_)                                                                                  \
            fprintf(stderr, "\n%s:%d: strings differ\n  got  %s\n  want %s\n", __FILE__, __LINE__, \
                    g_ ? g_ : "(null)", w_ ? w_ : "(null)");                                       \
        CU_ASSERT(ok_);                                                                            \
    } while (0)

#define CU_ASSERT_INT(got, want)                                                                   \
    do {                                                                                           \
        long long g_ = (long long)(got), w_ = (long long)(want);                                   \
        if (g_ != w_)                                                                              \
            fprintf(stderr, "\n%s:%d: %s = %lld, want %lld\n", __FILE__, __LINE__, #got, g_, w_);  \
        CU_ASSERT(g_ == w_);                                                                       \
    } while (0)

static inline int cu_run(const cu_suite_t *suites)
{
    unsigned fails;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    for (; suites->name; suites++) {
        CU_pSuite s = CU_add_suite(suites->name, NULL, NULL);
        const cu_test_t *t;
        if (!s)
            return 2;
        for (t = suites->tests; t->name; t++)
            if (!CU_add_test(s, t->name, t->fn))
                return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}

#endif /* CU_UTIL_H */
