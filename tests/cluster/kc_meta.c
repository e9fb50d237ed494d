/*
 * kc_meta.c -- one broker's own view of the cluster metadata, as stable text, for comparing the
 * brokers of a test cluster with each other (tests/cluster, docs/testing-cluster.md).
 *
 *   kc_meta --broker HOST:PORT [--topic T]... [--timeout-ms MS] [-v]
 *
 * Sends one Metadata v12 request to exactly that broker (a Java client would route its requests
 * to whichever broker it likes) and prints, sorted:
 *
 *   brokers=1,2,3
 *   topic T id=<topic id, base64url as Kafka prints it> error=0
 *   partition T P leader=N epoch=E replicas=a,b,c isr=a,b offline= error=0
 *
 * Without --topic every topic is listed. The controller id and the cluster id are printed only
 * with -v (Kafka's brokers answer with a random live broker as the controller, so that line would
 * differ between brokers of a healthy cluster). Exit 0, 2 when the broker cannot be reached or
 * its answer cannot be decoded, 64 usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kp_arena.h"
#include "kp_msgs.h"
#include "kp_writer.h"
#include "kr_util.h"

#define KC_META_VERSION 12
#define KC_MAX_TOPICS   64

static void kc_usage(void)
{
    fprintf(stderr, "usage: kc_meta --broker HOST:PORT [--topic T]... [--timeout-ms MS] [-v]\n");
}

/* Kafka prints a Uuid as URL-safe base64 of its 16 bytes, without padding (22 characters). */
static void kc_uuid_str(const kp_uuid_t *u, char out[23])
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    int i, o = 0;
    for (i = 0; i < 15; i += 3) {
        uint32_t v = (uint32_t)u->b[i] << 16 | (uint32_t)u->b[i + 1] << 8 | u->b[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = tab[(v >> 6) & 63];
        out[o++] = tab[v & 63];
    }
    out[o++] = tab[u->b[15] >> 2];
    out[o++] = tab[(u->b[15] & 3) << 4];
    out[o] = '\0';
}

static void kc_ids(const int32_t *v, int32_t cnt, char *out, size_t outlen)
{
    size_t o = 0;
    int32_t i;
    out[0] = '\0';
    for (i = 0; i < cnt && o + 13 < outlen; i++)
        o += (size_t)snprintf(out + o, outlen - o, "%s%" PRId32, i ? "," : "", v[i]);
}

static int kc_int_cmp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int kc_topic_cmp(const void *a, const void *b)
{
    const kp_MetadataResponse_MetadataResponseTopic_t *x = a, *y = b;
    int32_t lx = x->Name.len < 0 ? 0 : x->Name.len, ly = y->Name.len < 0 ? 0 : y->Name.len;
    int c = memcmp(x->Name.ptr ? x->Name.ptr : "", y->Name.ptr ? y->Name.ptr : "",
                   (size_t)(lx < ly ? lx : ly));
    return c ? c : (lx > ly) - (lx < ly);
}

static int kc_part_cmp(const void *a, const void *b)
{
    const kp_MetadataResponse_MetadataResponsePartition_t *x = a, *y = b;
    return (x->PartitionIndex > y->PartitionIndex) - (x->PartitionIndex < y->PartitionIndex);
}

