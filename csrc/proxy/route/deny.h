#ifndef SANDSTACK_PROXY_DENY_H
#define SANDSTACK_PROXY_DENY_H
/* What a refusal tells the client (docs/proxy.md, "Refusals an agent can read"): a short code,
 * which rule or check refused, and what the user could allow or change. reply.c puts it in the
 * JSON body's "deny" object, in the X-Sandstack-Deny-Reason header and in the status line's
 * reason phrase (the one place some clients surface for a refused CONNECT). */
#include <cjson/cJSON.h>
#include <stddef.h>

#include "policy/policy.h"

typedef struct proxy_conn proxy_conn;

#define DENY_TEXT_MAX 700

typedef struct deny_note {
  const char *code;          /* a token: host, method, path, needs_inspection, raw_refused... */
  char why[DENY_TEXT_MAX];   /* which rule or check refused, in words */
  char hint[DENY_TEXT_MAX];  /* what the user could allow or change ("" when nothing) */
  int rule;                  /* the rule the refusal names (1-based), 0 none */
  const char *rule_reason;   /* that rule's own `reason` text, as the policy gives it, or NULL */
} deny_note;

/* A policy verdict's refusal: why names the rule and what it admits, hint the rule to add or the
 * change to make to the named rule (as a Lua table, the way a policy is written). */
void deny_from_verdict(const proxy_conn *c, const ss_policy_verdict *v, deny_note *d);
/* A refusal by a check (reply_policy with a decision/reason, reply_error with a status). */
void deny_from_check(const proxy_conn *c, const char *decision, const char *reason, deny_note *d);
void deny_from_status(const proxy_conn *c, int status, deny_note *d);
/* The "deny" object: code, what {route, host, port, method, path}, why, allow_hint, rule,
 * rule_reason, security_event. */
void deny_attach(const proxy_conn *c, const deny_note *d, cJSON *body);
/* "code; text" with only printable ASCII, at most cap - 1 bytes (text: the rule's reason when it
 * has one, else why). Safe for a header value and a reason phrase. */
void deny_header_text(const deny_note *d, char *out, size_t cap);

#endif
