/* Fuzzes the parsers of what sbx prints: the wrapper's nonce split and the JSON start finder,
 * plus base64 (its output must decode back to the input). The first byte picks a nonce length. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/wrapper.h"
#include "util/base64.h"

static int b64val(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t nl = data[0] % 16;
  if (nl + 1 > size) return 0;
  const char *nonce = (const char *)data + 1;
  const char *buf = (const char *)data + 1 + nl;
  size_t len = size - 1 - nl;
  long off = ss_sbx_split_stderr(buf, len, nonce, nl);
  if (off >= 0) {
    /* the nonce line ends right before off, starts a line, and equals the nonce */
    if ((size_t)off > len || (size_t)off < nl + 1 || buf[off - 1] != '\n') abort();
    size_t start = (size_t)off - 1 - nl;
    if (memcmp(buf + start, nonce, nl) != 0 || (start > 0 && buf[start - 1] != '\n')) abort();
  }
  long js = ss_sbx_json_start(buf, len);
  if (js >= 0 && ((size_t)js >= len || buf[js] != '{' || (js > 0 && buf[js - 1] != '\n'))) abort();
  size_t bl;
  char *b = ss_base64(buf, len, &bl);
  if (!b) return 0;
  if (bl != 4 * ((len + 2) / 3)) abort();
  size_t o = 0;
  for (size_t i = 0; i + 3 < bl + 1 && i < bl; i += 4) {
    int v[4];
    for (int k = 0; k < 4; k++) v[k] = b[i + k] == '=' ? 0 : b64val(b[i + k]);
    for (int k = 0; k < 4; k++)
      if (v[k] < 0) abort();
    unsigned w = (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
    unsigned char out[3] = {(unsigned char)(w >> 16), (unsigned char)(w >> 8), (unsigned char)w};
    for (int k = 0; k < 3 && o < len; k++, o++)
      if (out[k] != (unsigned char)buf[o]) abort();
  }
  if (o != len) abort();
  free(b);
  return 0;
}
