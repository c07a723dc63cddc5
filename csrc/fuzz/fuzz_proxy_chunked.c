/* libFuzzer target for the chunked-body validator (csrc/proxy/parse/http_chunked.c), fed in pieces
 * as the proxy feeds it (the first input byte picks the piece size and the mode). Checks: no
 * crash; the piecewise run ends where a whole run ends, with the same result; what it accepted
 * (HC_END) is exactly what a separate, simple reading of RFC 9112 7.1 accepts as one whole
 * chunked body, and the data bytes sum to the sizes it declared. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/parse/http_chunked.h"

static size_t run(hc_mode mode, const char *s, size_t n, size_t piece, hc_result *res) {
  hc_decoder d;
  hc_init(&d, mode);
  size_t used = 0;
  *res = HC_MORE;
  while (used < n && *res == HC_MORE) {
    size_t k = n - used < piece ? n - used : piece, got = hc_feed(&d, s + used, k, res);
    if (got > k || (*res == HC_MORE && got != k)) abort();
    used += got;
  }
  return used;
}

static int hexv(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* the reference: s[0..n) must be exactly one chunked body (request mode: no trailer lines) */
static int whole_body(hc_mode mode, const char *s, size_t n) {
  size_t i = 0;
  for (;;) {
    unsigned long long size = 0;
    int digits = 0;
    while (i < n && hexv(s[i]) >= 0) {
      if (++digits > HC_MAX_SIZE_DIGITS) return 0;
      size = size * 16 + (unsigned)hexv(s[i++]);
    }
    if (!digits) return 0;
    const char *cr = memchr(s + i, '\r', n - i);
    if (!cr || (size_t)(cr - s) + 1 >= n || cr[1] != '\n') return 0;
    if (cr != s + i && s[i] != ';') return 0;
    for (const char *p = s + i; p < cr; p++)
      if (*p != '\t' && (*p < 0x20 || *p == 0x7f)) return 0;
    i = (size_t)(cr - s) + 2;
    if (!size) break;
    if (size > n - i || n - i - size < 2 || s[i + size] != '\r' || s[i + size + 1] != '\n') return 0;
    i += size + 2;
  }
  for (;;) { /* trailer lines, then CRLF */
    if (n - i >= 2 && s[i] == '\r' && s[i + 1] == '\n') return i + 2 == n;
    if (mode == HC_REQUEST) return 0;
    const char *cr = memchr(s + i, '\r', n - i);
    if (!cr || (size_t)(cr - s) + 1 >= n || cr[1] != '\n') return 0;
    for (const char *p = s + i; p < cr; p++)
      if (*p != '\t' && (*p < 0x20 || *p == 0x7f)) return 0;
    i = (size_t)(cr - s) + 2;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t piece = (size_t)(data[0] & 63) + 1;
  hc_mode mode = data[0] & 64 ? HC_RESPONSE : HC_REQUEST;
  const char *s = (const char *)data + 1;
  size_t n = size - 1;
  hc_result whole_res, piece_res;
  size_t whole = run(mode, s, n, n ? n : 1, &whole_res), pieces = run(mode, s, n, piece, &piece_res);
  if (whole != pieces || whole_res != piece_res) abort();
  if (whole_res == HC_END && !whole_body(mode, s, whole)) abort(); /* accepted only a real body */
  if (whole_res != HC_END && whole_body(mode, s, n)) abort();      /* and every real body is accepted */
  return 0;
}
