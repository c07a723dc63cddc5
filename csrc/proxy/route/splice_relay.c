/* Raw CONNECT tunnels relayed by the kernel: each direction moves socket -> pipe -> socket with
 * splice(2), so the bytes never enter this process (relay.c's libuv reads copy every byte in and
 * out of a 64 KiB buffer). Linux only; the build defines SANDSTACK_PROXY_SPLICE when its configure
 * check finds splice(2), and elsewhere every function here declines, so relay.c keeps relaying.
 *
 * Living beside libuv: the tunnel's uv_tcp_t handles keep owning their sockets (they are closed as
 * always, and nothing else changes for them), but they stop reading and write nothing more. Each
 * socket is dup()'d and the dup is watched with a uv_poll_t. epoll keys a registration on the fd
 * number (and the open file), and libuv keeps one watcher per fd number, so the dup is a separate
 * registration that cannot collide with the stream's own; a uv_poll_t on the stream's own fd would
 * share libuv's one watcher slot with the stream. Bytes the proxy already holds in user space (the
 * early bytes after the CONNECT head, the ClientHello tunnel.c checked, the 200 itself) are in the
 * streams' write queues: a zero-length write behind each queue calls back once everything before
 * it went out, and only then does splicing start, so the order on the wire is kept.
 *
 * Backpressure: a direction reads its source only while its pipe has room. When the pipe holds
 * bytes the destination would not take, the source is no longer polled for readability until an
 * out-splice made room again, so a reader that stops reading stops the sender at the kernel's
 * socket buffers plus one pipe (no user-space memory at all). A pipe is counted in slots, not
 * bytes (a slot may hold part of a page), so a splice into a pipe holding bytes that answers
 * EAGAIN is taken as "full" rather than polled again, which would spin on a readable socket.
 *
 * Half-close and errors are relay.c's: EOF from one side, once its pipe has drained, is a
 * shutdown(SHUT_WR) toward the other; the tunnel ends when both directions have ended. An error
 * reading a side ends the tunnel as client_error or upstream_error, an error writing as
 * write_error. bytes_up and bytes_down count what was read from each side, as relay.c does.
 *
 * Resources: two pipes (four fds) and two dups per tunnel, made when the relay starts; when any of
 * them cannot be made (EMFILE, ENFILE, ENOMEM), or when they would leave less than a quarter of
 * the open-file limit free for new connections, the tunnel uses relay.c's libuv path instead.
 * Pipes start at one page and grow once a direction has moved BULK_AFTER bytes (or its pipe
 * filled): an idle tunnel charges the kernel's per-user pipe quota (fs.pipe-user-pages-soft,
 * shared by every proxy on a host running as the same uid) one page per pipe, a busy direction
 * enough to move up to PIPE_BULK per pair of system calls (a one-page pipe moves one TCP segment
 * per pair, slower than relay.c's 64 KiB reads). A 1 MiB pipe costs the proxy about a quarter less
 * CPU per byte than a 256 KiB one (design/proxy.md, "Relay"), so a busy direction takes the largest of
 * 1 MiB, 256 KiB and 64 KiB that fits in PIPE_BUDGET, the bytes of grown pipes one proxy may hold at once (a
 * quarter of the default soft quota): 16 tunnels at 1 MiB, or more at 256 or 64 KiB; when none
 * fits the pipe keeps its page and tries again later. A grown pipe gives its pages back: a sweep
 * every PIPE_IDLE_MS shrinks each grown pipe that is empty and moved nothing since the sweep
 * before (it grows again after another BULK_AFTER bytes), so 300 idle tunnels that each moved
 * 70 KiB hold 600 pages, not the quota. */
#include "proxy/conn.h"
#include "proxy/route/splice_relay.h"

#ifdef SANDSTACK_PROXY_SPLICE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define PIPE_START 4096         /* one slot: what an idle direction holds */
#define PIPE_BULK (1024 * 1024) /* the most a busy direction grows to */
#define BULK_AFTER (64 * 1024)  /* a direction that moved this much is busy */
#define PIPE_BUDGET ((size_t)16 * 1024 * 1024) /* grown pipes' bytes: a quarter of the default soft quota */
#define PIPE_IDLE_MS 2000       /* a grown pipe empty and unused this long shrinks */
#define ROUNDS 16               /* in/out splice pairs per callback, so one tunnel cannot starve the rest */
#define SIDE_CLIENT 0
#define SIDE_UPSTREAM 1

