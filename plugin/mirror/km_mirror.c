/*
 * km_mirror.c - the MirrorMetadataManager binding: km_mpart's ops bound to the state module,
 * the fetcher manager, the catalog and the host (see km_mirror.h).
 */
#define KM_LOG_COMPONENT "kmirror.mirror"

#include "mirror/km_mirror.h"

#include <stdio.h>
#include <string.h>

#include "catalog/km_catalog.h"
#include "core/km_plugin_types.h"
#include "fetch/km_fetch.h"
#include "kp_errcode.h"
#include "rpc/km_lme.h"
#include "state/km_state.h"
#include "util/km_log.h"
#include "util/km_mem.h"

#define KM_MIRROR_MAGIC    0x4b4d4d52u /* "KMMR" */
#define KM_MIRROR_FP_MAGIC 0x4b4d4650u /* "KMFP" */

/* One partition handed to the fetcher. */
struct km_mirror_fp {
    uint32_t magic;
    km_mirror_fp_t *next;
    km_mirror_t *mm;
    kbx_uuid_t topic_id;
    int32_t partition;
    km_fetch_part_t *fpart; /* NULL once removed */
    bool removing;
    uint64_t remove_token; /* the machine's token for the removal completion */
};

/* A state-store or lookup completion on its way to the machine. */
typedef struct km_mirror_req {
    kbx_uuid_t topic_id;
    int32_t partition;
    uint64_t token;
    km_err_t err;
    int32_t lme_epoch;
    int64_t lme_offset;
} km_mirror_req_t;

static km_mirror_t *km_mirror_of(km_plugin_t *cm)
{
    return &cm->mirror;
}

km_mpart_mgr_t *km_mirror_mgr(km_plugin_t *cm)
{
    return cm->mirror.mgr;
}

static km_mirror_req_t *km_mirror_req_new(km_plugin_t *cm, const km_mpart_id_t *id, uint64_t token)
{
    km_mirror_req_t *rq = km_calloc(cm, 1, sizeof(*rq));

    if (rq == NULL)
        return NULL;
    rq->topic_id = id->topic_id;
    rq->partition = id->partition;
    rq->token = token;
    return rq;
}

static void km_mirror_req_drop(km_plugin_t *cm, void *arg)
{
    km_free(cm, arg);
}

/* ---- state store ------------------------------------------------------------------------- */

static void km_mirror_read_done(km_plugin_t *cm, void *arg, int16_t err, const char *msg,
                                const km_state_pstate_t *st)
{
    km_mirror_req_t *rq = arg;
    km_mpart_mgr_t *mgr = cm->mirror.mgr;
    km_mpart_rec_t rec;

    if (mgr == NULL)
        goto out;
    if (err != 0 || st == NULL) {
        km_log_info(cm, "partition %d: state read failed (error %d: %s)", (int)rq->partition,
                    (int)err, msg != NULL ? msg : "");
        km_mpart_state_loaded(mgr, &rq->topic_id, rq->partition, rq->token, KM_ERR_HOST, NULL);
        goto out;
    }
    if (st->state == KP_PSTATE_UNKNOWN && st->state_epoch == 0) {
        km_mpart_state_loaded(mgr, &rq->topic_id, rq->partition, rq->token, KM_OK, NULL);
        goto out;
    }
    memset(&rec, 0, sizeof(rec));
    rec.state = st->state;
    rec.previous_state = st->previous_state;
    rec.non_retryable = st->retry_attempt < 0;
    rec.retry_attempt = st->retry_attempt < 0 ? 0 : st->retry_attempt;
    rec.state_epoch = st->state_epoch;
    rec.leader_epoch = st->leader_epoch;
    rec.lme_epoch = st->lme_epoch;
    rec.lme_offset = st->lme_offset;
    rec.update_time_ms = -1;
    if (st->error_message != NULL)
        snprintf(rec.error, sizeof(rec.error), "%s", st->error_message);
    km_mpart_state_loaded(mgr, &rq->topic_id, rq->partition, rq->token, KM_OK, &rec);
out:
    km_free(cm, rq);
}

