/* The in-memory libuv (see mem_uv.h). Every handle and request the proxy hands to libuv gets a
 * record here, found by its address; the proxy's structs are never written beyond the public
 * fields libuv itself sets (loop, type, handle, cb). */
#include "fuzz/events/mem_uv.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MU_MAX_HANDLES 32
#define MU_MAX_RESOLVES 4
#define MU_MAX_WRITES 4096

typedef struct mu_write {
  uv_write_t *req;
  uv_write_cb cb;
  uv_buf_t buf; /* the proxy's buffer: read when the bytes go out, as a socket would */
  size_t sent;
  int done, status; /* done: went out or failed; the callback is still to run */
} mu_write;

typedef enum { H_FREE, H_OPEN, H_CLOSING } h_state;

typedef struct mu_handle {
  uv_handle_t *h;
  h_state state;
  uv_close_cb close_cb;
  /* streams */
  mu_side side;
  int fd, readable, writable, reading, listening, stalled, broken, shutting, shut, fed;
  uv_alloc_cb alloc_cb;
  uv_read_cb read_cb;
  uv_connection_cb connection_cb;
  uv_connect_t *connect_req;
  uv_shutdown_t *shutdown_req;
  mu_write *writes; /* in order: done ones (callback pending) first, then queued ones */
  size_t nwrites, capwrites;
  /* timers and signals */
  int active;
  uint64_t due, seq;
  uv_timer_cb timer_cb;
  int signum;
  uv_signal_cb signal_cb;
} mu_handle;

typedef struct mu_resolve {
  uv_getaddrinfo_t *req;
  uv_getaddrinfo_cb cb;
  int cancelled;
} mu_resolve;

struct mu_world {
  uv_loop_t *loop;
  mu_hooks hooks;
  int cancel_ok, accept_fails, connect_fails_at_once;
  uint64_t now, timer_seq;
  mu_handle handles[MU_MAX_HANDLES];
  mu_handle *closing[MU_MAX_HANDLES]; /* uv_close order */
  size_t nclosing;
  mu_resolve resolves[MU_MAX_RESOLVES];
  size_t nresolves;
};

static void fail(const char *what) {
  fprintf(stderr, "mem_uv: %s\n", what);
  abort();
}

static mu_world *world_of(const uv_loop_t *loop) { return loop->data; }

static mu_handle *find(mu_world *w, const void *h) {
  for (size_t i = 0; i < MU_MAX_HANDLES; i++)
    if (w->handles[i].state != H_FREE && w->handles[i].h == h) return &w->handles[i];
  return NULL;
}

static mu_handle *must_find(mu_world *w, const void *h) {
  mu_handle *r = find(w, h);
  if (!r) fail("a handle libuv never initialised (or one whose close callback already ran)");
  return r;
}

/* uv_*_init: a live handle initialised again would corrupt libuv's handle queue */
static mu_handle *init_handle(uv_loop_t *loop, uv_handle_t *h, uv_handle_type type) {
  mu_world *w = world_of(loop);
  if (find(w, h)) fail("a live handle initialised again");
  for (size_t i = 0; i < MU_MAX_HANDLES; i++) {
    if (w->handles[i].state == H_FREE) {
      mu_handle *r = &w->handles[i];
      memset(r, 0, sizeof *r);
      r->h = h;
      r->state = H_OPEN;
      h->loop = loop;
      h->type = type;
      return r;
    }
  }
  fail("too many handles");
  return NULL;
}

static mu_handle *side_handle(mu_world *w, mu_side side) {
  for (size_t i = 0; i < MU_MAX_HANDLES; i++)
    if (w->handles[i].state != H_FREE && w->handles[i].side == side) return &w->handles[i];
  return NULL;
}

mu_world *mu_new(uv_loop_t *loop, const mu_hooks *hooks, int cancel_ok, int accept_fails, int connect_fails_at_once) {
  mu_world *w = calloc(1, sizeof *w);
  if (!w) fail("out of memory");
  memset(loop, 0, sizeof *loop);
  loop->data = w;
  w->loop = loop;
  w->hooks = *hooks;
  w->cancel_ok = cancel_ok;
  w->accept_fails = accept_fails;
  w->connect_fails_at_once = connect_fails_at_once;
  w->now = 1000000;
  return w;
}

