/* Building a policy from its JSON form (the Lua binding converts the user's table to the same
 * form, so there is one validator). Every refusal names the rule (1-based) and says why. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/keys.h"

#include "policy/policy.h"

/* A refusal; a rule's names it ("rule 2: ...", the index counting from 1, as in Lua). */
static ss_policy *fail(ss_policy *p, ss_error *err, int rule, const char *fmt, const char *what) {
  ss_policy_free(p);
  char text[600];
  snprintf(text, sizeof text, fmt, what ? what : "");
  if (rule > 0)
    ss_error_set(err, "invalid", "policy", "rule %d: %s", rule, text);
  else
    ss_error_set(err, "invalid", "policy", "%s", text);
  if (rule > 0) ss_error_field_num(err, "rule", rule);
  return NULL;
}

/* "host", "host:port", "*.apex", "*.apex:port" -> r->host/wildcard/port. */
static const char *parse_host(const char *s, int allow_port, ss_policy_rule *r) {
  size_t len = strlen(s);
  /* a URL pasted as a rule would otherwise be read as "host:port" with a port of "//x.com/" */
  if (strstr(s, "://")) return "a rule is a host, not a URL: write \"x.com\" or \"x.com:443\" (no scheme), and paths in 'paths'";
  if (memchr(s, '/', len)) return "a rule's host has no path: write \"host\" or \"host:port\", and paths in 'paths'";
  if (memchr(s, '[', len)) return "IPv6 literals are not supported";
  const char *colon = memchr(s, ':', len);
  if (colon) {
    if (!allow_port) return "give the port either in 'host' or in 'port', not both";
    const char *why = ss_port_text(colon + 1, len - (size_t)(colon + 1 - s), &r->port);
    if (why) return why;
    len = (size_t)(colon - s);
  }
  if (len >= 2 && s[0] == '*' && s[1] == '.') {
    r->wildcard = 1;
    s += 2;
    len -= 2;
  } else if (len >= 1 && s[0] == '*') {
    if (len >= 2 && s[1] == '*') return "'**' is not part of this language: '*.x' already admits every depth below x";
    return len == 1 ? "'*' alone would admit everything; list the hosts" : "'*' is allowed only as the leading label '*.'";
  }
  const char *why = NULL;
  if (ss_host_normalize(s, len, r->host, &why) != 0) return why;
  if (r->wildcard && strchr(r->host, '.') != NULL && strspn(r->host, "0123456789.") == strlen(r->host))
    return "a wildcard cannot cover an IP address";
  return NULL;
}

static const char *parse_methods(const cJSON *m, ss_policy_rule *r) {
  if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) == 0) return "'methods' must be a non-empty list of method names";
  const cJSON *it;
  cJSON_ArrayForEach(it, m) {
    if (!cJSON_IsString(it)) return "'methods' must be a non-empty list of method names";
    unsigned bit = ss_method_bit(it->valuestring, strlen(it->valuestring));
    if (!bit) return "unknown method (use GET HEAD POST PUT PATCH DELETE OPTIONS CONNECT TRACE, or ANY)";
    r->methods |= bit;
  }
  if ((r->methods & SS_M_ANY) && r->methods != SS_M_ANY) return "ANY cannot be combined with named methods";
  return NULL;
}

static const char *parse_paths(const cJSON *ps, ss_policy_rule *r) {
  if (!cJSON_IsArray(ps) || cJSON_GetArraySize(ps) == 0) return "'paths' must be a non-empty list of paths";
  if (cJSON_GetArraySize(ps) > SS_POLICY_MAX_PATHS) return "a rule has more than 32 paths";
  const cJSON *it;
  cJSON_ArrayForEach(it, ps) {
    if (!cJSON_IsString(it)) return "'paths' must be a non-empty list of paths";
    const char *why = NULL;
    if (!ss_path_rule_valid(it->valuestring, &why)) return why;
    int dup = 0;
    for (int i = 0; i < r->npaths; i++) dup |= strcmp(r->paths[i], it->valuestring) == 0;
    if (dup) continue;
    if (!(r->paths[r->npaths] = strdup(it->valuestring))) return "out of memory";
    r->npaths++;
  }
  return NULL;
}

