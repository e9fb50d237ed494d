/*
 * kb_segment.c -- one log segment: the .log file plus its offset index, time index and
 * transaction index, held in memory and written through to their files.
 *
 * @thread a segment's mutable fields are changed only by the log's writer holding the rwlock's
 * write side (kb_log.c); files are read with pread by anyone holding a reference.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kb_log_int.h"

#define KB_SCAN_BUF       (1024 * 1024)
#define KB_MAX_BATCH_SIZE ((int64_t)INT32_MAX)

static uint64_t kb_get_be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    size_t i;
    for (i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

static void kb_put_be(uint8_t *p, uint64_t v, size_t n)
{
    size_t i;
    for (i = n; i > 0; i--) {
        p[i - 1] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
}

int kb_pread_full(int fd, void *buf, size_t n, int64_t pos)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)pos);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return KB_STO_IO;
        }
        if (r == 0)
            return KB_STO_IO;
        p += r;
        n -= (size_t)r;
        pos += r;
    }
    return 0;
}

int kb_pwrite_full(int fd, const void *buf, size_t n, int64_t pos)
{
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = pwrite(fd, p, n, (off_t)pos);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return KB_STO_IO;
        }
        p += r;
        n -= (size_t)r;
        pos += r;
    }
    return 0;
}

int kb_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    int r;
    if (fd < 0)
        return KB_STO_IO;
    r = fsync(fd);
    close(fd);
    return r ? KB_STO_IO : 0;
}

void kb_seg_path(char *buf, size_t sz, const char *dir, int64_t base, const char *ext)
{
    snprintf(buf, sz, "%s/%020" PRId64 "%s", dir, base, ext);
}

static kb_seg_t *kb_seg_alloc(const char *dir, int64_t base)
{
    kb_seg_t *seg = calloc(1, sizeof(*seg));
    char p[4096];
    if (!seg)
        return NULL;
    kb_seg_path(p, sizeof(p), dir, base, "");
    seg->path = strdup(p);
    if (!seg->path) {
        free(seg);
        return NULL;
    }
    atomic_init(&seg->refcnt, 1);
    seg->base = base;
    seg->fd = -1;
    seg->next_offset = base;
    seg->max_ts = -1;
    seg->max_ts_offset = base;
    seg->roll_ts = -1;
    return seg;
}

static void kb_seg_ext(char *buf, size_t sz, const kb_seg_t *seg, const char *ext)
{
    snprintf(buf, sz, "%s%s%s", seg->path, ext, seg->sfx);
}

kb_seg_t *kb_seg_create_sfx(const char *dir, int64_t base, const char *sfx, int *err)
{
    kb_seg_t *seg = kb_seg_alloc(dir, base);
    char p[4200];
    if (!seg) {
        *err = KB_STO_NOMEM;
        return NULL;
    }
    snprintf(seg->sfx, sizeof(seg->sfx), "%s", sfx);
    kb_seg_ext(p, sizeof(p), seg, ".log");
    seg->fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (seg->fd < 0) {
        *err = KB_STO_IO;
        kb_seg_unref(seg);
        return NULL;
    }
    return seg;
}

int kb_seg_rename_sfx(kb_seg_t *seg, const char *sfx)
{
    static const char *const exts[] = {".index", ".timeindex", ".txnindex", ".log"};
    char from[4200], to[4200];
    size_t i;
    /* the .log goes last: its presence under the new suffix is the commit point */
    for (i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
        snprintf(from, sizeof(from), "%s%s%s", seg->path, exts[i], seg->sfx);
        snprintf(to, sizeof(to), "%s%s%s", seg->path, exts[i], sfx);
        if (rename(from, to) && errno != ENOENT)
            return KB_STO_IO;
    }
    snprintf(seg->sfx, sizeof(seg->sfx), "%s", sfx);
    return 0;
}

