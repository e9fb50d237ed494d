/*
 * kc_conn.c -- one connection per node: non-blocking connect, the ApiVersions handshake with
 * its fallback, request framing and version choice, response framing and correlation, and
 * per-connection timers. Every function here runs with client->lock held.
 *
 * The socket is only touched through kc_conn_send_bytes()/kc_conn_recv_bytes() and the
 * connect step, so a TLS layer can later replace those two and hook into the CONNECTING ->
 * HANDSHAKE transition (docs/client.md).
 */
#include "kc_client_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "kp_arena.h"
#include "kp_msgs.h"
#include "kp_reader.h"

static uint64_t kc_conn_key(const kc_node_t *node)
{
    return ((uint64_t)node->conn_gen << 32) | (uint32_t)node->id;
}

static void kc_conn_epoll(kc_client_t *c, kc_node_t *node, bool want_out)
{
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0u)};
    ev.data.u64 = kc_conn_key(node);
    if (node->epoll_out == want_out)
        return;
    node->epoll_out = want_out;
    (void)epoll_ctl(c->epfd, EPOLL_CTL_MOD, node->fd, &ev);
}

void kc_conn_free(kc_node_t *node)
{
    kp_writer_free(&node->out);
    node->out_pos = 0;
    free(node->rbuf);
    node->rbuf = NULL;
    node->rlen = node->rgot = node->rcap = 0;
    node->hdr_got = 0;
}

static int64_t kc_conn_backoff(kc_client_t *c, int failures)
{
    int64_t b = c->o.reconnect_backoff_ms;
    for (int i = 1; i < failures && b < c->o.reconnect_backoff_max_ms; i++)
        b *= 2;
    if (b > c->o.reconnect_backoff_max_ms)
        b = c->o.reconnect_backoff_max_ms;
    /* +-20% jitter so that many clients do not reconnect in lock step */
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return b * (80 + (int64_t)(c->rng % 41)) / 100;
}

static void kc_conn_fail_wire(kc_client_t *c, kc_node_t *node, kc_reqq_t *q, int head_err, int err)
{
    kc_req_t *req;
    bool first = true;
    while ((req = kc_reqq_pop(q))) {
        if (q == &node->inflight)
            c->m.in_flight--;
        if (!req->done)
            kc_req_finish(c, req, first ? head_err : err, NULL, 0, 0);
        first = false;
        kc_req_unwire(req);
    }
}

void kc_conn_close(kc_client_t *c, kc_node_t *node, int head_err, int err, const char *why)
{
    int64_t now = kc_now_ms();
    if (node->state == KC_CS_DOWN)
        return;
    if (node->state == KC_CS_RESOLVING)
        node->resolve_gen++; /* a late answer from the resolver is dropped */
    if (node->state == KC_CS_READY) {
        c->m.disconnects++;
        c->m.connections_up--;
        node->failures = 1;
        kc_log(c, KC_LOG_INFO, "node %d (%s): connection closed: %s", node->id, node->name, why);
    } else {
        c->m.connect_failures++;
        node->failures++;
        kc_log(c, node->failures > 1 ? KC_LOG_DEBUG : KC_LOG_WARN,
               "node %d (%s): connection failed (attempt %d): %s", node->id, node->name,
               node->failures, why);
    }
    if (node->fd >= 0) {
        (void)epoll_ctl(c->epfd, EPOLL_CTL_DEL, node->fd, NULL);
        close(node->fd);
        node->fd = -1;
    }
    node->conn_gen++;
    kc_conn_fail_wire(c, node, &node->inflight, head_err, err);
    kc_conn_fail_wire(c, node, &node->sending, err, err);
    kc_conn_free(node);
    node->out_base = 0;
    node->epoll_out = false;
    node->state = KC_CS_DOWN;
    node->backoff_until = now + kc_conn_backoff(c, node->failures);
}

/* ---- output ------------------------------------------------------------------------------ */

