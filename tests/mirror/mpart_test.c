/*
 * mpart_test.c - the per-partition mirror state machine (plugin/mirror/km_mpart.c) against the
 * fake host (partition log, epoch cache, ISR wait, epoch bump, control batches, write modes)
 * and fake ops (state store, fetcher, LME lookup, the coordinator's post queue).
 *
 * The fake state store outlives a manager, like __mirror_state outlives a broker: a "crash"
 * freezes the machine at a crash point, the manager is freed, and a new one (a restarted
 * broker) picks the partition up from the store and the fake host's log.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/km_plugin_types.h"
#include "fakehost.h"
#include "fh_cunit.h"
#include "mirror/km_mpart.h"

#define TW_MAX_POSTS 64
#define TW_MAX_HIST  64

typedef struct tw_post {
    km_coord_fn run, drop;
    void *arg;
} tw_post_t;

typedef struct tw {
    fakehost_t *fh;
    km_plugin_t cm;
    km_mpart_mgr_t *mgr;
    km_mpart_opts_t opts;
    kbx_uuid_t tid;
    kbx_partition_t *part; /* the test's own handle (for appends), re-acquired as needed */

    /* the persistent state store */
    bool has_rec;
    km_mpart_rec_t store;
    int writes, lme_writes;
    int8_t hist[TW_MAX_HIST];
    int nhist;
    int fail_writes;
    /* pending completions */
    bool auto_ops;
    bool read_pending, write_pending, remove_pending, lookup_pending;
    uint64_t read_tok, write_tok, remove_tok, lookup_tok;
    km_mpart_rec_t write_rec;
    bool write_lme;
    /* LME lookup answers */
    int lookups;
    km_err_t lookup_err;
    int lookup_fail_count;
    int32_t lme_epoch;
    int64_t lme_offset;
    int32_t peer_epoch; /* the peer's current leader epoch answered with the LME, -1 unknown */
    int lookup_loops;   /* answer this many lookups with "still mirrored by the peer" */
    /* fetcher */
    bool fetching;
    int adds, removes;
    int64_t add_offset;
    int32_t add_epoch;
    /* posts */
    tw_post_t posts[TW_MAX_POSTS];
    int nposts;
    /* crash */
    char crashed[64];
} tw_t;

static tw_t tw;

/* ---- fake ops --------------------------------------------------------------------------- */

static km_err_t tw_state_read(void *ctx, const km_mpart_id_t *id, uint64_t token)
{
    tw_t *w = ctx;
    w->read_pending = true;
    w->read_tok = token;
    return KM_OK;
}

static km_err_t tw_state_write(void *ctx, const km_mpart_id_t *id, const km_mpart_rec_t *rec,
                               bool write_lme, uint64_t token)
{
    tw_t *w = ctx;
    w->write_pending = true;
    w->write_tok = token;
    w->write_rec = *rec;
    w->write_lme = write_lme;
    return KM_OK;
}

static km_err_t tw_fetch_add(void *ctx, const km_mpart_id_t *id, int32_t leader_epoch, int64_t off)
{
    tw_t *w = ctx;
    w->fetching = true;
    w->adds++;
    w->add_offset = off;
    w->add_epoch = leader_epoch;
    return KM_OK;
}

static km_err_t tw_fetch_remove(void *ctx, const km_mpart_id_t *id, uint64_t token)
{
    tw_t *w = ctx;
    w->fetching = false;
    w->removes++;
    w->remove_pending = true;
    w->remove_tok = token;
    return KM_OK;
}

static bool tw_fetch_status(void *ctx, const km_mpart_id_t *id, km_mpart_fstatus_t *out)
{
    tw_t *w = ctx;
    memset(out, 0, sizeof(*out));
    out->source_hw = 1000;
    out->lag = 1000 - w->add_offset;
    out->fetch_offset = w->add_offset;
    return w->fetching;
}

static km_err_t tw_lme_lookup(void *ctx, const km_mpart_id_t *id, uint64_t token)
{
    tw_t *w = ctx;
    w->lookups++;
    w->lookup_pending = true;
    w->lookup_tok = token;
    return KM_OK;
}

static km_err_t tw_post(void *ctx, km_coord_fn run, km_coord_fn drop, void *arg)
{
    tw_t *w = ctx;
    if (w->nposts == TW_MAX_POSTS)
        return KM_ERR_NOMEM;
    w->posts[w->nposts].run = run;
    w->posts[w->nposts].drop = drop;
    w->posts[w->nposts].arg = arg;
    w->nposts++;
    return KM_OK;
}

static void tw_crash(void *ctx, const km_mpart_id_t *id, const char *point)
{
    tw_t *w = ctx;
    snprintf(w->crashed, sizeof(w->crashed), "%s", point);
}

static const km_mpart_ops_t tw_ops = {
    .state_read = tw_state_read,
    .state_write = tw_state_write,
    .fetch_add = tw_fetch_add,
    .fetch_remove = tw_fetch_remove,
    .fetch_status = tw_fetch_status,
    .lme_lookup = tw_lme_lookup,
    .post = tw_post,
    .crash = tw_crash,
};

/* Deliver one pending completion; true if something happened. */
static bool tw_deliver_one(void)
{
    if (tw.nposts > 0) {
        tw_post_t p = tw.posts[0];
        memmove(tw.posts, tw.posts + 1, (size_t)(tw.nposts - 1) * sizeof(tw.posts[0]));
        tw.nposts--;
        p.run(&tw.cm, p.arg);
        return true;
    }
    if (!tw.auto_ops)
        return false;
    if (tw.read_pending) {
        tw.read_pending = false;
        km_mpart_state_loaded(tw.mgr, &tw.tid, 0, tw.read_tok, KM_OK,
                              tw.has_rec ? &tw.store : NULL);
        return true;
    }
    if (tw.write_pending) {
        km_err_t err = KM_OK;
        int32_t epoch = -1;
        tw.write_pending = false;
        /* The coordinator's rules (plugin/state): fenced when the stored state epoch is newer
         * than the one the writer saw or the stored leader epoch newer than the writer's; the
         * state epoch grows by one on a state change only. */
        if (tw.fail_writes > 0) {
            tw.fail_writes--;
            err = KM_ERR_HOST;
        } else if (tw.has_rec && (tw.store.state_epoch > tw.write_rec.state_epoch - 1 ||
                                  tw.write_rec.leader_epoch < tw.store.leader_epoch)) {
            err = KM_ERR_INVALID;
        } else {
            if (!tw.has_rec)
                epoch = 1;
            else if (tw.store.state != tw.write_rec.state)
                epoch = tw.store.state_epoch + 1;
            else
                epoch = tw.store.state_epoch;
            tw.store = tw.write_rec;
            tw.store.state_epoch = epoch;
            tw.has_rec = true;
            tw.writes++;
            tw.lme_writes += tw.write_lme;
            if (tw.nhist < TW_MAX_HIST)
                tw.hist[tw.nhist++] = tw.write_rec.state;
        }
        km_mpart_state_written(tw.mgr, &tw.tid, 0, tw.write_tok, err, epoch);
        return true;
    }
    if (tw.remove_pending) {
        tw.remove_pending = false;
        km_mpart_fetch_removed(tw.mgr, &tw.tid, 0, tw.remove_tok);
        return true;
    }
    if (tw.lookup_pending) {
        tw.lookup_pending = false;
        if (tw.lookup_loops > 0) {
            tw.lookup_loops--;
            km_mpart_lme_loop(tw.mgr, &tw.tid, 0, tw.lookup_tok,
                              "the other cluster still mirrors this topic from us: stop it there "
                              "first");
        } else if (tw.lookup_fail_count > 0) {
            tw.lookup_fail_count--;
            km_mpart_lme_done(tw.mgr, &tw.tid, 0, tw.lookup_tok, tw.lookup_err, -1, -1, -1);
        } else {
            km_mpart_lme_done(tw.mgr, &tw.tid, 0, tw.lookup_tok, KM_OK, tw.lme_epoch, tw.lme_offset,
                              tw.peer_epoch);
        }
        return true;
    }
    return false;
}

