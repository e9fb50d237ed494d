/*
 * kb_part.c -- local partitions and the partition manager (see kb_part.h).
 */
#include "kb_part.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "kb_err.h"
#include "kb_apilog.h"
#include "kb_time.h"
#include "kp_batch.h"
#include "kp_errcode.h"

#define KB_PARTMGR_MAX_DIRS 64

struct kb_part_watcher_s {
    kb_part_watcher_t *next;
    kb_part_watch_fn *fn;
    void *opaque;
};

struct kb_partmgr_s {
    kb_partmgr_opts_t o;
    kb_logmgr_t *mgr;
    char *dirs_buf;
    const char *dirs[KB_PARTMGR_MAX_DIRS];
    size_t ndirs;
    /* open partitions (for orphan detection) */
    pthread_mutex_t mu;
    pthread_cond_t ref_cv; /* a deleted partition's references dropping */
    kb_part_t **open;
    size_t open_n, open_cap;
    /* maintenance thread */
    pthread_t thr;
    bool thr_started, stop;
    pthread_cond_t stop_cv;    /* CLOCK_MONOTONIC */
    pthread_rwlock_t watch_rw; /* every partition's watcher list */
    pthread_rwlock_t isr_rw;   /* the ISR proposal callback (read side held while calling it) */
    kb_part_isr_fn *isr_fn;
    void *isr_opaque;
    _Atomic bool mirror_plugin; /* a plugin that sets mirror write modes runs on this broker */
};

/* Kafka's replication factor is an int16. */
#define KB_PART_MAX_REPLICAS 32767

/* ---- topic ids ---------------------------------------------------------------------------- */

static const char kb_b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

void kb_uuid_str(const kp_uuid_t *id, char out[23])
{
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < 16; i++) {
        acc = (acc << 8) | id->b[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out[o++] = kb_b64url[(acc >> bits) & 0x3f];
        }
    }
    if (bits > 0)
        out[o++] = kb_b64url[(acc << (6 - bits)) & 0x3f];
    out[o] = '\0';
}

int kb_uuid_parse(const char *s, kp_uuid_t *id)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    if (strlen(s) != 22)
        return -1;
    for (size_t i = 0; i < 22; i++) {
        const char *p = strchr(kb_b64url, s[i]);
        if (!p || !s[i])
            return -1;
        acc = (acc << 6) | (uint32_t)(p - kb_b64url);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o < 16)
                id->b[o++] = (uint8_t)((acc >> bits) & 0xff);
        }
    }
    return o == 16 ? 0 : -1;
}

bool kb_uuid_is_zero(const kp_uuid_t *id)
{
    for (size_t i = 0; i < 16; i++)
        if (id->b[i])
            return false;
    return true;
}

void kb_uuid_random(kp_uuid_t *id)
{
    for (;;) {
        char s[23];
        ssize_t n = getrandom(id->b, sizeof(id->b), 0);
        if (n != (ssize_t)sizeof(id->b)) {
            /* getrandom(2) on Linux >= 3.17 does not fail for 16 bytes; keep going anyway */
            for (size_t i = 0; i < 16; i++)
                id->b[i] = (uint8_t)(kb_time_mono_ns() >> (i % 8));
        }
        id->b[6] = (uint8_t)((id->b[6] & 0x0f) | 0x40); /* version 4, like java.util.UUID */
        id->b[8] = (uint8_t)((id->b[8] & 0x3f) | 0x80);
        kb_uuid_str(id, s);
        if (s[0] != '-' && !kb_uuid_is_zero(id))
            return;
    }
}

/* ---- partition.metadata -------------------------------------------------------------------- */

/* 1: the dir has a partition.metadata naming @p id; 0: none; -1: it names another id. */
static int kb_part_meta_check(const char *dir, const kp_uuid_t *id)
{
    char path[4200], line[256];
    FILE *f;
    int r = 0;
    snprintf(path, sizeof(path), "%s/partition.metadata", dir);
    f = fopen(path, "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f)) {
        kp_uuid_t got;
        char *v;
        if (strncmp(line, "topic_id:", 9))
            continue;
        v = line + 9;
        while (*v == ' ')
            v++;
        v[strcspn(v, "\r\n ")] = '\0';
        r = (kb_uuid_parse(v, &got) == 0 && !memcmp(got.b, id->b, 16)) ? 1 : -1;
        break;
    }
    fclose(f);
    return r;
}

