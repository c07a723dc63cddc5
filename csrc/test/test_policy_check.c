/* Matching a request or a connection against a policy (csrc/policy/check.c): which rule admits
 * it, or why it is refused and which rule named the host, with paths, ports, wildcards and raw
 * rules. The fuzz target's seeds (fuzz_policy: a policy, a NUL, then queries "host method path
 * port", "-" for none) are cases with every verdict written out. */
#include <stdio.h>
#include <stdlib.h>

#include "policy/policy.h"
#include "test/unit.h"

/* One query's verdict as text: "admit N" (", raw M" for a raw mark) or "deny REASON N" (N the
 * rule named). method and path may be NULL. */
static void verdict(const ss_policy *p, const char *host, const char *method, const char *path, int port, char *out,
                    size_t cap) {
  ss_policy_verdict v;
  ss_policy_check(p, host, strlen(host), method, method ? strlen(method) : 0, path, path ? strlen(path) : 0, port, &v);
  if (v.admitted && v.raw) snprintf(out, cap, "admit %d, raw %d", v.rule, v.raw);
  else if (v.admitted) snprintf(out, cap, "admit %d", v.rule);
  else snprintf(out, cap, "deny %s %d", ss_deny_reason_name(v.reason), v.rule);
}

static ss_policy *policy(ut_run *t, const char *json) {
  ss_error e;
  ss_error_init(&e);
  ss_policy *p = ss_policy_parse(json, strlen(json), &e);
  if (!CHECK(p != NULL)) NOTE("%s", e.message);
  ss_error_clear(&e);
  return p;
}

#define VERDICT(p, host, method, path, port, want)              \
  do {                                                          \
    char got_[96];                                              \
    verdict((p), (host), (method), (path), (port), got_, sizeof got_); \
    CHECK_STR(got_, (want));                                    \
  } while (0)

static void matches_paths_and_methods(ut_run *t) {
  ss_policy *p = policy(t, "{\"allow\":[{\"host\":\"api.test\",\"methods\":[\"GET\",\"HEAD\"],\"paths\":[\"/v1/*\",\"/a/b\"]},"
                           "{\"host\":\"api.test\",\"methods\":[\"POST\"],\"paths\":[\"/v1/messages\"]}]}");
  REQUIRE(CHECK(p != NULL));
  VERDICT(p, "api.test", "GET", "/v1", 443, "admit 1");
  VERDICT(p, "api.test", "get", "/v1/x/y?q=../..", 443, "admit 1"); /* the query is not matched */
  VERDICT(p, "API.TEST", "HEAD", "/a/b", 443, "admit 1");
  VERDICT(p, "api.test", "GET", "/v1x", 443, "deny path 1");
  VERDICT(p, "api.test", "GET", "/a/b/c", 443, "deny path 1");
  VERDICT(p, "api.test", "POST", "/v1/messages", 443, "admit 2");
  VERDICT(p, "api.test", "POST", "/v1/other", 443, "deny method 1"); /* the first rule naming the host, its reason */
  VERDICT(p, "api.test", "DELETE", "/v1/x", 443, "deny method 1");
  VERDICT(p, "api.test", NULL, NULL, 443, "deny method 1"); /* a tunnel: no method to admit */
  VERDICT(p, "other.test", "GET", "/v1", 443, "deny host 0");
  ss_policy_free(p);
}

static void refuses_what_reads_two_ways(ut_run *t) {
  ss_policy *p = policy(t, "{\"allow\":[{\"host\":\"api.test\",\"methods\":[\"ANY\"],\"paths\":[\"/v1/*\"]}]}");
  REQUIRE(CHECK(p != NULL));
  static const char *const bad_paths[] = {"/v1/../admin", "/v1/./x", "/v1//x", "/v1/%2e%2e/x", "/v1%2fx", "/v1/a\\b",
                                          "/v1/a;b", "/v1/%zz", "v1/x", "/v1/%25"};
  for (size_t i = 0; i < sizeof bad_paths / sizeof bad_paths[0]; i++) VERDICT(p, "api.test", "GET", bad_paths[i], 443, "deny bad_path 0");
  VERDICT(p, "api.test.", "GET", "/v1", 443, "deny bad_host 0");
  VERDICT(p, "a_b.test", "GET", "/v1", 443, "deny bad_host 0");
  VERDICT(p, "api.test", "GE T", "/v1", 443, "deny bad_method 0");
  VERDICT(p, "api.test", "G3T", "/v1", 443, "deny bad_method 0");
  VERDICT(p, "api.test", "PROPFIND", "/v1/%41", 443, "admit 1"); /* ANY: any token, an encoded letter is plain */
  ss_policy_verdict v;
  ss_policy_check(p, "api.test\0x", 10, "GET", 3, "/v1", 3, 443, &v); /* a NUL inside the host */
  CHECK_EQ(v.reason, SS_DENY_BAD_HOST);
  ss_policy_free(p);
}

