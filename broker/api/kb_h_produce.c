/*
 * kb_h_produce.c -- Produce v3-13 (ApiVersions advertises 0-13, see kb_apiversions.c).
 *
 * Per partition, in Kafka's order: unknown topic / partition (UNKNOWN_TOPIC_ID by id in v13),
 * internal topics refused to clients, the write mode (READ_ONLY_TOPIC; pending ->
 * NOT_ENOUGH_REPLICAS "mirror partition is being stopped; retry"), acks=all against
 * min.insync.replicas, exactly one magic-2 batch (v3+), zstd needs v7+, transactional batches
 * through the transaction hook, then the storage engine's validation (CRC, sizes vs
 * max.message.bytes, record offsets, keys on compacted topics, timestamps) and the leader
 * append (offsets, leader epoch, LogAppendTime, producer sequence checks: a duplicate batch
 * answers NONE with the offset it got the first time). Batches in another codec than the
 * topic's compression.type are recompressed. A follower answers NOT_LEADER_OR_FOLLOWER.
 *
 * acks=all (Kafka's delayed produce): an ISR smaller than min.insync.replicas answers
 * NOT_ENOUGH_REPLICAS before the append. After it the HW moves as far as the maximal ISR
 * allows (at once with the single-broker replica set); a partition whose HW is not past the
 * batch yet makes the request wait in kb_dq until it is (NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND
 * if the ISR then is smaller than min.insync.replicas), until TimeoutMs (REQUEST_TIMED_OUT) or
 * until this broker stops leading the partition (NOT_LEADER_OR_FOLLOWER). acks=1 answers after
 * the local append; acks=0 sends no response.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kb_api_int.h"
#include "kb_apilog.h"
#include "kb_dq.h"
#include "kb_err.h"
#include "kb_rb.h"
#include "kb_time.h"
#include "kp_batch.h"
#include "kp_errcode.h"

/* Rebuild the one batch in @p in with codec @p codec into @p out (malloc'd). 0 or an error. */
static int kb_produce_recompress(const uint8_t *in, size_t len, int codec, uint8_t **out,
                                 size_t *out_len)
{
    kp_batch_t b;
    kp_record_iter_t it;
    kp_record_t r;
    kp_writer_t scratch, wr;
    kb_rb_builder_t bb;
    int rc;

    if (kp_batch_parse(in, len, 0, 0, &b, NULL) != 0)
        return -1;
    kp_writer_init(&scratch);
    if (kp_record_iter_init(&it, &b, &scratch, (size_t)INT32_MAX) != 0) {
        kp_writer_free(&scratch);
        return -1;
    }
    kb_rb_builder_init(&bb, &b.hdr,
                       (int16_t)((b.hdr.attributes & ~KP_BATCH_ATTR_COMPRESSION_MASK) | codec),
                       b.hdr.baseTimestamp);
    while ((rc = kp_record_iter_next(&it, &r)) == 1)
        kb_rb_builder_add(&bb, &r);
    kp_writer_init(&wr);
    if (rc < 0 || kb_rb_builder_finish(&bb, &wr) != 0) {
        kb_rb_builder_free(&bb);
        kp_writer_free(&wr);
        kp_writer_free(&scratch);
        return -1;
    }
    kb_rb_builder_free(&bb);
    kp_writer_free(&scratch);
    *out = kp_writer_steal(&wr, out_len);
    return *out ? 0 : -1;
}

/* Decompressed records of one batch may take at most this many times max.message.bytes (at
 * least KB_PRODUCE_INFLATE_MIN): more is refused with MESSAGE_TOO_LARGE, which makes a Java
 * producer split the batch. Kafka validates compressed batches record by record; kbroker
 * decompresses a batch at once, so without a bound a small "decompression bomb" would make a
 * handler thread allocate gigabytes. */
#define KB_PRODUCE_INFLATE_FACTOR 64
#define KB_PRODUCE_INFLATE_MIN    (16u << 20)

/*
 * The error code of a batch that kp_batch_parse() refused, as Apache Kafka 4.x answers it:
 * CORRUPT_MESSAGE (retriable for the Java producer) only for framing and checksum damage (a
 * batchLength below the v2 header, an unknown magic byte, a CRC mismatch), INVALID_RECORD for
 * everything found inside a well-framed batch (record counts, codec id, record structure).
 */
