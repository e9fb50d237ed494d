/*
 * test_kbx_cluster.c -- the kbx plugin host in a three-process kbroker cluster (node 1
 * broker,controller; nodes 2 and 3 broker-only), each loading tests/broker_host's test plugin
 * (driven through its ListMirrors RPC, the command in the client id):
 *   - the leadership listener on every broker reports a replicated partition with the leader
 *     the image names: ROLE_LEADER on that broker, ROLE_FOLLOWER with the same leader_id on
 *     the two others;
 *   - broker_request from node 2's plugin reaches node 3 (ApiVersions answer), itself, and
 *     refuses an unknown broker id (KBX_ERR_NOT_FOUND);
 *   - after kill -9 of the partition's leader (a broker-only node), both survivors report the
 *     new leader (elected by the controller) with a higher leader epoch, the new leader as
 *     ROLE_LEADER; a broker_request to the dead broker fails instead of reaching another one;
 *   - wait_isr_truncation on a broker-only leader after it truncated its log completes only
 *     once both followers truncated (their logs end at the offset when it completes), and
 *     with KBX_ISR_WAIT_ALL_REPLICAS times out while a follower is SIGSTOPped; a truncation
 *     inside a batch ends every replica at the batch's base offset;
 *   - leader_epoch_bump by the plugin of a broker-only leader goes through the controller
 *     (BumpLeaderEpochs): it completes once that broker applied the epoch (listener first, the
 *     handle fenced) and all three plugins report the new epoch;
 *   - with the controller killed, a bump on a broker-only node fails retriably (NETWORK or
 *     TIMEOUT) within its timeout, and the log names the controller;
 *   - an old per-node plugin-record file on the controller is moved into the metadata log once
 *     (renamed .migrated) and reaches every plugin;
 *   - controller_write from broker-only nodes reaches the controller's metadata log and every
 *     plugin's metadata listener (the writer's before the completion), deletes too, and
 *     survives a restart of a broker-only node (SIGTERM) and of the controller (kill -9);
 *   - every plugin's metadata deltas name all three brokers registered (the snapshot of a
 *     restarted node too), and the survivors' name a killed broker fenced;
 *   - SIGTERM of the nodes exits 0 (plugin unloaded, host and its client stopped).
 * Waiting is polling with deadlines, never sleeping.
 *
 * usage: broker_cluster_kbx KBROKER PLUGIN
 */
#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kbcl.h"
#include "kbx.h"
#include "kp_batch.h"
#include "kp_crc32c.h"
#include "kp_errcode.h"

#define CLUSTER_ID "kbrokerKbxClusterTest1"
#define TOPIC      "kbx-lead"

static void pace(void)
{
    struct pollfd none = {.fd = -1};
    poll(&none, 0, 50); /* pacing of a polling loop */
}

/* The values of the plugin's results of @p command on node @p via, by result name (@p names,
 * @p vals, @p n). 0 when every result was "ok", else -1. */
static int plugin_cmd(int via, const char *command, const char *const *names, int32_t *vals, int n)
{
    kp_ListMirrorsRequest_t rq;
    kp_ListMirrorsResponse_t resp;
    kp_arena_t ar;
    int fd = kbat_connect(kbcl_nodes[via].port), rc = -1;

    if (fd < 0)
        return -1;
    kp_arena_init(&ar, 0);
    kp_ListMirrorsRequest_init(&rq);
    if (kbat_send(fd, 98, 0, 11, command, &rq) == 0 &&
        kbat_recv(fd, 98, 0, 11, &resp, &ar, KBCL_DEADLINE_MS) == 0 && resp.Mirrors.cnt > 0) {
        rc = 0;
        for (int32_t i = 0; i < resp.Mirrors.cnt; i++) {
            const kp_ListMirrorsResponse_ListedMirror_t *m = &resp.Mirrors.v[i];
            if (m->SourceBootstrap.len != 2 || memcmp(m->SourceBootstrap.ptr, "ok", 2))
                rc = -1;
            for (int k = 0; k < n; k++)
                if (m->MirrorName.len == (int32_t)strlen(names[k]) &&
                    !memcmp(m->MirrorName.ptr, names[k], strlen(names[k])))
                    vals[k] = m->TopicCount;
        }
    }
    kp_arena_free(&ar);
    close(fd);
    return rc;
}