/* One direction: from side `from` into the pipe, from the pipe to the other side. */
typedef struct {
  int pipe_r, pipe_w;
  size_t in_pipe;   /* bytes spliced in and not yet out */
  size_t pipe_size; /* the pipe's capacity in bytes (whole pages) */
  int eof;          /* the source ended */
  int full;         /* the pipe took nothing more: wait for an out-splice */
  int ended;        /* the EOF was passed on (shutdown toward the destination) */
  int grown;        /* the pipe was grown (or refused growing) since it last shrank */
  int big;          /* it is grown now: counted in srv->pipes_grown, pipe_size in srv->pipe_bytes_grown */
  uint64_t total;   /* bytes moved since it last shrank (a busy direction grows its pipe) */
  uint64_t swept;   /* total at the last sweep: unchanged means idle */
} splice_dir;

typedef struct splice_relay splice_relay;
struct splice_relay {
  uv_poll_t poll[2]; /* on fd[SIDE_CLIENT] and fd[SIDE_UPSTREAM] */
  int fd[2];         /* dups of the streams' sockets */
  int events[2];     /* what each poll handle watches now */
  int handles;       /* poll handles initialised and not yet closed back */
  int live;          /* splicing (or flushing to start): not declined, not stopped */
  int flushes;       /* barrier writes still to call back before splicing starts */
  splice_dir dir[2]; /* indexed by the source side: dir[SIDE_CLIENT] is client -> upstream */
  splice_relay_ended_fn ended; /* relay.c's end check, after each EOF passed on */
};

static uv_tcp_t *stream_of(proxy_conn *c, int side) { return side == SIDE_CLIENT ? &c->client : &c->upstream; }

static void on_poll_closed(uv_handle_t *h) {
  proxy_conn *c = h->data;
  if (--((splice_relay *)c->route)->handles == 0) {
    free(c->route);
    c->route = NULL;
  }
  conn_release(c);
}

/* A grown pipe's bytes leave the proxy's budget (it shrank, or its tunnel ended). */
static void pipe_given_back(proxy_server *s, splice_dir *d) {
  s->pipe_bytes_grown -= d->pipe_size;
  d->big = 0;
  if (--s->pipes_grown == 0) uv_timer_stop(&s->pipe_sweep);
}

/* Closes every fd and handle the relay made; the struct goes with the last handle's callback. */
static void release(proxy_conn *c) {
  splice_relay *sr = c->route;
  int handles = sr->handles;
  sr->live = 0;
  for (int side = 0; side < 2; side++) {
    if (sr->dir[side].big) pipe_given_back(c->srv, &sr->dir[side]);
    /* uv_close takes the dup out of epoll before it is closed, so the number can be reused */
    if (side < handles) uv_close((uv_handle_t *)&sr->poll[side], on_poll_closed);
    if (sr->fd[side] >= 0) close(sr->fd[side]);
    if (sr->dir[side].pipe_r >= 0) close(sr->dir[side].pipe_r);
    if (sr->dir[side].pipe_w >= 0) close(sr->dir[side].pipe_w);
    sr->fd[side] = sr->dir[side].pipe_r = sr->dir[side].pipe_w = -1;
  }
  if (handles == 0) {
    free(sr);
    c->route = NULL;
  }
}

/* New fds are the lowest free numbers, so the highest one says how full the table is. */
static int leaves_fds_free(int highest) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1;
  return (rlim_t)highest < rl.rlim_cur - rl.rlim_cur / 4;
}

/* The fds: two pipes and two dups; -1 when one cannot be made or they crowd the fd table (what was
 * made is closed by the caller's release). */
static int make_fds(proxy_conn *c) {
  splice_relay *sr = c->route;
  int highest = 0;
  for (int side = 0; side < 2; side++) {
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) return -1;
    sr->dir[side].pipe_r = p[0];
    sr->dir[side].pipe_w = p[1];
    int size = fcntl(p[1], F_SETPIPE_SZ, PIPE_START); /* shrinking is always permitted */
    if (size < 0) size = fcntl(p[1], F_GETPIPE_SZ);
    if (size <= 0) return -1;
    sr->dir[side].pipe_size = (size_t)size;
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)stream_of(c, side), &fd) != 0) return -1;
    sr->fd[side] = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (sr->fd[side] < 0) return -1;
    if (p[1] > highest) highest = p[1];
    if (sr->fd[side] > highest) highest = sr->fd[side];
  }
  return leaves_fds_free(highest) ? 0 : -1;
}

static void fail(proxy_conn *c, const char *end) {
  if (!c->end) c->end = end;
  conn_close(c);
}

static void sweep(uv_timer_t *t);

/* A busy direction's pipe grows once, to the largest size that fits in what is left of
 * PIPE_BUDGET and that the kernel grants (past the per-user quota it refuses: the next size is
 * tried, down to its default 64 KiB); when none does it keeps its one page. 1 when it grew. */
