/* The credential route (SECURITY.md section 5): an origin-form request carrying the session
 * token goes to SANDSTACK_UPSTREAM with the token removed and the real key put in its place.
 * libcurl does the upstream side (TLS, verification, connection reuse) on the proxy's own loop;
 * the request body and the response stream through without being held whole: the body is
 * handed to curl as it arrives (curl pauses when there is none), the response is written to
 * the client as curl receives it (chunked toward the client when the length is unknown, so SSE
 * events arrive one by one), and curl is paused while the client reads slower than it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxy/parse/auth.h"
#include "proxy/conn.h"
#include "proxy/route/cred_scan.h"
#include "proxy/route/model_api.h"
#include "proxy/parse/cred_table.h"
#include "proxy/curl_loop.h"
#include "proxy/route/reply.h"
#include "proxy/tls/tls.h"

#define MAX_RESPONSE_HEAD (256 * 1024)

typedef struct cred_req cred_req;
struct cred_req {
  curl_loop_transfer transfer; /* first: curl_loop calls transfer_done through the easy's private */
  proxy_conn *c;
  CURL *easy;
  struct curl_slist *headers;
  char *url;
  unsigned long long body_left; /* body bytes still to come from the client */
  /* received, not yet taken by curl: body.data[body_off..body.len). Reading pauses past
   * buffer_bytes, so it holds at most that plus the early bytes and one read (body_limit). */
  ss_buf body;
  size_t body_off;
  ss_buf resp; /* response header lines kept for the client (MAX_RESPONSE_HEAD) */
  long status;
  int send_paused, recv_paused, head_sent, chunked, is_head, has_cl, has_te;
  int in_callback, aborted, finished, client_paused, added;
  int encoded; /* the answer named a Content-Encoding: refused (the scrub reads plain text only) */
  creds_stream scrub_head; /* one header line at a time (the body's is c->cred_response) */
};

static size_t body_limit(const proxy_config *cfg) {
  /* the pause threshold, the body bytes that came with the head, one read, and the few bytes
     the credential scan held back from the last one */
  return cfg->buffer_bytes + cfg->max_head + 2 * CONN_READ_CHUNK + CREDS_SECRET_MAX;
}

static size_t queued(proxy_conn *c) { return uv_stream_get_write_queue_size((uv_stream_t *)&c->client); }

static void free_req(cred_req *r) {
  proxy_conn *c = r->c;
  if (r->easy) {
    if (!r->finished && c->srv->curl) curl_multi_remove_handle(curl_loop_multi(c->srv->curl), r->easy);
    curl_easy_cleanup(r->easy);
  }
  curl_slist_free_all(r->headers);
  free(r->url);
  ss_buf_free(&r->body);
  ss_buf_free(&r->resp);
  creds_stream_free(&r->scrub_head);
  free(r);
  c->route = NULL;
  conn_release(c);
}

static void update_pause(cred_req *r) {
  if (r->finished || r->aborted) return;
  r->in_callback++;
  curl_easy_pause(r->easy, (r->recv_paused ? CURLPAUSE_RECV : 0) | (r->send_paused ? CURLPAUSE_SEND : 0));
  r->in_callback--;
}

/* ---- the request body, client -> curl ---- */

static size_t on_read_body(char *dst, size_t size, size_t n, void *ud) {
  cred_req *r = ud;
  proxy_conn *c = r->c;
  if (r->aborted) return CURL_READFUNC_ABORT;
  size_t avail = r->body.len - r->body_off, want = size * n;
  if (avail == 0) {
    if (r->body_left == 0) return 0; /* the whole body went out */
    r->send_paused = 1;
    return CURL_READFUNC_PAUSE;
  }
  if (want > avail) want = avail;
  memcpy(dst, r->body.data + r->body_off, want);
  r->body_off += want;
  if (r->body_off == r->body.len) {
    ss_buf_consume(&r->body, r->body.len);
    r->body_off = 0;
  }
  if (r->client_paused && r->body.len - r->body_off <= c->srv->cfg->buffer_bytes / 2) {
    r->client_paused = 0;
    conn_read_client(c);
  }
  return want;
}

