/* libFuzzer target for the exec/logs frame demultiplexer (csrc/engine/demux.c). The first two
 * input bytes pick the piece size and the budget; the rest is the stream. Checks: the budget
 * holds, nothing is lost or invented, and feeding in pieces gives exactly what one piece gives;
 * fed span by span (sse_demux_span, as a live process's reader does), at most one side grows
 * per span and the sides add up to the same output. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/demux.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t piece = (size_t)data[0] % 17 + 1;
  size_t budget = (size_t)data[1] * 64 + 1;
  const char *s = (const char *)data + 2;
  size_t n = size - 2;

  sse_demux whole, split;
  sse_demux_init(&whole, budget);
  sse_demux_init(&split, budget);
  int st_whole = sse_demux_feed(&whole, s, n);
  int st_split = SSE_DEMUX_OK;
  for (size_t off = 0; off < n; off += piece) {
    size_t k = n - off < piece ? n - off : piece;
    st_split = sse_demux_feed(&split, s + off, k);
  }
  if (st_whole != st_split) abort();
  if (sse_demux_finish(&whole) != sse_demux_finish(&split)) abort();
  if (whole.used > budget || whole.out.len + whole.err.len != whole.used) abort();
  if (st_whole == SSE_DEMUX_OK) {
    if (whole.out.len != split.out.len || whole.err.len != split.err.len) abort();
    if (whole.out.len && memcmp(whole.out.data, split.out.data, whole.out.len) != 0) abort();
    if (whole.err.len && memcmp(whole.err.data, split.err.data, whole.err.len) != 0) abort();
    /* Payload bytes never exceed the input minus the headers. */
    if (whole.used + whole.frames * 8 > n) abort();
  }
  sse_demux spans;
  sse_demux_init(&spans, budget);
  size_t out_len = 0, err_len = 0;
  for (size_t off = 0; off < n && spans.state == SSE_DEMUX_OK;) {
    size_t k = sse_demux_span(&spans, n - off);
    if (k == 0) abort(); /* a span always moves on */
    size_t o = spans.out.len, e = spans.err.len;
    sse_demux_feed(&spans, s + off, k);
    if (spans.out.len != o && spans.err.len != e) abort();
    out_len += spans.out.len - o;
    err_len += spans.err.len - e;
    off += k;
  }
  if (spans.state != st_whole) abort();
  if (st_whole == SSE_DEMUX_OK && (out_len != whole.out.len || err_len != whole.err.len)) abort();
  sse_demux_free(&spans);
  sse_demux_free(&whole);
  sse_demux_free(&split);
  return 0;
}
