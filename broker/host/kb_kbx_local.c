/*
 * kb_kbx_local.c -- local_request and broker_request: a plugin's encoded Kafka request handed
 * to this broker's own handler registry, without a socket, as the broker's internal principal
 * (KB_PRINCIPAL_INTERNAL, which the API handlers treat as privileged: mirror.name in
 * CreateTopics/AlterConfigs, CreateTopics MirrorInfo, internal topics).
 *
 * Requests run one at a time on the host thread "kb-kbx-local": the host writes the request
 * header (v1 or v2 from the codec, client id "kbx-<plugin>", its own correlation ids), builds a
 * connection-less request (kb_req_t without a connection), calls the registered handler like a
 * handler thread does, flattens the response (memory and file segments) and calls the plugin's
 * callback with the body after the response header.
 *
 * Deferred handlers: broker/net completes a deferred request by waking the network thread of
 * its connection, which a connection-less request does not have. Until broker/net offers
 * connection-less requests (kb_req_t with a completion callback; see docs/broker.md), APIs
 * whose handlers wait (Fetch, JoinGroup, SyncGroup) are refused with KBX_ERR_UNSUPPORTED before
 * they run, and a handler of another API that defers anyway is cancelled at once (its cancel
 * callback runs, as for a client that went away) and the request fails the same way.
 *
 * broker_request: kbroker is a single broker, so the only broker it reaches is itself (served
 * like local_request); any other id is KBX_ERR_NOT_FOUND. Inter-broker channels come with
 * cluster mode.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb_host_int.h"
#include "kb_net.h"
#include "kb_net_int.h"
#include "kb_time.h"
#include "kp_msgs.h"

typedef struct kb_lreq_s {
    kb_hev_t ev;
    int16_t api_key, api_version;
    uint8_t *body;
    size_t len;
    int64_t deadline_ms; /**< -1: none */
    kbx_response_fn cb;
    void *arg;
    char peer[96];
    char client_id[96];
} kb_lreq_t;

/* APIs whose handlers defer their requests (see the file comment). */
static bool kb_lreq_may_defer(int16_t key)
{
    return key == KP_APIKEY_Fetch || key == KP_APIKEY_JoinGroup || key == KP_APIKEY_SyncGroup;
}

/* Copy a response's segments into one buffer (file segments are read with pread). */
static int kb_lreq_flatten(kb_resp_t *resp, uint8_t **out, size_t *outlen)
{
    size_t len = kb_resp_len(resp), o = 0;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return -1;
    for (kb_seg_t *s = resp->head; s; s = s->next) {
        if (s->kind == KB_SEG_MEM) {
            memcpy(buf + o, s->ptr, s->len);
        } else {
            size_t got = 0;
            while (got < s->len) {
                ssize_t n = pread(s->fd, buf + o + got, s->len - got, s->off + (off_t)got);
                if (n <= 0) {
                    free(buf);
                    return -1;
                }
                got += (size_t)n;
            }
        }
        o += s->len;
    }
    *out = buf;
    *outlen = o;
    return 0;
}

/* Run one request through the handler registry. Returns a KBX status; *resp_out (malloc'd)
 * holds the body on KBX_OK. */
