/*
 * kb_log.c -- the partition log: open/recovery, append paths, reads, offsets, truncation,
 * retention, flush, close. Locking rules in kb_log.h.
 */
#include "kb_log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kb_log_int.h"
#include "kb_rb.h"

/* ---------- errors ---------- */

const char *kb_sto_err_str(int err)
{
    switch (err) {
#define KB_STO_ERR_STR_(name, val, desc)                                                           \
    case val:                                                                                      \
        return desc;
        KB_STO_ERRNO_MAP(KB_STO_ERR_STR_)
#undef KB_STO_ERR_STR_
    }
    return "unknown error";
}

const char *kb_sto_err_name(int err)
{
    switch (err) {
#define KB_STO_ERR_NAME_(name, val, desc)                                                          \
    case val:                                                                                      \
        return #name;
        KB_STO_ERRNO_MAP(KB_STO_ERR_NAME_)
#undef KB_STO_ERR_NAME_
    }
    return "UNKNOWN";
}

/* ---------- small helpers ---------- */

static int64_t kb_log_realtime(void *opaque)
{
    struct timespec ts;
    (void)opaque;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t kb_log_now(kb_log_t *log)
{
    return log->clock(log->clock_opaque);
}

void kb_log_snapshot_path(char *buf, size_t sz, const char *dir, int64_t offset)
{
    kb_seg_path(buf, sz, dir, offset, ".snapshot");
}

void kb_log_open_opts_init(kb_log_open_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->recovery_point = -1;
    o->log_start_offset = -1;
    o->high_watermark = -1;
    o->cleaner_offset = -1;
}

static int kb_log_parse_base(const char *name, const char *ext, int64_t *base)
{
    size_t n = strlen(name), el = strlen(ext), i;
    int64_t v = 0;
    if (n != 20 + el || strcmp(name + 20, ext))
        return -1;
    for (i = 0; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        if (v > (INT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (name[i] - '0');
    }
    *base = v;
    return 0;
}

static int kb_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Offsets of files "<20 digits><ext>" in @p dir, sorted (malloc'd). */
static int kb_log_list(const char *dir, const char *ext, int64_t **out, size_t *cnt)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int64_t *v = NULL, base;
    size_t n = 0, cap = 0;
    *out = NULL;
    *cnt = 0;
    if (!d)
        return KB_STO_IO;
    while ((de = readdir(d))) {
        if (kb_log_parse_base(de->d_name, ext, &base))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            int64_t *nv = realloc(v, nc * sizeof(*nv));
            if (!nv) {
                free(v);
                closedir(d);
                return KB_STO_NOMEM;
            }
            v = nv;
            cap = nc;
        }
        v[n++] = base;
    }
    closedir(d);
    if (n)
        qsort(v, n, sizeof(*v), kb_cmp_i64);
    *out = v;
    *cnt = n;
    return 0;
}

static kb_seg_t *kb_log_active(kb_log_t *log)
{
    return log->segs[log->nsegs - 1];
}

static int kb_log_push_seg(kb_log_t *log, kb_seg_t *seg)
{
    if (log->nsegs == log->segs_cap) {
        size_t nc = log->segs_cap ? log->segs_cap * 2 : 16;
        kb_seg_t **nv = realloc(log->segs, nc * sizeof(*nv));
        if (!nv)
            return KB_STO_NOMEM;
        log->segs = nv;
        log->segs_cap = nc;
    }
    log->segs[log->nsegs++] = seg;
    return 0;
}

/* Index of the segment with the greatest base ≤ offset (0 if offset is below all). */
static size_t kb_log_floor_seg(const kb_log_t *log, int64_t offset)
{
    size_t lo = 0, hi = log->nsegs;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (log->segs[mid]->base <= offset)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static void kb_log_update_unstable(kb_log_t *log)
{
    log->first_unstable = kb_pstate_first_unstable(&log->ps);
}

static int64_t kb_log_lso_locked(const kb_log_t *log)
{
    if (log->first_unstable >= 0 && log->first_unstable < log->hw)
        return log->first_unstable;
    return log->hw;
}

static void kb_log_notify(kb_log_t *log)
{
    kb_log_listener_fn fn;
    void *op;
    int64_t leo, hw;
    pthread_rwlock_rdlock(&log->rw);
    fn = log->listener;
    op = log->listener_opaque;
    leo = log->leo;
    hw = log->hw;
    pthread_rwlock_unlock(&log->rw);
    if (fn)
        fn(op, log, leo, hw);
}

static void kb_log_store_epochs(kb_log_t *log)
{
    /* Failure to persist is tolerated: the cache is rebuilt from batch headers on open when the
     * checkpoint is missing or corrupt. */
    (void)kb_epoch_store(&log->ec, log->epoch_path);
}

/* ---------- producer state: snapshots and replay ---------- */

static void kb_log_delete_snapshots(kb_log_t *log, int64_t below, int64_t above)
{
    int64_t *offs;
    size_t n, i;
    char p[4200];
    if (kb_log_list(log->dir, ".snapshot", &offs, &n))
        return;
    for (i = 0; i < n; i++) {
        if (offs[i] < below || offs[i] > above) {
            kb_log_snapshot_path(p, sizeof(p), log->dir, offs[i]);
            unlink(p);
        }
    }
    free(offs);
}

static void kb_log_take_snapshot(kb_log_t *log, int64_t offset)
{
    char p[4200];
    int64_t saved = log->ps.map_end;
    kb_log_snapshot_path(p, sizeof(p), log->dir, offset);
    log->ps.map_end = offset;
    (void)kb_pstate_write_snapshot(&log->ps, p);
    log->ps.map_end = saved;
}

typedef struct kb_replay_ctx_s {
    kb_log_t *log;
    int64_t from; /* apply batches with base ≥ from */
    int64_t upto; /* and base < upto */
    int add_txns; /* record aborted txns in the segment (recovery) */
    int assign_epochs;
    int err;
} kb_replay_ctx_t;

static int kb_log_replay_cb(void *opaque, kb_seg_t *seg, const kp_batch_t *b, int64_t pos)
{
    kb_replay_ctx_t *rc = opaque;
    kb_aborted_txn_t *ab = NULL;
    size_t nab = 0, i;
    int r;
    (void)pos;
    if (b->hdr.baseOffset < rc->from || b->hdr.baseOffset >= rc->upto)
        return 0;
    if (rc->assign_epochs)
        kb_epoch_assign(&rc->log->ec, b->hdr.partitionLeaderEpoch, b->hdr.baseOffset);
    r = kb_pstate_apply(&rc->log->ps, b, rc->log->hw, &ab, &nab);
    if (r && r != KP_E_CORRUPT && r != KP_E_UNSUPPORTED && r != KP_E_TOO_LARGE) {
        rc->err = r;
        return -1;
    }
    if (rc->add_txns)
        for (i = 0; i < nab; i++)
            kb_seg_add_txn(seg, &ab[i]);
    free(ab);
    return 0;
}

/* Rebuild producer state for offsets < @p upto from the best snapshot plus replay. */
static int kb_log_rebuild_pstate(kb_log_t *log, int64_t upto)
{
    int64_t *offs;
    size_t n, i, s;
    int64_t from = -1;
    char p[4200];
    int rc;
    kb_pstate_clear(&log->ps);
    rc = kb_log_list(log->dir, ".snapshot", &offs, &n);
    if (rc)
        return rc;
    for (i = n; i > 0; i--) {
        if (offs[i - 1] > upto)
            continue;
        kb_log_snapshot_path(p, sizeof(p), log->dir, offs[i - 1]);
        if (kb_pstate_read_snapshot(&log->ps, p) == 0) {
            from = offs[i - 1];
            break;
        }
        unlink(p); /* corrupt: never trusted again */
    }
    free(offs);
    if (from < 0)
        kb_pstate_clear(&log->ps);
    log->ps.map_end = from < 0 ? 0 : from;
    for (s = from < 0 ? 0 : kb_log_floor_seg(log, from); s < log->nsegs; s++) {
        kb_seg_t *seg = log->segs[s];
        kb_replay_ctx_t ctx = {log, from < 0 ? INT64_MIN : from, upto, 0, 0, 0};
        int64_t end;
        if (seg->base >= upto)
            break;
        if (seg->next_offset <= ctx.from)
            continue;
        rc = kb_seg_scan(seg, from < 0 ? 0 : kb_seg_lookup_pos(seg, from), INT64_MIN, 0,
                         kb_log_replay_cb, &ctx, &end);
        if (ctx.err)
            return ctx.err;
        if (rc < 0)
            return rc;
    }
    log->ps.map_end = upto;
    kb_pstate_on_hw(&log->ps, log->hw);
    return 0;
}

static int kb_log_flush_locked(kb_log_t *log);

/* ---------- open / recovery ---------- */

typedef struct kb_tail_ctx_s {
    int32_t interval;
    int64_t expect_first;
    int first;
    int bad;
} kb_tail_ctx_t;

static int kb_log_tail_cb(void *opaque, kb_seg_t *seg, const kp_batch_t *b, int64_t pos)
{
    kb_tail_ctx_t *tc = opaque;
    if (tc->first) {
        tc->first = 0;
        if (tc->expect_first >= 0 && b->hdr.baseOffset != tc->expect_first) {
            tc->bad = 1;
            return -1;
        }
        /* the batch at the last index entry is already indexed; account it without a new
         * index entry */
        if (b->hdr.maxTimestamp > seg->max_ts) {
            seg->max_ts = b->hdr.maxTimestamp;
            seg->max_ts_offset = kp_batch_hdr_last_offset(&b->hdr);
        }
        if (pos == 0)
            seg->roll_ts = b->hdr.maxTimestamp;
        seg->size = pos + (int64_t)b->size;
        seg->next_offset = kp_batch_hdr_last_offset(&b->hdr) + 1;
        seg->bytes_since_idx = (int64_t)b->size;
        return 0;
    }
    kb_seg_track_batch(seg, &b->hdr, pos, (int64_t)b->size, tc->interval);
    return 0;
}

/* Trust-but-verify a segment below the recovery point: indexes bounds-checked, then every batch
 * from the last index entry to EOF validated (CRC included) and ending exactly at EOF.
 * Returns 0 if the segment is sound, <0 if it needs a full recovery. */
static int kb_log_check_segment(kb_log_t *log, kb_seg_t *seg)
{
    kb_tail_ctx_t tc = {log->cfg.index_interval_bytes, -1, 1, 0};
    int64_t from = 0, end;
    int rc;
    if (kb_seg_load_indexes(seg, log->cfg.segment_index_bytes / KB_IDX_ENT_SIZE))
        return -1;
    if (seg->idx_cnt) {
        from = seg->idx[seg->idx_cnt - 1].pos;
        tc.expect_first = seg->base + seg->idx[seg->idx_cnt - 1].rel;
    } else if (seg->flushed_size > 0) {
        return -1; /* a non-empty segment always has an index entry for its first batch */
    }
    rc = kb_seg_scan(seg, from, seg->base, 1, kb_log_tail_cb, &tc, &end);
    if (rc != 0 || tc.bad || end != seg->flushed_size)
        return -1;
    if (seg->roll_ts < 0 && seg->size > 0) {
        kp_batch_hdr_t h;
        int64_t p;
        if (kb_seg_find(seg, seg->base, seg->size, &p, &h) == 1)
            seg->roll_ts = h.maxTimestamp;
    }
    return 0;
}

typedef struct kb_recov_ctx_s {
    kb_log_t *log;
    int err;
} kb_recov_ctx_t;

static int kb_log_recover_cb(void *opaque, kb_seg_t *seg, const kp_batch_t *b, int64_t pos)
{
    kb_recov_ctx_t *rc = opaque;
    kb_replay_ctx_t ctx = {rc->log, INT64_MIN, INT64_MAX, 1, 1, 0};
    if (kb_log_replay_cb(&ctx, seg, b, pos) < 0) {
        rc->err = ctx.err;
        return -1;
    }
    return 0;
}

static int kb_log_epoch_rebuild_cb(void *opaque, kb_seg_t *seg, const kp_batch_t *b, int64_t pos)
{
    kb_log_t *log = opaque;
    (void)seg;
    (void)pos;
    kb_epoch_assign(&log->ec, b->hdr.partitionLeaderEpoch, b->hdr.baseOffset);
    return 0;
}

static void kb_log_drop_segments_from(kb_log_t *log, size_t k)
{
    while (log->nsegs > k) {
        kb_seg_t *seg = log->segs[--log->nsegs];
        kb_seg_delete_files(seg);
        kb_seg_unref(seg);
    }
}

static int kb_log_load(kb_log_t *log, const kb_log_open_opts_t *opts, char *errstr, size_t errsz)
{
    int64_t *bases = NULL;
    size_t n = 0, i, k;
    int rc, err = 0, epoch_state;
    int64_t rp = opts->clean_shutdown ? INT64_MAX : opts->recovery_point;

    rc = kb_log_int_recover_swaps(log->dir);
    if (rc) {
        snprintf(errstr, errsz, "%s: cannot complete an interrupted cleaner swap", log->dir);
        return rc;
    }
    rc = kb_log_list(log->dir, ".log", &bases, &n);
    if (rc) {
        snprintf(errstr, errsz, "%s: cannot list segments", log->dir);
        return rc;
    }
    for (i = 0; i < n; i++) {
        kb_seg_t *seg = kb_seg_open(log->dir, bases[i], &err);
        if (!seg || kb_log_push_seg(log, seg)) {
            kb_seg_unref(seg);
            snprintf(errstr, errsz, "%s: cannot open segment %" PRId64, log->dir, bases[i]);
            free(bases);
            return err ? err : KB_STO_NOMEM;
        }
    }
    free(bases);

    /* Find the first segment that needs recovery: the one containing the recovery point, or
     * the first whose indexes or tail don't check out. */
    k = log->nsegs;
    for (i = 0; i < log->nsegs; i++) {
        kb_seg_t *seg = log->segs[i];
        int unflushed =
            rp < 0 || (i + 1 < log->nsegs ? log->segs[i + 1]->base > rp : 1) || seg->base >= rp;
        if (!opts->clean_shutdown && unflushed) {
            k = i;
            break;
        }
        if (kb_log_check_segment(log, seg)) {
            k = i;
            break;
        }
        if (i > 0 && seg->base < log->segs[i - 1]->next_offset) {
            k = i;
            break;
        }
    }

    /* Epoch cache: the checkpoint, or rebuilt from batch headers below k. */
    epoch_state = kb_epoch_load(&log->ec, log->epoch_path);
    if (epoch_state != 0) {
        kb_epoch_init(&log->ec);
        for (i = 0; i < k; i++) {
            int64_t end;
            kb_seg_scan(log->segs[i], 0, INT64_MIN, 0, kb_log_epoch_rebuild_cb, log, &end);
        }
    }

    if (log->nsegs == 0) {
        int64_t base = opts->log_start_offset > 0 ? opts->log_start_offset : 0;
        kb_seg_t *seg = kb_seg_create(log->dir, base, kb_log_now(log), &err);
        if (!seg || kb_log_push_seg(log, seg)) {
            kb_seg_unref(seg);
            snprintf(errstr, errsz, "%s: cannot create the first segment", log->dir);
            return err ? err : KB_STO_NOMEM;
        }
        k = 1;
    }

    /* Producer state up to the first segment to recover (snapshot + replay), then full
     * recovery of that segment and everything after it, rebuilding indexes, txn index, producer
     * state and epochs as we go. */
    log->hw = 0;
    rc = kb_log_rebuild_pstate(log, k < log->nsegs ? log->segs[k]->base
                                                   : log->segs[log->nsegs - 1]->next_offset);
    if (rc) {
        snprintf(errstr, errsz, "%s: cannot rebuild producer state", log->dir);
        return rc;
    }
    for (i = k; i < log->nsegs; i++) {
        kb_seg_t *seg = log->segs[i];
        kb_recov_ctx_t ctx = {log, 0};
        kb_epoch_truncate_end(&log->ec, seg->base);
        rc = kb_seg_recover(seg, log->cfg.index_interval_bytes, kb_log_recover_cb, &ctx);
        if (ctx.err || rc < 0) {
            snprintf(errstr, errsz, "%s: recovery of segment %" PRId64 " failed", log->dir,
                     seg->base);
            return ctx.err ? ctx.err : rc;
        }
        if (i > 0 && seg->base < log->segs[i - 1]->next_offset) {
            kb_log_drop_segments_from(log, i);
            break;
        }
        if (rc == 1 || kb_seg_fsync(seg)) {
            /* torn or corrupt tail: nothing after it can be trusted */
            kb_log_drop_segments_from(log, i + 1);
            kb_seg_fsync(seg);
            break;
        }
    }
    if (log->nsegs == 0)
        return KB_STO_CORRUPT_LOG;

    log->leo = kb_log_active(log)->next_offset;
    log->ps.map_end = log->leo;
    log->log_start = log->segs[0]->base;
    if (opts->log_start_offset > log->log_start)
        log->log_start = opts->log_start_offset;
    if (log->log_start > log->leo)
        log->log_start = log->leo;
    log->hw = opts->high_watermark < 0 ? log->log_start : opts->high_watermark;
    if (log->hw < log->log_start)
        log->hw = log->log_start;
    if (log->hw > log->leo)
        log->hw = log->leo;
    kb_pstate_on_hw(&log->ps, log->hw);
    kb_log_update_unstable(log);
    log->recovery_point = log->leo;
    log->cleaner_offset = opts->cleaner_offset;
    if (log->cleaner_offset < log->log_start)
        log->cleaner_offset = log->log_start;
    if (log->cleaner_offset > log->leo)
        log->cleaner_offset = log->leo;

    if (kb_epoch_truncate_end(&log->ec, log->leo) |
            kb_epoch_truncate_start(&log->ec, log->log_start) ||
        epoch_state != 0 || k < log->nsegs)
        kb_log_store_epochs(log);

    /* Snapshots beyond the log end are stale; keep a fresh one at the LEO after a recovery. */
    kb_log_delete_snapshots(log, log->segs[0]->base, log->leo);
    if (k < log->nsegs || !opts->clean_shutdown)
        kb_log_take_snapshot(log, log->leo);
    kb_fsync_dir(log->dir);
    return 0;
}

static int kb_mkdirs(const char *path)
{
    char buf[4096];
    size_t i, n = strlen(path);
    if (n >= sizeof(buf))
        return -1;
    memcpy(buf, path, n + 1);
    for (i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0755) && errno != EEXIST)
                return -1;
            buf[i] = c;
        }
    }
    return 0;
}

