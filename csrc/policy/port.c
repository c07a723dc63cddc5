/* A port as a rule's host ("x.com:443") or an allow_private entry ("10.0.0.7:5000") spells it:
 * its own file, so the rule parser (parse.c) and the allow_private parser (private.c) both call
 * it and neither calls into the other for it. */
#include <stddef.h>

#include "policy/policy.h"

const char *ss_port_text(const char *d, size_t n, int *port) {
  static const char *const bad = "the port must be a number from 1 to 65535 without leading zeros";
  if (n == 0 || n > 5 || d[0] == '0') return bad;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (d[i] < '0' || d[i] > '9') return bad;
    v = v * 10 + (d[i] - '0');
  }
  if (v > 65535) return bad;
  *port = (int)v;
  return NULL;
}
