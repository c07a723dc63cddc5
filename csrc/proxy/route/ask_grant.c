/* An ask's "allow" is a grant on the connection it held, never on the host: c->ask_granted is set
 * when that connection resumes and dies with it. It turns only a refusal for want of a rule
 * (SS_DENY_HOST) into an admission, and only for the host and port the connection was admitted
 * to: the tunnel's route judges the CONNECT with it, and inside an inspected tunnel each request
 * is judged for c->host, whose Host header and SNI are still held to that name (tunnel.c,
 * inspect.c). A rule naming the host with other methods or paths still refuses as it says. The
 * grant lasts while the policy it answered does: the host's next policy takes it back
 * (live_policy.c), so what the grant alone admitted is judged by the new rules from then on. */
#include "proxy/route/ask_grant.h"
#include "proxy/conn.h"

void ask_grant(const proxy_conn *c, ss_policy_verdict *v) {
  if (!c->ask_granted || v->admitted || v->reason != SS_DENY_HOST) return;
  v->admitted = 1;
  v->reason = SS_DENY_NONE;
  v->rule = 0;
  v->raw = 0; /* a tunnel the host allowed still starts with a ClientHello naming its host */
}

void ask_grant_revoke(proxy_conn *c) { c->ask_granted = 0; }
