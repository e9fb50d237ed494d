/*
 * test_gsm.c -- the classic group state machine (broker/group/kb_gsm.h) with a manual clock and
 * an in-memory __consumer_offsets: join/sync/heartbeat/leave, KIP-394 member ids, the initial
 * rebalance delay, static members (KIP-345), protocol selection, session and sync timeouts,
 * offset commits and their validation, transactional offsets, DeleteGroups, offset expiry, and
 * reloading everything from the written records. Label: unit.
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_grec.h"
#include "kb_gsm.h"
#include "kp_batch.h"
#include "kp_errcode.h"
#include "kp_writer.h"

#define NPART 4

/* ---- the fake owner: clock, log, tokens --------------------------------------------------------
 */

typedef struct tlog_s {
    kp_writer_t part[NPART]; /* batches, offsets assigned */
    int64_t next[NPART];
    int16_t fail; /* next append fails with this error */
    int appends;
} tlog_t;

static int64_t t_now = 1700000000000LL;
static int64_t t_mono = 1000;
static tlog_t t_log;
static int t_timers_changed;

typedef struct tok_s {
    int done;
    int16_t err;
    int32_t generation;
    char member_id[256];
    char leader[256];
    char protocol[64];
    bool skip;
    size_t nmembers;
    uint8_t assignment[64];
    int32_t assignment_len;
} tok_t;

static int64_t f_now(void *o)
{
    (void)o;
    return t_now;
}

static int64_t f_mono(void *o)
{
    (void)o;
    return t_mono;
}

static int16_t f_append(void *o, int32_t partition, uint8_t *batch, size_t len, int64_t *base)
{
    kp_batch_hdr_t h;
    (void)o;
    if (t_log.fail) {
        int16_t e = t_log.fail;
        t_log.fail = 0;
        return e;
    }
    kp_batch_hdr_decode(batch, len, &h);
    kp_batch_set_base_offset(batch, len, t_log.next[partition]);
    *base = t_log.next[partition];
    t_log.next[partition] += h.lastOffsetDelta + 1;
    kp_write_raw(&t_log.part[partition], batch, len);
    t_log.appends++;
    return 0;
}

static int16_t f_marker(void *o, int32_t partition, int64_t pid, int16_t pepoch,
                        int32_t coord_epoch, bool commit, int64_t *offset)
{
    kp_batch_opts_t bo;
    kp_writer_t w;
    int16_t err;
    kp_batch_opts_init(&bo);
    bo.producerId = pid;
    bo.producerEpoch = pepoch;
    bo.transactional = true;
    kp_writer_init(&w);
    kp_batch_build_control(&w, &bo, commit ? KP_CONTROL_TYPE_COMMIT : KP_CONTROL_TYPE_ABORT,
                           coord_epoch, t_now);
    err = f_append(o, partition, w.buf, w.len, offset);
    kp_writer_free(&w);
    return err;
}

static void f_join_done(void *o, void *token, const kb_gjoin_res_t *r)
{
    tok_t *t = token;
    (void)o;
    CU_ASSERT_EQUAL(t->done, 0); /* exactly once */
    t->done++;
    t->err = r->err;
    t->generation = r->generation;
    snprintf(t->member_id, sizeof(t->member_id), "%s", r->member_id);
    snprintf(t->leader, sizeof(t->leader), "%s", r->leader);
    snprintf(t->protocol, sizeof(t->protocol), "%s", r->protocol_name ? r->protocol_name : "");
    t->skip = r->skip_assignment;
    t->nmembers = r->member_cnt;
}

static void f_sync_done(void *o, void *token, const kb_gsync_res_t *r)
{
    tok_t *t = token;
    (void)o;
    CU_ASSERT_EQUAL(t->done, 0);
    t->done++;
    t->err = r->err;
    t->assignment_len = r->assignment_len;
    if (r->assignment_len > 0 && r->assignment_len <= 64)
        memcpy(t->assignment, r->assignment, (size_t)r->assignment_len);
}

static void f_timers_changed(void *o)
{
    (void)o;
    t_timers_changed++;
}

static const kb_gsm_ops_t t_ops = {
    .now_ms = f_now,
    .mono_ms = f_mono,
    .append = f_append,
    .append_marker = f_marker,
    .join_done = f_join_done,
    .sync_done = f_sync_done,
    .timers_changed = f_timers_changed,
};

static kb_gsm_conf_t t_conf(void)
{
    kb_gsm_conf_t c = {
        .min_session_ms = 6000,
        .max_session_ms = 1800000,
        .initial_delay_ms = 3000,
        .max_size = 1000,
        .retention_ms = 7LL * 24 * 3600 * 1000,
        .retention_check_ms = 600000,
        .new_member_join_timeout_ms = 300000,
        .metadata_max_bytes = 4096,
        .partitions = NPART,
    };
    return c;
}

static kb_gsm_t *t_new(int32_t initial_delay)
{
    kb_gsm_conf_t c = t_conf();
    c.initial_delay_ms = initial_delay;
    return kb_gsm_new(&c, &t_ops, NULL);
}

static void t_log_reset(void)
{
    for (int i = 0; i < NPART; i++) {
        kp_writer_free(&t_log.part[i]);
        kp_writer_init(&t_log.part[i]);
        t_log.next[i] = 0;
    }
    t_log.fail = 0;
    t_log.appends = 0;
}

/* A new gsm loaded from everything written so far (a broker restart). */
static kb_gsm_t *t_reload(int32_t initial_delay)
{
    kb_gsm_t *gsm = t_new(initial_delay);
    for (int p = 0; p < NPART; p++) {
        int64_t next = 0;
        CU_ASSERT_EQUAL(kb_gsm_load(gsm, p, t_log.part[p].buf, t_log.part[p].len, &next), 0);
        CU_ASSERT_EQUAL(next, t_log.next[p]);
    }
    kb_gsm_load_done(gsm);
    return gsm;
}

static void advance(kb_gsm_t *gsm, int64_t ms)
{
    t_mono += ms;
    t_now += ms;
    kb_gsm_run_timers(gsm);
}

/* ---- request helpers --------------------------------------------------------------------------
 */

static const uint8_t META_A[] = {0, 1, 'a'};
static const uint8_t META_B[] = {0, 1, 'b'};

