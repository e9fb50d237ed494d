#include "kb_logmgr.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kb_log_int.h"

#define KB_CLEAN_MARKER ".kafka_cleanshutdown"

typedef struct kb_part_s {
    char topic[256];
    int32_t partition;
    int dir;
    kb_log_t *log;
} kb_part_t;

typedef struct kb_ckpt_ent_s {
    char topic[256];
    int32_t partition;
    int64_t offset;
} kb_ckpt_ent_t;

typedef struct kb_ckpt_s {
    kb_ckpt_ent_t *v;
    size_t n;
} kb_ckpt_t;

struct kb_logmgr_s {
    char **dirs;
    size_t ndirs;
    kb_logmgr_opts_t opts;
    pthread_mutex_t lock;
    kb_part_t *parts;
    size_t nparts, cap;
    pthread_mutex_t clean_lock;
    pthread_cond_t clean_cond;
    int clean_stop;
    int clean_kick;
    pthread_t *cleaners;
    int ncleaners;
    uint64_t delete_seq;
    /* Logs that a maintenance pass (cleaner threads, tick) is working on, one entry per holder,
     * under lock; kb_logmgr_delete() waits on busy_cv until its log is no longer here. */
    kb_log_t **busy;
    size_t nbusy, busy_cap;
    pthread_cond_t busy_cv;
};

void kb_logmgr_opts_init(kb_logmgr_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    kb_log_config_defaults(&o->default_cfg);
    kb_cleaner_config_defaults(&o->cleaner);
    o->recovery_threads = 1;
}

