#ifndef SANDSTACK_ENGINE_DEMUX_H
#define SANDSTACK_ENGINE_DEMUX_H
/* The demultiplexer for Docker's framed stdout/stderr stream (exec and logs without a TTY):
 * each frame is an 8-byte header [stream, 0, 0, 0, size as big-endian uint32] and then size
 * payload bytes. Stream 0 (stdin echoed) and 1 go to out, 2 and 3 (systemerr) to err. Fed in
 * arbitrary pieces (as the curl write callback receives them); payload bytes are kept
 * byte-exact. The budget bounds out + err together. Pure: no I/O, fuzzable. */
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

enum {
  SSE_DEMUX_OK = 0,
  SSE_DEMUX_OVER = 1,  /* the payload passed the budget */
  SSE_DEMUX_BAD = 2,   /* an unknown stream number: not a framed stream */
  SSE_DEMUX_NOMEM = 3,
  SSE_DEMUX_TRUNCATED = 4 /* (finish only) the stream ended inside a frame */
};

typedef struct sse_demux {
  unsigned char hdr[8];
  size_t hdr_len;      /* header bytes collected for the next frame */
  uint32_t remaining;  /* payload bytes left in the current frame */
  int stream;          /* 1 = out, 2 = err, for the current frame */
  int state;           /* SSE_DEMUX_*: sticky once not OK */
  size_t frames;       /* complete headers seen */
  ss_buf out, err;
  size_t budget, used;
} sse_demux;

void sse_demux_init(sse_demux *d, size_t budget);
/* Returns the state after consuming p[0..n); once not OK, further input is ignored. */
int sse_demux_feed(sse_demux *d, const char *p, size_t n);
/* At end of stream: SSE_DEMUX_TRUNCATED when a frame is incomplete, else the state. */
int sse_demux_finish(sse_demux *d);
/* Of the next n bytes, how many belong to the piece being read (the rest of a header, or of a
 * payload): feeding that many at a time keeps stdout and stderr pieces in their order, for a
 * caller that hands out each piece as it completes (a live process's output). */
size_t sse_demux_span(const sse_demux *d, size_t n);
void sse_demux_free(sse_demux *d);

#endif
