/*
 * sync_core_test.c - the metadata sync scheduler (plugin/sync/km_sync.c) against the fake
 * host, with fake kinds and a fake coordinator decision (km_sync_set_hooks): only the mirror's
 * coordinator runs, each kind on its own interval (0 = off), due at once when this broker
 * becomes the coordinator, at most one run per (mirror, kind) in flight, a kick runs the kinds
 * at once (also one that arrives while a run is in flight, and a topic that becomes RUNNING),
 * cancellation on mirror deletion / loss of the coordinator / deadline / plugin stop, failed
 * items counted in the status, final syncs completing, timing out and completing when there is
 * nothing to run; StopMirrorTopics waiting for its final sync; the status in DescribeMirrors
 * (on the coordinator only, taken from the coordinator's fan-out leg elsewhere); nothing left
 * behind after fini.
 */
#include <stdlib.h>
#include <string.h>

#include "catalog/km_catalog.h"
#include "core/km_plugin.h"
#include "core/km_plugin_types.h"
#include "fakehost.h"
#include "fh_cunit.h"
#include "kp_msgs.h"
#include "sync/km_sync.h"
#include "sync/km_sync_int.h"
#include "util/km_mem.h"

static const uint8_t SC_MID[16] = {0x5c, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static const kbx_uuid_t SC_T1 = {{0x5c, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};

#define SC_MAX_RUNS 64

/* The fake kinds: every run is recorded; with sc_hold it stays open until the test ends it. */
static struct {
    bool coord;
    bool hold;
    int calls[KM_SYNC_NKINDS];
    km_sync_run_t *open[SC_MAX_RUNS];
    int nopen;
    bool last_persist;
    size_t last_ntopics;
    char last_topic[64];
} sc;

typedef struct sc_env {
    fakehost_t *fh;
    void *ctx;
    km_plugin_t *cm;
} sc_env_t;

static bool sc_is_coord(const km_plugin_t *cm, const char *mirror)
{
    (void)cm;
    return sc.coord && strcmp(mirror, "m1") == 0;
}

static void sc_kind(km_sync_run_t *run)
{
    sc.calls[run->kind]++;
    sc.last_persist = run->persist;
    sc.last_ntopics = run->ntopics;
    sc.last_topic[0] = '\0';
    if (run->ntopics > 0)
        snprintf(sc.last_topic, sizeof(sc.last_topic), "%s", run->topics[0]);
    if (!sc.hold) {
        km_sync_run_done(run);
        return;
    }
    CU_ASSERT_FATAL(sc.nopen < SC_MAX_RUNS);
    sc.open[sc.nopen++] = run;
}

/* End the open run i (as the kind's last continuation would). */
static void sc_finish(sc_env_t *e, int i)
{
    km_sync_run_t *run = sc.open[i];

    memmove(&sc.open[i], &sc.open[i + 1], (size_t)(sc.nopen - i - 1) * sizeof(sc.open[0]));
    sc.nopen--;
    km_sync_run_done(run);
    fakehost_run_until_idle(e->fh);
}

static int sc_find_open(km_sync_kind_t kind)
{
    for (int i = 0; i < sc.nopen; i++)
        if (sc.open[i]->kind == kind)
            return i;
    return -1;
}

/* stop.sync.timeout.ms of the mirrors sc_publish_def defines. */
static const char *sc_stop_ms = "2000";

static void sc_publish_def(sc_env_t *e, const char *name, const char *groups_ms)
{
    const char *keys[] = {"bootstrap.servers", "sync.topic.configs.interval.ms",
                          "sync.group.offsets.interval.ms", "sync.acls.interval.ms",
                          "stop.sync.timeout.ms"};
    const char *values[] = {"127.0.0.1:1", "1000", groups_ms, "3000", sc_stop_ms};
    uint8_t *val = NULL;
    size_t len = 0;

    CU_ASSERT_EQUAL_FATAL(
        km_catalog_def_encode(e->cm, SC_MID, 5, "src-id", keys, values, 5, &val, &len), KM_OK);
    {
        kbx_record_t r = {
            sizeof(r), KM_CATALOG_RECORD_MIRROR, (const uint8_t *)name, strlen(name), val, len};
        const kbx_record_t *rv[] = {&r};
        kbx_metadata_delta_t d = {.struct_size = sizeof(d), .records = rv, .record_count = 1};
        fakehost_publish_delta(e->fh, &d);
    }
    km_free(e->cm, val);
    fakehost_run_until_idle(e->fh);
}

static void sc_delete_def(sc_env_t *e, const char *name)
{
    kbx_record_t r = {
        sizeof(r), KM_CATALOG_RECORD_MIRROR, (const uint8_t *)name, strlen(name), NULL, 0};
    const kbx_record_t *rv[] = {&r};
    kbx_metadata_delta_t d = {.struct_size = sizeof(d), .records = rv, .record_count = 1};

    fakehost_publish_delta(e->fh, &d);
    fakehost_run_until_idle(e->fh);
}

/* Topic orders of mirror m1 with mirror.name = value (first call creates it). */
static void sc_topic(sc_env_t *e, const char *value, bool create)
{
    kbx_topic_change_t t = {sizeof(t), KBX_TOPIC_CREATED, SC_T1, "orders", 1, 0};
    const kbx_topic_change_t *tv[] = {&t};
    kbx_config_change_t c = {sizeof(c), 2, "orders", "mirror.name", value};
    const kbx_config_change_t *cv[] = {&c};
    kbx_metadata_delta_t d = {.struct_size = sizeof(d),
                              .topics = tv,
                              .configs = cv,
                              .topic_count = create ? 1 : 0,
                              .config_count = 1};

    fakehost_publish_delta(e->fh, &d);
    fakehost_run_until_idle(e->fh);
}

static void sc_start(sc_env_t *e, const char *groups_ms)
{
    km_sync_hooks_t hooks = {.is_coordinator = sc_is_coord,
                             .run = {sc_kind, sc_kind, sc_kind, sc_kind}};
    char err[256];

    memset(&sc, 0, sizeof(sc));
    e->fh = fakehost_new(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e->fh);
    fakehost_config_set(e->fh, "mirror.enable", "true");
    fakehost_config_set(e->fh, "mirror.metadata.refresh.interval.ms", "2000");
    CU_ASSERT_EQUAL_FATAL(kbx_plugin_entry()->init(fakehost_api(e->fh), fakehost_host(e->fh),
                                                   &e->ctx, err, sizeof(err)),
                          0);
    e->cm = e->ctx;
    /* Everything runs on this thread (fakehost): no tick has run yet. */
    km_sync_set_hooks(e->cm, &hooks);
    fakehost_run_until_idle(e->fh);
    sc_publish_def(e, "m1", groups_ms);
    sc_topic(e, "m1", true);
}

static void sc_stop(sc_env_t *e)
{
    kbx_plugin_entry()->fini(e->ctx);
    fh_cunit_assert_clean(e->fh);
    fakehost_free(e->fh);
}

static void sc_advance(sc_env_t *e, int64_t ms)
{
    fakehost_advance_ms(e->fh, ms);
    fakehost_run_until_idle(e->fh);
}

/* Only the coordinator runs; intervals per kind; due at once on becoming coordinator. */
static void sc_test_intervals(void)
{
    sc_env_t e;
    km_sync_status_t st;

    sc_start(&e, "0");
    sc_advance(&e, 5000);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_TOPICS] + sc.calls[KM_SYNC_CONFIGS] +
                        sc.calls[KM_SYNC_GROUPS] + sc.calls[KM_SYNC_ACLS],
                    0);
    CU_ASSERT_FALSE(km_sync_status(e.cm, "m1", KM_SYNC_CONFIGS, &st));

    sc.coord = true;
    sc_advance(&e, KM_SYNC_TICK_MS);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_TOPICS], 1);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_CONFIGS], 1);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_GROUPS], 0); /* interval 0: off */
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_ACLS], 1);
    CU_ASSERT_TRUE(sc.last_persist);
    CU_ASSERT_EQUAL(sc.last_ntopics, 0);

    /* 6 s more: configs every 1 s, topics every 2 s, acls every 3 s (each measured from the
     * end of the previous run, the tick rounding up by at most one tick). */
    sc_advance(&e, 6000);
    CU_ASSERT_TRUE(sc.calls[KM_SYNC_CONFIGS] >= 6 && sc.calls[KM_SYNC_CONFIGS] <= 7);
    CU_ASSERT_TRUE(sc.calls[KM_SYNC_TOPICS] >= 3 && sc.calls[KM_SYNC_TOPICS] <= 4);
    CU_ASSERT_TRUE(sc.calls[KM_SYNC_ACLS] >= 2 && sc.calls[KM_SYNC_ACLS] <= 3);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_GROUPS], 0);

    CU_ASSERT_TRUE_FATAL(km_sync_status(e.cm, "m1", KM_SYNC_CONFIGS, &st));
    CU_ASSERT_TRUE(st.enabled);
    CU_ASSERT_EQUAL(st.runs, (uint64_t)sc.calls[KM_SYNC_CONFIGS]);
    CU_ASSERT_EQUAL(st.errors, 0);
    CU_ASSERT_TRUE(st.last_success_ms > 0);
    CU_ASSERT_EQUAL(st.last_error_ms, -1);
    CU_ASSERT_TRUE_FATAL(km_sync_status(e.cm, "m1", KM_SYNC_GROUPS, &st));
    CU_ASSERT_FALSE(st.enabled);
    CU_ASSERT_EQUAL(st.runs, 0);

    /* Not the coordinator any more: nothing runs; again: all due at once. */
    sc.coord = false;
    sc_advance(&e, KM_SYNC_TICK_MS);
    memset(sc.calls, 0, sizeof(sc.calls));
    sc_advance(&e, 5000);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_CONFIGS] + sc.calls[KM_SYNC_TOPICS] + sc.calls[KM_SYNC_ACLS],
                    0);
    sc.coord = true;
    sc_advance(&e, KM_SYNC_TICK_MS);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_CONFIGS], 1);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_TOPICS], 1);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_ACLS], 1);
    /* A mirror this broker does not coordinate has no status. */
    CU_ASSERT_FALSE(km_sync_status(e.cm, "nope", KM_SYNC_CONFIGS, &st));
    sc_stop(&e);
}

