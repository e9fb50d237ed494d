#include "kr_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ time and randomness */

int64_t kr_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t kr_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

uint64_t kr_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint32_t kr_rand_below(uint64_t *s, uint32_t n)
{
    return (uint32_t)(kr_rand(s) % n);
}

/* ------------------------------------------------------------------ sockets */

static int kr_poll1(int fd, short events, int64_t deadline_ms)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int64_t left = deadline_ms - kr_now_ms();
        int r;
        if (left < 0)
            left = 0;
        r = poll(&p, 1, (int)(left > 60000 ? 60000 : left));
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0 && kr_now_ms() < deadline_ms)
            continue;
        return r < 0 ? -1 : r;
    }
}

int kr_connect(const char *host, int port, int timeout_ms)
{
    struct sockaddr_in sa;
    int one = 1, fd, err = 0;
    socklen_t elen = sizeof(err);

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
        return fd;
    if (errno != EINPROGRESS)
        goto fail;
    if (kr_poll1(fd, POLLOUT, kr_now_ms() + timeout_ms) <= 0)
        goto fail;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0)
        goto fail;
    return fd;
fail:
    close(fd);
    return -1;
}

void kr_close_rst(int fd)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

int kr_send_all(int fd, const void *p, size_t len, int64_t deadline_ms)
{
    const uint8_t *b = p;
    while (len > 0) {
        ssize_t n = send(fd, b, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return -1;
            if (kr_now_ms() >= deadline_ms)
                return -2;
            if (kr_poll1(fd, POLLOUT, deadline_ms) < 0)
                return -1;
            continue;
        }
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read exactly @p len bytes. KR_RX_FRAME (0), KR_RX_CLOSED or KR_RX_TIMEOUT. */
static kr_rx_t kr_read_full(int fd, uint8_t *p, size_t len, int64_t deadline_ms)
{
    while (len > 0) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n == 0)
            return KR_RX_CLOSED;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return KR_RX_CLOSED;
            if (kr_now_ms() >= deadline_ms)
                return KR_RX_TIMEOUT;
            if (kr_poll1(fd, POLLIN, deadline_ms) < 0)
                return KR_RX_CLOSED;
            continue;
        }
        p += n;
        len -= (size_t)n;
    }
    return KR_RX_FRAME;
}

kr_rx_t kr_recv_frame(int fd, uint8_t **bufp, size_t *lenp, int64_t deadline_ms)
{
    uint8_t sz[4];
    int32_t len;
    uint8_t *buf;
    kr_rx_t r = kr_read_full(fd, sz, 4, deadline_ms);
    if (r != KR_RX_FRAME)
        return r;
    len = (int32_t)(((uint32_t)sz[0] << 24) | ((uint32_t)sz[1] << 16) | ((uint32_t)sz[2] << 8) |
                    (uint32_t)sz[3]);
    if (len < 0 || len > (256 << 20))
        return KR_RX_BAD;
    buf = malloc(len ? (size_t)len : 1);
    if (!buf)
        return KR_RX_BAD;
    r = kr_read_full(fd, buf, (size_t)len, deadline_ms);
    if (r != KR_RX_FRAME) {
        free(buf);
        return r;
    }
    *bufp = buf;
    *lenp = (size_t)len;
    return KR_RX_FRAME;
}

bool kr_wait_closed(int fd, int64_t deadline_ms)
{
    uint8_t tmp[16384];
    for (;;) {
        ssize_t n = recv(fd, tmp, sizeof(tmp), MSG_DONTWAIT);
        if (n == 0)
            return true;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return true;
            if (kr_now_ms() >= deadline_ms)
                return false;
            if (kr_poll1(fd, POLLIN, deadline_ms) < 0)
                return true;
        }
    }
}

/* ------------------------------------------------------------------ requests */

size_t kr_req_begin(kp_writer_t *wr, int16_t key, int16_t ver, int32_t corr, const char *cid)
{
    size_t at = wr->len;
    int16_t hv = kp_request_header_version(key, ver);
    kp_RequestHeader_t hdr;

    kp_RequestHeader_init(&hdr);
    hdr.RequestApiKey = key;
    hdr.RequestApiVersion = ver;
    hdr.CorrelationId = corr;
    hdr.ClientId = cid ? kp_str(cid) : KP_STR_NULL;
    kp_write_int32(wr, 0);
    if (kp_RequestHeader_encode(wr, &hdr, hv < 1 ? 1 : hv) != 0 && !wr->err)
        kp_writer_fail(wr, KP_E_INVALID);
    return at;
}