static int16_t kb_produce_parse_err(const uint8_t *p, size_t len)
{
    int32_t batch_len;
    size_t size;

    if (len < KP_BATCH_LOG_OVERHEAD)
        return KP_ERR_INVALID_RECORD; /* no batch at all */
    batch_len = (int32_t)(((uint32_t)p[KP_BATCH_LENGTH_OFFSET] << 24) |
                          ((uint32_t)p[KP_BATCH_LENGTH_OFFSET + 1] << 16) |
                          ((uint32_t)p[KP_BATCH_LENGTH_OFFSET + 2] << 8) |
                          (uint32_t)p[KP_BATCH_LENGTH_OFFSET + 3]);
    if (batch_len < KP_BATCH_MIN_LENGTH)
        return KP_ERR_CORRUPT_MESSAGE;
    if (len > KP_BATCH_MAGIC_OFFSET && p[KP_BATCH_MAGIC_OFFSET] != KP_BATCH_MAGIC)
        return KP_ERR_CORRUPT_MESSAGE;
    size = (size_t)batch_len + KP_BATCH_LOG_OVERHEAD;
    if (size <= len && size >= KP_BATCH_HEADER_SIZE) {
        kp_batch_hdr_t h;
        kp_batch_hdr_decode(p, size, &h);
        if (kp_batch_crc_compute(p, size) != h.crc)
            return KP_ERR_CORRUPT_MESSAGE; /* Kafka checks the CRC before the contents */
    }
    return KP_ERR_INVALID_RECORD;
}

static bool kb_produce_ts_bad(const kb_log_config_t *lc, int64_t ts, int64_t now)
{
    if (lc->message_timestamp_type != KB_TS_CREATE_TIME || ts < 0)
        return false; /* LogAppendTime overwrites it; -1 is "no timestamp" */
    if (lc->message_ts_before_max_ms != INT64_MAX && now - ts > lc->message_ts_before_max_ms)
        return true;
    return lc->message_ts_after_max_ms != INT64_MAX && ts - now > lc->message_ts_after_max_ms;
}

/*
 * Kafka's leader-side validation of the one batch of a partition, in one pass with a bounded
 * decompression (the storage engine's kb_log_validate_produce() does the same checks but
 * inflates without a bound): CRC and framing, size against max.message.bytes, no control
 * batches, record count vs lastOffsetDelta, a sequence with a producer id, a producer id with
 * transactions, timestamps, record offset deltas 0..n-1, keys on compacted topics.
 */