/* Write what the socket takes (the seam a TLS layer replaces). */
static void kc_conn_send_bytes(kc_client_t *c, kc_node_t *node)
{
    kc_req_t *req;
    while (node->out_pos < node->out.len) {
        ssize_t n = send(node->fd, node->out.buf + node->out_pos, node->out.len - node->out_pos,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            kc_conn_close(c, node, KC_E_TRANSPORT, KC_E_TRANSPORT, strerror(errno));
            return;
        }
        node->out_pos += (size_t)n;
        c->m.bytes_sent += (uint64_t)n;
    }
    /* requests that expect no response are done once their last byte is written */
    while ((req = node->sending.head) && req->wire_end <= node->out_base + node->out_pos) {
        kc_reqq_pop(&node->sending);
        if (!req->done)
            kc_req_finish(c, req, KC_E_OK, NULL, 0, 0);
        kc_req_unwire(req);
    }
    if (node->out_pos == node->out.len) {
        node->out_base += node->out.len;
        kp_writer_reset(&node->out);
        node->out_pos = 0;
    }
    if (node->fd >= 0)
        kc_conn_epoll(c, node, node->out_pos < node->out.len);
}

/* Append one frame: size, request header, body from @p req (or the handshake body when
 * @p req is NULL). Returns 0, or a kc_err_t with the output unchanged. */
static int kc_conn_frame(kc_client_t *c, kc_node_t *node, kc_req_t *req, int16_t key, int16_t ver,
                         int32_t corr)
{
    kp_writer_t *wr = &node->out;
    size_t start = wr->len;
    kp_RequestHeader_t hdr;
    int16_t hv = kp_request_header_version(key, ver);
    int r = 0;

    kp_RequestHeader_init(&hdr);
    hdr.RequestApiKey = key;
    hdr.RequestApiVersion = ver;
    hdr.CorrelationId = corr;
    hdr.ClientId = kp_str(c->client_id);
    kp_write_int32(wr, 0);
    if (hv < 0 || kp_RequestHeader_encode(wr, &hdr, hv) != 0)
        r = KC_E_ENCODE;
    else if (req) {
        if (req->encode(wr, ver, req->enc_opaque) != 0)
            r = KC_E_ENCODE;
    } else {
        kp_ApiVersionsRequest_t av;
        kp_ApiVersionsRequest_init(&av);
        av.ClientSoftwareName = kp_str(c->sw_name);
        av.ClientSoftwareVersion = kp_str(c->sw_ver);
        /* a too-new version (tests) is sent with the newest body we have; the broker answers
         * from the header alone */
        if (kp_ApiVersionsRequest_encode(wr, &av, ver > KC_APIV_MAX ? KC_APIV_MAX : ver) != 0)
            r = KC_E_ENCODE;
    }
    if (r == 0 && wr->err)
        r = wr->err == KP_E_NOMEM ? KC_E_NOMEM : KC_E_ENCODE;
    if (r == 0 && wr->len - start - 4 > INT32_MAX)
        r = KC_E_ENCODE;
    if (r != 0) {
        wr->err = 0;
        wr->len = start;
        return r;
    }
    kp_writer_patch_int32(wr, start, (int32_t)(wr->len - start - 4));
    c->m.requests++;
    return 0;
}

static int32_t kc_conn_next_corr(kc_node_t *node)
{
    int32_t corr = node->next_corr;
    node->next_corr = corr == INT32_MAX ? 1 : corr + 1;
    return corr;
}

static void kc_conn_send_handshake(kc_client_t *c, kc_node_t *node, int16_t ver)
{
    node->hs_ver = ver;
    node->hs_corr = kc_conn_next_corr(node);
    if (kc_conn_frame(c, node, NULL, KP_APIKEY_ApiVersions, ver, node->hs_corr) != 0) {
        kc_conn_close(c, node, KC_E_TRANSPORT, KC_E_TRANSPORT, "cannot encode ApiVersions");
        return;
    }
    kc_log(c, KC_LOG_DEBUG, "node %d (%s): ApiVersions v%d sent", node->id, node->name, ver);
    kc_conn_send_bytes(c, node);
}

static const kc_apiver_t *kc_conn_apiver(const kc_node_t *node, int16_t key)
{
    for (uint32_t i = 0; i < node->nvers; i++)
        if (node->vers[i].key == key)
            return &node->vers[i];
    return NULL;
}

