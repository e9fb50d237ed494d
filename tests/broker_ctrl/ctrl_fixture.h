/*
 * ctrl_fixture.h -- helpers of the controller rule tests (test_rules.c, test_elect.c): usable
 * brokers as a bit mask and a partition built from its replicas and ISR.
 */
#ifndef CTRL_FIXTURE_H
#define CTRL_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kb_ctrl_rules.h"

/* Usable brokers: a bit mask over ids 0..31. */
static inline bool usable_mask(void *opaque, int32_t id)
{
    const uint32_t *mask = opaque;
    return id >= 0 && id < 32 && (*mask & (1u << id));
}

/* A partition at leader epoch 5, partition epoch 9. */
static inline kb_ctrl_part_t part(int32_t leader, const int32_t *replicas, int32_t nr,
                                  const int32_t *isr, int32_t ni)
{
    kb_ctrl_part_t p;
    memset(&p, 0, sizeof(p));
    p.leader = leader;
    p.leader_epoch = 5;
    p.partition_epoch = 9;
    p.nreplicas = nr;
    p.nisr = ni;
    memcpy(p.replicas, replicas, (size_t)nr * sizeof(int32_t));
    memcpy(p.isr, isr, (size_t)ni * sizeof(int32_t));
    return p;
}

#endif /* CTRL_FIXTURE_H */
