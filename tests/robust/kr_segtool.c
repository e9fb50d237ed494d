/*
 * kr_segtool.c -- where the record batches of a partition segment file (<base>.log) are, for
 * tests/robust/crash_recovery.sh, which cuts the last batch in its middle.
 *
 *   kr_segtool FILE
 *
 * Walks the batch framing (baseOffset int64, batchLength int32) from the start and prints one
 * line of key=value pairs:
 *   batches=N size=BYTES whole_end=BYTES last_pos=P last_len=L last_base=O last_next=O2
 * whole_end is where the last complete batch ends (a torn tail lies beyond it); last_* describe
 * the last complete batch (its position, total length, base offset, and last offset + 1, read
 * from lastOffsetDelta). Exit 0, or 2 if the file cannot be read or has no complete batch.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kp_batch.h"
#include "kr_util.h"

int main(int argc, char **argv)
{
    size_t len, pos = 0, last_pos = 0, last_len = 0;
    char *buf;
    long batches = 0;
    kp_batch_hdr_t last;

    if (argc != 2) {
        fprintf(stderr, "usage: kr_segtool FILE\n");
        return 2;
    }
    buf = kr_read_file(argv[1], &len);
    if (!buf) {
        fprintf(stderr, "kr_segtool: %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    memset(&last, 0, sizeof(last));
    while (len - pos >= KP_BATCH_HEADER_SIZE) {
        kp_batch_hdr_t h;
        size_t total;
        kp_batch_hdr_decode(buf + pos, len - pos, &h);
        if (h.batchLength < KP_BATCH_MIN_LENGTH)
            break;
        total = (size_t)h.batchLength + KP_BATCH_LOG_OVERHEAD;
        if (total > len - pos)
            break;
        last = h;
        last_pos = pos;
        last_len = total;
        batches++;
        pos += total;
    }
    free(buf);
    if (batches == 0) {
        fprintf(stderr, "kr_segtool: %s: no complete batch\n", argv[1]);
        return 2;
    }
    printf("batches=%ld size=%zu whole_end=%zu last_pos=%zu last_len=%zu last_base=%" PRId64
           " last_next=%" PRId64 "\n",
           batches, len, pos, last_pos, last_len, last.baseOffset,
           kp_batch_hdr_last_offset(&last) + 1);
    return 0;
}
