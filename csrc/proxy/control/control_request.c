/* What the control socket does with a request once it has read it whole (control.c reads and
 * answers; this file holds no socket, so the fuzz target fuzz_proxy_control drives it directly):
 * the request parsed, each command run on the running proxy, the answer built. Verbs: "egress"
 * (the policy in force and its digest), "set-egress" (the payload is a rendered policy: parsed,
 * checked, swapped in; live_policy.c seals the connections with it), "set-credentials" (the
 * payload is SANDSTACK_CREDENTIALS, where an entry named ANTHROPIC_API_KEY with only a secret
 * replaces the credential route's model key: parsed, checked, swapped in), "set-model-key" (the
 * payload is the model key alone; the other credentials stay), "egress-asks" (the requests held
 * for an answer, ask.c) and "egress-answer" (the payload answers one). Every change is an audit
 * line with the old and new digest; a refused change changes nothing. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "proxy/audit.h"
#include "proxy/conn.h"
#include "proxy/control/control_request.h"
#include "proxy/control/live_policy.h"
#include "proxy/parse/cred_table.h"
#include "proxy/route/ask.h"
#include "proxy/server.h"
#include "proxy/tls/tls.h"

cJSON *control_refusal(const char *error, const char *message) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 0);
  cJSON_AddStringToObject(o, "error", error);
  cJSON_AddStringToObject(o, "message", message);
  return o;
}

/* The audit line of a change (the stable schema, route "control"): what changed and the two
 * digests, never the content; for credentials, whether the model key was replaced (model_key
 * 0 or 1; -1 leaves the field out). */
static void audit_change(const proxy_server *s, const char *what, const char *old_digest, const char *new_digest,
                         size_t closed, int model_key) {
  cJSON *o = audit_line_start(s, "control", "allow");
  if (!o) return;
  cJSON_AddStringToObject(o, "event", what);
  cJSON_AddStringToObject(o, "old_digest", old_digest);
  cJSON_AddStringToObject(o, "new_digest", new_digest);
  cJSON_AddNumberToObject(o, "closed", (double)closed);
  if (model_key >= 0) cJSON_AddBoolToObject(o, "model_key", model_key);
  audit_line_emit(o);
}

/* Whether host is permitted by one name of the CA's constraints: the name itself, or for a DNS
 * name a subdomain of it (ca.c: a permitted DNS subtree; an IPv4 literal is one address). */
static int under(const char *host, const char *name) {
  size_t hl = strlen(host), nl = strlen(name);
  if (strcmp(host, name) == 0) return 1;
  return hl > nl && host[hl - nl - 1] == '.' && strcmp(host + hl - nl, name) == 0 && strspn(host, "0123456789.") != hl;
}

/* Whether the stack's CA, made at start, may vouch for host: it names the hosts the start policy
 * inspected and the start credentials' hosts (ca_name_constraints). */
static int ca_covers(const proxy_config *cfg, const char *host) {
  for (int i = 0; i < cfg->policy->n; i++)
    if (ca_rule_needs_inspection(&cfg->policy->rules[i]) && under(host, cfg->policy->rules[i].host)) return 1;
  for (size_t i = 0; cfg->creds && i < cfg->creds->n; i++)
    if (!cfg->creds->e[i].legacy && under(host, cfg->creds->e[i].host)) return 1;
  return 0;
}

/* A policy the running proxy can serve as written: a host it would inspect needs a leaf the
 * stack's CA may sign, and that CA's name constraints were fixed at start. */
static int servable(const proxy_server *s, const ss_policy *p, char *why, size_t n) {
  if (!s->tls || !s->tls->ca || p->no_inspect) return 1;
  for (int i = 0; i < p->n; i++) {
    const ss_policy_rule *r = &p->rules[i];
    if (!ca_rule_needs_inspection(r) || ca_covers(s->cfg, r->host)) continue;
    snprintf(why, n,
             "rule %d names methods or paths on %s%s, so its HTTPS needs TLS inspection, but the stack's inspection CA "
             "was made at start for the hosts the start policy inspected and cannot vouch for this one; start the "
             "stack with a policy that inspects it",
             i + 1, r->wildcard ? "*." : "", r->host);
    return 0;
  }
  return 1;
}