kb_log_t *kb_log_open(const char *dir, const kb_log_config_t *cfg, const kb_log_open_opts_t *opts,
                      char *errstr, size_t errstr_size)
{
    kb_log_t *log;
    kb_log_open_opts_t defopts;
    char p[4200];
    if (!opts) {
        kb_log_open_opts_init(&defopts);
        opts = &defopts;
    }
    if (kb_mkdirs(dir)) {
        snprintf(errstr, errstr_size, "%s: cannot create directory: %s", dir, strerror(errno));
        return NULL;
    }
    log = calloc(1, sizeof(*log));
    if (!log) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    log->dir = strdup(dir);
    snprintf(p, sizeof(p), "%s/leader-epoch-checkpoint", dir);
    log->epoch_path = strdup(p);
    if (cfg)
        log->cfg = *cfg;
    else
        kb_log_config_defaults(&log->cfg);
    log->clock = opts->clock ? opts->clock : kb_log_realtime;
    log->clock_opaque = opts->clock_opaque;
    pthread_mutex_init(&log->wlock, NULL);
    pthread_rwlock_init(&log->rw, NULL);
    kb_epoch_init(&log->ec);
    kb_pstate_init(&log->ps);
    log->first_unstable = -1;
    if (!log->dir || !log->epoch_path || kb_log_load(log, opts, errstr, errstr_size)) {
        if (!log->dir || !log->epoch_path)
            snprintf(errstr, errstr_size, "out of memory");
        kb_log_close(log, 0);
        return NULL;
    }
    log->last_flush_ms = kb_log_now(log);
    return log;
}

