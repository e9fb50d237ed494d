/*
 * state_coord_test.c - the MirrorCoordinator (plugin/state) against the fake host:
 *   - the write rules alone (fencing, transitions, LME, failure details);
 *   - the shard table: replay of record batches (latest value wins, tombstones delete, control
 *     batches, records of a newer format and unreadable records skipped);
 *   - a shard on one fake broker: `__mirror_state` lives in the fake host's partition log; a
 *     request handler of the test serves the plugin's local Produce / Fetch / Metadata /
 *     CreateTopics against it. Load on leadership, ReadMirrorStates / WriteMirrorStates on the
 *     wire, fencing errors, NOT_COORDINATOR after resignation, a write in flight when
 *     leadership moves (fails, nothing changes), reload on a new epoch;
 *   - two fake brokers: the client side (km_state_read / km_state_write) reaches the shard on
 *     the other broker with broker_request, re-learns the leader with Metadata, and retries a
 *     FENCED_STATE_EPOCH write once after re-reading.
 */
#include <stdlib.h>
#include <string.h>

#include "coord/km_coord.h"
#include "core/km_plugin.h"
#include "core/km_plugin_types.h"
#include "fakehost.h"
#include "fh_cunit.h"
#include "kp_arena.h"
#include "kp_batch.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "kp_reader.h"
#include "kp_state.h"
#include "kp_writer.h"
#include "state/km_state.h"
#include "state/km_state_table.h"

static const kbx_uuid_t TS_MS_ID = {{0xee, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};
static const kbx_uuid_t TS_T1 = {{0xa1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
static const kbx_uuid_t TS_T2 = {{0xa2, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};

/* ---- helpers ----------------------------------------------------------------------------- */

static size_t ts_key(uint8_t *buf, int16_t type, const char *mirror, const kbx_uuid_t *id,
                     int32_t partition)
{
    kp_state_key_t k = {.type = type, .mirror = kp_str(mirror), .partition = partition};
    kp_writer_t wr;

    if (id != NULL)
        memcpy(k.topicId.b, id->bytes, 16);
    kp_writer_init_fixed(&wr, buf, KP_STATE_KEY_MAX_SIZE);
    CU_ASSERT_EQUAL_FATAL(kp_state_key_encode(&wr, &k), 0);
    return wr.len;
}

/* An encoded PartitionState value (malloc'd). */
static uint8_t *ts_pvalue(int8_t state, int32_t state_epoch, int32_t leader_epoch, size_t *len)
{
    kp_state_value_t v;
    kp_writer_t wr;

    kp_state_value_init(&v, KP_STATE_REC_PARTITION_STATE);
    v.u.partition.state = state;
    v.u.partition.state_epoch = state_epoch;
    v.u.partition.leader_epoch = leader_epoch;
    kp_writer_init(&wr);
    CU_ASSERT_EQUAL_FATAL(kp_state_value_encode(&wr, &v, NULL), 0);
    return kp_writer_steal(&wr, len);
}

typedef struct ts_rec {
    const uint8_t *key;
    size_t key_len;
    const uint8_t *value; /* NULL: tombstone */
    size_t value_len;
} ts_rec_t;

static void ts_batch(kp_writer_t *out, int64_t base, const ts_rec_t *r, int n)
{
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    int i;

    kp_batch_opts_init(&o);
    o.baseOffset = base;
    kp_batch_builder_init(&bb, &o);
    for (i = 0; i < n; i++)
        kp_batch_builder_add(&bb, 1000, (kp_bytes_t){r[i].key, (int32_t)r[i].key_len},
                             r[i].value != NULL ? (kp_bytes_t){r[i].value, (int32_t)r[i].value_len}
                                                : KP_BYTES_NULL,
                             NULL, 0);
    CU_ASSERT_EQUAL_FATAL(kp_batch_builder_finish(&bb, out), 0);
    kp_batch_builder_free(&bb);
}

/* A minimal km_plugin_t on a fake host, for the table (allocations only). */
static km_plugin_t *ts_bare_cm(fakehost_t *fh)
{
    km_plugin_t *cm = calloc(1, sizeof(*cm));

    cm->ref.magic = KM_PLUGIN_MAGIC;
    cm->ref.api = fakehost_api(fh);
    cm->ref.host = fakehost_host(fh);
    return cm;
}

/* ---- the write rules --------------------------------------------------------------------- */

static void ts_test_transitions(void)
{
    static const int all[] = {-1, 0, 1, 3, 4, 5, 6, 7, 8};
    size_t i, j;

    CU_ASSERT_TRUE(km_state_transition_valid(-1, KP_PSTATE_PREPARING));
    CU_ASSERT_TRUE(km_state_transition_valid(KP_PSTATE_PREPARING, KP_PSTATE_MIRRORING));
    CU_ASSERT_TRUE(km_state_transition_valid(KP_PSTATE_MIRRORING, KP_PSTATE_PAUSING));
    CU_ASSERT_TRUE(km_state_transition_valid(KP_PSTATE_PAUSING, KP_PSTATE_PAUSED));
    CU_ASSERT_TRUE(km_state_transition_valid(KP_PSTATE_PAUSED, KP_PSTATE_MIRRORING));
    CU_ASSERT_TRUE(km_state_transition_valid(KP_PSTATE_PAUSED, KP_PSTATE_STOPPING));
    CU_ASSERT_TRUE(km_state_transition_valid(KP_PSTATE_STOPPING, KP_PSTATE_STOPPED));
    CU_ASSERT_TRUE(km_state_transition_valid(KP_PSTATE_STOPPED, KP_PSTATE_PREPARING));
    CU_ASSERT_TRUE(km_state_transition_valid(KP_PSTATE_FAILED, KP_PSTATE_PREPARING));
    CU_ASSERT_FALSE(km_state_transition_valid(-1, KP_PSTATE_MIRRORING));
    CU_ASSERT_FALSE(km_state_transition_valid(KP_PSTATE_STOPPED, KP_PSTATE_MIRRORING));
    CU_ASSERT_FALSE(km_state_transition_valid(KP_PSTATE_MIRRORING, KP_PSTATE_STOPPED));
    CU_ASSERT_FALSE(km_state_transition_valid(KP_PSTATE_MIRRORING, KP_PSTATE_PAUSED));
    CU_ASSERT_FALSE(km_state_transition_valid(KP_PSTATE_STOPPING, KP_PSTATE_MIRRORING));
    CU_ASSERT_FALSE(km_state_transition_valid(KP_PSTATE_PREPARING, 2)); /* reserved */
    CU_ASSERT_FALSE(km_state_transition_valid(KP_PSTATE_PREPARING, -1));
    CU_ASSERT_FALSE(km_state_transition_valid(KP_PSTATE_PREPARING, 9));
    for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        /* FAILED from anything; the same state always (but UNKNOWN is never a target) */
        CU_ASSERT_TRUE(km_state_transition_valid(all[i], KP_PSTATE_FAILED));
        CU_ASSERT_EQUAL(km_state_transition_valid(all[i], all[i]), all[i] != -1);
        for (j = 0; j < sizeof(all) / sizeof(all[0]); j++)
            CU_ASSERT_FALSE(km_state_transition_valid(all[i], all[j]) &&
                            all[j] == KP_PSTATE_STOPPED && all[i] != KP_PSTATE_STOPPING &&
                            all[i] != KP_PSTATE_STOPPED);
    }
}

static void ts_test_apply_rules(void)
{
    kp_state_value_t cur;
    kp_state_partition_t out;
    km_state_pwrite_t w;
    const char *msg = NULL;

    /* nothing stored: UNKNOWN, epoch 0 -> PREPARING, epoch 1 */
    km_state_pwrite_init(&w);
    w.state = KP_PSTATE_PREPARING;
    w.leader_epoch = 4;
    CU_ASSERT_EQUAL(km_state_pstate_apply(NULL, &w, 77, &out, &msg), 0);
    CU_ASSERT_EQUAL(out.state, KP_PSTATE_PREPARING);
    CU_ASSERT_EQUAL(out.state_epoch, 1);
    CU_ASSERT_EQUAL(out.leader_epoch, 4);
    CU_ASSERT_EQUAL(out.update_time_ms, 77);

    kp_state_value_init(&cur, KP_STATE_REC_PARTITION_STATE);
    cur.u.partition.state = KP_PSTATE_MIRRORING;
    cur.u.partition.state_epoch = 5;
    cur.u.partition.leader_epoch = 9;
    cur.u.partition.last_mirrored_epoch = 3;
    cur.u.partition.last_mirrored_offset = 300;

    /* leader epoch fencing: stored 9 > request 8; -1 skips */
    km_state_pwrite_init(&w);
    w.state = KP_PSTATE_PAUSING;
    w.leader_epoch = 8;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg),
                    KP_ERR_FENCED_LEADER_EPOCH);
    CU_ASSERT_PTR_NOT_NULL(msg);
    w.leader_epoch = -1;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg), 0);
    CU_ASSERT_EQUAL(out.leader_epoch, 9);
    w.leader_epoch = 9;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg), 0);
    w.leader_epoch = 12;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg), 0);
    CU_ASSERT_EQUAL(out.leader_epoch, 12);

    /* state epoch fencing: stored 5 > expected 4; 5 and -1 pass */
    w.state_epoch = 4;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg),
                    KP_ERR_FENCED_STATE_EPOCH);
    w.state_epoch = 5;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg), 0);
    CU_ASSERT_EQUAL(out.state, KP_PSTATE_PAUSING);
    CU_ASSERT_EQUAL(out.state_epoch, 6);
    CU_ASSERT_EQUAL(out.last_mirrored_epoch, 3); /* kept: not given */
    CU_ASSERT_EQUAL(out.last_mirrored_offset, 300);

    /* leader epoch fencing is checked before the state epoch */
    w.leader_epoch = 1;
    w.state_epoch = 1;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg),
                    KP_ERR_FENCED_LEADER_EPOCH);

    /* invalid transition: refused with INVALID_CLUSTER_MIRROR_STATES, nothing decided */
    km_state_pwrite_init(&w);
    w.state = KP_PSTATE_STOPPED;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg),
                    KP_ERR_INVALID_CLUSTER_MIRROR_STATES);
    w.state = 2;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg),
                    KP_ERR_INVALID_REQUEST);
    w.state = 42;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg),
                    KP_ERR_INVALID_REQUEST);

    /* same state: no epoch bump; the LME alone (state -1) is recorded */
    km_state_pwrite_init(&w);
    w.lme_epoch = 4;
    w.lme_offset = 500;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg), 0);
    CU_ASSERT_EQUAL(out.state, KP_PSTATE_MIRRORING);
    CU_ASSERT_EQUAL(out.state_epoch, 5);
    CU_ASSERT_EQUAL(out.last_mirrored_epoch, 4);
    CU_ASSERT_EQUAL(out.last_mirrored_offset, 500);

    /* FAILED keeps where it failed from, the message and the attempt; non-retryable flag */
    km_state_pwrite_init(&w);
    w.state = KP_PSTATE_FAILED;
    w.error_message = kp_str("source topic deleted");
    w.retry_attempt = 3;
    w.non_retryable = true;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg), 0);
    CU_ASSERT_EQUAL(out.state, KP_PSTATE_FAILED);
    CU_ASSERT_EQUAL(out.previous_state, KP_PSTATE_MIRRORING);
    CU_ASSERT_EQUAL(out.retry_attempt, 3);
    CU_ASSERT_TRUE(out.non_retryable);
    CU_ASSERT_TRUE(kp_str_eq(out.error_message, "source topic deleted"));
    /* leaving FAILED clears the message and the previous state; the attempt stays (-1) */
    cur.u.partition = out;
    km_state_pwrite_init(&w);
    w.state = KP_PSTATE_PREPARING;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg), 0);
    CU_ASSERT_EQUAL(out.previous_state, -1);
    CU_ASSERT_EQUAL(out.error_message.len, -1);
    CU_ASSERT_EQUAL(out.retry_attempt, 3);
    CU_ASSERT_FALSE(out.non_retryable);

    /* negative values other than -1 are malformed */
    km_state_pwrite_init(&w);
    w.leader_epoch = -5;
    CU_ASSERT_EQUAL(km_state_pstate_apply(&cur.u.partition, &w, 1, &out, &msg),
                    KP_ERR_INVALID_REQUEST);
}