static km_err_t km_mirror_state_read(void *ctx, const km_mpart_id_t *id, uint64_t token)
{
    km_mirror_t *mm = ctx;
    km_mirror_req_t *rq = km_mirror_req_new(mm->cm, id, token);
    km_err_t err;

    if (rq == NULL)
        return KM_ERR_NOMEM;
    err = km_state_read(mm->cm, id->mirror, id->topic, &id->topic_id, id->partition,
                        km_mirror_read_done, rq);
    if (err != KM_OK)
        km_free(mm->cm, rq);
    return err;
}

static void km_mirror_write_done(km_plugin_t *cm, void *arg, int16_t err, const char *msg,
                                 int32_t state_epoch)
{
    km_mirror_req_t *rq = arg;
    km_mpart_mgr_t *mgr = cm->mirror.mgr;

    if (mgr != NULL) {
        if (err != 0)
            km_log_info(cm, "partition %d: state write refused (error %d: %s)", (int)rq->partition,
                        (int)err, msg != NULL ? msg : "");
        km_mpart_state_written(mgr, &rq->topic_id, rq->partition, rq->token,
                               err != 0 ? KM_ERR_HOST : KM_OK, err != 0 ? -1 : state_epoch);
    }
    km_free(cm, rq);
}

static km_err_t km_mirror_state_write(void *ctx, const km_mpart_id_t *id, const km_mpart_rec_t *rec,
                                      bool write_lme, uint64_t token)
{
    km_mirror_t *mm = ctx;
    km_mirror_req_t *rq = km_mirror_req_new(mm->cm, id, token);
    km_state_pwrite_t w;
    km_err_t err;

    if (rq == NULL)
        return KM_ERR_NOMEM;
    km_state_pwrite_init(&w);
    w.state = rec->state;
    w.non_retryable = rec->non_retryable;
    w.leader_epoch = rec->leader_epoch;
    /* The state epoch the machine last saw: the store fences on it. */
    w.state_epoch = rec->state_epoch > 0 ? rec->state_epoch - 1 : -1;
    w.lme_epoch = rec->lme_epoch;
    w.lme_offset = rec->lme_offset;
    w.retry_attempt = rec->retry_attempt;
    if (rec->error[0] != '\0') {
        w.error_message.ptr = rec->error;
        w.error_message.len = (int32_t)strlen(rec->error);
    } else {
        w.error_message.ptr = NULL;
        w.error_message.len = -1;
    }
    (void)write_lme; /* the LME lives in the partition state record */
    err = km_state_write(mm->cm, id->mirror, id->topic, &id->topic_id, id->partition, &w,
                         km_mirror_write_done, rq);
    if (err != KM_OK)
        km_free(mm->cm, rq);
    return err;
}

/* ---- fetcher ------------------------------------------------------------------------------- */

static km_mirror_fp_t *km_mirror_fp_find(km_mirror_t *mm, const kbx_uuid_t *id, int32_t partition)
{
    km_mirror_fp_t *fp;

    for (fp = mm->fps; fp != NULL; fp = fp->next)
        if (fp->partition == partition && memcmp(&fp->topic_id, id, sizeof(*id)) == 0)
            return fp;
    return NULL;
}

static void km_mirror_fp_free(km_mirror_t *mm, km_mirror_fp_t *fp)
{
    km_mirror_fp_t **pp;

    for (pp = &mm->fps; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == fp) {
            *pp = fp->next;
            break;
        }
    }
    fp->magic = 0;
    km_free(mm->cm, fp);
}

