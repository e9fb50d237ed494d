#include "kp_writer.h"

#include <stdlib.h>
#include <string.h>

void kp_writer_init(kp_writer_t *wr)
{
    memset(wr, 0, sizeof(*wr));
}

void kp_writer_init_fixed(kp_writer_t *wr, void *buf, size_t cap)
{
    memset(wr, 0, sizeof(*wr));
    wr->buf = buf;
    wr->cap = cap;
    wr->fixed = 1;
}

void kp_writer_free(kp_writer_t *wr)
{
    if (!wr->fixed)
        free(wr->buf);
    wr->buf = NULL;
    wr->len = wr->cap = 0;
}

void kp_writer_reset(kp_writer_t *wr)
{
    wr->len = 0;
    wr->err = 0;
}

uint8_t *kp_writer_steal(kp_writer_t *wr, size_t *lenp)
{
    uint8_t *p = wr->fixed ? NULL : wr->buf;
    if (lenp)
        *lenp = wr->len;
    if (!wr->fixed)
        kp_writer_init(wr);
    return p;
}

int kp_writer_fail(kp_writer_t *wr, int err)
{
    if (!wr->err)
        wr->err = err;
    return err;
}

int kp_writer_reserve(kp_writer_t *wr, size_t n)
{
    size_t ncap;
    uint8_t *nbuf;
    if (wr->err)
        return wr->err;
    if (n <= wr->cap - wr->len)
        return 0;
    if (wr->fixed || n > SIZE_MAX / 2 - wr->len)
        return wr->err = KP_E_OVERFLOW;
    ncap = wr->cap ? wr->cap : 256;
    while (ncap - wr->len < n)
        ncap *= 2;
    nbuf = realloc(wr->buf, ncap);
    if (!nbuf)
        return wr->err = KP_E_NOMEM;
    wr->buf = nbuf;
    wr->cap = ncap;
    return 0;
}

void kp_write_raw(kp_writer_t *wr, const void *p, size_t n)
{
    if (n == 0 || kp_writer_reserve(wr, n))
        return;
    memcpy(wr->buf + wr->len, p, n);
    wr->len += n;
}

static void kp_write_be(kp_writer_t *wr, uint64_t v, size_t n)
{
    uint8_t tmp[8];
    size_t i;
    for (i = 0; i < n; i++)
        tmp[n - 1 - i] = (uint8_t)(v >> (8 * i));
    kp_write_raw(wr, tmp, n);
}

void kp_write_int8(kp_writer_t *wr, int8_t v)
{
    kp_write_be(wr, (uint8_t)v, 1);
}

void kp_write_int16(kp_writer_t *wr, int16_t v)
{
    kp_write_be(wr, (uint16_t)v, 2);
}

void kp_write_int32(kp_writer_t *wr, int32_t v)
{
    kp_write_be(wr, (uint32_t)v, 4);
}

void kp_write_int64(kp_writer_t *wr, int64_t v)
{
    kp_write_be(wr, (uint64_t)v, 8);
}

void kp_write_uint16(kp_writer_t *wr, uint16_t v)
{
    kp_write_be(wr, v, 2);
}

void kp_write_uint32(kp_writer_t *wr, uint32_t v)
{
    kp_write_be(wr, v, 4);
}

void kp_write_float64(kp_writer_t *wr, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    kp_write_be(wr, bits, 8);
}

void kp_write_uuid(kp_writer_t *wr, const kp_uuid_t *v)
{
    kp_write_raw(wr, v->b, 16);
}

void kp_write_uvarlong(kp_writer_t *wr, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    while (v >= 0x80) {
        tmp[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    tmp[n++] = (uint8_t)v;
    kp_write_raw(wr, tmp, n);
}

void kp_write_uvarint(kp_writer_t *wr, uint32_t v)
{
    kp_write_uvarlong(wr, v);
}

void kp_write_varint(kp_writer_t *wr, int32_t v)
{
    kp_write_uvarlong(wr, (uint32_t)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31)));
}

void kp_write_varlong(kp_writer_t *wr, int64_t v)
{
    kp_write_uvarlong(wr, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

void kp_writer_patch_int32(kp_writer_t *wr, size_t at, int32_t v)
{
    uint32_t u = (uint32_t)v;
    if (wr->err || at > wr->len || wr->len - at < 4) {
        if (!wr->err)
            wr->err = KP_E_INVALID;
        return;
    }
    wr->buf[at] = (uint8_t)(u >> 24);
    wr->buf[at + 1] = (uint8_t)(u >> 16);
    wr->buf[at + 2] = (uint8_t)(u >> 8);
    wr->buf[at + 3] = (uint8_t)u;
}

void kp_write_string(kp_writer_t *wr, kp_str_t s, int compact)
{
    if (compact)
        kp_write_uvarint(wr, (uint32_t)(s.len + 1));
    else
        kp_write_int16(wr, (int16_t)s.len);
    if (s.len > 0)
        kp_write_raw(wr, s.ptr, (size_t)s.len);
}

void kp_write_bytes(kp_writer_t *wr, kp_bytes_t b, int compact)
{
    if (compact)
        kp_write_uvarint(wr, (uint32_t)(b.len + 1));
    else
        kp_write_int32(wr, b.len);
    if (b.len > 0)
        kp_write_raw(wr, b.ptr, (size_t)b.len);
}

void kp_write_array_len(kp_writer_t *wr, int32_t cnt, int compact)
{
    if (compact)
        kp_write_uvarint(wr, (uint32_t)(cnt + 1));
    else
        kp_write_int32(wr, cnt);
}

size_t kp_uvarlong_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

size_t kp_uvarint_size(uint32_t v)
{
    return kp_uvarlong_size(v);
}

size_t kp_varint_size(int32_t v)
{
    return kp_uvarlong_size((uint32_t)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31)));
}

size_t kp_varlong_size(int64_t v)
{
    return kp_uvarlong_size(((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

size_t kp_string_size(kp_str_t s, int compact)
{
    size_t n = s.len > 0 ? (size_t)s.len : 0;
    return n + (compact ? kp_uvarint_size((uint32_t)(s.len + 1)) : 2);
}

size_t kp_bytes_size(kp_bytes_t b, int compact)
{
    size_t n = b.len > 0 ? (size_t)b.len : 0;
    return n + (compact ? kp_uvarint_size((uint32_t)(b.len + 1)) : 4);
}

size_t kp_array_len_size(int32_t cnt, int compact)
{
    return compact ? kp_uvarint_size((uint32_t)(cnt + 1)) : 4;
}
