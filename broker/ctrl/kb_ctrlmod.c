/*
 * kb_ctrlmod.c -- the cluster control plane module (kb_ctrlmod.h): the controller's registration
 * and heartbeat handlers and session reaper, and a broker-only node's controller channel.
 *
 * Threads: "kb-ctrl" runs the reaper (controller) or drives the kc_ client (broker-only); it
 * waits on a condition variable or in kc_client_poll with a timeout, never sleeps. Handlers run
 * on handler threads and touch only the registry (its own mutex).
 */
#include "kb_ctrlmod.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kb_apilog.h"
#include "kb_apisvc.h"
#include "kb_ctrl_bump.h"
#include "kb_ctrl_elect_api.h"
#include "kb_ctrl_fwerr.h"
#include "kb_ctrl_reg.h"
#include "kb_ctrl_rules.h"
#include "kb_err.h"
#include "kb_net.h"
#include "kb_part.h"
#include "kb_props.h"
#ifdef KB_HAVE_REPL
#include "kb_replmod.h"
#endif
#include "kb_time.h"
#include "kc_client.h"
#include "kp_errcode.h"
#include "kp_msgs.h"

#define KB_CTRL_MAGIC   0x6b637472u /* "kctr" */
#define KB_CTRL_TICK_MS 100
/* Topics a broker-only node asks the controller to create at once (internal and auto-created
 * ones), and the longest topic name plus its NUL. */
#define KB_CTRL_ICR_SLOTS 16
#define KB_CTRL_ICR_NAME  250

typedef struct kb_ctrl_s {
    uint32_t magic;
    kb_broker_t *kb;
    const kb_config_t *cfg;
    kb_apisvc_t *svc;
    bool controller; /* this process is the controller */
    bool remote;     /* broker-only: the controller is another process */
    kb_ctrl_reg_t *reg;
    int64_t self_epoch; /* combined node: its own registration */

    pthread_t thr;
    bool thr_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;

    /* broker-only: the channel (state under mu; the kc_ clients are driven by "kb-ctrl"):
     * kc carries forwarded requests and the other calls, hkc registration and heartbeats. A
     * connection answers in order, so a heartbeat behind a forwarded CreateTopics of many
     * topics waited for all of them, timed out (2 x the interval) and the connection was
     * dropped with the forwarded request on it (scenario scale); on its own connection it is
     * answered while the controller works. */
    kc_client_t *kc;
    kc_client_t *hkc;
    kp_uuid_t incarnation;
    int64_t epoch; /* -1: not registered */
    bool inflight;
    bool want_shutdown, should_shutdown;
    bool fenced;
    int64_t next_ms;    /* when the next registration / heartbeat is due */
    int64_t last_ok_ms; /* last answer from the controller (-1 never) */
    bool reported_down;
    int16_t reg_version; /* BrokerRegistration version of the request in flight */
    kp_BrokerRegistrationRequest_t rq_reg;
    kp_BrokerRegistrationRequest_Listener_t rq_lst[KB_CTRL_MAX_ENDPOINTS];
    kp_BrokerHeartbeatRequest_t rq_hb;
    /* topics asked of the controller (internal ones, auto-created ones; under mu) */
    struct kb_ctrl_icr_slot_s {
        char name[KB_CTRL_ICR_NAME];
        bool busy;
        int64_t last_ms;
    } icr[KB_CTRL_ICR_SLOTS];

    /* controller: metadata-log fetches waiting for records (under mu) */
    struct kb_ctrl_mfetch_s *parked;
    kb_meta_listener_t *mlisten;
    bool meta_changed;
    int32_t assign_start;       /* replica striping start of the topic being created */
    bool reelect;               /* a broker was unfenced: offline partitions may get a leader */
    void *repl;                 /* the replica manager (kb_repl_t *) when linked, else NULL */
    kb_ctrl_elector_t *elector; /* ElectLeaders and automatic rebalancing (kb_ctrl_elect_api.h) */
    bool self_chan;             /* combined node: kc points at its own controller listener */

    /* broker-only: forwarded APIs and the handlers they replaced (used when the controller is
     * unreachable: kb_meta then answers NOT_CONTROLLER naming it) */
    size_t nfwd;
    struct {
        int16_t key;
        kb_api_handler_fn *fn;
        void *opaque;
    } fwd[12];

    /* broker-only: the metadata fetcher ("kb-ctrl-fetch", its own kc_ client so a long poll
     * never delays a heartbeat) */
    pthread_t fthr;
    bool fthr_started;
    kc_client_t *fkc;
    bool finflight;
    int64_t fnext_ms;
    bool fetch_reported;
    kp_FetchRequest_t rq_f;
    kp_FetchRequest_FetchTopic_t rq_ft;
    kp_FetchRequest_FetchPartition_t rq_fp;
} kb_ctrl_t;

/* A metadata-log Fetch waiting for records (controller). */
typedef struct kb_ctrl_mfetch_s {
    struct kb_ctrl_mfetch_s *next;
    kb_req_t *req;
    int16_t ver;
    kp_str_t topic;
    int64_t offset;
    int32_t max_bytes;
    int64_t deadline_ms;
} kb_ctrl_mfetch_t;

static int kb_ctrl_elect_all(kb_ctrl_t *ctl, int32_t gone);
static void kb_ctrl_repl_endpoints(kb_ctrl_t *ctl);

#define KB_CTRL_FETCH_WAIT_MS 500
#define KB_CTRL_FETCH_MAX     (8 << 20)

static kp_str_t kb_ctrl_view(const char *s)
{
    kp_str_t v = {.ptr = s, .len = (int32_t)strlen(s)};
    return v;
}

/* ---- the controller: handlers ------------------------------------------------------------- */

/* Controller APIs are served on the controller listeners only (all listeners when none is
 * named: a self-contained node). */
static bool kb_ctrl_listener_ok(const kb_ctrl_t *ctl, const kb_reqctx_t *ctx)
{
    const char *names = ctl->cfg->controller_listener_names;

    if (!names || !*names)
        return true;
    return kb_props_list_has(names, ctx->listener, true);
}

static int kb_ctrl_decode(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, void *msg)
{
    kp_msg_init(desc, msg);
    if (kp_msg_decode(desc, &ctx->body, ctx->arena, msg, ctx->api_version) != 0) {
        kb_log_info("ctrl", "%s: malformed %s v%d: %s", ctx->peer, desc->name, ctx->api_version,
                    ctx->body.errstr ? ctx->body.errstr : "?");
        return -1;
    }
    return 0;
}

static kb_api_result_t kb_ctrl_respond(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, const void *msg,
                                       kb_resp_t **respp)
{
    kp_writer_t wr;
    kp_writer_init(&wr);
    if (kp_msg_encode(desc, &wr, msg, ctx->api_version) != 0) {
        kb_log_error("ctrl", "cannot encode %s v%d", desc->name, ctx->api_version);
        kp_writer_free(&wr);
        return KB_API_CLOSE;
    }
    *respp = kb_resp_from_writer(&wr);
    kp_writer_free(&wr);
    return *respp ? KB_API_RESPOND : KB_API_CLOSE;
}

static kb_ctrl_t *kb_ctrl_check(void *opaque, kb_reqctx_t *ctx)
{
    kb_ctrl_t *ctl = opaque;
    if (!ctl || ctl->magic != KB_CTRL_MAGIC)
        return NULL;
    if (!kb_ctrl_listener_ok(ctl, ctx)) {
        const kp_api_info_t *api = kp_api_lookup(ctx->api_key);
        kb_log_info("ctrl",
                    "%s: %s on listener %s, which is not a controller listener "
                    "(controller.listener.names): connection closed",
                    ctx->peer, api ? api->name : "a controller API",
                    ctx->listener ? ctx->listener : "?");
        return NULL;
    }
    return ctl;
}

/* The registration of @p b as a RegisterBrokerRecord in the metadata log (every broker lists it
 * from there). */
static void kb_ctrl_commit_register(kb_ctrl_t *ctl, const kb_ctrl_broker_t *b)
{
    kb_mrec_t r;
    char msg[256];
    int16_t ec;
    kb_mrec_init(&r, KB_MREC_REGISTER_BROKER);
    r.broker_id = b->id;
    r.broker_epoch = b->epoch;
    r.incarnation = b->incarnation;
    r.fenced = 1;
    r.endpoints = calloc((size_t)b->nendpoints + 1, sizeof(*r.endpoints));
    r.rack = b->has_rack ? strdup(b->rack) : NULL;
    if (!r.endpoints) {
        kb_mrec_clear(&r);
        kb_log_error("ctrl", "out of memory recording broker %" PRId32, b->id);
        return;
    }
    for (int32_t i = 0; i < b->nendpoints && i < KB_MREC_MAX_ENDPOINTS; i++) {
        snprintf(r.endpoints[i].name, sizeof(r.endpoints[i].name), "%s", b->endpoints[i].name);
        snprintf(r.endpoints[i].host, sizeof(r.endpoints[i].host), "%s", b->endpoints[i].host);
        r.endpoints[i].port = b->endpoints[i].port;
        r.endpoints[i].security_protocol = b->endpoints[i].security_protocol;
        r.nendpoints++;
    }
    ec = kb_meta_commit_records(ctl->svc->meta, &r, 1, msg, sizeof(msg));
    if (ec)
        kb_log_error("ctrl", "cannot record the registration of broker %" PRId32 ": %s", b->id,
                     msg);
    kb_mrec_clear(&r);
}

/* BrokerRegistrationChangeRecord (fenced 1 / unfenced -1) or UnregisterBrokerRecord (0). */
static void kb_ctrl_commit_change(kb_ctrl_t *ctl, int32_t id, int8_t fenced, bool unregister)
{
    kb_mrec_t r;
    kb_ctrl_broker_t b;
    char msg[256];
    kb_mrec_init(&r, unregister ? KB_MREC_UNREGISTER_BROKER : KB_MREC_BROKER_CHANGE);
    r.broker_id = id;
    r.broker_epoch = kb_ctrl_reg_get(ctl->reg, id, &b) == 0 ? b.epoch : -1;
    r.fenced = fenced;
    if (kb_meta_commit_records(ctl->svc->meta, &r, 1, msg, sizeof(msg)) != 0)
        kb_log_error("ctrl", "cannot record a change of broker %" PRId32 ": %s", id, msg);
    kb_mrec_clear(&r);
}

