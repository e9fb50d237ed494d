/*
 * kb_meta.c -- the metadata image, the one path that changes it (records applied batch by batch,
 * which also drives the local partitions and the listeners), and the controller's mutations
 * (validate against the image, turn the change into records, commit them through the metadata
 * log, apply). kb_meta_log.c keeps the log. See kb_meta.h and docs/broker.md.
 */
#include "kb_meta.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kb_err.h"
#include "kb_apilog.h"
#include "kb_file.h"
#include "kb_meta_int.h"
#include "kb_props.h"
#include "kp_batch.h"
#include "kp_errcode.h"
#include "kp_writer.h"

#define KB_PID_BLOCK 1000

/* ---- small helpers ------------------------------------------------------------------------ */

static uint64_t kb_meta_hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static uint64_t kb_meta_hash_id(const kp_uuid_t *id)
{
    uint64_t h = 0;
    for (size_t i = 0; i < 16; i++)
        h = h * 131 + id->b[i];
    return h;
}

void kb_kv_free(kb_kv_t *kv, size_t cnt)
{
    for (size_t i = 0; kv && i < cnt; i++) {
        free(kv[i].key);
        free(kv[i].value);
    }
    free(kv);
}

static int kb_kv_dup(const kb_kv_t *src, size_t cnt, kb_kv_t **out)
{
    kb_kv_t *kv = calloc(cnt ? cnt : 1, sizeof(*kv));
    if (!kv)
        return KB_E_NOMEM;
    for (size_t i = 0; i < cnt; i++) {
        kv[i].key = strdup(src[i].key);
        kv[i].value = strdup(src[i].value ? src[i].value : "");
        if (!kv[i].key || !kv[i].value) {
            kb_kv_free(kv, cnt);
            return KB_E_NOMEM;
        }
    }
    *out = kv;
    return 0;
}

/* Set key=value in a malloc'd kv array (value NULL removes). 0 or KB_E_NOMEM. */
static int kb_kv_set(kb_kv_t **kvp, size_t *cnt, const char *key, const char *value)
{
    kb_kv_t *kv = *kvp;
    for (size_t i = 0; i < *cnt; i++) {
        if (strcmp(kv[i].key, key))
            continue;
        if (!value) {
            free(kv[i].key);
            free(kv[i].value);
            kv[i] = kv[--*cnt];
            return 0;
        }
        char *v = strdup(value);
        if (!v)
            return KB_E_NOMEM;
        free(kv[i].value);
        kv[i].value = v;
        return 0;
    }
    if (!value)
        return 0;
    kv = realloc(kv, (*cnt + 1) * sizeof(*kv));
    if (!kv)
        return KB_E_NOMEM;
    *kvp = kv;
    kv[*cnt].key = strdup(key);
    kv[*cnt].value = strdup(value);
    if (!kv[*cnt].key || !kv[*cnt].value) {
        free(kv[*cnt].key);
        free(kv[*cnt].value);
        return KB_E_NOMEM;
    }
    (*cnt)++;
    return 0;
}

static void kb_mpart_clear(kb_mpart_t *p)
{
    free(p->replicas);
    free(p->isr);
    memset(p, 0, sizeof(*p));
}

void kb_mtopic_free(kb_mtopic_t *t)
{
    if (!t)
        return;
    free(t->name);
    for (int32_t i = 0; t->pi && i < t->cap; i++)
        kb_mpart_clear(&t->pi[i]);
    free(t->pi);
    kb_kv_free(t->cfg, t->cfg_cnt);
    free(t->parts);
    free(t);
}

static bool kb_meta_is_mirror(const kb_mtopic_t *t)
{
    return kb_kv_get(t->cfg, t->cfg_cnt, KB_TCONF_MIRROR_NAME) != NULL;
}

static void kb_meta_info(const kb_mtopic_t *t, kb_topic_info_t *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", t->name);
    out->id = t->id;
    out->internal = t->internal;
    out->mirror = kb_meta_is_mirror(t);
    out->partitions = t->nparts;
}

static kb_dyncfg_t kb_meta_dyn(const kb_meta_t *meta)
{
    kb_dyncfg_t d = {meta->dyn_node, meta->dyn_node_cnt, meta->dyn_dflt, meta->dyn_dflt_cnt};
    return d;
}

/* ---- hash tables (rw write lock held to change) ------------------------------------------- */

static kb_mtopic_t *kb_meta_find(const kb_meta_t *meta, const char *name)
{
    kb_mtopic_t *t;
    if (!meta->nbuckets)
        return NULL;
    for (t = meta->by_name[kb_meta_hash_str(name) & (meta->nbuckets - 1)]; t; t = t->next_name)
        if (!strcmp(t->name, name))
            return t;
    return NULL;
}

static kb_mtopic_t *kb_meta_find_id(const kb_meta_t *meta, const kp_uuid_t *id)
{
    kb_mtopic_t *t;
    if (!meta->nbuckets)
        return NULL;
    for (t = meta->by_id[kb_meta_hash_id(id) & (meta->nbuckets - 1)]; t; t = t->next_id)
        if (!memcmp(t->id.b, id->b, 16))
            return t;
    return NULL;
}

static int kb_meta_grow(kb_meta_t *meta)
{
    size_t nb = meta->nbuckets ? meta->nbuckets * 2 : 64;
    kb_mtopic_t **bn = calloc(nb, sizeof(*bn)), **bi = calloc(nb, sizeof(*bi));
    if (!bn || !bi) {
        free(bn);
        free(bi);
        return KB_E_NOMEM;
    }
    for (size_t i = 0; i < meta->nbuckets; i++) {
        kb_mtopic_t *t = meta->by_name[i];
        while (t) {
            kb_mtopic_t *n = t->next_name;
            size_t b = kb_meta_hash_str(t->name) & (nb - 1);
            t->next_name = bn[b];
            bn[b] = t;
            t = n;
        }
        t = meta->by_id[i];
        while (t) {
            kb_mtopic_t *n = t->next_id;
            size_t b = kb_meta_hash_id(&t->id) & (nb - 1);
            t->next_id = bi[b];
            bi[b] = t;
            t = n;
        }
    }
    free(meta->by_name);
    free(meta->by_id);
    meta->by_name = bn;
    meta->by_id = bi;
    meta->nbuckets = nb;
    return 0;
}

static int kb_meta_insert(kb_meta_t *meta, kb_mtopic_t *t)
{
    size_t b;
    if ((meta->ntopics + 1 > meta->nbuckets * 2 || !meta->nbuckets) && kb_meta_grow(meta) != 0 &&
        !meta->nbuckets)
        return KB_E_NOMEM;
    b = kb_meta_hash_str(t->name) & (meta->nbuckets - 1);
    t->next_name = meta->by_name[b];
    meta->by_name[b] = t;
    b = kb_meta_hash_id(&t->id) & (meta->nbuckets - 1);
    t->next_id = meta->by_id[b];
    meta->by_id[b] = t;
    meta->ntopics++;
    return 0;
}

static void kb_meta_unlink(kb_meta_t *meta, kb_mtopic_t *t)
{
    kb_mtopic_t **pp;
    for (pp = &meta->by_name[kb_meta_hash_str(t->name) & (meta->nbuckets - 1)]; *pp;
         pp = &(*pp)->next_name) {
        if (*pp == t) {
            *pp = t->next_name;
            break;
        }
    }
    for (pp = &meta->by_id[kb_meta_hash_id(&t->id) & (meta->nbuckets - 1)]; *pp;
         pp = &(*pp)->next_id) {
        if (*pp == t) {
            *pp = t->next_id;
            break;
        }
    }
    meta->ntopics--;
}

#define KB_META_FOREACH(meta, t)                                                                   \
    for (size_t kb_b_ = 0; kb_b_ < (meta)->nbuckets; kb_b_++)                                      \
        for (kb_mtopic_t *t = (meta)->by_name[kb_b_]; t; t = t->next_name)

/* Write @p len bytes to @p dir/@p name atomically (kb_file_write_atomic_tmp: temp file, fsync,
 * rename, fsync of the directory, whose failure alone is not an error here). */
static int kb_meta_write_atomic(const char *dir, const char *name, const void *buf, size_t len)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return kb_file_write_atomic_tmp(dir, path, NULL, buf, len) < 0 ? KB_E_IO : 0;
}

/* ---- meta.properties ------------------------------------------------------------------------ */

typedef struct kb_metaprops_s {
    char cluster_id[64];
    char node_id[16];
    char directory_id[32];
    bool found;
} kb_metaprops_t;

static int kb_metaprops_cb(void *opaque, const char *key, const char *value, int lineno)
{
    kb_metaprops_t *mp = opaque;
    (void)lineno;
    if (!strcmp(key, "cluster.id"))
        snprintf(mp->cluster_id, sizeof(mp->cluster_id), "%s", value);
    else if (!strcmp(key, "node.id") || !strcmp(key, "broker.id"))
        snprintf(mp->node_id, sizeof(mp->node_id), "%s", value);
    else if (!strcmp(key, "directory.id"))
        snprintf(mp->directory_id, sizeof(mp->directory_id), "%s", value);
    return 0;
}

static int kb_metaprops_write(const char *dir, const char *cluster_id, int32_t node_id,
                              const char *dir_id)
{
    char buf[512], date[64];
    time_t now = time(NULL);
    struct tm tm;
    int n;
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%a %b %d %H:%M:%S UTC %Y", &tm);
    n = snprintf(buf, sizeof(buf),
                 "#\n#%s\ncluster.id=%s\ndirectory.id=%s\nnode.id=%" PRId32 "\nversion=1\n", date,
                 cluster_id, dir_id, node_id);
    return kb_meta_write_atomic(dir, "meta.properties", buf, (size_t)n);
}

/* ---- open / attach / close ---------------------------------------------------------------- */

kb_meta_t *kb_meta_open(const kb_config_t *cfg, char *errstr, size_t errstr_size)
{
    kb_meta_t *meta = calloc(1, sizeof(*meta));
    char *dirs = NULL, *p, *save = NULL;
    kb_metaprops_t mp[65];
    const char *dirv[65];
    size_t nd = 0;

    if (!meta) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    meta->cfg = cfg;
    meta->node_id = cfg->node_id;
    snprintf(meta->node_id_str, sizeof(meta->node_id_str), "%" PRId32, cfg->node_id);
    pthread_mutex_init(&meta->change_mu, NULL);
    pthread_mutex_init(&meta->pid_mu, NULL);
    pthread_rwlock_init(&meta->rw, NULL);
    meta->pid_persisted = meta->pid_next = 0;
    meta->offset = -1;
    meta->snap_end = -1;
    meta->remote = -1;

    dirs = strdup(cfg->eff_log_dirs ? cfg->eff_log_dirs : "/tmp/kafka-logs");
    if (!dirs)
        goto nomem;
    for (p = strtok_r(dirs, ",", &save); p && nd < 64; p = strtok_r(NULL, ",", &save))
        if (*p)
            dirv[nd++] = p;
    if (nd == 0) {
        snprintf(errstr, errstr_size, "log.dirs is empty");
        goto fail;
    }
    meta->dir = strdup(dirv[0]);
    meta->mdir =
        strdup(cfg->metadata_log_dir && cfg->metadata_log_dir[0] ? cfg->metadata_log_dir : dirv[0]);
    if (!meta->dir || !meta->mdir)
        goto nomem;
    /* The metadata log dir gets its meta.properties too (Kafka's layout). */
    {
        bool listed = false;
        for (size_t i = 0; i < nd; i++)
            listed = listed || !strcmp(dirv[i], meta->mdir);
        if (!listed)
            dirv[nd++] = meta->mdir;
    }
    if (cfg->cluster_id && cfg->cluster_id[0])
        snprintf(meta->cluster_id, sizeof(meta->cluster_id), "%.63s", cfg->cluster_id);

    /* meta.properties of every dir: they must agree with each other and with the config. */
    for (size_t i = 0; i < nd; i++) {
        char path[4200], e[256];
        memset(&mp[i], 0, sizeof(mp[i]));
        if (mkdir(dirv[i], 0755) != 0 && errno != EEXIST) {
            snprintf(errstr, errstr_size, "cannot create log dir %s: %s", dirv[i], strerror(errno));
            goto fail;
        }
        snprintf(path, sizeof(path), "%s/meta.properties", dirv[i]);
        if (access(path, F_OK) != 0)
            continue;
        if (kb_props_load_file(path, kb_metaprops_cb, &mp[i], e, sizeof(e)) != 0) {
            snprintf(errstr, errstr_size, "%s", e);
            goto fail;
        }
        mp[i].found = true;
        if (mp[i].node_id[0] && atoi(mp[i].node_id) != cfg->node_id) {
            snprintf(errstr, errstr_size,
                     "%s has node.id=%s but the configuration says node.id=%" PRId32, path,
                     mp[i].node_id, cfg->node_id);
            goto fail;
        }
        if (mp[i].cluster_id[0]) {
            if (!meta->cluster_id[0]) {
                snprintf(meta->cluster_id, sizeof(meta->cluster_id), "%.63s", mp[i].cluster_id);
            } else if (strcmp(meta->cluster_id, mp[i].cluster_id)) {
                snprintf(errstr, errstr_size,
                         "%s has cluster.id=%s, which does not match %s (cluster.id or another "
                         "log dir)",
                         path, mp[i].cluster_id, meta->cluster_id);
                goto fail;
            }
        }
    }

    if (!meta->cluster_id[0]) {
        kp_uuid_t u;
        kb_uuid_random(&u);
        kb_uuid_str(&u, meta->cluster_id);
        kb_log_info("meta", "new cluster id %s", meta->cluster_id);
    }
    for (size_t i = 0; i < nd; i++) {
        if (!mp[i].found || !mp[i].cluster_id[0]) {
            char did[23];
            kp_uuid_t u;
            kb_uuid_random(&u);
            kb_uuid_str(&u, did);
            if (kb_metaprops_write(dirv[i], meta->cluster_id, meta->node_id,
                                   mp[i].directory_id[0] ? mp[i].directory_id : did) != 0) {
                snprintf(errstr, errstr_size, "cannot write %s/meta.properties: %s", dirv[i],
                         strerror(errno));
                goto fail;
            }
        }
    }
    if (kb_meta_log_open(meta, errstr, errstr_size) != 0)
        goto fail;
    free(dirs);
    return meta;
nomem:
    snprintf(errstr, errstr_size, "out of memory");
fail:
    free(dirs);
    kb_meta_close(meta);
    return NULL;
}

static void kb_meta_build(const kb_meta_t *meta, const kb_mtopic_t *t, kb_log_config_t *lc,
                          kb_tconf_extra_t *ex)
{
    kb_dyncfg_t dyn = kb_meta_dyn(meta);
    kb_tconf_build(t->cfg, t->cfg_cnt, meta->cfg, &dyn, lc, ex);
}

int kb_meta_log_config_for(void *opaque, const char *topic, int32_t partition, kb_log_config_t *cfg)
{
    kb_meta_t *meta = opaque;
    kb_mtopic_t *t;
    kb_tconf_extra_t ex;
    int rc = -1;
    pthread_rwlock_rdlock(&meta->rw);
    t = kb_meta_find(meta, topic);
    if (t && partition < t->nparts) {
        kb_meta_build(meta, t, cfg, &ex);
        rc = 0;
    }
    pthread_rwlock_unlock(&meta->rw);
    return rc;
}

/* Whether @p s is the state kb_part_open() gives a partition: this node the only replica and
 * leader, partition epoch 0. */
static bool kb_mpart_is_default(const kb_meta_t *meta, const kb_mpart_t *s)
{
    return s->leader == meta->node_id && s->partition_epoch == 0 && s->nreplicas == 1 &&
           s->replicas[0] == meta->node_id && s->nisr == 1 && s->isr[0] == meta->node_id;
}

