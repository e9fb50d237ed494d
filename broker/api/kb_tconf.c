/*
 * kb_tconf.c -- the topic configuration table and its rules (see kb_tconf.h).
 *
 * Key names, types, defaults, bounds and the broker synonyms are Apache Kafka 4.x facts
 * (LogConfig / ServerTopicConfigSynonyms); the descriptions are ours.
 */
#include "kb_tconf.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kp_compress.h"
#include "kp_errcode.h"

#define LMAX INT64_MAX
#define IMAX INT32_MAX
#define HOUR 3600000LL
#define MIN  60000LL

static const char *const kb_tconf_cleanup[] = {"compact", "delete", NULL};
static const char *const kb_tconf_compr[] = {"uncompressed", "zstd",     "lz4", "snappy",
                                             "gzip",         "producer", NULL};
static const char *const kb_tconf_tstype[] = {"CreateTime", "LogAppendTime", NULL};

#define S1(a)                                                                                      \
    {                                                                                              \
        {                                                                                          \
            a, 1                                                                                   \
        }                                                                                          \
    }
#define S2(a, b, m)                                                                                \
    {                                                                                              \
        {a, 1},                                                                                    \
        {                                                                                          \
            b, m                                                                                   \
        }                                                                                          \
    }

#define T_INT(nm, def, lo, hi, sy, fl, d)                                                          \
    {                                                                                              \
        .name = nm, .type = KB_TC_INT, .dflt = def, .min = lo, .max = hi, .syn = sy, .flags = fl,  \
        .doc = d                                                                                   \
    }
#define T_LONG(nm, def, lo, hi, sy, fl, d)                                                         \
    {                                                                                              \
        .name = nm, .type = KB_TC_LONG, .dflt = def, .min = lo, .max = hi, .syn = sy, .flags = fl, \
        .doc = d                                                                                   \
    }
#define T_BOOL(nm, def, sy, fl, d)                                                                 \
    {                                                                                              \
        .name = nm, .type = KB_TC_BOOLEAN, .dflt = def, .syn = sy, .flags = fl, .doc = d           \
    }
#define T_STR(nm, def, ch, sy, fl, d)                                                              \
    {                                                                                              \
        .name = nm, .type = KB_TC_STRING, .dflt = def, .choices = ch, .syn = sy, .flags = fl,      \
        .doc = d                                                                                   \
    }
#define T_LIST(nm, def, ch, sy, fl, d)                                                             \
    {                                                                                              \
        .name = nm, .type = KB_TC_LIST, .dflt = def, .choices = ch, .syn = sy, .flags = fl,        \
        .doc = d                                                                                   \
    }

#define NOSYN                                                                                      \
    {                                                                                              \
        {                                                                                          \
            NULL, 0                                                                                \
        }                                                                                          \
    }
#define NOFX KB_TCF_NOEFFECT