static cJSON *verb_egress(proxy_server *s) {
  char digest[65] = "";
  policy_digest(s->policy, digest);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 1);
  cJSON *r = ss_policy_render(s->policy);
  char *text = r ? cJSON_PrintUnformatted(r) : NULL;
  cJSON_AddItemToObject(o, "policy", r);
  if (text) cJSON_AddStringToObject(o, "rendered", text); /* the digest's input, byte for byte */
  free(text);
  cJSON_AddStringToObject(o, "digest", digest);
  return o;
}

static cJSON *verb_set_egress(proxy_server *s, const cJSON *payload) {
  if (!cJSON_IsString(payload)) return control_refusal("invalid_policy", "set-egress needs the rendered policy as its payload");
  ss_error e;
  ss_error_init(&e);
  ss_policy *next = ss_policy_parse(payload->valuestring, strlen(payload->valuestring), &e);
  if (!next) {
    cJSON *o = control_refusal("invalid_policy", e.message);
    const cJSON *rule = e.fields ? cJSON_GetObjectItemCaseSensitive(e.fields, "rule") : NULL;
    if (cJSON_IsNumber(rule)) cJSON_AddNumberToObject(o, "rule", rule->valuedouble);
    ss_error_clear(&e);
    return o;
  }
  char why[700];
  if (!servable(s, next, why, sizeof why)) {
    ss_policy_free(next);
    return control_refusal("needs_restart", why);
  }
  char old_digest[65] = "", new_digest[65] = "";
  size_t closed = live_policy_swap(s, next, GRANTS_REVOKE, old_digest, new_digest);
  if (closed == (size_t)-1) return control_refusal("internal", "out of memory; the old policy stays in force");
  audit_change(s, "policy_changed", old_digest, new_digest, closed, -1);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 1);
  cJSON_AddStringToObject(o, "old_digest", old_digest);
  cJSON_AddStringToObject(o, "digest", new_digest);
  cJSON_AddNumberToObject(o, "closed", (double)closed);
  return o;
}

/* A digest of a credentials table without its secrets: name, host, port, place and placeholder
 * of each entry (the placeholder is in the sandbox already). A new secret under the same name
 * and placeholder keeps the digest: the audit line says a change happened, never what. */
static void creds_digest(const proxy_creds *t, char out[65]) {
  static const char *const places[] = {"header", "query", "basic", "path"};
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; t && i < t->n; i++) {
    const cred_entry *e = &t->e[i];
    if (e->legacy) continue;
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "name", e->name);
    cJSON_AddStringToObject(x, "host", e->host);
    cJSON_AddNumberToObject(x, "port", e->port);
    cJSON_AddStringToObject(x, "place", places[e->place]);
    if (e->field) cJSON_AddStringToObject(x, "field", e->field);
    if (e->format) cJSON_AddStringToObject(x, "format", e->format);
    cJSON_AddStringToObject(x, "placeholder", e->placeholder);
    cJSON_AddItemToArray(a, x);
  }
  char *text = cJSON_PrintUnformatted(a);
  cJSON_Delete(a);
  sha256_hex(text ? text : "", out);
  free(text);
}

/* The credentials a running proxy can serve: each host is inspected, so it needs a CA whose
 * constraints (fixed at start) name it. */
static int creds_servable(const proxy_server *s, const proxy_creds *t, char *why, size_t n) {
  for (size_t i = 0; i < t->n; i++) {
    const cred_entry *e = &t->e[i];
    if (e->legacy) continue;
    if (!s->tls || !s->tls->ca) {
      snprintf(why, n, "credential %s needs TLS inspection of %s, but this proxy has no inspection CA (%s); start "
               "the stack with credentials", e->name, e->host, s->tls && s->tls->off_reason ? s->tls->off_reason : "none was made");
      return 0;
    }
    if (!ca_covers(s->cfg, e->host)) {
      snprintf(why, n, "credential %s is for %s, but the stack's inspection CA was made at start for other hosts and "
               "cannot vouch for this one; start the stack with a credential for it", e->name, e->host);
      return 0;
    }
  }
  return 1;
}

