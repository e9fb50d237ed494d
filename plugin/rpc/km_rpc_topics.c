/*
 * km_rpc_topics.c - StartMirrorTopics (95) and StopMirrorTopics (96) / PauseMirrorTopics (102)
 * / ResumeMirrorTopics (103). Runs on the coordinator loop (km_rpc_int.h).
 *
 * Topic association is the topic config mirror.name=<mirror>[.paused|.stopped]; it is set only
 * through the host's internal path: CreateTopics v8 with MirrorInfo (a new mirror topic gets
 * the source topic id, partition count and mirror.name in one request) and
 * IncrementalAlterConfigs SET/DELETE of mirror.name (existing topics), both sent with kbx
 * local_request, i.e. as the broker's internal principal, which kbroker allows to touch the
 * hidden key (docs/broker.md "mirror.name").
 */
#define KM_LOG_COMPONENT "kmirror.rpc"
#include <stdio.h>
#include <string.h>

#include "catalog/km_catalog.h"
#include "core/km_plugin_types.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "mirror/km_mirror.h"
#include "mirror/km_mpart.h"
#include "rpc/km_rpc_int.h"
#include "rpc/km_srcadm.h"
#include "sync/km_sync.h"
#include "util/km_log.h"
#include "util/km_mem.h"
#include "util/km_pattern.h"
#include "core/km_config.h"

#define KM_RPC_OP_ALTER 7
/* Topics per CreateTopics / IncrementalAlterConfigs sent to the host: a request for thousands of
 * topics is sent as consecutive requests of at most this many, one after the other. Each topic
 * is a controller commit (kbroker: a metadata log batch and its fsync); one request for 500 held
 * the forwarding connection of a broker-only node for seconds, so its controller heartbeat
 * behind it timed out and the connection, with the request, was dropped (scenario scale). */
#define KM_RPC_TOPICS_CHUNK 20

enum { KM_ACT_NONE = 0, KM_ACT_CREATE = 1, KM_ACT_ALTER = 2 };

typedef struct km_item {
    const char *name; /* in the request arena */
    kbx_uuid_t id;
    int32_t parts;
    bool from_pattern;
    int act;
    const char *value; /* mirror.name to set (KM_ACT_ALTER) */
    int16_t ec;
    kp_str_t msg;
    bool leg;   /* Resume: asked of the other brokers too (their FAILED partitions) */
    bool sent;  /* in the CreateTopics / IncrementalAlterConfigs request in flight */
    bool raced; /* CreateTopics: TOPIC_ALREADY_EXISTS; settled against the catalog */
} km_item_t;

typedef struct km_topics_st {
    int64_t wait_deadline_ns; /* read-your-writes wait for the catalog */
    bool need_source;         /* Start: resolve against the source's topic list */
    const kp_str_t *patterns; /* Stop: Patterns, stored in the filters before the topics move */
    int32_t npatterns;
    char *mirror;
    km_item_t *items;
    size_t n, cap;
    km_pattern_t **inc, **exc;
    size_t ninc, nexc;
    int pending;
    size_t create_next, alter_next; /* first item not sent yet, per action */
    int32_t timeout_ms;             /* of each CreateTopics */
} km_topics_st_t;

static const char *km_topics_host_errstr(int32_t status)
{
#define KM_TOPICS_KBX_STR(name, desc)                                                              \
    if (status == name)                                                                            \
        return desc;
    KBX_ERR_MAP(KM_TOPICS_KBX_STR)
#undef KM_TOPICS_KBX_STR
    return "host error";
}

static void km_topics_st_free(km_rpc_req_t *req)
{
    km_topics_st_t *st = req->st;

    if (st == NULL)
        return;
    for (size_t i = 0; i < st->ninc; i++)
        km_pattern_free(st->inc[i]);
    for (size_t i = 0; i < st->nexc; i++)
        km_pattern_free(st->exc[i]);
    km_free(req->cm, st->inc);
    km_free(req->cm, st->exc);
    req->st = NULL; /* the rest lives in the request arena */
}

static km_topics_st_t *km_topics_st_new(km_rpc_req_t *req, const char *mirror, size_t cap)
{
    km_topics_st_t *st = kp_arena_calloc(&req->ar, 1, sizeof(*st));

    if (st == NULL)
        return NULL;
    st->mirror = kp_arena_alloc(&req->ar, strlen(mirror) + 1);
    st->items = kp_arena_calloc(&req->ar, cap + 1, sizeof(*st->items));
    if (st->mirror == NULL || st->items == NULL)
        return NULL;
    memcpy(st->mirror, mirror, strlen(mirror) + 1);
    st->cap = cap;
    req->st = st;
    req->st_free = km_topics_st_free;
    return st;
}

static km_item_t *km_topics_find(km_topics_st_t *st, const char *name)
{
    for (size_t i = 0; i < st->n; i++)
        if (strcmp(st->items[i].name, name) == 0)
            return &st->items[i];
    return NULL;
}

static km_item_t *km_topics_add(km_rpc_req_t *req, km_topics_st_t *st, const char *name)
{
    km_item_t *it;

    if (st->n == st->cap) {
        size_t ncap = st->cap * 2 + 8;
        km_item_t *nv = kp_arena_calloc(&req->ar, ncap, sizeof(*nv));
        if (nv == NULL)
            return NULL;
        memcpy(nv, st->items, st->n * sizeof(*nv));
        st->items = nv;
        st->cap = ncap;
    }
    it = &st->items[st->n++];
    memset(it, 0, sizeof(*it));
    it->name = name;
    it->msg.len = -1;
    return it;
}

