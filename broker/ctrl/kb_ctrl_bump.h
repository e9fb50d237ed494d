/*
 * kb_ctrl_bump.h -- the ctrl module's part of the kbx cluster operations (docs/broker.md
 * "The plugin host"): the controller's BumpLeaderEpochs (105, provisional) and
 * WritePluginRecords (1000, ours) handlers and a broker-only node's raw request channel to the
 * controller (kb_ctrl_send_fn of kb_apisvc.h). Internal to kb_ctrlmod.
 *
 * @thread as stated per function
 */
#ifndef KB_CTRL_BUMP_H
#define KB_CTRL_BUMP_H

#include <stdint.h>

#include "kb_apisvc.h"
#include "kb_ctrl_reg.h"
#include "kc_client.h"

/**
 * BumpLeaderEpochs on the controller: for every partition named, a PartitionChangeRecord that
 * raises its leader epoch to at least MinLeaderEpoch and at least by one (kb_meta_bump_epoch),
 * committed before the answer; per-partition errors (UNKNOWN_TOPIC_OR_PARTITION,
 * INVALID_REQUEST for an epoch that cannot grow, KAFKA_STORAGE_ERROR). The caller checked the
 * listener (controller listeners only). @thread handler
 */
kb_api_result_t kb_ctrl_bump_handle(kb_meta_t *meta, kb_req_t *req, kb_resp_t **respp);

/**
 * WritePluginRecords (1000, kbroker's own) on the controller: from a registered broker (BrokerId
 * with its current BrokerEpoch, else STALE_BROKER_EPOCH), the records as one batch of
 * KbrokerPluginRecords (kb_meta_commit_records_at); the answer carries the offset of the
 * batch's last record (the broker completes its controller_write once it applied that offset).
 * INVALID_REQUEST for no records or a key / value above KB_MREC_PLUGIN_MAX. @thread handler
 */
kb_api_result_t kb_ctrl_precs_handle(kb_meta_t *meta, kb_ctrl_reg_t *reg, kb_req_t *req,
                                     kb_resp_t **respp);

/**
 * Send a raw request (body for exactly @p ver) to controller @p node on @p kc and hand the
 * answer to @p cb (kb_ctrl_resp_fn semantics: KB_E_IO unreachable, KB_E_TIMEOUT, KB_E_UNSUPPORTED,
 * KB_E_CLOSED). 0, or a negative kb_err_t (then @p cb never runs). @thread any
 */
int kb_ctrl_send_raw(kc_client_t *kc, int32_t node, int16_t api_key, int16_t ver,
                     const uint8_t *body, size_t len, int32_t timeout_ms, kb_ctrl_resp_fn *cb,
                     void *arg);

#endif /* KB_CTRL_BUMP_H */
