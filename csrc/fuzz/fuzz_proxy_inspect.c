/* libFuzzer target for the request reader used inside inspected TLS connections
 * (csrc/proxy/inspect_request.c), fed as the proxy feeds it: decrypted bytes arriving in pieces
 * (the first input byte picks the piece size), the scan position carried between calls.
 * Checks: no crash; a piecewise read ends as a whole read; an admitted request is origin-form;
 * its path length without the query is within the target; and the head the proxy would send
 * upstream carries exactly one Host (the CONNECT host's), ends with "Connection: close" and
 * CRLFCRLF, and holds the session token on no header line (the request line is the client's). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/inspect_request.h"

#define TOKEN "tok-fuzz-0123456789"

static size_t count(const char *s, size_t n, const char *needle) {
  size_t k = 0, nl = strlen(needle);
  for (const char *p = s; (p = memmem(p, n - (size_t)(p - s), needle, nl)) != NULL; p += nl) k++;
  return k;
}

static void check_outbound(const ir_request *r) {
  size_t n = 0;
  char *out = ir_outbound_head(r, "api.example.test", 8443, TOKEN, strlen(TOKEN), &n);
  if (!out) return;
  if (n < 4 || memcmp(out + n - 4, "\r\n\r\n", 4) != 0) abort();
  const char *first_eol = memmem(out, n, "\r\n", 2);
  if (!first_eol) abort();
  const char *headers = first_eol + 2;
  size_t hl = n - (size_t)(headers - out);
  if (memcmp(headers, "Host: api.example.test:8443\r\n", 29) != 0) abort();
  if (count(headers, hl, "\r\nHost:") + count(headers, hl, "\r\nhost:") != 0) abort(); /* only the first */
  if (memmem(headers, hl, TOKEN, strlen(TOKEN))) abort();
  if (n < 23 || memcmp(out + n - 23, "\r\nConnection: close\r\n\r\n", 23) != 0) abort();
  if (strnlen(out, n) != n) abort(); /* no NUL: values are checked by the parser */
  free(out);
}

static void check_request(const char *s, size_t n, const ir_request *r) {
  if (r->head.head_len > n || r->path_len == 0 || r->path[0] != '/') abort();
  if (r->path_noquery_len > r->path_len || memchr(r->path, '?', r->path_noquery_len)) abort();
  if (r->path < s || r->path + r->path_len > s + r->head.head_len) abort();
  check_outbound(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t piece = (size_t)data[0] % 64 + 1;
  const char *s = (const char *)data + 1;
  size_t n = size - 1;
  ph_limits lim = {256, 2048, 20};
  ir_request whole, part;
  size_t scanned = 0;
  ir_status ws = ir_read(s, n, &lim, &scanned, &whole);
  if (ws == IR_READY) check_request(s, n, &whole);
  ir_status ps = IR_INCOMPLETE;
  size_t have = 0;
  scanned = 0;
  while (have < n && ps == IR_INCOMPLETE) {
    have = have + piece < n ? have + piece : n;
    ps = ir_read(s, have, &lim, &scanned, &part);
  }
  if (ps == IR_READY) {
    check_request(s, have, &part);
    if (ws != IR_READY || part.head.head_len != whole.head.head_len || part.body_len != whole.body_len) abort();
  }
  if (ir_status_text(ws) == NULL) abort();
  return 0;
}
