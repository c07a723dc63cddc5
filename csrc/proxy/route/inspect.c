/* Inspected CONNECT tunnels. When the policy's rule for the CONNECT host names
 * methods or paths, the proxy terminates the sandbox's TLS with a leaf for that host signed by
 * the stack CA, reads the HTTP/1.1 request, checks its method and path with the same matcher
 * as plain HTTP, and re-originates an admitted request over its own TLS connection to the
 * real host (the pinned address dial.c checked), verifying that host's certificate. A refusal
 * is the usual JSON 403, inside the TLS session; a certificate the proxy will not trust is a
 * JSON 502 naming why. A connection carries several requests, one at a time: a
 * request's body goes out exactly as framed (Content-Length, or chunked and validated as it
 * streams, http_chunked.h); what the client sends behind it is held, unchecked and unsent,
 * until the origin's response has ended (framed by http_response.h); only then is the next
 * head read from those bytes and checked on its own, as the first was. A refused request ends
 * the connection (its 403 is the last answer). When either side will not keep the connection
 * alive (Connection: close, HTTP/1.0, a response framed by the origin's close or not clearly
 * framed), the response is the last and the connection ends with close_notify. Each request
 * is one audit line.
 *
 * Both TLS endpoints run over memory BIOs (tls.c): bytes libuv read are fed in, and what
 * OpenSSL produced is written out with uv_write, so the loop never blocks. The origin
 * handshake starts at once, beside the client's, so an admitted request rarely waits for it.
 * Backpressure as in relay.c: a write queue over buffer_bytes stops reading the other side. */
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/audit.h"
#include "proxy/conn.h"
#include "proxy/route/ask_grant.h"
#include "proxy/control/live_policy.h"
#include "proxy/route/cred_scan.h"
#include "proxy/parse/http_chunked.h"
#include "proxy/parse/http_response.h"
#include "proxy/route/inspect.h"
#include "proxy/parse/inspect_request.h"
#include "proxy/route/inspect_scrub.h"
#include "proxy/route/reply.h"
#include "proxy/tls/tls.h"

#define PLAIN_CHUNK 16384
#define HOLD_EXTRA (256 * 1024) /* client bytes held past max_head (reading stops while they wait) */

typedef enum {
  IN_HANDSHAKE,   /* the sandbox's TLS handshake */
  IN_HEAD,        /* reading the request head */
  IN_WAIT_ORIGIN, /* admitted; waiting for the origin's handshake */
  IN_BODY,        /* the request went out; body up, response down (until the response ends) */
} in_phase;

typedef struct inspect_session inspect_session;
struct inspect_session {
  tls_end client, origin;
  in_phase phase;
  int origin_state; /* 0: handshaking, 1: ready, -1: failed (origin_reason says why) */
  const char *origin_reason;
  char origin_detail[256];
  /* The request head, decrypted. Once ir_read has parsed it (IN_HEAD ends), `req` points into
   * these bytes: from then on they are frozen, never grown, moved or written, until
   * send_request has built the outbound head from them and frees them. So the bytes the
   * policy checked and the bytes sent on are the same memory (growing this buffer
   * for body bytes once moved it under `req`, and the head sent on was read from freed memory). */
  ss_buf plain; /* at most max_head + PLAIN_CHUNK (more is not read: the parser answers 431) */
  size_t scanned;
  ir_request req;
  /* client bytes after the head that have not gone out, in a buffer of their own: body bytes
   * decrypted before the request went out, and whatever follows the body (the next request,
   * pipelined or not), held unchecked until this request's response has ended */
  ss_buf early; /* at most max_head + HOLD_EXTRA: more closes the connection */
  /* the request in flight, kept past send_request (which clears req) */
  int body_chunked, client_keep_alive;
  hc_decoder body_chunks; /* a chunked request body, validated as it streams */
  hc_decoder scan_chunks; /* the same body again, its chunk data read for the credential scan */
  int rechunk;            /* the chunked body is scanned without its framing and sent in new chunks */
  int rechunk_ended;      /* its last chunk went out: bytes read after it belong to no body */
  hr_parser resp;         /* where the origin's response ends */
  int scrubbing;          /* the origin is a credential's host: its answer goes through inspect_scrub.c */
  resp_scrub scrub;
  unsigned requests;      /* requests whose response has ended on this connection */
};