/* ---- the table and replay ---------------------------------------------------------------- */

static void ts_test_replay(void)
{
    fakehost_t *fh = fakehost_new(NULL);
    km_plugin_t *cm = ts_bare_cm(fh);
    km_state_table_t t;
    km_state_replay_stats_t stats;
    uint8_t ka[KP_STATE_KEY_MAX_SIZE], kb[KP_STATE_KEY_MAX_SIZE], km[KP_STATE_KEY_MAX_SIZE];
    uint8_t kx[KP_STATE_KEY_MAX_SIZE];
    size_t la, lb, lm, lx, l1, l2, l3;
    uint8_t *v1 = ts_pvalue(KP_PSTATE_PREPARING, 1, 3, &l1);
    uint8_t *v2 = ts_pvalue(KP_PSTATE_MIRRORING, 2, 3, &l2);
    uint8_t *v3 = ts_pvalue(KP_PSTATE_PAUSING, 3, 4, &l3);
    const km_state_entry_t *e;
    kp_batch_opts_t o;
    kp_writer_t log;
    int64_t next = 0;
    static const uint8_t garbage[] = {0xff, 0xff, 0xff};

    la = ts_key(ka, KP_STATE_REC_PARTITION_STATE, "m1", &TS_T1, 0);
    lb = ts_key(kb, KP_STATE_REC_PARTITION_STATE, "m1", &TS_T1, 1);
    lm = ts_key(km, KP_STATE_REC_PARTITION_STATE, "m2", &TS_T1, 0);
    /* a record type this version does not know (a newer writer): key type 9 */
    memcpy(kx, ka, la);
    kx[1] = 9;
    lx = la;
    memset(&stats, 0, sizeof(stats));
    km_state_table_init(&t, cm);
    kp_writer_init(&log);
    {
        ts_rec_t r0[] = {{ka, la, v1, l1}, {kb, lb, v1, l1}};
        ts_rec_t r1[] = {{ka, la, v2, l2}, {kb, lb, NULL, 0}, {km, lm, v3, l3}};
        ts_rec_t r2[] = {{kx, lx, v1, l1}, {km, lm, garbage, sizeof(garbage)}};
        ts_rec_t r3[] = {{ka, la, v3, l3}};

        ts_batch(&log, 0, r0, 2);
        ts_batch(&log, 2, r1, 3);
        kp_batch_opts_init(&o);
        o.baseOffset = 5;
        o.producerId = 9;
        o.producerEpoch = 0;
        o.transactional = true;
        CU_ASSERT_EQUAL(kp_batch_build_control(&log, &o, KP_CONTROL_TYPE_COMMIT, 0, 1000), 0);
        ts_batch(&log, 6, r2, 2);
        ts_batch(&log, 8, r3, 1);
    }
    CU_ASSERT_EQUAL(km_state_table_replay(&t, 0, log.buf, log.len, &next, &stats), KM_OK);
    CU_ASSERT_EQUAL(next, 9);
    CU_ASSERT_EQUAL(t.count, 2);
    e = km_state_table_get(&t, ka, la); /* latest value wins */
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_EQUAL(e->value_len, l3);
    CU_ASSERT_EQUAL(memcmp(e->value, v3, l3), 0);
    CU_ASSERT_PTR_NULL(km_state_table_get(&t, kb, lb)); /* tombstone deleted it */
    e = km_state_table_get(&t, km, lm); /* the unreadable later value did not replace it */
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_EQUAL(memcmp(e->value, v3, l3), 0);
    CU_ASSERT_PTR_NULL(km_state_table_get(&t, kx, lx));
    CU_ASSERT_EQUAL(stats.records, 6);
    CU_ASSERT_EQUAL(stats.tombstones, 1);
    CU_ASSERT_EQUAL(stats.skipped, 1);
    CU_ASSERT_EQUAL(stats.bad, 1);
    CU_ASSERT_EQUAL(stats.control, 1);
    CU_ASSERT_TRUE(fakehost_log_contains(fh, "__mirror_state-0 offset 7: unreadable record"));

    /* A read that starts inside a batch skips what was applied; a partial batch waits. */
    {
        km_state_table_t t2;
        km_state_replay_stats_t s2;
        int64_t n2 = 3;

        memset(&s2, 0, sizeof(s2));
        km_state_table_init(&t2, cm);
        CU_ASSERT_EQUAL(km_state_table_replay(&t2, 0, log.buf, log.len - 10, &n2, &s2), KM_OK);
        CU_ASSERT_EQUAL(n2, 8); /* the last batch is cut */
        CU_ASSERT_PTR_NULL(km_state_table_get(&t2, ka, la));
        CU_ASSERT_PTR_NOT_NULL(km_state_table_get(&t2, km, lm));
        CU_ASSERT_EQUAL(s2.records, 2); /* kb tombstone, km (kx skipped, km's garbage bad) */
        km_state_table_clear(&t2);
    }
    /* A corrupt batch stops the replay at it. */
    log.buf[2 * 61 + 30] ^= 0x55;
    {
        km_state_table_t t3;
        km_state_replay_stats_t s3;
        int64_t n3 = 0;

        memset(&s3, 0, sizeof(s3));
        km_state_table_init(&t3, cm);
        CU_ASSERT_EQUAL(km_state_table_replay(&t3, 0, log.buf, log.len, &n3, &s3), KM_ERR_INVALID);
        CU_ASSERT_TRUE(n3 <= 2);
        km_state_table_clear(&t3);
    }
    /* Many keys: the table grows and keeps every one. */
    {
        int i;

        for (i = 0; i < 1000; i++) {
            uint8_t k[KP_STATE_KEY_MAX_SIZE];
            size_t kl = ts_key(k, KP_STATE_REC_PARTITION_STATE, "many", &TS_T1, i);

            CU_ASSERT_EQUAL(km_state_table_put(&t, k, kl, v1, l1), KM_OK);
        }
        CU_ASSERT_EQUAL(t.count, 1002);
        for (i = 0; i < 1000; i += 97) {
            uint8_t k[KP_STATE_KEY_MAX_SIZE];
            size_t kl = ts_key(k, KP_STATE_REC_PARTITION_STATE, "many", &TS_T1, i);

            CU_ASSERT_PTR_NOT_NULL(km_state_table_get(&t, k, kl));
        }
    }
    km_state_table_clear(&t);
    CU_ASSERT_EQUAL(fakehost_live_allocs(fh), 0);
    kp_writer_free(&log);
    free(v1);
    free(v2);
    free(v3);
    free(cm);
    fakehost_free(fh);
}

/* ---- a fake broker serving the plugin's requests ------------------------------------------- */

typedef struct ts_env ts_env_t;
struct ts_env {
    fakehost_t *fh;
    void *ctx;
    km_plugin_t *cm;
    ts_env_t *peer;     /* the broker broker_request reaches */
    int32_t md_leader;  /* what Metadata answers for __mirror_state partitions */
    int32_t md_brokers; /* how many brokers Metadata lists */
    int produces, fetches, metadatas, creates, remotes;
    int empty_fetches; /* answer this many Fetches without records (as after compaction) */
    int32_t create_partitions, create_rf;
    bool create_compact;
};

static uint8_t *ts_encode_done(kp_writer_t *wr, size_t *len)
{
    CU_ASSERT_EQUAL(wr->err, 0);
    return kp_writer_steal(wr, len);
}

static int32_t ts_serve_produce(ts_env_t *env, const uint8_t *body, size_t len, uint8_t **resp,
                                size_t *resp_len)
{
    const kbx_api_t *api = fakehost_api(env->fh);
    kp_ProduceRequest_t rq;
    kp_ProduceResponse_t rs;
    kp_ProduceResponse_TopicProduceResponse_t tr;
    kp_ProduceResponse_PartitionProduceResponse_t pr;
    kbx_partition_t *part = NULL;
    kbx_log_offsets_t offs = {.struct_size = sizeof(offs)};
    kp_reader_t rd;
    kp_arena_t ar;
    kp_writer_t wr;
    uint8_t *copy;
    int32_t rc;

    env->produces++;
    kp_arena_init(&ar, 0);
    kp_reader_init(&rd, body, len);
    CU_ASSERT_EQUAL_FATAL(kp_ProduceRequest_decode(&rd, &ar, &rq, 9), 0);
    CU_ASSERT_EQUAL(rq.Acks, -1);
    CU_ASSERT_TRUE(kp_str_eq(rq.TopicData.v[0].Name, "__mirror_state"));
    kp_ProduceResponse_init(&rs);
    kp_ProduceResponse_TopicProduceResponse_init(&tr);
    kp_ProduceResponse_PartitionProduceResponse_init(&pr);
    rs.Responses.cnt = 1;
    rs.Responses.v = &tr;
    tr.Name = rq.TopicData.v[0].Name;
    tr.PartitionResponses.cnt = 1;
    tr.PartitionResponses.v = &pr;
    pr.Index = rq.TopicData.v[0].PartitionData.v[0].Index;
    pr.ErrorMessage = KP_STR_NULL;
    rc = api->partition_acquire(fakehost_host(env->fh), &TS_MS_ID, pr.Index, -1, &part);
    if (rc == KBX_OK)
        rc = api->log_offsets(fakehost_host(env->fh), part, &offs);
    if (rc == KBX_OK) {
        kp_bytes_t recs = rq.TopicData.v[0].PartitionData.v[0].Records;

        copy = malloc((size_t)recs.len);
        memcpy(copy, recs.ptr, (size_t)recs.len);
        kp_batch_set_base_offset(copy, (size_t)recs.len, offs.log_end_offset);
        rc = api->log_append(fakehost_host(env->fh), part, copy, (size_t)recs.len, NULL);
        free(copy);
    }
    if (part != NULL)
        api->partition_release(fakehost_host(env->fh), part);
    pr.ErrorCode = rc == KBX_OK ? 0 : KP_ERR_NOT_LEADER_OR_FOLLOWER;
    pr.BaseOffset = rc == KBX_OK ? offs.log_end_offset : -1;
    kp_writer_init(&wr);
    kp_ProduceResponse_encode(&wr, &rs, 9);
    *resp = ts_encode_done(&wr, resp_len);
    kp_arena_free(&ar);
    return KBX_OK;
}

