/*
 * fuzz_msg.h -- the shared body of the libFuzzer targets tests/fuzz/fuzz_request.c and
 * fuzz_response.c (kept here, with the codec tests it shares json_check.h with).
 *
 * Input: 2-byte api key, 2-byte version (both big-endian), then the message body. Key -1
 * (0xffff) selects the request header (fuzz_request) or the response header (fuzz_response).
 * Bad input is never an error; only our own invariants abort:
 *   decode errors are kp_err_t values;
 *   a decoded message encodes, to exactly size() bytes;
 *   that encoding decodes, consuming every byte, and re-encodes to identical bytes;
 *   both decoded messages print the same, well-formed JSON.
 */
#ifndef FUZZ_MSG_H
#define FUZZ_MSG_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_check.h"
#include "kp_msgs.h"

#define FUZZ_ARENA_LIMIT (64u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_require(int cond, const kp_msg_desc_t *d, int16_t ver, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz: invariant violated for %s v%d: %s\n", d->name, ver, what);
        abort();
    }
}

static char *fuzz_print(const kp_msg_desc_t *d, const void *msg, int16_t ver, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        return NULL;
    kp_msg_print(d, f, msg, ver, KP_PRINT_UNREDACTED);
    fclose(f);
    return buf;
}

static int fuzz_msg(const kp_msg_desc_t *d, int16_t ver, const uint8_t *body, size_t len)
{
    kp_arena_t ar, ar2;
    kp_reader_t rd;
    kp_writer_t wr, wr2;
    void *msg = malloc(d->struct_size), *msg2 = malloc(d->struct_size);
    char *p1 = NULL, *p2 = NULL;
    size_t l1 = 0, l2 = 0;
    int err;

    if (!msg || !msg2)
        goto out_free;
    kp_arena_init(&ar, FUZZ_ARENA_LIMIT);
    kp_arena_init(&ar2, FUZZ_ARENA_LIMIT);
    kp_writer_init(&wr);
    kp_writer_init(&wr2);

    kp_reader_init(&rd, body, len);
    err = kp_msg_decode(d, &rd, &ar, msg, ver);
    if (err) {
        fuzz_require(err < 0 && strcmp(kp_err_name(err), "UNKNOWN") != 0 && rd.err == err, d, ver,
                     "decode error is not a kp_err_t");
        goto out;
    }
    fuzz_require(rd.pos <= len, d, ver, "decode read past the end");

    err = kp_msg_encode(d, &wr, msg, ver);
    fuzz_require(err == 0, d, ver, "a decoded message does not encode");
    fuzz_require(kp_msg_size(d, msg, ver) == wr.len, d, ver, "size() != encoded length");

    kp_reader_init(&rd, wr.buf, wr.len);
    err = kp_msg_decode(d, &rd, &ar2, msg2, ver);
    fuzz_require(err == 0, d, ver, "our own encoding does not decode");
    fuzz_require(rd.pos == wr.len, d, ver, "our own encoding is not consumed exactly");

    err = kp_msg_encode(d, &wr2, msg2, ver);
    fuzz_require(err == 0, d, ver, "re-encode failed");
    fuzz_require(wr2.len == wr.len && (wr.len == 0 || memcmp(wr.buf, wr2.buf, wr.len) == 0), d, ver,
                 "decode(encode(x)) re-encodes differently");

    p1 = fuzz_print(d, msg, ver, &l1);
    p2 = fuzz_print(d, msg2, ver, &l2);
    fuzz_require(p1 && p2, d, ver, "print failed");
    fuzz_require(l1 == l2 && memcmp(p1, p2, l1) == 0, d, ver,
                 "decode(encode(x)) prints differently");
    fuzz_require(json_valid(p1, l1), d, ver, "printer output is not valid JSON");
out:
    free(p1);
    free(p2);
    kp_writer_free(&wr);
    kp_writer_free(&wr2);
    kp_arena_free(&ar);
    kp_arena_free(&ar2);
out_free:
    free(msg);
    free(msg2);
    return 0;
}

/* Parse the 4-byte prefix; returns the descriptor to fuzz or NULL. */
static const kp_msg_desc_t *fuzz_pick(const uint8_t *data, size_t size, int response, int16_t *ver)
{
    int16_t key;
    const kp_msg_desc_t *d;
    if (size < 4)
        return NULL;
    key = (int16_t)(uint16_t)(data[0] << 8 | data[1]);
    *ver = (int16_t)(uint16_t)(data[2] << 8 | data[3]);
    if (key == -1) {
        d = kp_msg_lookup(response ? "ResponseHeader" : "RequestHeader");
    } else {
        const kp_api_info_t *a = kp_api_lookup(key);
        d = !a ? NULL : response ? a->resp : a->req;
    }
    if (!d || *ver < d->min_ver || *ver > d->max_ver)
        return NULL;
    return d;
}

#endif /* FUZZ_MSG_H */