void kb_log_close(kb_log_t *log, int clean)
{
    size_t i;
    if (!log)
        return;
    if (clean && log->nsegs) {
        pthread_mutex_lock(&log->wlock);
        kb_seg_t *act = kb_log_active(log);
        kb_log_flush_locked(log);
        kb_seg_write_indexes(act, 0);
        kb_log_take_snapshot(log, log->leo);
        kb_fsync_dir(log->dir);
        pthread_mutex_unlock(&log->wlock);
    }
    for (i = 0; i < log->nsegs; i++)
        kb_seg_unref(log->segs[i]);
    free(log->segs);
    kb_epoch_free(&log->ec);
    kb_pstate_free(&log->ps);
    pthread_mutex_destroy(&log->wlock);
    pthread_rwlock_destroy(&log->rw);
    free(log->dir);
    free(log->epoch_path);
    free(log);
}

void kb_log_set_config(kb_log_t *log, const kb_log_config_t *cfg)
{
    pthread_mutex_lock(&log->wlock);
    pthread_rwlock_wrlock(&log->rw);
    log->cfg = *cfg;
    pthread_rwlock_unlock(&log->rw);
    pthread_mutex_unlock(&log->wlock);
}

void kb_log_get_config(kb_log_t *log, kb_log_config_t *cfg)
{
    pthread_rwlock_rdlock(&log->rw);
    *cfg = log->cfg;
    pthread_rwlock_unlock(&log->rw);
}

const char *kb_log_dir(const kb_log_t *log)
{
    return log->dir;
}

void kb_log_set_listener(kb_log_t *log, kb_log_listener_fn fn, void *opaque)
{
    pthread_mutex_lock(&log->wlock);
    pthread_rwlock_wrlock(&log->rw);
    log->listener = fn;
    log->listener_opaque = opaque;
    pthread_rwlock_unlock(&log->rw);
    pthread_mutex_unlock(&log->wlock);
}

/* ---------- flush ---------- */

static int kb_log_flush_locked(kb_log_t *log)
{
    size_t i;
    int rc;
    for (i = kb_log_floor_seg(log, log->recovery_point); i < log->nsegs; i++) {
        kb_seg_t *seg = log->segs[i];
        if (seg->flushed_size == seg->size && seg->idx_flushed == seg->idx_cnt &&
            seg->tidx_flushed == seg->tidx_cnt && seg->txn_flushed == seg->txn_cnt)
            continue;
        rc = kb_seg_fsync(seg);
        if (rc)
            return rc;
    }
    pthread_rwlock_wrlock(&log->rw);
    log->recovery_point = log->leo;
    pthread_rwlock_unlock(&log->rw);
    log->unflushed_msgs = 0;
    log->last_flush_ms = kb_log_now(log);
    return 0;
}

int kb_log_flush(kb_log_t *log)
{
    int rc;
    pthread_mutex_lock(&log->wlock);
    rc = kb_log_flush_locked(log);
    pthread_mutex_unlock(&log->wlock);
    return rc;
}

int kb_log_flush_if_due(kb_log_t *log, int64_t now_ms)
{
    int rc = 0;
    pthread_mutex_lock(&log->wlock);
    if (log->recovery_point < log->leo && log->cfg.flush_ms != INT64_MAX &&
        now_ms - log->last_flush_ms >= log->cfg.flush_ms)
        rc = kb_log_flush_locked(log);
    pthread_mutex_unlock(&log->wlock);
    return rc;
}

/* ---------- append ---------- */

static int kb_log_roll(kb_log_t *log, int64_t new_base)
{
    kb_seg_t *old = kb_log_active(log), *seg;
    int err = 0, rc;
    if (old->size == 0) {
        /* empty active segment: replace it by one at new_base */
        if (old->base == new_base)
            return 0;
        seg = kb_seg_create(log->dir, new_base, kb_log_now(log), &err);
        if (!seg)
            return err;
        pthread_rwlock_wrlock(&log->rw);
        log->segs[log->nsegs - 1] = seg;
        log->gen++;
        pthread_rwlock_unlock(&log->rw);
        kb_seg_delete_files(old);
        kb_seg_unref(old);
        return 0;
    }
    pthread_rwlock_wrlock(&log->rw);
    /* final time index entry for the inactive segment, as Kafka appends on roll */
    kb_seg_tidx_final(old);
    pthread_rwlock_unlock(&log->rw);
    rc = kb_seg_fsync(old);
    if (rc)
        return rc;
    kb_log_take_snapshot(log, log->leo);
    seg = kb_seg_create(log->dir, new_base, kb_log_now(log), &err);
    if (!seg)
        return err;
    pthread_rwlock_wrlock(&log->rw);
    rc = kb_log_push_seg(log, seg);
    if (!rc && log->recovery_point >= old->base)
        log->recovery_point = log->leo;
    pthread_rwlock_unlock(&log->rw);
    if (rc) {
        kb_seg_delete_files(seg);
        kb_seg_unref(seg);
        return rc;
    }
    kb_fsync_dir(log->dir);
    return 0;
}

static int kb_log_maybe_roll(kb_log_t *log, const kp_batch_hdr_t *h, size_t size)
{
    kb_seg_t *act = kb_log_active(log);
    const kb_log_config_t *cfg = &log->cfg;
    int64_t last = kp_batch_hdr_last_offset(h);
    int64_t waited;
    size_t max_idx = (size_t)cfg->segment_index_bytes / KB_IDX_ENT_SIZE;
    size_t max_tidx = (size_t)cfg->segment_index_bytes / KB_TIDX_ENT_SIZE;
    if (act->size == 0) {
        /* An empty active segment takes any batch whose offsets fit its base. */
        if (h->baseOffset < act->base || last - act->base > INT32_MAX)
            return kb_log_roll(log, h->baseOffset);
        return 0;
    }
    if (act->roll_ts >= 0)
        waited = h->maxTimestamp - act->roll_ts;
    else
        waited = kb_log_now(log) - act->created_ms;
    if (act->size + (int64_t)size > cfg->segment_bytes || waited > cfg->segment_ms ||
        act->idx_cnt >= max_idx || act->tidx_cnt + 1 >= max_tidx || last - act->base > INT32_MAX ||
        act->size + (int64_t)size > UINT32_MAX)
        return kb_log_roll(log, h->baseOffset);
    return 0;
}

