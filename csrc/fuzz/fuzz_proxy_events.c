/* libFuzzer target for the ORDER of events on one sandstack-proxy connection: the
 * parser targets feed bytes; this one feeds time. The proxy's own connection code (conn.c,
 * tunnel.c, forward.c, credential.c, inspect.c, relay.c, dial.c, tls.c, listener.c...) runs
 * unchanged over an in-memory libuv and a scripted libcurl (csrc/fuzz/events/mem_uv.c,
 * mem_curl.c: a link-time seam, so the real binary keeps plain libuv), with a client and a
 * destination that speak real TLS where the route needs it (events/peers.c). The policy:
 * api.test (GET and POST on /up and /v1/...: inspected), tunnel.test:443, plain.test:80 (GET and
 * POST on /up), model.test (the credential upstream, /v1/...), open.test (any port), raw.test:22.
 *
 * Input: byte 0 picks the route (a request template: tunnel, inspected, plain-HTTP forward,
 * credential, raw TCP, refusals, or a client script made only of fuzzer bytes), byte 1 the body
 * size and (bit 3) the ask mode, byte 2 the rare conditions (TLS 1.2 on either side, uv_cancel too late, accept or
 * connect failing at once). Every later byte is one event: high nibble the kind, low nibble its
 * size or variant: the client or the destination sends n bytes (one read), the client writes a
 * TLS record of n plaintext bytes, the destination answers, either side half-closes (after what
 * it has to send, or at once, cutting a request or a record anywhere) or resets,
 * the connect completes or fails, the resolver answers (public, private, mapped, none...), a
 * side stops or resumes reading, the loop turns (closing and pending phases), time passes to the
 * next timer, curl acts as the credential upstream, fuzzer bytes are injected raw or as TLS
 * plaintext, SIGTERM arrives. In the ask mode the policy asks (ask.c): a request no rule admits
 * (denied.test's tunnel, a forward to ask.test, a CONNECT to askcred.test, a credential's host
 * that is inspected once allowed, a script's) is held, and the last event kind's
 * variants 12-15 answer the oldest pending ask (allow once, allow for the session, deny) or an
 * ask already gone (after its answer, its timeout or its client's close); variant 5 of that kind
 * (in either mode) sets the start policy again, as the host's set-egress, which takes back every
 * allow-once grant. At the end SIGTERM and the drain deadline must stop the proxy with
 * every handle closed. csrc/fuzz/events/seeds.py writes the seeds (the review's reproductions);
 * FUZZ_PROXY_EVENTS_TRACE=1 prints each event and the audit lines.
 *
 * Checks, beyond ASan/UBSan/LSan and mem_uv's libuv rules:
 *  - nothing reaches the destination before an "allow" decision, and no refused request ever;
 *  - each request on an inspected connection (it may carry several) arrives with
 *    exactly the request line the client sent inside TLS for it, in order (a buffer that
 *    grows under the request line must not leave a line built from freed memory), which the policy admits when judged here from the client's
 *    bytes; its body is the client's, within its own framing (Content-Length, or the chunked
 *    coding as read here); no token; a second request only after the destination sent a whole
 *    response to the first that allows reuse (judged here, independently of the proxy's
 *    parser: HTTP/1.1, no "Connection: close", framed by length or chunks), so nothing the
 *    client pipelined reaches it unchecked or early; and never after a request that carried a
 *    body (CL.0: an origin that does not read a GET's or a handler's body would read that body
 *    as a second request the policy never checked); an untrusted origin gets nothing;
 *  - a forwarded request arrives in origin form with the client's method and path, the same
 *    body rules, no token;
 *  - a tunnel relays exactly the client's bytes, in order;
 *  - api.test has a credential (X-Key), askcred.test another: a host's secret never reaches the
 *    client in an answer on a connection to it, and a
 *    chunked body may go on in the proxy's own chunks, whose data must be the client's;
 *  - the credential route's upstream request carries the real key once, never the token, and
 *    at most Content-Length body bytes, which are the client's;
 *  - a held request reaches the destination only after the host allowed it; inside an inspected
 *    tunnel allowed so, only requests to its own host (by Host and SNI), and an allow once leaves
 *    the policy in force unchanged (the grant is the connection's: the one thing connections
 *    share, the policy, never names the host);
 *  - the host's new policy takes every grant back: a tunnel or inspected connection a grant alone
 *    admitted is closed at once, no other connection is, and none keeps a grant;
 *  - the proxy stops after SIGTERM: no connection, handle, resolve or transfer left. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "fuzz/events/mem_curl.h"
#include "fuzz/events/mem_uv.h"
#include "fuzz/events/peers.h"
#include "proxy/route/ask.h"
#include "proxy/conn.h"
#include "proxy/curl_loop.h"
#include "proxy/control/live_policy.h"
#include "proxy/server.h"
#include "proxy/tls/tls.h"

#define TOKEN "tok-fuzz-events-0123456789"
#define KEY "sk-real-fuzz-key-0123"
#define PIPELINED "secret" /* in a request the client pipelines behind the one it sends */
/* a credential for api.test (its header X-Key): inspected answers from there are scrubbed */
#define CRED_SECRET "api-secret-fuzz-0123456789"
#define CRED_PLACEHOLDER "PHapiAAAAAAAAAAAAAAAAAAAAA"
/* and one for askcred.test, which no rule names (the ask mode's inspected CONNECTs) */
#define ASK_SECRET "ask-secret-fuzz-0123456789"
#define ASK_PLACEHOLDER "PHaskAAAAAAAAAAAAAAAAAAAAA"

typedef enum { R_TUNNEL, R_INSPECT, R_FORWARD, R_CREDENTIAL, R_RAW, R_SCRIPT } route;

typedef struct tmpl {
  route route;
  const char *head;  /* the client's plain bytes: CONNECT, or the whole request head; "%s" = auth */
  const char *auth;  /* the header line carrying the token, or another */
  const char *sni;   /* TLS after the CONNECT's 200 (NULL: none) */
  int early_hello;   /* the ClientHello right behind the CONNECT, before the 200 */
  const char *inner; /* an inspected request's head ("%zu" = Content-Length) */
  int body;          /* the request has a body (Content-Length in head or inner) */
  int admitted;      /* the request may reach the destination */
  const char *line;  /* the request line the destination must get */
  int origin_tls, rogue;
  const char *host;  /* an inspected CONNECT's host (NULL: api.test) */
  int never;         /* refused even when the host allows the ask (a ClientHello naming another name) */
} tmpl;

#define BEARER "Proxy-Authorization: Bearer " TOKEN "\r\n"

