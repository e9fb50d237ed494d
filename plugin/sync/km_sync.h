/*
 * km_sync.h - the MirrorMetadataManager's periodic sync (docs/plugin.md "Metadata sync",
 * kip-1279-facts §7.6, ARCHITECTURE §4 "consumer-offset sync", issue 6).
 *
 * For each mirror, the broker that is its mirror coordinator (km_state_mirror_coordinator:
 * leader of the `__mirror_state` partition of the mirror name) runs four kinds of sync, each on
 * its own interval:
 *
 *   KM_SYNC_TOPICS   topic discovery: topics.include / topics.exclude against the source's
 *                    topic list, new topics created and started, partition-count increases
 *                    followed (broker setting mirror.metadata.refresh.interval.ms)
 *   KM_SYNC_CONFIGS  topic configs source -> destination (sync.topic.configs.interval.ms)
 *   KM_SYNC_GROUPS   consumer-group offsets (sync.group.offsets.interval.ms)
 *   KM_SYNC_ACLS     ACLs (sync.acls.interval.ms)
 *
 * An interval of 0 turns a kind off. StartMirrorTopics asks for a run of every kind at once
 * (km_sync_kick); StopMirrorTopics runs a last CONFIGS and GROUPS sync of the topics it stops,
 * on the broker that received it, bounded by stop.sync.timeout.ms, before it stops them
 * (km_sync_final). Only topics whose desired state is RUNNING are synced (paused, stopping and
 * stopped topics are left alone).
 *
 * The scheduler (km_sync.c) owns the runs: it creates a km_sync_run_t, calls the kind's entry
 * point on the coordinator loop and frees the run after the kind called km_sync_run_done().
 * A kind works asynchronously (source requests through the source admin client, destination
 * requests through kbx local_request / broker_request, SYNCED_* records through
 * km_state_put_record / km_state_get_record) and continues on the loop; at every continuation
 * it checks km_sync_run_cancelled() and, when cancelled, stops issuing work and finishes with
 * km_sync_run_done(). One failing item (a topic, a group, a binding) is reported with
 * km_sync_run_error() and never stops the others. At most one run per (mirror, kind) is in
 * flight.
 *
 * Owner: km_plugin_t (cm->sync). Everything here runs on the coordinator loop.
 */
#ifndef KM_SYNC_H
#define KM_SYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog/km_catalog_types.h"
#include "util/km_err.h"
#include "util/km_types.h"

typedef enum km_sync_kind {
    KM_SYNC_TOPICS = 0,
    KM_SYNC_CONFIGS = 1,
    KM_SYNC_GROUPS = 2,
    KM_SYNC_ACLS = 3,
    KM_SYNC_NKINDS
} km_sync_kind_t;

/** One run of one kind for one mirror. Fields are read-only for the kinds. */
typedef struct km_sync_run {
    km_plugin_t *cm;
    km_sync_kind_t kind;
    const char *mirror; /**< the mirror's name (owned by the run) */
    /** true on the mirror coordinator: the kind may read and write its SYNCED_* records.
     *  false for a final sync on another broker (km_sync_final): apply, remember nothing. */
    bool persist;
    /** NULL: every eligible topic of the mirror; else only these topic names (a final sync),
     *  each still checked with km_sync_topic_eligible. */
    char **topics;
    size_t ntopics;
    int64_t deadline_ms; /**< wall clock (kbx now_ms): give up on what is still pending then */
    void *priv;          /**< the scheduler's */
} km_sync_run_t;

/* --- the kinds (one file each: km_sync_topics.c, km_sync_configs.c, km_sync_groups.c,
 *     km_sync_acls.c) ------------------------------------------------------------------- */

/** Start a run. Must call km_sync_run_done(run) exactly once, now or from a later
 *  continuation on the loop. @thread coord */
void km_sync_topics_run(km_sync_run_t *run);
void km_sync_configs_run(km_sync_run_t *run);
void km_sync_groups_run(km_sync_run_t *run);
void km_sync_acls_run(km_sync_run_t *run);

