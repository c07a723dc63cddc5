/* The container that copies or compares a snapshot's volumes (snapshot.h). It runs
 * sandstack-tree from an image holding nothing else, never a program of the guest's, and gets
 * the confinement of a sandbox and then some: no network, every capability dropped but what its
 * mode needs, no-new-privileges, a pid and a memory limit, a read-only root, the stack's
 * runtime (runsc when the stack runs under gVisor). The volumes are mounted with no copy of the
 * image's content into them.
 *   copy: CHOWN, FOWNER, FSETID (owners, modes and set-id bits as they were), DAC_OVERRIDE (a
 *         file or directory only its owner may read or enter); the source read-only.
 *   diff: DAC_READ_SEARCH (reading every file); both volumes read-only. */
#include <stdio.h>
#include <string.h>

#include "stack/snapshot.h"
#include "stack/volume_mount.h"

enum {
  HELPER_PIDS = 64,                     /* one process; gVisor's sandbox counts its own threads */
  HELPER_MEMORY = 128 * 1024 * 1024,    /* the program's bounded tables, gVisor's kernel beside it */
  HELPER_FILES = 4096,                  /* two per directory level, at most 256 levels */
  HELPER_LOG_BYTES = 64 * 1024 * 1024,  /* above any answer's budget: the log is never cut */
};

static const char *str(const cJSON *args, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, key);
  return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

static void add_mount(cJSON *mounts, const char *volume, const char *target, int read_only) {
  cJSON_AddItemToArray(mounts, ss_volume_mount(volume, target, read_only));
}

static cJSON *host_config(const cJSON *args, int copy, const char *a, const char *b) {
  cJSON *hc = cJSON_CreateObject();
  cJSON_AddStringToObject(hc, "NetworkMode", "none");
  const char *drop[] = {"ALL"};
  cJSON_AddItemToObject(hc, "CapDrop", cJSON_CreateStringArray(drop, 1));
  const char *copy_caps[] = {"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"}, *diff_caps[] = {"DAC_READ_SEARCH"};
  cJSON_AddItemToObject(hc, "CapAdd", copy ? cJSON_CreateStringArray(copy_caps, 4) : cJSON_CreateStringArray(diff_caps, 1));
  const char *opts[] = {"no-new-privileges"};
  cJSON_AddItemToObject(hc, "SecurityOpt", cJSON_CreateStringArray(opts, 1));
  cJSON_AddNumberToObject(hc, "PidsLimit", HELPER_PIDS);
  cJSON_AddNumberToObject(hc, "Memory", HELPER_MEMORY);
  cJSON_AddNumberToObject(hc, "MemorySwap", HELPER_MEMORY);
  cJSON *nofile = cJSON_CreateObject();
  cJSON_AddStringToObject(nofile, "Name", "nofile");
  cJSON_AddNumberToObject(nofile, "Soft", HELPER_FILES);
  cJSON_AddNumberToObject(nofile, "Hard", HELPER_FILES);
  cJSON_AddItemToArray(cJSON_AddArrayToObject(hc, "Ulimits"), nofile);
  cJSON_AddBoolToObject(hc, "ReadonlyRootfs", 1);
  cJSON_AddBoolToObject(hc, "Privileged", 0);
  const char *runtime = str(args, "runtime");
  if (runtime) cJSON_AddStringToObject(hc, "Runtime", runtime);
  cJSON *log = cJSON_AddObjectToObject(hc, "LogConfig");
  cJSON_AddStringToObject(log, "Type", "json-file"); /* its answer is read back: whatever the daemon's default */
  char size[32];
  snprintf(size, sizeof size, "%d", HELPER_LOG_BYTES);
  cJSON_AddStringToObject(cJSON_AddObjectToObject(log, "Config"), "max-size", size);
  cJSON *mounts = cJSON_AddArrayToObject(hc, "Mounts");
  add_mount(mounts, a, copy ? "/from" : "/old", 1);
  add_mount(mounts, b, copy ? "/to" : "/new", !copy);
  return hc;
}

cJSON *ss_tree_helper_create(const char *name, const cJSON *args, const char **why) {
  const char *mode = str(args, "mode"), *image = str(args, "image");
  int copy = mode && strcmp(mode, "copy") == 0;
  if (!mode || (!copy && strcmp(mode, "diff") != 0) || !image || !name) {
    *why = "a tree helper needs a name, args.mode (copy or diff) and args.image";
    return NULL;
  }
  const char *a = str(args, copy ? "from" : "old"), *b = str(args, copy ? "to" : "new");
  const cJSON *max = cJSON_GetObjectItemCaseSensitive(args, "max_bytes");
  if (!a || !b || (!copy && (!cJSON_IsNumber(max) || max->valuedouble < 64))) {
    *why = "a tree helper needs its two volumes (copy: from, to; diff: old, new, and max_bytes)";
    return NULL;
  }
  cJSON *body = cJSON_CreateObject();
  cJSON_AddStringToObject(body, "Image", image);
  const char *entry[] = {"/sandstack-tree"};
  cJSON_AddItemToObject(body, "Entrypoint", cJSON_CreateStringArray(entry, 1));
  char budget[32];
  snprintf(budget, sizeof budget, "%.0f", copy ? 0.0 : max->valuedouble);
  const char *copy_cmd[] = {"copy", "/from", "/to", "no-special"}, *diff_cmd[] = {"diff", "/old", "/new", budget};
  int no_special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "no_special"));
  cJSON_AddItemToObject(body, "Cmd",
                        copy ? cJSON_CreateStringArray(copy_cmd, 3 + no_special) : cJSON_CreateStringArray(diff_cmd, 4));
  cJSON_AddStringToObject(body, "User", "0:0");
  cJSON_AddStringToObject(body, "WorkingDir", "/");
  cJSON_AddBoolToObject(body, "NetworkDisabled", 1);
  cJSON *hcheck = cJSON_AddObjectToObject(body, "Healthcheck");
  const char *none[] = {"NONE"};
  cJSON_AddItemToObject(hcheck, "Test", cJSON_CreateStringArray(none, 1));
  const cJSON *labels = cJSON_GetObjectItemCaseSensitive(args, "labels");
  cJSON_AddItemToObject(body, "Labels", cJSON_IsObject(labels) ? cJSON_Duplicate(labels, 1) : cJSON_CreateObject());
  cJSON_AddItemToObject(body, "HostConfig", host_config(args, copy, a, b));

  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "method", "POST");
  cJSON_AddStringToObject(r, "path", "/containers/create");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(r, "query"), "name", name);
  char *text = cJSON_PrintUnformatted(body);
  cJSON_Delete(body);
  if (!text) {
    cJSON_Delete(r);
    *why = "out of memory";
    return NULL;
  }
  cJSON_AddStringToObject(r, "body_json", text);
  cJSON_free(text);
  return r;
}