/* Run host events, posts and fake completions until nothing moves. */
static void tw_settle(void)
{
    int guard = 0;

    for (;;) {
        bool moved = fakehost_run_until_idle(tw.fh) != 0;
        moved = tw_deliver_one() || moved;
        if (!moved)
            break;
        CU_ASSERT_FATAL(++guard < 10000);
    }
}

/* Move the clock and tick the manager. */
static void tw_advance(int64_t ms)
{
    fakehost_advance_ms(tw.fh, ms);
    km_mpart_mgr_tick(tw.mgr);
    tw_settle();
}

/* ---- world ------------------------------------------------------------------------------- */

static void tw_mgr_new(const char *crash_point)
{
    tw.opts.crash_point = crash_point;
    tw.mgr = km_mpart_mgr_new(&tw.cm, &tw_ops, &tw, &tw.opts);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tw.mgr);
}

static void tw_mgr_free(void)
{
    tw_settle();
    CU_ASSERT_EQUAL(km_mpart_mgr_inflight(tw.mgr), 0);
    km_mpart_mgr_free(tw.mgr);
    tw.mgr = NULL;
    tw.read_pending = tw.write_pending = tw.remove_pending = tw.lookup_pending = false;
    tw.fetching = false;
}

static void tw_begin(int32_t leader_epoch)
{
    memset(&tw, 0, sizeof(tw));
    tw.fh = fakehost_new(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tw.fh);
    tw.cm.ref.magic = KM_PLUGIN_MAGIC;
    tw.cm.ref.api = fakehost_api(tw.fh);
    tw.cm.ref.host = fakehost_host(tw.fh);
    memset(tw.tid.bytes, 0x5a, sizeof(tw.tid.bytes));
    CU_ASSERT_EQUAL_FATAL(
        fakehost_partition_add(tw.fh, &tw.tid, "t", 0, leader_epoch, true, KBX_WRITE_PENDING), 0);
    tw.auto_ops = true;
    tw.lme_epoch = -1;
    tw.lme_offset = -1;
    tw.peer_epoch = -1;
    km_mpart_opts_default(&tw.opts);
    tw.opts.seed = 42;
    tw_mgr_new(NULL);
}

static void tw_end(void)
{
    char err[512];

    if (tw.part != NULL)
        tw.cm.ref.api->partition_release(tw.cm.ref.host, tw.part);
    tw.part = NULL;
    if (tw.mgr != NULL)
        tw_mgr_free();
    CU_ASSERT_EQUAL(fakehost_check_clean(tw.fh, err, sizeof(err)), 0);
    fakehost_free(tw.fh);
    tw.fh = NULL;
}

static kbx_log_offsets_t tw_offsets(void)
{
    kbx_log_offsets_t o;
    size_t len;

    memset(&o, 0, sizeof(o));
    o.struct_size = sizeof(o);
    fakehost_partition_log(tw.fh, &tw.tid, 0, &len, &o);
    return o;
}

static int32_t tw_epoch(void)
{
    return tw_offsets().leader_epoch;
}

/* The test's handle at the partition's current epoch. */
static kbx_partition_t *tw_handle(void)
{
    if (tw.part != NULL)
        tw.cm.ref.api->partition_release(tw.cm.ref.host, tw.part);
    tw.part = NULL;
    CU_ASSERT_EQUAL_FATAL(
        tw.cm.ref.api->partition_acquire(tw.cm.ref.host, &tw.tid, 0, -1, &tw.part), KBX_OK);
    return tw.part;
}

/* Append n records at the log end in one batch of epoch `epoch` (a mirrored batch). */
static void tw_append(int32_t epoch, int32_t n, int64_t pid, bool txn)
{
    uint8_t *b;
    size_t len;
    kbx_log_offsets_t o = tw_offsets();

    CU_ASSERT_EQUAL_FATAL(
        fakehost_batch_build(o.log_end_offset, epoch, pid, pid >= 0 ? 3 : -1, txn, n, &b, &len), 0);
    CU_ASSERT_EQUAL_FATAL(tw.cm.ref.api->log_append(tw.cm.ref.host, tw_handle(), b, len, NULL),
                          KBX_OK);
    free(b);
}

/* Mirrored history: epoch 1 at 0..9, epoch 3 at 10..19, epoch 5 at 20..29. */
static void tw_history(void)
{
    tw_append(1, 10, -1, false);
    tw_append(3, 10, -1, false);
    tw_append(5, 10, -1, false);
}

static km_err_t tw_lead_rc(int32_t desired)
{
    km_mpart_lead_t l;
    km_err_t err;

    memset(&l, 0, sizeof(l));
    l.id.mirror = "m1";
    l.id.topic = "t";
    l.id.topic_id = tw.tid;
    l.id.partition = 0;
    l.leader_epoch = tw_epoch();
    l.desired = desired;
    l.source_cluster_id = "src-cluster";
    err = km_mpart_lead(tw.mgr, &l);
    tw_settle();
    return err;
}

static void tw_lead(int32_t desired)
{
    km_mpart_lead_t l;

    memset(&l, 0, sizeof(l));
    l.id.mirror = "m1";
    l.id.topic = "t";
    l.id.topic_id = tw.tid;
    l.id.partition = 0;
    l.leader_epoch = tw_epoch();
    l.desired = desired;
    l.source_cluster_id = "src-cluster";
    CU_ASSERT_EQUAL(km_mpart_lead(tw.mgr, &l), KM_OK);
    tw_settle();
}

