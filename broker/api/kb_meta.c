/*
 * kb_meta.c -- the single-broker metadata store (see kb_meta.h).
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
#include "kb_props.h"
#include "kp_crc32c.h"
#include "kp_errcode.h"
#include "kp_reader.h"
#include "kp_writer.h"

#define KB_META_FILE     "kbroker-metadata"
#define KB_META_MAGIC    "KBMD"
#define KB_META_VERSION  1
#define KB_META_MAX_PART 100000
#define KB_PID_BLOCK     1000

typedef struct kb_mtopic_s {
    struct kb_mtopic_s *next_name, *next_id;
    char *name;
    kp_uuid_t id;
    bool internal;
    int32_t nparts;
    int32_t *epochs;
    kb_kv_t *cfg;
    size_t cfg_cnt;
    kb_part_t **parts; /* NULL when no partition manager is attached or a log failed */
} kb_mtopic_t;

struct kb_meta_listener_s {
    kb_meta_listener_t *next;
    kb_meta_listen_fn *fn;
    void *opaque;
};

struct kb_meta_s {
    const kb_config_t *cfg;
    kb_partmgr_t *pm;
    char cluster_id[64];
    int32_t node_id;
    char node_id_str[16];
    char *dir; /* first log dir */
    pthread_mutex_t change_mu;
    pthread_rwlock_t rw;
    kb_mtopic_t **by_name, **by_id;
    size_t nbuckets, ntopics;
    kb_kv_t *dyn_node, *dyn_dflt;
    size_t dyn_node_cnt, dyn_dflt_cnt;
    int64_t offset;
    int64_t pid_persisted; /* first producer id not yet covered by a persisted block */
    int64_t pid_next;
    kb_meta_listener_t *listeners; /* under change_mu */
};

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

static void kb_mtopic_free(kb_mtopic_t *t)
{
    if (!t)
        return;
    free(t->name);
    free(t->epochs);
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

/* ---- persistence ------------------------------------------------------------------------- */

static void kb_meta_wstr(kp_writer_t *wr, const char *s)
{
    size_t n = strlen(s);
    kp_write_int32(wr, (int32_t)n);
    kp_write_raw(wr, s, n);
}

static char *kb_meta_rstr(kp_reader_t *rd)
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

static void kb_meta_wkv(kp_writer_t *wr, const kb_kv_t *kv, size_t cnt)
{
    kp_write_int32(wr, (int32_t)cnt);
    for (size_t i = 0; i < cnt; i++) {
        kb_meta_wstr(wr, kv[i].key);
        kb_meta_wstr(wr, kv[i].value);
    }
}

static int kb_meta_rkv(kp_reader_t *rd, kb_kv_t **out, size_t *cnt)
{
    int32_t n = kp_read_int32(rd);
    kb_kv_t *kv;
    *out = NULL;
    *cnt = 0;
    if (n < 0 || (size_t)n > kp_reader_remaining(rd) / 8)
        return kp_reader_fail(rd, KP_E_TRUNCATED, "config count");
    kv = calloc((size_t)n + 1, sizeof(*kv));
    if (!kv)
        return kp_reader_fail(rd, KP_E_NOMEM, "out of memory");
    for (int32_t i = 0; i < n && !rd->err; i++) {
        kv[i].key = kb_meta_rstr(rd);
        kv[i].value = kb_meta_rstr(rd);
        *cnt = (size_t)i + 1;
    }
    *out = kv;
    return rd->err;
}

static void kb_meta_serialize(const kb_meta_t *meta, kp_writer_t *wr)
{
    kb_meta_wstr(wr, meta->cluster_id);
    kp_write_int32(wr, meta->node_id);
    kp_write_int64(wr, meta->offset);
    kp_write_int64(wr, meta->pid_persisted);
    kb_meta_wkv(wr, meta->dyn_node, meta->dyn_node_cnt);
    kb_meta_wkv(wr, meta->dyn_dflt, meta->dyn_dflt_cnt);
    kp_write_int32(wr, (int32_t)meta->ntopics);
    KB_META_FOREACH(meta, t)
    {
        kb_meta_wstr(wr, t->name);
        kp_write_uuid(wr, &t->id);
        kp_write_int8(wr, (int8_t)(t->internal ? 1 : 0));
        kp_write_int32(wr, t->nparts);
        for (int32_t i = 0; i < t->nparts; i++)
            kp_write_int32(wr, t->epochs[i]);
        kb_meta_wkv(wr, t->cfg, t->cfg_cnt);
    }
}

static int kb_meta_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc;
    if (fd < 0)
        return -1;
    rc = fsync(fd);
    close(fd);
    return rc;
}