static void body_bytes(proxy_conn *c, const char *data, size_t len) {
  cred_req *r = c->route;
  if (!r || len == 0) return;
  if (len > r->body_left) len = (size_t)r->body_left; /* bytes past the body are not a request we checked */
  if (len == 0) return;
  r->body_left -= len;
  c->bytes_up += len;
  char *pass = NULL; /* what the credential scan lets go (a placeholder: refused, the transfer ends) */
  if (cred_flow_body(c, data, len, r->body_left == 0, &pass, &len) != 0) {
    if (!r->added) r->finished = 1; /* not in curl's multi yet */
    if (c->route) credential_abort(c);
    return;
  }
  data = pass;
  if (r->body_off && len > ss_buf_room(&r->body)) { /* what curl took makes room */
    ss_buf_consume(&r->body, r->body_off);
    r->body_off = 0;
  }
  int kept = ss_buf_append(&r->body, data, len);
  free(pass);
  if (kept != SS_BUF_OK) return conn_close(c);
  if (r->body.len - r->body_off > c->srv->cfg->buffer_bytes) {
    uv_read_stop((uv_stream_t *)&c->client);
    r->client_paused = 1;
  }
  if (r->send_paused) {
    r->send_paused = 0;
    update_pause(r);
  }
}

static void client_eof(proxy_conn *c) {
  cred_req *r = c->route;
  if (r && r->body_left > 0) { /* the client left before its body was complete */
    c->end = "client_closed";
    conn_close(c);
  }
  /* a client that half-closes after its request still gets the response */
}

static void client_data(proxy_conn *c, char *base, size_t len) {
  body_bytes(c, base, len);
  free(base);
}

/* The request body to curl, a client's early close; curl's own timeouts govern (the deadline timer
 * is stopped), and the response comes through curl's callbacks. */
static const conn_handlers answering = {.client_data = client_data, .client_eof = client_eof, .close = credential_abort};

/* ---- the response, curl -> client ---- */

static int hop_by_hop(const char *line, size_t n) {
  static const char *const names[] = {"connection:", "keep-alive:", "proxy-connection:", "transfer-encoding:",
                                      "te:",          "trailer:",    "upgrade:",          "proxy-authenticate:"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    size_t k = strlen(names[i]);
    if (n >= k && strncasecmp(line, names[i], k) == 0) return 1;
  }
  return 0;
}

/* A Content-Encoding field naming anything but identity. The proxy asked for identity; a body
 * in another coding would carry the key past the scrub. */
static int encoded(const char *line, size_t n) {
  if (n < 17 || strncasecmp(line, "content-encoding:", 17) != 0) return 0;
  for (size_t i = 17; i < n; i++) {
    char ch = line[i];
    if (ch == ' ' || ch == '\t' || ch == ',' || ch == '\r' || ch == '\n') continue;
    if (n - i >= 8 && strncasecmp(line + i, "identity", 8) == 0) i += 7;
    else return 1;
  }
  return 0;
}

static void send_head(cred_req *r) {
  proxy_conn *c = r->c;
  curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->status);
  r->chunked = !r->is_head && r->status != 204 && r->status != 304 && (!r->has_cl || r->has_te);
  size_t cap = r->resp.len + 256, n = 0;
  char *head = malloc(cap);
  if (!head) return conn_close(c);
  n += (size_t)snprintf(head, cap, "HTTP/1.1 %ld %s\r\n", r->status, reply_status_text((int)r->status));
  for (size_t i = 0; i < r->resp.len;) { /* copy the kept lines, minus Content-Length under chunking */
    const char *line = r->resp.data + i, *nl = memchr(line, '\n', r->resp.len - i);
    size_t ll = nl ? (size_t)(nl - line) + 1 : r->resp.len - i;
    if (!(r->has_te && ll >= 15 && strncasecmp(line, "content-length:", 15) == 0)) {
      memcpy(head + n, line, ll);
      n += ll;
    }
    i += ll;
  }
  n += (size_t)snprintf(head + n, cap - n, "%sConnection: close\r\n\r\n",
                        r->chunked ? "Transfer-Encoding: chunked\r\n" : "");
  r->head_sent = 1;
  c->status = (int)r->status;
  conn_write_owned(c, (uv_stream_t *)&c->client, head, n, NULL);
}

