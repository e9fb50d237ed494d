#define KM_LOG_COMPONENT "kmirror.catalog"
#include "catalog/km_catalog.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "coord/km_coord.h"
#include "core/km_config.h"
#include "core/km_plugin_types.h"
#include "kp_reader.h"
#include "kp_writer.h"
#include "util/km_log.h"
#include "util/km_mem.h"

#define KM_CATALOG_MAGIC 0x4b4d4354u /* "KMCT" */

/* ---- helpers ------------------------------------------------------------------------------- */

const char *km_catalog_desired_name(km_desired_t d)
{
    switch (d) {
    case KM_DESIRED_RUNNING:
        return "RUNNING";
    case KM_DESIRED_PAUSED:
        return "PAUSED";
    case KM_DESIRED_STOPPED:
        return "STOPPED";
    default:
        return "NONE";
    }
}

static bool km_catalog_ends_with(const char *s, size_t n, const char *sfx)
{
    size_t m = strlen(sfx);

    return n >= m && memcmp(s + n - m, sfx, m) == 0;
}

bool km_catalog_parse_mirror_name(const char *value, char *base, size_t base_size,
                                  km_desired_t *desired)
{
    static const struct {
        const char *sfx;
        km_desired_t d;
    } sfx[] = {
        {".paused", KM_DESIRED_PAUSED},
        {".stopped", KM_DESIRED_STOPPED},
        {".removed", KM_DESIRED_STOPPED},
    };
    size_t n;

    if (value == NULL || base_size == 0)
        return false;
    n = strlen(value);
    *desired = KM_DESIRED_RUNNING;
    for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        if (km_catalog_ends_with(value, n, sfx[i].sfx)) {
            n -= strlen(sfx[i].sfx);
            *desired = sfx[i].d;
            break;
        }
    }
    if (n == 0 || n >= base_size)
        return false;
    memcpy(base, value, n);
    base[n] = '\0';
    return true;
}

bool km_catalog_mirror_name_valid(const char *name, size_t len, char *errstr, size_t errstr_size)
{
    static const char *const sfx[] = {".paused", ".stopped", ".removed"};

    if (name == NULL || len == 0) {
        snprintf(errstr, errstr_size, "Mirror name is empty");
        return false;
    }
    if (len > 249) {
        snprintf(errstr, errstr_size, "Mirror name is longer than 249 characters");
        return false;
    }
    if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.')) {
        snprintf(errstr, errstr_size, "Mirror name cannot be \".\" or \"..\"");
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-')) {
            snprintf(errstr, errstr_size,
                     "Mirror name may contain only ASCII alphanumerics, '.', '_' and '-' "
                     "(character %zu is not one)",
                     i);
            return false;
        }
    }
    for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        if (km_catalog_ends_with(name, len, sfx[i])) {
            snprintf(errstr, errstr_size,
                     "Mirror name cannot end with \"%s\" (reserved for topic states)", sfx[i]);
            return false;
        }
    }
    return true;
}

/* ---- definition value format ----------------------------------------------------------------- */

static kp_str_t km_catalog_kstr(const char *s)
{
    kp_str_t k = {s, s != NULL ? (int32_t)strlen(s) : -1};
    return k;
}

km_err_t km_catalog_def_encode(km_plugin_t *cm, const uint8_t mirror_id[16],
                               int64_t creation_time_ms, const char *source_cluster_id,
                               const char *const *keys, const char *const *values, size_t nconfig,
                               uint8_t **out, size_t *out_len)
{
    kp_writer_t wr;
    kp_uuid_t id;
    uint8_t *buf;

    *out = NULL;
    *out_len = 0;
    if (nconfig > INT32_MAX)
        return KM_ERR_INVALID;
    if (source_cluster_id == NULL)
        source_cluster_id = "";
    if (strlen(source_cluster_id) > INT16_MAX)
        return KM_ERR_INVALID;
    for (size_t i = 0; i < nconfig; i++) {
        if (keys[i] == NULL || strlen(keys[i]) > INT16_MAX ||
            (values[i] != NULL && strlen(values[i]) > INT16_MAX))
            return KM_ERR_INVALID;
    }
    memcpy(id.b, mirror_id, 16);
    kp_writer_init(&wr);
    kp_write_int16(&wr, KM_CATALOG_DEF_FORMAT_VERSION); /* format_version */
    kp_write_int16(&wr, 1);                             /* min_reader_version */
    kp_write_uuid(&wr, &id);
    kp_write_int64(&wr, creation_time_ms);
    kp_write_string(&wr, km_catalog_kstr(source_cluster_id), 0);
    kp_write_int32(&wr, (int32_t)nconfig);
    for (size_t i = 0; i < nconfig; i++) {
        kp_write_string(&wr, km_catalog_kstr(keys[i]), 0);
        kp_write_string(&wr, km_catalog_kstr(values[i]), 0);
    }
    if (wr.err != 0) {
        kp_writer_free(&wr);
        return KM_ERR_NOMEM;
    }
    /* The writer's buffer comes from the codec's allocator: copy into plugin memory. */
    buf = km_malloc(cm, wr.len > 0 ? wr.len : 1);
    if (buf == NULL) {
        kp_writer_free(&wr);
        return KM_ERR_NOMEM;
    }
    memcpy(buf, wr.buf, wr.len);
    *out = buf;
    *out_len = wr.len;
    kp_writer_free(&wr);
    return KM_OK;
}