static kb_api_result_t kb_ctrl_h_register(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kb_ctrl_t *ctl = kb_ctrl_check(opaque, ctx);
    kp_BrokerRegistrationRequest_t rq;
    kp_BrokerRegistrationResponse_t resp;
    kb_ctrl_broker_t b;
    const char *cid;

    if (!ctl || kb_ctrl_decode(ctx, &kp_BrokerRegistrationRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_BrokerRegistrationResponse_init(&resp);
    memset(&b, 0, sizeof(b));
    b.id = rq.BrokerId;
    b.incarnation = rq.IncarnationId;
    cid = kb_meta_cluster_id(ctl->svc->meta);
    if (rq.ClusterId.len != (int32_t)strlen(cid) ||
        memcmp(rq.ClusterId.ptr, cid, strlen(cid)) != 0) {
        kb_log_warn("ctrl", "broker %" PRId32 " (%s) registers for cluster %.*s, this is %s",
                    rq.BrokerId, ctx->peer, rq.ClusterId.len < 0 ? 0 : (int)rq.ClusterId.len,
                    rq.ClusterId.ptr ? rq.ClusterId.ptr : "", cid);
        resp.ErrorCode = KP_ERR_INCONSISTENT_CLUSTER_ID;
        return kb_ctrl_respond(ctx, &kp_BrokerRegistrationResponse_desc, &resp, respp);
    }
    if (rq.Listeners.cnt < 0 || rq.Listeners.cnt > KB_CTRL_MAX_ENDPOINTS) {
        resp.ErrorCode = KP_ERR_INVALID_REQUEST;
        return kb_ctrl_respond(ctx, &kp_BrokerRegistrationResponse_desc, &resp, respp);
    }
    for (int32_t i = 0; i < rq.Listeners.cnt; i++) {
        const kp_BrokerRegistrationRequest_Listener_t *l = &rq.Listeners.v[i];
        kb_ctrl_endpoint_t *e = &b.endpoints[b.nendpoints];
        if (l->Name.len <= 0 || (size_t)l->Name.len >= sizeof(e->name) || l->Host.len < 0 ||
            (size_t)l->Host.len >= sizeof(e->host) || memchr(l->Name.ptr, 0, (size_t)l->Name.len) ||
            (l->Host.len && memchr(l->Host.ptr, 0, (size_t)l->Host.len))) {
            resp.ErrorCode = KP_ERR_INVALID_REQUEST;
            return kb_ctrl_respond(ctx, &kp_BrokerRegistrationResponse_desc, &resp, respp);
        }
        for (int32_t k = 0; k < l->Name.len; k++)
            e->name[k] =
                (char)((l->Name.ptr[k] >= 'a' && l->Name.ptr[k] <= 'z') ? l->Name.ptr[k] - 'a' + 'A'
                                                                        : l->Name.ptr[k]);
        memcpy(e->host, l->Host.ptr, (size_t)l->Host.len);
        e->port = l->Port;
        e->security_protocol = l->SecurityProtocol;
        b.nendpoints++;
    }
    if (rq.Rack.len > 0 && (size_t)rq.Rack.len < sizeof(b.rack) &&
        !memchr(rq.Rack.ptr, 0, (size_t)rq.Rack.len)) {
        memcpy(b.rack, rq.Rack.ptr, (size_t)rq.Rack.len);
        b.has_rack = true;
    }
    /* Unfenced once it has applied the metadata log as far as it is now (Kafka's rule). */
    resp.ErrorCode = kb_ctrl_reg_register(ctl->reg, &b, rq.PreviousBrokerEpoch, kb_time_wall_ms(),
                                          kb_meta_offset(ctl->svc->meta), &resp.BrokerEpoch);
    if (resp.ErrorCode)
        kb_log_info("ctrl", "registration of broker %" PRId32 " (%s) refused: error %d",
                    rq.BrokerId, ctx->peer, resp.ErrorCode);
    else
        kb_log_info("ctrl", "broker %" PRId32 " registered from %s, broker epoch %" PRId64,
                    rq.BrokerId, ctx->peer, resp.BrokerEpoch);
    if (!resp.ErrorCode) {
        b.epoch = resp.BrokerEpoch;
        kb_ctrl_commit_register(ctl, &b);
        kb_ctrl_repl_endpoints(ctl);
    }
    return kb_ctrl_respond(ctx, &kp_BrokerRegistrationResponse_desc, &resp, respp);
}

static kb_api_result_t kb_ctrl_h_heartbeat(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kb_ctrl_t *ctl = kb_ctrl_check(opaque, ctx);
    kp_BrokerHeartbeatRequest_t rq;
    kp_BrokerHeartbeatResponse_t resp;
    kb_ctrl_hb_t hb;

    if (!ctl || kb_ctrl_decode(ctx, &kp_BrokerHeartbeatRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_BrokerHeartbeatResponse_init(&resp);
    resp.ErrorCode =
        kb_ctrl_reg_heartbeat(ctl->reg, rq.BrokerId, rq.BrokerEpoch, rq.CurrentMetadataOffset,
                              rq.WantFence, rq.WantShutDown, kb_time_wall_ms(), &hb);
    if (resp.ErrorCode == 0) {
        resp.IsCaughtUp = hb.caught_up;
        resp.IsFenced = hb.fenced;
        /* Controlled shutdown: leadership and ISR membership move away first; the broker may
         * go once it leads nothing. */
        resp.ShouldShutDown = hb.shutting_down && kb_ctrl_elect_all(ctl, rq.BrokerId) == 0;
        /* Told to go: fenced now (as Kafka's controller does), so the next incarnation may
         * register at once instead of waiting for this one's session to expire. */
        if (resp.ShouldShutDown && !hb.fenced) {
            kb_ctrl_hb_t fh;
            if (kb_ctrl_reg_heartbeat(ctl->reg, rq.BrokerId, rq.BrokerEpoch,
                                      rq.CurrentMetadataOffset, true, true, kb_time_wall_ms(),
                                      &fh) == 0 &&
                fh.fenced_now) {
                kb_log_info("ctrl", "broker %" PRId32 " fenced: controlled shutdown complete",
                            rq.BrokerId);
                kb_ctrl_commit_change(ctl, rq.BrokerId, 1, false);
                resp.IsFenced = true;
            }
        }
        if (hb.unfenced_now) {
            kb_log_info("ctrl", "broker %" PRId32 " unfenced", rq.BrokerId);
            kb_ctrl_commit_change(ctl, rq.BrokerId, -1, false);
            kb_ctrl_repl_endpoints(ctl);
            pthread_mutex_lock(&ctl->mu);
            ctl->reelect = true;
            pthread_cond_broadcast(&ctl->cv);
            pthread_mutex_unlock(&ctl->mu);
        }
        if (hb.fenced_now) {
            kb_log_info("ctrl", "broker %" PRId32 " fenced at its request", rq.BrokerId);
            kb_ctrl_commit_change(ctl, rq.BrokerId, 1, false);
            kb_ctrl_elect_all(ctl, rq.BrokerId);
        }
    }
    return kb_ctrl_respond(ctx, &kp_BrokerHeartbeatResponse_desc, &resp, respp);
}

static kb_api_result_t kb_ctrl_h_unregister(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_ctrl_t *ctl = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_UnregisterBrokerRequest_t rq;
    kp_UnregisterBrokerResponse_t resp;

    if (!ctl || ctl->magic != KB_CTRL_MAGIC ||
        kb_ctrl_decode(ctx, &kp_UnregisterBrokerRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_UnregisterBrokerResponse_init(&resp);
    resp.ErrorCode = kb_ctrl_reg_unregister(ctl->reg, rq.BrokerId);
    if (resp.ErrorCode) {
        resp.ErrorMessage = kb_ctrl_view("Broker id not registered.");
    } else {
        kb_log_info("ctrl", "broker %" PRId32 " unregistered by %s", rq.BrokerId, ctx->peer);
        kb_ctrl_commit_change(ctl, rq.BrokerId, 0, true);
    }
    return kb_ctrl_respond(ctx, &kp_UnregisterBrokerResponse_desc, &resp, respp);
}

/* ---- the broker list of Metadata / DescribeCluster ----------------------------------------- */

static int kb_ctrl_cluster(void *opaque, const char *listener, bool include_fenced,
                           kb_cluster_node_t **out, size_t *cnt, int32_t *controller_id)
{
    kb_ctrl_t *ctl = opaque;
    kb_meta_broker_t *list;
    kb_cluster_node_t *v;
    size_t n, k = 0, nlive = 0;

    /* The registrations in the metadata image: the same list on every node. */
    if (kb_meta_brokers(ctl->svc->meta, &list, &n) != 0)
        return -1;
    v = calloc(n + 1, sizeof(*v));
    if (!v) {
        free(list);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const kb_meta_broker_t *b = &list[i];
        const kb_mendpoint_t *e = NULL;
        if (b->fenced && !include_fenced)
            continue;
        for (int32_t j = 0; j < b->nendpoints && !e; j++)
            if (listener && !strcasecmp(b->endpoints[j].name, listener))
                e = &b->endpoints[j];
        if (!e)
            continue; /* no endpoint on this listener: clients of it cannot reach the broker */
        v[k].id = b->id;
        snprintf(v[k].host, sizeof(v[k].host), "%s", e->host);
        v[k].port = e->port;
        v[k].has_rack = b->has_rack;
        memcpy(v[k].rack, b->rack, sizeof(v[k].rack));
        v[k].fenced = b->fenced;
        nlive += !b->fenced;
        k++;
    }
    free(list);
    if (nlive == 0) {
        free(v);
        return -1; /* nobody registered on this listener yet: this broker alone */
    }
    /* KRaft brokers report a random live broker as the controller; clients send their admin
     * requests there and it forwards them. */
    {
        size_t pick = (size_t)(kb_time_mono_ns() / 1000) % nlive;
        *controller_id = -1;
        for (size_t i = 0; i < k; i++)
            if (!v[i].fenced && pick-- == 0)
                *controller_id = v[i].id;
    }
    *out = v;
    *cnt = k;
    return 0;
}

/* ---- the controller: the metadata log for its brokers --------------------------------------- */

static const kp_uuid_t kb_ctrl_meta_id = KB_META_TOPIC_ID_INIT;

/* The Fetch response for one metadata-log fetch: records from @p offset (or the error). NULL on
 * no memory or an encoding failure. */
static kb_resp_t *kb_ctrl_mfetch_answer(kb_ctrl_t *ctl, int16_t ver, kp_str_t topic,
                                        int32_t partition, int64_t offset, int32_t max_bytes)
{
    kp_FetchResponse_t resp;
    kp_FetchResponse_FetchableTopicResponse_t t;
    kp_FetchResponse_PartitionData_t pd;
    uint8_t *buf = NULL;
    size_t len = 0;
    int64_t end = -1;
    kp_writer_t wr;
    kb_resp_t *r = NULL;

    kp_FetchResponse_init(&resp);
    kp_FetchResponse_FetchableTopicResponse_init(&t);
    kp_FetchResponse_PartitionData_init(&pd);
    t.Topic = topic;
    t.TopicId = kb_ctrl_meta_id;
    t.Partitions.v = &pd;
    t.Partitions.cnt = 1;
    resp.Responses.v = &t;
    resp.Responses.cnt = 1;
    pd.PartitionIndex = partition;
    if (partition != 0) {
        pd.ErrorCode = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    } else {
        int rc = kb_meta_log_read(
            ctl->svc->meta, offset,
            max_bytes > 0 && max_bytes < KB_CTRL_FETCH_MAX ? max_bytes : KB_CTRL_FETCH_MAX, &buf,
            &len, &end);
        if (rc == KB_E_RANGE)
            pd.ErrorCode = KP_ERR_OFFSET_OUT_OF_RANGE;
        else if (rc)
            return NULL;
        pd.HighWatermark = pd.LastStableOffset = end;
        pd.LogStartOffset = 0;
        pd.Records.ptr = buf;
        pd.Records.len = (int32_t)len;
    }
    kp_writer_init(&wr);
    if (kp_msg_encode(&kp_FetchResponse_desc, &wr, &resp, ver) == 0)
        r = kb_resp_from_writer(&wr);
    else
        kb_log_error("ctrl", "cannot encode a metadata Fetch response v%d", ver);
    kp_writer_free(&wr);
    free(buf);
    return r;
}

static void kb_ctrl_mfetch_cancel(void *opaque, kb_req_t *req)
{
    kb_ctrl_t *ctl = opaque;
    pthread_mutex_lock(&ctl->mu);
    for (kb_ctrl_mfetch_t **pp = &ctl->parked; *pp; pp = &(*pp)->next) {
        if ((*pp)->req == req) {
            kb_ctrl_mfetch_t *f = *pp;
            *pp = f->next;
            free(f);
            break;
        }
    }
    pthread_mutex_unlock(&ctl->mu);
}

/* Answer the parked fetches that have records now, or whose wait is over (all with @p all).
 * mu held (serialised with the cancel callback). */
static void kb_ctrl_mfetch_wake(kb_ctrl_t *ctl, bool all)
{
    int64_t now = kb_time_mono_ms(), end = kb_meta_offset(ctl->svc->meta) + 1;
    for (kb_ctrl_mfetch_t **pp = &ctl->parked; *pp;) {
        kb_ctrl_mfetch_t *f = *pp;
        kb_resp_t *r;
        if (!all && f->offset >= end && now < f->deadline_ms) {
            pp = &f->next;
            continue;
        }
        *pp = f->next;
        r = kb_ctrl_mfetch_answer(ctl, f->ver, f->topic, 0, f->offset, f->max_bytes);
        if (r)
            kb_req_complete(f->req, r);
        else
            kb_req_complete_close(f->req);
        free(f);
    }
}

static kb_api_result_t kb_ctrl_meta_fetch(void *opaque, kb_req_t *req,
                                          const struct kp_FetchRequest_s *rq, kb_resp_t **respp)
{
    kb_ctrl_t *ctl = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    const kp_FetchRequest_FetchTopic_t *t = &rq->Topics.v[0];
    const kp_FetchRequest_FetchPartition_t *p;
    kb_ctrl_mfetch_t *f;
    int64_t end;

    if (!ctl || ctl->magic != KB_CTRL_MAGIC || !kb_ctrl_listener_ok(ctl, ctx)) {
        kb_log_info("ctrl",
                    "%s: Fetch of the metadata log on listener %s, not a controller "
                    "listener: connection closed",
                    ctx->peer, ctx->listener ? ctx->listener : "?");
        return KB_API_CLOSE;
    }
    if (t->Partitions.cnt != 1) {
        *respp = kb_ctrl_mfetch_answer(ctl, ctx->api_version, t->Topic, -1, 0, 0);
        return *respp ? KB_API_RESPOND : KB_API_CLOSE;
    }
    p = &t->Partitions.v[0];
    end = kb_meta_offset(ctl->svc->meta) + 1;
    if (p->Partition != 0 || p->FetchOffset != end || rq->MaxWaitMs <= 0) {
        *respp = kb_ctrl_mfetch_answer(ctl, ctx->api_version, t->Topic, p->Partition,
                                       p->FetchOffset, p->PartitionMaxBytes);
        return *respp ? KB_API_RESPOND : KB_API_CLOSE;
    }
    /* Nothing new: wait (long poll) until a commit or MaxWaitMs. */
    f = calloc(1, sizeof(*f));
    if (!f)
        return KB_API_CLOSE;
    f->req = req;
    f->ver = ctx->api_version;
    f->topic = t->Topic; /* a view into the request, valid until it completes */
    f->offset = p->FetchOffset;
    f->max_bytes = p->PartitionMaxBytes;
    f->deadline_ms =
        kb_time_mono_ms() +
        (rq->MaxWaitMs < 10 * KB_CTRL_FETCH_WAIT_MS ? rq->MaxWaitMs : 10 * KB_CTRL_FETCH_WAIT_MS);
    pthread_mutex_lock(&ctl->mu);
    if (kb_req_defer(req, kb_ctrl_mfetch_cancel, ctl) != 0) {
        pthread_mutex_unlock(&ctl->mu);
        free(f);
        return KB_API_CLOSE;
    }
    f->next = ctl->parked;
    ctl->parked = f;
    ctl->meta_changed = true; /* the thread re-checks: a commit may have just happened */
    pthread_cond_broadcast(&ctl->cv);
    pthread_mutex_unlock(&ctl->mu);
    return KB_API_DEFERRED;
}

/* kb_meta listener: runs with the metadata change lock held, so only flags and signals. */
static void kb_ctrl_meta_event(void *opaque, const kb_meta_event_t *ev)
{
    kb_ctrl_t *ctl = opaque;
    (void)ev;
    pthread_mutex_lock(&ctl->mu);
    ctl->meta_changed = true;
    pthread_cond_broadcast(&ctl->cv);
    pthread_mutex_unlock(&ctl->mu);
}

/* ---- the controller: partitions ------------------------------------------------------------ */

static bool kb_ctrl_usable(void *opaque, int32_t id)
{
    kb_ctrl_t *ctl = opaque;
    return kb_ctrl_reg_usable(ctl->reg, id);
}

/* kb_meta_assign_fn: replicas striped over the usable brokers (kb_ctrl_assign). */
static int16_t kb_ctrl_assign_cb(void *opaque, int32_t partition, int32_t *rf, bool cap,
                                 int32_t *out, char *msg, size_t msg_size)
{
    kb_ctrl_t *ctl = opaque;
    kb_ctrl_broker_t *list;
    int32_t ids[KB_CTRL_MAX_BROKERS];
    size_t n;
    int32_t k = 0;
    int16_t ec;
    bool alone;

    if (kb_ctrl_reg_list(ctl->reg, &list, &n) != 0) {
        snprintf(msg, msg_size, "out of memory");
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
    for (size_t i = 0; i < n && k < KB_CTRL_MAX_BROKERS; i++)
        if (!list[i].fenced && !list[i].shutting_down)
            ids[k++] = list[i].id;
    if (*rf > k)
        for (size_t i = 0; i < n; i++)
            kb_log_info("ctrl", "replica assignment: broker %" PRId32 " is %s", list[i].id,
                        list[i].fenced          ? "fenced"
                        : list[i].shutting_down ? "shutting down"
                                                : "usable");
    /* Internal topics are capped only on a node that is the one registered broker (the
     * single-node setup); a cluster waits for enough brokers, as Kafka does. */
    alone = n == 0 || (n == 1 && list[0].id == ctl->cfg->node_id);
    free(list);
    if (cap && alone && *rf > k)
        *rf = k;
    if (partition == 0)
        ctl->assign_start = (int32_t)((kb_time_mono_ns() / 1000) % (k > 0 ? k : 1));
    ec = kb_ctrl_assign(ids, k, *rf, partition, ctl->assign_start, out);
    if (ec)
        snprintf(msg, msg_size,
                 "Unable to replicate the partition %" PRId32 " time(s): The target replication "
                 "factor of %" PRId32 " cannot be reached because only %" PRId32
                 " broker(s) are registered.",
                 *rf, *rf, k);
    return ec;
}

/* Broker @p gone was fenced or shuts down (gone >= 0), or brokers came back (gone -1): elect
 * new leaders and shrink ISRs as Kafka's controller does, one PartitionChangeRecord each.
 * Returns how many partitions @p gone still leads. Controller thread or a handler. */
static int kb_ctrl_elect_all(kb_ctrl_t *ctl, int32_t gone)
{
    kb_topic_info_t *topics = NULL;
    size_t nt = 0;
    int still = 0;

    if (kb_meta_topics(ctl->svc->meta, &topics, &nt) != 0)
        return -1;
    for (size_t i = 0; i < nt; i++) {
        /* the topic's unclean.leader.election.enable (dynamic), else the broker default */
        bool unclean = kb_ctrl_elect_unclean_enabled(ctl->svc->meta, ctl->cfg, topics[i].name);
        for (int32_t k = 0; k < topics[i].partitions; k++) {
            kb_meta_part_state_t st;
            kb_ctrl_part_t cur, next;
            bool changed;
            int16_t ec;
            if (kb_meta_part_state(ctl->svc->meta, &topics[i].id, k, &st) != KB_META_OK)
                continue;
            kb_ctrl_part_load(&cur, &st);
            if (gone >= 0)
                changed = kb_ctrl_part_fence(&cur, gone, kb_ctrl_usable, ctl, unclean, &next);
            else
                changed = kb_ctrl_part_reelect(&cur, kb_ctrl_usable, ctl, unclean, &next);
            if (!changed)
                continue;
            ec = kb_meta_change_partition(ctl->svc->meta, &topics[i].id, k, cur.partition_epoch,
                                          next.leader != cur.leader ? next.leader
                                                                    : KB_META_LEADER_UNCHANGED,
                                          next.isr, next.nisr, NULL);
            if (ec)
                kb_log_warn("ctrl", "%s-%" PRId32 ": leader/ISR change failed: error %d",
                            topics[i].name, k, ec);
            else if (next.leader != cur.leader)
                kb_log_info("ctrl", "%s-%" PRId32 ": leader %" PRId32 " -> %" PRId32 "%s",
                            topics[i].name, k, cur.leader, next.leader,
                            next.leader < 0 ? " (offline: no in-sync replica is alive)" : "");
            if (ec && cur.leader == gone)
                still++;
        }
    }
    free(topics);
    return still;
}

static kb_api_result_t kb_ctrl_h_alter_partition(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kb_ctrl_t *ctl = kb_ctrl_check(opaque, ctx);
    kp_AlterPartitionRequest_t rq;
    kp_AlterPartitionResponse_t resp;
    kb_ctrl_broker_t b;

    if (!ctl || kb_ctrl_decode(ctx, &kp_AlterPartitionRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_AlterPartitionResponse_init(&resp);
    if (kb_ctrl_reg_get(ctl->reg, rq.BrokerId, &b) != 0 || b.epoch != rq.BrokerEpoch) {
        resp.ErrorCode = KP_ERR_STALE_BROKER_EPOCH;
        return kb_ctrl_respond(ctx, &kp_AlterPartitionResponse_desc, &resp, respp);
    }
    resp.Topics.cnt = rq.Topics.cnt > 0 ? rq.Topics.cnt : 0;
    resp.Topics.v =
        kp_arena_calloc(ctx->arena, (size_t)resp.Topics.cnt + 1, sizeof(*resp.Topics.v));
    if (!resp.Topics.v)
        return KB_API_CLOSE;
    for (int32_t i = 0; i < resp.Topics.cnt; i++) {
        const kp_AlterPartitionRequest_TopicData_t *t = &rq.Topics.v[i];
        kp_AlterPartitionResponse_TopicData_t *rt = &resp.Topics.v[i];
        kp_AlterPartitionResponse_TopicData_init(rt);
        rt->TopicId = t->TopicId;
        rt->Partitions.cnt = t->Partitions.cnt > 0 ? t->Partitions.cnt : 0;
        rt->Partitions.v =
            kp_arena_calloc(ctx->arena, (size_t)rt->Partitions.cnt + 1, sizeof(*rt->Partitions.v));
        if (!rt->Partitions.v)
            return KB_API_CLOSE;
        for (int32_t k = 0; k < rt->Partitions.cnt; k++) {
            const kp_AlterPartitionRequest_PartitionData_t *p = &t->Partitions.v[k];
            kp_AlterPartitionResponse_PartitionData_t *rp = &rt->Partitions.v[k];
            int32_t isr[KB_CTRL_MAX_REPLICAS], nisr = 0;
            kb_meta_part_state_t st;
            kb_ctrl_part_t cur;
            char msg[256];
            int rc;
            kp_AlterPartitionResponse_PartitionData_init(rp);
            rp->PartitionIndex = p->PartitionIndex;
            rc = kb_meta_part_state(ctl->svc->meta, &t->TopicId, p->PartitionIndex, &st);
            if (rc != KB_META_OK) {
                rp->ErrorCode = rc == KB_META_UNKNOWN_TOPIC ? KP_ERR_UNKNOWN_TOPIC_ID
                                                            : KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
                continue;
            }
            if (ctx->api_version >= 3) {
                for (int32_t j = 0; j < p->NewIsrWithEpochs.cnt && nisr < KB_CTRL_MAX_REPLICAS; j++)
                    isr[nisr++] = p->NewIsrWithEpochs.v[j].BrokerId;
                if (p->NewIsrWithEpochs.cnt > KB_CTRL_MAX_REPLICAS)
                    nisr = KB_CTRL_MAX_REPLICAS + 1;
            } else {
                for (int32_t j = 0; j < p->NewIsr.cnt && nisr < KB_CTRL_MAX_REPLICAS; j++)
                    isr[nisr++] = p->NewIsr.v[j];
                if (p->NewIsr.cnt > KB_CTRL_MAX_REPLICAS)
                    nisr = KB_CTRL_MAX_REPLICAS + 1;
            }
            kb_ctrl_part_load(&cur, &st);
            rp->ErrorCode =
                nisr > KB_CTRL_MAX_REPLICAS
                    ? KP_ERR_INVALID_REQUEST
                    : kb_ctrl_alter_check(&cur, rq.BrokerId, p->LeaderEpoch, p->PartitionEpoch, isr,
                                          nisr, kb_ctrl_usable, ctl, msg, sizeof(msg));
            if (!rp->ErrorCode)
                rp->ErrorCode = kb_meta_change_partition(ctl->svc->meta, &t->TopicId,
                                                         p->PartitionIndex, p->PartitionEpoch,
                                                         KB_META_LEADER_UNCHANGED, isr, nisr, &st);
            else
                kb_log_info("ctrl", "AlterPartition from broker %" PRId32 " refused: %s",
                            rq.BrokerId, msg);
            if (rp->ErrorCode)
                continue;
            rp->LeaderId = st.leader;
            rp->LeaderEpoch = st.leader_epoch;
            rp->PartitionEpoch = st.partition_epoch;
            rp->Isr.v = kp_arena_calloc(ctx->arena, (size_t)st.nisr + 1, sizeof(int32_t));
            if (!rp->Isr.v)
                return KB_API_CLOSE;
            memcpy(rp->Isr.v, st.isr, (size_t)st.nisr * sizeof(int32_t));
            rp->Isr.cnt = st.nisr;
        }
    }
    return kb_ctrl_respond(ctx, &kp_AlterPartitionResponse_desc, &resp, respp);
}

/* ---- the controller: session reaper ------------------------------------------------------- */

static void kb_ctrl_reap(kb_ctrl_t *ctl)
{
    int32_t ids[64];
    int64_t now = kb_time_wall_ms();
    size_t n;
    kb_ctrl_hb_t hb;

    /* A combined node is alive while it runs. */
    if (ctl->self_epoch > 0 &&
        kb_ctrl_reg_heartbeat(ctl->reg, ctl->cfg->node_id, ctl->self_epoch,
                              kb_meta_offset(ctl->svc->meta), false, false, now, &hb) == 0 &&
        hb.unfenced_now)
        kb_ctrl_commit_change(ctl, ctl->cfg->node_id, -1, false);
    while ((n = kb_ctrl_reg_expire(ctl->reg, now, ids, 64)) > 0)
        for (size_t i = 0; i < n; i++) {
            kb_log_warn("ctrl",
                        "broker %" PRId32 " fenced: no heartbeat for broker.session.timeout.ms "
                        "(%" PRId32 " ms)",
                        ids[i], ctl->cfg->broker_session_timeout_ms);
            kb_ctrl_commit_change(ctl, ids[i], 1, false);
            kb_ctrl_elect_all(ctl, ids[i]);
        }
    pthread_mutex_lock(&ctl->mu);
    if (ctl->reelect) {
        ctl->reelect = false;
        pthread_mutex_unlock(&ctl->mu);
        kb_ctrl_elect_all(ctl, -1);
    } else {
        pthread_mutex_unlock(&ctl->mu);
    }
    kb_ctrl_elector_tick(ctl->elector, kb_time_mono_ms());
}

/* ---- a broker-only node: the controller channel -------------------------------------------- */

static void kb_ctrl_kc_log(void *opaque, int level, const char *msg)
{
    (void)opaque;
    if (level <= KC_LOG_WARN)
        kb_log_info("ctrl", "controller channel: %s", msg);
    else
        kb_log_debug("ctrl", "controller channel: %s", msg);
}

/* An answer (or a failure) from the controller: mu held by the caller. */
static void kb_ctrl_chan_result(kb_ctrl_t *ctl, int err, int64_t now)
{
    ctl->inflight = false;
    if (err == KC_E_OK) {
        if (ctl->reported_down)
            kb_log_info("ctrl", "controller %" PRId32 " at %s:%d reachable again",
                        ctl->cfg->voter_id, ctl->cfg->voter_host, ctl->cfg->voter_port);
        ctl->reported_down = false;
        ctl->last_ok_ms = now;
        return;
    }
    if (!ctl->reported_down)
        kb_log_warn("ctrl", "controller %" PRId32 " at %s:%d unreachable: %s", ctl->cfg->voter_id,
                    ctl->cfg->voter_host, ctl->cfg->voter_port, kc_err_str(err));
    ctl->reported_down = true;
}

static void kb_ctrl_on_register(kc_client_t *kc, int err, int16_t ver, const uint8_t *body,
                                size_t len, void *opaque)
{
    kb_ctrl_t *ctl = opaque;
    kp_BrokerRegistrationResponse_t resp;
    kp_arena_t arena, *ar = &arena;
    kp_reader_t rd;
    int64_t now = kb_time_mono_ms();

    (void)kc;
    kp_arena_init(ar, 1u << 20);
    pthread_mutex_lock(&ctl->mu);
    kb_ctrl_chan_result(ctl, err, now);
    ctl->next_ms = now + ctl->cfg->broker_heartbeat_interval_ms;
    if (err == KC_E_OK) {
        kp_reader_init(&rd, body, len);
        kp_BrokerRegistrationResponse_init(&resp);
        if (kp_msg_decode(&kp_BrokerRegistrationResponse_desc, &rd, ar, &resp, ver) != 0) {
            kb_log_warn("ctrl", "undecodable BrokerRegistration response v%d", ver);
        } else if (resp.ErrorCode) {
            kb_log_warn("ctrl", "registration with controller %" PRId32 " refused: error %d%s",
                        ctl->cfg->voter_id, resp.ErrorCode,
                        resp.ErrorCode == KP_ERR_DUPLICATE_BROKER_REGISTRATION
                            ? " (an earlier incarnation's session is still valid; retrying)"
                            : "");
        } else {
            ctl->epoch = resp.BrokerEpoch;
#ifdef KB_HAVE_REPL
            if (kb_repl_of(ctl->kb)) /* ReplicaState.ReplicaEpoch, AlterPartition BrokerEpoch */
                kb_repl_set_broker_epoch(kb_repl_of(ctl->kb), resp.BrokerEpoch);
#endif
            ctl->fenced = true;
            ctl->next_ms = now; /* heartbeat at once: unfenced as soon as caught up */
            kb_log_info("ctrl", "registered with controller %" PRId32 ", broker epoch %" PRId64,
                        ctl->cfg->voter_id, resp.BrokerEpoch);
        }
    }
    pthread_cond_broadcast(&ctl->cv);
    pthread_mutex_unlock(&ctl->mu);
    kp_arena_free(ar);
}

static void kb_ctrl_on_heartbeat(kc_client_t *kc, int err, int16_t ver, const uint8_t *body,
                                 size_t len, void *opaque)
{
    kb_ctrl_t *ctl = opaque;
    kp_BrokerHeartbeatResponse_t resp;
    kp_arena_t arena, *ar = &arena;
    kp_reader_t rd;
    int64_t now = kb_time_mono_ms();

    (void)kc;
    kp_arena_init(ar, 1u << 20);
    pthread_mutex_lock(&ctl->mu);
    kb_ctrl_chan_result(ctl, err, now);
    ctl->next_ms = now + ctl->cfg->broker_heartbeat_interval_ms;
    if (err == KC_E_OK) {
        kp_reader_init(&rd, body, len);
        kp_BrokerHeartbeatResponse_init(&resp);
        if (kp_msg_decode(&kp_BrokerHeartbeatResponse_desc, &rd, ar, &resp, ver) != 0) {
            kb_log_warn("ctrl", "undecodable BrokerHeartbeat response v%d", ver);
        } else if (resp.ErrorCode == KP_ERR_STALE_BROKER_EPOCH ||
                   resp.ErrorCode == KP_ERR_BROKER_ID_NOT_REGISTERED) {
            kb_log_info("ctrl",
                        "controller %" PRId32 " lost this registration (error %d): "
                        "registering again",
                        ctl->cfg->voter_id, resp.ErrorCode);
            ctl->epoch = -1;
            ctl->next_ms = now;
        } else if (resp.ErrorCode) {
            kb_log_warn("ctrl", "heartbeat refused: error %d", resp.ErrorCode);
        } else {
            if (ctl->fenced != resp.IsFenced)
                kb_log_info("ctrl", "%s by controller %" PRId32,
                            resp.IsFenced ? "fenced" : "unfenced", ctl->cfg->voter_id);
            ctl->fenced = resp.IsFenced;
            if (resp.ShouldShutDown)
                ctl->should_shutdown = true;
        }
    }
    pthread_cond_broadcast(&ctl->cv);
    pthread_mutex_unlock(&ctl->mu);
    kp_arena_free(ar);
}

/* Build and send what is due (mu held). */
static void kb_ctrl_chan_send(kb_ctrl_t *ctl, int64_t now)
{
    const kb_config_t *cfg = ctl->cfg;
    int64_t id;
    int32_t timeout = cfg->broker_heartbeat_interval_ms * 2;

    if (ctl->inflight || now < ctl->next_ms)
        return;
    if (ctl->epoch < 0) {
        kp_BrokerRegistrationRequest_t *rq = &ctl->rq_reg;
        kp_BrokerRegistrationRequest_init(rq);
        rq->BrokerId = cfg->node_id;
        rq->ClusterId = kb_ctrl_view(kb_meta_cluster_id(ctl->svc->meta));
        rq->IncarnationId = ctl->incarnation;
        rq->Listeners.v = ctl->rq_lst;
        rq->Listeners.cnt = 0;
        for (size_t i = 0; i < cfg->adv_cnt && i < KB_CTRL_MAX_ENDPOINTS; i++) {
            kp_BrokerRegistrationRequest_Listener_t *l = &ctl->rq_lst[rq->Listeners.cnt++];
            int port = cfg->adv[i].port;
            kp_BrokerRegistrationRequest_Listener_init(l);
            /* Port 0: the port the kernel gave the listener of that name. */
            if (port == 0 && ctl->kb->srv)
                port = kb_server_listener_port(ctl->kb->srv, cfg->adv[i].name);
            l->Name = kb_ctrl_view(cfg->adv[i].name);
            l->Host = kb_ctrl_view(cfg->adv[i].host);
            l->Port = (uint16_t)(port > 0 ? port : 0);
            l->SecurityProtocol = 0; /* PLAINTEXT */
        }
        rq->Rack.ptr = NULL;
        rq->Rack.len = -1;
        id = kc_request_msg(ctl->hkc, cfg->voter_id, &kp_BrokerRegistrationRequest_desc, -1, rq,
                            timeout, 0, kb_ctrl_on_register, ctl);
    } else {
        kp_BrokerHeartbeatRequest_t *rq = &ctl->rq_hb;
        kp_BrokerHeartbeatRequest_init(rq);
        rq->BrokerId = cfg->node_id;
        rq->BrokerEpoch = ctl->epoch;
        rq->CurrentMetadataOffset = kb_meta_offset(ctl->svc->meta);
        rq->WantFence = false;
        rq->WantShutDown = ctl->want_shutdown;
        id = kc_request_msg(ctl->hkc, cfg->voter_id, &kp_BrokerHeartbeatRequest_desc, -1, rq,
                            timeout, 0, kb_ctrl_on_heartbeat, ctl);
    }
    if (id > 0)
        ctl->inflight = true;
    else
        ctl->next_ms = now + cfg->broker_heartbeat_interval_ms;
}

/* The fetcher's next attempt after a failure (mu taken here). */
static void kb_ctrl_fetch_later(kb_ctrl_t *ctl, int64_t now)
{
    pthread_mutex_lock(&ctl->mu);
    ctl->fnext_ms = now + ctl->cfg->broker_heartbeat_interval_ms;
    pthread_mutex_unlock(&ctl->mu);
}

static void kb_ctrl_on_fetch(kc_client_t *kc, int err, int16_t ver, const uint8_t *body, size_t len,
                             void *opaque)
{
    kb_ctrl_t *ctl = opaque;
    kp_FetchResponse_t resp;
    kp_arena_t ar;
    kp_reader_t rd;
    int64_t now = kb_time_mono_ms();
    const kp_FetchResponse_PartitionData_t *pd = NULL;

    (void)kc;
    pthread_mutex_lock(&ctl->mu);
    ctl->finflight = false;
    ctl->fnext_ms = now; /* the controller long-polls: ask again at once */
    pthread_mutex_unlock(&ctl->mu);
    if (err != KC_E_OK) {
        if (!ctl->fetch_reported)
            kb_log_warn("ctrl", "metadata fetch from controller %" PRId32 " failed: %s",
                        ctl->cfg->voter_id, kc_err_str(err));
        ctl->fetch_reported = true;
        kb_ctrl_fetch_later(ctl, now);
        return;
    }
    ctl->fetch_reported = false;
    kp_arena_init(&ar, 64u << 20);
    kp_reader_init(&rd, body, len);
    kp_FetchResponse_init(&resp);
    if (kp_msg_decode(&kp_FetchResponse_desc, &rd, &ar, &resp, ver) == 0 &&
        resp.Responses.cnt == 1 && resp.Responses.v[0].Partitions.cnt == 1)
        pd = &resp.Responses.v[0].Partitions.v[0];
    if (!pd || resp.ErrorCode) {
        kb_log_warn("ctrl", "bad metadata Fetch response v%d from controller %" PRId32, ver,
                    ctl->cfg->voter_id);
        kb_ctrl_fetch_later(ctl, now);
    } else if (pd->ErrorCode) {
        kb_log_warn("ctrl",
                    "metadata fetch from controller %" PRId32 " at offset %" PRId64 ": error %d",
                    ctl->cfg->voter_id, kb_meta_offset(ctl->svc->meta) + 1, pd->ErrorCode);
        kb_ctrl_fetch_later(ctl, now);
    } else if (pd->Records.len > 0) {
        char e[512];
        if (kb_meta_apply_records(ctl->svc->meta, pd->Records.ptr, (size_t)pd->Records.len, e,
                                  sizeof(e)) != 0) {
            kb_log_error("ctrl", "cannot apply the metadata log from controller %" PRId32 ": %s",
                         ctl->cfg->voter_id, e);
            kb_ctrl_fetch_later(ctl, now);
        }
    }
    kp_arena_free(&ar);
}

static void *kb_ctrl_fetch_thread(void *arg)
{
    kb_ctrl_t *ctl = arg;
    pthread_mutex_lock(&ctl->mu);
    while (!ctl->stop) {
        int64_t now = kb_time_mono_ms();
        if (!ctl->finflight && now >= ctl->fnext_ms) {
            kp_FetchRequest_t *rq = &ctl->rq_f;
            kp_FetchRequest_init(rq);
            kp_FetchRequest_FetchTopic_init(&ctl->rq_ft);
            kp_FetchRequest_FetchPartition_init(&ctl->rq_fp);
            /* v13-14: topic ids and the plain ReplicaId (v15 moved it into ReplicaState) */
            rq->ReplicaId = ctl->cfg->node_id;
            rq->MaxWaitMs = KB_CTRL_FETCH_WAIT_MS;
            rq->MinBytes = 1;
            rq->MaxBytes = KB_CTRL_FETCH_MAX;
            rq->SessionId = 0;
            rq->SessionEpoch = -1;
            ctl->rq_ft.Topic = kb_ctrl_view(KB_TOPIC_CLUSTER_METADATA);
            ctl->rq_ft.TopicId = kb_ctrl_meta_id;
            ctl->rq_fp.Partition = 0;
            ctl->rq_fp.FetchOffset = kb_meta_offset(ctl->svc->meta) + 1;
            ctl->rq_fp.PartitionMaxBytes = KB_CTRL_FETCH_MAX;
            ctl->rq_ft.Partitions.v = &ctl->rq_fp;
            ctl->rq_ft.Partitions.cnt = 1;
            rq->Topics.v = &ctl->rq_ft;
            rq->Topics.cnt = 1;
            rq->RackId = kb_ctrl_view("");
            if (kc_request_msg(ctl->fkc, ctl->cfg->voter_id, &kp_FetchRequest_desc, 14, rq,
                               KB_CTRL_FETCH_WAIT_MS + ctl->cfg->broker_session_timeout_ms, 0,
                               kb_ctrl_on_fetch, ctl) > 0)
                ctl->finflight = true;
            else
                ctl->fnext_ms = now + ctl->cfg->broker_heartbeat_interval_ms;
        }
        pthread_mutex_unlock(&ctl->mu);
        kc_client_poll(ctl->fkc, KB_CTRL_TICK_MS);
        pthread_mutex_lock(&ctl->mu);
    }
    pthread_mutex_unlock(&ctl->mu);
    return NULL;
}

static void *kb_ctrl_thread(void *arg)
{
    kb_ctrl_t *ctl = arg;
    pthread_mutex_lock(&ctl->mu);
    while (!ctl->stop) {
        if (ctl->remote) {
            kb_ctrl_chan_send(ctl, kb_time_mono_ms());
            pthread_mutex_unlock(&ctl->mu);
            /* The lifecycle client without waiting (a heartbeat's answer is handled within a
             * tick), then the forwarding one as before. */
            kc_client_poll(ctl->hkc, 0);
            kc_client_poll(ctl->kc, KB_CTRL_TICK_MS);
            pthread_mutex_lock(&ctl->mu);
        } else {
            struct timespec dl = kb_time_mono_deadline(KB_CTRL_TICK_MS);
            pthread_mutex_unlock(&ctl->mu);
            kb_ctrl_reap(ctl);
            pthread_mutex_lock(&ctl->mu);
            ctl->meta_changed = false;
            kb_ctrl_mfetch_wake(ctl, false);
            if (!ctl->stop && !ctl->meta_changed)
                pthread_cond_timedwait(&ctl->cv, &ctl->mu, &dl);
        }
    }
    pthread_mutex_unlock(&ctl->mu);
    return NULL;
}

/* ---- producer ids (AllocateProducerIds, 67) ---------------------------------------------------
 */

#define KB_CTRL_PID_BLOCK 1000

static kb_api_result_t kb_ctrl_h_alloc_pids(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kb_ctrl_t *ctl = kb_ctrl_check(opaque, ctx);
    kp_AllocateProducerIdsRequest_t rq;
    kp_AllocateProducerIdsResponse_t resp;
    kb_ctrl_broker_t b;
    int64_t first;

    if (!ctl || kb_ctrl_decode(ctx, &kp_AllocateProducerIdsRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    kp_AllocateProducerIdsResponse_init(&resp);
    if (kb_ctrl_reg_get(ctl->reg, rq.BrokerId, &b) != 0 || b.epoch != rq.BrokerEpoch) {
        resp.ErrorCode = KP_ERR_STALE_BROKER_EPOCH;
    } else if (kb_meta_alloc_producer_ids(ctl->svc->meta, KB_CTRL_PID_BLOCK, &first) != 0) {
        resp.ErrorCode = KP_ERR_KAFKA_STORAGE_ERROR;
    } else {
        resp.ProducerIdStart = first;
        resp.ProducerIdLen = KB_CTRL_PID_BLOCK;
    }
    return kb_ctrl_respond(ctx, &kp_AllocateProducerIdsResponse_desc, &resp, respp);
}

/* A broker-only node: one blocking AllocateProducerIds round trip (kb_meta_pid_source_fn). */
typedef struct kb_ctrl_pidreq_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int refs;
    int rc;
    int64_t start;
    int32_t len;
    kp_AllocateProducerIdsRequest_t rq;
} kb_ctrl_pidreq_t;

static void kb_ctrl_pidreq_unref(kb_ctrl_pidreq_t *p)
{
    bool last;
    pthread_mutex_lock(&p->mu);
    last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (!last)
        return;
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static void kb_ctrl_on_pids(kc_client_t *kc, int err, int16_t ver, const uint8_t *body, size_t len,
                            void *opaque)
{
    kb_ctrl_pidreq_t *p = opaque;
    kp_AllocateProducerIdsResponse_t resp;
    kp_reader_t rd;
    kp_arena_t ar;
    (void)kc;
    kp_arena_init(&ar, 1u << 16);
    pthread_mutex_lock(&p->mu);
    p->rc = KB_E_IO;
    if (err == KC_E_OK) {
        kp_reader_init(&rd, body, len);
        kp_AllocateProducerIdsResponse_init(&resp);
        if (kp_msg_decode(&kp_AllocateProducerIdsResponse_desc, &rd, &ar, &resp, ver) == 0 &&
            resp.ErrorCode == 0) {
            p->start = resp.ProducerIdStart;
            p->len = resp.ProducerIdLen;
            p->rc = 0;
        }
    }
    p->done = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    kp_arena_free(&ar);
    kb_ctrl_pidreq_unref(p);
}

static int kb_ctrl_pid_source(void *opaque, int64_t *start, int32_t *len)
{
    kb_ctrl_t *ctl = opaque;
    kb_ctrl_pidreq_t *p = calloc(1, sizeof(*p));
    pthread_condattr_t ca;
    struct timespec dl;
    int rc;

    if (!p)
        return KB_E_NOMEM;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    p->refs = 2;
    kp_AllocateProducerIdsRequest_init(&p->rq);
    p->rq.BrokerId = ctl->cfg->node_id;
    pthread_mutex_lock(&ctl->mu);
    p->rq.BrokerEpoch = ctl->epoch;
    pthread_mutex_unlock(&ctl->mu);
    if (kc_request_msg(ctl->kc, ctl->cfg->voter_id, &kp_AllocateProducerIdsRequest_desc, -1, &p->rq,
                       ctl->cfg->broker_session_timeout_ms, 0, kb_ctrl_on_pids, p) <= 0) {
        p->refs = 1;
        kb_ctrl_pidreq_unref(p);
        return KB_E_IO;
    }
    dl = kb_time_mono_deadline(ctl->cfg->broker_session_timeout_ms + 1000);
    pthread_mutex_lock(&p->mu);
    while (!p->done)
        if (pthread_cond_timedwait(&p->cv, &p->mu, &dl) != 0)
            break;
    rc = p->done ? p->rc : KB_E_IO;
    *start = p->start;
    *len = p->len;
    pthread_mutex_unlock(&p->mu);
    if (rc)
        kb_log_warn("ctrl", "no producer-id block from controller %" PRId32, ctl->cfg->voter_id);
    kb_ctrl_pidreq_unref(p);
    return rc;
}

/* ---- internal topics (broker-only node) ---------------------------------------------------- */

#define KB_CTRL_ICR_VER      7 /* CreateTopics version of the request */
#define KB_CTRL_ICR_RESP_HDR 1 /* its response header version (flexible) */

/* One CreateTopics for a topic this node has the controller create, sent in an Envelope. */
typedef struct kb_ctrl_icr_s {
    kb_ctrl_t *ctl;
    int slot; /* in ctl->icr */
    char name[KB_CTRL_ICR_NAME];
    kp_EnvelopeRequest_t env;
    uint8_t principal[64];
    uint8_t addr[4];
    uint8_t *frame;
} kb_ctrl_icr_t;

static void kb_ctrl_icr_done(kc_client_t *kc, int err, int16_t ver, const uint8_t *body, size_t len,
                             void *opaque)
{
    kb_ctrl_icr_t *ic = opaque;
    kb_ctrl_t *ctl = ic->ctl;
    const char *name = ic->name;
    (void)kc;
    if (err == KC_E_OK) {
        kp_EnvelopeResponse_t er;
        kp_ResponseHeader_t h;
        kp_CreateTopicsResponse_t resp;
        kp_reader_t rd;
        kp_arena_t ar;
        int16_t ec = KP_ERR_UNKNOWN_SERVER_ERROR;
        kp_arena_init(&ar, 0);
        kp_reader_init(&rd, body, len);
        kp_EnvelopeResponse_init(&er);
        if (kp_msg_decode(&kp_EnvelopeResponse_desc, &rd, &ar, &er, ver) == 0 && !er.ErrorCode &&
            er.ResponseData.len > 0) {
            kp_reader_init(&rd, er.ResponseData.ptr, (size_t)er.ResponseData.len);
            kp_ResponseHeader_init(&h);
            kp_CreateTopicsResponse_init(&resp);
            if (kp_ResponseHeader_decode(&rd, &ar, &h, KB_CTRL_ICR_RESP_HDR) == 0 &&
                kp_msg_decode(&kp_CreateTopicsResponse_desc, &rd, &ar, &resp, KB_CTRL_ICR_VER) ==
                    0 &&
                resp.Topics.cnt == 1)
                ec = resp.Topics.v[0].ErrorCode;
        } else if (er.ErrorCode) {
            ec = er.ErrorCode;
        }
        if (ec == 0)
            kb_log_info("ctrl", "controller %" PRId32 " created %s", ctl->cfg->voter_id, name);
        else if (ec != KP_ERR_TOPIC_ALREADY_EXISTS)
            kb_log_info("ctrl", "controller %" PRId32 " did not create %s yet (error %d)",
                        ctl->cfg->voter_id, name, (int)ec);
        kp_arena_free(&ar);
    } else {
        kb_log_info("ctrl", "asking controller %" PRId32 " to create %s failed: %s",
                    ctl->cfg->voter_id, name, kc_err_str(err));
    }
    pthread_mutex_lock(&ctl->mu);
    ctl->icr[ic->slot].busy = false;
    pthread_mutex_unlock(&ctl->mu);
    free(ic->frame);
    free(ic);
}

/* The slot for asking the controller to create @p name: its own one (-1 while a request for it
 * is in flight or the last one left less than a second ago), else the free one used longest
 * ago (-1 when all are in flight: the caller's client asks again). Marks it busy. @locks mu */
static int kb_ctrl_icr_take(kb_ctrl_t *ctl, const char *name, int64_t now)
{
    int best = -1;
    for (int i = 0; i < KB_CTRL_ICR_SLOTS; i++) {
        struct kb_ctrl_icr_slot_s *sl = &ctl->icr[i];
        if (sl->last_ms && !strcmp(sl->name, name)) {
            if (sl->busy || now - sl->last_ms < 1000)
                return -1;
            best = i;
            break;
        }
        if (!sl->busy && (best < 0 || sl->last_ms < ctl->icr[best].last_ms))
            best = i;
    }
    if (best >= 0) {
        snprintf(ctl->icr[best].name, sizeof(ctl->icr[best].name), "%s", name);
        ctl->icr[best].busy = true;
        ctl->icr[best].last_ms = now ? now : 1;
    }
    return best;
}

/* kb_meta_internal_creator_fn: Kafka's brokers have the controller create the coordinators'
 * topics with a CreateTopics carrying their own settings (offsets.topic.* /
 * transaction.state.log.*), and auto-created topics (Metadata, auto.create.topics.enable) with
 * num.partitions and default.replication.factor. Here it travels in an Envelope as the broker's
 * own principal (KB_PRINCIPAL_INTERNAL: internal topic names are refused to clients; Metadata
 * authorizes nothing in kbroker, so an auto-creation is not narrowed by it either); the
 * replication factor is not capped, so the controller refuses it (INVALID_REPLICATION_FACTOR,
 * retried) until enough brokers are usable. Fire and forget (the change lock is held): one
 * request per topic in flight, at most one a second, at most KB_CTRL_ICR_SLOTS topics at once;
 * the answer is only logged. */
static void kb_ctrl_internal_creator(void *opaque, const char *name)
{
    kb_ctrl_t *ctl = opaque;
    kb_meta_internal_spec_t is;
    kp_CreateTopicsRequest_t rq;
    kp_CreateTopicsRequest_CreatableTopic_t t;
    kp_CreateTopicsRequest_CreatableTopicConfig_t cv[5];
    kp_RequestHeader_t hdr;
    kp_DefaultPrincipalData_t pd;
    kp_writer_t wr, pw;
    kb_ctrl_icr_t *ic;
    int slot;
    int64_t now = kb_time_mono_ns() / 1000000;
    bool ok;

    if (strlen(name) >= KB_CTRL_ICR_NAME)
        return;
    if (kb_meta_topic_is_internal_name(name)) {
        if (kb_meta_internal_spec(ctl->cfg, name, 0, &is) != 0)
            return;
    } else {
        memset(&is, 0, sizeof(is));
        is.spec.name = name;
        is.spec.partitions = ctl->cfg->num_partitions;
        is.spec.replication_factor = ctl->cfg->default_replication_factor;
    }
    pthread_mutex_lock(&ctl->mu);
    slot = kb_ctrl_icr_take(ctl, name, now);
    pthread_mutex_unlock(&ctl->mu);
    if (slot < 0)
        return;

    ic = calloc(1, sizeof(*ic));
    kp_CreateTopicsRequest_init(&rq);
    kp_CreateTopicsRequest_CreatableTopic_init(&t);
    t.Name = kb_ctrl_view(name);
    t.NumPartitions = is.spec.partitions;
    t.ReplicationFactor = (int16_t)is.spec.replication_factor;
    t.Assignments.cnt = 0;
    for (size_t i = 0; i < is.spec.config_cnt; i++) {
        kp_CreateTopicsRequest_CreatableTopicConfig_init(&cv[i]);
        cv[i].Name = kb_ctrl_view(is.kv[i].key);
        cv[i].Value = kb_ctrl_view(is.kv[i].value);
    }
    t.Configs.cnt = (int32_t)is.spec.config_cnt;
    t.Configs.v = cv;
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    rq.TimeoutMs = ctl->cfg->broker_session_timeout_ms;
    kp_RequestHeader_init(&hdr);
    hdr.RequestApiKey = KP_APIKEY_CreateTopics;
    hdr.RequestApiVersion = KB_CTRL_ICR_VER;
    hdr.CorrelationId = 0;
    hdr.ClientId = kb_ctrl_view("kbroker-internal-topics");
    kp_DefaultPrincipalData_init(&pd);
    pd.Type = kb_ctrl_view("User");
    pd.Name = kb_ctrl_view(&KB_PRINCIPAL_INTERNAL[sizeof("User:") - 1]);
    kp_writer_init(&wr);
    kp_writer_init(&pw);
    ok = ic &&
         kp_RequestHeader_encode(
             &wr, &hdr, kp_request_header_version(KP_APIKEY_CreateTopics, KB_CTRL_ICR_VER)) == 0 &&
         kp_msg_encode(&kp_CreateTopicsRequest_desc, &wr, &rq, KB_CTRL_ICR_VER) == 0 &&
         kp_msg_encode(&kp_DefaultPrincipalData_desc, &pw, &pd, 0) == 0 &&
         pw.len <= sizeof(ic->principal) && (ic->frame = malloc(wr.len ? wr.len : 1));
    if (ok) {
        memcpy(ic->frame, wr.buf, wr.len);
        memcpy(ic->principal, pw.buf, pw.len);
        ic->ctl = ctl;
        ic->slot = slot;
        snprintf(ic->name, sizeof(ic->name), "%s", name);
        kp_EnvelopeRequest_init(&ic->env);
        ic->env.RequestData.ptr = ic->frame;
        ic->env.RequestData.len = (int32_t)wr.len;
        ic->env.RequestPrincipal.ptr = ic->principal;
        ic->env.RequestPrincipal.len = (int32_t)pw.len;
        ic->env.ClientHostAddress.ptr = ic->addr;
        ic->env.ClientHostAddress.len = 4;
        ok = kc_request_msg(ctl->kc, ctl->cfg->voter_id, &kp_EnvelopeRequest_desc, -1, &ic->env,
                            ctl->cfg->broker_session_timeout_ms, 0, kb_ctrl_icr_done, ic) > 0;
        if (ok)
            kb_log_info("ctrl", "asking controller %" PRId32 " to create %s", ctl->cfg->voter_id,
                        name);
    }
    if (!ok && ic)
        free(ic->frame);
    kp_writer_free(&wr);
    kp_writer_free(&pw);
    if (!ok) {
        free(ic);
        pthread_mutex_lock(&ctl->mu);
        ctl->icr[slot].busy = false;
        pthread_mutex_unlock(&ctl->mu);
    }
}

/* ---- kbx cluster operations (kb_ctrl_bump.c) ------------------------------------------------ */

static kb_api_result_t kb_ctrl_h_bump(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_ctrl_t *ctl = kb_ctrl_check(opaque, kb_req_ctx(req));
    return ctl ? kb_ctrl_bump_handle(ctl->svc->meta, req, respp) : KB_API_CLOSE;
}

static kb_api_result_t kb_ctrl_h_precs(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_ctrl_t *ctl = kb_ctrl_check(opaque, kb_req_ctx(req));
    return ctl ? kb_ctrl_precs_handle(ctl->svc->meta, ctl->reg, req, respp) : KB_API_CLOSE;
}

/* kb_ctrl_send_fn of a broker-only node: the plugin host's requests to the controller travel
 * on the channel's client; a controller known to be down fails at once. */
static int kb_ctrl_send(void *opaque, int16_t api_key, int16_t ver, const uint8_t *body, size_t len,
                        int32_t timeout_ms, kb_ctrl_resp_fn *cb, void *arg)
{
    kb_ctrl_t *ctl = opaque;
    bool down;
    pthread_mutex_lock(&ctl->mu);
    down = ctl->reported_down || ctl->last_ok_ms < 0 || ctl->stop;
    pthread_mutex_unlock(&ctl->mu);
    if (down)
        return KB_E_IO;
    return kb_ctrl_send_raw(ctl->kc, ctl->cfg->voter_id, api_key, ver, body, len, timeout_ms, cb,
                            arg);
}

/* ---- forwarding (design C5) ------------------------------------------------------------------ */

/* The APIs a broker-only node forwards to the controller in an Envelope (ACL changes too: the
 * controller commits them as AccessControlEntryRecords, docs/broker.md "ACLs"). */
static const int16_t kb_ctrl_fwd_keys[] = {
    KP_APIKEY_CreateAcls,
    KP_APIKEY_DeleteAcls,
    KP_APIKEY_CreateTopics,
    KP_APIKEY_DeleteTopics,
    KP_APIKEY_CreatePartitions,
    KP_APIKEY_AlterConfigs,
    KP_APIKEY_IncrementalAlterConfigs,
    KP_APIKEY_ElectLeaders,
};

/* The controller: one Envelope whose inner request runs as a connection-less request. */
typedef struct kb_ctrl_env_s {
    pthread_mutex_t mu;
    int refs;
    bool deferred, cancelled, finished;
    kb_req_t *outer;
    int16_t ver;
    int32_t corr;
    int16_t resp_hdr_ver;
    int status;
    uint8_t *body;
    size_t len;
} kb_ctrl_env_t;

static void kb_ctrl_env_unref(kb_ctrl_env_t *env)
{
    bool last;
    pthread_mutex_lock(&env->mu);
    last = --env->refs == 0;
    pthread_mutex_unlock(&env->mu);
    if (!last)
        return;
    free(env->body);
    pthread_mutex_destroy(&env->mu);
    free(env);
}

/* The EnvelopeResponse for a finished inner request: its response header and body. */
static kb_resp_t *kb_ctrl_env_answer(const kb_ctrl_env_t *env)
{
    kp_EnvelopeResponse_t resp;
    kp_writer_t inner, wr;
    kb_resp_t *r = NULL;

    kp_EnvelopeResponse_init(&resp);
    kp_writer_init(&inner);
    if (env->status == 0) {
        kp_write_int32(&inner, env->corr);
        if (env->resp_hdr_ver >= 1)
            kp_write_uvarint(&inner, 0); /* no tagged fields */
        kp_write_raw(&inner, env->body, env->len);
        resp.ResponseData.ptr = inner.buf;
        resp.ResponseData.len = (int32_t)inner.len;
    } else {
        resp.ErrorCode =
            env->status == KB_E_UNSUPPORTED ? KP_ERR_UNSUPPORTED_VERSION : KP_ERR_INVALID_REQUEST;
    }
    kp_writer_init(&wr);
    if (inner.err == 0 && kp_msg_encode(&kp_EnvelopeResponse_desc, &wr, &resp, env->ver) == 0)
        r = kb_resp_from_writer(&wr);
    kp_writer_free(&wr);
    kp_writer_free(&inner);
    return r;
}

static void kb_ctrl_env_done(void *opaque, int status, uint8_t *body, size_t len)
{
    kb_ctrl_env_t *env = opaque;
    bool uncancellable = false;
    pthread_mutex_lock(&env->mu);
    env->status = status;
    env->body = body;
    env->len = len;
    env->finished = true;
    if (env->deferred && !env->cancelled) {
        kb_resp_t *r = kb_ctrl_env_answer(env);
        int crc = r ? kb_req_complete(env->outer, r) : kb_req_complete_close(env->outer);
        /* Completed: the cancel callback will not run, its reference is dropped here. */
        uncancellable = crc == 0;
    }
    pthread_mutex_unlock(&env->mu);
    if (uncancellable)
        kb_ctrl_env_unref(env);
    kb_ctrl_env_unref(env);
}

static void kb_ctrl_env_cancel(void *opaque, kb_req_t *req)
{
    kb_ctrl_env_t *env = opaque;
    (void)req;
    pthread_mutex_lock(&env->mu);
    env->cancelled = true;
    pthread_mutex_unlock(&env->mu);
    kb_ctrl_env_unref(env);
}

static kb_api_result_t kb_ctrl_h_envelope(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kb_ctrl_t *ctl = kb_ctrl_check(opaque, ctx);
    kp_EnvelopeRequest_t rq;
    kp_RequestHeader_t hdr;
    kp_DefaultPrincipalData_t pd;
    kp_reader_t rd;
    kb_req_local_conf_t conf;
    kb_ctrl_env_t *env;
    kb_req_t *inner;
    char principal[512], peer[160], cid[256];
    int err = 0;
    int16_t key, ver, hv;

    if (!ctl || kb_ctrl_decode(ctx, &kp_EnvelopeRequest_desc, &rq) != 0)
        return KB_API_CLOSE;
    /* The inner request's header: key and version first, then the header of that version. */
    if (rq.RequestData.len < 8)
        return KB_API_CLOSE;
    kp_reader_init(&rd, rq.RequestData.ptr, (size_t)rq.RequestData.len);
    key = kp_read_int16(&rd);
    ver = kp_read_int16(&rd);
    hv = kp_request_header_version(key, ver);
    kp_reader_init(&rd, rq.RequestData.ptr, (size_t)rq.RequestData.len);
    kp_RequestHeader_init(&hdr);
    if (hv < 0 || kp_RequestHeader_decode(&rd, ctx->arena, &hdr, hv) != 0 ||
        key == KP_APIKEY_Envelope) {
        kb_log_info("ctrl", "%s: Envelope with an undecodable or nested request", ctx->peer);
        return KB_API_CLOSE;
    }
    snprintf(principal, sizeof(principal), "User:ANONYMOUS");
    if (rq.RequestPrincipal.len > 0) {
        kp_reader_t prd;
        kp_reader_init(&prd, rq.RequestPrincipal.ptr, (size_t)rq.RequestPrincipal.len);
        kp_DefaultPrincipalData_init(&pd);
        if (kp_msg_decode(&kp_DefaultPrincipalData_desc, &prd, ctx->arena, &pd, 0) != 0 ||
            pd.Type.len <= 0 || pd.Name.len < 0) {
            kb_log_info("ctrl", "%s: Envelope with an undecodable principal", ctx->peer);
            return KB_API_CLOSE;
        }
        snprintf(principal, sizeof(principal), "%.*s:%.*s", (int)pd.Type.len, pd.Type.ptr,
                 (int)pd.Name.len, pd.Name.ptr ? pd.Name.ptr : "");
    }
    snprintf(peer, sizeof(peer), "envelope from %s", ctx->peer);
    snprintf(cid, sizeof(cid), "%.*s", hdr.ClientId.len > 0 ? (int)hdr.ClientId.len : 0,
             hdr.ClientId.len > 0 ? hdr.ClientId.ptr : "");
    env = calloc(1, sizeof(*env));
    if (!env)
        return KB_API_CLOSE;
    pthread_mutex_init(&env->mu, NULL);
    env->refs = 2; /* this handler and the done callback */
    env->outer = req;
    env->ver = ctx->api_version;
    env->corr = hdr.CorrelationId;
    env->resp_hdr_ver = kp_response_header_version(key, ver);
    memset(&conf, 0, sizeof(conf));
    conf.api_key = key;
    conf.api_version = ver;
    conf.correlation_id = hdr.CorrelationId;
    conf.client_id = hdr.ClientId.len >= 0 ? cid : NULL;
    conf.listener = ctx->listener;
    conf.peer = peer;
    conf.principal = principal;
    conf.done = kb_ctrl_env_done;
    conf.done_opaque = env;
    inner = kb_req_local_new(ctl->kb->reg, &conf, rq.RequestData.ptr + rd.pos,
                             (size_t)rq.RequestData.len - rd.pos, &err);
    if (!inner) {
        env->status = err ? err : KB_E_PARSE;
        env->finished = true;
        env->refs = 1;
    } else {
        kb_req_local_run(inner);
        kb_req_local_release(inner);
    }
    pthread_mutex_lock(&env->mu);
    if (env->finished) {
        pthread_mutex_unlock(&env->mu);
        *respp = kb_ctrl_env_answer(env);
        kb_ctrl_env_unref(env);
        return *respp ? KB_API_RESPOND : KB_API_CLOSE;
    }
    /* The inner request waits (a deferred handler): answer when it finishes. The reference of
     * this handler passes to the cancel callback. */
    if (kb_req_defer(req, kb_ctrl_env_cancel, env) != 0) {
        env->cancelled = true;
        pthread_mutex_unlock(&env->mu);
        kb_ctrl_env_unref(env);
        return KB_API_CLOSE;
    }
    env->deferred = true;
    pthread_mutex_unlock(&env->mu);
    return KB_API_DEFERRED;
}

/* How long a broker waits for the controller's answer to a forwarded request: Kafka's
 * forwarding channel (retryTimeoutMs 60000). Longer than any commit of the controller, so the
 * answer of a request that commits comes back; a client that gives up earlier cancels it. */
#define KB_CTRL_FORWARD_TIMEOUT_MS 60000

/* A broker-only node: one request forwarded to the controller. */
typedef struct kb_ctrl_fw_s {
    kb_ctrl_t *ctl;
    pthread_mutex_t mu;
    int refs;
    bool cancelled;
    int64_t kc_id; /* the Envelope's kc_ request (0 until submitted) */
    kb_req_t *req;
    kb_api_handler_fn *local;
    void *local_opaque;
    kp_EnvelopeRequest_t env;
    uint8_t principal[600];
    uint8_t addr[16];
    uint8_t *frame; /* a copy: the client may go away before the client library encodes */
} kb_ctrl_fw_t;

static void kb_ctrl_fw_unref(kb_ctrl_fw_t *fw)
{
    bool last;
    pthread_mutex_lock(&fw->mu);
    last = --fw->refs == 0;
    pthread_mutex_unlock(&fw->mu);
    if (!last)
        return;
    pthread_mutex_destroy(&fw->mu);
    free(fw->frame);
    free(fw);
}

/* The client went away: nothing is answered, and an Envelope not yet sent (waiting for the
 * controller's connection) is dropped so that it cannot apply the change later. */
static void kb_ctrl_fw_cancel(void *opaque, kb_req_t *req)
{
    kb_ctrl_fw_t *fw = opaque;
    int64_t id;
    (void)req;
    pthread_mutex_lock(&fw->mu);
    fw->cancelled = true;
    id = fw->kc_id;
    pthread_mutex_unlock(&fw->mu);
    if (id > 0)
        kc_cancel(fw->ctl->kc, id); /* the callback still runs (and finds it cancelled) */
    kb_ctrl_fw_unref(fw);
}

/* Whether a failed kc_ request may have reached the controller (else nothing was sent). */
static bool kb_ctrl_fw_maybe_sent(int err)
{
    return !(err == KC_E_NO_VERSION || err == KC_E_NO_NODE || err == KC_E_ENCODE ||
             err == KC_E_INVALID || err == KC_E_NOMEM);
}

/* The relayed answer: the inner response without its header. NULL when unusable. */
static kb_resp_t *kb_ctrl_fw_relay(kb_reqctx_t *ctx, const kp_EnvelopeResponse_t *er)
{
    kp_reader_t rd;
    kb_resp_t *r;
    if (er->ErrorCode || er->ResponseData.len < 4)
        return NULL;
    kp_reader_init(&rd, er->ResponseData.ptr, (size_t)er->ResponseData.len);
    {
        kp_ResponseHeader_t h;
        kp_arena_t ar;
        int rc;
        kp_arena_init(&ar, 1u << 16);
        kp_ResponseHeader_init(&h);
        rc = kp_ResponseHeader_decode(&rd, &ar, &h, ctx->resp_hdr_version);
        kp_arena_free(&ar);
        if (rc != 0 || h.CorrelationId != ctx->correlation_id)
            return NULL;
    }
    r = kb_resp_new();
    if (r && kb_resp_append_copy(r, er->ResponseData.ptr + rd.pos,
                                 (size_t)er->ResponseData.len - rd.pos) != 0) {
        kb_resp_free(r);
        r = NULL;
    }
    return r;
}

static void kb_ctrl_fw_done(kc_client_t *kc, int err, int16_t ver, const uint8_t *body, size_t len,
                            void *opaque)
{
    kb_ctrl_fw_t *fw = opaque;
    kb_resp_t *r = NULL;
    (void)kc;
    pthread_mutex_lock(&fw->mu);
    if (!fw->cancelled) {
        kb_reqctx_t *ctx = kb_req_ctx(fw->req);
        if (err == KC_E_OK) {
            kp_EnvelopeResponse_t er;
            kp_reader_t rd;
            kp_arena_t ar;
            kp_arena_init(&ar, 0);
            kp_reader_init(&rd, body, len);
            kp_EnvelopeResponse_init(&er);
            if (kp_msg_decode(&kp_EnvelopeResponse_desc, &rd, &ar, &er, ver) == 0)
                r = kb_ctrl_fw_relay(ctx, &er);
            if (!r)
                kb_log_warn("ctrl",
                            "controller %" PRId32 " answered a forwarded request "
                            "unusably (error %d)",
                            fw->ctl->cfg->voter_id, er.ErrorCode);
            kp_arena_free(&ar);
        } else {
            kb_log_info("ctrl", "forwarding to controller %" PRId32 " failed: %s",
                        fw->ctl->cfg->voter_id, kc_err_str(err));
        }
        if (!r && err != KC_E_OK && kb_ctrl_fw_maybe_sent(err)) {
            /* The request may have reached the controller and may still commit: a retriable
             * NOT_CONTROLLER would invite a duplicate (a retried CreateTopics finding its own
             * topic). Kafka's forwarding answers REQUEST_TIMED_OUT: the outcome is unknown. */
            char msg[256];
            snprintf(msg, sizeof(msg),
                     "No answer from controller %" PRId32
                     " to the forwarded request (%s); the change may still be applied",
                     fw->ctl->cfg->voter_id, kc_err_str(err));
            r = kb_ctrl_fw_error_response(ctx, KP_ERR_REQUEST_TIMED_OUT, msg);
        } else if (!r) {
            /* Not sent, or the controller refused the Envelope itself: this node's own handler
             * answers, and its metadata being the controller's copy, a change is refused with
             * NOT_CONTROLLER naming the controller (retriable, nothing was applied). */
            if (fw->local(fw->local_opaque, fw->req, &r) != KB_API_RESPOND)
                r = NULL;
        }
        /* Completed: the cancel callback will not run, its reference is dropped here. */
        if ((r ? kb_req_complete(fw->req, r) : kb_req_complete_close(fw->req)) == 0)
            fw->refs--;
    }
    pthread_mutex_unlock(&fw->mu);
    kb_ctrl_fw_unref(fw);
}

static kb_api_result_t kb_ctrl_h_forward(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_ctrl_t *ctl = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kb_api_handler_fn *local = NULL;
    void *local_opaque = NULL;
    kb_ctrl_fw_t *fw;
    kp_DefaultPrincipalData_t pd;
    kp_writer_t pw;
    const char *colon;
    bool down;
    int64_t id;

    for (size_t i = 0; i < ctl->nfwd; i++)
        if (ctl->fwd[i].key == ctx->api_key) {
            local = ctl->fwd[i].fn;
            local_opaque = ctl->fwd[i].opaque;
        }
    if (!local)
        return KB_API_CLOSE;
    pthread_mutex_lock(&ctl->mu);
    down = ctl->reported_down || ctl->last_ok_ms < 0;
    pthread_mutex_unlock(&ctl->mu);
    /* The controller is unreachable: fail fast (this node's handler answers NOT_CONTROLLER).
     * The broker's own requests (a plugin's kbx local_request, KB_PRINCIPAL_INTERNAL) are
     * forwarded like a client's; the Envelope carries the internal principal, which the
     * controller's handlers treat as privileged there too. */
    if (down)
        return local(local_opaque, req, respp);
    fw = calloc(1, sizeof(*fw));
    if (!fw)
        return KB_API_CLOSE;
    pthread_mutex_init(&fw->mu, NULL);
    fw->ctl = ctl;
    fw->refs = 3; /* the kc callback, the cancel callback and this handler until it returns */
    fw->req = req;
    fw->local = local;
    fw->local_opaque = local_opaque;
    /* The principal as Kafka serialises it (DefaultPrincipalData v0). */
    kp_DefaultPrincipalData_init(&pd);
    colon = ctx->principal ? strchr(ctx->principal, ':') : NULL;
    pd.Type = colon ? (kp_str_t){ctx->principal, (int32_t)(colon - ctx->principal)}
                    : kb_ctrl_view("User");
    pd.Name = colon ? kb_ctrl_view(colon + 1) : kb_ctrl_view("ANONYMOUS");
    kp_writer_init(&pw);
    if (kp_msg_encode(&kp_DefaultPrincipalData_desc, &pw, &pd, 0) != 0 ||
        pw.len > sizeof(fw->principal)) {
        kp_writer_free(&pw);
        pthread_mutex_destroy(&fw->mu);
        free(fw);
        return KB_API_CLOSE;
    }
    memcpy(fw->principal, pw.buf, pw.len);
    kp_EnvelopeRequest_init(&fw->env);
    fw->env.RequestPrincipal.ptr = fw->principal;
    fw->env.RequestPrincipal.len = (int32_t)pw.len;
    kp_writer_free(&pw);
    fw->frame = malloc(ctx->frame_len ? ctx->frame_len : 1);
    if (!fw->frame) {
        pthread_mutex_destroy(&fw->mu);
        free(fw);
        return KB_API_CLOSE;
    }
    memcpy(fw->frame, ctx->frame, ctx->frame_len);
    fw->env.RequestData.ptr = fw->frame;
    fw->env.RequestData.len = (int32_t)ctx->frame_len;
    fw->env.ClientHostAddress.ptr = fw->addr;
    fw->env.ClientHostAddress.len = 4; /* 0.0.0.0: the peer address is only logged */
    if (kb_req_defer(req, kb_ctrl_fw_cancel, fw) != 0) {
        pthread_mutex_destroy(&fw->mu);
        free(fw->frame);
        free(fw);
        return KB_API_CLOSE;
    }
    id = kc_request_msg(ctl->kc, ctl->cfg->voter_id, &kp_EnvelopeRequest_desc, -1, &fw->env,
                        KB_CTRL_FORWARD_TIMEOUT_MS, 0, kb_ctrl_fw_done, fw);
    if (id > 0) {
        bool gone;
        pthread_mutex_lock(&fw->mu);
        fw->kc_id = id;
        gone = fw->cancelled;
        pthread_mutex_unlock(&fw->mu);
        if (gone) /* the client left before the id was known: drop it as the cancel would */
            kc_cancel(ctl->kc, id);
    } else {
        /* Not sent: the local answer, as for an unreachable controller. */
        kb_resp_t *r = NULL;
        pthread_mutex_lock(&fw->mu);
        if (!fw->cancelled) {
            int crc = local(local_opaque, req, &r) == KB_API_RESPOND && r
                          ? kb_req_complete(req, r)
                          : kb_req_complete_close(req);
            if (crc == 0)
                fw->refs--; /* the cancel callback will not run */
            fw->cancelled = true;
        }
        pthread_mutex_unlock(&fw->mu);
        kb_ctrl_fw_unref(fw); /* the kc callback's, which will not run */
    }
    kb_ctrl_fw_unref(fw); /* this handler's */
    return KB_API_DEFERRED;
}

/* Take over the forwarded APIs (broker-only node, at init). */
static int kb_ctrl_fwd_install(kb_ctrl_t *ctl, kb_api_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(kb_ctrl_fwd_keys) / sizeof(kb_ctrl_fwd_keys[0]); i++) {
        kb_api_range_t rg;
        kb_api_call_t call;
        int16_t key = kb_ctrl_fwd_keys[i];
        if (kb_api_get(reg, key, &rg) != 0 || kb_api_call_begin(reg, key, &call) != 0)
            continue;
        ctl->fwd[ctl->nfwd].key = key;
        ctl->fwd[ctl->nfwd].fn = call.fn;
        ctl->fwd[ctl->nfwd].opaque = call.opaque;
        kb_api_call_end(reg, &call);
        kb_api_unregister(reg, key);
        if (kb_api_register(reg, key, rg.min_ver, rg.max_ver, kb_ctrl_h_forward, ctl, rg.flags) !=
            0)
            return -1;
        ctl->nfwd++;
    }
    return 0;
}

/* ---- the replica manager (broker/repl) ----------------------------------------------------- */

static void kb_ctrl_repl_endpoints(kb_ctrl_t *ctl)
{
#ifdef KB_HAVE_REPL
    if (ctl->repl)
        kb_repl_endpoints_changed(ctl->repl);
#else
    (void)ctl;
#endif
}

/* ---- the module ------------------------------------------------------------------------------ */

static void kb_ctrl_free(kb_ctrl_t *ctl)
{
    if (!ctl)
        return;
    if (ctl->kc)
        kc_client_destroy(ctl->kc);
    if (ctl->hkc)
        kc_client_destroy(ctl->hkc);
    if (ctl->fkc)
        kc_client_destroy(ctl->fkc);
    kb_ctrl_reg_free(ctl->reg);
    kb_ctrl_elector_free(ctl->elector);
    pthread_cond_destroy(&ctl->cv);
    pthread_mutex_destroy(&ctl->mu);
    ctl->magic = 0;
    free(ctl);
}

static int kb_module_ctrl_init(kb_broker_t *kb, void **statep, char *errstr, size_t errstr_size)
{
    const kb_config_t *cfg = kb->cfg;
    kb_ctrl_t *ctl;
    pthread_condattr_t ca;
    int rc;

    ctl = calloc(1, sizeof(*ctl));
    if (!ctl) {
        snprintf(errstr, errstr_size, "out of memory");
        return -1;
    }
    ctl->magic = KB_CTRL_MAGIC;
    ctl->kb = kb;
    ctl->cfg = cfg;
    ctl->epoch = -1;
    ctl->last_ok_ms = -1;
    pthread_mutex_init(&ctl->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ctl->cv, &ca);
    pthread_condattr_destroy(&ca);
    ctl->svc = kb_apisvc_of(kb);
    if (!ctl->svc) {
        snprintf(errstr, errstr_size, "the ctrl module needs the api module");
        kb_ctrl_free(ctl);
        return -1;
    }
#ifdef KB_HAVE_REPL
    ctl->repl = kb_repl_of(kb);
#endif
    ctl->controller = kb_config_has_role(cfg, "controller");
    ctl->remote = !ctl->controller && kb_config_has_role(cfg, "broker");
    kb_uuid_random(&ctl->incarnation);
    if (ctl->controller) {
        ctl->reg = kb_ctrl_reg_new(cfg->broker_session_timeout_ms);
        if (!ctl->reg) {
            snprintf(errstr, errstr_size, "out of memory");
            kb_ctrl_free(ctl);
            return -1;
        }
        /* Controller-to-broker APIs are listed by ApiVersions on the controller listeners only. */
        rc = kb_api_set_controller_listeners(kb->reg, cfg->controller_listener_names);
        if (rc == 0)
            rc = kb_api_register(kb->reg, KP_APIKEY_BrokerRegistration, 0, 4, kb_ctrl_h_register,
                                 ctl, KB_API_CONTROLLER_ONLY);
        if (rc == 0)
            rc = kb_api_register(kb->reg, KP_APIKEY_BrokerHeartbeat, 0, 2, kb_ctrl_h_heartbeat, ctl,
                                 KB_API_CONTROLLER_ONLY);
        if (rc == 0)
            rc = kb_api_register(kb->reg, KP_APIKEY_UnregisterBroker, 0, 0, kb_ctrl_h_unregister,
                                 ctl, 0);
        if (rc == 0)
            rc = kb_api_register(kb->reg, KP_APIKEY_AlterPartition, 2, 3, kb_ctrl_h_alter_partition,
                                 ctl, KB_API_CONTROLLER_ONLY);
        if (rc == 0)
            rc = kb_api_register(kb->reg, KP_APIKEY_Envelope, 0, 0, kb_ctrl_h_envelope, ctl,
                                 KB_API_CONTROLLER_ONLY);
        if (rc == 0)
            rc = kb_api_register(kb->reg, KP_APIKEY_AllocateProducerIds, 0, 0, kb_ctrl_h_alloc_pids,
                                 ctl, KB_API_CONTROLLER_ONLY);
        if (rc == 0)
            rc = kb_api_register(kb->reg, KP_APIKEY_BumpLeaderEpochs, 0, 0, kb_ctrl_h_bump, ctl,
                                 KB_API_CONTROLLER_ONLY);
        if (rc == 0)
            rc = kb_api_register(kb->reg, KP_APIKEY_WritePluginRecords, 0, 0, kb_ctrl_h_precs, ctl,
                                 KB_API_CONTROLLER_ONLY);
        ctl->elector = kb_ctrl_elector_new(kb, ctl->svc->meta, kb_ctrl_usable, ctl, cfg->node_id);
        if (rc == 0)
            rc = ctl->elector ? kb_api_register(kb->reg, KP_APIKEY_ElectLeaders, 0, 2,
                                                kb_ctrl_elector_handle, ctl->elector, 0)
                              : KB_E_NOMEM;
        if (rc != 0) {
            snprintf(errstr, errstr_size, "cannot register the controller APIs (error %d)", rc);
            kb_api_unregister(kb->reg, KP_APIKEY_BrokerRegistration);
            kb_api_unregister(kb->reg, KP_APIKEY_BrokerHeartbeat);
            kb_api_unregister(kb->reg, KP_APIKEY_UnregisterBroker);
            kb_ctrl_free(ctl);
            return -1;
        }
    } else if (ctl->remote) {
        kc_opts_t o;
        char cid[64];
        kc_opts_init(&o);
        snprintf(cid, sizeof(cid), "kbroker-%" PRId32, cfg->node_id);
        o.client_id = cid;
        o.log_cb = kb_ctrl_kc_log;
        o.log_opaque = ctl;
        o.connect_timeout_ms = cfg->broker_heartbeat_interval_ms * 2;
        o.reconnect_backoff_max_ms = cfg->broker_heartbeat_interval_ms;
        ctl->kc = kc_client_new(&o, errstr, errstr_size);
        if (ctl->kc)
            ctl->hkc = kc_client_new(&o, errstr, errstr_size);
        if (ctl->hkc)
            ctl->fkc = kc_client_new(&o, errstr, errstr_size);
        if (!ctl->kc || !ctl->hkc || !ctl->fkc ||
            kc_client_node_set(ctl->kc, cfg->voter_id, cfg->voter_host, cfg->voter_port) != 0 ||
            kc_client_node_set(ctl->hkc, cfg->voter_id, cfg->voter_host, cfg->voter_port) != 0 ||
            kc_client_node_set(ctl->fkc, cfg->voter_id, cfg->voter_host, cfg->voter_port) != 0) {
            if (ctl->kc && ctl->hkc && ctl->fkc)
                snprintf(errstr, errstr_size, "controller.quorum.voters: cannot use %s:%d",
                         cfg->voter_host, cfg->voter_port);
            kb_ctrl_free(ctl);
            return -1;
        }
        /* This node's metadata log is the controller's copy from now on. */
        kb_meta_set_remote(ctl->svc->meta, cfg->voter_id);
        kb_meta_set_pid_source(ctl->svc->meta, kb_ctrl_pid_source, ctl);
        kb_meta_set_internal_creator(ctl->svc->meta, kb_ctrl_internal_creator, ctl);
        /* ElectLeaders is forwarded; this stand-in answers NOT_CONTROLLER when that fails. */
        ctl->elector = kb_ctrl_elector_new(kb, ctl->svc->meta, NULL, NULL, cfg->voter_id);
        if (!ctl->elector ||
            kb_api_register(kb->reg, KP_APIKEY_ElectLeaders, 0, 2, kb_ctrl_elector_handle,
                            ctl->elector, 0) != 0 ||
            kb_ctrl_fwd_install(ctl, kb->reg) != 0) {
            snprintf(errstr, errstr_size, "cannot install the forwarding handlers");
            kb_ctrl_free(ctl);
            return -1;
        }
    }
    *statep = ctl;
    return 0;
}

#ifdef KB_HAVE_REPL
/* kb_repl_ctrl_fn (broker/repl): the replica manager's AlterPartition requests go to the
 * controller on the channel's client (driven by "kb-ctrl"). */
static int64_t kb_ctrl_repl_send(void *opaque, int16_t api_key, int16_t min_ver, int16_t max_ver,
                                 kc_encode_cb_t *encode, kc_resp_cb_t *cb, void *cb_opaque)
{
    kb_ctrl_t *ctl = opaque;
    return kc_request(ctl->kc, ctl->cfg->voter_id, api_key, min_ver, max_ver, encode, 0, 0, cb,
                      cb_opaque);
}
#endif

#ifdef KB_HAVE_REPL
/* A combined node's leaders send AlterPartition to the controller in this process: through
 * its own controller listener, like every other broker's ("kb-ctrl-self" drives the client). */
static int64_t kb_ctrl_repl_send_self(void *opaque, int16_t api_key, int16_t min_ver,
                                      int16_t max_ver, kc_encode_cb_t *encode, kc_resp_cb_t *cb,
                                      void *cb_opaque)
{
    kb_ctrl_t *ctl = opaque;
    return kc_request(ctl->kc, ctl->cfg->node_id, api_key, min_ver, max_ver, encode, 0, 0, cb,
                      cb_opaque);
}

static void *kb_ctrl_self_thread(void *arg)
{
    kb_ctrl_t *ctl = arg;
    pthread_mutex_lock(&ctl->mu);
    while (!ctl->stop) {
        pthread_mutex_unlock(&ctl->mu);
        kc_client_poll(ctl->kc, KB_CTRL_TICK_MS);
        pthread_mutex_lock(&ctl->mu);
    }
    pthread_mutex_unlock(&ctl->mu);
    return NULL;
}

static void kb_ctrl_self_channel(kb_ctrl_t *ctl, kb_broker_t *kb)
{
    const kb_config_t *cfg = ctl->cfg;
    const kb_config_listener_t *l = NULL;
    const char *names = cfg->controller_listener_names, *host;
    char errstr[256];
    kc_opts_t o;

    if (!names || !*names || !kb_repl_of(kb))
        return; /* a self-contained node: no other broker, no follower, no ISR change */
    for (size_t i = 0; i < cfg->lst_cnt && !l; i++)
        if (kb_props_list_has(names, cfg->lst[i].name, true))
            l = &cfg->lst[i];
    if (!l)
        return;
    host = !l->host[0] || !strcmp(l->host, "0.0.0.0") ? "127.0.0.1"
           : !strcmp(l->host, "::")                   ? "::1"
                                                      : l->host;
    kc_opts_init(&o);
    o.client_id = "kbroker-self";
    o.log_cb = kb_ctrl_kc_log;
    o.log_opaque = ctl;
    ctl->kc = kc_client_new(&o, errstr, sizeof(errstr));
    if (!ctl->kc ||
        kc_client_node_set(ctl->kc, cfg->node_id, host,
                           kb_server_listener_port(kb->srv, l->name)) != 0 ||
        pthread_create(&ctl->fthr, NULL, kb_ctrl_self_thread, ctl) != 0) {
        kb_log_error("ctrl",
                     "no channel to this node's own controller: its leaders keep their ISR");
        return;
    }
    ctl->fthr_started = true;
    ctl->self_chan = true;
    kb_repl_set_ctrl(kb_repl_of(kb), kb_ctrl_repl_send_self, ctl);
}
#endif

static int kb_module_ctrl_start(kb_broker_t *kb, void *state)
{
    kb_ctrl_t *ctl = state;
    (void)kb;
    if (ctl->controller) {
        /* The registrations of the image, each with a fresh session (Kafka's failover): a
         * broker that died meanwhile is fenced once the session timeout passes. */
        kb_meta_broker_t *list;
        size_t n;
        if (kb_meta_brokers(ctl->svc->meta, &list, &n) == 0) {
            for (size_t i = 0; i < n; i++) {
                kb_ctrl_broker_t b;
                memset(&b, 0, sizeof(b));
                b.id = list[i].id;
                b.epoch = list[i].epoch;
                b.incarnation = list[i].incarnation;
                b.fenced = list[i].fenced;
                b.has_rack = list[i].has_rack;
                memcpy(b.rack, list[i].rack, sizeof(b.rack));
                for (int32_t j = 0; j < list[i].nendpoints && j < KB_CTRL_MAX_ENDPOINTS; j++) {
                    kb_ctrl_endpoint_t *e = &b.endpoints[b.nendpoints++];
                    memcpy(e->name, list[i].endpoints[j].name, sizeof(e->name));
                    memcpy(e->host, list[i].endpoints[j].host, sizeof(e->host));
                    e->port = list[i].endpoints[j].port;
                    e->security_protocol = list[i].endpoints[j].security_protocol;
                }
                kb_ctrl_reg_load(ctl->reg, &b, kb_time_wall_ms());
            }
            free(list);
        }
    }
    if (ctl->controller && kb_config_has_role(ctl->cfg, "broker")) {
        /* The combined node registers itself: the advertised listeners, bound ports. */
        kb_ctrl_broker_t b;
        memset(&b, 0, sizeof(b));
        b.id = ctl->cfg->node_id;
        b.incarnation = ctl->incarnation;
        for (size_t i = 0; i < ctl->cfg->adv_cnt && i < KB_CTRL_MAX_ENDPOINTS; i++) {
            kb_ctrl_endpoint_t *e = &b.endpoints[b.nendpoints++];
            snprintf(e->name, sizeof(e->name), "%s", ctl->cfg->adv[i].name);
            snprintf(e->host, sizeof(e->host), "%s", ctl->cfg->adv[i].host);
            e->port = ctl->cfg->adv[i].port ? ctl->cfg->adv[i].port
                                            : kb_server_listener_port(kb->srv, e->name);
        }
        kb_ctrl_broker_t old;
        int64_t prev = kb_ctrl_reg_get(ctl->reg, b.id, &old) == 0 ? old.epoch : -1;
        if (kb_ctrl_reg_register(ctl->reg, &b, prev, kb_time_wall_ms(), -1, &ctl->self_epoch) !=
            0) {
            kb_log_error("ctrl", "cannot register this node with itself");
        } else {
            b.epoch = ctl->self_epoch;
            kb_ctrl_commit_register(ctl, &b);
#ifdef KB_HAVE_REPL
            if (kb_repl_of(kb))
                kb_repl_set_broker_epoch(kb_repl_of(kb), ctl->self_epoch);
#endif
        }
        kb_ctrl_reap(ctl); /* its first heartbeat: unfenced */
    }
    if (ctl->controller) {
        ctl->mlisten = kb_meta_listen(ctl->svc->meta, kb_ctrl_meta_event, ctl, false);
        if (!ctl->mlisten)
            return -1;
        kb_apisvc_set_meta_fetch(ctl->svc, kb_ctrl_meta_fetch, ctl);
        kb_meta_set_assigner(ctl->svc->meta, kb_ctrl_assign_cb, ctl);
    }
    if (ctl->remote) {
        if (pthread_create(&ctl->fthr, NULL, kb_ctrl_fetch_thread, ctl) != 0) {
            kb_log_error("ctrl", "cannot start the metadata fetcher thread");
            return -1;
        }
        ctl->fthr_started = true;
    }
    if (ctl->controller || ctl->remote) {
        kb_apisvc_set_cluster(ctl->svc, kb_ctrl_cluster, ctl);
        if (pthread_create(&ctl->thr, NULL, kb_ctrl_thread, ctl) != 0) {
            kb_log_error("ctrl", "cannot start the control-plane thread");
            return -1;
        }
        ctl->thr_started = true;
    }
#ifdef KB_HAVE_REPL
    if (ctl->remote && kb_repl_of(kb))
        kb_repl_set_ctrl(kb_repl_of(kb), kb_ctrl_repl_send, ctl);
    if (ctl->controller && kb_config_has_role(ctl->cfg, "broker"))
        kb_ctrl_self_channel(ctl, kb);
#endif
    if (ctl->remote)
        kb_apisvc_set_ctrl_send(ctl->svc, kb_ctrl_send, ctl);
    if (ctl->remote)
        kb_log_info("ctrl", "broker %" PRId32 ": controller %" PRId32 " at %s:%d",
                    ctl->cfg->node_id, ctl->cfg->voter_id, ctl->cfg->voter_host,
                    ctl->cfg->voter_port);
    return 0;
}

static void kb_module_ctrl_stop(kb_broker_t *kb, void *state)
{
    kb_ctrl_t *ctl = state;
    (void)kb;
#ifdef KB_HAVE_REPL
    if ((ctl->remote || ctl->self_chan) && kb_repl_of(kb))
        kb_repl_set_ctrl(kb_repl_of(kb), NULL, NULL);
#endif
    if (ctl->remote)
        kb_apisvc_set_ctrl_send(ctl->svc, NULL, NULL);
    if (!ctl->thr_started)
        return;
    pthread_mutex_lock(&ctl->mu);
    if (ctl->remote && ctl->epoch >= 0 && ctl->last_ok_ms >= 0) {
        /* Controlled shutdown: ask, and wait (bounded) until the controller lets us go. */
        struct timespec dl = kb_time_mono_deadline(ctl->cfg->broker_session_timeout_ms);
        ctl->want_shutdown = true;
        ctl->next_ms = 0;
        kc_client_wakeup(ctl->kc);
        kc_client_wakeup(ctl->hkc);
        while (!ctl->should_shutdown && !ctl->reported_down && ctl->epoch >= 0)
            if (pthread_cond_timedwait(&ctl->cv, &ctl->mu, &dl) != 0)
                break;
        kb_log_info("ctrl", "controlled shutdown %s",
                    ctl->should_shutdown ? "acknowledged by the controller"
                                         : "not acknowledged (controller unreachable)");
    }
    ctl->stop = true;
    pthread_cond_broadcast(&ctl->cv);
    kb_ctrl_mfetch_wake(ctl, true);
    pthread_mutex_unlock(&ctl->mu);
    if (ctl->kc)
        kc_client_wakeup(ctl->kc);
    if (ctl->hkc)
        kc_client_wakeup(ctl->hkc);
    if (ctl->fkc)
        kc_client_wakeup(ctl->fkc);
    pthread_join(ctl->thr, NULL);
    ctl->thr_started = false;
    if (ctl->fthr_started)
        pthread_join(ctl->fthr, NULL);
    ctl->fthr_started = false;
    if (ctl->mlisten)
        kb_meta_unlisten(ctl->svc->meta, ctl->mlisten);
    ctl->mlisten = NULL;
    kb_apisvc_set_meta_fetch(ctl->svc, NULL, NULL);
    if (ctl->controller)
        kb_meta_set_assigner(ctl->svc->meta, NULL, NULL);
    kb_apisvc_set_cluster(ctl->svc, NULL, NULL);
}

static void kb_module_ctrl_fini(kb_broker_t *kb, void *state)
{
    kb_ctrl_t *ctl = state;
    if (!ctl)
        return;
    kb_module_ctrl_stop(kb, ctl);
    if (ctl->controller) {
        kb_api_unregister(kb->reg, KP_APIKEY_BrokerRegistration);
        kb_api_unregister(kb->reg, KP_APIKEY_BrokerHeartbeat);
        kb_api_unregister(kb->reg, KP_APIKEY_UnregisterBroker);
        kb_api_unregister(kb->reg, KP_APIKEY_AlterPartition);
        kb_api_unregister(kb->reg, KP_APIKEY_Envelope);
        kb_api_unregister(kb->reg, KP_APIKEY_AllocateProducerIds);
        kb_api_unregister(kb->reg, KP_APIKEY_BumpLeaderEpochs);
        kb_api_unregister(kb->reg, KP_APIKEY_WritePluginRecords);
        kb_api_unregister(kb->reg, KP_APIKEY_ElectLeaders);
    }
    for (size_t i = 0; i < ctl->nfwd; i++)
        kb_api_unregister(kb->reg, ctl->fwd[i].key);
    kb_ctrl_free(ctl);
}

const kb_module_t kb_module_ctrl = {
    .name = "ctrl",
    .init = kb_module_ctrl_init,
    .start = kb_module_ctrl_start,
    .stop = kb_module_ctrl_stop,
    .fini = kb_module_ctrl_fini,
};