static void matches_ports_wildcards_and_raw(ut_run *t) {
  ss_policy *p = policy(t, "{\"allow\":[\"*.svc.test:8443\",\"db.test:5432\",{\"host\":\"git.test\",\"port\":22,\"raw\":true},"
                           "\"git.test\",\"10.0.0.7\"]}");
  REQUIRE(CHECK(p != NULL));
  VERDICT(p, "a.svc.test", "GET", "/", 8443, "admit 1");
  VERDICT(p, "a.b.svc.test", NULL, NULL, 8443, "admit 1"); /* every depth */
  VERDICT(p, "svc.test", NULL, NULL, 8443, "deny host 0");  /* never the apex */
  VERDICT(p, "a.svc.test", NULL, NULL, 443, "deny host 0");
  VERDICT(p, "db.test", NULL, NULL, 5432, "admit 2");
  VERDICT(p, "db.test", NULL, NULL, 0, "deny host 0"); /* an unknown port meets only port-less rules */
  VERDICT(p, "git.test", NULL, NULL, 22, "admit 3, raw 3");
  VERDICT(p, "git.test", "GET", "/", 22, "admit 3"); /* a request is never raw */
  VERDICT(p, "git.test", NULL, NULL, 443, "admit 4");
  CHECK_EQ(ss_policy_names_address(p, "10.0.0.7", 1), 1);
  CHECK_EQ(ss_policy_names_address(p, "10.0.0.8", 1), 0);
  CHECK_EQ(ss_policy_names_address(p, "svc.test", 8443), 0); /* a wildcard names no address */
  ss_policy_free(p);
  VERDICT(NULL, "a.test", "GET", "/", 443, "deny host 0"); /* no policy admits nothing */
}

static void names_each_reason(ut_run *t) {
  static const char *const names[] = {NULL, "host", "method", "path", "bad_host", "bad_method", "bad_path"};
  for (int r = SS_DENY_NONE; r <= SS_DENY_BAD_PATH; r++) CHECK_STR(ss_deny_reason_name((ss_deny_reason)r), names[r]);
}

/* The seeds' verdicts, one per query line; NULL ends a list. */
static const struct {
  const char *seed, *refused; /* refused: the policy itself is refused with this message */
  const char *verdicts[8];
} expect[] = {
    {"seed-basic", NULL, {"admit 2", "deny host 0", "admit 1", "deny bad_path 0", NULL}},
    {"seed-ip", "trailing bytes after the policy JSON", {NULL}},
    {"seed-ports", NULL, {"admit 1", "deny host 0", "admit 3", NULL}},
    {"seed-raw", NULL, {"admit 1, raw 2", "admit 1", "admit 1", "admit 3, raw 3", "deny host 0", "admit 4", NULL}},
    {"seed-reason", NULL, {"deny method 1", "admit 1", "admit 2, raw 2", "deny host 0", NULL}},
};

static void seed(ut_run *t, const char *name, const unsigned char *data, size_t len, void *ctx) {
  (void)ctx;
  size_t k = 0;
  while (k < sizeof expect / sizeof expect[0] && strcmp(expect[k].seed, name) != 0) k++;
  if (k == sizeof expect / sizeof expect[0]) {
    FAIL("a seed this test has no expectation for: add one");
    return;
  }
  const char *in = (const char *)data, *nul = memchr(in, '\0', len);
  ss_error e;
  ss_error_init(&e);
  ss_policy *p = ss_policy_parse(in, nul ? (size_t)(nul - in) : len, &e);
  if (expect[k].refused) {
    CHECK(p == NULL);
    CHECK_STR(e.message, expect[k].refused);
    ss_error_clear(&e);
    return;
  }
  REQUIRE(CHECK(p != NULL && nul != NULL));
  /* the canonical form parses to itself */
  cJSON *r1 = ss_policy_render(p);
  char *s1 = cJSON_PrintUnformatted(r1);
  ss_policy *q = ss_policy_parse(s1, strlen(s1), &e);
  if (CHECK(q != NULL)) {
    cJSON *r2 = ss_policy_render(q);
    char *s2 = cJSON_PrintUnformatted(r2);
    CHECK_STR(s2, s1);
    cJSON_free(s2);
    cJSON_Delete(r2);
  }
  ss_policy_free(q);
  cJSON_free(s1);
  cJSON_Delete(r1);
  size_t line = 0;
  for (const char *at = nul + 1, *end = in + len; at < end; line++) {
    const char *nl = memchr(at, '\n', (size_t)(end - at));
    char q_line[256], host[128], method[32], path[128];
    int port = 0;
    snprintf(q_line, sizeof q_line, "%.*s", (int)((nl ? nl : end) - at), at);
    at = nl ? nl + 1 : end;
    REQUIRE(CHECK_EQ(sscanf(q_line, "%127s %31s %127s %d", host, method, path, &port), 4));
    char got[96];
    verdict(p, host, strcmp(method, "-") ? method : NULL, strcmp(path, "-") ? path : NULL, port, got, sizeof got);
    if (!CHECK(line < 8 && expect[k].verdicts[line] != NULL)) break;
    if (!CHECK_STR(got, expect[k].verdicts[line])) NOTE("query '%s'", q_line);
  }
  CHECK(line < 8 && expect[k].verdicts[line] == NULL); /* every verdict was asked for */
  ss_policy_verdict v;
  if (strcmp(name, "seed-reason") == 0) { /* a refusal carries the author's words */
    ss_policy_check(p, "api.t", 5, "POST", 4, "/a", 2, 443, &v);
    REQUIRE(CHECK(v.named != NULL));
    CHECK_STR(v.named->reason, "read-only: ask \"ops\" ~ 100%");
  }
  ss_policy_free(p);
}

int main(int argc, char **argv) {
  ut_run t;
  ut_begin(&t, "policy_check");
  UT_RUN(&t, matches_paths_and_methods);
  UT_RUN(&t, refuses_what_reads_two_ways);
  UT_RUN(&t, matches_ports_wildcards_and_raw);
  UT_RUN(&t, names_each_reason);
  ut_each_seed(&t, argc > 1 ? argv[1] : NULL, "fuzz_policy", seed, NULL);
  return ut_end(&t);
}