static int64_t kb_logmgr_now(const kb_logmgr_t *mgr)
{
    struct timespec ts;
    if (mgr->opts.clock)
        return mgr->opts.clock(mgr->opts.clock_opaque);
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "<topic>-<partition>" -> topic, partition */
static int kb_logmgr_parse_dir(const char *name, char *topic, size_t tsz, int32_t *partition)
{
    const char *dash = strrchr(name, '-');
    char *end;
    long p;
    if (!dash || dash == name || !dash[1] || (size_t)(dash - name) >= tsz)
        return -1;
    errno = 0;
    p = strtol(dash + 1, &end, 10);
    if (errno || *end || p < 0 || p > INT32_MAX)
        return -1;
    memcpy(topic, name, (size_t)(dash - name));
    topic[dash - name] = 0;
    *partition = (int32_t)p;
    return 0;
}

static int kb_rm_rf(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *de;
    char p[4200];
    if (!d)
        return unlink(path) && errno != ENOENT ? -1 : 0;
    while ((de = readdir(d))) {
        struct stat st;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
        if (!lstat(p, &st) && S_ISDIR(st.st_mode))
            kb_rm_rf(p);
        else
            unlink(p);
    }
    closedir(d);
    return rmdir(path);
}

/* ---------- checkpoint files ---------- */

static void kb_ckpt_read(const char *path, kb_ckpt_t *ck)
{
    FILE *f = fopen(path, "r");
    long long ver, cnt, i, off;
    char topic[256];
    int part;
    ck->v = NULL;
    ck->n = 0;
    if (!f)
        return;
    if (fscanf(f, "%lld %lld", &ver, &cnt) != 2 || ver != 0 || cnt < 0 || cnt > 10000000)
        goto out;
    ck->v = calloc((size_t)cnt + 1, sizeof(*ck->v));
    if (!ck->v)
        goto out;
    for (i = 0; i < cnt; i++) {
        if (fscanf(f, "%255s %d %lld", topic, &part, &off) != 3 || part < 0 || off < 0)
            break;
        snprintf(ck->v[ck->n].topic, sizeof(ck->v[ck->n].topic), "%s", topic);
        ck->v[ck->n].partition = part;
        ck->v[ck->n].offset = off;
        ck->n++;
    }
    if (i != cnt) { /* a torn or foreign file is ignored as a whole */
        free(ck->v);
        ck->v = NULL;
        ck->n = 0;
    }
out:
    fclose(f);
}

static int64_t kb_ckpt_get(const kb_ckpt_t *ck, const char *topic, int32_t partition)
{
    size_t i;
    for (i = 0; i < ck->n; i++)
        if (ck->v[i].partition == partition && !strcmp(ck->v[i].topic, topic))
            return ck->v[i].offset;
    return -1;
}

static int kb_ckpt_write(const char *dir, const char *name, kb_part_t *parts, size_t n, int d,
                         int64_t (*get)(kb_log_t *))
{
    char path[4200], tmp[4300];
    FILE *f;
    size_t i, cnt = 0;
    int rc = 0;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    for (i = 0; i < n; i++)
        if (parts[i].dir == d)
            cnt++;
    f = fopen(tmp, "w");
    if (!f)
        return KB_STO_IO;
    fprintf(f, "0\n%zu\n", cnt);
    for (i = 0; i < n; i++)
        if (parts[i].dir == d)
            fprintf(f, "%s %" PRId32 " %" PRId64 "\n", parts[i].topic, parts[i].partition,
                    get(parts[i].log));
    if (fflush(f) || fsync(fileno(f)))
        rc = KB_STO_IO;
    if (fclose(f))
        rc = KB_STO_IO;
    if (!rc && rename(tmp, path))
        rc = KB_STO_IO;
    if (rc)
        unlink(tmp);
    return rc;
}

int kb_logmgr_checkpoint(kb_logmgr_t *mgr)
{
    size_t d;
    int rc = 0;
    pthread_mutex_lock(&mgr->lock);
    for (d = 0; d < mgr->ndirs; d++) {
        rc |= kb_ckpt_write(mgr->dirs[d], "recovery-point-offset-checkpoint", mgr->parts,
                            mgr->nparts, (int)d, kb_log_recovery_point);
        rc |= kb_ckpt_write(mgr->dirs[d], "log-start-offset-checkpoint", mgr->parts, mgr->nparts,
                            (int)d, kb_log_start_offset);
        rc |= kb_ckpt_write(mgr->dirs[d], "replication-offset-checkpoint", mgr->parts, mgr->nparts,
                            (int)d, kb_log_hw);
        rc |= kb_ckpt_write(mgr->dirs[d], "cleaner-offset-checkpoint", mgr->parts, mgr->nparts,
                            (int)d, kb_log_cleaner_offset);
        kb_fsync_dir(mgr->dirs[d]);
    }
    pthread_mutex_unlock(&mgr->lock);
    return rc ? KB_STO_IO : 0;
}

/* ---------- open ---------- */

typedef struct kb_open_job_s {
    char path[4200];
    char topic[256];
    int32_t partition;
    int dir;
    kb_log_open_opts_t lo;
    kb_log_config_t cfg;
    kb_log_t *log;
    char err[256];
} kb_open_job_t;

typedef struct kb_open_pool_s {
    kb_open_job_t *jobs;
    size_t njobs;
    atomic_size_t next;
} kb_open_pool_t;

static void *kb_logmgr_open_worker(void *arg)
{
    kb_open_pool_t *pool = arg;
    size_t i;
    while ((i = atomic_fetch_add(&pool->next, 1)) < pool->njobs) {
        kb_open_job_t *j = &pool->jobs[i];
        j->log = kb_log_open(j->path, &j->cfg, &j->lo, j->err, sizeof(j->err));
    }
    return NULL;
}

static int kb_logmgr_add(kb_logmgr_t *mgr, const char *topic, int32_t partition, int dir,
                         kb_log_t *log)
{
    if (mgr->nparts == mgr->cap) {
        size_t nc = mgr->cap ? mgr->cap * 2 : 64;
        kb_part_t *nv = realloc(mgr->parts, nc * sizeof(*nv));
        if (!nv)
            return KB_STO_NOMEM;
        mgr->parts = nv;
        mgr->cap = nc;
    }
    snprintf(mgr->parts[mgr->nparts].topic, sizeof(mgr->parts[0].topic), "%s", topic);
    mgr->parts[mgr->nparts].partition = partition;
    mgr->parts[mgr->nparts].dir = dir;
    mgr->parts[mgr->nparts].log = log;
    mgr->nparts++;
    return 0;
}

kb_logmgr_t *kb_logmgr_open(const kb_logmgr_opts_t *o, char *errstr, size_t errstr_size)
{
    kb_logmgr_t *mgr;
    kb_open_pool_t pool = {NULL, 0, 0};
    size_t d, cap = 0, i;
    int nthreads, t, failed = 0;
    pthread_t *th;
    if (!o || !o->ndirs) {
        snprintf(errstr, errstr_size, "no log.dirs");
        return NULL;
    }
    mgr = calloc(1, sizeof(*mgr));
    if (!mgr)
        return NULL;
    mgr->opts = *o;
    mgr->dirs = calloc(o->ndirs, sizeof(*mgr->dirs));
    mgr->ndirs = o->ndirs;
    pthread_mutex_init(&mgr->lock, NULL);
    pthread_mutex_init(&mgr->clean_lock, NULL);
    pthread_cond_init(&mgr->clean_cond, NULL);
    pthread_cond_init(&mgr->busy_cv, NULL);
    for (d = 0; d < o->ndirs; d++) {
        mgr->dirs[d] = strdup(o->log_dirs[d]);
        mkdir(o->log_dirs[d], 0755);
    }
    for (d = 0; d < o->ndirs; d++) {
        char p[4200];
        kb_ckpt_t rp, ls, hw, co;
        int clean;
        DIR *dh;
        struct dirent *de;
        snprintf(p, sizeof(p), "%s/%s", mgr->dirs[d], KB_CLEAN_MARKER);
        clean = access(p, F_OK) == 0;
        snprintf(p, sizeof(p), "%s/recovery-point-offset-checkpoint", mgr->dirs[d]);
        kb_ckpt_read(p, &rp);
        snprintf(p, sizeof(p), "%s/log-start-offset-checkpoint", mgr->dirs[d]);
        kb_ckpt_read(p, &ls);
        snprintf(p, sizeof(p), "%s/replication-offset-checkpoint", mgr->dirs[d]);
        kb_ckpt_read(p, &hw);
        snprintf(p, sizeof(p), "%s/cleaner-offset-checkpoint", mgr->dirs[d]);
        kb_ckpt_read(p, &co);
        dh = opendir(mgr->dirs[d]);
        while (dh && (de = readdir(dh))) {
            kb_open_job_t *j;
            char topic[256];
            int32_t part;
            size_t nl = strlen(de->d_name);
            if (de->d_name[0] == '.')
                continue;
            snprintf(p, sizeof(p), "%s/%s", mgr->dirs[d], de->d_name);
            if (nl > 7 && !strcmp(de->d_name + nl - 7, "-delete")) {
                kb_rm_rf(p); /* deletion interrupted by a restart */
                continue;
            }
            if (kb_logmgr_parse_dir(de->d_name, topic, sizeof(topic), &part))
                continue;
            /* The metadata log lives in a log dir but belongs to the metadata layer (as Kafka's
             * LogManager leaves __cluster_metadata-0 to the Raft layer). */
            if (!strcmp(topic, "__cluster_metadata"))
                continue;
            {
                struct stat st;
                if (stat(p, &st) || !S_ISDIR(st.st_mode))
                    continue;
            }
            if (pool.njobs == cap) {
                size_t nc = cap ? cap * 2 : 64;
                kb_open_job_t *nv = realloc(pool.jobs, nc * sizeof(*nv));
                if (!nv)
                    break;
                pool.jobs = nv;
                cap = nc;
            }
            j = &pool.jobs[pool.njobs++];
            memset(j, 0, sizeof(*j));
            snprintf(j->path, sizeof(j->path), "%s", p);
            snprintf(j->topic, sizeof(j->topic), "%s", topic);
            j->partition = part;
            j->dir = (int)d;
            kb_log_open_opts_init(&j->lo);
            j->lo.clean_shutdown = clean;
            j->lo.recovery_point = kb_ckpt_get(&rp, topic, part);
            j->lo.log_start_offset = kb_ckpt_get(&ls, topic, part);
            j->lo.high_watermark = kb_ckpt_get(&hw, topic, part);
            j->lo.cleaner_offset = kb_ckpt_get(&co, topic, part);
            j->lo.clock = o->clock;
            j->lo.clock_opaque = o->clock_opaque;
            if (!o->config_for || o->config_for(o->config_opaque, topic, part, &j->cfg))
                j->cfg = o->default_cfg;
        }
        if (dh)
            closedir(dh);
        free(rp.v);
        free(ls.v);
        free(hw.v);
        free(co.v);
    }
    /* recover in parallel */
    nthreads = o->recovery_threads < 1 ? 1 : o->recovery_threads;
    if ((size_t)nthreads > pool.njobs)
        nthreads = pool.njobs ? (int)pool.njobs : 1;
    th = calloc((size_t)nthreads, sizeof(*th));
    for (t = 1; th && t < nthreads; t++)
        if (pthread_create(&th[t], NULL, kb_logmgr_open_worker, &pool))
            th[t] = 0;
    kb_logmgr_open_worker(&pool);
    for (t = 1; th && t < nthreads; t++)
        if (th[t])
            pthread_join(th[t], NULL);
    free(th);
    for (i = 0; i < pool.njobs; i++) {
        kb_open_job_t *j = &pool.jobs[i];
        if (!j->log) {
            if (!failed)
                snprintf(errstr, errstr_size, "%s", j->err);
            failed = 1;
            continue;
        }
        if (kb_logmgr_add(mgr, j->topic, j->partition, j->dir, j->log)) {
            kb_log_close(j->log, 0);
            failed = 1;
        }
    }
    free(pool.jobs);
    if (failed) {
        for (i = 0; i < mgr->nparts; i++)
            kb_log_close(mgr->parts[i].log, 0);
        mgr->nparts = 0;
        kb_logmgr_close(mgr);
        return NULL;
    }
    /* from now on a crash is not a clean shutdown */
    for (d = 0; d < mgr->ndirs; d++) {
        char p[4200];
        snprintf(p, sizeof(p), "%s/%s", mgr->dirs[d], KB_CLEAN_MARKER);
        unlink(p);
        kb_fsync_dir(mgr->dirs[d]);
    }
    kb_logmgr_checkpoint(mgr);
    return mgr;
}

static void kb_logmgr_stop_cleaners(kb_logmgr_t *mgr)
{
    int i;
    pthread_mutex_lock(&mgr->clean_lock);
    mgr->clean_stop = 1;
    pthread_cond_broadcast(&mgr->clean_cond);
    pthread_mutex_unlock(&mgr->clean_lock);
    for (i = 0; i < mgr->ncleaners; i++)
        pthread_join(mgr->cleaners[i], NULL);
    free(mgr->cleaners);
    mgr->cleaners = NULL;
    mgr->ncleaners = 0;
}

static void kb_logmgr_purge_deleted(kb_logmgr_t *mgr)
{
    size_t d;
    for (d = 0; d < mgr->ndirs; d++) {
        DIR *dh = opendir(mgr->dirs[d]);
        struct dirent *de;
        char p[4200];
        while (dh && (de = readdir(dh))) {
            size_t nl = strlen(de->d_name);
            if (nl > 7 && !strcmp(de->d_name + nl - 7, "-delete")) {
                snprintf(p, sizeof(p), "%s/%s", mgr->dirs[d], de->d_name);
                kb_rm_rf(p);
            }
        }
        if (dh)
            closedir(dh);
    }
}

void kb_logmgr_close(kb_logmgr_t *mgr)
{
    size_t i, d;
    if (!mgr)
        return;
    kb_logmgr_stop_cleaners(mgr);
    if (mgr->nparts) {
        for (i = 0; i < mgr->nparts; i++)
            kb_log_flush(mgr->parts[i].log);
        kb_logmgr_checkpoint(mgr);
    }
    for (i = 0; i < mgr->nparts; i++)
        kb_log_close(mgr->parts[i].log, 1);
    for (d = 0; d < mgr->ndirs && mgr->dirs; d++) {
        if (mgr->dirs[d] && mgr->nparts) {
            char p[4200];
            int fd;
            snprintf(p, sizeof(p), "%s/%s", mgr->dirs[d], KB_CLEAN_MARKER);
            fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd >= 0) {
                fsync(fd);
                close(fd);
            }
            kb_fsync_dir(mgr->dirs[d]);
        }
        free(mgr->dirs[d]);
    }
    free(mgr->dirs);
    free(mgr->parts);
    pthread_mutex_destroy(&mgr->lock);
    pthread_mutex_destroy(&mgr->clean_lock);
    pthread_cond_destroy(&mgr->clean_cond);
    pthread_cond_destroy(&mgr->busy_cv);
    free(mgr->busy);
    free(mgr);
}

