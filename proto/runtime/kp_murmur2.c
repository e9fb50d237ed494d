#include "kp_murmur2.h"

/*
 * MurmurHash2 as Kafka uses it: the length is mixed into the seed as a 32-bit int (Java arrays
 * are at most INT32_MAX long, so larger lengths are simply truncated the same way), body in
 * little-endian 32-bit blocks, the 1-3 byte tail folded in before the final avalanche.
 * All arithmetic is unsigned 32-bit, which matches Java's wrapping int arithmetic and its
 * unsigned shift (>>>).
 */
int32_t kp_murmur2(const void *data, size_t len)
{
    const uint32_t m = 0x5bd1e995u;
    const uint8_t *p = data;
    uint32_t h = KP_MURMUR2_SEED ^ (uint32_t)len;
    size_t nblocks = len / 4;
    size_t i;
    const uint8_t *tail;

    for (i = 0; i < nblocks; i++) {
        const uint8_t *b = p + 4 * i;
        uint32_t k = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
                     ((uint32_t)b[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }

    tail = p + 4 * nblocks;
    switch (len & 3) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)tail[0];
        h *= m;
        break;
    default:
        break;
    }

    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

int32_t kp_murmur2_partition(const void *key, size_t len, int32_t num_partitions)
{
    if (num_partitions <= 0)
        return -1;
    return kp_murmur2_to_positive(kp_murmur2(key, len)) % num_partitions;
}