void mu_free(mu_world *w) {
  if (mu_open_handles(w)) fail("a handle is still open when the proxy stopped");
  if (w->nresolves) fail("a resolve is still in flight when the proxy stopped");
  for (size_t i = 0; i < MU_MAX_HANDLES; i++) free(w->handles[i].writes);
  w->loop->data = NULL;
  free(w);
}

/* ---------------------------------------------------------------- writes ---- */

static size_t queued_bytes(const mu_handle *r) {
  size_t n = 0;
  for (size_t i = 0; i < r->nwrites; i++)
    if (!r->writes[i].done || r->writes[i].status < 0) n += r->writes[i].buf.len - r->writes[i].sent;
  return n;
}

/* uv__write: the queued writes go out while the peer takes them */
static void try_send(mu_world *w, mu_handle *r) {
  for (size_t i = 0; i < r->nwrites; i++) {
    mu_write *x = &r->writes[i];
    if (x->done) continue;
    if (r->broken) {
      x->done = 1;
      x->status = UV_EPIPE;
      continue;
    }
    if (r->stalled || r->connect_req || r->fd < 0) return;
    size_t n = x->buf.len - x->sent;
    if (n && w->hooks.sent) w->hooks.sent(w->hooks.ctx, r->side, x->buf.base + x->sent, n);
    x->sent = x->buf.len;
    x->done = 1;
    x->status = 0;
  }
}

/* uv__write_callbacks: the callbacks of done writes, in order; a callback may write again */
static void write_callbacks(mu_handle *r) {
  for (;;) {
    size_t i = 0;
    while (i < r->nwrites && !r->writes[i].done) i++;
    if (i == r->nwrites) return;
    mu_write x = r->writes[i];
    memmove(&r->writes[i], &r->writes[i + 1], (r->nwrites - i - 1) * sizeof x);
    r->nwrites--;
    if (x.cb) x.cb(x.req, x.status);
  }
}

static int all_done(const mu_handle *r) {
  for (size_t i = 0; i < r->nwrites; i++)
    if (!r->writes[i].done) return 0;
  return 1;
}

/* uv__drain: the queue is empty, so a waiting shutdown goes out */
static void drain(mu_world *w, mu_handle *r) {
  if (!r->shutting || r->state != H_OPEN || r->nwrites) return;
  uv_shutdown_t *req = r->shutdown_req;
  r->shutdown_req = NULL;
  r->shutting = 0;
  int err = r->broken ? UV_EPIPE : 0;
  if (!err) {
    r->shut = 1;
    if (w->hooks.fin) w->hooks.fin(w->hooks.ctx, r->side);
  }
  if (req->cb) req->cb(req, err);
}

/* uv__stream_io(POLLOUT) */
static void pollout(mu_world *w, mu_handle *r) {
  r->fed = 0;
  try_send(w, r);
  write_callbacks(r);
  if (r->state == H_OPEN && all_done(r)) drain(w, r);
}

int uv_write(uv_write_t *req, uv_stream_t *handle, const uv_buf_t bufs[], unsigned int nbufs, uv_write_cb cb) {
  mu_world *w = world_of(handle->loop);
  mu_handle *r = must_find(w, handle);
  if (nbufs != 1) fail("uv_write with other than one buffer (not modelled)");
  if (r->fd < 0) return UV_EBADF;
  if (!r->writable) return UV_EPIPE;
  for (size_t i = 0; i < r->nwrites; i++)
    if (r->writes[i].req == req) fail("a write request reused while in flight");
  if (r->nwrites == r->capwrites) {
    size_t cap = r->capwrites ? r->capwrites * 2 : 8;
    if (cap > MU_MAX_WRITES) fail("too many writes in flight");
    mu_write *nw = realloc(r->writes, cap * sizeof *nw);
    if (!nw) fail("out of memory");
    r->writes = nw;
    r->capwrites = cap;
  }
  if (w->hooks.queued) w->hooks.queued(w->hooks.ctx, r->side);
  int empty = queued_bytes(r) == 0;
  req->type = UV_WRITE;
  req->handle = handle;
  req->cb = cb;
  req->send_handle = NULL;
  r->writes[r->nwrites++] = (mu_write){.req = req, .cb = cb, .buf = bufs[0]};
  if (!r->connect_req && empty) {
    try_send(w, r); /* at once; the callback waits for the next pending phase */
    r->fed = 1;
  }
  return 0;
}