static const tmpl TEMPLATES[16] = {
    {R_TUNNEL, "CONNECT tunnel.test:443 HTTP/1.1\r\nHost: tunnel.test:443\r\n%s\r\n", BEARER, "tunnel.test", 0,
     "GET /t HTTP/1.1\r\nHost: tunnel.test\r\n\r\n", 0, 1, NULL, 1, 0, NULL, 0},
    {R_TUNNEL, "CONNECT tunnel.test:443 HTTP/1.1\r\n%s\r\n", BEARER, "tunnel.test", 1,
     "GET /t HTTP/1.1\r\nHost: tunnel.test\r\n\r\n", 0, 1, NULL, 1, 0, NULL, 0},
    {R_TUNNEL, "CONNECT tunnel.test:443 HTTP/1.1\r\n%s\r\n", BEARER, "api.test", 0, "GET / HTTP/1.1\r\n\r\n", 0, 0,
     NULL, 1, 0, NULL, 0}, /* SNI of another name */
    {R_INSPECT, "CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n%s\r\n", BEARER, "api.test", 0,
     "POST /up HTTP/1.1\r\nHost: api.test\r\nContent-Length: %zu\r\n\r\n", 1, 1, "POST /up HTTP/1.1", 1, 0, NULL, 0},
    {R_INSPECT, "CONNECT api.test:443 HTTP/1.1\r\n%s\r\n", BEARER, "api.test", 1,
     "GET /v1/models?limit=2 HTTP/1.1\r\nHost: api.test\r\nX-Key: " CRED_PLACEHOLDER "\r\n\r\n", 0, 1,
     "GET /v1/models?limit=2 HTTP/1.1", 1, 0, NULL, 0},
    {R_INSPECT, "CONNECT api.test:443 HTTP/1.1\r\n%s\r\n", BEARER, "api.test", 0,
     "DELETE /up HTTP/1.1\r\nHost: api.test\r\nContent-Length: %zu\r\n\r\n", 1, 0, NULL, 1, 0, NULL, 0},
    {R_INSPECT, "CONNECT api.test:443 HTTP/1.1\r\n%s\r\n", BEARER, "api.test", 0,
     "POST /up HTTP/1.1\r\nHost: api.test\r\nContent-Length: %zu\r\n\r\n", 1, 0, NULL, 1, 1, NULL, 0}, /* untrusted origin */
    {R_FORWARD, "POST http://plain.test/up HTTP/1.1\r\nHost: plain.test\r\n%sContent-Length: %zu\r\n\r\n", BEARER, NULL,
     0, NULL, 1, 1, "POST /up HTTP/1.1", 0, 0, NULL, 0},
    {R_FORWARD, "GET http://plain.test/admin HTTP/1.1\r\nHost: plain.test\r\n%s\r\n", BEARER, NULL, 0, NULL, 0, 0, NULL,
     0, 0, NULL, 0},
    {R_CREDENTIAL,
     "POST /v1/messages HTTP/1.1\r\nHost: sandstack\r\n%sContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
     "x-api-key: " TOKEN "\r\n", NULL, 0, NULL, 1, 1, NULL, 0, 0, NULL, 0},
    {R_CREDENTIAL, "POST /v1/messages HTTP/1.1\r\nHost: sandstack\r\n%sContent-Length: %zu\r\n\r\n",
     "x-api-key: not-the-token-at-all\r\n", NULL, 0, NULL, 1, 0, NULL, 0, 0, NULL, 0},
    {R_RAW, "CONNECT raw.test:22 HTTP/1.1\r\n%s\r\nSSH-2.0-fuzz-client\r\n", BEARER, NULL, 0, NULL, 0, 1, NULL, 0, 0, NULL, 0},
    {R_TUNNEL, "CONNECT denied.test:443 HTTP/1.1\r\n%s\r\n", BEARER, "denied.test", 0, "GET / HTTP/1.1\r\n\r\n", 0, 0,
     NULL, 1, 0, NULL, 0},
    {R_TUNNEL, "CONNECT tunnel.test:443 HTTP/1.1\r\n%s\r\n", "Proxy-Authorization: Bearer tok-wrong-0123456789ab\r\n",
     "tunnel.test", 0, "GET / HTTP/1.1\r\n\r\n", 0, 0, NULL, 1, 0, NULL, 0},
    {R_SCRIPT, "", "", NULL, 0, NULL, 0, 0, NULL, 0, 0, NULL, 0},
    {R_FORWARD, "GET http://plain.test/up?q=1 HTTP/1.1\r\nHost: plain.test\r\n%s\r\n",
     "Proxy-Authorization: Basic c2FuZHN0YWNrOnRvay1mdXp6LWV2ZW50cy0wMTIzNDU2Nzg5\r\n", NULL, 0, NULL, 0, 1,
     "GET /up?q=1 HTTP/1.1", 0, 0, NULL, 0},
};

/* In the ask mode, template 8 is a forward no rule admits: held, and admitted only by an allow. */
static const tmpl ASK_FORWARD = {R_FORWARD, "POST http://ask.test/up HTTP/1.1\r\nHost: ask.test\r\n%sContent-Length: %zu\r\n\r\n",
                                 BEARER, NULL, 0, NULL, 1, 0, "POST /up HTTP/1.1", 0, 0, NULL, 0};
/* In the ask mode, templates 2, 5 and 13 are CONNECTs to askcred.test, a credential's host no
 * rule names: held, and once allowed inspected (the proxy judges each request inside). Its
 * requests reach the destination only after an allow, and never one naming another Host (13:
 * check_inspected reads each request's Host) or inside a TLS session whose ClientHello named
 * another name (2). */
#define ASK_CONNECT "CONNECT askcred.test:443 HTTP/1.1\r\n%s\r\n"
static const tmpl ASK_INSPECT[3] = {
    {R_INSPECT, ASK_CONNECT, BEARER, "api.test", 0, "POST /up HTTP/1.1\r\nHost: askcred.test\r\nContent-Length: %zu\r\n\r\n", 1, 0,
     "POST /up HTTP/1.1", 1, 0, "askcred.test", 1},
    {R_INSPECT, ASK_CONNECT, BEARER, "askcred.test", 1,
     "POST /up HTTP/1.1\r\nHost: askcred.test\r\nX-Key: " ASK_PLACEHOLDER "\r\nContent-Length: %zu\r\n\r\n", 1, 0,
     "POST /up HTTP/1.1", 1, 0, "askcred.test", 0},
    /* its own request names api.test (the Host check refuses it); the fuzzer's may name none */
    {R_INSPECT, ASK_CONNECT, BEARER, "askcred.test", 0, "POST /up HTTP/1.1\r\nHost: api.test\r\nContent-Length: %zu\r\n\r\n", 1, 0,
     "POST /up HTTP/1.1", 1, 0, "askcred.test", 0},
};

static const size_t BODY_SIZES[8] = {0, 1, 37, 1000, 4000, 5000, 16500, 70000};
static const size_t SIZES[16] = {1, 2, 3, 5, 8, 13, 64, 100, 512, 1400, 4096, 16384, 20000, 65536, 131072, SIZE_MAX};

/* Made once: the proxy's configuration and TLS state (a long-running proxy keeps them too). */
static struct {
  int trace; /* FUZZ_PROXY_EVENTS_TRACE=1: the events and the audit lines, to reproduce by hand */
  proxy_config cfg;
  proxy_config cfg_ask; /* the same policy with ask = true */
  proxy_tls *tls;
  peer_pki pki;
  pbuf answer, banner; /* what destinations answer */
  char dir[64];
} G;

typedef struct run {
  const uint8_t *data;
  size_t size, pos;
  const tmpl *t;
  char *body;
  size_t body_len;
  pbuf inner; /* what the client sends inside TLS, the pipelined request included */
  size_t answer_off; /* how much of its answer the destination sent */
  size_t inner_off, head_len;
  pbuf client_plain; /* what the client sent inside TLS */
  pbuf origin_plain; /* what the destination sent inside TLS */
  /* for each TLS write of the destination: where its plaintext ends in origin_plain and where
   * its record ends in the destination's byte stream (SIZE_MAX: cut off, never delivered) */
  struct origin_mark {
    size_t plain_end, cipher_end;
  } *marks;
  size_t nmarks, marks_cap;
  /* where in origin_plain the answers begin: what the destination sent and the proxy read
   * before the first request reached it was dropped (nothing had been asked), not an answer */
  size_t answers_from;
  int answers_from_set;
  int raw_inner;     /* some of it came from the fuzzer's bytes, not the template */
  peer client, origin;
  int connected, client_eof_sent, origin_eof_sent, client_tls_max, origin_tls_max;
  int seen_allow;
  conn_kind kind;
  uv_loop_t loop;
  mu_world *w;
  proxy_server srv;
  int cred_started;
  pbuf cred_body;
  int ask_mode, ask_allowed; /* the host allowed a held request: the refusal the template expects may pass */
  int ask_remembered;        /* an allow for the session changed the policy in force */
  uint64_t ask_last;         /* the newest ask id seen: answered again after it is gone */
} run;

