/*
 * test_api.c -- CUnit tests of the broker/api handlers through an in-process broker on a
 * loopback port, with requests and responses encoded by the generated codec: Metadata,
 * CreateTopics, Produce (acks, codecs, validation, idempotence, read-only enforcement,
 * transactions hook), Fetch (versions, sessions, long poll, limits, epochs, read_committed),
 * ListOffsets, OffsetForLeaderEpoch, DeleteTopics, CreatePartitions, DeleteRecords,
 * DescribeConfigs / AlterConfigs / IncrementalAlterConfigs, DescribeCluster, InitProducerId,
 * restart persistence. Label: unit. Waiting is by poll() with deadlines only.
 */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb_apisvc.h"
#include "kb_dq.h"
#include "kb_err.h"
#include "kb_fsess.h"
#include "kb_meta.h"
#include "kb_part.h"
#include "kb_tconf.h"
#include "kbat.h"
#include "kp_batch.h"
#include "kp_errcode.h"

static char g_dir[512];
static kbat_broker_t B;
static int g_fd = -1;
static kp_arena_t g_ar;

static void up(const char *const *kv)
{
    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(g_dir, sizeof(g_dir)), 0);
    CU_ASSERT_EQUAL_FATAL(kbat_broker_start(&B, g_dir, kv), 0);
    g_fd = kbat_connect(B.port);
    CU_ASSERT_FATAL(g_fd >= 0);
    kp_arena_init(&g_ar, 0);
}

static void down(void)
{
    if (g_fd >= 0)
        close(g_fd);
    g_fd = -1;
    kbat_broker_stop(&B);
    kp_arena_free(&g_ar);
    kbat_rmrf(g_dir);
}

static void restart(void)
{
    close(g_fd);
    kbat_broker_stop(&B);
    CU_ASSERT_EQUAL_FATAL(kbat_broker_start(&B, g_dir, NULL), 0);
    g_fd = kbat_connect(B.port);
    CU_ASSERT_FATAL(g_fd >= 0);
}

static kp_str_t S(const char *s)
{
    return (kp_str_t){s, s ? (int32_t)strlen(s) : -1};
}

static bool streq(kp_str_t a, const char *b)
{
    return a.len >= 0 && (size_t)a.len == strlen(b) && !memcmp(a.ptr, b, (size_t)a.len);
}

/* ---- request builders --------------------------------------------------------------------------
 */

static kp_MetadataResponse_t *metadata(int16_t ver, const char *const *topics, bool autocreate)
{
    kp_MetadataRequest_t rq;
    kp_MetadataResponse_t *resp = kp_arena_alloc(&g_ar, sizeof(*resp));
    kp_MetadataRequest_MetadataRequestTopic_t t[8];
    int n = 0;
    kp_MetadataRequest_init(&rq);
    for (; topics && topics[n]; n++) {
        kp_MetadataRequest_MetadataRequestTopic_init(&t[n]);
        t[n].Name = S(topics[n]);
    }
    rq.Topics.v = t;
    rq.Topics.cnt = topics ? n : (ver == 0 ? 0 : -1);
    if (ver >= 4)
        rq.AllowAutoTopicCreation = autocreate;
    kp_MetadataResponse_init(resp);
    CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_Metadata, ver, &rq, resp, &g_ar), 0);
    return resp;
}

static kp_MetadataResponse_MetadataResponseTopic_t *md_topic(kp_MetadataResponse_t *r,
                                                             const char *name)
{
    for (int32_t i = 0; i < r->Topics.cnt; i++)
        if (streq(r->Topics.v[i].Name, name))
            return &r->Topics.v[i];
    return NULL;
}

static kp_uuid_t topic_id(const char *name)
{
    kb_topic_info_t ti;
    kp_uuid_t z = {{0}};
    if (kb_meta_topic_by_name(B.svc->meta, name, &ti) != 0)
        return z;
    return ti.id;
}

typedef struct fpart_s {
    const char *topic;
    int32_t partition;
    int64_t offset;
    int32_t max_bytes;
    int32_t current_epoch;
    int32_t last_epoch;
} fpart_t;

/* Build a Fetch request for @p parts. */
static void fetch_req(kp_FetchRequest_t *rq, int16_t ver, const fpart_t *parts, int n,
                      int32_t max_wait, int32_t min_bytes, int32_t max_bytes, int8_t iso,
                      int32_t sid, int32_t sepoch)
{
    kp_FetchRequest_FetchTopic_t *t = kp_arena_calloc(&g_ar, (size_t)n + 1, sizeof(*t));
    int nt = 0;
    kp_FetchRequest_init(rq);
    rq->ReplicaId = -1;
    rq->MaxWaitMs = max_wait;
    rq->MinBytes = min_bytes;
    rq->MaxBytes = max_bytes;
    rq->IsolationLevel = iso;
    rq->SessionId = sid;
    rq->SessionEpoch = sepoch;
    for (int i = 0; i < n; i++) {
        kp_FetchRequest_FetchTopic_t *cur = NULL;
        kp_FetchRequest_FetchPartition_t *p;
        for (int k = 0; k < nt; k++)
            if (streq(t[k].Topic, parts[i].topic))
                cur = &t[k];
        if (!cur) {
            cur = &t[nt++];
            kp_FetchRequest_FetchTopic_init(cur);
            cur->Topic = S(parts[i].topic);
            if (ver >= 13) {
                cur->Topic = KP_STR_NULL;
                cur->Topic.len = -1;
                cur->TopicId = topic_id(parts[i].topic);
            }
            cur->Partitions.v = kp_arena_calloc(&g_ar, (size_t)n, sizeof(*cur->Partitions.v));
        }
        p = &cur->Partitions.v[cur->Partitions.cnt++];
        kp_FetchRequest_FetchPartition_init(p);
        p->Partition = parts[i].partition;
        p->FetchOffset = parts[i].offset;
        p->PartitionMaxBytes = parts[i].max_bytes ? parts[i].max_bytes : 1 << 20;
        p->CurrentLeaderEpoch = parts[i].current_epoch;
        p->LastFetchedEpoch = parts[i].last_epoch;
        p->LogStartOffset = -1;
    }
    if (ver < 13)
        for (int k = 0; k < nt; k++)
            t[k].Topic = S(t[k].Topic.ptr);
    else
        for (int k = 0; k < nt; k++)
            t[k].Topic = (kp_str_t){NULL, 0};
    rq->Topics.v = t;
    rq->Topics.cnt = nt;
}

static kp_FetchResponse_t *fetch(int16_t ver, const fpart_t *parts, int n, int32_t max_wait,
                                 int32_t min_bytes, int32_t max_bytes, int8_t iso, int32_t sid,
                                 int32_t sepoch)
{
    kp_FetchRequest_t rq;
    kp_FetchResponse_t *resp = kp_arena_alloc(&g_ar, sizeof(*resp));
    fetch_req(&rq, ver, parts, n, max_wait, min_bytes, max_bytes, iso, sid, sepoch);
    kp_FetchResponse_init(resp);
    CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_Fetch, ver, &rq, resp, &g_ar), 0);
    return resp;
}

static kp_FetchResponse_PartitionData_t *fr_part(kp_FetchResponse_t *r, int32_t partition,
                                                 int nth_topic)
{
    if (nth_topic >= r->Responses.cnt)
        return NULL;
    for (int32_t k = 0; k < r->Responses.v[nth_topic].Partitions.cnt; k++)
        if (r->Responses.v[nth_topic].Partitions.v[k].PartitionIndex == partition)
            return &r->Responses.v[nth_topic].Partitions.v[k];
    return NULL;
}

static int16_t produce_n(const char *topic, int32_t part, int n, int codec, int64_t *base)
{
    kp_writer_t wr;
    int16_t ec;
    kp_writer_init(&wr);
    CU_ASSERT_EQUAL(kbat_batch(&wr, codec, n, "v", -1, -1, -1, false, false), 0);
    ec = kbat_produce(g_fd, 9, topic, part, 1, &wr, base, NULL);
    kp_writer_free(&wr);
    return ec;
}

static int64_t list_offset(const char *topic, int32_t part, int64_t ts, int8_t iso, int16_t ver,
                           int32_t *epoch, int16_t *err)
{
    kp_ListOffsetsRequest_t rq;
    kp_ListOffsetsResponse_t resp;
    kp_ListOffsetsRequest_ListOffsetsTopic_t t;
    kp_ListOffsetsRequest_ListOffsetsPartition_t p;
    kp_ListOffsetsRequest_init(&rq);
    kp_ListOffsetsRequest_ListOffsetsTopic_init(&t);
    kp_ListOffsetsRequest_ListOffsetsPartition_init(&p);
    rq.ReplicaId = -1;
    rq.IsolationLevel = iso;
    t.Name = S(topic);
    p.PartitionIndex = part;
    p.Timestamp = ts;
    t.Partitions.v = &p;
    t.Partitions.cnt = 1;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    kp_ListOffsetsResponse_init(&resp);
    CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_ListOffsets, ver, &rq, &resp, &g_ar), 0);
    if (epoch)
        *epoch = resp.Topics.v[0].Partitions.v[0].LeaderEpoch;
    if (err)
        *err = resp.Topics.v[0].Partitions.v[0].ErrorCode;
    return resp.Topics.v[0].Partitions.v[0].Offset;
}

/* ---- tests --------------------------------------------------------------------------------------
 */

static void t_metadata(void)
{
    kp_MetadataResponse_t *r;
    kp_MetadataResponse_MetadataResponseTopic_t *t;
    const char *one[] = {"a", NULL};
    const char *bad[] = {"bad name", NULL};
    const char *nope[] = {"nope", NULL};
    const char *ac[] = {"auto1", NULL};
    const char *kv[] = {"num.partitions=2", NULL};
    up(kv);
    r = metadata(0, NULL, false);
    CU_ASSERT_EQUAL(r->Topics.cnt, 0);
    CU_ASSERT_EQUAL(r->Brokers.cnt, 1);
    CU_ASSERT_EQUAL(r->Brokers.v[0].Port, B.port);
    CU_ASSERT(streq(r->Brokers.v[0].Host, "127.0.0.1"));
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "a", 3, NULL), 0);
    for (int16_t v = 0; v <= 13; v++) {
        r = metadata(v, one, false);
        t = md_topic(r, "a");
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_EQUAL(t->ErrorCode, 0);
        CU_ASSERT_EQUAL(t->Partitions.cnt, 3);
        CU_ASSERT_EQUAL(t->Partitions.v[2].LeaderId, 1);
        CU_ASSERT_EQUAL(t->Partitions.v[2].IsrNodes.cnt, 1);
        if (v >= 2)
            CU_ASSERT(streq(r->ClusterId, kb_meta_cluster_id(B.svc->meta)));
        if (v >= 7)
            CU_ASSERT_EQUAL(t->Partitions.v[0].LeaderEpoch, 0);
        if (v >= 10)
            CU_ASSERT(!kb_uuid_is_zero(&t->TopicId));
        if (v >= 8)
            CU_ASSERT_EQUAL(t->TopicAuthorizedOperations, INT32_MIN);
    }
    r = metadata(12, NULL, false);
    CU_ASSERT_EQUAL(r->Topics.cnt, 1);
    {
        const char *twice[] = {"a", "nope", "a", NULL};
        r = metadata(12, twice, false);
        CU_ASSERT_EQUAL(r->Topics.cnt, 2);
    }
    r = metadata(12, bad, true);
    CU_ASSERT_EQUAL(r->Topics.v[0].ErrorCode, KP_ERR_INVALID_TOPIC_EXCEPTION);
    r = metadata(12, nope, false);
    CU_ASSERT_EQUAL(r->Topics.v[0].ErrorCode, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
    r = metadata(12, ac, true);
    CU_ASSERT_EQUAL(r->Topics.v[0].ErrorCode, 0);
    CU_ASSERT_EQUAL(r->Topics.v[0].Partitions.cnt, 2);
    /* v3: always allowed; v12 by id */
    {
        const char *ac3[] = {"auto3", NULL};
        kp_MetadataRequest_t rq;
        kp_MetadataResponse_t resp;
        kp_MetadataRequest_MetadataRequestTopic_t tt[2];
        r = metadata(3, ac3, false);
        CU_ASSERT_EQUAL(r->Topics.v[0].ErrorCode, 0);
        kp_MetadataRequest_init(&rq);
        kp_MetadataRequest_MetadataRequestTopic_init(&tt[0]);
        kp_MetadataRequest_MetadataRequestTopic_init(&tt[1]);
        tt[0].Name = S(""); /* the Java client's way of asking by id */
        tt[0].TopicId = topic_id("a");
        tt[1].Name = KP_STR_NULL;
        kb_uuid_random(&tt[1].TopicId);
        rq.Topics.v = tt;
        rq.Topics.cnt = 2;
        rq.IncludeTopicAuthorizedOperations = true;
        kp_MetadataResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_Metadata, 12, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.Topics.cnt, 2);
        CU_ASSERT(streq(resp.Topics.v[0].Name, "a"));
        CU_ASSERT_NOT_EQUAL(resp.Topics.v[0].TopicAuthorizedOperations, INT32_MIN);
        CU_ASSERT_EQUAL(resp.Topics.v[1].ErrorCode, KP_ERR_UNKNOWN_TOPIC_ID);
        CU_ASSERT_EQUAL(resp.Topics.v[1].Name.len, -1);
    }
    down();
    {
        const char *kv2[] = {"auto.create.topics.enable=false", NULL};
        up(kv2);
        r = metadata(3, ac, true);
        CU_ASSERT_EQUAL(r->Topics.v[0].ErrorCode, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
        /* internal topics are created on demand regardless, and flagged */
        {
            const char *co[] = {"__consumer_offsets", NULL};
            const char *kv3[] = {NULL};
            (void)kv3;
            r = metadata(12, co, false);
            CU_ASSERT_EQUAL(r->Topics.v[0].ErrorCode, 0);
            CU_ASSERT(r->Topics.v[0].IsInternal);
        }
        down();
    }
}

