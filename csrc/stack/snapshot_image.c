/* The image archives of a snapshot (snapshot.h), in the layout POST /images/load reads (what
 * `docker save` writes): manifest.json naming a config file and one layer file per layer.
 *
 * Why a snapshot's image is loaded rather than left as committed: the Engine's commit merges
 * the committed container's config into the image whatever config the caller gives (an env
 * variable or a label the caller leaves out is added from the container), and keeps that whole
 * config as the image's ContainerConfig besides. The sandbox's config holds the session token,
 * the placeholders, a no-proxy stack's real key and the project's labels. So the commit is only
 * a step: its layers are loaded again under a config written here, with the sandbox image's own
 * environment, the sandbox's own command (unwrapped from the init) and the snapshot's labels alone, and the committed image is removed.
 * The engine already has every layer, and a load reads a layer's file only for a layer it lacks,
 * so the archive holds the two JSON files and no data. */
#include <stdio.h>
#include <string.h>

#include "capture/capture.h"
#include "stack/init_wrap.h"
#include "stack/snapshot.h"
#include "util/sha256.h"

#if defined(__x86_64__)
#define HOST_ARCH "amd64"
#elif defined(__aarch64__)
#define HOST_ARCH "arm64"
#else
#define HOST_ARCH "unknown"
#endif

/* One regular member (header, data, padding). */
static int add_member(ss_buf *out, const char *name, const void *data, size_t n, unsigned mode) {
  unsigned char head[CAP_TAR_HEADER_MAX(64)];
  size_t hn = cap_tar_header(head, sizeof head, name, strlen(name), n, mode, 0);
  static const char zeros[512];
  if (hn == 0 || ss_buf_append(out, head, hn) != SS_BUF_OK || ss_buf_append(out, data, n) != SS_BUF_OK) return -1;
  return ss_buf_append(out, zeros, (512 - n % 512) % 512) == SS_BUF_OK ? 0 : -1;
}

static int add_json(ss_buf *out, const char *name, const cJSON *j) {
  char *text = cJSON_PrintUnformatted(j);
  if (!text) return -1;
  int rc = add_member(out, name, text, strlen(text), 0644);
  cJSON_free(text);
  return rc;
}

static int finish(ss_buf *out) {
  static const char end[1024];
  return ss_buf_append(out, end, sizeof end) == SS_BUF_OK ? 0 : -1;
}

/* manifest.json: config.json, the tag, and a layer file name for each of n layers. */
static cJSON *manifest(const char *tag, int n) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "Config", "config.json");
  cJSON_AddItemToObject(m, "RepoTags", cJSON_CreateStringArray(&tag, 1));
  cJSON *layers = cJSON_AddArrayToObject(m, "Layers");
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "%d/layer.tar", i);
    cJSON_AddItemToArray(layers, cJSON_CreateString(name));
  }
  cJSON *list = cJSON_CreateArray();
  cJSON_AddItemToArray(list, m);
  return list;
}

int ss_tree_image_archive(const void *prog, size_t n, const char *tag, ss_buf *out) {
  ss_buf layer;
  ss_buf_init(&layer, n + 4096);
  int rc = add_member(&layer, "sandstack-tree", prog, n, 0555) == 0 && finish(&layer) == 0 ? 0 : -1;
  cJSON *config = cJSON_CreateObject(), *list = manifest(tag, 1);
  if (rc == 0) {
    char diff[7 + 65] = "sha256:";
    ss_sha256_hex(layer.data, layer.len, 32, diff + 7);
    cJSON_AddStringToObject(config, "architecture", HOST_ARCH);
    cJSON_AddStringToObject(config, "os", "linux");
    cJSON_AddStringToObject(config, "created", "1970-01-01T00:00:00Z"); /* the same bytes, the same id */
    cJSON *c = cJSON_AddObjectToObject(config, "config");
    const char *entry[] = {"/sandstack-tree"};
    cJSON_AddItemToObject(c, "Entrypoint", cJSON_CreateStringArray(entry, 1));
    cJSON *rootfs = cJSON_AddObjectToObject(config, "rootfs");
    cJSON_AddStringToObject(rootfs, "type", "layers");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(rootfs, "diff_ids"), cJSON_CreateString(diff));
    rc = add_json(out, "manifest.json", list) == 0 && add_json(out, "config.json", config) == 0 &&
                 add_member(out, "0/layer.tar", layer.data, layer.len, 0644) == 0 && finish(out) == 0
             ? 0
             : -1;
  }
  cJSON_Delete(config);
  cJSON_Delete(list);
  ss_buf_free(&layer);
  return rc;
}