static km_mpart_desc_t tw_desc(void)
{
    km_mpart_desc_t d;

    CU_ASSERT_EQUAL_FATAL(km_mpart_describe(tw.mgr, &tw.tid, 0, &d), KM_OK);
    return d;
}

static int tw_state(void)
{
    return tw_desc().state;
}

/* Store a persisted state as if an earlier leader wrote it. */
static void tw_store(int8_t state, int8_t prev)
{
    memset(&tw.store, 0, sizeof(tw.store));
    tw.store.state = state;
    tw.store.previous_state = prev;
    tw.store.state_epoch = 7;
    tw.store.leader_epoch = 0;
    tw.store.lme_epoch = -1;
    tw.store.lme_offset = -1;
    snprintf(tw.store.source_cluster_id, sizeof(tw.store.source_cluster_id), "src-cluster");
    tw.has_rec = true;
}

/* Walk the fake log: number of MIRROR_PID_RESET batches (control, producer id -1) and of
 * ABORT markers (control, producer id >= 0). */
static void tw_count_control(int *resets, int *aborts)
{
    size_t len, pos = 0;
    const uint8_t *b = fakehost_partition_log(tw.fh, &tw.tid, 0, &len, NULL);

    *resets = *aborts = 0;
    while (b != NULL && pos + 61 <= len) {
        const uint8_t *p = b + pos;
        uint32_t blen = (uint32_t)p[8] << 24 | (uint32_t)p[9] << 16 | (uint32_t)p[10] << 8 | p[11];
        uint16_t attrs = (uint16_t)(p[21] << 8 | p[22]);
        int64_t pid = 0;
        int i;
        for (i = 0; i < 8; i++)
            pid = (int64_t)((uint64_t)pid << 8 | p[43 + i]);
        if (attrs & 0x20) {
            if (pid == -1)
                (*resets)++;
            else
                (*aborts)++;
        }
        pos += 12 + blen;
    }
}

static void tw_count_txn(void *arg, const kbx_open_txn_t *t)
{
    (*(int *)arg)++;
}

static int tw_open_txns(void)
{
    int n = 0;
    CU_ASSERT(tw.cm.ref.api->log_open_txns(tw.cm.ref.host, tw_handle(), tw_count_txn, &n) >= 0);
    return n;
}

/* ---- tests -------------------------------------------------------------------------------- */

static void mp_test_table(void)
{
    static const int all[] = {KM_MPART_UNKNOWN,   KM_MPART_PREPARING, KM_MPART_EPOCH_FENCING,
                              KM_MPART_MIRRORING, KM_MPART_PAUSING,   KM_MPART_PAUSED,
                              KM_MPART_STOPPING,  KM_MPART_STOPPED,   KM_MPART_FAILED};
    /* The table of docs/plugin.md: allowed[to] = list of from (besides same and -> FAILED). */
    static const struct {
        int to;
        int from[8];
        int n;
    } allowed[] = {
        {KM_MPART_PREPARING, {KM_MPART_UNKNOWN, KM_MPART_STOPPED, KM_MPART_FAILED}, 3},
        {KM_MPART_EPOCH_FENCING, {KM_MPART_MIRRORING}, 1},
        {KM_MPART_MIRRORING,
         {KM_MPART_PREPARING, KM_MPART_EPOCH_FENCING, KM_MPART_PAUSED, KM_MPART_FAILED},
         4},
        {KM_MPART_PAUSING, {KM_MPART_MIRRORING}, 1},
        {KM_MPART_PAUSED, {KM_MPART_PAUSING}, 1},
        {KM_MPART_STOPPING,
         {KM_MPART_UNKNOWN, KM_MPART_PREPARING, KM_MPART_EPOCH_FENCING, KM_MPART_MIRRORING,
          KM_MPART_PAUSING, KM_MPART_PAUSED, KM_MPART_FAILED},
         7},
        {KM_MPART_STOPPED, {KM_MPART_STOPPING}, 1},
    };
    size_t i, j, k, a;
    int ok = 0, refused = 0;

    for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        for (j = 0; j < sizeof(all) / sizeof(all[0]); j++) {
            int from = all[i], to = all[j];
            bool want = to != KM_MPART_UNKNOWN && (from == to || to == KM_MPART_FAILED);
            for (a = 0; a < sizeof(allowed) / sizeof(allowed[0]); a++)
                if (allowed[a].to == to)
                    for (k = 0; k < (size_t)allowed[a].n; k++)
                        want = want || allowed[a].from[k] == from;
            CU_ASSERT_EQUAL(km_mpart_transition_valid(from, to), want);
            if (km_mpart_transition_valid(from, to) != want)
                fprintf(stderr, "\n  %s -> %s\n", km_mpart_state_name(from),
                        km_mpart_state_name(to));
            want ? ok++ : refused++;
        }
    }
    CU_ASSERT_EQUAL(ok, 8 + 9 + 18 - 1); /* same-state (not UNKNOWN), -> FAILED, the table */
    CU_ASSERT_FALSE(km_mpart_transition_valid(2, KM_MPART_MIRRORING)); /* reserved value */
    CU_ASSERT_FALSE(km_mpart_transition_valid(KM_MPART_MIRRORING, 42));
    CU_ASSERT_STRING_EQUAL(km_mpart_state_name(KM_MPART_EPOCH_FENCING), "EPOCH_FENCING");
}

/* Never mirrored: UNKNOWN -> PREPARING (lookup: none) -> MIRRORING from offset 0. */
static void mp_test_fresh(void)
{
    km_mpart_desc_t d;

    tw_begin(4);
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw.nhist, 2);
    CU_ASSERT_EQUAL(tw.hist[0], KM_MPART_PREPARING);
    CU_ASSERT_EQUAL(tw.hist[1], KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw.store.state_epoch, 2);
    CU_ASSERT_EQUAL(tw.store.leader_epoch, 4);
    CU_ASSERT_STRING_EQUAL(tw.store.source_cluster_id, "src-cluster");
    CU_ASSERT_EQUAL(tw.lookups, 1);
    CU_ASSERT_TRUE(tw.fetching);
    CU_ASSERT_EQUAL(tw.add_offset, 0);
    CU_ASSERT_EQUAL(tw.add_epoch, 4);
    CU_ASSERT_EQUAL(fakehost_partition_write_mode(tw.fh, &tw.tid, 0), KBX_WRITE_READ_ONLY);
    d = tw_desc();
    CU_ASSERT_STRING_EQUAL(d.state_name, "MIRRORING");
    CU_ASSERT_TRUE(d.fetching);
    CU_ASSERT_EQUAL(d.fetch.source_hw, 1000);
    CU_ASSERT_EQUAL(d.log_end_offset, 0);
    {
        uint32_t counts[KM_MPART_NSTATES];
        km_mpart_mgr_state_counts(tw.mgr, counts);
        CU_ASSERT_EQUAL(counts[KM_MPART_MIRRORING + 1], 1);
        CU_ASSERT_EQUAL(counts[KM_MPART_PREPARING + 1], 0);
    }
    /* the same leadership again changes nothing */
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw.writes, 2);
    tw_end();
}