static int16_t create_one(int16_t ver, const char *name, int32_t parts, int16_t rf,
                          const char *const *cfg, bool validate_only,
                          kp_CreateTopicsResponse_CreatableTopicResult_t **out)
{
    kp_CreateTopicsRequest_t rq;
    kp_CreateTopicsResponse_t *resp = kp_arena_alloc(&g_ar, sizeof(*resp));
    kp_CreateTopicsRequest_CreatableTopic_t t;
    kp_CreateTopicsRequest_CreatableTopicConfig_t c[8];
    int n = 0;
    kp_CreateTopicsRequest_init(&rq);
    kp_CreateTopicsRequest_CreatableTopic_init(&t);
    t.Name = S(name);
    t.NumPartitions = parts;
    t.ReplicationFactor = rf;
    for (; cfg && cfg[2 * n]; n++) {
        kp_CreateTopicsRequest_CreatableTopicConfig_init(&c[n]);
        c[n].Name = S(cfg[2 * n]);
        c[n].Value = S(cfg[2 * n + 1]);
    }
    t.Configs.v = c;
    t.Configs.cnt = n;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    rq.ValidateOnly = validate_only;
    kp_CreateTopicsResponse_init(resp);
    CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_CreateTopics, ver, &rq, resp, &g_ar), 0);
    CU_ASSERT_EQUAL_FATAL(resp->Topics.cnt, 1);
    if (out)
        *out = &resp->Topics.v[0];
    return resp->Topics.v[0].ErrorCode;
}

static void t_create_topics(void)
{
    kp_CreateTopicsResponse_CreatableTopicResult_t *r;
    char long_name[260];
    const char *cfg_ok[] = {"retention.ms", "1000", "cleanup.policy", "compact", NULL};
    const char *cfg_bad[] = {"retention.ms", "x", NULL};
    const char *cfg_unknown[] = {"foo.bar", "1", NULL};
    const char *cfg_mirror[] = {"mirror.name", "m", NULL};
    bool saw = false;
    up(NULL);
    CU_ASSERT_EQUAL(create_one(7, "c1", 2, 1, cfg_ok, false, &r), 0);
    CU_ASSERT(!kb_uuid_is_zero(&r->TopicId));
    CU_ASSERT_EQUAL(r->NumPartitions, 2);
    CU_ASSERT_EQUAL(r->ReplicationFactor, 1);
    for (int32_t i = 0; i < r->Configs.cnt; i++) {
        if (streq(r->Configs.v[i].Name, "retention.ms")) {
            CU_ASSERT(streq(r->Configs.v[i].Value, "1000"));
            CU_ASSERT_EQUAL(r->Configs.v[i].ConfigSource, KB_CS_TOPIC_CONFIG);
            saw = true;
        }
        CU_ASSERT(!streq(r->Configs.v[i].Name, "mirror.name"));
    }
    CU_ASSERT(saw);
    CU_ASSERT_EQUAL(create_one(7, "c1", 2, 1, NULL, false, NULL), KP_ERR_TOPIC_ALREADY_EXISTS);
    CU_ASSERT_EQUAL(create_one(2, "d1", -1, -1, NULL, false, NULL), 0);
    CU_ASSERT_EQUAL(create_one(8, "c2", 1, 2, NULL, false, NULL),
                    KP_ERR_INVALID_REPLICATION_FACTOR);
    CU_ASSERT_EQUAL(create_one(8, "c2", 0, 1, NULL, false, NULL), KP_ERR_INVALID_PARTITIONS);
    CU_ASSERT_EQUAL(create_one(8, "c2", -5, 1, NULL, false, NULL), KP_ERR_INVALID_PARTITIONS);
    CU_ASSERT_EQUAL(create_one(8, "c2", 1, 0, NULL, false, NULL),
                    KP_ERR_INVALID_REPLICATION_FACTOR);
    CU_ASSERT_EQUAL(create_one(8, "c2", 1, 1, cfg_bad, false, NULL), KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(create_one(8, "c2", 1, 1, cfg_unknown, false, NULL), KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(create_one(8, "c2", 1, 1, cfg_mirror, false, NULL), KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(create_one(8, ".", 1, 1, NULL, false, NULL), KP_ERR_INVALID_TOPIC_EXCEPTION);
    CU_ASSERT_EQUAL(create_one(8, "..", 1, 1, NULL, false, NULL), KP_ERR_INVALID_TOPIC_EXCEPTION);
    CU_ASSERT_EQUAL(create_one(8, "a:b", 1, 1, NULL, false, NULL), KP_ERR_INVALID_TOPIC_EXCEPTION);
    memset(long_name, 'x', 250);
    long_name[250] = '\0';
    CU_ASSERT_EQUAL(create_one(8, long_name, 1, 1, NULL, false, NULL),
                    KP_ERR_INVALID_TOPIC_EXCEPTION);
    long_name[249] = '\0';
    CU_ASSERT_EQUAL(create_one(8, long_name, 1, 1, NULL, false, NULL), 0);
    CU_ASSERT_EQUAL(create_one(8, "__consumer_offsets", 1, 1, NULL, false, NULL),
                    KP_ERR_INVALID_REQUEST);
    CU_ASSERT_EQUAL(create_one(8, "vo", 1, 1, NULL, true, &r), 0);
    CU_ASSERT(kb_uuid_is_zero(&r->TopicId));
    CU_ASSERT_NOT_EQUAL(kb_meta_topic_by_name(B.svc->meta, "vo", NULL), 0);
    CU_ASSERT_EQUAL(create_one(8, "c1_x", 1, 1, NULL, false, NULL), 0);
    CU_ASSERT_EQUAL(create_one(8, "c1.x", 1, 1, NULL, false, NULL), KP_ERR_INVALID_TOPIC_EXCEPTION);
    /* MirrorInfo from a client, duplicates, assignments */
    {
        kp_CreateTopicsRequest_t rq;
        kp_CreateTopicsResponse_t resp;
        kp_CreateTopicsRequest_CreatableTopic_t t[3];
        kp_CreateTopicsRequest_CreatableReplicaAssignment_t as[2];
        int32_t ok_ids[] = {1}, bad_ids[] = {2}, dup_ids[] = {1, 1};
        kp_CreateTopicsRequest_init(&rq);
        for (int i = 0; i < 3; i++) {
            kp_CreateTopicsRequest_CreatableTopic_init(&t[i]);
            t[i].NumPartitions = 1;
            t[i].ReplicationFactor = 1;
        }
        t[0].Name = S("mi");
        t[0].MirrorInfo_null = false;
        t[0].MirrorInfo.MirrorName = S("m1");
        kb_uuid_random(&t[0].MirrorInfo.TopicId);
        t[1].Name = S("dup");
        t[2].Name = S("dup");
        rq.Topics.v = t;
        rq.Topics.cnt = 3;
        kp_CreateTopicsResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_CreateTopics, 8, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.Topics.cnt, 3);
        CU_ASSERT_EQUAL(resp.Topics.v[0].ErrorCode, KP_ERR_INVALID_REQUEST);
        CU_ASSERT_EQUAL(resp.Topics.v[1].ErrorCode, KP_ERR_INVALID_REQUEST);
        CU_ASSERT_EQUAL(resp.Topics.v[2].ErrorCode, KP_ERR_INVALID_REQUEST);
        kp_CreateTopicsRequest_CreatableReplicaAssignment_init(&as[0]);
        kp_CreateTopicsRequest_CreatableReplicaAssignment_init(&as[1]);
        as[0].PartitionIndex = 0;
        as[0].BrokerIds.v = ok_ids;
        as[0].BrokerIds.cnt = 1;
        as[1].PartitionIndex = 1;
        as[1].BrokerIds.v = ok_ids;
        as[1].BrokerIds.cnt = 1;
        kp_CreateTopicsRequest_CreatableTopic_init(&t[0]);
        t[0].Name = S("asg");
        t[0].NumPartitions = -1;
        t[0].ReplicationFactor = -1;
        t[0].Assignments.v = as;
        t[0].Assignments.cnt = 2;
        rq.Topics.cnt = 1;
        kp_CreateTopicsResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_CreateTopics, 5, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.Topics.v[0].ErrorCode, 0);
        CU_ASSERT_EQUAL(resp.Topics.v[0].NumPartitions, 2);
        as[1].BrokerIds.v = bad_ids;
        t[0].Name = S("asg2");
        kp_CreateTopicsResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_CreateTopics, 5, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.Topics.v[0].ErrorCode, KP_ERR_INVALID_REPLICA_ASSIGNMENT);
        CU_ASSERT(streq(resp.Topics.v[0].ErrorMessage,
                        "The manual partition assignment includes broker 2, but no such broker "
                        "is registered."));
        /* Kafka's controller: a list naming a broker twice; counts other than -1 */
        as[1].BrokerIds.v = dup_ids;
        as[1].BrokerIds.cnt = 2;
        kp_CreateTopicsResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_CreateTopics, 5, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.Topics.v[0].ErrorCode, KP_ERR_INVALID_REPLICA_ASSIGNMENT);
        CU_ASSERT(streq(resp.Topics.v[0].ErrorMessage,
                        "The manual partition assignment includes the broker 1 more than once."));
        as[1].BrokerIds.v = ok_ids;
        as[1].BrokerIds.cnt = 1;
        as[1].PartitionIndex = 0;
        kp_CreateTopicsResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_CreateTopics, 5, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.Topics.v[0].ErrorCode, KP_ERR_INVALID_REPLICA_ASSIGNMENT);
        CU_ASSERT(streq(resp.Topics.v[0].ErrorMessage,
                        "Found multiple manual partition assignments for partition 0"));
        as[1].PartitionIndex = 1;
        t[0].ReplicationFactor = 1;
        kp_CreateTopicsResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_CreateTopics, 5, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.Topics.v[0].ErrorCode, KP_ERR_INVALID_REQUEST);
        t[0].ReplicationFactor = -1;
        t[0].NumPartitions = 2;
        kp_CreateTopicsResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_CreateTopics, 5, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.Topics.v[0].ErrorCode, KP_ERR_INVALID_REQUEST);
        CU_ASSERT_NOT_EQUAL(kb_meta_topic_by_name(B.svc->meta, "asg2", NULL), 0);
    }
    down();
}