static kb_part_t *kb_logmgr_find(kb_logmgr_t *mgr, const char *topic, int32_t partition)
{
    size_t i;
    for (i = 0; i < mgr->nparts; i++)
        if (mgr->parts[i].partition == partition && !strcmp(mgr->parts[i].topic, topic))
            return &mgr->parts[i];
    return NULL;
}

kb_log_t *kb_logmgr_get(kb_logmgr_t *mgr, const char *topic, int32_t partition)
{
    kb_part_t *p;
    kb_log_t *log;
    pthread_mutex_lock(&mgr->lock);
    p = kb_logmgr_find(mgr, topic, partition);
    log = p ? p->log : NULL;
    pthread_mutex_unlock(&mgr->lock);
    return log;
}

kb_log_t *kb_logmgr_create(kb_logmgr_t *mgr, const char *topic, int32_t partition,
                           const kb_log_config_t *cfg, char *errstr, size_t errstr_size)
{
    kb_part_t *p;
    kb_log_t *log;
    kb_log_open_opts_t lo;
    size_t d, best = 0, i;
    size_t *counts;
    char path[4200];
    if (!topic || !*topic || strlen(topic) > 249 || strchr(topic, '/') || partition < 0) {
        snprintf(errstr, errstr_size, "invalid topic or partition");
        return NULL;
    }
    pthread_mutex_lock(&mgr->lock);
    p = kb_logmgr_find(mgr, topic, partition);
    if (p) {
        log = p->log;
        pthread_mutex_unlock(&mgr->lock);
        return log;
    }
    counts = calloc(mgr->ndirs, sizeof(*counts));
    for (i = 0; counts && i < mgr->nparts; i++)
        counts[mgr->parts[i].dir]++;
    for (d = 1; counts && d < mgr->ndirs; d++)
        if (counts[d] < counts[best])
            best = d;
    free(counts);
    snprintf(path, sizeof(path), "%s/%s-%" PRId32, mgr->dirs[best], topic, partition);
    kb_log_open_opts_init(&lo);
    lo.clock = mgr->opts.clock;
    lo.clock_opaque = mgr->opts.clock_opaque;
    lo.clean_shutdown = 1; /* a new directory has nothing to recover */
    log = kb_log_open(path, cfg ? cfg : &mgr->opts.default_cfg, &lo, errstr, errstr_size);
    if (log && kb_logmgr_add(mgr, topic, partition, (int)best, log)) {
        kb_log_close(log, 0);
        log = NULL;
        snprintf(errstr, errstr_size, "out of memory");
    }
    pthread_mutex_unlock(&mgr->lock);
    return log;
}

