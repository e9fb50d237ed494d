/*
 * kb_pstate.c -- producer state of one partition: per producer id the epoch, the last 5 batches'
 * sequences and offsets (duplicate detection), the coordinator epoch and the first offset of an
 * ongoing transaction; completed transactions not yet below the HW (for the LSO); snapshots.
 *
 * KIP-1279 MIRROR_PID_RESET (control type 7): applying it expires every producer entry; a
 * transaction still open at that point is closed as aborted at the reset's offset (see
 * docs/storage.md), so no state from before it survives.
 *
 * @thread the owning log's writer (writer mutex held).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kb_log_int.h"
#include "kb_rb.h"
#include "kp_crc32c.h"
#include "kp_reader.h"

#define KB_PS_MAGIC   0x4b425053u /* "KBPS" */
#define KB_PS_VERSION 1

static size_t kb_pstate_hash(int64_t pid, size_t n)
{
    uint64_t x = (uint64_t)pid * 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 17) & (n - 1);
}

void kb_pstate_init(kb_pstate_t *ps)
{
    memset(ps, 0, sizeof(*ps));
    ps->last_reset = -1;
}

static void kb_pstate_clear_entries(kb_pstate_t *ps)
{
    size_t i;
    for (i = 0; i < ps->nbuckets; i++) {
        kb_pentry_t *e = ps->buckets[i];
        while (e) {
            kb_pentry_t *nx = e->next;
            free(e);
            e = nx;
        }
        ps->buckets[i] = NULL;
    }
    ps->count = 0;
}

void kb_pstate_clear(kb_pstate_t *ps)
{
    kb_pstate_clear_entries(ps);
    ps->ndone = 0;
    ps->map_end = 0;
    ps->last_reset = -1;
}

void kb_pstate_free(kb_pstate_t *ps)
{
    kb_pstate_clear_entries(ps);
    free(ps->buckets);
    free(ps->done);
    memset(ps, 0, sizeof(*ps));
    ps->last_reset = -1;
}

kb_pentry_t *kb_pstate_get(const kb_pstate_t *ps, int64_t pid)
{
    kb_pentry_t *e;
    if (!ps->nbuckets)
        return NULL;
    for (e = ps->buckets[kb_pstate_hash(pid, ps->nbuckets)]; e; e = e->next)
        if (e->pid == pid)
            return e;
    return NULL;
}

static kb_pentry_t *kb_pstate_get_or_add(kb_pstate_t *ps, int64_t pid)
{
    kb_pentry_t *e = kb_pstate_get(ps, pid);
    size_t h;
    if (e)
        return e;
    if (ps->count + 1 > ps->nbuckets) {
        size_t nn = ps->nbuckets ? ps->nbuckets * 2 : 16, i;
        kb_pentry_t **nb = calloc(nn, sizeof(*nb));
        if (!nb)
            return NULL;
        for (i = 0; i < ps->nbuckets; i++) {
            kb_pentry_t *x = ps->buckets[i];
            while (x) {
                kb_pentry_t *nx = x->next;
                size_t k = kb_pstate_hash(x->pid, nn);
                x->next = nb[k];
                nb[k] = x;
                x = nx;
            }
        }
        free(ps->buckets);
        ps->buckets = nb;
        ps->nbuckets = nn;
    }
    e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->pid = pid;
    e->epoch = KP_NO_PRODUCER_EPOCH;
    e->coord_epoch = -1;
    e->txn_first = -1;
    e->last_ts = -1;
    h = kb_pstate_hash(pid, ps->nbuckets);
    e->next = ps->buckets[h];
    ps->buckets[h] = e;
    ps->count++;
    return e;
}

static void kb_pstate_remove(kb_pstate_t *ps, int64_t pid)
{
    kb_pentry_t **pp;
    if (!ps->nbuckets)
        return;
    for (pp = &ps->buckets[kb_pstate_hash(pid, ps->nbuckets)]; *pp; pp = &(*pp)->next) {
        if ((*pp)->pid == pid) {
            kb_pentry_t *e = *pp;
            *pp = e->next;
            free(e);
            ps->count--;
            return;
        }
    }
}