size_t uv_stream_get_write_queue_size(const uv_stream_t *stream) {
  mu_world *w = world_of(stream->loop);
  return queued_bytes(must_find(w, stream));
}

int uv_shutdown(uv_shutdown_t *req, uv_stream_t *handle, uv_shutdown_cb cb) {
  mu_handle *r = must_find(world_of(handle->loop), handle);
  if (!r->writable || r->shut || r->shutting || r->state != H_OPEN) return UV_ENOTCONN;
  req->type = UV_SHUTDOWN;
  req->handle = handle;
  req->cb = cb;
  r->shutdown_req = req;
  r->shutting = 1;
  return 0;
}

int mu_writable(mu_world *w, mu_side side) {
  mu_handle *r = side_handle(w, side);
  if (!r || r->state != H_OPEN || r->fd < 0 || r->connect_req) return 0;
  r->stalled = 0;
  if (!r->nwrites && !r->shutting) return 0; /* no POLLOUT interest: nothing happens */
  pollout(w, r);
  return 1;
}

void mu_stall(mu_world *w, mu_side side) {
  mu_handle *r = side_handle(w, side);
  if (r) r->stalled = 1;
}

int mu_write_error(mu_world *w, mu_side side) {
  mu_handle *r = side_handle(w, side);
  if (!r || r->state != H_OPEN || r->fd < 0 || r->connect_req) return 0;
  r->broken = 1;
  pollout(w, r);
  return 1;
}

/* ----------------------------------------------------------------- reads ---- */

int uv_read_start(uv_stream_t *stream, uv_alloc_cb alloc_cb, uv_read_cb read_cb) {
  mu_handle *r = must_find(world_of(stream->loop), stream);
  if (r->state != H_OPEN) return UV_EINVAL;
  if (!r->readable) return UV_ENOTCONN;
  r->reading = 1;
  r->alloc_cb = alloc_cb;
  r->read_cb = read_cb;
  return 0;
}

int uv_read_stop(uv_stream_t *stream) {
  mu_handle *r = find(world_of(stream->loop), stream);
  if (!r || !r->reading) return 0;
  r->reading = 0;
  r->alloc_cb = NULL;
  r->read_cb = NULL;
  return 0;
}

static mu_handle *reader(mu_world *w, mu_side side) {
  mu_handle *r = side_handle(w, side);
  if (!r || r->state != H_OPEN || r->fd < 0 || r->connect_req || !r->reading || !r->read_cb) return NULL;
  return r;
}

size_t mu_read(mu_world *w, mu_side side, const char *data, size_t n) {
  mu_handle *r = reader(w, side);
  if (!r || n == 0) return 0;
  uv_buf_t buf = uv_buf_init(NULL, 0);
  r->alloc_cb((uv_handle_t *)r->h, 64 * 1024, &buf);
  if (!buf.base || buf.len == 0) {
    r->read_cb((uv_stream_t *)r->h, UV_ENOBUFS, &buf);
    return 0;
  }
  if (n > buf.len) n = buf.len;
  memcpy(buf.base, data, n);
  r->read_cb((uv_stream_t *)r->h, (ssize_t)n, &buf);
  return n;
}

static int read_end(mu_world *w, mu_side side, ssize_t status) {
  mu_handle *r = reader(w, side);
  if (!r) return 0;
  uv_buf_t buf = uv_buf_init(NULL, 0);
  r->alloc_cb((uv_handle_t *)r->h, 64 * 1024, &buf);
  uv_stream_t *s = (uv_stream_t *)r->h;
  r->read_cb(s, status, &buf);
  /* libuv clears the reading flag after the callback, even when the callback restarted reading */
  r = find(w, s);
  if (r) r->reading = 0;
  return 1;
}

int mu_read_eof(mu_world *w, mu_side side) { return read_end(w, side, UV_EOF); }
int mu_read_error(mu_world *w, mu_side side) { return read_end(w, side, UV_ECONNRESET); }

int mu_reading(mu_world *w, mu_side side) { return reader(w, side) != NULL; }

/* ------------------------------------------------------------------ TCP ---- */

int uv_tcp_init(uv_loop_t *loop, uv_tcp_t *handle) {
  mu_handle *r = init_handle(loop, (uv_handle_t *)handle, UV_TCP);
  r->fd = -1;
  return 0;
}

