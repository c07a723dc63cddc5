/* Base64 (see base64.h). */
#include "util/base64.h"

#include <stdlib.h>

char *ss_base64(const void *in, size_t len, size_t *out_len) {
  static const char tb[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const unsigned char *p = in;
  size_t n = 4 * ((len + 2) / 3);
  char *out = malloc(n + 1);
  if (!out) return NULL;
  size_t o = 0, i = 0;
  for (; i + 2 < len; i += 3) {
    unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
    out[o++] = tb[v >> 18], out[o++] = tb[(v >> 12) & 63], out[o++] = tb[(v >> 6) & 63],
    out[o++] = tb[v & 63];
  }
  if (i < len) {
    unsigned v = (unsigned)p[i] << 16 | (i + 1 < len ? (unsigned)p[i + 1] << 8 : 0);
    out[o++] = tb[v >> 18], out[o++] = tb[(v >> 12) & 63];
    out[o++] = i + 1 < len ? tb[(v >> 6) & 63] : '=';
    out[o++] = '=';
  }
  out[o] = 0;
  if (out_len) *out_len = o;
  return out;
}
