/*
 * kb_ctrl_elect_api.h -- requested and automatic leader elections on the controller
 * (docs/broker.md "Cluster", "Leader elections"): the ElectLeaders API (43), automatic
 * preferred-leader rebalancing (auto.leader.rebalance.enable) and the effective
 * unclean.leader.election.enable of a topic. The rules are kb_ctrl_elect.h's; results are
 * committed as PartitionChangeRecords through kb_meta_change_partition().
 *
 * A broker-only node registers the same handler without a usable-broker function: it is what
 * answers when the forwarding to the controller cannot (NOT_CONTROLLER, docs/design.md C5).
 *
 * Owned by the ctrl module (kb_ctrlmod.c), which creates it at init and frees it after
 * unregistering the handler.
 */
#ifndef KB_CTRL_ELECT_API_H
#define KB_CTRL_ELECT_API_H

#include <stdbool.h>
#include <stdint.h>

#include "kb_api.h"
#include "kb_broker.h"
#include "kb_ctrl_rules.h"
#include "kb_meta.h"

typedef struct kb_ctrl_elector_s kb_ctrl_elector_t;

/** Automatic rebalancing elects at most this many leaders a pass (Kafka's controller: 1000);
 *  a pass that stops there runs again on the next tick. */
#define KB_CTRL_ELECT_MAX_PER_PASS 1000

/**
 * Create the elector of broker @p kb (its config, metadata and, when linked, authorizer).
 * @p usable (with @p opaque) tells which brokers may lead; NULL makes a broker-only node's
 * stand-in that refuses every election with NOT_CONTROLLER naming controller @p controller_id.
 * NULL on out of memory.
 */
kb_ctrl_elector_t *kb_ctrl_elector_new(kb_broker_t *kb, kb_meta_t *meta, kb_ctrl_usable_fn *usable,
                                       void *opaque, int32_t controller_id);
/** Free it (NULL is fine); its handler must no longer be registered. */
void kb_ctrl_elector_free(kb_ctrl_elector_t *el);

/** The ElectLeaders handler (kb_api_handler_fn; opaque = the elector). @thread handler */
kb_api_result_t kb_ctrl_elector_handle(void *opaque, kb_req_t *req, kb_resp_t **respp);

/**
 * The periodic part, called often (every controller tick): once every
 * leader.imbalance.check.interval.seconds it moves leadership back to the preferred replica of
 * every partition kb_ctrl_elect_imbalanced() names (when auto.leader.rebalance.enable), and
 * elects a leader for leaderless partitions whose topic enables unclean leader election.
 * @return the number of leaders changed. @thread the controller thread
 */
int kb_ctrl_elector_tick(kb_ctrl_elector_t *el, int64_t now_ms);

/** @p p = the image's state @p st of a partition (replicas and ISR capped at
 *  KB_CTRL_MAX_REPLICAS), for the rules of kb_ctrl_rules.h / kb_ctrl_elect.h. @thread any */
void kb_ctrl_part_load(kb_ctrl_part_t *p, const kb_meta_part_state_t *st);

/** The effective unclean.leader.election.enable of topic @p topic: its override, else the
 *  dynamic broker configs, else server.properties. @thread any */
bool kb_ctrl_elect_unclean_enabled(kb_meta_t *meta, const kb_config_t *cfg, const char *topic);

#endif /* KB_CTRL_ELECT_API_H */
