/* Reaching the destination: the proxy resolves the name itself, refuses every address in a
 * range the sandbox must not reach (policy/address.c) unless the policy names that address (its
 * allow_private, or a rule naming the literal on this port), and
 * connects to the very address it checked, so the answer cannot change between check and use
 * (DNS rebinding). One deadline covers resolving and connecting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/address.h"
#include "proxy/conn.h"
#include "proxy/route/dial.h"
#include "proxy/control/live_policy.h"
#include "proxy/route/reply.h"

static void on_connected(uv_connect_t *req, int status) {
  proxy_conn *c = req->data;
  if (c->state == ST_DIAL) {
    if (status < 0) {
      char msg[400];
      snprintf(msg, sizeof msg, "cannot connect to %s (%s) port %d: %s", c->host, c->address, c->port, uv_strerror(status));
      c->decision = "upstream_error";
      c->reason = "connect_failed";
      reply_error(c, 502, "api_error", msg);
    } else {
      uv_tcp_nodelay(&c->upstream, 1);
      c->on_connected(c);
    }
  }
  conn_release(c);
}

static void connect_to(proxy_conn *c, const struct sockaddr *sa) {
  memcpy(&c->dest, sa, sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
  ((struct sockaddr_in *)&c->dest)->sin_port = htons((uint16_t)c->port); /* same offset in sockaddr_in6 */
  uv_tcp_init(c->srv->loop, &c->upstream);
  c->upstream.data = c;
  c->upstream_open = 1;
  conn_hold(c); /* the upstream handle */
  c->connect_req.data = c;
  int rc = uv_tcp_connect(&c->connect_req, &c->upstream, (struct sockaddr *)&c->dest, on_connected);
  if (rc != 0) {
    c->decision = "upstream_error";
    c->reason = "connect_failed";
    return reply_error(c, 502, "api_error", uv_strerror(rc));
  }
  conn_hold(c); /* the connect request */
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  proxy_conn *c = req->data;
  c->gai_pending = 0;
  if (c->state == ST_DIAL) {
    const struct sockaddr *chosen = NULL;
    if (status < 0 || !res) {
      char msg[400];
      snprintf(msg, sizeof msg, "cannot resolve %s: %s", c->host, uv_strerror(status));
      c->decision = "upstream_error";
      c->reason = "resolve_failed";
      reply_error(c, 502, "api_error", msg);
    } else {
      /* every address the name has must be acceptable: a name that also points inward is refused */
      for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
        char text[64];
        ss_address_text(ai->ai_addr, text, sizeof text);
        const char *range = ss_address_range(ai->ai_addr);
        /* the policy that admitted the name judges its address too (one policy per connection);
           a later swap that stops naming the address closes the tunnel (live_policy.c) */
        if (range && !ss_policy_names_address(policy_of(c), text, c->port)) {
          char msg[700];
          snprintf(c->address, sizeof c->address, "%s", text);
          int v6 = strchr(text, ':') != NULL;
          snprintf(msg, sizeof msg,
                   "%s resolves to %s (%s), which the proxy does not connect to unless the policy names that "
                   "address: allow_private = { \"%s%s%s:%d\" } (or a rule naming it on port %d)",
                   c->host, text, range, v6 ? "[" : "", text, v6 ? "]" : "", c->port, c->port);
          c->security_event = "address_refused";
          reply_policy(c, "address_refused", range, 0, msg);
          chosen = NULL;
          break;
        }
        /* IPv4 first: a sidecar network has IPv4 (sandstack creates no IPv6 networks) */
        if (!chosen || (chosen->sa_family != AF_INET && ai->ai_family == AF_INET)) {
          chosen = ai->ai_addr;
          snprintf(c->address, sizeof c->address, "%s", text);
        }
      }
      if (chosen) connect_to(c, chosen);
      else if (c->state == ST_DIAL) reply_error(c, 502, "api_error", "the name has no IPv4 or IPv6 address");
    }
  }
  if (res) uv_freeaddrinfo(res);
  conn_release(c);
}

static void dial_deadline(proxy_conn *c) {
  c->decision = "upstream_error";
  c->reason = "connect_timeout";
  reply_error(c, 504, "api_error", "the destination did not accept the connection in time");
}

/* While the name resolves and the connection is made: the client is not read, the connect deadline. */
static const conn_handlers dialing = {.deadline = dial_deadline, .seal = live_policy_seal_tunnel};

void dial_start(proxy_conn *c, void (*cb)(proxy_conn *c)) {
  conn_enter(c, ST_DIAL, &dialing);
  c->on_connected = cb;
  conn_set_deadline(c, c->srv->cfg->connect_ms);
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  c->gai.data = c;
  int rc = uv_getaddrinfo(c->srv->loop, &c->gai, on_resolved, c->host, NULL, &hints);
  if (rc != 0) {
    c->decision = "upstream_error";
    return reply_error(c, 502, "api_error", uv_strerror(rc));
  }
  c->gai_pending = 1;
  conn_hold(c);
}
