/*
 * kb_meta_log.c -- the metadata log `__cluster_metadata-0` (docs/design.md C2, docs/broker.md
 * "Metadata"): replay at start, commits (one record batch per mutation, fsynced before the
 * mutation is acknowledged), and the one-time migration of the old `kbroker-metadata` snapshot.
 */
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

#include "kb_apilog.h"
#include "kb_err.h"
#include "kb_file.h"
#include "kb_meta_int.h"
#include "kp_batch.h"
#include "kp_crc32c.h"
#include "kp_reader.h"

/** partitionLeaderEpoch of every batch: the epoch of the one fixed controller (C1). */
#define KB_MLOG_EPOCH 1
/** Bytes read per step of the replay (a larger batch is read whole). */
#define KB_MLOG_READ_BYTES (1 << 20)
/** A snapshot is written after this many bytes of metadata records (Kafka's default of
 *  metadata.log.max.record.bytes.between.snapshots) and at close. */
#define KB_MLOG_SNAPSHOT_BYTES (20 << 20)
/** Snapshots kept (the log keeps what follows the oldest). */
#define KB_MLOG_SNAPSHOTS_KEPT 2
/** Segment size of the metadata log, so that segments covered by snapshots can go. */
#define KB_MLOG_SEGMENT_BYTES (64 << 20)

#define KB_OLD_META_FILE    "kbroker-metadata"
#define KB_OLD_META_MAGIC   "KBMD"
#define KB_OLD_META_VERSION 1

static int64_t kb_mlog_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- commit ------------------------------------------------------------------------------- */

/* Encode @p recs as one uncompressed record batch into @p out. 0 or KB_E_NOMEM. */
static int kb_mlog_encode(const kb_mrec_t *recs, size_t n, kp_writer_t *out)
{
    kp_batch_opts_t o;
    kp_batch_builder_t bb;
    kp_writer_t val;
    int64_t now = kb_mlog_now_ms();
    int rc = 0;
    kp_batch_opts_init(&o);
    o.partitionLeaderEpoch = KB_MLOG_EPOCH;
    kp_batch_builder_init(&bb, &o);
    kp_writer_init(&val);
    for (size_t i = 0; i < n && rc == 0; i++) {
        kp_bytes_t key = {NULL, -1}, v;
        kp_writer_reset(&val);
        if (kb_mrec_encode(&recs[i], &val) != 0 || val.len > INT32_MAX) {
            rc = KB_E_NOMEM;
            break;
        }
        v.ptr = val.buf;
        v.len = (int32_t)val.len;
        if (kp_batch_builder_add(&bb, now, key, v, NULL, 0) != 0)
            rc = KB_E_NOMEM;
    }
    if (rc == 0 && kp_batch_builder_finish(&bb, out) != 0)
        rc = KB_E_NOMEM;
    kp_batch_builder_free(&bb);
    kp_writer_free(&val);
    return rc;
}

void kb_meta_set_remote(kb_meta_t *meta, int32_t controller_id)
{
    pthread_mutex_lock(&meta->change_mu);
    meta->remote = controller_id;
    pthread_mutex_unlock(&meta->change_mu);
}

int kb_meta_log_read(kb_meta_t *meta, int64_t offset, int32_t max_bytes, uint8_t **buf, size_t *len,
                     int64_t *end)
{
    kb_log_read_t rd;
    int rc;

    *buf = NULL;
    *len = 0;
    *end = kb_log_leo(meta->log);
    if (offset >= *end)
        return offset == *end ? 0 : KB_E_RANGE;
    rc = kb_log_read_copy(meta->log, offset, max_bytes, KB_ISOLATION_HW, 1, buf, len, &rd);
    if (rc == KB_STO_OFFSET_OUT_OF_RANGE)
        return KB_E_RANGE;
    if (rc)
        return KB_E_NOMEM;
    *end = rd.leo;
    return 0;
}

