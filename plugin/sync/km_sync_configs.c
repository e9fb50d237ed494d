/*
 * km_sync_configs.c - KM_SYNC_CONFIGS: topic configs source -> destination (docs/plugin.md
 * "Topic configs", docs/design.md M81-M84, kip-1279-facts §7.6).
 *
 * One run walks the eligible topics of the mirror (run->topics for a final sync) in chunks of
 * KM_CFGS_CHUNK: DescribeConfigs of the chunk on the source (km_srcadm_request, v1..4, which
 * Apache Kafka 2.8-4.x and kbroker serve) and on the destination (kbx local_request), both at
 * once; then per topic, all at once: its SYNCED_TOPIC_CONFIGS record (persist runs only), the
 * plan (km_sync_cfgplan.c), the record written ahead when the sync is about to own new keys,
 * one IncrementalAlterConfigs of only the changed keys (local_request: the internal principal,
 * forwarded to the controller by a broker-only node), and the record written again when keys
 * were deleted. A failing topic is reported with km_sync_run_error and the others go on.
 *
 * Every request and record operation holds the run: km_sync_run_done is called only when
 * nothing is in flight any more (host requests time out; km_rpc_host_request is counted by the
 * rpc module, whose stop waits for it). A continuation dropped at shutdown releases its hold
 * and the last one frees this kind's context, never the run (km_sync_destroy frees that).
 *
 * @thread coord (all of it; a continuation dropped at shutdown only releases its hold)
 */
#define KM_LOG_COMPONENT "kmirror.sync"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/km_catalog.h"
#include "coord/km_coord.h"
#include "core/km_plugin_types.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "kp_state.h"
#include "rpc/km_rpc.h"
#include "rpc/km_srcadm.h"
#include "state/km_state.h"
#include "sync/km_sync.h"
#include "sync/km_sync_cfgplan.h"
#include "util/km_log.h"
#include "util/km_mem.h"

#define KM_CFGS_CHUNK           64 /* topics per DescribeConfigs */
#define KM_CFGS_DESCRIBE_MAXVER 4
#define KM_CFGS_IAC_VER         1
#define KM_CFGS_ARENA_LIMIT     (64u << 20)
#define KM_CFGS_RES_TOPIC       2           /* ConfigResource type TOPIC */
#define KM_CFGS_MAGIC           0x4b4d4346u /* "KMCF" */

typedef enum km_cfgs_step {
    KM_CFGS_GET,  /* waiting for the record */
    KM_CFGS_PRE,  /* waiting for the record written ahead */
    KM_CFGS_IAC,  /* waiting for IncrementalAlterConfigs */
    KM_CFGS_POST, /* waiting for the record written after the deletes */
    KM_CFGS_DONE,
} km_cfgs_step_t;

typedef struct km_cfgs km_cfgs_t;

/** One topic of the current chunk. */
typedef struct km_cfgs_item {
    km_cfgs_t *c;
    char *name; /* owned by the run (c->names) */
    kbx_uuid_t id;
    km_cfgs_step_t step;
    const kp_DescribeConfigsResponse_DescribeConfigsResult_t *src, *dst;
    kp_str_t *remembered; /* the record's keys at the start, copied into the chunk arena */
    size_t nremembered;
    kp_str_t *stored; /* what the record holds now (remembered, then what was written) */
    size_t nstored;
    km_cfgplan_t plan;
} km_cfgs_item_t;

struct km_cfgs {
    uint32_t magic;
    km_sync_run_t *run;
    km_plugin_t *cm;
    char **names; /* the topics of the run, with their ids */
    kbx_uuid_t *ids;
    size_t ntopics;
    size_t lo, hi; /* the current chunk [lo, hi) */
    /* Callbacks not yet received. Atomic only for the drop paths at shutdown (a closed queue
     * drops on the pushing thread while the loop may still drain): the last one frees c. */
    atomic_int pending;
    kp_arena_t ar; /* the chunk's: requests, answers, plans */
    kp_DescribeConfigsRequest_t drq;
    kp_DescribeConfigsResponse_t sresp, dresp;
    bool src_ok, dst_ok;
    char src_err[320], dst_err[320];
    km_cfgs_item_t *items; /* hi - lo */
    /* Test only (scenario sync-configs, run.sh --inject cfg-forget / cfg-own-all): environment
     * variable KMIRROR_TEST_CFGSYNC=forget ignores the remembered keys (as if the record were
     * lost), =own-all takes every destination override as remembered. Read at each run. */
    int test_mode; /* 0, 1 forget, 2 own-all */
};

