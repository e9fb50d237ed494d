/*
 * test_txn_unit.c -- CUnit: Java's String.hashCode and the transactional-id partition,
 * __transaction_state records against bytes written by Apache Kafka 4.4.0 (value v0 under
 * transaction.version 0, v1 under 1 and 2), and the transaction state machine (kb_txnsm).
 */
#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_err.h"
#include "kb_txnlog.h"
#include "kb_txnsm.h"
#include "kp_errcode.h"
#include "kp_writer.h"

static size_t unhex(const char *h, uint8_t *out, size_t cap)
{
    size_t n = strlen(h) / 2;
    CU_ASSERT_FATAL(n <= cap);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
    return n;
}

/* ---- hash ------------------------------------------------------------------------------------ */

/* UTF-8 bytes (hex), Java's new String(bytes, UTF_8).hashCode(), and abs(hash) % 50 -- all
 * computed by a JVM. Ill-formed input decodes to U+FFFD per maximal subpart. */
static const struct {
    const char *hex;
    int32_t hash;
    int32_t part50;
} kb_java_hashes[] = {
    {"", 0, 0},
    {"61", 97, 47},
    {"68656c6c6f", 99162322, 22},
    {"706f6c7967656e656c75627269636174616e7473", -2142509645, 45},
    {"6b632d6a6176612d74786e2d6964", 36975732, 32},
    {"c3a9", 233, 33},
    {"e282ac", 8364, 14},
    {"f09f9880", 1772899, 49},
    {"f09f98806162", 1703759044, 44},
    {"ff", 65533, 33},
    {"c0af", 2097056, 6},
    {"e080af", 65074269, 19},
    {"eda080", 65533, 33},
    {"f4908080", 2017367872, 22},
    {"e282", 65533, 33},
    {"61e2", 68540, 40},
    {"f0", 65533, 33},
    {"f09f98", 65533, 33},
    {"f09f9861", 2031620, 20},
    {"80", 65533, 33},
    {"c2", 65533, 33},
    {"edbfbf", 65533, 33},
    {"efbfbd", 65533, 33},
    {"f48fbfbf", 1803232, 32},
    {"e0a080", 2048, 48},
    {"c280", 128, 28},
    {"64c3a96ac3a0", 3206523, 23},
    {"6b62333836303030e0b88933", -2147483648, 0}, /* Integer.MIN_VALUE: Utils.abs gives 0 */
    /* encoded surrogates: Java differs from the maximal-subpart rule here */
    {"eda041", 2031588, 38},
    {"eda0", 65533, 33},
    {"eda080eda0", 2097056, 6},
    {"edbf41c2", 63044761, 11},
    {"e1804141", 62979293, 43},
    {"e0a041", 2031588, 38},
};

static void test_java_hash(void)
{
    for (size_t i = 0; i < sizeof(kb_java_hashes) / sizeof(kb_java_hashes[0]); i++) {
        uint8_t b[64];
        size_t n = unhex(kb_java_hashes[i].hex, b, sizeof(b));
        int32_t h = kb_txnlog_java_hash((const char *)b, n);
        int32_t p = kb_txnlog_partition_for((const char *)b, n, 50);
        if (h != kb_java_hashes[i].hash || p != kb_java_hashes[i].part50)
            printf("\n%s: hash %d (want %d), partition %d (want %d)\n", kb_java_hashes[i].hex, h,
                   kb_java_hashes[i].hash, p, kb_java_hashes[i].part50);
        CU_ASSERT_EQUAL(h, kb_java_hashes[i].hash);
        CU_ASSERT_EQUAL(p, kb_java_hashes[i].part50);
    }
    CU_ASSERT_EQUAL(kb_txnlog_partition_for("hello", 5, 1), 0);
    CU_ASSERT_EQUAL(kb_txnlog_partition_for("hello", 5, 7), 99162322 % 7);
}

/* ---- records --------------------------------------------------------------------------------- */

