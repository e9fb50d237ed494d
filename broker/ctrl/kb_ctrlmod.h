/*
 * kb_ctrlmod.h -- the "ctrl" module of kbroker: the cluster control plane (docs/broker.md
 * "Cluster", docs/design.md C1, C3).
 *
 * Controller role (process.roles has controller): the broker registry (kb_ctrl_reg.h) behind
 * BrokerRegistration (62), BrokerHeartbeat (63) and UnregisterBroker (64); a thread fences the
 * brokers whose session expired. A combined node registers itself directly.
 * Broker role without controller (a broker-only node): the controller channel, a thread owning
 * a kc_ client (proto/client) to the voter of controller.quorum.voters: BrokerRegistration at
 * start (incarnation id, advertised listeners with their bound ports), then BrokerHeartbeat
 * every broker.heartbeat.interval.ms; a lost registration (STALE_BROKER_EPOCH,
 * BROKER_ID_NOT_REGISTERED: the controller restarted) registers again; at stop a controlled
 * shutdown (WantShutDown until ShouldShutDown, bounded by the session timeout).
 * Both roles install the broker list of Metadata / DescribeCluster (kb_apisvc_set_cluster).
 *
 * Listed after "api" (whose metadata and service it uses) in broker/core/kb_modules.c.
 */
#ifndef KB_CTRLMOD_H
#define KB_CTRLMOD_H

#include "kb_broker.h"

extern const kb_module_t kb_module_ctrl;

#endif /* KB_CTRLMOD_H */
