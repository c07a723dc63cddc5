/* A client connection from accept to free: accepting it, reading both streams and handing each
 * event to the route that holds it, its one deadline, writes, the lingering close of an answer,
 * and closing every handle exactly once (the route's close first). The request head is read by
 * route/head.c. */
#include <stdlib.h>
#include <string.h>

#include "proxy/audit.h"
#include "proxy/conn.h"
#include "proxy/parse/cred_table.h"
#include "proxy/server.h"

typedef struct write_req {
  uv_write_t req;
  proxy_conn *c;
  char *base;
  void (*on_done)(proxy_conn *, int);
} write_req;

typedef struct {
  uv_shutdown_t req;
  proxy_conn *c;
} linger_req;

void conn_hold(proxy_conn *c) { c->refs++; }

static void conn_free(proxy_conn *c) {
  proxy_server *s = c->srv;
  if (c->prev) c->prev->next = c->next;
  else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  if (c->counted) s->active--;
  ss_buf_free(&c->in);
  creds_stream_free(&c->cred_body);
  creds_stream_free(&c->cred_response);
  creds_free(c->cred_kept); /* wipes the kept secrets */
  s->conn_hooks->gone(c);
  free(c);
}

void conn_release(proxy_conn *c) {
  if (--c->refs == 0) conn_free(c);
}

static void on_handle_closed(uv_handle_t *h) { conn_release(h->data); }

/* Closing, or lingering after an answer: what the client still sends is dropped, its close (or
 * the deadline) ends the connection; the destination is read no more. */
static const conn_handlers finishing = {0};

void conn_close(proxy_conn *c) {
  if (c->state == ST_CLOSING) return;
  conn_enter(c, ST_CLOSING, &finishing);
  if (!c->end) c->end = "closed";
  audit_conn(c);
  /* before the streams close their sockets: a kernel relay's dups leave epoll first */
  if (c->owner) c->owner->close(c);
  if (c->gai_pending) uv_cancel((uv_req_t *)&c->gai); /* its callback still runs and releases */
  uv_close((uv_handle_t *)&c->client, on_handle_closed);
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
  if (c->upstream_open) uv_close((uv_handle_t *)&c->upstream, on_handle_closed);
}

static void on_deadline(uv_timer_t *t) {
  proxy_conn *c = t->data;
  if (c->on->deadline) c->on->deadline(c);
  else conn_close(c);
}

void conn_enter(proxy_conn *c, conn_state state, const conn_handlers *on) {
  c->state = state;
  c->on = on;
  if (on->close && on != c->owner) { /* the earlier route hands over: it lets go of its state */
    const conn_handlers *was = c->owner;
    c->owner = on;
    if (was) was->close(c);
  }
}

int conn_seal_unadmitted(proxy_conn *c, const ss_policy *next) {
  if (next) return 0;
  c->end = "draining";
  conn_close(c);
  return 1;
}

void conn_set_deadline(proxy_conn *c, unsigned ms) {
  if (c->state != ST_CLOSING) uv_timer_start(&c->timer, on_deadline, ms, 0);
}

static void on_written(uv_write_t *req, int status) {
  write_req *w = (write_req *)req;
  proxy_conn *c = w->c;
  free(w->base);
  if (c->state != ST_CLOSING) {
    if (status < 0) {
      if (!c->end) c->end = "write_error";
      conn_close(c);
    } else if (w->on_done) {
      w->on_done(c, status);
    }
  }
  free(w);
  conn_release(c);
}

int conn_write_owned(proxy_conn *c, uv_stream_t *to, char *base, size_t len,
                     void (*on_done)(proxy_conn *, int)) {
  write_req *w = malloc(sizeof *w);
  if (!w || c->state == ST_CLOSING) {
    free(base);
    free(w);
    return -1;
  }
  w->c = c;
  w->base = base;
  w->on_done = on_done;
  uv_buf_t b = uv_buf_init(base, (unsigned)len);
  if (uv_write(&w->req, to, &b, 1, on_written) != 0) {
    free(base);
    free(w);
    conn_close(c);
    return -1;
  }
  conn_hold(c);
  return 0;
}

int conn_write(proxy_conn *c, uv_stream_t *to, const char *data, size_t len, void (*on_done)(proxy_conn *, int)) {
  char *copy = malloc(len ? len : 1);
  if (!copy) {
    conn_close(c);
    return -1;
  }
  memcpy(copy, data, len);
  return conn_write_owned(c, to, copy, len, on_done);
}

/* Lingering close: after the answer, send FIN and read (discarding) until the client closes
 * or a short deadline passes, so unread request bytes do not turn the close into a reset
 * that destroys the answer before the client read it. */
