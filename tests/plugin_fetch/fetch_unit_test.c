/*
 * fetch_unit_test.c - the MirrorFetcherManager (plugin/fetch) against the fake host as the
 * destination and a scripted fake source broker (a thread with a listening socket on 127.0.0.1
 * that answers ApiVersions, Metadata, Fetch, ListOffsets and OffsetsForLeaderEpoch from a log of
 * record batches held in memory).
 *
 * Covered: the batch walk (framing, CRC, magic, offsets, epochs), byte-identical appends,
 * corrupt batch -> FATAL naming the partition and offset, magic 1 -> FATAL "unsupported message
 * format", OFFSET_OUT_OF_RANGE below the source log start -> log start moved and fetching goes
 * on, above the source log end -> DIVERGED (no reset), DivergingEpoch (v12+) and
 * OffsetsForLeaderEpoch (v11 source) divergence, a batch above the destination epoch ->
 * EPOCH_EXCEEDED then resume, incremental fetch sessions, pause/remove, non-PLAINTEXT refused.
 * Waiting is by stepping the fake host with a real-time deadline, never sleeping.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/km_config.h"
#include "core/km_plugin.h"
#include "core/km_plugin_types.h"
#include "fakehost.h"
#include "fetch/km_fetch.h"
#include "fh_cunit.h"
#include "kp_arena.h"
#include "kp_batch.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "kp_reader.h"
#include "kp_writer.h"
#include "rpc/km_srcadm.h"

#define WAIT_MS 10000

static const kbx_uuid_t DST_ID = {{0xd5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};
static const kbx_uuid_t SRC_ID = {{0x5c, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5}};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* ---- fake source broker ------------------------------------------------------------------ */

typedef struct src_req {
    int16_t ver;
    int32_t session_id, session_epoch;
    int32_t nparts, nforgotten;
    int64_t fetch_offset;
    int32_t last_fetched_epoch;
} src_req_t;

typedef struct src_s {
    int lfd, port;
    pthread_t thr;
    atomic_int stop;
    pthread_mutex_t mu;
    /* the script (under mu) */
    uint8_t *log;
    size_t log_len;
    int64_t log_start; /* earliest offset (ListOffsets -2); below it: OFFSET_OUT_OF_RANGE */
    int16_t fetch_max; /* advertised Fetch max version */
    int16_t fetch_min; /* advertised Fetch min version (-1: the codec's) */
    int16_t md_max;    /* advertised Metadata max version (-1: the codec's) */
    int16_t ofle_min, ofle_max; /* advertised OffsetForLeaderEpoch range (-1: the codec's) */
    int16_t dc_max;             /* >= 0: DescribeConfigs v0..dc_max advertised too */
    int32_t leader_epoch;
    kbx_uuid_t topic_id;
    bool sessions;
    int32_t diverge_epoch; /* >= 0: answer DivergingEpoch (epoch, diverge_end) once */
    int64_t diverge_end;
    int32_t ofle_epoch; /* OffsetsForLeaderEpoch answer */
    int64_t ofle_end;
    const char *cluster_id; /* Metadata's ClusterId */
    bool gone;              /* the topic is unknown: Metadata UNKNOWN_TOPIC_OR_PARTITION, Fetch
                               UNKNOWN_TOPIC_ID */
    int gone_answers;       /* > 0: gone ends after that many Metadata answers */
    /* what was asked (under mu) */
    src_req_t reqs[512];
    int nreqs;
    int n_list_offsets, n_ofle, n_metadata;
    int16_t ofle_ver, md_ver; /* of the last OffsetsForLeaderEpoch / Metadata request */
} src_t;

static src_t SRC;

