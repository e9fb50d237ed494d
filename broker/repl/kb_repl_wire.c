/*
 * kb_repl_wire.c -- the replica manager's links to the rest of the broker (kb_repl.h): the
 * metadata listener that moves partitions in and out of the fetchers as leadership changes, and
 * the ISR proposals of this broker's leaders sent to the controller as AlterPartition.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_apilog.h"
#include "kb_err.h"
#include "kb_repl.h"
#include "kb_repl_int.h"
#include "kp_arena.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "kp_reader.h"

/* ---- leadership ------------------------------------------------------------------------------ */

/* Fetch partition @p index of @p topic if this node follows it, else not (change mutex of kb_meta
 * held: lookups only). */
static void kb_repl_sync(kb_repl_t *r, const char *topic, int32_t index)
{
    kb_part_t *part = NULL;
    int32_t leader = -1;
    if (kb_meta_part(r->meta, topic, index, &part) != KB_META_OK)
        return;
    if (kb_part_role(part) == KB_PART_FOLLOWER &&
        kb_part_follower_position(part, &leader, NULL, NULL, NULL, NULL) == 0 && leader >= 0 &&
        leader != r->node_id) {
        int rc = kb_repl_add(r, part);
        if (rc != 0)
            kb_log_error("repl", "%s-%" PRId32 ": cannot fetch from leader %" PRId32 ": %s", topic,
                         index, leader, kb_err_str(rc));
    } else {
        kb_repl_remove(r, part);
    }
    kb_part_release(part);
}

static void kb_repl_on_meta(void *opaque, const kb_meta_event_t *ev)
{
    kb_repl_t *r = opaque;
    if (!ev->topic)
        return;
    switch (ev->type) {
    case KB_META_EV_TOPIC:
        if (ev->flags & KB_META_TOPIC_DELETED)
            return; /* the fetchers drop deleted partitions by themselves */
        for (int32_t i = 0; i < ev->topic->partitions; i++)
            kb_repl_sync(r, ev->topic->name, i);
        break;
    case KB_META_EV_EPOCH:
    case KB_META_EV_REPLICAS: /* e.g. this node became a replica: a new local log */
        kb_repl_sync(r, ev->topic->name, ev->partition);
        break;
    default:
        break;
    }
}

int kb_repl_watch(kb_repl_t *r, kb_meta_t *meta, kb_partmgr_t *pm)
{
    r->meta = meta;
    r->pm = pm;
    r->listener = kb_meta_listen(meta, kb_repl_on_meta, r, true);
    return r->listener ? 0 : KB_E_NOMEM;
}

void kb_repl_unwatch(kb_repl_t *r)
{
    kb_repl_set_ctrl(r, NULL, NULL);
    if (r->listener)
        kb_meta_unlisten(r->meta, r->listener);
    r->listener = NULL;
}

/* ---- ISR proposals: AlterPartition ------------------------------------------------------------
 */

/* One proposal in flight; owns no pointer into the manager, which may be freed before the
 * channel answers (the channel calls back with an error when it is destroyed). */
typedef struct kb_alter_s {
    int32_t node_id;
    kb_part_t *part; /* reference */
    int32_t leader_epoch;
    int32_t partition_epoch;
    int64_t broker_epoch;
    size_t n;
    int32_t isr[]; /* n */
} kb_alter_t;

static int kb_alter_encode(kp_writer_t *wr, int16_t ver, void *opaque)
{
    kb_alter_t *a = opaque;
    kp_AlterPartitionRequest_t rq;
    kp_AlterPartitionRequest_TopicData_t t;
    kp_AlterPartitionRequest_PartitionData_t p;
    kp_AlterPartitionRequest_BrokerState_t bs[KB_META_MAX_REPLICAS];
    size_t n = a->n < KB_META_MAX_REPLICAS ? a->n : KB_META_MAX_REPLICAS;

    kp_AlterPartitionRequest_init(&rq);
    kp_AlterPartitionRequest_TopicData_init(&t);
    kp_AlterPartitionRequest_PartitionData_init(&p);
    rq.BrokerId = a->node_id;
    rq.BrokerEpoch = a->broker_epoch;
    t.TopicId = a->part->topic_id;
    p.PartitionIndex = a->part->index;
    p.LeaderEpoch = a->leader_epoch;
    p.PartitionEpoch = a->partition_epoch;
    p.LeaderRecoveryState = 0;
    if (ver >= 3) {
        /* the other members' broker epochs are the controller's to know: -1 */
        for (size_t i = 0; i < n; i++) {
            kp_AlterPartitionRequest_BrokerState_init(&bs[i]);
            bs[i].BrokerId = a->isr[i];
            bs[i].BrokerEpoch = a->isr[i] == a->node_id ? a->broker_epoch : -1;
        }
        p.NewIsrWithEpochs.v = bs;
        p.NewIsrWithEpochs.cnt = (int32_t)n;
    } else {
        p.NewIsr.v = a->isr;
        p.NewIsr.cnt = (int32_t)n;
    }
    t.Partitions.v = &p;
    t.Partitions.cnt = 1;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    return kp_AlterPartitionRequest_encode(wr, &rq, ver);
}

static void kb_alter_name(const kb_alter_t *a, char *buf, size_t size)
{
    snprintf(buf, size, "%s-%" PRId32, a->part->topic, a->part->index);
}

