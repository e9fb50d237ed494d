/*
 * kp_murmur2.h -- the 32-bit MurmurHash2 variant that Kafka's default partitioner uses
 * (seed 0x9747b28c, little-endian 4-byte blocks), and the partition choice built on it.
 *
 * Every broker and client computes the same partition for the same key bytes, which is what
 * `__mirror_state` placement relies on (ARCHITECTURE.md §4).
 *
 * @thread any
 */
#ifndef KP_MURMUR2_H
#define KP_MURMUR2_H

#include <stddef.h>
#include <stdint.h>

#define KP_MURMUR2_SEED 0x9747b28cu

/** Kafka's murmur2 of @p len bytes at @p data (borrowed), as the Java int bit pattern. */
int32_t kp_murmur2(const void *data, size_t len);

/** Kafka's toPositive(): clears the sign bit (not abs(); INT32_MIN maps to 0). */
static inline int32_t kp_murmur2_to_positive(int32_t v)
{
    return (int32_t)((uint32_t)v & 0x7fffffffu);
}

/**
 * toPositive(murmur2(key)) % @p num_partitions, or -1 if @p num_partitions <= 0.
 */
int32_t kp_murmur2_partition(const void *key, size_t len, int32_t num_partitions);

#endif /* KP_MURMUR2_H */