/* Sorted by name (DescribeConfigs lists them in this order). */
const kb_tconf_def_t kb_tconf_defs[] = {
    T_LIST("cleanup.policy", "delete", kb_tconf_cleanup, S1("log.cleanup.policy"), 0,
           "How old segments are discarded: delete (retention by time and size), compact (keep "
           "the latest record per key), or both."),
    T_STR("compression.type", "producer", kb_tconf_compr, S1("compression.type"), 0,
          "Codec of the stored batches: producer keeps what the producer sent; any other value "
          "makes the broker recompress batches that use a different codec."),
    T_INT("compression.gzip.level", "-1", -1, 9, S1("compression.gzip.level"), 0,
          "gzip level used when the broker compresses with gzip (-1: the codec's default)."),
    T_INT("compression.lz4.level", "9", 1, 17, S1("compression.lz4.level"), 0,
          "lz4 level used when the broker compresses with lz4."),
    T_INT("compression.zstd.level", "3", -131072, 22, S1("compression.zstd.level"), 0,
          "zstd level used when the broker compresses with zstd."),
    T_LONG("delete.retention.ms", "86400000", 0, LMAX, S1("log.cleaner.delete.retention.ms"), 0,
           "How long tombstones and transaction markers of a compacted topic are kept."),
    T_LONG("file.delete.delay.ms", "60000", 0, LMAX, S1("log.segment.delete.delay.ms"), NOFX,
           "Delay before a deleted segment file is removed (kbroker unlinks at once)."),
    T_LONG("flush.messages", "9223372036854775807", 1, LMAX, S1("log.flush.interval.messages"), 0,
           "fsync the log after this many messages."),
    T_LONG("flush.ms", "9223372036854775807", 0, LMAX, S1("log.flush.interval.ms"), 0,
           "fsync the log when its oldest unflushed message is this old."),
    T_LIST("follower.replication.throttled.replicas", "", NULL, NOSYN, NOFX,
           "Replicas throttled on the follower side (partition:broker,... or *)."),
    T_INT("index.interval.bytes", "4096", 0, IMAX, S1("log.index.interval.bytes"), 0,
          "Bytes appended between two offset index entries."),
    T_LIST("leader.replication.throttled.replicas", "", NULL, NOSYN, NOFX,
           "Replicas throttled on the leader side (partition:broker,... or *)."),
    T_LONG("local.retention.bytes", "-2", -2, LMAX, S1("log.local.retention.bytes"), NOFX,
           "Local retention by size with tiered storage (-2: retention.bytes)."),
    T_LONG("local.retention.ms", "-2", -2, LMAX, S1("log.local.retention.ms"), NOFX,
           "Local retention by time with tiered storage (-2: retention.ms)."),
    T_LONG("max.compaction.lag.ms", "9223372036854775807", 1, LMAX,
           S1("log.cleaner.max.compaction.lag.ms"), NOFX,
           "Longest time a record stays uncompacted."),
    T_INT("max.message.bytes", "1048588", 0, IMAX, S1("message.max.bytes"), 0,
          "Largest record batch the topic accepts."),
    T_LONG("message.timestamp.after.max.ms", "3600000", 0, LMAX,
           S1("log.message.timestamp.after.max.ms"), 0,
           "Largest amount a CreateTime timestamp may lie in the future."),
    T_LONG("message.timestamp.before.max.ms", "9223372036854775807", 0, LMAX,
           S1("log.message.timestamp.before.max.ms"), 0,
           "Largest amount a CreateTime timestamp may lie in the past."),
    T_STR("message.timestamp.type", "CreateTime", kb_tconf_tstype, S1("log.message.timestamp.type"),
          0, "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's time."),
    {.name = "min.cleanable.dirty.ratio",
     .type = KB_TC_DOUBLE,
     .dflt = "0.5",
     .dmin = 0,
     .dmax = 1,
     .syn = S1("log.cleaner.min.cleanable.ratio"),
     .doc = "Share of the log that must be uncompacted before the cleaner compacts it."},
    T_LONG("min.compaction.lag.ms", "0", 0, LMAX, S1("log.cleaner.min.compaction.lag.ms"), 0,
           "Shortest time a record stays uncompacted."),
    T_INT("min.insync.replicas", "1", 1, IMAX, S1("min.insync.replicas"), 0,
          "In-sync replicas needed for an acks=all write to succeed."),
    {.name = KB_TCONF_MIRROR_NAME,
     .type = KB_TC_STRING,
     .dflt = NULL,
     .syn = NOSYN,
     .flags = KB_TCF_HIDDEN,
     .doc = "Cluster mirror of the topic (KIP-1279); set by the mirror RPCs only."},
    T_BOOL("mirror.support.unclean.leader.election", "false", NOSYN, 0,
           "Cluster mirroring (KIP-1279): the failback truncation waits for every assigned "
           "replica, not only the ISR (read by the mirror plugin)."),
    T_BOOL("preallocate", "false", S1("log.preallocate"), NOFX,
           "Preallocate segment files (not done by kbroker)."),
    T_BOOL("remote.log.copy.disable", "false", NOSYN, NOFX,
           "Stop copying segments to tiered storage."),
    T_BOOL("remote.log.delete.on.disable", "false", NOSYN, NOFX,
           "Delete tiered data when tiered storage is disabled."),
    T_BOOL("remote.storage.enable", "false", NOSYN, 0,
           "Tiered storage for the topic (not available in kbroker: only false is accepted)."),
    T_LONG("retention.bytes", "-1", LLONG_MIN, LMAX, S1("log.retention.bytes"), 0,
           "Largest size of a partition before old segments are deleted; -1 no limit."),
    {.name = "retention.ms",
     .type = KB_TC_LONG,
     .dflt = "604800000",
     .min = -1,
     .max = LMAX,
     .syn = {{"log.retention.ms", 1},
             {"log.retention.minutes", MIN},
             {"log.retention.hours", HOUR}},
     .doc = "How long data is kept; -1 forever."},
    T_INT("segment.bytes", "1073741824", 14, IMAX, S1("log.segment.bytes"), 0,
          "Largest size of one segment file."),
    T_INT("segment.index.bytes", "10485760", 4, IMAX, S1("log.index.size.max.bytes"), 0,
          "Largest size of an offset or time index file."),
    T_LONG("segment.jitter.ms", "0", 0, LMAX,
           S2("log.roll.jitter.ms", "log.roll.jitter.hours", HOUR), NOFX,
           "Random jitter subtracted from segment.ms (not applied by kbroker)."),
    T_LONG("segment.ms", "604800000", 1, LMAX, S2("log.roll.ms", "log.roll.hours", HOUR), 0,
           "Roll a new segment after this time even if the active one is not full."),
    T_BOOL("unclean.leader.election.enable", "false", S1("unclean.leader.election.enable"), 0,
           "Allow an out-of-sync replica to become leader (possible data loss)."),
};
const size_t kb_tconf_defs_cnt = sizeof(kb_tconf_defs) / sizeof(kb_tconf_defs[0]);