static int src_write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int src_read_n(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        ssize_t r;
        if (atomic_load(&SRC.stop))
            return -1;
        if (poll(&pf, 1, 20) <= 0)
            continue;
        r = recv(fd, b, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static void src_respond(int fd, int32_t corr, int16_t key, int16_t ver, kp_writer_t *body)
{
    kp_writer_t wr;
    int flex = kp_response_header_version(key, ver) == 1;
    kp_writer_init(&wr);
    kp_write_int32(&wr, (int32_t)(4 + (flex ? 1 : 0) + body->len));
    kp_write_int32(&wr, corr);
    if (flex)
        kp_write_uvarint(&wr, 0);
    kp_write_raw(&wr, body->buf, body->len);
    src_write_all(fd, wr.buf, wr.len);
    kp_writer_free(&wr);
}

static void src_apiversions(int fd, int32_t corr, int16_t ver)
{
    static const int16_t keys[] = {KP_APIKEY_Fetch, KP_APIKEY_Metadata, KP_APIKEY_ListOffsets,
                                   KP_APIKEY_OffsetForLeaderEpoch, KP_APIKEY_ApiVersions};
    kp_ApiVersionsResponse_t resp;
    kp_ApiVersionsResponse_ApiVersion_t av[6];
    kp_writer_t wr;

    kp_ApiVersionsResponse_init(&resp);
    for (int i = 0; i < 5; i++) {
        const kp_api_info_t *a = kp_api_lookup(keys[i]);
        memset(&av[i], 0, sizeof(av[i]));
        av[i].ApiKey = keys[i];
        av[i].MinVersion = a->min_ver;
        av[i].MaxVersion = keys[i] == KP_APIKEY_Fetch         ? SRC.fetch_max
                           : keys[i] == KP_APIKEY_ApiVersions ? 3
                                                              : a->max_ver;
        if (keys[i] == KP_APIKEY_Fetch && SRC.fetch_min >= 0)
            av[i].MinVersion = SRC.fetch_min;
        if (keys[i] == KP_APIKEY_Metadata && SRC.md_max >= 0)
            av[i].MaxVersion = SRC.md_max;
        if (keys[i] == KP_APIKEY_OffsetForLeaderEpoch && SRC.ofle_max >= 0) {
            av[i].MinVersion = SRC.ofle_min;
            av[i].MaxVersion = SRC.ofle_max;
        }
    }
    resp.ApiKeys.v = av;
    resp.ApiKeys.cnt = 5;
    if (SRC.dc_max >= 0) {
        memset(&av[5], 0, sizeof(av[5]));
        av[5].ApiKey = KP_APIKEY_DescribeConfigs;
        av[5].MinVersion = 0;
        av[5].MaxVersion = SRC.dc_max;
        resp.ApiKeys.cnt = 6;
    }
    if (ver > 3)
        ver = 3;
    kp_writer_init(&wr);
    kp_ApiVersionsResponse_encode(&wr, &resp, ver);
    src_respond(fd, corr, KP_APIKEY_ApiVersions, ver, &wr);
    kp_writer_free(&wr);
}

static void src_metadata(int fd, int32_t corr, int16_t ver)
{
    kp_MetadataResponse_t resp;
    kp_MetadataResponse_MetadataResponseBroker_t b;
    kp_MetadataResponse_MetadataResponseTopic_t t;
    kp_MetadataResponse_MetadataResponsePartition_t p;
    int32_t nodes[1] = {0};
    kp_writer_t wr;

    kp_MetadataResponse_init(&resp);
    kp_MetadataResponse_MetadataResponseBroker_init(&b);
    kp_MetadataResponse_MetadataResponseTopic_init(&t);
    kp_MetadataResponse_MetadataResponsePartition_init(&p);
    b.NodeId = 0;
    b.Host = kp_str("127.0.0.1");
    b.Port = SRC.port;
    t.Name = kp_str("src");
    memcpy(t.TopicId.b, SRC.topic_id.bytes, 16);
    p.PartitionIndex = 0;
    p.LeaderId = 0;
    pthread_mutex_lock(&SRC.mu);
    p.LeaderEpoch = SRC.leader_epoch;
    SRC.n_metadata++;
    SRC.md_ver = ver;
    resp.ClusterId = kp_str(SRC.cluster_id);
    if (SRC.gone) {
        t.ErrorCode = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
        memset(t.TopicId.b, 0, 16);
        if (SRC.gone_answers > 0 && --SRC.gone_answers == 0)
            SRC.gone = false;
    }
    pthread_mutex_unlock(&SRC.mu);
    p.ReplicaNodes.v = nodes;
    p.ReplicaNodes.cnt = 1;
    p.IsrNodes.v = nodes;
    p.IsrNodes.cnt = 1;
    t.Partitions.v = &p;
    t.Partitions.cnt = t.ErrorCode == 0 ? 1 : 0;
    resp.Brokers.v = &b;
    resp.Brokers.cnt = 1;
    resp.Topics.v = &t;
    resp.Topics.cnt = 1;
    kp_writer_init(&wr);
    kp_MetadataResponse_encode(&wr, &resp, ver);
    src_respond(fd, corr, KP_APIKEY_Metadata, ver, &wr);
    kp_writer_free(&wr);
}

/* Log end offset of the script's log (last batch's last offset + 1), walking batch lengths. */
static int64_t src_log_end(void)
{
    size_t pos = 0;
    int64_t end = SRC.log_start;
    while (pos + 61 <= SRC.log_len) {
        int64_t base = (int64_t)be(SRC.log + pos, 8);
        uint32_t blen = (uint32_t)be(SRC.log + pos + 8, 4);
        int32_t lod = (int32_t)be(SRC.log + pos + 23, 4);
        end = base + lod + 1;
        pos += 12 + (size_t)blen;
    }
    return end;
}

static void src_fetch(int fd, int32_t corr, int16_t ver, kp_FetchRequest_t *rq)
{
    kp_FetchResponse_t resp;
    kp_FetchResponse_FetchableTopicResponse_t tr;
    kp_FetchResponse_PartitionData_t pd;
    kp_writer_t wr;
    src_req_t *r = NULL;
    int64_t off = -1;
    bool have = false;

    kp_FetchResponse_init(&resp);
    kp_FetchResponse_FetchableTopicResponse_init(&tr);
    kp_FetchResponse_PartitionData_init(&pd);
    pthread_mutex_lock(&SRC.mu);
    if (SRC.nreqs < 512)
        r = &SRC.reqs[SRC.nreqs++];
    if (r != NULL) {
        memset(r, 0, sizeof(*r));
        r->ver = ver;
        r->session_id = rq->SessionId;
        r->session_epoch = rq->SessionEpoch;
        r->fetch_offset = -1;
        r->last_fetched_epoch = -1;
        for (int32_t i = 0; i < rq->Topics.cnt; i++)
            r->nparts += rq->Topics.v[i].Partitions.cnt;
        for (int32_t i = 0; i < rq->ForgottenTopicsData.cnt; i++)
            r->nforgotten += rq->ForgottenTopicsData.v[i].Partitions.cnt;
        if (rq->Topics.cnt > 0 && rq->Topics.v[0].Partitions.cnt > 0) {
            r->fetch_offset = rq->Topics.v[0].Partitions.v[0].FetchOffset;
            r->last_fetched_epoch = rq->Topics.v[0].Partitions.v[0].LastFetchedEpoch;
        }
    }
    if (ver >= 7)
        resp.SessionId = SRC.sessions ? (rq->SessionEpoch == 0 ? 77 : rq->SessionId) : 0;
    if (rq->Topics.cnt > 0 && rq->Topics.v[0].Partitions.cnt > 0) {
        off = rq->Topics.v[0].Partitions.v[0].FetchOffset;
        have = true;
    } else if (SRC.nreqs >= 2) {
        /* incremental with nothing changed: the session's position is the last one sent */
        for (int i = SRC.nreqs - 2; i >= 0 && off < 0; i--)
            off = SRC.reqs[i].fetch_offset;
    }
    tr.Topic = kp_str("src");
    memcpy(tr.TopicId.b, SRC.topic_id.bytes, 16);
    pd.PartitionIndex = 0;
    pd.HighWatermark = src_log_end();
    pd.LastStableOffset = pd.HighWatermark;
    pd.LogStartOffset = SRC.log_start;
    if (SRC.gone) { /* in every answer, as a session reports a partition's new error */
        pd.ErrorCode = KP_ERR_UNKNOWN_TOPIC_ID;
        have = true;
        pd.HighWatermark = -1;
    } else if (off >= 0 && (off < SRC.log_start || off > src_log_end())) {
        pd.ErrorCode = KP_ERR_OFFSET_OUT_OF_RANGE;
        pd.HighWatermark = -1;
        have = true;
    } else if (have && ver >= 12 && SRC.diverge_epoch >= 0 && r != NULL &&
               r->last_fetched_epoch >= 0) {
        pd.DivergingEpoch.Epoch = SRC.diverge_epoch;
        pd.DivergingEpoch.EndOffset = SRC.diverge_end;
        SRC.diverge_epoch = -1;
    } else if (off >= 0) {
        size_t pos = 0, from = SRC.log_len;
        while (pos + 61 <= SRC.log_len) {
            int64_t base = (int64_t)be(SRC.log + pos, 8);
            uint32_t blen = (uint32_t)be(SRC.log + pos + 8, 4);
            int32_t lod = (int32_t)be(SRC.log + pos + 23, 4);
            if (base + lod >= off) {
                from = pos;
                break;
            }
            pos += 12 + (size_t)blen;
        }
        if (from < SRC.log_len) {
            pd.Records.ptr = SRC.log + from;
            pd.Records.len = (int32_t)(SRC.log_len - from);
            have = true;
        }
    }
    if (have) {
        tr.Partitions.v = &pd;
        tr.Partitions.cnt = 1;
        resp.Responses.v = &tr;
        resp.Responses.cnt = 1;
    }
    kp_writer_init(&wr);
    kp_FetchResponse_encode(&wr, &resp, ver);
    pthread_mutex_unlock(&SRC.mu);
    if (!have) {
        /* the long poll of an incremental fetch with nothing new: wait like a broker would */
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        poll(&pf, 1, rq->MaxWaitMs < 50 ? rq->MaxWaitMs : 50);
    }
    src_respond(fd, corr, KP_APIKEY_Fetch, ver, &wr);
    kp_writer_free(&wr);
}

static void src_list_offsets(int fd, int32_t corr, int16_t ver, kp_ListOffsetsRequest_t *rq)
{
    kp_ListOffsetsResponse_t resp;
    kp_ListOffsetsResponse_ListOffsetsTopicResponse_t tr;
    kp_ListOffsetsResponse_ListOffsetsPartitionResponse_t pr;
    kp_writer_t wr;
    int64_t ts = rq->Topics.cnt > 0 && rq->Topics.v[0].Partitions.cnt > 0
                     ? rq->Topics.v[0].Partitions.v[0].Timestamp
                     : -1;

    kp_ListOffsetsResponse_init(&resp);
    kp_ListOffsetsResponse_ListOffsetsTopicResponse_init(&tr);
    kp_ListOffsetsResponse_ListOffsetsPartitionResponse_init(&pr);
    pthread_mutex_lock(&SRC.mu);
    SRC.n_list_offsets++;
    pr.Offset = ts == -2 ? SRC.log_start : src_log_end();
    pthread_mutex_unlock(&SRC.mu);
    pr.PartitionIndex = 0;
    pr.Timestamp = -1;
    pr.LeaderEpoch = SRC.leader_epoch;
    tr.Name = kp_str("src");
    tr.Partitions.v = &pr;
    tr.Partitions.cnt = 1;
    resp.Topics.v = &tr;
    resp.Topics.cnt = 1;
    kp_writer_init(&wr);
    kp_ListOffsetsResponse_encode(&wr, &resp, ver);
    src_respond(fd, corr, KP_APIKEY_ListOffsets, ver, &wr);
    kp_writer_free(&wr);
}

static void src_ofle(int fd, int32_t corr, int16_t ver)
{
    kp_OffsetForLeaderEpochResponse_t resp;
    kp_OffsetForLeaderEpochResponse_OffsetForLeaderTopicResult_t tr;
    kp_OffsetForLeaderEpochResponse_EpochEndOffset_t eo;
    kp_writer_t wr;

    kp_OffsetForLeaderEpochResponse_init(&resp);
    kp_OffsetForLeaderEpochResponse_OffsetForLeaderTopicResult_init(&tr);
    kp_OffsetForLeaderEpochResponse_EpochEndOffset_init(&eo);
    pthread_mutex_lock(&SRC.mu);
    SRC.n_ofle++;
    SRC.ofle_ver = ver;
    eo.LeaderEpoch = SRC.ofle_epoch;
    eo.EndOffset = SRC.ofle_end;
    pthread_mutex_unlock(&SRC.mu);
    tr.Topic = kp_str("src");
    tr.Partitions.v = &eo;
    tr.Partitions.cnt = 1;
    resp.Topics.v = &tr;
    resp.Topics.cnt = 1;
    kp_writer_init(&wr);
    kp_OffsetForLeaderEpochResponse_encode(&wr, &resp, ver);
    src_respond(fd, corr, KP_APIKEY_OffsetForLeaderEpoch, ver, &wr);
    kp_writer_free(&wr);
}

static void src_serve(int fd)
{
    for (;;) {
        uint8_t h[4], *f;
        uint32_t n;
        int16_t key, ver;
        int32_t corr;
        kp_reader_t rd;
        kp_arena_t ar;

        if (src_read_n(fd, h, 4) != 0)
            return;
        n = (uint32_t)be(h, 4);
        if (n < 10 || n > (1u << 24))
            return;
        f = malloc(n);
        if (src_read_n(fd, f, n) != 0) {
            free(f);
            return;
        }
        key = (int16_t)be(f, 2);
        ver = (int16_t)be(f + 2, 2);
        corr = (int32_t)be(f + 4, 4);
        kp_reader_init(&rd, f + 8, n - 8);
        {
            int16_t cl = kp_read_int16(&rd);
            if (cl > 0)
                kp_read_raw(&rd, (size_t)cl);
            if (kp_request_header_version(key, ver) == 2)
                kp_read_uvarint(&rd); /* no header tags from kc_ */
        }
        kp_arena_init(&ar, 0);
        if (key == KP_APIKEY_ApiVersions) {
            src_apiversions(fd, corr, ver);
        } else if (key == KP_APIKEY_Metadata) {
            src_metadata(fd, corr, ver);
        } else if (key == KP_APIKEY_Fetch) {
            kp_FetchRequest_t rq;
            kp_FetchRequest_init(&rq);
            CU_ASSERT_EQUAL(kp_FetchRequest_decode(&rd, &ar, &rq, ver), 0);
            CU_ASSERT_EQUAL(rq.IsolationLevel, 0);
            CU_ASSERT_EQUAL(ver >= 15 ? rq.ReplicaState.ReplicaId : rq.ReplicaId, -1);
            src_fetch(fd, corr, ver, &rq);
        } else if (key == KP_APIKEY_ListOffsets) {
            kp_ListOffsetsRequest_t rq;
            kp_ListOffsetsRequest_init(&rq);
            CU_ASSERT_EQUAL(kp_ListOffsetsRequest_decode(&rd, &ar, &rq, ver), 0);
            src_list_offsets(fd, corr, ver, &rq);
        } else if (key == KP_APIKEY_OffsetForLeaderEpoch) {
            src_ofle(fd, corr, ver);
        }
        kp_arena_free(&ar);
        free(f);
    }
}

static void *src_conn_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    src_serve(fd);
    close(fd);
    return NULL;
}

/* One thread per connection: every fetcher thread has its own client. */
static void *src_main(void *arg)
{
    pthread_t conns[64];
    int nconn = 0;
    (void)arg;
    while (!atomic_load(&SRC.stop)) {
        struct pollfd pf = {.fd = SRC.lfd, .events = POLLIN};
        int fd;
        if (poll(&pf, 1, 20) <= 0)
            continue;
        fd = accept(SRC.lfd, NULL, NULL);
        if (fd < 0)
            continue;
        if (nconn == 64 ||
            pthread_create(&conns[nconn], NULL, src_conn_main, (void *)(intptr_t)fd) != 0) {
            close(fd);
            continue;
        }
        nconn++;
    }
    for (int i = 0; i < nconn; i++)
        pthread_join(conns[i], NULL);
    return NULL;
}

static void src_start(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    int one = 1;

    memset(&SRC, 0, sizeof(SRC));
    pthread_mutex_init(&SRC.mu, NULL);
    SRC.fetch_max = 18;
    SRC.fetch_min = -1;
    SRC.md_max = -1;
    SRC.ofle_min = SRC.ofle_max = -1;
    SRC.dc_max = -1;
    SRC.leader_epoch = 5;
    SRC.sessions = true;
    SRC.topic_id = SRC_ID;
    SRC.diverge_epoch = -1;
    SRC.ofle_epoch = -1;
    SRC.ofle_end = -1;
    SRC.cluster_id = "src-cluster";
    SRC.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    setsockopt(SRC.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    CU_ASSERT_FATAL(bind(SRC.lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CU_ASSERT_FATAL(listen(SRC.lfd, 16) == 0);
    getsockname(SRC.lfd, (struct sockaddr *)&a, &al);
    SRC.port = ntohs(a.sin_port);
    CU_ASSERT_FATAL(pthread_create(&SRC.thr, NULL, src_main, NULL) == 0);
}

static void src_stop(void)
{
    atomic_store(&SRC.stop, 1);
    pthread_join(SRC.thr, NULL);
    close(SRC.lfd);
    free(SRC.log);
    pthread_mutex_destroy(&SRC.mu);
}

/* Append one batch (base, epoch, n records) to the script's log; returns its position. */
static size_t src_add_batch(int64_t base, int32_t epoch, int32_t n)
{
    uint8_t *b;
    size_t len, pos;

    CU_ASSERT_FATAL(fakehost_batch_build(base, epoch, -1, -1, false, n, &b, &len) == 0);
    pthread_mutex_lock(&SRC.mu);
    pos = SRC.log_len;
    SRC.log = realloc(SRC.log, SRC.log_len + len);
    memcpy(SRC.log + SRC.log_len, b, len);
    SRC.log_len += len;
    pthread_mutex_unlock(&SRC.mu);
    free(b);
    return pos;
}

/* ---- the destination side ----------------------------------------------------------------- */

typedef struct tc {
    fakehost_t *fh;
    km_plugin_t *cm;
    km_fetch_mgr_t *fm;
    km_mirror_config_t mc;
    km_fetch_part_t *fp;
    km_fetch_event_t evs[256];
    int nev;
    int removed;
} tc_t;

static tc_t T;

static void tc_on_event(km_plugin_t *cm, void *opaque, const km_fetch_event_t *ev)
{
    (void)cm;
    CU_ASSERT_PTR_EQUAL(opaque, &T);
    if (T.nev < 256)
        T.evs[T.nev++] = *ev;
}

static void tc_on_removed(km_plugin_t *cm, void *arg)
{
    (void)cm;
    CU_ASSERT_PTR_EQUAL(arg, &T);
    T.removed++;
}

static const km_fetch_event_t *tc_find(int type)
{
    for (int i = 0; i < T.nev; i++)
        if (T.evs[i].type == type)
            return &T.evs[i];
    return NULL;
}

static void tc_setup(int32_t dst_epoch)
{
    void *ctx = NULL;
    char err[256] = "";
    km_fetch_opts_t o = {
        .on_event = tc_on_event, .poll_ms = 5, .latch_wait_ms = 1, .topic_gone_ms = 300};
    char bs[64];

    memset(&T, 0, sizeof(T));
    src_start();
    T.fh = fakehost_new(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(T.fh);
    fakehost_config_set(T.fh, "mirror.enable", "true");
    fakehost_set_log_level(T.fh, KBX_LOG_INFO);
    CU_ASSERT_EQUAL_FATAL(
        fakehost_partition_add(T.fh, &DST_ID, "dst", 0, dst_epoch, true, KBX_WRITE_READ_ONLY), 0);
    CU_ASSERT_EQUAL_FATAL(
        kbx_plugin_entry()->init(fakehost_api(T.fh), fakehost_host(T.fh), &ctx, err, sizeof(err)),
        0);
    T.cm = ctx;
    T.fm = km_fetch_mgr_create(T.cm, &o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(T.fm);
    CU_ASSERT_EQUAL_FATAL(km_config_init(T.cm, &km_config_mirror_scope, &T.mc, err, sizeof(err)),
                          KM_OK);
    snprintf(bs, sizeof(bs), "127.0.0.1:%d", SRC.port);
    CU_ASSERT_EQUAL(km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "bootstrap.servers", bs,
                                  err, sizeof(err)),
                    KM_OK);
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "fetch.backoff.ms", "5", err, sizeof(err));
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "fetch.wait.max.ms", "20", err,
                  sizeof(err));
    km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "retry.backoff.ms", "5", err, sizeof(err));
    CU_ASSERT_EQUAL_FATAL(km_fetch_mirror_set(T.fm, "m1", &T.mc, err, sizeof(err)), KM_OK);
}

static void tc_add_id(int64_t fetch_offset, int32_t lfe, int32_t dst_epoch, kbx_uuid_t src_id)
{
    km_fetch_part_spec_t s = {
        .mirror = "m1",
        .source_topic = "src",
        .source_topic_id = src_id,
        .partition = 0,
        .dest_topic_id = DST_ID,
        .dest_leader_epoch = dst_epoch,
        .fetch_offset = fetch_offset,
        .last_fetched_epoch = lfe,
        .opaque = &T,
    };
    CU_ASSERT_EQUAL_FATAL(km_fetch_partition_add(T.fm, &s, &T.fp), KM_OK);
}

static void tc_add(int64_t fetch_offset, int32_t lfe, int32_t dst_epoch)
{
    tc_add_id(fetch_offset, lfe, dst_epoch, SRC_ID);
}

/* Step the fake host until cond() or the real-time deadline. */
static bool tc_wait(bool (*cond)(void))
{
    int64_t end = now_ms() + WAIT_MS;
    while (!cond()) {
        if (now_ms() > end)
            return false;
        fakehost_advance_ms(T.fh, 1);
    }
    return true;
}

static void tc_teardown(void)
{
    char buf[512];

    km_fetch_mgr_destroy(T.fm);
    km_config_free(T.cm, &km_config_mirror_scope, &T.mc);
    kbx_plugin_entry()->fini(T.cm);
    CU_ASSERT_EQUAL(fakehost_check_clean(T.fh, buf, sizeof(buf)), 0);
    if (fakehost_check_clean(T.fh, buf, sizeof(buf)) != 0)
        fprintf(stderr, "\n    fake host not clean: %s\n", buf);
    fakehost_free(T.fh);
    src_stop();
}

static int64_t tc_dst_leo(void)
{
    kbx_log_offsets_t lo = {.struct_size = sizeof(lo)};
    size_t len;
    fakehost_partition_log(T.fh, &DST_ID, 0, &len, &lo);
    return lo.log_end_offset;
}

static int64_t WANT_LEO;
static int WANT_EV;
static bool c_leo(void)
{
    return tc_dst_leo() >= WANT_LEO;
}
static int64_t WANT_START;
static bool c_start(void)
{
    kbx_log_offsets_t lo = {.struct_size = sizeof(lo)};
    size_t len;
    fakehost_partition_log(T.fh, &DST_ID, 0, &len, &lo);
    return lo.log_start_offset >= WANT_START;
}
static bool c_ev(void)
{
    return tc_find(WANT_EV) != NULL;
}
static bool c_idle_at_12(void)
{
    bool at12 = false, idle = false;
    pthread_mutex_lock(&SRC.mu);
    for (int i = 1; i < SRC.nreqs; i++) {
        if (SRC.reqs[i].nparts == 1 && SRC.reqs[i].fetch_offset == 12)
            at12 = true;
        else if (at12 && SRC.reqs[i].nparts == 0)
            idle = true;
    }
    pthread_mutex_unlock(&SRC.mu);
    return idle;
}
static bool c_two_threads(void)
{
    return km_fetch_thread_count(T.fm) == 2;
}
static bool c_removed(void)
{
    return T.removed > 0;
}

/* ---- the batch walk ----------------------------------------------------------------------- */

static uint8_t *mk_chunk(size_t *len, int n, const int64_t *bases, const int32_t *epochs,
                         size_t *pos)
{
    uint8_t *out = NULL;
    *len = 0;
    for (int i = 0; i < n; i++) {
        uint8_t *b;
        size_t bl;
        CU_ASSERT_FATAL(fakehost_batch_build(bases[i], epochs[i], -1, -1, false, 3, &b, &bl) == 0);
        out = realloc(out, *len + bl);
        memcpy(out + *len, b, bl);
        if (pos != NULL)
            pos[i] = *len;
        *len += bl;
        free(b);
    }
    return out;
}

static void test_plan(void)
{
    const int64_t bases[3] = {0, 3, 6};
    const int32_t epochs[3] = {1, 1, 2};
    size_t len, pos[3];
    uint8_t *c = mk_chunk(&len, 3, bases, epochs, pos);
    km_fetch_plan_t pl;

    km_fetch_plan_chunk(c, len, 0, 5, &pl);
    CU_ASSERT_EQUAL(pl.stop, KM_FETCH_STOP_NONE);
    CU_ASSERT_EQUAL(pl.start, 0);
    CU_ASSERT_EQUAL(pl.end, len);
    CU_ASSERT_EQUAL(pl.batches, 3);
    CU_ASSERT_EQUAL(pl.records, 9);
    CU_ASSERT_EQUAL(pl.next_offset, 9);
    CU_ASSERT_EQUAL(pl.last_epoch, 2);

    /* batches wholly below the fetch offset are skipped */
    km_fetch_plan_chunk(c, len, 4, 5, &pl);
    CU_ASSERT_EQUAL(pl.start, pos[1]);
    CU_ASSERT_EQUAL(pl.batches, 2);

    /* a trailing partial batch is left for the next fetch */
    km_fetch_plan_chunk(c, len - 7, 0, 5, &pl);
    CU_ASSERT_EQUAL(pl.stop, KM_FETCH_STOP_NONE);
    CU_ASSERT_EQUAL(pl.end, pos[2]);
    CU_ASSERT_EQUAL(pl.next_offset, 6);

    /* epoch above the destination's: stop before that batch */
    km_fetch_plan_chunk(c, len, 0, 1, &pl);
    CU_ASSERT_EQUAL(pl.stop, KM_FETCH_STOP_EPOCH);
    CU_ASSERT_EQUAL(pl.stop_epoch, 2);
    CU_ASSERT_EQUAL(pl.stop_offset, 6);
    CU_ASSERT_EQUAL(pl.end, pos[2]);

    /* a flipped byte inside the CRC range of the second batch */
    c[pos[1] + 70] ^= 0x40;
    km_fetch_plan_chunk(c, len, 0, 5, &pl);
    CU_ASSERT_EQUAL(pl.stop, KM_FETCH_STOP_CORRUPT);
    CU_ASSERT_EQUAL(pl.stop_offset, 3);
    CU_ASSERT_EQUAL(pl.end, pos[1]);
    c[pos[1] + 70] ^= 0x40;

    /* magic 1 */
    c[pos[0] + KP_BATCH_MAGIC_OFFSET] = 1;
    km_fetch_plan_chunk(c, len, 0, 5, &pl);
    CU_ASSERT_EQUAL(pl.stop, KM_FETCH_STOP_FORMAT);
    CU_ASSERT_EQUAL(pl.batches, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(pl.stop_reason, "unsupported message format"));
    free(c);

    /* offsets going back */
    {
        const int64_t b2[2] = {10, 5};
        const int32_t e2[2] = {1, 1};
        c = mk_chunk(&len, 2, b2, e2, pos);
        km_fetch_plan_chunk(c, len, 0, 5, &pl);
        CU_ASSERT_EQUAL(pl.stop, KM_FETCH_STOP_CORRUPT);
        CU_ASSERT_EQUAL(pl.batches, 1);
        free(c);
    }
    km_fetch_plan_chunk(NULL, 0, 7, 5, &pl);
    CU_ASSERT_EQUAL(pl.end, 0);
    CU_ASSERT_EQUAL(pl.next_offset, 7);
}

/* ---- the manager against the fake source -------------------------------------------------- */

static void test_mirror_bytes_and_session(void)
{
    const uint8_t *dst;
    size_t dlen;
    km_fetch_status_t st;
    km_fetch_counters_t cn;
    uint8_t *expect;
    size_t elen;

    tc_setup(10);
    src_add_batch(0, 3, 4);
    src_add_batch(4, 4, 2);
    src_add_batch(6, 5, 5);
    tc_add(0, -1, 10);
    WANT_LEO = 11;
    CU_ASSERT_FATAL(tc_wait(c_leo));
    dst = fakehost_partition_log(T.fh, &DST_ID, 0, &dlen, NULL);
    pthread_mutex_lock(&SRC.mu);
    elen = SRC.log_len;
    expect = malloc(elen);
    memcpy(expect, SRC.log, elen);
    pthread_mutex_unlock(&SRC.mu);
    CU_ASSERT_EQUAL(dlen, elen);
    CU_ASSERT(dlen == elen && memcmp(dst, expect, elen) == 0);
    WANT_EV = KM_FETCH_EV_APPENDED;
    CU_ASSERT(tc_wait(c_ev));
    /* more data: only the changed partition goes in an incremental request */
    src_add_batch(11, 5, 1);
    WANT_LEO = 12;
    CU_ASSERT_FATAL(tc_wait(c_leo));
    km_fetch_partition_status(T.fm, T.fp, &st);
    CU_ASSERT_EQUAL(st.state, KM_FETCH_ST_FETCHING);
    CU_ASSERT_EQUAL(st.fetch_offset, 12);
    CU_ASSERT_EQUAL(st.records, 12);
    CU_ASSERT_EQUAL(st.batches, 4);
    CU_ASSERT_EQUAL(st.source_leader, 0);
    CU_ASSERT_EQUAL(st.source_leader_epoch, 5);
    CU_ASSERT_EQUAL(st.last_fetched_epoch, 5);
    /* the request that moved the session to 12, then one listing nothing (unchanged) */
    CU_ASSERT(tc_wait(c_idle_at_12));
    km_fetch_counters(T.fm, &cn);
    CU_ASSERT_EQUAL(cn.full_fetches, 1);
    CU_ASSERT(cn.incremental_fetches >= 3);
    pthread_mutex_lock(&SRC.mu);
    CU_ASSERT_EQUAL(SRC.reqs[0].session_id, 0);
    CU_ASSERT_EQUAL(SRC.reqs[0].session_epoch, 0);
    CU_ASSERT_EQUAL(SRC.reqs[0].nparts, 1);
    CU_ASSERT_EQUAL(SRC.reqs[0].fetch_offset, 0);
    CU_ASSERT_EQUAL(SRC.reqs[0].ver, 18);
    {
        int64_t pos = SRC.reqs[0].fetch_offset;
        for (int i = 1; i < SRC.nreqs; i++) {
            CU_ASSERT_EQUAL(SRC.reqs[i].session_id, 77);
            CU_ASSERT_EQUAL(SRC.reqs[i].session_epoch, i);
            /* the partition is listed exactly when its position changed */
            CU_ASSERT(SRC.reqs[i].nparts <= 1);
            if (SRC.reqs[i].nparts == 1) {
                CU_ASSERT(SRC.reqs[i].fetch_offset != pos);
                CU_ASSERT_EQUAL(SRC.reqs[i].last_fetched_epoch, 5);
                pos = SRC.reqs[i].fetch_offset;
            }
        }
        CU_ASSERT_EQUAL(pos, 12);
    }
    pthread_mutex_unlock(&SRC.mu);
    free(expect);

    /* pause: forgotten in the session; remove: completion on the coordinator loop; the
     * source broker's thread lost its last partition: stopped (the lookup thread stays) */
    CU_ASSERT_EQUAL(km_fetch_thread_count(T.fm), 2);
    CU_ASSERT_EQUAL(km_fetch_partition_pause(T.fm, T.fp), KM_OK);
    CU_ASSERT_EQUAL(km_fetch_partition_remove(T.fm, T.fp, tc_on_removed, &T), KM_OK);
    CU_ASSERT_EQUAL(km_fetch_partition_remove(T.fm, T.fp, tc_on_removed, &T), KM_ERR_INVALID);
    CU_ASSERT(tc_wait(c_removed));
    CU_ASSERT_EQUAL(km_fetch_thread_count(T.fm), 1);
    /* a partition added again gets a new thread for its source broker */
    tc_add(-1, -1, 10);
    CU_ASSERT(tc_wait(c_two_threads));
    T.removed = 0;
    CU_ASSERT_EQUAL(km_fetch_partition_remove(T.fm, T.fp, tc_on_removed, &T), KM_OK);
    CU_ASSERT(tc_wait(c_removed));
    CU_ASSERT_EQUAL(km_fetch_thread_count(T.fm), 1);
    CU_ASSERT_EQUAL(km_fetch_mirror_remove(T.fm, "m1"), KM_OK);
    CU_ASSERT_EQUAL(km_fetch_thread_count(T.fm), 0);
    tc_teardown();
}

static void test_corrupt_batch_fatal(void)
{
    const km_fetch_event_t *ev;
    km_fetch_status_t st;
    size_t pos;

    tc_setup(10);
    src_add_batch(0, 3, 4);
    pos = src_add_batch(4, 3, 4);
    pthread_mutex_lock(&SRC.mu);
    SRC.log[pos + 80] ^= 0x01; /* a record byte: the CRC no longer matches */
    pthread_mutex_unlock(&SRC.mu);
    tc_add(0, -1, 10);
    WANT_EV = KM_FETCH_EV_FATAL;
    CU_ASSERT_FATAL(tc_wait(c_ev));
    ev = tc_find(KM_FETCH_EV_FATAL);
    CU_ASSERT_EQUAL(ev->error_class, KM_FETCH_ERR_FATAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ev->message, "src-0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ev->message, "offset 4"));
    /* the good batch before it was appended, nothing after */
    CU_ASSERT_EQUAL(tc_dst_leo(), 4);
    km_fetch_partition_status(T.fm, T.fp, &st);
    CU_ASSERT_EQUAL(st.state, KM_FETCH_ST_HELD);
    CU_ASSERT_EQUAL(st.error_class, KM_FETCH_ERR_FATAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.error, "offset 4"));
    tc_teardown();
}

static void test_magic1_refused(void)
{
    const km_fetch_event_t *ev;
    size_t pos;

    tc_setup(10);
    pos = src_add_batch(0, 3, 2);
    pthread_mutex_lock(&SRC.mu);
    SRC.log[pos + KP_BATCH_MAGIC_OFFSET] = 1;
    pthread_mutex_unlock(&SRC.mu);
    tc_add(0, -1, 10);
    WANT_EV = KM_FETCH_EV_FATAL;
    CU_ASSERT_FATAL(tc_wait(c_ev));
    ev = tc_find(KM_FETCH_EV_FATAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ev->message, "unsupported message format"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ev->message, "src-0"));
    CU_ASSERT_EQUAL(tc_dst_leo(), 0);
    tc_teardown();
}

static void test_out_of_range_below_start(void)
{
    kbx_log_offsets_t lo = {.struct_size = sizeof(lo)};
    size_t len;

    tc_setup(10);
    /* the source log starts at 100 (retention removed 0..99) */
    SRC.log_start = 100;
    src_add_batch(100, 4, 3);
    tc_add(0, -1, 10);
    WANT_LEO = 103;
    CU_ASSERT_FATAL(tc_wait(c_leo));
    fakehost_partition_log(T.fh, &DST_ID, 0, &len, &lo);
    CU_ASSERT_EQUAL(lo.log_start_offset, 100);
    CU_ASSERT_EQUAL(lo.log_end_offset, 103);
    CU_ASSERT(SRC.n_list_offsets >= 1);
    CU_ASSERT_PTR_NULL(tc_find(KM_FETCH_EV_DIVERGED));
    CU_ASSERT_PTR_NULL(tc_find(KM_FETCH_EV_FATAL));
    tc_teardown();
}

/* The source log start inside a batch (DeleteRecords to a mid-batch offset): the local log
 * restarts at the batch's base, the bytes are the source's and the log start is the source's. */
static void test_out_of_range_start_inside_batch(void)
{
    kbx_log_offsets_t lo = {.struct_size = sizeof(lo)};
    const uint8_t *dst;
    uint8_t *b1, *b2;
    size_t len, l1, l2;

    tc_setup(10);
    SRC.log_start = 15;
    src_add_batch(10, 3, 10);
    src_add_batch(20, 3, 5);
    /* the destination's HW below the source's log start (followers not caught up): the log
     * start stays at the batch base until the HW passes it */
    CU_ASSERT_EQUAL(fakehost_partition_set_hw(T.fh, &DST_ID, 0, 12), 0);
    tc_add(0, -1, 10);
    WANT_LEO = 25;
    CU_ASSERT_FATAL(tc_wait(c_leo));
    fakehost_partition_log(T.fh, &DST_ID, 0, &len, &lo);
    CU_ASSERT_EQUAL(lo.log_start_offset, 10);
    CU_ASSERT_EQUAL(fakehost_partition_set_hw(T.fh, &DST_ID, 0, -1), 0);
    WANT_START = 15;
    CU_ASSERT_FATAL(tc_wait(c_start));
    dst = fakehost_partition_log(T.fh, &DST_ID, 0, &len, &lo);
    CU_ASSERT_EQUAL(lo.log_start_offset, 15);
    CU_ASSERT_EQUAL(lo.log_end_offset, 25);
    pthread_mutex_lock(&SRC.mu);
    CU_ASSERT(len == SRC.log_len && memcmp(dst, SRC.log, len) == 0);
    pthread_mutex_unlock(&SRC.mu);
    CU_ASSERT_PTR_NULL(tc_find(KM_FETCH_EV_FATAL));
    CU_ASSERT_PTR_NULL(tc_find(KM_FETCH_EV_DIVERGED));

    /* while mirroring: the source start moves past our end, into the batch at 30 */
    CU_ASSERT_FATAL(fakehost_batch_build(25, 3, -1, -1, false, 5, &b1, &l1) == 0);
    CU_ASSERT_FATAL(fakehost_batch_build(30, 3, -1, -1, false, 10, &b2, &l2) == 0);
    pthread_mutex_lock(&SRC.mu);
    SRC.log = realloc(SRC.log, SRC.log_len + l1 + l2);
    memcpy(SRC.log + SRC.log_len, b1, l1);
    memcpy(SRC.log + SRC.log_len + l1, b2, l2);
    SRC.log_len += l1 + l2;
    SRC.log_start = 33;
    pthread_mutex_unlock(&SRC.mu);
    WANT_LEO = 40;
    CU_ASSERT_FATAL(tc_wait(c_leo));
    dst = fakehost_partition_log(T.fh, &DST_ID, 0, &len, &lo);
    CU_ASSERT_EQUAL(lo.log_start_offset, 33);
    CU_ASSERT_EQUAL(lo.log_end_offset, 40);
    CU_ASSERT(len == l2 && memcmp(dst, b2, l2) == 0);
    CU_ASSERT_PTR_NULL(tc_find(KM_FETCH_EV_FATAL));
    free(b1);
    free(b2);
    tc_teardown();
}

static void test_out_of_range_above_end(void)
{
    const km_fetch_event_t *ev;
    uint8_t *b;
    size_t len;

    tc_setup(10);
    /* the local log holds 0..9, the source only 0..4: it lost data we mirrored */
    CU_ASSERT_FATAL(fakehost_batch_build(0, 3, -1, -1, false, 10, &b, &len) == 0);
    {
        kbx_partition_t *p = NULL;
        const kbx_api_t *api = fakehost_api(T.fh);
        CU_ASSERT_EQUAL(api->partition_acquire(fakehost_host(T.fh), &DST_ID, 0, 10, &p), KBX_OK);
        CU_ASSERT_EQUAL(api->log_append(fakehost_host(T.fh), p, b, len, NULL), KBX_OK);
        api->partition_release(fakehost_host(T.fh), p);
    }
    free(b);
    src_add_batch(0, 3, 5);
    tc_add(-1, -1, 10);
    WANT_EV = KM_FETCH_EV_DIVERGED;
    CU_ASSERT_FATAL(tc_wait(c_ev));
    ev = tc_find(KM_FETCH_EV_DIVERGED);
    CU_ASSERT_EQUAL(ev->end_offset, 5);
    CU_ASSERT_EQUAL(ev->error_code, KP_ERR_OFFSET_OUT_OF_RANGE);
    CU_ASSERT_EQUAL(tc_dst_leo(), 10); /* never truncated by the fetcher */
    tc_teardown();
}

static void test_diverging_epoch(void)
{
    const km_fetch_event_t *ev;

    tc_setup(10);
    src_add_batch(0, 3, 4);
    SRC.diverge_epoch = 2;
    SRC.diverge_end = 1;
    /* pretend the local log ends at 0 with epoch 2 (e.g. restarted after a failback) */
    tc_add(0, 2, 10);
    WANT_EV = KM_FETCH_EV_DIVERGED;
    CU_ASSERT_FATAL(tc_wait(c_ev));
    ev = tc_find(KM_FETCH_EV_DIVERGED);
    CU_ASSERT_EQUAL(ev->epoch, 2);
    CU_ASSERT_EQUAL(ev->end_offset, 1);
    CU_ASSERT_EQUAL(tc_dst_leo(), 0);
    /* the owner resumes (after its truncation): the position is read from the log again */
    CU_ASSERT_EQUAL(km_fetch_partition_resume(T.fm, T.fp, -1), KM_OK);
    WANT_LEO = 4;
    CU_ASSERT(tc_wait(c_leo));
    tc_teardown();
}

static void test_ofle_below_v12(void)
{
    const km_fetch_event_t *ev;
    uint8_t *b;
    size_t len;

    tc_setup(10);
    SRC.fetch_max = 11;
    CU_ASSERT_FATAL(fakehost_batch_build(0, 3, -1, -1, false, 6, &b, &len) == 0);
    {
        kbx_partition_t *p = NULL;
        const kbx_api_t *api = fakehost_api(T.fh);
        CU_ASSERT_EQUAL(api->partition_acquire(fakehost_host(T.fh), &DST_ID, 0, 10, &p), KBX_OK);
        CU_ASSERT_EQUAL(api->log_append(fakehost_host(T.fh), p, b, len, NULL), KBX_OK);
        api->partition_release(fakehost_host(T.fh), p);
    }
    free(b);
    src_add_batch(0, 3, 8);
    SRC.ofle_epoch = 3;
    SRC.ofle_end = 4; /* the source's epoch 3 ended at 4; we have 0..5 */
    tc_add(-1, -1, 10);
    WANT_EV = KM_FETCH_EV_DIVERGED;
    CU_ASSERT_FATAL(tc_wait(c_ev));
    ev = tc_find(KM_FETCH_EV_DIVERGED);
    CU_ASSERT_EQUAL(ev->epoch, 3);
    CU_ASSERT_EQUAL(ev->end_offset, 4);
    CU_ASSERT(SRC.n_ofle >= 1);
    tc_teardown();
}

/* ---- source versions (design M93, M94) ----------------------------------------------------- */

/* Every Fetch the source saw was at version v (and there was at least one). */
static bool src_all_fetches_at(int16_t v)
{
    bool ok;
    pthread_mutex_lock(&SRC.mu);
    ok = SRC.nreqs > 0;
    for (int i = 0; i < SRC.nreqs; i++)
        ok = ok && SRC.reqs[i].ver == v;
    pthread_mutex_unlock(&SRC.mu);
    return ok;
}

static void dst_append(const uint8_t *b, size_t len)
{
    kbx_partition_t *p = NULL;
    const kbx_api_t *api = fakehost_api(T.fh);

    CU_ASSERT_EQUAL_FATAL(api->partition_acquire(fakehost_host(T.fh), &DST_ID, 0, 10, &p), KBX_OK);
    CU_ASSERT_EQUAL(api->log_append(fakehost_host(T.fh), p, b, len, NULL), KBX_OK);
    api->partition_release(fakehost_host(T.fh), p);
}

/*
 * The test hook KMIRROR_TEST_FETCH_MAX_VERSION=11 (read when the manager is created) makes a
 * v18 source be fetched at v11, so divergence goes through OffsetsForLeaderEpoch: the local log
 * has records of epoch 3 (4..5) that the source's new leader lacks (its epoch 3 ended at 4, epoch
 * 4 starts there). DIVERGED (3, 4); the owner truncates at 4 and resumes; the fetcher checks
 * again and mirrors epoch 4; the destination log then equals the source's byte for byte.
 */
static void test_fetch_cap_hook_v11(void)
{
    const km_fetch_event_t *ev;
    uint8_t *a, *lost, *c;
    size_t alen, lostlen, clen, dlen;
    const uint8_t *d;
    kbx_partition_t *p = NULL;
    const kbx_api_t *api;

    CU_ASSERT_EQUAL_FATAL(setenv("KMIRROR_TEST_FETCH_MAX_VERSION", "11", 1), 0);
    tc_setup(10);
    unsetenv("KMIRROR_TEST_FETCH_MAX_VERSION");
    api = fakehost_api(T.fh);
    CU_ASSERT_FATAL(fakehost_batch_build(0, 3, -1, -1, false, 4, &a, &alen) == 0);
    CU_ASSERT_FATAL(fakehost_batch_build(4, 3, -1, -1, false, 2, &lost, &lostlen) == 0);
    CU_ASSERT_FATAL(fakehost_batch_build(4, 4, -1, -1, false, 6, &c, &clen) == 0);
    dst_append(a, alen);
    dst_append(lost, lostlen);
    pthread_mutex_lock(&SRC.mu);
    SRC.log = malloc(alen + clen);
    memcpy(SRC.log, a, alen);
    memcpy(SRC.log + alen, c, clen);
    SRC.log_len = alen + clen;
    SRC.ofle_epoch = 3;
    SRC.ofle_end = 4;
    pthread_mutex_unlock(&SRC.mu);

    tc_add(-1, -1, 10);
    WANT_EV = KM_FETCH_EV_DIVERGED;
    CU_ASSERT_FATAL(tc_wait(c_ev));
    ev = tc_find(KM_FETCH_EV_DIVERGED);
    CU_ASSERT_EQUAL(ev->epoch, 3);
    CU_ASSERT_EQUAL(ev->end_offset, 4);
    CU_ASSERT(SRC.n_ofle >= 1);
    CU_ASSERT_EQUAL(SRC.ofle_ver, 4);
    /* the owner's truncation, then resume */
    CU_ASSERT_EQUAL_FATAL(api->partition_acquire(fakehost_host(T.fh), &DST_ID, 0, 10, &p), KBX_OK);
    CU_ASSERT_EQUAL(api->log_truncate(fakehost_host(T.fh), p, ev->end_offset), KBX_OK);
    api->partition_release(fakehost_host(T.fh), p);
    CU_ASSERT_EQUAL(km_fetch_partition_resume(T.fm, T.fp, -1), KM_OK);
    WANT_LEO = 10;
    if (!tc_wait(c_leo)) {
        for (int i = 0; i < T.nev; i++)
            fprintf(stderr, "\n    event %s: %s", km_fetch_event_name(T.evs[i].type),
                    T.evs[i].message);
        fprintf(stderr, "\n    leo %" PRId64 " ofle %d fetches %d\n", tc_dst_leo(), SRC.n_ofle,
                SRC.nreqs);
        CU_FAIL_FATAL("the destination did not reach the source's log end");
    }
    d = fakehost_partition_log(T.fh, &DST_ID, 0, &dlen, NULL);
    CU_ASSERT_EQUAL(dlen, alen + clen);
    pthread_mutex_lock(&SRC.mu);
    CU_ASSERT(dlen == SRC.log_len && memcmp(d, SRC.log, dlen) == 0);
    pthread_mutex_unlock(&SRC.mu);
    CU_ASSERT(SRC.n_ofle >= 2); /* checked again after the resume */
    CU_ASSERT(src_all_fetches_at(11));
    CU_ASSERT_PTR_NULL(tc_find(KM_FETCH_EV_FATAL));
    free(a);
    free(lost);
    free(c);
    tc_teardown();
}

static void expect_unsupported(const char *const *parts, int64_t leo)
{
    const km_fetch_event_t *ev;
    km_fetch_status_t st;

    WANT_EV = KM_FETCH_EV_FATAL;
    CU_ASSERT_FATAL(tc_wait(c_ev));
    ev = tc_find(KM_FETCH_EV_FATAL);
    CU_ASSERT_EQUAL(ev->error_code, KP_ERR_UNSUPPORTED_VERSION);
    CU_ASSERT_EQUAL(ev->error_class, KM_FETCH_ERR_FATAL);
    for (int i = 0; parts[i] != NULL; i++) {
        CU_ASSERT_PTR_NOT_NULL(strstr(ev->message, parts[i]));
        if (strstr(ev->message, parts[i]) == NULL)
            fprintf(stderr, "\n    \"%s\" lacks \"%s\"\n", ev->message, parts[i]);
    }
    km_fetch_partition_status(T.fm, T.fp, &st);
    CU_ASSERT_EQUAL(st.state, KM_FETCH_ST_HELD);
    CU_ASSERT_EQUAL(tc_dst_leo(), leo);
}

/* A source that serves Fetch v0..3 only (old message sets): FATAL naming broker, API, versions;
 * nothing fetched. */
static void test_source_too_old(void)
{
    static const char *const want[] = {
        "src-0 at offset 0", "source broker 0", "serves Fetch v0..3", "v4..18", "magic 2", NULL};

    tc_setup(10);
    SRC.fetch_min = 0;
    SRC.fetch_max = 3;
    src_add_batch(0, 3, 4);
    tc_add(0, -1, 10);
    expect_unsupported(want, 0);
    CU_ASSERT_EQUAL(SRC.nreqs, 0);
    tc_teardown();
}

/* Fetch up to v11 but no OffsetForLeaderEpoch v2+ (as Kafka 2.0): a local log that must be
 * checked for divergence first is refused, the source's records never appended. */
static void test_source_ofle_too_old(void)
{
    static const char *const want[] = {"src-0 at offset 4", "source broker 0",
                                       "serves OffsetForLeaderEpoch v0..1", "Fetch only up to v11",
                                       NULL};
    uint8_t *b;
    size_t len;

    tc_setup(10);
    SRC.fetch_max = 11;
    SRC.ofle_min = 0;
    SRC.ofle_max = 1;
    CU_ASSERT_FATAL(fakehost_batch_build(0, 3, -1, -1, false, 4, &b, &len) == 0);
    dst_append(b, len);
    free(b);
    src_add_batch(0, 3, 4);
    src_add_batch(4, 3, 4);
    tc_add(-1, -1, 10);
    expect_unsupported(want, 4);
    CU_ASSERT_EQUAL(SRC.n_ofle, 0);
    tc_teardown();
}

/* A source whose Metadata stops at v3 (no AllowAutoTopicCreation): the lookup (the mirror's
 * lookup thread, through a bootstrap address) refuses it before any Fetch. */
static void test_source_metadata_too_old(void)
{
    static const char *const want[] = {"src-0 at offset 0",     "the source broker",
                                       "serves Metadata v0..3", "v4..12",
                                       "auto-creation",         NULL};

    tc_setup(10);
    SRC.md_max = 3;
    src_add_batch(0, 3, 4);
    tc_add(0, -1, 10);
    expect_unsupported(want, 0);
    CU_ASSERT_EQUAL(SRC.n_metadata, 0);
    CU_ASSERT_EQUAL(SRC.nreqs, 0);
    tc_teardown();
}

/* A source without topic ids (Metadata below v10, as Kafka before 2.8) that serves Fetch v13+:
 * the fetcher stays below topic ids (v12, topic names) and mirrors. */
static void test_source_without_topic_ids(void)
{
    static const kbx_uuid_t zero = {{0}};

    tc_setup(10);
    SRC.md_max = 9;
    src_add_batch(0, 5, 3);
    src_add_batch(3, 5, 2);
    tc_add_id(0, -1, 10, zero);
    WANT_LEO = 5;
    CU_ASSERT_FATAL(tc_wait(c_leo));
    CU_ASSERT_EQUAL(SRC.md_ver, 9);
    CU_ASSERT(src_all_fetches_at(12));
    CU_ASSERT_PTR_NULL(tc_find(KM_FETCH_EV_FATAL));
    tc_teardown();
}

/* The source admin client (plugin/rpc/km_srcadm.c) against a source without a version of the
 * API in common: the query fails naming the address, the API and both ranges. */
static km_srcadm_result_t SA_RES;
static int SA_DONE;

static void sa_cb(km_plugin_t *cm, void *arg, const km_srcadm_result_t *res, const uint8_t *body,
                  size_t len)
{
    (void)cm;
    (void)arg;
    (void)body;
    (void)len;
    SA_RES = *res;
    SA_DONE = 1;
}

static bool c_sa_done(void)
{
    return SA_DONE != 0;
}

static void sa_expect(const char *const *parts)
{
    kp_DescribeConfigsRequest_t rq;

    kp_DescribeConfigsRequest_init(&rq);
    SA_DONE = 0;
    CU_ASSERT_EQUAL_FATAL(km_srcadm_request(T.cm->rpc.srcadm, &T.mc.bootstrap_servers,
                                            &kp_DescribeConfigsRequest_desc, 4, &rq, 5000, sa_cb,
                                            NULL),
                          KM_OK);
    CU_ASSERT_FATAL(tc_wait(c_sa_done));
    CU_ASSERT_NOT_EQUAL(SA_RES.err, KM_OK);
    for (int i = 0; parts[i] != NULL; i++) {
        CU_ASSERT_PTR_NOT_NULL(strstr(SA_RES.errmsg, parts[i]));
        if (strstr(SA_RES.errmsg, parts[i]) == NULL)
            fprintf(stderr, "\n    \"%s\" lacks \"%s\"\n", SA_RES.errmsg, parts[i]);
    }
}

static void test_srcadm_no_common_version(void)
{
    static const char *const absent[] = {"127.0.0.1:", "does not serve API 32", "DescribeConfigs",
                                         "kmirror sends v1..4", NULL};
    static const char *const old[] = {"serves API 32 v0..0", "kmirror sends v1..4",
                                      "no version in common", NULL};

    tc_setup(10);
    sa_expect(absent);
    SRC.dc_max = 0;
    sa_expect(old);
    tc_teardown();
}

static void test_epoch_exceeded_then_resume(void)
{
    const km_fetch_event_t *ev;

    tc_setup(4);
    src_add_batch(0, 3, 2);
    src_add_batch(2, 7, 2);
    tc_add(0, -1, 4);
    WANT_EV = KM_FETCH_EV_EPOCH_EXCEEDED;
    CU_ASSERT_FATAL(tc_wait(c_ev));
    ev = tc_find(KM_FETCH_EV_EPOCH_EXCEEDED);
    CU_ASSERT_EQUAL(ev->epoch, 7);
    CU_ASSERT_EQUAL(tc_dst_leo(), 2);
    /* the owner bumps the destination epoch, then resumes with it */
    CU_ASSERT_EQUAL(fakehost_partition_set_leader(T.fh, &DST_ID, 0, 8, true), 0);
    fakehost_partition_set_hw(T.fh, &DST_ID, 0, -1);
    CU_ASSERT_EQUAL(km_fetch_partition_resume(T.fm, T.fp, 8), KM_OK);
    WANT_LEO = 4;
    CU_ASSERT(tc_wait(c_leo));
    tc_teardown();
}

static void test_fenced(void)
{
    km_fetch_status_t st;

    tc_setup(4);
    src_add_batch(0, 3, 2);
    tc_add(0, -1, 4);
    WANT_LEO = 2;
    CU_ASSERT_FATAL(tc_wait(c_leo));
    /* leadership moves on: the handle is fenced at the next append */
    CU_ASSERT_EQUAL(fakehost_partition_set_leader(T.fh, &DST_ID, 0, 5, true), 0);
    src_add_batch(2, 3, 2);
    WANT_EV = KM_FETCH_EV_FENCED;
    CU_ASSERT_FATAL(tc_wait(c_ev));
    km_fetch_partition_status(T.fm, T.fp, &st);
    CU_ASSERT_EQUAL(st.state, KM_FETCH_ST_HELD);
    tc_teardown();
}

static void test_config_refused(void)
{
    char err[256] = "";

    tc_setup(1);
    CU_ASSERT_EQUAL(km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "security.protocol", "SSL",
                                  err, sizeof(err)),
                    KM_OK);
    CU_ASSERT_EQUAL(km_fetch_mirror_set(T.fm, "m2", &T.mc, err, sizeof(err)), KM_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "PLAINTEXT"));
    /* unknown mirror, bad spec */
    {
        km_fetch_part_spec_t s = {.mirror = "nope",
                                  .source_topic = "src",
                                  .dest_topic_id = DST_ID,
                                  .dest_leader_epoch = 1,
                                  .fetch_offset = -1};
        km_fetch_part_t *fp = NULL;
        CU_ASSERT_EQUAL(km_fetch_partition_add(T.fm, &s, &fp), KM_ERR_INVALID);
        s.mirror = "m1";
        s.dest_leader_epoch = 9; /* not the replica's epoch */
        CU_ASSERT_EQUAL(km_fetch_partition_add(T.fm, &s, &fp), KM_ERR_HOST);
    }
    tc_teardown();
}