static int16_t kb_produce_validate(const kb_log_config_t *lc, const uint8_t *buf, size_t len,
                                   int64_t now, const char **why)
{
    kp_batch_t b;
    kp_record_iter_t it;
    kp_record_t rec;
    kp_writer_t scratch;
    size_t cap = (size_t)lc->max_message_bytes * KB_PRODUCE_INFLATE_FACTOR;
    int32_t expect = 0;
    int r = kp_batch_parse(buf, len, 0, 0, &b, why);
    int16_t ec = 0;

    if (r == KP_E_UNSUPPORTED) {
        *why = "Produce requests with version 3 and above must use magic 2";
        return KP_ERR_INVALID_RECORD;
    }
    if (r)
        return kb_produce_parse_err(buf, len);
    if (b.size != len) {
        *why = "bytes after the record batch";
        return KP_ERR_CORRUPT_MESSAGE;
    }
    if (b.size > (size_t)lc->max_message_bytes) {
        *why = "batch larger than max.message.bytes";
        return KP_ERR_MESSAGE_TOO_LARGE;
    }
    if (kp_batch_hdr_is_control(&b.hdr)) {
        *why = "control batches are not accepted from clients";
        return KP_ERR_INVALID_RECORD;
    }
    if (b.hdr.recordCount <= 0 || b.hdr.lastOffsetDelta != b.hdr.recordCount - 1) {
        *why = "record count does not match lastOffsetDelta";
        return KP_ERR_INVALID_RECORD;
    }
    if (b.hdr.producerId >= 0 && b.hdr.baseSequence < 0) {
        *why = "idempotent batch without a sequence";
        return KP_ERR_INVALID_RECORD;
    }
    if (kp_batch_hdr_is_transactional(&b.hdr) && b.hdr.producerId < 0) {
        *why = "transactional batch without a producer id";
        return KP_ERR_INVALID_RECORD;
    }
    if (kb_produce_ts_bad(lc, b.hdr.maxTimestamp, now)) {
        *why = "timestamp out of range (message.timestamp.*.max.ms)";
        return KP_ERR_INVALID_TIMESTAMP;
    }
    if (cap < KB_PRODUCE_INFLATE_MIN)
        cap = KB_PRODUCE_INFLATE_MIN;
    kp_writer_init(&scratch);
    r = kp_record_iter_init(&it, &b, &scratch, cap);
    if (r == KP_E_TOO_LARGE) {
        *why = "the records decompress to more than the broker accepts for one batch";
        ec = KP_ERR_MESSAGE_TOO_LARGE;
    } else if (r) {
        *why = "cannot decompress the records";
        ec = KP_ERR_INVALID_RECORD;
    }
    while (!ec && (r = kp_record_iter_next(&it, &rec)) == 1) {
        if (rec.offsetDelta != expect++) {
            *why = "record offsets are not contiguous";
            ec = KP_ERR_INVALID_RECORD;
        } else if ((lc->cleanup_policy & KB_CLEANUP_COMPACT) && rec.key.len < 0) {
            *why = "compacted topic cannot accept a record without a key";
            ec = KP_ERR_INVALID_RECORD;
        } else if (kb_produce_ts_bad(lc, rec.timestamp, now)) {
            *why = "timestamp out of range (message.timestamp.*.max.ms)";
            ec = KP_ERR_INVALID_TIMESTAMP;
        }
    }
    if (!ec && r < 0) {
        *why = it.errstr ? it.errstr : "corrupt records";
        ec = KP_ERR_INVALID_RECORD; /* inside a batch whose CRC is right: Kafka's InvalidRecord */
    }
    kp_writer_free(&scratch);
    return ec;
}

typedef struct kb_produce_res_s {
    int16_t err;
    const char *msg;
    int64_t base_offset;
    int64_t append_time;
    int64_t log_start;
    int64_t last_offset; /* of the appended (or duplicate) batch */
    bool wait;           /* acks=all: the HW is not past last_offset yet */
    uint64_t seq;        /* the partition's notification count before the HW check */
    char msgbuf[200];
} kb_produce_res_t;

/* One partition of a delayed produce: the request waits until the HW reaches required. */
typedef struct kb_produce_wait_s {
    kb_part_t *part; /* a reference */
    kp_ProduceResponse_PartitionProduceResponse_t *pr;
    int64_t required; /* last offset + 1 */
    bool done;
} kb_produce_wait_t;

typedef struct kb_produce_op_s {
    kb_dq_op_t dq; /* first */
    kb_reqctx_t *ctx;
    kp_ProduceResponse_t resp; /* arrays in the request arena */
    kb_produce_wait_t *w;
    size_t n;
} kb_produce_op_t;

/* acks=all and min.insync.replicas against the committed ISR. 0 or NOT_ENOUGH_REPLICAS with the
 * message in res->msgbuf. */
static int16_t kb_produce_isr_check(kb_part_t *part, int32_t min_isr, kb_produce_res_t *res,
                                    bool after)
{
    size_t isr = kb_part_isr(part, NULL, 0);
    if ((int64_t)isr >= (int64_t)min_isr)
        return 0;
    snprintf(res->msgbuf, sizeof(res->msgbuf),
             "The size of the current ISR (%zu) is insufficient to satisfy the min.isr "
             "requirement of %" PRId32 " for partition %s-%" PRId32 "%s",
             isr, min_isr, part->topic, part->index, after ? " (after the append)" : "");
    res->msg = res->msgbuf;
    return after ? KP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND : KP_ERR_NOT_ENOUGH_REPLICAS;
}