/* PREPARING truncates at the start of the first cached epoch after the peer's LME. */
static void mp_prep_case(int32_t lme_epoch, int64_t want_leo)
{
    tw_begin(9);
    tw_history();
    tw_store(KM_MPART_STOPPED, KM_MPART_STOPPING);
    tw.lme_epoch = lme_epoch;
    tw.lme_offset = lme_epoch >= 0 ? 15 : -1;
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, want_leo);
    CU_ASSERT_EQUAL(tw.add_offset, want_leo);
    if (tw_offsets().log_end_offset != want_leo)
        fprintf(stderr, "\n  LME epoch %d: LEO %lld, want %lld\n", (int)lme_epoch,
                (long long)tw_offsets().log_end_offset, (long long)want_leo);
    tw_end();
}

static void mp_test_prepare_truncation(void)
{
    mp_prep_case(-1, 0); /* none: from scratch */
    mp_prep_case(0, 0);  /* older than every cached epoch */
    mp_prep_case(1, 10); /* epoch 1: cut at epoch 3's start */
    mp_prep_case(2, 10); /* not cached: the largest <= 2 is 1 */
    mp_prep_case(3, 20);
    mp_prep_case(4, 20);
    mp_prep_case(5, 30); /* the newest: nothing to cut */
    mp_prep_case(7, 30); /* newer than every cached epoch */
}

/* A lookup error or an ISR wait that fails keeps the partition in PREPARING, untruncated. */
static void mp_test_prepare_retry(void)
{
    tw_begin(9);
    tw_history();
    tw_store(KM_MPART_STOPPED, KM_MPART_STOPPING);
    tw.lookup_fail_count = 2;
    tw.lookup_err = KM_ERR_HOST;
    tw.lme_epoch = 3;
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_PREPARING);
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 30);
    CU_ASSERT_EQUAL(tw.lookups, 1);
    tw_advance(500);
    CU_ASSERT_EQUAL(tw.lookups, 1); /* not before the retry delay */
    tw_advance(600);
    CU_ASSERT_EQUAL(tw.lookups, 2);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_PREPARING);
    fakehost_inject_op_error(tw.fh, FAKEHOST_OP_ISR_WAIT, KBX_ERR_TIMEOUT, 1);
    tw_advance(1100);
    CU_ASSERT_EQUAL(tw.lookups, 3);
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 20); /* truncated, but replicas not yet */
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_PREPARING);
    CU_ASSERT_FALSE(tw.fetching);
    tw_advance(1100);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw.lookups, 3); /* the answer is kept */
    CU_ASSERT_EQUAL(tw.add_offset, 20);
    tw_end();
}

/* Failback: the peer still mirrors the partition from us -> FAILED (retryable), nothing cut;
 * once it stopped, the retry gets the LME, truncates, and the epoch is raised above the LME
 * epoch + 1 + headroom before fetching (skipped when already high enough). */
static void mp_test_failback_lookup(void)
{
    tw_begin(9);
    tw_history();
    tw.lookup_loops = 1;
    tw.lme_epoch = 3;
    tw.lme_offset = 15;
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(tw.store.error, "stop it there first"));
    CU_ASSERT_FALSE(tw.store.non_retryable);
    CU_ASSERT_EQUAL(tw.store.previous_state, KM_MPART_PREPARING);
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 30); /* nothing truncated */
    CU_ASSERT_FALSE(tw.fetching);
    tw_advance(1000); /* the backoff (100 ms +- 20 %) */
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw.lookups, 2);
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 20); /* cut at epoch 5's start */
    CU_ASSERT_EQUAL(tw_epoch(), 3 + 1 + KM_MPART_EPOCH_HEADROOM);
    CU_ASSERT_EQUAL(tw.add_epoch, tw_epoch());
    CU_ASSERT_EQUAL(tw.add_offset, 20);
    tw_end();

    /* The local epoch is already above LME + 1 + headroom: no bump. */
    tw_begin(40);
    tw_history();
    tw.lme_epoch = 3;
    tw.lme_offset = 15;
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw_epoch(), 40);
    tw_end();

    /* No LME (none): from scratch, no bump. */
    tw_begin(9);
    tw_history();
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw_epoch(), 9);
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, tw_offsets().log_start_offset);
    tw_end();
}

/* Failback with the peer's current leader epoch (design M27): the local epoch goes just above
 * the higher of the peer's epoch and the LME epoch, however far the peer went (no headroom
 * guess); unknown peer epoch: LME epoch + 1 + headroom. */
static void mp_test_failback_peer_epoch(void)
{
    CU_ASSERT_EQUAL(km_mpart_failback_epoch(-1, 30), -1); /* no LME: no bump */
    CU_ASSERT_EQUAL(km_mpart_failback_epoch(3, -1), 3 + 1 + KM_MPART_EPOCH_HEADROOM);
    CU_ASSERT_EQUAL(km_mpart_failback_epoch(3, 4), 5);   /* the peer's STOPPING bump only */
    CU_ASSERT_EQUAL(km_mpart_failback_epoch(3, 40), 41); /* many peer leader changes */
    CU_ASSERT_EQUAL(km_mpart_failback_epoch(3, 2), 4);   /* never below the LME epoch + 1 */
    CU_ASSERT_EQUAL(km_mpart_failback_epoch(INT32_MAX - 1, -1), INT32_MAX);
    CU_ASSERT_EQUAL(km_mpart_failback_epoch(3, INT32_MAX), INT32_MAX);

    /* The peer went to epoch 40 (far beyond LME 3 + 11): our epoch 9 becomes 41 before the
     * fetcher starts, so the peer's batches (epochs up to 40) are not fenced. */
    tw_begin(9);
    tw_history();
    tw.lme_epoch = 3;
    tw.lme_offset = 15;
    tw.peer_epoch = 40;
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 20); /* cut at epoch 5's start */
    CU_ASSERT_EQUAL(tw_epoch(), 41);
    CU_ASSERT_EQUAL(tw.add_epoch, 41);
    tw_end();

    /* The peer only bumped once at its failover (LME epoch 5, its epoch 6): 7, not 16. */
    tw_begin(5);
    tw_history();
    tw.lme_epoch = 5;
    tw.lme_offset = 30;
    tw.peer_epoch = 6;
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 30); /* LME is the newest epoch: no cut */
    CU_ASSERT_EQUAL(tw_epoch(), 7);
    tw_end();

    /* Already above: no bump. */
    tw_begin(50);
    tw_history();
    tw.lme_epoch = 3;
    tw.lme_offset = 15;
    tw.peer_epoch = 40;
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw_epoch(), 50);
    tw_end();
}

