/* Host names in rules and queries. One canonical form (lowercase, no trailing dot, LDH labels
 * or a dotted-quad IPv4) so that "the same host" has one spelling: anything a resolver could
 * read two ways (trailing dots, numeric forms like 0x7f.1 or 2130706433, IDN, underscores,
 * IPv6 literals) is refused rather than guessed at. */
#include <string.h>

#include "policy/policy.h"

int ss_all_digits(const char *s, size_t n) {
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return 0;
  return 1;
}

/* inet_aton also reads hex ("0x7f") and octal parts: a last label of digits or 0x-hex makes
 * the name an address to the resolver, so such names must be a canonical dotted quad. */
static int looks_numeric(const char *label, size_t n) {
  if (ss_all_digits(label, n)) return 1;
  if (n >= 2 && label[0] == '0' && label[1] == 'x') return 1;
  return 0;
}

static int canonical_ipv4(const char *s, size_t len) {
  int parts = 0;
  size_t i = 0;
  while (i <= len) {
    size_t j = i;
    while (j < len && s[j] != '.') j++;
    size_t n = j - i;
    if (!ss_all_digits(s + i, n) || n > 3 || (n > 1 && s[i] == '0')) return 0;
    int v = 0;
    for (size_t k = i; k < j; k++) v = v * 10 + (s[k] - '0');
    if (v > 255) return 0;
    parts++;
    i = j + 1;
  }
  return parts == 4;
}

int ss_host_normalize(const char *src, size_t len, char *out, const char **why) {
  const char *dummy;
  if (!why) why = &dummy;
  if (len == 0) return *why = "the host is empty", -1;
  if (len > SS_HOST_MAX) return *why = "the host is longer than 253 characters", -1;
  size_t label_start = 0;
  for (size_t i = 0; i <= len; i++) {
    char c = i < len ? src[i] : '.';
    if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
    if (c == '.') {
      size_t n = i - label_start;
      if (n == 0)
        return *why = i == len ? "the host ends with a dot (write it without)" : "the host has an empty label", -1;
      if (n > 63) return *why = "a label of the host is longer than 63 characters", -1;
      if (out[label_start] == '-' || out[i - 1] == '-')
        return *why = "a label of the host starts or ends with '-'", -1;
      label_start = i + 1;
      if (i < len) out[i] = '.';
      continue;
    }
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      if (c == '*') return *why = "'*' is allowed only as the leading label '*.'", -1;
      if (c == ':' || c == '[' || c == ']') return *why = "IPv6 literals and stray ':' are not supported", -1;
      return *why = "the host has a character outside a-z, 0-9, '-' and '.' (IDN must be written as punycode)", -1;
    }
    out[i] = c;
  }
  out[len] = '\0';
  /* the last label decides whether a resolver reads the name as an address */
  const char *last = strrchr(out, '.');
  last = last ? last + 1 : out;
  if (looks_numeric(last, strlen(last)) && !canonical_ipv4(out, len))
    return *why = "a numeric host must be a dotted-quad IPv4 address without leading zeros", -1;
  return 0;
}

/* Whether rule r names host (canonical). */
int ss_host_covered(const ss_policy_rule *r, const char *host) {
  if (!r->wildcard) return strcmp(r->host, host) == 0;
  size_t hl = strlen(host), al = strlen(r->host);
  return hl > al + 1 && host[hl - al - 1] == '.' && memcmp(host + hl - al, r->host, al) == 0;
}