/* The owner knows the log end but not the last epoch: the fetcher takes it from the log, so the
 * first fetch carries LastFetchedEpoch and the source can answer DivergingEpoch. */
static void test_lfe_from_log(void)
{
    const km_fetch_event_t *ev;
    uint8_t *b;
    size_t len;

    tc_setup(10);
    CU_ASSERT_FATAL(fakehost_batch_build(0, 3, -1, -1, false, 6, &b, &len) == 0);
    {
        kbx_partition_t *p = NULL;
        const kbx_api_t *api = fakehost_api(T.fh);
        CU_ASSERT_EQUAL(api->partition_acquire(fakehost_host(T.fh), &DST_ID, 0, 10, &p), KBX_OK);
        CU_ASSERT_EQUAL(api->log_append(fakehost_host(T.fh), p, b, len, NULL), KBX_OK);
        api->partition_release(fakehost_host(T.fh), p);
    }
    free(b);
    src_add_batch(0, 3, 4);
    SRC.diverge_epoch = 3;
    SRC.diverge_end = 4;
    tc_add(6, -1, 10);
    WANT_EV = KM_FETCH_EV_DIVERGED;
    CU_ASSERT_FATAL(tc_wait(c_ev));
    ev = tc_find(KM_FETCH_EV_DIVERGED);
    CU_ASSERT_EQUAL(ev->epoch, 3);
    CU_ASSERT_EQUAL(ev->end_offset, 4);
    pthread_mutex_lock(&SRC.mu);
    CU_ASSERT(SRC.nreqs >= 1);
    CU_ASSERT_EQUAL(SRC.reqs[0].fetch_offset, 6);
    CU_ASSERT_EQUAL(SRC.reqs[0].last_fetched_epoch, 3);
    pthread_mutex_unlock(&SRC.mu);
    CU_ASSERT_EQUAL(tc_dst_leo(), 6);
    tc_teardown();
}