/* One run per (mirror, kind) in flight; a kick during it runs again right after it; the
 * deadline cancels; failed items are counted and kept as the last error. */
static void sc_test_inflight_kick(void)
{
    sc_env_t e;
    km_sync_status_t st;
    int i;

    sc_start(&e, "0");
    sc.coord = true;
    sc.hold = true;
    sc_advance(&e, KM_SYNC_TICK_MS);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_CONFIGS], 1);
    sc_advance(&e, 10000);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_CONFIGS], 1); /* still in flight */
    CU_ASSERT_EQUAL(km_sync_inflight(e.cm, "m1"), 3);
    i = sc_find_open(KM_SYNC_CONFIGS);
    CU_ASSERT_FATAL(i >= 0);
    CU_ASSERT_FALSE(km_sync_run_cancelled(sc.open[i]));
    CU_ASSERT_PTR_NOT_NULL(km_sync_run_def(sc.open[i]));
    km_sync_run_error(sc.open[i], "orders", "DescribeConfigs failed: %s", "TIMEOUT");
    km_sync_run_error(sc.open[i], NULL, "second");
    km_sync_run_error(sc.open[i], "orders2", "third");

    km_sync_kick(e.cm, "m1");
    sc_advance(&e, KM_SYNC_TICK_MS);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_CONFIGS], 1); /* the kick waits for the run */
    sc_finish(&e, i);
    CU_ASSERT_TRUE_FATAL(km_sync_status(e.cm, "m1", KM_SYNC_CONFIGS, &st));
    CU_ASSERT_EQUAL(st.errors, 3);
    CU_ASSERT_EQUAL(st.runs, 1);
    CU_ASSERT_EQUAL(st.last_success_ms, -1); /* the run had failed items */
    CU_ASSERT_STRING_EQUAL(st.last_error, "orders2: third");
    CU_ASSERT_TRUE(st.last_error_ms > 0);
    CU_ASSERT_TRUE(fakehost_log_contains(e.fh, "orders: DescribeConfigs failed: TIMEOUT"));
    sc_advance(&e, KM_SYNC_TICK_MS);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_CONFIGS], 2); /* the kick, not the 1 s interval */

    /* The deadline: max(interval, 2 x request.timeout.ms = 60 s). */
    i = sc_find_open(KM_SYNC_CONFIGS);
    CU_ASSERT_FATAL(i >= 0);
    sc_advance(&e, 59000);
    CU_ASSERT_FALSE(km_sync_run_cancelled(sc.open[i]));
    sc_advance(&e, 1500);
    CU_ASSERT_TRUE(km_sync_run_cancelled(sc.open[i]));
    sc_finish(&e, i);
    CU_ASSERT_TRUE_FATAL(km_sync_status(e.cm, "m1", KM_SYNC_CONFIGS, &st));
    CU_ASSERT_EQUAL(st.runs, 2);
    CU_ASSERT_EQUAL(st.last_success_ms, -1); /* a cancelled run is no success */

    /* A run without failed items is a success. */
    sc_advance(&e, 1500);
    i = sc_find_open(KM_SYNC_CONFIGS);
    CU_ASSERT_FATAL(i >= 0);
    sc_finish(&e, i);
    CU_ASSERT_TRUE_FATAL(km_sync_status(e.cm, "m1", KM_SYNC_CONFIGS, &st));
    CU_ASSERT_TRUE(st.last_success_ms > 0);

    /* A topic that becomes RUNNING again (paused -> running) kicks every kind. */
    while (sc.nopen > 0)
        sc_finish(&e, 0);
    memset(sc.calls, 0, sizeof(sc.calls));
    sc_topic(&e, "m1.paused", false);
    sc_advance(&e, KM_SYNC_TICK_MS);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_CONFIGS], 0); /* pausing is no kick */
    sc_topic(&e, "m1", false);
    sc_advance(&e, KM_SYNC_TICK_MS);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_CONFIGS], 1);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_TOPICS], 1);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_ACLS], 1);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_GROUPS], 0); /* off stays off */
    while (sc.nopen > 0)
        sc_finish(&e, 0);
    sc_stop(&e);
}

