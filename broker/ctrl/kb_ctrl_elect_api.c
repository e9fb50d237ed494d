/*
 * kb_ctrl_elect_api.c -- ElectLeaders (43) and automatic leader rebalancing on the controller
 * (kb_ctrl_elect_api.h).
 *
 * Threads: the handler runs on handler threads, kb_ctrl_elector_tick() on the controller
 * thread. Both read the metadata image and commit through kb_meta_change_partition(), whose
 * partition-epoch check makes a concurrent change (an AlterPartition, the reaper) fail the
 * commit instead of being overwritten; the election is then decided again on the new state.
 */
#include "kb_ctrl_elect_api.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef KB_HAVE_ACL
#include "kb_aclmod.h"
#endif
#include "kb_ctrl_elect.h"
#include "kb_apilog.h"
#include "kb_resp.h"
#include "kb_tconf.h"
#include "kp_errcode.h"
#include "kp_msgs.h"

#define KB_CTRL_ELECTOR_MAGIC        0x6b656c65u /* "kele" */
#define KB_CTRL_ELECT_RETRIES        3
#define KB_CTRL_ELECT_MAX_INTERVAL_S 1000000000LL

struct kb_ctrl_elector_s {
    uint32_t magic;
    kb_broker_t *kb;
    kb_meta_t *meta;
    const kb_config_t *cfg;
    kb_ctrl_usable_fn *usable; /* NULL: a broker-only node's stand-in */
    void *opaque;
    int32_t controller_id;
    int64_t next_check_ms; /* the controller thread's only */
};

kb_ctrl_elector_t *kb_ctrl_elector_new(kb_broker_t *kb, kb_meta_t *meta, kb_ctrl_usable_fn *usable,
                                       void *opaque, int32_t controller_id)
{
    kb_ctrl_elector_t *el = calloc(1, sizeof(*el));
    if (!el)
        return NULL;
    el->magic = KB_CTRL_ELECTOR_MAGIC;
    el->kb = kb;
    el->meta = meta;
    el->cfg = kb->cfg;
    el->usable = usable;
    el->opaque = opaque;
    el->controller_id = controller_id;
    el->next_check_ms = -1; /* the first tick schedules the first check one interval later */
    return el;
}

void kb_ctrl_elector_free(kb_ctrl_elector_t *el)
{
    if (!el)
        return;
    el->magic = 0;
    free(el);
}

bool kb_ctrl_elect_unclean_enabled(kb_meta_t *meta, const kb_config_t *cfg, const char *topic)
{
    const kb_tconf_def_t *d = kb_tconf_def("unclean.leader.election.enable");
    kb_kv_t *ov = NULL, *node = NULL, *dflt = NULL;
    size_t ov_cnt = 0, node_cnt = 0, dflt_cnt = 0;
    kb_dyncfg_t dyn;
    kb_tconf_val_t v;
    bool on = cfg->unclean_leader_election_enable;

    if (!d)
        return on;
    if (kb_meta_topic_configs(meta, topic, &ov, &ov_cnt) != 0) {
        ov = NULL;
        ov_cnt = 0;
    }
    if (kb_meta_broker_dyncfg(meta, &node, &node_cnt, &dflt, &dflt_cnt) != 0) {
        node = dflt = NULL;
        node_cnt = dflt_cnt = 0;
    }
    dyn = (kb_dyncfg_t){.node = node, .node_cnt = node_cnt, .dflt = dflt, .dflt_cnt = dflt_cnt};
    kb_tconf_effective(d, ov, ov_cnt, cfg, &dyn, &v, NULL, NULL);
    if (!v.is_null)
        on = !strcasecmp(v.value, "true");
    kb_kv_free(ov, ov_cnt);
    kb_kv_free(node, node_cnt);
    kb_kv_free(dflt, dflt_cnt);
    return on;
}

void kb_ctrl_part_load(kb_ctrl_part_t *p, const kb_meta_part_state_t *st)
{
    memset(p, 0, sizeof(*p));
    p->leader = st->leader;
    p->leader_epoch = st->leader_epoch;
    p->partition_epoch = st->partition_epoch;
    p->nreplicas = st->nreplicas < KB_CTRL_MAX_REPLICAS ? st->nreplicas : KB_CTRL_MAX_REPLICAS;
    p->nisr = st->nisr < KB_CTRL_MAX_REPLICAS ? st->nisr : KB_CTRL_MAX_REPLICAS;
    memcpy(p->replicas, st->replicas, (size_t)p->nreplicas * sizeof(int32_t));
    memcpy(p->isr, st->isr, (size_t)p->nisr * sizeof(int32_t));
}