/* Whether this node keeps a local log of @p s: one of its replicas (or no replica list: the
 * single-node state). */
static bool kb_mpart_is_local(const kb_meta_t *meta, const kb_mpart_t *s)
{
    if (s->nreplicas <= 0 || !s->replicas)
        return true;
    for (int32_t i = 0; i < s->nreplicas; i++)
        if (s->replicas[i] == meta->node_id)
            return true;
    return false;
}

/* Give local partition @p part the image's replication state of partition @p p of @p t: leader
 * or follower at the image's leader and partition epochs, with its replicas and ISR (change_mu
 * held). A state the partition already has or has passed is left alone. */
static void kb_meta_push_state(const kb_meta_t *meta, const kb_mtopic_t *t, int32_t p,
                               kb_part_t *part)
{
    const kb_mpart_t *s = &t->pi[p];
    int rc;
    if (s->nreplicas <= 0)
        return;
    if (s->leader == meta->node_id)
        rc = kb_part_become_leader(part, s->leader_epoch, s->partition_epoch, s->replicas,
                                   (size_t)s->nreplicas, s->isr,
                                   (size_t)(s->nisr > 0 ? s->nisr : 0));
    else
        rc = kb_part_become_follower(part, s->leader, s->leader_epoch, s->partition_epoch,
                                     s->replicas, (size_t)s->nreplicas, s->isr,
                                     (size_t)(s->nisr > 0 ? s->nisr : 0));
    if (rc != 0 && rc != KB_E_STATE)
        kb_log_error("meta",
                     "%s-%" PRId32 ": the metadata's replica state (leader %" PRId32
                     ", leader epoch %" PRId32 ", %" PRId32 " replicas) does not fit this node: %s",
                     t->name, p, s->leader, s->leader_epoch, s->nreplicas, kb_err_str(rc));
}

/* Open the partitions [from, to) of @p t. 0 or KB_E_IO (the opened ones are deleted again
 * when @p undo_on_error). */
static int kb_meta_open_parts(kb_meta_t *meta, kb_mtopic_t *t, int32_t from, int32_t to,
                              bool undo_on_error, char *err, size_t err_size)
{
    kb_log_config_t lc;
    kb_tconf_extra_t ex;
    bool mirror = kb_meta_is_mirror(t);
    if (!meta->pm)
        return 0;
    kb_meta_build(meta, t, &lc, &ex);
    for (int32_t i = from; i < to; i++) {
        if (!kb_mpart_is_local(meta, &t->pi[i])) {
            t->parts[i] = NULL; /* a replica of other brokers only */
            continue;
        }
        t->parts[i] = kb_part_open(meta->pm, t->name, &t->id, i, t->pi[i].leader_epoch, &lc, &ex,
                                   mirror, t->internal, err, err_size);
        if (t->parts[i] && !kb_mpart_is_default(meta, &t->pi[i]))
            kb_meta_push_state(meta, t, i, t->parts[i]);
        if (!t->parts[i]) {
            kb_log_error("meta", "cannot open %s-%" PRId32 ": %s", t->name, i, err);
            if (undo_on_error) {
                for (int32_t k = from; k < i; k++) {
                    if (t->parts[k])
                        kb_part_delete(t->parts[k]);
                    t->parts[k] = NULL;
                }
            }
            return KB_E_IO;
        }
    }
    return 0;
}

static void kb_meta_orphan(void *opaque, const char *topic, int32_t partition)
{
    kb_meta_t *meta = opaque;
    if (!strcmp(topic, KB_TOPIC_CLUSTER_METADATA))
        return; /* the metadata log in a log dir (the storage engine does not list it) */
    kb_partmgr_delete_orphan(meta->pm, topic, partition);
}

void kb_meta_set_mirror_plugin(kb_meta_t *meta, bool loaded)
{
    if (meta && meta->pm)
        kb_partmgr_set_mirror_plugin(meta->pm, loaded);
}

int kb_meta_attach(kb_meta_t *meta, kb_partmgr_t *pm, char *errstr, size_t errstr_size)
{
    char err[512];
    size_t bad = 0;
    pthread_mutex_lock(&meta->change_mu);
    meta->pm = pm;
    KB_META_FOREACH(meta, t)
    {
        if (kb_meta_open_parts(meta, t, 0, t->nparts, false, err, sizeof(err)) != 0)
            bad++;
    }
    pthread_mutex_unlock(&meta->change_mu);
    kb_partmgr_foreach_unclaimed(pm, kb_meta_orphan, meta);
    if (bad)
        kb_log_error("meta", "%zu topics have partitions that could not be opened", bad);
    (void)errstr;
    (void)errstr_size;
    return 0;
}

void kb_meta_close(kb_meta_t *meta)
{
    if (!meta)
        return;
    kb_meta_log_close(meta); /* first: it may write a snapshot of the image */
    for (size_t b = 0; b < meta->nbuckets; b++) {
        kb_mtopic_t *t = meta->by_name[b];
        while (t) {
            kb_mtopic_t *n = t->next_name;
            for (int32_t i = 0; t->parts && i < t->nparts; i++)
                if (t->parts[i])
                    kb_part_close(t->parts[i]);
            kb_mtopic_free(t);
            t = n;
        }
    }
    while (meta->listeners) {
        kb_meta_listener_t *l = meta->listeners;
        meta->listeners = l->next;
        free(l);
    }
    free(meta->by_name);
    free(meta->by_id);
    kb_kv_free(meta->dyn_node, meta->dyn_node_cnt);
    kb_kv_free(meta->dyn_dflt, meta->dyn_dflt_cnt);
    free(meta->brokers);
    kb_meta_recs_free(meta->acls, meta->nacls);
    kb_meta_recs_free(meta->precs, meta->nprecs);
    free(meta->dir);
    free(meta->mdir);
    pthread_rwlock_destroy(&meta->rw);
    pthread_mutex_destroy(&meta->change_mu);
    pthread_mutex_destroy(&meta->pid_mu);
    free(meta);
}

const char *kb_meta_cluster_id(const kb_meta_t *meta)
{
    return meta->cluster_id;
}

int32_t kb_meta_node_id(const kb_meta_t *meta)
{
    return meta->node_id;
}

int64_t kb_meta_offset(kb_meta_t *meta)
{
    int64_t o;
    pthread_rwlock_rdlock(&meta->rw);
    o = meta->offset;
    pthread_rwlock_unlock(&meta->rw);
    return o;
}

/* ---- lookups ------------------------------------------------------------------------------ */

int kb_meta_topic_by_name(kb_meta_t *meta, const char *name, kb_topic_info_t *out)
{
    kb_mtopic_t *t;
    int rc = KB_E_NOT_FOUND;
    pthread_rwlock_rdlock(&meta->rw);
    if ((t = kb_meta_find(meta, name))) {
        if (out)
            kb_meta_info(t, out);
        rc = 0;
    }
    pthread_rwlock_unlock(&meta->rw);
    return rc;
}

int kb_meta_topic_by_id(kb_meta_t *meta, const kp_uuid_t *id, kb_topic_info_t *out)
{
    kb_mtopic_t *t;
    int rc = KB_E_NOT_FOUND;
    pthread_rwlock_rdlock(&meta->rw);
    if ((t = kb_meta_find_id(meta, id))) {
        if (out)
            kb_meta_info(t, out);
        rc = 0;
    }
    pthread_rwlock_unlock(&meta->rw);
    return rc;
}

bool kb_meta_topic_mirror(kb_meta_t *meta, const char *name, char *mirror, size_t size,
                          bool *stopped)
{
    kb_mtopic_t *t;
    const char *mn = NULL;
    pthread_rwlock_rdlock(&meta->rw);
    if ((t = kb_meta_find(meta, name)))
        mn = kb_kv_get(t->cfg, t->cfg_cnt, KB_TCONF_MIRROR_NAME);
    if (mn)
        kb_tconf_mirror_value(mn, mirror, size, stopped);
    pthread_rwlock_unlock(&meta->rw);
    return mn != NULL;
}

static int kb_meta_info_cmp(const void *a, const void *b)
{
    return strcmp(((const kb_topic_info_t *)a)->name, ((const kb_topic_info_t *)b)->name);
}

int kb_meta_topics(kb_meta_t *meta, kb_topic_info_t **out, size_t *cnt)
{
    size_t n = 0;
    kb_topic_info_t *v;
    pthread_rwlock_rdlock(&meta->rw);
    v = malloc((meta->ntopics ? meta->ntopics : 1) * sizeof(*v));
    if (!v) {
        pthread_rwlock_unlock(&meta->rw);
        return KB_E_NOMEM;
    }
    KB_META_FOREACH(meta, t)
    kb_meta_info(t, &v[n++]);
    pthread_rwlock_unlock(&meta->rw);
    qsort(v, n, sizeof(*v), kb_meta_info_cmp);
    *out = v;
    *cnt = n;
    return 0;
}

int kb_meta_topic_epochs(kb_meta_t *meta, const char *name, int32_t **epochs, int32_t *cnt)
{
    kb_mtopic_t *t;
    int rc = KB_E_NOT_FOUND;
    pthread_rwlock_rdlock(&meta->rw);
    if ((t = kb_meta_find(meta, name))) {
        *epochs = malloc(((size_t)t->nparts + 1) * sizeof(**epochs));
        if (*epochs) {
            for (int32_t i = 0; i < t->nparts; i++)
                (*epochs)[i] = t->pi[i].leader_epoch;
            *cnt = t->nparts;
            rc = 0;
        } else {
            rc = KB_E_NOMEM;
        }
    }
    pthread_rwlock_unlock(&meta->rw);
    return rc;
}

int kb_meta_topic_configs(kb_meta_t *meta, const char *name, kb_kv_t **kv, size_t *cnt)
{
    kb_mtopic_t *t;
    int rc = KB_E_NOT_FOUND;
    pthread_rwlock_rdlock(&meta->rw);
    if ((t = kb_meta_find(meta, name))) {
        rc = kb_kv_dup(t->cfg, t->cfg_cnt, kv);
        if (!rc)
            *cnt = t->cfg_cnt;
    }
    pthread_rwlock_unlock(&meta->rw);
    return rc;
}

static int kb_meta_part_of(const kb_meta_t *meta, kb_mtopic_t *t, int32_t partition,
                           kb_part_t **out)
{
    if (!t)
        return KB_META_UNKNOWN_TOPIC;
    if (partition < 0 || partition >= t->nparts)
        return KB_META_UNKNOWN_PARTITION;
    if (!t->parts || !t->parts[partition]) {
        if (!kb_mpart_is_local(meta, &t->pi[partition]))
            return KB_META_NOT_REPLICA;
        return t->pi[partition].opening ? KB_META_NOT_READY : KB_META_OFFLINE;
    }
    kb_part_ref(t->parts[partition]);
    *out = t->parts[partition];
    return KB_META_OK;
}

int kb_meta_part(kb_meta_t *meta, const char *topic, int32_t partition, kb_part_t **out)
{
    int rc;
    *out = NULL;
    pthread_rwlock_rdlock(&meta->rw);
    rc = kb_meta_part_of(meta, kb_meta_find(meta, topic), partition, out);
    pthread_rwlock_unlock(&meta->rw);
    return rc;
}

int kb_meta_part_by_id(kb_meta_t *meta, const kp_uuid_t *id, int32_t partition, kb_part_t **out)
{
    int rc;
    *out = NULL;
    pthread_rwlock_rdlock(&meta->rw);
    rc = kb_meta_part_of(meta, kb_meta_find_id(meta, id), partition, out);
    pthread_rwlock_unlock(&meta->rw);
    return rc;
}

/* ---- validation --------------------------------------------------------------------------- */

bool kb_meta_topic_name_valid(const char *name, char *msg, size_t msg_size)
{
    size_t n = strlen(name);
    if (n == 0) {
        snprintf(msg, msg_size, "Topic name is illegal, it can't be empty");
        return false;
    }
    if (!strcmp(name, ".") || !strcmp(name, "..")) {
        snprintf(msg, msg_size, "Topic name cannot be \".\" or \"..\"");
        return false;
    }
    if (n > KB_TOPIC_NAME_MAX) {
        snprintf(
            msg, msg_size,
            "Topic name is illegal, it can't be longer than %d characters, topic name: %.60s...",
            KB_TOPIC_NAME_MAX, name);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!isalnum((unsigned char)c) && c != '.' && c != '_' && c != '-') {
            snprintf(msg, msg_size,
                     "Topic name \"%s\" is illegal, it contains a character other than ASCII "
                     "alphanumerics, '.', '_' and '-'",
                     name);
            return false;
        }
    }
    return true;
}

bool kb_meta_topic_is_internal_name(const char *name)
{
    return !strcmp(name, KB_TOPIC_CONSUMER_OFFSETS) || !strcmp(name, KB_TOPIC_TRANSACTION_STATE) ||
           !strcmp(name, KB_TOPIC_MIRROR_STATE);
}

/* '.' and '_' collide in metric names, so Kafka refuses names differing only by them. */
static kb_mtopic_t *kb_meta_collision(const kb_meta_t *meta, const char *name)
{
    char a[KB_TOPIC_NAME_MAX + 1], b[KB_TOPIC_NAME_MAX + 1];
    size_t n = strlen(name);
    if (!strchr(name, '.') && !strchr(name, '_'))
        return NULL;
    for (size_t i = 0; i <= n && i < sizeof(a); i++)
        a[i] = name[i] == '.' ? '_' : name[i];
    KB_META_FOREACH(meta, t)
    {
        size_t m = strlen(t->name);
        if (m != n || !strcmp(t->name, name))
            continue;
        for (size_t i = 0; i <= m && i < sizeof(b); i++)
            b[i] = t->name[i] == '.' ? '_' : t->name[i];
        if (!strcmp(a, b))
            return t;
    }
    return NULL;
}

/* ---- the apply path ------------------------------------------------------------------------- */

/*
 * Records change the image under the write lock, one batch at a time. What the change means
 * for the local partitions (logs to delete or open, epochs, reconfiguration) and for the
 * listeners is collected in a delta and carried out after the lock is dropped, still under
 * change_mu: side effects first, then the events in record order.
 */

#define KB_MACT_EVENT  1
#define KB_MACT_DELETE 2 /* delete a local partition (its topic left the image) */
#define KB_MACT_STATE  3 /* give a local partition the image's replication state */
#define KB_MACT_OPEN   4 /* open the local log of a new partition (no staged log) */

typedef struct kb_mact_s {
    int kind;
    kb_part_t *part;   /* DELETE, STATE (a reference) */
    kp_uuid_t id;      /* EVENT (topic events), OPEN, STATE */
    int32_t partition; /* EVENT (EPOCH), OPEN, STATE */
    int32_t epoch;     /* EVENT (EPOCH) */
    int type;          /* EVENT: KB_META_EV_* */
    uint32_t flags;    /* EVENT: TOPIC */
    bool has_topic;    /* EVENT: info is valid */
    kb_topic_info_t info;
    int8_t rtype; /* EVENT: CONFIG */
    char *rname, *key, *value;
    bool has_acl; /* EVENT: ACL, acl is a copy of the record */
    kb_mrec_t acl;
} kb_mact_t;

typedef struct kb_mdelta_s {
    kb_mact_t *v;
    size_t n, cap;
    bool reconf_all;
    size_t last_tev;      /* 1 + index of the last topic event, 0 = none */
    kb_mtopic_t *removed; /* topics unlinked by the batch, freed after the events */
    int err;              /* KB_E_NOMEM: some side effect or event could not be recorded */
} kb_mdelta_t;

static kb_mact_t *kb_mdelta_push(kb_mdelta_t *d, int kind)
{
    kb_mact_t *a;
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 16;
        kb_mact_t *nv = realloc(d->v, nc * sizeof(*nv));
        if (!nv) {
            d->err = KB_E_NOMEM;
            return NULL;
        }
        d->v = nv;
        d->cap = nc;
    }
    a = &d->v[d->n++];
    memset(a, 0, sizeof(*a));
    a->kind = kind;
    return a;
}