/* After the append: move the HW; acks=all waits unless it is past the batch already. */
static void kb_produce_ack_check(kb_part_t *part, int16_t acks, kb_produce_res_t *res)
{
    res->seq = kb_dq_watch_seq(&part->watch);
    kb_part_advance_hw(part);
    if (acks != -1)
        return;
    if (kb_log_hw(part->log) > res->last_offset) {
        kb_tconf_extra_t ex;
        kb_part_conf(part, &ex, NULL);
        res->err = kb_produce_isr_check(part, ex.min_insync_replicas, res, true);
        return;
    }
    res->wait = true;
}

static void kb_produce_one(kb_apisvc_t *svc, kb_reqctx_t *ctx, const kp_ProduceRequest_t *rq,
                           const char *txn_id, kb_part_t *part, kp_bytes_t records,
                           kb_produce_res_t *res)
{
    kb_log_config_t lc;
    kb_tconf_extra_t ex;
    kp_batch_iter_t it;
    kp_batch_t b;
    int nb = 0, r, rc;
    uint8_t *buf = NULL;
    size_t len = 0;
    const char *why = NULL;
    kb_append_info_t info;
    int64_t now = kb_time_wall_ms();

    if (part->internal && !kb_apisvc_privileged(ctx) &&
        !(ctx->client_id.len == 14 && !memcmp(ctx->client_id.ptr, "__admin_client", 14))) {
        res->err = KP_ERR_INVALID_TOPIC_EXCEPTION;
        res->msg = "Cannot append to internal topic";
        return;
    }
    if ((res->err = kb_part_write_check(part, &res->msg)))
        return;
    kb_part_conf(part, &ex, NULL);
    if (rq->Acks == -1 &&
        (res->err = kb_produce_isr_check(part, ex.min_insync_replicas, res, false)))
        return;
    if (records.len <= 0) {
        res->err = KP_ERR_INVALID_RECORD;
        res->msg = "Produce requests with version 3 and above must have at least one record "
                   "batch per partition";
        return;
    }
    kp_batch_iter_init(&it, records.ptr, (size_t)records.len, 0, KP_BATCH_F_SKIP_CRC);
    while ((r = kp_batch_iter_next(&it, &b)) == 1) {
        if (++nb > 1)
            break;
    }
    if (r == KP_E_UNSUPPORTED || (nb == 0 && r < 0 && records.len > KP_BATCH_MAGIC_OFFSET &&
                                  records.ptr[KP_BATCH_MAGIC_OFFSET] != KP_BATCH_MAGIC)) {
        res->err = KP_ERR_INVALID_RECORD;
        res->msg = "Produce requests with version 3 and above must use magic 2";
        return;
    }
    if (r == 0 && nb == 0) {
        /* No whole batch (cut short, or a batchLength past the end): Kafka's iterator sees no
         * batch and ProduceRequest.validateRecords answers INVALID_RECORD. */
        res->err = KP_ERR_INVALID_RECORD;
        res->msg = "Produce requests with version 3 and above must have at least one record "
                   "batch per partition";
        return;
    }
    if (r < 0) {
        res->err = kb_produce_parse_err(records.ptr + it.pos, (size_t)records.len - it.pos);
        res->msg = it.errstr ? it.errstr : "corrupt record batch";
        return;
    }
    if (nb > 1) {
        res->err = KP_ERR_INVALID_RECORD;
        res->msg = "Produce requests with version 3 and above are only allowed to contain "
                   "exactly one record batch per partition";
        return;
    }
    /* b is the only batch */
    if (kp_batch_hdr_codec(&b.hdr) == KP_CODEC_ZSTD && ctx->api_version < 7) {
        res->err = KP_ERR_UNSUPPORTED_COMPRESSION_TYPE;
        res->msg = "Produce requests with ZStandard compression need version 7 or later";
        return;
    }
    if (kp_batch_hdr_is_transactional(&b.hdr)) {
        kb_txn_verify_fn *fn;
        void *o;
        pthread_rwlock_rdlock(&svc->hook_rw);
        fn = svc->txn_verify;
        o = svc->txn_verify_opaque;
        if (!txn_id) {
            res->err = KP_ERR_INVALID_TXN_STATE;
            res->msg = "transactional records without a transactional id";
        } else if (!fn) {
            res->err = KP_ERR_INVALID_TXN_STATE;
            res->msg = "no transaction coordinator: the partition is not part of a transaction";
        } else {
            res->err = fn(o, txn_id, b.hdr.producerId, b.hdr.producerEpoch, part->topic,
                          part->index, ctx->api_version);
        }
        pthread_rwlock_unlock(&svc->hook_rw);
        if (res->err)
            return;
    }
    kb_log_get_config(part->log, &lc);
    res->err = kb_produce_validate(&lc, records.ptr, (size_t)records.len, now, &why);
    if (res->err) {
        res->msg = why;
        return;
    }
    if (ex.compression >= 0 && ex.compression != kp_batch_hdr_codec(&b.hdr)) {
        if (kb_produce_recompress(records.ptr, (size_t)records.len, ex.compression, &buf, &len) !=
            0) {
            res->err = KP_ERR_CORRUPT_MESSAGE;
            res->msg = "cannot convert the batch to the topic's compression.type";
            return;
        }
    } else {
        buf = malloc((size_t)records.len);
        if (!buf) {
            res->err = KP_ERR_UNKNOWN_SERVER_ERROR;
            return;
        }
        memcpy(buf, records.ptr, (size_t)records.len);
        len = (size_t)records.len;
    }
    rc = kb_part_append_leader(part, buf, len, KB_ORIGIN_CLIENT, KB_APPEND_F_SKIP_VALIDATE, &info);
    free(buf);
    if (rc == KB_E_STATE && kb_part_role(part) != KB_PART_LEADER) {
        res->err = KP_ERR_NOT_LEADER_OR_FOLLOWER; /* became a follower meanwhile */
        res->msg = "this broker is not the leader of the partition";
        return;
    }
    if (rc == KB_STO_DUPLICATE_SEQUENCE) {
        /* Already written: the producer retried. Answer as the first time (Kafka 4.x), once
         * replicated as far as acks asks. */
        res->base_offset = info.first_offset;
        res->log_start = kb_log_start_offset(part->log);
        res->last_offset = info.last_offset;
        kb_produce_ack_check(part, rq->Acks, res);
        return;
    }
    if (rc != 0) {
        res->err = kb_h_sto_err(rc);
        res->msg = kb_sto_err_str(rc);
        if (rc == KB_STO_INVALID_RECORD)
            res->msg = "idempotent producers send one batch per partition";
        return;
    }
    res->base_offset = info.first_offset;
    res->append_time = info.log_append_time;
    res->log_start = info.log_start_offset;
    res->last_offset = info.last_offset;
    kb_produce_ack_check(part, rq->Acks, res);
}

