/* "allow_private": the operator's opt-in, address by address, to destinations the proxy refuses
 * by default (address.h: loopback, link-local with the metadata service, RFC 1918, CGNAT, ULA
 * ...). An entry opens exactly one address, on one port or on every port, and only as the
 * destination of a name or literal that an allow rule admits; it admits nothing by itself. No
 * range is ever opened: lab networks and internal registries are named one address at a time. */
#include <stdio.h>
#include <string.h>

#include "policy/address.h"
#include "policy/policy.h"

#define USAGE                                                                                                  \
  "an address in a refused range, as inet_ntop writes it, with an optional port: '10.0.0.7', '10.0.0.7:5000', " \
  "'fd00::7', '[fd00::7]:5000'"

const char *ss_policy_private_parse(const char *s, ss_policy_private *out) {
  memset(out, 0, sizeof *out);
  size_t len = strlen(s);
  if (len >= SS_POLICY_PRIVATE_TEXT) return "too long: " USAGE;
  if (memchr(s, '/', len)) return "name one address: a range (CIDR) is never opened";
  char addr[SS_POLICY_PRIVATE_TEXT];
  const char *port = NULL;
  const char *last = strrchr(s, ':');
  if (s[0] == '[') { /* [v6]:port: the brackets only set a port apart */
    const char *close = strchr(s, ']');
    if (!close || close[1] != ':') return "'[address]' needs ':port' after it (without a port, write the address bare): " USAGE;
    snprintf(addr, sizeof addr, "%.*s", (int)(close - s - 1), s + 1);
    if (!strchr(addr, ':')) return "brackets are for IPv6 addresses only: " USAGE;
    port = close + 2;
  } else if (last && strchr(s, ':') == last) { /* one colon: IPv4 and a port */
    snprintf(addr, sizeof addr, "%.*s", (int)(last - s), s);
    port = last + 1;
  } else {
    snprintf(addr, sizeof addr, "%s", s);
  }
  struct sockaddr_storage sa;
  if (strlen(addr) >= sizeof out->address || ss_address_parse(addr, &sa) != 0) return USAGE;
  if (port) {
    const char *why = ss_port_text(port, strlen(port), &out->port);
    if (why) return why;
  }
  const char *range = ss_address_range((const struct sockaddr *)&sa);
  if (!range) return "not in a refused range: an allow rule reaches it without allow_private";
  if (!strcmp(range, "unspecified") || !strcmp(range, "this_network") || !strcmp(range, "multicast"))
    return "not a destination (0.0.0.0/8 and '::' stand for the proxy's own host; multicast is no single peer)";
  memcpy(out->address, addr, strlen(addr) + 1); /* canonical, so it fits (INET6_ADDRSTRLEN) */
  return NULL;
}

void ss_policy_private_text(const ss_policy_private *e, char *out, size_t cap) {
  int v6 = strchr(e->address, ':') != NULL;
  if (!e->port) snprintf(out, cap, "%s", e->address);
  else snprintf(out, cap, v6 ? "[%s]:%d" : "%s:%d", e->address, e->port);
}