static void kb_alter_done(kc_client_t *kc, int err, int16_t ver, const uint8_t *body, size_t len,
                          void *opaque)
{
    kb_alter_t *a = opaque;
    kp_AlterPartitionResponse_t resp;
    const kp_AlterPartitionResponse_PartitionData_t *pd = NULL;
    kp_arena_t ar;
    kp_reader_t rd;
    char name[300];
    int16_t code = -1;
    (void)kc;

    kb_alter_name(a, name, sizeof(name));
    kp_arena_init(&ar, 0);
    kp_AlterPartitionResponse_init(&resp);
    if (err != KC_E_OK) {
        kb_log_warn("repl", "%s: AlterPartition to the controller failed: %s", name,
                    kc_err_str(err));
        goto abort;
    }
    kp_reader_init(&rd, body, len);
    if (kp_AlterPartitionResponse_decode(&rd, &ar, &resp, ver) != 0) {
        kb_log_error("repl", "%s: undecodable AlterPartition v%d answer (%zu bytes)", name,
                     (int)ver, len);
        goto abort;
    }
    code = resp.ErrorCode;
    for (int32_t i = 0; !code && i < resp.Topics.cnt && !pd; i++) {
        const kp_AlterPartitionResponse_TopicData_t *t = &resp.Topics.v[i];
        if (memcmp(t->TopicId.b, a->part->topic_id.b, 16) != 0)
            continue;
        for (int32_t k = 0; k < t->Partitions.cnt && !pd; k++)
            if (t->Partitions.v[k].PartitionIndex == a->part->index)
                pd = &t->Partitions.v[k];
    }
    if (!code && !pd) {
        kb_log_error("repl", "%s: the AlterPartition answer does not name the partition", name);
        goto abort;
    }
    if (!code)
        code = pd->ErrorCode;
    if (code) {
        kb_log_info("repl", "%s: the controller refused the ISR change: error %d", name, (int)code);
        goto abort;
    }
    if (pd->LeaderEpoch != kb_part_epoch(a->part) || pd->Isr.cnt < 0) {
        kb_log_info("repl",
                    "%s: the ISR change answer is for leader epoch %" PRId32 ", not %" PRId32, name,
                    pd->LeaderEpoch, kb_part_epoch(a->part));
        goto abort;
    }
    {
        int rc = kb_part_set_isr(a->part, pd->PartitionEpoch, pd->Isr.v, (size_t)pd->Isr.cnt);
        if (rc == KB_E_STATE) {
            /* the metadata brought this change (or a newer one) first */
            kb_part_isr_abort(a->part);
        } else if (rc != 0) {
            kb_log_error("repl",
                         "%s: the controller's ISR (partition epoch %" PRId32 ") does not fit: %s",
                         name, pd->PartitionEpoch, kb_err_str(rc));
            goto abort;
        } else {
            kb_log_info("repl", "%s: ISR of %" PRId32 " replicas at partition epoch %" PRId32, name,
                        pd->Isr.cnt, pd->PartitionEpoch);
        }
    }
    goto out;
abort:
    kb_part_isr_abort(a->part);
out:
    kp_arena_free(&ar);
    kb_part_release(a->part);
    free(a);
}

/* kb_part_isr_fn: no locks held by the caller; must not block. */
static void kb_repl_isr(void *opaque, kb_part_t *part, int32_t leader_epoch,
                        int32_t partition_epoch, const int32_t *isr, size_t n)
{
    kb_repl_t *r = opaque;
    kb_repl_ctrl_fn *fn;
    void *fo;
    kb_alter_t *a = malloc(sizeof(*a) + n * sizeof(int32_t));
    int64_t id;
    char name[300];
    if (!a) {
        kb_part_isr_abort(part);
        return;
    }
    a->node_id = r->node_id;
    a->part = part;
    a->leader_epoch = leader_epoch;
    a->partition_epoch = partition_epoch;
    a->broker_epoch = atomic_load(&r->broker_epoch);
    a->n = n;
    memcpy(a->isr, isr, n * sizeof(int32_t));
    kb_part_ref(part);
    kb_alter_name(a, name, sizeof(name));
    pthread_mutex_lock(&r->ctrl_mu);
    fn = r->ctrl_fn;
    fo = r->ctrl_opaque;
    pthread_mutex_unlock(&r->ctrl_mu);
    kb_log_info("repl",
                "%s: proposing an ISR of %zu replicas at leader epoch %" PRId32
                ", partition epoch %" PRId32,
                name, n, leader_epoch, partition_epoch);
    id = fn ? fn(fo, KP_APIKEY_AlterPartition, 2, 3, kb_alter_encode, kb_alter_done, a) : -1;
    if (id > 0)
        return;
    kb_log_warn("repl", "%s: cannot send AlterPartition to the controller", name);
    kb_part_isr_abort(part);
    kb_part_release(part);
    free(a);
}

void kb_repl_set_ctrl(kb_repl_t *r, kb_repl_ctrl_fn *fn, void *opaque)
{
    bool had;
    pthread_mutex_lock(&r->ctrl_mu);
    had = r->ctrl_fn != NULL;
    r->ctrl_fn = fn;
    r->ctrl_opaque = opaque;
    pthread_mutex_unlock(&r->ctrl_mu);
    if (!r->pm || (!fn && !had))
        return;
    kb_partmgr_set_isr_fn(r->pm, fn ? kb_repl_isr : NULL, fn ? r : NULL);
}