void kr_req_end(kp_writer_t *wr, size_t at)
{
    kp_writer_patch_int32(wr, at, (int32_t)(wr->len - at - 4));
}

int kr_req_build(kp_writer_t *wr, int16_t key, int16_t ver, int32_t corr, const char *cid,
                 const kp_msg_desc_t *d, const void *msg)
{
    size_t at = kr_req_begin(wr, key, ver, corr, cid);
    int r = kp_msg_encode(d, wr, msg, ver);
    if (r)
        return r;
    kr_req_end(wr, at);
    return wr->err;
}

int kr_resp_open(const uint8_t *buf, size_t len, int16_t key, int16_t ver, int32_t corr,
                 kp_reader_t *body)
{
    kp_reader_t rd;
    int16_t hv = kp_response_header_version(key, ver);
    kp_reader_init(&rd, buf, len);
    if (kp_read_int32(&rd) != corr || rd.err)
        return -1;
    if (hv >= 1) {
        uint32_t n = kp_read_uvarint(&rd);
        for (uint32_t i = 0; i < n && !rd.err; i++) {
            (void)kp_read_uvarint(&rd);
            kp_reader_skip(&rd, kp_read_uvarint(&rd));
        }
    }
    if (rd.err)
        return -1;
    kp_reader_init(body, buf + rd.pos, len - rd.pos);
    return 0;
}

int kr_resp_decode(const uint8_t *buf, size_t len, int16_t key, int16_t ver, int32_t corr,
                   kp_arena_t *ar, void *msg)
{
    const kp_api_info_t *api = kp_api_lookup(key);
    kp_reader_t body;
    if (!api || kr_resp_open(buf, len, key, ver, corr, &body) != 0)
        return -1;
    if (kp_msg_decode(api->resp, &body, ar, msg, ver) != 0 || kp_reader_remaining(&body) != 0)
        return -1;
    return 0;
}

/* ------------------------------------------------------------------ a kbroker child */