static void km_cfgs_chunk_next(km_cfgs_t *c);
static void km_cfgs_item_advance(km_cfgs_item_t *it);
static void km_cfgs_on_iac(km_plugin_t *cm, void *arg, int32_t status, const uint8_t *body,
                           size_t len);

/* --- run bookkeeping ----------------------------------------------------------------------- */

static void km_cfgs_free(km_cfgs_t *c)
{
    km_plugin_t *cm = c->cm;

    for (size_t i = 0; i < c->ntopics; i++)
        km_free(cm, c->names[i]);
    km_free(cm, c->names);
    km_free(cm, c->ids);
    kp_arena_free(&c->ar);
    c->magic = 0;
    km_free(cm, c);
}

static void km_cfgs_finish(km_cfgs_t *c)
{
    km_sync_run_t *run = c->run;

    km_cfgs_free(c);
    km_sync_run_done(run);
}

/* A callback of this chunk arrived: when none is left, the chunk (or the run) moves on. */
static void km_cfgs_settle(km_cfgs_t *c)
{
    if (atomic_fetch_sub(&c->pending, 1) > 1)
        return;
    for (size_t i = 0; c->items != NULL && i < c->hi - c->lo; i++)
        if (c->items[i].step != KM_CFGS_DONE)
            return; /* cannot happen: an item not done has a callback pending */
    km_cfgs_chunk_next(c);
}

static void km_cfgs_item_fail(km_cfgs_item_t *it, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void km_cfgs_item_fail(km_cfgs_item_t *it, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    km_sync_run_error(it->c->run, it->name, "%s", msg);
    it->step = KM_CFGS_DONE;
}

static void km_cfgs_str_fmt(char *out, size_t size, kp_str_t s)
{
    snprintf(out, size, "%.*s", s.len > 0 ? (int)s.len : 0, s.len > 0 ? s.ptr : "");
}

/* --- destination requests (km_rpc_host_request: kbx local_request, answer on the loop) ----- */

/* A continuation that will never run on the loop (it is gone; km_sync.h km_sync_destroy): the
 * last one frees the kind's context; the run is the scheduler's to free. @thread any */
static void km_cfgs_release(km_cfgs_t *c)
{
    if (atomic_fetch_sub(&c->pending, 1) == 1)
        km_cfgs_free(c);
}

/* Send msg to this cluster; on KM_OK done(arg) follows once. */
static km_err_t km_cfgs_local(km_cfgs_t *c, int16_t api_key, int16_t ver, const kp_msg_desc_t *desc,
                              const void *msg, km_rpc_done_fn done, void *arg)
{
    km_err_t err = km_rpc_host_request(c->cm, api_key, ver, msg, desc, done, arg);

    if (err == KM_OK)
        atomic_fetch_add(&c->pending, 1);
    return err;
}

/* --- per topic ----------------------------------------------------------------------------- */

static bool km_cfgs_str_eq(kp_str_t s, const char *cstr)
{
    return kp_str_eq(s, cstr) != 0;
}

/* The Configs of one DescribeConfigs result as plan entries (in the chunk arena). */
static km_err_t km_cfgs_entries(km_cfgs_t *c,
                                const kp_DescribeConfigsResponse_DescribeConfigsResult_t *r,
                                km_cfgentry_t **out, size_t *n)
{
    int32_t cnt = r->Configs.cnt > 0 ? r->Configs.cnt : 0;
    km_cfgentry_t *e = kp_arena_calloc(&c->ar, (size_t)cnt + 1, sizeof(*e));

    if (e == NULL)
        return KM_ERR_NOMEM;
    for (int32_t i = 0; i < cnt; i++) {
        const kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *x = &r->Configs.v[i];
        e[i].name = x->Name;
        e[i].value = x->Value;
        e[i].source = x->ConfigSource;
        e[i].sensitive = x->IsSensitive;
    }
    *out = e;
    *n = (size_t)cnt;
    return KM_OK;
}

static void km_cfgs_put_done(km_plugin_t *cm, void *arg, int16_t err, const char *msg);

/* Store keys (n of them) as the topic's SYNCED_TOPIC_CONFIGS record. */
static km_err_t km_cfgs_put(km_cfgs_item_t *it, kp_str_t *keys, size_t n)
{
    km_cfgs_t *c = it->c;
    km_plugin_t *cm = c->cm;
    kp_state_value_t v;
    km_err_t err;

    kp_state_value_init(&v, KP_STATE_REC_SYNCED_TOPIC_CONFIGS);
    v.u.topic_configs.topic_name = kp_str(it->name);
    v.u.topic_configs.key_cnt = (int32_t)n;
    v.u.topic_configs.keys = keys;
    v.u.topic_configs.update_time_ms = cm->ref.api->clock_wall_ms(cm->ref.host);
    err = km_state_put_record(cm, KP_STATE_REC_SYNCED_TOPIC_CONFIGS, c->run->mirror, &it->id, 0, &v,
                              km_cfgs_put_done, it);
    if (err == KM_OK) {
        atomic_fetch_add(&c->pending, 1);
        it->stored = keys;
        it->nstored = n;
    }
    return err;
}

/* keep + del as one array (the record written ahead: every key the sync may have written) */
static kp_str_t *km_cfgs_pre_keys(km_cfgs_t *c, const km_cfgplan_t *p, size_t *n)
{
    kp_str_t *v = kp_arena_calloc(&c->ar, p->nkeep + p->ndel + 1, sizeof(*v));

    if (v == NULL)
        return NULL;
    memcpy(v, p->keep, p->nkeep * sizeof(*v));
    memcpy(v + p->nkeep, p->del, p->ndel * sizeof(*v));
    *n = p->nkeep + p->ndel;
    return v;
}

static bool km_cfgs_has(const kp_str_t *v, size_t n, kp_str_t s)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].len == s.len && (s.len <= 0 || memcmp(v[i].ptr, s.ptr, (size_t)s.len) == 0))
            return true;
    return false;
}

