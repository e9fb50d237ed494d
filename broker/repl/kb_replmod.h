/*
 * kb_replmod.h -- the "repl" module of kbroker: the replica fetcher manager (kb_repl.h) of the
 * broker, following the metadata image (docs/broker.md "Replication", design C4).
 *
 * init: a kb_repl_t with the broker's config and an endpoint lookup through the cluster's
 * broker list (kb_apisvc_cluster on inter.broker.listener.name, else the first advertised
 * listener). start: kb_repl_watch() on the api service's metadata and partitions. stop: the
 * watch ends, the fetcher threads are joined, their partitions released. A single node follows
 * no partition: no thread runs, behaviour unchanged.
 *
 * The control plane (broker/ctrl) reaches the manager with kb_repl_of() to install the
 * controller channel (kb_repl_set_ctrl) and the broker epoch (kb_repl_set_broker_epoch), and
 * calls kb_repl_endpoints_changed() when the broker list changes.
 *
 * Listed after "api" (whose service it uses) and before "ctrl" in broker/core/kb_modules.c.
 */
#ifndef KB_REPLMOD_H
#define KB_REPLMOD_H

#include "kb_broker.h"
#include "kb_repl.h"

extern const kb_module_t kb_module_repl;

/** The replica manager of broker @p kb (after the module's init), or NULL. @thread any */
kb_repl_t *kb_repl_of(const kb_broker_t *kb);

#endif /* KB_REPLMOD_H */
