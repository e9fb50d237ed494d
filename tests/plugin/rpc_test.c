/*
 * rpc_test.c - plugin/rpc against the fake host: the handlers registered and gone after fini,
 * answers from the catalog (ListMirrors, DescribeMirrors, an unknown mirror), every refusal of
 * CreateMirror that needs no source, a malformed request, secrets never in an answer, a client
 * that disconnects while its request waits on the source (no completion after cancel), fini
 * with a request in flight (answered, nothing left behind), allocation failure in handle.
 */
#include <string.h>

#include "catalog/km_catalog.h"
#include "coord/km_coord.h"
#include "rpc/km_rpc_int.h"
#include "core/km_plugin.h"
#include "core/km_plugin_types.h"
#include "fakehost.h"
#include "fh_cunit.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "util/km_mem.h"

static const uint8_t RT_MID[16] = {0xaa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static const kbx_uuid_t RT_ID1 = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
/* The fake source also lists this many one-partition topics bulk-00.. (StartMirrorTopics of
 * more topics than one CreateTopics carries). */
#define RT_BULK 45

typedef struct rt_env {
    fakehost_t *fh;
    void *ctx;
    km_plugin_t *cm;
} rt_env_t;

static void rt_start(rt_env_t *e)
{
    char err[256];

    e->fh = fakehost_new(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e->fh);
    fakehost_config_set(e->fh, "mirror.enable", "true");
    CU_ASSERT_EQUAL_FATAL(kbx_plugin_entry()->init(fakehost_api(e->fh), fakehost_host(e->fh),
                                                   &e->ctx, err, sizeof(err)),
                          0);
    e->cm = e->ctx;
    fakehost_run_until_idle(e->fh);
}

static void rt_stop(rt_env_t *e)
{
    kbx_plugin_entry()->fini(e->ctx);
    fh_cunit_assert_clean(e->fh);
    fakehost_free(e->fh);
}

/* Encode msg with desc at v0 and deliver it; returns the call. */
static fakehost_call_t *rt_send(rt_env_t *e, int16_t key, const kp_msg_desc_t *desc,
                                const void *msg)
{
    fakehost_call_t *call = NULL;
    kp_writer_t wr;

    kp_writer_init(&wr);
    CU_ASSERT_EQUAL_FATAL(kp_msg_encode(desc, &wr, msg, 0), 0);
    CU_ASSERT_EQUAL(fakehost_rpc_call(e->fh, key, 0, wr.buf, wr.len, &call), KBX_RPC_PENDING);
    kp_writer_free(&wr);
    return call;
}

/* Run until the call completed and decode its response into resp (arena ar). */
static void rt_answer(rt_env_t *e, fakehost_call_t *call, const kp_msg_desc_t *desc, void *resp,
                      kp_arena_t *ar)
{
    const uint8_t *body;
    size_t len = 0;
    kp_reader_t rd;

    fakehost_run_until_idle(e->fh);
    CU_ASSERT_EQUAL_FATAL(fakehost_call_state(call), FAKEHOST_CALL_COMPLETED);
    body = fakehost_call_response(call, &len);
    kp_reader_init(&rd, body, len);
    desc->init(resp);
    CU_ASSERT_EQUAL_FATAL(desc->decode(&rd, ar, resp, 0), 0);
    CU_ASSERT_EQUAL(kp_reader_remaining(&rd), 0);
}

static bool rt_has(const fakehost_call_t *call, const char *needle)
{
    size_t len = 0, n = strlen(needle);
    const uint8_t *b = fakehost_call_response(call, &len);

    for (size_t i = 0; b != NULL && i + n <= len; i++)
        if (memcmp(b + i, needle, n) == 0)
            return true;
    return false;
}

static kp_str_t rt_s(const char *s)
{
    kp_str_t k = {s, s != NULL ? (int32_t)strlen(s) : -1};
    return k;
}

/* Publish a mirror definition and a topic of it, as the metadata log would. */
static void rt_define(rt_env_t *e, const char *name, const char *bootstrap)
{
    const char *keys[] = {"bootstrap.servers", "sasl.jaas.config"};
    const char *values[] = {bootstrap, "very-secret-jaas"};
    uint8_t *val = NULL;
    size_t len = 0;

    CU_ASSERT_EQUAL_FATAL(
        km_catalog_def_encode(e->cm, RT_MID, 5, "src-id", keys, values, 2, &val, &len), KM_OK);
    {
        kbx_record_t r = {
            sizeof(r), KM_CATALOG_RECORD_MIRROR, (const uint8_t *)name, strlen(name), val, len};
        const kbx_record_t *rv[] = {&r};
        kbx_topic_change_t t = {sizeof(t), KBX_TOPIC_CREATED, RT_ID1, "orders", 2, 0};
        const kbx_topic_change_t *tv[] = {&t};
        kbx_config_change_t c = {sizeof(c), 2, "orders", "mirror.name", name};
        const kbx_config_change_t *cv[] = {&c};
        kbx_metadata_delta_t d = {.struct_size = sizeof(d),
                                  .topics = tv,
                                  .configs = cv,
                                  .records = rv,
                                  .topic_count = 1,
                                  .config_count = 1,
                                  .record_count = 1};
        fakehost_publish_delta(e->fh, &d);
    }
    km_free(e->cm, val);
    fakehost_run_until_idle(e->fh);
}

static void rt_test_registration(void)
{
    rt_env_t e;
    static const int16_t keys[] = {95, 96, 97, 98, 99, 102, 103, 104};

    rt_start(&e);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        CU_ASSERT_TRUE(fakehost_rpc_registered(e.fh, keys[i]));
    rt_stop(&e);
}

static void rt_test_list_describe(void)
{
    rt_env_t e;
    kp_arena_t ar;
    fakehost_call_t *call;

    rt_start(&e);
    kp_arena_init(&ar, 0);
    {
        kp_ListMirrorsRequest_t rq;
        kp_ListMirrorsResponse_t resp;
        kp_ListMirrorsRequest_init(&rq);
        call = rt_send(&e, 98, &kp_ListMirrorsRequest_desc, &rq);
        rt_answer(&e, call, &kp_ListMirrorsResponse_desc, &resp, &ar);
        CU_ASSERT_EQUAL(resp.ErrorCode, 0);
        CU_ASSERT_EQUAL(resp.Mirrors.cnt, 0);

        rt_define(&e, "m1", "src-host:9092");
        call = rt_send(&e, 98, &kp_ListMirrorsRequest_desc, &rq);
        rt_answer(&e, call, &kp_ListMirrorsResponse_desc, &resp, &ar);
        CU_ASSERT_EQUAL_FATAL(resp.Mirrors.cnt, 1);
        CU_ASSERT_EQUAL(memcmp(resp.Mirrors.v[0].MirrorName.ptr, "m1", 2), 0);
        CU_ASSERT_EQUAL(resp.Mirrors.v[0].SourceClusterId.len, 6);
        CU_ASSERT_EQUAL(memcmp(resp.Mirrors.v[0].SourceBootstrap.ptr, "src-host:9092", 13), 0);
        CU_ASSERT_EQUAL(resp.Mirrors.v[0].TopicCount, 1);
        CU_ASSERT_FALSE(rt_has(call, "very-secret-jaas"));
    }
    {
        kp_DescribeMirrorsRequest_t rq;
        kp_DescribeMirrorsResponse_t resp;
        kp_str_t names[2] = {rt_s("m1"), rt_s("nope")};
        kp_DescribeMirrorsRequest_init(&rq);
        rq.MirrorNames.cnt = 2;
        rq.MirrorNames.v = names;
        call = rt_send(&e, 99, &kp_DescribeMirrorsRequest_desc, &rq);
        rt_answer(&e, call, &kp_DescribeMirrorsResponse_desc, &resp, &ar);
        CU_ASSERT_EQUAL(resp.ErrorCode, 0);
        CU_ASSERT_EQUAL_FATAL(resp.Mirrors.cnt, 2);
        CU_ASSERT_EQUAL(resp.Mirrors.v[0].ErrorCode, 0);
        /* No local leadership of orders yet: this broker reports no partition of it. */
        CU_ASSERT_EQUAL(resp.Mirrors.v[0].Topics.cnt, 0);
        CU_ASSERT_EQUAL(resp.Mirrors.v[1].ErrorCode, KP_ERR_UNKNOWN_CLUSTER_MIRROR);
        CU_ASSERT_FALSE(rt_has(call, "very-secret-jaas"));

        /* Leader of partition 1: reported with its state machine's state. */
        fakehost_partition_add(e.fh, &RT_ID1, "orders", 1, 4, false, KBX_WRITE_PENDING);
        fakehost_partition_set_leader(e.fh, &RT_ID1, 1, 5, true);
        fakehost_run_until_idle(e.fh);
        call = rt_send(&e, 99, &kp_DescribeMirrorsRequest_desc, &rq);
        rt_answer(&e, call, &kp_DescribeMirrorsResponse_desc, &resp, &ar);
        CU_ASSERT_EQUAL_FATAL(resp.Mirrors.v[0].Topics.cnt, 1);
        CU_ASSERT_EQUAL_FATAL(resp.Mirrors.v[0].Topics.v[0].Partitions.cnt, 1);
        CU_ASSERT_EQUAL(resp.Mirrors.v[0].Topics.v[0].Partitions.v[0].PartitionIndex, 1);
        CU_ASSERT_EQUAL(resp.Mirrors.v[0].Topics.v[0].Partitions.v[0].DestinationOffset, 0);
        /* The state is the partition state machine's (plugin/mirror/): a new partition of a
         * running topic is on its way to MIRRORING. */
        {
            kp_str_t sv = resp.Mirrors.v[0].Topics.v[0].Partitions.v[0].StateValue;
            CU_ASSERT(sv.len > 0 && (memcmp(sv.ptr, "PREPARING", (size_t)sv.len) == 0 ||
                                     memcmp(sv.ptr, "MIRRORING", (size_t)sv.len) == 0 ||
                                     memcmp(sv.ptr, "FAILED", (size_t)sv.len) == 0 ||
                                     memcmp(sv.ptr, "UNKNOWN", (size_t)sv.len) == 0));
            if (sv.len > 0)
                fprintf(stderr, " [state %.*s] ", (int)sv.len, sv.ptr);
        }
    }
    {
        kp_PauseMirrorTopicsRequest_t rq;
        kp_PauseMirrorTopicsResponse_t resp;
        kp_PauseMirrorTopicsRequest_init(&rq);
        rq.MirrorName = rt_s("nope");
        rq.Topics.cnt = 0;
        call = rt_send(&e, 102, &kp_PauseMirrorTopicsRequest_desc, &rq);
        /* An unknown mirror is looked up again for a while (it may have been created through
         * another broker whose metadata is ahead): no answer before the grace time. */
        fakehost_run_until_idle(e.fh);
        CU_ASSERT_NOT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_COMPLETED);
        fakehost_advance_ms(e.fh, KM_RPC_MIRROR_GRACE_MS - 200);
        CU_ASSERT_NOT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_COMPLETED);
        fakehost_advance_ms(e.fh, 400);
        rt_answer(&e, call, &kp_PauseMirrorTopicsResponse_desc, &resp, &ar);
        CU_ASSERT_EQUAL(resp.ErrorCode, KP_ERR_UNKNOWN_CLUSTER_MIRROR);
    }
    kp_arena_free(&ar);
    rt_stop(&e);
}

