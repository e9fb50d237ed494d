/* Append/read round trips, raw append, epochs, truncation, producer sequences, timestamps. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb_rb.h"
#include "sto_test.h"

/* Every offset in [start, leo) must be found: the first batch returned contains it. */
static void sto_check_every_offset(kb_log_t *log, int64_t start, int64_t leo)
{
    int64_t off;
    for (off = start; off < leo; off++) {
        uint8_t *buf;
        size_t n;
        kb_log_read_t meta;
        kp_batch_hdr_t h;
        int rc = kb_log_read_copy(log, off, 1, KB_ISOLATION_LEO, 1, &buf, &n, &meta);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        CU_ASSERT_FATAL(n >= KP_BATCH_HEADER_SIZE);
        kp_batch_hdr_decode(buf, n, &h);
        CU_ASSERT(h.baseOffset <= off && kp_batch_hdr_last_offset(&h) >= off);
        CU_ASSERT_EQUAL(meta.first_offset, h.baseOffset);
        free(buf);
    }
}

static void test_roundtrip_many_segments(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    kp_writer_t all;
    int i;
    int64_t expect = 0;
    uint8_t *got;
    size_t n;
    sto_cfg(&cfg, 2048, 256);
    log = sto_open(dir, &cfg, 0, -1);
    kp_writer_init(&all);
    for (i = 0; i < 300; i++) {
        kp_writer_t wr;
        kb_append_info_t info;
        int cnt = 1 + i % 4;
        kp_writer_init(&wr);
        sto_batch(&wr, 0, 0, cnt, i * 10, i, -1, -1, -1, 0, sto_now + i);
        CU_ASSERT_EQUAL_FATAL(
            kb_log_append_leader(log, wr.buf, wr.len, 7, KB_ORIGIN_CLIENT, 0, &info), 0);
        CU_ASSERT_EQUAL(info.first_offset, expect);
        CU_ASSERT_EQUAL(info.last_offset, expect + cnt - 1);
        CU_ASSERT_EQUAL(info.log_append_time, -1);
        expect += cnt;
        kp_write_raw(&all, wr.buf, wr.len); /* stamped in place by the append */
        kp_writer_free(&wr);
    }
    CU_ASSERT_EQUAL(kb_log_leo(log), expect);
    CU_ASSERT(kb_log_segment_count(log) > 10);
    CU_ASSERT_EQUAL(kb_log_hw(log), 0);
    /* consumers see nothing above the HW */
    got = sto_read_all(log, 0, KB_ISOLATION_HW, &n);
    CU_ASSERT_EQUAL(n, 0);
    free(got);
    kb_log_set_hw(log, expect);
    got = sto_read_all(log, 0, KB_ISOLATION_HW, &n);
    CU_ASSERT_EQUAL_FATAL(n, all.len);
    CU_ASSERT(memcmp(got, all.buf, n) == 0);
    free(got);
    sto_check_every_offset(log, 0, expect);
    CU_ASSERT_EQUAL(kb_log_latest_epoch(log), 7);

    /* clean reopen */
    kb_log_close(log, 1);
    log = sto_open(dir, &cfg, 1, -1);
    CU_ASSERT_EQUAL(kb_log_leo(log), expect);
    got = sto_read_all(log, 0, KB_ISOLATION_LEO, &n);
    CU_ASSERT_EQUAL_FATAL(n, all.len);
    CU_ASSERT(memcmp(got, all.buf, n) == 0);
    free(got);
    sto_check_every_offset(log, 0, expect);
    /* unclean reopen from scratch (no recovery point): full recovery gives the same log */
    kb_log_close(log, 0);
    log = sto_open(dir, &cfg, 0, -1);
    CU_ASSERT_EQUAL(kb_log_leo(log), expect);
    got = sto_read_all(log, 0, KB_ISOLATION_LEO, &n);
    CU_ASSERT_EQUAL_FATAL(n, all.len);
    CU_ASSERT(memcmp(got, all.buf, n) == 0);
    free(got);
    sto_check_every_offset(log, 0, expect);
    /* max_bytes: the first batch is returned even when larger (min_one), never split */
    {
        kb_log_read_t r;
        CU_ASSERT_EQUAL(kb_log_read(log, 5, 10, KB_ISOLATION_LEO, 1, &r), 0);
        CU_ASSERT(r.len > 10);
        kb_log_read_release(&r);
        CU_ASSERT_EQUAL(kb_log_read(log, 5, 10, KB_ISOLATION_LEO, 0, &r), 0);
        CU_ASSERT_EQUAL(r.len, 0);
        kb_log_read_release(&r);
        CU_ASSERT_EQUAL(kb_log_read(log, expect + 1, 10, KB_ISOLATION_LEO, 1, &r),
                        KB_STO_OFFSET_OUT_OF_RANGE);
        CU_ASSERT_EQUAL(kb_log_read(log, expect, 10, KB_ISOLATION_LEO, 1, &r), 0);
        CU_ASSERT_EQUAL(r.len, 0);
    }
    kb_log_close(log, 1);
    kp_writer_free(&all);
    sto_rmrf(dir);
    free(dir);
}