kb_seg_t *kb_seg_create(const char *dir, int64_t base, int64_t now_ms, int *err)
{
    kb_seg_t *seg = kb_seg_alloc(dir, base);
    char p[4200];
    if (!seg) {
        *err = KB_STO_NOMEM;
        return NULL;
    }
    kb_seg_ext(p, sizeof(p), seg, ".log");
    seg->fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (seg->fd < 0) {
        *err = KB_STO_IO;
        kb_seg_unref(seg);
        return NULL;
    }
    kb_seg_ext(p, sizeof(p), seg, ".index");
    unlink(p);
    kb_seg_ext(p, sizeof(p), seg, ".timeindex");
    unlink(p);
    kb_seg_ext(p, sizeof(p), seg, ".txnindex");
    unlink(p);
    seg->created_ms = now_ms;
    return seg;
}

kb_seg_t *kb_seg_open(const char *dir, int64_t base, int *err)
{
    kb_seg_t *seg = kb_seg_alloc(dir, base);
    char p[4200];
    struct stat st;
    if (!seg) {
        *err = KB_STO_NOMEM;
        return NULL;
    }
    kb_seg_ext(p, sizeof(p), seg, ".log");
    seg->fd = open(p, O_RDWR | O_CLOEXEC);
    if (seg->fd < 0 || fstat(seg->fd, &st)) {
        *err = KB_STO_IO;
        kb_seg_unref(seg);
        return NULL;
    }
    seg->size = st.st_size;
    seg->flushed_size = st.st_size;
    seg->created_ms = (int64_t)st.st_mtime * 1000;
    return seg;
}

void kb_seg_ref(kb_seg_t *seg)
{
    atomic_fetch_add(&seg->refcnt, 1);
}

void kb_seg_unref(kb_seg_t *seg)
{
    if (!seg || atomic_fetch_sub(&seg->refcnt, 1) != 1)
        return;
    if (seg->fd >= 0)
        close(seg->fd);
    free(seg->idx);
    free(seg->tidx);
    free(seg->txns);
    free(seg->path);
    free(seg);
}

void kb_seg_delete_files(kb_seg_t *seg)
{
    static const char *const exts[] = {".log", ".index", ".timeindex", ".txnindex"};
    char p[4200];
    size_t i;
    for (i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
        kb_seg_ext(p, sizeof(p), seg, exts[i]);
        unlink(p);
    }
    seg->deleted = 1;
}

/* ---------- in-memory index maintenance ---------- */

static int kb_grow(void **v, size_t *cap, size_t need, size_t elsz)
{
    size_t ncap;
    void *nv;
    if (need <= *cap)
        return 0;
    ncap = *cap ? *cap * 2 : 64;
    while (ncap < need)
        ncap *= 2;
    nv = realloc(*v, ncap * elsz);
    if (!nv)
        return KB_STO_NOMEM;
    *v = nv;
    *cap = ncap;
    return 0;
}

static void kb_seg_idx_add(kb_seg_t *seg, int64_t offset, int64_t pos)
{
    void *v = seg->idx;
    if (kb_grow(&v, &seg->idx_cap, seg->idx_cnt + 1, sizeof(*seg->idx)))
        return; /* an index entry is an optimisation; lookups scan further without it */
    seg->idx = v;
    seg->idx[seg->idx_cnt].rel = (uint32_t)(offset - seg->base);
    seg->idx[seg->idx_cnt].pos = (uint32_t)pos;
    seg->idx_cnt++;
}

static int kb_seg_probe_cb(void *opaque, kb_seg_t *seg, const kp_batch_t *b, int64_t pos)
{
    (void)seg;
    (void)pos;
    *(int64_t *)opaque = kp_batch_hdr_last_offset(&b->hdr) + 1;
    return 0;
}

int kb_seg_probe_end(const char *path, int64_t base, int64_t *next_offset)
{
    kb_seg_t tmp;
    int64_t vend;
    memset(&tmp, 0, sizeof(tmp));
    tmp.base = base;
    tmp.next_offset = base;
    tmp.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (tmp.fd < 0)
        return KB_STO_IO;
    *next_offset = base;
    kb_seg_scan(&tmp, 0, base, 0, kb_seg_probe_cb, next_offset, &vend);
    close(tmp.fd);
    return 0;
}

