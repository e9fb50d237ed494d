/*
 * kb_api_int.h -- what the handler files of broker/api share: registration, string and
 * response helpers, error mapping. Internal to kb_api.
 *
 * @thread handler threads unless stated
 */
#ifndef KB_API_INT_H
#define KB_API_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_apisvc.h"
#include "kb_net.h"
#include "kp_arena.h"
#include "kp_msg.h"
#include "kp_msgs.h"

/* Kafka AclOperation codes, for the authorized-operations bit fields. */
#define KB_ACL_READ             3
#define KB_ACL_WRITE            4
#define KB_ACL_CREATE           5
#define KB_ACL_DELETE           6
#define KB_ACL_ALTER            7
#define KB_ACL_DESCRIBE         8
#define KB_ACL_CLUSTER_ACTION   9
#define KB_ACL_DESCRIBE_CONFIGS 10
#define KB_ACL_ALTER_CONFIGS    11
#define KB_ACL_IDEMPOTENT_WRITE 12
#define KB_ACL_CREATE_TOKENS    13
#define KB_ACL_DESCRIBE_TOKENS  14

/** Every operation on a topic / the cluster (there is no authorizer yet: all are allowed). */
int32_t kb_h_topic_ops(void);
int32_t kb_h_cluster_ops(void);

/** Register @p key over the codec's whole range clamped to [@p min, @p max] and remember it
 *  for kb_apisvc_free(). 0 or a kb_err_t. */
int kb_h_register(kb_apisvc_t *svc, int16_t key, int16_t min, int16_t max, kb_api_handler_fn *fn,
                  unsigned flags);

/** NUL-terminated copy of @p s in @p ar; NULL for a null string or no memory. */
char *kb_h_str(kp_arena_t *ar, kp_str_t s);
/** A view of @p s (NULL gives a null string). */
kp_str_t kb_h_view(const char *s);
/** A view of a copy of @p s in @p ar. */
kp_str_t kb_h_dup(kp_arena_t *ar, const char *s);
/** printf into @p ar, as a view. */
kp_str_t kb_h_fmt(kp_arena_t *ar, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Encode @p msg (@p desc) at the request's version into a response. KB_API_RESPOND with
 *  *respp, or KB_API_CLOSE (logged) when encoding fails. */
kb_api_result_t kb_h_respond(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, const void *msg,
                             kb_resp_t **respp);

typedef kb_api_result_t(kb_h_build_fn)(kb_apisvc_t *svc, kb_reqctx_t *ctx, const void *rq,
                                       kb_resp_t **respp);

/**
 * Build the response of the decoded request @p rq with @p fn, with ctx->arena replaced by an
 * unlimited arena for the call: responses that can be far larger than their request (Metadata
 * of every topic, config listings) would not fit the request arena, which the network layer
 * caps at a multiple of the request size. The request was decoded in the capped arena.
 */
kb_api_result_t kb_h_big_response(void *opaque, kb_reqctx_t *ctx, const void *rq, kb_resp_t **respp,
                                  kb_h_build_fn *fn);

/** Decode the request body with @p desc into @p msg (in the request arena). 0, or -1 (logged;
 *  the handler returns KB_API_CLOSE as Kafka closes on unparsable requests). */
int kb_h_decode(kb_reqctx_t *ctx, const kp_msg_desc_t *desc, void *msg);

/** For @p n keys (name, number), a flag per key that is set when the same key appears more
 *  than once (O(n log n)); @p nums may be NULL. NULL on no memory (treat as "no duplicates"). */
bool *kb_h_dups(kp_arena_t *ar, const kp_str_t *names, const int32_t *nums, size_t n);

/** As kb_h_dups(), but only the later occurrences of a key are flagged (the first is kept). */
bool *kb_h_dups_later(kp_arena_t *ar, const kp_str_t *names, const int32_t *nums, size_t n);

/** Kafka error code for a storage error. */
int16_t kb_h_sto_err(int sto_err);

/** Kafka error code for a kb_meta_part*() result (@p by_id: the topic was named by id). */
int16_t kb_h_lookup_err(int rc, bool by_id);

/** CurrentLeaderEpoch check: -1 (none) passes; older is FENCED_LEADER_EPOCH, newer
 *  UNKNOWN_LEADER_EPOCH. */
int16_t kb_h_epoch_check(int32_t current_leader_epoch, int32_t ours);

/** The advertised endpoint of listener @p listener (host, port resolved for port 0). */
void kb_h_endpoint(kb_apisvc_t *svc, const char *listener, const char **host, int32_t *port);

/* Handler registration of each file. */
int kb_h_metadata_register(kb_apisvc_t *svc);
int kb_h_produce_register(kb_apisvc_t *svc);
int kb_h_fetch_register(kb_apisvc_t *svc);
int kb_h_offsets_register(kb_apisvc_t *svc);
int kb_h_topics_register(kb_apisvc_t *svc);
int kb_h_configs_register(kb_apisvc_t *svc);
int kb_h_initpid_register(kb_apisvc_t *svc);

#endif /* KB_API_INT_H */
