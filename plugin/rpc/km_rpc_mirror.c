/*
 * km_rpc_mirror.c - CreateMirror (97), ListMirrors (98), DeleteMirror (104) and
 * DescribeMirrors (99). Runs on the coordinator loop (km_rpc_int.h).
 */
#define KM_LOG_COMPONENT "kmirror.rpc"
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "catalog/km_catalog.h"
#include "catalog/km_mconf.h"
#include "core/km_config.h"
#include "core/km_plugin_types.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "mirror/km_mirror.h"
#include "mirror/km_mpart.h"
#include "rpc/km_lme.h"
#include "rpc/km_rpc_int.h"
#include "rpc/km_srcadm.h"
#include "state/km_state.h"
#include "sync/km_sync.h"
#include "util/km_log.h"
#include "util/km_mem.h"

/* Kafka AclOperation codes. */
#define KM_RPC_OP_ALTER    7
#define KM_RPC_OP_DESCRIBE 8

/** The API keys every broker must advertise before a mirror may be created: those this module
 *  serves. (ReadMirrorStates/WriteMirrorStates join the list with the state module.) */
static const int16_t km_rpc_required_keys[] = {95, 96, 97, 98, 99, 102, 103, 104};

int16_t km_rpc_host_error(int32_t status)
{
    switch (status) {
    case KBX_ERR_TIMEOUT:
        return KP_ERR_REQUEST_TIMED_OUT;
    case KBX_ERR_NETWORK:
        return KP_ERR_NOT_CONTROLLER;
    case KBX_ERR_UNSUPPORTED:
        return KP_ERR_UNSUPPORTED_VERSION;
    default:
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
}

const char *km_rpc_host_errstr(int32_t status)
{
#define KM_RPC_KBX_STR(name, desc)                                                                 \
    if (status == name)                                                                            \
        return desc;
    KBX_ERR_MAP(KM_RPC_KBX_STR)
#undef KM_RPC_KBX_STR
    return "host error";
}

/* bootstrap.servers as given ("" if absent). Never a secret. */
static const char *km_rpc_def_bootstrap(const km_mirror_def_t *def)
{
    for (size_t i = 0; i < def->nconfig; i++)
        if (strcmp(def->keys[i], "bootstrap.servers") == 0 && def->values[i] != NULL)
            return def->values[i];
    return "";
}

/* ================================ CreateMirror ========================================== */

typedef struct km_create_st {
    char *name;
    km_mirror_config_t conf;
    bool conf_ready;
    size_t n;
    char **keys;
    char **values;
    char cluster_id[128];
    bool state_ready;   /* __mirror_state exists */
    int state_attempts; /* km_state_ensure_topic calls so far */
    int write_attempts; /* controller writes so far */
    int answers_pending;
    int16_t broker_error;
    char broker_msg[256];
} km_create_st_t;

static void km_create_st_free(km_rpc_req_t *req)
{
    km_create_st_t *st = req->st;
    km_plugin_t *cm = req->cm;

    if (st == NULL)
        return;
    if (st->conf_ready)
        km_config_free(cm, &km_config_mirror_scope, &st->conf);
    for (size_t i = 0; i < st->n; i++) {
        km_free(cm, st->keys[i]);
        km_free(cm, st->values[i]);
    }
    km_free(cm, st->keys);
    km_free(cm, st->values);
    km_free(cm, st->name);
    km_free(cm, st);
    req->st = NULL;
}

static void km_create_write(km_rpc_req_t *req);

/** __mirror_state creation is retried this often on a retriable error, this far apart. */
#define KM_CREATE_STATE_ATTEMPTS   20
#define KM_CREATE_STATE_BACKOFF_MS 250
/** The definition's controller write, when the controller was unreachable. */
#define KM_CREATE_WRITE_ATTEMPTS 20

static bool km_create_state_retriable(int16_t err)
{
    return err == KP_ERR_NOT_CONTROLLER || err == KP_ERR_COORDINATOR_NOT_AVAILABLE ||
           err == KP_ERR_REQUEST_TIMED_OUT || err == KP_ERR_COORDINATOR_LOAD_IN_PROGRESS;
}

static void km_create_state_retry(km_rpc_req_t *req, int32_t status, const uint8_t *body,
                                  size_t len, int32_t tag)
{
    (void)status;
    (void)body;
    (void)len;
    (void)tag;
    km_create_write(req);
}

static void km_create_write_done(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                                 int32_t tag)
{
    km_create_st_t *st = req->st;
    kp_CreateMirrorResponse_t resp;

    (void)body;
    (void)len;
    (void)tag;
    /* The controller was unreachable (nothing was written; a broker-only node's controller
     * channel may be just coming up): try again, as a Kafka client retries NOT_CONTROLLER. A
     * timeout is not retried: the write may have happened. */
    if (status == KBX_ERR_NETWORK && ++st->write_attempts < KM_CREATE_WRITE_ATTEMPTS &&
        km_rpc_after(req, KM_CREATE_STATE_BACKOFF_MS, km_create_state_retry, 0) == KBX_OK) {
        km_log_debug(req->cm, "CreateMirror %s: controller unreachable, retrying", st->name);
        return;
    }
    if (status != KBX_OK) {
        km_log_warn(req->cm, "CreateMirror %s: the definition was not written: %s", st->name,
                    km_rpc_host_errstr(status));
        km_rpc_fail(req, km_rpc_host_error(status),
                    "Mirror %s was not created: the controller write failed (%s)", st->name,
                    km_rpc_host_errstr(status));
        return;
    }
    km_log_info(req->cm, "mirror %s created by %s (source cluster %s)", st->name, req->principal,
                st->cluster_id[0] != '\0' ? st->cluster_id : "(unknown)");
    kp_CreateMirrorResponse_init(&resp);
    km_rpc_complete(req, &resp);
}

static void km_create_on_state(km_plugin_t *cm, void *arg, int16_t err, const char *msg)
{
    km_rpc_req_t *req = arg;
    km_create_st_t *st = req->st;

    (void)cm;
    if (km_rpc_req_done(req)) {
        /* the client went away */
    } else if (err != 0 && km_create_state_retriable(err) &&
               ++st->state_attempts < KM_CREATE_STATE_ATTEMPTS &&
               km_rpc_after(req, KM_CREATE_STATE_BACKOFF_MS, km_create_state_retry, 0) == KBX_OK) {
        /* The controller channel of a broker-only node may not be up yet: try again. */
        km_log_debug(req->cm, "CreateMirror %s: __mirror_state not ready (%s), retrying", st->name,
                     msg != NULL ? msg : "");
    } else if (err != 0) {
        km_rpc_fail(req, err, "Mirror %s was not created: __mirror_state: %s", st->name,
                    msg != NULL ? msg : "not available");
    } else {
        st->state_ready = true;
        km_create_write(req);
    }
    km_rpc_req_release(req);
}

static void km_create_write(km_rpc_req_t *req)
{
    km_create_st_t *st = req->st;
    km_plugin_t *cm = req->cm;
    uint8_t id[16], *val = NULL;
    size_t len = 0;
    kbx_record_t rec;
    const kbx_record_t *recs[1] = {&rec};
    km_err_t err;
    int32_t rc;

    /* Created meanwhile by another request (through any broker)? */
    if (km_catalog_mirror_find(&cm->catalog, st->name) != NULL) {
        km_rpc_fail(req, KP_ERR_CLUSTER_MIRROR_ALREADY_EXISTS, "Mirror %s already exists",
                    st->name);
        return;
    }
    /* __mirror_state first, so that partition states can be persisted from the start. */
    if (!st->state_ready) {
        km_rpc_req_hold(req);
        err = km_state_ensure_topic(cm, km_create_on_state, req);
        if (err != KM_OK) {
            km_rpc_req_release(req);
            km_rpc_fail(req, KP_ERR_COORDINATOR_NOT_AVAILABLE,
                        "Mirror %s was not created: cannot create __mirror_state (%s)", st->name,
                        km_err_str(err));
        }
        return;
    }
    if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "no random bytes for the mirror id");
        return;
    }
    id[6] = (uint8_t)((id[6] & 0x0f) | 0x40); /* a version-4 UUID */
    id[8] = (uint8_t)((id[8] & 0x3f) | 0x80);
    err = km_catalog_def_encode(cm, id, cm->ref.api->clock_wall_ms(cm->ref.host), st->cluster_id,
                                (const char *const *)st->keys, (const char *const *)st->values,
                                st->n, &val, &len);
    if (err != KM_OK) {
        km_rpc_fail(req,
                    err == KM_ERR_INVALID ? KP_ERR_INVALID_CONFIG : KP_ERR_UNKNOWN_SERVER_ERROR,
                    "Cannot encode the definition of mirror %s: %s", st->name, km_err_str(err));
        return;
    }
    memset(&rec, 0, sizeof(rec));
    rec.struct_size = sizeof(rec);
    rec.record_type = KM_CATALOG_RECORD_MIRROR;
    rec.key = (const uint8_t *)st->name;
    rec.key_len = strlen(st->name);
    rec.value = val;
    rec.value_len = len;
    rc = km_rpc_controller_write(req, recs, 1, km_create_write_done, 0);
    km_free(cm, val);
    if (rc != KBX_OK)
        km_rpc_fail(req, km_rpc_host_error(rc), "Mirror %s was not created: %s", st->name,
                    km_rpc_host_errstr(rc));
}

