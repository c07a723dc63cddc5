/* libFuzzer target for the request reader used inside inspected TLS connections
 * (csrc/proxy/parse/inspect_request.c), fed as the proxy feeds it: decrypted bytes arriving in pieces
 * (the first input byte picks the piece size), the scan position carried between calls.
 * Checks: no crash; a piecewise read ends as a whole read; an admitted request's path is
 * origin-form ("/..."), inside the target; its path length without the query is within it;
 * the Host check passes (0) only when every name the request gives (Host, absolute-form
 * authority) is the CONNECT host:port, compared here without the library (case, one trailing
 * dot, 443 for no port); and the head the proxy would send upstream carries exactly one Host
 * (the CONNECT host's), ends with "Connection: close" exactly when the client will send no other
 * request (HTTP/1.0 or its own Connection: close), carries one "Transfer-Encoding: chunked"
 * exactly when the body is chunked (the client's own was dropped as hop-by-hop) and never with
 * a Content-Length, ends in CRLFCRLF, and holds neither the
 * session token nor a method or URL override on any header line. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/proxy_fuzz_common.h"
#include "proxy/parse/inspect_request.h"

#define TOKEN "tok-fuzz-0123456789"
#define HOST "api.example.test"
#define PORT 8443

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* a (n bytes) names HOST:PORT: "api.example.test[.]:8443" in any case (no port is 443) */
static int names_connect_host(const char *a, size_t n) {
  static const char *const forms[] = {HOST ":8443", HOST ".:8443"};
  for (size_t f = 0; f < 2; f++) {
    size_t fl = strlen(forms[f]), i = 0;
    if (fl != n) continue;
    while (i < n && lower((unsigned char)a[i]) == forms[f][i]) i++;
    if (i == n) return 1;
  }
  return 0;
}

/* what ir_host_refusal answered, judged by the request's own bytes */
static void check_host(const ir_request *r) {
  const char *why = NULL;
  int st = ir_host_refusal(r, HOST, PORT, &why);
  if (st != 0 && st != 400 && st != 421) abort();
  if (st != 0 && (!why || !*why)) abort();
  if (st != 0) return;
  int n = 0;
  const ph_header *h = ph_find(&r->head, "host", &n);
  if (n > 1 || (h && !names_connect_host(h->value, h->value_len))) abort();
  if (r->authority && !names_connect_host(r->authority, r->authority_len)) abort();
}

static int line_named(const char *headers, size_t hl, const char *name) {
  size_t nl = strlen(name);
  for (const char *p = headers; p < headers + hl;) {
    const char *eol = memmem(p, hl - (size_t)(p - headers), "\r\n", 2);
    if (!eol) break;
    if ((size_t)(eol - p) > nl && p[nl] == ':') {
      size_t i = 0;
      while (i < nl && lower((unsigned char)p[i]) == name[i]) i++;
      if (i == nl) return 1;
    }
    p = eol + 2;
  }
  return 0;
}

static size_t count(const char *s, size_t n, const char *needle) {
  size_t k = 0, nl = strlen(needle);
  for (const char *p = s; (p = memmem(p, n - (size_t)(p - s), needle, nl)) != NULL; p += nl) k++;
  return k;
}

static void check_outbound(const ir_request *r) {
  size_t n = 0;
  char *out = ir_outbound_head(r, HOST, PORT, TOKEN, strlen(TOKEN), 1, &n);
  if (!out) return;
  if (n < 4 || memcmp(out + n - 4, "\r\n\r\n", 4) != 0) abort();
  const char *first_eol = memmem(out, n, "\r\n", 2);
  if (!first_eol) abort();
  const char *headers = first_eol + 2;
  size_t hl = n - (size_t)(headers - out);
  if (memcmp(headers, "Host: api.example.test:8443\r\n", 29) != 0) abort();
  if (count(headers, hl, "\r\nHost:") + count(headers, hl, "\r\nhost:") != 0) abort(); /* only the first */
  if (memmem(headers, hl, TOKEN, strlen(TOKEN))) abort();
  static const char *const overrides[] = {"x-http-method-override", "x-http-method", "x-method-override",
                                          "x-original-url", "x-rewrite-url"};
  for (size_t i = 0; i < sizeof overrides / sizeof overrides[0]; i++)
    if (line_named(headers, hl, overrides[i])) abort();
  int closes = n >= 23 && memcmp(out + n - 23, "\r\nConnection: close\r\n\r\n", 23) == 0;
  if (closes == r->keep_alive) abort();
  if (r->keep_alive && (r->head.minor != 1 || ir_connection_close(&r->head))) abort();
  int te = line_named(headers, hl, "transfer-encoding");
  if (te != r->chunked) abort();
  if (r->chunked && line_named(headers, hl, "content-length")) abort();
  if (strnlen(out, n) != n) abort(); /* no NUL: values are checked by the parser */
  free(out);
}

static void check_request(const char *s, size_t n, const ir_request *r) {
  if (r->head.head_len > n || r->path_len == 0 || r->path[0] != '/') abort();
  if (r->path_noquery_len > r->path_len || memchr(r->path, '?', r->path_noquery_len)) abort();
  const char *t = r->head.target, *t_end = t + r->head.target_len;
  int empty_abs_path = r->authority && r->path_len == 1 && r->authority + r->authority_len == t_end;
  if (!empty_abs_path && (r->path < t || r->path + r->path_len > t_end)) abort(); /* "https://h": "/" */
  if (t < s || t_end > s + r->head.head_len) abort();
  if (r->authority && (r->authority < t || r->authority + r->authority_len > t_end)) abort();
  check_host(r);
  check_outbound(r);
}

/* the piecewise read: scan position and result carried between reads */
typedef struct {
  ph_limits lim;
  size_t scanned;
  ir_request req;
  ir_status status;
} piecewise;

static int read_step(const char *s, size_t have, void *ctx) {
  piecewise *pw = ctx;
  pw->status = ir_read(s, have, &pw->lim, &pw->scanned, &pw->req);
  return pw->status == IR_INCOMPLETE;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pf_input in;
  if (!pf_input_split(data, size, &in)) return 0;
  ph_limits lim = pf_limits();
  ir_request whole;
  size_t scanned = 0;
  ir_status ws = ir_read(in.s, in.n, &lim, &scanned, &whole);
  if (ws == IR_READY) check_request(in.s, in.n, &whole);
  piecewise pw = {.lim = lim, .status = IR_INCOMPLETE};
  size_t have = pf_feed_pieces(&in, read_step, &pw);
  if (pw.status == IR_READY) {
    check_request(in.s, have, &pw.req);
    if (ws != IR_READY || pw.req.head.head_len != whole.head.head_len || pw.req.body_len != whole.body_len) abort();
  }
  if (ir_status_text(ws) == NULL) abort();
  return 0;
}
