/*
 * kbt_client.h -- a minimal blocking Kafka-protocol client for the broker tests: connect,
 * send size-prefixed requests built with the generated codec, read responses with deadlines
 * (poll, never sleep).
 */
#ifndef KBT_CLIENT_H
#define KBT_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kp_msgs.h"

/** Connect to 127.0.0.1:@p port (blocking). fd or -1. */
int kbt_connect(int port);

/** Write all of @p p. 0 or -1. */
int kbt_send_all(int fd, const void *p, size_t len);

/** Append a full request frame (size, header v1/v2 as the codec says, body) for ApiVersions
 *  version @p ver with @p corr to @p wr. Returns 0 or -1. */
int kbt_build_apiversions(kp_writer_t *wr, int16_t ver, int32_t corr, const char *client_id,
                          const char *sw_name, const char *sw_version);

/** Read one response frame within @p timeout_ms into a malloc'd buffer (*bufp, *lenp = body
 *  after the size prefix). Returns 0, -1 on error/EOF, -2 on timeout. */
int kbt_recv_frame(int fd, uint8_t **bufp, size_t *lenp, int timeout_ms);

/** True if the peer closes the connection (EOF or reset) within @p timeout_ms, discarding
 *  any data that arrives first. */
int kbt_wait_closed(int fd, int timeout_ms);

/** Decode an ApiVersions response frame (header v0 + body of @p ver) into @p out (arrays in
 *  @p ar). Stores the correlation id in *corr. 0 or -1. */
int kbt_parse_apiversions(const uint8_t *buf, size_t len, int16_t ver, kp_arena_t *ar,
                          int32_t *corr, kp_ApiVersionsResponse_t *out);

/** Wait (a pidfd, no sleeps) up to @p timeout_ms for the child @p pid to exit and reap it.
 *  Returns its exit status, 128 + the signal that ended it, or -1 (not within the time). */
int kbt_wait_exit(pid_t pid, int timeout_ms);

#endif /* KBT_CLIENT_H */