/* The maintenance passes (cleaner threads, tick) work on logs outside the table lock, on a
 * snapshot of the table. A partition deleted meanwhile (CreateTopics unstaging, a topic deletion)
 * must not be closed under them: each pass holds a log while it works on it, taking it only if it
 * is still in the table, and kb_logmgr_delete() waits until nobody holds it. Callers hold lock. */
static int kb_logmgr_is_busy(const kb_logmgr_t *mgr, const kb_log_t *log)
{
    size_t i;
    for (i = 0; i < mgr->nbusy; i++)
        if (mgr->busy[i] == log)
            return 1;
    return 0;
}

int kb_logmgr_delete(kb_logmgr_t *mgr, const char *topic, int32_t partition)
{
    kb_part_t *p;
    kb_log_t *log;
    char from[4200], to[4300];
    size_t idx;
    pthread_mutex_lock(&mgr->lock);
    p = kb_logmgr_find(mgr, topic, partition);
    if (!p) {
        pthread_mutex_unlock(&mgr->lock);
        return KB_STO_INVALID;
    }
    log = p->log;
    idx = (size_t)(p - mgr->parts);
    snprintf(from, sizeof(from), "%s", kb_log_dir(log));
    snprintf(to, sizeof(to), "%s.%" PRIu64 "%" PRId64 "-delete", from, ++mgr->delete_seq,
             kb_logmgr_now(mgr));
    mgr->parts[idx] = mgr->parts[mgr->nparts - 1];
    mgr->nparts--;
    /* No maintenance pass can take it any more; wait for the ones that have it. */
    while (kb_logmgr_is_busy(mgr, log))
        pthread_cond_wait(&mgr->busy_cv, &mgr->lock);
    pthread_mutex_unlock(&mgr->lock);
    kb_log_close(log, 0);
    if (rename(from, to))
        return KB_STO_IO;
    {
        char *slash = strrchr(to, '/');
        if (slash) {
            *slash = 0;
            kb_fsync_dir(to);
        }
    }
    kb_logmgr_wake_cleaner(mgr);
    return 0;
}

