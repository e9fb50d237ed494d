/*
 * test_gown.c -- CUnit: ownership of __consumer_offsets partitions by the group coordinator on
 * an in-process broker (tests/broker_api's kbat harness) whose partitions change leader by
 * metadata records applied as a remote controller's (kb_meta_apply_records), or directly
 * (kb_part_become_leader / _follower):
 * NOT_COORDINATOR for the groups of a partition this node does not lead (OffsetCommit,
 * OffsetFetch, Heartbeat), FindCoordinator naming the leader through the node resolver (or
 * COORDINATOR_NOT_AVAILABLE without one), unloading and reloading from the log at the new leader
 * epoch with the committed offsets intact, other partitions unaffected, and the acks=all wait of
 * an OffsetCommit on a partition with a follower (answered only once the follower fetched past
 * the records).
 */
#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb_gco.h"
#include "kb_meta_rec.h"
#include "kb_time.h"
#include "kbat.h"
#include "kp_batch.h"
#include "kp_errcode.h"

#define S(x) kp_str(x)

typedef struct env_s {
    char dir[512];
    kbat_broker_t b;
    kb_gco_t *co;
    int fd;
    kp_arena_t ar;
} env_t;

static const char *const g_kv[] = {"offsets.topic.num.partitions=3", NULL};

