/*
 * kbcl.c -- the three-process kbroker cluster of the tests/broker_cluster C tests (kbcl.h).
 */
#include "kbcl.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kbt_client.h"

int kbcl_failures;
kbcl_node_t kbcl_nodes[4];
char kbcl_dir[512];

static const char *g_kbroker, *g_cluster_id, *g_extra;
static int g_cport; /* the controller's port, fixed after its first start */

int kbcl_init(const char *kbroker, const char *cluster_id, const char *extra)
{
    g_kbroker = kbroker;
    g_cluster_id = cluster_id;
    g_extra = extra ? extra : "";
    if (kbat_tmpdir(kbcl_dir, sizeof(kbcl_dir)) != 0)
        return -1;
    fprintf(stderr, "data and logs in %s\n", kbcl_dir);
    return 0;
}

int kbcl_cport(void)
{
    return g_cport;
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

static int write_config(const kbcl_node_t *n, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f,
            "node.id=%d\nlog.dirs=%s/n%d\ncluster.id=%s\n"
            "broker.heartbeat.interval.ms=%d\nbroker.session.timeout.ms=%d\n"
            "controller.listener.names=CONTROLLER\n"
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
            "num.network.threads=1\nnum.io.threads=2\nlog.cleaner.enable=false\n%s",
            n->id, kbcl_dir, n->id, g_cluster_id, KBCL_HEARTBEAT_MS, KBCL_SESSION_MS, g_extra);
    if (n->id == 1)
        fprintf(f,
                "\nprocess.roles=broker,controller\n"
                "listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d\n",
                n->port > 0 ? n->port : 0, g_cport > 0 ? g_cport : 0);
    else
        fprintf(f,
                "\nprocess.roles=broker\nlisteners=PLAINTEXT://127.0.0.1:%d\n"
                "controller.quorum.voters=1@127.0.0.1:%d\n",
                n->port > 0 ? n->port : 0, g_cport);
    return fclose(f);
}

int kbcl_start(int id)
{
    kbcl_node_t *n = &kbcl_nodes[id];
    char cfg[700], logp[700], buf[8192];
    int p[2];
    size_t got = 0;
    int64_t dl;

    n->id = id;
    snprintf(cfg, sizeof(cfg), "%s/server-%d.properties", kbcl_dir, id);
    snprintf(logp, sizeof(logp), "%s/kbroker-%d.log", kbcl_dir, id);
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
    dl = kbat_now_ms() + KBCL_DEADLINE_MS;
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

int kbcl_start_all(void)
{
    CHECK(kbcl_start(1) == 0 && g_cport > 0, "start node 1");
    CHECK(kbcl_start(2) == 0, "start node 2");
    CHECK(kbcl_start(3) == 0, "start node 3");
    if (kbcl_failures)
        return -1;
    CHECK(kbcl_wait_states(1, 1, 1, 1) >= 0, "all three brokers registered and unfenced");
    return kbcl_failures ? -1 : 0;
}

void kbcl_kill(int id, int sig, int expect_status)
{
    kbcl_node_t *n = &kbcl_nodes[id];
    int st;
    if (n->pid <= 0)
        return; /* not running: nothing to signal (kill(0) would hit the test itself) */
    kill(n->pid, sig);
    st = kbt_wait_exit(n->pid, KBCL_DEADLINE_MS);
    if (expect_status >= 0)
        CHECK(st == expect_status, "node %d exited with %d after signal %d, expected %d", id, st,
              sig, expect_status);
    close(n->out);
    n->pid = 0;
}

int kbcl_finish(int term_status)
{
    for (int id = 1; id <= 3; id++)
        if (kbcl_nodes[id].pid > 0)
            kbcl_kill(id, SIGTERM, term_status);
    fprintf(stderr, "%s\n", kbcl_failures ? "FAILED" : "ok");
    if (!kbcl_failures)
        kbat_rmrf(kbcl_dir);
    return kbcl_failures ? 1 : 0;
}

int kbcl_describe(int via, kbcl_view_t *v)
{
    kp_DescribeClusterRequest_t rq;
    kp_DescribeClusterResponse_t resp;
    kp_arena_t ar;
    int fd = kbat_connect(kbcl_nodes[via].port), rc = -1;

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

int kbcl_state_of(const kbcl_view_t *v, int id)
{
    for (int i = 0; i < v->nbrokers && i < 8; i++)
        if (v->id[i] == id)
            return v->fenced[i] ? 0 : 1;
    return -1;
}

int64_t kbcl_wait_states(int via, int w1, int w2, int w3)
{
    int want[4] = {0, w1, w2, w3};
    int64_t t0 = kbat_now_ms(), dl = t0 + KBCL_DEADLINE_MS;
    kbcl_view_t v;
    struct pollfd none = {.fd = -1};
    while (kbat_now_ms() < dl) {
        bool ok = kbcl_describe(via, &v) == 0;
        for (int id = 1; ok && id <= 3; id++)
            ok = want[id] == 2 || kbcl_state_of(&v, id) == want[id];
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

int kbcl_metadata_topic(int via, const char *name, kbcl_tview_t *tv)
{
    kp_MetadataRequest_t rq;
    kp_MetadataResponse_t resp;
    kp_MetadataRequest_MetadataRequestTopic_t t;
    kp_arena_t ar;
    int fd = kbat_connect(kbcl_nodes[via].port), rc = -1;

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
            for (int32_t j = 0; j < mt->Partitions.v[i].ReplicaNodes.cnt && j < 4; j++)
                tv->replicas[k][j] = mt->Partitions.v[i].ReplicaNodes.v[j];
            for (int32_t j = 0; j < mt->Partitions.v[i].IsrNodes.cnt && j < 4; j++)
                tv->isr[k][j] = mt->Partitions.v[i].IsrNodes.v[j];
        }
        rc = 0;
    }
    kp_arena_free(&ar);
    close(fd);
    return rc;
}

int16_t kbcl_create_topic(int via, const char *name, int32_t parts, int16_t rf,
                          const char *const *kv)
{
    int fd = kbat_connect(kbcl_nodes[via].port);
    int16_t ec = fd < 0 ? -100 : kbat_create_topic_rf(fd, name, parts, rf, kv);
    if (fd >= 0)
        close(fd);
    return ec;
}