static int32_t kb_lreq_dispatch(kb_host_t *h, kb_lreq_t *lr, uint8_t **resp_out, size_t *resp_len)
{
    kb_api_registry_t *reg = h->kb->reg;
    kb_api_range_t range;
    kp_RequestHeader_t hdr;
    kp_writer_t wr;
    kp_reader_t rd;
    kb_req_t *req;
    kb_resp_t *resp = NULL;
    kb_api_call_t call;
    kb_api_result_t res;
    int16_t hv;
    int32_t status;
    uint8_t *frame;
    size_t flen;

    if (kb_lreq_may_defer(lr->api_key)) {
        kb_hlog(KB_HLOG_WARN,
                "plugin %s: local request for API %d refused: its handler waits, "
                "and deferred handlers need a connection",
                lr->ev.owner->name, (int)lr->api_key);
        return KBX_ERR_UNSUPPORTED;
    }
    if (kb_api_get(reg, lr->api_key, &range) != 0 || lr->api_version < range.min_ver ||
        lr->api_version > range.max_ver)
        return KBX_ERR_UNSUPPORTED;
    hv = kp_request_header_version(lr->api_key, lr->api_version);
    if (hv < 0)
        return KBX_ERR_UNSUPPORTED;

    /* The frame as a client would send it (without the size prefix). */
    kp_writer_init(&wr);
    kp_RequestHeader_init(&hdr);
    hdr.RequestApiKey = lr->api_key;
    hdr.RequestApiVersion = lr->api_version;
    hdr.CorrelationId = atomic_fetch_add(&h->local_corr, 1);
    hdr.ClientId = (kp_str_t){lr->client_id, (int32_t)strlen(lr->client_id)};
    if (kp_RequestHeader_encode(&wr, &hdr, hv) != 0) {
        kp_writer_free(&wr);
        return KBX_ERR_INVALID;
    }
    kp_write_raw(&wr, lr->body, lr->len);
    if (wr.err) {
        kp_writer_free(&wr);
        return KBX_ERR_NOMEM;
    }
    frame = kp_writer_steal(&wr, &flen);
    kp_writer_free(&wr);
    if (!frame)
        return KBX_ERR_NOMEM;

    req = calloc(1, sizeof(*req));
    if (!req) {
        free(frame);
        return KBX_ERR_NOMEM;
    }
    req->magic = KB_REQ_MAGIC;
    atomic_init(&req->refcnt, 1); /* ours */
    atomic_init(&req->state, KB_RS_RUNNING);
    req->buf = frame;
    req->len = flen;
    req->api_flags = range.flags;
    kp_arena_init(&req->arena, flen * 32 + (1u << 20));
    kp_reader_init(&rd, frame, flen);
    if (kp_RequestHeader_decode(&rd, &req->arena, &hdr, hv) != 0) {
        status = KBX_ERR_INVALID;
        goto out;
    }
    req->ctx.conn_id = 0;
    req->ctx.listener = h->local_listener;
    req->ctx.peer = lr->peer;
    req->ctx.principal = KB_PRINCIPAL_INTERNAL;
    req->ctx.api_key = lr->api_key;
    req->ctx.api_version = lr->api_version;
    req->ctx.correlation_id = hdr.CorrelationId;
    req->ctx.client_id = hdr.ClientId;
    req->ctx.hdr_version = hv;
    req->ctx.resp_hdr_version = kp_response_header_version(lr->api_key, lr->api_version);
    req->ctx.flexible = kp_api_flexible(kp_api_lookup(lr->api_key), lr->api_version);
    kp_reader_init(&req->ctx.body, frame + rd.pos, flen - rd.pos);
    req->ctx.arena = &req->arena;
    req->ctx.frame = frame;
    req->ctx.frame_len = flen;
    req->ctx.recv_ns = kb_time_mono_ns();

    if (kb_api_call_begin(reg, lr->api_key, &call) != 0) {
        status = KBX_ERR_UNSUPPORTED;
        goto out;
    }
    res = call.fn(call.opaque, req, &resp);
    kb_api_call_end(reg, &call);

    if (res == KB_API_DEFERRED || atomic_load(&req->state) != KB_RS_RUNNING) {
        int exp = KB_RS_DEFERRED;
        kb_resp_free(resp);
        resp = NULL;
        kb_hlog(KB_HLOG_WARN,
                "plugin %s: the handler of API %d deferred a local request; "
                "cancelled (deferred local requests are not supported yet)",
                lr->ev.owner->name, (int)lr->api_key);
        if (atomic_compare_exchange_strong(&req->state, &exp, KB_RS_CANCELLED)) {
            if (req->cancel) {
                req->cancel(req->cancel_opaque, req);
                atomic_fetch_sub(&req->refcnt, 1); /* the owner's reference */
            } else {
                /* The owner completes it some day and then drops its reference; the request
                 * must outlive that, so it is leaked on purpose. */
                return KBX_ERR_UNSUPPORTED;
            }
        }
        status = KBX_ERR_UNSUPPORTED;
        goto out;
    }
    switch (res) {
    case KB_API_RESPOND:
        status = resp && kb_lreq_flatten(resp, resp_out, resp_len) == 0 ? KBX_OK : KBX_ERR_NOMEM;
        break;
    case KB_API_NO_RESPONSE:
        *resp_out = malloc(1);
        *resp_len = 0;
        status = *resp_out ? KBX_OK : KBX_ERR_NOMEM;
        break;
    default: /* KB_API_CLOSE: malformed or refused; a client's connection would be closed */
        status = KBX_ERR_INVALID;
        break;
    }
out:
    kb_resp_free(resp);
    kp_arena_free(&req->arena);
    free(req->buf);
    req->magic = 0;
    free(req);
    return status;
}