/* a and b hold the same names (each has distinct names) */
static bool km_cfgs_same_set(const kp_str_t *a, size_t na, const kp_str_t *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (!km_cfgs_has(b, nb, a[i]))
            return false;
    return true;
}

/* Send the changed keys; false when there was nothing to send or it failed (then reported). */
static bool km_cfgs_send_iac(km_cfgs_item_t *it)
{
    km_cfgs_t *c = it->c;
    const km_cfgplan_t *p = &it->plan;
    kp_IncrementalAlterConfigsRequest_t rq;
    kp_IncrementalAlterConfigsRequest_AlterConfigsResource_t res;
    kp_IncrementalAlterConfigsRequest_AlterableConfig_t *cf;
    size_t n = p->nset + p->ndel;
    km_err_t err;

    cf = kp_arena_calloc(&c->ar, n + 1, sizeof(*cf));
    if (cf == NULL) {
        km_cfgs_item_fail(it, "out of memory");
        return false;
    }
    for (size_t i = 0; i < p->nset; i++) {
        kp_IncrementalAlterConfigsRequest_AlterableConfig_init(&cf[i]);
        cf[i].Name = p->set_names[i];
        cf[i].ConfigOperation = 0; /* SET */
        cf[i].Value = p->set_values[i];
    }
    for (size_t i = 0; i < p->ndel; i++) {
        kp_IncrementalAlterConfigsRequest_AlterableConfig_init(&cf[p->nset + i]);
        cf[p->nset + i].Name = p->del[i];
        cf[p->nset + i].ConfigOperation = 1; /* DELETE */
        cf[p->nset + i].Value = KP_STR_NULL;
    }
    kp_IncrementalAlterConfigsRequest_AlterConfigsResource_init(&res);
    res.ResourceType = KM_CFGS_RES_TOPIC;
    res.ResourceName = kp_str(it->name);
    res.Configs.cnt = (int32_t)n;
    res.Configs.v = cf;
    kp_IncrementalAlterConfigsRequest_init(&rq);
    rq.Resources.cnt = 1;
    rq.Resources.v = &res;
    rq.ValidateOnly = false;
    it->step = KM_CFGS_IAC;
    err = km_cfgs_local(c, 44, KM_CFGS_IAC_VER, &kp_IncrementalAlterConfigsRequest_desc, &rq,
                        km_cfgs_on_iac, it);
    if (err != KM_OK) {
        km_cfgs_item_fail(it, "cannot send IncrementalAlterConfigs: %s", km_err_str(err));
        return false;
    }
    km_log_debug(c->cm, "mirror %s topic %s: %zu config key(s) set, %zu deleted", c->run->mirror,
                 it->name, p->nset, p->ndel);
    return true;
}

