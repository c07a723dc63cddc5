/* Fuzzes the parsers of what sbx prints: the wrapper's nonce split and the JSON start finder,
 * plus base64 (its output must decode back to the input through the strict decoder). The first
 * byte picks a nonce length. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/wrapper.h"
#include "util/base64.h"

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
  unsigned char *back = malloc(len ? len : 1);
  if (!back) return free(b), 0;
  long o = ss_base64_decode(b, bl, back, len); /* the strict decoder the proxy uses */
  if (o != (long)len || memcmp(back, buf, len) != 0) abort();
  free(back);
  free(b);
  return 0;
}
