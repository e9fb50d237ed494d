/*
 * test_meta_crash.c -- kill -9 during metadata mutations of the real kbroker (label: robust).
 *
 * Rounds of: start build/bin/kbroker on a data dir (ephemeral port read from its readiness
 * line); check that every topic a CreateTopics response acknowledged in an earlier round is
 * there with the topic id that response gave and its retention.ms override (Metadata v12,
 * DescribeConfigs v4), and that every topic present is whole (both partitions, its config);
 * then create topics one by one, and after a random number of acknowledgements pipeline a few
 * more CreateTopics requests and SIGKILL the broker while they are being handled. A last start
 * checks the final state and stops the broker with SIGTERM. Waiting is poll() on pipes, sockets
 * and a pidfd, never sleeps.
 *
 * usage: broker_api_meta_crash PATH_TO_KBROKER
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kbat.h"
#include "kbt_client.h"
#include "kp_errcode.h"

#define DEADLINE_MS 20000
#define ROUNDS      3
#define MAX_TOPICS  512

static int failures;
static char logpath[700];

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

typedef struct acked_s {
    char name[32];
    kp_uuid_t id;
    char retention[32];
} acked_t;

static acked_t g_acked[MAX_TOPICS];
static int g_nacked;

static pid_t spawn(char *const argv[], int *outfd)
{
    int p[2];
    pid_t pid;
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        int lfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        dup2(lfd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    *outfd = p[0];
    return pid;
}

/* The listener port from the readiness line on the broker's stdout, or -1. */
static int wait_ready(int fd)
{
    static const char pfx[] = "kbroker started (node.id=1, listeners=PLAINTEXT://127.0.0.1:";
    char buf[8192];
    size_t got = 0;
    int64_t dl = kbat_now_ms() + DEADLINE_MS;
    while (kbat_now_ms() < dl && got < sizeof(buf) - 1) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t n;
        char *line;
        if (poll(&p, 1, (int)(dl - kbat_now_ms())) <= 0)
            break;
        n = read(fd, buf + got, sizeof(buf) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        line = strstr(buf, pfx);
        if (line && strchr(line, '\n'))
            return atoi(line + strlen(pfx));
    }
    fprintf(stderr, "no readiness line (see %s)\n", logpath);
    return -1;
}

static kp_str_t S(const char *s)
{
    return (kp_str_t){s, (int32_t)strlen(s)};
}

static void create_req(kp_CreateTopicsRequest_t *rq, kp_CreateTopicsRequest_CreatableTopic_t *t,
                       kp_CreateTopicsRequest_CreatableTopicConfig_t *c, const char *name,
                       const char *retention)
{
    kp_CreateTopicsRequest_init(rq);
    kp_CreateTopicsRequest_CreatableTopic_init(t);
    kp_CreateTopicsRequest_CreatableTopicConfig_init(c);
    t->Name = S(name);
    t->NumPartitions = 2;
    t->ReplicationFactor = 1;
    c->Name = S("retention.ms");
    c->Value = S(retention);
    t->Configs.v = c;
    t->Configs.cnt = 1;
    rq->Topics.v = t;
    rq->Topics.cnt = 1;
    rq->TimeoutMs = 10000;
}

/* retention.ms of @p topic through DescribeConfigs v4 into @p out ("" if absent). 0 or -1. */
static int describe_retention(int fd, const char *topic, char *out, size_t size)
{
    kp_DescribeConfigsRequest_t rq;
    kp_DescribeConfigsRequest_DescribeConfigsResource_t r;
    kp_DescribeConfigsResponse_t resp;
    kp_str_t key = S("retention.ms");
    kp_arena_t ar;
    int rc = -1;
    kp_DescribeConfigsRequest_init(&rq);
    kp_DescribeConfigsRequest_DescribeConfigsResource_init(&r);
    r.ResourceType = 2;
    r.ResourceName = S(topic);
    r.ConfigurationKeys.v = &key;
    r.ConfigurationKeys.cnt = 1;
    rq.Resources.v = &r;
    rq.Resources.cnt = 1;
    kp_arena_init(&ar, 0);
    kp_DescribeConfigsResponse_init(&resp);
    out[0] = '\0';
    if (kbat_call(fd, KP_APIKEY_DescribeConfigs, 4, &rq, &resp, &ar) == 0 &&
        resp.Results.cnt == 1 && resp.Results.v[0].ErrorCode == 0) {
        for (int32_t i = 0; i < resp.Results.v[0].Configs.cnt; i++) {
            const kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *c =
                &resp.Results.v[0].Configs.v[i];
            if (c->Name.len == 12 && !memcmp(c->Name.ptr, "retention.ms", 12) && c->Value.len >= 0)
                snprintf(out, size, "%.*s", (int)c->Value.len, c->Value.ptr);
        }
        rc = 0;
    }
    kp_arena_free(&ar);
    return rc;
}

