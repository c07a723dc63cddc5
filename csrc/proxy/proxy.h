#ifndef SANDSTACK_PROXY_PROXY_H
#define SANDSTACK_PROXY_PROXY_H
/* The proxy's runtime: one server (listener, signals, the curl multi handle) and its
 * connections, all on one libuv loop. No globals: every callback finds its state through the
 * handle's data pointer. A connection lives until its last handle has closed and its last
 * request (write, resolve, connect, shutdown) has called back: `refs` counts them. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdint.h>
#include <uv.h>

#include "proxy/config.h"
#include "proxy/http_head.h"

typedef struct proxy_conn proxy_conn;
typedef struct curl_loop curl_loop;
typedef struct cred_req cred_req;
typedef struct inspect_session inspect_session;
typedef struct proxy_tls proxy_tls;
typedef struct splice_relay splice_relay;
typedef struct policy_pin policy_pin;
typedef struct control_server control_server;

typedef struct proxy_server {
  uv_loop_t *loop;
  const proxy_config *cfg;
  uv_tcp_t listener;
  uv_signal_t sigterm, sigint;
  uv_timer_t drain_timer;
  int draining, stopped;
  size_t active;    /* connections counted against the cap */
  uint64_t next_id;
  proxy_conn *conns; /* every live connection (the drain walks it) */
  curl_loop *curl;
  proxy_tls *tls; /* OpenSSL contexts and the inspection CA (tls.h) */
  /* The egress policy in force (issue 25: replaced live through the control socket, control.c).
   * Every decision reads it once, synchronously on the loop, so a request is judged wholly by
   * one policy; cfg->policy stays the start policy (the inspection CA was made from it). */
  ss_policy *policy;
  policy_pin *policy_pin;  /* a replaced-in policy, kept alive while a connection judged by it lives */
  control_server *control; /* NULL when SANDSTACK_CONTROL_SOCKET is unset or could not be bound */
  /* The credentials in force (credentials.h; proxy_config_credentials at start). Replaced whole
   * and freed at once by a live swap: read it synchronously, never keep a pointer into it from
   * one callback to the next (cred_flow.c looks it up on every call). */
  proxy_creds *creds;
} proxy_server;

typedef enum { KIND_NONE, KIND_CONNECT, KIND_FORWARD, KIND_CREDENTIAL, KIND_INSPECT } conn_kind;
typedef enum { ST_HEAD, ST_DIAL, ST_HELLO, ST_RELAY, ST_CREDENTIAL, ST_INSPECT, ST_REPLY, ST_CLOSING } conn_state;

struct proxy_conn {
  proxy_server *srv;
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

  /* bytes read from the client and not yet passed on: the head, then early body/hello bytes */
  char *buf;
  size_t len, cap, scanned;
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
  uint8_t *hello_scratch;
  uv_getaddrinfo_t gai;
  uv_connect_t connect_req;
  struct sockaddr_storage dest;
  splice_relay *splice; /* a raw tunnel the kernel relays (splice_relay.c), or NULL */
  const char *relay;    /* how a tunnel was relayed: "splice" or "uv" (the audit line) */

  void (*on_connected)(proxy_conn *c);
  int counted, gai_pending;
  char sni[256];
  const char *end; /* why the connection ended, for the audit line */

  cred_req *cred;
  inspect_session *insp; /* an inspected CONNECT (inspect.c) */
  const char *leaf;      /* its leaf certificate: "cached" or "fresh" (the audit line) */
  /* the policy that admitted it, for the checks after the resolve (dial.c); judged_by pins it
   * unless it is the start policy, which lives as long as the process */
  const ss_policy *judged_rules;
  policy_pin *judged_by;
  /* credentials (cred_flow.c): the request body scanned for placeholders, the response scrubbed
   * of secrets; each holds only the few bytes undecided at the end of the last read */
  creds_stream cred_body, cred_response;
};

/* listener.c */
int server_start(proxy_server *s, uv_loop_t *loop, const proxy_config *cfg);
int server_port(proxy_server *s); /* the bound port (for --port 0) */
void server_conn_gone(proxy_server *s); /* a connection was freed: finish a drain when it was the last */

/* conn.c: lifecycle */
void conn_accept(proxy_server *s, uv_stream_t *listener);
void conn_close(proxy_conn *c);
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

/* reply.c: JSON answers, then a lingering close */
void reply_error(proxy_conn *c, int status, const char *error_type, const char *message);
/* A policy refusal: 403 with {"policy":{decision, reason, rule, host, port, method, path}}. */
void reply_policy(proxy_conn *c, const char *decision, const char *reason, int rule, const char *message);
/* A refusal by a policy verdict (403): like reply_policy, and the body's "deny" object quotes the
 * rule the verdict names (its reason text too) and the rule that would admit the request. */
void reply_refused(proxy_conn *c, const ss_policy_verdict *v);
/* A refusal by a check on what a verdict's rule demands (needs_inspection): reply_policy's "deny"
 * with the verdict's rule, whose own reason text is returned too. */
void reply_refused_check(proxy_conn *c, const char *reason, const ss_policy_verdict *v, const char *message);
/* An answer about the destination (502/504) with "upstream":{"reason","host","port"} in the body. */
void reply_upstream(proxy_conn *c, int status, const char *reason, const char *message);
const char *reply_status_text(int status);

/* dial.c: resolve (pinned), classify, connect; then on_connected(c) */
void dial_start(proxy_conn *c, void (*on_connected)(proxy_conn *c));

/* relay.c: both directions with backpressure */
void relay_start(proxy_conn *c);
void relay_client_data(proxy_conn *c, char *base, size_t len);   /* takes base */
void relay_upstream_data(proxy_conn *c, char *base, size_t len); /* takes base */
void relay_client_eof(proxy_conn *c);
void relay_upstream_eof(proxy_conn *c);
void relay_maybe_finish(proxy_conn *c); /* ends a tunnel whose directions have both ended */