static int kb_part_meta_write(const char *dir, const kp_uuid_t *id)
{
    char path[4200], tmp[4300], ids[23], buf[128];
    int fd, n;
    kb_uuid_str(id, ids);
    snprintf(path, sizeof(path), "%s/partition.metadata", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    n = snprintf(buf, sizeof(buf), "version: 0\ntopic_id: %s\n", ids);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return KB_E_IO;
    if (write(fd, buf, (size_t)n) != n || fsync(fd) != 0) {
        close(fd);
        unlink(tmp);
        return KB_E_IO;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        return KB_E_IO;
    }
    return 0;
}

/* ---- the manager ------------------------------------------------------------------------- */

/* Log maintenance every min(log.retention.check.interval.ms, 5 s) and the ISR lag check
 * every replica.lag.time.max.ms / 2 (as Kafka schedules isr-expiration). */
static void *kb_partmgr_thread(void *arg)
{
    kb_partmgr_t *pm = arg;
    int64_t period = pm->o.cfg->log_retention_check_interval_ms;
    int64_t isr_period = pm->o.cfg->replica_lag_time_max_ms / 2;
    int64_t next_maint, next_isr, now = kb_time_mono_ms();
    if (period <= 0 || period > 5000)
        period = 5000;
    if (isr_period < 1)
        isr_period = 1;
    next_maint = now + period;
    next_isr = now + isr_period;
    pthread_mutex_lock(&pm->mu);
    while (!pm->stop) {
        int64_t next = next_maint < next_isr ? next_maint : next_isr;
        struct timespec ts = kb_time_mono_deadline(next > now ? next - now : 0);
        pthread_cond_timedwait(&pm->stop_cv, &pm->mu, &ts);
        if (pm->stop)
            break;
        pthread_mutex_unlock(&pm->mu);
        now = kb_time_mono_ms();
        if (now >= next_isr) {
            kb_partmgr_isr_check(pm);
            next_isr = now + isr_period;
        }
        if (now >= next_maint) {
            kb_partmgr_tick(pm);
            next_maint = now + period;
        }
        now = kb_time_mono_ms();
        pthread_mutex_lock(&pm->mu);
    }
    pthread_mutex_unlock(&pm->mu);
    return NULL;
}

kb_partmgr_t *kb_partmgr_open(const kb_partmgr_opts_t *o, char *errstr, size_t errstr_size)
{
    kb_partmgr_t *pm = calloc(1, sizeof(*pm));
    kb_logmgr_opts_t lo;
    kb_tconf_extra_t ex;
    pthread_condattr_t ca;
    char *p, *save = NULL;
    const kb_config_t *cfg = o->cfg;

    if (!pm) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    pm->o = *o;
    atomic_init(&pm->mirror_plugin, false);
    pthread_mutex_init(&pm->mu, NULL);
    pthread_rwlock_init(&pm->watch_rw, NULL);
    pthread_rwlock_init(&pm->isr_rw, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&pm->stop_cv, &ca);
    pthread_cond_init(&pm->ref_cv, &ca);
    pthread_condattr_destroy(&ca);

    pm->dirs_buf = strdup(cfg->eff_log_dirs ? cfg->eff_log_dirs : "/tmp/kafka-logs");
    if (!pm->dirs_buf)
        goto nomem;
    for (p = strtok_r(pm->dirs_buf, ",", &save); p && pm->ndirs < KB_PARTMGR_MAX_DIRS;
         p = strtok_r(NULL, ",", &save))
        if (*p)
            pm->dirs[pm->ndirs++] = p;
    if (pm->ndirs == 0) {
        snprintf(errstr, errstr_size, "log.dirs is empty");
        goto fail;
    }

    kb_logmgr_opts_init(&lo);
    lo.log_dirs = pm->dirs;
    lo.ndirs = pm->ndirs;
    kb_tconf_build(NULL, 0, cfg, NULL, &lo.default_cfg, &ex);
    kb_cleaner_config_defaults(&lo.cleaner);
    lo.cleaner.enable = cfg->log_cleaner_enable;
    lo.cleaner.threads = o->no_threads ? 0 : cfg->log_cleaner_threads;
    lo.cleaner.dedupe_buffer_size = cfg->log_cleaner_dedupe_buffer_size;
    lo.cleaner.backoff_ms = cfg->log_cleaner_backoff_ms;
    lo.recovery_threads = cfg->num_recovery_threads_per_data_dir * (int)pm->ndirs;
    if (lo.recovery_threads < 1)
        lo.recovery_threads = 1;
    lo.clock = o->clock;
    lo.clock_opaque = o->clock_opaque;
    lo.config_for = o->config_for;
    lo.config_opaque = o->config_opaque;
    pm->mgr = kb_logmgr_open(&lo, errstr, errstr_size);
    if (!pm->mgr)
        goto fail;
    return pm;
nomem:
    snprintf(errstr, errstr_size, "out of memory");
fail:
    free(pm->dirs_buf);
    pthread_cond_destroy(&pm->stop_cv);
    pthread_cond_destroy(&pm->ref_cv);
    pthread_rwlock_destroy(&pm->watch_rw);
    pthread_rwlock_destroy(&pm->isr_rw);
    pthread_mutex_destroy(&pm->mu);
    free(pm);
    return NULL;
}

int kb_partmgr_start(kb_partmgr_t *pm)
{
    if (pm->o.no_threads)
        return 0;
    if (pm->o.cfg->log_cleaner_enable && pm->o.cfg->log_cleaner_threads > 0 &&
        kb_logmgr_start_cleaner(pm->mgr) != 0)
        kb_log_warn("api", "cannot start the log cleaner threads");
    if (pthread_create(&pm->thr, NULL, kb_partmgr_thread, pm) != 0)
        return KB_E_NOMEM;
    pthread_setname_np(pm->thr, "kb-logmaint");
    pm->thr_started = true;
    return 0;
}

void kb_partmgr_tick(kb_partmgr_t *pm)
{
    int64_t now = pm->o.clock ? pm->o.clock(pm->o.clock_opaque) : kb_time_wall_ms();
    kb_logmgr_tick(pm->mgr, now);
}

void kb_partmgr_close(kb_partmgr_t *pm)
{
    if (!pm)
        return;
    pthread_mutex_lock(&pm->mu);
    pm->stop = true;
    pthread_cond_broadcast(&pm->stop_cv);
    pthread_mutex_unlock(&pm->mu);
    if (pm->thr_started)
        pthread_join(pm->thr, NULL);
    if (pm->open_n)
        kb_log_warn("api", "%zu partitions still open at close", pm->open_n);
    kb_logmgr_close(pm->mgr);
    free(pm->open);
    free(pm->dirs_buf);
    pthread_cond_destroy(&pm->stop_cv);
    pthread_cond_destroy(&pm->ref_cv);
    pthread_rwlock_destroy(&pm->watch_rw);
    pthread_rwlock_destroy(&pm->isr_rw);
    pthread_mutex_destroy(&pm->mu);
    free(pm);
}

kb_logmgr_t *kb_partmgr_logmgr(kb_partmgr_t *pm)
{
    return pm->mgr;
}

static bool kb_partmgr_claimed(kb_partmgr_t *pm, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < pm->open_n; i++)
        if (pm->open[i]->index == partition && !strcmp(pm->open[i]->topic, topic))
            return true;
    return false;
}

void kb_partmgr_foreach_unclaimed(kb_partmgr_t *pm,
                                  void (*fn)(void *o, const char *topic, int32_t partition),
                                  void *opaque)
{
    kb_logmgr_part_t *lp = NULL;
    size_t n = 0;
    if (kb_logmgr_list(pm->mgr, &lp, &n) != 0)
        return;
    for (size_t i = 0; i < n; i++) {
        bool claimed;
        pthread_mutex_lock(&pm->mu);
        claimed = kb_partmgr_claimed(pm, lp[i].topic, lp[i].partition);
        pthread_mutex_unlock(&pm->mu);
        if (!claimed)
            fn(opaque, lp[i].topic, lp[i].partition);
    }
    free(lp);
}

void kb_partmgr_delete_orphan(kb_partmgr_t *pm, const char *topic, int32_t partition)
{
    kb_log_info("api",
                "deleting %s-%" PRId32 ": not in the metadata (left by a deletion or a "
                "crash)",
                topic, partition);
    kb_logmgr_delete(pm->mgr, topic, partition);
}

/* ---- partitions ---------------------------------------------------------------------------- */

static void kb_part_on_log(void *opaque, kb_log_t *log, int64_t leo, int64_t hw)
{
    kb_part_t *part = opaque;
    kb_partmgr_t *pm = part->pm;
    (void)log;
    if (pm->o.dq)
        kb_dq_notify(pm->o.dq, &part->watch);
    pthread_rwlock_rdlock(&pm->watch_rw);
    for (kb_part_watcher_t *w = part->watchers; w; w = w->next)
        w->fn(w->opaque, part, leo, hw);
    pthread_rwlock_unlock(&pm->watch_rw);
}

