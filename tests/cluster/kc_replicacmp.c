/*
 * kc_replicacmp.c -- do the replicas of one partition hold the same stream of record batches?
 * (tests/cluster, docs/testing-cluster.md)
 *
 *   kc_replicacmp [--upto OFFSET] [--same-end] [-v] PARTDIR PARTDIR [PARTDIR...]
 *
 * Each PARTDIR is a replica's partition directory (<log.dirs>/<topic>-<partition>) of Apache
 * Kafka or kbroker (same segment format: <20-digit base offset>.log files holding v2 record
 * batches back to back). Every segment is read in base-offset order and the batches are walked
 * as one stream, so segment roll points may differ between replicas. The streams are compared
 * batch by batch from the highest log start offset of the replicas up to a limit: --upto OFFSET
 * (exclusive; e.g. the high watermark) or, without it, the smallest log end offset of the
 * replicas. Compared per batch: base offset, last offset, partition leader epoch, producer id,
 * producer epoch, CRC, length and every byte. Batches that start at or after the limit are not
 * compared (a follower may lag, a divergent tail may not be truncated yet); --same-end also
 * requires every replica to end at the same offset.
 *
 * Within each replica the walk also checks the framing: magic 2, batchLength within the file,
 * offsets increasing from batch to batch; bytes after the last whole batch of the last segment
 * are reported as a torn tail (not compared), anywhere else as an error.
 *
 * Output: one line per replica (segments, batches, first and end offset), then the first
 * difference (offset, the field, each replica's value and file position) or nothing, and a
 * summary line starting with "replicacmp: OK" or "replicacmp: DIFFERENT".
 * Exit 0 same, 1 different (or --same-end not met), 2 error (unreadable, bad framing, usage).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kp_batch.h"
#include "kr_util.h"

#define KC_MAX_REPLICAS 16
#define KC_SEG_NAME_LEN 24 /* 20 digits + ".log" */

typedef struct kc_batch_s {
    kp_batch_hdr_t h;
    const uint8_t *buf; /* the whole batch (batchLength + 12 bytes) */
    size_t size;
    int seg;    /* index into the replica's segments */
    size_t pos; /* position in that segment file */
} kc_batch_t;

typedef struct kc_replica_s {
    const char *dir;
    char **seg_path;
    char **seg_buf;
    int nseg;
    kc_batch_t *b;
    size_t nb, cap;
    int64_t start; /* first batch's base offset, or -1 when empty */
    int64_t end;   /* last batch's last offset + 1, or -1 when empty */
    size_t torn;   /* bytes after the last whole batch of the last segment */
} kc_replica_t;

static int kc_verbose;

static int kc_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool kc_is_segment(const char *name)
{
    size_t i;
    if (strlen(name) != KC_SEG_NAME_LEN || strcmp(name + 20, ".log") != 0)
        return false;
    for (i = 0; i < 20; i++)
        if (name[i] < '0' || name[i] > '9')
            return false;
    return true;
}

static int kc_push(kc_replica_t *r, const kc_batch_t *kb)
{
    if (r->nb == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 1024;
        kc_batch_t *nb = realloc(r->b, ncap * sizeof(*nb));
        if (!nb)
            return -1;
        r->b = nb;
        r->cap = ncap;
    }
    r->b[r->nb++] = *kb;
    return 0;
}