static km_err_t km_mirror_fetch_add(void *ctx, const km_mpart_id_t *id, int32_t leader_epoch,
                                    int64_t fetch_offset)
{
    km_mirror_t *mm = ctx;
    km_mirror_fp_t *fp = km_mirror_fp_find(mm, &id->topic_id, id->partition);
    km_fetch_part_spec_t spec;
    km_err_t err;

    if (mm->fm == NULL)
        return KM_ERR_SHUTDOWN;
    if (fp != NULL && fp->removing)
        return KM_ERR_INVALID; /* retried by the machine once the removal completed */
    if (fp != NULL)            /* held or paused: take the new position and epoch */
        return km_fetch_partition_resume(mm->fm, fp->fpart, leader_epoch);
    fp = km_calloc(mm->cm, 1, sizeof(*fp));
    if (fp == NULL)
        return KM_ERR_NOMEM;
    fp->magic = KM_MIRROR_FP_MAGIC;
    fp->mm = mm;
    fp->topic_id = id->topic_id;
    fp->partition = id->partition;
    memset(&spec, 0, sizeof(spec));
    spec.mirror = id->mirror;
    /* A mirror topic has the source topic's name and id (CreateTopics v8 MirrorInfo). */
    spec.source_topic = id->topic;
    spec.source_topic_id = id->topic_id;
    spec.partition = id->partition;
    spec.dest_topic_id = id->topic_id;
    spec.dest_leader_epoch = leader_epoch;
    spec.fetch_offset = fetch_offset;
    spec.last_fetched_epoch = -1;
    spec.opaque = fp;
    err = km_fetch_partition_add(mm->fm, &spec, &fp->fpart);
    if (err != KM_OK) {
        km_log_warn(mm->cm, "%s-%d of mirror %s: fetcher refused the partition (%s)", id->topic,
                    (int)id->partition, id->mirror, km_err_str(err));
        fp->magic = 0;
        km_free(mm->cm, fp);
        return err;
    }
    fp->next = mm->fps;
    mm->fps = fp;
    return KM_OK;
}

static void km_mirror_fp_removed(km_plugin_t *cm, void *arg)
{
    km_mirror_fp_t *fp = arg;
    km_mirror_t *mm = fp->mm;
    kbx_uuid_t id = fp->topic_id;
    int32_t partition = fp->partition;
    uint64_t token = fp->remove_token;

    km_mirror_fp_free(mm, fp);
    if (mm->mgr != NULL && token != 0)
        km_mpart_fetch_removed(mm->mgr, &id, partition, token);
}

/* A removal of a partition the fetcher does not have: completes on the loop (never inside the
 * machine's call). */
static void km_mirror_removed_now(km_plugin_t *cm, void *arg)
{
    km_mirror_req_t *rq = arg;

    if (cm->mirror.mgr != NULL)
        km_mpart_fetch_removed(cm->mirror.mgr, &rq->topic_id, rq->partition, rq->token);
    km_free(cm, rq);
}

static km_err_t km_mirror_fetch_remove(void *ctx, const km_mpart_id_t *id, uint64_t token)
{
    km_mirror_t *mm = ctx;
    km_mirror_fp_t *fp = km_mirror_fp_find(mm, &id->topic_id, id->partition);
    km_mirror_req_t *rq;
    km_err_t err;

    if (fp != NULL) {
        fp->remove_token = token; /* the newest asker is the one waiting */
        if (fp->removing)
            return KM_OK;
        err = km_fetch_partition_remove(mm->fm, fp->fpart, km_mirror_fp_removed, fp);
        if (err != KM_OK)
            return err;
        fp->removing = true;
        return KM_OK;
    }
    if (token == 0)
        return KM_OK;
    rq = km_mirror_req_new(mm->cm, id, token);
    if (rq == NULL)
        return KM_ERR_NOMEM;
    err = km_coord_post(&mm->cm->coord, km_mirror_removed_now, km_mirror_req_drop, rq);
    return err == KM_ERR_NOMEM ? (km_free(mm->cm, rq), KM_ERR_NOMEM) : err;
}