int kb_meta_log_commit(kb_meta_t *meta, const kb_mrec_t *recs, size_t n)
{
    kp_writer_t out;
    kb_append_info_t info;
    char err[512];
    int rc;

    if (n == 0)
        return 0;
    if (meta->remote >= 0)
        return KB_E_STATE; /* a broker-only node: the controller commits */
    kp_writer_init(&out);
    rc = kb_mlog_encode(recs, n, &out);
    if (rc) {
        kp_writer_free(&out);
        return rc;
    }
    rc = kb_log_append_leader(meta->log, out.buf, out.len, KB_MLOG_EPOCH, KB_ORIGIN_COORDINATOR,
                              KB_APPEND_F_SKIP_VALIDATE, &info);
    if (rc) {
        kb_log_error("meta", "cannot append to the metadata log in %s: %s", meta->mdir,
                     kb_sto_err_str(rc));
        kp_writer_free(&out);
        return rc == KB_STO_NOMEM ? KB_E_NOMEM : KB_E_IO;
    }
    /* Committed = on disk: the mutation is acknowledged only after the fsync. */
    if (kb_log_flush(meta->log) != 0) {
        kb_log_error("meta", "cannot fsync the metadata log in %s: %s", meta->mdir,
                     strerror(errno));
        kb_log_truncate_to(meta->log, info.first_offset);
        kp_writer_free(&out);
        return KB_E_IO;
    }
    kb_log_set_hw(meta->log, kb_log_leo(meta->log));
    /* The appended buffer now carries its offsets: apply exactly what a replay will read. */
    if (kb_meta_apply_buf(meta, out.buf, out.len, err, sizeof(err)) != 0) {
        kb_log_error("meta", "metadata committed but not applied (a restart applies it): %s", err);
        meta->log_ok = false; /* no snapshot of an image that differs from the log */
    }
    meta->snap_bytes += (int64_t)out.len;
    kp_writer_free(&out);
    if (meta->snap_bytes >= KB_MLOG_SNAPSHOT_BYTES)
        kb_meta_log_snapshot(meta);
    return 0;
}

int kb_meta_log_append_remote(kb_meta_t *meta, const uint8_t *buf, size_t len, char *err,
                              size_t err_size)
{
    kp_batch_iter_t it;
    kp_batch_t b;
    kb_append_info_t info;
    int64_t leo = kb_log_leo(meta->log), next = leo;
    size_t from = len, to = len;
    int r, rc;

    /* The batches at and after the log end, which must follow it without a gap. */
    kp_batch_iter_init(&it, buf, len, 0, 0);
    while ((r = kp_batch_iter_next(&it, &b)) == 1) {
        int64_t last = kp_batch_hdr_last_offset(&b.hdr);
        size_t at = (size_t)(b.buf - buf);
        if (last < leo)
            continue;
        if (b.hdr.baseOffset != next) {
            snprintf(err, err_size,
                     "metadata batch at offset %" PRId64 " does not continue the log (next "
                     "offset %" PRId64 ")",
                     b.hdr.baseOffset, next);
            return KB_E_INVALID;
        }
        if (from == len)
            from = at;
        to = at + b.size;
        next = last + 1;
    }
    if (r < 0) {
        snprintf(err, err_size, "corrupt metadata batch at byte %zu: %s", it.pos,
                 it.errstr ? it.errstr : "bad batch");
        return KB_E_INVALID;
    }
    if (from < to) {
        rc = kb_log_append_raw(meta->log, buf + from, to - from, &info);
        if (rc) {
            snprintf(err, err_size, "cannot append to the metadata log in %s: %s", meta->mdir,
                     kb_sto_err_str(rc));
            return rc == KB_STO_NON_MONOTONIC || rc == KB_STO_CORRUPT_MESSAGE ? KB_E_INVALID
                                                                              : KB_E_IO;
        }
        if (kb_log_flush(meta->log) != 0) {
            snprintf(err, err_size, "cannot fsync the metadata log in %s", meta->mdir);
            kb_log_truncate_to(meta->log, info.first_offset);
            return KB_E_IO;
        }
        kb_log_set_hw(meta->log, kb_log_leo(meta->log));
        meta->snap_bytes += (int64_t)(to - from);
    }
    if (kb_meta_apply_buf(meta, buf, len, err, err_size) != 0) {
        meta->log_ok = false;
        return KB_E_INVALID;
    }
    if (meta->snap_bytes >= KB_MLOG_SNAPSHOT_BYTES)
        kb_meta_log_snapshot(meta);
    return 0;
}