static void kb_mdelta_topic_event(kb_mdelta_t *d, const kb_mtopic_t *t, uint32_t flags)
{
    kb_mact_t *a;
    /* One PARTITIONS event for a run of PartitionRecords of a topic; a CREATED one covers
     * its partitions. */
    if ((flags & KB_META_TOPIC_PARTITIONS) && d->last_tev > 0) {
        a = &d->v[d->last_tev - 1];
        if (!memcmp(a->id.b, t->id.b, 16) &&
            (a->flags & (KB_META_TOPIC_CREATED | KB_META_TOPIC_PARTITIONS)))
            return;
    }
    if (!(a = kb_mdelta_push(d, KB_MACT_EVENT)))
        return;
    a->type = KB_META_EV_TOPIC;
    a->flags = flags;
    a->id = t->id;
    a->has_topic = true;
    kb_meta_info(t, &a->info);
    d->last_tev = d->n;
}

static void kb_mdelta_free(kb_mdelta_t *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->v[i].rname);
        free(d->v[i].key);
        free(d->v[i].value);
        if (d->v[i].has_acl)
            kb_mrec_clear(&d->v[i].acl);
        if (d->v[i].part)
            kb_part_release(d->v[i].part);
    }
    free(d->v);
    while (d->removed) {
        kb_mtopic_t *t = d->removed;
        d->removed = t->next_name;
        kb_mtopic_free(t);
    }
    memset(d, 0, sizeof(*d));
}

/* Make room for partition @p p (< KB_META_MAX_PART) in @p t. 0 or KB_E_NOMEM. */
static int kb_mtopic_reserve(kb_mtopic_t *t, int32_t p)
{
    int32_t nc;
    kb_mpart_t *npi;
    kb_part_t **np;
    if (p < t->cap)
        return 0;
    nc = t->cap ? t->cap : 1;
    while (nc <= p)
        nc = nc > KB_META_MAX_PART / 2 ? KB_META_MAX_PART : nc * 2;
    npi = realloc(t->pi, (size_t)nc * sizeof(*npi));
    if (!npi)
        return KB_E_NOMEM;
    t->pi = npi;
    np = realloc(t->parts, (size_t)nc * sizeof(*np));
    if (!np)
        return KB_E_NOMEM;
    t->parts = np;
    memset(&t->pi[t->cap], 0, (size_t)(nc - t->cap) * sizeof(*npi));
    memset(&t->parts[t->cap], 0, (size_t)(nc - t->cap) * sizeof(*np));
    t->cap = nc;
    return 0;
}

static int32_t *kb_ints_dup(const int32_t *v, int32_t n)
{
    int32_t *c = malloc(((size_t)(n > 0 ? n : 0) + 1) * sizeof(*c));
    if (c && n > 0)
        memcpy(c, v, (size_t)n * sizeof(*c));
    return c;
}