kb_part_t *kb_part_open(kb_partmgr_t *pm, const char *topic, const kp_uuid_t *id, int32_t index,
                        int32_t epoch, const kb_log_config_t *lc, const kb_tconf_extra_t *ex,
                        bool mirror, bool internal, char *err, size_t err_size)
{
    kb_log_t *log = kb_logmgr_get(pm->mgr, topic, index);
    kb_part_t *part;
    bool fresh = false;

    if (log && kb_part_meta_check(kb_log_dir(log), id) < 0) {
        kb_log_warn("api",
                    "%s-%" PRId32 " on disk belongs to an older topic of that name: "
                    "deleting it",
                    topic, index);
        kb_logmgr_delete(pm->mgr, topic, index);
        log = NULL;
    }
    if (!log) {
        log = kb_logmgr_create(pm->mgr, topic, index, lc, err, err_size);
        if (!log)
            return NULL;
        fresh = true;
    } else {
        kb_log_set_config(log, lc);
    }
    if (kb_part_meta_check(kb_log_dir(log), id) != 1 && kb_part_meta_write(kb_log_dir(log), id)) {
        snprintf(err, err_size, "cannot write %s/partition.metadata: %s", kb_log_dir(log),
                 strerror(errno));
        if (fresh)
            kb_logmgr_delete(pm->mgr, topic, index);
        return NULL;
    }
    part = calloc(1, sizeof(*part));
    if (!part || !(part->topic = strdup(topic)) ||
        !(part->repl.r = calloc(1, sizeof(*part->repl.r)))) {
        if (part)
            free(part->topic);
        free(part);
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    atomic_init(&part->refcnt, 1);
    part->pm = pm;
    part->topic_id = *id;
    part->index = index;
    part->log = log;
    atomic_init(&part->leader_epoch, epoch);
    atomic_init(&part->write_mode, mirror ? KB_WRITE_PENDING : KB_WRITE_WRITABLE);
    atomic_init(&part->deleted, false);
    pthread_mutex_init(&part->mu, NULL);
    pthread_rwlock_init(&part->role_rw, NULL);
    part->conf = *ex;
    part->mirror = mirror;
    part->internal = internal;
    /* Single-broker replication state: leader, replicas = ISR = [this node]. */
    atomic_init(&part->role, KB_PART_LEADER);
    part->repl.self = pm->o.cfg->node_id;
    part->repl.leader = part->repl.self;
    part->repl.epoch_start = kb_log_leo(log);
    part->repl.n = 1;
    part->repl.r[0].id = part->repl.self;
    part->repl.r[0].isr = true;
    part->repl.r[0].leo = -1;
    part->repl.r[0].log_start = -1;
    part->repl.r[0].last_fetch_leader_leo = -1;

    pthread_mutex_lock(&pm->mu);
    if (pm->open_n == pm->open_cap) {
        size_t nc = pm->open_cap ? pm->open_cap * 2 : 64;
        kb_part_t **nv = realloc(pm->open, nc * sizeof(*nv));
        if (!nv) {
            pthread_mutex_unlock(&pm->mu);
            pthread_mutex_destroy(&part->mu);
            pthread_rwlock_destroy(&part->role_rw);
            free(part->repl.r);
            free(part->topic);
            free(part);
            snprintf(err, err_size, "out of memory");
            return NULL;
        }
        pm->open = nv;
        pm->open_cap = nc;
    }
    pm->open[pm->open_n++] = part;
    pthread_mutex_unlock(&pm->mu);

    kb_log_set_listener(log, kb_part_on_log, part);
    /* Single broker: every record on disk is replicated as far as it will ever be. The
     * checkpointed HW is kept for a replica set that arrives before any append. */
    part->repl.open_hw = kb_log_hw(log);
    part->repl.open_leo = kb_log_leo(log);
    kb_log_set_hw(log, kb_log_leo(log));
    /* Becoming leader at this epoch; a mirrored partition's cache holds the source's epochs
     * only (ARCHITECTURE §4), the plugin enters ours at STOPPING. */
    if (!mirror && epoch >= 0)
        kb_log_assign_epoch(log, epoch, kb_log_leo(log));
    return part;
}

void kb_part_ref(kb_part_t *part)
{
    atomic_fetch_add(&part->refcnt, 1);
}

static void kb_part_free(kb_part_t *part)
{
    kb_part_watcher_t *w = part->watchers;
    while (w) {
        kb_part_watcher_t *n = w->next;
        free(w);
        w = n;
    }
    pthread_mutex_destroy(&part->mu);
    pthread_rwlock_destroy(&part->role_rw);
    free(part->repl.r);
    free(part->topic);
    free(part);
}

void kb_part_release(kb_part_t *part)
{
    kb_partmgr_t *pm;
    bool deleted;
    int prev;
    if (!part)
        return;
    /* Read before dropping the reference: once it is dropped, a deleter waiting for the
     * count to reach 1 may free the partition at any moment. */
    pm = part->pm;
    deleted = atomic_load(&part->deleted);
    prev = atomic_fetch_sub(&part->refcnt, 1);
    if (prev == 2 && deleted) {
        pthread_mutex_lock(&pm->mu);
        pthread_cond_broadcast(&pm->ref_cv);
        pthread_mutex_unlock(&pm->mu);
    } else if (prev == 1) {
        kb_part_free(part);
    }
}

/* Wait until the caller's reference is the last one, then unlist the partition. */
static void kb_part_detach(kb_part_t *part)
{
    kb_partmgr_t *pm = part->pm;
    atomic_store(&part->deleted, true);
    if (pm->o.dq)
        kb_dq_watch_close(pm->o.dq, &part->watch);
    pthread_mutex_lock(&pm->mu);
    while (atomic_load(&part->refcnt) > 1) {
        /* Handlers hold references only for the length of one request. */
        struct timespec ts = kb_time_mono_deadline(100);
        pthread_cond_timedwait(&pm->ref_cv, &pm->mu, &ts);
    }
    for (size_t i = 0; i < pm->open_n; i++) {
        if (pm->open[i] == part) {
            pm->open[i] = pm->open[--pm->open_n];
            break;
        }
    }
    pthread_mutex_unlock(&pm->mu);
    kb_log_set_listener(part->log, NULL, NULL);
}

void kb_part_delete(kb_part_t *part)
{
    kb_partmgr_t *pm = part->pm;
    kb_part_detach(part);
    kb_logmgr_delete(pm->mgr, part->topic, part->index);
    part->log = NULL;
    kb_part_release(part);
}

void kb_part_close(kb_part_t *part)
{
    kb_part_detach(part);
    part->log = NULL; /* closed by kb_partmgr_close() */
    kb_part_release(part);
}

void kb_part_reconfigure(kb_part_t *part, const kb_log_config_t *lc, const kb_tconf_extra_t *ex,
                         bool mirror)
{
    bool was;
    kb_log_set_config(part->log, lc);
    pthread_mutex_lock(&part->mu);
    part->conf = *ex;
    was = part->mirror;
    part->mirror = mirror;
    pthread_mutex_unlock(&part->mu);
    if (mirror && !was)
        atomic_store(&part->write_mode, KB_WRITE_PENDING);
    else if (!mirror && was)
        atomic_store(&part->write_mode, KB_WRITE_WRITABLE);
}

void kb_part_conf(kb_part_t *part, kb_tconf_extra_t *ex, bool *mirror)
{
    pthread_mutex_lock(&part->mu);
    if (ex)
        *ex = part->conf;
    if (mirror)
        *mirror = part->mirror;
    pthread_mutex_unlock(&part->mu);
}

void kb_part_set_epoch(kb_part_t *part, int32_t epoch)
{
    bool mirror;
    atomic_store(&part->leader_epoch, epoch);
    kb_part_conf(part, NULL, &mirror);
    pthread_mutex_lock(&part->mu);
    part->repl.epoch_start = kb_log_leo(part->log);
    pthread_mutex_unlock(&part->mu);
    if (!mirror && kb_part_role(part) == KB_PART_LEADER)
        kb_log_assign_epoch(part->log, epoch, kb_log_leo(part->log));
    /* Fetchers waiting with an older CurrentLeaderEpoch must learn about it. */
    if (part->pm->o.dq)
        kb_dq_notify(part->pm->o.dq, &part->watch);
}

void kb_part_set_write_mode(kb_part_t *part, int mode)
{
    atomic_store(&part->write_mode, mode);
}

void kb_partmgr_set_mirror_plugin(kb_partmgr_t *pm, bool loaded)
{
    atomic_store(&pm->mirror_plugin, loaded);
}

bool kb_partmgr_mirror_plugin(kb_partmgr_t *pm)
{
    return atomic_load(&pm->mirror_plugin);
}

int16_t kb_part_write_refusal(kb_part_t *part, const char **msg)
{
    bool stopped;
    switch (kb_part_write_mode(part)) {
    case KB_WRITE_WRITABLE:
        *msg = NULL;
        return 0;
    case KB_WRITE_READ_ONLY:
        *msg = "topic is a read-only mirror topic";
        return KP_ERR_READ_ONLY_TOPIC;
    default:
        break;
    }
    /* Pending. Without a mirror plugin nothing here will ever decide: a topic that is not being
     * stopped stays mirrored (read-only, not retriable); a stopped one waits for a leader that
     * has the plugin to finish STOPPING (retriable). */
    if (!atomic_load(&part->pm->mirror_plugin)) {
        pthread_mutex_lock(&part->mu);
        stopped = part->conf.mirror_stopped;
        pthread_mutex_unlock(&part->mu);
        if (!stopped) {
            *msg = KB_PART_NOPLUGIN_MSG;
            return KP_ERR_READ_ONLY_TOPIC;
        }
    }
    *msg = KB_PART_PENDING_MSG;
    return KP_ERR_NOT_ENOUGH_REPLICAS;
}

int16_t kb_part_write_check(kb_part_t *part, const char **msg)
{
    if (kb_part_role(part) != KB_PART_LEADER) {
        *msg = "this broker is not the leader of the partition";
        return KP_ERR_NOT_LEADER_OR_FOLLOWER;
    }
    return kb_part_write_refusal(part, msg);
}

/* Smallest LEO over the maximal ISR (committed ISR plus a pending proposal's members), this
 * node counting with @p leo; an unknown follower LEO (-1) holds it back. @locks part mu */
static int64_t kb_part_isr_min_leo(const kb_part_t *part, int64_t leo)
{
    int64_t hw = leo;
    for (size_t i = 0; i < part->repl.n; i++) {
        const kb_replica_t *r = &part->repl.r[i];
        if (r->id == part->repl.self || !(r->isr || r->proposed))
            continue;
        if (r->leo < hw)
            hw = r->leo;
    }
    return hw;
}

/* Leader: move the HW up to the smallest LEO of the maximal ISR, never backwards. Called with
 * part mu held (the log's listener runs inside kb_log_set_hw and takes no part lock). */
static void kb_part_advance_hw_locked(kb_part_t *part)
{
    int64_t hw;
    if (!part->log || atomic_load(&part->role) != KB_PART_LEADER)
        return;
    hw = kb_part_isr_min_leo(part, kb_log_leo(part->log));
    if (hw > kb_log_hw(part->log))
        kb_log_set_hw(part->log, hw);
}

void kb_part_advance_hw(kb_part_t *part)
{
    pthread_mutex_lock(&part->mu);
    kb_part_advance_hw_locked(part);
    pthread_mutex_unlock(&part->mu);
}

int kb_part_append_leader(kb_part_t *part, uint8_t *buf, size_t len, int origin, unsigned flags,
                          kb_append_info_t *info)
{
    int rc;
    pthread_rwlock_rdlock(&part->role_rw);
    if (kb_part_role(part) != KB_PART_LEADER) {
        pthread_rwlock_unlock(&part->role_rw);
        return KB_E_STATE;
    }
    rc = kb_log_append_leader(part->log, buf, len, kb_part_epoch(part), origin, flags, info);
    pthread_rwlock_unlock(&part->role_rw);
    if (rc == 0)
        kb_part_advance_hw(part);
    return rc;
}

int kb_part_append_raw(kb_part_t *part, const uint8_t *buf, size_t len, kb_append_info_t *info)
{
    int rc;
    if (kb_part_write_mode(part) == KB_WRITE_WRITABLE)
        return KB_E_STATE;
    pthread_rwlock_rdlock(&part->role_rw);
    if (kb_part_role(part) != KB_PART_LEADER) {
        pthread_rwlock_unlock(&part->role_rw);
        return KB_E_STATE;
    }
    rc = kb_log_append_raw(part->log, buf, len, info);
    pthread_rwlock_unlock(&part->role_rw);
    if (rc == 0)
        kb_part_advance_hw(part);
    return rc;
}

int kb_part_append_control(kb_part_t *part, int16_t type, int64_t pid, int16_t pepoch,
                           int32_t coord_epoch, int32_t leader_epoch, kb_append_info_t *info)
{
    int rc;
    pthread_rwlock_rdlock(&part->role_rw);
    if (kb_part_role(part) != KB_PART_LEADER) {
        pthread_rwlock_unlock(&part->role_rw);
        return KB_E_STATE;
    }
    rc = kb_log_append_control(part->log, type, pid, pepoch, coord_epoch, leader_epoch, info);
    pthread_rwlock_unlock(&part->role_rw);
    if (rc == 0)
        kb_part_advance_hw(part);
    return rc;
}

kb_part_watcher_t *kb_part_watch_add(kb_part_t *part, kb_part_watch_fn *fn, void *opaque)
{
    kb_part_watcher_t *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->fn = fn;
    w->opaque = opaque;
    pthread_rwlock_wrlock(&part->pm->watch_rw);
    w->next = part->watchers;
    part->watchers = w;
    pthread_rwlock_unlock(&part->pm->watch_rw);
    return w;
}

void kb_part_watch_remove(kb_part_t *part, kb_part_watcher_t *w)
{
    kb_part_watcher_t **pp;
    pthread_rwlock_wrlock(&part->pm->watch_rw);
    for (pp = &part->watchers; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    pthread_rwlock_unlock(&part->pm->watch_rw);
    free(w);
}

typedef struct kb_part_hw_waiter_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;
} kb_part_hw_waiter_t;

static void kb_part_hw_moved(void *opaque, kb_part_t *part, int64_t leo, int64_t hw)
{
    kb_part_hw_waiter_t *w = opaque;
    (void)part;
    (void)leo;
    (void)hw;
    pthread_mutex_lock(&w->mu);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

kb_part_hw_wait_t kb_part_await_hw(kb_part_t *part, int32_t epoch, int64_t end, int64_t timeout_ms)
{
    kb_part_hw_waiter_t w;
    kb_part_watcher_t *pw;
    pthread_condattr_t ca;
    int64_t deadline = kb_time_mono_ms() + timeout_ms;
    kb_part_hw_wait_t rc = KB_PART_HW_REACHED;
    if (kb_log_hw(part->log) >= end)
        return KB_PART_HW_REACHED;
    pthread_mutex_init(&w.mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w.cv, &ca);
    pthread_condattr_destroy(&ca);
    pw = kb_part_watch_add(part, kb_part_hw_moved, &w);
    pthread_mutex_lock(&w.mu);
    while (kb_log_hw(part->log) < end) {
        int64_t now = kb_time_mono_ms();
        struct timespec ts;
        if (kb_part_role(part) != KB_PART_LEADER || kb_part_epoch(part) != epoch ||
            atomic_load(&part->deleted)) {
            rc = KB_PART_HW_NOT_LED;
            break;
        }
        if (now >= deadline) {
            rc = KB_PART_HW_TIMEOUT;
            break;
        }
        ts = kb_time_mono_deadline(deadline - now < 100 ? deadline - now : 100);
        pthread_cond_timedwait(&w.cv, &w.mu, &ts);
    }
    pthread_mutex_unlock(&w.mu);
    if (pw)
        kb_part_watch_remove(part, pw);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return rc;
}

/* ---- replication ------------------------------------------------------------------------- */

void kb_partmgr_set_isr_fn(kb_partmgr_t *pm, kb_part_isr_fn *fn, void *opaque)
{
    pthread_rwlock_wrlock(&pm->isr_rw);
    pm->isr_fn = fn;
    pm->isr_opaque = opaque;
    pthread_rwlock_unlock(&pm->isr_rw);
}

static bool kb_partmgr_has_isr_fn(kb_partmgr_t *pm)
{
    bool has;
    pthread_rwlock_rdlock(&pm->isr_rw);
    has = pm->isr_fn != NULL;
    pthread_rwlock_unlock(&pm->isr_rw);
    return has;
}

static kb_replica_t *kb_part_replica_find(kb_part_t *part, int32_t id)
{
    for (size_t i = 0; i < part->repl.n; i++)
        if (part->repl.r[i].id == id)
            return &part->repl.r[i];
    return NULL;
}

static bool kb_part_id_in(const int32_t *ids, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

/* Forget a follower's fetch state (new leader epoch): members of the ISR get the full lag time
 * from now to fetch again, the others none (Kafka's resetReplicaState). */
static void kb_replica_reset(kb_replica_t *r, int64_t now_ms)
{
    r->leo = -1;
    r->log_start = -1;
    r->last_fetch_ms = 0;
    r->last_fetch_leader_leo = -1;
    r->last_caught_up_ms = r->isr ? now_ms : 0;
}

/* @p isr (n ids) is a subset of the replicas without duplicates and contains this node. */
static bool kb_part_isr_valid(const kb_part_t *part, const int32_t *isr, size_t n)
{
    bool self = false;
    if (n && !isr)
        return false;
    for (size_t i = 0; i < n; i++) {
        bool known = false;
        for (size_t k = 0; k < part->repl.n; k++)
            known |= part->repl.r[k].id == isr[i];
        if (!known || kb_part_id_in(isr, i, isr[i]))
            return false;
        self |= isr[i] == part->repl.self;
    }
    return self;
}

/* Collect the ISR of the proposal just marked (r->proposed) and make it pending. *ids is
 * malloc'd (NULL on no memory: then nothing is pending). @locks part mu */
static size_t kb_part_proposal_take(kb_part_t *part, int32_t **ids)
{
    size_t n = 0;
    *ids = malloc(part->repl.n * sizeof(**ids));
    if (!*ids) {
        for (size_t i = 0; i < part->repl.n; i++)
            part->repl.r[i].proposed = false;
        return 0;
    }
    for (size_t i = 0; i < part->repl.n; i++)
        if (part->repl.r[i].proposed)
            (*ids)[n++] = part->repl.r[i].id;
    part->repl.pending = true;
    return n;
}

static void kb_part_ids_str(const int32_t *ids, size_t n, char *out, size_t size)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && o + 1 < size; i++) {
        int w = snprintf(out + o, size - o, "%s%" PRId32, i ? "," : "", ids[i]);
        if (w < 0)
            break;
        o += (size_t)w;
    }
}

/* Hand a pending proposal to the callback (no lock held). */
static void kb_part_isr_propose(kb_part_t *part, const char *why, int32_t leader_epoch,
                                int32_t partition_epoch, const int32_t *ids, size_t n)
{
    kb_partmgr_t *pm = part->pm;
    bool called = false;
    char txt[256];
    kb_part_ids_str(ids, n, txt, sizeof(txt));
    kb_log_info("api",
                "%s-%" PRId32 ": proposing ISR [%s] (%s) at leader epoch %" PRId32
                ", partition epoch %" PRId32,
                part->topic, part->index, txt, why, leader_epoch, partition_epoch);
    pthread_rwlock_rdlock(&pm->isr_rw);
    if (pm->isr_fn) {
        pm->isr_fn(pm->isr_opaque, part, leader_epoch, partition_epoch, ids, n);
        called = true;
    }
    pthread_rwlock_unlock(&pm->isr_rw);
    if (!called)
        kb_part_isr_abort(part); /* the callback went away meanwhile */
}

static int kb_part_become(kb_part_t *part, int role, int32_t leader, int32_t leader_epoch,
                          int32_t partition_epoch, const int32_t *replicas, size_t nreplicas,
                          const int32_t *isr, size_t nisr)
{
    kb_partmgr_t *pm = part->pm;
    kb_replica_t *nr;
    int32_t cur;
    bool reset, self = false;
    int64_t now = kb_time_mono_ms(), leo;

    if (!replicas || nreplicas == 0 || nreplicas > KB_PART_MAX_REPLICAS || (nisr && !isr) ||
        nisr > nreplicas)
        return KB_E_INVALID;
    for (size_t i = 0; i < nreplicas; i++) {
        if (replicas[i] < 0 || kb_part_id_in(replicas, i, replicas[i]))
            return KB_E_INVALID;
        self |= replicas[i] == part->repl.self;
    }
    if (!self)
        return KB_E_INVALID;
    for (size_t i = 0; i < nisr; i++)
        if (!kb_part_id_in(replicas, nreplicas, isr[i]) || kb_part_id_in(isr, i, isr[i]))
            return KB_E_INVALID;
    if (role == KB_PART_LEADER && !kb_part_id_in(isr, nisr, part->repl.self))
        return KB_E_INVALID;
    nr = calloc(nreplicas, sizeof(*nr));
    if (!nr)
        return KB_E_NOMEM;

    /* The role lock waits for appends in progress and keeps new ones out until the role is
     * set; mu guards the replication state. */
    pthread_rwlock_wrlock(&part->role_rw);
    pthread_mutex_lock(&part->mu);
    cur = atomic_load(&part->leader_epoch);
    if (atomic_load(&part->deleted) || !part->log || leader_epoch < cur ||
        (leader_epoch == cur && partition_epoch < part->repl.partition_epoch)) {
        pthread_mutex_unlock(&part->mu);
        pthread_rwlock_unlock(&part->role_rw);
        free(nr);
        return KB_E_STATE;
    }
    reset = leader_epoch > cur || atomic_load(&part->role) != role;
    leo = kb_log_leo(part->log);
    for (size_t i = 0; i < nreplicas; i++) {
        kb_replica_t *old = kb_part_replica_find(part, replicas[i]);
        if (!reset && old)
            nr[i] = *old;
        nr[i].id = replicas[i];
        nr[i].isr = kb_part_id_in(isr, nisr, replicas[i]);
        nr[i].proposed = false;
        if (reset || !old)
            kb_replica_reset(&nr[i], now);
    }
    free(part->repl.r);
    part->repl.r = nr;
    part->repl.n = nreplicas;
    part->repl.partition_epoch = partition_epoch;
    part->repl.leader = role == KB_PART_LEADER ? part->repl.self : leader;
    part->repl.pending = false;
    if (role == KB_PART_LEADER && reset)
        part->repl.epoch_start = leo;
    if (!part->repl.replicated && nreplicas > 1) {
        /* Leaving the single-broker state opened with: records above the checkpointed HW were
         * not known to be replicated when the broker stopped. */
        part->repl.replicated = true;
        if (leo == part->repl.open_leo && part->repl.open_hw < kb_log_hw(part->log))
            kb_log_set_hw(part->log, part->repl.open_hw);
    }
    atomic_store(&part->leader_epoch, leader_epoch);
    atomic_store(&part->role, role);
    /* A new leader epoch begins at the LEO; a mirror topic's cache holds the source's epochs
     * only (ARCHITECTURE §4). A follower learns epochs from the leader's batches. */
    if (role == KB_PART_LEADER && leader_epoch > cur && !part->mirror && leader_epoch >= 0)
        kb_log_assign_epoch(part->log, leader_epoch, leo);
    kb_part_advance_hw_locked(part);
    pthread_mutex_unlock(&part->mu);
    pthread_rwlock_unlock(&part->role_rw);
    kb_log_info("api",
                "%s-%" PRId32 ": %s at leader epoch %" PRId32 ", partition epoch %" PRId32
                " (%zu replicas, ISR of %zu)",
                part->topic, part->index, role == KB_PART_LEADER ? "leader" : "follower",
                leader_epoch, partition_epoch, nreplicas, nisr);
    /* Waiting produce requests see the new role, fetchers the new epoch. */
    if (pm->o.dq)
        kb_dq_notify(pm->o.dq, &part->watch);
    return 0;
}

int kb_part_become_leader(kb_part_t *part, int32_t leader_epoch, int32_t partition_epoch,
                          const int32_t *replicas, size_t nreplicas, const int32_t *isr,
                          size_t nisr)
{
    return kb_part_become(part, KB_PART_LEADER, -1, leader_epoch, partition_epoch, replicas,
                          nreplicas, isr, nisr);
}

int kb_part_become_follower(kb_part_t *part, int32_t leader, int32_t leader_epoch,
                            int32_t partition_epoch, const int32_t *replicas, size_t nreplicas,
                            const int32_t *isr, size_t nisr)
{
    return kb_part_become(part, KB_PART_FOLLOWER, leader, leader_epoch, partition_epoch, replicas,
                          nreplicas, isr, nisr);
}

int kb_part_set_isr(kb_part_t *part, int32_t partition_epoch, const int32_t *isr, size_t n)
{
    pthread_mutex_lock(&part->mu);
    if (kb_part_role(part) != KB_PART_LEADER || partition_epoch <= part->repl.partition_epoch) {
        pthread_mutex_unlock(&part->mu);
        return KB_E_STATE;
    }
    if (!kb_part_isr_valid(part, isr, n)) {
        pthread_mutex_unlock(&part->mu);
        return KB_E_INVALID;
    }
    for (size_t i = 0; i < part->repl.n; i++) {
        kb_replica_t *r = &part->repl.r[i];
        r->isr = kb_part_id_in(isr, n, r->id);
        r->proposed = false;
    }
    part->repl.pending = false;
    part->repl.partition_epoch = partition_epoch;
    kb_part_advance_hw_locked(part);
    pthread_mutex_unlock(&part->mu);
    /* Waiting acks=all produce requests re-check the ISR size (min.insync.replicas). */
    if (part->pm->o.dq)
        kb_dq_notify(part->pm->o.dq, &part->watch);
    return 0;
}

void kb_part_isr_abort(kb_part_t *part)
{
    pthread_mutex_lock(&part->mu);
    part->repl.pending = false;
    for (size_t i = 0; i < part->repl.n; i++)
        part->repl.r[i].proposed = false;
    kb_part_advance_hw_locked(part);
    pthread_mutex_unlock(&part->mu);
    if (part->pm->o.dq)
        kb_dq_notify(part->pm->o.dq, &part->watch);
}

size_t kb_part_isr(kb_part_t *part, int32_t *out, size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&part->mu);
    for (size_t i = 0; i < part->repl.n; i++) {
        if (!part->repl.r[i].isr)
            continue;
        if (out && n < cap)
            out[n] = part->repl.r[i].id;
        n++;
    }
    pthread_mutex_unlock(&part->mu);
    return n;
}