static void fail(const char *what) {
  fprintf(stderr, "fuzz_proxy_events: %s\n", what);
  abort();
}

/* the connection's decision, seen while it lives */
static void observe(run *r) {
  proxy_conn *c = r->srv.conns;
  if (!c) return;
  if (c->decision && strcmp(c->decision, "allow") == 0) r->seen_allow = 1;
  if (c->kind != KIND_NONE) r->kind = c->kind;
}

/* ---------------------------------------------------------------- checks ---- */

/* The header lines the destination got (its first n bytes, past the request line, which is the
 * client's own): no token; and, for a template's request, not the one the client pipelined
 * behind it. A body is the client's to fill (the token may be in it); what follows the body is
 * caught by the Content-Length checks. */
static void check_head(const pbuf *got, size_t n, int pipelined) {
  const char *eol = memmem(got->p, n, "\r\n", 2);
  if (!eol) return;
  size_t from = (size_t)(eol - got->p);
  if (memmem(got->p + from, n - from, TOKEN, strlen(TOKEN))) fail("the session token reached the destination in a header");
  if (pipelined && memmem(got->p, n, PIPELINED, strlen(PIPELINED)))
    fail("a request pipelined behind the checked one reached the destination");
}

/* A forwarded request as it reached the destination: the template's line (in origin form), no
 * token or pipelined request, and a body that is a prefix of the client's. */
static void check_forwarded(run *r, const pbuf *got) {
  if (!got->n) return;
  if (!r->seen_allow) fail("the destination got request bytes before the proxy allowed anything");
  if (!r->t->admitted && !r->ask_allowed) fail("the destination got a request the policy refuses");
  size_t ll = strlen(r->t->line);
  size_t cmp = got->n < ll + 2 ? got->n : ll + 2;
  char want[256];
  snprintf(want, sizeof want, "%s\r\n", r->t->line);
  if (memcmp(got->p, want, cmp) != 0) fail("the destination got a request line other than the one checked");
  const char *end = memmem(got->p, got->n, "\r\n\r\n", 4);
  check_head(got, end ? (size_t)(end + 4 - got->p) : got->n, 1);
  if (!end) return;
  size_t body = got->n - (size_t)(end + 4 - got->p);
  size_t sent = r->client.sent.n > r->head_len ? r->client.sent.n - r->head_len : 0;
  if (body > r->body_len) fail("more body bytes than Content-Length reached the destination");
  if (body > sent || memcmp(end + 4, r->client.sent.p + r->head_len, body) != 0)
    fail("body bytes the client did not send reached the destination");
}

static size_t head_end(const char *p, size_t n) {
  const char *e = n >= 4 ? memmem(p, n, "\r\n\r\n", 4) : NULL;
  return e ? (size_t)(e - p) + 4 : 0;
}

static unsigned long long content_length(const char *head, size_t n) {
  static const char NAME[] = "\r\ncontent-length:";
  for (size_t i = 0; i + sizeof NAME - 1 <= n; i++) {
    if (strncasecmp(head + i, NAME, sizeof NAME - 1) != 0) continue;
    unsigned long long v = 0;
    size_t k = i + sizeof NAME - 1;
    while (k < n && (head[k] == ' ' || head[k] == '\t')) k++; /* the proxy takes only digits after the blanks */
    for (; k < n && head[k] >= '0' && head[k] <= '9'; k++) v = v * 10 + (unsigned)(head[k] - '0');
    return v;
  }
  return 0;
}

/* A header field's value in head[0..n) (the name with its colon, lowercase), NULL if absent. */
static const char *field(const char *head, size_t n, const char *name, size_t *vlen) {
  size_t nl = strlen(name);
  for (size_t i = 0; i + 2 + nl <= n; i++) {
    if (head[i] != '\r' || head[i + 1] != '\n' || strncasecmp(head + i + 2, name, nl) != 0) continue;
    const char *v = head + i + 2 + nl, *e = memmem(v, n - (size_t)(v - head), "\r\n", 2);
    while (v < e && (*v == ' ' || *v == '\t')) v++;
    *vlen = e ? (size_t)(e - v) : 0;
    return v;
  }
  return NULL;
}

/* The length of a whole chunked body at p[0..n) (sizes, data, then trailer lines when
 * trailers is set, and the final CRLF), or 0 when it is not (yet) one. */
static size_t chunked_len(const char *p, size_t n, int trailers) {
  size_t i = 0;
  for (;;) {
    unsigned long long size = 0;
    int digits = 0;
    while (i < n && strchr("0123456789abcdefABCDEF", p[i]) && p[i]) {
      if (++digits > 15) return 0;
      size = size * 16 + (unsigned)(p[i] <= '9' ? p[i] - '0' : (p[i] | 32) - 'a' + 10);
      i++;
    }
    const char *cr = digits ? memmem(p + i, n - i, "\r\n", 2) : NULL;
    if (!cr) return 0;
    i = (size_t)(cr - p) + 2;
    while (!size && trailers && n - i >= 2 && !(p[i] == '\r' && p[i + 1] == '\n')) {
      const char *t = memmem(p + i, n - i, "\r\n", 2);
      if (!t) return 0;
      i = (size_t)(t - p) + 2;
    }
    if (!size) return n - i >= 2 && p[i] == '\r' && p[i + 1] == '\n' ? i + 2 : 0;
    if (size > n - i || n - i - size < 2) return 0;
    i += size + 2;
  }
}

/* The chunk data of the chunked body at p[0..n), as far as it goes (a cut or malformed tail
 * ends it), into out. */
static void dechunk(const char *p, size_t n, pbuf *out) {
  size_t i = 0;
  while (i < n) {
    unsigned long long size = 0;
    int digits = 0;
    while (i < n && p[i] && strchr("0123456789abcdefABCDEF", p[i])) {
      if (++digits > 15) return;
      size = size * 16 + (unsigned)(p[i] <= '9' ? p[i] - '0' : (p[i] | 32) - 'a' + 10);
      i++;
    }
    const char *cr = digits ? memmem(p + i, n - i, "\r\n", 2) : NULL;
    if (!cr || !size) return;
    i = (size_t)(cr - p) + 2;
    size_t take = size < n - i ? (size_t)size : n - i;
    pb_add(out, p + i, take);
    i += take + 2;
  }
}

/* How many whole responses at the start of p[0..n) allow another request on the connection:
 * each HTTP/1.1, without "Connection: close", framed by Content-Length or chunks (or no body:
 * 204, 304, or any answer to HEAD, heads[k] of the client's k-th request). Interim 1xx heads are
 * skipped. The count stops at the first response that does not allow reuse or is not whole. */
