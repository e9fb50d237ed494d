/*
 * kb_kbx_records.c -- controller_write on a single broker, and the store behind it.
 *
 * kbroker has no controller quorum: the single broker is its own controller and its metadata
 * layer is the "metadata log". Plugin records are kept by this file as the latest value per
 * (record_type, key), in `<first log dir>/kbroker-plugin-records` (format below), rewritten
 * atomically for every write (temp file, fsync, rename, fsync of the directory), so a crash
 * leaves the old or the new set. A write is applied on the event thread: persisted, then queued
 * to every metadata listener as a delta carrying the written records (a NULL value deletes), and
 * then completed, so a plugin sees its records in its listener before the completion. New
 * listeners get every stored record in their snapshot.
 *
 * File format (big-endian): "KBXREC01", uint32 count, then per record int32 type, uint32 key
 * length, key, uint32 value length, value; then a CRC-32C of everything before it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "kb_host_int.h"
#include "kp_crc32c.h"

#define KB_REC_MAGIC     "KBXREC01"
#define KB_REC_FILE      "kbroker-plugin-records"
#define KB_REC_MAX_BYTES (64u << 20)

void kb_hrec_free_array(kb_hrec_t *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++) {
        free(v[i].key);
        free(v[i].value);
    }
    free(v);
}

static void kb_rec_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t kb_rec_get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int kb_rec_write(const kb_hrecords_t *r, const kb_hrec_t *v, size_t n)
{
    size_t len = 8 + 4 + 4, o = 0;
    uint8_t *buf;
    char tmp[4200], dir[4200], *slash;
    int fd, rc = -1;

    for (size_t i = 0; i < n; i++)
        len += 12 + v[i].key_len + v[i].value_len;
    buf = malloc(len);
    if (!buf)
        return -1;
    memcpy(buf, KB_REC_MAGIC, 8);
    o = 8;
    kb_rec_put32(buf + o, (uint32_t)n);
    o += 4;
    for (size_t i = 0; i < n; i++) {
        kb_rec_put32(buf + o, (uint32_t)v[i].type);
        kb_rec_put32(buf + o + 4, (uint32_t)v[i].key_len);
        o += 8;
        memcpy(buf + o, v[i].key, v[i].key_len);
        o += v[i].key_len;
        kb_rec_put32(buf + o, (uint32_t)v[i].value_len);
        o += 4;
        memcpy(buf + o, v[i].value, v[i].value_len);
        o += v[i].value_len;
    }
    kb_rec_put32(buf + o, kp_crc32c(0, buf, o));
    snprintf(tmp, sizeof(tmp), "%s.tmp", r->path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, buf, len) == (ssize_t)len && fsync(fd) == 0)
            rc = 0;
        close(fd);
    }
    free(buf);
    if (rc == 0 && rename(tmp, r->path) != 0)
        rc = -1;
    if (rc != 0) {
        unlink(tmp);
        return -1;
    }
    snprintf(dir, sizeof(dir), "%s", r->path);
    slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
            fsync(fd);
            close(fd);
        }
    }
    return 0;
}

static int kb_rec_load(kb_hrecords_t *r, char *errstr, size_t errstr_size)
{
    FILE *f = fopen(r->path, "rb");
    uint8_t *buf = NULL;
    long size;
    size_t o = 12, n;
    int rc = -1;

    if (!f)
        return errno == ENOENT
                   ? 0
                   : (snprintf(errstr, errstr_size, "cannot open %s: %s", r->path, strerror(errno)),
                      -1);
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 16 || size > KB_REC_MAX_BYTES ||
        fseek(f, 0, SEEK_SET) != 0)
        goto bad;
    buf = malloc((size_t)size);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size)
        goto bad;
    if (memcmp(buf, KB_REC_MAGIC, 8) != 0 ||
        kp_crc32c(0, buf, (size_t)size - 4) != kb_rec_get32(buf + size - 4))
        goto bad;
    n = kb_rec_get32(buf + 8);
    if (n > (size_t)size / 12)
        goto bad;
    r->v = calloc(n ? n : 1, sizeof(*r->v));
    if (!r->v)
        goto bad;
    r->cap = n ? n : 1;
    for (size_t i = 0; i < n; i++) {
        kb_hrec_t *x = &r->v[i];
        size_t kl, vl;
        if (o + 8 > (size_t)size - 4)
            goto bad;
        x->type = (int32_t)kb_rec_get32(buf + o);
        kl = kb_rec_get32(buf + o + 4);
        o += 8;
        if (kl > (size_t)size - 4 - o)
            goto bad;
        x->key = malloc(kl ? kl : 1);
        if (!x->key)
            goto bad;
        memcpy(x->key, buf + o, kl);
        x->key_len = kl;
        o += kl;
        r->n++;
        if (o + 4 > (size_t)size - 4)
            goto bad;
        vl = kb_rec_get32(buf + o);
        o += 4;
        if (vl > (size_t)size - 4 - o)
            goto bad;
        x->value = malloc(vl ? vl : 1);
        if (!x->value)
            goto bad;
        memcpy(x->value, buf + o, vl);
        x->value_len = vl;
        o += vl;
    }
    rc = 0;
bad:
    if (rc != 0) {
        snprintf(errstr, errstr_size,
                 "%s is corrupt or unreadable (remove it to start without "
                 "plugin records)",
                 r->path);
        kb_hrec_free_array(r->v, r->n);
        r->v = NULL;
        r->n = r->cap = 0;
    }
    free(buf);
    fclose(f);
    return rc;
}

int kb_hrecords_open(kb_hrecords_t *r, const char *dir, char *errstr, size_t errstr_size)
{
    size_t n = strlen(dir) + sizeof(KB_REC_FILE) + 2;
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    r->path = malloc(n);
    if (!r->path) {
        snprintf(errstr, errstr_size, "out of memory");
        return -1;
    }
    snprintf(r->path, n, "%s/%s", dir, KB_REC_FILE);
    return kb_rec_load(r, errstr, errstr_size);
}

void kb_hrecords_close(kb_hrecords_t *r)
{
    kb_hrec_free_array(r->v, r->n);
    r->v = NULL;
    r->n = r->cap = 0;
    free(r->path);
    r->path = NULL;
    pthread_mutex_destroy(&r->mu);
}

/* ---- controller_write ---------------------------------------------------------------------- */