/* KMIRROR_TEST_CFGSYNC (see km_cfgs_t.test_mode): replace the remembered keys; true when out
 * of memory. */
static bool km_cfgs_test_remembered(km_cfgs_item_t *it, const km_cfgentry_t *de, size_t nd)
{
    km_cfgs_t *c = it->c;

    if (c->test_mode == 1) {
        it->nremembered = 0;
    } else if (c->test_mode == 2) {
        it->remembered = kp_arena_calloc(&c->ar, nd + 1, sizeof(*it->remembered));
        if (it->remembered == NULL)
            return true;
        it->nremembered = 0;
        for (size_t i = 0; i < nd; i++)
            if (de[i].source == KM_CFG_SOURCE_TOPIC)
                it->remembered[it->nremembered++] = de[i].name;
    }
    return false;
}

/* The next step of a topic whose previous step succeeded (or which starts). */
static void km_cfgs_item_advance(km_cfgs_item_t *it)
{
    km_cfgs_t *c = it->c;
    km_cfgplan_t *p = &it->plan;
    km_err_t err;

    if (km_sync_run_cancelled(c->run)) {
        it->step = KM_CFGS_DONE;
        return;
    }
    switch (it->step) {
    case KM_CFGS_GET: { /* the record is in: plan, then write ahead if new keys */
        const km_mirror_def_t *def = km_sync_run_def(c->run);
        km_cfgentry_t *se, *de;
        size_t ns, nd, npre;
        kp_str_t *pre;

        if (def == NULL) {
            it->step = KM_CFGS_DONE;
            return;
        }
        if (km_cfgs_entries(c, it->src, &se, &ns) != KM_OK ||
            km_cfgs_entries(c, it->dst, &de, &nd) != KM_OK || km_cfgs_test_remembered(it, de, nd) ||
            km_sync_cfgplan_make(se, ns, de, nd, it->remembered, it->nremembered,
                                 &def->conf.topic_properties_exclude, &c->ar, p) != KM_OK) {
            km_cfgs_item_fail(it, "out of memory planning the config sync");
            return;
        }
        if (p->nunknown > 0) {
            char k[128];
            km_cfgs_str_fmt(k, sizeof(k), p->unknown[0]);
            /* reported, and the other keys still go */
            km_sync_run_error(c->run, it->name,
                              "%zu source config key(s) unknown to the destination, not copied "
                              "(first: %s)",
                              p->nunknown, k);
        }
        pre = km_cfgs_pre_keys(c, p, &npre);
        if (pre == NULL) {
            km_cfgs_item_fail(it, "out of memory");
            return;
        }
        it->step = KM_CFGS_PRE;
        if (c->run->persist && p->nset > 0) {
            /* Write ahead only when the sync is about to own a key it did not own: a crash
             * between the write and the record would leave it looking destination-only. */
            bool grows = false;
            for (size_t i = 0; i < npre && !grows; i++)
                grows = !km_cfgs_has(it->remembered, it->nremembered, pre[i]);
            if (grows) {
                err = km_cfgs_put(it, pre, npre);
                if (err != KM_OK)
                    km_cfgs_item_fail(it, "cannot store the synced keys: %s", km_err_str(err));
                return; /* continues in km_cfgs_put_done */
            }
        }
        /* nothing to write ahead */
    }
        /* fallthrough */
    case KM_CFGS_PRE:
        if (p->nset + p->ndel > 0) {
            (void)km_cfgs_send_iac(it); /* continues in km_cfgs_on_iac, or failed */
            return;
        }
        /* nothing to change on the destination */
        /* fallthrough */
    case KM_CFGS_IAC:
        it->step = KM_CFGS_POST;
        if (c->run->persist && !km_cfgs_same_set(p->keep, p->nkeep, it->stored, it->nstored)) {
            err = km_cfgs_put(it, p->keep, p->nkeep);
            if (err != KM_OK)
                km_cfgs_item_fail(it, "cannot store the synced keys: %s", km_err_str(err));
            return; /* continues in km_cfgs_put_done */
        }
        /* fallthrough */
    case KM_CFGS_POST:
    case KM_CFGS_DONE:
        it->step = KM_CFGS_DONE;
        return;
    }
}

