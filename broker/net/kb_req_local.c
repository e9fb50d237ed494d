/*
 * kb_req_local.c -- connection-less requests (kb_net.h, "connection-less requests").
 *
 * A local request is a kb_req_t with conn == NULL. It uses the same state machine as a socket
 * request (kb_net_int.h); what differs is who is told the result:
 *   - the handler answers at once: kb_req_local_run() moves RUNNING -> DONE and calls done;
 *   - the handler defers: kb_req_complete() moves DEFERRED -> DONE and calls done on its thread;
 *   - kb_req_local_cancel(): RUNNING -> CANCELLED (the runner calls done when the handler
 *     returns) or DEFERRED -> CANCELLED (the canceller runs the owner's cancel callback, then
 *     calls done).
 * done is guarded by the `finished` flag so that it runs once whichever of these paths gets
 * there first. References: the creator's (kb_req_local_release), the deferred owner's (taken
 * by kb_req_defer, dropped by kb_req_complete or after the cancel callback), and a temporary
 * one held by kb_req_local_run() and kb_req_local_cancel() so that a done callback releasing
 * the creator's reference cannot free the request under them.
 */
#include "kb_net.h"

#include <stdlib.h>
#include <string.h>

#include "kb_err.h"
#include "kb_log.h"
#include "kb_net_int.h"
#include "kb_time.h"
#include "kp_msgs.h"

/* Call the done callback unless it already ran. Takes @p resp (may be NULL). */
static void kb_req_local_finish(kb_req_t *req, int status, kb_resp_t *resp)
{
    uint8_t *body = NULL;
    size_t len = 0;

    if (atomic_exchange(&req->finished, true)) {
        kb_resp_free(resp);
        return;
    }
    if (status == 0 && resp) {
        int rc = kb_resp_flatten(resp, &body, &len);
        if (rc != 0) {
            kb_log_warn("net", "%s: cannot copy the %s response: %s", req->ctx.peer,
                        kp_api_lookup(req->ctx.api_key)->name, kb_err_str(rc));
            status = rc;
        }
    }
    kb_resp_free(resp); /* releases file segments now, not when the request is freed */
    req->done(req->done_opaque, status, body, len);
}

/* The status a cancelled request finishes with. */
static int kb_req_local_cancelled(kb_req_t *req)
{
    int st = atomic_load(&req->cancel_status);
    return st ? st : KB_E_CANCELLED;
}

void kb_req_local_free(kb_req_t *req)
{
    free(req->strs);
    req->strs = NULL;
}

/* Copy the four strings into one block; *out[i] point into it (NULL stays NULL). */
static char *kb_req_local_strs(const char *const in[4], const char *out[4])
{
    size_t n = 0, o = 0;
    char *blk;
    for (int i = 0; i < 4; i++)
        n += in[i] ? strlen(in[i]) + 1 : 0;
    blk = malloc(n ? n : 1);
    if (!blk)
        return NULL;
    for (int i = 0; i < 4; i++) {
        out[i] = NULL;
        if (!in[i])
            continue;
        memcpy(blk + o, in[i], strlen(in[i]) + 1);
        out[i] = blk + o;
        o += strlen(in[i]) + 1;
    }
    return blk;
}