/*
 * One election of type @p type on partition @p partition of topic @p t (the controller):
 * decided on the image's state and committed; decided again when a concurrent change moved the
 * partition epoch. @p why names the caller in log lines. Returns 0 or the Kafka error, with a
 * message in @p msg for errors a client sees.
 */
static int16_t kb_ctrl_elect_one(kb_ctrl_elector_t *el, const kb_topic_info_t *t, int32_t partition,
                                 int8_t type, const char *why, char *msg, size_t msg_size)
{
    int16_t ec = KP_ERR_UNKNOWN_SERVER_ERROR;

    msg[0] = '\0';
    for (int attempt = 0; attempt < KB_CTRL_ELECT_RETRIES; attempt++) {
        kb_meta_part_state_t st;
        kb_ctrl_part_t cur, next;
        bool unclean = false;

        if (kb_meta_part_state(el->meta, &t->id, partition, &st) != KB_META_OK) {
            snprintf(msg, msg_size, "No such partition as %s-%" PRId32, t->name, partition);
            return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
        }
        kb_ctrl_part_load(&cur, &st);
        ec = kb_ctrl_elect_requested(&cur, type, el->usable, el->opaque, &next, &unclean);
        if (ec == KP_ERR_PREFERRED_LEADER_NOT_AVAILABLE)
            snprintf(msg, msg_size,
                     "Failed to elect leader for partition %s-%" PRId32
                     " under strategy PreferredReplicaPartitionLeaderElectionStrategy: the "
                     "preferred replica %" PRId32 " is not alive or not in the ISR",
                     t->name, partition, cur.nreplicas > 0 ? cur.replicas[0] : -1);
        else if (ec == KP_ERR_ELIGIBLE_LEADERS_NOT_AVAILABLE)
            snprintf(msg, msg_size,
                     "Failed to elect leader for partition %s-%" PRId32
                     " under strategy UncleanPartitionLeaderElectionStrategy: no replica is alive",
                     t->name, partition);
        if (ec)
            return ec;
        ec = kb_meta_change_partition(el->meta, &t->id, partition, cur.partition_epoch, next.leader,
                                      next.isr, unclean ? next.nisr : -1, NULL);
        if (ec == KP_ERR_INVALID_UPDATE_VERSION)
            continue; /* changed meanwhile: decide again */
        if (ec) {
            snprintf(msg, msg_size, "The election of %s-%" PRId32 " could not be committed",
                     t->name, partition);
            kb_log_warn("ctrl", "%s-%" PRId32 ": %s election not committed: error %d", t->name,
                        partition, why, ec);
            return ec;
        }
        if (unclean)
            kb_log_warn("ctrl",
                        "%s-%" PRId32 ": UNCLEAN leader election (%s): leader %" PRId32
                        " -> %" PRId32 ", which was not in the ISR; records the old ISR had and "
                        "it lacks are lost",
                        t->name, partition, why, cur.leader, next.leader);
        else
            kb_log_info("ctrl", "%s-%" PRId32 ": leader %" PRId32 " -> %" PRId32 " (%s)", t->name,
                        partition, cur.leader, next.leader, why);
        return 0;
    }
    snprintf(msg, msg_size, "%s-%" PRId32 " kept changing during the election", t->name, partition);
    return ec;
}

/* ---- the handler ------------------------------------------------------------------------------
 */

/* Results under construction: one array per topic in the arena. */
typedef kp_ElectLeadersResponse_ReplicaElectionResult_t kb_ctrl_eres_t;
typedef kp_ElectLeadersResponse_PartitionResult_t kb_ctrl_pres_t;

static kb_ctrl_pres_t *kb_ctrl_elect_add(kb_reqctx_t *ctx, kb_ctrl_eres_t *tr, int32_t partition,
                                         int16_t ec, const char *msg)
{
    kb_ctrl_pres_t *pr = &tr->PartitionResult.v[tr->PartitionResult.cnt++];
    kp_ElectLeadersResponse_PartitionResult_init(pr);
    pr->PartitionId = partition;
    pr->ErrorCode = ec;
    pr->ErrorMessage.len = -1;
    if (ec && msg && *msg) {
        size_t n = strlen(msg);
        char *s = kp_arena_alloc(ctx->arena, n + 1);
        if (!s)
            return NULL;
        memcpy(s, msg, n + 1);
        pr->ErrorMessage.ptr = s;
        pr->ErrorMessage.len = (int32_t)n;
    }
    return pr;
}