#define K_LSO "000000256b632d6a6176612d6c736f2d69642d313739353935353032363731302d3735383963663261"

/* Records of __transaction_state written by Kafka 4.4.0 (key, value). */
static const struct {
    const char *what;
    const char *key, *value;
    int16_t version;
    int8_t state;
    int64_t pid;
    int16_t epoch;
    int64_t prev_pid;
    int16_t client_tv;
    bool parts_null;
    size_t tp_cnt;
} kb_golden[] = {
    {"v0 Empty (transaction.version 0)", K_LSO,
     "0000000000000000003700000000753000ffffffff000001a22742ebe4ffffffffffffffff", 0, KB_TXN_EMPTY,
     55, 0, -1, 0, true, 0},
    {"v0 Ongoing", K_LSO,
     "00000000000000000037000000007530010000000100226b632d6a6176612d6c736f2d31373935393535303235"
     "3838342d64663233666262660000000100000000000001a22742ec55000001a22742ec55",
     0, KB_TXN_ONGOING, 55, 0, -1, 0, false, 1},
    {"v0 PrepareCommit", K_LSO,
     "00000000000000000037000000007530020000000100226b632d6a6176612d6c736f2d31373935393535303235"
     "3838342d64663233666262660000000100000000000001a22742ece2000001a22742ec55",
     0, KB_TXN_PREPARE_COMMIT, 55, 0, -1, 0, false, 1},
    {"v0 CompleteCommit", K_LSO,
     "000000000000000000370000000075300400000000000001a22742ece3000001a22742ec55", 0,
     KB_TXN_COMPLETE_COMMIT, 55, 0, -1, 0, false, 0},
    {"v1 Empty (transaction.version 2)",
     "000000256b632d6a6176612d6c736f2d69642d313739353935333630363736322d3162316562333938",
     "000100000000000000010000000075300000000001a2272d40e8ffffffffffffffff0100080000000000000001",
     1, KB_TXN_EMPTY, 1, 0, 1, 0, true, 0},
    {"v1 Ongoing, ClientTransactionVersion 2",
     "000000256b632d6a6176612d6c736f2d69642d313739353935333630363736322d3162316562333938",
     "000100000000000000010000000075300102236b632d6a6176612d6c736f2d313739353935333630363731362d"
     "6335386131333038020000000000000001a2272d40f3000001a2272d40f3020008000000000000000102020002",
     1, KB_TXN_ONGOING, 1, 0, 1, 2, false, 1},
    {"v1 CompleteCommit after a TV2 epoch bump",
     "000000256b632d6a6176612d6c736f2d69642d313739353935333630363736322d3162316562333938",
     "000100000000000000010001000075300401000001a2272d4106000001a2272d40f30200080000000000000001"
     "02020002",
     1, KB_TXN_COMPLETE_COMMIT, 1, 1, 1, 2, false, 0},
    {"v1 PrepareCommit of 2 partitions (transaction.version 1)",
     "000000256b632d6a6176612d74786e2d69642d313739353935333634353939372d3865343930373361",
     "000100000000000000030000000075300202236b632d6a6176612d74786e2d313739353935333634353939372d"
     "653830633433313903000000000000000100000001a2272ddc79000001a2272ddc4d0100080000000000000003",
     1, KB_TXN_PREPARE_COMMIT, 3, 0, 3, 0, false, 2},
};