/* Write @p len bytes to @p path atomically (temp file, fsync, rename, fsync dir). */
static int kb_meta_write_atomic(const char *dir, const char *name, const void *buf, size_t len)
{
    char path[4200], tmp[4300];
    const uint8_t *p = buf;
    int fd;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return KB_E_IO;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            close(fd);
            unlink(tmp);
            return KB_E_IO;
        }
        p += n;
        len -= (size_t)n;
    }
    if (fsync(fd) != 0) {
        close(fd);
        unlink(tmp);
        return KB_E_IO;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        return KB_E_IO;
    }
    kb_meta_fsync_dir(dir);
    return 0;
}

/* Write the snapshot. change_mu held (the state cannot change underneath). */
static int kb_meta_persist(kb_meta_t *meta)
{
    kp_writer_t pl, wr;
    int rc;
    kp_writer_init(&pl);
    kb_meta_serialize(meta, &pl);
    if (pl.err) {
        kp_writer_free(&pl);
        return KB_E_NOMEM;
    }
    kp_writer_init(&wr);
    kp_write_raw(&wr, KB_META_MAGIC, 4);
    kp_write_int16(&wr, KB_META_VERSION);
    kp_write_uint32(&wr, kp_crc32c(0, pl.buf, pl.len));
    kp_write_int32(&wr, (int32_t)pl.len);
    kp_write_raw(&wr, pl.buf, pl.len);
    kp_writer_free(&pl);
    if (wr.err) {
        kp_writer_free(&wr);
        return KB_E_NOMEM;
    }
    rc = kb_meta_write_atomic(meta->dir, KB_META_FILE, wr.buf, wr.len);
    kp_writer_free(&wr);
    if (rc)
        kb_log_error("meta", "cannot write %s/%s: %s", meta->dir, KB_META_FILE, strerror(errno));
    return rc;
}

