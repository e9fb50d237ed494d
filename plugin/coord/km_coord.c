#define KM_LOG_COMPONENT "kmirror.coord"
#include "coord/km_coord.h"

#include <stdio.h>
#include <string.h>

#include "core/km_plugin_types.h"
#include "util/km_log.h"
#include "util/km_mem.h"

#define KM_OP_MAGIC 0x4b4d4f50u /* "KMOP" */

typedef enum km_op_type {
    KM_OP_METADATA = 1,
    KM_OP_LEADERSHIP = 2,
    KM_OP_POST = 3,
} km_op_type_t;

struct km_op {
    uint32_t magic;
    km_op_type_t type;
    km_op_t *next;
    union {
        struct {
            bool snapshot;
            int64_t offset;
            uint32_t topics, configs, brokers, records;
        } md;
        struct {
            uint32_t count;
            uint32_t leaders;
        } lead;
        struct {
            km_coord_fn run;
            km_coord_fn drop;
            void *arg;
        } post;
    } u;
};

static void km_coord_op_free(km_plugin_t *cm, km_op_t *op)
{
    /* A posted closure that never ran (queue closed or torn down) is handed to its drop. */
    if (op->type == KM_OP_POST && op->u.post.run != NULL && op->u.post.drop != NULL)
        op->u.post.drop(cm, op->u.post.arg);
    op->magic = 0;
    km_free(cm, op);
}

bool km_coord_on_loop(const km_coord_t *coord)
{
    return coord->in_loop && pthread_equal(coord->loop_tid, pthread_self());
}

static void km_coord_op_run(km_coord_t *coord, km_op_t *op)
{
    km_plugin_t *cm = coord->cm;

    KM_CHECK_OBJ(cm, op, KM_OP_MAGIC);
    KM_DASSERT(cm, km_coord_on_loop(coord));
    switch (op->type) {
    case KM_OP_METADATA:
        coord->metadata_offset = op->u.md.offset;
        km_log_debug(cm,
                     "metadata %s at offset %lld: %u topics, %u configs, %u brokers, %u records",
                     op->u.md.snapshot ? "snapshot" : "delta", (long long)op->u.md.offset,
                     op->u.md.topics, op->u.md.configs, op->u.md.brokers, op->u.md.records);
        break;
    case KM_OP_LEADERSHIP:
        coord->leader_partitions_seen += op->u.lead.leaders;
        km_log_debug(cm, "leadership: %u changes, %u as leader", op->u.lead.count,
                     op->u.lead.leaders);
        break;
    case KM_OP_POST:
        op->u.post.run(cm, op->u.post.arg);
        op->u.post.run = NULL; /* ran: km_coord_op_free must not drop it */
        break;
    }
    coord->ops_done++;
    cm->ref.api->metric_record(cm->ref.host, coord->m_events, 1);
}

/* Take the whole queue; closing it when asked. */
static km_op_t *km_coord_take(km_coord_t *coord, bool close)
{
    km_op_t *ops;

    pthread_mutex_lock(&coord->lock);
    ops = coord->head;
    coord->head = NULL;
    coord->tail = &coord->head;
    coord->queued = 0;
    if (close)
        coord->closed = true;
    pthread_mutex_unlock(&coord->lock);
    return ops;
}

static void km_coord_drain(km_coord_t *coord, bool close)
{
    km_plugin_t *cm = coord->cm;
    km_op_t *op, *next;

    for (op = km_coord_take(coord, close); op != NULL; op = next) {
        next = op->next;
        km_coord_op_run(coord, op);
        km_coord_op_free(cm, op);
    }
    cm->ref.api->metric_record(cm->ref.host, coord->m_queue_size, 0);
}

