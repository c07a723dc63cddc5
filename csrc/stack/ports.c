/* The `ports` option: more of a stack's ports published on the host's 127.0.0.1 than the agent's,
 * with a host port the caller may choose. socat relays one port per process, so each port gets a
 * forwarder of its own (plan.c), on the publish network and the sandbox network like the agent's:
 * the sandbox stays reachable only through 127.0.0.1. An entry naming the agent's own port only
 * chooses the agent forwarder's host port. Pure data. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "stack/model.h"
#include "stack/options.h"
#include "util/keys.h"

static const char *const PORT_KEYS[] = {SS_OPTIONS_PORT(SS_OPTION_NAME) NULL};

const char *const *ss_stack_port_keys(void) { return PORT_KEYS; }

/* A refused value of ports[i] (field "" for the entry, else ".port", ".host_port", ".service"). */
static int fail_at(ss_error *err, int i, const char *field, const char *fmt, const char *detail) {
  char option[48];
  snprintf(option, sizeof option, "ports[%d]%s", i + 1, field);
  ss_error_set(err, "compose", "invalid_option", fmt, option, detail ? detail : "");
  ss_error_field_str(err, "option", option);
  return -1;
}

static int fail(ss_error *err, int i, const char *fmt, const char *detail) { return fail_at(err, i, "", fmt, detail); }

/* A value of the wrong type for ports[i] or one of its fields: raised by the binding. */
static int wrong_type(ss_error *err, int i, const char *field, const char *wanted, const cJSON *v) {
  char option[48];
  snprintf(option, sizeof option, "ports[%d]%s", i + 1, field);
  return ss_stack_fail_type(err, option, wanted, v);
}

static int port_number(const cJSON *v) {
  return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= 1 &&
                 v->valuedouble <= 65535
             ? (int)v->valuedouble
             : 0;
}

static int find(const ss_stack_model *m, const char *name) {
  for (int i = 0; i < m->nsvc; i++)
    if (strcmp(m->svc[i].name, name) == 0) return i;
  return -1;
}

/* One entry: a port number (of the sandbox) or { port =, host_port =, service = }. */
static int read_entry(const cJSON *e, int i, const ss_stack_model *m, ss_port *out, ss_error *err) {
  memset(out, 0, sizeof *out);
  out->svc = m->sandbox_idx;
  if (cJSON_IsNumber(e)) {
    if (!(out->port = port_number(e))) return fail(err, i, "%s must be a port 1-65535 or a table%s", NULL);
    return 0;
  }
  if (!cJSON_IsObject(e)) return wrong_type(err, i, "", "a port number or a table", e);
  for (const cJSON *c = e->child; c; c = c->next) {
    if (c->string && ss_key_allowed(PORT_KEYS, c->string)) continue;
    char hint[SS_KEY_MAX + 32] = "", what[40];
    if (c->string) ss_key_hint(PORT_KEYS, c->string, hint, sizeof hint);
    snprintf(what, sizeof what, "ports[%d]", i + 1);
    ss_error_set(err, "usage", "unknown_option", SS_UNKNOWN_OPTION_FMT, what, c->string ? c->string : "?", hint);
    ss_error_field_str(err, "option", c->string ? c->string : "?");
    return -1;
  }
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "port");
  if (p && !cJSON_IsNumber(p)) return wrong_type(err, i, ".port", "a port number", p);
  if (!(out->port = port_number(p)))
    return fail_at(err, i, ".port", "%s must be a number 1-65535%s", NULL);
  const cJSON *hp = cJSON_GetObjectItemCaseSensitive(e, "host_port");
  if (hp && !cJSON_IsNumber(hp)) return wrong_type(err, i, ".host_port", "a port number", hp);
  if (hp && !(out->host_port = port_number(hp))) return fail_at(err, i, ".host_port", "%s must be a number 1-65535%s", NULL);
  const cJSON *svc = cJSON_GetObjectItemCaseSensitive(e, "service");
  if (svc) {
    if (!cJSON_IsString(svc)) return wrong_type(err, i, ".service", "a service name", svc);
    out->svc = find(m, svc->valuestring);
    if (out->svc < 0 || m->svc[out->svc].added) return fail_at(err, i, ".service", "%s names no service of this stack%s", NULL);
  }
  return 0;
}

