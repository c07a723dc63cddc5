#ifndef SANDSTACK_PROXY_SERVER_H
#define SANDSTACK_PROXY_SERVER_H
/* The proxy's runtime: one server (listener, signals, the curl multi handle) and its
 * connections (conn.h), all on one libuv loop. No globals: every callback finds its state
 * through the handle's data pointer. */
#include <stdint.h>
#include <uv.h>

#include "proxy/config.h"

typedef struct proxy_conn proxy_conn;
typedef struct curl_loop curl_loop;
typedef struct proxy_tls proxy_tls;
typedef struct policy_pin policy_pin;
typedef struct control_server control_server;
typedef struct ask_entry ask_entry;

/* The asks pending (ask.c): the server owns every entry; each names its held connection, which
 * points back at it, and whichever of answer, timeout or close comes first frees it. */
typedef struct ask_table {
  ask_entry *head;
  uint64_t next_id;
  size_t n;
} ask_table;

typedef struct proxy_server {
  uv_loop_t *loop;
  const proxy_config *cfg;
  uv_tcp_t listener;
  uv_signal_t sigterm, sigint;
  uv_timer_t drain_timer;
  int draining, stopped;
  size_t active;    /* connections counted against the cap */
  const struct conn_hooks *conn_hooks; /* conn.h: the first route, and what a freed connection ends */
  uint64_t next_id;
  proxy_conn *conns; /* every live connection (the drain walks it) */
  curl_loop *curl;
  proxy_tls *tls; /* OpenSSL contexts and the inspection CA (tls.h) */
  /* The egress policy in force (replaced live through the control socket, control.c).
   * Every decision reads it once, synchronously on the loop, so a request is judged wholly by
   * one policy; cfg->policy stays the start policy (the inspection CA was made from it). */
  ss_policy *policy;
  policy_pin *policy_pin;  /* a replaced-in policy, kept alive while a connection judged by it lives */
  ask_table asks;
  control_server *control; /* NULL when SANDSTACK_CONTROL_SOCKET is unset or could not be bound */
  /* The credentials in force (credentials.h; proxy_config_credentials at start). Replaced whole
   * and freed at once by a live swap: read it synchronously, never keep a pointer into it from
   * one callback to the next (cred_flow.c looks it up on every call). */
  proxy_creds *creds;
  /* Spliced pipes grown past one page (splice_relay.c) and their bytes: at most PIPE_BUDGET at
   * once, shrunk back by pipe_sweep once empty and idle, so one proxy never holds much of the
   * per-user pipe quota that every proxy of the uid on the host shares. */
  size_t pipes_grown;
  size_t pipe_bytes_grown;
  uv_timer_t pipe_sweep; /* runs only while a pipe is grown */
} proxy_server;

/* listener.c */
int server_start(proxy_server *s, uv_loop_t *loop, const proxy_config *cfg);
int server_port(proxy_server *s); /* the bound port (for --port 0) */

#endif