static bool km_mirror_fetch_status(void *ctx, const km_mpart_id_t *id, km_mpart_fstatus_t *out)
{
    km_mirror_t *mm = ctx;
    km_mirror_fp_t *fp = km_mirror_fp_find(mm, &id->topic_id, id->partition);
    km_fetch_status_t st;

    if (fp == NULL || fp->removing || mm->fm == NULL)
        return false;
    km_fetch_partition_status(mm->fm, fp->fpart, &st);
    memset(out, 0, sizeof(*out));
    out->source_hw = st.high_watermark;
    out->fetch_offset = st.fetch_offset;
    out->lag = st.lag;
    out->retries = st.retries;
    out->last_fetch_ms = st.last_append_ms; /* -1 until the first append */
    snprintf(out->error, sizeof(out->error), "%s", st.error);
    return true;
}

/* Source errors that mean the source topic is gone or another one, the source is another
 * cluster, or a source the fetcher cannot serve (no request version in common, record batches of
 * magic 0/1; design M93): not retryable (an operator fixes the cause, then --recover). */
bool km_mirror_fatal_retryable(int16_t code)
{
    return code != KP_ERR_UNKNOWN_TOPIC_OR_PARTITION && code != KP_ERR_UNKNOWN_TOPIC_ID &&
           code != KP_ERR_INCONSISTENT_TOPIC_ID && code != KP_ERR_INCONSISTENT_CLUSTER_ID &&
           code != KP_ERR_UNSUPPORTED_VERSION && code != KP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT;
}

static void km_mirror_on_fetch_event(km_plugin_t *cm, void *opaque, const km_fetch_event_t *ev)
{
    km_mirror_fp_t *fp = opaque;
    km_mirror_t *mm = km_mirror_of(cm);
    km_mpart_fevent_t fe;

    if (fp == NULL || fp->magic != KM_MIRROR_FP_MAGIC || fp->removing || mm->mgr == NULL)
        return;
    memset(&fe, 0, sizeof(fe));
    fe.offset = -1;
    switch (ev->type) {
    case KM_FETCH_EV_APPENDED:
        fe.kind = KM_MPART_FEV_PROGRESS;
        break;
    case KM_FETCH_EV_DIVERGED:
        fe.kind = KM_MPART_FEV_DIVERGED;
        fe.offset = ev->end_offset;
        break;
    case KM_FETCH_EV_EPOCH_EXCEEDED:
        fe.kind = KM_MPART_FEV_EPOCH_EXCEEDED;
        fe.epoch = ev->epoch;
        break;
    case KM_FETCH_EV_FATAL:
        fe.kind = KM_MPART_FEV_FATAL;
        fe.offset = ev->offset;
        fe.retryable = km_mirror_fatal_retryable(ev->error_code);
        fe.message = ev->message;
        break;
    case KM_FETCH_EV_TRANSIENT:
        fe.kind = KM_MPART_FEV_TRANSIENT;
        fe.message = ev->message;
        break;
    default: /* FENCED: the leadership change reaches the machine through the catalog */
        return;
    }
    km_mpart_fetch_event(mm->mgr, &fp->topic_id, fp->partition, &fe);
}

/* ---- LME lookup ----------------------------------------------------------------------------- */

static void km_mirror_lme_now(km_plugin_t *cm, void *arg)
{
    km_mirror_req_t *rq = arg;

    if (cm->mirror.mgr != NULL)
        km_mpart_lme_done(cm->mirror.mgr, &rq->topic_id, rq->partition, rq->token, rq->err,
                          rq->lme_epoch, rq->lme_offset, -1);
    km_free(cm, rq);
}