static int32_t ts_serve_fetch(ts_env_t *env, const uint8_t *body, size_t len, uint8_t **resp,
                              size_t *resp_len)
{
    kp_FetchRequest_t rq;
    kp_FetchResponse_t rs;
    kp_FetchResponse_FetchableTopicResponse_t tr;
    kp_FetchResponse_PartitionData_t pd;
    kbx_log_offsets_t offs = {.struct_size = sizeof(offs)};
    const uint8_t *data;
    size_t dlen = 0, from = 0;
    kp_batch_iter_t it;
    kp_batch_t b;
    kp_reader_t rd;
    kp_arena_t ar;
    kp_writer_t wr;
    int64_t at;

    env->fetches++;
    kp_arena_init(&ar, 0);
    kp_reader_init(&rd, body, len);
    CU_ASSERT_EQUAL_FATAL(kp_FetchRequest_decode(&rd, &ar, &rq, 12), 0);
    at = rq.Topics.v[0].Partitions.v[0].FetchOffset;
    kp_FetchResponse_init(&rs);
    kp_FetchResponse_FetchableTopicResponse_init(&tr);
    kp_FetchResponse_PartitionData_init(&pd);
    rs.Responses.cnt = 1;
    rs.Responses.v = &tr;
    tr.Topic = rq.Topics.v[0].Topic;
    tr.Partitions.cnt = 1;
    tr.Partitions.v = &pd;
    pd.PartitionIndex = rq.Topics.v[0].Partitions.v[0].Partition;
    pd.AbortedTransactions.cnt = -1;
    offs.leader_epoch = -99; /* stays when the partition does not exist (an empty log is NULL) */
    data = fakehost_partition_log(env->fh, &TS_MS_ID, pd.PartitionIndex, &dlen, &offs);
    if (offs.leader_epoch == -99) {
        pd.ErrorCode = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    } else if (offs.leader_epoch != rq.Topics.v[0].Partitions.v[0].CurrentLeaderEpoch) {
        pd.ErrorCode = KP_ERR_FENCED_LEADER_EPOCH;
    } else if (at > offs.log_end_offset || at < offs.log_start_offset) {
        pd.ErrorCode = KP_ERR_OFFSET_OUT_OF_RANGE;
    } else {
        kp_batch_iter_init(&it, data, dlen, 0, 0);
        from = dlen;
        while (kp_batch_iter_next(&it, &b) == 1)
            if (kp_batch_hdr_last_offset(&b.hdr) >= at) {
                from = (size_t)(b.buf - data);
                break;
            }
        pd.HighWatermark = offs.high_watermark;
        pd.LastStableOffset = offs.high_watermark;
        pd.LogStartOffset = offs.log_start_offset;
        pd.Records = data != NULL ? (kp_bytes_t){data + from, (int32_t)(dlen - from)}
                                  : (kp_bytes_t){NULL, 0}; /* an empty log */
        if (env->empty_fetches > 0) {
            env->empty_fetches--;
            pd.Records = (kp_bytes_t){NULL, 0};
        }
    }
    kp_writer_init(&wr);
    kp_FetchResponse_encode(&wr, &rs, 12);
    *resp = ts_encode_done(&wr, resp_len);
    kp_arena_free(&ar);
    return KBX_OK;
}

static int32_t ts_serve_metadata(ts_env_t *env, uint8_t **resp, size_t *resp_len)
{
    kp_MetadataResponse_t rs;
    kp_MetadataResponse_MetadataResponseTopic_t t;
    kp_MetadataResponse_MetadataResponsePartition_t p[8];
    kp_writer_t wr;
    int32_t i, n = env->cm->conf.state_topic_num_partitions;

    env->metadatas++;
    kp_MetadataResponse_init(&rs);
    kp_MetadataResponse_MetadataResponseTopic_init(&t);
    rs.Topics.cnt = 1;
    rs.Topics.v = &t;
    kp_MetadataResponse_MetadataResponseBroker_t br[8];

    rs.Brokers.cnt = env->md_brokers;
    rs.Brokers.v = br;
    for (i = 0; i < env->md_brokers && i < 8; i++) {
        kp_MetadataResponse_MetadataResponseBroker_init(&br[i]);
        br[i].NodeId = i + 1;
        br[i].Host = kp_str("127.0.0.1");
        br[i].Port = 9092 + i;
        br[i].Rack = KP_STR_NULL;
    }
    t.Name = kp_str("__mirror_state");
    t.Partitions.cnt = n;
    t.Partitions.v = p;
    for (i = 0; i < n && i < 8; i++) {
        kp_MetadataResponse_MetadataResponsePartition_init(&p[i]);
        p[i].PartitionIndex = i;
        p[i].LeaderId = env->md_leader;
        p[i].ReplicaNodes.cnt = 0;
        p[i].IsrNodes.cnt = 0;
        p[i].OfflineReplicas.cnt = 0;
    }
    kp_writer_init(&wr);
    kp_MetadataResponse_encode(&wr, &rs, 12);
    *resp = ts_encode_done(&wr, resp_len);
    return KBX_OK;
}

static int32_t ts_serve_create(ts_env_t *env, const uint8_t *body, size_t len, uint8_t **resp,
                               size_t *resp_len)
{
    kp_CreateTopicsRequest_t rq;
    kp_CreateTopicsResponse_t rs;
    kp_CreateTopicsResponse_CreatableTopicResult_t r;
    kp_reader_t rd;
    kp_arena_t ar;
    kp_writer_t wr;
    int32_t i;

    env->creates++;
    kp_arena_init(&ar, 0);
    kp_reader_init(&rd, body, len);
    CU_ASSERT_EQUAL_FATAL(kp_CreateTopicsRequest_decode(&rd, &ar, &rq, 7), 0);
    CU_ASSERT_TRUE(kp_str_eq(rq.Topics.v[0].Name, "__mirror_state"));
    env->create_partitions = rq.Topics.v[0].NumPartitions;
    env->create_rf = rq.Topics.v[0].ReplicationFactor;
    for (i = 0; i < rq.Topics.v[0].Configs.cnt; i++)
        if (kp_str_eq(rq.Topics.v[0].Configs.v[i].Name, "cleanup.policy") &&
            kp_str_eq(rq.Topics.v[0].Configs.v[i].Value, "compact"))
            env->create_compact = true;
    kp_CreateTopicsResponse_init(&rs);
    kp_CreateTopicsResponse_CreatableTopicResult_init(&r);
    r.Name = rq.Topics.v[0].Name;
    r.ErrorMessage = KP_STR_NULL;
    r.Configs.cnt = -1;
    rs.Topics.cnt = 1;
    rs.Topics.v = &r;
    kp_writer_init(&wr);
    kp_CreateTopicsResponse_encode(&wr, &rs, 7);
    *resp = ts_encode_done(&wr, resp_len);
    kp_arena_free(&ar);
    return KBX_OK;
}

static int32_t ts_rpc(fakehost_t *fh, int16_t key, const uint8_t *body, size_t len, uint8_t **resp,
                      size_t *resp_len);

static int32_t ts_serve(void *arg, int32_t broker_id, int16_t api_key, int16_t api_version,
                        const uint8_t *body, size_t len, uint8_t **resp, size_t *resp_len)
{
    ts_env_t *env = arg;

    (void)api_version;
    if (broker_id >= 0) {
        env->remotes++;
        if (env->peer == NULL || broker_id != env->peer->cm->broker_id)
            return KBX_ERR_NETWORK;
        return ts_rpc(env->peer->fh, api_key, body, len, resp, resp_len);
    }
    switch (api_key) {
    case KP_APIKEY_Produce:
        return ts_serve_produce(env, body, len, resp, resp_len);
    case KP_APIKEY_Fetch:
        return ts_serve_fetch(env, body, len, resp, resp_len);
    case KP_APIKEY_Metadata:
        return ts_serve_metadata(env, resp, resp_len);
    case KP_APIKEY_CreateTopics:
        return ts_serve_create(env, body, len, resp, resp_len);
    default:
        return KBX_ERR_UNSUPPORTED;
    }
}

/* A request to a broker's plugin as a client sends it; its response (malloc'd) when done. */
static int32_t ts_rpc(fakehost_t *fh, int16_t key, const uint8_t *body, size_t len, uint8_t **resp,
                      size_t *resp_len)
{
    fakehost_call_t *call = NULL;
    const uint8_t *r;

    if (fakehost_rpc_call(fh, key, 0, body, len, &call) < 0)
        return KBX_ERR_NETWORK;
    fakehost_run_until_idle(fh);
    if (fakehost_call_state(call) != FAKEHOST_CALL_COMPLETED)
        return KBX_ERR_TIMEOUT;
    r = fakehost_call_response(call, resp_len);
    *resp = malloc(*resp_len + 1);
    memcpy(*resp, r, *resp_len);
    return KBX_OK;
}