void km_catalog_def_free(km_plugin_t *cm, km_mirror_def_t *def)
{
    if (def == NULL)
        return;
    for (size_t i = 0; i < def->nconfig; i++) {
        km_free(cm, def->keys[i]);
        km_free(cm, def->values[i]);
    }
    km_free(cm, def->keys);
    km_free(cm, def->values);
    km_free(cm, def->name);
    km_free(cm, def->source_cluster_id);
    if (def->conf_ok)
        km_config_free(cm, &km_config_mirror_scope, &def->conf);
    km_free(cm, def);
}

/* A string of the definition: non-null unless nullable; no NUL bytes (they would cut it). */
static km_err_t km_catalog_read_str(km_plugin_t *cm, kp_reader_t *rd, bool nullable, char **out)
{
    kp_str_t s = kp_read_string(rd, 0, nullable);

    *out = NULL;
    if (rd->err != 0)
        return KM_ERR_INVALID;
    if (s.len < 0)
        return nullable ? KM_OK : KM_ERR_INVALID;
    if (memchr(s.ptr, '\0', (size_t)s.len) != NULL)
        return KM_ERR_INVALID;
    *out = km_strndup(cm, s.ptr, (size_t)s.len);
    return *out != NULL ? KM_OK : KM_ERR_NOMEM;
}

km_err_t km_catalog_def_decode(km_plugin_t *cm, const char *name, const uint8_t *buf, size_t len,
                               km_mirror_def_t **out, char *errstr, size_t errstr_size)
{
    km_mirror_def_t *def;
    kp_reader_t rd;
    kp_uuid_t id;
    int16_t fmt, min_reader;
    int32_t n;
    km_err_t err;

    *out = NULL;
    if (errstr_size > 0)
        errstr[0] = '\0';
    kp_reader_init(&rd, buf, len);
    fmt = kp_read_int16(&rd);
    min_reader = kp_read_int16(&rd);
    if (rd.err != 0 || fmt < 1 || min_reader < 1) {
        snprintf(errstr, errstr_size, "no valid format version");
        return KM_ERR_INVALID;
    }
    if (min_reader > KM_CATALOG_DEF_FORMAT_VERSION) {
        snprintf(errstr, errstr_size,
                 "written in format %d for readers of format %d and later; this plugin reads %d",
                 (int)fmt, (int)min_reader, KM_CATALOG_DEF_FORMAT_VERSION);
        return KM_ERR_INVALID;
    }
    def = km_calloc(cm, 1, sizeof(*def));
    if (def == NULL)
        return KM_ERR_NOMEM;
    def->name = km_strdup(cm, name);
    if (def->name == NULL) {
        err = KM_ERR_NOMEM;
        goto fail;
    }
    kp_read_uuid(&rd, &id);
    memcpy(def->mirror_id, id.b, 16);
    def->creation_time_ms = kp_read_int64(&rd);
    err = km_catalog_read_str(cm, &rd, false, &def->source_cluster_id);
    if (err != KM_OK)
        goto fail;
    n = kp_read_int32(&rd);
    /* Each entry takes at least 4 bytes (two int16 lengths): a count beyond that is a lie. */
    if (rd.err != 0 || n < 0 || (size_t)n > kp_reader_remaining(&rd) / 4) {
        err = KM_ERR_INVALID;
        goto fail;
    }
    if (n > 0) {
        def->keys = km_calloc(cm, (size_t)n, sizeof(*def->keys));
        def->values = km_calloc(cm, (size_t)n, sizeof(*def->values));
        if (def->keys == NULL || def->values == NULL) {
            err = KM_ERR_NOMEM;
            goto fail;
        }
    }
    for (int32_t i = 0; i < n; i++) {
        def->nconfig = (size_t)i + 1; /* so that fail frees what was read */
        err = km_catalog_read_str(cm, &rd, false, &def->keys[i]);
        if (err == KM_OK)
            err = km_catalog_read_str(cm, &rd, true, &def->values[i]);
        if (err != KM_OK)
            goto fail;
    }
    /* Bytes after what format 1 defines belong to a newer writer whose min_reader_version
     * says we may ignore them. */
    *out = def;
    return KM_OK;

fail:
    if (err == KM_ERR_INVALID && (errstr_size == 0 || errstr[0] == '\0'))
        snprintf(errstr, errstr_size, "truncated or malformed value (%s)",
                 rd.errstr != NULL ? rd.errstr : "bad string or count");
    km_catalog_def_free(cm, def);
    return err;
}

/* ---- the catalog -------------------------------------------------------------------------------
 */

void km_catalog_init(km_plugin_t *cm, km_catalog_t *cat)
{
    memset(cat, 0, sizeof(*cat));
    atomic_init(&cat->nsubs, 0);
    cat->magic = KM_CATALOG_MAGIC;
    cat->cm = cm;
    cat->metadata_offset = -1;
}

static void km_catalog_topic_free(km_plugin_t *cm, km_cat_topic_t *t)
{
    km_free(cm, t->name);
    km_free(cm, t->mirror);
    km_free(cm, t->parts);
    km_free(cm, t);
}