/* Result of a batched lookup (rpc/km_lme.c), on the loop. */
static void km_mirror_lme_result(km_plugin_t *cm, const kbx_uuid_t *topic_id, int32_t partition,
                                 uint64_t token, int kind, int32_t epoch, int64_t offset,
                                 int32_t peer_epoch, const char *msg)
{
    km_mpart_mgr_t *mgr = cm->mirror.mgr;

    if (mgr == NULL)
        return;
    switch (kind) {
    case KM_LME_ANSWER:
        km_mpart_lme_done(mgr, topic_id, partition, token, KM_OK, epoch, offset, peer_epoch);
        break;
    case KM_LME_LOOP:
        km_mpart_lme_loop(mgr, topic_id, partition, token, msg);
        break;
    default:
        km_log_debug(cm, "partition %d: LME lookup: %s", (int)partition, msg != NULL ? msg : "");
        km_mpart_lme_done(mgr, topic_id, partition, token, KM_ERR_HOST, -1, -1, -1);
        break;
    }
}

/*
 * The failback lookup: an empty local log needs no LME ("none" is exact, and a source without
 * the mirror APIs, e.g. a plain Kafka cluster, can be mirrored); a log with data asks the
 * source (DescribeMirrors with the lookup fields, batched per mirror by rpc/km_lme.c) and
 * stays PREPARING until it answered.
 */
static km_err_t km_mirror_lme_lookup(void *ctx, const km_mpart_id_t *id, uint64_t token)
{
    km_mirror_t *mm = ctx;
    const kbx_api_t *api = mm->cm->ref.api;
    kbx_log_offsets_t o = {.struct_size = sizeof(o)};
    kbx_partition_t *part = NULL;
    km_mirror_req_t *rq;
    bool empty = false;
    km_err_t err;

    if (api->partition_acquire(mm->cm->ref.host, &id->topic_id, id->partition, -1, &part) ==
        KBX_OK) {
        empty = api->log_offsets(mm->cm->ref.host, part, &o) == KBX_OK &&
                o.log_end_offset == o.log_start_offset;
        api->partition_release(mm->cm->ref.host, part);
    }
    if (!empty) {
        if (mm->lme == NULL)
            return KM_ERR_NOMEM;
        return km_lme_lookup(mm->lme, id->mirror, id->topic, &id->topic_id, id->partition, token);
    }
    rq = km_mirror_req_new(mm->cm, id, token);
    if (rq == NULL)
        return KM_ERR_NOMEM;
    rq->lme_epoch = -1;
    rq->lme_offset = -1;
    rq->err = KM_OK;
    err = km_coord_post(&mm->cm->coord, km_mirror_lme_now, km_mirror_req_drop, rq);
    return err == KM_ERR_NOMEM ? (km_free(mm->cm, rq), KM_ERR_NOMEM) : err;
}

static km_err_t km_mirror_post(void *ctx, km_coord_fn run, km_coord_fn drop, void *arg)
{
    km_mirror_t *mm = ctx;

    return km_coord_post(&mm->cm->coord, run, drop, arg);
}

static const km_mpart_ops_t km_mirror_ops = {
    .state_read = km_mirror_state_read,
    .state_write = km_mirror_state_write,
    .fetch_add = km_mirror_fetch_add,
    .fetch_remove = km_mirror_fetch_remove,
    .fetch_status = km_mirror_fetch_status,
    .lme_lookup = km_mirror_lme_lookup,
    .post = km_mirror_post,
    .crash = NULL,
};

/* ---- catalog --------------------------------------------------------------------------------- */

static int32_t km_mirror_desired(km_desired_t d)
{
    switch (d) {
    case KM_DESIRED_PAUSED:
        return KM_MPART_WANT_PAUSED;
    case KM_DESIRED_STOPPED:
        return KM_MPART_WANT_STOPPED;
    default:
        return KM_MPART_WANT_RUNNING;
    }
}

