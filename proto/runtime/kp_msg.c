#include "kp_msg.h"

#include <math.h>
#include <string.h>

uint32_t kp_tags_begin(kp_reader_t *rd)
{
    uint32_t n = kp_read_uvarint(rd);
    /* Every tagged field takes at least two bytes (tag and size varints). */
    if (!rd->err && n > kp_reader_remaining(rd) / 2) {
        kp_reader_fail(rd, KP_E_BAD_LENGTH, "tagged-field count larger than the remaining input");
        return 0;
    }
    return n;
}

int kp_tag_next(kp_reader_t *rd, int64_t *prev, uint32_t *tag, kp_reader_t *sub)
{
    uint32_t t = kp_read_uvarint(rd);
    uint32_t sz = kp_read_uvarint(rd);
    const uint8_t *p;
    if (rd->err)
        return rd->err;
    if ((int64_t)t <= *prev)
        return kp_reader_fail(rd, KP_E_BAD_TAGS, "tagged fields not in increasing tag order");
    p = kp_read_raw(rd, sz);
    if (!p)
        return rd->err;
    *prev = t;
    *tag = t;
    kp_reader_init(sub, p, sz);
    return 0;
}

void kp_tag_done(kp_reader_t *rd, const kp_reader_t *sub)
{
    if (sub->err)
        kp_reader_fail(rd, sub->err, sub->errstr);
    else if (sub->pos != sub->len)
        kp_reader_fail(rd, KP_E_BAD_TAGS, "tagged field size does not match its value");
}

void kp_tag_keep(kp_reader_t *rd, kp_arena_t *ar, kp_tagbuf_t *tb, uint32_t left, uint32_t tag,
                 const kp_reader_t *sub)
{
    kp_rawtag_t *rt;
    if (rd->err)
        return;
    if (!tb->v) {
        /* First unknown tag of this section: room for every tag that may follow. */
        tb->cnt = 0;
        tb->v = kp_arena_calloc(ar, left, sizeof(*tb->v));
        if (!tb->v) {
            kp_reader_fail(rd, KP_E_NOMEM, NULL);
            return;
        }
    }
    rt = &tb->v[tb->cnt++];
    rt->tag = tag;
    rt->data.ptr = sub->buf;
    rt->data.len = (int32_t)sub->len;
}

uint32_t kp_tags_write_below(kp_writer_t *wr, const kp_tagbuf_t *tb, uint32_t i, uint64_t below)
{
    for (; i < tb->cnt; i++) {
        const kp_rawtag_t *rt = &tb->v[i];
        if (rt->tag >= below) {
            if (rt->tag == below)
                kp_writer_fail(wr, KP_E_BAD_TAGS);
            break;
        }
        if ((i > 0 && rt->tag <= tb->v[i - 1].tag) || rt->data.len < 0 ||
            (rt->data.len > 0 && !rt->data.ptr)) {
            kp_writer_fail(wr, KP_E_BAD_TAGS);
            break;
        }
        kp_write_uvarint(wr, rt->tag);
        kp_write_uvarint(wr, (uint32_t)rt->data.len);
        kp_write_raw(wr, rt->data.ptr, (size_t)rt->data.len);
    }
    return i;
}

size_t kp_tags_size(const kp_tagbuf_t *tb)
{
    size_t n = 0;
    uint32_t i;
    for (i = 0; i < tb->cnt; i++) {
        size_t len = tb->v[i].data.len > 0 ? (size_t)tb->v[i].data.len : 0;
        n += kp_uvarint_size(tb->v[i].tag) + kp_uvarint_size((uint32_t)len) + len;
    }
    return n;
}

void kp_enc_str(kp_writer_t *wr, kp_str_t s, int compact, int nullable)
{
    if (s.len < -1 || (s.len > 0 && !s.ptr))
        kp_writer_fail(wr, KP_E_INVALID);
    else if (s.len == -1 && !nullable)
        kp_writer_fail(wr, KP_E_NULL_NOT_ALLOWED);
    else if (s.len > 0x7fff)
        kp_writer_fail(wr, KP_E_TOO_LARGE);
    else
        kp_write_string(wr, s, compact);
}

void kp_enc_bytes(kp_writer_t *wr, kp_bytes_t b, int compact, int nullable)
{
    if (b.len < -1 || (b.len > 0 && !b.ptr) || (compact && b.len == INT32_MAX))
        kp_writer_fail(wr, KP_E_INVALID);
    else if (b.len == -1 && !nullable)
        kp_writer_fail(wr, KP_E_NULL_NOT_ALLOWED);
    else
        kp_write_bytes(wr, b, compact);
}

int kp_enc_arr(kp_writer_t *wr, int32_t cnt, const void *v, int compact, int nullable)
{
    if (cnt < -1 || (cnt > 0 && !v) || (compact && cnt == INT32_MAX)) {
        kp_writer_fail(wr, KP_E_INVALID);
        return 0;
    }
    if (cnt == -1 && !nullable) {
        kp_writer_fail(wr, KP_E_NULL_NOT_ALLOWED);
        return 0;
    }
    kp_write_array_len(wr, cnt, compact);
    return cnt > 0 && !wr->err;
}

bool kp_uuid_is_zero(const kp_uuid_t *u)
{
    static const kp_uuid_t zero;
    return memcmp(u->b, zero.b, sizeof(zero.b)) == 0;
}

bool kp_str_eqn(kp_str_t s, const char *p, int32_t len)
{
    return s.len == len && (len == 0 || memcmp(s.ptr, p, (size_t)len) == 0);
}

void kp_json_str(FILE *out, kp_str_t s)
{
    int32_t i;
    if (s.len < 0) {
        fputs("null", out);
        return;
    }
    fputc('"', out);
    for (i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\') {
            fputc('\\', out);
            fputc(c, out);
        } else if (c < 0x20) {
            fprintf(out, "\\u%04x", c);
        } else {
            fputc(c, out);
        }
    }
    fputc('"', out);
}

void kp_json_hex(FILE *out, kp_bytes_t b)
{
    static const char hex[] = "0123456789abcdef";
    int32_t i;
    if (b.len < 0) {
        fputs("null", out);
        return;
    }
    fputc('"', out);
    for (i = 0; i < b.len; i++) {
        fputc(hex[b.ptr[i] >> 4], out);
        fputc(hex[b.ptr[i] & 15], out);
    }
    fputc('"', out);
}

void kp_json_uuid(FILE *out, const kp_uuid_t *u)
{
    kp_bytes_t b = {u->b, 16};
    kp_json_hex(out, b);
}

void kp_json_f64(FILE *out, double v)
{
    if (isnan(v))
        fputs("\"NaN\"", out);
    else if (isinf(v))
        fputs(v > 0 ? "\"Infinity\"" : "\"-Infinity\"", out);
    else
        fprintf(out, "%.17g", v);
}

void kp_json_redacted(FILE *out)
{
    fputs("\"<redacted>\"", out);
}