static void km_cfgs_put_done(km_plugin_t *cm, void *arg, int16_t err, const char *msg)
{
    km_cfgs_item_t *it = arg;
    km_cfgs_t *c = it->c;

    (void)cm;
    if (err != 0)
        km_cfgs_item_fail(it, "storing the synced keys failed: %s: %s", kp_errcode_name(err),
                          msg != NULL ? msg : "");
    else if (it->step == KM_CFGS_POST)
        it->step = KM_CFGS_DONE;
    else
        km_cfgs_item_advance(it);
    km_cfgs_settle(c);
}

static void km_cfgs_get_done(km_plugin_t *cm, void *arg, int16_t err, const char *msg,
                             const kp_state_value_t *v)
{
    km_cfgs_item_t *it = arg;
    km_cfgs_t *c = it->c;

    (void)cm;
    if (err != 0) {
        km_cfgs_item_fail(it, "reading the synced keys failed: %s: %s", kp_errcode_name(err),
                          msg != NULL ? msg : "");
    } else {
        if (v != NULL && v->type == KP_STATE_REC_SYNCED_TOPIC_CONFIGS &&
            v->u.topic_configs.key_cnt > 0) {
            /* the record's strings live only during this call */
            int32_t n = v->u.topic_configs.key_cnt;
            it->remembered = kp_arena_calloc(&c->ar, (size_t)n, sizeof(*it->remembered));
            for (int32_t i = 0; it->remembered != NULL && i < n; i++) {
                kp_str_t k = v->u.topic_configs.keys[i];
                char *s = k.len > 0 ? kp_arena_alloc(&c->ar, (size_t)k.len) : NULL;
                if (k.len > 0 && s == NULL) {
                    it->remembered = NULL;
                    break;
                }
                if (k.len > 0)
                    memcpy(s, k.ptr, (size_t)k.len);
                it->remembered[i] = (kp_str_t){s, k.len > 0 ? k.len : 0};
            }
            if (it->remembered == NULL) {
                km_cfgs_item_fail(it, "out of memory");
                km_cfgs_settle(c);
                return;
            }
            it->nremembered = (size_t)n;
        }
        it->stored = it->remembered;
        it->nstored = it->nremembered;
        km_cfgs_item_advance(it);
    }
    km_cfgs_settle(c);
}

static void km_cfgs_on_iac(km_plugin_t *cm, void *arg, int32_t status, const uint8_t *body,
                           size_t len)
{
    km_cfgs_item_t *it = arg;
    km_cfgs_t *c = it->c;
    kp_IncrementalAlterConfigsResponse_t resp;
    kp_reader_t rd;
    kp_arena_t ar;
    const kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_t *r = NULL;

    if (status == KBX_ERR_SHUTDOWN && !km_coord_on_loop(&cm->coord)) {
        km_cfgs_release(c);
        return;
    }
    if (status != KBX_OK) {
        km_cfgs_item_fail(it, "IncrementalAlterConfigs on the destination failed (host status %d)",
                          (int)status);
        km_cfgs_settle(c);
        return;
    }
    kp_arena_init(&ar, KM_CFGS_ARENA_LIMIT);
    kp_IncrementalAlterConfigsResponse_init(&resp);
    kp_reader_init(&rd, body, len);
    if (kp_IncrementalAlterConfigsResponse_decode(&rd, &ar, &resp, KM_CFGS_IAC_VER) != 0) {
        km_cfgs_item_fail(it, "undecodable IncrementalAlterConfigs answer");
        kp_arena_free(&ar);
        km_cfgs_settle(c);
        return;
    }
    for (int32_t i = 0; i < resp.Responses.cnt; i++)
        if (km_cfgs_str_eq(resp.Responses.v[i].ResourceName, it->name))
            r = &resp.Responses.v[i];
    if (r == NULL)
        km_cfgs_item_fail(it, "IncrementalAlterConfigs answer does not name the topic");
    else if (r->ErrorCode != 0) {
        char m[256];
        km_cfgs_str_fmt(m, sizeof(m), r->ErrorMessage);
        km_cfgs_item_fail(it, "IncrementalAlterConfigs on the destination: %s: %s",
                          kp_errcode_name(r->ErrorCode), m);
    } else
        km_cfgs_item_advance(it);
    kp_arena_free(&ar);
    km_cfgs_settle(c);
}