/* Cancellation: mirror deleted (state freed after the run ends), coordinator lost, stop. */
static void sc_test_cancel(void)
{
    sc_env_t e;
    int i;

    sc_start(&e, "0");
    sc.coord = true;
    sc.hold = true;
    sc_advance(&e, KM_SYNC_TICK_MS);
    CU_ASSERT_EQUAL_FATAL(sc.nopen, 3);
    /* Coordinator lost: persist runs are cancelled. */
    sc.coord = false;
    for (i = 0; i < sc.nopen; i++)
        CU_ASSERT_TRUE(km_sync_run_cancelled(sc.open[i]));
    sc.coord = true;
    for (i = 0; i < sc.nopen; i++)
        CU_ASSERT_FALSE(km_sync_run_cancelled(sc.open[i]));
    /* Deleted: cancelled, no definition; its state lives until the runs end. */
    sc_delete_def(&e, "m1");
    for (i = 0; i < sc.nopen; i++) {
        CU_ASSERT_TRUE(km_sync_run_cancelled(sc.open[i]));
        CU_ASSERT_PTR_NULL(km_sync_run_def(sc.open[i]));
    }
    /* Re-created under the same name while the old runs are open: a fresh state (its metrics
     * register again), nothing starts beside the old runs of the old mirror... */
    sc_publish_def(&e, "m1", "0");
    sc_finish(&e, 0);
    sc_finish(&e, 0);
    sc_finish(&e, 0);
    CU_ASSERT_EQUAL(km_sync_inflight(e.cm, "m1"), 0);
    /* ... and the new mirror runs at its first tick as coordinator. */
    memset(sc.calls, 0, sizeof(sc.calls));
    sc_advance(&e, KM_SYNC_TICK_MS);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_CONFIGS], 1);
    /* Stop with runs in flight: cancelled; fini frees them (the kinds' continuations would
     * have been dropped), nothing left behind (sc_stop checks). */
    CU_ASSERT_EQUAL(sc.nopen, 3);
    sc_stop(&e);
}