const kb_tconf_def_t *kb_tconf_def(const char *name)
{
    for (size_t i = 0; i < kb_tconf_defs_cnt; i++)
        if (!strcmp(kb_tconf_defs[i].name, name))
            return &kb_tconf_defs[i];
    return NULL;
}

const char *kb_kv_get(const kb_kv_t *kv, size_t cnt, const char *key)
{
    for (size_t i = 0; i < cnt; i++)
        if (!strcmp(kv[i].key, key))
            return kv[i].value;
    return NULL;
}

/* ---- value parsing ------------------------------------------------------------------------ */

/* Copy @p s trimmed into @p buf. */
static void kb_tconf_trim(const char *s, char *buf, size_t size)
{
    size_t n;
    while (*s && isspace((unsigned char)*s))
        s++;
    n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    if (n >= size)
        n = size - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
}

static int kb_tconf_parse_i64(const char *s, int64_t *out)
{
    char t[64], *end;
    long long v;
    kb_tconf_trim(s, t, sizeof(t));
    if (!t[0])
        return -1;
    errno = 0;
    v = strtoll(t, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int kb_tconf_parse_double(const char *s, double *out)
{
    char t[64], *end;
    double v;
    kb_tconf_trim(s, t, sizeof(t));
    if (!t[0])
        return -1;
    errno = 0;
    v = strtod(t, &end);
    if (errno || *end || isnan(v))
        return -1;
    *out = v;
    return 0;
}

static int kb_tconf_parse_bool(const char *s, bool *out)
{
    char t[16];
    kb_tconf_trim(s, t, sizeof(t));
    if (!strcasecmp(t, "true"))
        *out = true;
    else if (!strcasecmp(t, "false"))
        *out = false;
    else
        return -1;
    return 0;
}

static bool kb_tconf_in(const char *const *choices, const char *s)
{
    for (; *choices; choices++)
        if (!strcmp(*choices, s))
            return true;
    return false;
}

/* Each comma-separated (trimmed) item of @p value in @p choices. */
static bool kb_tconf_list_ok(const char *const *choices, const char *value, char *bad,
                             size_t bad_size)
{
    const char *p = value;
    if (!choices)
        return true;
    while (*p) {
        char item[128];
        size_t n = strcspn(p, ",");
        char raw[128];
        if (n >= sizeof(raw))
            n = sizeof(raw) - 1;
        memcpy(raw, p, n);
        raw[n] = '\0';
        kb_tconf_trim(raw, item, sizeof(item));
        if (item[0] && !kb_tconf_in(choices, item)) {
            snprintf(bad, bad_size, "%s", item);
            return false;
        }
        p += strcspn(p, ",");
        if (*p == ',')
            p++;
    }
    return true;
}

static void kb_tconf_choices_str(const char *const *ch, char *buf, size_t size)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; ch && ch[i] && off + 1 < size; i++) {
        int r = snprintf(buf + off, size - off, "%s%s", i ? ", " : "", ch[i]);
        if (r < 0)
            break;
        off += (size_t)r;
    }
}

