/*
 * kp_crc32c.h -- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
 * Kafka record batch v2.
 *
 * The value passed and returned is the finished CRC (as java.util.zip.CRC32C reports it), so
 * calls chain: kp_crc32c(kp_crc32c(0, a, n), b, m) == kp_crc32c(0, a||b, n + m). Start with 0.
 *
 * On x86-64 CPUs with SSE4.2 the `crc32` instruction is used (8 bytes per step); elsewhere a
 * slicing-by-8 table implementation. The choice is made once per process from CPUID; tests
 * can force the software path with kp_crc32c_force_sw() or by setting KP_CRC32C_FORCE_SW=1 in
 * the environment before the first call.
 *
 * @thread any
 */
#ifndef KP_CRC32C_H
#define KP_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** CRC-32C of @p len bytes at @p buf, continuing from @p crc (0 to start). @p buf is borrowed. */
uint32_t kp_crc32c(uint32_t crc, const void *buf, size_t len);

/** Software (slicing-by-8) implementation; always available. */
uint32_t kp_crc32c_sw(uint32_t crc, const void *buf, size_t len);

/** Hardware implementation. Only call it when kp_crc32c_hw_available() is true. */
uint32_t kp_crc32c_hw(uint32_t crc, const void *buf, size_t len);

/** True if this CPU (and build) has the SSE4.2 crc32 instruction. */
bool kp_crc32c_hw_available(void);

/** True if kp_crc32c() currently uses the hardware path. */
bool kp_crc32c_uses_hw(void);

/**
 * Force (@p on true) or stop forcing the software path for kp_crc32c(). Process-wide; meant
 * for tests and benchmarks.
 */
void kp_crc32c_force_sw(bool on);

#endif /* KP_CRC32C_H */