typedef struct jopt_s {
    const char *member;
    const char *instance;
    const char *p1, *p2; /* protocol names in preference order */
    const uint8_t *meta;
    int32_t meta_len;
    int32_t session;
    int32_t rebalance;
    bool v4;
    bool v9;
    const char *type;
} jopt_t;

static void join(kb_gsm_t *gsm, const char *group, tok_t *t, jopt_t o)
{
    kb_gproto_in_t p[2];
    size_t np = 0;
    kb_gjoin_in_t in;
    memset(t, 0, sizeof(*t));
    if (!o.p1)
        o.p1 = "range";
    if (!o.meta) {
        o.meta = META_A;
        o.meta_len = sizeof(META_A);
    }
    p[np++] = (kb_gproto_in_t){o.p1, o.meta, o.meta_len};
    if (o.p2)
        p[np++] = (kb_gproto_in_t){o.p2, o.meta, o.meta_len};
    memset(&in, 0, sizeof(in));
    in.group_id = group;
    in.member_id = o.member ? o.member : "";
    in.instance_id = o.instance;
    in.protocol_type = o.type ? o.type : "consumer";
    in.protos = p;
    in.nprotos = np;
    in.session_ms = o.session ? o.session : 10000;
    in.rebalance_ms = o.rebalance ? o.rebalance : 20000;
    in.client_id = "client";
    in.client_host = "/127.0.0.1";
    in.require_known_member_id = o.v4;
    in.supports_skip_assignment = o.v9;
    kb_gsm_join(gsm, &in, t);
}

static void sync_(kb_gsm_t *gsm, const char *group, tok_t *t, const char *member, int32_t gen,
                  const kb_gassign_in_t *a, size_t na)
{
    kb_gsync_in_t in = {.group_id = group,
                        .member_id = member,
                        .generation = gen,
                        .assignments = a,
                        .nassignments = na};
    memset(t, 0, sizeof(*t));
    kb_gsm_sync(gsm, &in, t);
}

static int16_t commit1(kb_gsm_t *gsm, const char *group, const char *member, int32_t gen,
                       const char *topic, int32_t part, int64_t off, int16_t version)
{
    kb_gcommit_part_t p = {
        .topic = topic, .partition = part, .offset = off, .leader_epoch = 7, .metadata = "meta"};
    kb_gcommit_in_t in = {.group_id = group,
                          .generation = gen,
                          .member_id = member,
                          .retention_ms = -1,
                          .version = version,
                          .parts = &p,
                          .nparts = 1};
    kb_gsm_commit(gsm, &in);
    return p.err;
}

static int64_t committed(kb_gsm_t *gsm, const char *group, const char *topic, int32_t part)
{
    kb_group_t *g = kb_gsm_group(gsm, group);
    const kb_goffset_t *o = g ? kb_gsm_offset(g, topic, part) : NULL;
    return o ? o->offset : -1;
}

static int gstate(kb_gsm_t *gsm, const char *group)
{
    kb_group_t *g = kb_gsm_group(gsm, group);
    return g ? g->state : -1;
}

/* One member joins an empty group with the KIP-394 exchange and gets through the initial delay;
 * returns its member id in @p id. */
static void first_member(kb_gsm_t *gsm, const char *group, char *id, int32_t delay)
{
    tok_t t, s;
    join(gsm, group, &t, (jopt_t){.v4 = true});
    CU_ASSERT_EQUAL(t.done, 1);
    CU_ASSERT_EQUAL(t.err, KP_ERR_MEMBER_ID_REQUIRED);
    CU_ASSERT(strncmp(t.member_id, "client-", 7) == 0 && strlen(t.member_id) == 7 + 36);
    strcpy(id, t.member_id);
    join(gsm, group, &t, (jopt_t){.member = id, .v4 = true});
    CU_ASSERT_EQUAL(t.done, 0); /* waits for the initial delay */
    CU_ASSERT_EQUAL(gstate(gsm, group), KB_GS_PREPARING);
    advance(gsm, delay);
    CU_ASSERT_EQUAL(t.done, 1);
    CU_ASSERT_EQUAL(t.err, 0);
    CU_ASSERT_STRING_EQUAL(t.leader, id);
    CU_ASSERT_EQUAL(t.nmembers, 1);
    CU_ASSERT_STRING_EQUAL(t.protocol, "range");
    CU_ASSERT_EQUAL(gstate(gsm, group), KB_GS_COMPLETING);
    {
        kb_gassign_in_t a = {id, (const uint8_t *)"A1", 2};
        sync_(gsm, group, &s, id, t.generation, &a, 1);
    }
    CU_ASSERT_EQUAL(s.done, 1);
    CU_ASSERT_EQUAL(s.err, 0);
    CU_ASSERT_EQUAL(s.assignment_len, 2);
    CU_ASSERT_EQUAL(gstate(gsm, group), KB_GS_STABLE);
}

/* ---- tests ------------------------------------------------------------------------------------
 */