/* The text goes back to the sandbox verbatim, in a JSON body and in a response header, so it is
 * held to what a header can carry without escaping: printable ASCII, no control bytes. */
static const char *parse_reason(const cJSON *j, ss_policy_rule *r) {
  const char *bad = "'reason' must be 1 to 200 characters of printable ASCII (no control characters or non-ASCII)";
  if (!cJSON_IsString(j)) return bad;
  size_t len = strlen(j->valuestring);
  if (len == 0 || len > SS_POLICY_REASON_MAX) return bad;
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)j->valuestring[i] < 0x20 || (unsigned char)j->valuestring[i] > 0x7e) return bad;
  if (!(r->reason = strdup(j->valuestring))) return "out of memory";
  return NULL;
}

static const char *const RULE_KEYS[] = {"host", "port", "methods", "paths", "raw", "reason", NULL};

/* The first key of rule table j that a rule does not take ("authority" has its own refusal),
 * or NULL. */
static const char *unknown_key(const cJSON *j) {
  const cJSON *it;
  if (!cJSON_IsObject(j)) return NULL;
  cJSON_ArrayForEach(it, j) {
    if (strcmp(it->string, "authority") && !ss_key_allowed(RULE_KEYS, it->string)) return it->string;
  }
  return NULL;
}

static const char *parse_rule(const cJSON *j, ss_policy_rule *r) {
  if (cJSON_IsString(j)) return parse_host(j->valuestring, 1, r);
  if (!cJSON_IsObject(j)) return "a rule must be a host string or a table with 'host'";
  const cJSON *it;
  cJSON_ArrayForEach(it, j) {
    if (strcmp(it->string, "authority") == 0) return "'authority' rules are refused";
  } /* an unknown key was refused by name before (unknown_key) */
  const cJSON *host = cJSON_GetObjectItemCaseSensitive(j, "host");
  const cJSON *port = cJSON_GetObjectItemCaseSensitive(j, "port");
  const cJSON *methods = cJSON_GetObjectItemCaseSensitive(j, "methods");
  const cJSON *paths = cJSON_GetObjectItemCaseSensitive(j, "paths");
  const cJSON *raw = cJSON_GetObjectItemCaseSensitive(j, "raw");
  const cJSON *reason = cJSON_GetObjectItemCaseSensitive(j, "reason");
  if (!cJSON_IsString(host)) return "a rule table needs 'host' (a string)";
  if (raw && !cJSON_IsBool(raw)) return "'raw' must be true or false";
  const char *why = parse_host(host->valuestring, port == NULL, r);
  if (why) return why;
  if (port) {
    double v = cJSON_IsNumber(port) ? port->valuedouble : -1;
    if (!(v >= 1 && v <= 65535) || v != (double)(int)v) return "'port' must be an integer from 1 to 65535";
    r->port = (int)v;
  }
  if (methods && (why = parse_methods(methods, r))) return why;
  if (paths && !methods) return "a path rule needs 'methods' (as in sbx; use {\"ANY\"} for every method)";
  if (paths && (why = parse_paths(paths, r))) return why;
  r->raw = cJSON_IsTrue(raw);
  /* raw TCP is an exception made for one service (ssh on 22, a database port), never for a
     whole host: a host's other ports stay held to TLS naming it */
  if (r->raw && !r->port) return "a raw rule must name its port ('github.com:22' or port = 22)";
  if (r->raw && (methods || paths)) return "a raw rule cannot have methods or paths: raw TCP carries no request to check";
  if (reason && (why = parse_reason(reason, r))) return why;
  return NULL;
}

/* Whether wildcard w covers every host rule r names, the apex of w counted as covered: sbx
 * writes "*.x" as "**.x", which also admits x, so a narrower rule on x could not be kept
 * beside it. Ports must overlap too. */
static int narrowed(const ss_policy_rule *r) { return r->methods != 0 || r->npaths != 0; }

static int inside(const ss_policy_rule *r, const ss_policy_rule *w) {
  if (!w->wildcard || r == w) return 0;
  if (r->port && w->port && r->port != w->port) return 0;
  /* two method/path rules on one wildcard pattern are kept, as on one plain host */
  if (r->wildcard && narrowed(w) && r->port == w->port && strcmp(w->host, r->host) == 0) return 0;
  return strcmp(w->host, r->host) == 0 || ss_host_covered(w, r->host);
}