int uv_tcp_nodelay(uv_tcp_t *handle, int enable) {
  (void)enable;
  must_find(world_of(handle->loop), handle);
  return 0;
}

int uv_tcp_bind(uv_tcp_t *handle, const struct sockaddr *addr, unsigned int flags) {
  (void)addr;
  (void)flags;
  must_find(world_of(handle->loop), handle)->fd = 3;
  return 0;
}

/* No handle here has a descriptor the kernel knows (the bound listener's 3 only marks it bound),
 * so nothing may be asked of one: the harnesses configure nothing that needs it. */
int uv_fileno(const uv_handle_t *handle, uv_os_fd_t *fd) {
  (void)handle;
  (void)fd;
  return UV_EBADF;
}

int uv_listen(uv_stream_t *stream, int backlog, uv_connection_cb cb) {
  (void)backlog;
  mu_handle *r = must_find(world_of(stream->loop), stream);
  r->listening = 1;
  r->connection_cb = cb;
  return 0;
}

int mu_accept(mu_world *w) {
  for (size_t i = 0; i < MU_MAX_HANDLES; i++) {
    mu_handle *r = &w->handles[i];
    if (r->state == H_OPEN && r->listening) {
      r->connection_cb((uv_stream_t *)r->h, 0);
      return 1;
    }
  }
  return 0;
}

int uv_accept(uv_stream_t *server, uv_stream_t *client) {
  mu_world *w = world_of(server->loop);
  mu_handle *l = must_find(w, server);
  if (!l->listening) fail("uv_accept on a handle that does not listen");
  if (w->accept_fails) return UV_EAGAIN;
  if (side_handle(w, MU_CLIENT)) fail("one connection per input");
  mu_handle *r = must_find(w, client);
  r->side = MU_CLIENT;
  r->fd = 4;
  r->readable = r->writable = 1;
  return 0;
}

int uv_tcp_getpeername(const uv_tcp_t *handle, struct sockaddr *name, int *namelen) {
  must_find(world_of(handle->loop), handle);
  struct sockaddr_in sin;
  memset(&sin, 0, sizeof sin);
  sin.sin_family = AF_INET;
  sin.sin_port = htons(40000);
  sin.sin_addr.s_addr = htonl(0x0a000002); /* the sandbox: 10.0.0.2 */
  if (*namelen < (int)sizeof sin) return UV_EINVAL;
  memcpy(name, &sin, sizeof sin);
  *namelen = sizeof sin;
  return 0;
}

int uv_tcp_getsockname(const uv_tcp_t *handle, struct sockaddr *name, int *namelen) {
  return uv_tcp_getpeername(handle, name, namelen);
}

int uv_tcp_connect(uv_connect_t *req, uv_tcp_t *handle, const struct sockaddr *addr, uv_connect_cb cb) {
  mu_world *w = world_of(handle->loop);
  mu_handle *r = must_find(w, handle);
  if (r->state != H_OPEN) return UV_EINVAL;
  if (r->connect_req) return UV_EALREADY;
  if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) fail("connect to an address that is not IP");
  if (side_handle(w, MU_UPSTREAM) && side_handle(w, MU_UPSTREAM) != r) fail("a second upstream connection");
  r->side = MU_UPSTREAM;
  r->fd = 5; /* the socket exists (and is readable and writable) before the connect completes */
  r->readable = r->writable = 1;
  if (w->connect_fails_at_once) return UV_ENETUNREACH;
  req->type = UV_CONNECT;
  req->handle = (uv_stream_t *)handle;
  req->cb = cb;
  r->connect_req = req;
  return 0;
}

int mu_connect_done(mu_world *w, int status) {
  mu_handle *r = side_handle(w, MU_UPSTREAM);
  if (!r || r->state != H_OPEN || !r->connect_req) return 0;
  uv_connect_t *req = r->connect_req;
  uv_stream_t *s = (uv_stream_t *)r->h;
  r->connect_req = NULL;
  if (req->cb) req->cb(req, status);
  r = find(w, s);
  if (!r || r->fd < 0) return 1;
  if (status < 0) { /* uv__stream_connect: the queued writes are cancelled at once */
    for (size_t i = 0; i < r->nwrites; i++)
      if (!r->writes[i].done) r->writes[i].done = 1, r->writes[i].status = UV_ECANCELED;
    write_callbacks(r);
  } else if (r->nwrites) {
    r->fed = 1; /* POLLOUT stays on: they go out in the next iteration */
  }
  return 1;
}

