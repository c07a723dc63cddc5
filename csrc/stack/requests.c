/* The bodiless Engine requests of a stack's life, so that the plan holds every request a start
 * sends and Lua names none (docs/architecture.md, "the boundary"). A request object is
 *   {method, path, query?, ok?, timeout?, max_bytes?}
 * which the engine client reads as it is (csrc/lua/engine_request.c, the keyed form). Names in
 * paths are validated object names and image references (csrc/stack/validate.c), safe as they
 * are. Pure data: nothing here talks to the daemon. */
#include <stdio.h>
#include <string.h>

#include "stack/init_wrap.h"
#include "stack/requests.h"

#define PULL_TIMEOUT_S 300
#define PULL_MAX_BYTES (16.0 * 1024 * 1024) /* the progress stream of a pull, read for its error */
#define CHECK_PROBE_PORT 9                  /* discard: nothing listens, an answer is a refusal */

/* method and a path made of fmt with at most one name. */
static cJSON *request(const char *method, const char *fmt, const char *name) {
  char path[512];
  snprintf(path, sizeof path, fmt, name ? name : "");
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "method", method);
  cJSON_AddStringToObject(r, "path", path);
  return r;
}

/* Statuses that count as success besides 2xx (the settle layer accepts the list form). */
static cJSON *accepting(cJSON *r, int s1, int s2) {
  cJSON *ok = cJSON_AddArrayToObject(r, "ok");
  cJSON_AddItemToArray(ok, cJSON_CreateNumber(s1));
  if (s2) cJSON_AddItemToArray(ok, cJSON_CreateNumber(s2));
  return r;
}

static cJSON *query1(cJSON *r, const char *k1, const char *v1, const char *k2, const char *v2) {
  cJSON *q = cJSON_AddObjectToObject(r, "query");
  cJSON_AddStringToObject(q, k1, v1);
  if (k2) cJSON_AddStringToObject(q, k2, v2);
  return r;
}

/* A removal names its object and its kind too (the engine client ignores both): a teardown
 * tells what it knows from what a label list adds, kind by kind (a volume may share a network's
 * name). */
static cJSON *named(cJSON *r, const char *kind, const char *name) {
  cJSON_AddStringToObject(r, "kind", kind);
  cJSON_AddStringToObject(r, "name", name);
  return r;
}

/* A container goes with its anonymous volumes, forced (a running one is killed first); 404 is
 * done; 409 and 500 (a removal in progress, a mount still busy) are asked again by the executor
 * (stack/batch.lua), whatever the ok list says. */
static cJSON *remove_container(const char *name) {
  cJSON *r = request("DELETE", "/containers/%s", name);
  return named(accepting(query1(r, "force", "1", "v", "1"), 404, 0), "container", name);
}

static cJSON *remove_network(const char *name) {
  return named(accepting(request("DELETE", "/networks/%s", name), 404, 0), "network", name);
}

static cJSON *remove_volume(const char *name) {
  cJSON *r = query1(request("DELETE", "/volumes/%s", name), "force", "1", NULL, NULL);
  return named(accepting(r, 404, 0), "volume", name);
}

/* An entry of a list is a name, or an object carrying one (a full plan's network). */
static const char *entry_name(const cJSON *e) {
  if (cJSON_IsString(e)) return e->valuestring;
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
  return cJSON_IsString(n) ? n->valuestring : NULL;
}

/* One round of a teardown: out[key] holds make(name) for each named entry of list. */
static void add_round(cJSON *out, const char *key, const cJSON *list, cJSON *(*make)(const char *)) {
  cJSON *round = cJSON_AddArrayToObject(out, key);
  const cJSON *e;
  cJSON_ArrayForEach(e, list) {
    const char *n = entry_name(e);
    if (n) cJSON_AddItemToArray(round, make(n));
  }
}

cJSON *ss_stack_removals(const cJSON *containers, const cJSON *networks, const cJSON *volumes) {
  cJSON *out = cJSON_CreateObject();
  add_round(out, "containers", containers, remove_container);
  add_round(out, "networks", networks, remove_network);
  add_round(out, "volumes", volumes, remove_volume);
  return out;
}

cJSON *ss_stack_list_requests(const char *const *labels, int n) {
  cJSON *f = cJSON_CreateObject();
  cJSON_AddItemToObject(f, "label", cJSON_CreateStringArray(labels, n)); /* objects with all of them */
  char *text = cJSON_PrintUnformatted(f); /* a CLI's project name is any text: encoded, not pasted */
  cJSON_Delete(f);
  const char *filters = text ? text : "{}";
  cJSON *out = cJSON_CreateArray();
  cJSON_AddItemToArray(out, query1(request("GET", "/containers/json", NULL), "all", "1", "filters", filters));
  cJSON_AddItemToArray(out, query1(request("GET", "/networks", NULL), "filters", filters, NULL, NULL));
  cJSON_AddItemToArray(out, query1(request("GET", "/volumes", NULL), "filters", filters, NULL, NULL));
  cJSON_free(text);
  return out;
}