/* A partition already mirroring this source resumes from its log end: no lookup, no cut. */
static void mp_test_resume(void)
{
    tw_begin(9);
    tw_history();
    tw_store(KM_MPART_MIRRORING, KM_MPART_PREPARING);
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw.lookups, 0);
    CU_ASSERT_EQUAL(tw.writes, 0);
    CU_ASSERT_EQUAL(tw.add_offset, 30);
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 30);
    tw_end();

    /* ... but not if the source cluster id changed: FAILED, not retryable. */
    tw_begin(9);
    tw_history();
    tw_store(KM_MPART_MIRRORING, KM_MPART_PREPARING);
    snprintf(tw.store.source_cluster_id, sizeof(tw.store.source_cluster_id), "other");
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_FAILED);
    CU_ASSERT_TRUE(tw.store.non_retryable);
    CU_ASSERT_PTR_NOT_NULL(strstr(tw.store.error, "source cluster id changed from other"));
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 30);
    tw_end();
}

static void mp_test_pause_resume(void)
{
    tw_begin(9);
    tw_lead(KM_MPART_WANT_RUNNING);
    tw_append(5, 10, -1, false); /* as the fetcher would */
    km_mpart_set_desired(tw.mgr, &tw.tid, 0, KM_MPART_WANT_PAUSED);
    tw_settle();
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_PAUSED);
    CU_ASSERT_EQUAL(tw.hist[2], KM_MPART_PAUSING);
    CU_ASSERT_EQUAL(tw.hist[3], KM_MPART_PAUSED);
    CU_ASSERT_FALSE(tw.fetching);
    CU_ASSERT_EQUAL(fakehost_partition_write_mode(tw.fh, &tw.tid, 0), KBX_WRITE_READ_ONLY);
    km_mpart_set_desired(tw.mgr, &tw.tid, 0, KM_MPART_WANT_RUNNING);
    tw_settle();
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw.hist[4], KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw.add_offset, 10); /* from the log end, nothing cut */
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 10);
    CU_ASSERT_EQUAL(tw.lookups, 1);
    tw_end();
}

/* A batch above the local leader epoch: EPOCH_FENCING bumps the epoch, then MIRRORING. */
static void mp_test_epoch_fencing(void)
{
    km_mpart_fevent_t ev = {.kind = KM_MPART_FEV_EPOCH_EXCEEDED, .epoch = 12};

    tw_begin(9);
    tw_lead(KM_MPART_WANT_RUNNING);
    km_mpart_fetch_event(tw.mgr, &tw.tid, 0, &ev);
    tw_settle();
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw.hist[2], KM_MPART_EPOCH_FENCING);
    CU_ASSERT_EQUAL(tw.hist[3], KM_MPART_MIRRORING);
    CU_ASSERT(tw_epoch() >= 12 + KM_MPART_EPOCH_HEADROOM);
    CU_ASSERT_EQUAL(tw.store.leader_epoch, tw_epoch());
    CU_ASSERT_EQUAL(tw.add_epoch, tw_epoch());
    CU_ASSERT_EQUAL(fakehost_partition_write_mode(tw.fh, &tw.tid, 0), KBX_WRITE_READ_ONLY);
    /* the epoch's leadership event arrives afterwards: nothing changes */
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    tw_end();
}

static void mp_test_diverged(void)
{
    km_mpart_fevent_t ev = {.kind = KM_MPART_FEV_DIVERGED, .offset = 15};

    tw_begin(9);
    tw_lead(KM_MPART_WANT_RUNNING);
    tw_history();
    km_mpart_fetch_event(tw.mgr, &tw.tid, 0, &ev);
    tw_settle();
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    /* 15 is inside batch 10..19: log_truncate removes the whole batch (kbx.h), so the log ends
     * at 10 and the fetch resumes there */
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 10);
    CU_ASSERT_EQUAL(tw.add_offset, 10);
    CU_ASSERT_TRUE(tw.fetching);
    tw_end();
}

static void mp_test_transient_fatal(void)
{
    km_mpart_fevent_t tr = {.kind = KM_MPART_FEV_TRANSIENT, .message = "source unreachable"};
    km_mpart_fevent_t fa = {
        .kind = KM_MPART_FEV_FATAL, .offset = 42, .message = "source topic deleted"};
    km_mpart_desc_t d;
    char err[256];

    tw_begin(9);
    tw_lead(KM_MPART_WANT_RUNNING);
    km_mpart_fetch_event(tw.mgr, &tw.tid, 0, &tr);
    km_mpart_fetch_event(tw.mgr, &tw.tid, 0, &tr);
    tw_settle();
    d = tw_desc();
    CU_ASSERT_EQUAL(d.state, KM_MPART_MIRRORING);
    CU_ASSERT_STRING_EQUAL(d.transient_error, "source unreachable");
    CU_ASSERT_EQUAL(d.transient_count, 2);
    CU_ASSERT_EQUAL(tw.writes, 2);

    km_mpart_fetch_event(tw.mgr, &tw.tid, 0, &fa);
    tw_settle();
    d = tw_desc();
    CU_ASSERT_EQUAL(d.state, KM_MPART_FAILED);
    CU_ASSERT_STRING_EQUAL(tw.store.error, "t-0 at offset 42: source topic deleted");
    CU_ASSERT_TRUE(tw.store.non_retryable);
    CU_ASSERT_EQUAL(tw.store.previous_state, KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(d.next_retry_ms, -1);
    CU_ASSERT_FALSE(tw.fetching);
    tw_advance(3600 * 1000);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_FAILED); /* never retried automatically */

    /* the operator sends it back; it failed while mirroring: MIRRORING from its log end */
    CU_ASSERT_EQUAL(km_mpart_operator_retry(tw.mgr, &tw.tid, 0, err, sizeof(err)), KM_OK);
    tw_settle();
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw.hist[tw.nhist - 2], KM_MPART_FAILED);
    CU_ASSERT_EQUAL(tw.add_offset, 0);
    CU_ASSERT_EQUAL(tw.store.retry_attempt, 0);
    CU_ASSERT_FALSE(tw.store.non_retryable);
    CU_ASSERT_STRING_EQUAL(tw.store.error, "");
    CU_ASSERT_EQUAL(tw.lookups, 1);
    /* operator retry of a partition that is not FAILED is refused */
    CU_ASSERT_EQUAL(km_mpart_operator_retry(tw.mgr, &tw.tid, 0, err, sizeof(err)), KM_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is MIRRORING, not FAILED"));
    CU_ASSERT_EQUAL(km_mpart_operator_retry(tw.mgr, &tw.tid, 3, err, sizeof(err)), KM_ERR_INVALID);
    tw_end();

    /* failed while preparing (not retryable): the operator sends it back to PREPARING */
    tw_begin(9);
    tw_history();
    tw_store(KM_MPART_FAILED, KM_MPART_PREPARING);
    tw.store.non_retryable = true;
    snprintf(tw.store.error, sizeof(tw.store.error), "t-0: a mirror loop");
    tw.lme_epoch = 3;
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_FAILED);
    CU_ASSERT_EQUAL(tw_desc().next_retry_ms, -1);
    CU_ASSERT_EQUAL(tw.lookups, 0);
    CU_ASSERT_EQUAL(km_mpart_operator_retry(tw.mgr, &tw.tid, 0, err, sizeof(err)), KM_OK);
    tw_settle();
    CU_ASSERT_EQUAL(tw.hist[0], KM_MPART_PREPARING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw.lookups, 1);
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 20); /* the LME truncation ran */
    CU_ASSERT_EQUAL(tw.store.retry_attempt, 0);
    CU_ASSERT_STRING_EQUAL(tw.store.error, "");
    tw_end();
}

