#include "kp_batch.h"

#include <string.h>

#include "kp_crc32c.h"
#include "kp_reader.h"

static inline uint32_t kp_batch_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t kp_batch_be64(const uint8_t *p)
{
    return ((uint64_t)kp_batch_be32(p) << 32) | kp_batch_be32(p + 4);
}

static inline void kp_batch_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline int kp_batch_fail(const char **errstr, int err, const char *why)
{
    if (errstr)
        *errstr = why;
    return err;
}

/* Wrapping adds: offsets and timestamps come from the wire and may be anything. */
static inline int64_t kp_batch_add64(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}

int kp_batch_hdr_decode(const void *buf, size_t len, kp_batch_hdr_t *hdr)
{
    const uint8_t *p = buf;

    if (len < KP_BATCH_HEADER_SIZE)
        return KP_E_TRUNCATED;
    hdr->baseOffset = (int64_t)kp_batch_be64(p);
    hdr->batchLength = (int32_t)kp_batch_be32(p + 8);
    hdr->partitionLeaderEpoch = (int32_t)kp_batch_be32(p + 12);
    hdr->magic = (int8_t)p[16];
    hdr->crc = kp_batch_be32(p + 17);
    hdr->attributes = (int16_t)(((uint16_t)p[21] << 8) | p[22]);
    hdr->lastOffsetDelta = (int32_t)kp_batch_be32(p + 23);
    hdr->baseTimestamp = (int64_t)kp_batch_be64(p + 27);
    hdr->maxTimestamp = (int64_t)kp_batch_be64(p + 35);
    hdr->producerId = (int64_t)kp_batch_be64(p + 43);
    hdr->producerEpoch = (int16_t)(((uint16_t)p[51] << 8) | p[52]);
    hdr->baseSequence = (int32_t)kp_batch_be32(p + 53);
    hdr->recordCount = (int32_t)kp_batch_be32(p + 57);
    return 0;
}

uint32_t kp_batch_crc_compute(const void *buf, size_t size)
{
    const uint8_t *p = buf;
    if (size < KP_BATCH_ATTR_OFFSET)
        return 0;
    return kp_crc32c(0, p + KP_BATCH_ATTR_OFFSET, size - KP_BATCH_ATTR_OFFSET);
}

int kp_batch_parse(const void *buf, size_t len, size_t max_size, unsigned flags, kp_batch_t *b,
                   const char **errstr)
{
    const uint8_t *p = buf;
    int32_t batch_len;
    size_t size;
    const kp_batch_hdr_t *h = &b->hdr;

    memset(b, 0, sizeof(*b));
    if (!p || len < KP_BATCH_LOG_OVERHEAD)
        return kp_batch_fail(errstr, KP_E_TRUNCATED, "input ends inside a batch's offset/length");
    batch_len = (int32_t)kp_batch_be32(p + KP_BATCH_LENGTH_OFFSET);
    /* The magic sits at byte 16 in every message format, so legacy message sets are told
     * apart as soon as it is visible, before their (different) length rules apply. */
    if (len > KP_BATCH_MAGIC_OFFSET) {
        int8_t magic = (int8_t)p[KP_BATCH_MAGIC_OFFSET];
        if (magic == 0 || magic == 1)
            return kp_batch_fail(errstr, KP_E_UNSUPPORTED,
                                 "unsupported message format (magic 0/1 message set)");
        if (magic != KP_BATCH_MAGIC)
            return kp_batch_fail(errstr, KP_E_CORRUPT, "unknown magic byte");
    }
    if (batch_len < KP_BATCH_MIN_LENGTH)
        return kp_batch_fail(errstr, KP_E_CORRUPT, "batchLength smaller than a v2 header");
    size = (size_t)batch_len + KP_BATCH_LOG_OVERHEAD;
    if (max_size && size > max_size)
        return kp_batch_fail(errstr, KP_E_TOO_LARGE, "batch larger than the configured maximum");
    if (size > len)
        return kp_batch_fail(errstr, KP_E_TRUNCATED, "input ends inside the batch");

    kp_batch_hdr_decode(p, size, &b->hdr);
    b->buf = p;
    b->size = size;
    b->records = p + KP_BATCH_HEADER_SIZE;
    b->records_len = size - KP_BATCH_HEADER_SIZE;

    if (!kp_codec_valid(kp_batch_hdr_codec(h)))
        return kp_batch_fail(errstr, KP_E_CORRUPT, "unknown compression codec id");
    if (h->recordCount < 0)
        return kp_batch_fail(errstr, KP_E_CORRUPT, "negative recordCount");
    if (h->lastOffsetDelta < 0)
        return kp_batch_fail(errstr, KP_E_CORRUPT, "negative lastOffsetDelta");
    /* Compaction may drop records (fewer than the offset span), never add any. */
    if ((int64_t)h->recordCount > (int64_t)h->lastOffsetDelta + 1)
        return kp_batch_fail(errstr, KP_E_CORRUPT, "recordCount exceeds lastOffsetDelta + 1");
    if (kp_batch_hdr_codec(h) == KP_CODEC_NONE &&
        ((size_t)h->recordCount > b->records_len / KP_RECORD_MIN_SIZE ||
         (h->recordCount == 0 && b->records_len != 0)))
        return kp_batch_fail(errstr, KP_E_CORRUPT, "recordCount does not fit the records bytes");
    if (!(flags & KP_BATCH_F_SKIP_CRC) && kp_batch_crc_compute(p, size) != h->crc)
        return kp_batch_fail(errstr, KP_E_CORRUPT, "CRC mismatch");
    return 0;
}

