/* The sandbox's Entrypoint and Cmd under sandstack-init (init_wrap.h). The merge is the engine's
 * own rule, measured on Docker 20.10 (spec/docker_deadline_spec.lua compares it with the
 * engine's answer for each form), so the init runs exactly what the engine would have run. */
#include "stack/init_wrap.h"

#include <string.h>

#include "deadline/deadline.h"

static int given(const cJSON *v) { return v && !cJSON_IsNull(v); }

static int empty(const cJSON *v) { return !cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0; }

/* [""]: the engine's "no entrypoint" */
static int reset(const cJSON *v) {
  return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child) &&
         v->child->valuestring[0] == '\0';
}

static cJSON *copy_list(const cJSON *v) {
  return cJSON_IsArray(v) ? cJSON_Duplicate(v, 1) : cJSON_CreateArray();
}

void ss_stack_merge_command(const cJSON *body_entrypoint, const cJSON *body_cmd, const cJSON *image_entrypoint,
                            const cJSON *image_cmd, cJSON **entrypoint, cJSON **cmd) {
  const cJSON *e = given(body_entrypoint) ? body_entrypoint : image_entrypoint;
  int own_entrypoint = given(body_entrypoint) && !empty(body_entrypoint);
  const cJSON *c = !empty(body_cmd) ? body_cmd : own_entrypoint ? NULL : image_cmd;
  *entrypoint = reset(e) ? cJSON_CreateArray() : copy_list(e);
  *cmd = copy_list(c);
}

int ss_stack_init_wrap(const cJSON *body_entrypoint, const cJSON *body_cmd, const cJSON *image_entrypoint,
                       const cJSON *image_cmd, cJSON **entrypoint, cJSON **cmd) {
  cJSON *e, *c;
  ss_stack_merge_command(body_entrypoint, body_cmd, image_entrypoint, image_cmd, &e, &c);
  if (empty(e) && empty(c)) {
    cJSON_Delete(e);
    cJSON_Delete(c);
    return -1;
  }
  cJSON *w = cJSON_CreateArray();
  cJSON_AddItemToArray(w, cJSON_CreateString(DL_PROGRAM));
  cJSON_AddItemToArray(w, cJSON_CreateString("--"));
  while (e->child) cJSON_AddItemToArray(w, cJSON_DetachItemViaPointer(e, e->child));
  cJSON_Delete(e);
  *entrypoint = w;
  *cmd = c;
  return 0;
}

int ss_stack_init_unwrap(const cJSON *entrypoint, const cJSON *cmd, cJSON **out_entrypoint, cJSON **out_cmd) {
  const cJSON *first = cJSON_IsArray(entrypoint) ? entrypoint->child : NULL;
  const cJSON *second = first ? first->next : NULL;
  if (!cJSON_IsString(first) || strcmp(first->valuestring, DL_PROGRAM) != 0 || !cJSON_IsString(second) ||
      strcmp(second->valuestring, "--") != 0)
    return -1;
  cJSON *e = cJSON_CreateArray();
  for (const cJSON *it = second->next; it; it = it->next) cJSON_AddItemToArray(e, cJSON_Duplicate(it, 1));
  *out_entrypoint = e;
  *out_cmd = copy_list(cmd);
  return 0;
}
