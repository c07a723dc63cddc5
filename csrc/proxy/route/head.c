/* The request head of a new connection: read under the handshake deadline, parsed, the proxy
 * token checked, and the route it names chosen (CONNECT, plain-HTTP forward, model API). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"
#include "proxy/conn.h"
#include "proxy/parse/auth.h"
#include "proxy/route/forward.h"
#include "proxy/route/head.h"
#include "proxy/route/model_api.h"
#include "proxy/route/reply.h"
#include "proxy/route/tunnel.h"
#include "proxy/server.h"

/* The proxy token in Proxy-Authorization (forward and CONNECT). */
static int proxy_authorized(proxy_conn *c) {
  const proxy_config *cfg = c->srv->cfg;
  int n = 0;
  const ph_header *h = ph_find(&c->req, "proxy-authorization", &n);
  return n == 1 && auth_proxy_value(h->value, h->value_len, cfg->token, cfg->token_len);
}

static void dispatch(proxy_conn *c) {
  ph_request *r = &c->req;
  memcpy(c->method, r->method, r->method_len);
  c->method[r->method_len] = '\0';
  char host[256];
  const char *why = NULL;
  if (r->method_len == 7 && memcmp(r->method, "CONNECT", 7) == 0) {
    c->kind = KIND_CONNECT;
    if (ph_authority(r->target, r->target_len, host, &c->port) != 0) {
      c->decision = "bad_request";
      return reply_error(c, 400, "invalid_request_error", "CONNECT needs host:port (no IPv6 literal, no userinfo)");
    }
  } else if (r->target_len > 0 && r->target[0] == '/') {
    c->kind = KIND_CREDENTIAL;
    return credential_begin(c);
  } else {
    c->kind = KIND_FORWARD;
    const char *path;
    size_t pl;
    if (ph_absolute(r->target, r->target_len, host, &c->port, &path, &pl) != 0) {
      c->decision = "bad_request";
      return reply_error(c, 400, "invalid_request_error",
                         "only origin-form requests, CONNECT host:port and http:// absolute URIs are served "
                         "(https goes through CONNECT)");
    }
    size_t q = 0;
    while (q < pl && path[q] != '?') q++;
    if (q > SS_PATH_MAX) {
      c->decision = "bad_request";
      return reply_error(c, 414, "invalid_request_error", "the request path is too long");
    }
    memcpy(c->path, path, q); /* the audit line keeps the path without its query */
    c->path[q] = '\0';
  }
  if (!proxy_authorized(c)) {
    c->decision = "unauthenticated";
    snprintf(c->host, sizeof c->host, "%.253s", host);
    return reply_error(c, 407, "authentication_error",
                       "proxy authentication required: send this session's token in Proxy-Authorization "
                       "(Basic with the token as password, or Bearer)");
  }
  if (ss_host_normalize(host, strlen(host), c->host, &why) != 0) {
    snprintf(c->host, sizeof c->host, "%.253s", host);
    return reply_policy(c, "deny", "bad_host", 0, why);
  }
  if (c->kind == KIND_CONNECT) tunnel_begin(c);
  else forward_begin(c);
}

static void head_data(proxy_conn *c, const char *data, size_t n) {
  const proxy_config *cfg = c->srv->cfg;
  size_t room = ss_buf_room(&c->in);
  if (n > room) n = room; /* past the head limit a 431 is decided anyway */
  if (ss_buf_append(&c->in, data, n) != SS_BUF_OK) return conn_close(c);
  ph_limits lim = {cfg->max_line, cfg->max_head, cfg->max_headers};
  switch (ph_parse(c->in.data, c->in.len, &lim, &c->scanned, &c->req)) {
  case PH_INCOMPLETE: return;
  case PH_DONE:
    uv_read_stop((uv_stream_t *)&c->client); /* the route reads on when it is ready */
    return dispatch(c);
  case PH_BAD: c->decision = "bad_request"; return reply_error(c, 400, "invalid_request_error", "malformed request head");
  case PH_LINE_TOO_LONG:
    c->decision = "too_large";
    return reply_error(c, 414, "invalid_request_error", "the request line is longer than the proxy accepts");
  case PH_HEAD_TOO_LARGE:
    c->decision = "too_large";
    return reply_error(c, 431, "invalid_request_error", "the request headers are larger than the proxy accepts");
  case PH_BAD_VERSION:
    c->decision = "bad_request";
    return reply_error(c, 505, "invalid_request_error", "only HTTP/1.0 and HTTP/1.1 are served");
  }
}

static void head_read(proxy_conn *c, char *base, size_t n) {
  head_data(c, base, n);
  free(base);
}

static void head_deadline(proxy_conn *c) {
  c->decision = "timeout";
  c->end = "handshake_timeout";
  reply_error(c, 408, "timeout_error", "the request head did not arrive in time");
}

/* Until the head names a route: its bytes, and the handshake deadline. */
static const conn_handlers reading_head = {.client_data = head_read, .deadline = head_deadline, .seal = conn_seal_unadmitted};

void head_begin(proxy_conn *c) {
  proxy_server *s = c->srv;
  conn_enter(c, ST_HEAD, &reading_head);
  if (s->active >= s->cfg->max_conns || s->draining) {
    c->decision = "overloaded";
    return reply_error(c, 503, "overloaded_error",
                       s->draining ? "the proxy is shutting down" : "the proxy holds its maximum number of connections");
  }
  c->counted = 1;
  s->active++;
  conn_set_deadline(c, s->cfg->handshake_ms);
}
