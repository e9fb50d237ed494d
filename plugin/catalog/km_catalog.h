/*
 * km_catalog.h - the destination's view of mirrors, kept on the coordinator loop from the
 * host's metadata deltas and leadership changes:
 *   - mirror definitions: plugin records (kbx controller_write) of record type
 *     KM_CATALOG_RECORD_MIRROR, key = mirror name, value in the versioned format of
 *     docs/state-format.md "Mirror definitions" (km_catalog_def_encode/decode);
 *   - every topic of the cluster (name, id, partition count) with its mirror.name association
 *     and the desired state its suffix gives;
 *   - this broker's role and leader epoch per local partition;
 *   - the registered brokers of the cluster.
 * Other modules query it on the loop and subscribe to its changes (km_catalog_subscribe).
 *
 * Owner: km_plugin_t (cm->catalog). Every function runs on the coordinator loop unless it says
 * otherwise; the enqueue functions are the host-callback side (copy and post).
 */
#ifndef KM_CATALOG_H
#define KM_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/km_catalog_types.h"
#include "util/km_err.h"

/** Plugin record type of a mirror definition (kbx_record_t.record_type). */
#define KM_CATALOG_RECORD_MIRROR 1
/** Topic config key of the association (docs/design.md M3). */
#define KM_CATALOG_MIRROR_NAME_KEY "mirror.name"
/** Topic config: truncation waits (failback) cover every assigned replica, not only the ISR. */
#define KM_CATALOG_ULE_KEY "mirror.support.unclean.leader.election"
/** Format version written by km_catalog_def_encode. */
#define KM_CATALOG_DEF_FORMAT_VERSION 1

/** Set up an empty catalog. @thread host main (init) */
void km_catalog_init(km_plugin_t *cm, km_catalog_t *cat);

/** Free everything. @thread host main (fini), after the coordinator loop stopped */
void km_catalog_destroy(km_catalog_t *cat);

/**
 * Copy a metadata delta (borrowed) and post it to the loop, where it is applied.
 * @return KM_OK, KM_ERR_NOMEM (the delta is lost: logged), KM_ERR_SHUTDOWN
 * @thread host metadata thread
 */
km_err_t km_catalog_enqueue_delta(km_catalog_t *cat, const kbx_metadata_delta_t *delta);

/**
 * Copy leadership changes (borrowed) and post them to the loop.
 * @thread host metadata thread
 */
km_err_t km_catalog_enqueue_leadership(km_catalog_t *cat,
                                       const kbx_leadership_change_t *const *changes,
                                       uint32_t count);

/** Apply a delta now (the loop side of km_catalog_enqueue_delta; tests call it directly). */
km_err_t km_catalog_apply_delta(km_catalog_t *cat, const kbx_metadata_delta_t *delta);

/** Apply leadership changes now. */
km_err_t km_catalog_apply_leadership(km_catalog_t *cat,
                                     const kbx_leadership_change_t *const *changes, uint32_t count);

/**
 * Subscribe to changes. ops must outlive the catalog (static const). Callbacks run on the loop
 * while a delta / leadership batch is applied, and must not subscribe. Subscriptions are
 * append-only and may be made while the loop already runs (a module's start at init); one
 * subscriber at a time.
 * @return KM_OK, KM_ERR_NOMEM (no slot left)
 * @thread host main (init) or the loop
 */
km_err_t km_catalog_subscribe(km_catalog_t *cat, const km_catalog_ops_t *ops, void *arg);

/* ---- queries (results borrowed until the next applied delta) ----------------------------- */

/** The first metadata snapshot has been applied. */
bool km_catalog_ready(const km_catalog_t *cat);
/** Metadata offset of the last applied delta (-1 before any). */
int64_t km_catalog_offset(const km_catalog_t *cat);

size_t km_catalog_mirror_count(const km_catalog_t *cat);
/** Mirror i in name order (i < km_catalog_mirror_count). */
const km_mirror_def_t *km_catalog_mirror_at(const km_catalog_t *cat, size_t i);
const km_mirror_def_t *km_catalog_mirror_find(const km_catalog_t *cat, const char *name);
/** Topics whose mirror.name names mirror (any suffix). */
size_t km_catalog_mirror_topic_count(const km_catalog_t *cat, const char *mirror);

const km_cat_topic_t *km_catalog_topic_find(const km_catalog_t *cat, const char *name);
/** Call fn for every topic (any order); fn must not change the catalog. */
void km_catalog_topic_foreach(const km_catalog_t *cat,
                              void (*fn)(void *arg, const km_cat_topic_t *topic), void *arg);

/** Registered, unfenced brokers of the cluster (borrowed array). */
const int32_t *km_catalog_brokers(const km_catalog_t *cat, size_t *n);

/* ---- helpers usable on any thread --------------------------------------------------------- */

/**
 * Parse a mirror.name value into its base name (copied into base, NUL-terminated; too long for
 * base_size -> false) and desired state. .removed reads as STOPPED.
 * @thread any
 */
bool km_catalog_parse_mirror_name(const char *value, char *base, size_t base_size,
                                  km_desired_t *desired);

/** "RUNNING", "PAUSED", "STOPPED" or "NONE". @thread any */
const char *km_catalog_desired_name(km_desired_t d);

/**
 * Is name a valid mirror name? Topic-name rules (1..249 characters of [A-Za-z0-9._-], not "."
 * or "..") and no .paused/.stopped/.removed suffix. On false errstr says why.
 * @thread any
 */
bool km_catalog_mirror_name_valid(const char *name, size_t len, char *errstr, size_t errstr_size);

/**
 * Encode a definition value (format KM_CATALOG_DEF_FORMAT_VERSION) into *out (km_malloc'd,
 * caller frees with km_free) / *out_len. keys/values: nconfig borrowed strings (a value may be
 * NULL). source_cluster_id may be NULL ("").
 * @return KM_OK, KM_ERR_NOMEM, KM_ERR_INVALID (a string longer than 32767 bytes)
 * @thread any
 */
km_err_t km_catalog_def_encode(km_plugin_t *cm, const uint8_t mirror_id[16],
                               int64_t creation_time_ms, const char *source_cluster_id,
                               const char *const *keys, const char *const *values, size_t nconfig,
                               uint8_t **out, size_t *out_len);

/**
 * Decode a definition value (untrusted bytes) into a new km_mirror_def_t named name (its conf
 * is not filled: see km_catalog_apply_delta). errstr says what is wrong on KM_ERR_INVALID.
 * @return KM_OK, KM_ERR_INVALID (malformed, or a min_reader_version above ours), KM_ERR_NOMEM
 * @thread any
 */
km_err_t km_catalog_def_decode(km_plugin_t *cm, const char *name, const uint8_t *buf, size_t len,
                               km_mirror_def_t **out, char *errstr, size_t errstr_size);

/** Free a definition (NULL fine). @thread any */
void km_catalog_def_free(km_plugin_t *cm, km_mirror_def_t *def);

#endif /* KM_CATALOG_H */
