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

static int digit_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

long ss_base64_decode(const char *s, size_t n, unsigned char *out, size_t cap) {
  if (n % 4) return -1;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int v[4], pad = 0;
    for (int k = 0; k < 4; k++) {
      if (s[i + k] == '=' && i + 4 == n && k >= 2) {
        v[k] = 0;
        pad++;
        continue;
      }
      if (pad) return -1; /* data after '=' */
      if ((v[k] = digit_value((unsigned char)s[i + k])) < 0) return -1;
    }
    unsigned long w = (unsigned long)v[0] << 18 | (unsigned long)v[1] << 12 | (unsigned long)v[2] << 6 | (unsigned long)v[3];
    unsigned char b[3] = {(unsigned char)(w >> 16), (unsigned char)(w >> 8), (unsigned char)w};
    for (int k = 0; k < 3 - pad; k++) {
      if (o >= cap) return -1;
      out[o++] = b[k];
    }
  }
  return (long)o;
}