static void test_join_sync_rebalance_leave(void)
{
    kb_gsm_t *gsm;
    char a[256], b[256];
    tok_t ta, tb, sa, sb;
    kb_group_t *g;
    t_log_reset();
    gsm = t_new(3000);
    first_member(gsm, "g1", a, 3000);
    g = kb_gsm_group(gsm, "g1");
    CU_ASSERT_EQUAL(g->generation, 1);
    CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "g1", a, NULL, 1), 0);
    CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "g1", a, NULL, 0), KP_ERR_ILLEGAL_GENERATION);
    CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "g1", "nobody", NULL, 1), KP_ERR_UNKNOWN_MEMBER_ID);
    CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "nogroup", a, NULL, 1), KP_ERR_UNKNOWN_MEMBER_ID);
    CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "", a, NULL, 1), KP_ERR_INVALID_GROUP_ID);

    /* a second member (v0-v3 style, no MEMBER_ID_REQUIRED): the group rebalances */
    join(gsm, "g1", &tb, (jopt_t){0});
    CU_ASSERT_EQUAL(tb.done, 0);
    CU_ASSERT_EQUAL(gstate(gsm, "g1"), KB_GS_PREPARING);
    CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "g1", a, NULL, 1), KP_ERR_REBALANCE_IN_PROGRESS);
    join(gsm, "g1", &ta, (jopt_t){.member = a});
    /* everyone rejoined: the join phase completes at once */
    CU_ASSERT_EQUAL(ta.done, 1);
    CU_ASSERT_EQUAL(tb.done, 1);
    CU_ASSERT_EQUAL(ta.generation, 2);
    CU_ASSERT_EQUAL(tb.generation, 2);
    CU_ASSERT_STRING_EQUAL(ta.leader, a);
    CU_ASSERT_STRING_EQUAL(tb.leader, a);
    CU_ASSERT_EQUAL(ta.nmembers, 2); /* only the leader gets the members */
    CU_ASSERT_EQUAL(tb.nmembers, 0);
    strcpy(b, tb.member_id);
    /* the follower syncs first and waits for the leader */
    sync_(gsm, "g1", &sb, b, 2, NULL, 0);
    CU_ASSERT_EQUAL(sb.done, 0);
    CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "g1", b, NULL, 2), 0);
    /* offsets cannot be committed between join and sync */
    CU_ASSERT_EQUAL(commit1(gsm, "g1", b, 2, "t", 0, 1, 8), KP_ERR_REBALANCE_IN_PROGRESS);
    {
        kb_gassign_in_t as[2] = {{a, (const uint8_t *)"AA", 2}, {b, (const uint8_t *)"BBB", 3}};
        sync_(gsm, "g1", &sa, a, 2, as, 2);
    }
    CU_ASSERT_EQUAL(sa.done, 1);
    CU_ASSERT_EQUAL(sb.done, 1);
    CU_ASSERT_EQUAL(sa.assignment_len, 2);
    CU_ASSERT_EQUAL(sb.assignment_len, 3);
    CU_ASSERT(memcmp(sb.assignment, "BBB", 3) == 0);
    CU_ASSERT_EQUAL(gstate(gsm, "g1"), KB_GS_STABLE);
    /* a stable follower rejoining with the same metadata just gets the generation */
    join(gsm, "g1", &tb, (jopt_t){.member = b});
    CU_ASSERT_EQUAL(tb.done, 1);
    CU_ASSERT_EQUAL(tb.generation, 2);
    CU_ASSERT_EQUAL(gstate(gsm, "g1"), KB_GS_STABLE);
    /* a late SyncGroup in Stable gets the current assignment */
    sync_(gsm, "g1", &sb, b, 2, NULL, 0);
    CU_ASSERT(sb.done == 1 && sb.err == 0 && sb.assignment_len == 3);
    CU_ASSERT_EQUAL(commit1(gsm, "g1", b, 2, "t", 0, 42, 8), 0);
    CU_ASSERT_EQUAL(committed(gsm, "g1", "t", 0), 42);

    /* the leader leaves: b rejoins alone and becomes leader of generation 3 */
    {
        kb_gleave_in_t l = {.member_id = a};
        int16_t e = -1;
        CU_ASSERT_EQUAL(kb_gsm_leave(gsm, "g1", &l, 1, &e), 0);
        CU_ASSERT_EQUAL(e, 0);
        CU_ASSERT_EQUAL(kb_gsm_leave(gsm, "g1", &l, 1, &e), 0);
        CU_ASSERT_EQUAL(e, KP_ERR_UNKNOWN_MEMBER_ID);
    }
    CU_ASSERT_EQUAL(gstate(gsm, "g1"), KB_GS_PREPARING);
    CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "g1", b, NULL, 2), KP_ERR_REBALANCE_IN_PROGRESS);
    join(gsm, "g1", &tb, (jopt_t){.member = b});
    CU_ASSERT_EQUAL(tb.done, 1);
    CU_ASSERT_EQUAL(tb.generation, 3);
    CU_ASSERT_STRING_EQUAL(tb.leader, b);
    CU_ASSERT_EQUAL(tb.nmembers, 1);
    {
        kb_gassign_in_t as = {b, (const uint8_t *)"X", 1};
        sync_(gsm, "g1", &sb, b, 3, &as, 1);
    }
    CU_ASSERT_EQUAL(sb.err, 0);

    /* the last member leaves: the group becomes Empty with a new generation */
    {
        kb_gleave_in_t l = {.member_id = b};
        int16_t e;
        kb_gsm_leave(gsm, "g1", &l, 1, &e);
        CU_ASSERT_EQUAL(e, 0);
    }
    g = kb_gsm_group(gsm, "g1");
    CU_ASSERT_EQUAL(g->state, KB_GS_EMPTY);
    CU_ASSERT_EQUAL(g->generation, 4);
    CU_ASSERT_EQUAL(committed(gsm, "g1", "t", 0), 42);
    kb_gsm_free(gsm);
}

static void test_errors(void)
{
    kb_gsm_t *gsm;
    char a[256];
    tok_t t;
    t_log_reset();
    gsm = t_new(0);
    join(gsm, "", &t, (jopt_t){0});
    CU_ASSERT_EQUAL(t.err, KP_ERR_INVALID_GROUP_ID);
    join(gsm, "g", &t, (jopt_t){.session = 10});
    CU_ASSERT_EQUAL(t.err, KP_ERR_INVALID_SESSION_TIMEOUT);
    join(gsm, "g", &t, (jopt_t){.member = "someone"});
    CU_ASSERT_EQUAL(t.err, KP_ERR_UNKNOWN_MEMBER_ID);
    join(gsm, "g", &t, (jopt_t){.type = ""});
    CU_ASSERT_EQUAL(t.err, KP_ERR_INCONSISTENT_GROUP_PROTOCOL);
    CU_ASSERT_PTR_NULL(kb_gsm_group(gsm, "g")); /* failed joins leave nothing behind */
    first_member(gsm, "g", a, 0);
    join(gsm, "g", &t, (jopt_t){.type = "connect"});
    CU_ASSERT_EQUAL(t.err, KP_ERR_INCONSISTENT_GROUP_PROTOCOL);
    join(gsm, "g", &t, (jopt_t){.p1 = "roundrobin"});
    CU_ASSERT_EQUAL(t.err, KP_ERR_INCONSISTENT_GROUP_PROTOCOL);
    {
        tok_t s = {0};
        kb_gsync_in_t in = {.group_id = "g",
                            .member_id = a,
                            .generation = 1,
                            .protocol_type = "consumer",
                            .protocol_name = "roundrobin"};
        kb_gsm_sync(gsm, &in, &s);
        CU_ASSERT_EQUAL(s.err, KP_ERR_INCONSISTENT_GROUP_PROTOCOL);
        memset(&s, 0, sizeof(s));
        in.protocol_name = "range";
        kb_gsm_sync(gsm, &in, &s);
        CU_ASSERT_EQUAL(s.err, 0);
        sync_(gsm, "g", &s, a, 7, NULL, 0);
        CU_ASSERT_EQUAL(s.err, KP_ERR_ILLEGAL_GENERATION);
        sync_(gsm, "g", &s, "x", 1, NULL, 0);
        CU_ASSERT_EQUAL(s.err, KP_ERR_UNKNOWN_MEMBER_ID);
        sync_(gsm, "nogroup", &s, "x", 1, NULL, 0);
        CU_ASSERT_EQUAL(s.err, KP_ERR_UNKNOWN_MEMBER_ID);
    }
    kb_gsm_free(gsm);
}

