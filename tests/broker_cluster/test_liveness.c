/*
 * test_liveness.c -- a three-process kbroker cluster (node 1 broker,controller with a
 * CONTROLLER listener; nodes 2 and 3 broker-only, registering with it): every broker appears,
 * unfenced, in DescribeCluster and Metadata with the port it really listens on; kill -9 of a
 * broker fences it once broker.session.timeout.ms passed (not before); its restart registers
 * it again; kill -9 of the controller leaves the brokers serving, and after the controller's
 * restart they register again by themselves; SIGTERM of a broker is a controlled shutdown
 * (exit 0). Waiting is polling with deadlines, never sleeping.
 *
 * usage: broker_cluster_liveness KBROKER
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kbat.h"
#include "kp_errcode.h"

#define DEADLINE_MS  20000
#define HEARTBEAT_MS 200
#define SESSION_MS   1500
#define CLUSTER_ID   "kbrokerClusterTest0001"

static int failures;
static char g_dir[512];
static const char *g_kbroker;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

typedef struct node_s {
    int id;
    pid_t pid;
    int out;
    int port;  /* PLAINTEXT */
    int cport; /* CONTROLLER (node 1) */
} node_t;

static node_t g_nodes[4];
static int g_cport; /* the controller's port, fixed after its first start */

