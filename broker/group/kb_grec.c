/*
 * kb_grec.c -- __consumer_offsets record layouts and Java's String.hashCode (kb_grec.h).
 */
#include "kb_grec.h"

#include <stdlib.h>
#include <string.h>

#include "kp_reader.h"

/* ---- Java String.hashCode over UTF-8 input ------------------------------------------------- */

/* Decode one code point at s[*i] (n bytes in all). Malformed input gives U+FFFD and consumes
 * the maximal subpart of an ill-formed sequence (at least one byte), as Java's UTF-8 decoder
 * does for the String(byte[], UTF_8) constructor. */
static uint32_t kb_grec_utf8_next(const uint8_t *s, size_t n, size_t *i)
{
    uint8_t b0 = s[*i];
    uint32_t cp;
    size_t need, k;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */

    if (b0 < 0x80) {
        (*i)++;
        return b0;
    }
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
        cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        cp = b0 & 0x0F;
        if (b0 == 0xE0)
            lo = 0xA0; /* no overlongs */
        else if (b0 == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        cp = b0 & 0x07;
        if (b0 == 0xF0)
            lo = 0x90;
        else if (b0 == 0xF4)
            hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        (*i)++;
        return 0xFFFD;
    }
    (*i)++;
    for (k = 0; k < need; k++) {
        uint8_t b;
        if (*i >= n)
            return 0xFFFD;
        b = s[*i];
        if (k == 0 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
            return 0xFFFD; /* this byte starts the next sequence */
        cp = (cp << 6) | (b & 0x3F);
        (*i)++;
    }
    return cp;
}

int32_t kb_grec_java_hash(const char *s, size_t len)
{
    const uint8_t *u = (const uint8_t *)s;
    uint32_t h = 0;
    size_t i = 0;
    while (i < len) {
        uint32_t cp = kb_grec_utf8_next(u, len, &i);
        if (cp >= 0x10000) {
            cp -= 0x10000;
            h = 31 * h + (0xD800 + (cp >> 10));
            h = 31 * h + (0xDC00 + (cp & 0x3FF));
        } else {
            h = 31 * h + cp;
        }
    }
    return (int32_t)h;
}

int32_t kb_grec_partition_for(const char *s, size_t len, int32_t partitions)
{
    int32_t h = kb_grec_java_hash(s, len);
    int32_t a = h == INT32_MIN ? 0 : (h < 0 ? -h : h);
    return partitions > 0 ? a % partitions : 0;
}

/* ---- small schema helpers -------------------------------------------------------------------- */

static void kb_grec_wstr(kp_writer_t *wr, const char *s, int compact)
{
    kp_write_string(wr, s ? kp_str(s) : KP_STR_NULL, compact);
}

/* A string that must not be null. */
static kp_str_t kb_grec_rstr(kp_reader_t *rd, int compact)
{
    return kp_read_string(rd, compact, 0);
}

/* Skip a tag section (flexible versions); tag 0 of an offset value is the topic id. */
static void kb_grec_read_tags(kp_reader_t *rd, kp_uuid_t *topic_id)
{
    uint32_t n = kp_read_uvarint(rd);
    for (uint32_t i = 0; i < n && !rd->err; i++) {
        uint32_t tag = kp_read_uvarint(rd);
        uint32_t size = kp_read_uvarint(rd);
        if (tag == 0 && topic_id && size == 16) {
            kp_read_uuid(rd, topic_id);
            continue;
        }
        kp_reader_skip(rd, size);
    }
}

/* ---- keys ---------------------------------------------------------------------------------- */

void kb_grec_offset_key_write(kp_writer_t *wr, const char *group, const char *topic,
                              int32_t partition)
{
    kp_write_int16(wr, 1);
    kb_grec_wstr(wr, group, 0);
    kb_grec_wstr(wr, topic, 0);
    kp_write_int32(wr, partition);
}

void kb_grec_group_key_write(kp_writer_t *wr, const char *group)
{
    kp_write_int16(wr, 2);
    kb_grec_wstr(wr, group, 0);
}

int kb_grec_key_decode(const uint8_t *buf, size_t len, kb_grec_key_t *out)
{
    kp_reader_t rd;
    memset(out, 0, sizeof(*out));
    kp_reader_init(&rd, buf, len);
    out->version = kp_read_int16(&rd);
    if (rd.err || out->version < 0)
        return -1;
    switch (out->version) {
    case 0:
    case 1:
        out->type = KB_GREC_KEY_OFFSET;
        out->group = kb_grec_rstr(&rd, 0);
        out->topic = kb_grec_rstr(&rd, 0);
        out->partition = kp_read_int32(&rd);
        break;
    case 2:
        out->type = KB_GREC_KEY_GROUP;
        out->group = kb_grec_rstr(&rd, 0);
        break;
    default:
        out->type = KB_GREC_KEY_OTHER;
        return 0;
    }
    return rd.err || kp_reader_remaining(&rd) ? -1 : 0;
}

/* ---- offset commit values ------------------------------------------------------------------ */

static bool kb_grec_uuid_zero(const kp_uuid_t *u)
{
    static const kp_uuid_t zero;
    return memcmp(u, &zero, sizeof(zero)) == 0;
}

void kb_grec_offset_value_write_v(kp_writer_t *wr, const kb_grec_offset_t *v, int16_t version)
{
    kp_str_t md = v->metadata.len < 0 ? kp_str("") : v->metadata;
    int compact = version >= 4;
    kp_write_int16(wr, version);
    kp_write_int64(wr, v->offset);
    if (version >= 3)
        kp_write_int32(wr, v->leader_epoch);
    kp_write_string(wr, md, compact);
    kp_write_int64(wr, v->commit_ts);
    if (version == 1)
        kp_write_int64(wr, v->expire_ts);
    if (compact) {
        if (kb_grec_uuid_zero(&v->topic_id)) {
            kp_write_uvarint(wr, 0);
        } else {
            kp_write_uvarint(wr, 1);
            kp_write_uvarint(wr, 0);
            kp_write_uvarint(wr, 16);
            kp_write_uuid(wr, &v->topic_id);
        }
    }
}

void kb_grec_offset_value_write(kp_writer_t *wr, const kb_grec_offset_t *v)
{
    kb_grec_offset_value_write_v(wr, v, v->expire_ts >= 0 ? 1 : 4);
}

int kb_grec_offset_value_decode(const uint8_t *buf, size_t len, kb_grec_offset_t *out)
{
    kp_reader_t rd;
    int16_t ver;
    memset(out, 0, sizeof(*out));
    out->leader_epoch = -1;
    out->expire_ts = -1;
    kp_reader_init(&rd, buf, len);
    ver = kp_read_int16(&rd);
    if (rd.err || ver < 0 || ver > 4)
        return -1;
    out->offset = kp_read_int64(&rd);
    if (ver >= 3)
        out->leader_epoch = kp_read_int32(&rd);
    out->metadata = kb_grec_rstr(&rd, ver >= 4);
    out->commit_ts = kp_read_int64(&rd);
    if (ver == 1)
        out->expire_ts = kp_read_int64(&rd);
    if (ver >= 4)
        kb_grec_read_tags(&rd, &out->topic_id);
    return rd.err || kp_reader_remaining(&rd) ? -1 : 0;
}

/* ---- group metadata values ----------------------------------------------------------------- */

static void kb_grec_wview(kp_writer_t *wr, kp_str_t s, int compact)
{
    kp_write_string(wr, s, compact);
}

void kb_grec_group_value_write_v(kp_writer_t *wr, const kb_grec_group_t *v, int16_t version)
{
    int c = version >= 4;
    kp_write_int16(wr, version);
    kb_grec_wview(wr, v->protocol_type.len < 0 ? kp_str("") : v->protocol_type, c);
    kp_write_int32(wr, v->generation);
    kb_grec_wview(wr, v->protocol, c);
    kb_grec_wview(wr, v->leader, c);
    if (version >= 2)
        kp_write_int64(wr, v->state_ts);
    kp_write_array_len(wr, v->member_cnt, c);
    for (int32_t i = 0; i < v->member_cnt; i++) {
        const kb_grec_member_t *m = &v->members[i];
        kb_grec_wview(wr, m->member_id, c);
        if (version >= 3)
            kb_grec_wview(wr, m->instance_id, c);
        kb_grec_wview(wr, m->client_id, c);
        kb_grec_wview(wr, m->client_host, c);
        if (version >= 1)
            kp_write_int32(wr, m->rebalance_timeout);
        kp_write_int32(wr, m->session_timeout);
        kp_write_bytes(wr, m->subscription.len < 0 ? (kp_bytes_t){NULL, 0} : m->subscription, c);
        kp_write_bytes(wr, m->assignment.len < 0 ? (kp_bytes_t){NULL, 0} : m->assignment, c);
        if (c)
            kp_write_uvarint(wr, 0);
    }
    if (c)
        kp_write_uvarint(wr, 0);
}

void kb_grec_group_value_write(kp_writer_t *wr, const kb_grec_group_t *v)
{
    kb_grec_group_value_write_v(wr, v, 3);
}

int kb_grec_group_value_decode(const uint8_t *buf, size_t len, kb_grec_group_t *out)
{
    kp_reader_t rd;
    int16_t ver;
    int c;
    int32_t n;
    memset(out, 0, sizeof(*out));
    out->state_ts = -1;
    kp_reader_init(&rd, buf, len);
    ver = kp_read_int16(&rd);
    if (rd.err || ver < 0 || ver > 4)
        return -1;
    c = ver >= 4;
    out->protocol_type = kb_grec_rstr(&rd, c);
    out->generation = kp_read_int32(&rd);
    out->protocol = kp_read_string(&rd, c, 1);
    out->leader = kp_read_string(&rd, c, 1);
    if (ver >= 2)
        out->state_ts = kp_read_int64(&rd);
    /* smallest member: four empty strings, two int32, two empty byte arrays */
    n = kp_read_array_len(&rd, c, 0, c ? 14 : 24);
    if (rd.err || n < 0)
        return -1;
    if (n > 0) {
        out->members = calloc((size_t)n, sizeof(*out->members));
        if (!out->members)
            return -1;
    }
    out->member_cnt = n;
    for (int32_t i = 0; i < n && !rd.err; i++) {
        kb_grec_member_t *m = &out->members[i];
        m->member_id = kb_grec_rstr(&rd, c);
        m->instance_id = ver >= 3 ? kp_read_string(&rd, c, 1) : KP_STR_NULL;
        m->client_id = kb_grec_rstr(&rd, c);
        m->client_host = kb_grec_rstr(&rd, c);
        m->rebalance_timeout = ver >= 1 ? kp_read_int32(&rd) : -1;
        m->session_timeout = kp_read_int32(&rd);
        if (ver == 0)
            m->rebalance_timeout = m->session_timeout;
        m->subscription = kp_read_bytes(&rd, c, 0);
        m->assignment = kp_read_bytes(&rd, c, 0);
        if (c)
            kb_grec_read_tags(&rd, NULL);
    }
    if (c)
        kb_grec_read_tags(&rd, NULL);
    return rd.err || kp_reader_remaining(&rd) ? -1 : 0;
}