static void kb_lreq_run(kb_hq_t *q, kb_hev_t *ev, bool run)
{
    kb_lreq_t *lr = (kb_lreq_t *)ev;
    kbx_host_t *host = ev->owner;
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    int32_t status;
    (void)q;

    if (!run || atomic_load(&host->dead))
        status = KBX_ERR_SHUTDOWN;
    else if (lr->deadline_ms >= 0 && kb_host_now_ms() > lr->deadline_ms)
        status = KBX_ERR_TIMEOUT;
    else
        status = kb_lreq_dispatch(host->h, lr, &resp, &resp_len);
    if (!atomic_load(&host->dead))
        lr->cb(lr->arg, status, status == KBX_OK ? resp : NULL, status == KBX_OK ? resp_len : 0);
    atomic_fetch_sub(&host->n_ops, 1);
    free(resp);
    free(lr->body);
    free(lr);
}

static int32_t kb_kbx_request(kbx_host_t *host, int16_t api_key, int16_t api_version,
                              const uint8_t *body, size_t len, int64_t timeout_ms,
                              kbx_response_fn cb, void *arg)
{
    kb_lreq_t *lr;

    if (!cb || (!body && len) || api_key < 0 || api_version < 0)
        return KBX_ERR_INVALID;
    if (atomic_load(&host->dead))
        return KBX_ERR_SHUTDOWN;
    lr = calloc(1, sizeof(*lr));
    if (!lr)
        return KBX_ERR_NOMEM;
    lr->body = malloc(len ? len : 1);
    if (!lr->body) {
        free(lr);
        return KBX_ERR_NOMEM;
    }
    if (len)
        memcpy(lr->body, body, len);
    lr->len = len;
    lr->api_key = api_key;
    lr->api_version = api_version;
    lr->deadline_ms = timeout_ms < 0 ? -1 : kb_host_now_ms() + timeout_ms;
    lr->cb = cb;
    lr->arg = arg;
    snprintf(lr->peer, sizeof(lr->peer), "kbx:%s", host->name);
    snprintf(lr->client_id, sizeof(lr->client_id), "kbx-%s", host->name);
    lr->ev.fn = kb_lreq_run;
    lr->ev.owner = host;
    atomic_init(&lr->ev.ready, true);
    atomic_fetch_add(&host->n_ops, 1);
    kb_hq_push(&host->h->local, &lr->ev);
    return KBX_OK;
}

static int32_t kb_kbx_local_request(kbx_host_t *host, int16_t api_key, int16_t api_version,
                                    const uint8_t *body, size_t len, int64_t timeout_ms,
                                    kbx_response_fn cb, void *arg)
{
    if (!kb_host_from(host, "local_request"))
        return KBX_ERR_INVALID;
    return kb_kbx_request(host, api_key, api_version, body, len, timeout_ms, cb, arg);
}

static int32_t kb_kbx_broker_request(kbx_host_t *host, int32_t broker_id, int16_t api_key,
                                     int16_t api_version, const uint8_t *body, size_t len,
                                     int64_t timeout_ms, kbx_response_fn cb, void *arg)
{
    if (!kb_host_from(host, "broker_request"))
        return KBX_ERR_INVALID;
    if (broker_id != kb_meta_node_id(host->h->meta))
        return KBX_ERR_NOT_FOUND;
    return kb_kbx_request(host, api_key, api_version, body, len, timeout_ms, cb, arg);
}

void kb_kbx_local_fill(kbx_api_t *t)
{
    t->local_request = kb_kbx_local_request;
    t->broker_request = kb_kbx_broker_request;
}