static size_t reusable_responses(const char *p, size_t n, const int *heads, size_t nheads) {
  size_t k = 0, i = 0;
  while (i < n) {
    size_t h = head_end(p + i, n - i), vl;
    if (!h || h < 13 || memcmp(p + i, "HTTP/1.", 7) != 0) return k;
    int status = atoi(p + i + 9);
    if (status >= 100 && status < 200 && status != 101) { /* interim */
      i += h;
      continue;
    }
    if (p[i + 7] != '1' || status == 101) return k;
    const char *conn = field(p + i, h, "connection:", &vl);
    for (const char *v = conn, *e = conn ? conn + vl : NULL; v && v < e;) { /* a "close" option */
      while (v < e && (*v == ',' || *v == ' ' || *v == '\t')) v++;
      const char *o = v;
      while (v < e && *v != ',' && *v != ' ' && *v != '\t') v++;
      if (v - o == 5 && strncasecmp(o, "close", 5) == 0) return k;
    }
    const char *v;
    size_t body = 0;
    if (!(k < nheads && heads[k]) && status != 204 && status != 304) {
      if (field(p + i, h, "transfer-encoding:", &vl)) {
        if (!(body = chunked_len(p + i + h, n - i - h, 1))) return k;
      } else if ((v = field(p + i, h, "content-length:", &vl))) {
        body = strtoul(v, NULL, 10);
        if (body > n - i - h) return k;
      } else {
        return k;
      }
    }
    i += h + body;
    k++;
  }
  return k;
}

/* The requests on an inspected connection as they reached the destination, against what the
 * client sent inside TLS (the template's requests or the fuzzer's own), one by one: the same
 * request line, which the policy admits when judged here from those bytes; no token; a body
 * that is the client's and within its own framing (what follows it in the destination's
 * stream is the next request, checked the same way); and a request after the first only once
 * the destination had answered the one before in a way that allows reuse. The first check is
 * the one a request line sent from freed memory fails. */
static void check_inspected(run *r) {
  const pbuf *got = &r->origin.plain_in, *sent = &r->client_plain;
  if (!got->n) return;
  if (!r->seen_allow) fail("the destination got request bytes before the proxy allowed anything");
  if (r->t->rogue) fail("a request went to a destination whose certificate the proxy must not trust");
  size_t go = 0, so = 0;
  int heads[64] = {0}, had_body = 0;
  for (size_t k = 0; go < got->n; k++) {
    if (k && had_body) /* CL.0: an origin that ignores a body reads it as a request nobody checked */
      fail("a request reached the destination on a connection that had carried a body: an origin ignoring that body "
           "would read it as a request the policy never checked");
    const char *g = got->p + go, *c = sent->p + so;
    size_t gn = got->n - go, cn = sent->n - so;
    if (k && reusable_responses(r->origin_plain.p + r->answers_from, r->origin_plain.n - r->answers_from, heads,
                                k < 64 ? k : 64) < k)
      fail("a request reached the destination before its answer to the one before allowed another");
    const char *eol = cn ? memmem(c, cn, "\r\n", 2) : NULL;
    if (!eol) fail("the destination got a request the client has not even finished the request line of");
    size_t ll = (size_t)(eol - c) + 2;
    const char *sp1 = memchr(c, ' ', ll), *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
    if (!sp2) fail("the destination got a request whose line the proxy could not have parsed");
    /* the same method and target; the version goes out as HTTP/1.1 whatever the client spoke */
    char line[SS_PATH_MAX * 4 + 64];
    size_t keep = (size_t)(sp2 + 1 - c);
    if (keep + 10 > sizeof line) fail("a request line longer than the proxy accepts went out");
    memcpy(line, c, keep);
    memcpy(line + keep, "HTTP/1.1\r\n", 10);
    if (memcmp(g, line, gn < keep + 10 ? gn : keep + 10) != 0)
      fail("the destination got a request line other than the one checked");
    if (k < 64) heads[k] = sp1 - c == 4 && memcmp(c, "HEAD", 4) == 0;
    /* judged for the CONNECT's host; an allow (once, for this connection, or for the session)
     * admits what no rule names, nothing a rule refuses */
    const char *host = r->t->host ? r->t->host : "api.test";
    ss_policy_verdict v;
    ss_policy_check(G.cfg.policy, host, strlen(host), c, (size_t)(sp1 - c), sp1 + 1, (size_t)(sp2 - sp1 - 1), 443, &v);
    int granted = r->ask_allowed && !v.admitted && v.reason == SS_DENY_HOST;
    if (!(v.admitted || granted) || (!r->raw_inner && !r->t->admitted && !r->ask_allowed))
      fail("the destination got a request the policy refuses");
    if (r->t->never) fail("a request reached the destination through a tunnel whose ClientHello named another host");
    size_t gh = head_end(g, gn), sh = head_end(c, cn);
    pbuf this_head = {(char *)g, gh ? gh : gn, 0};
    check_head(&this_head, this_head.n, 0);
    if (!gh) return;
    if (!sh) fail("the destination got a whole head before the client sent one");
    size_t hl;
    const char *hv = field(c, sh, "host:", &hl);
    size_t nl = strlen(host);
    if (hv && (hl < nl || strncasecmp(hv, host, nl) != 0 || (hl > nl && hv[nl] != ':')))
      fail("a request naming another Host than its CONNECT's reached the destination");
    size_t body = gn - gh, have = cn - sh, vl;
    int te = field(c, sh, "transfer-encoding:", &vl) != NULL;
    had_body = te || content_length(c, sh) > 0;
    if (te) { /* the proxy may send a chunked body in chunks of its own: the data must be the client's */
      size_t gf = chunked_len(g + gh, body, 0), cf = chunked_len(c + sh, have, 0);
      pbuf gd = {0}, cd = {0};
      dechunk(g + gh, gf ? gf : body, &gd);
      dechunk(c + sh, cf ? cf : have, &cd);
      int bad = gd.n > cd.n || (gd.n && memcmp(gd.p, cd.p, gd.n) != 0) || (gf && (!cf || gd.n != cd.n));
      pb_free(&gd);
      pb_free(&cd);
      if (bad) fail("chunked body data the client did not send reached the destination");
      if (!gf) return; /* the body goes on: whatever else arrived is inside it */
      go += gh + gf;
      so += sh + cf;
      continue;
    }
    size_t framed = te ? chunked_len(c + sh, have, 0) : content_length(c, sh);
    int known = !te || framed; /* where the client's body ends is known */
    if (!known) framed = have;  /* an unfinished chunked body: at most what the client sent */
    if (body > framed) {        /* what follows the body is the next request */
      if (!known) fail("bytes past an unfinished chunked body reached the destination");
      body = framed;
    }
    if (body > have || memcmp(g + gh, c + sh, body) != 0) fail("body bytes the client did not send reached the destination");
    go += gh + body;
    so += sh + body;
  }
}

/* A tunnel: the destination gets exactly what the client sent after its CONNECT head. */
static void check_relay(run *r) {
  const pbuf *got = &r->origin.in;
  if (!got->n) return;
  if (!r->seen_allow) fail("tunnel bytes reached the destination before the proxy allowed the tunnel");
  if (!r->t->admitted && !r->ask_allowed) fail("a refused tunnel reached the destination");
  size_t sent = r->client.sent.n > r->head_len ? r->client.sent.n - r->head_len : 0;
  if (got->n > sent || memcmp(got->p, r->client.sent.p + r->head_len, got->n) != 0)
    fail("the tunnel relayed bytes other than the client's");
}

