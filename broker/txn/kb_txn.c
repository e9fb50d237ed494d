/*
 * kb_txn.c -- the transaction coordinator (see kb_txn.h): transactional ids, persistence in
 * __transaction_state, loading, markers, timer, group hook registry.
 */
#include "kb_txn.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kb_apilog.h"
#include "kb_err.h"
#include "kb_time.h"
#include "kb_txn_int.h"
#include "kp_batch.h"
#include "kp_errcode.h"

#define KB_TXN_LOAD_CHUNK (1 << 20)

/* ---- group hook registry (keyed by broker, independent of module order) ---------------------- */

static pthread_rwlock_t kb_txn_hook_rw = PTHREAD_RWLOCK_INITIALIZER;
static struct {
    const kb_broker_t *kb;
    kb_txn_group_hook_t hook;
    void *opaque;
} kb_txn_hooks[16];

int kb_txn_group_hook_install(const kb_broker_t *kb, const kb_txn_group_hook_t *hook, void *opaque)
{
    int rc = KB_E_NOMEM;
    size_t i, free_slot = SIZE_MAX;
    pthread_rwlock_wrlock(&kb_txn_hook_rw);
    for (i = 0; i < sizeof(kb_txn_hooks) / sizeof(kb_txn_hooks[0]); i++) {
        if (kb_txn_hooks[i].kb == kb)
            break;
        if (!kb_txn_hooks[i].kb && free_slot == SIZE_MAX)
            free_slot = i;
    }
    if (i == sizeof(kb_txn_hooks) / sizeof(kb_txn_hooks[0]))
        i = free_slot;
    if (i != SIZE_MAX) {
        kb_txn_hooks[i].kb = kb;
        kb_txn_hooks[i].hook = *hook;
        kb_txn_hooks[i].opaque = opaque;
        rc = 0;
    }
    pthread_rwlock_unlock(&kb_txn_hook_rw);
    return rc;
}

void kb_txn_group_hook_remove(const kb_broker_t *kb)
{
    pthread_rwlock_wrlock(&kb_txn_hook_rw);
    for (size_t i = 0; i < sizeof(kb_txn_hooks) / sizeof(kb_txn_hooks[0]); i++) {
        if (kb_txn_hooks[i].kb == kb) {
            memset(&kb_txn_hooks[i], 0, sizeof(kb_txn_hooks[i]));
            break;
        }
    }
    pthread_rwlock_unlock(&kb_txn_hook_rw);
}

/* Find the hook of @p kb and take the registry's read lock (kept while the hook runs, so that
 * removal waits for it). Returns the slot or NULL (lock released then). */
static const kb_txn_group_hook_t *kb_txn_hook_get(const kb_broker_t *kb, void **opaque)
{
    if (!kb)
        return NULL;
    pthread_rwlock_rdlock(&kb_txn_hook_rw);
    for (size_t i = 0; i < sizeof(kb_txn_hooks) / sizeof(kb_txn_hooks[0]); i++) {
        if (kb_txn_hooks[i].kb == kb) {
            *opaque = kb_txn_hooks[i].opaque;
            return &kb_txn_hooks[i].hook;
        }
    }
    pthread_rwlock_unlock(&kb_txn_hook_rw);
    return NULL;
}

static void kb_txn_hook_put(void)
{
    pthread_rwlock_unlock(&kb_txn_hook_rw);
}

static kb_txn_entry_t **kb_txn_snapshot(kb_txn_t *c, size_t *n);

/* ---- basics ---------------------------------------------------------------------------------- */

int64_t kb_txn_now(kb_txn_t *c)
{
    return c->clock ? c->clock(c->clock_opaque) : kb_time_wall_ms();
}

static int kb_txn_alloc_pid(void *opaque, int64_t *pid)
{
    kb_txn_t *c = opaque;
    return kb_meta_alloc_producer_ids(c->meta, 1, pid);
}

static uint64_t kb_txn_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

int16_t kb_txn_ensure_topic(kb_txn_t *c)
{
    kb_topic_info_t ti;
    int16_t ec;
    pthread_mutex_lock(&c->mu);
    if (c->nparts > 0) {
        pthread_mutex_unlock(&c->mu);
        return KP_ERR_NONE;
    }
    pthread_mutex_unlock(&c->mu);
    ec = kb_meta_ensure_internal_topic(c->meta, KB_TOPIC_TRANSACTION_STATE, &ti);
    if (ec)
        return ec;
    kb_log_info("txn", "%s has %" PRId32 " partitions", KB_TOPIC_TRANSACTION_STATE, ti.partitions);
    kb_txn_reconcile(c); /* take the partitions this node leads */
    return KP_ERR_NONE;
}

int32_t kb_txn_offsets_partition(kb_txn_t *c, const char *group_id)
{
    kb_topic_info_t ti;
    int32_t n = c->cfg->offsets_topic_num_partitions;
    if (kb_meta_topic_by_name(c->meta, KB_TOPIC_CONSUMER_OFFSETS, &ti) == 0 && ti.partitions > 0)
        n = ti.partitions;
    return kb_txnlog_partition_for(group_id, strlen(group_id), n);
}

/* ---- the table ------------------------------------------------------------------------------- */

