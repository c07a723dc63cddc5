/* libFuzzer target for the error-body message extraction (csrc/engine/errmsg.c) and, since it
 * reads untrusted configuration the same way, the DOCKER_HOST parser (csrc/engine/host.c). The
 * first byte picks the output size. Checks: always a NUL-terminated string of the returned
 * length inside the buffer, trimmed, without control bytes other than tab and newline. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/errmsg.h"
#include "engine/host.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t outsz = (size_t)data[0] + 1;
  const char *body = (const char *)data + 1;
  size_t n = size - 1;
  char *out = malloc(outsz);
  size_t len = sse_error_message(body, n, out, outsz);
  if (len >= outsz || out[len] != '\0' || strlen(out) != len) abort();
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)out[i];
    if ((c < ' ' && c != '\t' && c != '\n') || c == 0x7f) abort();
  }
  if (len && (unsigned char)out[0] <= ' ') abort(); /* leading whitespace is trimmed */
  free(out);

  char *host = malloc(n + 1);
  memcpy(host, body, n);
  host[n] = '\0';
  sse_host h;
  ss_error err;
  ss_error_init(&err);
  if (sse_host_parse(host, data[0] & 1, &h, &err) == 0) {
    if (strncmp(h.base, "http://", 7) != 0 && strncmp(h.base, "https://", 8) != 0) abort();
    if (strlen(h.unix_path) >= sizeof h.unix_path) abort();
  } else if (!ss_error_isset(&err)) {
    abort();
  }
  ss_error_clear(&err);
  free(host);
  return 0;
}
