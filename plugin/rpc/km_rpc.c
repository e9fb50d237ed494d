#define KM_LOG_COMPONENT "kmirror.rpc"
#include "rpc/km_rpc.h"

#include <stdio.h>
#include <string.h>

#include "catalog/km_catalog.h"
#include "coord/km_coord.h"
#include "core/km_plugin_types.h"
#include "kp_errcode.h"
#include "kp_msg.h"
#include "rpc/km_rpc_int.h"
#include "rpc/km_srcadm.h"
#include "state/km_state.h"
#include "util/km_log.h"
#include "util/km_mem.h"

#define KM_RPC_MAGIC 0x4b4d5250u /* "KMRP" */

/* Every mirror response starts with these three fields (checked below), so one helper can
 * build the top-level error answer of any of them. */
typedef struct km_rpc_resp_head {
    int32_t ThrottleTimeMs;
    int16_t ErrorCode;
    kp_str_t ErrorMessage;
} km_rpc_resp_head_t;

#define KM_RPC_HEAD_CHECK(T)                                                                       \
    _Static_assert(offsetof(T, ThrottleTimeMs) == offsetof(km_rpc_resp_head_t, ThrottleTimeMs) &&  \
                       offsetof(T, ErrorCode) == offsetof(km_rpc_resp_head_t, ErrorCode) &&        \
                       offsetof(T, ErrorMessage) == offsetof(km_rpc_resp_head_t, ErrorMessage),    \
                   #T " does not start with the common response head")
KM_RPC_HEAD_CHECK(kp_CreateMirrorResponse_t);
KM_RPC_HEAD_CHECK(kp_ListMirrorsResponse_t);
KM_RPC_HEAD_CHECK(kp_DescribeMirrorsResponse_t);
KM_RPC_HEAD_CHECK(kp_DeleteMirrorResponse_t);
KM_RPC_HEAD_CHECK(kp_StartMirrorTopicsResponse_t);
KM_RPC_HEAD_CHECK(kp_StopMirrorTopicsResponse_t);
KM_RPC_HEAD_CHECK(kp_PauseMirrorTopicsResponse_t);
KM_RPC_HEAD_CHECK(kp_ResumeMirrorTopicsResponse_t);

/* Kafka's ACL numbering. */
#define KM_RPC_RESOURCE_CLUSTER 4

/* ---- requests ---------------------------------------------------------------------------- */

static km_rpc_t *km_rpc_of(km_plugin_t *cm)
{
    return &cm->rpc;
}

void km_rpc_req_hold(km_rpc_req_t *req)
{
    km_rpc_t *rpc = km_rpc_of(req->cm);

    pthread_mutex_lock(&rpc->lock);
    req->refs++;
    pthread_mutex_unlock(&rpc->lock);
}

static void km_rpc_req_free(km_rpc_req_t *req)
{
    km_plugin_t *cm = req->cm;

    if (req->st_free != NULL)
        req->st_free(req);
    kp_arena_free(&req->ar);
    km_free(cm, req->body);
    km_free(cm, req->principal);
    km_free(cm, req->client_host);
    req->magic = 0;
    km_free(cm, req);
}

void km_rpc_req_release(km_rpc_req_t *req)
{
    km_rpc_t *rpc = km_rpc_of(req->cm);
    int left;

    pthread_mutex_lock(&rpc->lock);
    left = --req->refs;
    pthread_mutex_unlock(&rpc->lock);
    if (left == 0)
        km_rpc_req_free(req);
}

bool km_rpc_req_done(km_rpc_req_t *req)
{
    km_rpc_t *rpc = km_rpc_of(req->cm);
    bool done;

    pthread_mutex_lock(&rpc->lock);
    done = req->completed || req->cancelled;
    pthread_mutex_unlock(&rpc->lock);
    return done;
}

bool km_rpc_stopping(km_plugin_t *cm)
{
    return atomic_load(&cm->rpc.stopping);
}

static const kp_api_info_t *km_rpc_api(int16_t key)
{
    return kp_api_lookup(key);
}

/* An internal request's answer: to its done callback, once; drops the reference a client
 * request's token holds. */
static void km_rpc_internal_finish(km_rpc_req_t *req, int32_t status, const uint8_t *body,
                                   size_t len)
{
    km_rpc_t *rpc = km_rpc_of(req->cm);
    bool first;

    if (req->dropping)
        status = KBX_ERR_SHUTDOWN;
    pthread_mutex_lock(&rpc->lock);
    first = !req->completed;
    req->completed = true;
    pthread_mutex_unlock(&rpc->lock);
    if (!first)
        return;
    req->done(req->cm, req->done_arg, status, status == KBX_OK ? body : NULL,
              status == KBX_OK ? len : 0);
    km_rpc_req_release(req);
}

/* Hand bytes to the host unless the client went away or it was sent already. */
static void km_rpc_send(km_rpc_req_t *req, const uint8_t *bytes, size_t len)
{
    km_plugin_t *cm = req->cm;
    km_rpc_t *rpc = km_rpc_of(cm);
    bool drop_ref = false;

    if (req->internal) {
        km_rpc_internal_finish(req, bytes != NULL ? KBX_OK : KBX_ERR_INVALID, bytes, len);
        return;
    }

    pthread_mutex_lock(&rpc->lock);
    if (!req->completed && !req->cancelled) {
        req->completed = true;
        /* Under the lock: the host's cancel can then never run after we decided to send. */
        cm->ref.api->complete_response(cm->ref.host, req->token, bytes, len);
        req->token = NULL;
        drop_ref = true;
    }
    pthread_mutex_unlock(&rpc->lock);
    if (drop_ref)
        km_rpc_req_release(req);
}

void km_rpc_complete(km_rpc_req_t *req, const void *resp)
{
    const kp_api_info_t *api = km_rpc_api(req->api_key);
    kp_writer_t wr;

    if (km_rpc_req_done(req))
        return;
    kp_writer_init(&wr);
    if (api == NULL || kp_msg_encode(api->resp, &wr, resp, req->api_version) != 0 || wr.err) {
        kp_writer_free(&wr);
        km_log_error(req->cm, "cannot encode the %s response (v%d)", api != NULL ? api->name : "?",
                     (int)req->api_version);
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "the broker could not encode its answer");
        return;
    }
    km_rpc_send(req, wr.buf, wr.len);
    kp_writer_free(&wr);
}

