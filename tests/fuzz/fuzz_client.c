/*
 * fuzz_client.c -- libFuzzer target for the client's response path (proto/client): the input
 * is what a server sends on one connection.
 *
 * Byte 0 bit 0: 1 = the connection is already past the handshake (a canned, valid ApiVersions
 * answer is fed first), 0 = the input itself answers the ApiVersions request. Byte 1 sets the
 * chunk size the rest is fed in (1..64 bytes per read). Before the input, four requests are
 * queued: Metadata (raw v1), Metadata (message, negotiated), Produce without response, and a
 * Fetch (raw v4). The connection is a socketpair, so the requests really are written.
 * Checks: no crash, no leak, no unbounded allocation (max_response_size 1 MiB), and every
 * callback runs exactly once by the time the client is destroyed.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kc_client_int.h"
#include "kp_msgs.h"

#define NREQ 4

static void fz_cb(kc_client_t *c, int err, int16_t ver, const uint8_t *body, size_t len,
                  void *opaque)
{
    int *calls = opaque;
    (void)c;
    (void)ver;
    if (err != KC_E_OK ? body != NULL || len != 0 : len != 0 && body == NULL)
        abort();
    (*calls)++;
}

/* A valid ApiVersions v3 answer for correlation id 1. */
static void fz_handshake(kp_writer_t *wr)
{
    static const int16_t keys[] = {KP_APIKEY_Produce, KP_APIKEY_Fetch, KP_APIKEY_Metadata,
                                   KP_APIKEY_ApiVersions};
    kp_ApiVersionsResponse_t resp;
    kp_ApiVersionsResponse_ApiVersion_t av[4];
    size_t start = wr->len;
    kp_ApiVersionsResponse_init(&resp);
    for (int i = 0; i < 4; i++) {
        const kp_api_info_t *a = kp_api_lookup(keys[i]);
        memset(&av[i], 0, sizeof(av[i]));
        av[i].ApiKey = keys[i];
        av[i].MinVersion = a->min_ver;
        av[i].MaxVersion = keys[i] == KP_APIKEY_ApiVersions ? 3 : a->max_ver;
    }
    resp.ApiKeys.v = av;
    resp.ApiKeys.cnt = 4;
    kp_write_int32(wr, 0);
    kp_write_int32(wr, 1);
    kp_ApiVersionsResponse_encode(wr, &resp, 3);
    kp_writer_patch_int32(wr, start, (int32_t)(wr->len - start - 4));
}

static void fz_drain(int fd)
{
    uint8_t buf[4096];
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
}

static void fz_feed(kc_client_t *c, const uint8_t *p, size_t n)
{
    kc_node_t *node;
    pthread_mutex_lock(&c->lock);
    node = kc_node_find(c, 1);
    if (node && node->state != KC_CS_DOWN)
        kc_conn_input(c, node, p, n, kc_now_ms());
    pthread_mutex_unlock(&c->lock);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t md_v1[4] = {0, 0, 0, 0};
    static const uint8_t fetch_v4[] = {0xff, 0xff, 0xff, 0xff, 0, 0, 1, 0xf4, 0, 0, 0,
                                       1,    0,    0x10, 0,    0, 0, 0, 0,    0, 0};
    int calls[NREQ] = {0};
    kc_opts_t o;
    kc_client_t *c;
    kp_MetadataRequest_t mr;
    kc_node_t *node;
    int sv[2];
    size_t chunk;

    if (size < 2)
        return 0;
    kc_opts_init(&o);
    o.max_response_size = 1 << 20;
    o.reconnect_backoff_ms = 600000; /* never reconnect during one input */
    o.reconnect_backoff_max_ms = 600000;
    c = kc_client_new(&o, NULL, 0);
    if (!c)
        abort();
    kc_client_node_set(c, 1, "127.0.0.1", 9);
    kp_MetadataRequest_init(&mr);
    mr.Topics.cnt = 0;
    if (kc_request_raw(c, 1, KP_APIKEY_Metadata, 1, md_v1, sizeof(md_v1), 60000, 0, fz_cb,
                       &calls[0]) <= 0 ||
        kc_request_msg(c, 1, &kp_MetadataRequest_desc, -1, &mr, 60000, 0, fz_cb, &calls[1]) <= 0 ||
        kc_request_raw(c, 1, KP_APIKEY_Produce, 3, "x", 1, 60000, KC_REQ_NO_RESPONSE, fz_cb,
                       &calls[2]) <= 0 ||
        kc_request_raw(c, 1, KP_APIKEY_Fetch, 4, fetch_v4, sizeof(fetch_v4), 60000, 0, fz_cb,
                       &calls[3]) <= 0)
        abort();
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        abort();

    pthread_mutex_lock(&c->lock);
    node = kc_node_find(c, 1);
    kc_conn_adopt(c, node, sv[0], kc_now_ms());
    pthread_mutex_unlock(&c->lock);
    if (data[0] & 1) {
        kp_writer_t wr;
        kp_writer_init(&wr);
        fz_handshake(&wr);
        fz_feed(c, wr.buf, wr.len);
        kp_writer_free(&wr);
    }
    kc_client_poll(c, 0);
    fz_drain(sv[1]);

    chunk = 1 + data[1] % 64;
    data += 2;
    size -= 2;
    while (size > 0) {
        size_t n = size < chunk ? size : chunk;
        fz_feed(c, data, n);
        kc_client_poll(c, 0);
        fz_drain(sv[1]);
        data += n;
        size -= n;
    }
    kc_client_destroy(c);
    close(sv[1]);
    for (int i = 0; i < NREQ; i++)
        if (calls[i] != 1)
            abort();
    return 0;
}