static struct {
    int called;
    int errors;
} sc_fin;

static void sc_fin_cb(km_plugin_t *cm, void *arg, int errors)
{
    (void)cm;
    CU_ASSERT_PTR_EQUAL(arg, &sc_fin);
    sc_fin.called++;
    sc_fin.errors = errors;
}

/* Final syncs: CONFIGS and GROUPS of the named topics; completion when both end, at the
 * timeout, or at the next tick when nothing runs; never inside km_sync_final. */
static void sc_test_final(void)
{
    const char *topics[] = {"orders"};
    sc_env_t e;
    int i;

    sc_start(&e, "1000");
    sc.hold = true;
    /* Not the coordinator: persist false. */
    memset(&sc_fin, 0, sizeof(sc_fin));
    CU_ASSERT_EQUAL(km_sync_final(e.cm, "m1", topics, 1, sc_fin_cb, &sc_fin), KM_OK);
    CU_ASSERT_EQUAL(sc_fin.called, 0);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_CONFIGS], 1);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_GROUPS], 1);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_TOPICS] + sc.calls[KM_SYNC_ACLS], 0);
    CU_ASSERT_FALSE(sc.last_persist);
    CU_ASSERT_EQUAL(sc.last_ntopics, 1);
    CU_ASSERT_STRING_EQUAL(sc.last_topic, "orders");
    CU_ASSERT_EQUAL_FATAL(sc.nopen, 2);
    CU_ASSERT_FALSE(km_sync_run_cancelled(sc.open[0])); /* not persist: no coordinator needed */
    km_sync_run_error(sc.open[0], "orders", "failed");
    sc_finish(&e, 0);
    CU_ASSERT_EQUAL(sc_fin.called, 0);
    sc_finish(&e, 0);
    CU_ASSERT_EQUAL(sc_fin.called, 1);
    CU_ASSERT_EQUAL(sc_fin.errors, 1);

    /* Timeout (stop.sync.timeout.ms 2 s): the completion goes on; the runs end later. */
    memset(&sc_fin, 0, sizeof(sc_fin));
    sc.coord = true;
    sc_advance(&e, KM_SYNC_TICK_MS); /* periodic runs start (3 kinds: topics, configs, ...) */
    CU_ASSERT_EQUAL(km_sync_final(e.cm, "m1", topics, 1, sc_fin_cb, &sc_fin), KM_OK);
    CU_ASSERT_TRUE(sc.last_persist);
    sc_advance(&e, 1500);
    CU_ASSERT_EQUAL(sc_fin.called, 0);
    sc_advance(&e, 1000);
    CU_ASSERT_EQUAL(sc_fin.called, 1);
    CU_ASSERT_EQUAL(sc_fin.errors, 2); /* both runs still open */
    CU_ASSERT_TRUE(fakehost_log_contains(e.fh, "the stop goes on"));
    for (i = 0; i < sc.nopen; i++)
        if (sc.open[i]->topics != NULL)
            CU_ASSERT_TRUE(km_sync_run_cancelled(sc.open[i]));
    while (sc.nopen > 0)
        sc_finish(&e, 0);
    CU_ASSERT_EQUAL(sc_fin.called, 1);

    /* Nothing to run (mirror unknown; no topics): completed at the next tick, not inside. */
    memset(&sc_fin, 0, sizeof(sc_fin));
    CU_ASSERT_EQUAL(km_sync_final(e.cm, "other", topics, 1, sc_fin_cb, &sc_fin), KM_OK);
    CU_ASSERT_EQUAL(km_sync_final(e.cm, "m1", NULL, 0, sc_fin_cb, &sc_fin), KM_OK);
    CU_ASSERT_EQUAL(sc_fin.called, 0);
    sc_advance(&e, KM_SYNC_TICK_MS);
    CU_ASSERT_EQUAL(sc_fin.called, 2);
    CU_ASSERT_EQUAL(sc_fin.errors, 0);

    /* Kinds that end at once: still completed after the call, at the next tick. */
    sc.hold = false;
    memset(&sc_fin, 0, sizeof(sc_fin));
    CU_ASSERT_EQUAL(km_sync_final(e.cm, "m1", topics, 1, sc_fin_cb, &sc_fin), KM_OK);
    CU_ASSERT_EQUAL(sc_fin.called, 0);
    sc_advance(&e, KM_SYNC_TICK_MS);
    CU_ASSERT_EQUAL(sc_fin.called, 1);

    /* A run that ends cancelled (stop.sync.timeout.ms 0: at once) counts as one failure. */
    sc.hold = true;
    sc_stop_ms = "0";
    sc_publish_def(&e, "m1", "1000");
    sc_stop_ms = "2000";
    memset(&sc_fin, 0, sizeof(sc_fin));
    CU_ASSERT_EQUAL(km_sync_final(e.cm, "m1", topics, 1, sc_fin_cb, &sc_fin), KM_OK);
    CU_ASSERT_EQUAL_FATAL(sc.nopen, 2);
    CU_ASSERT_TRUE(km_sync_run_cancelled(sc.open[0]));
    sc_finish(&e, 0);
    sc_finish(&e, 0);
    CU_ASSERT_EQUAL(sc_fin.called, 1);
    CU_ASSERT_EQUAL(sc_fin.errors, 2);
    sc_publish_def(&e, "m1", "1000");

    /* Waiting at fini: completed by the stop (the stop request goes on). */
    sc.hold = true;
    memset(&sc_fin, 0, sizeof(sc_fin));
    CU_ASSERT_EQUAL(km_sync_final(e.cm, "m1", topics, 1, sc_fin_cb, &sc_fin), KM_OK);
    sc_stop(&e);
    CU_ASSERT_EQUAL(sc_fin.called, 1);
    CU_ASSERT_EQUAL(sc_fin.errors, 2);
}