/* "name:tag" -> name and tag; a reference without a tag is :latest (a registry's port is not a
 * tag: "host:5000/img"). */
static void split_image(const char *ref, char *name, size_t nsz, char *tag, size_t tsz) {
  const char *colon = strrchr(ref, ':');
  if (colon && !strchr(colon, '/') && colon[1]) {
    snprintf(name, nsz, "%.*s", (int)(colon - ref), ref);
    snprintf(tag, tsz, "%s", colon + 1);
  } else {
    snprintf(name, nsz, "%s", ref);
    snprintf(tag, tsz, "latest");
  }
}

static cJSON *pull(const char *image) {
  char name[400], tag[160];
  split_image(image, name, sizeof name, tag, sizeof tag);
  cJSON *r = query1(request("POST", "/images/create", NULL), "fromImage", name, "tag", tag);
  cJSON_AddNumberToObject(r, "timeout", PULL_TIMEOUT_S);
  cJSON_AddNumberToObject(r, "max_bytes", PULL_MAX_BYTES);
  return r;
}

/* The reads of the engine that are not about one stack: what it already uses (subnets), and
 * what the isolation self-check's verdict is keyed on (/version, /info, the default bridge: its
 * Id and Created mark the daemon's start) with the memos already there. */
cJSON *ss_engine_reads(void) {
  cJSON *out = cJSON_CreateObject();
  cJSON_AddItemToObject(out, "networks", request("GET", "/networks", NULL));
  cJSON_AddItemToObject(out, "version", request("GET", "/version", NULL));
  cJSON_AddItemToObject(out, "info", request("GET", "/info", NULL));
  cJSON_AddItemToObject(out, "bridge", accepting(request("GET", "/networks/bridge", NULL), 404, 0));
  cJSON_AddItemToObject(out, "memos", query1(request("GET", "/volumes", NULL), "filters",
                                             "{\"label\":[\"" SS_ISOLATION_MEMO_LABEL "\"]}", NULL, NULL));
  return out;
}

/* The self-check's steps after its two creates: the network read back, the probe started and
 * inspected, its route table read, the gateways probed, and both removed again. */
static void add_check_requests(cJSON *chk) {
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(chk, "name");
  if (!cJSON_IsString(n)) return;
  const char *name = n->valuestring;
  cJSON_AddItemToObject(chk, "inspect_network", request("GET", "/networks/%s", name));
  cJSON_AddItemToObject(chk, "start", accepting(request("POST", "/containers/%s/start", name), 304, 0));
  cJSON_AddItemToObject(chk, "inspect", request("GET", "/containers/%s/json", name));
  cJSON *rc = accepting(query1(request("DELETE", "/containers/%s", name), "force", "1", NULL, NULL), 404, 0);
  cJSON_AddItemToObject(chk, "remove_container", rc);
  cJSON_AddItemToObject(chk, "remove_network", remove_network(name));
  const char *route[] = {"socat", "-u", "OPEN:/proc/net/route", "STDOUT"};
  cJSON_AddItemToObject(chk, "route_argv", cJSON_CreateStringArray(route, 4));
  cJSON_AddNumberToObject(chk, "probe_port", CHECK_PROBE_PORT);
}

/* What the first round of a start reads: each image, and the self-check's identity (or /info
 * alone, for the runtime check). Their answers are sliced by position: images first. */
static void add_preflight(cJSON *plan) {
  cJSON *pre = cJSON_AddArrayToObject(plan, "preflight");
  cJSON *pulls = cJSON_AddArrayToObject(plan, "pulls");
  const cJSON *img;
  cJSON_ArrayForEach(img, cJSON_GetObjectItemCaseSensitive(plan, "images")) {
    if (!cJSON_IsString(img)) continue;
    cJSON_AddItemToArray(pre, accepting(request("GET", "/images/%s/json", img->valuestring), 404, 0));
    cJSON_AddItemToArray(pulls, pull(img->valuestring));
  }
  cJSON *reads = ss_engine_reads();
  if (cJSON_GetObjectItemCaseSensitive(plan, "isolation_check")) {
    const char *ids[] = {"version", "info", "bridge", "memos"};
    for (int i = 0; i < 4; i++) cJSON_AddItemToArray(pre, cJSON_DetachItemFromObjectCaseSensitive(reads, ids[i]));
  } else if (cJSON_GetObjectItemCaseSensitive(plan, "runtime")) {
    cJSON_AddItemToArray(pre, cJSON_DetachItemFromObjectCaseSensitive(reads, "info"));
  }
  cJSON_Delete(reads);
}