static void test_initial_delay_and_selection(void)
{
    kb_gsm_t *gsm;
    tok_t t1, t2, t3;
    t_log_reset();
    gsm = t_new(3000);
    /* preferences: m1 range>rr, m2 rr>range, m3 rr only -> only rr is common */
    join(gsm, "g", &t1, (jopt_t){.p1 = "range", .p2 = "roundrobin", .rebalance = 10000});
    advance(gsm, 2000);
    join(gsm, "g", &t2, (jopt_t){.p1 = "roundrobin", .p2 = "range", .rebalance = 10000});
    advance(gsm, 1000); /* first delay over, but a member arrived: extended */
    CU_ASSERT_EQUAL(t1.done, 0);
    join(gsm, "g", &t3, (jopt_t){.p1 = "roundrobin", .rebalance = 10000});
    advance(gsm, 2999);
    CU_ASSERT_EQUAL(t1.done, 0);
    advance(gsm, 1);
    CU_ASSERT_EQUAL(t1.done, 0); /* extended again for m3 */
    advance(gsm, 3000);
    CU_ASSERT_EQUAL(t1.done, 1);
    CU_ASSERT_EQUAL(t2.done, 1);
    CU_ASSERT_EQUAL(t3.done, 1);
    CU_ASSERT_STRING_EQUAL(t1.protocol, "roundrobin");
    CU_ASSERT_EQUAL(t1.nmembers, 3); /* the first member leads */
    CU_ASSERT_STRING_EQUAL(t2.leader, t1.member_id);
    kb_gsm_free(gsm);

    /* the extension stops at the rebalance timeout */
    gsm = t_new(3000);
    join(gsm, "h", &t1, (jopt_t){.rebalance = 4000});
    advance(gsm, 2000);
    join(gsm, "h", &t2, (jopt_t){.rebalance = 4000});
    advance(gsm, 1000);
    CU_ASSERT_EQUAL(t1.done, 0);
    advance(gsm, 1000); /* 3000 + min(3000, 4000 - 3000) */
    CU_ASSERT_EQUAL(t1.done, 1);
    CU_ASSERT_EQUAL(t2.done, 1);
    kb_gsm_free(gsm);
}

static void test_session_and_sync_timeouts(void)
{
    kb_gsm_t *gsm;
    char a[256], b[256];
    tok_t ta, tb, sa;
    t_log_reset();
    gsm = t_new(0);
    first_member(gsm, "g", a, 0);
    join(gsm, "g", &tb, (jopt_t){.session = 10000});
    join(gsm, "g", &ta, (jopt_t){.member = a});
    CU_ASSERT_EQUAL(tb.done, 1);
    strcpy(b, tb.member_id);
    /* the leader syncs; b never sends SyncGroup: removed after the rebalance timeout */
    {
        kb_gassign_in_t as = {a, (const uint8_t *)"A", 1};
        sync_(gsm, "g", &sa, a, 2, &as, 1);
    }
    CU_ASSERT_EQUAL(gstate(gsm, "g"), KB_GS_STABLE);
    for (int i = 0; i < 4; i++) {
        advance(gsm, 5000);
        CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "g", a, NULL, 2),
                        i < 3 ? 0 : KP_ERR_REBALANCE_IN_PROGRESS);
        CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "g", b, NULL, 2),
                        i < 3 ? 0 : KP_ERR_UNKNOWN_MEMBER_ID);
    }
    CU_ASSERT_EQUAL(kb_gsm_group(gsm, "g")->nmembers, 1);
    CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "g", b, NULL, 2), KP_ERR_UNKNOWN_MEMBER_ID);
    join(gsm, "g", &ta, (jopt_t){.member = a});
    CU_ASSERT_EQUAL(ta.generation, 3);
    {
        kb_gassign_in_t as = {a, (const uint8_t *)"A", 1};
        sync_(gsm, "g", &sa, a, 3, &as, 1);
    }
    /* now a stops heartbeating: the session expires, the group empties */
    advance(gsm, 9999);
    CU_ASSERT_EQUAL(gstate(gsm, "g"), KB_GS_STABLE);
    advance(gsm, 1);
    CU_ASSERT_EQUAL(gstate(gsm, "g"), KB_GS_EMPTY);
    CU_ASSERT_EQUAL(kb_gsm_group(gsm, "g")->generation, 4);

    /* a pending (MEMBER_ID_REQUIRED) member that never comes back is forgotten */
    join(gsm, "g", &ta, (jopt_t){.v4 = true});
    CU_ASSERT_EQUAL(ta.err, KP_ERR_MEMBER_ID_REQUIRED);
    CU_ASSERT_EQUAL(kb_gsm_group(gsm, "g")->npending, 1);
    advance(gsm, 10000);
    CU_ASSERT_EQUAL(kb_gsm_group(gsm, "g")->npending, 0);

    /* a member that does not rejoin a rebalance is dropped at the rebalance timeout */
    first_member(gsm, "r", a, 0);
    join(gsm, "r", &tb, (jopt_t){.session = 30000, .rebalance = 20000});
    CU_ASSERT_EQUAL(tb.done, 0);
    for (int i = 0; i < 2; i++) { /* a keeps its session alive but never rejoins */
        advance(gsm, 9000);
        CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "r", a, NULL, 1), KP_ERR_REBALANCE_IN_PROGRESS);
    }
    advance(gsm, 1999);
    CU_ASSERT_EQUAL(tb.done, 0);
    advance(gsm, 1);
    CU_ASSERT_EQUAL(tb.done, 1);
    CU_ASSERT_EQUAL(tb.err, 0);
    CU_ASSERT_EQUAL(tb.nmembers, 1); /* alone, and leader */
    CU_ASSERT_STRING_EQUAL(tb.leader, tb.member_id);
    CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "r", a, NULL, 1), KP_ERR_UNKNOWN_MEMBER_ID);
    kb_gsm_free(gsm);
}

