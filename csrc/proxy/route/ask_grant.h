#ifndef SANDSTACK_PROXY_ASK_GRANT_H
#define SANDSTACK_PROXY_ASK_GRANT_H
/* What an ask's "allow" grants a connection (ask_grant.c). Apart from ask.c, so the routes that
 * judge inside an admitted connection (inspect.c) use it without calling into the held route. */
#include "policy/policy.h"

typedef struct proxy_conn proxy_conn;

/* A connection the host allowed: a verdict refusing only its host and port becomes an admission. */
void ask_grant(const proxy_conn *c, ss_policy_verdict *v);
/* Takes c's grant back (a new policy from the host): its later checks are the rules' alone. */
void ask_grant_revoke(proxy_conn *c);

#endif