/* The containers to remove by name: the plan's, and sandstack-init's volume holder, which has its
 * volume's name (a record keeps the volumes' names, not the holder's). A new list of names the
 * caller deletes. */
static cJSON *with_init_holder(const cJSON *containers, const cJSON *volumes) {
  static const char suffix[] = "-" SS_INIT_VOLUME_KEY;
  cJSON *out = cJSON_CreateArray();
  const cJSON *e;
  cJSON_ArrayForEach(e, containers) {
    const char *n = entry_name(e);
    if (n) cJSON_AddItemToArray(out, cJSON_CreateString(n));
  }
  cJSON_ArrayForEach(e, volumes) {
    const char *n = entry_name(e);
    size_t len = n ? strlen(n) : 0;
    if (len > sizeof suffix - 1 && strcmp(n + len - (sizeof suffix - 1), suffix) == 0)
      cJSON_AddItemToArray(out, cJSON_CreateString(n));
  }
  return out;
}

void ss_stack_add_lifecycle(cJSON *plan) {
  cJSON *c;
  cJSON *cs = cJSON_GetObjectItemCaseSensitive(plan, "containers");
  cJSON_ArrayForEach(c, cs) {
    const char *name = entry_name(c);
    if (!name || !cJSON_IsObject(c)) continue;
    cJSON_DeleteItemFromObjectCaseSensitive(c, "start");
    cJSON_DeleteItemFromObjectCaseSensitive(c, "inspect");
    cJSON_AddItemToObject(c, "start", accepting(request("POST", "/containers/%s/start", name), 304, 0));
    cJSON_AddItemToObject(c, "inspect", request("GET", "/containers/%s/json", name));
  }
  cJSON_DeleteItemFromObjectCaseSensitive(plan, "removals");
  const cJSON *volumes = cJSON_GetObjectItemCaseSensitive(plan, "volumes");
  cJSON *containers = with_init_holder(cs, volumes);
  cJSON *rm = ss_stack_removals(containers, cJSON_GetObjectItemCaseSensitive(plan, "networks"), volumes);
  cJSON_Delete(containers);
  /* what else carries the project's label (a pool's marks, another process's objects), listed
   * while the known removals run */
  const cJSON *project = cJSON_GetObjectItemCaseSensitive(plan, "project");
  if (cJSON_IsString(project)) {
    char label[300];
    snprintf(label, sizeof label, "io.sandstack.project=%s", project->valuestring);
    const char *one = label;
    cJSON_AddItemToObject(rm, "lists", ss_stack_list_requests(&one, 1));
  }
  cJSON_AddItemToObject(plan, "removals", rm);
}

void ss_stack_add_requests(cJSON *plan) {
  ss_stack_add_lifecycle(plan);
  add_preflight(plan);
  cJSON *chk = cJSON_GetObjectItemCaseSensitive(plan, "isolation_check");
  if (chk) add_check_requests(chk);
}

cJSON *ss_isolation_memo_requests(const cJSON *labels, const char *memo, const cJSON *stale) {
  cJSON *out = cJSON_CreateObject();
  cJSON *body = cJSON_CreateObject();
  cJSON_AddStringToObject(body, "Name", memo);
  cJSON_AddStringToObject(body, "Driver", "local");
  cJSON_AddItemToObject(body, "Labels", cJSON_Duplicate(labels, 1));
  cJSON *create = request("POST", "/volumes/create", NULL);
  char *text = cJSON_PrintUnformatted(body);
  cJSON_AddStringToObject(create, "body_json", text ? text : "{}");
  cJSON_free(text);
  cJSON_Delete(body);
  cJSON_AddItemToObject(out, "create", create);
  /* a volume of that name without the key is not a memo of ours: removed before a second create */
  cJSON_AddItemToObject(out, "replace", accepting(request("DELETE", "/volumes/%s", memo), 404, 0));
  cJSON *gone = cJSON_AddArrayToObject(out, "stale");
  const cJSON *s;
  cJSON_ArrayForEach(s, stale) {
    if (!cJSON_IsString(s)) continue;
    cJSON_AddItemToArray(gone, accepting(request("DELETE", "/volumes/%s", s->valuestring), 404, 409));
  }
  return out;
}
