/* Reading a planned stack (a cJSON tree whose requests carry their bodies as JSON text) in the
 * plan tests: a member by path, a request's body, an entry of a container's Env. Header-only: the
 * two plan tests each compile it once. */
#ifndef SANDSTACK_TEST_PLAN_READ_H
#define SANDSTACK_TEST_PLAN_READ_H
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* The member at path: names and array indexes separated by '/' ("containers/0/name"; keys hold
 * dots, "io.sandstack.project"). NULL when absent. */
static inline const cJSON *pr_at(const cJSON *o, const char *path) {
  char seg[128];
  while (o && *path) {
    size_t n = strcspn(path, "/");
    if (n >= sizeof seg) return NULL;
    memcpy(seg, path, n);
    seg[n] = '\0';
    path += n + (path[n] == '/');
    if (cJSON_IsArray(o) && strspn(seg, "0123456789") == n) o = cJSON_GetArrayItem(o, atoi(seg));
    else o = cJSON_GetObjectItemCaseSensitive(o, seg);
  }
  return o;
}

/* The string at path, or NULL. */
static inline const char *pr_str(const cJSON *o, const char *path) {
  const cJSON *v = pr_at(o, path);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The number at path, or -1 when there is none. */
static inline double pr_num(const cJSON *o, const char *path) {
  const cJSON *v = pr_at(o, path);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* 1 true, 0 false, -1 absent or not a boolean. */
static inline int pr_bool(const cJSON *o, const char *path) {
  const cJSON *v = pr_at(o, path);
  return cJSON_IsBool(v) ? cJSON_IsTrue(v) : -1;
}

/* The request at path's body, parsed from its body_json (the caller deletes it), or NULL. */
static inline cJSON *pr_body(const cJSON *o, const char *path) {
  const char *text = pr_str(pr_at(o, path), "body_json");
  return text ? cJSON_Parse(text) : NULL;
}

/* The value of NAME in a container body's Env ("NAME=value"), or NULL. */
static inline const char *pr_env(const cJSON *body, const char *name) {
  const cJSON *e;
  size_t n = strlen(name);
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(body, "Env")) {
    if (cJSON_IsString(e) && strncmp(e->valuestring, name, n) == 0 && e->valuestring[n] == '=')
      return e->valuestring + n + 1;
  }
  return NULL;
}

/* The array at path's strings joined with commas into out ("" when absent). */
static inline const char *pr_join(const cJSON *o, const char *path, char *out, size_t cap) {
  const cJSON *e;
  size_t n = 0;
  out[0] = '\0';
  cJSON_ArrayForEach(e, pr_at(o, path)) {
    const char *s = cJSON_IsString(e) ? e->valuestring : "?";
    size_t k = strlen(s);
    if (n + k + 2 > cap) break;
    if (n) out[n++] = ',';
    memcpy(out + n, s, k + 1);
    n += k;
  }
  return out;
}

#endif
