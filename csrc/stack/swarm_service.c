/* One drafted container of the stack's plan as a Swarm service spec (API 1.41). Every field the
 * plan may put in a container's Config or HostConfig has a rule below; a field without one is
 * refused, naming it, so a new field in plan.c cannot reach a swarm silently dropped. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stack/swarm.h"

int ss_swarm_refuse(ss_error *err, const char *option, const char *fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ss_error_set(err, "compose", "invalid_option", "%s: %s", option, msg);
  ss_error_field_str(err, "option", option);
  return -1;
}

/* The fields with a rule: those copied into the ContainerSpec and those read for the task. */
static const char *const CONFIG_RULES[] = {"Image", "Entrypoint", "Cmd", "Env", "User", "WorkingDir", "Labels",
                                           "Healthcheck", "ExposedPorts", "HostConfig", "NetworkingConfig", NULL};
static const char *const HOST_RULES[] = {"NanoCpus", "Memory", "PidsLimit", "CapDrop", "CapAdd", "SecurityOpt",
                                         "RestartPolicy", "Tmpfs", "Mounts", "ReadonlyRootfs", "Dns", "ExtraHosts",
                                         "NetworkMode", NULL};

static int listed(const char *const *names, const char *s) {
  for (int i = 0; names[i]; i++)
    if (strcmp(names[i], s) == 0) return 1;
  return 0;
}

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* A copy of v under k when it is a non-empty list: an empty list means the same as none here, and
 * the manager keeps what it is given. */
static void add_list(cJSON *to, const char *k, const cJSON *v) {
  if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0) cJSON_AddItemToObject(to, k, cJSON_Duplicate(v, 1));
}

static void add_copy(cJSON *to, const char *k, const cJSON *v) {
  if (v) cJSON_AddItemToObject(to, k, cJSON_Duplicate(v, 1));
}

int ss_swarm_tmpfs_options(const char *path, const char *text, cJSON **out, ss_error *err) {
  double size = -1;
  long mode = -1;
  *out = NULL;
  for (const char *p = text ? text : ""; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char part[128];
    if (len >= sizeof part)
      return ss_swarm_refuse(err, "tmpfs", "%s: an option of %zu bytes has no Swarm form", path, len);
    memcpy(part, p, len);
    part[len] = '\0';
    p += len + (end ? 1 : 0);
    char *v = strchr(part, '=');
    if (v) *v++ = '\0';
    if (strcmp(part, "size") == 0 && v) {
      char *unit = v;
      while (isdigit((unsigned char)*unit)) unit++;
      double mult = 0;
      char u = (char)tolower((unsigned char)*unit);
      if (u == '\0' || u == 'b') mult = 1;
      else if (u == 'k') mult = 1024.0;
      else if (u == 'm') mult = 1024.0 * 1024;
      else if (u == 'g') mult = 1024.0 * 1024 * 1024;
      if (unit == v || unit - v > 15 || mult == 0 || (u != '\0' && unit[1] != '\0'))
        return ss_swarm_refuse(err, "tmpfs", "%s: size \"%s\" is not a size", path, v);
      size = strtod(v, NULL) * mult;
    } else if (strcmp(part, "mode") == 0 && v) {
      char *e = NULL;
      mode = *v ? strtol(v, &e, 8) : -1;
      if (mode < 0 || *e != '\0' || mode > 07777)
        return ss_swarm_refuse(err, "tmpfs", "%s: mode \"%s\" is not octal", path, v);
    } else if (strcmp(part, "rw") != 0) {
      return ss_swarm_refuse(err, "tmpfs", "%s: the option \"%s\" has no Swarm form (a service's tmpfs takes size "
                             "and mode)", path, part);
    }
  }
  if (size < 0 && mode < 0) return 0;
  *out = cJSON_CreateObject();
  if (size >= 0) cJSON_AddNumberToObject(*out, "SizeBytes", size);
  if (mode >= 0) cJSON_AddNumberToObject(*out, "Mode", (double)mode);
  return 0;
}

/* The drafted volume entry named source (its body's labels and driver go with the mount: a
 * service makes its volume on the node where its task runs). */
static const cJSON *volume_body(const cJSON *volumes, const char *source) {
  const cJSON *v;
  cJSON_ArrayForEach(v, volumes) {
    const cJSON *n = get(v, "name");
    if (cJSON_IsString(n) && strcmp(n->valuestring, source) == 0) return get(v, "body");
  }
  return NULL;
}