static void test_records_golden(void)
{
    for (size_t i = 0; i < sizeof(kb_golden) / sizeof(kb_golden[0]); i++) {
        uint8_t k[256], v[512];
        size_t kn = unhex(kb_golden[i].key, k, sizeof(k)),
               vn = unhex(kb_golden[i].value, v, sizeof(v));
        char *id = NULL;
        kb_txnlog_value_t val;
        kp_writer_t wr;

        CU_ASSERT_EQUAL_FATAL(kb_txnlog_key_decode(k, kn, &id), 0);
        kp_writer_init(&wr);
        CU_ASSERT_EQUAL(kb_txnlog_key_encode(&wr, id, strlen(id)), 0);
        CU_ASSERT(wr.len == kn && !memcmp(wr.buf, k, kn));
        kp_writer_free(&wr);

        CU_ASSERT_EQUAL_FATAL(kb_txnlog_value_decode(v, vn, &val), 0);
        CU_ASSERT_EQUAL(val.version, kb_golden[i].version);
        CU_ASSERT_EQUAL(val.state, kb_golden[i].state);
        CU_ASSERT_EQUAL(val.producer_id, kb_golden[i].pid);
        CU_ASSERT_EQUAL(val.producer_epoch, kb_golden[i].epoch);
        CU_ASSERT_EQUAL(val.prev_producer_id, kb_golden[i].prev_pid);
        CU_ASSERT_EQUAL(val.next_producer_id, -1);
        CU_ASSERT_EQUAL(val.client_txn_version, kb_golden[i].client_tv);
        CU_ASSERT_EQUAL(val.partitions_null, kb_golden[i].parts_null);
        CU_ASSERT_EQUAL(val.tp_cnt, kb_golden[i].tp_cnt);
        CU_ASSERT_EQUAL(val.timeout_ms, 30000);
        kp_writer_init(&wr);
        CU_ASSERT_EQUAL(kb_txnlog_value_encode(&wr, &val, val.version), 0);
        if (wr.len != vn || memcmp(wr.buf, v, vn))
            printf("\n%s: re-encoding differs\n", kb_golden[i].what);
        CU_ASSERT(wr.len == vn && !memcmp(wr.buf, v, vn));
        kp_writer_free(&wr);
        kb_txnlog_value_free(&val);
        free(id);
    }
}

static void test_records_roundtrip(void)
{
    kb_txn_tp_t tps[3] = {{"a", 0}, {"a", 7}, {"bb", 2}};
    kb_txnlog_value_t v, d;
    kp_writer_t wr;
    uint8_t junk[] = {0, 2, 1, 2, 3};

    memset(&v, 0, sizeof(v));
    v.producer_id = 1234567890123LL;
    v.prev_producer_id = 42;
    v.next_producer_id = 99;
    v.producer_epoch = 32766;
    v.next_producer_epoch = 0;
    v.timeout_ms = 60000;
    v.state = KB_TXN_PREPARE_ABORT;
    v.tps = tps;
    v.tp_cnt = 3;
    v.last_update_ms = 1700000000000LL;
    v.start_ms = 1700000000001LL;
    v.client_txn_version = 2;
    for (int16_t ver = 0; ver <= 1; ver++) {
        kp_writer_init(&wr);
        CU_ASSERT_EQUAL_FATAL(kb_txnlog_value_encode(&wr, &v, ver), 0);
        CU_ASSERT_EQUAL_FATAL(kb_txnlog_value_decode(wr.buf, wr.len, &d), 0);
        CU_ASSERT_EQUAL(d.producer_id, v.producer_id);
        CU_ASSERT_EQUAL(d.producer_epoch, 32766);
        CU_ASSERT_EQUAL(d.state, KB_TXN_PREPARE_ABORT);
        CU_ASSERT_EQUAL(d.tp_cnt, 3);
        CU_ASSERT(d.tp_cnt == 3 && !strcmp(d.tps[2].topic, "bb") && d.tps[1].partition == 7);
        CU_ASSERT_EQUAL(d.start_ms, v.start_ms);
        /* the tagged fields exist from v1 on */
        CU_ASSERT_EQUAL(d.prev_producer_id, ver ? 42 : -1);
        CU_ASSERT_EQUAL(d.next_producer_id, ver ? 99 : -1);
        CU_ASSERT_EQUAL(d.next_producer_epoch, ver ? 0 : -1);
        CU_ASSERT_EQUAL(d.client_txn_version, ver ? 2 : 0);
        /* every truncation is refused, never read past the end */
        for (size_t cut = 0; cut < wr.len; cut++) {
            kb_txnlog_value_t t;
            CU_ASSERT_NOT_EQUAL(kb_txnlog_value_decode(wr.buf, cut, &t), 0);
        }
        kb_txnlog_value_free(&d);
        kp_writer_free(&wr);
    }
    CU_ASSERT_EQUAL(kb_txnlog_value_decode(junk, sizeof(junk), &d), KB_E_UNSUPPORTED);
    {
        char *id = (char *)1;
        uint8_t k1[] = {0, 1, 0, 1, 'x'}, k0[] = {0, 0, 0, 5, 'x'};
        CU_ASSERT_EQUAL(kb_txnlog_key_decode(k1, sizeof(k1), &id), KB_E_UNSUPPORTED);
        CU_ASSERT_PTR_NULL(id);
        CU_ASSERT_EQUAL(kb_txnlog_key_decode(k0, sizeof(k0), &id), KB_E_PARSE);
        CU_ASSERT_EQUAL(kb_txnlog_key_decode(k0, 1, &id), KB_E_PARSE);
    }
    CU_ASSERT_STRING_EQUAL(kb_txnlog_state_name(KB_TXN_PREPARE_EPOCH_FENCE), "PrepareEpochFence");
    CU_ASSERT_STRING_EQUAL(kb_txnlog_state_name(99), "Unknown");
}