static void km_item_err(km_rpc_req_t *req, km_item_t *it, int16_t ec, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void km_item_err(km_rpc_req_t *req, km_item_t *it, int16_t ec, const char *fmt, ...)
{
    char buf[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    it->ec = ec;
    it->msg = km_rpc_str(req, buf);
    it->act = KM_ACT_NONE;
}

/* Compile every pattern of list into *out (appended). false: answered with an error. */
static bool km_topics_compile(km_rpc_req_t *req, const char *what, const kp_str_t *v, int32_t cnt,
                              const char *extra, km_pattern_t ***out, size_t *nout)
{
    size_t total = (size_t)(cnt > 0 ? cnt : 0) + (extra != NULL && extra[0] != '\0');
    char err[256];

    if (total == 0)
        return true;
    *out = km_calloc(req->cm, total, sizeof(**out));
    if (*out == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return false;
    }
    for (int32_t i = 0; i < cnt; i++) {
        if (v[i].len < 0 || km_pattern_compile(req->cm, v[i].ptr, (size_t)v[i].len, &(*out)[*nout],
                                               err, sizeof(err)) != KM_OK) {
            km_rpc_fail(req, KP_ERR_INVALID_REGULAR_EXPRESSION, "%s[%d] '%.*s': %s", what, (int)i,
                        (int)(v[i].len > 0 ? (v[i].len > 200 ? 200 : v[i].len) : 0),
                        v[i].ptr != NULL ? v[i].ptr : "", v[i].len < 0 ? "null pattern" : err);
            return false;
        }
        (*nout)++;
    }
    if (extra != NULL && extra[0] != '\0') {
        if (km_pattern_compile(req->cm, extra, strlen(extra), &(*out)[*nout], err, sizeof(err)) !=
            KM_OK) {
            km_rpc_fail(req, KP_ERR_INVALID_REGULAR_EXPRESSION, "the mirror's %s: %s", what, err);
            return false;
        }
        (*nout)++;
    }
    return true;
}

/* ================================ answering ============================================== */

static void km_start_answer(km_rpc_req_t *req)
{
    km_topics_st_t *st = req->st;
    kp_StartMirrorTopicsResponse_t resp;

    kp_StartMirrorTopicsResponse_init(&resp);
    resp.Topics.cnt = 0;
    resp.Topics.v = kp_arena_calloc(&req->ar, st->n + 1, sizeof(*resp.Topics.v));
    if (resp.Topics.v == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    for (size_t i = 0; i < st->n; i++) {
        kp_StartMirrorTopicsResponse_TopicResult_t *r = &resp.Topics.v[resp.Topics.cnt++];
        r->TopicName = km_rpc_str(req, st->items[i].name);
        r->ErrorCode = st->items[i].ec;
        r->ErrorMessage = st->items[i].msg;
        if (st->items[i].ec == 0)
            km_log_info(req->cm, "mirror %s: topic %s started", st->mirror, st->items[i].name);
    }
    km_rpc_complete(req, &resp);
}

static void km_change_answer(km_rpc_req_t *req)
{
    km_topics_st_t *st = req->st;
    size_t n = st->n;

    if (req->api_key == 96) {
        kp_StopMirrorTopicsResponse_t resp;
        kp_StopMirrorTopicsResponse_init(&resp);
        resp.Topics.v = kp_arena_calloc(&req->ar, n + 1, sizeof(*resp.Topics.v));
        if (resp.Topics.v == NULL)
            goto nomem;
        resp.Topics.cnt = (int32_t)n;
        for (size_t i = 0; i < n; i++) {
            resp.Topics.v[i].Name = km_rpc_str(req, st->items[i].name);
            resp.Topics.v[i].ErrorCode = st->items[i].ec;
            resp.Topics.v[i].ErrorMessage = st->items[i].msg;
        }
        km_rpc_complete(req, &resp);
    } else if (req->api_key == 102) {
        kp_PauseMirrorTopicsResponse_t resp;
        kp_PauseMirrorTopicsResponse_init(&resp);
        resp.Topics.v = kp_arena_calloc(&req->ar, n + 1, sizeof(*resp.Topics.v));
        if (resp.Topics.v == NULL)
            goto nomem;
        resp.Topics.cnt = (int32_t)n;
        for (size_t i = 0; i < n; i++) {
            resp.Topics.v[i].TopicName = km_rpc_str(req, st->items[i].name);
            resp.Topics.v[i].ErrorCode = st->items[i].ec;
            resp.Topics.v[i].ErrorMessage = st->items[i].msg;
        }
        km_rpc_complete(req, &resp);
    } else {
        kp_ResumeMirrorTopicsResponse_t resp;
        kp_ResumeMirrorTopicsResponse_init(&resp);
        resp.MirrorName = km_rpc_str(req, st->mirror);
        resp.Topics.v = kp_arena_calloc(&req->ar, n + 1, sizeof(*resp.Topics.v));
        if (resp.Topics.v == NULL)
            goto nomem;
        resp.Topics.cnt = (int32_t)n;
        for (size_t i = 0; i < n; i++) {
            resp.Topics.v[i].Name = km_rpc_str(req, st->items[i].name);
            resp.Topics.v[i].ErrorCode = st->items[i].ec;
            /* The seed's Resume layout has no per-topic message: log it instead. */
            if (st->items[i].ec != 0 && st->items[i].msg.len > 0)
                km_log_info(req->cm, "ResumeMirrorTopics %s/%s: %.*s", st->mirror,
                            st->items[i].name, (int)st->items[i].msg.len, st->items[i].msg.ptr);
        }
        km_rpc_complete(req, &resp);
    }
    return;
nomem:
    km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
}

static void km_topics_answer_now(km_rpc_req_t *req)
{
    if (req->api_key == 95)
        km_start_answer(req);
    else
        km_change_answer(req);
}

/* A create that found the topic existing (TOPIC_ALREADY_EXISTS): did another request (topic
 * discovery, another operator's start through another broker) create the same mirror topic,
 * same source topic id and this mirror, meanwhile? 1 yes, -1 no (another topic), 0 the
 * catalog does not show it yet. */
static int km_topics_raced_same(km_plugin_t *cm, const km_topics_st_t *st, const km_item_t *it)
{
    const km_cat_topic_t *t = km_catalog_topic_find(&cm->catalog, it->name);

    if (t == NULL || t->partition_count == 0 || t->mirror == NULL)
        return t != NULL && t->partition_count > 0 && memcmp(&t->id, &it->id, sizeof(it->id)) != 0
                   ? -1
                   : 0;
    if (memcmp(&t->id, &it->id, sizeof(it->id)) != 0 || strcmp(t->mirror, st->mirror) != 0)
        return -1;
    return 1;
}

/* Give every raced create its final result before the answer: the same mirror topic is
 * success; anything else (or nothing shown before the deadline) TOPIC_ALREADY_EXISTS. */
static void km_topics_settle_raced(km_rpc_req_t *req)
{
    km_topics_st_t *st = req->st;

    for (size_t i = 0; i < st->n; i++) {
        km_item_t *it = &st->items[i];
        if (!it->raced)
            continue;
        it->raced = false;
        if (km_topics_raced_same(req->cm, st, it) == 1) {
            km_log_info(req->cm,
                        "mirror %s: topic %s was created meanwhile by another request, as the "
                        "same mirror topic (same topic id)",
                        st->mirror, it->name);
            continue;
        }
        it->ec = KP_ERR_TOPIC_ALREADY_EXISTS;
        it->msg = km_rpc_str(req, "A topic of this name was created meanwhile; start it again "
                                  "to check its topic id");
        it->act = KM_ACT_NONE;
    }
}

/* Does the catalog show every change that succeeded? */
static bool km_topics_visible(km_rpc_req_t *req)
{
    km_topics_st_t *st = req->st;
    km_plugin_t *cm = req->cm;

    for (size_t i = 0; i < st->n; i++) {
        const km_item_t *it = &st->items[i];
        const km_cat_topic_t *t;
        char base[256];
        km_desired_t d;

        if (it->raced) {
            if (km_topics_raced_same(cm, st, it) == 0)
                return false;
            continue;
        }
        if (it->act == KM_ACT_NONE || it->ec != 0 || it->value == NULL)
            continue;
        t = km_catalog_topic_find(&cm->catalog, it->name);
        if (!km_catalog_parse_mirror_name(it->value, base, sizeof(base), &d) || t == NULL ||
            t->mirror == NULL || strcmp(t->mirror, base) != 0 || t->desired != d)
            return false;
    }
    return true;
}

static void km_topics_recheck(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                              int32_t tag);

/* How long the answer waits for the catalog: 5 s for our own changes (committed either way);
 * 30 s when a create raced another one (topic discovery creates what a pattern just added to
 * topics.include), since the raced topic's only other answer is an error: with 2,000 partitions
 * on a loaded CI machine the other create's metadata took more than 5 s to reach this broker. */
static int64_t km_topics_wait_ms(const km_topics_st_t *st)
{
    for (size_t i = 0; i < st->n; i++)
        if (st->items[i].raced)
            return 30000;
    return 5000;
}

/* Answer once the metadata listener has brought the changes into the catalog, so that the
 * client's next request (through this broker) sees them; bounded by a deadline, after which
 * the answer goes anyway (the changes are committed). */
static void km_topics_answer(km_rpc_req_t *req)
{
    km_topics_st_t *st = req->st;
    km_plugin_t *cm = req->cm;
    int64_t now = cm->ref.api->clock_monotonic_ns(cm->ref.host);

    if (st->wait_deadline_ns == 0)
        st->wait_deadline_ns = now + (int64_t)km_topics_wait_ms(st) * 1000000;
    if (km_topics_visible(req) || now >= st->wait_deadline_ns ||
        km_rpc_after(req, 10, km_topics_recheck, 0) != KBX_OK) {
        if (!km_topics_visible(req))
            km_log_warn(cm,
                        "%s on mirror %s: answering before this broker's metadata shows "
                        "the changes",
                        req->api_key == 95 ? "StartMirrorTopics" : "a topic state change",
                        st->mirror);
        km_topics_settle_raced(req);
        km_topics_answer_now(req);
    }
}

static void km_topics_recheck(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                              int32_t tag)
{
    (void)status;
    (void)body;
    (void)len;
    (void)tag;
    km_topics_answer(req);
}

/* ================================ host requests ========================================= */

static void km_topics_step_done(km_rpc_req_t *req)
{
    km_topics_st_t *st = req->st;

    if (--st->pending == 0)
        km_topics_answer(req);
}

static void km_topics_send_create(km_rpc_req_t *req);
static void km_topics_send_alter(km_rpc_req_t *req);

static void km_topics_on_create(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                                int32_t tag)
{
    km_topics_st_t *st = req->st;
    kp_CreateTopicsResponse_t resp;
    kp_reader_t rd;

    if (status == KBX_OK) {
        kp_reader_init(&rd, body, len);
        kp_CreateTopicsResponse_init(&resp);
        if (kp_CreateTopicsResponse_decode(&rd, &req->ar, &resp, (int16_t)tag) != 0)
            status = KBX_ERR_INVALID;
    }
    for (size_t i = 0; i < st->n; i++) {
        km_item_t *it = &st->items[i];
        bool answered = false;
        if (it->act != KM_ACT_CREATE || !it->sent)
            continue;
        it->sent = false;
        for (int32_t k = 0; status == KBX_OK && k < resp.Topics.cnt && !answered; k++) {
            const kp_CreateTopicsResponse_CreatableTopicResult_t *r = &resp.Topics.v[k];
            if (r->Name.len != (int32_t)strlen(it->name) ||
                memcmp(r->Name.ptr, it->name, (size_t)r->Name.len) != 0)
                continue;
            answered = true;
            it->ec = r->ErrorCode;
            it->msg = r->ErrorCode != 0 ? r->ErrorMessage : km_rpc_str(req, NULL);
            if (r->ErrorCode == KP_ERR_TOPIC_ALREADY_EXISTS) {
                /* Settled before the answer (km_topics_settle_raced): topic discovery or
                 * another start may have created the same mirror topic meanwhile. */
                it->ec = 0;
                it->msg = km_rpc_str(req, NULL);
                it->raced = true;
            }
        }
        if (!answered)
            km_item_err(req, it, KP_ERR_UNKNOWN_SERVER_ERROR, "CreateTopics failed: %s",
                        status != KBX_OK ? km_topics_host_errstr(status) : "topic not answered");
    }
    km_topics_send_create(req); /* the next chunk, if any */
    km_topics_step_done(req);
}

static void km_topics_on_alter(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                               int32_t tag)
{
    km_topics_st_t *st = req->st;
    kp_IncrementalAlterConfigsResponse_t resp;
    kp_reader_t rd;

    (void)tag;
    if (status == KBX_OK) {
        kp_reader_init(&rd, body, len);
        kp_IncrementalAlterConfigsResponse_init(&resp);
        if (kp_IncrementalAlterConfigsResponse_decode(&rd, &req->ar, &resp, 1) != 0)
            status = KBX_ERR_INVALID;
    }
    for (size_t i = 0; i < st->n; i++) {
        km_item_t *it = &st->items[i];
        bool answered = false;
        if (it->act != KM_ACT_ALTER || !it->sent)
            continue;
        it->sent = false;
        for (int32_t k = 0; status == KBX_OK && k < resp.Responses.cnt && !answered; k++) {
            const kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_t *r =
                &resp.Responses.v[k];
            if (r->ResourceName.len != (int32_t)strlen(it->name) ||
                memcmp(r->ResourceName.ptr, it->name, (size_t)r->ResourceName.len) != 0)
                continue;
            answered = true;
            it->ec = r->ErrorCode;
            it->msg = r->ErrorCode != 0 ? r->ErrorMessage : km_rpc_str(req, NULL);
            if (r->ErrorCode == 0)
                km_log_info(req->cm, "topic %s: mirror.name set to %s", it->name, it->value);
        }
        if (!answered)
            km_item_err(req, it, KP_ERR_UNKNOWN_SERVER_ERROR, "IncrementalAlterConfigs failed: %s",
                        status != KBX_OK ? km_topics_host_errstr(status) : "topic not answered");
    }
    km_topics_send_alter(req); /* the next chunk, if any */
    km_topics_step_done(req);
}

/* The next KM_RPC_TOPICS_CHUNK items of action act from *next on, marked sent; their count. */
static int32_t km_topics_chunk(km_topics_st_t *st, int act, size_t *next)
{
    int32_t n = 0;

    for (; *next < st->n && n < KM_RPC_TOPICS_CHUNK; (*next)++) {
        if (st->items[*next].act != act)
            continue;
        st->items[*next].sent = true;
        n++;
    }
    return n;
}

/* Send the next CreateTopics chunk (st->pending counts it); nothing when every item was sent. */
static void km_topics_send_create(km_rpc_req_t *req)
{
    km_topics_st_t *st = req->st;
    int32_t n = km_topics_chunk(st, KM_ACT_CREATE, &st->create_next), rc;
    kp_CreateTopicsRequest_t ct;

    if (n == 0)
        return;
    kp_CreateTopicsRequest_init(&ct);
    ct.TimeoutMs = st->timeout_ms;
    ct.Topics.v = kp_arena_calloc(&req->ar, (size_t)n, sizeof(*ct.Topics.v));
    ct.Topics.cnt = 0;
    for (size_t i = 0; ct.Topics.v != NULL && i < st->n; i++) {
        km_item_t *it = &st->items[i];
        kp_CreateTopicsRequest_CreatableTopic_t *t;
        if (it->act != KM_ACT_CREATE || !it->sent)
            continue;
        t = &ct.Topics.v[ct.Topics.cnt++];
        kp_CreateTopicsRequest_CreatableTopic_init(t);
        t->Name = km_rpc_str(req, it->name);
        t->NumPartitions = it->parts;
        t->ReplicationFactor = -1;
        t->Assignments.cnt = 0;
        t->Configs.cnt = 0;
        t->MirrorInfo_null = false;
        t->MirrorInfo.MirrorName = km_rpc_str(req, st->mirror);
        memcpy(t->MirrorInfo.TopicId.b, it->id.bytes, 16);
    }
    rc = ct.Topics.v == NULL ? KBX_ERR_NOMEM
                             : km_rpc_local_request(req, 19, 8, &ct, &kp_CreateTopicsRequest_desc,
                                                    km_topics_on_create, 8);
    if (rc == KBX_OK) {
        st->pending++;
        return;
    }
    /* This chunk and every later one fail the same way. */
    for (size_t i = 0; i < st->n; i++) {
        km_item_t *it = &st->items[i];
        if (it->act == KM_ACT_CREATE && (it->sent || i >= st->create_next)) {
            it->sent = false;
            km_item_err(req, it, KP_ERR_UNKNOWN_SERVER_ERROR, "CreateTopics could not be sent: %s",
                        km_topics_host_errstr(rc));
        }
    }
    st->create_next = st->n;
}

/* Send the next IncrementalAlterConfigs chunk (as km_topics_send_create). */
static void km_topics_send_alter(km_rpc_req_t *req)
{
    km_topics_st_t *st = req->st;
    int32_t n = km_topics_chunk(st, KM_ACT_ALTER, &st->alter_next), rc;
    kp_IncrementalAlterConfigsRequest_t iac;

    if (n == 0)
        return;
    kp_IncrementalAlterConfigsRequest_init(&iac);
    iac.Resources.v = kp_arena_calloc(&req->ar, (size_t)n, sizeof(*iac.Resources.v));
    iac.Resources.cnt = 0;
    for (size_t i = 0; iac.Resources.v != NULL && i < st->n; i++) {
        km_item_t *it = &st->items[i];
        kp_IncrementalAlterConfigsRequest_AlterConfigsResource_t *r;
        kp_IncrementalAlterConfigsRequest_AlterableConfig_t *c;
        if (it->act != KM_ACT_ALTER || !it->sent)
            continue;
        c = kp_arena_calloc(&req->ar, 1, sizeof(*c));
        if (c == NULL) {
            iac.Resources.v = NULL;
            break;
        }
        r = &iac.Resources.v[iac.Resources.cnt++];
        r->ResourceType = 2; /* TOPIC */
        r->ResourceName = km_rpc_str(req, it->name);
        c->Name = km_rpc_str(req, KM_CATALOG_MIRROR_NAME_KEY);
        c->ConfigOperation = 0; /* SET */
        c->Value = km_rpc_str(req, it->value);
        r->Configs.cnt = 1;
        r->Configs.v = c;
    }
    rc = iac.Resources.v == NULL
             ? KBX_ERR_NOMEM
             : km_rpc_local_request(req, 44, 1, &iac, &kp_IncrementalAlterConfigsRequest_desc,
                                    km_topics_on_alter, 0);
    if (rc == KBX_OK) {
        st->pending++;
        return;
    }
    for (size_t i = 0; i < st->n; i++) {
        km_item_t *it = &st->items[i];
        if (it->act == KM_ACT_ALTER && (it->sent || i >= st->alter_next)) {
            it->sent = false;
            km_item_err(req, it, KP_ERR_UNKNOWN_SERVER_ERROR,
                        "IncrementalAlterConfigs could not be sent: %s", km_topics_host_errstr(rc));
        }
    }
    st->alter_next = st->n;
}

/* Send the planned CreateTopics / IncrementalAlterConfigs (in chunks of KM_RPC_TOPICS_CHUNK
 * topics, each after the previous one's answer), then answer. */
static void km_topics_execute(km_rpc_req_t *req, int32_t timeout_ms)
{
    km_topics_st_t *st = req->st;

    st->pending = 1;
    st->create_next = st->alter_next = 0;
    st->timeout_ms = timeout_ms > 0 ? timeout_ms : KM_RPC_OP_TIMEOUT_MS;
    for (size_t i = 0; i < st->n; i++)
        st->items[i].sent = false;
    km_topics_send_create(req);
    km_topics_send_alter(req);
    km_topics_step_done(req);
}

/* ================================ the mirror's filters ==================================== */

/* topics.include / topics.exclude of a definition as stored ("" when not given: the caller
 * falls back to the table default). */
static const char *km_filter_get(const km_mirror_def_t *def, const char *key, const char *dflt)
{
    for (size_t i = 0; i < def->nconfig; i++)
        if (strcmp(def->keys[i], key) == 0)
            return def->values[i] != NULL ? def->values[i] : dflt;
    return dflt;
}

/* Is p one alternative of the combined expression cur ("p" alone or "(?:p)" in it)? */
static bool km_filter_has(const char *cur, const char *p)
{
    char buf[KM_PATTERN_MAX_LEN + 8];

    if (strcmp(cur, p) == 0)
        return true;
    snprintf(buf, sizeof(buf), "(?:%s)", p);
    return strstr(cur, buf) != NULL;
}

/* cur with the patterns added as alternatives "(?:p)"; NULL (answered) when too long. */
static char *km_filter_add(km_rpc_req_t *req, const char *key, const char *cur, const kp_str_t *v,
                           int32_t cnt)
{
    char *out = kp_arena_alloc(&req->ar, KM_CONFIG_REGEX_MAX + 1);
    size_t n = 0;

    bool adds = false;

    if (out == NULL)
        return NULL;
    for (int32_t i = 0; i < cnt && !adds; i++) {
        char *p = km_rpc_cstr(req, v[i]);
        adds = p != NULL && !km_filter_has(cur, p);
    }
    if (!adds) {
        /* nothing new: the stored text stays as it is */
        snprintf(out, KM_CONFIG_REGEX_MAX + 1, "%s", cur);
        return out;
    }
    out[0] = '\0';
    if (cur[0] != '\0')
        n = (size_t)snprintf(out, KM_CONFIG_REGEX_MAX + 1, "%s%s%s",
                             strncmp(cur, "(?:", 3) == 0 ? "" : "(?:", cur,
                             strncmp(cur, "(?:", 3) == 0 ? "" : ")");
    for (int32_t i = 0; i < cnt && n <= KM_CONFIG_REGEX_MAX; i++) {
        char *p = km_rpc_cstr(req, v[i]);
        if (p == NULL || km_filter_has(out, p) || km_filter_has(cur, p))
            continue;
        n +=
            (size_t)snprintf(out + n, KM_CONFIG_REGEX_MAX + 1 > n ? KM_CONFIG_REGEX_MAX + 1 - n : 0,
                             "%s(?:%s)", n > 0 ? "|" : "", p);
    }
    if (n > KM_CONFIG_REGEX_MAX) {
        km_rpc_fail(req, KP_ERR_INVALID_REGULAR_EXPRESSION,
                    "%s would be longer than %d characters with these patterns", key,
                    KM_CONFIG_REGEX_MAX);
        return NULL;
    }
    return out;
}

/* cur without the alternatives equal to the patterns. */
static char *km_filter_remove(km_rpc_req_t *req, const char *cur, const kp_str_t *v, int32_t cnt)
{
    char *out = kp_arena_alloc(&req->ar, strlen(cur) + 1);

    if (out == NULL)
        return NULL;
    memcpy(out, cur, strlen(cur) + 1);
    for (int32_t i = 0; i < cnt; i++) {
        char *p = km_rpc_cstr(req, v[i]), alt[KM_PATTERN_MAX_LEN + 8], *at;
        size_t al;
        if (p == NULL)
            continue;
        if (strcmp(out, p) == 0) {
            out[0] = '\0';
            continue;
        }
        snprintf(alt, sizeof(alt), "(?:%s)", p);
        al = strlen(alt);
        if ((at = strstr(out, alt)) == NULL)
            continue;
        /* take one '|' with it: the one after, or else the one before */
        if (at[al] == '|')
            memmove(at, at + al + 1, strlen(at + al + 1) + 1);
        else if (at > out && at[-1] == '|')
            memmove(at - 1, at + al, strlen(at + al) + 1);
        else
            memmove(at, at + al, strlen(at + al) + 1);
    }
    return out;
}

/* Write the definition again with new topics.include / topics.exclude (NULL: unchanged). */
static int32_t km_filter_write(km_rpc_req_t *req, const km_mirror_def_t *def, const char *inc,
                               const char *exc, km_rpc_cont_fn cont)
{
    km_plugin_t *cm = req->cm;
    size_t n = def->nconfig;
    const char **keys = kp_arena_calloc(&req->ar, n + 2, sizeof(*keys));
    const char **values = kp_arena_calloc(&req->ar, n + 2, sizeof(*values));
    bool have_inc = false, have_exc = false;
    uint8_t *val = NULL;
    size_t len = 0;
    kbx_record_t rec;
    const kbx_record_t *recs[1] = {&rec};
    int32_t rc;

    if (keys == NULL || values == NULL)
        return KBX_ERR_NOMEM;
    for (size_t i = 0; i < def->nconfig; i++) {
        keys[i] = def->keys[i];
        values[i] = def->values[i];
        if (inc != NULL && strcmp(keys[i], "topics.include") == 0) {
            values[i] = inc;
            have_inc = true;
        }
        if (exc != NULL && strcmp(keys[i], "topics.exclude") == 0) {
            values[i] = exc;
            have_exc = true;
        }
    }
    if (inc != NULL && !have_inc) {
        keys[n] = "topics.include";
        values[n++] = inc;
    }
    if (exc != NULL && !have_exc) {
        keys[n] = "topics.exclude";
        values[n++] = exc;
    }
    if (km_catalog_def_encode(cm, def->mirror_id, def->creation_time_ms, def->source_cluster_id,
                              keys, values, n, &val, &len) != KM_OK)
        return KBX_ERR_NOMEM;
    memset(&rec, 0, sizeof(rec));
    rec.struct_size = sizeof(rec);
    rec.record_type = KM_CATALOG_RECORD_MIRROR;
    rec.key = (const uint8_t *)def->name;
    rec.key_len = strlen(def->name);
    rec.value = val;
    rec.value_len = len;
    rc = km_rpc_controller_write(req, recs, 1, cont, 0);
    km_free(cm, val);
    if (rc == KBX_OK)
        km_log_info(cm, "mirror %s: topic filters updated (include '%s', exclude '%s')", def->name,
                    inc != NULL ? inc : km_filter_get(def, "topics.include", ""),
                    exc != NULL ? exc : km_filter_get(def, "topics.exclude", "__.*"));
    return rc;
}

/* ================================ StartMirrorTopics ===================================== */

/* Decide what each resolved topic needs on this cluster. */
static void km_start_plan(km_rpc_req_t *req)
{
    km_topics_st_t *st = req->st;
    km_plugin_t *cm = req->cm;
    static const kbx_uuid_t zero;

    for (size_t i = 0; i < st->n; i++) {
        km_item_t *it = &st->items[i];
        const km_cat_topic_t *t;

        if (it->ec != 0)
            continue;
        if (km_pattern_internal_topic(it->name)) {
            km_item_err(req, it, KP_ERR_INVALID_TOPIC_EXCEPTION,
                        "Internal topics (__*) are never mirrored");
            continue;
        }
        if (memcmp(&it->id, &zero, sizeof(zero)) == 0) {
            km_item_err(req, it, KP_ERR_UNSUPPORTED_VERSION,
                        "The source gave no topic id for %s (a source before Kafka 2.8?)",
                        it->name);
            continue;
        }
        if (it->parts <= 0) {
            km_item_err(req, it, KP_ERR_INVALID_PARTITIONS,
                        "The source partition count of %s is unknown", it->name);
            continue;
        }
        t = km_catalog_topic_find(&cm->catalog, it->name);
        if (t == NULL || t->partition_count == 0) {
            it->act = KM_ACT_CREATE;
            it->value = st->mirror;
            continue;
        }
        if (memcmp(&t->id, &it->id, sizeof(it->id)) != 0) {
            km_item_err(req, it, KP_ERR_INCONSISTENT_TOPIC_ID,
                        "Topic %s exists here with another topic id than the source's: delete "
                        "and re-create it, or mirror another topic",
                        it->name);
            continue;
        }
        if (t->mirror != NULL && strcmp(t->mirror, st->mirror) != 0) {
            km_item_err(req, it, KP_ERR_TOPIC_ALREADY_IN_CLUSTER_MIRROR,
                        "Topic %s belongs to mirror %s", it->name, t->mirror);
            continue;
        }
        if (t->mirror != NULL && t->desired != KM_DESIRED_STOPPED)
            continue; /* started already: nothing to do */
        /* Same topic id, not mirrored or stopped: (re)start it (failback and restart). */
        it->act = KM_ACT_ALTER;
        it->value = st->mirror;
    }
}

static void km_start_on_source(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res)
{
    km_rpc_req_t *req = arg;
    km_topics_st_t *st = req->st;
    const kp_StartMirrorTopicsRequest_t *rq = req->rq;

    (void)cm;
    if (res->err == KM_ERR_SHUTDOWN) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "the broker is shutting down");
        goto out;
    }
    if (km_rpc_req_done(req))
        goto out;
    if (res->err != KM_OK) {
        km_rpc_fail(req, KP_ERR_NETWORK_EXCEPTION,
                    "Cannot list the topics of the source cluster of mirror %s: %s", st->mirror,
                    res->errmsg);
        goto out;
    }
    /* Explicit topics without id or partition count take them from the source. */
    for (size_t i = 0; i < st->n; i++) {
        km_item_t *it = &st->items[i];
        bool found = false;
        for (size_t k = 0; k < res->ntopics && !found; k++) {
            const km_srcadm_topic_t *s = &res->topics[k];
            if (strcmp(s->name, it->name) != 0 || s->error_code != 0)
                continue;
            found = true;
            if (it->parts <= 0)
                it->parts = s->partitions;
            if (memcmp(it->id.bytes, (uint8_t[16]){0}, 16) == 0)
                it->id = s->id;
        }
        if (!found && (it->parts <= 0 || memcmp(it->id.bytes, (uint8_t[16]){0}, 16) == 0))
            km_item_err(req, it, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION,
                        "Topic %s does not exist on the source cluster", it->name);
    }
    /* Patterns against the source's topic list (internal topics never; exclude wins). */
    for (size_t k = 0; st->ninc > 0 && k < res->ntopics; k++) {
        const km_srcadm_topic_t *s = &res->topics[k];
        km_item_t *it;
        bool sel = false;
        km_err_t e;

        if (s->error_code != 0 || s->internal || km_topics_find(st, s->name) != NULL)
            continue;
        e = km_pattern_select(st->inc, st->ninc, st->exc, st->nexc, s->name, &sel);
        if (e == KM_ERR_LIMIT) {
            km_rpc_fail(req, KP_ERR_INVALID_REGULAR_EXPRESSION,
                        "A pattern is too expensive to match against source topic %s (match "
                        "limit reached)",
                        s->name);
            goto out;
        }
        if (e != KM_OK || !sel)
            continue;
        it = km_topics_add(req, st, km_rpc_cstr(req, km_rpc_str(req, s->name)));
        if (it == NULL || it->name == NULL) {
            km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
            goto out;
        }
        it->id = s->id;
        it->parts = s->partitions;
        it->from_pattern = true;
    }
    km_start_plan(req);
    km_topics_execute(req, rq->TimeoutMs);
out:
    km_rpc_req_release(req);
}

/* Resolve the topics (against the source when needed), plan and execute. */
static void km_start_resolve(km_rpc_req_t *req)
{
    const kp_StartMirrorTopicsRequest_t *rq = req->rq;
    km_topics_st_t *st = req->st;
    km_plugin_t *cm = req->cm;
    const km_mirror_def_t *def = km_catalog_mirror_find(&cm->catalog, st->mirror);
    km_err_t e;

    if (def == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_CLUSTER_MIRROR, "Mirror %s was deleted meanwhile",
                    st->mirror);
        return;
    }
    if (!st->need_source) {
        km_start_plan(req);
        km_topics_execute(req, rq->TimeoutMs);
        return;
    }
    if (!def->conf_ok) {
        km_rpc_fail(req, KP_ERR_INVALID_CONFIG,
                    "The configuration of mirror %s cannot be read by this broker", st->mirror);
        return;
    }
    km_rpc_req_hold(req);
    e = km_srcadm_metadata(cm->rpc.srcadm, &def->conf.bootstrap_servers, true,
                           rq->TimeoutMs > 0 ? rq->TimeoutMs : def->conf.request_timeout_ms,
                           km_start_on_source, req);
    if (e != KM_OK) {
        km_rpc_req_release(req);
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR,
                    "Cannot query the source cluster of mirror %s: %s", st->mirror, km_err_str(e));
    }
}