/* Topic-name rules (Kafka's Topic.validate). */
static bool kb_tconf_name_chars_ok(const char *s, size_t n)
{
    if (n == 0 || n > 249)
        return false;
    if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!isalnum((unsigned char)c) && c != '.' && c != '_' && c != '-')
            return false;
    }
    return true;
}

static bool kb_tconf_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

bool kb_tconf_mirror_name_valid(const char *name, bool value)
{
    static const char *const sfx[] = {".paused", ".stopped", ".removed"};
    size_t n = strlen(name);
    for (size_t i = 0; i < 3; i++) {
        if (kb_tconf_ends_with(name, sfx[i])) {
            if (!value)
                return false;
            n -= strlen(sfx[i]);
            break;
        }
    }
    return kb_tconf_name_chars_ok(name, n);
}

void kb_tconf_mirror_value(const char *value, char *mirror, size_t size, bool *stopped)
{
    static const char *const sfx[] = {".paused", ".stopped", ".removed"};
    size_t n = strlen(value);
    bool st = false;
    for (size_t i = 0; i < 3; i++) {
        if (kb_tconf_ends_with(value, sfx[i])) {
            n -= strlen(sfx[i]);
            st = i > 0;
            break;
        }
    }
    if (mirror && size)
        snprintf(mirror, size, "%.*s", (int)(n < size ? n : size - 1), value);
    if (stopped)
        *stopped = st;
}