int main(int argc, char **argv)
{
    const char *broker = NULL, *topics[KC_MAX_TOPICS];
    int ntopics = 0, i, verbose = 0, fd, rc = 2;
    long timeout_ms = 10000;
    char host[256];
    int port;
    kp_MetadataRequest_t rq;
    kp_MetadataRequest_MetadataRequestTopic_t rt[KC_MAX_TOPICS];
    kp_MetadataResponse_t resp;
    kp_writer_t wr;
    kp_arena_t ar;
    uint8_t *buf = NULL;
    size_t len = 0;
    int64_t deadline;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--broker") == 0 && i + 1 < argc) {
            broker = argv[++i];
        } else if (strcmp(argv[i], "--topic") == 0 && i + 1 < argc) {
            if (ntopics == KC_MAX_TOPICS) {
                fprintf(stderr, "kc_meta: at most %d topics\n", KC_MAX_TOPICS);
                return 64;
            }
            topics[ntopics++] = argv[++i];
        } else if (strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc) {
            timeout_ms = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "-v") == 0) {
            verbose = 1;
        } else {
            kc_usage();
            return 64;
        }
    }
    {
        const char *colon = broker ? strrchr(broker, ':') : NULL;
        if (!colon || (size_t)(colon - broker) >= sizeof(host) || timeout_ms <= 0) {
            kc_usage();
            return 64;
        }
        memcpy(host, broker, (size_t)(colon - broker));
        host[colon - broker] = '\0';
        port = atoi(colon + 1);
        if (port <= 0 || port > 65535) {
            kc_usage();
            return 64;
        }
    }
    deadline = kr_now_ms() + timeout_ms;

    kp_MetadataRequest_init(&rq);
    if (ntopics > 0) {
        for (i = 0; i < ntopics; i++) {
            kp_MetadataRequest_MetadataRequestTopic_init(&rt[i]);
            rt[i].Name = kp_str(topics[i]);
        }
        rq.Topics.cnt = ntopics;
        rq.Topics.v = rt;
    } else {
        rq.Topics.cnt = -1; /* every topic */
        rq.Topics.v = NULL;
    }
    rq.AllowAutoTopicCreation = false;

    fd = kr_connect(host, port, (int)timeout_ms);
    if (fd < 0) {
        fprintf(stderr, "kc_meta: cannot connect to %s (refused or timed out)\n", broker);
        return 2;
    }
    kp_writer_init(&wr);
    kp_arena_init(&ar, 64u << 20);
    kp_MetadataResponse_init(&resp);
    if (kr_req_build(&wr, KP_APIKEY_Metadata, KC_META_VERSION, 1, "kc_meta",
                     &kp_MetadataRequest_desc, &rq) != 0 ||
        wr.err) {
        fprintf(stderr, "kc_meta: cannot encode the Metadata request\n");
        goto out;
    }
    if (kr_send_all(fd, wr.buf, wr.len, deadline) != 0) {
        fprintf(stderr, "kc_meta: %s: send failed\n", broker);
        goto out;
    }
    if (kr_recv_frame(fd, &buf, &len, deadline) != KR_RX_FRAME) {
        fprintf(stderr, "kc_meta: %s: no Metadata answer before the deadline\n", broker);
        goto out;
    }
    if (kr_resp_decode(buf, len, KP_APIKEY_Metadata, KC_META_VERSION, 1, &ar, &resp) != 0 ||
        resp.Brokers.cnt < 0 || resp.Topics.cnt < 0) {
        fprintf(stderr, "kc_meta: %s: undecodable Metadata v%d answer\n", broker, KC_META_VERSION);
        goto out;
    }
    {
        int32_t *ids = calloc((size_t)resp.Brokers.cnt + 1, sizeof(int32_t));
        char line[4096];
        if (!ids)
            goto out;
        for (i = 0; i < resp.Brokers.cnt; i++)
            ids[i] = resp.Brokers.v[i].NodeId;
        qsort(ids, (size_t)resp.Brokers.cnt, sizeof(int32_t), kc_int_cmp);
        kc_ids(ids, resp.Brokers.cnt, line, sizeof(line));
        free(ids);
        printf("brokers=%s\n", line);
    }
    if (verbose)
        printf("# cluster=%.*s controller=%" PRId32 "\n",
               resp.ClusterId.len > 0 ? (int)resp.ClusterId.len : 0,
               resp.ClusterId.ptr ? resp.ClusterId.ptr : "", resp.ControllerId);
    if (resp.Topics.cnt > 0)
        qsort(resp.Topics.v, (size_t)resp.Topics.cnt, sizeof(resp.Topics.v[0]), kc_topic_cmp);
    for (i = 0; i < resp.Topics.cnt; i++) {
        kp_MetadataResponse_MetadataResponseTopic_t *t = &resp.Topics.v[i];
        int nlen = t->Name.len > 0 ? (int)t->Name.len : 0;
        const char *name = t->Name.ptr ? t->Name.ptr : "";
        char uuid[23];
        int32_t p;
        kc_uuid_str(&t->TopicId, uuid);
        printf("topic %.*s id=%s error=%d\n", nlen, name, uuid, (int)t->ErrorCode);
        if (t->Partitions.cnt <= 0)
            continue;
        qsort(t->Partitions.v, (size_t)t->Partitions.cnt, sizeof(t->Partitions.v[0]), kc_part_cmp);
        for (p = 0; p < t->Partitions.cnt; p++) {
            kp_MetadataResponse_MetadataResponsePartition_t *pp = &t->Partitions.v[p];
            char reps[1024], isr[1024], off[1024];
            kc_ids(pp->ReplicaNodes.v, pp->ReplicaNodes.cnt, reps, sizeof(reps));
            kc_ids(pp->IsrNodes.v, pp->IsrNodes.cnt, isr, sizeof(isr));
            kc_ids(pp->OfflineReplicas.v, pp->OfflineReplicas.cnt, off, sizeof(off));
            printf("partition %.*s %" PRId32 " leader=%" PRId32 " epoch=%" PRId32
                   " replicas=%s isr=%s offline=%s error=%d\n",
                   nlen, name, pp->PartitionIndex, pp->LeaderId, pp->LeaderEpoch, reps, isr, off,
                   (int)pp->ErrorCode);
        }
    }
    rc = 0;
out:
    free(buf);
    kp_arena_free(&ar);
    kp_writer_free(&wr);
    close(fd);
    return rc;
}