/* Retryable failures: exponential backoff with jitter, retry count kept, cleared by progress,
 * automatic retries stop after max attempts. */
static void mp_test_failed_backoff(void)
{
    km_mpart_fevent_t fa = {.kind = KM_MPART_FEV_FATAL, .retryable = true, .message = "corrupt"};
    km_mpart_fevent_t pr = {.kind = KM_MPART_FEV_PROGRESS};
    int64_t now, at;
    int attempt;

    tw_begin(9);
    tw.opts.retry_max_attempts = 3;
    km_mpart_mgr_free(tw.mgr);
    tw_mgr_new(NULL);
    tw_lead(KM_MPART_WANT_RUNNING);
    for (attempt = 1; attempt <= 3; attempt++) {
        int64_t base = 100LL << (attempt - 1);
        fa.offset = 10 * attempt;
        km_mpart_fetch_event(tw.mgr, &tw.tid, 0, &fa);
        tw_settle();
        CU_ASSERT_EQUAL(tw_state(), KM_MPART_FAILED);
        CU_ASSERT_EQUAL(tw.store.retry_attempt, attempt);
        CU_ASSERT_FALSE(tw.store.non_retryable);
        now = fakehost_now_ms(tw.fh);
        at = tw_desc().next_retry_ms;
        CU_ASSERT(at >= now + base * 8 / 10 && at <= now + base * 12 / 10);
        tw_advance(at - now - 1);
        CU_ASSERT_EQUAL(tw_state(), KM_MPART_FAILED);
        tw_advance(1);
        CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);  /* retry target: mirroring */
        CU_ASSERT_EQUAL(tw.store.retry_attempt, attempt); /* kept until progress */
    }
    CU_ASSERT_EQUAL(tw.lookups, 1); /* never truncated again */
    /* the 4th failure exceeds max attempts: waits for the operator */
    km_mpart_fetch_event(tw.mgr, &tw.tid, 0, &fa);
    tw_settle();
    CU_ASSERT_EQUAL(tw.store.retry_attempt, 4);
    CU_ASSERT_EQUAL(tw_desc().next_retry_ms, -1);
    tw_advance(600000);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_FAILED);
    CU_ASSERT_EQUAL(km_mpart_operator_retry(tw.mgr, &tw.tid, 0, NULL, 0), KM_OK);
    tw_settle();
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    /* a failure after the operator's retry starts the count again; progress clears it */
    km_mpart_fetch_event(tw.mgr, &tw.tid, 0, &fa);
    tw_settle();
    CU_ASSERT_EQUAL(tw.store.retry_attempt, 1);
    tw_advance(200);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    km_mpart_fetch_event(tw.mgr, &tw.tid, 0, &pr);
    tw_settle();
    CU_ASSERT_EQUAL(tw.store.retry_attempt, 0);
    CU_ASSERT_STRING_EQUAL(tw.store.error, "");
    CU_ASSERT_EQUAL(tw.store.state, KM_MPART_MIRRORING);
    tw_end();
}

/* Mirrored history with an open transaction; the leader epoch equals the newest mirrored one,
 * so STOPPING must bump it. */
static void mp_stop_setup(void)
{
    tw_begin(5);
    tw_history();
    tw_append(5, 3, 7, true);   /* producer 7 opens a transaction at 30 */
    tw_append(5, 2, -1, false); /* LEO 35 */
    tw_store(KM_MPART_MIRRORING, KM_MPART_PREPARING);
    CU_ASSERT_EQUAL(tw_open_txns(), 1);
}

static void mp_stop_check(int32_t want_lme_epoch, int64_t want_lme_offset)
{
    int resets, aborts;
    kbx_log_offsets_t o = tw_offsets();
    km_mpart_desc_t d = tw_desc();

    CU_ASSERT_EQUAL(d.state, KM_MPART_STOPPED);
    CU_ASSERT_STRING_EQUAL(d.step, "stopped");
    CU_ASSERT_EQUAL(tw.store.state, KM_MPART_STOPPED);
    CU_ASSERT_EQUAL(tw.store.lme_epoch, want_lme_epoch);
    CU_ASSERT_EQUAL(tw.store.lme_offset, want_lme_offset);
    CU_ASSERT(tw.lme_writes >= 1);
    CU_ASSERT(o.leader_epoch > want_lme_epoch);
    tw_count_control(&resets, &aborts);
    CU_ASSERT_EQUAL(resets, 1);
    CU_ASSERT_EQUAL(aborts, 1);
    CU_ASSERT_EQUAL(tw_open_txns(), 0);
    CU_ASSERT_EQUAL(o.last_pid_reset_offset, want_lme_offset + 1);
    CU_ASSERT_EQUAL(o.log_end_offset, want_lme_offset + 2);
    CU_ASSERT(o.latest_cached_epoch > want_lme_epoch); /* our epoch entered the cache */
    CU_ASSERT_EQUAL(fakehost_partition_write_mode(tw.fh, &tw.tid, 0), KBX_WRITE_WRITABLE);
    CU_ASSERT_FALSE(tw.fetching);
    CU_ASSERT_EQUAL(tw.lookups, 0); /* the source is never asked */
}

