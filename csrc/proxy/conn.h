#ifndef SANDSTACK_PROXY_CONN_H
#define SANDSTACK_PROXY_CONN_H
/* A client connection (conn.c): it lives until its last handle has closed and its last request
 * (write, resolve, connect, shutdown) has called back: `refs` counts them. */
#include <stdint.h>
#include <uv.h>

#include "proxy/parse/cred_table.h"
#include "proxy/parse/http_head.h"
#include "proxy/server.h"
#include "util/buf.h"

/* The longest name of who answered a held request that a connection keeps (its audit line); the
 * control channel refuses a longer one. */
#define ASK_BY_MAX 64

typedef enum { KIND_NONE, KIND_CONNECT, KIND_FORWARD, KIND_CREDENTIAL, KIND_INSPECT } conn_kind;
/* Where a connection is: the route that holds it is its handlers (conn_handlers); the state
 * names the stage for the checks that span routes (a live policy swap, the audit). The drain
 * asks the route itself (its seal). */
typedef enum { ST_HEAD, ST_DIAL, ST_HELLO, ST_RELAY, ST_CREDENTIAL, ST_INSPECT, ST_ASK, ST_REPLY, ST_CLOSING } conn_state;

/* What a route does with a connection's events, installed when it takes the connection over
 * (conn_enter), as luv's and curl's multi-uv handles carry their own callbacks: conn.c reads,
 * times and closes, and hands each event to whichever route holds the connection without
 * asking which one it is. A NULL data handler drops the bytes (nothing is expected there); a
 * NULL end-of-stream ends the connection ("client_closed" / "upstream_closed"); a NULL deadline
 * ends it. */
typedef struct conn_handlers {
  /* base is malloc'd and now the handler's: it frees it, or keeps it (relay.c writes it on) */
  void (*client_data)(proxy_conn *c, char *base, size_t len);
  void (*client_eof)(proxy_conn *c);
  void (*upstream_data)(proxy_conn *c, char *base, size_t len);
  void (*upstream_eof)(proxy_conn *c);
  void (*deadline)(proxy_conn *c); /* the timer of conn_set_deadline fired */
  /* A route that keeps state of its own on the connection (a TLS session, a transfer, a held
   * ask, a kernel relay) ends and frees it here. Called once: by conn_close, for the last route
   * that entered with a close (an answer's lingering does not take its place), or when another
   * route with a close takes the connection over. Nothing of the route runs after it. */
  void (*close)(proxy_conn *c);
  /* What the connection holds stops being admitted as it was: the drain began (next NULL: the
   * route stops taking new work), or a live policy swap put next in force (the route ends what
   * the new policy no longer admits; a request already judged wholly by the old one finishes).
   * 1 when it ended the connection. NULL: it finishes what it holds (the drain deadline ends it
   * if it does not). */
  int (*seal)(proxy_conn *c, const ss_policy *next);
  /* An answer's bytes as the client must get them, for the route whose state holds the client's
   * session (an inspected tunnel seals them into its TLS): 0 with the bytes to write in *out
   * (malloc'd; NULL: none), -1 when they go as they are. NULL: they go as they are. */
  int (*wrap)(proxy_conn *c, const char *data, size_t len, char **out, size_t *out_len);
} conn_handlers;

/* What the connection core calls outside itself, given by the listener (listener.c) through the
 * server: conn.c calls no route and no other part by name, so the routes' calls into it close
 * no cycle. */
struct conn_hooks {
  void (*begin)(proxy_conn *c); /* the first route takes a new, accepted connection over */
  void (*gone)(proxy_conn *c);  /* the connection is freed next (already off the server's list) */
};

