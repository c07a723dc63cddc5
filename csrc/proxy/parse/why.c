/* A refusal's reason (see why.h). */
#include "proxy/parse/why.h"

#include <stdarg.h>
#include <stdio.h>

int why_fail(char *why, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, n, fmt, ap);
  va_end(ap);
  return -1;
}
