#ifndef SANDSTACK_PROXY_LIVE_POLICY_H
#define SANDSTACK_PROXY_LIVE_POLICY_H
/* The swappable policy (live_policy.c). */
#include <stddef.h>

#include "policy/policy.h"

typedef struct proxy_conn proxy_conn;
typedef struct proxy_server proxy_server;

void live_policy_init(proxy_server *s, ss_policy *start); /* start stays owned by the config */
void live_policy_end(proxy_server *s);
/* The policy in force, pinned to c so the checks after its resolve use the same one. */
const ss_policy *policy_judge(proxy_conn *c);
/* The policy that admitted c (its pin), else the one in force. */
const ss_policy *policy_of(const proxy_conn *c);
void policy_unpin(proxy_conn *c);
/* sha256 of the canonical render (ss_policy_render), lowercase hex; never holds a secret. */
int policy_digest(const ss_policy *p, char out[65]);
void sha256_hex(const char *text, char out[65]); /* of a NUL-terminated text, lowercase hex */
/* The seal of the routes a tunnel passes through (dial, hello, relay, inspect): under next, a
 * tunnel or inspected connection it does not admit ends as "policy_changed" (1); a forward on the
 * same routes, a tunnel the host allowed when asked (a grant the swap kept), and the drain (next
 * NULL) go on (0). */
int live_policy_seal_tunnel(proxy_conn *c, const ss_policy *next);
/* What a swap does with the asks' allow-once grants: the host's new policy (set-egress) takes
 * them back, the rule an answer remembered for the session (ask.c) keeps them. */
typedef enum { GRANTS_KEEP, GRANTS_REVOKE } live_grants;
/* Takes next (owned from now on) as the policy in force and seals every connection with it (its
 * route's seal), after taking back every grant when grants is GRANTS_REVOKE: the tunnels and
 * inspected connections it does not admit end ("policy_changed"; control.c writes the audit
 * line). Returns the number closed; old_digest/new_digest get the two digests. */
size_t live_policy_swap(proxy_server *s, ss_policy *next, live_grants grants, char old_digest[65],
                        char new_digest[65]);

#endif