static size_t queued(uv_tcp_t *t) { return uv_stream_get_write_queue_size((uv_stream_t *)t); }
static int live(proxy_conn *c) { return c->state == ST_INSPECT; }

static void client_data(proxy_conn *c, char *data, size_t len);
static void client_eof(proxy_conn *c);
static void upstream_data(proxy_conn *c, char *data, size_t len);
static void upstream_eof(proxy_conn *c);
static void deadline(proxy_conn *c);
static void inspect_close(proxy_conn *c);
/* An answer (may be empty) sealed into the sandbox's TLS session, then close_notify: 0 with the
 * ciphertext in *out (NULL when none), or -1 when c has no TLS session (its wrap). */
static int inspect_seal(proxy_conn *c, const char *data, size_t len, char **out, size_t *out_len);
/* TLS on both sides, each request checked; the deadline of the phase the session is in. The
 * session (both TLS ends, its buffers) is freed by its close. */
static const conn_handlers inspecting = {.client_data = client_data,
                                         .client_eof = client_eof,
                                         .upstream_data = upstream_data,
                                         .upstream_eof = upstream_eof,
                                         .deadline = deadline,
                                         .close = inspect_close,
                                         .seal = live_policy_seal_tunnel,
                                         .wrap = inspect_seal};

static void client_drained(proxy_conn *c, int status) {
  (void)status;
  if (live(c) && c->upstream_paused && queued(&c->client) <= c->srv->cfg->buffer_bytes / 2) {
    c->upstream_paused = 0;
    if (((inspect_session *)c->route)->origin_state >= 0) conn_read_upstream(c);
  }
}

static int wants_client(proxy_conn *c) {
  in_phase p = ((inspect_session *)c->route)->phase;
  return p == IN_HANDSHAKE || p == IN_HEAD || (p == IN_BODY && c->up_left > 0);
}

static void origin_drained(proxy_conn *c, int status) {
  (void)status;
  if (live(c) && c->client_paused && queued(&c->upstream) <= c->srv->cfg->buffer_bytes / 2) {
    c->client_paused = 0;
    if (wants_client(c)) conn_read_client(c);
  }
}

/* Writes out what an endpoint produced; stops reading the other side when the queue is full. */
static void flush(proxy_conn *c, tls_end *e, uv_tcp_t *to, uv_tcp_t *other, int *other_paused,
                  void (*drained)(proxy_conn *, int)) {
  size_t n;
  char *b = tls_end_take(e, &n);
  if (!b || !live(c)) {
    free(b);
    return;
  }
  if (conn_write_owned(c, (uv_stream_t *)to, b, n, drained) != 0) return;
  if (queued(to) > c->srv->cfg->buffer_bytes) {
    uv_read_stop((uv_stream_t *)other);
    *other_paused = 1;
  }
}

static void flush_client(proxy_conn *c) {
  flush(c, &((inspect_session *)c->route)->client, &c->client, &c->upstream, &c->upstream_paused, client_drained);
}
static void flush_origin(proxy_conn *c) {
  flush(c, &((inspect_session *)c->route)->origin, &c->upstream, &c->client, &c->client_paused, origin_drained);
}

static int seal_to(tls_end *e, const char *data, size_t len) {
  ERR_clear_error();
  return len == 0 || SSL_write(e->ssl, data, (int)len) == (int)len ? 0 : -1;
}