/* Leadership of TOPIC-@p part as node @p via's plugin last heard it: 0 or -1 (none yet). */
static int lead_of(int via, int part, int32_t *role, int32_t *leader, int32_t *epoch)
{
    static const char *const names[] = {"lead_role", "lead_leader", "lead_epoch"};
    int32_t v[3] = {-1, -1, -1};
    char c[64];
    int rc;
    snprintf(c, sizeof(c), "lead:" TOPIC ":%d", part);
    rc = plugin_cmd(via, c, names, v, 3);
    *role = v[0];
    *leader = v[1];
    *epoch = v[2];
    return rc;
}

/* Poll until the plugins of the live nodes in @p nodes all report TOPIC-@p part led by
 * @p leader (ROLE_LEADER there, ROLE_FOLLOWER elsewhere) at epoch >= @p min_epoch. The epoch
 * the leader reports, or -1. */
static int32_t wait_lead(const int *nodes, int nn, int part, int32_t leader, int32_t min_epoch)
{
    int64_t dl = kbat_now_ms() + KBCL_DEADLINE_MS;
    int32_t role = -1, got = -1, epoch = -1, lepoch = -1;
    int bad = 0;

    while (kbat_now_ms() < dl) {
        bad = 0;
        for (int i = 0; i < nn && !bad; i++) {
            int want = nodes[i] == leader ? KBX_ROLE_LEADER : KBX_ROLE_FOLLOWER;
            if (lead_of(nodes[i], part, &role, &got, &epoch) != 0 || role != want ||
                got != leader || epoch < min_epoch)
                bad = nodes[i];
            else if (nodes[i] == leader)
                lepoch = epoch;
        }
        if (!bad)
            return lepoch;
        pace();
    }
    CHECK(0, "node %d reports %s-%d role %d leader %d epoch %d; expected leader %d epoch >= %d",
          bad, TOPIC, part, role, got, epoch, leader, min_epoch);
    return -1;
}

/* The leaders of TOPIC's partitions per Metadata on node @p via (@p leader[0..2]); 0 or -1. */
static int topic_leaders(int via, int32_t *leader)
{
    kp_MetadataRequest_t rq;
    kp_MetadataResponse_t resp;
    kp_MetadataRequest_MetadataRequestTopic_t t;
    kp_arena_t ar;
    int fd = kbat_connect(kbcl_nodes[via].port), rc = -1;

    if (fd < 0)
        return -1;
    kp_arena_init(&ar, 0);
    kp_MetadataRequest_init(&rq);
    kp_MetadataRequest_MetadataRequestTopic_init(&t);
    t.Name = (kp_str_t){TOPIC, (int32_t)strlen(TOPIC)};
    rq.Topics.v = &t;
    rq.Topics.cnt = 1;
    if (kbat_call(fd, KP_APIKEY_Metadata, 12, &rq, &resp, &ar) == 0 && resp.Topics.cnt == 1 &&
        resp.Topics.v[0].ErrorCode == 0 && resp.Topics.v[0].Partitions.cnt == 3) {
        rc = 0;
        for (int32_t i = 0; i < 3; i++) {
            int32_t k = resp.Topics.v[0].Partitions.v[i].PartitionIndex;
            if (k >= 0 && k < 3)
                leader[k] = resp.Topics.v[0].Partitions.v[i].LeaderId;
        }
    }
    kp_arena_free(&ar);
    close(fd);
    return rc;
}