static void km_start_after_filters(km_rpc_req_t *req, int32_t status, const uint8_t *body,
                                   size_t len, int32_t tag)
{
    km_topics_st_t *st = req->st;

    (void)body;
    (void)len;
    (void)tag;
    if (status != KBX_OK) {
        km_rpc_fail(
            req, status == KBX_ERR_TIMEOUT ? KP_ERR_REQUEST_TIMED_OUT : KP_ERR_UNKNOWN_SERVER_ERROR,
            "Cannot store the patterns of mirror %s: %s", st->mirror,
            km_topics_host_errstr(status));
        return;
    }
    km_start_resolve(req);
}

void km_rpc_start_topics(km_rpc_req_t *req)
{
    const kp_StartMirrorTopicsRequest_t *rq = req->rq;
    km_plugin_t *cm = req->cm;
    const km_mirror_def_t *def;
    km_topics_st_t *st;
    char *mirror = km_rpc_cstr(req, rq->MirrorName);
    bool need_source = false;

    if (!km_rpc_authorized(req, KM_RPC_OP_ALTER)) {
        km_rpc_fail(req, KP_ERR_CLUSTER_MIRROR_AUTHORIZATION_FAILED,
                    "%s may not start mirror topics (ALTER on the cluster)", req->principal);
        return;
    }
    def = mirror != NULL ? km_catalog_mirror_find(&cm->catalog, mirror) : NULL;
    if (def == NULL) {
        if (mirror != NULL && km_rpc_mirror_grace(req, km_rpc_start_topics))
            return;
        km_rpc_fail(req, KP_ERR_UNKNOWN_CLUSTER_MIRROR, "Mirror %s does not exist",
                    mirror != NULL ? mirror : "(null)");
        return;
    }
    st = km_topics_st_new(req, mirror, (size_t)(rq->Topics.cnt > 0 ? rq->Topics.cnt : 0));
    if (st == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    if (!km_topics_compile(req, "IncludePatterns", rq->IncludePatterns.v, rq->IncludePatterns.cnt,
                           NULL, &st->inc, &st->ninc) ||
        !km_topics_compile(req, "ExcludePatterns", rq->ExcludePatterns.v, rq->ExcludePatterns.cnt,
                           def->conf_ok ? def->conf.topics_exclude : NULL, &st->exc, &st->nexc))
        return;
    for (int32_t i = 0; i < rq->Topics.cnt; i++) {
        const kp_StartMirrorTopicsRequest_TopicMetadata_t *t = &rq->Topics.v[i];
        char *name = km_rpc_cstr(req, t->TopicName);
        km_item_t *it;

        if (name == NULL || name[0] == '\0' || strlen(name) != (size_t)t->TopicName.len) {
            km_rpc_fail(req, KP_ERR_INVALID_REQUEST, "Topics[%d] has no valid name", (int)i);
            return;
        }
        if (km_topics_find(st, name) != NULL)
            continue;
        it = km_topics_add(req, st, name);
        if (it == NULL) {
            km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
            return;
        }
        memcpy(it->id.bytes, t->TopicId.b, 16);
        it->parts = t->NumPartitions;
        if (it->parts <= 0 || memcmp(t->TopicId.b, (uint8_t[16]){0}, 16) == 0)
            need_source = true;
    }
    st->need_source = need_source || st->ninc > 0;
    /* The patterns join the mirror's topics.include / topics.exclude first (kept in its
     * definition for automatic discovery of source topics created later), then they are
     * resolved against the source's current topic list. */
    if (rq->IncludePatterns.cnt > 0 || rq->ExcludePatterns.cnt > 0) {
        const char *cur_inc = km_filter_get(def, "topics.include", "");
        const char *cur_exc = km_filter_get(def, "topics.exclude", "__.*");
        char *inc = km_filter_add(req, "topics.include", cur_inc, rq->IncludePatterns.v,
                                  rq->IncludePatterns.cnt);
        char *exc = inc == NULL ? NULL
                                : km_filter_add(req, "topics.exclude", cur_exc,
                                                rq->ExcludePatterns.v, rq->ExcludePatterns.cnt);
        int32_t rc;
        if (inc == NULL || exc == NULL) {
            km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
            return;
        }
        if (strcmp(inc, cur_inc) != 0 || strcmp(exc, cur_exc) != 0) {
            rc = km_filter_write(req, def, strcmp(inc, cur_inc) != 0 ? inc : NULL,
                                 strcmp(exc, cur_exc) != 0 ? exc : NULL, km_start_after_filters);
            if (rc != KBX_OK)
                km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR,
                            "Cannot store the patterns of mirror %s: %s", mirror,
                            km_topics_host_errstr(rc));
            return;
        }
    }
    km_start_resolve(req);
}