void km_rpc_fail(km_rpc_req_t *req, int16_t error_code, const char *fmt, ...)
{
    const kp_api_info_t *api = km_rpc_api(req->api_key);
    char msg[512];
    km_rpc_resp_head_t *head;
    void *resp;
    kp_writer_t wr;
    va_list ap;

    if (km_rpc_req_done(req))
        return;
    if (req->raw) { /* a plain host request has no answer of its own to encode */
        km_rpc_internal_finish(req, KBX_ERR_SHUTDOWN, NULL, 0);
        return;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (req->api_key == 32 || req->api_key == 44) { /* per-resource errors only */
        km_log_debug(req->cm, "%s answered %d: %s", api != NULL ? api->name : "?", (int)error_code,
                     msg);
        km_rpc_mconf_fail(req, error_code, msg);
        return;
    }
    /* A fresh arena: this may run when the request's arena is full. */
    {
        kp_arena_t ar;
        kp_arena_init(&ar, 1u << 20);
        resp = api != NULL ? kp_arena_calloc(&ar, 1, api->resp->struct_size) : NULL;
        if (resp == NULL) {
            kp_arena_free(&ar);
            km_log_error(req->cm, "cannot build an error answer for API %d", (int)req->api_key);
            km_rpc_send(req, NULL, 0); /* the host closes on a malformed answer */
            return;
        }
        kp_msg_init(api->resp, resp);
        head = resp;
        head->ErrorCode = error_code;
        head->ErrorMessage.ptr = msg;
        head->ErrorMessage.len = (int32_t)strlen(msg);
        kp_writer_init(&wr);
        kp_msg_encode(api->resp, &wr, resp, req->api_version);
        kp_arena_free(&ar);
    }
    km_log_debug(req->cm, "%s answered %d: %s", api->name, (int)error_code, msg);
    km_rpc_send(req, wr.err ? NULL : wr.buf, wr.err ? 0 : wr.len);
    kp_writer_free(&wr);
}

kp_str_t km_rpc_str(km_rpc_req_t *req, const char *s)
{
    kp_str_t k = {NULL, -1};
    size_t n;
    char *p;

    if (s == NULL)
        return k;
    n = strlen(s);
    p = kp_arena_alloc(&req->ar, n + 1);
    if (p == NULL)
        return k;
    memcpy(p, s, n + 1);
    k.ptr = p;
    k.len = (int32_t)n;
    return k;
}

kp_str_t km_rpc_strf(km_rpc_req_t *req, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return km_rpc_str(req, buf);
}

char *km_rpc_cstr(km_rpc_req_t *req, kp_str_t s)
{
    char *p;

    if (s.len < 0 || s.ptr == NULL)
        return NULL;
    p = kp_arena_alloc(&req->ar, (size_t)s.len + 1);
    if (p == NULL)
        return NULL;
    memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = '\0';
    return p;
}

bool km_rpc_authorized(km_rpc_req_t *req, int32_t operation)
{
    km_plugin_t *cm = req->cm;

    if (req->internal)
        return true; /* the broker itself (km_rpc_internal) */
    return cm->ref.api->authorize(cm->ref.host, req->principal, req->client_host,
                                  KM_RPC_RESOURCE_CLUSTER, "kafka-cluster",
                                  operation) == KBX_AUTHZ_ALLOWED;
}

/* ---- host operations continued on the loop ------------------------------------------------ */

typedef struct km_rpc_call {
    km_rpc_req_t *req;
    km_rpc_cont_fn cont;
    int32_t tag;
    int32_t status;
    uint8_t *body;
    size_t len;
    kbx_timer_t *timer; /* km_rpc_after: cancelled (freed) on the loop */
} km_rpc_call_t;

static void km_rpc_async_end(km_rpc_t *rpc)
{
    km_plugin_t *cm = rpc->cm;

    if (atomic_fetch_sub(&rpc->async_inflight, 1) == 1)
        cm->ref.api->latch_set(cm->ref.host, rpc->idle_latch);
}

bool km_rpc_host_op_begin(km_plugin_t *cm)
{
    km_rpc_t *rpc = &cm->rpc;

    /* As km_rpc_call_new: count first, then look at the flag. */
    atomic_fetch_add(&rpc->async_inflight, 1);
    if (atomic_load(&rpc->stopping)) {
        km_rpc_async_end(rpc);
        return false;
    }
    return true;
}

void km_rpc_host_op_end(km_plugin_t *cm)
{
    km_rpc_async_end(&cm->rpc);
}

static void km_rpc_call_run(km_plugin_t *cm, void *arg)
{
    km_rpc_call_t *call = arg;
    km_rpc_req_t *req = call->req;

    if (call->timer != NULL)
        cm->ref.api->timer_cancel(cm->ref.host, call->timer);
    if (!km_rpc_req_done(req)) {
        /* The body moves into the request's arena: what a continuation decodes from it
         * (string views) may be kept until the answer is sent. */
        const uint8_t *body = NULL;
        int32_t status = call->status;
        if (call->body != NULL && call->len > 0) {
            uint8_t *copy = kp_arena_alloc(&req->ar, call->len);
            if (copy == NULL)
                status = KBX_ERR_NOMEM;
            else
                memcpy(copy, call->body, call->len);
            body = copy;
        }
        call->cont(req, status, status == call->status ? body : NULL,
                   status == call->status ? call->len : 0, call->tag);
    }
    km_free(cm, call->body);
    km_free(cm, call);
    km_rpc_req_release(req);
}

static void km_rpc_call_drop(km_plugin_t *cm, void *arg)
{
    km_rpc_call_t *call = arg;
    km_rpc_req_t *req = call->req;

    if (call->timer != NULL)
        cm->ref.api->timer_cancel(cm->ref.host, call->timer);
    req->dropping = true;
    km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "the broker is shutting down");
    km_free(cm, call->body);
    km_free(cm, call);
    km_rpc_req_release(req);
}