/* Write one batch at the log end and apply it to every derived structure. */
static int kb_log_apply_batch(kb_log_t *log, const kp_batch_t *b)
{
    kb_seg_t *act;
    kb_aborted_txn_t *ab = NULL;
    size_t nab = 0, i;
    int64_t pos;
    int rc, epoch_changed;
    rc = kb_log_maybe_roll(log, &b->hdr, b->size);
    if (rc)
        return rc;
    act = kb_log_active(log);
    pos = act->size;
    rc = kb_pwrite_full(act->fd, b->buf, b->size, pos);
    if (rc) {
        /* leave nothing half-written behind */
        if (ftruncate(act->fd, (off_t)pos)) {
            /* the next open's recovery cuts the torn batch */
        }
        return rc;
    }
    /* The batch is in the file: it must be published whatever happens to the derived state
     * (an unreadable control record carries no producer state; out of memory here would only
     * lose duplicate detection for this producer until the next rebuild). */
    (void)kb_pstate_apply(&log->ps, b, log->hw, &ab, &nab);
    pthread_rwlock_wrlock(&log->rw);
    kb_seg_track_batch(act, &b->hdr, pos, (int64_t)b->size, log->cfg.index_interval_bytes);
    for (i = 0; i < nab; i++)
        kb_seg_add_txn(act, &ab[i]);
    epoch_changed = 0;
    if (b->hdr.partitionLeaderEpoch >= 0 &&
        (log->ec.n == 0 || b->hdr.partitionLeaderEpoch > log->ec.v[log->ec.n - 1].epoch))
        epoch_changed = kb_epoch_assign(&log->ec, b->hdr.partitionLeaderEpoch, b->hdr.baseOffset);
    log->leo = kp_batch_hdr_last_offset(&b->hdr) + 1;
    log->ps.map_end = log->leo;
    kb_log_update_unstable(log);
    pthread_rwlock_unlock(&log->rw);
    free(ab);
    if (epoch_changed)
        kb_log_store_epochs(log);
    log->unflushed_msgs += b->hdr.recordCount > 0 ? b->hdr.recordCount : 1;
    return 0;
}

static void kb_info_add(kb_append_info_t *info, const kp_batch_t *b)
{
    if (info->batch_count == 0)
        info->first_offset = b->hdr.baseOffset;
    info->last_offset = kp_batch_hdr_last_offset(&b->hdr);
    if (b->hdr.maxTimestamp > info->max_timestamp)
        info->max_timestamp = b->hdr.maxTimestamp;
    info->batch_count++;
    info->record_count += b->hdr.recordCount;
    info->size += (int64_t)b->size;
}

static void kb_info_init(kb_append_info_t *info)
{
    memset(info, 0, sizeof(*info));
    info->first_offset = -1;
    info->last_offset = -1;
    info->log_append_time = -1;
    info->max_timestamp = -1;
}

static int kb_log_after_append(kb_log_t *log)
{
    if (log->unflushed_msgs >= log->cfg.flush_messages)
        return kb_log_flush_locked(log);
    return 0;
}

static int kb_log_check_record_ts(const kb_log_config_t *cfg, int64_t ts, int64_t now)
{
    if (cfg->message_timestamp_type != KB_TS_CREATE_TIME)
        return 0;
    if (ts < 0)
        return 0; /* no timestamp: Kafka accepts -1 */
    if (cfg->message_ts_before_max_ms != INT64_MAX && now - ts > cfg->message_ts_before_max_ms)
        return KB_STO_INVALID_TIMESTAMP;
    if (cfg->message_ts_after_max_ms != INT64_MAX && ts - now > cfg->message_ts_after_max_ms)
        return KB_STO_INVALID_TIMESTAMP;
    return 0;
}

static size_t kb_log_decompress_cap(const kb_log_config_t *cfg)
{
    size_t cap = cfg->max_message_bytes > 0 ? (size_t)cfg->max_message_bytes * 64 : 0;
    return cap < ((size_t)16 << 20) ? (size_t)16 << 20 : cap;
}

int kb_log_validate_produce(const kb_log_config_t *cfg, const uint8_t *buf, size_t len,
                            int64_t now_ms, const char **errstr)
{
    kp_batch_iter_t it;
    kp_batch_t b;
    int r, n = 0;
    const char *dummy;
    if (!errstr)
        errstr = &dummy;
    *errstr = NULL;
    if (len == 0) {
        *errstr = "no record batches";
        return KB_STO_INVALID_RECORD;
    }
    kp_batch_iter_init(&it, buf, len, 0, 0);
    while ((r = kp_batch_iter_next(&it, &b)) == 1) {
        kp_record_iter_t ri;
        kp_record_t rec;
        kp_writer_t scratch;
        int32_t expect = 0;
        n++;
        if (b.size > (size_t)cfg->max_message_bytes) {
            *errstr = "batch larger than max.message.bytes";
            return KB_STO_RECORD_TOO_LARGE;
        }
        if (kp_batch_hdr_is_control(&b.hdr)) {
            *errstr = "control batches are not accepted from clients";
            return KB_STO_INVALID_RECORD;
        }
        if (b.hdr.recordCount <= 0 || b.hdr.lastOffsetDelta != b.hdr.recordCount - 1) {
            *errstr = "record count does not match lastOffsetDelta";
            return KB_STO_INVALID_RECORD;
        }
        if (b.hdr.producerId >= 0 && b.hdr.baseSequence < 0) {
            *errstr = "idempotent batch without a sequence";
            return KB_STO_INVALID_RECORD;
        }
        if (kp_batch_hdr_is_transactional(&b.hdr) && b.hdr.producerId < 0) {
            *errstr = "transactional batch without a producer id";
            return KB_STO_INVALID_RECORD;
        }
        if (kb_log_check_record_ts(cfg, b.hdr.maxTimestamp, now_ms)) {
            *errstr = "timestamp out of range";
            return KB_STO_INVALID_TIMESTAMP;
        }
        /* Record-level checks (offset deltas contiguous, keys on compacted topics, each record's
         * timestamp) need the records; compressed batches are decompressed for it, as Kafka
         * does on the leader. The decompressed size is capped (64 x max.message.bytes, at least
         * 16 MiB) so that a decompression bomb is refused instead of inflated. */
        kp_writer_init(&scratch);
        r = kp_record_iter_init(&ri, &b, &scratch, kb_log_decompress_cap(cfg));
        if (r) {
            kp_writer_free(&scratch);
            *errstr = "cannot decompress the records";
            return KB_STO_CORRUPT_MESSAGE;
        }
        while ((r = kp_record_iter_next(&ri, &rec)) == 1) {
            if (rec.offsetDelta != expect++) {
                kp_writer_free(&scratch);
                *errstr = "record offsets are not contiguous";
                return KB_STO_INVALID_RECORD;
            }
            if ((cfg->cleanup_policy & KB_CLEANUP_COMPACT) && rec.key.len < 0) {
                kp_writer_free(&scratch);
                *errstr = "compacted topic cannot accept a record without a key";
                return KB_STO_INVALID_RECORD;
            }
            if (kb_log_check_record_ts(cfg, rec.timestamp, now_ms)) {
                kp_writer_free(&scratch);
                *errstr = "timestamp out of range";
                return KB_STO_INVALID_TIMESTAMP;
            }
        }
        kp_writer_free(&scratch);
        if (r < 0) {
            *errstr = ri.errstr ? ri.errstr : "corrupt records";
            return KB_STO_CORRUPT_MESSAGE;
        }
    }
    if (r < 0) {
        *errstr = it.errstr;
        if (r == KP_E_UNSUPPORTED)
            return KB_STO_UNSUPPORTED_FORMAT;
        if (r == KP_E_TOO_LARGE)
            return KB_STO_RECORD_TOO_LARGE;
        return KB_STO_CORRUPT_MESSAGE;
    }
    if (it.trailing) {
        *errstr = "partial batch at the end";
        return KB_STO_CORRUPT_MESSAGE;
    }
    (void)n;
    return 0;
}

