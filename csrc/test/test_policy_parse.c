/* The egress policy's parser (csrc/policy/parse.c): the rules an accepted policy holds, its one
 * canonical rendering, and for each refusal the exact message and the rule it names. */
#include <stdio.h>
#include <stdlib.h>

#include "policy/policy.h"
#include "test/unit.h"

static ss_policy *parse(const char *json, ss_error *e) {
  ss_error_init(e);
  return ss_policy_parse(json, strlen(json), e);
}

/* The canonical text of p (what a proxy is handed). */
static char *rendered(const ss_policy *p) {
  cJSON *j = ss_policy_render(p);
  char *s = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  return s;
}

static void reads_every_rule_form(ut_run *t) {
  ss_error e;
  ss_policy *p = parse("{\"allow\":[\"api.example.com\",\"db.example.com:5432\",\"*.Example.ORG\","
                       "{\"host\":\"h.test\",\"port\":8443,\"methods\":[\"GET\",\"post\"],\"paths\":[\"/v1/*\",\"/v1/*\",\"/a\"],"
                       "\"reason\":\"read-only\"},{\"host\":\"g.test\",\"port\":22,\"raw\":true},{\"host\":\"10.0.0.1\"}]}",
                       &e);
  if (!CHECK(p != NULL)) {
    NOTE("%s", e.message);
    return;
  }
  REQUIRE(CHECK_EQ(p->n, 6));
  CHECK_STR(p->rules[0].host, "api.example.com");
  CHECK_EQ(p->rules[0].port, 0);
  CHECK_EQ(p->rules[1].port, 5432);
  CHECK_STR(p->rules[2].host, "example.org"); /* lowercased; the apex of a wildcard */
  CHECK_EQ(p->rules[2].wildcard, 1);
  CHECK_EQ(p->rules[3].methods, SS_M_GET | SS_M_POST);
  CHECK_EQ(p->rules[3].npaths, 2); /* the repeated path kept once */
  CHECK_STR(p->rules[3].reason, "read-only");
  CHECK_EQ(p->rules[4].raw, 1);
  CHECK_EQ(p->no_inspect, 0);
  CHECK_EQ(p->ask, 0);
  char *s = rendered(p);
  CHECK_STR(s, "{\"version\":1,\"allow\":[{\"host\":\"api.example.com\"},{\"host\":\"db.example.com\",\"port\":5432},"
               "{\"host\":\"*.example.org\"},{\"host\":\"h.test\",\"port\":8443,\"methods\":[\"GET\",\"POST\"],"
               "\"paths\":[\"/v1/*\",\"/a\"],\"reason\":\"read-only\"},{\"host\":\"g.test\",\"port\":22,\"raw\":true},"
               "{\"host\":\"10.0.0.1\"}]}");
  /* the canonical text parses to the same text */
  ss_policy *q = parse(s, &e);
  REQUIRE(CHECK(q != NULL));
  char *s2 = rendered(q);
  CHECK_STR(s2, s);
  cJSON_free(s);
  cJSON_free(s2);
  ss_policy_free(p);
  ss_policy_free(q);
}

static void reads_the_policy_options(ut_run *t) {
  ss_error e;
  ss_policy *p = parse("{\"allow\":{},\"inspect\":false,\"ask\":true,\"ask_timeout\":5}", &e);
  REQUIRE(CHECK(p != NULL));
  CHECK_EQ(p->n, 0); /* an empty Lua table: denies everything */
  CHECK_EQ(p->no_inspect, 1);
  CHECK_EQ(p->ask, 1);
  CHECK_EQ(p->ask_timeout, 5);
  char *s = rendered(p);
  CHECK_STR(s, "{\"version\":1,\"allow\":[],\"inspect\":false,\"ask\":true,\"ask_timeout\":5}");
  cJSON_free(s);
  ss_policy_free(p);
  p = parse("{\"ask\":true} \n", &e);
  REQUIRE(CHECK(p != NULL));
  CHECK_EQ(p->ask_timeout, SS_POLICY_ASK_TIMEOUT);
  ss_policy_free(p);
}

/* json is refused with message; rule is the rule field (0: none). */
static void refused(ut_run *t, const char *json, const char *message, int rule) {
  ss_error e;
  ss_policy *p = parse(json, &e);
  if (!CHECK(p == NULL)) {
    NOTE("accepted: %s", json);
    ss_policy_free(p);
    return;
  }
  CHECK_STR(e.kind, "invalid");
  CHECK_STR(e.reason, "policy");
  if (!CHECK_STR(e.message, message)) NOTE("%s", json);
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(e.fields, "rule");
  CHECK_EQ(cJSON_IsNumber(r) ? r->valueint : 0, rule);
  ss_error_clear(&e);
}