struct proxy_conn {
  proxy_server *srv;
  const conn_handlers *on;    /* the route holding the connection (conn_enter) */
  const conn_handlers *owner; /* the last route entered with state of its own (its close), or NULL */
  /* that route's state, which only it reads (a TLS session, a transfer, a held ask, a kernel
   * relay, the ClientHello scratch); set after its conn_enter, cleared by it once freed */
  void *route;
  proxy_conn *prev, *next;
  uint64_t id;
  int refs;
  conn_state state;
  conn_kind kind;
  uv_tcp_t client, upstream;
  int upstream_open;
  uv_timer_t timer; /* the one deadline of the current state */
  uint64_t started_ms;
  char peer[64];

  /* bytes read from the client and not yet passed on: the head, then early body/hello bytes;
   * bounded (the head limit plus one read, then tunnel.c's hello bound) */
  ss_buf in;
  size_t scanned;
  ph_request req;

  /* what was asked and decided (the audit line) */
  char method[33], host[SS_HOST_MAX + 1], path[SS_PATH_MAX + 1], address[64];
  int port, status, rule;
  const char *decision, *reason;
  const char *security_event; /* a refusal that is an attack's signature (audit.c lists them), or NULL */
  uint64_t bytes_up, bytes_down;

  /* relaying */
  uint64_t up_left; /* request body bytes still to pass upstream (forward); UINT64_MAX: unbounded */
  int client_eof, upstream_eof, client_paused, upstream_paused, shutdowns;
  uv_getaddrinfo_t gai;
  uv_connect_t connect_req;
  struct sockaddr_storage dest;
  const char *relay; /* how a tunnel was relayed: "splice" or "uv" (the audit line) */

  void (*on_connected)(proxy_conn *c);
  int counted, gai_pending;
  char sni[256];
  const char *end; /* why the connection ended, for the audit line */

  const char *leaf; /* an inspected CONNECT's leaf certificate: "cached" or "fresh" (the audit line) */
  /* the policy that admitted it, for the checks after the resolve (dial.c); judged_by pins it
   * unless it is the start policy, which lives as long as the process */
  const ss_policy *judged_rules;
  policy_pin *judged_by;
  /* credentials (cred_flow.c): the request body scanned for placeholders, the response scrubbed
   * of secrets; each holds only the few bytes undecided at the end of the last read */
  creds_stream cred_body, cred_response;
  /* every secret this connection's requests could have carried, copied when one is placed (or
   * the credential route begins), so its answers are scrubbed of it after a live replacement
   * retired it; wiped and freed with the connection */
  proxy_creds *cred_kept;

  /* the ask hook (ask.c): whether the host allowed it; who answered (the audit line) */
  int ask_granted;
  char ask_by[ASK_BY_MAX + 1];
};

/* The most one read of a connection's streams delivers. */
#define CONN_READ_CHUNK 65536

void conn_accept(proxy_server *s, uv_stream_t *listener);
/* A route takes the connection over: its stage and the handlers of its events from now on. */
void conn_enter(proxy_conn *c, conn_state state, const conn_handlers *on);
void conn_close(proxy_conn *c);
/* A seal for a connection not admitted yet (its head, or a held ask): the drain ends it; a new
 * policy does not, since what it holds is judged when its head is read or the host answers. */
int conn_seal_unadmitted(proxy_conn *c, const ss_policy *next);
void conn_hold(proxy_conn *c);
void conn_release(proxy_conn *c);
void conn_set_deadline(proxy_conn *c, unsigned ms);
void conn_read_client(proxy_conn *c);   /* (re)start reading; idempotent */
void conn_read_upstream(proxy_conn *c);
/* Writes len bytes (copied) to the stream; on_done is called after the write (may be NULL). */
int conn_write(proxy_conn *c, uv_stream_t *to, const char *data, size_t len, void (*on_done)(proxy_conn *, int status));
/* The same, taking ownership of base (malloc'd). */
int conn_write_owned(proxy_conn *c, uv_stream_t *to, char *base, size_t len, void (*on_done)(proxy_conn *, int status));
/* Writes then ends the connection without a reset: shutdown, drain what the client still sends. */
void conn_reply_and_linger(proxy_conn *c, const char *data, size_t len);

#endif
