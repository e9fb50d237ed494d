#include "kb_log_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kb_log_config_defaults(kb_log_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->segment_bytes = 1073741824;
    cfg->segment_ms = 604800000;
    cfg->segment_jitter_ms = 0;
    cfg->retention_ms = 604800000;
    cfg->retention_bytes = -1;
    cfg->cleanup_policy = KB_CLEANUP_DELETE;
    cfg->min_compaction_lag_ms = 0;
    cfg->max_compaction_lag_ms = INT64_MAX;
    cfg->delete_retention_ms = 86400000;
    cfg->max_message_bytes = 1048588;
    cfg->message_timestamp_type = KB_TS_CREATE_TIME;
    cfg->message_ts_before_max_ms = INT64_MAX;
    cfg->message_ts_after_max_ms = 3600000;
    cfg->flush_messages = INT64_MAX;
    cfg->flush_ms = INT64_MAX;
    cfg->index_interval_bytes = 4096;
    cfg->segment_index_bytes = 10485760;
    cfg->min_cleanable_dirty_ratio = 0.5;
    cfg->file_delete_delay_ms = 60000;
    cfg->producer_id_expiration_ms = 86400000;
    cfg->preallocate = 0;
}

void kb_cleaner_config_defaults(kb_cleaner_config_t *cc)
{
    memset(cc, 0, sizeof(*cc));
    cc->enable = 1;
    cc->threads = 1;
    cc->dedupe_buffer_size = 134217728;
    cc->io_buffer_size = 524288;
    cc->backoff_ms = 15000;
    cc->io_buffer_load_factor = 0.9;
    cc->io_max_bytes_per_second = INT64_MAX;
}

static int kb_log_config_i64(const char *v, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    long long x;
    errno = 0;
    x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < min || x > max)
        return -1;
    *out = x;
    return 0;
}

typedef struct kb_log_config_key_s {
    const char *name;
    size_t off;
    int kind; /* 0 int64, 1 int32, 2 bool */
    int64_t min;
    int64_t max;
} kb_log_config_key_t;

#define KB_CFG_OFF(f) offsetof(kb_log_config_t, f)
static const kb_log_config_key_t kb_log_config_keys[] = {
    {"segment.bytes", KB_CFG_OFF(segment_bytes), 0, 14, INT32_MAX},
    {"segment.ms", KB_CFG_OFF(segment_ms), 0, 1, INT64_MAX},
    {"segment.jitter.ms", KB_CFG_OFF(segment_jitter_ms), 0, 0, INT64_MAX},
    {"retention.ms", KB_CFG_OFF(retention_ms), 0, -1, INT64_MAX},
    {"retention.bytes", KB_CFG_OFF(retention_bytes), 0, -1, INT64_MAX},
    {"min.compaction.lag.ms", KB_CFG_OFF(min_compaction_lag_ms), 0, 0, INT64_MAX},
    {"max.compaction.lag.ms", KB_CFG_OFF(max_compaction_lag_ms), 0, 1, INT64_MAX},
    {"delete.retention.ms", KB_CFG_OFF(delete_retention_ms), 0, 0, INT64_MAX},
    {"max.message.bytes", KB_CFG_OFF(max_message_bytes), 1, 0, INT32_MAX},
    {"message.timestamp.before.max.ms", KB_CFG_OFF(message_ts_before_max_ms), 0, 0, INT64_MAX},
    {"message.timestamp.after.max.ms", KB_CFG_OFF(message_ts_after_max_ms), 0, 0, INT64_MAX},
    {"flush.messages", KB_CFG_OFF(flush_messages), 0, 1, INT64_MAX},
    {"flush.ms", KB_CFG_OFF(flush_ms), 0, 0, INT64_MAX},
    {"index.interval.bytes", KB_CFG_OFF(index_interval_bytes), 1, 0, INT32_MAX},
    {"segment.index.bytes", KB_CFG_OFF(segment_index_bytes), 1, 4, INT32_MAX},
    {"file.delete.delay.ms", KB_CFG_OFF(file_delete_delay_ms), 0, 0, INT64_MAX},
    {"producer.id.expiration.ms", KB_CFG_OFF(producer_id_expiration_ms), 0, 1, INT64_MAX},
    {"preallocate", KB_CFG_OFF(preallocate), 2, 0, 1},
};

int kb_log_config_set(kb_log_config_t *cfg, const char *key, const char *value, char *err,
                      size_t err_size)
{
    size_t i;
    int64_t v;
    if (!key || !value)
        return -1;
    if (!strcmp(key, "cleanup.policy")) {
        int pol = 0;
        const char *p = value;
        while (*p) {
            size_t n = strcspn(p, ",");
            const char *s = p;
            while (n && *s == ' ')
                s++, n--;
            while (n && s[n - 1] == ' ')
                n--;
            if (n == 6 && !strncmp(s, "delete", 6))
                pol |= KB_CLEANUP_DELETE;
            else if (n == 7 && !strncmp(s, "compact", 7))
                pol |= KB_CLEANUP_COMPACT;
            else if (n) {
                snprintf(err, err_size, "Invalid value %s for configuration cleanup.policy", value);
                return -2;
            }
            p += strcspn(p, ",");
            if (*p)
                p++;
        }
        cfg->cleanup_policy = pol;
        return 0;
    }
    if (!strcmp(key, "message.timestamp.type")) {
        if (!strcmp(value, "CreateTime"))
            cfg->message_timestamp_type = KB_TS_CREATE_TIME;
        else if (!strcmp(value, "LogAppendTime"))
            cfg->message_timestamp_type = KB_TS_LOG_APPEND_TIME;
        else {
            snprintf(err, err_size, "Invalid value %s for configuration message.timestamp.type",
                     value);
            return -2;
        }
        return 0;
    }
    if (!strcmp(key, "min.cleanable.dirty.ratio")) {
        char *end;
        double d = strtod(value, &end);
        if (end == value || *end || !(d >= 0.0 && d <= 1.0)) {
            snprintf(err, err_size, "Invalid value %s for configuration %s", value, key);
            return -2;
        }
        cfg->min_cleanable_dirty_ratio = d;
        return 0;
    }
    for (i = 0; i < sizeof(kb_log_config_keys) / sizeof(kb_log_config_keys[0]); i++) {
        const kb_log_config_key_t *k = &kb_log_config_keys[i];
        char *base = (char *)cfg;
        if (strcmp(key, k->name))
            continue;
        if (k->kind == 2) {
            if (!strcmp(value, "true"))
                v = 1;
            else if (!strcmp(value, "false"))
                v = 0;
            else
                goto bad;
            *(int *)(void *)(base + k->off) = (int)v;
            return 0;
        }
        if (kb_log_config_i64(value, k->min, k->max, &v))
            goto bad;
        if (k->kind == 1)
            *(int32_t *)(void *)(base + k->off) = (int32_t)v;
        else
            *(int64_t *)(void *)(base + k->off) = v;
        return 0;
    bad:
        snprintf(err, err_size, "Invalid value %s for configuration %s", value, key);
        return -2;
    }
    return -1;
}