static void breq(int via, int to, int32_t *status, int32_t *ec, int32_t *keys)
{
    static const char *const names[] = {"breq_status", "breq_error", "breq_keys"};
    int32_t v[3] = {-100, -100, -100};
    char c[32];
    snprintf(c, sizeof(c), "breq:%d", to);
    CHECK(plugin_cmd(via, c, names, v, 3) == 0, "node %d: command %s failed", via, c);
    *status = v[0];
    *ec = v[1];
    *keys = v[2];
}

/* leader_epoch_bump of TOPIC-@p part to at least @p min by node @p via's plugin: its status,
 * the epoch its leadership listener had at the completion, log_offsets on the old handle
 * afterwards, and the milliseconds it took. */
static void cbump(int via, int part, int32_t min, int32_t timeout_ms, int32_t *status,
                  int32_t *seen, int32_t *fenced, int32_t *ms)
{
    static const char *const names[] = {"cbump_status", "cbump_seen", "cbump_fenced", "cbump_ms"};
    int32_t v[4] = {-100, -100, -100, -100};
    char c[96];
    snprintf(c, sizeof(c), "cbump:" TOPIC ":%d,%d,%d", part, (int)min, (int)timeout_ms);
    CHECK(plugin_cmd(via, c, names, v, 4) == 0, "node %d: command %s failed", via, c);
    *status = v[0];
    *seen = v[1];
    *fenced = v[2];
    *ms = v[3];
}

/* Produce @p n records (one batch) to TOPIC-@p part through node @p via with @p acks: the
 * Kafka error code, or -100. */
static int16_t produce(int via, int part, int n, int16_t acks)
{
    kp_writer_t wr;
    int64_t base = -1;
    int16_t ec = -100;
    int fd = kbat_connect(kbcl_nodes[via].port);
    if (fd < 0)
        return ec;
    kp_writer_init(&wr);
    kbat_batch(&wr, KP_CODEC_NONE, n, "kbx", -1, -1, -1, false, false);
    ec = kbat_produce(fd, 9, TOPIC, part, acks, &wr, &base, NULL);
    kp_writer_free(&wr);
    close(fd);
    return ec;
}

/* Log end offset of node @p via's replica of TOPIC-@p part, as its plugin reads it (-1). */
static int32_t leo_of(int via, int part)
{
    static const char *const names[] = {"offs_leo"};
    int32_t v[1] = {-1};
    char c[64];
    snprintf(c, sizeof(c), "offs:" TOPIC ":%d", part);
    if (plugin_cmd(via, c, names, v, 1) != 0)
        return -1;
    return v[0];
}

/* Poll until node @p via's replica of TOPIC-@p part ends at @p leo. */
static void wait_leo(int via, int part, int32_t leo)
{
    int64_t dl = kbat_now_ms() + KBCL_DEADLINE_MS;
    int32_t got = -1;
    while (kbat_now_ms() < dl && (got = leo_of(via, part)) != leo)
        pace();
    CHECK(got == leo, "node %d: %s-%d ends at %d, expected %d", via, TOPIC, part, got, leo);
}

/* log_truncate(@p off) then wait_isr_truncation(@p off, @p flags, @p timeout_ms) by node
 * @p via's plugin: the status and the milliseconds it took. */
static void itrunc(int via, int part, int32_t off, int flags, int32_t timeout_ms, int32_t *status,
                   int32_t *ms)
{
    static const char *const names[] = {"itrunc_status", "itrunc_ms"};
    int32_t v[2] = {-100, -100};
    char c[96];
    snprintf(c, sizeof(c), "itrunc:" TOPIC ":%d,%d,%d,%d", part, (int)off, flags, (int)timeout_ms);
    CHECK(plugin_cmd(via, c, names, v, 2) == 0, "node %d: command %s failed", via, c);
    *status = v[0];
    *ms = v[1];
}

/* controller_write of KEY=VALUE ("-": delete) by node @p via's plugin: the status and the value
 * its own listener held for KEY at the completion (-1 absent). */
