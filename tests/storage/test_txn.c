/* Transactions, LSO, aborted-transaction lists, and KIP-1279 MIRROR_PID_RESET. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sto_test.h"

static int64_t sto_txn_data(kb_log_t *log, int64_t pid, int16_t ep, int32_t seq, int n)
{
    kp_writer_t wr;
    kb_append_info_t info;
    int rc;
    kp_writer_init(&wr);
    sto_batch(&wr, 0, 0, n, 0, seq, pid, ep, seq, 1, sto_now);
    rc = kb_log_append_leader(log, wr.buf, wr.len, 1, KB_ORIGIN_CLIENT, 0, &info);
    CU_ASSERT_EQUAL(rc, 0);
    kp_writer_free(&wr);
    return info.first_offset;
}

static int64_t sto_marker(kb_log_t *log, int16_t type, int64_t pid, int16_t ep)
{
    kb_append_info_t info;
    CU_ASSERT_EQUAL_FATAL(kb_log_append_control(log, type, pid, ep, 3, 1, &info), 0);
    return info.first_offset;
}

static void test_txn_lso_and_aborted(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    int64_t a1, b1, a2, cm, ab, leo;
    kb_aborted_txn_t *txns;
    size_t n;
    uint8_t *buf;
    sto_cfg(&cfg, 4096, 256);
    log = sto_open(dir, &cfg, 0, -1);
    sto_append(log, 2, 0, 0, sto_now);    /* 0-1 plain */
    a1 = sto_txn_data(log, 100, 0, 0, 2); /* 2-3 pid 100 */
    b1 = sto_txn_data(log, 200, 0, 0, 2); /* 4-5 pid 200 */
    a2 = sto_txn_data(log, 100, 0, 2, 1); /* 6 */
    CU_ASSERT(a1 == 2 && b1 == 4 && a2 == 6);
    kb_log_set_hw(log, kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_lso(log), 2);
    cm = sto_marker(log, KP_CONTROL_TYPE_COMMIT, 100, 0); /* 7 */
    /* the commit is not replicated yet (HW 7): pid 100's txn still holds the LSO */
    CU_ASSERT_EQUAL(kb_log_lso(log), 2);
    kb_log_set_hw(log, kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_lso(log), 4);
    ab = sto_marker(log, KP_CONTROL_TYPE_ABORT, 200, 0); /* 8 */
    sto_append(log, 1, 0, 0, sto_now);                   /* 9 */
    leo = kb_log_leo(log);
    kb_log_set_hw(log, leo);
    CU_ASSERT_EQUAL(kb_log_lso(log), leo);
    CU_ASSERT(cm == 7 && ab == 8);
    CU_ASSERT_EQUAL(kb_log_aborted_txns(log, 0, leo, &txns, &n), 0);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    CU_ASSERT_EQUAL(txns[0].producer_id, 200);
    CU_ASSERT_EQUAL(txns[0].first_offset, 4);
    CU_ASSERT_EQUAL(txns[0].last_offset, 8);
    free(txns);
    CU_ASSERT_EQUAL(kb_log_aborted_txns(log, 0, 4, &txns, &n), 0); /* range before it */
    CU_ASSERT_EQUAL(n, 0);
    free(txns);
    CU_ASSERT_EQUAL(kb_log_aborted_txns(log, 9, leo, &txns, &n), 0); /* range after it */
    CU_ASSERT_EQUAL(n, 0);
    free(txns);
    /* a new open transaction bounds read_committed reads */
    sto_txn_data(log, 300, 0, 0, 1);   /* 10 */
    sto_append(log, 1, 0, 0, sto_now); /* 11 */
    kb_log_set_hw(log, kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_lso(log), 10);
    buf = sto_read_all(log, 0, KB_ISOLATION_COMMITTED, &n);
    {
        kp_batch_iter_t it;
        kp_batch_t b;
        int64_t last = -1;
        kp_batch_iter_init(&it, buf, n, 0, 0);
        while (kp_batch_iter_next(&it, &b) == 1)
            last = kp_batch_hdr_last_offset(&b.hdr);
        CU_ASSERT_EQUAL(last, 9);
    }
    free(buf);
    /* the txn index survives reopen (clean and recovered) */
    kb_log_close(log, 1);
    log = sto_open(dir, &cfg, 1, -1);
    kb_log_set_hw(log, kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_lso(log), 10);
    CU_ASSERT_EQUAL(kb_log_aborted_txns(log, 0, 100, &txns, &n), 0);
    CU_ASSERT_EQUAL(n, 1);
    free(txns);
    kb_log_close(log, 0);
    {
        char p[4200];
        snprintf(p, sizeof(p), "%s/%020d.txnindex", dir, 0);
        unlink(p);
    }
    log = sto_open(dir, &cfg, 0, -1);
    kb_log_set_hw(log, kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_lso(log), 10);
    CU_ASSERT_EQUAL(kb_log_aborted_txns(log, 0, 100, &txns, &n), 0);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    CU_ASSERT(txns[0].producer_id == 200 && txns[0].first_offset == 4 && txns[0].last_offset == 8);
    free(txns);
    /* markers: an older coordinator epoch is fenced, an older producer epoch refused */
    {
        kb_append_info_t info;
        CU_ASSERT_EQUAL(kb_log_append_control(log, KP_CONTROL_TYPE_COMMIT, 100, 0, 1, 1, &info),
                        KB_STO_COORDINATOR_FENCED);
        CU_ASSERT_EQUAL(kb_log_append_control(log, KP_CONTROL_TYPE_COMMIT, 300, 0, 3, 1, &info), 0);
        sto_txn_data(log, 100, 1, 0, 1);
        CU_ASSERT_EQUAL(kb_log_append_control(log, KP_CONTROL_TYPE_ABORT, 100, 0, 3, 1, &info),
                        KB_STO_INVALID_PRODUCER_EPOCH);
    }
    kb_log_close(log, 1);
    sto_rmrf(dir);
    free(dir);
}

