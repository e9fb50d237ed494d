/*
 * fuzz_request.c -- libFuzzer target for every generated request decoder (and the request
 * header): 2-byte api key (-1 = header), 2-byte version, body. See tests/codec/fuzz_msg.h.
 */
#include "../codec/fuzz_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int16_t ver;
    const kp_msg_desc_t *d = fuzz_pick(data, size, 0, &ver);
    if (!d)
        return 0;
    return fuzz_msg(d, ver, data + 4, size - 4);
}
