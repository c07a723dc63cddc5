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

#include "fuzz/proxy_fuzz_common.h"
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
