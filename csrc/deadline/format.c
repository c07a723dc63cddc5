/* The deadline file of sandstack-init (deadline.h): written by the host, read by the init. The
 * guest cannot write it (a read-only mount), yet the parser is strict all the same: one exact
 * line, a bounded number, so a partly written file is refused (the init keeps the deadline it
 * has and reads again) rather than read as another number. */
#include <stdio.h>
#include <string.h>

#include "deadline/deadline.h"

#define LINE "sandstack-init 1 deadline "

int dl_format(int64_t deadline, char *out, size_t cap) {
  if (deadline < 0 || deadline > DL_NUMBER_MAX) return -1;
  int n = snprintf(out, cap, LINE "%lld\n", (long long)deadline);
  return n > 0 && (size_t)n < cap ? n : -1;
}

int dl_parse(const char *text, size_t len, int64_t *deadline) {
  size_t head = sizeof LINE - 1;
  if (len < head + 2 || memcmp(text, LINE, head) != 0 || text[len - 1] != '\n') return -1;
  const char *p = text + head, *end = text + len - 1;
  if (end - p > 15 || (*p == '0' && end - p > 1)) return -1;
  int64_t v = 0;
  for (; p < end; p++) {
    if (*p < '0' || *p > '9') return -1;
    v = v * 10 + (*p - '0');
  }
  *deadline = v;
  return 0;
}