/* The destination's answers: every IncrementalAlterConfigs (44) is counted and refused (the
 * handler then answers the stop per topic; the order is what is checked). */
static int sc_alters;

static int sc_legs; /* DescribeMirrors legs answered by broker 2 (the coordinator there) */

/* Broker 2's DescribeMirrors leg: m1 with no topics and the status of one kind. */
static int32_t sc_leg_answer(uint8_t **resp, size_t *resp_len)
{
    kp_DescribeMirrorsResponse_t r;
    kp_DescribeMirrorsResponse_DescribedMirror_t m;
    kp_DescribeMirrorsResponse_SyncKindStatus_t ks;
    kp_writer_t wr;

    kp_DescribeMirrorsResponse_init(&r);
    kp_DescribeMirrorsResponse_DescribedMirror_init(&m);
    kp_DescribeMirrorsResponse_SyncKindStatus_init(&ks);
    m.MirrorName.ptr = "m1";
    m.MirrorName.len = 2;
    ks.Kind.ptr = "acls";
    ks.Kind.len = 4;
    ks.Enabled = true;
    ks.Runs = 7;
    ks.Errors = 2;
    m.SyncStatus.cnt = 1;
    m.SyncStatus.v = &ks;
    r.Mirrors.cnt = 1;
    r.Mirrors.v = &m;
    kp_writer_init(&wr);
    if (kp_msg_encode(&kp_DescribeMirrorsResponse_desc, &wr, &r, 0) != 0) {
        kp_writer_free(&wr);
        return KBX_ERR_INVALID;
    }
    *resp = malloc(wr.len);
    memcpy(*resp, wr.buf, wr.len);
    *resp_len = wr.len;
    kp_writer_free(&wr);
    sc_legs++;
    return KBX_OK;
}