static void kb_txn_entry_destroy(kb_txn_entry_t *e)
{
    kb_txnmeta_free(&e->m);
    free(e->done);
    free(e->id);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static kb_txn_entry_t *kb_txn_entry_new(const char *id, int32_t partition)
{
    kb_txn_entry_t *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->id_len = strlen(id);
    e->id = strdup(id);
    if (!e->id) {
        free(e);
        return NULL;
    }
    e->partition = partition;
    pthread_mutex_init(&e->mu, NULL);
    return e;
}

static int kb_txn_table_grow(kb_txn_t *c)
{
    size_t n = c->nbuckets ? c->nbuckets * 2 : 64;
    kb_txn_entry_t **nb = calloc(n, sizeof(*nb));
    if (!nb)
        return KB_E_NOMEM;
    for (size_t i = 0; i < c->nbuckets; i++) {
        kb_txn_entry_t *e = c->buckets[i], *nx;
        for (; e; e = nx) {
            size_t b = kb_txn_hash(e->id, e->id_len) & (n - 1);
            nx = e->next;
            e->next = nb[b];
            nb[b] = e;
        }
    }
    free(c->buckets);
    c->buckets = nb;
    c->nbuckets = n;
    return 0;
}

/* Under c->mu. */
static kb_txn_entry_t *kb_txn_table_find(kb_txn_t *c, const char *id, size_t len)
{
    kb_txn_entry_t *e;
    if (!c->nbuckets)
        return NULL;
    for (e = c->buckets[kb_txn_hash(id, len) & (c->nbuckets - 1)]; e; e = e->next)
        if (e->id_len == len && !memcmp(e->id, id, len))
            return e;
    return NULL;
}

/* Under c->mu. */
static int kb_txn_table_insert(kb_txn_t *c, kb_txn_entry_t *e)
{
    size_t b;
    if ((c->count + 1) * 2 > c->nbuckets && kb_txn_table_grow(c) != 0)
        return KB_E_NOMEM;
    b = kb_txn_hash(e->id, e->id_len) & (c->nbuckets - 1);
    e->next = c->buckets[b];
    c->buckets[b] = e;
    e->linked = true;
    e->refcnt++; /* the table's reference */
    c->count++;
    return 0;
}

/* Under c->mu. */
static void kb_txn_table_unlink(kb_txn_t *c, kb_txn_entry_t *e)
{
    kb_txn_entry_t **pp;
    if (!e->linked)
        return;
    for (pp = &c->buckets[kb_txn_hash(e->id, e->id_len) & (c->nbuckets - 1)]; *pp;
         pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    }
    e->linked = false;
    e->next = NULL;
    c->count--;
    e->refcnt--; /* the table's reference; the caller still holds its own */
}

static void kb_txn_entry_release(kb_txn_t *c, kb_txn_entry_t *e)
{
    bool last;
    if (!e)
        return;
    pthread_mutex_lock(&c->mu);
    last = --e->refcnt == 0;
    pthread_mutex_unlock(&c->mu);
    if (last)
        kb_txn_entry_destroy(e);
}

/*
 * The entry of @p id, locked and referenced (release with kb_txn_entry_put). With @p create, a
 * missing id gets a fresh entry (epoch -1, Empty) with a new producer id and @p timeout_ms.
 * NULL when missing (and not created) or on allocation failure (*err set).
 */
static kb_txn_entry_t *kb_txn_entry_get(kb_txn_t *c, const char *id, bool create,
                                        int32_t timeout_ms, int16_t *err)
{
    size_t len = strlen(id);
    kb_txn_entry_t *e, *fresh = NULL;

    for (;;) {
        pthread_mutex_lock(&c->mu);
        if (c->nparts > 0) {
            /* only the leader of the id's partition coordinates it, once it is loaded */
            int32_t p = kb_txnlog_partition_for(id, len, c->nparts);
            int st = p < c->nown ? c->own[p].state : KB_TXN_P_NONE;
            if (st != KB_TXN_P_ACTIVE) {
                pthread_mutex_unlock(&c->mu);
                if (fresh)
                    kb_txn_entry_destroy(fresh);
                *err = st == KB_TXN_P_LOADING ? KP_ERR_COORDINATOR_LOAD_IN_PROGRESS
                                              : KP_ERR_NOT_COORDINATOR;
                return NULL;
            }
        }
        e = kb_txn_table_find(c, id, len);
        if (!e && fresh) {
            if (kb_txn_table_insert(c, fresh) != 0) {
                pthread_mutex_unlock(&c->mu);
                kb_txn_entry_destroy(fresh);
                *err = KP_ERR_UNKNOWN_SERVER_ERROR;
                return NULL;
            }
            e = fresh;
            fresh = NULL;
        }
        if (e)
            e->refcnt++;
        pthread_mutex_unlock(&c->mu);
        if (fresh) {
            kb_txn_entry_destroy(fresh); /* someone else created it meanwhile */
            fresh = NULL;
        }
        if (e) {
            pthread_mutex_lock(&e->mu);
            if (e->linked)
                return e;
            /* Expired while we waited: look again. */
            pthread_mutex_unlock(&e->mu);
            kb_txn_entry_release(c, e);
            continue;
        }
        if (!create) {
            *err = KP_ERR_INVALID_PRODUCER_ID_MAPPING;
            return NULL;
        }
        {
            int64_t pid;
            int32_t np;
            pthread_mutex_lock(&c->mu);
            np = c->nparts;
            pthread_mutex_unlock(&c->mu);
            if (kb_txn_alloc_pid(c, &pid) != 0) {
                *err = KP_ERR_COORDINATOR_NOT_AVAILABLE;
                return NULL;
            }
            fresh = kb_txn_entry_new(id, kb_txnlog_partition_for(id, len, np));
            if (!fresh) {
                *err = KP_ERR_UNKNOWN_SERVER_ERROR;
                return NULL;
            }
            kb_txnmeta_init(&fresh->m, pid, timeout_ms, kb_txn_now(c));
        }
    }
}

static void kb_txn_entry_put(kb_txn_t *c, kb_txn_entry_t *e)
{
    pthread_mutex_unlock(&e->mu);
    kb_txn_entry_release(c, e);
}

size_t kb_txn_count(kb_txn_t *c)
{
    size_t n;
    pthread_mutex_lock(&c->mu);
    n = c->count;
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* ---- persistence ----------------------------------------------------------------------------- */

static int16_t kb_txn_append_err(int rc)
{
    switch (rc) {
    case KB_STO_OK:
        return KP_ERR_NONE;
    case KB_STO_RECORD_TOO_LARGE:
    case KB_STO_INVALID_RECORD:
        return KP_ERR_UNKNOWN_SERVER_ERROR; /* Kafka: MESSAGE_TOO_LARGE -> UNKNOWN_SERVER_ERROR */
    default:
        return KP_ERR_NOT_COORDINATOR; /* KAFKA_STORAGE_ERROR / not leader -> NOT_COORDINATOR */
    }
}

/* Writes to __transaction_state go to a partition this node owns (active, loaded at the local
 * partition's current leader epoch) and refuses them (NOT_COORDINATOR) otherwise; with fewer
 * in-sync replicas than min.insync.replicas: NOT_ENOUGH_REPLICAS → COORDINATOR_NOT_AVAILABLE. */
static int16_t kb_txn_owned_check(kb_txn_t *c, int32_t p, kb_part_t *part)
{
    kb_tconf_extra_t ex;
    bool mirror, owned;
    pthread_mutex_lock(&c->mu);
    owned = p >= 0 && p < c->nown && c->own[p].state == KB_TXN_P_ACTIVE &&
            c->own[p].epoch == kb_part_epoch(part) && kb_part_role(part) == KB_PART_LEADER;
    pthread_mutex_unlock(&c->mu);
    if (!owned)
        return KP_ERR_NOT_COORDINATOR;
    kb_part_conf(part, &ex, &mirror);
    if ((int64_t)kb_part_isr(part, NULL, 0) < (int64_t)ex.min_insync_replicas)
        return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    return KP_ERR_NONE;
}

/* acks=all for a coordinator write: wait until the HW of @p part reaches @p end. NONE,
 * COORDINATOR_NOT_AVAILABLE (KB_TXN_WRITE_TIMEOUT_MS passed) or NOT_COORDINATOR (the partition
 * is no longer led at @p epoch). */
static int16_t kb_txn_hw_wait(kb_part_t *part, int32_t epoch, int64_t end)
{
    kb_part_hw_wait_t hw = kb_part_await_hw(part, epoch, end, KB_TXN_WRITE_TIMEOUT_MS);
    if (hw == KB_PART_HW_REACHED)
        return KP_ERR_NONE;
    kb_log_warn("txn", "a write to %s-%" PRId32 " was not replicated: %s", part->topic, part->index,
                hw == KB_PART_HW_NOT_LED ? "leadership lost" : "timed out");
    return hw == KB_PART_HW_NOT_LED ? KP_ERR_NOT_COORDINATOR : KP_ERR_COORDINATOR_NOT_AVAILABLE;
}

/* Write @p m (NULL: a tombstone) for @p e to its __transaction_state partition. Under e->mu. */
static int16_t kb_txn_persist(kb_txn_t *c, kb_txn_entry_t *e, const kb_txnmeta_t *m)
{
    kp_writer_t kw, vw, bw;
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    kb_txnlog_value_t v;
    kb_part_t *part = NULL;
    kb_append_info_t info;
    int16_t ec = KP_ERR_NONE;
    int rc;

    kp_writer_init(&kw);
    kp_writer_init(&vw);
    kp_writer_init(&bw);
    kb_txnlog_key_encode(&kw, e->id, e->id_len);
    if (m) {
        kb_txnmeta_to_value(m, &v);
        kb_txnlog_value_encode(&vw, &v, 1);
    }
    kp_batch_opts_init(&o);
    kp_batch_builder_init(&bb, &o);
    kp_batch_builder_add(&bb, kb_txn_now(c), (kp_bytes_t){kw.buf, (int32_t)kw.len},
                         m ? (kp_bytes_t){vw.buf, (int32_t)vw.len} : (kp_bytes_t){NULL, -1}, NULL,
                         0);
    if (kw.err || vw.err || kp_batch_builder_finish(&bb, &bw) != 0) {
        ec = KP_ERR_UNKNOWN_SERVER_ERROR;
        goto out;
    }
    rc = kb_meta_part(c->meta, KB_TOPIC_TRANSACTION_STATE, e->partition, &part);
    if (rc != KB_META_OK) {
        ec = rc == KB_META_OFFLINE ? KP_ERR_NOT_COORDINATOR : KP_ERR_COORDINATOR_NOT_AVAILABLE;
        goto out;
    }
    if ((ec = kb_txn_owned_check(c, e->partition, part)))
        goto out;
    rc = kb_part_append_leader(part, bw.buf, bw.len, KB_ORIGIN_COORDINATOR, 0, &info);
    if (rc != 0 && kb_part_role(part) != KB_PART_LEADER) {
        ec = KP_ERR_NOT_COORDINATOR;
        goto out;
    }
    if (rc != 0)
        kb_log_error("txn", "cannot write the state of transactional id %s to %s-%" PRId32 ": %s",
                     e->id, KB_TOPIC_TRANSACTION_STATE, e->partition, kb_sto_err_str(rc));
    ec = kb_txn_append_err(rc);
    if (!ec)
        ec = kb_txn_hw_wait(part, kb_part_epoch(part), info.last_offset + 1);
out:
    if (part)
        kb_part_release(part);
    kp_batch_builder_free(&bb);
    kp_writer_free(&kw);
    kp_writer_free(&vw);
    kp_writer_free(&bw);
    return ec;
}

/* Coordinator epoch of @p e: the leader epoch of its __transaction_state partition. */
static int32_t kb_txn_coord_epoch(kb_txn_t *c, const kb_txn_entry_t *e)
{
    int32_t epoch = 0;
    pthread_mutex_lock(&c->mu);
    if (e->partition >= 0 && e->partition < c->nown && c->own[e->partition].state != KB_TXN_P_NONE)
        epoch = c->own[e->partition].epoch;
    pthread_mutex_unlock(&c->mu);
    return epoch < 0 ? 0 : epoch;
}

/* ---- markers --------------------------------------------------------------------------------- */

int16_t kb_txn_write_marker(kb_txn_t *c, const char *topic, int32_t partition, int64_t pid,
                            int16_t epoch, int32_t coord_epoch, bool commit)
{
    kb_part_t *part = NULL;
    kb_append_info_t info;
    int rc;

    if (!strcmp(topic, KB_TOPIC_CONSUMER_OFFSETS)) {
        void *o;
        const kb_txn_group_hook_t *h = kb_txn_hook_get(c->kb, &o);
        if (h) {
            int16_t ec = KP_ERR_NONE;
            bool done = false;
            if (h->txn_marker) {
                ec = h->txn_marker(o, partition, pid, epoch, coord_epoch, commit);
                done = true;
            }
            kb_txn_hook_put();
            if (done)
                return ec;
        }
    }
    rc = kb_meta_part(c->meta, topic, partition, &part);
    if (rc != KB_META_OK) {
        kb_topic_info_t ti;
        if (rc == KB_META_OFFLINE)
            return KP_ERR_KAFKA_STORAGE_ERROR;
        /* a partition of the cluster without a replica here: not ours to write (retried) */
        if (kb_meta_topic_by_name(c->meta, topic, &ti) == 0 && partition >= 0 &&
            partition < ti.partitions)
            return KP_ERR_NOT_LEADER_OR_FOLLOWER;
        return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    }
    if (kb_part_role(part) != KB_PART_LEADER) {
        kb_part_release(part);
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    }
    rc = kb_part_append_control(part, commit ? KP_CONTROL_TYPE_COMMIT : KP_CONTROL_TYPE_ABORT, pid,
                                epoch, coord_epoch, kb_part_epoch(part), &info);
    kb_part_release(part);
    switch (rc) {
    case KB_STO_OK:
        return KP_ERR_NONE;
    case KB_STO_INVALID_PRODUCER_EPOCH:
        return KP_ERR_INVALID_PRODUCER_EPOCH;
    case KB_STO_COORDINATOR_FENCED:
        return KP_ERR_TRANSACTION_COORDINATOR_FENCED;
    case KB_STO_CLOSED:
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    case KB_STO_IO:
    case KB_STO_CORRUPT_LOG:
        return KP_ERR_KAFKA_STORAGE_ERROR;
    default:
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
}

/* Markers of the Prepare state of @p e, then the Complete record. Leaves e->pending set when
 * something could not be written (the timer retries). Under e->mu. */
static void kb_txn_finish(kb_txn_t *c, kb_txn_entry_t *e)
{
    bool commit = e->m.state == KB_TXN_PREPARE_COMMIT, all = true;
    int32_t ce = kb_txn_coord_epoch(c, e);
    kb_txnmeta_t comp;
    int16_t ec;

    if (!e->done && e->m.tps.cnt) {
        e->done = calloc(e->m.tps.cnt, 1);
        if (!e->done)
            return;
    }
    for (size_t i = 0; i < e->m.tps.cnt; i++) {
        const kb_txn_tp_t *tp = &e->m.tps.v[i];
        if (e->done[i])
            continue;
        ec = kb_txn_write_marker(c, tp->topic, tp->partition, e->m.producer_id, e->m.producer_epoch,
                                 ce, commit);
        if (ec == KP_ERR_NOT_LEADER_OR_FOLLOWER || ec == KP_ERR_NOT_COORDINATOR)
            /* led by another broker (or leadership is moving): WriteTxnMarkers to its leader */
            ec = kb_txn_mark_remote(c->mark, tp->topic, tp->partition, e->m.producer_id,
                                    e->m.producer_epoch, ce, commit);
        switch (ec) {
        case KP_ERR_NONE:
            e->done[i] = 1;
            break;
        case KP_ERR_UNKNOWN_TOPIC_OR_PARTITION:
        case KP_ERR_INVALID_PRODUCER_EPOCH:
        case KP_ERR_TRANSACTION_COORDINATOR_FENCED:
            /* Gone or superseded: Kafka gives these markers up too. */
            kb_log_warn("txn", "%s marker of %s for %s-%" PRId32 " not written: %s",
                        commit ? "COMMIT" : "ABORT", e->id, tp->topic, tp->partition,
                        kp_errcode_name(ec));
            e->done[i] = 1;
            break;
        default:
            kb_log_warn("txn", "%s marker of %s for %s-%" PRId32 " failed (%s); will retry",
                        commit ? "COMMIT" : "ABORT", e->id, tp->topic, tp->partition,
                        kp_errcode_name(ec));
            all = false;
        }
    }
    if (!all)
        return;
    kb_txnsm_complete(&e->m, kb_txn_now(c), &comp);
    ec = kb_txn_persist(c, e, &comp);
    if (ec) {
        kb_txnmeta_free(&comp);
        return;
    }
    kb_txnmeta_move(&e->m, &comp);
    e->pending = false;
    free(e->done);
    e->done = NULL;
}

/* Write the Prepare transition @p prep (taken over) and complete the transaction. *rpid /
 * *repoch get what EndTxn v5+ answers. Under e->mu. */
static int16_t kb_txn_prepare_and_finish(kb_txn_t *c, kb_txn_entry_t *e, kb_txnmeta_t *prep,
                                         int64_t *rpid, int16_t *repoch)
{
    kb_txnmeta_t comp;
    int16_t ec = kb_txn_persist(c, e, prep);
    if (ec) {
        kb_txnmeta_free(prep);
        return ec;
    }
    kb_txnmeta_move(&e->m, prep);
    e->pending = true;
    free(e->done);
    e->done = NULL;
    kb_txnsm_complete(&e->m, kb_txn_now(c), &comp);
    *rpid = comp.producer_id;
    *repoch = comp.producer_epoch;
    kb_txnmeta_free(&comp);
    kb_txn_finish(c, e);
    return KP_ERR_NONE;
}

/* The coordinator's own abort of the ongoing transaction of @p e with the fencing epoch
 * @p epoch (InitProducerId of a new producer instance, transaction timeout). Under e->mu. */
static int16_t kb_txn_fence_abort(kb_txn_t *c, kb_txn_entry_t *e, int16_t epoch)
{
    kb_txnsm_end_t rq = {.pid = e->m.producer_id,
                         .epoch = epoch,
                         .commit = false,
                         .from_client = false,
                         .tv2 = e->m.client_tv >= 2,
                         .epoch_fence = true,
                         .now_ms = kb_txn_now(c)};
    kb_txnmeta_t prep;
    int64_t rpid;
    int16_t repoch, ec;
    kb_txnsm_act_t act = kb_txnsm_end(&e->m, &rq, kb_txn_alloc_pid, c, &prep, &ec);
    if (act != KB_TXNSM_WRITE)
        return ec;
    return kb_txn_prepare_and_finish(c, e, &prep, &rpid, &repoch);
}

/* ---- operations ------------------------------------------------------------------------------ */

int16_t kb_txn_init_producer_id(kb_txn_t *c, const char *txn_id, int32_t timeout_ms,
                                int64_t exp_pid, int16_t exp_epoch, int64_t *pid, int16_t *epoch)
{
    kb_txn_entry_t *e;
    kb_txnsm_initpid_t rq;
    kb_txnmeta_t next;
    int16_t ec = KP_ERR_NONE;

    *pid = KB_TXN_NO_PID;
    *epoch = KB_TXN_NO_EPOCH;
    if (!txn_id) {
        /* Idempotent producer: always a new producer id. */
        if (kb_txn_alloc_pid(c, pid) != 0)
            return KP_ERR_COORDINATOR_NOT_AVAILABLE;
        *epoch = 0;
        return KP_ERR_NONE;
    }
    if (!*txn_id)
        return KP_ERR_INVALID_REQUEST;
    if (timeout_ms <= 0 || timeout_ms > c->cfg->transaction_max_timeout_ms)
        return KP_ERR_INVALID_TRANSACTION_TIMEOUT;
    if ((ec = kb_txn_ensure_topic(c)) != 0)
        return KP_ERR_COORDINATOR_NOT_AVAILABLE;
    e = kb_txn_entry_get(c, txn_id, true, timeout_ms, &ec);
    if (!e)
        return ec;
    rq.timeout_ms = timeout_ms;
    rq.exp_pid = exp_pid;
    rq.exp_epoch = exp_epoch;
    rq.now_ms = kb_txn_now(c);
    switch (kb_txnsm_init_pid(&e->m, &rq, kb_txn_alloc_pid, c, &next, &ec)) {
    case KB_TXNSM_WRITE:
        ec = kb_txn_persist(c, e, &next);
        if (ec == KP_ERR_NONE) {
            kb_txnmeta_move(&e->m, &next);
            *pid = e->m.producer_id;
            *epoch = e->m.producer_epoch;
            kb_log_info("txn",
                        "initialized transactional id %s with producer id %" PRId64
                        " and epoch %d on partition %s-%" PRId32,
                        e->id, *pid, *epoch, KB_TOPIC_TRANSACTION_STATE, e->partition);
        }
        kb_txnmeta_free(&next);
        break;
    case KB_TXNSM_FENCE:
        kb_log_info("txn",
                    "transactional id %s: aborting the ongoing transaction of producer id "
                    "%" PRId64 " epoch %d for a new producer (fencing epoch %d)",
                    e->id, e->m.producer_id, e->m.producer_epoch, next.producer_epoch);
        ec = kb_txn_fence_abort(c, e, next.producer_epoch);
        if (ec == KP_ERR_NONE)
            ec = KP_ERR_CONCURRENT_TRANSACTIONS;
        break;
    default:
        break;
    }
    kb_txn_entry_put(c, e);
    return ec;
}

int16_t kb_txn_add_partitions(kb_txn_t *c, const char *txn_id, int64_t pid, int16_t epoch,
                              const kb_txn_tp_t *tps, size_t n, int16_t client_tv)
{
    kb_txn_entry_t *e;
    kb_txnmeta_t next;
    int16_t ec = KP_ERR_NONE;

    if (!txn_id || !*txn_id)
        return KP_ERR_INVALID_REQUEST;
    e = kb_txn_entry_get(c, txn_id, false, 0, &ec);
    if (!e)
        return ec;
    if (kb_txnsm_add_partitions(&e->m, pid, epoch, tps, n, client_tv, kb_txn_now(c), &next, &ec) ==
        KB_TXNSM_WRITE) {
        ec = kb_txn_persist(c, e, &next);
        if (ec == KP_ERR_NONE)
            kb_txnmeta_move(&e->m, &next);
        kb_txnmeta_free(&next);
    }
    kb_txn_entry_put(c, e);
    return ec;
}

int16_t kb_txn_verify(kb_txn_t *c, const char *txn_id, int64_t pid, int16_t epoch,
                      const char *topic, int32_t partition)
{
    kb_txn_entry_t *e;
    int16_t ec = KP_ERR_NONE;
    if (!txn_id || !*txn_id)
        return KP_ERR_INVALID_REQUEST;
    e = kb_txn_entry_get(c, txn_id, false, 0, &ec);
    if (!e)
        return ec;
    ec = kb_txnsm_verify(&e->m, pid, epoch, topic, partition);
    kb_txn_entry_put(c, e);
    return ec;
}

int16_t kb_txn_add_offsets(kb_txn_t *c, const char *txn_id, int64_t pid, int16_t epoch,
                           const char *group_id)
{
    kb_txn_tp_t tp;
    tp.topic = (char *)KB_TOPIC_CONSUMER_OFFSETS;
    tp.partition = kb_txn_offsets_partition(c, group_id);
    return kb_txn_add_partitions(c, txn_id, pid, epoch, &tp, 1, 0);
}

int16_t kb_txn_end(kb_txn_t *c, const char *txn_id, int64_t pid, int16_t epoch, bool commit,
                   bool tv2, int64_t *rpid, int16_t *repoch)
{
    kb_txn_entry_t *e;
    kb_txnmeta_t prep;
    kb_txnsm_end_t rq;
    int16_t ec = KP_ERR_NONE;

    *rpid = KB_TXN_NO_PID;
    *repoch = KB_TXN_NO_EPOCH;
    if (!txn_id || !*txn_id)
        return KP_ERR_INVALID_REQUEST;
    e = kb_txn_entry_get(c, txn_id, false, 0, &ec);
    if (!e)
        return ec;
    rq.pid = pid;
    rq.epoch = epoch;
    rq.commit = commit;
    rq.from_client = true;
    rq.tv2 = tv2;
    rq.epoch_fence = false;
    rq.now_ms = kb_txn_now(c);
    *rpid = e->m.producer_id;
    *repoch = e->m.producer_epoch;
    if (kb_txnsm_end(&e->m, &rq, kb_txn_alloc_pid, c, &prep, &ec) == KB_TXNSM_WRITE)
        ec = kb_txn_prepare_and_finish(c, e, &prep, rpid, repoch);
    kb_txn_entry_put(c, e);
    return ec;
}

int16_t kb_txn_offset_commit(kb_txn_t *c, kb_reqctx_t *ctx, const kp_TxnOffsetCommitRequest_t *rq,
                             kp_TxnOffsetCommitResponse_t *resp, bool implicit_add)
{
    char *txn_id = NULL, *group = NULL;
    kb_txn_entry_t *e = NULL;
    const kb_txn_group_hook_t *h;
    void *o;
    int32_t part;
    int16_t ec = KP_ERR_NONE;

    if (rq->TransactionalId.len <= 0 || rq->GroupId.len < 0)
        return KP_ERR_INVALID_REQUEST;
    txn_id = strndup(rq->TransactionalId.ptr, (size_t)rq->TransactionalId.len);
    group = strndup(rq->GroupId.ptr, (size_t)rq->GroupId.len);
    if (!txn_id || !group) {
        ec = KP_ERR_UNKNOWN_SERVER_ERROR;
        goto out;
    }
    part = kb_txn_offsets_partition(c, group);
    e = kb_txn_entry_get(c, txn_id, false, 0, &ec);
    if (!e && (ec != KP_ERR_NOT_COORDINATOR || implicit_add))
        goto out;
    h = kb_txn_hook_get(c->kb, &o);
    if (!e) {
        /* Another broker coordinates the transaction (this one is the group coordinator): no
         * check here, as a Kafka group coordinator without transaction verification (kbroker
         * does not send it the verify-only AddPartitionsToTxn); the offsets stay pending until
         * the marker the transaction coordinator sends in WriteTxnMarkers. */
        ec = h && h->txn_offset_commit ? KP_ERR_NONE : KP_ERR_COORDINATOR_NOT_AVAILABLE;
    } else if (!implicit_add) {
        ec = kb_txnsm_verify(&e->m, rq->ProducerId, rq->ProducerEpoch, KB_TOPIC_CONSUMER_OFFSETS,
                             part);
        if (ec == KP_ERR_NONE && (!h || !h->txn_offset_commit))
            ec = KP_ERR_COORDINATOR_NOT_AVAILABLE;
    } else if (!h || !h->txn_offset_commit) {
        ec = KP_ERR_COORDINATOR_NOT_AVAILABLE; /* before changing the transaction */
    } else {
        /* Transaction version 2 (TxnOffsetCommit v5+): the offsets partition joins the
         * transaction here, as Kafka's group coordinator asks its transaction coordinator. */
        kb_txn_tp_t tp = {(char *)KB_TOPIC_CONSUMER_OFFSETS, part};
        kb_txnmeta_t next;
        if (kb_txnsm_add_partitions(&e->m, rq->ProducerId, rq->ProducerEpoch, &tp, 1, 2,
                                    kb_txn_now(c), &next, &ec) == KB_TXNSM_WRITE) {
            ec = kb_txn_persist(c, e, &next);
            if (ec == KP_ERR_NONE)
                kb_txnmeta_move(&e->m, &next);
            kb_txnmeta_free(&next);
        }
    }
    if (ec == KP_ERR_NONE)
        ec = h->txn_offset_commit(o, ctx, part, rq, resp);
    if (h)
        kb_txn_hook_put();
    if (e)
        kb_txn_entry_put(c, e);
out:
    free(txn_id);
    free(group);
    return ec;
}

int kb_txn_describe(kb_txn_t *c, const char *txn_id, kb_txnmeta_t *out, bool *pending)
{
    kb_txn_entry_t *e;
    int16_t ec;
    int rc;
    e = kb_txn_entry_get(c, txn_id, false, 0, &ec);
    if (!e)
        return ec == KP_ERR_NOT_COORDINATOR || ec == KP_ERR_COORDINATOR_LOAD_IN_PROGRESS
                   ? ec
                   : KB_E_NOT_FOUND;
    rc = kb_txnmeta_copy(out, &e->m);
    if (rc == 0 && e->pending && e->done) {
        /* keep the partitions still waiting for their marker */
        size_t k = 0;
        for (size_t i = 0; i < out->tps.cnt; i++) {
            if (e->done[i])
                free(out->tps.v[i].topic);
            else
                out->tps.v[k++] = out->tps.v[i];
        }
        out->tps.cnt = k;
    }
    if (pending)
        *pending = e->pending;
    kb_txn_entry_put(c, e);
    return rc;
}

void kb_txn_listing_free(kb_txn_listing_t *v, size_t cnt)
{
    for (size_t i = 0; v && i < cnt; i++)
        free(v[i].id);
    free(v);
}

int kb_txn_list(kb_txn_t *c, kb_txn_listing_t **out, size_t *cnt)
{
    size_t n, k = 0;
    kb_txn_entry_t **v = kb_txn_snapshot(c, &n);
    kb_txn_listing_t *l = calloc(n ? n : 1, sizeof(*l));
    int rc = 0;

    if (!v || !l)
        rc = KB_E_NOMEM;
    for (size_t i = 0; v && i < n; i++) {
        pthread_mutex_lock(&v[i]->mu);
        if (!rc && v[i]->linked) {
            l[k].id = strdup(v[i]->id);
            if (!l[k].id) {
                rc = KB_E_NOMEM;
            } else {
                l[k].producer_id = v[i]->m.producer_id;
                l[k].producer_epoch = v[i]->m.producer_epoch;
                l[k].state = v[i]->m.state;
                l[k].start_ms = v[i]->m.start_ms;
                k++;
            }
        }
        pthread_mutex_unlock(&v[i]->mu);
        kb_txn_entry_release(c, v[i]);
    }
    free(v);
    if (rc) {
        kb_txn_listing_free(l, k);
        return rc;
    }
    *out = l;
    *cnt = k;
    return 0;
}

/* ---- Produce verification hook --------------------------------------------------------------- */

int16_t kb_txn_produce_verify(void *opaque, const char *transactional_id, int64_t pid,
                              int16_t epoch, const char *topic, int32_t partition,
                              int16_t produce_version)
{
    kb_txn_t *c = opaque;
    int16_t ec = kb_txn_verify(c, transactional_id, pid, epoch, topic, partition);
    /* What a Kafka 4.x partition leader answers a producer when the coordinator's verification
     * fails. TRANSACTION_ABORTABLE (KIP-890) reaches only clients that announced they handle
     * it, by sending Produce v11 or later; older ones get INVALID_TXN_STATE. */
    switch (ec) {
    case KP_ERR_NONE:
        return KP_ERR_NONE;
    case KP_ERR_PRODUCER_FENCED:
        return KP_ERR_INVALID_PRODUCER_EPOCH;
    case KP_ERR_TRANSACTION_ABORTABLE:
        return produce_version >= 11 ? KP_ERR_TRANSACTION_ABORTABLE : KP_ERR_INVALID_TXN_STATE;
    case KP_ERR_NOT_COORDINATOR:
        /* Another broker coordinates the id: kbroker does not send Kafka 3.6+'s verify-only
         * AddPartitionsToTxn to it yet, so the batch is accepted unverified, as a Kafka leader
         * does with transaction.partition.verification.enable=false (the coordinator still
         * writes the markers of every partition the producer added). */
        return KP_ERR_NONE;
    case KP_ERR_CONCURRENT_TRANSACTIONS:
    case KP_ERR_COORDINATOR_NOT_AVAILABLE:
    case KP_ERR_COORDINATOR_LOAD_IN_PROGRESS:
        return KP_ERR_NOT_ENOUGH_REPLICAS;
    default:
        return ec;
    }
}

/* ---- loading --------------------------------------------------------------------------------- */

/* Apply one record of __transaction_state partition @p p. */
static void kb_txn_load_record(kb_txn_t *c, int32_t p, const kp_record_t *r, int64_t *n_applied)
{
    char *id = NULL;
    kb_txnlog_value_t v;
    kb_txn_entry_t *e;
    int rc;

    if (r->key.len <= 0)
        return;
    rc = kb_txnlog_key_decode(r->key.ptr, (size_t)r->key.len, &id);
    if (rc != 0) {
        if (rc != KB_E_UNSUPPORTED)
            kb_log_warn("txn", "%s-%" PRId32 " offset %" PRId64 ": unreadable key, skipped",
                        KB_TOPIC_TRANSACTION_STATE, p, r->offset);
        return;
    }
    pthread_mutex_lock(&c->mu);
    e = kb_txn_table_find(c, id, strlen(id));
    if (r->value.len < 0) {
        /* Tombstone: the id expired. Loading runs before anyone else sees the table. */
        if (e) {
            e->refcnt++;
            kb_txn_table_unlink(c, e);
        }
        pthread_mutex_unlock(&c->mu);
        kb_txn_entry_release(c, e);
        (*n_applied)++;
        free(id);
        return;
    }
    pthread_mutex_unlock(&c->mu);
    rc = kb_txnlog_value_decode(r->value.ptr, (size_t)r->value.len, &v);
    if (rc != 0) {
        kb_log_error("txn",
                     "%s-%" PRId32 " offset %" PRId64 ": unreadable state of %s (%s), skipped",
                     KB_TOPIC_TRANSACTION_STATE, p, r->offset, id, kb_err_str(rc));
        free(id);
        return;
    }
    if (!e) {
        e = kb_txn_entry_new(id, p);
        if (!e) {
            kb_txnlog_value_free(&v);
            free(id);
            return;
        }
        pthread_mutex_lock(&c->mu);
        if (kb_txn_table_insert(c, e) != 0) {
            pthread_mutex_unlock(&c->mu);
            kb_txn_entry_destroy(e);
            kb_txnlog_value_free(&v);
            free(id);
            return;
        }
        pthread_mutex_unlock(&c->mu);
    }
    kb_txnmeta_free(&e->m);
    kb_txnmeta_from_value(&e->m, &v);
    kb_txnlog_value_free(&v);
    e->partition = p;
    (*n_applied)++;
    free(id);
}

static int kb_txn_load_partition(kb_txn_t *c, int32_t p, int64_t *n_applied)
{
    kb_part_t *part;
    int64_t off, leo;
    int rc = 0;

    if (kb_meta_part(c->meta, KB_TOPIC_TRANSACTION_STATE, p, &part) != KB_META_OK)
        return KB_E_NOT_FOUND;
    off = kb_log_start_offset(part->log);
    leo = kb_log_leo(part->log);
    while (off < leo) {
        uint8_t *buf = NULL;
        size_t len = 0;
        kb_log_read_t meta;
        kp_batch_iter_t it;
        kp_batch_t b;
        int r;

        rc = kb_log_read_copy(part->log, off, KB_TXN_LOAD_CHUNK, KB_ISOLATION_LEO, 1, &buf, &len,
                              &meta);
        if (rc != 0 || len == 0 || meta.next_offset <= off) {
            free(buf);
            break;
        }
        kp_batch_iter_init(&it, buf, len, 0, 0);
        while ((r = kp_batch_iter_next(&it, &b)) == 1) {
            kp_record_iter_t ri;
            kp_record_t rec;
            kp_writer_t scratch;
            if (kp_batch_hdr_is_control(&b.hdr))
                continue;
            kp_writer_init(&scratch);
            if (kp_record_iter_init(&ri, &b, &scratch, 64u << 20) == 0) {
                while (kp_record_iter_next(&ri, &rec) == 1)
                    kb_txn_load_record(c, p, &rec, n_applied);
            }
            kp_writer_free(&scratch);
        }
        if (r < 0)
            kb_log_error("txn", "%s-%" PRId32 ": bad batch near offset %" PRId64 ": %s",
                         KB_TOPIC_TRANSACTION_STATE, p, off, it.errstr ? it.errstr : "?");
        off = meta.next_offset;
        free(buf);
    }
    kb_part_release(part);
    return rc;
}

/* Drop the ids of partition @p p from the table (after its state went to NONE, so nobody
 * finds them again). A transition in flight holds the id's lock: it is waited for; its next
 * write fails with NOT_COORDINATOR. @locks not c->mu */
static void kb_txn_unload(kb_txn_t *c, int32_t p)
{
    size_t n, dropped = 0;
    kb_txn_entry_t **v = kb_txn_snapshot(c, &n);
    if (!v)
        return;
    for (size_t i = 0; i < n; i++) {
        kb_txn_entry_t *e = v[i];
        if (e->partition == p) {
            pthread_mutex_lock(&e->mu);
            pthread_mutex_lock(&c->mu);
            if (e->linked)
                dropped++;
            kb_txn_table_unlink(c, e);
            pthread_mutex_unlock(&c->mu);
            pthread_mutex_unlock(&e->mu);
        }
        kb_txn_entry_release(c, e);
    }
    free(v);
    kb_log_info("txn", "%s-%" PRId32 ": no longer the coordinator (%zu transactional ids dropped)",
                KB_TOPIC_TRANSACTION_STATE, p, dropped);
}

/* Size the ownership table for @p n partitions. @locks c->mu held */
static int kb_txn_own_resize(kb_txn_t *c, int32_t n)
{
    kb_txn_pown_t *v;
    if (n <= c->nown)
        return 0;
    if (!(v = realloc(c->own, (size_t)n * sizeof(*v))))
        return KB_E_NOMEM;
    for (int32_t p = c->nown; p < n; p++)
        v[p] = (kb_txn_pown_t){.state = KB_TXN_P_NONE, .epoch = -1};
    c->own = v;
    c->nown = n;
    return 0;
}

void kb_txn_reconcile(kb_txn_t *c)
{
    kb_topic_info_t ti;
    pthread_mutex_lock(&c->load_mu);
    if (kb_meta_topic_by_name(c->meta, KB_TOPIC_TRANSACTION_STATE, &ti) != 0) {
        pthread_mutex_unlock(&c->load_mu);
        return; /* created on first use */
    }
    pthread_mutex_lock(&c->mu);
    if (kb_txn_own_resize(c, ti.partitions) != 0) {
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&c->load_mu);
        return;
    }
    if (c->nparts <= 0)
        c->nparts = ti.partitions;
    pthread_mutex_unlock(&c->mu);
    for (int32_t p = 0; p < ti.partitions; p++) {
        kb_part_t *part;
        bool lead = false, unload = false, load = false;
        int32_t epoch = -1;
        int64_t n = 0;
        size_t pending = 0, ids = 0;
        if (kb_meta_part(c->meta, KB_TOPIC_TRANSACTION_STATE, p, &part) == KB_META_OK) {
            lead = kb_part_role(part) == KB_PART_LEADER && !atomic_load(&part->deleted);
            epoch = kb_part_epoch(part);
            kb_part_release(part);
        }
        pthread_mutex_lock(&c->mu);
        if (c->own[p].state != KB_TXN_P_NONE && (!lead || c->own[p].epoch != epoch)) {
            c->own[p] = (kb_txn_pown_t){.state = KB_TXN_P_NONE, .epoch = -1};
            unload = true;
        }
        if (lead && c->own[p].state == KB_TXN_P_NONE) {
            c->own[p] = (kb_txn_pown_t){.state = KB_TXN_P_LOADING, .epoch = epoch};
            load = true;
        }
        pthread_mutex_unlock(&c->mu);
        if (unload)
            kb_txn_unload(c, p);
        if (!load)
            continue;
        kb_txn_load_partition(c, p, &n);
        /* Transactions found in a Prepare state still need their markers (the timer, or
         * kb_txn_start, completes them). */
        pthread_mutex_lock(&c->mu);
        for (size_t b = 0; b < c->nbuckets; b++) {
            for (kb_txn_entry_t *e = c->buckets[b]; e; e = e->next) {
                if (e->partition != p)
                    continue;
                ids++;
                if (e->m.state == KB_TXN_PREPARE_COMMIT || e->m.state == KB_TXN_PREPARE_ABORT) {
                    e->pending = true;
                    pending++;
                }
            }
        }
        if (c->own[p].state == KB_TXN_P_LOADING && c->own[p].epoch == epoch)
            c->own[p].state = KB_TXN_P_ACTIVE;
        pthread_mutex_unlock(&c->mu);
        kb_log_info("txn",
                    "%s-%" PRId32 ": coordinator at epoch %" PRId32 ", %zu transactional ids "
                    "from %" PRId64 " records, %zu to complete",
                    KB_TOPIC_TRANSACTION_STATE, p, epoch, ids, n, pending);
    }
    pthread_mutex_unlock(&c->load_mu);
}

/* Metadata listener (under the metadata change mutex): a change of __transaction_state (created,
 * a leader epoch moved) makes the timer thread run an ownership pass now. */
static void kb_txn_meta_event(void *opaque, const kb_meta_event_t *ev)
{
    kb_txn_t *c = opaque;
    if (ev->snapshot || !ev->topic || strcmp(ev->topic->name, KB_TOPIC_TRANSACTION_STATE) ||
        (ev->type != KB_META_EV_TOPIC && ev->type != KB_META_EV_EPOCH))
        return;
    pthread_mutex_lock(&c->thr_mu);
    c->thr_due = true;
    pthread_cond_broadcast(&c->thr_cv);
    pthread_mutex_unlock(&c->thr_mu);
}

/* ---- timer ----------------------------------------------------------------------------------- */

/* Referenced entries of the table (caller releases each and frees the array). */
static kb_txn_entry_t **kb_txn_snapshot(kb_txn_t *c, size_t *n)
{
    kb_txn_entry_t **v;
    size_t k = 0;
    pthread_mutex_lock(&c->mu);
    v = malloc((c->count ? c->count : 1) * sizeof(*v));
    if (v) {
        for (size_t b = 0; b < c->nbuckets; b++) {
            for (kb_txn_entry_t *e = c->buckets[b]; e; e = e->next) {
                e->refcnt++;
                v[k++] = e;
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    *n = k;
    return v;
}

void kb_txn_tick(kb_txn_t *c)
{
    size_t n;
    kb_txn_entry_t **v;
    int64_t expiration = c->cfg->transactional_id_expiration_ms;

    kb_txn_reconcile(c);
    v = kb_txn_snapshot(c, &n);
    if (!v)
        return;
    for (size_t i = 0; i < n; i++) {
        kb_txn_entry_t *e = v[i];
        int64_t now = kb_txn_now(c);
        pthread_mutex_lock(&e->mu);
        if (!e->linked) {
            /* expired meanwhile */
        } else if (e->pending) {
            kb_txn_finish(c, e);
        } else if (e->m.state == KB_TXN_ONGOING && e->m.start_ms + e->m.timeout_ms < now) {
            int16_t epoch = kb_txnsm_fence_epoch(&e->m), ec;
            kb_log_info("txn",
                        "transaction of %s (producer id %" PRId64 ", epoch %d) timed out after "
                        "%" PRId32 " ms: aborting with epoch %d",
                        e->id, e->m.producer_id, e->m.producer_epoch, e->m.timeout_ms, epoch);
            ec = kb_txn_fence_abort(c, e, epoch);
            if (ec)
                kb_log_warn("txn", "abort of the timed-out transaction of %s failed: %s", e->id,
                            kp_errcode_name(ec));
        } else if (kb_txnsm_expirable(&e->m) && e->m.last_update_ms + expiration <= now) {
            if (kb_txn_persist(c, e, NULL) == KP_ERR_NONE) {
                kb_log_info("txn", "transactional id %s expired (unused for %" PRId64 " ms)", e->id,
                            expiration);
                pthread_mutex_lock(&c->mu);
                kb_txn_table_unlink(c, e);
                pthread_mutex_unlock(&c->mu);
            }
        }
        pthread_mutex_unlock(&e->mu);
        kb_txn_entry_release(c, e);
    }
    free(v);
}

static void *kb_txn_thread(void *arg)
{
    kb_txn_t *c = arg;
    pthread_mutex_lock(&c->thr_mu);
    while (!c->thr_stop) {
        struct timespec ts = kb_time_mono_deadline(c->tick_ms);
        int rc = 0;
        while (!c->thr_stop && !c->thr_due && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&c->thr_cv, &c->thr_mu, &ts);
        if (c->thr_stop)
            break;
        c->thr_due = false;
        pthread_mutex_unlock(&c->thr_mu);
        kb_txn_tick(c);
        pthread_mutex_lock(&c->thr_mu);
    }
    pthread_mutex_unlock(&c->thr_mu);
    return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

kb_txn_t *kb_txn_new(const kb_txn_opts_t *o, char *errstr, size_t errstr_size)
{
    kb_txn_t *c;
    pthread_condattr_t ca;

    if (!o->svc) {
        snprintf(errstr, errstr_size, "the transaction coordinator needs the api service");
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    c->svc = o->svc;
    c->meta = o->svc->meta;
    c->cfg = o->svc->cfg;
    c->kb = o->kb;
    c->clock = o->clock;
    c->clock_opaque = o->clock_opaque;
    c->tick_ms = o->tick_ms > 0 ? o->tick_ms : 1000;
    c->no_threads = o->no_threads;
    c->marker_timeout_ms = o->marker_timeout_ms > 0 ? o->marker_timeout_ms : 5000;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->thr_mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->thr_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&c->load_mu, NULL);
    if (kb_txn_table_grow(c) != 0) {
        snprintf(errstr, errstr_size, "out of memory");
        kb_txn_free(c);
        return NULL;
    }
    /* the partitions this node leads are loaded now; leadership changes later are followed */
    kb_txn_reconcile(c);
    if (!(c->ml = kb_meta_listen(c->meta, kb_txn_meta_event, c, false))) {
        snprintf(errstr, errstr_size, "out of memory");
        kb_txn_free(c);
        return NULL;
    }
    return c;
}

int kb_txn_start(kb_txn_t *c)
{
    size_t n;
    kb_txn_entry_t **v = kb_txn_snapshot(c, &n);
    if (v) {
        for (size_t i = 0; i < n; i++) {
            pthread_mutex_lock(&v[i]->mu);
            if (v[i]->linked && v[i]->pending) {
                kb_log_info("txn", "completing the %s of %s found in %s",
                            v[i]->m.state == KB_TXN_PREPARE_COMMIT ? "commit" : "abort", v[i]->id,
                            KB_TOPIC_TRANSACTION_STATE);
                kb_txn_finish(c, v[i]);
            }
            pthread_mutex_unlock(&v[i]->mu);
            kb_txn_entry_release(c, v[i]);
        }
        free(v);
    }
    if (!c->mark)
        c->mark = kb_txn_mark_new(c); /* NULL: markers for other brokers are retried, logged */
    if (c->no_threads || c->thr_started)
        return 0;
    c->thr_stop = false;
    if (pthread_create(&c->thr, NULL, kb_txn_thread, c) != 0)
        return KB_E_NOMEM;
    c->thr_started = true;
    return 0;
}

void kb_txn_stop(kb_txn_t *c)
{
    if (!c->thr_started) {
        kb_txn_mark_free(c->mark);
        c->mark = NULL;
        return;
    }
    pthread_mutex_lock(&c->thr_mu);
    c->thr_stop = true;
    pthread_cond_broadcast(&c->thr_cv);
    pthread_mutex_unlock(&c->thr_mu);
    pthread_join(c->thr, NULL);
    c->thr_started = false;
    kb_txn_mark_free(c->mark); /* the handlers are stopped already (module stop) */
    c->mark = NULL;
}

void kb_txn_free(kb_txn_t *c)
{
    if (!c)
        return;
    kb_txn_stop(c);
    kb_txn_unregister(c);
    if (c->ml)
        kb_meta_unlisten(c->meta, c->ml);
    for (size_t b = 0; b < c->nbuckets; b++) {
        kb_txn_entry_t *e = c->buckets[b], *nx;
        for (; e; e = nx) {
            nx = e->next;
            kb_txn_entry_destroy(e);
        }
    }
    free(c->buckets);
    free(c->own);
    pthread_mutex_destroy(&c->load_mu);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->thr_mu);
    pthread_cond_destroy(&c->thr_cv);
    free(c);
}

int kb_txn_register(kb_txn_t *c, kb_api_registry_t *reg)
{
    int rc;
    c->reg = reg;
    rc = kb_txn_h_register(c, reg);
    if (rc)
        return rc;
    kb_apisvc_set_txn_verify(c->svc, kb_txn_produce_verify, c);
    c->verify_installed = true;
    return 0;
}

int kb_txn_register_find_coordinator(kb_txn_t *c, kb_api_registry_t *reg)
{
    c->reg = reg;
    return kb_txn_h_register_find_coordinator(c, reg);
}

void kb_txn_unregister(kb_txn_t *c)
{
    if (c->verify_installed) {
        kb_apisvc_set_txn_verify(c->svc, NULL, NULL);
        c->verify_installed = false;
    }
    for (size_t i = 0; i < c->registered_cnt; i++)
        kb_api_unregister(c->reg, c->registered[i]);
    c->registered_cnt = 0;
}
