/* The Engine requests of a session over time: pause and resume (the cgroup freezer), stop for a
 * hibernation, a snapshot's commit and its volume copies, the filesystem diff, and the label
 * lists and removals of snapshots and expiry marks; on a swarm, the manager's services, tasks,
 * nodes and overlays; and every other Engine request a Lua file sends (a process's exec, a
 * container's files, an image pull, the daemon's ping, version and events). Table-driven so that
 * every Engine path is made here and Lua names none (spec/engine_paths_spec.lua). Pure data: nothing here talks to the daemon. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stack/init_wrap.h"
#include "stack/session_requests.h"
#include "util/buf.h"
#include "util/url.h"

/* A request's shape: method and path (with at most one %s, the object's name), the statuses
 * besides 2xx that count as done, and which parameters of args it takes. */
typedef struct {
  const char *action, *method, *fmt;
  int ok1, ok2;
  unsigned flags;
} action_def;

enum {
  NAMED = 1u << 0,      /* one request per name (else one request, no name in the path) */
  Q_STOP_T = 1u << 1,   /* ?t=<args.t> and a timeout of t + 30 s */
  Q_COMMIT = 1u << 2,   /* ?container=&repo=&tag=&pause=true, body {Labels = args.labels}, and with
                           args.config (the container's): its command without sandstack-init */
  Q_FORCE = 1u << 3,    /* ?force=1, and v=1 when args.volumes is true (its anonymous volumes too) */
  Q_LABEL = 1u << 4,    /* ?filters={"label":[args.label]} */
  Q_CREATE = 1u << 5,   /* ?name=<name>, body args.body */
  B_VOLUME = 1u << 6,   /* body {Name = <name>, Labels = args.labels} */
  LONG = 1u << 7,       /* a timeout of args.timeout (a wait, a commit) */
  Q_CONDITION = 1u << 8, /* ?condition=not-running */
  Q_SERVICES = 1u << 9,  /* ?filters={"service":[names...]}: one request for every name */
  B_BODY = 1u << 10,     /* body args.body (a Swarm service's or an overlay's spec) */
  B_CHECKPOINT = 1u << 11, /* body {CheckpointID = CHECKPOINT_ID, Exit = true} */
  Q_CHECKPOINT = 1u << 12, /* ?checkpoint=CHECKPOINT_ID */
  Q_VERSION = 1u << 13,    /* ?version=<args.version>: a Swarm object's update at the version read */
  Q_SIGNAL = 1u << 14,     /* ?signal=<args.signal>, a number */
  ENC = 1u << 15,          /* the name percent-encoded in the path (an id or name from outside) */
  Q_LABELS = 1u << 16,     /* ?filters={"label":args.labels}: every label must match */
  Q_PATH = 1u << 17,       /* ?path=<args.path> when given (an archive's place in the container) */
  Q_NAME = 1u << 18,       /* ?name=<args.name> when given (a rename's new name) */
  Q_NO_OVERWRITE = 1u << 19, /* &noOverwriteDirNonDir=1 when args.no_overwrite is true (a copy as
                                docker cp makes it: no directory replaced by a file, nor the reverse) */
  Q_SIZE = 1u << 20,         /* ?h=<args.h>&w=<args.w>: a terminal's rows and columns, 1..65535 */
  Q_IMPORT = 1u << 21        /* ?fromSrc=-&repo=&tag= and one changes= per entry of args.changes,
                                written into the path: a key that repeats, which a query table
                                (one value a key) cannot carry */
};

/* The one checkpoint a hibernation with memory leaves on each container: a fixed name, so a
 * wake in any process finds it on the engine (no record carries it) and removes it once used. */
#define CHECKPOINT_ID "sandstack-hibernate"