static void kb_produce_log_err(kb_reqctx_t *ctx, const char *topic, int32_t partition, int16_t err,
                               const char *msg)
{
    kb_log_debug("api", "%s: produce to %s[%" PRId32 "]: %s%s%s", ctx->peer, topic, partition,
                 kp_errcode_name(err), msg ? ": " : "", msg ? msg : "");
}

static void kb_produce_op_free(kb_produce_op_t *op)
{
    for (size_t i = 0; i < op->n; i++)
        kb_part_release(op->w[i].part);
    free(op->w);
    kb_dq_op_fini(&op->dq);
    free(op);
}

static void kb_produce_dq_free(kb_dq_op_t *dq)
{
    kb_produce_op_free((kb_produce_op_t *)(void *)dq);
}

/* One attempt of a delayed produce: true when every partition has its answer and the response
 * was sent. */
static bool kb_produce_try(kb_dq_op_t *dq, bool expired)
{
    kb_produce_op_t *op = (kb_produce_op_t *)(void *)dq;
    kb_resp_t *out = NULL;
    bool all = true;

    for (size_t i = 0; i < op->n; i++) {
        kb_produce_wait_t *w = &op->w[i];
        kb_part_t *part = w->part;
        kb_produce_res_t res = {0};
        if (w->done)
            continue;
        if (atomic_load(&part->deleted) || kb_part_role(part) != KB_PART_LEADER) {
            res.err = KP_ERR_NOT_LEADER_OR_FOLLOWER;
            res.msg = "this broker stopped leading the partition while the request waited for "
                      "its replication";
        } else if (kb_log_hw(part->log) >= w->required) {
            kb_tconf_extra_t ex;
            kb_part_conf(part, &ex, NULL);
            res.err = kb_produce_isr_check(part, ex.min_insync_replicas, &res, true);
        } else if (expired) {
            res.err = KP_ERR_REQUEST_TIMED_OUT;
            res.msg = "the records were not replicated to the in-sync replicas within the "
                      "request's timeout";
        } else {
            all = false;
            continue;
        }
        w->done = true;
        w->pr->ErrorCode = res.err;
        if (res.err && res.msg && op->ctx->api_version >= 8)
            w->pr->ErrorMessage = kb_h_dup(op->ctx->arena, res.msg);
        if (res.err)
            kb_produce_log_err(op->ctx, part->topic, part->index, res.err, res.msg);
    }
    if (!all)
        return false;
    if (kb_h_respond(op->ctx, &kp_ProduceResponse_desc, &op->resp, &out) != KB_API_RESPOND)
        out = NULL; /* logged; nothing sensible to send, keep the order */
    kb_dq_op_complete(dq, out);
    return true;
}