static size_t on_header(char *line, size_t size, size_t n, void *ud) {
  cred_req *r = ud;
  size_t len = size * n;
  if (r->aborted) return 0;
  r->in_callback++;
  if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) { /* a new status line: 1xx interim answers are dropped */
    ss_buf_consume(&r->resp, r->resp.len);
    r->has_cl = r->has_te = 0;
  } else if ((len == 2 && line[0] == '\r') || (len == 1 && line[0] == '\n')) {
    long st = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &st);
    if (st >= 200 && !r->head_sent) send_head(r);
  } else {
    if (len >= 18 && strncasecmp(line, "transfer-encoding:", 18) == 0) r->has_te = 1;
    if (len >= 15 && strncasecmp(line, "content-length:", 15) == 0) r->has_cl = 1;
    if (encoded(line, len)) {
      r->encoded = 1; /* the transfer fails before the head goes on: transfer_done answers 502 */
      r->in_callback--;
      return 0;
    }
    char *clean = NULL; /* the line with the key (or any secret of this host) masked, same length */
    size_t cl = 0;
    if (!hop_by_hop(line, len) && cred_flow_response(r->c, &r->scrub_head, line, len, 1, &clean, &cl) != 0) {
      r->in_callback--;
      return 0;
    }
    if (clean) line = clean, len = cl;
    if (!hop_by_hop(line, len)) {
      /* past MAX_RESPONSE_HEAD (room for the line and a '\n' kept spare) the transfer fails: a 502 */
      int kept = len + 2 > ss_buf_room(&r->resp) ? SS_BUF_OVER : ss_buf_append(&r->resp, line, len);
      if (kept == SS_BUF_OK && (len == 0 || line[len - 1] != '\n')) kept = ss_buf_append(&r->resp, "\n", 1);
      if (kept != SS_BUF_OK) {
        free(clean);
        r->in_callback--;
        return 0;
      }
    }
    free(clean);
  }
  r->in_callback--;
  return r->aborted ? 0 : size * n;
}

void credential_client_drained(proxy_conn *c) {
  cred_req *r = c->route;
  if (r && r->recv_paused && queued(c) <= c->srv->cfg->buffer_bytes / 2) {
    r->recv_paused = 0;
    update_pause(r);
  }
}

static void after_body_write(proxy_conn *c, int status) {
  (void)status;
  credential_client_drained(c);
}

/* Response body bytes toward the client, as one chunk when the answer is chunked. */
static int write_body(proxy_conn *c, int chunked, const char *data, size_t len) {
  if (len == 0) return 0;
  char *out = malloc(len + 32);
  size_t o = 0;
  if (!out) return -1;
  if (chunked) o += (size_t)snprintf(out, 32, "%zx\r\n", len);
  memcpy(out + o, data, len);
  o += len;
  if (chunked) memcpy(out + o, "\r\n", 2), o += 2;
  conn_write_owned(c, (uv_stream_t *)&c->client, out, o, after_body_write);
  return 0;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud) {
  cred_req *r = ud;
  proxy_conn *c = r->c;
  size_t len = size * n;
  if (r->aborted) return 0;
  if (queued(c) > c->srv->cfg->buffer_bytes) {
    r->recv_paused = 1;
    return CURL_WRITEFUNC_PAUSE; /* curl keeps these bytes and offers them again on unpause */
  }
  if (len == 0) return 0;
  r->in_callback++;
  if (!r->head_sent) send_head(r);
  char *clean = NULL; /* the key masked; a tail that may start it waits for the next bytes */
  size_t cl = 0;
  int ok = cred_flow_response(c, &c->cred_response, data, len, 0, &clean, &cl) == 0 && !r->aborted &&
           write_body(c, r->chunked, clean, cl) == 0;
  free(clean);
  if (ok) c->bytes_down += len;
  r->in_callback--;
  return ok && !r->aborted ? len : 0;
}

/* The transfer ended (curl_loop): the answer's end, or an error before or after its head. */
static void transfer_done(curl_loop_transfer *t, CURL *easy, CURLcode rc) {
  cred_req *r = (cred_req *)t;
  proxy_conn *c = r->c;
  curl_multi_remove_handle(curl_loop_multi(c->srv->curl), easy);
  r->finished = 1;
  if (r->aborted || c->state == ST_CLOSING) return free_req(r);
  if (r->encoded && !r->head_sent) {
    c->decision = "upstream_error";
    free_req(r);
    return reply_upstream(c, 502, "response_encoded",
                          "the upstream answered with a Content-Encoding, so the proxy cannot scrub the key from it and "
                          "did not pass it on; the proxy asks for Accept-Encoding: identity");
  }
  if (rc != CURLE_OK && !r->head_sent) {
    char msg[400];
    snprintf(msg, sizeof msg, "the upstream %s failed: %s", c->srv->cfg->upstream, curl_easy_strerror(rc));
    c->decision = "upstream_error";
    c->reason = rc == CURLE_OPERATION_TIMEDOUT ? "timeout" : "transfer_failed";
    free_req(r);
    return reply_error(c, rc == CURLE_OPERATION_TIMEDOUT ? 504 : 502, "api_error", msg);
  }
  if (rc != CURLE_OK) { /* mid-response: end the connection so the client sees it was cut */
    c->end = "upstream_error";
    free_req(r);
    return conn_close(c);
  }
  if (!r->head_sent) send_head(r);
  int chunked = r->chunked;
  free_req(r);
  char *tail = NULL; /* what the scrub held at the end of the response */
  size_t tl = 0;
  if (cred_flow_response(c, &c->cred_response, NULL, 0, 1, &tail, &tl) != 0) return;
  int ok = write_body(c, chunked, tail, tl);
  free(tail);
  if (ok != 0) return conn_close(c);
  conn_reply_and_linger(c, "0\r\n\r\n", chunked ? 5 : 0);
}

