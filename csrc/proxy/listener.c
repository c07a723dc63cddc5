/* The listening socket, the connection cap (conn.c answers 503 over it) and the SIGTERM drain:
 * stop accepting, end connections that have not been admitted yet, let tunnels and streams
 * finish until the drain deadline, then end the rest. uv_signal delivers the signal on the
 * loop, so no handler state lives outside the server. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/conn.h"
#include "proxy/curl_loop.h"
#include "proxy/control/live_policy.h"
#include "proxy/route/head.h"
#include "proxy/server.h"

static void on_handle_closed(uv_handle_t *h) { (void)h; }

static void server_stop(proxy_server *s) {
  if (s->stopped) return;
  s->stopped = 1;
  uv_close((uv_handle_t *)&s->sigterm, on_handle_closed);
  uv_close((uv_handle_t *)&s->sigint, on_handle_closed);
  uv_close((uv_handle_t *)&s->drain_timer, on_handle_closed);
  uv_close((uv_handle_t *)&s->pipe_sweep, on_handle_closed);
  if (!s->draining) uv_close((uv_handle_t *)&s->listener, on_handle_closed);
  curl_loop_close(s->curl);
  s->curl = NULL;
  creds_free(s->creds); /* no connection is left to read it (the drain ended them all) */
  s->creds = NULL;
  printf("{\"event\":\"stopped\"}\n");
  fflush(stdout);
}

/* A connection is freed: the policy it was judged by is let go, and a drain ends with the last. */
static void conn_gone(proxy_conn *c) {
  proxy_server *s = c->srv;
  policy_unpin(c);
  if (s->draining && !s->conns) server_stop(s);
}

static const struct conn_hooks hooks = {.begin = head_begin, .gone = conn_gone};

static void on_drain_deadline(uv_timer_t *t) {
  proxy_server *s = t->data;
  for (proxy_conn *c = s->conns, *next; c; c = next) {
    next = c->next;
    if (!c->end) c->end = "drain_deadline";
    conn_close(c);
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  proxy_server *s = h->data;
  if (s->draining) return;
  s->draining = 1;
  uv_close((uv_handle_t *)&s->listener, on_handle_closed);
  size_t open = 0;
  for (proxy_conn *c = s->conns, *next; c; c = next) {
    next = c->next;
    if (c->state != ST_CLOSING && c->on->seal) c->on->seal(c, NULL); /* a route not admitted yet ends here */
    if (c->state != ST_CLOSING) open++;
  }
  printf("{\"event\":\"draining\",\"signal\":%d,\"open\":%zu,\"deadline_ms\":%u}\n", signum, open, s->cfg->drain_ms);
  fflush(stdout);
  if (!s->conns) return server_stop(s);
  uv_timer_start(&s->drain_timer, on_drain_deadline, s->cfg->drain_ms, 0);
}

/* The congestion control of the connections from the sandbox, set on the listener: an accepted
 * socket inherits one set there. That leg is a local link (a bridge or loopback to a container on
 * the same host), and what the proxy sends on it is every download and answer. A pacing control,
 * BBR, the default on some hosts, paces that link with timers: measured with `bash
 * bench/proxy_bench.sh` on such a host, a raw tunnel moved about 1.9 GB/s paced and 3 GB/s under
 * reno, where a direct connection moved 2.5. Reno is built into every Linux kernel and every
 * network namespace may use it; on a host whose default is CUBIC the two were alike. The
 * upstream legs keep the host's control (they cross real networks). */
static int set_client_congestion(proxy_server *s) {
  const char *name = s->cfg->client_congestion;
  if (!name[0]) return 0;
#ifdef TCP_CONGESTION
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&s->listener, &fd) != 0) return -1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name)) == 0) return 0;
  fprintf(stderr,
          "sandstack-proxy: SANDSTACK_PROXY_CLIENT_CONGESTION: the kernel refused '%s' (%s); name one in "
          "net.ipv4.tcp_allowed_congestion_control, or 'host' for the host's default\n",
          name, strerror(errno));
  return -1;
#else
  return 0; /* no per-socket congestion control here: the host's applies */
#endif
}

static void on_connection(uv_stream_t *l, int status) {
  proxy_server *s = l->data;
  if (status < 0 || s->draining) return;
  conn_accept(s, l);
}

int server_start(proxy_server *s, uv_loop_t *loop, const proxy_config *cfg) {
  memset(s, 0, sizeof *s);
  s->loop = loop;
  s->cfg = cfg;
  live_policy_init(s, cfg->policy);
  struct sockaddr_storage addr;
  if (uv_ip4_addr(cfg->listen, cfg->port, (struct sockaddr_in *)&addr) != 0 &&
      uv_ip6_addr(cfg->listen, cfg->port, (struct sockaddr_in6 *)&addr) != 0) {
    fprintf(stderr, "sandstack-proxy: SANDSTACK_PROXY_LISTEN is not an IP address: %s\n", cfg->listen);
    return -1;
  }
  uv_tcp_init(loop, &s->listener);
  s->listener.data = s;
  int rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0);
  if (rc == 0 && set_client_congestion(s) != 0) {
    uv_close((uv_handle_t *)&s->listener, NULL);
    return -1;
  }
  if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 1024, on_connection);
  if (rc != 0) {
    fprintf(stderr, "sandstack-proxy: cannot listen on %s:%d: %s\n", cfg->listen, cfg->port, uv_strerror(rc));
    uv_close((uv_handle_t *)&s->listener, NULL);
    return -1;
  }
  char why[400];
  if (!(s->creds = proxy_config_credentials(cfg, why, sizeof why))) { /* the server's own, swapped live */
    fprintf(stderr, "sandstack-proxy: SANDSTACK_CREDENTIALS: %s\n", why);
    return -1;
  }
  s->conn_hooks = &hooks;
  s->curl = curl_loop_new(loop);
  if (!s->curl) {
    creds_free(s->creds);
    s->creds = NULL;
    fprintf(stderr, "sandstack-proxy: cannot set up libcurl\n");
    return -1;
  }
  uv_signal_init(loop, &s->sigterm);
  uv_signal_init(loop, &s->sigint);
  uv_timer_init(loop, &s->drain_timer);
  uv_timer_init(loop, &s->pipe_sweep);
  s->sigterm.data = s->sigint.data = s->drain_timer.data = s->pipe_sweep.data = s;
  uv_signal_start(&s->sigterm, on_signal, SIGTERM);
  uv_signal_start(&s->sigint, on_signal, SIGINT);
  return 0;
}

int server_port(proxy_server *s) {
  struct sockaddr_storage a;
  int len = sizeof a;
  if (uv_tcp_getsockname(&s->listener, (struct sockaddr *)&a, &len) != 0) return -1;
  return ntohs(((struct sockaddr_in *)&a)->sin_port); /* sin_port and sin6_port share the offset */
}