static int kb_pstate_in_seq(int32_t last, int32_t next)
{
    return (int64_t)next == (int64_t)last + 1 || (next == 0 && last == INT32_MAX);
}

int kb_pstate_check(const kb_pstate_t *ps, int64_t pid, int16_t pepoch, int32_t first_seq,
                    int32_t last_seq, int64_t *dup_first, int64_t *dup_last)
{
    const kb_pentry_t *e = kb_pstate_get(ps, pid);
    int i;
    if (!e || e->epoch == KP_NO_PRODUCER_EPOCH)
        return KB_SEQ_OK; /* unknown producer (or state expired): any sequence is accepted */
    if (pepoch < e->epoch)
        return KB_SEQ_INVALID_PRODUCER_EPOCH;
    if (pepoch == e->epoch) {
        for (i = 0; i < e->nb; i++) {
            if (e->b[i].first_seq == first_seq && e->b[i].last_seq == last_seq) {
                if (dup_first)
                    *dup_first = e->b[i].first_offset;
                if (dup_last)
                    *dup_last = e->b[i].last_offset;
                return KB_SEQ_DUPLICATE;
            }
        }
        if (e->nb == 0)
            return KB_SEQ_OK;
        return kb_pstate_in_seq(e->b[e->nb - 1].last_seq, first_seq) ? KB_SEQ_OK
                                                                     : KB_SEQ_OUT_OF_ORDER;
    }
    /* a new epoch must start at sequence 0 */
    return first_seq == 0 ? KB_SEQ_OK : KB_SEQ_OUT_OF_ORDER;
}

static int kb_pstate_done_add(kb_pstate_t *ps, int64_t pid, int64_t first, int64_t last)
{
    if (ps->ndone == ps->done_cap) {
        size_t nc = ps->done_cap ? ps->done_cap * 2 : 8;
        kb_ctxn_t *nd = realloc(ps->done, nc * sizeof(*nd));
        if (!nd)
            return KB_STO_NOMEM;
        ps->done = nd;
        ps->done_cap = nc;
    }
    ps->done[ps->ndone].pid = pid;
    ps->done[ps->ndone].first = first;
    ps->done[ps->ndone].last = last;
    ps->ndone++;
    return 0;
}

/* First offset of an ongoing transaction other than @p except_pid's; -1 none. */
static int64_t kb_pstate_first_ongoing(const kb_pstate_t *ps, int64_t except_pid)
{
    int64_t m = -1;
    size_t i;
    for (i = 0; i < ps->nbuckets; i++) {
        const kb_pentry_t *e;
        for (e = ps->buckets[i]; e; e = e->next)
            if (e->txn_first >= 0 && e->pid != except_pid && (m < 0 || e->txn_first < m))
                m = e->txn_first;
    }
    return m;
}

int64_t kb_pstate_first_unstable(const kb_pstate_t *ps)
{
    int64_t m = kb_pstate_first_ongoing(ps, -2);
    size_t i;
    for (i = 0; i < ps->ndone; i++)
        if (m < 0 || ps->done[i].first < m)
            m = ps->done[i].first;
    return m;
}

void kb_pstate_on_hw(kb_pstate_t *ps, int64_t hw)
{
    size_t i, k = 0;
    for (i = 0; i < ps->ndone; i++)
        if (ps->done[i].last >= hw)
            ps->done[k++] = ps->done[i];
    ps->ndone = k;
}