/* Producer state as a mirror sees it: raw batches from the source, then at failover ABORT
 * markers and the MIRROR_PID_RESET; a new local producer reusing a pid must not collide. */
static void sto_mirror_prefix(kb_log_t *log, int64_t *reset_off)
{
    kp_writer_t wr;
    kb_append_info_t info;
    kp_writer_init(&wr);
    sto_batch(&wr, 0, 4, 3, 0, 0, 1, 0, 0, 0, sto_now);  /* pid 1 seq 0-2: 0-2 */
    sto_batch(&wr, 3, 4, 2, 0, 0, 2, 5, 10, 1, sto_now); /* pid 2 txn seq 10-11: 3-4 */
    sto_batch(&wr, 5, 4, 2, 0, 0, 1, 0, 3, 0, sto_now);  /* pid 1 seq 3-4: 5-6 */
    CU_ASSERT_EQUAL_FATAL(kb_log_append_raw(log, wr.buf, wr.len, &info), 0);
    kp_writer_reset(&wr);
    /* STOPPING: the plugin writes the reset (we leave pid 2's txn open on purpose to check
     * that the reset closes it) */
    CU_ASSERT_EQUAL_FATAL(
        kb_log_append_control(log, KP_CONTROL_TYPE_MIRROR_PID_RESET, -1, -1, 0, 9, &info), 0);
    *reset_off = info.first_offset;
    kp_writer_free(&wr);
}

static void sto_check_after_reset(kb_log_t *log, int64_t reset_off)
{
    kb_producer_info_t pi;
    kb_append_info_t info;
    kp_writer_t wr;
    kb_aborted_txn_t *txns;
    size_t n;
    CU_ASSERT_EQUAL(kb_log_producer_get(log, 1, &pi), KB_STO_INVALID);
    CU_ASSERT_EQUAL(kb_log_producer_get(log, 2, &pi), KB_STO_INVALID);
    CU_ASSERT_EQUAL(kb_log_last_pid_reset(log), reset_off);
    /* a new producer with pid 1, epoch 0, seq 0..2 is not a duplicate */
    kp_writer_init(&wr);
    sto_batch(&wr, 0, 0, 3, 0, 0, 1, 0, 0, 0, sto_now);
    CU_ASSERT_EQUAL(kb_log_append_leader(log, wr.buf, wr.len, 9, KB_ORIGIN_CLIENT, 0, &info), 0);
    CU_ASSERT_EQUAL(info.first_offset, reset_off + 1);
    kp_writer_free(&wr);
    /* the open transaction was closed as aborted at the reset */
    kb_log_set_hw(log, kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_lso(log), kb_log_leo(log));
    CU_ASSERT_EQUAL(kb_log_aborted_txns(log, 0, kb_log_leo(log), &txns, &n), 0);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    CU_ASSERT(txns[0].producer_id == 2 && txns[0].first_offset == 3 &&
              txns[0].last_offset == reset_off);
    free(txns);
    /* clean-up for the next check: drop what we appended */
    CU_ASSERT_EQUAL(kb_log_truncate_to(log, reset_off + 1), 0);
}

