/*
 * kb_ctrl_elect.c -- the controller's requested elections (kb_ctrl_elect.h).
 */
#include "kb_ctrl_elect.h"

#include "kp_errcode.h"

/* @p out = @p in with leader @p leader: a new leader epoch and partition epoch. */
static void kb_ctrl_elect_set(const kb_ctrl_part_t *in, kb_ctrl_part_t *out, int32_t leader)
{
    out->leader = leader;
    out->leader_epoch = in->leader_epoch + 1;
    out->partition_epoch = in->partition_epoch + 1;
}

static int16_t kb_ctrl_elect_preferred(const kb_ctrl_part_t *in, kb_ctrl_usable_fn *usable,
                                       void *opaque, kb_ctrl_part_t *out)
{
    int32_t pref, leader;

    if (in->nreplicas <= 0)
        return KP_ERR_PREFERRED_LEADER_NOT_AVAILABLE;
    pref = in->replicas[0];
    if (in->leader == pref)
        return KP_ERR_ELECTION_NOT_NEEDED;
    if (kb_ctrl_has(in->isr, in->nisr, pref) && usable(opaque, pref)) {
        kb_ctrl_elect_set(in, out, pref);
        return 0;
    }
    /* The preferred replica cannot lead. A leader that is still usable stays; one that is
     * gone is replaced cleanly (the reaper usually got there first). */
    if (in->leader >= 0 && usable(opaque, in->leader))
        return KP_ERR_PREFERRED_LEADER_NOT_AVAILABLE;
    leader = kb_ctrl_elect(in, usable, opaque, false, NULL);
    if (leader < 0 || leader == in->leader)
        return KP_ERR_PREFERRED_LEADER_NOT_AVAILABLE;
    kb_ctrl_elect_set(in, out, leader);
    return 0;
}

int16_t kb_ctrl_elect_requested(const kb_ctrl_part_t *in, int8_t type, kb_ctrl_usable_fn *usable,
                                void *opaque, kb_ctrl_part_t *out, bool *was_unclean)
{
    int32_t leader;
    bool unclean = false;

    *out = *in;
    if (was_unclean)
        *was_unclean = false;
    if (type == KB_CTRL_ELECTION_PREFERRED)
        return kb_ctrl_elect_preferred(in, usable, opaque, out);
    if (type != KB_CTRL_ELECTION_UNCLEAN)
        return KP_ERR_INVALID_REQUEST;
    if (in->leader >= 0)
        return KP_ERR_ELECTION_NOT_NEEDED;
    leader = kb_ctrl_elect(in, usable, opaque, true, &unclean);
    if (leader < 0)
        return KP_ERR_ELIGIBLE_LEADERS_NOT_AVAILABLE;
    if (unclean) {
        out->isr[0] = leader;
        out->nisr = 1;
    }
    if (was_unclean)
        *was_unclean = unclean;
    kb_ctrl_elect_set(in, out, leader);
    return 0;
}

bool kb_ctrl_elect_imbalanced(const kb_ctrl_part_t *p, kb_ctrl_usable_fn *usable, void *opaque)
{
    if (p->nreplicas <= 0 || p->leader == p->replicas[0])
        return false;
    return kb_ctrl_has(p->isr, p->nisr, p->replicas[0]) && usable(opaque, p->replicas[0]);
}