/* --- for the kinds ---------------------------------------------------------------------- */

/** The mirror's current definition, NULL when it is gone. Valid until the kind returns to the
 *  loop (look it up again in every continuation). @thread coord */
const km_mirror_def_t *km_sync_run_def(const km_sync_run_t *run);

/** True when the run should stop issuing work: the mirror was deleted, this broker is no
 *  longer its coordinator (persist runs), the deadline passed, or the plugin is stopping.
 *  @thread coord */
bool km_sync_run_cancelled(const km_sync_run_t *run);

/**
 * One item failed (item names it: a topic, "group g", an ACL binding, may be NULL): counted
 * in kmirror_sync_errors_total{mirror,kind}, logged with the mirror, kind and item, and kept
 * as the kind's last error for `kafka-mirrors --describe`. Printf-style message.
 * @thread coord
 */
void km_sync_run_error(km_sync_run_t *run, const char *item, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** The run is over (successful items are not reported). Frees run. @thread coord */
void km_sync_run_done(km_sync_run_t *run);

/** True if topic t belongs to mirror (its mirror.name, suffix stripped) and its desired
 *  state is RUNNING. @thread coord */
bool km_sync_topic_eligible(const km_cat_topic_t *t, const char *mirror);

/* --- for the rest of the plugin --------------------------------------------------------- */

typedef struct km_sync km_sync_t;

/** Create the scheduler (its periodic host timer). @thread host main (init) */
km_err_t km_sync_start(km_plugin_t *cm, char *errstr, size_t errstr_size);
/** Stop it: cancel the timer, cancel the runs in flight (they finish on the loop, which must
 *  still run). @thread host main (fini), before the loop stops */
void km_sync_stop(km_plugin_t *cm);
/** Free the scheduler after the loop stopped. A run whose kind never called
 *  km_sync_run_done (its continuation was dropped by the closed queue) is freed here: a kind's
 *  drop path frees its own context and must not touch the run. @thread host main (fini) */
void km_sync_destroy(km_plugin_t *cm);

/** Run every kind of mirror at the next tick (after StartMirrorTopics). @thread coord */
void km_sync_kick(km_plugin_t *cm, const char *mirror);

/** Completion of km_sync_final: errors is the number of failed items. @thread coord */
typedef void (*km_sync_final_cb)(km_plugin_t *cm, void *arg, int errors);

/**
 * A last CONFIGS and GROUPS sync of these topics of mirror on this broker (persist only if it
 * is the mirror coordinator), both bounded by the mirror's stop.sync.timeout.ms; cb runs once
 * when both finished or timed out (also when the kinds are off or the mirror is gone).
 * @thread coord
 */
km_err_t km_sync_final(km_plugin_t *cm, const char *mirror, const char *const *topics,
                       size_t ntopics, km_sync_final_cb cb, void *arg);

/** The kind's name for logs, metrics and describe: "topics", "configs", "groups", "acls". */
const char *km_sync_kind_name(km_sync_kind_t kind);

/** What `kafka-mirrors --describe` shows of one kind (km_sync_status). */
typedef struct km_sync_status {
    bool enabled;            /**< its interval is above 0 */
    uint64_t runs;           /**< runs finished on this broker */
    uint64_t errors;         /**< failed items reported on this broker */
    char last_error[256];    /**< "item: message" of the last failed item ("" if none) */
    int64_t last_error_ms;   /**< wall clock of it (-1 if none) */
    int64_t last_success_ms; /**< wall clock of the last run without a failed item (-1) */
} km_sync_status_t;

/** The sync status of one kind of mirror on this broker. False when the mirror is unknown or
 *  this broker is not its coordinator (only the coordinator runs the periodic sync).
 *  @thread coord */
bool km_sync_status(km_plugin_t *cm, const char *mirror, km_sync_kind_t kind,
                    km_sync_status_t *out);

#endif /* KM_SYNC_H */
