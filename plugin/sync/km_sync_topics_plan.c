/*
 * km_sync_topics_plan.c - topic discovery's decision per source topic (km_sync_topics.h);
 * pure, no host calls (tests/plugin_sync/sync_topics_test.c).
 */
#include "sync/km_sync_topics.h"

#include <string.h>

#include "util/km_pattern.h"

static bool km_disc_zero_id(const kbx_uuid_t *id)
{
    static const kbx_uuid_t zero;

    return memcmp(id, &zero, sizeof(zero)) == 0;
}

km_disc_action_t km_sync_topics_decide(const km_srcadm_topic_t *src, bool selected,
                                       const km_cat_topic_t *dst, const char *mirror)
{
    if (src == NULL || src->name == NULL || mirror == NULL || src->error_code != 0 ||
        src->internal || km_pattern_internal_topic(src->name))
        return KM_DISC_NONE;
    if (dst == NULL || dst->partition_count == 0) {
        /* Missing here (a topic without partitions is one being deleted: as StartMirrorTopics,
         * a create is tried and answers for itself). */
        if (!selected)
            return KM_DISC_NONE;
        if (km_disc_zero_id(&src->id))
            return KM_DISC_NO_ID;
        return src->partitions > 0 ? KM_DISC_CREATE : KM_DISC_NONE;
    }
    if (dst->mirror == NULL)
        return selected ? KM_DISC_LOCAL : KM_DISC_NONE;
    if (strcmp(dst->mirror, mirror) != 0 || dst->desired != KM_DESIRED_RUNNING)
        return KM_DISC_LEAVE;
    /* This mirror's running topic, started by discovery or explicitly. */
    if (km_disc_zero_id(&src->id))
        return KM_DISC_NONE; /* nothing to compare: the fetcher checks what it can */
    if (memcmp(&src->id, &dst->id, sizeof(src->id)) != 0)
        return KM_DISC_ID_CHANGED;
    if (src->partitions > dst->partition_count)
        return KM_DISC_GROW;
    if (src->partitions > 0 && src->partitions < dst->partition_count)
        return KM_DISC_MORE_PARTS;
    return KM_DISC_NONE;
}

const char *km_sync_topics_action_name(km_disc_action_t a)
{
    switch (a) {
    case KM_DISC_NONE:
        return "NONE";
    case KM_DISC_CREATE:
        return "CREATE";
    case KM_DISC_GROW:
        return "GROW";
    case KM_DISC_ID_CHANGED:
        return "ID_CHANGED";
    case KM_DISC_LOCAL:
        return "LOCAL";
    case KM_DISC_NO_ID:
        return "NO_ID";
    case KM_DISC_MORE_PARTS:
        return "MORE_PARTS";
    case KM_DISC_LEAVE:
        return "LEAVE";
    }
    return "?";
}
