#include "kb_sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int kb_sock_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL, 0);
    if (fl < 0)
        return -1;
    return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

int kb_sock_listen(const char *host, int port, int backlog, char *errstr, size_t errstr_size)
{
    struct addrinfo hints, *res = NULL, *ai;
    char portstr[16];
    int fd = -1, r, err = 0;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(portstr, sizeof(portstr), "%d", port);
    r = getaddrinfo(host && *host ? host : NULL, portstr, &hints, &res);
    if (r != 0) {
        snprintf(errstr, errstr_size, "cannot resolve %s:%d: %s", host, port, gai_strerror(r));
        return -1;
    }
    /* Prefer IPv6 for the wildcard (dual stack), else take the first that binds. */
    for (int pass = 0; pass < 2 && fd < 0; pass++) {
        for (ai = res; ai; ai = ai->ai_next) {
            int one = 1;
            if ((!host || !*host) && pass == 0 && ai->ai_family != AF_INET6)
                continue;
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol);
            if (fd < 0) {
                err = errno;
                continue;
            }
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
            if (ai->ai_family == AF_INET6) {
                int v6only = 0;
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
            }
            if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0)
                break;
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        snprintf(errstr, errstr_size, "cannot listen on %s:%d: %s", host && *host ? host : "*",
                 port, strerror(err ? err : EADDRNOTAVAIL));
    return fd;
}

int kb_sock_local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

char *kb_sock_addr_str(const struct sockaddr *sa, char *buf, size_t size)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(buf, size, "%s:%d", host, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        /* Show v4-mapped peers of a dual-stack socket as plain IPv4. */
        if (strncmp(host, "::ffff:", 7) == 0 && strchr(host + 7, '.'))
            snprintf(buf, size, "%s:%d", host + 7, ntohs(in6->sin6_port));
        else
            snprintf(buf, size, "[%s]:%d", host, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, size, "unknown");
    }
    return buf;
}