static void kb_seg_tidx_maybe_add(kb_seg_t *seg)
{
    void *v = seg->tidx;
    if (seg->max_ts < 0)
        return;
    if (seg->tidx_cnt && seg->tidx[seg->tidx_cnt - 1].ts >= seg->max_ts)
        return;
    if (kb_grow(&v, &seg->tidx_cap, seg->tidx_cnt + 1, sizeof(*seg->tidx)))
        return;
    seg->tidx = v;
    seg->tidx[seg->tidx_cnt].ts = seg->max_ts;
    seg->tidx[seg->tidx_cnt].rel = (uint32_t)(seg->max_ts_offset - seg->base);
    seg->tidx_cnt++;
}

void kb_seg_tidx_final(kb_seg_t *seg)
{
    kb_seg_tidx_maybe_add(seg);
}

void kb_seg_track_batch(kb_seg_t *seg, const kp_batch_hdr_t *h, int64_t pos, int64_t size,
                        int32_t index_interval)
{
    int64_t last = kp_batch_hdr_last_offset(h);
    if (h->maxTimestamp > seg->max_ts) {
        seg->max_ts = h->maxTimestamp;
        seg->max_ts_offset = last;
    }
    if (seg->roll_ts < 0 && seg->size == 0)
        seg->roll_ts = h->maxTimestamp;
    /* Kafka indexes a batch once more than index.interval.bytes were written since the last
     * entry; we also index the first batch so lookups never scan from 0 needlessly. */
    if (seg->idx_cnt == 0 || seg->bytes_since_idx > index_interval) {
        if (h->baseOffset - seg->base <= UINT32_MAX && pos <= UINT32_MAX) {
            kb_seg_idx_add(seg, h->baseOffset, pos);
            kb_seg_tidx_maybe_add(seg);
        }
        seg->bytes_since_idx = 0;
    }
    seg->bytes_since_idx += size;
    seg->size = pos + size;
    seg->next_offset = last + 1;
}

int64_t kb_seg_lookup_pos(const kb_seg_t *seg, int64_t offset)
{
    size_t lo = 0, hi = seg->idx_cnt;
    int64_t rel = offset - seg->base;
    if (rel < 0 || seg->idx_cnt == 0 || seg->idx[0].rel > rel)
        return 0;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (seg->idx[mid].rel <= rel)
            lo = mid;
        else
            hi = mid;
    }
    return seg->idx[lo].pos;
}

int64_t kb_seg_lookup_ts_pos(const kb_seg_t *seg, int64_t ts)
{
    size_t lo = 0, hi = seg->tidx_cnt;
    if (seg->tidx_cnt == 0 || seg->tidx[0].ts > ts)
        return 0;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (seg->tidx[mid].ts <= ts)
            lo = mid;
        else
            hi = mid;
    }
    return kb_seg_lookup_pos(seg, seg->base + seg->tidx[lo].rel);
}

int kb_seg_find(kb_seg_t *seg, int64_t offset, int64_t limit, int64_t *pos, kp_batch_hdr_t *h)
{
    return kb_seg_find_from(seg, kb_seg_lookup_pos(seg, offset), offset, limit, pos, h);
}

int kb_seg_find_from(kb_seg_t *seg, int64_t p, int64_t offset, int64_t limit, int64_t *pos,
                     kp_batch_hdr_t *h)
{
    uint8_t hb[KP_BATCH_HEADER_SIZE];
    while (p + KP_BATCH_HEADER_SIZE <= limit) {
        int64_t sz;
        if (kb_pread_full(seg->fd, hb, sizeof(hb), p))
            return KB_STO_IO;
        kp_batch_hdr_decode(hb, sizeof(hb), h);
        sz = (int64_t)h->batchLength + KP_BATCH_LOG_OVERHEAD;
        if (h->batchLength < KP_BATCH_MIN_LENGTH || p + sz > limit)
            return KB_STO_CORRUPT_LOG;
        if (kp_batch_hdr_last_offset(h) >= offset) {
            *pos = p;
            return 1;
        }
        p += sz;
    }
    *pos = limit;
    return 0;
}

