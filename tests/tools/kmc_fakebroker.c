/*
 * kmc_fakebroker.c -- a scripted broker that serves ApiVersions and the mirror admin RPCs from a
 * small in-memory model, so that kafka-mirrors' requests, output and exit codes can be checked
 * exactly (tests/tools/cli_fake.sh). It is not the plugin: its rules are the few the CLI's
 * behaviour depends on, written down here.
 *
 *   kmc_fakebroker --log FILE [--not-controller N] [--partial MESSAGE] [--slow N] [--garbage]
 *                  [--hangup]
 *
 * Prints "PORT <n>" on stdout once listening on 127.0.0.1 (ephemeral port), then serves until
 * killed. Every request is appended to FILE as "<ApiName> <request as JSON>". The first N
 * mutating requests are answered NOT_CONTROLLER (nothing applied), to exercise the CLI's retry.
 * --partial: DescribeMirrors answers carry MESSAGE with ErrorCode NONE (a fan-out leg missing).
 * --slow N: pause, resume, stop, recover and start go through an intermediate state (PAUSING,
 * STOPPING, PREPARING) and reach the final one after N more DescribeMirrors requests; stopping
 * topic payments then ends FAILED, not retryable ("cannot write the PID reset").
 * --garbage: DescribeMirrors answers are cut short (half the body), which no decoder accepts.
 * --hangup: StopMirrorTopics is applied, then the connection is closed instead of answering.
 *
 * Initial model: mirror m1 (source src-a:9092,src-b:9092, cluster id SRC-CLUSTER) with topics
 * orders (p0 MIRRORING 1500/1450, p1 MIRRORING 800/800, p2 FAILED retry 3), audit (p0 PAUSED)
 * and payments (p0 FAILED, not retryable); mirror m2 (source other:9092, id not known yet),
 * empty. The source cluster has topics orders, audit, payments, clicks, clicks-eu and
 * __consumer_offsets.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kmc_conf.h"
#include "kp_arena.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "util/km_pattern.h"

#define FB_MAXM 8
#define FB_MAXT 16
#define FB_MAXP 8

typedef struct fb_part {
    char state[24];
    int64_t src, dst, lmo;
    int32_t lme;
    int16_t retry;
    char error[128];  /* "" = none */
    char pending[24]; /* --slow: the state reached when countdown hits 0 */
    int countdown;
} fb_part_t;

typedef struct fb_topic {
    char name[64];
    int nparts;
    fb_part_t p[FB_MAXP];
} fb_topic_t;

typedef struct fb_mirror {
    bool used;
    char name[64], bootstrap[128], cluster_id[64];
    int ntopics;
    fb_topic_t t[FB_MAXT];
} fb_mirror_t;

static fb_mirror_t fb_m[FB_MAXM];
static FILE *fb_log;
static int fb_not_controller;
static const char *fb_partial; /* DescribeMirrors: ErrorMessage with ErrorCode NONE */
static int fb_slow;            /* DescribeMirrors requests before a transition completes */
static bool fb_garbage;        /* DescribeMirrors answers truncated */
static bool fb_hangup;         /* StopMirrorTopics applied, never answered */
static km_plugin_t *fb_cm;
static const char *const fb_source_topics[] = {"orders", "audit",     "payments",
                                               "clicks", "clicks-eu", "__consumer_offsets"};

static void fb_part_set(fb_part_t *p, const char *state, int64_t src, int64_t dst, int16_t retry,
                        const char *err)
{
    memset(p, 0, sizeof(*p));
    snprintf(p->state, sizeof(p->state), "%s", state);
    p->src = src;
    p->dst = dst;
    p->lme = -1;
    p->lmo = -1;
    p->retry = retry;
    snprintf(p->error, sizeof(p->error), "%s", err ? err : "");
}

/* Move @p p to @p final, through @p via for fb_slow DescribeMirrors requests under --slow. */
static void fb_part_move(fb_part_t *p, const char *via, const char *final)
{
    if (fb_slow > 0) {
        snprintf(p->state, sizeof(p->state), "%s", via);
        snprintf(p->pending, sizeof(p->pending), "%s", final);
        p->countdown = fb_slow;
    } else {
        snprintf(p->state, sizeof(p->state), "%s", final);
    }
}

