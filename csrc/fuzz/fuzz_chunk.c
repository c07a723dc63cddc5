/* libFuzzer target for the streamed-line reader (csrc/engine/lines.c), driven the way the curl
 * write callback drives it: pieces go in, a FULL buffer with complete lines is drained
 * (backpressure) and the piece retried, a FULL buffer without one is the over-budget stop.
 * Checks: lines come out in order and, rejoined, are exactly the input up to the stop. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/lines.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t piece = (size_t)data[0] % 33 + 1;
  size_t budget = (size_t)data[1] % 96 + 1;
  const char *s = (const char *)data + 2;
  size_t n = size - 2;

  sse_lines r;
  sse_lines_init(&r, budget);
  char *joined = malloc(n + 1);
  size_t jlen = 0, fed = 0;
  int stopped = 0;
  const char *line;
  size_t len;
  for (size_t off = 0; off < n && !stopped;) {
    size_t k = n - off < piece ? n - off : piece;
    int st = sse_lines_feed(&r, s + off, k);
    if (st == SSE_LINES_OK) {
      off += k;
      fed = off;
      continue;
    }
    if (st != SSE_LINES_FULL) abort();
    if (!sse_lines_ready(&r)) {
      stopped = 1; /* a line longer than the budget */
      break;
    }
    while (sse_lines_next(&r, &line, &len)) {
      if (memchr(line, '\n', len)) abort();
      memcpy(joined + jlen, line, len);
      jlen += len;
      joined[jlen++] = '\n';
    }
  }
  while (sse_lines_next(&r, &line, &len)) {
    memcpy(joined + jlen, line, len);
    jlen += len;
    joined[jlen++] = '\n';
  }
  const char *rest;
  size_t rlen = sse_lines_rest(&r, &rest);
  if (jlen + rlen > fed) abort();
  /* Rejoined lines plus the rest equal the input fed, except for "\r" dropped before "\n". */
  size_t i = 0, j = 0;
  while (j < jlen) {
    if (i >= fed) abort();
    if (s[i] == joined[j]) {
      i++, j++;
    } else if (s[i] == '\r' && i + 1 < fed && s[i + 1] == '\n' && joined[j] == '\n') {
      i++;
    } else {
      abort();
    }
  }
  if (fed - i != rlen || (rlen && memcmp(s + i, rest, rlen) != 0)) abort();
  free(joined);
  sse_lines_free(&r);
  return 0;
}
