/*
 * fakehost.h - an in-process implementation of the whole kbx_api_t for unit tests.
 *
 * One fakehost_t is one broker. Everything runs on the test's thread:
 *   - Clock: manual. fakehost_advance_ms() moves it, firing timers and timeouts in order.
 *   - Threads: thread_start() creates a task; the test runs tasks with fakehost_run_until_idle()
 *     (or they run while the plugin blocks in thread_join()/latch_wait() on the test thread).
 *     A task's function is called once per step. Inside a step latch_wait() never blocks: it
 *     returns KBX_OK if the latch is set, else KBX_ERR_TIMEOUT and parks the task until the
 *     latch is set or the deadline passes. So a thread function must wait at most once per
 *     call and must not spin on a condition within one call.
 *     A blocking wait on the test thread (latch_wait or thread_join outside a task) runs the
 *     tasks and events; when nothing can run, simulated time jumps to the next deadline.
 *   - Asynchronous operations (ISR wait, epoch bump, controller write, requests) complete from
 *     an event queue drained by the scheduler, never inside the call that started them.
 *     fakehost_hold_async() keeps new ones pending until released or timed out.
 *   - Logs, configs, metrics, registrations and responses are kept in memory for assertions.
 *   - Fault injection: allocation-failure countdown, failing log appends, injected errors on
 *     local/inter-broker requests and on the other asynchronous operations.
 *   - Misuse (freeing foreign memory, touching a cancelled token, destroying a latch with a
 *     waiter, double completion, joining a thread that can never exit) calls the fatal hook,
 *     which by default prints the reason and aborts the test process.
 *
 * Not thread-safe: one test thread drives a fakehost.
 */
#ifndef FAKEHOST_H
#define FAKEHOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kbx.h"

typedef struct kbx_host fakehost_t;
typedef struct fakehost_call fakehost_call_t;

typedef struct fakehost_opts {
    uint16_t abi_minor;     /**< minor the table claims; 0 means KBX_ABI_MINOR. A test sets
                                 KBX_ABI_MINOR + 1 to act as a newer host. */
    int32_t broker_id;      /**< default 1 */
    const char *cluster_id; /**< default "fake-cluster" */
} fakehost_opts_t;

/** Create a fake host (NULL opts: defaults). Returns NULL only when out of memory. */
fakehost_t *fakehost_new(const fakehost_opts_t *opts);
/** Free everything the fake host owns (not the plugin's leaks: see fakehost_check_clean). */
void fakehost_free(fakehost_t *fh);

/** The table to pass to init / the loader. */
const kbx_api_t *fakehost_api(fakehost_t *fh);
/** Writable copy of the table, for ABI-negative tests (NULL members, smaller struct_size). */
kbx_api_t *fakehost_api_mut(fakehost_t *fh);
/** The host handle (the same object). */
kbx_host_t *fakehost_host(fakehost_t *fh);

/* --- fatal hook ---------------------------------------------------------------------------- */
typedef void (*fakehost_fatal_fn)(void *arg, const char *file, int line, const char *msg);
/** Replace the default fatal handler (print + abort). fn must not return (longjmp is fine). */
void fakehost_set_fatal(fakehost_t *fh, fakehost_fatal_fn fn, void *arg);

/* --- configuration ------------------------------------------------------------------------- */
/** Set (value != NULL) or remove a broker configuration key. Returns 0 or -1 (no memory). */
int fakehost_config_set(fakehost_t *fh, const char *key, const char *value);

/* --- logging ------------------------------------------------------------------------------- */
/** True if a logged line contains needle. */
bool fakehost_log_contains(const fakehost_t *fh, const char *needle);
/** Number of lines logged at level (KBX_LOG_*), or at every level with 0. */
size_t fakehost_log_count(const fakehost_t *fh, int32_t level);
/** Levels above max_level are not enabled (default KBX_LOG_DEBUG). */
void fakehost_set_log_level(fakehost_t *fh, int32_t max_level);

