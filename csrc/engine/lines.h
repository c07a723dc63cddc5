#ifndef SANDSTACK_ENGINE_LINES_H
#define SANDSTACK_ENGINE_LINES_H
/* The line reader for streamed responses (/events: one JSON document per line, delivered in
 * pieces that split lines anywhere). Bytes go in as curl hands them over; complete lines come
 * out in order, without the "\n" (and a "\r" before it). The budget bounds the bytes held:
 * when a piece does not fit, the caller either waits for lines to be taken (backpressure) or,
 * when no complete line is held, knows a single line is longer than the budget. Pure. */
#include <stddef.h>

#include "util/buf.h"

enum { SSE_LINES_OK = 0, SSE_LINES_FULL = 1, SSE_LINES_NOMEM = 2 };

typedef struct sse_lines {
  ss_buf buf;
  size_t taken;   /* bytes of buf handed out by the last next(), dropped lazily */
  size_t scanned; /* bytes of buf known to hold no '\n' */
} sse_lines;

void sse_lines_init(sse_lines *r, size_t budget);
int sse_lines_feed(sse_lines *r, const char *p, size_t n);
/* 1 and the next line (valid until the next call on r), or 0 when no complete line is held. */
int sse_lines_next(sse_lines *r, const char **line, size_t *len);
/* 1 when a complete line is held (so a FULL buffer will drain). */
int sse_lines_ready(sse_lines *r);
/* The bytes after the last newline (an unterminated last line at end of stream). */
size_t sse_lines_rest(sse_lines *r, const char **rest);
void sse_lines_free(sse_lines *r);

#endif
