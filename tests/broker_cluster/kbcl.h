/*
 * kbcl.h -- the three-process kbroker cluster of the tests/broker_cluster C tests: node 1
 * broker,controller (PLAINTEXT and CONTROLLER listeners on ports the kernel picks, kept across
 * its restarts), nodes 2 and 3 broker-only registering with it. Start, kill and restart nodes;
 * DescribeCluster and Metadata views of one node; CreateTopics. One cluster per test program
 * (the state is global, as the tests are). Waiting is polling with deadlines.
 */
#ifndef KBCL_H
#define KBCL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "kbat.h"

#define KBCL_DEADLINE_MS  20000
#define KBCL_HEARTBEAT_MS 200
#define KBCL_SESSION_MS   1500

/** Failed CHECKs so far. */
extern int kbcl_failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            kbcl_failures++;                                                                       \
        }                                                                                          \
    } while (0)

typedef struct kbcl_node_s {
    int id;
    pid_t pid; /**< 0: not running */
    int out;   /**< its stdout (the readiness line) */
    int port;  /**< PLAINTEXT */
    int cport; /**< CONTROLLER (node 1) */
} kbcl_node_t;

/** Nodes 1..3 (index 0 unused). */
extern kbcl_node_t kbcl_nodes[4];
/** The cluster's directory: node i's data in n<i>, config server-<i>.properties, log
 *  kbroker-<i>.log. */
extern char kbcl_dir[512];

/** Set up: the kbroker binary, the cluster.id, more properties for every node ("k=v\n"...,
 *  may be NULL); makes a fresh directory. 0 or -1. */
int kbcl_init(const char *kbroker, const char *cluster_id, const char *extra);
/** Start node @p id (with the ports it had before, if any) and wait for its readiness line.
 *  0 or -1. */
int kbcl_start(int id);
/** Nodes 1, 2, 3 in that order (CHECKed), then until node 1 lists all three unfenced. 0, or -1
 *  with the failures counted. */
int kbcl_start_all(void);
/** The controller's port (node 1's CONTROLLER listener; 0 before its first start). */
int kbcl_cport(void);
/** Signal node @p id and wait for its exit; with @p expect_status >= 0 CHECK the exit status
 *  (128 + signal when killed by one). Nothing when it is not running. */
void kbcl_kill(int id, int sig, int expect_status);
/** SIGTERM to every running node (CHECKing its exit status when @p term_status >= 0), "ok" /
 *  "FAILED", the directory removed when nothing failed; the exit status of the test (0 or 1). */
int kbcl_finish(int term_status);

typedef struct kbcl_view_s {
    int nbrokers;
    int id[8], port[8];
    bool fenced[8];
    int controller_id;
} kbcl_view_t;

/** DescribeCluster v2 (with fenced brokers) on node @p via; 0 or -1. */
int kbcl_describe(int via, kbcl_view_t *v);
/** The state of broker @p id in @p v: 1 unfenced, 0 fenced, -1 absent. */
int kbcl_state_of(const kbcl_view_t *v, int id);
/** Poll DescribeCluster on node @p via until broker i has state w<i> (i = 1..3; 2 = any). The
 *  ms it took, or -1 on timeout (the last view printed). */
int64_t kbcl_wait_states(int via, int w1, int w2, int w3);

typedef struct kbcl_tview_s {
    int16_t err;
    kp_uuid_t id;
    int nparts;
    int leader[8], nreplicas[8], nisr[8];
    int replicas[8][4], isr[8][4];
} kbcl_tview_t;

/** Topic @p name as Metadata v12 on node @p via shows it (partitions 0..7); 0 (tv->err may be
 *  set) or -1. */
int kbcl_metadata_topic(int via, const char *name, kbcl_tview_t *tv);
/** CreateTopics v7 on node @p via: @p parts partitions, @p rf replicas, configs @p kv
 *  ({key, value, ..., NULL} or NULL). The error code (-100: no answer). */
int16_t kbcl_create_topic(int via, const char *name, int32_t parts, int16_t rf,
                          const char *const *kv);

#endif