static void check(run *r) {
  observe(r);
  /* the scrub: api.test's secret never reaches the client (unless the client itself wrote it) */
  const pbuf *back = &r->client.plain_in, *wrote = &r->client_plain;
  /* each host's answers are scrubbed of its own secret: another host's origin may send it (the
   * fuzzer's bytes), as the proxy never placed it there */
  const char *secret = r->t->host ? ASK_SECRET : CRED_SECRET;
  if (back->n && memmem(back->p, back->n, secret, strlen(secret)) &&
      !(wrote->n && memmem(wrote->p, wrote->n, secret, strlen(secret))))
    fail("a credential's secret reached the client");
  switch (r->t->route) {
  case R_INSPECT: check_inspected(r); break;
  case R_FORWARD: check_forwarded(r, &r->origin.in); break;
  case R_TUNNEL:
  case R_RAW: check_relay(r); break;
  case R_CREDENTIAL:
    if (r->origin.in.n) fail("the credential route opened a socket of its own");
    break;
  case R_SCRIPT:
    /* an inspected CONNECT's origin gets the proxy's own ClientHello before any request decision
     * (and a scripted destination speaks no TLS, so no request can follow it) */
    if (r->kind == KIND_INSPECT) break;
    if (r->origin.in.n && !r->seen_allow) fail("bytes reached the destination before an allow decision");
    if (r->kind == KIND_FORWARD && r->origin.in.n) {
      const char *end = memmem(r->origin.in.p, r->origin.in.n, "\r\n\r\n", 4);
      size_t head = end ? (size_t)(end - r->origin.in.p) : r->origin.in.n;
      if (memmem(r->origin.in.p, head, TOKEN, strlen(TOKEN))) fail("the token reached a forwarded request's head");
    }
    break;
  }
}

/* ------------------------------------------------------------ the peers ---- */

static void client_got(run *r) {
  peer *p = &r->client;
  if (!p->ssl || p->tls_from >= 0) return;
  const char *end = memmem(p->in.p, p->in.n, "\r\n\r\n", 4);
  if (!end) return;
  if (p->in.n >= 12 && memcmp(p->in.p, "HTTP/1.1 200", 12) == 0) peer_tls_begin(p, (size_t)(end + 4 - p->in.p));
  else p->tls_dead = 1; /* refused with a plain answer */
}

/* The plaintext of the destination's records the proxy has read whole: each mu_read reaches
 * the proxy's read callback at once, and origin.sent grows only after it returns, so a record in
 * the read being handled now is not counted (the proxy may read it after the request it sends). */
static size_t plain_read_whole(const run *r) {
  size_t plain = 0;
  for (size_t i = 0; i < r->nmarks && r->marks[i].cipher_end <= r->origin.sent.n; i++) plain = r->marks[i].plain_end;
  return plain;
}

static void on_sent(void *ctx, mu_side side, const char *data, size_t n) {
  run *r = ctx;
  observe(r);
  if (side == MU_CLIENT) {
    peer_receive(&r->client, data, n);
    if (r->t->sni && !r->client.ssl && !r->client.tls_dead) {
      const char *end = memmem(r->client.in.p, r->client.in.n, "\r\n\r\n", 4);
      if (end && r->client.in.n >= 12 && memcmp(r->client.in.p, "HTTP/1.1 200", 12) == 0) {
        peer_tls_client(&r->client, G.pki.client, r->t->sni, r->client_tls_max);
        peer_tls_begin(&r->client, (size_t)(end + 4 - r->client.in.p));
      }
    }
    client_got(r);
  } else if (side == MU_UPSTREAM) {
    if (!r->connected) fail("bytes went to a destination that is not connected");
    size_t before = r->origin.plain_in.n;
    peer_receive(&r->origin, data, n);
    if (!before && r->origin.plain_in.n && !r->answers_from_set) { /* the first request arrives */
      r->answers_from_set = 1;
      r->answers_from = plain_read_whole(r);
    }
  }
}

/* A request allowed and queued toward the destination may reach it only after the next request
 * on the connection was refused: the decision is seen when the write is queued. */
static void on_queued(void *ctx, mu_side side) {
  (void)side;
  observe(ctx);
}

static void on_fin(void *ctx, mu_side side) {
  run *r = ctx;
  (side == MU_CLIENT ? &r->client : &r->origin)->fin_seen = 1;
}

static void on_cred_started(void *ctx, const mc_request *req) {
  run *r = ctx;
  observe(r);
  r->cred_started = 1;
  if (!r->seen_allow) fail("a credential request started before an allow decision");
  if (r->t->route == R_CREDENTIAL && !r->t->admitted) fail("a credential request without the token started");
  int keys = 0;
  for (const struct curl_slist *h = req->headers; h; h = h->next) {
    if (strstr(h->data, TOKEN)) fail("the session token is in the credential route's upstream headers");
    if (strcmp(h->data, "x-api-key: " KEY) == 0 || strcmp(h->data, "Authorization: Bearer " KEY) == 0) keys++;
  }
  if (keys != 1) fail("the credential route's upstream request does not carry the real key exactly once");
  if (r->t->route == R_CREDENTIAL) {
    char want[400];
    snprintf(want, sizeof want, "%s/v1/messages", G.cfg.upstream);
    if (!req->url || strcmp(req->url, want) != 0) fail("the credential route's URL is not the upstream's plus the target");
    if (req->postsize != (long long)r->body_len) fail("the credential route's body size is not the client's");
  }
}

static void on_cred_body(void *ctx, const char *data, size_t n) {
  run *r = ctx;
  pb_add(&r->cred_body, data, n);
  if (r->t->route != R_CREDENTIAL) return;
  size_t sent = r->client.sent.n > r->head_len ? r->client.sent.n - r->head_len : 0;
  if (r->cred_body.n > r->body_len) fail("more body than Content-Length went to the credential upstream");
  if (r->cred_body.n > sent || memcmp(r->cred_body.p, r->client.sent.p + r->head_len, r->cred_body.n) != 0)
    fail("body bytes the client did not send went upstream");
}

/* One read of up to n of what a peer has to send; then its FIN once everything went. */
static void peer_send(run *r, mu_side side, size_t n) {
  peer *p = side == MU_CLIENT ? &r->client : &r->origin;
  int *fin = side == MU_CLIENT ? &r->client_eof_sent : &r->origin_eof_sent;
  if (side == MU_UPSTREAM && !r->connected) return;
  if (p->out.n == 0 || *fin) { /* after its FIN a peer sends nothing more; reading again sees EOF again */
    if (p->eof && mu_read_eof(r->w, side)) *fin = 1;
    return;
  }
  if (n > p->out.n) n = p->out.n;
  if (n > 65536) n = 65536; /* one read fills one buffer at most */
  char *copy = malloc(n);
  if (!copy) abort();
  memcpy(copy, p->out.p, n);
  size_t k = mu_read(r->w, side, copy, n);
  pb_add(&p->sent, copy, k);
  pb_drop(&p->out, k);
  free(copy);
}

/* A peer ends: FIN once everything it has is sent (arg 0-5), FIN at once, giving up what it had
 * not sent yet: a request or a TLS record cut anywhere (6-11), or a reset (12-15). */
static void peer_close(run *r, mu_side side, unsigned arg) {
  peer *p = side == MU_CLIENT ? &r->client : &r->origin;
  if (arg >= 12) {
    if (side == MU_UPSTREAM && !r->connected) return;
    mu_read_error(r->w, side);
    mu_write_error(r->w, side);
    return;
  }
  if (arg >= 6) { /* the records still to send never reach the proxy */
    if (side == MU_UPSTREAM)
      for (size_t i = 0; i < r->nmarks; i++)
        if (r->marks[i].cipher_end > p->sent.n) r->marks[i].cipher_end = SIZE_MAX;
    pb_drop(&p->out, p->out.n);
  }
  p->eof = 1;
}