/* ---- source faults (scenario source-faults of tests/mirror_e2e) ---------------------------- */

static km_fetch_status_t ST;
static bool c_status_clean(void)
{
    km_fetch_partition_status(T.fm, T.fp, &ST);
    return ST.state == KM_FETCH_ST_FETCHING && ST.retries == 0 && ST.error[0] == '\0';
}

/* The source's address answers as another cluster: FATAL INCONSISTENT_CLUSTER_ID, held. */
static void test_source_cluster_replaced(void)
{
    char err[256] = "";
    const km_fetch_event_t *ev;
    km_fetch_status_t st;

    tc_setup(10);
    CU_ASSERT_EQUAL(km_config_set(T.cm, &km_config_mirror_scope, &T.mc, "source.cluster.id",
                                  "src-cluster", err, sizeof(err)),
                    KM_OK);
    CU_ASSERT_EQUAL_FATAL(km_fetch_mirror_set(T.fm, "m1", &T.mc, err, sizeof(err)), KM_OK);
    src_add_batch(0, 3, 4);
    tc_add(0, -1, 10);
    WANT_LEO = 4;
    CU_ASSERT_FATAL(tc_wait(c_leo)); /* the expected cluster: mirrored */
    pthread_mutex_lock(&SRC.mu);
    SRC.cluster_id = "another-cluster";
    SRC.gone = true; /* its Fetch does not know our topic id: a lookup follows */
    pthread_mutex_unlock(&SRC.mu);
    WANT_EV = KM_FETCH_EV_FATAL;
    CU_ASSERT_FATAL(tc_wait(c_ev));
    ev = tc_find(KM_FETCH_EV_FATAL);
    CU_ASSERT_EQUAL(ev->error_code, KP_ERR_INCONSISTENT_CLUSTER_ID);
    CU_ASSERT_EQUAL(ev->error_class, KM_FETCH_ERR_FATAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ev->message, "src-0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ev->message, "another-cluster"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ev->message, "offset 4"));
    km_fetch_partition_status(T.fm, T.fp, &st);
    CU_ASSERT_EQUAL(st.state, KM_FETCH_ST_HELD);
    CU_ASSERT_EQUAL(tc_dst_leo(), 4);
    tc_teardown();
}

/* The source topic deleted: transient at first (a broker may not know it yet), FATAL
 * UNKNOWN_TOPIC_OR_PARTITION once 3 Metadata answers over at least topic_gone_ms (300 here,
 * 3000 in production) said so. */
static void test_source_topic_deleted(void)
{
    const km_fetch_event_t *ev, *tr;
    int64_t t0;
    int n0;

    tc_setup(10);
    src_add_batch(0, 3, 4);
    tc_add(0, -1, 10);
    WANT_LEO = 4;
    CU_ASSERT_FATAL(tc_wait(c_leo));
    pthread_mutex_lock(&SRC.mu);
    SRC.gone = true;
    n0 = SRC.n_metadata;
    pthread_mutex_unlock(&SRC.mu);
    t0 = fakehost_now_ms(T.fh);
    WANT_EV = KM_FETCH_EV_FATAL;
    CU_ASSERT_FATAL(tc_wait(c_ev));
    ev = tc_find(KM_FETCH_EV_FATAL);
    tr = tc_find(KM_FETCH_EV_TRANSIENT);
    CU_ASSERT_PTR_NOT_NULL(tr);
    CU_ASSERT(tr != NULL && tr < ev); /* transient first */
    CU_ASSERT_EQUAL(ev->error_code, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
    CU_ASSERT_PTR_NOT_NULL(strstr(ev->message, "src-0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ev->message, "deleted"));
    CU_ASSERT(fakehost_now_ms(T.fh) - t0 >= 300);
    pthread_mutex_lock(&SRC.mu);
    CU_ASSERT(SRC.n_metadata - n0 >= 3);
    pthread_mutex_unlock(&SRC.mu);
    CU_ASSERT_EQUAL(tc_dst_leo(), 4);
    tc_teardown();
}

/* The topic unknown for two Metadata answers (a restarted broker catching up), then back:
 * never FATAL; and with nothing new to fetch, the error streak ends (retries 0, no error). */
static void test_source_topic_back(void)
{
    tc_setup(10);
    src_add_batch(0, 3, 4);
    tc_add(0, -1, 10);
    WANT_LEO = 4;
    CU_ASSERT_FATAL(tc_wait(c_leo));
    pthread_mutex_lock(&SRC.mu);
    SRC.gone = true;
    SRC.gone_answers = 2;
    pthread_mutex_unlock(&SRC.mu);
    WANT_EV = KM_FETCH_EV_TRANSIENT;
    CU_ASSERT_FATAL(tc_wait(c_ev));
    CU_ASSERT_FATAL(tc_wait(c_status_clean));
    CU_ASSERT_PTR_NULL(tc_find(KM_FETCH_EV_FATAL));
    src_add_batch(4, 3, 2);
    WANT_LEO = 6;
    CU_ASSERT(tc_wait(c_leo));
    CU_ASSERT_PTR_NULL(tc_find(KM_FETCH_EV_FATAL));
    tc_teardown();
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"plan", test_plan},
        {"mirror_bytes_and_session", test_mirror_bytes_and_session},
        {"corrupt_batch_fatal", test_corrupt_batch_fatal},
        {"magic1_refused", test_magic1_refused},
        {"out_of_range_below_start", test_out_of_range_below_start},
        {"out_of_range_start_inside_batch", test_out_of_range_start_inside_batch},
        {"out_of_range_above_end", test_out_of_range_above_end},
        {"diverging_epoch", test_diverging_epoch},
        {"ofle_below_v12", test_ofle_below_v12},
        {"fetch_cap_hook_v11", test_fetch_cap_hook_v11},
        {"source_too_old", test_source_too_old},
        {"source_ofle_too_old", test_source_ofle_too_old},
        {"source_without_topic_ids", test_source_without_topic_ids},
        {"source_metadata_too_old", test_source_metadata_too_old},
        {"srcadm_no_common_version", test_srcadm_no_common_version},
        {"epoch_exceeded_then_resume", test_epoch_exceeded_then_resume},
        {"fenced", test_fenced},
        {"config_refused", test_config_refused},
        {"lfe_from_log", test_lfe_from_log},
        {"source_cluster_replaced", test_source_cluster_replaced},
        {"source_topic_deleted", test_source_topic_deleted},
        {"source_topic_back", test_source_topic_back},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"fetch", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

    return fh_cunit_run(suites);
}
