#define KM_LOG_COMPONENT "kmirror.state"
#include "state/km_state_table.h"

#include <string.h>

#include "kp_arena.h"
#include "kp_batch.h"
#include "kp_errcode.h"
#include "util/km_log.h"
#include "util/km_mem.h"

#define KM_STATE_TABLE_MIN_BUCKETS 64

/* Largest decompressed batch a replay accepts (our own batches are a few hundred bytes). */
#define KM_STATE_REPLAY_MAX_OUT (64u << 20)

static uint32_t km_state_table_hash(const uint8_t *key, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    size_t i;

    for (i = 0; i < len; i++) {
        h ^= key[i];
        h *= 16777619u;
    }
    return h;
}

void km_state_table_init(km_state_table_t *t, km_plugin_t *cm)
{
    memset(t, 0, sizeof(*t));
    t->cm = cm;
}

static void km_state_entry_free(km_plugin_t *cm, km_state_entry_t *e)
{
    km_free(cm, e->key);
    e->key = NULL;
    km_free(cm, e->value);
    e->value = NULL;
    km_free(cm, e);
}

void km_state_table_clear(km_state_table_t *t)
{
    size_t i;

    for (i = 0; i < t->nbuckets; i++) {
        km_state_entry_t *e = t->buckets[i], *next;

        for (; e != NULL; e = next) {
            next = e->next;
            km_state_entry_free(t->cm, e);
        }
    }
    km_free(t->cm, t->buckets);
    t->buckets = NULL;
    t->nbuckets = 0;
    t->count = 0;
}

static km_state_entry_t **km_state_table_slot(const km_state_table_t *t, uint32_t hash,
                                              const uint8_t *key, size_t key_len)
{
    km_state_entry_t **pe;

    if (t->nbuckets == 0)
        return NULL;
    for (pe = &t->buckets[hash & (t->nbuckets - 1)]; *pe != NULL; pe = &(*pe)->next)
        if ((*pe)->hash == hash && (*pe)->key_len == key_len &&
            memcmp((*pe)->key, key, key_len) == 0)
            return pe;
    return NULL;
}

const km_state_entry_t *km_state_table_get(const km_state_table_t *t, const uint8_t *key,
                                           size_t key_len)
{
    km_state_entry_t **pe = km_state_table_slot(t, km_state_table_hash(key, key_len), key, key_len);

    return pe != NULL ? *pe : NULL;
}

