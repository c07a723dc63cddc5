/* libFuzzer target for the proxy's request-head parser and target splitters
 * (csrc/proxy/parse/http_head.c), fed the way the proxy feeds it: the same bytes arriving in pieces
 * (the first input byte picks the piece size), the scan position carried between calls.
 * Checks: no crash; a piecewise parse ends exactly as a whole parse; a parsed head lies inside
 * the input and ends in CRLFCRLF; every header name is a token without ':' and no value holds
 * CR, LF or NUL; split hosts are non-empty, without '@', '[' or ':'; ports are 1..65535; the
 * Host check (ph_host_refusal against "a.test":80) passes only for a Host that is that name,
 * judged here without the library (case, one trailing dot, ":80" or no port); and ph_dropped
 * drops every method or URL override field and every field carrying the token. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/proxy_fuzz_common.h"
#include "proxy/parse/http_head.h"

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static int equal_nocase(const char *a, size_t n, const char *b) {
  if (strlen(b) != n) return 0;
  for (size_t i = 0; i < n; i++)
    if (lower((unsigned char)a[i]) != b[i]) return 0;
  return 1;
}

static void check_host(const ph_request *r) {
  const char *why = NULL;
  int st = ph_host_refusal(r, NULL, 0, "a.test", 80, 80, &why);
  if (st != 0 && st != 400 && st != 421) abort();
  if (st != 0 && (!why || !*why)) abort();
  int n = 0;
  const ph_header *h = ph_find(r, "host", &n);
  if (st != 0 || !h) return;
  static const char *const same[] = {"a.test", "a.test.", "a.test:80", "a.test.:80"};
  int ok = 0;
  for (size_t i = 0; i < 4; i++) ok |= equal_nocase(h->value, h->value_len, same[i]);
  if (n != 1 || !ok) abort();
}

static void check_dropped(const ph_request *r) {
  static const char token[] = "tok";
  static const char *const overrides[] = {"x-http-method-override", "x-http-method", "x-method-override",
                                          "x-original-url", "x-rewrite-url"};
  for (size_t i = 0; i < r->nheaders; i++) {
    const ph_header *h = &r->headers[i];
    int kept = !ph_dropped(h, token, 3);
    for (size_t k = 0; k < 5; k++)
      if (kept && equal_nocase(h->name, h->name_len, overrides[k])) abort();
    if (kept && (memmem(h->name, h->name_len, token, 3) || memmem(h->value, h->value_len, token, 3))) abort();
  }
}

static void check_request(const char *s, size_t n, const ph_request *r) {
  if (r->head_len < 4 || r->head_len > n || memcmp(s + r->head_len - 4, "\r\n\r\n", 4) != 0) abort();
  if (r->method < s || r->target + r->target_len > s + r->head_len || r->method_len == 0) abort();
  for (size_t i = 0; i < r->nheaders; i++) {
    const ph_header *h = &r->headers[i];
    if (h->name_len == 0 || memchr(h->name, ':', h->name_len)) abort();
    for (size_t k = 0; k < h->value_len; k++)
      if (h->value[k] == '\r' || h->value[k] == '\n' || h->value[k] == '\0') abort();
  }
  char host[256];
  int port = 0;
  const char *path;
  size_t pl;
  if (ph_authority(r->target, r->target_len, host, &port) == 0 || ph_absolute(r->target, r->target_len, host, &port, &path, &pl) == 0) {
    if (!host[0] || strpbrk(host, "@[:") || port < 1 || port > 65535) abort();
  }
  unsigned long long cl;
  ph_content_length(r, &cl);
  check_host(r);
  check_dropped(r);
}

/* the piecewise parse: scan position and result carried between reads */
typedef struct {
  ph_limits lim;
  size_t scanned;
  ph_request req;
  ph_status status;
} piecewise;

static int parse_step(const char *s, size_t have, void *ctx) {
  piecewise *pw = ctx;
  pw->status = ph_parse(s, have, &pw->lim, &pw->scanned, &pw->req);
  return pw->status == PH_INCOMPLETE;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pf_input in;
  if (!pf_input_split(data, size, &in)) return 0;
  ph_limits lim = pf_limits();
  ph_request whole;
  size_t scanned = 0;
  ph_status ws = ph_parse(in.s, in.n, &lim, &scanned, &whole);
  if (ws == PH_DONE) check_request(in.s, in.n, &whole);
  /* piecewise: stop at the first answer other than "incomplete" */
  piecewise pw = {.lim = lim, .status = PH_INCOMPLETE};
  size_t have = pf_feed_pieces(&in, parse_step, &pw);
  ph_status ps = pw.status;
  if (ps == PH_DONE) {
    check_request(in.s, have, &pw.req);
    if (ws != PH_DONE || pw.req.head_len != whole.head_len || pw.req.nheaders != whole.nheaders) abort();
  } else if (ps != PH_INCOMPLETE && ws == PH_DONE && ps != PH_LINE_TOO_LONG && ps != PH_HEAD_TOO_LARGE) {
    abort(); /* a prefix was malformed but the whole parsed */
  }
  return 0;
}