/* Close @p e's transaction at @p marker: returns 1 and fills @p out if it was aborted. */
static int kb_pstate_end_txn(kb_pstate_t *ps, kb_pentry_t *e, int64_t marker, int aborted,
                             int64_t hw, kb_aborted_txn_t *out)
{
    int64_t first = e->txn_first, lso;
    if (first < 0)
        return 0; /* a marker without data (empty transaction): nothing to track */
    e->txn_first = -1;
    if (marker >= hw)
        kb_pstate_done_add(ps, e->pid, first, marker);
    if (!aborted)
        return 0;
    lso = kb_pstate_first_ongoing(ps, e->pid);
    out->producer_id = e->pid;
    out->first_offset = first;
    out->last_offset = marker;
    out->lso = lso >= 0 ? lso : marker + 1;
    return 1;
}

static int kb_pstate_reset(kb_pstate_t *ps, int64_t offset, int64_t hw, kb_aborted_txn_t **ab,
                           size_t *nab)
{
    size_t i, n = 0, cap = 0;
    kb_aborted_txn_t *v = NULL;
    /* Transactions still open are closed as aborted at the reset (STOPPING normally aborted
     * them already; this keeps the LSO from sticking and read_committed from seeing them). */
    for (i = 0; i < ps->nbuckets; i++) {
        kb_pentry_t *e;
        for (e = ps->buckets[i]; e; e = e->next) {
            kb_aborted_txn_t t;
            if (e->txn_first < 0)
                continue;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 4;
                kb_aborted_txn_t *nv = realloc(v, nc * sizeof(*nv));
                if (!nv) {
                    free(v);
                    return KB_STO_NOMEM;
                }
                v = nv;
                cap = nc;
            }
            if (kb_pstate_end_txn(ps, e, offset, 1, hw, &t))
                v[n++] = t;
        }
    }
    for (i = 0; i < n; i++)
        v[i].lso = offset + 1;
    kb_pstate_clear_entries(ps);
    ps->last_reset = offset;
    *ab = v;
    *nab = n;
    return 0;
}

int kb_pstate_apply(kb_pstate_t *ps, const kp_batch_t *b, int64_t hw, kb_aborted_txn_t **aborted,
                    size_t *naborted)
{
    const kp_batch_hdr_t *h = &b->hdr;
    int64_t last = kp_batch_hdr_last_offset(h);
    kb_pentry_t *e;
    *aborted = NULL;
    *naborted = 0;
    if (last + 1 > ps->map_end)
        ps->map_end = last + 1;
    if (kp_batch_hdr_is_control(h)) {
        int32_t coord = -1;
        int type = kb_rb_control_type(b, &coord);
        if (type < 0)
            return type;
        if (type == KP_CONTROL_TYPE_MIRROR_PID_RESET)
            return kb_pstate_reset(ps, h->baseOffset, hw, aborted, naborted);
        if (type != KP_CONTROL_TYPE_ABORT && type != KP_CONTROL_TYPE_COMMIT)
            return 0; /* unknown control types carry no producer state */
        if (h->producerId < 0)
            return 0;
        e = kb_pstate_get_or_add(ps, h->producerId);
        if (!e)
            return KB_STO_NOMEM;
        if (h->producerEpoch > e->epoch || e->epoch == KP_NO_PRODUCER_EPOCH) {
            e->epoch = h->producerEpoch;
            e->nb = 0;
        }
        e->coord_epoch = coord;
        e->last_ts = h->maxTimestamp;
        {
            kb_aborted_txn_t *t = malloc(sizeof(*t));
            if (!t)
                return KB_STO_NOMEM;
            if (kb_pstate_end_txn(ps, e, h->baseOffset, type == KP_CONTROL_TYPE_ABORT, hw, t)) {
                *aborted = t;
                *naborted = 1;
            } else {
                free(t);
            }
        }
        return 0;
    }
    if (h->producerId < 0)
        return 0;
    e = kb_pstate_get_or_add(ps, h->producerId);
    if (!e)
        return KB_STO_NOMEM;
    if (h->producerEpoch != e->epoch) {
        e->epoch = h->producerEpoch;
        e->nb = 0;
    }
    if (h->baseSequence >= 0) {
        kb_pbatch_t *pb;
        if (e->nb == KB_PSTATE_CACHED_BATCHES) {
            memmove(&e->b[0], &e->b[1], sizeof(e->b[0]) * (KB_PSTATE_CACHED_BATCHES - 1));
            e->nb--;
        }
        pb = &e->b[e->nb++];
        pb->first_seq = h->baseSequence;
        pb->last_seq = (int32_t)(((int64_t)h->baseSequence + h->lastOffsetDelta) % 2147483648LL);
        pb->first_offset = h->baseOffset;
        pb->last_offset = last;
        pb->ts = h->maxTimestamp;
    }
    e->last_ts = h->maxTimestamp;
    if (kp_batch_hdr_is_transactional(h) && e->txn_first < 0)
        e->txn_first = h->baseOffset;
    return 0;
}

