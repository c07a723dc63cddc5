/* The option readers every check of the stack's options shares: what counts as a list, and the
 * refusal of a value of the wrong type with what was given instead. Their own file, so the
 * validator (validate.c) and the checks it calls (credentials.c, hosts.c, ports.c) all call
 * down to it, and no check calls back into the validator. */
#include <stdio.h>
#include <string.h>

#include "stack/model.h"

int ss_is_list(const cJSON *v) {
  return cJSON_IsArray(v) || (cJSON_IsObject(v) && v->child == NULL);
}

int ss_list_size(const cJSON *v) { return cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0; }

/* ", got string \"8080\"": the value a check refused, by its Lua type, for the message (so a
 * user sees why "8080" is not a port). A secret's value is never quoted, only its type. */
const char *ss_stack_got(const cJSON *v, const char *option, char *buf, size_t n) {
  int secret = strstr(option, "key") || strstr(option, "token") || strstr(option, "secret");
  if (!v || cJSON_IsNull(v))
    snprintf(buf, n, ", got nothing");
  else if (cJSON_IsString(v) && !secret)
    snprintf(buf, n, ", got string \"%.40s%s\"", v->valuestring, strlen(v->valuestring) > 40 ? "..." : "");
  else if (cJSON_IsNumber(v) && !secret)
    snprintf(buf, n, ", got number %.15g", v->valuedouble);
  else if (cJSON_IsBool(v) && !secret)
    snprintf(buf, n, ", got boolean %s", cJSON_IsTrue(v) ? "true" : "false");
  else
    snprintf(buf, n, ", got %s", cJSON_IsString(v) ? "a string" : cJSON_IsNumber(v) ? "a number"
                                 : cJSON_IsBool(v) ? "a boolean" : "a table");
  return buf;
}

int ss_stack_fail_type(ss_error *err, const char *option, const char *wanted, const cJSON *v) {
  char buf[96];
  ss_error_set(err, "usage", "bad_type", "sandstack.docker.start: option '%s' must be %s%s", option, wanted,
               ss_stack_got(v, option, buf, sizeof buf));
  ss_error_field_str(err, "option", option);
  return -1;
}
