/*
 * kr_util.h -- helpers shared by the robustness tools (tests/robust): clocks, a seeded PRNG,
 * loopback sockets with deadlines (poll, never sleep), size-prefixed request framing with the
 * generated codec, and running a kbroker child process (config, readiness line, SIGTERM, exit
 * status through a pidfd).
 *
 * @thread any; a kr_broker_t belongs to one thread.
 */
#ifndef KR_UTIL_H
#define KR_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kp_msgs.h"

/* ------------------------------------------------------------------ time and randomness */

int64_t kr_now_ms(void);
int64_t kr_now_us(void);

/** splitmix64 step: the next pseudo-random value of the stream @p s. */
uint64_t kr_rand(uint64_t *s);
/** Uniform in [0, n) (n > 0). */
uint32_t kr_rand_below(uint64_t *s, uint32_t n);

/* ------------------------------------------------------------------ sockets */

/** Connect to @p host:@p port within @p timeout_ms; the socket is non-blocking with
 *  TCP_NODELAY. Returns the fd or -1. */
int kr_connect(const char *host, int port, int timeout_ms);

/** Close @p fd with a TCP reset (SO_LINGER 0) instead of a FIN. */
void kr_close_rst(int fd);

/** Send all of @p p before @p deadline_ms (absolute, kr_now_ms() clock).
 *  0, -1 (error, peer gone) or -2 (deadline). */
int kr_send_all(int fd, const void *p, size_t len, int64_t deadline_ms);

/** Outcome of waiting for a response. */
typedef enum kr_rx_e {
    KR_RX_FRAME = 0,    /**< a whole frame arrived */
    KR_RX_CLOSED = -1,  /**< the peer closed or reset the connection */
    KR_RX_TIMEOUT = -2, /**< nothing complete before the deadline */
    KR_RX_BAD = -3,     /**< a size prefix that is negative or above 256 MiB */
} kr_rx_t;

/** Read one size-prefixed frame before @p deadline_ms into a malloc'd buffer (*bufp, *lenp:
 *  the frame after the size prefix). */
kr_rx_t kr_recv_frame(int fd, uint8_t **bufp, size_t *lenp, int64_t deadline_ms);

/** Wait until the peer closes (true) or @p deadline_ms passes (false), discarding data. */
bool kr_wait_closed(int fd, int64_t deadline_ms);

/* ------------------------------------------------------------------ requests */

/** Start a size-prefixed request frame in @p wr: size placeholder and the request header of
 *  the version the codec gives for (@p key, @p ver) (v1 if the key is unknown). Returns the
 *  position to pass to kr_req_end(). */
size_t kr_req_begin(kp_writer_t *wr, int16_t key, int16_t ver, int32_t corr, const char *cid);

/** Patch the size prefix of the frame started at @p at. */
void kr_req_end(kp_writer_t *wr, size_t at);

/** Whole request: header + @p msg encoded with descriptor @p d at @p ver. 0 or kp_err_t. */
int kr_req_build(kp_writer_t *wr, int16_t key, int16_t ver, int32_t corr, const char *cid,
                 const kp_msg_desc_t *d, const void *msg);

/** Split a response frame: checks the correlation id and skips the response header of the
 *  version the codec gives for (@p key, @p ver). Returns 0 and a reader over the body, or -1
 *  (too short, wrong correlation id, bad header tags). */
int kr_resp_open(const uint8_t *buf, size_t len, int16_t key, int16_t ver, int32_t corr,
                 kp_reader_t *body);

/** Decode a whole response body into @p msg (all bytes must be consumed). 0 or -1. */
int kr_resp_decode(const uint8_t *buf, size_t len, int16_t key, int16_t ver, int32_t corr,
                   kp_arena_t *ar, void *msg);

/* ------------------------------------------------------------------ a kbroker child */

typedef struct kr_broker_s {
    pid_t pid;
    int pidfd;
    int port;
    char dir[512];         /**< work directory (config, data, logs) */
    char stderr_log[600];  /**< the broker's stderr */
    char asan_prefix[600]; /**< ASan/UBSan log_path prefix (files <prefix>.<pid>) */
} kr_broker_t;

/**
 * Write @p dir/server.properties (node.id 1, an ephemeral loopback listener, log.dirs
 * @p dir/data, then @p extra lines "key=value"), start @p bin with it (stdout to a pipe,
 * stderr to @p dir/broker.stderr), sanitizer options that log to @p dir/sanitizer.* and
 * detect leaks, and wait for the readiness line within @p timeout_ms.
 * @return 0, or -1 with a message in @p err.
 */
int kr_broker_start(kr_broker_t *b, const char *bin, const char *dir, const char *const *extra,
                    int timeout_ms, char *err, size_t errlen);

/** True while the child has not exited. */
bool kr_broker_alive(kr_broker_t *b);

/** Wait up to @p timeout_ms for the child to exit; returns its exit code, 128+signal, or -1
 *  if it is still running. Reaps it. */
int kr_broker_wait(kr_broker_t *b, int timeout_ms);

/** Peak and current RSS of the child in KiB (VmHWM, VmRSS), or -1. */
void kr_broker_rss(const kr_broker_t *b, long *hwm_kb, long *rss_kb);

/**
 * Sanitizer verdict after the child exited: counts report files <asan_prefix>.* and lines in
 * the stderr log that announce a sanitizer report ("ERROR: AddressSanitizer",
 * "ERROR: LeakSanitizer", "runtime error:", "WARNING: ThreadSanitizer"). Prints the first
 * lines of each finding to stderr. Returns the number of findings.
 */
int kr_broker_sanitizer_findings(const kr_broker_t *b);

/** Read a whole file (malloc'd, NUL-terminated; NULL on error). */
char *kr_read_file(const char *path, size_t *lenp);

#endif /* KR_UTIL_H */
