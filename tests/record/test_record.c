/* tests/record: CRC32C, murmur2, compression codecs, record batch v2. */
#include <CUnit/Basic.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "record_tests.h"

uint64_t rt_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

void rt_fill(uint8_t *p, size_t n, uint64_t *s, int text)
{
    static const char words[] = "mirror kafka batch record offset epoch producer ";
    size_t i;
    for (i = 0; i < n; i++) {
        uint64_t r = rt_rand(s);
        p[i] = text ? (uint8_t)words[(i + (r % 7 == 0 ? r : 0)) % (sizeof(words) - 1)] : (uint8_t)r;
    }
}

uint8_t *rt_load_hex(const char *name, size_t *len)
{
    const char *dir = getenv("KP_TEST_DATA");
    char path[1024];
    FILE *f;
    uint8_t *buf;
    size_t cap = 4096, n = 0;
    int c, hi = -1;

    snprintf(path, sizeof(path), "%s/%s", dir ? dir : "tests/record/data", name);
    f = fopen(path, "r");
    if (!f)
        return NULL;
    buf = malloc(cap);
    while (buf && (c = fgetc(f)) != EOF) {
        int v;
        if (!isxdigit(c))
            continue;
        v = isdigit(c) ? c - '0' : tolower(c) - 'a' + 10;
        if (hi < 0) {
            hi = v;
            continue;
        }
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        buf[n++] = (uint8_t)(hi << 4 | v);
        hi = -1;
    }
    fclose(f);
    *len = n;
    return buf;
}

int main(void)
{
    unsigned failures;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    record_suite_crc_murmur();
    record_suite_compress();
    record_suite_batch();
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failures = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failures ? 1 : 0;
}