/* --- the chunk ----------------------------------------------------------------------------- */

/* Keep a copy of an answer in the chunk arena and decode it there. */
static bool km_cfgs_decode(km_cfgs_t *c, const uint8_t *body, size_t len, int16_t ver,
                           kp_DescribeConfigsResponse_t *resp)
{
    uint8_t *copy = kp_arena_alloc(&c->ar, len + 1);
    kp_reader_t rd;

    if (copy == NULL)
        return false;
    if (len > 0)
        memcpy(copy, body, len);
    kp_reader_init(&rd, copy, len);
    kp_DescribeConfigsResponse_init(resp);
    return kp_DescribeConfigsResponse_decode(&rd, &c->ar, resp, ver) == 0;
}

static const kp_DescribeConfigsResponse_DescribeConfigsResult_t *
km_cfgs_result(const kp_DescribeConfigsResponse_t *resp, const char *topic)
{
    for (int32_t i = 0; i < resp->Results.cnt; i++)
        if (resp->Results.v[i].ResourceType == KM_CFGS_RES_TOPIC &&
            km_cfgs_str_eq(resp->Results.v[i].ResourceName, topic))
            return &resp->Results.v[i];
    return NULL;
}

/* Both DescribeConfigs answers are in: start every topic of the chunk. */
static void km_cfgs_chunk_described(km_cfgs_t *c)
{
    km_plugin_t *cm = c->cm;
    size_t n = c->hi - c->lo;

    /* a whole answer missing: one error for the chunk, not one per topic */
    if (!km_sync_run_cancelled(c->run) && (!c->src_ok || !c->dst_ok))
        km_sync_run_error(c->run, NULL, "%s (%zu topic(s) from %s not synced)",
                          !c->src_ok ? c->src_err : c->dst_err, n, c->names[c->lo]);
    for (size_t i = 0; i < n; i++) {
        km_cfgs_item_t *it = &c->items[i];
        char m[256];

        it->step = KM_CFGS_DONE;
        if (km_sync_run_cancelled(c->run) || !c->src_ok || !c->dst_ok)
            continue;
        it->src = km_cfgs_result(&c->sresp, it->name);
        it->dst = km_cfgs_result(&c->dresp, it->name);
        if (it->src == NULL || it->src->ErrorCode != 0) {
            km_cfgs_str_fmt(m, sizeof(m), it->src != NULL ? it->src->ErrorMessage : KP_STR_NULL);
            km_sync_run_error(c->run, it->name, "DescribeConfigs on the source: %s%s%s",
                              it->src != NULL ? kp_errcode_name(it->src->ErrorCode)
                                              : "the topic is missing from the answer",
                              m[0] != '\0' ? ": " : "", m);
            continue;
        }
        if (it->dst == NULL || it->dst->ErrorCode != 0) {
            km_cfgs_str_fmt(m, sizeof(m), it->dst != NULL ? it->dst->ErrorMessage : KP_STR_NULL);
            km_sync_run_error(c->run, it->name, "DescribeConfigs on the destination: %s%s%s",
                              it->dst != NULL ? kp_errcode_name(it->dst->ErrorCode)
                                              : "the topic is missing from the answer",
                              m[0] != '\0' ? ": " : "", m);
            continue;
        }
        it->step = KM_CFGS_GET;
        if (c->run->persist) {
            km_err_t err = km_state_get_record(cm, KP_STATE_REC_SYNCED_TOPIC_CONFIGS,
                                               c->run->mirror, &it->id, 0, km_cfgs_get_done, it);
            if (err != KM_OK)
                km_cfgs_item_fail(it, "cannot read the synced keys: %s", km_err_str(err));
            else
                atomic_fetch_add(&c->pending, 1);
        } else {
            km_cfgs_item_advance(it); /* nothing remembered: SETs only */
        }
    }
}

