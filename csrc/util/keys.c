/* The options-key rule (keys.h). */
#include "util/keys.h"

#include <string.h>

int ss_key_allowed(const char *const allowed[], const char *key) {
  for (int i = 0; allowed[i]; i++)
    if (strcmp(allowed[i], key) == 0) return 1;
  return 0;
}