/* A certificate (or handshake) the proxy will not accept from the origin: JSON 502. */
static void origin_refused(proxy_conn *c) {
  inspect_session *s = c->route;
  char msg[700];
  snprintf(msg, sizeof msg,
           "the TLS connection to %s:%d was refused (%s: %s), so the request was not sent; the proxy trusts the "
           "system roots and SANDSTACK_UPSTREAM_CA",
           c->host, c->port, s->origin_reason, s->origin_detail);
  c->decision = "upstream_error";
  reply_upstream(c, 502, s->origin_reason, msg);
}

static void origin_failed(proxy_conn *c, const char *reason, const char *detail) {
  inspect_session *s = c->route;
  s->origin_state = -1;
  s->origin_reason = reason;
  snprintf(s->origin_detail, sizeof s->origin_detail, "%s", detail);
  uv_read_stop((uv_stream_t *)&c->upstream);
  if (s->phase == IN_WAIT_ORIGIN) origin_refused(c);
}

/* How many of data[0..n) belong to the request's body (the rest follows it): at most
 * Content-Length, or up to the end of the chunked coding. up_left becomes 0 when the body has
 * ended (a chunked body keeps UINT64_MAX until then). -1: the chunked framing is malformed. */
static int body_part(proxy_conn *c, const char *data, size_t n, size_t *k) {
  inspect_session *s = c->route;
  *k = 0;
  if (!c->up_left) return 0;
  if (!s->body_chunked) {
    *k = n < c->up_left ? n : (size_t)c->up_left;
    c->up_left -= *k;
    return 0;
  }
  hc_result r;
  *k = hc_feed(&s->body_chunks, data, n, &r);
  if (r == HC_END) c->up_left = 0;
  return r == HC_BAD ? -1 : 0;
}

/* A chunked body the proxy cannot frame exactly: 400, and nothing more goes to the origin. */
static void bad_body(proxy_conn *c) {
  char msg[200];
  snprintf(msg, sizeof msg, "malformed chunked request body: %s", ((inspect_session *)c->route)->body_chunks.why);
  c->decision = "bad_request";
  reply_error(c, 400, "invalid_request_error", msg);
}

/* The bytes held behind data[0..k): moved to the start of `early` (the next request's). */
static void drop_sent(inspect_session *s, size_t k) {
  ss_buf_consume(&s->early, k);
}

/* Body bytes data[0..k) (final: the body ends with them) through the credential scan: *out is
 * what goes on. A chunked body, while any credential exists, is scanned without its framing,
 * so a placeholder split across chunks is found, and goes on in chunks of its own. -1: the
 * request was refused or the connection closed. */
static int body_out(proxy_conn *c, const char *data, size_t k, int final, char **out, size_t *on) {
  inspect_session *s = c->route;
  if (!s->rechunk) return cred_flow_body(c, data, k, final, out, on);
  if (s->rechunk_ended) return 0; /* k is 0: the next request's bytes, held */
  char *plain = k ? malloc(k) : NULL, *pass = NULL;
  size_t pl = 0, pn = 0;
  hc_result r;
  if (k && !plain) return conn_close(c), -1;
  hc_feed_data(&s->scan_chunks, data, k, &r, plain, &pl); /* body_part validated the same bytes */
  int rc = cred_flow_body(c, plain, pl, final, &pass, &pn);
  free(plain);
  if (rc != 0) return -1;
  *out = malloc(pn + 32);
  if (!*out) return free(pass), conn_close(c), -1;
  *on = 0;
  if (pn) *on += (size_t)snprintf(*out, 32, "%zx\r\n", pn);
  if (pn) memcpy(*out + *on, pass, pn), *on += pn;
  if (pn) memcpy(*out + *on, "\r\n", 2), *on += 2;
  if (final) memcpy(*out + *on, "0\r\n\r\n", 5), *on += 5, s->rechunk_ended = 1;
  free(pass);
  return 0;
}