static void env_start(env_t *e)
{
    kb_gco_opts_t o = {0};
    char err[256];
    memset(e, 0, sizeof(*e));
    CU_ASSERT_EQUAL_FATAL(kbat_tmpdir(e->dir, sizeof(e->dir)), 0);
    CU_ASSERT_EQUAL_FATAL(kbat_broker_start(&e->b, e->dir, g_kv), 0);
    o.svc = e->b.svc;
    o.reg = e->b.reg;
    e->co = kb_gco_new(&o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(e->co);
    e->fd = kbat_connect(e->b.port);
    CU_ASSERT_FATAL(e->fd >= 0);
    kp_arena_init(&e->ar, 4096);
}

static void env_stop(env_t *e)
{
    close(e->fd); /* every request of the test was answered: no handler is running */
    kb_gco_free(e->co);
    kbat_broker_stop(&e->b);
    kp_arena_free(&e->ar);
    kbat_rmrf(e->dir);
}

static void mk_topic(env_t *e, const char *name, int32_t parts)
{
    kb_topic_spec_t spec = {.name = name, .partitions = parts};
    char msg[256];
    CU_ASSERT_EQUAL_FATAL(
        kb_meta_create_topic(e->b.svc->meta, &spec, false, NULL, msg, sizeof(msg)), 0);
}

static kb_part_t *offsets_part(env_t *e, int32_t p)
{
    kb_part_t *part = NULL;
    CU_ASSERT_EQUAL_FATAL(kb_meta_part(e->b.svc->meta, "__consumer_offsets", p, &part), KB_META_OK);
    return part;
}

static void commit_req(kp_OffsetCommitRequest_t *rq,
                       kp_OffsetCommitRequest_OffsetCommitRequestTopic_t *t,
                       kp_OffsetCommitRequest_OffsetCommitRequestPartition_t *p, const char *group,
                       int64_t off)
{
    kp_OffsetCommitRequest_init(rq);
    kp_OffsetCommitRequest_OffsetCommitRequestTopic_init(t);
    kp_OffsetCommitRequest_OffsetCommitRequestPartition_init(p);
    rq->GroupId = S(group);
    rq->GenerationIdOrMemberEpoch = -1;
    rq->MemberId = S("");
    t->Name = S("t");
    p->PartitionIndex = 0;
    p->CommittedOffset = off;
    p->CommittedLeaderEpoch = -1;
    p->CommittedMetadata = S("");
    t->Partitions.cnt = 1;
    t->Partitions.v = p;
    rq->Topics.cnt = 1;
    rq->Topics.v = t;
}

static int16_t commit_err(const kp_OffsetCommitResponse_t *r)
{
    if (r->Topics.cnt != 1 || r->Topics.v[0].Partitions.cnt != 1)
        return -100;
    return r->Topics.v[0].Partitions.v[0].ErrorCode;
}

/* OffsetCommit v7 of t-0 = @p off by a group that only stores offsets. */
static int16_t commit(env_t *e, const char *group, int64_t off)
{
    kp_OffsetCommitRequest_t rq;
    kp_OffsetCommitRequest_OffsetCommitRequestTopic_t t;
    kp_OffsetCommitRequest_OffsetCommitRequestPartition_t p;
    kp_OffsetCommitResponse_t r;
    commit_req(&rq, &t, &p, group, off);
    if (kbat_call(e->fd, KP_APIKEY_OffsetCommit, 7, &rq, &r, &e->ar) != 0)
        return -100;
    return commit_err(&r);
}

/* OffsetFetch v7 of t-0: the group's or the partition's error; *off the offset. */
static int16_t fetch(env_t *e, const char *group, int64_t *off)
{
    kp_OffsetFetchRequest_t rq;
    kp_OffsetFetchRequest_OffsetFetchRequestTopic_t t;
    kp_OffsetFetchResponse_t r;
    int32_t pi = 0;
    *off = -2;
    kp_OffsetFetchRequest_init(&rq);
    kp_OffsetFetchRequest_OffsetFetchRequestTopic_init(&t);
    t.Name = S("t");
    t.PartitionIndexes.cnt = 1;
    t.PartitionIndexes.v = &pi;
    rq.GroupId = S(group);
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    if (kbat_call(e->fd, KP_APIKEY_OffsetFetch, 7, &rq, &r, &e->ar) != 0)
        return -100;
    if (r.ErrorCode)
        return r.ErrorCode;
    if (r.Topics.cnt != 1 || r.Topics.v[0].Partitions.cnt != 1)
        return -100;
    *off = r.Topics.v[0].Partitions.v[0].CommittedOffset;
    return r.Topics.v[0].Partitions.v[0].ErrorCode;
}

static int16_t heartbeat(env_t *e, const char *group)
{
    kp_HeartbeatRequest_t rq;
    kp_HeartbeatResponse_t r;
    kp_HeartbeatRequest_init(&rq);
    rq.GroupId = S(group);
    rq.GenerationId = 1;
    rq.MemberId = S("m");
    if (kbat_call(e->fd, KP_APIKEY_Heartbeat, 4, &rq, &r, &e->ar) != 0)
        return -100;
    return r.ErrorCode;
}

/* FindCoordinator v4 of one group key. */
static int16_t find(env_t *e, const char *group, int32_t *node, char *host, size_t hsz,
                    int32_t *port)
{
    kp_FindCoordinatorRequest_t rq;
    kp_FindCoordinatorResponse_t r;
    kp_str_t key = S(group);
    kp_FindCoordinatorRequest_init(&rq);
    rq.KeyType = 0;
    rq.CoordinatorKeys.cnt = 1;
    rq.CoordinatorKeys.v = &key;
    if (kbat_call(e->fd, KP_APIKEY_FindCoordinator, 4, &rq, &r, &e->ar) != 0 ||
        r.Coordinators.cnt != 1)
        return -100;
    *node = r.Coordinators.v[0].NodeId;
    *port = r.Coordinators.v[0].Port;
    snprintf(host, hsz, "%.*s", r.Coordinators.v[0].Host.len > 0 ? r.Coordinators.v[0].Host.len : 0,
             r.Coordinators.v[0].Host.ptr ? r.Coordinators.v[0].Host.ptr : "");
    return r.Coordinators.v[0].ErrorCode;
}

static int resolve_other(void *opaque, int32_t node, const char *listener, char *host,
                         size_t host_size, int32_t *port)
{
    (void)opaque;
    (void)listener;
    if (node != 2)
        return -1;
    snprintf(host, host_size, "broker-two.example");
    *port = 19092;
    return 0;
}

/* Apply a PartitionChangeRecord to partition @p p of __consumer_offsets as a remote controller's
 * record would arrive (kb_meta_apply_records): replicas {this node, 2}, the ISR given, leader
 * @p leader (a new leader epoch). The apply path makes the local partition leader or follower. */
static void change_leader(env_t *e, int32_t p, int32_t leader, const int32_t *isr, int32_t nisr)
{
    kb_topic_info_t ti;
    kb_mrec_t r;
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    kp_writer_t out, val;
    char err[256];
    int32_t self = kb_meta_node_id(e->b.svc->meta);
    CU_ASSERT_EQUAL_FATAL(kb_meta_topic_by_name(e->b.svc->meta, "__consumer_offsets", &ti), 0);
    kb_mrec_init(&r, KB_MREC_PARTITION_CHANGE);
    r.topic_id = ti.id;
    r.partition = p;
    r.leader = leader;
    r.replicas = malloc(2 * sizeof(int32_t));
    r.isr = malloc((size_t)nisr * sizeof(int32_t));
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.replicas);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.isr);
    r.replicas[0] = self;
    r.replicas[1] = 2;
    r.nreplicas = 2;
    memcpy(r.isr, isr, (size_t)nisr * sizeof(int32_t));
    r.nisr = nisr;
    kp_batch_opts_init(&o);
    o.baseOffset = kb_meta_offset(e->b.svc->meta) + 1;
    kp_batch_builder_init(&bb, &o);
    kp_writer_init(&val);
    kp_writer_init(&out);
    CU_ASSERT_EQUAL_FATAL(kb_mrec_encode(&r, &val), 0);
    CU_ASSERT_EQUAL_FATAL(kp_batch_builder_add(&bb, 1000, (kp_bytes_t){NULL, -1},
                                               (kp_bytes_t){val.buf, (int32_t)val.len}, NULL, 0),
                          0);
    CU_ASSERT_EQUAL_FATAL(kp_batch_builder_finish(&bb, &out), 0);
    CU_ASSERT_EQUAL_FATAL(kb_meta_apply_records(e->b.svc->meta, out.buf, out.len, err, sizeof(err)),
                          0);
    kb_mrec_clear(&r);
    kp_batch_builder_free(&bb);
    kp_writer_free(&val);
    kp_writer_free(&out);
}

