/* libFuzzer target for the proxy's request-head parser and target splitters
 * (csrc/proxy/http_head.c), fed the way the proxy feeds it: the same bytes arriving in pieces
 * (the first input byte picks the piece size), the scan position carried between calls.
 * Checks: no crash; a piecewise parse ends exactly as a whole parse; a parsed head lies inside
 * the input and ends in CRLFCRLF; every header name is a token without ':' and no value holds
 * CR, LF or NUL; split hosts are non-empty, without '@', '[' or ':'; ports are 1..65535. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t piece = (size_t)data[0] % 64 + 1;
  const char *s = (const char *)data + 1;
  size_t n = size - 1;
  ph_limits lim = {256, 2048, 20};
  ph_request whole, part;
  size_t scanned = 0;
  ph_status ws = ph_parse(s, n, &lim, &scanned, &whole);
  if (ws == PH_DONE) check_request(s, n, &whole);
  /* piecewise: stop at the first answer other than "incomplete" */
  ph_status ps = PH_INCOMPLETE;
  size_t have = 0;
  scanned = 0;
  while (have < n && ps == PH_INCOMPLETE) {
    have = have + piece < n ? have + piece : n;
    ps = ph_parse(s, have, &lim, &scanned, &part);
  }
  if (ps == PH_DONE) {
    check_request(s, have, &part);
    if (ws != PH_DONE || part.head_len != whole.head_len || part.nheaders != whole.nheaders) abort();
  } else if (ps != PH_INCOMPLETE && ws == PH_DONE && ps != PH_LINE_TOO_LONG && ps != PH_HEAD_TOO_LARGE) {
    abort(); /* a prefix was malformed but the whole parsed */
  }
  return 0;
}
