/* What the proxy's request-reader fuzz targets (fuzz_proxy_request.c, fuzz_proxy_inspect.c)
 * share: how an input is split into the piece size and the bytes, the limits the readers run
 * with, and feeding the bytes in growing prefixes the way the proxy receives them from a socket. */
#ifndef SANDSTACK_PROXY_FUZZ_COMMON_H
#define SANDSTACK_PROXY_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/parse/http_head.h"

typedef struct {
  size_t piece;  /* bytes added per read, 1..64, from the first input byte */
  const char *s; /* the rest of the input */
  size_t n;
} pf_input;

/* 0 when the input is too short to hold a piece size */
static inline int pf_input_split(const uint8_t *data, size_t size, pf_input *in) {
  if (size < 1) return 0;
  in->piece = (size_t)data[0] % 64 + 1;
  in->s = (const char *)data + 1;
  in->n = size - 1;
  return 1;
}

/* small limits, so that the too-long and too-many paths are reached by short inputs */
static inline ph_limits pf_limits(void) {
  ph_limits lim = {256, 2048, 20};
  return lim;
}

/* one read of the first `have` bytes; returns nonzero while the reader wants more */
typedef int (*pf_step)(const char *s, size_t have, void *ctx);

/* feeds in->s in prefixes growing by in->piece until step stops asking for more or the input
 * ends; returns the length of the last prefix fed (0 when nothing was fed) */
static inline size_t pf_feed_pieces(const pf_input *in, pf_step step, void *ctx) {
  size_t have = 0;
  int more = 1;
  while (have < in->n && more) {
    have = have + in->piece < in->n ? have + in->piece : in->n;
    more = step(in->s, have, ctx);
  }
  return have;
}

#endif
