/*
 * kb_txnsm.c -- the transaction state machine (see kb_txnsm.h).
 */
#include "kb_txnsm.h"

#include <stdlib.h>
#include <string.h>

#include "kb_err.h"
#include "kp_errcode.h"

/* ---- partition sets -------------------------------------------------------------------------- */

static int kb_txn_tp_cmp(const char *topic, int32_t partition, const kb_txn_tp_t *tp)
{
    int c = strcmp(topic, tp->topic);
    if (c)
        return c;
    return partition < tp->partition ? -1 : partition > tp->partition;
}

/* Index of the first element not below (topic, partition). */
static size_t kb_txn_tpset_lower(const kb_txn_tpset_t *s, const char *topic, int32_t partition)
{
    size_t lo = 0, hi = s->cnt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (kb_txn_tp_cmp(topic, partition, &s->v[mid]) > 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool kb_txn_tpset_has(const kb_txn_tpset_t *s, const char *topic, int32_t partition)
{
    size_t i = kb_txn_tpset_lower(s, topic, partition);
    return i < s->cnt && kb_txn_tp_cmp(topic, partition, &s->v[i]) == 0;
}

int kb_txn_tpset_add(kb_txn_tpset_t *s, const char *topic, int32_t partition)
{
    size_t i = kb_txn_tpset_lower(s, topic, partition);
    char *t;
    if (i < s->cnt && kb_txn_tp_cmp(topic, partition, &s->v[i]) == 0)
        return 0;
    if (s->cnt == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 4;
        kb_txn_tp_t *n = realloc(s->v, ncap * sizeof(*n));
        if (!n)
            return KB_E_NOMEM;
        s->v = n;
        s->cap = ncap;
    }
    t = strdup(topic);
    if (!t)
        return KB_E_NOMEM;
    memmove(&s->v[i + 1], &s->v[i], (s->cnt - i) * sizeof(*s->v));
    s->v[i].topic = t;
    s->v[i].partition = partition;
    s->cnt++;
    return 0;
}

void kb_txn_tpset_clear(kb_txn_tpset_t *s)
{
    for (size_t i = 0; i < s->cnt; i++)
        free(s->v[i].topic);
    free(s->v);
    s->v = NULL;
    s->cnt = s->cap = 0;
}

int kb_txn_tpset_copy(kb_txn_tpset_t *dst, const kb_txn_tpset_t *src)
{
    memset(dst, 0, sizeof(*dst));
    if (!src->cnt)
        return 0;
    dst->v = calloc(src->cnt, sizeof(*dst->v));
    if (!dst->v)
        return KB_E_NOMEM;
    dst->cap = src->cnt;
    for (size_t i = 0; i < src->cnt; i++) {
        dst->v[i].topic = strdup(src->v[i].topic);
        if (!dst->v[i].topic) {
            kb_txn_tpset_clear(dst);
            return KB_E_NOMEM;
        }
        dst->v[i].partition = src->v[i].partition;
        dst->cnt++;
    }
    return 0;
}

/* ---- metadata -------------------------------------------------------------------------------- */

void kb_txnmeta_init(kb_txnmeta_t *m, int64_t pid, int32_t timeout_ms, int64_t now_ms)
{
    memset(m, 0, sizeof(*m));
    m->producer_id = pid;
    m->prev_producer_id = KB_TXN_NO_PID;
    m->next_producer_id = KB_TXN_NO_PID;
    m->producer_epoch = KB_TXN_NO_EPOCH;
    m->last_producer_epoch = KB_TXN_NO_EPOCH;
    m->timeout_ms = timeout_ms;
    m->state = KB_TXN_EMPTY;
    m->start_ms = -1;
    m->last_update_ms = now_ms;
}

int kb_txnmeta_copy(kb_txnmeta_t *dst, const kb_txnmeta_t *src)
{
    *dst = *src;
    return kb_txn_tpset_copy(&dst->tps, &src->tps);
}

void kb_txnmeta_free(kb_txnmeta_t *m)
{
    kb_txn_tpset_clear(&m->tps);
}

void kb_txnmeta_move(kb_txnmeta_t *dst, kb_txnmeta_t *src)
{
    kb_txnmeta_free(dst);
    *dst = *src;
    memset(&src->tps, 0, sizeof(src->tps));
}

void kb_txnmeta_to_value(const kb_txnmeta_t *m, kb_txnlog_value_t *v)
{
    memset(v, 0, sizeof(*v));
    v->version = 1;
    v->producer_id = m->producer_id;
    v->prev_producer_id = m->prev_producer_id;
    v->next_producer_id = m->next_producer_id;
    v->producer_epoch = m->producer_epoch;
    v->next_producer_epoch = -1;
    v->timeout_ms = m->timeout_ms;
    v->state = m->state;
    /* Kafka writes a null partition list for Empty, a (possibly empty) list otherwise. */
    v->partitions_null = m->state == KB_TXN_EMPTY;
    v->tps = m->tps.v;
    v->tp_cnt = m->tps.cnt;
    v->last_update_ms = m->last_update_ms;
    v->start_ms = m->start_ms;
    v->client_txn_version = m->client_tv;
}

void kb_txnmeta_from_value(kb_txnmeta_t *m, kb_txnlog_value_t *v)
{
    memset(m, 0, sizeof(*m));
    m->producer_id = v->producer_id;
    m->prev_producer_id = v->prev_producer_id;
    m->next_producer_id = v->next_producer_id;
    m->producer_epoch = v->producer_epoch;
    m->last_producer_epoch = KB_TXN_NO_EPOCH;
    m->timeout_ms = v->timeout_ms;
    m->state = v->state;
    m->tps.v = v->tps; /* sorted by the decoder */
    m->tps.cnt = m->tps.cap = v->tp_cnt;
    v->tps = NULL;
    v->tp_cnt = 0;
    m->start_ms = v->start_ms;
    m->last_update_ms = v->last_update_ms;
    m->client_tv = v->client_txn_version;
}

bool kb_txnsm_epoch_exhausted(int16_t epoch)
{
    return epoch >= KB_TXN_EPOCH_MAX - 1;
}

int16_t kb_txnsm_fence_epoch(const kb_txnmeta_t *cur)
{
    return cur->producer_epoch < KB_TXN_EPOCH_MAX ? (int16_t)(cur->producer_epoch + 1)
                                                  : cur->producer_epoch;
}

bool kb_txnsm_expirable(const kb_txnmeta_t *m)
{
    return m->state == KB_TXN_EMPTY || m->state == KB_TXN_COMPLETE_COMMIT ||
           m->state == KB_TXN_COMPLETE_ABORT;
}

/* ---- InitProducerId -------------------------------------------------------------------------- */

kb_txnsm_act_t kb_txnsm_init_pid(const kb_txnmeta_t *cur, const kb_txnsm_initpid_t *rq,
                                 kb_txnsm_alloc_fn alloc, void *alloc_opaque, kb_txnmeta_t *next,
                                 int16_t *err)
{
    bool has_exp = rq->exp_pid != KB_TXN_NO_PID;
    int16_t epoch, last;
    int64_t pid = cur->producer_id;

    *err = KP_ERR_NONE;
    memset(next, 0, sizeof(*next));
    if (has_exp) {
        /* KIP-360: the producer names the id and epoch it had. Fence it unless the metadata is
         * fresh, the id is the current one, or the id is the previous one with its epoch
         * exhausted (a retry of a rotation whose answer was lost). */
        bool valid =
            cur->producer_epoch == KB_TXN_NO_EPOCH || rq->exp_pid == cur->producer_id ||
            (rq->exp_pid == cur->prev_producer_id && kb_txnsm_epoch_exhausted(rq->exp_epoch));
        if (!valid) {
            *err = KP_ERR_PRODUCER_FENCED;
            return KB_TXNSM_ERROR;
        }
    }
    switch (cur->state) {
    case KB_TXN_PREPARE_COMMIT:
    case KB_TXN_PREPARE_ABORT:
        *err = KP_ERR_CONCURRENT_TRANSACTIONS;
        return KB_TXNSM_ERROR;
    case KB_TXN_ONGOING:
        /* The ongoing transaction of the previous producer is aborted first with a bumped
         * epoch; the client retries and then gets yet another epoch (as Kafka). */
        next->producer_epoch = kb_txnsm_fence_epoch(cur);
        return KB_TXNSM_FENCE;
    case KB_TXN_EMPTY:
    case KB_TXN_COMPLETE_COMMIT:
    case KB_TXN_COMPLETE_ABORT:
        break;
    default:
        *err = KP_ERR_UNKNOWN_SERVER_ERROR;
        return KB_TXNSM_ERROR;
    }
    if (kb_txnsm_epoch_exhausted(cur->producer_epoch) &&
        (!has_exp || rq->exp_epoch == cur->producer_epoch)) {
        /* Epochs ran out: a new producer id, epoch 0. */
        if (alloc(alloc_opaque, &pid) != 0) {
            *err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
            return KB_TXNSM_ERROR;
        }
        epoch = 0;
        last = has_exp ? cur->producer_epoch : KB_TXN_NO_EPOCH;
    } else if (!has_exp) {
        epoch = (int16_t)(cur->producer_epoch + 1);
        last = KB_TXN_NO_EPOCH;
    } else if (cur->producer_epoch == KB_TXN_NO_EPOCH || rq->exp_epoch == cur->producer_epoch) {
        if (kb_txnsm_epoch_exhausted(cur->producer_epoch)) {
            *err = KP_ERR_PRODUCER_FENCED;
            return KB_TXNSM_ERROR;
        }
        epoch = (int16_t)(cur->producer_epoch + 1);
        last = cur->producer_epoch;
    } else if (rq->exp_epoch == cur->last_producer_epoch) {
        /* A retry of an InitProducerId that succeeded: same epoch again. */
        epoch = cur->producer_epoch;
        last = cur->last_producer_epoch;
    } else {
        *err = KP_ERR_PRODUCER_FENCED;
        return KB_TXNSM_ERROR;
    }
    *next = *cur;
    memset(&next->tps, 0, sizeof(next->tps));
    next->prev_producer_id = cur->producer_id;
    next->producer_id = pid;
    next->next_producer_id = KB_TXN_NO_PID;
    next->producer_epoch = epoch;
    next->last_producer_epoch = last;
    next->timeout_ms = rq->timeout_ms;
    next->state = KB_TXN_EMPTY;
    next->start_ms = -1;
    next->last_update_ms = rq->now_ms;
    return KB_TXNSM_WRITE;
}

/* ---- AddPartitionsToTxn, verification -------------------------------------------------------- */

kb_txnsm_act_t kb_txnsm_add_partitions(const kb_txnmeta_t *cur, int64_t pid, int16_t epoch,
                                       const kb_txn_tp_t *tps, size_t n, int16_t client_tv,
                                       int64_t now_ms, kb_txnmeta_t *next, int16_t *err)
{
    bool all = true;

    *err = KP_ERR_NONE;
    memset(next, 0, sizeof(*next));
    if (cur->producer_id != pid) {
        *err = KP_ERR_INVALID_PRODUCER_ID_MAPPING;
        return KB_TXNSM_ERROR;
    }
    if (cur->producer_epoch != epoch) {
        *err = KP_ERR_PRODUCER_FENCED;
        return KB_TXNSM_ERROR;
    }
    if (cur->state == KB_TXN_PREPARE_COMMIT || cur->state == KB_TXN_PREPARE_ABORT) {
        *err = KP_ERR_CONCURRENT_TRANSACTIONS;
        return KB_TXNSM_ERROR;
    }
    for (size_t i = 0; i < n && all; i++)
        all = kb_txn_tpset_has(&cur->tps, tps[i].topic, tps[i].partition);
    if (cur->state == KB_TXN_ONGOING && all)
        return KB_TXNSM_NOOP;
    if (kb_txnmeta_copy(next, cur) != 0)
        goto nomem;
    for (size_t i = 0; i < n; i++)
        if (kb_txn_tpset_add(&next->tps, tps[i].topic, tps[i].partition) != 0)
            goto nomem;
    if (cur->state != KB_TXN_ONGOING)
        next->start_ms = now_ms;
    next->prev_producer_id = cur->producer_id;
    next->state = KB_TXN_ONGOING;
    next->last_update_ms = now_ms;
    next->client_tv = client_tv;
    return KB_TXNSM_WRITE;
nomem:
    kb_txnmeta_free(next);
    *err = KP_ERR_UNKNOWN_SERVER_ERROR;
    return KB_TXNSM_ERROR;
}

int16_t kb_txnsm_verify(const kb_txnmeta_t *cur, int64_t pid, int16_t epoch, const char *topic,
                        int32_t partition)
{
    if (cur->producer_id != pid)
        return KP_ERR_INVALID_PRODUCER_ID_MAPPING;
    if (cur->producer_epoch != epoch)
        return KP_ERR_PRODUCER_FENCED;
    if (cur->state == KB_TXN_PREPARE_COMMIT || cur->state == KB_TXN_PREPARE_ABORT)
        return KP_ERR_CONCURRENT_TRANSACTIONS;
    return kb_txn_tpset_has(&cur->tps, topic, partition) ? KP_ERR_NONE
                                                         : KP_ERR_TRANSACTION_ABORTABLE;
}

/* ---- EndTxn ---------------------------------------------------------------------------------- */

/* The Prepare transition (Kafka's prepareAbortOrCommit). */
static kb_txnsm_act_t kb_txnsm_prepare(const kb_txnmeta_t *cur, const kb_txnsm_end_t *rq,
                                       int8_t state, bool no_partition_added, int64_t next_pid,
                                       kb_txnmeta_t *next, int16_t *err)
{
    if (kb_txnmeta_copy(next, cur) != 0) {
        *err = KP_ERR_UNKNOWN_SERVER_ERROR;
        return KB_TXNSM_ERROR;
    }
    next->state = state;
    next->prev_producer_id = cur->producer_id;
    next->next_producer_id = next_pid;
    next->last_update_ms = rq->now_ms;
    if (no_partition_added)
        next->start_ms = rq->now_ms;
    if (rq->tv2) {
        /* KIP-890 part 2: every transaction ends with an epoch bump. */
        next->producer_epoch = rq->epoch_fence ? rq->epoch
                               : cur->producer_epoch < KB_TXN_EPOCH_MAX
                                   ? (int16_t)(cur->producer_epoch + 1)
                                   : cur->producer_epoch;
        next->last_producer_epoch = cur->producer_epoch;
        next->client_tv = 2;
    } else {
        if (rq->epoch_fence) {
            next->producer_epoch = rq->epoch;
            next->last_producer_epoch = KB_TXN_NO_EPOCH;
        }
        next->client_tv = 0;
    }
    return KB_TXNSM_WRITE;
}

static kb_txnsm_act_t kb_txnsm_invalid(int16_t *err)
{
    *err = KP_ERR_INVALID_TXN_STATE;
    return KB_TXNSM_ERROR;
}

static kb_txnsm_act_t kb_txnsm_end_tv1(const kb_txnmeta_t *cur, const kb_txnsm_end_t *rq,
                                       kb_txnmeta_t *next, int16_t *err)
{
    if (cur->producer_id != rq->pid) {
        *err = KP_ERR_INVALID_PRODUCER_ID_MAPPING;
        return KB_TXNSM_ERROR;
    }
    /* Clients must name the current epoch; the coordinator's own aborts name a newer one. */
    if ((rq->from_client && rq->epoch != cur->producer_epoch) || rq->epoch < cur->producer_epoch) {
        *err = KP_ERR_PRODUCER_FENCED;
        return KB_TXNSM_ERROR;
    }
    switch (cur->state) {
    case KB_TXN_ONGOING:
        return kb_txnsm_prepare(cur, rq, rq->commit ? KB_TXN_PREPARE_COMMIT : KB_TXN_PREPARE_ABORT,
                                false, KB_TXN_NO_PID, next, err);
    case KB_TXN_COMPLETE_COMMIT:
        if (!rq->commit)
            return kb_txnsm_invalid(err);
        return KB_TXNSM_NOOP;
    case KB_TXN_COMPLETE_ABORT:
        if (rq->commit)
            return kb_txnsm_invalid(err);
        return KB_TXNSM_NOOP;
    case KB_TXN_PREPARE_COMMIT:
        if (!rq->commit)
            return kb_txnsm_invalid(err);
        *err = KP_ERR_CONCURRENT_TRANSACTIONS;
        return KB_TXNSM_ERROR;
    case KB_TXN_PREPARE_ABORT:
        if (rq->commit)
            return kb_txnsm_invalid(err);
        *err = KP_ERR_CONCURRENT_TRANSACTIONS;
        return KB_TXNSM_ERROR;
    default:
        return kb_txnsm_invalid(err);
    }
}

static kb_txnsm_act_t kb_txnsm_end_tv2(const kb_txnmeta_t *cur, const kb_txnsm_end_t *rq,
                                       kb_txnsm_alloc_fn alloc, void *alloc_opaque,
                                       kb_txnmeta_t *next, int16_t *err)
{
    bool fence = rq->epoch_fence;
    bool retry_overflow = !fence && cur->prev_producer_id == rq->pid &&
                          rq->epoch == KB_TXN_EPOCH_MAX - 1 && cur->producer_epoch == 0;
    bool retry_bump = !fence && cur->producer_epoch == rq->epoch + 1;
    bool retry = retry_overflow || retry_bump, valid;
    int8_t target = rq->commit ? KB_TXN_PREPARE_COMMIT : KB_TXN_PREPARE_ABORT;
    bool no_partition_added = true;
    int64_t next_pid = KB_TXN_NO_PID;

    if (fence) {
        valid = !rq->from_client || rq->epoch == cur->producer_epoch;
    } else {
        switch (cur->state) {
        case KB_TXN_PREPARE_COMMIT:
        case KB_TXN_PREPARE_ABORT:
            valid = retry_bump;
            break;
        case KB_TXN_COMPLETE_COMMIT:
        case KB_TXN_COMPLETE_ABORT:
            valid = retry || rq->epoch == cur->producer_epoch;
            break;
        default:
            valid = rq->epoch == cur->producer_epoch;
        }
    }
    if (cur->producer_id != rq->pid && !retry_overflow) {
        *err = KP_ERR_INVALID_PRODUCER_ID_MAPPING;
        return KB_TXNSM_ERROR;
    }
    if (!valid) {
        *err = KP_ERR_PRODUCER_FENCED;
        return KB_TXNSM_ERROR;
    }
    switch (cur->state) {
    case KB_TXN_ONGOING:
        no_partition_added = false;
        break;
    case KB_TXN_COMPLETE_COMMIT:
        if (rq->commit)
            return retry ? KB_TXNSM_NOOP : kb_txnsm_invalid(err);
        if (retry)
            return kb_txnsm_invalid(err);
        break;
    case KB_TXN_COMPLETE_ABORT:
        if (rq->commit)
            return kb_txnsm_invalid(err);
        if (retry)
            return KB_TXNSM_NOOP;
        break;
    case KB_TXN_PREPARE_COMMIT:
        if (!rq->commit)
            return kb_txnsm_invalid(err);
        *err = KP_ERR_CONCURRENT_TRANSACTIONS;
        return KB_TXNSM_ERROR;
    case KB_TXN_PREPARE_ABORT:
        if (rq->commit)
            return kb_txnsm_invalid(err);
        *err = KP_ERR_CONCURRENT_TRANSACTIONS;
        return KB_TXNSM_ERROR;
    case KB_TXN_EMPTY:
        if (rq->commit)
            return kb_txnsm_invalid(err);
        break;
    default:
        return kb_txnsm_invalid(err);
    }
    if (!fence && kb_txnsm_epoch_exhausted(cur->producer_epoch) &&
        alloc(alloc_opaque, &next_pid) != 0) {
        *err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
        return KB_TXNSM_ERROR;
    }
    return kb_txnsm_prepare(cur, rq, target, no_partition_added, next_pid, next, err);
}

kb_txnsm_act_t kb_txnsm_end(const kb_txnmeta_t *cur, const kb_txnsm_end_t *rq,
                            kb_txnsm_alloc_fn alloc, void *alloc_opaque, kb_txnmeta_t *next,
                            int16_t *err)
{
    *err = KP_ERR_NONE;
    memset(next, 0, sizeof(*next));
    if (rq->tv2)
        return kb_txnsm_end_tv2(cur, rq, alloc, alloc_opaque, next, err);
    return kb_txnsm_end_tv1(cur, rq, next, err);
}

int kb_txnsm_complete(const kb_txnmeta_t *prep, int64_t now_ms, kb_txnmeta_t *next)
{
    *next = *prep;
    memset(&next->tps, 0, sizeof(next->tps));
    next->state =
        prep->state == KB_TXN_PREPARE_COMMIT ? KB_TXN_COMPLETE_COMMIT : KB_TXN_COMPLETE_ABORT;
    next->prev_producer_id = prep->producer_id;
    if (prep->client_tv >= 2 && prep->next_producer_id != KB_TXN_NO_PID) {
        /* The epoch ran out at this transaction: the producer continues with the new id. */
        next->producer_id = prep->next_producer_id;
        next->producer_epoch = 0;
    }
    next->next_producer_id = KB_TXN_NO_PID;
    next->last_update_ms = now_ms;
    return 0;
}