/* Bring partition p of topic in line with the catalog: lead it, or let it go. */
static void km_mirror_sync_partition(km_mirror_t *mm, const km_cat_topic_t *topic, int32_t p)
{
    const km_cat_part_t *cp = p < topic->nparts ? &topic->parts[p] : NULL;
    const km_mirror_def_t *def;
    km_mpart_lead_t l;

    if (mm->mgr == NULL)
        return;
    if (topic->mirror == NULL || topic->desired == KM_DESIRED_NONE || cp == NULL ||
        cp->role != KBX_ROLE_LEADER || p >= topic->partition_count) {
        km_mpart_resign(mm->mgr, &topic->id, p);
        atomic_store(&mm->nparts, (unsigned)km_mpart_mgr_count(mm->mgr));
        return;
    }
    def = km_catalog_mirror_find(&mm->cm->catalog, topic->mirror);
    memset(&l, 0, sizeof(l));
    l.id.mirror = topic->mirror;
    l.id.topic = topic->name;
    l.id.topic_id = topic->id;
    l.id.partition = p;
    l.leader_epoch = cp->leader_epoch;
    l.desired = km_mirror_desired(topic->desired);
    l.unclean_election = topic->unclean_election;
    l.source_cluster_id = def != NULL ? def->source_cluster_id : NULL;
    if (km_mpart_lead(mm->mgr, &l) != KM_OK) {
        km_log_warn(mm->cm, "%s-%d of mirror %s: cannot start its state machine (retried)",
                    topic->name, (int)p, topic->mirror);
        atomic_store(&mm->resync, true);
    }
    atomic_store(&mm->nparts, (unsigned)km_mpart_mgr_count(mm->mgr));
}

static void km_mirror_resync_topic(void *arg, const km_cat_topic_t *topic)
{
    int32_t p;

    if (topic->mirror == NULL)
        return;
    for (p = 0; p < topic->nparts && p < topic->partition_count; p++)
        km_mirror_sync_partition(arg, topic, p);
}

static void km_mirror_on_partition(void *arg, const km_cat_topic_t *topic, int32_t partition,
                                   const km_cat_part_t *old_part)
{
    km_mirror_sync_partition(arg, topic, partition);
}

static void km_mirror_on_topic(void *arg, const km_cat_topic_t *topic, const char *old_mirror,
                               km_desired_t old_desired)
{
    int32_t p, n = topic->nparts > topic->partition_count ? topic->nparts : topic->partition_count;

    for (p = 0; p < n; p++)
        km_mirror_sync_partition(arg, topic, p);
}

static void km_mirror_on_mirror(void *arg, const char *name, const km_mirror_def_t *def)
{
    km_mirror_t *mm = arg;
    km_mirror_config_t conf;
    char err[256] = "";

    if (mm->fm == NULL)
        return;
    if (def == NULL) {
        km_fetch_mirror_remove(mm->fm, name);
        return;
    }
    /* The fetcher checks every Metadata answer against the cluster id CreateMirror resolved
     * (the definition's; the conf's source.cluster.id was checked equal to it). */
    conf = def->conf;
    if (def->source_cluster_id != NULL && def->source_cluster_id[0] != '\0')
        conf.source_cluster_id = def->source_cluster_id;
    if (km_fetch_mirror_set(mm->fm, name, &conf, err, sizeof(err)) != KM_OK)
        km_log_error(mm->cm, "mirror %s: its source connection is refused: %s", name, err);
}

static const km_catalog_ops_t km_mirror_catalog_ops = {
    .on_mirror = km_mirror_on_mirror,
    .on_topic = km_mirror_on_topic,
    .on_partition = km_mirror_on_partition,
};

/* ---- metrics --------------------------------------------------------------------------------- */

/* Partitions per state, the KIP's gauge names (LogTruncation = PREPARING); NULL: no gauge. */
static const char *const km_mirror_state_gauges[KM_MPART_NSTATES] = {
    [KM_MPART_PREPARING + 1] = "LogTruncationPartitionState",
    [KM_MPART_EPOCH_FENCING + 1] = "EpochFencingPartitionState",
    [KM_MPART_MIRRORING + 1] = "MirroringPartitionState",
    [KM_MPART_PAUSING + 1] = "PausingPartitionState",
    [KM_MPART_PAUSED + 1] = "PausedPartitionState",
    [KM_MPART_STOPPING + 1] = "StoppingPartitionState",
    [KM_MPART_STOPPED + 1] = "StoppedPartitionState",
    [KM_MPART_FAILED + 1] = "FailedPartitionState",
};