static void ts_env_start(ts_env_t *env, int32_t broker_id, const char *nparts)
{
    fakehost_opts_t o = {.broker_id = broker_id};

    memset(env, 0, sizeof(*env));
    env->fh = fakehost_new(&o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(env->fh);
    fakehost_config_set(env->fh, "mirror.enable", "true");
    fakehost_config_set(env->fh, "mirror.state.topic.num.partitions", nparts);
    fakehost_set_request_handler(env->fh, ts_serve, env);
    env->md_leader = -1;
}

static void ts_env_init(ts_env_t *env)
{
    char err[256];

    CU_ASSERT_EQUAL_FATAL(kbx_plugin_entry()->init(fakehost_api(env->fh), fakehost_host(env->fh),
                                                   &env->ctx, err, sizeof(err)),
                          0);
    env->cm = env->ctx;
}

static void ts_env_stop(ts_env_t *env)
{
    kbx_plugin_entry()->fini(env->ctx);
    fh_cunit_assert_clean(env->fh);
    fakehost_free(env->fh);
}

/* Tell the plugin that topic "orders" (TS_T1) exists. */
static void ts_publish_orders(ts_env_t *env)
{
    kbx_topic_change_t t = {.struct_size = sizeof(t),
                            .flags = KBX_TOPIC_CREATED,
                            .topic_id = TS_T1,
                            .name = "orders",
                            .partition_count = 4};
    const kbx_topic_change_t *tp[] = {&t};
    kbx_broker_change_t b = {
        .struct_size = sizeof(b), .broker_id = 1, .flags = KBX_BROKER_REGISTERED};
    const kbx_broker_change_t *bp[] = {&b};
    kbx_metadata_delta_t d = {.struct_size = sizeof(d),
                              .metadata_offset = 1,
                              .topics = tp,
                              .topic_count = 1,
                              .brokers = bp,
                              .broker_count = 1};

    fakehost_publish_delta(env->fh, &d);
    fakehost_run_until_idle(env->fh);
}

/* Append a batch of (key, value) records to the fake __mirror_state-p log. */
static void ts_log_append(ts_env_t *env, int32_t p, const ts_rec_t *r, int n)
{
    const kbx_api_t *api = fakehost_api(env->fh);
    kbx_log_offsets_t offs = {.struct_size = sizeof(offs)};
    kbx_partition_t *part;
    kp_writer_t wr;

    CU_ASSERT_EQUAL_FATAL(api->partition_acquire(fakehost_host(env->fh), &TS_MS_ID, p, -1, &part),
                          KBX_OK);
    api->log_offsets(fakehost_host(env->fh), part, &offs);
    kp_writer_init(&wr);
    ts_batch(&wr, offs.log_end_offset, r, n);
    CU_ASSERT_EQUAL(api->log_append(fakehost_host(env->fh), part, wr.buf, wr.len, NULL), KBX_OK);
    api->partition_release(fakehost_host(env->fh), part);
    kp_writer_free(&wr);
}

/* The TopicId ts_read / ts_write send (tagged; NULL: none, the coordinator resolves the name). */
static const kbx_uuid_t *ts_topic_id;

/* ReadMirrorStates for one partition of "orders"; returns the partition's error code. */
static int16_t ts_read(ts_env_t *env, const char *mirror, int32_t partition,
                       kp_ReadMirrorStatesResponse_PartitionResult_t *out)
{
    kp_ReadMirrorStatesRequest_t rq;
    kp_ReadMirrorStatesRequest_TopicMetadata_t t;
    kp_ReadMirrorStatesRequest_PartitionData_t p;
    kp_ReadMirrorStatesResponse_t rs;
    kp_writer_t wr;
    kp_reader_t rd;
    kp_arena_t ar;
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int16_t ec;

    kp_ReadMirrorStatesRequest_init(&rq);
    kp_ReadMirrorStatesRequest_TopicMetadata_init(&t);
    kp_ReadMirrorStatesRequest_PartitionData_init(&p);
    rq.MirrorName = kp_str(mirror);
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    t.TopicName = kp_str("orders");
    if (ts_topic_id != NULL)
        memcpy(t.TopicId.b, ts_topic_id->bytes, 16);
    t.Partitions.cnt = 1;
    t.Partitions.v = &p;
    p.PartitionIndex = partition;
    kp_writer_init(&wr);
    kp_ReadMirrorStatesRequest_encode(&wr, &rq, 0);
    CU_ASSERT_EQUAL_FATAL(ts_rpc(env->fh, KP_APIKEY_ReadMirrorStates, wr.buf, wr.len, &resp, &rlen),
                          KBX_OK);
    kp_writer_free(&wr);
    kp_arena_init(&ar, 0);
    kp_reader_init(&rd, resp, rlen);
    CU_ASSERT_EQUAL_FATAL(kp_ReadMirrorStatesResponse_decode(&rd, &ar, &rs, 0), 0);
    if (rs.ErrorCode != 0) {
        ec = rs.ErrorCode;
    } else {
        CU_ASSERT_EQUAL_FATAL(rs.Topics.cnt, 1);
        CU_ASSERT_EQUAL_FATAL(rs.Topics.v[0].Partitions.cnt, 1);
        ec = rs.Topics.v[0].Partitions.v[0].ErrorCode;
        CU_ASSERT_TRUE(ec == 0 || rs.Topics.v[0].Partitions.v[0].ErrorMessage.len > 0);
        if (out != NULL) {
            *out = rs.Topics.v[0].Partitions.v[0];
            out->ErrorMessage = KP_STR_NULL; /* points into the arena */
        }
    }
    kp_arena_free(&ar);
    free(resp);
    return ec;
}

/* WriteMirrorStates for one partition; returns its error code, *epoch the new state epoch. */
static int16_t ts_write(ts_env_t *env, const char *mirror, int32_t partition, int8_t state,
                        int32_t leader_epoch, int32_t state_epoch, int32_t *epoch)
{
    kp_WriteMirrorStatesRequest_t rq;
    kp_WriteMirrorStatesRequest_TopicMetadata_t t;
    kp_WriteMirrorStatesRequest_PartitionData_t p;
    kp_WriteMirrorStatesResponse_t rs;
    kp_writer_t wr;
    kp_reader_t rd;
    kp_arena_t ar;
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int16_t ec;

    kp_WriteMirrorStatesRequest_init(&rq);
    kp_WriteMirrorStatesRequest_TopicMetadata_init(&t);
    kp_WriteMirrorStatesRequest_PartitionData_init(&p);
    rq.MirrorName = kp_str(mirror);
    rq.Topics.cnt = 1;
    rq.Topics.v = &t;
    t.TopicName = kp_str("orders");
    if (ts_topic_id != NULL)
        memcpy(t.TopicId.b, ts_topic_id->bytes, 16);
    t.Partitions.cnt = 1;
    t.Partitions.v = &p;
    p.PartitionIndex = partition;
    p.State = state;
    p.LeaderEpoch = leader_epoch;
    p.StateEpoch = state_epoch;
    kp_writer_init(&wr);
    kp_WriteMirrorStatesRequest_encode(&wr, &rq, 0);
    CU_ASSERT_EQUAL_FATAL(
        ts_rpc(env->fh, KP_APIKEY_WriteMirrorStates, wr.buf, wr.len, &resp, &rlen), KBX_OK);
    kp_writer_free(&wr);
    kp_arena_init(&ar, 0);
    kp_reader_init(&rd, resp, rlen);
    CU_ASSERT_EQUAL_FATAL(kp_WriteMirrorStatesResponse_decode(&rd, &ar, &rs, 0), 0);
    if (rs.ErrorCode != 0) {
        ec = rs.ErrorCode;
    } else {
        CU_ASSERT_EQUAL_FATAL(rs.Topics.cnt, 1);
        ec = rs.Topics.v[0].Partitions.v[0].ErrorCode;
        CU_ASSERT_TRUE(ec == 0 || rs.Topics.v[0].Partitions.v[0].ErrorMessage.len > 0);
        if (epoch != NULL)
            *epoch = rs.Topics.v[0].Partitions.v[0].StateEpoch;
    }
    kp_arena_free(&ar);
    free(resp);
    return ec;
}

static size_t ts_log_len(ts_env_t *env, int32_t p)
{
    size_t len = 0;

    fakehost_partition_log(env->fh, &TS_MS_ID, p, &len, NULL);
    return len;
}

/* ---- one broker -------------------------------------------------------------------------- */

typedef struct ts_result {
    int done;
    int16_t err;
    int32_t epoch;
    km_state_pstate_t st;
    bool saw_error; /* st.error_message was "source topic deleted" during the callback */
} ts_result_t;

static void ts_delete_run(km_plugin_t *cm, void *arg);

/* km_state_put_record / km_state_get_record of a MIRROR record (type 3), on the loop. */
typedef struct ts_rec_req {
    bool put, tomb;
    int16_t err;
    int done;
    bool found;
    kp_state_value_t v; /* put: the value; get: what was read (strings not kept) */
    uint8_t mirror_id[16];
} ts_rec_req_t;

static void ts_rec_done(km_plugin_t *cm, void *arg, int16_t err, const char *msg)
{
    ts_rec_req_t *rr = arg;

    (void)cm;
    rr->done++;
    rr->err = err;
    CU_ASSERT_TRUE(err == 0 || msg != NULL);
}

static void ts_rec_got(km_plugin_t *cm, void *arg, int16_t err, const char *msg,
                       const kp_state_value_t *v)
{
    ts_rec_req_t *rr = arg;

    (void)cm;
    rr->done++;
    rr->err = err;
    rr->found = v != NULL;
    CU_ASSERT_TRUE(err == 0 || msg != NULL);
    if (v != NULL) {
        CU_ASSERT_EQUAL(v->type, KP_STATE_REC_MIRROR);
        rr->v = *v;
        memcpy(rr->mirror_id, v->u.mirror.mirror_id.b, 16);
        rr->v.u.mirror.source_cluster_id = KP_STR_NULL;
    }
}

static void ts_rec_run(km_plugin_t *cm, void *arg)
{
    ts_rec_req_t *rr = arg;
    km_err_t err;

    if (rr->put)
        err = km_state_put_record(cm, KP_STATE_REC_MIRROR, "m1", NULL, -1, rr->tomb ? NULL : &rr->v,
                                  ts_rec_done, rr);
    else
        err = km_state_get_record(cm, KP_STATE_REC_MIRROR, "m1", NULL, -1, ts_rec_got, rr);
    CU_ASSERT_EQUAL(err, KM_OK);
}

static void ts_rec(fakehost_t *fh, km_plugin_t *cm, ts_rec_req_t *rr)
{
    rr->done = 0;
    CU_ASSERT_EQUAL_FATAL(km_coord_post(&cm->coord, ts_rec_run, NULL, rr), KM_OK);
    fakehost_run_until_idle(fh);
    CU_ASSERT_EQUAL(rr->done, 1);
}

static void ts_test_shard(void)
{
    ts_env_t env;
    kp_ReadMirrorStatesResponse_PartitionResult_t pr;
    uint8_t k0[KP_STATE_KEY_MAX_SIZE], k1[KP_STATE_KEY_MAX_SIZE];
    size_t l0 = ts_key(k0, KP_STATE_REC_PARTITION_STATE, "m1", &TS_T1, 0);
    size_t l1 = ts_key(k1, KP_STATE_REC_PARTITION_STATE, "m1", &TS_T1, 1);
    size_t la, lb, lc, len_before;
    uint8_t *va = ts_pvalue(KP_PSTATE_PREPARING, 1, 3, &la);
    uint8_t *vb = ts_pvalue(KP_PSTATE_MIRRORING, 2, 3, &lb);
    uint8_t *vc = ts_pvalue(KP_PSTATE_PAUSING, 1, 2, &lc);
    int32_t epoch = -2;
    double v = 0;

    ts_env_start(&env, 1, "1");
    /* The log before this broker leads: p0 written twice, p1 written then deleted. */
    CU_ASSERT_EQUAL(
        fakehost_partition_add(env.fh, &TS_MS_ID, "__mirror_state", 0, 5, true, KBX_WRITE_PENDING),
        0);
    {
        ts_rec_t r0[] = {{k0, l0, va, la}, {k1, l1, vc, lc}};
        ts_rec_t r1[] = {{k0, l0, vb, lb}, {k1, l1, NULL, 0}};

        ts_log_append(&env, 0, r0, 2);
        ts_log_append(&env, 0, r1, 2);
    }
    ts_env_init(&env);
    fakehost_run_until_idle(env.fh);
    ts_publish_orders(&env);
    CU_ASSERT_TRUE(km_state_shard_loaded(env.cm, 0));
    CU_ASSERT_EQUAL(km_state_shard_count(env.cm), 1);
    CU_ASSERT_TRUE(env.fetches >= 1);
    CU_ASSERT_TRUE(fakehost_metric_get(env.fh, "kafka.server.mirror", "MirrorStateShardCount", &v));
    CU_ASSERT_EQUAL(v, 1);
    CU_ASSERT_TRUE(fakehost_metric_get(env.fh, "kafka.server.mirror", "MirrorStateLoadTimeMs", &v));
    CU_ASSERT_EQUAL(v, 1);

    /* Replayed: latest value of p0, nothing for p1 (tombstone), nothing for another mirror. */
    CU_ASSERT_EQUAL(ts_read(&env, "m1", 0, &pr), 0);
    CU_ASSERT_EQUAL(pr.State, KP_PSTATE_MIRRORING);
    CU_ASSERT_EQUAL(pr.StateEpoch, 2);
    CU_ASSERT_EQUAL(pr.LeaderEpoch, 3);
    CU_ASSERT_EQUAL(ts_read(&env, "m1", 1, &pr), 0);
    CU_ASSERT_EQUAL(pr.State, -1);
    CU_ASSERT_EQUAL(pr.StateEpoch, 0);
    CU_ASSERT_EQUAL(ts_read(&env, "m2", 0, &pr), 0);
    CU_ASSERT_EQUAL(pr.State, -1);

    /* A valid write is appended (acks=-1) and then served. */
    len_before = ts_log_len(&env, 0);
    CU_ASSERT_EQUAL(ts_write(&env, "m1", 0, KP_PSTATE_PAUSING, 4, 2, &epoch), 0);
    CU_ASSERT_EQUAL(epoch, 3);
    CU_ASSERT_TRUE(ts_log_len(&env, 0) > len_before);
    CU_ASSERT_EQUAL(ts_read(&env, "m1", 0, &pr), 0);
    CU_ASSERT_EQUAL(pr.State, KP_PSTATE_PAUSING);
    CU_ASSERT_EQUAL(pr.StateEpoch, 3);
    CU_ASSERT_EQUAL(pr.LeaderEpoch, 4);

    /* The requester's TopicId keys the state, not this broker's view of the name: a leader of
     * "orders" re-created as another topic (TS_T2) while this broker still maps the name to
     * TS_T1 neither reads nor overwrites the old topic's state (design M117). */
    ts_topic_id = &TS_T2;
    CU_ASSERT_EQUAL(ts_read(&env, "m1", 0, &pr), 0);
    CU_ASSERT_EQUAL(pr.State, -1);
    CU_ASSERT_EQUAL(pr.StateEpoch, 0);
    CU_ASSERT_EQUAL(ts_write(&env, "m1", 0, KP_PSTATE_PREPARING, 0, -1, &epoch), 0);
    CU_ASSERT_EQUAL(epoch, 1);
    CU_ASSERT_EQUAL(ts_read(&env, "m1", 0, &pr), 0);
    CU_ASSERT_EQUAL(pr.State, KP_PSTATE_PREPARING);
    ts_topic_id = &TS_T1;
    CU_ASSERT_EQUAL(ts_read(&env, "m1", 0, &pr), 0);
    CU_ASSERT_EQUAL(pr.State, KP_PSTATE_PAUSING);
    CU_ASSERT_EQUAL(pr.StateEpoch, 3);
    ts_topic_id = NULL;
    CU_ASSERT_EQUAL(ts_read(&env, "m1", 0, &pr), 0);
    CU_ASSERT_EQUAL(pr.State, KP_PSTATE_PAUSING);

    /* Fencing and invalid transitions on the wire: refused, nothing appended. */
    len_before = ts_log_len(&env, 0);
    CU_ASSERT_EQUAL(ts_write(&env, "m1", 0, KP_PSTATE_PAUSED, 3, -1, &epoch),
                    KP_ERR_FENCED_LEADER_EPOCH);
    CU_ASSERT_EQUAL(epoch, -1);
    CU_ASSERT_EQUAL(ts_write(&env, "m1", 0, KP_PSTATE_PAUSED, 4, 2, &epoch),
                    KP_ERR_FENCED_STATE_EPOCH);
    CU_ASSERT_EQUAL(ts_write(&env, "m1", 0, KP_PSTATE_STOPPED, 4, 3, &epoch),
                    KP_ERR_INVALID_CLUSTER_MIRROR_STATES);
    CU_ASSERT_EQUAL(ts_log_len(&env, 0), len_before);
    CU_ASSERT_EQUAL(ts_write(&env, "m1", 0, KP_PSTATE_PAUSED, -1, -1, &epoch), 0);
    CU_ASSERT_EQUAL(epoch, 4);
    /* Bad mirror names and partitions are answered per partition, with a message. */
    CU_ASSERT_EQUAL(ts_read(&env, "", 0, NULL), KP_ERR_INVALID_REQUEST);
    CU_ASSERT_EQUAL(ts_write(&env, "", 0, KP_PSTATE_PAUSED, -1, -1, NULL), KP_ERR_INVALID_REQUEST);
    CU_ASSERT_EQUAL(ts_read(&env, "m1", -3, NULL), KP_ERR_UNKNOWN_TOPIC_OR_PARTITION);

    /* Resignation: NOT_COORDINATOR. */
    fakehost_partition_set_leader(env.fh, &TS_MS_ID, 0, 6, false);
    fakehost_run_until_idle(env.fh);
    CU_ASSERT_EQUAL(km_state_shard_count(env.cm), 0);
    CU_ASSERT_EQUAL(ts_read(&env, "m1", 0, NULL), KP_ERR_NOT_COORDINATOR);
    CU_ASSERT_EQUAL(ts_write(&env, "m1", 0, KP_PSTATE_MIRRORING, -1, -1, NULL),
                    KP_ERR_NOT_COORDINATOR);

    /* Leader again at a new epoch: reloaded from the log, the same state. */
    fakehost_partition_set_leader(env.fh, &TS_MS_ID, 0, 7, true);
    fakehost_run_until_idle(env.fh);
    CU_ASSERT_TRUE(km_state_shard_loaded(env.cm, 0));
    CU_ASSERT_EQUAL(ts_read(&env, "m1", 0, &pr), 0);
    CU_ASSERT_EQUAL(pr.State, KP_PSTATE_PAUSED);
    CU_ASSERT_EQUAL(pr.StateEpoch, 4);

    /* A write in flight when leadership moves: it fails, nothing changes. */
    {
        fakehost_call_t *call = NULL;
        kp_WriteMirrorStatesRequest_t rq;
        kp_WriteMirrorStatesRequest_TopicMetadata_t t;
        kp_WriteMirrorStatesRequest_PartitionData_t p;
        kp_WriteMirrorStatesResponse_t rs;
        const uint8_t *resp;
        size_t rlen = 0;
        kp_writer_t wr;
        kp_reader_t rd;
        kp_arena_t ar;

        kp_WriteMirrorStatesRequest_init(&rq);
        kp_WriteMirrorStatesRequest_TopicMetadata_init(&t);
        kp_WriteMirrorStatesRequest_PartitionData_init(&p);
        rq.MirrorName = kp_str("m1");
        rq.Topics.cnt = 1;
        rq.Topics.v = &t;
        t.TopicName = kp_str("orders");
        t.Partitions.cnt = 1;
        t.Partitions.v = &p;
        p.PartitionIndex = 0;
        p.State = KP_PSTATE_MIRRORING;
        kp_writer_init(&wr);
        kp_WriteMirrorStatesRequest_encode(&wr, &rq, 0);
        fakehost_hold_async(env.fh, true);
        len_before = ts_log_len(&env, 0);
        CU_ASSERT_EQUAL(
            fakehost_rpc_call(env.fh, KP_APIKEY_WriteMirrorStates, 0, wr.buf, wr.len, &call),
            KBX_RPC_PENDING);
        kp_writer_free(&wr);
        fakehost_run_until_idle(env.fh);
        CU_ASSERT_EQUAL(fakehost_pending_async(env.fh), 1); /* the Produce */
        CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_PENDING);
        fakehost_partition_set_leader(env.fh, &TS_MS_ID, 0, 8, false);
        fakehost_run_until_idle(env.fh);
        fakehost_hold_async(env.fh, false);
        fakehost_run_until_idle(env.fh);
        CU_ASSERT_EQUAL_FATAL(fakehost_call_state(call), FAKEHOST_CALL_COMPLETED);
        resp = fakehost_call_response(call, &rlen);
        kp_arena_init(&ar, 0);
        kp_reader_init(&rd, resp, rlen);
        CU_ASSERT_EQUAL_FATAL(kp_WriteMirrorStatesResponse_decode(&rd, &ar, &rs, 0), 0);
        CU_ASSERT_EQUAL(rs.Topics.v[0].Partitions.v[0].ErrorCode, KP_ERR_NOT_COORDINATOR);
        CU_ASSERT_EQUAL(rs.Topics.v[0].Partitions.v[0].StateEpoch, -1);
        kp_arena_free(&ar);
        CU_ASSERT_EQUAL(ts_log_len(&env, 0), len_before); /* the follower refused the append */
    }
    fakehost_partition_set_leader(env.fh, &TS_MS_ID, 0, 9, true);
    fakehost_run_until_idle(env.fh);
    CU_ASSERT_EQUAL(ts_read(&env, "m1", 0, &pr), 0);
    CU_ASSERT_EQUAL(pr.State, KP_PSTATE_PAUSED);
    CU_ASSERT_EQUAL(pr.StateEpoch, 4);

    /* A client that goes away while its write is in flight: the write still completes. */
    {
        fakehost_call_t *call = NULL;
        kp_WriteMirrorStatesRequest_t rq;
        kp_WriteMirrorStatesRequest_TopicMetadata_t t;
        kp_WriteMirrorStatesRequest_PartitionData_t p;
        kp_writer_t wr;

        kp_WriteMirrorStatesRequest_init(&rq);
        kp_WriteMirrorStatesRequest_TopicMetadata_init(&t);
        kp_WriteMirrorStatesRequest_PartitionData_init(&p);
        rq.MirrorName = kp_str("m1");
        rq.Topics.cnt = 1;
        rq.Topics.v = &t;
        t.TopicName = kp_str("orders");
        t.Partitions.cnt = 1;
        t.Partitions.v = &p;
        p.PartitionIndex = 0;
        p.State = KP_PSTATE_MIRRORING;
        kp_writer_init(&wr);
        kp_WriteMirrorStatesRequest_encode(&wr, &rq, 0);
        fakehost_hold_async(env.fh, true);
        CU_ASSERT_EQUAL(
            fakehost_rpc_call(env.fh, KP_APIKEY_WriteMirrorStates, 0, wr.buf, wr.len, &call),
            KBX_RPC_PENDING);
        kp_writer_free(&wr);
        fakehost_run_until_idle(env.fh);
        fakehost_rpc_disconnect(env.fh, call);
        CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_CANCELLED);
        fakehost_hold_async(env.fh, false);
        fakehost_run_until_idle(env.fh);
        CU_ASSERT_EQUAL(ts_read(&env, "m1", 0, &pr), 0);
        CU_ASSERT_EQUAL(pr.State, KP_PSTATE_MIRRORING);
        CU_ASSERT_EQUAL(pr.StateEpoch, 5);
    }

    /* Malformed requests: INVALID_REQUEST with a message, not a crash. */
    {
        static const uint8_t junk[] = {0x00, 0x05, 'a'};
        uint8_t *resp = NULL;
        size_t rlen = 0;
        kp_WriteMirrorStatesResponse_t rs;
        kp_reader_t rd;
        kp_arena_t ar;

        CU_ASSERT_EQUAL_FATAL(
            ts_rpc(env.fh, KP_APIKEY_WriteMirrorStates, junk, sizeof(junk), &resp, &rlen), KBX_OK);
        kp_arena_init(&ar, 0);
        kp_reader_init(&rd, resp, rlen);
        CU_ASSERT_EQUAL_FATAL(kp_WriteMirrorStatesResponse_decode(&rd, &ar, &rs, 0), 0);
        CU_ASSERT_EQUAL(rs.ErrorCode, KP_ERR_INVALID_REQUEST);
        CU_ASSERT_TRUE(rs.ErrorMessage.len > 0);
        kp_arena_free(&ar);
        free(resp);
    }

    /* No memory to queue the Produce's answer on the loop: kept, answered with the next op. */
    {
        fakehost_call_t *call = NULL;
        kp_WriteMirrorStatesRequest_t rq;
        kp_WriteMirrorStatesRequest_TopicMetadata_t t;
        kp_WriteMirrorStatesRequest_PartitionData_t p;
        kp_WriteMirrorStatesResponse_t rs;
        const uint8_t *resp;
        size_t rlen = 0;
        kp_writer_t wr;
        kp_reader_t rd;
        kp_arena_t ar;

        kp_WriteMirrorStatesRequest_init(&rq);
        kp_WriteMirrorStatesRequest_TopicMetadata_init(&t);
        kp_WriteMirrorStatesRequest_PartitionData_init(&p);
        rq.MirrorName = kp_str("m1");
        rq.Topics.cnt = 1;
        rq.Topics.v = &t;
        t.TopicName = kp_str("orders");
        t.Partitions.cnt = 1;
        t.Partitions.v = &p;
        p.PartitionIndex = 0;
        p.State = KP_PSTATE_PAUSING;
        kp_writer_init(&wr);
        kp_WriteMirrorStatesRequest_encode(&wr, &rq, 0);
        fakehost_hold_async(env.fh, true);
        CU_ASSERT_EQUAL(
            fakehost_rpc_call(env.fh, KP_APIKEY_WriteMirrorStates, 0, wr.buf, wr.len, &call),
            KBX_RPC_PENDING);
        kp_writer_free(&wr);
        fakehost_run_until_idle(env.fh);
        fakehost_fail_alloc(env.fh, 1, false); /* the body copy works, the post fails */
        fakehost_hold_async(env.fh, false);
        fakehost_run_until_idle(env.fh);
        fakehost_fail_alloc(env.fh, -1, false);
        CU_ASSERT_TRUE(fakehost_log_contains(env.fh, "no memory to queue a __mirror_state answer"));
        CU_ASSERT_EQUAL(fakehost_call_state(call), FAKEHOST_CALL_PENDING);
        CU_ASSERT_EQUAL(ts_read(&env, "m1", 1, NULL), 0); /* any op takes the orphan */
        CU_ASSERT_EQUAL_FATAL(fakehost_call_state(call), FAKEHOST_CALL_COMPLETED);
        resp = fakehost_call_response(call, &rlen);
        kp_arena_init(&ar, 0);
        kp_reader_init(&rd, resp, rlen);
        CU_ASSERT_EQUAL_FATAL(kp_WriteMirrorStatesResponse_decode(&rd, &ar, &rs, 0), 0);
        CU_ASSERT_EQUAL(rs.Topics.v[0].Partitions.v[0].ErrorCode, 0);
        CU_ASSERT_EQUAL(rs.Topics.v[0].Partitions.v[0].StateEpoch, 6);
        kp_arena_free(&ar);
    }

    /* Mirror-level records (type 3) on the shard of the mirror's name, here the only one. */
    {
        ts_rec_req_t rr;
        size_t len0 = ts_log_len(&env, 0);

        memset(&rr, 0, sizeof(rr));
        CU_ASSERT_TRUE(km_state_mirror_coordinator(env.cm, "m1"));
        kp_state_value_init(&rr.v, KP_STATE_REC_MIRROR);
        rr.v.u.mirror.has_mirror_id = true;
        memset(rr.v.u.mirror.mirror_id.b, 0x5a, 16);
        rr.v.u.mirror.creation_time_ms = 1234;
        rr.v.u.mirror.source_cluster_id = kp_str("src-cluster");
        rr.put = true;
        ts_rec(env.fh, env.cm, &rr);
        CU_ASSERT_EQUAL(rr.err, 0);
        CU_ASSERT_TRUE(ts_log_len(&env, 0) > len0);
        memset(&rr, 0, sizeof(rr));
        ts_rec(env.fh, env.cm, &rr);
        CU_ASSERT_EQUAL(rr.err, 0);
        CU_ASSERT_TRUE(rr.found);
        CU_ASSERT_EQUAL(rr.v.u.mirror.creation_time_ms, 1234);
        CU_ASSERT_EQUAL(rr.mirror_id[0], 0x5a);
        /* kept across a reload */
        fakehost_partition_set_leader(env.fh, &TS_MS_ID, 0, 11, true);
        fakehost_run_until_idle(env.fh);
        memset(&rr, 0, sizeof(rr));
        ts_rec(env.fh, env.cm, &rr);
        CU_ASSERT_TRUE(rr.found);
        CU_ASSERT_EQUAL(rr.v.u.mirror.creation_time_ms, 1234);
        /* a tombstone deletes it */
        memset(&rr, 0, sizeof(rr));
        rr.put = rr.tomb = true;
        ts_rec(env.fh, env.cm, &rr);
        CU_ASSERT_EQUAL(rr.err, 0);
        memset(&rr, 0, sizeof(rr));
        ts_rec(env.fh, env.cm, &rr);
        CU_ASSERT_EQUAL(rr.err, 0);
        CU_ASSERT_FALSE(rr.found);
        /* the partition state has its own API */
        CU_ASSERT_EQUAL(km_state_put_record(env.cm, KP_STATE_REC_PARTITION_STATE, "m1", &TS_T1, 0,
                                            NULL, NULL, NULL),
                        KM_ERR_INVALID);
    }

    /* A mirror deleted while the shard loads: its keys are tombstoned once the load is done,
     * before anything is served. */
    {
        ts_result_t dres = {0};
        size_t len0;

        fakehost_hold_async(env.fh, true);
        fakehost_partition_set_leader(env.fh, &TS_MS_ID, 0, 10, true);
        fakehost_run_until_idle(env.fh);
        CU_ASSERT_FALSE(km_state_shard_loaded(env.cm, 0));
        len0 = ts_log_len(&env, 0);
        CU_ASSERT_EQUAL_FATAL(km_coord_post(&env.cm->coord, ts_delete_run, NULL, &dres), KM_OK);
        fakehost_run_until_idle(env.fh);
        CU_ASSERT_EQUAL(dres.done, 1);
        CU_ASSERT_EQUAL(dres.err, 0);
        fakehost_hold_async(env.fh, false);
        fakehost_run_until_idle(env.fh);
        CU_ASSERT_TRUE(km_state_shard_loaded(env.cm, 0));
        CU_ASSERT_TRUE(ts_log_len(&env, 0) > len0); /* the tombstone */
        CU_ASSERT_EQUAL(ts_read(&env, "m1", 0, &pr), 0);
        CU_ASSERT_EQUAL(pr.State, -1);
        CU_ASSERT_EQUAL(pr.StateEpoch, 0);
    }

    ts_env_stop(&env);
    free(va);
    free(vb);
    free(vc);
}