static void send_request(proxy_conn *c) {
  inspect_session *s = c->route;
  const proxy_config *cfg = c->srv->cfg;
  size_t early;
  if (body_part(c, s->early.data, s->early.len, &early) != 0) return bad_body(c); /* before anything went out */
  size_t hn;
  if (cred_flow_keep(c) != 0) return; /* the secrets this request could carry: scrubbed from its answer */
  s->scrubbing = cred_flow_scrubs(c);
  if (s->scrubbing) resp_scrub_begin(&s->scrub);
  char *head = ir_outbound_head(&s->req, c->host, c->port, cfg->token, cfg->token_len, s->scrubbing, &hn);
  if (ph_any_override(&s->req.head)) c->security_event = "override_header_stripped";
  char *body = NULL; /* credentials: the secrets placed in the head, the early body scanned (refused: answered) */
  size_t bn = 0;
  if (head && (cred_flow_place(c, s->plain.data, s->req.head.head_len, &head, &hn) != 0 ||
               body_out(c, s->early.data, early, c->up_left == 0, &body, &bn) != 0))
    return free(head);
  int rc = head ? seal_to(&s->origin, head, hn) : -1;
  if (rc == 0) rc = seal_to(&s->origin, body, bn);
  free(body);
  free(head);
  if (rc != 0) {
    c->end = "origin_tls_error";
    return conn_close(c);
  }
  c->bytes_up += hn + early;
  memset(&s->req, 0, sizeof s->req); /* the head went out: nothing points into it any more */
  ss_buf_free(&s->plain);
  drop_sent(s, early); /* what is left follows the body: held */
  s->phase = IN_BODY;
  flush_origin(c);
  if (!live(c)) return;
  conn_set_deadline(c, cfg->idle_ms);
  if (c->up_left > 0 && !c->client_paused) conn_read_client(c);
}

/* The head is complete: method and path against the policy, as on the plain-HTTP route. */
static void decide(proxy_conn *c) {
  inspect_session *s = c->route;
  const ir_request *r = &s->req;
  memcpy(c->method, r->head.method, r->head.method_len);
  c->method[r->head.method_len] = '\0';
  if (r->path_noquery_len > SS_PATH_MAX) {
    c->decision = "bad_request";
    return reply_error(c, 414, "invalid_request_error", "the request path is too long");
  }
  memcpy(c->path, r->path, r->path_noquery_len); /* the audit line keeps the path without its query */
  c->path[r->path_noquery_len] = '\0';
  ss_policy_verdict v;
  ss_policy_check(c->srv->policy, c->host, strlen(c->host), c->method, strlen(c->method), r->path, r->path_len,
                  c->port, &v);
  ask_grant(c, &v); /* the host allowed this tunnel once: its requests to c->host are admitted */
  if (!v.admitted) return reply_refused(c, &v);
  const char *why; /* Host and an absolute-form authority must name the CONNECT host */
  int refused = ir_host_refusal(r, c->host, c->port, &why);
  if (refused) {
    c->decision = refused == 421 ? "misdirected" : "bad_request";
    if (refused == 421) c->security_event = "host_mismatch";
    return reply_error(c, refused, "invalid_request_error", why);
  }
  c->decision = "allow";
  c->rule = v.rule;
  c->up_left = r->chunked ? UINT64_MAX : r->body_len;
  s->body_chunked = r->chunked;
  s->client_keep_alive = r->keep_alive; /* never after a body (ir_read): no CL.0 smuggling */
  hc_init(&s->body_chunks, HC_REQUEST);
  hc_init(&s->scan_chunks, HC_REQUEST);
  s->rechunk = r->chunked && creds_any_host(c->srv->creds);
  s->rechunk_ended = 0;
  hr_begin(&s->resp, r->head.method_len == 4 && memcmp(r->head.method, "HEAD", 4) == 0);
  s->phase = IN_WAIT_ORIGIN;
  uv_read_stop((uv_stream_t *)&c->client); /* nothing more is read until the request went out */
  if (s->origin_state < 0) return origin_refused(c);
  if (s->origin_state > 0) return send_request(c);
  conn_set_deadline(c, c->srv->cfg->connect_ms); /* the origin's handshake must finish in time */
}

