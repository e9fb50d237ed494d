/* Shared helpers of the tests/record suites. */
#ifndef RECORD_TESTS_H
#define RECORD_TESTS_H

#include <stddef.h>
#include <stdint.h>

void record_suite_crc_murmur(void);
void record_suite_compress(void);
void record_suite_batch(void);

/** Deterministic PRNG (xorshift64*). */
uint64_t rt_rand(uint64_t *s);
/** Fill @p n bytes with pseudo-random data; compressible if @p text. */
void rt_fill(uint8_t *p, size_t n, uint64_t *s, int text);
/** Read tests/record/data/<name> (hex text) into a malloc'ed buffer; NULL if missing. */
uint8_t *rt_load_hex(const char *name, size_t *len);

#endif