/* ================================ Stop / Pause / Resume ================================= */

/* Partitions of t this broker leads whose state machine is in state; with retry, FAILED ones
 * are sent back by the operator's retry as they are counted. */
static int km_topic_local_count(km_plugin_t *cm, const km_cat_topic_t *t, int8_t state, bool retry)
{
    km_mpart_mgr_t *mgr = km_mirror_mgr(cm);
    int n = 0;

    for (int32_t p = 0; mgr != NULL && p < t->nparts; p++) {
        km_mpart_desc_t d;
        char err[256];

        if (t->parts[p].role != KBX_ROLE_LEADER || km_mpart_describe(mgr, &t->id, p, &d) != KM_OK ||
            d.state != state)
            continue;
        n++;
        if (retry && km_mpart_operator_retry(mgr, &t->id, p, err, sizeof(err)) != KM_OK)
            km_log_warn(cm, "%s-%d: retry refused: %s", t->name, (int)p, err);
    }
    return n;
}

typedef struct km_change_ctx {
    km_rpc_req_t *req;
    km_topics_st_t *st;
    bool failed;
} km_change_ctx_t;

/* Stop's Patterns select topics of the mirror by name. */
static void km_change_match(void *arg, const km_cat_topic_t *t)
{
    km_change_ctx_t *c = arg;
    km_topics_st_t *st = c->st;
    km_item_t *it;
    bool sel = false;

    if (c->failed || t->mirror == NULL || strcmp(t->mirror, st->mirror) != 0 ||
        km_topics_find(st, t->name) != NULL)
        return;
    /* Exclusions do not apply here: the operator names what to stop. */
    for (size_t i = 0; i < st->ninc && !sel; i++) {
        if (km_pattern_match(st->inc[i], t->name, strlen(t->name), &sel) != KM_OK) {
            c->failed = true;
            return;
        }
    }
    if (!sel)
        return;
    it = km_topics_add(c->req, st, km_rpc_cstr(c->req, km_rpc_str(c->req, t->name)));
    if (it == NULL || it->name == NULL)
        c->failed = true;
}