/* ---- two brokers: the client side ----------------------------------------------------------- */

typedef struct ts_req {
    int kind; /* 1 read, 2 write */
    const char *mirror;
    int32_t partition;
    km_state_pwrite_t w;
    ts_result_t *res;
} ts_req_t;

static void ts_read_cb(km_plugin_t *cm, void *arg, int16_t err, const char *msg,
                       const km_state_pstate_t *st)
{
    ts_result_t *res = arg;

    (void)cm;
    res->done++;
    res->err = err;
    CU_ASSERT_TRUE(err == 0 || msg != NULL);
    if (st != NULL) {
        res->st = *st;
        res->saw_error =
            st->error_message != NULL && strcmp(st->error_message, "source topic deleted") == 0;
        res->st.error_message = NULL; /* valid during the call only */
    }
}

static void ts_write_cb(km_plugin_t *cm, void *arg, int16_t err, const char *msg,
                        int32_t state_epoch)
{
    ts_result_t *res = arg;

    (void)cm;
    res->done++;
    res->err = err;
    res->epoch = state_epoch;
    CU_ASSERT_TRUE(err == 0 || msg != NULL);
}

static void ts_req_run(km_plugin_t *cm, void *arg)
{
    ts_req_t *rq = arg;

    km_err_t err;

    if (rq->kind == 1)
        err = km_state_read(cm, rq->mirror, "orders", &TS_T1, rq->partition, ts_read_cb, rq->res);
    else
        err = km_state_write(cm, rq->mirror, "orders", &TS_T1, rq->partition, &rq->w, ts_write_cb,
                             rq->res);
    CU_ASSERT_EQUAL(err, KM_OK);
}

