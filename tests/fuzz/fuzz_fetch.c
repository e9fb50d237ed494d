/*
 * fuzz_fetch.c -- libFuzzer target for the mirror fetcher's response side (plugin/fetch): a
 * Fetch response decoded at the chosen version, and every partition's records walked by
 * km_fetch_plan_chunk (framing, CRC, magic, offsets, epochs) as the fetcher does before an
 * append; or, in raw mode, the bytes walked directly as one records chunk.
 *
 * Input: mode byte (bit 0: raw chunk), version byte (Fetch v4 + b % 15), int32 BE destination
 * leader epoch, uint32 BE fetch offset, then the response body or the chunk.
 * Checked: the plan stays inside the buffer, covers whole batches it counted, and its next
 * offset never goes below the fetch offset.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/km_fetch.h"
#include "kp_arena.h"
#include "kp_batch.h"
#include "kp_msgs.h"
#include "kp_reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_fetch_plan(const uint8_t *buf, size_t len, int64_t off, int32_t epoch)
{
    km_fetch_plan_t pl;
    kp_chunk_info_t ci;
    kp_batch_iter_t it;
    kp_batch_t b;

    km_fetch_plan_chunk(buf, len, off, epoch, &pl);
    if (pl.start > pl.end || pl.end > len)
        abort();
    if (pl.next_offset < off)
        abort();
    if (pl.batches == 0 && pl.end != pl.start)
        abort();
    if (pl.end > pl.start) {
        /* what would be appended is a clean chunk of whole, valid batches */
        if (kp_batch_chunk_check(buf + pl.start, pl.end - pl.start, 0, 0, &ci) != 0)
            abort();
        if (ci.valid_bytes != pl.end - pl.start || ci.batch_cnt != pl.batches)
            abort();
        /* every appended batch is at or below the destination leader's epoch (checked batch
         * by batch: ci.max_epoch starts at -1, above a negative destination epoch) */
        kp_batch_iter_init(&it, buf + pl.start, pl.end - pl.start, 0, 0);
        while (kp_batch_iter_next(&it, &b) == 1)
            if (b.hdr.partitionLeaderEpoch > epoch)
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kp_FetchResponse_t resp;
    kp_arena_t ar;
    kp_reader_t rd;
    int16_t ver;
    int32_t epoch;
    int64_t off;

    if (size < 10)
        return 0;
    ver = (int16_t)(4 + data[1] % 15);
    epoch = (int32_t)((uint32_t)data[2] << 24 | (uint32_t)data[3] << 16 | (uint32_t)data[4] << 8 |
                      data[5]);
    off = (int64_t)((uint32_t)data[6] << 24 | (uint32_t)data[7] << 16 | (uint32_t)data[8] << 8 |
                    data[9]);
    if (data[0] & 1) {
        fuzz_fetch_plan(data + 10, size - 10, off, epoch);
        return 0;
    }
    kp_arena_init(&ar, 1u << 24);
    kp_FetchResponse_init(&resp);
    kp_reader_init(&rd, data + 10, size - 10);
    if (kp_FetchResponse_decode(&rd, &ar, &resp, ver) == 0) {
        for (int32_t i = 0; i < resp.Responses.cnt; i++) {
            const kp_FetchResponse_FetchableTopicResponse_t *t = &resp.Responses.v[i];
            for (int32_t k = 0; k < t->Partitions.cnt; k++) {
                const kp_FetchResponse_PartitionData_t *pd = &t->Partitions.v[k];
                fuzz_fetch_plan(pd->Records.ptr, pd->Records.len > 0 ? (size_t)pd->Records.len : 0,
                                off, epoch);
            }
        }
    }
    kp_arena_free(&ar);
    return 0;
}