static int pidfd_open_(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

static int wait_exit(pid_t pid, int ms)
{
    int pfd = pidfd_open_(pid), st;
    struct pollfd p = {.fd = pfd, .events = POLLIN};
    if (pfd < 0)
        return -1;
    if (poll(&p, 1, ms) <= 0) {
        close(pfd);
        return -1;
    }
    close(pfd);
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The port of listener @p name in the readiness line @p line, or -1. */
static int line_port(const char *line, const char *name)
{
    char pat[64];
    const char *p;
    snprintf(pat, sizeof(pat), "%s://127.0.0.1:", name);
    p = strstr(line, pat);
    return p ? atoi(p + strlen(pat)) : -1;
}

static int write_config(const node_t *n, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f,
            "node.id=%d\nlog.dirs=%s/n%d\ncluster.id=" CLUSTER_ID "\n"
            "broker.heartbeat.interval.ms=%d\nbroker.session.timeout.ms=%d\n"
            "controller.listener.names=CONTROLLER\n"
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
            "num.network.threads=1\nnum.io.threads=2\nlog.cleaner.enable=false\n",
            n->id, g_dir, n->id, HEARTBEAT_MS, SESSION_MS);
    if (n->id == 1)
        fprintf(f,
                "process.roles=broker,controller\n"
                "listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d\n",
                n->port > 0 ? n->port : 0, g_cport > 0 ? g_cport : 0);
    else
        fprintf(f,
                "process.roles=broker\nlisteners=PLAINTEXT://127.0.0.1:%d\n"
                "controller.quorum.voters=1@127.0.0.1:%d\n",
                n->port > 0 ? n->port : 0, g_cport);
    return fclose(f);
}

/* Start node @p id (the ports it had before, if any); 0 or -1. */
static int start_node(int id)
{
    node_t *n = &g_nodes[id];
    char cfg[700], logp[700], buf[8192];
    int p[2];
    size_t got = 0;
    int64_t dl;

    n->id = id;
    snprintf(cfg, sizeof(cfg), "%s/server-%d.properties", g_dir, id);
    snprintf(logp, sizeof(logp), "%s/kbroker-%d.log", g_dir, id);
    if (write_config(n, cfg) != 0 || pipe2(p, O_CLOEXEC) != 0)
        return -1;
    n->pid = fork();
    if (n->pid == 0) {
        int lfd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
        char *args[] = {(char *)g_kbroker, "--config", cfg, NULL};
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        dup2(lfd, 2);
        execv(args[0], args);
        _exit(127);
    }
    close(p[1]);
    n->out = p[0];
    dl = kbat_now_ms() + DEADLINE_MS;
    while (kbat_now_ms() < dl && got < sizeof(buf) - 1) {
        struct pollfd pf = {.fd = n->out, .events = POLLIN};
        ssize_t r;
        char *line;
        if (poll(&pf, 1, (int)(dl - kbat_now_ms())) <= 0)
            break;
        r = read(n->out, buf + got, sizeof(buf) - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        buf[got] = '\0';
        line = strstr(buf, "kbroker started (");
        if (line && strchr(line, '\n')) {
            n->port = line_port(line, "PLAINTEXT");
            if (id == 1)
                g_cport = n->cport = line_port(line, "CONTROLLER");
            return n->port > 0 ? 0 : -1;
        }
    }
    fprintf(stderr, "node %d did not start (see %s)\n", id, logp);
    return -1;
}

static void kill_node(int id, int sig, int expect_status)
{
    node_t *n = &g_nodes[id];
    int st;
    kill(n->pid, sig);
    st = wait_exit(n->pid, DEADLINE_MS);
    if (expect_status >= 0)
        CHECK(st == expect_status, "node %d exited with %d after signal %d, expected %d", id, st,
              sig, expect_status);
    close(n->out);
    n->pid = 0;
}

typedef struct view_s {
    int nbrokers;
    int id[8], port[8];
    bool fenced[8];
    int controller_id;
} view_t;

/* DescribeCluster v2 (with fenced brokers) on node @p via; 0 or -1. */
static int describe(int via, view_t *v)
{
    kp_DescribeClusterRequest_t rq;
    kp_DescribeClusterResponse_t resp;
    kp_arena_t ar;
    int fd = kbat_connect(g_nodes[via].port), rc = -1;

    memset(v, 0, sizeof(*v));
    if (fd < 0)
        return -1;
    kp_arena_init(&ar, 0);
    kp_DescribeClusterRequest_init(&rq);
    rq.IncludeFencedBrokers = true;
    if (kbat_call(fd, KP_APIKEY_DescribeCluster, 2, &rq, &resp, &ar) == 0 && resp.ErrorCode == 0) {
        for (int32_t i = 0; i < resp.Brokers.cnt && i < 8; i++) {
            v->id[i] = resp.Brokers.v[i].BrokerId;
            v->port[i] = resp.Brokers.v[i].Port;
            v->fenced[i] = resp.Brokers.v[i].IsFenced;
        }
        v->nbrokers = resp.Brokers.cnt;
        v->controller_id = resp.ControllerId;
        rc = 0;
    }
    kp_arena_free(&ar);
    close(fd);
    return rc;
}

/* The brokers Metadata v12 on node @p via lists (ids into @p ids); count or -1. */
static int metadata_brokers(int via, int *ids, int *ports, int max)
{
    kp_MetadataRequest_t rq;
    kp_MetadataResponse_t resp;
    kp_arena_t ar;
    int fd = kbat_connect(g_nodes[via].port), n = -1;

    if (fd < 0)
        return -1;
    kp_arena_init(&ar, 0);
    kp_MetadataRequest_init(&rq);
    rq.Topics.cnt = 0;
    if (kbat_call(fd, KP_APIKEY_Metadata, 12, &rq, &resp, &ar) == 0) {
        n = resp.Brokers.cnt;
        for (int32_t i = 0; i < resp.Brokers.cnt && i < max; i++) {
            ids[i] = resp.Brokers.v[i].NodeId;
            ports[i] = resp.Brokers.v[i].Port;
        }
    }
    kp_arena_free(&ar);
    close(fd);
    return n;
}

typedef struct tview_s {
    int16_t err;
    kp_uuid_t id;
    int nparts;
    int leader[8], nreplicas[8], nisr[8];
    int isr[8][4];
} tview_t;

/* CreateTopics v7 on node @p via: @p parts partitions, @p rf replicas; the error code. */
static int16_t create_topic_rf(int via, const char *name, int32_t parts, int16_t rf)
{
    kp_CreateTopicsRequest_t rq;
    kp_CreateTopicsResponse_t resp;
    kp_CreateTopicsRequest_CreatableTopic_t t;
    kp_arena_t ar;
    int16_t ec = -100;
    int fd = kbat_connect(g_nodes[via].port);
    if (fd < 0)
        return ec;
    kp_CreateTopicsRequest_init(&rq);
    kp_CreateTopicsRequest_CreatableTopic_init(&t);
    t.Name = (kp_str_t){name, (int32_t)strlen(name)};
    t.NumPartitions = parts;
    t.ReplicationFactor = rf;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    rq.TimeoutMs = 10000;
    kp_arena_init(&ar, 0);
    if (kbat_call(fd, KP_APIKEY_CreateTopics, 7, &rq, &resp, &ar) == 0 && resp.Topics.cnt == 1)
        ec = resp.Topics.v[0].ErrorCode;
    kp_arena_free(&ar);
    close(fd);
    return ec;
}

/* Topic @p name as Metadata v12 on node @p via shows it; 0 (tv->err may be set) or -1. */
static int metadata_topic(int via, const char *name, tview_t *tv)
{
    kp_MetadataRequest_t rq;
    kp_MetadataResponse_t resp;
    kp_MetadataRequest_MetadataRequestTopic_t t;
    kp_arena_t ar;
    int fd = kbat_connect(g_nodes[via].port), rc = -1;

    memset(tv, 0, sizeof(*tv));
    if (fd < 0)
        return -1;
    kp_arena_init(&ar, 0);
    kp_MetadataRequest_init(&rq);
    kp_MetadataRequest_MetadataRequestTopic_init(&t);
    t.Name = (kp_str_t){name, (int32_t)strlen(name)};
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    rq.AllowAutoTopicCreation = false;
    if (kbat_call(fd, KP_APIKEY_Metadata, 12, &rq, &resp, &ar) == 0 && resp.Topics.cnt == 1) {
        const kp_MetadataResponse_MetadataResponseTopic_t *mt = &resp.Topics.v[0];
        tv->err = mt->ErrorCode;
        tv->id = mt->TopicId;
        tv->nparts = mt->Partitions.cnt;
        for (int32_t i = 0; i < mt->Partitions.cnt && i < 8; i++) {
            int32_t k = mt->Partitions.v[i].PartitionIndex;
            if (k < 0 || k >= 8)
                continue;
            tv->leader[k] = mt->Partitions.v[i].LeaderId;
            tv->nreplicas[k] = mt->Partitions.v[i].ReplicaNodes.cnt;
            tv->nisr[k] = mt->Partitions.v[i].IsrNodes.cnt;
            for (int32_t j = 0; j < mt->Partitions.v[i].IsrNodes.cnt && j < 4; j++)
                tv->isr[k][j] = mt->Partitions.v[i].IsrNodes.v[j];
        }
        rc = 0;
    }
    kp_arena_free(&ar);
    close(fd);
    return rc;
}

/* Poll node @p via until it knows topic @p name as node 1 does (same id, partitions, leaders,
 * replica and ISR counts). */
static void wait_topic_like_controller(int via, const char *name)
{
    int64_t dl = kbat_now_ms() + DEADLINE_MS;
    tview_t want, got;
    struct pollfd none = {.fd = -1};
    CHECK(metadata_topic(1, name, &want) == 0 && want.err == 0 && want.nparts > 0,
          "node 1 knows topic %s", name);
    while (kbat_now_ms() < dl) {
        if (metadata_topic(via, name, &got) == 0 && got.err == 0 && got.nparts == want.nparts &&
            !memcmp(&got.id, &want.id, sizeof(want.id)) &&
            !memcmp(got.leader, want.leader, sizeof(want.leader)) &&
            !memcmp(got.nreplicas, want.nreplicas, sizeof(want.nreplicas)) &&
            !memcmp(got.nisr, want.nisr, sizeof(want.nisr)))
            return;
        poll(&none, 0, 20); /* pacing of the polling loop */
    }
    CHECK(0, "node %d does not show topic %s as the controller does (err %d, %d partitions)", via,
          name, got.err, got.nparts);
}

/* CreatePartitions v3 through node @p via: @p count partitions. The error code. */
static int16_t create_partitions(int via, const char *name, int32_t count)
{
    kp_CreatePartitionsRequest_t rq;
    kp_CreatePartitionsResponse_t resp;
    kp_CreatePartitionsRequest_CreatePartitionsTopic_t t;
    kp_arena_t ar;
    int16_t ec = -100;
    int fd = kbat_connect(g_nodes[via].port);
    if (fd < 0)
        return ec;
    kp_CreatePartitionsRequest_init(&rq);
    kp_CreatePartitionsRequest_CreatePartitionsTopic_init(&t);
    t.Name = (kp_str_t){name, (int32_t)strlen(name)};
    t.Count = count;
    t.Assignments.cnt = -1;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    rq.TimeoutMs = 10000;
    kp_arena_init(&ar, 0);
    if (kbat_call(fd, KP_APIKEY_CreatePartitions, 3, &rq, &resp, &ar) == 0 && resp.Results.cnt == 1)
        ec = resp.Results.v[0].ErrorCode;
    kp_arena_free(&ar);
    close(fd);
    return ec;
}

/* IncrementalAlterConfigs v1 through node @p via: set topic config @p key. The error code. */
static int16_t set_topic_config(int via, const char *topic, const char *key, const char *value)
{
    kp_IncrementalAlterConfigsRequest_t rq;
    kp_IncrementalAlterConfigsResponse_t resp;
    kp_IncrementalAlterConfigsRequest_AlterConfigsResource_t r;
    kp_IncrementalAlterConfigsRequest_AlterableConfig_t c;
    kp_arena_t ar;
    int16_t ec = -100;
    int fd = kbat_connect(g_nodes[via].port);
    if (fd < 0)
        return ec;
    kp_IncrementalAlterConfigsRequest_init(&rq);
    kp_IncrementalAlterConfigsRequest_AlterConfigsResource_init(&r);
    kp_IncrementalAlterConfigsRequest_AlterableConfig_init(&c);
    c.Name = (kp_str_t){key, (int32_t)strlen(key)};
    c.ConfigOperation = 0;
    c.Value = (kp_str_t){value, (int32_t)strlen(value)};
    r.ResourceType = 2;
    r.ResourceName = (kp_str_t){topic, (int32_t)strlen(topic)};
    r.Configs.v = &c;
    r.Configs.cnt = 1;
    rq.Resources.v = &r;
    rq.Resources.cnt = 1;
    kp_arena_init(&ar, 0);
    if (kbat_call(fd, KP_APIKEY_IncrementalAlterConfigs, 1, &rq, &resp, &ar) == 0 &&
        resp.Responses.cnt == 1)
        ec = resp.Responses.v[0].ErrorCode;
    kp_arena_free(&ar);
    close(fd);
    return ec;
}

/* Poll DescribeConfigs v4 on node @p via until topic config @p key is @p want. */
static bool wait_topic_config(int via, const char *topic, const char *key, const char *want)
{
    int64_t dl = kbat_now_ms() + DEADLINE_MS;
    struct pollfd none = {.fd = -1};
    while (kbat_now_ms() < dl) {
        kp_DescribeConfigsRequest_t rq;
        kp_DescribeConfigsResponse_t resp;
        kp_DescribeConfigsRequest_DescribeConfigsResource_t r;
        kp_str_t k = {key, (int32_t)strlen(key)};
        kp_arena_t ar;
        bool ok = false;
        int fd = kbat_connect(g_nodes[via].port);
        kp_DescribeConfigsRequest_init(&rq);
        kp_DescribeConfigsRequest_DescribeConfigsResource_init(&r);
        r.ResourceType = 2;
        r.ResourceName = (kp_str_t){topic, (int32_t)strlen(topic)};
        r.ConfigurationKeys.v = &k;
        r.ConfigurationKeys.cnt = 1;
        rq.Resources.v = &r;
        rq.Resources.cnt = 1;
        kp_arena_init(&ar, 0);
        if (fd >= 0 && kbat_call(fd, KP_APIKEY_DescribeConfigs, 4, &rq, &resp, &ar) == 0 &&
            resp.Results.cnt == 1 && resp.Results.v[0].ErrorCode == 0) {
            for (int32_t i = 0; i < resp.Results.v[0].Configs.cnt; i++) {
                const kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *c =
                    &resp.Results.v[0].Configs.v[i];
                if (c->Value.len == (int32_t)strlen(want) &&
                    !memcmp(c->Value.ptr, want, strlen(want)))
                    ok = true;
            }
        }
        kp_arena_free(&ar);
        if (fd >= 0)
            close(fd);
        if (ok)
            return true;
        poll(&none, 0, 50); /* pacing of the polling loop */
    }
    return false;
}

/* InitProducerId v4 (idempotent producer) on node @p via: the producer id, or -1. */
static int64_t init_pid(int via)
{
    kp_InitProducerIdRequest_t rq;
    kp_InitProducerIdResponse_t resp;
    kp_arena_t ar;
    int64_t pid = -1;
    int fd = kbat_connect(g_nodes[via].port);
    if (fd < 0)
        return -1;
    kp_InitProducerIdRequest_init(&rq);
    rq.TransactionalId.len = -1;
    rq.TransactionalId.ptr = NULL;
    rq.TransactionTimeoutMs = 60000;
    rq.ProducerId = -1;
    rq.ProducerEpoch = -1;
    kp_arena_init(&ar, 0);
    if (kbat_call(fd, KP_APIKEY_InitProducerId, 4, &rq, &resp, &ar) == 0 && resp.ErrorCode == 0)
        pid = resp.ProducerId;
    kp_arena_free(&ar);
    close(fd);
    return pid;
}

/* True if broker @p id leads or is in the ISR of a partition of @p tv. */
static bool topic_uses(const tview_t *tv, int id)
{
    for (int k = 0; k < tv->nparts && k < 8; k++) {
        if (tv->leader[k] == id)
            return true;
        for (int j = 0; j < tv->nisr[k] && j < 4; j++)
            if (tv->isr[k][j] == id)
                return true;
    }
    return false;
}

/* Poll node @p via until topic @p name neither has broker @p id as leader nor in an ISR, and
 * every partition has a leader. */
static bool wait_topic_without(int via, const char *name, int id)
{
    int64_t dl = kbat_now_ms() + DEADLINE_MS;
    tview_t tv;
    struct pollfd none = {.fd = -1};
    while (kbat_now_ms() < dl) {
        if (metadata_topic(via, name, &tv) == 0 && tv.err == 0 && tv.nparts > 0 &&
            !topic_uses(&tv, id)) {
            bool led = true;
            for (int k = 0; k < tv.nparts && k < 8; k++)
                led = led && tv.leader[k] >= 1 && tv.nreplicas[k] == 3 && tv.nisr[k] == 2;
            if (led)
                return true;
        }
        poll(&none, 0, 20); /* pacing of the polling loop */
    }
    return false;
}

/* The state of broker @p id in @p v: 1 unfenced, 0 fenced, -1 absent. */
static int state_of(const view_t *v, int id)
{
    for (int i = 0; i < v->nbrokers && i < 8; i++)
        if (v->id[i] == id)
            return v->fenced[i] ? 0 : 1;
    return -1;
}

/* Poll DescribeCluster on node @p via until broker i has state want[i] (i = 1..3; 2 = any).
 * Returns the ms it took, or -1 on timeout (with the last view printed). */
static int64_t wait_states(int via, int w1, int w2, int w3)
{
    int want[4] = {0, w1, w2, w3};
    int64_t t0 = kbat_now_ms(), dl = t0 + DEADLINE_MS;
    view_t v;
    struct pollfd none = {.fd = -1};
    while (kbat_now_ms() < dl) {
        bool ok = describe(via, &v) == 0;
        for (int id = 1; ok && id <= 3; id++)
            ok = want[id] == 2 || state_of(&v, id) == want[id];
        if (ok)
            return kbat_now_ms() - t0;
        poll(&none, 0, 20); /* pacing of the polling loop, not synchronisation */
    }
    fprintf(stderr, "view of node %d:", via);
    for (int i = 0; i < v.nbrokers && i < 8; i++)
        fprintf(stderr, " %d%s", v.id[i], v.fenced[i] ? "(fenced)" : "");
    fprintf(stderr, " (wanted %d %d %d)\n", w1, w2, w3);
    return -1;
}

static void check_ports(int via)
{
    view_t v;
    CHECK(describe(via, &v) == 0, "DescribeCluster on node %d", via);
    for (int i = 0; i < v.nbrokers && i < 8; i++) {
        int id = v.id[i];
        CHECK(id >= 1 && id <= 3 && v.port[i] == g_nodes[id].port,
              "broker %d listed with port %d, it listens on %d", id, v.port[i],
              id >= 1 && id <= 3 ? g_nodes[id].port : -1);
    }
    CHECK(state_of(&v, v.controller_id) == 1, "ControllerId %d is not a live broker",
          v.controller_id);
}

int main(int argc, char **argv)
{
    int ids[8], ports[8], n;
    int64_t took;

    if (argc != 2) {
        fprintf(stderr, "usage: %s KBROKER\n", argv[0]);
        return 2;
    }
    g_kbroker = argv[1];
    if (kbat_tmpdir(g_dir, sizeof(g_dir)) != 0)
        return 2;
    fprintf(stderr, "data and logs in %s\n", g_dir);

    /* 1. the controller, then two brokers registering with it */
    CHECK(start_node(1) == 0 && g_cport > 0, "start node 1");
    CHECK(start_node(2) == 0, "start node 2");
    CHECK(start_node(3) == 0, "start node 3");
    if (failures)
        goto out;
    CHECK(wait_states(1, 1, 1, 1) >= 0, "all three brokers registered and unfenced");
    check_ports(1);
    /* the registrations are metadata records: every broker lists every broker */
    CHECK(wait_states(2, 1, 1, 1) >= 0, "node 2 lists all three brokers");
    CHECK(wait_states(3, 1, 1, 1) >= 0, "node 3 lists all three brokers");
    check_ports(2);
    check_ports(3);
    n = metadata_brokers(1, ids, ports, 8);
    CHECK(n == 3, "Metadata on node 1 lists %d brokers, expected 3", n);
    for (int i = 0; i < n && i < 8; i++)
        CHECK(ids[i] >= 1 && ids[i] <= 3 && ports[i] == g_nodes[ids[i]].port,
              "Metadata broker %d port %d", ids[i], ports[i]);

    /* 1b. metadata propagation: a topic created on the controller reaches both brokers with
     *     the same id, partitions, leaders, replicas and ISR; a broker-only node does not make
     *     metadata changes itself */
    {
        int fd = kbat_connect(g_nodes[1].port);
        static const char *const cfgkv[] = {"retention.ms", "123456", NULL};
        CHECK(fd >= 0 && kbat_create_topic(fd, "cluster-a", 3, cfgkv) == 0,
              "CreateTopics on the controller");
        if (fd >= 0)
            close(fd);
        wait_topic_like_controller(2, "cluster-a");
        wait_topic_like_controller(3, "cluster-a");
        /* replication factor 3 over the three brokers, leaders striped; 4 is refused */
        {
            tview_t tv;
            int led[4] = {0};
            CHECK(create_topic_rf(1, "cluster-r3", 3, 3) == 0, "CreateTopics RF 3");
            CHECK(create_topic_rf(1, "cluster-r4", 1, 4) == KP_ERR_INVALID_REPLICATION_FACTOR,
                  "CreateTopics RF 4 with three brokers: INVALID_REPLICATION_FACTOR");
            CHECK(metadata_topic(1, "cluster-r3", &tv) == 0 && tv.nparts == 3, "cluster-r3");
            for (int k = 0; k < tv.nparts && k < 3; k++) {
                CHECK(tv.nreplicas[k] == 3 && tv.nisr[k] == 3,
                      "cluster-r3-%d: %d replicas, %d in sync", k, tv.nreplicas[k], tv.nisr[k]);
                if (tv.leader[k] >= 1 && tv.leader[k] <= 3)
                    led[tv.leader[k]]++;
            }
            CHECK(led[1] == 1 && led[2] == 1 && led[3] == 1,
                  "each broker leads one partition of cluster-r3 (%d %d %d)", led[1], led[2],
                  led[3]);
            wait_topic_like_controller(2, "cluster-r3");
        }
        /* producer ids: node 2 and 3 take blocks from the controller (AllocateProducerIds), so
         * ids never collide across brokers */
        {
            int64_t p1 = init_pid(1), p2 = init_pid(2), p3 = init_pid(3), p2b = init_pid(2);
            CHECK(p1 >= 0 && p2 >= 0 && p3 >= 0 && p2b >= 0,
                  "InitProducerId on every node (%lld %lld %lld %lld)", (long long)p1,
                  (long long)p2, (long long)p3, (long long)p2b);
            CHECK(p1 != p2 && p1 != p3 && p2 != p3 && p2b != p1 && p2b != p2 && p2b != p3,
                  "producer ids are distinct across brokers");
        }
        /* CreatePartitions and a config change through node 2: forwarded, assigned over the
         * brokers, seen everywhere */
        {
            tview_t tv;
            CHECK(create_partitions(2, "cluster-r3", 5) == 0, "CreatePartitions through node 2");
            CHECK(metadata_topic(1, "cluster-r3", &tv) == 0 && tv.nparts == 5,
                  "cluster-r3 has 5 partitions on the controller (%d)", tv.nparts);
            for (int k = 3; k < tv.nparts && k < 5; k++)
                CHECK(tv.nreplicas[k] == 3, "new partition cluster-r3-%d has %d replicas", k,
                      tv.nreplicas[k]);
            wait_topic_like_controller(3, "cluster-r3");
            CHECK(set_topic_config(2, "cluster-a", "retention.ms", "7777777") == 0,
                  "IncrementalAlterConfigs through node 2");
            CHECK(wait_topic_config(1, "cluster-a", "retention.ms", "7777777"),
                  "the config change on the controller");
            CHECK(wait_topic_config(3, "cluster-a", "retention.ms", "7777777"),
                  "the config change on node 3");
        }
        /* CreateTopics through broker-only node 3: forwarded to the controller (Envelope) */
        fd = kbat_connect(g_nodes[3].port);
        CHECK(fd >= 0 && kbat_create_topic(fd, "cluster-b", 2, NULL) == 0,
              "CreateTopics through broker-only node 3");
        if (fd >= 0)
            close(fd);
        wait_topic_like_controller(3, "cluster-b");
        wait_topic_like_controller(2, "cluster-b");
    }

    /* 2. kill -9 of broker 3: fenced after the session timeout, not before */
    kill_node(3, SIGKILL, -1);
    took = wait_states(1, 1, 1, 0);
    fprintf(stderr, "broker 3 fenced %lld ms after kill -9\n", (long long)took);
    CHECK(took >= 0, "broker 3 fenced after kill -9");
    CHECK(took >= SESSION_MS - HEARTBEAT_MS - 100,
          "broker 3 fenced after %lld ms, before the %d ms session timeout", (long long)took,
          SESSION_MS);
    n = metadata_brokers(1, ids, ports, 8);
    CHECK(n == 2, "Metadata lists %d brokers with broker 3 fenced, expected 2", n);
    CHECK(wait_states(2, 1, 1, 0) >= 0, "node 2 sees broker 3 fenced");
    /* clean election: broker 3 leads nothing and left every ISR, on the controller and as
     * broker 2 applied it */
    CHECK(wait_topic_without(1, "cluster-r3", 3), "leadership moved off fenced broker 3");
    wait_topic_like_controller(2, "cluster-r3");

    /* 3. a topic created while broker 3 is down; its restart (a new incarnation, the same
     *    port) registers it again, it still has the earlier topic and fetches the new one */
    {
        int fd = kbat_connect(g_nodes[1].port);
        CHECK(fd >= 0 && kbat_create_topic(fd, "cluster-c", 2, NULL) == 0,
              "CreateTopics on the controller while broker 3 is down");
        if (fd >= 0)
            close(fd);
    }
    CHECK(start_node(3) == 0, "restart node 3");
    CHECK(wait_states(1, 1, 1, 1) >= 0, "broker 3 back after its restart");
    check_ports(1);
    wait_topic_like_controller(3, "cluster-a");
    wait_topic_like_controller(3, "cluster-c");
    /* the leaders (on node 1 through its own controller listener, on node 2 through its
     * channel) take broker 3 back into the ISR once it caught up (AlterPartition) */
    {
        int64_t dl = kbat_now_ms() + DEADLINE_MS;
        tview_t tv;
        bool full = false;
        struct pollfd none = {.fd = -1};
        while (kbat_now_ms() < dl && !full) {
            full = metadata_topic(1, "cluster-r3", &tv) == 0 && tv.nparts == 5;
            for (int k = 0; full && k < 5; k++)
                full = tv.nisr[k] == 3;
            if (!full)
                poll(&none, 0, 50); /* pacing of the polling loop */
        }
        CHECK(full, "broker 3 back in the ISR of every partition of cluster-r3 (%d %d %d %d %d)",
              tv.nisr[0], tv.nisr[1], tv.nisr[2], tv.nisr[3], tv.nisr[4]);
    }

    /* 4. kill -9 of the controller: the brokers keep serving; after its restart they
     *    register again by themselves */
    kill_node(1, SIGKILL, -1);
    n = metadata_brokers(2, ids, ports, 8);
    CHECK(n >= 1, "broker 2 serves Metadata while the controller is down (%d)", n);
    {
        /* a change attempted meanwhile fails fast with a retriable error (once the channel
         * noticed: poll, the first attempts may still wait for the controller) */
        int64_t dl = kbat_now_ms() + DEADLINE_MS, t0;
        int16_t ec = -100;
        struct pollfd none = {.fd = -1};
        while (kbat_now_ms() < dl && ec != KP_ERR_NOT_CONTROLLER) {
            int fd = kbat_connect(g_nodes[2].port);
            t0 = kbat_now_ms();
            ec = fd >= 0 ? kbat_create_topic(fd, "cluster-down", 1, NULL) : -100;
            if (fd >= 0)
                close(fd);
            if (ec != KP_ERR_NOT_CONTROLLER)
                poll(&none, 0, 50); /* pacing of the polling loop */
            else
                CHECK(kbat_now_ms() - t0 < 2000, "NOT_CONTROLLER took %lld ms",
                      (long long)(kbat_now_ms() - t0));
        }
        CHECK(ec == KP_ERR_NOT_CONTROLLER,
              "CreateTopics with the controller down answers NOT_CONTROLLER (got %d)", ec);
    }
    CHECK(start_node(1) == 0, "restart the controller on port %d", g_cport);
    took = wait_states(1, 1, 1, 1);
    fprintf(stderr, "brokers registered again %lld ms after the controller's restart\n",
            (long long)took);
    CHECK(took >= 0, "brokers registered again with the restarted controller");
    check_ports(1);
    wait_topic_like_controller(2, "cluster-c");
    {
        tview_t tv;
        CHECK(metadata_topic(1, "cluster-down", &tv) == 0 &&
                  tv.err == KP_ERR_UNKNOWN_TOPIC_OR_PARTITION,
              "the change refused while the controller was down did not happen (%d)", tv.err);
        /* a client retries the retriable NOT_CONTROLLER until the broker reaches the
         * controller again */
        int64_t dl = kbat_now_ms() + DEADLINE_MS;
        int16_t ec = -100;
        struct pollfd none = {.fd = -1};
        while (kbat_now_ms() < dl &&
               (ec = create_topic_rf(2, "cluster-down", 1, 3)) == KP_ERR_NOT_CONTROLLER)
            poll(&none, 0, 50); /* pacing of the retries */
        CHECK(ec == 0, "CreateTopics through node 2 works again once the controller is back (%d)",
              ec);
        wait_topic_like_controller(3, "cluster-down");
    }

    /* 5. SIGTERM of broker 2: controlled shutdown, exit 0, then fenced */
    kill_node(2, SIGTERM, 0);
    /* its leaderships and ISR memberships moved before it went (ShouldShutDown comes after
     * the moves are committed): no waiting, the controller's image shows it at once */
    {
        tview_t tv;
        CHECK(metadata_topic(1, "cluster-r3", &tv) == 0 && tv.nparts == 5 && !topic_uses(&tv, 2),
              "controlled shutdown moved leadership and ISR membership off broker 2");
    }
    CHECK(wait_states(1, 1, 0, 1) >= 0, "broker 2 fenced after its shutdown");

out:
    for (int id = 1; id <= 3; id++)
        if (g_nodes[id].pid > 0)
            kill_node(id, SIGTERM, 0);
    fprintf(stderr, "%s\n", failures ? "FAILED" : "ok");
    if (!failures)
        kbat_rmrf(g_dir);
    return failures ? 1 : 0;
}
