#include "kp_reader.h"

#include <string.h>

kp_str_t kp_str(const char *cstr)
{
    kp_str_t s = {cstr, -1};
    if (cstr)
        s.len = (int32_t)strlen(cstr);
    return s;
}

int kp_str_eq(kp_str_t s, const char *cstr)
{
    size_t n;
    if (s.len < 0 || !cstr)
        return 0;
    n = strlen(cstr);
    return (size_t)s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

void kp_reader_init(kp_reader_t *rd, const void *buf, size_t len)
{
    rd->buf = buf;
    rd->len = buf ? len : 0;
    rd->pos = 0;
    rd->err = 0;
    rd->errstr = NULL;
}

int kp_reader_fail(kp_reader_t *rd, int err, const char *errstr)
{
    if (!rd->err) {
        rd->err = err;
        rd->errstr = errstr ? errstr : kp_err_str(err);
    }
    return err;
}

const uint8_t *kp_read_raw(kp_reader_t *rd, size_t n)
{
    const uint8_t *p;
    if (rd->err)
        return NULL;
    if (n > rd->len - rd->pos) {
        kp_reader_fail(rd, KP_E_TRUNCATED, "input ends before the value does");
        return NULL;
    }
    p = rd->buf + rd->pos;
    rd->pos += n;
    return p;
}

void kp_reader_skip(kp_reader_t *rd, size_t n)
{
    (void)kp_read_raw(rd, n);
}

static uint64_t kp_read_be(kp_reader_t *rd, size_t n)
{
    const uint8_t *p = kp_read_raw(rd, n);
    uint64_t v = 0;
    size_t i;
    if (!p)
        return 0;
    for (i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

int8_t kp_read_int8(kp_reader_t *rd)
{
    return (int8_t)kp_read_be(rd, 1);
}

int16_t kp_read_int16(kp_reader_t *rd)
{
    return (int16_t)kp_read_be(rd, 2);
}

int32_t kp_read_int32(kp_reader_t *rd)
{
    return (int32_t)kp_read_be(rd, 4);
}

int64_t kp_read_int64(kp_reader_t *rd)
{
    return (int64_t)kp_read_be(rd, 8);
}

uint16_t kp_read_uint16(kp_reader_t *rd)
{
    return (uint16_t)kp_read_be(rd, 2);
}

uint32_t kp_read_uint32(kp_reader_t *rd)
{
    return (uint32_t)kp_read_be(rd, 4);
}

double kp_read_float64(kp_reader_t *rd)
{
    uint64_t bits = kp_read_be(rd, 8);
    double d;
    memcpy(&d, &bits, sizeof(d));
    return d;
}

void kp_read_uuid(kp_reader_t *rd, kp_uuid_t *out)
{
    const uint8_t *p = kp_read_raw(rd, 16);
    if (p)
        memcpy(out->b, p, 16);
    else
        memset(out->b, 0, 16);
}

/* Unsigned LEB128 of at most @p maxbits bits (32 or 64): a continuation or a set bit past the
 * last allowed position is malformed, as in Kafka's ByteUtils. */
static uint64_t kp_read_uvar(kp_reader_t *rd, unsigned maxbits, const char *toolong)
{
    uint64_t v = 0;
    unsigned shift = 0;
    if (rd->err)
        return 0;
    for (;;) {
        uint8_t b;
        if (rd->pos >= rd->len) {
            kp_reader_fail(rd, KP_E_TRUNCATED, "input ends inside a varint");
            return 0;
        }
        b = rd->buf[rd->pos++];
        if (shift + 7 > maxbits && ((b & 0x80) || ((b & 0x7f) >> (maxbits - shift)))) {
            kp_reader_fail(rd, KP_E_VARINT, toolong);
            return 0;
        }
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
        shift += 7;
    }
}

uint64_t kp_read_uvarlong(kp_reader_t *rd)
{
    return kp_read_uvar(rd, 64, "varlong longer than 64 bits");
}

uint32_t kp_read_uvarint(kp_reader_t *rd)
{
    return (uint32_t)kp_read_uvar(rd, 32, "varint longer than 32 bits");
}

int32_t kp_read_varint(kp_reader_t *rd)
{
    uint32_t u = kp_read_uvarint(rd);
    return (int32_t)((u >> 1) ^ (~(u & 1) + 1));
}

int64_t kp_read_varlong(kp_reader_t *rd)
{
    uint64_t u = kp_read_uvarlong(rd);
    return (int64_t)((u >> 1) ^ (~(u & 1) + 1));
}

/* Reads a length prefix; returns -1 for null, -2 on failure (already recorded). */
static int64_t kp_read_len(kp_reader_t *rd, int compact, int nullable, int wide)
{
    int64_t n;
    if (compact) {
        uint32_t u = kp_read_uvarint(rd);
        n = (int64_t)u - 1;
    } else {
        n = wide ? kp_read_int32(rd) : kp_read_int16(rd);
    }
    if (rd->err)
        return -2;
    if (n < -1) {
        kp_reader_fail(rd, KP_E_BAD_LENGTH, "negative length");
        return -2;
    }
    if (n == -1 && !nullable) {
        kp_reader_fail(rd, KP_E_NULL_NOT_ALLOWED, "null value for a non-nullable field");
        return -2;
    }
    return n;
}

kp_str_t kp_read_string(kp_reader_t *rd, int compact, int nullable)
{
    kp_str_t s = KP_STR_NULL;
    int64_t n = kp_read_len(rd, compact, nullable, 0);
    if (n == -1)
        return s;
    if (n < 0 || n > 0x7fff) {
        if (n >= 0)
            kp_reader_fail(rd, KP_E_TOO_LARGE, "string longer than 32767 bytes");
        s.len = 0;
        s.ptr = "";
        return s;
    }
    s.ptr = (const char *)kp_read_raw(rd, (size_t)n);
    s.len = s.ptr ? (int32_t)n : 0;
    if (!s.ptr)
        s.ptr = "";
    return s;
}

kp_bytes_t kp_read_bytes(kp_reader_t *rd, int compact, int nullable)
{
    kp_bytes_t b = KP_BYTES_NULL;
    int64_t n = kp_read_len(rd, compact, nullable, 1);
    if (n == -1)
        return b;
    b.len = 0;
    b.ptr = NULL;
    if (n < 0)
        return b;
    b.ptr = kp_read_raw(rd, (size_t)n);
    if (b.ptr)
        b.len = (int32_t)n;
    return b;
}

int32_t kp_read_array_len(kp_reader_t *rd, int compact, int nullable, size_t min_elem_size)
{
    int64_t n = kp_read_len(rd, compact, nullable, 1);
    if (n == -1)
        return -1;
    if (n < 0)
        return 0;
    if (n > KP_MAX_ARRAY) {
        kp_reader_fail(rd, KP_E_TOO_LARGE, "array count exceeds the maximum");
        return 0;
    }
    if (min_elem_size && (uint64_t)n > (rd->len - rd->pos) / min_elem_size) {
        kp_reader_fail(rd, KP_E_BAD_LENGTH, "array count larger than the remaining input");
        return 0;
    }
    return (int32_t)n;
}
