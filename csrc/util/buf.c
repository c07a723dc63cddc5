/* The bounded buffer (see buf.h). */
#include "util/buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void ss_buf_init(ss_buf *b, size_t limit) {
  memset(b, 0, sizeof *b);
  b->limit = limit;
}

size_t ss_buf_room(const ss_buf *b) { return b->limit > b->len ? b->limit - b->len : 0; }

int ss_buf_reserve(ss_buf *b, size_t n) {
  if (n > ss_buf_room(b)) return SS_BUF_OVER;
  if (b->len + n + 1 > b->cap) {
    /* Doubling keeps appends amortised O(1); the cap never exceeds limit + 1. */
    size_t want = b->cap ? b->cap : 256;
    while (want < b->len + n + 1) want = want > (SIZE_MAX / 2) ? SIZE_MAX : want * 2;
    if (want > b->limit + 1) want = b->limit + 1;
    char *d = realloc(b->data, want);
    if (!d) return SS_BUF_NOMEM;
    b->data = d;
    b->cap = want;
  }
  return SS_BUF_OK;
}

int ss_buf_append(ss_buf *b, const void *p, size_t n) {
  int rc = ss_buf_reserve(b, n);
  if (rc != SS_BUF_OK) return rc;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
  return SS_BUF_OK;
}

void ss_buf_consume(ss_buf *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
  } else {
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
  }
  if (b->data) b->data[b->len] = '\0';
}

char *ss_buf_take(ss_buf *b, size_t *len) {
  char *d = b->data;
  if (len) *len = b->len;
  ss_buf_init(b, b->limit);
  return d;
}

void ss_buf_wipe(ss_buf *b) {
  if (b->data) memset(b->data, 0, b->cap);
  ss_buf_free(b);
}

void ss_buf_free(ss_buf *b) {
  free(b->data);
  ss_buf_init(b, b->limit);
}