/* Hand the request to the delayed operations until the partitions in @p w are replicated. */
static kb_api_result_t kb_produce_defer(kb_apisvc_t *svc, kb_req_t *req, kb_reqctx_t *ctx,
                                        const kp_ProduceResponse_t *resp, kb_produce_wait_t *w,
                                        size_t n, const uint64_t *seq, int32_t timeout_ms)
{
    kb_produce_op_t *op = calloc(1, sizeof(*op));
    kb_dq_watch_t **watches = calloc(n, sizeof(*watches));
    int64_t deadline = kb_time_mono_ns() + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000;

    if (!op || !watches || kb_dq_op_init(svc->dq, &op->dq, n) != 0) {
        for (size_t i = 0; i < n; i++)
            kb_part_release(w[i].part);
        free(w);
        free(watches);
        if (op)
            kb_dq_op_fini(&op->dq);
        free(op);
        return KB_API_CLOSE;
    }
    op->ctx = ctx;
    op->resp = *resp;
    op->w = w;
    op->n = n;
    op->dq.try_fn = kb_produce_try;
    op->dq.free_fn = kb_produce_dq_free;
    op->dq.req = req;
    for (size_t i = 0; i < n; i++)
        watches[i] = &w[i].part->watch;
    if (kb_req_defer(req, kb_dq_op_cancel, &op->dq) != 0) {
        free(watches);
        kb_produce_op_free(op);
        return KB_API_NO_RESPONSE; /* the client is gone */
    }
    kb_dq_op_add(svc->dq, &op->dq, deadline, watches, seq, n);
    free(watches);
    return KB_API_DEFERRED;
}