/* Move queued requests onto the wire while the in-flight window has room. */
static void kc_conn_fill(kc_client_t *c, kc_node_t *node)
{
    kc_req_t *req;
    while ((req = node->sendq.head) &&
           node->inflight.cnt + node->sending.cnt < (uint32_t)c->o.max_in_flight) {
        const kc_apiver_t *av = kc_conn_apiver(node, req->api_key);
        int16_t lo, hi;
        int r;
        kc_reqq_pop(&node->sendq);
        c->m.queued--;
        if (!av) {
            kc_req_finish(c, req, KC_E_NO_VERSION, NULL, 0, 0);
            continue;
        }
        hi = req->max_ver < av->max_ver ? req->max_ver : av->max_ver;
        lo = req->min_ver > av->min_ver ? req->min_ver : av->min_ver;
        if (hi < lo) {
            kc_log(c, KC_LOG_DEBUG,
                   "node %d: API %d: we want v%d..%d, the broker serves v%d..%d: no overlap",
                   node->id, req->api_key, req->min_ver, req->max_ver, av->min_ver, av->max_ver);
            kc_req_finish(c, req, KC_E_NO_VERSION, NULL, 0, 0);
            continue;
        }
        req->ver = hi;
        req->corr = kc_conn_next_corr(node);
        r = kc_conn_frame(c, node, req, req->api_key, hi, req->corr);
        if (r != 0) {
            kc_req_finish(c, req, r, NULL, 0, 0);
            continue;
        }
        req->in_wire = true;
        if (req->flags & KC_REQ_NO_RESPONSE) {
            req->wire_end = node->out_base + node->out.len;
            kc_reqq_push(&node->sending, req);
        } else {
            kc_reqq_push(&node->inflight, req);
            c->m.in_flight++;
        }
    }
}

/* ---- input -------------------------------------------------------------------------------- */

static void kc_conn_ready(kc_client_t *c, kc_node_t *node, const kp_ApiVersionsResponse_t *resp)
{
    kc_apiver_t *v = NULL;
    if (resp->ApiKeys.cnt > 0) {
        v = calloc((size_t)resp->ApiKeys.cnt, sizeof(*v));
        if (!v) {
            kc_conn_close(c, node, KC_E_NOMEM, KC_E_TRANSPORT, "out of memory");
            return;
        }
        for (int32_t i = 0; i < resp->ApiKeys.cnt; i++) {
            v[i].key = resp->ApiKeys.v[i].ApiKey;
            v[i].min_ver = resp->ApiKeys.v[i].MinVersion;
            v[i].max_ver = resp->ApiKeys.v[i].MaxVersion;
        }
    }
    free(node->vers);
    node->vers = v;
    node->nvers = resp->ApiKeys.cnt > 0 ? (uint32_t)resp->ApiKeys.cnt : 0;
    node->state = KC_CS_READY;
    node->failures = 0;
    c->m.connections_up++;
    kc_log(c, KC_LOG_INFO, "node %d (%s): ready (ApiVersions v%d, %u APIs)", node->id, node->name,
           node->hs_ver, node->nvers);
    kc_conn_fill(c, node);
    kc_conn_send_bytes(c, node);
}