/* --slow: one DescribeMirrors request passed; complete the transitions that are due. */
static void fb_tick(void);

static fb_mirror_t *fb_mirror_add(const char *name, const char *bootstrap, const char *cid)
{
    for (int i = 0; i < FB_MAXM; i++) {
        if (fb_m[i].used)
            continue;
        memset(&fb_m[i], 0, sizeof(fb_m[i]));
        fb_m[i].used = true;
        snprintf(fb_m[i].name, sizeof(fb_m[i].name), "%s", name);
        snprintf(fb_m[i].bootstrap, sizeof(fb_m[i].bootstrap), "%s", bootstrap);
        snprintf(fb_m[i].cluster_id, sizeof(fb_m[i].cluster_id), "%s", cid);
        return &fb_m[i];
    }
    return NULL;
}

static fb_topic_t *fb_topic_add(fb_mirror_t *m, const char *name, int nparts)
{
    fb_topic_t *t = &m->t[m->ntopics++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->nparts = nparts;
    for (int i = 0; i < nparts; i++)
        fb_part_set(&t->p[i], "PREPARING", -1, 0, 0, NULL);
    return t;
}

static void fb_model_init(void)
{
    fb_mirror_t *m = fb_mirror_add("m1", "src-a:9092,src-b:9092", "SRC-CLUSTER");
    fb_topic_t *t = fb_topic_add(m, "orders", 3);
    fb_part_set(&t->p[0], "MIRRORING", 1500, 1450, 0, NULL);
    fb_part_set(&t->p[1], "MIRRORING", 800, 800, 0, NULL);
    fb_part_set(&t->p[2], "FAILED", 10, 10, 3, "source leader src-b:9092 unreachable");
    t = fb_topic_add(m, "audit", 1);
    fb_part_set(&t->p[0], "PAUSED", 40, 40, 0, NULL);
    t = fb_topic_add(m, "payments", 1);
    fb_part_set(&t->p[0], "FAILED", -1, 5, -1, "source topic deleted");
    fb_mirror_add("m2", "other:9092", "");
}

static fb_mirror_t *fb_mirror_find(kp_str_t name)
{
    for (int i = 0; i < FB_MAXM; i++)
        if (fb_m[i].used && kp_str_eq(name, fb_m[i].name))
            return &fb_m[i];
    return NULL;
}

static fb_topic_t *fb_topic_find(fb_mirror_t *m, kp_str_t name)
{
    for (int i = 0; i < m->ntopics; i++)
        if (kp_str_eq(name, m->t[i].name))
            return &m->t[i];
    return NULL;
}

static bool fb_in_any_mirror(const char *topic)
{
    for (int i = 0; i < FB_MAXM; i++)
        for (int k = 0; fb_m[i].used && k < fb_m[i].ntopics; k++)
            if (strcmp(fb_m[i].t[k].name, topic) == 0)
                return true;
    return false;
}

/* Strings that must outlive the request buffer go here (freed at exit). */
static kp_str_t fb_keep(kp_arena_t *ar, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static kp_str_t fb_keep(kp_arena_t *ar, const char *fmt, ...)
{
    char buf[512], *d;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(buf))
        n = sizeof(buf) - 1;
    d = kp_arena_alloc(ar, (size_t)n + 1);
    memcpy(d, buf, (size_t)n + 1);
    return (kp_str_t){d, n};
}

static bool fb_mutation_refused(void)
{
    if (fb_not_controller > 0) {
        fb_not_controller--;
        return true;
    }
    return false;
}

/* ---- handlers: decode req, fill resp (allocations from ar) ---------------------------------- */

static void fb_create(kp_arena_t *ar, const kp_CreateMirrorRequest_t *rq,
                      kp_CreateMirrorResponse_t *rs)
{
    char name[64], boot[128] = "";

    if (fb_mutation_refused()) {
        rs->ErrorCode = KP_ERR_NOT_CONTROLLER;
        rs->ErrorMessage = kp_str("the controller is not available");
        return;
    }
    if (fb_mirror_find(rq->MirrorName) != NULL) {
        rs->ErrorCode = KP_ERR_CLUSTER_MIRROR_ALREADY_EXISTS;
        rs->ErrorMessage =
            fb_keep(ar, "mirror %.*s already exists", (int)rq->MirrorName.len, rq->MirrorName.ptr);
        return;
    }
    for (int32_t i = 0; i < rq->Config.cnt; i++)
        if (kp_str_eq(rq->Config.v[i].Name, "bootstrap.servers") && rq->Config.v[i].Value.len > 0)
            snprintf(boot, sizeof(boot), "%.*s", (int)rq->Config.v[i].Value.len,
                     rq->Config.v[i].Value.ptr);
    snprintf(name, sizeof(name), "%.*s", (int)rq->MirrorName.len, rq->MirrorName.ptr);
    fb_mirror_add(name, boot, "");
}

static void fb_list(kp_arena_t *ar, kp_ListMirrorsResponse_t *rs)
{
    int n = 0;

    rs->Mirrors.v = kp_arena_calloc(ar, FB_MAXM, sizeof(*rs->Mirrors.v));
    for (int i = FB_MAXM - 1; i >= 0; i--) { /* reverse order: the CLI sorts */
        kp_ListMirrorsResponse_ListedMirror_t *lm;
        if (!fb_m[i].used)
            continue;
        lm = &rs->Mirrors.v[n++];
        kp_ListMirrorsResponse_ListedMirror_init(lm);
        lm->MirrorName = kp_str(fb_m[i].name);
        lm->SourceBootstrap = kp_str(fb_m[i].bootstrap);
        lm->SourceClusterId = kp_str(fb_m[i].cluster_id);
        lm->TopicCount = fb_m[i].ntopics;
    }
    rs->Mirrors.cnt = n;
}

static void fb_describe_one(kp_arena_t *ar, kp_DescribeMirrorsResponse_DescribedMirror_t *dm,
                            fb_mirror_t *m)
{
    dm->MirrorName = kp_str(m->name);
    dm->SourceBootstrap = kp_str(m->bootstrap);
    dm->SourceClusterId = m->cluster_id[0] ? kp_str(m->cluster_id) : KP_STR_NULL;
    dm->Topics.cnt = m->ntopics;
    dm->Topics.v = kp_arena_calloc(ar, (size_t)m->ntopics + 1, sizeof(*dm->Topics.v));
    /* Topics and partitions in reverse order: the CLI sorts them. */
    for (int k = 0; k < m->ntopics; k++) {
        fb_topic_t *t = &m->t[m->ntopics - 1 - k];
        kp_DescribeMirrorsResponse_TopicResult_t *tr = &dm->Topics.v[k];
        kp_DescribeMirrorsResponse_TopicResult_init(tr);
        tr->TopicName = kp_str(t->name);
        tr->Partitions.cnt = t->nparts;
        tr->Partitions.v = kp_arena_calloc(ar, (size_t)t->nparts, sizeof(*tr->Partitions.v));
        for (int p = 0; p < t->nparts; p++) {
            fb_part_t *fp = &t->p[t->nparts - 1 - p];
            kp_DescribeMirrorsResponse_PartitionDetail_t *pd = &tr->Partitions.v[p];
            kp_DescribeMirrorsResponse_PartitionDetail_init(pd);
            pd->PartitionIndex = t->nparts - 1 - p;
            pd->StateValue = kp_str(fp->state);
            pd->ErrorMessage = fp->error[0] ? kp_str(fp->error) : KP_STR_NULL;
            pd->RetryAttempt = fp->retry;
            pd->SourceOffset = fp->src;
            pd->DestinationOffset = fp->dst;
            pd->LastMirrorEpoch = fp->lme;
            pd->LastMirrorOffset = fp->lmo;
        }
    }
}

static void fb_tick(void)
{
    for (int i = 0; i < FB_MAXM; i++)
        for (int k = 0; fb_m[i].used && k < fb_m[i].ntopics; k++)
            for (int j = 0; j < fb_m[i].t[k].nparts; j++) {
                fb_part_t *p = &fb_m[i].t[k].p[j];
                if (p->countdown == 0 || --p->countdown > 0)
                    continue;
                snprintf(p->state, sizeof(p->state), "%s", p->pending);
                if (strcmp(p->pending, "FAILED") == 0) {
                    p->retry = -1;
                    snprintf(p->error, sizeof(p->error), "cannot write the PID reset");
                }
            }
}

static void fb_describe(kp_arena_t *ar, const kp_DescribeMirrorsRequest_t *rq,
                        kp_DescribeMirrorsResponse_t *rs)
{
    int n = 0;

    fb_tick();

    rs->Mirrors.v =
        kp_arena_calloc(ar, FB_MAXM + (size_t)(rq->MirrorNames.cnt > 0 ? rq->MirrorNames.cnt : 0),
                        sizeof(*rs->Mirrors.v));
    if (rq->MirrorNames.cnt < 0) {
        for (int i = FB_MAXM - 1; i >= 0; i--) {
            if (!fb_m[i].used)
                continue;
            kp_DescribeMirrorsResponse_DescribedMirror_init(&rs->Mirrors.v[n]);
            fb_describe_one(ar, &rs->Mirrors.v[n++], &fb_m[i]);
        }
    } else {
        for (int32_t i = 0; i < rq->MirrorNames.cnt; i++) {
            kp_DescribeMirrorsResponse_DescribedMirror_t *dm = &rs->Mirrors.v[n++];
            fb_mirror_t *m = fb_mirror_find(rq->MirrorNames.v[i]);
            kp_DescribeMirrorsResponse_DescribedMirror_init(dm);
            if (m == NULL) {
                dm->MirrorName = rq->MirrorNames.v[i];
                dm->ErrorCode = KP_ERR_UNKNOWN_CLUSTER_MIRROR;
                dm->ErrorMessage = fb_keep(ar, "no mirror named %.*s",
                                           (int)rq->MirrorNames.v[i].len, rq->MirrorNames.v[i].ptr);
                continue;
            }
            fb_describe_one(ar, dm, m);
        }
    }
    rs->Mirrors.cnt = n;
    if (fb_partial != NULL)
        rs->ErrorMessage = kp_str(fb_partial);
}

static void fb_start(kp_arena_t *ar, const kp_StartMirrorTopicsRequest_t *rq,
                     kp_StartMirrorTopicsResponse_t *rs)
{
    fb_mirror_t *m = fb_mirror_find(rq->MirrorName);
    km_pattern_t *inc[16] = {0}, *exc[16] = {0};
    size_t ninc = 0, nexc = 0;
    char why[256];
    int n = 0;

    if (fb_mutation_refused()) {
        rs->ErrorCode = KP_ERR_NOT_CONTROLLER;
        return;
    }
    if (m == NULL) {
        rs->ErrorCode = KP_ERR_UNKNOWN_CLUSTER_MIRROR;
        rs->ErrorMessage =
            fb_keep(ar, "no mirror named %.*s", (int)rq->MirrorName.len, rq->MirrorName.ptr);
        return;
    }
    for (int32_t i = 0; i < rq->IncludePatterns.cnt && ninc < 16; i++)
        if (km_pattern_compile(fb_cm, rq->IncludePatterns.v[i].ptr,
                               (size_t)rq->IncludePatterns.v[i].len, &inc[ninc], why,
                               sizeof(why)) == KM_OK)
            ninc++;
    for (int32_t i = 0; i < rq->ExcludePatterns.cnt && nexc < 16; i++)
        if (km_pattern_compile(fb_cm, rq->ExcludePatterns.v[i].ptr,
                               (size_t)rq->ExcludePatterns.v[i].len, &exc[nexc], why,
                               sizeof(why)) == KM_OK)
            nexc++;
    rs->Topics.v = kp_arena_calloc(ar, 8, sizeof(*rs->Topics.v));
    for (size_t i = 0; i < sizeof(fb_source_topics) / sizeof(fb_source_topics[0]); i++) {
        const char *name = fb_source_topics[i];
        kp_StartMirrorTopicsResponse_TopicResult_t *tr;
        bool sel = false;
        km_pattern_select(inc, ninc, exc, nexc, name, &sel);
        if (!sel)
            continue;
        tr = &rs->Topics.v[n++];
        kp_StartMirrorTopicsResponse_TopicResult_init(tr);
        tr->TopicName = kp_str(name);
        if (fb_in_any_mirror(name)) {
            tr->ErrorCode = KP_ERR_TOPIC_ALREADY_IN_CLUSTER_MIRROR;
            tr->ErrorMessage = fb_keep(ar, "topic %s is already mirrored", name);
            continue;
        }
        fb_topic_t *nt = fb_topic_add(m, name, 2);
        for (int p = 0; p < nt->nparts; p++)
            fb_part_move(&nt->p[p], "PREPARING", fb_slow > 0 ? "MIRRORING" : "PREPARING");
    }
    rs->Topics.cnt = n;
    for (size_t i = 0; i < ninc; i++)
        km_pattern_free(inc[i]);
    for (size_t i = 0; i < nexc; i++)
        km_pattern_free(exc[i]);
}

/* Pause (op 'p'), resume (op 'r') or stop (op 's') one topic: error code, message in msg. */
static int16_t fb_topic_op(fb_mirror_t *m, kp_str_t name, char op, kp_arena_t *ar, kp_str_t *msg)
{
    fb_topic_t *t = fb_topic_find(m, name);
    bool changed = false;

    if (t == NULL) {
        *msg = fb_keep(ar, "topic %.*s is not in mirror %s", (int)name.len, name.ptr, m->name);
        return KP_ERR_TOPIC_NOT_IN_CLUSTER_MIRROR;
    }
    for (int i = 0; i < t->nparts; i++) {
        fb_part_t *p = &t->p[i];
        if (op == 'p' && strcmp(p->state, "MIRRORING") == 0) {
            fb_part_move(p, "PAUSING", "PAUSED");
            changed = true;
        } else if (op == 'r' && strcmp(p->state, "PAUSED") == 0) {
            fb_part_move(p, "PAUSED", "MIRRORING");
            changed = true;
        } else if (op == 'r' && strcmp(p->state, "FAILED") == 0) {
            fb_part_set(p, "PREPARING", p->src, p->dst, 0, NULL);
            fb_part_move(p, "PREPARING", fb_slow > 0 ? "MIRRORING" : "PREPARING");
            changed = true;
        } else if (op == 's') {
            p->lme = 7;
            p->lmo = p->dst;
            p->error[0] = '\0';
            fb_part_move(p, "STOPPING",
                         fb_slow > 0 && strcmp(t->name, "payments") == 0 ? "FAILED" : "STOPPED");
            changed = true;
        }
    }
    if (!changed && op == 'p') {
        *msg = fb_keep(ar, "topic %s is already paused", t->name);
        return KP_ERR_MIRROR_TOPIC_ALREADY_PAUSED;
    }
    if (!changed && op == 'r') {
        *msg = fb_keep(ar, "topic %s is neither paused nor failed", t->name);
        return KP_ERR_MIRROR_TOPIC_NOT_PAUSED;
    }
    return 0;
}

static void fb_delete(kp_arena_t *ar, const kp_DeleteMirrorRequest_t *rq,
                      kp_DeleteMirrorResponse_t *rs)
{
    fb_mirror_t *m = fb_mirror_find(rq->MirrorName);
    int busy = 0;

    if (fb_mutation_refused()) {
        rs->ErrorCode = KP_ERR_NOT_CONTROLLER;
        return;
    }
    if (m == NULL) {
        rs->ErrorCode = KP_ERR_UNKNOWN_CLUSTER_MIRROR;
        rs->ErrorMessage =
            fb_keep(ar, "no mirror named %.*s", (int)rq->MirrorName.len, rq->MirrorName.ptr);
        return;
    }
    for (int k = 0; k < m->ntopics; k++)
        for (int i = 0; i < m->t[k].nparts; i++)
            busy += strcmp(m->t[k].p[i].state, "STOPPED") != 0;
    if (busy) {
        rs->ErrorCode = KP_ERR_CLUSTER_MIRROR_NOT_EMPTY;
        rs->ErrorMessage =
            fb_keep(ar, "mirror %s has %d partitions that are not STOPPED", m->name, busy);
        return;
    }
    m->used = false;
}

/* ---- wire --------------------------------------------------------------------------------- */

static int fb_write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int fb_read_all(int fd, uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int fb_send(int fd, int32_t corr, bool flexible_hdr, const kp_msg_desc_t *d, const void *msg,
                   int16_t ver)
{
    kp_writer_t wr;
    int rc;

    if (fb_hangup && d == &kp_StopMirrorTopicsResponse_desc)
        return -1; /* the caller closes the connection */
    kp_writer_init(&wr);
    kp_write_int32(&wr, 0);
    kp_write_int32(&wr, corr);
    if (flexible_hdr)
        kp_write_uvarint(&wr, 0);
    if (kp_msg_encode(d, &wr, msg, ver) != 0 || wr.err) {
        kp_writer_free(&wr);
        return -1;
    }
    if (fb_garbage && d == &kp_DescribeMirrorsResponse_desc)
        wr.len -= (wr.len - 9) / 2; /* keep the header, cut the body in half */
    kp_writer_patch_int32(&wr, 0, (int32_t)(wr.len - 4));
    rc = fb_write_all(fd, wr.buf, wr.len);
    kp_writer_free(&wr);
    return rc;
}

static void fb_log_req(const kp_msg_desc_t *d, const void *msg, int16_t ver)
{
    fprintf(fb_log, "%s ", d->name);
    kp_msg_print(d, fb_log, msg, ver, KP_PRINT_UNREDACTED);
    fputc('\n', fb_log);
    fflush(fb_log);
}

/* Serve one request frame on @p fd. Returns -1 to close the connection. */
static int fb_serve(int fd)
{
    uint8_t lenb[4], *buf;
    int32_t len;
    kp_reader_t rd;
    kp_RequestHeader_t hdr;
    kp_arena_t ar;
    const kp_api_info_t *api;
    int16_t key, ver, hver;
    int rc = -1;

    if (fb_read_all(fd, lenb, 4))
        return -1;
    len = (int32_t)((uint32_t)lenb[0] << 24 | (uint32_t)lenb[1] << 16 | (uint32_t)lenb[2] << 8 |
                    lenb[3]);
    if (len < 8 || len > (1 << 24))
        return -1;
    buf = malloc((size_t)len);
    if (buf == NULL || fb_read_all(fd, buf, (size_t)len)) {
        free(buf);
        return -1;
    }
    kp_arena_init(&ar, 0);
    key = (int16_t)(buf[0] << 8 | buf[1]);
    ver = (int16_t)(buf[2] << 8 | buf[3]);
    api = kp_api_lookup(key);
    if (api == NULL)
        goto out;
    hver = (api->flex_min >= 0 && ver >= api->flex_min) ? 2 : 1;
    kp_reader_init(&rd, buf, (size_t)len);
    kp_msg_init(&kp_RequestHeader_desc, &hdr);
    if (kp_msg_decode(&kp_RequestHeader_desc, &rd, &ar, &hdr, hver) != 0)
        goto out;

#define FB_DECODE(T)                                                                               \
    T##Request_t rq;                                                                               \
    T##Response_t rs;                                                                              \
    kp_msg_init(&T##Request_desc, &rq);                                                            \
    kp_msg_init(&T##Response_desc, &rs);                                                           \
    if (kp_msg_decode(&T##Request_desc, &rd, &ar, &rq, ver) != 0)                                  \
        goto out;                                                                                  \
    fb_log_req(&T##Request_desc, &rq, ver)

    switch (key) {
    case 18: { /* ApiVersions: body always answered at the asked version (0..3) */
        static const int16_t keys[][3] = {{18, 0, 3},  {95, 0, 0},  {96, 0, 0},
                                          {97, 0, 0},  {98, 0, 0},  {99, 0, 0},
                                          {102, 0, 0}, {103, 0, 0}, {104, 0, 0}};
        kp_ApiVersionsResponse_t rs;
        kp_ApiVersionsResponse_ApiVersion_t av[9];
        kp_msg_init(&kp_ApiVersionsResponse_desc, &rs);
        if (ver > 3) {
            rs.ErrorCode = KP_ERR_UNSUPPORTED_VERSION;
            ver = 0;
        }
        for (int i = 0; i < 9; i++) {
            kp_ApiVersionsResponse_ApiVersion_init(&av[i]);
            av[i].ApiKey = keys[i][0];
            av[i].MinVersion = keys[i][1];
            av[i].MaxVersion = keys[i][2];
        }
        rs.ApiKeys.cnt = 9;
        rs.ApiKeys.v = av;
        rc = fb_send(fd, hdr.CorrelationId, false, &kp_ApiVersionsResponse_desc, &rs, ver);
        goto out;
    }
    case 97: {
        FB_DECODE(kp_CreateMirror);
        fb_create(&ar, &rq, &rs);
        rc = fb_send(fd, hdr.CorrelationId, true, &kp_CreateMirrorResponse_desc, &rs, ver);
        goto out;
    }
    case 98: {
        FB_DECODE(kp_ListMirrors);
        fb_list(&ar, &rs);
        rc = fb_send(fd, hdr.CorrelationId, true, &kp_ListMirrorsResponse_desc, &rs, ver);
        goto out;
    }
    case 99: {
        FB_DECODE(kp_DescribeMirrors);
        fb_describe(&ar, &rq, &rs);
        rc = fb_send(fd, hdr.CorrelationId, true, &kp_DescribeMirrorsResponse_desc, &rs, ver);
        goto out;
    }
    case 95: {
        FB_DECODE(kp_StartMirrorTopics);
        fb_start(&ar, &rq, &rs);
        rc = fb_send(fd, hdr.CorrelationId, true, &kp_StartMirrorTopicsResponse_desc, &rs, ver);
        goto out;
    }
    case 96: {
        FB_DECODE(kp_StopMirrorTopics);
        fb_mirror_t *m = fb_mirror_find(rq.MirrorName);
        if (fb_mutation_refused()) {
            rs.ErrorCode = KP_ERR_NOT_CONTROLLER;
        } else if (m == NULL) {
            rs.ErrorCode = KP_ERR_UNKNOWN_CLUSTER_MIRROR;
        } else {
            rs.Topics.cnt = rq.Topics.cnt;
            rs.Topics.v = kp_arena_calloc(&ar, (size_t)rq.Topics.cnt + 1, sizeof(*rs.Topics.v));
            for (int32_t i = 0; i < rq.Topics.cnt; i++) {
                kp_StopMirrorTopicsResponse_TopicResult_init(&rs.Topics.v[i]);
                rs.Topics.v[i].Name = rq.Topics.v[i].TopicName;
                rs.Topics.v[i].ErrorCode = fb_topic_op(m, rq.Topics.v[i].TopicName, 's', &ar,
                                                       &rs.Topics.v[i].ErrorMessage);
            }
        }
        rc = fb_send(fd, hdr.CorrelationId, true, &kp_StopMirrorTopicsResponse_desc, &rs, ver);
        goto out;
    }
    case 102: {
        FB_DECODE(kp_PauseMirrorTopics);
        fb_mirror_t *m = fb_mirror_find(rq.MirrorName);
        if (fb_mutation_refused()) {
            rs.ErrorCode = KP_ERR_NOT_CONTROLLER;
        } else if (m == NULL) {
            rs.ErrorCode = KP_ERR_UNKNOWN_CLUSTER_MIRROR;
        } else {
            rs.Topics.cnt = rq.Topics.cnt;
            rs.Topics.v = kp_arena_calloc(&ar, (size_t)rq.Topics.cnt + 1, sizeof(*rs.Topics.v));
            for (int32_t i = 0; i < rq.Topics.cnt; i++) {
                kp_PauseMirrorTopicsResponse_TopicResult_init(&rs.Topics.v[i]);
                rs.Topics.v[i].TopicName = rq.Topics.v[i].TopicName;
                rs.Topics.v[i].ErrorCode = fb_topic_op(m, rq.Topics.v[i].TopicName, 'p', &ar,
                                                       &rs.Topics.v[i].ErrorMessage);
            }
        }
        rc = fb_send(fd, hdr.CorrelationId, true, &kp_PauseMirrorTopicsResponse_desc, &rs, ver);
        goto out;
    }
    case 103: {
        FB_DECODE(kp_ResumeMirrorTopics);
        fb_mirror_t *m = fb_mirror_find(rq.MirrorName);
        rs.MirrorName = rq.MirrorName;
        if (fb_mutation_refused()) {
            rs.ErrorCode = KP_ERR_NOT_CONTROLLER;
        } else if (m == NULL) {
            rs.ErrorCode = KP_ERR_UNKNOWN_CLUSTER_MIRROR;
        } else {
            rs.Topics.cnt = rq.Topics.cnt;
            rs.Topics.v = kp_arena_calloc(&ar, (size_t)rq.Topics.cnt + 1, sizeof(*rs.Topics.v));
            for (int32_t i = 0; i < rq.Topics.cnt; i++) {
                kp_str_t ignored;
                kp_ResumeMirrorTopicsResponse_TopicResult_init(&rs.Topics.v[i]);
                rs.Topics.v[i].Name = rq.Topics.v[i].TopicName;
                rs.Topics.v[i].ErrorCode =
                    fb_topic_op(m, rq.Topics.v[i].TopicName, 'r', &ar, &ignored);
            }
        }
        rc = fb_send(fd, hdr.CorrelationId, true, &kp_ResumeMirrorTopicsResponse_desc, &rs, ver);
        goto out;
    }
    case 104: {
        FB_DECODE(kp_DeleteMirror);
        fb_delete(&ar, &rq, &rs);
        rc = fb_send(fd, hdr.CorrelationId, true, &kp_DeleteMirrorResponse_desc, &rs, ver);
        goto out;
    }
    default:
        break;
    }
out:
    kp_arena_free(&ar);
    free(buf);
    return rc;
}

int main(int argc, char **argv)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    struct pollfd pf[9];
    int lfd, nfd = 1, one = 1;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--log") == 0 && i + 1 < argc)
            fb_log = fopen(argv[++i], "a");
        else if (strcmp(argv[i], "--not-controller") == 0 && i + 1 < argc)
            fb_not_controller = atoi(argv[++i]);
        else if (strcmp(argv[i], "--partial") == 0 && i + 1 < argc)
            fb_partial = argv[++i];
        else if (strcmp(argv[i], "--slow") == 0 && i + 1 < argc)
            fb_slow = atoi(argv[++i]);
        else if (strcmp(argv[i], "--garbage") == 0)
            fb_garbage = true;
        else if (strcmp(argv[i], "--hangup") == 0)
            fb_hangup = true;
    }
    if (fb_log == NULL) {
        fprintf(stderr, "usage: kmc_fakebroker --log FILE [--not-controller N]\n");
        return 2;
    }
    /* Never outlive the test script, even one killed by a ctest timeout. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() == 1)
        return 1;
    fb_cm = kmc_conf_plugin_new();
    fb_model_init();
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 8) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0) {
        perror("kmc_fakebroker: listen");
        return 1;
    }
    printf("PORT %d\n", ntohs(sa.sin_port));
    fflush(stdout);
    pf[0].fd = lfd;
    pf[0].events = POLLIN;
    for (;;) {
        if (poll(pf, (nfds_t)nfd, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        for (int i = nfd - 1; i >= 1; i--) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (fb_serve(pf[i].fd) != 0) {
                close(pf[i].fd);
                pf[i] = pf[--nfd];
            }
        }
        if ((pf[0].revents & POLLIN) && nfd < 9) {
            int cfd = accept(lfd, NULL, NULL);
            if (cfd >= 0) {
                pf[nfd].fd = cfd;
                pf[nfd].events = POLLIN;
                nfd++;
            }
        }
    }
}
