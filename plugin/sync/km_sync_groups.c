/*
 * km_sync_groups.c - consumer-group offset sync (KM_SYNC_GROUPS): see km_sync_groups.h and
 * docs/plugin.md "Consumer-group offsets".
 *
 * One run, on the coordinator loop, one step after the other:
 *   1. the eligible mirror topics (catalog; run->topics for a final sync);
 *   2. destination Metadata (leaders, leader epochs) and ListOffsets latest at every leader
 *      (high watermarks);
 *   3. source Metadata (brokers), ListGroups at every source broker, filtered;
 *   4. per group, one after the other: FindCoordinator + OffsetFetch on the source; on the
 *      destination FindCoordinator, DescribeGroups (skip active groups), OffsetForLeaderEpoch
 *      at the partition leaders (prove the epoch), OffsetFetch (diff), OffsetCommit.
 * A failing group is reported with km_sync_run_error and the next one goes on. Nothing is
 * persisted: the destination's committed offsets are the memory of what was written.
 */
#define KM_LOG_COMPONENT "kmirror.sync"

#include "sync/km_sync_groups.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/km_catalog.h"
#include "coord/km_coord.h"
#include "core/km_plugin_types.h"
#include "kp_arena.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "rpc/km_rpc.h"
#include "rpc/km_srcadm.h"
#include "sync/km_sync.h"
#include "util/km_log.h"
#include "util/km_mem.h"

/* ==================================== pure decisions ======================================== */

km_err_t km_sync_groups_select(km_pattern_t *include, km_pattern_t *exclude, const char *group,
                               size_t len, const char *ptype, size_t plen, bool *selected)
{
    bool m = true;
    km_err_t err;

    *selected = false;
    /* Classic consumer groups and groups that only hold offsets (simple or admin commits);
     * connect, share and other protocols keep offsets the consumer client never reads. */
    if (!(plen == 0 || (plen == 8 && memcmp(ptype, "consumer", 8) == 0)))
        return KM_OK;
    if (len == 0)
        return KM_OK; /* an empty group id names nothing a consumer can join */
    if (include != NULL && (err = km_pattern_match(include, group, len, &m)) != KM_OK)
        return err;
    if (!m)
        return KM_OK;
    if (exclude != NULL) {
        if ((err = km_pattern_match(exclude, group, len, &m)) != KM_OK)
            return err;
        if (m)
            return KM_OK;
    }
    *selected = true;
    return KM_OK;
}

int64_t km_sync_groups_clamp(int64_t src_offset, int64_t dst_hw)
{
    if (src_offset < 0 || dst_hw < 0)
        return -1;
    return src_offset < dst_hw ? src_offset : dst_hw;
}

int32_t km_sync_groups_epoch(int32_t src_epoch, int64_t offset, int32_t dst_leader_epoch,
                             int32_t found_epoch, int64_t found_end)
{
    if (offset <= 0 || src_epoch < 0)
        return -1;
    if (dst_leader_epoch < 0 || src_epoch > dst_leader_epoch)
        return -1;
    if (found_epoch != src_epoch || found_end < offset)
        return -1;
    return src_epoch;
}

bool km_sync_groups_changed(int64_t offset, int32_t epoch, int64_t dst_offset, int32_t dst_epoch)
{
    return offset != dst_offset || epoch != dst_epoch;
}

bool km_sync_groups_idle(const char *state, size_t len, int32_t members)
{
    if (members > 0)
        return false;
    return (len == 5 && memcmp(state, "Empty", 5) == 0) ||
           (len == 4 && memcmp(state, "Dead", 4) == 0);
}

/* ==================================== the run =============================================== */

#define KM_SG_MAGIC          0x4b4d5347u /* "KMSG" */
#define KM_SG_ARENA_LIMIT    (64u << 20)
#define KM_SG_DST_TIMEOUT_MS 30000
/* The tag of the call that drops a fan-out's initial count (no answer to read). */
#define KM_SG_INITIAL INT32_MIN
/* Source versions are capped where the request layout changes (FindCoordinator v4 and
 * OffsetFetch v8 batch their keys); both are served by Kafka 2.1 to 4.x and by kbroker. */
#define KM_SG_SRC_METADATA_MAX    12
#define KM_SG_SRC_LISTGROUPS_MAX  4
#define KM_SG_SRC_FINDCOORD_MAX   3
#define KM_SG_SRC_OFFSETFETCH_MAX 7
/* Destination (this cluster: kbroker's versions, docs/broker.md). */
#define KM_SG_DST_METADATA_V     12
#define KM_SG_DST_LISTOFFSETS_V  6
#define KM_SG_DST_OFLE_V         4
#define KM_SG_DST_FINDCOORD_V    3
#define KM_SG_DST_DESCGROUPS_V   5
#define KM_SG_DST_OFFSETFETCH_V  7
#define KM_SG_DST_OFFSETCOMMIT_V 8

typedef struct km_sg_part {
    int32_t leader;       /* destination leader id, -1 unknown */
    int32_t leader_epoch; /* destination leader epoch, -1 unknown */
    int64_t hw;           /* destination high watermark, -1 unknown */
} km_sg_part_t;

typedef struct km_sg_topic {
    char *name;
    int32_t nparts;
    km_sg_part_t *parts;
} km_sg_topic_t;

/* One partition of the current group. */
typedef struct km_sg_item {
    int32_t t, p;
    int64_t src_offset;
    int32_t src_epoch;
    char *meta; /* the source's committed metadata, NULL for null */
    int32_t found_epoch;
    int64_t found_end;
    int64_t dst_offset;
    int32_t dst_epoch;
    int64_t offset;
    int32_t epoch;
    bool write;
} km_sg_item_t;

typedef struct km_sg km_sg_t;

/* A fan-out request's own argument (names the broker in errors). */
typedef struct km_sg_arg {
    km_sg_t *sg;
    const char *addr;
    km_strlist_t boot;
    char *one[1];
} km_sg_arg_t;

struct km_sg {
    uint32_t magic;
    km_plugin_t *cm;
    km_sync_run_t *run;
    kp_arena_t ar;  /* the run's */
    kp_arena_t gar; /* the current group's */
    km_pattern_t *include, *exclude;
    km_sg_topic_t *topics;
    int32_t ntopics;
    char **groups;
    int32_t ngroups, capgroups, gi;
    int pending;    /* fan-out requests in flight (loop) */
    atomic_int ops; /* host and source requests whose callback has not run yet */
    /* The source requests' messages (km_srcadm_request borrows them until its callback). */
    kp_MetadataRequest_t src_md;
    kp_ListGroupsRequest_t src_lg;
    kp_FindCoordinatorRequest_t src_fc;
    kp_OffsetFetchRequest_t src_of;
    km_sg_arg_t src_coord; /* the current group's source coordinator */
    /* The current group. */
    const char *group;
    int32_t coord_dst;
    km_sg_item_t *items;
    int32_t nitems;
    /* Test only (scenario sync-groups): the group named by the environment variable
     * KMIRROR_TEST_SYNC_GROUPS_FAIL fails at its source OffsetFetch in every run, so the
     * scenario sees one failing group not stop the others. Read at each run; NULL: none. */
    const char *test_fail;
    /* Counts for the summary line. */
    int32_t n_groups, n_active, n_parts, n_failed;
};

typedef void (*km_sg_cont_fn)(km_sg_t *sg, int32_t status, const uint8_t *body, size_t len,
                              int32_t tag);

static void km_sg_next_group(km_sg_t *sg);

/* Free the run's context; the run itself is not touched. */
static void km_sg_free(km_sg_t *sg)
{
    km_plugin_t *cm = sg->cm;

    km_pattern_free(sg->include);
    km_pattern_free(sg->exclude);
    sg->include = sg->exclude = NULL;
    kp_arena_free(&sg->gar);
    kp_arena_free(&sg->ar);
    sg->magic = 0;
    km_free(cm, sg);
}

/* A request's callback arrived. On the loop: true, go on. Elsewhere (the loop is gone, the
 * plugin is stopping): false, and the context is freed with the last such callback; the run
 * is the scheduler's to free then (km_sync_destroy) and is not touched. */
