/*
 * test_repl_fetch.c -- CUnit tests of the replica fetcher (broker/repl, docs/broker.md
 * "Replication") against a real leader: two in-process brokers with network listeners, node 1
 * leading partition f-0 with replicas {1,2}, node 2 following it with a kb_repl manager whose
 * fetcher threads fetch over TCP through the kc_ client. Checked: the follower's segment bytes
 * and epoch cache equal the leader's, HW propagation, acks=all completing only once the follower
 * fetched, truncation of a divergent follower tail, resumption from the LEO after the follower
 * broker restarts, out-of-range recovery when the leader's log start is above the follower's end.
 * Waiting is by condition polling with deadlines. Label: unit.
 */
#include <CUnit/Basic.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb_apisvc.h"
#include "kb_apiversions.h"
#include "kb_err.h"
#include "kb_meta.h"
#include "kb_meta_rec.h"
#include "kb_part.h"
#include "kb_repl.h"
#include "kbat.h"
#include "kp_batch.h"
#include "kp_errcode.h"

static kp_str_t S(const char *s)
{
    return (kp_str_t){s, s ? (int32_t)strlen(s) : -1};
}

typedef struct node_s {
    char dir[512];
    int32_t id;
    kbat_broker_t b;
    int pfd; /* produce requests */
    kp_arena_t ar;
} node_t;

static void node_start(node_t *n)
{
    char idkv[32];
    const char *kv[] = {idkv, "replica.lag.time.max.ms=500", NULL};
    snprintf(idkv, sizeof(idkv), "node.id=%d", (int)n->id);
    CU_ASSERT_EQUAL_FATAL(kbat_broker_start(&n->b, n->dir, kv), 0);
    /* the kc_ client starts with ApiVersions, which kbat's registry lacks */
    CU_ASSERT_EQUAL_FATAL(kb_apiversions_register(n->b.reg), 0);
    n->pfd = kbat_connect(n->b.port);
    CU_ASSERT_FATAL(n->pfd >= 0);
}

static void node_up(node_t *n, int32_t id)
{
    memset(n, 0, sizeof(*n));
    n->id = id;
    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(n->dir, sizeof(n->dir)), 0);
    kp_arena_init(&n->ar, 0);
    node_start(n);
}

static void node_stop(node_t *n)
{
    if (n->pfd >= 0)
        close(n->pfd);
    n->pfd = -1;
    kbat_broker_stop(&n->b);
}

static void node_down(node_t *n)
{
    node_stop(n);
    kp_arena_free(&n->ar);
    kbat_rmrf(n->dir);
}

static kb_part_t *node_part(node_t *n, const char *topic)
{
    kb_part_t *part = NULL;
    CU_ASSERT_EQUAL_FATAL(kb_meta_part(n->b.svc->meta, topic, 0, &part), KB_META_OK);
    return part;
}

/* Topic @p name with one partition and topic id @p id (zero: a new one, returned in @p id). */
static void create_topic(node_t *n, const char *name, kp_uuid_t *id)
{
    kb_topic_spec_t spec = {.name = name, .partitions = 1, .id = id};
    char msg[256];
    CU_ASSERT_EQUAL_FATAL(kb_meta_create_topic(n->b.svc->meta, &spec, false, id, msg, sizeof(msg)),
                          0);
}

/* ---- produce -----------------------------------------------------------------------------------
 */

static void produce_send(node_t *n, const char *topic, int16_t acks, int nrec, int codec,
                         int32_t corr)
{
    kp_ProduceRequest_t rq;
    kp_ProduceRequest_TopicProduceData_t td;
    kp_ProduceRequest_PartitionProduceData_t pd;
    kp_writer_t wr;
    kp_writer_init(&wr);
    CU_ASSERT_EQUAL(kbat_batch(&wr, codec, nrec, "r", -1, -1, -1, false, false), 0);
    kp_ProduceRequest_init(&rq);
    kp_ProduceRequest_TopicProduceData_init(&td);
    kp_ProduceRequest_PartitionProduceData_init(&pd);
    rq.Acks = acks;
    rq.TimeoutMs = KBAT_WAIT_MS;
    td.Name = S(topic);
    pd.Index = 0;
    pd.Records = (kp_bytes_t){wr.buf, (int32_t)wr.len};
    td.PartitionData.v = &pd;
    td.PartitionData.cnt = 1;
    rq.TopicData.v = &td;
    rq.TopicData.cnt = 1;
    CU_ASSERT_EQUAL_FATAL(kbat_send(n->pfd, KP_APIKEY_Produce, 9, corr, NULL, &rq), 0);
    kp_writer_free(&wr);
}

/* Error code of the answer (-2: none within @p ms), base offset in @p base. */
static int16_t produce_recv(node_t *n, int32_t corr, int ms, int64_t *base)
{
    kp_ProduceResponse_t resp;
    int rc;
    kp_ProduceResponse_init(&resp);
    rc = kbat_recv(n->pfd, KP_APIKEY_Produce, 9, corr, &resp, &n->ar, ms);
    if (rc != 0)
        return (int16_t)(rc == -2 ? -2 : -100);
    if (resp.Responses.cnt != 1 || resp.Responses.v[0].PartitionResponses.cnt != 1)
        return -100;
    if (base)
        *base = resp.Responses.v[0].PartitionResponses.v[0].BaseOffset;
    return resp.Responses.v[0].PartitionResponses.v[0].ErrorCode;
}

static int32_t g_corr = 100;

static int16_t produce(node_t *n, const char *topic, int16_t acks, int nrec, int codec,
                       int64_t *base)
{
    produce_send(n, topic, acks, nrec, codec, ++g_corr);
    return produce_recv(n, g_corr, KBAT_WAIT_MS, base);
}

/* ---- comparing logs ----------------------------------------------------------------------------
 */

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;
    *len = 0;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return buf;
}