static int32_t sc_dest(void *arg, int32_t broker_id, int16_t api_key, int16_t api_version,
                       const uint8_t *body, size_t len, uint8_t **resp, size_t *resp_len)
{
    (void)arg;
    (void)api_version;
    (void)body;
    (void)len;
    if (api_key == 44)
        sc_alters++;
    if (api_key == 99 && broker_id == 2)
        return sc_leg_answer(resp, resp_len);
    return KBX_ERR_INVALID;
}

static fakehost_call_t *sc_stop_call(sc_env_t *e)
{
    kp_StopMirrorTopicsRequest_t rq;
    kp_StopMirrorTopicsRequest_TopicMetadata_t t;
    fakehost_call_t *call = NULL;
    kp_writer_t wr;

    kp_StopMirrorTopicsRequest_init(&rq);
    kp_StopMirrorTopicsRequest_TopicMetadata_init(&t);
    rq.MirrorName.ptr = "m1";
    rq.MirrorName.len = 2;
    t.TopicName.ptr = "orders";
    t.TopicName.len = 6;
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    rq.StateOffset = -1;
    kp_writer_init(&wr);
    CU_ASSERT_EQUAL_FATAL(kp_msg_encode(&kp_StopMirrorTopicsRequest_desc, &wr, &rq, 0), 0);
    CU_ASSERT_EQUAL(fakehost_rpc_call(e->fh, 96, 0, wr.buf, wr.len, &call), KBX_RPC_PENDING);
    kp_writer_free(&wr);
    fakehost_run_until_idle(e->fh);
    return call;
}

