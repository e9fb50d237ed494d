/*
 * kb_sock.h -- small socket helpers shared by the Kafka listeners and the metrics endpoint.
 *
 * @thread any
 */
#ifndef KB_SOCK_H
#define KB_SOCK_H

#include <stddef.h>
#include <sys/socket.h>

/**
 * Create a non-blocking, close-on-exec listening TCP socket on @p host:@p port (host "" = every
 * interface, IPv6 or IPv4; port 0 = ephemeral), with SO_REUSEADDR.
 * @return the fd, or -1 with a message naming the address in @p errstr.
 */
int kb_sock_listen(const char *host, int port, int backlog, char *errstr, size_t errstr_size);

/** The local port of a bound socket, or -1. */
int kb_sock_local_port(int fd);

/** Format @p sa as "1.2.3.4:5" or "[::1]:5" into @p buf. Returns buf. */
char *kb_sock_addr_str(const struct sockaddr *sa, char *buf, size_t size);

/** Set O_NONBLOCK. Returns 0 or -1 (errno). */
int kb_sock_set_nonblock(int fd);

#endif /* KB_SOCK_H */
