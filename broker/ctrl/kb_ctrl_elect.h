/*
 * kb_ctrl_elect.h -- the controller's requested elections as pure functions (no locks, no I/O,
 * no clock): Apache Kafka's ElectLeaders rules for one partition (PREFERRED and UNCLEAN) and
 * the test behind automatic leader rebalancing. The controller (kb_ctrl_elect_api.h) commits
 * their results as PartitionChangeRecords; CUnit tests drive them directly (tests/broker_ctrl).
 *
 * The rules are those of Kafka's KRaft controller (docs/broker.md "Cluster"):
 *   - PREFERRED: the preferred replica is the first of the assignment. Already the leader:
 *     ELECTION_NOT_NEEDED. In the ISR and usable: it becomes the leader (new leader epoch).
 *     Otherwise PREFERRED_LEADER_NOT_AVAILABLE, except that a partition whose leader is gone
 *     gets a clean election (the first usable ISR member) as Kafka's builder does;
 *   - UNCLEAN: a partition with a leader: ELECTION_NOT_NEEDED. Otherwise a clean election if an
 *     ISR member is usable, else the first usable replica, whose ISR becomes that replica
 *     alone (*was_unclean set); none usable: ELIGIBLE_LEADERS_NOT_AVAILABLE.
 *
 * @thread any (pure functions)
 */
#ifndef KB_CTRL_ELECT_H
#define KB_CTRL_ELECT_H

#include <stdbool.h>
#include <stdint.h>

#include "kb_ctrl_rules.h"

/** ElectLeaders ElectionType values (Kafka's). */
#define KB_CTRL_ELECTION_PREFERRED 0
#define KB_CTRL_ELECTION_UNCLEAN   1

/**
 * One requested election of type @p type on @p in. @return 0 with @p out the new state (leader
 * and epochs changed, *@p was_unclean set when an out-of-sync replica was chosen), or
 * ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE or
 * INVALID_REQUEST (an unknown @p type), @p out then equal to @p in.
 */
int16_t kb_ctrl_elect_requested(const kb_ctrl_part_t *in, int8_t type, kb_ctrl_usable_fn *usable,
                                void *opaque, kb_ctrl_part_t *out, bool *was_unclean);

/**
 * Whether @p p is imbalanced in a way automatic rebalancing repairs: it has replicas, its
 * leader is not the preferred replica, and the preferred replica is in the ISR and usable
 * (Kafka's KRaft controller rebalances exactly these, without a per-broker threshold).
 */
bool kb_ctrl_elect_imbalanced(const kb_ctrl_part_t *p, kb_ctrl_usable_fn *usable, void *opaque);

#endif /* KB_CTRL_ELECT_H */
