/* The audit trail: one JSON line on stdout per connection's decision (per request on an
 * inspected keep-alive connection), written when it ends so it can carry the bytes each way and
 * the duration. Never a header, the token, a key or a query string.
 *
 * Every line has the stable schema (docs/proxy.md, "Audit lines"), each field present with one
 * type: ts (number, Unix seconds), session, route, decision (strings), host, method, path, rule,
 * port, security_event (their type or null), bytes_in, bytes_out, duration_ms (integers). The
 * older fields (conn, client, kind, reason, status, bytes_up, bytes_down, ...) stay beside them. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

#include "proxy/audit.h"
#include "proxy/conn.h"

static const char *kind_name(conn_kind k) {
  switch (k) {
  case KIND_CONNECT: return "connect";
  case KIND_FORWARD: return "forward";
  case KIND_CREDENTIAL: return "credential";
  case KIND_INSPECT: return "inspect";
  default: return NULL;
  }
}

const char *audit_route(const proxy_conn *c) {
  const char *k = kind_name(c->kind);
  return k ? k : "head";
}

cJSON *audit_line_start(const proxy_server *s, const char *route, const char *decision) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  /* seconds and microseconds as integers: cJSON prints a fractional double with %1.15g and then
   * sscanf()s it back to check the round trip, a few microseconds on every line */
  char ts[48];
  snprintf(ts, sizeof ts, "%lld.%06ld", (long long)tv.tv_sec, (long)tv.tv_usec);
  cJSON_AddRawToObject(o, "ts", ts);
  cJSON_AddStringToObject(o, "session", s->cfg->session);
  cJSON_AddStringToObject(o, "route", route);
  static const char *const nullable[] = {"host", "port", "method", "path", "rule", "security_event"};
  for (size_t i = 0; i < sizeof nullable / sizeof *nullable; i++) cJSON_AddNullToObject(o, nullable[i]);
  cJSON_AddStringToObject(o, "decision", decision);
  cJSON_AddNumberToObject(o, "bytes_in", 0);
  cJSON_AddNumberToObject(o, "bytes_out", 0);
  cJSON_AddNumberToObject(o, "duration_ms", 0);
  return o;
}

static void set_text(cJSON *o, const char *key, const char *v) {
  if (v && v[0]) cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateString(v));
}

static void set_count(cJSON *o, const char *key, double v) {
  if (v) cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateNumber(v));
}

void audit_line_emit(cJSON *o) {
  char *line = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (!line) return;
  fputs(line, stdout);
  fputc('\n', stdout);
  fflush(stdout);
  free(line);
}

void audit_conn(const proxy_conn *c) {
  if (!c->decision && !c->method[0]) return; /* nothing was asked (a port scan, a health probe) */
  cJSON *o = audit_line_start(c->srv, audit_route(c), c->decision ? c->decision : "incomplete");
  if (!o) return;
  set_text(o, "host", c->host);
  set_count(o, "port", c->port);
  set_text(o, "method", c->method);
  if (c->kind != KIND_CONNECT) set_text(o, "path", c->path);
  set_count(o, "rule", c->rule);
  set_text(o, "security_event", c->security_event);
  set_count(o, "bytes_in", (double)c->bytes_up);
  set_count(o, "bytes_out", (double)c->bytes_down);
  set_count(o, "duration_ms", (double)(uv_now(c->srv->loop) - c->started_ms));
  /* the fields older readers use */
  cJSON_AddNumberToObject(o, "conn", (double)c->id);
  cJSON_AddStringToObject(o, "client", c->peer);
  if (kind_name(c->kind)) cJSON_AddStringToObject(o, "kind", kind_name(c->kind));
  if (c->reason) cJSON_AddStringToObject(o, "reason", c->reason);
  if (c->status) cJSON_AddNumberToObject(o, "status", c->status);
  if (c->address[0]) cJSON_AddStringToObject(o, "address", c->address);
  if (c->sni[0]) cJSON_AddStringToObject(o, "sni", c->sni);
  if (c->leaf) cJSON_AddStringToObject(o, "leaf", c->leaf);
  if (c->relay) cJSON_AddStringToObject(o, "relay", c->relay); /* a tunnel: "splice" or "uv" (splice_relay.c) */
  cJSON_AddNumberToObject(o, "bytes_up", (double)c->bytes_up);
  cJSON_AddNumberToObject(o, "bytes_down", (double)c->bytes_down);
  if (c->end) cJSON_AddStringToObject(o, "end", c->end);
  if (c->ask_by[0]) cJSON_AddStringToObject(o, "answered_by", c->ask_by); /* an ask decided it (ask.c) */
  audit_line_emit(o);
}