int kb_pstate_expire(kb_pstate_t *ps, int64_t now_ms, int64_t expiration_ms)
{
    size_t i;
    int n = 0;
    for (i = 0; i < ps->nbuckets; i++) {
        kb_pentry_t *e = ps->buckets[i], *nx;
        for (; e; e = nx) {
            nx = e->next;
            if (e->txn_first < 0 && e->last_ts >= 0 && now_ms - e->last_ts >= expiration_ms) {
                kb_pstate_remove(ps, e->pid);
                n++;
            }
        }
    }
    return n;
}

/* ---------- snapshots ----------
 * "KBPS" u32 | version i16 | crc32c u32 of everything after it | map_end i64 | last_reset i64 |
 * entry count i32 | entries | done count i32 | done entries (pid, first, last i64).
 * entry: pid i64, epoch i16, coord_epoch i32, txn_first i64, last_ts i64, nb i8,
 *        nb x (first_seq i32, last_seq i32, first_offset i64, last_offset i64, ts i64).
 */

int kb_pstate_write_snapshot(const kb_pstate_t *ps, const char *path)
{
    kp_writer_t wr;
    char tmp[4200];
    size_t i;
    int fd, rc = 0, j;
    kp_writer_init(&wr);
    kp_write_uint32(&wr, KB_PS_MAGIC);
    kp_write_int16(&wr, KB_PS_VERSION);
    kp_write_uint32(&wr, 0);
    kp_write_int64(&wr, ps->map_end);
    kp_write_int64(&wr, ps->last_reset);
    kp_write_int32(&wr, (int32_t)ps->count);
    for (i = 0; i < ps->nbuckets; i++) {
        const kb_pentry_t *e;
        for (e = ps->buckets[i]; e; e = e->next) {
            kp_write_int64(&wr, e->pid);
            kp_write_int16(&wr, e->epoch);
            kp_write_int32(&wr, e->coord_epoch);
            kp_write_int64(&wr, e->txn_first);
            kp_write_int64(&wr, e->last_ts);
            kp_write_int8(&wr, (int8_t)e->nb);
            for (j = 0; j < e->nb; j++) {
                kp_write_int32(&wr, e->b[j].first_seq);
                kp_write_int32(&wr, e->b[j].last_seq);
                kp_write_int64(&wr, e->b[j].first_offset);
                kp_write_int64(&wr, e->b[j].last_offset);
                kp_write_int64(&wr, e->b[j].ts);
            }
        }
    }
    kp_write_int32(&wr, (int32_t)ps->ndone);
    for (i = 0; i < ps->ndone; i++) {
        kp_write_int64(&wr, ps->done[i].pid);
        kp_write_int64(&wr, ps->done[i].first);
        kp_write_int64(&wr, ps->done[i].last);
    }
    if (wr.err) {
        kp_writer_free(&wr);
        return KB_STO_NOMEM;
    }
    kp_writer_patch_int32(&wr, 6, (int32_t)kp_crc32c(0, wr.buf + 10, wr.len - 10));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        kp_writer_free(&wr);
        return KB_STO_IO;
    }
    rc = kb_pwrite_full(fd, wr.buf, wr.len, 0);
    if (!rc && fsync(fd))
        rc = KB_STO_IO;
    close(fd);
    kp_writer_free(&wr);
    if (!rc && rename(tmp, path))
        rc = KB_STO_IO;
    if (rc)
        unlink(tmp);
    return rc;
}