/* The destination's answer, n more bytes of it: a response with a body big enough for
 * backpressure (or an SSH banner on the raw route), then bytes past its end. */
/* n plaintext bytes from the destination through its TLS session, kept for the checks with
 * where its record ends in the destination's stream */
static int origin_tls_write(run *r, const char *data, size_t n) {
  if (peer_tls_write(&r->origin, data, n) != 0) return -1;
  pb_add(&r->origin_plain, data, n);
  if (r->nmarks == r->marks_cap) {
    r->marks_cap = r->marks_cap ? 2 * r->marks_cap : 16;
    r->marks = realloc(r->marks, r->marks_cap * sizeof *r->marks);
    if (!r->marks) abort();
  }
  r->marks[r->nmarks++] = (struct origin_mark){r->origin_plain.n, r->origin.sent.n + r->origin.out.n};
  return 0;
}

static void origin_answer(run *r, size_t n) {
  const pbuf *answer = r->t->route == R_RAW ? &G.banner : &G.answer;
  size_t left = answer->n - r->answer_off;
  if (n > left) n = left;
  if (!n) return;
  if (r->origin.ssl) {
    if (origin_tls_write(r, answer->p + r->answer_off, n) != 0) return;
  } else {
    pb_add(&r->origin.out, answer->p + r->answer_off, n);
  }
  r->answer_off += n;
}

/* plaintext the client sends inside TLS, kept for the checks */
static int client_plain_write(run *r, const char *data, size_t n) {
  if (peer_tls_write(&r->client, data, n) != 0) return -1;
  pb_add(&r->client_plain, data, n);
  return 0;
}

static void client_tls_write(run *r, size_t n) {
  size_t left = r->inner.n - r->inner_off;
  if (n > left) n = left;
  if (n && client_plain_write(r, r->inner.p + r->inner_off, n) == 0) r->inner_off += n;
}

/* Fuzzer bytes in the input, behind the event: a length byte, then the bytes. They go to a
 * peer's raw stream, or (tls) through its TLS session as plaintext: an inner request or
 * answer of the fuzzer's own. */
static void raw_bytes(run *r, peer *p, int tls) {
  if (r->pos >= r->size) return;
  size_t n = r->data[r->pos++];
  if (n > r->size - r->pos) n = r->size - r->pos;
  const char *bytes = (const char *)r->data + r->pos;
  r->pos += n;
  if (!tls) return pb_add(&p->out, bytes, n);
  if (p != &r->client) {
    origin_tls_write(r, bytes, n);
  } else if (n && client_plain_write(r, bytes, n) == 0) {
    r->raw_inner = 1;
  }
}

/* ---------------------------------------------------------------- events ---- */

static void connect_done(run *r, unsigned arg) {
  static const int FAILS[] = {UV_ECONNREFUSED, UV_ETIMEDOUT, UV_ENETUNREACH, UV_ECONNRESET};
  int status = arg & 1 ? FAILS[(arg >> 1) & 3] : 0;
  if (!mu_connecting(r->w)) return;
  if (status == 0) {
    r->connected = 1; /* before the callback: the proxy may write at once */
    if (r->t->origin_tls) {
      peer_tls_server(&r->origin, r->t->rogue ? G.pki.rogue : G.pki.origin, r->origin_tls_max);
      peer_tls_begin(&r->origin, 0);
    }
  }
  mu_connect_done(r->w, status);
}

static void curl_event(run *r, unsigned arg) {
  static const struct {
    mc_action a;
    size_t n;
  } ACTS[16] = {{MC_PULL, 1},       {MC_PULL, 100},        {MC_PULL, 4096},   {MC_PULL, 65536},
                {MC_STATUS, 0},     {MC_STATUS, 1},        {MC_HEADER, 0},    {MC_END_HEADERS, 0},
                {MC_BODY, 10},      {MC_BODY, 4000},       {MC_BODY, 60000},  {MC_DONE_OK, 0},
                {MC_DONE_ERROR, 0}, {MC_DONE_TIMEOUT, 0},  {MC_STATUS, 3},    {MC_HEADER, 2}};
  if (!r->srv.curl) return;
  /* the proxy's curl timer, due now, is the earliest: firing it runs the queued action */
  if (mc_queue(curl_loop_multi(r->srv.curl), ACTS[arg].a, ACTS[arg].n)) mu_fire_timer(r->w);
}

/* The host answers: the oldest pending ask (12 allow once, 13 allow for the session, 14 deny), or
 * (15, or none pending) the newest ask seen, which may be gone: that answer must find nothing. */
static void ask_event(run *r, unsigned arg) {
  cJSON *list = ask_list(&r->srv);
  const cJSON *first = cJSON_GetArrayItem(list, 0);
  const cJSON *last = cJSON_GetArrayItem(list, cJSON_GetArraySize(list) - 1);
  if (last) {
    uint64_t id = (uint64_t)cJSON_GetObjectItemCaseSensitive(last, "id")->valuedouble;
    if (id > r->ask_last) r->ask_last = id;
  }
  uint64_t id = arg < 15 && first ? (uint64_t)cJSON_GetObjectItemCaseSensitive(first, "id")->valuedouble : r->ask_last;
  int pending = 0, port = 0;
  char host[SS_HOST_MAX + 1] = "";
  for (const cJSON *a = list ? list->child : NULL; a; a = a->next) {
    if ((uint64_t)cJSON_GetObjectItemCaseSensitive(a, "id")->valuedouble != id) continue;
    pending = 1;
    snprintf(host, sizeof host, "%s", cJSON_GetObjectItemCaseSensitive(a, "host")->valuestring);
    port = (int)cJSON_GetObjectItemCaseSensitive(a, "port")->valuedouble;
  }
  cJSON_Delete(list);
  if (!id) return;
  int allow = arg == 12 || arg == 13, remembered = 0;
  char why[200];
  int rc = ask_answer(&r->srv, id, allow, arg == 13, "fuzz", "fuzzer", &remembered, why, sizeof why);
  if (rc == 0 && !pending) fail("an answer found an ask that was gone");
  if (rc != 0 && pending) fail("an answer missed a pending ask");
  if (rc == 0 && allow) r->ask_allowed = 1;
  if (remembered) r->ask_remembered = 1;
  if (rc == 0 && arg == 12 && !r->ask_remembered) { /* once: a grant on the held connection, never a rule */
    ss_policy_verdict v;
    ss_policy_check(r->srv.policy, host, strlen(host), NULL, 0, NULL, 0, port, &v);
    if (v.admitted || v.reason != SS_DENY_HOST) fail("an allow once changed the policy in force");
  }
}

/* The host sets its policy again (set-egress of the run's start policy, as control.c does): every
 * allow-once grant is taken back. A tunnel or inspected connection that a grant alone admitted
 * (its host named by no rule of the new policy) closes, and nothing else does: the rules are the
 * start's, which admitted every other tunnel. No connection keeps a grant. */