/* --- clock and scheduler ------------------------------------------------------------------- */
int64_t fakehost_now_ms(const fakehost_t *fh);
/** Move the clock forward by ms, stopping at each timer/timeout deadline to run what is due. */
void fakehost_advance_ms(fakehost_t *fh, int64_t ms);
/** Run runnable tasks, due timers and ready events until nothing can run. Returns the number
 *  of task steps, timer firings and events processed. */
size_t fakehost_run_until_idle(fakehost_t *fh);
/** Live (not yet joined) threads. */
size_t fakehost_thread_count(const fakehost_t *fh);

/* --- memory -------------------------------------------------------------------------------- */
/** Make the allocation after `after` more successful ones fail (after < 0: off). With sticky,
 *  every allocation after that fails too. */
void fakehost_fail_alloc(fakehost_t *fh, int64_t after, bool sticky);
/** Allocations made to fail so far. */
uint64_t fakehost_alloc_failures(const fakehost_t *fh);
/** Successful allocations so far. */
uint64_t fakehost_alloc_total(const fakehost_t *fh);
/** Allocations not freed yet. */
size_t fakehost_live_allocs(const fakehost_t *fh);

/* --- metrics ------------------------------------------------------------------------------- */
size_t fakehost_metric_count(const fakehost_t *fh);
/** Find a registered metric by group and name; *value gets its value (counter: sum, gauge:
 *  last value, histogram: number of samples). */
bool fakehost_metric_get(const fakehost_t *fh, const char *group, const char *name, double *value);

/* --- RPC ----------------------------------------------------------------------------------- */
size_t fakehost_rpc_count(const fakehost_t *fh);
bool fakehost_rpc_registered(const fakehost_t *fh, int16_t api_key);

#define FAKEHOST_CALL_PENDING   1
#define FAKEHOST_CALL_COMPLETED 2
#define FAKEHOST_CALL_CANCELLED 3
#define FAKEHOST_CALL_FAILED    4 /**< handle returned an error: connection closed */

/** Deliver a request to the registered handler as a client would. Returns what handle
 *  returned (or KBX_ERR_NOT_FOUND if no handler). *out (owned by the fake host) records it. */
int32_t fakehost_rpc_call(fakehost_t *fh, int16_t api_key, int16_t api_version, const uint8_t *body,
                          size_t len, fakehost_call_t **out);
/** The client disconnects: a pending call is cancelled through the handler's cancel op. */
void fakehost_rpc_disconnect(fakehost_t *fh, fakehost_call_t *call);
int fakehost_call_state(const fakehost_call_t *call);
/** Response body of a completed call (NULL otherwise). */
const uint8_t *fakehost_call_response(const fakehost_call_t *call, size_t *len);

/* --- listeners ----------------------------------------------------------------------------- */
size_t fakehost_listener_count(const fakehost_t *fh);
/** Deliver a metadata delta (borrowed) to every metadata listener. */
void fakehost_publish_delta(fakehost_t *fh, const kbx_metadata_delta_t *delta);
/** Deliver leadership changes (borrowed) to every leadership listener. */
void fakehost_publish_leadership(fakehost_t *fh, const kbx_leadership_change_t *const *changes,
                                 uint32_t count);

/* --- partitions ---------------------------------------------------------------------------- */
/** Create a local replica. Returns 0, or -1 if it exists or memory ran out. */
int fakehost_partition_add(fakehost_t *fh, const kbx_uuid_t *topic_id, const char *topic,
                           int32_t partition, int32_t leader_epoch, bool leader,
                           int32_t write_mode);
/** Change role and epoch as the controller would, and tell the leadership listeners. A new
 *  epoch resets the write mode to KBX_WRITE_PENDING. */
int fakehost_partition_set_leader(fakehost_t *fh, const kbx_uuid_t *topic_id, int32_t partition,
                                  int32_t leader_epoch, bool leader);