/* ---- state machine --------------------------------------------------------------------------- */

static int64_t g_next_pid = 1000;

static int alloc_pid(void *o, int64_t *pid)
{
    (void)o;
    *pid = g_next_pid++;
    return 0;
}

static int alloc_fail(void *o, int64_t *pid)
{
    (void)o;
    (void)pid;
    return -1;
}

/* Apply a transition that must be WRITE. */
static void adopt(kb_txnmeta_t *m, kb_txnmeta_t *next)
{
    kb_txnmeta_move(m, next);
}

static kb_txnsm_act_t init_pid(kb_txnmeta_t *m, int64_t exp_pid, int16_t exp_epoch, int16_t *err)
{
    kb_txnsm_initpid_t rq = {
        .timeout_ms = 60000, .exp_pid = exp_pid, .exp_epoch = exp_epoch, .now_ms = 1000};
    kb_txnmeta_t next;
    kb_txnsm_act_t a = kb_txnsm_init_pid(m, &rq, alloc_pid, NULL, &next, err);
    if (a == KB_TXNSM_WRITE)
        adopt(m, &next);
    else if (a == KB_TXNSM_FENCE)
        *err = next.producer_epoch; /* report the fencing epoch */
    return a;
}

static kb_txnsm_act_t add(kb_txnmeta_t *m, const char *topic, int32_t p, int16_t *err)
{
    kb_txn_tp_t tp = {(char *)topic, p};
    kb_txnmeta_t next;
    kb_txnsm_act_t a =
        kb_txnsm_add_partitions(m, m->producer_id, m->producer_epoch, &tp, 1, 0, 2000, &next, err);
    if (a == KB_TXNSM_WRITE)
        adopt(m, &next);
    return a;
}

static kb_txnsm_act_t end(kb_txnmeta_t *m, int64_t pid, int16_t epoch, bool commit, bool tv2,
                          int16_t *err)
{
    kb_txnsm_end_t rq = {.pid = pid,
                         .epoch = epoch,
                         .commit = commit,
                         .from_client = true,
                         .tv2 = tv2,
                         .now_ms = 3000};
    kb_txnmeta_t next;
    kb_txnsm_act_t a = kb_txnsm_end(m, &rq, alloc_pid, NULL, &next, err);
    if (a == KB_TXNSM_WRITE)
        adopt(m, &next);
    return a;
}

static void complete(kb_txnmeta_t *m)
{
    kb_txnmeta_t next;
    CU_ASSERT_EQUAL_FATAL(kb_txnsm_complete(m, 4000, &next), 0);
    adopt(m, &next);
}