static void km_change_after_filters(km_rpc_req_t *req, int32_t status, const uint8_t *body,
                                    size_t len, int32_t tag)
{
    km_topics_st_t *st = req->st;

    (void)body;
    (void)len;
    (void)tag;
    if (status != KBX_OK) {
        km_rpc_fail(
            req, status == KBX_ERR_TIMEOUT ? KP_ERR_REQUEST_TIMED_OUT : KP_ERR_UNKNOWN_SERVER_ERROR,
            "Cannot store the patterns of mirror %s: %s", st->mirror,
            km_topics_host_errstr(status));
        return;
    }
    km_topics_execute(req, KM_RPC_OP_TIMEOUT_MS);
}

/* ResumeMirrorTopics fan-out (design M11): the receiving broker retries the FAILED partitions
 * it leads and asks every other broker to retry the ones they lead, with the same request
 * marked as a leg by StateOffset KM_RESUME_LEG (kmirror's own value: clients send -1 or a
 * metadata offset). A leg only retries and answers NONE per topic where it retried something,
 * MIRROR_TOPIC_NOT_PAUSED otherwise; the receiver's NOT_PAUSED becomes NONE when any leg retried
 * partitions of the topic. A broker that cannot be asked is logged; the topic changes run
 * after all legs answered. */
