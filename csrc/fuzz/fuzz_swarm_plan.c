/* libFuzzer target: arbitrary JSON as stack options through the Swarm plan (csrc/stack/swarm_*.c),
 * whose tmpfs options, mounts and networks come from the options. Every input must either plan or
 * return a typed error, without crashing or leaking. The first byte picks the node id and the
 * constraints, so the pinned plan is reached too. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "stack/swarm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  cJSON *opts = cJSON_ParseWithLengthOpts((const char *)data + 1, size - 1, NULL, 0);
  if (!opts) return 0;
  ss_stack_model *m = calloc(1, sizeof *m);
  ss_error err;
  ss_error_init(&err);
  if (m && ss_stack_model_build(opts, "fuzz", m, &err) == 0) {
    ss_stack_ctx ctx = {.session_key = "fuzz", .api_version = data[0] & 1 ? "1.41" : "1.48", .now = 1, .token = "t",
                        .run_label = "r", .redact_secrets = data[0] & 2};
    const char *cons[] = {"node.role==worker"};
    cJSON *constraints = data[0] & 4 ? cJSON_CreateStringArray(cons, 1) : NULL;
    ss_swarm_ctx sw = {.constraints = constraints, .node_id = data[0] & 8 ? "abc123" : data[0] & 16 ? "a b" : NULL};
    cJSON *plan = ss_swarm_plan(m, &ctx, &sw, &err);
    cJSON_Delete(plan);
    cJSON_Delete(constraints);
  }
  ss_error_clear(&err);
  free(m);
  cJSON_Delete(opts);
  return 0;
}
