/*
 * kb_meta_rec.c -- metadata records in Kafka's KRaft framing (see kb_meta_rec.h).
 */
#include "kb_meta_rec.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kp_reader.h"

void kb_mrec_init(kb_mrec_t *r, int16_t type)
{
    memset(r, 0, sizeof(*r));
    r->type = type;
    r->partition = -1;
    r->leader = type == KB_MREC_PARTITION_CHANGE ? KB_MREC_NO_LEADER_CHANGE : -1;
    r->leader_epoch = -1;
    r->partition_epoch = -1;
    r->broker_epoch = -1;
    if (type == KB_MREC_PARTITION_CHANGE)
        r->nreplicas = r->nisr = -1;
}

void kb_mrec_clear(kb_mrec_t *r)
{
    free(r->name);
    free(r->replicas);
    free(r->isr);
    free(r->resource_name);
    free(r->key);
    free(r->value);
    kb_mrec_init(r, r->type);
}

const char *kb_mrec_type_name(int16_t type)
{
    switch (type) {
    case KB_MREC_TOPIC:
        return "TopicRecord";
    case KB_MREC_PARTITION:
        return "PartitionRecord";
    case KB_MREC_CONFIG:
        return "ConfigRecord";
    case KB_MREC_PARTITION_CHANGE:
        return "PartitionChangeRecord";
    case KB_MREC_REMOVE_TOPIC:
        return "RemoveTopicRecord";
    case KB_MREC_PRODUCER_IDS:
        return "ProducerIdsRecord";
    default:
        return "unknown";
    }
}

/* ---- encoding ----------------------------------------------------------------------------- */

static void kb_mrec_wstr(kp_writer_t *wr, const char *s)
{
    kp_str_t v = {s, s ? (int32_t)strlen(s) : -1};
    kp_write_string(wr, v, 1);
}

static void kb_mrec_wints(kp_writer_t *wr, const int32_t *v, int32_t n)
{
    kp_write_array_len(wr, n, 1);
    for (int32_t i = 0; i < n; i++)
        kp_write_int32(wr, v[i]);
}

static size_t kb_mrec_ints_size(int32_t n)
{
    return kp_array_len_size(n, 1) + (n > 0 ? (size_t)n * 4 : 0);
}

int kb_mrec_encode(const kb_mrec_t *r, kp_writer_t *wr)
{
    kp_write_uvarint(wr, KB_MREC_FRAME_VERSION);
    kp_write_uvarint(wr, (uint32_t)r->type);
    kp_write_uvarint(wr, 0); /* every type is written at version 0 */
    switch (r->type) {
    case KB_MREC_TOPIC:
        kb_mrec_wstr(wr, r->name ? r->name : "");
        kp_write_uuid(wr, &r->topic_id);
        kp_write_uvarint(wr, 0);
        break;
    case KB_MREC_PARTITION:
        kp_write_int32(wr, r->partition);
        kp_write_uuid(wr, &r->topic_id);
        kb_mrec_wints(wr, r->replicas, r->nreplicas);
        kb_mrec_wints(wr, r->isr, r->nisr);
        kb_mrec_wints(wr, NULL, 0); /* RemovingReplicas */
        kb_mrec_wints(wr, NULL, 0); /* AddingReplicas */
        kp_write_int32(wr, r->leader);
        kp_write_int32(wr, r->leader_epoch);
        kp_write_int32(wr, r->partition_epoch);
        kp_write_uvarint(wr, 0);
        break;
    case KB_MREC_CONFIG:
        kp_write_int8(wr, r->resource_type);
        kb_mrec_wstr(wr, r->resource_name ? r->resource_name : "");
        kb_mrec_wstr(wr, r->key ? r->key : "");
        kb_mrec_wstr(wr, r->value);
        kp_write_uvarint(wr, 0);
        break;
    case KB_MREC_PARTITION_CHANGE: {
        uint32_t ntags = (r->nisr >= 0) + (r->leader != KB_MREC_NO_LEADER_CHANGE) +
                         (r->nreplicas >= 0) + (r->leader_epoch >= 0);
        kp_write_int32(wr, r->partition);
        kp_write_uuid(wr, &r->topic_id);
        kp_write_uvarint(wr, ntags);
        /* tagged fields in ascending tag order */
        if (r->nisr >= 0) {
            kp_write_uvarint(wr, 0);
            kp_write_uvarint(wr, (uint32_t)kb_mrec_ints_size(r->nisr));
            kb_mrec_wints(wr, r->isr, r->nisr);
        }
        if (r->leader != KB_MREC_NO_LEADER_CHANGE) {
            kp_write_uvarint(wr, 1);
            kp_write_uvarint(wr, 4);
            kp_write_int32(wr, r->leader);
        }
        if (r->nreplicas >= 0) {
            kp_write_uvarint(wr, 2);
            kp_write_uvarint(wr, (uint32_t)kb_mrec_ints_size(r->nreplicas));
            kb_mrec_wints(wr, r->replicas, r->nreplicas);
        }
        if (r->leader_epoch >= 0) {
            kp_write_uvarint(wr, KB_MREC_TAG_LEADER_EPOCH);
            kp_write_uvarint(wr, 4);
            kp_write_int32(wr, r->leader_epoch);
        }
        break;
    }
    case KB_MREC_REMOVE_TOPIC:
        kp_write_uuid(wr, &r->topic_id);
        kp_write_uvarint(wr, 0);
        break;
    case KB_MREC_PRODUCER_IDS:
        kp_write_int32(wr, r->broker_id);
        kp_write_int64(wr, r->broker_epoch);
        kp_write_int64(wr, r->next_producer_id);
        kp_write_uvarint(wr, 0);
        break;
    default:
        return kp_writer_fail(wr, KP_E_INVALID);
    }
    return wr->err;
}

