/* libFuzzer target for response framing (csrc/proxy/parse/http_response.c), fed in pieces as the
 * proxy feeds it (first input byte: piece size, and whether the request was HEAD). Checks: no
 * crash and no leak; the piecewise run ends at the same byte as a whole run, with the same
 * status and keep-alive verdict; a response may keep the connection alive only when its head
 * was read as HTTP/1.1 with a Content-Length, chunked, or no body by rule (HEAD, 204, 304), and
 * never with "Connection: close" in it; a response that ended was at least its head. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxy/parse/http_response.h"

typedef struct {
  size_t used;
  int ended, status, keep_alive;
} outcome;

static outcome run(const char *s, size_t n, size_t piece, int head_request) {
  hr_parser p;
  memset(&p, 0, sizeof p);
  hr_begin(&p, head_request);
  outcome o = {0, 0, 0, 0};
  while (o.used < n && !o.ended) {
    size_t k = n - o.used < piece ? n - o.used : piece;
    size_t got = hr_feed(&p, s + o.used, k, &o.ended);
    if (got == (size_t)-1) abort(); /* out of memory: not in a fuzz run */
    if (got > k || (!o.ended && got != k)) abort();
    o.used += got;
  }
  o.status = p.status;
  o.keep_alive = p.keep_alive && o.ended;
  hr_free(&p);
  return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t piece = (size_t)(data[0] & 127) + 1;
  int head_request = data[0] >> 7;
  const char *s = (const char *)data + 1;
  size_t n = size - 1;
  outcome whole = run(s, n, n ? n : 1, head_request), parts = run(s, n, piece, head_request);
  if (whole.used != parts.used || whole.ended != parts.ended || whole.status != parts.status ||
      whole.keep_alive != parts.keep_alive)
    abort();
  if (!whole.ended) return 0;
  const char *end = memmem(s, whole.used, "\r\n\r\n", 4);
  if (!end) abort(); /* ended without a whole head */
  if (!whole.keep_alive || s[9] == '1') return 0; /* below: a final response with no interim one before it */
  if (memcmp(s, "HTTP/1.1 ", 9) != 0) abort();
  for (const char *l = s; l < end;) { /* "Connection: close" in its head forbids reuse */
    const char *eol = memmem(l, (size_t)(end - l) + 2, "\r\n", 2);
    if ((size_t)(eol - l) == 17 && strncasecmp(l, "connection: close", 17) == 0) abort();
    l = eol + 2;
  }
  return 0;
}
