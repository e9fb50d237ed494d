/*
 * kb_metrics_http.h -- a tiny HTTP/1.1 server for Prometheus scrapes: GET /metrics answers the
 * registry's text exposition, anything else 404/405. One thread, one connection at a time,
 * each bounded by a short deadline, Connection: close.
 *
 * @thread the server runs on its own thread; start/stop from the owner's thread.
 */
#ifndef KB_METRICS_HTTP_H
#define KB_METRICS_HTTP_H

#include <stddef.h>

#include "kb_metrics.h"

typedef struct kb_metrics_http_s kb_metrics_http_t;

/** Listen on @p host:@p port (port 0 = ephemeral) and serve @p m (borrowed; must outlive the
 *  server). NULL with a message in @p errstr on failure. */
kb_metrics_http_t *kb_metrics_http_start(kb_metrics_t *m, const char *host, int port, char *errstr,
                                         size_t errstr_size);

/** The bound port. */
int kb_metrics_http_port(const kb_metrics_http_t *h);

/** Stop the thread, close the socket, free. NULL-safe. */
void kb_metrics_http_stop(kb_metrics_http_t *h);

#endif /* KB_METRICS_HTTP_H */