void kb_part_repl_info(kb_part_t *part, int32_t *partition_epoch, int32_t *leader, bool *pending)
{
    pthread_mutex_lock(&part->mu);
    if (partition_epoch)
        *partition_epoch = part->repl.partition_epoch;
    if (leader)
        *leader = part->repl.leader;
    if (pending)
        *pending = part->repl.pending;
    pthread_mutex_unlock(&part->mu);
}

int kb_part_replica_get(kb_part_t *part, int32_t id, kb_replica_t *out)
{
    kb_replica_t *r;
    pthread_mutex_lock(&part->mu);
    r = kb_part_replica_find(part, id);
    if (r)
        *out = *r;
    pthread_mutex_unlock(&part->mu);
    return r ? 0 : KB_E_NOT_FOUND;
}

int16_t kb_part_replica_check(kb_part_t *part, int32_t replica_id)
{
    int16_t err = 0;
    pthread_mutex_lock(&part->mu);
    if (kb_part_role(part) != KB_PART_LEADER || replica_id == part->repl.self ||
        !kb_part_replica_find(part, replica_id))
        err = KP_ERR_NOT_LEADER_OR_FOLLOWER;
    pthread_mutex_unlock(&part->mu);
    return err;
}

void kb_part_replica_fetched(kb_part_t *part, int32_t replica_id, int64_t fetch_offset,
                             int64_t log_start, int64_t leader_leo, int64_t now_ms)
{
    kb_replica_t *r;
    int32_t *ids = NULL, le = 0, pe = 0;
    size_t n = 0;
    bool can_propose = kb_partmgr_has_isr_fn(part->pm);

    pthread_mutex_lock(&part->mu);
    r = kb_part_replica_find(part, replica_id);
    if (kb_part_role(part) != KB_PART_LEADER || !r || replica_id == part->repl.self || !part->log) {
        pthread_mutex_unlock(&part->mu);
        return;
    }
    /* Caught up: at the leader's LEO now, or at least at the LEO the leader had at the
     * follower's previous fetch (then it was caught up as of that fetch). */
    if (fetch_offset >= leader_leo) {
        if (now_ms > r->last_caught_up_ms)
            r->last_caught_up_ms = now_ms;
    } else if (r->last_fetch_leader_leo >= 0 && fetch_offset >= r->last_fetch_leader_leo) {
        if (r->last_fetch_ms > r->last_caught_up_ms)
            r->last_caught_up_ms = r->last_fetch_ms;
    }
    r->last_fetch_leader_leo = leader_leo;
    r->last_fetch_ms = now_ms;
    r->leo = fetch_offset;
    r->fetches++;
    if (log_start >= 0)
        r->log_start = log_start;
    /* Expansion: an out-of-sync replica that reached the HW and the start of this epoch. */
    if (can_propose && !part->repl.pending && !r->isr && fetch_offset >= kb_log_hw(part->log) &&
        fetch_offset >= part->repl.epoch_start) {
        for (size_t i = 0; i < part->repl.n; i++)
            part->repl.r[i].proposed = part->repl.r[i].isr;
        r->proposed = true;
        n = kb_part_proposal_take(part, &ids);
        le = kb_part_epoch(part);
        pe = part->repl.partition_epoch;
    }
    kb_part_advance_hw_locked(part);
    pthread_mutex_unlock(&part->mu);
    if (ids)
        kb_part_isr_propose(part, "expand", le, pe, ids, n);
    free(ids);
}