int mu_connecting(mu_world *w) {
  mu_handle *r = side_handle(w, MU_UPSTREAM);
  return r && r->state == H_OPEN && r->connect_req;
}

/* --------------------------------------------------------------- timers ---- */

int uv_timer_init(uv_loop_t *loop, uv_timer_t *handle) {
  init_handle(loop, (uv_handle_t *)handle, UV_TIMER);
  return 0;
}

int uv_timer_start(uv_timer_t *handle, uv_timer_cb cb, uint64_t timeout, uint64_t repeat) {
  mu_world *w = world_of(handle->loop);
  mu_handle *r = must_find(w, handle);
  if (r->state != H_OPEN || !cb) return UV_EINVAL;
  if (repeat) fail("repeating timers are not modelled");
  r->active = 1;
  r->timer_cb = cb;
  r->due = w->now + timeout;
  r->seq = ++w->timer_seq;
  return 0;
}

int uv_timer_stop(uv_timer_t *handle) {
  mu_handle *r = find(world_of(handle->loop), handle);
  if (r) r->active = 0;
  return 0;
}

uint64_t uv_now(const uv_loop_t *loop) { return world_of(loop)->now; }
uint64_t mu_now(mu_world *w) { return w->now; }

/* -------------------------------------------------------------- signals ---- */

int uv_signal_init(uv_loop_t *loop, uv_signal_t *handle) {
  init_handle(loop, (uv_handle_t *)handle, UV_SIGNAL);
  return 0;
}

int uv_signal_start(uv_signal_t *handle, uv_signal_cb cb, int signum) {
  mu_handle *r = must_find(world_of(handle->loop), handle);
  if (r->state != H_OPEN) return UV_EINVAL;
  r->signum = signum;
  r->signal_cb = cb;
  r->active = 1;
  return 0;
}

int mu_signal(mu_world *w, int signum) {
  for (size_t i = 0; i < MU_MAX_HANDLES; i++) {
    mu_handle *r = &w->handles[i];
    if (r->state == H_OPEN && r->h->type == UV_SIGNAL && r->active && r->signum == signum) {
      r->signal_cb((uv_signal_t *)r->h, signum);
      return 1;
    }
  }
  return 0;
}

/* ----------------------------------------------------------------- polls ---- */
/* curl_loop.c watches curl's sockets with uv_poll; mem_curl.c opens no socket, so these are
 * never reached. */

int uv_poll_init_socket(uv_loop_t *loop, uv_poll_t *handle, uv_os_sock_t socket) {
  (void)loop;
  (void)handle;
  (void)socket;
  fail("uv_poll_init_socket: curl opened a socket (not modelled)");
  return UV_EINVAL;
}

int uv_poll_start(uv_poll_t *handle, int events, uv_poll_cb cb) {
  (void)handle;
  (void)events;
  (void)cb;
  fail("uv_poll_start (not modelled)");
  return UV_EINVAL;
}

int uv_poll_stop(uv_poll_t *handle) {
  (void)handle;
  fail("uv_poll_stop (not modelled)");
  return UV_EINVAL;
}

/* ---------------------------------------------------------------- closing ---- */

void uv_close(uv_handle_t *handle, uv_close_cb close_cb) {
  mu_world *w = world_of(handle->loop);
  mu_handle *r = must_find(w, handle);
  if (r->state != H_OPEN) fail("uv_close on a handle that is already closing");
  r->state = H_CLOSING;
  r->close_cb = close_cb;
  r->reading = 0;
  r->read_cb = NULL;
  r->alloc_cb = NULL;
  r->readable = r->writable = 0;
  r->fd = -1;
  r->active = 0;
  r->listening = 0;
  w->closing[w->nclosing++] = r;
}

