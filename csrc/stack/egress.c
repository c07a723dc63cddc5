/* The stack's egress policy, compiled where the plan is made: the proxy sidecar receives the
 * canonical form (ss_policy_render), the same text `policy:render()` gives in Lua, so the plan a
 * user inspects carries exactly the policy the proxy enforces. */
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"
#include "stack/model.h"

/* A Lua table arrives as cJSON; an empty `allow = {}` arrives as {} and means no rule. */
static cJSON *normalised(const cJSON *policy) {
  cJSON *copy = cJSON_Duplicate(policy, 1);
  cJSON *allow = copy ? cJSON_GetObjectItemCaseSensitive(copy, "allow") : NULL;
  if (allow && cJSON_IsObject(allow) && !allow->child)
    cJSON_ReplaceItemInObjectCaseSensitive(copy, "allow", cJSON_CreateArray());
  return copy;
}

ss_policy *ss_stack_compile_policy(const cJSON *opts, ss_error *err) {
  const cJSON *given = cJSON_GetObjectItemCaseSensitive(opts, "egress_policy");
  if (!given) return NULL;
  cJSON *root = normalised(given);
  ss_error cause;
  ss_error_init(&cause);
  ss_policy *p = root ? ss_policy_from_json(root, &cause) : NULL;
  cJSON_Delete(root);
  if (!p) {
    ss_error_set(err, "compose", "invalid_option", "egress_policy: %s",
                 cause.message[0] ? cause.message : "out of memory");
    ss_error_field_str(err, "option", "egress_policy");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "kind", cause.kind);
    if (cause.reason[0]) cJSON_AddStringToObject(c, "reason", cause.reason);
    cJSON_AddStringToObject(c, "message", cause.message);
    const cJSON *f; /* the cause's own fields (rule = n, ...) beside its kind, as on every error */
    cJSON_ArrayForEach(f, cause.fields) cJSON_AddItemToObject(c, f->string, cJSON_Duplicate(f, 1));
    ss_error_field_item(err, "cause", c);
    ss_error_clear(&cause);
    return NULL;
  }
  return p;
}

char *ss_stack_egress_policy(const cJSON *opts, ss_error *err) {
  ss_policy *p = ss_stack_compile_policy(opts, err);
  if (!p) return NULL;
  cJSON *rendered = ss_policy_render(p);
  ss_policy_free(p);
  char *text = rendered ? cJSON_PrintUnformatted(rendered) : NULL;
  cJSON_Delete(rendered);
  if (!text) ss_error_set(err, "usage", "oom", "out of memory");
  return text;
}