/* Double the buckets when the load reaches 1; a failed grow only costs speed. */
static void km_state_table_grow(km_state_table_t *t)
{
    size_t n = t->nbuckets != 0 ? t->nbuckets * 2 : KM_STATE_TABLE_MIN_BUCKETS, i;
    km_state_entry_t **b;

    if (t->count < t->nbuckets)
        return;
    b = km_calloc(t->cm, n, sizeof(*b));
    if (b == NULL)
        return;
    for (i = 0; i < t->nbuckets; i++) {
        km_state_entry_t *e = t->buckets[i], *next;

        for (; e != NULL; e = next) {
            next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    }
    km_free(t->cm, t->buckets);
    t->buckets = b;
    t->nbuckets = n;
}

km_err_t km_state_table_put(km_state_table_t *t, const uint8_t *key, size_t key_len,
                            const uint8_t *value, size_t value_len)
{
    uint32_t hash = km_state_table_hash(key, key_len);
    km_state_entry_t **pe, *e;
    uint8_t *copy = NULL;

    if (key_len == 0 || key_len > UINT32_MAX || value_len > UINT32_MAX)
        return KM_ERR_INVALID;
    pe = km_state_table_slot(t, hash, key, key_len);
    if (value == NULL) {
        if (pe != NULL) {
            e = *pe;
            *pe = e->next;
            km_state_entry_free(t->cm, e);
            t->count--;
        }
        return KM_OK;
    }
    copy = km_malloc(t->cm, value_len != 0 ? value_len : 1);
    if (copy == NULL)
        return KM_ERR_NOMEM;
    memcpy(copy, value, value_len);
    if (pe != NULL) {
        e = *pe;
        km_free(t->cm, e->value);
        e->value = copy;
        e->value_len = (uint32_t)value_len;
        return KM_OK;
    }
    km_state_table_grow(t);
    if (t->nbuckets == 0)
        goto free_copy;
    e = km_calloc(t->cm, 1, sizeof(*e));
    if (e == NULL)
        goto free_copy;
    e->key = km_malloc(t->cm, key_len);
    if (e->key == NULL) {
        km_free(t->cm, e);
        goto free_copy;
    }
    memcpy(e->key, key, key_len);
    e->key_len = (uint32_t)key_len;
    e->hash = hash;
    e->value = copy;
    e->value_len = (uint32_t)value_len;
    e->next = t->buckets[hash & (t->nbuckets - 1)];
    t->buckets[hash & (t->nbuckets - 1)] = e;
    t->count++;
    return KM_OK;

free_copy:
    km_free(t->cm, copy);
    return KM_ERR_NOMEM;
}

void km_state_table_foreach(const km_state_table_t *t,
                            void (*fn)(void *arg, const km_state_entry_t *e), void *arg)
{
    size_t i;

    for (i = 0; i < t->nbuckets; i++) {
        const km_state_entry_t *e;

        for (e = t->buckets[i]; e != NULL; e = e->next)
            fn(arg, e);
    }
}

/* protobuf-c allocations of the check decode go through the plugin allocator. */
static void *km_state_table_pb_alloc(void *opaque, size_t size)
{
    return km_malloc(opaque, size);
}

static void km_state_table_pb_free(void *opaque, void *p)
{
    km_free(opaque, p);
}

/* Apply one record; KM_ERR_NOMEM is the only failure (bad records are counted and logged). */
static km_err_t km_state_table_apply(km_state_table_t *t, int32_t partition, const kp_record_t *r,
                                     km_state_replay_stats_t *st)
{
    km_plugin_t *cm = t->cm;
    kp_alloc_t al = {
        .alloc = km_state_table_pb_alloc, .free = km_state_table_pb_free, .opaque = cm};
    kp_state_record_t rec;
    const char *why = NULL;
    kp_arena_t ar;
    km_err_t err;
    int rc;

    if (r->key.len <= 0) {
        st->bad++;
        km_log_warn(cm, "__mirror_state-%d offset %lld: record without a key skipped",
                    (int)partition, (long long)r->offset);
        return KM_OK;
    }
    kp_arena_init(&ar, 1u << 20);
    rc = kp_state_record_parse(r->key, r->value, &ar, &rec, &al, &why);
    kp_arena_free(&ar);
    if (rc == KP_E_UNSUPPORTED) {
        st->skipped++;
        km_log_debug(cm, "__mirror_state-%d offset %lld: record of a newer format skipped (%s)",
                     (int)partition, (long long)r->offset, why != NULL ? why : "unsupported");
        return KM_OK;
    }
    if (rc == KP_E_NOMEM)
        return KM_ERR_NOMEM;
    if (rc != 0) {
        st->bad++;
        km_log_warn(cm, "__mirror_state-%d offset %lld: unreadable record skipped: %s",
                    (int)partition, (long long)r->offset, why != NULL ? why : kp_err_str(rc));
        return KM_OK;
    }
    err = km_state_table_put(t, r->key.ptr, (size_t)r->key.len,
                             r->value.len < 0 ? NULL : r->value.ptr,
                             r->value.len < 0 ? 0 : (size_t)r->value.len);
    if (err != KM_OK)
        return err;
    st->records++;
    if (r->value.len < 0)
        st->tombstones++;
    return KM_OK;
}

km_err_t km_state_table_replay(km_state_table_t *t, int32_t partition, const uint8_t *batches,
                               size_t len, int64_t *next_offset, km_state_replay_stats_t *st)
{
    km_plugin_t *cm = t->cm;
    kp_batch_iter_t it;
    kp_batch_t b;
    int rc;

    kp_batch_iter_init(&it, batches, len, 0, 0);
    while ((rc = kp_batch_iter_next(&it, &b)) == 1) {
        kp_record_iter_t ri;
        kp_writer_t scratch;
        kp_record_t r;
        km_err_t err = KM_OK;
        int rrc;

        if (b.hdr.baseOffset < 0 || b.hdr.lastOffsetDelta < 0 ||
            kp_batch_hdr_last_offset(&b.hdr) == INT64_MAX) {
            km_log_error(cm,
                         "__mirror_state-%d: batch at offset %lld has impossible offsets (last "
                         "offset delta %d)",
                         (int)partition, (long long)b.hdr.baseOffset, (int)b.hdr.lastOffsetDelta);
            return KM_ERR_INVALID;
        }
        if (kp_batch_hdr_last_offset(&b.hdr) < *next_offset)
            continue; /* the read started inside this batch: applied already */
        if (kp_batch_hdr_is_control(&b.hdr)) {
            st->control++;
            *next_offset = kp_batch_hdr_last_offset(&b.hdr) + 1;
            continue;
        }
        kp_writer_init(&scratch);
        rrc = kp_record_iter_init(&ri, &b, &scratch, KM_STATE_REPLAY_MAX_OUT);
        if (rrc == KP_E_NOMEM) {
            kp_writer_free(&scratch);
            return KM_ERR_NOMEM;
        }
        if (rrc != 0) {
            kp_writer_free(&scratch);
            km_log_error(cm, "__mirror_state-%d: batch at offset %lld cannot be read: %s",
                         (int)partition, (long long)b.hdr.baseOffset, kp_err_str(rrc));
            return KM_ERR_INVALID;
        }
        while ((rrc = kp_record_iter_next(&ri, &r)) == 1) {
            if (r.offset < *next_offset)
                continue;
            err = km_state_table_apply(t, partition, &r, st);
            if (err != KM_OK)
                break;
        }
        kp_writer_free(&scratch);
        if (err != KM_OK)
            return err;
        if (rrc < 0) {
            km_log_error(cm, "__mirror_state-%d: batch at offset %lld has bad records: %s",
                         (int)partition, (long long)b.hdr.baseOffset,
                         ri.errstr != NULL ? ri.errstr : kp_err_str(rrc));
            return KM_ERR_INVALID;
        }
        *next_offset = kp_batch_hdr_last_offset(&b.hdr) + 1;
    }
    if (rc < 0) {
        km_log_error(cm, "__mirror_state-%d: corrupt batch after offset %lld: %s", (int)partition,
                     (long long)*next_offset, it.errstr != NULL ? it.errstr : kp_err_str(rc));
        return KM_ERR_INVALID;
    }
    return KM_OK;
}

/* ---- write rules ------------------------------------------------------------------------- */

void km_state_pwrite_init(km_state_pwrite_t *w)
{
    memset(w, 0, sizeof(*w));
    w->state = KP_PSTATE_UNKNOWN;
    w->leader_epoch = -1;
    w->state_epoch = -1;
    w->lme_epoch = -1;
    w->lme_offset = -1;
    w->retry_attempt = -1;
    w->error_message = KP_STR_NULL;
}

static bool km_state_pstate_known(int s)
{
    return s >= KP_PSTATE_PREPARING && s <= KP_PSTATE_FAILED && s != 2;
}

bool km_state_transition_valid(int from, int to)
{
    if (!km_state_pstate_known(to))
        return false;
    if (from == to || to == KP_PSTATE_FAILED)
        return true;
    switch (to) {
    case KP_PSTATE_PREPARING:
        return from == KP_PSTATE_UNKNOWN || from == KP_PSTATE_STOPPED || from == KP_PSTATE_FAILED;
    case KP_PSTATE_EPOCH_FENCING:
        /* The prototype enters it from MIRRORING only; the design diagram also from PREPARING. */
        return from == KP_PSTATE_MIRRORING || from == KP_PSTATE_PREPARING;
    case KP_PSTATE_MIRRORING:
        return from == KP_PSTATE_PREPARING || from == KP_PSTATE_EPOCH_FENCING ||
               from == KP_PSTATE_PAUSED || from == KP_PSTATE_FAILED;
    case KP_PSTATE_PAUSING:
        return from == KP_PSTATE_MIRRORING;
    case KP_PSTATE_PAUSED:
        return from == KP_PSTATE_PAUSING;
    case KP_PSTATE_STOPPING:
        return from == KP_PSTATE_PREPARING || from == KP_PSTATE_EPOCH_FENCING ||
               from == KP_PSTATE_MIRRORING || from == KP_PSTATE_PAUSING ||
               from == KP_PSTATE_PAUSED || from == KP_PSTATE_FAILED;
    case KP_PSTATE_STOPPED:
        return from == KP_PSTATE_STOPPING;
    default:
        return false;
    }
}

int16_t km_state_pstate_apply(const kp_state_partition_t *cur, const km_state_pwrite_t *w,
                              int64_t now_ms, kp_state_partition_t *out, const char **msg)
{
    kp_state_value_t init;
    int from;

    if (cur == NULL) {
        kp_state_value_init(&init, KP_STATE_REC_PARTITION_STATE);
        cur = &init.u.partition;
    }
    from = cur->state;
    if (w->leader_epoch < -1 || w->state_epoch < -1 || w->lme_epoch < -1 || w->lme_offset < -1 ||
        w->retry_attempt < -1) {
        *msg = "negative epoch, offset or retry attempt";
        return KP_ERR_INVALID_REQUEST;
    }
    if (w->leader_epoch != -1 && cur->leader_epoch > w->leader_epoch) {
        *msg = "the coordinator has seen a newer leader epoch for this partition";
        return KP_ERR_FENCED_LEADER_EPOCH;
    }
    if (w->state_epoch != -1 && cur->state_epoch > w->state_epoch) {
        *msg = "the stored state epoch is newer than the one the writer expects";
        return KP_ERR_FENCED_STATE_EPOCH;
    }
    if (w->state != KP_PSTATE_UNKNOWN && !km_state_pstate_known(w->state)) {
        *msg = "unknown mirror partition state";
        return KP_ERR_INVALID_REQUEST;
    }
    if (w->state != KP_PSTATE_UNKNOWN && !km_state_transition_valid(from, w->state)) {
        *msg = "invalid mirror partition state transition";
        return KP_ERR_INVALID_CLUSTER_MIRROR_STATES;
    }
    *out = *cur;
    if (w->state != KP_PSTATE_UNKNOWN && w->state != from) {
        if (cur->state_epoch == INT32_MAX) {
            *msg = "state epoch overflow";
            return KP_ERR_INVALID_CLUSTER_MIRROR_STATES;
        }
        out->state = w->state;
        out->state_epoch = cur->state_epoch + 1;
        /* FAILED remembers where a retry returns to; any other state forgets it. */
        out->previous_state = w->state == KP_PSTATE_FAILED ? (int8_t)from : (int8_t)-1;
    }
    if (w->leader_epoch > out->leader_epoch)
        out->leader_epoch = w->leader_epoch;
    if (w->lme_epoch != -1 || w->lme_offset != -1) {
        out->last_mirrored_epoch = w->lme_epoch;
        out->last_mirrored_offset = w->lme_offset;
    }
    out->error_message = w->error_message;
    out->non_retryable = w->non_retryable;
    if (w->retry_attempt >= 0)
        out->retry_attempt = w->retry_attempt > INT16_MAX ? INT16_MAX : (int16_t)w->retry_attempt;
    out->update_time_ms = now_ms;
    *msg = NULL;
    return 0;
}
