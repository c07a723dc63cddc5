/* libFuzzer target for the hijack answer's head parser (csrc/engine/upgrade.c). Checks: a head
 * found is inside the input and ends in a blank line, its status has three digits, and parsing
 * a prefix never finds a different head (bytes arriving in pieces give the same answer). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/upgrade.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *p = (const char *)data;
  sse_upgrade_head h;
  int st = sse_upgrade_parse(p, size, &h);
  if (st < -1 || st > 1) abort();
  if (st == 1) {
    if (h.head_len == 0 || h.head_len > size || p[h.head_len - 1] != '\n') abort();
    if (h.status < 100 || h.status > 999 || h.content_length < -1) abort();
    /* the head alone parses to the same head */
    sse_upgrade_head again;
    if (sse_upgrade_parse(p, h.head_len, &again) != 1 || again.head_len != h.head_len ||
        again.status != h.status || again.content_length != h.content_length)
      abort();
    /* a strict prefix of the head is never a whole head */
    if (h.head_len > 1) {
      sse_upgrade_head part;
      if (sse_upgrade_parse(p, h.head_len - 1, &part) == 1) abort();
    }
  }
  return 0;
}