/* Run a client call on env's loop and wait for its callback. */
static void ts_client(ts_env_t *env, ts_req_t *rq)
{
    rq->res->done = 0;
    CU_ASSERT_EQUAL_FATAL(km_coord_post(&env->cm->coord, ts_req_run, NULL, rq), KM_OK);
    fakehost_run_until_idle(env->fh);
    CU_ASSERT_EQUAL(rq->res->done, 1);
}

static void ts_list_fn(void *arg, const km_state_listed_t *ls)
{
    int *n = arg;

    (*n)++;
    CU_ASSERT_EQUAL(ls->partition, 2);
    CU_ASSERT_EQUAL(memcmp(ls->topic_id.bytes, TS_T1.bytes, 16), 0);
    CU_ASSERT_EQUAL(ls->st.state, KP_PSTATE_MIRRORING);
}

static void ts_done_cb(km_plugin_t *cm, void *arg, int16_t err, const char *msg)
{
    ts_result_t *res = arg;

    (void)cm;
    res->done++;
    res->err = err;
    CU_ASSERT_TRUE(err == 0 || msg != NULL);
}

static void ts_delete_run(km_plugin_t *cm, void *arg)
{
    CU_ASSERT_EQUAL(km_state_delete_mirror(cm, "m1", ts_done_cb, arg), KM_OK);
}