/* "allow_private" (private.c) into p; on a refusal frees p, sets err (field "allow_private": the
 * entry, from 1) and returns -1. */
static int parse_private(ss_policy *p, const cJSON *list, ss_error *err) {
  if (!list || (cJSON_IsObject(list) && list->child == NULL)) return 0; /* {} from an empty Lua table */
  if (!cJSON_IsArray(list)) {
    fail(p, err, 0, "'allow_private' must be a list of addresses ('10.0.0.7', '10.0.0.7:5000')%s", "");
    return -1;
  }
  int n = cJSON_GetArraySize(list);
  if (n > SS_POLICY_MAX_PRIVATE) {
    fail(p, err, 0, "'allow_private' names more than %s addresses", "64");
    return -1;
  }
  if (n > 0 && !(p->allow_private = calloc((size_t)n, sizeof *p->allow_private))) {
    fail(p, err, 0, "out of memory%s", "");
    return -1;
  }
  for (int i = 0; i < n; i++) {
    const cJSON *e = cJSON_GetArrayItem(list, i);
    ss_policy_private *out = &p->allow_private[i];
    const char *why = cJSON_IsString(e) ? ss_policy_private_parse(e->valuestring, out) : "must be a string";
    for (int k = 0; !why && k < i; k++)
      if (strcmp(p->allow_private[k].address, out->address) == 0) why = "names an address an earlier entry names";
    if (why) {
      char msg[400];
      snprintf(msg, sizeof msg, "allow_private %d%s%.80s%s: %s", i + 1, cJSON_IsString(e) ? " ('" : "",
               cJSON_IsString(e) ? e->valuestring : "", cJSON_IsString(e) ? "')" : "", why);
      fail(p, err, 0, "%s", msg);
      ss_error_field_num(err, "allow_private", i + 1);
      return -1;
    }
    p->nprivate = i + 1;
  }
  return 0;
}

