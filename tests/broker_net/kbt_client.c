#include "kbt_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t kbt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int kbt_connect(int port)
{
    struct sockaddr_in sa;
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

int kbt_send_all(int fd, const void *p, size_t len)
{
    const uint8_t *b = p;
    while (len > 0) {
        ssize_t n = send(fd, b, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

int kbt_build_apiversions(kp_writer_t *wr, int16_t ver, int32_t corr, const char *client_id,
                          const char *sw_name, const char *sw_version)
{
    kp_RequestHeader_t hdr;
    kp_ApiVersionsRequest_t rq;
    size_t at = wr->len;
    int16_t hv = kp_request_header_version(KP_APIKEY_ApiVersions, ver);

    kp_RequestHeader_init(&hdr);
    hdr.RequestApiKey = KP_APIKEY_ApiVersions;
    hdr.RequestApiVersion = ver;
    hdr.CorrelationId = corr;
    hdr.ClientId = kp_str(client_id);
    kp_ApiVersionsRequest_init(&rq);
    rq.ClientSoftwareName = kp_str(sw_name ? sw_name : "kbt");
    rq.ClientSoftwareVersion = kp_str(sw_version ? sw_version : "1.0");
    kp_write_int32(wr, 0);
    if (kp_RequestHeader_encode(wr, &hdr, hv) != 0)
        return -1;
    /* Versions beyond the codec's range: send the newest body we know (the broker does not
     * parse the body of a too-new ApiVersions). */
    if (kp_ApiVersionsRequest_encode(wr, &rq, ver > 5 ? 5 : ver) != 0)
        return -1;
    kp_writer_patch_int32(wr, at, (int32_t)(wr->len - at - 4));
    return wr->err ? -1 : 0;
}

/* Read exactly @p len bytes before @p deadline. 0, -1 (error/EOF) or -2 (timeout). */
static int kbt_read_full(int fd, uint8_t *p, size_t len, int64_t deadline)
{
    while (len > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int64_t left = deadline - kbt_now_ms();
        ssize_t n;
        if (left <= 0)
            return -2;
        if (poll(&pfd, 1, (int)left) == 0)
            return -2;
        n = recv(fd, p, len, 0);
        if (n == 0)
            return -1;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int kbt_recv_frame(int fd, uint8_t **bufp, size_t *lenp, int timeout_ms)
{
    int64_t deadline = kbt_now_ms() + timeout_ms;
    uint8_t sz[4];
    uint32_t len;
    uint8_t *buf;
    int r = kbt_read_full(fd, sz, 4, deadline);
    if (r)
        return r;
    len = ((uint32_t)sz[0] << 24) | ((uint32_t)sz[1] << 16) | ((uint32_t)sz[2] << 8) | sz[3];
    if (len > (64u << 20))
        return -1;
    buf = malloc(len ? len : 1);
    if (!buf)
        return -1;
    r = kbt_read_full(fd, buf, len, deadline);
    if (r) {
        free(buf);
        return r;
    }
    *bufp = buf;
    *lenp = len;
    return 0;
}

int kbt_wait_closed(int fd, int timeout_ms)
{
    int64_t deadline = kbt_now_ms() + timeout_ms;
    uint8_t tmp[4096];
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int64_t left = deadline - kbt_now_ms();
        ssize_t n;
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return 0;
        n = recv(fd, tmp, sizeof(tmp), 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            return 1;
    }
}

int kbt_parse_apiversions(const uint8_t *buf, size_t len, int16_t ver, kp_arena_t *ar,
                          int32_t *corr, kp_ApiVersionsResponse_t *out)
{
    kp_reader_t rd;
    kp_reader_init(&rd, buf, len);
    *corr = kp_read_int32(&rd); /* response header v0, always, for ApiVersions */
    if (kp_ApiVersionsResponse_decode(&rd, ar, out, ver) != 0)
        return -1;
    return kp_reader_remaining(&rd) == 0 ? 0 : -1;
}

int kbt_wait_exit(pid_t pid, int timeout_ms)
{
    int pfd = pidfd_open(pid, 0), st;
    struct pollfd p = {.fd = pfd, .events = POLLIN};

    if (pfd < 0)
        return -1;
    if (poll(&p, 1, timeout_ms) <= 0) {
        close(pfd);
        return -1;
    }
    close(pfd);
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
