/*
 * test_gproto.c -- every version of every group API against the real kbroker, spoken with our
 * own codec (label: smoke; also run with an ASan kbroker):
 *
 *   FindCoordinator 0-6 (group and transaction keys, batched keys, bad key types),
 *   JoinGroup 0-9 / SyncGroup 0-5 / Heartbeat 0-4 / LeaveGroup 0-5 (one group per JoinGroup
 *   version: KIP-394 from v4, protocol type/name from v7/v5, SkipAssignment field v9),
 *   OffsetCommit 2-10 (topic ids v10) / OffsetFetch 1-10 (all topics v2+, groups v8+, topic ids
 *   v10, require_stable v7+), ListGroups 0-5 (state and type filters), DescribeGroups 0-6
 *   (unknown groups: Dead before v6, GROUP_ID_NOT_FOUND from v6), DeleteGroups 0-3,
 *   a deferred JoinGroup whose client disconnects, and response ordering behind a deferred
 *   JoinGroup on one connection.
 *
 * Waiting is done with poll() on pipes, sockets and a pidfd, never with sleeps.
 *
 * usage: broker_group_proto PATH_TO_KBROKER
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kbt_client.h"
#include "kp_arena.h"
#include "kp_errcode.h"
#include "kp_msg.h"
#include "kp_msgs.h"
#include "kp_reader.h"
#include "kp_writer.h"

#define DEADLINE_MS 15000

static int failures;
static int checks;
static int port;
static int32_t corr;
static kp_arena_t ar;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

#define CHECK_ERR(got, want, ...)                                                                  \
    do {                                                                                           \
        int16_t g_ = (int16_t)(got), w_ = (int16_t)(want);                                         \
        checks++;                                                                                  \
        if (g_ != w_) {                                                                            \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: error %d (%s), expected %d (%s): ", __FILE__, __LINE__,   \
                    g_, kp_errcode_name(g_), w_, kp_errcode_name(w_));                             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

static kp_str_t S(const char *s)
{
    return kp_str(s);
}

static char *cstr(kp_str_t s)
{
    char *p = kp_arena_alloc(&ar, s.len > 0 ? (size_t)s.len + 1 : 1);
    if (s.len > 0)
        memcpy(p, s.ptr, (size_t)s.len);
    p[s.len > 0 ? s.len : 0] = '\0';
    return p;
}

/* ---- the broker process -----------------------------------------------------------------------
 */

