/*
 * kb_ctrl_fwerr.h -- the answer of a broker-only node to a forwarded request whose controller
 * answer did not come (docs/design.md C5): every entry of the request (topic, config resource,
 * ACL creation or filter, partition) carries one error, as Kafka's getErrorResponse builds it.
 */
#ifndef KB_CTRL_FWERR_H
#define KB_CTRL_FWERR_H

#include <stdint.h>

#include "kb_net.h"

/**
 * The response to the forwarded request of @p ctx (CreateTopics, DeleteTopics,
 * CreatePartitions, AlterConfigs, IncrementalAlterConfigs, CreateAcls, DeleteAcls,
 * ElectLeaders) with @p err and @p msg on every entry (and at the top level where the response
 * has one). NULL when the request cannot be decoded or the API is not one of these.
 * @thread any (the request's own handler context)
 */
kb_resp_t *kb_ctrl_fw_error_response(kb_reqctx_t *ctx, int16_t err, const char *msg);

#endif /* KB_CTRL_FWERR_H */