static void mp_test_stopping(void)
{
    mp_stop_setup();
    fakehost_partition_set_hw(tw.fh, &tw.tid, 0, 20); /* followers behind */
    tw_lead(KM_MPART_WANT_STOPPED);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_STOPPED);
    CU_ASSERT_STRING_EQUAL(tw_desc().step, "stopped.hw_wait");
    CU_ASSERT_NOT_EQUAL(fakehost_partition_write_mode(tw.fh, &tw.tid, 0), KBX_WRITE_WRITABLE);
    tw_advance(1000);
    CU_ASSERT_STRING_EQUAL(tw_desc().step, "stopped.hw_wait");
    fakehost_partition_set_hw(tw.fh, &tw.tid, 0, -1);
    tw_advance(150);
    mp_stop_check(5, 35);
    CU_ASSERT_EQUAL(tw.hist[0], KM_MPART_STOPPING);
    CU_ASSERT_EQUAL(tw.hist[1], KM_MPART_STOPPED);
    CU_ASSERT_EQUAL(tw.nhist, 2);
    CU_ASSERT_EQUAL(tw.store.state_epoch, 9);
    CU_ASSERT_EQUAL(tw.lme_writes, 1);
    /* a STOPPED partition led again (restart) stays as it is */
    tw_mgr_free();
    tw_mgr_new(NULL);
    tw_lead(KM_MPART_WANT_STOPPED);
    mp_stop_check(5, 35);
    CU_ASSERT_EQUAL(tw.nhist, 2);
    tw_end();
}

/* Crash after each step of STOPPING in turn; a restarted broker resumes to STOPPED. */
static void mp_test_stopping_crash(void)
{
    static const char *const points[] = {
        "stopping.drained",      "stopping.lme_recorded", "stopping.epoch_bumped",
        "stopping.txns_aborted", "stopping.pid_reset",    "stopping.persisted",
        "stopping.hw_passed",
    };
    size_t i;

    for (i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
        mp_stop_setup();
        km_mpart_mgr_free(tw.mgr);
        tw_mgr_new(points[i]);
        tw_lead(KM_MPART_WANT_STOPPED);
        CU_ASSERT_STRING_EQUAL(tw.crashed, points[i]);
        CU_ASSERT_NOT_EQUAL(fakehost_partition_write_mode(tw.fh, &tw.tid, 0), KBX_WRITE_WRITABLE);
        /* the broker dies; its replica comes back leader (the same or a new epoch) */
        tw_mgr_free();
        if (i % 2 == 1)
            fakehost_partition_set_leader(tw.fh, &tw.tid, 0, tw_epoch() + 1, true);
        tw_mgr_new(NULL);
        tw_lead(KM_MPART_WANT_STOPPED);
        mp_stop_check(5, 35);
        if (tw.store.state != KM_MPART_STOPPED)
            fprintf(stderr, "\n  crash point %s: ended in %s\n", points[i],
                    km_mpart_state_name(tw_state()));
        tw_end();
    }
    /* The last two points belong to the failover that persisted STOPPED: a STOPPED partition
     * led again by a broker armed with them passes without a crash. */
    for (i = 5; i < sizeof(points) / sizeof(points[0]); i++) {
        mp_stop_setup();
        tw_lead(KM_MPART_WANT_STOPPED);
        mp_stop_check(5, 35);
        tw_mgr_free();
        tw_mgr_new(points[i]);
        tw_lead(KM_MPART_WANT_STOPPED);
        CU_ASSERT_STRING_EQUAL(tw.crashed, "");
        mp_stop_check(5, 35);
        tw_end();
    }
}

/* A new leader finds STOPPED persisted, but its replica never got the failover's ABORT and
 * reset (the leader that persisted STOPPED died before its followers fetched them): it appends
 * them before it makes the partition writable, once; a log that has them is left alone. */
static void mp_test_stopped_repair(void)
{
    int resets, aborts;
    kbx_log_offsets_t o;

    mp_stop_setup(); /* open transaction at 30, LEO 35, leader epoch 5 */
    tw.store.state = KM_MPART_STOPPED;
    tw.store.previous_state = KM_MPART_STOPPING;
    tw.store.lme_epoch = 5;
    tw.store.lme_offset = 35;
    fakehost_partition_set_leader(tw.fh, &tw.tid, 0, 7, true);
    tw_lead(KM_MPART_WANT_STOPPED);
    o = tw_offsets();
    tw_count_control(&resets, &aborts);
    CU_ASSERT_EQUAL(resets, 1);
    CU_ASSERT_EQUAL(aborts, 1);
    CU_ASSERT_EQUAL(tw_open_txns(), 0);
    CU_ASSERT_EQUAL(o.last_pid_reset_offset, 36);
    CU_ASSERT_EQUAL(o.log_end_offset, 37);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_STOPPED);
    CU_ASSERT_STRING_EQUAL(tw_desc().step, "stopped");
    CU_ASSERT_EQUAL(fakehost_partition_write_mode(tw.fh, &tw.tid, 0), KBX_WRITE_WRITABLE);
    CU_ASSERT_EQUAL(tw.nhist, 0); /* nothing persisted: STOPPED stays */
    /* led again: the markers are there now, nothing is appended */
    tw_mgr_free();
    fakehost_partition_set_leader(tw.fh, &tw.tid, 0, 8, true);
    tw_mgr_new(NULL);
    tw_lead(KM_MPART_WANT_STOPPED);
    tw_count_control(&resets, &aborts);
    CU_ASSERT_EQUAL(resets, 1);
    CU_ASSERT_EQUAL(aborts, 1);
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 37);
    tw_end();
}

/* STOPPING is allowed from every listed state and completes with the source unreachable. */
static void mp_test_stopping_from_states(void)
{
    static const int8_t from[] = {KM_MPART_PREPARING, KM_MPART_EPOCH_FENCING, KM_MPART_PAUSING,
                                  KM_MPART_PAUSED,    KM_MPART_FAILED,        KM_MPART_UNKNOWN};
    size_t i;

    for (i = 0; i < sizeof(from) / sizeof(from[0]); i++) {
        tw_begin(9);
        tw_history();
        if (from[i] != KM_MPART_UNKNOWN)
            tw_store(from[i], KM_MPART_MIRRORING);
        tw.lookup_fail_count = 1000; /* the source is down */
        tw.lookup_err = KM_ERR_HOST;
        tw_lead(KM_MPART_WANT_STOPPED);
        CU_ASSERT_EQUAL(tw_state(), KM_MPART_STOPPED);
        CU_ASSERT_EQUAL(tw.store.lme_epoch, 5);
        CU_ASSERT_EQUAL(tw.store.lme_offset, 30);
        CU_ASSERT_EQUAL(fakehost_partition_write_mode(tw.fh, &tw.tid, 0), KBX_WRITE_WRITABLE);
        CU_ASSERT_EQUAL(tw.lookups, 0);
        tw_end();
    }
    /* stopped while preparing, with the lookup outstanding */
    tw_begin(9);
    tw_history();
    tw_store(KM_MPART_STOPPED, KM_MPART_STOPPING);
    tw.auto_ops = true;
    tw.lookup_fail_count = 1000;
    tw.lookup_err = KM_ERR_HOST;
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_PREPARING);
    km_mpart_set_desired(tw.mgr, &tw.tid, 0, KM_MPART_WANT_STOPPED);
    tw_settle();
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_STOPPED);
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 31); /* nothing cut, one reset appended */
    tw_end();
}

