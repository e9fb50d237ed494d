/*
 * kb_txnlog.c -- __transaction_state record formats and Java's String.hashCode().
 */
#include "kb_txnlog.h"

#include <stdlib.h>
#include <string.h>

#include "kb_err.h"
#include "kp_reader.h"

const char *kb_txnlog_state_name(int state)
{
    static const char *const names[] = {"Empty",        "Ongoing",          "PrepareCommit",
                                        "PrepareAbort", "CompleteCommit",   "CompleteAbort",
                                        "Dead",         "PrepareEpochFence"};
    if (state < 0 || state >= (int)(sizeof(names) / sizeof(names[0])))
        return "Unknown";
    return names[state];
}

/* ---- Java String.hashCode over the UTF-16 form of UTF-8 input -------------------------------- */

/* Decode one code point at @p p (@p n bytes left) as Java's UTF-8 decoder does (String's
 * constructor): an ill-formed sequence becomes one U+FFFD covering the longest prefix of a
 * well-formed sequence (at least one byte; Unicode's "maximal subpart"), except that Java
 * takes ED A0..BF as the start of a three-byte sequence and replaces an encoded surrogate
 * (ED A0..BF 80..BF) with a single U+FFFD. Returns the bytes consumed. */
static size_t kb_txnlog_utf8_next(const uint8_t *p, size_t n, uint32_t *cp)
{
    uint8_t b0 = p[0], lo = 0x80, hi = 0xBF;
    size_t need, i;
    uint32_t c;

    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
        c = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        c = b0 & 0x0F;
        if (b0 == 0xE0)
            lo = 0xA0;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        c = b0 & 0x07;
        if (b0 == 0xF0)
            lo = 0x90;
        else if (b0 == 0xF4)
            hi = 0x8F;
    } else {
        *cp = 0xFFFD;
        return 1;
    }
    for (i = 1; i <= need; i++) {
        if (i >= n || p[i] < lo || p[i] > hi) {
            *cp = 0xFFFD;
            return i;
        }
        c = (c << 6) | (p[i] & 0x3F);
        lo = 0x80;
        hi = 0xBF;
    }
    *cp = c >= 0xD800 && c <= 0xDFFF ? 0xFFFD : c;
    return need + 1;
}

int32_t kb_txnlog_java_hash(const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    uint32_t h = 0, cp;
    size_t i = 0;

    /* Unsigned arithmetic wraps as Java's int does. */
    while (i < len) {
        i += kb_txnlog_utf8_next(p + i, len - i, &cp);
        if (cp >= 0x10000) {
            cp -= 0x10000;
            h = 31u * h + (0xD800u + (cp >> 10));
            h = 31u * h + (0xDC00u + (cp & 0x3FFu));
        } else {
            h = 31u * h + cp;
        }
    }
    return (int32_t)h;
}

int32_t kb_txnlog_partition_for(const char *id, size_t len, int32_t partitions)
{
    int32_t h = kb_txnlog_java_hash(id, len);
    if (partitions <= 0)
        return 0;
    if (h == INT32_MIN)
        h = 0;
    else if (h < 0)
        h = -h;
    return h % partitions;
}

/* ---- key ------------------------------------------------------------------------------------- */

int kb_txnlog_key_encode(kp_writer_t *wr, const char *txn_id, size_t len)
{
    kp_write_int16(wr, 0);
    kp_write_string(wr, (kp_str_t){txn_id, (int32_t)len}, 0);
    return wr->err ? KB_E_NOMEM : 0;
}

int kb_txnlog_key_decode(const uint8_t *buf, size_t len, char **id)
{
    kp_reader_t rd;
    kp_str_t s;
    int16_t ver;

    *id = NULL;
    kp_reader_init(&rd, buf, len);
    ver = kp_read_int16(&rd);
    if (rd.err)
        return KB_E_PARSE;
    if (ver != 0)
        return KB_E_UNSUPPORTED;
    s = kp_read_string(&rd, 0, 0);
    if (rd.err)
        return KB_E_PARSE;
    *id = malloc((size_t)s.len + 1);
    if (!*id)
        return KB_E_NOMEM;
    memcpy(*id, s.ptr, (size_t)s.len);
    (*id)[s.len] = '\0';
    return 0;
}

/* ---- value ----------------------------------------------------------------------------------- */

int kb_txnlog_value_encode(kp_writer_t *wr, const kb_txnlog_value_t *v, int16_t version)
{
    int compact = version >= 1;
    size_t i, j;
    int32_t ntopics = 0;

    if (version < 0 || version > 1)
        return KB_E_INVALID;
    kp_write_int16(wr, version);
    kp_write_int64(wr, v->producer_id);
    kp_write_int16(wr, v->producer_epoch);
    kp_write_int32(wr, v->timeout_ms);
    kp_write_int8(wr, v->state);
    if (v->partitions_null) {
        kp_write_array_len(wr, -1, compact);
    } else {
        for (i = 0; i < v->tp_cnt; i = j) {
            for (j = i + 1; j < v->tp_cnt && !strcmp(v->tps[j].topic, v->tps[i].topic); j++)
                ;
            ntopics++;
        }
        kp_write_array_len(wr, ntopics, compact);
        for (i = 0; i < v->tp_cnt; i = j) {
            for (j = i + 1; j < v->tp_cnt && !strcmp(v->tps[j].topic, v->tps[i].topic); j++)
                ;
            kp_write_string(wr, (kp_str_t){v->tps[i].topic, (int32_t)strlen(v->tps[i].topic)},
                            compact);
            kp_write_array_len(wr, (int32_t)(j - i), compact);
            for (size_t k = i; k < j; k++)
                kp_write_int32(wr, v->tps[k].partition);
            if (compact)
                kp_write_uvarint(wr, 0); /* the entry's tag section */
        }
    }
    kp_write_int64(wr, v->last_update_ms);
    kp_write_int64(wr, v->start_ms);
    if (compact) {
        uint32_t ntags = (v->prev_producer_id != -1) + (v->next_producer_id != -1) +
                         (v->client_txn_version != 0) + (v->next_producer_epoch != -1);
        kp_write_uvarint(wr, ntags);
        if (v->prev_producer_id != -1) {
            kp_write_uvarint(wr, 0);
            kp_write_uvarint(wr, 8);
            kp_write_int64(wr, v->prev_producer_id);
        }
        if (v->next_producer_id != -1) {
            kp_write_uvarint(wr, 1);
            kp_write_uvarint(wr, 8);
            kp_write_int64(wr, v->next_producer_id);
        }
        if (v->client_txn_version != 0) {
            kp_write_uvarint(wr, 2);
            kp_write_uvarint(wr, 2);
            kp_write_int16(wr, v->client_txn_version);
        }
        if (v->next_producer_epoch != -1) {
            kp_write_uvarint(wr, 3);
            kp_write_uvarint(wr, 2);
            kp_write_int16(wr, v->next_producer_epoch);
        }
    }
    return wr->err ? KB_E_NOMEM : 0;
}

