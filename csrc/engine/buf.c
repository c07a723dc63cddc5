#include "engine/buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void sse_buf_init(sse_buf *b, size_t limit) {
  memset(b, 0, sizeof *b);
  b->limit = limit;
}

int sse_buf_append(sse_buf *b, const void *p, size_t n) {
  if (n > b->limit - b->len) return SSE_BUF_OVER;
  if (b->len + n + 1 > b->cap) {
    /* Doubling keeps appends amortised O(1); the cap never exceeds limit + 1. */
    size_t want = b->cap ? b->cap : 256;
    while (want < b->len + n + 1) want = want > (SIZE_MAX / 2) ? SIZE_MAX : want * 2;
    if (want > b->limit + 1) want = b->limit + 1;
    char *d = realloc(b->data, want);
    if (!d) return SSE_BUF_NOMEM;
    b->data = d;
    b->cap = want;
  }
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
  return SSE_BUF_OK;
}

void sse_buf_consume(sse_buf *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
  } else {
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
  }
  if (b->data) b->data[b->len] = '\0';
}

void sse_buf_free(sse_buf *b) {
  free(b->data);
  sse_buf_init(b, b->limit);
}
