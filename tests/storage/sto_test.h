/*
 * sto_test.h -- helpers shared by the storage suites: temp dirs, a manual clock, batch builders.
 */
#ifndef STO_TEST_H
#define STO_TEST_H

#include <CUnit/CUnit.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_log.h"
#include "kp_batch.h"
#include "kp_writer.h"

extern int64_t sto_now;
int64_t sto_clock(void *opaque);

/** mkdtemp under /tmp; returns a static-lifetime malloc'd path. */
char *sto_tmpdir(void);
void sto_rmrf(const char *path);

/** Open with the manual clock. @p clean = clean-shutdown flag, @p rp recovery point. */
kb_log_t *sto_open(const char *dir, const kb_log_config_t *cfg, int clean, int64_t rp);
/** Small segments config (segment.bytes, index interval). */
void sto_cfg(kb_log_config_t *cfg, int64_t segment_bytes, int32_t interval);

/** Append one batch of @p n records (keys "k<keybase+i>", values "v<i>@<tag>") to @p wr.
 *  pid < 0: plain batch. */
void sto_batch(kp_writer_t *wr, int64_t base, int32_t epoch, int n, int keybase, int tag,
               int64_t pid, int16_t pepoch, int32_t seq, int txn, int64_t ts);
/** One-record batch with explicit key/value (NULL value = tombstone). */
void sto_kv(kp_writer_t *wr, int64_t base, const char *key, const char *value, int64_t ts);
/** Control batch. */
void sto_ctrl(kp_writer_t *wr, int64_t base, int32_t epoch, int16_t type, int64_t pid,
              int16_t pepoch, int64_t ts);

/** Leader-append a plain batch of n records; returns base offset (asserts success). */
int64_t sto_append(kb_log_t *log, int n, int keybase, int tag, int64_t ts);

/** Read the whole log [from, upper) by isolation into a malloc'd buffer by repeated reads. */
uint8_t *sto_read_all(kb_log_t *log, int64_t from, int isolation, size_t *len);

/** Map offset -> (key, value) by iterating batches in @p buf; calls cb per record. */
typedef void (*sto_rec_cb)(void *opaque, const kp_batch_t *b, const kp_record_t *r);
int sto_for_records(const uint8_t *buf, size_t len, sto_rec_cb cb, void *opaque);

void sto_register_log_tests(void);
void sto_register_txn_tests(void);
void sto_register_recovery_tests(void);
void sto_register_cleaner_tests(void);
void sto_register_mgr_tests(void);

#endif /* STO_TEST_H */