void kb_txnlog_value_free(kb_txnlog_value_t *v)
{
    for (size_t i = 0; i < v->tp_cnt; i++)
        free(v->tps[i].topic);
    free(v->tps);
    v->tps = NULL;
    v->tp_cnt = 0;
}

static int kb_txnlog_tp_cmp(const void *a, const void *b)
{
    const kb_txn_tp_t *x = a, *y = b;
    int c = strcmp(x->topic, y->topic);
    if (c)
        return c;
    return x->partition < y->partition ? -1 : x->partition > y->partition;
}

/* Read one tag section of a flexible struct; with @p v, known tags of the value record are
 * stored. Returns 0 or KB_E_PARSE. */
static int kb_txnlog_read_tags(kp_reader_t *rd, kb_txnlog_value_t *v)
{
    uint32_t n = kp_read_uvarint(rd);
    for (uint32_t i = 0; i < n && !rd->err; i++) {
        uint32_t tag = kp_read_uvarint(rd), size = kp_read_uvarint(rd);
        kp_reader_t sub;
        const uint8_t *p = kp_read_raw(rd, size);
        if (rd->err)
            break;
        kp_reader_init(&sub, p, size);
        if (v && tag == 0 && size == 8)
            v->prev_producer_id = kp_read_int64(&sub);
        else if (v && tag == 1 && size == 8)
            v->next_producer_id = kp_read_int64(&sub);
        else if (v && tag == 2 && size == 2)
            v->client_txn_version = kp_read_int16(&sub);
        else if (v && tag == 3 && size == 2)
            v->next_producer_epoch = kp_read_int16(&sub);
    }
    return rd->err ? KB_E_PARSE : 0;
}

int kb_txnlog_value_decode(const uint8_t *buf, size_t len, kb_txnlog_value_t *v)
{
    kp_reader_t rd;
    int compact;
    int32_t ntopics;
    size_t cap = 0;
    int rc = KB_E_PARSE;

    memset(v, 0, sizeof(*v));
    v->prev_producer_id = -1;
    v->next_producer_id = -1;
    v->next_producer_epoch = -1;
    kp_reader_init(&rd, buf, len);
    v->version = kp_read_int16(&rd);
    if (rd.err)
        return KB_E_PARSE;
    if (v->version < 0 || v->version > 1)
        return KB_E_UNSUPPORTED;
    compact = v->version >= 1;
    v->producer_id = kp_read_int64(&rd);
    v->producer_epoch = kp_read_int16(&rd);
    v->timeout_ms = kp_read_int32(&rd);
    v->state = kp_read_int8(&rd);
    ntopics = kp_read_array_len(&rd, compact, 1, compact ? 3 : 6);
    if (rd.err)
        goto fail;
    v->partitions_null = ntopics < 0;
    for (int32_t t = 0; t < ntopics; t++) {
        kp_str_t topic = kp_read_string(&rd, compact, 0);
        int32_t np = kp_read_array_len(&rd, compact, 0, 4);
        if (rd.err)
            goto fail;
        for (int32_t k = 0; k < np; k++) {
            int32_t part = kp_read_int32(&rd);
            kb_txn_tp_t *tp;
            if (rd.err)
                goto fail;
            if (v->tp_cnt == cap) {
                size_t ncap = cap ? cap * 2 : 8;
                kb_txn_tp_t *n = realloc(v->tps, ncap * sizeof(*n));
                if (!n) {
                    rc = KB_E_NOMEM;
                    goto fail;
                }
                v->tps = n;
                cap = ncap;
            }
            tp = &v->tps[v->tp_cnt];
            tp->topic = malloc((size_t)topic.len + 1);
            if (!tp->topic) {
                rc = KB_E_NOMEM;
                goto fail;
            }
            memcpy(tp->topic, topic.ptr, (size_t)topic.len);
            tp->topic[topic.len] = '\0';
            tp->partition = part;
            v->tp_cnt++;
        }
        if (compact && kb_txnlog_read_tags(&rd, NULL) != 0)
            goto fail;
    }
    v->last_update_ms = kp_read_int64(&rd);
    v->start_ms = kp_read_int64(&rd);
    if (compact && kb_txnlog_read_tags(&rd, v) != 0)
        goto fail;
    if (rd.err)
        goto fail;
    if (v->tp_cnt > 1)
        qsort(v->tps, v->tp_cnt, sizeof(*v->tps), kb_txnlog_tp_cmp);
    return 0;
fail:
    kb_txnlog_value_free(v);
    return rc;
}
