/*
 * km_fetch_wire.h - inside plugin/fetch/ only: the fetcher threads' requests and responses
 * (km_fetch_wire.c) and the helpers of km_fetch.c they use.
 */
#ifndef KM_FETCH_WIRE_H
#define KM_FETCH_WIRE_H

#include "fetch/km_fetch_int.h"

/** Timers, then whatever requests are due. Returns how long the step may wait (ms).
 *  @thread the fetcher t */
int32_t km_fetch_wire_work(km_fetcher_t *t, int32_t poll_ms);

/** fpart leaves t's fetch session (forgotten in the next incremental request). @thread t */
void km_fetch_wire_leave_session(km_fetcher_t *t, km_fetch_part_t *fpart);

/** The client was replaced: new session, every partition looks its leader up again, pending
 *  ListOffsets / OffsetsForLeaderEpoch steps start over. @thread t */
void km_fetch_wire_reset(km_fetcher_t *t);

/** Put fpart into t's set (list and lookup indexes). @thread t */
void km_fetch_wire_attach(km_fetcher_t *t, km_fetch_part_t *fpart);

/** Take fpart out of t's set. @thread t */
void km_fetch_wire_detach(km_fetcher_t *t, km_fetch_part_t *fpart);

/** Free the forget lists and the indexes. @thread t, or any once t has exited */
void km_fetch_wire_forget_free(km_fetcher_t *t);

/* km_fetch.c */
void km_fetch_part_ref(km_fetch_part_t *fpart);
void km_fetch_part_unref(km_fetch_part_t *fpart);
/** Post ev (copied) for fpart to the owner. @thread any */
void km_fetch_event(km_fetch_mgr_t *fm, km_fetch_part_t *fpart, const km_fetch_event_t *ev);
/** Refresh fpart's status from its fetch state and add to its counters (error NULL: keep the
 *  last error unless data arrived). @thread the owning fetcher */
void km_fetch_status_update(km_fetch_mgr_t *fm, km_fetch_part_t *fpart, int32_t error_class,
                            int16_t error_code, const char *error, uint64_t bytes, uint64_t records,
                            uint64_t batches);
/** Move fpart from t to the fetcher of (mirror, leader). Returns false when it stays (the owner
 *  has a request pending for it, or no thread could be started). @thread t */
bool km_fetch_handover(km_fetcher_t *t, km_fetch_part_t *fpart, int32_t leader, const char *host,
                       int32_t port);
/** fm->lock held. */
km_fetcher_t *km_fetcher_get(km_fetch_mgr_t *fm, km_fmirror_t *mr, int32_t broker, int32_t idx,
                             const char *host, int32_t port);
void km_fetcher_wake(km_fetcher_t *t);

#endif /* KM_FETCH_WIRE_H */