/* CreateMirror with one config entry; returns the call. */
static fakehost_call_t *rt_create(rt_env_t *e, const char *name, const char *k1, const char *v1,
                                  const char *k2, const char *v2)
{
    kp_CreateMirrorRequest_t rq;
    kp_CreateMirrorRequest_ClusterMirrorConfig_t c[2];

    kp_CreateMirrorRequest_init(&rq);
    memset(c, 0, sizeof(c));
    rq.MirrorName = rt_s(name);
    c[0].Name = rt_s(k1);
    c[0].Value = rt_s(v1);
    c[1].Name = rt_s(k2);
    c[1].Value = rt_s(v2);
    rq.Config.v = c;
    rq.Config.cnt = k2 != NULL ? 2 : 1;
    return rt_send(e, 97, &kp_CreateMirrorRequest_desc, &rq);
}

static int16_t rt_create_answer(rt_env_t *e, fakehost_call_t *call, char *msg, size_t n)
{
    kp_CreateMirrorResponse_t resp;
    kp_arena_t ar;
    int16_t ec;

    kp_arena_init(&ar, 0);
    rt_answer(e, call, &kp_CreateMirrorResponse_desc, &resp, &ar);
    ec = resp.ErrorCode;
    snprintf(msg, n, "%.*s", (int)(resp.ErrorMessage.len > 0 ? resp.ErrorMessage.len : 0),
             resp.ErrorMessage.ptr != NULL ? resp.ErrorMessage.ptr : "");
    kp_arena_free(&ar);
    return ec;
}