/* Two group ids that live on different partitions of __consumer_offsets. */
static void two_groups(env_t *e, char *g1, char *g2, size_t sz, int32_t *p1, int32_t *p2)
{
    snprintf(g1, sz, "group-a");
    *p1 = kb_gco_partition_for(e->co, g1);
    for (int i = 0; i < 100; i++) {
        snprintf(g2, sz, "group-b%d", i);
        if ((*p2 = kb_gco_partition_for(e->co, g2)) != *p1)
            return;
    }
    CU_FAIL_FATAL("no second partition");
}

static void t_follower_and_back(void)
{
    env_t e;
    char g1[32], g2[32], host[128];
    int32_t p1, p2, node, port, epoch;
    int32_t self, reps[2], isr1[1];
    int64_t off;
    kb_part_t *part;

    env_start(&e);
    self = kb_meta_node_id(e.b.svc->meta);
    mk_topic(&e, "t", 1);
    /* FindCoordinator creates __consumer_offsets; every partition is led here */
    CU_ASSERT_EQUAL(find(&e, "group-a", &node, host, sizeof(host), &port), 0);
    CU_ASSERT_EQUAL(node, self);
    CU_ASSERT_EQUAL(port, e.b.port);
    two_groups(&e, g1, g2, sizeof(g1), &p1, &p2);
    CU_ASSERT_EQUAL(kb_gco_partition_state(e.co, p1, &epoch), 2);
    CU_ASSERT_EQUAL(commit(&e, g1, 42), 0);
    CU_ASSERT_EQUAL(commit(&e, g2, 7), 0);
    CU_ASSERT_EQUAL(fetch(&e, g1, &off), 0);
    CU_ASSERT_EQUAL(off, 42);

    /* p1 moves to broker 2 (a metadata record): this node follows it */
    part = offsets_part(&e, p1);
    reps[0] = self;
    reps[1] = 2;
    change_leader(&e, p1, 2, reps, 2);
    CU_ASSERT_EQUAL(kb_part_role(part), KB_PART_FOLLOWER);
    kb_gco_reconcile(e.co);
    CU_ASSERT_EQUAL(kb_gco_partition_state(e.co, p1, &epoch), 0);
    CU_ASSERT_EQUAL(epoch, -1);
    CU_ASSERT_EQUAL(commit(&e, g1, 43), KP_ERR_NOT_COORDINATOR);
    CU_ASSERT_EQUAL(fetch(&e, g1, &off), KP_ERR_NOT_COORDINATOR);
    CU_ASSERT_EQUAL(heartbeat(&e, g1), KP_ERR_NOT_COORDINATOR);
    /* the other partition still works */
    CU_ASSERT_EQUAL(fetch(&e, g2, &off), 0);
    CU_ASSERT_EQUAL(off, 7);
    CU_ASSERT_EQUAL(commit(&e, g2, 8), 0);
    /* FindCoordinator names the leader: unknown endpoint without a resolver, else its address */
    CU_ASSERT_EQUAL(find(&e, g1, &node, host, sizeof(host), &port),
                    KP_ERR_COORDINATOR_NOT_AVAILABLE);
    CU_ASSERT_EQUAL(node, -1);
    kb_gco_set_node_resolver(e.co, resolve_other, NULL);
    CU_ASSERT_EQUAL(find(&e, g1, &node, host, sizeof(host), &port), 0);
    CU_ASSERT_EQUAL(node, 2);
    CU_ASSERT_STRING_EQUAL(host, "broker-two.example");
    CU_ASSERT_EQUAL(port, 19092);
    CU_ASSERT_EQUAL(find(&e, g2, &node, host, sizeof(host), &port), 0);
    CU_ASSERT_EQUAL(node, self);

    /* leadership comes back at a newer epoch: loaded again from the log */
    isr1[0] = self;
    change_leader(&e, p1, self, isr1, 1);
    CU_ASSERT_EQUAL(kb_part_role(part), KB_PART_LEADER);
    CU_ASSERT_EQUAL(commit(&e, g1, 44), KP_ERR_NOT_COORDINATOR); /* not taken over yet */
    kb_gco_reconcile(e.co);
    CU_ASSERT_EQUAL(kb_gco_partition_state(e.co, p1, &epoch), 2);
    CU_ASSERT_EQUAL(epoch, kb_part_epoch(part));
    CU_ASSERT_EQUAL(fetch(&e, g1, &off), 0);
    CU_ASSERT_EQUAL(off, 42);
    CU_ASSERT_EQUAL(commit(&e, g1, 45), 0);
    CU_ASSERT_EQUAL(fetch(&e, g1, &off), 0);
    CU_ASSERT_EQUAL(off, 45);
    CU_ASSERT_EQUAL(fetch(&e, g2, &off), 0);
    CU_ASSERT_EQUAL(off, 8);
    kb_part_release(part);
    env_stop(&e);
}