void kp_batch_iter_init(kp_batch_iter_t *it, const void *buf, size_t len, size_t max_size,
                        unsigned flags)
{
    memset(it, 0, sizeof(*it));
    it->buf = buf;
    it->len = buf ? len : 0;
    it->max_size = max_size;
    it->flags = flags;
}

int kp_batch_iter_next(kp_batch_iter_t *it, kp_batch_t *b)
{
    int rc;

    if (it->err)
        return it->err;
    if (it->pos >= it->len)
        return 0;
    rc = kp_batch_parse(it->buf + it->pos, it->len - it->pos, it->max_size, it->flags, b,
                        &it->errstr);
    if (rc == KP_E_TRUNCATED) {
        /* Fetch responses may end in a partial batch: that is the end, not an error. */
        it->trailing = it->len - it->pos;
        it->errstr = NULL;
        it->pos = it->len;
        return 0;
    }
    if (rc) {
        it->err = rc;
        return rc;
    }
    it->pos += b->size;
    return 1;
}

int kp_batch_chunk_check(const void *buf, size_t len, size_t max_size, unsigned flags,
                         kp_chunk_info_t *info)
{
    kp_batch_iter_t it;
    kp_batch_t b;
    int rc;
    int64_t prev_last = -1;

    memset(info, 0, sizeof(*info));
    info->first_offset = info->next_offset = -1;
    info->max_epoch = -1;
    info->max_timestamp = -1;
    info->bad_offset = -1;
    kp_batch_iter_init(&it, buf, len, max_size, flags);
    while ((rc = kp_batch_iter_next(&it, &b)) == 1) {
        const kp_batch_hdr_t *h = &b.hdr;
        const char *why = NULL;

        /* The next offset (last + 1) must be representable too. */
        if (h->baseOffset < 0 || h->baseOffset > INT64_MAX - 1 - h->lastOffsetDelta)
            why = "batch offsets out of range";
        else if (info->batch_cnt > 0 && h->baseOffset <= prev_last)
            why = "batch offsets do not increase";
        else if ((flags & KP_BATCH_F_EPOCH_MONOTONIC) && info->batch_cnt > 0 &&
                 h->partitionLeaderEpoch < info->max_epoch)
            why = "partition leader epoch decreases";
        if (why) {
            info->bad_pos = it.pos - b.size;
            info->bad_offset = h->baseOffset;
            info->errstr = why;
            return KP_E_CORRUPT;
        }
        if (info->batch_cnt++ == 0)
            info->first_offset = h->baseOffset;
        prev_last = kp_batch_hdr_last_offset(h);
        info->next_offset = prev_last + 1;
        if (h->partitionLeaderEpoch > info->max_epoch)
            info->max_epoch = h->partitionLeaderEpoch;
        if (h->maxTimestamp > info->max_timestamp)
            info->max_timestamp = h->maxTimestamp;
        info->valid_bytes = it.pos;
    }
    if (rc < 0) {
        info->bad_pos = it.pos;
        if (it.len - it.pos >= 8)
            info->bad_offset = (int64_t)kp_batch_be64(it.buf + it.pos);
        info->errstr = it.errstr;
        return rc;
    }
    info->trailing = it.trailing;
    return 0;
}