static int kb_log_leader_checks(kb_log_t *log, const kp_batch_t *b, int origin,
                                kb_append_info_t *info)
{
    const kp_batch_hdr_t *h = &b->hdr;
    kb_pentry_t *e;
    int64_t df = -1, dl = -1;
    int r;
    if (h->producerId < 0)
        return 0;
    e = kb_pstate_get(&log->ps, h->producerId);
    if (kp_batch_hdr_is_control(h)) {
        if (e && e->epoch != KP_NO_PRODUCER_EPOCH && h->producerEpoch < e->epoch)
            return KB_STO_INVALID_PRODUCER_EPOCH;
        if (e && origin == KB_ORIGIN_COORDINATOR) {
            int32_t ce = -1;
            if (kb_rb_control_type(b, &ce) >= 0 && ce >= 0 && e->coord_epoch > ce)
                return KB_STO_COORDINATOR_FENCED;
        }
        return 0;
    }
    if (origin != KB_ORIGIN_CLIENT)
        return 0;
    r = kb_pstate_check(&log->ps, h->producerId, h->producerEpoch, h->baseSequence,
                        (int32_t)(((int64_t)h->baseSequence + h->lastOffsetDelta) % 2147483648LL),
                        &df, &dl);
    switch (r) {
    case KB_SEQ_DUPLICATE:
        info->first_offset = df;
        info->last_offset = dl;
        return KB_STO_DUPLICATE_SEQUENCE;
    case KB_SEQ_OUT_OF_ORDER:
        return KB_STO_OUT_OF_ORDER_SEQUENCE;
    case KB_SEQ_INVALID_PRODUCER_EPOCH:
        return KB_STO_INVALID_PRODUCER_EPOCH;
    }
    return 0;
}

int kb_log_append_leader(kb_log_t *log, uint8_t *buf, size_t len, int32_t leader_epoch, int origin,
                         unsigned flags, kb_append_info_t *info)
{
    kp_batch_iter_t it;
    kp_batch_t b;
    kb_append_info_t dummy;
    int r, rc = 0, nb = 0, has_pid = 0;
    int64_t now;
    if (!info)
        info = &dummy;
    kb_info_init(info);
    now = kb_log_now(log);
    if (origin == KB_ORIGIN_CLIENT && !(flags & KB_APPEND_F_SKIP_VALIDATE)) {
        /* CRC and record checks (decompression included) need no log state: done before the
         * writer mutex so concurrent producers to one partition validate in parallel */
        kb_log_config_t cfg;
        kb_log_get_config(log, &cfg);
        rc = kb_log_validate_produce(&cfg, buf, len, now, NULL);
        if (rc)
            return rc;
    }
    pthread_mutex_lock(&log->wlock);
    /* pass 1: framing and producer-state checks before anything is written */
    kp_batch_iter_init(&it, buf, len, 0, KP_BATCH_F_SKIP_CRC);
    while ((r = kp_batch_iter_next(&it, &b)) == 1) {
        nb++;
        if (b.hdr.producerId >= 0)
            has_pid = 1;
        rc = kb_log_leader_checks(log, &b, origin, info);
        if (rc)
            goto out;
    }
    if (r < 0 || it.trailing || nb == 0) {
        rc = r == KP_E_UNSUPPORTED ? KB_STO_UNSUPPORTED_FORMAT : KB_STO_CORRUPT_MESSAGE;
        goto out;
    }
    if (has_pid && nb > 1 && origin == KB_ORIGIN_CLIENT) {
        rc = KB_STO_INVALID_RECORD; /* idempotent producers send one batch per partition */
        goto out;
    }
    /* pass 2: assign offsets, stamp, write */
    info->log_start_offset = log->log_start;
    kp_batch_iter_init(&it, buf, len, 0, KP_BATCH_F_SKIP_CRC);
    while (kp_batch_iter_next(&it, &b) == 1) {
        uint8_t *p = buf + (b.buf - buf);
        kp_batch_set_base_offset(p, b.size, log->leo);
        kp_batch_set_partition_leader_epoch(p, b.size, leader_epoch);
        if (log->cfg.message_timestamp_type == KB_TS_LOG_APPEND_TIME &&
            !kp_batch_hdr_is_control(&b.hdr)) {
            kb_rb_set_log_append_time(p, b.size, now);
            info->log_append_time = now;
        }
        kp_batch_hdr_decode(p, b.size, &b.hdr);
        rc = kb_log_apply_batch(log, &b);
        if (rc)
            goto out;
        kb_info_add(info, &b);
    }
    rc = kb_log_after_append(log);
out:
    pthread_mutex_unlock(&log->wlock);
    if (!rc)
        kb_log_notify(log);
    return rc;
}

int kb_log_append_raw(kb_log_t *log, const uint8_t *buf, size_t len, kb_append_info_t *info)
{
    kp_chunk_info_t ci;
    kp_batch_iter_t it;
    kp_batch_t b;
    kb_append_info_t dummy;
    int rc;
    if (!info)
        info = &dummy;
    kb_info_init(info);
    if (len == 0)
        return 0;
    rc = kp_batch_chunk_check(buf, len, 0, 0, &ci);
    if (rc)
        return rc == KP_E_UNSUPPORTED ? KB_STO_UNSUPPORTED_FORMAT : KB_STO_CORRUPT_MESSAGE;
    if (ci.trailing || ci.valid_bytes != len)
        return KB_STO_CORRUPT_MESSAGE;
    pthread_mutex_lock(&log->wlock);
    info->log_start_offset = log->log_start;
    if (ci.first_offset < log->leo) {
        rc = KB_STO_NON_MONOTONIC;
        goto out;
    }
    kp_batch_iter_init(&it, buf, len, 0, KP_BATCH_F_SKIP_CRC);
    while (kp_batch_iter_next(&it, &b) == 1) {
        if (b.hdr.lastOffsetDelta < 0) {
            rc = KB_STO_CORRUPT_MESSAGE;
            goto out;
        }
        rc = kb_log_apply_batch(log, &b);
        if (rc)
            goto out;
        kb_info_add(info, &b);
    }
    rc = kb_log_after_append(log);
out:
    pthread_mutex_unlock(&log->wlock);
    if (!rc)
        kb_log_notify(log);
    return rc;
}

int kb_log_append_control(kb_log_t *log, int16_t type, int64_t pid, int16_t pepoch,
                          int32_t coord_epoch, int32_t leader_epoch, kb_append_info_t *info)
{
    kp_batch_opts_t o;
    kp_writer_t wr;
    int rc;
    kp_batch_opts_init(&o);
    if (type == KP_CONTROL_TYPE_MIRROR_PID_RESET) {
        kp_batch_opts_mirror_pid_reset(&o, 0, leader_epoch);
    } else {
        o.producerId = pid;
        o.producerEpoch = pepoch;
        o.transactional = true;
        o.partitionLeaderEpoch = leader_epoch;
    }
    kp_writer_init(&wr);
    rc = kp_batch_build_control(&wr, &o, type, coord_epoch, kb_log_now(log));
    if (rc) {
        kp_writer_free(&wr);
        return KB_STO_INVALID;
    }
    rc = kb_log_append_leader(log, wr.buf, wr.len, leader_epoch, KB_ORIGIN_COORDINATOR, 0, info);
    kp_writer_free(&wr);
    return rc;
}

/* ---------- reading ---------- */

static int64_t kb_log_upper(const kb_log_t *log, int isolation)
{
    switch (isolation) {
    case KB_ISOLATION_LEO:
        return log->leo;
    case KB_ISOLATION_COMMITTED:
        return kb_log_lso_locked(log);
    default:
        return log->hw;
    }
}

int kb_log_read(kb_log_t *log, int64_t offset, int32_t max_bytes, int isolation, int min_one,
                kb_log_read_t *out)
{
    size_t si;
    int64_t upper;
    memset(out, 0, sizeof(*out));
    out->fd = -1;
    out->first_offset = -1;
    out->next_offset = offset;
    pthread_rwlock_rdlock(&log->rw);
    out->hw = log->hw;
    out->lso = kb_log_lso_locked(log);
    out->leo = log->leo;
    out->log_start = log->log_start;
    if (offset < log->log_start || offset > log->leo) {
        pthread_rwlock_unlock(&log->rw);
        return KB_STO_OFFSET_OUT_OF_RANGE;
    }
    upper = kb_log_upper(log, isolation);
    for (si = kb_log_floor_seg(log, offset); si < log->nsegs && offset < upper; si++) {
        kb_seg_t *seg = log->segs[si];
        int64_t limit = seg->size, pos, p, total = 0, next = offset, from;
        kp_batch_hdr_t h;
        int r;
        if (seg->base >= upper)
            break;
        from = kb_seg_lookup_pos(seg, offset); /* the in-memory index needs the lock */
        kb_seg_ref(seg);
        pthread_rwlock_unlock(&log->rw);
        /* From here on the segment is read without the lock: bytes below `limit` are
         * immutable unless the log is truncated, and every header is bounds-checked. */
        r = kb_seg_find_from(seg, from, offset, limit, &pos, &h);
        if (r != 1) {
            int64_t b0 = seg->base;
            kb_seg_unref(seg);
            pthread_rwlock_rdlock(&log->rw);
            if (r < 0)
                break;
            si = kb_log_floor_seg(log, b0); /* the list may have changed meanwhile */
            continue;
        }
        p = pos;
        while (p + KP_BATCH_HEADER_SIZE <= limit) {
            uint8_t hb[KP_BATCH_HEADER_SIZE];
            int64_t sz;
            if (p != pos) {
                if (kb_pread_full(seg->fd, hb, sizeof(hb), p))
                    break;
                kp_batch_hdr_decode(hb, sizeof(hb), &h);
            }
            sz = (int64_t)h.batchLength + KP_BATCH_LOG_OVERHEAD;
            if (h.batchLength < KP_BATCH_MIN_LENGTH || p + sz > limit)
                break;
            if (kp_batch_hdr_last_offset(&h) >= upper)
                break;
            if (total + sz > max_bytes && !(total == 0 && min_one))
                break;
            if (total == 0)
                out->first_offset = h.baseOffset;
            total += sz;
            next = kp_batch_hdr_last_offset(&h) + 1;
            p += sz;
        }
        if (total > 0) {
            out->fd = seg->fd;
            out->pos = pos;
            out->len = total;
            out->next_offset = next;
            out->ref_ = seg;
            return 0;
        }
        kb_seg_unref(seg);
        return 0; /* a batch was there but didn't fit (or is above the bound) */
    }
    pthread_rwlock_unlock(&log->rw);
    return 0;
}

