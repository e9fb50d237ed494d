/*
 * fuzz_state_replay.c -- libFuzzer target for the MirrorCoordinator's loading path
 * (plugin/state/km_state_table.c): the bytes of a `__mirror_state` Fetch response's records
 * replayed into a shard table, as a new leader does with what it reads from disk; and the
 * write rules (km_state_pstate_apply) on fields taken from the input.
 *
 * Input: mode byte (bit 0: write rules), then
 *   replay: int32 BE start offset, the record batches;
 *   rules:  the stored value's protobuf envelope length (uint16 BE) and bytes, then a write
 *           (state int8, leader epoch, state epoch, LME epoch int32 BE, LME offset int64 BE,
 *           retry attempt int32 BE, non-retryable byte).
 * Checked: the replay never moves backwards, every key left in the table parses and every value
 * decodes (what is served is readable); a successful write bumps the state epoch by 0 or 1,
 * keeps the highest leader epoch and only makes valid transitions. Leaks fail (ASan).
 *
 * The plugin's allocator and logger are stubbed here (malloc, no output): the table reaches
 * the host only through them.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kp_arena.h"
#include "kp_state.h"
#include "state/km_state_table.h"
#include "util/km_log.h"
#include "util/km_mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- stubs of the plugin's util functions the table uses ---------------------------------- */

void *km_malloc(km_plugin_t *cm, size_t size)
{
    (void)cm;
    return malloc(size);
}

void *km_calloc(km_plugin_t *cm, size_t nmemb, size_t size)
{
    (void)cm;
    return calloc(nmemb, size);
}

void *km_realloc(km_plugin_t *cm, void *ptr, size_t size)
{
    (void)cm;
    return realloc(ptr, size);
}

void km_free(km_plugin_t *cm, void *ptr)
{
    (void)cm;
    free(ptr);
}

bool km_log_enabled(km_plugin_t *cm, int32_t level, const char *component)
{
    (void)cm;
    (void)level;
    (void)component;
    return false;
}

void km_log_emit(km_plugin_t *cm, int32_t level, const char *component, const char *fmt, ...)
{
    (void)cm;
    (void)level;
    (void)component;
    (void)fmt;
}

/* ---- the target --------------------------------------------------------------------------- */

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void fuzz_check_entry(void *arg, const km_state_entry_t *e)
{
    kp_state_key_t key;
    kp_state_value_t v;
    kp_arena_t ar;

    (void)arg;
    if (kp_state_key_parse(e->key, e->key_len, &key, NULL) != 0)
        abort();
    kp_arena_init(&ar, 4u << 20);
    if (kp_state_value_decode(e->value, e->value_len, &ar, &v, NULL, NULL) != 0 ||
        v.type != key.type)
        abort();
    kp_arena_free(&ar);
}

static void fuzz_replay(const uint8_t *data, size_t size)
{
    km_state_table_t t;
    km_state_replay_stats_t st;
    int64_t start, next;

    if (size < 4)
        return;
    start = (int64_t)(be32(data) & 0x7fffffffu);
    next = start;
    memset(&st, 0, sizeof(st));
    km_state_table_init(&t, NULL);
    (void)km_state_table_replay(&t, 0, data + 4, size - 4, &next, &st);
    if (next < start)
        abort();
    km_state_table_foreach(&t, fuzz_check_entry, NULL);
    km_state_table_clear(&t);
}

static void fuzz_rules(const uint8_t *data, size_t size)
{
    kp_state_value_t cur;
    kp_state_partition_t out;
    km_state_pwrite_t w;
    const char *msg = NULL;
    kp_arena_t ar;
    size_t vlen;
    bool have;
    int16_t ec;

    if (size < 2)
        return;
    vlen = (size_t)data[0] << 8 | data[1];
    data += 2;
    size -= 2;
    if (vlen > size || size - vlen < 22)
        return;
    kp_arena_init(&ar, 4u << 20);
    have = kp_state_value_decode(data, vlen, &ar, &cur, NULL, NULL) == 0 &&
           cur.type == KP_STATE_REC_PARTITION_STATE;
    data += vlen;
    km_state_pwrite_init(&w);
    w.state = (int8_t)data[0];
    w.leader_epoch = (int32_t)be32(data + 1);
    w.state_epoch = (int32_t)be32(data + 5);
    w.lme_epoch = (int32_t)be32(data + 9);
    w.lme_offset = (int64_t)be32(data + 13);
    w.retry_attempt = (int32_t)be32(data + 17);
    w.non_retryable = data[21] & 1;
    ec = km_state_pstate_apply(have ? &cur.u.partition : NULL, &w, 1, &out, &msg);
    if (ec != 0) {
        if (msg == NULL)
            abort();
    } else {
        int32_t se = have ? cur.u.partition.state_epoch : 0;
        int32_t le = have ? cur.u.partition.leader_epoch : -1;
        int from = have ? cur.u.partition.state : -1;

        if (out.state_epoch != se && out.state_epoch != se + 1)
            abort();
        if (out.leader_epoch < le || out.leader_epoch < w.leader_epoch)
            abort();
        if (out.state != from && !km_state_transition_valid(from, out.state))
            abort();
        if ((out.state != from) != (out.state_epoch == se + 1))
            abort();
    }
    kp_arena_free(&ar);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        fuzz_rules(data + 1, size - 1);
    else
        fuzz_replay(data + 1, size - 1);
    return 0;
}
