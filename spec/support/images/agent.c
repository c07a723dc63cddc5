#define _GNU_SOURCE
/* The test agent: a small HTTP/1.1 server built statically into the test images.
 *   GET /health             200 "ok"
 *   GET /stream?n=N         chunked response, one chunk per second for N seconds
 *   GET /sse?n=N            server-sent events (text/event-stream), one event per second
 *   GET /connect?host=H&port=P   tries a TCP connect (2 s): 200 "open" or 200 "closed <why>"
 *   /echo..., /v1/...       200 with the request head and body echoed (a fake upstream API)
 * Port from $AGENT_PORT (default 8080). Also a client mode used by reachability probes:
 *   agent connect HOST PORT [TIMEOUT_MS]   exit 0 when a TCP connection is established (the
 *                                          socket has a peer), else 1 and why on stderr. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int tcp_connect(const char *host, const char *port, int timeout_ms, char *why, size_t whylen) {
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, port, &hints, &res);
  if (rc != 0) {
    snprintf(why, whylen, "resolve: %s", gai_strerror(rc));
    return -1;
  }
  int ok = -1;
  for (struct addrinfo *ai = res; ai && ok < 0; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      ok = 0;
    } else if (errno == EINPROGRESS) {
      struct pollfd p = {fd, POLLOUT, 0};
      int n = poll(&p, 1, timeout_ms);
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      struct sockaddr_storage peer;
      socklen_t pl = sizeof peer;
      if (n == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) {
        /* writable with no error is a connection only if there is a peer: a probe that calls a
         * stack's own report of "connected" a reach must not count one that has none */
        if (getpeername(fd, (struct sockaddr *)&peer, &pl) == 0) ok = 0;
        else snprintf(why, whylen, "writable without a peer: %s", strerror(errno));
      } else {
        snprintf(why, whylen, "%s", n == 0 ? "timeout" : strerror(soerr ? soerr : errno));
      }
    } else {
      snprintf(why, whylen, "%s", strerror(errno));
    }
    close(fd);
  }
  freeaddrinfo(res);
  return ok;
}

static void send_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
    if (n <= 0) return;
    buf += n;
    len -= (size_t)n;
  }
}

static void respond(int fd, int status, const char *body, size_t len) {
  char head[256];
  int n = snprintf(head, sizeof head,
                   "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                   "Connection: close\r\n\r\n",
                   status, status == 200 ? "OK" : "Not Found", len);
  send_all(fd, head, (size_t)n);
  send_all(fd, body, len);
}

static const char *query_param(const char *target, const char *name, char *out, size_t outlen) {
  const char *q = strchr(target, '?');
  size_t nl = strlen(name);
  while (q) {
    q++;
    if (strncmp(q, name, nl) == 0 && q[nl] == '=') {
      size_t i = 0;
      for (q += nl + 1; *q && *q != '&' && *q != ' ' && i + 1 < outlen; q++) out[i++] = *q;
      out[i] = 0;
      return out;
    }
    q = strchr(q, '&');
  }
  return NULL;
}

