/*
 * kb_cleaner.c -- log compaction for cleanup.policy=compact (and compact,delete), and the
 * crash-safe swap of cleaned segments.
 *
 * One pass: (1) under the locks, pick the cleanable range: whole inactive segments below the
 * LSO (and below min.compaction.lag.ms); (2) without locks, build key -> latest offset for the
 * dirty part (from the cleaner offset), skipping control batches and aborted transactional
 * data; (3) rewrite every cleanable segment (from the log start, in groups that fit
 * segment.bytes) into "<base>.*.cleaned" files; (4) per group, holding the writer mutex and
 * only if the log did not change meanwhile: write "<base>.swapend", rename the .cleaned files
 * to .swap (the .log last: that is the commit point), rename the replaced segments to
 * .deleted, rename the .swap files to their final names, swap the segment in memory, unlink
 * the .deleted files and the .swapend.
 *
 * Recovery (kb_log_int_recover_swaps, at open): *.cleaned and *.deleted are removed; a
 * "<X>.log.swap" means the commit point was reached: every other segment file with a base
 * offset in [X, swapend) is removed and the .swap files get their final names (indexes that are
 * missing are rebuilt by the normal open path).
 *
 * @thread cleaner (any one thread per log at a time)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kb_log_int.h"
#include "kb_rb.h"

/* ---------- key -> offset map (hashes of the key, as Kafka's SkimpyOffsetMap) ---------- */

typedef struct kb_omap_s {
    uint64_t *h1;
    uint64_t *h2;
    int64_t *off;
    size_t cap; /* power of two */
    size_t cnt;
    size_t max_cnt; /* from the dedupe buffer budget */
} kb_omap_t;