/* With a follower in the ISR an OffsetCommit answers only once the HW passed its records. */
static void t_commit_waits_for_hw(void)
{
    env_t e;
    char g1[32], g2[32], host[128];
    int32_t p1, p2, node, port, pe, leader, self, reps[2];
    int64_t off, leo;
    bool pending;
    kb_part_t *part;
    kp_OffsetCommitRequest_t rq;
    kp_OffsetCommitRequest_OffsetCommitRequestTopic_t t;
    kp_OffsetCommitRequest_OffsetCommitRequestPartition_t p;
    kp_OffsetCommitResponse_t r;

    env_start(&e);
    self = kb_meta_node_id(e.b.svc->meta);
    mk_topic(&e, "t", 1);
    CU_ASSERT_EQUAL(find(&e, "group-a", &node, host, sizeof(host), &port), 0);
    two_groups(&e, g1, g2, sizeof(g1), &p1, &p2);
    part = offsets_part(&e, p1);
    reps[0] = self;
    reps[1] = 2;
    kb_part_repl_info(part, &pe, &leader, &pending);
    CU_ASSERT_EQUAL_FATAL(
        kb_part_become_leader(part, kb_part_epoch(part) + 1, pe + 1, reps, 2, reps, 2), 0);
    kb_gco_reconcile(e.co);
    /* the follower is at the log end before the commit */
    leo = kb_log_leo(part->log);
    kb_part_replica_fetched(part, 2, leo, 0, leo, kb_time_mono_ms());
    commit_req(&rq, &t, &p, g1, 99);
    CU_ASSERT_EQUAL_FATAL(kbat_send(e.fd, KP_APIKEY_OffsetCommit, 7, 501, NULL, &rq), 0);
    /* the records are in the log, the answer waits for the follower */
    for (int64_t dl = kb_time_mono_ms() + 5000; kb_log_leo(part->log) == leo;) {
        CU_ASSERT_FATAL(kb_time_mono_ms() < dl);
        poll(NULL, 0, 5);
    }
    CU_ASSERT(kbat_silent(e.fd, 200));
    kb_part_replica_fetched(part, 2, kb_log_leo(part->log), 0, kb_log_leo(part->log),
                            kb_time_mono_ms());
    CU_ASSERT_EQUAL_FATAL(kbat_recv(e.fd, KP_APIKEY_OffsetCommit, 7, 501, &r, &e.ar, 5000), 0);
    CU_ASSERT_EQUAL(commit_err(&r), 0);
    CU_ASSERT_EQUAL(fetch(&e, g1, &off), 0);
    CU_ASSERT_EQUAL(off, 99);
    /* leadership lost while waiting: NOT_COORDINATOR */
    commit_req(&rq, &t, &p, g1, 100);
    leo = kb_log_leo(part->log);
    CU_ASSERT_EQUAL_FATAL(kbat_send(e.fd, KP_APIKEY_OffsetCommit, 7, 502, NULL, &rq), 0);
    for (int64_t dl = kb_time_mono_ms() + 5000; kb_log_leo(part->log) == leo;) {
        CU_ASSERT_FATAL(kb_time_mono_ms() < dl);
        poll(NULL, 0, 5);
    }
    kb_part_repl_info(part, &pe, &leader, &pending);
    CU_ASSERT_EQUAL_FATAL(
        kb_part_become_follower(part, 2, kb_part_epoch(part) + 1, pe + 1, reps, 2, reps, 2), 0);
    CU_ASSERT_EQUAL_FATAL(kbat_recv(e.fd, KP_APIKEY_OffsetCommit, 7, 502, &r, &e.ar, 5000), 0);
    CU_ASSERT_EQUAL(commit_err(&r), KP_ERR_NOT_COORDINATOR);
    kb_part_release(part);
    env_stop(&e);
}