/* Read every segment of r->dir and walk its batches. 0 or -1 (message printed). */
static int kc_replica_load(kc_replica_t *r)
{
    DIR *d = opendir(r->dir);
    struct dirent *de;
    char **names = NULL;
    int n = 0, cap = 0, i;
    int64_t prev_last = -1;

    r->start = r->end = -1;
    if (!d) {
        fprintf(stderr, "kc_replicacmp: %s: %s\n", r->dir, strerror(errno));
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        if (!kc_is_segment(de->d_name))
            continue;
        if (n == cap) {
            int ncap = cap ? cap * 2 : 16;
            char **nn = realloc(names, (size_t)ncap * sizeof(*nn));
            if (!nn) {
                closedir(d);
                free(names);
                return -1;
            }
            names = nn;
            cap = ncap;
        }
        names[n] = strdup(de->d_name);
        if (!names[n]) {
            closedir(d);
            goto fail;
        }
        n++;
    }
    closedir(d);
    if (n > 0)
        qsort(names, (size_t)n, sizeof(*names), kc_name_cmp); /* fixed width: numeric order */
    r->seg_path = calloc((size_t)(n ? n : 1), sizeof(char *));
    r->seg_buf = calloc((size_t)(n ? n : 1), sizeof(char *));
    if (!r->seg_path || !r->seg_buf)
        goto fail;
    r->nseg = n;
    for (i = 0; i < n; i++) {
        size_t len, pos = 0, plen = strlen(r->dir) + strlen(names[i]) + 2;
        char *path = malloc(plen);
        if (!path)
            goto fail;
        snprintf(path, plen, "%s/%s", r->dir, names[i]);
        free(names[i]);
        r->seg_path[i] = path;
        r->seg_buf[i] = kr_read_file(path, &len);
        if (!r->seg_buf[i]) {
            fprintf(stderr, "kc_replicacmp: %s: %s\n", path, strerror(errno));
            goto fail;
        }
        while (len - pos >= KP_BATCH_HEADER_SIZE) {
            kc_batch_t kb;
            size_t total;
            kp_batch_hdr_decode(r->seg_buf[i] + pos, len - pos, &kb.h);
            if (kb.h.batchLength < KP_BATCH_MIN_LENGTH || kb.h.magic != KP_BATCH_MAGIC)
                break;
            total = (size_t)kb.h.batchLength + KP_BATCH_LOG_OVERHEAD;
            if (total > len - pos)
                break;
            if (kb.h.lastOffsetDelta < 0 || kb.h.baseOffset <= prev_last) {
                fprintf(stderr,
                        "kc_replicacmp: %s position %zu: batch offsets %" PRId64 "..%" PRId64
                        " do not follow the previous batch's last offset %" PRId64 "\n",
                        path, pos, kb.h.baseOffset, kp_batch_hdr_last_offset(&kb.h), prev_last);
                goto fail;
            }
            kb.buf = (const uint8_t *)r->seg_buf[i] + pos;
            kb.size = total;
            kb.seg = i;
            kb.pos = pos;
            if (kc_push(r, &kb) != 0)
                goto fail;
            prev_last = kp_batch_hdr_last_offset(&kb.h);
            pos += total;
        }
        if (pos != len) {
            /* Bytes that are not a whole batch: only the active (last) segment may end so. */
            bool zeros = true;
            size_t k;
            for (k = pos; k < len && zeros; k++)
                zeros = r->seg_buf[i][k] == 0;
            if (i != n - 1 && !zeros) {
                fprintf(stderr,
                        "kc_replicacmp: %s: %zu bytes at position %zu are not a whole batch "
                        "(and this is not the last segment)\n",
                        path, len - pos, pos);
                goto fail;
            }
            if (i == n - 1)
                r->torn = len - pos;
        }
    }
    free(names);
    names = NULL;
    if (r->nb > 0) {
        r->start = r->b[0].h.baseOffset;
        r->end = kp_batch_hdr_last_offset(&r->b[r->nb - 1].h) + 1;
    }
    return 0;
fail:
    for (i = 0; names && i < n; i++)
        if (!r->seg_path || i >= r->nseg || r->seg_path[i] == NULL)
            free(names[i]);
    free(names);
    return -1;
}

static void kc_replica_free(kc_replica_t *r)
{
    int s;
    for (s = 0; s < r->nseg; s++) {
        free(r->seg_path[s]);
        free(r->seg_buf[s]);
    }
    free(r->seg_path);
    free(r->seg_buf);
    free(r->b);
    memset(r, 0, sizeof(*r));
}

static void kc_where(const kc_replica_t *r, size_t bi, char *out, size_t outlen)
{
    if (bi < r->nb)
        snprintf(out, outlen, "%s @%zu", r->seg_path[r->b[bi].seg], r->b[bi].pos);
    else
        snprintf(out, outlen, "%s (end of log)", r->dir);
}

/* The first field in which batches a and b differ, or NULL. */
static const char *kc_batch_diff(const kc_batch_t *a, const kc_batch_t *b)
{
    if (a->h.baseOffset != b->h.baseOffset)
        return "baseOffset";
    if (kp_batch_hdr_last_offset(&a->h) != kp_batch_hdr_last_offset(&b->h))
        return "lastOffset";
    if (a->h.partitionLeaderEpoch != b->h.partitionLeaderEpoch)
        return "partitionLeaderEpoch";
    if (a->h.producerId != b->h.producerId)
        return "producerId";
    if (a->h.producerEpoch != b->h.producerEpoch)
        return "producerEpoch";
    if (a->h.crc != b->h.crc)
        return "crc";
    if (a->size != b->size)
        return "length";
    if (memcmp(a->buf, b->buf, a->size) != 0)
        return "bytes";
    return NULL;
}

static void kc_print_batch(const char *tag, const kc_replica_t *r, size_t bi)
{
    char where[4200];
    kc_where(r, bi, where, sizeof(where));
    if (bi >= r->nb) {
        printf("  %s: no batch (%s)\n", tag, where);
        return;
    }
    const kc_batch_t *kb = &r->b[bi];
    printf("  %s: offsets %" PRId64 "..%" PRId64 " leaderEpoch=%" PRId32 " producerId=%" PRId64
           " producerEpoch=%d baseSequence=%" PRId32 " crc=%08" PRIx32 " size=%zu (%s)\n",
           tag, kb->h.baseOffset, kp_batch_hdr_last_offset(&kb->h), kb->h.partitionLeaderEpoch,
           kb->h.producerId, (int)kb->h.producerEpoch, kb->h.baseSequence, kb->h.crc, kb->size,
           where);
}