void km_catalog_destroy(km_catalog_t *cat)
{
    km_plugin_t *cm = cat->cm;

    if (cat->magic != KM_CATALOG_MAGIC)
        return;
    for (size_t i = 0; i < cat->nmirrors; i++)
        km_catalog_def_free(cm, cat->mirrors[i]);
    km_free(cm, cat->mirrors);
    for (size_t b = 0; b < cat->nbuckets; b++) {
        km_cat_topic_t *t = cat->buckets[b], *next;
        for (; t != NULL; t = next) {
            next = t->next;
            km_catalog_topic_free(cm, t);
        }
    }
    km_free(cm, cat->buckets);
    km_free(cm, cat->brokers);
    memset(cat, 0, sizeof(*cat));
}

km_err_t km_catalog_subscribe(km_catalog_t *cat, const km_catalog_ops_t *ops, void *arg)
{
    size_t n = atomic_load_explicit(&cat->nsubs, memory_order_relaxed);

    if (n == KM_CATALOG_MAX_SUBS)
        return KM_ERR_NOMEM;
    cat->subs[n].ops = ops;
    cat->subs[n].arg = arg;
    /* Release: a loop that sees the new count sees the slot filled. */
    atomic_store_explicit(&cat->nsubs, n + 1, memory_order_release);
    return KM_OK;
}

bool km_catalog_ready(const km_catalog_t *cat)
{
    return cat->ready;
}

int64_t km_catalog_offset(const km_catalog_t *cat)
{
    return cat->metadata_offset;
}

/* ---- mirrors ------------------------------------------------------------------------------- */

static size_t km_catalog_mirror_pos(const km_catalog_t *cat, const char *name, bool *found)
{
    size_t lo = 0, hi = cat->nmirrors;

    *found = false;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(cat->mirrors[mid]->name, name);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

size_t km_catalog_mirror_count(const km_catalog_t *cat)
{
    return cat->nmirrors;
}

const km_mirror_def_t *km_catalog_mirror_at(const km_catalog_t *cat, size_t i)
{
    return i < cat->nmirrors ? cat->mirrors[i] : NULL;
}

const km_mirror_def_t *km_catalog_mirror_find(const km_catalog_t *cat, const char *name)
{
    bool found;
    size_t i = km_catalog_mirror_pos(cat, name, &found);

    return found ? cat->mirrors[i] : NULL;
}

static void km_catalog_notify_mirror(km_catalog_t *cat, const char *name,
                                     const km_mirror_def_t *def)
{
    for (size_t i = 0, n = atomic_load_explicit(&cat->nsubs, memory_order_acquire); i < n; i++)
        if (cat->subs[i].ops->on_mirror != NULL)
            cat->subs[i].ops->on_mirror(cat->subs[i].arg, name, def);
}

static void km_catalog_mirror_remove_at(km_catalog_t *cat, size_t i)
{
    km_plugin_t *cm = cat->cm;
    km_mirror_def_t *def = cat->mirrors[i];

    memmove(&cat->mirrors[i], &cat->mirrors[i + 1],
            (cat->nmirrors - i - 1) * sizeof(cat->mirrors[0]));
    cat->nmirrors--;
    km_log_info(cm, "mirror %s removed", def->name);
    km_catalog_notify_mirror(cat, def->name, NULL);
    km_catalog_def_free(cm, def);
}

/* Fill def->conf from its stored keys; a key that no longer validates is logged (by name
 * only: the config engine never echoes a sensitive value) and the definition kept. */
static void km_catalog_def_configure(km_plugin_t *cm, km_mirror_def_t *def)
{
    char err[256];

    if (km_config_init(cm, &km_config_mirror_scope, &def->conf, err, sizeof(err)) != KM_OK) {
        km_log_error(cm, "mirror %s: cannot set up its configuration: %s", def->name, err);
        return;
    }
    def->conf_ok = true;
    for (size_t i = 0; i < def->nconfig; i++) {
        if (km_config_set(cm, &km_config_mirror_scope, &def->conf, def->keys[i], def->values[i],
                          err, sizeof(err)) != KM_OK) {
            km_log_warn(cm, "mirror %s: stored config ignored: %s", def->name, err);
        }
    }
}

static km_err_t km_catalog_mirror_put(km_catalog_t *cat, const char *name, const uint8_t *value,
                                      size_t len)
{
    km_plugin_t *cm = cat->cm;
    km_mirror_def_t *def;
    char err[160];
    size_t i;
    bool found;
    km_err_t rc;

    rc = km_catalog_def_decode(cm, name, value, len, &def, err, sizeof(err));
    if (rc == KM_ERR_INVALID) {
        km_log_error(cm, "mirror %s: definition record (%zu bytes) ignored: %s", name, len, err);
        return KM_OK;
    }
    if (rc != KM_OK)
        return rc;
    km_catalog_def_configure(cm, def);
    def->seen = true;
    i = km_catalog_mirror_pos(cat, name, &found);
    if (found) {
        km_catalog_def_free(cm, cat->mirrors[i]);
        cat->mirrors[i] = def;
    } else {
        if (cat->nmirrors == cat->mirrors_cap) {
            size_t ncap = cat->mirrors_cap ? cat->mirrors_cap * 2 : 8;
            km_mirror_def_t **nv = km_realloc(cm, cat->mirrors, ncap * sizeof(*nv));
            if (nv == NULL) {
                km_catalog_def_free(cm, def);
                return KM_ERR_NOMEM;
            }
            cat->mirrors = nv;
            cat->mirrors_cap = ncap;
        }
        memmove(&cat->mirrors[i + 1], &cat->mirrors[i],
                (cat->nmirrors - i) * sizeof(cat->mirrors[0]));
        cat->mirrors[i] = def;
        cat->nmirrors++;
    }
    km_log_info(cm, "mirror %s %s (source cluster %s, %zu config keys)", name,
                found ? "updated" : "defined",
                def->source_cluster_id[0] != '\0' ? def->source_cluster_id : "(unknown)",
                def->nconfig);
    km_catalog_notify_mirror(cat, name, def);
    return KM_OK;
}

/* ---- topics -------------------------------------------------------------------------------- */

static uint64_t km_catalog_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;

    for (; *s != '\0'; s++) {
        h ^= (uint8_t)*s;
        h *= 1099511628211ull;
    }
    return h;
}

