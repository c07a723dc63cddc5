/* The Swarm plan: the stack's own plan (plan.c) drafted once, its containers and networks
 * re-expressed for a swarm's manager (swarm_service.c), then finished, so that the forwarder and
 * its publish network are byte for byte the plan's (they are made on the chosen node's engine)
 * and every create the executor sends is a finished request. Pure data. */
#include <stdio.h>
#include <string.h>

#include "stack/requests.h"
#include "stack/session_requests.h"
#include "stack/swarm.h"


static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

int ss_swarm_check_options(const cJSON *opts, ss_error *err) {
  if (get(opts, "runtime"))
    return ss_swarm_refuse(err, "runtime", "a Swarm service cannot choose an engine runtime; make it the nodes' "
                           "default-runtime instead");
  if (get(opts, "subnet_pool"))
    return ss_swarm_refuse(err, "subnet_pool", "overlay subnets come from the swarm's own pool (docker swarm init "
                           "--default-addr-pool)");
  if (get(opts, "ports"))
    return ss_swarm_refuse(err, "ports", "on a swarm the session publishes its agent's port alone (on the node's "
                           "127.0.0.1); publish more ports with sandstack.docker");
  const cJSON *pull = get(opts, "pull");
  if (cJSON_IsString(pull) && strcmp(pull->valuestring, "missing") != 0)
    return ss_swarm_refuse(err, "pull", "on a swarm the node's agent pulls a task's image itself when it is absent; "
                           "only \"missing\" can be kept");
  const cJSON *net = get(opts, "network"), *drv = get(net, "driver"), *o = get(net, "options");
  if ((cJSON_IsString(drv) && strcmp(drv->valuestring, "bridge") != 0 && strcmp(drv->valuestring, "overlay") != 0) ||
      (cJSON_IsObject(o) && o->child))
    return ss_swarm_refuse(err, "network", "on a swarm the sandbox network is an overlay; a driver or driver options "
                           "of the bridge have no meaning there");
  return 0;
}

/* A finished create: the manager's path and the body as the JSON text it receives. */
static cJSON *create(const char *path, const cJSON *body) {
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "method", "POST");
  cJSON_AddStringToObject(r, "path", path);
  char *text = cJSON_PrintUnformatted(body);
  cJSON_AddStringToObject(r, "body_json", text ? text : "{}");
  cJSON_free(text);
  return r;
}

/* The planned bridge network as an overlay: same name and labels, no bridge options (an overlay
 * has its own isolation: an internal one has no gateway at all). The sandbox network is
 * attachable, so that the forwarder, a standalone container on the chosen node, can join it. */
static cJSON *overlay(const cJSON *n) {
  const cJSON *b = get(n, "body");
  const char *key = get(n, "key")->valuestring;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "Name", cJSON_Duplicate(get(b, "Name"), 1));
  cJSON_AddStringToObject(o, "Driver", "overlay");
  cJSON_AddBoolToObject(o, "Internal", cJSON_IsTrue(get(b, "Internal")));
  cJSON_AddBoolToObject(o, "Attachable", strcmp(key, "sbx") == 0);
  cJSON_AddBoolToObject(o, "EnableIPv6", 0);
  cJSON_AddItemToObject(o, "Labels", cJSON_Duplicate(get(b, "Labels"), 1));
  cJSON_AddBoolToObject(o, "CheckDuplicate", 1);
  cJSON *entry = cJSON_CreateObject();
  cJSON_AddStringToObject(entry, "key", key);
  cJSON_AddItemToObject(entry, "name", cJSON_Duplicate(get(n, "name"), 1));
  cJSON_AddItemToObject(entry, "create", create("/networks/create", o));
  cJSON_Delete(o);
  return entry;
}

static void add_overlays(cJSON *shape, const cJSON *draft, cJSON *names) {
  cJSON *out = cJSON_AddArrayToObject(shape, "overlays");
  const cJSON *n;
  cJSON_ArrayForEach(n, get(draft, "networks")) {
    if (strcmp(get(n, "key")->valuestring, "pub") == 0) continue; /* the forwarder's, on the node */
    cJSON_AddItemToArray(names, cJSON_Duplicate(get(n, "name"), 1));
    cJSON_AddItemToArray(out, overlay(n));
  }
}

static double host_number(const cJSON *c, const char *k) {
  const cJSON *v = get(get(get(c, "body"), "HostConfig"), k);
  return cJSON_IsNumber(v) && v->valuedouble > 0 ? v->valuedouble : 0;
}

/* One request of the manager's table (session_requests.c) for one name; args as that table's. */
static cJSON *manager_request(const char *action, const char *name, cJSON *args) {
  const char *why = NULL;
  cJSON *names = NULL;
  if (name) {
    names = cJSON_CreateArray();
    cJSON_AddItemToArray(names, cJSON_CreateString(name));
  }
  cJSON *list = ss_session_requests(action, names, args, &why);
  cJSON_Delete(names);
  cJSON_Delete(args);
  cJSON *r = list ? cJSON_DetachItemFromArray(list, 0) : NULL;
  cJSON_Delete(list);
  return r ? r : cJSON_CreateObject();
}

