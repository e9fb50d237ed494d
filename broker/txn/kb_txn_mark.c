/*
 * kb_txn_mark.c -- the transaction marker channel (Kafka's TransactionMarkerChannelManager, in
 * a simpler form): COMMIT / ABORT markers of partitions led by other brokers go to their leader
 * in WriteTxnMarkers (27) over one kc_ client (proto/client; one connection, hence one queue,
 * per destination broker), driven by a thread of its own. The leader comes from the metadata
 * image (kb_meta_part_state), its endpoint on the inter-broker listener from the cluster's
 * registered brokers (kb_apisvc_cluster). A marker whose leader is unknown, unreachable or
 * answers a retriable error is retried by the coordinator's timer (the transaction stays in its
 * Prepare state), so a leader change is followed through the metadata.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kb_apilog.h"
#include "kb_time.h"
#include "kb_txn_int.h"
#include "kc_client.h"
#include "kp_errcode.h"

struct kb_txn_mark_s {
    kb_txn_t *c;
    kc_client_t *kc;
    pthread_t thr;
    bool thr_started;
    pthread_mutex_t mu; /**< stop; the waiters below */
    pthread_cond_t cv;
    bool stop;
    char listener[64];
};

typedef struct kb_txn_mark_wait_s {
    kb_txn_mark_t *m;
    bool done;
    int16_t err;
    const char *topic;
    int32_t partition;
} kb_txn_mark_wait_t;

static void kb_txn_mark_log(void *opaque, int level, const char *msg)
{
    (void)opaque;
    if (level <= KC_LOG_WARN)
        kb_log_warn("txn", "marker channel: %s", msg);
    else
        kb_log_debug("txn", "marker channel: %s", msg);
}

static void *kb_txn_mark_thread(void *arg)
{
    kb_txn_mark_t *m = arg;
    for (;;) {
        bool stop;
        pthread_mutex_lock(&m->mu);
        stop = m->stop;
        pthread_mutex_unlock(&m->mu);
        if (stop)
            break;
        kc_client_poll(m->kc, 200);
    }
    return NULL;
}

kb_txn_mark_t *kb_txn_mark_new(kb_txn_t *c)
{
    kb_txn_mark_t *m = calloc(1, sizeof(*m));
    const kb_config_t *cfg = c->cfg;
    pthread_condattr_t ca;
    kc_opts_t o;
    char err[256], cid[64];
    if (!m)
        return NULL;
    m->c = c;
    snprintf(m->listener, sizeof(m->listener), "%s",
             cfg->inter_broker_listener_name && cfg->inter_broker_listener_name[0]
                 ? cfg->inter_broker_listener_name
             : cfg->lst_cnt ? cfg->lst[0].name
                            : "PLAINTEXT");
    snprintf(cid, sizeof(cid), "kbroker-%" PRId32 "-txn-markers", kb_meta_node_id(c->meta));
    kc_opts_init(&o);
    o.client_id = cid;
    o.log_cb = kb_txn_mark_log;
    o.log_level = KC_LOG_WARN;
    o.connect_timeout_ms = c->marker_timeout_ms;
    o.reconnect_backoff_max_ms = 1000;
    if (!(m->kc = kc_client_new(&o, err, sizeof(err)))) {
        kb_log_error("txn", "cannot create the marker channel: %s", err);
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&m->thr, NULL, kb_txn_mark_thread, m) != 0) {
        kb_txn_mark_free(m);
        return NULL;
    }
    m->thr_started = true;
    return m;
}

void kb_txn_mark_free(kb_txn_mark_t *m)
{
    if (!m)
        return;
    if (m->thr_started) {
        pthread_mutex_lock(&m->mu);
        m->stop = true;
        pthread_mutex_unlock(&m->mu);
        kc_client_wakeup(m->kc);
        pthread_join(m->thr, NULL);
    }
    kc_client_destroy(m->kc); /* calls back what is pending (KC_E_DESTROYED) */
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* kc_resp_cb_t: the partition's error from the WriteTxnMarkers answer (one marker, one
 * partition); transport errors and undecodable answers are retriable. */
static void kb_txn_mark_done(kc_client_t *kc, int err, int16_t ver, const uint8_t *body, size_t len,
                             void *opaque)
{
    kb_txn_mark_wait_t *w = opaque;
    int16_t ec = KP_ERR_NOT_LEADER_OR_FOLLOWER;
    (void)kc;
    if (err == KC_E_OK) {
        kp_arena_t ar;
        kp_reader_t rd;
        kp_WriteTxnMarkersResponse_t r;
        kp_arena_init(&ar, 1 << 20);
        kp_reader_init(&rd, body, len);
        kp_WriteTxnMarkersResponse_init(&r);
        if (kp_WriteTxnMarkersResponse_decode(&rd, &ar, &r, ver) == 0 && r.Markers.cnt == 1 &&
            r.Markers.v[0].Topics.cnt == 1 && r.Markers.v[0].Topics.v[0].Partitions.cnt == 1)
            ec = r.Markers.v[0].Topics.v[0].Partitions.v[0].ErrorCode;
        else
            kb_log_warn("txn", "undecodable WriteTxnMarkers v%d answer for %s-%" PRId32, ver,
                        w->topic, w->partition);
        kp_arena_free(&ar);
    } else {
        kb_log_info("txn", "WriteTxnMarkers for %s-%" PRId32 ": %s", w->topic, w->partition,
                    kc_err_str(err));
    }
    pthread_mutex_lock(&w->m->mu);
    w->err = ec;
    w->done = true;
    pthread_cond_broadcast(&w->m->cv);
    pthread_mutex_unlock(&w->m->mu);
}

