#ifndef SANDSTACK_PROXY_REPLY_H
#define SANDSTACK_PROXY_REPLY_H
/* JSON answers (reply.c), then a lingering close. */
#include "policy/policy.h"

typedef struct proxy_conn proxy_conn;

void reply_error(proxy_conn *c, int status, const char *error_type, const char *message);
/* A policy refusal: 403 with {"policy":{decision, reason, rule, host, port, method, path}}. */
void reply_policy(proxy_conn *c, const char *decision, const char *reason, int rule, const char *message);
/* A refusal by a policy verdict (403): like reply_policy, and the body's "deny" object quotes the
 * rule the verdict names (its reason text too) and the rule that would admit the request. */
void reply_refused(proxy_conn *c, const ss_policy_verdict *v);
/* A refusal by a check on what a verdict's rule demands (needs_inspection): reply_policy's "deny"
 * with the verdict's rule, whose own reason text is returned too. */
void reply_refused_check(proxy_conn *c, const char *reason, const ss_policy_verdict *v, const char *message);
/* An answer about the destination (502/504) with "upstream":{"reason","host","port"} in the body. */
void reply_upstream(proxy_conn *c, int status, const char *reason, const char *message);
const char *reply_status_text(int status);

#endif
