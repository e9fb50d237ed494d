/*
 * kb_netrec.h -- the request recorder: when KM_RECORD_DIR is set in kbroker's environment,
 * every request frame a connection receives is appended to one file per connection in that
 * directory, for tests to decode afterwards (tests/robust/kb_replay_check). Test aid only; it
 * is off unless the variable is set. docs/broker.md, "Request recorder".
 *
 * File <dir>/kbroker-<pid>-conn-<conn id>.rec, big-endian:
 *   magic   8 bytes  "KBREC" 0 0 2 (format version 2)
 *   records, one per received frame:
 *     api_key     int16   from the frame (-1 if the frame is shorter than 4 bytes)
 *     api_version int16   from the frame (-1 likewise)
 *     length      int32   bytes of the frame
 *     time_ms     int64   wall clock (ms since the epoch) when the frame was complete, so that
 *                         frames can be attributed to the test that sent them
 *     frame       length bytes: the request exactly as received after its size prefix
 *                 (request header + body), before any validation
 *   a record with api_key KB_NETREC_END (-2) and length 0 closes a file whose size limit
 *   (KM_RECORD_MAX_BYTES, default 64 MiB) was reached; later frames are not recorded.
 * Frames refused by their size prefix alone (negative or above socket.request.max.bytes) are
 * never read, so never recorded.
 *
 * @thread the network thread owning the connection (kb_netrec_t is per connection)
 */
#ifndef KB_NETREC_H
#define KB_NETREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KB_NETREC_MAGIC         "KBREC\0\0\2"
#define KB_NETREC_MAGIC_LEN     8
#define KB_NETREC_REC_HDR_LEN   16 /**< api_key + api_version + length + time_ms */
#define KB_NETREC_END           (-2)
#define KB_NETREC_DEFAULT_LIMIT (64u * 1024 * 1024)

/** Recording state of one connection. */
typedef struct kb_netrec_s {
    int fd;         /**< -1 until the first frame */
    uint64_t bytes; /**< written to the file so far */
    bool done;      /**< limit reached or an error: record nothing more */
} kb_netrec_t;

/** The recording directory from KM_RECORD_DIR (malloc'd; NULL when unset or empty) and the
 *  per-file limit from KM_RECORD_MAX_BYTES (default KB_NETREC_DEFAULT_LIMIT). */
char *kb_netrec_dir_from_env(uint64_t *limit);

void kb_netrec_init(kb_netrec_t *rec);

/** Append @p frame (@p len bytes after the size prefix) for connection @p conn_id; opens the
 *  file at the first frame. Failures are logged once and stop recording the connection. */
void kb_netrec_frame(kb_netrec_t *rec, const char *dir, uint64_t limit, uint64_t conn_id,
                     const uint8_t *frame, size_t len);

/** Close the connection's file, if any. */
void kb_netrec_close(kb_netrec_t *rec);

#endif /* KB_NETREC_H */
