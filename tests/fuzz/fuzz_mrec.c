/*
 * fuzz_mrec.c -- libFuzzer target for KRaft metadata record values (proto/runtime/kp_mrec.h):
 * the whole input is one framed record value (frame version, type, version, record), as the
 * broker reads it from the metadata log.
 * Bad input is never an error; only our own invariants abort:
 *   decode errors are kp_err_t values with a description;
 *   a decoded record encodes, to exactly kp_mrec_size() bytes, under the same type and version;
 *   that encoding decodes again and re-encodes to identical bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kp_mrec.h"

#define FUZZ_ARENA_LIMIT (64u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_mrec: invariant violated: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kp_arena_t ar, ar2;
    kp_writer_t wr, wr2;
    kp_mrec_t m, m2;
    int err;

    kp_arena_init(&ar, FUZZ_ARENA_LIMIT);
    kp_arena_init(&ar2, FUZZ_ARENA_LIMIT);
    kp_writer_init(&wr);
    kp_writer_init(&wr2);
    err = kp_mrec_decode(data, size, &ar, &m);
    if (err) {
        require(err < 0 && strcmp(kp_err_name(err), "UNKNOWN") != 0, "error is not a kp_err_t");
        require(m.errstr != NULL && m.rec == NULL, "failure without a description");
        goto out;
    }
    require(m.info != NULL && m.rec != NULL && m.errstr == NULL, "success without a record");
    err = kp_mrec_encode(&wr, m.info->type, (int16_t)m.ver, m.rec);
    require(err == 0, "a decoded record does not encode");
    require(kp_mrec_size(m.info->type, (int16_t)m.ver, m.rec) == wr.len, "size != encoded length");
    err = kp_mrec_decode(wr.buf, wr.len, &ar2, &m2);
    require(err == 0, "our own encoding does not decode");
    require(m2.info == m.info && m2.ver == m.ver, "type or version changed");
    err = kp_mrec_encode(&wr2, m2.info->type, (int16_t)m2.ver, m2.rec);
    require(err == 0 && wr2.len == wr.len && memcmp(wr.buf, wr2.buf, wr.len) == 0,
            "decode(encode(x)) re-encodes differently");
out:
    kp_writer_free(&wr);
    kp_writer_free(&wr2);
    kp_arena_free(&ar);
    kp_arena_free(&ar2);
    return 0;
}
