/*
 * test_repl_e2e.c -- replication between kbroker processes (docs/broker.md "Replication",
 * design C4): a three-process cluster (node 1 broker,controller; 2 and 3 broker-only), a topic
 * with replication factor 3 and min.insync.replicas=2. On the partition led by a broker-only
 * node: acks=all produce, the three replicas' segment files byte-identical; kill -9 of the
 * other broker-only node (a follower): the ISR shrinks to two and acks=all produce goes on;
 * its restart: it catches up from its log end and rejoins the ISR (the leader's AlterPartition),
 * and the three replicas are identical again. Waiting is polling with deadlines.
 *
 * usage: broker_cluster_repl KBROKER
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
#include "kp_batch.h"
#include "kp_errcode.h"

#define DEADLINE_MS  20000
#define HEARTBEAT_MS 200
#define SESSION_MS   1500
#define CLUSTER_ID   "kbrokerReplTest0000001"
#define LAG_MS       1500

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
            "num.network.threads=1\nnum.io.threads=2\nlog.cleaner.enable=false\n"
            "replica.lag.time.max.ms=%d\n"
            "replica.fetch.backoff.ms=200\n",
            n->id, g_dir, n->id, HEARTBEAT_MS, SESSION_MS, LAG_MS);
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

typedef struct tview_s {
    int16_t err;
    kp_uuid_t id;
    int nparts;
    int leader[8], nreplicas[8], nisr[8];
    int isr[8][4];
} tview_t;

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

/* ---- the test ------------------------------------------------------------------------------ */

#define TOPIC "repl-e2e"

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

/* The first segment of partition @p p on nodes 1..3 holds the same bytes (at least @p min). */
static bool replicas_equal(int p, size_t min)
{
    uint8_t *b[4] = {NULL};
    size_t l[4] = {0};
    bool same = true;
    for (int id = 1; id <= 3; id++) {
        char path[800];
        snprintf(path, sizeof(path), "%s/n%d/" TOPIC "-%d/00000000000000000000.log", g_dir, id, p);
        b[id] = slurp(path, &l[id]);
        same = same && b[id] && l[id] >= min;
    }
    same = same && l[1] == l[2] && l[2] == l[3] && !memcmp(b[1], b[2], l[1]) &&
           !memcmp(b[2], b[3], l[1]);
    for (int id = 1; id <= 3; id++)
        free(b[id]);
    return same;
}

static bool wait_equal(int p, size_t min)
{
    int64_t dl = kbat_now_ms() + DEADLINE_MS;
    struct pollfd none = {.fd = -1};
    while (kbat_now_ms() < dl) {
        if (replicas_equal(p, min))
            return true;
        poll(&none, 0, 20); /* pacing of the polling loop */
    }
    return false;
}

/* Poll node @p via until partition @p p has @p nisr in-sync replicas (and leader @p leader). */
static bool wait_isr_on(int via, int p, int leader, int nisr)
{
    int64_t dl = kbat_now_ms() + DEADLINE_MS;
    struct pollfd none = {.fd = -1};
    tview_t tv;
    while (kbat_now_ms() < dl) {
        if (metadata_topic(via, TOPIC, &tv) == 0 && tv.err == 0 && tv.nparts > p &&
            tv.leader[p] == leader && tv.nisr[p] == nisr)
            return true;
        poll(&none, 0, 20); /* pacing of the polling loop */
    }
    fprintf(stderr, "partition %d: leader %d, %d in sync (wanted %d, %d)\n", p, tv.leader[p],
            tv.nisr[p], leader, nisr);
    return false;
}

static bool wait_isr(int p, int leader, int nisr)
{
    return wait_isr_on(1, p, leader, nisr);
}

/* @p n acks=all batches of 10 records to partition @p p at its leader; the number acknowledged. */
static int produce_all(int leader, int p, int n)
{
    int ok = 0, fd = kbat_connect(g_nodes[leader].port);
    if (fd < 0)
        return 0;
    for (int i = 0; i < n; i++) {
        kp_writer_t wr;
        int64_t base = -1;
        int16_t ec;
        kp_writer_init(&wr);
        kbat_batch(&wr, KP_CODEC_NONE, 10, "e2e", -1, -1, -1, false, false);
        ec = kbat_produce(fd, 9, TOPIC, p, -1, &wr, &base, NULL);
        kp_writer_free(&wr);
        if (ec != 0) {
            fprintf(stderr, "produce %d to %s-%d at node %d: error %d\n", i, TOPIC, p, leader, ec);
            break;
        }
        ok++;
    }
    close(fd);
    return ok;
}