void kb_part_isr_check(kb_part_t *part, int64_t now_ms, int64_t max_lag_ms)
{
    int32_t *ids = NULL, le = 0, pe = 0;
    size_t n = 0, out = 0;
    int64_t leo;

    if (!kb_partmgr_has_isr_fn(part->pm))
        return;
    pthread_mutex_lock(&part->mu);
    if (kb_part_role(part) != KB_PART_LEADER || part->repl.pending || !part->log ||
        part->repl.n < 2) {
        pthread_mutex_unlock(&part->mu);
        return;
    }
    leo = kb_log_leo(part->log);
    for (size_t i = 0; i < part->repl.n; i++) {
        kb_replica_t *r = &part->repl.r[i];
        bool lagging = r->isr && r->id != part->repl.self && r->leo != leo &&
                       now_ms - r->last_caught_up_ms > max_lag_ms;
        r->proposed = r->isr && !lagging;
        out += lagging;
    }
    if (out) {
        n = kb_part_proposal_take(part, &ids);
        le = kb_part_epoch(part);
        pe = part->repl.partition_epoch;
    } else {
        for (size_t i = 0; i < part->repl.n; i++)
            part->repl.r[i].proposed = false;
    }
    pthread_mutex_unlock(&part->mu);
    if (ids)
        kb_part_isr_propose(part, "shrink", le, pe, ids, n);
    free(ids);
}