#define KM_RESUME_LEG (-2)

static void km_resume_leg_answer(km_rpc_req_t *req)
{
    km_plugin_t *cm = req->cm;
    km_topics_st_t *st = req->st;

    for (size_t i = 0; i < st->n; i++) {
        km_item_t *it = &st->items[i];
        const km_cat_topic_t *t = km_catalog_topic_find(&cm->catalog, it->name);

        if (t != NULL && t->mirror != NULL && strcmp(t->mirror, st->mirror) == 0 &&
            t->desired == KM_DESIRED_RUNNING &&
            km_topic_local_count(cm, t, KM_MPART_FAILED, true) > 0)
            km_log_info(cm, "mirror %s: FAILED partitions of %s retried by %s (fan-out)",
                        st->mirror, it->name, req->principal);
        else
            it->ec = KP_ERR_MIRROR_TOPIC_NOT_PAUSED;
    }
    km_change_answer(req);
}

static void km_resume_on_broker(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                                int32_t broker_id)
{
    km_topics_st_t *st = req->st;
    kp_ResumeMirrorTopicsResponse_t resp;
    kp_reader_t rd;

    st->pending--;
    if (status == KBX_OK) {
        kp_reader_init(&rd, body, len);
        kp_ResumeMirrorTopicsResponse_init(&resp);
        if (kp_ResumeMirrorTopicsResponse_decode(&rd, &req->ar, &resp, 0) != 0 ||
            resp.ErrorCode != 0)
            status = KBX_ERR_INVALID;
        for (int32_t i = 0; status == KBX_OK && i < resp.Topics.cnt; i++) {
            char *name = km_rpc_cstr(req, resp.Topics.v[i].Name);
            km_item_t *it = name != NULL ? km_topics_find(st, name) : NULL;

            if (resp.Topics.v[i].ErrorCode == 0 && it != NULL &&
                it->ec == KP_ERR_MIRROR_TOPIC_NOT_PAUSED) {
                it->ec = 0;
                it->msg.len = 0;
            }
        }
    }
    if (status != KBX_OK)
        km_log_warn(req->cm,
                    "ResumeMirrorTopics %s: broker %d did not retry its FAILED partitions (%s)",
                    st->mirror, (int)broker_id, km_topics_host_errstr(status));
    if (st->pending == 0)
        km_topics_execute(req, KM_RPC_OP_TIMEOUT_MS);
}