/* Every requested partition answered with @p ec (Kafka's getErrorResponse; v1+ also carries it
 * at the top). A null request gets no rows. */
static int kb_ctrl_elect_fail_all(kb_reqctx_t *ctx, const kp_ElectLeadersRequest_t *rq,
                                  kp_ElectLeadersResponse_t *resp, int16_t ec, const char *msg)
{
    if (ctx->api_version >= 1)
        resp->ErrorCode = ec;
    if (rq->TopicPartitions.cnt <= 0)
        return 0;
    resp->ReplicaElectionResults.v = kp_arena_calloc(ctx->arena, (size_t)rq->TopicPartitions.cnt,
                                                     sizeof(*resp->ReplicaElectionResults.v));
    if (!resp->ReplicaElectionResults.v)
        return -1;
    for (int32_t i = 0; i < rq->TopicPartitions.cnt; i++) {
        const kp_ElectLeadersRequest_ElectLeadersTopic_t *t = &rq->TopicPartitions.v[i];
        kb_ctrl_eres_t *tr = &resp->ReplicaElectionResults.v[resp->ReplicaElectionResults.cnt++];
        int32_t np = t->Partitions.cnt > 0 ? t->Partitions.cnt : 0;
        kp_ElectLeadersResponse_ReplicaElectionResult_init(tr);
        tr->Topic = t->Topic;
        tr->PartitionResult.v = kp_arena_calloc(ctx->arena, (size_t)np + 1, sizeof(kb_ctrl_pres_t));
        if (!tr->PartitionResult.v)
            return -1;
        for (int32_t k = 0; k < np; k++)
            if (!kb_ctrl_elect_add(ctx, tr, t->Partitions.v[k], ec, msg))
                return -1;
    }
    return 0;
}

/* TopicPartitions null: every partition of every topic; partitions that already have the
 * leader asked for are left out (Kafka). */
static int kb_ctrl_elect_everything(kb_ctrl_elector_t *el, kb_reqctx_t *ctx, int8_t type,
                                    kp_ElectLeadersResponse_t *resp)
{
    kb_topic_info_t *topics = NULL;
    size_t nt = 0;
    int rc = 0;
    char msg[512];

    if (kb_meta_topics(el->meta, &topics, &nt) != 0)
        return -1;
    resp->ReplicaElectionResults.v =
        kp_arena_calloc(ctx->arena, nt + 1, sizeof(*resp->ReplicaElectionResults.v));
    if (!resp->ReplicaElectionResults.v)
        rc = -1;
    for (size_t i = 0; i < nt && rc == 0; i++) {
        kb_ctrl_eres_t *tr = &resp->ReplicaElectionResults.v[resp->ReplicaElectionResults.cnt];
        size_t n = strlen(topics[i].name);
        char *name = kp_arena_alloc(ctx->arena, n + 1);
        kp_ElectLeadersResponse_ReplicaElectionResult_init(tr);
        tr->PartitionResult.v = kp_arena_calloc(
            ctx->arena, (size_t)(topics[i].partitions > 0 ? topics[i].partitions : 0) + 1,
            sizeof(kb_ctrl_pres_t));
        if (!name || !tr->PartitionResult.v) {
            rc = -1;
            break;
        }
        memcpy(name, topics[i].name, n + 1);
        tr->Topic = (kp_str_t){.ptr = name, .len = (int32_t)n};
        for (int32_t k = 0; k < topics[i].partitions; k++) {
            int16_t ec =
                kb_ctrl_elect_one(el, &topics[i], k, type, "ElectLeaders", msg, sizeof(msg));
            if (ec == KP_ERR_ELECTION_NOT_NEEDED)
                continue;
            if (!kb_ctrl_elect_add(ctx, tr, k, ec, msg)) {
                rc = -1;
                break;
            }
        }
        if (tr->PartitionResult.cnt > 0)
            resp->ReplicaElectionResults.cnt++;
    }
    free(topics);
    return rc;
}