void credential_abort(proxy_conn *c) {
  cred_req *r = c->route;
  if (!r) return;
  if (r->in_callback) { /* curl is on the stack: fail the transfer; transfer_done frees */
    r->aborted = 1;
    return;
  }
  free_req(r);
}

/* ---- the request ---- */

typedef enum { CARRIER_NONE, CARRIER_XAPIKEY, CARRIER_BEARER } carrier;

static carrier token_carrier(proxy_conn *c) {
  const proxy_config *cfg = c->srv->cfg;
  int n;
  const ph_header *h = ph_find(&c->req, "x-api-key", &n);
  if (n == 1 && auth_equal(h->value, h->value_len, cfg->token, cfg->token_len)) return CARRIER_XAPIKEY;
  h = ph_find(&c->req, "authorization", &n);
  if (n == 1 && auth_bearer(h->value, h->value_len, cfg->token, cfg->token_len)) return CARRIER_BEARER;
  h = ph_find(&c->req, "proxy-authorization", &n);
  if (n == 1 && auth_proxy_value(h->value, h->value_len, cfg->token, cfg->token_len)) return CARRIER_XAPIKEY;
  return CARRIER_NONE;
}

/* What every route leaves out (ph_dropped: hop-by-hop fields, method and URL overrides, the
 * token in any name or value), and what curl writes itself here (the length, Expect) or the
 * proxy puts in place (the key). */
static int dropped(const ph_header *h, const proxy_config *cfg) {
  static const char *const names[] = {"content-length", "expect", "x-api-key", "authorization", "accept-encoding"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (ph_name_is(h, names[i])) return 1;
  return ph_dropped(h, cfg->token, cfg->token_len);
}

static int add_header(cred_req *r, const char *fmt, const char *a, size_t al, const char *b, size_t bl) {
  char line[16384];
  if (al + bl + 8 > sizeof line) return -1;
  snprintf(line, sizeof line, fmt, (int)al, a, (int)bl, b);
  struct curl_slist *l = curl_slist_append(r->headers, line);
  if (!l) return -1;
  r->headers = l;
  return 0;
}

static int build_headers(cred_req *r, carrier how) {
  proxy_conn *c = r->c;
  const proxy_config *cfg = c->srv->cfg;
  for (size_t i = 0; i < c->req.nheaders; i++) {
    const ph_header *h = &c->req.headers[i];
    if (dropped(h, cfg)) continue;
    if (add_header(r, h->value_len ? "%.*s: %.*s" : "%.*s;%.*s", h->name, h->name_len, h->value, h->value_len))
      return -1;
  }
  /* curl adds these itself unless told not to; the client's own (kept above) win */
  struct curl_slist *ae = curl_slist_append(r->headers, "Accept-Encoding: identity"); /* the scrub reads plain text */
  if (!ae) return -1;
  r->headers = ae;
  static const char *const suppress[] = {"Accept:", "Content-Type:", "Expect:"};
  for (size_t i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)strlen(suppress[i]) - 1, suppress[i]);
    if (i == 2 || !ph_find(&c->req, name, NULL)) {
      struct curl_slist *l = curl_slist_append(r->headers, suppress[i]);
      if (!l) return -1;
      r->headers = l;
    }
  }
  /* the key in force: the start's, or the one a live set-credentials put in (control.c) */
  const char *key = creds_model_key(c->srv->creds);
  if (!key) return -1;
  size_t kl = strlen(key);
  if (how == CARRIER_BEARER) return add_header(r, "%.*s%.*s", "Authorization: Bearer ", 22, key, kl);
  return add_header(r, "%.*s%.*s", "x-api-key: ", 11, key, kl);
}