static int16_t kb_tconf_check_value(const kb_tconf_def_t *d, const char *value, char *msg,
                                    size_t msg_size)
{
    int64_t iv;
    double dv;
    bool bv;
    char t[256], bad[128], ch[256];
    switch (d->type) {
    case KB_TC_INT:
    case KB_TC_SHORT:
    case KB_TC_LONG:
        if (kb_tconf_parse_i64(value, &iv)) {
            snprintf(msg, msg_size,
                     "Invalid value %s for configuration %s: Not a number of type %s", value,
                     d->name, d->type == KB_TC_LONG ? "LONG" : "INT");
            return KP_ERR_INVALID_CONFIG;
        }
        if (!strcmp(d->name, "compression.gzip.level") && iv == 0) {
            snprintf(msg, msg_size,
                     "Invalid value %s for configuration %s: Value must be 1..9 or -1", value,
                     d->name);
            return KP_ERR_INVALID_CONFIG;
        }
        if (iv < d->min || iv > d->max) {
            if (d->max == LMAX || d->max == IMAX)
                snprintf(msg, msg_size,
                         "Invalid value %s for configuration %s: Value must be at least %" PRId64,
                         value, d->name, d->min);
            else
                snprintf(msg, msg_size,
                         "Invalid value %s for configuration %s: Value must be between %" PRId64
                         " and %" PRId64,
                         value, d->name, d->min, d->max);
            return KP_ERR_INVALID_CONFIG;
        }
        return 0;
    case KB_TC_DOUBLE:
        if (kb_tconf_parse_double(value, &dv) || dv < d->dmin || dv > d->dmax) {
            snprintf(msg, msg_size,
                     "Invalid value %s for configuration %s: Value must be between "
                     "%g and %g",
                     value, d->name, d->dmin, d->dmax);
            return KP_ERR_INVALID_CONFIG;
        }
        return 0;
    case KB_TC_BOOLEAN:
        if (kb_tconf_parse_bool(value, &bv)) {
            snprintf(msg, msg_size,
                     "Invalid value %s for configuration %s: Expected value to be either true or "
                     "false",
                     value, d->name);
            return KP_ERR_INVALID_CONFIG;
        }
        if (!strcmp(d->name, "remote.storage.enable") && bv) {
            snprintf(msg, msg_size,
                     "Tiered Storage functionality is disabled in the broker. "
                     "Topic cannot be configured with remote log storage.");
            return KP_ERR_INVALID_CONFIG;
        }
        return 0;
    case KB_TC_STRING:
        kb_tconf_trim(value, t, sizeof(t));
        if (!strcmp(d->name, KB_TCONF_MIRROR_NAME)) {
            if (!kb_tconf_mirror_name_valid(t, true)) {
                snprintf(msg, msg_size,
                         "Invalid value %s for configuration %s: not a valid "
                         "mirror name",
                         value, d->name);
                return KP_ERR_INVALID_CONFIG;
            }
            return 0;
        }
        if (d->choices && !kb_tconf_in(d->choices, t)) {
            kb_tconf_choices_str(d->choices, ch, sizeof(ch));
            snprintf(msg, msg_size,
                     "Invalid value %s for configuration %s: String must be one of: %s", value,
                     d->name, ch);
            return KP_ERR_INVALID_CONFIG;
        }
        return 0;
    case KB_TC_LIST:
        if (!kb_tconf_list_ok(d->choices, value, bad, sizeof(bad))) {
            kb_tconf_choices_str(d->choices, ch, sizeof(ch));
            snprintf(msg, msg_size,
                     "Invalid value %s for configuration %s: String must be one of: "
                     "%s",
                     bad, d->name, ch);
            return KP_ERR_INVALID_CONFIG;
        }
        return 0;
    }
    return 0;
}

int16_t kb_tconf_validate(const char *key, const char *value, bool internal, char *msg,
                          size_t msg_size)
{
    const kb_tconf_def_t *d = kb_tconf_def(key);
    msg[0] = '\0';
    if (!d) {
        snprintf(msg, msg_size, "Unknown topic config name: %s", key);
        return KP_ERR_INVALID_CONFIG;
    }
    if ((d->flags & KB_TCF_HIDDEN) && !internal) {
        snprintf(msg, msg_size, "%s can only be set by cluster mirroring (the mirror RPCs)", key);
        return KP_ERR_INVALID_CONFIG;
    }
    if (!value) {
        snprintf(msg, msg_size, "Null value not supported for topic configs: %s", key);
        return KP_ERR_INVALID_CONFIG;
    }
    return kb_tconf_check_value(d, value, msg, msg_size);
}

/* ---- effective values ---------------------------------------------------------------------- */

/* @p text (a broker value) times @p mult into @p out; non-numeric text is copied. Negative
 * values (-1 = forever) are not multiplied. */
static void kb_tconf_scale(const char *text, int64_t mult, char *out, size_t size)
{
    int64_t v;
    if (mult != 1 && !kb_tconf_parse_i64(text, &v)) {
        if (v > 0 && v > INT64_MAX / mult)
            v = INT64_MAX;
        else if (v > 0)
            v *= mult;
        snprintf(out, size, "%" PRId64, v);
        return;
    }
    kb_tconf_trim(text, out, size);
}