static void test_mirror_pid_reset(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    int64_t reset_off;
    kb_producer_info_t pi;
    char p[4200];
    sto_cfg(&cfg, 1 << 20, 256);
    log = sto_open(dir, &cfg, 0, -1);
    sto_mirror_prefix(log, &reset_off);
    CU_ASSERT_EQUAL(reset_off, 7);
    /* after append */
    sto_check_after_reset(log, reset_off);
    /* after clean reopen (snapshot at the LEO) */
    kb_log_close(log, 1);
    log = sto_open(dir, &cfg, 1, -1);
    sto_check_after_reset(log, reset_off);
    /* after recovery with no snapshot at all: replay from the start applies the reset */
    kb_log_close(log, 0);
    snprintf(p, sizeof(p), "%s/%020lld.snapshot", dir, (long long)(reset_off + 1));
    unlink(p);
    snprintf(p, sizeof(p), "%s/%020d.snapshot", dir, 8);
    unlink(p);
    log = sto_open(dir, &cfg, 0, -1);
    sto_check_after_reset(log, reset_off);
    kb_log_close(log, 0);
    sto_rmrf(dir);
    free(dir);

    /* A snapshot that straddles the reset: taken at a roll *before* the reset, replay crosses
     * it; and one taken after it never brings pre-reset producers back. */
    dir = sto_tmpdir();
    sto_cfg(&cfg, 100, 64); /* tiny segments: a roll (and snapshot) at every batch */
    log = sto_open(dir, &cfg, 0, -1);
    sto_mirror_prefix(log, &reset_off);
    CU_ASSERT(kb_log_segment_count(log) >= 3);
    CU_ASSERT_EQUAL(kb_log_producer_get(log, 1, &pi), KB_STO_INVALID);
    kb_log_close(log, 0);
    /* crash with the recovery point before the reset: snapshot(s) before it + replay */
    log = sto_open(dir, &cfg, 0, 3);
    sto_check_after_reset(log, reset_off);
    kb_log_close(log, 0);
    log = sto_open(dir, &cfg, 1, -1);
    sto_check_after_reset(log, reset_off);
    kb_log_close(log, 1);
    sto_rmrf(dir);
    free(dir);
}

/* Copy leader @p from's log from @p off to its end into follower @p to as replication does
 * (kb_log_append_raw of the fetched bytes). */
static void sto_replicate(kb_log_t *from, kb_log_t *to, int64_t off)
{
    uint8_t *buf = NULL;
    size_t n = 0;
    kb_log_read_t meta;
    kb_append_info_t info;
    CU_ASSERT_EQUAL_FATAL(
        kb_log_read_copy(from, off, 1 << 20, KB_ISOLATION_LEO, 1, &buf, &n, &meta), 0);
    CU_ASSERT_FATAL(n > 0);
    CU_ASSERT_EQUAL(kb_log_append_raw(to, buf, n, &info), 0);
    CU_ASSERT_EQUAL(kb_log_leo(to), kb_log_leo(from));
    free(buf);
}

/* The rule a new leader rebuilds by (issue 5, "Producer ids" after a leader move): a follower
 * that copied the MIRROR_PID_RESET holds none of the mirrored producers, so a local producer
 * reusing a mirrored pid at sequence 0 is appended (not taken for a duplicate, not out of
 * order); a truncation below the reset brings the mirrored producers back (the log again ends
 * before the reset) and fetching the reset again clears them; so does recovery of the copy. */
static void test_mirror_pid_reset_follower(void)
{
    char *ldir = sto_tmpdir(), *fdir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *leader, *follower;
    int64_t reset_off;
    kb_producer_info_t pi;
    sto_cfg(&cfg, 1 << 20, 256);
    leader = sto_open(ldir, &cfg, 0, -1);
    follower = sto_open(fdir, &cfg, 0, -1);
    sto_mirror_prefix(leader, &reset_off);
    sto_replicate(leader, follower, 0);
    /* the follower becomes the leader */
    sto_check_after_reset(follower, reset_off);
    /* diverged below the reset: the mirrored producers are back, then gone with the reset */
    CU_ASSERT_EQUAL(kb_log_truncate_to(follower, 5), 0);
    CU_ASSERT_EQUAL(kb_log_producer_get(follower, 1, &pi), 0);
    CU_ASSERT_EQUAL(kb_log_last_pid_reset(follower), -1);
    sto_replicate(leader, follower, 5);
    sto_check_after_reset(follower, reset_off);
    /* killed (no clean shutdown, recovery point before the reset) and recovered */
    kb_log_close(follower, 0);
    follower = sto_open(fdir, &cfg, 0, 0);
    sto_check_after_reset(follower, reset_off);
    kb_log_close(follower, 0);
    kb_log_close(leader, 1);
    sto_rmrf(ldir);
    sto_rmrf(fdir);
    free(ldir);
    free(fdir);
}

void sto_register_txn_tests(void)
{
    CU_pSuite s = CU_add_suite("txn", NULL, NULL);
    CU_add_test(s, "transactions, LSO, aborted list", test_txn_lso_and_aborted);
    CU_add_test(s, "MIRROR_PID_RESET", test_mirror_pid_reset);
    CU_add_test(s, "MIRROR_PID_RESET on a follower", test_mirror_pid_reset_follower);
}