static void km_rpc_call_post(km_rpc_call_t *call)
{
    km_rpc_req_t *req = call->req;
    km_plugin_t *cm = req->cm;

    if (km_coord_post(&cm->coord, km_rpc_call_run, km_rpc_call_drop, call) == KM_ERR_NOMEM) {
        km_log_error(cm, "out of memory continuing a request");
        km_rpc_call_drop(cm, call);
    }
}

/* kbx_response_fn: copy the body and continue on the loop. @thread host */
static void km_rpc_on_response(void *arg, int32_t status, const uint8_t *body, size_t len)
{
    km_rpc_call_t *call = arg;
    km_plugin_t *cm = call->req->cm;

    call->status = status;
    if (status == KBX_OK && body != NULL && len > 0) {
        call->body = km_malloc(cm, len);
        if (call->body == NULL)
            call->status = KBX_ERR_NOMEM;
        else {
            memcpy(call->body, body, len);
            call->len = len;
        }
    }
    km_rpc_call_post(call);
    km_rpc_async_end(&cm->rpc);
}

static void km_rpc_on_done(void *arg, int32_t status)
{
    km_rpc_call_t *call = arg;
    km_plugin_t *cm = call->req->cm;

    call->status = status;
    km_rpc_call_post(call);
    km_rpc_async_end(&cm->rpc);
}

static void km_rpc_on_timer(void *arg)
{
    km_rpc_on_done(arg, KBX_OK);
}