static void km_create_on_versions(km_rpc_req_t *req, int32_t status, const uint8_t *body,
                                  size_t len, int32_t broker_id)
{
    km_create_st_t *st = req->st;
    kp_ApiVersionsResponse_t resp;
    kp_reader_t rd;

    st->answers_pending--;
    if (broker_id != INT32_MIN && st->broker_error == 0) {
        if (status != KBX_OK) {
            st->broker_error = KP_ERR_BROKER_NOT_AVAILABLE;
            snprintf(st->broker_msg, sizeof(st->broker_msg),
                     "broker %d did not answer ApiVersions (%s)", (int)broker_id,
                     km_rpc_host_errstr(status));
        } else {
            kp_reader_init(&rd, body, len);
            kp_ApiVersionsResponse_init(&resp);
            if (kp_ApiVersionsResponse_decode(&rd, &req->ar, &resp, 3) != 0 ||
                resp.ErrorCode != 0) {
                st->broker_error = KP_ERR_UNKNOWN_SERVER_ERROR;
                snprintf(st->broker_msg, sizeof(st->broker_msg),
                         "broker %d gave an unusable ApiVersions answer", (int)broker_id);
            } else {
                for (size_t k = 0; k < sizeof(km_rpc_required_keys) / sizeof(int16_t); k++) {
                    bool found = false;
                    for (int32_t i = 0; i < resp.ApiKeys.cnt && !found; i++)
                        found = resp.ApiKeys.v[i].ApiKey == km_rpc_required_keys[k];
                    if (!found) {
                        st->broker_error = KP_ERR_UNSUPPORTED_VERSION;
                        snprintf(st->broker_msg, sizeof(st->broker_msg),
                                 "broker %d does not serve the mirror APIs (API key %d missing): "
                                 "every broker must run kmirror before a mirror is created",
                                 (int)broker_id, (int)km_rpc_required_keys[k]);
                        break;
                    }
                }
            }
        }
    }
    if (st->answers_pending > 0)
        return;
    if (st->broker_error != 0) {
        km_rpc_fail(req, st->broker_error, "Mirror %s was not created: %s", st->name,
                    st->broker_msg);
        return;
    }
    km_create_write(req);
}