_Static_assert(sizeof(((km_mirror_t *)0)->m_states) / sizeof(kbx_metric_t *) == KM_MPART_NSTATES,
               "one gauge slot per state");

static km_err_t km_mirror_metrics_start(km_mirror_t *mm)
{
    kbx_metric_desc_t desc;
    int i;

    for (i = 0; i < KM_MPART_NSTATES; i++) {
        if (km_mirror_state_gauges[i] == NULL)
            continue;
        memset(&desc, 0, sizeof(desc));
        desc.struct_size = sizeof(desc);
        desc.type = KBX_METRIC_GAUGE;
        desc.group = "kafka.server.mirror";
        desc.name = km_mirror_state_gauges[i];
        desc.help = "mirror partitions led by this broker in this state";
        if (mm->cm->ref.api->metric_register(mm->cm->ref.host, &desc, &mm->m_states[i]) != KBX_OK) {
            mm->m_states[i] = NULL;
            return KM_ERR_HOST;
        }
    }
    return KM_OK;
}

static void km_mirror_metrics_stop(km_mirror_t *mm)
{
    int i;

    for (i = 0; i < KM_MPART_NSTATES; i++) {
        if (mm->m_states[i] != NULL)
            mm->cm->ref.api->metric_unregister(mm->cm->ref.host, mm->m_states[i]);
        mm->m_states[i] = NULL;
    }
}

static void km_mirror_metrics_update(km_mirror_t *mm)
{
    uint32_t counts[KM_MPART_NSTATES];
    int i;

    km_mpart_mgr_state_counts(mm->mgr, counts);
    for (i = 0; i < KM_MPART_NSTATES; i++)
        if (mm->m_states[i] != NULL)
            mm->cm->ref.api->metric_record(mm->cm->ref.host, mm->m_states[i], counts[i]);
}

/* ---- tick ------------------------------------------------------------------------------------ */

static void km_mirror_tick_run(km_plugin_t *cm, void *arg)
{
    km_mirror_t *mm = km_mirror_of(cm);

    atomic_store(&mm->tick_queued, false);
    if (mm->mgr == NULL)
        return;
    if (atomic_exchange(&mm->resync, false))
        km_catalog_topic_foreach(&cm->catalog, km_mirror_resync_topic, mm);
    km_mpart_mgr_tick(mm->mgr);
    if (++mm->ticks % (1000 / KM_MIRROR_TICK_MS) == 0)
        km_mirror_metrics_update(mm);
}

static void km_mirror_tick_drop(km_plugin_t *cm, void *arg)
{
    atomic_store(&km_mirror_of(cm)->tick_queued, false);
}