static void cwrite(int via, const char *key, const char *value, int32_t *status, int32_t *seen)
{
    static const char *const names[] = {"cwrite_status", "cwrite_seen"};
    int32_t v[2] = {-100, -100};
    char c[96];
    snprintf(c, sizeof(c), "cwrite:%s:%s", key, value);
    CHECK(plugin_cmd(via, c, names, v, 2) == 0, "node %d: command %s failed", via, c);
    *status = v[0];
    *seen = v[1];
}

/* Poll until node @p via's plugin holds @p want (-1: absent) for plugin record @p key. */
static void wait_rec(int via, const char *key, int32_t want)
{
    static const char *const names[] = {"crec_value"};
    int64_t dl = kbat_now_ms() + KBCL_DEADLINE_MS;
    int32_t got = -100;
    char c[64];
    snprintf(c, sizeof(c), "crec:%s", key);
    while (kbat_now_ms() < dl) {
        int32_t v[1] = {-100};
        if (plugin_cmd(via, c, names, v, 1) == 0 && (got = v[0]) == want)
            return;
        pace();
    }
    CHECK(0, "node %d: plugin record %s is %d, expected %d", via, key, got, want);
}

/* Poll until node @p via's plugin heard (metadata deltas) exactly the brokers of bit masks
 * @p reg registered and @p fen fenced. */
static void wait_brokers(int via, int32_t reg, int32_t fen)
{
    static const char *const names[] = {"brokers_registered", "brokers_fenced"};
    int64_t dl = kbat_now_ms() + KBCL_DEADLINE_MS;
    int32_t v[2] = {-1, -1};
    while (kbat_now_ms() < dl) {
        if (plugin_cmd(via, "brokers", names, v, 2) == 0 && v[0] == reg && v[1] == fen)
            return;
        pace();
    }
    CHECK(0, "node %d: brokers registered 0x%x fenced 0x%x, expected 0x%x and 0x%x", via,
          (unsigned)v[0], (unsigned)v[1], (unsigned)reg, (unsigned)fen);
}

/* A pre-cluster plugin-record file (docs/broker.md "Plugin records": "KBXREC01", count, type,
 * key length, key, value length, value, CRC-32C; big-endian) in node @p id's log dir holding
 * @p key = @p value (type 7, the test plugin's). 0 or -1. */