static void rt_test_create_refusals(void)
{
    rt_env_t e;
    char msg[512];

    rt_start(&e);
    CU_ASSERT_EQUAL(rt_create_answer(&e,
                                     rt_create(&e, "a/b", "bootstrap.servers", "h:1", NULL, NULL),
                                     msg, sizeof(msg)),
                    KP_ERR_INVALID_CLUSTER_MIRROR_NAME);
    CU_ASSERT_EQUAL(
        rt_create_answer(&e, rt_create(&e, "x.removed", "bootstrap.servers", "h:1", NULL, NULL),
                         msg, sizeof(msg)),
        KP_ERR_INVALID_CLUSTER_MIRROR_NAME);
    CU_ASSERT_EQUAL(rt_create_answer(&e,
                                     rt_create(&e, "m", "bootstrap.servers", "h:1", "bogus", "1"),
                                     msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "bogus"));
    CU_ASSERT_EQUAL(
        rt_create_answer(&e,
                         rt_create(&e, "m", "bootstrap.servers", "h:1", "bootstrap.servers", "h:2"),
                         msg, sizeof(msg)),
        KP_ERR_INVALID_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "twice"));
    CU_ASSERT_EQUAL(rt_create_answer(&e,
                                     rt_create(&e, "m", "bootstrap.servers", "h:1",
                                               "security.protocol", "SASL_SSL"),
                                     msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "PLAINTEXT"));
    if (strstr(msg, "PLAINTEXT") == NULL)
        fprintf(stderr, "\n    got: %s\n", msg);
    /* A bad secret is refused without being echoed. */
    CU_ASSERT_EQUAL(
        rt_create_answer(&e,
                         rt_create(&e, "m", "bootstrap.servers", "h:1", "request.timeout.ms", "-5"),
                         msg, sizeof(msg)),
        KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(
        rt_create_answer(&e, rt_create(&e, "m", "client.id", "x", NULL, NULL), msg, sizeof(msg)),
        KP_ERR_INVALID_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "bootstrap.servers"));
    rt_define(&e, "taken", "h:1");
    CU_ASSERT_EQUAL(rt_create_answer(&e,
                                     rt_create(&e, "taken", "bootstrap.servers", "h:1", NULL, NULL),
                                     msg, sizeof(msg)),
                    KP_ERR_CLUSTER_MIRROR_ALREADY_EXISTS);
    /* Garbage is INVALID_REQUEST with the codec's reason, not a crash. */
    {
        static const uint8_t junk[] = {0xff, 0xff, 0xff, 0x7f, 1, 2};
        fakehost_call_t *call = NULL;
        CU_ASSERT_EQUAL(fakehost_rpc_call(e.fh, 97, 0, junk, sizeof(junk), &call), KBX_RPC_PENDING);
        CU_ASSERT_EQUAL(rt_create_answer(&e, call, msg, sizeof(msg)), KP_ERR_INVALID_REQUEST);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "malformed CreateMirror"));
    }
    rt_stop(&e);
}

/* A source address nobody answers on (connect refused, retried until the deadline). */
static void rt_dead_addr(char *buf, size_t n)
{
    snprintf(buf, n, "127.0.0.1:1");
}

static void rt_test_cancel(void)
{
    rt_env_t e;
    char addr[64];
    fakehost_call_t *call;

    rt_start(&e);
    rt_dead_addr(addr, sizeof(addr));
    call = rt_create(&e, "m", "bootstrap.servers", addr, "request.timeout.ms", "1000");
    CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_PENDING);
    /* The loop takes the request and asks the source; the client goes away meanwhile. */
    fakehost_rpc_disconnect(e.fh, call);
    CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_CANCELLED);
    /* The source query fails later; nothing may touch the cancelled token (the fake host's
     * fatal hook would abort the test). */
    fakehost_run_until_idle(e.fh);
    CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_CANCELLED);
    rt_stop(&e);
}

static void rt_test_fini_in_flight(void)
{
    rt_env_t e;
    char addr[64];
    fakehost_call_t *call;

    rt_start(&e);
    rt_dead_addr(addr, sizeof(addr));
    /* Queued, not run yet when fini starts: the loop drains it with the source client gone. */
    call = rt_create(&e, "m", "bootstrap.servers", addr, "request.timeout.ms", "30000");
    CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_PENDING);
    kbx_plugin_entry()->fini(e.ctx);
    CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_COMPLETED);
    fh_cunit_assert_clean(e.fh);
    fakehost_free(e.fh);
}

static void rt_test_alloc_failure(void)
{
    rt_env_t e;
    kp_ListMirrorsRequest_t rq;
    fakehost_call_t *call = NULL;
    kp_writer_t wr;

    rt_start(&e);
    kp_ListMirrorsRequest_init(&rq);
    kp_writer_init(&wr);
    kp_ListMirrorsRequest_encode(&wr, &rq, 0);
    fakehost_fail_alloc(e.fh, 0, false);
    CU_ASSERT_EQUAL(fakehost_rpc_call(e.fh, 98, 0, wr.buf, wr.len, &call), KBX_ERR_NOMEM);
    fakehost_fail_alloc(e.fh, -1, false);
    CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_FAILED);
    kp_writer_free(&wr);
    rt_stop(&e);
}

/* ---- a fake source cluster: answers ApiVersions and Metadata on a real socket ------------ */

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct rt_src {
    int lfd;
    int port;
    pthread_t th;
    atomic_int stop;
    atomic_int metadata_seen;
} rt_src_t;