/* The tasks of one service, by its name (the manager resolves it): each service's own list, so
 * that one batch reads every service a wait is for. */
static cJSON *tasks_request(const char *service_name) {
  cJSON *args = cJSON_CreateObject();
  const char *one[] = {service_name};
  cJSON_AddItemToObject(args, "services", cJSON_CreateStringArray(one, 1));
  return manager_request("list_tasks", NULL, args);
}

/* A service's entry: what the executor orders and waits by, its finished create and the reads
 * of its tasks and of the spec the manager kept. */
static cJSON *service_entry(const cJSON *c, const cJSON *spec) {
  cJSON *e = cJSON_CreateObject();
  static const char *const copied[] = {"service", "name", "role", "image", "depends_on", "check", "check_timeout",
                                       "healthcheck", "ready_log", "ready_times", "ready_port"};
  for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++) {
    const cJSON *v = get(c, copied[i]);
    if (v) cJSON_AddItemToObject(e, copied[i], cJSON_Duplicate(v, 1));
  }
  cJSON_AddItemToObject(e, "create", create("/services/create", spec));
  const char *name = get(c, "name")->valuestring;
  cJSON_AddItemToObject(e, "tasks", tasks_request(name));
  cJSON_AddItemToObject(e, "inspect", manager_request("inspect_service", name, NULL));
  return e;
}

/* Swarm places by reservations. The whole session lives on one node, so the first service Swarm
 * places (the first in dependency order) reserves what the session's containers, the forwarder
 * included, may use together; the others, pinned to that node, reserve nothing more. */
static cJSON *reservation(double cpus, double memory) {
  cJSON *r = cJSON_CreateObject();
  if (cpus > 0) cJSON_AddNumberToObject(r, "NanoCPUs", cpus);
  if (memory > 0) cJSON_AddNumberToObject(r, "MemoryBytes", memory);
  return r;
}

static void reserve(cJSON *spec, const cJSON *res) {
  if (!res->child) return;
  cJSON *task = cJSON_GetObjectItemCaseSensitive(spec, "TaskTemplate");
  cJSON *r = cJSON_GetObjectItemCaseSensitive(task, "Resources");
  if (!r) r = cJSON_AddObjectToObject(task, "Resources");
  cJSON_AddItemToObject(r, "Reservations", cJSON_Duplicate(res, 1));
}

/* The services in dependency order (the forwarder left out), each spec finished. */
static int add_services(cJSON *shape, const cJSON *draft, const cJSON *overlays, const ss_swarm_ctx *sw, ss_error *err) {
  cJSON *out = cJSON_AddArrayToObject(shape, "services");
  const cJSON *volumes = get(draft, "volumes"), *c;
  double cpus = 0, memory = 0;
  int any_nnp = 0;
  cJSON *first = NULL;
  cJSON_ArrayForEach(c, get(draft, "containers")) {
    cpus += host_number(c, "NanoCpus");
    memory += host_number(c, "Memory");
  }
  cJSON *res = reservation(cpus, memory);
  cJSON_ArrayForEach(c, get(draft, "containers")) {
    if (strcmp(get(c, "role")->valuestring, "forwarder") == 0) continue;
    int nnp = 0;
    /* the first service is placed by Swarm: only later ones are pinned to its node */
    ss_swarm_ctx one = {.constraints = sw->constraints, .node_id = first ? sw->node_id : NULL};
    cJSON *spec = ss_swarm_service(c, overlays, volumes, &one, &nnp, err);
    if (!spec) {
      cJSON_Delete(res);
      return -1;
    }
    any_nnp |= nnp;
    if (!first) reserve(spec, res);
    cJSON *e = service_entry(c, spec);
    cJSON_Delete(spec);
    cJSON_AddItemToArray(out, e);
    if (!first) first = e;
  }
  cJSON_AddBoolToObject(shape, "nnp", any_nnp);
  cJSON_AddItemToObject(shape, "reservation", res);
  return 0;
}

/* What stays the plan's own, made on the chosen node: the forwarder and its publish network. */
static void add_node_objects(cJSON *shape, const cJSON *plan) {
  cJSON *locals = cJSON_AddArrayToObject(shape, "local_networks");
  const cJSON *n, *c;
  cJSON_ArrayForEach(n, get(plan, "networks"))
    if (strcmp(get(n, "key")->valuestring, "pub") == 0) cJSON_AddItemToArray(locals, cJSON_Duplicate(n, 1));
  cJSON_ArrayForEach(c, get(plan, "containers"))
    if (strcmp(get(c, "role")->valuestring, "forwarder") == 0)
      cJSON_AddItemToObject(shape, "forwarder", cJSON_Duplicate(c, 1));
  cJSON *vols = cJSON_AddArrayToObject(shape, "volumes");
  cJSON_ArrayForEach(n, get(plan, "volumes")) cJSON_AddItemToArray(vols, cJSON_Duplicate(get(n, "name"), 1));
}