/** Pin the high watermark (hw < 0: follow the log end offset, the default). */
int fakehost_partition_set_hw(fakehost_t *fh, const kbx_uuid_t *topic_id, int32_t partition,
                              int64_t hw);
/** The stored log bytes (borrowed until the next change) and offsets. */
const uint8_t *fakehost_partition_log(const fakehost_t *fh, const kbx_uuid_t *topic_id,
                                      int32_t partition, size_t *len, kbx_log_offsets_t *offs);
int32_t fakehost_partition_write_mode(const fakehost_t *fh, const kbx_uuid_t *topic_id,
                                      int32_t partition);
/** Make the next count log appends (data or control) fail with err. */
void fakehost_fail_appends(fakehost_t *fh, int count, int32_t err);

/* --- asynchronous operations and request channels ------------------------------------------ */

/** Answers requests sent with local_request (broker_id = FAKEHOST_LOCAL) or broker_request.
 *  Return KBX_OK with *resp (malloc'd, freed by the fake) and *resp_len, or an error status. */
typedef int32_t (*fakehost_request_fn)(void *arg, int32_t broker_id, int16_t api_key,
                                       int16_t api_version, const uint8_t *body, size_t len,
                                       uint8_t **resp, size_t *resp_len);
#define FAKEHOST_LOCAL      (-1)
#define FAKEHOST_ANY_BROKER (-2)
void fakehost_set_request_handler(fakehost_t *fh, fakehost_request_fn fn, void *arg);
/** The next count requests to broker_id (FAKEHOST_LOCAL, FAKEHOST_ANY_BROKER for any remote)
 *  with api_key (-1: any) complete with status err. */
void fakehost_inject_request_error(fakehost_t *fh, int32_t broker_id, int16_t api_key, int32_t err,
                                   int count);

#define FAKEHOST_OP_ISR_WAIT   1
#define FAKEHOST_OP_EPOCH_BUMP 2
#define FAKEHOST_OP_CONTROLLER 3
/** The next count operations of kind op complete with status err. */
void fakehost_inject_op_error(fakehost_t *fh, int op, int32_t err, int count);
/** Hold new asynchronous completions (they still time out) until called with false. */
void fakehost_hold_async(fakehost_t *fh, bool hold);
/** Started asynchronous operations whose callback has not run yet. */
size_t fakehost_pending_async(const fakehost_t *fh);
/** Plugin records stored by controller_write. */
size_t fakehost_record_count(const fakehost_t *fh);

/* --- authorization -------------------------------------------------------------------------- */
typedef int32_t (*fakehost_authz_fn)(void *arg, const char *principal, int32_t resource_type,
                                     const char *name, int32_t operation);
/** Replace the default authorizer (allow everything). */
void fakehost_set_authorizer(fakehost_t *fh, fakehost_authz_fn fn, void *arg);

/* --- end-of-test check ---------------------------------------------------------------------- */
/** 0 when the plugin left nothing behind: no live allocations, threads, latches, timers,
 *  metrics, RPC registrations, listeners, partition handles, undelivered completions or pending
 *  tokens. Otherwise -1 with a list of leftovers in errbuf. */
int fakehost_check_clean(const fakehost_t *fh, char *errbuf, size_t errbuf_size);

/* --- record batch helpers ------------------------------------------------------------------ */
/** CRC32C (Castagnoli) as record batches use it. */
uint32_t fakehost_crc32c(uint32_t crc, const uint8_t *buf, size_t len);
/** Build one magic-2 batch of nrecords small records at base_offset with leader epoch epoch
 *  and producer (pid, pepoch; -1/-1 for none), transactional or not, into a malloc'd buffer.
 *  Returns 0 or -1. */
int fakehost_batch_build(int64_t base_offset, int32_t epoch, int64_t pid, int16_t pepoch,
                         bool transactional, int32_t nrecords, uint8_t **out, size_t *out_len);

#endif /* FAKEHOST_H */