/* The payload is SANDSTACK_CREDENTIALS (the whole table, secrets included), in which an entry
 * {"name":"ANTHROPIC_API_KEY","secret":...} replaces the credential route's model key
 * (creds_parse_live); the route's own entry is added again with that key, or with the key in
 * force when the table names none: a table of other credentials never brings back the start's
 * key. Its placeholder stays the session token. cred_flow.c and credential.c look srv->creds up
 * on every call, so freeing the old table here leaves nothing pointing into it. */
static cJSON *verb_set_credentials(proxy_server *s, const cJSON *payload) {
  if (!cJSON_IsString(payload)) return control_refusal("invalid_credentials", "set-credentials needs the credentials as its payload");
  char why[700], *model_key = NULL;
  proxy_creds *next = creds_parse_live(payload->valuestring, strlen(payload->valuestring), &model_key, why, sizeof why);
  if (!next) return control_refusal("invalid_credentials", why);
  const proxy_config *cfg = s->cfg;
  const char *key = model_key ? model_key : creds_model_key(s->creds);
  if (!key) key = cfg->key; /* none at all: a proxy started without the credential route stays without */
  int added = key ? creds_add_legacy(next, cfg->upstream_host, cfg->upstream_port, key, cfg->token) : 0;
  int replaced = model_key != NULL;
  if (model_key) memset(model_key, 0, strlen(model_key));
  free(model_key);
  if (added != 0) {
    creds_free(next);
    return control_refusal("internal", "out of memory; the credentials in force stay");
  }
  if (!creds_servable(s, next, why, sizeof why)) {
    creds_free(next);
    return control_refusal("needs_restart", why);
  }
  char old_digest[65], new_digest[65];
  creds_digest(s->creds, old_digest);
  creds_digest(next, new_digest);
  creds_free(s->creds);
  s->creds = next;
  audit_change(s, "credentials_changed", old_digest, new_digest, 0, replaced);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 1);
  cJSON_AddStringToObject(o, "old_digest", old_digest);
  cJSON_AddStringToObject(o, "digest", new_digest);
  return o;
}

/* The payload is the model key alone: it replaces the credential route's key in the table in
 * force, whose other credentials stay (set-credentials replaces the whole table). */
static cJSON *verb_set_model_key(proxy_server *s, const cJSON *payload) {
  if (!cJSON_IsString(payload)) return control_refusal("invalid_credentials", "set-model-key needs the key as its payload");
  char why[300], digest[65];
  if (creds_set_model_key(s->creds, payload->valuestring, why, sizeof why) != 0)
    return control_refusal("invalid_credentials", why);
  creds_digest(s->creds, digest);
  audit_change(s, "credentials_changed", digest, digest, 0, 1);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 1);
  cJSON_AddStringToObject(o, "digest", digest);
  return o;
}

static cJSON *verb_egress_asks(proxy_server *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 1);
  cJSON_AddItemToObject(o, "asks", ask_list(s));
  return o;
}

/* Printable ASCII of at most max bytes, or absent (NULL): what an audit line and a header carry. */
static int printable(const cJSON *v, size_t max, const char **out) {
  *out = NULL;
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsString(v) || strlen(v->valuestring) > max) return -1;
  for (const char *q = v->valuestring; *q; q++)
    if (*q < 0x20 || *q > 0x7e) return -1;
  *out = v->valuestring;
  return 0;
}

/* The payload is {"id": n, "decision": "allow"|"deny", "remember": "once"|"session",
 * "reason": text?, "by": text?}: the pending ask n answered (ask.c). */