static void kc_usage(void)
{
    fprintf(
        stderr,
        "usage: kc_replicacmp [--upto OFFSET] [--same-end] [-v] PARTDIR PARTDIR [PARTDIR...]\n");
}

int main(int argc, char **argv)
{
    kc_replica_t rep[KC_MAX_REPLICAS];
    int nrep = 0, i, rc = 0;
    int64_t upto = -1, start = -1, limit = INT64_MAX;
    bool same_end = false;
    size_t idx[KC_MAX_REPLICAS], compared = 0;

    memset(rep, 0, sizeof(rep));
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--upto") == 0 && i + 1 < argc) {
            char *e;
            errno = 0;
            upto = strtoll(argv[++i], &e, 10);
            if (errno || *e || upto < 0) {
                kc_usage();
                return 2;
            }
        } else if (strcmp(argv[i], "--same-end") == 0) {
            same_end = true;
        } else if (strcmp(argv[i], "-v") == 0) {
            kc_verbose = 1;
        } else if (argv[i][0] == '-') {
            kc_usage();
            return 2;
        } else {
            if (nrep == KC_MAX_REPLICAS) {
                fprintf(stderr, "kc_replicacmp: at most %d replicas\n", KC_MAX_REPLICAS);
                return 2;
            }
            rep[nrep++].dir = argv[i];
        }
    }
    if (nrep < 2) {
        kc_usage();
        return 2;
    }
    for (i = 0; i < nrep; i++) {
        if (kc_replica_load(&rep[i]) != 0) {
            int j;
            for (j = 0; j <= i; j++)
                kc_replica_free(&rep[j]);
            return 2;
        }
        printf("replica %d %s: %d segment(s), %zu batches, offsets %" PRId64 "..%" PRId64
               " (log end %" PRId64 ")%s\n",
               i, rep[i].dir, rep[i].nseg, rep[i].nb, rep[i].start, rep[i].end - 1, rep[i].end,
               rep[i].torn ? " + torn tail" : "");
        if (rep[i].torn)
            printf("  torn tail: %zu bytes after the last whole batch of %s\n", rep[i].torn,
                   rep[i].seg_path[rep[i].nseg - 1]);
        if (rep[i].start > start)
            start = rep[i].start;
        if (rep[i].end < limit)
            limit = rep[i].end < 0 ? 0 : rep[i].end;
    }
    if (upto >= 0)
        limit = upto;
    if (start < 0)
        start = 0;

    /* First batch of every replica that ends at or after the common start. */
    for (i = 0; i < nrep; i++) {
        idx[i] = 0;
        while (idx[i] < rep[i].nb && kp_batch_hdr_last_offset(&rep[i].b[idx[i]].h) < start)
            idx[i]++;
    }
    for (;;) {
        bool any = false, all = true;
        for (i = 0; i < nrep; i++) {
            bool in = idx[i] < rep[i].nb && rep[i].b[idx[i]].h.baseOffset < limit;
            any |= in;
            all &= in;
        }
        if (!any)
            break;
        if (!all) {
            printf("first difference below offset %" PRId64 ": a replica's log ends early\n",
                   limit);
            for (i = 0; i < nrep; i++) {
                char tag[32];
                snprintf(tag, sizeof(tag), "replica %d", i);
                kc_print_batch(tag, &rep[i], idx[i]);
            }
            rc = 1;
            break;
        }
        for (i = 1; i < nrep; i++) {
            const char *f = kc_batch_diff(&rep[0].b[idx[0]], &rep[i].b[idx[i]]);
            if (f) {
                printf("first difference at offset %" PRId64 ": %s (replica 0 vs replica %d)\n",
                       rep[0].b[idx[0]].h.baseOffset, f, i);
                kc_print_batch("replica 0", &rep[0], idx[0]);
                {
                    char tag[32];
                    snprintf(tag, sizeof(tag), "replica %d", i);
                    kc_print_batch(tag, &rep[i], idx[i]);
                }
                rc = 1;
                break;
            }
        }
        if (rc)
            break;
        if (kc_verbose)
            kc_print_batch("same", &rep[0], idx[0]);
        compared++;
        for (i = 0; i < nrep; i++)
            idx[i]++;
    }
    if (rc == 0 && same_end) {
        for (i = 1; i < nrep; i++) {
            if (rep[i].end != rep[0].end) {
                printf("log ends differ: replica 0 ends at %" PRId64 ", replica %d at %" PRId64
                       "\n",
                       rep[0].end, i, rep[i].end);
                rc = 1;
                break;
            }
        }
    }
    if (rc == 0)
        printf("replicacmp: OK: %d replicas hold the same %zu batches (offsets %" PRId64
               "..%" PRId64 ")%s\n",
               nrep, compared, start, limit - 1, same_end ? ", same log end" : "");
    else
        printf("replicacmp: DIFFERENT (%zu batches identical before the difference)\n", compared);

    for (i = 0; i < nrep; i++)
        kc_replica_free(&rep[i]);
    return rc;
}