static cJSON *volume_mount(const cJSON *m, const cJSON *volumes) {
  const char *source = get(m, "Source")->valuestring;
  cJSON *out = cJSON_CreateObject();
  cJSON_AddStringToObject(out, "Type", "volume");
  cJSON_AddStringToObject(out, "Source", source);
  add_copy(out, "Target", get(m, "Target"));
  cJSON_AddBoolToObject(out, "ReadOnly", cJSON_IsTrue(get(m, "ReadOnly")));
  cJSON *vo = cJSON_CreateObject();
  if (cJSON_IsTrue(get(get(m, "VolumeOptions"), "NoCopy"))) cJSON_AddBoolToObject(vo, "NoCopy", 1);
  const cJSON *vb = volume_body(volumes, source);
  if (vb) {
    add_copy(vo, "Labels", get(vb, "Labels"));
    const cJSON *drv = get(vb, "Driver"), *dopts = get(vb, "DriverOpts");
    if (drv || dopts) {
      cJSON *dc = cJSON_AddObjectToObject(vo, "DriverConfig");
      cJSON_AddStringToObject(dc, "Name", cJSON_IsString(drv) ? drv->valuestring : "local");
      add_copy(dc, "Options", dopts);
    }
  }
  if (vo->child) cJSON_AddItemToObject(out, "VolumeOptions", vo);
  else cJSON_Delete(vo);
  return out;
}

/* The tmpfs paths in name order: the same options give the same spec. */
static int tmpfs_mounts(cJSON *out, const cJSON *tmpfs, ss_error *err) {
  const cJSON *last = NULL;
  for (;;) {
    const cJSON *next = NULL, *t;
    cJSON_ArrayForEach(t, tmpfs) {
      if (!t->string || (last && strcmp(t->string, last->string) <= 0)) continue;
      if (!next || strcmp(t->string, next->string) < 0) next = t;
    }
    if (!next) return 0;
    cJSON *o = NULL;
    if (ss_swarm_tmpfs_options(next->string, cJSON_IsString(next) ? next->valuestring : "", &o, err) != 0) return -1;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "Type", "tmpfs");
    cJSON_AddStringToObject(m, "Target", next->string);
    if (o) cJSON_AddItemToObject(m, "TmpfsOptions", o);
    cJSON_AddItemToArray(out, m);
    last = next;
  }
}

static cJSON *mounts(const cJSON *hc, const cJSON *volumes, ss_error *err) {
  cJSON *out = cJSON_CreateArray();
  const cJSON *m;
  cJSON_ArrayForEach(m, get(hc, "Mounts")) {
    const cJSON *type = get(m, "Type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "volume") != 0 || !cJSON_IsString(get(m, "Source"))) {
      ss_swarm_refuse(err, "services.volumes", "a %s mount has no place on a cluster (only named volumes)",
                      cJSON_IsString(type) ? type->valuestring : "typeless");
      cJSON_Delete(out);
      return NULL;
    }
    cJSON_AddItemToArray(out, volume_mount(m, volumes));
  }
  if (tmpfs_mounts(out, get(hc, "Tmpfs"), err) != 0) {
    cJSON_Delete(out);
    return NULL;
  }
  return out;
}

/* ExtraHosts "name:address" -> Swarm's Hosts "address name" (the /etc/hosts order). */
static cJSON *hosts(const cJSON *extra) {
  cJSON *out = cJSON_CreateArray();
  const cJSON *h;
  cJSON_ArrayForEach(h, extra) {
    const char *colon = cJSON_IsString(h) ? strchr(h->valuestring, ':') : NULL;
    if (!colon) continue;
    char line[600];
    snprintf(line, sizeof line, "%s %.*s", colon + 1, (int)(colon - h->valuestring), h->valuestring);
    cJSON_AddItemToArray(out, cJSON_CreateString(line));
  }
  return out;
}