/* CreateTopics v7 on node 1: 3 partitions, replication factor 3, min.insync.replicas=2. */
static int16_t create_topic(void)
{
    kp_CreateTopicsRequest_t rq;
    kp_CreateTopicsResponse_t resp;
    kp_CreateTopicsRequest_CreatableTopic_t t;
    kp_CreateTopicsRequest_CreatableTopicConfig_t c;
    kp_arena_t ar;
    int16_t ec = -100;
    int fd = kbat_connect(g_nodes[1].port);
    if (fd < 0)
        return ec;
    kp_CreateTopicsRequest_init(&rq);
    kp_CreateTopicsRequest_CreatableTopic_init(&t);
    kp_CreateTopicsRequest_CreatableTopicConfig_init(&c);
    t.Name = (kp_str_t){TOPIC, (int32_t)strlen(TOPIC)};
    t.NumPartitions = 3;
    t.ReplicationFactor = 3;
    c.Name = (kp_str_t){"min.insync.replicas", 19};
    c.Value = (kp_str_t){"2", 1};
    t.Configs.v = &c;
    t.Configs.cnt = 1;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    rq.TimeoutMs = 10000;
    kp_arena_init(&ar, 0);
    kp_CreateTopicsResponse_init(&resp);
    if (kbat_call(fd, KP_APIKEY_CreateTopics, 7, &rq, &resp, &ar) == 0 && resp.Topics.cnt == 1)
        ec = resp.Topics.v[0].ErrorCode;
    kp_arena_free(&ar);
    close(fd);
    return ec;
}

int main(int argc, char **argv)
{
    tview_t tv;
    int p = -1, leader = -1, victim = -1;

    if (argc != 2) {
        fprintf(stderr, "usage: %s KBROKER\n", argv[0]);
        return 2;
    }
    g_kbroker = argv[1];
    if (kbat_tmpdir(g_dir, sizeof(g_dir)) != 0)
        return 2;
    fprintf(stderr, "data and logs in %s\n", g_dir);

    CHECK(start_node(1) == 0 && g_cport > 0, "start node 1");
    CHECK(start_node(2) == 0, "start node 2");
    CHECK(start_node(3) == 0, "start node 3");
    if (failures)
        goto out;
    CHECK(wait_states(1, 1, 1, 1) >= 0, "all three brokers registered and unfenced");
    CHECK(create_topic() == 0, "CreateTopics RF 3");
    /* the partition led by a broker-only node (the combined node sends no AlterPartition) */
    CHECK(metadata_topic(1, TOPIC, &tv) == 0 && tv.err == 0 && tv.nparts == 3, "topic metadata");
    for (int k = 0; k < tv.nparts && k < 3 && p < 0; k++)
        if (tv.leader[k] == 2 || tv.leader[k] == 3)
            p = k;
    CHECK(p >= 0, "a partition led by node 2 or 3");
    if (failures)
        goto out;
    leader = tv.leader[p];
    victim = leader == 2 ? 3 : 2;
    fprintf(stderr, "partition %d: leader %d, follower to kill %d\n", p, leader, victim);
    CHECK(wait_isr(p, leader, 3), "three in sync at the start");
    for (int id = 2; id <= 3; id++)
        CHECK(wait_isr_on(id, p, leader, 3), "node %d has the topic", id);

    /* 1. acks=all with all three: identical replicas */
    CHECK(produce_all(leader, p, 20) == 20, "acks=all produce with three in sync");
    CHECK(wait_equal(p, 20 * 10 * 10), "the three replicas hold the same bytes");

    /* 2. kill -9 of a follower: the ISR shrinks to two, acks=all goes on */
    kill_node(victim, SIGKILL, -1);
    CHECK(wait_isr(p, leader, 2), "ISR of two without node %d", victim);
    CHECK(produce_all(leader, p, 20) == 20, "acks=all produce with two in sync");

    /* 3. restart: it catches up and rejoins; the replicas are identical again */
    CHECK(start_node(victim) == 0, "restart node %d", victim);
    CHECK(wait_isr(p, leader, 3), "node %d back in the ISR", victim);
    CHECK(produce_all(leader, p, 5) == 5, "acks=all produce with three in sync again");
    CHECK(wait_equal(p, 45 * 10 * 10), "the three replicas hold the same bytes again");

out:
    for (int id = 1; id <= 3; id++)
        if (g_nodes[id].pid > 0)
            kill_node(id, SIGTERM, -1);
    fprintf(stderr, "%s\n", failures ? "FAILED" : "ok");
    if (!failures)
        kbat_rmrf(g_dir);
    return failures ? 1 : 0;
}