static bool rt_src_readn(int fd, uint8_t *b, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

static void rt_src_reply(int fd, int32_t corr, bool flexible_hdr, const kp_msg_desc_t *desc,
                         const void *msg, int16_t ver)
{
    kp_writer_t wr;
    uint8_t hdr[9];
    size_t hl = 8;

    kp_writer_init(&wr);
    kp_msg_encode(desc, &wr, msg, ver);
    hdr[4] = (uint8_t)(corr >> 24);
    hdr[5] = (uint8_t)(corr >> 16);
    hdr[6] = (uint8_t)(corr >> 8);
    hdr[7] = (uint8_t)corr;
    if (flexible_hdr)
        hdr[hl++] = 0; /* no tagged fields */
    {
        uint32_t size = (uint32_t)(hl - 4 + wr.len);
        hdr[0] = (uint8_t)(size >> 24);
        hdr[1] = (uint8_t)(size >> 16);
        hdr[2] = (uint8_t)(size >> 8);
        hdr[3] = (uint8_t)size;
    }
    if (write(fd, hdr, hl) != (ssize_t)hl || write(fd, wr.buf, wr.len) != (ssize_t)wr.len)
        fprintf(stderr, "fake source: short write\n");
    kp_writer_free(&wr);
}

static void rt_src_serve(rt_src_t *src, int fd)
{
    for (;;) {
        uint8_t lenb[4], *buf;
        uint32_t n;
        int16_t key, ver;
        int32_t corr;

        if (!rt_src_readn(fd, lenb, 4))
            return;
        n = (uint32_t)lenb[0] << 24 | (uint32_t)lenb[1] << 16 | (uint32_t)lenb[2] << 8 | lenb[3];
        if (n < 8 || n > (1u << 20))
            return;
        buf = malloc(n);
        if (buf == NULL || !rt_src_readn(fd, buf, n)) {
            free(buf);
            return;
        }
        key = (int16_t)(buf[0] << 8 | buf[1]);
        ver = (int16_t)(buf[2] << 8 | buf[3]);
        corr = (int32_t)((uint32_t)buf[4] << 24 | (uint32_t)buf[5] << 16 | (uint32_t)buf[6] << 8 |
                         buf[7]);
        free(buf);
        if (key == 18) {
            kp_ApiVersionsResponse_t r;
            kp_ApiVersionsResponse_ApiVersion_t v[2] = {{3, 0, 12, {0, NULL}},
                                                        {18, 0, 3, {0, NULL}}};
            kp_ApiVersionsResponse_init(&r);
            r.ApiKeys.cnt = 2;
            r.ApiKeys.v = v;
            rt_src_reply(fd, corr, false, &kp_ApiVersionsResponse_desc, &r, ver);
        } else if (key == 3) {
            /* orders (2 partitions) and RT_BULK topics bulk-00.. (1 partition each) */
            kp_MetadataResponse_t r;
            kp_MetadataResponse_MetadataResponseTopic_t t[1 + RT_BULK];
            kp_MetadataResponse_MetadataResponsePartition_t p[2];
            char names[RT_BULK][16];
            atomic_fetch_add(&src->metadata_seen, 1);
            kp_MetadataResponse_init(&r);
            memset(t, 0, sizeof(t));
            memset(p, 0, sizeof(p));
            t[0].Name = rt_s("orders");
            memcpy(t[0].TopicId.b, RT_ID1.bytes, 16);
            t[0].Partitions.cnt = 2;
            t[0].Partitions.v = p;
            t[0].TopicAuthorizedOperations = INT32_MIN;
            p[1].PartitionIndex = 1;
            for (int i = 0; i < RT_BULK; i++) {
                snprintf(names[i], sizeof(names[i]), "bulk-%02d", i);
                t[1 + i].Name = rt_s(names[i]);
                t[1 + i].TopicId.b[0] = 0xb0;
                t[1 + i].TopicId.b[15] = (uint8_t)(i + 1);
                t[1 + i].Partitions.cnt = 1;
                t[1 + i].Partitions.v = p;
                t[1 + i].TopicAuthorizedOperations = INT32_MIN;
            }
            r.ClusterId = rt_s("fake-source");
            r.Brokers.cnt = 0;
            r.Topics.cnt = 1 + RT_BULK;
            r.Topics.v = t;
            rt_src_reply(fd, corr, ver >= 9, &kp_MetadataResponse_desc, &r, ver);
        } else {
            return;
        }
    }
}

static void *rt_src_main(void *arg)
{
    rt_src_t *src = arg;

    while (!atomic_load(&src->stop)) {
        struct pollfd pfd = {src->lfd, POLLIN, 0};
        if (poll(&pfd, 1, 50) == 1) {
            int fd = accept(src->lfd, NULL, NULL);
            if (fd >= 0) {
                rt_src_serve(src, fd);
                close(fd);
            }
        }
    }
    return NULL;
}

static void rt_src_start(rt_src_t *src)
{
    struct sockaddr_in a;
    socklen_t al = sizeof(a);

    memset(src, 0, sizeof(*src));
    src->lfd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CU_ASSERT_EQUAL_FATAL(bind(src->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    CU_ASSERT_EQUAL_FATAL(listen(src->lfd, 8), 0);
    getsockname(src->lfd, (struct sockaddr *)&a, &al);
    src->port = ntohs(a.sin_port);
    CU_ASSERT_EQUAL_FATAL(pthread_create(&src->th, NULL, rt_src_main, src), 0);
}

static void rt_src_stop(rt_src_t *src)
{
    atomic_store(&src->stop, 1);
    pthread_join(src->th, NULL);
    close(src->lfd);
}

/* The destination's brokers: ApiVersions through broker_request, with or without key 97; and
 * CreateTopics through local_request. */
static int rt_broker_missing_key = -1;
static int rt_creates;
static int rt_create_topics, rt_create_max; /* topics in all CreateTopics, most in one */
static char rt_last_mirror_info[64];        /* MirrorInfo.MirrorName of the last topic created */
static int rt_grows;                        /* CreatePartitions requests */

static int32_t rt_broker_answer(void *arg, int32_t broker_id, int16_t api_key, int16_t api_version,
                                const uint8_t *body, size_t len, uint8_t **resp, size_t *resp_len)
{
    static const int16_t keys[] = {18, 95, 96, 97, 98, 99, 102, 103, 104};
    kp_ApiVersionsResponse_ApiVersion_t v[9];
    kp_ApiVersionsResponse_t r;
    kp_writer_t wr;
    int32_t n = 0;

    (void)arg;
    (void)broker_id;
    if (api_key == 19) {
        /* CreateTopics (the state module's __mirror_state): every topic created. */
        kp_CreateTopicsRequest_t rq;
        kp_CreateTopicsResponse_t rs;
        kp_reader_t rd;
        kp_arena_t ar;
        kp_arena_init(&ar, 0);
        kp_reader_init(&rd, body, len);
        if (kp_CreateTopicsRequest_decode(&rd, &ar, &rq, api_version) != 0) {
            kp_arena_free(&ar);
            return KBX_ERR_INVALID;
        }
        kp_CreateTopicsResponse_init(&rs);
        rs.Topics.cnt = rq.Topics.cnt;
        rs.Topics.v = kp_arena_calloc(&ar, (size_t)rq.Topics.cnt + 1, sizeof(*rs.Topics.v));
        for (int32_t i = 0; i < rq.Topics.cnt; i++) {
            const kp_CreateTopicsRequest_CreatableTopic_t *t = &rq.Topics.v[i];
            snprintf(rt_last_mirror_info, sizeof(rt_last_mirror_info), "%.*s",
                     t->MirrorInfo_null || t->MirrorInfo.MirrorName.len < 0
                         ? 0
                         : (int)t->MirrorInfo.MirrorName.len,
                     t->MirrorInfo_null ? "" : t->MirrorInfo.MirrorName.ptr);
            kp_CreateTopicsResponse_CreatableTopicResult_init(&rs.Topics.v[i]);
            rs.Topics.v[i].Name = rq.Topics.v[i].Name;
            /* "raced-*": created meanwhile by someone else */
            if (t->Name.len > 6 && memcmp(t->Name.ptr, "raced-", 6) == 0)
                rs.Topics.v[i].ErrorCode = KP_ERR_TOPIC_ALREADY_EXISTS;
            rs.Topics.v[i].NumPartitions = rq.Topics.v[i].NumPartitions;
            rs.Topics.v[i].Configs.cnt = -1;
        }
        kp_writer_init(&wr);
        kp_CreateTopicsResponse_encode(&wr, &rs, api_version);
        *resp = malloc(wr.len);
        memcpy(*resp, wr.buf, wr.len);
        *resp_len = wr.len;
        kp_writer_free(&wr);
        kp_arena_free(&ar);
        rt_creates++;
        rt_create_topics += rq.Topics.cnt;
        if (rq.Topics.cnt > rt_create_max)
            rt_create_max = rq.Topics.cnt;
        return KBX_OK;
    }
    if (api_key == 37) {
        /* CreatePartitions (topic discovery through km_rpc_host_request): every topic grown. */
        kp_CreatePartitionsRequest_t rq;
        kp_CreatePartitionsResponse_t rs;
        kp_reader_t rd;
        kp_arena_t ar;
        kp_arena_init(&ar, 0);
        kp_reader_init(&rd, body, len);
        if (kp_CreatePartitionsRequest_decode(&rd, &ar, &rq, api_version) != 0) {
            kp_arena_free(&ar);
            return KBX_ERR_INVALID;
        }
        kp_CreatePartitionsResponse_init(&rs);
        rs.Results.cnt = rq.Topics.cnt;
        rs.Results.v = kp_arena_calloc(&ar, (size_t)rq.Topics.cnt + 1, sizeof(*rs.Results.v));
        for (int32_t i = 0; i < rq.Topics.cnt; i++) {
            kp_CreatePartitionsResponse_CreatePartitionsTopicResult_init(&rs.Results.v[i]);
            rs.Results.v[i].Name = rq.Topics.v[i].Name;
            rs.Results.v[i].ErrorCode = rq.Topics.v[i].Count > 8 ? KP_ERR_INVALID_PARTITIONS : 0;
        }
        kp_writer_init(&wr);
        kp_CreatePartitionsResponse_encode(&wr, &rs, api_version);
        *resp = malloc(wr.len);
        memcpy(*resp, wr.buf, wr.len);
        *resp_len = wr.len;
        kp_writer_free(&wr);
        kp_arena_free(&ar);
        rt_grows++;
        return KBX_OK;
    }
    if (api_key != 18)
        return KBX_ERR_UNSUPPORTED;
    for (size_t i = 0; i < 9; i++) {
        if (keys[i] == rt_broker_missing_key)
            continue;
        memset(&v[n], 0, sizeof(v[n]));
        v[n].ApiKey = keys[i];
        v[n].MaxVersion = keys[i] == 18 ? 3 : 0;
        n++;
    }
    kp_ApiVersionsResponse_init(&r);
    r.ApiKeys.cnt = n;
    r.ApiKeys.v = v;
    kp_writer_init(&wr);
    kp_ApiVersionsResponse_encode(&wr, &r, api_version);
    *resp = malloc(wr.len);
    memcpy(*resp, wr.buf, wr.len);
    *resp_len = wr.len;
    kp_writer_free(&wr);
    return KBX_OK;
}

static void rt_test_create_ok(void)
{
    rt_env_t e;
    rt_src_t src;
    char addr[64], msg[512];
    kp_arena_t ar;

    rt_src_start(&src);
    rt_start(&e);
    fakehost_set_request_handler(e.fh, rt_broker_answer, NULL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", src.port);
    /* A broker without the mirror APIs: refused, naming it. */
    rt_broker_missing_key = 97;
    CU_ASSERT_EQUAL(rt_create_answer(&e,
                                     rt_create(&e, "m1", "bootstrap.servers", addr,
                                               "sasl.jaas.config", "hush-hush"),
                                     msg, sizeof(msg)),
                    KP_ERR_UNSUPPORTED_VERSION);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "API key 97 missing"));
    CU_ASSERT_EQUAL(atomic_load(&src.metadata_seen), 1);
    rt_broker_missing_key = -1;
    CU_ASSERT_EQUAL(rt_create_answer(&e,
                                     rt_create(&e, "m1", "bootstrap.servers", addr,
                                               "sasl.jaas.config", "hush-hush"),
                                     msg, sizeof(msg)),
                    0);
    CU_ASSERT_EQUAL(fakehost_record_count(e.fh), 1);
    CU_ASSERT(rt_creates >= 1); /* __mirror_state asked for before the definition */
    {
        const km_mirror_def_t *def = km_catalog_mirror_find(&e.cm->catalog, "m1");
        CU_ASSERT_PTR_NOT_NULL_FATAL(def);
        CU_ASSERT_STRING_EQUAL(def->source_cluster_id, "fake-source");
        CU_ASSERT_EQUAL(def->nconfig, 2);
        CU_ASSERT_EQUAL(def->mirror_id[6] >> 4, 4); /* a v4 UUID */
    }
    CU_ASSERT_FALSE(fakehost_log_contains(e.fh, "hush-hush"));
    /* StartMirrorTopics with a pattern: orders is resolved on the source and created through a
     * local CreateTopics v8 with the source's id. The fake host's metadata never shows it, so
     * the answer waits for the catalog until its deadline (5 s of fake time), then goes. */
    {
        kp_StartMirrorTopicsRequest_t rq;
        kp_StartMirrorTopicsResponse_t resp;
        kp_str_t inc[1] = {rt_s("ord.*")};
        fakehost_call_t *call;
        kp_arena_init(&ar, 0);
        kp_StartMirrorTopicsRequest_init(&rq);
        rq.MirrorName = rt_s("m1");
        rq.Topics.cnt = 0;
        rq.IncludePatterns.cnt = 1;
        rq.IncludePatterns.v = inc;
        rq.ExcludePatterns.cnt = 0;
        rq.TimeoutMs = 5000;
        int creates = rt_creates;
        call = rt_send(&e, 95, &kp_StartMirrorTopicsRequest_desc, &rq);
        fakehost_run_until_idle(e.fh);
        CU_ASSERT_EQUAL(rt_creates, creates + 1);
        CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_PENDING);
        fakehost_advance_ms(e.fh, 4000);
        CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_PENDING);
        fakehost_advance_ms(e.fh, 1100);
        rt_answer(&e, call, &kp_StartMirrorTopicsResponse_desc, &resp, &ar);
        CU_ASSERT_EQUAL(resp.ErrorCode, 0);
        CU_ASSERT_EQUAL_FATAL(resp.Topics.cnt, 1);
        CU_ASSERT_EQUAL(memcmp(resp.Topics.v[0].TopicName.ptr, "orders", 6), 0);
        CU_ASSERT_EQUAL(resp.Topics.v[0].ErrorCode, 0);
        CU_ASSERT_TRUE(fakehost_log_contains(e.fh, "answering before this broker's metadata"));
        kp_arena_free(&ar);
    }
    /* 45 topics: created by consecutive CreateTopics of at most 20 topics (KM_RPC_TOPICS_CHUNK),
     * each sent after the previous answer; every topic answered. */
    {
        kp_StartMirrorTopicsRequest_t rq;
        kp_StartMirrorTopicsResponse_t resp;
        kp_str_t inc[1] = {rt_s("bulk-.*")};
        fakehost_call_t *call;
        int creates = rt_creates, ok = 0;
        kp_arena_init(&ar, 0);
        kp_StartMirrorTopicsRequest_init(&rq);
        rq.MirrorName = rt_s("m1");
        rq.Topics.cnt = 0;
        rq.IncludePatterns.cnt = 1;
        rq.IncludePatterns.v = inc;
        rq.ExcludePatterns.cnt = 0;
        rq.TimeoutMs = 5000;
        rt_create_topics = rt_create_max = 0;
        call = rt_send(&e, 95, &kp_StartMirrorTopicsRequest_desc, &rq);
        fakehost_run_until_idle(e.fh);
        CU_ASSERT_EQUAL(rt_creates, creates + 3);
        CU_ASSERT_EQUAL(rt_create_topics, RT_BULK);
        CU_ASSERT_EQUAL(rt_create_max, 20);
        fakehost_advance_ms(e.fh, 5100);
        rt_answer(&e, call, &kp_StartMirrorTopicsResponse_desc, &resp, &ar);
        CU_ASSERT_EQUAL(resp.ErrorCode, 0);
        CU_ASSERT_EQUAL(resp.Topics.cnt, RT_BULK);
        for (int32_t i = 0; i < resp.Topics.cnt; i++)
            ok += resp.Topics.v[i].ErrorCode == 0;
        CU_ASSERT_EQUAL(ok, RT_BULK);
        kp_arena_free(&ar);
    }
    /* The client goes away while the broker check waits: the answer is never sent. */
    {
        fakehost_call_t *call;
        fakehost_hold_async(e.fh, true);
        call = rt_create(&e, "m2", "bootstrap.servers", addr, NULL, NULL);
        fakehost_run_until_idle(e.fh);
        CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_PENDING);
        CU_ASSERT(fakehost_pending_async(e.fh) >= 1);
        fakehost_rpc_disconnect(e.fh, call);
        fakehost_hold_async(e.fh, false);
        fakehost_run_until_idle(e.fh);
        CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_CANCELLED);
        CU_ASSERT_EQUAL(fakehost_record_count(e.fh), 1); /* m2 was not written */
        CU_ASSERT_PTR_NULL(km_catalog_mirror_find(&e.cm->catalog, "m2"));
    }
    /* fini while a request waits on a host operation: answered, nothing left. */
    {
        fakehost_call_t *call;
        fakehost_hold_async(e.fh, true);
        call = rt_create(&e, "m3", "bootstrap.servers", addr, NULL, NULL);
        fakehost_run_until_idle(e.fh);
        CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_PENDING);
        rt_stop(&e);
    }
    rt_src_stop(&src);
}