static void test_raw_append_exact_bytes_and_gaps(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    kp_writer_t wr;
    kb_append_info_t info;
    uint8_t *got;
    size_t n;
    int32_t *eps;
    int64_t *starts;
    size_t ne;
    sto_cfg(&cfg, 4096, 128);
    log = sto_open(dir, &cfg, 0, -1);
    kp_writer_init(&wr);
    sto_batch(&wr, 100, 3, 5, 0, 1, 42, 2, 0, 0, sto_now);   /* 100..104 */
    sto_batch(&wr, 110, 3, 2, 5, 2, 42, 2, 5, 0, sto_now);   /* gap: 110..111 */
    sto_batch(&wr, 200, 5, 3, 7, 3, -1, -1, -1, 0, sto_now); /* 200..202, epoch 5 */
    CU_ASSERT_EQUAL_FATAL(kb_log_append_raw(log, wr.buf, wr.len, &info), 0);
    CU_ASSERT_EQUAL(info.first_offset, 100);
    CU_ASSERT_EQUAL(info.last_offset, 202);
    CU_ASSERT_EQUAL(kb_log_leo(log), 203);
    got = sto_read_all(log, 100, KB_ISOLATION_LEO, &n);
    CU_ASSERT_EQUAL_FATAL(n, wr.len);
    CU_ASSERT(memcmp(got, wr.buf, n) == 0); /* byte for byte */
    free(got);
    /* reads inside a gap start at the next batch */
    {
        kb_log_read_t r;
        CU_ASSERT_EQUAL(kb_log_read(log, 150, 1 << 20, KB_ISOLATION_LEO, 1, &r), 0);
        CU_ASSERT_EQUAL(r.first_offset, 200);
        kb_log_read_release(&r);
    }
    /* below the LEO: refused; corrupt CRC: refused */
    {
        kp_writer_t w2;
        kp_writer_init(&w2);
        sto_batch(&w2, 150, 5, 1, 0, 0, -1, -1, -1, 0, sto_now);
        CU_ASSERT_EQUAL(kb_log_append_raw(log, w2.buf, w2.len, NULL), KB_STO_NON_MONOTONIC);
        kp_writer_reset(&w2);
        sto_batch(&w2, 300, 5, 1, 0, 0, -1, -1, -1, 0, sto_now);
        w2.buf[w2.len - 1] ^= 0x55;
        CU_ASSERT_EQUAL(kb_log_append_raw(log, w2.buf, w2.len, NULL), KB_STO_CORRUPT_MESSAGE);
        kp_writer_free(&w2);
    }
    CU_ASSERT_EQUAL(kb_log_leo(log), 203);
    /* producer state from raw appends: no rejection, state updated */
    {
        kb_producer_info_t pi;
        CU_ASSERT_EQUAL(kb_log_producer_get(log, 42, &pi), 0);
        CU_ASSERT_EQUAL(pi.last_sequence, 6);
        CU_ASSERT_EQUAL(pi.last_offset, 111);
        CU_ASSERT_EQUAL(pi.producer_epoch, 2);
    }
    /* epoch cache holds the batches' epochs */
    CU_ASSERT_EQUAL(kb_log_epoch_entries(log, &eps, &starts, &ne), 0);
    CU_ASSERT_EQUAL_FATAL(ne, 2);
    CU_ASSERT(eps[0] == 3 && starts[0] == 100 && eps[1] == 5 && starts[1] == 200);
    free(eps);
    free(starts);
    kb_log_close(log, 1);
    /* checkpoint reload */
    log = sto_open(dir, &cfg, 1, -1);
    CU_ASSERT_EQUAL(kb_log_epoch_entries(log, &eps, &starts, &ne), 0);
    CU_ASSERT_EQUAL_FATAL(ne, 2);
    CU_ASSERT(eps[0] == 3 && starts[0] == 100 && eps[1] == 5 && starts[1] == 200);
    free(eps);
    free(starts);
    CU_ASSERT_EQUAL(kb_log_start_offset(log), 0); /* the empty log started at 0 */
    kb_log_close(log, 1);
    /* a missing checkpoint is rebuilt from the batches */
    {
        char p[4200];
        snprintf(p, sizeof(p), "%s/leader-epoch-checkpoint", dir);
        CU_ASSERT_EQUAL(unlink(p), 0);
    }
    log = sto_open(dir, &cfg, 1, -1);
    CU_ASSERT_EQUAL(kb_log_epoch_entries(log, &eps, &starts, &ne), 0);
    CU_ASSERT_EQUAL_FATAL(ne, 2);
    CU_ASSERT(eps[0] == 3 && starts[0] == 100 && eps[1] == 5 && starts[1] == 200);
    free(eps);
    free(starts);
    got = sto_read_all(log, 100, KB_ISOLATION_LEO, &n);
    CU_ASSERT_EQUAL_FATAL(n, wr.len);
    CU_ASSERT(memcmp(got, wr.buf, n) == 0);
    free(got);
    kb_log_close(log, 1);
    kp_writer_free(&wr);
    sto_rmrf(dir);
    free(dir);
}