/* Every broker of this cluster must advertise the mirror APIs (ARCHITECTURE §4). */
static void km_create_on_brokers(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                                 int32_t tag)
{
    km_create_st_t *st = req->st;
    kp_ApiVersionsRequest_t avr;
    const int32_t *brokers;
    size_t nb;
    int32_t rc;

    (void)tag;
    brokers = km_rpc_brokers_decode(req, status, body, len, &nb);
    if (brokers == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    kp_ApiVersionsRequest_init(&avr);
    avr.ClientSoftwareName = km_rpc_str(req, "kmirror");
    avr.ClientSoftwareVersion = km_rpc_str(req, "1.0");
    st->answers_pending = 1; /* held until every request is out */
    for (size_t i = 0; i < nb; i++) {
        rc = km_rpc_broker_request(req, brokers[i], 18, 3, &avr, &kp_ApiVersionsRequest_desc,
                                   km_create_on_versions, brokers[i]);
        if (rc != KBX_OK) {
            if (st->broker_error == 0) {
                st->broker_error = rc == KBX_ERR_SHUTDOWN ? KP_ERR_UNKNOWN_SERVER_ERROR
                                                          : KP_ERR_BROKER_NOT_AVAILABLE;
                snprintf(st->broker_msg, sizeof(st->broker_msg),
                         "cannot ask broker %d for its APIs (%s)", (int)brokers[i],
                         km_rpc_host_errstr(rc));
            }
            continue;
        }
        st->answers_pending++;
    }
    km_create_on_versions(req, KBX_OK, NULL, 0, INT32_MIN); /* releases the hold */
}

static void km_create_check_brokers(km_rpc_req_t *req)
{
    int32_t rc = km_rpc_brokers_query(req, km_create_on_brokers, 0);

    if (rc != KBX_OK)
        km_create_on_brokers(req, rc, NULL, 0, 0); /* falls back to the catalog's list */
}

static void km_create_on_source(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res)
{
    km_rpc_req_t *req = arg;
    km_create_st_t *st = req->st;

    (void)cm;
    if (res->err == KM_ERR_SHUTDOWN) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "the broker is shutting down");
    } else if (km_rpc_req_done(req)) {
        /* the client went away */
    } else if (res->err != KM_OK) {
        km_rpc_fail(req, KP_ERR_INVALID_CONFIG,
                    "Cannot reach the source cluster of mirror %s (bootstrap.servers): %s",
                    st->name, res->errmsg);
    } else if (res->cluster_id[0] != '\0' && strcmp(res->cluster_id, req->cm->cluster_id) == 0) {
        km_rpc_fail(req, KP_ERR_INVALID_CONFIG,
                    "The source of mirror %s is this cluster (%s): a cluster cannot mirror itself",
                    st->name, res->cluster_id);
    } else if (st->conf.source_cluster_id != NULL && st->conf.source_cluster_id[0] != '\0' &&
               strcmp(st->conf.source_cluster_id, res->cluster_id) != 0) {
        km_rpc_fail(req, KP_ERR_INVALID_CONFIG,
                    "source.cluster.id is %s but the cluster at bootstrap.servers is %s",
                    st->conf.source_cluster_id,
                    res->cluster_id[0] != '\0' ? res->cluster_id : "(no id)");
    } else {
        snprintf(st->cluster_id, sizeof(st->cluster_id), "%s", res->cluster_id);
        km_create_check_brokers(req);
    }
    km_rpc_req_release(req);
}

