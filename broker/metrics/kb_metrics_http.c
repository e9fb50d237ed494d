#include "kb_metrics_http.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kb_log.h"
#include "kb_sock.h"
#include "kb_time.h"

#define KB_MHTTP_DEADLINE_MS 2000
#define KB_MHTTP_MAX_REQ     8192

struct kb_metrics_http_s {
    kb_metrics_t *m;
    int lfd;
    int stop_fd;
    int port;
    pthread_t thr;
};

/* Write all of @p p, polling for writability until the deadline. */
static int kb_mhttp_write_all(int fd, const char *p, size_t len, int64_t deadline)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        int64_t left = deadline - kb_time_mono_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return -1;
    }
    return 0;
}

static void kb_mhttp_reply(int fd, int64_t deadline, const char *status, const char *ctype,
                           const char *body, size_t blen, int head_only)
{
    char hdr[512];
    int n = snprintf(hdr, sizeof(hdr),
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, ctype, blen);
    if (kb_mhttp_write_all(fd, hdr, (size_t)n, deadline) == 0 && !head_only)
        kb_mhttp_write_all(fd, body, blen, deadline);
}

static void kb_mhttp_serve(kb_metrics_http_t *h, int fd)
{
    char req[KB_MHTTP_MAX_REQ + 1];
    size_t got = 0;
    int64_t deadline = kb_time_mono_ms() + KB_MHTTP_DEADLINE_MS;
    char method[16], path[1024];
    int head_only;

    /* Read the request head (we ignore any body). */
    while (!memmem(req, got, "\r\n\r\n", 4) && !memmem(req, got, "\n\n", 2)) {
        ssize_t n;
        if (got == KB_MHTTP_MAX_REQ) {
            kb_mhttp_reply(fd, deadline, "431 Request Header Fields Too Large", "text/plain", "", 0,
                           0);
            return;
        }
        n = recv(fd, req + got, KB_MHTTP_MAX_REQ - got, 0);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            return;
        int64_t left = deadline - kb_time_mono_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return;
    }
    req[got] = '\0';
    if (sscanf(req, "%15s %1023s", method, path) != 2) {
        kb_mhttp_reply(fd, deadline, "400 Bad Request", "text/plain", "bad request\n", 12, 0);
        return;
    }
    head_only = strcmp(method, "HEAD") == 0;
    if (strcmp(method, "GET") != 0 && !head_only) {
        kb_mhttp_reply(fd, deadline, "405 Method Not Allowed", "text/plain", "method not allowed\n",
                       19, 0);
        return;
    }
    char *q = strchr(path, '?');
    if (q)
        *q = '\0';
    if (strcmp(path, "/metrics") == 0) {
        size_t len = 0;
        char *body = kb_metrics_render(h->m, &len);
        if (!body) {
            kb_mhttp_reply(fd, deadline, "500 Internal Server Error", "text/plain", "", 0, 0);
            return;
        }
        kb_mhttp_reply(fd, deadline, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body,
                       len, head_only);
        free(body);
    } else if (strcmp(path, "/") == 0) {
        static const char idx[] = "kbroker metrics: GET /metrics\n";
        kb_mhttp_reply(fd, deadline, "200 OK", "text/plain; charset=utf-8", idx, sizeof(idx) - 1,
                       head_only);
    } else {
        kb_mhttp_reply(fd, deadline, "404 Not Found", "text/plain", "not found\n", 10, head_only);
    }
}

static void *kb_mhttp_main(void *arg)
{
    kb_metrics_http_t *h = arg;
    for (;;) {
        struct pollfd pfd[2] = {{.fd = h->lfd, .events = POLLIN},
                                {.fd = h->stop_fd, .events = POLLIN}};
        int fd;
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            kb_log_error("metrics", "poll: %s", strerror(errno));
            break;
        }
        if (pfd[1].revents)
            break;
        fd = accept4(h->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        kb_mhttp_serve(h, fd);
        close(fd);
    }
    return NULL;
}

kb_metrics_http_t *kb_metrics_http_start(kb_metrics_t *m, const char *host, int port, char *errstr,
                                         size_t errstr_size)
{
    kb_metrics_http_t *h = calloc(1, sizeof(*h));
    if (!h) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    h->m = m;
    h->stop_fd = -1;
    h->lfd = kb_sock_listen(host, port, 16, errstr, errstr_size);
    if (h->lfd < 0)
        goto free_h;
    h->port = kb_sock_local_port(h->lfd);
    h->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (h->stop_fd < 0) {
        snprintf(errstr, errstr_size, "eventfd: %s", strerror(errno));
        goto close_lfd;
    }
    if (pthread_create(&h->thr, NULL, kb_mhttp_main, h) != 0) {
        snprintf(errstr, errstr_size, "cannot start the metrics thread");
        goto close_stop;
    }
    return h;
close_stop:
    close(h->stop_fd);
close_lfd:
    close(h->lfd);
free_h:
    free(h);
    return NULL;
}

int kb_metrics_http_port(const kb_metrics_http_t *h)
{
    return h->port;
}

void kb_metrics_http_stop(kb_metrics_http_t *h)
{
    uint64_t one = 1;
    if (!h)
        return;
    if (write(h->stop_fd, &one, sizeof(one)) < 0)
        kb_log_warn("metrics", "cannot wake the metrics thread: %s", strerror(errno));
    pthread_join(h->thr, NULL);
    close(h->stop_fd);
    close(h->lfd);
    free(h);
}