int kb_logmgr_list(kb_logmgr_t *mgr, kb_logmgr_part_t **out, size_t *cnt)
{
    size_t i;
    pthread_mutex_lock(&mgr->lock);
    *out = calloc(mgr->nparts + 1, sizeof(**out));
    if (!*out) {
        pthread_mutex_unlock(&mgr->lock);
        return KB_STO_NOMEM;
    }
    for (i = 0; i < mgr->nparts; i++) {
        kb_logmgr_part_t *o = &(*out)[i];
        snprintf(o->topic, sizeof(o->topic), "%s", mgr->parts[i].topic);
        o->partition = mgr->parts[i].partition;
        o->dir_index = mgr->parts[i].dir;
        o->size_bytes = kb_log_size_bytes(mgr->parts[i].log);
        o->leo = kb_log_leo(mgr->parts[i].log);
        o->log_start = kb_log_start_offset(mgr->parts[i].log);
        o->segments = kb_log_segment_count(mgr->parts[i].log);
    }
    *cnt = mgr->nparts;
    pthread_mutex_unlock(&mgr->lock);
    return 0;
}

static kb_log_t **kb_logmgr_snapshot(kb_logmgr_t *mgr, size_t *n, uint64_t *seq)
{
    kb_log_t **v;
    size_t i;
    pthread_mutex_lock(&mgr->lock);
    v = calloc(mgr->nparts + 1, sizeof(*v));
    *n = 0;
    for (i = 0; v && i < mgr->nparts; i++)
        v[(*n)++] = mgr->parts[i].log;
    *seq = mgr->delete_seq;
    pthread_mutex_unlock(&mgr->lock);
    return v;
}

