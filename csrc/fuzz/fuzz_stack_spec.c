/* libFuzzer target: arbitrary JSON as stack options through validation and planning. Every
 * input must either plan or return a typed error, without crashing or leaking. */
#include <stddef.h>
#include <stdint.h>

#include "stack/stack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *end = NULL;
  cJSON *opts = cJSON_ParseWithLengthOpts((const char *)data, size, &end, 0);
  if (!opts) return 0;
  ss_error err;
  ss_error_init(&err);
  ss_stack_ctx ctx = {.session_key = "fuzz", .api_version = size % 2 ? "1.41" : "1.48", .now = 1, .token = "t"};
  cJSON *plan = ss_stack_plan(opts, &ctx, &err);
  cJSON_Delete(plan);
  ss_error_clear(&err);
  ss_stack_validate(opts, "fuzz", &err);
  ss_error_clear(&err);
  char out[64];
  const char *used[] = {"10.0.0.0/28", "junk"};
  ss_stack_pick_subnet("10.0.0.0/24", 28, used, 2, (uint32_t)size, out, sizeof out, &err);
  ss_error_clear(&err);
  cJSON_Delete(opts);
  return 0;
}
