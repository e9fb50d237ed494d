/*
 * km_lme.h - the failback lookup of the last mirrored epoch (LME), both ends (design M1, M27;
 * docs/plugin.md "Failback").
 *
 * Server: DescribeMirrors carrying the tagged lookup fields (the requesting cluster's id and
 * topic ids with partitions) is answered from the PARTITION_STATE records in `__mirror_state`
 * (km_state_read, routed to each shard's leader), for the mirrors whose source cluster id is
 * the requester's; every partition of a topic this cluster knows is answered explicitly.
 *
 * Client: the partition state machines' lme_lookup op. Lookups are queued per mirror and sent
 * as one DescribeMirrors per mirror (all partitions queued meanwhile) through the source admin
 * client (rpc/km_srcadm) to the mirror's source; at most one request per mirror in flight.
 *
 * Owner of the client part: the mirror binding (cm->mirror.lme). Everything runs on the
 * coordinator loop.
 */
#ifndef KM_LME_H
#define KM_LME_H

#include <stdbool.h>
#include <stdint.h>

#include "util/km_err.h"
#include "util/km_types.h"

typedef struct km_rpc_req km_rpc_req_t;
typedef struct km_lme km_lme_t;

/* ---- server --------------------------------------------------------------------------------- */

/** True when req (a decoded DescribeMirrors) is a failback lookup: lookup fields present and a
 *  ClusterId that is not this cluster's own (that marks a fan-out leg). */
bool km_lme_is_lookup(km_rpc_req_t *req);

/** Answer the lookup (req authorized for DESCRIBE). @thread coord */
void km_lme_serve(km_rpc_req_t *req);

/* ---- client --------------------------------------------------------------------------------- */

#define KM_LME_ANSWER 0 /**< the peer answered: (epoch, offset), epoch -1 = none recorded */
#define KM_LME_RETRY  1 /**< no usable answer (msg): stay PREPARING, ask again */
#define KM_LME_LOOP   2 /**< the peer still mirrors the partition from us (msg): FAILED */

/** Result of one lookup; msg borrowed (NULL for ANSWER). With an LME (ANSWER, epoch >= 0)
 *  peer_epoch is the peer's current leader epoch of the partition from its Metadata (a second
 *  round trip, design M27; -1 when the peer did not say), else -1. @thread coord */
typedef void (*km_lme_done_fn)(km_plugin_t *cm, const kbx_uuid_t *topic_id, int32_t partition,
                               uint64_t token, int kind, int32_t epoch, int64_t offset,
                               int32_t peer_epoch, const char *msg);

/** NULL when out of memory. */
km_lme_t *km_lme_new(km_plugin_t *cm, km_lme_done_fn done);

/** Free (queued lookups are dropped without a result; answers still on the way are dropped). */
void km_lme_free(km_lme_t *l);

/**
 * Queue a lookup of (topic_id, partition) of mirror at its source; done() runs later with
 * token (a second lookup of the same partition replaces the queued one's token).
 * @return KM_OK, KM_ERR_NOMEM
 * @thread coord
 */
km_err_t km_lme_lookup(km_lme_t *l, const char *mirror, const char *topic,
                       const kbx_uuid_t *topic_id, int32_t partition, uint64_t token);

#endif /* KM_LME_H */