static int security(const cJSON *hc, int *nnp, ss_error *err) {
  const cJSON *o;
  *nnp = 0;
  cJSON_ArrayForEach(o, get(hc, "SecurityOpt")) {
    const char *s = cJSON_IsString(o) ? o->valuestring : "";
    if (strcmp(s, "no-new-privileges") == 0 || strcmp(s, "no-new-privileges:true") == 0 ||
        strcmp(s, "no-new-privileges=true") == 0)
      *nnp = 1;
    else
      return ss_swarm_refuse(err, "security_opt", "\"%s\" has no Swarm form (a service takes no-new-privileges only)", s);
  }
  return 0;
}

static int known_fields(const cJSON *body, const char *service, ss_error *err) {
  char option[120];
  snprintf(option, sizeof option, "services.%s", service);
  for (const cJSON *f = body->child; f; f = f->next)
    if (!listed(CONFIG_RULES, f->string))
      return ss_swarm_refuse(err, option, "the container field %s has no Swarm form", f->string);
  for (const cJSON *f = get(body, "HostConfig") ? get(body, "HostConfig")->child : NULL; f; f = f->next) {
    if (listed(HOST_RULES, f->string)) continue;
    if (strcmp(f->string, "Runtime") == 0)
      return ss_swarm_refuse(err, "runtime", "a Swarm service cannot choose an engine runtime");
    return ss_swarm_refuse(err, option, "the host setting %s has no Swarm form", f->string);
  }
  return 0;
}

static int listed_name(const cJSON *names, const char *s) {
  const cJSON *n;
  cJSON_ArrayForEach(n, names) if (cJSON_IsString(n) && strcmp(n->valuestring, s) == 0) return 1;
  return 0;
}

/* The service's networks: its own (with its aliases) and every one it is connected to, each an
 * overlay of the stack. */
static int attach(cJSON *nets, const cJSON *overlays, const char *service, const char *name, const cJSON *endpoint,
                  ss_error *err) {
  const cJSON *n;
  cJSON_ArrayForEach(n, nets) if (strcmp(get(n, "Target")->valuestring, name) == 0) return 0;
  if (!listed_name(overlays, name))
    return ss_swarm_refuse(err, "network", "the service %s would join %s, which is not one of the stack's networks",
                           service, name);
  cJSON *a = cJSON_CreateObject();
  cJSON_AddStringToObject(a, "Target", name);
  add_list(a, "Aliases", get(endpoint, "Aliases"));
  cJSON_AddItemToArray(nets, a);
  return 0;
}

static cJSON *networks(const cJSON *c, const cJSON *overlays, ss_error *err) {
  const char *service = get(c, "service")->valuestring;
  const cJSON *body = get(c, "body"), *hc = get(body, "HostConfig");
  const cJSON *eps = get(get(body, "NetworkingConfig"), "EndpointsConfig");
  cJSON *nets = cJSON_CreateArray();
  const cJSON *mode = get(hc, "NetworkMode"), *e;
  int bad = cJSON_IsString(mode) && attach(nets, overlays, service, mode->valuestring, get(eps, mode->valuestring), err);
  cJSON_ArrayForEach(e, eps) if (!bad) bad = attach(nets, overlays, service, e->string, e, err);
  cJSON_ArrayForEach(e, get(c, "connects")) {
    const cJSON *net = get(e, "network");
    if (!bad && cJSON_IsString(net))
      bad = attach(nets, overlays, service, net->valuestring, get(get(e, "body"), "EndpointConfig"), err);
  }
  if (!bad) return nets;
  cJSON_Delete(nets);
  return NULL;
}