static int kb_meta_apply_topic(kb_meta_t *meta, const kb_mrec_t *r, kb_mdelta_t *d, char *err,
                               size_t err_size)
{
    kb_mtopic_t *t;
    char msg[300];
    if (!r->name || !kb_meta_topic_name_valid(r->name, msg, sizeof(msg)) ||
        !strcmp(r->name, KB_TOPIC_CLUSTER_METADATA)) {
        snprintf(err, err_size, "invalid topic name: %s", r->name ? r->name : "(none)");
        return -1;
    }
    if (kb_uuid_is_zero(&r->topic_id)) {
        snprintf(err, err_size, "topic %s has the zero topic id", r->name);
        return -1;
    }
    if (kb_meta_find(meta, r->name) || kb_meta_find_id(meta, &r->topic_id)) {
        snprintf(err, err_size, "topic %s (or its id) already exists", r->name);
        return -1;
    }
    t = calloc(1, sizeof(*t));
    if (t)
        t->id = r->topic_id;
    if (!t || !(t->name = strdup(r->name)) || kb_meta_insert(meta, t) != 0) {
        kb_mtopic_free(t);
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    /* Kafka has no internal flag in TopicRecord: internal topics are known by their names. */
    t->internal = kb_meta_topic_is_internal_name(t->name);
    kb_mdelta_topic_event(d, t, KB_META_TOPIC_CREATED);
    return 0;
}

static int kb_meta_check_replicas(const kb_mrec_t *r, char *err, size_t err_size)
{
    if (r->nreplicas < 0 || r->nisr < 0) {
        snprintf(err, err_size, "partition %" PRId32 " without replicas or ISR", r->partition);
        return -1;
    }
    return 0;
}

/* After partition @p p of @p t changed in the image: its local log is opened when this node
 * became one of its replicas and deleted when it no longer is (rw write lock held). */
static void kb_meta_local_change(kb_meta_t *meta, kb_mtopic_t *t, int32_t p, kb_mdelta_t *d)
{
    bool local = kb_mpart_is_local(meta, &t->pi[p]);
    kb_mact_t *a;
    if (!meta->pm || !t->parts)
        return;
    if (!local && t->parts[p] && (a = kb_mdelta_push(d, KB_MACT_DELETE))) {
        a->part = t->parts[p]; /* the image's reference, handed to the delete */
        t->parts[p] = NULL;
    } else if (local && !t->parts[p] && (a = kb_mdelta_push(d, KB_MACT_OPEN))) {
        a->id = t->id;
        a->partition = p;
        t->pi[p].opening = true;
    }
}

static int kb_meta_apply_partition(kb_meta_t *meta, const kb_mrec_t *r, kb_mdelta_t *d, char *err,
                                   size_t err_size)
{
    kb_mtopic_t *t = kb_meta_find_id(meta, &r->topic_id);
    kb_mpart_t np;
    bool added;
    if (!t) {
        snprintf(err, err_size, "PartitionRecord of an unknown topic id");
        return -1;
    }
    if (r->partition < 0 || r->partition > t->nparts || r->partition >= KB_META_MAX_PART) {
        snprintf(err, err_size,
                 "PartitionRecord %s-%" PRId32 " out of order (%" PRId32 " partitions)", t->name,
                 r->partition, t->nparts);
        return -1;
    }
    if (kb_meta_check_replicas(r, err, err_size) != 0)
        return -1;
    memset(&np, 0, sizeof(np));
    np.replicas = kb_ints_dup(r->replicas, r->nreplicas);
    np.isr = kb_ints_dup(r->isr, r->nisr);
    if (!np.replicas || !np.isr || kb_mtopic_reserve(t, r->partition) != 0) {
        kb_mpart_clear(&np);
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    np.nreplicas = r->nreplicas;
    np.nisr = r->nisr;
    np.leader = r->leader;
    np.leader_epoch = r->leader_epoch < 0 ? 0 : r->leader_epoch;
    np.partition_epoch = r->partition_epoch < 0 ? 0 : r->partition_epoch;
    added = r->partition == t->nparts;
    np.opening = !added && t->pi[r->partition].opening; /* an open still queued */
    kb_mpart_clear(&t->pi[r->partition]);
    t->pi[r->partition] = np;
    if (!added) {
        /* A replacement (a snapshot's view of a partition): its epoch may have moved. */
        kb_mact_t *a;
        kb_meta_local_change(meta, t, r->partition, d);
        if (t->parts[r->partition] && (a = kb_mdelta_push(d, KB_MACT_STATE))) {
            kb_part_ref(t->parts[r->partition]);
            a->part = t->parts[r->partition];
            a->id = t->id;
            a->partition = r->partition;
        }
        return 0;
    }
    t->nparts++;
    if (!kb_mpart_is_local(meta, &t->pi[r->partition])) {
        /* a replica of other brokers only: no local log */
    } else if (meta->staged && !memcmp(meta->staged->id.b, t->id.b, 16) &&
               r->partition < meta->staged->cap && meta->staged->parts[r->partition]) {
        kb_mact_t *a;
        t->parts[r->partition] = meta->staged->parts[r->partition];
        meta->staged->parts[r->partition] = NULL;
        /* staged before the replicas were known: give it the record's state (a cluster) */
        if (!kb_mpart_is_default(meta, &t->pi[r->partition]) &&
            (a = kb_mdelta_push(d, KB_MACT_STATE))) {
            kb_part_ref(t->parts[r->partition]);
            a->part = t->parts[r->partition];
            a->id = t->id;
            a->partition = r->partition;
        }
    } else if (meta->pm) {
        kb_mact_t *a = kb_mdelta_push(d, KB_MACT_OPEN);
        if (a) {
            a->id = t->id;
            a->partition = r->partition;
            t->pi[r->partition].opening = true;
        }
    }
    /* A new topic's partitions are part of its CREATED event. */
    kb_mdelta_topic_event(d, t, KB_META_TOPIC_PARTITIONS);
    return 0;
}

static int kb_meta_apply_change(kb_meta_t *meta, const kb_mrec_t *r, kb_mdelta_t *d, char *err,
                                size_t err_size)
{
    kb_mtopic_t *t = kb_meta_find_id(meta, &r->topic_id);
    kb_mpart_t *p;
    int32_t *nr = NULL, *ni = NULL;
    kb_mact_t *a;
    if (!t || r->partition < 0 || r->partition >= t->nparts) {
        snprintf(err, err_size, "PartitionChangeRecord of an unknown partition %" PRId32,
                 r->partition);
        return -1;
    }
    p = &t->pi[r->partition];
    if (r->leader != KB_MREC_NO_LEADER_CHANGE && r->leader_epoch >= 0 &&
        r->leader_epoch <= p->leader_epoch) {
        snprintf(err, err_size, "%s-%" PRId32 ": leader epoch %" PRId32 " is not above %" PRId32,
                 t->name, r->partition, r->leader_epoch, p->leader_epoch);
        return -1;
    }
    if ((r->nreplicas >= 0 && !(nr = kb_ints_dup(r->replicas, r->nreplicas))) ||
        (r->nisr >= 0 && !(ni = kb_ints_dup(r->isr, r->nisr)))) {
        free(nr);
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    if (nr) {
        free(p->replicas);
        p->replicas = nr;
        p->nreplicas = r->nreplicas;
    }
    if (ni) {
        free(p->isr);
        p->isr = ni;
        p->nisr = r->nisr;
    }
    p->partition_epoch++;
    kb_meta_local_change(meta, t, r->partition, d);
    if (r->leader != KB_MREC_NO_LEADER_CHANGE) {
        /* As Kafka: a record naming the leader (even the same one) starts a new leader epoch. */
        p->leader = r->leader;
        p->leader_epoch = r->leader_epoch >= 0 ? r->leader_epoch : p->leader_epoch + 1;
    }
    if (t->parts && t->parts[r->partition] && (a = kb_mdelta_push(d, KB_MACT_STATE))) {
        kb_part_ref(t->parts[r->partition]);
        a->part = t->parts[r->partition];
        a->id = t->id;
        a->partition = r->partition;
    }
    if ((a = kb_mdelta_push(d, KB_MACT_EVENT))) {
        a->type = r->leader == KB_MREC_NO_LEADER_CHANGE ? KB_META_EV_REPLICAS : KB_META_EV_EPOCH;
        a->id = t->id;
        a->has_topic = true;
        kb_meta_info(t, &a->info);
        a->partition = r->partition;
        a->epoch = p->leader_epoch;
    }
    return 0;
}

static void kb_mdelta_config_event(kb_mdelta_t *d, const kb_mtopic_t *t, const kb_mrec_t *r)
{
    kb_mact_t *a = kb_mdelta_push(d, KB_MACT_EVENT);
    if (!a)
        return;
    a->type = KB_META_EV_CONFIG;
    a->rtype = r->resource_type;
    if (t) {
        a->id = t->id;
        a->has_topic = true;
        kb_meta_info(t, &a->info);
    }
    a->rname = strdup(r->resource_name);
    a->key = strdup(r->key);
    a->value = r->value ? strdup(r->value) : NULL;
    if (!a->rname || !a->key || (r->value && !a->value))
        d->err = KB_E_NOMEM;
}

static int kb_meta_apply_config(kb_meta_t *meta, const kb_mrec_t *r, kb_mdelta_t *d, char *err,
                                size_t err_size)
{
    kb_kv_t **kv;
    size_t *cnt;
    kb_mtopic_t *t = NULL;
    const char *old;
    if (r->resource_type == KB_RES_TOPIC) {
        if (!(t = kb_meta_find(meta, r->resource_name))) {
            snprintf(err, err_size, "ConfigRecord of an unknown topic %s", r->resource_name);
            return -1;
        }
        kv = &t->cfg;
        cnt = &t->cfg_cnt;
    } else if (r->resource_type == KB_RES_BROKER) {
        if (r->resource_name[0] && strcmp(r->resource_name, meta->node_id_str))
            return 0; /* another broker's dynamic config */
        kv = r->resource_name[0] ? &meta->dyn_node : &meta->dyn_dflt;
        cnt = r->resource_name[0] ? &meta->dyn_node_cnt : &meta->dyn_dflt_cnt;
    } else {
        return 0; /* other resource types are not kept */
    }
    if (!r->key[0]) {
        snprintf(err, err_size, "ConfigRecord without a key");
        return -1;
    }
    old = kb_kv_get(*kv, *cnt, r->key);
    if ((!old && !r->value) || (old && r->value && !strcmp(old, r->value)))
        return 0;
    if (kb_kv_set(kv, cnt, r->key, r->value) != 0) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    if (t)
        t->reconf = true;
    else
        d->reconf_all = true;
    kb_mdelta_config_event(d, t, r);
    return 0;
}

static int kb_meta_apply_remove(kb_meta_t *meta, const kb_mrec_t *r, kb_mdelta_t *d, char *err,
                                size_t err_size)
{
    kb_mtopic_t *t = kb_meta_find_id(meta, &r->topic_id);
    kb_mact_t *a;
    if (!t) {
        snprintf(err, err_size, "RemoveTopicRecord of an unknown topic id");
        return -1;
    }
    kb_meta_unlink(meta, t);
    for (int32_t i = 0; t->parts && i < t->nparts; i++) {
        if (t->parts[i] && (a = kb_mdelta_push(d, KB_MACT_DELETE))) {
            a->part = t->parts[i]; /* the image's reference, handed to the delete */
            t->parts[i] = NULL;
        }
    }
    if ((a = kb_mdelta_push(d, KB_MACT_EVENT))) {
        a->type = KB_META_EV_TOPIC;
        a->flags = KB_META_TOPIC_DELETED;
        a->id = t->id;
        a->has_topic = true;
        kb_meta_info(t, &a->info);
        a->info.partitions = 0;
    }
    t->next_name = d->removed;
    d->removed = t;
    return 0;
}

/* One record into the image (rw write lock and change_mu held). 0 or -1 with @p err. */
/* Broker registrations (rw held for writing). */
static int kb_meta_apply_broker(kb_meta_t *meta, const kb_mrec_t *r, kb_mdelta_t *d, char *err,
                                size_t err_size)
{
    size_t i = 0;
    kb_meta_broker_t *b;
    kb_mact_t *a;
    /* the listeners read the registrations from the image (kb_meta_brokers) */
    if ((a = kb_mdelta_push(d, KB_MACT_EVENT)) != NULL)
        a->type = KB_META_EV_BROKER;
    while (i < meta->nbrokers && meta->brokers[i].id < r->broker_id)
        i++;
    b = i < meta->nbrokers && meta->brokers[i].id == r->broker_id ? &meta->brokers[i] : NULL;
    if (r->type == KB_MREC_UNREGISTER_BROKER) {
        if (b) {
            memmove(b, b + 1, (meta->nbrokers - i - 1) * sizeof(*b));
            meta->nbrokers--;
        }
        return 0;
    }
    if (r->type == KB_MREC_BROKER_CHANGE) {
        /* A change of a broker that is not registered (any more) changes nothing. */
        if (b && r->fenced)
            b->fenced = r->fenced > 0;
        return 0;
    }
    if (!b) {
        kb_meta_broker_t *nv = realloc(meta->brokers, (meta->nbrokers + 1) * sizeof(*nv));
        if (!nv) {
            snprintf(err, err_size, "out of memory");
            return -1;
        }
        meta->brokers = nv;
        memmove(&nv[i + 1], &nv[i], (meta->nbrokers - i) * sizeof(*nv));
        meta->nbrokers++;
        b = &nv[i];
    }
    memset(b, 0, sizeof(*b));
    b->id = r->broker_id;
    b->epoch = r->broker_epoch;
    b->incarnation = r->incarnation;
    b->fenced = r->fenced != 0;
    if (r->rack) {
        b->has_rack = true;
        snprintf(b->rack, sizeof(b->rack), "%s", r->rack);
    }
    b->nendpoints = r->nendpoints < KB_MREC_MAX_ENDPOINTS ? r->nendpoints : KB_MREC_MAX_ENDPOINTS;
    if (b->nendpoints > 0)
        memcpy(b->endpoints, r->endpoints, (size_t)b->nendpoints * sizeof(*b->endpoints));
    return 0;
}

int kb_meta_brokers(kb_meta_t *meta, kb_meta_broker_t **out, size_t *cnt)
{
    pthread_rwlock_rdlock(&meta->rw);
    *out = malloc((meta->nbrokers + 1) * sizeof(**out));
    if (*out && meta->nbrokers)
        memcpy(*out, meta->brokers, meta->nbrokers * sizeof(**out));
    *cnt = *out ? meta->nbrokers : 0;
    pthread_rwlock_unlock(&meta->rw);
    return *out ? 0 : KB_E_NOMEM;
}

/* AccessControlEntryRecord / RemoveAccessControlEntryRecord: the image keeps the records (for
 * snapshots and late listeners); broker/acl checks the bindings when its listener applies them.
 * An id added twice or removed unknown is refused. */
static int kb_meta_apply_acl(kb_meta_t *meta, const kb_mrec_t *r, kb_mdelta_t *d, char *err,
                             size_t err_size)
{
    size_t i = 0;
    kb_mact_t *a;
    while (i < meta->nacls && memcmp(meta->acls[i].acl_id.b, r->acl_id.b, 16) != 0)
        i++;
    if (r->type == KB_MREC_ACL) {
        kb_mrec_t *nv;
        if (i < meta->nacls) {
            snprintf(err, err_size, "AccessControlEntryRecord of an ACL id already present");
            return -1;
        }
        nv = realloc(meta->acls, (meta->nacls + 1) * sizeof(*nv));
        if (!nv) {
            snprintf(err, err_size, "out of memory");
            return -1;
        }
        meta->acls = nv;
        if (kb_mrec_acl_copy(&nv[meta->nacls], r) != 0) {
            snprintf(err, err_size, "out of memory");
            return -1;
        }
        meta->nacls++;
    } else {
        if (i == meta->nacls) {
            snprintf(err, err_size, "RemoveAccessControlEntryRecord of an unknown ACL id");
            return -1;
        }
        kb_mrec_clear(&meta->acls[i]);
        memmove(&meta->acls[i], &meta->acls[i + 1], (meta->nacls - i - 1) * sizeof(*meta->acls));
        meta->nacls--;
    }
    if ((a = kb_mdelta_push(d, KB_MACT_EVENT)) != NULL) {
        a->type = KB_META_EV_ACL;
        if (kb_mrec_acl_copy(&a->acl, r) == 0)
            a->has_acl = true;
        else
            d->err = KB_E_NOMEM;
    }
    return 0;
}

/* KbrokerPluginRecord: the image keeps the latest value per (type, key); no value deletes. The
 * listeners get the record as written. */
static int kb_meta_apply_plugin(kb_meta_t *meta, const kb_mrec_t *r, kb_mdelta_t *d, char *err,
                                size_t err_size)
{
    size_t i = 0;
    kb_mact_t *a;
    while (i < meta->nprecs &&
           !(meta->precs[i].plugin_type == r->plugin_type &&
             meta->precs[i].pkey_len == r->pkey_len &&
             (!r->pkey_len || !memcmp(meta->precs[i].pkey, r->pkey, r->pkey_len))))
        i++;
    if (r->has_pvalue) {
        kb_mrec_t c;
        if (kb_mrec_plugin_copy(&c, r) != 0) {
            snprintf(err, err_size, "out of memory");
            return -1;
        }
        if (i < meta->nprecs) {
            kb_mrec_clear(&meta->precs[i]);
            meta->precs[i] = c;
        } else {
            kb_mrec_t *nv = realloc(meta->precs, (meta->nprecs + 1) * sizeof(*nv));
            if (!nv) {
                kb_mrec_clear(&c);
                snprintf(err, err_size, "out of memory");
                return -1;
            }
            meta->precs = nv;
            nv[meta->nprecs++] = c;
        }
    } else if (i < meta->nprecs) {
        kb_mrec_clear(&meta->precs[i]);
        memmove(&meta->precs[i], &meta->precs[i + 1],
                (meta->nprecs - i - 1) * sizeof(*meta->precs));
        meta->nprecs--;
    }
    if ((a = kb_mdelta_push(d, KB_MACT_EVENT)) != NULL) {
        a->type = KB_META_EV_PLUGIN;
        if (kb_mrec_plugin_copy(&a->acl, r) == 0)
            a->has_acl = true;
        else
            d->err = KB_E_NOMEM;
    }
    return 0;
}

static int kb_meta_apply_rec(kb_meta_t *meta, const kb_mrec_t *r, kb_mdelta_t *d, char *err,
                             size_t err_size)
{
    switch (r->type) {
    case KB_MREC_TOPIC:
        return kb_meta_apply_topic(meta, r, d, err, err_size);
    case KB_MREC_PARTITION:
        return kb_meta_apply_partition(meta, r, d, err, err_size);
    case KB_MREC_PARTITION_CHANGE:
        return kb_meta_apply_change(meta, r, d, err, err_size);
    case KB_MREC_CONFIG:
        return kb_meta_apply_config(meta, r, d, err, err_size);
    case KB_MREC_REMOVE_TOPIC:
        return kb_meta_apply_remove(meta, r, d, err, err_size);
    case KB_MREC_PRODUCER_IDS:
        if (r->next_producer_id < meta->pid_persisted) {
            snprintf(err, err_size,
                     "ProducerIdsRecord moves the next block back (%" PRId64 " < %" PRId64 ")",
                     r->next_producer_id, meta->pid_persisted);
            return -1;
        }
        meta->pid_persisted = r->next_producer_id;
        return 0;
    case KB_MREC_REGISTER_BROKER:
    case KB_MREC_UNREGISTER_BROKER:
    case KB_MREC_BROKER_CHANGE:
        return kb_meta_apply_broker(meta, r, d, err, err_size);
    case KB_MREC_ACL:
    case KB_MREC_REMOVE_ACL:
        return kb_meta_apply_acl(meta, r, d, err, err_size);
    case KB_MREC_PLUGIN:
        return kb_meta_apply_plugin(meta, r, d, err, err_size);
    default:
        snprintf(err, err_size, "%s is not applied by kbroker", kb_mrec_type_name(r->type));
        return -1;
    }
}

static void kb_meta_reconfigure_topic(kb_meta_t *meta, kb_mtopic_t *t);

/* The side effects and events of a delta (change_mu held, rw not held). */
static void kb_mdelta_run(kb_meta_t *meta, kb_mdelta_t *d)
{
    char err[512];
    for (size_t i = 0; i < d->n; i++) {
        kb_mact_t *a = &d->v[i];
        switch (a->kind) {
        case KB_MACT_DELETE:
            kb_part_delete(a->part);
            a->part = NULL;
            break;
        case KB_MACT_STATE: {
            /* the image as the batch left it, unless the topic is gone */
            kb_mtopic_t *t = kb_meta_find_id(meta, &a->id);
            if (t && a->partition < t->nparts && t->parts[a->partition] == a->part)
                kb_meta_push_state(meta, t, a->partition, a->part);
            break;
        }
        case KB_MACT_OPEN: {
            kb_mtopic_t *t = kb_meta_find_id(meta, &a->id);
            kb_part_t *part = NULL;
            kb_log_config_t lc;
            kb_tconf_extra_t ex;
            if (!t || a->partition >= t->nparts)
                break;
            if (!t->parts[a->partition] && kb_mpart_is_local(meta, &t->pi[a->partition])) {
                kb_meta_build(meta, t, &lc, &ex);
                part = kb_part_open(meta->pm, t->name, &t->id, a->partition,
                                    t->pi[a->partition].leader_epoch, &lc, &ex,
                                    kb_meta_is_mirror(t), t->internal, err, sizeof(err));
                if (!part)
                    kb_log_error("meta", "cannot open %s-%" PRId32 ": %s", t->name, a->partition,
                                 err);
                else if (!kb_mpart_is_default(meta, &t->pi[a->partition]))
                    kb_meta_push_state(meta, t, a->partition, part);
            }
            /* Opened (with its role), or failed: readers no longer see it as being opened. */
            pthread_rwlock_wrlock(&meta->rw);
            if (part)
                t->parts[a->partition] = part;
            t->pi[a->partition].opening = false;
            pthread_rwlock_unlock(&meta->rw);
            break;
        }
        default:
            break;
        }
    }
    KB_META_FOREACH(meta, t)
    {
        if (t->reconf || d->reconf_all)
            kb_meta_reconfigure_topic(meta, t);
        t->reconf = false;
    }
    if (d->err)
        kb_log_error("meta", "out of memory: listeners miss some metadata changes");
    for (size_t i = 0; i < d->n; i++) {
        kb_mact_t *a = &d->v[i];
        kb_meta_event_t ev;
        if (a->kind != KB_MACT_EVENT ||
            ((a->type == KB_META_EV_ACL || a->type == KB_META_EV_PLUGIN) && !a->has_acl))
            continue;
        /* Topic state as the batch left it (a CREATED event shows every partition and the
         * mirror flag its configs give), unless the topic is gone. */
        if (a->has_topic && !(a->type == KB_META_EV_TOPIC && (a->flags & KB_META_TOPIC_DELETED))) {
            kb_mtopic_t *t = kb_meta_find_id(meta, &a->id);
            if (t)
                kb_meta_info(t, &a->info);
        }
        memset(&ev, 0, sizeof(ev));
        ev.type = a->type;
        ev.flags = a->flags;
        ev.offset = meta->offset;
        ev.topic = a->has_topic ? &a->info : NULL;
        ev.partition = a->partition;
        ev.leader_epoch = a->epoch;
        ev.resource_type = a->rtype;
        ev.resource_name = a->rname;
        ev.key = a->key;
        ev.value = a->value;
        ev.acl = a->has_acl ? &a->acl : NULL;
        for (kb_meta_listener_t *l = meta->listeners; l; l = l->next)
            l->fn(l->opaque, &ev);
    }
}

/* Apply the batches of @p buf: log records above meta->offset, or with @p snapshot every
 * record of a snapshot (whose offsets are its own; the caller sets meta->offset after). */
static int kb_meta_apply_batches(kb_meta_t *meta, const uint8_t *buf, size_t len, bool snapshot,
                                 char *err, size_t err_size)
{
    kp_batch_iter_t it;
    kp_batch_t b;
    kp_writer_t scratch;
    int rc, ret = 0;

    kp_writer_init(&scratch);
    kp_batch_iter_init(&it, buf, len, 0, 0);
    while (ret == 0 && (rc = kp_batch_iter_next(&it, &b)) == 1) {
        kp_record_iter_t ri;
        kp_record_t rec;
        kb_mdelta_t d;
        if (kp_batch_hdr_is_control(&b.hdr) ||
            (!snapshot && kp_batch_hdr_last_offset(&b.hdr) <= meta->offset))
            continue;
        kp_writer_reset(&scratch);
        if (kp_record_iter_init(&ri, &b, &scratch, 256u << 20) != 0) {
            snprintf(err, err_size, "offset %" PRId64 ": cannot decompress the batch",
                     b.hdr.baseOffset);
            ret = -1;
            break;
        }
        memset(&d, 0, sizeof(d));
        pthread_rwlock_wrlock(&meta->rw);
        while (ret == 0 && (rc = kp_record_iter_next(&ri, &rec)) == 1) {
            kb_mrec_t r;
            char e[400];
            if (!snapshot && rec.offset <= meta->offset)
                continue;
            if (rec.value.len < 0 ||
                kb_mrec_decode(&r, rec.value.ptr, (size_t)rec.value.len, e, sizeof(e)) != 0) {
                snprintf(err, err_size, "offset %" PRId64 ": undecodable metadata record: %s",
                         rec.offset, rec.value.len < 0 ? "null value" : e);
                ret = -1;
                break;
            }
            if (kb_meta_apply_rec(meta, &r, &d, e, sizeof(e)) != 0) {
                snprintf(err, err_size, "offset %" PRId64 ": %s: %s", rec.offset,
                         kb_mrec_type_name(r.type), e);
                ret = -1;
            } else if (!snapshot) {
                meta->offset = rec.offset;
            }
            kb_mrec_clear(&r);
        }
        if (ret == 0 && rc < 0) {
            snprintf(err, err_size, "offset %" PRId64 ": malformed records in the batch (%s)",
                     b.hdr.baseOffset, ri.errstr ? ri.errstr : "corrupt");
            ret = -1;
        }
        pthread_rwlock_unlock(&meta->rw);
        kb_mdelta_run(meta, &d);
        kb_mdelta_free(&d);
    }
    if (ret == 0 && rc < 0) {
        kp_batch_hdr_t h;
        int64_t at = kp_batch_hdr_decode(buf + it.pos, len - it.pos, &h) == 0 ? h.baseOffset : -1;
        snprintf(err, err_size, "offset %" PRId64 ": corrupt record batch", at);
        ret = -1;
    }
    kp_writer_free(&scratch);
    return ret;
}

int kb_meta_apply_buf(kb_meta_t *meta, const uint8_t *buf, size_t len, char *err, size_t err_size)
{
    return kb_meta_apply_batches(meta, buf, len, false, err, err_size);
}

int kb_meta_apply_snapshot(kb_meta_t *meta, const uint8_t *buf, size_t len, int64_t end, char *err,
                           size_t err_size)
{
    if (kb_meta_apply_batches(meta, buf, len, true, err, err_size) != 0)
        return -1;
    pthread_rwlock_wrlock(&meta->rw);
    meta->offset = end - 1;
    pthread_rwlock_unlock(&meta->rw);
    return 0;
}

/* ---- the image as records ------------------------------------------------------------------- */

void kb_meta_recs_free(kb_mrec_t *recs, size_t cnt)
{
    for (size_t i = 0; recs && i < cnt; i++)
        kb_mrec_clear(&recs[i]);
    free(recs);
}

typedef struct kb_mrecs_s {
    kb_mrec_t *v;
    size_t n, cap;
    int err;
} kb_mrecs_t;

static kb_mrec_t *kb_mrecs_add(kb_mrecs_t *rs, int16_t type)
{
    if (rs->err)
        return NULL;
    if (rs->n == rs->cap) {
        size_t nc = rs->cap ? rs->cap * 2 : 8;
        kb_mrec_t *nv = realloc(rs->v, nc * sizeof(*nv));
        if (!nv) {
            rs->err = KB_E_NOMEM;
            return NULL;
        }
        rs->v = nv;
        rs->cap = nc;
    }
    kb_mrec_init(&rs->v[rs->n], type);
    return &rs->v[rs->n++];
}

static void kb_mrecs_topic(kb_mrecs_t *rs, const char *name, const kp_uuid_t *id)
{
    kb_mrec_t *r = kb_mrecs_add(rs, KB_MREC_TOPIC);
    if (!r)
        return;
    r->topic_id = *id;
    if (!(r->name = strdup(name)))
        rs->err = KB_E_NOMEM;
}

static void kb_mrecs_partition(kb_mrecs_t *rs, const kp_uuid_t *id, int32_t partition,
                               const kb_mpart_t *p)
{
    kb_mrec_t *r = kb_mrecs_add(rs, KB_MREC_PARTITION);
    if (!r)
        return;
    r->topic_id = *id;
    r->partition = partition;
    r->replicas = kb_ints_dup(p->replicas, p->nreplicas);
    r->isr = kb_ints_dup(p->isr, p->nisr);
    r->nreplicas = p->nreplicas;
    r->nisr = p->nisr;
    r->leader = p->leader;
    r->leader_epoch = p->leader_epoch;
    r->partition_epoch = p->partition_epoch;
    if (!r->replicas || !r->isr)
        rs->err = KB_E_NOMEM;
}

static void kb_mrecs_config(kb_mrecs_t *rs, int8_t rtype, const char *rname, const char *key,
                            const char *value)
{
    kb_mrec_t *r = kb_mrecs_add(rs, KB_MREC_CONFIG);
    if (!r)
        return;
    r->resource_type = rtype;
    r->resource_name = strdup(rname);
    r->key = strdup(key);
    r->value = value ? strdup(value) : NULL;
    if (!r->resource_name || !r->key || (value && !r->value))
        rs->err = KB_E_NOMEM;
}

/* The partition state of a new partition on this single node. */
static void kb_meta_single_part(const kb_meta_t *meta, kb_mpart_t *p, int32_t *self, int32_t epoch)
{
    *self = meta->node_id;
    p->replicas = p->isr = self;
    p->nreplicas = p->nisr = 1;
    p->leader = meta->node_id;
    p->leader_epoch = epoch;
    p->partition_epoch = 0;
}

int kb_meta_image_records(kb_meta_t *meta, kb_mrec_t **out, size_t *cnt)
{
    kb_mrecs_t rs = {0};
    pthread_rwlock_rdlock(&meta->rw);
    KB_META_FOREACH(meta, t)
    {
        kb_mrecs_topic(&rs, t->name, &t->id);
        for (int32_t i = 0; i < t->nparts; i++)
            kb_mrecs_partition(&rs, &t->id, i, &t->pi[i]);
        for (size_t i = 0; i < t->cfg_cnt; i++)
            kb_mrecs_config(&rs, KB_RES_TOPIC, t->name, t->cfg[i].key, t->cfg[i].value);
    }
    for (size_t i = 0; i < meta->dyn_dflt_cnt; i++)
        kb_mrecs_config(&rs, KB_RES_BROKER, "", meta->dyn_dflt[i].key, meta->dyn_dflt[i].value);
    for (size_t i = 0; i < meta->dyn_node_cnt; i++)
        kb_mrecs_config(&rs, KB_RES_BROKER, meta->node_id_str, meta->dyn_node[i].key,
                        meta->dyn_node[i].value);
    for (size_t i = 0; i < meta->nbrokers; i++) {
        const kb_meta_broker_t *b = &meta->brokers[i];
        kb_mrec_t *r = kb_mrecs_add(&rs, KB_MREC_REGISTER_BROKER);
        if (!r)
            break;
        r->broker_id = b->id;
        r->broker_epoch = b->epoch;
        r->incarnation = b->incarnation;
        r->fenced = b->fenced;
        r->rack = b->has_rack ? strdup(b->rack) : NULL;
        r->endpoints = calloc((size_t)b->nendpoints + 1, sizeof(*r->endpoints));
        if (!r->endpoints || (b->has_rack && !r->rack)) {
            rs.err = KB_E_NOMEM;
            break;
        }
        if (b->nendpoints > 0)
            memcpy(r->endpoints, b->endpoints, (size_t)b->nendpoints * sizeof(*r->endpoints));
        r->nendpoints = b->nendpoints;
    }
    for (size_t i = 0; i < meta->nacls && !rs.err; i++) {
        kb_mrec_t *r = kb_mrecs_add(&rs, KB_MREC_ACL);
        if (r && kb_mrec_acl_copy(r, &meta->acls[i]) != 0)
            rs.err = KB_E_NOMEM;
    }
    for (size_t i = 0; i < meta->nprecs && !rs.err; i++) {
        kb_mrec_t *r = kb_mrecs_add(&rs, KB_MREC_PLUGIN);
        if (r && kb_mrec_plugin_copy(r, &meta->precs[i]) != 0)
            rs.err = KB_E_NOMEM;
    }
    if (meta->pid_persisted > 0) {
        kb_mrec_t *r = kb_mrecs_add(&rs, KB_MREC_PRODUCER_IDS);
        if (r) {
            r->broker_id = meta->node_id;
            r->next_producer_id = meta->pid_persisted;
        }
    }
    pthread_rwlock_unlock(&meta->rw);
    if (rs.err) {
        kb_meta_recs_free(rs.v, rs.n);
        return rs.err;
    }
    *out = rs.v;
    *cnt = rs.n;
    return 0;
}

/* ---- replication state ---------------------------------------------------------------------- */

int kb_meta_part_state(kb_meta_t *meta, const kp_uuid_t *id, int32_t partition,
                       kb_meta_part_state_t *out)
{
    kb_mtopic_t *t;
    int rc = KB_META_UNKNOWN_TOPIC;
    pthread_rwlock_rdlock(&meta->rw);
    t = kb_meta_find_id(meta, id);
    if (t && (partition < 0 || partition >= t->nparts)) {
        rc = KB_META_UNKNOWN_PARTITION;
    } else if (t) {
        const kb_mpart_t *p = &t->pi[partition];
        memset(out, 0, sizeof(*out));
        out->leader = p->leader;
        out->leader_epoch = p->leader_epoch;
        out->partition_epoch = p->partition_epoch;
        out->nreplicas = p->nreplicas < KB_META_MAX_REPLICAS ? p->nreplicas : KB_META_MAX_REPLICAS;
        out->nisr = p->nisr < KB_META_MAX_REPLICAS ? p->nisr : KB_META_MAX_REPLICAS;
        memcpy(out->replicas, p->replicas, (size_t)out->nreplicas * sizeof(int32_t));
        memcpy(out->isr, p->isr, (size_t)out->nisr * sizeof(int32_t));
        rc = KB_META_OK;
    }
    pthread_rwlock_unlock(&meta->rw);
    return rc;
}

int kb_meta_checkpoint(kb_meta_t *meta)
{
    int rc;
    pthread_mutex_lock(&meta->change_mu);
    rc = kb_meta_log_snapshot(meta);
    pthread_mutex_unlock(&meta->change_mu);
    return rc;
}

int kb_meta_apply_records(kb_meta_t *meta, const void *buf, size_t len, char *err, size_t err_size)
{
    int rc;
    pthread_mutex_lock(&meta->change_mu);
    rc = kb_meta_log_append_remote(meta, buf, len, err, err_size);
    pthread_mutex_unlock(&meta->change_mu);
    return rc;
}

/* ---- listeners ---------------------------------------------------------------------------- */

kb_meta_listener_t *kb_meta_listen(kb_meta_t *meta, kb_meta_listen_fn *fn, void *opaque,
                                   bool snapshot)
{
    kb_meta_listener_t *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->fn = fn;
    l->opaque = opaque;
    pthread_mutex_lock(&meta->change_mu);
    if (snapshot) {
        kb_meta_event_t ev;
        kb_topic_info_t info;
        KB_META_FOREACH(meta, t)
        {
            kb_meta_info(t, &info);
            memset(&ev, 0, sizeof(ev));
            ev.type = KB_META_EV_TOPIC;
            ev.flags = KB_META_TOPIC_CREATED;
            ev.snapshot = true;
            ev.offset = meta->offset;
            ev.topic = &info;
            fn(opaque, &ev);
            for (size_t i = 0; i < t->cfg_cnt; i++) {
                memset(&ev, 0, sizeof(ev));
                ev.type = KB_META_EV_CONFIG;
                ev.snapshot = true;
                ev.offset = meta->offset;
                ev.topic = &info;
                ev.resource_type = KB_RES_TOPIC;
                ev.resource_name = t->name;
                ev.key = t->cfg[i].key;
                ev.value = t->cfg[i].value;
                fn(opaque, &ev);
            }
        }
        for (int s = 0; s < 2; s++) {
            const kb_kv_t *kv = s ? meta->dyn_node : meta->dyn_dflt;
            size_t cnt = s ? meta->dyn_node_cnt : meta->dyn_dflt_cnt;
            for (size_t i = 0; i < cnt; i++) {
                memset(&ev, 0, sizeof(ev));
                ev.type = KB_META_EV_CONFIG;
                ev.snapshot = true;
                ev.offset = meta->offset;
                ev.resource_type = KB_RES_BROKER;
                ev.resource_name = s ? meta->node_id_str : "";
                ev.key = kv[i].key;
                ev.value = kv[i].value;
                fn(opaque, &ev);
            }
        }
        /* change_mu keeps the image's ACLs still (they change only under it) */
        for (size_t i = 0; i < meta->nacls; i++) {
            memset(&ev, 0, sizeof(ev));
            ev.type = KB_META_EV_ACL;
            ev.snapshot = true;
            ev.offset = meta->offset;
            ev.acl = &meta->acls[i];
            fn(opaque, &ev);
        }
        for (size_t i = 0; i < meta->nprecs; i++) {
            memset(&ev, 0, sizeof(ev));
            ev.type = KB_META_EV_PLUGIN;
            ev.snapshot = true;
            ev.offset = meta->offset;
            ev.acl = &meta->precs[i];
            fn(opaque, &ev);
        }
    }
    l->next = meta->listeners;
    meta->listeners = l;
    pthread_mutex_unlock(&meta->change_mu);
    return l;
}

void kb_meta_unlisten(kb_meta_t *meta, kb_meta_listener_t *l)
{
    kb_meta_listener_t **pp;
    if (!l)
        return;
    pthread_mutex_lock(&meta->change_mu);
    for (pp = &meta->listeners; *pp; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    }
    pthread_mutex_unlock(&meta->change_mu);
    free(l);
}

/* ---- topic mutations ------------------------------------------------------------------------ */

static int16_t kb_meta_validate_configs(const kb_meta_t *meta, const kb_kv_t *kv, size_t cnt,
                                        bool privileged, char *msg, size_t msg_size)
{
    kb_dyncfg_t dyn = kb_meta_dyn(meta);
    for (size_t i = 0; i < cnt; i++) {
        int16_t ec = kb_tconf_validate(kv[i].key, kv[i].value, privileged, msg, msg_size);
        if (ec)
            return ec;
    }
    return kb_tconf_validate_set(kv, cnt, meta->cfg, &dyn, msg, msg_size);
}

/* Commit the records of @p rs (change_mu held; freed here). 0 or a Kafka error with @p msg. */
static int16_t kb_meta_commit(kb_meta_t *meta, kb_mrecs_t *rs, char *msg, size_t msg_size)
{
    int rc = rs->err ? rs->err : kb_meta_log_commit(meta, rs->v, rs->n);
    kb_meta_recs_free(rs->v, rs->n);
    memset(rs, 0, sizeof(*rs));
    if (rc == 0)
        return 0;
    if (rc == KB_E_STATE) {
        snprintf(msg, msg_size,
                 "This broker is not the controller: metadata changes are made by controller %d",
                 (int)meta->remote);
        return KP_ERR_NOT_CONTROLLER;
    }
    if (rc == KB_E_NOMEM) {
        snprintf(msg, msg_size, "out of memory");
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
    snprintf(msg, msg_size, "Cannot write the metadata");
    return KP_ERR_KAFKA_STORAGE_ERROR;
}

/* Logs of partitions [from, to) of a topic opened ahead of its commit (the staged topic shares
 * name and configs with @p like). The caller frees it with kb_meta_unstage. */
static kb_mtopic_t *kb_meta_stage(kb_meta_t *meta, const kb_mtopic_t *like, int32_t from,
                                  int32_t to, char *err, size_t err_size, bool *io_error)
{
    kb_mtopic_t *st = calloc(1, sizeof(*st));
    *io_error = false;
    if (!st)
        return NULL;
    *st = *like;
    st->pi = calloc((size_t)to, sizeof(*st->pi));
    st->parts = calloc((size_t)to, sizeof(*st->parts));
    st->cap = to;
    if (!st->pi || !st->parts) {
        free(st->pi);
        free(st->parts);
        free(st);
        return NULL;
    }
    if (kb_meta_open_parts(meta, st, from, to, true, err, err_size) != 0) {
        free(st->pi);
        free(st->parts);
        free(st);
        *io_error = true;
        return NULL;
    }
    return st;
}

/* Delete the staged logs the commit did not take over (none after a successful commit). */
static void kb_meta_unstage(kb_meta_t *meta, kb_mtopic_t *st)
{
    if (!st)
        return;
    if (meta->staged == st)
        meta->staged = NULL;
    for (int32_t i = 0; i < st->cap; i++)
        if (st->parts[i])
            kb_part_delete(st->parts[i]);
    free(st->pi);
    free(st->parts);
    free(st);
}

/* ---- manual replica assignments ------------------------------------------------------------ */

/* Checked manual assignments: partition i (of n) has replicas rep[i*rf..] and ISR isr[i*rf..]
 * (nisr[i] of them), all malloc'd. */
typedef struct kb_mplan_s {
    int32_t n, rf;
    int32_t *rep, *isr, *nisr;
} kb_mplan_t;

static void kb_mplan_free(kb_mplan_t *p)
{
    free(p->rep);
    free(p->isr);
    free(p->nisr);
    memset(p, 0, sizeof(*p));
}

static int kb_mplan_cmp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Broker @p id in the image's registrations @p bs (sorted): NULL when not registered. A node
 * without registrations (single node) knows itself only: returned as @p self. */
static const kb_meta_broker_t *kb_mplan_broker(const kb_meta_broker_t *bs, size_t nb, int32_t id,
                                               const kb_meta_broker_t *self)
{
    size_t lo = 0, hi = nb;
    if (nb == 0)
        return id == self->id ? self : NULL;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (bs[mid].id == id)
            return &bs[mid];
        if (bs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Kafka's checks of manual assignments @p a (n lists), in the order of its controller: per list
 * in request order, a partition assigned twice, an empty list, an unregistered broker, a broker
 * twice (sorted order), a count other than the first list's (or @p rf when > 0), no unfenced
 * replica; then (@p first < 0, CreateTopics) partitions 0..n-1. @p first >= 0 (CreatePartitions):
 * list i is partition first+i. Fills @p plan. change_mu held. */
static int16_t kb_meta_manual_plan(kb_meta_t *meta, const kb_meta_assignment_t *a, size_t n,
                                   int32_t first, int32_t rf, kb_mplan_t *plan, char *msg,
                                   size_t msg_size)
{
    kb_meta_broker_t *bs = NULL, self;
    size_t nb = 0;
    uint8_t *seen = NULL;
    int32_t *sorted = NULL;
    bool gap = false;
    int16_t ec = 0;

    memset(plan, 0, sizeof(*plan));
    memset(&self, 0, sizeof(self));
    self.id = meta->node_id;
    if (n == 0 || n > KB_META_MAX_PART) {
        snprintf(msg, msg_size, "Between 1 and %d manual partition assignments are supported.",
                 KB_META_MAX_PART);
        return KP_ERR_INVALID_REPLICA_ASSIGNMENT;
    }
    plan->n = (int32_t)n;
    plan->rf = rf > 0 ? rf : a[0].nbrokers;
    if (plan->rf <= 0 || plan->rf > KB_META_MAX_REPLICAS)
        plan->rf = KB_META_MAX_REPLICAS; /* only sizes the arrays: the checks below refuse it */
    plan->rep = calloc(n * (size_t)plan->rf, sizeof(int32_t));
    plan->isr = calloc(n * (size_t)plan->rf, sizeof(int32_t));
    plan->nisr = calloc(n, sizeof(int32_t));
    seen = calloc(n, 1);
    sorted = malloc((size_t)KB_META_MAX_REPLICAS * sizeof(int32_t));
    if (!plan->rep || !plan->isr || !plan->nisr || !seen || !sorted ||
        kb_meta_brokers(meta, &bs, &nb) != 0) {
        snprintf(msg, msg_size, "out of memory");
        ec = KP_ERR_UNKNOWN_SERVER_ERROR;
        goto out;
    }
    for (size_t i = 0; i < n && !ec; i++) {
        int32_t part = first >= 0 ? first + (int32_t)i : a[i].partition;
        int32_t slot = first >= 0 ? (int32_t)i : a[i].partition;
        int32_t cnt = a[i].nbrokers > 0 ? a[i].nbrokers : 0, k, nisr = 0;
        bool in_range = slot >= 0 && (size_t)slot < n;
        ec = KP_ERR_INVALID_REPLICA_ASSIGNMENT;
        if (in_range && seen[slot]) {
            snprintf(msg, msg_size, "Found multiple manual partition assignments for partition %d",
                     (int)part);
            break;
        }
        if (cnt == 0) {
            snprintf(msg, msg_size,
                     "The manual partition assignment includes an empty replica list.");
            break;
        }
        if (cnt > KB_META_MAX_REPLICAS) {
            snprintf(msg, msg_size,
                     "The manual partition assignment includes %d replicas; at most %d are "
                     "supported.",
                     (int)cnt, KB_META_MAX_REPLICAS);
            break;
        }
        memcpy(sorted, a[i].brokers, (size_t)cnt * sizeof(int32_t));
        qsort(sorted, (size_t)cnt, sizeof(int32_t), kb_mplan_cmp);
        for (k = 0; k < cnt; k++) {
            if (!kb_mplan_broker(bs, nb, sorted[k], &self)) {
                snprintf(msg, msg_size,
                         "The manual partition assignment includes broker %d, but no such broker "
                         "is registered.",
                         (int)sorted[k]);
                break;
            }
            if (k > 0 && sorted[k] == sorted[k - 1]) {
                snprintf(msg, msg_size,
                         "The manual partition assignment includes the broker %d more than once.",
                         (int)sorted[k]);
                break;
            }
        }
        if (k < cnt)
            break;
        if (cnt != plan->rf) {
            snprintf(msg, msg_size,
                     "The manual partition assignment includes a partition with %d replica(s), "
                     "but this is inconsistent with previous partitions, which have %d "
                     "replica(s).",
                     (int)cnt, (int)plan->rf);
            break;
        }
        for (k = 0; k < cnt; k++) {
            const kb_meta_broker_t *b = kb_mplan_broker(bs, nb, a[i].brokers[k], &self);
            if (b && !b->fenced && in_range)
                plan->isr[(size_t)slot * (size_t)plan->rf + (size_t)nisr] = a[i].brokers[k];
            nisr += b && !b->fenced;
        }
        if (nisr == 0) {
            snprintf(msg, msg_size,
                     "All brokers specified in the manual partition assignment for partition %d "
                     "are fenced or in controlled shutdown.",
                     (int)part);
            break;
        }
        if (in_range) {
            seen[slot] = 1;
            memcpy(&plan->rep[(size_t)slot * (size_t)plan->rf], a[i].brokers,
                   (size_t)cnt * sizeof(int32_t));
            plan->nisr[slot] = nisr;
        } else {
            gap = true;
        }
        ec = 0;
    }
    if (!ec && gap) {
        snprintf(msg, msg_size, "partitions should be a consecutive 0-based integer sequence");
        ec = KP_ERR_INVALID_REPLICA_ASSIGNMENT;
    }
out:
    free(bs);
    free(seen);
    free(sorted);
    if (ec)
        kb_mplan_free(plan);
    return ec;
}

/* Partition @p i of a checked @p plan as a kb_mpart_t (arrays point into the plan). */
static void kb_mplan_part(const kb_mplan_t *plan, int32_t i, kb_mpart_t *p)
{
    memset(p, 0, sizeof(*p));
    p->replicas = &plan->rep[(size_t)i * (size_t)plan->rf];
    p->nreplicas = plan->rf;
    p->isr = &plan->isr[(size_t)i * (size_t)plan->rf];
    p->nisr = plan->nisr[i];
    p->leader = p->isr[0];
}

/* change_mu held. */
static int16_t kb_meta_create_locked(kb_meta_t *meta, const kb_topic_spec_t *spec,
                                     bool validate_only, kp_uuid_t *id_out, char *msg,
                                     size_t msg_size)
{
    kb_mtopic_t *other, *st, like;
    kb_mrecs_t rs = {0};
    kb_mpart_t p0;
    kb_mplan_t plan = {0};
    int32_t self;
    int16_t ec;
    char err[512];
    bool io_error;

    if (!kb_meta_topic_name_valid(spec->name, msg, msg_size))
        return KP_ERR_INVALID_TOPIC_EXCEPTION;
    if (!strcmp(spec->name, KB_TOPIC_CLUSTER_METADATA)) {
        snprintf(msg, msg_size, "Creation of internal topic %s is prohibited.", spec->name);
        return KP_ERR_INVALID_REQUEST;
    }
    if (kb_meta_find(meta, spec->name)) {
        snprintf(msg, msg_size, "Topic '%s' already exists.", spec->name);
        return KP_ERR_TOPIC_ALREADY_EXISTS;
    }
    if ((other = kb_meta_collision(meta, spec->name))) {
        snprintf(msg, msg_size, "Topic '%s' collides with existing topic: %s", spec->name,
                 other->name);
        return KP_ERR_INVALID_TOPIC_EXCEPTION;
    }
    if (spec->partitions <= 0) {
        snprintf(msg, msg_size, "Number of partitions must be larger than 0.");
        return KP_ERR_INVALID_PARTITIONS;
    }
    if (spec->partitions > KB_META_MAX_PART) {
        snprintf(msg, msg_size, "Number of partitions must be at most %d.", KB_META_MAX_PART);
        return KP_ERR_INVALID_PARTITIONS;
    }
    if (spec->id && !kb_uuid_is_zero(spec->id) && kb_meta_find_id(meta, spec->id)) {
        snprintf(msg, msg_size, "Topic id of '%s' is already used by another topic.", spec->name);
        return KP_ERR_INVALID_REQUEST;
    }
    ec = kb_meta_validate_configs(meta, spec->configs, spec->config_cnt, spec->privileged, msg,
                                  msg_size);
    if (ec)
        return ec;
    if (meta->remote >= 0 && !validate_only) {
        /* A broker-only node: the controller creates topics (broker/ctrl forwards them). */
        snprintf(msg, msg_size,
                 "This broker is not the controller: metadata changes are made by controller %d",
                 (int)meta->remote);
        return KP_ERR_NOT_CONTROLLER;
    }
    if (spec->nassignments > 0) {
        /* Manual assignments: checked against the registered brokers of the image. */
        if ((size_t)spec->partitions != spec->nassignments) {
            snprintf(msg, msg_size, "%zu manual partition assignments for %" PRId32 " partitions",
                     spec->nassignments, spec->partitions);
            return KP_ERR_INVALID_REPLICA_ASSIGNMENT;
        }
        ec = kb_meta_manual_plan(meta, spec->assignments, spec->nassignments, -1, -1, &plan, msg,
                                 msg_size);
        if (ec)
            return ec;
    } else if (spec->replication_factor > 1 && !spec->internal) {
        /* A single node has one broker; a cluster's controller asks its assigner. */
        int32_t rf = spec->replication_factor, rv[KB_META_MAX_REPLICAS];
        if (!meta->assign || rf > KB_META_MAX_REPLICAS) {
            snprintf(msg, msg_size,
                     "Unable to replicate the partition %" PRId32 " time(s): The target "
                     "replication factor of %" PRId32 " cannot be reached because only 1 "
                     "broker(s) are registered.",
                     rf, rf);
            return KP_ERR_INVALID_REPLICATION_FACTOR;
        }
        ec = meta->assign(meta->assign_opaque, 0, &rf, false, rv, msg, msg_size);
        if (ec)
            return ec;
    }
    if (validate_only) {
        kb_mplan_free(&plan);
        return 0;
    }

    memset(&like, 0, sizeof(like));
    like.name = (char *)spec->name;
    like.internal = kb_meta_topic_is_internal_name(spec->name);
    like.cfg = (kb_kv_t *)spec->configs;
    like.cfg_cnt = spec->config_cnt;
    if (spec->id && !kb_uuid_is_zero(spec->id)) {
        like.id = *spec->id;
    } else {
        do
            kb_uuid_random(&like.id);
        while (kb_meta_find_id(meta, &like.id) || kb_uuid_is_zero(&like.id));
    }
    /* The logs first: a topic whose logs cannot be created is not committed. */
    st = kb_meta_stage(meta, &like, 0, spec->partitions, err, sizeof(err), &io_error);
    if (!st && io_error) {
        kb_mplan_free(&plan);
        snprintf(msg, msg_size, "Cannot create the log of a partition of %s: %s", spec->name, err);
        return KP_ERR_KAFKA_STORAGE_ERROR;
    }
    if (!st) {
        kb_mplan_free(&plan);
        snprintf(msg, msg_size, "out of memory");
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
    kb_mrecs_topic(&rs, spec->name, &like.id);
    memset(&p0, 0, sizeof(p0));
    kb_meta_single_part(meta, &p0, &self, 0);
    for (int32_t i = 0; i < spec->partitions; i++) {
        int32_t rv[KB_META_MAX_REPLICAS];
        kb_mpart_t pa = p0;
        if (plan.n > 0) {
            kb_mplan_part(&plan, i, &pa);
        } else if (meta->assign) {
            /* The controller of a cluster: replicas over the usable brokers. */
            int32_t rf = spec->replication_factor > 0 ? spec->replication_factor : 1;
            if (rf > KB_META_MAX_REPLICAS)
                rf = KB_META_MAX_REPLICAS;
            ec = meta->assign(meta->assign_opaque, i, &rf, spec->internal, rv, msg, msg_size);
            if (ec) {
                kb_meta_recs_free(rs.v, rs.n);
                kb_meta_unstage(meta, st);
                kb_mplan_free(&plan);
                return ec;
            }
            pa.replicas = pa.isr = rv;
            pa.nreplicas = pa.nisr = rf;
            pa.leader = rv[0];
        }
        kb_mrecs_partition(&rs, &like.id, i, &pa);
    }
    for (size_t i = 0; i < spec->config_cnt; i++)
        kb_mrecs_config(&rs, KB_RES_TOPIC, spec->name, spec->configs[i].key,
                        spec->configs[i].value ? spec->configs[i].value : "");
    kb_mplan_free(&plan);
    meta->staged = st;
    ec = kb_meta_commit(meta, &rs, msg, msg_size);
    kb_meta_unstage(meta, st);
    if (ec)
        return ec;
    if (id_out)
        *id_out = like.id;
    kb_log_info("meta", "created topic %s with %" PRId32 " partitions%s", spec->name,
                spec->partitions, like.internal ? " (internal)" : "");
    return 0;
}

/* Whether the ACL records of @p recs apply to the image (change_mu held: it cannot change): an
 * added id is new (also within the batch), a removed one present (or added earlier in it).
 * Checked before the write, as kb_meta_apply_acl would refuse the log at the next start. */
static bool kb_meta_acl_check(kb_meta_t *meta, const kb_mrec_t *recs, size_t n, char *msg,
                              size_t msg_size)
{
    for (size_t i = 0; i < n; i++) {
        int live = 0; /* the id's presence after the image and recs[0..i) */
        if (recs[i].type != KB_MREC_ACL && recs[i].type != KB_MREC_REMOVE_ACL)
            continue;
        for (size_t j = 0; j < meta->nacls; j++)
            if (!memcmp(meta->acls[j].acl_id.b, recs[i].acl_id.b, 16))
                live = 1;
        for (size_t j = 0; j < i; j++)
            if ((recs[j].type == KB_MREC_ACL || recs[j].type == KB_MREC_REMOVE_ACL) &&
                !memcmp(recs[j].acl_id.b, recs[i].acl_id.b, 16))
                live = recs[j].type == KB_MREC_ACL;
        if (recs[i].type == KB_MREC_ACL ? live : !live) {
            snprintf(msg, msg_size, "%s of an ACL id %s", kb_mrec_type_name(recs[i].type),
                     live ? "already present" : "not present");
            return false;
        }
    }
    return true;
}

int kb_meta_plugin_records(kb_meta_t *meta, kb_mrec_t **out, size_t *cnt)
{
    kb_mrec_t *v;
    int rc = 0;
    *out = NULL;
    *cnt = 0;
    pthread_rwlock_rdlock(&meta->rw);
    v = calloc(meta->nprecs + 1, sizeof(*v));
    for (size_t i = 0; v && i < meta->nprecs; i++) {
        if (kb_mrec_plugin_copy(&v[i], &meta->precs[i]) != 0) {
            kb_meta_recs_free(v, i);
            v = NULL;
        } else {
            *cnt = i + 1;
        }
    }
    if (!v) {
        *cnt = 0;
        rc = KB_E_NOMEM;
    }
    pthread_rwlock_unlock(&meta->rw);
    *out = v;
    return rc;
}

int16_t kb_meta_commit_records(kb_meta_t *meta, const kb_mrec_t *recs, size_t n, char *msg,
                               size_t msg_size)
{
    int64_t off;
    return kb_meta_commit_records_at(meta, recs, n, &off, msg, msg_size);
}

int16_t kb_meta_commit_records_at(kb_meta_t *meta, const kb_mrec_t *recs, size_t n, int64_t *offset,
                                  char *msg, size_t msg_size)
{
    int rc;
    *offset = -1;
    pthread_mutex_lock(&meta->change_mu);
    if (!kb_meta_acl_check(meta, recs, n, msg, msg_size)) {
        pthread_mutex_unlock(&meta->change_mu);
        return KP_ERR_INVALID_REQUEST;
    }
    rc = kb_meta_log_commit(meta, recs, n);
    if (rc == 0)
        *offset = meta->offset; /* change_mu: no other batch in between */
    pthread_mutex_unlock(&meta->change_mu);
    if (rc == 0)
        return 0;
    if (rc == KB_E_STATE) {
        snprintf(msg, msg_size, "This broker is not the controller");
        return KP_ERR_NOT_CONTROLLER;
    }
    snprintf(msg, msg_size, rc == KB_E_NOMEM ? "out of memory" : "Cannot write the metadata");
    return rc == KB_E_NOMEM ? KP_ERR_UNKNOWN_SERVER_ERROR : KP_ERR_KAFKA_STORAGE_ERROR;
}

void kb_meta_set_assigner(kb_meta_t *meta, kb_meta_assign_fn *fn, void *opaque)
{
    pthread_mutex_lock(&meta->change_mu);
    meta->assign = fn;
    meta->assign_opaque = opaque;
    pthread_mutex_unlock(&meta->change_mu);
}

int16_t kb_meta_change_partition(kb_meta_t *meta, const kp_uuid_t *id, int32_t partition,
                                 int32_t partition_epoch, int32_t leader, const int32_t *isr,
                                 int32_t nisr, kb_meta_part_state_t *out)
{
    kb_mrecs_t rs = {0};
    kb_mrec_t *r;
    kb_mtopic_t *t;
    char msg[256];
    int16_t ec = 0;

    if (nisr > KB_META_MAX_REPLICAS)
        return KP_ERR_INVALID_REQUEST;
    pthread_mutex_lock(&meta->change_mu);
    t = kb_meta_find_id(meta, id);
    if (!t)
        ec = KP_ERR_UNKNOWN_TOPIC_ID;
    else if (partition < 0 || partition >= t->nparts)
        ec = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    else if (partition_epoch >= 0 && t->pi[partition].partition_epoch != partition_epoch)
        ec = KP_ERR_INVALID_UPDATE_VERSION;
    if (!ec && (r = kb_mrecs_add(&rs, KB_MREC_PARTITION_CHANGE))) {
        r->topic_id = *id;
        r->partition = partition;
        r->leader = leader == KB_META_LEADER_UNCHANGED ? KB_MREC_NO_LEADER_CHANGE : leader;
        if (nisr >= 0) {
            r->isr = kb_ints_dup(isr, nisr);
            r->nisr = nisr;
            if (!r->isr && nisr > 0)
                rs.err = KB_E_NOMEM;
        }
    }
    if (!ec)
        ec = kb_meta_commit(meta, &rs, msg, sizeof(msg));
    else
        kb_meta_recs_free(rs.v, rs.n);
    pthread_mutex_unlock(&meta->change_mu);
    if (ec == 0 && out && kb_meta_part_state(meta, id, partition, out) != KB_META_OK)
        ec = KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    return ec;
}

int16_t kb_meta_create_topic(kb_meta_t *meta, const kb_topic_spec_t *spec, bool validate_only,
                             kp_uuid_t *id_out, char *msg, size_t msg_size)
{
    int16_t ec;
    msg[0] = '\0';
    pthread_mutex_lock(&meta->change_mu);
    ec = kb_meta_create_locked(meta, spec, validate_only, id_out, msg, msg_size);
    pthread_mutex_unlock(&meta->change_mu);
    return ec;
}

int16_t kb_meta_delete_topic(kb_meta_t *meta, const char *name, const kp_uuid_t *id, char *msg,
                             size_t msg_size)
{
    kb_mtopic_t *t;
    kb_mrecs_t rs = {0};
    kb_mrec_t *r;
    char tname[KB_TOPIC_NAME_MAX + 1];
    int16_t ec;
    msg[0] = '\0';
    pthread_mutex_lock(&meta->change_mu);
    t = name ? kb_meta_find(meta, name) : kb_meta_find_id(meta, id);
    if (!t) {
        pthread_mutex_unlock(&meta->change_mu);
        snprintf(msg, msg_size,
                 name ? "This server does not host this topic-partition."
                      : "This server does not host this topic ID.");
        return name ? KP_ERR_UNKNOWN_TOPIC_OR_PARTITION : KP_ERR_UNKNOWN_TOPIC_ID;
    }
    snprintf(tname, sizeof(tname), "%s", t->name);
    if ((r = kb_mrecs_add(&rs, KB_MREC_REMOVE_TOPIC)))
        r->topic_id = t->id;
    /* The logs are deleted once the removal is committed (by the apply). */
    ec = kb_meta_commit(meta, &rs, msg, msg_size);
    pthread_mutex_unlock(&meta->change_mu);
    if (!ec)
        kb_log_info("meta", "deleted topic %s", tname);
    return ec;
}

int16_t kb_meta_create_partitions(kb_meta_t *meta, const char *name, int32_t count,
                                  bool validate_only, char *msg, size_t msg_size)
{
    return kb_meta_create_partitions_assigned(meta, name, count, NULL, -1, validate_only, msg,
                                              msg_size);
}

int16_t kb_meta_create_partitions_assigned(kb_meta_t *meta, const char *name, int32_t count,
                                           const kb_meta_assignment_t *asg, int32_t nasg,
                                           bool validate_only, char *msg, size_t msg_size)
{
    kb_mtopic_t *t, *st;
    kb_mrecs_t rs = {0};
    kb_mplan_t plan = {0};
    kb_mpart_t p0;
    int32_t self;
    int16_t ec;
    char err[512];
    bool io_error;
    msg[0] = '\0';
    pthread_mutex_lock(&meta->change_mu);
    t = kb_meta_find(meta, name);
    if (!t) {
        pthread_mutex_unlock(&meta->change_mu);
        snprintf(msg, msg_size, "The topic '%s' does not exist.", name);
        return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    }
    if (count < t->nparts) {
        snprintf(msg, msg_size,
                 "The topic %s currently has %" PRId32 " partition(s); %" PRId32
                 " would not be an increase.",
                 name, t->nparts, count);
        goto invalid;
    }
    if (count == t->nparts) {
        snprintf(msg, msg_size, "Topic already has %" PRId32 " partition(s).", count);
        goto invalid;
    }
    if (count > KB_META_MAX_PART) {
        snprintf(msg, msg_size, "Number of partitions must be at most %d.", KB_META_MAX_PART);
        goto invalid;
    }
    if (nasg >= 0) {
        /* Kafka: as many lists as new partitions, each as long as partition 0's replicas. */
        if (nasg != count - t->nparts) {
            pthread_mutex_unlock(&meta->change_mu);
            snprintf(msg, msg_size,
                     "Attempted to add %" PRId32 " additional partition(s), but only %" PRId32
                     " assignment(s) were specified.",
                     count - t->nparts, nasg);
            return KP_ERR_INVALID_REPLICA_ASSIGNMENT;
        }
        ec = kb_meta_manual_plan(meta, asg, (size_t)nasg, t->nparts,
                                 t->nparts > 0 && t->pi[0].nreplicas > 0 ? t->pi[0].nreplicas : 1,
                                 &plan, msg, msg_size);
        if (ec) {
            pthread_mutex_unlock(&meta->change_mu);
            return ec;
        }
    }
    if (validate_only) {
        pthread_mutex_unlock(&meta->change_mu);
        kb_mplan_free(&plan);
        return 0;
    }
    /* New partitions' logs are opened before they are committed. */
    st = kb_meta_stage(meta, t, t->nparts, count, err, sizeof(err), &io_error);
    if (!st) {
        pthread_mutex_unlock(&meta->change_mu);
        kb_mplan_free(&plan);
        if (io_error) {
            snprintf(msg, msg_size, "Cannot create the new partitions: %s", err);
            return KP_ERR_KAFKA_STORAGE_ERROR;
        }
        snprintf(msg, msg_size, "out of memory");
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
    memset(&p0, 0, sizeof(p0));
    kb_meta_single_part(meta, &p0, &self, 0);
    for (int32_t i = t->nparts; i < count; i++) {
        int32_t rv[KB_META_MAX_REPLICAS];
        kb_mpart_t pa = p0;
        if (plan.n > 0) {
            kb_mplan_part(&plan, i - t->nparts, &pa);
        } else if (meta->assign) {
            /* The controller of a cluster: as many replicas as the topic's first partition. */
            int32_t rf = t->nparts > 0 && t->pi[0].nreplicas > 0 ? t->pi[0].nreplicas : 1;
            if (rf > KB_META_MAX_REPLICAS)
                rf = KB_META_MAX_REPLICAS;
            ec = meta->assign(meta->assign_opaque, i, &rf, false, rv, msg, msg_size);
            if (ec) {
                kb_meta_recs_free(rs.v, rs.n);
                kb_meta_unstage(meta, st);
                pthread_mutex_unlock(&meta->change_mu);
                kb_mplan_free(&plan);
                return ec;
            }
            pa.replicas = pa.isr = rv;
            pa.nreplicas = pa.nisr = rf;
            pa.leader = rv[0];
        }
        kb_mrecs_partition(&rs, &t->id, i, &pa);
    }
    kb_mplan_free(&plan);
    meta->staged = st;
    ec = kb_meta_commit(meta, &rs, msg, msg_size);
    kb_meta_unstage(meta, st);
    pthread_mutex_unlock(&meta->change_mu);
    if (!ec)
        kb_log_info("meta", "topic %s now has %" PRId32 " partitions", name, count);
    return ec;
invalid:
    pthread_mutex_unlock(&meta->change_mu);
    return KP_ERR_INVALID_PARTITIONS;
}

/* ---- config mutations ---------------------------------------------------------------------- */

/* Comma list @p base with @p items appended (missing ones) or removed: malloc'd. */
static char *kb_meta_list_op(const char *base, const char *items, bool append)
{
    size_t cap = strlen(base) + strlen(items) + 2, off = 0;
    char *out = malloc(cap), *b = strdup(base), *it = strdup(items), *s1 = NULL, *s2 = NULL, *p;
    if (!out || !b || !it) {
        free(out);
        free(b);
        free(it);
        return NULL;
    }
    out[0] = '\0';
    for (p = strtok_r(b, ",", &s1); p; p = strtok_r(NULL, ",", &s1)) {
        bool drop = false;
        while (*p == ' ')
            p++;
        if (!*p)
            continue;
        if (!append) {
            char *tmp = strdup(items), *s3 = NULL;
            for (char *q = tmp ? strtok_r(tmp, ",", &s3) : NULL; q; q = strtok_r(NULL, ",", &s3)) {
                while (*q == ' ')
                    q++;
                if (!strcmp(q, p))
                    drop = true;
            }
            free(tmp);
        }
        if (!drop)
            off += (size_t)snprintf(out + off, cap - off, "%s%s", off ? "," : "", p);
    }
    if (append) {
        for (p = strtok_r(it, ",", &s2); p; p = strtok_r(NULL, ",", &s2)) {
            bool have = false;
            char *tmp = strdup(out), *s3 = NULL;
            while (*p == ' ')
                p++;
            if (!*p)
                continue;
            for (char *q = tmp ? strtok_r(tmp, ",", &s3) : NULL; q; q = strtok_r(NULL, ",", &s3))
                if (!strcmp(q, p))
                    have = true;
            free(tmp);
            if (!have)
                off += (size_t)snprintf(out + off, cap - off, "%s%s", off ? "," : "", p);
        }
    }
    free(b);
    free(it);
    return out;
}

/* Apply @p ops to a copy of the override set @p cur; the new set goes to out / out_cnt. */
static int16_t kb_meta_apply_ops(const kb_kv_t *cur, size_t cur_cnt, const kb_cfg_op_t *ops,
                                 size_t n, bool replace_all, bool keep_hidden, bool topic,
                                 const kb_meta_t *meta, const kb_mtopic_t *t, kb_kv_t **out,
                                 size_t *out_cnt, char *msg, size_t msg_size)
{
    kb_kv_t *kv = NULL;
    size_t cnt = 0;
    int16_t ec = 0;
    if (replace_all) {
        kv = calloc(1, sizeof(*kv));
        if (!kv)
            return KP_ERR_UNKNOWN_SERVER_ERROR;
        for (size_t i = 0; keep_hidden && i < cur_cnt; i++) {
            const kb_tconf_def_t *d = topic ? kb_tconf_def(cur[i].key) : NULL;
            if (d && (d->flags & KB_TCF_HIDDEN) &&
                kb_kv_set(&kv, &cnt, cur[i].key, cur[i].value) != 0)
                goto nomem;
        }
    } else if (kb_kv_dup(cur, cur_cnt, &kv) != 0) {
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    } else {
        cnt = cur_cnt;
    }
    for (size_t i = 0; i < n; i++) {
        const kb_cfg_op_t *op = &ops[i];
        char *v = NULL;
        const char *base;
        int type = 0;
        if (topic) {
            const kb_tconf_def_t *d = kb_tconf_def(op->key);
            type = d ? d->type : 0;
        } else {
            const kb_conf_def_t *bd = kb_config_def(op->key);
            type = bd ? kb_tconf_broker_type(bd) : KB_TC_STRING;
        }
        switch (op->op) {
        case KB_CFGOP_SET:
            if (kb_kv_set(&kv, &cnt, op->key, op->value ? op->value : "") != 0)
                goto nomem;
            break;
        case KB_CFGOP_DELETE:
            if (kb_kv_set(&kv, &cnt, op->key, NULL) != 0)
                goto nomem;
            break;
        case KB_CFGOP_APPEND:
        case KB_CFGOP_SUBTRACT:
            if (type != KB_TC_LIST) {
                snprintf(msg, msg_size, "Config value %s is not allowed for config key: %s",
                         op->op == KB_CFGOP_APPEND ? "append" : "subtract", op->key);
                ec = KP_ERR_INVALID_CONFIG;
                goto fail;
            }
            base = kb_kv_get(kv, cnt, op->key);
            if (!base && topic && t) {
                kb_tconf_val_t ev;
                kb_dyncfg_t dyn = kb_meta_dyn(meta);
                kb_tconf_effective(kb_tconf_def(op->key), t->cfg, t->cfg_cnt, meta->cfg, &dyn, &ev,
                                   NULL, NULL);
                v = kb_meta_list_op(ev.value, op->value ? op->value : "",
                                    op->op == KB_CFGOP_APPEND);
            } else {
                v = kb_meta_list_op(base ? base : "", op->value ? op->value : "",
                                    op->op == KB_CFGOP_APPEND);
            }
            if (!v || kb_kv_set(&kv, &cnt, op->key, v) != 0) {
                free(v);
                goto nomem;
            }
            free(v);
            break;
        default:
            snprintf(msg, msg_size, "Unknown config operation %d for %s", op->op, op->key);
            ec = KP_ERR_INVALID_REQUEST;
            goto fail;
        }
    }
    *out = kv;
    *out_cnt = cnt;
    return 0;
nomem:
    snprintf(msg, msg_size, "out of memory");
    ec = KP_ERR_UNKNOWN_SERVER_ERROR;
fail:
    kb_kv_free(kv, cnt);
    return ec;
}

static int kb_meta_key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Whether two operations name the same key (sorting a copy of the keys). */
static bool kb_meta_dup_keys(const kb_cfg_op_t *ops, size_t n)
{
    const char **k;
    bool dup = false;
    if (n < 2)
        return false;
    k = malloc(n * sizeof(*k));
    if (!k)
        return false;
    for (size_t i = 0; i < n; i++)
        k[i] = ops[i].key;
    qsort(k, n, sizeof(*k), kb_meta_key_cmp);
    for (size_t i = 1; i < n && !dup; i++)
        dup = !strcmp(k[i - 1], k[i]);
    free(k);
    return dup;
}

static void kb_meta_reconfigure_topic(kb_meta_t *meta, kb_mtopic_t *t)
{
    kb_log_config_t lc;
    kb_tconf_extra_t ex;
    bool mirror = kb_meta_is_mirror(t);
    if (!meta->pm)
        return;
    kb_meta_build(meta, t, &lc, &ex);
    for (int32_t i = 0; i < t->nparts; i++)
        if (t->parts[i])
            kb_part_reconfigure(t->parts[i], &lc, &ex, mirror);
}

/* ConfigRecords turning the override set @p old into @p cur (a null value removes a key), in
 * the order listeners have always seen the changes: set keys, then removed ones. */
static void kb_meta_diff_records(kb_mrecs_t *rs, int8_t rtype, const char *rname,
                                 const kb_kv_t *old, size_t old_cnt, const kb_kv_t *cur,
                                 size_t cur_cnt)
{
    for (size_t i = 0; i < cur_cnt; i++) {
        const char *o = kb_kv_get(old, old_cnt, cur[i].key);
        if (!o || strcmp(o, cur[i].value))
            kb_mrecs_config(rs, rtype, rname, cur[i].key, cur[i].value);
    }
    for (size_t i = 0; i < old_cnt; i++)
        if (!kb_kv_get(cur, cur_cnt, old[i].key))
            kb_mrecs_config(rs, rtype, rname, old[i].key, NULL);
}

int16_t kb_meta_alter_topic_configs(kb_meta_t *meta, const char *topic, const kb_cfg_op_t *ops,
                                    size_t n, bool replace_all, bool privileged, bool validate_only,
                                    char *msg, size_t msg_size)
{
    kb_mtopic_t *t;
    kb_kv_t *kv = NULL;
    size_t cnt = 0;
    kb_mrecs_t rs = {0};
    int16_t ec;

    msg[0] = '\0';
    /* Keys and values first: nothing about them depends on the topic. */
    if (kb_meta_dup_keys(ops, n)) {
        snprintf(msg, msg_size, "Error due to duplicate config keys");
        return KP_ERR_INVALID_REQUEST;
    }
    for (size_t i = 0; i < n; i++) {
        const kb_tconf_def_t *d = kb_tconf_def(ops[i].key);
        if (!d) {
            snprintf(msg, msg_size, "Unknown topic config name: %s", ops[i].key);
            return KP_ERR_INVALID_CONFIG;
        }
        if ((d->flags & KB_TCF_HIDDEN) && !privileged) {
            snprintf(msg, msg_size, "%s can only be set by cluster mirroring (the mirror RPCs)",
                     ops[i].key);
            return KP_ERR_INVALID_CONFIG;
        }
        if (ops[i].op == KB_CFGOP_SET &&
            (ec = kb_tconf_validate(ops[i].key, ops[i].value, privileged, msg, msg_size)))
            return ec;
    }
    pthread_mutex_lock(&meta->change_mu);
    t = kb_meta_find(meta, topic);
    if (!t) {
        pthread_mutex_unlock(&meta->change_mu);
        snprintf(msg, msg_size, "Topic %s does not exist", topic);
        return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    }
    ec = kb_meta_apply_ops(t->cfg, t->cfg_cnt, ops, n, replace_all, !privileged, true, meta, t, &kv,
                           &cnt, msg, msg_size);
    if (!ec)
        ec = kb_meta_validate_configs(meta, kv, cnt, true, msg, msg_size);
    if (ec || validate_only) {
        pthread_mutex_unlock(&meta->change_mu);
        kb_kv_free(kv, cnt);
        return ec;
    }
    kb_meta_diff_records(&rs, KB_RES_TOPIC, t->name, t->cfg, t->cfg_cnt, kv, cnt);
    kb_kv_free(kv, cnt);
    ec = rs.n || rs.err ? kb_meta_commit(meta, &rs, msg, msg_size) : 0;
    pthread_mutex_unlock(&meta->change_mu);
    return ec;
}

int16_t kb_meta_alter_broker_configs(kb_meta_t *meta, const char *scope, const kb_cfg_op_t *ops,
                                     size_t n, bool replace_all, bool validate_only, char *msg,
                                     size_t msg_size)
{
    bool node = scope && scope[0];
    kb_kv_t *kv = NULL, *old;
    size_t cnt = 0, old_cnt;
    kb_mrecs_t rs = {0};
    int16_t ec;

    msg[0] = '\0';
    if (node && strcmp(scope, meta->node_id_str)) {
        snprintf(msg, msg_size,
                 "Unexpected broker id, expected %s or empty string, but received %s",
                 meta->node_id_str, scope);
        return KP_ERR_INVALID_REQUEST;
    }
    if (kb_meta_dup_keys(ops, n)) {
        snprintf(msg, msg_size, "Error due to duplicate config keys");
        return KP_ERR_INVALID_REQUEST;
    }
    for (size_t i = 0; i < n; i++) {
        ec = kb_tconf_broker_validate(
            ops[i].key, ops[i].op == KB_CFGOP_DELETE ? NULL : ops[i].value, msg, msg_size);
        if (ec)
            return ec;
    }
    pthread_mutex_lock(&meta->change_mu);
    old = node ? meta->dyn_node : meta->dyn_dflt;
    old_cnt = node ? meta->dyn_node_cnt : meta->dyn_dflt_cnt;
    ec = kb_meta_apply_ops(old, old_cnt, ops, n, replace_all, false, false, meta, NULL, &kv, &cnt,
                           msg, msg_size);
    for (size_t i = 0; !ec && i < cnt; i++)
        ec = kb_tconf_broker_validate(kv[i].key, kv[i].value, msg, msg_size);
    if (ec || validate_only) {
        pthread_mutex_unlock(&meta->change_mu);
        kb_kv_free(kv, cnt);
        return ec;
    }
    kb_meta_diff_records(&rs, KB_RES_BROKER, node ? meta->node_id_str : "", old, old_cnt, kv, cnt);
    kb_kv_free(kv, cnt);
    ec = rs.n || rs.err ? kb_meta_commit(meta, &rs, msg, msg_size) : 0;
    pthread_mutex_unlock(&meta->change_mu);
    return ec;
}

int kb_meta_broker_dyncfg(kb_meta_t *meta, kb_kv_t **node, size_t *node_cnt, kb_kv_t **dflt,
                          size_t *dflt_cnt)
{
    int rc;
    pthread_rwlock_rdlock(&meta->rw);
    rc = kb_kv_dup(meta->dyn_node, meta->dyn_node_cnt, node);
    if (!rc) {
        *node_cnt = meta->dyn_node_cnt;
        rc = kb_kv_dup(meta->dyn_dflt, meta->dyn_dflt_cnt, dflt);
        if (rc)
            kb_kv_free(*node, *node_cnt);
        else
            *dflt_cnt = meta->dyn_dflt_cnt;
    }
    pthread_rwlock_unlock(&meta->rw);
    return rc;
}

int kb_meta_broker_config_get(kb_meta_t *meta, const char *key, char *buf, size_t size)
{
    const char *v;
    char tmp[1024];
    const kb_conf_def_t *d;
    int n = -1;
    pthread_rwlock_rdlock(&meta->rw);
    v = kb_kv_get(meta->dyn_node, meta->dyn_node_cnt, key);
    if (!v)
        v = kb_kv_get(meta->dyn_dflt, meta->dyn_dflt_cnt, key);
    if (v)
        n = snprintf(buf, size, "%s", v);
    pthread_rwlock_unlock(&meta->rw);
    if (n >= 0)
        return n;
    d = kb_config_def(key);
    if (d && kb_config_is_set(meta->cfg, key)) {
        if (kb_tconf_broker_static(meta->cfg, d, tmp, sizeof(tmp)))
            return snprintf(buf, size, "%s", tmp);
        if (d->type == KB_CT_PASSWORD && (v = kb_config_raw(meta->cfg, key)))
            return snprintf(buf, size, "%s", v);
        return -1;
    }
    if (!d && (v = kb_config_raw(meta->cfg, key)))
        return snprintf(buf, size, "%s", v);
    return -1;
}

/* ---- epochs and producer ids --------------------------------------------------------------- */

int16_t kb_meta_bump_epoch(kb_meta_t *meta, const kp_uuid_t *id, int32_t partition,
                           int32_t min_epoch, int32_t *new_epoch)
{
    kb_mtopic_t *t;
    int32_t old, ne;
    kb_mrecs_t rs = {0};
    kb_mrec_t *r;
    char msg[128];
    int16_t ec;
    pthread_mutex_lock(&meta->change_mu);
    t = kb_meta_find_id(meta, id);
    if (!t) {
        pthread_mutex_unlock(&meta->change_mu);
        return KP_ERR_UNKNOWN_TOPIC_ID;
    }
    if (partition < 0 || partition >= t->nparts) {
        pthread_mutex_unlock(&meta->change_mu);
        return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION;
    }
    old = t->pi[partition].leader_epoch;
    if (old == INT32_MAX) {
        pthread_mutex_unlock(&meta->change_mu);
        return KP_ERR_INVALID_REQUEST;
    }
    ne = old + 1 > min_epoch ? old + 1 : min_epoch;
    /* Kafka's epoch bump: a PartitionChangeRecord naming the current leader; a jump past the
     * next epoch carries kbroker's explicit epoch (kb_meta_rec.h). */
    if ((r = kb_mrecs_add(&rs, KB_MREC_PARTITION_CHANGE))) {
        r->topic_id = t->id;
        r->partition = partition;
        r->leader = t->pi[partition].leader >= 0 ? t->pi[partition].leader : meta->node_id;
        r->leader_epoch = ne == old + 1 ? -1 : ne;
    }
    ec = kb_meta_commit(meta, &rs, msg, sizeof(msg));
    pthread_mutex_unlock(&meta->change_mu);
    if (!ec && new_epoch)
        *new_epoch = ne;
    return ec;
}

void kb_meta_set_pid_source(kb_meta_t *meta, kb_meta_pid_source_fn *fn, void *opaque)
{
    pthread_mutex_lock(&meta->pid_mu);
    meta->pid_src = fn;
    meta->pid_src_opaque = opaque;
    meta->blk_next = meta->blk_end = 0;
    pthread_mutex_unlock(&meta->pid_mu);
}

int kb_meta_alloc_producer_ids(kb_meta_t *meta, int32_t count, int64_t *first)
{
    int rc = 0;
    if (count <= 0)
        return KB_E_INVALID;
    pthread_mutex_lock(&meta->pid_mu);
    if (meta->pid_src) {
        /* A broker-only node: ids from the controller's blocks (one request per block). */
        if (meta->blk_end - meta->blk_next < count) {
            int64_t start = 0;
            int32_t len = 0;
            rc = meta->pid_src(meta->pid_src_opaque, &start, &len);
            if (rc == 0 && (start < 0 || len < count)) {
                kb_log_error("meta", "producer-id block [%" PRId64 ", +%" PRId32 ") unusable",
                             start, len);
                rc = KB_E_IO;
            }
            if (rc == 0) {
                meta->blk_next = start;
                meta->blk_end = start + len;
            }
        }
        if (rc == 0) {
            *first = meta->blk_next;
            meta->blk_next += count;
        }
        pthread_mutex_unlock(&meta->pid_mu);
        return rc;
    }
    pthread_mutex_unlock(&meta->pid_mu);
    pthread_mutex_lock(&meta->change_mu);
    if (meta->pid_next + count > meta->pid_persisted) {
        int64_t need = meta->pid_next + count - meta->pid_persisted;
        kb_mrecs_t rs = {0};
        kb_mrec_t *r = kb_mrecs_add(&rs, KB_MREC_PRODUCER_IDS);
        char msg[128];
        if (r) {
            r->broker_id = meta->node_id;
            r->next_producer_id =
                meta->pid_persisted + ((need + KB_PID_BLOCK - 1) / KB_PID_BLOCK) * KB_PID_BLOCK;
        }
        if (kb_meta_commit(meta, &rs, msg, sizeof(msg)) != 0)
            rc = KB_E_IO;
    }
    if (!rc) {
        *first = meta->pid_next;
        meta->pid_next += count;
    }
    pthread_mutex_unlock(&meta->change_mu);
    return rc;
}

/* ---- internal topics ----------------------------------------------------------------------- */

int16_t kb_meta_internal_spec(const kb_config_t *cfg, const char *name, int32_t max_rf,
                              kb_meta_internal_spec_t *out)
{
    kb_topic_spec_t *spec = &out->spec;
    size_t n = 0;
    int32_t min_isr;
    memset(out, 0, sizeof(*out));
    spec->name = name;
    spec->internal = true;
    spec->privileged = true;
    if (!strcmp(name, KB_TOPIC_CONSUMER_OFFSETS)) {
        spec->partitions = cfg->offsets_topic_num_partitions;
        spec->replication_factor = cfg->offsets_topic_replication_factor;
        snprintf(out->seg, sizeof(out->seg), "%" PRId32, cfg->offsets_topic_segment_bytes);
        out->kv[n++] = (kb_kv_t){"cleanup.policy", "compact"};
        out->kv[n++] = (kb_kv_t){"compression.type", "producer"};
        out->kv[n++] = (kb_kv_t){"segment.bytes", out->seg};
    } else if (!strcmp(name, KB_TOPIC_TRANSACTION_STATE)) {
        spec->partitions = cfg->transaction_state_log_num_partitions;
        spec->replication_factor = cfg->transaction_state_log_replication_factor;
        snprintf(out->seg, sizeof(out->seg), "%" PRId32, cfg->transaction_state_log_segment_bytes);
        out->kv[n++] = (kb_kv_t){"cleanup.policy", "compact"};
        out->kv[n++] = (kb_kv_t){"compression.type", "uncompressed"};
        out->kv[n++] = (kb_kv_t){"segment.bytes", out->seg};
        out->kv[n++] = (kb_kv_t){"min.insync.replicas", out->isr};
        out->kv[n++] = (kb_kv_t){"unclean.leader.election.enable", "false"};
    } else if (!strcmp(name, KB_TOPIC_MIRROR_STATE)) {
        return KP_ERR_UNKNOWN_TOPIC_OR_PARTITION; /* the mirror plugin creates it */
    } else {
        return KP_ERR_INVALID_REQUEST;
    }
    if (spec->replication_factor <= 0)
        spec->replication_factor = 1;
    if (max_rf > 0 && spec->replication_factor > max_rf)
        spec->replication_factor = max_rf;
    /* A min.insync.replicas above the replication factor could never be met. */
    min_isr = cfg->transaction_state_log_min_isr;
    if (min_isr > spec->replication_factor)
        min_isr = spec->replication_factor;
    snprintf(out->isr, sizeof(out->isr), "%" PRId32, min_isr > 0 ? min_isr : 1);
    spec->configs = out->kv;
    spec->config_cnt = n;
    return 0;
}

void kb_meta_set_internal_creator(kb_meta_t *meta, kb_meta_internal_creator_fn *fn, void *opaque)
{
    pthread_mutex_lock(&meta->change_mu);
    meta->icreate = fn;
    meta->icreate_opaque = opaque;
    pthread_mutex_unlock(&meta->change_mu);
}

bool kb_meta_create_remote(kb_meta_t *meta, const char *name)
{
    bool remote;
    pthread_mutex_lock(&meta->change_mu);
    remote = meta->remote >= 0;
    if (remote && meta->icreate && !kb_meta_find(meta, name))
        meta->icreate(meta->icreate_opaque, name);
    pthread_mutex_unlock(&meta->change_mu);
    return remote;
}

int16_t kb_meta_ensure_internal_topic(kb_meta_t *meta, const char *name, kb_topic_info_t *out)
{
    kb_meta_internal_spec_t is;
    kb_mtopic_t *t;
    char msg[256];
    int16_t ec = 0;

    pthread_mutex_lock(&meta->change_mu);
    t = kb_meta_find(meta, name);
    if (!t) {
        int32_t max_rf = 1;
        if (meta->assign) {
            /* The controller of a cluster: the configured replication factor over the usable
             * brokers (capped only when this node is the one registered broker). */
            int32_t rf, rv[KB_META_MAX_REPLICAS];
            if ((ec = kb_meta_internal_spec(meta->cfg, name, KB_META_MAX_REPLICAS, &is)) != 0) {
                pthread_mutex_unlock(&meta->change_mu);
                return ec;
            }
            rf = is.spec.replication_factor;
            ec = meta->assign(meta->assign_opaque, 0, &rf, true, rv, msg, sizeof(msg));
            if (ec) {
                pthread_mutex_unlock(&meta->change_mu);
                kb_log_warn("meta", "cannot create %s yet: %s", name, msg);
                return KP_ERR_COORDINATOR_NOT_AVAILABLE;
            }
            max_rf = rf;
        }
        if ((ec = kb_meta_internal_spec(meta->cfg, name, max_rf, &is)) != 0) {
            pthread_mutex_unlock(&meta->change_mu);
            return ec;
        }
        if (meta->remote >= 0) {
            /* A broker-only node: the controller creates it (Kafka's brokers send it a
             * CreateTopics); the coordinator is not available until it arrives here. */
            if (meta->icreate)
                meta->icreate(meta->icreate_opaque, name);
            pthread_mutex_unlock(&meta->change_mu);
            return KP_ERR_COORDINATOR_NOT_AVAILABLE;
        }
        ec = kb_meta_create_locked(meta, &is.spec, false, NULL, msg, sizeof(msg));
        if (ec)
            kb_log_error("meta", "cannot create %s: %s", name, msg);
        t = kb_meta_find(meta, name);
    }
    if (t && out)
        kb_meta_info(t, out);
    pthread_mutex_unlock(&meta->change_mu);
    return ec;
}