static const action_def ACTIONS[] = {
    /* 409 on pause/unpause is the engine's "already (un)paused" or "not running": reported */
    {"pause", "POST", "/containers/%s/pause", 0, 0, NAMED},
    {"unpause", "POST", "/containers/%s/unpause", 0, 0, NAMED},
    {"stop", "POST", "/containers/%s/stop", 304, 0, NAMED | Q_STOP_T},
    {"start", "POST", "/containers/%s/start", 304, 0, NAMED},
    /* a signal to a container's PID 1 (sandstack-init's "read the deadline again"); 404 gone and
     * 409 not running are done: the file is read at the next start */
    {"signal", "POST", "/containers/%s/kill", 404, 409, NAMED | Q_SIGNAL},
    /* a hibernation with memory (experimental daemons, runc with CRIU): the checkpoint stops
     * the container; a start from it restores the processes; 404 on removal: already gone */
    {"checkpoint", "POST", "/containers/%s/checkpoints", 0, 0, NAMED | B_CHECKPOINT | LONG},
    {"restore", "POST", "/containers/%s/start", 0, 0, NAMED | Q_CHECKPOINT | LONG},
    {"list_checkpoints", "GET", "/containers/%s/checkpoints", 404, 0, NAMED},
    {"remove_checkpoint", "DELETE", "/containers/%s/checkpoints/" CHECKPOINT_ID, 404, 0, NAMED},
    {"inspect", "GET", "/containers/%s/json", 404, 0, NAMED | ENC},
    /* the same read where a missing container is the caller's error, not an answer */
    {"inspect_container", "GET", "/containers/%s/json", 0, 0, NAMED | ENC},
    {"changes", "GET", "/containers/%s/changes", 0, 0, NAMED},
    {"stats", "GET", "/containers/%s/stats", 0, 0, NAMED | ENC},
    {"logs", "GET", "/containers/%s/logs", 0, 0, NAMED | ENC},
    {"wait", "POST", "/containers/%s/wait", 0, 0, NAMED | LONG | Q_CONDITION},
    {"commit", "POST", "/commit", 0, 0, NAMED | Q_COMMIT | LONG},
    {"create_container", "POST", "/containers/create", 0, 0, NAMED | Q_CREATE},
    {"remove_container", "DELETE", "/containers/%s", 404, 0, NAMED | Q_FORCE | ENC},
    {"create_volume", "POST", "/volumes/create", 0, 0, NAMED | B_VOLUME},
    {"remove_volume", "DELETE", "/volumes/%s", 404, 0, NAMED | Q_FORCE | ENC},
    {"remove_image", "DELETE", "/images/%s", 404, 0, NAMED},
    {"inspect_image", "GET", "/images/%s/json", 404, 0, NAMED},
    {"list_images", "GET", "/images/json", 0, 0, Q_LABEL},
    {"list_volumes", "GET", "/volumes", 0, 0, Q_LABEL},
    /* the volumes carrying every one of args.labels */
    {"list_volumes_with_labels", "GET", "/volumes", 0, 0, Q_LABELS},
    {"list_containers", "GET", "/containers/json", 0, 0, Q_LABEL},
    /* the running containers carrying every one of args.labels (no all=1) */
    {"list_running_containers", "GET", "/containers/json", 0, 0, Q_LABELS},
    {"rename_container", "POST", "/containers/%s/rename", 0, 0, NAMED | ENC | Q_NAME},
    /* a container's files as a tar: read, written, and stat'ed (args.path: the place in the container) */
    {"get_archive", "GET", "/containers/%s/archive", 0, 0, NAMED | ENC | Q_PATH},
    {"put_archive", "PUT", "/containers/%s/archive", 0, 0, NAMED | ENC | Q_PATH | Q_NO_OVERWRITE},
    {"stat_archive", "HEAD", "/containers/%s/archive", 0, 0, NAMED | ENC | Q_PATH},
    /* a process in a running container (sandstack.docker.process): made in the container, then
     * started (a hijacked connection), resized and read by the exec's id */
    {"exec_create", "POST", "/containers/%s/exec", 0, 0, NAMED | ENC},
    {"exec_start", "POST", "/exec/%s/start", 0, 0, NAMED | ENC},
    {"exec_resize", "POST", "/exec/%s/resize", 0, 0, NAMED | ENC | Q_SIZE},
    {"inspect_exec", "GET", "/exec/%s/json", 0, 0, NAMED | ENC},
    /* an image from a registry (the caller gives the query) or from a tar of `docker save` */
    {"pull_image", "POST", "/images/create", 0, 0, 0},
    {"load_image", "POST", "/images/load", 0, 0, 0},
    /* an image made from a root file system's tar (the body), with Dockerfile changes */
    {"import_image", "POST", "/images/create", 0, 0, Q_IMPORT},
    /* the daemon itself: alive, its version, its event stream */
    {"ping", "GET", "/_ping", 0, 0, 0},
    {"version", "GET", "/version", 0, 0, 0},
    {"events", "GET", "/events", 0, 0, 0},
    {"info", "GET", "/info", 0, 0, 0},
    /* the engine's sizes of every image, container and volume (a gateway's snapshot quota) */
    {"disk_usage", "GET", "/system/df", 0, 0, 0},
    /* a swarm's manager (sandstack.swarm): services, their tasks, nodes, overlays */
    {"list_services", "GET", "/services", 0, 0, Q_LABEL},
    {"inspect_service", "GET", "/services/%s", 0, 0, NAMED},
    {"create_service", "POST", "/services/create", 0, 0, B_BODY},
    /* a label or replica change: refused by the manager when the service changed since it was read */
    {"update_service", "POST", "/services/%s/update", 0, 0, NAMED | B_BODY | Q_VERSION},
    {"remove_service", "DELETE", "/services/%s", 404, 0, NAMED},
    {"list_tasks", "GET", "/tasks", 0, 0, Q_SERVICES},
    {"list_nodes", "GET", "/nodes", 0, 0, 0},
    {"inspect_node", "GET", "/nodes/%s", 0, 0, NAMED},
    {"create_network", "POST", "/networks/create", 0, 0, B_BODY},
    {"inspect_network", "GET", "/networks/%s", 0, 0, NAMED},
    {"remove_network", "DELETE", "/networks/%s", 404, 0, NAMED},
    {"list_networks", "GET", "/networks", 0, 0, Q_LABEL},
};

