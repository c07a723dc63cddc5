/* Every refusal is an HTTP answer with a JSON body, never HTML and never a bare reset: the
 * Anthropic API's error shape ({"type":"error","error":{type,message}}) so SDKs surface the
 * message, plus a "policy" object naming the decision and the rule for the 403s, and for every
 * answer the proxy makes itself a "deny" object (deny.c) saying what was refused, why, and what
 * the user could allow. The same code and words go in an X-Sandstack-Deny-Reason header and after
 * the status line's reason phrase: a client that shows nothing else of a refused CONNECT (Python's
 * http.client raises "Tunnel connection failed: 403 <phrase>") still shows them. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/conn.h"
#include "proxy/route/deny.h"
#include "proxy/route/reply.h"
const char *reply_status_text(int status) {
  switch (status) {
  case 200: return "OK";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 407: return "Proxy Authentication Required";
  case 408: return "Request Timeout";
  case 411: return "Length Required";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 421: return "Misdirected Request";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  }
  return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
}

static void send_json(proxy_conn *c, int status, cJSON *body, const deny_note *d) {
  if (body) deny_attach(c, d, body);
  char *json = body ? cJSON_PrintUnformatted(body) : NULL;
  cJSON_Delete(body);
  if (!json) return conn_close(c);
  char why[400];
  deny_header_text(d, why, sizeof why);
  size_t jl = strlen(json), cap = jl + 2 * sizeof why + 512;
  char *msg = malloc(cap);
  if (!msg) {
    free(json);
    return conn_close(c);
  }
  int n = snprintf(msg, cap,
                   "HTTP/1.1 %d %s (sandstack: %s)\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                   "X-Sandstack-Deny-Reason: %s\r\nCache-Control: no-store\r\nConnection: close\r\n%s\r\n%s",
                   status, reply_status_text(status), why, jl, why,
                   status == 407 ? "Proxy-Authenticate: Basic realm=\"sandstack\"\r\n" : "", json);
  free(json);
  c->status = status;
  conn_reply_and_linger(c, msg, (size_t)n);
  free(msg);
}

static cJSON *error_body(const char *type, const char *message) {
  cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
  cJSON_AddStringToObject(o, "type", "error");
  char text[3 * DENY_TEXT_MAX];
  snprintf(text, sizeof text, "sandstack proxy: %s", message);
  cJSON_AddStringToObject(e, "type", type);
  cJSON_AddStringToObject(e, "message", text);
  return o;
}

void reply_error(proxy_conn *c, int status, const char *error_type, const char *message) {
  if (c->state == ST_CLOSING) return;
  if (!c->decision) c->decision = "error";
  deny_note d;
  deny_from_status(c, status, &d);
  snprintf(d.why, sizeof d.why, "%s", message);
  send_json(c, status, error_body(error_type, message), &d);
}

void reply_upstream(proxy_conn *c, int status, const char *reason, const char *message) {
  if (c->state == ST_CLOSING) return;
  c->reason = reason;
  deny_note d;
  deny_from_status(c, status, &d);
  snprintf(d.why, sizeof d.why, "%s", message);
  cJSON *body = error_body("api_error", message);
  cJSON *u = cJSON_AddObjectToObject(body, "upstream");
  cJSON_AddStringToObject(u, "reason", reason);
  cJSON_AddStringToObject(u, "host", c->host);
  cJSON_AddNumberToObject(u, "port", c->port);
  send_json(c, status, body, &d);
}

/* The 403 every policy refusal answers: the "policy" object (decision, reason, rule, what was
 * asked) and the message an SDK shows, which also carries the rule's own reason and the hint. */
static void send_policy(proxy_conn *c, const char *decision, const char *reason, int rule, const char *message,
                        const deny_note *d) {
  c->decision = decision;
  c->reason = reason;
  c->rule = rule;
  char text[2 * DENY_TEXT_MAX + 400];
  char rule_txt[32] = "";
  if (rule) snprintf(rule_txt, sizeof rule_txt, ", rule %d", rule);
  int n = message ? snprintf(text, sizeof text, "%s", message)
                  : snprintf(text, sizeof text, "%s %s on %s:%d is outside the egress policy (%s%s)", c->method,
                             c->kind == KIND_CONNECT ? "tunnel" : c->path, c->host, c->port, reason, rule_txt);
  if (n > 0 && (size_t)n < sizeof text && d->rule_reason)
    n += snprintf(text + n, sizeof text - (size_t)n, "; the policy says: %s", d->rule_reason);
  if (n > 0 && (size_t)n < sizeof text && d->hint[0])
    snprintf(text + n, sizeof text - (size_t)n, "; to allow it: %s", d->hint);
  cJSON *body = error_body("permission_error", text);
  cJSON *p = cJSON_AddObjectToObject(body, "policy");
  cJSON_AddStringToObject(p, "decision", decision);
  cJSON_AddStringToObject(p, "reason", reason);
  if (rule) cJSON_AddNumberToObject(p, "rule", rule);
  cJSON_AddStringToObject(p, "host", c->host);
  cJSON_AddNumberToObject(p, "port", c->port);
  cJSON_AddStringToObject(p, "method", c->method);
  if (c->kind != KIND_CONNECT) cJSON_AddStringToObject(p, "path", c->path);
  if (c->address[0]) cJSON_AddStringToObject(p, "address", c->address);
  send_json(c, 403, body, d);
}

static void policy_check_refusal(proxy_conn *c, const char *decision, const char *reason, int rule,
                                 const char *rule_reason, const char *message) {
  if (c->state == ST_CLOSING) return;
  deny_note d;
  memset(&d, 0, sizeof d);
  d.rule = rule;
  d.rule_reason = rule_reason;
  deny_from_check(c, decision, reason, &d);
  if (!d.why[0]) snprintf(d.why, sizeof d.why, "%s", message ? message : reason);
  if (!d.code) d.code = reason;
  send_policy(c, decision, reason, rule, message, &d);
}

void reply_policy(proxy_conn *c, const char *decision, const char *reason, int rule, const char *message) {
  policy_check_refusal(c, decision, reason, rule, NULL, message);
}

void reply_refused_check(proxy_conn *c, const char *reason, const ss_policy_verdict *v, const char *message) {
  policy_check_refusal(c, "deny", reason, v->rule, v->named ? v->named->reason : NULL, message);
}

void reply_refused(proxy_conn *c, const ss_policy_verdict *v) {
  if (c->state == ST_CLOSING) return;
  deny_note d;
  deny_from_verdict(c, v, &d);
  send_policy(c, "deny", ss_deny_reason_name(v->reason), v->rule, NULL, &d);
}
