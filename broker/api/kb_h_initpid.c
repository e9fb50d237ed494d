/*
 * kb_h_initpid.c -- InitProducerId v0-6 for idempotent producers only, until the transaction
 * coordinator registers its own handler (kb_apisvc_start() registers this one only when the key
 * is still free): a null TransactionalId gets a fresh producer id (persisted id blocks, never
 * reused) with epoch 0, as Kafka's coordinator does for non-transactional producers. A
 * transactional id gets COORDINATOR_NOT_AVAILABLE (there is no transaction coordinator yet).
 */
#include "kb_api_int.h"
#include "kb_apilog.h"
#include "kp_errcode.h"

static kb_api_result_t kb_initpid_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_apisvc_t *svc = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_InitProducerIdRequest_t rq;
    kp_InitProducerIdResponse_t resp;
    int64_t pid;

    if (kb_h_decode(ctx, &kp_InitProducerIdRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_InitProducerIdResponse_init(&resp);
    resp.ProducerId = -1;
    resp.ProducerEpoch = -1;
    if (rq.TransactionalId.len >= 0) {
        resp.ErrorCode = KP_ERR_COORDINATOR_NOT_AVAILABLE;
    } else if (kb_meta_alloc_producer_ids(svc->meta, 1, &pid) != 0) {
        resp.ErrorCode = KP_ERR_KAFKA_STORAGE_ERROR;
    } else {
        resp.ProducerId = pid;
        resp.ProducerEpoch = 0;
    }
    return kb_h_respond(ctx, &kp_InitProducerIdResponse_desc, &resp, respp);
}

int kb_h_initpid_register(kb_apisvc_t *svc)
{
    return kb_h_register(svc, KP_APIKEY_InitProducerId, 0, 6, kb_initpid_handle, KB_API_CONCURRENT);
}
