/*
 * kp_mrec.c -- framing of KRaft metadata record values (kp_mrec.h).
 */
#include "kp_mrec.h"

#include <string.h>

/* The frame fields are unsigned varints; Kafka keeps type and version within int16. */
static int frame_fail(kp_mrec_t *out, int err, const char *errstr)
{
    out->rec = NULL;
    out->errstr = errstr;
    return err;
}

int kp_mrec_decode(const void *buf, size_t len, kp_arena_t *ar, kp_mrec_t *out)
{
    kp_reader_t rd;
    const kp_record_info_t *ri;
    void *rec;
    int err;

    memset(out, 0, sizeof(*out));
    kp_reader_init(&rd, buf, len);
    out->frame_ver = kp_read_uvarint(&rd);
    if (rd.err)
        return frame_fail(out, rd.err, "metadata record: bad frame version varint");
    if (out->frame_ver != KP_MREC_FRAME_VERSION)
        return frame_fail(out, KP_E_UNSUPPORTED, "metadata record: unknown frame version");
    out->type = kp_read_uvarint(&rd);
    if (rd.err)
        return frame_fail(out, rd.err, "metadata record: bad record type varint");
    out->ver = kp_read_uvarint(&rd);
    if (rd.err)
        return frame_fail(out, rd.err, "metadata record: bad record version varint");
    ri = out->type <= INT16_MAX ? kp_record_lookup((int16_t)out->type) : NULL;
    if (!ri)
        return frame_fail(out, KP_E_UNSUPPORTED, "metadata record: unknown record type");
    out->info = ri;
    if (out->ver < (uint32_t)ri->min_ver || out->ver > (uint32_t)ri->max_ver)
        return frame_fail(out, KP_E_BAD_VERSION, "metadata record: unsupported record version");
    rec = kp_arena_alloc(ar, ri->desc->struct_size);
    if (!rec)
        return frame_fail(out, KP_E_NOMEM, "metadata record: out of memory");
    err = kp_msg_decode(ri->desc, &rd, ar, rec, (int16_t)out->ver);
    if (err)
        return frame_fail(out, err, rd.errstr ? rd.errstr : "metadata record: bad record");
    if (rd.pos != rd.len)
        return frame_fail(out, KP_E_TRAILING, "metadata record: bytes after the record");
    out->rec = rec;
    return 0;
}

static const kp_record_info_t *check_type(int16_t type, int16_t ver, int *err)
{
    const kp_record_info_t *ri = kp_record_lookup(type);
    if (!ri) {
        *err = KP_E_UNSUPPORTED;
        return NULL;
    }
    if (ver < ri->min_ver || ver > ri->max_ver) {
        *err = KP_E_BAD_VERSION;
        return NULL;
    }
    *err = 0;
    return ri;
}

int kp_mrec_encode(kp_writer_t *wr, int16_t type, int16_t ver, const void *rec)
{
    int err;
    const kp_record_info_t *ri = check_type(type, ver, &err);
    if (!ri)
        return kp_writer_fail(wr, err);
    kp_write_uvarint(wr, KP_MREC_FRAME_VERSION);
    kp_write_uvarint(wr, (uint32_t)type);
    kp_write_uvarint(wr, (uint32_t)ver);
    err = kp_msg_encode(ri->desc, wr, rec, ver);
    return err ? err : wr->err;
}

size_t kp_mrec_size(int16_t type, int16_t ver, const void *rec)
{
    int err;
    const kp_record_info_t *ri = check_type(type, ver, &err);
    if (!ri)
        return 0;
    return kp_uvarint_size(KP_MREC_FRAME_VERSION) + kp_uvarint_size((uint32_t)type) +
           kp_uvarint_size((uint32_t)ver) + kp_msg_size(ri->desc, rec, ver);
}

void kp_mrec_print(FILE *out, const kp_mrec_t *m, unsigned flags)
{
    fprintf(out, "{\"type\":%lu,\"name\":", (unsigned long)m->type);
    if (m->info)
        fprintf(out, "\"%s\"", m->info->name);
    else
        fputs("null", out);
    fprintf(out, ",\"version\":%lu,\"record\":", (unsigned long)m->ver);
    if (m->info && m->rec)
        kp_msg_print(m->info->desc, out, m->rec, (int16_t)m->ver, flags);
    else
        fputs("null", out);
    fputc('}', out);
}
