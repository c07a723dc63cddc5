#include "engine/lines.h"

#include <string.h>

void sse_lines_init(sse_lines *r, size_t budget) {
  memset(r, 0, sizeof *r);
  ss_buf_init(&r->buf, budget);
}

static void drop_taken(sse_lines *r) {
  if (!r->taken) return;
  ss_buf_consume(&r->buf, r->taken);
  r->scanned = r->scanned > r->taken ? r->scanned - r->taken : 0;
  r->taken = 0;
}

int sse_lines_feed(sse_lines *r, const char *p, size_t n) {
  drop_taken(r);
  int rc = ss_buf_append(&r->buf, p, n);
  if (rc == SS_BUF_OVER) return SSE_LINES_FULL;
  if (rc != SS_BUF_OK) return SSE_LINES_NOMEM;
  return SSE_LINES_OK;
}

/* Offset of the first '\n' or -1; remembers how far it looked so a long line is scanned once. */
static long find_newline(sse_lines *r) {
  const char *nl = r->buf.len > r->scanned
                       ? memchr(r->buf.data + r->scanned, '\n', r->buf.len - r->scanned)
                       : NULL;
  if (!nl) {
    r->scanned = r->buf.len;
    return -1;
  }
  return (long)(nl - r->buf.data);
}

int sse_lines_next(sse_lines *r, const char **line, size_t *len) {
  drop_taken(r);
  long at = find_newline(r);
  if (at < 0) return 0;
  size_t l = (size_t)at;
  if (l > 0 && r->buf.data[l - 1] == '\r') l--;
  r->buf.data[l] = '\0'; /* the line is a C string too; the '\n' or '\r' slot is ours */
  *line = r->buf.data;
  *len = l;
  r->taken = (size_t)at + 1;
  r->scanned = r->taken;
  return 1;
}

int sse_lines_ready(sse_lines *r) {
  drop_taken(r);
  return find_newline(r) >= 0;
}

size_t sse_lines_rest(sse_lines *r, const char **rest) {
  drop_taken(r);
  *rest = r->buf.data;
  return r->buf.len;
}

void sse_lines_free(sse_lines *r) { ss_buf_free(&r->buf); }
