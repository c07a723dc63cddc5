/* Reading a request inside an inspected connection, and rewriting its head (see the header). */
#include "proxy/parse/inspect_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ir_connection_close(const ph_request *h) {
  for (size_t i = 0; i < h->nheaders; i++) {
    const ph_header *x = &h->headers[i];
    if (!ph_name_is(x, "connection")) continue;
    for (size_t k = 0; k < x->value_len;) { /* a comma-separated list of options */
      while (k < x->value_len && (x->value[k] == ',' || x->value[k] == ' ' || x->value[k] == '\t')) k++;
      size_t s = k;
      while (k < x->value_len && x->value[k] != ',' && x->value[k] != ' ' && x->value[k] != '\t') k++;
      if (ph_name_is(&(ph_header){x->value + s, NULL, k - s, 0}, "close")) return 1;
    }
  }
  return 0;
}

ir_status ir_read(const char *buf, size_t len, const ph_limits *lim, size_t *scanned, ir_request *out) {
  memset(out, 0, sizeof *out);
  switch (ph_parse(buf, len, lim, scanned, &out->head)) {
  case PH_INCOMPLETE: return IR_INCOMPLETE;
  case PH_BAD: return IR_BAD;
  case PH_LINE_TOO_LONG: return IR_LINE_TOO_LONG;
  case PH_HEAD_TOO_LARGE: return IR_HEAD_TOO_LARGE;
  case PH_BAD_VERSION: return IR_BAD_VERSION;
  case PH_DONE: break;
  }
  const ph_request *h = &out->head;
  if (h->target_len > 0 && h->target[0] == '/') {
    if (memchr(h->target, '#', h->target_len)) return IR_BAD;
    out->path = h->target;
    out->path_len = h->target_len;
  } else if (ph_absolute_split(h->target, h->target_len, "https://", &out->authority, &out->authority_len, &out->path,
                               &out->path_len) != 0) {
    return IR_NOT_ORIGIN;
  }
  int te = 0, cl = ph_content_length(h, &out->body_len);
  const ph_header *t = ph_find(h, "transfer-encoding", &te);
  if (cl < 0 || (te && cl)) return IR_BAD_LENGTH; /* both: which one frames the body is what smuggling exploits */
  if (te && (te > 1 || !ph_name_is(&(ph_header){t->value, NULL, t->value_len, 0}, "chunked"))) return IR_CHUNKED;
  out->chunked = te;
  /* After a body the connection is not reused (CL.0): an origin that ignores the body of this
   * method (GET, DELETE, a handler that does not read it) would read it as a next request that
   * the policy never checked. The outbound head then says Connection: close. */
  out->keep_alive = h->minor == 1 && !ir_connection_close(h) && !out->chunked && out->body_len == 0;
  const char *q = memchr(out->path, '?', out->path_len);
  out->path_noquery_len = q ? (size_t)(q - out->path) : out->path_len;
  return IR_READY;
}

const char *ir_status_text(ir_status s) {
  switch (s) {
  case IR_INCOMPLETE: return "incomplete";
  case IR_READY: return "ready";
  case IR_BAD: return "malformed request head";
  case IR_LINE_TOO_LONG: return "the request line is longer than the proxy accepts";
  case IR_HEAD_TOO_LARGE: return "the request headers are larger than the proxy accepts";
  case IR_BAD_VERSION: return "only HTTP/1.0 and HTTP/1.1 are served";
  case IR_NOT_ORIGIN:
    return "inside an inspected connection only origin-form (\"/path\") and https:// absolute-form targets are served";
  case IR_CHUNKED: return "the only Transfer-Encoding accepted is one \"chunked\"";
  case IR_BAD_LENGTH: return "malformed or repeated Content-Length, or Content-Length beside Transfer-Encoding";
  }
  return "unknown";
}

int ir_host_refusal(const ir_request *r, const char *host, int port, const char **why) {
  return ph_host_refusal(&r->head, r->authority, r->authority_len, host, port, 443, why);
}

char *ir_outbound_head(const ir_request *r, const char *host, int port, const char *token, size_t token_len,
                       int identity, size_t *out_len) {
  const ph_request *h = &r->head;
  /* each line is at most its input plus one blank after the colon; then Host and Connection */
  size_t cap = h->head_len + h->nheaders + strlen(host) + 200, n = 0;
  char *out = malloc(cap);
  if (!out) return NULL;
  n += (size_t)snprintf(out, cap, "%.*s %.*s HTTP/1.1\r\nHost: %s", (int)h->method_len, h->method, (int)r->path_len,
                        r->path, host);
  if (port != 443) n += (size_t)snprintf(out + n, cap - n, ":%d", port);
  n += (size_t)snprintf(out + n, cap - n, "\r\n");
  for (size_t i = 0; i < h->nheaders; i++) {
    const ph_header *x = &h->headers[i];
    if (ph_dropped(x, token, token_len)) continue;
    if (identity && ph_name_is(x, "accept-encoding")) continue;
    n += (size_t)snprintf(out + n, cap - n, "%.*s: %.*s\r\n", (int)x->name_len, x->name, (int)x->value_len, x->value);
  }
  n += (size_t)snprintf(out + n, cap - n, "%s%s%s\r\n", identity ? "Accept-Encoding: identity\r\n" : "",
                        r->chunked ? "Transfer-Encoding: chunked\r\n" : "", r->keep_alive ? "" : "Connection: close\r\n");
  *out_len = n;
  return out;
}