/* The ApiVersions answer: ready, or retry at a lower version, or fail the connection. */
static int kc_conn_handshake_done(kc_client_t *c, kc_node_t *node, const uint8_t *body, size_t len)
{
    kp_reader_t rd;
    kp_arena_t ar;
    kp_ApiVersionsResponse_t resp;
    int16_t err;
    int r;

    if (len < 2)
        return KC_E_PROTOCOL;
    err = (int16_t)((body[0] << 8) | body[1]);
    kp_arena_init(&ar, 4u << 20);
    kp_ApiVersionsResponse_init(&resp);
    kp_reader_init(&rd, body, len);
    if (err == KP_ERR_UNSUPPORTED_VERSION && node->hs_ver > 0) {
        /* Kafka answers a too-new ApiVersions in the v0 layout with its own range for
         * ApiVersions; retry on this connection at min(theirs, ours), else at v0. */
        int16_t next = 0;
        if (kp_ApiVersionsResponse_decode(&rd, &ar, &resp, 0) == 0) {
            for (int32_t i = 0; i < resp.ApiKeys.cnt; i++)
                if (resp.ApiKeys.v[i].ApiKey == KP_APIKEY_ApiVersions)
                    next = resp.ApiKeys.v[i].MaxVersion;
        }
        if (next > KC_APIV_MAX)
            next = KC_APIV_MAX;
        if (next < 0 || next >= node->hs_ver)
            next = 0;
        kp_arena_free(&ar);
        kc_log(c, KC_LOG_DEBUG, "node %d: ApiVersions v%d unsupported, retrying with v%d", node->id,
               node->hs_ver, next);
        kc_conn_send_handshake(c, node, next);
        return 0;
    }
    r = kp_ApiVersionsResponse_decode(&rd, &ar, &resp, node->hs_ver);
    if (r != 0) {
        kp_arena_free(&ar);
        return KC_E_PROTOCOL;
    }
    if (resp.ErrorCode != 0) {
        char why[80];
        kp_arena_free(&ar);
        snprintf(why, sizeof(why), "ApiVersions error %d", resp.ErrorCode);
        kc_conn_close(c, node, KC_E_TRANSPORT, KC_E_TRANSPORT, why);
        return KC_E_TRANSPORT;
    }
    kc_conn_ready(c, node, &resp);
    kp_arena_free(&ar);
    return 0;
}

/* One complete frame (@p buf, owned, @p len bytes without the size field). */
static int kc_conn_on_frame(kc_client_t *c, kc_node_t *node, uint8_t *buf, size_t len)
{
    kp_reader_t rd;
    kp_arena_t ar;
    kp_ResponseHeader_t hdr;
    kc_req_t *req;
    int16_t hv;
    int32_t corr;

    kp_reader_init(&rd, buf, len);
    if (node->state == KC_CS_HANDSHAKE) {
        int r;
        corr = kp_read_int32(&rd); /* ApiVersions responses always use header v0 */
        if (rd.err || corr != node->hs_corr) {
            free(buf);
            return KC_E_PROTOCOL;
        }
        r = kc_conn_handshake_done(c, node, buf + 4, len - 4);
        free(buf);
        return r;
    }
    req = node->inflight.head;
    if (node->state != KC_CS_READY || !req) {
        free(buf);
        return KC_E_PROTOCOL;
    }
    hv = kp_response_header_version(req->api_key, req->ver);
    kp_arena_init(&ar, 1u << 20);
    kp_ResponseHeader_init(&hdr);
    if (hv < 0 || kp_ResponseHeader_decode(&rd, &ar, &hdr, hv) != 0 ||
        hdr.CorrelationId != req->corr) {
        kc_log(c, KC_LOG_WARN, "node %d (%s): bad response header (correlation id %d, expected %d)",
               node->id, node->name, rd.err ? -1 : hdr.CorrelationId, req->corr);
        kp_arena_free(&ar);
        free(buf);
        return KC_E_PROTOCOL;
    }
    kp_arena_free(&ar);
    kc_reqq_pop(&node->inflight);
    c->m.in_flight--;
    c->m.responses++;
    if (!req->done)
        kc_req_finish(c, req, KC_E_OK, buf, rd.pos, len - rd.pos);
    else
        free(buf); /* cancelled or timed out: the answer is dropped */
    kc_req_unwire(req);
    /* the window has room again */
    kc_conn_fill(c, node);
    return 0;
}

/* The frame in node->rbuf is complete: hand it over. Returns 0, or the error that closed the
 * connection. */
static int kc_conn_frame_done(kc_client_t *c, kc_node_t *node)
{
    uint8_t *frame = node->rbuf;
    size_t flen = node->rlen;
    int r;
    node->rbuf = NULL;
    node->rlen = node->rgot = node->rcap = 0;
    node->hdr_got = 0;
    r = kc_conn_on_frame(c, node, frame, flen);
    if (r != 0) {
        if (node->state != KC_CS_DOWN) {
            c->m.protocol_errors++;
            kc_conn_close(c, node, r, KC_E_TRANSPORT, kc_err_str(r));
        }
        return r;
    }
    return node->state == KC_CS_DOWN ? KC_E_TRANSPORT : 0;
}

/* Room for at least @p need more bytes of the current frame. The buffer at most doubles per
 * step and never exceeds the frame, so memory stays within twice what actually arrived.
 * 0 or KC_E_NOMEM (connection closed). */