/* ---- internal requests (km_rpc_internal, km_rpc_host_request: topic discovery's path) ---- */

typedef struct rt_done {
    int calls;
    int32_t status;
    int16_t ec;      /* the decoded answer's first topic error */
    int16_t top_ec;  /* StartMirrorTopics' top-level error */
    int32_t ntopics; /* topics in the decoded answer */
    char first[64];  /* its first topic's name */
    int16_t key;     /* 95: StartMirrorTopics, 37: CreatePartitions */
    bool on_loop;    /* done ran on the coordinator loop */
    km_plugin_t *cm;
} rt_done_t;

static void rt_internal_done(km_plugin_t *cm, void *arg, int32_t status, const uint8_t *body,
                             size_t len)
{
    rt_done_t *d = arg;
    kp_arena_t ar;
    kp_reader_t rd;

    d->calls++;
    d->status = status;
    d->on_loop = km_coord_on_loop(&cm->coord);
    if (status != KBX_OK)
        return;
    kp_arena_init(&ar, 0);
    kp_reader_init(&rd, body, len);
    if (d->key == 95) {
        kp_StartMirrorTopicsResponse_t r;
        kp_StartMirrorTopicsResponse_init(&r);
        CU_ASSERT_EQUAL_FATAL(kp_StartMirrorTopicsResponse_decode(&rd, &ar, &r, 0), 0);
        d->top_ec = r.ErrorCode;
        d->ntopics = r.Topics.cnt;
        if (r.Topics.cnt > 0) {
            d->ec = r.Topics.v[0].ErrorCode;
            snprintf(d->first, sizeof(d->first), "%.*s", (int)r.Topics.v[0].TopicName.len,
                     r.Topics.v[0].TopicName.ptr);
        }
    } else {
        kp_CreatePartitionsResponse_t r;
        kp_CreatePartitionsResponse_init(&r);
        CU_ASSERT_EQUAL_FATAL(kp_CreatePartitionsResponse_decode(&rd, &ar, &r, 2), 0);
        d->ntopics = r.Results.cnt;
        if (r.Results.cnt > 0) {
            d->ec = r.Results.v[0].ErrorCode;
            snprintf(d->first, sizeof(d->first), "%.*s", (int)r.Results.v[0].Name.len,
                     r.Results.v[0].Name.ptr);
        }
    }
    kp_arena_free(&ar);
}