/* Count the operation in flight before checking the stop flag: km_rpc_stop sets the flag and
 * then waits for the count to drop to zero, so either it waits for this operation or this sees
 * the flag (both are sequentially consistent atomics). */
static km_rpc_call_t *km_rpc_call_new(km_rpc_req_t *req, km_rpc_cont_fn cont, int32_t tag,
                                      int32_t *rc)
{
    km_rpc_t *rpc = &req->cm->rpc;
    km_rpc_call_t *call;

    atomic_fetch_add(&rpc->async_inflight, 1);
    if (atomic_load(&rpc->stopping)) {
        km_rpc_async_end(rpc);
        *rc = KBX_ERR_SHUTDOWN;
        return NULL;
    }
    call = km_calloc(req->cm, 1, sizeof(*call));
    if (call == NULL) {
        km_rpc_async_end(rpc);
        *rc = KBX_ERR_NOMEM;
        return NULL;
    }
    call->req = req;
    call->cont = cont;
    call->tag = tag;
    km_rpc_req_hold(req);
    return call;
}

static void km_rpc_call_abort(km_rpc_call_t *call)
{
    km_rpc_req_t *req = call->req;
    km_plugin_t *cm = req->cm;

    km_free(cm, call);
    km_rpc_async_end(&cm->rpc);
    km_rpc_req_release(req);
}

static int32_t km_rpc_encode(const kp_msg_desc_t *desc, const void *msg, int16_t ver,
                             kp_writer_t *wr)
{
    kp_writer_init(wr);
    if (kp_msg_encode(desc, wr, msg, ver) != 0 || wr->err) {
        kp_writer_free(wr);
        return KBX_ERR_INVALID;
    }
    return KBX_OK;
}

int32_t km_rpc_local_request(km_rpc_req_t *req, int16_t api_key, int16_t api_version,
                             const void *msg, const kp_msg_desc_t *desc, km_rpc_cont_fn cont,
                             int32_t tag)
{
    return km_rpc_broker_request(req, INT32_MIN, api_key, api_version, msg, desc, cont, tag);
}

int32_t km_rpc_broker_request(km_rpc_req_t *req, int32_t broker_id, int16_t api_key,
                              int16_t api_version, const void *msg, const kp_msg_desc_t *desc,
                              km_rpc_cont_fn cont, int32_t tag)
{
    km_plugin_t *cm = req->cm;
    const kbx_api_t *api = cm->ref.api;
    km_rpc_call_t *call;
    kp_writer_t wr;
    int32_t rc;

    if (km_rpc_stopping(cm))
        return KBX_ERR_SHUTDOWN;
    rc = km_rpc_encode(desc, msg, api_version, &wr);
    if (rc != KBX_OK)
        return rc;
    call = km_rpc_call_new(req, cont, tag, &rc);
    if (call == NULL) {
        kp_writer_free(&wr);
        return rc;
    }
    if (broker_id == INT32_MIN)
        rc = api->local_request(cm->ref.host, api_key, api_version, wr.buf, wr.len,
                                KM_RPC_OP_TIMEOUT_MS, km_rpc_on_response, call);
    else
        rc = api->broker_request(cm->ref.host, broker_id, api_key, api_version, wr.buf, wr.len,
                                 KM_RPC_OP_TIMEOUT_MS, km_rpc_on_response, call);
    kp_writer_free(&wr);
    if (rc != KBX_OK)
        km_rpc_call_abort(call);
    return rc;
}

int32_t km_rpc_controller_write(km_rpc_req_t *req, const kbx_record_t *const *records,
                                uint32_t count, km_rpc_cont_fn cont, int32_t tag)
{
    km_plugin_t *cm = req->cm;
    km_rpc_call_t *call;
    int32_t rc;

    if (km_rpc_stopping(cm))
        return KBX_ERR_SHUTDOWN;
    call = km_rpc_call_new(req, cont, tag, &rc);
    if (call == NULL)
        return rc;
    rc = cm->ref.api->controller_write(cm->ref.host, records, count, KM_RPC_OP_TIMEOUT_MS,
                                       km_rpc_on_done, call);
    if (rc != KBX_OK)
        km_rpc_call_abort(call);
    return rc;
}

int32_t km_rpc_after(km_rpc_req_t *req, int64_t delay_ms, km_rpc_cont_fn cont, int32_t tag)
{
    km_plugin_t *cm = req->cm;
    km_rpc_call_t *call;
    int32_t rc;

    if (km_rpc_stopping(cm))
        return KBX_ERR_SHUTDOWN;
    call = km_rpc_call_new(req, cont, tag, &rc);
    if (call == NULL)
        return rc;
    rc = cm->ref.api->timer_start(cm->ref.host, delay_ms, 0, km_rpc_on_timer, call, &call->timer);
    if (rc != KBX_OK)
        km_rpc_call_abort(call);
    return rc;
}

