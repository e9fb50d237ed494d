/*
 * kb_netrec.c -- the request recorder (kb_netrec.h).
 */
#include "kb_netrec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "kb_log.h"

char *kb_netrec_dir_from_env(uint64_t *limit)
{
    const char *dir = getenv("KM_RECORD_DIR");
    const char *max = getenv("KM_RECORD_MAX_BYTES");
    *limit = KB_NETREC_DEFAULT_LIMIT;
    if (max && *max) {
        char *end;
        unsigned long long v = strtoull(max, &end, 10);
        if (*end == '\0' && v >= KB_NETREC_MAGIC_LEN)
            *limit = v;
        else
            kb_log_warn("net", "KM_RECORD_MAX_BYTES '%s' is not a size; using %llu", max,
                        (unsigned long long)*limit);
    }
    return dir && *dir ? strdup(dir) : NULL;
}

void kb_netrec_init(kb_netrec_t *rec)
{
    rec->fd = -1;
    rec->bytes = 0;
    rec->done = false;
}

static void kb_netrec_be16(uint8_t *p, int16_t v)
{
    p[0] = (uint8_t)((uint16_t)v >> 8);
    p[1] = (uint8_t)v;
}

static void kb_netrec_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void kb_netrec_be64(uint8_t *p, int64_t v)
{
    kb_netrec_be32(p, (uint32_t)((uint64_t)v >> 32));
    kb_netrec_be32(p + 4, (uint32_t)v);
}

static int64_t kb_netrec_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* writev all of @p iov; false on a short or failed write. */
static bool kb_netrec_write(kb_netrec_t *rec, struct iovec *iov, int cnt, size_t total)
{
    ssize_t n;
    do
        n = writev(rec->fd, iov, cnt);
    while (n < 0 && errno == EINTR);
    if (n < 0 || (size_t)n != total)
        return false;
    rec->bytes += total;
    return true;
}

void kb_netrec_frame(kb_netrec_t *rec, const char *dir, uint64_t limit, uint64_t conn_id,
                     const uint8_t *frame, size_t len)
{
    uint8_t hdr[KB_NETREC_REC_HDR_LEN];
    struct iovec iov[2];

    if (rec->done)
        return;
    if (rec->fd < 0) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/kbroker-%d-conn-%llu.rec", dir, (int)getpid(),
                 (unsigned long long)conn_id);
        rec->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
        if (rec->fd < 0) {
            kb_log_warn("net", "request recorder: cannot create %s: %s", path, strerror(errno));
            rec->done = true;
            return;
        }
        iov[0].iov_base = (void *)(uintptr_t)KB_NETREC_MAGIC;
        iov[0].iov_len = KB_NETREC_MAGIC_LEN;
        if (!kb_netrec_write(rec, iov, 1, KB_NETREC_MAGIC_LEN))
            goto fail;
    }
    if (len > INT32_MAX || rec->bytes + KB_NETREC_REC_HDR_LEN + len > limit) {
        /* the end marker may go past the limit by its 16 bytes */
        kb_netrec_be16(hdr, KB_NETREC_END);
        kb_netrec_be16(hdr + 2, 0);
        kb_netrec_be32(hdr + 4, 0);
        kb_netrec_be64(hdr + 8, kb_netrec_now_ms());
        iov[0].iov_base = hdr;
        iov[0].iov_len = sizeof(hdr);
        kb_netrec_write(rec, iov, 1, sizeof(hdr));
        kb_log_info("net",
                    "request recorder: connection %llu reached %llu bytes; not recording "
                    "it any further",
                    (unsigned long long)conn_id, (unsigned long long)limit);
        rec->done = true;
        return;
    }
    kb_netrec_be16(hdr, len >= 4 ? (int16_t)((frame[0] << 8) | frame[1]) : -1);
    kb_netrec_be16(hdr + 2, len >= 4 ? (int16_t)((frame[2] << 8) | frame[3]) : -1);
    kb_netrec_be32(hdr + 4, (uint32_t)len);
    kb_netrec_be64(hdr + 8, kb_netrec_now_ms());
    iov[0].iov_base = hdr;
    iov[0].iov_len = sizeof(hdr);
    iov[1].iov_base = (void *)(uintptr_t)frame;
    iov[1].iov_len = len;
    if (kb_netrec_write(rec, iov, len ? 2 : 1, sizeof(hdr) + len))
        return;
fail:
    kb_log_warn("net", "request recorder: write failed for connection %llu: %s",
                (unsigned long long)conn_id, strerror(errno));
    rec->done = true;
}

void kb_netrec_close(kb_netrec_t *rec)
{
    if (rec->fd >= 0)
        close(rec->fd);
    rec->fd = -1;
    rec->done = true;
}