typedef struct kb_cw_ev_s {
    kb_hev_t ev;
    kb_hrec_t *recs;
    size_t n;
    int64_t deadline_ms;
    kbx_done_fn done;
    void *arg;
} kb_cw_ev_t;

/* Apply @p w to a new set (old entries moved, new ones copied); persist; swap in. rec.mu
 * held. On failure the stored set is unchanged. */
static int32_t kb_rec_apply(kb_host_t *h, const kb_cw_ev_t *w)
{
    kb_hrecords_t *r = &h->rec;
    size_t cap = r->n + w->n + 1, nn = 0;
    kb_hrec_t *nv = calloc(cap, sizeof(*nv));
    ssize_t *src = calloc(cap, sizeof(*src)); /* index in r->v, or -1 for a new copy */
    bool *dropped = calloc(r->n + 1, sizeof(*dropped));
    int32_t rc = KBX_ERR_NOMEM;

    if (!nv || !src || !dropped)
        goto out;
    for (size_t i = 0; i < r->n; i++) {
        nv[nn] = r->v[i];
        src[nn++] = (ssize_t)i;
    }
    for (size_t i = 0; i < w->n; i++) {
        const kb_hrec_t *x = &w->recs[i];
        for (size_t j = 0; j < nn; j++) {
            if (nv[j].type == x->type && nv[j].key_len == x->key_len &&
                !memcmp(nv[j].key, x->key, x->key_len)) {
                if (src[j] >= 0) {
                    dropped[src[j]] = true;
                } else {
                    free(nv[j].key);
                    free(nv[j].value);
                }
                nv[j] = nv[--nn];
                src[j] = src[nn];
                break;
            }
        }
        if (!x->value)
            continue;
        nv[nn].type = x->type;
        nv[nn].key_len = x->key_len;
        nv[nn].value_len = x->value_len;
        nv[nn].key = malloc(x->key_len ? x->key_len : 1);
        nv[nn].value = malloc(x->value_len ? x->value_len : 1);
        src[nn] = -1;
        nn++;
        if (!nv[nn - 1].key || !nv[nn - 1].value)
            goto undo;
        memcpy(nv[nn - 1].key, x->key, x->key_len);
        memcpy(nv[nn - 1].value, x->value, x->value_len);
    }
    if (kb_rec_write(r, nv, nn) != 0) {
        rc = KBX_ERR_IO;
        goto undo;
    }
    for (size_t i = 0; i < r->n; i++) {
        if (dropped[i]) {
            free(r->v[i].key);
            free(r->v[i].value);
        }
    }
    free(r->v);
    r->v = nv;
    r->n = nn;
    r->cap = cap;
    nv = NULL;
    rc = KBX_OK;
    goto out;
undo:
    for (size_t j = 0; j < nn; j++) {
        if (src[j] < 0) {
            free(nv[j].key);
            free(nv[j].value);
        }
    }
out:
    free(nv);
    free(src);
    free(dropped);
    return rc;
}