/* km_rpc_mirror_grace's continuation: the handler to run again travels in the request. */
static void km_rpc_mirror_again(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                                int32_t tag)
{
    (void)status;
    (void)body;
    (void)len;
    (void)tag;
    req->mirror_again(req);
}

bool km_rpc_mirror_grace(km_rpc_req_t *req, void (*handler)(km_rpc_req_t *req))
{
    if (req->mirror_waits >= KM_RPC_MIRROR_GRACE_MS / KM_RPC_MIRROR_GRACE_STEP_MS)
        return false;
    req->mirror_waits++;
    req->mirror_again = handler;
    return km_rpc_after(req, KM_RPC_MIRROR_GRACE_STEP_MS, km_rpc_mirror_again, 0) == KBX_OK;
}

#define KM_RPC_METADATA_VERSION 12

int32_t km_rpc_brokers_query(km_rpc_req_t *req, km_rpc_cont_fn cont, int32_t tag)
{
    kp_MetadataRequest_t rq;

    kp_MetadataRequest_init(&rq);
    rq.Topics.cnt = 0; /* brokers only */
    rq.AllowAutoTopicCreation = false;
    return km_rpc_local_request(req, 3, KM_RPC_METADATA_VERSION, &rq, &kp_MetadataRequest_desc,
                                cont, tag);
}

const int32_t *km_rpc_brokers_decode(km_rpc_req_t *req, int32_t status, const uint8_t *body,
                                     size_t len, size_t *n)
{
    km_plugin_t *cm = req->cm;
    kp_MetadataResponse_t resp;
    const int32_t *cat;
    int32_t *ids;
    kp_reader_t rd;
    size_t nc;

    *n = 0;
    if (status == KBX_OK) {
        kp_reader_init(&rd, body, len);
        kp_MetadataResponse_init(&resp);
        if (kp_MetadataResponse_decode(&rd, &req->ar, &resp, KM_RPC_METADATA_VERSION) == 0 &&
            resp.Brokers.cnt > 0) {
            ids = kp_arena_calloc(&req->ar, (size_t)resp.Brokers.cnt, sizeof(*ids));
            if (ids != NULL) {
                for (int32_t i = 0; i < resp.Brokers.cnt; i++)
                    ids[i] = resp.Brokers.v[i].NodeId;
                *n = (size_t)resp.Brokers.cnt;
                return ids;
            }
        }
    }
    km_log_warn(cm,
                "cannot list this cluster's brokers through Metadata (%s): using what the "
                "metadata listener reported",
                status == KBX_OK ? "unreadable answer" : "request failed");
    cat = km_catalog_brokers(&cm->catalog, &nc);
    ids = kp_arena_calloc(&req->ar, nc + 1, sizeof(*ids));
    if (ids == NULL)
        return NULL;
    if (nc > 0)
        memcpy(ids, cat, nc * sizeof(*ids));
    if (nc == 0) {
        ids[0] = cm->broker_id;
        nc = 1;
    }
    *n = nc;
    return ids;
}

/* ---- the host's callbacks --------------------------------------------------------------- */

static void km_rpc_req_run(km_plugin_t *cm, void *arg)
{
    km_rpc_req_t *req = arg;
    const kp_api_info_t *api = km_rpc_api(req->api_key);
    kp_reader_t rd;

    KM_CHECK_OBJ(cm, req, KM_RPC_REQ_MAGIC);
    cm->rpc.requests++;
    if (km_rpc_req_done(req))
        goto out;
    req->rq = api != NULL ? kp_arena_calloc(&req->ar, 1, api->req->struct_size) : NULL;
    if (req->rq == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        goto out;
    }
    kp_msg_init(api->req, req->rq);
    kp_reader_init(&rd, req->body, req->body_len);
    if (kp_msg_decode(api->req, &rd, &req->ar, req->rq, req->api_version) != 0 ||
        kp_reader_remaining(&rd) != 0) {
        km_rpc_fail(req, KP_ERR_INVALID_REQUEST, "malformed %s request: %s", api->name,
                    rd.errstr != NULL ? rd.errstr : "bytes left after the request");
        goto out;
    }
    req->rq_ok = true;
    switch (req->api_key) {
    case 32:
        km_rpc_describe_configs(req);
        break;
    case 44:
        km_rpc_alter_configs(req);
        break;
    case 97:
        km_rpc_create_mirror(req);
        break;
    case 98:
        km_rpc_list_mirrors(req);
        break;
    case 99:
        km_rpc_describe_mirrors(req);
        break;
    case 104:
        km_rpc_delete_mirror(req);
        break;
    case 95:
        km_rpc_start_topics(req);
        break;
    default:
        km_rpc_change_topics(req);
        break;
    }
out:
    km_rpc_req_release(req);
}