/* Takes log for a maintenance pass: 0 when it has been deleted since the snapshot at seq (or
 * there is no memory to note it), and the pass skips it. */
static int kb_logmgr_hold(kb_logmgr_t *mgr, kb_log_t *log, uint64_t seq)
{
    size_t i;
    int present = 0;
    pthread_mutex_lock(&mgr->lock);
    if (mgr->delete_seq == seq)
        present = 1;
    for (i = 0; !present && i < mgr->nparts; i++)
        present = mgr->parts[i].log == log;
    if (present && mgr->nbusy == mgr->busy_cap) {
        size_t cap = mgr->busy_cap ? mgr->busy_cap * 2 : 8;
        kb_log_t **b = realloc(mgr->busy, cap * sizeof(*b));
        if (b) {
            mgr->busy = b;
            mgr->busy_cap = cap;
        } else {
            present = 0;
        }
    }
    if (present)
        mgr->busy[mgr->nbusy++] = log;
    pthread_mutex_unlock(&mgr->lock);
    return present;
}

static void kb_logmgr_unhold(kb_logmgr_t *mgr, kb_log_t *log)
{
    size_t i;
    pthread_mutex_lock(&mgr->lock);
    for (i = 0; i < mgr->nbusy; i++) {
        if (mgr->busy[i] == log) {
            mgr->busy[i] = mgr->busy[--mgr->nbusy];
            break;
        }
    }
    pthread_cond_broadcast(&mgr->busy_cv);
    pthread_mutex_unlock(&mgr->lock);
}

