/*
 * km_sync_groups.h - consumer-group offset sync (KM_SYNC_GROUPS, docs/plugin.md "Consumer-group
 * offsets", design M85-M88). The entry point km_sync_groups_run() is declared in km_sync.h;
 * this header holds the pure decisions it makes, so that they are unit-testable.
 *
 * Per run: the source's groups (ListGroups at every source broker), filtered by groups.include /
 * groups.exclude and protocol type; per group the source's committed offsets (OffsetFetch at
 * its coordinator) of partitions of eligible mirror topics; on the destination, groups with
 * active members are skipped, offsets are clamped to the destination high watermark, their
 * leader epoch re-stamped (km_sync_groups_epoch), and only what differs from the destination's
 * committed offsets is written (OffsetCommit as an admin commit: generation -1, no member).
 */
#ifndef KM_SYNC_GROUPS_H
#define KM_SYNC_GROUPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/km_err.h"
#include "util/km_pattern.h"

/**
 * Is a group listed by the source one the sync copies? Its protocol type (ptype, plen bytes)
 * must be "consumer" or "" (a group that only stores offsets: simple/admin commits); then the
 * group id (len bytes) must match include (NULL: every group) and not exclude (NULL: none).
 * @return KM_OK with *selected set, or a km_pattern_match error (KM_ERR_LIMIT, KM_ERR_NOMEM)
 * @thread one thread at a time per pattern
 */
km_err_t km_sync_groups_select(km_pattern_t *include, km_pattern_t *exclude, const char *group,
                               size_t len, const char *ptype, size_t plen, bool *selected);

/**
 * The offset to write for a source commit src_offset when the destination partition's high
 * watermark is dst_hw: min(src_offset, dst_hw). -1 (write nothing) when the source has no
 * commit (src_offset < 0) or the high watermark is unknown (dst_hw < 0).
 * @thread any
 */
int64_t km_sync_groups_clamp(int64_t src_offset, int64_t dst_hw);

/**
 * The leader epoch to commit with offset (design M86). The candidate is the epoch the source
 * group committed (src_epoch: the epoch of the record before the committed offset, which the
 * mirror copied with the record). It is kept only if the destination proves it:
 *   - it is not newer than the destination partition's current leader epoch
 *     (dst_leader_epoch, -1 unknown: not proved), so a consumer never waits for metadata
 *     newer than the destination will ever show (a refresh loop);
 *   - the destination's epoch cache has it and its end offset covers offset: found_epoch /
 *     found_end are the destination's OffsetForLeaderEpoch answer for src_epoch (what a Java
 *     consumer's position validation will ask), found_epoch == src_epoch and
 *     found_end >= offset, so the consumer does not see a truncation.
 * Otherwise -1 ("no epoch": the consumer starts at the offset without validating it).
 * offset <= 0 also gives -1 (nothing consumed yet).
 * @thread any
 */
int32_t km_sync_groups_epoch(int32_t src_epoch, int64_t offset, int32_t dst_leader_epoch,
                             int32_t found_epoch, int64_t found_end);

/**
 * Must (offset, epoch) be written over the destination's committed (dst_offset, dst_epoch)
 * (dst_offset -1: none)? True when either differs, in both directions: an offset the source
 * group moved back (a reset) is copied back too (design M87).
 * @thread any
 */
bool km_sync_groups_changed(int64_t offset, int32_t epoch, int64_t dst_offset, int32_t dst_epoch);

/**
 * Is a destination group (DescribeGroups: state, len bytes; members) one the sync may write?
 * Only without members and in state "Empty" or "Dead" (unknown groups are "Dead").
 * @thread any
 */
bool km_sync_groups_idle(const char *state, size_t len, int32_t members);

#endif /* KM_SYNC_GROUPS_H */