/* Host timer thread: only posts (at most one tick queued). */
static void km_mirror_tick_fire(void *arg)
{
    km_mirror_t *mm = arg;

    if ((atomic_load(&mm->nparts) == 0 && !atomic_load(&mm->resync)) ||
        atomic_exchange(&mm->tick_queued, true))
        return;
    if (km_coord_post(&mm->cm->coord, km_mirror_tick_run, km_mirror_tick_drop, NULL) ==
        KM_ERR_NOMEM)
        atomic_store(&mm->tick_queued, false);
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

km_err_t km_mirror_start(km_plugin_t *cm, char *errstr, size_t errstr_size)
{
    km_mirror_t *mm = km_mirror_of(cm);
    km_fetch_opts_t fo;
    km_mpart_opts_t mo;
    int32_t rc;

    memset(mm, 0, sizeof(*mm));
    mm->magic = KM_MIRROR_MAGIC;
    mm->cm = cm;
    atomic_init(&mm->tick_queued, false);
    atomic_init(&mm->nparts, 0);
    atomic_init(&mm->resync, false);
    memset(&fo, 0, sizeof(fo));
    fo.on_event = km_mirror_on_fetch_event;
    fo.poll_ms = 100;
    mm->fm = km_fetch_mgr_create(cm, &fo, errstr, errstr_size);
    if (mm->fm == NULL)
        return KM_ERR_HOST;
    km_mpart_opts_from_plugin(cm, &mo);
    mm->lme = km_lme_new(cm, km_mirror_lme_result);
    if (mm->lme == NULL) {
        snprintf(errstr, errstr_size, "out of memory (LME lookups)");
        goto fail;
    }
    mm->mgr = km_mpart_mgr_new(cm, &km_mirror_ops, mm, &mo);
    if (mm->mgr == NULL) {
        snprintf(errstr, errstr_size, "out of memory (partition state machines)");
        goto fail;
    }
    if (km_mirror_metrics_start(mm) != KM_OK) {
        snprintf(errstr, errstr_size, "cannot register the partition state gauges");
        goto fail;
    }
    if (km_catalog_subscribe(&cm->catalog, &km_mirror_catalog_ops, mm) != KM_OK) {
        snprintf(errstr, errstr_size, "cannot subscribe to the catalog");
        goto fail;
    }
    rc = cm->ref.api->timer_start(cm->ref.host, KM_MIRROR_TICK_MS, KM_MIRROR_TICK_MS,
                                  km_mirror_tick_fire, mm, &mm->timer);
    if (rc != KBX_OK) {
        mm->timer = NULL;
        snprintf(errstr, errstr_size, "cannot start the mirror tick timer: host error %d", (int)rc);
        goto fail;
    }
    mm->started = true;
    return KM_OK;
fail:
    km_mirror_metrics_stop(mm);
    km_lme_free(mm->lme);
    mm->lme = NULL;
    km_mpart_mgr_free(mm->mgr);
    mm->mgr = NULL;
    km_fetch_mgr_destroy(mm->fm);
    mm->fm = NULL;
    return KM_ERR_HOST;
}

void km_mirror_stop(km_plugin_t *cm)
{
    km_mirror_t *mm = km_mirror_of(cm);

    if (mm->timer != NULL)
        cm->ref.api->timer_cancel(cm->ref.host, mm->timer);
    mm->timer = NULL;
}

void km_mirror_destroy(km_plugin_t *cm)
{
    km_mirror_t *mm = km_mirror_of(cm);
    kbx_latch_t *latch = NULL;
    km_mpart_mgr_t *mgr = mm->mgr;
    int i;

    if (mm->magic != KM_MIRROR_MAGIC)
        return;
    km_mirror_stop(cm);
    km_mirror_metrics_stop(mm);
    /* The fetcher's threads are joined; its pending completions are dropped. */
    km_fetch_mgr_destroy(mm->fm);
    mm->fm = NULL;
    while (mm->fps != NULL)
        km_mirror_fp_free(mm, mm->fps);
    km_lme_free(mm->lme);
    mm->lme = NULL;
    mm->mgr = NULL;
    if (mgr != NULL) {
        /* Host operations (epoch bumps, ISR waits) still running call back into the manager:
         * wait for them (their completions are dropped by the closed queue), bounded. */
        if (km_mpart_mgr_inflight(mgr) != 0 &&
            cm->ref.api->latch_create(cm->ref.host, &latch) == KBX_OK) {
            for (i = 0; i < 600 && km_mpart_mgr_inflight(mgr) != 0; i++)
                cm->ref.api->latch_wait(cm->ref.host, latch, 100);
            cm->ref.api->latch_destroy(cm->ref.host, latch);
        }
        if (km_mpart_mgr_inflight(mgr) != 0)
            km_log_error(cm,
                         "%u host operations of the partition state machines never "
                         "completed; their memory is left behind",
                         (unsigned)km_mpart_mgr_inflight(mgr));
        else
            km_mpart_mgr_free(mgr);
    }
    mm->magic = 0;
}