static void test_epoch_end_offset(void)
{
    char *dir = sto_tmpdir();
    kb_log_t *log = sto_open(dir, NULL, 0, -1);
    kp_writer_t wr;
    int32_t e;
    int64_t o;
    kp_writer_init(&wr);
    sto_batch(&wr, 0, 2, 10, 0, 0, -1, -1, -1, 0, sto_now);  /* epoch 2: 0..9 */
    sto_batch(&wr, 10, 4, 10, 0, 0, -1, -1, -1, 0, sto_now); /* epoch 4: 10..19 */
    sto_batch(&wr, 20, 7, 5, 0, 0, -1, -1, -1, 0, sto_now);  /* epoch 7: 20..24 */
    CU_ASSERT_EQUAL_FATAL(kb_log_append_raw(log, wr.buf, wr.len, NULL), 0);
    kb_log_epoch_end_offset(log, 2, &e, &o);
    CU_ASSERT(e == 2 && o == 10);
    kb_log_epoch_end_offset(log, 3, &e, &o); /* between: floor epoch 2, end 10 */
    CU_ASSERT(e == 2 && o == 10);
    kb_log_epoch_end_offset(log, 4, &e, &o);
    CU_ASSERT(e == 4 && o == 20);
    kb_log_epoch_end_offset(log, 7, &e, &o); /* latest: LEO */
    CU_ASSERT(e == 7 && o == 25);
    kb_log_epoch_end_offset(log, 9, &e, &o); /* above latest */
    CU_ASSERT(e == -1 && o == -1);
    kb_log_epoch_end_offset(log, 1, &e, &o); /* below the first epoch: Kafka's answer */
    CU_ASSERT(e == 1 && o == 0);
    kb_log_epoch_end_offset(log, -1, &e, &o);
    CU_ASSERT(e == -1 && o == -1);
    CU_ASSERT_EQUAL(kb_log_epoch_for_offset(log, 15), 4);
    CU_ASSERT_EQUAL(kb_log_epoch_for_offset(log, 24), 7);
    /* becoming leader at epoch 9 */
    kb_log_assign_epoch(log, 9, 25);
    kb_log_epoch_end_offset(log, 7, &e, &o);
    CU_ASSERT(e == 7 && o == 25);
    kb_log_epoch_end_offset(log, 9, &e, &o);
    CU_ASSERT(e == 9 && o == 25);
    /* truncation cuts the cache; inside a batch, the whole batch goes (Kafka's rule): 22 is
     * in epoch 7's batch 20..24, so the log and epoch 4 end at 20 */
    CU_ASSERT_EQUAL(kb_log_truncate_to(log, 22), 0);
    CU_ASSERT_EQUAL(kb_log_leo(log), 20);
    CU_ASSERT_EQUAL(kb_log_latest_epoch(log), 4);
    kb_log_epoch_end_offset(log, 4, &e, &o);
    CU_ASSERT(e == 4 && o == 20);
    kb_log_epoch_end_offset(log, 7, &e, &o); /* gone: above the latest now */
    CU_ASSERT(e == -1 && o == -1);
    /* log start moving up trims the head */
    CU_ASSERT_EQUAL(kb_log_set_hw(log, 15), 0);
    CU_ASSERT_EQUAL(kb_log_delete_records(log, 12, NULL), 0);
    CU_ASSERT_EQUAL(kb_log_epoch_for_offset(log, 12), 4);
    kb_log_epoch_end_offset(log, 2, &e, &o); /* gone: below first epoch now */
    CU_ASSERT(e == 2 && o == 12);
    kb_log_close(log, 1);
    kp_writer_free(&wr);
    sto_rmrf(dir);
    free(dir);
}

