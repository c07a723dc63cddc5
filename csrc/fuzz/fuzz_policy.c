/* libFuzzer target for the policy language: the input is split at the first NUL into a policy
 * JSON and a list of queries (one per line: "host method path port"). Asserts no crash, and
 * the invariants the matcher promises:
 *   - render(parse(x)) parses again and renders to the same text (one canonical form);
 *   - a wildcard rule never admits its own apex, and an admitted query names a rule that
 *     covers its host and port;
 *   - a request path carrying a dot segment or an encoded '/' or '.' is never admitted;
 *   - host matching is case-insensitive (the uppercased query gets the same verdict);
 *   - a raw rule names its port and no method or path; a connection (no method) is marked raw
 *     exactly when a raw rule covers its host and port, and the mark names such a rule; a
 *     request (with a method) is never marked raw;
 *   - a rule's reason is 1..SS_POLICY_REASON_MAX bytes of printable ASCII (a proxy puts it in a
 *     header as it is), and a verdict's named rule is the rule its index names. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"

/* CHECK() vanishes under NDEBUG (RelWithDebInfo): the invariants must hold in every build */
#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c)) {                                                               \
      fprintf(stderr, "invariant failed: %s (%s:%d)\n", #c, __FILE__, __LINE__); \
      abort();                                                                \
    }                                                                         \
  } while (0)

static void check_query(const ss_policy *p, const char *line, size_t len) {
  char buf[1024];
  if (len >= sizeof buf) return;
  memcpy(buf, line, len);
  buf[len] = '\0';
  char *fields[4] = {0};
  int nf = 0;
  char *save = NULL;
  for (char *t = strtok_r(buf, " ", &save); t && nf < 4; t = strtok_r(NULL, " ", &save)) fields[nf++] = t;
  if (nf == 0) return;
  const char *host = fields[0], *method = nf > 1 && strcmp(fields[1], "-") ? fields[1] : NULL;
  const char *path = nf > 2 && strcmp(fields[2], "-") ? fields[2] : NULL;
  int port = nf > 3 ? atoi(fields[3]) : 0;
  if (port < 0 || port > 65535) port = 0;
  ss_policy_verdict v;
  ss_policy_check(p, host, strlen(host), method, method ? strlen(method) : 0, path, path ? strlen(path) : 0, port, &v);
  CHECK(v.rule ? v.named == &p->rules[v.rule - 1] : v.named == NULL);
  if (v.raw) {
    CHECK(v.admitted && !method && v.raw >= v.rule && v.raw <= p->n);
    const ss_policy_rule *r = &p->rules[v.raw - 1];
    char canon[SS_HOST_MAX + 1];
    CHECK(ss_host_normalize(host, strlen(host), canon, NULL) == 0);
    CHECK(r->raw && r->port == port && ss_host_covered(r, canon));
  } else if (v.admitted && !method) {
    char canon[SS_HOST_MAX + 1];
    CHECK(ss_host_normalize(host, strlen(host), canon, NULL) == 0);
    for (int i = 0; i < p->n; i++) CHECK(!(p->rules[i].raw && p->rules[i].port == port && ss_host_covered(&p->rules[i], canon)));
  }
  if (v.admitted) {
    CHECK(v.rule >= 1 && v.rule <= p->n);
    const ss_policy_rule *r = &p->rules[v.rule - 1];
    char canon[SS_HOST_MAX + 1];
    CHECK(ss_host_normalize(host, strlen(host), canon, NULL) == 0);
    CHECK(ss_host_covered(r, canon));
    CHECK(!(r->wildcard && strcmp(canon, r->host) == 0)); /* never the apex */
    CHECK(r->port == 0 || r->port == port);
    if (path) {
      CHECK(!strstr(path, "/../") && !strstr(path, "/./") && !strstr(path, "//"));
      CHECK(!strcasestr(path, "%2f") && !strcasestr(path, "%2e"));
    }
  }
  /* an apex is never admitted by a wildcard rule naming it */
  for (int i = 0; i < p->n; i++) {
    if (!p->rules[i].wildcard) continue;
    ss_policy_verdict w;
    ss_policy_check(p, p->rules[i].host, strlen(p->rules[i].host), method, method ? strlen(method) : 0, path,
                    path ? strlen(path) : 0, port, &w);
    CHECK(!(w.admitted && w.rule == i + 1));
  }
  char upper[1024];
  size_t hl = strlen(host);
  for (size_t i = 0; i <= hl; i++) upper[i] = (host[i] >= 'a' && host[i] <= 'z') ? (char)(host[i] - 32) : host[i];
  ss_policy_verdict u;
  ss_policy_check(p, upper, hl, method, method ? strlen(method) : 0, path, path ? strlen(path) : 0, port, &u);
  CHECK(u.admitted == v.admitted && u.rule == v.rule);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *in = (const char *)data;
  const char *nul = memchr(in, '\0', size);
  size_t jlen = nul ? (size_t)(nul - in) : size;
  ss_error err;
  ss_error_init(&err);
  ss_policy *p = ss_policy_parse(in, jlen, &err);
  if (!p) {
    CHECK(strcmp(err.kind, "invalid") == 0);
    ss_error_clear(&err);
    /* queries still run against an empty policy: nothing may be admitted */
    static const ss_policy empty = {.n = 0, .rules = NULL};
    if (nul) {
      ss_policy_verdict v;
      ss_policy_check(&empty, nul + 1, size - jlen - 1, "GET", 3, "/", 1, 443, &v);
      CHECK(!v.admitted);
    }
    return 0;
  }
  for (int i = 0; i < p->n; i++) {
    if (p->rules[i].raw) CHECK(p->rules[i].port != 0 && p->rules[i].methods == 0 && p->rules[i].npaths == 0);
    const char *why = p->rules[i].reason;
    if (!why) continue;
    CHECK(why[0] && strlen(why) <= SS_POLICY_REASON_MAX);
    for (const char *c = why; *c; c++) CHECK(*c >= 0x20 && *c <= 0x7e);
  }
  cJSON *r1 = ss_policy_render(p);
  char *s1 = cJSON_PrintUnformatted(r1);
  ss_policy *q = ss_policy_parse(s1, strlen(s1), &err);
  CHECK(q);
  cJSON *r2 = ss_policy_render(q);
  char *s2 = cJSON_PrintUnformatted(r2);
  CHECK(strcmp(s1, s2) == 0);
  cJSON_free(s1);
  cJSON_free(s2);
  cJSON_Delete(r1);
  cJSON_Delete(r2);
  ss_policy_free(q);
  if (nul) {
    const char *line = nul + 1, *end = in + size;
    while (line < end) {
      const char *nl = memchr(line, '\n', (size_t)(end - line));
      size_t len = nl ? (size_t)(nl - line) : (size_t)(end - line);
      if (!memchr(line, '\0', len)) check_query(p, line, len);
      line += len + 1;
    }
  }
  ss_policy_free(p);
  return 0;
}
