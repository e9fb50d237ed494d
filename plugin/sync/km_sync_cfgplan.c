/*
 * km_sync_cfgplan.c - the diff of the topic-config sync (see the header).
 */
#include "sync/km_sync_cfgplan.h"

#include <string.h>

/*
 * Keys that must stay local (docs/design.md M82). The KIP's default list (kip-1279-facts
 * §8.3: replication throttles, min.insync.replicas, unclean election, timestamp policy), the
 * mirror's own topic keys (mirror.*: mirror.name is the association itself), and what depends
 * on the destination cluster's own capabilities: message.format.version (bounded by the
 * destination's inter-broker protocol; copied batches keep their own format) and tiered
 * storage (remote.storage.enable fails on a cluster without a remote log manager and would
 * block every other key of the topic; local.retention.* and remote.log.* only mean something
 * with it).
 */
static const char *const km_sync_cfg_builtin[] = {
    "mirror.*",
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "message.timestamp.type",
    "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "message.format.version",
    "remote.storage.enable",
    "local.retention.ms",
    "local.retention.bytes",
    "remote.log.*",
};

const char *const *km_sync_cfg_builtin_excludes(size_t *n)
{
    *n = sizeof(km_sync_cfg_builtin) / sizeof(km_sync_cfg_builtin[0]);
    return km_sync_cfg_builtin;
}

/* pattern: an exact key, or a prefix when it ends in '*' ("*" alone matches every key) */
static bool km_sync_cfg_match(kp_str_t name, const char *pattern)
{
    size_t pl = strlen(pattern);

    if (name.len < 0)
        return false;
    if (pl > 0 && pattern[pl - 1] == '*')
        return (size_t)name.len >= pl - 1 && memcmp(name.ptr, pattern, pl - 1) == 0;
    return (size_t)name.len == pl && memcmp(name.ptr, pattern, pl) == 0;
}

bool km_sync_cfg_excluded(kp_str_t name, const km_strlist_t *extra)
{
    size_t n;
    const char *const *b = km_sync_cfg_builtin_excludes(&n);

    for (size_t i = 0; i < n; i++)
        if (km_sync_cfg_match(name, b[i]))
            return true;
    if (extra != NULL)
        for (size_t i = 0; i < extra->n; i++)
            if (extra->v[i] != NULL && extra->v[i][0] != '\0' &&
                km_sync_cfg_match(name, extra->v[i]))
                return true;
    return false;
}

static bool km_sync_cfg_streq(kp_str_t a, kp_str_t b)
{
    return a.len >= 0 && a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, (size_t)a.len) == 0);
}

/* the first entry named name among the first n of v, or NULL */
static const km_cfgentry_t *km_sync_cfg_find(const km_cfgentry_t *v, size_t n, kp_str_t name)
{
    for (size_t i = 0; i < n; i++)
        if (km_sync_cfg_streq(v[i].name, name))
            return &v[i];
    return NULL;
}

static bool km_sync_cfg_in(const kp_str_t *v, size_t n, kp_str_t name)
{
    for (size_t i = 0; i < n; i++)
        if (km_sync_cfg_streq(v[i], name))
            return true;
    return false;
}

/* the source entry that the sync copies for this name, or NULL */
static const km_cfgentry_t *km_sync_cfg_synced(const km_cfgentry_t *src, size_t nsrc, kp_str_t name,
                                               const km_strlist_t *extra)
{
    const km_cfgentry_t *e = km_sync_cfg_find(src, nsrc, name);

    if (e == NULL || e->source != KM_CFG_SOURCE_TOPIC || e->sensitive || e->value.len < 0 ||
        e->name.len <= 0 || km_sync_cfg_excluded(e->name, extra))
        return NULL;
    return e;
}

km_err_t km_sync_cfgplan_make(const km_cfgentry_t *src, size_t nsrc, const km_cfgentry_t *dst,
                              size_t ndst, const kp_str_t *remembered, size_t nremembered,
                              const km_strlist_t *extra, kp_arena_t *ar, km_cfgplan_t *out)
{
    size_t nrem_unique = 0;

    memset(out, 0, sizeof(*out));
    /* +1: the arena refuses zero-sized requests on some paths; never read beyond n */
    out->set_names = kp_arena_calloc(ar, nsrc + 1, sizeof(*out->set_names));
    out->set_values = kp_arena_calloc(ar, nsrc + 1, sizeof(*out->set_values));
    out->keep = kp_arena_calloc(ar, nsrc + 1, sizeof(*out->keep));
    out->unknown = kp_arena_calloc(ar, nsrc + 1, sizeof(*out->unknown));
    out->del = kp_arena_calloc(ar, nremembered + 1, sizeof(*out->del));
    if (out->set_names == NULL || out->set_values == NULL || out->keep == NULL ||
        out->unknown == NULL || out->del == NULL)
        return KM_ERR_NOMEM;

    for (size_t i = 0; i < nsrc; i++) {
        const km_cfgentry_t *s = &src[i], *d;

        if (km_sync_cfg_find(src, i, s->name) != NULL)
            continue; /* a duplicate: the first one counts */
        if (km_sync_cfg_synced(src, nsrc, s->name, extra) != s)
            continue;
        d = km_sync_cfg_find(dst, ndst, s->name);
        if (d == NULL) {
            out->unknown[out->nunknown++] = s->name;
            continue;
        }
        if (d->source != KM_CFG_SOURCE_TOPIC || !km_sync_cfg_streq(d->value, s->value)) {
            out->set_names[out->nset] = s->name;
            out->set_values[out->nset++] = s->value;
        }
        out->keep[out->nkeep++] = s->name;
    }

    for (size_t i = 0; i < nremembered; i++) {
        kp_str_t r = remembered[i];
        const km_cfgentry_t *d;

        if (r.len <= 0 || km_sync_cfg_in(remembered, i, r))
            continue; /* empty or a duplicate */
        nrem_unique++;
        if (km_sync_cfg_in(out->keep, out->nkeep, r))
            continue; /* still synced */
        if (km_sync_cfg_excluded(r, extra))
            continue; /* now local: forget it, leave the value */
        d = km_sync_cfg_find(dst, ndst, r);
        if (d != NULL && d->source == KM_CFG_SOURCE_TOPIC)
            out->del[out->ndel++] = r;
    }

    /* keep holds distinct names; it equals the remembered set iff same size and all in it */
    out->keep_changed = out->nkeep != nrem_unique;
    for (size_t i = 0; i < out->nkeep && !out->keep_changed; i++)
        if (!km_sync_cfg_in(remembered, nremembered, out->keep[i]))
            out->keep_changed = true;
    return KM_OK;
}
