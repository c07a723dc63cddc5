/* Relaying bytes both ways through user space (a forwarded request's body and response, and
 * CONNECT tunnels where splice_relay.c cannot take them: no splice(2), or no fds for its pipes).
 * Backpressure: when the write queue toward one side holds more than buffer_bytes, reading
 * from the other side stops (uv_read_stop) until the queue has drained to half, so a fast
 * sender facing a slow reader costs at most about buffer_bytes plus one read per direction.
 * The idle deadline is reset by traffic either way, whatever its rate. */
#include <stdlib.h>

#include "proxy/conn.h"
#include "proxy/control/live_policy.h"
#include "proxy/route/cred_scan.h"
#include "proxy/route/relay.h"
#include "proxy/route/splice_relay.h"

static size_t queued(uv_tcp_t *t) { return uv_stream_get_write_queue_size((uv_stream_t *)t); }

void relay_maybe_finish(proxy_conn *c) {
  /* a tunnel ends when both directions have ended and their shutdowns went out; a forwarded
   * request ends when the response has (the client's side of a request has a fixed length) */
  if (c->kind == KIND_FORWARD ? (c->upstream_eof && c->shutdowns == 0)
                              : (c->client_eof && c->upstream_eof && c->shutdowns == 0))
    conn_close(c);
}

typedef struct {
  uv_shutdown_t req;
  proxy_conn *c;
} shut_req;

static void on_shutdown(uv_shutdown_t *req, int status) {
  shut_req *r = (shut_req *)req;
  proxy_conn *c = r->c;
  (void)status;
  free(r);
  c->shutdowns--;
  if (c->state == ST_RELAY) relay_maybe_finish(c);
  conn_release(c);
}

static void shut(proxy_conn *c, uv_tcp_t *t) {
  shut_req *r = malloc(sizeof *r);
  if (!r || uv_shutdown(&r->req, (uv_stream_t *)t, on_shutdown) != 0) {
    free(r);
    return conn_close(c);
  }
  r->c = c;
  c->shutdowns++;
  conn_hold(c);
}

static void client_drained(proxy_conn *c, int status) {
  (void)status;
  if (c->upstream_paused && queued(&c->client) <= c->srv->cfg->buffer_bytes / 2) {
    c->upstream_paused = 0;
    if (!c->upstream_eof) conn_read_upstream(c);
  }
}

static void upstream_drained(proxy_conn *c, int status) {
  (void)status;
  if (c->client_paused && queued(&c->upstream) <= c->srv->cfg->buffer_bytes / 2) {
    c->client_paused = 0;
    if (!c->client_eof && c->up_left > 0 && c->state == ST_RELAY) conn_read_client(c);
  }
}

static void client_data(proxy_conn *c, char *base, size_t len) {
  if (c->up_left != UINT64_MAX) { /* a request body: exactly Content-Length bytes, never more */
    if (len > c->up_left) len = (size_t)c->up_left;
    c->up_left -= len;
    if (c->up_left == 0) uv_read_stop((uv_stream_t *)&c->client);
  }
  if (len == 0) {
    free(base);
    return;
  }
  c->bytes_up += len;
  if (c->kind == KIND_FORWARD) { /* a body over plain http: a credential's placeholder refuses it (cred_flow.c) */
    char *pass = NULL;
    int rc = cred_flow_body(c, base, len, c->up_left == 0, &pass, &len);
    free(base);
    if (rc != 0) return;
    base = pass;
    if (len == 0) return free(base); /* held: it may be the start of a placeholder */
  }
  conn_set_deadline(c, c->srv->cfg->idle_ms);
  if (conn_write_owned(c, (uv_stream_t *)&c->upstream, base, len, upstream_drained) != 0) return;
  if (queued(&c->upstream) > c->srv->cfg->buffer_bytes) {
    uv_read_stop((uv_stream_t *)&c->client);
    c->client_paused = 1;
  }
}

static void upstream_data(proxy_conn *c, char *base, size_t len) {
  c->bytes_down += len;
  if (c->state == ST_RELAY) conn_set_deadline(c, c->srv->cfg->idle_ms);
  if (conn_write_owned(c, (uv_stream_t *)&c->client, base, len, client_drained) != 0) return;
  if (queued(&c->client) > c->srv->cfg->buffer_bytes) {
    uv_read_stop((uv_stream_t *)&c->upstream);
    c->upstream_paused = 1;
  }
}

static void client_eof(proxy_conn *c) {
  c->client_eof = 1;
  if (c->kind == KIND_FORWARD) return relay_maybe_finish(c); /* the response may still come */
  shut(c, &c->upstream);
}

static void upstream_eof(proxy_conn *c) {
  c->upstream_eof = 1;
  if (c->state != ST_RELAY) { /* the destination hung up before the tunnel was admitted */
    c->end = "upstream_closed";
    return conn_close(c);
  }
  shut(c, &c->client);
}

static void idle_deadline(proxy_conn *c) {
  c->end = "idle_timeout";
  conn_close(c);
}

/* Both directions, each with backpressure, under the idle deadline. */
static const conn_handlers relaying = {.client_data = client_data,
                                       .client_eof = client_eof,
                                       .upstream_data = upstream_data,
                                       .upstream_eof = upstream_eof,
                                       .deadline = idle_deadline,
                                       .close = splice_relay_stop, /* a kernel relay's pipes and dups */
                                       .seal = live_policy_seal_tunnel};

void relay_start(proxy_conn *c) {
  conn_enter(c, ST_RELAY, &relaying);
  conn_set_deadline(c, c->srv->cfg->idle_ms);
  if (c->kind == KIND_CONNECT) { /* a raw tunnel: the kernel relays it where it can */
    if (splice_relay_start(c, relay_maybe_finish) == 0) return;
    c->relay = "uv";
  }
  if (c->up_left > 0 && !c->client_eof) conn_read_client(c);
  if (!c->upstream_paused) conn_read_upstream(c);
}