bool kb_tconf_broker_static(const kb_config_t *cfg, const kb_conf_def_t *d, char *buf, size_t size)
{
    const char *base = (const char *)cfg + d->off;
    buf[0] = '\0';
    switch (d->type) {
    case KB_CT_BOOL:
        snprintf(buf, size, "%s", *(const bool *)(const void *)base ? "true" : "false");
        return true;
    case KB_CT_INT:
        snprintf(buf, size, "%" PRId32, *(const int32_t *)(const void *)base);
        return true;
    case KB_CT_LONG:
        snprintf(buf, size, "%" PRId64, *(const int64_t *)(const void *)base);
        return true;
    case KB_CT_DOUBLE:
        snprintf(buf, size, "%g", *(const double *)(const void *)base);
        return true;
    case KB_CT_PASSWORD:
        return false;
    case KB_CT_STRING:
    case KB_CT_LIST: {
        const char *s = *(char *const *)(const void *)base;
        if (!s)
            return false;
        snprintf(buf, size, "%s", s);
        return true;
    }
    }
    return false;
}

static void kb_tconf_syn_add(kb_tconf_synval_t *syn, size_t *n, const char *name, const char *value,
                             bool is_null, int source)
{
    if (!syn || *n >= KB_TCONF_SYN_ROOM)
        return;
    syn[*n].name = name;
    snprintf(syn[*n].value, sizeof(syn[*n].value), "%s", value ? value : "");
    syn[*n].is_null = is_null;
    syn[*n].source = source;
    (*n)++;
}

void kb_tconf_effective(const kb_tconf_def_t *d, const kb_kv_t *ov, size_t ov_cnt,
                        const kb_config_t *cfg, const kb_dyncfg_t *dyn, kb_tconf_val_t *out,
                        kb_tconf_synval_t *syn, size_t *syn_cnt)
{
    const char *v = ov ? kb_kv_get(ov, ov_cnt, d->name) : NULL;
    size_t n = 0;
    bool have = false;
    char raw[1024], scaled[1024];

    memset(out, 0, sizeof(*out));
    if (v) {
        kb_tconf_trim(v, out->value, sizeof(out->value));
        out->source = KB_CS_TOPIC_CONFIG;
        have = true;
        kb_tconf_syn_add(syn, &n, d->name, out->value, false, KB_CS_TOPIC_CONFIG);
    }
    /* Broker synonyms: per synonym, every source that sets it, then its default. */
    for (size_t i = 0; i < KB_TCONF_MAX_SYN && d->syn[i].name; i++) {
        const kb_tconf_syn_t *s = &d->syn[i];
        const kb_conf_def_t *bd = kb_config_def(s->name);
        static const int srcs[] = {KB_CS_DYNAMIC_BROKER_CONFIG, KB_CS_DYNAMIC_DEFAULT_BROKER_CONFIG,
                                   KB_CS_STATIC_BROKER_CONFIG};
        for (size_t k = 0; k < 3; k++) {
            const char *dv = NULL;
            if (srcs[k] == KB_CS_DYNAMIC_BROKER_CONFIG && dyn)
                dv = kb_kv_get(dyn->node, dyn->node_cnt, s->name);
            else if (srcs[k] == KB_CS_DYNAMIC_DEFAULT_BROKER_CONFIG && dyn)
                dv = kb_kv_get(dyn->dflt, dyn->dflt_cnt, s->name);
            else if (srcs[k] == KB_CS_STATIC_BROKER_CONFIG && bd && cfg &&
                     kb_config_is_set(cfg, s->name) &&
                     kb_tconf_broker_static(cfg, bd, raw, sizeof(raw)))
                dv = raw;
            if (!dv)
                continue;
            kb_tconf_syn_add(syn, &n, s->name, dv, false, srcs[k]);
            if (!have) {
                kb_tconf_scale(dv, s->mult, out->value, sizeof(out->value));
                out->source = srcs[k];
                have = true;
            }
        }
        if (bd && bd->dflt) {
            kb_tconf_syn_add(syn, &n, s->name, bd->dflt, false, KB_CS_DEFAULT_CONFIG);
            if (!have) {
                kb_tconf_scale(bd->dflt, s->mult, scaled, sizeof(scaled));
                snprintf(out->value, sizeof(out->value), "%s", scaled);
                out->source = KB_CS_DEFAULT_CONFIG;
                have = true;
            }
        }
    }
    if (!have) {
        if (d->dflt)
            snprintf(out->value, sizeof(out->value), "%s", d->dflt);
        else
            out->is_null = true;
        out->source = KB_CS_DEFAULT_CONFIG;
    }
    if (syn_cnt)
        *syn_cnt = n;
}