/* The bytes of the segment @p base of both logs are equal (and not empty). */
static bool same_segment(kb_part_t *x, kb_part_t *y, int64_t base)
{
    char px[4200], py[4200];
    size_t lx = 0, ly = 0;
    uint8_t *bx, *by;
    bool same;
    snprintf(px, sizeof(px), "%s/%020lld.log", kb_log_dir(x->log), (long long)base);
    snprintf(py, sizeof(py), "%s/%020lld.log", kb_log_dir(y->log), (long long)base);
    bx = slurp(px, &lx);
    by = slurp(py, &ly);
    same = bx && by && lx == ly && lx > 0 && !memcmp(bx, by, lx);
    if (!same)
        fprintf(stderr, "segments differ: %zu vs %zu bytes\n", lx, ly);
    free(bx);
    free(by);
    return same;
}

static bool same_epochs(kb_part_t *x, kb_part_t *y)
{
    int32_t *ex = NULL, *ey = NULL;
    int64_t *sx = NULL, *sy = NULL;
    size_t nx = 0, ny = 0;
    bool same;
    kb_log_epoch_entries(x->log, &ex, &sx, &nx);
    kb_log_epoch_entries(y->log, &ey, &sy, &ny);
    same = nx == ny && nx > 0 && !memcmp(ex, ey, nx * sizeof(*ex)) &&
           !memcmp(sx, sy, nx * sizeof(*sx));
    free(ex);
    free(ey);
    free(sx);
    free(sy);
    return same;
}

/* Wait until the follower has the leader's LEO and HW (and the leader's HW is its LEO). */
static bool converged(kb_part_t *lp, kb_part_t *fp)
{
    int64_t end = kbat_now_ms() + KBAT_WAIT_MS;
    for (;;) {
        int64_t lleo = kb_log_leo(lp->log), fleo = kb_log_leo(fp->log);
        if (lleo == fleo && kb_log_hw(lp->log) == lleo && kb_log_hw(fp->log) == lleo)
            return true;
        if (kbat_now_ms() > end) {
            fprintf(stderr, "no convergence: leader LEO %lld HW %lld, follower LEO %lld HW %lld\n",
                    (long long)lleo, (long long)kb_log_hw(lp->log), (long long)fleo,
                    (long long)kb_log_hw(fp->log));
            return false;
        }
        poll(NULL, 0, 5);
    }
}

/* ---- the manager -------------------------------------------------------------------------------
 */

static node_t *g_leader; /* node 1's address, read by the endpoint function */

static int endpoint(void *opaque, int32_t node_id, char *host, size_t size, int *port)
{
    (void)opaque;
    if (!g_leader || node_id != g_leader->id)
        return -1;
    snprintf(host, size, "127.0.0.1");
    *port = g_leader->b.port;
    return 0;
}