#define ONE_RULE(rule) "{\"allow\":[" rule "]}"

static void refuses_each_rule_with_its_reason(ut_run *t) {
  refused(t, ONE_RULE("\"*\""), "rule 1: '*' alone would admit everything; list the hosts", 1);
  refused(t, ONE_RULE("\"a.test\",\"**.x\""),
          "rule 2: '**' is not part of this language: '*.x' already admits every depth below x", 2);
  refused(t, ONE_RULE("\"a.*.b\""), "rule 1: '*' is allowed only as the leading label '*.'", 1);
  refused(t, ONE_RULE("\"[::1]:443\""), "rule 1: IPv6 literals are not supported", 1);
  refused(t, ONE_RULE("\"h.test:0443\""), "rule 1: the port must be a number from 1 to 65535 without leading zeros", 1);
  refused(t, ONE_RULE("\"h.test:65536\""), "rule 1: the port must be a number from 1 to 65535 without leading zeros", 1);
  refused(t, ONE_RULE("\"h.test.\""), "rule 1: the host ends with a dot (write it without)", 1);
  refused(t, ONE_RULE("\"010.0.0.1\""), "rule 1: a numeric host must be a dotted-quad IPv4 address without leading zeros", 1);
  refused(t, ONE_RULE("\"*.10.0.0.1\""), "rule 1: a wildcard cannot cover an IP address", 1);
  refused(t, ONE_RULE("{\"host\":\"h:80\",\"port\":80}"), "rule 1: give the port either in 'host' or in 'port', not both", 1);
  refused(t, ONE_RULE("{\"host\":\"h\",\"port\":1.5}"), "rule 1: 'port' must be an integer from 1 to 65535", 1);
  refused(t, ONE_RULE("{\"host\":\"h\",\"paths\":[\"/a\"]}"),
          "rule 1: a path rule needs 'methods' (as in sbx; use {\"ANY\"} for every method)", 1);
  refused(t, ONE_RULE("{\"host\":\"h\",\"methods\":[\"FOO\"]}"),
          "rule 1: unknown method (use GET HEAD POST PUT PATCH DELETE OPTIONS CONNECT TRACE, or ANY)", 1);
  refused(t, ONE_RULE("{\"host\":\"h\",\"methods\":[\"ANY\",\"GET\"]}"), "rule 1: ANY cannot be combined with named methods", 1);
  refused(t, ONE_RULE("{\"host\":\"h\",\"methods\":[\"GET\"],\"paths\":[\"/a/../b\"]}"),
          "rule 1: a path has an empty, '.' or '..' segment", 1);
  refused(t, ONE_RULE("{\"host\":\"h\",\"methods\":[\"GET\"],\"paths\":[\"/a*\"]}"),
          "rule 1: '*' is allowed only as the last segment '/*'", 1);
  refused(t, ONE_RULE("{\"host\":\"h\",\"raw\":true}"), "rule 1: a raw rule must name its port ('github.com:22' or port = 22)", 1);
  refused(t, ONE_RULE("{\"host\":\"h\",\"port\":22,\"raw\":true,\"methods\":[\"GET\"]}"),
          "rule 1: a raw rule cannot have methods or paths: raw TCP carries no request to check", 1);
  refused(t, ONE_RULE("{\"host\":\"h\",\"raw\":\"yes\"}"), "rule 1: 'raw' must be true or false", 1);
  refused(t, ONE_RULE("{\"host\":\"h\",\"reason\":\"two\\nlines\"}"),
          "rule 1: 'reason' must be 1 to 200 characters of printable ASCII (no control characters or non-ASCII)", 1);
  refused(t, ONE_RULE("{\"host\":\"h\",\"authority\":\"x\"}"), "rule 1: 'authority' rules are refused", 1);
  refused(t, ONE_RULE("{\"port\":80}"), "rule 1: a rule table needs 'host' (a string)", 1);
  refused(t, ONE_RULE("7"), "rule 1: a rule must be a host string or a table with 'host'", 1);
  refused(t, ONE_RULE("\"*.a.test\",{\"host\":\"b.a.test\",\"methods\":[\"GET\"]}"),
          "rule 2: ambiguous: a method or path rule beside a wildcard covering the same host (rule 1)", 2);
  refused(t, ONE_RULE("{\"host\":\"h\",\"metods\":[\"GET\"]}"),
          "rule 1: unknown key 'metods' (did you mean 'methods'?) (a rule takes host, port, methods, paths, raw, reason)", 1);
}