void km_rpc_create_mirror(km_rpc_req_t *req)
{
    const kp_CreateMirrorRequest_t *rq = req->rq;
    km_plugin_t *cm = req->cm;
    km_create_st_t *st;
    char err[512];
    km_err_t e;
    int16_t ec;

    if (!km_rpc_authorized(req, KM_RPC_OP_ALTER)) {
        km_rpc_fail(req, KP_ERR_CLUSTER_MIRROR_AUTHORIZATION_FAILED,
                    "%s may not create mirrors (ALTER on the cluster)", req->principal);
        return;
    }
    if (rq->MirrorName.len < 0 ||
        !km_catalog_mirror_name_valid(rq->MirrorName.ptr, (size_t)rq->MirrorName.len, err,
                                      sizeof(err))) {
        km_rpc_fail(req, KP_ERR_INVALID_CLUSTER_MIRROR_NAME, "%s",
                    rq->MirrorName.len < 0 ? "Mirror name is null" : err);
        return;
    }
    st = km_calloc(cm, 1, sizeof(*st));
    if (st == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    req->st = st;
    req->st_free = km_create_st_free;
    st->name = km_strndup(cm, rq->MirrorName.ptr, (size_t)rq->MirrorName.len);
    if (st->name == NULL)
        goto nomem;
    if (km_catalog_mirror_find(&cm->catalog, st->name) != NULL) {
        km_rpc_fail(req, KP_ERR_CLUSTER_MIRROR_ALREADY_EXISTS, "Mirror %s already exists",
                    st->name);
        return;
    }
    if (rq->Config.cnt > 0) {
        st->keys = km_calloc(cm, (size_t)rq->Config.cnt, sizeof(*st->keys));
        st->values = km_calloc(cm, (size_t)rq->Config.cnt, sizeof(*st->values));
        if (st->keys == NULL || st->values == NULL)
            goto nomem;
    }
    for (int32_t i = 0; i < rq->Config.cnt; i++) {
        const kp_CreateMirrorRequest_ClusterMirrorConfig_t *c = &rq->Config.v[i];
        char *key = km_rpc_cstr(req, c->Name), *value = km_rpc_cstr(req, c->Value);

        if (key == NULL || strlen(key) != (size_t)c->Name.len) {
            km_rpc_fail(req, KP_ERR_INVALID_CONFIG, "Config %d of mirror %s has no valid name",
                        (int)i, st->name);
            return;
        }
        if (c->Value.len >= 0 &&
            (value == NULL || strlen(value) != (size_t)c->Value.len || c->Value.len > INT16_MAX)) {
            km_rpc_fail(req, KP_ERR_INVALID_CONFIG,
                        "%s: the value is not a valid string of at most 32767 bytes", key);
            return;
        }
        st->keys[st->n] = km_strdup(cm, key);
        st->values[st->n] = value != NULL ? km_strdup(cm, value) : NULL;
        st->n++;
        if (st->keys[st->n - 1] == NULL || (value != NULL && st->values[st->n - 1] == NULL))
            goto nomem;
    }
    /* The same checks as a change of the mirror's configuration (km_mconf, design M114). */
    ec = km_mconf_validate(cm, (const char *const *)st->keys, (const char *const *)st->values,
                           st->n, &st->conf, err, sizeof(err));
    if (ec != 0) {
        km_rpc_fail(req, ec, "%s", err);
        return;
    }
    st->conf_ready = true;
    km_rpc_req_hold(req); /* for the source query */
    e = km_srcadm_metadata(cm->rpc.srcadm, &st->conf.bootstrap_servers, false,
                           st->conf.request_timeout_ms, km_create_on_source, req);
    if (e != KM_OK) {
        km_rpc_req_release(req);
        km_rpc_fail(req, e == KM_ERR_INVALID ? KP_ERR_INVALID_CONFIG : KP_ERR_UNKNOWN_SERVER_ERROR,
                    "Cannot query the source cluster of mirror %s: %s", st->name, km_err_str(e));
    }
    return;

nomem:
    km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
}

/* ================================ ListMirrors =========================================== */

void km_rpc_list_mirrors(km_rpc_req_t *req)
{
    km_plugin_t *cm = req->cm;
    kp_ListMirrorsResponse_t resp;
    size_t n = km_catalog_mirror_count(&cm->catalog);

    if (!km_rpc_authorized(req, KM_RPC_OP_DESCRIBE)) {
        km_rpc_fail(req, KP_ERR_CLUSTER_MIRROR_AUTHORIZATION_FAILED,
                    "%s may not list mirrors (DESCRIBE on the cluster)", req->principal);
        return;
    }
    kp_ListMirrorsResponse_init(&resp);
    resp.Mirrors.cnt = 0;
    resp.Mirrors.v = kp_arena_calloc(&req->ar, n + 1, sizeof(*resp.Mirrors.v));
    if (resp.Mirrors.v == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const km_mirror_def_t *def = km_catalog_mirror_at(&cm->catalog, i);
        kp_ListMirrorsResponse_ListedMirror_t *m = &resp.Mirrors.v[resp.Mirrors.cnt++];

        m->MirrorName = km_rpc_str(req, def->name);
        m->SourceBootstrap = km_rpc_str(req, km_rpc_def_bootstrap(def));
        m->SourceClusterId = km_rpc_str(req, def->source_cluster_id);
        m->TopicCount = (int32_t)km_catalog_mirror_topic_count(&cm->catalog, def->name);
    }
    km_rpc_complete(req, &resp);
}

/* ================================ DeleteMirror ========================================== */

typedef struct km_delete_ctx {
    km_rpc_req_t *req;
    const char *mirror;
    kp_IncrementalAlterConfigsRequest_AlterConfigsResource_t *res;
    int32_t nres, cap;
    int32_t not_stopped;
    char first[256];
} km_delete_ctx_t;

static void km_delete_collect(void *arg, const km_cat_topic_t *t)
{
    km_delete_ctx_t *c = arg;

    if (t->mirror == NULL || strcmp(t->mirror, c->mirror) != 0)
        return;
    if (t->desired != KM_DESIRED_STOPPED) {
        if (c->not_stopped++ == 0)
            snprintf(c->first, sizeof(c->first), "%s (%s)", t->name,
                     km_catalog_desired_name(t->desired));
        return;
    }
    /* Desired STOPPED: the partitions this broker leads must have got there (the state
     * machine's view; partitions other brokers lead are theirs to finish). */
    for (int32_t p = 0; p < t->nparts; p++) {
        km_mpart_mgr_t *mgr = km_mirror_mgr(c->req->cm);
        km_mpart_desc_t d;
        if (t->parts[p].role != KBX_ROLE_LEADER || mgr == NULL ||
            km_mpart_describe(mgr, &t->id, p, &d) != KM_OK || d.state == KM_MPART_STOPPED)
            continue;
        if (c->not_stopped++ == 0)
            snprintf(c->first, sizeof(c->first), "%s-%d (%s)", t->name, (int)p,
                     d.state_name != NULL ? d.state_name : "UNKNOWN");
        return;
    }
    if (c->nres < c->cap) {
        kp_IncrementalAlterConfigsRequest_AlterConfigsResource_t *r = &c->res[c->nres++];
        kp_IncrementalAlterConfigsRequest_AlterableConfig_t *cfg =
            kp_arena_calloc(&c->req->ar, 1, sizeof(*cfg));
        r->ResourceType = 2;
        r->ResourceName = km_rpc_str(c->req, t->name);
        if (cfg != NULL) {
            cfg->Name = km_rpc_str(c->req, KM_CATALOG_MIRROR_NAME_KEY);
            cfg->ConfigOperation = 1; /* DELETE */
            cfg->Value.len = -1;
            r->Configs.cnt = 1;
            r->Configs.v = cfg;
        }
    }
}

static void km_delete_done(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                           int32_t tag)
{
    const kp_DeleteMirrorRequest_t *rq = req->rq;
    kp_DeleteMirrorResponse_t resp;

    (void)body;
    (void)len;
    (void)tag;
    if (status != KBX_OK) {
        km_rpc_fail(req, km_rpc_host_error(status), "Mirror %.*s was not deleted: %s",
                    (int)rq->MirrorName.len, rq->MirrorName.ptr, km_rpc_host_errstr(status));
        return;
    }
    /* The mirror's __mirror_state records are tombstoned by every broker when the definition
     * leaves the metadata (km_rpc.c, km_rpc_on_mirror -> km_state_delete_mirror). */
    km_log_info(req->cm, "mirror %.*s deleted by %s", (int)rq->MirrorName.len, rq->MirrorName.ptr,
                req->principal);
    kp_DeleteMirrorResponse_init(&resp);
    km_rpc_complete(req, &resp);
}

static void km_delete_write(km_rpc_req_t *req)
{
    const kp_DeleteMirrorRequest_t *rq = req->rq;
    kbx_record_t rec;
    const kbx_record_t *recs[1] = {&rec};
    int32_t rc;

    memset(&rec, 0, sizeof(rec));
    rec.struct_size = sizeof(rec);
    rec.record_type = KM_CATALOG_RECORD_MIRROR;
    rec.key = (const uint8_t *)rq->MirrorName.ptr;
    rec.key_len = (uint64_t)rq->MirrorName.len;
    rec.value = NULL; /* delete */
    rc = km_rpc_controller_write(req, recs, 1, km_delete_done, 0);
    if (rc != KBX_OK)
        km_rpc_fail(req, km_rpc_host_error(rc), "Mirror %.*s was not deleted: %s",
                    (int)rq->MirrorName.len, rq->MirrorName.ptr, km_rpc_host_errstr(rc));
}

static void km_delete_on_configs(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                                 int32_t tag)
{
    kp_IncrementalAlterConfigsResponse_t resp;
    kp_reader_t rd;

    (void)tag;
    if (status != KBX_OK) {
        km_rpc_fail(req, km_rpc_host_error(status), "Cannot detach the mirror's stopped topics: %s",
                    km_rpc_host_errstr(status));
        return;
    }
    kp_reader_init(&rd, body, len);
    kp_IncrementalAlterConfigsResponse_init(&resp);
    if (kp_IncrementalAlterConfigsResponse_decode(&rd, &req->ar, &resp, 1) != 0) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "undecodable IncrementalAlterConfigs answer");
        return;
    }
    for (int32_t i = 0; i < resp.Responses.cnt; i++) {
        const kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_t *r =
            &resp.Responses.v[i];
        if (r->ErrorCode != 0) {
            km_rpc_fail(req, r->ErrorCode, "Cannot detach topic %.*s from the mirror: %.*s",
                        (int)r->ResourceName.len, r->ResourceName.ptr,
                        (int)(r->ErrorMessage.len > 0 ? r->ErrorMessage.len : 0),
                        r->ErrorMessage.ptr != NULL ? r->ErrorMessage.ptr : "");
            return;
        }
    }
    km_delete_write(req);
}

typedef struct km_delete_st {
    char *name;
    kp_IncrementalAlterConfigsRequest_AlterConfigsResource_t *res;
    int32_t nres;
    int pending;
    int16_t ec;
    char msg[300];
} km_delete_st_t;

