/* Plain-HTTP forwarding (absolute-form requests, what clients honouring HTTP_PROXY send for
 * http:// URLs). The policy is checked on host, port, method and path; a Host header must name
 * the URL's host and port (else 421: a Host naming another site at the same address is what
 * the client meant, and it was not checked). The request goes out in origin form with Host
 * written from the URL, without the fields ph_dropped names (the proxy credentials, method and
 * URL overrides, any header carrying the token), and with "Connection: close": one request per
 * connection, so a second request could never follow the first unchecked. The body is passed
 * for exactly its Content-Length. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/conn.h"
#include "proxy/route/ask.h"
#include "proxy/route/ask_grant.h"
#include "proxy/route/cred_scan.h"
#include "proxy/route/dial.h"
#include "proxy/route/forward.h"
#include "proxy/control/live_policy.h"
#include "proxy/route/relay.h"
#include "proxy/route/reply.h"

static void connected(proxy_conn *c) {
  const proxy_config *cfg = c->srv->cfg;
  const ph_request *r = &c->req;
  const char *path;
  size_t pl;
  char host[256];
  int port;
  ph_absolute(r->target, r->target_len, host, &port, &path, &pl); /* checked in conn.c */
  size_t cap = r->head_len + 512, n = 0;
  char *head = malloc(cap);
  if (!head) return conn_close(c);
  n += (size_t)snprintf(head, cap, "%s %.*s HTTP/1.1\r\nHost: %s", c->method, (int)pl, path, c->host);
  if (c->port != 80) n += (size_t)snprintf(head + n, cap - n, ":%d", c->port);
  n += (size_t)snprintf(head + n, cap - n, "\r\n");
  for (size_t i = 0; i < r->nheaders; i++) {
    const ph_header *h = &r->headers[i];
    if (ph_dropped(h, cfg->token, cfg->token_len)) continue;
    n += (size_t)snprintf(head + n, cap - n, "%.*s: %.*s\r\n", (int)h->name_len, h->name, (int)h->value_len, h->value);
  }
  n += (size_t)snprintf(head + n, cap - n, "Connection: close\r\n\r\n");
  if (ph_any_override(r)) c->security_event = "override_header_stripped"; /* it asked to be another request */
  if (conn_write_owned(c, (uv_stream_t *)&c->upstream, head, n, NULL) != 0) return;
  /* body bytes that arrived with the head */
  size_t early = c->in.len - r->head_len;
  if (early > c->up_left) early = (size_t)c->up_left;
  if (early) { /* through the credential scan: its carry sees a placeholder split from the next read */
    c->up_left -= early;
    c->bytes_up += early;
    char *pass = NULL;
    size_t pn = 0;
    if (cred_flow_body(c, c->in.data + r->head_len, early, c->up_left == 0, &pass, &pn) != 0) return;
    if (pn && conn_write_owned(c, (uv_stream_t *)&c->upstream, pass, pn, NULL) != 0) return;
  }
  ss_buf_free(&c->in);
  relay_start(c);
}

void forward_begin(proxy_conn *c) {
  const ph_request *r = &c->req;
  if (ph_find(r, "transfer-encoding", NULL)) {
    c->decision = "bad_request";
    return reply_error(c, 411, "invalid_request_error",
                       "request bodies are forwarded with Content-Length only (no Transfer-Encoding)");
  }
  unsigned long long cl;
  if (ph_content_length(r, &cl) < 0) {
    c->decision = "bad_request";
    return reply_error(c, 400, "invalid_request_error", "malformed or repeated Content-Length");
  }
  c->up_left = cl;
  const char *path;
  size_t pl;
  char host[256];
  int port;
  ph_absolute(r->target, r->target_len, host, &port, &path, &pl);
  ss_policy_verdict v;
  const ss_policy *p = policy_judge(c);
  ss_policy_check(p, c->host, strlen(c->host), c->method, strlen(c->method), path, pl, c->port, &v);
  ask_grant(c, &v);
  if (!v.admitted && ask_hold(c, p, &v, forward_begin)) return; /* the host decides (ask.c) */
  if (!v.admitted) return reply_refused(c, &v);
  const char *why;
  int refused = ph_host_refusal(r, NULL, 0, c->host, c->port, 80, &why); /* the URL is the admitted name */
  if (refused) {
    c->decision = refused == 421 ? "misdirected" : "bad_request";
    if (refused == 421) c->security_event = "host_mismatch";
    return reply_error(c, refused, "invalid_request_error", why);
  }
  /* a credential never goes over plain http: any placeholder in the head or the body is refused
     (the body bytes read with the head here, the rest as relay.c passes them on) */
  size_t with_head = c->in.len - r->head_len < cl ? c->in.len : r->head_len + (size_t)cl;
  if (cred_flow_check_head(c, c->in.data, with_head) != 0) return;
  c->decision = "allow";
  c->rule = v.rule;
  dial_start(c, connected);
}