static int kc_conn_rx_grow(kc_client_t *c, kc_node_t *node, size_t need)
{
    size_t cap = node->rcap;
    uint8_t *nb;
    if (node->rgot + need <= cap)
        return 0;
    while (cap < node->rgot + need)
        cap *= 2;
    if (cap > node->rlen)
        cap = node->rlen;
    nb = realloc(node->rbuf, cap);
    if (!nb) {
        kc_conn_close(c, node, KC_E_NOMEM, KC_E_TRANSPORT, "out of memory");
        return KC_E_NOMEM;
    }
    node->rbuf = nb;
    node->rcap = cap;
    if (cap > c->m.rx_buffer_peak)
        c->m.rx_buffer_peak = cap;
    return 0;
}

int kc_conn_input(kc_client_t *c, kc_node_t *node, const uint8_t *data, size_t len, int64_t now)
{
    (void)now;
    c->m.bytes_received += len;
    while (len > 0) {
        size_t n;
        if (node->hdr_got < 4) {
            uint32_t size;
            n = 4 - node->hdr_got < len ? 4 - node->hdr_got : len;
            memcpy(node->hdr + node->hdr_got, data, n);
            node->hdr_got += n;
            data += n;
            len -= n;
            if (node->hdr_got < 4)
                break;
            size = (uint32_t)node->hdr[0] << 24 | (uint32_t)node->hdr[1] << 16 |
                   (uint32_t)node->hdr[2] << 8 | node->hdr[3];
            if (size > (uint32_t)c->o.max_response_size) {
                char why[96];
                snprintf(why, sizeof(why), "response frame of %u bytes exceeds the maximum %d",
                         size, c->o.max_response_size);
                c->m.protocol_errors++;
                kc_conn_close(c, node, KC_E_TOO_LARGE, KC_E_TRANSPORT, why);
                return KC_E_TOO_LARGE;
            }
            if (size < 4) {
                c->m.protocol_errors++;
                kc_conn_close(c, node, KC_E_PROTOCOL, KC_E_TRANSPORT, "response frame too short");
                return KC_E_PROTOCOL;
            }
            node->rlen = size;
            node->rgot = 0;
            /* allocate as the bytes arrive, not as the length claims */
            node->rcap = size < KC_RX_CHUNK ? size : KC_RX_CHUNK;
            node->rbuf = malloc(node->rcap);
            if (!node->rbuf) {
                kc_conn_close(c, node, KC_E_NOMEM, KC_E_TRANSPORT, "out of memory");
                return KC_E_NOMEM;
            }
            if (node->rcap > c->m.rx_buffer_peak)
                c->m.rx_buffer_peak = node->rcap;
            continue;
        }
        n = node->rlen - node->rgot < len ? node->rlen - node->rgot : len;
        if (kc_conn_rx_grow(c, node, n) != 0)
            return KC_E_NOMEM;
        memcpy(node->rbuf + node->rgot, data, n);
        node->rgot += n;
        data += n;
        len -= n;
        if (node->rgot == node->rlen) {
            int r = kc_conn_frame_done(c, node);
            if (r != 0)
                return r;
        }
    }
    return 0;
}

/* Read what the socket has (the seam a TLS layer replaces). Small frames and frame headers go
 * through a stack buffer; the rest of a large frame is received straight into its buffer. */
static void kc_conn_recv_bytes(kc_client_t *c, kc_node_t *node, int64_t now)
{
    uint8_t buf[16384];
    /* bounded, so one busy connection cannot starve the others in this poll round */
    for (int rounds = 0; rounds < 64 && node->fd >= 0; rounds++) {
        bool direct = node->rbuf && node->rlen - node->rgot > sizeof(buf);
        uint8_t *dst = buf;
        size_t room = sizeof(buf);
        ssize_t n;
        if (direct) {
            if (node->rgot == node->rcap && kc_conn_rx_grow(c, node, 1) != 0)
                return;
            dst = node->rbuf + node->rgot;
            room = node->rcap - node->rgot;
        }
        n = recv(node->fd, dst, room, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                kc_conn_close(c, node, KC_E_TRANSPORT, KC_E_TRANSPORT, strerror(errno));
            return;
        }
        if (n == 0) {
            kc_conn_close(c, node, KC_E_TRANSPORT, KC_E_TRANSPORT, "closed by the server");
            return;
        }
        if (!direct) {
            if (kc_conn_input(c, node, buf, (size_t)n, now) != 0)
                return;
            continue;
        }
        c->m.bytes_received += (uint64_t)n;
        node->rgot += (size_t)n;
        if (node->rgot == node->rlen && kc_conn_frame_done(c, node) != 0)
            return;
    }
}