static void revoke_event(run *r) {
  cJSON *j = ss_policy_render((r->ask_mode ? &G.cfg_ask : &G.cfg)->policy);
  ss_error e;
  ss_error_init(&e);
  ss_policy *next = j ? ss_policy_from_json(j, &e) : NULL;
  cJSON_Delete(j);
  ss_error_clear(&e);
  if (!next) fail("cannot copy the start policy");
  proxy_conn *granted[16];
  size_t expect = 0;
  for (proxy_conn *c = r->srv.conns; c; c = c->next) {
    if (c->state == ST_CLOSING || !c->ask_granted || c->on->seal != live_policy_seal_tunnel ||
        (c->kind != KIND_CONNECT && c->kind != KIND_INSPECT))
      continue;
    ss_policy_verdict v;
    ss_policy_check(next, c->host, strlen(c->host), NULL, 0, NULL, 0, c->port, &v);
    if (v.reason == SS_DENY_HOST && expect < 16) granted[expect++] = c;
  }
  char old_digest[65], new_digest[65];
  size_t closed = live_policy_swap(&r->srv, next, GRANTS_REVOKE, old_digest, new_digest);
  if (closed == (size_t)-1) return; /* out of memory: the old policy stays, as control.c answers */
  r->ask_remembered = 0;            /* a rule an answer remembered is gone with the old policy */
  if (closed != expect) fail("a revocation did not close exactly the connections a grant alone admitted");
  for (size_t i = 0; i < expect; i++)
    if (granted[i]->state != ST_CLOSING) fail("a tunnel a grant alone admitted outlived the revocation");
  for (const proxy_conn *c = r->srv.conns; c; c = c->next)
    if (c->ask_granted) fail("an allow-once grant outlived a revocation");
}

static void misc_event(run *r, unsigned arg) {
  if (r->ask_mode && arg >= 12) return ask_event(r, arg);
  if (arg == 5) return revoke_event(r);
  if (arg < 5) mu_signal(r->w, SIGTERM);
  else if (arg < 9) mu_write_error(r->w, MU_CLIENT);
  else if (arg < 12) mu_write_error(r->w, MU_UPSTREAM);
  else peer_tls_close_notify(&r->client);
}

static const char *const KINDS[16] = {"client sends", "upstream sends", "client TLS record", "origin answers",
                                      "client ends", "upstream ends", "connect", "resolve", "writable",
                                      "stall", "next iteration", "timer", "curl", "raw client bytes",
                                      "raw upstream bytes", "signal/error"};

static void event(run *r, uint8_t e) {
  unsigned kind = e >> 4, arg = e & 15;
  size_t n = SIZES[arg];
  if (G.trace) {
    proxy_conn *c = r->srv.conns;
    fprintf(stderr, "event %-18s %2u | conn state %d decision %s | client out %zu in %zu plain %zu | origin out %zu in %zu plain %zu\n",
            KINDS[kind], arg, c ? (int)c->state : -1, c && c->decision ? c->decision : "-", r->client.out.n,
            r->client.in.n, r->client.plain_in.n, r->origin.out.n, r->origin.in.n, r->origin.plain_in.n);
  }
  switch (kind) {
  case 0: peer_send(r, MU_CLIENT, n); break;
  case 1: peer_send(r, MU_UPSTREAM, n); break;
  case 2: client_tls_write(r, n); break;
  case 3:
    if (arg == 15) peer_tls_close_notify(&r->origin);
    else origin_answer(r, n);
    break;
  case 4: peer_close(r, MU_CLIENT, arg); break;
  case 5: peer_close(r, MU_UPSTREAM, arg); break;
  case 6: connect_done(r, arg); break;
  case 7: {
    static const mu_answer ANSWERS[16] = {
        MU_ANSWER_PUBLIC4, MU_ANSWER_PUBLIC4, MU_ANSWER_PUBLIC4, MU_ANSWER_PUBLIC4, MU_ANSWER_PUBLIC4, MU_ANSWER_PUBLIC4,
        MU_ANSWER_PUBLIC4, MU_ANSWER_PUBLIC4, MU_ANSWER_BOTH,    MU_ANSWER_PUBLIC6, MU_ANSWER_PRIVATE, MU_ANSWER_MIXED,
        MU_ANSWER_MAPPED,  MU_ANSWER_NONE,    MU_ANSWER_FAIL,    MU_ANSWER_PUBLIC4};
    mu_resolve_done(r->w, ANSWERS[arg]);
    break;
  }
  case 8: mu_writable(r->w, arg & 1 ? MU_UPSTREAM : MU_CLIENT); break;
  case 9: mu_stall(r->w, arg & 1 ? MU_UPSTREAM : MU_CLIENT); break;
  case 10: mu_next_iteration(r->w); break;
  case 11: mu_fire_timer(r->w); break;
  case 12: curl_event(r, arg); break;
  case 13: raw_bytes(r, &r->client, arg >= 8); break;
  case 14: raw_bytes(r, &r->origin, arg >= 8); break;
  case 15: misc_event(r, arg); break;
  }
  check(r);
}

/* ------------------------------------------------------------------ setup ---- */

static void build_client(run *r) {
  const tmpl *t = r->t;
  char head[1024];
  if (t->route == R_FORWARD || t->route == R_CREDENTIAL) {
    if (t->body) snprintf(head, sizeof head, t->head, t->auth, r->body_len);
    else snprintf(head, sizeof head, t->head, t->auth);
  } else {
    snprintf(head, sizeof head, t->head, t->auth);
  }
  pb_add(&r->client.out, head, strlen(head));
  r->head_len = strlen(head);
  if (t->route == R_RAW) r->head_len = (size_t)(strstr(head, "\r\n\r\n") + 4 - head);
  if (t->route == R_FORWARD || t->route == R_CREDENTIAL) {
    pb_add(&r->client.out, r->body, r->body_len);
    static const char NEXT[] = "GET http://plain.test/" PIPELINED " HTTP/1.1\r\nHost: plain.test\r\n\r\n";
    pb_add(&r->client.out, NEXT, sizeof NEXT - 1);
  }
  if (t->inner) {
    char in[512];
    if (t->body) snprintf(in, sizeof in, t->inner, r->body_len);
    else snprintf(in, sizeof in, "%s", t->inner);
    pb_add(&r->inner, in, strlen(in));
    pb_add(&r->inner, r->body, r->body_len);
    static const char NEXT[] = "GET /v1/" PIPELINED " HTTP/1.1\r\nHost: api.test\r\n\r\n";
    pb_add(&r->inner, NEXT, sizeof NEXT - 1);
  }
  if (t->sni && t->early_hello) peer_tls_client(&r->client, G.pki.client, t->sni, r->client_tls_max);
}

static void cleanup_dir(void) {
  const char *files[] = {"ca.pem", "bundle.pem", "roots.pem"};
  char path[128];
  for (size_t i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", G.dir, files[i]);
    unlink(path);
  }
  rmdir(G.dir);
}