/* ---------- scanning ---------- */

typedef struct kb_rbuf_s {
    int fd;
    uint8_t *buf;
    size_t cap;
    int64_t at; /* file position of buf[0] */
    size_t len; /* valid bytes */
} kb_rbuf_t;

/* Pointer to [pos, pos+n) of the file, reading as needed; NULL on short read / error. */
static const uint8_t *kb_rbuf_get(kb_rbuf_t *rb, int64_t pos, size_t n, int64_t file_size)
{
    size_t want;
    ssize_t r;
    if (pos >= rb->at && pos + (int64_t)n <= rb->at + (int64_t)rb->len)
        return rb->buf + (pos - rb->at);
    if (pos + (int64_t)n > file_size)
        return NULL;
    want = n > KB_SCAN_BUF ? n : KB_SCAN_BUF;
    if ((int64_t)want > file_size - pos)
        want = (size_t)(file_size - pos);
    if (want > rb->cap) {
        uint8_t *nb = realloc(rb->buf, want);
        if (!nb)
            return NULL;
        rb->buf = nb;
        rb->cap = want;
    }
    rb->at = pos;
    rb->len = 0;
    while (rb->len < want) {
        r = pread(rb->fd, rb->buf + rb->len, want - rb->len, (off_t)(pos + (int64_t)rb->len));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        rb->len += (size_t)r;
    }
    return rb->len >= n ? rb->buf : NULL;
}

int kb_seg_scan(kb_seg_t *seg, int64_t from_pos, int64_t min_offset, int check_crc, kb_scan_cb cb,
                void *opaque, int64_t *valid_end)
{
    kb_rbuf_t rb = {seg->fd, NULL, 0, 0, 0};
    struct stat st;
    int64_t pos = from_pos, fsize;
    int rc = 0;
    if (fstat(seg->fd, &st))
        return KB_STO_IO;
    fsize = st.st_size;
    while (pos < fsize) {
        const uint8_t *p;
        kp_batch_t b;
        int64_t blen, sz;
        p = kb_rbuf_get(&rb, pos, KP_BATCH_LOG_OVERHEAD, fsize);
        if (!p) {
            rc = 1;
            break;
        }
        blen = (int32_t)kb_get_be(p + KP_BATCH_LENGTH_OFFSET, 4);
        sz = blen + KP_BATCH_LOG_OVERHEAD;
        if (blen < KP_BATCH_MIN_LENGTH || sz > fsize - pos || sz > KB_MAX_BATCH_SIZE) {
            rc = 1;
            break;
        }
        p = kb_rbuf_get(&rb, pos, (size_t)sz, fsize);
        if (!p) {
            rc = 1;
            break;
        }
        if (kp_batch_parse(p, (size_t)sz, 0, check_crc ? 0 : KP_BATCH_F_SKIP_CRC, &b, NULL) ||
            b.hdr.baseOffset < min_offset || b.hdr.lastOffsetDelta < 0 ||
            b.hdr.baseOffset - seg->base > UINT32_MAX ||
            kp_batch_hdr_last_offset(&b.hdr) - seg->base > UINT32_MAX) {
            rc = 1;
            break;
        }
        if (cb && cb(opaque, seg, &b, pos) < 0) {
            rc = 1;
            break;
        }
        min_offset = kp_batch_hdr_last_offset(&b.hdr) + 1;
        pos += sz;
    }
    free(rb.buf);
    *valid_end = pos;
    return rc;
}

typedef struct kb_recover_ctx_s {
    int32_t interval;
    kb_scan_cb cb;
    void *opaque;
} kb_recover_ctx_t;

