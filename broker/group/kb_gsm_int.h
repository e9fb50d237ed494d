/*
 * kb_gsm_int.h -- what kb_gsm.c (groups and rebalances) and kb_goff.c (offsets, transactions,
 * loading, expiry) share. Not for other files.
 *
 * @thread the gsm's owner, serialised (kb_gsm.h)
 */
#ifndef KB_GSM_INT_H
#define KB_GSM_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "kb_gsm.h"
#include "kp_batch.h"
#include "kp_writer.h"

/* Timer kinds. */
#define KB_GT_MEMBER  1 /**< session expiry of a member */
#define KB_GT_PENDING 2 /**< expiry of a member told MEMBER_ID_REQUIRED */
#define KB_GT_JOIN    3 /**< end of the join phase (initial delay or rebalance timeout) */
#define KB_GT_SYNC    4 /**< members that did not send SyncGroup in time */
#define KB_GT_EXPIRY  5 /**< periodic offset expiry pass */

struct kb_gsm_s {
    kb_gsm_conf_t conf;
    kb_gsm_ops_t ops;
    void *opaque;
    kb_ghash_t groups; /**< kb_group_t by id */
    kb_gtimer_t **heap;
    size_t heap_n;
    size_t heap_cap;
    kb_gtimer_t expiry_timer;
    size_t records_loaded;
    size_t records_skipped;
    uint64_t rebalances;
};

static inline int64_t kb_gsm_now(kb_gsm_t *gsm)
{
    return gsm->ops.now_ms(gsm->opaque);
}

static inline int64_t kb_gsm_mono(kb_gsm_t *gsm)
{
    return gsm->ops.mono_ms(gsm->opaque);
}

/* timers (kb_gsm.c) */
void kb_gsm_timer_arm(kb_gsm_t *gsm, kb_gtimer_t *t, int64_t deadline);
void kb_gsm_timer_disarm(kb_gsm_t *gsm, kb_gtimer_t *t);

/* groups (kb_gsm.c) */
kb_group_t *kb_gsm_group_create(kb_gsm_t *gsm, const char *id);
/** Unlink and free a group (its members must be gone; offsets are freed). */
void kb_gsm_group_destroy(kb_gsm_t *gsm, kb_group_t *g);
void kb_gsm_transition(kb_gsm_t *gsm, kb_group_t *g, int state);
/** A group with no members, pending members, offsets or transactions, that nobody waits for. */
bool kb_gsm_group_is_idle(const kb_group_t *g);
/** Drop every member (loading a newer group metadata record or a tombstone). */
void kb_gsm_group_clear_members(kb_gsm_t *gsm, kb_group_t *g);
/** Add a member from a loaded group metadata record. */
kb_gmember_t *kb_gsm_member_load(kb_gsm_t *gsm, kb_group_t *g, const char *id,
                                 const char *instance_id, const char *client_id,
                                 const char *client_host, int32_t session_ms, int32_t rebalance_ms,
                                 const char *protocol, const uint8_t *meta, int32_t meta_len,
                                 const uint8_t *assignment, int32_t assignment_len);

/* offsets (kb_goff.c) */
void kb_goff_free(kb_goffset_t *o);
void kb_goff_free_all(kb_ghash_t *h);
void kb_goff_txns_free(kb_group_t *g);
/** The timer callback of the expiry pass. */
void kb_goff_expiry_fire(kb_gsm_t *gsm);

/* one batch of records for __consumer_offsets */
typedef struct kb_gbatch_s {
    kp_batch_builder_t bb;
    kp_writer_t kw;
    kp_writer_t vw;
    int64_t ts;
    int n;
} kb_gbatch_t;

void kb_gbatch_init(kb_gbatch_t *b, int64_t ts, int64_t pid, int16_t pepoch);
/** Add the record whose key and value were written into b->kw / b->vw (value: @p tombstone
 *  means null), then reset both writers. */
void kb_gbatch_add(kb_gbatch_t *b, bool tombstone);
/** Build and append the batch (nothing to do without records); frees the builder. 0 or a Kafka
 *  error code from ops->append. */
int16_t kb_gbatch_write(kb_gsm_t *gsm, kb_gbatch_t *b, int32_t partition, int64_t *base);
void kb_gbatch_free(kb_gbatch_t *b);

/** Kafka's mapping of append errors for group metadata (join/sync paths). */
int16_t kb_gsm_store_err(int16_t err);

/** Copy of a C string (NULL stays NULL); NULL on no memory only if @p s was not NULL. */
char *kb_gsm_strdup(const char *s);

#endif /* KB_GSM_INT_H */