/* uv__stream_destroy, then the close callback */
static void finish_close(mu_world *w, mu_handle *r) {
  uv_handle_t *h = r->h;
  if (r->connect_req) {
    uv_connect_t *req = r->connect_req;
    r->connect_req = NULL;
    if (req->cb) req->cb(req, UV_ECANCELED);
  }
  r = find(w, h);
  if (!r) fail("a handle record vanished while closing");
  for (size_t i = 0; i < r->nwrites; i++)
    if (!r->writes[i].done) r->writes[i].done = 1, r->writes[i].status = UV_ECANCELED;
  write_callbacks(r);
  r = find(w, h);
  if (r->shutdown_req) {
    uv_shutdown_t *req = r->shutdown_req;
    r->shutdown_req = NULL;
    if (req->cb) req->cb(req, UV_ECANCELED);
  }
  r = find(w, h);
  uv_close_cb cb = r->close_cb;
  free(r->writes);
  memset(r, 0, sizeof *r); /* H_FREE: the memory may be freed or reused from here */
  if (cb) cb(h);
}

static void closing_phase(mu_world *w) {
  /* handles closed by these callbacks wait for the next iteration, as in libuv */
  mu_handle *batch[MU_MAX_HANDLES];
  size_t n = w->nclosing;
  memcpy(batch, w->closing, n * sizeof batch[0]);
  w->nclosing = 0;
  for (size_t i = n; i-- > 0;) finish_close(w, batch[i]); /* libuv's closing list is LIFO */
}

static void pending_phase(mu_world *w) {
  for (size_t i = 0; i < MU_MAX_HANDLES; i++) {
    mu_handle *r = &w->handles[i];
    if (r->state == H_OPEN && r->fed && r->fd >= 0 && !r->connect_req) pollout(w, r);
  }
}

void mu_next_iteration(mu_world *w) {
  closing_phase(w);
  pending_phase(w);
}

int mu_fire_timer(mu_world *w) {
  closing_phase(w);
  mu_handle *next = NULL;
  for (size_t i = 0; i < MU_MAX_HANDLES; i++) {
    mu_handle *r = &w->handles[i];
    if (r->state == H_OPEN && r->h->type == UV_TIMER && r->active &&
        (!next || r->due < next->due || (r->due == next->due && r->seq < next->seq)))
      next = r;
  }
  if (next) {
    if (next->due > w->now) w->now = next->due;
    next->active = 0; /* a one-shot timer stops before its callback, which may start it again */
    next->timer_cb((uv_timer_t *)next->h);
  }
  pending_phase(w);
  return next != NULL;
}

int mu_open_handles(mu_world *w) {
  int n = 0;
  for (size_t i = 0; i < MU_MAX_HANDLES; i++) n += w->handles[i].state != H_FREE;
  return n;
}

/* -------------------------------------------------------------- resolving ---- */

int uv_getaddrinfo(uv_loop_t *loop, uv_getaddrinfo_t *req, uv_getaddrinfo_cb cb, const char *node,
                   const char *service, const struct addrinfo *hints) {
  (void)service;
  (void)hints;
  mu_world *w = world_of(loop);
  if (!node || !cb) return UV_EINVAL;
  for (size_t i = 0; i < w->nresolves; i++)
    if (w->resolves[i].req == req) fail("a resolve request reused while in flight");
  if (w->nresolves == MU_MAX_RESOLVES) fail("too many resolves");
  req->type = UV_GETADDRINFO;
  req->loop = loop;
  w->resolves[w->nresolves++] = (mu_resolve){.req = req, .cb = cb};
  return 0;
}

int uv_cancel(uv_req_t *req) {
  if (req->type != UV_GETADDRINFO) fail("uv_cancel of a request other than a resolve (not modelled)");
  mu_world *w = world_of(((uv_getaddrinfo_t *)req)->loop);
  for (size_t i = 0; i < w->nresolves; i++) {
    if ((uv_req_t *)w->resolves[i].req == req) {
      if (!w->cancel_ok) return UV_EBUSY; /* the lookup already runs: its answer comes anyway */
      w->resolves[i].cancelled = 1;
      return 0;
    }
  }
  return UV_EINVAL;
}

int mu_resolving(mu_world *w) { return w->nresolves > 0; }

