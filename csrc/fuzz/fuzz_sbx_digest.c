/* Fuzzes SHA-256 against itself across the block boundary paths: hashing is deterministic and
 * the hex form is the bytes' hex. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/sha256.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t a[32], b[32];
  ss_sha256(data, size, a);
  ss_sha256(data, size, b);
  if (memcmp(a, b, 32) != 0) abort();
  char hex[65];
  ss_sha256_hex(data, size, 32, hex);
  static const char h[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++)
    if (hex[2 * i] != h[a[i] >> 4] || hex[2 * i + 1] != h[a[i] & 15]) abort();
  return 0;
}
