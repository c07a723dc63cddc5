/* Path rules and request paths. A rule is an exact path or a prefix ("/x" then "/" and a star) that admits "/x"
 * and everything under it. Matching is on the raw request path, so a request path is admitted
 * only when it cannot mean anything else after the upstream decodes or normalizes it: dot
 * segments, empty segments, backslashes, ';' parameters and encoded '/', '.', '\' or '%' are
 * refused outright (a refusal is always safe; a prefix match on "/v1/../admin" is not). */
#include <string.h>

#include "policy/policy.h"

/* RFC 3986 pchar minus '%' and ';', plus '/': what a rule path may contain. */
static int rule_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         strchr("-._~!$&'()+,=:@/", c) != NULL;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Shared by rules and requests: no empty segment and no "." or ".." segment. */
static int segments_plain(const char *p, size_t len) {
  size_t i = 1, start = 1;
  for (; i <= len; i++) {
    if (i < len && p[i] != '/') continue;
    size_t n = i - start;
    if (n == 0 && i < len) return 0; /* "//" (a trailing "/" is fine) */
    if ((n == 1 && p[start] == '.') || (n == 2 && p[start] == '.' && p[start + 1] == '.')) return 0;
    start = i + 1;
  }
  return 1;
}

int ss_path_rule_valid(const char *p, const char **why) {
  const char *dummy;
  if (!why) why = &dummy;
  size_t len = strlen(p);
  if (len == 0 || p[0] != '/') return *why = "a path must start with '/'", 0;
  if (len > SS_PATH_MAX) return *why = "a path is longer than 1024 characters", 0;
  size_t body = len;
  if (len >= 2 && p[len - 1] == '*' && p[len - 2] == '/') body = len - 2;
  for (size_t i = 0; i < body; i++) {
    if (p[i] == '*') return *why = "'*' is allowed only as the last segment '/*'", 0;
    if (!rule_char(p[i])) return *why = "a path has a character outside the RFC 3986 path set (no '%', ';', '?', '#')", 0;
  }
  if (body == len && len >= 1 && p[len - 1] == '*') return *why = "'*' is allowed only as the last segment '/*'", 0;
  if (!segments_plain(p, body)) return *why = "a path has an empty, '.' or '..' segment", 0;
  return 1;
}

int ss_path_query_valid(const char *p, size_t len) {
  if (len == 0 || p[0] != '/' || len > 8192) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c <= 0x20 || c >= 0x7f || c == '\\' || c == ';' || c == '#') return 0;
    if (c == '%') {
      if (i + 2 >= len) return 0;
      int hi = hexval(p[i + 1]), lo = hexval(p[i + 2]);
      if (hi < 0 || lo < 0) return 0;
      int v = hi * 16 + lo;
      if (v == '/' || v == '.' || v == '\\' || v == '%' || v == ';' || v < 0x21 || v >= 0x7f) return 0;
      i += 2;
    }
  }
  return segments_plain(p, len);
}

int ss_path_matches(const char *rule, const char *path, size_t len) {
  size_t rl = strlen(rule);
  if (rl >= 2 && rule[rl - 1] == '*' && rule[rl - 2] == '/') {
    size_t pl = rl - 2; /* prefix: the rule without its last two bytes */
    if (len < pl || memcmp(path, rule, pl) != 0) return 0;
    return len == pl || path[pl] == '/';
  }
  return rl == len && memcmp(rule, path, len) == 0;
}