/* Every acknowledged topic with its id and config; every topic whole. */
static void verify(int fd, int round)
{
    kp_MetadataRequest_t rq;
    kp_MetadataResponse_t resp;
    kp_arena_t ar;
    int found = 0;
    kp_MetadataRequest_init(&rq);
    rq.Topics.cnt = -1;
    kp_arena_init(&ar, 0);
    kp_MetadataResponse_init(&resp);
    CHECK(kbat_call(fd, KP_APIKEY_Metadata, 12, &rq, &resp, &ar) == 0, "Metadata v12");
    for (int32_t i = 0; i < resp.Topics.cnt; i++) {
        const kp_MetadataResponse_MetadataResponseTopic_t *t = &resp.Topics.v[i];
        char name[64], ret[32];
        snprintf(name, sizeof(name), "%.*s", (int)t->Name.len, t->Name.ptr);
        CHECK(t->ErrorCode == 0 && t->Partitions.cnt == 2,
              "round %d: topic %s is not whole (error %d, %d partitions)", round, name,
              t->ErrorCode, t->Partitions.cnt);
        CHECK(describe_retention(fd, name, ret, sizeof(ret)) == 0 && ret[0],
              "round %d: topic %s has no retention.ms", round, name);
        for (int k = 0; k < g_nacked; k++) {
            if (strcmp(g_acked[k].name, name))
                continue;
            found++;
            CHECK(!memcmp(g_acked[k].id.b, t->TopicId.b, 16), "round %d: %s has another id", round,
                  name);
            CHECK(!strcmp(g_acked[k].retention, ret), "round %d: %s retention.ms %s, want %s",
                  round, name, ret, g_acked[k].retention);
        }
    }
    CHECK(found == g_nacked, "round %d: %d of %d acknowledged topics are there", round, found,
          g_nacked);
    kp_arena_free(&ar);
}

/* Create topics until @p n are acknowledged, then pipeline a few more and SIGKILL. */
static void create_and_kill(int fd, pid_t pid, int round, int n)
{
    char name[32], ret[32];
    int i = 0;
    for (; i < n && g_nacked < MAX_TOPICS - 8; i++) {
        kp_CreateTopicsRequest_t rq;
        kp_CreateTopicsRequest_CreatableTopic_t t;
        kp_CreateTopicsRequest_CreatableTopicConfig_t c;
        kp_CreateTopicsResponse_t resp;
        kp_arena_t ar;
        snprintf(name, sizeof(name), "c%d-%d", round, i);
        snprintf(ret, sizeof(ret), "%d", 100000 + round * 1000 + i);
        create_req(&rq, &t, &c, name, ret);
        kp_arena_init(&ar, 0);
        kp_CreateTopicsResponse_init(&resp);
        if (kbat_call(fd, KP_APIKEY_CreateTopics, 7, &rq, &resp, &ar) == 0 &&
            resp.Topics.cnt == 1 && resp.Topics.v[0].ErrorCode == 0) {
            acked_t *a = &g_acked[g_nacked++];
            snprintf(a->name, sizeof(a->name), "%s", name);
            a->id = resp.Topics.v[0].TopicId;
            snprintf(a->retention, sizeof(a->retention), "%s", ret);
        } else {
            CHECK(0, "CreateTopics %s failed", name);
        }
        kp_arena_free(&ar);
    }
    for (int k = 0; k < 4; k++, i++) {
        kp_CreateTopicsRequest_t rq;
        kp_CreateTopicsRequest_CreatableTopic_t t;
        kp_CreateTopicsRequest_CreatableTopicConfig_t c;
        snprintf(name, sizeof(name), "c%d-%d", round, i);
        snprintf(ret, sizeof(ret), "%d", 100000 + round * 1000 + i);
        create_req(&rq, &t, &c, name, ret);
        CHECK(kbat_send(fd, KP_APIKEY_CreateTopics, 7, 1000 + k, NULL, &rq) == 0, "send");
    }
    kill(pid, SIGKILL);
    CHECK(kbt_wait_exit(pid, DEADLINE_MS) == 128 + SIGKILL, "kbroker did not die of SIGKILL");
}

int main(int argc, char **argv)
{
    char dir[512], cfgpath[700];
    FILE *f;
    unsigned seed = (unsigned)time(NULL);
    if (argc != 2) {
        fprintf(stderr, "usage: %s KBROKER\n", argv[0]);
        return 2;
    }
    if (kbat_tmpdir(dir, sizeof(dir)) != 0)
        return 2;
    snprintf(logpath, sizeof(logpath), "%s/kbroker.log", dir);
    snprintf(cfgpath, sizeof(cfgpath), "%s/server.properties", dir);
    f = fopen(cfgpath, "w");
    if (!f)
        return 2;
    fprintf(f, "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs=%s/logs\n", dir);
    fclose(f);
    fprintf(stderr, "seed %u, data in %s\n", seed, dir);
    for (int round = 0; round <= ROUNDS && !failures; round++) {
        char *args[] = {argv[1], "--config", cfgpath, NULL};
        int out = -1, port, fd;
        pid_t pid = spawn(args, &out);
        CHECK(pid > 0, "spawn %s", argv[1]);
        if (pid <= 0)
            break;
        port = wait_ready(out);
        CHECK(port > 0, "round %d: kbroker did not start", round);
        if (port <= 0) {
            kill(pid, SIGKILL);
            kbt_wait_exit(pid, DEADLINE_MS);
            close(out);
            break;
        }
        fd = kbat_connect(port);
        CHECK(fd >= 0, "connect");
        verify(fd, round);
        if (round < ROUNDS) {
            create_and_kill(fd, pid, round, 3 + (int)(rand_r(&seed) % 8));
        } else {
            kill(pid, SIGTERM);
            CHECK(kbt_wait_exit(pid, DEADLINE_MS) == 0, "kbroker did not stop cleanly on SIGTERM");
        }
        close(fd);
        close(out);
    }
    fprintf(stderr, "%d topics acknowledged; %s\n", g_nacked, failures ? "FAILED" : "ok");
    if (!failures)
        kbat_rmrf(dir);
    return failures ? 1 : 0;
}