static pid_t broker_pid = -1;
static int broker_pidfd = -1;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int start_broker(const char *kbroker, const char *dir)
{
    char cfg[512], logp[512], line[512] = "";
    int p[2];
    size_t n = 0;
    int64_t end = now_ms() + 60000;
    FILE *f;
    snprintf(cfg, sizeof(cfg), "%s/server.properties", dir);
    snprintf(logp, sizeof(logp), "%s/broker.log", dir);
    if (!(f = fopen(cfg, "w")))
        return -1;
    fprintf(f,
            "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs=%s/data\n"
            "offsets.topic.num.partitions=3\ngroup.initial.rebalance.delay.ms=0\n"
            "group.min.session.timeout.ms=1000\n",
            dir);
    fclose(f);
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    broker_pid = fork();
    if (broker_pid == 0) {
        int lfd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        dup2(lfd, 2);
        execl(kbroker, kbroker, "--config", cfg, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    broker_pidfd = (int)syscall(SYS_pidfd_open, broker_pid, 0);
    while (!strchr(line, '\n')) {
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        int64_t left = end - now_ms();
        ssize_t r;
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            break;
        r = read(p[0], line + n, sizeof(line) - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        line[n] = '\0';
    }
    close(p[0]);
    {
        const char *c = strstr(line, "127.0.0.1:");
        port = c ? atoi(c + 10) : 0;
    }
    return port > 0 ? 0 : -1;
}

static int stop_broker(void)
{
    struct pollfd pfd = {.fd = broker_pidfd, .events = POLLIN};
    int st = -1;
    kill(broker_pid, SIGTERM);
    if (poll(&pfd, 1, 30000) != 1) {
        kill(broker_pid, SIGKILL);
        waitpid(broker_pid, &st, 0);
        return -1;
    }
    waitpid(broker_pid, &st, 0);
    close(broker_pidfd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- requests ---------------------------------------------------------------------------------
 */

static int send_req(int fd, int16_t key, int16_t ver, const void *body)
{
    const kp_api_info_t *ai = kp_api_lookup(key);
    kp_RequestHeader_t h;
    kp_writer_t wr;
    int rc;
    kp_RequestHeader_init(&h);
    h.RequestApiKey = key;
    h.RequestApiVersion = ver;
    h.CorrelationId = ++corr;
    h.ClientId = S("kbg-proto");
    kp_writer_init(&wr);
    kp_write_int32(&wr, 0);
    kp_RequestHeader_encode(&wr, &h, kp_request_header_version(key, ver));
    if (kp_msg_encode(ai->req, &wr, body, ver) != 0) {
        fprintf(stderr, "cannot encode %s v%d\n", ai->name, ver);
        kp_writer_free(&wr);
        return -1;
    }
    kp_writer_patch_int32(&wr, 0, (int32_t)(wr.len - 4));
    rc = kbt_send_all(fd, wr.buf, wr.len);
    kp_writer_free(&wr);
    return rc == 0 ? corr : -1;
}

/* Read one response of @p key/@p ver into @p out (arrays in the arena). Its correlation id goes
 * to *@p got_corr. 0 or -1. */
static int recv_resp(int fd, int16_t key, int16_t ver, void *out, int32_t *got_corr)
{
    const kp_api_info_t *ai = kp_api_lookup(key);
    kp_ResponseHeader_t h;
    kp_reader_t rd;
    uint8_t *buf = NULL, *keep;
    size_t len = 0;
    if (kbt_recv_frame(fd, &buf, &len, DEADLINE_MS) != 0)
        return -1;
    keep = kp_arena_alloc(&ar, len ? len : 1); /* decoded views point into the frame */
    memcpy(keep, buf, len);
    free(buf);
    kp_reader_init(&rd, keep, len);
    kp_ResponseHeader_init(&h);
    if (kp_ResponseHeader_decode(&rd, &ar, &h, kp_response_header_version(key, ver)) != 0)
        return -1;
    *got_corr = h.CorrelationId;
    kp_msg_init(ai->resp, out);
    if (kp_msg_decode(ai->resp, &rd, &ar, out, ver) != 0 || kp_reader_remaining(&rd)) {
        fprintf(stderr, "cannot decode %s v%d response (%zu bytes left)\n", ai->name, ver,
                kp_reader_remaining(&rd));
        return -1;
    }
    return 0;
}

static int rpc(int fd, int16_t key, int16_t ver, const void *req, void *resp)
{
    int32_t c, got;
    if ((c = send_req(fd, key, ver, req)) < 0 || recv_resp(fd, key, ver, resp, &got) != 0)
        return -1;
    return got == c ? 0 : -1;
}

/* ---- helpers per API
 * ----------------------------------------------------------------------------- */

static kp_uuid_t create_topic(int fd, const char *name, int32_t parts)
{
    kp_CreateTopicsRequest_t rq;
    kp_CreateTopicsRequest_CreatableTopic_t t;
    kp_CreateTopicsResponse_t resp;
    kp_uuid_t id = {{0}};
    kp_CreateTopicsRequest_init(&rq);
    kp_CreateTopicsRequest_CreatableTopic_init(&t);
    t.Name = S(name);
    t.NumPartitions = parts;
    t.ReplicationFactor = 1;
    t.Assignments.cnt = 0;
    t.Configs.cnt = 0;
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    rq.TimeoutMs = 10000;
    CHECK(rpc(fd, KP_APIKEY_CreateTopics, 7, &rq, &resp) == 0, "CreateTopics");
    if (resp.Topics.cnt == 1) {
        CHECK_ERR(resp.Topics.v[0].ErrorCode, 0, "CreateTopics %s", name);
        id = resp.Topics.v[0].TopicId;
    }
    return id;
}

typedef struct jres_s {
    int16_t err;
    int32_t gen;
    char *member;
    char *leader;
    char *proto;
    int32_t nmembers;
} jres_t;

static void join_req(kp_JoinGroupRequest_t *rq, kp_JoinGroupRequest_JoinGroupRequestProtocol_t *p,
                     const char *group, const char *member)
{
    static const uint8_t meta[] = {0, 1, 0, 0, 0, 1, 0, 1, 't', 0, 0, 0, 0};
    kp_JoinGroupRequest_init(rq);
    kp_JoinGroupRequest_JoinGroupRequestProtocol_init(p);
    p->Name = S("range");
    p->Metadata = (kp_bytes_t){meta, sizeof(meta)};
    rq->GroupId = S(group);
    rq->SessionTimeoutMs = 10000;
    rq->RebalanceTimeoutMs = 10000;
    rq->MemberId = S(member);
    rq->ProtocolType = S("consumer");
    rq->Protocols.cnt = 1;
    rq->Protocols.v = p;
}

static jres_t join_resp(const kp_JoinGroupResponse_t *r)
{
    jres_t j = {.err = r->ErrorCode,
                .gen = r->GenerationId,
                .member = cstr(r->MemberId),
                .leader = cstr(r->Leader),
                .proto = cstr(r->ProtocolName),
                .nmembers = r->Members.cnt};
    return j;
}

static jres_t join(int fd, int16_t ver, const char *group, const char *member)
{
    kp_JoinGroupRequest_t rq;
    kp_JoinGroupRequest_JoinGroupRequestProtocol_t p;
    kp_JoinGroupResponse_t r;
    jres_t fail = {.err = -1};
    join_req(&rq, &p, group, member);
    if (rpc(fd, KP_APIKEY_JoinGroup, ver, &rq, &r) != 0)
        return fail;
    if (ver >= 7)
        CHECK(r.ErrorCode || kp_str_eq(r.ProtocolType, "consumer"), "JoinGroup v%d protocol type",
              ver);
    return join_resp(&r);
}

static int16_t sync_(int fd, int16_t ver, const char *group, int32_t gen, const char *member,
                     const char *assign_to, const char *ptype, const char *pname, char **assignment)
{
    kp_SyncGroupRequest_t rq;
    kp_SyncGroupRequest_SyncGroupRequestAssignment_t a;
    kp_SyncGroupResponse_t r;
    kp_SyncGroupRequest_init(&rq);
    rq.GroupId = S(group);
    rq.GenerationId = gen;
    rq.MemberId = S(member);
    rq.ProtocolType = ptype ? S(ptype) : KP_STR_NULL;
    rq.ProtocolName = pname ? S(pname) : KP_STR_NULL;
    rq.Assignments.cnt = 0;
    if (assign_to) {
        kp_SyncGroupRequest_SyncGroupRequestAssignment_init(&a);
        a.MemberId = S(assign_to);
        a.Assignment = (kp_bytes_t){(const uint8_t *)"ASSIGN", 6};
        rq.Assignments.cnt = 1;
        rq.Assignments.v = &a;
    }
    if (rpc(fd, KP_APIKEY_SyncGroup, ver, &rq, &r) != 0)
        return -1;
    if (assignment)
        *assignment = cstr((kp_str_t){(const char *)r.Assignment.ptr, r.Assignment.len});
    if (ver >= 5 && !r.ErrorCode)
        CHECK(kp_str_eq(r.ProtocolType, "consumer") && kp_str_eq(r.ProtocolName, "range"),
              "SyncGroup v%d protocol type/name", ver);
    return r.ErrorCode;
}

static int16_t heartbeat(int fd, int16_t ver, const char *group, int32_t gen, const char *member)
{
    kp_HeartbeatRequest_t rq;
    kp_HeartbeatResponse_t r;
    kp_HeartbeatRequest_init(&rq);
    rq.GroupId = S(group);
    rq.GenerationId = gen;
    rq.MemberId = S(member);
    return rpc(fd, KP_APIKEY_Heartbeat, ver, &rq, &r) == 0 ? r.ErrorCode : -1;
}

static int16_t leave(int fd, int16_t ver, const char *group, const char *member)
{
    kp_LeaveGroupRequest_t rq;
    kp_LeaveGroupRequest_MemberIdentity_t m;
    kp_LeaveGroupResponse_t r;
    kp_LeaveGroupRequest_init(&rq);
    rq.GroupId = S(group);
    kp_LeaveGroupRequest_MemberIdentity_init(&m);
    m.MemberId = S(member);
    if (ver < 3) {
        rq.MemberId = S(member);
    } else {
        rq.Members.cnt = 1;
        rq.Members.v = &m;
    }
    if (rpc(fd, KP_APIKEY_LeaveGroup, ver, &rq, &r) != 0)
        return -1;
    if (ver >= 3) {
        CHECK(r.Members.cnt == 1, "LeaveGroup v%d members", ver);
        if (r.Members.cnt == 1 && r.Members.v[0].ErrorCode)
            return r.Members.v[0].ErrorCode;
    }
    return r.ErrorCode;
}

static int16_t commit(int fd, int16_t ver, const char *group, int32_t gen, const char *member,
                      const char *topic, const kp_uuid_t *id, int32_t part, int64_t off)
{
    kp_OffsetCommitRequest_t rq;
    kp_OffsetCommitRequest_OffsetCommitRequestTopic_t t;
    kp_OffsetCommitRequest_OffsetCommitRequestPartition_t p;
    kp_OffsetCommitResponse_t r;
    kp_OffsetCommitRequest_init(&rq);
    kp_OffsetCommitRequest_OffsetCommitRequestTopic_init(&t);
    kp_OffsetCommitRequest_OffsetCommitRequestPartition_init(&p);
    rq.GroupId = S(group);
    rq.GenerationIdOrMemberEpoch = gen;
    rq.MemberId = S(member);
    t.Name = S(topic);
    if (id)
        t.TopicId = *id;
    p.PartitionIndex = part;
    p.CommittedOffset = off;
    p.CommittedLeaderEpoch = 4;
    p.CommittedMetadata = S("md");
    t.Partitions.cnt = 1;
    t.Partitions.v = &p;
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    if (rpc(fd, KP_APIKEY_OffsetCommit, ver, &rq, &r) != 0)
        return -1;
    CHECK(r.Topics.cnt == 1 && r.Topics.v[0].Partitions.cnt == 1, "OffsetCommit v%d shape", ver);
    if (ver >= 10)
        CHECK(r.Topics.cnt == 1 && !memcmp(&r.Topics.v[0].TopicId, id, 16),
              "OffsetCommit v10 echoes the topic id");
    else
        CHECK(r.Topics.cnt == 1 && kp_str_eq(r.Topics.v[0].Name, topic), "OffsetCommit v%d name",
              ver);
    return r.Topics.cnt == 1 && r.Topics.v[0].Partitions.cnt == 1
               ? r.Topics.v[0].Partitions.v[0].ErrorCode
               : -1;
}

/* OffsetFetch of one partition (@p topic or, v10, @p id); *off gets the offset. Returns the
 * partition's error (or the group's). */
static int16_t fetch(int fd, int16_t ver, const char *group, const char *topic, const kp_uuid_t *id,
                     int32_t part, bool stable, int64_t *off, int32_t *epoch)
{
    kp_OffsetFetchRequest_t rq;
    kp_OffsetFetchResponse_t r;
    int32_t pi = part;
    *off = -2;
    kp_OffsetFetchRequest_init(&rq);
    rq.RequireStable = stable;
    if (ver < 8) {
        kp_OffsetFetchRequest_OffsetFetchRequestTopic_t t;
        kp_OffsetFetchRequest_OffsetFetchRequestTopic_init(&t);
        t.Name = S(topic);
        t.PartitionIndexes.cnt = 1;
        t.PartitionIndexes.v = &pi;
        rq.GroupId = S(group);
        rq.Topics.cnt = 1;
        rq.Topics.v = &t;
        if (rpc(fd, KP_APIKEY_OffsetFetch, ver, &rq, &r) != 0)
            return -1;
        if (r.ErrorCode)
            return r.ErrorCode;
        if (r.Topics.cnt != 1 || r.Topics.v[0].Partitions.cnt != 1)
            return -1;
        *off = r.Topics.v[0].Partitions.v[0].CommittedOffset;
        *epoch = r.Topics.v[0].Partitions.v[0].CommittedLeaderEpoch;
        return r.Topics.v[0].Partitions.v[0].ErrorCode;
    } else {
        kp_OffsetFetchRequest_OffsetFetchRequestGroup_t g;
        kp_OffsetFetchRequest_OffsetFetchRequestTopics_t t;
        kp_OffsetFetchRequest_OffsetFetchRequestGroup_init(&g);
        kp_OffsetFetchRequest_OffsetFetchRequestTopics_init(&t);
        t.Name = S(topic);
        if (id)
            t.TopicId = *id;
        t.PartitionIndexes.cnt = 1;
        t.PartitionIndexes.v = &pi;
        g.GroupId = S(group);
        g.Topics.cnt = 1;
        g.Topics.v = &t;
        rq.Groups.cnt = 1;
        rq.Groups.v = &g;
        if (rpc(fd, KP_APIKEY_OffsetFetch, ver, &rq, &r) != 0 || r.Groups.cnt != 1)
            return -1;
        if (r.Groups.v[0].ErrorCode)
            return r.Groups.v[0].ErrorCode;
        if (r.Groups.v[0].Topics.cnt != 1 || r.Groups.v[0].Topics.v[0].Partitions.cnt != 1)
            return -1;
        *off = r.Groups.v[0].Topics.v[0].Partitions.v[0].CommittedOffset;
        *epoch = r.Groups.v[0].Topics.v[0].Partitions.v[0].CommittedLeaderEpoch;
        return r.Groups.v[0].Topics.v[0].Partitions.v[0].ErrorCode;
    }
}

/* ---- scenarios
 * ----------------------------------------------------------------------------------- */

static void t_find_coordinator(int fd)
{
    for (int16_t v = 0; v <= 6; v++) {
        kp_FindCoordinatorRequest_t rq;
        kp_FindCoordinatorResponse_t r;
        kp_str_t keys[3] = {S("g-a"), S(""), S("g-b")};
        kp_FindCoordinatorRequest_init(&rq);
        if (v < 4) {
            rq.Key = S("g-find");
        } else {
            rq.CoordinatorKeys.cnt = 3;
            rq.CoordinatorKeys.v = keys;
        }
        CHECK(rpc(fd, KP_APIKEY_FindCoordinator, v, &rq, &r) == 0, "FindCoordinator v%d", v);
        if (v < 4) {
            CHECK_ERR(r.ErrorCode, 0, "FindCoordinator v%d", v);
            CHECK(r.NodeId == 1 && r.Port == port && kp_str_eq(r.Host, "127.0.0.1"),
                  "FindCoordinator v%d endpoint %d %d", v, r.NodeId, r.Port);
            /* Kafka 4.4: Errors.NONE's name in v1-3 */
            CHECK(v == 0 || kp_str_eq(r.ErrorMessage, "NONE"), "FindCoordinator v%d message", v);
        } else {
            /* an empty group id has a coordinator too (Kafka 4.4); ErrorMessage "" */
            CHECK(r.Coordinators.cnt == 3, "FindCoordinator v%d: three coordinators", v);
            for (int32_t i = 0; i < r.Coordinators.cnt; i++)
                CHECK(r.Coordinators.v[i].ErrorCode == 0 && r.Coordinators.v[i].NodeId == 1 &&
                          r.Coordinators.v[i].Port == port &&
                          kp_str_eq(r.Coordinators.v[i].Key, i == 0   ? "g-a"
                                                             : i == 1 ? ""
                                                                      : "g-b") &&
                          kp_str_eq(r.Coordinators.v[i].ErrorMessage, ""),
                      "FindCoordinator v%d key %d", v, i);
        }
        if (v == 0)
            continue;
        /* transactional ids: this node too, the empty one included (Kafka 4.4 answers NONE);
         * key type 2+ is refused */
        rq.KeyType = 1;
        keys[2] = S("txn-1");
        if (v < 4)
            rq.Key = S("");
        CHECK(rpc(fd, KP_APIKEY_FindCoordinator, v, &rq, &r) == 0, "FindCoordinator v%d txn", v);
        if (v < 4) {
            CHECK_ERR(r.ErrorCode, 0, "FindCoordinator v%d empty transaction key", v);
            CHECK(r.NodeId == 1 && kp_str_eq(r.ErrorMessage, "NONE"),
                  "FindCoordinator v%d empty transaction key: node %d", v, r.NodeId);
        } else {
            CHECK(r.Coordinators.cnt == 3 && r.Coordinators.v[0].ErrorCode == 0 &&
                      r.Coordinators.v[1].ErrorCode == 0 && r.Coordinators.v[1].NodeId == 1 &&
                      r.Coordinators.v[2].ErrorCode == 0,
                  "FindCoordinator v%d transaction keys", v);
        }
        rq.KeyType = 2;
        if (v >= 4)
            rq.CoordinatorKeys.cnt = 1;
        CHECK(rpc(fd, KP_APIKEY_FindCoordinator, v, &rq, &r) == 0, "FindCoordinator v%d", v);
        CHECK_ERR(v < 4 ? r.ErrorCode : r.Coordinators.v[0].ErrorCode, KP_ERR_INVALID_REQUEST,
                  "FindCoordinator key type 2");
        /* a request that cannot be served at all keeps the error's description */
        CHECK((v < 4 ? r.ErrorMessage.len : r.Coordinators.v[0].ErrorMessage.len) > 0,
              "FindCoordinator v%d key type 2: no ErrorMessage", v);
    }
}

/* One group per JoinGroup version: join (KIP-394 from v4), sync, heartbeat, commit, fetch,
 * describe, leave; OffsetCommit/OffsetFetch versions follow the JoinGroup version over their
 * own ranges. */
static void t_group_versions(int fd, const char *topic, const kp_uuid_t *tid)
{
    for (int16_t v = 0; v <= 9; v++) {
        char group[64];
        int16_t sv = v > 5 ? 5 : v, hv = v > 4 ? 4 : v, lv = v > 5 ? 5 : v;
        int16_t cv = (int16_t)(2 + v * 8 / 9), fv = (int16_t)(1 + v);
        jres_t j;
        char *member, *assignment = NULL;
        int64_t off;
        int32_t epoch = -9;
        snprintf(group, sizeof(group), "pg-v%d", v);
        j = join(fd, v, group, "");
        if (v >= 4) {
            CHECK_ERR(j.err, KP_ERR_MEMBER_ID_REQUIRED, "JoinGroup v%d first join", v);
            CHECK(j.member && strlen(j.member) > 10, "JoinGroup v%d member id given", v);
            j = join(fd, v, group, j.member ? j.member : "");
        }
        CHECK_ERR(j.err, 0, "JoinGroup v%d", v);
        CHECK(j.gen == 1 && j.nmembers == 1 && j.leader && j.member && !strcmp(j.leader, j.member),
              "JoinGroup v%d: generation %d, %d members, leader %s", v, j.gen, j.nmembers,
              j.leader);
        CHECK(j.proto && !strcmp(j.proto, "range"), "JoinGroup v%d protocol", v);
        member = j.member ? j.member : "";
        if (sv >= 5)
            CHECK_ERR(sync_(fd, sv, group, 1, member, member, "consumer", "roundrobin", NULL),
                      KP_ERR_INCONSISTENT_GROUP_PROTOCOL, "SyncGroup v5 with another protocol");
        CHECK_ERR(sync_(fd, sv, group, 1, member, member, sv >= 5 ? "consumer" : NULL,
                        sv >= 5 ? "range" : NULL, &assignment),
                  0, "SyncGroup v%d", sv);
        CHECK(assignment && !strcmp(assignment, "ASSIGN"), "SyncGroup v%d assignment", sv);
        CHECK_ERR(heartbeat(fd, hv, group, 1, member), 0, "Heartbeat v%d", hv);
        CHECK_ERR(heartbeat(fd, hv, group, 2, member), KP_ERR_ILLEGAL_GENERATION, "Heartbeat v%d",
                  hv);
        CHECK_ERR(heartbeat(fd, hv, group, 1, "nobody"), KP_ERR_UNKNOWN_MEMBER_ID, "Heartbeat v%d",
                  hv);
        CHECK_ERR(commit(fd, cv, group, 1, member, topic, tid, 1, 100 + v), 0, "OffsetCommit v%d",
                  cv);
        CHECK_ERR(commit(fd, cv, group, 7, member, topic, tid, 1, 1), KP_ERR_ILLEGAL_GENERATION,
                  "OffsetCommit v%d stale generation", cv);
        CHECK_ERR(fetch(fd, fv, group, topic, tid, 1, false, &off, &epoch), 0, "OffsetFetch v%d",
                  fv);
        CHECK(off == 100 + v, "OffsetFetch v%d offset %lld", fv, (long long)off);
        CHECK(epoch == (fv >= 5 && cv >= 6 ? 4 : -1), "OffsetFetch v%d leader epoch %d", fv, epoch);
        CHECK_ERR(fetch(fd, fv, group, topic, tid, 2, false, &off, &epoch), 0, "OffsetFetch v%d",
                  fv);
        CHECK(off == -1, "OffsetFetch v%d of an uncommitted partition: %lld", fv, (long long)off);
        CHECK_ERR(leave(fd, lv, group, member), 0, "LeaveGroup v%d", lv);
        CHECK_ERR(leave(fd, lv, group, member), KP_ERR_UNKNOWN_MEMBER_ID, "LeaveGroup v%d again",
                  lv);
        CHECK_ERR(heartbeat(fd, hv, group, 1, member), KP_ERR_UNKNOWN_MEMBER_ID,
                  "Heartbeat v%d after leaving", hv);
    }
}

static void t_offsets(int fd, const char *topic, const kp_uuid_t *tid)
{
    kp_uuid_t bogus = {{9, 9, 9}};
    int64_t off;
    int32_t epoch;
    for (int16_t v = 2; v <= 10; v++) {
        CHECK_ERR(commit(fd, v, "pg-simple", -1, "", topic, tid, 0, v), 0, "simple commit v%d", v);
        CHECK_ERR(commit(fd, v, "pg-simple", -1, "", "no-such-topic", &bogus, 0, 1),
                  v >= 10 ? KP_ERR_UNKNOWN_TOPIC_ID : KP_ERR_UNKNOWN_TOPIC_OR_PARTITION,
                  "OffsetCommit v%d unknown topic", v);
        CHECK_ERR(commit(fd, v, "pg-simple", -1, "", topic, tid, 99, 1),
                  KP_ERR_UNKNOWN_TOPIC_OR_PARTITION, "OffsetCommit v%d partition 99", v);
        CHECK_ERR(commit(fd, v, "", -1, "", topic, tid, 0, 1), KP_ERR_INVALID_GROUP_ID,
                  "OffsetCommit v%d empty group", v);
        CHECK_ERR(commit(fd, v, "pg-nosuch", 3, "m", topic, tid, 0, 1),
                  v >= 9 ? KP_ERR_GROUP_ID_NOT_FOUND : KP_ERR_ILLEGAL_GENERATION,
                  "OffsetCommit v%d of an unknown group with a generation", v);
    }
    for (int16_t v = 1; v <= 10; v++) {
        CHECK_ERR(fetch(fd, v, "pg-simple", topic, tid, 0, v >= 7, &off, &epoch), 0,
                  "OffsetFetch v%d", v);
        CHECK(off == 10, "OffsetFetch v%d: %lld", v, (long long)off);
        if (v >= 10)
            CHECK_ERR(fetch(fd, v, "pg-simple", topic, &bogus, 0, false, &off, &epoch),
                      KP_ERR_UNKNOWN_TOPIC_ID, "OffsetFetch v10 unknown topic id");
        if (v >= 2)
            CHECK_ERR(fetch(fd, v, "", topic, tid, 0, false, &off, &epoch), KP_ERR_INVALID_GROUP_ID,
                      "OffsetFetch v%d empty group id", v);
    }
    /* every committed offset (null topics) and several groups in one request (v8+) */
    for (int16_t v = 2; v <= 10; v++) {
        kp_OffsetFetchRequest_t rq;
        kp_OffsetFetchResponse_t r;
        kp_OffsetFetchRequest_OffsetFetchRequestGroup_t g[2];
        kp_OffsetFetchRequest_init(&rq);
        for (int i = 0; i < 2; i++) {
            kp_OffsetFetchRequest_OffsetFetchRequestGroup_init(&g[i]);
            g[i].GroupId = S(i ? "pg-unknown" : "pg-simple");
            g[i].Topics.cnt = -1;
        }
        if (v < 8) {
            rq.GroupId = S("pg-simple");
            rq.Topics.cnt = -1;
        } else {
            rq.Groups.cnt = 2;
            rq.Groups.v = g;
        }
        CHECK(rpc(fd, KP_APIKEY_OffsetFetch, v, &rq, &r) == 0, "OffsetFetch v%d all", v);
        if (v < 8) {
            CHECK(r.ErrorCode == 0 && r.Topics.cnt == 1 && r.Topics.v[0].Partitions.cnt == 1 &&
                      r.Topics.v[0].Partitions.v[0].CommittedOffset == 10 &&
                      kp_str_eq(r.Topics.v[0].Name, topic),
                  "OffsetFetch v%d all offsets", v);
        } else {
            CHECK(r.Groups.cnt == 2 && r.Groups.v[0].Topics.cnt == 1 &&
                      r.Groups.v[0].Topics.v[0].Partitions.v[0].CommittedOffset == 10 &&
                      r.Groups.v[1].ErrorCode == 0 && r.Groups.v[1].Topics.cnt == 0,
                  "OffsetFetch v%d two groups", v);
            if (v >= 10 && r.Groups.cnt == 2 && r.Groups.v[0].Topics.cnt == 1)
                CHECK(!memcmp(&r.Groups.v[0].Topics.v[0].TopicId, tid, 16),
                      "OffsetFetch v10 topic id of all offsets");
        }
    }
}

static void t_list_describe_delete(int fd)
{
    jres_t j;
    char *m;
    /* a Stable group with one member */
    j = join(fd, 9, "pg-stable", "");
    j = join(fd, 9, "pg-stable", j.member ? j.member : "");
    m = j.member ? j.member : "";
    CHECK_ERR(sync_(fd, 5, "pg-stable", j.gen, m, m, NULL, NULL, NULL), 0, "SyncGroup");
    for (int16_t v = 0; v <= 5; v++) {
        kp_ListGroupsRequest_t rq;
        kp_ListGroupsResponse_t r;
        kp_str_t st = S("stable"), ty = S("consumer");
        int found = 0;
        kp_ListGroupsRequest_init(&rq);
        rq.StatesFilter.cnt = 0;
        rq.TypesFilter.cnt = 0;
        CHECK(rpc(fd, KP_APIKEY_ListGroups, v, &rq, &r) == 0, "ListGroups v%d", v);
        for (int32_t i = 0; i < r.Groups.cnt; i++) {
            if (kp_str_eq(r.Groups.v[i].GroupId, "pg-stable")) {
                found++;
                CHECK(kp_str_eq(r.Groups.v[i].ProtocolType, "consumer"), "ListGroups type");
                if (v >= 4)
                    CHECK(kp_str_eq(r.Groups.v[i].GroupState, "Stable"), "ListGroups v%d state", v);
                if (v >= 5)
                    CHECK(kp_str_eq(r.Groups.v[i].GroupType, "classic"), "ListGroups v5 type");
            }
            if (kp_str_eq(r.Groups.v[i].GroupId, "pg-simple"))
                CHECK(kp_str_eq(r.Groups.v[i].ProtocolType, ""), "simple group's protocol type");
        }
        CHECK(found == 1 && r.Groups.cnt >= 12, "ListGroups v%d: %d groups", v, r.Groups.cnt);
        if (v >= 4) {
            rq.StatesFilter.cnt = 1; /* case-insensitive */
            rq.StatesFilter.v = &st;
            CHECK(rpc(fd, KP_APIKEY_ListGroups, v, &rq, &r) == 0, "ListGroups v%d", v);
            CHECK(r.Groups.cnt == 1 && kp_str_eq(r.Groups.v[0].GroupId, "pg-stable"),
                  "ListGroups v%d state filter: %d", v, r.Groups.cnt);
        }
        if (v >= 5) {
            rq.StatesFilter.cnt = 0;
            rq.TypesFilter.cnt = 1;
            rq.TypesFilter.v = &ty;
            CHECK(rpc(fd, KP_APIKEY_ListGroups, v, &rq, &r) == 0 && r.Groups.cnt == 0,
                  "ListGroups v5 type filter consumer: %d", r.Groups.cnt);
        }
    }
    for (int16_t v = 0; v <= 6; v++) {
        kp_DescribeGroupsRequest_t rq;
        kp_DescribeGroupsResponse_t r;
        kp_str_t ids[3] = {S("pg-stable"), S("pg-none"), S("")};
        kp_DescribeGroupsRequest_init(&rq);
        rq.Groups.cnt = 3;
        rq.Groups.v = ids;
        rq.IncludeAuthorizedOperations = v >= 3;
        CHECK(rpc(fd, KP_APIKEY_DescribeGroups, v, &rq, &r) == 0 && r.Groups.cnt == 3,
              "DescribeGroups v%d", v);
        if (r.Groups.cnt != 3)
            continue;
        CHECK(r.Groups.v[0].ErrorCode == 0 && kp_str_eq(r.Groups.v[0].GroupState, "Stable") &&
                  kp_str_eq(r.Groups.v[0].ProtocolData, "range") && r.Groups.v[0].Members.cnt == 1,
              "DescribeGroups v%d stable group", v);
        if (r.Groups.v[0].Members.cnt == 1) {
            kp_DescribeGroupsResponse_DescribedGroupMember_t *dm = &r.Groups.v[0].Members.v[0];
            CHECK(kp_str_eq(dm->MemberId, m) && kp_str_eq(dm->ClientId, "kbg-proto") &&
                      kp_str_eq(dm->ClientHost, "/127.0.0.1") && dm->MemberAssignment.len == 6 &&
                      dm->MemberMetadata.len == 13,
                  "DescribeGroups v%d member", v);
        }
        if (v >= 3)
            CHECK(r.Groups.v[0].AuthorizedOperations == ((1 << 3) | (1 << 6) | (1 << 8)),
                  "DescribeGroups v%d authorized operations %d", v,
                  r.Groups.v[0].AuthorizedOperations);
        if (v >= 6)
            CHECK(r.Groups.v[1].ErrorCode == KP_ERR_GROUP_ID_NOT_FOUND &&
                      r.Groups.v[1].ErrorMessage.len > 0,
                  "DescribeGroups v6 unknown group");
        else
            CHECK(r.Groups.v[1].ErrorCode == 0 && kp_str_eq(r.Groups.v[1].GroupState, "Dead"),
                  "DescribeGroups v%d unknown group", v);
        CHECK_ERR(r.Groups.v[2].ErrorCode, KP_ERR_INVALID_GROUP_ID, "DescribeGroups empty id");
    }
    for (int16_t v = 0; v <= 3; v++) {
        kp_DeleteGroupsRequest_t rq;
        kp_DeleteGroupsResponse_t r;
        char simple[32];
        kp_str_t ids[3];
        snprintf(simple, sizeof(simple), "pg-del-%d", v);
        CHECK_ERR(commit(fd, 8, simple, -1, "", "pg-topic", NULL, 0, 1), 0, "commit");
        ids[0] = S("pg-stable");
        ids[1] = S(simple);
        ids[2] = S("pg-none");
        kp_DeleteGroupsRequest_init(&rq);
        rq.GroupsNames.cnt = 3;
        rq.GroupsNames.v = ids;
        CHECK(rpc(fd, KP_APIKEY_DeleteGroups, v, &rq, &r) == 0 && r.Results.cnt == 3,
              "DeleteGroups v%d", v);
        if (r.Results.cnt == 3) {
            CHECK_ERR(r.Results.v[0].ErrorCode, KP_ERR_NON_EMPTY_GROUP, "DeleteGroups non-empty");
            CHECK_ERR(r.Results.v[1].ErrorCode, 0, "DeleteGroups empty");
            CHECK_ERR(r.Results.v[2].ErrorCode, KP_ERR_GROUP_ID_NOT_FOUND, "DeleteGroups unknown");
        }
        {
            int64_t off;
            int32_t epoch;
            CHECK_ERR(fetch(fd, 8, simple, "pg-topic", NULL, 0, false, &off, &epoch), 0, "fetch");
            CHECK(off == -1, "offsets of a deleted group: %lld", (long long)off);
        }
    }
}

/* A second member's JoinGroup waits for the rebalance; its client goes away; the first member
 * rejoins: the join phase completes (the departed member still counts as joined, as in Kafka),
 * and nothing is sent to the closed connection. Then a pipelined Heartbeat behind a deferred
 * JoinGroup on one connection is answered after it. */
static void t_deferred(int fd)
{
    jres_t j1, j2;
    int fd2 = kbt_connect(port);
    kp_JoinGroupRequest_t rq;
    kp_JoinGroupRequest_JoinGroupRequestProtocol_t p;
    kp_HeartbeatRequest_t hb;
    kp_JoinGroupResponse_t jr;
    kp_HeartbeatResponse_t hr;
    int32_t c1, c2, got;
    char *m1;
    j1 = join(fd, 3, "pg-defer", "");
    m1 = j1.member ? j1.member : "";
    CHECK_ERR(sync_(fd, 5, "pg-defer", 1, m1, m1, NULL, NULL, NULL), 0, "SyncGroup");
    join_req(&rq, &p, "pg-defer", "");
    CHECK(send_req(fd2, KP_APIKEY_JoinGroup, 3, &rq) > 0, "deferred JoinGroup sent");
    /* the coordinator acts on that JoinGroup on a handler thread: heartbeat (each a round trip)
     * until the rebalance shows, with a deadline, then drop the second client */
    {
        int64_t end = now_ms() + DEADLINE_MS;
        int16_t e = 0;
        while (now_ms() < end &&
               (e = heartbeat(fd, 3, "pg-defer", 1, m1)) != KP_ERR_REBALANCE_IN_PROGRESS)
            ;
        CHECK_ERR(e, KP_ERR_REBALANCE_IN_PROGRESS, "the second member's JoinGroup is pending");
    }
    close(fd2);
    j2 = join(fd, 5, "pg-defer", m1);
    CHECK_ERR(j2.err, 0, "rejoin after the other client left");
    CHECK(j2.gen == 2 && j2.nmembers == 2, "generation %d with %d members", j2.gen, j2.nmembers);

    /* pipelining: a JoinGroup of a new group (deferred until the timer thread ends its initial
     * delay) and a Heartbeat behind it on the same connection: answered in order */
    join_req(&rq, &p, "pg-pipe", "");
    kp_HeartbeatRequest_init(&hb);
    hb.GroupId = S("pg-pipe");
    hb.GenerationId = 1;
    hb.MemberId = S("nobody");
    c1 = send_req(fd, KP_APIKEY_JoinGroup, 3, &rq);
    c2 = send_req(fd, KP_APIKEY_Heartbeat, 3, &hb);
    CHECK(recv_resp(fd, KP_APIKEY_JoinGroup, 3, &jr, &got) == 0 && got == c1 && jr.ErrorCode == 0,
          "pipelined JoinGroup answered first (corr %d/%d)", got, c1);
    CHECK(recv_resp(fd, KP_APIKEY_Heartbeat, 3, &hr, &got) == 0 && got == c2 &&
              hr.ErrorCode == KP_ERR_UNKNOWN_MEMBER_ID,
          "pipelined Heartbeat answered second (corr %d/%d)", got, c2);
}

int main(int argc, char **argv)
{
    char dir[] = "/tmp/kbgproto.XXXXXX";
    kp_uuid_t tid;
    int fd, rc;
    if (argc < 2) {
        fprintf(stderr, "usage: %s KBROKER\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (!mkdtemp(dir) || start_broker(argv[1], dir) != 0) {
        fprintf(stderr, "FAIL: kbroker did not start\n");
        return 1;
    }
    kp_arena_init(&ar, 256u << 20);
    fd = kbt_connect(port);
    CHECK(fd >= 0, "connect");
    tid = create_topic(fd, "pg-topic", 3);
    t_find_coordinator(fd);
    t_group_versions(fd, "pg-topic", &tid);
    t_offsets(fd, "pg-topic", &tid);
    t_list_describe_delete(fd);
    t_deferred(fd);
    close(fd);
    rc = stop_broker();
    CHECK(rc == 0, "kbroker exit status %d", rc);
    if (failures) {
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "tail -n 30 %s/broker.log >&2", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "(no broker log)\n");
    }
    {
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", dir);
    }
    kp_arena_free(&ar);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
