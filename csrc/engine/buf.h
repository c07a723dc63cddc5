#ifndef SANDSTACK_ENGINE_BUF_H
#define SANDSTACK_ENGINE_BUF_H
/* A growable byte buffer with a hard limit: every byte the engine client keeps from the wire
 * goes through one of these, so no response can grow memory past the caller's budget. */
#include <stddef.h>

typedef struct sse_buf {
  char *data; /* NUL-terminated for convenience (the NUL is not counted in len) */
  size_t len, cap;
  size_t limit; /* len never exceeds it */
} sse_buf;

enum { SSE_BUF_OK = 0, SSE_BUF_OVER = -1, SSE_BUF_NOMEM = -2 };

void sse_buf_init(sse_buf *b, size_t limit);
/* Appends all n bytes or none: SSE_BUF_OVER when len + n would pass the limit. */
int sse_buf_append(sse_buf *b, const void *p, size_t n);
/* Drops the first n bytes (n <= len). */
void sse_buf_consume(sse_buf *b, size_t n);
void sse_buf_free(sse_buf *b);

#endif