/* The leader of @p topic-@p partition and its inter-broker endpoint. 0, or a Kafka error:
 * UNKNOWN_TOPIC_OR_PARTITION (gone from the image), NOT_LEADER_OR_FOLLOWER (no leader, this
 * node, or no endpoint known yet: retried). */
static int16_t kb_txn_mark_leader(kb_txn_mark_t *m, const char *topic, int32_t partition,
                                  int32_t *leader)
{
    kb_txn_t *c = m->c;
    kb_topic_info_t ti;
    kb_meta_part_state_t st;
    kb_cluster_node_t *nodes = NULL;
    size_t n = 0;
    int32_t ctrl;
    int16_t ec = KP_ERR_NOT_LEADER_OR_FOLLOWER;
    if (kb_meta_topic_by_name(c->meta, topic, &ti) != 0 ||
        kb_meta_part_state(c->meta, &ti.id, partition, &st) != KB_META_OK)
        return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    if (st.leader < 0 || st.leader == kb_meta_node_id(c->meta))
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    if (kb_apisvc_cluster(c->svc, m->listener, false, &nodes, &n, &ctrl) != 0)
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    for (size_t i = 0; i < n; i++) {
        if (nodes[i].id == st.leader && !nodes[i].fenced && nodes[i].port > 0) {
            if (kc_client_node_set(m->kc, st.leader, nodes[i].host, nodes[i].port) == 0) {
                *leader = st.leader;
                ec = KP_ERR_NONE;
            }
            break;
        }
    }
    free(nodes);
    return ec;
}

int16_t kb_txn_mark_remote(kb_txn_mark_t *m, const char *topic, int32_t partition, int64_t pid,
                           int16_t epoch, int32_t coord_epoch, bool commit)
{
    kp_WriteTxnMarkersRequest_t rq;
    kp_WriteTxnMarkersRequest_WritableTxnMarker_t mk;
    kp_WriteTxnMarkersRequest_WritableTxnMarkerTopic_t tp;
    kb_txn_mark_wait_t w = {.m = m, .topic = topic, .partition = partition};
    int32_t leader = -1, pi = partition;
    int64_t id;
    int16_t ec;
    if (!m)
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    if ((ec = kb_txn_mark_leader(m, topic, partition, &leader)))
        return ec;
    kp_WriteTxnMarkersRequest_init(&rq);
    kp_WriteTxnMarkersRequest_WritableTxnMarker_init(&mk);
    kp_WriteTxnMarkersRequest_WritableTxnMarkerTopic_init(&tp);
    tp.Name = (kp_str_t){topic, (int32_t)strlen(topic)};
    tp.PartitionIndexes.cnt = 1;
    tp.PartitionIndexes.v = &pi;
    mk.ProducerId = pid;
    mk.ProducerEpoch = epoch;
    mk.TransactionResult = commit;
    mk.CoordinatorEpoch = coord_epoch;
    mk.Topics.cnt = 1;
    mk.Topics.v = &tp;
    rq.Markers.cnt = 1;
    rq.Markers.v = &mk;
    id = kc_request_msg(m->kc, leader, &kp_WriteTxnMarkersRequest_desc, -1, &rq,
                        m->c->marker_timeout_ms, 0, kb_txn_mark_done, &w);
    if (id < 0)
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    /* the callback comes exactly once (at the latest at the request's timeout, or at destroy) */
    pthread_mutex_lock(&m->mu);
    while (!w.done)
        pthread_cond_wait(&m->cv, &m->mu);
    pthread_mutex_unlock(&m->mu);
    /* The leader's UNKNOWN_TOPIC_OR_PARTITION may be metadata it has not applied yet: retried
     * as long as the topic is in this node's image (Kafka's marker handler does the same). */
    if (w.err == KP_ERR_UNKNOWN_TOPIC_OR_PARTITION || w.err == KP_ERR_NOT_ENOUGH_REPLICAS ||
        w.err == KP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND || w.err == KP_ERR_REQUEST_TIMED_OUT ||
        w.err == KP_ERR_KAFKA_STORAGE_ERROR)
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    if (!w.err)
        kb_log_debug(
            "txn", "%s marker of producer %" PRId64 " written to %s-%" PRId32 " by broker %" PRId32,
            commit ? "COMMIT" : "ABORT", pid, topic, partition, leader);
    return w.err;
}