static cJSON *verb_egress_answer(proxy_server *s, const cJSON *payload) {
  cJSON *a = cJSON_IsString(payload) ? cJSON_Parse(payload->valuestring) : NULL;
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
  const cJSON *decision = cJSON_GetObjectItemCaseSensitive(a, "decision");
  const cJSON *rem = cJSON_GetObjectItemCaseSensitive(a, "remember");
  const char *reason, *by, *error = NULL;
  if (!cJSON_IsNumber(id) || id->valuedouble < 1)
    error = "egress-answer needs {\"id\": a pending ask's id, \"decision\": \"allow\" or \"deny\"}";
  else if (!cJSON_IsString(decision) || (strcmp(decision->valuestring, "allow") && strcmp(decision->valuestring, "deny")))
    error = "decision must be \"allow\" or \"deny\"";
  else if (rem && !cJSON_IsNull(rem) &&
           (!cJSON_IsString(rem) || (strcmp(rem->valuestring, "once") && strcmp(rem->valuestring, "session"))))
    error = "remember must be \"once\" or \"session\"";
  else if (printable(cJSON_GetObjectItemCaseSensitive(a, "reason"), ASK_REASON_MAX, &reason))
    error = "reason must be at most 200 printable ASCII characters";
  else if (printable(cJSON_GetObjectItemCaseSensitive(a, "by"), ASK_BY_MAX, &by))
    error = "by must be at most 64 printable ASCII characters";
  if (error) {
    cJSON_Delete(a);
    return control_refusal("invalid_answer", error);
  }
  int allow = strcmp(decision->valuestring, "allow") == 0, remembered = 0;
  int session = cJSON_IsString(rem) && strcmp(rem->valuestring, "session") == 0;
  char why[300];
  uint64_t n = (uint64_t)id->valuedouble;
  int rc = ask_answer(s, n, allow, session, reason, by && by[0] ? by : "host", &remembered, why, sizeof why);
  cJSON_Delete(a);
  if (rc != 0) return control_refusal("no_such_ask", why);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 1);
  cJSON_AddNumberToObject(o, "id", (double)n);
  cJSON_AddStringToObject(o, "decision", allow ? "allow" : "deny");
  cJSON_AddBoolToObject(o, "remembered", remembered);
  return o;
}

/* One command: {"verb": ..., "payload": ...} -> its answer. */
static cJSON *run_command(proxy_server *s, const cJSON *req) {
  const cJSON *verb = cJSON_GetObjectItemCaseSensitive(req, "verb");
  const cJSON *payload = cJSON_GetObjectItemCaseSensitive(req, "payload");
  cJSON *out;
  if (!cJSON_IsString(verb)) out = control_refusal("bad_request", "a request is {\"verb\": ..., \"payload\": ...}");
  else if (strcmp(verb->valuestring, "egress") == 0) out = verb_egress(s);
  else if (strcmp(verb->valuestring, "set-egress") == 0) out = verb_set_egress(s, payload);
  else if (strcmp(verb->valuestring, "set-credentials") == 0) out = verb_set_credentials(s, payload);
  else if (strcmp(verb->valuestring, "set-model-key") == 0) out = verb_set_model_key(s, payload);
  else if (strcmp(verb->valuestring, "egress-asks") == 0) out = verb_egress_asks(s);
  else if (strcmp(verb->valuestring, "egress-answer") == 0) out = verb_egress_answer(s, payload);
  else out = control_refusal("bad_request", "unknown verb (egress, set-egress, set-credentials, set-model-key, egress-asks, "
                                    "egress-answer)");
  return out;
}

cJSON *control_request_answer(proxy_server *s, const char *data, size_t len) {
  cJSON *req = cJSON_ParseWithLength(data, len);
  cJSON *out;
  if (!cJSON_IsArray(req)) {
    out = run_command(s, req);
  } else {
    out = cJSON_CreateObject();
    cJSON *answers = cJSON_CreateArray();
    int ok = 1;
    const cJSON *one;
    cJSON_ArrayForEach(one, req) {
      cJSON *a = run_command(s, one);
      ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "ok"));
      cJSON_AddItemToArray(answers, a);
      if (!ok) break;
    }
    cJSON_AddBoolToObject(out, "ok", ok);
    cJSON_AddItemToObject(out, "answers", answers);
  }
  cJSON_Delete(req);
  return out;
}
