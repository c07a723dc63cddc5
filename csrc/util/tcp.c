#include "util/tcp.h"

#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The sockaddr of a numeric address; -1 with err (kind "invalid") otherwise. */
static int resolve(const char *addr, int port, struct sockaddr_storage *sa, socklen_t *len, ss_error *err) {
  if (port < 0 || port > 65535) {
    ss_error_set(err, "invalid", "port", "port %d is out of range", port);
    return -1;
  }
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM};
  char service[8];
  snprintf(service, sizeof service, "%d", port);
  struct addrinfo *ai = NULL;
  int rc = getaddrinfo(addr, service, &hints, &ai);
  if (rc != 0 || !ai) {
    ss_error_set(err, "invalid", "address", "'%.100s' is not a numeric IPv4 or IPv6 address", addr);
    return -1;
  }
  memcpy(sa, ai->ai_addr, ai->ai_addrlen);
  *len = ai->ai_addrlen;
  freeaddrinfo(ai);
  return 0;
}

static int io_fail(ss_error *err, const char *what, const char *addr, int port) {
  int e = errno;
  const char *ename = strerrorname_np(e);
  ss_error_set(err, "io", ename ? ename : "EIO", "%s %.100s:%d: %s", what, addr, port, strerror(e));
  ss_error_field_num(err, "errno", e);
  return -1;
}

int ss_tcp_listen(const char *addr, int port, int *bound_port, ss_error *err) {
  struct sockaddr_storage sa;
  socklen_t len;
  if (resolve(addr, port, &sa, &len, err) != 0) return -1;
  int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_fail(err, "socket for", addr, port);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  /* "::" means IPv6 here, as it reads: a probe over IPv4 needs its own listener */
  if (sa.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&sa, len) != 0 || listen(fd, SOMAXCONN) != 0) {
    io_fail(err, "listen on", addr, port);
    close(fd);
    return -1;
  }
  len = sizeof sa;
  if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
    io_fail(err, "getsockname for", addr, port);
    close(fd);
    return -1;
  }
  *bound_port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                               : ((struct sockaddr_in *)&sa)->sin_port);
  return fd;
}

static int connect_fail(ss_error *err, int e, const char *addr, int port) {
  const char *reason = e == ECONNREFUSED ? "refused"
                       : e == ETIMEDOUT   ? "timeout"
                       : (e == ENETUNREACH || e == EHOSTUNREACH) ? "unreachable"
                                                                 : "failed";
  ss_error_set(err, "transport", reason, "connect %.100s:%d: %s", addr, port, strerror(e));
  ss_error_field_num(err, "errno", e);
  return -1;
}

/* Waits until the non-blocking connect on fd ends or the deadline passes; the errno of the
 * outcome (0: connected). */
static int finish_connect(int fd, double deadline) {
  for (;;) {
    double left = deadline - ss_monotonic_now();
    if (left <= 0) return ETIMEDOUT;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int n = poll(&p, 1, (int)(left * 1000.0) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) continue; /* the loop re-checks the deadline */
    int e = 0;
    socklen_t el = sizeof e;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0) return errno;
    return e;
  }
}

int ss_tcp_connect(const char *addr, int port, double timeout, ss_error *err) {
  struct sockaddr_storage sa;
  socklen_t len;
  if (resolve(addr, port, &sa, &len, err) != 0) return -1;
  if (!(timeout > 0)) {
    ss_error_set(err, "invalid", "timeout", "the connect timeout must be a positive number of seconds");
    return -1;
  }
  double deadline = ss_monotonic_now() + timeout;
  int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return io_fail(err, "socket for", addr, port);
  int e = 0;
  if (connect(fd, (struct sockaddr *)&sa, len) != 0) {
    e = errno;
    if (e == EINPROGRESS) e = finish_connect(fd, deadline);
  }
  close(fd);
  if (e != 0) return connect_fail(err, e, addr, port);
  return 0;
}
