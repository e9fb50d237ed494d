/*
 * kb_epoch.c -- the leader-epoch cache (epoch -> start offset) and its `leader-epoch-checkpoint`
 * file, with Kafka's rules for assign, truncation from either end and end-offset lookup.
 *
 * @thread the owning log's writer changes it under the rwlock's write side; lookups hold the read
 * side.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb_log_int.h"

void kb_epoch_init(kb_epoch_cache_t *ec)
{
    memset(ec, 0, sizeof(*ec));
}

void kb_epoch_free(kb_epoch_cache_t *ec)
{
    free(ec->v);
    ec->v = NULL;
    ec->n = ec->cap = 0;
}

static int kb_epoch_push(kb_epoch_cache_t *ec, int32_t epoch, int64_t start)
{
    if (ec->n == ec->cap) {
        size_t ncap = ec->cap ? ec->cap * 2 : 8;
        kb_epoch_ent_t *nv = realloc(ec->v, ncap * sizeof(*nv));
        if (!nv)
            return KB_STO_NOMEM;
        ec->v = nv;
        ec->cap = ncap;
    }
    ec->v[ec->n].epoch = epoch;
    ec->v[ec->n].start = start;
    ec->n++;
    return 0;
}

int kb_epoch_load(kb_epoch_cache_t *ec, const char *path)
{
    FILE *f = fopen(path, "r");
    long long ver, cnt, e, o, i;
    ec->n = 0;
    if (!f)
        return errno == ENOENT ? 1 : KB_STO_IO;
    if (fscanf(f, "%lld", &ver) != 1 || ver != 0 || fscanf(f, "%lld", &cnt) != 1 || cnt < 0 ||
        cnt > 10000000)
        goto bad;
    for (i = 0; i < cnt; i++) {
        if (fscanf(f, "%lld %lld", &e, &o) != 2 || e < 0 || e > INT32_MAX || o < 0)
            goto bad;
        /* strictly increasing epochs and non-decreasing offsets, or the file is not ours */
        if (ec->n && (e <= ec->v[ec->n - 1].epoch || o < ec->v[ec->n - 1].start))
            goto bad;
        if (kb_epoch_push(ec, (int32_t)e, o))
            goto bad;
    }
    if (fscanf(f, " %lld", &e) == 1)
        goto bad;
    fclose(f);
    return 0;
bad:
    fclose(f);
    ec->n = 0;
    return KB_STO_CORRUPT_LOG;
}

int kb_epoch_store(const kb_epoch_cache_t *ec, const char *path)
{
    char tmp[4200];
    FILE *f;
    size_t i;
    int fd, rc = 0;
    char *slash, dir[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    if (!f)
        return KB_STO_IO;
    fprintf(f, "0\n%zu\n", ec->n);
    for (i = 0; i < ec->n; i++)
        fprintf(f, "%" PRId32 " %" PRId64 "\n", ec->v[i].epoch, ec->v[i].start);
    if (fflush(f))
        rc = KB_STO_IO;
    fd = fileno(f);
    if (!rc && fsync(fd))
        rc = KB_STO_IO;
    if (fclose(f))
        rc = KB_STO_IO;
    if (!rc && rename(tmp, path))
        rc = KB_STO_IO;
    if (rc) {
        unlink(tmp);
        return rc;
    }
    snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        kb_fsync_dir(dir);
    }
    return 0;
}

int kb_epoch_assign(kb_epoch_cache_t *ec, int32_t epoch, int64_t start)
{
    if (epoch < 0 || start < 0)
        return 0;
    if (ec->n) {
        const kb_epoch_ent_t *last = &ec->v[ec->n - 1];
        if (epoch == last->epoch && start >= last->start)
            return 0;
        if (epoch < last->epoch && start >= last->start)
            return 0; /* an older epoch appended after a newer one: keep the newer (Kafka
                         would rewrite history here only on a leader's explicit request) */
    }
    /* Remove entries that the new one contradicts: same or later epoch, or starting at or
     * after its start offset. */
    while (ec->n && (ec->v[ec->n - 1].epoch >= epoch || ec->v[ec->n - 1].start >= start))
        ec->n--;
    return kb_epoch_push(ec, epoch, start) ? 0 : 1;
}

int kb_epoch_truncate_end(kb_epoch_cache_t *ec, int64_t end_offset)
{
    size_t n0 = ec->n;
    if (end_offset < 0)
        return 0;
    while (ec->n && ec->v[ec->n - 1].start >= end_offset)
        ec->n--;
    return ec->n != n0;
}

int kb_epoch_truncate_start(kb_epoch_cache_t *ec, int64_t start_offset)
{
    size_t k = 0, i;
    /* entries with start <= start_offset: all but the last are dropped, the last one is moved to
     * start at start_offset */
    while (k < ec->n && ec->v[k].start <= start_offset)
        k++;
    if (k == 0)
        return 0;
    if (k == 1 && ec->v[0].start == start_offset)
        return 0;
    ec->v[k - 1].start = start_offset;
    for (i = 0; k - 1 + i < ec->n; i++)
        ec->v[i] = ec->v[k - 1 + i];
    ec->n -= k - 1;
    return 1;
}

void kb_epoch_end_offset(const kb_epoch_cache_t *ec, int32_t req, int64_t leo, int32_t *epoch,
                         int64_t *offset)
{
    size_t i;
    *epoch = KB_EPOCH_UNDEFINED;
    *offset = KB_EPOCH_OFFSET_UNDEFINED;
    if (req < 0 || ec->n == 0)
        return;
    if (ec->v[ec->n - 1].epoch == req) {
        *epoch = req;
        *offset = leo;
        return;
    }
    for (i = 0; i < ec->n; i++) {
        if (ec->v[i].epoch > req) {
            /* the first higher epoch; the floor entry is the one before it */
            *epoch = i == 0 ? req : ec->v[i - 1].epoch;
            *offset = ec->v[i].start;
            return;
        }
    }
}

int32_t kb_epoch_for_offset(const kb_epoch_cache_t *ec, int64_t offset)
{
    size_t i;
    int32_t e = KB_EPOCH_UNDEFINED;
    for (i = 0; i < ec->n && ec->v[i].start <= offset; i++)
        e = ec->v[i].epoch;
    return e;
}
