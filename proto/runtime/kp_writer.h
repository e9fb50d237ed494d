/*
 * kp_writer.h -- a big-endian write buffer, growable (malloc) or fixed, with a sticky error.
 *
 * @thread any (a writer is owned by one thread at a time)
 */
#ifndef KP_WRITER_H
#define KP_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "kp_err.h"
#include "kp_types.h"

typedef struct kp_writer_s {
    uint8_t *buf;
    size_t len;
    size_t cap;
    int fixed; /**< 1: buf is caller-owned and never grown */
    int err;   /**< 0 or the first kp_err_t */
} kp_writer_t;

/** Growable writer; free with kp_writer_free(). */
void kp_writer_init(kp_writer_t *wr);
/** Writer over a caller buffer; overflow sets KP_E_OVERFLOW. */
void kp_writer_init_fixed(kp_writer_t *wr, void *buf, size_t cap);
void kp_writer_free(kp_writer_t *wr);
/** Record a failure (only the first one sticks; later writes are no-ops). Returns @p err. */
int kp_writer_fail(kp_writer_t *wr, int err);
/** Make room for @p n more bytes; returns 0 or a kp_err_t (sticky). */
int kp_writer_reserve(kp_writer_t *wr, size_t n);
/** Forget the content, keep the memory. */
void kp_writer_reset(kp_writer_t *wr);
/** Take ownership of the growable buffer (caller frees with free()); the writer is reset. */
uint8_t *kp_writer_steal(kp_writer_t *wr, size_t *lenp);

void kp_write_int8(kp_writer_t *wr, int8_t v);
void kp_write_int16(kp_writer_t *wr, int16_t v);
void kp_write_int32(kp_writer_t *wr, int32_t v);
void kp_write_int64(kp_writer_t *wr, int64_t v);
void kp_write_uint16(kp_writer_t *wr, uint16_t v);
void kp_write_uint32(kp_writer_t *wr, uint32_t v);
void kp_write_float64(kp_writer_t *wr, double v);
void kp_write_uuid(kp_writer_t *wr, const kp_uuid_t *v);
void kp_write_uvarint(kp_writer_t *wr, uint32_t v);
void kp_write_varint(kp_writer_t *wr, int32_t v);
void kp_write_uvarlong(kp_writer_t *wr, uint64_t v);
void kp_write_varlong(kp_writer_t *wr, int64_t v);
void kp_write_raw(kp_writer_t *wr, const void *p, size_t n);

/** Overwrite 4 bytes at @p at (already written) with big-endian @p v (for length/CRC fields). */
void kp_writer_patch_int32(kp_writer_t *wr, size_t at, int32_t v);

/* Length-prefixed values; a null view (len -1) writes the null marker. */
void kp_write_string(kp_writer_t *wr, kp_str_t s, int compact);
void kp_write_bytes(kp_writer_t *wr, kp_bytes_t b, int compact);
void kp_write_array_len(kp_writer_t *wr, int32_t cnt, int compact);

/* Sizes, for the generated size functions. */
size_t kp_uvarint_size(uint32_t v);
size_t kp_uvarlong_size(uint64_t v);
size_t kp_varint_size(int32_t v);
size_t kp_varlong_size(int64_t v);
size_t kp_string_size(kp_str_t s, int compact);
size_t kp_bytes_size(kp_bytes_t b, int compact);
size_t kp_array_len_size(int32_t cnt, int compact);

#endif /* KP_WRITER_H */