static const char *str_arg(const cJSON *args, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num_arg(const cJSON *args, const char *key, double dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, key);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* The request's query object, made on first use, so flags that each add a key share one. */
static cJSON *query_of(cJSON *r) {
  cJSON *q = cJSON_GetObjectItemCaseSensitive(r, "query");
  return q ? q : cJSON_AddObjectToObject(r, "query");
}

/* args[key] as a terminal dimension (a whole number 1..65535) into q as text; -1 when it is not one. */
static int size_query(cJSON *q, const cJSON *args, const char *key) {
  double v = num_arg(args, key, 0);
  if (!(v >= 1 && v <= 65535) || v != (int)v) return -1; /* NaN too, before the cast */
  char num[8];
  snprintf(num, sizeof num, "%d", (int)v);
  cJSON_AddStringToObject(q, key, num);
  return 0;
}

/* args[key], a number, into q as text when given: a whole one without a fraction, another as Lua
 * writes a number (%.14g, so "1714567890.25" for a time in seconds). */
static void number_query(cJSON *q, const cJSON *args, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, key);
  if (!cJSON_IsNumber(v)) return;
  char num[32];
  double x = v->valuedouble;
  int whole = x > -9e15 && x < 9e15 && x == (double)(long long)x; /* in range before the cast */
  if (whole) snprintf(num, sizeof num, "%.0f", x);
  else snprintf(num, sizeof num, "%.14g", x);
  cJSON_AddStringToObject(q, key, num);
}

/* Appends "?key=value" (or "&key=value" after the first) to b, both percent-encoded (util/url.h,
 * the engine client's one encoder); -1 when b's limit is passed. */
static int add_param(ss_buf *b, const char *key, const char *value) {
  size_t k = strlen(key), v = strlen(value);
  if (ss_buf_reserve(b, 2 + 3 * (k + v)) != SS_BUF_OK) return -1;
  char sep = b->len ? '&' : '?';
  b->data[b->len++] = sep;
  b->len += ss_urlencode(b->data + b->len, key, k);
  b->data[b->len++] = '=';
  b->len += ss_urlencode(b->data + b->len, value, v);
  b->data[b->len] = 0;
  return 0;
}