int kp_batch_set_base_offset(void *buf, size_t len, int64_t base_offset)
{
    uint8_t *p = buf;
    if (len < KP_BATCH_HEADER_SIZE)
        return KP_E_TRUNCATED;
    kp_batch_put_be32(p, (uint32_t)((uint64_t)base_offset >> 32));
    kp_batch_put_be32(p + 4, (uint32_t)base_offset);
    return 0;
}

int kp_batch_set_partition_leader_epoch(void *buf, size_t len, int32_t epoch)
{
    uint8_t *p = buf;
    if (len < KP_BATCH_HEADER_SIZE)
        return KP_E_TRUNCATED;
    kp_batch_put_be32(p + KP_BATCH_EPOCH_OFFSET, (uint32_t)epoch);
    return 0;
}

/* ---- records ----------------------------------------------------------------------------- */

void kp_record_iter_init_raw(kp_record_iter_t *it, const kp_batch_hdr_t *hdr, const void *data,
                             size_t len)
{
    static const uint8_t kp_record_iter_empty[1];

    memset(it, 0, sizeof(*it));
    /* Never NULL, so that buf + pos is always defined. */
    it->buf = data ? data : kp_record_iter_empty;
    it->len = data ? len : 0;
    it->hdr = *hdr;
    it->left = hdr->recordCount;
}

int kp_record_iter_init(kp_record_iter_t *it, const kp_batch_t *b, kp_writer_t *scratch,
                        size_t max_out)
{
    int codec = kp_batch_hdr_codec(&b->hdr);
    size_t start;
    int rc;

    kp_record_iter_init_raw(it, &b->hdr, b->records, b->records_len);
    if (codec == KP_CODEC_NONE)
        return 0;
    /* A compressed batch without records has nothing worth decompressing (the cleaner writes
     * its empty batches uncompressed anyway). */
    if (b->hdr.recordCount == 0) {
        it->len = 0;
        return 0;
    }
    if (!kp_codec_valid(codec)) {
        it->errstr = "unknown compression codec id";
        return it->err = KP_E_CORRUPT;
    }
    if (!scratch) {
        it->errstr = "compressed batch and no scratch buffer";
        return it->err = KP_E_INVALID;
    }
    start = scratch->len;
    rc = kp_decompress(codec, b->records, b->records_len, scratch, max_out);
    if (rc) {
        it->errstr = rc == KP_E_TOO_LARGE ? "decompressed records exceed the limit"
                                          : "cannot decompress the records";
        return it->err = rc;
    }
    /* Nothing decompressed: a growable writer may still have no buffer at all. */
    if (scratch->len > start) {
        it->buf = scratch->buf + start;
        it->len = scratch->len - start;
    } else {
        it->len = 0;
    }
    return 0;
}

static int kp_record_iter_fail(kp_record_iter_t *it, const char *why)
{
    it->errstr = why;
    return it->err = KP_E_CORRUPT;
}

/* Checks the headers of a record body; leaves rd after them. */
static const char *kp_record_headers_check(kp_reader_t *rd, int32_t cnt)
{
    int32_t i;
    if (cnt < 0)
        return "negative header count";
    if ((size_t)cnt > kp_reader_remaining(rd) / 2)
        return "header count larger than the record";
    for (i = 0; i < cnt && !rd->err; i++) {
        int32_t klen = kp_read_varint(rd), vlen;
        if (rd->err)
            break;
        if (klen < 0)
            return "null or negative header key length";
        kp_reader_skip(rd, (size_t)klen);
        vlen = kp_read_varint(rd);
        if (rd->err)
            break;
        if (vlen < -1)
            return "negative header value length";
        if (vlen > 0)
            kp_reader_skip(rd, (size_t)vlen);
    }
    return rd->err ? "header runs past the record" : NULL;
}

static kp_bytes_t kp_record_read_bytes(kp_reader_t *rd, const char **why)
{
    kp_bytes_t v = KP_BYTES_NULL;
    int32_t n = kp_read_varint(rd);
    if (rd->err)
        return v;
    if (n < -1) {
        *why = "negative key/value length";
        return v;
    }
    if (n == -1)
        return v;
    v.ptr = kp_read_raw(rd, (size_t)n);
    v.len = v.ptr ? n : -1;
    return v;
}

