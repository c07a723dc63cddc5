/* libFuzzer target for the sbx host matcher (csrc/policy/coverage.c): the input is split at
 * the first NUL into a policy JSON and sbx resources, one per line. Asserts no crash, and that
 * the coverage answers agree with the policy's own matcher:
 *   - "covered" means every host the resource names is admitted for any port, method and path;
 *   - "disjoint" means no rule names any host the resource names;
 *   - a resource whose host a rule names is reached by it as a secret target;
 *   - "**.x" reaches whatever "x" or "*.x" reaches; "**" is everything;
 *   - case and a trailing dot change nothing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"

/* A failed invariant aborts in every build (assert() vanishes under NDEBUG). */
static void check(int holds, const char *what, int line) {
  if (holds) return;
  fprintf(stderr, "invariant failed: %s (line %d)\n", what, line);
  abort();
}
#define CHECK(c) check((c) != 0, #c, __LINE__)

#define LINE_MAX_BYTES 600

/* Admitted on odd ports, methods and paths alike: what "covered" promises. */
static int fully_admitted(const ss_policy *p, const char *host) {
  static const struct {
    const char *method, *path;
    int port;
  } q[] = {{NULL, NULL, 0}, {"DELETE", "/zz/y", 1}, {"GET", "/", 65535}, {"TRACE", "/a", 443}};
  for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
    ss_policy_verdict v;
    ss_policy_check(p, host, strlen(host), q[i].method, q[i].method ? strlen(q[i].method) : 0, q[i].path,
                    q[i].path ? strlen(q[i].path) : 0, q[i].port, &v);
    if (!v.admitted) return 0;
  }
  return 1;
}

static int named(const ss_policy *p, const char *canon) {
  for (int i = 0; i < p->n; i++)
    if (ss_host_covered(&p->rules[i], canon)) return 1;
  return 0;
}

/* The hosts a resource without a port names, as the fuzzer can probe them: the host itself, or
 * the apex and one name below it. Returns how many were written (valid hosts only). */
static int probes(const char *line, size_t len, char out[2][SS_HOST_MAX + 1], int *apex_named) {
  const char *apex = line;
  size_t alen = len;
  *apex_named = 1;
  if (len >= 3 && memcmp(line, "**.", 3) == 0) apex += 3, alen -= 3;
  else if (len >= 2 && memcmp(line, "*.", 2) == 0) apex += 2, alen -= 2, *apex_named = 0;
  else if (ss_host_normalize(line, len, out[0], NULL) == 0) return 1;
  else return 0;
  int n = 0;
  if (*apex_named && ss_host_normalize(apex, alen, out[n], NULL) == 0) n++;
  else *apex_named = 0;
  char sub[SS_HOST_MAX + 32];
  if (alen + 4 > sizeof sub) return n;
  memcpy(sub, "sub.", 4); /* the apex may hold a NUL: no string functions */
  memcpy(sub + 4, apex, alen);
  if (ss_host_normalize(sub, alen + 4, out[n], NULL) == 0) n++;
  return n;
}

static void check_resource(const ss_policy *p, const char *line, size_t len) {
  ss_coverage c = ss_policy_coverage(p, line, len);
  int reaches = ss_policy_pattern_reaches(p, line, len);
  CHECK(ss_coverage_name(c) != NULL);
  char buf[LINE_MAX_BYTES + 8];
  /* case never matters */
  for (size_t i = 0; i < len; i++) buf[i] = (line[i] >= 'a' && line[i] <= 'z') ? (char)(line[i] - 32) : line[i];
  CHECK(ss_policy_coverage(p, buf, len) == c);
  CHECK(ss_policy_pattern_reaches(p, buf, len) == reaches);
  if (c == SS_COVER_ALL) CHECK(reaches);
  if (memchr(line, ':', len) || memchr(line, '[', len) || len == 0 || line[len - 1] == '.') return;
  /* a trailing dot names the same host */
  memcpy(buf, line, len);
  buf[len] = '.';
  CHECK(ss_policy_coverage(p, buf, len + 1) == c);
  CHECK(ss_policy_pattern_reaches(p, buf, len + 1) == reaches);
  /* "**.x" is at least "x" and "*.x" */
  if (len + 3 <= LINE_MAX_BYTES && !(len >= 1 && line[0] == '*')) {
    int wide;
    memcpy(buf, "**.", 3);
    memcpy(buf + 3, line, len);
    wide = ss_policy_pattern_reaches(p, buf, len + 3);
    if (reaches || ss_policy_pattern_reaches(p, buf + 1, len + 2)) CHECK(wide);
  }
  char hosts[2][SS_HOST_MAX + 1];
  int apex_named;
  int n = probes(line, len, hosts, &apex_named);
  for (int i = 0; i < n; i++) {
    if (c == SS_COVER_COVERED) CHECK(fully_admitted(p, hosts[i]));
    if (c == SS_COVER_DISJOINT) CHECK(!named(p, hosts[i]));
    if (named(p, hosts[i])) CHECK(reaches);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *in = (const char *)data;
  const char *nul = memchr(in, '\0', size);
  if (!nul) return 0;
  ss_error err;
  ss_error_init(&err);
  ss_policy *p = ss_policy_parse(in, (size_t)(nul - in), &err);
  if (!p) {
    ss_error_clear(&err);
    return 0;
  }
  const char *line = nul + 1, *end = in + size;
  while (line < end) {
    const char *nl = memchr(line, '\n', (size_t)(end - line));
    size_t len = nl ? (size_t)(nl - line) : (size_t)(end - line);
    if (len <= LINE_MAX_BYTES - 8) check_resource(p, line, len);
    line += len + 1;
  }
  ss_policy_free(p);
  return 0;
}