static void on_linger_shutdown(uv_shutdown_t *req, int status) {
  linger_req *l = (linger_req *)req;
  proxy_conn *c = l->c;
  (void)status;
  free(l);
  conn_release(c);
}

static void after_reply(proxy_conn *c, int status) {
  (void)status;
  linger_req *l = malloc(sizeof *l);
  if (!l || uv_shutdown(&l->req, (uv_stream_t *)&c->client, on_linger_shutdown) != 0) {
    free(l);
    conn_close(c);
    return;
  }
  l->c = c;
  conn_hold(c);
  conn_set_deadline(c, 2000);
}

void conn_reply_and_linger(proxy_conn *c, const char *data, size_t len) {
  if (c->state == ST_CLOSING) return;
  /* inside an inspected connection the answer goes into the TLS session */
  char *sealed = NULL;
  size_t sealed_len = 0;
  int in_tls = c->owner && c->owner->wrap && c->owner->wrap(c, data, len, &sealed, &sealed_len) == 0;
  conn_enter(c, ST_REPLY, &finishing);
  if (c->upstream_open) { /* nothing more goes to the destination */
    uv_read_stop((uv_stream_t *)&c->upstream);
  }
  conn_set_deadline(c, 5000); /* the answer itself must go out in time too */
  conn_read_client(c);         /* to see the client's close (what it still sends is dropped) */
  if (!in_tls) conn_write(c, (uv_stream_t *)&c->client, data, len, after_reply);
  else if (sealed) conn_write_owned(c, (uv_stream_t *)&c->client, sealed, sealed_len, after_reply);
  else after_reply(c, 0);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  buf->base = malloc(CONN_READ_CHUNK);
  buf->len = buf->base ? CONN_READ_CHUNK : 0;
}

static void on_client_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  proxy_conn *c = s->data;
  if (nread <= 0 || c->state == ST_CLOSING) {
    free(buf->base);
    if (nread == 0 || c->state == ST_CLOSING) return;
    if (nread != UV_EOF) {
      c->end = "client_error";
      return conn_close(c);
    }
    if (c->on->client_eof) return c->on->client_eof(c);
    c->end = "client_closed";
    return conn_close(c);
  }
  if (c->on->client_data) return c->on->client_data(c, buf->base, (size_t)nread); /* takes the buffer */
  free(buf->base);
}

static void on_upstream_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  proxy_conn *c = s->data;
  if (nread <= 0 || c->state == ST_CLOSING || c->state == ST_REPLY) { /* after an answer: done with */
    free(buf->base);
    if (nread == 0 || c->state == ST_CLOSING || c->state == ST_REPLY) return;
    if (nread != UV_EOF) {
      c->end = "upstream_error";
      return conn_close(c);
    }
    if (c->on->upstream_eof) return c->on->upstream_eof(c);
    c->end = "upstream_closed";
    return conn_close(c);
  }
  if (c->on->upstream_data) return c->on->upstream_data(c, buf->base, (size_t)nread); /* takes the buffer */
  free(buf->base);
}

void conn_read_client(proxy_conn *c) { uv_read_start((uv_stream_t *)&c->client, on_alloc, on_client_read); }
void conn_read_upstream(proxy_conn *c) { uv_read_start((uv_stream_t *)&c->upstream, on_alloc, on_upstream_read); }

void conn_accept(proxy_server *s, uv_stream_t *listener) {
  proxy_conn *c = calloc(1, sizeof *c);
  if (!c) return;
  c->srv = s;
  c->id = ++s->next_id;
  c->up_left = UINT64_MAX;
  c->on = &finishing; /* until the first route takes it over, below */
  ss_buf_init(&c->in, s->cfg->max_head + CONN_READ_CHUNK);
  c->started_ms = uv_now(s->loop);
  uv_tcp_init(s->loop, &c->client);
  uv_timer_init(s->loop, &c->timer);
  c->client.data = c->timer.data = c;
  c->refs = 2;
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  if (uv_accept(listener, (uv_stream_t *)&c->client) != 0) {
    c->end = "accept_failed";
    return conn_close(c);
  }
  struct sockaddr_storage peer;
  int plen = sizeof peer;
  if (uv_tcp_getpeername(&c->client, (struct sockaddr *)&peer, &plen) == 0) {
    char ip[48];
    int port = ntohs(((struct sockaddr_in *)&peer)->sin_port);
    uv_ip_name((struct sockaddr *)&peer, ip, sizeof ip);
    snprintf(c->peer, sizeof c->peer, "%s:%d", ip, port);
  }
  uv_tcp_nodelay(&c->client, 1);
  conn_read_client(c);
  s->conn_hooks->begin(c);
}