/* Client bytes after the head that have not gone out (see inspect_session). Reading stops
 * while they wait, so they are a few reads at most; past the bound the connection closes
 * rather than drop any. */
static int keep_early(proxy_conn *c, const char *data, size_t n) {
  return ss_buf_append(&((inspect_session *)c->route)->early, data, n) == SS_BUF_OK ? 0 : -1;
}

static void head_bytes(proxy_conn *c, const char *data, size_t n) {
  inspect_session *s = c->route;
  const proxy_config *cfg = c->srv->cfg;
  /* past max_head the parser answers 431 anyway; a little more keeps body bytes of a full head */
  size_t room = ss_buf_room(&s->plain);
  if (ss_buf_append(&s->plain, data, n < room ? n : room) != SS_BUF_OK) return conn_close(c);
  ph_limits lim = {cfg->max_line, cfg->max_head, cfg->max_headers};
  ir_status st = ir_read(s->plain.data, s->plain.len, &lim, &s->scanned, &s->req);
  int status = 400;
  switch (st) {
  case IR_INCOMPLETE: return;
  case IR_READY:
    /* The head is parsed: `plain` is frozen from here (see inspect_session). The bytes behind
     * the head in this read are body bytes and move to their own buffer; plain_len shrinks to
     * the head, so nothing past it is ever read as part of the request again. */
    if (keep_early(c, s->plain.data + s->req.head.head_len, s->plain.len - s->req.head.head_len) != 0) return conn_close(c);
    s->plain.len = s->req.head.head_len; /* nothing reads past it (the NUL the buffer keeps is not needed) */
    return decide(c);
  case IR_LINE_TOO_LONG: status = 414; break;
  case IR_HEAD_TOO_LARGE: status = 431; break;
  case IR_BAD_VERSION: status = 505; break;
  default: break;
  }
  c->decision = status == 414 || status == 431 ? "too_large" : "bad_request";
  reply_error(c, status, "invalid_request_error", ir_status_text(st));
}

static void client_plain(proxy_conn *c, const char *data, size_t n) {
  inspect_session *s = c->route;
  switch (s->phase) {
  case IN_HEAD: return head_bytes(c, data, n);
  case IN_WAIT_ORIGIN: /* body bytes decrypted before reading stopped: kept apart from the head */
    if (keep_early(c, data, n) != 0) conn_close(c);
    return;
  case IN_BODY: {
    size_t k;
    int bad = body_part(c, data, n, &k); /* never more than the body's framing says */
    char *pass = NULL; /* what the credential scan lets go now (a placeholder: refused, answered) */
    size_t pn = 0;
    if (body_out(c, data, k, c->up_left == 0, &pass, &pn) != 0) return;
    int sealed = seal_to(&s->origin, pass, pn);
    free(pass);
    if (sealed != 0) {
      c->end = "origin_tls_error";
      return conn_close(c);
    }
    c->bytes_up += k;
    if (bad) return bad_body(c);
    if (k < n && keep_early(c, data + k, n - k) != 0) return conn_close(c); /* the next request: held */
    if (c->up_left == 0) uv_read_stop((uv_stream_t *)&c->client);
    conn_set_deadline(c, c->srv->cfg->idle_ms);
    return flush_origin(c);
  }
  case IN_HANDSHAKE: return;
  }
}

