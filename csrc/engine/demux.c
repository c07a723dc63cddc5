#include "engine/demux.h"

#include <string.h>

void sse_demux_init(sse_demux *d, size_t budget) {
  memset(d, 0, sizeof *d);
  d->budget = budget;
  /* Each side may hold the whole budget; `used` enforces the shared bound. */
  ss_buf_init(&d->out, budget);
  ss_buf_init(&d->err, budget);
}

static int take_payload(sse_demux *d, const char *p, size_t n) {
  if (n > d->budget - d->used) return SSE_DEMUX_OVER;
  ss_buf *b = d->stream == 2 ? &d->err : &d->out;
  if (ss_buf_append(b, p, n) != SS_BUF_OK) return SSE_DEMUX_NOMEM;
  d->used += n;
  return SSE_DEMUX_OK;
}

int sse_demux_feed(sse_demux *d, const char *p, size_t n) {
  while (n > 0 && d->state == SSE_DEMUX_OK) {
    if (d->remaining == 0) {
      size_t want = sizeof d->hdr - d->hdr_len;
      size_t k = n < want ? n : want;
      memcpy(d->hdr + d->hdr_len, p, k);
      d->hdr_len += k;
      p += k;
      n -= k;
      if (d->hdr_len < sizeof d->hdr) break;
      d->hdr_len = 0;
      d->frames++;
      switch (d->hdr[0]) {
        case 0: case 1: d->stream = 1; break;
        case 2: case 3: d->stream = 2; break;
        default: d->state = SSE_DEMUX_BAD; return d->state;
      }
      d->remaining = (uint32_t)d->hdr[4] << 24 | (uint32_t)d->hdr[5] << 16 |
                     (uint32_t)d->hdr[6] << 8 | (uint32_t)d->hdr[7];
      continue; /* a zero-size frame is legal and carries nothing */
    }
    size_t k = n < d->remaining ? n : d->remaining;
    d->state = take_payload(d, p, k);
    d->remaining -= (uint32_t)k;
    p += k;
    n -= k;
  }
  return d->state;
}

int sse_demux_finish(sse_demux *d) {
  if (d->state == SSE_DEMUX_OK && (d->hdr_len > 0 || d->remaining > 0)) return SSE_DEMUX_TRUNCATED;
  return d->state;
}

size_t sse_demux_span(const sse_demux *d, size_t n) {
  size_t piece = d->remaining ? d->remaining : sizeof d->hdr - d->hdr_len;
  return n < piece ? n : piece;
}

void sse_demux_free(sse_demux *d) {
  ss_buf_free(&d->out);
  ss_buf_free(&d->err);
}
