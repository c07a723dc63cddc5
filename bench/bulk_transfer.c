/* The two ends of bench/proxy_bench.sh's CONNECT throughput runs, in C so that the ends cost as
 * little as the kernel lets them and the runs measure the path between them (a Python client's
 * reads and page faults were a sixth of the proxy path's samples in perf).
 *   bulk_transfer serve ADDRESS PORT
 *     one connection at a time: reads a decimal byte count and a newline, sends that many bytes,
 *     closes
 *   bulk_transfer pull HOST PORT BYTES [PROXY_ADDRESS PROXY_PORT HEADER_LINE]
 *     asks HOST:PORT for BYTES (through a CONNECT to the proxy when given one, HEADER_LINE its
 *     Proxy-Authorization line without the CRLF), reads them to the close and prints one line:
 *     the rate in MB/s (10^6 bytes per second, from the request to the last byte). Exit 0 when
 *     exactly BYTES arrived. Addresses are IPv4 literals. */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1 << 20) /* one send or recv: the size the Python ends used */

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int address_of(const char *host, const char *port, struct sockaddr_in *a) {
  char *end;
  long p = strtol(port, &end, 10);
  memset(a, 0, sizeof *a);
  a->sin_family = AF_INET;
  a->sin_port = htons((unsigned short)p);
  if (*end || p < 1 || p > 65535 || inet_pton(AF_INET, host, &a->sin_addr) != 1) {
    fprintf(stderr, "bulk_transfer: not an IPv4 address and port: %s %s\n", host, port);
    return -1;
  }
  return 0;
}

static int dial(const char *host, const char *port) {
  struct sockaddr_in a;
  if (address_of(host, port, &a) != 0) return -1;
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
    fprintf(stderr, "bulk_transfer: connect %s:%s: %s\n", host, port, strerror(errno));
    if (s >= 0) close(s);
    return -1;
  }
  return s;
}

static int send_all(int s, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(s, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* The byte count line of a request, read a byte at a time so nothing after it is consumed. */
static long long read_count(int s) {
  char line[32];
  size_t k = 0;
  while (k < sizeof line - 1) {
    ssize_t r = recv(s, line + k, 1, 0);
    if (r <= 0) return -1;
    if (line[k] == '\n') break;
    k++;
  }
  line[k] = 0;
  char *end;
  long long n = strtoll(line, &end, 10);
  return (end == line || *end || n < 0) ? -1 : n;
}

static int serve(const char *host, const char *port, char *buf) {
  struct sockaddr_in a;
  if (address_of(host, port, &a) != 0) return 2;
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 16) != 0) {
    fprintf(stderr, "bulk_transfer: listen %s:%s: %s\n", host, port, strerror(errno));
    return 1;
  }
  printf("listening\n");
  fflush(stdout);
  for (;;) {
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) continue;
    for (long long left = read_count(c); left > 0;) {
      size_t k = left < CHUNK ? (size_t)left : CHUNK;
      if (send_all(c, buf, k) != 0) break;
      left -= (long long)k;
    }
    close(c);
  }
}

/* CONNECT HOST:PORT over s; the answer's head is read a byte at a time so no tunnelled byte is
 * consumed. 0 on a 200. */
static int open_tunnel(int s, const char *host, const char *port, const char *header) {
  char req[1024], head[4096];
  int n = snprintf(req, sizeof req, "CONNECT %s:%s HTTP/1.1\r\n%s\r\n\r\n", host, port, header);
  if (n < 0 || (size_t)n >= sizeof req || send_all(s, req, (size_t)n) != 0) return -1;
  size_t k = 0;
  while (k < sizeof head - 1 && recv(s, head + k, 1, 0) == 1) {
    k++;
    if (k >= 4 && memcmp(head + k - 4, "\r\n\r\n", 4) == 0) break;
  }
  head[k] = 0;
  if (strncmp(head, "HTTP/1.1 200 ", 13) == 0) return 0;
  fprintf(stderr, "bulk_transfer: the proxy answered: %.200s\n", head);
  return -1;
}

static int pull(int argc, char **argv, char *buf) {
  char *end;
  long long want = strtoll(argv[4], &end, 10);
  if (*end || want <= 0) return fprintf(stderr, "bulk_transfer: BYTES must be a positive number\n"), 2;
  int s = argc >= 8 ? dial(argv[5], argv[6]) : dial(argv[2], argv[3]);
  if (s < 0) return 1;
  if (argc >= 8 && open_tunnel(s, argv[2], argv[3], argv[7]) != 0) return close(s), 1;
  char line[32];
  int n = snprintf(line, sizeof line, "%lld\n", want);
  double t0 = seconds_now();
  if (send_all(s, line, (size_t)n) != 0) return close(s), 1;
  long long got = 0;
  for (;;) {
    ssize_t r = recv(s, buf, CHUNK, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += r;
  }
  double dt = seconds_now() - t0;
  close(s);
  if (got != want) return fprintf(stderr, "bulk_transfer: %lld of %lld bytes arrived\n", got, want), 1;
  printf("%.0f\n", (double)got / dt / 1e6);
  return 0;
}

int main(int argc, char **argv) {
  char *buf = malloc(CHUNK); /* what is sent, and where what arrives goes: one buffer, touched once */
  if (!buf) return 1;
  memset(buf, 'x', CHUNK);
  if (argc == 4 && strcmp(argv[1], "serve") == 0) return serve(argv[2], argv[3], buf);
  if ((argc == 5 || argc == 8) && strcmp(argv[1], "pull") == 0) return pull(argc, argv, buf);
  free(buf);
  fprintf(stderr, "usage: bulk_transfer serve ADDRESS PORT | pull HOST PORT BYTES [PROXY_ADDRESS PROXY_PORT HEADER_LINE]\n");
  return 2;
}
