/*
 * km_fetch_ver.h - which request versions the fetcher uses against a source broker (docs/plugin.md
 * "Fetcher", "Source versions"; design M93).
 *
 * The fetcher sends Fetch, ListOffsets, Metadata and OffsetForLeaderEpoch to the source. For each
 * it takes the highest version both sides serve, within its own range, whose minimum is what the
 * data path needs (Fetch v4: magic-2 record batches and isolation levels; ...). A source broker
 * whose ApiVersions ranges leave no such version for an API the fetcher needs cannot be mirrored:
 * the choice fails with a message naming the broker, the API and both version ranges.
 *
 * Pure functions: no state, no I/O. @thread any
 */
#ifndef KM_FETCH_VER_H
#define KM_FETCH_VER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** The APIs the fetcher sends, as indexes of the arrays below. */
#define KM_FV_FETCH        0
#define KM_FV_LIST_OFFSETS 1
#define KM_FV_METADATA     2
#define KM_FV_OFLE         3 /**< OffsetForLeaderEpoch: needed only below Fetch v12 */
#define KM_FV_N            4

/** First Fetch version with LastFetchedEpoch / DivergingEpoch (below it: OffsetForLeaderEpoch). */
#define KM_FV_FETCH_DIVERGING 12
/** First Fetch version with topic ids (needs every partition's source topic id). */
#define KM_FV_FETCH_TOPIC_IDS 13

/** What the fetcher itself can send for one API. */
typedef struct km_fetch_vneed {
    int16_t api_key;
    const char *name;    /**< "Fetch" */
    int16_t min_ver;     /**< the lowest version the fetcher accepts */
    int16_t max_ver;     /**< the highest version the fetcher encodes */
    const char *why_min; /**< why nothing below min_ver ("record batches of magic 2 ...") */
} km_fetch_vneed_t;

/** The fetcher's row for API @p api (KM_FV_*); NULL outside the range. */
const km_fetch_vneed_t *km_fetch_ver_need(int api);

/** One API's range as the source broker advertised it in ApiVersions. */
typedef struct km_fetch_vrange {
    bool known; /**< false: the broker does not advertise the API at all */
    int16_t min_ver;
    int16_t max_ver;
} km_fetch_vrange_t;

/** The versions chosen for a source broker; -1 for an API not needed (OffsetForLeaderEpoch
 *  at Fetch v12+ on a broker without a usable version). */
typedef struct km_fetch_vers {
    int16_t v[KM_FV_N];
} km_fetch_vers_t;

/**
 * Choose the versions for source broker @p broker (its id, for the message; -1: not known yet)
 * from its advertised ranges @p src[KM_FV_N]. @p fetch_cap (>= 0) lowers the highest Fetch
 * version the fetcher may use (the test hook KMIRROR_TEST_FETCH_MAX_VERSION, or v12 when a
 * source topic has no topic id); < 0: no cap. Returns true with @p out filled, or false with a
 * one-line reason in @p msg ("source broker 3 serves Fetch v0..3; kmirror needs v4..18 (v4: ...)")
 * and @p out's refused API index in @p *api_out (may be NULL).
 */
bool km_fetch_ver_choose(const km_fetch_vrange_t src[KM_FV_N], int32_t broker, int16_t fetch_cap,
                         km_fetch_vers_t *out, int *api_out, char *msg, size_t msg_size);

#endif /* KM_FETCH_VER_H */
