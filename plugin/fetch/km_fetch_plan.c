/*
 * km_fetch_plan.c - the batch walk of the data path: which bytes of a fetched records chunk are
 * appended, and why the walk stopped. No decompression, no allocation; every length is checked
 * by kp_batch_parse before it is used.
 */
#include "fetch/km_fetch.h"

#include <string.h>

#include "kp_batch.h"
#include "kp_err.h"

void km_fetch_plan_chunk(const uint8_t *buf, size_t len, int64_t fetch_offset, int32_t dest_epoch,
                         km_fetch_plan_t *plan)
{
    size_t pos = 0;
    int64_t prev_last = -1;
    bool started = false;

    memset(plan, 0, sizeof(*plan));
    plan->next_offset = fetch_offset;
    plan->last_epoch = -1;
    plan->stop_offset = -1;
    plan->first_offset = -1;
    if (buf == NULL)
        len = 0;
    while (pos < len) {
        kp_batch_t b;
        const char *why = NULL;
        int rc = kp_batch_parse(buf + pos, len - pos, 0, 0, &b, &why);

        if (rc == KP_E_TRUNCATED) {
            /* A trailing partial batch: the response was cut at its size limit (a
             * partition that got only a partial batch gets it whole in a later fetch). */
            break;
        }
        if (rc != 0) {
            kp_batch_hdr_t h;
            plan->stop = rc == KP_E_UNSUPPORTED ? KM_FETCH_STOP_FORMAT : KM_FETCH_STOP_CORRUPT;
            plan->stop_reason = rc == KP_E_UNSUPPORTED ? "unsupported message format (magic 0/1)"
                                : why != NULL          ? why
                                                       : "corrupt record batch";
            if (len - pos >= KP_BATCH_HEADER_SIZE &&
                kp_batch_hdr_decode(buf + pos, len - pos, &h) == 0)
                plan->stop_offset = h.baseOffset;
            else if (len - pos >= 8)
                plan->stop_offset =
                    (int64_t)(((uint64_t)buf[pos] << 56) | ((uint64_t)buf[pos + 1] << 48) |
                              ((uint64_t)buf[pos + 2] << 40) | ((uint64_t)buf[pos + 3] << 32) |
                              ((uint64_t)buf[pos + 4] << 24) | ((uint64_t)buf[pos + 5] << 16) |
                              ((uint64_t)buf[pos + 6] << 8) | buf[pos + 7]);
            break;
        }
        if (b.hdr.baseOffset < 0 || b.hdr.baseOffset <= prev_last) {
            plan->stop = KM_FETCH_STOP_CORRUPT;
            plan->stop_reason = "record batch offsets do not increase";
            plan->stop_offset = b.hdr.baseOffset;
            break;
        }
        prev_last = kp_batch_hdr_last_offset(&b.hdr);
        if (prev_last < fetch_offset) {
            /* Entirely below the fetch position (the source answers from the batch that holds
             * the offset): skip it. */
            pos += b.size;
            if (!started)
                plan->start = pos;
            continue;
        }
        if (b.hdr.partitionLeaderEpoch > dest_epoch) {
            plan->stop = KM_FETCH_STOP_EPOCH;
            plan->stop_epoch = b.hdr.partitionLeaderEpoch;
            plan->stop_offset = b.hdr.baseOffset;
            break;
        }
        if (!started) {
            started = true;
            plan->start = pos;
            plan->first_offset = b.hdr.baseOffset;
        }
        plan->batches++;
        plan->records += b.hdr.recordCount;
        plan->next_offset = prev_last + 1;
        plan->last_epoch = b.hdr.partitionLeaderEpoch;
        pos += b.size;
        plan->end = pos;
    }
    if (!started)
        plan->end = plan->start;
}