static cJSON *container_spec(const cJSON *body, const cJSON *hc, cJSON *ms, int nnp) {
  cJSON *cs = cJSON_CreateObject();
  add_copy(cs, "Image", get(body, "Image"));
  add_list(cs, "Command", get(body, "Entrypoint"));
  add_list(cs, "Args", get(body, "Cmd"));
  add_list(cs, "Env", get(body, "Env"));
  add_copy(cs, "User", get(body, "User"));
  add_copy(cs, "Dir", get(body, "WorkingDir"));
  add_copy(cs, "Labels", get(body, "Labels"));
  add_copy(cs, "HealthCheck", get(body, "Healthcheck"));
  add_list(cs, "CapabilityDrop", get(hc, "CapDrop"));
  add_list(cs, "CapabilityAdd", get(hc, "CapAdd"));
  add_copy(cs, "ReadOnly", get(hc, "ReadonlyRootfs"));
  if (cJSON_GetArraySize(ms) > 0) cJSON_AddItemToObject(cs, "Mounts", ms);
  else cJSON_Delete(ms);
  cJSON *h = hosts(get(hc, "ExtraHosts"));
  if (cJSON_GetArraySize(h) > 0) cJSON_AddItemToObject(cs, "Hosts", h);
  else cJSON_Delete(h);
  const cJSON *dns = get(hc, "Dns");
  if (cJSON_IsArray(dns) && cJSON_GetArraySize(dns) > 0) add_list(cJSON_AddObjectToObject(cs, "DNSConfig"), "Nameservers", dns);
  /* the engine's field since API 1.44; 1.41 drops it, and then the node's daemon must give it
   * (sandstack.swarm checks which on the node before the stack is handed out) */
  if (nnp) cJSON_AddBoolToObject(cJSON_AddObjectToObject(cs, "Privileges"), "NoNewPrivileges", 1);
  cJSON_AddNumberToObject(cs, "StopGracePeriod", 0);
  return cs;
}

static cJSON *limits(const cJSON *hc) {
  static const char *const map[][2] = {{"NanoCpus", "NanoCPUs"}, {"Memory", "MemoryBytes"}, {"PidsLimit", "Pids"}};
  cJSON *l = cJSON_CreateObject();
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    const cJSON *v = get(hc, map[i][0]);
    if (cJSON_IsNumber(v) && v->valuedouble > 0) cJSON_AddNumberToObject(l, map[i][1], v->valuedouble);
  }
  return l;
}

static cJSON *placement(const ss_swarm_ctx *sw) {
  cJSON *p = cJSON_CreateObject();
  cJSON *cons = cJSON_CreateArray();
  const cJSON *c;
  cJSON_ArrayForEach(c, sw->constraints) if (cJSON_IsString(c)) cJSON_AddItemToArray(cons, cJSON_CreateString(c->valuestring));
  if (sw->node_id) {
    char pin[128];
    snprintf(pin, sizeof pin, "node.id==%s", sw->node_id);
    cJSON_AddItemToArray(cons, cJSON_CreateString(pin));
  }
  if (cJSON_GetArraySize(cons) > 0) cJSON_AddItemToObject(p, "Constraints", cons);
  else cJSON_Delete(cons);
  return p;
}

cJSON *ss_swarm_service(const cJSON *c, const cJSON *overlays, const cJSON *volumes, const ss_swarm_ctx *sw,
                        int *nnp, ss_error *err) {
  const cJSON *body = get(c, "body"), *hc = get(body, "HostConfig");
  if (known_fields(body, get(c, "service")->valuestring, err) != 0 || security(hc, nnp, err) != 0) return NULL;
  cJSON *ms = mounts(hc, volumes, err);
  if (!ms) return NULL;
  cJSON *nets = networks(c, overlays, err);
  if (!nets) {
    cJSON_Delete(ms);
    return NULL;
  }
  cJSON *svc = cJSON_CreateObject();
  add_copy(svc, "Name", get(c, "name"));
  add_copy(svc, "Labels", get(body, "Labels"));
  cJSON *task = cJSON_AddObjectToObject(svc, "TaskTemplate");
  cJSON_AddItemToObject(task, "ContainerSpec", container_spec(body, hc, ms, *nnp));
  cJSON *l = limits(hc);
  if (l->child) cJSON_AddItemToObject(cJSON_AddObjectToObject(task, "Resources"), "Limits", l);
  else cJSON_Delete(l);
  /* a task that ends is not started again, as RestartPolicy "no" on one engine; nor moved to
   * another node when its node is lost (its session went with the node) */
  cJSON *rp = cJSON_AddObjectToObject(task, "RestartPolicy");
  cJSON_AddStringToObject(rp, "Condition", "none");
  cJSON_AddNumberToObject(rp, "MaxAttempts", 0);
  cJSON_AddItemToObject(task, "Placement", placement(sw));
  cJSON_AddItemToObject(task, "Networks", nets);
  cJSON_AddNumberToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(svc, "Mode"), "Replicated"), "Replicas", 1);
  /* no virtual IP: the kernel may have no IPVS, and nothing is published through the mesh */
  cJSON_AddStringToObject(cJSON_AddObjectToObject(svc, "EndpointSpec"), "Mode", "dnsrr");
  return svc;
}
