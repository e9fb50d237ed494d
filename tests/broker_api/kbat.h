/*
 * kbat.h -- harness of the broker/api tests: an in-process broker (config, metadata, logs,
 * handlers, network server on a loopback ephemeral port) and a small blocking client that
 * sends any request of the generated codec and decodes the response. Waiting is done with
 * poll() and deadlines, never with sleeps.
 */
#ifndef KBAT_H
#define KBAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_api.h"
#include "kb_apisvc.h"
#include "kb_config.h"
#include "kb_metrics.h"
#include "kb_net.h"
#include "kp_arena.h"
#include "kp_msgs.h"

#define KBAT_WAIT_MS 10000

typedef struct kbat_broker_s {
    char dir[512];
    kb_config_t *cfg;
    kb_api_registry_t *reg;
    kb_metrics_t *metrics;
    kb_server_t *srv;
    kb_apisvc_t *svc;
    int port;
} kbat_broker_t;

/** A fresh temporary directory (mkdtemp) under $TMPDIR; the name goes to @p out. */
int kbat_tmpdir(char *out, size_t size);
/** rm -rf @p dir. */
void kbat_rmrf(const char *dir);

/** Start a broker with data in @p dir and extra "key=value" settings (NULL-terminated, may be
 *  NULL). Node id 1, listener PLAINTEXT://127.0.0.1:0. 0 or -1 (with a message on stderr). */
int kbat_broker_start(kbat_broker_t *b, const char *dir, const char *const *kv);
/** Stop it (graceful server stop, then the service); the data stays. */
void kbat_broker_stop(kbat_broker_t *b);

int kbat_connect(int port);

/** Send one request frame: header with @p corr and client id @p client_id (NULL: "kbat"),
 *  body @p req of API @p key at @p ver. 0 or -1. */
int kbat_send(int fd, int16_t key, int16_t ver, int32_t corr, const char *client_id,
              const void *req);

/** Receive one response of API @p key at @p ver: checks the correlation id, decodes the body
 *  into @p resp (arrays in @p ar). 0, -1 error/EOF, -2 timeout. */
int kbat_recv(int fd, int16_t key, int16_t ver, int32_t corr, void *resp, kp_arena_t *ar,
              int timeout_ms);

/** kbat_send + kbat_recv with a fresh correlation id. */
int kbat_call(int fd, int16_t key, int16_t ver, const void *req, void *resp, kp_arena_t *ar);

/** True if no response arrives within @p ms (acks=0). */
bool kbat_silent(int fd, int ms);

/** Append one record batch of @p n records "prefix-i" (key "k-i" unless @p null_keys) with
 *  codec @p codec; producer id/epoch/sequence as given (-1 none), transactional if @p txn. */
int kbat_batch(kp_writer_t *out, int codec, int n, const char *prefix, int64_t pid, int16_t epoch,
               int32_t seq, bool txn, bool null_keys);

/* ---- short request helpers (fd, arena; return the Kafka error code or -100 on failure) --- */

int16_t kbat_create_topic(int fd, const char *name, int32_t parts, const char *const *cfg_kv);
/** kbat_create_topic() with replication factor @p rf. */
int16_t kbat_create_topic_rf(int fd, const char *name, int32_t parts, int16_t rf,
                             const char *const *cfg_kv);
/** Produce @p batch (one partition) at @p ver with @p acks; base offset to *base. */
int16_t kbat_produce(int fd, int16_t ver, const char *topic, int32_t partition, int16_t acks,
                     const kp_writer_t *batch, int64_t *base, const char *txn_id);

/** Count the records of concatenated batches in @p recs (decompressing). -1 on corruption.
 *  @p first_offset / @p last_offset (may be NULL) get the offsets of the first / last record. */
int kbat_count_records(kp_bytes_t recs, int64_t *first_offset, int64_t *last_offset);

int64_t kbat_now_ms(void);

#endif /* KBAT_H */
