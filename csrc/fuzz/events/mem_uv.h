/* An in-memory libuv for csrc/fuzz/fuzz_proxy_events.c: the libuv functions sandstack-proxy
 * calls, implemented over memory instead of sockets, so the fuzzer decides when each thing
 * happens. It is a link-time seam: the target links the proxy's own sources with this file in
 * place of libuv (and mem_curl.c in place of libcurl), so the proxy under test is byte for byte
 * the code the real binary runs, and the real binary keeps libuv with no indirection.
 *
 * What is modelled is what the proxy relies on, as libuv 1.44 (src/unix/stream.c) does it:
 *  - a loop iteration is timers, then the pending phase (callbacks of writes that went out at
 *    once), then the poll phase (reads, connects, resolves, writability, signals: the fuzzer's
 *    events), then the closing phase (close callbacks, in reverse order of uv_close);
 *  - write callbacks never run inside uv_write; a write to a peer that does not read stays
 *    queued (write_queue_size counts it) until the peer reads; a shutdown waits for the queue;
 *  - reads only while reading; EOF or an error stops reading, whatever the callback did;
 *  - a TCP handle that is connecting neither reads nor writes yet; a failed connect cancels its
 *    queued writes right after the connect callback;
 *  - closing a stream cancels its connect, its queued writes (ECANCELED) and its shutdown, then
 *    runs the close callback;
 *  - uv_cancel of a resolve succeeds or is too late (EBUSY), as the input says.
 * What libuv would assert on (closing a handle twice, initialising a live handle, reusing a
 * request still in flight) aborts here, so the fuzzer reports it. */
#ifndef SANDSTACK_FUZZ_MEM_UV_H
#define SANDSTACK_FUZZ_MEM_UV_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef enum { MU_NONE, MU_CLIENT, MU_UPSTREAM } mu_side;

/* What the fake tells the driver: bytes that left the proxy toward a side, and its FIN. */
typedef struct mu_hooks {
  void *ctx;
  void (*sent)(void *ctx, mu_side side, const char *data, size_t n);
  void (*fin)(void *ctx, mu_side side);
  /* the proxy queued a write toward a side (NULL: not wanted): what it decided is seen then, as
   * the write may reach the side only at a later event, after the decision moved on */
  void (*queued)(void *ctx, mu_side side);
} mu_hooks;

/* The resolver's answers, chosen by the fuzzer. */
typedef enum {
  MU_ANSWER_PUBLIC4,   /* a public IPv4 (93.184.216.34) */
  MU_ANSWER_BOTH,      /* a public IPv6 then a public IPv4 */
  MU_ANSWER_PUBLIC6,   /* a public IPv6 only */
  MU_ANSWER_PRIVATE,   /* 10.0.0.5 */
  MU_ANSWER_MIXED,     /* a public IPv4 and 127.0.0.1 */
  MU_ANSWER_MAPPED,    /* ::ffff:10.0.0.5 */
  MU_ANSWER_NONE,      /* no address (an empty list) */
  MU_ANSWER_FAIL,      /* UV_EAI_NONAME */
  MU_ANSWER_COUNT
} mu_answer;

typedef struct mu_world mu_world;

/* A world for loop (loop->data points to it). cancel_ok: whether uv_cancel of a resolve
 * succeeds; accept_fails, connect_fails_at_once: the rare synchronous failures. */
mu_world *mu_new(uv_loop_t *loop, const mu_hooks *hooks, int cancel_ok, int accept_fails, int connect_fails_at_once);
/* Frees the world; aborts when a handle is still open or a request still in flight. */
void mu_free(mu_world *w);

/* ---- poll-phase events (each is one libuv callback, or none when it cannot happen now) ---- */
/* A new connection on the listening socket: its connection callback. */
int mu_accept(mu_world *w);
/* One read of up to n of data's bytes on a side; returns the bytes delivered (0: none, the
 * stream does not read now). */
size_t mu_read(mu_world *w, mu_side side, const char *data, size_t n);
/* End of stream, or an error (ECONNRESET), on a side's read; 1 when delivered. */
int mu_read_eof(mu_world *w, mu_side side);
int mu_read_error(mu_world *w, mu_side side);
/* The peer reads again (and from now on takes writes at once): queued writes go out, their
 * callbacks run, a waiting shutdown completes. */
int mu_writable(mu_world *w, mu_side side);
/* The peer stops reading: writes queue up. */
void mu_stall(mu_world *w, mu_side side);
/* The peer is gone: queued and later writes fail (EPIPE) when tried. */
int mu_write_error(mu_world *w, mu_side side);
/* The pending connect completes (status 0) or fails. */
int mu_connect_done(mu_world *w, int status);
/* The oldest pending resolve calls back with this answer (a cancelled one with EAI_CANCELED). */
int mu_resolve_done(mu_world *w, mu_answer answer);
/* A signal arrives (SIGTERM, SIGINT) at the handle watching it. */
int mu_signal(mu_world *w, int signum);

/* ---- iteration boundaries ---- */
/* Ends the iteration (closing phase) and starts the next: the pending phase. */
void mu_next_iteration(mu_world *w);
/* Ends the iteration, then lets time pass to the earliest timer and fires it (timer phase), then
 * the pending phase; 0 when no timer is active. */
int mu_fire_timer(mu_world *w);

/* ---- state, for the driver's choices and checks ---- */
int mu_reading(mu_world *w, mu_side side);
int mu_connecting(mu_world *w);
int mu_resolving(mu_world *w);
int mu_open_handles(mu_world *w); /* handles not closed yet (close callback not run) */
uint64_t mu_now(mu_world *w);

#endif