static void test_sm_init_pid(void)
{
    kb_txnmeta_t m;
    int16_t err;

    kb_txnmeta_init(&m, 7, 60000, 0);
    CU_ASSERT_EQUAL(init_pid(&m, -1, -1, &err), KB_TXNSM_WRITE);
    CU_ASSERT(m.producer_id == 7 && m.producer_epoch == 0 && m.state == KB_TXN_EMPTY);
    CU_ASSERT_EQUAL(m.prev_producer_id, 7);
    CU_ASSERT_EQUAL(init_pid(&m, -1, -1, &err), KB_TXNSM_WRITE);
    CU_ASSERT_EQUAL(m.producer_epoch, 1);
    CU_ASSERT_EQUAL(m.last_producer_epoch, -1);
    /* KIP-360 */
    CU_ASSERT_EQUAL(init_pid(&m, 7, 1, &err), KB_TXNSM_WRITE);
    CU_ASSERT(m.producer_epoch == 2 && m.last_producer_epoch == 1);
    CU_ASSERT_EQUAL(init_pid(&m, 7, 1, &err), KB_TXNSM_WRITE); /* retry: no bump */
    CU_ASSERT_EQUAL(m.producer_epoch, 2);
    CU_ASSERT_EQUAL(init_pid(&m, 7, 0, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_PRODUCER_FENCED);
    CU_ASSERT_EQUAL(init_pid(&m, 8, 2, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_PRODUCER_FENCED);
    /* ongoing transaction: fence with epoch + 1 */
    CU_ASSERT_EQUAL(add(&m, "t", 0, &err), KB_TXNSM_WRITE);
    CU_ASSERT_EQUAL(init_pid(&m, -1, -1, &err), KB_TXNSM_FENCE);
    CU_ASSERT_EQUAL(err, 3);
    /* a prepared transaction: come back later */
    CU_ASSERT_EQUAL(end(&m, 7, 2, true, false, &err), KB_TXNSM_WRITE);
    CU_ASSERT_EQUAL(init_pid(&m, -1, -1, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_CONCURRENT_TRANSACTIONS);
    complete(&m);
    CU_ASSERT_EQUAL(init_pid(&m, -1, -1, &err), KB_TXNSM_WRITE);
    CU_ASSERT(m.producer_epoch == 3 && m.tps.cnt == 0 && m.start_ms == -1);
    kb_txnmeta_free(&m);

    /* exhausted epoch: a new producer id; a retry of that rotation is recognised */
    kb_txnmeta_init(&m, 7, 60000, 0);
    m.producer_epoch = KB_TXN_EPOCH_MAX - 1;
    g_next_pid = 500;
    CU_ASSERT_EQUAL(init_pid(&m, 7, KB_TXN_EPOCH_MAX - 1, &err), KB_TXNSM_WRITE);
    CU_ASSERT(m.producer_id == 500 && m.producer_epoch == 0 && m.prev_producer_id == 7 &&
              m.last_producer_epoch == KB_TXN_EPOCH_MAX - 1);
    CU_ASSERT_EQUAL(init_pid(&m, 7, KB_TXN_EPOCH_MAX - 1, &err), KB_TXNSM_WRITE);
    CU_ASSERT(m.producer_id == 500 && m.producer_epoch == 0); /* the same answer again */
    m.producer_epoch = KB_TXN_EPOCH_MAX - 1;
    {
        kb_txnsm_initpid_t rq = {.timeout_ms = 1, .exp_pid = -1, .exp_epoch = -1};
        kb_txnmeta_t next;
        CU_ASSERT_EQUAL(kb_txnsm_init_pid(&m, &rq, alloc_fail, NULL, &next, &err), KB_TXNSM_ERROR);
        CU_ASSERT_EQUAL(err, KP_ERR_COORDINATOR_NOT_AVAILABLE);
    }
    kb_txnmeta_free(&m);
}

static void test_sm_add_verify(void)
{
    kb_txnmeta_t m, next;
    kb_txn_tp_t tps[2] = {{"b", 1}, {"a", 3}};
    int16_t err;

    kb_txnmeta_init(&m, 7, 60000, 0);
    CU_ASSERT_EQUAL(init_pid(&m, -1, -1, &err), KB_TXNSM_WRITE);
    CU_ASSERT_EQUAL(kb_txnsm_verify(&m, 7, 0, "a", 3), KP_ERR_TRANSACTION_ABORTABLE);
    CU_ASSERT_EQUAL(kb_txnsm_add_partitions(&m, 8, 0, tps, 2, 0, 10, &next, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_INVALID_PRODUCER_ID_MAPPING);
    CU_ASSERT_EQUAL(kb_txnsm_add_partitions(&m, 7, 1, tps, 2, 0, 10, &next, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_PRODUCER_FENCED);
    CU_ASSERT_EQUAL(kb_txnsm_add_partitions(&m, 7, 0, tps, 2, 0, 10, &next, &err), KB_TXNSM_WRITE);
    adopt(&m, &next);
    CU_ASSERT(m.state == KB_TXN_ONGOING && m.start_ms == 10 && m.tps.cnt == 2);
    CU_ASSERT(!strcmp(m.tps.v[0].topic, "a") && m.tps.v[1].partition == 1); /* sorted */
    CU_ASSERT_EQUAL(kb_txnsm_add_partitions(&m, 7, 0, tps, 1, 0, 20, &next, &err), KB_TXNSM_NOOP);
    CU_ASSERT_EQUAL(add(&m, "c", 0, &err), KB_TXNSM_WRITE);
    CU_ASSERT(m.start_ms == 10 && m.last_update_ms == 2000 && m.tps.cnt == 3);
    CU_ASSERT_EQUAL(kb_txnsm_verify(&m, 7, 0, "a", 3), KP_ERR_NONE);
    CU_ASSERT_EQUAL(kb_txnsm_verify(&m, 7, 0, "a", 4), KP_ERR_TRANSACTION_ABORTABLE);
    CU_ASSERT_EQUAL(kb_txnsm_verify(&m, 7, 1, "a", 3), KP_ERR_PRODUCER_FENCED);
    CU_ASSERT_EQUAL(kb_txnsm_verify(&m, 9, 0, "a", 3), KP_ERR_INVALID_PRODUCER_ID_MAPPING);
    CU_ASSERT_EQUAL(end(&m, 7, 0, false, false, &err), KB_TXNSM_WRITE);
    CU_ASSERT_EQUAL(kb_txnsm_verify(&m, 7, 0, "a", 3), KP_ERR_CONCURRENT_TRANSACTIONS);
    CU_ASSERT_EQUAL(kb_txnsm_add_partitions(&m, 7, 0, tps, 1, 0, 20, &next, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_CONCURRENT_TRANSACTIONS);
    complete(&m);
    CU_ASSERT(m.state == KB_TXN_COMPLETE_ABORT && m.tps.cnt == 0 && m.start_ms == 10);
    CU_ASSERT(kb_txnsm_expirable(&m));
    kb_txnmeta_free(&m);
}

static void test_sm_end_tv1(void)
{
    kb_txnmeta_t m, next;
    int16_t err;
    kb_txnsm_end_t rq;

    kb_txnmeta_init(&m, 7, 60000, 0);
    CU_ASSERT_EQUAL(init_pid(&m, -1, -1, &err), KB_TXNSM_WRITE);
    CU_ASSERT_EQUAL(end(&m, 7, 0, true, false, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_INVALID_TXN_STATE); /* Empty */
    CU_ASSERT_EQUAL(end(&m, 7, 0, false, false, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_INVALID_TXN_STATE);
    CU_ASSERT_EQUAL(add(&m, "t", 0, &err), KB_TXNSM_WRITE);
    CU_ASSERT_EQUAL(end(&m, 8, 0, true, false, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_INVALID_PRODUCER_ID_MAPPING);
    CU_ASSERT_EQUAL(end(&m, 7, 1, true, false, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_PRODUCER_FENCED);
    CU_ASSERT_EQUAL(end(&m, 7, 0, true, false, &err), KB_TXNSM_WRITE);
    CU_ASSERT(m.state == KB_TXN_PREPARE_COMMIT && m.producer_epoch == 0 && m.tps.cnt == 1);
    CU_ASSERT_EQUAL(end(&m, 7, 0, true, false, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_CONCURRENT_TRANSACTIONS);
    CU_ASSERT_EQUAL(end(&m, 7, 0, false, false, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_INVALID_TXN_STATE);
    complete(&m);
    CU_ASSERT(m.state == KB_TXN_COMPLETE_COMMIT && m.producer_epoch == 0);
    CU_ASSERT_EQUAL(end(&m, 7, 0, true, false, &err), KB_TXNSM_NOOP);
    CU_ASSERT_EQUAL(err, KP_ERR_NONE);
    CU_ASSERT_EQUAL(end(&m, 7, 0, false, false, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_INVALID_TXN_STATE);

    /* the coordinator's abort with a fencing epoch */
    CU_ASSERT_EQUAL(add(&m, "t", 1, &err), KB_TXNSM_WRITE);
    rq = (kb_txnsm_end_t){.pid = 7,
                          .epoch = kb_txnsm_fence_epoch(&m),
                          .commit = false,
                          .from_client = false,
                          .tv2 = false,
                          .epoch_fence = true,
                          .now_ms = 9};
    CU_ASSERT_EQUAL(kb_txnsm_end(&m, &rq, alloc_pid, NULL, &next, &err), KB_TXNSM_WRITE);
    adopt(&m, &next);
    CU_ASSERT(m.state == KB_TXN_PREPARE_ABORT && m.producer_epoch == 1 &&
              m.last_producer_epoch == -1);
    complete(&m);
    CU_ASSERT_EQUAL(end(&m, 7, 0, true, false, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_PRODUCER_FENCED);
    kb_txnmeta_free(&m);
}

static void test_sm_end_tv2(void)
{
    kb_txnmeta_t m;
    int16_t err;

    kb_txnmeta_init(&m, 7, 60000, 0);
    CU_ASSERT_EQUAL(init_pid(&m, -1, -1, &err), KB_TXNSM_WRITE);
    /* TV2 may abort without a transaction; it bumps the epoch */
    CU_ASSERT_EQUAL(end(&m, 7, 0, true, true, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_INVALID_TXN_STATE);
    CU_ASSERT_EQUAL(end(&m, 7, 0, false, true, &err), KB_TXNSM_WRITE);
    CU_ASSERT(m.state == KB_TXN_PREPARE_ABORT && m.producer_epoch == 1 && m.client_tv == 2 &&
              m.start_ms == 3000);
    CU_ASSERT_EQUAL(end(&m, 7, 0, false, true, &err), KB_TXNSM_ERROR); /* retry while pending */
    CU_ASSERT_EQUAL(err, KP_ERR_CONCURRENT_TRANSACTIONS);
    complete(&m);
    CU_ASSERT_EQUAL(end(&m, 7, 0, false, true, &err), KB_TXNSM_NOOP); /* retry after it */
    CU_ASSERT_EQUAL(end(&m, 7, 0, true, true, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_INVALID_TXN_STATE);
    /* a committed transaction */
    CU_ASSERT_EQUAL(add(&m, "t", 0, &err), KB_TXNSM_WRITE);
    CU_ASSERT_EQUAL(end(&m, 7, 0, true, true, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_PRODUCER_FENCED);
    CU_ASSERT_EQUAL(end(&m, 7, 1, true, true, &err), KB_TXNSM_WRITE);
    CU_ASSERT(m.producer_epoch == 2 && m.last_producer_epoch == 1);
    complete(&m);
    CU_ASSERT_EQUAL(end(&m, 7, 1, true, true, &err), KB_TXNSM_NOOP);
    CU_ASSERT_EQUAL(end(&m, 7, 0, true, true, &err), KB_TXNSM_ERROR);
    CU_ASSERT_EQUAL(err, KP_ERR_PRODUCER_FENCED);
    /* epoch overflow: the Complete record moves to the next producer id with epoch 0 */
    m.producer_epoch = KB_TXN_EPOCH_MAX - 1;
    CU_ASSERT_EQUAL(add(&m, "t", 0, &err), KB_TXNSM_WRITE);
    g_next_pid = 900;
    CU_ASSERT_EQUAL(end(&m, 7, KB_TXN_EPOCH_MAX - 1, true, true, &err), KB_TXNSM_WRITE);
    CU_ASSERT(m.producer_epoch == KB_TXN_EPOCH_MAX && m.next_producer_id == 900);
    complete(&m);
    CU_ASSERT(m.producer_id == 900 && m.producer_epoch == 0 && m.prev_producer_id == 7 &&
              m.next_producer_id == -1);
    /* a retry of the EndTxn that overflowed */
    CU_ASSERT_EQUAL(end(&m, 7, KB_TXN_EPOCH_MAX - 1, true, true, &err), KB_TXNSM_NOOP);
    kb_txnmeta_free(&m);
}

static void test_sm_value_mapping(void)
{
    kb_txnmeta_t m, back;
    kb_txnlog_value_t v;
    kp_writer_t wr;
    int16_t err;

    kb_txnmeta_init(&m, 11, 5000, 100);
    CU_ASSERT_EQUAL(init_pid(&m, -1, -1, &err), KB_TXNSM_WRITE);
    kb_txnmeta_to_value(&m, &v);
    CU_ASSERT(v.partitions_null && v.state == KB_TXN_EMPTY);
    CU_ASSERT_EQUAL(add(&m, "x", 1, &err), KB_TXNSM_WRITE);
    CU_ASSERT_EQUAL(add(&m, "x", 0, &err), KB_TXNSM_WRITE);
    kb_txnmeta_to_value(&m, &v);
    CU_ASSERT(!v.partitions_null && v.tp_cnt == 2);
    kp_writer_init(&wr);
    CU_ASSERT_EQUAL(kb_txnlog_value_encode(&wr, &v, 1), 0);
    CU_ASSERT_EQUAL_FATAL(kb_txnlog_value_decode(wr.buf, wr.len, &v), 0);
    kb_txnmeta_from_value(&back, &v);
    kb_txnlog_value_free(&v);
    CU_ASSERT(back.producer_id == 11 && back.producer_epoch == 0 && back.state == KB_TXN_ONGOING &&
              back.tps.cnt == 2 && back.tps.v[0].partition == 0 && back.timeout_ms == 60000 &&
              back.prev_producer_id == 11 && back.last_producer_epoch == -1);
    CU_ASSERT(kb_txn_tpset_has(&back.tps, "x", 1));
    kp_writer_free(&wr);
    kb_txnmeta_free(&back);
    kb_txnmeta_free(&m);
}

int main(void)
{
    CU_pSuite s;
    unsigned fails;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("broker_txn_unit", NULL, NULL);
    CU_add_test(s, "Java String.hashCode and the partition of an id", test_java_hash);
    CU_add_test(s, "records written by Kafka 4.4.0 decode and re-encode byte for byte",
                test_records_golden);
    CU_add_test(s, "value v0/v1 round trip, truncations, unknown versions", test_records_roundtrip);
    CU_add_test(s, "InitProducerId transitions (KIP-360, fencing, epoch exhaustion)",
                test_sm_init_pid);
    CU_add_test(s, "AddPartitionsToTxn and verification", test_sm_add_verify);
    CU_add_test(s, "EndTxn, transaction version 1", test_sm_end_tv1);
    CU_add_test(s, "EndTxn, transaction version 2 (KIP-890 epoch bump, overflow)", test_sm_end_tv2);
    CU_add_test(s, "metadata <-> value record", test_sm_value_mapping);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