void kb_partmgr_isr_check(kb_partmgr_t *pm)
{
    kb_part_t **v;
    size_t n = 0;
    int64_t now = kb_time_mono_ms();

    if (!kb_partmgr_has_isr_fn(pm))
        return;
    pthread_mutex_lock(&pm->mu);
    v = malloc((pm->open_n ? pm->open_n : 1) * sizeof(*v));
    if (!v) {
        pthread_mutex_unlock(&pm->mu);
        return;
    }
    for (size_t i = 0; i < pm->open_n; i++) {
        kb_part_t *part = pm->open[i];
        if (atomic_load(&part->deleted) || kb_part_role(part) != KB_PART_LEADER)
            continue;
        kb_part_ref(part);
        v[n++] = part;
    }
    pthread_mutex_unlock(&pm->mu);
    for (size_t i = 0; i < n; i++) {
        kb_part_isr_check(v[i], now, pm->o.cfg->replica_lag_time_max_ms);
        kb_part_release(v[i]);
    }
    free(v);
}

int kb_part_follower_append(kb_part_t *part, const uint8_t *buf, size_t len, int64_t leader_hw,
                            int64_t leader_log_start, kb_append_info_t *info)
{
    kb_append_info_t local;
    int rc = 0;
    if (!info)
        info = &local;
    memset(info, 0, sizeof(*info));
    info->first_offset = info->last_offset = -1;
    /* The role cannot change in the middle of the append. */
    pthread_rwlock_rdlock(&part->role_rw);
    if (kb_part_role(part) != KB_PART_FOLLOWER || !part->log || atomic_load(&part->deleted)) {
        pthread_rwlock_unlock(&part->role_rw);
        return KB_E_STATE;
    }
    if (len > 0) {
        kp_batch_hdr_t h;
        int64_t leo = kb_log_leo(part->log);
        /* The leader's log start inside a batch (DeleteRecords to a mid-batch offset): an
         * empty log restarted at that start gets the whole batch, which begins below it.
         * Kafka's follower restarts the log at the batch's base offset and then takes the
         * leader's log start below (design M71). */
        if (leo == kb_log_start_offset(part->log) && kp_batch_hdr_decode(buf, len, &h) == 0 &&
            h.baseOffset >= 0 && h.baseOffset < leo && kp_batch_hdr_last_offset(&h) >= leo) {
            rc = kb_log_truncate_fully(part->log, h.baseOffset);
            if (rc == 0)
                kb_log_info("api",
                            "%s-%" PRId32 ": the leader's log start %" PRId64
                            " is inside the batch at %" PRId64 "; restarted the log there",
                            part->topic, part->index, leo, h.baseOffset);
        }
        if (rc == 0)
            rc = kb_log_append_raw(part->log, buf, len, info);
    }
    if (rc == 0 && leader_hw >= 0) {
        int64_t leo = kb_log_leo(part->log);
        kb_log_set_hw(part->log, leader_hw < leo ? leader_hw : leo);
    }
    if (rc == 0 && leader_log_start > kb_log_start_offset(part->log)) {
        int64_t hw = kb_log_hw(part->log);
        rc = kb_log_set_start_offset(part->log, leader_log_start < hw ? leader_log_start : hw);
    }
    pthread_rwlock_unlock(&part->role_rw);
    return rc;
}