/* ---- connect ------------------------------------------------------------------------------ */

static void kc_conn_connected(kc_client_t *c, kc_node_t *node, int64_t now)
{
    node->state = KC_CS_HANDSHAKE;
    node->next_corr = 1;
    node->state_deadline = now + c->o.connect_timeout_ms;
    kc_conn_send_handshake(c, node, (int16_t)c->o.handshake_version);
}

void kc_conn_adopt(kc_client_t *c, kc_node_t *node, int fd, int64_t now)
{
    struct epoll_event ev = {.events = EPOLLIN};
    node->fd = fd;
    node->conn_gen++;
    node->epoll_out = false;
    ev.data.u64 = kc_conn_key(node);
    (void)epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev);
    c->m.connects++;
    kc_conn_connected(c, node, now);
}

void kc_conn_start(kc_client_t *c, kc_node_t *node, int64_t now)
{
    const struct sockaddr *sa;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT};
    int fd, one = 1, r;

    if (node->addr_next >= node->naddrs) {
        /* every address was tried (or none is known yet): look the name up again */
        node->addr_next = 0;
        node->naddrs = 0;
        if (kc_resolve_start(c, node) != 0) {
            node->state = KC_CS_RESOLVING; /* so that close counts it as a failure */
            kc_conn_close(c, node, KC_E_NOMEM, KC_E_NOMEM, "out of memory");
            return;
        }
        if (node->resolve_done == 0) {
            node->state = KC_CS_RESOLVING;
            node->state_deadline = now + c->o.connect_timeout_ms;
            return;
        }
        if (node->naddrs == 0) {
            node->state = KC_CS_RESOLVING;
            kc_conn_close(c, node, KC_E_RESOLVE, KC_E_RESOLVE, "cannot resolve the host name");
            return;
        }
    }
    sa = (const struct sockaddr *)&node->addrs[node->addr_next];
    c->m.connects++;
    node->state = KC_CS_CONNECTING;
    node->state_deadline = now + c->o.connect_timeout_ms;
    fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        node->addr_next++;
        kc_conn_close(c, node, KC_E_TRANSPORT, KC_E_TRANSPORT, strerror(errno));
        return;
    }
    if (sa->sa_family != AF_UNIX)
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (c->o.socket_send_buffer > 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &c->o.socket_send_buffer, sizeof(int));
    if (c->o.socket_recv_buffer > 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &c->o.socket_recv_buffer, sizeof(int));
    node->fd = fd;
    node->conn_gen++;
    node->epoll_out = true;
    ev.data.u64 = kc_conn_key(node);
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        node->addr_next++;
        kc_conn_close(c, node, KC_E_TRANSPORT, KC_E_TRANSPORT, strerror(errno));
        return;
    }
    do
        r = connect(fd, sa, node->addrlens[node->addr_next]);
    while (r != 0 && errno == EINTR);
    if (r != 0 && errno != EINPROGRESS) {
        node->addr_next++;
        kc_conn_close(c, node, KC_E_TRANSPORT, KC_E_TRANSPORT, strerror(errno));
        return;
    }
    /* the connection's outcome shows up as EPOLLOUT (also for an immediate success) */
}

