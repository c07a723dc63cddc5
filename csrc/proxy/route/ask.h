#ifndef SANDSTACK_PROXY_ASK_H
#define SANDSTACK_PROXY_ASK_H
/* The ask hook (ask.c): under a policy with ask = true, a request no rule admits is held while
 * the host decides, instead of being refused at once. */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/policy.h"

typedef struct proxy_conn proxy_conn;
typedef struct proxy_server proxy_server;

#define ASK_MAX_PENDING 64 /* more held at once are refused as before: a flood cannot pin the proxy */
#define ASK_REASON_MAX SS_POLICY_REASON_MAX

/* Where an allowed ask goes on: the route that held it (forward_begin, tunnel_begin), called with
 * the head parsed again as if it had just been read. Handed in, so ask.c never calls a route. */
typedef void (*ask_resume_fn)(proxy_conn *c);

/* Holds c when p asks and v refuses only for want of a rule; 1 when held (the route is done with
 * it until the answer, when an allow calls resume), 0 when the caller refuses as it would
 * without asking. */
int ask_hold(proxy_conn *c, const ss_policy *p, const ss_policy_verdict *v, ask_resume_fn resume);
/* The pending asks: [{id, host, port, method, path, service, at}] (at: Unix seconds). */
cJSON *ask_list(const proxy_server *s);
/* Answers ask id. remember_session: an allow also becomes a rule of the policy in force. by and
 * reason are printable ASCII (the caller checked). Returns 0, or -1 with why (no such ask). */
int ask_answer(proxy_server *s, uint64_t id, int allow, int remember_session, const char *reason, const char *by,
               int *remembered, char *why, size_t why_len);

#endif