static int grow(proxy_server *s, splice_dir *d) {
  static const size_t sizes[] = {PIPE_BULK, 256 * 1024, 65536};
  if (d->grown) return 0;
  int fitted = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (s->pipe_bytes_grown + sizes[i] > PIPE_BUDGET) continue;
    fitted = 1;
    int size = fcntl(d->pipe_w, F_SETPIPE_SZ, (int)sizes[i]);
    if (size > 0 && (size_t)size > d->pipe_size) {
      d->pipe_size = (size_t)size;
      d->full = 0;
      d->big = d->grown = 1;
      d->swept = d->total;
      s->pipe_bytes_grown += d->pipe_size;
      if (s->pipes_grown++ == 0) uv_timer_start(&s->pipe_sweep, sweep, PIPE_IDLE_MS, PIPE_IDLE_MS);
      return 1;
    }
  }
  if (fitted) d->grown = 1; /* the kernel refused every size: not asked again for this tunnel */
  return 0;                 /* nothing fitted the budget: tried again after the next splice */
}

/* Every grown pipe that is empty and moved nothing since the last sweep goes back to one page
 * (shrinking an empty pipe always succeeds); a pipe holding bytes or in use stays. */
static void sweep(uv_timer_t *t) {
  proxy_server *s = t->data;
  for (proxy_conn *c = s->conns; c && s->pipes_grown; c = c->next) {
    if (!c->route) continue;
    for (int side = 0; side < 2; side++) {
      splice_dir *d = &((splice_relay *)c->route)->dir[side];
      int idle = d->total == d->swept;
      d->swept = d->total;
      if (!d->big || !idle || d->in_pipe || d->pipe_w < 0) continue;
      int size = fcntl(d->pipe_w, F_SETPIPE_SZ, PIPE_START);
      if (size <= 0) continue;
      pipe_given_back(s, d);
      d->pipe_size = (size_t)size;
      d->grown = 0;
      d->total = d->swept = 0;
    }
  }
}

/* The source ended and its pipe is empty: FIN toward the destination, as relay.c's uv_shutdown
 * does once its write queue has drained (its status is ignored there too). */
static void pass_eof(proxy_conn *c, int from) {
  splice_relay *sr = c->route;
  sr->dir[from].ended = 1;
  shutdown(sr->fd[!from], SHUT_WR);
  if (from == SIDE_CLIENT) c->client_eof = 1;
  else c->upstream_eof = 1;
  sr->ended(c);
}

/* Out of the pipe into the destination: 0 when it would block or the pipe is empty, -1 when the
 * tunnel ended. */
