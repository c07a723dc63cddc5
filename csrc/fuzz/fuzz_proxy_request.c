/* libFuzzer target for the proxy's request-head parser and target splitters
 * (csrc/proxy/http_head.c), fed the way the proxy feeds it: the same bytes arriving in pieces
 * (the first input byte picks the piece size), the scan position carried between calls.
 * Checks: no crash; a piecewise parse ends exactly as a whole parse; a parsed head lies inside
 * the input and ends in CRLFCRLF; every header name is a token without ':' and no value holds
 * CR, LF or NUL; split hosts are non-empty, without '@', '[' or ':'; ports are 1..65535. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/proxy_fuzz_common.h"
#include "proxy/http_head.h"

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
