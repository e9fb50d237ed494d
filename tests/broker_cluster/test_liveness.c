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
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kbcl.h"
#include "kp_errcode.h"

#define CLUSTER_ID "kbrokerClusterTest0001"

/* The brokers Metadata v12 on node @p via lists (ids into @p ids); count or -1. */
static int metadata_brokers(int via, int *ids, int *ports, int max)
{
    kp_MetadataRequest_t rq;
    kp_MetadataResponse_t resp;
    kp_arena_t ar;
    int fd = kbat_connect(kbcl_nodes[via].port), n = -1;

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

/* Poll node @p via until it knows topic @p name as node 1 does (same id, partitions, leaders,
 * replica and ISR counts). */
static void wait_topic_like_controller(int via, const char *name)
{
    int64_t dl = kbat_now_ms() + KBCL_DEADLINE_MS;
    kbcl_tview_t want, got;
    struct pollfd none = {.fd = -1};
    CHECK(kbcl_metadata_topic(1, name, &want) == 0 && want.err == 0 && want.nparts > 0,
          "node 1 knows topic %s", name);
    while (kbat_now_ms() < dl) {
        if (kbcl_metadata_topic(via, name, &got) == 0 && got.err == 0 &&
            got.nparts == want.nparts && !memcmp(&got.id, &want.id, sizeof(want.id)) &&
            !memcmp(got.leader, want.leader, sizeof(want.leader)) &&
            !memcmp(got.nreplicas, want.nreplicas, sizeof(want.nreplicas)) &&
            !memcmp(got.nisr, want.nisr, sizeof(want.nisr)))
            return;
        poll(&none, 0, 20); /* pacing of the polling loop */
    }
    CHECK(0, "node %d does not show topic %s as the controller does (err %d, %d partitions)", via,
          name, got.err, got.nparts);
}

/* CreateTopics v7 on node @p via with manual assignments: partition i on the @p rf brokers
 * lists[i * rf ...]; the error code, the message into @p msg. */
static int16_t create_assigned(int via, const char *name, const int32_t *lists, int nparts, int rf,
                               char *msg, size_t msg_size)
{
    kp_CreateTopicsRequest_t rq;
    kp_CreateTopicsResponse_t resp;
    kp_CreateTopicsRequest_CreatableTopic_t t;
    kp_CreateTopicsRequest_CreatableReplicaAssignment_t as[4];
    kp_arena_t ar;
    int16_t ec = -100;
    int fd = kbat_connect(kbcl_nodes[via].port);
    msg[0] = '\0';
    if (fd < 0 || nparts > 4)
        return ec;
    kp_CreateTopicsRequest_init(&rq);
    kp_CreateTopicsRequest_CreatableTopic_init(&t);
    t.Name = (kp_str_t){name, (int32_t)strlen(name)};
    t.NumPartitions = -1;
    t.ReplicationFactor = -1;
    for (int i = 0; i < nparts; i++) {
        kp_CreateTopicsRequest_CreatableReplicaAssignment_init(&as[i]);
        as[i].PartitionIndex = i;
        as[i].BrokerIds.v = (int32_t *)&lists[i * rf];
        as[i].BrokerIds.cnt = rf;
    }
    t.Assignments.v = as;
    t.Assignments.cnt = nparts;
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    rq.TimeoutMs = 10000;
    kp_arena_init(&ar, 0);
    if (kbat_call(fd, KP_APIKEY_CreateTopics, 7, &rq, &resp, &ar) == 0 && resp.Topics.cnt == 1) {
        const kp_str_t *m = &resp.Topics.v[0].ErrorMessage;
        ec = resp.Topics.v[0].ErrorCode;
        if (m->ptr && m->len > 0)
            snprintf(msg, msg_size, "%.*s", (int)m->len, m->ptr);
    }
    kp_arena_free(&ar);
    close(fd);
    return ec;
}

/* CreatePartitions v3 through node @p via: @p count partitions. The error code. */
static int16_t create_partitions(int via, const char *name, int32_t count)
{
    kp_CreatePartitionsRequest_t rq;
    kp_CreatePartitionsResponse_t resp;
    kp_CreatePartitionsRequest_CreatePartitionsTopic_t t;
    kp_arena_t ar;
    int16_t ec = -100;
    int fd = kbat_connect(kbcl_nodes[via].port);
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
    int fd = kbat_connect(kbcl_nodes[via].port);
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
    int64_t dl = kbat_now_ms() + KBCL_DEADLINE_MS;
    struct pollfd none = {.fd = -1};
    while (kbat_now_ms() < dl) {
        kp_DescribeConfigsRequest_t rq;
        kp_DescribeConfigsResponse_t resp;
        kp_DescribeConfigsRequest_DescribeConfigsResource_t r;
        kp_str_t k = {key, (int32_t)strlen(key)};
        kp_arena_t ar;
        bool ok = false;
        int fd = kbat_connect(kbcl_nodes[via].port);
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
    int fd = kbat_connect(kbcl_nodes[via].port);
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
static bool topic_uses(const kbcl_tview_t *tv, int id)
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
    int64_t dl = kbat_now_ms() + KBCL_DEADLINE_MS;
    kbcl_tview_t tv;
    struct pollfd none = {.fd = -1};
    while (kbat_now_ms() < dl) {
        if (kbcl_metadata_topic(via, name, &tv) == 0 && tv.err == 0 && tv.nparts > 0 &&
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

static void check_ports(int via)
{
    kbcl_view_t v;
    CHECK(kbcl_describe(via, &v) == 0, "DescribeCluster on node %d", via);
    for (int i = 0; i < v.nbrokers && i < 8; i++) {
        int id = v.id[i];
        CHECK(id >= 1 && id <= 3 && v.port[i] == kbcl_nodes[id].port,
              "broker %d listed with port %d, it listens on %d", id, v.port[i],
              id >= 1 && id <= 3 ? kbcl_nodes[id].port : -1);
    }
    CHECK(kbcl_state_of(&v, v.controller_id) == 1, "ControllerId %d is not a live broker",
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
    if (kbcl_init(argv[1], CLUSTER_ID, NULL) != 0)
        return 2;

    /* 1. the controller, then two brokers registering with it */
    if (kbcl_start_all() != 0)
        goto out;
    check_ports(1);
    /* the registrations are metadata records: every broker lists every broker */
    CHECK(kbcl_wait_states(2, 1, 1, 1) >= 0, "node 2 lists all three brokers");
    CHECK(kbcl_wait_states(3, 1, 1, 1) >= 0, "node 3 lists all three brokers");
    check_ports(2);
    check_ports(3);
    n = metadata_brokers(1, ids, ports, 8);
    CHECK(n == 3, "Metadata on node 1 lists %d brokers, expected 3", n);
    for (int i = 0; i < n && i < 8; i++)
        CHECK(ids[i] >= 1 && ids[i] <= 3 && ports[i] == kbcl_nodes[ids[i]].port,
              "Metadata broker %d port %d", ids[i], ports[i]);

    /* 1b. metadata propagation: a topic created on the controller reaches both brokers with
     *     the same id, partitions, leaders, replicas and ISR; a broker-only node does not make
     *     metadata changes itself */
    {
        int fd = kbat_connect(kbcl_nodes[1].port);
        static const char *const cfgkv[] = {"retention.ms", "123456", NULL};
        CHECK(fd >= 0 && kbat_create_topic(fd, "cluster-a", 3, cfgkv) == 0,
              "CreateTopics on the controller");
        if (fd >= 0)
            close(fd);
        wait_topic_like_controller(2, "cluster-a");
        wait_topic_like_controller(3, "cluster-a");
        /* replication factor 3 over the three brokers, leaders striped; 4 is refused */
        {
            kbcl_tview_t tv;
            int led[4] = {0};
            CHECK(kbcl_create_topic(1, "cluster-r3", 3, 3, NULL) == 0, "CreateTopics RF 3");
            CHECK(kbcl_create_topic(1, "cluster-r4", 1, 4, NULL) ==
                      KP_ERR_INVALID_REPLICATION_FACTOR,
                  "CreateTopics RF 4 with three brokers: INVALID_REPLICATION_FACTOR");
            CHECK(kbcl_metadata_topic(1, "cluster-r3", &tv) == 0 && tv.nparts == 3, "cluster-r3");
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
            kbcl_tview_t tv;
            CHECK(create_partitions(2, "cluster-r3", 5) == 0, "CreatePartitions through node 2");
            CHECK(kbcl_metadata_topic(1, "cluster-r3", &tv) == 0 && tv.nparts == 5,
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
        fd = kbat_connect(kbcl_nodes[3].port);
        CHECK(fd >= 0 && kbat_create_topic(fd, "cluster-b", 2, NULL) == 0,
              "CreateTopics through broker-only node 3");
        if (fd >= 0)
            close(fd);
        wait_topic_like_controller(3, "cluster-b");
        wait_topic_like_controller(2, "cluster-b");
    }

    /* 2. kill -9 of broker 3: fenced after the session timeout, not before */
    kbcl_kill(3, SIGKILL, -1);
    took = kbcl_wait_states(1, 1, 1, 0);
    fprintf(stderr, "broker 3 fenced %lld ms after kill -9\n", (long long)took);
    CHECK(took >= 0, "broker 3 fenced after kill -9");
    CHECK(took >= KBCL_SESSION_MS - KBCL_HEARTBEAT_MS - 100,
          "broker 3 fenced after %lld ms, before the %d ms session timeout", (long long)took,
          KBCL_SESSION_MS);
    n = metadata_brokers(1, ids, ports, 8);
    CHECK(n == 2, "Metadata lists %d brokers with broker 3 fenced, expected 2", n);
    CHECK(kbcl_wait_states(2, 1, 1, 0) >= 0, "node 2 sees broker 3 fenced");
    /* clean election: broker 3 leads nothing and left every ISR, on the controller and as
     * broker 2 applied it */
    CHECK(wait_topic_without(1, "cluster-r3", 3), "leadership moved off fenced broker 3");
    wait_topic_like_controller(2, "cluster-r3");
    /* manual assignments with broker 3 fenced (Kafka's controller): a list of fenced brokers
     * only is refused; otherwise the ISR is the unfenced replicas and the first of them leads,
     * the replica order kept, through broker-only node 2 (forwarded) */
    {
        static const int32_t only3[] = {3}, lists[] = {3, 2, 1, 1, 3, 2};
        char msg[256];
        kbcl_tview_t tv;
        int16_t ec = create_assigned(2, "cluster-m0", only3, 1, 1, msg, sizeof(msg));
        CHECK(ec == KP_ERR_INVALID_REPLICA_ASSIGNMENT &&
                  strstr(msg, "for partition 0 are fenced or in controlled shutdown"),
              "assignment [3] with broker 3 fenced: %d %s", ec, msg);
        ec = create_assigned(2, "cluster-m", lists, 2, 3, msg, sizeof(msg));
        CHECK(ec == 0, "CreateTopics [3,2,1] [1,3,2] with broker 3 fenced: %d %s", ec, msg);
        CHECK(kbcl_metadata_topic(1, "cluster-m", &tv) == 0 && tv.err == 0 && tv.nparts == 2,
              "cluster-m on node 1");
        CHECK(tv.leader[0] == 2 && tv.nisr[0] == 2 && tv.isr[0][0] == 2 && tv.isr[0][1] == 1 &&
                  tv.nreplicas[0] == 3 && tv.replicas[0][0] == 3 && tv.replicas[0][1] == 2 &&
                  tv.replicas[0][2] == 1,
              "cluster-m-0: leader %d, ISR of %d, replicas %d,%d,%d", tv.leader[0], tv.nisr[0],
              tv.replicas[0][0], tv.replicas[0][1], tv.replicas[0][2]);
        CHECK(tv.leader[1] == 1 && tv.nisr[1] == 2 && tv.isr[1][0] == 1 && tv.isr[1][1] == 2 &&
                  tv.nreplicas[1] == 3 && tv.replicas[1][0] == 1 && tv.replicas[1][1] == 3,
              "cluster-m-1: leader %d, ISR of %d", tv.leader[1], tv.nisr[1]);
        wait_topic_like_controller(2, "cluster-m");
    }

    /* 3. a topic created while broker 3 is down; its restart (a new incarnation, the same
     *    port) registers it again, it still has the earlier topic and fetches the new one */
    {
        int fd = kbat_connect(kbcl_nodes[1].port);
        CHECK(fd >= 0 && kbat_create_topic(fd, "cluster-c", 2, NULL) == 0,
              "CreateTopics on the controller while broker 3 is down");
        if (fd >= 0)
            close(fd);
    }
    CHECK(kbcl_start(3) == 0, "restart node 3");
    CHECK(kbcl_wait_states(1, 1, 1, 1) >= 0, "broker 3 back after its restart");
    check_ports(1);
    wait_topic_like_controller(3, "cluster-a");
    wait_topic_like_controller(3, "cluster-c");
    /* the leaders (on node 1 through its own controller listener, on node 2 through its
     * channel) take broker 3 back into the ISR once it caught up (AlterPartition) */
    {
        int64_t dl = kbat_now_ms() + KBCL_DEADLINE_MS;
        kbcl_tview_t tv;
        bool full = false;
        struct pollfd none = {.fd = -1};
        while (kbat_now_ms() < dl && !full) {
            full = kbcl_metadata_topic(1, "cluster-r3", &tv) == 0 && tv.nparts == 5;
            for (int k = 0; full && k < 5; k++)
                full = tv.nisr[k] == 3;
            if (!full)
                poll(&none, 0, 50); /* pacing of the polling loop */
        }
        CHECK(full, "broker 3 back in the ISR of every partition of cluster-r3 (%d %d %d %d %d)",
              tv.nisr[0], tv.nisr[1], tv.nisr[2], tv.nisr[3], tv.nisr[4]);
    }

    /* 4. kill -9 of the controller: the brokers keep serving; after its restart they
     *    register again by themselves. A change forwarded just before (the controller stopped
     *    first, so the Envelope waits unanswered, then killed) may have reached it: node 2
     *    answers REQUEST_TIMED_OUT (Kafka's forwarding answer, the outcome unknown), never the
     *    retriable NOT_CONTROLLER that makes a client send it again (docs/design.md C5) */
    {
        kp_CreateTopicsRequest_t rq;
        kp_CreateTopicsRequest_CreatableTopic_t t;
        kp_CreateTopicsResponse_t resp;
        kp_arena_t ar;
        int fd = kbat_connect(kbcl_nodes[2].port);
        int16_t ec = -100;
        kp_CreateTopicsRequest_init(&rq);
        kp_CreateTopicsRequest_CreatableTopic_init(&t);
        t.Name = (kp_str_t){"cluster-maybe", 13};
        t.NumPartitions = 1;
        t.ReplicationFactor = 1;
        rq.Topics.v = &t;
        rq.Topics.cnt = 1;
        rq.TimeoutMs = 10000;
        kp_arena_init(&ar, 0);
        kp_CreateTopicsResponse_init(&resp);
        kill(kbcl_nodes[1].pid, SIGSTOP);
        CHECK(fd >= 0 && kbat_send(fd, KP_APIKEY_CreateTopics, 7, 99, NULL, &rq) == 0,
              "CreateTopics to node 2");
        /* forwarded, not refused: nothing comes back while the controller is stopped */
        CHECK(fd >= 0 && kbat_silent(fd, 300), "node 2 answered with the controller stopped");
        kbcl_kill(1, SIGKILL, -1);
        if (fd >= 0 &&
            kbat_recv(fd, KP_APIKEY_CreateTopics, 7, 99, &resp, &ar, KBAT_WAIT_MS) == 0 &&
            resp.Topics.cnt == 1)
            ec = resp.Topics.v[0].ErrorCode;
        CHECK(ec == KP_ERR_REQUEST_TIMED_OUT,
              "a forwarded CreateTopics the dead controller may have received: error %d, "
              "expected REQUEST_TIMED_OUT",
              ec);
        kp_arena_free(&ar);
        if (fd >= 0)
            close(fd);
    }
    n = metadata_brokers(2, ids, ports, 8);
    CHECK(n >= 1, "broker 2 serves Metadata while the controller is down (%d)", n);
    {
        /* a change attempted meanwhile fails fast with a retriable error (once the channel
         * noticed: poll, the first attempts may still wait for the controller) */
        int64_t dl = kbat_now_ms() + KBCL_DEADLINE_MS, t0;
        int16_t ec = -100;
        struct pollfd none = {.fd = -1};
        while (kbat_now_ms() < dl && ec != KP_ERR_NOT_CONTROLLER) {
            int fd = kbat_connect(kbcl_nodes[2].port);
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
    CHECK(kbcl_start(1) == 0, "restart the controller on port %d", kbcl_cport());
    took = kbcl_wait_states(1, 1, 1, 1);
    fprintf(stderr, "brokers registered again %lld ms after the controller's restart\n",
            (long long)took);
    CHECK(took >= 0, "brokers registered again with the restarted controller");
    check_ports(1);
    wait_topic_like_controller(2, "cluster-c");
    {
        kbcl_tview_t tv;
        CHECK(kbcl_metadata_topic(1, "cluster-down", &tv) == 0 &&
                  tv.err == KP_ERR_UNKNOWN_TOPIC_OR_PARTITION,
              "the change refused while the controller was down did not happen (%d)", tv.err);
        /* a client retries the retriable NOT_CONTROLLER until the broker reaches the
         * controller again */
        int64_t dl = kbat_now_ms() + KBCL_DEADLINE_MS;
        int16_t ec = -100;
        struct pollfd none = {.fd = -1};
        while (kbat_now_ms() < dl &&
               (ec = kbcl_create_topic(2, "cluster-down", 1, 3, NULL)) == KP_ERR_NOT_CONTROLLER)
            poll(&none, 0, 50); /* pacing of the retries */
        CHECK(ec == 0, "CreateTopics through node 2 works again once the controller is back (%d)",
              ec);
        wait_topic_like_controller(3, "cluster-down");
    }

    /* 5. SIGTERM of broker 2: controlled shutdown, exit 0, then fenced */
    kbcl_kill(2, SIGTERM, 0);
    /* its leaderships and ISR memberships moved before it went (ShouldShutDown comes after
     * the moves are committed): no waiting, the controller's image shows it at once */
    {
        kbcl_tview_t tv;
        CHECK(kbcl_metadata_topic(1, "cluster-r3", &tv) == 0 && tv.nparts == 5 &&
                  !topic_uses(&tv, 2),
              "controlled shutdown moved leadership and ISR membership off broker 2");
    }
    {
        /* fenced when told to go (as Kafka's controller does), not a session timeout later:
         * the controller's view shows it at once, and its next incarnation registers at once */
        kbcl_view_t v;
        CHECK(kbcl_describe(1, &v) == 0 && kbcl_state_of(&v, 2) == 0,
              "broker 2 fenced as soon as its controlled shutdown completed (state %d)",
              kbcl_describe(1, &v) == 0 ? kbcl_state_of(&v, 2) : -2);
    }
    CHECK(kbcl_wait_states(1, 1, 0, 1) >= 0, "broker 2 fenced after its shutdown");
    CHECK(kbcl_start(2) == 0, "restart node 2");
    CHECK(kbcl_wait_states(1, 1, 1, 1) >= 0, "broker 2 registered and unfenced again");

out:
    return kbcl_finish(0);
}