/* One of the two DescribeConfigs answers came (the other may still be out). */
static void km_cfgs_described(km_cfgs_t *c)
{
    if (atomic_load(&c->pending) == 1) /* this one is the last: settle() below would move on */
        km_cfgs_chunk_described(c);
    km_cfgs_settle(c);
}

static void km_cfgs_on_source(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res,
                              const uint8_t *body, size_t len)
{
    km_cfgs_t *c = arg;

    if (res->err == KM_ERR_SHUTDOWN && !km_coord_on_loop(&cm->coord)) {
        km_cfgs_release(c); /* the loop is gone: the run cannot finish */
        return;
    }
    if (res->err != KM_OK)
        snprintf(c->src_err, sizeof(c->src_err), "the source did not answer DescribeConfigs: %s",
                 res->errmsg);
    else if (!km_cfgs_decode(c, body, len, res->version, &c->sresp))
        snprintf(c->src_err, sizeof(c->src_err),
                 "undecodable DescribeConfigs answer from the source (v%d)", (int)res->version);
    else
        c->src_ok = true;
    km_cfgs_described(c);
}

static void km_cfgs_on_dst(km_plugin_t *cm, void *arg, int32_t status, const uint8_t *body,
                           size_t len)
{
    km_cfgs_t *c = arg;

    if (status == KBX_ERR_SHUTDOWN && !km_coord_on_loop(&cm->coord)) {
        km_cfgs_release(c);
        return;
    }
    if (status != KBX_OK)
        snprintf(c->dst_err, sizeof(c->dst_err),
                 "DescribeConfigs on the destination failed (host status %d)", (int)status);
    else if (!km_cfgs_decode(c, body, len, KM_CFGS_DESCRIBE_MAXVER, &c->dresp))
        snprintf(c->dst_err, sizeof(c->dst_err), "undecodable DescribeConfigs answer");
    else
        c->dst_ok = true;
    km_cfgs_described(c);
}

/* Start the next chunk, or end the run. */
static void km_cfgs_chunk_next(km_cfgs_t *c)
{
    km_plugin_t *cm = c->cm;
    const km_mirror_def_t *def;
    kp_DescribeConfigsRequest_DescribeConfigsResource_t *res;
    size_t n;
    km_err_t err;

    kp_arena_free(&c->ar);
    kp_arena_init(&c->ar, KM_CFGS_ARENA_LIMIT);
    c->items = NULL;
    c->lo = c->hi;
    def = km_sync_run_def(c->run);
    if (c->lo >= c->ntopics || def == NULL || km_sync_run_cancelled(c->run) ||
        cm->rpc.srcadm == NULL) {
        km_cfgs_finish(c);
        return;
    }
    c->hi = c->lo + KM_CFGS_CHUNK < c->ntopics ? c->lo + KM_CFGS_CHUNK : c->ntopics;
    n = c->hi - c->lo;
    c->items = kp_arena_calloc(&c->ar, n, sizeof(*c->items));
    res = kp_arena_calloc(&c->ar, n, sizeof(*res));
    if (c->items == NULL || res == NULL) {
        for (size_t i = c->lo; i < c->hi; i++)
            km_sync_run_error(c->run, c->names[i], "out of memory");
        c->items = NULL;
        atomic_store(&c->pending, 1);
        km_cfgs_settle(c); /* next chunk */
        return;
    }
    for (size_t i = 0; i < n; i++) {
        c->items[i].c = c;
        c->items[i].name = c->names[c->lo + i];
        c->items[i].id = c->ids[c->lo + i];
        c->items[i].step = KM_CFGS_DONE;
        kp_DescribeConfigsRequest_DescribeConfigsResource_init(&res[i]);
        res[i].ResourceType = KM_CFGS_RES_TOPIC;
        res[i].ResourceName = kp_str(c->names[c->lo + i]);
        res[i].ConfigurationKeys.cnt = -1; /* all of them */
    }
    kp_DescribeConfigsRequest_init(&c->drq);
    c->drq.Resources.cnt = (int32_t)n;
    c->drq.Resources.v = res;
    c->drq.IncludeSynonyms = false;
    c->drq.IncludeDocumentation = false;
    c->src_ok = c->dst_ok = false;
    c->src_err[0] = c->dst_err[0] = '\0';

    /* one extra hold while both are sent, so a failed send cannot finish the chunk early */
    atomic_store(&c->pending, 1);
    err = km_srcadm_request(cm->rpc.srcadm, &def->conf.bootstrap_servers,
                            &kp_DescribeConfigsRequest_desc, KM_CFGS_DESCRIBE_MAXVER, &c->drq,
                            (int32_t)def->conf.request_timeout_ms, km_cfgs_on_source, c);
    if (err == KM_OK)
        atomic_fetch_add(&c->pending, 1);
    else
        snprintf(c->src_err, sizeof(c->src_err), "cannot ask the source: %s", km_err_str(err));
    err = km_cfgs_local(c, 32, KM_CFGS_DESCRIBE_MAXVER, &kp_DescribeConfigsRequest_desc, &c->drq,
                        km_cfgs_on_dst, c);
    if (err != KM_OK)
        snprintf(c->dst_err, sizeof(c->dst_err), "cannot send DescribeConfigs: %s",
                 km_err_str(err));
    km_cfgs_described(c); /* drops the extra hold */
}