static void refuses_the_policy_as_a_whole(ut_run *t) {
  refused(t, "[]", "a policy is a table { allow = {...} }", 0);
  refused(t, "{\"allows\":[]}",
          "unknown key 'allows' (did you mean 'allow'?) in the policy (only 'allow', 'inspect', 'ask', 'ask_timeout' "
          "and 'allow_private')",
          0);
  refused(t, "{\"allow\":\"a.test\"}", "'allow' must be a list of rules", 0);
  refused(t, "{\"inspect\":\"no\"}", "'inspect' must be true or false", 0);
  refused(t, "{\"ask_timeout\":5}", "'ask_timeout' needs ask = true (nothing is held without it)", 0);
  refused(t, "{\"ask\":true,\"ask_timeout\":3601}", "'ask_timeout' must be a whole number of seconds from 1 to 3600", 0);
  refused(t, "{\"ask\":true,\"ask_timeout\":0.5}", "'ask_timeout' must be a whole number of seconds from 1 to 3600", 0);
  refused(t, "{\"version\":2}", "unsupported policy version", 0);
  refused(t, "{\"allow\":[\"a\\u0000b\"]}", "the policy JSON contains an escaped NUL", 0);
  refused(t, "{\"allow\":[]} x", "trailing bytes after the policy JSON", 0);
  refused(t, "{\"allow\":", "the policy is not valid JSON", 0);
}

static int rule_count(const ss_policy *p) { return p->n; }
static int path_count(const ss_policy *p) { return p->rules[0].npaths; }

/* head, then max items (item's %d the index) joined by commas, then tail, parses to a policy
 * whose count is max; with max + 1 items it is refused with message. */
static void at_the_bound(ut_run *t, const char *head, const char *item, const char *tail, int max,
                         int (*count)(const ss_policy *), const char *message) {
  char json[8192];
  for (int n = max; n <= max + 1; n++) {
    size_t at = (size_t)snprintf(json, sizeof json, "%s", head);
    for (int i = 0; i < n; i++) {
      if (i) json[at++] = ',';
      at += (size_t)snprintf(json + at, sizeof json - at, item, i);
    }
    snprintf(json + at, sizeof json - at, "%s", tail);
    ss_error e;
    ss_policy *p = parse(json, &e);
    if (n == max) CHECK(p != NULL && count(p) == max);
    else CHECK_STR(e.message, message);
    ss_policy_free(p);
    ss_error_clear(&e);
  }
}

/* The counts: 256 rules and 32 paths pass, one more does not; the text is at most 1 MiB. */
static void holds_its_bounds(ut_run *t) {
  at_the_bound(t, "{\"allow\":[", "\"h%d.test\"", "]}", SS_POLICY_MAX_RULES, rule_count,
               "a policy has more than 256 rules");
  at_the_bound(t, "{\"allow\":[{\"host\":\"h\",\"methods\":[\"GET\"],\"paths\":[", "\"/p%d\"", "]}]}",
               SS_POLICY_MAX_PATHS, path_count, "rule 1: a rule has more than 32 paths");
  char *json = malloc(SS_POLICY_MAX_JSON + 1);
  REQUIRE(CHECK(json != NULL));
  /* a valid policy padded with blanks to 1 MiB parses; one byte more is refused unread */
  memset(json, ' ', SS_POLICY_MAX_JSON + 1);
  memcpy(json, "{\"allow\":[]}", 12);
  ss_error e;
  ss_error_init(&e);
  ss_policy *p = ss_policy_parse(json, SS_POLICY_MAX_JSON, &e);
  CHECK(p != NULL);
  ss_policy_free(p);
  CHECK(ss_policy_parse(json, SS_POLICY_MAX_JSON + 1, &e) == NULL);
  CHECK_STR(e.message, "the policy JSON is larger than 1 MiB");
  ss_error_clear(&e);
  free(json);
}

int main(void) {
  ut_run t;
  ut_begin(&t, "policy_parse");
  UT_RUN(&t, reads_every_rule_form);
  UT_RUN(&t, reads_the_policy_options);
  UT_RUN(&t, refuses_each_rule_with_its_reason);
  UT_RUN(&t, refuses_the_policy_as_a_whole);
  UT_RUN(&t, holds_its_bounds);
  return ut_end(&t);
}