int ss_stack_check_ports(const cJSON *opts, ss_stack_model *m, ss_error *err) {
  const cJSON *ports = cJSON_GetObjectItemCaseSensitive(opts, "ports");
  m->nports = 0;
  m->agent_host_port = 0;
  if (!ports) return 0;
  if (!ss_is_list(ports))
    return ss_stack_fail_type(err, "ports", "a list of ports or { port =, host_port =, service = }", ports);
  int i = 0, agent_seen = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, ports) {
    ss_port p;
    if (read_entry(e, i, m, &p, err)) return -1;
    if (p.svc == m->sandbox_idx && p.port == m->agent_port) { /* the agent's own forwarder */
      if (agent_seen) return fail(err, i, "%s: the agent's port is listed twice%s", NULL);
      agent_seen = 1;
      m->agent_host_port = p.host_port;
    } else {
      for (int k = 0; k < m->nports; k++)
        if (m->ports[k].svc == p.svc && m->ports[k].port == p.port)
          return fail(err, i, "%s: that service's port is listed twice%s", NULL);
      if (m->nports == SS_STACK_MAX_PORTS) return fail(err, i, "%s: at most 16 ports besides the agent's%s", NULL);
      const ss_svc *s = &m->svc[p.svc];
      if (s->is_sandbox) snprintf(p.forwarder, sizeof p.forwarder, "%s-%d", m->forwarder_name, p.port);
      else snprintf(p.forwarder, sizeof p.forwarder, "%s-%s-%d", m->forwarder_name, s->name, p.port);
      if (find(m, p.forwarder) >= 0) {
        ss_error_set(err, "compose", "duplicate_service",
                     "ports[%d] publishes through a forwarder named '%s', the name of a service: rename the service",
                     i + 1, p.forwarder);
        ss_error_field_str(err, "service", p.forwarder);
        return -1;
      }
      m->ports[m->nports++] = p;
    }
    i++;
  }
  for (int a = 0; a < m->nports; a++) { /* a chosen host port once */
    int hp = m->ports[a].host_port;
    if (hp && hp == m->agent_host_port) return fail_at(err, a, ".host_port", "%s is the agent's too%s", NULL);
    for (int b = a + 1; hp && b < m->nports; b++)
      if (m->ports[b].host_port == hp) return fail_at(err, b, ".host_port", "%s is chosen twice%s", NULL);
  }
  return 0;
}

static cJSON *entry(const char *service, int port, int host_port, const char *forwarder) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "service", service);
  cJSON_AddNumberToObject(o, "port", port);
  if (host_port) cJSON_AddNumberToObject(o, "host_port", host_port);
  cJSON_AddStringToObject(o, "forwarder", forwarder);
  return o;
}

void ss_stack_plan_ports(cJSON *plan, const ss_stack_model *m) {
  cJSON *out = cJSON_AddArrayToObject(plan, "ports");
  cJSON_AddItemToArray(out, entry(m->sandbox_name, m->agent_port, m->agent_host_port, m->forwarder_name));
  int chosen = m->agent_host_port != 0;
  for (int i = 0; i < m->nports; i++) {
    const ss_port *p = &m->ports[i];
    cJSON_AddItemToArray(out, entry(m->svc[p->svc].name, p->port, p->host_port, p->forwarder));
    chosen |= p->host_port != 0;
  }
  if (!chosen) return;
  /* what the engine publishes now, read before anything is made: a chosen port another container
   * holds is refused there (docker/ports.lua), not at the forwarder's start */
  cJSON *r = cJSON_AddObjectToObject(plan, "port_check");
  cJSON_AddStringToObject(r, "method", "GET");
  cJSON_AddStringToObject(r, "path", "/containers/json");
}