static void test_static_members(void)
{
    kb_gsm_t *gsm;
    tok_t t1, t2, t3, s1, s2;
    char m1[256], m2[256];
    t_log_reset();
    gsm = t_new(0);
    /* static members skip MEMBER_ID_REQUIRED */
    join(gsm, "s", &t1, (jopt_t){.instance = "i1", .v4 = true, .v9 = true});
    join(gsm, "s", &t2, (jopt_t){.instance = "i2", .v4 = true, .v9 = true});
    advance(gsm, 0);
    CU_ASSERT(t1.done && t1.err == 0 && t2.done && t2.err == 0);
    CU_ASSERT(strncmp(t1.member_id, "i1-", 3) == 0);
    strcpy(m1, t1.member_id);
    strcpy(m2, t2.member_id);
    {
        kb_gassign_in_t as[2] = {{m1, (const uint8_t *)"1", 1}, {m2, (const uint8_t *)"2", 1}};
        sync_(gsm, "s", &s2, m2, 1, NULL, 0);
        sync_(gsm, "s", &s1, m1, 1, as, 2);
    }
    CU_ASSERT(s1.err == 0 && s2.err == 0 && s2.assignment[0] == '2');
    /* i2 restarts (unknown member id, same metadata): no rebalance, a new member id */
    join(gsm, "s", &t2, (jopt_t){.instance = "i2", .v9 = true});
    CU_ASSERT_EQUAL(t2.done, 1);
    CU_ASSERT_EQUAL(t2.err, 0);
    CU_ASSERT_STRING_NOT_EQUAL(t2.member_id, m2);
    CU_ASSERT_EQUAL(t2.generation, 1);
    CU_ASSERT_FALSE(t2.skip);
    CU_ASSERT_EQUAL(gstate(gsm, "s"), KB_GS_STABLE);
    /* the old incarnation is fenced, the new one works */
    CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "s", m2, "i2", 1), KP_ERR_FENCED_INSTANCE_ID);
    strcpy(m2, t2.member_id);
    CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "s", m2, "i2", 1), 0);
    sync_(gsm, "s", &s2, m2, 1, NULL, 0);
    CU_ASSERT(s2.err == 0 && s2.assignment_len == 1 && s2.assignment[0] == '2');
    /* the static leader restarts: v9 gets SkipAssignment and the members */
    join(gsm, "s", &t1, (jopt_t){.instance = "i1", .v9 = true});
    CU_ASSERT(t1.done && t1.err == 0 && t1.skip && t1.nmembers == 2);
    CU_ASSERT_STRING_EQUAL(t1.leader, t1.member_id);
    strcpy(m1, t1.member_id);
    /* an old-version static leader restarting gets the old leader id and no members */
    join(gsm, "s", &t1, (jopt_t){.instance = "i1"});
    CU_ASSERT(t1.done && t1.err == 0 && !t1.skip && t1.nmembers == 0);
    CU_ASSERT_STRING_EQUAL(t1.leader, m1);
    CU_ASSERT_STRING_NOT_EQUAL(t1.member_id, m1);
    strcpy(m1, t1.member_id);
    /* joining with a stale member id for an instance is fenced */
    join(gsm, "s", &t2, (jopt_t){.instance = "i2", .member = "stale"});
    CU_ASSERT_EQUAL(t2.err, KP_ERR_FENCED_INSTANCE_ID);
    /* a protocol change by a static member rebalances the group */
    join(gsm, "s", &t2, (jopt_t){.instance = "i2", .p1 = "range", .meta = META_B, .meta_len = 3});
    CU_ASSERT_EQUAL(t2.done, 1); /* same protocol name selected: metadata change alone persists */
    strcpy(m2, t2.member_id);
    join(gsm, "s", &t2, (jopt_t){.instance = "i2", .member = m2, .meta = META_A, .meta_len = 3});
    CU_ASSERT_EQUAL(t2.done, 0); /* known member with new metadata: rebalance */
    CU_ASSERT_EQUAL(gstate(gsm, "s"), KB_GS_PREPARING);
    /* the restarting i2 fences its own pending join */
    join(gsm, "s", &t3, (jopt_t){.instance = "i2"});
    CU_ASSERT_EQUAL(t3.done, 0);
    CU_ASSERT_EQUAL(t2.done, 1);
    CU_ASSERT_EQUAL(t2.err, KP_ERR_FENCED_INSTANCE_ID);
    /* static members that do not rejoin are kept: i1 never rejoins, the rebalance timeout
     * completes the phase with i2 only; i1 stays a member until its session expires */
    for (int i = 0; i < 2; i++) {
        advance(gsm, 9000);
        CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "s", m1, "i1", 1), KP_ERR_REBALANCE_IN_PROGRESS);
    }
    CU_ASSERT_EQUAL(t3.done, 0);
    advance(gsm, 2000);
    CU_ASSERT_EQUAL(t3.done, 1);
    CU_ASSERT_EQUAL(t3.err, 0);
    CU_ASSERT_EQUAL(t3.generation, 2);
    CU_ASSERT_EQUAL(kb_gsm_group(gsm, "s")->nmembers, 2);
    CU_ASSERT_EQUAL(t3.nmembers, 2); /* i2 leads now and sees i1 too */
    CU_ASSERT_STRING_EQUAL(t3.leader, t3.member_id);
    /* admin removal of a static member by instance id (member id "") */
    {
        kb_gleave_in_t l[2] = {{.member_id = "", .instance_id = "i1"},
                               {.member_id = "wrong", .instance_id = "i2"}};
        int16_t e[2];
        kb_gsm_leave(gsm, "s", l, 2, e);
        CU_ASSERT_EQUAL(e[0], 0);
        CU_ASSERT_EQUAL(e[1], KP_ERR_FENCED_INSTANCE_ID);
    }
    kb_gsm_free(gsm);
}

