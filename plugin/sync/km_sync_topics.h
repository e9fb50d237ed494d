/*
 * km_sync_topics.h - topic discovery, the KM_SYNC_TOPICS kind of the metadata sync
 * (docs/plugin.md "Topic discovery", docs/design.md M77-M80). The entry point,
 * km_sync_topics_run(), is declared in sync/km_sync.h; this header has the pure decision it
 * makes per source topic, so that it is unit-testable without a host.
 *
 * Each run lists the source's topics (Metadata through the source admin client), selects them
 * with the mirror's topics.include / topics.exclude (internal topics never; exclude wins;
 * topics.include "" selects nothing) and, per source topic, decides with
 * km_sync_topics_decide() what the destination needs.
 */
#ifndef KM_SYNC_TOPICS_H
#define KM_SYNC_TOPICS_H

#include <stdbool.h>

#include "catalog/km_catalog_types.h"
#include "rpc/km_srcadm.h"

/** What discovery does for one source topic. */
typedef enum km_disc_action {
    KM_DISC_NONE = 0,   /**< nothing: not selected and not this mirror's, or up to date */
    KM_DISC_CREATE,     /**< selected and missing here: create it as a mirror topic of this
                             mirror with the source topic id and partition count (the
                             StartMirrorTopics path), which starts mirroring it */
    KM_DISC_GROW,       /**< this mirror's running topic, same id, fewer partitions than the
                             source: CreatePartitions here up to the source's count */
    KM_DISC_ID_CHANGED, /**< this mirror's running topic has another topic id than the source
                             topic of that name (deleted and re-created there): never touched;
                             reported with the operator's step */
    KM_DISC_LOCAL,      /**< selected, but a topic of that name that is not a mirror topic
                             exists here: left alone, reported */
    KM_DISC_NO_ID,      /**< selected, but the source gives no topic id (Kafka before 2.8):
                             not mirrored, reported */
    KM_DISC_MORE_PARTS, /**< this mirror's running topic has more partitions here than the
                             source: left alone, reported */
    KM_DISC_LEAVE,      /**< another mirror's topic, or this mirror's paused or stopped one:
                             left alone, silently */
} km_disc_action_t;

/**
 * The decision for source topic src (its error_code 0 and not internal; others are NONE).
 * selected: the mirror's filters select it. dst: the destination catalog's topic of that name,
 * or NULL. mirror: the mirror's name. Pure.
 * @thread any
 */
km_disc_action_t km_sync_topics_decide(const km_srcadm_topic_t *src, bool selected,
                                       const km_cat_topic_t *dst, const char *mirror);

/** "NONE", "CREATE", ... for logs and tests. @thread any */
const char *km_sync_topics_action_name(km_disc_action_t a);

#endif /* KM_SYNC_TOPICS_H */