void kc_conn_event(kc_client_t *c, kc_node_t *node, uint32_t events, int64_t now)
{
    if (node->state == KC_CS_CONNECTING) {
        int err = 0;
        socklen_t elen = sizeof(err);
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        if (getsockopt(node->fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
            err = errno;
        if (err == 0 && (events & (EPOLLERR | EPOLLHUP)))
            err = ECONNRESET;
        if (err != 0) {
            node->addr_next++;
            kc_conn_close(c, node, KC_E_TRANSPORT, KC_E_TRANSPORT, strerror(err));
            return;
        }
        node->addr_next = 0; /* keep using the address that worked */
        kc_log(c, KC_LOG_DEBUG, "node %d (%s): connected", node->id, node->name);
        kc_conn_connected(c, node, now);
        return;
    }
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        kc_conn_recv_bytes(c, node, now);
    if (node->fd >= 0 && node->state != KC_CS_DOWN && (events & EPOLLOUT))
        kc_conn_send_bytes(c, node);
}

/* ---- timers -------------------------------------------------------------------------------- */

static bool kc_conn_expire_wire(kc_client_t *c, kc_reqq_t *q, int64_t now)
{
    bool any = false;
    for (kc_req_t *req = q->head; req; req = req->next)
        if (!req->done && req->deadline <= now) {
            kc_req_finish(c, req, KC_E_TIMED_OUT, NULL, 0, 0);
            any = true;
        }
    return any;
}

void kc_conn_service(kc_client_t *c, kc_node_t *node, int64_t now)
{
    kc_req_t **pp = &node->sendq.head, *req, *prev = NULL;
    bool expired;

    /* queued requests past their deadline */
    while ((req = *pp)) {
        if (req->deadline > now) {
            prev = req;
            pp = &req->next;
            continue;
        }
        *pp = req->next;
        if (node->sendq.tail == req)
            node->sendq.tail = prev;
        node->sendq.cnt--;
        c->m.queued--;
        req->next = NULL;
        kc_req_finish(c, req, KC_E_TIMED_OUT, NULL, 0, 0);
    }
    /* A request on the wire past its deadline: the connection's state is unknown (a silent
     * or stuck broker), so close it, as Kafka clients do; the others in flight are retriable. */
    expired = kc_conn_expire_wire(c, &node->inflight, now);
    expired = kc_conn_expire_wire(c, &node->sending, now) || expired;
    if (expired)
        kc_conn_close(c, node, KC_E_TRANSPORT, KC_E_TRANSPORT, "request timed out");

    switch (node->state) {
    case KC_CS_RESOLVING:
        if (node->resolve_done > 0 && node->naddrs > 0) {
            node->state = KC_CS_DOWN;
            kc_conn_start(c, node, now);
        } else if (node->resolve_done < 0) {
            kc_conn_close(c, node, KC_E_RESOLVE, KC_E_RESOLVE, "cannot resolve the host name");
        } else if (node->state_deadline <= now) {
            kc_conn_close(c, node, KC_E_RESOLVE, KC_E_RESOLVE, "name resolution timed out");
        }
        break;
    case KC_CS_CONNECTING:
    case KC_CS_HANDSHAKE:
        if (node->state_deadline <= now) {
            node->addr_next++;
            kc_conn_close(c, node, KC_E_TRANSPORT, KC_E_TRANSPORT,
                          node->state == KC_CS_CONNECTING ? "connect timed out"
                                                          : "ApiVersions timed out");
        }
        break;
    case KC_CS_READY:
        kc_conn_fill(c, node);
        if (node->out_pos < node->out.len)
            kc_conn_send_bytes(c, node);
        break;
    case KC_CS_DOWN:
        break;
    }
    if (node->state == KC_CS_DOWN && node->sendq.head && node->backoff_until <= now)
        kc_conn_start(c, node, now);
}

int64_t kc_conn_next_timer(kc_client_t *c, const kc_node_t *node)
{
    int64_t t = INT64_MAX;
    (void)c;
    for (const kc_req_t *req = node->sendq.head; req; req = req->next)
        if (req->deadline < t)
            t = req->deadline;
    for (const kc_req_t *req = node->inflight.head; req; req = req->next)
        if (!req->done && req->deadline < t)
            t = req->deadline;
    for (const kc_req_t *req = node->sending.head; req; req = req->next)
        if (!req->done && req->deadline < t)
            t = req->deadline;
    if (node->state == KC_CS_DOWN && node->sendq.head && node->backoff_until < t)
        t = node->backoff_until;
    if (node->state != KC_CS_DOWN && node->state != KC_CS_READY && node->state_deadline < t)
        t = node->state_deadline;
    return t;
}
