#include "kb_rb.h"

#include <string.h>

#include "kp_compress.h"
#include "kp_crc32c.h"

static void kb_rb_put_be(uint8_t *p, uint64_t v, size_t n)
{
    size_t i;
    for (i = n; i > 0; i--) {
        p[i - 1] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
}

void kb_rb_set_log_append_time(uint8_t *batch, size_t len, int64_t ts)
{
    uint16_t attr =
        (uint16_t)((batch[KP_BATCH_ATTR_OFFSET] << 8) | batch[KP_BATCH_ATTR_OFFSET + 1]);
    attr |= KP_BATCH_ATTR_TIMESTAMP_TYPE;
    kb_rb_put_be(batch + KP_BATCH_ATTR_OFFSET, attr, 2);
    kb_rb_put_be(batch + 35, (uint64_t)ts, 8);
    kb_rb_put_be(batch + KP_BATCH_CRC_OFFSET, kp_batch_crc_compute(batch, len), 4);
}

int kb_rb_control_type(const kp_batch_t *b, int32_t *coord_epoch)
{
    kp_record_iter_t it;
    kp_record_t r;
    kp_control_t c;
    kp_writer_t scratch;
    int rc;
    if (coord_epoch)
        *coord_epoch = -1;
    kp_writer_init(&scratch);
    rc = kp_record_iter_init(&it, b, &scratch, 1 << 20);
    if (!rc) {
        rc = kp_record_iter_next(&it, &r);
        if (rc == 1)
            rc = kp_control_parse(&r, &c, NULL);
        else if (rc == 0)
            rc = KP_E_CORRUPT;
    }
    if (!rc) {
        rc = c.type < 0 ? KP_E_CORRUPT : c.type;
        if (coord_epoch && rc >= 0)
            *coord_epoch = c.coordinatorEpoch;
    }
    kp_writer_free(&scratch);
    return rc;
}

void kb_rb_builder_init(kb_rb_builder_t *b, const kp_batch_hdr_t *orig, int16_t attributes,
                        int64_t base_ts)
{
    memset(b, 0, sizeof(*b));
    b->hdr = *orig;
    b->hdr.attributes = attributes;
    b->hdr.baseTimestamp = base_ts;
    b->max_ts = -1;
    kp_writer_init(&b->recs);
}

void kb_rb_builder_add(kb_rb_builder_t *b, const kp_record_t *r)
{
    kp_writer_t body;
    if (b->err)
        return;
    kp_writer_init(&body);
    kp_write_int8(&body, r->attributes);
    kp_write_varlong(&body, r->timestamp - b->hdr.baseTimestamp);
    kp_write_varint(&body, r->offsetDelta);
    kp_write_varint(&body, r->key.len);
    if (r->key.len > 0)
        kp_write_raw(&body, r->key.ptr, (size_t)r->key.len);
    kp_write_varint(&body, r->value.len);
    if (r->value.len > 0)
        kp_write_raw(&body, r->value.ptr, (size_t)r->value.len);
    kp_write_varint(&body, r->header_cnt);
    if (r->headers_len)
        kp_write_raw(&body, r->headers, r->headers_len);
    kp_write_varint(&b->recs, (int32_t)body.len);
    kp_write_raw(&b->recs, body.buf, body.len);
    if (body.err)
        b->err = body.err;
    else if (b->recs.err)
        b->err = b->recs.err;
    kp_writer_free(&body);
    if (r->timestamp > b->max_ts)
        b->max_ts = r->timestamp;
    b->count++;
}

int kb_rb_builder_finish(kb_rb_builder_t *b, kp_writer_t *out)
{
    kp_writer_t comp;
    const uint8_t *data = b->recs.buf;
    size_t data_len = b->recs.len, start = out->len, len;
    int codec = b->hdr.attributes & KP_BATCH_ATTR_COMPRESSION_MASK;
    int64_t max_ts;
    int rc;
    if (b->err)
        return b->err;
    kp_writer_init(&comp);
    if (codec != KP_CODEC_NONE && b->count > 0) {
        rc = kp_compress(codec, b->recs.buf, b->recs.len, &comp, KP_COMPRESS_LEVEL_DEFAULT);
        if (rc) {
            kp_writer_free(&comp);
            return rc;
        }
        data = comp.buf;
        data_len = comp.len;
    }
    if (b->hdr.attributes & KP_BATCH_ATTR_TIMESTAMP_TYPE)
        max_ts = b->hdr.maxTimestamp;
    else
        max_ts = b->count > 0 ? b->max_ts : b->hdr.maxTimestamp;
    kp_write_int64(out, b->hdr.baseOffset);
    kp_write_int32(out, (int32_t)(KP_BATCH_HEADER_SIZE - KP_BATCH_LOG_OVERHEAD + data_len));
    kp_write_int32(out, b->hdr.partitionLeaderEpoch);
    kp_write_int8(out, KP_BATCH_MAGIC);
    kp_write_int32(out, 0);
    kp_write_int16(out, b->hdr.attributes);
    kp_write_int32(out, b->hdr.lastOffsetDelta);
    kp_write_int64(out, b->hdr.baseTimestamp);
    kp_write_int64(out, max_ts);
    kp_write_int64(out, b->hdr.producerId);
    kp_write_int16(out, b->hdr.producerEpoch);
    kp_write_int32(out, b->hdr.baseSequence);
    kp_write_int32(out, b->count);
    if (data_len)
        kp_write_raw(out, data, data_len);
    kp_writer_free(&comp);
    if (out->err)
        return out->err;
    len = out->len - start;
    kb_rb_put_be(out->buf + start + KP_BATCH_CRC_OFFSET,
                 kp_batch_crc_compute(out->buf + start, len), 4);
    return 0;
}

void kb_rb_builder_free(kb_rb_builder_t *b)
{
    kp_writer_free(&b->recs);
}