static struct addrinfo *answer_entry(struct addrinfo *next, int family, const char *text) {
  struct addrinfo *ai = calloc(1, sizeof *ai);
  struct sockaddr_storage *ss = calloc(1, sizeof *ss);
  if (!ai || !ss) fail("out of memory");
  ai->ai_family = family;
  ai->ai_socktype = SOCK_STREAM;
  ai->ai_addr = (struct sockaddr *)ss;
  if (family == AF_INET) {
    struct sockaddr_in *s = (struct sockaddr_in *)ss;
    s->sin_family = AF_INET;
    inet_pton(AF_INET, text, &s->sin_addr);
    ai->ai_addrlen = sizeof *s;
  } else {
    struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
    s->sin6_family = AF_INET6;
    inet_pton(AF_INET6, text, &s->sin6_addr);
    ai->ai_addrlen = sizeof *s;
  }
  ai->ai_next = next;
  return ai;
}

void uv_freeaddrinfo(struct addrinfo *ai) {
  while (ai) {
    struct addrinfo *next = ai->ai_next;
    free(ai->ai_addr);
    free(ai);
    ai = next;
  }
}

int mu_resolve_done(mu_world *w, mu_answer answer) {
  if (!w->nresolves) return 0;
  mu_resolve x = w->resolves[0];
  memmove(&w->resolves[0], &w->resolves[1], (w->nresolves - 1) * sizeof x);
  w->nresolves--;
  if (x.cancelled) {
    x.cb(x.req, UV_EAI_CANCELED, NULL);
    return 1;
  }
  struct addrinfo *res = NULL;
  int status = 0;
  switch (answer) {
  case MU_ANSWER_PUBLIC4: res = answer_entry(NULL, AF_INET, "93.184.216.34"); break;
  case MU_ANSWER_BOTH: res = answer_entry(answer_entry(NULL, AF_INET, "93.184.216.34"), AF_INET6, "2606:2800:220:1::1"); break;
  case MU_ANSWER_PUBLIC6: res = answer_entry(NULL, AF_INET6, "2606:2800:220:1::1"); break;
  case MU_ANSWER_PRIVATE: res = answer_entry(NULL, AF_INET, "10.0.0.5"); break;
  case MU_ANSWER_MIXED: res = answer_entry(answer_entry(NULL, AF_INET, "127.0.0.1"), AF_INET, "93.184.216.34"); break;
  case MU_ANSWER_MAPPED: res = answer_entry(NULL, AF_INET6, "::ffff:10.0.0.5"); break;
  case MU_ANSWER_NONE: status = UV_EAI_NODATA; break;
  default: status = UV_EAI_NONAME; break;
  }
  x.cb(x.req, status, res);
  return 1;
}

/* ----------------------------------------------------------------- helpers ---- */

uv_buf_t uv_buf_init(char *base, unsigned int len) {
  uv_buf_t b;
  b.base = base;
  b.len = len;
  return b;
}

int uv_ip4_addr(const char *ip, int port, struct sockaddr_in *addr) {
  memset(addr, 0, sizeof *addr);
  addr->sin_family = AF_INET;
  addr->sin_port = htons((uint16_t)port);
  return inet_pton(AF_INET, ip, &addr->sin_addr) == 1 ? 0 : UV_EINVAL;
}

int uv_ip6_addr(const char *ip, int port, struct sockaddr_in6 *addr) {
  memset(addr, 0, sizeof *addr);
  addr->sin6_family = AF_INET6;
  addr->sin6_port = htons((uint16_t)port);
  return inet_pton(AF_INET6, ip, &addr->sin6_addr) == 1 ? 0 : UV_EINVAL;
}

int uv_ip_name(const struct sockaddr *src, char *dst, size_t size) {
  const void *a = src->sa_family == AF_INET ? (const void *)&((const struct sockaddr_in *)src)->sin_addr
                                            : (const void *)&((const struct sockaddr_in6 *)src)->sin6_addr;
  return inet_ntop(src->sa_family, a, dst, (socklen_t)size) ? 0 : UV_EINVAL;
}

const char *uv_strerror(int err) {
  switch (err) {
  case UV_ECONNREFUSED: return "connection refused";
  case UV_ECONNRESET: return "connection reset by peer";
  case UV_ETIMEDOUT: return "connection timed out";
  case UV_ENETUNREACH: return "network is unreachable";
  case UV_EPIPE: return "broken pipe";
  case UV_ECANCELED: return "operation canceled";
  case UV_EAI_NONAME: return "unknown node or service";
  case UV_EAI_NODATA: return "no address";
  case UV_EAI_CANCELED: return "request canceled";
  }
  return "unknown error";
}