static ssize_t splice_out(proxy_conn *c, int from) {
  splice_relay *sr = c->route;
  splice_dir *d = &sr->dir[from];
  if (d->in_pipe == 0) return 0;
  ssize_t n = splice(d->pipe_r, NULL, sr->fd[!from], NULL, d->in_pipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
  if (n < 0 && errno != EAGAIN && errno != EINTR) return fail(c, "write_error"), -1;
  if (n <= 0) return 0;
  d->in_pipe -= (size_t)n;
  d->full = 0;
  return n;
}

/* From the source into the pipe: the bytes read (counted and resetting the idle deadline), 0 when
 * nothing can be read now, -1 when the tunnel ended. Sets eof and full. */
static ssize_t splice_in(proxy_conn *c, int from) {
  splice_relay *sr = c->route;
  splice_dir *d = &sr->dir[from];
  if (d->eof || d->full) return 0;
  if (d->in_pipe >= d->pipe_size && !grow(c->srv, d)) {
    d->full = 1;
    return 0;
  }
  ssize_t n = splice(sr->fd[from], NULL, d->pipe_w, NULL, d->pipe_size - d->in_pipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
  if (n == 0) {
    d->eof = 1;
    return 0;
  }
  if (n < 0) {
    if (errno != EAGAIN && errno != EINTR) return fail(c, from == SIDE_CLIENT ? "client_error" : "upstream_error"), -1;
    /* with bytes in the pipe, EAGAIN may mean its slots ran out (a slot can hold part of a page):
       a larger pipe is tried once, otherwise the source waits for an out-splice */
    if (d->in_pipe > 0 && !grow(c->srv, d)) d->full = 1;
    return 0;
  }
  d->in_pipe += (size_t)n;
  d->total += (uint64_t)n;
  if (from == SIDE_CLIENT) c->bytes_up += (uint64_t)n;
  else c->bytes_down += (uint64_t)n;
  conn_set_deadline(c, c->srv->cfg->idle_ms);
  if (d->total >= BULK_AFTER) grow(c->srv, d);
  return n;
}

/* Moves what it can from side `from` to the other side, in at most ROUNDS in/out pairs; returns
 * the bytes moved either way, or -1 when the tunnel ended (c may be closing: touch nothing). */
static ssize_t pump(proxy_conn *c, int from) {
  splice_dir *d = &((splice_relay *)c->route)->dir[from];
  ssize_t moved = 0;
  for (int round = 0; round < ROUNDS; round++) {
    ssize_t out = splice_out(c, from);
    if (out < 0) return -1;
    ssize_t in = splice_in(c, from);
    if (in < 0) return -1;
    moved += out + in;
    if (in == 0 && (out == 0 || d->in_pipe == 0)) break; /* nothing more to do now */
  }
  if (d->eof && d->in_pipe == 0 && !d->ended) {
    pass_eof(c, from);
    if (c->state != ST_RELAY) return -1;
  }
  return moved;
}

/* Readable while its direction has room; writable while the other direction has bytes for it. */
static int wanted(const splice_relay *sr, int side) {
  const splice_dir *in = &sr->dir[side], *out = &sr->dir[!side];
  int ev = 0;
  if (!in->eof && !in->full && in->in_pipe < in->pipe_size) ev |= UV_READABLE;
  if (out->in_pipe > 0 && !out->ended) ev |= UV_WRITABLE;
  return ev;
}

static void on_poll(uv_poll_t *h, int status, int events);

static void rearm(proxy_conn *c) {
  splice_relay *sr = c->route;
  for (int side = 0; side < 2; side++) {
    int ev = wanted(sr, side);
    if (ev == sr->events[side]) continue;
    int rc = ev ? uv_poll_start(&sr->poll[side], ev, on_poll) : uv_poll_stop(&sr->poll[side]);
    if (rc != 0) return fail(c, "poll_error");
    sr->events[side] = ev;
  }
}

static void on_poll(uv_poll_t *h, int status, int events) {
  proxy_conn *c = h->data;
  splice_relay *sr = c->route;
  if (c->state != ST_RELAY || !sr->live) return;
  int side = h == &sr->poll[SIDE_CLIENT] ? SIDE_CLIENT : SIDE_UPSTREAM;
  if (status < 0) {
    /* EPOLLERR: libuv stopped the handle. Every operation on this socket is tried so the error
       surfaces from the system call that meets it (data that came before it still goes out) */
    sr->events[side] = 0;
    events = UV_READABLE | UV_WRITABLE;
  }
  ssize_t out = 0, in = 0; /* what the two directions through this socket moved */
  if ((events & UV_WRITABLE) && (out = pump(c, !side)) < 0) return;
  if ((events & UV_READABLE) && (in = pump(c, side)) < 0) return;
  ssize_t moved = out + in;
  if (status < 0 && moved == 0) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(sr->fd[side], SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0 || wanted(sr, side) != 0) /* an error no splice met would fire again at once */
      return fail(c, side == SIDE_CLIENT ? "client_error" : "upstream_error");
  }
  rearm(c);
}

static void start_splicing(proxy_conn *c) {
  splice_relay *sr = c->route;
  for (int side = 0; side < 2; side++) sr->events[side] = 0;
  rearm(c);
}

static void flushed(proxy_conn *c, int status) {
  (void)status;
  splice_relay *sr = c->route;
  if (sr && sr->live && --sr->flushes == 0 && c->state == ST_RELAY) start_splicing(c);
}

int splice_relay_start(proxy_conn *c, splice_relay_ended_fn ended) {
  if (c->kind != KIND_CONNECT || c->route) return -1;
  splice_relay *sr = calloc(1, sizeof *sr);
  if (!sr) return -1;
  sr->ended = ended;
  for (int side = 0; side < 2; side++) sr->fd[side] = sr->dir[side].pipe_r = sr->dir[side].pipe_w = -1;
  c->route = sr;
  if (make_fds(c) != 0) return release(c), -1;
  for (int side = 0; side < 2; side++) {
    if (uv_poll_init_socket(c->srv->loop, &sr->poll[side], sr->fd[side]) != 0) return release(c), -1;
    sr->poll[side].data = c;
    sr->handles++;
    conn_hold(c);
  }
  sr->live = 1;
  c->relay = "splice";
  uv_read_stop((uv_stream_t *)&c->client); /* the streams read no more: the dups are polled instead */
  uv_read_stop((uv_stream_t *)&c->upstream);
  sr->flushes = 1; /* held while the barriers are queued, so none can start splicing early */
  for (int side = 0; side < 2; side++) {
    uv_stream_t *s = (uv_stream_t *)stream_of(c, side);
    if (uv_stream_get_write_queue_size(s) == 0) continue;
    sr->flushes++;
    if (conn_write(c, s, "", 0, flushed) != 0) {
      if (c->state != ST_CLOSING) fail(c, "write_error");
      return 0;
    }
  }
  flushed(c, 0);
  return 0;
}

void splice_relay_stop(proxy_conn *c) {
  splice_relay *sr = c->route;
  if (sr && sr->live) release(c);
}

#else /* no splice(2): relay.c's libuv path relays every tunnel */

int splice_relay_start(proxy_conn *c, splice_relay_ended_fn ended) {
  (void)c;
  (void)ended;
  return -1;
}

void splice_relay_stop(proxy_conn *c) { (void)c; }

#endif