/* An import's query on path, into r's path: NULL, or why it cannot be made. */
static const char *import_path(cJSON *r, const char *path, const cJSON *args) {
  const char *repo = str_arg(args, "repo"), *tag = str_arg(args, "tag");
  const cJSON *changes = cJSON_GetObjectItemCaseSensitive(args, "changes"), *c;
  int listed = !changes || cJSON_IsArray(changes) || (cJSON_IsObject(changes) && !changes->child); /* {}: Lua's {} */
  if (!repo || !tag || !listed) return "an import needs args.repo, args.tag and a list args.changes";
  ss_buf b;
  ss_buf_init(&b, 1 << 20);
  int bad = add_param(&b, "fromSrc", "-") || add_param(&b, "repo", repo) || add_param(&b, "tag", tag);
  cJSON_ArrayForEach(c, changes) bad = bad || !cJSON_IsString(c) || add_param(&b, "changes", c->valuestring);
  if (!bad) {
    char *full = malloc(strlen(path) + b.len + 1);
    if (full) {
      strcpy(full, path);
      strcat(full, b.data);
      cJSON_ReplaceItemInObject(r, "path", cJSON_CreateString(full));
      free(full);
    }
    bad = !full;
  }
  ss_buf_free(&b);
  return bad ? "an import's changes must be strings, under 1 MiB in all" : NULL;
}

/* body_json: the engine client sends it as it is */
/* q.filters = {"key": values} (values owned): encoded as JSON, never pasted, since a label
 * value or a service name is any text. */
static void add_filter(cJSON *q, const char *key, cJSON *values) {
  cJSON *f = cJSON_CreateObject();
  cJSON_AddItemToObject(f, key, values);
  char *text = cJSON_PrintUnformatted(f);
  cJSON_AddStringToObject(q, "filters", text ? text : "{}");
  cJSON_free(text);
  cJSON_Delete(f);
}

static void add_body(cJSON *r, cJSON *body) {
  char *text = cJSON_PrintUnformatted(body);
  cJSON_AddStringToObject(r, "body_json", text ? text : "{}");
  cJSON_free(text);
  cJSON_Delete(body);
}

static cJSON *labels_copy(const cJSON *args) {
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(args, "labels");
  return cJSON_IsObject(l) ? cJSON_Duplicate(l, 1) : cJSON_CreateObject();
}

/* An image committed from a sandbox under sandstack-init gets the command the sandbox had
 * without it (config: the container's Config), so a start from the image wraps it once. The
 * commit merges what the body leaves empty from the container: an empty Entrypoint is given as
 * [] (not left out), which the engine keeps as "none". */
static void unwrapped_command(cJSON *body, const cJSON *config) {
  cJSON *e, *c;
  if (!cJSON_IsObject(config) ||
      ss_stack_init_unwrap(cJSON_GetObjectItemCaseSensitive(config, "Entrypoint"),
                           cJSON_GetObjectItemCaseSensitive(config, "Cmd"), &e, &c) != 0)
    return;
  cJSON_AddItemToObject(body, "Entrypoint", e);
  cJSON_AddItemToObject(body, "Cmd", c);
}

/* One request of def for name (NULL for the unnamed ones); NULL with why when args lack what
 * the action needs. */