int kb_part_follower_position(kb_part_t *part, int32_t *leader, int32_t *leader_epoch,
                              int64_t *fetch_offset, int32_t *last_fetched_epoch,
                              int64_t *log_start)
{
    pthread_mutex_lock(&part->mu);
    if (kb_part_role(part) != KB_PART_FOLLOWER || !part->log) {
        pthread_mutex_unlock(&part->mu);
        return KB_E_STATE;
    }
    if (leader)
        *leader = part->repl.leader;
    if (leader_epoch)
        *leader_epoch = kb_part_epoch(part);
    /* Under mu: no follower append or truncation runs meanwhile. */
    if (fetch_offset)
        *fetch_offset = kb_log_leo(part->log);
    if (last_fetched_epoch)
        *last_fetched_epoch = kb_log_latest_epoch(part->log);
    if (log_start)
        *log_start = kb_log_start_offset(part->log);
    pthread_mutex_unlock(&part->mu);
    return 0;
}

/* The truncation itself, role lock held (read) and the role checked. */
static int kb_part_follower_truncate_locked(kb_part_t *part, int64_t offset, bool fully)
{
    /* An offset inside a batch (a compressed batch holds several records) truncates at the
     * batch's start (kb_log_truncate_to, Kafka's rule, the same as on the leader): the LEO
     * stays at a batch boundary for the next fetch to append. */
    int rc =
        fully ? kb_log_truncate_fully(part->log, offset) : kb_log_truncate_to(part->log, offset);
    if (rc == 0)
        kb_log_info("api", "%s-%" PRId32 ": truncated %sto offset %" PRId64, part->topic,
                    part->index, fully ? "fully " : "", kb_log_leo(part->log));
    return rc;
}