/* The loop body; the host calls it until it returns KBX_THREAD_EXIT. */
static int32_t km_coord_loop(void *arg)
{
    km_coord_t *coord = arg;
    km_plugin_t *cm = coord->cm;
    uint64_t lost;

    KM_CHECK_PLUGIN(cm);
    KM_CHECK_OBJ(cm, coord, KM_COORD_MAGIC);
    coord->loop_tid = pthread_self();
    coord->in_loop = true;
    km_coord_drain(coord, false);
    lost = atomic_exchange(&coord->lost, 0);
    if (lost != 0) {
        /* TODO(resync): ask for a fresh metadata snapshot instead of only reporting. */
        km_log_error(cm, "%llu metadata events were lost (out of memory)",
                     (unsigned long long)lost);
    }
    if (atomic_load(&coord->stop)) {
        /* Close and drain again: nothing queued before the close is left behind. */
        km_coord_drain(coord, true);
        coord->in_loop = false;
        return KBX_THREAD_EXIT;
    }
    coord->in_loop = false;
    cm->ref.api->latch_wait(cm->ref.host, coord->latch, KM_COORD_TICK_MS);
    return KBX_THREAD_CONTINUE;
}

static km_err_t km_coord_push(km_coord_t *coord, km_op_t *op)
{
    km_plugin_t *cm = coord->cm;
    size_t queued;
    bool closed;

    pthread_mutex_lock(&coord->lock);
    closed = coord->closed;
    if (!closed) {
        *coord->tail = op;
        coord->tail = &op->next;
        queued = ++coord->queued;
    }
    pthread_mutex_unlock(&coord->lock);
    if (closed) {
        km_coord_op_free(cm, op);
        return KM_ERR_SHUTDOWN;
    }
    cm->ref.api->metric_record(cm->ref.host, coord->m_queue_size, (double)queued);
    cm->ref.api->latch_set(cm->ref.host, coord->latch);
    return KM_OK;
}

static km_op_t *km_coord_op_new(km_coord_t *coord, km_op_type_t type)
{
    km_op_t *op = km_calloc(coord->cm, 1, sizeof(*op));

    if (op == NULL) {
        atomic_fetch_add(&coord->lost, 1);
        return NULL;
    }
    op->magic = KM_OP_MAGIC;
    op->type = type;
    return op;
}

km_err_t km_coord_enqueue_metadata(km_coord_t *coord, const kbx_metadata_delta_t *delta)
{
    km_op_t *op = km_coord_op_new(coord, KM_OP_METADATA);

    if (op == NULL)
        return KM_ERR_NOMEM;
    op->u.md.snapshot = (delta->flags & KBX_DELTA_SNAPSHOT) != 0;
    op->u.md.offset = delta->metadata_offset;
    op->u.md.topics = delta->topic_count;
    op->u.md.configs = delta->config_count;
    op->u.md.brokers = delta->broker_count;
    op->u.md.records = delta->record_count;
    return km_coord_push(coord, op);
}

km_err_t km_coord_enqueue_leadership(km_coord_t *coord,
                                     const kbx_leadership_change_t *const *changes, uint32_t count)
{
    km_op_t *op = km_coord_op_new(coord, KM_OP_LEADERSHIP);
    uint32_t i;

    if (op == NULL)
        return KM_ERR_NOMEM;
    op->u.lead.count = count;
    for (i = 0; i < count; i++)
        if (changes[i]->struct_size >= offsetof(kbx_leadership_change_t, topic_id) &&
            changes[i]->role == KBX_ROLE_LEADER)
            op->u.lead.leaders++;
    return km_coord_push(coord, op);
}

km_err_t km_coord_post(km_coord_t *coord, km_coord_fn run, km_coord_fn drop, void *arg)
{
    km_op_t *op;

    if (run == NULL)
        return KM_ERR_INVALID;
    op = km_calloc(coord->cm, 1, sizeof(*op));
    if (op == NULL)
        return KM_ERR_NOMEM;
    op->magic = KM_OP_MAGIC;
    op->type = KM_OP_POST;
    op->u.post.run = run;
    op->u.post.drop = drop;
    op->u.post.arg = arg;
    /* On KM_ERR_SHUTDOWN km_coord_push frees the op, which hands arg to drop. */
    return km_coord_push(coord, op);
}

static km_err_t km_coord_metric(km_plugin_t *cm, int32_t type, const char *name, const char *help,
                                kbx_metric_t **out)
{
    static const char *const label_keys[] = {"component"};
    static const char *const label_values[] = {"coordinator"};
    kbx_metric_desc_t desc = {
        .struct_size = sizeof(desc),
        .type = type,
        .group = "kafka.server.mirror",
        .name = name,
        .help = help,
        .label_keys = label_keys,
        .label_values = label_values,
        .label_count = 1,
    };
    int32_t rc = cm->ref.api->metric_register(cm->ref.host, &desc, out);

    if (rc == KBX_ERR_NOMEM)
        return KM_ERR_NOMEM;
    return rc == KBX_OK ? KM_OK : KM_ERR_HOST;
}