static int setup_easy(cred_req *r, carrier how, unsigned long long body) {
  proxy_conn *c = r->c;
  const proxy_config *cfg = c->srv->cfg;
  size_t ul = strlen(cfg->upstream) + c->req.target_len + 1;
  if (!(r->url = malloc(ul)) || !(r->easy = curl_easy_init())) return -1;
  snprintf(r->url, ul, "%s%.*s", cfg->upstream, (int)c->req.target_len, c->req.target);
  if (build_headers(r, how) != 0) return -1;
  CURL *e = r->easy;
  curl_easy_setopt(e, CURLOPT_URL, r->url);
  r->transfer.done = transfer_done;
  curl_easy_setopt(e, CURLOPT_PRIVATE, &r->transfer);
  curl_easy_setopt(e, CURLOPT_PROXY, ""); /* the proxy's own environment never routes the upstream */
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)cfg->connect_ms);
  long idle_s = cfg->stream_ms / 1000 ? (long)(cfg->stream_ms / 1000) : 1L;
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L); /* a stream silent for stream_ms is dead */
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, idle_s);
  tls_curl_trust(e, c->srv->tls); /* SANDSTACK_UPSTREAM_CA beside the system roots */
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read_body);
  curl_easy_setopt(e, CURLOPT_READDATA, r);
  const char *m = c->method;
  if (strcmp(m, "HEAD") == 0) {
    r->is_head = 1;
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else if (body > 0 || strcmp(m, "POST") == 0 || strcmp(m, "PUT") == 0 || strcmp(m, "PATCH") == 0) {
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body);
    if (strcmp(m, "POST") != 0) curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, m);
  } else if (strcmp(m, "GET") != 0) {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, m);
  }
  return 0;
}

void credential_begin(proxy_conn *c) {
  const proxy_config *cfg = c->srv->cfg;
  const ph_request *req = &c->req;
  snprintf(c->host, sizeof c->host, "%s", cfg->upstream_host);
  c->port = cfg->upstream_port;
  size_t q = 0;
  while (q < req->target_len && req->target[q] != '?') q++;
  if (q > SS_PATH_MAX) {
    c->decision = "too_large";
    return reply_error(c, 414, "invalid_request_error", "the request path is too long");
  }
  memcpy(c->path, req->target, q);
  c->path[q] = '\0';
  carrier how = token_carrier(c);
  if (how == CARRIER_NONE) {
    c->decision = "unauthenticated";
    return reply_error(c, 401, "authentication_error", "the request does not carry this session's token");
  }
  if (!creds_model_key(c->srv->creds)) {
    c->decision = "deny";
    return reply_error(c, 403, "permission_error", "this stack has no model key (it was started without api_key)");
  }
  if (ph_find(req, "transfer-encoding", NULL)) {
    c->decision = "bad_request";
    return reply_error(c, 411, "invalid_request_error", "request bodies need Content-Length (no Transfer-Encoding)");
  }
  unsigned long long body;
  if (ph_content_length(req, &body) < 0) {
    c->decision = "bad_request";
    return reply_error(c, 400, "invalid_request_error", "malformed or repeated Content-Length");
  }
  if (body > cfg->max_body) {
    c->decision = "too_large";
    return reply_error(c, 413, "invalid_request_error", "the request body is larger than the proxy accepts");
  }
  ss_policy_verdict v;
  ss_policy_check(c->srv->policy, c->host, strlen(c->host), c->method, strlen(c->method), req->target,
                  req->target_len, c->port, &v);
  if (!v.admitted) return reply_refused(c, &v);
  if (cred_flow_check_head(c, c->in.data, req->head_len) != 0) return; /* another credential's placeholder */
  if (cred_flow_keep(c) != 0) return; /* the key in force now: scrubbed from this answer even if replaced live */
  c->decision = "allow";
  c->rule = v.rule;
  cred_req *r = calloc(1, sizeof *r);
  if (!r) return conn_close(c);
  conn_enter(c, ST_CREDENTIAL, &answering); /* from here the transfer is the route's to end */
  r->c = c;
  ss_buf_init(&r->body, body_limit(c->srv->cfg));
  ss_buf_init(&r->resp, MAX_RESPONSE_HEAD);
  c->route = r;
  conn_hold(c); /* the transfer keeps the connection's memory alive until curl lets go */
  r->body_left = body;
  if (setup_easy(r, how, body) != 0) {
    free_req(r);
    return reply_error(c, 500, "api_error", "cannot set up the upstream request");
  }
  uv_timer_stop(&c->timer); /* curl's own timeouts govern from here */
  size_t early = c->in.len - req->head_len;
  if (early) body_bytes(c, c->in.data + req->head_len, early);
  if (c->state != ST_CREDENTIAL) return;
  r->added = 1;
  if (curl_multi_add_handle(curl_loop_multi(c->srv->curl), r->easy) != CURLM_OK) {
    r->finished = 1;
    free_req(r);
    return reply_error(c, 500, "api_error", "cannot start the upstream request");
  }
  conn_read_client(c); /* the rest of the body, and a close from the client */
}