static int kb_seg_recover_cb(void *opaque, kb_seg_t *seg, const kp_batch_t *b, int64_t pos)
{
    kb_recover_ctx_t *rc = opaque;
    if (rc->cb && rc->cb(rc->opaque, seg, b, pos) < 0)
        return -1;
    kb_seg_track_batch(seg, &b->hdr, pos, (int64_t)b->size, rc->interval);
    return 0;
}

static void kb_seg_reset_mem(kb_seg_t *seg)
{
    seg->idx_cnt = 0;
    seg->tidx_cnt = 0;
    seg->txn_cnt = 0;
    seg->size = 0;
    seg->next_offset = seg->base;
    seg->max_ts = -1;
    seg->max_ts_offset = seg->base;
    seg->roll_ts = -1;
    seg->bytes_since_idx = 0;
}

int kb_seg_recover(kb_seg_t *seg, int32_t index_interval, kb_scan_cb cb, void *opaque)
{
    kb_recover_ctx_t ctx = {index_interval, cb, opaque};
    struct stat st;
    int64_t end;
    int rc;
    kb_seg_reset_mem(seg);
    rc = kb_seg_scan(seg, 0, seg->base, 1, kb_seg_recover_cb, &ctx, &end);
    if (rc < 0)
        return rc;
    if (fstat(seg->fd, &st))
        return KB_STO_IO;
    if (st.st_size != end) {
        if (ftruncate(seg->fd, (off_t)end))
            return KB_STO_IO;
        rc = 1;
    }
    seg->size = end;
    if (seg->flushed_size > end)
        seg->flushed_size = end;
    kb_seg_tidx_maybe_add(seg);
    seg->idx_flushed = seg->tidx_flushed = seg->txn_flushed = 0;
    {
        int w = kb_seg_write_indexes(seg, 1);
        if (w)
            return w;
    }
    return rc;
}

int kb_seg_truncate(kb_seg_t *seg, int64_t pos, int64_t offset, int32_t index_interval)
{
    size_t i, n;
    kb_aborted_txn_t *keep = seg->txns;
    size_t nkeep = 0;
    int rc;
    if (ftruncate(seg->fd, (off_t)pos))
        return KB_STO_IO;
    if (seg->flushed_size > pos)
        seg->flushed_size = pos;
    /* Keep the aborted-txn entries below the cut, then rebuild the rest from the data. */
    n = seg->txn_cnt;
    for (i = 0; i < n; i++)
        if (seg->txns[i].last_offset < offset)
            keep[nkeep++] = seg->txns[i];
    rc = kb_seg_recover(seg, index_interval, NULL, NULL);
    seg->txn_cnt = nkeep;
    if (rc < 0)
        return rc;
    return kb_seg_write_indexes(seg, 1);
}

/* ---------- index files ---------- */

static int kb_seg_write_file(const kb_seg_t *seg, const char *ext, const uint8_t *data, size_t from,
                             size_t total, size_t entsz, int rewrite)
{
    char p[4200];
    int fd, rc = 0;
    kb_seg_ext(p, sizeof(p), seg, ext);
    fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | (rewrite ? O_TRUNC : 0), 0644);
    if (fd < 0)
        return KB_STO_IO;
    if (rewrite)
        from = 0;
    if (total > from)
        rc = kb_pwrite_full(fd, data + from * entsz, (total - from) * entsz,
                            (int64_t)(from * entsz));
    if (!rc && ftruncate(fd, (off_t)(total * entsz)))
        rc = KB_STO_IO;
    close(fd);
    return rc;
}

