/*
 * kb_ctrl_reg.h -- the controller's broker registry: registrations (incarnation id, endpoints,
 * rack, broker epoch), heartbeats and sessions, fenced / unfenced / shutting-down state
 * (docs/design.md C3, docs/broker.md "Cluster"). Time is passed in, so the rules are tested
 * without a clock (tests/broker_ctrl).
 *
 * Kafka's rules:
 *   - a broker registers with an incarnation id chosen at process start; a registration with a
 *     different incarnation while the old one's session is still valid is refused
 *     (DUPLICATE_BROKER_REGISTRATION: two processes with one id), unless it names the current
 *     broker epoch as PreviousBrokerEpoch (a clean restart); otherwise it replaces the old one
 *     and gets a new broker epoch;
 *   - a registered broker starts fenced and is unfenced by a heartbeat once it has caught up
 *     with the metadata log (its CurrentMetadataOffset reached the controller's offset at its
 *     registration) and does not ask to stay fenced (WantFence);
 *   - a broker without a heartbeat for the session timeout is fenced (it stays registered);
 *   - WantShutDown starts a controlled shutdown: the broker is no longer usable as leader or ISR
 *     member; ShouldShutDown is answered once it leads nothing any more (the caller says so).
 *
 * @thread any; @locks one mutex per registry (never held while calling out)
 */
#ifndef KB_CTRL_REG_H
#define KB_CTRL_REG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kp_types.h"

#define KB_CTRL_MAX_ENDPOINTS 8
#define KB_CTRL_MAX_BROKERS   1024

typedef struct kb_ctrl_endpoint_s {
    char name[64]; /**< listener name, upper case */
    char host[256];
    int32_t port;
    int16_t security_protocol;
} kb_ctrl_endpoint_t;

/** One registered broker (a copy: kb_ctrl_reg_list). */
typedef struct kb_ctrl_broker_s {
    int32_t id;
    kp_uuid_t incarnation;
    int64_t epoch; /**< broker epoch of the current registration */
    char rack[128];
    bool has_rack;
    int32_t nendpoints;
    kb_ctrl_endpoint_t endpoints[KB_CTRL_MAX_ENDPOINTS];
    bool fenced;
    bool shutting_down;
    int64_t last_heartbeat_ms;
    int64_t caught_up_offset; /**< metadata offset to reach before it can be unfenced */
    int64_t offset;           /**< last CurrentMetadataOffset it reported */
} kb_ctrl_broker_t;

typedef struct kb_ctrl_reg_s kb_ctrl_reg_t;

/** A registry whose sessions last @p session_ms. NULL on no memory. */
kb_ctrl_reg_t *kb_ctrl_reg_new(int64_t session_ms);
void kb_ctrl_reg_free(kb_ctrl_reg_t *reg);

/**
 * Register @p b (id, incarnation, endpoints, rack taken from it) at @p now_ms; the metadata
 * log is at @p log_offset. @p previous_epoch is the request's PreviousBrokerEpoch (-1 none).
 * @p epoch_out gets the new broker epoch (larger than any earlier one of this registry and at
 * least @p now_ms, so epochs keep growing across a controller restart).
 * @return 0 or DUPLICATE_BROKER_REGISTRATION / INVALID_REQUEST (bad id) / UNKNOWN_SERVER_ERROR
 *         (registry full).
 */
int16_t kb_ctrl_reg_register(kb_ctrl_reg_t *reg, const kb_ctrl_broker_t *b, int64_t previous_epoch,
                             int64_t now_ms, int64_t log_offset, int64_t *epoch_out);

/** kb_ctrl_reg_heartbeat() results. */
typedef struct kb_ctrl_hb_s {
    bool caught_up;
    bool fenced;
    bool shutting_down;
    bool unfenced_now; /**< this heartbeat unfenced it */
    bool fenced_now;   /**< this heartbeat fenced it (WantFence) */
} kb_ctrl_hb_t;

/**
 * A heartbeat of broker @p id at epoch @p epoch at @p now_ms, having applied the metadata log up
 * to @p offset. @return 0, BROKER_ID_NOT_REGISTERED or STALE_BROKER_EPOCH.
 */
int16_t kb_ctrl_reg_heartbeat(kb_ctrl_reg_t *reg, int32_t id, int64_t epoch, int64_t offset,
                              bool want_fence, bool want_shutdown, int64_t now_ms,
                              kb_ctrl_hb_t *out);

/** Fence every unfenced broker whose session expired at @p now_ms: their ids into @p out (at
 *  most @p max). @return how many were fenced. */
size_t kb_ctrl_reg_expire(kb_ctrl_reg_t *reg, int64_t now_ms, int32_t *out, size_t max);

/** A controller start: take registration @p b from the metadata image as it is (epoch,
 *  fenced), its session starting at @p now_ms, already caught up. 0 or -1 (no memory / bad). */
int kb_ctrl_reg_load(kb_ctrl_reg_t *reg, const kb_ctrl_broker_t *b, int64_t now_ms);

/** Remove broker @p id. 0 or BROKER_ID_NOT_REGISTERED. */
int16_t kb_ctrl_reg_unregister(kb_ctrl_reg_t *reg, int32_t id);

/** Usable as leader / ISR member: registered, unfenced, not shutting down. */
bool kb_ctrl_reg_usable(kb_ctrl_reg_t *reg, int32_t id);

/** A copy of broker @p id. 0 or -1 (not registered). */
int kb_ctrl_reg_get(kb_ctrl_reg_t *reg, int32_t id, kb_ctrl_broker_t *out);

/** Copies of every registered broker, sorted by id, into a malloc'd array (caller frees).
 *  0 or -1 (no memory). */
int kb_ctrl_reg_list(kb_ctrl_reg_t *reg, kb_ctrl_broker_t **out, size_t *cnt);

#endif /* KB_CTRL_REG_H */