/* A fetch error from before a stop is not shown once the fetcher is gone (a failover with the
 * source dead showed STOPPED partitions with "fetch from source broker N failed"). */
static void mp_test_stopped_no_fetch_error(void)
{
    km_mpart_fevent_t tr = {.kind = KM_MPART_FEV_TRANSIENT, .message = "source unreachable"};
    km_mpart_desc_t d;

    tw_begin(9);
    tw_lead(KM_MPART_WANT_RUNNING);
    km_mpart_fetch_event(tw.mgr, &tw.tid, 0, &tr);
    tw_settle();
    CU_ASSERT_STRING_EQUAL(tw_desc().transient_error, "source unreachable");
    km_mpart_set_desired(tw.mgr, &tw.tid, 0, KM_MPART_WANT_STOPPED);
    tw_settle();
    d = tw_desc();
    CU_ASSERT_EQUAL(d.state, KM_MPART_STOPPED);
    CU_ASSERT_STRING_EQUAL(d.transient_error, "");
    CU_ASSERT_EQUAL(d.transient_count, 0);
    CU_ASSERT_FALSE(tw.fetching);
    tw_end();
}

/* Leadership lost in the middle of a step: the step is abandoned, nothing is damaged. */
static void mp_test_leadership_lost(void)
{
    int resets, aborts, writes;

    /* PREPARING: lost while the ISR wait is outstanding */
    tw_begin(9);
    tw_history();
    tw_store(KM_MPART_STOPPED, KM_MPART_STOPPING);
    tw.lme_epoch = 3;
    fakehost_hold_async(tw.fh, true);
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_STRING_EQUAL(tw_desc().step, "preparing.isr_wait");
    writes = tw.writes;
    km_mpart_resign(tw.mgr, &tw.tid, 0);
    CU_ASSERT_EQUAL(km_mpart_mgr_count(tw.mgr), 0);
    fakehost_hold_async(tw.fh, false);
    tw_settle();
    CU_ASSERT_EQUAL(tw.writes, writes); /* the late completion wrote nothing */
    CU_ASSERT_EQUAL(tw.adds, 0);
    tw_end();

    /* STOPPING: the epoch moves under the drain; the fenced handle refuses every log change */
    mp_stop_setup();
    tw.auto_ops = false;
    tw_lead(KM_MPART_WANT_STOPPED);
    tw.auto_ops = true;
    while (tw.read_pending || tw.write_pending)
        tw_deliver_one();
    CU_ASSERT_STRING_EQUAL(tw_desc().step, "stopping.drain");
    CU_ASSERT_TRUE(tw.remove_pending);
    fakehost_partition_set_leader(tw.fh, &tw.tid, 0, 6, true);
    writes = tw.writes;
    tw_settle(); /* drained: recording the LME finds the handle fenced */
    CU_ASSERT_EQUAL(tw.writes, writes);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING); /* STOPPING not persisted yet */
    tw_count_control(&resets, &aborts);
    CU_ASSERT_EQUAL(resets + aborts, 0);
    CU_ASSERT_EQUAL(tw_offsets().log_end_offset, 35);
    tw_advance(2000);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw.writes, writes);
    /* the coordinator tells it the new epoch: the failover resumes and completes */
    tw_lead(KM_MPART_WANT_STOPPED);
    mp_stop_check(5, 35);
    tw_end();
}

/* Every allocation of a failover fails in turn (once): the step is retried and the failover
 * still ends with the same LME, one ABORT, one reset and nothing open. */
static void mp_test_stopping_alloc_failures(void)
{
    int k, failed_some = 0;

    for (k = 0; k < 12; k++) {
        mp_stop_setup();
        fakehost_fail_alloc(tw.fh, k, false);
        if (tw_lead_rc(KM_MPART_WANT_STOPPED) == KM_ERR_NOMEM)
            tw_lead(KM_MPART_WANT_STOPPED); /* the binding leads it again (resync) */
        failed_some += fakehost_alloc_failures(tw.fh) != 0;
        tw_advance(1100);
        tw_advance(1100);
        mp_stop_check(5, 35);
        tw_end();
    }
    CU_ASSERT(failed_some >= 3); /* the machine allocates on this path: the faults hit */
}

/* A state write that fails is not taken for done: the state is read again, decided again. */
static void mp_test_write_failure(void)
{
    tw_begin(9);
    tw.fail_writes = 1;
    tw_lead(KM_MPART_WANT_RUNNING);
    CU_ASSERT_EQUAL(tw_desc().loaded, false);
    CU_ASSERT_FALSE(tw.fetching);
    CU_ASSERT_EQUAL(tw.lookups, 0);
    tw_advance(1100);
    CU_ASSERT_EQUAL(tw_state(), KM_MPART_MIRRORING);
    CU_ASSERT_EQUAL(tw.store.state_epoch, 2);
    tw_end();
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"transition table", mp_test_table},
        {"never mirrored: PREPARING -> MIRRORING", mp_test_fresh},
        {"PREPARING truncation against the epoch cache", mp_test_prepare_truncation},
        {"PREPARING retries lookup and ISR wait", mp_test_prepare_retry},
        {"failback: loop refused, LME epoch bump", mp_test_failback_lookup},
        {"failback: epoch from the peer's leader epoch", mp_test_failback_peer_epoch},
        {"resume from the log end; source cluster changed", mp_test_resume},
        {"pause and resume", mp_test_pause_resume},
        {"EPOCH_FENCING", mp_test_epoch_fencing},
        {"divergence truncates and resumes", mp_test_diverged},
        {"transient vs fatal, operator retry", mp_test_transient_fatal},
        {"no fetch error shown once stopped", mp_test_stopped_no_fetch_error},
        {"FAILED backoff", mp_test_failed_backoff},
        {"STOPPING", mp_test_stopping},
        {"STOPPING crash after each step", mp_test_stopping_crash},
        {"STOPPED repaired by a new leader whose log lacks the markers", mp_test_stopped_repair},
        {"STOPPING from every state, source down", mp_test_stopping_from_states},
        {"leadership lost mid-step", mp_test_leadership_lost},
        {"state write failure", mp_test_write_failure},
        {"STOPPING with failing allocations", mp_test_stopping_alloc_failures},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {
        {"mpart", NULL, NULL, NULL, NULL, tests},
        CU_SUITE_INFO_NULL,
    };

    return fh_cunit_run(suites);
}