static void km_resume_fan_out(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                              int32_t tag)
{
    km_topics_st_t *st = req->st;
    km_plugin_t *cm = req->cm;
    kp_ResumeMirrorTopicsRequest_t leg;
    const int32_t *brokers;
    size_t nb, nt = 0;

    (void)tag;
    brokers = km_rpc_brokers_decode(req, status, body, len, &nb);
    kp_ResumeMirrorTopicsRequest_init(&leg);
    leg.MirrorName = km_rpc_str(req, st->mirror);
    leg.StateOffset = KM_RESUME_LEG;
    leg.Topics.v = kp_arena_calloc(&req->ar, st->n + 1, sizeof(*leg.Topics.v));
    for (size_t i = 0; leg.Topics.v != NULL && i < st->n; i++) {
        if (!st->items[i].leg)
            continue;
        kp_ResumeMirrorTopicsRequest_TopicMetadata_init(&leg.Topics.v[nt]);
        leg.Topics.v[nt++].TopicName = km_rpc_str(req, st->items[i].name);
    }
    leg.Topics.cnt = (int32_t)nt;
    if (leg.Topics.v == NULL)
        km_log_warn(cm, "ResumeMirrorTopics %s: out of memory, other brokers not asked",
                    st->mirror);
    st->pending = 1;
    for (size_t i = 0; nt > 0 && brokers != NULL && i < nb; i++) {
        int32_t rc;
        if (brokers[i] == cm->broker_id)
            continue;
        rc =
            km_rpc_broker_request(req, brokers[i], 103, 0, &leg, &kp_ResumeMirrorTopicsRequest_desc,
                                  km_resume_on_broker, brokers[i]);
        if (rc == KBX_OK)
            st->pending++;
        else
            km_log_warn(cm, "ResumeMirrorTopics %s: broker %d could not be asked (%s)", st->mirror,
                        (int)brokers[i], km_topics_host_errstr(rc));
    }
    if (--st->pending == 0)
        km_topics_execute(req, KM_RPC_OP_TIMEOUT_MS);
}

static void km_change_move(km_rpc_req_t *req);

static void km_stop_after_final(km_plugin_t *cm, void *arg, int errors)
{
    km_rpc_req_t *req = arg;
    km_topics_st_t *st = req->st;

    if (errors > 0)
        km_log_warn(cm,
                    "StopMirrorTopics %s: the final sync before the stop had %d failed item(s) "
                    "(or did not finish within stop.sync.timeout.ms); the topics stop anyway",
                    st->mirror, errors);
    if (!km_rpc_req_done(req)) {
        /* The mirror may have gone meanwhile (DeleteMirror). */
        if (km_catalog_mirror_find(&cm->catalog, st->mirror) == NULL)
            km_rpc_fail(req, KP_ERR_UNKNOWN_CLUSTER_MIRROR, "Mirror %s was deleted", st->mirror);
        else
            km_change_move(req);
    }
    km_rpc_req_release(req);
}

/* StopMirrorTopics: a last CONFIGS and GROUPS sync of the topics it stops, on this broker,
 * bounded by stop.sync.timeout.ms (km_sync_final); the stop goes on whatever its outcome. */
static void km_stop_final_sync(km_rpc_req_t *req)
{
    km_topics_st_t *st = req->st;
    const char **names = kp_arena_calloc(&req->ar, st->n + 1, sizeof(*names));
    size_t n = 0;
    km_err_t err;

    for (size_t i = 0; names != NULL && i < st->n; i++)
        if (st->items[i].act == KM_ACT_ALTER)
            names[n++] = st->items[i].name;
    if (names == NULL || n == 0) {
        km_change_move(req);
        return;
    }
    km_rpc_req_hold(req);
    err = km_sync_final(req->cm, st->mirror, names, n, km_stop_after_final, req);
    if (err != KM_OK) {
        km_log_warn(req->cm, "StopMirrorTopics %s: no final sync before the stop (%s)", st->mirror,
                    km_err_str(err));
        km_change_move(req);
        km_rpc_req_release(req);
    }
}