static void km_rpc_req_drop(km_plugin_t *cm, void *arg)
{
    km_rpc_req_t *req = arg;

    (void)cm;
    req->dropping = true;
    km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "the broker is shutting down");
    km_rpc_req_release(req);
}

static int32_t km_rpc_handle(void *plugin_ctx, const kbx_rpc_request_t *hreq, kbx_token_t *token,
                             void **token_ctx)
{
    km_plugin_t *cm = plugin_ctx;
    km_rpc_req_t *req;
    km_err_t err;

    KM_CHECK_PLUGIN(cm);
    req = km_calloc(cm, 1, sizeof(*req));
    if (req == NULL)
        return KBX_ERR_NOMEM;
    req->magic = KM_RPC_REQ_MAGIC;
    req->cm = cm;
    req->token = token;
    req->api_key = hreq->api_key;
    req->api_version = hreq->api_version;
    kp_arena_init(&req->ar, KM_RPC_ARENA_LIMIT);
    req->body = km_malloc(cm, hreq->body_len > 0 ? (size_t)hreq->body_len : 1);
    req->principal = km_strdup(cm, hreq->principal != NULL ? hreq->principal : "User:ANONYMOUS");
    req->client_host = km_strdup(cm, hreq->client_host != NULL ? hreq->client_host : "");
    if (req->body == NULL || req->principal == NULL || req->client_host == NULL) {
        km_rpc_req_free(req);
        return KBX_ERR_NOMEM;
    }
    if (hreq->body_len > 0)
        memcpy(req->body, hreq->body, (size_t)hreq->body_len);
    req->body_len = (size_t)hreq->body_len;
    req->refs = 2; /* the token and the post */
    *token_ctx = req;
    err = km_coord_post(&cm->coord, km_rpc_req_run, km_rpc_req_drop, req);
    if (err == KM_ERR_NOMEM) {
        km_rpc_req_free(req);
        return KBX_ERR_NOMEM;
    }
    /* KM_ERR_SHUTDOWN: the drop answered already. */
    return KBX_RPC_PENDING;
}

static void km_rpc_cancel(void *plugin_ctx, kbx_token_t *token, void *token_ctx)
{
    km_plugin_t *cm = plugin_ctx;
    km_rpc_req_t *req = token_ctx;
    km_rpc_t *rpc;
    bool drop_ref = false;

    KM_CHECK_PLUGIN(cm);
    KM_CHECK_OBJ(cm, req, KM_RPC_REQ_MAGIC);
    (void)token;
    rpc = km_rpc_of(cm);
    pthread_mutex_lock(&rpc->lock);
    if (!req->completed && !req->cancelled) {
        req->cancelled = true;
        req->token = NULL;
        drop_ref = true;
    }
    pthread_mutex_unlock(&rpc->lock);
    if (drop_ref)
        km_rpc_req_release(req);
}

#define KM_RPC_OPS(key)                                                                            \
    {                                                                                              \
        .struct_size = sizeof(kbx_rpc_ops_t), .api_key = (key), .min_version = 0,                  \
        .max_version = 0, .first_flexible_version = 0, .handle = km_rpc_handle,                    \
        .cancel = km_rpc_cancel,                                                                   \
    }

/* The MIRROR config resource of Kafka's config APIs (kbx 1.2; design M115). */
#define KM_RPC_CONFIG_OPS(key, minv, maxv, flexv)                                                  \
    {                                                                                              \
        .struct_size = sizeof(kbx_rpc_ops_t), .api_key = (key), .min_version = (minv),             \
        .max_version = (maxv), .first_flexible_version = (flexv), .handle = km_rpc_handle,         \
        .cancel = km_rpc_cancel, .config_resource_type = KP_CONFIG_RESOURCE_TYPE_MIRROR,           \
    }

static const kbx_rpc_ops_t km_rpc_ops[KM_RPC_NAPIS] = {
    KM_RPC_OPS(97),
    KM_RPC_OPS(98),
    KM_RPC_OPS(99),
    KM_RPC_OPS(95),
    KM_RPC_OPS(96),
    KM_RPC_OPS(102),
    KM_RPC_OPS(103),
    KM_RPC_OPS(104),
    KM_RPC_CONFIG_OPS(32, 1, 4, 4), /* DescribeConfigs */
    KM_RPC_CONFIG_OPS(44, 0, 1, 1), /* IncrementalAlterConfigs */
};