static void ts_test_two_brokers(void)
{
    ts_env_t a, b;
    ts_result_t res;
    ts_req_t rq = {.mirror = "m1", .partition = 2, .res = &res};
    kp_ReadMirrorStatesResponse_PartitionResult_t pr;

    /* b (broker 2) leads __mirror_state-0; a (broker 1) holds no replica of it. */
    ts_env_start(&a, 1, "1");
    ts_env_start(&b, 2, "1");
    a.peer = &b;
    a.md_leader = 2;
    CU_ASSERT_EQUAL(
        fakehost_partition_add(b.fh, &TS_MS_ID, "__mirror_state", 0, 3, true, KBX_WRITE_PENDING),
        0);
    ts_env_init(&a);
    fakehost_run_until_idle(a.fh);
    ts_env_init(&b);
    fakehost_run_until_idle(b.fh);
    ts_publish_orders(&a);
    ts_publish_orders(&b);
    fakehost_run_until_idle(b.fh);
    CU_ASSERT_TRUE(km_state_shard_loaded(b.cm, 0));
    /* a learns __mirror_state exists (so a write does not try to create it) */
    {
        kbx_topic_change_t t = {.struct_size = sizeof(t),
                                .flags = KBX_TOPIC_CREATED,
                                .topic_id = TS_MS_ID,
                                .name = "__mirror_state",
                                .partition_count = 1};
        const kbx_topic_change_t *tp[] = {&t};
        kbx_metadata_delta_t d = {.struct_size = sizeof(d), .topics = tp, .topic_count = 1};

        fakehost_publish_delta(a.fh, &d);
        fakehost_run_until_idle(a.fh);
    }

    /* Mirror-level records are served by the shard's leader only. */
    {
        ts_rec_req_t rr;

        memset(&rr, 0, sizeof(rr));
        CU_ASSERT_FALSE(km_state_mirror_coordinator(a.cm, "m1"));
        CU_ASSERT_TRUE(km_state_mirror_coordinator(b.cm, "m1"));
        ts_rec(a.fh, a.cm, &rr);
        CU_ASSERT_EQUAL(rr.err, KP_ERR_NOT_COORDINATOR);
        CU_ASSERT_FALSE(rr.found);
    }

    /* A write from a: Metadata finds broker 2, WriteMirrorStates goes there. */
    rq.kind = 2;
    km_state_pwrite_init(&rq.w);
    rq.w.state = KP_PSTATE_PREPARING;
    rq.w.leader_epoch = 7;
    ts_client(&a, &rq);
    CU_ASSERT_EQUAL(res.err, 0);
    CU_ASSERT_EQUAL(res.epoch, 1);
    CU_ASSERT_EQUAL(a.metadatas, 1);
    CU_ASSERT_EQUAL(a.remotes, 1);
    CU_ASSERT_EQUAL(b.produces, 1);
    /* b serves it to anyone. */
    CU_ASSERT_EQUAL(ts_read(&b, "m1", 2, &pr), 0);
    CU_ASSERT_EQUAL(pr.State, KP_PSTATE_PREPARING);
    CU_ASSERT_EQUAL(pr.LeaderEpoch, 7);
    /* A read from a: the leader is cached now. */
    rq.kind = 1;
    ts_client(&a, &rq);
    CU_ASSERT_EQUAL(res.err, 0);
    CU_ASSERT_EQUAL(res.st.state, KP_PSTATE_PREPARING);
    CU_ASSERT_EQUAL(res.st.state_epoch, 1);
    CU_ASSERT_EQUAL(res.st.leader_epoch, 7);
    CU_ASSERT_EQUAL(a.metadatas, 1);

    /* FENCED_STATE_EPOCH: re-read, retried once with the stored epoch. */
    rq.kind = 2;
    km_state_pwrite_init(&rq.w);
    rq.w.state = KP_PSTATE_MIRRORING;
    rq.w.leader_epoch = 7;
    rq.w.state_epoch = 0;
    ts_client(&a, &rq);
    CU_ASSERT_EQUAL(res.err, 0);
    CU_ASSERT_EQUAL(res.epoch, 2);
    /* A FAILED state's message and attempt reach a remote reader. */
    km_state_pwrite_init(&rq.w);
    rq.w.state = KP_PSTATE_FAILED;
    rq.w.leader_epoch = 7;
    rq.w.error_message = kp_str("source topic deleted");
    rq.w.retry_attempt = 2;
    ts_client(&a, &rq);
    CU_ASSERT_EQUAL(res.err, 0);
    CU_ASSERT_EQUAL(res.epoch, 3);
    rq.kind = 1;
    res.st.error_message = NULL;
    ts_client(&a, &rq);
    CU_ASSERT_EQUAL(res.err, 0);
    CU_ASSERT_EQUAL(res.st.state, KP_PSTATE_FAILED);
    CU_ASSERT_EQUAL(res.st.previous_state, KP_PSTATE_MIRRORING);
    CU_ASSERT_EQUAL(res.st.retry_attempt, 2);
    CU_ASSERT_TRUE(res.saw_error);
    /* back to MIRRORING (FAILED -> MIRRORING is valid) */
    rq.kind = 2;
    km_state_pwrite_init(&rq.w);
    rq.w.state = KP_PSTATE_MIRRORING;
    rq.w.leader_epoch = 7;
    ts_client(&a, &rq);
    CU_ASSERT_EQUAL(res.err, 0);
    CU_ASSERT_EQUAL(res.epoch, 4);
    /* FENCED_LEADER_EPOCH is not retried: the writer is stale. */
    km_state_pwrite_init(&rq.w);
    rq.w.state = KP_PSTATE_PAUSING;
    rq.w.leader_epoch = 6;
    ts_client(&a, &rq);
    CU_ASSERT_EQUAL(res.err, KP_ERR_FENCED_LEADER_EPOCH);
    CU_ASSERT_EQUAL(res.epoch, -1);
    /* An invalid transition is refused through the client too. */
    km_state_pwrite_init(&rq.w);
    rq.w.state = KP_PSTATE_STOPPED;
    ts_client(&a, &rq);
    CU_ASSERT_EQUAL(res.err, KP_ERR_INVALID_CLUSTER_MIRROR_STATES);

    /* b resigns and a becomes the leader: a's client finds its own shard after the retry. */
    fakehost_partition_set_leader(b.fh, &TS_MS_ID, 0, 4, false);
    fakehost_run_until_idle(b.fh);
    {
        /* a gets a replica holding b's log, and leads it */
        size_t len = 0;
        kbx_log_offsets_t offs = {.struct_size = sizeof(offs)};
        const uint8_t *data = fakehost_partition_log(b.fh, &TS_MS_ID, 0, &len, &offs);
        const kbx_api_t *api = fakehost_api(a.fh);
        kbx_partition_t *part;
        uint8_t *copy = malloc(len);

        memcpy(copy, data, len);
        CU_ASSERT_EQUAL(fakehost_partition_add(a.fh, &TS_MS_ID, "__mirror_state", 0, 4, true,
                                               KBX_WRITE_PENDING),
                        0);
        CU_ASSERT_EQUAL(api->partition_acquire(fakehost_host(a.fh), &TS_MS_ID, 0, -1, &part),
                        KBX_OK);
        CU_ASSERT_EQUAL(api->log_append(fakehost_host(a.fh), part, copy, len, NULL), KBX_OK);
        api->partition_release(fakehost_host(a.fh), part);
        free(copy);
        fakehost_partition_set_leader(a.fh, &TS_MS_ID, 0, 5, true);
        fakehost_run_until_idle(a.fh);
    }
    CU_ASSERT_TRUE(km_state_shard_loaded(a.cm, 0));
    rq.kind = 1;
    ts_client(&a, &rq);
    CU_ASSERT_EQUAL(res.err, 0);
    CU_ASSERT_EQUAL(res.st.state, KP_PSTATE_MIRRORING);
    CU_ASSERT_EQUAL(res.st.state_epoch, 4);

    /* Listing and deleting a mirror (the local shards). */
    {
        int count = 0;
        ts_result_t dres = {0};
        size_t len_before = 0;

        CU_ASSERT_EQUAL(km_state_list_local(a.cm, "m1", ts_list_fn, &count), 0);
        CU_ASSERT_EQUAL(count, 1);
        count = 0;
        CU_ASSERT_EQUAL(km_state_list_local(a.cm, "m2", ts_list_fn, &count), 0);
        CU_ASSERT_EQUAL(count, 0);
        fakehost_partition_log(a.fh, &TS_MS_ID, 0, &len_before, NULL);
        CU_ASSERT_EQUAL_FATAL(km_coord_post(&a.cm->coord, ts_delete_run, NULL, &dres), KM_OK);
        fakehost_run_until_idle(a.fh);
        CU_ASSERT_EQUAL(dres.done, 1);
        CU_ASSERT_EQUAL(dres.err, 0);
        CU_ASSERT_TRUE(ts_log_len(&a, 0) > len_before); /* the tombstone */
        count = 0;
        CU_ASSERT_EQUAL(km_state_list_local(a.cm, "m1", ts_list_fn, &count), 0);
        CU_ASSERT_EQUAL(count, 0);
        ts_client(&a, &rq);
        CU_ASSERT_EQUAL(res.err, 0);
        CU_ASSERT_EQUAL(res.st.state, KP_PSTATE_UNKNOWN);
        CU_ASSERT_EQUAL(res.st.state_epoch, 0);
        /* a re-created mirror of the same name starts clean */
        rq.kind = 2;
        km_state_pwrite_init(&rq.w);
        rq.w.state = KP_PSTATE_PREPARING;
        ts_client(&a, &rq);
        CU_ASSERT_EQUAL(res.err, 0);
        CU_ASSERT_EQUAL(res.epoch, 1);
    }
    ts_env_stop(&a);
    ts_env_stop(&b);
}