static void client_progress(proxy_conn *c) {
  inspect_session *s = c->route;
  SSL *ssl = s->client.ssl;
  if (s->phase == IN_HANDSHAKE) {
    ERR_clear_error();
    int r = SSL_do_handshake(ssl);
    if (r != 1) {
      int e = SSL_get_error(ssl, r);
      flush_client(c); /* the server flight, or the alert saying why */
      if (e == SSL_ERROR_WANT_READ) return;
      /* typically: the sandbox does not trust the stack CA (its bundle is not in use) */
      c->decision = "tls_error";
      c->reason = "client_handshake_failed";
      c->end = "tls_handshake_failed";
      return conn_reply_and_linger(c, NULL, 0);
    }
    s->phase = IN_HEAD;
    conn_set_deadline(c, c->srv->cfg->handshake_ms); /* the head must come in time too */
  }
  char buf[PLAIN_CHUNK];
  while (live(c)) {
    ERR_clear_error();
    int n = SSL_read(ssl, buf, sizeof buf);
    if (n > 0) {
      client_plain(c, buf, (size_t)n);
      continue;
    }
    int e = SSL_get_error(ssl, n);
    if (e == SSL_ERROR_WANT_READ) break;
    if (e == SSL_ERROR_ZERO_RETURN) return client_eof(c); /* close_notify */
    c->end = "client_tls_error";
    return conn_close(c);
  }
  if (live(c)) flush_client(c); /* session tickets and the like */
}

/* Scrubbed answer bytes toward the sandbox (inspect_scrub.h's emit). */
static int to_client(proxy_conn *c, const char *data, size_t n) {
  if (seal_to(&((inspect_session *)c->route)->client, data, n) == 0) return 0;
  c->end = "client_tls_error";
  conn_close(c);
  return -1;
}

/* final: the response ends with these bytes (the credential scrub lets go what it held) */
static void response_bytes(proxy_conn *c, const char *data, size_t n, int final) {
  char *clean; /* every secret of this host replaced by its placeholder, same length */
  size_t cn;
  if (cred_flow_response(c, &c->cred_response, data, n, final, &clean, &cn) != 0) return;
  int sealed = seal_to(&((inspect_session *)c->route)->client, clean, cn);
  free(clean);
  if (sealed != 0) {
    c->end = "client_tls_error";
    return conn_close(c);
  }
  c->bytes_down += n;
}

/* The request's audit line; the connection's fields are then the next request's. */
static void request_audited(proxy_conn *c) {
  audit_conn(c);
  c->method[0] = c->path[0] = '\0';
  c->status = c->rule = 0;
  c->decision = c->reason = c->security_event = NULL;
  c->bytes_up = c->bytes_down = 0;
  c->started_ms = uv_now(c->srv->loop);
  c->leaf = NULL; /* the leaf served the handshake: the first request's line says how */
}

/* The response has ended (after `extra` more bytes from the origin that belong to no request).
 * Either the connection ends here (close_notify; conn_close writes the audit line), or the
 * held bytes are the next request, read and checked as the first was. */
static void response_ended(proxy_conn *c, size_t extra) {
  inspect_session *s = c->route;
  s->requests++;
  if (!s->resp.keep_alive || !s->client_keep_alive || c->up_left || extra || c->client_eof) {
    flush_client(c);
    return conn_reply_and_linger(c, NULL, 0);
  }
  flush_client(c);
  if (!live(c)) return;
  request_audited(c);
  ss_buf_free(&s->plain); /* the held bytes become the head buffer: nothing points into either now */
  s->plain = s->early;
  s->plain.limit = c->srv->cfg->max_head + PLAIN_CHUNK;
  ss_buf_init(&s->early, c->srv->cfg->max_head + HOLD_EXTRA);
  s->scanned = 0;
  s->phase = IN_HEAD;
  conn_set_deadline(c, c->srv->cfg->idle_ms);
  if (s->plain.len) head_bytes(c, NULL, 0);
  if (live(c) && s->phase == IN_HEAD && !c->client_paused) conn_read_client(c);
}