/* ---- snapshots ---------------------------------------------------------------------------- */

/*
 * A snapshot is the image as records at a metadata offset, in Kafka's file naming beside the log:
 * `<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`, the end offset being the offset after
 * the last record it covers. The file holds uncompressed record batches (offsets from 0, records
 * as in the log; no SnapshotHeader/Footer control records). It is written to `.checkpoint.part`,
 * fsynced and renamed. The newest KB_MLOG_SNAPSHOTS_KEPT are kept, and the log keeps everything
 * from the oldest of them on, so a damaged newest snapshot still leaves a way back.
 */

typedef struct kb_snapfile_s {
    int64_t end;
    char name[64];
} kb_snapfile_t;

static int kb_snapfile_cmp(const void *a, const void *b)
{
    int64_t x = ((const kb_snapfile_t *)a)->end, y = ((const kb_snapfile_t *)b)->end;
    return x < y ? 1 : x > y ? -1 : 0; /* newest first */
}

/* The snapshot files of @p dir, newest first (malloc'd; *n may be 0). 0 or -1. */
static int kb_snap_list(const char *dir, kb_snapfile_t **out, size_t *n)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t cap = 0;
    *out = NULL;
    *n = 0;
    if (!d)
        return 0;
    while ((de = readdir(d))) {
        char *end;
        long long off;
        if (strlen(de->d_name) != 20 + 1 + 10 + 11 || de->d_name[20] != '-' ||
            strcmp(de->d_name + 31, ".checkpoint"))
            continue;
        off = strtoll(de->d_name, &end, 10);
        if (end != de->d_name + 20 || off < 0)
            continue;
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            kb_snapfile_t *nv = realloc(*out, nc * sizeof(*nv));
            if (!nv) {
                closedir(d);
                free(*out);
                *out = NULL;
                *n = 0;
                return -1;
            }
            *out = nv;
            cap = nc;
        }
        (*out)[*n].end = off;
        snprintf((*out)[*n].name, sizeof((*out)[*n].name), "%s", de->d_name);
        (*n)++;
    }
    closedir(d);
    if (*n)
        qsort(*out, *n, sizeof(**out), kb_snapfile_cmp);
    return 0;
}