/* splice_relay.c: a CONNECT tunnel relayed socket -> pipe -> socket by splice(2) (Linux): 0 when it
 * took the tunnel over, -1 when relay.c relays it (no splice, or no fds for the pipes) */
int splice_relay_start(proxy_conn *c);
void splice_relay_stop(proxy_conn *c); /* conn_close: its handles and fds are closed */

/* tunnel.c / forward.c / credential.c: the three routes, after the head is read */
void tunnel_begin(proxy_conn *c);
void tunnel_client_data(proxy_conn *c, const char *data, size_t len);
void tunnel_upstream_spoke(proxy_conn *c);
void forward_begin(proxy_conn *c);
void credential_begin(proxy_conn *c);
void credential_client_data(proxy_conn *c, const char *data, size_t len);
void credential_client_eof(proxy_conn *c);
void credential_client_drained(proxy_conn *c);
void credential_abort(proxy_conn *c);
void credential_done(CURL *easy, CURLcode rc); /* curl_loop: a transfer ended */

/* curl_loop.c: libcurl's multi-socket API driven by this loop */
curl_loop *curl_loop_new(uv_loop_t *loop, void (*done)(CURL *easy, CURLcode rc));
CURLM *curl_loop_multi(curl_loop *cl);
void curl_loop_kick(curl_loop *cl); /* after adding a handle: let curl start it */
void curl_loop_close(curl_loop *cl);

/* inspect.c: an inspected CONNECT (TLS terminated, each request checked on method and path) */
void inspect_start(proxy_conn *c); /* after the ClientHello in c->buf passed tunnel.c's SNI check */
void inspect_client_data(proxy_conn *c, const char *data, size_t len);
void inspect_upstream_data(proxy_conn *c, const char *data, size_t len);
void inspect_client_eof(proxy_conn *c);
void inspect_upstream_eof(proxy_conn *c);
void inspect_deadline(proxy_conn *c);
/* The answer data (may be empty) sealed into the sandbox's TLS session, then close_notify:
 * 0 with the ciphertext in *out (NULL when none), or -1 when c has no TLS session. */
int inspect_seal(proxy_conn *c, const char *data, size_t len, char **out, size_t *out_len);
void inspect_free(proxy_conn *c);

/* live_policy.c: the swappable policy (issue 25) */
void live_policy_init(proxy_server *s, ss_policy *start); /* start stays owned by the config */
void live_policy_end(proxy_server *s);
/* The policy in force, pinned to c so the checks after its resolve use the same one. */
const ss_policy *policy_judge(proxy_conn *c);
/* The policy that admitted c (its pin), else the one in force. */
const ss_policy *policy_of(const proxy_conn *c);
void policy_unpin(proxy_conn *c);
/* sha256 of the canonical render (ss_policy_render), lowercase hex; never holds a secret. */
int policy_digest(const ss_policy *p, char out[65]);
void sha256_hex(const char *text, char out[65]); /* of a NUL-terminated text, lowercase hex */
/* Takes next (owned from now on) as the policy in force, closes every tunnel and inspected
 * connection it does not admit (end "policy_changed"; control.c writes the audit line). Returns the
 * number closed; old_digest/new_digest get the two digests. */
size_t live_policy_swap(proxy_server *s, ss_policy *next, char old_digest[65], char new_digest[65]);

/* control_address.c: SANDSTACK_CONTROL_SOCKET as an address: a path, or "@name" (abstract) */
struct sockaddr_un;
socklen_t control_address(const char *where, struct sockaddr_un *sa);
/* control.c: the control socket (a unix socket of the proxy's own, see control.c) */
int control_start(proxy_server *s, const char *path, char *why, size_t why_len);
void control_stop(proxy_server *s);
/* control_client.c: `sandstack-proxy --control VERB` (payload in SANDSTACK_CONTROL_PAYLOAD) */
int control_client(const char *verb);

/* cred_flow.c: credentials on a connection's bytes (credentials.h). A refusal (a misplaced
 * placeholder: 403, security_event "credential_misplaced", or the connection closed when its
 * response already began) has been made when these return -1; the caller just returns. */
/* An inspected request's outbound head: the secrets of c->host:c->port placed (*head replaced). */
int cred_flow_place(proxy_conn *c, const char *orig, size_t orig_len, char **head, size_t *head_len);
/* A head that gets no credential (plain HTTP, the credential route): any placeholder refuses. */
int cred_flow_check_head(proxy_conn *c, const char *head, size_t len);
/* Request body bytes (final: the body ends with them): *out is what may go on now. */
int cred_flow_body(proxy_conn *c, const char *data, size_t n, int final, char **out, size_t *out_len);
/* Response bytes from c->host:c->port, secrets replaced by their masks (same length); with
 * final the held tail is let go (the response ended). -1: out of memory (the connection closed). */
int cred_flow_response(proxy_conn *c, creds_stream *st, const char *data, size_t n, int final, char **out,
                       size_t *out_len);
void cred_flow_free(proxy_conn *c);

/* audit.c */
void audit_conn(const proxy_conn *c);
/* The stable "route" name of a connection: connect, forward, credential, inspect, or head (refused
 * before its head named a route). */
const char *audit_route(const proxy_conn *c);
/* A line with the stable schema's every field (the nullable ones null, the counts 0) for an event
 * that is no connection's (route "control": a live policy change); add fields, then emit it. */
cJSON *audit_line_start(const proxy_server *s, const char *route, const char *decision);
void audit_line_emit(cJSON *o); /* writes the line and frees o */

#endif
