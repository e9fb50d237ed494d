/*
 * kb_ctrl_rules.h -- the controller's partition rules as pure functions (no locks, no I/O, no
 * clock): leader election, removing a fenced broker from an ISR, validating an AlterPartition
 * ISR change, and assigning replicas to the registered brokers at topic creation. The
 * controller (kb_ctrl.c) applies their results as PartitionChangeRecord / PartitionRecord;
 * CUnit tests drive them directly (tests/broker_ctrl).
 *
 * The rules are Apache Kafka's (KRaft, eligible leader replicas off), docs/design.md C3/C4:
 *   - election: the first replica, in the partition's replica order, that is in the ISR and
 *     usable (registered, unfenced, not shutting down); none -> leader -1 (offline), unless
 *     unclean election is enabled, then the first usable replica at all (the ISR becomes that
 *     replica alone);
 *   - a fenced broker leaves every ISR except when it is the last member (the ISR keeps it, so
 *     the partition can come back with it rather than elect a lagging replica);
 *   - a leader change bumps the leader epoch; every change bumps the partition epoch.
 *
 * @thread any (pure functions)
 */
#ifndef KB_CTRL_RULES_H
#define KB_CTRL_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Most replicas a partition may have here (as kb_meta's KB_META_MAX_REPLICAS). */
#define KB_CTRL_MAX_REPLICAS 64

/** A partition's replication state (the same fields as kb_meta_part_state_t). */
typedef struct kb_ctrl_part_s {
    int32_t leader; /**< -1 = none */
    int32_t leader_epoch;
    int32_t partition_epoch;
    int32_t nreplicas;
    int32_t nisr;
    int32_t replicas[KB_CTRL_MAX_REPLICAS];
    int32_t isr[KB_CTRL_MAX_REPLICAS];
} kb_ctrl_part_t;

/** Whether broker @p id may lead or be added to an ISR (registered, unfenced, not shutting
 *  down). */
typedef bool(kb_ctrl_usable_fn)(void *opaque, int32_t id);

/** True if @p id is one of the @p n ints of @p v. */
bool kb_ctrl_has(const int32_t *v, int32_t n, int32_t id);

/**
 * The leader Kafka's clean election picks for @p p: the first replica (replica order) in the
 * ISR for which @p usable is true. With @p unclean and no such replica, the first usable
 * replica (*@p was_unclean set). -1 when there is none.
 */
int32_t kb_ctrl_elect(const kb_ctrl_part_t *p, kb_ctrl_usable_fn *usable, void *opaque,
                      bool unclean, bool *was_unclean);

/**
 * Broker @p fenced was fenced (session expired, or it shuts down): @p out = @p in without it in
 * the ISR (unless it is the last member) and with a new leader if it led or there was none.
 * @return true when @p out differs from @p in (epochs bumped as Kafka does).
 */
bool kb_ctrl_part_fence(const kb_ctrl_part_t *in, int32_t fenced, kb_ctrl_usable_fn *usable,
                        void *opaque, bool unclean, kb_ctrl_part_t *out);

/**
 * A broker became usable again: an offline partition (leader -1) whose ISR holds a usable
 * replica gets it as leader. @return true when @p out differs from @p in.
 */
bool kb_ctrl_part_reelect(const kb_ctrl_part_t *in, kb_ctrl_usable_fn *usable, void *opaque,
                          bool unclean, kb_ctrl_part_t *out);

/**
 * Validate an AlterPartition entry from broker @p broker for @p cur, as Kafka's controller
 * does: the requester must be the leader (INVALID_REQUEST), at the current leader epoch
 * (FENCED_LEADER_EPOCH) and partition epoch (INVALID_UPDATE_VERSION); the new ISR must be
 * non-empty, free of duplicates, contain the leader and only replicas (INVALID_REQUEST), and
 * every member other than the leader must be usable (INELIGIBLE_REPLICA).
 * @return 0 or the Kafka error code; @p msg gets a message.
 */
int16_t kb_ctrl_alter_check(const kb_ctrl_part_t *cur, int32_t broker, int32_t leader_epoch,
                            int32_t partition_epoch, const int32_t *isr, int32_t nisr,
                            kb_ctrl_usable_fn *usable, void *opaque, char *msg, size_t msg_size);

/**
 * Replicas of partition @p partition for a new topic: @p rf brokers of the @p nbrokers in
 * @p brokers (sorted ids of the usable ones), striped round-robin from @p start so leaders
 * (the first replica) spread over the brokers. @p out gets @p rf ids.
 * @return 0, or INVALID_REPLICATION_FACTOR when @p rf is not 1..nbrokers (or above the limit).
 */
int16_t kb_ctrl_assign(const int32_t *brokers, int32_t nbrokers, int32_t rf, int32_t partition,
                       int32_t start, int32_t *out);

#endif /* KB_CTRL_RULES_H */
