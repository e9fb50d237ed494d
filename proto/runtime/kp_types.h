/*
 * kp_types.h -- basic value types shared by the codec runtime and the generated codecs.
 *
 * Strings and byte fields decoded from the wire are *views* into the caller's buffer:
 * they are valid as long as that buffer is, and must be copied to be kept.
 */
#ifndef KP_TYPES_H
#define KP_TYPES_H

#include <stddef.h>
#include <stdint.h>

/** A string view. len == -1 means null. Not NUL-terminated. */
typedef struct kp_str_s {
    const char *ptr;
    int32_t len;
} kp_str_t;

/** A byte-string view (also used for `records`). len == -1 means null. */
typedef struct kp_bytes_s {
    const uint8_t *ptr;
    int32_t len;
} kp_bytes_t;

/** A Kafka UUID (topic id, ...): 16 raw bytes, big-endian halves. */
typedef struct kp_uuid_s {
    uint8_t b[16];
} kp_uuid_t;

/** One tagged field this codec did not recognise; kept so it can be written back. */
typedef struct kp_rawtag_s {
    uint32_t tag;
    kp_bytes_t data;
} kp_rawtag_t;

/** The unknown tagged fields of one struct, in wire order. */
typedef struct kp_tagbuf_s {
    uint32_t cnt;
    kp_rawtag_t *v;
} kp_tagbuf_t;

#define KP_STR_NULL   ((kp_str_t){NULL, -1})
#define KP_BYTES_NULL ((kp_bytes_t){NULL, -1})

/** Make a string view of a NUL-terminated C string (NULL gives a null string). */
kp_str_t kp_str(const char *cstr);

/** True if the view equals the NUL-terminated string @p cstr (a null view equals nothing). */
int kp_str_eq(kp_str_t s, const char *cstr);

/** Upper bound on any decoded array count or length, before the remaining-bytes check. */
#define KP_MAX_ARRAY (64 * 1024 * 1024)

#endif /* KP_TYPES_H */