/* StopMirrorTopics runs the final sync of the topics it stops before it moves them: nothing
 * is altered while the run is open; after it ends (or times out) the stop goes on. */
static void sc_test_stop_trigger(void)
{
    fakehost_call_t *call;
    sc_env_t e;
    int i;

    sc_start(&e, "0");
    fakehost_set_request_handler(e.fh, sc_dest, NULL);
    sc_alters = 0;
    sc.hold = true;
    call = sc_stop_call(&e);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_CONFIGS], 1);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_GROUPS], 0); /* off for this mirror */
    CU_ASSERT_STRING_EQUAL(sc.last_topic, "orders");
    CU_ASSERT_EQUAL(sc_alters, 0);
    CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_PENDING);
    i = sc_find_open(KM_SYNC_CONFIGS);
    CU_ASSERT_FATAL(i >= 0);
    sc_finish(&e, i);
    sc_advance(&e, KM_SYNC_TICK_MS);
    CU_ASSERT_EQUAL(sc_alters, 1);
    CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_COMPLETED);

    /* A final sync that never ends: the stop goes on after stop.sync.timeout.ms (2 s). */
    sc_alters = 0;
    call = sc_stop_call(&e);
    CU_ASSERT_EQUAL(sc.calls[KM_SYNC_CONFIGS], 2);
    sc_advance(&e, 1500);
    CU_ASSERT_EQUAL(sc_alters, 0);
    sc_advance(&e, 1000);
    CU_ASSERT_EQUAL(sc_alters, 1);
    CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_COMPLETED);
    CU_ASSERT_TRUE(fakehost_log_contains(e.fh, "the topics stop anyway"));
    while (sc.nopen > 0)
        sc_finish(&e, 0);
    sc_stop(&e);
}

/* DescribeMirrors of m1 (through the handler, as a client would); resp in arena ar. */
static void sc_describe(sc_env_t *e, kp_DescribeMirrorsResponse_t *resp, kp_arena_t *ar)
{
    kp_DescribeMirrorsRequest_t rq;
    fakehost_call_t *call = NULL;
    kp_str_t name = {"m1", 2};
    const uint8_t *body;
    size_t len = 0;
    kp_writer_t wr;
    kp_reader_t rd;

    kp_DescribeMirrorsRequest_init(&rq);
    rq.MirrorNames.cnt = 1;
    rq.MirrorNames.v = &name;
    kp_writer_init(&wr);
    CU_ASSERT_EQUAL_FATAL(kp_msg_encode(&kp_DescribeMirrorsRequest_desc, &wr, &rq, 0), 0);
    CU_ASSERT_EQUAL(fakehost_rpc_call(e->fh, 99, 0, wr.buf, wr.len, &call), KBX_RPC_PENDING);
    kp_writer_free(&wr);
    fakehost_run_until_idle(e->fh);
    CU_ASSERT_EQUAL_FATAL(fakehost_call_state(call), FAKEHOST_CALL_COMPLETED);
    body = fakehost_call_response(call, &len);
    kp_reader_init(&rd, body, len);
    kp_DescribeMirrorsResponse_init(resp);
    CU_ASSERT_EQUAL_FATAL(kp_DescribeMirrorsResponse_decode(&rd, ar, resp, 0), 0);
    CU_ASSERT_EQUAL_FATAL(resp->Mirrors.cnt, 1);
}

