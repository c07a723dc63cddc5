/* The ask hook. Under a policy with ask = true, a request that no rule admits (its host and port
 * named by none) is not refused at once: the connection is held, without reading on, while the
 * host lists the pending asks and answers one (control.c), up to the policy's ask_timeout. An
 * allow resumes the route where the refusal would have been (through the function that route
 * handed ask_hold, so this file names no route) (and, remembered for the session,
 * adds { host, port } to the policy in force); a deny or the timeout answers with a refusal as
 * readable as the policy's own. The server's ask table owns each entry; the held connection
 * points at it and it at the connection, so the first of answer, timeout or close (the client
 * leaving, a drain, a policy swap) unlinks and frees it, and a later answer finds no such id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "proxy/route/ask.h"
#include "proxy/audit.h"
#include "proxy/conn.h"
#include "proxy/control/live_policy.h"
#include "proxy/route/reply.h"
#include "proxy/server.h"

struct ask_entry {
  uint64_t id;
  proxy_conn *conn;
  double at; /* Unix seconds, when it was held */
  ask_resume_fn resume; /* the route that held it, to go on after an allow */
  ask_entry *prev, *next;
};

static double now_unix(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

/* What the ask is about, as the list and the audit say it: "https" for a CONNECT tunnel (the
 * proxy sees only host and port), "http" for a forwarded request (method and path too). */
static const char *service(const proxy_conn *c) { return c->kind == KIND_CONNECT ? "https" : "http"; }

static void unlink_entry(proxy_conn *c) {
  ask_entry *e = c->route;
  ask_table *t = &c->srv->asks;
  if (e->prev) e->prev->next = e->next;
  else t->head = e->next;
  if (e->next) e->next->prev = e->prev;
  t->n--;
  c->route = NULL;
  free(e);
}

/* A held request's ask goes when its connection ends (its client left, a drain, the deadline). */
static void ask_drop(proxy_conn *c) {
  if (c->route) unlink_entry(c);
}

/* One audit line per ask event (route "ask"): held, allow, deny or timeout, with who answered. */
static void audit_ask(const proxy_conn *c, uint64_t id, const char *decision, const char *by, const char *reason,
                      const char *remember) {
  cJSON *o = audit_line_start(c->srv, "ask", decision);
  if (!o) return;
  cJSON_ReplaceItemInObjectCaseSensitive(o, "host", cJSON_CreateString(c->host));
  cJSON_ReplaceItemInObjectCaseSensitive(o, "port", cJSON_CreateNumber(c->port));
  cJSON_ReplaceItemInObjectCaseSensitive(o, "method", cJSON_CreateString(c->method));
  if (c->kind != KIND_CONNECT) cJSON_ReplaceItemInObjectCaseSensitive(o, "path", cJSON_CreateString(c->path));
  cJSON_AddNumberToObject(o, "ask", (double)id);
  cJSON_AddNumberToObject(o, "conn", (double)c->id);
  cJSON_AddStringToObject(o, "service", service(c));
  if (by) cJSON_AddStringToObject(o, "by", by);
  if (reason && reason[0]) cJSON_AddStringToObject(o, "reason", reason);
  if (remember) cJSON_AddStringToObject(o, "remember", remember);
  audit_line_emit(o);
}

/* While held: bytes the client sends on (a body, an early ClientHello) wait with the head for the
 * route; reading stops once the buffer's bound is reached (the deadline still ends it). A read
 * that crosses the bound is kept whole, so the buffer holds at most one read past it: dropping
 * its tail would send the destination a body with a gap. The client's close drops the ask
 * (conn_close). The append may move the buffer, so the parsed head (which points into it) is
 * read again before the route goes on (resume). */
static void held_data(proxy_conn *c, char *base, size_t n) {
  if (n > ss_buf_room(&c->in)) c->in.limit = c->in.len + n;
  int kept = ss_buf_append(&c->in, base, n);
  free(base);
  if (kept != SS_BUF_OK) return conn_close(c);
  if (!ss_buf_room(&c->in)) uv_read_stop((uv_stream_t *)&c->client);
}

static void held_timeout(proxy_conn *c) {
  uint64_t id = ((ask_entry *)c->route)->id;
  unlink_entry(c);
  snprintf(c->ask_by, sizeof c->ask_by, "timeout");
  audit_ask(c, id, "deny", "timeout", NULL, NULL);
  char msg[SS_HOST_MAX + 200];
  snprintf(msg, sizeof msg, "no rule admits %s to %s:%d and the host did not answer the ask in time (ask_timeout)",
           c->kind == KIND_CONNECT ? "a tunnel" : c->method, c->host, c->port);
  reply_policy(c, "deny", "ask_timeout", 0, msg);
}

static const conn_handlers held = {
    .client_data = held_data, .deadline = held_timeout, .close = ask_drop, .seal = conn_seal_unadmitted};

int ask_hold(proxy_conn *c, const ss_policy *p, const ss_policy_verdict *v, ask_resume_fn resume) {
  proxy_server *s = c->srv;
  if (!p->ask || v->reason != SS_DENY_HOST || c->ask_granted || (c->on == &held && c->route) || s->draining) return 0;
  if (s->asks.n >= ASK_MAX_PENDING) return 0;
  ask_entry *e = calloc(1, sizeof *e);
  if (!e) return 0;
  e->id = ++s->asks.next_id;
  e->conn = c;
  e->at = now_unix();
  e->resume = resume;
  e->next = s->asks.head;
  if (e->next) e->next->prev = e;
  s->asks.head = e;
  s->asks.n++;
  c->decision = "ask";
  conn_enter(c, ST_ASK, &held);
  c->route = e;
  conn_set_deadline(c, (unsigned)p->ask_timeout * 1000u);
  conn_read_client(c); /* to see the client leave */
  audit_ask(c, e->id, "ask", NULL, NULL, NULL);
  return 1;
}

cJSON *ask_list(const proxy_server *s) {
  cJSON *a = cJSON_CreateArray();
  const ask_entry *last = s->asks.head;
  while (last && last->next) last = last->next;
  for (const ask_entry *e = last; a && e; e = e->prev) { /* oldest first */
    const proxy_conn *c = e->conn;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)e->id);
    cJSON_AddStringToObject(o, "host", c->host);
    cJSON_AddNumberToObject(o, "port", c->port);
    cJSON_AddStringToObject(o, "method", c->method);
    if (c->kind == KIND_CONNECT) cJSON_AddNullToObject(o, "path");
    else cJSON_AddStringToObject(o, "path", c->path);
    cJSON_AddStringToObject(o, "service", service(c));
    cJSON_AddNumberToObject(o, "at", e->at);
    cJSON_AddItemToArray(a, o);
  }
  return a;
}