void kb_log_read_release(kb_log_read_t *r)
{
    if (r->ref_)
        kb_seg_unref(r->ref_);
    r->ref_ = NULL;
    r->fd = -1;
}

int kb_log_read_copy(kb_log_t *log, int64_t offset, int32_t max_bytes, int isolation, int min_one,
                     uint8_t **buf, size_t *len, kb_log_read_t *meta)
{
    kb_log_read_t r;
    int rc = kb_log_read(log, offset, max_bytes, isolation, min_one, &r);
    *buf = NULL;
    *len = 0;
    if (rc == 0 && r.len > 0) {
        *buf = malloc((size_t)r.len);
        if (!*buf)
            rc = KB_STO_NOMEM;
        else if (kb_pread_full(r.fd, *buf, (size_t)r.len, r.pos)) {
            free(*buf);
            *buf = NULL;
            rc = KB_STO_IO;
        } else {
            *len = (size_t)r.len;
        }
    }
    kb_log_read_release(&r);
    if (meta)
        *meta = r;
    return rc;
}

int kb_log_aborted_txns(kb_log_t *log, int64_t start, int64_t upper, kb_aborted_txn_t **out,
                        size_t *cnt)
{
    size_t si, i, n = 0, cap = 0;
    kb_aborted_txn_t *v = NULL;
    int done = 0;
    *out = NULL;
    *cnt = 0;
    pthread_rwlock_rdlock(&log->rw);
    for (si = kb_log_floor_seg(log, start); si < log->nsegs && !done; si++) {
        kb_seg_t *seg = log->segs[si];
        for (i = 0; i < seg->txn_cnt && !done; i++) {
            const kb_aborted_txn_t *t = &seg->txns[i];
            if (t->last_offset >= start && t->first_offset < upper) {
                if (n == cap) {
                    size_t nc = cap ? cap * 2 : 8;
                    kb_aborted_txn_t *nv = realloc(v, nc * sizeof(*nv));
                    if (!nv) {
                        pthread_rwlock_unlock(&log->rw);
                        free(v);
                        return KB_STO_NOMEM;
                    }
                    v = nv;
                    cap = nc;
                }
                v[n++] = *t;
            }
            if (t->lso >= upper)
                done = 1;
        }
    }
    pthread_rwlock_unlock(&log->rw);
    *out = v;
    *cnt = n;
    return 0;
}

/* ---------- offsets ---------- */

/* First record in the batch at @p pos with timestamp ≥ ts (ts < 0: the record holding the
 * batch's max timestamp). */
static int kb_log_record_for_ts(kb_seg_t *seg, int64_t pos, const kp_batch_hdr_t *h, int64_t ts,
                                int64_t *offset, int64_t *found_ts)
{
    size_t sz = (size_t)h->batchLength + KP_BATCH_LOG_OVERHEAD;
    uint8_t *buf = malloc(sz);
    kp_batch_t b;
    kp_record_iter_t it;
    kp_record_t r;
    kp_writer_t scratch;
    int rc = -1;
    int64_t want = ts >= 0 ? ts : h->maxTimestamp;
    *offset = h->baseOffset;
    *found_ts = h->maxTimestamp;
    if (!buf)
        return 0;
    kp_writer_init(&scratch);
    if (!kb_pread_full(seg->fd, buf, sz, pos) &&
        !kp_batch_parse(buf, sz, 0, KP_BATCH_F_SKIP_CRC, &b, NULL) &&
        !kp_record_iter_init(&it, &b, &scratch, (size_t)INT32_MAX)) {
        while ((rc = kp_record_iter_next(&it, &r)) == 1) {
            if (r.timestamp >= want) {
                *offset = r.offset;
                *found_ts = r.timestamp;
                break;
            }
        }
    }
    kp_writer_free(&scratch);
    free(buf);
    return 0;
}

int kb_log_offset_for_timestamp(kb_log_t *log, int64_t ts, int64_t *offset, int64_t *found_ts,
                                int32_t *epoch)
{
    size_t si;
    *offset = -1;
    *found_ts = -1;
    if (epoch)
        *epoch = -1;
    pthread_rwlock_rdlock(&log->rw);
    if (ts == KB_TS_LATEST) {
        *offset = log->leo;
        if (epoch)
            *epoch = log->ec.n ? log->ec.v[log->ec.n - 1].epoch : -1;
        pthread_rwlock_unlock(&log->rw);
        return 0;
    }
    if (ts == KB_TS_EARLIEST || ts == KB_TS_EARLIEST_LOCAL) {
        *offset = log->log_start;
        if (epoch)
            *epoch = kb_epoch_for_offset(&log->ec, log->log_start);
        pthread_rwlock_unlock(&log->rw);
        return 0;
    }
    if (ts == KB_TS_MAX_TIMESTAMP) {
        kb_seg_t *best = NULL;
        for (si = 0; si < log->nsegs; si++)
            if (log->segs[si]->max_ts >= 0 && (!best || log->segs[si]->max_ts > best->max_ts))
                best = log->segs[si];
        if (best) {
            kp_batch_hdr_t h;
            int64_t pos, off = best->max_ts_offset, limit = best->size;
            int64_t from = kb_seg_lookup_pos(best, off);
            kb_seg_ref(best);
            pthread_rwlock_unlock(&log->rw);
            if (kb_seg_find_from(best, from, off, limit, &pos, &h) == 1) {
                kb_log_record_for_ts(best, pos, &h, -1, offset, found_ts);
                if (epoch)
                    *epoch = h.partitionLeaderEpoch;
            }
            kb_seg_unref(best);
            return 0;
        }
        pthread_rwlock_unlock(&log->rw);
        return 0;
    }
    if (ts < 0) {
        pthread_rwlock_unlock(&log->rw);
        return KB_STO_INVALID;
    }
    for (si = 0; si < log->nsegs; si++) {
        kb_seg_t *seg = log->segs[si];
        int64_t p, limit, start = log->log_start;
        if (seg->max_ts < ts)
            continue;
        limit = seg->size;
        p = kb_seg_lookup_ts_pos(seg, ts);
        kb_seg_ref(seg);
        pthread_rwlock_unlock(&log->rw);
        while (p + KP_BATCH_HEADER_SIZE <= limit) {
            uint8_t hb[KP_BATCH_HEADER_SIZE];
            kp_batch_hdr_t h;
            if (kb_pread_full(seg->fd, hb, sizeof(hb), p))
                break;
            kp_batch_hdr_decode(hb, sizeof(hb), &h);
            if (h.batchLength < KP_BATCH_MIN_LENGTH)
                break;
            if (h.maxTimestamp >= ts && kp_batch_hdr_last_offset(&h) >= start) {
                kb_log_record_for_ts(seg, p, &h, ts, offset, found_ts);
                if (*offset < start)
                    *offset = start;
                if (epoch)
                    *epoch = h.partitionLeaderEpoch;
                break;
            }
            p += (int64_t)h.batchLength + KP_BATCH_LOG_OVERHEAD;
        }
        kb_seg_unref(seg);
        return 0;
    }
    pthread_rwlock_unlock(&log->rw);
    return 0;
}

#define KB_LOG_GETTER(name, expr)                                                                  \
    int64_t name(kb_log_t *log)                                                                    \
    {                                                                                              \
        int64_t v;                                                                                 \
        pthread_rwlock_rdlock(&log->rw);                                                           \
        v = (expr);                                                                                \
        pthread_rwlock_unlock(&log->rw);                                                           \
        return v;                                                                                  \
    }