km_err_t km_coord_start(km_plugin_t *cm, km_coord_t *coord, char *errstr, size_t errstr_size)
{
    const kbx_api_t *api = cm->ref.api;
    kbx_host_t *host = cm->ref.host;
    const char *what;
    km_err_t err;
    int32_t rc;

    memset(coord, 0, sizeof(*coord));
    coord->cm = cm;
    coord->tail = &coord->head;
    atomic_init(&coord->stop, 0);
    atomic_init(&coord->lost, 0);

    what = "metric CoordinatorQueueSize";
    err = km_coord_metric(cm, KBX_METRIC_GAUGE, "CoordinatorQueueSize",
                          "Ops waiting for the mirror coordinator", &coord->m_queue_size);
    if (err != KM_OK)
        goto fail;
    what = "metric CoordinatorEventsTotal";
    err = km_coord_metric(cm, KBX_METRIC_COUNTER, "CoordinatorEventsTotal",
                          "Ops the mirror coordinator has processed", &coord->m_events);
    if (err != KM_OK)
        goto unregister_queue_metric;
    what = "latch";
    rc = api->latch_create(host, &coord->latch);
    if (rc != KBX_OK) {
        err = rc == KBX_ERR_NOMEM ? KM_ERR_NOMEM : KM_ERR_HOST;
        goto unregister_events_metric;
    }
    what = "lock";
    if (pthread_mutex_init(&coord->lock, NULL) != 0) {
        err = KM_ERR_NOMEM;
        goto destroy_latch;
    }
    coord->lock_ready = true;
    coord->magic = KM_COORD_MAGIC;
    what = "coordinator thread";
    rc = api->thread_start(host, "kmirror-coord", km_coord_loop, coord, &coord->thread);
    if (rc != KBX_OK) {
        err = rc == KBX_ERR_NOMEM ? KM_ERR_NOMEM : KM_ERR_HOST;
        goto destroy_lock;
    }
    return KM_OK;

destroy_lock:
    coord->magic = 0;
    coord->lock_ready = false;
    pthread_mutex_destroy(&coord->lock);
destroy_latch:
    api->latch_destroy(host, coord->latch);
    coord->latch = NULL;
unregister_events_metric:
    api->metric_unregister(host, coord->m_events);
    coord->m_events = NULL;
unregister_queue_metric:
    api->metric_unregister(host, coord->m_queue_size);
    coord->m_queue_size = NULL;
fail:
    snprintf(errstr, errstr_size, "cannot create the coordinator's %s: %s", what, km_err_str(err));
    return err;
}

void km_coord_stop(km_coord_t *coord)
{
    km_plugin_t *cm = coord->cm;

    KM_CHECK_OBJ(cm, coord, KM_COORD_MAGIC);
    KM_BUG_ON(cm, km_coord_on_loop(coord));
    if (coord->thread == NULL)
        return; /* stopped already */
    atomic_store(&coord->stop, 1);
    cm->ref.api->latch_set(cm->ref.host, coord->latch);
    if (cm->ref.api->thread_join(cm->ref.host, coord->thread) != KBX_OK)
        km_log_error(cm, "joining the coordinator thread failed");
    coord->thread = NULL;
}

void km_coord_destroy(km_coord_t *coord)
{
    km_plugin_t *cm = coord->cm;
    km_op_t *op, *next;

    if (coord->magic != KM_COORD_MAGIC)
        return;
    KM_BUG_ON(cm, coord->thread != NULL);
    for (op = km_coord_take(coord, true); op != NULL; op = next) {
        next = op->next;
        km_coord_op_free(cm, op);
    }
    pthread_mutex_destroy(&coord->lock);
    coord->lock_ready = false;
    cm->ref.api->latch_destroy(cm->ref.host, coord->latch);
    coord->latch = NULL;
    cm->ref.api->metric_unregister(cm->ref.host, coord->m_events);
    coord->m_events = NULL;
    cm->ref.api->metric_unregister(cm->ref.host, coord->m_queue_size);
    coord->m_queue_size = NULL;
    coord->magic = 0;
}