int kb_pstate_read_snapshot(kb_pstate_t *ps, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    uint8_t *buf = NULL;
    kp_reader_t rd;
    int32_t cnt, i, ndone;
    int rc = KB_STO_CORRUPT_LOG;
    kb_pstate_clear(ps);
    if (fd < 0)
        return KB_STO_IO;
    if (fstat(fd, &st) || st.st_size < 38 || st.st_size > (off_t)1 << 30)
        goto out;
    buf = malloc((size_t)st.st_size);
    if (!buf || kb_pread_full(fd, buf, (size_t)st.st_size, 0))
        goto out;
    kp_reader_init(&rd, buf, (size_t)st.st_size);
    if (kp_read_uint32(&rd) != KB_PS_MAGIC || kp_read_int16(&rd) != KB_PS_VERSION)
        goto out;
    if (kp_read_uint32(&rd) != kp_crc32c(0, buf + 10, (size_t)st.st_size - 10))
        goto out;
    ps->map_end = kp_read_int64(&rd);
    ps->last_reset = kp_read_int64(&rd);
    cnt = kp_read_int32(&rd);
    if (cnt < 0 || ps->map_end < 0)
        goto out;
    for (i = 0; i < cnt && !rd.err; i++) {
        int64_t pid = kp_read_int64(&rd);
        kb_pentry_t *e;
        int j;
        if (rd.err || pid < 0 || kb_pstate_get(ps, pid))
            goto out;
        e = kb_pstate_get_or_add(ps, pid);
        if (!e)
            goto out;
        e->epoch = kp_read_int16(&rd);
        e->coord_epoch = kp_read_int32(&rd);
        e->txn_first = kp_read_int64(&rd);
        e->last_ts = kp_read_int64(&rd);
        e->nb = kp_read_int8(&rd);
        if (e->nb < 0 || e->nb > KB_PSTATE_CACHED_BATCHES)
            goto out;
        for (j = 0; j < e->nb; j++) {
            e->b[j].first_seq = kp_read_int32(&rd);
            e->b[j].last_seq = kp_read_int32(&rd);
            e->b[j].first_offset = kp_read_int64(&rd);
            e->b[j].last_offset = kp_read_int64(&rd);
            e->b[j].ts = kp_read_int64(&rd);
            if (e->b[j].last_offset >= ps->map_end)
                goto out;
        }
        if (e->txn_first >= ps->map_end)
            goto out;
    }
    ndone = kp_read_int32(&rd);
    if (ndone < 0)
        goto out;
    for (i = 0; i < ndone && !rd.err; i++) {
        int64_t pid = kp_read_int64(&rd), first = kp_read_int64(&rd), last = kp_read_int64(&rd);
        if (kb_pstate_done_add(ps, pid, first, last))
            goto out;
    }
    if (rd.err || kp_reader_remaining(&rd) != 0)
        goto out;
    /* Defensive: a snapshot must never hold state from before a MIRROR_PID_RESET it covers. */
    if (ps->last_reset >= 0) {
        size_t b;
        for (b = 0; b < ps->nbuckets; b++) {
            kb_pentry_t *e = ps->buckets[b], *nx;
            for (; e; e = nx) {
                int64_t lo = e->nb ? e->b[e->nb - 1].last_offset : e->txn_first;
                nx = e->next;
                if (lo >= 0 && lo < ps->last_reset)
                    kb_pstate_remove(ps, e->pid);
            }
        }
    }
    rc = 0;
out:
    if (rc)
        kb_pstate_clear(ps);
    free(buf);
    close(fd);
    return rc;
}