static int write_old_records(int id, const char *key, const char *value)
{
    uint8_t buf[256];
    size_t o = 0, kl = strlen(key), vl = strlen(value);
    char path[700];
    FILE *f;
    uint32_t crc;
#define PUT32(v)                                                                                   \
    do {                                                                                           \
        uint32_t x_ = (uint32_t)(v);                                                               \
        buf[o++] = (uint8_t)(x_ >> 24);                                                            \
        buf[o++] = (uint8_t)(x_ >> 16);                                                            \
        buf[o++] = (uint8_t)(x_ >> 8);                                                             \
        buf[o++] = (uint8_t)x_;                                                                    \
    } while (0)
    memcpy(buf, "KBXREC01", 8);
    o = 8;
    PUT32(1);
    PUT32(7);
    PUT32(kl);
    memcpy(buf + o, key, kl);
    o += kl;
    PUT32(vl);
    memcpy(buf + o, value, vl);
    o += vl;
    crc = kp_crc32c(0, buf, o);
    PUT32(crc);
#undef PUT32
    snprintf(path, sizeof(path), "%s/n%d", kbcl_dir, id);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/n%d/kbroker-plugin-records", kbcl_dir, id);
    if (!(f = fopen(path, "wb")))
        return -1;
    if (fwrite(buf, 1, o, f) != o) {
        fclose(f);
        return -1;
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* Whether node @p id's log has a line containing both @p a and @p b. */
static bool log_has(int id, const char *a, const char *b)
{
    char path[700], line[2048];
    bool found = false;
    FILE *f;
    snprintf(path, sizeof(path), "%s/kbroker-%d.log", kbcl_dir, id);
    if (!(f = fopen(path, "r")))
        return false;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, a) && strstr(line, b);
    fclose(f);
    return found;
}

int main(int argc, char **argv)
{
    int32_t leader[3] = {-1, -1, -1}, st, ec, keys, e0, e1, eb, seen, fenced, ms;
    int part = -1, victim, other, newl = -1;
    int64_t dl;
    static char extra[1024];

    if (argc != 3) {
        fprintf(stderr, "usage: %s KBROKER PLUGIN\n", argv[0]);
        return 2;
    }
    /* every node loads the test plugin */
    snprintf(extra, sizeof(extra), "plugin.paths=mirror.enable=%s\nmirror.enable=true\n", argv[2]);
    if (kbcl_init(argv[1], CLUSTER_ID, extra) != 0)
        return 2;

    /* node 1 (the controller) starts with an old per-node plugin-record file: moved into the
     * metadata log once, the file renamed .migrated */
    CHECK(write_old_records(1, "kmig", "33") == 0, "write node 1's old plugin-record file");
    CHECK(kbcl_start(1) == 0 && kbcl_cport() > 0, "start node 1");
    CHECK(kbcl_start(2) == 0, "start node 2");
    CHECK(kbcl_start(3) == 0, "start node 3");
    if (kbcl_failures)
        goto out;

    /* RF 3 over the three brokers once all registered: leaders striped over 1, 2, 3 */
    dl = kbat_now_ms() + KBCL_DEADLINE_MS;
    while (kbcl_create_topic(1, TOPIC, 3, 3, NULL) != 0 && kbat_now_ms() < dl)
        pace();
    CHECK(topic_leaders(1, leader) == 0, "Metadata of %s on node 1", TOPIC);
    for (int k = 0; k < 3; k++)
        if (leader[k] == 3)
            part = k;
    CHECK(part >= 0, "a partition of %s led by node 3 (leaders %d %d %d)", TOPIC, leader[0],
          leader[1], leader[2]);
    if (kbcl_failures)
        goto out;

    /* every plugin hears every partition with the image's leader */
    {
        static const int all[] = {1, 2, 3};
        for (int k = 0; k < 3; k++)
            wait_lead(all, 3, k, leader[k], 0);
    }
    e0 = wait_lead((const int[]){1, 2, 3}, 3, part, 3, 0);

    /* every plugin's metadata deltas name the three brokers, none fenced */
    for (int n = 1; n <= 3; n++)
        wait_brokers(n, 0xe, 0);

    /* broker_request: node 2 -> node 3, node 2 -> itself, node 2 -> unknown */
    breq(2, 3, &st, &ec, &keys);
    CHECK(st == KBX_OK && ec == 0 && keys > 10,
          "node 2 -> node 3 ApiVersions: status %d, error "
          "%d, %d keys",
          st, ec, keys);
    breq(2, 2, &st, &ec, &keys);
    CHECK(st == KBX_OK && ec == 0 && keys > 10, "node 2 -> itself: status %d error %d", st, ec);
    breq(2, 9, &st, &ec, &keys);
    CHECK(st == KBX_ERR_NOT_FOUND, "node 2 -> unknown broker 9: status %d", st);
    breq(3, 1, &st, &ec, &keys);
    CHECK(st == KBX_OK && ec == 0, "node 3 -> node 1 (controller): status %d error %d", st, ec);

    /* wait_isr_truncation on the leader (node 3): 30 records on all three replicas, the
     * leader truncates to 10; the wait completes only once both followers truncated too
     * (their replicas end at 10 the moment it completes, no polling) */
    for (int b = 0; b < 3; b++)
        CHECK(produce(3, part, 10, -1) == 0, "produce to %s-%d", TOPIC, part);
    for (int n = 1; n <= 3; n++)
        wait_leo(n, part, 30);
    itrunc(3, part, 10, 0, 5000, &st, &ms);
    CHECK(st == KBX_OK, "wait_isr_truncation after truncating to 10: status %d", st);
    CHECK(leo_of(1, part) == 10 && leo_of(2, part) == 10,
          "followers not truncated when the wait completed: node 1 at %d, node 2 at %d",
          leo_of(1, part), leo_of(2, part));
    /* inside a batch: 10 more records (10..19), truncated to 15; as Kafka the whole batch goes,
     * so the leader and, when the wait completes, both followers end at 10 */
    CHECK(produce(3, part, 10, -1) == 0, "produce to %s-%d", TOPIC, part);
    for (int n = 1; n <= 3; n++)
        wait_leo(n, part, 20);
    itrunc(3, part, 15, 0, 5000, &st, &ms);
    CHECK(st == KBX_OK, "wait_isr_truncation after truncating inside a batch: status %d", st);
    CHECK(leo_of(3, part) == 10 && leo_of(1, part) == 10 && leo_of(2, part) == 10,
          "truncation to 15 inside batch 10..19: node 3 at %d, node 1 at %d, node 2 at %d",
          leo_of(3, part), leo_of(1, part), leo_of(2, part));

    /* a follower stopped (SIGSTOP node 2, shorter than the session timeout): 20 more records
     * (acks=1) reach node 1 only; after truncating to 20 (batch boundaries) the wait for
     * ALL_REPLICAS times out; resumed, node 2 catches up and the wait completes */
    kill(kbcl_nodes[2].pid, SIGSTOP);
    for (int b = 0; b < 2; b++)
        CHECK(produce(3, part, 10, 1) == 0, "produce (acks=1) to %s-%d", TOPIC, part);
    wait_leo(1, part, 30);
    itrunc(3, part, 20, KBX_ISR_WAIT_ALL_REPLICAS, 600, &st, &ms);
    CHECK(st == KBX_ERR_TIMEOUT && ms >= 550,
          "wait for all replicas with node 2 stopped: status %d after %d ms", st, ms);
    kill(kbcl_nodes[2].pid, SIGCONT);
    itrunc(3, part, 20, KBX_ISR_WAIT_ALL_REPLICAS, 5000, &st, &ms);
    CHECK(st == KBX_OK, "wait for all replicas with node 2 back: status %d", st);
    CHECK(leo_of(1, part) == 20 && leo_of(2, part) == 20,
          "replicas not truncated when the wait completed: node 1 at %d, node 2 at %d",
          leo_of(1, part), leo_of(2, part));

    /* leader_epoch_bump by the plugin of the broker-only leader (node 3): BumpLeaderEpochs to
     * the controller, completed once node 3 applied the new epoch (its listener saw it, the
     * handle is fenced); every broker's plugin then reports it, node 3 still leading */
    cbump(3, part, e0 + 5, 5000, &st, &seen, &fenced, &ms);
    CHECK(st == KBX_OK && seen >= e0 + 5 && fenced == KBX_ERR_FENCED,
          "node 3 bump of %s-%d to >= %d: status %d, listener epoch %d at completion, old handle "
          "%d",
          TOPIC, part, e0 + 5, st, seen, fenced);
    eb = wait_lead((const int[]){1, 2, 3}, 3, part, 3, e0 + 5);
    CHECK(eb >= e0 + 5, "epoch %d after the bump, %d before", eb, e0);
    e0 = eb;

    /* controller_write from broker-only nodes: through the controller into the metadata log,
     * seen by the writer's listener before the completion and by all three plugins; a delete;
     * node 2 restarted (SIGTERM: its image snapshot at close, then the log) sees the same */
    for (int n = 1; n <= 3; n++)
        wait_rec(n, "kmig", 33);
    {
        char p1[700], p2[700];
        snprintf(p1, sizeof(p1), "%s/n1/kbroker-plugin-records", kbcl_dir);
        snprintf(p2, sizeof(p2), "%s/n1/kbroker-plugin-records.migrated", kbcl_dir);
        CHECK(access(p1, F_OK) != 0 && access(p2, F_OK) == 0,
              "node 1's old plugin-record file renamed .migrated");
    }
    cwrite(2, "kc1", "11", &st, &seen);
    CHECK(st == KBX_OK && seen == 11, "node 2 controller_write kc1=11: status %d, seen %d", st,
          seen);
    cwrite(3, "kc2", "22", &st, &seen);
    CHECK(st == KBX_OK && seen == 22, "node 3 controller_write kc2=22: status %d, seen %d", st,
          seen);
    for (int n = 1; n <= 3; n++) {
        wait_rec(n, "kc1", 11);
        wait_rec(n, "kc2", 22);
    }
    cwrite(2, "kc1", "-", &st, &seen);
    CHECK(st == KBX_OK && seen == -1, "node 2 deletes kc1: status %d, seen %d", st, seen);
    for (int n = 1; n <= 3; n++)
        wait_rec(n, "kc1", -1);
    kbcl_kill(2, SIGTERM, 0);
    CHECK(kbcl_start(2) == 0, "restart node 2");
    wait_rec(2, "kc2", 22);
    wait_rec(2, "kc1", -1);
    wait_brokers(2, 0xe, 0); /* its snapshot */

    /* kill -9 the leader (node 3): the controller fences it and elects node 1 or 2; both
     * survivors' plugins name the new leader, with a higher epoch */
    kbcl_kill(3, SIGKILL, -1);
    victim = 3;
    dl = kbat_now_ms() + KBCL_DEADLINE_MS;
    while (kbat_now_ms() < dl) {
        int32_t l[3] = {-1, -1, -1};
        if (topic_leaders(1, l) == 0 && (l[part] == 1 || l[part] == 2)) {
            newl = l[part];
            break;
        }
        pace();
    }
    CHECK(newl == 1 || newl == 2, "no new leader for %s-%d after node %d died", TOPIC, part,
          victim);
    if (kbcl_failures)
        goto out;
    other = newl == 1 ? 2 : 1;
    e1 = wait_lead((const int[]){newl, other}, 2, part, newl, e0 + 1);
    CHECK(e1 > e0, "leader epoch %d after the election, %d before", e1, e0);
    /* the survivors' deltas name node 3 fenced (a delta of the fencing, not a snapshot) */
    wait_brokers(1, 0x6, 0x8);
    wait_brokers(2, 0x6, 0x8);

    /* the dead broker is not reached through another one */
    breq(2, 3, &st, &ec, &keys);
    CHECK(st != KBX_OK && st != KBX_ERR_NOT_FOUND, "node 2 -> dead node 3: status %d", st);
    breq(2, 1, &st, &ec, &keys);
    CHECK(st == KBX_OK && ec == 0, "node 2 -> node 1 still answers: status %d error %d", st, ec);

    /* the controller (node 1) gone: a bump on node 2 fails retriably within its timeout
     * (KBX_ERR_NETWORK or KBX_ERR_TIMEOUT), with a log line naming the controller */
    kbcl_kill(1, SIGKILL, -1);
    cbump(2, part, 0, 2000, &st, &seen, &fenced, &ms);
    CHECK((st == KBX_ERR_NETWORK || st == KBX_ERR_TIMEOUT) && ms < 3500,
          "node 2 bump with the controller down: status %d after %d ms", st, ms);
    CHECK(log_has(2, "leader_epoch_bump", "controller 1"),
          "node 2's log names controller 1 for the failed bump");

    /* the controller restarted after kill -9 (no close snapshot: its metadata log) holds the
     * plugin records as they were; clean stops of both */
    CHECK(kbcl_start(1) == 0, "restart node 1");
    wait_rec(1, "kc2", 22);
    wait_rec(1, "kc1", -1);
    kbcl_kill(2, SIGTERM, 0);
    kbcl_kill(1, SIGTERM, 0);

out:
    for (int i = 3; i >= 1; i--)
        kbcl_kill(i, SIGKILL, -1);
    return kbcl_finish(-1);
}
