/*
 * kb_ctrl_reg.c -- the controller's broker registry (kb_ctrl_reg.h).
 */
#include "kb_ctrl_reg.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kp_errcode.h"

struct kb_ctrl_reg_s {
    pthread_mutex_t mu;
    int64_t session_ms;
    int64_t last_epoch;
    size_t n, cap;
    kb_ctrl_broker_t *v; /* sorted by id */
};

kb_ctrl_reg_t *kb_ctrl_reg_new(int64_t session_ms)
{
    kb_ctrl_reg_t *reg = calloc(1, sizeof(*reg));
    if (!reg)
        return NULL;
    pthread_mutex_init(&reg->mu, NULL);
    reg->session_ms = session_ms;
    return reg;
}

void kb_ctrl_reg_free(kb_ctrl_reg_t *reg)
{
    if (!reg)
        return;
    pthread_mutex_destroy(&reg->mu);
    free(reg->v);
    free(reg);
}

/* Index of @p id, or where it would go (*found false). mu held. */
static size_t kb_ctrl_reg_find(const kb_ctrl_reg_t *reg, int32_t id, bool *found)
{
    size_t lo = 0, hi = reg->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (reg->v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < reg->n && reg->v[lo].id == id;
    return lo;
}

static bool kb_ctrl_reg_session_valid(const kb_ctrl_reg_t *reg, const kb_ctrl_broker_t *b,
                                      int64_t now_ms)
{
    return !b->fenced && now_ms - b->last_heartbeat_ms <= reg->session_ms;
}

int16_t kb_ctrl_reg_register(kb_ctrl_reg_t *reg, const kb_ctrl_broker_t *b, int64_t previous_epoch,
                             int64_t now_ms, int64_t log_offset, int64_t *epoch_out)
{
    bool found;
    size_t i;
    kb_ctrl_broker_t *e;
    int16_t ec = 0;

    if (b->id < 0 || b->nendpoints < 0 || b->nendpoints > KB_CTRL_MAX_ENDPOINTS)
        return KP_ERR_INVALID_REQUEST;
    pthread_mutex_lock(&reg->mu);
    i = kb_ctrl_reg_find(reg, b->id, &found);
    if (found) {
        e = &reg->v[i];
        if (memcmp(&e->incarnation, &b->incarnation, sizeof(b->incarnation)) != 0 &&
            kb_ctrl_reg_session_valid(reg, e, now_ms) && previous_epoch != e->epoch) {
            ec = KP_ERR_DUPLICATE_BROKER_REGISTRATION;
            goto out;
        }
    } else {
        if (reg->n == reg->cap) {
            size_t ncap = reg->cap ? reg->cap * 2 : 8;
            kb_ctrl_broker_t *nv;
            if (ncap > KB_CTRL_MAX_BROKERS || !(nv = realloc(reg->v, ncap * sizeof(*nv)))) {
                ec = KP_ERR_UNKNOWN_SERVER_ERROR;
                goto out;
            }
            reg->v = nv;
            reg->cap = ncap;
        }
        memmove(&reg->v[i + 1], &reg->v[i], (reg->n - i) * sizeof(*reg->v));
        reg->n++;
        e = &reg->v[i];
    }
    *e = *b;
    e->epoch = reg->last_epoch + 1 > now_ms ? reg->last_epoch + 1 : now_ms;
    reg->last_epoch = e->epoch;
    e->fenced = true;
    e->shutting_down = false;
    e->last_heartbeat_ms = now_ms;
    e->caught_up_offset = log_offset;
    e->offset = -1;
    *epoch_out = e->epoch;
out:
    pthread_mutex_unlock(&reg->mu);
    return ec;
}

int16_t kb_ctrl_reg_heartbeat(kb_ctrl_reg_t *reg, int32_t id, int64_t epoch, int64_t offset,
                              bool want_fence, bool want_shutdown, int64_t now_ms,
                              kb_ctrl_hb_t *out)
{
    bool found;
    size_t i;
    kb_ctrl_broker_t *e;

    memset(out, 0, sizeof(*out));
    out->fenced = true;
    pthread_mutex_lock(&reg->mu);
    i = kb_ctrl_reg_find(reg, id, &found);
    if (!found) {
        pthread_mutex_unlock(&reg->mu);
        return KP_ERR_BROKER_ID_NOT_REGISTERED;
    }
    e = &reg->v[i];
    if (e->epoch != epoch) {
        pthread_mutex_unlock(&reg->mu);
        return KP_ERR_STALE_BROKER_EPOCH;
    }
    e->last_heartbeat_ms = now_ms;
    e->offset = offset;
    out->caught_up = offset >= e->caught_up_offset;
    if (want_shutdown)
        e->shutting_down = true;
    if (want_fence && !e->fenced) {
        e->fenced = true;
        out->fenced_now = true;
    } else if (!want_fence && e->fenced && out->caught_up && !e->shutting_down) {
        e->fenced = false;
        out->unfenced_now = true;
    }
    out->fenced = e->fenced;
    out->shutting_down = e->shutting_down;
    pthread_mutex_unlock(&reg->mu);
    return 0;
}

size_t kb_ctrl_reg_expire(kb_ctrl_reg_t *reg, int64_t now_ms, int32_t *out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&reg->mu);
    for (size_t i = 0; i < reg->n && n < max; i++) {
        kb_ctrl_broker_t *e = &reg->v[i];
        if (!e->fenced && now_ms - e->last_heartbeat_ms > reg->session_ms) {
            e->fenced = true;
            out[n++] = e->id;
        }
    }
    pthread_mutex_unlock(&reg->mu);
    return n;
}