int kb_seg_write_indexes(kb_seg_t *seg, int rewrite)
{
    size_t i, n;
    uint8_t *buf;
    int rc = 0;
    n = seg->idx_cnt > seg->tidx_cnt ? seg->idx_cnt : seg->tidx_cnt;
    if (seg->txn_cnt > n)
        n = seg->txn_cnt;
    buf = malloc(n * KB_TXN_ENT_SIZE + 1);
    if (!buf)
        return KB_STO_NOMEM;
    if (rewrite || seg->idx_flushed != seg->idx_cnt) {
        for (i = 0; i < seg->idx_cnt; i++) {
            kb_put_be(buf + i * 8, seg->idx[i].rel, 4);
            kb_put_be(buf + i * 8 + 4, seg->idx[i].pos, 4);
        }
        if (seg->idx_flushed > seg->idx_cnt)
            seg->idx_flushed = seg->idx_cnt;
        rc = kb_seg_write_file(seg, ".index", buf, seg->idx_flushed, seg->idx_cnt, 8, rewrite);
        if (!rc)
            seg->idx_flushed = seg->idx_cnt;
    }
    if (!rc && (rewrite || seg->tidx_flushed != seg->tidx_cnt)) {
        for (i = 0; i < seg->tidx_cnt; i++) {
            kb_put_be(buf + i * 12, (uint64_t)seg->tidx[i].ts, 8);
            kb_put_be(buf + i * 12 + 8, seg->tidx[i].rel, 4);
        }
        if (seg->tidx_flushed > seg->tidx_cnt)
            seg->tidx_flushed = seg->tidx_cnt;
        rc = kb_seg_write_file(seg, ".timeindex", buf, seg->tidx_flushed, seg->tidx_cnt, 12,
                               rewrite);
        if (!rc)
            seg->tidx_flushed = seg->tidx_cnt;
    }
    if (!rc && (rewrite || seg->txn_flushed != seg->txn_cnt)) {
        for (i = 0; i < seg->txn_cnt; i++) {
            uint8_t *e = buf + i * KB_TXN_ENT_SIZE;
            kb_put_be(e, 0, 2);
            kb_put_be(e + 2, (uint64_t)seg->txns[i].producer_id, 8);
            kb_put_be(e + 10, (uint64_t)seg->txns[i].first_offset, 8);
            kb_put_be(e + 18, (uint64_t)seg->txns[i].last_offset, 8);
            kb_put_be(e + 26, (uint64_t)seg->txns[i].lso, 8);
        }
        if (seg->txn_flushed > seg->txn_cnt)
            seg->txn_flushed = seg->txn_cnt;
        rc = kb_seg_write_file(seg, ".txnindex", buf, seg->txn_flushed, seg->txn_cnt,
                               KB_TXN_ENT_SIZE, rewrite);
        if (!rc)
            seg->txn_flushed = seg->txn_cnt;
    }
    free(buf);
    return rc;
}

static int kb_seg_fsync_file(const kb_seg_t *seg, const char *ext)
{
    char p[4200];
    int fd, rc;
    kb_seg_ext(p, sizeof(p), seg, ext);
    fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : KB_STO_IO;
    rc = fsync(fd) ? KB_STO_IO : 0;
    close(fd);
    return rc;
}

int kb_seg_fsync(kb_seg_t *seg)
{
    int rc = kb_seg_write_indexes(seg, 0);
    if (rc)
        return rc;
    if (fsync(seg->fd))
        return KB_STO_IO;
    if (kb_seg_fsync_file(seg, ".index") || kb_seg_fsync_file(seg, ".timeindex") ||
        kb_seg_fsync_file(seg, ".txnindex"))
        return KB_STO_IO;
    seg->flushed_size = seg->size;
    return 0;
}

int kb_seg_add_txn(kb_seg_t *seg, const kb_aborted_txn_t *t)
{
    void *v = seg->txns;
    if (kb_grow(&v, &seg->txn_cap, seg->txn_cnt + 1, sizeof(*seg->txns)))
        return KB_STO_NOMEM;
    seg->txns = v;
    seg->txns[seg->txn_cnt++] = *t;
    return 0;
}

/* ---------- loading indexes (never trusted: every entry bounds-checked) ---------- */

static uint8_t *kb_read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    uint8_t *buf;
    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) || st.st_size < 0 || st.st_size > (off_t)1 << 31) {
        close(fd);
        return NULL;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf || (st.st_size && kb_pread_full(fd, buf, (size_t)st.st_size, 0))) {
        free(buf);
        close(fd);
        return NULL;
    }
    close(fd);
    *len = (size_t)st.st_size;
    return buf;
}