static km_cat_topic_t *km_catalog_topic_get(const km_catalog_t *cat, const char *name)
{
    km_cat_topic_t *t;

    if (cat->nbuckets == 0)
        return NULL;
    for (t = cat->buckets[km_catalog_hash(name) & (cat->nbuckets - 1)]; t != NULL; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

const km_cat_topic_t *km_catalog_topic_find(const km_catalog_t *cat, const char *name)
{
    return km_catalog_topic_get(cat, name);
}

void km_catalog_topic_foreach(const km_catalog_t *cat,
                              void (*fn)(void *arg, const km_cat_topic_t *topic), void *arg)
{
    for (size_t b = 0; b < cat->nbuckets; b++)
        for (const km_cat_topic_t *t = cat->buckets[b]; t != NULL; t = t->next)
            fn(arg, t);
}

size_t km_catalog_mirror_topic_count(const km_catalog_t *cat, const char *mirror)
{
    size_t n = 0;

    for (size_t b = 0; b < cat->nbuckets; b++)
        for (const km_cat_topic_t *t = cat->buckets[b]; t != NULL; t = t->next)
            if (t->mirror != NULL && strcmp(t->mirror, mirror) == 0)
                n++;
    return n;
}

static km_err_t km_catalog_rehash(km_catalog_t *cat)
{
    size_t nb = cat->nbuckets ? cat->nbuckets * 2 : 64;
    km_cat_topic_t **nbk = km_calloc(cat->cm, nb, sizeof(*nbk));

    if (nbk == NULL)
        return KM_ERR_NOMEM;
    for (size_t b = 0; b < cat->nbuckets; b++) {
        km_cat_topic_t *t = cat->buckets[b], *next;
        for (; t != NULL; t = next) {
            size_t i = km_catalog_hash(t->name) & (nb - 1);
            next = t->next;
            t->next = nbk[i];
            nbk[i] = t;
        }
    }
    km_free(cat->cm, cat->buckets);
    cat->buckets = nbk;
    cat->nbuckets = nb;
    return KM_OK;
}

static km_cat_topic_t *km_catalog_topic_add(km_catalog_t *cat, const char *name)
{
    km_cat_topic_t *t;
    size_t i;

    if (cat->ntopics >= cat->nbuckets && km_catalog_rehash(cat) != KM_OK)
        return NULL;
    t = km_calloc(cat->cm, 1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->name = km_strdup(cat->cm, name);
    if (t->name == NULL) {
        km_free(cat->cm, t);
        return NULL;
    }
    i = km_catalog_hash(name) & (cat->nbuckets - 1);
    t->next = cat->buckets[i];
    cat->buckets[i] = t;
    cat->ntopics++;
    return t;
}

static void km_catalog_notify_topic(km_catalog_t *cat, const km_cat_topic_t *t,
                                    const char *old_mirror, km_desired_t old_desired)
{
    for (size_t i = 0, n = atomic_load_explicit(&cat->nsubs, memory_order_acquire); i < n; i++)
        if (cat->subs[i].ops->on_topic != NULL)
            cat->subs[i].ops->on_topic(cat->subs[i].arg, t, old_mirror, old_desired);
}

static void km_catalog_notify_part(km_catalog_t *cat, const km_cat_topic_t *t, int32_t p,
                                   const km_cat_part_t *old)
{
    for (size_t i = 0, n = atomic_load_explicit(&cat->nsubs, memory_order_acquire); i < n; i++)
        if (cat->subs[i].ops->on_partition != NULL)
            cat->subs[i].ops->on_partition(cat->subs[i].arg, t, p, old);
}

static void km_catalog_topic_remove(km_catalog_t *cat, km_cat_topic_t *t)
{
    km_cat_topic_t **pp = &cat->buckets[km_catalog_hash(t->name) & (cat->nbuckets - 1)];
    char *old_mirror = t->mirror;
    km_desired_t old_desired = t->desired;

    /* Tell subscribers first, while the topic is still whole: its local replicas are gone and
     * so is its association. */
    for (int32_t p = 0; p < t->nparts; p++) {
        km_cat_part_t old = t->parts[p];
        if (old.role == 0)
            continue;
        memset(&t->parts[p], 0, sizeof(t->parts[p]));
        km_catalog_notify_part(cat, t, p, &old);
    }
    if (old_mirror != NULL) {
        t->mirror = NULL;
        t->desired = KM_DESIRED_NONE;
        km_catalog_notify_topic(cat, t, old_mirror, old_desired);
    }
    for (; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    }
    cat->ntopics--;
    km_free(cat->cm, old_mirror);
    km_catalog_topic_free(cat->cm, t);
}

static km_err_t km_catalog_parts_grow(km_catalog_t *cat, km_cat_topic_t *t, int32_t n)
{
    km_cat_part_t *np;

    if (n <= t->nparts)
        return KM_OK;
    np = km_realloc(cat->cm, t->parts, (size_t)n * sizeof(*np));
    if (np == NULL)
        return KM_ERR_NOMEM;
    memset(&np[t->nparts], 0, (size_t)(n - t->nparts) * sizeof(*np));
    t->parts = np;
    t->nparts = n;
    return KM_OK;
}

static km_err_t km_catalog_apply_topic(km_catalog_t *cat, const kbx_topic_change_t *tc)
{
    km_cat_topic_t *t;

    if (tc->name == NULL)
        return KM_OK;
    t = km_catalog_topic_get(cat, tc->name);
    if (tc->flags & KBX_TOPIC_DELETED) {
        if (t != NULL)
            km_catalog_topic_remove(cat, t);
        return KM_OK;
    }
    if (t == NULL && (t = km_catalog_topic_add(cat, tc->name)) == NULL)
        return KM_ERR_NOMEM;
    t->id = tc->topic_id;
    t->seen = true;
    if (tc->partition_count >= 0 && tc->partition_count <= 1000000) {
        int32_t old_count = t->partition_count;
        t->partition_count = tc->partition_count;
        if (km_catalog_parts_grow(cat, t, tc->partition_count) != KM_OK)
            return KM_ERR_NOMEM;
        /* Partitions added (CreatePartitions) whose local replica the leadership listener
         * reported first: subscribers ignored them then (beyond the partition count); tell
         * them again now that they count. */
        for (int32_t p = old_count > 0 ? old_count : 0; p < t->partition_count; p++) {
            km_cat_part_t same = t->parts[p];
            if (same.role != 0)
                km_catalog_notify_part(cat, t, p, &same);
        }
    }
    return KM_OK;
}

static km_err_t km_catalog_apply_mirror_name(km_catalog_t *cat, const kbx_config_change_t *c)
{
    km_plugin_t *cm = cat->cm;
    char base[256];
    km_desired_t desired = KM_DESIRED_NONE;
    char *old_mirror, *nm = NULL;
    km_desired_t old_desired;
    km_cat_topic_t *t;

    if (c->resource_name == NULL)
        return KM_OK;
    if (c->value != NULL && !km_catalog_parse_mirror_name(c->value, base, sizeof(base), &desired)) {
        km_log_warn(cm, "topic %s: mirror.name '%.64s' is not a mirror name; ignored",
                    c->resource_name, c->value);
        desired = KM_DESIRED_NONE;
    }
    t = km_catalog_topic_get(cat, c->resource_name);
    if (t == NULL) {
        if (desired == KM_DESIRED_NONE)
            return KM_OK;
        /* A config seen before its topic (another listener's order): keep it. */
        if ((t = km_catalog_topic_add(cat, c->resource_name)) == NULL)
            return KM_ERR_NOMEM;
    }
    t->seen = true;
    if (desired != KM_DESIRED_NONE && (nm = km_strdup(cm, base)) == NULL)
        return KM_ERR_NOMEM;
    if (desired == t->desired &&
        ((nm == NULL && t->mirror == NULL) ||
         (nm != NULL && t->mirror != NULL && strcmp(nm, t->mirror) == 0))) {
        km_free(cm, nm);
        return KM_OK;
    }
    old_mirror = t->mirror;
    old_desired = t->desired;
    t->mirror = nm;
    t->desired = desired;
    km_log_info(cm, "topic %s: mirror %s, desired %s (was %s %s)", t->name,
                nm != NULL ? nm : "(none)", km_catalog_desired_name(desired),
                old_mirror != NULL ? old_mirror : "(none)", km_catalog_desired_name(old_desired));
    km_catalog_notify_topic(cat, t, old_mirror, old_desired);
    km_free(cm, old_mirror);
    return KM_OK;
}

/* mirror.support.unclean.leader.election of a topic (absent or deleted: false). */
static km_err_t km_catalog_apply_ule(km_catalog_t *cat, const kbx_config_change_t *c)
{
    bool on = c->value != NULL && strcasecmp(c->value, "true") == 0;
    km_cat_topic_t *t;

    if (c->resource_name == NULL)
        return KM_OK;
    t = km_catalog_topic_get(cat, c->resource_name);
    if (t == NULL) {
        if (!on)
            return KM_OK;
        if ((t = km_catalog_topic_add(cat, c->resource_name)) == NULL)
            return KM_ERR_NOMEM;
    }
    t->seen = true;
    if (t->unclean_election == on)
        return KM_OK;
    t->unclean_election = on;
    km_log_info(cat->cm, "topic %s: " KM_CATALOG_ULE_KEY " %s (truncation waits cover %s)", t->name,
                on ? "true" : "false", on ? "every replica" : "the ISR");
    km_catalog_notify_topic(cat, t, t->mirror, t->desired);
    return KM_OK;
}

static void km_catalog_broker_set(km_catalog_t *cat, int32_t id, bool present)
{
    size_t i;

    for (i = 0; i < cat->nbrokers && cat->brokers[i] != id; i++)
        ;
    if (!present) {
        if (i < cat->nbrokers) {
            cat->brokers[i] = cat->brokers[cat->nbrokers - 1];
            cat->nbrokers--;
        }
        return;
    }
    if (i < cat->nbrokers)
        return;
    if (cat->nbrokers == cat->brokers_cap) {
        size_t ncap = cat->brokers_cap ? cat->brokers_cap * 2 : 8;
        int32_t *nv = km_realloc(cat->cm, cat->brokers, ncap * sizeof(*nv));
        if (nv == NULL) {
            km_log_error(cat->cm, "out of memory: broker %d not recorded", (int)id);
            return;
        }
        cat->brokers = nv;
        cat->brokers_cap = ncap;
    }
    cat->brokers[cat->nbrokers++] = id;
}

const int32_t *km_catalog_brokers(const km_catalog_t *cat, size_t *n)
{
    *n = cat->nbrokers;
    return cat->brokers;
}

/* Config resource type of a topic (Kafka's numbering). */
#define KM_CATALOG_RESOURCE_TOPIC 2

km_err_t km_catalog_apply_delta(km_catalog_t *cat, const kbx_metadata_delta_t *delta)
{
    km_plugin_t *cm = cat->cm;
    bool snapshot = (delta->flags & KBX_DELTA_SNAPSHOT) != 0;
    km_err_t err = KM_OK, e;

    if (snapshot) {
        for (size_t i = 0; i < cat->nmirrors; i++)
            cat->mirrors[i]->seen = false;
        for (size_t b = 0; b < cat->nbuckets; b++)
            for (km_cat_topic_t *t = cat->buckets[b]; t != NULL; t = t->next)
                t->seen = false;
        cat->nbrokers = 0;
    }
    for (uint32_t i = 0; i < delta->topic_count; i++) {
        if (delta->topics[i] != NULL &&
            (e = km_catalog_apply_topic(cat, delta->topics[i])) != KM_OK)
            err = e;
    }
    for (uint32_t i = 0; i < delta->config_count; i++) {
        const kbx_config_change_t *c = delta->configs[i];
        if (c == NULL || c->resource_type != KM_CATALOG_RESOURCE_TOPIC || c->key == NULL)
            continue;
        if (strcmp(c->key, KM_CATALOG_ULE_KEY) == 0)
            e = km_catalog_apply_ule(cat, c);
        else if (strcmp(c->key, KM_CATALOG_MIRROR_NAME_KEY) == 0)
            e = km_catalog_apply_mirror_name(cat, c);
        else
            continue;
        if (e != KM_OK)
            err = e;
    }
    for (uint32_t i = 0; i < delta->broker_count; i++) {
        const kbx_broker_change_t *b = delta->brokers[i];
        if (b != NULL)
            km_catalog_broker_set(cat, b->broker_id, (b->flags & KBX_BROKER_REGISTERED) != 0);
    }
    for (uint32_t i = 0; i < delta->record_count; i++) {
        const kbx_record_t *r = delta->records[i];
        char name[256];
        bool found;
        size_t at;

        if (r == NULL || r->record_type != KM_CATALOG_RECORD_MIRROR)
            continue;
        if (r->key == NULL || r->key_len == 0 || r->key_len >= sizeof(name) ||
            memchr(r->key, '\0', r->key_len) != NULL) {
            km_log_error(cm, "mirror definition record with an invalid key (%llu bytes) ignored",
                         (unsigned long long)r->key_len);
            continue;
        }
        memcpy(name, r->key, r->key_len);
        name[r->key_len] = '\0';
        if (r->value == NULL) {
            at = km_catalog_mirror_pos(cat, name, &found);
            if (found)
                km_catalog_mirror_remove_at(cat, at);
            continue;
        }
        if ((e = km_catalog_mirror_put(cat, name, r->value, r->value_len)) != KM_OK)
            err = e;
    }
    if (snapshot) {
        /* What the new image no longer has is gone. */
        for (size_t i = cat->nmirrors; i-- > 0;)
            if (!cat->mirrors[i]->seen)
                km_catalog_mirror_remove_at(cat, i);
        for (size_t b = 0; b < cat->nbuckets; b++) {
            km_cat_topic_t *t = cat->buckets[b], *next;
            for (; t != NULL; t = next) {
                next = t->next;
                /* Topics only the leadership listener told us about are kept. */
                if (!t->seen && t->partition_count > 0)
                    km_catalog_topic_remove(cat, t);
            }
        }
        cat->ready = true;
    }
    cat->metadata_offset = delta->metadata_offset;
    if (err != KM_OK)
        km_log_error(cm, "metadata %s at offset %lld applied partly: %s",
                     snapshot ? "snapshot" : "delta", (long long)delta->metadata_offset,
                     km_err_str(err));
    return err;
}

km_err_t km_catalog_apply_leadership(km_catalog_t *cat,
                                     const kbx_leadership_change_t *const *changes, uint32_t count)
{
    km_err_t err = KM_OK;

    for (uint32_t i = 0; i < count; i++) {
        const kbx_leadership_change_t *c = changes[i];
        km_cat_topic_t *t;
        km_cat_part_t old, *p;

        if (c == NULL || c->topic_name == NULL || c->partition < 0 || c->partition > 1000000)
            continue;
        t = km_catalog_topic_get(cat, c->topic_name);
        if (t == NULL) {
            if (c->role == KBX_ROLE_REMOVED)
                continue;
            if ((t = km_catalog_topic_add(cat, c->topic_name)) == NULL) {
                err = KM_ERR_NOMEM;
                continue;
            }
            t->id = c->topic_id;
        }
        if (km_catalog_parts_grow(cat, t, c->partition + 1) != KM_OK) {
            err = KM_ERR_NOMEM;
            continue;
        }
        p = &t->parts[c->partition];
        old = *p;
        p->role = c->role == KBX_ROLE_REMOVED ? 0 : c->role;
        p->leader_id = c->leader_id;
        p->leader_epoch = c->leader_epoch;
        p->partition_epoch = c->partition_epoch;
        if (old.role != p->role || old.leader_epoch != p->leader_epoch ||
            old.leader_id != p->leader_id)
            km_catalog_notify_part(cat, t, c->partition, &old);
    }
    if (err != KM_OK)
        km_log_error(cat->cm, "leadership changes applied partly: %s", km_err_str(err));
    return err;
}

/* ---- host-callback side: deep copies posted to the loop ------------------------------------ */

typedef struct km_cat_md_copy {
    km_catalog_t *cat;
    kbx_metadata_delta_t delta;
} km_cat_md_copy_t;

typedef struct km_cat_lead_copy {
    km_catalog_t *cat;
    const kbx_leadership_change_t **changes;
    uint32_t count;
} km_cat_lead_copy_t;

/* One allocation per copy: the struct, then the pointer arrays, the structs and the strings,
 * laid out by a size pass and a fill pass over the same walk. */
typedef struct km_cat_lay {
    uint8_t *base;
    size_t off;
} km_cat_lay_t;

static void *km_cat_lay_take(km_cat_lay_t *l, size_t n)
{
    void *p;

    l->off = (l->off + 7u) & ~(size_t)7u;
    p = l->base != NULL ? l->base + l->off : NULL;
    l->off += n;
    return p;
}

static const char *km_cat_lay_str(km_cat_lay_t *l, const char *s)
{
    size_t n;
    char *p;

    if (s == NULL)
        return NULL;
    n = strlen(s) + 1;
    p = km_cat_lay_take(l, n);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

static const uint8_t *km_cat_lay_bytes(km_cat_lay_t *l, const uint8_t *b, uint64_t n)
{
    uint8_t *p;

    if (b == NULL)
        return NULL;
    p = km_cat_lay_take(l, (size_t)n + 1);
    if (p != NULL && n > 0)
        memcpy(p, b, (size_t)n);
    return p;
}

static bool km_cat_keep_config(const kbx_config_change_t *c)
{
    return c != NULL && c->resource_type == KM_CATALOG_RESOURCE_TOPIC && c->key != NULL &&
           (strcmp(c->key, KM_CATALOG_MIRROR_NAME_KEY) == 0 ||
            strcmp(c->key, KM_CATALOG_ULE_KEY) == 0);
}

static bool km_cat_keep_record(const kbx_record_t *r)
{
    return r != NULL && r->record_type == KM_CATALOG_RECORD_MIRROR && r->key_len < 4096 &&
           r->value_len < ((uint64_t)1 << 30);
}

static km_cat_md_copy_t *km_cat_md_layout(km_cat_lay_t *l, const kbx_metadata_delta_t *d)
{
    km_cat_md_copy_t *cp = km_cat_lay_take(l, sizeof(*cp));
    uint32_t nc = 0, nr = 0;
    const kbx_topic_change_t **tv;
    const kbx_config_change_t **cv;
    const kbx_broker_change_t **bv;
    const kbx_record_t **rv;

    for (uint32_t i = 0; i < d->config_count; i++)
        nc += km_cat_keep_config(d->configs[i]);
    for (uint32_t i = 0; i < d->record_count; i++)
        nr += km_cat_keep_record(d->records[i]);
    tv = km_cat_lay_take(l, (size_t)d->topic_count * sizeof(*tv));
    cv = km_cat_lay_take(l, (size_t)nc * sizeof(*cv));
    bv = km_cat_lay_take(l, (size_t)d->broker_count * sizeof(*bv));
    rv = km_cat_lay_take(l, (size_t)nr * sizeof(*rv));
    if (cp != NULL) {
        memset(cp, 0, sizeof(*cp));
        cp->delta.struct_size = sizeof(cp->delta);
        cp->delta.flags = d->flags;
        cp->delta.metadata_offset = d->metadata_offset;
        cp->delta.topics = tv;
        cp->delta.configs = cv;
        cp->delta.brokers = bv;
        cp->delta.records = rv;
        cp->delta.topic_count = d->topic_count;
        cp->delta.config_count = nc;
        cp->delta.broker_count = d->broker_count;
        cp->delta.record_count = nr;
    }
    for (uint32_t i = 0; i < d->topic_count; i++) {
        const kbx_topic_change_t *s = d->topics[i];
        kbx_topic_change_t *t = km_cat_lay_take(l, sizeof(*t));
        const char *name = s != NULL ? km_cat_lay_str(l, s->name) : NULL;
        if (t != NULL) {
            memset(t, 0, sizeof(*t));
            if (s != NULL) {
                t->struct_size = sizeof(*t);
                t->flags = s->flags;
                t->topic_id = s->topic_id;
                t->partition_count = s->partition_count;
            }
            t->name = name;
            tv[i] = t;
        }
    }
    nc = 0;
    for (uint32_t i = 0; i < d->config_count; i++) {
        const kbx_config_change_t *s = d->configs[i];
        kbx_config_change_t *c;
        const char *rn, *k, *v;
        if (!km_cat_keep_config(s))
            continue;
        c = km_cat_lay_take(l, sizeof(*c));
        rn = km_cat_lay_str(l, s->resource_name);
        k = km_cat_lay_str(l, s->key);
        v = km_cat_lay_str(l, s->value);
        if (c != NULL) {
            memset(c, 0, sizeof(*c));
            c->struct_size = sizeof(*c);
            c->resource_type = s->resource_type;
            c->resource_name = rn;
            c->key = k;
            c->value = v;
            cv[nc] = c;
        }
        nc++;
    }
    for (uint32_t i = 0; i < d->broker_count; i++) {
        const kbx_broker_change_t *s = d->brokers[i];
        kbx_broker_change_t *b = km_cat_lay_take(l, sizeof(*b));
        if (b != NULL) {
            memset(b, 0, sizeof(*b));
            b->struct_size = sizeof(*b);
            if (s != NULL) {
                b->broker_id = s->broker_id;
                b->flags = s->flags;
            } else {
                b->broker_id = -1;
            }
            bv[i] = b;
        }
    }
    nr = 0;
    for (uint32_t i = 0; i < d->record_count; i++) {
        const kbx_record_t *s = d->records[i];
        kbx_record_t *r;
        const uint8_t *k, *v;
        if (!km_cat_keep_record(s))
            continue;
        r = km_cat_lay_take(l, sizeof(*r));
        k = km_cat_lay_bytes(l, s->key, s->key_len);
        v = km_cat_lay_bytes(l, s->value, s->value_len);
        if (r != NULL) {
            memset(r, 0, sizeof(*r));
            r->struct_size = sizeof(*r);
            r->record_type = s->record_type;
            r->key = k;
            r->key_len = s->key != NULL ? s->key_len : 0;
            r->value = v;
            r->value_len = s->value != NULL ? s->value_len : 0;
            rv[nr] = r;
        }
        nr++;
    }
    return cp;
}

static void km_catalog_md_run(km_plugin_t *cm, void *arg)
{
    km_cat_md_copy_t *cp = arg;

    km_catalog_apply_delta(cp->cat, &cp->delta);
    km_free(cm, cp);
}

static void km_catalog_free_arg(km_plugin_t *cm, void *arg)
{
    km_free(cm, arg);
}

km_err_t km_catalog_enqueue_delta(km_catalog_t *cat, const kbx_metadata_delta_t *delta)
{
    km_plugin_t *cm = cat->cm;
    km_cat_lay_t l = {NULL, 0};
    km_cat_md_copy_t *cp;
    km_err_t err;

    km_cat_md_layout(&l, delta);
    l.base = km_malloc(cm, l.off);
    if (l.base == NULL) {
        km_log_error(cm, "out of memory copying a metadata delta at offset %lld: lost",
                     (long long)delta->metadata_offset);
        return KM_ERR_NOMEM;
    }
    l.off = 0;
    cp = km_cat_md_layout(&l, delta);
    cp->cat = cat;
    err = km_coord_post(&cm->coord, km_catalog_md_run, km_catalog_free_arg, cp);
    if (err == KM_ERR_NOMEM) {
        km_free(cm, cp);
        km_log_error(cm, "out of memory queueing a metadata delta at offset %lld: lost",
                     (long long)delta->metadata_offset);
    }
    return err;
}

static km_cat_lead_copy_t *
km_cat_lead_layout(km_cat_lay_t *l, const kbx_leadership_change_t *const *changes, uint32_t count)
{
    km_cat_lead_copy_t *cp = km_cat_lay_take(l, sizeof(*cp));
    const kbx_leadership_change_t **v = km_cat_lay_take(l, (size_t)count * sizeof(*v));

    if (cp != NULL) {
        cp->changes = v;
        cp->count = count;
    }
    for (uint32_t i = 0; i < count; i++) {
        const kbx_leadership_change_t *s = changes[i];
        kbx_leadership_change_t *c = km_cat_lay_take(l, sizeof(*c));
        const char *name = s != NULL ? km_cat_lay_str(l, s->topic_name) : NULL;
        if (c != NULL) {
            memset(c, 0, sizeof(*c));
            if (s != NULL) {
                c->struct_size = sizeof(*c);
                c->role = s->role;
                c->topic_id = s->topic_id;
                c->partition = s->partition;
                c->leader_id = s->leader_id;
                c->leader_epoch = s->leader_epoch;
                c->partition_epoch = s->partition_epoch;
            }
            c->topic_name = name;
            v[i] = c;
        }
    }
    return cp;
}

static void km_catalog_lead_run(km_plugin_t *cm, void *arg)
{
    km_cat_lead_copy_t *cp = arg;

    km_catalog_apply_leadership(cp->cat, cp->changes, cp->count);
    km_free(cm, cp);
}

km_err_t km_catalog_enqueue_leadership(km_catalog_t *cat,
                                       const kbx_leadership_change_t *const *changes,
                                       uint32_t count)
{
    km_plugin_t *cm = cat->cm;
    km_cat_lay_t l = {NULL, 0};
    km_cat_lead_copy_t *cp;
    km_err_t err;

    km_cat_lead_layout(&l, changes, count);
    l.base = km_malloc(cm, l.off);
    if (l.base == NULL) {
        km_log_error(cm, "out of memory copying %u leadership changes: lost", (unsigned)count);
        return KM_ERR_NOMEM;
    }
    l.off = 0;
    cp = km_cat_lead_layout(&l, changes, count);
    cp->cat = cat;
    err = km_coord_post(&cm->coord, km_catalog_lead_run, km_catalog_free_arg, cp);
    if (err == KM_ERR_NOMEM) {
        km_free(cm, cp);
        km_log_error(cm, "out of memory queueing %u leadership changes: lost", (unsigned)count);
    }
    return err;
}