int kb_ctrl_reg_load(kb_ctrl_reg_t *reg, const kb_ctrl_broker_t *b, int64_t now_ms)
{
    bool found;
    size_t i;
    kb_ctrl_broker_t *e;

    if (b->id < 0 || b->nendpoints < 0 || b->nendpoints > KB_CTRL_MAX_ENDPOINTS)
        return -1;
    pthread_mutex_lock(&reg->mu);
    i = kb_ctrl_reg_find(reg, b->id, &found);
    if (!found) {
        if (reg->n == reg->cap) {
            size_t ncap = reg->cap ? reg->cap * 2 : 8;
            kb_ctrl_broker_t *nv;
            if (ncap > KB_CTRL_MAX_BROKERS || !(nv = realloc(reg->v, ncap * sizeof(*nv)))) {
                pthread_mutex_unlock(&reg->mu);
                return -1;
            }
            reg->v = nv;
            reg->cap = ncap;
        }
        memmove(&reg->v[i + 1], &reg->v[i], (reg->n - i) * sizeof(*reg->v));
        reg->n++;
    }
    e = &reg->v[i];
    *e = *b;
    e->shutting_down = false;
    e->last_heartbeat_ms = now_ms;
    e->caught_up_offset = -1;
    e->offset = -1;
    if (e->epoch > reg->last_epoch)
        reg->last_epoch = e->epoch;
    pthread_mutex_unlock(&reg->mu);
    return 0;
}

int16_t kb_ctrl_reg_unregister(kb_ctrl_reg_t *reg, int32_t id)
{
    bool found;
    size_t i;
    pthread_mutex_lock(&reg->mu);
    i = kb_ctrl_reg_find(reg, id, &found);
    if (found) {
        memmove(&reg->v[i], &reg->v[i + 1], (reg->n - i - 1) * sizeof(*reg->v));
        reg->n--;
    }
    pthread_mutex_unlock(&reg->mu);
    return found ? 0 : KP_ERR_BROKER_ID_NOT_REGISTERED;
}

bool kb_ctrl_reg_usable(kb_ctrl_reg_t *reg, int32_t id)
{
    bool found, ok;
    size_t i;
    pthread_mutex_lock(&reg->mu);
    i = kb_ctrl_reg_find(reg, id, &found);
    ok = found && !reg->v[i].fenced && !reg->v[i].shutting_down;
    pthread_mutex_unlock(&reg->mu);
    return ok;
}

int kb_ctrl_reg_get(kb_ctrl_reg_t *reg, int32_t id, kb_ctrl_broker_t *out)
{
    bool found;
    size_t i;
    pthread_mutex_lock(&reg->mu);
    i = kb_ctrl_reg_find(reg, id, &found);
    if (found)
        *out = reg->v[i];
    pthread_mutex_unlock(&reg->mu);
    return found ? 0 : -1;
}

int kb_ctrl_reg_list(kb_ctrl_reg_t *reg, kb_ctrl_broker_t **out, size_t *cnt)
{
    kb_ctrl_broker_t *v;
    pthread_mutex_lock(&reg->mu);
    v = malloc((reg->n ? reg->n : 1) * sizeof(*v));
    if (v) {
        if (reg->n)
            memcpy(v, reg->v, reg->n * sizeof(*v));
        *cnt = reg->n;
    }
    pthread_mutex_unlock(&reg->mu);
    *out = v;
    return v ? 0 : -1;
}