static void t_produce_fetch(void)
{
    int64_t base = -1;
    fpart_t fp = {
        .topic = "pf", .partition = 0, .offset = 0, .current_epoch = -1, .last_epoch = -1};
    static const int16_t pvers[] = {3, 5, 7, 8, 9, 12, 13};
    static const int16_t fvers[] = {4, 5, 7, 10, 11, 12, 13, 15, 16, 17, 18, 19};
    up(NULL);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "pf", 2, NULL), 0);
    for (size_t i = 0; i < sizeof(pvers) / sizeof(pvers[0]); i++) {
        kp_writer_t wr;
        kp_writer_init(&wr);
        kbat_batch(&wr, KP_CODEC_NONE, 10, "v", -1, -1, -1, false, false);
        if (pvers[i] >= 13) {
            /* v13: by topic id */
            kp_ProduceRequest_t rq;
            kp_ProduceResponse_t resp;
            kp_ProduceRequest_TopicProduceData_t td;
            kp_ProduceRequest_PartitionProduceData_t pd;
            kp_ProduceRequest_init(&rq);
            kp_ProduceRequest_TopicProduceData_init(&td);
            kp_ProduceRequest_PartitionProduceData_init(&pd);
            rq.Acks = -1;
            td.TopicId = topic_id("pf");
            pd.Records = (kp_bytes_t){wr.buf, (int32_t)wr.len};
            td.PartitionData.v = &pd;
            td.PartitionData.cnt = 1;
            rq.TopicData.v = &td;
            rq.TopicData.cnt = 1;
            kp_ProduceResponse_init(&resp);
            CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_Produce, 13, &rq, &resp, &g_ar), 0);
            CU_ASSERT_EQUAL(resp.Responses.v[0].PartitionResponses.v[0].ErrorCode, 0);
            CU_ASSERT_EQUAL(resp.Responses.v[0].PartitionResponses.v[0].BaseOffset,
                            (int64_t)i * 10);
            CU_ASSERT(!memcmp(resp.Responses.v[0].TopicId.b, td.TopicId.b, 16));
            kb_uuid_random(&td.TopicId);
            kp_ProduceResponse_init(&resp);
            CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_Produce, 13, &rq, &resp, &g_ar), 0);
            CU_ASSERT_EQUAL(resp.Responses.v[0].PartitionResponses.v[0].ErrorCode,
                            KP_ERR_UNKNOWN_TOPIC_ID);
        } else {
            CU_ASSERT_EQUAL(kbat_produce(g_fd, pvers[i], "pf", 0, -1, &wr, &base, NULL), 0);
            CU_ASSERT_EQUAL(base, (int64_t)i * 10);
        }
        kp_writer_free(&wr);
    }
    for (size_t i = 0; i < sizeof(fvers) / sizeof(fvers[0]); i++) {
        kp_FetchResponse_t *r = fetch(fvers[i], &fp, 1, 0, 1, 1 << 20, 0, 0, -1);
        kp_FetchResponse_PartitionData_t *p = fr_part(r, 0, 0);
        int64_t first, last;
        CU_ASSERT_PTR_NOT_NULL_FATAL(p);
        CU_ASSERT_EQUAL(p->ErrorCode, 0);
        CU_ASSERT_EQUAL(p->HighWatermark, 70);
        CU_ASSERT_EQUAL(p->LastStableOffset, 70);
        if (fvers[i] >= 5)
            CU_ASSERT_EQUAL(p->LogStartOffset, 0);
        CU_ASSERT_EQUAL(kbat_count_records(p->Records, &first, &last), 70);
        CU_ASSERT_EQUAL(first, 0);
        CU_ASSERT_EQUAL(last, 69);
        if (fvers[i] >= 11)
            CU_ASSERT_EQUAL(p->PreferredReadReplica, -1);
        if (fvers[i] >= 13) {
            CU_ASSERT(!memcmp(r->Responses.v[0].TopicId.b, topic_id("pf").b, 16));
        } else {
            CU_ASSERT(streq(r->Responses.v[0].Topic, "pf"));
        }
    }
    /* v19's MirrorLeaderEpoch (provisional tag) is accepted and ignored */
    {
        kp_FetchRequest_t rq;
        kp_FetchResponse_t resp;
        fetch_req(&rq, 19, &fp, 1, 0, 1, 1 << 20, 0, 0, -1);
        rq.Topics.v[0].Partitions.v[0].MirrorLeaderEpoch = 5;
        kp_FetchResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_Fetch, 19, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(fr_part(&resp, 0, 0)->ErrorCode, 0);
        CU_ASSERT_EQUAL(kbat_count_records(fr_part(&resp, 0, 0)->Records, NULL, NULL), 70);
    }
    /* from the middle of a batch: the whole batch comes back (clients skip) */
    fp.offset = 15;
    {
        kp_FetchResponse_t *r = fetch(12, &fp, 1, 0, 1, 1 << 20, 0, 0, -1);
        int64_t first;
        CU_ASSERT_EQUAL(kbat_count_records(fr_part(r, 0, 0)->Records, &first, NULL), 60);
        CU_ASSERT_EQUAL(first, 10);
    }
    /* every codec */
    for (int codec = 0; codec <= 4; codec++) {
        char t[16];
        fpart_t f2 = {.topic = t, .current_epoch = -1, .last_epoch = -1};
        kp_FetchResponse_t *r;
        snprintf(t, sizeof(t), "codec%d", codec);
        CU_ASSERT_EQUAL(kbat_create_topic(g_fd, t, 1, NULL), 0);
        CU_ASSERT_EQUAL(produce_n(t, 0, 100, codec, &base), 0);
        CU_ASSERT_EQUAL(produce_n(t, 0, 100, codec, &base), 0);
        CU_ASSERT_EQUAL(base, 100);
        r = fetch(12, &f2, 1, 0, 1, 1 << 20, 0, 0, -1);
        CU_ASSERT_EQUAL(kbat_count_records(fr_part(r, 0, 0)->Records, NULL, NULL), 200);
    }
    /* topic compression.type=lz4 recompresses a gzip batch */
    {
        const char *cfg[] = {"compression.type", "lz4", NULL};
        fpart_t f3 = {.topic = "rc", .current_epoch = -1, .last_epoch = -1};
        kp_FetchResponse_t *r;
        kp_batch_t b;
        CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "rc", 1, cfg), 0);
        CU_ASSERT_EQUAL(produce_n("rc", 0, 50, KP_CODEC_GZIP, &base), 0);
        r = fetch(12, &f3, 1, 0, 1, 1 << 20, 0, 0, -1);
        CU_ASSERT_EQUAL(kbat_count_records(fr_part(r, 0, 0)->Records, NULL, NULL), 50);
        CU_ASSERT_EQUAL(kp_batch_parse(fr_part(r, 0, 0)->Records.ptr,
                                       (size_t)fr_part(r, 0, 0)->Records.len, 0, 0, &b, NULL),
                        0);
        CU_ASSERT_EQUAL(kp_batch_hdr_codec(&b.hdr), KP_CODEC_LZ4);
    }
    down();
}

static void t_produce_errors(void)
{
    kp_writer_t wr;
    int64_t base;
    const char *compact[] = {"cleanup.policy", "compact", NULL};
    const char *small[] = {"max.message.bytes", "200", NULL};
    const char *mid[] = {"max.message.bytes", "100000", NULL};
    const char *isr2[] = {"min.insync.replicas", "2", NULL};
    const char *lat[] = {"message.timestamp.type", "LogAppendTime", NULL};
    up(NULL);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "e", 1, NULL), 0);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "cmp", 1, compact), 0);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "small", 1, small), 0);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "mid", 1, mid), 0);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "isr2", 1, isr2), 0);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "lat", 1, lat), 0);
    kp_writer_init(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, 3, "v", -1, -1, -1, false, false);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "none", 0, 1, &wr, &base, NULL),
                    KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "e", 5, 1, &wr, &base, NULL),
                    KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "e", 0, 2, &wr, &base, NULL),
                    KP_ERR_INVALID_REQUIRED_ACKS);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "isr2", 0, -1, &wr, &base, NULL),
                    KP_ERR_NOT_ENOUGH_REPLICAS);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "isr2", 0, 1, &wr, &base, NULL), 0);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "small", 0, 1, &wr, &base, NULL), 0);
    /* LogAppendTime */
    {
        kp_ProduceRequest_t rq;
        kp_ProduceResponse_t resp;
        kp_ProduceRequest_TopicProduceData_t td;
        kp_ProduceRequest_PartitionProduceData_t pd;
        kp_ProduceRequest_init(&rq);
        kp_ProduceRequest_TopicProduceData_init(&td);
        kp_ProduceRequest_PartitionProduceData_init(&pd);
        rq.Acks = 1;
        td.Name = S("lat");
        pd.Records = (kp_bytes_t){wr.buf, (int32_t)wr.len};
        td.PartitionData.v = &pd;
        td.PartitionData.cnt = 1;
        rq.TopicData.v = &td;
        rq.TopicData.cnt = 1;
        kp_ProduceResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_Produce, 9, &rq, &resp, &g_ar), 0);
        CU_ASSERT(resp.Responses.v[0].PartitionResponses.v[0].LogAppendTimeMs > 0);
    }
    /* two batches in one partition (v3+) */
    kbat_batch(&wr, KP_CODEC_NONE, 3, "w", -1, -1, -1, false, false);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "e", 0, 1, &wr, &base, NULL), KP_ERR_INVALID_RECORD);
    kp_writer_reset(&wr);
    /* null keys on a compacted topic, also inside a compressed batch */
    kbat_batch(&wr, KP_CODEC_GZIP, 3, "v", -1, -1, -1, false, true);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "cmp", 0, 1, &wr, &base, NULL), KP_ERR_INVALID_RECORD);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "e", 0, 1, &wr, &base, NULL), 0);
    kp_writer_reset(&wr);
    kbat_batch(&wr, KP_CODEC_SNAPPY, 3, "v", -1, -1, -1, false, false);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "cmp", 0, 1, &wr, &base, NULL), 0);
    /* zstd needs v7 */
    kp_writer_reset(&wr);
    kbat_batch(&wr, KP_CODEC_ZSTD, 3, "v", -1, -1, -1, false, false);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 6, "e", 0, 1, &wr, &base, NULL),
                    KP_ERR_UNSUPPORTED_COMPRESSION_TYPE);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 7, "e", 0, 1, &wr, &base, NULL), 0);
    /* too large */
    kp_writer_reset(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, 30, "a-long-value-for-the-size-limit", -1, -1, -1, false, false);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "small", 0, 1, &wr, &base, NULL),
                    KP_ERR_MESSAGE_TOO_LARGE);
    /* a decompression bomb (32 MiB of zeros in a few KiB of zstd): refused, not inflated */
    {
        kp_writer_t bomb;
        kp_batch_opts_t o;
        kp_batch_builder_t bb;
        size_t big = 32u << 20;
        uint8_t *zeros = calloc(1, big);
        kp_writer_init(&bomb);
        kp_batch_opts_init(&o);
        o.codec = KP_CODEC_ZSTD;
        kp_batch_builder_init(&bb, &o);
        kp_batch_builder_add(&bb, 1, KP_BYTES_NULL, (kp_bytes_t){zeros, (int32_t)big}, NULL, 0);
        CU_ASSERT_EQUAL(kp_batch_builder_finish(&bb, &bomb), 0);
        kp_batch_builder_free(&bb);
        free(zeros);
        CU_ASSERT(bomb.len < 100000); /* fits max.message.bytes; its records do not fit 16 MiB */
        CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "mid", 0, 1, &bomb, &base, NULL),
                        KP_ERR_MESSAGE_TOO_LARGE);
        kp_writer_free(&bomb);
    }
    /* bad CRC */
    wr.buf[wr.len - 1] ^= 0x55;
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "e", 0, 1, &wr, &base, NULL), KP_ERR_CORRUPT_MESSAGE);
    /* magic 1 */
    wr.buf[wr.len - 1] ^= 0x55;
    wr.buf[KP_BATCH_MAGIC_OFFSET] = 1;
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "e", 0, 1, &wr, &base, NULL), KP_ERR_INVALID_RECORD);
    /* internal topics are not for clients */
    kp_writer_reset(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, 3, "v", -1, -1, -1, false, false);
    CU_ASSERT_EQUAL(kb_meta_ensure_internal_topic(B.svc->meta, KB_TOPIC_TRANSACTION_STATE, NULL),
                    0);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, KB_TOPIC_TRANSACTION_STATE, 0, 1, &wr, &base, NULL),
                    KP_ERR_INVALID_TOPIC_EXCEPTION);
    /* transactional batches: refused without a coordinator */
    kp_writer_reset(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, 3, "t", 100, 0, 0, true, false);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "e", 0, 1, &wr, &base, "txn"), KP_ERR_INVALID_TXN_STATE);
    kp_writer_free(&wr);
    down();
}

static int64_t init_pid(const char *txn, int16_t *err)
{
    kp_InitProducerIdRequest_t rq;
    kp_InitProducerIdResponse_t resp;
    kp_InitProducerIdRequest_init(&rq);
    rq.TransactionalId = txn ? S(txn) : KP_STR_NULL;
    rq.TransactionTimeoutMs = 60000;
    kp_InitProducerIdResponse_init(&resp);
    CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_InitProducerId, 4, &rq, &resp, &g_ar), 0);
    if (err)
        *err = resp.ErrorCode;
    return resp.ProducerId;
}

static void t_idempotent(void)
{
    kp_writer_t wr;
    int64_t base = -1, pid, pid2;
    int16_t err;
    up(NULL);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "idem", 1, NULL), 0);
    pid = init_pid(NULL, &err);
    CU_ASSERT_EQUAL(err, 0);
    CU_ASSERT(pid >= 0);
    pid2 = init_pid(NULL, &err);
    CU_ASSERT_EQUAL(pid2, pid + 1);
    init_pid("tx", &err);
    CU_ASSERT_EQUAL(err, KP_ERR_COORDINATOR_NOT_AVAILABLE);
    kp_writer_init(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, 5, "a", pid, 0, 0, false, false);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "idem", 0, -1, &wr, &base, NULL), 0);
    CU_ASSERT_EQUAL(base, 0);
    /* the same batch again (a retry): NONE with the first offset, nothing appended */
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "idem", 0, -1, &wr, &base, NULL), 0);
    CU_ASSERT_EQUAL(base, 0);
    kp_writer_reset(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, 5, "b", pid, 0, 5, false, false);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "idem", 0, -1, &wr, &base, NULL), 0);
    CU_ASSERT_EQUAL(base, 5);
    kp_writer_reset(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, 5, "c", pid, 0, 20, false, false);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "idem", 0, -1, &wr, &base, NULL),
                    KP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER);
    kp_writer_reset(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, 1, "d", pid, 1, 0, false, false);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "idem", 0, -1, &wr, &base, NULL), 0);
    CU_ASSERT_EQUAL(base, 10);
    kp_writer_reset(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, 1, "e", pid, 0, 10, false, false);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "idem", 0, -1, &wr, &base, NULL),
                    KP_ERR_INVALID_PRODUCER_EPOCH);
    CU_ASSERT_EQUAL(list_offset("idem", 0, -1, 0, 5, NULL, NULL), 11);
    kp_writer_free(&wr);
    /* producer ids are never reused after a restart */
    restart();
    CU_ASSERT(init_pid(NULL, &err) > pid2);
    down();
}