/* The policy in force with { host, port } added, swapped in; 0 when it is. */
static int remember(proxy_server *s, const proxy_conn *c) {
  cJSON *r = ss_policy_render(s->policy);
  cJSON *allow = r ? cJSON_GetObjectItemCaseSensitive(r, "allow") : NULL;
  cJSON *rule = cJSON_CreateObject();
  if (!allow || !rule) {
    cJSON_Delete(r);
    cJSON_Delete(rule);
    return -1;
  }
  cJSON_AddStringToObject(rule, "host", c->host);
  cJSON_AddNumberToObject(rule, "port", c->port);
  cJSON_AddItemToArray(allow, rule);
  ss_error e;
  ss_error_init(&e);
  ss_policy *next = ss_policy_from_json(r, &e);
  cJSON_Delete(r);
  ss_error_clear(&e);
  if (!next) return -1; /* a full policy (256 rules): the answer still allows this once */
  char old_digest[65] = "", new_digest[65] = "";
  size_t closed = live_policy_swap(s, next, GRANTS_KEEP, old_digest, new_digest); /* a rule added: grants stay */
  if (closed == (size_t)-1) return -1;
  cJSON *o = audit_line_start(s, "control", "allow");
  if (o) {
    cJSON_AddStringToObject(o, "event", "policy_changed");
    cJSON_AddStringToObject(o, "old_digest", old_digest);
    cJSON_AddStringToObject(o, "new_digest", new_digest);
    cJSON_AddNumberToObject(o, "closed", (double)closed);
    cJSON_AddStringToObject(o, "by", c->ask_by);
    audit_line_emit(o);
  }
  return 0;
}

