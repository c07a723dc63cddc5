#include "util/error.h"

#include <stdio.h>
#include <string.h>

void ss_error_init(ss_error *e) { memset(e, 0, sizeof *e); }

void ss_error_clear(ss_error *e) {
  cJSON_Delete(e->fields);
  ss_error_init(e);
}

int ss_error_isset(const ss_error *e) { return e->kind[0] != '\0'; }

void ss_error_vset(ss_error *e, const char *kind, const char *reason, const char *fmt, va_list ap) {
  snprintf(e->kind, sizeof e->kind, "%s", kind);
  snprintf(e->reason, sizeof e->reason, "%s", reason ? reason : "");
  vsnprintf(e->message, sizeof e->message, fmt, ap);
}

void ss_error_set(ss_error *e, const char *kind, const char *reason, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ss_error_vset(e, kind, reason, fmt, ap);
  va_end(ap);
}

static cJSON *fields_of(ss_error *e) {
  if (!e->fields) e->fields = cJSON_CreateObject();
  return e->fields;
}

void ss_error_field_item(ss_error *e, const char *key, cJSON *item) {
  cJSON *f = fields_of(e);
  if (!f || !item) {
    cJSON_Delete(item);
    return;
  }
  cJSON_DeleteItemFromObjectCaseSensitive(f, key);
  cJSON_AddItemToObject(f, key, item);
}

void ss_error_field_str(ss_error *e, const char *key, const char *value) {
  ss_error_field_item(e, key, cJSON_CreateString(value ? value : ""));
}

void ss_error_field_num(ss_error *e, const char *key, double value) {
  ss_error_field_item(e, key, cJSON_CreateNumber(value));
}