kb_req_t *kb_req_local_new(kb_api_registry_t *reg, const kb_req_local_conf_t *conf,
                           const uint8_t *body, size_t len, int *errp)
{
    const char *in[4], *s[4];
    kb_api_range_t range;
    kp_RequestHeader_t hdr;
    kp_writer_t wr;
    kp_reader_t rd;
    kb_req_t *req;
    int16_t hv;
    int err = KB_E_NOMEM;
    uint8_t *frame;
    size_t flen;

    if (!reg || !conf || !conf->done || (!body && len)) {
        err = KB_E_INVALID;
        goto fail;
    }
    if (kb_api_get(reg, conf->api_key, &range) != 0 || conf->api_version < range.min_ver ||
        conf->api_version > range.max_ver) {
        err = KB_E_UNSUPPORTED;
        goto fail;
    }
    hv = kp_request_header_version(conf->api_key, conf->api_version);
    if (hv < 0) {
        err = KB_E_UNSUPPORTED;
        goto fail;
    }

    /* The frame as a client would send it, without the size prefix. */
    kp_writer_init(&wr);
    kp_RequestHeader_init(&hdr);
    hdr.RequestApiKey = conf->api_key;
    hdr.RequestApiVersion = conf->api_version;
    hdr.CorrelationId = conf->correlation_id;
    hdr.ClientId = conf->client_id ? (kp_str_t){conf->client_id, (int32_t)strlen(conf->client_id)}
                                   : (kp_str_t){NULL, -1};
    if (kp_RequestHeader_encode(&wr, &hdr, hv) != 0) {
        kp_writer_free(&wr);
        err = KB_E_PARSE;
        goto fail;
    }
    if (len)
        kp_write_raw(&wr, body, len);
    frame = wr.err ? NULL : kp_writer_steal(&wr, &flen);
    kp_writer_free(&wr);
    if (!frame)
        goto fail;

    req = calloc(1, sizeof(*req));
    in[0] = conf->client_id;
    in[1] = conf->listener ? conf->listener : "";
    in[2] = conf->peer ? conf->peer : "local";
    in[3] = conf->principal ? conf->principal : "User:ANONYMOUS";
    if (!req || !(req->strs = kb_req_local_strs(in, s))) {
        free(req);
        free(frame);
        goto fail;
    }
    req->magic = KB_REQ_MAGIC;
    atomic_init(&req->refcnt, 1); /* the creator's */
    atomic_init(&req->state, KB_RS_RUNNING);
    atomic_init(&req->finished, false);
    atomic_init(&req->cancel_status, 0);
    req->reg = reg;
    req->done = conf->done;
    req->done_opaque = conf->done_opaque;
    req->buf = frame;
    req->len = flen;
    req->api_flags = range.flags;
    kp_arena_init(&req->arena, flen * 32 + (1u << 20));
    kp_reader_init(&rd, frame, flen);
    if (kp_RequestHeader_decode(&rd, &req->arena, &hdr, hv) != 0) {
        kb_req_unref(req); /* never run: no done callback */
        err = KB_E_PARSE;
        goto fail;
    }
    req->ctx.conn_id = 0;
    req->ctx.listener = s[1];
    req->ctx.peer = s[2];
    req->ctx.principal = s[3];
    req->ctx.api_key = conf->api_key;
    req->ctx.api_version = conf->api_version;
    req->ctx.correlation_id = conf->correlation_id;
    req->ctx.client_id = hdr.ClientId;
    req->ctx.hdr_version = hv;
    req->ctx.resp_hdr_version = kp_response_header_version(conf->api_key, conf->api_version);
    req->ctx.flexible = kp_api_flexible(kp_api_lookup(conf->api_key), conf->api_version);
    kp_reader_init(&req->ctx.body, frame + rd.pos, flen - rd.pos);
    req->ctx.arena = &req->arena;
    req->ctx.frame = frame;
    req->ctx.frame_len = flen;
    req->ctx.recv_ns = kb_time_mono_ns();
    if (errp)
        *errp = 0;
    return req;
fail:
    if (errp)
        *errp = err;
    return NULL;
}

