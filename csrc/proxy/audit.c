/* The audit trail: one JSON line on stdout per connection's decision, written when the
 * connection ends so it can carry the bytes each way and the duration. Never a header, the
 * token, the key or a query string. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

#include "proxy/proxy.h"

static const char *kind_name(conn_kind k) {
  switch (k) {
  case KIND_CONNECT: return "connect";
  case KIND_FORWARD: return "forward";
  case KIND_CREDENTIAL: return "credential";
  case KIND_INSPECT: return "inspect";
  default: return NULL;
  }
}

void audit_conn(const proxy_conn *c) {
  if (!c->decision && !c->method[0]) return; /* nothing was asked (a port scan, a health probe) */
  struct timeval tv;
  gettimeofday(&tv, NULL);
  cJSON *o = cJSON_CreateObject();
  if (!o) return;
  cJSON_AddNumberToObject(o, "ts", (double)tv.tv_sec + tv.tv_usec / 1e6);
  cJSON_AddStringToObject(o, "session", c->srv->cfg->session);
  cJSON_AddNumberToObject(o, "conn", (double)c->id);
  cJSON_AddStringToObject(o, "client", c->peer);
  if (kind_name(c->kind)) cJSON_AddStringToObject(o, "kind", kind_name(c->kind));
  if (c->method[0]) cJSON_AddStringToObject(o, "method", c->method);
  if (c->host[0]) cJSON_AddStringToObject(o, "host", c->host);
  if (c->port) cJSON_AddNumberToObject(o, "port", c->port);
  if (c->kind != KIND_CONNECT && c->path[0]) cJSON_AddStringToObject(o, "path", c->path);
  cJSON_AddStringToObject(o, "decision", c->decision ? c->decision : "incomplete");
  if (c->reason) cJSON_AddStringToObject(o, "reason", c->reason);
  if (c->rule) cJSON_AddNumberToObject(o, "rule", c->rule);
  if (c->status) cJSON_AddNumberToObject(o, "status", c->status);
  if (c->address[0]) cJSON_AddStringToObject(o, "address", c->address);
  if (c->sni[0]) cJSON_AddStringToObject(o, "sni", c->sni);
  if (c->leaf) cJSON_AddStringToObject(o, "leaf", c->leaf);
  cJSON_AddNumberToObject(o, "bytes_up", (double)c->bytes_up);
  cJSON_AddNumberToObject(o, "bytes_down", (double)c->bytes_down);
  cJSON_AddNumberToObject(o, "duration_ms", (double)(uv_now(c->srv->loop) - c->started_ms));
  if (c->end) cJSON_AddStringToObject(o, "end", c->end);
  char *line = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!line) return;
  fputs(line, stdout);
  fputc('\n', stdout);
  fflush(stdout);
  free(line);
}