void km_rpc_change_topics(km_rpc_req_t *req)
{
    km_plugin_t *cm = req->cm;
    kp_str_t mname, *names = NULL;
    const kp_str_t *patterns = NULL;
    int32_t nnames = 0, npatterns = 0;
    const char *verb;
    km_topics_st_t *st;
    char *mirror;

    switch (req->api_key) {
    case 96: {
        const kp_StopMirrorTopicsRequest_t *rq = req->rq;
        verb = "stop";
        mname = rq->MirrorName;
        nnames = rq->Topics.cnt;
        names = kp_arena_calloc(&req->ar, (size_t)(nnames > 0 ? nnames : 0) + 1, sizeof(*names));
        for (int32_t i = 0; names != NULL && i < nnames; i++)
            names[i] = rq->Topics.v[i].TopicName;
        patterns = rq->Patterns.v;
        npatterns = rq->Patterns.cnt;
        break;
    }
    case 102: {
        const kp_PauseMirrorTopicsRequest_t *rq = req->rq;
        verb = "pause";
        mname = rq->MirrorName;
        nnames = rq->Topics.cnt;
        names = kp_arena_calloc(&req->ar, (size_t)(nnames > 0 ? nnames : 0) + 1, sizeof(*names));
        for (int32_t i = 0; names != NULL && i < nnames; i++)
            names[i] = rq->Topics.v[i].TopicName;
        break;
    }
    default: {
        const kp_ResumeMirrorTopicsRequest_t *rq = req->rq;
        verb = "resume";
        mname = rq->MirrorName;
        nnames = rq->Topics.cnt;
        names = kp_arena_calloc(&req->ar, (size_t)(nnames > 0 ? nnames : 0) + 1, sizeof(*names));
        for (int32_t i = 0; names != NULL && i < nnames; i++)
            names[i] = rq->Topics.v[i].TopicName;
        break;
    }
    }
    if (names == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    if (!km_rpc_authorized(req, KM_RPC_OP_ALTER)) {
        km_rpc_fail(req, KP_ERR_CLUSTER_MIRROR_AUTHORIZATION_FAILED,
                    "%s may not %s mirror topics (ALTER on the cluster)", req->principal, verb);
        return;
    }
    mirror = km_rpc_cstr(req, mname);
    if (mirror == NULL || km_catalog_mirror_find(&cm->catalog, mirror) == NULL) {
        if (mirror != NULL && km_rpc_mirror_grace(req, km_rpc_change_topics))
            return;
        km_rpc_fail(req, KP_ERR_UNKNOWN_CLUSTER_MIRROR, "Mirror %s does not exist",
                    mirror != NULL ? mirror : "(null)");
        return;
    }
    st = km_topics_st_new(req, mirror, (size_t)(nnames > 0 ? nnames : 0));
    if (st == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    for (int32_t i = 0; i < nnames; i++) {
        char *name = km_rpc_cstr(req, names[i]);
        if (name == NULL || name[0] == '\0' || strlen(name) != (size_t)names[i].len) {
            km_rpc_fail(req, KP_ERR_INVALID_REQUEST, "Topics[%d] has no valid name", (int)i);
            return;
        }
        if (km_topics_find(st, name) == NULL && km_topics_add(req, st, name) == NULL) {
            km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
            return;
        }
    }
    if (req->api_key == 103 &&
        ((const kp_ResumeMirrorTopicsRequest_t *)req->rq)->StateOffset == KM_RESUME_LEG) {
        km_resume_leg_answer(req);
        return;
    }
    if (npatterns > 0) {
        km_change_ctx_t c = {req, st, false};
        if (!km_topics_compile(req, "Patterns", patterns, npatterns, NULL, &st->inc, &st->ninc))
            return;
        km_catalog_topic_foreach(&cm->catalog, km_change_match, &c);
        if (c.failed) {
            km_rpc_fail(req, KP_ERR_INVALID_REGULAR_EXPRESSION,
                        "A pattern could not be matched (match limit reached or out of memory)");
            return;
        }
    }
    for (size_t i = 0; i < st->n; i++) {
        km_item_t *it = &st->items[i];
        const km_cat_topic_t *t = km_catalog_topic_find(&cm->catalog, it->name);
        char *value;

        if (t == NULL || t->mirror == NULL || strcmp(t->mirror, mirror) != 0) {
            km_item_err(req, it, KP_ERR_TOPIC_NOT_IN_CLUSTER_MIRROR, "Topic %s is not in mirror %s",
                        it->name, mirror);
            continue;
        }
        if (req->api_key != 96 && km_topic_local_count(cm, t, KM_MPART_STOPPING, false) > 0) {
            km_item_err(req, it, KP_ERR_MIRROR_TOPIC_BEING_STOPPED, "Topic %s is being stopped",
                        it->name);
            continue;
        }
        switch (req->api_key) {
        case 96:
            if (t->desired == KM_DESIRED_STOPPED)
                continue; /* stopping is idempotent */
            value = km_rpc_cstr(req, km_rpc_strf(req, "%s.stopped", mirror));
            break;
        case 102:
            if (t->desired == KM_DESIRED_PAUSED) {
                km_item_err(req, it, KP_ERR_MIRROR_TOPIC_ALREADY_PAUSED,
                            "Topic %s is already paused", it->name);
                continue;
            }
            if (t->desired == KM_DESIRED_STOPPED) {
                km_item_err(req, it, KP_ERR_INVALID_CLUSTER_MIRROR_STATES,
                            "Topic %s is stopped; only a running topic can be paused", it->name);
                continue;
            }
            value = km_rpc_cstr(req, km_rpc_strf(req, "%s.paused", mirror));
            break;
        default:
            /* Resume also retries the FAILED partitions (the operator's recover, design M11):
             * those this broker leads go back through the state machine at once, the other
             * brokers' through the fan-out (km_resume_fan_out). */
            it->leg = t->desired == KM_DESIRED_RUNNING;
            if (km_topic_local_count(cm, t, KM_MPART_FAILED, true) > 0 &&
                t->desired == KM_DESIRED_RUNNING) {
                km_log_info(cm, "mirror %s: FAILED partitions of %s retried by %s", mirror,
                            it->name, req->principal);
                continue;
            }
            if (t->desired == KM_DESIRED_RUNNING) {
                km_item_err(req, it, KP_ERR_MIRROR_TOPIC_NOT_PAUSED, "Topic %s is not paused",
                            it->name);
                continue;
            }
            if (t->desired == KM_DESIRED_STOPPED) {
                km_item_err(req, it, KP_ERR_INVALID_CLUSTER_MIRROR_STATES,
                            "Topic %s is stopped; start it again with StartMirrorTopics", it->name);
                continue;
            }
            value = mirror;
            break;
        }
        if (value == NULL) {
            km_item_err(req, it, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
            continue;
        }
        it->act = KM_ACT_ALTER;
        it->value = value;
    }
    if (req->api_key == 96) {
        km_stop_final_sync(req);
        return;
    }
    km_change_move(req);
}

/* After the final sync (Stop) or at once (Pause, Resume): Stop's Patterns go into the
 * filters, then the topics move. */
static void km_change_move(km_rpc_req_t *req)
{
    km_plugin_t *cm = req->cm;
    km_topics_st_t *st = req->st;
    const char *mirror = st->mirror;
    const kp_str_t *patterns = NULL;
    int32_t npatterns = 0;

    if (req->api_key == 96) {
        const kp_StopMirrorTopicsRequest_t *rq = req->rq;
        patterns = rq->Patterns.v;
        npatterns = rq->Patterns.cnt;
    }
    if (req->api_key == 96 && npatterns > 0) {
        const km_mirror_def_t *def = km_catalog_mirror_find(&cm->catalog, mirror);
        const char *cur_inc = km_filter_get(def, "topics.include", "");
        const char *cur_exc = km_filter_get(def, "topics.exclude", "__.*");
        char *inc = km_filter_remove(req, cur_inc, patterns, npatterns);
        char *exc = km_filter_add(req, "topics.exclude", cur_exc, patterns, npatterns);
        int32_t rc;

        if (inc == NULL || exc == NULL) {
            km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
            return;
        }
        /* Patterns leave topics.include and join topics.exclude (discovery must not start the
         * stopped topics again), then the topics move. */
        if (strcmp(inc, cur_inc) != 0 || strcmp(exc, cur_exc) != 0) {
            rc = km_filter_write(req, def, strcmp(inc, cur_inc) != 0 ? inc : NULL,
                                 strcmp(exc, cur_exc) != 0 ? exc : NULL, km_change_after_filters);
            if (rc != KBX_OK)
                km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR,
                            "Cannot store the patterns of mirror %s: %s", mirror,
                            km_topics_host_errstr(rc));
            return;
        }
    }
    if (req->api_key == 103) {
        if (km_rpc_brokers_query(req, km_resume_fan_out, 0) != KBX_OK)
            km_resume_fan_out(req, KBX_ERR_INVALID, NULL, 0, 0);
        return;
    }
    km_topics_execute(req, KM_RPC_OP_TIMEOUT_MS);
}