static void kb_cw_run(kb_hq_t *q, kb_hev_t *ev, bool run)
{
    kb_cw_ev_t *w = (kb_cw_ev_t *)ev;
    kbx_host_t *host = ev->owner;
    kb_host_t *h = host->h;
    int32_t status;
    (void)q;

    if (!run || atomic_load(&host->dead)) {
        status = KBX_ERR_SHUTDOWN;
    } else if (w->deadline_ms >= 0 && kb_host_now_ms() > w->deadline_ms) {
        status = KBX_ERR_TIMEOUT;
    } else {
        pthread_mutex_lock(&h->rec.mu);
        status = kb_rec_apply(h, w);
        if (status == KBX_OK)
            kb_kbx_listen_records(h, w->recs, w->n);
        pthread_mutex_unlock(&h->rec.mu);
        if (status != KBX_OK)
            kb_hlog(KB_HLOG_ERROR, "plugin %s: controller_write of %zu records failed: %s",
                    host->name, w->n, kbx_err_str(status));
    }
    /* Completion behind the deltas just queued. */
    if (!run || atomic_load(&host->dead) ||
        kb_host_post_done(host, w->done, w->arg, status) != KBX_OK) {
        if (run && !atomic_load(&host->dead))
            w->done(w->arg, status);
    }
    atomic_fetch_sub(&host->n_ops, 1);
    kb_hrec_free_array(w->recs, w->n);
    free(w);
}

static int32_t kb_kbx_controller_write(kbx_host_t *host, const kbx_record_t *const *records,
                                       uint32_t count, int64_t timeout_ms, kbx_done_fn done,
                                       void *arg)
{
    kb_cw_ev_t *w;

    if (!kb_host_from(host, "controller_write") || !done || !records || !count)
        return KBX_ERR_INVALID;
    for (uint32_t i = 0; i < count; i++) {
        if (!records[i] || records[i]->struct_size < offsetof(kbx_record_t, value_len) + 8 ||
            (!records[i]->key && records[i]->key_len) || records[i]->key_len > UINT32_MAX ||
            (records[i]->value && records[i]->value_len > UINT32_MAX))
            return KBX_ERR_INVALID;
    }
    w = calloc(1, sizeof(*w));
    if (!w)
        return KBX_ERR_NOMEM;
    w->recs = calloc(count, sizeof(*w->recs));
    if (!w->recs) {
        free(w);
        return KBX_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < count; i++) {
        const kbx_record_t *x = records[i];
        kb_hrec_t *y = &w->recs[i];
        y->type = x->record_type;
        y->key_len = (size_t)x->key_len;
        y->key = malloc(y->key_len ? y->key_len : 1);
        if (y->key && y->key_len)
            memcpy(y->key, x->key, y->key_len);
        if (x->value) {
            y->value_len = (size_t)x->value_len;
            y->value = malloc(y->value_len ? y->value_len : 1);
            if (y->value && y->value_len)
                memcpy(y->value, x->value, y->value_len);
        }
        w->n = i + 1;
        if (!y->key || (x->value && !y->value)) {
            kb_hrec_free_array(w->recs, w->n);
            free(w);
            return KBX_ERR_NOMEM;
        }
    }
    w->ev.fn = kb_cw_run;
    w->ev.owner = host;
    atomic_init(&w->ev.ready, true);
    w->deadline_ms = timeout_ms < 0 ? -1 : kb_host_now_ms() + timeout_ms;
    w->done = done;
    w->arg = arg;
    atomic_fetch_add(&host->n_ops, 1);
    kb_hq_push(&host->h->ev, &w->ev);
    return KBX_OK;
}

void kb_kbx_records_fill(kbx_api_t *t)
{
    t->controller_write = kb_kbx_controller_write;
}