/* ---- internal requests (the plugin's own use of its handlers and of local_request) ---------- */

static km_rpc_req_t *km_rpc_internal_new(km_plugin_t *cm, int16_t api_key, km_rpc_done_fn done,
                                         void *arg)
{
    km_rpc_req_t *req = km_calloc(cm, 1, sizeof(*req));

    if (req == NULL)
        return NULL;
    req->magic = KM_RPC_REQ_MAGIC;
    req->cm = cm;
    req->api_key = api_key;
    req->api_version = 0;
    req->internal = true;
    req->done = done;
    req->done_arg = arg;
    kp_arena_init(&req->ar, KM_RPC_ARENA_LIMIT);
    req->principal = km_strdup(cm, "User:__kmirror");
    req->client_host = km_strdup(cm, "");
    if (req->principal == NULL || req->client_host == NULL) {
        km_rpc_req_free(req);
        return NULL;
    }
    return req;
}

km_err_t km_rpc_internal(km_plugin_t *cm, int16_t api_key, const void *msg,
                         const kp_msg_desc_t *desc, km_rpc_done_fn done, void *arg)
{
    const kp_api_info_t *api = km_rpc_api(api_key);
    km_rpc_req_t *req;
    kp_writer_t wr;
    km_err_t err;

    bool served = false;

    for (size_t i = 0; i < KM_RPC_NAPIS; i++)
        served = served || km_rpc_ops[i].api_key == api_key;
    if (km_rpc_stopping(cm))
        return KM_ERR_SHUTDOWN;
    if (!served || api == NULL || api->req != desc || km_rpc_encode(desc, msg, 0, &wr) != KBX_OK)
        return KM_ERR_INVALID;
    req = km_rpc_internal_new(cm, api_key, done, arg);
    if (req == NULL) {
        kp_writer_free(&wr);
        return KM_ERR_NOMEM;
    }
    req->body = km_malloc(cm, wr.len > 0 ? wr.len : 1);
    if (req->body == NULL) {
        kp_writer_free(&wr);
        km_rpc_req_free(req);
        return KM_ERR_NOMEM;
    }
    memcpy(req->body, wr.buf, wr.len);
    req->body_len = wr.len;
    kp_writer_free(&wr);
    req->refs = 2; /* the answer (in place of a token) and the post */
    err = km_coord_post(&cm->coord, km_rpc_req_run, km_rpc_req_drop, req);
    if (err == KM_ERR_NOMEM) {
        km_rpc_req_free(req);
        return KM_ERR_NOMEM;
    }
    return KM_OK; /* KM_ERR_SHUTDOWN: the drop answered done already */
}

static void km_rpc_raw_cont(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                            int32_t tag)
{
    (void)tag;
    km_rpc_internal_finish(req, status, body, len);
}

km_err_t km_rpc_host_request(km_plugin_t *cm, int16_t api_key, int16_t api_version, const void *msg,
                             const kp_msg_desc_t *desc, km_rpc_done_fn done, void *arg)
{
    km_rpc_req_t *req;
    int32_t rc;

    if (km_rpc_stopping(cm))
        return KM_ERR_SHUTDOWN;
    req = km_rpc_internal_new(cm, api_key, done, arg);
    if (req == NULL)
        return KM_ERR_NOMEM;
    req->raw = true;
    req->api_version = api_version;
    req->refs = 1; /* the answer; the host operation holds its own */
    rc = km_rpc_local_request(req, api_key, api_version, msg, desc, km_rpc_raw_cont, 0);
    if (rc != KBX_OK) {
        km_rpc_req_free(req);
        return rc == KBX_ERR_NOMEM      ? KM_ERR_NOMEM
               : rc == KBX_ERR_SHUTDOWN ? KM_ERR_SHUTDOWN
               : rc == KBX_ERR_INVALID  ? KM_ERR_INVALID
                                        : KM_ERR_HOST;
    }
    return KM_OK;
}

/* ---- the catalog binding: a deleted mirror's state is tombstoned on every broker ------------ */

static void km_rpc_tombstoned(km_plugin_t *cm, void *arg, int16_t err, const char *msg)
{
    char *name = arg;

    if (err != 0)
        km_log_warn(cm,
                    "mirror %s deleted: its __mirror_state records are not all tombstoned "
                    "on this broker yet: %s",
                    name, msg != NULL ? msg : "(no reason)");
    km_free(cm, name);
}