/* The node check (lua/sandstack/swarm/verify.lua): a probe made on the chosen node's engine from
 * the forwarder's image, with no security option of its own, on the session's sandbox overlay, so
 * that what it reads is what the node gives any container there. */
static void add_node_check(cJSON *shape, const cJSON *plan, const ss_stack_model *m) {
  char name[160], path[240], net[140];
  snprintf(name, sizeof name, "%s-nodecheck", m->project);
  snprintf(net, sizeof net, "%s-sbx", m->project);
  cJSON *body = cJSON_CreateObject();
  cJSON_AddStringToObject(body, "Image", m->forwarder_image);
  const char *ep[] = {"socat", "-u", "STDIN", "STDOUT"};
  cJSON_AddItemToObject(body, "Entrypoint", cJSON_CreateStringArray(ep, 4));
  cJSON_AddBoolToObject(body, "OpenStdin", 1);
  cJSON *labels = cJSON_Duplicate(get(plan, "labels"), 1);
  cJSON_AddStringToObject(labels, "io.sandstack.role", "node-check");
  cJSON_AddItemToObject(body, "Labels", labels);
  cJSON *hc = cJSON_AddObjectToObject(body, "HostConfig");
  const char *all = "ALL";
  cJSON_AddItemToObject(hc, "CapDrop", cJSON_CreateStringArray(&all, 1));
  cJSON_AddStringToObject(hc, "NetworkMode", net);
  cJSON_AddStringToObject(cJSON_AddObjectToObject(hc, "RestartPolicy"), "Name", "no");
  cJSON *chk = cJSON_AddObjectToObject(shape, "node_check");
  cJSON_AddStringToObject(chk, "name", name);
  snprintf(path, sizeof path, "/containers/create?name=%s", name);
  cJSON_AddItemToObject(chk, "create", create(path, body));
  cJSON_Delete(body);
  cJSON *start = cJSON_AddObjectToObject(chk, "start");
  snprintf(path, sizeof path, "/containers/%s/start", name);
  cJSON_AddStringToObject(start, "method", "POST");
  cJSON_AddStringToObject(start, "path", path);
  cJSON_AddItemToArray(cJSON_AddArrayToObject(start, "ok"), cJSON_CreateNumber(304));
  /* removed as every container of a stack is (requests.c): forced, 404 done */
  cJSON *names = cJSON_CreateArray();
  cJSON_AddItemToArray(names, cJSON_CreateString(name));
  cJSON *rm = ss_stack_removals(names, NULL, NULL);
  cJSON_Delete(names);
  cJSON_AddItemToObject(chk, "remove", cJSON_DetachItemFromArray(cJSON_GetObjectItemCaseSensitive(rm, "containers"), 0));
  cJSON_Delete(rm);
}

/* The manager's reads a start begins with: that it is a manager (/info), and whether the
 * project has services already (a live key's); with a node id, that node's inspect. */
static void add_reads(cJSON *shape, const ss_stack_model *m, const char *node_id) {
  cJSON *reads = cJSON_AddObjectToObject(shape, "reads");
  cJSON_AddItemToObject(reads, "info", manager_request("info", NULL, NULL));
  char label[160];
  snprintf(label, sizeof label, "io.sandstack.project=%s", m->project);
  cJSON *args = cJSON_CreateObject();
  cJSON_AddStringToObject(args, "label", label);
  cJSON_AddItemToObject(reads, "existing", manager_request("list_services", NULL, args));
  if (node_id) cJSON_AddItemToObject(reads, "node", manager_request("inspect_node", node_id, NULL));
}

/* A node id goes into a constraint: the manager's ids are letters and digits. */
static int check_node_id(const char *id, ss_error *err) {
  size_t n = strlen(id);
  int ok = n > 0 && n <= 64;
  for (size_t i = 0; ok && i < n; i++) ok = (id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
                                           (id[i] >= '0' && id[i] <= '9');
  if (ok) return 0;
  ss_error_set(err, "engine", "bad_answer", "the manager named a node id that is not letters and digits");
  return -1;
}

cJSON *ss_swarm_plan(const ss_stack_model *m, const ss_stack_ctx *ctx, const ss_swarm_ctx *sw, ss_error *err) {
  if (ss_swarm_check_options(m->opts, err) != 0) return NULL;
  if (sw->node_id && check_node_id(sw->node_id, err) != 0) return NULL;
  cJSON *plan = ss_stack_plan_draft(m, ctx, err);
  if (!plan) return NULL;
  cJSON *shape = cJSON_CreateObject();
  cJSON_AddStringToObject(shape, "project", m->project);
  cJSON *overlays = cJSON_CreateArray();
  add_overlays(shape, plan, overlays);
  int bad = add_services(shape, plan, overlays, sw, err);
  cJSON_Delete(overlays);
  if (bad) {
    cJSON_Delete(shape);
    cJSON_Delete(plan);
    return NULL;
  }
  ss_stack_plan_finish(plan);
  add_node_objects(shape, plan);
  add_node_check(shape, plan, m);
  add_reads(shape, m, sw->node_id);
  cJSON_AddItemToObject(plan, "swarm", shape);
  return plan;
}