/* With the timer thread, a leader change in the metadata is enough: the coordinator unloads and
 * takes the partition back by itself. */
static void t_thread_follows_metadata(void)
{
    env_t e;
    char g1[32], g2[32], host[128];
    int32_t p1, p2, node, port, epoch, self, reps[2], isr1[1];
    int64_t off, dl;

    env_start(&e);
    self = kb_meta_node_id(e.b.svc->meta);
    mk_topic(&e, "t", 1);
    CU_ASSERT_EQUAL_FATAL(kb_gco_start(e.co), 0);
    CU_ASSERT_EQUAL(find(&e, "group-a", &node, host, sizeof(host), &port), 0);
    two_groups(&e, g1, g2, sizeof(g1), &p1, &p2);
    CU_ASSERT_EQUAL(commit(&e, g1, 5), 0);
    reps[0] = self;
    reps[1] = 2;
    change_leader(&e, p1, 2, reps, 2);
    for (dl = kb_time_mono_ms() + 5000; kb_gco_partition_state(e.co, p1, &epoch) != 0;) {
        CU_ASSERT_FATAL(kb_time_mono_ms() < dl);
        poll(NULL, 0, 5);
    }
    CU_ASSERT_EQUAL(fetch(&e, g1, &off), KP_ERR_NOT_COORDINATOR);
    isr1[0] = self;
    change_leader(&e, p1, self, isr1, 1);
    for (dl = kb_time_mono_ms() + 5000; kb_gco_partition_state(e.co, p1, &epoch) != 2;) {
        CU_ASSERT_FATAL(kb_time_mono_ms() < dl);
        poll(NULL, 0, 5);
    }
    CU_ASSERT_EQUAL(fetch(&e, g1, &off), 0);
    CU_ASSERT_EQUAL(off, 5);
    env_stop(&e);
}

int main(void)
{
    CU_pSuite s;
    unsigned fails;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("group coordinator ownership", NULL, NULL);
    CU_add_test(s, "follower and back", t_follower_and_back);
    CU_add_test(s, "commit waits for the HW", t_commit_waits_for_hw);
    CU_add_test(s, "the timer thread follows the metadata", t_thread_follows_metadata);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
