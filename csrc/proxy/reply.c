/* Every refusal is an HTTP answer with a JSON body, never HTML and never a bare reset: the
 * Anthropic API's error shape ({"type":"error","error":{type,message}}) so SDKs surface the
 * message, plus a "policy" object naming the decision and the rule for the 403s. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/proxy.h"

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

static void send_json(proxy_conn *c, int status, cJSON *body) {
  char *json = body ? cJSON_PrintUnformatted(body) : NULL;
  cJSON_Delete(body);
  if (!json) return conn_close(c);
  size_t jl = strlen(json), cap = jl + 512;
  char *msg = malloc(cap);
  if (!msg) {
    free(json);
    return conn_close(c);
  }
  int n = snprintf(msg, cap,
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                   "Cache-Control: no-store\r\nConnection: close\r\n%s\r\n%s",
                   status, reply_status_text(status), jl,
                   status == 407 ? "Proxy-Authenticate: Basic realm=\"sandstack\"\r\n" : "", json);
  free(json);
  c->status = status;
  conn_reply_and_linger(c, msg, (size_t)n);
  free(msg);
}

static cJSON *error_body(const char *type, const char *message) {
  cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
  cJSON_AddStringToObject(o, "type", "error");
  char text[1700];
  snprintf(text, sizeof text, "sandstack proxy: %s", message);
  cJSON_AddStringToObject(e, "type", type);
  cJSON_AddStringToObject(e, "message", text);
  return o;
}

void reply_error(proxy_conn *c, int status, const char *error_type, const char *message) {
  if (c->state == ST_CLOSING) return;
  if (!c->decision) c->decision = "error";
  send_json(c, status, error_body(error_type, message));
}

void reply_upstream(proxy_conn *c, int status, const char *reason, const char *message) {
  if (c->state == ST_CLOSING) return;
  c->reason = reason;
  cJSON *body = error_body("api_error", message);
  cJSON *u = cJSON_AddObjectToObject(body, "upstream");
  cJSON_AddStringToObject(u, "reason", reason);
  cJSON_AddStringToObject(u, "host", c->host);
  cJSON_AddNumberToObject(u, "port", c->port);
  send_json(c, status, body);
}

void reply_policy(proxy_conn *c, const char *decision, const char *reason, int rule, const char *message) {
  if (c->state == ST_CLOSING) return;
  c->decision = decision;
  c->reason = reason;
  c->rule = rule;
  char text[1600];
  if (message) {
    snprintf(text, sizeof text, "%s", message);
  } else {
    char rule_txt[32] = "";
    if (rule) snprintf(rule_txt, sizeof rule_txt, ", rule %d", rule);
    snprintf(text, sizeof text, "%s %s on %s:%d is outside the egress policy (%s%s)", c->method,
             c->kind == KIND_CONNECT ? "tunnel" : c->path, c->host, c->port, reason, rule_txt);
  }
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
  send_json(c, 403, body);
}