static kb_repl_t *repl_new(node_t *follower)
{
    kb_repl_opts_t o = {.cfg = follower->b.cfg, .node_id = follower->id, .endpoint = endpoint};
    char err[256];
    kb_repl_t *r = kb_repl_new(&o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    return r;
}

static const int32_t REPS[] = {1, 2};

/* ---- tests -------------------------------------------------------------------------------------
 */

static void t_follow(void)
{
    node_t a, b;
    kb_part_t *lp, *fp;
    kp_uuid_t id = {{0}};
    kb_repl_t *r;
    kb_repl_stats_t st;
    int64_t base = -1;

    node_up(&a, 1);
    node_up(&b, 2);
    g_leader = &a;
    create_topic(&a, "f", &id);
    create_topic(&b, "f", &id);
    lp = node_part(&a, "f");
    fp = node_part(&b, "f");
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 3, 1, REPS, 2, REPS, 2), 0);
    r = repl_new(&b);
    /* not a follower yet: refused */
    CU_ASSERT_EQUAL(kb_repl_add(r, fp), KB_E_STATE);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 3, 1, REPS, 2, REPS, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kb_repl_add(r, fp), 0);

    /* plain, gzip and acks=all batches: the follower gets them byte for byte */
    CU_ASSERT_EQUAL(produce(&a, "f", 1, 5, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_EQUAL(produce(&a, "f", 1, 4, KP_CODEC_GZIP, &base), 0);
    CU_ASSERT_EQUAL(produce(&a, "f", -1, 3, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_EQUAL(base, 9);
    CU_ASSERT(kb_log_leo(fp->log) >= 12); /* acks=all answered: the follower had it */
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT_EQUAL(kb_log_leo(fp->log), 12);
    CU_ASSERT(same_segment(lp, fp, 0));
    CU_ASSERT(same_epochs(lp, fp));
    {
        kb_replica_t rep;
        CU_ASSERT_EQUAL(kb_part_replica_get(lp, 2, &rep), 0);
        CU_ASSERT(rep.isr);
        CU_ASSERT_EQUAL(rep.leo, 12);
    }

    /* acks=all waits for the follower: not fetching, no answer; fetching again, the answer */
    kb_repl_remove(r, fp);
    kb_repl_stats(r, &st);
    CU_ASSERT_EQUAL(st.partitions, 0);
    produce_send(&a, "f", -1, 2, KP_CODEC_NONE, ++g_corr);
    CU_ASSERT_EQUAL(produce_recv(&a, g_corr, 300, &base), -2);
    CU_ASSERT_EQUAL(kb_log_leo(lp->log), 14);
    CU_ASSERT_EQUAL(kb_log_hw(lp->log), 12);
    CU_ASSERT_EQUAL_FATAL(kb_repl_add(r, fp), 0);
    CU_ASSERT_EQUAL(produce_recv(&a, g_corr, KBAT_WAIT_MS, &base), 0);
    CU_ASSERT_EQUAL(base, 12);
    CU_ASSERT(kb_log_leo(fp->log) >= 14);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT(same_segment(lp, fp, 0));

    kb_repl_stats(r, &st);
    CU_ASSERT_EQUAL(st.fetchers, 1);
    CU_ASSERT_EQUAL(st.partitions, 1);
    CU_ASSERT(st.fetches > 0);
    CU_ASSERT(st.bytes_appended > 0);
    CU_ASSERT_EQUAL(st.truncations, 0);
    kb_repl_free(r);
    kb_part_release(lp);
    kb_part_release(fp);
    g_leader = NULL;
    node_down(&b);
    node_down(&a);
}

/* A deposed leader's tail (appended at an older epoch) is cut and the logs converge. */
static void t_divergent_tail(void)
{
    node_t a, b;
    kb_part_t *lp, *fp;
    kp_uuid_t id = {{0}};
    kb_repl_t *r;
    kb_repl_stats_t st;
    int64_t base = -1;

    node_up(&a, 1);
    node_up(&b, 2);
    g_leader = &a;
    create_topic(&a, "d", &id);
    create_topic(&b, "d", &id);
    lp = node_part(&a, "d");
    fp = node_part(&b, "d");
    r = repl_new(&b);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 2, 1, REPS, 2, REPS, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 2, 1, REPS, 2, REPS, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kb_repl_add(r, fp), 0);
    CU_ASSERT_EQUAL(produce(&a, "d", -1, 4, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_FATAL(converged(lp, fp));

    /* node 2 leads at epoch 3 for a while and takes writes node 1 never sees */
    kb_repl_remove(r, fp);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(fp, 3, 2, REPS, 2, (const int32_t[]){2}, 1), 0);
    CU_ASSERT_EQUAL(produce(&b, "d", 1, 3, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_EQUAL(produce(&b, "d", 1, 2, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_EQUAL(kb_log_leo(fp->log), 9);
    /* node 1 leads again at epoch 4 and takes other writes */
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 4, 3, REPS, 2, (const int32_t[]){1}, 1), 0);
    CU_ASSERT_EQUAL(produce(&a, "d", 1, 1, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_EQUAL(base, 4);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 4, 3, REPS, 2, (const int32_t[]){1}, 1),
                          0);
    CU_ASSERT_EQUAL_FATAL(kb_repl_add(r, fp), 0);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT_EQUAL(kb_log_leo(fp->log), 5);
    CU_ASSERT(same_segment(lp, fp, 0));
    CU_ASSERT(same_epochs(lp, fp));
    CU_ASSERT_EQUAL(kb_log_epoch_for_offset(fp->log, 4), 4);
    kb_repl_stats(r, &st);
    CU_ASSERT(st.truncations >= 1);
    /* and replication goes on */
    CU_ASSERT_EQUAL(produce(&a, "d", 1, 2, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT(same_segment(lp, fp, 0));

    kb_repl_free(r);
    kb_part_release(lp);
    kb_part_release(fp);
    g_leader = NULL;
    node_down(&b);
    node_down(&a);
}

/* The follower broker restarts: it resumes from its LEO (nothing fetched twice). */
static void t_restart(void)
{
    node_t a, b;
    kb_part_t *lp, *fp;
    kp_uuid_t id = {{0}};
    kb_repl_t *r;
    int64_t base = -1;

    node_up(&a, 1);
    node_up(&b, 2);
    g_leader = &a;
    create_topic(&a, "s", &id);
    create_topic(&b, "s", &id);
    lp = node_part(&a, "s");
    fp = node_part(&b, "s");
    r = repl_new(&b);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 1, 1, REPS, 2, REPS, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 1, 1, REPS, 2, REPS, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kb_repl_add(r, fp), 0);
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(produce(&a, "s", -1, 10, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_FATAL(converged(lp, fp));
    kb_repl_free(r);
    kb_part_release(fp);
    node_stop(&b);

    /* the leader goes on without it (ISR {1}) */
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 1, 2, REPS, 2, (const int32_t[]){1}, 1), 0);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(produce(&a, "s", -1, 10, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_EQUAL(kb_log_leo(lp->log), 80);

    node_start(&b);
    fp = node_part(&b, "s");
    CU_ASSERT_EQUAL(kb_log_leo(fp->log), 50);
    r = repl_new(&b);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 1, 2, REPS, 2, (const int32_t[]){1}, 1),
                          0);
    CU_ASSERT_EQUAL_FATAL(kb_repl_add(r, fp), 0);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT(same_segment(lp, fp, 0));
    CU_ASSERT(same_epochs(lp, fp));
    {
        kb_repl_stats_t st;
        kb_repl_stats(r, &st);
        CU_ASSERT_EQUAL(st.truncations, 0);
        /* only what it missed: 3 batches of 10 records were appended after the restart */
        CU_ASSERT(st.bytes_appended > 0);
        CU_ASSERT(st.bytes_appended < (uint64_t)kb_log_size_bytes(lp->log) / 2);
    }
    kb_repl_free(r);
    kb_part_release(lp);
    kb_part_release(fp);
    g_leader = NULL;
    node_down(&b);
    node_down(&a);
}

/* The leader answers a fetch for another epoch: FENCED (newer there) waits for new metadata;
 * the leader is unknown: nothing is fetched; a follower with no known leader is refused. */
static void t_fenced(void)
{
    node_t a, b;
    kb_part_t *lp, *fp;
    kp_uuid_t id = {{0}};
    kb_repl_t *r;
    int64_t base = -1;

    node_up(&a, 1);
    node_up(&b, 2);
    g_leader = &a;
    create_topic(&a, "e", &id);
    create_topic(&b, "e", &id);
    lp = node_part(&a, "e");
    fp = node_part(&b, "e");
    r = repl_new(&b);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 5, 1, REPS, 2, (const int32_t[]){1}, 1), 0);
    CU_ASSERT_EQUAL(produce(&a, "e", 1, 3, KP_CODEC_NONE, &base), 0);
    /* the follower still believes in epoch 4: the leader fences it, nothing is appended */
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 4, 1, REPS, 2, (const int32_t[]){1}, 1),
                          0);
    CU_ASSERT_EQUAL_FATAL(kb_repl_add(r, fp), 0);
    {
        int64_t end = kbat_now_ms() + KBAT_WAIT_MS;
        kb_repl_stats_t st;
        do {
            kb_repl_stats(r, &st);
            if (st.fetches > 0)
                break;
            poll(NULL, 0, 5);
        } while (kbat_now_ms() < end);
        CU_ASSERT(st.fetches > 0);
        CU_ASSERT_EQUAL(kb_log_leo(fp->log), 0);
    }
    /* new metadata: epoch 5, as the manager would be told (remove, become, add) */
    kb_repl_remove(r, fp);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 5, 2, REPS, 2, (const int32_t[]){1}, 1),
                          0);
    CU_ASSERT_EQUAL_FATAL(kb_repl_add(r, fp), 0);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT(same_segment(lp, fp, 0));
    /* no leader known */
    kb_repl_remove(r, fp);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, -1, 6, 3, REPS, 2, (const int32_t[]){1}, 1),
                          0);
    CU_ASSERT_EQUAL(kb_repl_add(r, fp), KB_E_STATE);
    kb_repl_free(r);
    kb_part_release(lp);
    kb_part_release(fp);
    g_leader = NULL;
    node_down(&b);
    node_down(&a);
}