static void setup_once(void) {
  static const char *const NAMES[] = {"api.test", "tunnel.test", "raw.test", "plain.test", "denied.test", "askcred.test"};
  if (peer_pki_make(&G.pki, NAMES, 6) != 0) fail("cannot make the test certificates");
  static const char HEAD[] = "HTTP/1.1 200 OK\r\nContent-Length: 30000\r\nConnection: close\r\n\r\n";
  static const char AFTER[] = "HTTP/1.1 200 OK\r\n\r\nbytes after the end";
  static const char BANNER[] = "SSH-2.0-fuzz-server\r\n";
  pb_add(&G.answer, HEAD, sizeof HEAD - 1);
  for (size_t i = 0; i < 30000; i += 26) pb_add(&G.answer, "abcdefghijklmnopqrstuvwxyz", i + 26 <= 30000 ? 26 : 30000 - i);
  pb_add(&G.answer, AFTER, sizeof AFTER - 1);
  pb_add(&G.banner, BANNER, sizeof BANNER - 1);
  pb_add(&G.banner, AFTER, sizeof AFTER - 1);
  snprintf(G.dir, sizeof G.dir, "/tmp/fuzz-proxy-events.XXXXXX");
  if (!mkdtemp(G.dir)) fail("mkdtemp");
  atexit(cleanup_dir);
  char roots[128];
  snprintf(roots, sizeof roots, "%s/roots.pem", G.dir);
  FILE *f = fopen(roots, "w");
  if (!f || fputs(G.pki.ca_pem, f) < 0 || fclose(f) != 0) fail("cannot write the roots file");
  setenv("SANDSTACK_SESSION_TOKEN", TOKEN, 1);
  setenv("ANTHROPIC_API_KEY", KEY, 1);
  setenv("SANDSTACK_UPSTREAM", "https://model.test", 1);
  setenv("SANDSTACK_UPSTREAM_CA", G.pki.ca_pem, 1);
  setenv("SANDSTACK_CA_DIR", G.dir, 1);
  setenv("SANDSTACK_CA_ROOTS", roots, 1);
  setenv("SANDSTACK_SESSION", "fuzz", 1);
  setenv("SANDSTACK_CREDENTIALS",
         "[{\"name\":\"API_KEY\",\"host\":\"api.test\",\"secret\":\"" CRED_SECRET "\",\"placeholder\":\"" CRED_PLACEHOLDER
         "\",\"header\":\"X-Key\"},{\"name\":\"ASK_KEY\",\"host\":\"askcred.test\",\"port\":443,\"secret\":\"" ASK_SECRET
         "\",\"placeholder\":\"" ASK_PLACEHOLDER "\",\"header\":\"X-Key\"}]",
         1);
  setenv("SANDSTACK_PROXY_BUFFER_BYTES", "4096", 1); /* backpressure within reach of short inputs */
  setenv("SANDSTACK_PROXY_MAX_HEADER_BYTES", "4096", 1);
  setenv("SANDSTACK_PROXY_MAX_REQUEST_LINE", "1024", 1);
  setenv("SANDSTACK_PROXY_DRAIN_TIMEOUT_MS", "1000", 1);
  setenv("SANDSTACK_PROXY_CLIENT_CONGESTION", "host", 1); /* the in-memory listener has no socket to set */
  /* a raw rule where the policy language has it; the plain host:port otherwise */
  static const char *const RAW_RULES[] = {"{\"host\":\"raw.test\",\"port\":22,\"raw\":true}", "\"raw.test:22\""};
  char why[512];
  for (size_t i = 0; i < 2; i++) {
    char policy[1024];
    snprintf(policy, sizeof policy,
             "{\"version\":1,\"allow\":[{\"host\":\"api.test\",\"methods\":[\"GET\",\"POST\"],\"paths\":[\"/up\",\"/v1/"
             "*\"]},\"tunnel.test:443\",{\"host\":\"plain.test\",\"port\":80,\"methods\":[\"GET\",\"POST\"],\"paths\":["
             "\"/up\"]},{\"host\":\"model.test\",\"methods\":[\"ANY\"],\"paths\":[\"/v1/*\"]},\"open.test\",%s]}",
             RAW_RULES[i]);
    setenv("SANDSTACK_EGRESS_POLICY", policy, 1);
    char *argv[] = {"fuzz_proxy_events", NULL};
    if (proxy_config_load(&G.cfg, 1, argv, why, sizeof why) == 0) {
      /* the same rules, asking for what none admits */
      size_t n = strlen(policy);
      snprintf(policy + n - 1, sizeof policy - n + 1, ",\"ask\":true,\"ask_timeout\":5}");
      setenv("SANDSTACK_EGRESS_POLICY", policy, 1);
      if (proxy_config_load(&G.cfg_ask, 1, argv, why, sizeof why) != 0) fail(why);
      break;
    }
    proxy_config_free(&G.cfg);
    if (i == 1) fail(why);
  }
  G.tls = tls_new(&G.cfg, why, sizeof why);
  if (!G.tls || !G.tls->ca) fail("tls_new: no inspection CA");
  G.trace = getenv("FUZZ_PROXY_EVENTS_TRACE") != NULL;
  if (!G.trace && !freopen("/dev/null", "w", stdout)) fail("stdout"); /* the audit lines */
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setup_once();
  return 0;
}

/* SIGTERM, then turns of the loop and timers until the proxy stopped. */
static void finish(run *r) {
  mu_signal(r->w, SIGTERM);
  check(r);
  for (int i = 0; i < 400; i++) {
    if (r->srv.stopped && !mu_open_handles(r->w) && !mu_resolving(r->w)) break;
    mu_next_iteration(r->w);
    if (mu_resolving(r->w)) mu_resolve_done(r->w, MU_ANSWER_FAIL);
    else mu_fire_timer(r->w);
    check(r);
  }
  if (!r->srv.stopped || r->srv.conns || r->srv.active) fail("the proxy did not stop after SIGTERM and its drain deadline");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  run *r = calloc(1, sizeof *r);
  if (!r) return 0;
  r->data = data;
  r->size = size;
  r->pos = 3;
  r->ask_mode = (data[1] & 8) != 0;
  unsigned pick = data[0] & 15;
  r->t = &TEMPLATES[pick];
  if (r->ask_mode && pick == 8) r->t = &ASK_FORWARD;
  if (r->ask_mode && (pick == 2 || pick == 5 || pick == 13)) r->t = &ASK_INSPECT[pick == 2 ? 0 : pick == 5 ? 1 : 2];
  r->body_len = r->t->body ? BODY_SIZES[data[1] & 7] : 0;
  uint8_t rare = data[2];
  r->client_tls_max = rare & 1 ? TLS1_2_VERSION : 0;
  r->origin_tls_max = rare & 2 ? TLS1_2_VERSION : 0;
  r->body = malloc(r->body_len + 1);
  for (size_t i = 0; i < r->body_len; i++) r->body[i] = (char)('0' + (i * 7 + 3) % 43);
  mu_hooks hooks = {r, on_sent, on_fin, on_queued};
  r->w = mu_new(&r->loop, &hooks, !(rare & 4), (rare & 0xf8) == 0xf8, (rare & 0xf0) == 0xe0);
  if (server_start(&r->srv, &r->loop, r->ask_mode ? &G.cfg_ask : &G.cfg) != 0) fail("server_start");
  r->srv.tls = G.tls;
  mc_hooks ch = {r, on_cred_started, on_cred_body};
  mc_set_hooks(curl_loop_multi(r->srv.curl), &ch);
  build_client(r);
  mu_accept(r->w);
  check(r);
  while (r->pos < r->size) event(r, r->data[r->pos++]);
  finish(r);
  if (G.trace) {
    fprintf(stderr, "end: origin got %zu bytes (%zu plaintext), client got %zu (%zu plaintext), curl body %zu\n",
            r->origin.in.n, r->origin.plain_in.n, r->client.in.n, r->client.plain_in.n, r->cred_body.n);
    if (r->origin.plain_in.n) fprintf(stderr, "origin plaintext: %.*s\n", (int)(r->origin.plain_in.n > 300 ? 300 : r->origin.plain_in.n), r->origin.plain_in.p);
    if (r->client.plain_in.n) fprintf(stderr, "client plaintext: %.*s\n", (int)(r->client.plain_in.n > 300 ? 300 : r->client.plain_in.n), r->client.plain_in.p);
  }
  live_policy_end(&r->srv); /* a policy an answer remembered (main.c does the same at exit) */
  mu_free(r->w);
  peer_free(&r->client);
  peer_free(&r->origin);
  pb_free(&r->inner);
  pb_free(&r->client_plain);
  pb_free(&r->cred_body);
  pb_free(&r->origin_plain);
  free(r->marks);
  free(r->body);
  free(r);
  return 0;
}