void kb_req_local_run(kb_req_t *req)
{
    kb_api_result_t res = KB_API_CLOSE;
    kb_resp_t *resp = NULL;
    kb_api_call_t call;
    const char *name;
    int exp = KB_RS_RUNNING, st;

    if (req->magic != KB_REQ_MAGIC || req->conn) {
        kb_log_error("net", "kb_req_local_run: not a local request (%p)", (void *)req);
        return;
    }
    name = kp_api_lookup(req->ctx.api_key)->name;
    atomic_fetch_add(&req->refcnt, 1); /* ours, while we look at the request */
    if (atomic_load(&req->state) != KB_RS_RUNNING) {
        /* cancelled before it ran */
        kb_req_local_finish(req, kb_req_local_cancelled(req), NULL);
        kb_req_unref(req);
        return;
    }
    if (kb_api_call_begin(req->reg, req->ctx.api_key, &call) != 0) {
        if (atomic_compare_exchange_strong(&req->state, &exp, KB_RS_DONE))
            kb_req_local_finish(req, KB_E_UNSUPPORTED, NULL);
        else
            kb_req_local_finish(req, kb_req_local_cancelled(req), NULL);
        kb_req_unref(req);
        return;
    }
    res = call.fn(call.opaque, req, &resp);
    kb_api_call_end(req->reg, &call);

    st = atomic_load(&req->state);
    if (res == KB_API_DEFERRED && st == KB_RS_RUNNING) {
        kb_log_error("net", "handler of %s returned DEFERRED without kb_req_defer()", name);
        res = KB_API_CLOSE;
    } else if (res == KB_API_RESPOND && !resp) {
        kb_log_error("net", "handler of %s returned RESPOND without a response", name);
        res = KB_API_CLOSE;
    }
    if (res != KB_API_RESPOND) {
        kb_resp_free(resp);
        resp = NULL;
    }
    if (st == KB_RS_DEFERRED || st == KB_RS_DONE) {
        /* Deferred (maybe completed already): kb_req_complete() or a cancel finishes it. */
        if (res != KB_API_DEFERRED)
            kb_log_error("net", "handler of %s deferred its request and also returned a result",
                         name);
        kb_resp_free(resp);
    } else if (st == KB_RS_CANCELLED) {
        kb_resp_free(resp);
        kb_req_local_finish(req, kb_req_local_cancelled(req), NULL);
    } else if (atomic_compare_exchange_strong(&req->state, &exp, KB_RS_DONE)) {
        kb_req_local_finish(req, res == KB_API_CLOSE ? KB_E_PARSE : 0, resp);
    } else {
        /* cancelled between the load and the exchange */
        kb_resp_free(resp);
        kb_req_local_finish(req, kb_req_local_cancelled(req), NULL);
    }
    kb_req_unref(req);
}

int kb_req_local_complete(kb_req_t *req, kb_resp_t *resp, bool close_conn)
{
    int exp = KB_RS_DEFERRED;
    if (atomic_compare_exchange_strong(&req->state, &exp, KB_RS_DONE)) {
        kb_req_local_finish(req, close_conn ? KB_E_PARSE : 0, resp);
        kb_req_unref(req); /* the owner's reference */
        return 0;
    }
    kb_resp_free(resp);
    if (exp == KB_RS_CANCELLED) {
        /* As for a socket request: with a cancel callback the canceller drops the owner's
         * reference after it; without one, this call does. */
        if (!req->cancel)
            kb_req_unref(req);
        return KB_E_CANCELLED;
    }
    kb_log_error("net", "kb_req_complete on a local request that is not deferred (state %d)", exp);
    return KB_E_STATE;
}

int kb_req_local_cancel(kb_req_t *req, int status)
{
    int exp = KB_RS_RUNNING, zero = 0, rc = KB_E_STATE;

    if (req->magic != KB_REQ_MAGIC || req->conn || status == 0)
        return KB_E_INVALID;
    atomic_fetch_add(&req->refcnt, 1); /* ours, while the owner's may go */
    /* The first canceller's status wins; set before the state change so that whoever sees
     * CANCELLED also sees it. */
    atomic_compare_exchange_strong(&req->cancel_status, &zero, status);
    if (atomic_compare_exchange_strong(&req->state, &exp, KB_RS_CANCELLED)) {
        rc = 0; /* the handler is running: kb_req_local_run() finishes it */
    } else if (exp == KB_RS_DEFERRED &&
               atomic_compare_exchange_strong(&req->state, &exp, KB_RS_CANCELLED)) {
        if (req->cancel) {
            req->cancel(req->cancel_opaque, req);
            kb_req_unref(req); /* the owner's reference */
        }
        kb_req_local_finish(req, kb_req_local_cancelled(req), NULL);
        rc = 0;
    }
    kb_req_unref(req);
    return rc;
}

void kb_req_local_release(kb_req_t *req)
{
    if (!req)
        return;
    if (req->magic != KB_REQ_MAGIC || req->conn) {
        kb_log_error("net", "kb_req_local_release: not a local request (%p)", (void *)req);
        return;
    }
    kb_req_unref(req);
}