static int kb_meta_load(kb_meta_t *meta, char *errstr, size_t errstr_size)
{
    char path[4200];
    FILE *f;
    long sz;
    uint8_t *buf = NULL;
    kp_reader_t rd;
    uint32_t crc;
    int32_t len, n;
    char *cid = NULL;
    int rc = KB_E_PARSE;

    snprintf(path, sizeof(path), "%s/%s", meta->dir, KB_META_FILE);
    f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? KB_E_NOT_FOUND : KB_E_IO;
    if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        snprintf(errstr, errstr_size, "%s: cannot read", path);
        return KB_E_IO;
    }
    buf = malloc((size_t)sz + 1);
    if (!buf || fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        fclose(f);
        free(buf);
        snprintf(errstr, errstr_size, "%s: cannot read", path);
        return KB_E_IO;
    }
    fclose(f);
    kp_reader_init(&rd, buf, (size_t)sz);
    if (sz < 14 || memcmp(buf, KB_META_MAGIC, 4) != 0) {
        snprintf(errstr, errstr_size, "%s: not a kbroker metadata file", path);
        goto out;
    }
    kp_reader_skip(&rd, 4);
    if (kp_read_int16(&rd) != KB_META_VERSION) {
        snprintf(errstr, errstr_size, "%s: unknown version", path);
        goto out;
    }
    crc = kp_read_uint32(&rd);
    len = kp_read_int32(&rd);
    if (len < 0 || (size_t)len != kp_reader_remaining(&rd) ||
        kp_crc32c(0, buf + 14, (size_t)len) != crc) {
        snprintf(errstr, errstr_size, "%s: checksum mismatch (the file is corrupt)", path);
        goto out;
    }
    cid = kb_meta_rstr(&rd);
    if (cid && meta->cluster_id[0] && strcmp(cid, meta->cluster_id)) {
        snprintf(errstr, errstr_size,
                 "%s belongs to cluster %s, but this broker's cluster.id is %s", path, cid,
                 meta->cluster_id);
        rc = KB_E_INVALID;
        goto out;
    }
    if (cid && !meta->cluster_id[0])
        snprintf(meta->cluster_id, sizeof(meta->cluster_id), "%.63s", cid);
    if (kp_read_int32(&rd) != meta->node_id && !rd.err) {
        snprintf(errstr, errstr_size, "%s was written by another node.id", path);
        rc = KB_E_INVALID;
        goto out;
    }
    meta->offset = kp_read_int64(&rd);
    meta->pid_persisted = kp_read_int64(&rd);
    meta->pid_next = meta->pid_persisted;
    kb_meta_rkv(&rd, &meta->dyn_node, &meta->dyn_node_cnt);
    kb_meta_rkv(&rd, &meta->dyn_dflt, &meta->dyn_dflt_cnt);
    n = kp_read_int32(&rd);
    for (int32_t i = 0; i < n && !rd.err; i++) {
        kb_mtopic_t *t = calloc(1, sizeof(*t));
        if (!t) {
            kp_reader_fail(&rd, KP_E_NOMEM, "out of memory");
            break;
        }
        t->name = kb_meta_rstr(&rd);
        kp_read_uuid(&rd, &t->id);
        t->internal = kp_read_int8(&rd) & 1;
        t->nparts = kp_read_int32(&rd);
        if (t->nparts < 0 || t->nparts > KB_META_MAX_PART ||
            (size_t)t->nparts > kp_reader_remaining(&rd) / 4) {
            kp_reader_fail(&rd, KP_E_TRUNCATED, "partition count");
            kb_mtopic_free(t);
            break;
        }
        t->epochs = calloc((size_t)t->nparts + 1, sizeof(*t->epochs));
        t->parts = calloc((size_t)t->nparts + 1, sizeof(*t->parts));
        for (int32_t p = 0; t->epochs && p < t->nparts; p++)
            t->epochs[p] = kp_read_int32(&rd);
        kb_meta_rkv(&rd, &t->cfg, &t->cfg_cnt);
        if (rd.err || !t->name || !t->epochs || !t->parts || kb_meta_insert(meta, t) != 0) {
            kb_mtopic_free(t);
            if (!rd.err)
                kp_reader_fail(&rd, KP_E_NOMEM, "out of memory");
            break;
        }
    }
    if (rd.err) {
        snprintf(errstr, errstr_size, "%s: malformed (%s)", path,
                 rd.errstr ? rd.errstr : "truncated");
        goto out;
    }
    rc = 0;
