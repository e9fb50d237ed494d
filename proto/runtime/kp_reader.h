/*
 * kp_reader.h -- a bounded, big-endian read cursor with a sticky error.
 *
 * Every read checks the bytes remaining. The first failure is recorded in rd->err (and a
 * static description in rd->errstr); from then on every read returns zero/empty without
 * touching the buffer, so decoders can read a whole structure linearly and check the error
 * once at the end (STYLE.md point 31).
 *
 * @thread any (a reader is owned by one thread at a time)
 */
#ifndef KP_READER_H
#define KP_READER_H

#include <stddef.h>
#include <stdint.h>

#include "kp_err.h"
#include "kp_types.h"

typedef struct kp_reader_s {
    const uint8_t *buf; /**< borrowed; never written */
    size_t len;
    size_t pos;
    int err;            /**< 0 or the first kp_err_t */
    const char *errstr; /**< static text for the first failure, or NULL */
} kp_reader_t;

void kp_reader_init(kp_reader_t *rd, const void *buf, size_t len);

/** Record a failure (only the first one sticks). Returns @p err for tail calls. */
int kp_reader_fail(kp_reader_t *rd, int err, const char *errstr);

static inline size_t kp_reader_remaining(const kp_reader_t *rd)
{
    return rd->err ? 0 : rd->len - rd->pos;
}

int8_t kp_read_int8(kp_reader_t *rd);
int16_t kp_read_int16(kp_reader_t *rd);
int32_t kp_read_int32(kp_reader_t *rd);
int64_t kp_read_int64(kp_reader_t *rd);
uint16_t kp_read_uint16(kp_reader_t *rd);
uint32_t kp_read_uint32(kp_reader_t *rd);
double kp_read_float64(kp_reader_t *rd);
void kp_read_uuid(kp_reader_t *rd, kp_uuid_t *out);

/** Unsigned varint, at most 5 bytes (32 bits). */
uint32_t kp_read_uvarint(kp_reader_t *rd);
/** Zigzag varint, 32 bits. */
int32_t kp_read_varint(kp_reader_t *rd);
/** Unsigned varlong, at most 10 bytes. */
uint64_t kp_read_uvarlong(kp_reader_t *rd);
/** Zigzag varlong, 64 bits. */
int64_t kp_read_varlong(kp_reader_t *rd);

/** Return a pointer to the next @p n bytes and advance, or NULL (and fail) if short. */
const uint8_t *kp_read_raw(kp_reader_t *rd, size_t n);

/** Skip @p n bytes. */
void kp_reader_skip(kp_reader_t *rd, size_t n);

/* Length-prefixed values. `compact` selects the flexible-version encoding (uvarint len+1).
 * A null value gives len == -1; a null where `nullable` is 0 fails with NULL_NOT_ALLOWED. */
kp_str_t kp_read_string(kp_reader_t *rd, int compact, int nullable);
kp_bytes_t kp_read_bytes(kp_reader_t *rd, int compact, int nullable);

/** Array count (int32 or compact uvarint). -1 = null. Fails if the count cannot fit in the
 *  remaining bytes at @p min_elem_size bytes each, or exceeds KP_MAX_ARRAY. */
int32_t kp_read_array_len(kp_reader_t *rd, int compact, int nullable, size_t min_elem_size);

#endif /* KP_READER_H */