static void t_acks0(void)
{
    kp_writer_t wr;
    kp_MetadataResponse_t *r;
    up(NULL);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "z", 1, NULL), 0);
    kp_writer_init(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, 4, "v", -1, -1, -1, false, false);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "z", 0, 0, &wr, NULL, NULL), 0);
    /* the next request's response is the next thing on the wire */
    r = metadata(9, NULL, false);
    CU_ASSERT_EQUAL(r->Topics.cnt, 1);
    CU_ASSERT_EQUAL(list_offset("z", 0, -1, 0, 5, NULL, NULL), 4);
    kp_writer_free(&wr);
    down();
}

typedef struct txv_s {
    int calls;
    int16_t version; /* the Produce version the hook saw last */
} txv_t;

static int16_t txv_fn(void *opaque, const char *txn, int64_t pid, int16_t epoch, const char *topic,
                      int32_t partition, int16_t produce_version)
{
    txv_t *t = opaque;
    t->calls++;
    t->version = produce_version;
    (void)pid;
    (void)epoch;
    (void)partition;
    return strcmp(txn, "good") || strcmp(topic, "tx") ? KP_ERR_INVALID_TXN_STATE : 0;
}

static void t_read_committed(void)
{
    kp_writer_t wr;
    int64_t base, pid;
    txv_t tv = {0};
    kb_part_t *part;
    fpart_t fp = {.topic = "tx", .current_epoch = -1, .last_epoch = -1};
    kp_FetchResponse_t *r;
    kp_FetchResponse_PartitionData_t *p;
    kb_append_info_t info;
    up(NULL);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "tx", 1, NULL), 0);
    CU_ASSERT_EQUAL(produce_n("tx", 0, 3, KP_CODEC_NONE, &base), 0);
    kb_apisvc_set_txn_verify(B.svc, txv_fn, &tv);
    pid = init_pid(NULL, NULL);
    kp_writer_init(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, 5, "t", pid, 0, 0, true, false);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "tx", 0, -1, &wr, &base, "bad"),
                    KP_ERR_INVALID_TXN_STATE);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "tx", 0, -1, &wr, &base, "good"), 0);
    CU_ASSERT_EQUAL(base, 3);
    CU_ASSERT_EQUAL(tv.calls, 2);
    CU_ASSERT_EQUAL(tv.version, 9);
    /* open transaction: read_committed stops at the LSO */
    r = fetch(12, &fp, 1, 0, 1, 1 << 20, 1, 0, -1);
    p = fr_part(r, 0, 0);
    CU_ASSERT_EQUAL(p->HighWatermark, 8);
    CU_ASSERT_EQUAL(p->LastStableOffset, 3);
    CU_ASSERT_EQUAL(kbat_count_records(p->Records, NULL, NULL), 3);
    CU_ASSERT_EQUAL(list_offset("tx", 0, -1, 1, 5, NULL, NULL), 3);
    CU_ASSERT_EQUAL(list_offset("tx", 0, -1, 0, 5, NULL, NULL), 8);
    /* abort it (as the transaction coordinator would, through the partition) */
    CU_ASSERT_EQUAL(kb_meta_part(B.svc->meta, "tx", 0, &part), KB_META_OK);
    CU_ASSERT_EQUAL(
        kb_part_append_control(part, KP_CONTROL_TYPE_ABORT, pid, 0, 0, kb_part_epoch(part), &info),
        0);
    kb_part_release(part);
    r = fetch(12, &fp, 1, 0, 1, 1 << 20, 1, 0, -1);
    p = fr_part(r, 0, 0);
    CU_ASSERT_EQUAL(p->LastStableOffset, 9);
    CU_ASSERT_EQUAL(p->AbortedTransactions.cnt, 1);
    if (p->AbortedTransactions.cnt == 1) {
        CU_ASSERT_EQUAL(p->AbortedTransactions.v[0].ProducerId, pid);
        CU_ASSERT_EQUAL(p->AbortedTransactions.v[0].FirstOffset, 3);
    }
    /* read_uncommitted: no aborted list (null) */
    r = fetch(12, &fp, 1, 0, 1, 1 << 20, 0, 0, -1);
    CU_ASSERT_EQUAL(fr_part(r, 0, 0)->AbortedTransactions.cnt, -1);
    kb_apisvc_set_txn_verify(B.svc, NULL, NULL);
    kp_writer_free(&wr);
    down();
}

/* DeleteRecords v2 of everything (-1) in partition 0 of @p topic: the partition's error code. */
static int16_t delete_all_records(const char *topic)
{
    kp_DeleteRecordsRequest_t drq;
    kp_DeleteRecordsResponse_t dresp;
    kp_DeleteRecordsRequest_DeleteRecordsTopic_t dt;
    kp_DeleteRecordsRequest_DeleteRecordsPartition_t dp;
    kp_DeleteRecordsRequest_init(&drq);
    kp_DeleteRecordsRequest_DeleteRecordsTopic_init(&dt);
    kp_DeleteRecordsRequest_DeleteRecordsPartition_init(&dp);
    dp.Offset = -1;
    dt.Name = S(topic);
    dt.Partitions.v = &dp;
    dt.Partitions.cnt = 1;
    drq.Topics.v = &dt;
    drq.Topics.cnt = 1;
    kp_DeleteRecordsResponse_init(&dresp);
    if (kbat_call(g_fd, KP_APIKEY_DeleteRecords, 2, &drq, &dresp, &g_ar) != 0 ||
        dresp.Topics.cnt != 1 || dresp.Topics.v[0].Partitions.cnt != 1)
        return -1;
    return dresp.Topics.v[0].Partitions.v[0].ErrorCode;
}

/* Produce v9 of @p wr to partition 0 of @p topic: the error code, *msg its message. */
static int16_t produce_msg(const char *topic, kp_writer_t *wr, kp_str_t *msg)
{
    kp_ProduceRequest_t rq;
    kp_ProduceResponse_t resp;
    kp_ProduceRequest_TopicProduceData_t td;
    kp_ProduceRequest_PartitionProduceData_t pd;
    kp_ProduceRequest_init(&rq);
    kp_ProduceRequest_TopicProduceData_init(&td);
    kp_ProduceRequest_PartitionProduceData_init(&pd);
    rq.Acks = -1;
    td.Name = S(topic);
    pd.Records = (kp_bytes_t){wr->buf, (int32_t)wr->len};
    td.PartitionData.v = &pd;
    td.PartitionData.cnt = 1;
    rq.TopicData.v = &td;
    rq.TopicData.cnt = 1;
    kp_ProduceResponse_init(&resp);
    msg->ptr = NULL;
    msg->len = -1;
    if (kbat_call(g_fd, KP_APIKEY_Produce, 9, &rq, &resp, &g_ar) != 0 || resp.Responses.cnt != 1 ||
        resp.Responses.v[0].PartitionResponses.cnt != 1)
        return -1;
    *msg = resp.Responses.v[0].PartitionResponses.v[0].ErrorMessage;
    return resp.Responses.v[0].PartitionResponses.v[0].ErrorCode;
}

/* CreatePartitions v3 of @p topic to @p count partitions: its error code, @p msg its message. */
static int16_t grow_msg(const char *topic, int32_t count, kp_str_t *msg)
{
    kp_CreatePartitionsRequest_t rq;
    kp_CreatePartitionsResponse_t resp;
    kp_CreatePartitionsRequest_CreatePartitionsTopic_t ct;
    kp_CreatePartitionsRequest_init(&rq);
    kp_CreatePartitionsRequest_CreatePartitionsTopic_init(&ct);
    ct.Name = S(topic);
    ct.Count = count;
    ct.Assignments.cnt = -1;
    rq.Topics.v = &ct;
    rq.Topics.cnt = 1;
    kp_CreatePartitionsResponse_init(&resp);
    msg->ptr = NULL;
    msg->len = -1;
    if (kbat_call(g_fd, KP_APIKEY_CreatePartitions, 3, &rq, &resp, &g_ar) != 0 ||
        resp.Results.cnt != 1)
        return -1;
    *msg = resp.Results.v[0].ErrorMessage;
    return resp.Results.v[0].ErrorCode;
}

static bool str_has(kp_str_t s, const char *needle)
{
    char buf[1100];
    if (s.len < 0 || (size_t)s.len >= sizeof(buf))
        return false;
    memcpy(buf, s.ptr, (size_t)s.len);
    buf[s.len] = '\0';
    return strstr(buf, needle) != NULL;
}

static void t_read_only(void)
{
    char msg[256];
    kb_kv_t kv[] = {{"mirror.name", "m1"}};
    kb_kv_t kv_paused[] = {{"mirror.name", "m1.paused"}};
    kb_kv_t kv_stopped[] = {{"mirror.name", "m1.stopped"}};
    kb_topic_spec_t spec = {
        .name = "mt", .partitions = 1, .configs = kv, .config_cnt = 1, .privileged = true};
    kb_topic_spec_t spec_p = {
        .name = "mtp", .partitions = 1, .configs = kv_paused, .config_cnt = 1, .privileged = true};
    kb_topic_spec_t spec_s = {
        .name = "mts", .partitions = 1, .configs = kv_stopped, .config_cnt = 1, .privileged = true};
    kp_writer_t wr;
    int64_t base;
    kb_part_t *part;
    kb_append_info_t info;
    kp_str_t m;

    up(NULL);
    CU_ASSERT_EQUAL(kb_meta_create_topic(B.svc->meta, &spec, false, NULL, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_meta_create_topic(B.svc->meta, &spec_p, false, NULL, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_meta_create_topic(B.svc->meta, &spec_s, false, NULL, msg, sizeof(msg)), 0);
    kp_writer_init(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, 2, "v", -1, -1, -1, false, false);
    /* No mirror plugin on this broker (none was ever said to run): nothing will decide, so a
     * mirrored or paused topic is read-only (not retriable) and a stopped one stays retriable
     * (a leader with the plugin finishes STOPPING); nothing is appended. */
    CU_ASSERT_FALSE(kb_partmgr_mirror_plugin(B.svc->pm));
    CU_ASSERT_EQUAL(produce_msg("mt", &wr, &m), KP_ERR_READ_ONLY_TOPIC);
    CU_ASSERT(streq(m, KB_PART_NOPLUGIN_MSG));
    CU_ASSERT_EQUAL(delete_all_records("mt"), KP_ERR_READ_ONLY_TOPIC);
    CU_ASSERT_EQUAL(produce_msg("mtp", &wr, &m), KP_ERR_READ_ONLY_TOPIC);
    CU_ASSERT_EQUAL(produce_msg("mts", &wr, &m), KP_ERR_NOT_ENOUGH_REPLICAS);
    CU_ASSERT(streq(m, KB_PART_PENDING_MSG));
    CU_ASSERT_EQUAL(delete_all_records("mts"), KP_ERR_NOT_ENOUGH_REPLICAS);
    CU_ASSERT_EQUAL(kb_meta_part(B.svc->meta, "mt", 0, &part), KB_META_OK);
    CU_ASSERT_EQUAL(kb_log_leo(part->log), 0);
    kb_part_release(part);
    /* With the mirror plugin: pending (no plugin decided yet) is retriable, with the
     * documented message */
    kb_meta_set_mirror_plugin(B.svc->meta, true);
    CU_ASSERT(kb_partmgr_mirror_plugin(B.svc->pm));
    CU_ASSERT_EQUAL(produce_msg("mt", &wr, &m), KP_ERR_NOT_ENOUGH_REPLICAS);
    CU_ASSERT(streq(m, "mirror partition is being stopped; retry"));
    CU_ASSERT_EQUAL(produce_msg("mtp", &wr, &m), KP_ERR_NOT_ENOUGH_REPLICAS);
    CU_ASSERT_EQUAL(kb_meta_part(B.svc->meta, "mt", 0, &part), KB_META_OK);
    /* the mirror path appends while clients cannot */
    CU_ASSERT_EQUAL(kb_part_append_raw(part, wr.buf, wr.len, &info), 0);
    kb_part_set_write_mode(part, KB_WRITE_READ_ONLY);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "mt", 0, 1, &wr, &base, NULL), KP_ERR_READ_ONLY_TOPIC);
    CU_ASSERT_EQUAL(delete_all_records("mt"), KP_ERR_READ_ONLY_TOPIC);
    /* the plugin's decision holds whether it runs or not */
    kb_meta_set_mirror_plugin(B.svc->meta, false);
    kb_part_set_write_mode(part, KB_WRITE_WRITABLE);
    CU_ASSERT_EQUAL(kb_part_append_raw(part, wr.buf, wr.len, &info), KB_E_STATE);
    CU_ASSERT_EQUAL(kbat_produce(g_fd, 9, "mt", 0, 1, &wr, &base, NULL), 0);
    CU_ASSERT_EQUAL(base, 2);
    kb_part_release(part);
    /* A client cannot add partitions to a mirror topic (mirrored or paused: READ_ONLY_TOPIC with
     * the mirror's name and the fix); a stopped one is the operator's again. */
    CU_ASSERT_EQUAL(grow_msg("mt", 2, &m), KP_ERR_READ_ONLY_TOPIC);
    CU_ASSERT(str_has(m, "'m1'") && str_has(m, "kafka-mirrors --stop --mirror m1 --topic 'mt'"));
    CU_ASSERT_EQUAL(grow_msg("mtp", 2, &m), KP_ERR_READ_ONLY_TOPIC);
    CU_ASSERT(str_has(m, "'m1'"));
    CU_ASSERT_EQUAL(grow_msg("mts", 2, &m), 0);
    {
        kb_topic_info_t ti;
        CU_ASSERT_EQUAL(kb_meta_topic_by_name(B.svc->meta, "mt", &ti), 0);
        CU_ASSERT_EQUAL(ti.partitions, 1);
        CU_ASSERT_EQUAL(kb_meta_topic_by_name(B.svc->meta, "mts", &ti), 0);
        CU_ASSERT_EQUAL(ti.partitions, 2);
    }
    /* a client cannot touch mirror.name; a full replacement keeps it */
    {
        kp_IncrementalAlterConfigsRequest_t irq;
        kp_IncrementalAlterConfigsResponse_t iresp;
        kp_IncrementalAlterConfigsRequest_AlterConfigsResource_t res;
        kp_IncrementalAlterConfigsRequest_AlterableConfig_t c;
        kp_IncrementalAlterConfigsRequest_init(&irq);
        kp_IncrementalAlterConfigsRequest_AlterConfigsResource_init(&res);
        kp_IncrementalAlterConfigsRequest_AlterableConfig_init(&c);
        res.ResourceType = KB_RES_TOPIC;
        res.ResourceName = S("mt");
        c.Name = S("mirror.name");
        c.ConfigOperation = KB_CFGOP_DELETE;
        res.Configs.v = &c;
        res.Configs.cnt = 1;
        irq.Resources.v = &res;
        irq.Resources.cnt = 1;
        kp_IncrementalAlterConfigsResponse_init(&iresp);
        CU_ASSERT_EQUAL_FATAL(
            kbat_call(g_fd, KP_APIKEY_IncrementalAlterConfigs, 1, &irq, &iresp, &g_ar), 0);
        CU_ASSERT_EQUAL(iresp.Responses.v[0].ErrorCode, KP_ERR_INVALID_CONFIG);
    }
    {
        kb_topic_info_t ti;
        CU_ASSERT_EQUAL(kb_meta_topic_by_name(B.svc->meta, "mt", &ti), 0);
        CU_ASSERT(ti.mirror);
    }
    kp_writer_free(&wr);
    down();
}