static const cJSON *obj(const cJSON *j, const char *key) { return cJSON_GetObjectItemCaseSensitive(j, key); }

/* The sandbox's own command, not its image's: the committed config's Entrypoint and Cmd (which
 * hold no secret), without sandstack-init's wrap, so a start from the snapshot runs what the
 * sandbox ran and wraps it once. Left as the image's when the commit names none. */
static void own_command(cJSON *c, const cJSON *committed_config) {
  const cJSON *e = obj(committed_config, "Entrypoint"), *cmd = obj(committed_config, "Cmd");
  cJSON *ue = NULL, *uc = NULL;
  if (ss_stack_init_unwrap(e, cmd, &ue, &uc) != 0) {
    if (!cJSON_IsArray(e) && !cJSON_IsArray(cmd)) return;
    ue = cJSON_IsArray(e) ? cJSON_Duplicate(e, 1) : cJSON_CreateArray();
    uc = cJSON_IsArray(cmd) ? cJSON_Duplicate(cmd, 1) : cJSON_CreateArray();
  }
  cJSON_DeleteItemFromObjectCaseSensitive(c, "Entrypoint");
  cJSON_DeleteItemFromObjectCaseSensitive(c, "Cmd");
  cJSON_AddItemToObject(c, "Entrypoint", ue);
  cJSON_AddItemToObject(c, "Cmd", uc);
}

int ss_snapshot_image_archive(const cJSON *committed, const cJSON *base, const cJSON *labels, const char *repo_tag,
                              ss_buf *out, const char **why) {
  const cJSON *layers = obj(obj(committed, "RootFS"), "Layers"), *base_config = obj(base, "Config");
  if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) == 0 || !cJSON_IsObject(base_config) ||
      !cJSON_IsObject(labels)) {
    *why = "the committed image's inspect has no RootFS.Layers, or the sandbox image's no Config";
    return -1;
  }
  cJSON *config = cJSON_CreateObject();
  const char *copied[] = {"Architecture", "architecture", "Os", "os", "Variant", "variant", "Created", "created"};
  for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i += 2) {
    const cJSON *v = obj(committed, copied[i]);
    if (cJSON_IsString(v) && v->valuestring[0]) cJSON_AddStringToObject(config, copied[i + 1], v->valuestring);
  }
  cJSON *c = cJSON_Duplicate(base_config, 1);
  cJSON_DeleteItemFromObjectCaseSensitive(c, "Image"); /* the parent's name: not this image's config */
  cJSON_ReplaceItemInObjectCaseSensitive(c, "Labels", cJSON_Duplicate(labels, 1));
  if (!cJSON_HasObjectItem(c, "Labels")) cJSON_AddItemToObject(c, "Labels", cJSON_Duplicate(labels, 1));
  own_command(c, obj(committed, "Config"));
  cJSON_AddItemToObject(config, "config", c);
  cJSON *rootfs = cJSON_AddObjectToObject(config, "rootfs");
  cJSON_AddStringToObject(rootfs, "type", "layers");
  cJSON_AddItemToObject(rootfs, "diff_ids", cJSON_Duplicate(layers, 1));
  cJSON *list = manifest(repo_tag, cJSON_GetArraySize(layers));
  int rc = add_json(out, "manifest.json", list) == 0 && add_json(out, "config.json", config) == 0 && finish(out) == 0
               ? 0
               : -1;
  if (rc != 0) *why = "out of memory";
  cJSON_Delete(config);
  cJSON_Delete(list);
  return rc;
}
