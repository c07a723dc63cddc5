/* The words of a refusal: for every reason the proxy refuses, which rule or check did it and
 * what the user could allow. A policy refusal's suggestion is a rule written as a Lua table, the
 * way a policy is written (docs/policy.md), built from the rule the verdict names, so "add POST
 * to rule 3" comes with rule 3 as it would read afterwards. Nothing here decides anything: the
 * routes decide, this only explains. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proxy/audit.h"
#include "proxy/conn.h"
#include "proxy/route/deny.h"

static void put(char *out, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, cap, fmt, ap);
  va_end(ap);
}

/* Text built piece by piece into a fixed buffer: what does not fit is cut, never overrun. */
typedef struct text {
  char *p;
  size_t cap, n;
} text;

static void add(text *t, const char *fmt, ...) {
  if (t->n + 1 >= t->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(t->p + t->n, t->cap - t->n, fmt, ap);
  va_end(ap);
  if (k > 0) t->n = t->n + (size_t)k < t->cap ? t->n + (size_t)k : t->cap - 1;
}

/* A Lua string literal: printable ASCII as it is, quote and backslash escaped, any other byte as \ddd. */
static void add_lua_string(text *t, const char *s) {
  add(t, "\"");
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') add(t, "\\%c", ch);
    else if (ch < 0x20 || ch > 0x7e) add(t, "\\%u", ch);
    else add(t, "%c", ch);
  }
  add(t, "\"");
}

static void lua_quote(char *out, size_t cap, const char *s) {
  text t = {out, cap, 0};
  out[0] = '\0';
  add_lua_string(&t, s);
}

/* A rule (ss_policy_rule_json's form) as the Lua table a policy author writes. */
static void lua_rule(const cJSON *r, char *out, size_t cap) {
  text t = {out, cap, 0};
  out[0] = '\0';
  add(&t, "{ host = ");
  add_lua_string(&t, cJSON_GetObjectItemCaseSensitive(r, "host")->valuestring);
  const cJSON *port = cJSON_GetObjectItemCaseSensitive(r, "port");
  if (port) add(&t, ", port = %d", port->valueint);
  static const char *const lists[] = {"methods", "paths"};
  for (int i = 0; i < 2; i++) {
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(r, lists[i]), *it;
    if (!l) continue;
    add(&t, ", %s = { ", lists[i]);
    cJSON_ArrayForEach(it, l) {
      add_lua_string(&t, it->valuestring);
      add(&t, it->next ? ", " : " ");
    }
    add(&t, "}");
  }
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "raw"))) add(&t, ", raw = true");
  add(&t, " }");
}

/* What was asked, as the why names it. */
static const char *what_asked(const proxy_conn *c) { return c->kind == KIND_CONNECT ? "a tunnel" : c->method; }

/* The named rule with one more method or path, as it would read after the change. */
static void widened_rule(const ss_policy_rule *named, const char *list, const char *item, char *out, size_t cap) {
  cJSON *j = ss_policy_rule_json(named);
  if (!j) {
    out[0] = '\0';
    return;
  }
  cJSON_DeleteItemFromObjectCaseSensitive(j, "reason"); /* the suggestion is about what it admits */
  cJSON *l = cJSON_GetObjectItemCaseSensitive(j, list);
  if (l && strcmp(item, "ANY") == 0) /* ANY stands alone in a rule */
    cJSON_ReplaceItemInObjectCaseSensitive(j, list, cJSON_CreateStringArray(&item, 1));
  else if (l)
    cJSON_AddItemToArray(l, cJSON_CreateString(item));
  lua_rule(j, out, cap);
  cJSON_Delete(j);
}

static void methods_text(const ss_policy_rule *r, char *out, size_t cap) {
  text t = {out, cap, 0};
  out[0] = '\0';
  for (unsigned i = 0; i < SS_M_COUNT; i++)
    if (r->methods & (1u << i)) add(&t, "%s%s", t.n ? ", " : "", ss_method_name(1u << i));
}

/* The method as a rule can name it: the policy language knows the standard methods, and admits
 * any other (PROPFIND, a custom token) only through "ANY". */
static const char *rule_method(const char *m) {
  unsigned bit = ss_method_bit(m, strlen(m));
  return bit && bit != SS_M_ANY ? m : "ANY";
}

