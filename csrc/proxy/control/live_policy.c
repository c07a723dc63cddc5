/* The policy in force, replaced live. The loop is single-threaded and every decision
 * reads srv->policy once, synchronously, so a swap between two callbacks judges each request
 * wholly by the old policy or wholly by the new one. One check comes later than its decision:
 * the address exception after a CONNECT's or a forward's name is resolved (dial.c). For it, the
 * connection pins the policy that admitted it, and an old policy lives until the last connection
 * judged by it is freed. A swap then seals every connection with the new policy, as the drain
 * seals them: each route decides what it holds (a tunnel the new policy does not admit ends).
 * A swap the host asked for (set-egress) first takes back every ask's allow-once grant
 * (ask_grant.c): a grant answered a question the old policy posed, so it ends with that policy,
 * and a connection it alone admitted is judged by the new rules as any other. A swap that only
 * adds the rule an answer remembered for the session keeps them. */
#include <stdlib.h>
#include <string.h>

#include "policy/address.h"
#include "proxy/conn.h"
#include "proxy/control/live_policy.h"
#include "proxy/route/ask_grant.h"
#include "util/sha256.h"

struct policy_pin {
  ss_policy *rules;
  size_t users; /* the server (while in force) and each connection judged by it */
};

static policy_pin *pin_new(ss_policy *rules) {
  policy_pin *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->rules = rules;
  p->users = 1;
  return p;
}

static void pin_release(policy_pin *p) {
  if (!p || --p->users) return;
  ss_policy_free(p->rules);
  free(p);
}

/* The start policy needs no pin: the configuration owns it for the life of the process. */
void live_policy_init(proxy_server *s, ss_policy *start) {
  s->policy = start;
  s->policy_pin = NULL;
}

void live_policy_end(proxy_server *s) {
  pin_release(s->policy_pin);
  s->policy_pin = NULL;
  s->policy = NULL;
}

const ss_policy *policy_judge(proxy_conn *c) {
  proxy_server *s = c->srv;
  if (!c->judged_rules) {
    c->judged_rules = s->policy;
    c->judged_by = s->policy_pin;
    if (c->judged_by) c->judged_by->users++;
  }
  return s->policy;
}

const ss_policy *policy_of(const proxy_conn *c) { return c->judged_rules ? c->judged_rules : c->srv->policy; }

void policy_unpin(proxy_conn *c) {
  pin_release(c->judged_by);
  c->judged_by = NULL;
  c->judged_rules = NULL;
}

void sha256_hex(const char *text, char out[65]) { ss_sha256_hex(text, strlen(text), 32, out); }

int policy_digest(const ss_policy *p, char out[65]) {
  cJSON *r = ss_policy_render(p);
  char *text = r ? cJSON_PrintUnformatted(r) : NULL;
  cJSON_Delete(r);
  if (!text) return -1;
  sha256_hex(text, out);
  free(text);
  return 0;
}

/* Whether an established tunnel may go on under p: a plain one needs its host and port admitted
 * (and a raw one a raw rule still), an inspected one a rule naming its host and inspection still
 * on, since inspect.c judges each of its requests by the policy in force; and one connected to
 * an address in a refused range needs p to name that address still (allow_private). */
static int tunnel_still_admitted(const ss_policy *p, const proxy_conn *c) {
  const struct sockaddr *dest = (const struct sockaddr *)&c->dest;
  if (c->upstream_open && (dest->sa_family == AF_INET || dest->sa_family == AF_INET6) && ss_address_range(dest)) {
    char text[64];
    ss_address_text(dest, text, sizeof text);
    if (!ss_policy_names_address(p, text, c->port)) return 0;
  }
  ss_policy_verdict v;
  ss_policy_check(p, c->host, strlen(c->host), NULL, 0, NULL, 0, c->port, &v);
  if (c->kind == KIND_INSPECT)
    return !p->no_inspect && (v.admitted || (v.rule && (v.reason == SS_DENY_METHOD || v.reason == SS_DENY_PATH)));
  if (c->reason && strcmp(c->reason, "raw") == 0) return v.admitted && v.raw;
  return v.admitted;
}

int live_policy_seal_tunnel(proxy_conn *c, const ss_policy *next) {
  if (!next || (c->kind != KIND_CONNECT && c->kind != KIND_INSPECT)) return 0;
  /* a tunnel the host allowed when asked (ask.c) was admitted by that answer, not by a rule; a
   * swap that revokes grants has taken it back already */
  if (c->ask_granted || tunnel_still_admitted(next, c)) return 0;
  c->end = "policy_changed";
  conn_close(c);
  return 1;
}

size_t live_policy_swap(proxy_server *s, ss_policy *next, live_grants grants, char old_digest[65],
                        char new_digest[65]) {
  policy_digest(s->policy, old_digest);
  policy_digest(next, new_digest);
  policy_pin *pin = pin_new(next);
  if (!pin) { /* keep the old one and say so rather than run unpinned */
    ss_policy_free(next);
    return (size_t)-1;
  }
  pin_release(s->policy_pin);
  s->policy_pin = pin;
  s->policy = next;
  size_t closed = 0;
  for (proxy_conn *c = s->conns, *after; c; c = after) {
    after = c->next; /* conn_close never frees synchronously, but the walk does not lean on it */
    if (grants == GRANTS_REVOKE) ask_grant_revoke(c);
    if (c->state != ST_CLOSING && c->on->seal && c->on->seal(c, next)) closed++;
  }
  return closed;
}
