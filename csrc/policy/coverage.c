/* How sbx host resources relate to a policy: the sbx backend's one host matcher.
 *
 * sbx writes hosts in its own pattern language ("x", "*.x" one level below x, "**.x" x and
 * every depth below it, "**" everything, each with an optional ":port"), in its global allow
 * rules and in the targets of custom secrets. The backend must know whether such a pattern
 * meets the hosts an allowlist admits, and whether the allowlist already admits everything it
 * admits. Both answers are computed here, against the policy's own rules and matcher, so the
 * Lua side keeps no second notion of "the same host".
 *
 * sbx's resources are read as written, not validated: a resource this code cannot place is
 * never "covered" (so it is refused or denied), and a secret target it cannot read reaches
 * everything (so it is refused). */
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"

/* The label that makes a wildcard's representative: the shortest, so that every apex with a
 * valid name below it has a valid representative. */
#define PROBE_LABEL "a."

typedef struct {
  const char *s;
  size_t len;
} view;

static char lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c; }

/* ASCII case-insensitive equality: rule hosts are lowercase already, resources may not be. */
static int same(view a, view b) {
  if (a.len != b.len) return 0;
  for (size_t i = 0; i < a.len; i++)
    if (lower(a.s[i]) != lower(b.s[i])) return 0;
  return 1;
}

/* h is a strict subdomain of apex. */
static int below(view h, view apex) {
  if (h.len <= apex.len + 1 || h.s[h.len - apex.len - 1] != '.') return 0;
  view tail = {h.s + h.len - apex.len, apex.len};
  return same(tail, apex);
}

/* "host[:port]" -> host. A bracketed IPv6 literal keeps its brackets; otherwise the port is
 * the digits after the first ':' and nothing else may follow it. A trailing dot (an absolute
 * DNS name) names the same host, so it is dropped. */
static view host_part(const char *s, size_t len) {
  view h = {s, len};
  if (len > 0 && s[0] == '[') {
    int depth = 0;
    size_t i = 0;
    for (; i < len; i++) {
      if (s[i] == '[') depth++;
      else if (s[i] == ']' && --depth == 0) break;
    }
    if (i < len && i + 1 < len && s[i + 1] == ':' && ss_all_digits(s + i + 2, len - i - 2)) h.len = i + 1;
  }
  if (h.len == len) {
    const char *colon = memchr(s, ':', len);
    if (colon && colon > s && ss_all_digits(colon + 1, len - (size_t)(colon - s) - 1)) h.len = (size_t)(colon - s);
  }
  if (h.len > 1 && h.s[h.len - 1] == '.') h.len--;
  return h;
}

static int is_everything(view h) { return (h.len == 1 && h.s[0] == '*') || (h.len == 2 && memcmp(h.s, "**", 2) == 0); }

static view rule_host(const ss_policy_rule *r) { return (view){r->host, strlen(r->host)}; }

/* A rule with no port, method or path limit: it opens every request to its hosts. */
static int plain(const ss_policy_rule *r) { return r->port == 0 && r->methods == 0 && r->npaths == 0; }

static int rule_names(const ss_policy_rule *r, view h) { return r->wildcard ? below(h, rule_host(r)) : same(h, rule_host(r)); }

/* Some plain rule admits host h. */
static int fully_admits(const ss_policy *p, view h) {
  for (int i = 0; i < p->n; i++)
    if (plain(&p->rules[i]) && rule_names(&p->rules[i], h)) return 1;
  return 0;
}

/* Some plain wildcard rule admits every strict subdomain of apex. */
static int subdomains_admitted(const ss_policy *p, view apex) {
  for (int i = 0; i < p->n; i++) {
    const ss_policy_rule *r = &p->rules[i];
    if (plain(r) && r->wildcard && (same(apex, rule_host(r)) || below(apex, rule_host(r)))) return 1;
  }
  return 0;
}

/* The sandbox itself denies apex: the sbx backend adds `policy deny network --sandbox N apex`
 * for every wildcard rule "*.apex" whose apex is not listed on its own (egress.commands in
 * lua/sandstack/sbx/egress.lua), and a per-sandbox deny beats every global allow. */
static int apex_denied(const ss_policy *p, view apex) {
  for (int i = 0; i < p->n; i++)
    if (p->rules[i].wildcard && same(apex, rule_host(&p->rules[i]))) return 1;
  return 0;
}

/* A bracketed IPv6 literal ("[2001:db8::1]"): brackets that are no glob. */
static int ipv6_literal(view h) {
  if (h.len < 3 || h.s[0] != '[' || h.s[h.len - 1] != ']') return 0;
  for (size_t i = 1; i + 1 < h.len; i++)
    if (!strchr("0123456789abcdefABCDEF:.", h.s[i])) return 0;
  return 1;
}

/* Glob characters sbx may accept in a pattern beyond its leading "*." and "**." forms: a deny
 * of such a rule could not be exact, so the backend refuses it rather than guess. */
static int has_glob(view apex) {
  if (ipv6_literal(apex)) return 0;
  for (size_t i = 0; i < apex.len; i++)
    if (strchr("*?[]{}\\", apex.s[i]) && apex.s[i] != '\0') return 1;
  return 0;
}