ss_policy *ss_policy_from_json(const cJSON *root, ss_error *err) {
  ss_policy *p = calloc(1, sizeof *p);
  if (!p) return fail(NULL, err, 0, "out of memory%s", "");
  if (!cJSON_IsObject(root)) return fail(p, err, 0, "a policy is a table { allow = {...} }%s", "");
  const cJSON *it;
  static const char *const POLICY_KEYS[] = {"allow", "version", "inspect", "ask", "ask_timeout", "allow_private", NULL};
  cJSON_ArrayForEach(it, root) {
    if (!ss_key_allowed(POLICY_KEYS, it->string)) {
      char msg[SS_KEY_MAX * 2 + 140], hint[SS_KEY_MAX + 32];
      ss_key_hint(POLICY_KEYS, it->string, hint, sizeof hint);
      snprintf(msg, sizeof msg, "unknown key '%.*s'%s in the policy (only 'allow', 'inspect', 'ask', 'ask_timeout' and 'allow_private')", SS_KEY_MAX, it->string,
               hint);
      return fail(p, err, 0, "%s", msg);
    }
  }
  const cJSON *inspect = cJSON_GetObjectItemCaseSensitive(root, "inspect");
  if (inspect && !cJSON_IsBool(inspect)) return fail(p, err, 0, "'inspect' must be true or false%s", "");
  p->no_inspect = cJSON_IsFalse(inspect);
  const cJSON *ask = cJSON_GetObjectItemCaseSensitive(root, "ask");
  if (ask && !cJSON_IsBool(ask)) return fail(p, err, 0, "'ask' must be true or false%s", "");
  p->ask = cJSON_IsTrue(ask);
  p->ask_timeout = SS_POLICY_ASK_TIMEOUT;
  const cJSON *ask_timeout = cJSON_GetObjectItemCaseSensitive(root, "ask_timeout");
  if (ask_timeout) {
    double t = cJSON_IsNumber(ask_timeout) ? ask_timeout->valuedouble : 0;
    if (!(t >= 1 && t <= SS_POLICY_ASK_TIMEOUT_MAX && t == (double)(int)t))
      return fail(p, err, 0, "'ask_timeout' must be a whole number of seconds from 1 to %s", "3600");
    if (!p->ask) return fail(p, err, 0, "'ask_timeout' needs ask = true (nothing is held without it)%s", "");
    p->ask_timeout = (int)t;
  }
  const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version");
  if (version && !(cJSON_IsNumber(version) && version->valuedouble == 1))
    return fail(p, err, 0, "unsupported policy version%s", "");
  if (parse_private(p, cJSON_GetObjectItemCaseSensitive(root, "allow_private"), err) != 0) return NULL;
  const cJSON *allow = cJSON_GetObjectItemCaseSensitive(root, "allow");
  /* an empty Lua table arrives as {}: an empty list, which denies everything */
  if (!allow || (cJSON_IsObject(allow) && allow->child == NULL)) allow = NULL;
  else if (!cJSON_IsArray(allow)) return fail(p, err, 0, "'allow' must be a list of rules%s", "");
  int n = allow ? cJSON_GetArraySize(allow) : 0;
  if (n > SS_POLICY_MAX_RULES) return fail(p, err, 0, "a policy has more than %s rules", "256");
  if (n > 0 && !(p->rules = calloc((size_t)n, sizeof *p->rules))) return fail(p, err, 0, "out of memory%s", "");
  for (int i = 0; i < n; i++) {
    ss_policy_rule *r = &p->rules[i];
    p->n = i + 1; /* owned from here on, so a failure frees its paths */
    const cJSON *rj = cJSON_GetArrayItem(allow, i);
    const char *bad = unknown_key(rj);
    if (bad) {
      char msg[SS_KEY_MAX * 2 + 160], hint[SS_KEY_MAX + 32];
      ss_key_hint(RULE_KEYS, bad, hint, sizeof hint);
      snprintf(msg, sizeof msg, "unknown key '%.*s'%s (a rule takes host, port, methods, paths, raw, reason)",
               SS_KEY_MAX, bad, hint);
      fail(p, err, i + 1, "%s", msg);
      ss_error_field_str(err, "key", bad);
      return NULL;
    }
    const char *why = parse_rule(rj, r);
    if (why) return fail(p, err, i + 1, "%s", why);
    for (int k = 0; k < i; k++) {
      const ss_policy_rule *o = &p->rules[k];
      /* a method or path rule for hosts that a wildcard rule also covers */
      if ((narrowed(r) && inside(r, o)) || (narrowed(o) && inside(o, r))) {
        char msg[96];
        snprintf(msg, sizeof msg, "%d", k + 1);
        fail(p, err, i + 1, "ambiguous: a method or path rule beside a wildcard covering the same host (rule %s)", msg);
        ss_error_field_num(err, "conflicts_with", k + 1);
        return NULL;
      }
    }
  }
  return p;
}

ss_policy *ss_policy_parse(const char *buf, size_t len, ss_error *err) {
  if (len > SS_POLICY_MAX_JSON) return fail(NULL, err, 0, "the policy JSON is larger than 1 MiB%s", "");
  /* cJSON would cut a string at an escaped NUL; such a policy is not ours, refuse it */
  for (size_t i = 0; i + 6 <= len; i++)
    if (buf[i] == '\\' && (buf[i + 1] | 0x20) == 'u' && memcmp(buf + i + 2, "0000", 4) == 0)
      return fail(NULL, err, 0, "the policy JSON contains an escaped NUL%s", "");
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
  if (!root) return fail(NULL, err, 0, "the policy is not valid JSON%s", "");
  for (const char *q = end; q && q < buf + len; q++) {
    if (*q != ' ' && *q != '\n' && *q != '\r' && *q != '\t') {
      cJSON_Delete(root);
      return fail(NULL, err, 0, "trailing bytes after the policy JSON%s", "");
    }
  }
  ss_policy *p = ss_policy_from_json(root, err);
  cJSON_Delete(root);
  return p;
}

void ss_policy_free(ss_policy *p) {
  if (!p) return;
  for (int i = 0; i < p->n; i++) {
    for (int k = 0; k < p->rules[i].npaths; k++) free(p->rules[i].paths[k]);
    free(p->rules[i].reason);
  }
  free(p->rules);
  free(p->allow_private);
  free(p);
}