static kb_api_result_t kb_produce_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_apisvc_t *svc = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_ProduceRequest_t rq;
    kp_ProduceResponse_t resp;
    char *txn_id;
    int16_t ver = ctx->api_version;
    kb_produce_wait_t *waits = NULL;
    uint64_t *seqs = NULL;
    size_t nwait = 0, capw = 0;

    if (kb_h_decode(ctx, &kp_ProduceRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    txn_id = kb_h_str(ctx->arena, rq.TransactionalId);
    kp_ProduceResponse_init(&resp);
    resp.Responses.cnt = rq.TopicData.cnt > 0 ? rq.TopicData.cnt : 0;
    resp.Responses.v =
        kp_arena_calloc(ctx->arena, (size_t)resp.Responses.cnt + 1, sizeof(*resp.Responses.v));
    if (!resp.Responses.v)
        return KB_API_CLOSE;
    for (int32_t i = 0; i < resp.Responses.cnt; i++) {
        const kp_ProduceRequest_TopicProduceData_t *td = &rq.TopicData.v[i];
        kp_ProduceResponse_TopicProduceResponse_t *tr = &resp.Responses.v[i];
        char *name = ver >= 13 ? NULL : kb_h_str(ctx->arena, td->Name);
        kp_ProduceResponse_TopicProduceResponse_init(tr);
        tr->Name = td->Name;
        tr->TopicId = td->TopicId;
        tr->PartitionResponses.cnt = td->PartitionData.cnt > 0 ? td->PartitionData.cnt : 0;
        tr->PartitionResponses.v = kp_arena_calloc(
            ctx->arena, (size_t)tr->PartitionResponses.cnt + 1, sizeof(*tr->PartitionResponses.v));
        if (!tr->PartitionResponses.v) {
            for (size_t w = 0; w < nwait; w++)
                kb_part_release(waits[w].part);
            free(waits);
            free(seqs);
            return KB_API_CLOSE;
        }
        for (int32_t k = 0; k < tr->PartitionResponses.cnt; k++) {
            const kp_ProduceRequest_PartitionProduceData_t *pd = &td->PartitionData.v[k];
            kp_ProduceResponse_PartitionProduceResponse_t *pr = &tr->PartitionResponses.v[k];
            kb_produce_res_t res = {
                .base_offset = -1, .append_time = -1, .log_start = -1, .last_offset = -1};
            kb_part_t *part = NULL;
            int rc;
            kp_ProduceResponse_PartitionProduceResponse_init(pr);
            pr->Index = pd->Index;
            if (rq.Acks != 0 && rq.Acks != 1 && rq.Acks != -1) {
                res.err = KP_ERR_INVALID_REQUIRED_ACKS;
            } else {
                rc = ver >= 13 ? kb_meta_part_by_id(svc->meta, &td->TopicId, pd->Index, &part)
                               : kb_meta_part(svc->meta, name ? name : "", pd->Index, &part);
                if (rc != KB_META_OK)
                    res.err = kb_h_lookup_err(rc, ver >= 13);
                else
                    kb_produce_one(svc, ctx, &rq, txn_id, part, pd->Records, &res);
                if (res.wait && nwait == capw) {
                    size_t nc = capw ? capw * 2 : 4;
                    kb_produce_wait_t *nw = realloc(waits, nc * sizeof(*nw));
                    uint64_t *ns = nw ? realloc(seqs, nc * sizeof(*ns)) : NULL;
                    if (nw)
                        waits = nw;
                    if (ns)
                        seqs = ns;
                    if (nw && ns)
                        capw = nc;
                }
                if (res.wait && nwait < capw) {
                    waits[nwait] = (kb_produce_wait_t){
                        .part = part, .pr = pr, .required = res.last_offset + 1};
                    seqs[nwait++] = res.seq;
                    part = NULL; /* the reference moves to the wait list */
                } else if (res.wait) {
                    res.err = KP_ERR_REQUEST_TIMED_OUT; /* no memory to wait with */
                    res.msg = "out of memory";
                }
                kb_part_release(part);
            }
            pr->ErrorCode = res.err;
            pr->BaseOffset = res.base_offset;
            pr->LogAppendTimeMs = res.append_time;
            pr->LogStartOffset = res.log_start;
            if (res.err && res.msg && ver >= 8)
                pr->ErrorMessage = kb_h_dup(ctx->arena, res.msg);
            if (res.err)
                kb_log_debug("api", "%s: produce to %.*s[%" PRId32 "]: %s%s%s", ctx->peer,
                             td->Name.len > 0 ? (int)td->Name.len : 0,
                             td->Name.ptr ? td->Name.ptr : "", pd->Index, kp_errcode_name(res.err),
                             res.msg ? ": " : "", res.msg ? res.msg : "");
        }
    }
    if (nwait) {
        kb_api_result_t r =
            kb_produce_defer(svc, req, ctx, &resp, waits, nwait, seqs, rq.TimeoutMs);
        free(seqs);
        return r;
    }
    free(waits);
    free(seqs);
    if (rq.Acks == 0)
        return KB_API_NO_RESPONSE;
    return kb_h_respond(ctx, &kp_ProduceResponse_desc, &resp, respp);
}

int kb_h_produce_register(kb_apisvc_t *svc)
{
    /* A barrier: produce requests of one connection are appended in order (idempotence). */
    return kb_h_register(svc, KP_APIKEY_Produce, 3, 13, kb_produce_handle, 0);
}