static int kb_ctrl_elect_listed(kb_ctrl_elector_t *el, kb_reqctx_t *ctx,
                                const kp_ElectLeadersRequest_t *rq, kp_ElectLeadersResponse_t *resp)
{
    char msg[512];

    resp->ReplicaElectionResults.v = kp_arena_calloc(ctx->arena, (size_t)rq->TopicPartitions.cnt,
                                                     sizeof(*resp->ReplicaElectionResults.v));
    if (!resp->ReplicaElectionResults.v)
        return -1;
    for (int32_t i = 0; i < rq->TopicPartitions.cnt; i++) {
        const kp_ElectLeadersRequest_ElectLeadersTopic_t *t = &rq->TopicPartitions.v[i];
        kb_ctrl_eres_t *tr = &resp->ReplicaElectionResults.v[resp->ReplicaElectionResults.cnt++];
        int32_t np = t->Partitions.cnt > 0 ? t->Partitions.cnt : 0;
        kb_topic_info_t info;
        char name[KB_TOPIC_NAME_MAX + 1];
        bool known;

        kp_ElectLeadersResponse_ReplicaElectionResult_init(tr);
        tr->Topic = t->Topic;
        tr->PartitionResult.v = kp_arena_calloc(ctx->arena, (size_t)np + 1, sizeof(kb_ctrl_pres_t));
        if (!tr->PartitionResult.v)
            return -1;
        /* A name that cannot be a topic's (too long, null) is simply unknown. */
        known = t->Topic.len > 0 && t->Topic.len <= KB_TOPIC_NAME_MAX &&
                !memchr(t->Topic.ptr, '\0', (size_t)t->Topic.len);
        if (known) {
            memcpy(name, t->Topic.ptr, (size_t)t->Topic.len);
            name[t->Topic.len] = '\0';
            known = kb_meta_topic_by_name(el->meta, name, &info) == KB_META_OK;
        }
        for (int32_t k = 0; k < np; k++) {
            int16_t ec;
            if (!known) {
                snprintf(msg, sizeof(msg), "No such topic as %.*s",
                         t->Topic.len > 0 && t->Topic.len <= KB_TOPIC_NAME_MAX ? (int)t->Topic.len
                                                                               : 0,
                         t->Topic.ptr ? t->Topic.ptr : "");
                ec = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
            } else {
                ec = kb_ctrl_elect_one(el, &info, t->Partitions.v[k], rq->ElectionType,
                                       "ElectLeaders", msg, sizeof(msg));
            }
            if (!kb_ctrl_elect_add(ctx, tr, t->Partitions.v[k], ec, msg))
                return -1;
        }
    }
    return 0;
}

/* The host part of "1.2.3.4:5678" (NULL for an Envelope's inner request: only "*" ACLs match
 * there, the forwarding broker does not pass the client's address). */
static const char *kb_ctrl_elect_host(const kb_reqctx_t *ctx, char *buf, size_t size)
{
    const char *p = ctx->peer, *colon;
    size_t n;
    if (!p || !strncmp(p, "envelope ", 9))
        return NULL;
    colon = strrchr(p, ':');
    n = colon ? (size_t)(colon - p) : strlen(p);
    if (n >= 2 && p[0] == '[' && p[n - 1] == ']') {
        p++;
        n -= 2;
    }
    if (n >= size)
        return NULL;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

static bool kb_ctrl_elect_authorized(kb_ctrl_elector_t *el, const kb_reqctx_t *ctx)
{
#ifdef KB_HAVE_ACL
    kb_acl_t *acl = kb_acl_of(el->kb);
    char host[128];
    if (!acl || !kb_acl_enabled(acl))
        return true;
    /* Kafka's controller asks for ALTER on the cluster resource. */
    return kb_acl_authorize(acl, ctx->principal, kb_ctrl_elect_host(ctx, host, sizeof(host)),
                            KB_ACL_OP_ALTER, KB_ACL_RES_CLUSTER, "kafka-cluster");
#else
    (void)el;
    (void)ctx;
    (void)kb_ctrl_elect_host;
    return true;
#endif
}

kb_api_result_t kb_ctrl_elector_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_ctrl_elector_t *el = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_ElectLeadersRequest_t rq;
    kp_ElectLeadersResponse_t resp;
    kp_writer_t wr;
    char msg[160];
    int rc;

    if (!el || el->magic != KB_CTRL_ELECTOR_MAGIC)
        return KB_API_CLOSE;
    kp_ElectLeadersRequest_init(&rq);
    if (kp_ElectLeadersRequest_decode(&ctx->body, ctx->arena, &rq, ctx->api_version) != 0) {
        kb_log_info("ctrl", "%s: malformed ElectLeaders v%d: %s", ctx->peer, ctx->api_version,
                    ctx->body.errstr ? ctx->body.errstr : "?");
        return KB_API_CLOSE;
    }
    kp_ElectLeadersResponse_init(&resp);
    if (!kb_ctrl_elect_authorized(el, ctx)) {
        kb_log_info("ctrl", "%s: ElectLeaders refused: %s may not ALTER the cluster", ctx->peer,
                    ctx->principal ? ctx->principal : "?");
        rc = kb_ctrl_elect_fail_all(ctx, &rq, &resp, KP_ERR_CLUSTER_AUTHORIZATION_FAILED, NULL);
    } else if (!el->usable) {
        snprintf(msg, sizeof(msg),
                 "The controller (node %" PRId32 ") is not reachable; leader elections need it",
                 el->controller_id);
        rc = kb_ctrl_elect_fail_all(ctx, &rq, &resp, KP_ERR_NOT_CONTROLLER, msg);
    } else if (rq.ElectionType != KB_CTRL_ELECTION_PREFERRED &&
               rq.ElectionType != KB_CTRL_ELECTION_UNCLEAN) {
        snprintf(msg, sizeof(msg), "Unknown election type %d", (int)rq.ElectionType);
        rc = kb_ctrl_elect_fail_all(ctx, &rq, &resp, KP_ERR_INVALID_REQUEST, msg);
    } else if (rq.TopicPartitions.cnt < 0) {
        rc = kb_ctrl_elect_everything(el, ctx, rq.ElectionType, &resp);
    } else {
        rc = kb_ctrl_elect_listed(el, ctx, &rq, &resp);
    }
    if (rc != 0)
        return KB_API_CLOSE;
    kp_writer_init(&wr);
    if (kp_ElectLeadersResponse_encode(&wr, &resp, ctx->api_version) != 0) {
        kb_log_error("ctrl", "cannot encode ElectLeaders v%d", ctx->api_version);
        kp_writer_free(&wr);
        return KB_API_CLOSE;
    }
    *respp = kb_resp_from_writer(&wr);
    kp_writer_free(&wr);
    return *respp ? KB_API_RESPOND : KB_API_CLOSE;
}

