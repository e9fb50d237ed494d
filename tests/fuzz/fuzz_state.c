/*
 * fuzz_state.c -- libFuzzer target for `__mirror_state` keys and values (persisted-state
 * loading).
 *
 * Input: one mode byte, one split byte, then the bytes under test.
 *   mode % 3 == 0   the bytes are a key
 *   mode % 3 == 1   the bytes are a value
 *   mode % 3 == 2   a record: the first (split % (len + 1)) bytes are the key, the rest the
 *                   value (mode bit 7: a tombstone instead)
 * Properties checked: a parsed key re-encodes to the same bytes; a decoded value re-encodes,
 * and that encoding decodes again.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kp_state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_state_key(const uint8_t *p, size_t n)
{
    kp_state_key_t key;
    kp_writer_t wr;

    if (kp_state_key_parse(p, n, &key, NULL))
        return;
    kp_writer_init(&wr);
    if (kp_state_key_encode(&wr, &key) || wr.len != n || memcmp(wr.buf, p, n) != 0)
        __builtin_trap(); /* keys are canonical: compaction depends on exact bytes */
    if (kp_state_key_partition(&key, 50) < 0)
        __builtin_trap();
    kp_writer_free(&wr);
}

static void fuzz_state_value_check(const kp_state_value_t *v)
{
    kp_writer_t wr;
    kp_arena_t ar;
    kp_state_value_t again;

    kp_writer_init(&wr);
    kp_arena_init(&ar, 1u << 20);
    if (kp_state_value_encode(&wr, v, NULL))
        __builtin_trap();
    if (kp_state_value_decode(wr.buf, wr.len, &ar, &again, NULL, NULL) || again.type != v->type)
        __builtin_trap();
    kp_arena_free(&ar);
    kp_writer_free(&wr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned mode, split;
    kp_arena_t ar;

    if (size < 2)
        return 0;
    mode = data[0];
    split = data[1];
    data += 2;
    size -= 2;
    kp_arena_init(&ar, 1u << 20);
    switch (mode % 3) {
    case 0:
        fuzz_state_key(data, size);
        break;
    case 1: {
        kp_state_value_t v;
        if (kp_state_value_decode(data, size, &ar, &v, NULL, NULL) == 0)
            fuzz_state_value_check(&v);
        break;
    }
    default: {
        kp_state_record_t rec;
        size_t klen = split % (size + 1);
        kp_bytes_t key = {data, (int32_t)klen};
        kp_bytes_t value = {data + klen, (int32_t)(size - klen)};
        if (mode & 0x80)
            value = KP_BYTES_NULL;
        if (kp_state_record_parse(key, value, &ar, &rec, NULL, NULL) == 0) {
            fuzz_state_key(data, klen);
            if (!rec.tombstone)
                fuzz_state_value_check(&rec.value);
        }
        break;
    }
    }
    kp_arena_free(&ar);
    return 0;
}
