/* h:exec's start when stdin is given (engine_exec.c does the rest: checks, create, exit code).
 * The start is hijacked (csrc/engine/attach.c) on a connection of its own: one poll(2) loop
 * writes stdin as the connection takes it and reads the framed output as it comes, so a command
 * that echoes its input (cat) never blocks on a full output pipe while stdin waits, and one that
 * never reads its stdin still has its output read and its time counted. After the last byte, a
 * half-close is stdin's end. The output goes through the same demultiplexer and budget as the
 * start without stdin, and the command's time is the same clock (engine_exec.h). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "engine/attach.h"
#include "lua/engine_exec.h"
#include "lua/engine_handle.h"
#include "util/clock.h"

static const char START_BODY[] = "{\"Detach\":false,\"Tty\":false}";

/* One read or write: larger than a TLS record (16 KiB), so no decrypted bytes stay behind in
 * OpenSSL where poll(2) on the socket would not see them. */
#define CHUNK (64 * 1024)

typedef struct {
  sse_attach *a;
  const char *spath;
  const char *in;
  size_t in_len, sent;
  int in_done;  /* stdin ended: all of it sent and half-closed, or the daemon stopped taking it */
  char *buf;
} stdin_run;

/* Pushes the error object and returns 0, for `return failed(L, &err)`. */
static int failed(lua_State *L, ss_error *err) {
  ss_push_error_object(L, err);
  return 0;
}

/* Writes what the connection takes now; after the last byte, the half-close. -1 with err set. */
static int write_some(stdin_run *s, ss_error *err) {
  if (s->sent < s->in_len) {
    size_t n = s->in_len - s->sent;
    ssize_t k = sse_attach_send_some(s->a, s->in + s->sent, n < CHUNK ? n : CHUNK, err);
    if (k < 0) { /* the daemon closed its end: the process ended without reading it all */
      ss_error_clear(err);
      s->in_done = 1;
      return 0;
    }
    s->sent += (size_t)k;
    if (s->sent < s->in_len) return 0;
  }
  s->in_done = 1;
  return sse_attach_shutdown_write(s->a, err);
}

/* Reads what has come (without waiting) into d. 1 at the stream's end, 0 for more, -1 with err
 * set (a dropped connection; the demultiplexer's refusals). */
static int read_some(stdin_run *s, sse_demux *d, size_t budget, ss_error *err) {
  ssize_t got = sse_attach_recv(s->a, s->buf, CHUNK, 0, err);
  if (got == -2) return 0;
  if (got == -1) {
    /* A process that ended without reading all its stdin: the daemon closes the connection with
     * our bytes unread in it, which reads as a reset once the output before it is read. After
     * stdin's end and at a frame's edge that is the stream's end; the exit code read next says
     * whether the process ended (a connection dropped under a running one finds none). */
    if (!s->in_done || s->in_len == 0) return -1;
    ss_error_clear(err);
    got = 0;
  }
  if (got == 0) {
    if (sse_demux_finish(d) != SSE_DEMUX_TRUNCATED) return 1;
    ss_error_set(err, "transport", "closed", "POST %s: the stream ended inside a frame", s->spath);
    return -1;
  }
  int st = sse_demux_feed(d, s->buf, (size_t)got);
  if (st == SSE_DEMUX_OK) return 0;
  if (st == SSE_DEMUX_OVER) {
    ss_error_set(err, "output_limit", NULL, "POST %s: output over the budget of %zu bytes", s->spath, budget);
    ss_error_field_num(err, "limit", (double)budget);
  } else if (st == SSE_DEMUX_BAD) {
    ss_error_set(err, "transport", "bad_stream", "POST %s: the output is not a framed stdout/stderr stream", s->spath);
  } else {
    ss_error_set(err, "transport", "nomem", "POST %s: out of memory", s->spath);
  }
  return -1;
}

/* Waits until the connection is readable (or writable, while stdin is left) or `until` passes. */
static void wait_ready(const stdin_run *s, double until) {
  if (sse_attach_buffered(s->a)) return;
  double left = until - ss_monotonic_now();
  int ms = left <= 0 ? 0 : (int)(left * 1000.0) + 1;
  struct pollfd p = {.fd = sse_attach_fd(s->a), .events = (short)(POLLIN | (s->in_done ? 0 : POLLOUT))};
  while (poll(&p, 1, ms) < 0 && errno == EINTR) {
  }
}

static int run(lua_State *L, ss_exec_run *x, ss_exec_clock *k, stdin_run *s, sse_demux *d) {
  ss_error err;
  ss_error_init(&err);
  for (;;) {
    if (!s->in_done && write_some(s, &err) != 0) return failed(L, &err);
    int r = read_some(s, d, d->budget, &err);
    if (r < 0) return failed(L, &err);
    if (r > 0) return 1;
    if (ss_exec_clock_tick(L, x, k)) {
      ss_exec_ran_past(&err, s->spath, k->timeout);
      return failed(L, &err);
    }
    wait_ready(s, ss_exec_clock_until(k));
  }
}

int ss_exec_stdin_run(lua_State *L, ss_exec_run *x, ss_exec_clock *k, const sse_config *cfg, const char *spath,
                      const char *starget, const char *in, size_t in_len, sse_demux *d) {
  ss_error err;
  ss_error_init(&err);
  sse_attach_refusal refusal;
  sse_attach *a = sse_attach_open(cfg, "POST", starget, START_BODY, sizeof START_BODY - 1, k->run_for, &refusal, &err);
  if (!a) {
    if (!refusal.status) return failed(L, &err);
    ss_push_engine_error(L, refusal.status, "POST", spath, refusal.message);
    return 0;
  }
  stdin_run s = {.a = a, .spath = spath, .in = in, .in_len = in_len, .buf = malloc(CHUNK)};
  int ok;
  if (!s.buf) {
    ss_error_set(&err, "transport", "nomem", "POST %s: out of memory", spath);
    ok = failed(L, &err);
  } else {
    /* The engine took the start: the command's clock begins, as the other start's at its submit. */
    ss_exec_clock_start(k, k->run_for, k->timeout, k->jpath, k->jtarget);
    ok = run(L, x, k, &s, d);
  }
  free(s.buf);
  sse_attach_free(a);
  return ok;
}