KB_LOG_GETTER(kb_log_leo, log->leo)
KB_LOG_GETTER(kb_log_hw, log->hw)
KB_LOG_GETTER(kb_log_lso, kb_log_lso_locked(log))
KB_LOG_GETTER(kb_log_start_offset, log->log_start)
KB_LOG_GETTER(kb_log_recovery_point, log->recovery_point)
KB_LOG_GETTER(kb_log_cleaner_offset, log->cleaner_offset)
KB_LOG_GETTER(kb_log_last_pid_reset, log->ps.last_reset)

int64_t kb_log_size_bytes(kb_log_t *log)
{
    int64_t v = 0;
    size_t i;
    pthread_rwlock_rdlock(&log->rw);
    for (i = 0; i < log->nsegs; i++)
        v += log->segs[i]->size;
    pthread_rwlock_unlock(&log->rw);
    return v;
}

int kb_log_segment_count(kb_log_t *log)
{
    int v;
    pthread_rwlock_rdlock(&log->rw);
    v = (int)log->nsegs;
    pthread_rwlock_unlock(&log->rw);
    return v;
}

int kb_log_segment_bases(kb_log_t *log, int64_t **bases, size_t *cnt)
{
    size_t i;
    pthread_rwlock_rdlock(&log->rw);
    *bases = malloc((log->nsegs + 1) * sizeof(**bases));
    if (!*bases) {
        pthread_rwlock_unlock(&log->rw);
        return KB_STO_NOMEM;
    }
    for (i = 0; i < log->nsegs; i++)
        (*bases)[i] = log->segs[i]->base;
    *cnt = log->nsegs;
    pthread_rwlock_unlock(&log->rw);
    return 0;
}

int kb_log_set_hw(kb_log_t *log, int64_t hw)
{
    pthread_mutex_lock(&log->wlock);
    pthread_rwlock_wrlock(&log->rw);
    if (hw < log->log_start)
        hw = log->log_start;
    if (hw > log->leo)
        hw = log->leo;
    log->hw = hw;
    kb_pstate_on_hw(&log->ps, hw);
    kb_log_update_unstable(log);
    pthread_rwlock_unlock(&log->rw);
    pthread_mutex_unlock(&log->wlock);
    kb_log_notify(log);
    return 0;
}

/* ---------- epochs ---------- */

void kb_log_epoch_end_offset(kb_log_t *log, int32_t epoch, int32_t *out_epoch, int64_t *out_offset)
{
    pthread_rwlock_rdlock(&log->rw);
    kb_epoch_end_offset(&log->ec, epoch, log->leo, out_epoch, out_offset);
    pthread_rwlock_unlock(&log->rw);
}

int32_t kb_log_latest_epoch(kb_log_t *log)
{
    int32_t e;
    pthread_rwlock_rdlock(&log->rw);
    e = log->ec.n ? log->ec.v[log->ec.n - 1].epoch : -1;
    pthread_rwlock_unlock(&log->rw);
    return e;
}

int32_t kb_log_epoch_for_offset(kb_log_t *log, int64_t offset)
{
    int32_t e;
    pthread_rwlock_rdlock(&log->rw);
    e = offset < log->leo || offset == log->leo ? kb_epoch_for_offset(&log->ec, offset) : -1;
    pthread_rwlock_unlock(&log->rw);
    return e;
}

int kb_log_assign_epoch(kb_log_t *log, int32_t epoch, int64_t start_offset)
{
    int changed = 0;
    pthread_mutex_lock(&log->wlock);
    pthread_rwlock_wrlock(&log->rw);
    if (epoch >= 0 && start_offset >= 0 &&
        (log->ec.n == 0 || epoch > log->ec.v[log->ec.n - 1].epoch))
        changed = kb_epoch_assign(&log->ec, epoch, start_offset);
    pthread_rwlock_unlock(&log->rw);
    if (changed)
        kb_log_store_epochs(log);
    pthread_mutex_unlock(&log->wlock);
    return 0;
}

int kb_log_epoch_entries(kb_log_t *log, int32_t **epochs, int64_t **starts, size_t *cnt)
{
    size_t i;
    pthread_rwlock_rdlock(&log->rw);
    *epochs = malloc((log->ec.n + 1) * sizeof(**epochs));
    *starts = malloc((log->ec.n + 1) * sizeof(**starts));
    if (!*epochs || !*starts) {
        pthread_rwlock_unlock(&log->rw);
        free(*epochs);
        free(*starts);
        *epochs = NULL;
        *starts = NULL;
        return KB_STO_NOMEM;
    }
    for (i = 0; i < log->ec.n; i++) {
        (*epochs)[i] = log->ec.v[i].epoch;
        (*starts)[i] = log->ec.v[i].start;
    }
    *cnt = log->ec.n;
    pthread_rwlock_unlock(&log->rw);
    return 0;
}

/* ---------- truncation / log start ---------- */

static int kb_log_truncate_fully_locked(kb_log_t *log, int64_t offset)
{
    kb_seg_t *seg, **old;
    size_t nold, i;
    int err = 0;
    /* remove the old files first: the new segment may reuse a base offset's name */
    pthread_rwlock_wrlock(&log->rw);
    old = log->segs;
    nold = log->nsegs;
    log->segs = NULL;
    log->nsegs = log->segs_cap = 0;
    pthread_rwlock_unlock(&log->rw);
    for (i = 0; i < nold; i++)
        kb_seg_delete_files(old[i]);
    seg = kb_seg_create(log->dir, offset, kb_log_now(log), &err);
    pthread_rwlock_wrlock(&log->rw);
    if (!seg || kb_log_push_seg(log, seg)) {
        /* keep the old list: the log stays usable in memory, the next open recovers */
        kb_seg_unref(seg);
        free(log->segs);
        log->segs = old;
        log->nsegs = log->segs_cap = nold;
        pthread_rwlock_unlock(&log->rw);
        return err ? err : KB_STO_NOMEM;
    }
    log->leo = log->hw = log->log_start = log->recovery_point = log->cleaner_offset = offset;
    log->gen++;
    kb_epoch_truncate_end(&log->ec, 0);
    kb_pstate_clear(&log->ps);
    log->ps.map_end = offset;
    kb_log_update_unstable(log);
    pthread_rwlock_unlock(&log->rw);
    for (i = 0; i < nold; i++)
        kb_seg_unref(old[i]);
    free(old);
    kb_log_store_epochs(log);
    kb_log_delete_snapshots(log, INT64_MAX, INT64_MAX);
    kb_fsync_dir(log->dir);
    return 0;
}

int kb_log_truncate_fully(kb_log_t *log, int64_t offset)
{
    int rc;
    if (offset < 0)
        return KB_STO_INVALID;
    pthread_mutex_lock(&log->wlock);
    rc = kb_log_truncate_fully_locked(log, offset);
    pthread_mutex_unlock(&log->wlock);
    if (!rc)
        kb_log_notify(log);
    return rc;
}

int kb_log_truncate_to(kb_log_t *log, int64_t offset)
{
    size_t si, i;
    kb_seg_t *seg;
    kp_batch_hdr_t h;
    int64_t pos;
    int rc = 0, r;
    if (offset < 0)
        return KB_STO_INVALID;
    pthread_mutex_lock(&log->wlock);
    if (offset >= log->leo) {
        /* Nothing to cut; as Kafka's truncateTo, drop the epoch entries that start at the LEO:
         * a broker that led an epoch and appended nothing in it keeps such an entry, and as a
         * follower it would send that epoch as LastFetchedEpoch and be told to diverge at its
         * own LEO on every fetch. */
        pthread_rwlock_wrlock(&log->rw);
        r = kb_epoch_truncate_end(&log->ec, log->leo);
        pthread_rwlock_unlock(&log->rw);
        if (r)
            kb_log_store_epochs(log);
        goto out;
    }
    if (offset > log->log_start && offset > log->segs[0]->base) {
        /* As Kafka's segment truncation: the whole batch holding offset goes, so the log ends
         * at that batch's base offset (the LEO is always a batch boundary, also after a
         * restart, and a follower truncated to the same offset ends at the same place). */
        pthread_rwlock_rdlock(&log->rw);
        seg = log->segs[kb_log_floor_seg(log, offset)];
        r = kb_seg_find(seg, offset, seg->size, &pos, &h);
        pthread_rwlock_unlock(&log->rw);
        if (r < 0) {
            rc = r;
            goto out;
        }
        if (r == 1 && h.baseOffset < offset)
            offset = h.baseOffset;
        if (offset < log->log_start)
            offset = log->log_start; /* the batch straddles the log start: empty from there */
    }
    /* Nothing left at or above the log start: the log restarts empty there. */
    if (offset <= log->log_start || offset <= log->segs[0]->base) {
        rc = kb_log_truncate_fully_locked(log, offset);
        goto notify;
    }
    si = kb_log_floor_seg(log, offset);
    if (log->segs[si]->base == offset && si > 0)
        si--; /* the segment starting at offset goes entirely; keep the one before */
    /* Remove whole segments above si. */
    pthread_rwlock_wrlock(&log->rw);
    for (i = log->nsegs; i > si + 1; i--)
        kb_seg_delete_files(log->segs[i - 1]);
    for (i = log->nsegs; i > si + 1; i--)
        kb_seg_unref(log->segs[i - 1]);
    log->nsegs = si + 1;
    log->gen++;
    seg = log->segs[si];
    r = kb_seg_find(seg, offset, seg->size, &pos, &h);
    if (r == 1)
        rc = kb_seg_truncate(seg, pos, offset, log->cfg.index_interval_bytes);
    else if (r < 0)
        rc = r;
    log->leo = offset;
    if (log->hw > offset)
        log->hw = offset;
    if (log->recovery_point > offset)
        log->recovery_point = offset;
    if (log->cleaner_offset > offset)
        log->cleaner_offset = offset;
    kb_epoch_truncate_end(&log->ec, offset);
    pthread_rwlock_unlock(&log->rw);
    kb_log_store_epochs(log);
    kb_log_delete_snapshots(log, INT64_MIN, offset);
    {
        int prc = kb_log_rebuild_pstate(log, offset);
        if (!rc)
            rc = prc;
    }
    pthread_rwlock_wrlock(&log->rw);
    kb_log_update_unstable(log);
    pthread_rwlock_unlock(&log->rw);
    kb_seg_fsync(seg);
    kb_fsync_dir(log->dir);
notify:
    pthread_mutex_unlock(&log->wlock);
    kb_log_notify(log);
    return rc;
out:
    pthread_mutex_unlock(&log->wlock);
    return rc;
}