static void km_rpc_on_mirror(void *arg, const char *name, const km_mirror_def_t *def)
{
    km_plugin_t *cm = arg;
    char *copy;
    km_err_t err;

    if (def != NULL)
        return;
    /* The definition left the metadata (DeleteMirror through any broker): every broker
     * tombstones the mirror's records in the __mirror_state shards it leads. */
    copy = km_strdup(cm, name);
    if (copy == NULL) {
        km_log_error(cm, "mirror %s deleted: out of memory tombstoning its state", name);
        return;
    }
    err = km_state_delete_mirror(cm, name, km_rpc_tombstoned, copy);
    if (err != KM_OK) {
        if (err != KM_ERR_SHUTDOWN)
            km_log_warn(cm, "mirror %s deleted: cannot tombstone its state: %s", name,
                        km_err_str(err));
        km_free(cm, copy);
    }
}

static const km_catalog_ops_t km_rpc_catalog_ops = {
    .on_mirror = km_rpc_on_mirror,
};

/* ---- lifecycle ---------------------------------------------------------------------------- */

km_err_t km_rpc_start(km_plugin_t *cm, km_rpc_t *rpc, char *errstr, size_t errstr_size)
{
    const kbx_api_t *api = cm->ref.api;
    km_err_t err;
    int32_t rc;

    memset(rpc, 0, sizeof(*rpc));
    rpc->magic = KM_RPC_MAGIC;
    rpc->cm = cm;
    atomic_init(&rpc->stopping, false);
    atomic_init(&rpc->async_inflight, 0);
    if (pthread_mutex_init(&rpc->lock, NULL) != 0) {
        snprintf(errstr, errstr_size, "cannot create the RPC lock");
        return KM_ERR_HOST;
    }
    rpc->lock_ready = true;
    if (api->latch_create(cm->ref.host, &rpc->idle_latch) != KBX_OK) {
        snprintf(errstr, errstr_size, "cannot create the RPC latch");
        err = KM_ERR_NOMEM;
        goto fail;
    }
    err = km_srcadm_start(cm, &rpc->srcadm, errstr, errstr_size);
    if (err != KM_OK)
        goto fail;
    err = km_catalog_subscribe(&cm->catalog, &km_rpc_catalog_ops, cm);
    if (err != KM_OK) {
        snprintf(errstr, errstr_size, "cannot subscribe to the catalog: no slot left");
        goto fail;
    }
    for (size_t i = 0; i < KM_RPC_NAPIS; i++) {
        rc = api->rpc_register(cm->ref.host, &km_rpc_ops[i], cm, &rpc->regs[i]);
        if (rc != KBX_OK) {
            snprintf(errstr, errstr_size, "cannot register the handler of API key %d: %s",
                     (int)km_rpc_ops[i].api_key,
                     rc == KBX_ERR_EXISTS ? "another plugin serves it" : "host error");
            err = rc == KBX_ERR_NOMEM ? KM_ERR_NOMEM : KM_ERR_HOST;
            goto fail;
        }
    }
    return KM_OK;

fail:
    km_rpc_stop(rpc);
    km_rpc_destroy(rpc);
    return err;
}

void km_rpc_stop(km_rpc_t *rpc)
{
    km_plugin_t *cm = rpc->cm;
    const kbx_api_t *api;

    if (rpc->magic != KM_RPC_MAGIC || atomic_load(&rpc->stopping))
        return;
    api = cm->ref.api;
    for (size_t i = 0; i < KM_RPC_NAPIS; i++) {
        if (rpc->regs[i] != NULL)
            api->rpc_unregister(cm->ref.host, rpc->regs[i]);
        rpc->regs[i] = NULL;
    }
    atomic_store(&rpc->stopping, true);
    km_srcadm_stop(rpc->srcadm);
    /* Host operations still out call back (the host ends them at unload); their results go
     * to the loop, which answers the requests. */
    while (rpc->idle_latch != NULL && atomic_load(&rpc->async_inflight) > 0)
        api->latch_wait(cm->ref.host, rpc->idle_latch, 100);
}

void km_rpc_destroy(km_rpc_t *rpc)
{
    km_plugin_t *cm = rpc->cm;

    if (rpc->magic != KM_RPC_MAGIC)
        return;
    km_srcadm_destroy(rpc->srcadm);
    rpc->srcadm = NULL;
    if (rpc->idle_latch != NULL)
        cm->ref.api->latch_destroy(cm->ref.host, rpc->idle_latch);
    rpc->idle_latch = NULL;
    if (rpc->lock_ready)
        pthread_mutex_destroy(&rpc->lock);
    rpc->magic = 0;
}