int kb_meta_log_snapshot(kb_meta_t *meta)
{
    const char *dir = kb_log_dir(meta->log);
    int64_t end = meta->offset + 1;
    kb_mrec_t *recs = NULL;
    size_t n = 0, i = 0;
    kp_writer_t out;
    char path[4300], tmp[4400];
    kb_snapfile_t *snaps;
    size_t nsnaps;
    int rc = 0;

    if (!meta->log_ok || end <= 0 || end == meta->snap_end)
        return 0;
    if (kb_meta_image_records(meta, &recs, &n) != 0)
        return KB_E_NOMEM;
    kp_writer_init(&out);
    /* batches of up to 4096 records, offsets counted from 0 */
    while (i < n && rc == 0) {
        size_t k = n - i < 4096 ? n - i : 4096;
        kp_writer_t b;
        kp_writer_init(&b);
        rc = kb_mlog_encode(recs + i, k, &b);
        if (rc == 0) {
            kp_batch_set_base_offset(b.buf, b.len, (int64_t)i);
            kp_write_raw(&out, b.buf, b.len);
        }
        kp_writer_free(&b);
        i += k;
    }
    kb_meta_recs_free(recs, n);
    if (rc || out.err) {
        kp_writer_free(&out);
        return KB_E_NOMEM;
    }
    snprintf(path, sizeof(path), "%s/%020" PRId64 "-%010d.checkpoint", dir, end, KB_MLOG_EPOCH);
    snprintf(tmp, sizeof(tmp), "%s.part", path);
    rc = kb_file_write_atomic_tmp(dir, path, tmp, out.buf, out.len);
    kp_writer_free(&out);
    if (rc < 0) {
        kb_log_error("meta", "cannot write the metadata snapshot %s: %s", path, strerror(errno));
        return KB_E_IO;
    }
    if (rc > 0)
        kb_log_warn("meta", "cannot fsync %s: %s", dir, strerror(errno));
    meta->snap_end = end;
    meta->snap_bytes = 0;
    /* Older snapshots go; the log keeps what follows the oldest one kept. */
    if (kb_snap_list(dir, &snaps, &nsnaps) == 0) {
        for (size_t k = KB_MLOG_SNAPSHOTS_KEPT; k < nsnaps; k++) {
            snprintf(path, sizeof(path), "%s/%s", dir, snaps[k].name);
            unlink(path);
        }
        if (nsnaps >= KB_MLOG_SNAPSHOTS_KEPT)
            kb_log_set_start_offset(meta->log, snaps[KB_MLOG_SNAPSHOTS_KEPT - 1].end);
        free(snaps);
    }
    return 0;
}

/* Load the newest readable snapshot of @p dir into the empty image; meta->snap_end = its end
 * offset, or -1 without one. 0, or -1 with @p err (a readable snapshot that cannot be
 * applied). */