static void test_truncation(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    int i;
    int64_t *bases;
    size_t nb;
    uint8_t *got;
    size_t n;
    sto_cfg(&cfg, 1024, 100);
    log = sto_open(dir, &cfg, 0, -1);
    for (i = 0; i < 100; i++)
        sto_append(log, 3, i * 3, i, sto_now + i); /* batches of 3: base 3i */
    CU_ASSERT_EQUAL(kb_log_leo(log), 300);
    kb_log_set_hw(log, 300);
    CU_ASSERT_EQUAL(kb_log_segment_bases(log, &bases, &nb), 0);
    CU_ASSERT_FATAL(nb > 5);
    /* at a segment boundary */
    {
        int64_t b = bases[nb - 2];
        CU_ASSERT_EQUAL(kb_log_truncate_to(log, b), 0);
        CU_ASSERT_EQUAL(kb_log_leo(log), b);
        CU_ASSERT_EQUAL(kb_log_hw(log), b);
        CU_ASSERT_EQUAL(kb_log_segment_count(log), (int)nb - 2);
    }
    /* at a batch boundary inside a segment */
    CU_ASSERT_EQUAL(kb_log_truncate_to(log, 150), 0);
    CU_ASSERT_EQUAL(kb_log_leo(log), 150);
    got = sto_read_all(log, 0, KB_ISOLATION_LEO, &n);
    {
        int cnt = 0;
        kp_batch_iter_t it;
        kp_batch_t b;
        int64_t last = -1;
        kp_batch_iter_init(&it, got, n, 0, 0);
        while (kp_batch_iter_next(&it, &b) == 1) {
            cnt++;
            last = kp_batch_hdr_last_offset(&b.hdr);
        }
        CU_ASSERT_EQUAL(cnt, 50);
        CU_ASSERT_EQUAL(last, 149);
    }
    free(got);
    /* mid-batch (Kafka's rule): the whole batch containing the offset goes and the log ends
     * at its base offset, 99 for batch 99..101, the HW with it */
    CU_ASSERT_EQUAL(kb_log_truncate_to(log, 100), 0);
    CU_ASSERT_EQUAL(kb_log_leo(log), 99);
    CU_ASSERT_EQUAL(kb_log_hw(log), 99);
    {
        kb_log_read_t r;
        CU_ASSERT_EQUAL(kb_log_read(log, 98, 1 << 20, KB_ISOLATION_LEO, 1, &r), 0);
        CU_ASSERT_EQUAL(r.first_offset, 96);
        CU_ASSERT_EQUAL(r.next_offset, 99);
        kb_log_read_release(&r);
    }
    /* appends continue at the new LEO without a gap, and every offset is found again */
    CU_ASSERT_EQUAL(sto_append(log, 2, 0, 0, sto_now), 99);
    sto_check_every_offset(log, 0, 96);
    /* reopen: consistent, the same LEO as before the close */
    kb_log_close(log, 1);
    log = sto_open(dir, &cfg, 1, -1);
    CU_ASSERT_EQUAL(kb_log_leo(log), 101);
    sto_check_every_offset(log, 0, 96);
    /* a batch straddling the log start: truncating inside it above the log start empties the
     * log at its start (never below it) */
    kb_log_set_hw(log, 101);
    CU_ASSERT_EQUAL(kb_log_delete_records(log, 100, NULL), 0);
    CU_ASSERT_EQUAL(kb_log_start_offset(log), 100);
    CU_ASSERT_EQUAL(sto_append(log, 3, 0, 0, sto_now), 101); /* 101..103 */
    CU_ASSERT_EQUAL(kb_log_truncate_to(log, 102), 0);
    CU_ASSERT_EQUAL(kb_log_leo(log), 101);
    CU_ASSERT_EQUAL(kb_log_truncate_to(log, 100), 0); /* inside 99..100, at the log start */
    CU_ASSERT_EQUAL(kb_log_leo(log), 100);
    CU_ASSERT_EQUAL(kb_log_start_offset(log), 100);
    CU_ASSERT_EQUAL(sto_append(log, 1, 0, 0, sto_now), 100);
    kb_log_close(log, 1);
    log = sto_open(dir, &cfg, 1, -1);
    CU_ASSERT_EQUAL(kb_log_start_offset(log), 100);
    CU_ASSERT_EQUAL(kb_log_leo(log), 101);
    sto_check_every_offset(log, 100, 101);
    /* truncate fully and start elsewhere */
    CU_ASSERT_EQUAL(kb_log_truncate_fully(log, 5000), 0);
    CU_ASSERT_EQUAL(kb_log_leo(log), 5000);
    CU_ASSERT_EQUAL(kb_log_start_offset(log), 5000);
    CU_ASSERT_EQUAL(kb_log_segment_count(log), 1);
    CU_ASSERT_EQUAL(kb_log_latest_epoch(log), -1);
    CU_ASSERT_EQUAL(sto_append(log, 1, 0, 0, sto_now), 5000);
    kb_log_close(log, 0);
    log = sto_open(dir, &cfg, 0, -1);
    CU_ASSERT_EQUAL(kb_log_start_offset(log), 5000);
    CU_ASSERT_EQUAL(kb_log_leo(log), 5001);
    kb_log_close(log, 1);
    free(bases);
    sto_rmrf(dir);
    free(dir);
}

