/* Matching a request against a policy, and the canonical JSON form handed to proxies. The
 * first rule that admits wins; a refusal names the first rule that at least named the host,
 * so a proxy's 403 can tell the agent which rule it ran into. */
#include <string.h>

#include "policy/policy.h"

static int method_token(const char *m, size_t len) {
  if (len == 0 || len > 32) return 0;
  for (size_t i = 0; i < len; i++) {
    char c = m[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '-' || c == '_')) return 0;
  }
  return 1;
}

static int path_admitted(const ss_policy_rule *r, const char *path, size_t len) {
  if (r->npaths == 0) return 1;
  for (int i = 0; i < r->npaths; i++)
    if (ss_path_matches(r->paths[i], path, len)) return 1;
  return 0;
}

void ss_policy_check(const ss_policy *p, const char *host, size_t host_len, const char *method,
                     size_t method_len, const char *path, size_t path_len, int port,
                     ss_policy_verdict *out) {
  memset(out, 0, sizeof *out);
  char canon[SS_HOST_MAX + 1];
  if (!host || memchr(host, '\0', host_len) || ss_host_normalize(host, host_len, canon, NULL) != 0) {
    out->reason = SS_DENY_BAD_HOST;
    return;
  }
  if (method && (memchr(method, '\0', method_len) || !method_token(method, method_len))) {
    out->reason = SS_DENY_BAD_METHOD;
    return;
  }
  if (path) {
    const char *q = memchr(path, '?', path_len);
    if (q) path_len = (size_t)(q - path); /* the query string is not matched */
    if (memchr(path, '\0', path_len) || !ss_path_query_valid(path, path_len)) {
      out->reason = SS_DENY_BAD_PATH;
      return;
    }
  }
  unsigned bit = method ? ss_method_bit(method, method_len) : 0;
  if (bit == SS_M_ANY) bit = 0; /* "ANY" as a request method is no method we know */
  ss_deny_reason best = SS_DENY_HOST;
  for (int i = 0; p && i < p->n; i++) {
    const ss_policy_rule *r = &p->rules[i];
    if (!ss_host_covered(r, canon) || (r->port && r->port != port)) continue;
    ss_deny_reason why = SS_DENY_NONE;
    if (r->methods && r->methods != SS_M_ANY && !(r->methods & bit)) why = SS_DENY_METHOD;
    else if (r->methods == SS_M_ANY && !method) why = SS_DENY_METHOD;
    else if (r->npaths && (!path || !path_admitted(r, path, path_len))) why = SS_DENY_PATH;
    if (why == SS_DENY_NONE) {
      out->admitted = 1;
      out->rule = i + 1;
      out->reason = SS_DENY_NONE;
      /* raw rules have no methods, so any of them covering this host and port admits the
         connection too; the first one says its bytes need not be TLS */
      for (int k = i; !method && k < p->n && !out->raw; k++) {
        const ss_policy_rule *o = &p->rules[k];
        if (o->raw && o->port == port && ss_host_covered(o, canon)) out->raw = k + 1;
      }
      out->named = r;
      return;
    }
    if (!out->rule) {
      out->rule = i + 1;
      out->named = r;
      best = why;
    }
  }
  out->reason = best;
}

int ss_policy_names_address(const ss_policy *p, const char *address, int port) {
  for (int i = 0; p && i < p->nprivate; i++) {
    const ss_policy_private *e = &p->allow_private[i];
    if (strcmp(e->address, address) == 0 && (e->port == 0 || e->port == port)) return 1;
  }
  for (int i = 0; p && i < p->n; i++) {
    const ss_policy_rule *r = &p->rules[i];
    if (!r->wildcard && strcmp(r->host, address) == 0 && (r->port == 0 || r->port == port)) return 1;
  }
  return 0;
}

const char *ss_deny_reason_name(ss_deny_reason r) {
  switch (r) {
  case SS_DENY_NONE: return NULL;
  case SS_DENY_HOST: return "host";
  case SS_DENY_METHOD: return "method";
  case SS_DENY_PATH: return "path";
  case SS_DENY_BAD_HOST: return "bad_host";
  case SS_DENY_BAD_METHOD: return "bad_method";
  case SS_DENY_BAD_PATH: return "bad_path";
  }
  return "unknown";
}

cJSON *ss_policy_rule_json(const ss_policy_rule *r) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  char host[SS_HOST_MAX + 3];
  strcpy(host, r->wildcard ? "*." : "");
  strcat(host, r->host);
  cJSON_AddStringToObject(o, "host", host);
  if (r->port) cJSON_AddNumberToObject(o, "port", r->port);
  if (r->methods) {
    cJSON *m = cJSON_AddArrayToObject(o, "methods");
    for (unsigned i = 0; i < SS_M_COUNT; i++)
      if (m && (r->methods & (1u << i))) cJSON_AddItemToArray(m, cJSON_CreateString(ss_method_name(1u << i)));
  }
  if (r->npaths) {
    cJSON *ps = cJSON_AddArrayToObject(o, "paths");
    for (int i = 0; ps && i < r->npaths; i++) cJSON_AddItemToArray(ps, cJSON_CreateString(r->paths[i]));
  }
  if (r->raw) cJSON_AddTrueToObject(o, "raw"); /* absent means false, so older renders stay as they were */
  if (r->reason) cJSON_AddStringToObject(o, "reason", r->reason);
  return o;
}

cJSON *ss_policy_render(const ss_policy *p) {
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  cJSON_AddNumberToObject(root, "version", 1);
  cJSON *allow = cJSON_AddArrayToObject(root, "allow");
  for (int i = 0; allow && i < p->n; i++) cJSON_AddItemToArray(allow, ss_policy_rule_json(&p->rules[i]));
  if (p->no_inspect) cJSON_AddFalseToObject(root, "inspect"); /* absent: on, so old renders stay as they were */
  if (p->ask) {
    cJSON_AddTrueToObject(root, "ask");
    cJSON_AddNumberToObject(root, "ask_timeout", p->ask_timeout);
  }
  if (p->nprivate) { /* absent when it names nothing, so older renders stay as they were */
    cJSON *list = cJSON_AddArrayToObject(root, "allow_private");
    for (int i = 0; list && i < p->nprivate; i++) {
      char text[SS_POLICY_PRIVATE_TEXT];
      ss_policy_private_text(&p->allow_private[i], text, sizeof text);
      cJSON_AddItemToArray(list, cJSON_CreateString(text));
    }
  }
  return root;
}
