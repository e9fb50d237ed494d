/*
 * km_sync_topics.c - topic discovery, the KM_SYNC_TOPICS kind of the metadata sync
 * (docs/plugin.md "Topic discovery", docs/design.md M77-M80).
 *
 * One run, on the mirror's coordinator broker, on the coordinator loop:
 *   1. Metadata (every topic) from the source through the source admin client;
 *   2. per source topic: selected by topics.include / topics.exclude? what does the destination
 *      catalog hold under that name? -> km_sync_topics_decide();
 *   3. the topics to create go to this broker's own StartMirrorTopics handler (km_rpc_internal:
 *      the same plan, CreateTopics v8 with MirrorInfo, chunking and read-your-writes wait as an
 *      operator's --start), so they start mirroring like any started topic; the topics to grow
 *      get one CreatePartitions (kbx local_request) up to the source's count, and their new
 *      partitions start mirroring when their leaders learn them (catalog -> state machines);
 *   4. every other finding is reported with km_sync_run_error() and left alone.
 * Both requests of step 3 run side by side; the run ends when both answered.
 */
#define KM_LOG_COMPONENT "kmirror.sync"
#include "sync/km_sync_topics.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "catalog/km_catalog.h"
#include "core/km_plugin_types.h"
#include "kp_arena.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "rpc/km_rpc.h"
#include "rpc/km_srcadm.h"
#include "sync/km_sync.h"
#include "util/km_log.h"
#include "util/km_mem.h"
#include "util/km_pattern.h"

/* CreatePartitions: v2 is served by every Kafka since 2.0 and by kbroker (0-3). */
#define KM_DISC_CP_VERSION 2
/* How long the destination may take to create topics and partitions (ms). */
#define KM_DISC_TIMEOUT_MS 30000

typedef struct km_disc {
    km_plugin_t *cm;
    km_sync_run_t *run; /* not touched once dead */
    kp_arena_t ar;      /* the requests and names */
    int pending;        /* requests out (answers still to come) */
    bool dead;          /* shutdown seen off the loop: the run is not touched any more */
} km_disc_t;

static void km_disc_free(km_disc_t *d)
{
    km_plugin_t *cm = d->cm;

    kp_arena_free(&d->ar);
    km_free(cm, d);
}

/* One request answered (or never sent): the run ends with the last one. */
static void km_disc_step_done(km_disc_t *d)
{
    if (--d->pending > 0)
        return;
    if (!d->dead)
        km_sync_run_done(d->run);
    km_disc_free(d);
}