static int sto_idem(kb_log_t *log, int64_t pid, int16_t ep, int32_t seq, int n,
                    kb_append_info_t *info)
{
    kp_writer_t wr;
    int rc;
    kp_writer_init(&wr);
    sto_batch(&wr, 0, 0, n, 0, seq, pid, ep, seq, 0, sto_now);
    rc = kb_log_append_leader(log, wr.buf, wr.len, 1, KB_ORIGIN_CLIENT, 0, info);
    kp_writer_free(&wr);
    return rc;
}

static void test_producer_sequences(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    kb_append_info_t info;
    int i;
    sto_cfg(&cfg, 4096, 256);
    log = sto_open(dir, &cfg, 0, -1);
    /* unknown producer: any first sequence */
    CU_ASSERT_EQUAL(sto_idem(log, 7, 0, 0, 2, &info), 0); /* seq 0-1, offsets 0-1 */
    CU_ASSERT_EQUAL(sto_idem(log, 7, 0, 2, 3, &info), 0); /* seq 2-4, offsets 2-4 */
    CU_ASSERT_EQUAL(sto_idem(log, 7, 0, 0, 2, &info), KB_STO_DUPLICATE_SEQUENCE);
    CU_ASSERT(info.first_offset == 0 && info.last_offset == 1);
    CU_ASSERT_EQUAL(sto_idem(log, 7, 0, 2, 3, &info), KB_STO_DUPLICATE_SEQUENCE);
    CU_ASSERT(info.first_offset == 2 && info.last_offset == 4);
    CU_ASSERT_EQUAL(sto_idem(log, 7, 0, 9, 1, &info), KB_STO_OUT_OF_ORDER_SEQUENCE);
    CU_ASSERT_EQUAL(sto_idem(log, 7, 0, 5, 1, &info), 0); /* offset 5 */
    /* fences: older epoch refused, newer epoch must start at 0 */
    CU_ASSERT_EQUAL(sto_idem(log, 8, 3, 100, 1, &info), 0); /* new pid, any seq */
    CU_ASSERT_EQUAL(sto_idem(log, 8, 2, 101, 1, &info), KB_STO_INVALID_PRODUCER_EPOCH);
    CU_ASSERT_EQUAL(sto_idem(log, 8, 4, 5, 1, &info), KB_STO_OUT_OF_ORDER_SEQUENCE);
    CU_ASSERT_EQUAL(sto_idem(log, 8, 4, 0, 1, &info), 0);
    /* only the last 5 batches are remembered */
    for (i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(sto_idem(log, 9, 0, i, 1, &info), 0);
    CU_ASSERT_EQUAL(sto_idem(log, 9, 0, 1, 1, &info), KB_STO_DUPLICATE_SEQUENCE);
    CU_ASSERT_EQUAL(sto_idem(log, 9, 0, 0, 1, &info), KB_STO_OUT_OF_ORDER_SEQUENCE);
    CU_ASSERT_EQUAL(kb_log_check_sequence(log, 7, 0, 6, 6, NULL, NULL), KB_SEQ_OK);
    /* persistence: clean reopen (snapshot) and unclean reopen (replay) */
    kb_log_close(log, 1);
    log = sto_open(dir, &cfg, 1, -1);
    CU_ASSERT_EQUAL(sto_idem(log, 7, 0, 2, 3, &info), KB_STO_DUPLICATE_SEQUENCE);
    CU_ASSERT(info.first_offset == 2 && info.last_offset == 4);
    CU_ASSERT_EQUAL(sto_idem(log, 8, 3, 1, 1, &info), KB_STO_INVALID_PRODUCER_EPOCH);
    kb_log_close(log, 0);
    log = sto_open(dir, &cfg, 0, -1);
    CU_ASSERT_EQUAL(sto_idem(log, 7, 0, 5, 1, &info), KB_STO_DUPLICATE_SEQUENCE);
    CU_ASSERT_EQUAL(info.first_offset, 5);
    CU_ASSERT_EQUAL(sto_idem(log, 7, 0, 6, 1, &info), 0);
    /* truncation rebuilds producer state: the batch at seq 6 is gone again */
    CU_ASSERT_EQUAL(kb_log_truncate_to(log, info.first_offset), 0);
    CU_ASSERT_EQUAL(kb_log_check_sequence(log, 7, 0, 6, 6, NULL, NULL), KB_SEQ_OK);
    CU_ASSERT_EQUAL(sto_idem(log, 7, 0, 6, 1, &info), 0);
    /* idempotent requests carry one batch */
    {
        kp_writer_t wr;
        kp_writer_init(&wr);
        sto_batch(&wr, 0, 0, 1, 0, 0, 11, 0, 0, 0, sto_now);
        sto_batch(&wr, 1, 0, 1, 0, 0, 11, 0, 1, 0, sto_now);
        CU_ASSERT_EQUAL(kb_log_append_leader(log, wr.buf, wr.len, 1, KB_ORIGIN_CLIENT, 0, NULL),
                        KB_STO_INVALID_RECORD);
        kp_writer_free(&wr);
    }
    kb_log_close(log, 1);
    sto_rmrf(dir);
    free(dir);
}

static void test_validation_and_timestamps(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    kp_writer_t wr;
    kb_append_info_t info;
    const char *why;
    uint8_t *got;
    size_t n;
    kb_log_config_defaults(&cfg);
    cfg.message_timestamp_type = KB_TS_LOG_APPEND_TIME;
    cfg.max_message_bytes = 300;
    log = sto_open(dir, &cfg, 0, -1);
    kp_writer_init(&wr);
    sto_batch(&wr, 0, 0, 3, 0, 0, -1, -1, -1, 0, 1000);
    sto_now += 5;
    CU_ASSERT_EQUAL(kb_log_append_leader(log, wr.buf, wr.len, 2, KB_ORIGIN_CLIENT, 0, &info), 0);
    CU_ASSERT_EQUAL(info.log_append_time, sto_now);
    kb_log_set_hw(log, kb_log_leo(log));
    got = sto_read_all(log, 0, KB_ISOLATION_HW, &n);
    {
        kp_batch_t b;
        CU_ASSERT_EQUAL_FATAL(kp_batch_parse(got, n, 0, 0, &b, NULL), 0); /* CRC valid */
        CU_ASSERT(kp_batch_hdr_log_append_time(&b.hdr));
        CU_ASSERT_EQUAL(b.hdr.maxTimestamp, sto_now);
        CU_ASSERT_EQUAL(b.hdr.partitionLeaderEpoch, 2);
    }
    free(got);
    /* too large */
    kp_writer_reset(&wr);
    sto_batch(&wr, 0, 0, 30, 0, 0, -1, -1, -1, 0, 1000);
    CU_ASSERT_EQUAL(kb_log_validate_produce(&cfg, wr.buf, wr.len, sto_now, &why),
                    KB_STO_RECORD_TOO_LARGE);
    /* bad CRC */
    kp_writer_reset(&wr);
    sto_batch(&wr, 0, 0, 1, 0, 0, -1, -1, -1, 0, 1000);
    wr.buf[wr.len - 2] ^= 1;
    CU_ASSERT_EQUAL(kb_log_validate_produce(&cfg, wr.buf, wr.len, sto_now, &why),
                    KB_STO_CORRUPT_MESSAGE);
    /* magic 1 */
    wr.buf[wr.len - 2] ^= 1;
    wr.buf[16] = 1;
    CU_ASSERT_EQUAL(kb_log_validate_produce(&cfg, wr.buf, wr.len, sto_now, &why),
                    KB_STO_UNSUPPORTED_FORMAT);
    wr.buf[16] = 2;
    /* CreateTime out of range */
    cfg.message_timestamp_type = KB_TS_CREATE_TIME;
    cfg.message_ts_after_max_ms = 1000;
    kp_writer_reset(&wr);
    sto_batch(&wr, 0, 0, 1, 0, 0, -1, -1, -1, 0, sto_now + 5000);
    CU_ASSERT_EQUAL(kb_log_validate_produce(&cfg, wr.buf, wr.len, sto_now, &why),
                    KB_STO_INVALID_TIMESTAMP);
    /* compacted topic: null key refused */
    cfg.cleanup_policy = KB_CLEANUP_COMPACT;
    kp_writer_reset(&wr);
    {
        kp_batch_opts_t o;
        kp_batch_builder_t bb;
        kp_batch_opts_init(&o);
        kp_batch_builder_init(&bb, &o);
        kp_batch_builder_add(&bb, sto_now, (kp_bytes_t){NULL, -1},
                             (kp_bytes_t){(const uint8_t *)"x", 1}, NULL, 0);
        kp_batch_builder_finish(&bb, &wr);
        kp_batch_builder_free(&bb);
    }
    CU_ASSERT_EQUAL(kb_log_validate_produce(&cfg, wr.buf, wr.len, sto_now, &why),
                    KB_STO_INVALID_RECORD);
    /* compressed batch: validated after decompression */
    kp_writer_reset(&wr);
    {
        kp_batch_opts_t o;
        kp_batch_builder_t bb;
        int i;
        kp_batch_opts_init(&o);
        o.codec = KP_CODEC_ZSTD;
        kp_batch_builder_init(&bb, &o);
        for (i = 0; i < 10; i++)
            kp_batch_builder_add(&bb, sto_now, (kp_bytes_t){(const uint8_t *)"key", 3},
                                 (kp_bytes_t){(const uint8_t *)"value", 5}, NULL, 0);
        kp_batch_builder_finish(&bb, &wr);
        kp_batch_builder_free(&bb);
    }
    CU_ASSERT_EQUAL(kb_log_validate_produce(&cfg, wr.buf, wr.len, sto_now, &why), 0);
    kp_writer_free(&wr);
    kb_log_close(log, 1);
    sto_rmrf(dir);
    free(dir);
}

static void test_offsets_by_timestamp(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    kb_log_t *log;
    int i;
    int64_t off, ts;
    int32_t ep;
    sto_cfg(&cfg, 1024, 64);
    log = sto_open(dir, &cfg, 0, -1);
    /* batch i: 4 records with timestamps 10000 + 10*i + 0..3, a peak at batch 40 */
    for (i = 0; i < 80; i++)
        sto_append(log, 4, i * 4, i, i == 40 ? 900000 : 10000 + 10 * i);
    CU_ASSERT(kb_log_segment_count(log) > 3);
    CU_ASSERT_EQUAL(kb_log_offset_for_timestamp(log, 10000 + 10 * 25 + 2, &off, &ts, &ep), 0);
    CU_ASSERT_EQUAL(off, 25 * 4 + 2);
    CU_ASSERT_EQUAL(ts, 10000 + 10 * 25 + 2);
    CU_ASSERT_EQUAL(ep, 1);
    CU_ASSERT_EQUAL(kb_log_offset_for_timestamp(log, 10000 + 10 * 25 + 5, &off, &ts, &ep), 0);
    CU_ASSERT_EQUAL(off, 26 * 4);
    CU_ASSERT_EQUAL(kb_log_offset_for_timestamp(log, 5, &off, &ts, &ep), 0);
    CU_ASSERT_EQUAL(off, 0);
    CU_ASSERT_EQUAL(kb_log_offset_for_timestamp(log, 9999999, &off, &ts, &ep), 0);
    CU_ASSERT_EQUAL(off, -1);
    CU_ASSERT_EQUAL(kb_log_offset_for_timestamp(log, KB_TS_MAX_TIMESTAMP, &off, &ts, &ep), 0);
    CU_ASSERT_EQUAL(off, 40 * 4 + 3);
    CU_ASSERT_EQUAL(ts, 900003);
    CU_ASSERT_EQUAL(kb_log_offset_for_timestamp(log, KB_TS_LATEST, &off, &ts, &ep), 0);
    CU_ASSERT_EQUAL(off, 320);
    CU_ASSERT_EQUAL(kb_log_offset_for_timestamp(log, KB_TS_EARLIEST, &off, &ts, &ep), 0);
    CU_ASSERT_EQUAL(off, 0);
    /* after reopen (time index from disk) the answers are the same */
    kb_log_close(log, 1);
    log = sto_open(dir, &cfg, 1, -1);
    CU_ASSERT_EQUAL(kb_log_offset_for_timestamp(log, 10000 + 10 * 30 + 1, &off, &ts, &ep), 0);
    CU_ASSERT_EQUAL(off, 30 * 4 + 1);
    /* the first record with a timestamp >= the target is the peak at batch 40, not batch 60 */
    CU_ASSERT_EQUAL(kb_log_offset_for_timestamp(log, 10000 + 10 * 60 + 1, &off, &ts, &ep), 0);
    CU_ASSERT_EQUAL(off, 40 * 4);
    CU_ASSERT_EQUAL(ts, 900000);
    CU_ASSERT_EQUAL(kb_log_offset_for_timestamp(log, KB_TS_MAX_TIMESTAMP, &off, &ts, &ep), 0);
    CU_ASSERT_EQUAL(off, 40 * 4 + 3);
    kb_log_close(log, 1);
    sto_rmrf(dir);
    free(dir);
}

typedef struct sto_listen_s {
    int calls;
    int64_t leo, hw;
} sto_listen_t;

static void sto_listener(void *opaque, kb_log_t *log, int64_t leo, int64_t hw)
{
    sto_listen_t *l = opaque;
    (void)log;
    l->calls++;
    l->leo = leo;
    l->hw = hw;
}

static void test_listener(void)
{
    char *dir = sto_tmpdir();
    kb_log_t *log = sto_open(dir, NULL, 0, -1);
    sto_listen_t l = {0, 0, 0};
    kb_log_set_listener(log, sto_listener, &l);
    sto_append(log, 3, 0, 0, sto_now);
    CU_ASSERT_EQUAL(l.calls, 1);
    CU_ASSERT_EQUAL(l.leo, 3);
    kb_log_set_hw(log, 2);
    CU_ASSERT_EQUAL(l.calls, 2);
    CU_ASSERT_EQUAL(l.hw, 2);
    kb_log_close(log, 1);
    sto_rmrf(dir);
    free(dir);
}

/* One writer appends while readers read behind it; every read returns whole valid batches with
 * increasing offsets. Synchronisation is only through the log itself. */
typedef struct sto_conc_s {
    kb_log_t *log;
    int64_t target;
    int errors;
} sto_conc_t;

static void *sto_reader(void *arg)
{
    sto_conc_t *c = arg;
    int64_t off = 0;
    while (off < c->target) {
        kb_log_read_t r;
        uint8_t *buf;
        size_t n;
        kp_batch_iter_t it;
        kp_batch_t b;
        int64_t expect = off;
        if (kb_log_read_copy(c->log, off, 4096, KB_ISOLATION_LEO, 1, &buf, &n, &r)) {
            c->errors++;
            break;
        }
        kp_batch_iter_init(&it, buf, n, 0, 0);
        while (kp_batch_iter_next(&it, &b) == 1) {
            if (b.hdr.baseOffset != expect)
                c->errors++;
            expect = kp_batch_hdr_last_offset(&b.hdr) + 1;
        }
        if (it.err || it.trailing)
            c->errors++;
        if (n)
            off = r.next_offset;
        free(buf);
    }
    return NULL;
}

static void test_concurrent_readers(void)
{
    char *dir = sto_tmpdir();
    kb_log_config_t cfg;
    sto_conc_t c;
    pthread_t th[2];
    int i;
    sto_cfg(&cfg, 8192, 512);
    c.log = sto_open(dir, &cfg, 0, -1);
    c.target = 2000;
    c.errors = 0;
    for (i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, sto_reader, &c);
    for (i = 0; i < 1000; i++)
        sto_append(c.log, 2, i, i, sto_now);
    for (i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CU_ASSERT_EQUAL(c.errors, 0);
    kb_log_close(c.log, 1);
    sto_rmrf(dir);
    free(dir);
}

void sto_register_log_tests(void)
{
    CU_pSuite s = CU_add_suite("log", NULL, NULL);
    CU_add_test(s, "roundtrip over many segments", test_roundtrip_many_segments);
    CU_add_test(s, "raw append exact bytes, gaps, epochs", test_raw_append_exact_bytes_and_gaps);
    CU_add_test(s, "epoch end offsets", test_epoch_end_offset);
    CU_add_test(s, "truncation", test_truncation);
    CU_add_test(s, "producer sequences", test_producer_sequences);
    CU_add_test(s, "validation and timestamps", test_validation_and_timestamps);
    CU_add_test(s, "offsets by timestamp", test_offsets_by_timestamp);
    CU_add_test(s, "listener", test_listener);
    CU_add_test(s, "concurrent readers", test_concurrent_readers);
}
