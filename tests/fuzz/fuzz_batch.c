/*
 * fuzz_batch.c -- libFuzzer target for the record batch v2 reader and the codecs.
 *
 * Input: one mode byte, then the bytes under test.
 *   mode bit 0   skip the CRC check (lets the fuzzer reach record parsing behind the CRC)
 *   mode bit 1   also run kp_decompress() directly on the bytes with codec (mode >> 2) % 5
 * The bytes are iterated as a fetch chunk (batches, then records, headers and control records
 * of each), and checked with kp_batch_chunk_check(). Decompression is always capped at 1 MiB.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kp_batch.h"
#include "kp_compress.h"

#define FUZZ_MAX_OUT (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_batch_records(const kp_batch_t *b, kp_writer_t *scratch)
{
    kp_record_iter_t it;
    kp_record_t r;

    kp_writer_reset(scratch);
    if (kp_record_iter_init(&it, b, scratch, FUZZ_MAX_OUT))
        return;
    while (kp_record_iter_next(&it, &r) == 1) {
        kp_record_header_t h;
        size_t pos = 0;
        int32_t n = 0;
        /* Touch every view so ASan checks the bounds. */
        if (r.key.len > 0)
            (void)((volatile const uint8_t *)r.key.ptr)[r.key.len - 1];
        if (r.value.len > 0)
            (void)((volatile const uint8_t *)r.value.ptr)[r.value.len - 1];
        while (kp_record_header_next(&r, &pos, &h) == 1) {
            if (h.key.len > 0)
                (void)((volatile const char *)h.key.ptr)[h.key.len - 1];
            if (h.value.len > 0)
                (void)((volatile const uint8_t *)h.value.ptr)[h.value.len - 1];
            n++;
        }
        if (n != r.header_cnt)
            __builtin_trap(); /* validated headers must all be reachable */
        if (kp_batch_hdr_is_control(&b->hdr)) {
            kp_control_t c;
            (void)kp_control_parse(&r, &c, NULL);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kp_batch_iter_t it;
    kp_batch_t b;
    kp_chunk_info_t info;
    kp_writer_t scratch;
    unsigned mode, flags;

    if (size < 1)
        return 0;
    mode = data[0];
    data++;
    size--;
    flags = (mode & 1) ? KP_BATCH_F_SKIP_CRC : 0;

    kp_writer_init(&scratch);
    kp_batch_iter_init(&it, data, size, 0, flags);
    while (kp_batch_iter_next(&it, &b) == 1) {
        if (b.size < KP_BATCH_HEADER_SIZE || b.size > size)
            __builtin_trap();
        fuzz_batch_records(&b, &scratch);
        if (kp_batch_hdr_is_control(&b.hdr)) {
            int16_t type;
            (void)kp_batch_control_type(&b, &type);
        }
    }
    (void)kp_batch_chunk_check(data, size, 0, flags | KP_BATCH_F_EPOCH_MONOTONIC, &info);
    if (info.valid_bytes > size)
        __builtin_trap();

    if (mode & 2) {
        kp_writer_reset(&scratch);
        if (kp_decompress((int)((mode >> 2) % 5), data, size, &scratch, FUZZ_MAX_OUT) == 0 &&
            scratch.len > FUZZ_MAX_OUT)
            __builtin_trap();
    }
    kp_writer_free(&scratch);
    return 0;
}