static int ts_authz_calls;

/* Deny CLUSTER_ACTION on the cluster to everyone but User:broker. */
static int32_t ts_authz(void *arg, const char *principal, int32_t resource_type, const char *name,
                        int32_t operation)
{
    (void)arg;
    ts_authz_calls++;
    CU_ASSERT_EQUAL(resource_type, 4); /* CLUSTER */
    CU_ASSERT_STRING_EQUAL(name, "kafka-cluster");
    CU_ASSERT_EQUAL(operation, 9); /* CLUSTER_ACTION */
    return strcmp(principal, "User:broker") == 0 ? KBX_AUTHZ_ALLOWED : KBX_AUTHZ_DENIED;
}

/* A load whose Fetch fails is retried after a delay (timer); stopping with a retry pending
 * leaves nothing behind. */
static void ts_test_load_retry(void)
{
    ts_env_t env;

    ts_env_start(&env, 1, "1");
    CU_ASSERT_EQUAL(
        fakehost_partition_add(env.fh, &TS_MS_ID, "__mirror_state", 0, 2, true, KBX_WRITE_PENDING),
        0);
    fakehost_inject_request_error(env.fh, FAKEHOST_LOCAL, KP_APIKEY_Fetch, KBX_ERR_IO, 2);
    ts_env_init(&env);
    fakehost_run_until_idle(env.fh);
    ts_publish_orders(&env);
    CU_ASSERT_FALSE(km_state_shard_loaded(env.cm, 0));
    CU_ASSERT_TRUE(fakehost_log_contains(env.fh, "__mirror_state-0: loading at offset 0"));
    CU_ASSERT_EQUAL(ts_read(&env, "m1", 0, NULL), KP_ERR_COORDINATOR_LOAD_IN_PROGRESS);
    fakehost_advance_ms(env.fh, 250); /* second failure */
    CU_ASSERT_FALSE(km_state_shard_loaded(env.cm, 0));
    fakehost_advance_ms(env.fh, 250); /* third try works */
    fakehost_run_until_idle(env.fh);
    CU_ASSERT_TRUE(km_state_shard_loaded(env.cm, 0));
    /* again, and stop while the retry timer is pending */
    fakehost_inject_request_error(env.fh, FAKEHOST_LOCAL, KP_APIKEY_Fetch, KBX_ERR_IO, 1);
    fakehost_partition_set_leader(env.fh, &TS_MS_ID, 0, 3, true);
    fakehost_run_until_idle(env.fh);
    CU_ASSERT_FALSE(km_state_shard_loaded(env.cm, 0));
    ts_env_stop(&env);
}

/* A Fetch answer without records below the high watermark ends the load (the rest was
 * compacted away). The high watermark used to be read from the answer after its arena was
 * freed (ASan: heap-use-after-free in km_state_fetch_done, seen in scenario sync-configs
 * after a restart of every destination broker). */
static void ts_test_load_no_progress(void)
{
    ts_env_t env;
    uint8_t k0[KP_STATE_KEY_MAX_SIZE];
    size_t l0 = ts_key(k0, KP_STATE_REC_PARTITION_STATE, "m1", &TS_T1, 0), la;
    uint8_t *va = ts_pvalue(KP_PSTATE_PREPARING, 1, 3, &la);

    ts_env_start(&env, 1, "1");
    CU_ASSERT_EQUAL(
        fakehost_partition_add(env.fh, &TS_MS_ID, "__mirror_state", 0, 5, true, KBX_WRITE_PENDING),
        0);
    {
        ts_rec_t r0[] = {{k0, l0, va, la}};
        ts_log_append(&env, 0, r0, 1);
    }
    env.empty_fetches = 1;
    ts_env_init(&env);
    fakehost_run_until_idle(env.fh);
    ts_publish_orders(&env);
    CU_ASSERT_EQUAL(env.empty_fetches, 0);
    CU_ASSERT_TRUE(km_state_shard_loaded(env.cm, 0));
    ts_env_stop(&env);
    free(va);
}

/* With an authorizer, the inter-broker RPCs need CLUSTER_ACTION on the cluster. */
static void ts_test_authz(void)
{
    ts_env_t env;
    uint8_t *resp = NULL;
    size_t rlen = 0;
    kp_ReadMirrorStatesRequest_t rq;
    kp_ReadMirrorStatesResponse_t rs;
    kp_writer_t wr;
    kp_reader_t rd;
    kp_arena_t ar;

    ts_env_start(&env, 1, "1");
    fakehost_set_authorizer(env.fh, ts_authz, NULL);
    ts_env_init(&env);
    fakehost_run_until_idle(env.fh);
    kp_ReadMirrorStatesRequest_init(&rq);
    rq.MirrorName = kp_str("m1");
    rq.Topics.cnt = 0;
    kp_writer_init(&wr);
    kp_ReadMirrorStatesRequest_encode(&wr, &rq, 0);
    CU_ASSERT_EQUAL_FATAL(ts_rpc(env.fh, KP_APIKEY_ReadMirrorStates, wr.buf, wr.len, &resp, &rlen),
                          KBX_OK);
    kp_writer_free(&wr);
    kp_arena_init(&ar, 0);
    kp_reader_init(&rd, resp, rlen);
    CU_ASSERT_EQUAL_FATAL(kp_ReadMirrorStatesResponse_decode(&rd, &ar, &rs, 0), 0);
    CU_ASSERT_EQUAL(rs.ErrorCode, KP_ERR_CLUSTER_AUTHORIZATION_FAILED);
    CU_ASSERT_TRUE(rs.ErrorMessage.len > 0);
    CU_ASSERT_EQUAL(ts_authz_calls, 1);
    kp_arena_free(&ar);
    free(resp);
    ts_env_stop(&env);
}

/* No __mirror_state yet: the first WriteMirrorStates creates it (retriable answer meanwhile). */
static void ts_test_lazy_create(void)
{
    ts_env_t env;

    ts_env_start(&env, 1, "7");
    fakehost_config_set(env.fh, "mirror.state.topic.replication.factor", "-1");
    ts_env_init(&env);
    fakehost_run_until_idle(env.fh);
    ts_publish_orders(&env); /* the listener names one broker, Metadata four */
    env.md_brokers = 4;
    CU_ASSERT_EQUAL(ts_read(&env, "m1", 0, NULL), KP_ERR_COORDINATOR_NOT_AVAILABLE);
    CU_ASSERT_EQUAL(env.creates, 0); /* a read does not create it */
    CU_ASSERT_EQUAL(ts_write(&env, "m1", 0, KP_PSTATE_PREPARING, -1, -1, NULL),
                    KP_ERR_COORDINATOR_NOT_AVAILABLE);
    CU_ASSERT_EQUAL(env.creates, 1);
    CU_ASSERT_EQUAL(env.create_partitions, 7);
    CU_ASSERT_EQUAL(env.create_rf, 3); /* -1: min(3, four brokers) */
    CU_ASSERT_TRUE(env.create_compact);
    CU_ASSERT_TRUE(fakehost_log_contains(env.fh, "creating __mirror_state: 7 partitions"));
    /* a __mirror_state with another partition count than configured is reported */
    {
        kbx_topic_change_t t = {.struct_size = sizeof(t),
                                .flags = KBX_TOPIC_CREATED,
                                .topic_id = TS_MS_ID,
                                .name = "__mirror_state",
                                .partition_count = 3};
        const kbx_topic_change_t *tp[] = {&t};
        kbx_metadata_delta_t d = {.struct_size = sizeof(d), .topics = tp, .topic_count = 1};

        fakehost_publish_delta(env.fh, &d);
        fakehost_run_until_idle(env.fh);
        CU_ASSERT_TRUE(fakehost_log_contains(
            env.fh, "__mirror_state has 3 partitions but mirror.state.topic.num.partitions is 7"));
    }
    ts_env_stop(&env);
}

/* A local read waits for a loading shard, at most mirror.coordinator.write.timeout.ms. */
static void ts_test_load_wait_bound(void)
{
    ts_env_t env;
    ts_result_t res;
    ts_req_t rq = {.kind = 1, .mirror = "m1", .partition = 0, .res = &res};

    ts_env_start(&env, 1, "1");
    fakehost_config_set(env.fh, "mirror.coordinator.write.timeout.ms", "5000");
    CU_ASSERT_EQUAL(
        fakehost_partition_add(env.fh, &TS_MS_ID, "__mirror_state", 0, 2, true, KBX_WRITE_PENDING),
        0);
    fakehost_inject_request_error(env.fh, FAKEHOST_LOCAL, KP_APIKEY_Fetch, KBX_ERR_IO, 1000);
    ts_env_init(&env);
    fakehost_run_until_idle(env.fh);
    ts_publish_orders(&env);
    memset(&res, 0, sizeof(res));
    CU_ASSERT_EQUAL_FATAL(km_coord_post(&env.cm->coord, ts_req_run, NULL, &rq), KM_OK);
    fakehost_run_until_idle(env.fh);
    CU_ASSERT_EQUAL(res.done, 0); /* waiting for the load */
    fakehost_advance_ms(env.fh, 4000);
    CU_ASSERT_EQUAL(res.done, 0);
    fakehost_advance_ms(env.fh, 1500);
    fakehost_run_until_idle(env.fh);
    CU_ASSERT_EQUAL(res.done, 1);
    CU_ASSERT_EQUAL(res.err, KP_ERR_COORDINATOR_LOAD_IN_PROGRESS);
    ts_env_stop(&env);
}

static CU_TestInfo ts_tests[] = {
    {"first write creates __mirror_state", ts_test_lazy_create},
    {"CLUSTER_ACTION needed with an authorizer", ts_test_authz},
    {"a failed load is retried; stop with a retry pending", ts_test_load_retry},
    {"a Fetch without records at the high watermark ends the load", ts_test_load_no_progress},
    {"transition table", ts_test_transitions},
    {"write rules: fencing, transitions, LME, failure details", ts_test_apply_rules},
    {"table replay: latest wins, tombstones, skipped records", ts_test_replay},
    {"one broker: load, read/write on the wire, fencing, resignation", ts_test_shard},
    {"two brokers: remote shard, leader lookup, retries", ts_test_two_brokers},
    {"a local read waits for a load, bounded", ts_test_load_wait_bound},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo ts_suites[] = {
    {"mirror state coordinator", NULL, NULL, NULL, NULL, ts_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(ts_suites);
}