static void km_disc_uuid_str(const kbx_uuid_t *id, char *buf, size_t size)
{
    size_t n = 0;

    for (int i = 0; i < 16 && n + 2 < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%02x", id->bytes[i]);
}

static kp_str_t km_disc_str(km_disc_t *d, const char *s)
{
    kp_str_t k = {NULL, -1};
    size_t n = strlen(s);
    char *p = kp_arena_alloc(&d->ar, n + 1);

    if (p != NULL) {
        memcpy(p, s, n + 1);
        k.ptr = p;
        k.len = (int32_t)n;
    }
    return k;
}

/* ---- the answers ---------------------------------------------------------------------------- */

static void km_disc_on_start(km_plugin_t *cm, void *arg, int32_t status, const uint8_t *body,
                             size_t len)
{
    km_disc_t *d = arg;
    km_sync_run_t *run = d->run;
    kp_StartMirrorTopicsResponse_t resp;
    kp_reader_t rd;

    if (status == KBX_ERR_SHUTDOWN) {
        d->dead = true; /* possibly off the loop: only d */
        km_disc_step_done(d);
        return;
    }
    kp_StartMirrorTopicsResponse_init(&resp);
    if (status == KBX_OK) {
        kp_reader_init(&rd, body, len);
        if (kp_StartMirrorTopicsResponse_decode(&rd, &d->ar, &resp, 0) != 0)
            status = KBX_ERR_INVALID;
    }
    if (status != KBX_OK) {
        km_sync_run_error(run, NULL,
                          "creating the discovered topics failed: no answer from the "
                          "StartMirrorTopics handler (host status %d)",
                          (int)status);
        km_disc_step_done(d);
        return;
    }
    if (resp.ErrorCode != 0) {
        km_sync_run_error(run, NULL, "creating the discovered topics failed: %s: %.*s",
                          kp_errcode_name(resp.ErrorCode),
                          resp.ErrorMessage.len > 0 ? (int)resp.ErrorMessage.len : 0,
                          resp.ErrorMessage.ptr != NULL ? resp.ErrorMessage.ptr : "");
        km_disc_step_done(d);
        return;
    }
    for (int32_t i = 0; i < resp.Topics.cnt; i++) {
        const kp_StartMirrorTopicsResponse_TopicResult_t *r = &resp.Topics.v[i];
        char name[256];

        snprintf(name, sizeof(name), "%.*s", r->TopicName.len > 0 ? (int)r->TopicName.len : 0,
                 r->TopicName.ptr != NULL ? r->TopicName.ptr : "");
        if (r->ErrorCode != 0)
            km_sync_run_error(run, name, "discovered on the source, but not created here: %s: %.*s",
                              kp_errcode_name(r->ErrorCode),
                              r->ErrorMessage.len > 0 ? (int)r->ErrorMessage.len : 0,
                              r->ErrorMessage.ptr != NULL ? r->ErrorMessage.ptr : "");
        else
            km_log_info(cm,
                        "mirror %s: discovery created mirror topic %s (source topic id and "
                        "partition count); it starts mirroring",
                        run->mirror, name);
    }
    km_disc_step_done(d);
}

static void km_disc_on_grow(km_plugin_t *cm, void *arg, int32_t status, const uint8_t *body,
                            size_t len)
{
    km_disc_t *d = arg;
    km_sync_run_t *run = d->run;
    kp_CreatePartitionsResponse_t resp;
    kp_reader_t rd;

    if (status == KBX_ERR_SHUTDOWN) {
        d->dead = true;
        km_disc_step_done(d);
        return;
    }
    kp_CreatePartitionsResponse_init(&resp);
    if (status == KBX_OK) {
        kp_reader_init(&rd, body, len);
        if (kp_CreatePartitionsResponse_decode(&rd, &d->ar, &resp, KM_DISC_CP_VERSION) != 0)
            status = KBX_ERR_INVALID;
    }
    if (status != KBX_OK) {
        km_sync_run_error(run, NULL, "CreatePartitions on this cluster failed (host status %d)",
                          (int)status);
        km_disc_step_done(d);
        return;
    }
    for (int32_t i = 0; i < resp.Results.cnt; i++) {
        const kp_CreatePartitionsResponse_CreatePartitionsTopicResult_t *r = &resp.Results.v[i];
        char name[256];

        snprintf(name, sizeof(name), "%.*s", r->Name.len > 0 ? (int)r->Name.len : 0,
                 r->Name.ptr != NULL ? r->Name.ptr : "");
        if (r->ErrorCode != 0)
            km_sync_run_error(run, name,
                              "the source topic has more partitions; adding them here failed: "
                              "%s: %.*s",
                              kp_errcode_name(r->ErrorCode),
                              r->ErrorMessage.len > 0 ? (int)r->ErrorMessage.len : 0,
                              r->ErrorMessage.ptr != NULL ? r->ErrorMessage.ptr : "");
        else
            km_log_info(cm,
                        "mirror %s: discovery added partitions to %s (the source's count); "
                        "they start mirroring",
                        run->mirror, name);
    }
    km_disc_step_done(d);
}

/* ---- the plan ------------------------------------------------------------------------------- */

/* Report a finding that leaves the topic alone. */
static void km_disc_report(km_sync_run_t *run, km_disc_action_t a, const km_srcadm_topic_t *s,
                           const km_cat_topic_t *t, bool selected)
{
    char sid[40] = "", did[40] = "";

    switch (a) {
    case KM_DISC_ID_CHANGED:
        /* Short: the message is kept whole only up to the status's last_error (256 bytes). */
        km_disc_uuid_str(&s->id, sid, sizeof(sid));
        km_disc_uuid_str(&t->id, did, sizeof(did));
        km_sync_run_error(run, s->name,
                          "re-created on the source (id %s, was %s): delete it here to mirror "
                          "the new topic%s; until then its old data stays read-only",
                          sid, did,
                          selected ? " (the next run creates it)" : ", then start it again");
        break;
    case KM_DISC_LOCAL:
        km_sync_run_error(run, s->name,
                          "selected, but a topic of this name that is not a mirror topic exists "
                          "here: left alone (delete or rename it, or exclude it)");
        break;
    case KM_DISC_NO_ID:
        km_sync_run_error(run, s->name,
                          "selected, but the source gives no topic id (Kafka before 2.8): not "
                          "mirrored");
        break;
    case KM_DISC_MORE_PARTS:
        km_sync_run_error(run, s->name,
                          "%" PRId32 " partitions here, %" PRId32 " on the source: the ones "
                          "beyond the source's are not mirrored",
                          t->partition_count, s->partitions);
        break;
    default:
        break;
    }
}

/* Compile a filter ("" or NULL: none). false: reported. */
static bool km_disc_compile(km_sync_run_t *run, const char *what, const char *re,
                            km_pattern_t **out)
{
    char err[256];

    *out = NULL;
    if (re == NULL || re[0] == '\0')
        return true;
    if (km_pattern_compile(run->cm, re, strlen(re), out, err, sizeof(err)) == KM_OK)
        return true;
    km_sync_run_error(run, NULL, "the mirror's %s does not compile: %s", what, err);
    return false;
}

static void km_disc_on_source(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res)
{
    km_disc_t *d = arg;
    km_sync_run_t *run = d->run;
    const km_mirror_def_t *def;
    km_pattern_t *inc = NULL, *exc = NULL;
    kp_StartMirrorTopicsRequest_t start;
    kp_CreatePartitionsRequest_t grow;
    size_t ncreate = 0, ngrow = 0;
    km_err_t e;

    if (res->err == KM_ERR_SHUTDOWN) {
        d->dead = true; /* possibly off the loop: only d */
        km_disc_step_done(d);
        return;
    }
    def = km_sync_run_def(run);
    if (km_sync_run_cancelled(run) || def == NULL) {
        km_disc_step_done(d);
        return;
    }
    if (res->err != KM_OK) {
        km_sync_run_error(run, NULL, "cannot list the topics of the source cluster: %s",
                          res->errmsg);
        km_disc_step_done(d);
        return;
    }
    if (!km_disc_compile(run, "topics.include", def->conf.topics_include, &inc) ||
        !km_disc_compile(run, "topics.exclude", def->conf.topics_exclude, &exc)) {
        km_pattern_free(inc);
        km_disc_step_done(d);
        return;
    }
    kp_StartMirrorTopicsRequest_init(&start);
    kp_CreatePartitionsRequest_init(&grow);
    start.Topics.v = kp_arena_calloc(&d->ar, res->ntopics + 1, sizeof(*start.Topics.v));
    grow.Topics.v = kp_arena_calloc(&d->ar, res->ntopics + 1, sizeof(*grow.Topics.v));
    if (start.Topics.v == NULL || grow.Topics.v == NULL) {
        km_sync_run_error(run, NULL, "out of memory");
        goto out;
    }
    for (size_t k = 0; k < res->ntopics; k++) {
        const km_srcadm_topic_t *s = &res->topics[k];
        const km_cat_topic_t *t;
        bool selected = false;
        km_disc_action_t a;

        if (s->name == NULL || s->error_code != 0 || s->internal)
            continue;
        if (inc != NULL) {
            e = km_pattern_select(&inc, 1, &exc, exc != NULL ? 1 : 0, s->name, &selected);
            if (e != KM_OK) {
                km_sync_run_error(run, s->name, "the topic filters cannot be matched: %s",
                                  e == KM_ERR_LIMIT ? "a pattern hit its match limit"
                                                    : km_err_str(e));
                selected = false;
            }
        }
        t = km_catalog_topic_find(&cm->catalog, s->name);
        a = km_sync_topics_decide(s, selected, t, run->mirror);
        if (a == KM_DISC_CREATE) {
            kp_StartMirrorTopicsRequest_TopicMetadata_t *m = &start.Topics.v[ncreate++];
            kp_StartMirrorTopicsRequest_TopicMetadata_init(m);
            m->TopicName = km_disc_str(d, s->name);
            memcpy(m->TopicId.b, s->id.bytes, 16);
            m->NumPartitions = s->partitions;
            km_log_info(cm,
                        "mirror %s: discovery: source topic %s (%" PRId32 " partitions) is "
                        "new here",
                        run->mirror, s->name, s->partitions);
        } else if (a == KM_DISC_GROW) {
            kp_CreatePartitionsRequest_CreatePartitionsTopic_t *g = &grow.Topics.v[ngrow++];
            kp_CreatePartitionsRequest_CreatePartitionsTopic_init(g);
            g->Name = km_disc_str(d, s->name);
            g->Count = s->partitions;
            g->Assignments.cnt = -1; /* placed by the controller */
            km_log_info(cm,
                        "mirror %s: discovery: source topic %s has %" PRId32
                        " partitions, this cluster %" PRId32,
                        run->mirror, s->name, s->partitions, t->partition_count);
        } else {
            km_disc_report(run, a, s, t, selected);
        }
    }
    if (ncreate > 0) {
        start.MirrorName = km_disc_str(d, run->mirror);
        start.Topics.cnt = (int32_t)ncreate;
        start.IncludePatterns.cnt = 0;
        start.ExcludePatterns.cnt = 0;
        start.TimeoutMs = KM_DISC_TIMEOUT_MS;
        d->pending++;
        e = km_rpc_internal(cm, 95, &start, &kp_StartMirrorTopicsRequest_desc, km_disc_on_start, d);
        if (e != KM_OK) {
            d->pending--;
            km_sync_run_error(run, NULL, "cannot create the %zu discovered topic(s): %s", ncreate,
                              km_err_str(e));
        }
    }
    if (ngrow > 0) {
        grow.Topics.cnt = (int32_t)ngrow;
        grow.TimeoutMs = KM_DISC_TIMEOUT_MS;
        grow.ValidateOnly = false;
        d->pending++;
        e = km_rpc_host_request(cm, 37, KM_DISC_CP_VERSION, &grow, &kp_CreatePartitionsRequest_desc,
                                km_disc_on_grow, d);
        if (e != KM_OK) {
            d->pending--;
            km_sync_run_error(run, NULL, "cannot add partitions to %zu topic(s): %s", ngrow,
                              km_err_str(e));
        }
    }
out:
    km_pattern_free(inc);
    km_pattern_free(exc);
    km_disc_step_done(d); /* the source query's own step */
}

/* ---- the entry point ------------------------------------------------------------------------ */

void km_sync_topics_run(km_sync_run_t *run)
{
    km_plugin_t *cm = run->cm;
    const km_mirror_def_t *def = km_sync_run_def(run);
    km_disc_t *d;
    km_err_t e;

    /* Discovery has no final sync (topics given) and remembers nothing: only the mirror
     * coordinator's periodic runs do it. */
    if (run->topics != NULL || !run->persist || def == NULL || km_sync_run_cancelled(run)) {
        km_sync_run_done(run);
        return;
    }
    if (!def->conf_ok) {
        km_sync_run_error(run, NULL, "this broker cannot read the mirror's configuration");
        km_sync_run_done(run);
        return;
    }
    d = km_calloc(cm, 1, sizeof(*d));
    if (d == NULL) {
        km_sync_run_error(run, NULL, "out of memory");
        km_sync_run_done(run);
        return;
    }
    d->cm = cm;
    d->run = run;
    d->pending = 1; /* the source query */
    kp_arena_init(&d->ar, 0);
    e = km_srcadm_metadata(cm->rpc.srcadm, &def->conf.bootstrap_servers, true,
                           def->conf.request_timeout_ms, km_disc_on_source, d);
    if (e != KM_OK) {
        if (e != KM_ERR_SHUTDOWN)
            km_sync_run_error(run, NULL, "cannot query the source cluster: %s", km_err_str(e));
        km_disc_step_done(d);
    }
}
