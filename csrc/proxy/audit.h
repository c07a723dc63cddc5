#ifndef SANDSTACK_PROXY_AUDIT_H
#define SANDSTACK_PROXY_AUDIT_H
/* The audit lines (audit.c): one JSON line per connection (or inspected request) on stdout. */
#include <cjson/cJSON.h>

typedef struct proxy_conn proxy_conn;
typedef struct proxy_server proxy_server;

void audit_conn(const proxy_conn *c);
/* The stable "route" name of a connection: connect, forward, credential, inspect, or head (refused
 * before its head named a route). */
const char *audit_route(const proxy_conn *c);
/* A line with the stable schema's every field (the nullable ones null, the counts 0) for an event
 * that is no connection's (route "control": a live policy change); add fields, then emit it. */
cJSON *audit_line_start(const proxy_server *s, const char *route, const char *decision);
void audit_line_emit(cJSON *o); /* writes the line and frees o */

#endif