/* A fetch sent on its own connection, answered later. */
typedef struct pending_s {
    int fd;
    int32_t corr;
    int16_t ver;
} pending_t;

static void t_long_poll(void)
{
    fpart_t fp = {.topic = "lp", .current_epoch = -1, .last_epoch = -1};
    kp_FetchRequest_t rq;
    kp_FetchResponse_t resp;
    pending_t pf;
    int64_t t0, base;
    up(NULL);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "lp", 1, NULL), 0);
    /* nothing there: waits MaxWaitMs, then an empty answer */
    t0 = kbat_now_ms();
    {
        kp_FetchResponse_t *r = fetch(12, &fp, 1, 300, 1, 1 << 20, 0, 0, -1);
        CU_ASSERT(kbat_now_ms() - t0 >= 280);
        CU_ASSERT_EQUAL(fr_part(r, 0, 0)->Records.len, 0);
    }
    /* woken by an append long before its 20 s */
    pf.fd = kbat_connect(B.port);
    pf.corr = 77;
    pf.ver = 12;
    fetch_req(&rq, 12, &fp, 1, 20000, 1, 1 << 20, 0, 0, -1);
    CU_ASSERT_EQUAL(kbat_send(pf.fd, KP_APIKEY_Fetch, 12, pf.corr, "lp", &rq), 0);
    CU_ASSERT(kbat_silent(pf.fd, 100));
    t0 = kbat_now_ms();
    CU_ASSERT_EQUAL(produce_n("lp", 0, 3, KP_CODEC_NONE, &base), 0);
    kp_FetchResponse_init(&resp);
    CU_ASSERT_EQUAL(kbat_recv(pf.fd, KP_APIKEY_Fetch, 12, pf.corr, &resp, &g_ar, 5000), 0);
    CU_ASSERT(kbat_now_ms() - t0 < 5000);
    CU_ASSERT_EQUAL(kbat_count_records(fr_part(&resp, 0, 0)->Records, NULL, NULL), 3);
    /* min.bytes larger than one append: the second append completes it */
    fp.offset = 3;
    fetch_req(&rq, 12, &fp, 1, 20000, 300, 1 << 20, 0, 0, -1);
    CU_ASSERT_EQUAL(kbat_send(pf.fd, KP_APIKEY_Fetch, 12, 78, "lp", &rq), 0);
    CU_ASSERT_EQUAL(produce_n("lp", 0, 1, KP_CODEC_NONE, &base), 0);
    CU_ASSERT(kbat_silent(pf.fd, 200));
    CU_ASSERT_EQUAL(produce_n("lp", 0, 30, KP_CODEC_NONE, &base), 0);
    kp_FetchResponse_init(&resp);
    CU_ASSERT_EQUAL(kbat_recv(pf.fd, KP_APIKEY_Fetch, 12, 78, &resp, &g_ar, 5000), 0);
    CU_ASSERT_EQUAL(kbat_count_records(fr_part(&resp, 0, 0)->Records, NULL, NULL), 31);
    /* a client leaving while its fetch waits: the operation goes away */
    fp.offset = 34;
    fetch_req(&rq, 12, &fp, 1, 20000, 1, 1 << 20, 0, 0, -1);
    CU_ASSERT_EQUAL(kbat_send(pf.fd, KP_APIKEY_Fetch, 12, 79, "lp", &rq), 0);
    {
        int64_t deadline = kbat_now_ms() + 5000;
        while (kb_dq_count(B.svc->dq) == 0 && kbat_now_ms() < deadline)
            kbat_silent(g_fd, 5);
        CU_ASSERT_EQUAL(kb_dq_count(B.svc->dq), 1);
        close(pf.fd);
        deadline = kbat_now_ms() + 5000;
        while (kb_dq_count(B.svc->dq) != 0 && kbat_now_ms() < deadline)
            kbat_silent(g_fd, 5);
        CU_ASSERT_EQUAL(kb_dq_count(B.svc->dq), 0);
    }
    /* a deletion wakes a waiting fetch with an error */
    pf.fd = kbat_connect(B.port);
    CU_ASSERT_EQUAL(kbat_send(pf.fd, KP_APIKEY_Fetch, 12, 80, "lp", &rq), 0);
    {
        char msg[256];
        int64_t deadline = kbat_now_ms() + 5000;
        while (kb_dq_count(B.svc->dq) == 0 && kbat_now_ms() < deadline)
            kbat_silent(g_fd, 5);
        CU_ASSERT_EQUAL(kb_meta_delete_topic(B.svc->meta, "lp", NULL, msg, sizeof(msg)), 0);
    }
    kp_FetchResponse_init(&resp);
    CU_ASSERT_EQUAL(kbat_recv(pf.fd, KP_APIKEY_Fetch, 12, 80, &resp, &g_ar, 5000), 0);
    CU_ASSERT_EQUAL(fr_part(&resp, 0, 0)->ErrorCode, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
    close(pf.fd);
    down();
}

static void t_sessions(void)
{
    fpart_t fp[2] = {{.topic = "s", .partition = 0, .current_epoch = -1, .last_epoch = -1},
                     {.topic = "s", .partition = 1, .current_epoch = -1, .last_epoch = -1}};
    kp_FetchResponse_t *r;
    int32_t sid;
    int64_t base;
    up(NULL);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "s", 2, NULL), 0);
    CU_ASSERT_EQUAL(produce_n("s", 0, 5, KP_CODEC_NONE, &base), 0);
    /* epoch 0: a new session with a full response */
    r = fetch(12, fp, 2, 0, 1, 1 << 20, 0, 0, 0);
    CU_ASSERT_EQUAL(r->ErrorCode, 0);
    sid = r->SessionId;
    CU_ASSERT(sid > 0);
    CU_ASSERT_EQUAL(r->Responses.cnt, 1);
    CU_ASSERT_EQUAL(r->Responses.v[0].Partitions.cnt, 2);
    CU_ASSERT_EQUAL(kbat_count_records(fr_part(r, 0, 0)->Records, NULL, NULL), 5);
    {
        size_t ns = 0, np = 0; /* what the kbroker_fetch_session* gauges show */
        kb_fsess_stats(B.svc->fsess, &ns, &np);
        CU_ASSERT_EQUAL(ns, 1);
        CU_ASSERT_EQUAL(np, 2);
    }
    /* epoch 1: the fetcher moved p0 to 5; nothing new anywhere -> an empty response */
    fp[0].offset = 5;
    r = fetch(12, fp, 1, 0, 1, 1 << 20, 0, sid, 1);
    CU_ASSERT_EQUAL(r->ErrorCode, 0);
    CU_ASSERT_EQUAL(r->SessionId, sid);
    CU_ASSERT_EQUAL(r->Responses.cnt, 0);
    /* new data in p1 only: only p1 comes back */
    CU_ASSERT_EQUAL(produce_n("s", 1, 2, KP_CODEC_NONE, &base), 0);
    r = fetch(12, fp, 0, 0, 1, 1 << 20, 0, sid, 2);
    CU_ASSERT_EQUAL(r->Responses.cnt, 1);
    CU_ASSERT_EQUAL(r->Responses.v[0].Partitions.cnt, 1);
    CU_ASSERT_EQUAL(r->Responses.v[0].Partitions.v[0].PartitionIndex, 1);
    CU_ASSERT_EQUAL(kbat_count_records(r->Responses.v[0].Partitions.v[0].Records, NULL, NULL), 2);
    /* wrong epoch, unknown session */
    r = fetch(12, fp, 0, 0, 1, 1 << 20, 0, sid, 2);
    CU_ASSERT_EQUAL(r->ErrorCode, KP_ERR_INVALID_FETCH_SESSION_EPOCH);
    r = fetch(12, fp, 0, 0, 1, 1 << 20, 0, sid + 1, 1);
    CU_ASSERT_EQUAL(r->ErrorCode, KP_ERR_FETCH_SESSION_ID_NOT_FOUND);
    /* the session uses names: a v13 request on it is refused */
    r = fetch(13, fp, 0, 0, 1, 1 << 20, 0, sid, 3);
    CU_ASSERT_EQUAL(r->ErrorCode, KP_ERR_FETCH_SESSION_TOPIC_ID_ERROR);
    /* forgotten p1: new data there is no longer reported */
    {
        kp_FetchRequest_t rq;
        kp_FetchResponse_t resp;
        kp_FetchRequest_ForgottenTopic_t ft;
        int32_t parts[] = {1};
        fetch_req(&rq, 12, fp, 0, 0, 1, 1 << 20, 0, sid, 3);
        kp_FetchRequest_ForgottenTopic_init(&ft);
        ft.Topic = S("s");
        ft.Partitions.v = parts;
        ft.Partitions.cnt = 1;
        rq.ForgottenTopicsData.v = &ft;
        rq.ForgottenTopicsData.cnt = 1;
        CU_ASSERT_EQUAL(produce_n("s", 1, 2, KP_CODEC_NONE, &base), 0);
        kp_FetchResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_Fetch, 12, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.ErrorCode, 0);
        CU_ASSERT_EQUAL(resp.Responses.cnt, 0);
    }
    {
        size_t ns = 0, np = 0;
        kb_fsess_stats(B.svc->fsess, &ns, &np);
        CU_ASSERT_EQUAL(ns, 1);
        CU_ASSERT_EQUAL(np, 1); /* p1 forgotten */
    }
    /* p0 gets data: reported from the session's fetch offset 5 */
    CU_ASSERT_EQUAL(produce_n("s", 0, 1, KP_CODEC_NONE, &base), 0);
    r = fetch(12, fp, 0, 0, 1, 1 << 20, 0, sid, 4);
    CU_ASSERT_EQUAL(r->Responses.cnt, 1);
    CU_ASSERT_EQUAL(kbat_count_records(fr_part(r, 0, 0)->Records, NULL, NULL), 1);
    /* epoch -1 closes the session */
    CU_ASSERT_EQUAL(kb_fsess_count(B.svc->fsess), 1);
    r = fetch(12, fp, 2, 0, 1, 1 << 20, 0, sid, -1);
    CU_ASSERT_EQUAL(r->SessionId, 0);
    CU_ASSERT_EQUAL(kb_fsess_count(B.svc->fsess), 0);
    {
        size_t ns = 1, np = 1;
        kb_fsess_stats(B.svc->fsess, &ns, &np);
        CU_ASSERT_EQUAL(ns, 0);
        CU_ASSERT_EQUAL(np, 0);
    }
    /* v13 sessions by id */
    r = fetch(13, fp, 2, 0, 1, 1 << 20, 0, 0, 0);
    CU_ASSERT(r->SessionId > 0);
    CU_ASSERT(!memcmp(r->Responses.v[0].TopicId.b, topic_id("s").b, 16));
    down();
}