int kb_seg_load_indexes(kb_seg_t *seg, int32_t max_idx_entries)
{
    char p[4200];
    uint8_t *buf;
    size_t len, i, n;
    kb_seg_reset_mem(seg);
    seg->size = 0;
    /* offset index */
    kb_seg_ext(p, sizeof(p), seg, ".index");
    buf = kb_read_file(p, &len);
    if (!buf || len % 8 || len / 8 > (size_t)max_idx_entries + 1)
        goto bad;
    n = len / 8;
    if (kb_grow((void **)&seg->idx, &seg->idx_cap, n ? n : 1, sizeof(*seg->idx)))
        goto bad;
    for (i = 0; i < n; i++) {
        uint32_t rel = (uint32_t)kb_get_be(buf + i * 8, 4);
        uint32_t pos = (uint32_t)kb_get_be(buf + i * 8 + 4, 4);
        if (i > 0 && (rel <= seg->idx[i - 1].rel || pos <= seg->idx[i - 1].pos))
            goto bad;
        if (i == 0 && pos != 0)
            goto bad;
        if ((int64_t)pos >= seg->flushed_size)
            goto bad;
        seg->idx[i].rel = rel;
        seg->idx[i].pos = pos;
    }
    seg->idx_cnt = seg->idx_flushed = n;
    free(buf);
    /* time index */
    kb_seg_ext(p, sizeof(p), seg, ".timeindex");
    buf = kb_read_file(p, &len);
    if (!buf || len % 12)
        goto bad;
    n = len / 12;
    if (kb_grow((void **)&seg->tidx, &seg->tidx_cap, n ? n : 1, sizeof(*seg->tidx)))
        goto bad;
    for (i = 0; i < n; i++) {
        int64_t ts = (int64_t)kb_get_be(buf + i * 12, 8);
        uint32_t rel = (uint32_t)kb_get_be(buf + i * 12 + 8, 4);
        if (ts < 0 || (i > 0 && (ts <= seg->tidx[i - 1].ts || rel < seg->tidx[i - 1].rel)))
            goto bad;
        seg->tidx[i].ts = ts;
        seg->tidx[i].rel = rel;
    }
    seg->tidx_cnt = seg->tidx_flushed = n;
    free(buf);
    /* transaction index */
    kb_seg_ext(p, sizeof(p), seg, ".txnindex");
    buf = kb_read_file(p, &len);
    if (!buf || len % KB_TXN_ENT_SIZE)
        goto bad;
    n = len / KB_TXN_ENT_SIZE;
    if (kb_grow((void **)&seg->txns, &seg->txn_cap, n ? n : 1, sizeof(*seg->txns)))
        goto bad;
    for (i = 0; i < n; i++) {
        const uint8_t *e = buf + i * KB_TXN_ENT_SIZE;
        kb_aborted_txn_t *t = &seg->txns[i];
        if (kb_get_be(e, 2) != 0)
            goto bad;
        t->producer_id = (int64_t)kb_get_be(e + 2, 8);
        t->first_offset = (int64_t)kb_get_be(e + 10, 8);
        t->last_offset = (int64_t)kb_get_be(e + 18, 8);
        t->lso = (int64_t)kb_get_be(e + 26, 8);
        if (t->first_offset < 0 || t->last_offset < t->first_offset || t->last_offset < seg->base ||
            t->last_offset - seg->base > UINT32_MAX ||
            (i > 0 && t->last_offset <= seg->txns[i - 1].last_offset))
            goto bad;
    }
    seg->txn_cnt = seg->txn_flushed = n;
    free(buf);
    if (seg->tidx_cnt) {
        seg->max_ts = seg->tidx[seg->tidx_cnt - 1].ts;
        seg->max_ts_offset = seg->base + seg->tidx[seg->tidx_cnt - 1].rel;
    }
    return 0;
bad:
    free(buf);
    kb_seg_reset_mem(seg);
    return KB_STO_CORRUPT_LOG;
}