int kb_logmgr_clean_once(kb_logmgr_t *mgr, int64_t now_ms)
{
    size_t n, i;
    uint64_t seq;
    int cleaned = 0;
    kb_log_t **v = kb_logmgr_snapshot(mgr, &n, &seq);
    for (i = 0; v && i < n; i++) {
        kb_clean_stats_t st;
        if (!kb_logmgr_hold(mgr, v[i], seq))
            continue;
        if (kb_log_clean(v[i], &mgr->opts.cleaner, now_ms, 0, &st) == 0 && st.segments_out)
            cleaned++;
        kb_logmgr_unhold(mgr, v[i]);
    }
    free(v);
    return cleaned;
}

int kb_logmgr_tick(kb_logmgr_t *mgr, int64_t now_ms)
{
    size_t n, i;
    uint64_t seq;
    kb_log_t **v = kb_logmgr_snapshot(mgr, &n, &seq);
    for (i = 0; v && i < n; i++) {
        if (!kb_logmgr_hold(mgr, v[i], seq))
            continue;
        kb_log_retention_run(v[i], now_ms, NULL);
        kb_log_flush_if_due(v[i], now_ms);
        kb_logmgr_unhold(mgr, v[i]);
    }
    free(v);
    if (!mgr->ncleaners && mgr->opts.cleaner.enable)
        kb_logmgr_clean_once(mgr, now_ms);
    kb_logmgr_purge_deleted(mgr);
    return kb_logmgr_checkpoint(mgr);
}

static void *kb_logmgr_cleaner_main(void *arg)
{
    kb_logmgr_t *mgr = arg;
    pthread_mutex_lock(&mgr->clean_lock);
    while (!mgr->clean_stop) {
        struct timespec ts;
        pthread_mutex_unlock(&mgr->clean_lock);
        kb_logmgr_clean_once(mgr, kb_logmgr_now(mgr));
        kb_logmgr_purge_deleted(mgr);
        pthread_mutex_lock(&mgr->clean_lock);
        if (mgr->clean_stop)
            break;
        if (mgr->clean_kick) {
            mgr->clean_kick = 0;
            continue;
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += mgr->opts.cleaner.backoff_ms / 1000;
        ts.tv_nsec += (mgr->opts.cleaner.backoff_ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        while (!mgr->clean_stop && !mgr->clean_kick &&
               pthread_cond_timedwait(&mgr->clean_cond, &mgr->clean_lock, &ts) == 0)
            ;
        mgr->clean_kick = 0;
    }
    pthread_mutex_unlock(&mgr->clean_lock);
    return NULL;
}

int kb_logmgr_start_cleaner(kb_logmgr_t *mgr)
{
    int i, n = mgr->opts.cleaner.threads;
    if (!mgr->opts.cleaner.enable || n <= 0 || mgr->ncleaners)
        return 0;
    mgr->cleaners = calloc((size_t)n, sizeof(*mgr->cleaners));
    if (!mgr->cleaners)
        return KB_STO_NOMEM;
    mgr->clean_stop = 0;
    for (i = 0; i < n; i++) {
        if (pthread_create(&mgr->cleaners[i], NULL, kb_logmgr_cleaner_main, mgr))
            break;
        mgr->ncleaners++;
    }
    return mgr->ncleaners == n ? 0 : KB_STO_IO;
}

void kb_logmgr_wake_cleaner(kb_logmgr_t *mgr)
{
    pthread_mutex_lock(&mgr->clean_lock);
    mgr->clean_kick = 1;
    pthread_cond_broadcast(&mgr->clean_cond);
    pthread_mutex_unlock(&mgr->clean_lock);
}
