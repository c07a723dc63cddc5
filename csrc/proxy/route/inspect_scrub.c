/* The answer of a credential's host, scrubbed as a message (see inspect_scrub.h). */
#include "proxy/route/inspect_scrub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/conn.h"
#include "proxy/route/cred_scan.h"
#include "proxy/route/reply.h"

void resp_scrub_begin(resp_scrub *r) {
  ss_buf_free(&r->head);
  ss_buf_init(&r->head, HR_MAX_HEAD);
  r->chunked = r->sent = 0;
}

void resp_scrub_free(resp_scrub *r) { ss_buf_wipe(&r->head); }

static int out(proxy_conn *c, resp_scrub *r, const char *data, size_t n, resp_emit emit) {
  if (!n) return 0;
  r->sent = 1;
  return emit(c, data, n);
}

/* An answer the scrub cannot read: refused whole when none of it has gone, else cut. */
static int refuse(proxy_conn *c, resp_scrub *r, const char *reason, const char *what) {
  if (r->sent || c->bytes_down > 0) {
    c->end = reason;
    conn_close(c);
    return -1;
  }
  char msg[SS_HOST_MAX + 400];
  snprintf(msg, sizeof msg,
           "the answer of %s:%d %s, so the proxy cannot scrub it of the credential's secret and did not pass it on; "
           "the proxy asks this host for Accept-Encoding: identity",
           c->host, c->port, what);
  c->decision = "upstream_error";
  reply_upstream(c, 502, reason, msg);
  return -1;
}

/* Scrubbed body bytes (final: the body ended), in a chunk of their own when re-chunking; the
 * last chunk follows when the body ended whole (last). */
static int body_out(proxy_conn *c, resp_scrub *r, const char *data, size_t n, int final, int last, resp_emit emit) {
  char *clean = NULL;
  size_t cn = 0;
  if (cred_flow_response(c, &c->cred_response, data, n, final, &clean, &cn) != 0) return -1;
  int rc = 0;
  if (cn && r->chunked) {
    char size[24];
    int sl = snprintf(size, sizeof size, "%zx\r\n", cn);
    rc = out(c, r, size, (size_t)sl, emit);
    if (rc == 0) rc = out(c, r, clean, cn, emit);
    if (rc == 0) rc = out(c, r, "\r\n", 2, emit);
  } else {
    rc = out(c, r, clean, cn, emit);
  }
  free(clean);
  if (rc == 0 && last && r->chunked) rc = out(c, r, "0\r\n\r\n", 5, emit); /* the origin's trailers are dropped */
  return rc;
}

/* A whole head: refused when the body it announces is not plain text, else scrubbed whole. */
static int head_out(proxy_conn *c, resp_scrub *r, hr_parser *p, resp_emit emit) {
  if (p->unread) return refuse(c, r, "response_unreadable", "has a head or framing the proxy cannot read");
  int final = p->phase != HR_HEAD;
  if (final && p->coded && p->phase != HR_DONE)
    return refuse(c, r, "response_encoded", "is encoded (Content-Encoding or a Transfer-Encoding coding)");
  r->chunked = final && p->phase == HR_CHUNKED;
  creds_stream once = {0}; /* a head is scrubbed on its own: its carry never meets the body's */
  char *clean = NULL;
  size_t cn = 0;
  int rc = cred_flow_response(c, &once, r->head.data, r->head.len, 1, &clean, &cn);
  creds_stream_free(&once);
  ss_buf_wipe(&r->head);
  ss_buf_init(&r->head, HR_MAX_HEAD);
  if (rc == 0) rc = out(c, r, clean, cn, emit);
  free(clean);
  return rc;
}

size_t resp_scrub_feed(proxy_conn *c, resp_scrub *r, hr_parser *p, const char *data, size_t n, int *ended,
                       resp_emit emit) {
  *ended = p->phase == HR_DONE;
  char *body = n ? malloc(n) : NULL;
  if (n && !body) return conn_close(c), (size_t)-1;
  size_t i = 0;
  while (i < n && p->phase != HR_DONE) {
    hr_phase was = p->phase;
    unsigned heads = p->heads;
    size_t bl = 0, k = hr_step(p, data + i, n - i, body, &bl);
    if (k == (size_t)-1 || (was == HR_HEAD && ss_buf_append(&r->head, data + i, k) != SS_BUF_OK)) {
      free(body);
      return conn_close(c), (size_t)-1;
    }
    i += k;
    int rc = 0;
    if (was == HR_HEAD && (p->heads != heads || p->phase != HR_HEAD)) rc = head_out(c, r, p, emit);
    else if (was != HR_HEAD && p->unread) rc = refuse(c, r, "response_unreadable", "has chunked framing the proxy cannot read");
    else if (was != HR_HEAD) rc = body_out(c, r, body, bl, p->phase == HR_DONE, p->phase == HR_DONE, emit);
    if (rc != 0) {
      free(body);
      return (size_t)-1;
    }
  }
  if (body) memset(body, 0, n);
  free(body);
  if (p->phase == HR_DONE) {
    *ended = 1;
    hr_free(p);
  }
  return i;
}

int resp_scrub_end(proxy_conn *c, resp_scrub *r, hr_parser *p, resp_emit emit) {
  if (p->phase == HR_HEAD || p->phase == HR_DONE) return 0; /* a head cut short is never passed on */
  return body_out(c, r, NULL, 0, 1, 0, emit); /* a cut chunked answer stays cut: no last chunk */
}