char *kr_read_file(const char *path, size_t *lenp)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, len = 0;
    if (!f)
        return NULL;
    for (;;) {
        size_t n;
        if (cap - len < 65536) {
            char *nb = realloc(buf, cap + 65536 + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
            cap += 65536;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    fclose(f);
    buf[len] = '\0';
    if (lenp)
        *lenp = len;
    return buf;
}

/* Append "key=opt" to an existing sanitizer option string from the environment. */
static void kr_env_opts(const char *name, const char *add)
{
    const char *old = getenv(name);
    char buf[2048];
    snprintf(buf, sizeof(buf), "%s%s%s", old && *old ? old : "", old && *old ? ":" : "", add);
    setenv(name, buf, 1);
}

int kr_broker_start(kr_broker_t *b, const char *bin, const char *dir, const char *const *extra,
                    int timeout_ms, char *err, size_t errlen)
{
    char path[700], line[4096], opt[800];
    size_t got = 0;
    int p[2];
    FILE *f;
    int64_t dl = kr_now_ms() + timeout_ms;

    memset(b, 0, sizeof(*b));
    b->pid = -1;
    b->pidfd = -1;
    snprintf(b->dir, sizeof(b->dir), "%s", dir);
    snprintf(b->stderr_log, sizeof(b->stderr_log), "%s/broker.stderr", dir);
    snprintf(b->asan_prefix, sizeof(b->asan_prefix), "%s/sanitizer", dir);
    snprintf(path, sizeof(path), "%s/data", dir);
    mkdir(dir, 0755);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/server.properties", dir);
    f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f,
            "# written by tests/robust\nnode.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\n"
            "log.dirs=%s/data\nnum.network.threads=2\nnum.io.threads=2\n",
            dir);
    for (size_t i = 0; extra && extra[i]; i++)
        fprintf(f, "%s\n", extra[i]);
    fclose(f);

    if (pipe2(p, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    /* Our own sanitizer runtime read its options at start; these only reach the child. */
    snprintf(opt, sizeof(opt), "detect_leaks=1:log_path=%s-asan", b->asan_prefix);
    kr_env_opts("ASAN_OPTIONS", opt);
    snprintf(opt, sizeof(opt), "print_stacktrace=1:log_path=%s-ubsan", b->asan_prefix);
    kr_env_opts("UBSAN_OPTIONS", opt);
    b->pid = fork();
    if (b->pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    if (b->pid == 0) {
        int lfd = open(b->stderr_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        dup2(lfd, 2);
        execl(bin, bin, "--config", path, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    b->pidfd = pidfd_open(b->pid, 0);
    /* The readiness line: "kbroker started (node.id=1, listeners=PLAINTEXT://127.0.0.1:P)". */
    while (got < sizeof(line) - 1) {
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        int64_t left = dl - kr_now_ms();
        ssize_t n;
        char *s;
        if (left <= 0 || poll(&pf, 1, (int)left) <= 0) {
            snprintf(err, errlen, "no readiness line within %d ms (see %s)", timeout_ms,
                     b->stderr_log);
            break;
        }
        n = read(p[0], line + got, sizeof(line) - 1 - got);
        if (n <= 0) {
            snprintf(err, errlen, "kbroker exited before it was ready (see %s)", b->stderr_log);
            break;
        }
        got += (size_t)n;
        line[got] = '\0';
        if ((s = strstr(line, "kbroker started")) != NULL && strchr(s, '\n')) {
            char *colon = strrchr(s, ':');
            b->port = colon ? atoi(colon + 1) : 0;
            break;
        }
    }
    close(p[0]);
    if (b->port <= 0) {
        if (b->pid > 0) {
            kill(b->pid, SIGKILL);
            kr_broker_wait(b, 5000);
        }
        return -1;
    }
    return 0;
}

bool kr_broker_alive(kr_broker_t *b)
{
    struct pollfd pf = {.fd = b->pidfd, .events = POLLIN};
    if (b->pid <= 0)
        return false;
    if (b->pidfd < 0)
        return kill(b->pid, 0) == 0;
    return poll(&pf, 1, 0) == 0;
}

int kr_broker_wait(kr_broker_t *b, int timeout_ms)
{
    int st;
    if (b->pid <= 0)
        return -1;
    if (b->pidfd >= 0) {
        struct pollfd pf = {.fd = b->pidfd, .events = POLLIN};
        int r;
        do
            r = poll(&pf, 1, timeout_ms);
        while (r < 0 && errno == EINTR);
        if (r <= 0)
            return -1;
    }
    if (waitpid(b->pid, &st, 0) != b->pid)
        return -1;
    if (b->pidfd >= 0)
        close(b->pidfd);
    b->pidfd = -1;
    b->pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void kr_broker_rss(const kr_broker_t *b, long *hwm_kb, long *rss_kb)
{
    char path[64], *s, *p;
    *hwm_kb = *rss_kb = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)b->pid);
    s = kr_read_file(path, NULL);
    if (!s)
        return;
    if ((p = strstr(s, "VmHWM:")) != NULL)
        *hwm_kb = strtol(p + 6, NULL, 10);
    if ((p = strstr(s, "VmRSS:")) != NULL)
        *rss_kb = strtol(p + 6, NULL, 10);
    free(s);
}

/* Print up to @p max lines of @p text starting at @p from, indented. */
static void kr_print_lines(const char *from, int max)
{
    for (int i = 0; i < max && from && *from; i++) {
        const char *nl = strchr(from, '\n');
        int n = nl ? (int)(nl - from) : (int)strlen(from);
        fprintf(stderr, "    | %.*s\n", n, from);
        from = nl ? nl + 1 : NULL;
    }
}

int kr_broker_sanitizer_findings(const kr_broker_t *b)
{
    static const char *const marks[] = {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                                        "runtime error:", "WARNING: ThreadSanitizer",
                                        "ERROR: UndefinedBehaviorSanitizer"};
    int found = 0;
    DIR *d = opendir(b->dir);
    struct dirent *de;
    char *log;

    while (d && (de = readdir(d)) != NULL) {
        char path[1200];
        char *s;
        if (strncmp(de->d_name, "sanitizer", 9) != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", b->dir, de->d_name);
        s = kr_read_file(path, NULL);
        found++;
        fprintf(stderr, "sanitizer report %s:\n", path);
        kr_print_lines(s, 30);
        free(s);
    }
    if (d)
        closedir(d);
    log = kr_read_file(b->stderr_log, NULL);
    for (size_t i = 0; log && i < sizeof(marks) / sizeof(marks[0]); i++) {
        const char *p = strstr(log, marks[i]);
        if (p) {
            const char *ls = p;
            while (ls > log && ls[-1] != '\n')
                ls--;
            found++;
            fprintf(stderr, "sanitizer output in %s:\n", b->stderr_log);
            kr_print_lines(ls, 20);
        }
    }
    free(log);
    return found;
}