void deny_from_verdict(const proxy_conn *c, const ss_policy_verdict *v, deny_note *d) {
  memset(d, 0, sizeof *d);
  d->code = ss_deny_reason_name(v->reason);
  d->rule = v->rule;
  d->rule_reason = v->named ? v->named->reason : NULL;
  const ss_policy_rule *r = v->named;
  char rule[DENY_TEXT_MAX - 120];
  switch (v->reason) {
  case SS_DENY_METHOD:
    if (!r) break;
    {
      char ms[96];
      methods_text(r, ms, sizeof ms);
      put(d->why, sizeof d->why, "rule %d names %s:%d but admits only the methods %s, not %s", v->rule, c->host,
          c->port, ms, c->method);
      widened_rule(r, "methods", rule_method(c->method), rule, sizeof rule);
      put(d->hint, sizeof d->hint, "add \"%s\" to the methods of rule %d: %s", rule_method(c->method), v->rule, rule);
    }
    return;
  case SS_DENY_PATH:
    if (!r) break;
    put(d->why, sizeof d->why, "rule %d names %s:%d and %s but none of its paths is %s", v->rule, c->host, c->port,
        c->method, c->path);
    if (ss_path_rule_valid(c->path, NULL)) {
      widened_rule(r, "paths", c->path, rule, sizeof rule);
      put(d->hint, sizeof d->hint, "add \"%s\" (or a prefix ending in /*) to the paths of rule %d: %s", c->path, v->rule,
          rule);
    } else {
      put(d->hint, sizeof d->hint, "this path cannot be written as a rule's path as it is; a prefix of it ending in /* "
          "can be added to the paths of rule %d", v->rule);
    }
    return;
  case SS_DENY_BAD_HOST:
  case SS_DENY_BAD_METHOD:
  case SS_DENY_BAD_PATH: return deny_from_check(c, "deny", d->code, d);
  default: break;
  }
  d->code = "host";
  put(d->why, sizeof d->why, "no rule admits %s to %s:%d", what_asked(c), c->host, c->port);
  lua_quote(rule, sizeof rule, c->host);
  if (c->kind == KIND_CONNECT)
    put(d->hint, sizeof d->hint, "add the rule { host = %s, port = %d } to the egress policy", rule, c->port);
  else
    put(d->hint, sizeof d->hint, "add the rule { host = %s, port = %d } (or, narrower, { host = %s, port = %d, "
        "methods = { \"%s\" } }) to the egress policy", rule, c->port, rule, c->port, rule_method(c->method));
}

void deny_from_check(const proxy_conn *c, const char *decision, const char *reason, deny_note *d) {
  const char *rr = d->rule_reason;
  int rule = d->rule;
  memset(d, 0, sizeof *d);
  d->code = reason;
  d->rule_reason = rr;
  d->rule = rule ? rule : c->rule;
  char host[SS_HOST_MAX * 4 + 8];
  lua_quote(host, sizeof host, c->host);
  if (strcmp(reason, "needs_inspection") == 0) {
    put(d->why, sizeof d->why, "rule %d admits only some methods or paths on %s:%d, and a CONNECT tunnel's requests "
        "cannot be checked without TLS inspection", d->rule, c->host, c->port);
    put(d->hint, sizeof d->hint, "turn TLS inspection on (the policy's inspect = true and a CA for the proxy), or admit "
        "every request to the host: { host = %s, port = %d }", host, c->port);
  } else if (strcmp(reason, "not_tls") == 0) {
    d->code = "raw_refused";
    put(d->why, sizeof d->why, "the tunnel to %s:%d did not start with a TLS ClientHello naming %s, and no raw rule "
        "covers that host and port", c->host, c->port, c->host);
    put(d->hint, sizeof d->hint, "if raw TCP to this service is intended, add { host = %s, port = %d, raw = true }",
        host, c->port);
  } else if (strcmp(reason, "bad_host") == 0) {
    put(d->why, sizeof d->why, "the host %s is not a name the policy reads with certainty", c->host);
    put(d->hint, sizeof d->hint, "no rule can admit it as written: use a lowercase DNS name of letters, digits and "
        "hyphens, or a dotted-quad IPv4 address");
  } else if (strcmp(reason, "bad_method") == 0) {
    put(d->why, sizeof d->why, "the method is not an HTTP token");
    put(d->hint, sizeof d->hint, "no rule can admit it: send a standard method name");
  } else if (strcmp(reason, "bad_path") == 0) {
    put(d->why, sizeof d->why, "the path %s could mean something other than it reads (dot segments, //, "
        "encoded slashes or dots, control or non-ASCII bytes)", c->path);
    put(d->hint, sizeof d->hint, "no rule can admit it as written: send the path in plain form");
  } else if (strcmp(reason, "credential_needs_inspection") == 0) {
    put(d->why, sizeof d->why, "%s:%d has a credential, which the proxy places only inside an inspected TLS session, "
        "and this proxy cannot inspect", c->host, c->port);
    put(d->hint, sizeof d->hint, "give the proxy a CA and keep the policy's inspect = true (a stack started with "
        "credentials does both)");
  } else if (strcmp(reason, "credential_misplaced") == 0) {
    put(d->hint, sizeof d->hint, "send a credential's placeholder only to the host it was made for, in the place it "
        "is meant to go; nothing in the policy can allow it elsewhere");
  } else if (strcmp(decision, "address_refused") == 0) { /* reason: the range's name */
    d->code = "address_refused";
    put(d->why, sizeof d->why, "%s resolves to %s (%s), an address the proxy does not connect to", c->host, c->address,
        reason);
    int v6 = strchr(c->address, ':') != NULL;
    put(d->hint, sizeof d->hint, "only if that address is meant to be reachable from the sandbox: the policy's "
        "allow_private = { \"%s%s%s:%d\" } (or a rule naming it literally, { host = \"%s\", port = %d })",
        v6 ? "[" : "", c->address, v6 ? "]" : "", c->port, c->address, c->port);
  } /* any other check: the caller's message is the why, and there is nothing to suggest */
}

