/*
 * kb_ctrl_rules.c -- the controller's partition rules (kb_ctrl_rules.h).
 */
#include "kb_ctrl_rules.h"

#include <stdio.h>
#include <string.h>

#include "kp_errcode.h"

bool kb_ctrl_has(const int32_t *v, int32_t n, int32_t id)
{
    for (int32_t i = 0; i < n; i++)
        if (v[i] == id)
            return true;
    return false;
}

int32_t kb_ctrl_elect(const kb_ctrl_part_t *p, kb_ctrl_usable_fn *usable, void *opaque,
                      bool unclean, bool *was_unclean)
{
    if (was_unclean)
        *was_unclean = false;
    for (int32_t i = 0; i < p->nreplicas; i++)
        if (kb_ctrl_has(p->isr, p->nisr, p->replicas[i]) && usable(opaque, p->replicas[i]))
            return p->replicas[i];
    if (!unclean)
        return -1;
    for (int32_t i = 0; i < p->nreplicas; i++)
        if (usable(opaque, p->replicas[i])) {
            if (was_unclean)
                *was_unclean = true;
            return p->replicas[i];
        }
    return -1;
}

/* @p out = @p in with leader @p leader (epochs bumped when anything changed). */
static bool kb_ctrl_part_finish(const kb_ctrl_part_t *in, kb_ctrl_part_t *out, int32_t leader)
{
    bool isr_changed =
        out->nisr != in->nisr || memcmp(out->isr, in->isr, (size_t)in->nisr * sizeof(int32_t)) != 0;
    out->leader = leader;
    if (leader != in->leader)
        out->leader_epoch = in->leader_epoch + 1;
    if (leader != in->leader || isr_changed) {
        out->partition_epoch = in->partition_epoch + 1;
        return true;
    }
    return false;
}

bool kb_ctrl_part_fence(const kb_ctrl_part_t *in, int32_t fenced, kb_ctrl_usable_fn *usable,
                        void *opaque, bool unclean, kb_ctrl_part_t *out)
{
    int32_t leader = in->leader;
    bool was_unclean;

    *out = *in;
    if (in->nisr > 1 && kb_ctrl_has(in->isr, in->nisr, fenced)) {
        out->nisr = 0;
        for (int32_t i = 0; i < in->nisr; i++)
            if (in->isr[i] != fenced)
                out->isr[out->nisr++] = in->isr[i];
    }
    if (leader == fenced || leader < 0 || !usable(opaque, leader)) {
        leader = kb_ctrl_elect(out, usable, opaque, unclean, &was_unclean);
        if (leader >= 0 && was_unclean) {
            out->isr[0] = leader;
            out->nisr = 1;
        }
    }
    return kb_ctrl_part_finish(in, out, leader);
}

bool kb_ctrl_part_reelect(const kb_ctrl_part_t *in, kb_ctrl_usable_fn *usable, void *opaque,
                          bool unclean, kb_ctrl_part_t *out)
{
    int32_t leader = in->leader;
    bool was_unclean;

    *out = *in;
    if (leader >= 0 && usable(opaque, leader))
        return false;
    leader = kb_ctrl_elect(in, usable, opaque, unclean, &was_unclean);
    if (leader < 0)
        return false;
    if (was_unclean) {
        out->isr[0] = leader;
        out->nisr = 1;
    }
    return kb_ctrl_part_finish(in, out, leader);
}

int16_t kb_ctrl_alter_check(const kb_ctrl_part_t *cur, int32_t broker, int32_t leader_epoch,
                            int32_t partition_epoch, const int32_t *isr, int32_t nisr,
                            kb_ctrl_usable_fn *usable, void *opaque, char *msg, size_t msg_size)
{
    msg[0] = '\0';
    if (broker != cur->leader) {
        snprintf(msg, msg_size, "Broker %d is not the leader (the leader is %d)", broker,
                 cur->leader);
        return KP_ERR_INVALID_REQUEST;
    }
    if (leader_epoch != cur->leader_epoch) {
        snprintf(msg, msg_size, "Leader epoch %d is not the current %d", leader_epoch,
                 cur->leader_epoch);
        return KP_ERR_FENCED_LEADER_EPOCH;
    }
    if (partition_epoch != cur->partition_epoch) {
        snprintf(msg, msg_size, "Partition epoch %d is not the current %d", partition_epoch,
                 cur->partition_epoch);
        return KP_ERR_INVALID_UPDATE_VERSION;
    }
    if (nisr <= 0 || nisr > cur->nreplicas) {
        snprintf(msg, msg_size, "The new ISR has %d members for %d replicas", nisr, cur->nreplicas);
        return KP_ERR_INVALID_REQUEST;
    }
    if (!kb_ctrl_has(isr, nisr, cur->leader)) {
        snprintf(msg, msg_size, "The new ISR does not contain the leader %d", cur->leader);
        return KP_ERR_INVALID_REQUEST;
    }
    for (int32_t i = 0; i < nisr; i++) {
        if (!kb_ctrl_has(cur->replicas, cur->nreplicas, isr[i])) {
            snprintf(msg, msg_size, "ISR member %d is not a replica", isr[i]);
            return KP_ERR_INVALID_REQUEST;
        }
        if (kb_ctrl_has(isr, i, isr[i])) {
            snprintf(msg, msg_size, "ISR member %d appears twice", isr[i]);
            return KP_ERR_INVALID_REQUEST;
        }
    }
    for (int32_t i = 0; i < nisr; i++) {
        if (isr[i] != cur->leader && !kb_ctrl_has(cur->isr, cur->nisr, isr[i]) &&
            !usable(opaque, isr[i])) {
            snprintf(msg, msg_size, "ISR member %d is fenced, shutting down or not registered",
                     isr[i]);
            return KP_ERR_INELIGIBLE_REPLICA;
        }
    }
    return 0;
}

int16_t kb_ctrl_assign(const int32_t *brokers, int32_t nbrokers, int32_t rf, int32_t partition,
                       int32_t start, int32_t *out)
{
    int64_t base;
    if (rf < 1 || rf > nbrokers || rf > KB_CTRL_MAX_REPLICAS || nbrokers < 1)
        return KP_ERR_INVALID_REPLICATION_FACTOR;
    base = ((int64_t)(start < 0 ? -(int64_t)start : start) + partition) % nbrokers;
    for (int32_t i = 0; i < rf; i++)
        out[i] = brokers[(base + i) % nbrokers];
    return 0;
}