typedef struct rt_internal_arg {
    rt_done_t *done;
    const char *mirror, *topic;
    int32_t parts;
    km_err_t err;
} rt_internal_arg_t;

/* On the loop: StartMirrorTopics of one explicit topic (id RT_ID2) as the broker itself. */
static void rt_internal_start(km_plugin_t *cm, void *arg)
{
    static const kbx_uuid_t id2 = {{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 2}};
    rt_internal_arg_t *a = arg;
    kp_StartMirrorTopicsRequest_t rq;
    kp_StartMirrorTopicsRequest_TopicMetadata_t t;

    kp_StartMirrorTopicsRequest_init(&rq);
    kp_StartMirrorTopicsRequest_TopicMetadata_init(&t);
    t.TopicName = rt_s(a->topic);
    memcpy(t.TopicId.b, id2.bytes, 16);
    t.NumPartitions = a->parts;
    rq.MirrorName = rt_s(a->mirror);
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    rq.IncludePatterns.cnt = 0;
    rq.ExcludePatterns.cnt = 0;
    rq.TimeoutMs = 5000;
    a->done->key = 95;
    a->err =
        km_rpc_internal(cm, 95, &rq, &kp_StartMirrorTopicsRequest_desc, rt_internal_done, a->done);
}

/* On the loop: CreatePartitions of one topic through local_request. */
static void rt_internal_grow(km_plugin_t *cm, void *arg)
{
    rt_internal_arg_t *a = arg;
    kp_CreatePartitionsRequest_t rq;
    kp_CreatePartitionsRequest_CreatePartitionsTopic_t t;

    kp_CreatePartitionsRequest_init(&rq);
    kp_CreatePartitionsRequest_CreatePartitionsTopic_init(&t);
    t.Name = rt_s(a->topic);
    t.Count = a->parts;
    t.Assignments.cnt = -1;
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    rq.TimeoutMs = 5000;
    a->done->key = 37;
    a->err = km_rpc_host_request(cm, 37, 2, &rq, &kp_CreatePartitionsRequest_desc, rt_internal_done,
                                 a->done);
}