static void *serve(void *arg) {
  int fd = (int)(long)arg;
  char req[65536];
  size_t used = 0;
  char *end = NULL;
  while (used + 1 < sizeof req) {
    ssize_t n = recv(fd, req + used, sizeof req - 1 - used, 0);
    if (n <= 0) break;
    used += (size_t)n;
    req[used] = 0;
    if ((end = strstr(req, "\r\n\r\n"))) break;
  }
  if (!end) goto done;
  /* Read a Content-Length body so that echo returns it. */
  size_t head_len = (size_t)(end - req) + 4, body_len = 0;
  const char *cl = strcasestr(req, "\r\ncontent-length:");
  if (cl) body_len = strtoul(cl + 17, NULL, 10);
  while (used < head_len + body_len && used + 1 < sizeof req) {
    ssize_t n = recv(fd, req + used, sizeof req - 1 - used, 0);
    if (n <= 0) break;
    used += (size_t)n;
  }
  req[used] = 0;
  char method[16] = "", target[4096] = "";
  sscanf(req, "%15s %4095s", method, target);
  char a[512], b[64];
  if (strcmp(target, "/health") == 0) {
    respond(fd, 200, "ok\n", 3);
  } else if (strncmp(target, "/stream", 7) == 0) {
    int n = query_param(target, "n", a, sizeof a) ? atoi(a) : 3;
    const char *head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
                       "Connection: close\r\n\r\n";
    send_all(fd, head, strlen(head));
    for (int i = 0; i < n; i++) {
      char chunk[64], line[32];
      int ln = snprintf(line, sizeof line, "tick %d\n", i);
      int cn = snprintf(chunk, sizeof chunk, "%x\r\n%s\r\n", ln, line);
      send_all(fd, chunk, (size_t)cn);
      sleep(1);
    }
    send_all(fd, "0\r\n\r\n", 5);
  } else if (strncmp(target, "/sse", 4) == 0) {
    /* an event stream as an agent's chat API sends one: no length, ended by closing */
    int n = query_param(target, "n", a, sizeof a) ? atoi(a) : 3;
    const char *head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                       "Connection: close\r\n\r\n";
    send_all(fd, head, strlen(head));
    for (int i = 0; i < n; i++) {
      char ev[64];
      int en = snprintf(ev, sizeof ev, "event: tick\ndata: %d\n\n", i);
      send_all(fd, ev, (size_t)en);
      sleep(1);
    }
  } else if (strncmp(target, "/connect", 8) == 0 && query_param(target, "host", a, sizeof a) &&
             query_param(target, "port", b, sizeof b)) {
    char why[256] = "", out[300];
    int ok = tcp_connect(a, b, 2000, why, sizeof why);
    int n = snprintf(out, sizeof out, ok == 0 ? "open\n" : "closed %s\n", why);
    respond(fd, 200, out, (size_t)n);
  } else if (strncmp(target, "/echo", 5) == 0 || strncmp(target, "/v1/", 4) == 0) {
    respond(fd, 200, req, used);
  } else {
    respond(fd, 404, "not found\n", 10);
  }
done:
  close(fd);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc >= 4 && strcmp(argv[1], "connect") == 0) {
    char why[256] = "";
    int rc = tcp_connect(argv[2], argv[3], argc > 4 ? atoi(argv[4]) : 2000, why, sizeof why);
    if (rc != 0) fprintf(stderr, "closed: %s\n", why);
    return rc == 0 ? 0 : 1;
  }
  signal(SIGPIPE, SIG_IGN);
  const char *port = getenv("AGENT_PORT");
  int p = port ? atoi(port) : 8080;
  if (argc >= 2) p = atoi(argv[1]);
  int s = socket(AF_INET6, SOCK_STREAM, 0);
  int one = 1, zero = 0;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  struct sockaddr_in6 addr = {0};
  addr.sin6_family = AF_INET6;
  addr.sin6_port = htons((unsigned short)p);
  addr.sin6_addr = in6addr_any;
  if (s < 0 || bind(s, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(s, 128) != 0) {
    /* No IPv6 in the container: fall back to IPv4. */
    if (s >= 0) close(s);
    s = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a4 = {0};
    a4.sin_family = AF_INET;
    a4.sin_port = htons((unsigned short)p);
    if (bind(s, (struct sockaddr *)&a4, sizeof a4) != 0 || listen(s, 128) != 0) {
      perror("agent: listen");
      return 1;
    }
  }
  fprintf(stderr, "agent listening on %d\n", p);
  for (;;) {
    int c = accept(s, NULL, NULL);
    if (c < 0) continue;
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, serve, (void *)(long)c) != 0) close(c);
    pthread_attr_destroy(&at);
  }
}
