/* HTTP methods as sbx spells them: the nine named ones, or ANY alone; case-insensitive. */
#include <string.h>
#include <strings.h>

#include "policy/policy.h"

static const char *const names[SS_M_COUNT] = {"GET",    "HEAD",    "POST",    "PUT",   "PATCH",
                                              "DELETE", "OPTIONS", "CONNECT", "TRACE", "ANY"};

unsigned ss_method_bit(const char *m, size_t len) {
  for (unsigned i = 0; i < SS_M_COUNT; i++)
    if (strlen(names[i]) == len && strncasecmp(names[i], m, len) == 0) return 1u << i;
  return 0;
}

const char *ss_method_name(unsigned bit) {
  for (unsigned i = 0; i < SS_M_COUNT; i++)
    if (bit == 1u << i) return names[i];
  return NULL;
}
