/*
 * kb_kbx_records.c -- controller_write: plugin records in the metadata log.
 *
 * Plugin records are metadata records of kbroker's own type, KbrokerPluginRecord (10000,
 * proto/schema/metadata/kbroker_plugin_record.kps): one batch per controller_write, committed by
 * the node that holds the metadata log (a single broker, or the controller), applied to every
 * broker's image (latest value per (record_type, key); a NULL value deletes the key; kept in the
 * image snapshots) and delivered to every metadata listener as kbx_metadata_delta_t.records,
 * the live keys in each new listener's snapshot (kb_kbx_listen.c). On the committing node the
 * listeners' deltas are queued during the commit, so the completion, queued after it, follows
 * them. A broker-only node's write goes to the controller (kb_kbx_ctrl.c).
 *
 * Before clusters the records lived in `<first log dir>/kbroker-plugin-records` (format below).
 * A node with the controller role moves such a file into the metadata log once at start (the
 * keys the image does not have yet) and renames it `.migrated`; a broker-only node leaves it
 * alone (its records are the controller's).
 *
 * Old file format (big-endian): "KBXREC01", uint32 count, then per record int32 type, uint32 key
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
#include "kp_errcode.h"

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

static uint32_t kb_rec_get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
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

/* ---- the old file ---------------------------------------------------------------------------- */

/* A plugin record of @p type (kb_mrec_t, KB_MREC_PLUGIN) borrowing @p key / @p value (NULL:
 * delete); never cleared by the caller (kb_mrec_clear would free the borrowed bytes). */
static void kb_rec_mrec(kb_mrec_t *m, int32_t type, const uint8_t *key, size_t key_len,
                        const uint8_t *value, size_t value_len)
{
    kb_mrec_init(m, KB_MREC_PLUGIN);
    m->plugin_type = type;
    m->pkey = (uint8_t *)key;
    m->pkey_len = key_len;
    m->has_pvalue = value != NULL;
    m->pvalue = (uint8_t *)value;
    m->pvalue_len = value ? value_len : 0;
}

int kb_hrecords_migrate(kb_host_t *h, char *errstr, size_t errstr_size)
{
    kb_hrecords_t *r = &h->rec;
    const kb_config_t *cfg = h->kb->cfg;
    bool controller = kb_config_has_role(cfg, "controller") || !kb_config_has_role(cfg, "broker");
    kb_mrec_t *have = NULL, *todo = NULL;
    size_t nhave = 0, ntodo = 0;
    char msg[256], to[4300];
    int rc = 0;

    if (!r->path || access(r->path, F_OK) != 0)
        goto out;
    if (!controller) {
        kb_hlog(KB_HLOG_WARN,
                "%s ignored: a broker-only node takes its plugin records from the "
                "controller's metadata log",
                r->path);
        goto out;
    }
    if (kb_meta_plugin_records(h->meta, &have, &nhave) != 0 ||
        !(todo = calloc(r->n + 1, sizeof(*todo)))) {
        snprintf(errstr, errstr_size, "out of memory");
        rc = -1;
        goto out;
    }
    for (size_t i = 0; i < r->n; i++) {
        bool there = false;
        for (size_t k = 0; k < nhave && !there; k++)
            there = have[k].plugin_type == r->v[i].type && have[k].pkey_len == r->v[i].key_len &&
                    !memcmp(have[k].pkey, r->v[i].key, r->v[i].key_len);
        if (!there)
            kb_rec_mrec(&todo[ntodo++], r->v[i].type, r->v[i].key, r->v[i].key_len, r->v[i].value,
                        r->v[i].value_len);
    }
    if (ntodo) {
        int16_t ec = kb_meta_commit_records(h->meta, todo, ntodo, msg, sizeof(msg));
        if (ec) {
            snprintf(errstr, errstr_size,
                     "cannot move the plugin records of %s into the metadata log (error %d: %s)",
                     r->path, (int)ec, msg);
            rc = -1;
            goto out;
        }
    }
    snprintf(to, sizeof(to), "%s.migrated", r->path);
    if (rename(r->path, to) != 0)
        kb_hlog(KB_HLOG_WARN, "cannot rename %s: %s (its records are in the metadata log)", r->path,
                strerror(errno));
    kb_hlog(KB_HLOG_INFO,
            "moved %zu plugin record(s) of %s into the metadata log; the file is now %s", ntodo,
            r->path, to);
out:
    free(todo); /* the records borrow r->v */
    for (size_t k = 0; k < nhave; k++)
        kb_mrec_clear(&have[k]);
    free(have);
    kb_hrec_free_array(r->v, r->n);
    r->v = NULL;
    r->n = r->cap = 0;
    return rc;
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

/* Commit @p w as one batch of KbrokerPluginRecords. A KBX status; *@p not_controller when this
 * node cannot write the metadata log (a broker-only node). */
static int32_t kb_cw_commit(kb_host_t *h, const kb_cw_ev_t *w, bool *not_controller)
{
    kb_mrec_t *v = calloc(w->n + 1, sizeof(*v));
    char msg[256];
    int16_t ec;

    *not_controller = false;
    if (!v)
        return KBX_ERR_NOMEM;
    for (size_t i = 0; i < w->n; i++)
        kb_rec_mrec(&v[i], w->recs[i].type, w->recs[i].key, w->recs[i].key_len, w->recs[i].value,
                    w->recs[i].value_len);
    ec = kb_meta_commit_records(h->meta, v, w->n, msg, sizeof(msg));
    free(v); /* borrowed bytes */
    if (ec == KP_ERR_NOT_CONTROLLER)
        *not_controller = true;
    if (ec && ec != KP_ERR_NOT_CONTROLLER)
        kb_hlog(KB_HLOG_ERROR, "controller_write of %zu records not committed (error %d: %s)", w->n,
                (int)ec, msg);
    return ec == 0 ? KBX_OK : KBX_ERR_IO;
}

static void kb_cw_run(kb_hq_t *q, kb_hev_t *ev, bool run)
{
    kb_cw_ev_t *w = (kb_cw_ev_t *)ev;
    kbx_host_t *host = ev->owner;
    kb_host_t *h = host->h;
    bool remote = false;
    int32_t status;
    (void)q;

    if (!run || atomic_load(&host->dead)) {
        status = KBX_ERR_SHUTDOWN;
    } else if (w->deadline_ms >= 0 && kb_host_now_ms() > w->deadline_ms) {
        status = KBX_ERR_TIMEOUT;
    } else {
        status = kb_cw_commit(h, w, &remote);
        if (remote) {
            /* A broker-only node: the controller commits (the waiter owns the completion,
             * the operation count and the records from now on). */
            status = kb_hctrl_write(host, w->recs, w->n, w->deadline_ms, w->done, w->arg);
            if (status == KBX_OK) {
                free(w);
                return;
            }
        }
        if (status != KBX_OK)
            kb_hlog(KB_HLOG_ERROR, "plugin %s: controller_write of %zu records failed: %s",
                    host->name, w->n, kbx_err_str(status));
    }
    /* Completion behind the deltas the commit queued. */
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
            (!records[i]->key && records[i]->key_len) || records[i]->key_len > KB_MREC_PLUGIN_MAX ||
            (records[i]->value && records[i]->value_len > KB_MREC_PLUGIN_MAX))
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