/* ---- decoding ----------------------------------------------------------------------------- */

/* A compact string as a malloc'd C string; NULL for null (or on failure, with rd failed). An
 * embedded NUL is refused: names and config values are C strings everywhere else. */
static char *kb_mrec_rstr(kp_reader_t *rd, int nullable, bool *is_null)
{
    kp_str_t s = kp_read_string(rd, 1, nullable);
    char *out;
    *is_null = false;
    if (rd->err)
        return NULL;
    if (s.len < 0) {
        *is_null = true;
        return NULL;
    }
    if (memchr(s.ptr, '\0', (size_t)s.len)) {
        kp_reader_fail(rd, KP_E_INVALID, "string with a NUL byte");
        return NULL;
    }
    out = malloc((size_t)s.len + 1);
    if (!out) {
        kp_reader_fail(rd, KP_E_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(out, s.ptr, (size_t)s.len);
    out[s.len] = '\0';
    return out;
}

/* A compact int32 array; *n = -1 for null. */
static int32_t *kb_mrec_rints(kp_reader_t *rd, int nullable, int32_t *n)
{
    int32_t cnt = kp_read_array_len(rd, 1, nullable, 4);
    int32_t *v;
    *n = 0;
    if (rd->err)
        return NULL;
    if (cnt < 0) {
        *n = -1;
        return NULL;
    }
    if (cnt > KB_MREC_MAX_REPLICAS) {
        kp_reader_fail(rd, KP_E_INVALID, "too many replicas");
        return NULL;
    }
    v = malloc(((size_t)cnt + 1) * sizeof(*v));
    if (!v) {
        kp_reader_fail(rd, KP_E_NOMEM, "out of memory");
        return NULL;
    }
    for (int32_t i = 0; i < cnt; i++)
        v[i] = kp_read_int32(rd);
    *n = cnt;
    return v;
}

/* Tagged fields: @p fn handles the known ones (returns 1 when it consumed the field). */
typedef int (*kb_mrec_tag_fn)(kb_mrec_t *r, uint32_t tag, kp_reader_t *fr);

static void kb_mrec_rtags(kp_reader_t *rd, kb_mrec_t *r, kb_mrec_tag_fn fn)
{
    uint32_t n = kp_read_uvarint(rd);
    int64_t last = -1;
    for (uint32_t i = 0; i < n && !rd->err; i++) {
        uint32_t tag = kp_read_uvarint(rd), size = kp_read_uvarint(rd);
        const uint8_t *p;
        if (rd->err)
            return;
        if ((int64_t)tag <= last) {
            kp_reader_fail(rd, KP_E_INVALID, "tagged fields out of order");
            return;
        }
        last = tag;
        p = kp_read_raw(rd, size);
        if (!p && size)
            return;
        if (fn) {
            kp_reader_t fr;
            kp_reader_init(&fr, p, size);
            if (fn(r, tag, &fr) == 1 && (fr.err || kp_reader_remaining(&fr))) {
                kp_reader_fail(rd, fr.err ? fr.err : KP_E_INVALID,
                               fr.errstr ? fr.errstr : "tagged field size mismatch");
                return;
            }
        }
    }
}

static int kb_mrec_change_tag(kb_mrec_t *r, uint32_t tag, kp_reader_t *fr)
{
    switch (tag) {
    case 0:
        free(r->isr);
        r->isr = kb_mrec_rints(fr, 1, &r->nisr);
        return 1;
    case 1:
        r->leader = kp_read_int32(fr);
        return 1;
    case 2:
        free(r->replicas);
        r->replicas = kb_mrec_rints(fr, 1, &r->nreplicas);
        return 1;
    case KB_MREC_TAG_LEADER_EPOCH:
        r->leader_epoch = kp_read_int32(fr);
        if (!fr->err && r->leader_epoch < 0)
            kp_reader_fail(fr, KP_E_INVALID, "negative leader epoch");
        return 1;
    default:
        return 0; /* RemovingReplicas, AddingReplicas, LeaderRecoveryState, ELR, directories */
    }
}

int kb_mrec_decode(kb_mrec_t *r, const void *buf, size_t len, char *err, size_t err_size)
{
    kp_reader_t rd;
    uint32_t frame, type, version;
    bool null;
    int32_t n;

    kb_mrec_init(r, -1);
    kp_reader_init(&rd, buf, len);
    frame = kp_read_uvarint(&rd);
    type = kp_read_uvarint(&rd);
    version = kp_read_uvarint(&rd);
    if (rd.err) {
        snprintf(err, err_size, "truncated record frame");
        return -1;
    }
    if (frame != KB_MREC_FRAME_VERSION) {
        snprintf(err, err_size, "unknown frame version %u", frame);
        return -1;
    }
    if (type > INT16_MAX) {
        snprintf(err, err_size, "unknown record type %u", type);
        return -1;
    }
    kb_mrec_init(r, (int16_t)type);
    r->version = (int16_t)(version > INT16_MAX ? INT16_MAX : version);
    switch (type) {
    case KB_MREC_TOPIC:
    case KB_MREC_CONFIG:
    case KB_MREC_REMOVE_TOPIC:
    case KB_MREC_PRODUCER_IDS:
        if (version != 0)
            goto badver;
        break;
    case KB_MREC_PARTITION:
    case KB_MREC_PARTITION_CHANGE:
        if (version > 2)
            goto badver;
        break;
    default:
        snprintf(err, err_size, "unknown record type %u", type);
        return -1;
    }
    switch (type) {
    case KB_MREC_TOPIC:
        r->name = kb_mrec_rstr(&rd, 0, &null);
        kp_read_uuid(&rd, &r->topic_id);
        kb_mrec_rtags(&rd, r, NULL);
        break;
    case KB_MREC_PARTITION:
        r->partition = kp_read_int32(&rd);
        kp_read_uuid(&rd, &r->topic_id);
        r->replicas = kb_mrec_rints(&rd, 0, &r->nreplicas);
        r->isr = kb_mrec_rints(&rd, 0, &r->nisr);
        n = kp_read_array_len(&rd, 1, 0, 4); /* RemovingReplicas */
        kp_reader_skip(&rd, n > 0 ? (size_t)n * 4 : 0);
        n = kp_read_array_len(&rd, 1, 0, 4); /* AddingReplicas */
        kp_reader_skip(&rd, n > 0 ? (size_t)n * 4 : 0);
        r->leader = kp_read_int32(&rd);
        r->leader_epoch = kp_read_int32(&rd);
        r->partition_epoch = kp_read_int32(&rd);
        if (version >= 1) { /* Directories */
            n = kp_read_array_len(&rd, 1, 0, 16);
            kp_reader_skip(&rd, n > 0 ? (size_t)n * 16 : 0);
        }
        kb_mrec_rtags(&rd, r, NULL);
        break;
    case KB_MREC_CONFIG:
        r->resource_type = kp_read_int8(&rd);
        r->resource_name = kb_mrec_rstr(&rd, 0, &null);
        r->key = kb_mrec_rstr(&rd, 0, &null);
        r->value = kb_mrec_rstr(&rd, 1, &null);
        kb_mrec_rtags(&rd, r, NULL);
        break;
    case KB_MREC_PARTITION_CHANGE:
        r->partition = kp_read_int32(&rd);
        kp_read_uuid(&rd, &r->topic_id);
        kb_mrec_rtags(&rd, r, kb_mrec_change_tag);
        break;
    case KB_MREC_REMOVE_TOPIC:
        kp_read_uuid(&rd, &r->topic_id);
        kb_mrec_rtags(&rd, r, NULL);
        break;
    case KB_MREC_PRODUCER_IDS:
        r->broker_id = kp_read_int32(&rd);
        r->broker_epoch = kp_read_int64(&rd);
        r->next_producer_id = kp_read_int64(&rd);
        kb_mrec_rtags(&rd, r, NULL);
        break;
    }
    if (!rd.err && kp_reader_remaining(&rd))
        kp_reader_fail(&rd, KP_E_INVALID, "trailing bytes");
    if (rd.err) {
        snprintf(err, err_size, "%s v%u: %s", kb_mrec_type_name((int16_t)type), version,
                 rd.errstr ? rd.errstr : "malformed");
        kb_mrec_clear(r);
        return -1;
    }
    return 0;
badver:
    snprintf(err, err_size, "%s: unsupported version %u", kb_mrec_type_name((int16_t)type),
             version);
    return -1;
}