int16_t kb_tconf_validate_set(const kb_kv_t *kv, size_t cnt, const kb_config_t *cfg,
                              const kb_dyncfg_t *dyn, char *msg, size_t msg_size)
{
    kb_tconf_val_t lo, hi;
    int64_t a, b;
    kb_tconf_effective(kb_tconf_def("min.compaction.lag.ms"), kv, cnt, cfg, dyn, &lo, NULL, NULL);
    kb_tconf_effective(kb_tconf_def("max.compaction.lag.ms"), kv, cnt, cfg, dyn, &hi, NULL, NULL);
    if (!kb_tconf_parse_i64(lo.value, &a) && !kb_tconf_parse_i64(hi.value, &b) && a > b) {
        snprintf(msg, msg_size,
                 "conflict topic config setting min.compaction.lag.ms (%s) > "
                 "max.compaction.lag.ms (%s)",
                 lo.value, hi.value);
        return KP_ERR_INVALID_CONFIG;
    }
    return 0;
}

static int kb_tconf_codec(const char *s)
{
    if (!strcmp(s, "gzip"))
        return KP_CODEC_GZIP;
    if (!strcmp(s, "snappy"))
        return KP_CODEC_SNAPPY;
    if (!strcmp(s, "lz4"))
        return KP_CODEC_LZ4;
    if (!strcmp(s, "zstd"))
        return KP_CODEC_ZSTD;
    if (!strcmp(s, "uncompressed"))
        return KP_CODEC_NONE;
    return -1;
}

void kb_tconf_build(const kb_kv_t *ov, size_t ov_cnt, const kb_config_t *cfg,
                    const kb_dyncfg_t *dyn, kb_log_config_t *lc, kb_tconf_extra_t *ex)
{
    kb_tconf_val_t v;
    char err[256];
    int64_t iv;
    bool bv;

    kb_log_config_defaults(lc);
    memset(ex, 0, sizeof(*ex));
    ex->min_insync_replicas = 1;
    ex->compression = -1;
    ex->compression_level = KP_COMPRESS_LEVEL_DEFAULT;
    for (size_t i = 0; i < kb_tconf_defs_cnt; i++) {
        const kb_tconf_def_t *d = &kb_tconf_defs[i];
        kb_tconf_effective(d, ov, ov_cnt, cfg, dyn, &v, NULL, NULL);
        if (v.is_null)
            continue;
        /* Keys the storage engine does not know return -1: they are ours. */
        (void)kb_log_config_set(lc, d->name, v.value, err, sizeof(err));
        if (!strcmp(d->name, "min.insync.replicas") && !kb_tconf_parse_i64(v.value, &iv))
            ex->min_insync_replicas = (int32_t)iv;
        else if (!strcmp(d->name, "compression.type"))
            ex->compression = kb_tconf_codec(v.value);
        else if (!strcmp(d->name, "unclean.leader.election.enable") &&
                 !kb_tconf_parse_bool(v.value, &bv))
            ex->unclean_leader_election = bv;
        else if (!strcmp(d->name, "remote.storage.enable") && !kb_tconf_parse_bool(v.value, &bv))
            ex->remote_storage = bv;
    }
    {
        const char *mn = ov ? kb_kv_get(ov, ov_cnt, KB_TCONF_MIRROR_NAME) : NULL;
        ex->mirror_stopped = false;
        if (mn)
            kb_tconf_mirror_value(mn, NULL, 0, &ex->mirror_stopped);
    }
    /* The level of the chosen codec (kp_compress's default when the topic's is the default). */
    if (ex->compression == KP_CODEC_GZIP || ex->compression == KP_CODEC_LZ4 ||
        ex->compression == KP_CODEC_ZSTD) {
        const char *key = ex->compression == KP_CODEC_GZIP  ? "compression.gzip.level"
                          : ex->compression == KP_CODEC_LZ4 ? "compression.lz4.level"
                                                            : "compression.zstd.level";
        kb_tconf_effective(kb_tconf_def(key), ov, ov_cnt, cfg, dyn, &v, NULL, NULL);
        if (v.source != KB_CS_DEFAULT_CONFIG && !kb_tconf_parse_i64(v.value, &iv) && iv != -1)
            ex->compression_level = (int)iv;
    }
}