static uint64_t kb_hash_fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    size_t i;
    for (i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t kb_hash_mix(const uint8_t *p, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    size_t i;
    for (i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

static int kb_omap_grow(kb_omap_t *m)
{
    size_t nc = m->cap ? m->cap * 2 : 1024, i;
    uint64_t *h1 = calloc(nc, sizeof(*h1)), *h2 = calloc(nc, sizeof(*h2));
    int64_t *off = malloc(nc * sizeof(*off));
    if (!h1 || !h2 || !off) {
        free(h1);
        free(h2);
        free(off);
        return KB_STO_NOMEM;
    }
    for (i = 0; i < nc; i++)
        off[i] = -1;
    for (i = 0; i < m->cap; i++) {
        size_t k;
        if (m->off[i] < 0)
            continue;
        for (k = m->h1[i] & (nc - 1); off[k] >= 0; k = (k + 1) & (nc - 1))
            ;
        h1[k] = m->h1[i];
        h2[k] = m->h2[i];
        off[k] = m->off[i];
    }
    free(m->h1);
    free(m->h2);
    free(m->off);
    m->h1 = h1;
    m->h2 = h2;
    m->off = off;
    m->cap = nc;
    return 0;
}

/* 0 stored, 1 map full (not stored), <0 error */
static int kb_omap_put(kb_omap_t *m, const uint8_t *key, size_t n, int64_t offset)
{
    uint64_t a = kb_hash_fnv(key, n), b = kb_hash_mix(key, n);
    size_t k;
    if ((m->cnt + 1) * 10 > m->cap * 7) {
        if (m->cnt >= m->max_cnt)
            goto full_check;
        if (kb_omap_grow(m))
            return KB_STO_NOMEM;
    }
full_check:
    for (k = a & (m->cap - 1); m->off[k] >= 0; k = (k + 1) & (m->cap - 1)) {
        if (m->h1[k] == a && m->h2[k] == b) {
            if (offset > m->off[k])
                m->off[k] = offset;
            return 0;
        }
    }
    if (m->cnt >= m->max_cnt || (m->cnt + 1) * 10 > m->cap * 9)
        return 1;
    m->h1[k] = a;
    m->h2[k] = b;
    m->off[k] = offset;
    m->cnt++;
    return 0;
}

static int64_t kb_omap_get(const kb_omap_t *m, const uint8_t *key, size_t n)
{
    uint64_t a, b;
    size_t k;
    if (!m->cap)
        return -1;
    a = kb_hash_fnv(key, n);
    b = kb_hash_mix(key, n);
    for (k = a & (m->cap - 1); m->off[k] >= 0; k = (k + 1) & (m->cap - 1))
        if (m->h1[k] == a && m->h2[k] == b)
            return m->off[k];
    return -1;
}

static void kb_omap_free(kb_omap_t *m)
{
    free(m->h1);
    free(m->h2);
    free(m->off);
    memset(m, 0, sizeof(*m));
}

/* ---------- a small pid -> int map (retained-data flags per open transaction) ---------- */

typedef struct kb_pidflag_s {
    int64_t *pid;
    int *val;
    size_t cnt, cap;
} kb_pidflag_t;

static int *kb_pidflag_get(kb_pidflag_t *pf, int64_t pid)
{
    size_t i;
    for (i = 0; i < pf->cnt; i++)
        if (pf->pid[i] == pid)
            return &pf->val[i];
    if (pf->cnt == pf->cap) {
        size_t nc = pf->cap ? pf->cap * 2 : 16;
        int64_t *np = realloc(pf->pid, nc * sizeof(*np));
        int *nv;
        if (!np)
            return NULL;
        pf->pid = np;
        nv = realloc(pf->val, nc * sizeof(*nv));
        if (!nv)
            return NULL;
        pf->val = nv;
        pf->cap = nc;
    }
    pf->pid[pf->cnt] = pid;
    pf->val[pf->cnt] = 0;
    return &pf->val[pf->cnt++];
}

/* ---------- cleanable range ---------- */

typedef struct kb_clean_plan_s {
    size_t nclean; /* leading segments that may be cleaned */
    int64_t end;   /* base of the first uncleanable segment */
    int64_t first_dirty;
    int64_t clean_bytes;
    int64_t dirty_bytes;
} kb_clean_plan_t;

/* rwlock (read side at least) held */
static void kb_clean_plan(const kb_log_t *log, int64_t now_ms, kb_clean_plan_t *pl)
{
    int64_t lso =
        log->first_unstable >= 0 && log->first_unstable < log->hw ? log->first_unstable : log->hw;
    size_t i;
    memset(pl, 0, sizeof(*pl));
    pl->first_dirty = log->cleaner_offset < log->log_start ? log->log_start : log->cleaner_offset;
    for (i = 0; i + 1 < log->nsegs; i++) {
        const kb_seg_t *seg = log->segs[i];
        int64_t next = log->segs[i + 1]->base;
        if (next > lso)
            break;
        if (log->cfg.min_compaction_lag_ms > 0 && seg->max_ts >= 0 &&
            now_ms - seg->max_ts < log->cfg.min_compaction_lag_ms)
            break;
        if (seg->next_offset > pl->first_dirty || seg->base >= pl->first_dirty)
            pl->dirty_bytes += seg->size;
        else
            pl->clean_bytes += seg->size;
        pl->end = next;
        pl->nclean = i + 1;
    }
}

double kb_log_dirty_ratio(kb_log_t *log, int64_t now_ms)
{
    kb_clean_plan_t pl;
    pthread_rwlock_rdlock(&log->rw);
    kb_clean_plan(log, now_ms, &pl);
    pthread_rwlock_unlock(&log->rw);
    if (pl.clean_bytes + pl.dirty_bytes == 0)
        return 0.0;
    return (double)pl.dirty_bytes / (double)(pl.clean_bytes + pl.dirty_bytes);
}

/* ---------- scanning helpers ---------- */

typedef struct kb_ab_list_s {
    kb_aborted_txn_t *v;
    size_t n;
} kb_ab_list_t;

static int kb_in_aborted(const kb_ab_list_t *ab, int64_t pid, int64_t offset)
{
    size_t i;
    for (i = 0; i < ab->n; i++)
        if (ab->v[i].producer_id == pid && ab->v[i].first_offset <= offset &&
            offset <= ab->v[i].last_offset)
            return 1;
    return 0;
}

typedef struct kb_map_ctx_s {
    kb_omap_t *map;
    const kb_ab_list_t *ab;
    int64_t from;
    int full;
    int err;
} kb_map_ctx_t;

static int kb_map_cb(void *opaque, kb_seg_t *seg, const kp_batch_t *b, int64_t pos)
{
    kb_map_ctx_t *mc = opaque;
    kp_record_iter_t it;
    kp_record_t r;
    kp_writer_t scratch;
    int rc;
    (void)seg;
    (void)pos;
    if (kp_batch_hdr_last_offset(&b->hdr) < mc->from || kp_batch_hdr_is_control(&b->hdr))
        return 0;
    if (kp_batch_hdr_is_transactional(&b->hdr) &&
        kb_in_aborted(mc->ab, b->hdr.producerId, b->hdr.baseOffset))
        return 0;
    kp_writer_init(&scratch);
    if (kp_record_iter_init(&it, b, &scratch, (size_t)INT32_MAX)) {
        kp_writer_free(&scratch);
        return 0; /* undecodable records are kept as they are and not mapped */
    }
    while ((rc = kp_record_iter_next(&it, &r)) == 1) {
        if (r.key.len < 0 || r.offset < mc->from)
            continue;
        rc = kb_omap_put(mc->map, r.key.ptr, (size_t)r.key.len, r.offset);
        if (rc) {
            if (rc < 0)
                mc->err = rc;
            mc->full = 1;
            break;
        }
    }
    kp_writer_free(&scratch);
    return mc->full ? -1 : 0;
}

/* ---------- rewriting ---------- */

typedef struct kb_rw_ctx_s {
    kb_log_t *log;
    const kb_omap_t *map;
    const kb_ab_list_t *ab;
    kb_pidflag_t *txn_retained;
    kb_seg_t *out;
    int64_t now;
    int64_t horizon; /* delete horizon for batches that get one now */
    int32_t interval;
    kb_clean_stats_t *st;
    kp_writer_t wbuf;
    int err;
} kb_rw_ctx_t;

static int kb_rw_emit(kb_rw_ctx_t *rc, const uint8_t *p, size_t n)
{
    kp_batch_hdr_t h;
    int64_t pos = rc->out->size;
    if (kb_pwrite_full(rc->out->fd, p, n, pos))
        return KB_STO_IO;
    kp_batch_hdr_decode(p, n, &h);
    kb_seg_track_batch(rc->out, &h, pos, (int64_t)n, rc->interval);
    rc->st->bytes_out += (int64_t)n;
    return 0;
}

/* Is this producer's last batch in the log the one ending at @p last? Then an emptied batch
 * keeps its header so the producer's sequence state survives (as Kafka). */
static int kb_is_last_of_producer(kb_log_t *log, int64_t pid, int64_t last)
{
    kb_pentry_t *e;
    int r = 0;
    pthread_mutex_lock(&log->wlock);
    e = kb_pstate_get(&log->ps, pid);
    if (e && e->nb && e->b[e->nb - 1].last_offset == last)
        r = 1;
    pthread_mutex_unlock(&log->wlock);
    return r;
}

static int kb_rw_cb(void *opaque, kb_seg_t *seg, const kp_batch_t *b, int64_t pos)
{
    kb_rw_ctx_t *rc = opaque;
    const kp_batch_hdr_t *h = &b->hdr;
    int has_horizon = kp_batch_hdr_has_delete_horizon(h);
    int horizon_passed = has_horizon && rc->now >= h->baseTimestamp;
    kp_record_iter_t it;
    kp_record_t r;
    kp_writer_t scratch;
    kb_rb_builder_t bld;
    int n_in = 0, n_keep = 0, tombstones = 0, ir, err;
    int16_t attrs;
    int64_t base_ts;
    (void)seg;
    (void)pos;
    if (kp_batch_hdr_is_control(h)) {
        int type = kb_rb_control_type(b, NULL);
        int *flag;
        if (type != KP_CONTROL_TYPE_ABORT && type != KP_CONTROL_TYPE_COMMIT)
            return kb_rw_emit(rc, b->buf, b->size) ? -1 : 0; /* type 7 and unknown: kept */
        flag = kb_pidflag_get(rc->txn_retained, h->producerId);
        if (flag && *flag) {
            *flag = 0;
            return kb_rw_emit(rc, b->buf, b->size) ? -1 : 0;
        }
        /* no data of this transaction is left: the marker goes once its horizon passed */
        if (horizon_passed) {
            rc->st->batches_removed++;
            return 0;
        }
        if (has_horizon)
            return kb_rw_emit(rc, b->buf, b->size) ? -1 : 0;
        base_ts = rc->horizon;
        attrs = (int16_t)(h->attributes | KP_BATCH_ATTR_DELETE_HORIZON);
    } else {
        if (kp_batch_hdr_is_transactional(h) &&
            kb_in_aborted(rc->ab, h->producerId, h->baseOffset)) {
            rc->st->batches_removed++;
            rc->st->records_removed += h->recordCount;
            return 0;
        }
        attrs = h->attributes;
        base_ts = h->baseTimestamp;
    }
    kp_writer_init(&scratch);
    if (kp_record_iter_init(&it, b, &scratch, (size_t)INT32_MAX)) {
        kp_writer_free(&scratch);
        return kb_rw_emit(rc, b->buf, b->size) ? -1 : 0;
    }
    /* pass 1: decide */
    while ((ir = kp_record_iter_next(&it, &r)) == 1) {
        int64_t latest;
        n_in++;
        if (kp_batch_hdr_is_control(h)) {
            n_keep++;
            continue;
        }
        if (r.key.len < 0)
            continue; /* no key: Kafka's cleaner drops it */
        latest = kb_omap_get(rc->map, r.key.ptr, (size_t)r.key.len);
        if (latest > r.offset)
            continue;
        if (r.value.len < 0) {
            if (horizon_passed) {
                rc->st->tombstones_removed++;
                continue;
            }
            tombstones++;
        }
        n_keep++;
    }
    if (ir < 0) {
        kp_writer_free(&scratch);
        return kb_rw_emit(rc, b->buf, b->size) ? -1 : 0;
    }
    if (!kp_batch_hdr_is_control(h) && tombstones && !has_horizon) {
        attrs = (int16_t)(attrs | KP_BATCH_ATTR_DELETE_HORIZON);
        base_ts = rc->horizon;
    }
    if (!kp_batch_hdr_is_control(h) && kp_batch_hdr_is_transactional(h) && n_keep) {
        int *flag = kb_pidflag_get(rc->txn_retained, h->producerId);
        if (flag)
            *flag = 1;
    }
    rc->st->records_removed += n_in - n_keep;
    if (n_keep == n_in && attrs == h->attributes) {
        kp_writer_free(&scratch);
        return kb_rw_emit(rc, b->buf, b->size) ? -1 : 0;
    }
    if (n_keep == 0 &&
        !(h->producerId >= 0 &&
          kb_is_last_of_producer(rc->log, h->producerId, kp_batch_hdr_last_offset(h)))) {
        kp_writer_free(&scratch);
        rc->st->batches_removed++;
        return 0;
    }
    /* pass 2: rebuild with the kept records at their original offsets */
    kb_rb_builder_init(&bld, h, attrs, base_ts);
    kp_record_iter_init(&it, b, &scratch, (size_t)INT32_MAX);
    while (kp_record_iter_next(&it, &r) == 1) {
        int64_t latest;
        if (!kp_batch_hdr_is_control(h)) {
            if (r.key.len < 0)
                continue;
            latest = kb_omap_get(rc->map, r.key.ptr, (size_t)r.key.len);
            if (latest > r.offset)
                continue;
            if (r.value.len < 0 && horizon_passed)
                continue;
        }
        kb_rb_builder_add(&bld, &r);
    }
    kp_writer_reset(&rc->wbuf);
    err = kb_rb_builder_finish(&bld, &rc->wbuf);
    kb_rb_builder_free(&bld);
    kp_writer_free(&scratch);
    if (err) {
        rc->err = KB_STO_NOMEM;
        return -1;
    }
    return kb_rw_emit(rc, rc->wbuf.buf, rc->wbuf.len) ? -1 : 0;
}

static int kb_write_swapend(const char *dir, int64_t base, int64_t end)
{
    char p[4200], buf[64];
    int fd, n, rc;
    kb_seg_path(p, sizeof(p), dir, base, ".swapend");
    fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return KB_STO_IO;
    n = snprintf(buf, sizeof(buf), "%" PRId64 "\n", end);
    rc = kb_pwrite_full(fd, buf, (size_t)n, 0);
    if (!rc && fsync(fd))
        rc = KB_STO_IO;
    close(fd);
    return rc;
}

static void kb_unlink_swapend(const char *dir, int64_t base)
{
    char p[4200];
    kb_seg_path(p, sizeof(p), dir, base, ".swapend");
    unlink(p);
}

/* Swap @p out in for log->segs[first .. first+cnt) if the log is still at generation @p gen.
 * Writer mutex taken here. */
static int kb_clean_swap(kb_log_t *log, uint64_t gen, kb_seg_t **old, size_t cnt, kb_seg_t *out,
                         int64_t end, int crash)
{
    size_t i, first;
    int rc;
    pthread_mutex_lock(&log->wlock);
    if (log->gen != gen) {
        pthread_mutex_unlock(&log->wlock);
        return KB_STO_ABORTED;
    }
    for (first = 0; first < log->nsegs && log->segs[first] != old[0]; first++)
        ;
    if (first + cnt >= log->nsegs) { /* never the active segment */
        pthread_mutex_unlock(&log->wlock);
        return KB_STO_ABORTED;
    }
    rc = kb_write_swapend(log->dir, out->base, end);
    if (!rc)
        rc = kb_seg_rename_sfx(out, ".swap"); /* commit point: the .log.swap exists */
    if (rc) {
        pthread_mutex_unlock(&log->wlock);
        return rc;
    }
    kb_fsync_dir(log->dir);
    if (crash == 2)
        goto crash;
    for (i = 0; i < cnt; i++)
        kb_seg_rename_sfx(old[i], ".deleted");
    if (crash == 3)
        goto crash;
    rc = kb_seg_rename_sfx(out, "");
    kb_fsync_dir(log->dir);
    pthread_rwlock_wrlock(&log->rw);
    log->segs[first] = out;
    memmove(&log->segs[first + 1], &log->segs[first + cnt],
            (log->nsegs - first - cnt) * sizeof(*log->segs));
    log->nsegs -= cnt - 1;
    log->gen++;
    pthread_rwlock_unlock(&log->rw);
    for (i = 0; i < cnt; i++) {
        kb_seg_delete_files(old[i]);
        kb_seg_unref(old[i]); /* the log's reference */
    }
    kb_unlink_swapend(log->dir, out->base);
    pthread_mutex_unlock(&log->wlock);
    return rc;
crash:
    /* test hook: stop here as if the process died (the caller abandons the log) */
    pthread_mutex_unlock(&log->wlock);
    return KB_STO_ABORTED;
}

int kb_log_clean(kb_log_t *log, const kb_cleaner_config_t *cc, int64_t now_ms, int force,
                 kb_clean_stats_t *stats)
{
    kb_clean_stats_t dummy;
    kb_clean_plan_t pl;
    kb_seg_t **segs = NULL;
    kb_omap_t map = {0};
    kb_ab_list_t ab = {NULL, 0};
    kb_pidflag_t retained = {0};
    uint64_t gen;
    size_t i, g;
    int64_t end, delete_retention, seg_bytes;
    int32_t interval;
    int rc = 0;
    kb_cleaner_config_t defcc;
    if (!stats)
        stats = &dummy;
    memset(stats, 0, sizeof(*stats));
    if (!cc) {
        kb_cleaner_config_defaults(&defcc);
        cc = &defcc;
    }

    /* 1. plan under the locks; keep references on the segments we read */
    pthread_mutex_lock(&log->wlock);
    pthread_rwlock_rdlock(&log->rw);
    kb_clean_plan(log, now_ms, &pl);
    stats->first_dirty = pl.first_dirty;
    stats->end_offset = pl.first_dirty;
    /* A forced pass also runs with nothing dirty: it rewrites the clean part so tombstones and
     * markers whose delete horizon passed go away. */
    if (!(log->cfg.cleanup_policy & KB_CLEANUP_COMPACT) || pl.nclean == 0 ||
        (!force && (pl.dirty_bytes == 0 ||
                    (double)pl.dirty_bytes / (double)(pl.dirty_bytes + pl.clean_bytes) <
                        log->cfg.min_cleanable_dirty_ratio))) {
        pthread_rwlock_unlock(&log->rw);
        pthread_mutex_unlock(&log->wlock);
        return 0;
    }
    segs = calloc(pl.nclean, sizeof(*segs));
    if (!segs) {
        pthread_rwlock_unlock(&log->rw);
        pthread_mutex_unlock(&log->wlock);
        return KB_STO_NOMEM;
    }
    for (i = 0; i < pl.nclean; i++) {
        segs[i] = log->segs[i];
        kb_seg_ref(segs[i]);
    }
    /* aborted transactions that may touch the range (markers can sit above it) */
    for (i = 0; i < log->nsegs; i++) {
        size_t j;
        for (j = 0; j < log->segs[i]->txn_cnt; j++) {
            const kb_aborted_txn_t *t = &log->segs[i]->txns[j];
            kb_aborted_txn_t *nv;
            if (t->first_offset >= pl.end)
                continue;
            nv = realloc(ab.v, (ab.n + 1) * sizeof(*nv));
            if (!nv)
                continue;
            ab.v = nv;
            ab.v[ab.n++] = *t;
        }
    }
    gen = log->gen;
    delete_retention = log->cfg.delete_retention_ms;
    seg_bytes = log->cfg.segment_bytes;
    interval = log->cfg.index_interval_bytes;
    pthread_rwlock_unlock(&log->rw);
    pthread_mutex_unlock(&log->wlock);

    /* 2. offset map over the dirty segments; stop at a segment boundary when full */
    map.max_cnt = (size_t)((double)cc->dedupe_buffer_size * cc->io_buffer_load_factor / 24.0);
    if (map.max_cnt < 1024)
        map.max_cnt = 1024;
    end = pl.end;
    for (i = 0; i < pl.nclean; i++) {
        kb_map_ctx_t mc = {&map, &ab, pl.first_dirty, 0, 0};
        int64_t vend;
        if (segs[i]->next_offset <= pl.first_dirty && segs[i]->base < pl.first_dirty)
            continue;
        kb_seg_scan(segs[i], 0, INT64_MIN, 0, kb_map_cb, &mc, &vend);
        if (mc.err) {
            rc = mc.err;
            goto out;
        }
        if (mc.full) {
            /* Keys of this segment were only partly mapped: clean up to its start. */
            end = segs[i]->base;
            break;
        }
    }
    if (end <= pl.first_dirty && !(force && pl.dirty_bytes == 0)) {
        rc = 0; /* the map filled up inside the first dirty segment */
        goto out;
    }
    stats->keys_in_map = (int64_t)map.cnt;

    /* 3+4. rewrite segments below `end` in groups and swap each in */
    g = 0;
    while (g < pl.nclean && segs[g]->base < end) {
        size_t k = g + 1;
        int64_t size = segs[g]->size, gend;
        kb_rw_ctx_t rw;
        kb_seg_t *out;
        int err = 0;
        while (k < pl.nclean && segs[k]->base < end && size + segs[k]->size <= seg_bytes &&
               segs[k]->next_offset - segs[g]->base < INT32_MAX) {
            size += segs[k]->size;
            k++;
        }
        gend = k < pl.nclean ? segs[k]->base : pl.end;
        out = kb_seg_create_sfx(log->dir, segs[g]->base, ".cleaned", &err);
        if (!out) {
            rc = err;
            goto out;
        }
        memset(&rw, 0, sizeof(rw));
        rw.log = log;
        rw.map = &map;
        rw.ab = &ab;
        rw.txn_retained = &retained;
        rw.out = out;
        rw.now = now_ms;
        rw.horizon = now_ms + delete_retention;
        rw.interval = interval;
        rw.st = stats;
        kp_writer_init(&rw.wbuf);
        for (i = g; i < k && !rw.err; i++) {
            int64_t vend;
            size_t j;
            stats->segments_in++;
            stats->bytes_in += segs[i]->size;
            if (kb_seg_scan(segs[i], 0, INT64_MIN, 0, kb_rw_cb, &rw, &vend) < 0 && !rw.err)
                rw.err = KB_STO_IO;
            for (j = 0; j < segs[i]->txn_cnt; j++)
                kb_seg_add_txn(out, &segs[i]->txns[j]);
        }
        kp_writer_free(&rw.wbuf);
        if (!rw.err) {
            out->created_ms = segs[k - 1]->created_ms;
            if (out->max_ts >= 0)
                kb_seg_tidx_final(out);
            rw.err = kb_seg_fsync(out);
        }
        if (rw.err) {
            kb_seg_delete_files(out);
            kb_seg_unref(out);
            rc = rw.err;
            goto out;
        }
        if (cc->test_crash_point == 1) {
            kb_seg_unref(out); /* files stay as .cleaned, as after a crash */
            rc = KB_STO_ABORTED;
            goto out;
        }
        rc = kb_clean_swap(log, gen, segs + g, k - g, out, gend, cc->test_crash_point);
        if (rc == KB_STO_ABORTED && cc->test_crash_point) {
            kb_seg_unref(out);
            goto out;
        }
        if (rc) {
            kb_seg_delete_files(out);
            kb_seg_unref(out);
            goto out;
        }
        stats->segments_out++;
        pthread_rwlock_rdlock(&log->rw);
        gen = log->gen;
        pthread_rwlock_unlock(&log->rw);
        g = k;
    }
    pthread_mutex_lock(&log->wlock);
    pthread_rwlock_wrlock(&log->rw);
    if (log->gen == gen && log->cleaner_offset < end)
        log->cleaner_offset = end;
    pthread_rwlock_unlock(&log->rw);
    pthread_mutex_unlock(&log->wlock);
    stats->end_offset = end;
out:
    for (i = 0; i < pl.nclean; i++)
        kb_seg_unref(segs[i]);
    free(segs);
    free(ab.v);
    free(retained.pid);
    free(retained.val);
    kb_omap_free(&map);
    return rc;
}

/* ---------- crash recovery of an interrupted swap ---------- */

static int kb_has_suffix(const char *s, const char *sfx)
{
    size_t n = strlen(s), m = strlen(sfx);
    return n >= m && !strcmp(s + n - m, sfx);
}

static int kb_parse_base20(const char *s, int64_t *base)
{
    int i;
    int64_t v = 0;
    for (i = 0; i < 20; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (s[20] != '.')
        return -1;
    *base = v;
    return 0;
}

static int kb_swap_end(const char *dir, int64_t base, int64_t *end)
{
    char p[4200];
    FILE *f;
    long long v;
    kb_seg_path(p, sizeof(p), dir, base, ".swapend");
    f = fopen(p, "r");
    if (!f)
        return -1;
    if (fscanf(f, "%lld", &v) != 1 || v < base) {
        fclose(f);
        return -1;
    }
    fclose(f);
    *end = v;
    return 0;
}

int kb_log_int_recover_swaps(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int64_t *swaps = NULL, base;
    size_t nswaps = 0, i;
    char p[4200];
    if (!d)
        return KB_STO_IO;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        if (kb_has_suffix(n, ".cleaned") || kb_has_suffix(n, ".deleted") ||
            kb_has_suffix(n, ".tmp")) {
            snprintf(p, sizeof(p), "%s/%s", dir, n);
            unlink(p);
        } else if (kb_has_suffix(n, ".log.swap") && !kb_parse_base20(n, &base)) {
            int64_t *nv = realloc(swaps, (nswaps + 1) * sizeof(*nv));
            if (!nv) {
                closedir(d);
                free(swaps);
                return KB_STO_NOMEM;
            }
            swaps = nv;
            swaps[nswaps++] = base;
        }
    }
    closedir(d);
    for (i = 0; i < nswaps; i++) {
        int64_t end;
        static const char *const exts[] = {".log", ".index", ".timeindex", ".txnindex"};
        size_t e;
        if (kb_swap_end(dir, swaps[i], &end)) {
            /* no range record: use the data itself (Kafka's rule) */
            kb_seg_path(p, sizeof(p), dir, swaps[i], ".log.swap");
            if (kb_seg_probe_end(p, swaps[i], &end))
                end = swaps[i] + 1;
        }
        /* remove every segment file in [base, end) that is not part of the swap */
        d = opendir(dir);
        if (!d) {
            free(swaps);
            return KB_STO_IO;
        }
        while ((de = readdir(d))) {
            int64_t b;
            const char *n = de->d_name;
            if (kb_parse_base20(n, &b) || b < swaps[i] || b >= end || kb_has_suffix(n, ".swap") ||
                kb_has_suffix(n, ".swapend") || kb_has_suffix(n, ".snapshot"))
                continue;
            for (e = 0; e < sizeof(exts) / sizeof(exts[0]); e++) {
                if (!strcmp(n + 20, exts[e])) {
                    snprintf(p, sizeof(p), "%s/%s", dir, n);
                    unlink(p);
                }
            }
        }
        closedir(d);
        for (e = 1; e < sizeof(exts) / sizeof(exts[0]); e++) {
            char from[4300], to[4200];
            kb_seg_path(to, sizeof(to), dir, swaps[i], exts[e]);
            snprintf(from, sizeof(from), "%s.swap", to);
            if (rename(from, to))
                unlink(to); /* missing index: rebuilt on open */
        }
        {
            char from[4300], to[4200];
            kb_seg_path(to, sizeof(to), dir, swaps[i], ".log");
            snprintf(from, sizeof(from), "%s.swap", to);
            if (rename(from, to)) {
                free(swaps);
                return KB_STO_IO;
            }
        }
        kb_unlink_swapend(dir, swaps[i]);
    }
    /* index .swap files without a log .swap: the commit point was never reached */
    d = opendir(dir);
    if (d) {
        while ((de = readdir(d))) {
            if (kb_has_suffix(de->d_name, ".swap") || kb_has_suffix(de->d_name, ".swapend")) {
                snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
                unlink(p);
            }
        }
        closedir(d);
    }
    free(swaps);
    kb_fsync_dir(dir);
    return 0;
}