int kp_record_iter_next(kp_record_iter_t *it, kp_record_t *r)
{
    kp_reader_t top, rd;
    const uint8_t *body;
    const char *why = NULL;
    int32_t len;

    if (it->err)
        return it->err;
    if (it->left <= 0) {
        if (it->pos != it->len)
            return kp_record_iter_fail(it, "bytes left after the last record");
        return 0;
    }
    memset(r, 0, sizeof(*r));
    kp_reader_init(&top, it->buf + it->pos, it->len - it->pos);
    len = kp_read_varint(&top);
    if (top.err)
        return kp_record_iter_fail(it, "bad record length varint");
    if (len < 0)
        return kp_record_iter_fail(it, "negative record length");
    body = kp_read_raw(&top, (size_t)len);
    if (!body)
        return kp_record_iter_fail(it, "record runs past the batch");

    kp_reader_init(&rd, body, (size_t)len);
    r->length = len;
    r->attributes = kp_read_int8(&rd);
    r->timestampDelta = kp_read_varlong(&rd);
    r->offsetDelta = kp_read_varint(&rd);
    r->key = kp_record_read_bytes(&rd, &why);
    if (!why)
        r->value = kp_record_read_bytes(&rd, &why);
    if (!why) {
        r->header_cnt = kp_read_varint(&rd);
        if (!rd.err) {
            r->headers = body + rd.pos;
            why = kp_record_headers_check(&rd, r->header_cnt);
            r->headers_len = body + rd.pos - r->headers;
        }
    }
    if (!why && rd.err)
        why = "record fields run past the record length";
    if (!why && kp_reader_remaining(&rd))
        why = "bytes left inside the record";
    if (why)
        return kp_record_iter_fail(it, why);

    r->offset = kp_batch_add64(it->hdr.baseOffset, r->offsetDelta);
    r->timestamp = kp_batch_hdr_log_append_time(&it->hdr)
                       ? it->hdr.maxTimestamp
                       : kp_batch_add64(it->hdr.baseTimestamp, r->timestampDelta);
    it->pos += top.pos;
    it->left--;
    return 1;
}

int kp_record_header_next(const kp_record_t *r, size_t *pos, kp_record_header_t *h)
{
    kp_reader_t rd;
    int32_t n;

    if (!r->headers || *pos >= r->headers_len)
        return 0;
    /* The headers were validated when the record was read; the checks below only keep a
     * caller-supplied bad *pos from reading out of bounds. */
    kp_reader_init(&rd, r->headers + *pos, r->headers_len - *pos);
    n = kp_read_varint(&rd);
    if (n < 0)
        return 0;
    h->key.ptr = (const char *)kp_read_raw(&rd, (size_t)n);
    h->key.len = n;
    n = kp_read_varint(&rd);
    if (n < -1)
        return 0;
    h->value.len = n;
    h->value.ptr = n > 0 ? kp_read_raw(&rd, (size_t)n) : NULL;
    if (rd.err)
        return 0;
    if (!h->key.ptr)
        h->key.ptr = "";
    *pos += rd.pos;
    return 1;
}

/* ---- building ---------------------------------------------------------------------------- */

void kp_batch_opts_init(kp_batch_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->baseOffset = 0;
    o->partitionLeaderEpoch = KP_NO_PARTITION_LEADER_EPOCH;
    o->producerId = KP_NO_PRODUCER_ID;
    o->producerEpoch = KP_NO_PRODUCER_EPOCH;
    o->baseSequence = KP_NO_SEQUENCE;
    o->codec = KP_CODEC_NONE;
    o->level = KP_COMPRESS_LEVEL_DEFAULT;
}

void kp_batch_builder_init(kp_batch_builder_t *bb, const kp_batch_opts_t *opts)
{
    memset(bb, 0, sizeof(*bb));
    bb->opts = *opts;
    kp_writer_init(&bb->recs);
}

void kp_batch_builder_free(kp_batch_builder_t *bb)
{
    kp_writer_free(&bb->recs);
    bb->count = 0;
}

static size_t kp_batch_varbytes_size(kp_bytes_t b)
{
    return kp_varint_size(b.len < 0 ? -1 : b.len) + (b.len > 0 ? (size_t)b.len : 0);
}

static void kp_batch_write_varbytes(kp_writer_t *wr, kp_bytes_t b)
{
    kp_write_varint(wr, b.len < 0 ? -1 : b.len);
    if (b.len > 0)
        kp_write_raw(wr, b.ptr, (size_t)b.len);
}

