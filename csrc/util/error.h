#ifndef SANDSTACK_ERROR_H
#define SANDSTACK_ERROR_H
/* A typed failure, filled by the core and turned into a Lua error object by the binding.
 * kind/reason follow API.md ("engine", "transport", "compose"/"egress_required", ...);
 * fields holds the extra members (service, status, method, path, ...). */
#include <cjson/cJSON.h>
#include <stdarg.h>

typedef struct ss_error {
  char kind[32];
  char reason[64];
  char message[1024];
  cJSON *fields; /* owned; NULL until a field is added */
} ss_error;

void ss_error_init(ss_error *e);
void ss_error_clear(ss_error *e);
int ss_error_isset(const ss_error *e);
/* Sets kind, reason (may be NULL) and a printf-style message; keeps fields already added. */
void ss_error_set(ss_error *e, const char *kind, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void ss_error_vset(ss_error *e, const char *kind, const char *reason, const char *fmt, va_list ap);
void ss_error_field_str(ss_error *e, const char *key, const char *value);
void ss_error_field_num(ss_error *e, const char *key, double value);
/* Takes ownership of item. */
void ss_error_field_item(ss_error *e, const char *key, cJSON *item);

#endif