static void t_fetch_limits(void)
{
    fpart_t fp[2] = {{.topic = "l", .partition = 0, .current_epoch = -1, .last_epoch = -1},
                     {.topic = "l", .partition = 1, .current_epoch = -1, .last_epoch = -1}};
    kp_FetchResponse_t *r;
    int64_t base;
    int n;
    up(NULL);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "l", 2, NULL), 0);
    for (int i = 0; i < 10; i++) {
        CU_ASSERT_EQUAL(produce_n("l", 0, 20, KP_CODEC_NONE, &base), 0);
        CU_ASSERT_EQUAL(produce_n("l", 1, 20, KP_CODEC_NONE, &base), 0);
    }
    /* partition max bytes 1: the first batch anyway; then nothing for the second partition */
    fp[0].max_bytes = 1;
    fp[1].max_bytes = 1;
    r = fetch(12, fp, 2, 0, 1, 1 << 20, 0, 0, -1);
    CU_ASSERT_EQUAL(kbat_count_records(fr_part(r, 0, 0)->Records, NULL, NULL), 20);
    CU_ASSERT_EQUAL(kbat_count_records(fr_part(r, 1, 0)->Records, NULL, NULL), 0);
    /* response max bytes: some batches of p0, none of p1 */
    fp[0].max_bytes = 1 << 20;
    fp[1].max_bytes = 1 << 20;
    r = fetch(12, fp, 2, 0, 1, 1000, 0, 0, -1);
    n = kbat_count_records(fr_part(r, 0, 0)->Records, NULL, NULL);
    CU_ASSERT(n >= 20 && n < 200);
    CU_ASSERT_EQUAL(kbat_count_records(fr_part(r, 1, 0)->Records, NULL, NULL), 0);
    CU_ASSERT((int32_t)fr_part(r, 0, 0)->Records.len <= 1000);
    /* out of range */
    fp[0].offset = 1000;
    r = fetch(12, fp, 1, 0, 1, 1 << 20, 0, 0, -1);
    CU_ASSERT_EQUAL(fr_part(r, 0, 0)->ErrorCode, KP_ERR_OFFSET_OUT_OF_RANGE);
    /* at the LEO: fine and empty */
    fp[0].offset = 200;
    r = fetch(12, fp, 1, 0, 1, 1 << 20, 0, 0, -1);
    CU_ASSERT_EQUAL(fr_part(r, 0, 0)->ErrorCode, 0);
    CU_ASSERT_EQUAL(fr_part(r, 0, 0)->Records.len, 0);
    /* many small segments: each response holds one segment's batches; reading on from each
     * response's end reaches every record */
    {
        const char *segcfg[] = {"segment.bytes", "2000", NULL};
        fpart_t sp = {.topic = "seg", .current_epoch = -1, .last_epoch = -1};
        int total = 0, rounds = 0;
        CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "seg", 1, segcfg), 0);
        for (int i = 0; i < 40; i++)
            CU_ASSERT_EQUAL(produce_n("seg", 0, 10, KP_CODEC_NONE, &base), 0);
        while (sp.offset < 400 && rounds++ < 500) {
            int64_t last = -1;
            int got;
            r = fetch(12, &sp, 1, 0, 1, 1 << 20, 0, 0, -1);
            got = kbat_count_records(fr_part(r, 0, 0)->Records, NULL, &last);
            CU_ASSERT_FATAL(got > 0);
            total += got;
            sp.offset = last + 1;
        }
        CU_ASSERT_EQUAL(total, 400);
        CU_ASSERT(rounds > 1);
    }
    /* unknown partition and topic */
    fp[0].partition = 7;
    r = fetch(12, fp, 1, 0, 1, 1 << 20, 0, 0, -1);
    CU_ASSERT_EQUAL(fr_part(r, 7, 0)->ErrorCode, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
    down();
}

static void t_fetch_epochs(void)
{
    fpart_t fp = {.topic = "ep", .current_epoch = 5, .last_epoch = -1};
    kp_FetchResponse_t *r;
    kp_FetchResponse_PartitionData_t *p;
    int64_t base;
    int32_t ne, e;
    int16_t err;
    kp_uuid_t id;
    up(NULL);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "ep", 1, NULL), 0);
    id = topic_id("ep");
    CU_ASSERT_EQUAL(produce_n("ep", 0, 10, KP_CODEC_NONE, &base), 0);
    r = fetch(12, &fp, 1, 0, 1, 1 << 20, 0, 0, -1);
    CU_ASSERT_EQUAL(fr_part(r, 0, 0)->ErrorCode, KP_ERR_UNKNOWN_LEADER_EPOCH);
    CU_ASSERT_EQUAL(kb_meta_bump_epoch(B.svc->meta, &id, 0, 0, &ne), 0);
    CU_ASSERT_EQUAL(ne, 1);
    CU_ASSERT_EQUAL(produce_n("ep", 0, 5, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_EQUAL(base, 10);
    fp.current_epoch = 0;
    r = fetch(16, &fp, 1, 0, 1, 1 << 20, 0, 0, -1);
    p = fr_part(r, 0, 0);
    CU_ASSERT_EQUAL(p->ErrorCode, KP_ERR_FENCED_LEADER_EPOCH);
    CU_ASSERT_EQUAL(p->CurrentLeader.LeaderId, 1);
    CU_ASSERT_EQUAL(p->CurrentLeader.LeaderEpoch, 1);
    CU_ASSERT_EQUAL(r->NodeEndpoints.cnt, 1);
    /* LastFetchedEpoch 0 at offset 12: the log diverged at 10 */
    fp.current_epoch = 1;
    fp.last_epoch = 0;
    fp.offset = 12;
    r = fetch(12, &fp, 1, 0, 1, 1 << 20, 0, 0, -1);
    p = fr_part(r, 0, 0);
    CU_ASSERT_EQUAL(p->ErrorCode, 0);
    CU_ASSERT_EQUAL(p->DivergingEpoch.Epoch, 0);
    CU_ASSERT_EQUAL(p->DivergingEpoch.EndOffset, 10);
    CU_ASSERT_EQUAL(p->Records.len, 0);
    fp.last_epoch = 1;
    r = fetch(12, &fp, 1, 0, 1, 1 << 20, 0, 0, -1);
    p = fr_part(r, 0, 0);
    CU_ASSERT_EQUAL(p->DivergingEpoch.Epoch, -1);
    CU_ASSERT_EQUAL(kbat_count_records(p->Records, NULL, NULL), 5);
    /* ListOffsets and OffsetForLeaderEpoch see the same epochs */
    CU_ASSERT_EQUAL(list_offset("ep", 0, -1, 0, 4, &e, &err), 15);
    CU_ASSERT_EQUAL(e, 1);
    CU_ASSERT_EQUAL(list_offset("ep", 0, -2, 0, 4, &e, &err), 0);
    CU_ASSERT_EQUAL(e, 0);
    {
        kp_OffsetForLeaderEpochRequest_t rq;
        kp_OffsetForLeaderEpochResponse_t resp;
        kp_OffsetForLeaderEpochRequest_OffsetForLeaderTopic_t t;
        kp_OffsetForLeaderEpochRequest_OffsetForLeaderPartition_t pp[3];
        kp_OffsetForLeaderEpochRequest_init(&rq);
        kp_OffsetForLeaderEpochRequest_OffsetForLeaderTopic_init(&t);
        for (int i = 0; i < 3; i++) {
            kp_OffsetForLeaderEpochRequest_OffsetForLeaderPartition_init(&pp[i]);
            pp[i].CurrentLeaderEpoch = -1;
        }
        pp[0].LeaderEpoch = 0;
        pp[1].LeaderEpoch = 1;
        pp[2].LeaderEpoch = 7;
        t.Topic = S("ep");
        t.Partitions.v = pp;
        t.Partitions.cnt = 3;
        rq.Topics.v = &t;
        rq.Topics.cnt = 1;
        rq.ReplicaId = -1;
        for (int16_t v = 2; v <= 4; v++) {
            kp_OffsetForLeaderEpochResponse_init(&resp);
            CU_ASSERT_EQUAL_FATAL(
                kbat_call(g_fd, KP_APIKEY_OffsetForLeaderEpoch, v, &rq, &resp, &g_ar), 0);
            CU_ASSERT_EQUAL(resp.Topics.v[0].Partitions.v[0].LeaderEpoch, 0);
            CU_ASSERT_EQUAL(resp.Topics.v[0].Partitions.v[0].EndOffset, 10);
            CU_ASSERT_EQUAL(resp.Topics.v[0].Partitions.v[1].LeaderEpoch, 1);
            CU_ASSERT_EQUAL(resp.Topics.v[0].Partitions.v[1].EndOffset, 15);
            CU_ASSERT_EQUAL(resp.Topics.v[0].Partitions.v[2].LeaderEpoch, -1);
            CU_ASSERT_EQUAL(resp.Topics.v[0].Partitions.v[2].EndOffset, -1);
        }
    }
    /* the epoch survives a restart */
    restart();
    CU_ASSERT_EQUAL(list_offset("ep", 0, -1, 0, 4, &e, &err), 15);
    CU_ASSERT_EQUAL(e, 1);
    down();
}

static void t_list_offsets(void)
{
    int64_t base;
    int16_t err;
    int32_t e;
    up(NULL);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "lo", 1, NULL), 0);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(produce_n("lo", 0, 10, KP_CODEC_NONE, &base), 0);
    for (int16_t v = 1; v <= 11; v++) {
        CU_ASSERT_EQUAL(list_offset("lo", 0, -2, 0, v, NULL, &err), 0);
        CU_ASSERT_EQUAL(err, 0);
        CU_ASSERT_EQUAL(list_offset("lo", 0, -1, 0, v, &e, NULL), 30);
        CU_ASSERT_EQUAL(e, v >= 4 ? 0 : -1);
    }
    /* max timestamp: the last record (timestamps grow within our batches) */
    CU_ASSERT_EQUAL(list_offset("lo", 0, -3, 0, 7, NULL, NULL), 29);
    /* by timestamp: a very old one gives the first record, a future one none */
    CU_ASSERT_EQUAL(list_offset("lo", 0, 1, 0, 5, NULL, NULL), 0);
    CU_ASSERT_EQUAL(list_offset("lo", 0, INT64_MAX / 2, 0, 5, NULL, NULL), -1);
    CU_ASSERT_EQUAL(list_offset("lo", 0, -5, 0, 9, NULL, NULL), -1);
    list_offset("lo", 3, -1, 0, 5, NULL, &err);
    CU_ASSERT_EQUAL(err, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
    list_offset("x", 0, -1, 0, 5, NULL, &err);
    CU_ASSERT_EQUAL(err, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
    /* the same partition twice: INVALID_REQUEST for both, the others answered */
    {
        kp_ListOffsetsRequest_t rq;
        kp_ListOffsetsResponse_t resp;
        kp_ListOffsetsRequest_ListOffsetsTopic_t t[2];
        kp_ListOffsetsRequest_ListOffsetsPartition_t p[3];
        kp_ListOffsetsRequest_init(&rq);
        for (int i = 0; i < 2; i++) {
            kp_ListOffsetsRequest_ListOffsetsTopic_init(&t[i]);
            t[i].Name = S("lo");
        }
        for (int i = 0; i < 3; i++) {
            kp_ListOffsetsRequest_ListOffsetsPartition_init(&p[i]);
            p[i].Timestamp = -1;
        }
        p[1].PartitionIndex = 5;
        t[0].Partitions.v = p;
        t[0].Partitions.cnt = 2;
        t[1].Partitions.v = &p[2];
        t[1].Partitions.cnt = 1;
        rq.Topics.v = t;
        rq.Topics.cnt = 2;
        rq.ReplicaId = -1;
        kp_ListOffsetsResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_ListOffsets, 7, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.Topics.v[0].Partitions.v[0].ErrorCode, KP_ERR_INVALID_REQUEST);
        CU_ASSERT_EQUAL(resp.Topics.v[0].Partitions.v[1].ErrorCode,
                        KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
        CU_ASSERT_EQUAL(resp.Topics.v[1].Partitions.v[0].ErrorCode, KP_ERR_INVALID_REQUEST);
    }
    down();
}

static void t_delete_and_grow(void)
{
    kp_DeleteTopicsRequest_t rq;
    kp_DeleteTopicsResponse_t resp;
    kp_str_t names[2];
    kp_DeleteTopicsRequest_DeleteTopicState_t st[2];
    kp_uuid_t id, id2;
    int64_t base;
    char path[700];
    up(NULL);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "d1", 1, NULL), 0);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "d2", 1, NULL), 0);
    CU_ASSERT_EQUAL(produce_n("d1", 0, 5, KP_CODEC_NONE, &base), 0);
    id = topic_id("d1");
    /* v5 by name */
    kp_DeleteTopicsRequest_init(&rq);
    names[0] = S("d1");
    names[1] = S("nope");
    rq.TopicNames.v = names;
    rq.TopicNames.cnt = 2;
    kp_DeleteTopicsResponse_init(&resp);
    CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DeleteTopics, 5, &rq, &resp, &g_ar), 0);
    CU_ASSERT_EQUAL(resp.Responses.v[0].ErrorCode, 0);
    CU_ASSERT_EQUAL(resp.Responses.v[1].ErrorCode, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
    snprintf(path, sizeof(path), "%s/logs/d1-0", g_dir);
    CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
    /* re-created: a new id and an empty log */
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "d1", 1, NULL), 0);
    id2 = topic_id("d1");
    CU_ASSERT(memcmp(id.b, id2.b, 16) != 0);
    CU_ASSERT_EQUAL(list_offset("d1", 0, -1, 0, 5, NULL, NULL), 0);
    /* v6 by id */
    kp_DeleteTopicsRequest_init(&rq);
    kp_DeleteTopicsRequest_DeleteTopicState_init(&st[0]);
    kp_DeleteTopicsRequest_DeleteTopicState_init(&st[1]);
    st[0].Name = KP_STR_NULL;
    st[0].TopicId = topic_id("d2");
    st[1].Name = KP_STR_NULL;
    st[1].TopicId = id; /* the old incarnation */
    rq.Topics.v = st;
    rq.Topics.cnt = 2;
    kp_DeleteTopicsResponse_init(&resp);
    CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DeleteTopics, 6, &rq, &resp, &g_ar), 0);
    CU_ASSERT_EQUAL(resp.Responses.v[0].ErrorCode, 0);
    CU_ASSERT(streq(resp.Responses.v[0].Name, "d2"));
    CU_ASSERT_EQUAL(resp.Responses.v[1].ErrorCode, KP_ERR_UNKNOWN_TOPIC_ID);
    /* CreatePartitions */
    {
        kp_CreatePartitionsRequest_t crq;
        kp_CreatePartitionsResponse_t cresp;
        kp_CreatePartitionsRequest_CreatePartitionsTopic_t ct[2];
        kp_CreatePartitionsRequest_init(&crq);
        kp_CreatePartitionsRequest_CreatePartitionsTopic_init(&ct[0]);
        kp_CreatePartitionsRequest_CreatePartitionsTopic_init(&ct[1]);
        ct[0].Name = S("d1");
        ct[0].Count = 3;
        ct[0].Assignments.cnt = -1;
        ct[1].Name = S("none");
        ct[1].Count = 3;
        ct[1].Assignments.cnt = -1;
        crq.Topics.v = ct;
        crq.Topics.cnt = 2;
        crq.ValidateOnly = true;
        kp_CreatePartitionsResponse_init(&cresp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_CreatePartitions, 3, &crq, &cresp, &g_ar),
                              0);
        CU_ASSERT_EQUAL(cresp.Results.v[0].ErrorCode, 0);
        CU_ASSERT_EQUAL(cresp.Results.v[1].ErrorCode, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
        CU_ASSERT_EQUAL(produce_n("d1", 2, 1, KP_CODEC_NONE, &base),
                        KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
        crq.ValidateOnly = false;
        crq.Topics.cnt = 1;
        kp_CreatePartitionsResponse_init(&cresp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_CreatePartitions, 0, &crq, &cresp, &g_ar),
                              0);
        CU_ASSERT_EQUAL(cresp.Results.v[0].ErrorCode, 0);
        CU_ASSERT_EQUAL(produce_n("d1", 2, 1, KP_CODEC_NONE, &base), 0);
        ct[0].Count = 2;
        kp_CreatePartitionsResponse_init(&cresp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_CreatePartitions, 2, &crq, &cresp, &g_ar),
                              0);
        CU_ASSERT_EQUAL(cresp.Results.v[0].ErrorCode, KP_ERR_INVALID_PARTITIONS);
    }
    /* DeleteRecords */
    {
        kp_DeleteRecordsRequest_t drq;
        kp_DeleteRecordsResponse_t dresp;
        kp_DeleteRecordsRequest_DeleteRecordsTopic_t dt;
        kp_DeleteRecordsRequest_DeleteRecordsPartition_t dp[2];
        fpart_t fp = {.topic = "d1", .current_epoch = -1, .last_epoch = -1};
        for (int i = 0; i < 4; i++)
            CU_ASSERT_EQUAL(produce_n("d1", 0, 5, KP_CODEC_NONE, &base), 0);
        kp_DeleteRecordsRequest_init(&drq);
        kp_DeleteRecordsRequest_DeleteRecordsTopic_init(&dt);
        kp_DeleteRecordsRequest_DeleteRecordsPartition_init(&dp[0]);
        kp_DeleteRecordsRequest_DeleteRecordsPartition_init(&dp[1]);
        dp[0].PartitionIndex = 0;
        dp[0].Offset = 10;
        dp[1].PartitionIndex = 1;
        dp[1].Offset = 50;
        dt.Name = S("d1");
        dt.Partitions.v = dp;
        dt.Partitions.cnt = 2;
        drq.Topics.v = &dt;
        drq.Topics.cnt = 1;
        kp_DeleteRecordsResponse_init(&dresp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DeleteRecords, 0, &drq, &dresp, &g_ar), 0);
        CU_ASSERT_EQUAL(dresp.Topics.v[0].Partitions.v[0].ErrorCode, 0);
        CU_ASSERT_EQUAL(dresp.Topics.v[0].Partitions.v[0].LowWatermark, 10);
        CU_ASSERT_EQUAL(dresp.Topics.v[0].Partitions.v[1].ErrorCode, KP_ERR_OFFSET_OUT_OF_RANGE);
        CU_ASSERT_EQUAL(list_offset("d1", 0, -2, 0, 5, NULL, NULL), 10);
        fp.offset = 2;
        CU_ASSERT_EQUAL(fr_part(fetch(12, &fp, 1, 0, 1, 1 << 20, 0, 0, -1), 0, 0)->ErrorCode,
                        KP_ERR_OFFSET_OUT_OF_RANGE);
        dp[0].Offset = -1;
        dt.Partitions.cnt = 1;
        kp_DeleteRecordsResponse_init(&dresp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DeleteRecords, 2, &drq, &dresp, &g_ar), 0);
        CU_ASSERT_EQUAL(dresp.Topics.v[0].Partitions.v[0].LowWatermark, 20);
    }
    down();
    {
        const char *kv[] = {"delete.topic.enable=false", NULL};
        up(kv);
        CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "nd", 1, NULL), 0);
        kp_DeleteTopicsRequest_init(&rq);
        names[0] = S("nd");
        rq.TopicNames.v = names;
        rq.TopicNames.cnt = 1;
        kp_DeleteTopicsResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DeleteTopics, 4, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.Responses.v[0].ErrorCode, KP_ERR_TOPIC_DELETION_DISABLED);
        down();
    }
}