static int kb_mlog_snapshot_load(kb_meta_t *meta, const char *dir, char *err, size_t err_size)
{
    kb_snapfile_t *snaps;
    size_t nsnaps;
    meta->snap_end = -1;
    if (kb_snap_list(dir, &snaps, &nsnaps) != 0) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    for (size_t k = 0; k < nsnaps; k++) {
        char path[4300], e[512];
        FILE *f;
        long sz = -1;
        uint8_t *buf = NULL;
        kp_batch_iter_t it;
        kp_batch_t b;
        int r;
        snprintf(path, sizeof(path), "%s/%s", dir, snaps[k].name);
        f = fopen(path, "rb");
        if (f && fseek(f, 0, SEEK_END) == 0 && (sz = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
            (buf = malloc((size_t)sz + 1)) && fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
            free(buf);
            buf = NULL;
        }
        if (f)
            fclose(f);
        if (!buf) {
            kb_log_warn("meta", "cannot read the metadata snapshot %s; trying an older one", path);
            continue;
        }
        kp_batch_iter_init(&it, buf, (size_t)sz, 0, 0);
        while ((r = kp_batch_iter_next(&it, &b)) == 1)
            ;
        if (r < 0 || it.trailing) {
            free(buf);
            kb_log_warn("meta", "metadata snapshot %s is damaged at byte %zu; trying an older one",
                        path, it.pos);
            continue;
        }
        if (kb_meta_apply_snapshot(meta, buf, (size_t)sz, snaps[k].end, e, sizeof(e)) != 0) {
            free(buf);
            snprintf(err, err_size, "metadata snapshot %s: %s", snaps[k].name, e);
            free(snaps);
            return -1;
        }
        free(buf);
        meta->snap_end = snaps[k].end;
        kb_log_info("meta", "loaded the metadata snapshot %s", snaps[k].name);
        break;
    }
    free(snaps);
    return 0;
}

/* ---- the old snapshot --------------------------------------------------------------------- */

static char *kb_old_rstr(kp_reader_t *rd)
{
    int32_t n = kp_read_int32(rd);
    const uint8_t *p;
    char *s;
    if (n < 0 || (size_t)n > kp_reader_remaining(rd)) {
        kp_reader_fail(rd, KP_E_TRUNCATED, "string length");
        return NULL;
    }
    p = kp_read_raw(rd, (size_t)n);
    if (!p && n)
        return NULL;
    if (n && memchr(p, '\0', (size_t)n)) {
        kp_reader_fail(rd, KP_E_INVALID, "string with a NUL byte");
        return NULL;
    }
    s = malloc((size_t)n + 1);
    if (!s) {
        kp_reader_fail(rd, KP_E_NOMEM, "out of memory");
        return NULL;
    }
    if (n)
        memcpy(s, p, (size_t)n);
    s[n] = '\0';
    return s;
}

typedef struct kb_old_recs_s {
    kb_mrec_t *v;
    size_t n, cap;
} kb_old_recs_t;

static kb_mrec_t *kb_old_add(kb_old_recs_t *rs, kp_reader_t *rd, int16_t type)
{
    if (rs->n == rs->cap) {
        size_t nc = rs->cap ? rs->cap * 2 : 64;
        kb_mrec_t *nv = realloc(rs->v, nc * sizeof(*nv));
        if (!nv) {
            kp_reader_fail(rd, KP_E_NOMEM, "out of memory");
            return NULL;
        }
        rs->v = nv;
        rs->cap = nc;
    }
    kb_mrec_init(&rs->v[rs->n], type);
    return &rs->v[rs->n++];
}

/* A key/value list of the old format as ConfigRecords of one resource. */
static void kb_old_configs(kp_reader_t *rd, kb_old_recs_t *rs, int8_t rtype, const char *rname)
{
    int32_t n = kp_read_int32(rd);
    if (n < 0 || (size_t)n > kp_reader_remaining(rd) / 8) {
        kp_reader_fail(rd, KP_E_TRUNCATED, "config count");
        return;
    }
    for (int32_t i = 0; i < n && !rd->err; i++) {
        char *k = kb_old_rstr(rd), *v = kb_old_rstr(rd);
        kb_mrec_t *r = rd->err ? NULL : kb_old_add(rs, rd, KB_MREC_CONFIG);
        if (!r || !(r->resource_name = strdup(rname))) {
            free(k);
            free(v);
            if (!rd->err)
                kp_reader_fail(rd, KP_E_NOMEM, "out of memory");
            return;
        }
        r->resource_type = rtype;
        r->key = k;
        r->value = v;
    }
}

/* Parse the old snapshot (format version 1: cluster id, node id, change count, producer-id
 * block, dynamic broker configs, topics with their leader epochs and overrides) into the
 * records that rebuild it. 0, KB_E_NOT_FOUND, or -1 with @p err. */
static int kb_old_load(kb_meta_t *meta, const char *path, kb_old_recs_t *rs, char *err,
                       size_t err_size)
{
    FILE *f = fopen(path, "rb");
    long sz;
    uint8_t *buf;
    kp_reader_t rd;
    uint32_t crc;
    int32_t len, n, node;
    int64_t pid;
    char *cid;
    if (!f) {
        if (errno == ENOENT)
            return KB_E_NOT_FOUND;
        snprintf(err, err_size, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        !(buf = malloc((size_t)sz + 1)) || fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        fclose(f);
        snprintf(err, err_size, "%s: cannot read", path);
        return -1;
    }
    fclose(f);
    kp_reader_init(&rd, buf, (size_t)sz);
    if (sz < 14 || memcmp(buf, KB_OLD_META_MAGIC, 4) != 0) {
        snprintf(err, err_size, "%s: not a kbroker metadata file", path);
        free(buf);
        return -1;
    }
    kp_reader_skip(&rd, 4);
    if (kp_read_int16(&rd) != KB_OLD_META_VERSION) {
        snprintf(err, err_size, "%s: unknown version", path);
        free(buf);
        return -1;
    }
    crc = kp_read_uint32(&rd);
    len = kp_read_int32(&rd);
    if (len < 0 || (size_t)len != kp_reader_remaining(&rd) ||
        kp_crc32c(0, buf + 14, (size_t)len) != crc) {
        snprintf(err, err_size, "%s: checksum mismatch (the file is corrupt)", path);
        free(buf);
        return -1;
    }
    cid = kb_old_rstr(&rd);
    node = kp_read_int32(&rd);
    if (!rd.err && cid && strcmp(cid, meta->cluster_id)) {
        snprintf(err, err_size, "%s belongs to cluster %s, but this broker's cluster.id is %s",
                 path, cid, meta->cluster_id);
        free(cid);
        free(buf);
        return -1;
    }
    free(cid);
    if (!rd.err && node != meta->node_id) {
        snprintf(err, err_size, "%s was written by another node.id", path);
        free(buf);
        return -1;
    }
    (void)kp_read_int64(&rd); /* change count */
    pid = kp_read_int64(&rd);
    kb_old_configs(&rd, rs, KB_RES_BROKER, meta->node_id_str);
    kb_old_configs(&rd, rs, KB_RES_BROKER, "");
    n = kp_read_int32(&rd);
    for (int32_t i = 0; i < n && !rd.err; i++) {
        char *name = kb_old_rstr(&rd);
        kp_uuid_t id;
        int32_t np;
        kb_mrec_t *r;
        kp_read_uuid(&rd, &id);
        (void)kp_read_int8(&rd); /* internal: known by the name now */
        np = kp_read_int32(&rd);
        if (!rd.err &&
            (np < 0 || np > KB_META_MAX_PART || (size_t)np > kp_reader_remaining(&rd) / 4))
            kp_reader_fail(&rd, KP_E_TRUNCATED, "partition count");
        if (rd.err || !(r = kb_old_add(rs, &rd, KB_MREC_TOPIC))) {
            free(name);
            break;
        }
        r->name = name;
        r->topic_id = id;
        for (int32_t p = 0; p < np && !rd.err; p++) {
            int32_t epoch = kp_read_int32(&rd);
            if (!(r = kb_old_add(rs, &rd, KB_MREC_PARTITION)))
                break;
            r->topic_id = id;
            r->partition = p;
            r->replicas = malloc(sizeof(int32_t));
            r->isr = malloc(sizeof(int32_t));
            if (!r->replicas || !r->isr) {
                kp_reader_fail(&rd, KP_E_NOMEM, "out of memory");
                break;
            }
            r->replicas[0] = r->isr[0] = meta->node_id;
            r->nreplicas = r->nisr = 1;
            r->leader = meta->node_id;
            r->leader_epoch = epoch;
            r->partition_epoch = 0;
        }
        kb_old_configs(&rd, rs, KB_RES_TOPIC, name);
    }
    if (!rd.err && pid > 0) {
        kb_mrec_t *r = kb_old_add(rs, &rd, KB_MREC_PRODUCER_IDS);
        if (r) {
            r->broker_id = meta->node_id;
            r->next_producer_id = pid;
        }
    }
    free(buf);
    if (rd.err) {
        snprintf(err, err_size, "%s: malformed (%s)", path, rd.errstr ? rd.errstr : "truncated");
        return -1;
    }
    return 0;
}

/* An old `kbroker-metadata` snapshot next to an empty metadata log: commit its content as the
 * log's first batch, then rename it so it is never read again. */
static int kb_mlog_migrate(kb_meta_t *meta, char *err, size_t err_size)
{
    char path[4200], done[4300];
    kb_old_recs_t rs = {0};
    int rc;
    snprintf(path, sizeof(path), "%s/%s", meta->dir, KB_OLD_META_FILE);
    rc = kb_old_load(meta, path, &rs, err, err_size);
    if (rc == KB_E_NOT_FOUND)
        return 0;
    if (rc == 0 && kb_meta_log_commit(meta, rs.v, rs.n) != 0) {
        snprintf(err, err_size, "cannot migrate %s into the metadata log", path);
        rc = -1;
    }
    kb_meta_recs_free(rs.v, rs.n);
    if (rc)
        return -1;
    snprintf(done, sizeof(done), "%s.migrated", path);
    if (rename(path, done) != 0) {
        snprintf(err, err_size, "cannot rename %s after migrating it: %s", path, strerror(errno));
        return -1;
    }
    kb_log_info("meta", "migrated %s into the metadata log (%zu records); kept as %s", path, rs.n,
                done);
    return 0;
}

/* ---- open / replay ------------------------------------------------------------------------ */

static int kb_mlog_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Check one segment file: 0 if every batch is whole and valid, or if only the end of the last
 * segment is bad (a torn tail: written but never acknowledged); -1 with @p err otherwise. */
static int kb_mlog_check_segment(const char *path, const char *name, bool last, char *err,
                                 size_t err_size)
{
    FILE *f = fopen(path, "rb");
    long sz;
    uint8_t *buf = NULL;
    kp_batch_iter_t it;
    kp_batch_t b;
    int rc = 0, r;
    if (!f)
        return 0; /* gone meanwhile or unreadable: kb_log_open reports it */
    if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        !(buf = malloc((size_t)sz + 1)) || fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        fclose(f);
        free(buf);
        snprintf(err, err_size, "cannot read %s", name);
        return -1;
    }
    fclose(f);
    kp_batch_iter_init(&it, buf, (size_t)sz, 0, 0);
    while ((r = kp_batch_iter_next(&it, &b)) == 1)
        ;
    if (r < 0) {
        kp_batch_hdr_t h;
        kp_batch_t nb;
        bool more = false;
        /* A bad batch followed by a valid one is corruption, not a torn tail (the records
         * after it were acknowledged); zeros or garbage up to the end are a torn tail. */
        if (kp_batch_hdr_decode(buf + it.pos, (size_t)sz - it.pos, &h) == 0 && h.batchLength > 0 &&
            (size_t)h.batchLength + 12 < (size_t)sz - it.pos) {
            size_t end = it.pos + (size_t)h.batchLength + 12;
            more = kp_batch_parse(buf + end, (size_t)sz - end, 0, 0, &nb, NULL) == 0;
        }
        if (!last || more) {
            snprintf(err, err_size, "%s: corrupt record batch at byte %zu (%s) %s", name, it.pos,
                     it.errstr ? it.errstr : "bad batch",
                     last ? "followed by more data" : "in an older segment");
            rc = -1;
        }
    } else if (it.trailing && !last) {
        snprintf(err, err_size, "%s: incomplete record batch at byte %zu of an older segment", name,
                 it.pos);
        rc = -1;
    }
    free(buf);
    return rc;
}

/* The storage engine's recovery cuts a log at its first bad batch, which is right for a torn
 * tail but would silently drop acknowledged metadata after a corrupt batch in the middle:
 * refuse such a log before opening it. */
static int kb_mlog_precheck(const char *dir, char *err, size_t err_size)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    if (!d)
        return 0; /* a new log */
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 4, ".log") || de->d_name[0] == '.')
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **nv = realloc(names, nc * sizeof(*nv));
            if (!nv) {
                rc = -1;
                break;
            }
            names = nv;
            cap = nc;
        }
        if (!(names[n] = strdup(de->d_name))) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc)
        snprintf(err, err_size, "out of memory");
    /* Segment names are zero-padded base offsets: the name order is the log order. */
    if (n)
        qsort(names, n, sizeof(*names), kb_mlog_name_cmp);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char path[4600];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        rc = kb_mlog_check_segment(path, names[i], i + 1 == n, err, err_size);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