/* The leader's log starts above the follower's end: OFFSET_OUT_OF_RANGE, ListOffsets, the
 * follower restarts its log at the leader's log start and catches up from there. */
static void t_out_of_range(void)
{
    node_t a, b;
    kb_part_t *lp, *fp;
    kp_uuid_t id = {{0}};
    kb_repl_t *r;
    kb_repl_stats_t st;
    int64_t base = -1;

    node_up(&a, 1);
    node_up(&b, 2);
    g_leader = &a;
    create_topic(&a, "o", &id);
    create_topic(&b, "o", &id);
    lp = node_part(&a, "o");
    fp = node_part(&b, "o");
    r = repl_new(&b);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 1, 1, REPS, 2, (const int32_t[]){1}, 1), 0);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(produce(&a, "o", 1, 10, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_EQUAL(kb_log_hw(lp->log), 30);
    CU_ASSERT_EQUAL_FATAL(kb_log_set_start_offset(lp->log, 20), 0);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 1, 1, REPS, 2, (const int32_t[]){1}, 1),
                          0);
    CU_ASSERT_EQUAL_FATAL(kb_repl_add(r, fp), 0);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT_EQUAL(kb_log_start_offset(fp->log), 20);
    CU_ASSERT_EQUAL(kb_log_leo(fp->log), 30);
    kb_repl_stats(r, &st);
    CU_ASSERT_EQUAL(st.truncations, 1);
    CU_ASSERT_EQUAL(produce(&a, "o", 1, 5, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT_EQUAL(kb_log_leo(fp->log), 35);
    kb_repl_free(r);
    kb_part_release(lp);
    kb_part_release(fp);
    g_leader = NULL;
    node_down(&b);
    node_down(&a);
}

/* ---- leadership from the metadata image --------------------------------------------------------
 */

/* Apply a PartitionChangeRecord to @p n's image as a remote controller would send it: leader
 * @p leader (KB_MREC_NO_LEADER_CHANGE: unchanged), replicas @p reps, ISR @p isr. */
static void change_reps(node_t *n, const kp_uuid_t *id, int32_t leader, const int32_t *reps,
                        int32_t nreps, const int32_t *isr, int32_t nisr)
{
    kb_mrec_t rec;
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    kp_writer_t out, val;
    kp_bytes_t key = {NULL, -1}, v;
    char err[256];
    kb_mrec_init(&rec, KB_MREC_PARTITION_CHANGE);
    rec.topic_id = *id;
    rec.partition = 0;
    rec.leader = leader;
    rec.replicas = malloc((size_t)nreps * sizeof(int32_t));
    memcpy(rec.replicas, reps, (size_t)nreps * sizeof(int32_t));
    rec.nreplicas = nreps;
    rec.isr = malloc((size_t)nisr * sizeof(int32_t));
    memcpy(rec.isr, isr, (size_t)nisr * sizeof(int32_t));
    rec.nisr = nisr;
    kp_writer_init(&val);
    CU_ASSERT_EQUAL_FATAL(kb_mrec_encode(&rec, &val), 0);
    kb_mrec_clear(&rec);
    kp_batch_opts_init(&o);
    o.baseOffset = kb_meta_offset(n->b.svc->meta) + 1;
    kp_batch_builder_init(&bb, &o);
    v.ptr = val.buf;
    v.len = (int32_t)val.len;
    CU_ASSERT_EQUAL(kp_batch_builder_add(&bb, 1000, key, v, NULL, 0), 0);
    kp_writer_init(&out);
    CU_ASSERT_EQUAL(kp_batch_builder_finish(&bb, &out), 0);
    CU_ASSERT_EQUAL(kb_meta_apply_records(n->b.svc->meta, out.buf, out.len, err, sizeof(err)), 0);
    kp_batch_builder_free(&bb);
    kp_writer_free(&val);
    kp_writer_free(&out);
}

static void change(node_t *n, const kp_uuid_t *id, int32_t leader, const int32_t *isr, int32_t nisr)
{
    change_reps(n, id, leader, REPS, 2, isr, nisr);
}

static bool wait_partitions(kb_repl_t *r, uint32_t want)
{
    int64_t end = kbat_now_ms() + KBAT_WAIT_MS;
    kb_repl_stats_t st;
    for (;;) {
        kb_repl_stats(r, &st);
        if (st.partitions == want)
            return true;
        if (kbat_now_ms() > end)
            return false;
        poll(NULL, 0, 5);
    }
}

/* The image makes node 2 a follower of node 1: its manager fetches without being told; the
 * leader moves to node 2: it stops; the topic is deleted: the fetcher lets the partition go. */
static void t_watch(void)
{
    node_t a, b;
    kb_part_t *lp, *fp;
    kp_uuid_t id = {{0}};
    kb_repl_t *r;
    int64_t base = -1;
    char msg[256];

    node_up(&a, 1);
    node_up(&b, 2);
    g_leader = &a;
    create_topic(&a, "w", &id);
    create_topic(&b, "w", &id);
    lp = node_part(&a, "w");
    fp = node_part(&b, "w");
    r = repl_new(&b);
    CU_ASSERT_EQUAL_FATAL(kb_repl_watch(r, b.b.svc->meta, b.b.svc->pm), 0);
    CU_ASSERT(wait_partitions(r, 0)); /* the snapshot: node 2 leads its own topic */
    CU_ASSERT_EQUAL(produce(&a, "w", 1, 3, KP_CODEC_NONE, &base), 0);
    change(&a, &id, 1, REPS, 2);
    CU_ASSERT_EQUAL(kb_part_role(lp), KB_PART_LEADER);
    change(&b, &id, 1, REPS, 2);
    CU_ASSERT_EQUAL(kb_part_role(fp), KB_PART_FOLLOWER);
    CU_ASSERT_EQUAL(kb_part_epoch(fp), kb_part_epoch(lp));
    CU_ASSERT(wait_partitions(r, 1));
    CU_ASSERT_EQUAL(produce(&a, "w", -1, 4, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT(same_segment(lp, fp, 0));
    CU_ASSERT(same_epochs(lp, fp));
    /* an ISR-only change keeps it fetching */
    change(&b, &id, KB_MREC_NO_LEADER_CHANGE, (const int32_t[]){1}, 1);
    CU_ASSERT(wait_partitions(r, 1));
    /* node 2 leads: no fetching (both images follow the controller) */
    change(&a, &id, 2, REPS, 2);
    change(&b, &id, 2, REPS, 2);
    CU_ASSERT_EQUAL(kb_part_role(fp), KB_PART_LEADER);
    CU_ASSERT(wait_partitions(r, 0));
    /* node 1 again */
    change(&a, &id, 1, REPS, 2);
    change(&b, &id, 1, REPS, 2);
    CU_ASSERT(wait_partitions(r, 1));
    /* node 2 leaves the replica list: its log goes, clients are sent away */
    kb_part_release(fp);
    change_reps(&b, &id, KB_MREC_NO_LEADER_CHANGE, (const int32_t[]){1}, 1, (const int32_t[]){1},
                1);
    CU_ASSERT(wait_partitions(r, 0));
    fp = NULL;
    CU_ASSERT_EQUAL(kb_meta_part(b.b.svc->meta, "w", 0, &fp), KB_META_NOT_REPLICA);
    CU_ASSERT_EQUAL(produce(&b, "w", 1, 1, KP_CODEC_NONE, &base), KP_ERR_NOT_LEADER_OR_FOLLOWER);
    /* and joins again: a new log, fetched from the start */
    change_reps(&b, &id, KB_MREC_NO_LEADER_CHANGE, REPS, 2, (const int32_t[]){1}, 1);
    fp = node_part(&b, "w");
    CU_ASSERT_EQUAL(kb_part_role(fp), KB_PART_FOLLOWER);
    CU_ASSERT(wait_partitions(r, 1));
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT(same_segment(lp, fp, 0));
    /* then the topic goes away under the fetcher */
    kb_part_release(fp);
    CU_ASSERT_EQUAL(kb_meta_delete_topic(b.b.svc->meta, "w", NULL, msg, sizeof(msg)), 0);
    CU_ASSERT(wait_partitions(r, 0));
    kb_repl_free(r);
    kb_part_release(lp);
    g_leader = NULL;
    node_down(&b);
    node_down(&a);
}

/* ---- ISR changes through AlterPartition ------------------------------------------------------ */

static pthread_mutex_t g_ctl_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_ctl_calls;
static int16_t g_ctl_err;    /* the error to answer with (once) */
static int32_t g_ctl_pe = 1; /* the controller's partition epoch */
static int32_t g_ctl_isr[4]; /* the last proposal */
static int32_t g_ctl_nisr;
static int32_t g_ctl_broker = -1;
static int32_t g_ctl_leader_epoch = -1;

/* A controller that answers on the spot: decodes the AlterPartition v3 request, accepts it with
 * the next partition epoch (or answers g_ctl_err once). */
static int64_t fake_ctrl(void *opaque, int16_t api_key, int16_t min_ver, int16_t max_ver,
                         kc_encode_cb_t *encode, kc_resp_cb_t *cb, void *cb_opaque)
{
    kp_writer_t wr, out;
    kp_reader_t rd;
    kp_arena_t ar;
    kp_AlterPartitionRequest_t rq;
    kp_AlterPartitionResponse_t resp;
    kp_AlterPartitionResponse_TopicData_t t;
    kp_AlterPartitionResponse_PartitionData_t p;
    int32_t isr[4];
    (void)opaque;
    CU_ASSERT_EQUAL(api_key, KP_APIKEY_AlterPartition);
    CU_ASSERT(min_ver <= 3 && max_ver >= 3);
    kp_writer_init(&wr);
    kp_writer_init(&out);
    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL_FATAL(encode(&wr, 3, cb_opaque), 0);
    kp_reader_init(&rd, wr.buf, wr.len);
    kp_AlterPartitionRequest_init(&rq);
    CU_ASSERT_EQUAL_FATAL(kp_AlterPartitionRequest_decode(&rd, &ar, &rq, 3), 0);
    CU_ASSERT_EQUAL_FATAL(rq.Topics.cnt, 1);
    CU_ASSERT_EQUAL_FATAL(rq.Topics.v[0].Partitions.cnt, 1);
    pthread_mutex_lock(&g_ctl_mu);
    {
        kp_AlterPartitionRequest_PartitionData_t *pd = &rq.Topics.v[0].Partitions.v[0];
        g_ctl_calls++;
        g_ctl_broker = rq.BrokerId;
        g_ctl_leader_epoch = pd->LeaderEpoch;
        CU_ASSERT_EQUAL(pd->PartitionEpoch, g_ctl_pe);
        g_ctl_nisr = pd->NewIsrWithEpochs.cnt < 4 ? pd->NewIsrWithEpochs.cnt : 4;
        for (int32_t i = 0; i < g_ctl_nisr; i++)
            isr[i] = g_ctl_isr[i] = pd->NewIsrWithEpochs.v[i].BrokerId;
        kp_AlterPartitionResponse_init(&resp);
        kp_AlterPartitionResponse_TopicData_init(&t);
        kp_AlterPartitionResponse_PartitionData_init(&p);
        t.TopicId = rq.Topics.v[0].TopicId;
        p.PartitionIndex = pd->PartitionIndex;
        p.ErrorCode = g_ctl_err;
        p.LeaderId = rq.BrokerId;
        p.LeaderEpoch = pd->LeaderEpoch;
        if (!g_ctl_err) {
            g_ctl_pe++;
            p.Isr.v = isr;
            p.Isr.cnt = g_ctl_nisr;
        } else {
            p.Isr.cnt = 0;
        }
        p.PartitionEpoch = g_ctl_pe;
        g_ctl_err = 0;
    }
    pthread_mutex_unlock(&g_ctl_mu);
    t.Partitions.v = &p;
    t.Partitions.cnt = 1;
    resp.Topics.v = &t;
    resp.Topics.cnt = 1;
    CU_ASSERT_EQUAL_FATAL(kp_AlterPartitionResponse_encode(&out, &resp, 3), 0);
    cb(NULL, KC_E_OK, 3, out.buf, out.len, cb_opaque);
    kp_writer_free(&wr);
    kp_writer_free(&out);
    kp_arena_free(&ar);
    return 1;
}

static bool wait_isr(kb_part_t *part, size_t want)
{
    int64_t end = kbat_now_ms() + KBAT_WAIT_MS;
    for (;;) {
        bool pending = true;
        kb_part_repl_info(part, NULL, NULL, &pending);
        if (kb_part_isr(part, NULL, 0) == want && !pending)
            return true;
        if (kbat_now_ms() > end)
            return false;
        poll(NULL, 0, 5);
    }
}

static int ctl_calls(void)
{
    int n;
    pthread_mutex_lock(&g_ctl_mu);
    n = g_ctl_calls;
    pthread_mutex_unlock(&g_ctl_mu);
    return n;
}

/* A follower that stops fetching is proposed out of the ISR after replica.lag.time.max.ms (the
 * first answer refuses, a later proposal succeeds) and back in once it caught up. */
static void t_isr(void)
{
    node_t a, b;
    kb_part_t *lp, *fp;
    kp_uuid_t id = {{0}};
    kb_repl_t *ra, *rb;
    int64_t base = -1;

    node_up(&a, 1);
    node_up(&b, 2);
    g_leader = &a;
    create_topic(&a, "i", &id);
    create_topic(&b, "i", &id);
    lp = node_part(&a, "i");
    fp = node_part(&b, "i");
    ra = repl_new(&a);
    rb = repl_new(&b);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 1, 1, REPS, 2, REPS, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 1, 1, REPS, 2, REPS, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kb_repl_watch(ra, a.b.svc->meta, a.b.svc->pm), 0);
    kb_repl_set_broker_epoch(ra, 7);
    kb_repl_set_ctrl(ra, fake_ctrl, NULL);
    CU_ASSERT_EQUAL_FATAL(kb_repl_add(rb, fp), 0);
    CU_ASSERT_EQUAL(produce(&a, "i", -1, 3, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT_EQUAL(ctl_calls(), 0);

    /* the follower stops; the leader moves on */
    kb_repl_remove(rb, fp);
    pthread_mutex_lock(&g_ctl_mu);
    g_ctl_err = KP_ERR_INVALID_UPDATE_VERSION;
    pthread_mutex_unlock(&g_ctl_mu);
    CU_ASSERT_EQUAL(produce(&a, "i", 1, 3, KP_CODEC_NONE, &base), 0);
    CU_ASSERT(wait_isr(lp, 1));
    CU_ASSERT(ctl_calls() >= 2); /* refused once, then accepted */
    pthread_mutex_lock(&g_ctl_mu);
    CU_ASSERT_EQUAL(g_ctl_broker, 1);
    CU_ASSERT_EQUAL(g_ctl_leader_epoch, 1);
    CU_ASSERT_EQUAL(g_ctl_nisr, 1);
    CU_ASSERT_EQUAL(g_ctl_isr[0], 1);
    pthread_mutex_unlock(&g_ctl_mu);
    {
        int32_t pe = -1;
        kb_part_repl_info(lp, &pe, NULL, NULL);
        CU_ASSERT_EQUAL(pe, 2);
    }
    /* acks=all goes on with the ISR {1} */
    CU_ASSERT_EQUAL(produce(&a, "i", -1, 2, KP_CODEC_NONE, &base), 0);

    /* back: it catches up and is proposed into the ISR */
    CU_ASSERT_EQUAL_FATAL(kb_repl_add(rb, fp), 0);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT(wait_isr(lp, 2));
    pthread_mutex_lock(&g_ctl_mu);
    CU_ASSERT_EQUAL(g_ctl_nisr, 2);
    pthread_mutex_unlock(&g_ctl_mu);
    CU_ASSERT(same_segment(lp, fp, 0));

    kb_repl_free(rb);
    kb_repl_free(ra);
    kb_part_release(lp);
    kb_part_release(fp);
    g_leader = NULL;
    node_down(&b);
    node_down(&a);
}

/* The leader broker restarts on another port: the fetcher looks its address up again. */
static void t_leader_moves(void)
{
    node_t a, b;
    kb_part_t *lp, *fp;
    kp_uuid_t id = {{0}};
    kb_repl_t *r;
    int64_t base = -1;
    int old_port;

    node_up(&a, 1);
    node_up(&b, 2);
    g_leader = &a;
    create_topic(&a, "m", &id);
    create_topic(&b, "m", &id);
    lp = node_part(&a, "m");
    fp = node_part(&b, "m");
    r = repl_new(&b);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 1, 1, REPS, 2, REPS, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 1, 1, REPS, 2, REPS, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kb_repl_add(r, fp), 0);
    CU_ASSERT_EQUAL(produce(&a, "m", -1, 5, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_FATAL(converged(lp, fp));
    kb_part_release(lp);
    old_port = a.b.port;
    node_stop(&a);
    node_start(&a); /* a new ephemeral port */
    CU_ASSERT_NOT_EQUAL(a.b.port, old_port);
    lp = node_part(&a, "m");
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 1, 1, REPS, 2, REPS, 2), 0);
    CU_ASSERT_EQUAL(produce(&a, "m", 1, 5, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_EQUAL(base, 5);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT(same_segment(lp, fp, 0));
    kb_repl_free(r);
    kb_part_release(lp);
    kb_part_release(fp);
    g_leader = NULL;
    node_down(&b);
    node_down(&a);
}

/* ---- a topic created in a cluster ----------------------------------------------------------- */

/* The controller's assignment: replicas {2,1}, node 2 leading. */
static int16_t assign21(void *opaque, int32_t partition, int32_t *rf, bool cap, int32_t *out,
                        char *msg, size_t msg_size)
{
    (void)opaque;
    (void)partition;
    (void)cap;
    (void)msg;
    (void)msg_size;
    *rf = 2;
    out[0] = 2;
    out[1] = 1;
    return 0;
}

/* A topic the controller (node 1 here) creates with another leader: its local replica is a
 * follower from the first moment and its manager fetches it (nothing is ever written to it as a
 * leader). */
static void t_created_follower(void)
{
    node_t a, b;
    kb_part_t *lp, *fp;
    kp_uuid_t id = {{0}};
    kb_repl_t *r;
    int64_t base = -1;

    node_up(&a, 1); /* the controller, a follower of the new topic */
    node_up(&b, 2); /* stands in for its leader */
    g_leader = &b;
    r = repl_new(&a);
    CU_ASSERT_EQUAL_FATAL(kb_repl_watch(r, a.b.svc->meta, a.b.svc->pm), 0);
    kb_meta_set_assigner(a.b.svc->meta, assign21, NULL);
    create_topic(&a, "c", &id);
    fp = node_part(&a, "c");
    CU_ASSERT_EQUAL(kb_part_role(fp), KB_PART_FOLLOWER);
    CU_ASSERT(wait_partitions(r, 1));
    CU_ASSERT_EQUAL(produce(&a, "c", 1, 1, KP_CODEC_NONE, &base), KP_ERR_NOT_LEADER_OR_FOLLOWER);
    /* the leader's side */
    create_topic(&b, "c", &id);
    lp = node_part(&b, "c");
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, kb_part_epoch(fp), 1, (const int32_t[]){2, 1},
                                                2, (const int32_t[]){2, 1}, 2),
                          0);
    CU_ASSERT_EQUAL(produce(&b, "c", -1, 3, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT(same_segment(lp, fp, 0));
    kb_meta_set_assigner(a.b.svc->meta, NULL, NULL);
    kb_repl_free(r);
    kb_part_release(lp);
    kb_part_release(fp);
    g_leader = NULL;
    node_down(&b);
    node_down(&a);
}

/* The leader's log truncated inside a record batch (kbx log_truncate on a mirror leader, as
 * Kafka's truncation: the whole batch holding the offset goes, the log ends at its base offset):
 * the follower, which held the batch, truncates to the same place by DivergingEpoch, fetches
 * what the leader appends afterwards, and both logs hold the same bytes and epochs. */
static void t_leader_truncates_mid_batch(void)
{
    node_t a, b;
    kb_part_t *lp, *fp;
    kp_uuid_t id = {{0}};
    kb_repl_t *r;
    kb_repl_stats_t st;
    int64_t base = -1;

    node_up(&a, 1);
    node_up(&b, 2);
    g_leader = &a;
    create_topic(&a, "m", &id);
    create_topic(&b, "m", &id);
    lp = node_part(&a, "m");
    fp = node_part(&b, "m");
    r = repl_new(&b);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_leader(lp, 2, 1, REPS, 2, REPS, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kb_part_become_follower(fp, 1, 2, 1, REPS, 2, REPS, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kb_repl_add(r, fp), 0);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(produce(&a, "m", -1, 10, i == 1 ? KP_CODEC_GZIP : KP_CODEC_NONE, &base), 0);
    CU_ASSERT_EQUAL(base, 20);
    CU_ASSERT_FATAL(converged(lp, fp));

    /* 15 is inside batch 10-19: the leader's log ends at 10, its HW with it */
    CU_ASSERT_EQUAL(kb_log_truncate_to(lp->log, 15), 0);
    CU_ASSERT_EQUAL(kb_log_leo(lp->log), 10);
    CU_ASSERT_EQUAL(kb_log_hw(lp->log), 10);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT_EQUAL(kb_log_leo(fp->log), 10);
    /* new records continue at 10 on both */
    CU_ASSERT_EQUAL(produce(&a, "m", -1, 7, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_EQUAL(base, 10);
    CU_ASSERT_EQUAL(produce(&a, "m", 1, 3, KP_CODEC_GZIP, &base), 0);
    CU_ASSERT_FATAL(converged(lp, fp));
    CU_ASSERT_EQUAL(kb_log_leo(fp->log), 20);
    CU_ASSERT(same_segment(lp, fp, 0));
    CU_ASSERT(same_epochs(lp, fp));
    kb_repl_stats(r, &st);
    CU_ASSERT(st.truncations >= 1);

    kb_repl_free(r);
    kb_part_release(lp);
    kb_part_release(fp);
    g_leader = NULL;
    node_down(&b);
    node_down(&a);
}

/* ---- a partition whose log is still being opened ----------------------------------------- */

#define OPEN_PARTS 96

typedef struct opening_s {
    node_t *n;
    kp_uuid_t id;
    int rc;
} opening_t;

/* Apply (on its own thread) the batch a controller sends for a new topic "o" of OPEN_PARTS
 * partitions, every one led by node 1 with replicas {1,2}: the image has the partitions at
 * once, their logs are opened one after the other. */
static void *apply_topic(void *arg)
{
    opening_t *o = arg;
    kp_batch_opts_t bo;
    kp_batch_builder_t bb;
    kp_writer_t out;
    kp_writer_t val[OPEN_PARTS + 1];
    kp_bytes_t key = {NULL, -1};
    char err[256];
    int32_t reps[] = {1, 2};

    kp_batch_opts_init(&bo);
    bo.baseOffset = kb_meta_offset(o->n->b.svc->meta) + 1;
    kp_batch_builder_init(&bb, &bo);
    for (int i = 0; i <= OPEN_PARTS; i++) {
        kb_mrec_t rec;
        kb_mrec_init(&rec, i == 0 ? KB_MREC_TOPIC : KB_MREC_PARTITION);
        rec.topic_id = o->id;
        rec.name = i == 0 ? "o" : NULL;
        if (i > 0) {
            rec.partition = i - 1;
            rec.leader = 1;
            rec.leader_epoch = 0;
            rec.partition_epoch = 0;
            rec.replicas = reps;
            rec.nreplicas = 2;
            rec.isr = reps;
            rec.nisr = 2;
        }
        kp_writer_init(&val[i]);
        o->rc |= kb_mrec_encode(&rec, &val[i]);
        o->rc |= kp_batch_builder_add(&bb, 1000, key, (kp_bytes_t){val[i].buf, (int32_t)val[i].len},
                                      NULL, 0);
    }
    kp_writer_init(&out);
    o->rc |= kp_batch_builder_finish(&bb, &out);
    if (!o->rc)
        o->rc = kb_meta_apply_records(o->n->b.svc->meta, out.buf, out.len, err, sizeof(err));
    if (o->rc)
        fprintf(stderr, "apply_topic: %s\n", err);
    kp_batch_builder_free(&bb);
    for (int i = 0; i <= OPEN_PARTS; i++)
        kp_writer_free(&val[i]);
    kp_writer_free(&out);
    return NULL;
}

/* One replica fetch (v13, by topic id, no wait) of partition @p part of topic @p id by replica
 * 2: the partition's error code, -100 without an answer. */
static int16_t replica_fetch_err(node_t *n, int fd, const kp_uuid_t *id, int32_t part)
{
    static int32_t corr = 7000;
    kp_FetchRequest_t rq;
    kp_FetchRequest_FetchTopic_t t;
    kp_FetchRequest_FetchPartition_t p;
    kp_FetchResponse_t resp;
    kp_FetchRequest_init(&rq);
    kp_FetchRequest_FetchTopic_init(&t);
    kp_FetchRequest_FetchPartition_init(&p);
    rq.ReplicaId = 2;
    rq.MaxWaitMs = 0;
    rq.MinBytes = 1;
    rq.MaxBytes = 1 << 20;
    rq.SessionEpoch = -1;
    t.TopicId = *id;
    p.Partition = part;
    p.FetchOffset = 0;
    p.PartitionMaxBytes = 1 << 20;
    p.CurrentLeaderEpoch = -1;
    p.LastFetchedEpoch = -1;
    t.Partitions.v = &p;
    t.Partitions.cnt = 1;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    kp_FetchResponse_init(&resp);
    if (kbat_send(fd, KP_APIKEY_Fetch, 13, ++corr, NULL, &rq) != 0 ||
        kbat_recv(fd, KP_APIKEY_Fetch, 13, corr, &resp, &n->ar, KBAT_WAIT_MS) != 0 ||
        resp.Responses.cnt != 1 || resp.Responses.v[0].Partitions.cnt != 1)
        return -100;
    return resp.Responses.v[0].Partitions.v[0].ErrorCode;
}

/* A replica fetch that arrives while the metadata making this node a partition's leader is
 * being applied (its log not opened yet) is answered as Kafka's broker answers for a partition
 * it does not host yet, NOT_LEADER_OR_FOLLOWER, never KAFKA_STORAGE_ERROR (which made the
 * follower wait out its backoff as for a failed disk); once open, the fetch is served. */
static void t_fetch_while_opening(void)
{
    node_t a;
    opening_t o;
    pthread_t th;
    int fd;
    int16_t ec = -100;
    int counts[4] = {0}; /* UNKNOWN_TOPIC_ID, NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, other */
    int64_t end;

    node_up(&a, 1);
    memset(&o, 0, sizeof(o));
    o.n = &a;
    o.id.b[0] = 0x4f;
    o.id.b[15] = 0x01;
    fd = kbat_connect(a.b.port);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, apply_topic, &o), 0);
    end = kbat_now_ms() + KBAT_WAIT_MS;
    while (kbat_now_ms() < end && (ec = replica_fetch_err(&a, fd, &o.id, OPEN_PARTS - 1)) != 0) {
        if (ec == KP_ERR_UNKNOWN_TOPIC_ID)
            counts[0]++;
        else if (ec == KP_ERR_NOT_LEADER_OR_FOLLOWER)
            counts[1]++;
        else if (ec == KP_ERR_KAFKA_STORAGE_ERROR)
            counts[2]++;
        else
            counts[3]++;
    }
    pthread_join(th, NULL);
    fprintf(stderr,
            "while opening: %d UNKNOWN_TOPIC_ID, %d NOT_LEADER_OR_FOLLOWER, %d "
            "KAFKA_STORAGE_ERROR, %d other, then %d\n",
            counts[0], counts[1], counts[2], counts[3], ec);
    CU_ASSERT_EQUAL(o.rc, 0);
    CU_ASSERT_EQUAL(ec, 0);
    CU_ASSERT_EQUAL(counts[2], 0);
    CU_ASSERT_EQUAL(counts[3], 0);
    close(fd);
    node_down(&a);
}

int main(void)
{
    CU_pSuite s;
    unsigned fails;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("repl_fetch", NULL, NULL);
    CU_add_test(s, "follow a leader over the network", t_follow);
    CU_add_test(s, "divergent tail truncated", t_divergent_tail);
    CU_add_test(s, "follower restart resumes from its LEO", t_restart);
    CU_add_test(s, "fenced epoch waits for metadata", t_fenced);
    CU_add_test(s, "leader log start above the follower's end", t_out_of_range);
    CU_add_test(s, "leader restarted on another port", t_leader_moves);
    CU_add_test(s, "leadership from the metadata image", t_watch);
    CU_add_test(s, "ISR shrink and expand through AlterPartition", t_isr);
    CU_add_test(s, "a topic created with another leader", t_created_follower);
    CU_add_test(s, "leader truncated inside a batch", t_leader_truncates_mid_batch);
    CU_add_test(s, "replica fetch while the partition's log is opened", t_fetch_while_opening);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_tests_failed() + CU_get_number_of_failures();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
