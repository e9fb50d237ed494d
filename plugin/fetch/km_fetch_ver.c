/*
 * km_fetch_ver.c - the fetcher's request versions per source broker (km_fetch_ver.h).
 */
#include "fetch/km_fetch_ver.h"

#include <stdio.h>

#include "kp_msgs.h"

/* The minimums are what the data path needs, not what the codec could encode:
 *  - Fetch v4: the first version whose answers carry record batches of magic 2 (below it a broker
 *    answers in the old message-set format) and that has IsolationLevel and the last stable
 *    offset; the batches are appended unchanged, so nothing older can be mirrored.
 *  - ListOffsets v1: a single offset per partition (v0 answered a list of segment offsets).
 *  - Metadata v4: AllowAutoTopicCreation; below it asking for a topic the source lacks may create
 *    it there.
 *  - OffsetForLeaderEpoch v2: CurrentLeaderEpoch, and the answer's LeaderEpoch (v1+) that the
 *    divergence check compares; only needed below Fetch v12.
 * The maximums are the newest versions the fetcher encodes and understands (Fetch v19's
 * MirrorLeaderEpoch is provisional and not sent; Metadata v13 adds nothing the fetcher uses). */
static const km_fetch_vneed_t km_fv_needs[KM_FV_N] = {
    [KM_FV_FETCH] = {KP_APIKEY_Fetch, "Fetch", 4, 18,
                     "v4: record batches of magic 2 and isolation levels"},
    [KM_FV_LIST_OFFSETS] = {KP_APIKEY_ListOffsets, "ListOffsets", 1, 11,
                            "v1: one offset per partition"},
    [KM_FV_METADATA] = {KP_APIKEY_Metadata, "Metadata", 4, 12,
                        "v4: no topic auto-creation on the source"},
    [KM_FV_OFLE] = {KP_APIKEY_OffsetForLeaderEpoch, "OffsetForLeaderEpoch", 2, 4,
                    "v2: CurrentLeaderEpoch, for the divergence check below Fetch v12"},
};

const km_fetch_vneed_t *km_fetch_ver_need(int api)
{
    return api >= 0 && api < KM_FV_N ? &km_fv_needs[api] : NULL;
}

/* The highest version of api in [need.min, min(need.max, cap)] that src serves; -1: none. */
static int16_t km_fv_pick(const km_fetch_vneed_t *need, const km_fetch_vrange_t *src, int16_t cap)
{
    int16_t hi = need->max_ver, lo = need->min_ver;

    if (!src->known)
        return -1;
    if (cap >= 0 && cap < hi)
        hi = cap;
    if (src->max_ver < hi)
        hi = src->max_ver;
    if (src->min_ver > lo)
        lo = src->min_ver;
    return hi >= lo ? hi : -1;
}

static void km_fv_refusal(const km_fetch_vneed_t *need, const km_fetch_vrange_t *src,
                          int32_t broker, int16_t cap, const char *context, char *msg,
                          size_t msg_size)
{
    char who[32], served[64], ours[32];

    if (msg == NULL || msg_size == 0)
        return;
    if (broker >= 0)
        snprintf(who, sizeof(who), "source broker %d", (int)broker);
    else
        snprintf(who, sizeof(who), "the source broker");
    if (src->known)
        snprintf(served, sizeof(served), "serves %s v%d..%d", need->name, (int)src->min_ver,
                 (int)src->max_ver);
    else
        snprintf(served, sizeof(served), "does not serve %s", need->name);
    if (cap >= 0 && cap < need->max_ver)
        snprintf(ours, sizeof(ours), "v%d..%d (capped)", (int)need->min_ver, (int)cap);
    else
        snprintf(ours, sizeof(ours), "v%d..%d", (int)need->min_ver, (int)need->max_ver);
    snprintf(msg, msg_size, "%s %s%s; kmirror needs %s (%s): this source cannot be mirrored", who,
             served, context, ours, need->why_min);
}

bool km_fetch_ver_choose(const km_fetch_vrange_t src[KM_FV_N], int32_t broker, int16_t fetch_cap,
                         km_fetch_vers_t *out, int *api_out, char *msg, size_t msg_size)
{
    char ctx[64] = "";

    if (msg != NULL && msg_size > 0)
        msg[0] = '\0';
    for (int api = 0; api < KM_FV_N; api++) {
        const km_fetch_vneed_t *need = &km_fv_needs[api];
        int16_t v = km_fv_pick(need, &src[api], api == KM_FV_FETCH ? fetch_cap : -1);

        if (api == KM_FV_OFLE) {
            if (out->v[KM_FV_FETCH] >= KM_FV_FETCH_DIVERGING) {
                out->v[api] = v; /* not needed: -1 is fine */
                continue;
            }
            snprintf(ctx, sizeof(ctx), " (and Fetch only up to v%d, below v%d)",
                     (int)out->v[KM_FV_FETCH], KM_FV_FETCH_DIVERGING);
        }
        if (v < 0) {
            km_fv_refusal(need, &src[api], broker, api == KM_FV_FETCH ? fetch_cap : -1, ctx, msg,
                          msg_size);
            if (api_out != NULL)
                *api_out = api;
            return false;
        }
        out->v[api] = v;
    }
    return true;
}