/* The route goes on (route: the one that held it) as if the head had just been read, with the
 * handshake deadline again. */
static const conn_handlers resuming = {.seal = conn_seal_unadmitted};

static void resume(proxy_conn *c, ask_resume_fn route) {
  uv_read_stop((uv_stream_t *)&c->client);
  const proxy_config *cfg = c->srv->cfg;
  ph_limits lim = {cfg->max_line, cfg->max_head, cfg->max_headers};
  c->scanned = 0;
  memset(&c->req, 0, sizeof c->req);
  if (ph_parse(c->in.data, c->in.len, &lim, &c->scanned, &c->req) != PH_DONE) { /* it parsed before: cannot be */
    c->end = "internal";
    return conn_close(c);
  }
  c->ask_granted = 1;
  c->decision = NULL;
  conn_enter(c, ST_HEAD, &resuming);
  conn_set_deadline(c, c->srv->cfg->handshake_ms);
  route(c);
}

/* The other asks for the host and port an answer just added to the policy: the rule admits them
 * now, so they go on as allowed by the same answer (each with its audit line). resume() never
 * frees another connection's entry, so the walk may keep the next one. */
static void allow_same(proxy_server *s, const proxy_conn *c, const char *by, const char *reason) {
  for (ask_entry *e = s->asks.head, *next; e; e = next) {
    next = e->next;
    proxy_conn *o = e->conn;
    if (o == c || o->port != c->port || strcmp(o->host, c->host) != 0) continue;
    uint64_t id = e->id;
    ask_resume_fn route = e->resume;
    unlink_entry(o);
    snprintf(o->ask_by, sizeof o->ask_by, "%s", by);
    audit_ask(o, id, "allow", by, reason, "session");
    resume(o, route);
  }
}

int ask_answer(proxy_server *s, uint64_t id, int allow, int remember_session, const char *reason, const char *by,
               int *remembered, char *why, size_t why_len) {
  ask_entry *e = s->asks.head;
  while (e && e->id != id) e = e->next;
  *remembered = 0;
  if (!e) {
    snprintf(why, why_len, "no pending ask %llu: it was answered, timed out, or its client left (list the pending "
             "ones with egress_asks)", (unsigned long long)id);
    return -1;
  }
  proxy_conn *c = e->conn;
  ask_resume_fn route = e->resume;
  unlink_entry(c); /* frees e */
  snprintf(c->ask_by, sizeof c->ask_by, "%s", by);
  if (allow) {
    *remembered = remember_session && remember(s, c) == 0;
    audit_ask(c, id, "allow", by, reason, *remembered ? "session" : "once");
    if (*remembered) allow_same(s, c, by, reason);
    resume(c, route);
    return 0;
  }
  audit_ask(c, id, "deny", by, reason, NULL);
  char msg[SS_HOST_MAX + SS_PATH_MAX + ASK_REASON_MAX + ASK_BY_MAX + 120];
  snprintf(msg, sizeof msg, "%s %s on %s:%d was denied by %s when asked%s%s", c->method,
           c->kind == KIND_CONNECT ? "tunnel" : c->path, c->host, c->port, by, reason && reason[0] ? ": " : "",
           reason ? reason : "");
  reply_policy(c, "deny", "ask_denied", 0, msg);
  return 0;
}