/* ---- broker configs ---------------------------------------------------------------------- */

int kb_tconf_broker_type(const kb_conf_def_t *d)
{
    switch (d->type) {
    case KB_CT_BOOL:
        return KB_TC_BOOLEAN;
    case KB_CT_INT:
        return KB_TC_INT;
    case KB_CT_LONG:
        return KB_TC_LONG;
    case KB_CT_DOUBLE:
        return KB_TC_DOUBLE;
    case KB_CT_STRING:
        return KB_TC_STRING;
    case KB_CT_LIST:
        return KB_TC_LIST;
    case KB_CT_PASSWORD:
        return KB_TC_PASSWORD;
    }
    return 0;
}

int16_t kb_tconf_broker_validate(const char *key, const char *value, char *msg, size_t msg_size)
{
    const kb_conf_def_t *d = kb_config_def(key);
    int64_t iv;
    double dv;
    bool bv;
    char t[512], bad[128];
    msg[0] = '\0';
    if (!d) {
        if (!strncmp(key, "mirror.", 7))
            return 0; /* the plugin's keys: kept as text, validated by the plugin */
        snprintf(msg, msg_size, "Unknown broker config: %s", key);
        return KP_ERR_INVALID_CONFIG;
    }
    if (!(d->flags & KB_CF_DYNAMIC)) {
        snprintf(msg, msg_size, "Cannot update these configs dynamically: Set(%s)", key);
        return KP_ERR_INVALID_REQUEST;
    }
    if (!value)
        return 0;
    switch (d->type) {
    case KB_CT_BOOL:
        if (kb_tconf_parse_bool(value, &bv))
            goto bad;
        return 0;
    case KB_CT_INT:
    case KB_CT_LONG:
        if (kb_tconf_parse_i64(value, &iv) || iv < d->min || iv > d->max ||
            (d->type == KB_CT_INT && (iv < INT32_MIN || iv > INT32_MAX)))
            goto bad;
        return 0;
    case KB_CT_DOUBLE:
        if (kb_tconf_parse_double(value, &dv) || dv < d->dmin || dv > d->dmax)
            goto bad;
        return 0;
    case KB_CT_STRING:
        kb_tconf_trim(value, t, sizeof(t));
        if (d->choices && !kb_tconf_in(d->choices, t))
            goto bad;
        return 0;
    case KB_CT_LIST:
        if (!kb_tconf_list_ok(d->choices, value, bad, sizeof(bad)))
            goto bad;
        return 0;
    case KB_CT_PASSWORD:
        return 0;
    }
    return 0;
bad:
    snprintf(msg, msg_size, "Invalid value %s for configuration %s", value, key);
    return KP_ERR_INVALID_CONFIG;
}