static kp_DescribeConfigsResponse_DescribeConfigsResult_t *
describe(int16_t ver, int8_t type, const char *name, const char *const *keys, bool syn, bool doc)
{
    kp_DescribeConfigsRequest_t rq;
    kp_DescribeConfigsResponse_t *resp = kp_arena_alloc(&g_ar, sizeof(*resp));
    kp_DescribeConfigsRequest_DescribeConfigsResource_t r;
    kp_str_t k[8];
    int n = 0;
    kp_DescribeConfigsRequest_init(&rq);
    kp_DescribeConfigsRequest_DescribeConfigsResource_init(&r);
    r.ResourceType = type;
    r.ResourceName = S(name);
    for (; keys && keys[n]; n++)
        k[n] = S(keys[n]);
    r.ConfigurationKeys.v = k;
    r.ConfigurationKeys.cnt = keys ? n : -1;
    rq.Resources.v = &r;
    rq.Resources.cnt = 1;
    rq.IncludeSynonyms = syn;
    rq.IncludeDocumentation = ver >= 3 && doc;
    kp_DescribeConfigsResponse_init(resp);
    CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DescribeConfigs, ver, &rq, resp, &g_ar), 0);
    return &resp->Results.v[0];
}

static kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *
dc_entry(kp_DescribeConfigsResponse_DescribeConfigsResult_t *r, const char *key)
{
    for (int32_t i = 0; i < r->Configs.cnt; i++)
        if (streq(r->Configs.v[i].Name, key))
            return &r->Configs.v[i];
    return NULL;
}

static int16_t incr_alter(int8_t type, const char *name, const char *key, int8_t op,
                          const char *value, bool validate_only)
{
    kp_IncrementalAlterConfigsRequest_t rq;
    kp_IncrementalAlterConfigsResponse_t resp;
    kp_IncrementalAlterConfigsRequest_AlterConfigsResource_t res;
    kp_IncrementalAlterConfigsRequest_AlterableConfig_t c;
    kp_IncrementalAlterConfigsRequest_init(&rq);
    kp_IncrementalAlterConfigsRequest_AlterConfigsResource_init(&res);
    kp_IncrementalAlterConfigsRequest_AlterableConfig_init(&c);
    res.ResourceType = type;
    res.ResourceName = S(name);
    c.Name = S(key);
    c.ConfigOperation = op;
    c.Value = value ? S(value) : KP_STR_NULL;
    res.Configs.v = &c;
    res.Configs.cnt = 1;
    rq.Resources.v = &res;
    rq.Resources.cnt = 1;
    rq.ValidateOnly = validate_only;
    kp_IncrementalAlterConfigsResponse_init(&resp);
    CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_IncrementalAlterConfigs, 1, &rq, &resp, &g_ar),
                          0);
    return resp.Responses.v[0].ErrorCode;
}