int kp_batch_builder_add(kp_batch_builder_t *bb, int64_t timestamp, kp_bytes_t key,
                         kp_bytes_t value, const kp_record_header_t *hdrs, int32_t hdr_cnt)
{
    int64_t ts_delta;
    size_t body;
    int32_t i;

    if (bb->err)
        return bb->err;
    if (hdr_cnt < 0 || (hdr_cnt > 0 && !hdrs) || bb->count == INT32_MAX)
        return bb->err = KP_E_INVALID;
    if (bb->count == 0)
        bb->baseTimestamp = bb->maxTimestamp = timestamp;
    if (timestamp > bb->maxTimestamp)
        bb->maxTimestamp = timestamp;
    ts_delta = (int64_t)((uint64_t)timestamp - (uint64_t)bb->baseTimestamp);

    body = 1 + kp_varlong_size(ts_delta) + kp_varint_size(bb->count) + kp_batch_varbytes_size(key) +
           kp_batch_varbytes_size(value) + kp_varint_size(hdr_cnt);
    for (i = 0; i < hdr_cnt; i++) {
        if (hdrs[i].key.len < 0)
            return bb->err = KP_E_INVALID; /* header keys are never null */
        body += kp_varint_size(hdrs[i].key.len) + (size_t)hdrs[i].key.len +
                kp_batch_varbytes_size(hdrs[i].value);
    }
    if (body > INT32_MAX)
        return bb->err = KP_E_TOO_LARGE;

    kp_write_varint(&bb->recs, (int32_t)body);
    kp_write_int8(&bb->recs, 0); /* record attributes: unused, always 0 */
    kp_write_varlong(&bb->recs, ts_delta);
    kp_write_varint(&bb->recs, bb->count);
    kp_batch_write_varbytes(&bb->recs, key);
    kp_batch_write_varbytes(&bb->recs, value);
    kp_write_varint(&bb->recs, hdr_cnt);
    for (i = 0; i < hdr_cnt; i++) {
        kp_write_varint(&bb->recs, hdrs[i].key.len);
        kp_write_raw(&bb->recs, hdrs[i].key.ptr, (size_t)hdrs[i].key.len);
        kp_batch_write_varbytes(&bb->recs, hdrs[i].value);
    }
    if (bb->recs.err)
        return bb->err = bb->recs.err;
    bb->count++;
    return 0;
}

int kp_batch_builder_finish(kp_batch_builder_t *bb, kp_writer_t *out)
{
    const kp_batch_opts_t *o = &bb->opts;
    size_t start = out->len, size;
    int16_t attrs;
    int rc;

    if (bb->err)
        return bb->err;
    if (bb->count == 0)
        return KP_E_INVALID;
    if (out->err)
        return out->err;
    attrs = (int16_t)(o->codec & KP_BATCH_ATTR_COMPRESSION_MASK);
    if (o->log_append_time)
        attrs |= KP_BATCH_ATTR_TIMESTAMP_TYPE;
    if (o->transactional)
        attrs |= KP_BATCH_ATTR_TRANSACTIONAL;
    if (o->control)
        attrs |= KP_BATCH_ATTR_CONTROL;

    kp_write_int64(out, o->baseOffset);
    kp_write_int32(out, 0); /* batchLength, patched below */
    kp_write_int32(out, o->partitionLeaderEpoch);
    kp_write_int8(out, KP_BATCH_MAGIC);
    kp_write_int32(out, 0); /* crc, patched below */
    kp_write_int16(out, attrs);
    kp_write_int32(out, bb->count - 1);
    kp_write_int64(out, bb->baseTimestamp);
    kp_write_int64(out, o->log_append_time ? o->log_append_time_ms : bb->maxTimestamp);
    kp_write_int64(out, o->producerId);
    kp_write_int16(out, o->producerEpoch);
    kp_write_int32(out, o->baseSequence);
    kp_write_int32(out, bb->count);
    if (out->err) {
        rc = out->err;
        goto fail;
    }
    rc = kp_compress(o->codec, bb->recs.buf, bb->recs.len, out, o->level);
    if (rc)
        goto fail;
    size = out->len - start;
    if (size - KP_BATCH_LOG_OVERHEAD > INT32_MAX) {
        rc = KP_E_TOO_LARGE;
        goto fail;
    }
    kp_writer_patch_int32(out, start + KP_BATCH_LENGTH_OFFSET,
                          (int32_t)(size - KP_BATCH_LOG_OVERHEAD));
    kp_writer_patch_int32(out, start + KP_BATCH_CRC_OFFSET,
                          (int32_t)kp_batch_crc_compute(out->buf + start, size));
    return out->err;

fail:
    out->len = start;
    return rc;
}