/* Role lock (read) taken and the follower role checked: true. */
static bool kb_part_follower_enter(kb_part_t *part)
{
    pthread_rwlock_rdlock(&part->role_rw);
    if (kb_part_role(part) != KB_PART_FOLLOWER || !part->log || atomic_load(&part->deleted)) {
        pthread_rwlock_unlock(&part->role_rw);
        return false;
    }
    return true;
}

static void kb_part_follower_leave(kb_part_t *part)
{
    pthread_rwlock_unlock(&part->role_rw);
    if (part->pm->o.dq)
        kb_dq_notify(part->pm->o.dq, &part->watch);
}

static int kb_part_follower_truncate(kb_part_t *part, int64_t offset, bool fully)
{
    int rc;
    if (offset < 0)
        return KB_STO_INVALID;
    if (!kb_part_follower_enter(part))
        return KB_E_STATE;
    rc = kb_part_follower_truncate_locked(part, offset, fully);
    kb_part_follower_leave(part);
    return rc;
}

int kb_part_follower_diverging(kb_part_t *part, int32_t leader_epoch, int64_t leader_end_offset,
                               int64_t *truncated_to, bool *done)
{
    int64_t leo, target;
    bool complete = true;
    int rc;
    if (!kb_part_follower_enter(part))
        return KB_E_STATE;
    leo = kb_log_leo(part->log);
    if (leader_end_offset < 0) {
        target = kb_log_hw(part->log); /* the leader knows no end: fall back to the HW */
    } else if (leader_epoch < 0) {
        target = leader_end_offset < leo ? leader_end_offset : leo;
    } else {
        int32_t fe;
        int64_t fo;
        kb_log_epoch_end_offset(part->log, leader_epoch, &fe, &fo);
        if (fe < 0 || fo < 0) {
            /* this replica has no epoch up to the leader's: the leader's end offset decides */
            target = leader_end_offset;
        } else if (fe != leader_epoch) {
            /* it does not know the leader's epoch: back to the end of its own largest older
             * one, then ask again with that epoch */
            target = fo;
            complete = false;
        } else {
            target = fo < leader_end_offset ? fo : leader_end_offset;
        }
        if (target > leo)
            target = leo;
    }
    /* Nothing to cut still drops epoch entries starting at the LEO (kb_log_truncate_to): one
     * left from this broker's own leadership with no append would make the leader answer the
     * same DivergingEpoch to every fetch (seen: a __mirror_state follower looping forever). */
    rc = target < leo ? kb_part_follower_truncate_locked(part, target, false)
                      : kb_log_truncate_to(part->log, leo);
    if (truncated_to)
        *truncated_to = kb_log_leo(part->log);
    if (done)
        *done = complete;
    kb_part_follower_leave(part);
    return rc;
}

int kb_part_truncate_to(kb_part_t *part, int64_t offset)
{
    return kb_part_follower_truncate(part, offset, false);
}

int kb_part_truncate_fully(kb_part_t *part, int64_t offset)
{
    return kb_part_follower_truncate(part, offset, true);
}