static void t_configs(void)
{
    kp_DescribeConfigsResponse_DescribeConfigsResult_t *r;
    kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *e;
    const char *cfg[] = {"retention.ms", "1234", NULL};
    const char *one[] = {"cleanup.policy", NULL};
    const char *kv[] = {"log.retention.hours=10", NULL};
    up(kv);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "cf", 1, cfg), 0);
    for (int16_t v = 1; v <= 4; v++) {
        r = describe(v, KB_RES_TOPIC, "cf", NULL, true, true);
        CU_ASSERT_EQUAL(r->ErrorCode, 0);
        CU_ASSERT(r->Configs.cnt >= 30);
        CU_ASSERT_PTR_NULL(dc_entry(r, "mirror.name"));
        e = dc_entry(r, "retention.ms");
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        CU_ASSERT(streq(e->Value, "1234"));
        CU_ASSERT_EQUAL(e->ConfigSource, KB_CS_TOPIC_CONFIG);
        CU_ASSERT(e->Synonyms.cnt >= 2);
        if (v >= 3) {
            CU_ASSERT_EQUAL(e->ConfigType, KB_TC_LONG);
            CU_ASSERT(e->Documentation.len > 0);
        }
        e = dc_entry(r, "segment.ms");
        CU_ASSERT(streq(e->Value, "604800000"));
        CU_ASSERT_EQUAL(e->ConfigSource, KB_CS_DEFAULT_CONFIG);
    }
    r = describe(4, KB_RES_TOPIC, "cf", one, false, false);
    CU_ASSERT_EQUAL(r->Configs.cnt, 1);
    CU_ASSERT_EQUAL(r->Configs.v[0].Synonyms.cnt, 0);
    r = describe(4, KB_RES_TOPIC, "nope", NULL, false, false);
    CU_ASSERT_EQUAL(r->ErrorCode, KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
    /* incremental */
    CU_ASSERT_EQUAL(
        incr_alter(KB_RES_TOPIC, "cf", "cleanup.policy", KB_CFGOP_APPEND, "compact", false), 0);
    r = describe(4, KB_RES_TOPIC, "cf", one, false, false);
    CU_ASSERT(streq(r->Configs.v[0].Value, "delete,compact"));
    CU_ASSERT_EQUAL(
        incr_alter(KB_RES_TOPIC, "cf", "cleanup.policy", KB_CFGOP_SUBTRACT, "delete", false), 0);
    r = describe(4, KB_RES_TOPIC, "cf", one, false, false);
    CU_ASSERT(streq(r->Configs.v[0].Value, "compact"));
    CU_ASSERT_EQUAL(incr_alter(KB_RES_TOPIC, "cf", "retention.ms", KB_CFGOP_APPEND, "1", false),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(incr_alter(KB_RES_TOPIC, "cf", "retention.ms", KB_CFGOP_SET, "x", false),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_EQUAL(incr_alter(KB_RES_TOPIC, "cf", "retention.ms", KB_CFGOP_SET, "99", true), 0);
    e = dc_entry(describe(4, KB_RES_TOPIC, "cf", NULL, false, false), "retention.ms");
    CU_ASSERT(streq(e->Value, "1234"));
    CU_ASSERT_EQUAL(incr_alter(KB_RES_TOPIC, "cf", "retention.ms", KB_CFGOP_DELETE, NULL, false),
                    0);
    e = dc_entry(describe(4, KB_RES_TOPIC, "cf", NULL, true, false), "retention.ms");
    CU_ASSERT(streq(e->Value, "36000000"));
    CU_ASSERT_EQUAL(e->ConfigSource, KB_CS_STATIC_BROKER_CONFIG);
    CU_ASSERT_EQUAL(incr_alter(KB_RES_TOPIC, "nope", "retention.ms", KB_CFGOP_SET, "1", false),
                    KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);
    /* the storage engine sees the new config */
    {
        kb_part_t *part;
        kb_log_config_t lc;
        CU_ASSERT_EQUAL(kb_meta_part(B.svc->meta, "cf", 0, &part), KB_META_OK);
        kb_log_get_config(part->log, &lc);
        CU_ASSERT_EQUAL(lc.cleanup_policy, KB_CLEANUP_COMPACT);
        CU_ASSERT_EQUAL(lc.retention_ms, 36000000);
        kb_part_release(part);
    }
    /* dynamic broker configs: cluster default affects topics without an override */
    CU_ASSERT_EQUAL(incr_alter(KB_RES_BROKER, "", "log.retention.ms", KB_CFGOP_SET, "5000", false),
                    0);
    e = dc_entry(describe(4, KB_RES_TOPIC, "cf", NULL, false, false), "retention.ms");
    CU_ASSERT(streq(e->Value, "5000"));
    CU_ASSERT_EQUAL(e->ConfigSource, KB_CS_DYNAMIC_DEFAULT_BROKER_CONFIG);
    r = describe(4, KB_RES_BROKER, "", NULL, false, false);
    CU_ASSERT_EQUAL(r->Configs.cnt, 1);
    CU_ASSERT_EQUAL(incr_alter(KB_RES_BROKER, "1", "log.retention.ms", KB_CFGOP_SET, "7000", false),
                    0);
    r = describe(4, KB_RES_BROKER, "1", NULL, true, true);
    CU_ASSERT_EQUAL(r->ErrorCode, 0);
    e = dc_entry(r, "log.retention.ms");
    CU_ASSERT(streq(e->Value, "7000"));
    CU_ASSERT_EQUAL(e->ConfigSource, KB_CS_DYNAMIC_BROKER_CONFIG);
    CU_ASSERT(!e->ReadOnly);
    e = dc_entry(r, "node.id");
    CU_ASSERT(e->ReadOnly);
    CU_ASSERT(streq(e->Value, "1"));
    CU_ASSERT_EQUAL(incr_alter(KB_RES_BROKER, "1", "node.id", KB_CFGOP_SET, "3", false),
                    KP_ERR_INVALID_REQUEST);
    CU_ASSERT_EQUAL(incr_alter(KB_RES_BROKER, "2", "log.retention.ms", KB_CFGOP_SET, "1", false),
                    KP_ERR_INVALID_REQUEST);
    r = describe(4, KB_RES_BROKER, "2", NULL, false, false);
    CU_ASSERT_EQUAL(r->ErrorCode, KP_ERR_INVALID_REQUEST);
    r = describe(4, 16, "x", NULL, false, false);
    CU_ASSERT_EQUAL(r->ErrorCode, KP_ERR_INVALID_REQUEST);
    /* AlterConfigs replaces the whole set */
    {
        kp_AlterConfigsRequest_t rq;
        kp_AlterConfigsResponse_t resp;
        kp_AlterConfigsRequest_AlterConfigsResource_t res;
        kp_AlterConfigsRequest_AlterableConfig_t c;
        kp_AlterConfigsRequest_init(&rq);
        kp_AlterConfigsRequest_AlterConfigsResource_init(&res);
        kp_AlterConfigsRequest_AlterableConfig_init(&c);
        res.ResourceType = KB_RES_TOPIC;
        res.ResourceName = S("cf");
        c.Name = S("segment.ms");
        c.Value = S("60000");
        res.Configs.v = &c;
        res.Configs.cnt = 1;
        rq.Resources.v = &res;
        rq.Resources.cnt = 1;
        kp_AlterConfigsResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_AlterConfigs, 2, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.Responses.v[0].ErrorCode, 0);
        r = describe(4, KB_RES_TOPIC, "cf", NULL, false, false);
        CU_ASSERT_EQUAL(dc_entry(r, "segment.ms")->ConfigSource, KB_CS_TOPIC_CONFIG);
        CU_ASSERT_EQUAL(dc_entry(r, "cleanup.policy")->ConfigSource, KB_CS_DEFAULT_CONFIG);
        c.Name = S("mirror.name");
        kp_AlterConfigsResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_AlterConfigs, 0, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.Responses.v[0].ErrorCode, KP_ERR_INVALID_CONFIG);
    }
    /* persisted */
    restart();
    e = dc_entry(describe(4, KB_RES_TOPIC, "cf", NULL, false, false), "retention.ms");
    CU_ASSERT(streq(e->Value, "7000"));
    down();
}

static void t_describe_cluster(void)
{
    kp_DescribeClusterRequest_t rq;
    kp_DescribeClusterResponse_t resp;
    up(NULL);
    for (int16_t v = 0; v <= 2; v++) {
        kp_DescribeClusterRequest_init(&rq);
        rq.IncludeClusterAuthorizedOperations = v == 1;
        kp_DescribeClusterResponse_init(&resp);
        CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DescribeCluster, v, &rq, &resp, &g_ar), 0);
        CU_ASSERT_EQUAL(resp.ErrorCode, 0);
        CU_ASSERT_EQUAL(resp.Brokers.cnt, 1);
        CU_ASSERT_EQUAL(resp.Brokers.v[0].Port, B.port);
        CU_ASSERT_EQUAL(resp.ControllerId, 1);
        CU_ASSERT(streq(resp.ClusterId, kb_meta_cluster_id(B.svc->meta)));
        CU_ASSERT_EQUAL(resp.ClusterAuthorizedOperations == INT32_MIN, v != 1);
    }
    kp_DescribeClusterRequest_init(&rq);
    rq.EndpointType = 2;
    kp_DescribeClusterResponse_init(&resp);
    CU_ASSERT_EQUAL_FATAL(kbat_call(g_fd, KP_APIKEY_DescribeCluster, 1, &rq, &resp, &g_ar), 0);
    CU_ASSERT_EQUAL(resp.ErrorCode, KP_ERR_MISMATCHED_ENDPOINT_TYPE);
    down();
}

static void t_restart(void)
{
    int64_t base;
    kp_uuid_t id;
    char cid[64];
    fpart_t fp = {.topic = "r", .current_epoch = -1, .last_epoch = -1};
    up(NULL);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "r", 2, NULL), 0);
    CU_ASSERT_EQUAL(produce_n("r", 1, 25, KP_CODEC_ZSTD, &base), 0);
    id = topic_id("r");
    snprintf(cid, sizeof(cid), "%s", kb_meta_cluster_id(B.svc->meta));
    restart();
    CU_ASSERT_STRING_EQUAL(kb_meta_cluster_id(B.svc->meta), cid);
    CU_ASSERT(!memcmp(topic_id("r").b, id.b, 16));
    fp.partition = 1;
    CU_ASSERT_EQUAL(
        kbat_count_records(fr_part(fetch(12, &fp, 1, 0, 1, 1 << 20, 0, 0, -1), 1, 0)->Records, NULL,
                           NULL),
        25);
    CU_ASSERT_EQUAL(produce_n("r", 1, 5, KP_CODEC_NONE, &base), 0);
    CU_ASSERT_EQUAL(base, 25);
    down();
}

/* ---- concurrency: producers and long-polling fetchers on the same partitions ------------- */

#define CC_PRODUCERS 4
#define CC_REQS      100
#define CC_RECS      5

typedef struct cc_arg_s {
    int port;
    int id;
    int errors;
    int64_t got; /* fetchers: records read */
} cc_arg_t;

static void *cc_producer(void *arg)
{
    cc_arg_t *a = arg;
    int fd = kbat_connect(a->port);
    kp_writer_t wr;
    kp_writer_init(&wr);
    kbat_batch(&wr, a->id % 2 ? KP_CODEC_LZ4 : KP_CODEC_NONE, CC_RECS, "cc", -1, -1, -1, false,
               false);
    for (int i = 0; i < CC_REQS && fd >= 0; i++)
        if (kbat_produce(fd, 9, "cc", i % 2, -1, &wr, NULL, NULL) != 0)
            a->errors++;
    kp_writer_free(&wr);
    if (fd >= 0)
        close(fd);
    else
        a->errors++;
    return NULL;
}

static void *cc_fetcher(void *arg)
{
    cc_arg_t *a = arg;
    int fd = kbat_connect(a->port);
    kp_arena_t ar;
    int64_t want = (int64_t)CC_PRODUCERS * CC_REQS / 2 * CC_RECS, deadline = kbat_now_ms() + 60000;
    int64_t offset = 0;
    int32_t sid = 0, epoch = 0;
    kp_arena_init(&ar, 0);
    while (fd >= 0 && a->got < want && kbat_now_ms() < deadline) {
        kp_FetchRequest_t rq;
        kp_FetchResponse_t resp;
        kp_FetchRequest_FetchTopic_t t;
        kp_FetchRequest_FetchPartition_t p;
        kp_FetchRequest_init(&rq);
        kp_FetchRequest_FetchTopic_init(&t);
        kp_FetchRequest_FetchPartition_init(&p);
        rq.ReplicaId = -1;
        rq.MaxWaitMs = 500;
        rq.MinBytes = 1;
        rq.MaxBytes = 1 << 20;
        rq.SessionId = sid;
        rq.SessionEpoch = epoch;
        t.Topic = S("cc");
        p.Partition = a->id;
        p.FetchOffset = offset;
        p.PartitionMaxBytes = 4096; /* several rounds */
        t.Partitions.v = &p;
        t.Partitions.cnt = 1;
        rq.Topics.v = &t;
        rq.Topics.cnt = 1;
        kp_FetchResponse_init(&resp);
        if (kbat_call(fd, KP_APIKEY_Fetch, 12, &rq, &resp, &ar) != 0 || resp.ErrorCode) {
            a->errors++;
            break;
        }
        sid = resp.SessionId;
        epoch = kb_fsess_next_epoch(epoch);
        for (int32_t i = 0; i < resp.Responses.cnt; i++)
            for (int32_t k = 0; k < resp.Responses.v[i].Partitions.cnt; k++) {
                int64_t first, last;
                int n =
                    kbat_count_records(resp.Responses.v[i].Partitions.v[k].Records, &first, &last);
                if (n < 0 || (n > 0 && first != offset)) {
                    a->errors++;
                    continue;
                }
                if (n > 0) {
                    a->got += n;
                    offset = last + 1;
                }
            }
        kp_arena_free(&ar);
        kp_arena_init(&ar, 0);
    }
    kp_arena_free(&ar);
    if (fd >= 0)
        close(fd);
    return NULL;
}

static void t_concurrency(void)
{
    pthread_t pt[CC_PRODUCERS], ft[2];
    cc_arg_t pa[CC_PRODUCERS], fa[2];
    up(NULL);
    CU_ASSERT_EQUAL(kbat_create_topic(g_fd, "cc", 2, NULL), 0);
    for (int i = 0; i < 2; i++) {
        fa[i] = (cc_arg_t){.port = B.port, .id = i};
        pthread_create(&ft[i], NULL, cc_fetcher, &fa[i]);
    }
    for (int i = 0; i < CC_PRODUCERS; i++) {
        pa[i] = (cc_arg_t){.port = B.port, .id = i};
        pthread_create(&pt[i], NULL, cc_producer, &pa[i]);
    }
    for (int i = 0; i < CC_PRODUCERS; i++) {
        pthread_join(pt[i], NULL);
        CU_ASSERT_EQUAL(pa[i].errors, 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(ft[i], NULL);
        CU_ASSERT_EQUAL(fa[i].errors, 0);
        CU_ASSERT_EQUAL(fa[i].got, (int64_t)CC_PRODUCERS * CC_REQS / 2 * CC_RECS);
    }
    CU_ASSERT_EQUAL(list_offset("cc", 0, -1, 0, 5, NULL, NULL),
                    (int64_t)CC_PRODUCERS * CC_REQS / 2 * CC_RECS);
    down();
}

int main(void)
{
    CU_pSuite s;
    unsigned fails;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("broker_api", NULL, NULL);
    CU_add_test(s, "Metadata", t_metadata);
    CU_add_test(s, "CreateTopics", t_create_topics);
    CU_add_test(s, "Produce and Fetch versions, codecs, recompression", t_produce_fetch);
    CU_add_test(s, "Produce validation", t_produce_errors);
    CU_add_test(s, "idempotent producers", t_idempotent);
    CU_add_test(s, "acks=0", t_acks0);
    CU_add_test(s, "transactions hook and read_committed", t_read_committed);
    CU_add_test(s, "read-only enforcement", t_read_only);
    CU_add_test(s, "Fetch long poll", t_long_poll);
    CU_add_test(s, "Fetch sessions", t_sessions);
    CU_add_test(s, "Fetch limits and errors", t_fetch_limits);
    CU_add_test(s, "leader epochs", t_fetch_epochs);
    CU_add_test(s, "ListOffsets", t_list_offsets);
    CU_add_test(s, "DeleteTopics, CreatePartitions, DeleteRecords", t_delete_and_grow);
    CU_add_test(s, "configs", t_configs);
    CU_add_test(s, "DescribeCluster", t_describe_cluster);
    CU_add_test(s, "restart", t_restart);
    CU_add_test(s, "concurrent producers and long-polling fetchers", t_concurrency);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