static cJSON *make(const action_def *d, const char *name, const cJSON *args, const char **why) {
  char path[1024], enc[768];
  if (name && (d->flags & ENC)) {
    size_t n = strlen(name);
    if (n > (sizeof enc - 1) / 3) {
      *why = "a name too long for a path";
      return NULL;
    }
    enc[ss_urlencode(enc, name, n)] = 0;
    name = enc;
  }
  snprintf(path, sizeof path, d->fmt, name ? name : "");
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "method", d->method);
  cJSON_AddStringToObject(r, "path", path);
  if (d->ok1) {
    cJSON *ok = cJSON_AddArrayToObject(r, "ok");
    cJSON_AddItemToArray(ok, cJSON_CreateNumber(d->ok1));
    if (d->ok2) cJSON_AddItemToArray(ok, cJSON_CreateNumber(d->ok2));
  }
  cJSON *q = NULL;
  if (d->flags & (Q_STOP_T | Q_COMMIT | Q_FORCE | Q_LABEL | Q_CREATE | Q_CONDITION | Q_SERVICES | Q_CHECKPOINT |
                  Q_VERSION | Q_SIGNAL | Q_LABELS))
    q = cJSON_AddObjectToObject(r, "query");
  if (d->flags & Q_VERSION) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, "version");
    if (!cJSON_IsNumber(v) || v->valuedouble < 0) {
      *why = "an update needs args.version (the object's version index)";
      cJSON_Delete(r);
      return NULL;
    }
    char num[32];
    snprintf(num, sizeof num, "%.0f", v->valuedouble);
    cJSON_AddStringToObject(q, "version", num);
  }
  if (d->flags & Q_SIGNAL) {
    double sig = num_arg(args, "signal", 0);
    if (sig < 1 || sig > 64 || sig != (int)sig) {
      *why = "signal needs args.signal, a number from 1 to 64";
      cJSON_Delete(r);
      return NULL;
    }
    char num[8];
    snprintf(num, sizeof num, "%d", (int)sig);
    cJSON_AddStringToObject(q, "signal", num);
  }
  if (d->flags & Q_CHECKPOINT) cJSON_AddStringToObject(q, "checkpoint", CHECKPOINT_ID);
  if (d->flags & B_CHECKPOINT) {
    cJSON *body = cJSON_CreateObject();
    cJSON_AddStringToObject(body, "CheckpointID", CHECKPOINT_ID);
    cJSON_AddBoolToObject(body, "Exit", 1); /* the container stops: its memory is freed */
    add_body(r, body);
  }
  if (d->flags & Q_STOP_T) {
    double t = num_arg(args, "t", 5);
    char num[32];
    snprintf(num, sizeof num, "%.0f", t);
    cJSON_AddStringToObject(q, "t", num);
    cJSON_AddNumberToObject(r, "timeout", t + 30);
  }
  if (d->flags & Q_CONDITION) cJSON_AddStringToObject(q, "condition", "not-running");
  if (d->flags & Q_FORCE) {
    cJSON_AddStringToObject(q, "force", "1");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "volumes"))) cJSON_AddStringToObject(q, "v", "1");
  }
  /* optional: a query only when the value is given; the value as the caller gave it (any bytes
   * but NUL): the engine client percent-encodes every query value when it sends (util/url.h) */
  const char *opt = (d->flags & Q_PATH) ? str_arg(args, "path") : (d->flags & Q_NAME) ? str_arg(args, "name") : NULL;
  if (opt) cJSON_AddStringToObject(query_of(r), (d->flags & Q_PATH) ? "path" : "name", opt);
  if ((d->flags & Q_NO_OVERWRITE) && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "no_overwrite")))
    cJSON_AddStringToObject(query_of(r), "noOverwriteDirNonDir", "1");
  if ((d->flags & Q_SIZE) && (size_query(query_of(r), args, "h") != 0 || size_query(query_of(r), args, "w") != 0)) {
    *why = "a resize needs args.h and args.w, whole numbers from 1 to 65535 (rows and columns)";
    cJSON_Delete(r);
    return NULL;
  }
  if (d->flags & Q_COMMIT) {
    const char *repo = str_arg(args, "repo"), *tag = str_arg(args, "tag");
    if (!repo || !tag) {
      *why = "commit needs args.repo and args.tag";
      cJSON_Delete(r);
      return NULL;
    }
    cJSON_AddStringToObject(q, "container", name);
    cJSON_AddStringToObject(q, "repo", repo);
    cJSON_AddStringToObject(q, "tag", tag);
    cJSON_AddStringToObject(q, "pause", "true"); /* a consistent image of a running sandbox */
    cJSON *body = cJSON_CreateObject();
    cJSON_AddItemToObject(body, "Labels", labels_copy(args));
    unwrapped_command(body, cJSON_GetObjectItemCaseSensitive(args, "config"));
    add_body(r, body);
  }
  if (d->flags & Q_LABEL) {
    const char *label = str_arg(args, "label");
    if (!label) {
      *why = "a list needs args.label";
      cJSON_Delete(r);
      return NULL;
    }
    const char *one[] = {label};
    add_filter(q, "label", cJSON_CreateStringArray(one, 1));
    if (strcmp(d->action, "list_containers") == 0) cJSON_AddStringToObject(q, "all", "1");
  }
  if (d->flags & Q_LABELS) {
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(args, "labels");
    if (!cJSON_IsArray(labels)) {
      *why = "a list by labels needs args.labels";
      cJSON_Delete(r);
      return NULL;
    }
    add_filter(q, "label", cJSON_Duplicate(labels, 1));
  }
  if (d->flags & Q_CREATE) {
    const cJSON *body = cJSON_GetObjectItemCaseSensitive(args, "body");
    if (!cJSON_IsObject(body)) {
      *why = "create_container needs args.body";
      cJSON_Delete(r);
      return NULL;
    }
    cJSON_AddStringToObject(q, "name", name);
    add_body(r, cJSON_Duplicate(body, 1));
  }
  if (d->flags & Q_SERVICES) { /* names is the filter's list here, never a path part */
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(args, "services");
    if (!cJSON_IsArray(names)) {
      *why = "list_tasks needs args.services";
      cJSON_Delete(r);
      return NULL;
    }
    add_filter(q, "service", cJSON_Duplicate(names, 1));
  }
  if (d->flags & B_BODY) {
    const cJSON *body = cJSON_GetObjectItemCaseSensitive(args, "body");
    if (!cJSON_IsObject(body)) {
      *why = "a create needs args.body";
      cJSON_Delete(r);
      return NULL;
    }
    add_body(r, cJSON_Duplicate(body, 1));
  }
  if (d->flags & B_VOLUME) {
    cJSON *body = cJSON_CreateObject();
    cJSON_AddStringToObject(body, "Name", name);
    cJSON_AddItemToObject(body, "Labels", labels_copy(args));
    add_body(r, body);
  }
  if (d->flags & LONG) cJSON_AddNumberToObject(r, "timeout", num_arg(args, "timeout", 600));
  if (strcmp(d->action, "stats") == 0) { /* one sample, at once (API 1.41: one-shot) unless
                                            args.one_shot is false (the engine measures a second) */
    q = query_of(r);
    cJSON_AddStringToObject(q, "stream", "false");
    if (!cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(args, "one_shot"))) cJSON_AddStringToObject(q, "one-shot", "true");
  }
  if (strcmp(d->action, "logs") == 0) { /* both streams; from args.since (unix seconds), the last args.tail lines */
    q = query_of(r);
    cJSON_AddStringToObject(q, "stdout", "1");
    cJSON_AddStringToObject(q, "stderr", "1");
    number_query(q, args, "since");
    number_query(q, args, "tail");
  }
  if (d->flags & Q_IMPORT) {
    const char *bad = import_path(r, path, args);
    if (bad) {
      *why = bad;
      cJSON_Delete(r);
      return NULL;
    }
  }
  if (strcmp(d->action, "load_image") == 0) cJSON_AddStringToObject(query_of(r), "quiet", "1"); /* no progress */
  return r;
}

cJSON *ss_session_requests(const char *action, const cJSON *names, const cJSON *args, const char **why) {
  const action_def *d = NULL;
  for (size_t i = 0; i < sizeof ACTIONS / sizeof ACTIONS[0]; i++)
    if (strcmp(ACTIONS[i].action, action) == 0) d = &ACTIONS[i];
  if (!d) {
    *why = "unknown action";
    return NULL;
  }
  cJSON *out = cJSON_CreateArray();
  if (!(d->flags & NAMED)) {
    cJSON *r = make(d, NULL, args, why);
    if (!r) {
      cJSON_Delete(out);
      return NULL;
    }
    cJSON_AddItemToArray(out, r);
    return out;
  }
  const cJSON *e;
  cJSON_ArrayForEach(e, names) {
    if (!cJSON_IsString(e)) continue;
    cJSON *r = make(d, e->valuestring, args, why);
    if (!r) {
      cJSON_Delete(out);
      return NULL;
    }
    cJSON_AddItemToArray(out, r);
  }
  return out;
}