void deny_from_status(const proxy_conn *c, int status, deny_note *d) {
  memset(d, 0, sizeof *d);
  d->rule = c->rule;
  const char *hint = "";
  switch (status) {
  case 400: d->code = "bad_request"; hint = "send one well-formed HTTP/1.1 request"; break;
  case 401: d->code = "token_missing"; hint = "send this session's token where the model route expects it"; break;
  case 407:
    d->code = "proxy_auth_required";
    hint = "use the proxy URL the sandbox was given (HTTPS_PROXY: http://sandstack:<token>@host:port)";
    break;
  case 408: d->code = "timeout"; hint = "send the request head promptly"; break;
  case 411: d->code = "length_required"; hint = "send the request body with Content-Length"; break;
  case 413: d->code = "body_too_large"; hint = "send a smaller body"; break;
  case 414: d->code = "uri_too_long"; hint = "send a shorter request line or path"; break;
  case 421:
    d->code = "host_mismatch";
    put(d->hint, sizeof d->hint, "send a Host header naming %s:%d (what was asked for and checked), or none", c->host,
        c->port);
    break;
  case 431: d->code = "headers_too_large"; hint = "send fewer or smaller request headers"; break;
  case 503: d->code = "overloaded"; hint = "retry later"; break;
  case 505: d->code = "http_version"; hint = "speak HTTP/1.1"; break;
  default: /* 502/504 and the rest: the destination failed, the policy had admitted it */
    d->code = c->reason ? c->reason : status == 504 ? "upstream_timeout" : "upstream_error";
    hint = "nothing in the policy: the destination could not be reached or answered wrongly";
    break;
  }
  if (!d->hint[0]) put(d->hint, sizeof d->hint, "%s", hint);
}

static void add_or_null(cJSON *o, const char *k, const char *v) {
  if (v && v[0]) cJSON_AddStringToObject(o, k, v);
  else cJSON_AddNullToObject(o, k);
}

void deny_attach(const proxy_conn *c, const deny_note *d, cJSON *body) {
  cJSON *o = cJSON_AddObjectToObject(body, "deny");
  if (!o) return;
  cJSON_AddStringToObject(o, "code", d->code);
  cJSON *w = cJSON_AddObjectToObject(o, "what");
  if (w) {
    cJSON_AddStringToObject(w, "route", audit_route(c));
    add_or_null(w, "host", c->host);
    if (c->port) cJSON_AddNumberToObject(w, "port", c->port);
    else cJSON_AddNullToObject(w, "port");
    add_or_null(w, "method", c->method);
    add_or_null(w, "path", c->kind == KIND_CONNECT ? NULL : c->path);
  }
  cJSON_AddStringToObject(o, "why", d->why);
  add_or_null(o, "allow_hint", d->hint);
  if (d->rule) cJSON_AddNumberToObject(o, "rule", d->rule);
  if (d->rule_reason) cJSON_AddStringToObject(o, "rule_reason", d->rule_reason);
  if (c->security_event) cJSON_AddStringToObject(o, "security_event", c->security_event);
}

void deny_header_text(const deny_note *d, char *out, size_t cap) {
  char raw[DENY_TEXT_MAX + 64];
  snprintf(raw, sizeof raw, "%s; %s", d->code, d->rule_reason ? d->rule_reason : d->why);
  size_t n = 0;
  for (const char *s = raw; *s && n + 1 < cap; s++) {
    unsigned char ch = (unsigned char)*s;
    out[n++] = ch >= 0x20 && ch <= 0x7e ? (char)ch : '?';
  }
  out[n] = '\0';
}