static int32_t rt_deny_all(void *arg, const char *principal, int32_t resource_type,
                           const char *resource_name, int32_t operation)
{
    (void)arg;
    (void)principal;
    (void)resource_type;
    (void)resource_name;
    (void)operation;
    return KBX_AUTHZ_DENIED;
}

static void rt_test_internal(void)
{
    rt_env_t e;
    rt_done_t d;
    rt_internal_arg_t a;
    char addr[64];

    rt_start(&e);
    fakehost_set_request_handler(e.fh, rt_broker_answer, NULL);
    rt_dead_addr(addr, sizeof(addr));
    rt_define(&e, "m1", addr);
    /* No ACL check for the broker itself: deny everything a client could do. */
    fakehost_set_authorizer(e.fh, rt_deny_all, NULL);
    /* StartMirrorTopics as an operator's --start of an explicit topic: one CreateTopics v8 with
     * MirrorInfo m1; the answer waits for the catalog (never shown by the fake host) until its
     * 5 s deadline, then goes to done on the loop. */
    memset(&d, 0, sizeof(d));
    a = (rt_internal_arg_t){&d, "m1", "fresh", 3, KM_ERR_INVALID};
    rt_creates = 0;
    rt_last_mirror_info[0] = '\0';
    CU_ASSERT_EQUAL_FATAL(km_coord_post(&e.cm->coord, rt_internal_start, NULL, &a), KM_OK);
    fakehost_run_until_idle(e.fh);
    CU_ASSERT_EQUAL(a.err, KM_OK);
    CU_ASSERT_EQUAL(rt_creates, 1);
    CU_ASSERT_STRING_EQUAL(rt_last_mirror_info, "m1");
    CU_ASSERT_EQUAL(d.calls, 0);
    fakehost_advance_ms(e.fh, 5100);
    fakehost_run_until_idle(e.fh);
    CU_ASSERT_EQUAL_FATAL(d.calls, 1);
    CU_ASSERT_EQUAL(d.status, KBX_OK);
    CU_ASSERT_TRUE(d.on_loop);
    CU_ASSERT_EQUAL(d.top_ec, 0);
    CU_ASSERT_EQUAL(d.ntopics, 1);
    CU_ASSERT_EQUAL(d.ec, 0);
    CU_ASSERT_STRING_EQUAL(d.first, "fresh");
    /* The handler's own checks still apply: orders exists with another topic id. */
    memset(&d, 0, sizeof(d));
    a = (rt_internal_arg_t){&d, "m1", "orders", 2, KM_ERR_INVALID};
    CU_ASSERT_EQUAL_FATAL(km_coord_post(&e.cm->coord, rt_internal_start, NULL, &a), KM_OK);
    fakehost_run_until_idle(e.fh);
    fakehost_advance_ms(e.fh, 5100);
    fakehost_run_until_idle(e.fh);
    CU_ASSERT_EQUAL_FATAL(d.calls, 1);
    CU_ASSERT_EQUAL(d.ec, KP_ERR_INCONSISTENT_TOPIC_ID);
    CU_ASSERT_EQUAL(rt_creates, 1);
    /* An unknown mirror: the handler's top-level error, after its grace period. */
    memset(&d, 0, sizeof(d));
    a = (rt_internal_arg_t){&d, "nope", "fresh", 3, KM_ERR_INVALID};
    CU_ASSERT_EQUAL_FATAL(km_coord_post(&e.cm->coord, rt_internal_start, NULL, &a), KM_OK);
    fakehost_run_until_idle(e.fh);
    fakehost_advance_ms(e.fh, 2100);
    fakehost_run_until_idle(e.fh);
    CU_ASSERT_EQUAL_FATAL(d.calls, 1);
    CU_ASSERT_EQUAL(d.top_ec, KP_ERR_UNKNOWN_CLUSTER_MIRROR);
    /* A create that finds the topic existing (topic discovery and an operator's start racing):
     * the same mirror topic (same id, this mirror) appearing in the catalog is success, at
     * once; another topic id is TOPIC_ALREADY_EXISTS at once; nothing shown by the deadline
     * is TOPIC_ALREADY_EXISTS then. */
    {
        static const kbx_uuid_t id2 = {{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 2}};
        static const char *const names[] = {"raced-same", "raced-other"};
        for (int k = 0; k < 2; k++) {
            kbx_topic_change_t tc = {
                sizeof(tc), KBX_TOPIC_CREATED, k == 0 ? id2 : RT_ID1, names[k], 3, 0};
            const kbx_topic_change_t *tv[] = {&tc};
            kbx_config_change_t c = {sizeof(c), 2, names[k], "mirror.name", "m1"};
            const kbx_config_change_t *cv[] = {&c};
            kbx_metadata_delta_t dl = {.struct_size = sizeof(dl),
                                       .topics = tv,
                                       .configs = cv,
                                       .topic_count = 1,
                                       .config_count = 1};
            memset(&d, 0, sizeof(d));
            a = (rt_internal_arg_t){&d, "m1", names[k], 3, KM_ERR_INVALID};
            CU_ASSERT_EQUAL_FATAL(km_coord_post(&e.cm->coord, rt_internal_start, NULL, &a), KM_OK);
            fakehost_run_until_idle(e.fh);
            CU_ASSERT_EQUAL(d.calls, 0); /* waits for the catalog */
            fakehost_publish_delta(e.fh, &dl);
            fakehost_run_until_idle(e.fh);
            fakehost_advance_ms(e.fh, 20);
            fakehost_run_until_idle(e.fh);
            CU_ASSERT_EQUAL_FATAL(d.calls, 1);
            CU_ASSERT_STRING_EQUAL(d.first, names[k]);
            CU_ASSERT_EQUAL(d.ec, k == 0 ? 0 : KP_ERR_TOPIC_ALREADY_EXISTS);
        }
        memset(&d, 0, sizeof(d));
        a = (rt_internal_arg_t){&d, "m1", "raced-none", 3, KM_ERR_INVALID};
        CU_ASSERT_EQUAL_FATAL(km_coord_post(&e.cm->coord, rt_internal_start, NULL, &a), KM_OK);
        fakehost_run_until_idle(e.fh);
        fakehost_advance_ms(e.fh, 29000); /* a raced create waits 30 s, not 5 */
        CU_ASSERT_EQUAL(d.calls, 0);
        fakehost_advance_ms(e.fh, 1100);
        fakehost_run_until_idle(e.fh);
        CU_ASSERT_EQUAL_FATAL(d.calls, 1);
        CU_ASSERT_EQUAL(d.ec, KP_ERR_TOPIC_ALREADY_EXISTS);
    }
    /* CreatePartitions through local_request: the answer on the loop, per topic errors kept. */
    memset(&d, 0, sizeof(d));
    a = (rt_internal_arg_t){&d, NULL, "orders", 4, KM_ERR_INVALID};
    rt_grows = 0;
    CU_ASSERT_EQUAL_FATAL(km_coord_post(&e.cm->coord, rt_internal_grow, NULL, &a), KM_OK);
    fakehost_run_until_idle(e.fh);
    CU_ASSERT_EQUAL(a.err, KM_OK);
    CU_ASSERT_EQUAL(rt_grows, 1);
    CU_ASSERT_EQUAL_FATAL(d.calls, 1);
    CU_ASSERT_EQUAL(d.status, KBX_OK);
    CU_ASSERT_TRUE(d.on_loop);
    CU_ASSERT_EQUAL(d.ec, 0);
    CU_ASSERT_STRING_EQUAL(d.first, "orders");
    memset(&d, 0, sizeof(d));
    a = (rt_internal_arg_t){&d, NULL, "orders", 9, KM_ERR_INVALID};
    CU_ASSERT_EQUAL_FATAL(km_coord_post(&e.cm->coord, rt_internal_grow, NULL, &a), KM_OK);
    fakehost_run_until_idle(e.fh);
    CU_ASSERT_EQUAL_FATAL(d.calls, 1);
    CU_ASSERT_EQUAL(d.ec, KP_ERR_INVALID_PARTITIONS);
    /* A request that does not belong to this module is refused at once. */
    {
        kp_CreatePartitionsRequest_t rq;
        kp_CreatePartitionsRequest_init(&rq);
        CU_ASSERT_EQUAL(
            km_rpc_internal(e.cm, 37, &rq, &kp_CreatePartitionsRequest_desc, rt_internal_done, &d),
            KM_ERR_INVALID);
    }
    /* fini while a host request is out: done runs once, with an error, nothing left. */
    memset(&d, 0, sizeof(d));
    a = (rt_internal_arg_t){&d, NULL, "orders", 4, KM_ERR_INVALID};
    fakehost_hold_async(e.fh, true);
    CU_ASSERT_EQUAL_FATAL(km_coord_post(&e.cm->coord, rt_internal_grow, NULL, &a), KM_OK);
    fakehost_run_until_idle(e.fh);
    CU_ASSERT_EQUAL(a.err, KM_OK);
    CU_ASSERT_EQUAL(d.calls, 0);
    rt_stop(&e);
    CU_ASSERT_EQUAL(d.calls, 1);
    CU_ASSERT_NOT_EQUAL(d.status, KBX_OK);
}

static CU_TestInfo rt_tests[] = {
    {"handlers registered and removed", rt_test_registration},
    {"ListMirrors, DescribeMirrors, unknown mirror", rt_test_list_describe},
    {"CreateMirror refusals", rt_test_create_refusals},
    {"client disconnects while the source is asked", rt_test_cancel},
    {"fini with a request in flight", rt_test_fini_in_flight},
    {"allocation failure in handle", rt_test_alloc_failure},
    {"CreateMirror against a fake source; cancel and fini mid-flight", rt_test_create_ok},
    {"internal requests: StartMirrorTopics and CreatePartitions as the broker", rt_test_internal},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo rt_suites[] = {
    {"rpc", NULL, NULL, NULL, NULL, rt_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(rt_suites);
}