int kb_meta_log_open(kb_meta_t *meta, char *err, size_t err_size)
{
    char dir[4200], e[1024];
    kb_log_config_t lc;
    kb_log_open_opts_t o;
    int64_t off, leo;

    snprintf(dir, sizeof(dir), "%s/%s-0", meta->mdir, KB_TOPIC_CLUSTER_METADATA);
    kb_log_config_defaults(&lc);
    lc.retention_ms = -1; /* every record is needed until snapshots exist */
    lc.retention_bytes = -1;
    lc.max_message_bytes = INT32_MAX; /* one batch per mutation, however large */
    lc.segment_bytes = KB_MLOG_SEGMENT_BYTES;
    kb_log_open_opts_init(&o);
    if (kb_mlog_precheck(dir, e, sizeof(e)) != 0) {
        snprintf(err, err_size,
                 "metadata log %s: %s; refusing to start rather than lose metadata (restore the "
                 "log or remove it to start empty)",
                 dir, e);
        return -1;
    }
    meta->log = kb_log_open(dir, &lc, &o, e, sizeof(e));
    if (!meta->log) {
        snprintf(err, err_size, "cannot open the metadata log %s: %s", dir, e);
        return -1;
    }
    pthread_mutex_lock(&meta->change_mu);
    if (kb_mlog_snapshot_load(meta, dir, e, sizeof(e)) != 0) {
        pthread_mutex_unlock(&meta->change_mu);
        snprintf(err, err_size, "%s", e);
        return -1;
    }
    off = kb_log_start_offset(meta->log);
    leo = kb_log_leo(meta->log);
    if (off > 0 && off > meta->snap_end) {
        pthread_mutex_unlock(&meta->change_mu);
        snprintf(err, err_size,
                 "metadata log %s starts at offset %" PRId64 " but no readable snapshot covers "
                 "what comes before; refusing to start rather than lose metadata",
                 dir, off);
        return -1;
    }
    if (meta->snap_end > leo) {
        /* the log ends before the snapshot (its segments went): continue after the snapshot */
        kb_log_truncate_fully(meta->log, meta->snap_end);
        leo = meta->snap_end;
    }
    if (meta->snap_end > off)
        off = meta->snap_end;
    while (off < leo) {
        uint8_t *buf = NULL;
        size_t len = 0;
        kb_log_read_t rm;
        int rc = kb_log_read_copy(meta->log, off, KB_MLOG_READ_BYTES, KB_ISOLATION_LEO, 1, &buf,
                                  &len, &rm);
        if (rc) {
            pthread_mutex_unlock(&meta->change_mu);
            snprintf(err, err_size, "metadata log %s: cannot read offset %" PRId64 ": %s", dir, off,
                     kb_sto_err_str(rc));
            return -1;
        }
        if (len == 0 || rm.next_offset <= off) {
            free(buf);
            break;
        }
        if (kb_meta_apply_buf(meta, buf, len, e, sizeof(e)) != 0) {
            free(buf);
            pthread_mutex_unlock(&meta->change_mu);
            snprintf(err, err_size,
                     "metadata log %s: %s; refusing to start rather than lose metadata (restore "
                     "the log or remove it to start empty)",
                     dir, e);
            return -1;
        }
        free(buf);
        meta->snap_bytes += (int64_t)len;
        off = rm.next_offset;
    }
    kb_log_set_hw(meta->log, kb_log_leo(meta->log));
    if (leo == 0 && kb_mlog_migrate(meta, err, err_size) != 0) {
        pthread_mutex_unlock(&meta->change_mu);
        return -1;
    }
    meta->pid_next = meta->pid_persisted;
    meta->log_ok = true;
    pthread_mutex_unlock(&meta->change_mu);
    kb_log_info("meta", "metadata log %s: %zu topics, offset %" PRId64, dir, meta->ntopics,
                meta->offset);
    return 0;
}

void kb_meta_log_close(kb_meta_t *meta)
{
    /* A snapshot at close makes the next start short. */
    if (meta->log && meta->log_ok && meta->snap_bytes > 0)
        kb_meta_log_snapshot(meta);
    if (meta->log)
        kb_log_close(meta->log, 1);
    meta->log = NULL;
}