ss_coverage ss_policy_coverage(const ss_policy *p, const char *resource, size_t len) {
  view h = host_part(resource, len);
  if (is_everything(h)) return SS_COVER_ALL;
  enum { EXACT, ONE_LEVEL, ANY_DEPTH } kind = EXACT;
  view apex = h;
  if (h.len >= 3 && memcmp(h.s, "**.", 3) == 0) kind = ANY_DEPTH, apex = (view){h.s + 3, h.len - 3};
  else if (h.len >= 2 && memcmp(h.s, "*.", 2) == 0) kind = ONE_LEVEL, apex = (view){h.s + 2, h.len - 2};
  if (has_glob(apex)) return SS_COVER_GLOB;
  int covered = kind == EXACT       ? fully_admits(p, h)
                : kind == ONE_LEVEL ? subdomains_admitted(p, apex)
                                    : subdomains_admitted(p, apex) && fully_admits(p, apex);
  if (covered) return SS_COVER_COVERED;
  /* "**.x" is x and every subdomain: with the subdomains admitted and x denied for the sandbox,
   * it opens nothing beyond the allowlist ("**.x" beside an allowlist "*.x") */
  if (kind == ANY_DEPTH && subdomains_admitted(p, apex) && apex_denied(p, apex)) return SS_COVER_APEX_DENIED;
  /* A port on the resource only narrows it: the host decides. */
  for (int i = 0; i < p->n; i++) {
    const ss_policy_rule *r = &p->rules[i];
    view rh = rule_host(r);
    int meets;
    if (kind == EXACT) meets = rule_names(r, h);
    else if (r->wildcard) meets = same(rh, apex) || below(rh, apex) || below(apex, rh);
    else meets = (same(rh, apex) && kind == ANY_DEPTH) || below(rh, apex);
    if (meets) return SS_COVER_WIDER;
  }
  return SS_COVER_DISJOINT;
}

const char *ss_coverage_name(ss_coverage c) {
  static const char *const names[] = {[SS_COVER_ALL] = "all", [SS_COVER_COVERED] = "covered",
                                      [SS_COVER_WIDER] = "wider", [SS_COVER_DISJOINT] = "disjoint",
                                      [SS_COVER_GLOB] = "glob", [SS_COVER_APEX_DENIED] = "apex_denied"};
  return (unsigned)c < sizeof names / sizeof names[0] ? names[c] : "unknown";
}

/* A host the rule admits: itself, or for a wildcard one name below its apex. 0, or -1 when
 * that name is no valid host (too long, or numeric-looking), which then admits nothing. */
static int representative(const ss_policy_rule *r, char *canon) {
  char name[sizeof PROBE_LABEL + SS_HOST_MAX];
  size_t n = 0;
  if (r->wildcard) memcpy(name, PROBE_LABEL, n = strlen(PROBE_LABEL));
  size_t hl = strlen(r->host);
  memcpy(name + n, r->host, hl);
  return ss_host_normalize(name, n + hl, canon, NULL);
}

/* The host part of every rule of p (ports, methods and paths dropped) admits the host. */
static int hosts_admit(const ss_policy *p, const char *canon) {
  for (int i = 0; i < p->n; i++)
    if (ss_host_covered(&p->rules[i], canon)) return 1;
  return 0;
}

/* An sbx pattern as a policy: "**.x" is x and *.x, "*.x" every depth below x (the policy has
 * no one-level wildcard: wider, which can only refuse more), anything else the host itself.
 * NULL when the policy language cannot read it. */
static ss_policy *pattern_policy(view h) {
  char *text = malloc(h.len + 1);
  if (!text) return NULL;
  for (size_t i = 0; i < h.len; i++) text[i] = lower(h.s[i]);
  text[h.len] = '\0';
  cJSON *root = cJSON_CreateObject();
  cJSON *allow = root ? cJSON_AddArrayToObject(root, "allow") : NULL;
  ss_policy *out = NULL;
  if (allow) {
    int deep = h.len >= 3 && memcmp(text, "**.", 3) == 0;
    if (deep) {
      cJSON_AddItemToArray(allow, cJSON_CreateString(text + 3)); /* "x" */
      cJSON_AddItemToArray(allow, cJSON_CreateString(text + 1)); /* "*.x" */
    } else {
      cJSON_AddItemToArray(allow, cJSON_CreateString(text));
    }
    if (cJSON_GetArraySize(allow) == (deep ? 2 : 1)) {
      ss_error err;
      ss_error_init(&err);
      out = ss_policy_from_json(root, &err);
      ss_error_clear(&err);
    }
  }
  cJSON_Delete(root);
  free(text);
  return out;
}

int ss_policy_pattern_reaches(const ss_policy *p, const char *pattern, size_t len) {
  if (memchr(pattern, '\0', len)) return 1;
  view h = host_part(pattern, len);
  if (is_everything(h)) return 1;
  ss_policy *target = pattern_policy(h);
  if (!target) return 1;
  /* Two sets of "exact host" and "every subdomain of an apex" meet exactly when one side admits
   * a representative of a rule of the other; both sides are judged by the policy's matcher. */
  int reaches = 0;
  char canon[SS_HOST_MAX + 1];
  for (int i = 0; !reaches && i < target->n; i++)
    reaches = representative(&target->rules[i], canon) == 0 && hosts_admit(p, canon);
  for (int i = 0; !reaches && i < p->n; i++) {
    if (representative(&p->rules[i], canon) != 0) continue;
    ss_policy_verdict v;
    ss_policy_check(target, canon, strlen(canon), NULL, 0, NULL, 0, 443, &v);
    reaches = v.admitted;
  }
  ss_policy_free(target);
  return reaches;
}