/* The status reaches DescribeMirrors on the coordinator only. */
static void sc_test_describe(void)
{
    kp_DescribeMirrorsResponse_t resp;
    const kp_DescribeMirrorsResponse_SyncKindStatus_t *ss;
    kp_arena_t ar;
    sc_env_t e;
    int i;

    sc_start(&e, "0");
    fakehost_set_request_handler(e.fh, sc_dest, NULL);
    kp_arena_init(&ar, 1 << 20);
    sc_describe(&e, &resp, &ar);
    CU_ASSERT_EQUAL(resp.Mirrors.v[0].SyncStatus.cnt, 0); /* not the coordinator */

    sc.coord = true;
    sc.hold = true;
    sc_advance(&e, KM_SYNC_TICK_MS);
    i = sc_find_open(KM_SYNC_CONFIGS);
    CU_ASSERT_FATAL(i >= 0);
    km_sync_run_error(sc.open[i], "orders", "boom");
    sc_finish(&e, i);
    sc_describe(&e, &resp, &ar);
    CU_ASSERT_EQUAL_FATAL(resp.Mirrors.v[0].SyncStatus.cnt, KM_SYNC_NKINDS);
    ss = &resp.Mirrors.v[0].SyncStatus.v[KM_SYNC_CONFIGS];
    CU_ASSERT_EQUAL(ss->Kind.len, 7);
    CU_ASSERT_NSTRING_EQUAL(ss->Kind.ptr, "configs", 7);
    CU_ASSERT_TRUE(ss->Enabled);
    CU_ASSERT_EQUAL(ss->Runs, 1);
    CU_ASSERT_EQUAL(ss->Errors, 1);
    CU_ASSERT_EQUAL(ss->LastError.len, (int32_t)strlen("orders: boom"));
    CU_ASSERT_NSTRING_EQUAL(ss->LastError.ptr, "orders: boom", 12);
    CU_ASSERT_TRUE(ss->LastErrorTimeMs > 0);
    CU_ASSERT_EQUAL(ss->LastSyncTimeMs, -1);
    ss = &resp.Mirrors.v[0].SyncStatus.v[KM_SYNC_GROUPS];
    CU_ASSERT_FALSE(ss->Enabled);
    CU_ASSERT_EQUAL(ss->LastError.len, -1);

    /* Broker 2 joins and coordinates (this one no longer): its leg's status is the answer's. */
    sc.coord = false;
    {
        kbx_broker_change_t b1 = {sizeof(b1), 1, KBX_BROKER_REGISTERED, 0, NULL};
        kbx_broker_change_t b2 = {sizeof(b2), 2, KBX_BROKER_REGISTERED, 0, NULL};
        const kbx_broker_change_t *bv[] = {&b1, &b2};
        kbx_metadata_delta_t d = {.struct_size = sizeof(d), .brokers = bv, .broker_count = 2};
        fakehost_publish_delta(e.fh, &d);
        fakehost_run_until_idle(e.fh);
    }
    sc_legs = 0;
    sc_describe(&e, &resp, &ar);
    CU_ASSERT_EQUAL(sc_legs, 1);
    CU_ASSERT_EQUAL_FATAL(resp.Mirrors.v[0].SyncStatus.cnt, 1);
    ss = &resp.Mirrors.v[0].SyncStatus.v[0];
    CU_ASSERT_NSTRING_EQUAL(ss->Kind.ptr, "acls", 4);
    CU_ASSERT_EQUAL(ss->Runs, 7);
    CU_ASSERT_EQUAL(ss->Errors, 2);
    /* Both claim it (a move in progress): this broker's own status is kept. */
    sc.coord = true;
    sc_describe(&e, &resp, &ar);
    CU_ASSERT_EQUAL(sc_legs, 2);
    CU_ASSERT_EQUAL(resp.Mirrors.v[0].SyncStatus.cnt, KM_SYNC_NKINDS);
    kp_arena_free(&ar);
    while (sc.nopen > 0)
        sc_finish(&e, 0);
    sc_stop(&e);
}

static CU_TestInfo sc_tests[] = {
    {"DescribeMirrors shows the status on the coordinator", sc_test_describe},
    {"StopMirrorTopics waits for the final sync", sc_test_stop_trigger},
    {"intervals, coordinator only, due at once", sc_test_intervals},
    {"one run in flight, kick, deadline, errors", sc_test_inflight_kick},
    {"cancel: deleted, coordinator lost, stop", sc_test_cancel},
    {"final sync: completion, timeout, nothing to do, stop", sc_test_final},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo sc_suites[] = {
    {"sync_core", NULL, NULL, NULL, NULL, sc_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(sc_suites);
}