/* ---- control batches --------------------------------------------------------------------- */

void kp_batch_opts_mirror_pid_reset(kp_batch_opts_t *o, int64_t base_offset, int32_t epoch)
{
    kp_batch_opts_init(o);
    o->baseOffset = base_offset;
    o->partitionLeaderEpoch = epoch;
    o->control = true;
}

int kp_batch_build_control(kp_writer_t *out, const kp_batch_opts_t *opts, int16_t type,
                           int32_t coordinator_epoch, int64_t timestamp)
{
    kp_batch_builder_t bb;
    kp_batch_opts_t o = *opts;
    uint8_t key[4], value[6];
    int rc;

    switch (type) {
    case KP_CONTROL_TYPE_ABORT:
    case KP_CONTROL_TYPE_COMMIT:
        /* A transaction marker belongs to a transactional producer. */
        if (!o.transactional || o.producerId < 0)
            return KP_E_INVALID;
        break;
    case KP_CONTROL_TYPE_MIRROR_PID_RESET:
        coordinator_epoch = 0; /* the reserved int32 of value version 0 */
        break;
    default:
        return KP_E_INVALID;
    }
    o.control = true;
    key[0] = 0; /* key version 0 */
    key[1] = 0;
    key[2] = (uint8_t)((uint16_t)type >> 8);
    key[3] = (uint8_t)type;
    value[0] = 0; /* value version 0 */
    value[1] = 0;
    kp_batch_put_be32(value + 2, (uint32_t)coordinator_epoch);

    kp_batch_builder_init(&bb, &o);
    rc =
        kp_batch_builder_add(&bb, timestamp, (kp_bytes_t){key, 4}, (kp_bytes_t){value, 6}, NULL, 0);
    if (!rc)
        rc = kp_batch_builder_finish(&bb, out);
    kp_batch_builder_free(&bb);
    return rc;
}

int kp_batch_control_type(const kp_batch_t *b, int16_t *type)
{
    kp_record_iter_t it;
    kp_record_t r;
    kp_control_t c;

    if (!kp_batch_hdr_is_control(&b->hdr))
        return KP_E_INVALID;
    if (kp_batch_hdr_codec(&b->hdr) != KP_CODEC_NONE)
        return KP_E_UNSUPPORTED;
    kp_record_iter_init_raw(&it, &b->hdr, b->records, b->records_len);
    if (kp_record_iter_next(&it, &r) != 1 || kp_control_parse(&r, &c, NULL))
        return KP_E_CORRUPT;
    *type = c.type;
    return 0;
}

int kp_control_parse(const kp_record_t *r, kp_control_t *c, const char **errstr)
{
    const uint8_t *k = r->key.ptr, *v = r->value.ptr;

    memset(c, 0, sizeof(*c));
    c->valueVersion = -1;
    c->coordinatorEpoch = -1;
    if (r->key.len < 4)
        return kp_batch_fail(errstr, KP_E_CORRUPT, "control record key shorter than 4 bytes");
    c->keyVersion = (int16_t)(((uint16_t)k[0] << 8) | k[1]);
    c->type = (int16_t)(((uint16_t)k[2] << 8) | k[3]);
    if (c->keyVersion < 0)
        return kp_batch_fail(errstr, KP_E_CORRUPT, "negative control key version");
    if (r->value.len >= 2) {
        c->valueVersion = (int16_t)(((uint16_t)v[0] << 8) | v[1]);
        if (c->valueVersion < 0)
            return kp_batch_fail(errstr, KP_E_CORRUPT, "negative control value version");
    }
    switch (c->type) {
    case KP_CONTROL_TYPE_ABORT:
    case KP_CONTROL_TYPE_COMMIT:
        if (r->value.len < 6)
            return kp_batch_fail(errstr, KP_E_CORRUPT, "transaction marker value too short");
        c->coordinatorEpoch = (int32_t)kp_batch_be32(v + 2);
        break;
    case KP_CONTROL_TYPE_MIRROR_PID_RESET:
        if (r->value.len < 2)
            return kp_batch_fail(errstr, KP_E_CORRUPT, "MIRROR_PID_RESET value too short");
        if (r->value.len >= 6)
            c->reserved = (int32_t)kp_batch_be32(v + 2);
        break;
    default:
        break; /* unknown control types are skipped by readers, as in Kafka */
    }
    return 0;
}
