/*
 * kb_apiversions.h -- the ApiVersions handler (key 18): advertises exactly the APIs with a
 * registered handler, with their registered version ranges.
 *
 * Kafka behaviours kept (kafka-peers.md §5.1-5.2):
 *   - the response header is always v0, also for the flexible v3+;
 *   - a request newer than we serve is answered in the v0 layout with UNSUPPORTED_VERSION and
 *     the full key list, so the client can retry with a version we have;
 *   - v3+ requests whose ClientSoftwareName/Version do not match
 *     [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])? get INVALID_REQUEST;
 *   - Produce is advertised with minimum version 0 whatever its real minimum (KAFKA-18659:
 *     librdkafka disables compression otherwise); requests below the real minimum are still
 *     refused.
 *
 * @thread handler
 */
#ifndef KB_APIVERSIONS_H
#define KB_APIVERSIONS_H

#include "kb_api.h"

/** Register the ApiVersions handler on @p reg (versions: all the codec has, 0-5).
 *  @return kb_api_register()'s result. */
int kb_apiversions_register(kb_api_registry_t *reg);

/** True if @p s (len bytes) matches the ClientSoftwareName/Version pattern. */
int kb_apiversions_name_valid(const char *s, int len);

#endif /* KB_APIVERSIONS_H */