/* Plaintext from the origin: the response to the request in flight, up to its end. */
static void origin_plain(proxy_conn *c, const char *data, size_t n) {
  inspect_session *s = c->route;
  if (s->phase != IN_BODY) { /* before the first request: nothing to answer, dropped */
    if (!s->requests) return;
    c->end = "origin_spoke_unasked"; /* between requests: it would be read as the next answer */
    return conn_reply_and_linger(c, NULL, 0);
  }
  int ended = 0;
  if (s->scrubbing) { /* a credential's host: the answer is scrubbed as a message (inspect_scrub.h) */
    size_t k = resp_scrub_feed(c, &s->scrub, &s->resp, data, n, &ended, to_client);
    if (k == (size_t)-1) return;
    if (s->resp.status) c->status = s->resp.status;
    c->bytes_down += k;
    if (live(c) && ended) response_ended(c, n - k);
    return;
  }
  size_t k = hr_feed(&s->resp, data, n, &ended);
  if (k == (size_t)-1) return conn_close(c);
  if (s->resp.status) c->status = s->resp.status; /* for the audit line */
  response_bytes(c, data, k, ended);
  if (live(c) && ended) response_ended(c, n - k);
}

static void origin_progress(proxy_conn *c) {
  inspect_session *s = c->route;
  SSL *ssl = s->origin.ssl;
  if (s->origin_state == 0) {
    ERR_clear_error();
    int r = SSL_do_handshake(ssl);
    if (r != 1) {
      int e = SSL_get_error(ssl, r);
      flush_origin(c);
      if (e == SSL_ERROR_WANT_READ || !live(c)) return;
      long vr = SSL_get_verify_result(ssl);
      if (vr != X509_V_OK) return origin_failed(c, tls_verify_reason(vr), X509_verify_cert_error_string(vr));
      char detail[256];
      ERR_error_string_n(ERR_peek_last_error(), detail, sizeof detail);
      return origin_failed(c, "tls_handshake_failed", detail);
    }
    s->origin_state = 1;
    if (s->phase == IN_WAIT_ORIGIN) send_request(c);
  }
  char buf[PLAIN_CHUNK];
  while (live(c)) {
    ERR_clear_error();
    int n = SSL_read(ssl, buf, sizeof buf);
    if (n > 0) {
      origin_plain(c, buf, (size_t)n);
      continue;
    }
    int e = SSL_get_error(ssl, n);
    if (e == SSL_ERROR_WANT_READ) break;
    if (e == SSL_ERROR_ZERO_RETURN) return upstream_eof(c); /* close_notify: the response ended */
    c->end = "origin_tls_error";
    flush_client(c);
    return conn_close(c);
  }
  if (!live(c)) return;
  flush_client(c);
  flush_origin(c);
  if (s->phase == IN_BODY) conn_set_deadline(c, c->srv->cfg->idle_ms);
}

void inspect_start(proxy_conn *c) {
  inspect_session *s = calloc(1, sizeof *s);
  if (!s) return conn_close(c);
  conn_enter(c, ST_INSPECT, &inspecting); /* from here the session is the route's to free */
  c->route = s;
  ss_buf_init(&s->plain, c->srv->cfg->max_head + PLAIN_CHUNK);
  ss_buf_init(&s->early, c->srv->cfg->max_head + HOLD_EXTRA);
  int fresh = 0;
  if (tls_end_serve(&s->client, c->srv->tls, c->host, &fresh) != 0 || tls_end_origin(&s->origin, c->srv->tls, c->host) != 0) {
    c->end = "tls_setup_failed";
    return conn_close(c);
  }
  c->leaf = fresh ? "fresh" : "cached";
  c->status = 0; /* the audit line's status is the inner answer's (response_bytes), not the CONNECT's 200 */
  int fed = tls_end_feed(&s->client, c->in.data, c->in.len); /* the ClientHello tunnel.c read */
  ss_buf_free(&c->in);
  if (fed != 0) return conn_close(c);
  conn_set_deadline(c, c->srv->cfg->handshake_ms);
  origin_progress(c); /* sends the proxy's own ClientHello to the origin */
  if (live(c)) client_progress(c);
  if (!live(c)) return;
  conn_read_client(c);
  conn_read_upstream(c);
}

static void client_data(proxy_conn *c, char *data, size_t len) {
  int fed = tls_end_feed(&((inspect_session *)c->route)->client, data, len);
  free(data);
  if (fed != 0) return conn_close(c);
  client_progress(c);
}