out:
    free(cid);
    free(buf);
    return rc;
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
    kb_metaprops_t mp[64];
    const char *dirv[64];
    size_t nd = 0;
    int rc;

    if (!meta) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    meta->cfg = cfg;
    meta->node_id = cfg->node_id;
    snprintf(meta->node_id_str, sizeof(meta->node_id_str), "%" PRId32, cfg->node_id);
    pthread_mutex_init(&meta->change_mu, NULL);
    pthread_rwlock_init(&meta->rw, NULL);
    meta->pid_persisted = meta->pid_next = 0;

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
    if (!meta->dir)
        goto nomem;
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

    rc = kb_meta_load(meta, errstr, errstr_size);
    if (rc != 0 && rc != KB_E_NOT_FOUND) {
        if (rc == KB_E_IO && !errstr[0])
            snprintf(errstr, errstr_size, "%s/%s: %s", meta->dir, KB_META_FILE, strerror(errno));
        goto fail;
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
    if (rc == KB_E_NOT_FOUND && kb_meta_persist(meta) != 0) {
        snprintf(errstr, errstr_size, "cannot write %s/%s: %s", meta->dir, KB_META_FILE,
                 strerror(errno));
        goto fail;
    }
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
        t->parts[i] = kb_part_open(meta->pm, t->name, &t->id, i, t->epochs[i], &lc, &ex, mirror,
                                   t->internal, err, err_size);
        if (!t->parts[i]) {
            kb_log_error("meta", "cannot open %s-%" PRId32 ": %s", t->name, i, err);
            if (undo_on_error) {
                for (int32_t k = from; k < i; k++) {
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
    kb_partmgr_delete_orphan(meta->pm, topic, partition);
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
    free(meta->dir);
    pthread_rwlock_destroy(&meta->rw);
    pthread_mutex_destroy(&meta->change_mu);
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
            memcpy(*epochs, t->epochs, (size_t)t->nparts * sizeof(**epochs));
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

static int kb_meta_part_of(kb_mtopic_t *t, int32_t partition, kb_part_t **out)
{
    if (!t)
        return KB_META_UNKNOWN_TOPIC;
    if (partition < 0 || partition >= t->nparts)
        return KB_META_UNKNOWN_PARTITION;
    if (!t->parts || !t->parts[partition])
        return KB_META_OFFLINE;
    kb_part_ref(t->parts[partition]);
    *out = t->parts[partition];
    return KB_META_OK;
}

int kb_meta_part(kb_meta_t *meta, const char *topic, int32_t partition, kb_part_t **out)
{
    int rc;
    *out = NULL;
    pthread_rwlock_rdlock(&meta->rw);
    rc = kb_meta_part_of(kb_meta_find(meta, topic), partition, out);
    pthread_rwlock_unlock(&meta->rw);
    return rc;
}

int kb_meta_part_by_id(kb_meta_t *meta, const kp_uuid_t *id, int32_t partition, kb_part_t **out)
{
    int rc;
    *out = NULL;
    pthread_rwlock_rdlock(&meta->rw);
    rc = kb_meta_part_of(kb_meta_find_id(meta, id), partition, out);
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
    return !strcmp(name, KB_TOPIC_CONSUMER_OFFSETS) || !strcmp(name, KB_TOPIC_TRANSACTION_STATE);
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

/* ---- listeners ---------------------------------------------------------------------------- */

static void kb_meta_emit(kb_meta_t *meta, kb_meta_event_t *ev)
{
    ev->offset = meta->offset;
    for (kb_meta_listener_t *l = meta->listeners; l; l = l->next)
        l->fn(l->opaque, ev);
}

static void kb_meta_emit_topic(kb_meta_t *meta, const kb_mtopic_t *t, uint32_t flags)
{
    kb_topic_info_t info;
    kb_meta_event_t ev = {.type = KB_META_EV_TOPIC, .flags = flags, .topic = &info};
    kb_meta_info(t, &info);
    if (flags & KB_META_TOPIC_DELETED)
        info.partitions = 0;
    kb_meta_emit(meta, &ev);
}

static void kb_meta_emit_config(kb_meta_t *meta, int8_t rtype, const char *rname,
                                const kb_topic_info_t *topic, const char *key, const char *value)
{
    kb_meta_event_t ev = {.type = KB_META_EV_CONFIG,
                          .topic = topic,
                          .resource_type = rtype,
                          .resource_name = rname,
                          .key = key,
                          .value = value};
    kb_meta_emit(meta, &ev);
}

/* Events for every key whose value differs between @p old and @p cur. */
static void kb_meta_emit_diff(kb_meta_t *meta, int8_t rtype, const char *rname,
                              const kb_topic_info_t *topic, const kb_kv_t *old, size_t old_cnt,
                              const kb_kv_t *cur, size_t cur_cnt)
{
    for (size_t i = 0; i < cur_cnt; i++) {
        const char *o = kb_kv_get(old, old_cnt, cur[i].key);
        if (!o || strcmp(o, cur[i].value))
            kb_meta_emit_config(meta, rtype, rname, topic, cur[i].key, cur[i].value);
    }
    for (size_t i = 0; i < old_cnt; i++)
        if (!kb_kv_get(cur, cur_cnt, old[i].key))
            kb_meta_emit_config(meta, rtype, rname, topic, old[i].key, NULL);
}

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

/* change_mu held. */
static int16_t kb_meta_create_locked(kb_meta_t *meta, const kb_topic_spec_t *spec,
                                     bool validate_only, kp_uuid_t *id_out, char *msg,
                                     size_t msg_size)
{
    kb_mtopic_t *t, *other;
    int16_t ec;
    char err[512];

    if (!kb_meta_topic_name_valid(spec->name, msg, msg_size))
        return KP_ERR_INVALID_TOPIC_EXCEPTION;
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
    if (validate_only)
        return 0;

    t = calloc(1, sizeof(*t));
    if (!t)
        goto nomem;
    t->name = strdup(spec->name);
    t->nparts = spec->partitions;
    t->internal = spec->internal;
    t->epochs = calloc((size_t)t->nparts, sizeof(*t->epochs));
    t->parts = calloc((size_t)t->nparts, sizeof(*t->parts));
    if (!t->name || !t->epochs || !t->parts ||
        kb_kv_dup(spec->configs, spec->config_cnt, &t->cfg) != 0)
        goto nomem;
    t->cfg_cnt = spec->config_cnt;
    if (spec->id && !kb_uuid_is_zero(spec->id)) {
        t->id = *spec->id;
    } else {
        do
            kb_uuid_random(&t->id);
        while (kb_meta_find_id(meta, &t->id));
    }
    if (kb_meta_open_parts(meta, t, 0, t->nparts, true, err, sizeof(err)) != 0) {
        snprintf(msg, msg_size, "Cannot create the log of a partition of %s: %s", t->name, err);
        kb_mtopic_free(t);
        return KP_ERR_KAFKA_STORAGE_ERROR;
    }
    pthread_rwlock_wrlock(&meta->rw);
    if (kb_meta_insert(meta, t) != 0) {
        pthread_rwlock_unlock(&meta->rw);
        for (int32_t i = 0; meta->pm && i < t->nparts; i++)
            kb_part_delete(t->parts[i]);
        kb_mtopic_free(t);
        goto nomem_nofree;
    }
    meta->offset++;
    pthread_rwlock_unlock(&meta->rw);
    if (kb_meta_persist(meta) != 0) {
        pthread_rwlock_wrlock(&meta->rw);
        kb_meta_unlink(meta, t);
        meta->offset--;
        pthread_rwlock_unlock(&meta->rw);
        for (int32_t i = 0; meta->pm && i < t->nparts; i++)
            kb_part_delete(t->parts[i]);
        kb_mtopic_free(t);
        snprintf(msg, msg_size, "Cannot write the metadata");
        return KP_ERR_KAFKA_STORAGE_ERROR;
    }
    if (id_out)
        *id_out = t->id;
    kb_log_info("meta", "created topic %s with %" PRId32 " partitions%s", t->name, t->nparts,
                t->internal ? " (internal)" : "");
    kb_meta_emit_topic(meta, t, KB_META_TOPIC_CREATED);
    if (t->cfg_cnt) {
        kb_topic_info_t info;
        kb_meta_info(t, &info);
        kb_meta_emit_diff(meta, KB_RES_TOPIC, t->name, &info, NULL, 0, t->cfg, t->cfg_cnt);
    }
    return 0;
nomem:
    kb_mtopic_free(t);
nomem_nofree:
    snprintf(msg, msg_size, "out of memory");
    return KP_ERR_UNKNOWN_SERVER_ERROR;
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
    pthread_rwlock_wrlock(&meta->rw);
    kb_meta_unlink(meta, t);
    meta->offset++;
    pthread_rwlock_unlock(&meta->rw);
    if (kb_meta_persist(meta) != 0) {
        pthread_rwlock_wrlock(&meta->rw);
        kb_meta_insert(meta, t);
        meta->offset--;
        pthread_rwlock_unlock(&meta->rw);
        pthread_mutex_unlock(&meta->change_mu);
        snprintf(msg, msg_size, "Cannot write the metadata");
        return KP_ERR_KAFKA_STORAGE_ERROR;
    }
    for (int32_t i = 0; meta->pm && i < t->nparts; i++)
        if (t->parts[i])
            kb_part_delete(t->parts[i]);
    kb_log_info("meta", "deleted topic %s", t->name);
    kb_meta_emit_topic(meta, t, KB_META_TOPIC_DELETED);
    pthread_mutex_unlock(&meta->change_mu);
    kb_mtopic_free(t);
    return 0;
}

int16_t kb_meta_create_partitions(kb_meta_t *meta, const char *name, int32_t count,
                                  bool validate_only, char *msg, size_t msg_size)
{
    kb_mtopic_t *t;
    int32_t *ne;
    kb_part_t **np;
    int32_t old;
    char err[512];
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
    if (validate_only) {
        pthread_mutex_unlock(&meta->change_mu);
        return 0;
    }
    ne = calloc((size_t)count, sizeof(*ne));
    np = calloc((size_t)count, sizeof(*np));
    if (!ne || !np) {
        free(ne);
        free(np);
        pthread_mutex_unlock(&meta->change_mu);
        snprintf(msg, msg_size, "out of memory");
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    }
    memcpy(ne, t->epochs, (size_t)t->nparts * sizeof(*ne));
    memcpy(np, t->parts, (size_t)t->nparts * sizeof(*np));
    old = t->nparts;
    pthread_rwlock_wrlock(&meta->rw);
    free(t->epochs);
    free(t->parts);
    t->epochs = ne;
    t->parts = np;
    pthread_rwlock_unlock(&meta->rw);
    /* New partitions are opened before they become visible (nparts is still the old count). */
    if (kb_meta_open_parts(meta, t, old, count, true, err, sizeof(err)) != 0) {
        pthread_mutex_unlock(&meta->change_mu);
        snprintf(msg, msg_size, "Cannot create the new partitions: %s", err);
        return KP_ERR_KAFKA_STORAGE_ERROR;
    }
    pthread_rwlock_wrlock(&meta->rw);
    t->nparts = count;
    meta->offset++;
    pthread_rwlock_unlock(&meta->rw);
    if (kb_meta_persist(meta) != 0) {
        pthread_rwlock_wrlock(&meta->rw);
        t->nparts = old;
        meta->offset--;
        pthread_rwlock_unlock(&meta->rw);
        for (int32_t i = old; meta->pm && i < count; i++) {
            kb_part_delete(t->parts[i]);
            t->parts[i] = NULL;
        }
        pthread_mutex_unlock(&meta->change_mu);
        snprintf(msg, msg_size, "Cannot write the metadata");
        return KP_ERR_KAFKA_STORAGE_ERROR;
    }
    kb_log_info("meta", "topic %s now has %" PRId32 " partitions", name, count);
    kb_meta_emit_topic(meta, t, KB_META_TOPIC_PARTITIONS);
    pthread_mutex_unlock(&meta->change_mu);
    return 0;
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

int16_t kb_meta_alter_topic_configs(kb_meta_t *meta, const char *topic, const kb_cfg_op_t *ops,
                                    size_t n, bool replace_all, bool privileged, bool validate_only,
                                    char *msg, size_t msg_size)
{
    kb_mtopic_t *t;
    kb_kv_t *kv = NULL, *old;
    size_t cnt = 0, old_cnt;
    int16_t ec;
    kb_topic_info_t info;

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
    old = t->cfg;
    old_cnt = t->cfg_cnt;
    pthread_rwlock_wrlock(&meta->rw);
    t->cfg = kv;
    t->cfg_cnt = cnt;
    meta->offset++;
    pthread_rwlock_unlock(&meta->rw);
    if (kb_meta_persist(meta) != 0) {
        pthread_rwlock_wrlock(&meta->rw);
        t->cfg = old;
        t->cfg_cnt = old_cnt;
        meta->offset--;
        pthread_rwlock_unlock(&meta->rw);
        pthread_mutex_unlock(&meta->change_mu);
        kb_kv_free(kv, cnt);
        snprintf(msg, msg_size, "Cannot write the metadata");
        return KP_ERR_KAFKA_STORAGE_ERROR;
    }
    kb_meta_reconfigure_topic(meta, t);
    kb_meta_info(t, &info);
    kb_meta_emit_diff(meta, KB_RES_TOPIC, t->name, &info, old, old_cnt, kv, cnt);
    pthread_mutex_unlock(&meta->change_mu);
    kb_kv_free(old, old_cnt);
    return 0;
}

int16_t kb_meta_alter_broker_configs(kb_meta_t *meta, const char *scope, const kb_cfg_op_t *ops,
                                     size_t n, bool replace_all, bool validate_only, char *msg,
                                     size_t msg_size)
{
    bool node = scope && scope[0];
    kb_kv_t *kv = NULL, *old;
    size_t cnt = 0, old_cnt;
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
    pthread_rwlock_wrlock(&meta->rw);
    if (node) {
        meta->dyn_node = kv;
        meta->dyn_node_cnt = cnt;
    } else {
        meta->dyn_dflt = kv;
        meta->dyn_dflt_cnt = cnt;
    }
    meta->offset++;
    pthread_rwlock_unlock(&meta->rw);
    if (kb_meta_persist(meta) != 0) {
        pthread_rwlock_wrlock(&meta->rw);
        if (node) {
            meta->dyn_node = old;
            meta->dyn_node_cnt = old_cnt;
        } else {
            meta->dyn_dflt = old;
            meta->dyn_dflt_cnt = old_cnt;
        }
        meta->offset--;
        pthread_rwlock_unlock(&meta->rw);
        pthread_mutex_unlock(&meta->change_mu);
        kb_kv_free(kv, cnt);
        snprintf(msg, msg_size, "Cannot write the metadata");
        return KP_ERR_KAFKA_STORAGE_ERROR;
    }
    KB_META_FOREACH(meta, t)
    kb_meta_reconfigure_topic(meta, t);
    kb_meta_emit_diff(meta, KB_RES_BROKER, node ? meta->node_id_str : "", NULL, old, old_cnt, kv,
                      cnt);
    pthread_mutex_unlock(&meta->change_mu);
    kb_kv_free(old, old_cnt);
    return 0;
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
    kb_topic_info_t info;
    kb_meta_event_t ev = {.type = KB_META_EV_EPOCH};
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
    old = t->epochs[partition];
    ne = old + 1 > min_epoch ? old + 1 : min_epoch;
    pthread_rwlock_wrlock(&meta->rw);
    t->epochs[partition] = ne;
    meta->offset++;
    pthread_rwlock_unlock(&meta->rw);
    if (kb_meta_persist(meta) != 0) {
        pthread_rwlock_wrlock(&meta->rw);
        t->epochs[partition] = old;
        meta->offset--;
        pthread_rwlock_unlock(&meta->rw);
        pthread_mutex_unlock(&meta->change_mu);
        return KP_ERR_KAFKA_STORAGE_ERROR;
    }
    if (t->parts && t->parts[partition])
        kb_part_set_epoch(t->parts[partition], ne);
    kb_meta_info(t, &info);
    ev.topic = &info;
    ev.partition = partition;
    ev.leader_epoch = ne;
    kb_meta_emit(meta, &ev);
    pthread_mutex_unlock(&meta->change_mu);
    if (new_epoch)
        *new_epoch = ne;
    return 0;
}

int kb_meta_alloc_producer_ids(kb_meta_t *meta, int32_t count, int64_t *first)
{
    int rc = 0;
    if (count <= 0)
        return KB_E_INVALID;
    pthread_mutex_lock(&meta->change_mu);
    if (meta->pid_next + count > meta->pid_persisted) {
        int64_t old = meta->pid_persisted;
        int64_t need = meta->pid_next + count - meta->pid_persisted;
        meta->pid_persisted += ((need + KB_PID_BLOCK - 1) / KB_PID_BLOCK) * KB_PID_BLOCK;
        if (kb_meta_persist(meta) != 0) {
            meta->pid_persisted = old;
            rc = KB_E_IO;
        }
    }
    if (!rc) {
        *first = meta->pid_next;
        meta->pid_next += count;
    }
    pthread_mutex_unlock(&meta->change_mu);
    return rc;
}

/* ---- internal topics ----------------------------------------------------------------------- */

int16_t kb_meta_ensure_internal_topic(kb_meta_t *meta, const char *name, kb_topic_info_t *out)
{
    const kb_config_t *cfg = meta->cfg;
    kb_kv_t kv[5];
    char seg[32], isr[32];
    size_t n = 0;
    kb_topic_spec_t spec = {.name = name, .internal = true, .privileged = true};
    kb_mtopic_t *t;
    char msg[256];
    int16_t ec = 0;

    pthread_mutex_lock(&meta->change_mu);
    t = kb_meta_find(meta, name);
    if (!t) {
        if (!strcmp(name, KB_TOPIC_CONSUMER_OFFSETS)) {
            spec.partitions = cfg->offsets_topic_num_partitions;
            snprintf(seg, sizeof(seg), "%" PRId32, cfg->offsets_topic_segment_bytes);
            kv[n++] = (kb_kv_t){"cleanup.policy", "compact"};
            kv[n++] = (kb_kv_t){"compression.type", "producer"};
            kv[n++] = (kb_kv_t){"segment.bytes", seg};
        } else if (!strcmp(name, KB_TOPIC_TRANSACTION_STATE)) {
            int32_t min_isr = cfg->transaction_state_log_min_isr;
            /* One broker: a min.insync.replicas above 1 could never be met. */
            if (min_isr > 1)
                min_isr = 1;
            spec.partitions = cfg->transaction_state_log_num_partitions;
            snprintf(seg, sizeof(seg), "%" PRId32, cfg->transaction_state_log_segment_bytes);
            snprintf(isr, sizeof(isr), "%" PRId32, min_isr);
            kv[n++] = (kb_kv_t){"cleanup.policy", "compact"};
            kv[n++] = (kb_kv_t){"compression.type", "uncompressed"};
            kv[n++] = (kb_kv_t){"segment.bytes", seg};
            kv[n++] = (kb_kv_t){"min.insync.replicas", isr};
            kv[n++] = (kb_kv_t){"unclean.leader.election.enable", "false"};
        } else {
            pthread_mutex_unlock(&meta->change_mu);
            return KP_ERR_INVALID_REQUEST;
        }
        spec.configs = kv;
        spec.config_cnt = n;
        ec = kb_meta_create_locked(meta, &spec, false, NULL, msg, sizeof(msg));
        if (ec)
            kb_log_error("meta", "cannot create %s: %s", name, msg);
        t = kb_meta_find(meta, name);
    }
    if (t && out)
        kb_meta_info(t, out);
    pthread_mutex_unlock(&meta->change_mu);
    return ec;
}