static bool km_sg_op_end(km_plugin_t *cm, km_sg_t *sg)
{
    if (km_coord_on_loop(&cm->coord)) {
        atomic_fetch_sub(&sg->ops, 1);
        return true;
    }
    if (atomic_fetch_sub(&sg->ops, 1) == 1)
        km_sg_free(sg);
    return false;
}

/* The run is over: report it done and free the context (no request is out then: every step
 * finishes only after its last answer). */
static void km_sg_finish(km_sg_t *sg)
{
    km_plugin_t *cm = sg->cm;

    if (sg->n_groups > 0 || sg->n_failed > 0)
        km_log_debug(cm,
                     "mirror %s: group offsets: %d groups, %d partitions written, %d groups "
                     "skipped (active on the destination), %d failed",
                     sg->run->mirror, (int)sg->n_groups, (int)sg->n_parts, (int)sg->n_active,
                     (int)sg->n_failed);
    km_sync_run_done(sg->run);
    sg->run = NULL;
    km_sg_free(sg);
}

static char *km_sg_dup(kp_arena_t *ar, const char *s, size_t n)
{
    char *d = kp_arena_alloc(ar, n + 1);

    if (d != NULL) {
        if (n > 0)
            memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static char *km_sg_kdup(kp_arena_t *ar, kp_str_t s)
{
    return s.len < 0 ? NULL : km_sg_dup(ar, s.ptr, (size_t)s.len);
}

static int32_t km_sg_topic_find(const km_sg_t *sg, kp_str_t name)
{
    for (int32_t i = 0; i < sg->ntopics; i++)
        if (kp_str_eq(name, sg->topics[i].name))
            return i;
    return -1;
}

static km_sg_part_t *km_sg_part(const km_sg_t *sg, int32_t t, int32_t p)
{
    if (t < 0 || t >= sg->ntopics || p < 0 || p >= sg->topics[t].nparts)
        return NULL;
    return &sg->topics[t].parts[p];
}

static const char *km_sg_errname(int16_t code)
{
    const char *n = kp_errcode_name(code);
    return n != NULL ? n : "UNKNOWN";
}

/* The current group failed: say why (once). */
static void km_sg_group_vfail(km_sg_t *sg, const char *fmt, va_list ap)
{
    char item[300], msg[512];

    vsnprintf(msg, sizeof(msg), fmt, ap);
    snprintf(item, sizeof(item), "group %s", sg->group != NULL ? sg->group : "?");
    km_sync_run_error(sg->run, item, "%s", msg);
    sg->n_failed++;
}

static void km_sg_group_fail(km_sg_t *sg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void km_sg_group_fail(km_sg_t *sg, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    km_sg_group_vfail(sg, fmt, ap);
    va_end(ap);
}

/* The current group failed (as km_sg_group_fail) and the run goes on with the next group. */
static void km_sg_group_skip(km_sg_t *sg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void km_sg_group_skip(km_sg_t *sg, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    km_sg_group_vfail(sg, fmt, ap);
    va_end(ap);
    km_sg_next_group(sg);
}

/* ---- destination requests (this cluster) ---------------------------------------------------- */

typedef struct km_sg_call {
    km_sg_t *sg;
    km_plugin_t *cm;
    km_sg_cont_fn cont;
    int32_t tag;
    int32_t status;
    uint8_t *body;
    size_t len;
} km_sg_call_t;

static void km_sg_call_run(km_plugin_t *cm, void *arg)
{
    km_sg_call_t *call = arg;

    atomic_fetch_sub(&call->sg->ops, 1);
    call->cont(call->sg, call->status, call->body, call->len, call->tag);
    km_free(cm, call->body);
    km_free(cm, call);
}

/* The loop is gone (shutdown): free the call, and the context with the last one. */
static void km_sg_call_drop(km_plugin_t *cm, void *arg)
{
    km_sg_call_t *call = arg;
    km_sg_t *sg = call->sg;

    km_free(cm, call->body);
    km_free(cm, call);
    if (atomic_fetch_sub(&sg->ops, 1) == 1)
        km_sg_free(sg);
}

/* kbx_response_fn: copy the body and continue on the loop. @thread host */
static void km_sg_on_response(void *arg, int32_t status, const uint8_t *body, size_t len)
{
    km_sg_call_t *call = arg;
    km_plugin_t *cm = call->cm;

    call->status = status;
    if (status == KBX_OK && body != NULL && len > 0) {
        call->body = km_malloc(cm, len);
        if (call->body == NULL) {
            call->status = KBX_ERR_NOMEM;
        } else {
            memcpy(call->body, body, len);
            call->len = len;
        }
    }
    if (km_coord_post(&cm->coord, km_sg_call_run, km_sg_call_drop, call) == KM_ERR_NOMEM) {
        km_log_error(cm, "out of memory continuing a group offset sync");
        km_sg_call_drop(cm, call);
    }
    km_rpc_host_op_end(cm);
}

/* Send msg to broker (-1 or this broker: local_request), continue with cont on the loop.
 * Returns KBX_OK or why it did not start (cont then never runs). */
static int32_t km_sg_dst_request(km_sg_t *sg, int32_t broker, int16_t api_key, int16_t ver,
                                 const kp_msg_desc_t *desc, const void *msg, km_sg_cont_fn cont,
                                 int32_t tag)
{
    km_plugin_t *cm = sg->cm;
    const kbx_api_t *api = cm->ref.api;
    km_sg_call_t *call;
    kp_writer_t wr;
    int64_t timeout = KM_SG_DST_TIMEOUT_MS;
    int32_t rc;

    if (sg->run->deadline_ms > 0) {
        int64_t left = sg->run->deadline_ms - api->clock_wall_ms(cm->ref.host);
        if (left <= 0)
            return KBX_ERR_TIMEOUT;
        if (left < timeout)
            timeout = left;
    }
    kp_writer_init(&wr);
    if (kp_msg_encode(desc, &wr, msg, ver) != 0 || wr.err) {
        kp_writer_free(&wr);
        return KBX_ERR_INVALID;
    }
    call = km_calloc(cm, 1, sizeof(*call));
    if (call == NULL) {
        kp_writer_free(&wr);
        return KBX_ERR_NOMEM;
    }
    call->sg = sg;
    call->cm = cm;
    call->cont = cont;
    call->tag = tag;
    if (!km_rpc_host_op_begin(cm)) {
        kp_writer_free(&wr);
        km_free(cm, call);
        return KBX_ERR_SHUTDOWN;
    }
    atomic_fetch_add(&sg->ops, 1);
    if (broker < 0 || broker == cm->broker_id)
        rc = api->local_request(cm->ref.host, api_key, ver, wr.buf, wr.len, timeout,
                                km_sg_on_response, call);
    else
        rc = api->broker_request(cm->ref.host, broker, api_key, ver, wr.buf, wr.len, timeout,
                                 km_sg_on_response, call);
    kp_writer_free(&wr);
    if (rc != KBX_OK) {
        atomic_fetch_sub(&sg->ops, 1);
        km_free(cm, call);
        km_rpc_host_op_end(cm);
    }
    return rc;
}

/* Decode a destination answer; false (and *why set) when it failed or does not decode. */
static bool km_sg_decode(int32_t status, const uint8_t *body, size_t len, const kp_msg_desc_t *desc,
                         int16_t ver, kp_arena_t *ar, void *resp, char *why, size_t why_size)
{
    kp_reader_t rd;

    kp_msg_init(desc, resp);
    if (status != KBX_OK) {
        snprintf(why, why_size, "request failed (kbx status %d)", (int)status);
        return false;
    }
    kp_reader_init(&rd, body, len);
    if (kp_msg_decode(desc, &rd, ar, resp, ver) != 0) {
        snprintf(why, why_size, "undecodable answer");
        return false;
    }
    return true;
}

/* ---- source requests ---------------------------------------------------------------------- */

/* Same as km_sg_decode for a source answer. */
static bool km_sg_src_decode(const km_srcadm_result_t *res, const uint8_t *body, size_t len,
                             const kp_msg_desc_t *desc, kp_arena_t *ar, void *resp, char *why,
                             size_t why_size)
{
    kp_reader_t rd;

    kp_msg_init(desc, resp);
    if (res->err != KM_OK) {
        snprintf(why, why_size, "no answer: %s", res->errmsg[0] ? res->errmsg : "error");
        return false;
    }
    kp_reader_init(&rd, body, len);
    if (kp_msg_decode(desc, &rd, ar, resp, res->version) != 0) {
        snprintf(why, why_size, "undecodable answer (v%d)", (int)res->version);
        return false;
    }
    return true;
}

/* km_srcadm_request counted in sg->ops (msg and boot stay alive until cb ran). */
static km_err_t km_sg_src_request(km_sg_t *sg, const km_strlist_t *boot, const kp_msg_desc_t *desc,
                                  int16_t max_ver, const void *msg, int32_t timeout_ms,
                                  km_srcadm_raw_cb cb, void *arg)
{
    km_err_t err;

    atomic_fetch_add(&sg->ops, 1);
    err = km_srcadm_request(sg->cm->rpc.srcadm, boot, desc, max_ver, msg, timeout_ms, cb, arg);
    if (err != KM_OK)
        atomic_fetch_sub(&sg->ops, 1);
    return err;
}

static int32_t km_sg_src_timeout(const km_mirror_def_t *def)
{
    return def->conf.request_timeout_ms > 0 ? def->conf.request_timeout_ms : 30000;
}

/* ==================================== per group ============================================= */

static void km_sg_group_done(km_sg_t *sg)
{
    sg->n_groups++;
    km_sg_next_group(sg);
}

static void km_sg_on_commit(km_sg_t *sg, int32_t status, const uint8_t *body, size_t len,
                            int32_t tag)
{
    kp_OffsetCommitResponse_t resp;
    char why[200], first[300];
    int32_t ok = 0, active = 0, bad = 0;

    (void)tag;
    if (km_sync_run_cancelled(sg->run)) {
        km_sg_finish(sg);
        return;
    }
    first[0] = '\0';
    if (!km_sg_decode(status, body, len, &kp_OffsetCommitResponse_desc, KM_SG_DST_OFFSETCOMMIT_V,
                      &sg->gar, &resp, why, sizeof(why))) {
        km_sg_group_skip(sg, "destination OffsetCommit: %s", why);
        return;
    }
    for (int32_t i = 0; i < resp.Topics.cnt; i++) {
        const kp_OffsetCommitResponse_OffsetCommitResponseTopic_t *rt = &resp.Topics.v[i];
        for (int32_t j = 0; j < rt->Partitions.cnt; j++) {
            int16_t ec = rt->Partitions.v[j].ErrorCode;
            if (ec == 0) {
                ok++;
            } else if (ec == KP_ERR_UNKNOWN_MEMBER_ID || ec == KP_ERR_ILLEGAL_GENERATION ||
                       ec == KP_ERR_REBALANCE_IN_PROGRESS || ec == KP_ERR_FENCED_INSTANCE_ID ||
                       ec == KP_ERR_STALE_MEMBER_EPOCH) {
                active++; /* members joined since DescribeGroups: theirs now */
            } else if (bad++ == 0) {
                snprintf(first, sizeof(first), "%.*s-%d: %s",
                         (int)(rt->Name.len > 0 ? rt->Name.len : 0),
                         rt->Name.ptr != NULL ? rt->Name.ptr : "",
                         (int)rt->Partitions.v[j].PartitionIndex, km_sg_errname(ec));
            }
        }
    }
    sg->n_parts += ok;
    if (active > 0) {
        sg->n_active++;
        km_log_debug(sg->cm,
                     "mirror %s: group %s became active on the destination, %d offsets "
                     "left to its members",
                     sg->run->mirror, sg->group, (int)active);
    }
    if (bad > 0) {
        km_sg_group_skip(sg, "destination OffsetCommit refused %d partitions (first %s)", (int)bad,
                         first);
        return;
    }
    km_log_debug(sg->cm, "mirror %s: group %s: %d offsets written", sg->run->mirror, sg->group,
                 (int)ok);
    km_sg_group_done(sg);
}

/* Decide every item's offset and epoch and write what changed. */
static void km_sg_commit(km_sg_t *sg)
{
    kp_OffsetCommitRequest_t rq;
    kp_OffsetCommitRequest_OffsetCommitRequestTopic_t *tv;
    int32_t nt = 0, nw = 0, rc;

    for (int32_t i = 0; i < sg->nitems; i++) {
        km_sg_item_t *it = &sg->items[i];
        km_sg_part_t *pt = km_sg_part(sg, it->t, it->p);
        it->epoch =
            km_sync_groups_epoch(it->src_epoch, it->offset, pt != NULL ? pt->leader_epoch : -1,
                                 it->found_epoch, it->found_end);
        it->write = km_sync_groups_changed(it->offset, it->epoch, it->dst_offset, it->dst_epoch);
        nw += it->write;
    }
    if (nw == 0) {
        km_sg_group_done(sg);
        return;
    }
    tv = kp_arena_calloc(&sg->gar, (size_t)sg->ntopics, sizeof(*tv));
    if (tv == NULL) {
        km_sg_group_skip(sg, "out of memory");
        return;
    }
    for (int32_t t = 0; t < sg->ntopics; t++) {
        kp_OffsetCommitRequest_OffsetCommitRequestTopic_t *ct = &tv[nt];
        int32_t n = 0;
        for (int32_t i = 0; i < sg->nitems; i++)
            n += sg->items[i].t == t && sg->items[i].write;
        if (n == 0)
            continue;
        kp_OffsetCommitRequest_OffsetCommitRequestTopic_init(ct);
        ct->Name = kp_str(sg->topics[t].name);
        ct->Partitions.v = kp_arena_calloc(&sg->gar, (size_t)n, sizeof(*ct->Partitions.v));
        if (ct->Partitions.v == NULL) {
            km_sg_group_skip(sg, "out of memory");
            return;
        }
        ct->Partitions.cnt = 0;
        for (int32_t i = 0; i < sg->nitems; i++) {
            const km_sg_item_t *it = &sg->items[i];
            kp_OffsetCommitRequest_OffsetCommitRequestPartition_t *cp;
            if (it->t != t || !it->write)
                continue;
            cp = &ct->Partitions.v[ct->Partitions.cnt++];
            kp_OffsetCommitRequest_OffsetCommitRequestPartition_init(cp);
            cp->PartitionIndex = it->p;
            cp->CommittedOffset = it->offset;
            cp->CommittedLeaderEpoch = it->epoch;
            cp->CommittedMetadata = kp_str(it->meta);
            km_log_debug(sg->cm,
                         "mirror %s: group %s %s-%d: offset %lld epoch %d (source %lld "
                         "epoch %d, destination had %lld epoch %d)",
                         sg->run->mirror, sg->group, sg->topics[t].name, (int)it->p,
                         (long long)it->offset, (int)it->epoch, (long long)it->src_offset,
                         (int)it->src_epoch, (long long)it->dst_offset, (int)it->dst_epoch);
        }
        nt++;
    }
    kp_msg_init(&kp_OffsetCommitRequest_desc, &rq);
    rq.GroupId = kp_str(sg->group);
    rq.GenerationIdOrMemberEpoch = -1; /* an admin commit: only an Empty/Dead group takes it */
    rq.MemberId = kp_str("");
    rq.GroupInstanceId = KP_STR_NULL;
    rq.Topics.cnt = nt;
    rq.Topics.v = tv;
    rc = km_sg_dst_request(sg, sg->coord_dst, 8, KM_SG_DST_OFFSETCOMMIT_V,
                           &kp_OffsetCommitRequest_desc, &rq, km_sg_on_commit, 0);
    if (rc != KBX_OK)
        km_sg_group_skip(sg, "destination OffsetCommit not sent (kbx status %d)", (int)rc);
}

static void km_sg_on_dst_fetch(km_sg_t *sg, int32_t status, const uint8_t *body, size_t len,
                               int32_t tag)
{
    kp_OffsetFetchResponse_t resp;
    char why[200];

    (void)tag;
    if (km_sync_run_cancelled(sg->run)) {
        km_sg_finish(sg);
        return;
    }
    if (!km_sg_decode(status, body, len, &kp_OffsetFetchResponse_desc, KM_SG_DST_OFFSETFETCH_V,
                      &sg->gar, &resp, why, sizeof(why))) {
        km_sg_group_skip(sg, "destination OffsetFetch: %s", why);
        return;
    }
    if (resp.ErrorCode != 0) {
        km_sg_group_skip(sg, "destination OffsetFetch: %s", km_sg_errname(resp.ErrorCode));
        return;
    }
    for (int32_t i = 0; i < resp.Topics.cnt; i++) {
        const kp_OffsetFetchResponse_OffsetFetchResponseTopic_t *rt = &resp.Topics.v[i];
        int32_t t = km_sg_topic_find(sg, rt->Name);
        if (t < 0)
            continue;
        for (int32_t j = 0; j < rt->Partitions.cnt; j++) {
            const kp_OffsetFetchResponse_OffsetFetchResponsePartition_t *rp = &rt->Partitions.v[j];
            if (rp->ErrorCode != 0)
                continue;
            for (int32_t k = 0; k < sg->nitems; k++) {
                km_sg_item_t *it = &sg->items[k];
                if (it->t == t && it->p == rp->PartitionIndex) {
                    it->dst_offset = rp->CommittedOffset;
                    it->dst_epoch = rp->CommittedLeaderEpoch;
                }
            }
        }
    }
    km_sg_commit(sg);
}

static void km_sg_dst_fetch(km_sg_t *sg)
{
    kp_OffsetFetchRequest_t rq;
    int32_t rc;

    kp_msg_init(&kp_OffsetFetchRequest_desc, &rq);
    rq.GroupId = kp_str(sg->group);
    rq.Topics.cnt = -1; /* all */
    rq.Topics.v = NULL;
    rq.RequireStable = false;
    rc = km_sg_dst_request(sg, sg->coord_dst, 9, KM_SG_DST_OFFSETFETCH_V,
                           &kp_OffsetFetchRequest_desc, &rq, km_sg_on_dst_fetch, 0);
    if (rc != KBX_OK)
        km_sg_group_skip(sg, "destination OffsetFetch not sent (kbx status %d)", (int)rc);
}

static void km_sg_on_epochs(km_sg_t *sg, int32_t status, const uint8_t *body, size_t len,
                            int32_t tag)
{
    kp_OffsetForLeaderEpochResponse_t resp;
    char why[200];

    sg->pending--;
    if (tag == KM_SG_INITIAL) {
        /* the initial count: nothing to read */
    } else if (km_sg_decode(status, body, len, &kp_OffsetForLeaderEpochResponse_desc,
                            KM_SG_DST_OFLE_V, &sg->gar, &resp, why, sizeof(why))) {
        for (int32_t i = 0; i < resp.Topics.cnt; i++) {
            const kp_OffsetForLeaderEpochResponse_OffsetForLeaderTopicResult_t *rt =
                &resp.Topics.v[i];
            int32_t t = km_sg_topic_find(sg, rt->Topic);
            for (int32_t j = 0; t >= 0 && j < rt->Partitions.cnt; j++) {
                const kp_OffsetForLeaderEpochResponse_EpochEndOffset_t *ep = &rt->Partitions.v[j];
                if (ep->ErrorCode != 0)
                    continue;
                for (int32_t k = 0; k < sg->nitems; k++) {
                    km_sg_item_t *it = &sg->items[k];
                    if (it->t == t && it->p == ep->Partition) {
                        it->found_epoch = ep->LeaderEpoch;
                        it->found_end = ep->EndOffset;
                    }
                }
            }
        }
    } else {
        /* Unproved epochs are written as -1 (safe): not a failure of the group. */
        km_log_debug(sg->cm, "mirror %s: group %s: OffsetForLeaderEpoch at broker %d: %s",
                     sg->run->mirror, sg->group, (int)tag, why);
    }
    if (sg->pending > 0)
        return;
    if (km_sync_run_cancelled(sg->run)) {
        km_sg_finish(sg);
        return;
    }
    km_sg_dst_fetch(sg);
}

/* Is it worth asking leader for the end offset of the item's source epoch? Only an epoch that
 * km_sync_groups_epoch could keep (offset > 0, an epoch, not above the leader epoch). */
static bool km_sg_item_asks(const km_sg_t *sg, const km_sg_item_t *it, int32_t leader)
{
    const km_sg_part_t *pt = km_sg_part(sg, it->t, it->p);

    return pt != NULL && pt->leader >= 0 && pt->leader == leader && it->offset > 0 &&
           it->src_epoch >= 0 && pt->leader_epoch >= 0 && it->src_epoch <= pt->leader_epoch;
}

/* Ask each partition leader for the end offset of the epoch the source committed (the check
 * a Java consumer's position validation makes), for the items whose epoch can be kept. */
static void km_sg_epochs(km_sg_t *sg)
{
    int32_t *leaders = kp_arena_calloc(&sg->gar, (size_t)sg->nitems + 1, sizeof(*leaders));
    int32_t nl = 0;

    if (leaders == NULL) {
        km_sg_group_skip(sg, "out of memory");
        return;
    }
    for (int32_t i = 0; i < sg->nitems; i++) {
        const km_sg_item_t *it = &sg->items[i];
        km_sg_part_t *pt = km_sg_part(sg, it->t, it->p);
        int32_t l;
        if (pt == NULL || !km_sg_item_asks(sg, it, pt->leader))
            continue;
        for (l = 0; l < nl && leaders[l] != pt->leader; l++)
            ;
        if (l == nl)
            leaders[nl++] = pt->leader;
    }
    sg->pending = 1;
    for (int32_t l = 0; l < nl; l++) {
        kp_OffsetForLeaderEpochRequest_t rq;
        kp_OffsetForLeaderEpochRequest_OffsetForLeaderTopic_t *tv;
        int32_t nt = 0;

        tv = kp_arena_calloc(&sg->gar, (size_t)sg->ntopics, sizeof(*tv));
        if (tv == NULL)
            break;
        for (int32_t t = 0; t < sg->ntopics; t++) {
            kp_OffsetForLeaderEpochRequest_OffsetForLeaderTopic_t *ot = &tv[nt];
            int32_t n = 0;
            for (int32_t i = 0; i < sg->nitems; i++)
                n += sg->items[i].t == t && km_sg_item_asks(sg, &sg->items[i], leaders[l]);
            if (n == 0)
                continue;
            kp_OffsetForLeaderEpochRequest_OffsetForLeaderTopic_init(ot);
            ot->Topic = kp_str(sg->topics[t].name);
            ot->Partitions.cnt = 0;
            ot->Partitions.v = kp_arena_calloc(&sg->gar, (size_t)n, sizeof(*ot->Partitions.v));
            if (ot->Partitions.v == NULL)
                break;
            for (int32_t i = 0; i < sg->nitems; i++) {
                const km_sg_item_t *it = &sg->items[i];
                kp_OffsetForLeaderEpochRequest_OffsetForLeaderPartition_t *op;
                if (it->t != t || !km_sg_item_asks(sg, it, leaders[l]))
                    continue;
                op = &ot->Partitions.v[ot->Partitions.cnt++];
                kp_OffsetForLeaderEpochRequest_OffsetForLeaderPartition_init(op);
                op->Partition = it->p;
                op->CurrentLeaderEpoch = -1;
                op->LeaderEpoch = it->src_epoch;
            }
            if (ot->Partitions.cnt > 0)
                nt++;
        }
        if (nt == 0)
            continue;
        kp_msg_init(&kp_OffsetForLeaderEpochRequest_desc, &rq);
        rq.ReplicaId = -1; /* as a consumer asks */
        rq.Topics.cnt = nt;
        rq.Topics.v = tv;
        if (km_sg_dst_request(sg, leaders[l], 23, KM_SG_DST_OFLE_V,
                              &kp_OffsetForLeaderEpochRequest_desc, &rq, km_sg_on_epochs,
                              leaders[l]) == KBX_OK)
            sg->pending++;
    }
    /* The initial count: done when every request answered (a request not sent leaves its
     * epochs unproved: -1). */
    km_sg_on_epochs(sg, KBX_OK, NULL, 0, KM_SG_INITIAL);
}

static void km_sg_on_describe(km_sg_t *sg, int32_t status, const uint8_t *body, size_t len,
                              int32_t tag)
{
    kp_DescribeGroupsResponse_t resp;
    char why[200];
    bool idle = false, found = false;

    (void)tag;
    if (km_sync_run_cancelled(sg->run)) {
        km_sg_finish(sg);
        return;
    }
    if (!km_sg_decode(status, body, len, &kp_DescribeGroupsResponse_desc, KM_SG_DST_DESCGROUPS_V,
                      &sg->gar, &resp, why, sizeof(why))) {
        km_sg_group_skip(sg, "destination DescribeGroups: %s", why);
        return;
    }
    for (int32_t i = 0; i < resp.Groups.cnt && !found; i++) {
        const kp_DescribeGroupsResponse_DescribedGroup_t *g = &resp.Groups.v[i];
        if (!kp_str_eq(g->GroupId, sg->group))
            continue;
        found = true;
        if (g->ErrorCode == KP_ERR_GROUP_ID_NOT_FOUND) {
            idle = true;
        } else if (g->ErrorCode != 0) {
            km_sg_group_skip(sg, "destination DescribeGroups: %s", km_sg_errname(g->ErrorCode));
            return;
        } else {
            idle = km_sync_groups_idle(g->GroupState.ptr != NULL ? g->GroupState.ptr : "",
                                       g->GroupState.len > 0 ? (size_t)g->GroupState.len : 0,
                                       g->Members.cnt > 0 ? g->Members.cnt : 0);
            if (!idle)
                km_log_debug(sg->cm,
                             "mirror %s: group %s is %.*s with %d members on the destination: "
                             "not synced (its members commit there)",
                             sg->run->mirror, sg->group,
                             (int)(g->GroupState.len > 0 ? g->GroupState.len : 0),
                             g->GroupState.ptr != NULL ? g->GroupState.ptr : "",
                             (int)(g->Members.cnt > 0 ? g->Members.cnt : 0));
        }
    }
    if (!found) {
        km_sg_group_skip(sg, "destination DescribeGroups did not answer for the group");
        return;
    }
    if (!idle) {
        sg->n_active++;
        km_sg_next_group(sg);
        return;
    }
    km_sg_epochs(sg);
}

static void km_sg_on_dst_coord(km_sg_t *sg, int32_t status, const uint8_t *body, size_t len,
                               int32_t tag)
{
    kp_FindCoordinatorResponse_t resp;
    kp_DescribeGroupsRequest_t rq;
    kp_str_t gid;
    char why[200];
    int32_t rc;

    (void)tag;
    if (km_sync_run_cancelled(sg->run)) {
        km_sg_finish(sg);
        return;
    }
    if (!km_sg_decode(status, body, len, &kp_FindCoordinatorResponse_desc, KM_SG_DST_FINDCOORD_V,
                      &sg->gar, &resp, why, sizeof(why))) {
        km_sg_group_skip(sg, "destination FindCoordinator: %s", why);
        return;
    }
    if (resp.ErrorCode != 0 || resp.NodeId < 0) {
        km_sg_group_skip(sg, "destination FindCoordinator: %s (tried again next run)",
                         km_sg_errname(resp.ErrorCode));
        return;
    }
    sg->coord_dst = resp.NodeId;
    gid = kp_str(sg->group);
    kp_msg_init(&kp_DescribeGroupsRequest_desc, &rq);
    rq.Groups.cnt = 1;
    rq.Groups.v = &gid;
    rq.IncludeAuthorizedOperations = false;
    rc = km_sg_dst_request(sg, sg->coord_dst, 15, KM_SG_DST_DESCGROUPS_V,
                           &kp_DescribeGroupsRequest_desc, &rq, km_sg_on_describe, 0);
    if (rc != KBX_OK)
        km_sg_group_skip(sg, "destination DescribeGroups not sent (kbx status %d)", (int)rc);
}

/* Add one source commit of the group (bounds and eligibility checked here). */
static bool km_sg_item_add(km_sg_t *sg, int32_t t, int32_t p, int64_t off, int32_t epoch,
                           kp_str_t meta, int32_t cap)
{
    km_sg_part_t *pt = km_sg_part(sg, t, p);
    km_sg_item_t *it;
    int64_t o;

    if (pt == NULL || sg->nitems >= cap)
        return true;
    o = km_sync_groups_clamp(off, pt->hw);
    if (o < 0)
        return true;
    for (int32_t i = 0; i < sg->nitems; i++)
        if (sg->items[i].t == t && sg->items[i].p == p)
            return true; /* a duplicate in the answer: the first counts */
    it = &sg->items[sg->nitems];
    memset(it, 0, sizeof(*it));
    it->t = t;
    it->p = p;
    it->src_offset = off;
    it->src_epoch = epoch;
    it->offset = o;
    it->epoch = -1;
    it->found_epoch = -1;
    it->found_end = -1;
    it->dst_offset = -1;
    it->dst_epoch = -1;
    if (meta.len >= 0 && (it->meta = km_sg_kdup(&sg->gar, meta)) == NULL)
        return false;
    sg->nitems++;
    return true;
}

static void km_sg_on_src_fetch(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res,
                               const uint8_t *body, size_t len)
{
    km_sg_t *sg = arg;
    kp_OffsetFetchResponse_t resp;
    kp_FindCoordinatorRequest_t rq;
    char why[300];
    int32_t cap = 0, rc;

    if (!km_sg_op_end(cm, sg))
        return;
    if (km_sync_run_cancelled(sg->run)) {
        km_sg_finish(sg);
        return;
    }
    if (!km_sg_src_decode(res, body, len, &kp_OffsetFetchResponse_desc, &sg->gar, &resp, why,
                          sizeof(why))) {
        km_sg_group_skip(sg, "source OffsetFetch at %s: %s", sg->src_coord.addr, why);
        return;
    }
    if (resp.ErrorCode != 0) {
        km_sg_group_skip(sg, "source OffsetFetch at %s: %s", sg->src_coord.addr,
                         km_sg_errname(resp.ErrorCode));
        return;
    }
    if (sg->test_fail != NULL && strcmp(sg->group, sg->test_fail) == 0) {
        km_sg_group_skip(sg,
                         "source OffsetFetch at %s: injected failure "
                         "(KMIRROR_TEST_SYNC_GROUPS_FAIL)",
                         sg->src_coord.addr);
        return;
    }
    for (int32_t i = 0; i < resp.Topics.cnt; i++)
        if (km_sg_topic_find(sg, resp.Topics.v[i].Name) >= 0 && resp.Topics.v[i].Partitions.cnt > 0)
            cap += resp.Topics.v[i].Partitions.cnt;
    sg->nitems = 0;
    sg->items = cap > 0 ? kp_arena_calloc(&sg->gar, (size_t)cap, sizeof(*sg->items)) : NULL;
    if (cap > 0 && sg->items == NULL) {
        km_sg_group_skip(sg, "out of memory");
        return;
    }
    for (int32_t i = 0; i < resp.Topics.cnt; i++) {
        const kp_OffsetFetchResponse_OffsetFetchResponseTopic_t *rt = &resp.Topics.v[i];
        int32_t t = km_sg_topic_find(sg, rt->Name);
        if (t < 0)
            continue; /* not a mirror topic of this mirror (or not running) */
        for (int32_t j = 0; j < rt->Partitions.cnt; j++) {
            const kp_OffsetFetchResponse_OffsetFetchResponsePartition_t *rp = &rt->Partitions.v[j];
            if (rp->ErrorCode != 0)
                continue;
            if (!km_sg_item_add(sg, t, rp->PartitionIndex, rp->CommittedOffset,
                                res->version >= 5 ? rp->CommittedLeaderEpoch : -1, rp->Metadata,
                                cap)) {
                km_sg_group_skip(sg, "out of memory");
                return;
            }
        }
    }
    if (sg->nitems == 0) {
        km_sg_group_done(sg); /* nothing of this mirror's topics */
        return;
    }
    kp_msg_init(&kp_FindCoordinatorRequest_desc, &rq);
    rq.Key = kp_str(sg->group);
    rq.KeyType = 0;
    rc = km_sg_dst_request(sg, -1, 10, KM_SG_DST_FINDCOORD_V, &kp_FindCoordinatorRequest_desc, &rq,
                           km_sg_on_dst_coord, 0);
    if (rc != KBX_OK)
        km_sg_group_skip(sg, "destination FindCoordinator not sent (kbx status %d)", (int)rc);
}

static void km_sg_on_src_coord(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res,
                               const uint8_t *body, size_t len)
{
    km_sg_t *sg = arg;
    const km_mirror_def_t *def;
    kp_FindCoordinatorResponse_t resp;
    char why[300];
    km_err_t err;

    if (!km_sg_op_end(cm, sg))
        return;
    def = km_sync_run_def(sg->run);
    if (km_sync_run_cancelled(sg->run) || def == NULL) {
        km_sg_finish(sg);
        return;
    }
    if (!km_sg_src_decode(res, body, len, &kp_FindCoordinatorResponse_desc, &sg->gar, &resp, why,
                          sizeof(why))) {
        km_sg_group_skip(sg, "source FindCoordinator: %s", why);
        return;
    }
    if (resp.ErrorCode != 0 || resp.Host.len <= 0 || resp.Host.len > 255 || resp.Port <= 0 ||
        resp.Port > 65535) {
        km_sg_group_skip(sg, "source FindCoordinator: %s",
                         resp.ErrorCode != 0 ? km_sg_errname(resp.ErrorCode)
                                             : "no usable coordinator address");
        return;
    }
    sg->src_coord.one[0] = kp_arena_alloc(&sg->gar, (size_t)resp.Host.len + 8);
    if (sg->src_coord.one[0] == NULL) {
        km_sg_group_skip(sg, "out of memory");
        return;
    }
    snprintf(sg->src_coord.one[0], (size_t)resp.Host.len + 8, "%.*s:%d", (int)resp.Host.len,
             resp.Host.ptr, (int)resp.Port);
    sg->src_coord.addr = sg->src_coord.one[0];
    sg->src_coord.boot.v = sg->src_coord.one;
    sg->src_coord.boot.n = 1;
    kp_msg_init(&kp_OffsetFetchRequest_desc, &sg->src_of);
    sg->src_of.GroupId = kp_str(sg->group);
    sg->src_of.Topics.cnt = -1; /* every committed offset */
    sg->src_of.Topics.v = NULL;
    sg->src_of.RequireStable = false;
    err = km_sg_src_request(sg, &sg->src_coord.boot, &kp_OffsetFetchRequest_desc,
                            KM_SG_SRC_OFFSETFETCH_MAX, &sg->src_of, km_sg_src_timeout(def),
                            km_sg_on_src_fetch, sg);
    if (err != KM_OK)
        km_sg_group_skip(sg, "source OffsetFetch not sent: %s", km_err_str(err));
}

/* Start the next group; false when it ended at once (then the caller goes on). */
static bool km_sg_group_start(km_sg_t *sg)
{
    const km_mirror_def_t *def = km_sync_run_def(sg->run);
    km_err_t err;

    if (def == NULL)
        return false;
    kp_arena_free(&sg->gar);
    kp_arena_init(&sg->gar, KM_SG_ARENA_LIMIT);
    sg->group = sg->groups[sg->gi++];
    sg->items = NULL;
    sg->nitems = 0;
    sg->coord_dst = -1;
    memset(&sg->src_coord, 0, sizeof(sg->src_coord));
    sg->src_coord.addr = "?";
    kp_msg_init(&kp_FindCoordinatorRequest_desc, &sg->src_fc);
    sg->src_fc.Key = kp_str(sg->group);
    sg->src_fc.KeyType = 0;
    err = km_sg_src_request(sg, &def->conf.bootstrap_servers, &kp_FindCoordinatorRequest_desc,
                            KM_SG_SRC_FINDCOORD_MAX, &sg->src_fc, km_sg_src_timeout(def),
                            km_sg_on_src_coord, sg);
    if (err != KM_OK) {
        km_sg_group_fail(sg, "source FindCoordinator not sent: %s", km_err_str(err));
        return false;
    }
    return true;
}

static void km_sg_next_group(km_sg_t *sg)
{
    while (sg->gi < sg->ngroups) {
        if (km_sync_run_cancelled(sg->run) || km_sync_run_def(sg->run) == NULL)
            break;
        if (km_sg_group_start(sg))
            return;
    }
    km_sg_finish(sg);
}

/* ==================================== the groups ============================================ */

static int km_sg_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void km_sg_groups_listed(km_sg_t *sg)
{
    int32_t w = 0;

    if (sg->ngroups > 1)
        qsort(sg->groups, (size_t)sg->ngroups, sizeof(*sg->groups), km_sg_cmp);
    for (int32_t i = 0; i < sg->ngroups; i++)
        if (w == 0 || strcmp(sg->groups[w - 1], sg->groups[i]) != 0)
            sg->groups[w++] = sg->groups[i];
    sg->ngroups = w;
    sg->gi = 0;
    km_sg_next_group(sg);
}

static bool km_sg_group_add(km_sg_t *sg, kp_str_t id)
{
    if (sg->ngroups == sg->capgroups) {
        int32_t cap = sg->capgroups ? 2 * sg->capgroups : 16;
        char **nv = kp_arena_calloc(&sg->ar, (size_t)cap, sizeof(*nv));
        if (nv == NULL)
            return false;
        if (sg->ngroups > 0)
            memcpy(nv, sg->groups, (size_t)sg->ngroups * sizeof(*nv));
        sg->groups = nv;
        sg->capgroups = cap;
    }
    if ((sg->groups[sg->ngroups] = km_sg_kdup(&sg->ar, id)) == NULL)
        return false;
    sg->ngroups++;
    return true;
}

static void km_sg_on_list(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res,
                          const uint8_t *body, size_t len)
{
    km_sg_arg_t *la = arg;
    km_sg_t *sg = la->sg;
    kp_ListGroupsResponse_t resp;
    kp_arena_t tmp;
    char why[300], item[300];

    if (!km_sg_op_end(cm, sg))
        return;
    sg->pending--;
    snprintf(item, sizeof(item), "source broker %s", la->addr);
    kp_arena_init(&tmp, KM_SG_ARENA_LIMIT);
    if (!km_sg_src_decode(res, body, len, &kp_ListGroupsResponse_desc, &tmp, &resp, why,
                          sizeof(why))) {
        km_sync_run_error(sg->run, item, "ListGroups: %s", why);
    } else if (resp.ErrorCode != 0) {
        km_sync_run_error(sg->run, item, "ListGroups: %s", km_sg_errname(resp.ErrorCode));
    } else {
        for (int32_t i = 0; i < resp.Groups.cnt; i++) {
            const kp_ListGroupsResponse_ListedGroup_t *g = &resp.Groups.v[i];
            bool sel = false;
            km_err_t err;
            if (g->GroupId.len <= 0)
                continue;
            err = km_sync_groups_select(
                sg->include, sg->exclude, g->GroupId.ptr, (size_t)g->GroupId.len,
                g->ProtocolType.ptr != NULL ? g->ProtocolType.ptr : "",
                g->ProtocolType.len > 0 ? (size_t)g->ProtocolType.len : 0, &sel);
            if (err != KM_OK) {
                snprintf(item, sizeof(item), "group %.*s", (int)g->GroupId.len, g->GroupId.ptr);
                km_sync_run_error(sg->run, item, "groups.include/exclude: %s", km_err_str(err));
                continue;
            }
            if (sel && !km_sg_group_add(sg, g->GroupId)) {
                km_sync_run_error(sg->run, NULL, "out of memory listing groups");
                break;
            }
        }
    }
    kp_arena_free(&tmp);
    if (sg->pending > 0)
        return;
    if (km_sync_run_cancelled(sg->run)) {
        km_sg_finish(sg);
        return;
    }
    km_sg_groups_listed(sg);
}

static void km_sg_on_src_brokers(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res,
                                 const uint8_t *body, size_t len)
{
    km_sg_t *sg = arg;
    const km_mirror_def_t *def;
    kp_MetadataResponse_t resp;
    kp_arena_t tmp;
    char why[300];

    if (!km_sg_op_end(cm, sg))
        return;
    def = km_sync_run_def(sg->run);
    if (km_sync_run_cancelled(sg->run) || def == NULL) {
        km_sg_finish(sg);
        return;
    }
    kp_arena_init(&tmp, KM_SG_ARENA_LIMIT);
    if (!km_sg_src_decode(res, body, len, &kp_MetadataResponse_desc, &tmp, &resp, why,
                          sizeof(why))) {
        km_sync_run_error(sg->run, NULL, "source Metadata (its brokers): %s", why);
        kp_arena_free(&tmp);
        km_sg_finish(sg);
        return;
    }
    /* ListGroups at every broker: each lists the groups it coordinates. */
    sg->pending = 1;
    kp_msg_init(&kp_ListGroupsRequest_desc, &sg->src_lg);
    sg->src_lg.StatesFilter.cnt = 0;
    sg->src_lg.TypesFilter.cnt = 0;
    for (int32_t i = 0; i < resp.Brokers.cnt; i++) {
        const kp_MetadataResponse_MetadataResponseBroker_t *b = &resp.Brokers.v[i];
        km_sg_arg_t *la;
        size_t n;
        km_err_t err;

        if (b->Host.len <= 0 || b->Host.len > 255 || b->Port <= 0 || b->Port > 65535)
            continue;
        la = kp_arena_calloc(&sg->ar, 1, sizeof(*la));
        n = (size_t)b->Host.len + 8;
        if (la == NULL || (la->one[0] = kp_arena_alloc(&sg->ar, n)) == NULL) {
            km_sync_run_error(sg->run, NULL, "out of memory");
            break;
        }
        snprintf(la->one[0], n, "%.*s:%d", (int)b->Host.len, b->Host.ptr, (int)b->Port);
        la->sg = sg;
        la->addr = la->one[0];
        la->boot.v = la->one;
        la->boot.n = 1;
        err = km_sg_src_request(sg, &la->boot, &kp_ListGroupsRequest_desc, KM_SG_SRC_LISTGROUPS_MAX,
                                &sg->src_lg, km_sg_src_timeout(def), km_sg_on_list, la);
        if (err != KM_OK) {
            char item[300];
            snprintf(item, sizeof(item), "source broker %s", la->addr);
            km_sync_run_error(sg->run, item, "ListGroups not sent: %s", km_err_str(err));
            continue;
        }
        sg->pending++;
    }
    kp_arena_free(&tmp);
    /* The initial count (answers come later, on the loop). */
    if (--sg->pending > 0)
        return;
    km_sg_groups_listed(sg);
}

static void km_sg_src_brokers(km_sg_t *sg)
{
    const km_mirror_def_t *def = km_sync_run_def(sg->run);
    km_err_t err;

    if (def == NULL) {
        km_sg_finish(sg);
        return;
    }
    kp_msg_init(&kp_MetadataRequest_desc, &sg->src_md);
    sg->src_md.Topics.cnt = 0; /* brokers only */
    sg->src_md.Topics.v = NULL;
    sg->src_md.AllowAutoTopicCreation = false;
    err = km_sg_src_request(sg, &def->conf.bootstrap_servers, &kp_MetadataRequest_desc,
                            KM_SG_SRC_METADATA_MAX, &sg->src_md, km_sg_src_timeout(def),
                            km_sg_on_src_brokers, sg);
    if (err != KM_OK) {
        km_sync_run_error(sg->run, NULL, "source Metadata not sent: %s", km_err_str(err));
        km_sg_finish(sg);
    }
}

/* ==================================== the destination ======================================= */

static void km_sg_on_hw(km_sg_t *sg, int32_t status, const uint8_t *body, size_t len, int32_t tag)
{
    kp_ListOffsetsResponse_t resp;
    kp_arena_t tmp;
    char why[200], item[300];

    sg->pending--;
    kp_arena_init(&tmp, KM_SG_ARENA_LIMIT);
    if (tag == KM_SG_INITIAL) {
        /* the initial count: nothing to read */
    } else if (!km_sg_decode(status, body, len, &kp_ListOffsetsResponse_desc,
                             KM_SG_DST_LISTOFFSETS_V, &tmp, &resp, why, sizeof(why))) {
        snprintf(item, sizeof(item), "destination broker %d", (int)tag);
        km_sync_run_error(sg->run, item, "ListOffsets (high watermarks): %s", why);
    } else {
        for (int32_t i = 0; i < resp.Topics.cnt; i++) {
            const kp_ListOffsetsResponse_ListOffsetsTopicResponse_t *rt = &resp.Topics.v[i];
            int32_t t = km_sg_topic_find(sg, rt->Name);
            for (int32_t j = 0; t >= 0 && j < rt->Partitions.cnt; j++) {
                const kp_ListOffsetsResponse_ListOffsetsPartitionResponse_t *rp =
                    &rt->Partitions.v[j];
                km_sg_part_t *pt = km_sg_part(sg, t, rp->PartitionIndex);
                if (pt == NULL)
                    continue;
                if (rp->ErrorCode == 0 && rp->Offset >= 0) {
                    pt->hw = rp->Offset;
                } else {
                    snprintf(item, sizeof(item), "%s-%d", sg->topics[t].name,
                             (int)rp->PartitionIndex);
                    km_sync_run_error(sg->run, item,
                                      "destination high watermark unknown (%s): its group "
                                      "offsets wait for the next run",
                                      km_sg_errname(rp->ErrorCode));
                }
            }
        }
    }
    kp_arena_free(&tmp);
    if (sg->pending > 0)
        return;
    if (km_sync_run_cancelled(sg->run)) {
        km_sg_finish(sg);
        return;
    }
    km_sg_src_brokers(sg);
}

/* ListOffsets latest (READ_UNCOMMITTED: the high watermark) at every destination leader. */
static void km_sg_hws(km_sg_t *sg)
{
    int32_t *leaders;
    int32_t nl = 0, total = 0;
    char item[300];

    for (int32_t t = 0; t < sg->ntopics; t++)
        total += sg->topics[t].nparts;
    leaders = kp_arena_calloc(&sg->ar, (size_t)total + 1, sizeof(*leaders));
    if (leaders == NULL) {
        km_sync_run_error(sg->run, NULL, "out of memory");
        km_sg_finish(sg);
        return;
    }
    for (int32_t t = 0; t < sg->ntopics; t++)
        for (int32_t p = 0; p < sg->topics[t].nparts; p++) {
            int32_t l, id = sg->topics[t].parts[p].leader;
            if (id < 0) {
                snprintf(item, sizeof(item), "%s-%d", sg->topics[t].name, (int)p);
                km_sync_run_error(sg->run, item,
                                  "no destination leader: its group offsets wait for the next "
                                  "run");
                continue;
            }
            for (l = 0; l < nl && leaders[l] != id; l++)
                ;
            if (l == nl)
                leaders[nl++] = id;
        }
    sg->pending = 1;
    for (int32_t l = 0; l < nl; l++) {
        kp_arena_t tmp;
        kp_ListOffsetsRequest_t rq;
        kp_ListOffsetsRequest_ListOffsetsTopic_t *tv;
        int32_t nt = 0, rc;

        kp_arena_init(&tmp, KM_SG_ARENA_LIMIT);
        tv = kp_arena_calloc(&tmp, (size_t)sg->ntopics, sizeof(*tv));
        for (int32_t t = 0; tv != NULL && t < sg->ntopics; t++) {
            kp_ListOffsetsRequest_ListOffsetsTopic_t *lt = &tv[nt];
            kp_ListOffsetsRequest_ListOffsetsTopic_init(lt);
            lt->Name = kp_str(sg->topics[t].name);
            lt->Partitions.cnt = 0;
            lt->Partitions.v =
                kp_arena_calloc(&tmp, (size_t)sg->topics[t].nparts + 1, sizeof(*lt->Partitions.v));
            if (lt->Partitions.v == NULL) {
                tv = NULL;
                break;
            }
            for (int32_t p = 0; p < sg->topics[t].nparts; p++) {
                kp_ListOffsetsRequest_ListOffsetsPartition_t *lp;
                if (sg->topics[t].parts[p].leader != leaders[l])
                    continue;
                lp = &lt->Partitions.v[lt->Partitions.cnt++];
                kp_ListOffsetsRequest_ListOffsetsPartition_init(lp);
                lp->PartitionIndex = p;
                lp->CurrentLeaderEpoch = -1;
                lp->Timestamp = -1; /* latest */
            }
            if (lt->Partitions.cnt > 0)
                nt++;
        }
        if (tv == NULL) {
            km_sync_run_error(sg->run, NULL, "out of memory");
            kp_arena_free(&tmp);
            continue;
        }
        kp_msg_init(&kp_ListOffsetsRequest_desc, &rq);
        rq.ReplicaId = -1;
        rq.IsolationLevel = 0;
        rq.Topics.cnt = nt;
        rq.Topics.v = tv;
        rc = km_sg_dst_request(sg, leaders[l], 2, KM_SG_DST_LISTOFFSETS_V,
                               &kp_ListOffsetsRequest_desc, &rq, km_sg_on_hw, leaders[l]);
        kp_arena_free(&tmp);
        if (rc != KBX_OK) {
            snprintf(item, sizeof(item), "destination broker %d", (int)leaders[l]);
            km_sync_run_error(sg->run, item, "ListOffsets not sent (kbx status %d)", (int)rc);
            continue;
        }
        sg->pending++;
    }
    /* The initial count. */
    km_sg_on_hw(sg, KBX_OK, NULL, 0, KM_SG_INITIAL);
}

static void km_sg_on_dst_metadata(km_sg_t *sg, int32_t status, const uint8_t *body, size_t len,
                                  int32_t tag)
{
    kp_MetadataResponse_t resp;
    kp_arena_t tmp;
    char why[200];

    (void)tag;
    if (km_sync_run_cancelled(sg->run)) {
        km_sg_finish(sg);
        return;
    }
    kp_arena_init(&tmp, KM_SG_ARENA_LIMIT);
    if (!km_sg_decode(status, body, len, &kp_MetadataResponse_desc, KM_SG_DST_METADATA_V, &tmp,
                      &resp, why, sizeof(why))) {
        km_sync_run_error(sg->run, NULL, "destination Metadata: %s", why);
        kp_arena_free(&tmp);
        km_sg_finish(sg);
        return;
    }
    for (int32_t i = 0; i < resp.Topics.cnt; i++) {
        const kp_MetadataResponse_MetadataResponseTopic_t *mt = &resp.Topics.v[i];
        int32_t t = km_sg_topic_find(sg, mt->Name), n;
        km_sg_topic_t *tp;

        if (t < 0 || sg->topics[t].parts != NULL)
            continue;
        tp = &sg->topics[t];
        if (mt->ErrorCode != 0) {
            km_sync_run_error(sg->run, tp->name, "destination Metadata: %s",
                              km_sg_errname(mt->ErrorCode));
            continue;
        }
        n = mt->Partitions.cnt > 0 ? mt->Partitions.cnt : 0;
        tp->parts = kp_arena_calloc(&sg->ar, (size_t)n + 1, sizeof(*tp->parts));
        if (tp->parts == NULL) {
            km_sync_run_error(sg->run, tp->name, "out of memory");
            continue;
        }
        for (int32_t p = 0; p < n; p++) {
            tp->parts[p].leader = -1;
            tp->parts[p].leader_epoch = -1;
            tp->parts[p].hw = -1;
        }
        tp->nparts = n;
        /* Partition indexes outside [0, count) are ignored: never trusted as array indexes. */
        for (int32_t j = 0; j < n; j++) {
            const kp_MetadataResponse_MetadataResponsePartition_t *mp = &mt->Partitions.v[j];
            if (mp->PartitionIndex < 0 || mp->PartitionIndex >= n)
                continue;
            tp->parts[mp->PartitionIndex].leader = mp->ErrorCode == 0 ? mp->LeaderId : -1;
            tp->parts[mp->PartitionIndex].leader_epoch = mp->LeaderEpoch;
        }
    }
    kp_arena_free(&tmp);
    km_sg_hws(sg);
}

typedef struct km_sg_collect {
    km_sg_t *sg;
    const char *mirror;
    int32_t cap;
    bool nomem;
} km_sg_collect_t;

static void km_sg_collect_topic(void *arg, const km_cat_topic_t *t)
{
    km_sg_collect_t *c = arg;
    km_sg_t *sg = c->sg;
    km_sync_run_t *run = sg->run;
    bool listed = run->topics == NULL;
    km_sg_topic_t *nv;

    if (c->nomem || !km_sync_topic_eligible(t, c->mirror))
        return;
    for (size_t i = 0; !listed && i < run->ntopics; i++)
        listed = run->topics[i] != NULL && strcmp(run->topics[i], t->name) == 0;
    if (!listed)
        return;
    if (sg->ntopics == c->cap) {
        int32_t cap = c->cap ? 2 * c->cap : 16;
        nv = kp_arena_calloc(&sg->ar, (size_t)cap, sizeof(*nv));
        if (nv == NULL) {
            c->nomem = true;
            return;
        }
        if (sg->ntopics > 0)
            memcpy(nv, sg->topics, (size_t)sg->ntopics * sizeof(*nv));
        sg->topics = nv;
        c->cap = cap;
    }
    memset(&sg->topics[sg->ntopics], 0, sizeof(sg->topics[sg->ntopics]));
    sg->topics[sg->ntopics].name = km_sg_dup(&sg->ar, t->name, strlen(t->name));
    if (sg->topics[sg->ntopics].name == NULL) {
        c->nomem = true;
        return;
    }
    sg->ntopics++;
}

static km_err_t km_sg_compile(km_sg_t *sg, const char *re, km_pattern_t **out, const char *key)
{
    char errstr[256];
    km_err_t err;

    *out = NULL;
    if (re == NULL || re[0] == '\0')
        return KM_OK;
    err = km_pattern_compile(sg->cm, re, strlen(re), out, errstr, sizeof(errstr));
    if (err != KM_OK)
        km_sync_run_error(sg->run, NULL, "%s: %s", key, errstr);
    return err;
}

void km_sync_groups_run(km_sync_run_t *run)
{
    km_plugin_t *cm = run->cm;
    const km_mirror_def_t *def = km_sync_run_def(run);
    km_sg_collect_t c;
    kp_MetadataRequest_t rq;
    kp_MetadataRequest_MetadataRequestTopic_t *tv;
    km_sg_t *sg;
    const char *tf;
    int32_t rc;

    if (def == NULL || km_sync_run_cancelled(run)) {
        km_sync_run_done(run);
        return;
    }
    sg = km_calloc(cm, 1, sizeof(*sg));
    if (sg == NULL) {
        km_sync_run_error(run, NULL, "out of memory");
        km_sync_run_done(run);
        return;
    }
    sg->magic = KM_SG_MAGIC;
    atomic_init(&sg->ops, 0);
    sg->cm = cm;
    sg->run = run;
    kp_arena_init(&sg->ar, KM_SG_ARENA_LIMIT);
    kp_arena_init(&sg->gar, KM_SG_ARENA_LIMIT);
    if (km_sg_compile(sg, def->conf.groups_include, &sg->include, "groups.include") != KM_OK ||
        km_sg_compile(sg, def->conf.groups_exclude, &sg->exclude, "groups.exclude") != KM_OK) {
        km_sg_finish(sg);
        return;
    }
    tf = getenv("KMIRROR_TEST_SYNC_GROUPS_FAIL");
    if (tf != NULL && tf[0] != '\0')
        sg->test_fail = km_sg_dup(&sg->ar, tf, strlen(tf)); /* NULL on no memory: no test */
    c.sg = sg;
    c.mirror = run->mirror;
    c.cap = 0;
    c.nomem = false;
    km_catalog_topic_foreach(&cm->catalog, km_sg_collect_topic, &c);
    if (c.nomem) {
        km_sync_run_error(run, NULL, "out of memory");
        km_sg_finish(sg);
        return;
    }
    if (sg->ntopics == 0) {
        km_sg_finish(sg); /* no running mirror topic: nothing to sync */
        return;
    }
    tv = kp_arena_calloc(&sg->ar, (size_t)sg->ntopics, sizeof(*tv));
    if (tv == NULL) {
        km_sync_run_error(run, NULL, "out of memory");
        km_sg_finish(sg);
        return;
    }
    for (int32_t i = 0; i < sg->ntopics; i++) {
        kp_MetadataRequest_MetadataRequestTopic_init(&tv[i]);
        tv[i].Name = kp_str(sg->topics[i].name);
    }
    kp_msg_init(&kp_MetadataRequest_desc, &rq);
    rq.Topics.cnt = sg->ntopics;
    rq.Topics.v = tv;
    rq.AllowAutoTopicCreation = false;
    rc = km_sg_dst_request(sg, -1, 3, KM_SG_DST_METADATA_V, &kp_MetadataRequest_desc, &rq,
                           km_sg_on_dst_metadata, 0);
    if (rc != KBX_OK) {
        km_sync_run_error(run, NULL, "destination Metadata not sent (kbx status %d)", (int)rc);
        km_sg_finish(sg);
    }
}