/* ---- automatic rebalancing ------------------------------------------------------------------ */

int kb_ctrl_elector_tick(kb_ctrl_elector_t *el, int64_t now_ms)
{
    kb_topic_info_t *topics = NULL;
    size_t nt = 0;
    int changed = 0;
    bool more = false;
    int64_t interval_ms;
    char msg[512];

    if (!el || !el->usable)
        return 0;
    /* at most ~31 years: the key's range ends at INT64_MAX seconds */
    interval_ms = el->cfg->leader_imbalance_check_interval_seconds < KB_CTRL_ELECT_MAX_INTERVAL_S
                      ? el->cfg->leader_imbalance_check_interval_seconds * 1000
                      : KB_CTRL_ELECT_MAX_INTERVAL_S * 1000;
    if (el->next_check_ms < 0)
        el->next_check_ms = now_ms + interval_ms;
    if (now_ms < el->next_check_ms)
        return 0;
    el->next_check_ms = now_ms + interval_ms;
    if (kb_meta_topics(el->meta, &topics, &nt) != 0)
        return 0;
    for (size_t i = 0; i < nt && !more; i++) {
        int unclean = -1; /* the topic's setting, looked up once when needed */
        for (int32_t k = 0; k < topics[i].partitions; k++) {
            kb_meta_part_state_t st;
            kb_ctrl_part_t cur;
            int8_t type;
            if (changed >= KB_CTRL_ELECT_MAX_PER_PASS) {
                more = true;
                break;
            }
            if (kb_meta_part_state(el->meta, &topics[i].id, k, &st) != KB_META_OK)
                continue;
            kb_ctrl_part_load(&cur, &st);
            if (cur.leader < 0) {
                /* Kafka's controller also elects unclean leaders periodically where the
                 * topic allows it (e.g. after unclean.leader.election.enable was set). */
                if (unclean < 0)
                    unclean = kb_ctrl_elect_unclean_enabled(el->meta, el->cfg, topics[i].name);
                if (!unclean)
                    continue;
                type = KB_CTRL_ELECTION_UNCLEAN;
            } else if (el->cfg->auto_leader_rebalance_enable &&
                       kb_ctrl_elect_imbalanced(&cur, el->usable, el->opaque)) {
                type = KB_CTRL_ELECTION_PREFERRED;
            } else {
                continue;
            }
            if (kb_ctrl_elect_one(el, &topics[i], k, type,
                                  type == KB_CTRL_ELECTION_PREFERRED
                                      ? "automatic preferred leader rebalance"
                                      : "unclean.leader.election.enable",
                                  msg, sizeof(msg)) == 0)
                changed++;
        }
    }
    free(topics);
    if (more)
        el->next_check_ms = now_ms; /* the rest on the next tick */
    return changed;
}