/* Delete whole segments below the log start (never the active one). Writer mutex held. */
static void kb_log_delete_below_start(kb_log_t *log, kb_retention_stats_t *st)
{
    size_t k = 0, i;
    kb_seg_t **gone;
    while (k + 1 < log->nsegs && log->segs[k + 1]->base <= log->log_start)
        k++;
    if (!k)
        return;
    gone = malloc(k * sizeof(*gone));
    if (!gone)
        return;
    pthread_rwlock_wrlock(&log->rw);
    memcpy(gone, log->segs, k * sizeof(*gone));
    memmove(log->segs, log->segs + k, (log->nsegs - k) * sizeof(*log->segs));
    log->nsegs -= k;
    log->gen++;
    pthread_rwlock_unlock(&log->rw);
    for (i = 0; i < k; i++) {
        if (st) {
            st->segments_deleted++;
            st->bytes_deleted += gone[i]->size;
        }
        kb_seg_delete_files(gone[i]);
        kb_seg_unref(gone[i]);
    }
    free(gone);
    kb_log_delete_snapshots(log, log->segs[0]->base, INT64_MAX);
}

static int kb_log_set_start_locked(kb_log_t *log, int64_t offset, kb_retention_stats_t *st)
{
    int changed;
    if (offset <= log->log_start)
        return 0;
    if (offset > log->leo)
        return kb_log_truncate_fully_locked(log, offset);
    pthread_rwlock_wrlock(&log->rw);
    log->log_start = offset;
    if (log->hw < offset)
        log->hw = offset;
    if (log->cleaner_offset < offset)
        log->cleaner_offset = offset;
    changed = kb_epoch_truncate_start(&log->ec, offset);
    kb_pstate_on_hw(&log->ps, log->hw);
    kb_log_update_unstable(log);
    pthread_rwlock_unlock(&log->rw);
    if (changed)
        kb_log_store_epochs(log);
    kb_log_delete_below_start(log, st);
    return 0;
}

int kb_log_set_start_offset(kb_log_t *log, int64_t offset)
{
    int rc;
    pthread_mutex_lock(&log->wlock);
    rc = kb_log_set_start_locked(log, offset, NULL);
    pthread_mutex_unlock(&log->wlock);
    kb_log_notify(log);
    return rc;
}

int kb_log_delete_records(kb_log_t *log, int64_t offset, int64_t *new_start)
{
    int rc = 0;
    pthread_mutex_lock(&log->wlock);
    if (offset == -1)
        offset = log->hw;
    if (offset < 0 || offset > log->hw)
        rc = KB_STO_OFFSET_OUT_OF_RANGE;
    else
        rc = kb_log_set_start_locked(log, offset, NULL);
    if (new_start)
        *new_start = log->log_start;
    pthread_mutex_unlock(&log->wlock);
    if (!rc)
        kb_log_notify(log);
    return rc;
}

/* ---------- producer state API ---------- */

int kb_log_check_sequence(kb_log_t *log, int64_t pid, int16_t pepoch, int32_t first_seq,
                          int32_t last_seq, int64_t *dup_first, int64_t *dup_last)
{
    int r;
    pthread_mutex_lock(&log->wlock);
    r = kb_pstate_check(&log->ps, pid, pepoch, first_seq, last_seq, dup_first, dup_last);
    pthread_mutex_unlock(&log->wlock);
    return r;
}

static void kb_log_fill_producer(const kb_pentry_t *e, kb_producer_info_t *out)
{
    out->producer_id = e->pid;
    out->producer_epoch = e->epoch;
    out->last_sequence = e->nb ? e->b[e->nb - 1].last_seq : -1;
    out->last_offset = e->nb ? e->b[e->nb - 1].last_offset : -1;
    out->last_timestamp = e->last_ts;
    out->coordinator_epoch = e->coord_epoch;
    out->txn_first_offset = e->txn_first;
    out->cached_batches = e->nb;
}

int kb_log_producer_get(kb_log_t *log, int64_t pid, kb_producer_info_t *out)
{
    kb_pentry_t *e;
    int rc = 0;
    pthread_mutex_lock(&log->wlock);
    e = kb_pstate_get(&log->ps, pid);
    if (e)
        kb_log_fill_producer(e, out);
    else
        rc = KB_STO_INVALID;
    pthread_mutex_unlock(&log->wlock);
    return rc;
}

int kb_log_producers(kb_log_t *log, kb_producer_info_t **out, size_t *cnt)
{
    size_t i, n = 0;
    pthread_mutex_lock(&log->wlock);
    *out = malloc((log->ps.count + 1) * sizeof(**out));
    if (!*out) {
        pthread_mutex_unlock(&log->wlock);
        return KB_STO_NOMEM;
    }
    for (i = 0; i < log->ps.nbuckets; i++) {
        const kb_pentry_t *e;
        for (e = log->ps.buckets[i]; e; e = e->next)
            kb_log_fill_producer(e, &(*out)[n++]);
    }
    *cnt = n;
    pthread_mutex_unlock(&log->wlock);
    return 0;
}

/* ---------- retention ---------- */

int kb_log_retention_run(kb_log_t *log, int64_t now_ms, kb_retention_stats_t *stats)
{
    kb_retention_stats_t dummy;
    int64_t new_start;
    size_t i;
    if (!stats)
        stats = &dummy;
    memset(stats, 0, sizeof(*stats));
    pthread_mutex_lock(&log->wlock);
    stats->producers_expired =
        kb_pstate_expire(&log->ps, now_ms, log->cfg.producer_id_expiration_ms);
    if (!(log->cfg.cleanup_policy & KB_CLEANUP_DELETE)) {
        pthread_mutex_unlock(&log->wlock);
        return 0;
    }
    new_start = log->log_start;
    /* by time: oldest first, only whole inactive segments entirely below the HW */
    i = 0;
    if (log->cfg.retention_ms >= 0) {
        for (; i + 1 < log->nsegs; i++) {
            kb_seg_t *seg = log->segs[i];
            int64_t next_base = log->segs[i + 1]->base;
            int64_t ts = seg->max_ts >= 0 ? seg->max_ts : seg->created_ms;
            if (next_base > log->hw || now_ms - ts <= log->cfg.retention_ms)
                break;
            new_start = next_base;
        }
    }
    /* by size: drop oldest segments while the log stays at least retention.bytes big */
    if (log->cfg.retention_bytes >= 0) {
        int64_t total = 0, diff;
        size_t j;
        for (j = 0; j < log->nsegs; j++)
            total += log->segs[j]->size;
        for (j = 0; j < i; j++)
            total -= log->segs[j]->size;
        diff = total - log->cfg.retention_bytes;
        for (; i + 1 < log->nsegs; i++) {
            kb_seg_t *seg = log->segs[i];
            int64_t next_base = log->segs[i + 1]->base;
            if (next_base > log->hw || diff - seg->size < 0)
                break;
            diff -= seg->size;
            new_start = next_base;
        }
    }
    if (new_start > log->log_start)
        kb_log_set_start_locked(log, new_start, stats);
    pthread_mutex_unlock(&log->wlock);
    if (stats->segments_deleted)
        kb_log_notify(log);
    return 0;
}