/* Every partition confirmed STOPPED: detach the topics, then delete the definition. */
static void km_delete_detach(km_rpc_req_t *req)
{
    km_delete_st_t *st = req->st;
    kp_IncrementalAlterConfigsRequest_t iac;
    int32_t rc;

    if (st->nres == 0) {
        km_delete_write(req);
        return;
    }
    /* The stopped topics leave the mirror (mirror.name removed): they are plain topics now. */
    kp_IncrementalAlterConfigsRequest_init(&iac);
    iac.Resources.cnt = st->nres;
    iac.Resources.v = st->res;
    rc = km_rpc_local_request(req, 44, 1, &iac, &kp_IncrementalAlterConfigsRequest_desc,
                              km_delete_on_configs, 0);
    if (rc != KBX_OK)
        km_rpc_fail(req, km_rpc_host_error(rc), "Cannot detach the mirror's topics: %s",
                    km_rpc_host_errstr(rc));
}

static void km_delete_on_broker(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                                int32_t broker_id)
{
    km_delete_st_t *st = req->st;
    kp_DescribeMirrorsResponse_t resp;
    kp_reader_t rd;

    st->pending--;
    if (broker_id != INT32_MIN && st->ec == 0) {
        kp_reader_init(&rd, body, len);
        kp_DescribeMirrorsResponse_init(&resp);
        if (status != KBX_OK || kp_DescribeMirrorsResponse_decode(&rd, &req->ar, &resp, 0) != 0 ||
            resp.ErrorCode) {
            st->ec = KP_ERR_BROKER_NOT_AVAILABLE;
            snprintf(st->msg, sizeof(st->msg),
                     "cannot confirm that the partitions broker %d leads are STOPPED (%s)",
                     (int)broker_id,
                     status != KBX_OK ? km_rpc_host_errstr(status) : "unusable answer");
        }
        for (int32_t i = 0; st->ec == 0 && i < resp.Mirrors.cnt; i++)
            for (int32_t t = 0; st->ec == 0 && t < resp.Mirrors.v[i].Topics.cnt; t++) {
                const kp_DescribeMirrorsResponse_TopicResult_t *tr = &resp.Mirrors.v[i].Topics.v[t];
                for (int32_t p = 0; st->ec == 0 && p < tr->Partitions.cnt; p++) {
                    kp_str_t sv = tr->Partitions.v[p].StateValue;
                    if (sv.len == 7 && memcmp(sv.ptr, "STOPPED", 7) == 0)
                        continue;
                    st->ec = KP_ERR_CLUSTER_MIRROR_NOT_EMPTY;
                    snprintf(st->msg, sizeof(st->msg),
                             "partition %.*s-%d (broker %d) is %.*s, not STOPPED yet",
                             (int)tr->TopicName.len, tr->TopicName.ptr,
                             (int)tr->Partitions.v[p].PartitionIndex, (int)broker_id,
                             (int)(sv.len > 0 ? sv.len : 0), sv.len > 0 ? sv.ptr : "");
                }
            }
    }
    if (st->pending > 0)
        return;
    if (st->ec != 0) {
        km_rpc_fail(req, st->ec, "Mirror %s was not deleted: %s", st->name, st->msg);
        return;
    }
    km_delete_detach(req);
}

static void km_delete_ask_brokers(km_rpc_req_t *req, int32_t status, const uint8_t *body,
                                  size_t len, int32_t tag)
{
    km_delete_st_t *st = req->st;
    km_plugin_t *cm = req->cm;
    kp_DescribeMirrorsRequest_t leg;
    kp_str_t names[1];
    const int32_t *brokers;
    size_t nb;

    (void)tag;
    brokers = km_rpc_brokers_decode(req, status, body, len, &nb);
    kp_DescribeMirrorsRequest_init(&leg);
    names[0] = km_rpc_str(req, st->name);
    leg.MirrorNames.cnt = 1;
    leg.MirrorNames.v = names;
    leg.ClusterId = km_rpc_str(req, cm->cluster_id); /* a leg: that broker's partitions only */
    leg.LastMirrorEpochLookups.cnt = 0;
    st->pending = 1;
    for (size_t i = 0; brokers != NULL && i < nb; i++) {
        if (brokers[i] == cm->broker_id)
            continue;
        if (km_rpc_broker_request(req, brokers[i], 99, 0, &leg, &kp_DescribeMirrorsRequest_desc,
                                  km_delete_on_broker, brokers[i]) == KBX_OK) {
            st->pending++;
        } else if (st->ec == 0) {
            st->ec = KP_ERR_BROKER_NOT_AVAILABLE;
            snprintf(st->msg, sizeof(st->msg), "broker %d could not be asked", (int)brokers[i]);
        }
    }
    km_delete_on_broker(req, KBX_OK, NULL, 0, INT32_MIN); /* releases the hold */
}