static void upstream_data(proxy_conn *c, char *data, size_t len) {
  int fed = tls_end_feed(&((inspect_session *)c->route)->origin, data, len);
  free(data);
  if (fed != 0) return conn_close(c);
  origin_progress(c);
}

/* Whether the body held before the request went out is whole (the client may leave then). */
static int early_body_whole(inspect_session *s) {
  if (!s->req.chunked) return s->early.len >= s->req.body_len;
  hc_decoder d = s->body_chunks;
  hc_result r;
  hc_feed(&d, s->early.data, s->early.len, &r);
  return r == HC_END;
}

static void client_eof(proxy_conn *c) {
  inspect_session *s = c->route;
  c->client_eof = 1;
  /* the request is whole: the response may still come */
  if (s->phase == IN_BODY && c->up_left == 0) return;
  if (s->phase == IN_WAIT_ORIGIN && early_body_whole(s)) return;
  c->end = "client_closed";
  conn_close(c);
}

static void upstream_eof(proxy_conn *c) {
  inspect_session *s = c->route;
  c->upstream_eof = 1;
  if (s->phase == IN_BODY) { /* the response ended (or was cut): close_notify toward the sandbox, then close */
    if (s->resp.phase != HR_UNTIL_CLOSE) c->end = "origin_closed";
    if (s->scrubbing && resp_scrub_end(c, &s->scrub, &s->resp, to_client) != 0) return;
    if (!s->scrubbing) response_bytes(c, NULL, 0, 1); /* what the credential scrub held */
    if (!live(c)) return;
    flush_client(c);
    return conn_reply_and_linger(c, NULL, 0);
  }
  if (s->requests) { /* between requests: the connection ends cleanly, the client opens another */
    c->end = "origin_closed";
    return conn_reply_and_linger(c, NULL, 0);
  }
  if (s->origin_state >= 0) origin_failed(c, "origin_closed", "the origin closed the connection before the request");
}

static void deadline(proxy_conn *c) {
  inspect_session *s = c->route;
  switch (s->phase) {
  case IN_HANDSHAKE:
    c->end = "handshake_timeout";
    c->reason = "tls_handshake_timeout";
    return conn_close(c);
  case IN_HEAD:
    if (s->requests && !s->plain.len) { /* an idle keep-alive connection: ends cleanly */
      c->end = "idle_timeout";
      return conn_reply_and_linger(c, NULL, 0);
    }
    c->decision = "timeout";
    c->end = "handshake_timeout";
    return reply_error(c, 408, "timeout_error", "the request head did not arrive in time");
  case IN_WAIT_ORIGIN:
    s->origin_reason = "origin_tls_timeout";
    snprintf(s->origin_detail, sizeof s->origin_detail, "the origin's TLS handshake did not finish in time");
    return origin_refused(c);
  case IN_BODY:
    c->end = "idle_timeout";
    return conn_close(c);
  }
}

static int inspect_seal(proxy_conn *c, const char *data, size_t len, char **out, size_t *out_len) {
  inspect_session *s = c->owner == &inspecting ? c->route : NULL; /* another route's state is not a session */
  *out = NULL;
  *out_len = 0;
  if (!s || s->phase == IN_HANDSHAKE) { /* no session to write into: only what the handshake produced */
    return s ? 0 : -1;
  }
  if (seal_to(&s->client, data, len) == 0) SSL_shutdown(s->client.ssl); /* close_notify */
  ERR_clear_error();
  *out = tls_end_take(&s->client, out_len);
  return 0;
}

static void inspect_close(proxy_conn *c) {
  inspect_session *s = c->route;
  if (!s) return;
  if (s->client.ssl) tls_end_free(&s->client);
  if (s->origin.ssl) tls_end_free(&s->origin);
  ss_buf_free(&s->plain);
  ss_buf_free(&s->early);
  hr_free(&s->resp);
  resp_scrub_free(&s->scrub);
  free(s);
  c->route = NULL;
}
