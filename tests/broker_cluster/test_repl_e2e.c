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
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kbcl.h"
#include "kp_batch.h"
#include "kp_errcode.h"

#define CLUSTER_ID "kbrokerReplTest0000001"
/* follower lag and fetch backoff short enough for the test */
#define KBCL_REPL_EXTRA "replica.lag.time.max.ms=1500\nreplica.fetch.backoff.ms=200\n"

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
        snprintf(path, sizeof(path), "%s/n%d/" TOPIC "-%d/00000000000000000000.log", kbcl_dir, id,
                 p);
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
    int64_t dl = kbat_now_ms() + KBCL_DEADLINE_MS;
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
    int64_t dl = kbat_now_ms() + KBCL_DEADLINE_MS;
    struct pollfd none = {.fd = -1};
    kbcl_tview_t tv;
    while (kbat_now_ms() < dl) {
        if (kbcl_metadata_topic(via, TOPIC, &tv) == 0 && tv.err == 0 && tv.nparts > p &&
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
    int ok = 0, fd = kbat_connect(kbcl_nodes[leader].port);
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

int main(int argc, char **argv)
{
    static const char *const mir2[] = {"min.insync.replicas", "2", NULL};
    kbcl_tview_t tv;
    int p = -1, leader = -1, victim = -1;

    if (argc != 2) {
        fprintf(stderr, "usage: %s KBROKER\n", argv[0]);
        return 2;
    }
    if (kbcl_init(argv[1], CLUSTER_ID, KBCL_REPL_EXTRA) != 0)
        return 2;

    if (kbcl_start_all() != 0)
        goto out;
    CHECK(kbcl_create_topic(1, TOPIC, 3, 3, mir2) == 0, "CreateTopics RF 3, min.insync.replicas=2");
    /* the partition led by a broker-only node (the combined node sends no AlterPartition) */
    CHECK(kbcl_metadata_topic(1, TOPIC, &tv) == 0 && tv.err == 0 && tv.nparts == 3,
          "topic metadata");
    for (int k = 0; k < tv.nparts && k < 3 && p < 0; k++)
        if (tv.leader[k] == 2 || tv.leader[k] == 3)
            p = k;
    CHECK(p >= 0, "a partition led by node 2 or 3");
    if (kbcl_failures)
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
    kbcl_kill(victim, SIGKILL, -1);
    CHECK(wait_isr(p, leader, 2), "ISR of two without node %d", victim);
    CHECK(produce_all(leader, p, 20) == 20, "acks=all produce with two in sync");

    /* 3. restart: it catches up and rejoins; the replicas are identical again */
    CHECK(kbcl_start(victim) == 0, "restart node %d", victim);
    CHECK(wait_isr(p, leader, 3), "node %d back in the ISR", victim);
    CHECK(produce_all(leader, p, 5) == 5, "acks=all produce with three in sync again");
    CHECK(wait_equal(p, 45 * 10 * 10), "the three replicas hold the same bytes again");

out:
    return kbcl_finish(-1);
}