static void test_offset_commits(void)
{
    kb_gsm_t *gsm;
    char a[256];
    t_log_reset();
    gsm = t_new(0);
    /* simple commits (generation -1) create a group without a protocol */
    CU_ASSERT_EQUAL(commit1(gsm, "simple", "", -1, "t", 1, 100, 8), 0);
    CU_ASSERT_EQUAL(committed(gsm, "simple", "t", 1), 100);
    CU_ASSERT_PTR_NULL(kb_gsm_group(gsm, "simple")->protocol_type);
    /* unknown groups with a generation */
    CU_ASSERT_EQUAL(commit1(gsm, "none", "m", 3, "t", 0, 1, 8), KP_ERR_ILLEGAL_GENERATION);
    CU_ASSERT_EQUAL(commit1(gsm, "none", "m", 3, "t", 0, 1, 9), KP_ERR_GROUP_ID_NOT_FOUND);
    CU_ASSERT_PTR_NULL(kb_gsm_group(gsm, "none"));
    /* members of a real group */
    first_member(gsm, "g", a, 0);
    CU_ASSERT_EQUAL(commit1(gsm, "g", a, 1, "t", 0, 5, 8), 0);
    CU_ASSERT_EQUAL(commit1(gsm, "g", a, 0, "t", 0, 6, 8), KP_ERR_ILLEGAL_GENERATION);
    CU_ASSERT_EQUAL(commit1(gsm, "g", "x", 1, "t", 0, 6, 8), KP_ERR_UNKNOWN_MEMBER_ID);
    CU_ASSERT_EQUAL(commit1(gsm, "g", "", -1, "t", 0, 6, 8), KP_ERR_UNKNOWN_MEMBER_ID);
    CU_ASSERT_EQUAL(committed(gsm, "g", "t", 0), 5);
    {
        char big[5000];
        kb_gcommit_part_t p[3] = {
            {.topic = "t", .partition = 1, .offset = 9, .leader_epoch = -1, .metadata = big},
            {.topic = "t", .partition = 2, .offset = 10, .leader_epoch = -1},
            {.topic = "gone",
             .partition = 0,
             .offset = 1,
             .err = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION},
        };
        kb_gcommit_in_t in = {.group_id = "g",
                              .generation = 1,
                              .member_id = a,
                              .retention_ms = -1,
                              .version = 8,
                              .parts = p,
                              .nparts = 3};
        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        kb_gsm_commit(gsm, &in);
        CU_ASSERT_EQUAL(p[0].err, KP_ERR_OFFSET_METADATA_TOO_LARGE);
        CU_ASSERT_EQUAL(p[1].err, 0);
        CU_ASSERT_EQUAL(p[2].err, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
        /* append failures map to coordinator errors */
        t_log.fail = KP_ERR_KAFKA_STORAGE_ERROR;
        p[1].err = 0;
        kb_gsm_commit(gsm, &in);
        CU_ASSERT_EQUAL(p[1].err, KP_ERR_NOT_COORDINATOR);
        t_log.fail = KP_ERR_MESSAGE_TOO_LARGE;
        p[1].err = 0;
        kb_gsm_commit(gsm, &in);
        CU_ASSERT_EQUAL(p[1].err, KP_ERR_INVALID_COMMIT_OFFSET_SIZE);
    }
    CU_ASSERT_EQUAL(committed(gsm, "g", "t", 2), 10);
    {
        const kb_goffset_t *o = kb_gsm_offset(kb_gsm_group(gsm, "g"), "t", 0);
        CU_ASSERT_EQUAL(o->leader_epoch, 7);
        CU_ASSERT_STRING_EQUAL(o->metadata, "meta");
        CU_ASSERT_EQUAL(o->commit_ts, t_now);
    }
    kb_gsm_free(gsm);
}

static void test_reload(void)
{
    kb_gsm_t *gsm;
    char a[256];
    tok_t t, s;
    kb_group_t *g;
    kb_gmember_t *m;
    t_log_reset();
    gsm = t_new(0);
    first_member(gsm, "g", a, 0);
    CU_ASSERT_EQUAL(commit1(gsm, "g", a, 1, "topic", 3, 77, 8), 0);
    CU_ASSERT_EQUAL(commit1(gsm, "g", a, 1, "topic", 3, 78, 8), 0);
    CU_ASSERT_EQUAL(commit1(gsm, "s", "", -1, "other", 0, 5, 8), 0);
    /* an empty consumer group (left) keeps its offsets */
    first_member(gsm, "e", t.member_id, 0);
    {
        kb_gleave_in_t l = {.member_id = t.member_id};
        int16_t e;
        CU_ASSERT_EQUAL(commit1(gsm, "e", t.member_id, 1, "x", 0, 9, 8), 0);
        kb_gsm_leave(gsm, "e", &l, 1, &e);
    }
    kb_gsm_free(gsm);

    gsm = t_reload(0);
    g = kb_gsm_group(gsm, "g");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(g->state, KB_GS_STABLE);
    CU_ASSERT_EQUAL(g->generation, 1);
    CU_ASSERT_STRING_EQUAL(g->protocol_type, "consumer");
    CU_ASSERT_STRING_EQUAL(g->protocol_name, "range");
    CU_ASSERT_STRING_EQUAL(g->leader, a);
    m = g->members;
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_STRING_EQUAL(m->id, a);
    CU_ASSERT(m->assignment_len == 2 && memcmp(m->assignment, "A1", 2) == 0);
    CU_ASSERT_EQUAL(committed(gsm, "g", "topic", 3), 78);
    CU_ASSERT_EQUAL(committed(gsm, "s", "other", 0), 5);
    CU_ASSERT_EQUAL(gstate(gsm, "e"), KB_GS_EMPTY);
    CU_ASSERT_EQUAL(kb_gsm_group(gsm, "e")->generation, 2);
    CU_ASSERT_EQUAL(committed(gsm, "e", "x", 0), 9);
    /* the loaded member carries on: heartbeat, SyncGroup gives its assignment */
    CU_ASSERT_EQUAL(kb_gsm_heartbeat(gsm, "g", a, NULL, 1), 0);
    sync_(gsm, "g", &s, a, 1, NULL, 0);
    CU_ASSERT(s.err == 0 && s.assignment_len == 2);
    /* and its session runs on: without heartbeats the member goes and the group empties */
    advance(gsm, 9999);
    CU_ASSERT_EQUAL(gstate(gsm, "g"), KB_GS_STABLE);
    advance(gsm, 1);
    CU_ASSERT_EQUAL(gstate(gsm, "g"), KB_GS_EMPTY);
    CU_ASSERT_EQUAL(kb_gsm_group(gsm, "g")->generation, 2);
    (void)t;
    kb_gsm_free(gsm);
}

static void test_txn_offsets(void)
{
    kb_gsm_t *gsm;
    kb_group_t *g;
    int32_t p;
    kb_gcommit_part_t part = {.topic = "t", .partition = 0, .offset = 50, .leader_epoch = -1};
    kb_gcommit_in_t in = {.group_id = "tg",
                          .generation = -1,
                          .member_id = "",
                          .retention_ms = -1,
                          .parts = &part,
                          .nparts = 1};
    t_log_reset();
    gsm = t_new(0);
    CU_ASSERT_EQUAL(commit1(gsm, "tg", "", -1, "t", 0, 10, 8), 0);
    kb_gsm_txn_commit(gsm, &in, 1000, 0);
    CU_ASSERT_EQUAL(part.err, 0);
    g = kb_gsm_group(gsm, "tg");
    p = g->partition;
    CU_ASSERT(kb_gsm_txn_pending(g, "t", 0));
    CU_ASSERT_FALSE(kb_gsm_txn_pending(g, "t", 1));
    CU_ASSERT_EQUAL(committed(gsm, "tg", "t", 0), 10); /* not visible before the marker */
    /* a marker on another partition or for another producer does nothing */
    CU_ASSERT_EQUAL(kb_gsm_txn_complete(gsm, (p + 1) % NPART, 1000, true), 0);
    CU_ASSERT_EQUAL(kb_gsm_txn_complete(gsm, p, 999, true), 0);
    CU_ASSERT_EQUAL(kb_gsm_txn_marker(gsm, p, 1000, 0, 5, true), 0);
    CU_ASSERT_FALSE(kb_gsm_txn_pending(g, "t", 0));
    CU_ASSERT_EQUAL(committed(gsm, "tg", "t", 0), 50);
    /* aborted: dropped */
    part.offset = 60;
    kb_gsm_txn_commit(gsm, &in, 1001, 0);
    CU_ASSERT(kb_gsm_txn_pending(g, "t", 0));
    CU_ASSERT_EQUAL(kb_gsm_txn_marker(gsm, p, 1001, 0, 5, false), 0);
    CU_ASSERT_EQUAL(committed(gsm, "tg", "t", 0), 50);
    /* a plain commit after the transactional one wins over it */
    part.offset = 70;
    kb_gsm_txn_commit(gsm, &in, 1002, 0);
    CU_ASSERT_EQUAL(commit1(gsm, "tg", "", -1, "t", 0, 65, 8), 0);
    CU_ASSERT_EQUAL(kb_gsm_txn_marker(gsm, p, 1002, 0, 5, true), 0);
    CU_ASSERT_EQUAL(committed(gsm, "tg", "t", 0), 65);
    /* an open transaction survives a restart as pending; its marker still applies */
    part.offset = 80;
    kb_gsm_txn_commit(gsm, &in, 1003, 0);
    kb_gsm_free(gsm);
    gsm = t_reload(0);
    g = kb_gsm_group(gsm, "tg");
    CU_ASSERT_EQUAL(committed(gsm, "tg", "t", 0), 65);
    CU_ASSERT(kb_gsm_txn_pending(g, "t", 0));
    CU_ASSERT_EQUAL(kb_gsm_txn_marker(gsm, p, 1003, 0, 5, true), 0);
    CU_ASSERT_EQUAL(committed(gsm, "tg", "t", 0), 80);
    kb_gsm_free(gsm);
    gsm = t_reload(0);
    CU_ASSERT_EQUAL(committed(gsm, "tg", "t", 0), 80);
    CU_ASSERT_FALSE(kb_gsm_txn_pending(kb_gsm_group(gsm, "tg"), "t", 0));
    /* KIP-447 fields are validated */
    in.generation = 3;
    in.member_id = "m";
    kb_gsm_txn_commit(gsm, &in, 1004, 0);
    CU_ASSERT_EQUAL(part.err, KP_ERR_UNKNOWN_MEMBER_ID);
    kb_gsm_free(gsm);
}

static void test_delete_and_expiry(void)
{
    kb_gsm_t *gsm;
    char a[256];
    tok_t t;
    t_log_reset();
    gsm = t_new(0);
    first_member(gsm, "g", a, 0);
    CU_ASSERT_EQUAL(commit1(gsm, "g", a, 1, "t", 0, 1, 8), 0);
    CU_ASSERT_EQUAL(kb_gsm_delete_group(gsm, "g"), KP_ERR_NON_EMPTY_GROUP);
    CU_ASSERT_EQUAL(kb_gsm_delete_group(gsm, "nope"), KP_ERR_GROUP_ID_NOT_FOUND);
    {
        kb_gleave_in_t l = {.member_id = a};
        int16_t e;
        kb_gsm_leave(gsm, "g", &l, 1, &e);
    }
    CU_ASSERT_EQUAL(kb_gsm_delete_group(gsm, "g"), 0);
    CU_ASSERT_PTR_NULL(kb_gsm_group(gsm, "g"));
    kb_gsm_free(gsm);
    gsm = t_reload(0);
    CU_ASSERT_PTR_NULL(kb_gsm_group(gsm, "g")); /* the tombstones hold after a restart */

    /* expiry: a simple group's offsets expire a retention after their commit */
    CU_ASSERT_EQUAL(commit1(gsm, "simple", "", -1, "t", 0, 1, 8), 0);
    advance(gsm, 3LL * 24 * 3600 * 1000);
    CU_ASSERT_EQUAL(commit1(gsm, "simple", "", -1, "t", 1, 1, 8), 0);
    /* an empty consumer group's offsets expire a retention after it became empty */
    first_member(gsm, "c", a, 0);
    CU_ASSERT_EQUAL(commit1(gsm, "c", a, 1, "t", 0, 1, 8), 0);
    advance(gsm, 2LL * 24 * 3600 * 1000);
    {
        kb_gleave_in_t l = {.member_id = a};
        int16_t e;
        kb_gsm_leave(gsm, "c", &l, 1, &e);
    }
    advance(gsm, 4LL * 24 * 3600 * 1000); /* t0 + 9 days: simple t-0 is 9 days old */
    CU_ASSERT_EQUAL(committed(gsm, "simple", "t", 0), -1);
    CU_ASSERT_EQUAL(committed(gsm, "simple", "t", 1), 1);
    CU_ASSERT_EQUAL(committed(gsm, "c", "t", 0), 1); /* empty for only 4 days */
    advance(gsm, 3LL * 24 * 3600 * 1000);
    CU_ASSERT_EQUAL(committed(gsm, "c", "t", 0), -1);
    CU_ASSERT_PTR_NULL(kb_gsm_group(gsm, "c")); /* empty and offset-less: removed */
    CU_ASSERT_PTR_NULL(kb_gsm_group(gsm, "simple"));
    /* retention given with the commit (OffsetCommit v2-v4) */
    {
        kb_gcommit_part_t p = {.topic = "t", .partition = 0, .offset = 3, .leader_epoch = -1};
        kb_gcommit_in_t in = {.group_id = "r",
                              .generation = -1,
                              .member_id = "",
                              .retention_ms = 60000,
                              .version = 2,
                              .parts = &p,
                              .nparts = 1};
        kb_gsm_commit(gsm, &in);
        CU_ASSERT_EQUAL(p.err, 0);
        CU_ASSERT_EQUAL(kb_gsm_offset(kb_gsm_group(gsm, "r"), "t", 0)->expire_ts, t_now + 60000);
        advance(gsm, 60000);
        CU_ASSERT_EQUAL(kb_gsm_expire_offsets(gsm), 1);
    }
    kb_gsm_free(gsm);
    gsm = t_reload(0);
    CU_ASSERT_PTR_NULL(kb_gsm_group(gsm, "c"));
    CU_ASSERT_PTR_NULL(kb_gsm_group(gsm, "r"));
    (void)t;
    kb_gsm_free(gsm);
}

static void test_topic_deleted_and_free(void)
{
    kb_gsm_t *gsm;
    tok_t t1, t2;
    t_log_reset();
    gsm = t_new(3000);
    CU_ASSERT_EQUAL(commit1(gsm, "g", "", -1, "a", 0, 1, 8), 0);
    CU_ASSERT_EQUAL(commit1(gsm, "g", "", -1, "b", 0, 2, 8), 0);
    kb_gsm_topic_deleted(gsm, "a");
    CU_ASSERT_EQUAL(committed(gsm, "g", "a", 0), -1);
    CU_ASSERT_EQUAL(committed(gsm, "g", "b", 0), 2);
    kb_gsm_free(gsm);
    gsm = t_reload(3000);
    CU_ASSERT_EQUAL(committed(gsm, "g", "a", 0), -1);
    CU_ASSERT_EQUAL(committed(gsm, "g", "b", 0), 2);
    /* pending joins are answered NOT_COORDINATOR when the coordinator goes away */
    join(gsm, "h", &t1, (jopt_t){0});
    join(gsm, "h", &t2, (jopt_t){0});
    CU_ASSERT_EQUAL(t1.done, 0);
    kb_gsm_free(gsm);
    CU_ASSERT(t1.done == 1 && t1.err == KP_ERR_NOT_COORDINATOR);
    CU_ASSERT(t2.done == 1 && t2.err == KP_ERR_NOT_COORDINATOR);
}

static void test_max_size(void)
{
    kb_gsm_t *gsm;
    kb_gsm_conf_t c = t_conf();
    tok_t t1, t2, t3;
    t_log_reset();
    c.max_size = 2;
    c.initial_delay_ms = 0;
    gsm = kb_gsm_new(&c, &t_ops, NULL);
    join(gsm, "g", &t1, (jopt_t){0});
    join(gsm, "g", &t2, (jopt_t){0});
    join(gsm, "g", &t3, (jopt_t){0});
    CU_ASSERT_EQUAL(t3.err, KP_ERR_GROUP_MAX_SIZE_REACHED);
    advance(gsm, 0);
    CU_ASSERT(t1.err == 0 && t2.err == 0);
    join(gsm, "g", &t3, (jopt_t){0});
    CU_ASSERT_EQUAL(t3.err, KP_ERR_GROUP_MAX_SIZE_REACHED);
    CU_ASSERT(t_timers_changed > 0);
    kb_gsm_free(gsm);
}

int main(void)
{
    CU_pSuite s;
    unsigned failed;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("gsm", NULL, NULL);
    CU_add_test(s, "join, sync, rebalance, leave", test_join_sync_rebalance_leave);
    CU_add_test(s, "join/sync validation errors", test_errors);
    CU_add_test(s, "initial delay and protocol selection", test_initial_delay_and_selection);
    CU_add_test(s, "session, sync and rebalance timeouts", test_session_and_sync_timeouts);
    CU_add_test(s, "static members (KIP-345)", test_static_members);
    CU_add_test(s, "offset commits", test_offset_commits);
    CU_add_test(s, "reload from __consumer_offsets", test_reload);
    CU_add_test(s, "transactional offsets", test_txn_offsets);
    CU_add_test(s, "DeleteGroups and offset expiry", test_delete_and_expiry);
    CU_add_test(s, "deleted topics, shutdown", test_topic_deleted_and_free);
    CU_add_test(s, "group.max.size", test_max_size);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    t_log_reset();
    for (int i = 0; i < NPART; i++)
        kp_writer_free(&t_log.part[i]);
    return failed ? 1 : 0;
}