void km_rpc_delete_mirror(km_rpc_req_t *req)
{
    const kp_DeleteMirrorRequest_t *rq = req->rq;
    km_plugin_t *cm = req->cm;
    km_delete_st_t *st;
    km_delete_ctx_t c;
    char *name;

    if (!km_rpc_authorized(req, KM_RPC_OP_ALTER)) {
        km_rpc_fail(req, KP_ERR_CLUSTER_MIRROR_AUTHORIZATION_FAILED,
                    "%s may not delete mirrors (ALTER on the cluster)", req->principal);
        return;
    }
    name = km_rpc_cstr(req, rq->MirrorName);
    if (name == NULL || km_catalog_mirror_find(&cm->catalog, name) == NULL) {
        if (name != NULL && km_rpc_mirror_grace(req, km_rpc_delete_mirror))
            return;
        km_rpc_fail(req, KP_ERR_UNKNOWN_CLUSTER_MIRROR, "Mirror %s does not exist",
                    name != NULL ? name : "(null)");
        return;
    }
    memset(&c, 0, sizeof(c));
    c.req = req;
    c.mirror = name;
    c.cap = (int32_t)km_catalog_mirror_topic_count(&cm->catalog, name);
    c.res = kp_arena_calloc(&req->ar, (size_t)c.cap + 1, sizeof(*c.res));
    if (c.res == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    km_catalog_topic_foreach(&cm->catalog, km_delete_collect, &c);
    if (c.not_stopped > 0) {
        km_rpc_fail(req, KP_ERR_CLUSTER_MIRROR_NOT_EMPTY,
                    "Mirror %s still has %d topic(s) not stopped, e.g. %s: stop them first", name,
                    (int)c.not_stopped, c.first);
        return;
    }
    st = kp_arena_calloc(&req->ar, 1, sizeof(*st));
    if (st == NULL) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    st->name = name;
    st->res = c.res;
    st->nres = c.nres;
    req->st = st; /* in the arena: no st_free */
    if (c.cap == 0) {
        km_delete_write(req);
        return;
    }
    /* The partitions other brokers lead must be STOPPED too: ask them (fan-out legs). */
    if (km_rpc_brokers_query(req, km_delete_ask_brokers, 0) != KBX_OK)
        km_delete_ask_brokers(req, KBX_ERR_INVALID, NULL, 0, 0);
}

/* ================================ DescribeMirrors ======================================= */

typedef struct km_describe_st {
    kp_DescribeMirrorsResponse_t resp;
    int pending;
    char partial[256];
} km_describe_st_t;

typedef struct km_describe_ctx {
    km_rpc_req_t *req;
    kp_DescribeMirrorsResponse_DescribedMirror_t *m;
    const char *mirror;
} km_describe_ctx_t;

/* The partition state machine's view of a partition this broker leads (plugin/mirror/). */
static bool km_describe_mpart(km_rpc_req_t *req, const km_cat_topic_t *t, int32_t p,
                              kp_DescribeMirrorsResponse_PartitionDetail_t *pd)
{
    km_mpart_mgr_t *mgr = km_mirror_mgr(req->cm);
    km_mpart_desc_t d;
    const char *err = NULL;
    int32_t retry;

    if (mgr == NULL || km_mpart_describe(mgr, &t->id, p, &d) != KM_OK)
        return false;
    pd->StateValue = km_rpc_str(req, d.state_name != NULL ? d.state_name : "UNKNOWN");
    retry = d.rec.non_retryable ? -1 : d.rec.retry_attempt;
    if (d.rec.error[0] != '\0') {
        err = d.rec.error;
    } else if (d.fetching) {
        /* Transient source errors (MIRRORING goes on): the streak's error and its length as
         * the retry count, none once a fetch answered again. */
        if (d.fetch.retries > 0) {
            err = d.fetch.error[0] != '\0' ? d.fetch.error : d.transient_error;
            if (retry >= 0 && d.fetch.retries > retry)
                retry = d.fetch.retries;
        }
    } else if (d.transient_error[0] != '\0') {
        err = d.transient_error;
    }
    pd->ErrorMessage = km_rpc_str(req, err != NULL && err[0] != '\0' ? err : NULL);
    pd->RetryAttempt = retry;
    pd->SourceOffset = d.fetching ? d.fetch.source_hw : -1;
    pd->DestinationOffset = d.log_end_offset;
    pd->LastMirrorEpoch = d.rec.lme_epoch;
    pd->LastMirrorOffset = d.rec.lme_offset;
    return true;
}

static void km_describe_topic(void *arg, const km_cat_topic_t *t)
{
    km_describe_ctx_t *c = arg;
    km_rpc_req_t *req = c->req;
    km_plugin_t *cm = req->cm;
    kp_DescribeMirrorsResponse_TopicResult_t *tr;
    int32_t nlead = 0;

    if (t->mirror == NULL || strcmp(t->mirror, c->mirror) != 0)
        return;
    for (int32_t p = 0; p < t->nparts; p++)
        nlead += t->parts[p].role == KBX_ROLE_LEADER;
    if (nlead == 0)
        return; /* this broker reports only the partitions it leads */
    tr = &c->m->Topics.v[c->m->Topics.cnt];
    tr->TopicName = km_rpc_str(req, t->name);
    tr->Partitions.v = kp_arena_calloc(&req->ar, (size_t)nlead, sizeof(*tr->Partitions.v));
    if (tr->Partitions.v == NULL)
        return;
    tr->Partitions.cnt = 0;
    for (int32_t p = 0; p < t->nparts; p++) {
        kp_DescribeMirrorsResponse_PartitionDetail_t *pd;
        kbx_partition_t *part = NULL;
        kbx_log_offsets_t offs = {.struct_size = sizeof(offs)};

        if (t->parts[p].role != KBX_ROLE_LEADER)
            continue;
        pd = &tr->Partitions.v[tr->Partitions.cnt++];
        kp_DescribeMirrorsResponse_PartitionDetail_init(pd);
        pd->PartitionIndex = p;
        if (km_describe_mpart(req, t, p, pd))
            continue;
        /* No state machine for it (yet): UNKNOWN, and the message says what the catalog
         * knows. */
        pd->StateValue = km_rpc_str(req, "UNKNOWN");
        pd->ErrorMessage = km_rpc_strf(req, "desired %s; no partition state machine here",
                                       km_catalog_desired_name(t->desired));
        if (cm->ref.api->partition_acquire(cm->ref.host, &t->id, p, -1, &part) == KBX_OK) {
            if (cm->ref.api->log_offsets(cm->ref.host, part, &offs) == KBX_OK)
                pd->DestinationOffset = offs.log_end_offset;
            cm->ref.api->partition_release(cm->ref.host, part);
        }
    }
    c->m->Topics.cnt++;
}

/* This broker's part: every (requested) mirror, with the partitions this broker leads. */
/* The metadata sync's status per kind, on the mirror's coordinator only (elsewhere left
 * empty: the tagged field is then not sent). */
static bool km_describe_sync(km_rpc_req_t *req, kp_DescribeMirrorsResponse_DescribedMirror_t *m,
                             const char *mirror)
{
    kp_DescribeMirrorsResponse_SyncKindStatus_t *v;
    km_sync_status_t st;
    int32_t n = 0;

    m->SyncStatus.cnt = 0;
    v = kp_arena_calloc(&req->ar, KM_SYNC_NKINDS, sizeof(*v));
    if (v == NULL)
        return false;
    for (int k = 0; k < KM_SYNC_NKINDS; k++) {
        if (!km_sync_status(req->cm, mirror, k, &st))
            continue;
        kp_DescribeMirrorsResponse_SyncKindStatus_init(&v[n]);
        v[n].Kind = km_rpc_str(req, km_sync_kind_name(k));
        v[n].Enabled = st.enabled;
        v[n].Runs = (int64_t)st.runs;
        v[n].Errors = (int64_t)st.errors;
        v[n].LastError =
            st.last_error[0] != '\0' ? km_rpc_str(req, st.last_error) : km_rpc_str(req, NULL);
        v[n].LastErrorTimeMs = st.last_error_ms;
        v[n].LastSyncTimeMs = st.last_success_ms;
        n++;
    }
    m->SyncStatus.v = v;
    m->SyncStatus.cnt = n;
    return true;
}

static bool km_describe_local(km_rpc_req_t *req, kp_DescribeMirrorsResponse_t *resp)
{
    const kp_DescribeMirrorsRequest_t *rq = req->rq;
    km_plugin_t *cm = req->cm;
    size_t nm = km_catalog_mirror_count(&cm->catalog);
    size_t want = rq->MirrorNames.cnt >= 0 ? (size_t)rq->MirrorNames.cnt : nm;

    kp_DescribeMirrorsResponse_init(resp);
    resp->Mirrors.cnt = 0;
    resp->Mirrors.v = kp_arena_calloc(&req->ar, want + 1, sizeof(*resp->Mirrors.v));
    if (resp->Mirrors.v == NULL)
        return false;
    for (size_t i = 0; i < want; i++) {
        kp_DescribeMirrorsResponse_DescribedMirror_t *m = &resp->Mirrors.v[resp->Mirrors.cnt++];
        const km_mirror_def_t *def;
        km_describe_ctx_t c;
        size_t nt;

        if (rq->MirrorNames.cnt >= 0) {
            char *name = km_rpc_cstr(req, rq->MirrorNames.v[i]);
            def = name != NULL ? km_catalog_mirror_find(&cm->catalog, name) : NULL;
            m->MirrorName =
                rq->MirrorNames.v[i].len >= 0 ? rq->MirrorNames.v[i] : km_rpc_str(req, "");
            if (def == NULL) {
                m->ErrorCode = KP_ERR_UNKNOWN_CLUSTER_MIRROR;
                m->ErrorMessage =
                    km_rpc_strf(req, "Mirror %s does not exist", name != NULL ? name : "(null)");
                m->Topics.cnt = 0;
                m->AuthorizedOperations = INT32_MIN;
                continue;
            }
        } else {
            def = km_catalog_mirror_at(&cm->catalog, i);
            m->MirrorName = km_rpc_str(req, def->name);
        }
        m->ErrorMessage.len = -1;
        m->SourceBootstrap = km_rpc_str(req, km_rpc_def_bootstrap(def));
        m->SourceClusterId = def->source_cluster_id[0] != '\0'
                                 ? km_rpc_str(req, def->source_cluster_id)
                                 : km_rpc_str(req, NULL);
        m->AuthorizedOperations = INT32_MIN;
        nt = km_catalog_mirror_topic_count(&cm->catalog, def->name);
        m->Topics.cnt = 0;
        m->Topics.v = kp_arena_calloc(&req->ar, nt + 1, sizeof(*m->Topics.v));
        if (m->Topics.v == NULL)
            return false;
        c.req = req;
        c.m = m;
        c.mirror = def->name;
        km_catalog_topic_foreach(&cm->catalog, km_describe_topic, &c);
        if (!km_describe_sync(req, m, def->name))
            return false;
    }
    return true;
}

/* Append the topics and partitions of another broker's answer (all in the request arena). */
static void km_describe_merge(km_rpc_req_t *req, kp_DescribeMirrorsResponse_t *into,
                              const kp_DescribeMirrorsResponse_t *from)
{
    for (int32_t i = 0; i < from->Mirrors.cnt; i++) {
        const kp_DescribeMirrorsResponse_DescribedMirror_t *fm = &from->Mirrors.v[i];
        kp_DescribeMirrorsResponse_DescribedMirror_t *m = NULL;
        kp_DescribeMirrorsResponse_TopicResult_t *nv;

        for (int32_t j = 0; j < into->Mirrors.cnt && m == NULL; j++)
            if (into->Mirrors.v[j].MirrorName.len == fm->MirrorName.len &&
                memcmp(into->Mirrors.v[j].MirrorName.ptr, fm->MirrorName.ptr,
                       (size_t)fm->MirrorName.len) == 0)
                m = &into->Mirrors.v[j];
        if (m != NULL && m->ErrorCode == 0 && m->SyncStatus.cnt <= 0 && fm->SyncStatus.cnt > 0)
            m->SyncStatus = fm->SyncStatus; /* only the coordinator's leg has it */
        if (m == NULL || fm->Topics.cnt <= 0 || m->ErrorCode != 0)
            continue; /* a mirror this broker does not know (yet): its own answer rules */
        nv = kp_arena_calloc(&req->ar, (size_t)(m->Topics.cnt + fm->Topics.cnt), sizeof(*nv));
        if (nv == NULL)
            continue;
        if (m->Topics.cnt > 0)
            memcpy(nv, m->Topics.v, (size_t)m->Topics.cnt * sizeof(*nv));
        for (int32_t t = 0; t < fm->Topics.cnt; t++) {
            const kp_DescribeMirrorsResponse_TopicResult_t *ft = &fm->Topics.v[t];
            kp_DescribeMirrorsResponse_TopicResult_t *tr = NULL;
            for (int32_t k = 0; k < m->Topics.cnt && tr == NULL; k++)
                if (nv[k].TopicName.len == ft->TopicName.len &&
                    memcmp(nv[k].TopicName.ptr, ft->TopicName.ptr, (size_t)ft->TopicName.len) == 0)
                    tr = &nv[k];
            if (tr == NULL) {
                nv[m->Topics.cnt++] = *ft;
                continue;
            }
            if (ft->Partitions.cnt > 0) {
                kp_DescribeMirrorsResponse_PartitionDetail_t *pv = kp_arena_calloc(
                    &req->ar, (size_t)(tr->Partitions.cnt + ft->Partitions.cnt), sizeof(*pv));
                if (pv == NULL)
                    continue;
                if (tr->Partitions.cnt > 0)
                    memcpy(pv, tr->Partitions.v, (size_t)tr->Partitions.cnt * sizeof(*pv));
                memcpy(pv + tr->Partitions.cnt, ft->Partitions.v,
                       (size_t)ft->Partitions.cnt * sizeof(*pv));
                tr->Partitions.v = pv;
                tr->Partitions.cnt += ft->Partitions.cnt;
            }
        }
        m->Topics.v = nv;
    }
}

static bool km_describe_str_eq(kp_str_t a, kp_str_t b)
{
    return a.len >= 0 && a.len == b.len && memcmp(a.ptr, b.ptr, (size_t)a.len) == 0;
}

/*
 * A failback lookup (design.md M1): the requesting cluster gave its own id (not ours) and maybe
 * the partitions it needs. Keep the mirrors whose source is that cluster and, when partitions
 * are listed, only those (topics matched by id through the catalog); their LastMirrorEpoch /
 * LastMirrorOffset are what the state machines recorded at STOPPING.
 */
static void km_describe_filter_lookup(km_rpc_req_t *req, kp_DescribeMirrorsResponse_t *resp)
{
    const kp_DescribeMirrorsRequest_t *rq = req->rq;
    km_plugin_t *cm = req->cm;
    int32_t nm = 0;

    for (int32_t i = 0; i < resp->Mirrors.cnt; i++) {
        kp_DescribeMirrorsResponse_DescribedMirror_t *m = &resp->Mirrors.v[i];
        int32_t nt = 0;

        if (m->ErrorCode != 0 || !km_describe_str_eq(m->SourceClusterId, rq->ClusterId))
            continue;
        for (int32_t t = 0; rq->LastMirrorEpochLookups.cnt > 0 && t < m->Topics.cnt; t++) {
            kp_DescribeMirrorsResponse_TopicResult_t *tr = &m->Topics.v[t];
            char *name = km_rpc_cstr(req, tr->TopicName);
            const km_cat_topic_t *ct =
                name != NULL ? km_catalog_topic_find(&cm->catalog, name) : NULL;
            const kp_DescribeMirrorsRequest_LastMirrorEpochLookup_t *lk = NULL;
            int32_t np = 0;

            for (int32_t k = 0; ct != NULL && lk == NULL && k < rq->LastMirrorEpochLookups.cnt; k++)
                if (memcmp(rq->LastMirrorEpochLookups.v[k].TopicId.b, ct->id.bytes, 16) == 0)
                    lk = &rq->LastMirrorEpochLookups.v[k];
            if (lk == NULL)
                continue;
            for (int32_t p = 0; p < tr->Partitions.cnt; p++) {
                bool want = lk->Partitions.cnt <= 0;
                for (int32_t q = 0; !want && q < lk->Partitions.cnt; q++)
                    want = lk->Partitions.v[q] == tr->Partitions.v[p].PartitionIndex;
                if (want)
                    tr->Partitions.v[np++] = tr->Partitions.v[p];
            }
            tr->Partitions.cnt = np;
            m->Topics.v[nt++] = *tr;
        }
        if (rq->LastMirrorEpochLookups.cnt > 0)
            m->Topics.cnt = nt;
        resp->Mirrors.v[nm++] = *m;
    }
    resp->Mirrors.cnt = nm;
}

static void km_describe_finish(km_rpc_req_t *req)
{
    km_describe_st_t *st = req->st;
    const kp_DescribeMirrorsRequest_t *rq = req->rq;
    km_plugin_t *cm = req->cm;

    if (rq->ClusterId.len > 0 &&
        !km_describe_str_eq(rq->ClusterId, km_rpc_str(req, cm->cluster_id)))
        km_describe_filter_lookup(req, &st->resp);

    if (st->partial[0] != '\0')
        st->resp.ErrorMessage = km_rpc_str(req, st->partial);
    km_rpc_complete(req, &st->resp);
}

static void km_describe_on_broker(km_rpc_req_t *req, int32_t status, const uint8_t *body,
                                  size_t len, int32_t broker_id)
{
    km_describe_st_t *st = req->st;
    kp_DescribeMirrorsResponse_t resp;
    kp_reader_t rd;

    st->pending--;
    if (status == KBX_OK) {
        kp_reader_init(&rd, body, len);
        kp_DescribeMirrorsResponse_init(&resp);
        if (kp_DescribeMirrorsResponse_decode(&rd, &req->ar, &resp, 0) == 0 && resp.ErrorCode == 0)
            km_describe_merge(req, &st->resp, &resp);
        else
            status = KBX_ERR_INVALID;
    }
    if (status != KBX_OK && st->partial[0] == '\0')
        snprintf(st->partial, sizeof(st->partial),
                 "partial answer: broker %d did not report its partitions (%s)", (int)broker_id,
                 km_rpc_host_errstr(status));
    if (st->pending == 0)
        km_describe_finish(req);
}

/* Ask every other broker for its part (a fan-out leg: ClusterId = this cluster's id). */
static void km_describe_fan_out(km_rpc_req_t *req, int32_t status, const uint8_t *body, size_t len,
                                int32_t tag)
{
    const kp_DescribeMirrorsRequest_t *rq = req->rq;
    km_describe_st_t *st = req->st;
    km_plugin_t *cm = req->cm;
    kp_DescribeMirrorsRequest_t fan;
    const int32_t *brokers;
    size_t nb;

    (void)tag;
    brokers = km_rpc_brokers_decode(req, status, body, len, &nb);
    fan = *rq;
    fan.ClusterId = km_rpc_str(req, cm->cluster_id);
    fan.LastMirrorEpochLookups.cnt = 0;
    st->pending = 1;
    for (size_t i = 0; brokers != NULL && i < nb; i++) {
        if (brokers[i] == cm->broker_id)
            continue;
        if (km_rpc_broker_request(req, brokers[i], 99, 0, &fan, &kp_DescribeMirrorsRequest_desc,
                                  km_describe_on_broker, brokers[i]) == KBX_OK)
            st->pending++;
        else if (st->partial[0] == '\0')
            snprintf(st->partial, sizeof(st->partial),
                     "partial answer: broker %d could not be asked", (int)brokers[i]);
    }
    if (--st->pending == 0)
        km_describe_finish(req);
}

void km_rpc_describe_mirrors(km_rpc_req_t *req)
{
    const kp_DescribeMirrorsRequest_t *rq = req->rq;
    km_plugin_t *cm = req->cm;
    km_describe_st_t *st;
    bool leg;

    if (!km_rpc_authorized(req, KM_RPC_OP_DESCRIBE)) {
        km_rpc_fail(req, KP_ERR_CLUSTER_MIRROR_AUTHORIZATION_FAILED,
                    "%s may not describe mirrors (DESCRIBE on the cluster)", req->principal);
        return;
    }
    if (km_lme_is_lookup(req)) {
        km_lme_serve(req); /* a failback LME lookup (rpc/km_lme.c) */
        return;
    }
    st = kp_arena_calloc(&req->ar, 1, sizeof(*st));
    if (st == NULL || !km_describe_local(req, &st->resp)) {
        km_rpc_fail(req, KP_ERR_UNKNOWN_SERVER_ERROR, "out of memory");
        return;
    }
    req->st = st; /* in the arena: no st_free */
    /* A request carrying this cluster's own id is another broker's fan-out leg: answer with
     * this broker's partitions only. A failback LME lookup carries the *other* cluster's id:
     * with LastMirrorEpochLookups it was answered above from __mirror_state (rpc/km_lme.c);
     * without, it is gathered like any describe and filtered at the end
     * (km_describe_filter_lookup). */
    leg = rq->ClusterId.len > 0 && (size_t)rq->ClusterId.len == strlen(cm->cluster_id) &&
          memcmp(rq->ClusterId.ptr, cm->cluster_id, (size_t)rq->ClusterId.len) == 0;
    if (leg) {
        km_describe_finish(req);
        return;
    }
    if (km_rpc_brokers_query(req, km_describe_fan_out, 0) != KBX_OK)
        km_describe_fan_out(req, KBX_ERR_INVALID, NULL, 0, 0);
}