/* --- entry --------------------------------------------------------------------------------- */

typedef struct km_cfgs_collect {
    km_cfgs_t *c;
    const char *mirror;
    bool nomem;
} km_cfgs_collect_t;

static bool km_cfgs_add(km_cfgs_t *c, const km_cat_topic_t *t)
{
    km_plugin_t *cm = c->cm;
    char **nn = km_calloc(cm, c->ntopics + 1, sizeof(*nn));
    kbx_uuid_t *ni = km_calloc(cm, c->ntopics + 1, sizeof(*ni));
    char *name = km_strdup(cm, t->name);

    if (nn == NULL || ni == NULL || name == NULL) {
        km_free(cm, nn);
        km_free(cm, ni);
        km_free(cm, name);
        return false;
    }
    if (c->ntopics > 0) {
        memcpy(nn, c->names, c->ntopics * sizeof(*nn));
        memcpy(ni, c->ids, c->ntopics * sizeof(*ni));
    }
    nn[c->ntopics] = name;
    ni[c->ntopics] = t->id;
    km_free(cm, c->names);
    km_free(cm, c->ids);
    c->names = nn;
    c->ids = ni;
    c->ntopics++;
    return true;
}

static void km_cfgs_collect(void *arg, const km_cat_topic_t *t)
{
    km_cfgs_collect_t *col = arg;

    if (!col->nomem && km_sync_topic_eligible(t, col->mirror) && !km_cfgs_add(col->c, t))
        col->nomem = true;
}

void km_sync_configs_run(km_sync_run_t *run)
{
    km_plugin_t *cm = run->cm;
    km_cfgs_collect_t col;
    km_cfgs_t *c;

    c = km_calloc(cm, 1, sizeof(*c));
    if (c == NULL) {
        km_sync_run_error(run, NULL, "out of memory");
        km_sync_run_done(run);
        return;
    }
    c->magic = KM_CFGS_MAGIC;
    atomic_init(&c->pending, 0);
    {
        const char *t = getenv("KMIRROR_TEST_CFGSYNC");
        c->test_mode = t == NULL ? 0 : !strcmp(t, "forget") ? 1 : !strcmp(t, "own-all") ? 2 : 0;
    }
    c->run = run;
    c->cm = cm;
    kp_arena_init(&c->ar, KM_CFGS_ARENA_LIMIT);
    col.c = c;
    col.mirror = run->mirror;
    col.nomem = false;
    if (run->topics == NULL) {
        km_catalog_topic_foreach(&cm->catalog, km_cfgs_collect, &col);
    } else {
        for (size_t i = 0; i < run->ntopics && !col.nomem; i++) {
            const km_cat_topic_t *t = km_catalog_topic_find(&cm->catalog, run->topics[i]);
            if (t != NULL)
                km_cfgs_collect(&col, t);
        }
    }
    if (col.nomem) {
        km_sync_run_error(run, NULL, "out of memory listing the topics");
        km_cfgs_finish(c);
        return;
    }
    c->lo = c->hi = 0;
    km_cfgs_chunk_next(c);
}
